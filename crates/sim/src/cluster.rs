//! The simulated cluster of the SSDUP+ evaluation (seed 002 §3.1).
//!
//! Clients run the processes of [`Job`]s as closed loops: a process issues
//! its next op when every piece of the previous one is acknowledged. Files
//! are striped over the I/O nodes (OrangeFS: `stripe_bytes` round robin); a
//! request becomes one piece per I/O node it touches, with a contiguous
//! server-local range. A piece crosses its client's link, then the I/O
//! node's link (both FIFO, Gigabit by default), and reaches the I/O node.
//!
//! Each I/O node has an HDD (C-LOOK queue of `queue_depth`) and an SSD, and
//! runs one of five systems, all built from the policy crate's objects (the
//! paper's four, then sluice's own):
//! * `orangefs` — every write to the HDD (the baseline);
//! * `orangefs-bb` — every write to the SSD, one region, flushed as soon as
//!   it is full, writes go through to the HDD while it flushes (the
//!   conventional burst buffer);
//! * `ssdup` — static water marks, two regions, flush at once, writers wait
//!   for a free region;
//! * `ssdup+` — adaptive threshold, two regions, the traffic-aware flush
//!   gate, writers wait for a free region;
//! * `sluice` — policy `cost` (per file, by predicted device time;
//!   docs/policy.md) with its model taken from the simulated devices
//!   ([`cost_model`]), otherwise as `ssdup+`: two regions, the
//!   traffic-aware flush gate, writers wait.
//!
//! Each I/O node drives one [`WriteBuffer`] (the same object as the engine):
//! it routes every write piece, places it in the SSD log, on the HDD or
//! makes it wait, and says which region to flush. The baseline's buffer
//! routes everything to the HDD (`capacity-only`), so its log stays empty.
//! A write over buffered bytes goes to the log whatever its route (the
//! write buffer's overlap rule), waiting for room if the log is full.
//!
//! The detector sees server-local offsets, as in the paper's OrangeFS
//! server. Buffered writes are appended to the region log on the SSD and
//! indexed; the flusher reads merged runs back from the SSD and writes them
//! to the HDD through the same elevator queue as foreground writes, which is
//! where flushing and foreground traffic interfere.
//!
//! The simulation ends when the last process finishes: throughput is what
//! the application sees, as in the paper; bytes still buffered are reported.
//!
//! INVARIANT: every piece is acknowledged exactly once; a process has at
//! most one op outstanding.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;
use std::time::Duration;

use serde::Serialize;
use sluice_devices::hdd::{Hdd, HddConfig, HddRequest};
use sluice_devices::link::{Link, LinkConfig};
use sluice_devices::ssd::{Ssd, SsdConfig};
use sluice_devices::IoKind;
use sluice_policy::cost::CostModel;
use sluice_policy::detector::DetectorConfig;
use sluice_policy::extent_index::Extent;
use sluice_policy::flush_gate::{FlushGateConfig, GateDecision};
use sluice_policy::pipeline::{PipelineConfig, WhenFull};
use sluice_policy::redirector::{RedirectPolicy, RedirectorConfig};
use sluice_policy::segments::{Action, LiuConfig, LiuCounters, SegmentBuffer, SegmentKey, Serve};
use sluice_policy::threshold::ThresholdConfig;
use sluice_policy::write_buffer::{
    FlushPoll, FlushRunRef, Placement, WriteBuffer, WriteBufferConfig, WriteBufferCounters,
};
use sluice_policy::{FileId, LogLocation, RegionId, Tier, Time, WriteRequest};

use crate::event::EventQueue;
use crate::rng::SimRng;
use crate::workload::{Job, Op};

const KIB: u64 = 1024;
const GIB: u64 = 1024 * 1024 * 1024;

/// The storage system an I/O node runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum System {
    /// Unmodified OrangeFS: every write to the HDD.
    Baseline,
    /// OrangeFS-BB: every write to the SSD, one region.
    BurstBuffer,
    /// SSDUP: static water marks, two regions, immediate flush.
    Ssdup,
    /// SSDUP+: adaptive threshold, two regions, traffic-aware flush.
    SsdupPlus,
    /// sluice: policy `cost` with the simulated devices' model
    /// ([`cost_model`]), two regions, traffic-aware flush (as SSDUP+).
    SluiceCost,
}

impl System {
    /// All five, in report order: the paper's four, then sluice.
    pub const ALL: [System; 5] = [
        System::Baseline,
        System::BurstBuffer,
        System::Ssdup,
        System::SsdupPlus,
        System::SluiceCost,
    ];

    /// Name in reports (the paper's names; `sluice` for sluice's own).
    pub fn name(self) -> &'static str {
        match self {
            System::Baseline => "OrangeFS",
            System::BurstBuffer => "OrangeFS-BB",
            System::Ssdup => "SSDUP",
            System::SsdupPlus => "SSDUP+",
            System::SluiceCost => "sluice",
        }
    }

    /// The placement policy of the system on `config`'s devices.
    pub fn policy(self, config: &ClusterConfig) -> RedirectPolicy {
        match self {
            System::Baseline => RedirectPolicy::CapacityOnly,
            System::BurstBuffer => RedirectPolicy::FastAll,
            System::Ssdup => RedirectPolicy::ALL[2],
            System::SsdupPlus => RedirectPolicy::SsdupPlus,
            System::SluiceCost => RedirectPolicy::Cost(cost_model(&config.hdd, &config.ssd)),
        }
    }

    /// Whether the flusher waits for the traffic-aware gate
    /// ([`WriteBuffer::poll_flush`]); the others flush a full region at
    /// once.
    pub fn traffic_aware(self) -> bool {
        matches!(self, System::SsdupPlus | System::SluiceCost)
    }
}

/// The `cost` policy's model for these devices (docs/policy.md): `t_seek`
/// is the HDD's short seek, a track-to-track seek plus half a revolution
/// (seeks within one file are short; the mean rotational delay of the
/// model's uniform rotation); `B_fast` and `t_fast` are the SSD's write
/// bandwidth and per-request latency (one request is served by one
/// channel). Hysteresis and evidence are the policy's defaults. The
/// default devices give [`CostModel::EMULATED`]'s figures (5.17 ms,
/// 250 MB/s, 60 µs).
///
/// A free function, not `CostModel::from_devices`: the policy crate owns
/// `CostModel` and must not depend on the device models.
pub fn cost_model(hdd: &HddConfig, ssd: &SsdConfig) -> CostModel {
    let half_revolution_ms = if hdd.rpm == 0 {
        0.0
    } else {
        30_000.0 / f64::from(hdd.rpm)
    };
    let seek_s = (hdd.seek_track_ms + half_revolution_ms) / 1e3;
    CostModel {
        // A device model out of range is refused by its own validation.
        capacity_seek: Duration::try_from_secs_f64(seek_s).unwrap_or(Duration::ZERO),
        fast_bytes_per_s: ssd.write_bytes_per_s,
        fast_request: ssd.latency,
        ..CostModel::EMULATED
    }
}

