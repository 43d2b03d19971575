//! What a run measured: per job, per run, the streams' random factors and
//! LiU's totals.

use super::*;

/// What one job saw.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct JobResult {
    /// The job's name.
    pub name: String,
    /// Bytes the job wrote and read.
    pub bytes: u64,
    /// When its processes started.
    pub start_ns: u64,
    /// When its last process finished.
    pub end_ns: u64,
    /// Every barrier release of the job, in order (reports measure a
    /// phase of a job from one of them).
    #[serde(skip)]
    pub barriers: Vec<Mark>,
    /// The disks' totals when the last process finished.
    #[serde(skip)]
    pub end_mark: Mark,
    /// Every read piece of the job: (done, latency at the I/O node), ns.
    #[serde(skip)]
    pub read_latencies: Vec<(u64, u64)>,
}

/// A point in a job's run with the I/O nodes' disk totals at that time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Mark {
    /// Virtual time.
    pub ns: u64,
    /// Sum over the I/O nodes of the disks' seek distances so far.
    pub seek_bytes: u64,
    /// Sum over the I/O nodes of the disks' services so far.
    pub services: u64,
}

impl JobResult {
    /// Bytes per second over the job's elapsed time, in MB/s (10^6 bytes).
    pub fn throughput_mb_s(&self) -> f64 {
        let seconds = (self.end_ns.saturating_sub(self.start_ns)) as f64 / 1e9;
        if seconds <= 0.0 {
            return 0.0;
        }
        self.bytes as f64 / 1e6 / seconds
    }

    /// Elapsed seconds.
    pub fn seconds(&self) -> f64 {
        (self.end_ns.saturating_sub(self.start_ns)) as f64 / 1e9
    }
}

/// One stream as an I/O node's detector saw it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct StreamPoint {
    /// I/O node.
    pub server: u32,
    /// Random percentage of the stream.
    pub percentage: f64,
    /// Threshold it was judged against.
    pub threshold: f64,
    /// Whether the stream's requests went to the SSD.
    pub buffered: bool,
}

/// Totals of a run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RunResult {
    /// The system simulated.
    pub system: System,
    /// Per job, in input order.
    pub jobs: Vec<JobResult>,
    /// Foreground bytes written (all jobs).
    pub bytes_written: u64,
    /// Foreground bytes appended to the SSD log (routed there, or forced
    /// there by the overlap rule: `forced_to_log_bytes`).
    pub fast_bytes: u64,
    /// Foreground bytes written straight to the HDD.
    pub capacity_bytes: u64,
    /// Part of `capacity_bytes` that was routed to the SSD but found it full
    /// (or waited too long) and went through to the HDD.
    pub write_through_bytes: u64,
    /// Part of `fast_bytes` that was routed to the HDD but overlapped
    /// buffered bytes, so it went to the log (the write buffer's overlap
    /// rule).
    pub forced_to_log_bytes: u64,
    /// `fast_bytes` per file, in file order (files with none left out).
    #[serde(skip)]
    pub fast_bytes_by_file: Vec<(FileId, u64)>,
    /// Bytes flushed from the SSD to the HDD before the run ended.
    pub flushed_bytes: u64,
    /// Bytes still buffered when the last process finished.
    pub buffered_at_end_bytes: u64,
    /// Writers that had to wait for a free region.
    pub waits: u64,
    /// Regions flushed.
    pub regions_flushed: u64,
    /// Every completed stream at every I/O node.
    pub streams: Vec<StreamPoint>,
    /// Requests merged by the HDD schedulers.
    pub hdd_requests_merged: u64,
    /// Pieces that timed out at a switch port (`ClusterConfig::incast`).
    pub incast_timeouts: u64,
    /// Simulated events.
    pub events: u64,
    /// Virtual time at the end.
    pub end_ns: u64,
    /// LiU's counters summed over the I/O nodes (`None` without LiU).
    #[serde(skip)]
    pub liu: Option<LiuCounters>,
}

impl RunResult {
    /// Fraction of the written bytes that went to the SSD.
    pub fn fast_fraction(&self) -> f64 {
        if self.bytes_written == 0 {
            return 0.0;
        }
        self.fast_bytes as f64 / self.bytes_written as f64
    }

    /// Bytes of all jobs over the span from the first start to the last end,
    /// in MB/s.
    pub fn aggregate_mb_s(&self) -> f64 {
        let start = self.jobs.iter().map(|j| j.start_ns).min().unwrap_or(0);
        let end = self.jobs.iter().map(|j| j.end_ns).max().unwrap_or(0);
        let seconds = end.saturating_sub(start) as f64 / 1e9;
        if seconds <= 0.0 {
            return 0.0;
        }
        self.bytes_written as f64 / 1e6 / seconds
    }
}
