//! What a running mount reports: one [`Status`] snapshot and the views it
//! is made of, rendered as JSON (serde: the control socket's `status`
//! answer, `sluice status --json`), as text ([`Status::text`], `sluice
//! status`; [`Status::line`], the demo's progress), as metrics (the table
//! [`crate::metrics::METRICS`], which `sluice-daemon` encodes for
//! Prometheus) and by `sluice top`.
//!
//! Only data and its rendering: the mount (`sluice-daemon`) takes the
//! snapshot from the live engine; this crate never sees the engine, so a
//! client (`sluice status`, `sluice top`) reads a snapshot without linking
//! the daemon. Invariant: every field added after the first release is
//! `#[serde(default)]`, so a newer client reads an older mount's answer.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

/// One of `last_errors`: a failure answered to an application or a
/// background failure (the engine's `Incident`), as status shows it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct IncidentView {
    /// When (UTC, RFC 3339).
    pub at: String,
    /// The operation (`write`, `create`, `flush`, `demote`, ...).
    pub op: String,
    /// The path (relative to the mount) or `inode N`, if one.
    pub path: Option<String>,
    /// `fast` or `capacity`, if known.
    pub tier: Option<String>,
    /// The errno number.
    pub errno: Option<i32>,
    /// Its name (`ENOSPC`).
    pub errno_name: Option<String>,
    /// The error's whole message.
    pub message: String,
}

impl IncidentView {
    /// One line of `sluice status`: time, operation and path, tier, errno,
    /// message.
    pub fn line(&self) -> String {
        let errno = match (&self.errno_name, self.errno) {
            (Some(name), _) => name.clone(),
            (None, Some(n)) => format!("errno {n}"),
            (None, None) => "-".to_string(),
        };
        format!(
            "  {} {}{} [{} tier, {errno}] {}",
            self.at,
            self.op,
            self.path
                .as_ref()
                .map_or_else(String::new, |p| format!(" {p}")),
            self.tier.as_deref().unwrap_or("no"),
            self.message
        )
    }
}

/// BBOS's counters since the stager opened: counted by the engine's
/// stager (`sluice_engine::ckpt`), and shown by status, metrics and
/// `sluice top` as they are (serialized, not copied field by field).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CkptStats {
    /// Bytes written to the capacity tier at an fsync or close
    /// (the stager's `publish_on_sync`).
    pub published_bytes: u64,
    /// New checkpoints started (staged or direct).
    pub checkpoints: u64,
    /// Bytes written to staged copies.
    pub staged_written_bytes: u64,
    /// Checkpoints written straight to the capacity tier because they were
    /// the coldest (BBOS) or had no grant (DataWarp).
    pub cold_direct: u64,
    /// Checkpoints written to the capacity tier because no room could be
    /// made.
    pub spills: u64,
    /// Staged copies moved to the capacity tier in the middle of their
    /// writes because the fast tier's file system had no room (ENOSPC or
    /// EDQUOT; docs/bbos.md, "A full fast tier").
    pub full_moves: u64,
    /// Bytes those copies held when they moved.
    pub full_moved_bytes: u64,
    /// Bytes written to checkpoint files on the capacity tier directly.
    pub direct_bytes: u64,
    /// Copies demoted.
    pub demotions: u64,
    /// Bytes demoted.
    pub demoted_bytes: u64,
    /// Demotion steps done by `copy_file_range`.
    pub kernel_copies: u64,
    /// Demotions that failed (retried later).
    pub demotion_errors: u64,
    /// Demotions abandoned because the file changed meanwhile (retried).
    pub demotion_restarts: u64,
    /// The last error of a demotion or a catalogue update.
    pub last_error: Option<String>,
    /// Catalogue calls that failed (the staging dir stays the truth).
    pub catalog_errors: u64,
    /// New checkpoints created as ordinary capacity-tier files because the
    /// catalogue could not be reached (issue 19).
    pub catalog_fallbacks: u64,
    /// Times the jobs were read again because another node changed them.
    pub jobs_reloads: u64,
    /// Restart reads that waited for another node's demotion.
    pub remote_waits: u64,
    /// Those waits that ran out (the open failed with EAGAIN).
    pub remote_timeouts: u64,
    /// Cached copies evicted.
    pub evictions: u64,
    /// Bytes evicted.
    pub evicted_bytes: u64,
    /// Opens for reading served by a fast-tier copy.
    pub restart_hits: u64,
    /// Opens for reading of checkpoint files served by the capacity tier.
    pub restart_misses: u64,
    /// Bytes read from fast-tier copies.
    pub hit_bytes: u64,
    /// Bytes of checkpoint files read from the capacity tier.
    pub miss_bytes: u64,
    /// New checkpoints that waited in their job's queue.
    pub admission_waits: u64,
    /// Waits that ran out (the checkpoint went ahead anyway).
    pub admission_timeouts: u64,
    /// Nanoseconds spent waiting for admission.
    pub admission_wait_ns: u64,
    /// Nanoseconds writers spent waiting for the write throttle.
    pub throttle_ns: u64,
    /// Copies found in the staging directory at open.
    pub recovered: u64,
}