impl fmt::Display for System {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Shape and parameters of the simulated cluster. Defaults follow the
/// SSDUP+ testbed: 8 clients, 2 I/O nodes, Gigabit Ethernet, a 300 GB
/// 7200 rpm disk with a 128-deep CFQ-like queue and a 250 MB/s SSD per I/O
/// node, 64 KiB stripes.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterConfig {
    /// Compute nodes; processes are placed on them round robin.
    pub clients: u32,
    /// I/O nodes; files are striped over them.
    pub servers: u32,
    /// Stripe size of the file layout.
    pub stripe_bytes: u64,
    /// Each client's network link.
    pub client_link: LinkConfig,
    /// Each I/O node's network link.
    pub server_link: LinkConfig,
    /// Each I/O node's disk.
    pub hdd: HddConfig,
    /// Each I/O node's SSD.
    pub ssd: SsdConfig,
    /// SSD bytes per I/O node given to the buffer (all regions together).
    pub fast_bytes_per_server: u64,
    /// Dirty page-cache bytes per I/O node: writes to the HDD are
    /// acknowledged once cached and written back through the disk's queue,
    /// which is what fills the scheduler queue. 0 = synchronous writes.
    pub dirty_limit_bytes: u64,
    /// Regions of SSDUP and SSDUP+ (OrangeFS-BB always uses one).
    pub regions: u32,
    /// Requests per stream of the detector.
    pub stream_len: u32,
    /// Adaptive threshold parameters of SSDUP+.
    pub threshold: ThresholdConfig,
    /// Capacity-idle time after which SSDUP+'s gate lets a flush proceed.
    pub flush_idle: Duration,
    /// Largest merged write of a flush.
    pub flush_run_max_bytes: u64,
    /// Flush runs in flight per I/O node.
    pub flush_depth: u32,
    /// Mean client-side time between a process's ops (MPI and OS work),
    /// drawn from an exponential distribution per op. The jitter lets
    /// processes drift apart as real ones do; 0 = perfect lockstep.
    pub client_overhead_mean: Duration,
    /// Seed of every random choice (disk rotation, client jitter).
    pub seed: u64,
    /// LiU's segment layer on every I/O node's read path (seed 001): `None`
    /// serves each read piece from the HDD as it comes (the baseline).
    pub liu: Option<LiuConfig>,
    /// Sections a segment body is read in (LiU's default 4).
    pub liu_sections: u32,
    /// Page-cache read-ahead of the I/O nodes without LiU: a read piece
    /// that starts less than this past the end of the previous read of its
    /// file on that node (a sequential reader; concurrent pieces arrive out
    /// of order) fetches this much from its start; later pieces inside the
    /// window are served from memory. 0 = off.
    pub read_ahead_bytes: u64,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            clients: 8,
            servers: 2,
            stripe_bytes: 64 * KIB,
            client_link: LinkConfig::default(),
            server_link: LinkConfig::default(),
            hdd: HddConfig::default(),
            ssd: SsdConfig::default(),
            fast_bytes_per_server: 120 * GIB,
            // ~12% of the testbed I/O nodes' 8 GB RAM (Linux dirty_ratio
            // defaults to 10-20%).
            dirty_limit_bytes: GIB,
            regions: 2,
            stream_len: 128,
            threshold: ThresholdConfig::default(),
            flush_idle: Duration::from_millis(200),
            flush_run_max_bytes: 1024 * KIB,
            flush_depth: 2,
            client_overhead_mean: Duration::from_micros(200),
            seed: 1,
            liu: None,
            liu_sections: 4,
            read_ahead_bytes: 512 * KIB,
        }
    }
}

/// A simulation that cannot run: bad parameters or a workload that cannot
/// finish.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimError(pub String);

impl fmt::Display for SimError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SimError {}

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
    /// Simulated events.
    pub events: u64,
    /// Virtual time at the end.
    pub end_ns: u64,
    /// LiU's counters summed over the I/O nodes (`None` without LiU).
    pub liu: Option<LiuTotals>,
}

/// [`LiuCounters`] summed over the I/O nodes, for reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct LiuTotals {
    /// Reads of segments in the buffer.
    pub buffer_hits: u64,
    /// Loads with the head from the SSD.
    pub lifted_loads: u64,
    /// Loads of whole segments from the HDD.
    pub whole_loads: u64,
    /// Direct reads from a lifted head.
    pub head_reads: u64,
    /// Direct reads from the HDD.
    pub capacity_reads: u64,
    /// Heads lifted.
    pub lifts: u64,
    /// Heads de-lifted.
    pub delifts: u64,
    /// Recorded localities in tenths (bucket 10 = 1.0).
    pub locality_histogram: [u64; 11],
}

impl LiuTotals {
    fn add(&mut self, c: &LiuCounters) {
        self.buffer_hits += c.buffer_hits;
        self.lifted_loads += c.lifted_loads;
        self.whole_loads += c.whole_loads;
        self.head_reads += c.head_reads;
        self.capacity_reads += c.capacity_reads;
        self.lifts += c.lifts;
        self.delifts += c.delifts;
        for (t, c) in self.locality_histogram.iter_mut().zip(c.locality_histogram) {
            *t += c;
        }
    }
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

/// Simulate `jobs` on the cluster running `system`.
pub fn simulate(
    config: &ClusterConfig,
    system: System,
    jobs: &[Job],
) -> Result<RunResult, SimError> {
    let mut sim = Sim::new(config, system, jobs)?;
    sim.run()?;
    Ok(sim.finish())
}

#[derive(Debug)]
enum Event {
    Start {
        job: u32,
    },
    Next {
        process: u32,
    },
    Issue {
        process: u32,
    },
    AtSwitch {
        piece: u32,
    },
    AtServer {
        piece: u32,
    },
    Acked {
        piece: u32,
    },
    SsdDone {
        piece: u32,
    },
    HddDone {
        server: u32,
    },
    FlushRead {
        server: u32,
        file: FileId,
        offset: u64,
        len: u64,
    },
    LiuSsdDone {
        server: u32,
        what: LiuSsd,
    },
    Retry {
        server: u32,
    },
    GateRecheck {
        server: u32,
    },
}

#[derive(Clone, Copy, Debug)]
struct Piece {
    process: u32,
    server: u32,
    kind: IoKind,
    file: FileId,
    /// Server-local offset.
    offset: u64,
    len: u64,
    /// The tier the I/O node's redirector routed a write to (decided once,
    /// kept across retries).
    route: Tier,
    waiting_since: Option<Time>,
    /// When it reached its I/O node.
    arrived: Time,
    /// Parts still outstanding (a LiU read spanning segments has several).
    parts: u32,
}

struct Process<'a> {
    job: u32,
    ops: &'a [Op],
    next: usize,
    client: u32,
    outstanding: u32,
    rng: SimRng,
}

struct JobState {
    processes: u32,
    remaining: u32,
    barrier_waiting: Vec<u32>,
    bytes: u64,
    start: Time,
    end: Time,
    barriers: Vec<Mark>,
    end_mark: Mark,
    read_latencies: Vec<(u64, u64)>,
}

/// Who is told when an HDD request completes.
#[derive(Clone, Copy, Debug)]
enum Owner {
    /// A synchronous piece (a read, or a write with no write-back cache):
    /// acknowledge it.
    Piece(u32),
    /// A flush run written synchronously: the flusher may go on.
    Flush { len: u64 },
    /// Cached bytes written back: free them from the dirty budget.
    Dirty { len: u64 },
    /// Part `part` of LiU segment load `load` (0 = head, k = section k).
    LiuPart { load: u64, part: u32 },
    /// A read served from the HDD: one part of the piece.
    ReadPart { piece: u32 },
    /// A read-ahead window of the page cache arrived.
    ReadAhead { file: FileId, window: u64 },
}

/// What a LiU SSD request was for.
#[derive(Clone, Copy, Debug)]
enum LiuSsd {
    /// The head of load `load` arrived from the SSD.
    Head { load: u64 },
    /// A read of a lifted head: one part of the piece.
    Direct { piece: u32 },
    /// A head copy to the SSD finished.
    Lifted { key: SegmentKey },
}

/// Read-ahead windows (of [`ClusterConfig::read_ahead_bytes`]) one file's
/// page cache keeps behind its frontier.
const CACHED_WINDOWS: u64 = 8;

/// One file's read-ahead on an I/O node: cached `[lo, hi)`, windows in
/// flight.
#[derive(Default)]
struct PageCache {
    lo: u64,
    hi: u64,
    last_end: u64,
    inflight: Vec<Window>,
}

/// A read-ahead window being read from the disk, and the pieces waiting
/// for it.
struct Window {
    id: u64,
    from: u64,
    stop: u64,
    waiters: Vec<u32>,
}

