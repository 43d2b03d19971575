//! The engine's configuration, counters and status snapshot.

use std::collections::HashMap;
use std::io;
use std::num::NonZeroU64;
use std::sync::Arc;
use std::time::Duration;

use sluice_env::{Backend, RelPath};
use sluice_policy::flush_gate::FlushGateConfig;
use sluice_policy::pipeline::{RegionState, WhenFull};
use sluice_policy::redirector::{RedirectPolicy, RedirectorConfig};
use sluice_policy::{FileId, Tier};

use crate::log::record_len;

/// Engine configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct EngineConfig {
    /// Traffic detection and redirection.
    pub redirector: RedirectorConfig,
    /// Log regions (at least 2).
    pub regions: u32,
    /// Bytes of records per region (the region file is this plus its header).
    pub region_bytes: u64,
    /// What a write routed to a full fast tier does.
    pub when_full: WhenFull,
    /// Longest wait for a free region before writing through.
    pub wait_max: Duration,
    /// The traffic-aware flush gate.
    pub flush_gate: FlushGateConfig,
    /// Largest merged write of a flush.
    pub flush_run_max_bytes: u64,
    /// Writes larger than this are appended as several records.
    pub record_max_bytes: u32,
    /// Bytes of the newest records' payloads kept in memory as they are
    /// appended (mirror.rs; docs/engine.md, "The memory copy"): write-backs,
    /// flushes and reads of them copy from memory instead of the fast
    /// tier. 0: none.
    pub memory_copy_bytes: u64,
    /// Cap on the flusher's write rate to the capacity tier, bytes per
    /// second (`None`: as fast as the tier takes them). Applies to drains
    /// too: the cap protects a shared capacity tier, whoever asks.
    pub flush_bandwidth: Option<NonZeroU64>,
    /// Flush writes in flight at once (at least 1): the capacity device
    /// queues and merges them, so contiguous data drains at its
    /// sequential speed.
    pub flush_writers: u32,
    /// Write files' buffered bytes back once no foreground write reached
    /// the capacity tier for this long (close-to-open: a close then finds
    /// little left to write); each pass ends in a clean record
    /// (docs/engine.md, "Write-back"). `None` (the default here): never;
    /// the config sets it under close-to-open.
    pub write_back_idle: Option<Duration>,
    /// When a close (or an unlock) of a file syncs its capacity file for
    /// bytes written straight to it, by this engine or by the kernel
    /// through passthrough ([`CloseSync`]). Bytes that leave the log at a
    /// close are always synced first.
    pub close_sync: CloseSync,
    /// Under `cost`: route with the capacity tier's `t_seek` fitted to the
    /// write-backs' traffic once it moves away from the configured one
    /// (`policy.cost_profile = "auto"`; docs/policy.md, "The model kept
    /// current"). Off: the configured `t_seek` stays.
    pub cost_seek_from_traffic: bool,
    /// `mount.consistency = "on-demand"`: files are marked as held by this
    /// node on the capacity tier before their first byte is buffered, and
    /// other nodes recall them (held.rs; docs/fuse.md, "On demand").
    /// `None`: no marks, no recalls.
    pub on_demand: Option<OnDemand>,
}

/// The on-demand mode's settings (docs/fuse.md, "On demand").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OnDemand {
    /// This node's name in marks and recall entries; `None`: the
    /// catalogue's node id kept in `FAST/ckpt/node-id` (generated once).
    pub node: Option<String>,
    /// Longest wait of an open, lock or first buffered write for another
    /// node to give a file back; then ETIMEDOUT.
    pub recall_wait: Duration,
    /// The shared catalogue's recall doorbell (Redis), if there is one.
    pub doorbell: Option<Doorbell>,
    /// Where held marks live on the capacity tier (`mount.held_mark`).
    pub mark: HeldMark,
}

/// `mount.held_mark`: where a file's held mark lives on the capacity tier
/// (marks.rs; docs/fuse.md, "On demand"). The first node to mount a tier
/// records the store it chose there, and every other node must agree.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HeldMark {
    /// The xattr where the capacity tier keeps user xattrs, else a
    /// sidecar entry; or whichever the tier records.
    #[default]
    Auto,
    /// The xattr `user.sluice.held`; the mount is refused on a tier that
    /// keeps no user xattrs.
    Xattr,
    /// A sidecar entry `.sluice/held/INO` on the capacity tier.
    Sidecar,
}