/// BBOS's checkpoint stager, when on.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CkptStatusView {
    /// The scheme (`BBOS`, `MaxBW`, ...).
    pub scheme: String,
    /// The eviction policy.
    pub eviction: String,
    /// The catalogue.
    pub catalog: String,
    /// This node's id in the catalogue.
    #[serde(default)]
    pub node: String,
    /// Registered jobs.
    pub jobs: usize,
    /// `S`.
    pub capacity_bytes: u64,
    /// The room a new checkpoint is placed in now: `S`, or less when the
    /// fast tier's file system has less free beside the copies (the log's
    /// growth kept out; docs/bbos.md, "A full fast tier").
    #[serde(default)]
    pub room_bytes: u64,
    /// Copies not yet demoted.
    pub staged_files: u64,
    /// Their bytes.
    pub staged_bytes: u64,
    /// Copies kept as a restart cache.
    pub cached_files: u64,
    /// Their bytes.
    pub cached_bytes: u64,
    /// Checkpoint files open for writing.
    pub writers: u64,
    /// Data written so far this planner period.
    pub dwsf_bytes: u64,
    /// The DWPP planned for.
    pub dwpp_bytes: u64,
    /// The plan's pattern (1, 2, 3; 0 for the static threshold).
    pub pattern: u8,
    /// Write cap now, bytes/s (0: none).
    pub write_rate: u64,
    /// Demotion rate now, bytes/s.
    pub demote_rate: u64,
    /// The stager's counters since the mount, as it counts them.
    #[serde(flatten)]
    pub stats: CkptStats,
}

/// LiU's read path, when on. Its counters are the policy's `LiuCounters`
/// copied into a serializable view: the policy crate has no dependencies,
/// serde included (ARCHITECTURE.md, "The rule that keeps one copy of every
/// algorithm"), so the one copy of their names for JSON is here.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LiuStatusView {
    /// Regular segments in the DRAM buffer.
    pub buffered_segments: u64,
    /// Ghost segments.
    pub ghost_segments: u64,
    /// Heads served from the fast tier.
    pub lifted_segments: u64,
    /// Reads served by the buffer.
    pub buffer_hits: u64,
    /// Loads with the head from the fast tier.
    pub lifted_loads: u64,
    /// Loads whole from the capacity tier.
    pub whole_loads: u64,
    /// Direct reads from a lifted head.
    pub head_reads: u64,
    /// Direct reads from the capacity tier.
    pub capacity_reads: u64,
    /// Heads lifted.
    pub lifts: u64,
    /// Heads de-lifted.
    pub delifts: u64,
    /// Segments or heads dropped by capacity writes.
    pub invalidations: u64,
    /// Bytes read from lifted heads.
    pub head_bytes_read: u64,
    /// Lifted segments whose body is on the fast tier too.
    #[serde(default)]
    pub lifted_bodies: u64,
    /// Bytes read from lifted bodies.
    #[serde(default)]
    pub body_bytes_read: u64,
    /// Bytes loads left unread because direct reads had read them.
    #[serde(default)]
    pub load_bytes_skipped: u64,
    /// Recorded localities by tenth (11 buckets, the last exactly 1.0).
    pub locality_histogram: Vec<u64>,
    /// Failed part loads and lifts.
    pub errors: u64,
    /// The last of those.
    pub last_error: Option<String>,
    /// Times a file's capacity loads were held for other readers
    /// (docs/liu.md, "The disk's time").
    #[serde(default)]
    pub time_share_holds: u64,
    /// The total of those holds, in seconds.
    #[serde(default)]
    pub time_share_held_s: f64,
    /// Per-file counters of the busiest files (docs/liu.md, "Two readers").
    #[serde(default)]
    pub files: Vec<LiuFileView>,
}