/// A segment being loaded into (or held in) an I/O node's LiU buffer.
struct Load {
    /// Head, then the body sections.
    ready: Vec<bool>,
    /// Piece parts waiting: (piece, start, end) inside the segment.
    waiters: Vec<(u32, u64, u64)>,
    /// Left the buffer (evicted or invalidated); kept until its parts land.
    evicted: bool,
}

/// LiU's state on one I/O node: the policy and the loads it holds.
struct LiuNode {
    buffer: SegmentBuffer,
    /// The load holding each regular segment's data.
    current: HashMap<SegmentKey, u64>,
    loads: HashMap<u64, Load>,
    next_load: u64,
}

/// A write waiting for room in the dirty budget.
#[derive(Clone, Copy, Debug)]
enum DirtyWaiter {
    Piece(u32, HddRequest),
    Flush(HddRequest),
}

#[derive(Default)]
struct FlushState {
    region: Option<RegionId>,
    runs: VecDeque<FlushRunRef>,
    in_flight: u32,
}

struct Server {
    link: Link,
    hdd: Hdd,
    ssd: Ssd,
    /// Routing, the SSD log's regions and index, and the flush gate.
    buffer: WriteBuffer,
    /// Whether flushing waits for the gate (SSDUP+, sluice); the other
    /// systems flush a region as soon as it is full.
    traffic_aware: bool,
    hdd_owner: HashMap<u64, Owner>,
    hdd_backlog: VecDeque<HddRequest>,
    dirty_bytes: u64,
    dirty_waiters: VecDeque<DirtyWaiter>,
    hdd_current: Vec<HddRequest>,
    next_hdd_id: u64,
    waiting: VecDeque<u32>,
    retry_at: Option<Time>,
    recheck_at: Option<Time>,
    flush: FlushState,
    liu: Option<LiuNode>,
    /// Per file: the page cache's read-ahead state.
    read_ahead: HashMap<FileId, PageCache>,
    next_window: u64,
}

struct Sim<'a> {
    config: &'a ClusterConfig,
    system: System,
    queue: EventQueue<Event>,
    clients: Vec<Link>,
    servers: Vec<Server>,
    processes: Vec<Process<'a>>,
    jobs: Vec<JobState>,
    job_names: Vec<String>,
    job_start_after: Vec<Duration>,
    jobs_remaining: usize,
    pieces: Vec<Piece>,
    free_pieces: Vec<u32>,
    /// Disk offset of each file's object (the same on every I/O node).
    object_base: HashMap<FileId, u64>,
    flushed_bytes: u64,
    streams: Vec<StreamPoint>,
    bytes_written: u64,
    /// Bytes appended to the SSD logs per file.
    fast_bytes_by_file: BTreeMap<FileId, u64>,
}

impl<'a> Sim<'a> {
    fn new(
        config: &'a ClusterConfig,
        system: System,
        jobs: &'a [Job],
    ) -> Result<Sim<'a>, SimError> {
        if config.clients == 0 || config.servers == 0 || config.stripe_bytes == 0 {
            return Err(SimError(
                "the cluster needs at least one client, one I/O node and a stripe size above 0"
                    .into(),
            ));
        }
        if config.flush_depth == 0 || config.flush_run_max_bytes == 0 {
            return Err(SimError(
                "flush_depth and flush_run_max_bytes must be above 0".into(),
            ));
        }
        let device = |e: sluice_devices::DeviceConfigError| SimError(e.to_string());
        let mut servers = Vec::with_capacity(config.servers as usize);
        for s in 0..config.servers {
            // The devices first: sluice's policy is built from their models.
            let link = Link::new(config.server_link.clone()).map_err(device)?;
            let hdd = Hdd::new(config.hdd.clone(), config.seed.wrapping_add(u64::from(s)))
                .map_err(device)?;
            let ssd = Ssd::new(config.ssd.clone()).map_err(device)?;
            let buffer = WriteBuffer::new(buffer_config(config, system))
                .map_err(|e| SimError(e.to_string()))?;
            servers.push(Server {
                link,
                hdd,
                ssd,
                buffer,
                traffic_aware: system.traffic_aware(),
                hdd_owner: HashMap::new(),
                hdd_backlog: VecDeque::new(),
                dirty_bytes: 0,
                dirty_waiters: VecDeque::new(),
                hdd_current: Vec::new(),
                next_hdd_id: 0,
                waiting: VecDeque::new(),
                retry_at: None,
                recheck_at: None,
                flush: FlushState::default(),
                read_ahead: HashMap::new(),
                next_window: 0,
                liu: match config.liu {
                    None => None,
                    Some(liu) => Some(LiuNode {
                        buffer: SegmentBuffer::new(liu).map_err(|e| SimError(e.to_string()))?,
                        current: HashMap::new(),
                        loads: HashMap::new(),
                        next_load: 0,
                    }),
                },
            });
        }
        let clients = (0..config.clients)
            .map(|_| Link::new(config.client_link.clone()).map_err(device))
            .collect::<Result<Vec<_>, _>>()?;