/// A recall doorbell through the shared catalogue (docs/fuse.md, "On
/// demand"): a requester that writes a recall entry rings the holder's
/// doorbell with its name, and the holder takes its doorbell every
/// tick of its recall thread and lists its entry directory seldom.
#[derive(Clone)]
pub struct Doorbell(pub Arc<dyn sluice_catalog::Catalog>);

impl std::fmt::Debug for Doorbell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Doorbell({})", self.0.describe())
    }
}

impl PartialEq for Doorbell {
    fn eq(&self, other: &Doorbell) -> bool {
        std::ptr::addr_eq(Arc::as_ptr(&self.0), Arc::as_ptr(&other.0))
    }
}

impl Eq for Doorbell {}

/// `mount.close_sync`: whether a close-to-open close (or unlock) syncs the
/// capacity file for bytes written straight to it, which never were in
/// the log (docs/fuse.md, "Many nodes"). An fsync always syncs; bytes a
/// close writes back from the log are synced before they leave it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CloseSync {
    /// [`CloseSync::Written`] where the capacity tier is a file system
    /// local to this host ([`Backend::page_cache_shared`]), else
    /// [`CloseSync::Always`].
    #[default]
    Auto,
    /// Every close of a file written since its last sync syncs it: durable
    /// at close, and seen by the clients of a network file system that
    /// hold written bytes until a flush.
    Always,
    /// Only bytes a close writes back from the log are synced; bytes
    /// written straight to the capacity file are seen by every client of
    /// a coherent file system once written (a local one's page cache;
    /// Lustre or GPFS by their locks) and durable at the next fsync, as
    /// that file system promises on its own.
    Written,
}

impl CloseSync {
    /// Whether a close syncs bytes written straight to `capacity`.
    pub fn syncs_straight_writes(self, capacity: &dyn Backend) -> bool {
        match self {
            CloseSync::Auto => !capacity.page_cache_shared(),
            CloseSync::Always => true,
            CloseSync::Written => false,
        }
    }
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            // sluice's own rule is the product's default; the crate's
            // RedirectorConfig default stays the paper's SSDUP+.
            redirector: RedirectorConfig {
                policy: RedirectPolicy::COST,
                ..RedirectorConfig::default()
            },
            regions: 2,
            region_bytes: 256 * 1024 * 1024,
            when_full: WhenFull::Wait,
            wait_max: Duration::from_secs(1),
            flush_gate: FlushGateConfig {
                flush_age: Some(Duration::from_secs(30)),
                hold_while_writing: true,
                ..FlushGateConfig::default()
            },
            flush_run_max_bytes: 4 * 1024 * 1024,
            flush_writers: 4,
            record_max_bytes: 1024 * 1024,
            memory_copy_bytes: 256 * 1024 * 1024,
            flush_bandwidth: None,
            write_back_idle: None,
            close_sync: CloseSync::Auto,
            cost_seek_from_traffic: false,
            on_demand: None,
        }
    }
}

impl EngineConfig {
    /// Check the ranges; errors say which key and what it must be.
    pub fn validate(&self) -> io::Result<()> {
        let invalid = |m: String| Err(io::Error::new(io::ErrorKind::InvalidInput, m));
        if self.regions < 2 {
            return invalid(format!(
                "regions = {}: at least 2, so one region fills while another flushes",
                self.regions
            ));
        }
        if self.record_max_bytes == 0 || self.flush_run_max_bytes == 0 || self.flush_writers == 0 {
            return invalid(
                "record_max_bytes, flush_run_max_bytes and flush_writers must be above 0".into(),
            );
        }
        // A record and the path record before it must fit in a region.
        let largest =
            record_len(self.record_max_bytes) + record_len(crate::log::MAX_PATH_BYTES as u32);
        if self.region_bytes < largest {
            return invalid(format!(
                "region_bytes = {}: must hold the largest record and a path ({largest} B); \
                 raise region_bytes or lower record_max_bytes",
                self.region_bytes
            ));
        }
        if let Some(on_demand) = &self.on_demand {
            if on_demand.recall_wait.is_zero() {
                return invalid("recall_wait must be above 0".into());
            }
            if let Some(node) = &on_demand.node {
                crate::ckpt::check_node_id(node)
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
            }
        }
        self.redirector
            .validate()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))
    }
}