/// One file's LiU counters (the policy's `FileCounters`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LiuFileView {
    /// The file's path under the mount.
    pub path: String,
    /// Reads served by the buffer.
    pub buffer_hits: u64,
    /// Loads (head from the fast tier or whole).
    pub loads: u64,
    /// Direct reads.
    pub direct_reads: u64,
    /// Direct reads of a lifted segment not loaded: they did not enter it
    /// at its head.
    pub lagging_reads: u64,
    /// Strong reads not loaded: the load would have evicted a segment of
    /// the same file not yet read.
    #[serde(default)]
    pub refused_loads: u64,
    /// Segments evicted.
    pub evictions: u64,
    /// Of those, evicted by another file's load.
    pub evicted_by_other: u64,
    /// Of those, evicted before most of the segment was read.
    pub evicted_unread: u64,
    /// Loads started ahead of a reader, the segment after one it loaded.
    #[serde(default)]
    pub read_aheads: u64,
    /// Heads lifted.
    pub lifts: u64,
}

/// One tier's description and space.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TierStatus {
    /// What the backend is (`posix /path`, `emulated hdd over ...`).
    pub describe: String,
    /// Total bytes (0 when unknown).
    pub total_bytes: u64,
    /// Free bytes.
    pub free_bytes: u64,
    /// `healthy`, `read-only` or `lost` (`sluice_env::TierHealth`; docs/
    /// crash-consistency.md, "Capacity-tier faults").
    #[serde(default = "healthy")]
    pub state: String,
    /// What was found, unless healthy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_cause: Option<String>,
    /// Since when (UTC, RFC 3339), unless healthy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_since: Option<String>,
}

fn healthy() -> String {
    "healthy".to_string()
}

impl Default for TierStatus {
    fn default() -> TierStatus {
        TierStatus {
            describe: String::new(),
            total_bytes: 0,
            free_bytes: 0,
            state: healthy(),
            state_cause: None,
            state_since: None,
        }
    }
}