        let mut processes = Vec::new();
        let mut job_states = Vec::new();
        for (j, job) in jobs.iter().enumerate() {
            for ops in &job.processes {
                processes.push(Process {
                    job: j as u32,
                    ops,
                    next: 0,
                    client: processes.len() as u32 % config.clients,
                    outstanding: 0,
                    rng: SimRng::new(
                        config.seed ^ (processes.len() as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15),
                    ),
                });
            }
            job_states.push(JobState {
                processes: job.processes.len() as u32,
                remaining: job.processes.len() as u32,
                barrier_waiting: Vec::new(),
                bytes: job.bytes_written().saturating_add(job.bytes_read()),
                start: Time::ZERO,
                end: Time::ZERO,
                barriers: Vec::new(),
                end_mark: Mark::default(),
                read_latencies: Vec::new(),
            });
        }
        let object_base = layout_objects(config, jobs)?;
        Ok(Sim {
            config,
            system,
            queue: EventQueue::new(),
            clients,
            servers,
            processes,
            jobs: job_states,
            job_names: jobs.iter().map(|j| j.name.clone()).collect(),
            job_start_after: jobs.iter().map(|j| j.start_after).collect(),
            jobs_remaining: jobs.len(),
            pieces: Vec::new(),
            free_pieces: Vec::new(),
            object_base,
            flushed_bytes: 0,
            streams: Vec::new(),
            bytes_written: jobs.iter().map(Job::bytes_written).sum(),
            fast_bytes_by_file: BTreeMap::new(),
        })
    }

    fn run(&mut self) -> Result<(), SimError> {
        for (j, after) in self.job_start_after.clone().into_iter().enumerate() {
            self.queue.schedule(
                Time::ZERO.saturating_add(after),
                Event::Start { job: j as u32 },
            );
        }
        while self.jobs_remaining > 0 {
            let Some((now, event)) = self.queue.pop() else {
                return Err(SimError(format!(
                    "the workload cannot finish: {} job(s) still running with nothing left to happen \
                     (do all processes of a job reach the same number of barriers?)",
                    self.jobs_remaining
                )));
            };
            self.handle(now, event);
        }
        Ok(())
    }

    fn handle(&mut self, now: Time, event: Event) {
        match event {
            Event::Start { job } => {
                let state = &mut self.jobs[job as usize];
                state.start = now;
                if state.processes == 0 {
                    state.end = now;
                    self.jobs_remaining -= 1;
                }
                let members: Vec<u32> = (0..self.processes.len() as u32)
                    .filter(|&p| self.processes[p as usize].job == job)
                    .collect();
                for p in members {
                    self.advance(now, p);
                }
            }
            Event::Next { process } => self.advance(now, process),
            Event::Issue { process } => {
                let state = &self.processes[process as usize];
                // INVARIANT: Issue is scheduled right after `next` moved
                // past a Write or Read op.
                match state.ops[state.next - 1] {
                    Op::Write(request) => self.issue(now, process, IoKind::Write, request),
                    Op::Read(request) => self.issue(now, process, IoKind::Read, request),
                    _ => unreachable!("Issue follows an I/O op"),
                }
            }
            Event::AtSwitch { piece } => {
                let p = self.pieces[piece as usize];
                let arrival = self.servers[p.server as usize].link.transfer(now, p.len);
                self.queue.schedule(arrival, Event::AtServer { piece });
            }
            Event::AtServer { piece } => self.at_server(now, piece),
            Event::SsdDone { piece } => self.acknowledge(now, piece),
            Event::Acked { piece } => {
                let process = self.pieces[piece as usize].process;
                self.free_pieces.push(piece);
                let state = &mut self.processes[process as usize];
                state.outstanding -= 1;
                if state.outstanding == 0 {
                    self.advance(now, process);
                }
            }
            Event::HddDone { server } => self.hdd_done(now, server),
            Event::LiuSsdDone { server, what } => match what {
                LiuSsd::Head { load } => self.liu_part_ready(now, server, load, 0),
                LiuSsd::Direct { piece } => self.part_done(now, piece),
                LiuSsd::Lifted { key } => {
                    if let Some(liu) = self.servers[server as usize].liu.as_mut() {
                        liu.buffer.lift_done(key, true);
                    }
                }
            },
            Event::FlushRead {
                server,
                file,
                offset,
                len,
            } => {
                let request = self.disk_request(server, IoKind::Write, file, offset, len);
                self.cached_write(now, server, DirtyWaiter::Flush(request));
            }
            Event::Retry { server } => {
                let s = &mut self.servers[server as usize];
                if s.retry_at == Some(now) {
                    s.retry_at = None;
                }
                self.retry_waiting(now, server);
            }
            Event::GateRecheck { server } => {
                let s = &mut self.servers[server as usize];
                if s.recheck_at == Some(now) {
                    s.recheck_at = None;
                }
                self.maybe_flush(now, server);
            }
        }
    }

    /// Take process `p`'s next op: issue I/O (after the client overhead),
    /// compute, wait at a barrier, or finish.
    fn advance(&mut self, now: Time, p: u32) {
        let process = &mut self.processes[p as usize];
        let job = process.job as usize;
        let Some(&op) = process.ops.get(process.next) else {
            let state = &mut self.jobs[job];
            state.remaining -= 1;
            if state.remaining == 0 {
                state.end = now;
                self.jobs_remaining -= 1;
                let mark = self.mark(now);
                self.jobs[job].end_mark = mark;
            }
            // A finished process no longer holds back a barrier.
            return self.release_barrier(now, job);
        };
        process.next += 1;
        match op {
            Op::Write(_) | Op::Read(_) => {
                let overhead = process.rng.exponential(self.config.client_overhead_mean);
                self.queue
                    .schedule(now.saturating_add(overhead), Event::Issue { process: p });
            }
            Op::Compute(gap) => self
                .queue
                .schedule(now.saturating_add(gap), Event::Next { process: p }),
            Op::Barrier => {
                self.jobs[job].barrier_waiting.push(p);
                self.release_barrier(now, job);
            }
        }
    }

    /// Release a job's barrier once every unfinished process waits at it.
    fn release_barrier(&mut self, now: Time, job: usize) {
        let state = &mut self.jobs[job];
        if state.barrier_waiting.is_empty() || state.barrier_waiting.len() as u32 != state.remaining
        {
            return;
        }
        let waiters = std::mem::take(&mut state.barrier_waiting);
        let mark = self.mark(now);
        self.jobs[job].barriers.push(mark);
        for waiter in waiters {
            self.queue.schedule(now, Event::Next { process: waiter });
        }
    }

    /// The time and the disks' totals now.
    fn mark(&self, now: Time) -> Mark {
        let mut mark = Mark {
            ns: now.as_nanos(),
            ..Mark::default()
        };
        for s in &self.servers {
            let stats = s.hdd.stats();
            mark.seek_bytes += stats.seek_distance_bytes_total;
            mark.services += stats.services;
        }
        mark
    }

    /// Split a request over the I/O nodes and send each piece on its way.
    fn issue(&mut self, now: Time, p: u32, kind: IoKind, request: WriteRequest) {
        let pieces = stripe(self.config, request);
        let client = self.processes[p as usize].client as usize;
        self.processes[p as usize].outstanding = pieces.len() as u32;
        if pieces.is_empty() {
            // A zero-length request completes at once.
            self.queue.schedule(now, Event::Next { process: p });
            return;
        }
        for (server, offset, len) in pieces {
            let piece = self.new_piece(Piece {
                process: p,
                server,
                kind,
                file: request.file,
                offset,
                len,
                route: Tier::Capacity,
                waiting_since: None,
                arrived: now,
                parts: 1,
            });
            let sent = self.clients[client].transfer(now, len);
            self.queue.schedule(sent, Event::AtSwitch { piece });
        }
    }

    fn new_piece(&mut self, piece: Piece) -> u32 {
        match self.free_pieces.pop() {
            Some(id) => {
                self.pieces[id as usize] = piece;
                id
            }
            None => {
                self.pieces.push(piece);
                self.pieces.len() as u32 - 1
            }
        }
    }

    fn at_server(&mut self, now: Time, piece: u32) {
        self.pieces[piece as usize].arrived = now;
        let p = self.pieces[piece as usize];
        let server = p.server as usize;
        if p.kind == IoKind::Read {
            if self.servers[server].liu.is_some() {
                return self.liu_read(now, piece);
            }
            return self.cached_read(now, piece);
        }
        if let Some(liu) = self.servers[server].liu.as_mut() {
            // The capacity copy changes: no buffered segment or lifted head
            // over it may be served again; the bytes count as requested.
            let segment = liu.buffer.config().geometry.segment_bytes();
            for key in liu
                .buffer
                .written(p.file, p.offset, p.offset + p.len, segment)
            {
                if let Some(load) = liu.current.remove(&key) {
                    if let Some(l) = liu.loads.get_mut(&load) {
                        l.evicted = true;
                    }
                }
            }
            self.liu_actions(now, p.server);
        }
        let routing = self.servers[server].buffer.handle_write(
            now,
            WriteRequest {
                file: p.file,
                offset: p.offset,
                len: p.len,
            },
        );
        if let Some(report) = routing.completed {
            self.streams.push(StreamPoint {
                server: p.server,
                percentage: report.percentage,
                threshold: report.threshold,
                buffered: report.route == Tier::Fast,
            });
        }
        self.pieces[piece as usize].route = routing.tier;
        self.place(now, piece);
        if routing.completed.is_some() {
            self.maybe_flush(now, p.server);
        }
    }

    /// Place a write piece through the I/O node's write buffer: append it to
    /// the SSD log, write it to the HDD, or make it wait for a free region
    /// (retried by [`Sim::retry_waiting`]).
    fn place(&mut self, now: Time, piece: u32) {
        let p = self.pieces[piece as usize];
        let server = &mut self.servers[p.server as usize];
        let waiting_since = p.waiting_since.unwrap_or(now);
        // The simulated log's records are the bare payload: no header and
        // no file description (the figures were made that way).
        let placement = server.buffer.place_write(
            now,
            p.file,
            p.offset,
            p.len,
            p.len,
            0,
            p.route,
            waiting_since,
        );
        match placement {
            Placement::Log(r) => {
                // INVARIANT: pieces are at most a request long, far below 4 GiB.
                let len = u32::try_from(p.len).expect("piece fits a log record");
                server.buffer.insert(
                    p.file,
                    Extent {
                        file_offset: p.offset,
                        len,
                        location: LogLocation {
                            region: r.region,
                            offset: r.record_offset,
                        },
                        seq: r.seq,
                    },
                );
                let done = server.ssd.schedule(now, IoKind::Write, p.len);
                self.queue.schedule(done, Event::SsdDone { piece });
                *self.fast_bytes_by_file.entry(p.file).or_insert(0) += p.len;
                self.maybe_flush(now, p.server);
            }
            Placement::Capacity => {
                // Nothing buffered lies under it (the overlap rule), so
                // nothing is invalidated.
                let request = self.disk_request(p.server, IoKind::Write, p.file, p.offset, p.len);
                self.cached_write(now, p.server, DirtyWaiter::Piece(piece, request));
            }
            Placement::Wait { retry_at_latest } => {
                self.pieces[piece as usize].waiting_since = Some(waiting_since);
                server.waiting.push_back(piece);
                if server.retry_at.is_none_or(|t| t > retry_at_latest) {
                    server.retry_at = Some(retry_at_latest);
                    self.queue
                        .schedule(retry_at_latest, Event::Retry { server: p.server });
                }
                self.maybe_flush(now, p.server);
            }
            Placement::TooLarge => self.split(now, piece),
        }
    }

    /// A piece over buffered bytes that is longer than a region must still
    /// reach the log: place it as pieces of at most a region each, all
    /// acknowledged to the same process. Each part fits a region, so no
    /// part is split again; a part over no buffered bytes may go to the HDD.
    fn split(&mut self, now: Time, piece: u32) {
        let p = self.pieces[piece as usize];
        let region_bytes = self.servers[p.server as usize].buffer.record_bytes_max();
        let mut parts = Vec::new();
        let mut offset = p.offset + region_bytes;
        while offset < p.offset + p.len {
            let len = region_bytes.min(p.offset + p.len - offset);
            parts.push(self.new_piece(Piece { offset, len, ..p }));
            offset += len;
        }
        self.processes[p.process as usize].outstanding += parts.len() as u32;
        self.pieces[piece as usize].len = region_bytes;
        self.place(now, piece);
        for part in parts {
            self.place(now, part);
        }
    }

    /// A write to the HDD through the I/O node's page cache: cached and
    /// acknowledged at once while the dirty budget allows, written back
    /// through the disk queue; otherwise it waits (FIFO) for write-back to
    /// free room. With no cache it is synchronous.
    fn cached_write(&mut self, now: Time, server: u32, write: DirtyWaiter) {
        let limit = self.config.dirty_limit_bytes;
        let s = &mut self.servers[server as usize];
        let request = match write {
            DirtyWaiter::Piece(_, r) | DirtyWaiter::Flush(r) => r,
        };
        if limit == 0 {
            let owner = match write {
                DirtyWaiter::Piece(piece, _) => Owner::Piece(piece),
                DirtyWaiter::Flush(r) => Owner::Flush { len: r.len },
            };
            return self.hdd_submit(now, server, request, owner);
        }
        // A write larger than the whole budget is admitted alone.
        let fits = s.dirty_bytes == 0 || s.dirty_bytes + request.len <= limit;
        if !fits || !s.dirty_waiters.is_empty() {
            s.dirty_waiters.push_back(write);
            return;
        }
        s.dirty_bytes += request.len;
        match write {
            DirtyWaiter::Piece(piece, _) => self.acknowledge(now, piece),
            DirtyWaiter::Flush(r) => {
                self.flush_written(server, r.len);
                self.hdd_submit(now, server, request, Owner::Dirty { len: request.len });
                return self.maybe_flush(now, server);
            }
        }
        self.hdd_submit(now, server, request, Owner::Dirty { len: request.len });
    }

    /// Admit waiting writes while the dirty budget has room.
    fn admit_dirty_waiters(&mut self, now: Time, server: u32) -> bool {
        let limit = self.config.dirty_limit_bytes;
        let mut flushed = false;
        loop {
            let s = &mut self.servers[server as usize];
            let Some(&write) = s.dirty_waiters.front() else {
                return flushed;
            };
            let request = match write {
                DirtyWaiter::Piece(_, r) | DirtyWaiter::Flush(r) => r,
            };
            if s.dirty_bytes != 0 && s.dirty_bytes + request.len > limit {
                return flushed;
            }
            s.dirty_waiters.pop_front();
            s.dirty_bytes += request.len;
            match write {
                DirtyWaiter::Piece(piece, _) => self.acknowledge(now, piece),
                DirtyWaiter::Flush(r) => {
                    self.flush_written(server, r.len);
                    flushed = true;
                }
            }
            self.hdd_submit(now, server, request, Owner::Dirty { len: request.len });
        }
    }

    /// A flush run reached the capacity tier (its cache, or the disk).
    fn flush_written(&mut self, server: u32, len: u64) {
        self.flushed_bytes += len;
        self.servers[server as usize].flush.in_flight -= 1;
    }

    fn disk_request(
        &mut self,
        server: u32,
        kind: IoKind,
        file: FileId,
        offset: u64,
        len: u64,
    ) -> HddRequest {
        let s = &mut self.servers[server as usize];
        s.next_hdd_id += 1;
        // INVARIANT: layout_objects placed every file any op touches.
        let base = self.object_base[&file];
        HddRequest {
            id: s.next_hdd_id,
            kind,
            offset: base + offset,
            len,
        }
    }

    fn hdd_submit(&mut self, now: Time, server: u32, request: HddRequest, owner: Owner) {
        let s = &mut self.servers[server as usize];
        s.hdd_owner.insert(request.id, owner);
        if !s.hdd_backlog.is_empty() {
            s.hdd_backlog.push_back(request);
        } else if let Err(request) = s.hdd.submit(request) {
            s.hdd_backlog.push_back(request);
        }
        self.hdd_kick(now, server);
    }

    fn hdd_kick(&mut self, now: Time, server: u32) {
        let s = &mut self.servers[server as usize];
        if s.hdd.is_busy() {
            return;
        }
        if let Some(service) = s.hdd.start_next() {
            s.hdd_current = service.requests;
            self.queue.schedule(
                now.saturating_add(service.duration),
                Event::HddDone { server },
            );
        }
    }

    fn hdd_done(&mut self, now: Time, server: u32) {
        let s = &mut self.servers[server as usize];
        s.hdd.complete();
        let done = std::mem::take(&mut s.hdd_current);
        let mut liu_parts = Vec::new();
        let mut read_parts = Vec::new();
        let mut flushed = false;
        let mut freed = false;
        for request in &done {
            // INVARIANT: every submitted request has an owner until it completes.
            match s
                .hdd_owner
                .remove(&request.id)
                .expect("HDD request without an owner")
            {
                Owner::Piece(piece) => schedule_ack(&mut self.queue, self.config, now, piece),
                Owner::LiuPart { load, part } => liu_parts.push((load, part)),
                Owner::ReadPart { piece } => read_parts.push(piece),
                Owner::ReadAhead { file, window } => {
                    // INVARIANT: a window stays in its file's cache until
                    // its request completes.
                    let cache = s.read_ahead.get_mut(&file).expect("read-ahead cache");
                    let at = cache
                        .inflight
                        .iter()
                        .position(|w| w.id == window)
                        .expect("window in flight");
                    read_parts.extend(cache.inflight.remove(at).waiters);
                }
                Owner::Flush { len } => {
                    self.flushed_bytes += len;
                    s.flush.in_flight -= 1;
                    flushed = true;
                }
                Owner::Dirty { len } => {
                    s.dirty_bytes -= len;
                    freed = true;
                }
            }
        }
        while let Some(request) = s.hdd_backlog.pop_front() {
            if let Err(request) = s.hdd.submit(request) {
                s.hdd_backlog.push_front(request);
                break;
            }
        }
        self.hdd_kick(now, server);
        for (load, part) in liu_parts {
            self.liu_part_ready(now, server, load, part);
        }
        for piece in read_parts {
            self.part_done(now, piece);
        }
        if freed {
            flushed |= self.admit_dirty_waiters(now, server);
        }
        if flushed {
            self.maybe_flush(now, server);
        }
    }

    fn acknowledge(&mut self, now: Time, piece: u32) {
        schedule_ack(&mut self.queue, self.config, now, piece);
    }

    /// One part of a read piece is served; the piece is acknowledged with
    /// its last part, and its latency at the I/O node recorded.
    fn part_done(&mut self, now: Time, piece: u32) {
        let p = &mut self.pieces[piece as usize];
        p.parts -= 1;
        if p.parts > 0 {
            return;
        }
        let job = self.processes[p.process as usize].job as usize;
        let latency = now.as_nanos().saturating_sub(p.arrived.as_nanos());
        self.jobs[job]
            .read_latencies
            .push((now.as_nanos(), latency));
        schedule_ack(&mut self.queue, self.config, now, piece);
    }

    /// A read piece at an I/O node without LiU, through the page cache's
    /// read-ahead (see [`ClusterConfig::read_ahead_bytes`]). Per file and
    /// node the cache holds one contiguous range `[lo, hi)` (the last few
    /// windows) plus the windows in flight.
    fn cached_read(&mut self, now: Time, piece: u32) {
        let p = self.pieces[piece as usize];
        let ra = self.config.read_ahead_bytes;
        let end = p.offset + p.len;
        let cache = self.servers[p.server as usize]
            .read_ahead
            .entry(p.file)
            .or_default();
        if let Some(window) = cache
            .inflight
            .iter_mut()
            .find(|w| p.offset >= w.from && end <= w.stop)
        {
            return window.waiters.push(piece);
        }
        if p.offset >= cache.lo && end <= cache.hi {
            // Asynchronous read-ahead, as Linux's PG_readahead marker: a
            // hit in the last window fetches the next one before it is
            // needed.
            if ra > 0 && end + ra > cache.hi && cache.inflight.is_empty() {
                let from = cache.hi;
                self.read_ahead(now, p.server, p.file, from, from + ra, Vec::new());
            }
            return self.part_done(now, piece);
        }
        // A new sequential run (the first read, or one continuing the
        // previous read away from the cached range) restarts the cache.
        let first = cache.hi == 0
            || (p.offset.abs_diff(cache.last_end) < ra
                && (p.offset.saturating_add(ra) < cache.hi
                    || p.offset >= cache.hi.saturating_add(ra)));
        cache.last_end = end;
        let near = ra > 0
            && (first
                || (p.offset.saturating_add(ra) >= cache.hi
                    && p.offset < cache.hi.saturating_add(ra)));
        if near {
            // A sequential reader near the cached frontier: read ahead from
            // the frontier (or from the piece, past a gap).
            let from = if p.offset <= cache.hi && !first {
                cache.hi
            } else {
                p.offset
            };
            if p.offset > cache.hi || first {
                cache.lo = p.offset;
            }
            let stop = end.max(from + ra);
            return self.read_ahead(now, p.server, p.file, from, stop, vec![piece]);
        }
        let request = self.disk_request(p.server, IoKind::Read, p.file, p.offset, p.len);
        self.hdd_submit(now, p.server, request, Owner::ReadPart { piece });
    }

    /// Read `[from, stop)` of `file` into its page cache on `server`: the
    /// cached range ends at `stop` (keeping [`CACHED_WINDOWS`] windows) and
    /// `waiters` are served when the disk delivers it.
    fn read_ahead(
        &mut self,
        now: Time,
        server: u32,
        file: FileId,
        from: u64,
        stop: u64,
        waiters: Vec<u32>,
    ) {
        let ra = self.config.read_ahead_bytes;
        let s = &mut self.servers[server as usize];
        let id = s.next_window;
        s.next_window += 1;
        // INVARIANT: callers looked the file's cache up first.
        let cache = s.read_ahead.get_mut(&file).expect("read-ahead cache");
        cache.hi = stop;
        cache.lo = cache.lo.max(stop.saturating_sub(CACHED_WINDOWS * ra));
        cache.inflight.push(Window {
            id,
            from,
            stop,
            waiters,
        });
        let request = self.disk_request(server, IoKind::Read, file, from, stop - from);
        self.hdd_submit(now, server, request, Owner::ReadAhead { file, window: id });
    }

    /// A read piece at an I/O node running LiU: each segment it touches is
    /// served as the segment buffer decides (DESIGN §5).
    fn liu_read(&mut self, now: Time, piece: u32) {
        let p = self.pieces[piece as usize];
        let server = p.server as usize;
        // INVARIANT: called only for I/O nodes with LiU.
        let geometry = self.servers[server]
            .liu
            .as_ref()
            .expect("LiU node")
            .buffer
            .config()
            .geometry;
        let slices: Vec<_> = geometry.split(p.offset, p.len).collect();
        self.pieces[piece as usize].parts = slices.len() as u32;
        for slice in slices {
            let key = SegmentKey {
                file: p.file,
                index: slice.index,
            };
            let (start, end) = (slice.start, slice.start + slice.len);
            let liu = self.servers[server].liu.as_mut().expect("LiU node");
            let serve = liu
                .buffer
                .access(key, start, slice.len, geometry.segment_bytes());
            match serve {
                Serve::Buffer => {
                    // INVARIANT: a regular segment has a current load.
                    let load = liu.current[&key];
                    self.liu_wait(now, p.server, load, piece, start, end);
                }
                Serve::Load { head_from_fast } => {
                    let load = liu.next_load;
                    liu.next_load += 1;
                    let sections: Vec<(u64, u64)> =
                        geometry.body_sections(self.config.liu_sections).collect();
                    liu.loads.insert(
                        load,
                        Load {
                            ready: vec![false; sections.len() + 1],
                            waiters: Vec::new(),
                            evicted: false,
                        },
                    );
                    liu.current.insert(key, load);
                    let base = geometry.start(slice.index);
                    if head_from_fast {
                        // The head streams from the SSD while the disk seeks.
                        let s = &mut self.servers[server];
                        let done = s.ssd.schedule(now, IoKind::Read, geometry.head_bytes());
                        self.queue.schedule(
                            done,
                            Event::LiuSsdDone {
                                server: p.server,
                                what: LiuSsd::Head { load },
                            },
                        );
                    } else {
                        let request = self.disk_request(
                            p.server,
                            IoKind::Read,
                            p.file,
                            base,
                            geometry.head_bytes(),
                        );
                        self.hdd_submit(now, p.server, request, Owner::LiuPart { load, part: 0 });
                    }
                    for (k, (offset, len)) in sections.into_iter().enumerate() {
                        let request =
                            self.disk_request(p.server, IoKind::Read, p.file, base + offset, len);
                        let part = k as u32 + 1;
                        self.hdd_submit(now, p.server, request, Owner::LiuPart { load, part });
                    }
                    self.liu_wait(now, p.server, load, piece, start, end);
                }
                Serve::Direct { from_head: true } => {
                    let done = self.servers[server]
                        .ssd
                        .schedule(now, IoKind::Read, slice.len);
                    self.queue.schedule(
                        done,
                        Event::LiuSsdDone {
                            server: p.server,
                            what: LiuSsd::Direct { piece },
                        },
                    );
                }
                Serve::Direct { from_head: false } => {
                    let offset = geometry.start(slice.index) + start;
                    let request =
                        self.disk_request(p.server, IoKind::Read, p.file, offset, slice.len);
                    self.hdd_submit(now, p.server, request, Owner::ReadPart { piece });
                }
            }
            self.liu_actions(now, p.server);
        }
    }

    /// Serve `[start, end)` of load `load` to `piece` now if its parts are
    /// there, else when they arrive.
    fn liu_wait(&mut self, now: Time, server: u32, load: u64, piece: u32, start: u64, end: u64) {
        let liu = self.servers[server as usize]
            .liu
            .as_mut()
            .expect("LiU node");
        let parts = liu_parts_of(
            liu.buffer.config().geometry,
            self.config.liu_sections,
            start,
            end,
        );
        // INVARIANT: loads stay until their last waiter is served.
        let l = liu.loads.get_mut(&load).expect("load");
        if parts.clone().all(|k| l.ready[k]) {
            self.part_done(now, piece);
        } else {
            l.waiters.push((piece, start, end));
        }
    }

    /// Part `part` of load `load` arrived: serve the waiters it completes.
    fn liu_part_ready(&mut self, now: Time, server: u32, load: u64, part: u32) {
        let sections = self.config.liu_sections;
        let liu = self.servers[server as usize]
            .liu
            .as_mut()
            .expect("LiU node");
        let geometry = liu.buffer.config().geometry;
        let Some(l) = liu.loads.get_mut(&load) else {
            return;
        };
        l.ready[part as usize] = true;
        let mut served = Vec::new();
        l.waiters.retain(|&(piece, start, end)| {
            let ready = liu_parts_of(geometry, sections, start, end).all(|k| l.ready[k]);
            if ready {
                served.push(piece);
            }
            !ready
        });
        if l.evicted && l.ready.iter().all(|&r| r) && l.waiters.is_empty() {
            liu.loads.remove(&load);
        }
        for piece in served {
            self.part_done(now, piece);
        }
    }

    /// Carry out the segment buffer's evictions and lifts.
    fn liu_actions(&mut self, now: Time, server: u32) {
        loop {
            let s = &mut self.servers[server as usize];
            let liu = s.liu.as_mut().expect("LiU node");
            let Some(action) = liu.buffer.poll_action() else {
                return;
            };
            let Action::Evict { key, lift, .. } = action else {
                // De-lifting frees SSD space: nothing to simulate.
                continue;
            };
            let load = liu.current.remove(&key);
            let head_ready = load
                .and_then(|id| liu.loads.get(&id))
                .is_some_and(|l| l.ready[0]);
            if let Some(id) = load {
                if let Some(l) = liu.loads.get_mut(&id) {
                    l.evicted = true;
                    if l.ready.iter().all(|&r| r) && l.waiters.is_empty() {
                        liu.loads.remove(&id);
                    }
                }
            }
            if lift {
                if head_ready {
                    // The head is copied from the buffer to the SSD.
                    let head = liu.buffer.config().geometry.head_bytes();
                    let done = s.ssd.schedule(now, IoKind::Write, head);
                    self.queue.schedule(
                        done,
                        Event::LiuSsdDone {
                            server,
                            what: LiuSsd::Lifted { key },
                        },
                    );
                } else {
                    liu.buffer.lift_done(key, false);
                }
            }
        }
    }

    /// Whether the flusher of `server` may issue I/O now; schedules a
    /// recheck when the gate pauses it. Only SSDUP+ and sluice ask their
    /// gate.
    fn gate_allows(&mut self, now: Time, server: u32) -> bool {
        let s = &self.servers[server as usize];
        if !s.traffic_aware {
            return true;
        }
        match s.buffer.gate_poll(now) {
            GateDecision::Flush(_) => true,
            GateDecision::Pause { recheck_at } => {
                self.schedule_recheck(now, server, recheck_at);
                false
            }
        }
    }

    /// The gate paused flushing until `recheck_at`: look again then.
    fn schedule_recheck(&mut self, now: Time, server: u32, recheck_at: Option<Time>) {
        let s = &mut self.servers[server as usize];
        if let Some(at) = recheck_at {
            let at = at.max(now);
            if s.recheck_at.is_none_or(|t| t > at) {
                s.recheck_at = Some(at);
                self.queue.schedule(at, Event::GateRecheck { server });
            }
        }
    }

    /// The full region `server` should start flushing now, if any: the
    /// oldest, once the gate allows it (SSDUP+, sluice), or at once (the
    /// others).
    fn region_to_flush(&mut self, now: Time, server: u32) -> Option<RegionId> {
        let s = &mut self.servers[server as usize];
        if !s.traffic_aware {
            return s.buffer.oldest_full_region();
        }
        match s.buffer.poll_flush(now) {
            FlushPoll::Idle => None,
            FlushPoll::Pause { recheck_at } => {
                self.schedule_recheck(now, server, recheck_at);
                None
            }
            FlushPoll::Flush { region, .. } => Some(region),
        }
    }

    /// Start or continue flushing full regions of `server`.
    fn maybe_flush(&mut self, now: Time, server: u32) {
        loop {
            let region = match self.servers[server as usize].flush.region {
                Some(region) => region,
                None => {
                    let Some(region) = self.region_to_flush(now, server) else {
                        return;
                    };
                    let s = &mut self.servers[server as usize];
                    // INVARIANT: region_to_flush returned a full region.
                    let runs = s
                        .buffer
                        .start_flush(region, self.config.flush_run_max_bytes)
                        .expect("region_to_flush gives a full region");
                    s.flush.runs = runs.into();
                    s.flush.region = Some(region);
                    region
                }
            };
            loop {
                let s = &self.servers[server as usize];
                if s.flush.in_flight >= self.config.flush_depth || s.flush.runs.is_empty() {
                    break;
                }
                if !self.gate_allows(now, server) {
                    return;
                }
                let s = &mut self.servers[server as usize];
                // INVARIANT: checked non-empty above.
                let run = s.flush.runs.pop_front().expect("a run");
                // Look the run up again: a newer write may have superseded
                // part of it since the flush started. Flush its first
                // file-contiguous stretch still in the region; the rest goes
                // back to the front of the queue.
                let mut stretch: Option<(u64, u64)> = None;
                for (offset, len, _) in s.buffer.flush_pieces(region, run) {
                    match stretch {
                        None => stretch = Some((offset, len)),
                        Some((start, so_far)) if start + so_far == offset => {
                            stretch = Some((start, so_far + len));
                        }
                        Some(_) => break,
                    }
                }
                let Some((offset, len)) = stretch else {
                    continue;
                };
                let run_end = run.file_offset + run.len;
                if offset + len < run_end {
                    s.flush.runs.push_front(FlushRunRef {
                        file_offset: offset + len,
                        len: run_end - (offset + len),
                        ..run
                    });
                }
                let done = s.ssd.schedule(now, IoKind::Read, len);
                s.flush.in_flight += 1;
                self.queue.schedule(
                    done,
                    Event::FlushRead {
                        server,
                        file: run.file,
                        offset,
                        len,
                    },
                );
            }
            let s = &mut self.servers[server as usize];
            if !(s.flush.runs.is_empty() && s.flush.in_flight == 0) {
                return;
            }
            // The region is on the HDD: free it and let waiting writers in.
            // INVARIANT: the region has been flushing since start_flush.
            s.buffer.finish_flush(region).expect("the flushing region");
            s.flush.region = None;
            self.retry_waiting(now, server);
        }
    }

    fn retry_waiting(&mut self, now: Time, server: u32) {
        let waiting: Vec<u32> = self.servers[server as usize].waiting.drain(..).collect();
        for piece in waiting {
            self.place(now, piece);
        }
    }

    fn finish(self) -> RunResult {
        let mut waits = 0;
        let mut regions_flushed = 0;
        let mut placed = WriteBufferCounters::default();
        let mut merged = 0;
        let mut buffered = 0;
        let mut liu: Option<LiuTotals> = None;
        for s in &self.servers {
            if let Some(node) = &s.liu {
                liu.get_or_insert_with(LiuTotals::default)
                    .add(node.buffer.counters());
            }
            let pipeline = s.buffer.pipeline().counters();
            waits += pipeline.waits;
            regions_flushed += pipeline.regions_flushed;
            let c = s.buffer.counters();
            placed.fast_bytes += c.fast_bytes;
            placed.capacity_bytes += c.capacity_bytes;
            placed.write_through_bytes += c.write_through_bytes;
            placed.forced_to_log_bytes += c.forced_to_log_bytes;
            merged += s.hdd.stats().requests_merged;
            buffered += s.buffer.buffered_bytes();
        }
        RunResult {
            system: self.system,
            jobs: self
                .jobs
                .iter()
                .zip(&self.job_names)
                .map(|(j, name)| JobResult {
                    name: name.clone(),
                    bytes: j.bytes,
                    start_ns: j.start.as_nanos(),
                    end_ns: j.end.as_nanos(),
                    barriers: j.barriers.clone(),
                    end_mark: j.end_mark,
                    read_latencies: j.read_latencies.clone(),
                })
                .collect(),
            bytes_written: self.bytes_written,
            fast_bytes: placed.fast_bytes + placed.forced_to_log_bytes,
            capacity_bytes: placed.capacity_bytes,
            write_through_bytes: placed.write_through_bytes,
            forced_to_log_bytes: placed.forced_to_log_bytes,
            fast_bytes_by_file: self.fast_bytes_by_file.into_iter().collect(),
            flushed_bytes: self.flushed_bytes,
            buffered_at_end_bytes: buffered,
            waits,
            regions_flushed,
            streams: self.streams,
            hdd_requests_merged: merged,
            events: self.queue.delivered(),
            end_ns: self.queue.now().as_nanos(),
            liu,
        }
    }
}