/// Counters for `sluice status` and metrics.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EngineStats {
    /// Bytes of writes appended to the log because the detector routed them there.
    pub fast_bytes: u64,
    /// Bytes written straight to the capacity tier.
    pub capacity_bytes: u64,
    /// Bytes routed to the capacity tier but appended to the log because
    /// they overlapped buffered bytes.
    pub forced_to_log_bytes: u64,
    /// Bytes that waited too long for a region and went to the capacity tier.
    pub write_through_bytes: u64,
    /// Writes that waited for a free region.
    pub waits: u64,
    /// Regions flushed and reset.
    pub regions_flushed: u64,
    /// Bytes written to the capacity tier by the flusher.
    pub flushed_bytes: u64,
    /// Flush attempts that failed (the region stays buffered and is retried).
    pub flush_errors: u64,
    /// The last flush error, with the path.
    pub last_flush_error: Option<String>,
    /// Appends to the log that failed (the fast tier's file system full,
    /// or an I/O error): each closed its region and sent data writes to
    /// the capacity tier for a while.
    pub fast_errors: u64,
    /// The last of them, with its cause.
    pub last_fast_error: Option<String>,
    /// Bytes written to the capacity tier because an append to the log
    /// failed (counted in `fast_bytes` too when the log had placed them).
    pub fast_fallback_bytes: u64,
    /// Set at start when the configured regions may not fit the fast
    /// tier's free space.
    pub fast_space_warning: Option<String>,
    /// Files whose recovered bytes were quarantined at start, because
    /// their capacity file was deleted, replaced or modified meanwhile.
    pub quarantined_files: u64,
    /// Records recovered at start.
    pub recovered_records: u64,
    /// Recovery speed at start, records per second.
    pub recovery_records_per_s: u64,
    /// Regions whose log ended in a torn tail at start.
    pub torn_tails: u64,
    /// Corrupt byte ranges found at start (reported, never served).
    pub corrupt_ranges: u64,
    /// Payloads whose checksum failed on read or flush (never served).
    pub corrupt_payloads: u64,
    /// Write streams classified by the detector.
    pub streams: u64,
    /// Streams routed to the fast tier.
    pub streams_to_fast: u64,
    /// Buffered bytes a per-file sync wrote to the capacity tier (`sluice
    /// sync`, and close and fsync under close-to-open) instead of a flush;
    /// they leave the log's index then.
    pub synced_bytes: u64,
    /// Buffered bytes written back while the capacity tier was idle
    /// (`flush.write_back_idle`, close-to-open); they leave the index then.
    pub written_back_bytes: u64,
    /// Bytes reads were served from the log (buffered bytes).
    pub fast_read_bytes: u64,
    /// Bytes reads asked of the capacity tier (counted when asked: a read
    /// that fails counts too): the clean cache's misses among them.
    pub capacity_read_bytes: u64,
    /// Bytes reads were served from clean copies in the log (the clean
    /// cache's hits: written back, still in their region).
    pub clean_read_bytes: u64,
    /// Bytes of clean copies now (a gauge).
    pub cached_bytes: u64,
    /// Clean copies dropped because their capacity file changed behind
    /// them (another node's write, another inode, a changed size or time).
    pub cache_stale_drops: u64,
    /// Bytes of the newest records' payloads kept in memory now (a
    /// gauge; `log.memory_copy`, mirror.rs).
    pub memory_copy_bytes: u64,
    /// Lookups of a record by a write-back, flush or read that found its
    /// payload in memory (no read of the fast tier)...
    pub memory_copy_hits: u64,
    /// ... and that read it from the fast tier.
    pub memory_copy_misses: u64,
    /// On-demand: opens, locks, truncates and first writes that found
    /// another node's held mark and recalled the file (held.rs).
    pub recalls: u64,
    /// Those that ended in ETIMEDOUT after `recall_wait`.
    pub recall_timeouts: u64,
    /// Time they waited, in total (their mean is the recall latency).
    pub recall_wait_ns: u64,
    /// Other nodes' recalls this node answered: a file written back and
    /// its mark removed.
    pub recalls_answered: u64,
}