/// A snapshot of a running mount.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Status {
    /// The mount point.
    pub mountpoint: String,
    /// The fast tier.
    pub fast: TierStatus,
    /// The capacity tier.
    pub capacity: TierStatus,
    /// Redirection policy.
    pub policy: String,
    /// `fast` or `capacity`: where new streams go.
    pub route: String,
    /// Last stream's random fraction.
    pub last_random_fraction: Option<f64>,
    /// Threshold it was judged against.
    pub threshold: f64,
    /// Streams classified / routed to the fast tier.
    pub streams: u64,
    /// Streams routed to the fast tier.
    pub streams_to_fast: u64,
    /// Under `cost`: requests sent to the fast tier because the capacity
    /// tier's streams were held by other files.
    #[serde(default)]
    pub disk_deferred_requests: u64,
    /// Under `cost` where closes leave bytes in the log: files' first
    /// requests sent to the fast tier as the disk's positioning for a new
    /// file.
    #[serde(default)]
    pub new_file_requests: u64,
    /// Under `cost`: the capacity tier's seek the model charges, µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_seek_us: Option<u64>,
    /// The capacity tier's positioning time fitted to the write-backs'
    /// traffic, µs (docs/policy.md, "The model kept current"); `None`
    /// until the fit gives one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_fit_seek_us: Option<u64>,
    /// The capacity tier's write rate fitted with it, MB/s, once the fit
    /// pins it (it may know `t_seek` first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_fit_mb_per_s: Option<f64>,
    /// Observations (busy periods of write-backs) behind the fit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_fit_observations: Option<u64>,
    /// Region states in order (`empty`, `filling`, `full`, `flushing`).
    pub regions: Vec<String>,
    /// Used record bytes of each region.
    pub region_used_bytes: Vec<u64>,
    /// Record bytes per region.
    pub region_bytes: u64,
    /// Bytes buffered now.
    pub buffered_bytes: u64,
    /// Seconds since the first record of the oldest region holding
    /// buffered bytes was written (an upper bound on the age of the oldest
    /// buffered byte; recovered records count from the mount); `None` when
    /// nothing is buffered.
    #[serde(default)]
    pub oldest_buffered_age_s: Option<f64>,
    /// Routed to the log by the detector.
    pub fast_bytes: u64,
    /// Written straight to the capacity tier.
    pub capacity_bytes: u64,
    /// Logged because they overlapped buffered bytes.
    pub forced_to_log_bytes: u64,
    /// Went through after waiting for a region.
    pub write_through_bytes: u64,
    /// Writes that waited for a region.
    pub region_waits: u64,
    /// Flushed to the capacity tier.
    pub flushed_bytes: u64,
    /// Buffered bytes a per-file sync wrote to the capacity tier (close
    /// and fsync under close-to-open, `sluice sync`) instead of a flush.
    #[serde(default)]
    pub synced_bytes: u64,
    /// Buffered bytes written back while the capacity tier was idle
    /// (close-to-open's background write-back), beside flushes and syncs.
    #[serde(default)]
    pub written_back_bytes: u64,
    /// Bytes reads were served from the log.
    #[serde(default)]
    pub fast_read_bytes: u64,
    /// Bytes reads asked of the capacity tier (checkpoint-class reads are
    /// BBOS's `hit_bytes` and `miss_bytes`).
    #[serde(default)]
    pub capacity_read_bytes: u64,
    /// Bytes reads were served from clean copies in the log (the clean
    /// cache's hits; its misses are among `capacity_read_bytes`).
    #[serde(default)]
    pub clean_read_bytes: u64,
    /// Bytes of clean copies in the log now.
    #[serde(default)]
    pub cached_bytes: u64,
    /// Clean copies dropped because their capacity file changed behind
    /// them (another node wrote or replaced it).
    #[serde(default)]
    pub cache_stale_drops: u64,
    /// Bytes of the newest log records' payloads kept in memory now
    /// (`log.memory_copy`).
    #[serde(default)]
    pub memory_copy_bytes: u64,
    /// Lookups of a log record (write-back, flush, read) that found its
    /// payload in memory...
    #[serde(default)]
    pub memory_copy_hits: u64,
    /// ... and that read it from the fast tier.
    #[serde(default)]
    pub memory_copy_misses: u64,
    /// On-demand: files this node recalled from another node (an open,
    /// lock, truncate or first write met its held mark).
    #[serde(default)]
    pub recalls: u64,
    /// Those that timed out (ETIMEDOUT after `mount.recall_wait`).
    #[serde(default)]
    pub recall_timeouts: u64,
    /// Seconds they waited, in total.
    #[serde(default)]
    pub recall_wait_s: f64,
    /// Other nodes' recalls this node answered.
    #[serde(default)]
    pub recalls_answered: u64,
    /// On-demand: this node's name in held marks (`None` under the other
    /// modes).
    #[serde(default)]
    pub on_demand_node: Option<String>,
    /// On-demand: where held marks live on the capacity tier, `xattr` or
    /// `sidecar` (`mount.held_mark`, resolved at mount).
    #[serde(default)]
    pub held_mark: Option<String>,
    /// On-demand: files whose held mark this node holds now (their newest
    /// bytes are in its log; other nodes recall them).
    #[serde(default)]
    pub held_files: u64,
    /// Flush rate over the last second.
    pub flush_bytes_per_s: u64,
    /// Regions flushed.
    pub regions_flushed: u64,
    /// A drain is running.
    pub draining: bool,
    /// Failed flush attempts.
    pub flush_errors: u64,
    /// The last flush error.
    pub last_flush_error: Option<String>,
    /// Appends to the log that failed (a full or failing fast tier).
    #[serde(default)]
    pub fast_errors: u64,
    /// The last of them, with its cause.
    #[serde(default)]
    pub last_fast_error: Option<String>,
    /// Bytes written to the capacity tier because an append failed.
    #[serde(default)]
    pub fast_fallback_bytes: u64,
    /// Set at mount when the log regions may not fit the fast tier.
    #[serde(default)]
    pub fast_space_warning: Option<String>,
    /// Corrupt payloads found.
    pub corrupt_payloads: u64,
    /// Records recovered at mount.
    pub recovered_records: u64,
    /// Recovery speed at mount.
    pub recovery_records_per_s: u64,
    /// Files the engine holds open.
    pub open_files: usize,
    /// FUSE reads / bytes.
    pub fuse_reads: u64,
    /// Bytes read through the mount.
    pub fuse_read_bytes: u64,
    /// FUSE writes.
    pub fuse_writes: u64,
    /// Bytes written through the mount.
    pub fuse_write_bytes: u64,
    /// fsync requests.
    pub fuse_fsyncs: u64,
    /// fallocate requests (the ones the kernel passes on: not collapse or
    /// insert, docs/fuse.md).
    #[serde(default)]
    pub fuse_fallocates: u64,
    /// Metadata requests.
    pub fuse_metadata_ops: u64,
    /// Requests answered with an error.
    pub fuse_errors: u64,
    /// Opens the kernel serves itself by FUSE passthrough (`mount.passthrough`).
    #[serde(default)]
    pub fuse_passthrough_opens: u64,
    /// Opens answered with a small file's bytes kept in the kernel's page
    /// cache since its last close (`mount.page_cache`): their reads do
    /// not come to sluice.
    #[serde(default)]
    pub fuse_page_cache_opens: u64,
    /// Small files handed to the kernel's page cache at their last close.
    #[serde(default)]
    pub fuse_page_cache_stores: u64,
    /// LiU's read path, when on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub liu: Option<LiuStatusView>,
    /// BBOS's checkpoint stager, when on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bbos: Option<CkptStatusView>,
    /// Where the most recently written files' bytes went, newest first.
    #[serde(default)]
    pub files: Vec<FileStatusView>,
    /// The newest failures (at most 32, newest first): errors answered to
    /// applications and background failures, with their causes.
    #[serde(default)]
    pub last_errors: Vec<IncidentView>,
    /// Every failure recorded since the mount (kept or not).
    #[serde(default)]
    pub incidents_total: u64,
    /// Files whose recovered bytes were not written back (their capacity
    /// file changed while the node was down), oldest first.
    #[serde(default)]
    pub quarantined: Vec<QuarantineView>,
}