/// The write buffer of an I/O node running `system`. The baseline's routes
/// everything to the HDD, so its one region (of at least a byte: the
/// baseline may be given no SSD) is never written.
fn buffer_config(config: &ClusterConfig, system: System) -> WriteBufferConfig {
    let regions = match system {
        System::Baseline | System::BurstBuffer => 1,
        System::Ssdup | System::SsdupPlus | System::SluiceCost => config.regions,
    };
    let region_bytes = config.fast_bytes_per_server / u64::from(regions.max(1));
    WriteBufferConfig {
        redirector: RedirectorConfig {
            policy: system.policy(config),
            detector: DetectorConfig {
                stream_len: config.stream_len,
            },
            threshold: config.threshold,
        },
        pipeline: PipelineConfig {
            regions,
            region_bytes: match system {
                System::Baseline => region_bytes.max(1),
                _ => region_bytes,
            },
            // The paper's OrangeFS-BB writes through while its only region
            // flushes; SSDUP and SSDUP+ block the writer until a region is
            // released (§2.4.1), and so does sluice.
            when_full: match system {
                System::BurstBuffer => WhenFull::WriteThrough,
                _ => WhenFull::Wait,
            },
            wait_max: Duration::from_secs(3600),
        },
        gate: FlushGateConfig {
            flush_idle: config.flush_idle,
            // The papers' pipeline: only full regions flush.
            flush_age: None,
            hold_while_writing: false,
        },
    }
}