/// Where the engine stands now: for `sluice status` and metrics.
#[derive(Clone, Debug, PartialEq)]
pub struct EngineStatus {
    /// The counters.
    pub stats: EngineStats,
    /// The redirection policy's name.
    pub policy: &'static str,
    /// Where new streams go now.
    pub route: Tier,
    /// The last completed stream's random percentage (0–1).
    pub last_percentage: Option<f64>,
    /// The threshold the last stream was judged against.
    pub threshold: f64,
    /// Each region's state and used record bytes.
    pub regions: Vec<(RegionState, u64)>,
    /// Record bytes per region.
    pub region_bytes: u64,
    /// Bytes buffered in the log (live extents).
    pub buffered_bytes: u64,
    /// Files the engine holds open.
    pub open_files: usize,
    /// A drain is in progress.
    pub draining: bool,
    /// How long ago the first record of the oldest region holding
    /// buffered bytes was written: an upper bound on the age of the oldest
    /// buffered byte (that record may have been overwritten or synced
    /// since); recovered records count from the mount. `None` when nothing
    /// is buffered.
    pub oldest_buffered_age: Option<Duration>,
    /// Where the most recently written files' bytes went (at most
    /// [`FILES_PLACED_MAX`], newest first).
    pub files: Vec<FilePlacement>,
    /// The capacity tier's health (docs/crash-consistency.md,
    /// "Capacity-tier faults"): nothing is flushed unless healthy.
    pub capacity_health: sluice_env::TierHealth,
    /// Under `cost`: requests sent to the fast tier because the capacity
    /// tier's streams were held by other files (docs/policy.md).
    pub disk_deferred_requests: u64,
    /// Under `cost` with `new_file_seeks`: files' first requests sent to
    /// the fast tier as the disk's positioning for a new file
    /// (docs/policy.md, "A new file").
    pub new_file_requests: u64,
    /// Under `cost`: the capacity tier's seek the model charges
    /// (`policy.cost_seek`, measured at mount when left at the default,
    /// and kept current from the write-backs under `cost_profile = "auto"`).
    pub cost_seek: Option<Duration>,
    /// The capacity tier's `t_seek` and rate fitted to the write-backs'
    /// traffic (traffic.rs), once the fit gives one.
    pub capacity_fit: Option<sluice_policy::seek_fit::SeekEstimate>,
}

/// Files whose placed bytes [`EngineStatus::files`] keeps.
pub const FILES_PLACED_MAX: usize = 64;

/// Where one file's written bytes went since the mount.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FilePlacement {
    /// Its name (at its last write).
    pub path: String,
    /// Bytes placed in the log.
    pub fast_bytes: u64,
    /// Bytes written to the capacity tier.
    pub capacity_bytes: u64,
    /// Where its next write goes now.
    pub route: Tier,
    /// Order of its last write (larger: later).
    last_write: u64,
}

/// The placed bytes of the files written most recently.
#[derive(Debug, Default)]
pub(super) struct Placements {
    files: HashMap<FileId, FilePlacement>,
    writes: u64,
}

impl Placements {
    /// `len` bytes of `file` (named `path`) went to `tier`.
    pub(super) fn add(&mut self, file: FileId, path: &RelPath, tier: Tier, len: u64) {
        self.writes += 1;
        if !self.files.contains_key(&file) && self.files.len() >= FILES_PLACED_MAX {
            let stalest = self.files.iter().min_by_key(|(_, p)| p.last_write);
            if let Some(&id) = stalest.map(|(id, _)| id) {
                self.files.remove(&id);
            }
        }
        let placed = self.files.entry(file).or_insert_with(|| FilePlacement {
            path: String::new(),
            fast_bytes: 0,
            capacity_bytes: 0,
            route: tier,
            last_write: 0,
        });
        if placed.path != path.as_str() {
            placed.path = path.to_string();
        }
        match tier {
            Tier::Fast => placed.fast_bytes += len,
            Tier::Capacity => placed.capacity_bytes += len,
        }
        placed.last_write = self.writes;
    }

    /// Newest first, each with its route from `route_of`.
    pub(super) fn snapshot(&self, route_of: impl Fn(FileId) -> Tier) -> Vec<FilePlacement> {
        let mut files: Vec<(FileId, FilePlacement)> =
            self.files.iter().map(|(&f, p)| (f, p.clone())).collect();
        files.sort_by_key(|(_, p)| std::cmp::Reverse(p.last_write));
        files
            .into_iter()
            .map(|(f, mut p)| {
                p.route = route_of(f);
                p
            })
            .collect()
    }
}