/// One quarantined file (`sluice quarantine list`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct QuarantineView {
    /// The entry's name.
    pub name: String,
    /// The file's path, relative to the mount.
    pub path: String,
    /// Bytes held.
    pub bytes: u64,
    /// Why they were not written back.
    pub reason: String,
}

/// Where one file's written bytes went since the mount.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FileStatusView {
    /// Its name, relative to the mount.
    pub path: String,
    /// Bytes placed in the fast-tier log.
    pub fast_bytes: u64,
    /// Bytes written to the capacity tier.
    pub capacity_bytes: u64,
    /// Where its next write goes (`fast` or `capacity`).
    pub route: String,
}

/// One region's state (`Status::regions`) as one letter, for one-line
/// displays (the demo's progress line, `sluice top`): `f` filling, `F` full,
/// `>` flushing, `.` empty (the first letters of filling, full and flushing
/// are the same).
pub fn region_letter(state: &str) -> char {
    match state {
        "empty" => '.',
        "filling" => 'f',
        "full" => 'F',
        "flushing" => '>',
        _ => '?',
    }
}

impl Status {
    /// One short line for live progress.
    pub fn line(&self) -> String {
        let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
        format!(
            "route {:<8} random {:>5} thr {:>5.2} | to fast {:>7.1} MiB, to capacity {:>7.1} MiB | buffered {:>7.1} MiB, flushed {:>7.1} MiB ({:>5.1} MiB/s) | regions {}",
            self.route,
            self.last_random_fraction
                .map_or_else(|| "-".to_string(), |p| format!("{:.0}%", p * 100.0)),
            self.threshold,
            mib(self.fast_bytes + self.forced_to_log_bytes),
            mib(self.capacity_bytes + self.write_through_bytes),
            mib(self.buffered_bytes),
            mib(self.flushed_bytes),
            mib(self.flush_bytes_per_s),
            self.regions
                .iter()
                .map(|r| region_letter(r))
                .collect::<String>(),
        )
    }