/// The acknowledgement of a piece done at `now` reaches its client after
/// one link latency each way; a free function so it can be called while a
/// server is borrowed.
fn schedule_ack(queue: &mut EventQueue<Event>, config: &ClusterConfig, now: Time, piece: u32) {
    let ack = now.saturating_add(config.server_link.latency + config.client_link.latency);
    queue.schedule(ack, Event::Acked { piece });
}

/// The parts of a LiU load (0 = head, k = body section k) that hold
/// `[start, end)` of the segment.
fn liu_parts_of(
    geometry: sluice_policy::segments::Geometry,
    sections: u32,
    start: u64,
    end: u64,
) -> std::ops::RangeInclusive<usize> {
    let part = |offset: u64| -> usize {
        if offset < geometry.head_bytes() {
            return 0;
        }
        let mut k = 0;
        for (i, (s, _)) in geometry.body_sections(sections).enumerate() {
            if offset >= s {
                k = i + 1;
            }
        }
        k
    };
    part(start)..=part(end.saturating_sub(1).max(start))
}

/// Pieces of `request` per I/O node: (server, server-local offset, length).
/// Consecutive stripes on one server are adjacent in its local object, so a
/// request gives each server one contiguous range.
fn stripe(config: &ClusterConfig, request: WriteRequest) -> Vec<(u32, u64, u64)> {
    let stripe = config.stripe_bytes;
    let servers = u64::from(config.servers);
    let mut per_server: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
    let mut offset = request.offset;
    let end = request.end();
    while offset < end {
        let k = offset / stripe;
        let within = offset % stripe;
        let len = (stripe - within).min(end - offset);
        let server = (k % servers) as u32;
        let local = (k / servers) * stripe + within;
        per_server
            .entry(server)
            .and_modify(|(_, l)| *l += len)
            .or_insert((local, len));
        offset += len;
    }
    per_server
        .into_iter()
        .map(|(server, (local, len))| (server, local, len))
        .collect()
}