    /// The text of `sluice status`.
    pub fn text(&self) -> String {
        let mib = |b: u64| format!("{:.1} MiB", b as f64 / (1024.0 * 1024.0));
        let mut out = String::new();
        let _ = writeln!(out, "mount       {}", self.mountpoint);
        for (name, t) in [("fast", &self.fast), ("capacity", &self.capacity)] {
            let _ = writeln!(
                out,
                "{name:<11} {} — {} free of {}",
                t.describe,
                mib(t.free_bytes),
                mib(t.total_bytes)
            );
            // Loud: what a lost or read-only tier means for the bytes.
            let since = t.state_since.as_deref().unwrap_or("-");
            let cause = t.state_cause.as_deref().unwrap_or("-");
            match t.state.as_str() {
                "lost" => {
                    let _ = writeln!(
                        out,
                        "  !! {name} tier LOST since {since}: {cause}\n  !! nothing is written to it or flushed; {} stay buffered in the fast tier's log (unmount keeps them there; the next mount recovers them)",
                        mib(self.buffered_bytes)
                    );
                }
                "read-only" => {
                    let _ = writeln!(
                        out,
                        "  !! {name} tier READ-ONLY since {since}: {cause}; changes fail with EROFS{}",
                        if name == "capacity" {
                            format!(
                                ", nothing is flushed: {} stay buffered in the fast tier's log",
                                mib(self.buffered_bytes)
                            )
                        } else {
                            String::new()
                        }
                    );
                }
                _ => {}
            }
        }
        let _ = writeln!(
            out,
            "policy      {}{} — route {}, last stream {} random, threshold {:.3} ({} streams, {} to fast)",
            self.policy,
            self.cost_seek_us.map_or_else(String::new, |us| {
                let fit = self.capacity_fit_seek_us.map_or_else(String::new, |seek| {
                    let rate = self
                        .capacity_fit_mb_per_s
                        .map_or_else(String::new, |rate| format!(", {rate:.0} MB/s"));
                    format!(
                        "; write-backs measure {seek} µs{rate} over {} busy periods",
                        self.capacity_fit_observations.unwrap_or(0)
                    )
                });
                format!(" (capacity seek {us} µs{fit})")
            }),
            self.route,
            self.last_random_fraction
                .map_or_else(|| "-".to_string(), |p| format!("{:.1}%", p * 100.0)),
            self.threshold,
            self.streams,
            self.streams_to_fast
        );
        let regions: Vec<String> = self
            .regions
            .iter()
            .zip(&self.region_used_bytes)
            .enumerate()
            .map(|(i, (s, used))| format!("{i}:{s} {}", mib(*used)))
            .collect();
        let _ = writeln!(
            out,
            "regions     {} of {} each",
            regions.join(", "),
            mib(self.region_bytes)
        );
        let mut disk = String::new();
        if self.disk_deferred_requests > 0 {
            let _ = write!(
                disk,
                "; {} requests to the fast tier while the disk served another file's stream",
                self.disk_deferred_requests
            );
        }
        if self.new_file_requests > 0 {
            let _ = write!(
                disk,
                "; {} new files' first requests to the fast tier",
                self.new_file_requests
            );
        }
        let _ = writeln!(
            out,
            "routed      fast {}, capacity {}, forced to log {}, written through {}{disk}",
            mib(self.fast_bytes),
            mib(self.capacity_bytes),
            mib(self.forced_to_log_bytes),
            mib(self.write_through_bytes),
        );
        for f in self.files.iter().take(8) {
            let _ = writeln!(
                out,
                "  {:<40} fast {}, capacity {}, route {}",
                f.path,
                mib(f.fast_bytes),
                mib(f.capacity_bytes),
                f.route
            );
        }
        let _ = writeln!(
            out,
            "flush       buffered {}{}, flushed {} ({} regions), {}/s{}{}",
            mib(self.buffered_bytes),
            self.oldest_buffered_age_s
                .map_or_else(String::new, |age| format!(
                    " (oldest written {age:.1} s ago)"
                )),
            mib(self.flushed_bytes),
            self.regions_flushed,
            mib(self.flush_bytes_per_s),
            [
                (
                    self.synced_bytes,
                    "synced",
                    "by close, fsync or sluice sync"
                ),
                (
                    self.written_back_bytes,
                    "written back",
                    "while the capacity tier was idle"
                ),
            ]
            .iter()
            .filter(|(bytes, _, _)| *bytes > 0)
            .map(|(bytes, what, how)| format!("; {what} {} {how}", mib(*bytes)))
            .collect::<String>(),
            if self.draining { ", draining" } else { "" }
        );
        let _ = writeln!(
            out,
            "cache       clean {} in the log; reads: {} clean hits, {} from the capacity tier, {} from buffered bytes{}",
            mib(self.cached_bytes),
            mib(self.clean_read_bytes),
            mib(self.capacity_read_bytes),
            mib(self.fast_read_bytes),
            if self.cache_stale_drops > 0 {
                format!(
                    "; {} files' copies dropped (changed behind them)",
                    self.cache_stale_drops
                )
            } else {
                String::new()
            }
        );
        let lookups = self.memory_copy_hits + self.memory_copy_misses;
        if self.memory_copy_bytes > 0 || lookups > 0 {
            let _ = writeln!(
                out,
                "memory      {} of the newest records; {} of {} record lookups found them there",
                mib(self.memory_copy_bytes),
                self.memory_copy_hits,
                lookups
            );
        }
        if let Some(node) = &self.on_demand_node {
            let mark = match self.held_mark.as_deref() {
                Some("sidecar") => "sidecar entries in .sluice/held",
                Some(_) => "xattrs",
                None => "marks",
            };
            let _ = writeln!(
                out,
                "held        {} files held by this node ({node}; on-demand, {mark}: other nodes recall them)",
                self.held_files
            );
        }
        if self.recalls + self.recalls_answered > 0 {
            let _ = writeln!(
                out,
                "recalls     {} from other nodes ({} timed out, {:.3} s waited in all), {} answered for them",
                self.recalls, self.recall_timeouts, self.recall_wait_s, self.recalls_answered
            );
        }
        let _ = writeln!(
            out,
            "requests    {} reads ({}), {} writes ({}), {} fsyncs, {} fallocates, {} metadata, {} errors{}",
            self.fuse_reads,
            mib(self.fuse_read_bytes),
            self.fuse_writes,
            mib(self.fuse_write_bytes),
            self.fuse_fsyncs,
            self.fuse_fallocates,
            self.fuse_metadata_ops,
            self.fuse_errors,
            [
                (self.fuse_passthrough_opens, "opens by passthrough"),
                (self.fuse_page_cache_opens, "opens from the page cache"),
            ]
            .iter()
            .filter(|(n, _)| *n > 0)
            .map(|(n, what)| format!("; {n} {what}"))
            .collect::<String>()
        );
        let _ = writeln!(
            out,
            "errors      {} flush errors{}, {} corrupt payloads; recovered {} records at mount",
            self.flush_errors,
            self.last_flush_error
                .as_ref()
                .map_or_else(String::new, |e| format!(" (last: {e})")),
            self.corrupt_payloads,
            self.recovered_records
        );
        if self.fast_errors > 0 {
            let _ = writeln!(
                out,
                "fast tier   {} failed appends, {} written to the capacity tier instead{}",
                self.fast_errors,
                mib(self.fast_fallback_bytes),
                self.last_fast_error
                    .as_ref()
                    .map_or_else(String::new, |e| format!(" (last: {e})")),
            );
        }
        if !self.quarantined.is_empty() {
            let _ = writeln!(
                out,
                "quarantine  {} files not written back at recovery, {} (sluice quarantine list --fast FAST, FAST the fast tier's directory)",
                self.quarantined.len(),
                mib(self.quarantined.iter().map(|q| q.bytes).sum()),
            );
            for q in self.quarantined.iter().take(8) {
                let _ = writeln!(out, "  {}  {}: {}", q.name, q.path, q.reason);
            }
        }
        if let Some(warning) = &self.fast_space_warning {
            let _ = writeln!(out, "warning     {warning}");
        }
        if let Some(l) = &self.liu {
            let _ = writeln!(
                out,
                "liu         {} buffered, {} lifted ({} whole; {} lifts, {} de-lifts, {} invalidations); {} buffer hits, loads {} head-from-fast / {} whole, direct {} head / {} capacity; {} read from heads, {} from bodies, {} not re-read by loads; {} loads held for other readers ({:.1} s); {} errors{}",
                l.buffered_segments,
                l.lifted_segments,
                l.lifted_bodies,
                l.lifts,
                l.delifts,
                l.invalidations,
                l.buffer_hits,
                l.lifted_loads,
                l.whole_loads,
                l.head_reads,
                l.capacity_reads,
                mib(l.head_bytes_read),
                mib(l.body_bytes_read),
                mib(l.load_bytes_skipped),
                l.time_share_holds,
                l.time_share_held_s,
                l.errors,
                l.last_error
                    .as_ref()
                    .map_or_else(String::new, |e| format!(" (last: {e})")),
            );
        }
        if let Some(b) = &self.bbos {
            let _ = writeln!(
                out,
                "bbos        {} ({} eviction), {} jobs, catalogue {} (node {}); S {} (room now {}): {} staged ({}), {} cached ({}); pattern {}, DWSF {} of DWPP {}; {} checkpoints ({} cold to capacity, {} spilled, {} without catalogue, {} moved when the fast tier was full), {} demoted ({}), {} evicted; restarts {} hits / {} misses; {} admission waits ({} timed out); {} errors{}",
                b.scheme,
                b.eviction,
                b.jobs,
                b.catalog,
                b.node,
                mib(b.capacity_bytes),
                mib(b.room_bytes),
                b.staged_files,
                mib(b.staged_bytes),
                b.cached_files,
                mib(b.cached_bytes),
                b.pattern,
                mib(b.dwsf_bytes),
                mib(b.dwpp_bytes),
                b.stats.checkpoints,
                b.stats.cold_direct,
                b.stats.spills,
                b.stats.catalog_fallbacks,
                b.stats.full_moves,
                b.stats.demotions,
                mib(b.stats.demoted_bytes),
                b.stats.evictions,
                b.stats.restart_hits,
                b.stats.restart_misses,
                b.stats.admission_waits,
                b.stats.admission_timeouts,
                b.stats.demotion_errors + b.stats.catalog_errors,
                b.stats.last_error
                    .as_ref()
                    .map_or_else(String::new, |e| format!(" (last: {e})")),
            );
        }
        if self.incidents_total > 0 {
            let _ = writeln!(
                out,
                "last errors {} since the mount, newest first:",
                self.incidents_total
            );
            for incident in &self.last_errors {
                let _ = writeln!(out, "{}", incident.line());
            }
        } else {
            let _ = writeln!(out, "last errors none");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The stager's counters are the engine's `CkptStats`, serialized
    /// flat into the `bbos` object (one definition, no copy), and an
    /// answer missing some of them (an older mount) still reads.
    #[test]
    fn checkpoint_counters_are_the_engines_serialized_flat() {
        let view = CkptStatusView {
            staged_bytes: 7,
            stats: CkptStats {
                staged_written_bytes: 11,
                throttle_ns: 2_000_000_000,
                ..CkptStats::default()
            },
            ..CkptStatusView::default()
        };
        let json: serde_json::Value = serde_json::to_value(&view).unwrap();
        assert_eq!(json["staged_bytes"], 7);
        assert_eq!(json["staged_written_bytes"], 11);
        assert_eq!(json["throttle_ns"], 2_000_000_000u64);
        assert!(json.get("stats").is_none(), "{json}");
        let mut older = json.clone();
        let fields = older.as_object_mut().unwrap();
        fields.remove("demoted_bytes");
        fields.remove("published_bytes");
        fields.insert("checkpoints".into(), 3.into());
        let old: CkptStatusView = serde_json::from_value(older).unwrap();
        assert_eq!(old.stats.checkpoints, 3);
        assert_eq!(old.stats.staged_written_bytes, 11);
        assert_eq!(old.stats.demoted_bytes, 0);
    }

    /// A status from a mount that predates the fields sluice top added
    /// still reads (no age, no synced or read bytes),
    /// and a status with buffered bytes says how old the oldest are.
    #[test]
    fn the_oldest_buffered_age_is_optional_and_shown() {
        let mut json = serde_json::to_value(Status::default()).unwrap();
        for added in [
            "oldest_buffered_age_s",
            "synced_bytes",
            "fast_read_bytes",
            "capacity_read_bytes",
        ] {
            assert!(json.as_object_mut().unwrap().remove(added).is_some());
        }
        let old: Status = serde_json::from_value(json).unwrap();
        assert_eq!(old.oldest_buffered_age_s, None);
        assert_eq!(
            (
                old.synced_bytes,
                old.fast_read_bytes,
                old.capacity_read_bytes
            ),
            (0, 0, 0)
        );
        assert!(!old.text().contains("oldest written"));
        let status = Status {
            buffered_bytes: 4096,
            oldest_buffered_age_s: Some(12.34),
            ..Status::default()
        };
        let back: Status = serde_json::from_str(&serde_json::to_string(&status).unwrap()).unwrap();
        assert_eq!(back.oldest_buffered_age_s, Some(12.34));
        assert!(
            status.text().contains("(oldest written 12.3 s ago)"),
            "{}",
            status.text()
        );
    }

    /// Issue 34: the held line says where marks live, and a status from a
    /// mount before `held_mark` still reads.
    #[test]
    fn the_held_line_says_where_marks_live() {
        let status = Status {
            on_demand_node: Some("n1".into()),
            held_files: 2,
            held_mark: Some("sidecar".into()),
            ..Status::default()
        };
        assert!(
            status.text().contains(
                "2 files held by this node (n1; on-demand, sidecar entries in .sluice/held:"
            ),
            "{}",
            status.text()
        );
        let mut json = serde_json::to_value(&status).unwrap();
        assert_eq!(json["held_mark"], "sidecar");
        json.as_object_mut().unwrap().remove("held_mark");
        let old: Status = serde_json::from_value(json).unwrap();
        assert_eq!(old.held_mark, None);
        let xattr = Status {
            held_mark: Some("xattr".into()),
            ..status
        };
        assert!(
            xattr.text().contains("(n1; on-demand, xattrs:"),
            "{}",
            xattr.text()
        );
    }

    /// The demo's progress line tells the region states apart (filling,
    /// full and flushing used to be one `f` each).
    #[test]
    fn the_progress_line_gives_each_region_state_its_own_letter() {
        let status = Status {
            regions: ["filling", "full", "empty", "flushing"]
                .map(String::from)
                .to_vec(),
            ..Status::default()
        };
        assert!(
            status.line().ends_with("| regions fF.>"),
            "{}",
            status.line()
        );
    }
}