/// Place every file's object on the disks, one after another in file-id
/// order, each as large as the file's largest offset needs.
fn layout_objects(config: &ClusterConfig, jobs: &[Job]) -> Result<HashMap<FileId, u64>, SimError> {
    let mut sizes: BTreeMap<FileId, u64> = BTreeMap::new();
    for job in jobs {
        for ops in &job.processes {
            for op in ops {
                if let Op::Write(r) | Op::Read(r) = op {
                    let size = sizes.entry(r.file).or_insert(0);
                    *size = (*size).max(r.end());
                }
            }
        }
    }
    let unit = config.stripe_bytes * u64::from(config.servers);
    let mut base = 0u64;
    let mut bases = HashMap::new();
    for (file, size) in sizes {
        bases.insert(file, base);
        let object = size.div_ceil(unit) * config.stripe_bytes;
        base = base.saturating_add(object);
    }
    if base > config.hdd.capacity_bytes {
        return Err(SimError(format!(
            "the workload needs {} GB per I/O node but the simulated disk holds {} GB: \
             lower --scale or raise the disk capacity",
            base / 1_000_000_000,
            config.hdd.capacity_bytes / 1_000_000_000
        )));
    }
    Ok(bases)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stripes_map_to_contiguous_local_ranges() {
        let config = ClusterConfig::default();
        // 256 KiB at 0 over 2 servers with 64 KiB stripes: 128 KiB each.
        let pieces = stripe(
            &config,
            WriteRequest {
                file: FileId(1),
                offset: 0,
                len: 256 * KIB,
            },
        );
        assert_eq!(pieces, vec![(0, 0, 128 * KIB), (1, 0, 128 * KIB)]);
        // The next 256 KiB continues both local objects.
        let pieces = stripe(
            &config,
            WriteRequest {
                file: FileId(1),
                offset: 256 * KIB,
                len: 256 * KIB,
            },
        );
        assert_eq!(
            pieces,
            vec![(0, 128 * KIB, 128 * KIB), (1, 128 * KIB, 128 * KIB)]
        );
        // An unaligned 100 KiB request starting in stripe 1 (server 1).
        let pieces = stripe(
            &config,
            WriteRequest {
                file: FileId(1),
                offset: 100 * KIB,
                len: 100 * KIB,
            },
        );
        // Stripe 1 [64,128) -> server 1 local [36,64) 28 KiB; stripe 2
        // [128,192) -> server 0 local [64,128) 64 KiB; stripe 3 [192,200)
        // -> server 1 local [64,72) 8 KiB, adjacent to the first part.
        assert_eq!(
            pieces,
            vec![(0, 64 * KIB, 64 * KIB), (1, 36 * KIB, 36 * KIB)]
        );
    }

    #[test]
    fn objects_are_laid_out_in_file_order_and_capacity_is_checked() {
        let config = ClusterConfig::default();
        let job = |file: u64, end: u64| Job {
            name: "j".into(),
            processes: vec![vec![Op::Write(WriteRequest {
                file: FileId(file),
                offset: end - 10,
                len: 10,
            })]],
            start_after: Duration::ZERO,
        };
        let bases = layout_objects(&config, &[job(2, 1 << 20), job(1, 300 * KIB)]).unwrap();
        assert_eq!(bases[&FileId(1)], 0);
        // 300 KiB over 2 servers in 64 KiB stripes: 3 stripes per server.
        assert_eq!(bases[&FileId(2)], 192 * KIB);
        let err = layout_objects(&config, &[job(1, 2_000_000_000_000)]).unwrap_err();
        assert!(err.0.contains("lower --scale"), "{err}");
    }
}
