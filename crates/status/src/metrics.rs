//! The one definition of every metric a mount exports: [`METRICS`], a
//! table of name (as scraped, counters with their `_total`), kind, help,
//! labels, and where the samples come from (`read`: a function of the
//! [`Status`] snapshot, the one `sluice status` shows and `sluice status
//! --json` prints, so nothing is counted twice). The Prometheus exposition
//! (`sluice-daemon`'s `metrics`, through prometheus-client) and the table of
//! docs/metrics.md ([`markdown_table`]) are drawn from it; a new metric is
//! one entry here, read from a field the mount already reports.
//!
//! Invariants (tested): names are unique and start with `sluice_`; every
//! counter's name ends in `_total` and no gauge's does (prometheus-client
//! appends `_total` to a counter family's samples, so the family is
//! declared without it and the scraped name is exactly the one here); no
//! counter `x_total` beside a gauge `x` (one family); `read` returns one
//! value per label value, in the order of [`Labels::values`], or `None`
//! while the metric does not apply (LiU or BBOS off, no stream classified
//! yet). docs/metrics.md's table is [`markdown_table`].

use crate::snapshot::{CkptStats, CkptStatusView, LiuStatusView, Status};

/// Counter or gauge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up (from the mount's start); use `rate()`.
    Counter,
    /// A level now.
    Gauge,
}

impl Kind {
    /// As Prometheus names it.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
        }
    }
}

/// A metric's one label and the values it takes.
#[derive(Clone, Copy, Debug)]
pub struct Labels {
    /// The label's name (`state`, `tier`, ...).
    pub key: &'static str,
    /// Every value it takes, in the order `read` returns the samples.
    pub values: &'static [&'static str],
}

/// One sample's value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value {
    /// A count of bytes, events or things.
    Int(u64),
    /// A fraction, a threshold or seconds.
    Real(f64),
}

/// One metric, declared once.
#[derive(Clone, Copy, Debug)]
pub struct Metric {
    /// The name as scraped (`sluice_flushed_bytes_total`).
    pub name: &'static str,
    /// Counter or gauge.
    pub kind: Kind,
    /// `# HELP` and the meaning column of docs/metrics.md.
    pub help: &'static str,
    /// The label, if the metric has one.
    pub labels: Option<Labels>,
    /// The samples now, one per label value; `None`: not exported now.
    pub read: fn(&Status) -> Option<Vec<Value>>,
}

fn int(v: u64) -> Option<Vec<Value>> {
    Some(vec![Value::Int(v)])
}

fn ints<const N: usize>(v: [u64; N]) -> Option<Vec<Value>> {
    Some(v.into_iter().map(Value::Int).collect())
}

fn liu(s: &Status, f: fn(&LiuStatusView) -> Vec<u64>) -> Option<Vec<Value>> {
    s.liu
        .as_ref()
        .map(|l| f(l).into_iter().map(Value::Int).collect())
}

fn bbos(s: &Status, f: fn(&CkptStatusView) -> Vec<u64>) -> Option<Vec<Value>> {
    s.bbos
        .as_ref()
        .map(|b| f(b).into_iter().map(Value::Int).collect())
}

const REGION_STATES: &[&str] = &["empty", "filling", "full", "flushing"];
const TIERS: &[&str] = &["fast", "capacity"];
/// `sluice_env::TierHealth`'s names, `-` as `_`.
const TIER_STATES: &[&str] = &["healthy", "read_only", "lost"];
const STAGED_CACHED: &[&str] = &["staged", "cached"];
const HIT_MISS: &[&str] = &["hit", "miss"];
/// Tenths of locality; the last bucket is exactly 1.0 (`LiuStatusView::locality_histogram`).
const LOCALITY_BUCKETS: &[&str] = &[
    "0.0-0.1", "0.1-0.2", "0.2-0.3", "0.3-0.4", "0.4-0.5", "0.5-0.6", "0.6-0.7", "0.7-0.8",
    "0.8-0.9", "0.9-1.0", "1.0",
];

const fn label(key: &'static str, values: &'static [&'static str]) -> Option<Labels> {
    Some(Labels { key, values })
}

use Kind::{Counter, Gauge};

/// Every metric of a mount, in the order of the exposition and of
/// docs/metrics.md.
pub const METRICS: &[Metric] = &[
    Metric {
        name: "sluice_routed_fast_bytes_total",
        kind: Counter,
        help: "Bytes the detector routed to the fast-tier log.",
        labels: None,
        read: |s| int(s.fast_bytes),
    },
    Metric {
        name: "sluice_routed_capacity_bytes_total",
        kind: Counter,
        help: "Bytes written straight to the capacity tier.",
        labels: None,
        read: |s| int(s.capacity_bytes),
    },
    Metric {
        name: "sluice_forced_to_log_bytes_total",
        kind: Counter,
        help: "Bytes routed to capacity but logged because they overlapped buffered bytes.",
        labels: None,
        read: |s| int(s.forced_to_log_bytes),
    },
    Metric {
        name: "sluice_write_through_bytes_total",
        kind: Counter,
        help: "Bytes that waited too long for a free region and went to the capacity tier.",
        labels: None,
        read: |s| int(s.write_through_bytes),
    },
    Metric {
        name: "sluice_disk_deferred_requests_total",
        kind: Counter,
        help: "Under cost: write requests sent to the fast tier because the capacity tier's streams were held by other files (docs/policy.md, \"The disk, not only the file\").",
        labels: None,
        read: |s| int(s.disk_deferred_requests),
    },
    Metric {
        name: "sluice_new_file_requests_total",
        kind: Counter,
        help: "Under cost where closes leave bytes in the log: files' first write requests sent to the fast tier, the disk's positioning for a new file paid by the flusher (docs/policy.md, \"A new file\").",
        labels: None,
        read: |s| int(s.new_file_requests),
    },
    Metric {
        name: "sluice_buffered_bytes",
        kind: Gauge,
        help: "Bytes buffered in the fast-tier log now.",
        labels: None,
        read: |s| int(s.buffered_bytes),
    },
    Metric {
        name: "sluice_flushed_bytes_total",
        kind: Counter,
        help: "Bytes the flusher wrote to the capacity tier.",
        labels: None,
        read: |s| int(s.flushed_bytes),
    },
    Metric {
        name: "sluice_written_back_bytes_total",
        kind: Counter,
        help: "Buffered bytes written back while the capacity tier was idle (close-to-open's background write-back, flush.write_back_idle).",
        labels: None,
        read: |s| int(s.written_back_bytes),
    },
    Metric {
        name: "sluice_clean_cache_bytes",
        kind: Gauge,
        help: "Bytes of clean copies in the fast-tier log: written back, still in their region, readable from it until the region is filled again.",
        labels: None,
        read: |s| int(s.cached_bytes),
    },
    Metric {
        name: "sluice_memory_copy_bytes",
        kind: Gauge,
        help: "Bytes of the newest log records' payloads kept in memory (log.memory_copy): write-backs, flushes and reads of them copy from memory instead of the fast tier.",
        labels: None,
        read: |s| int(s.memory_copy_bytes),
    },
    Metric {
        name: "sluice_memory_copy_lookups_total",
        kind: Counter,
        help: "Lookups of a log record by a write-back, flush or read, by whether its payload was in memory (hit) or read from the fast tier (miss).",
        labels: label("result", &["hit", "miss"]),
        read: |s| ints([s.memory_copy_hits, s.memory_copy_misses]),
    },
    Metric {
        name: "sluice_clean_read_bytes_total",
        kind: Counter,
        help: "Bytes reads were served from clean copies in the log (the clean cache's hits; its misses are read from the capacity tier).",
        labels: None,
        read: |s| int(s.clean_read_bytes),
    },
    Metric {
        name: "sluice_clean_cache_stale_drops_total",
        kind: Counter,
        help: "Times a file's clean copies were dropped because its capacity file changed behind them (another node wrote or replaced it).",
        labels: None,
        read: |s| int(s.cache_stale_drops),
    },
    Metric {
        name: "sluice_recalls_total",
        kind: Counter,
        help: "On-demand: files this node recalled from the node holding them (an open, lock, truncate or first write met another node's held mark; timed_out: ETIMEDOUT after mount.recall_wait).",
        labels: label("result", &["served", "timed_out"]),
        read: |s| ints([s.recalls.saturating_sub(s.recall_timeouts), s.recall_timeouts]),
    },
    Metric {
        name: "sluice_recall_wait_seconds_total",
        kind: Counter,
        help: "On-demand: seconds recalls waited for the holding node, in total (over sluice_recalls_total: the mean recall latency).",
        labels: None,
        read: |s| Some(vec![Value::Real(s.recall_wait_s)]),
    },
    Metric {
        name: "sluice_recalls_answered_total",
        kind: Counter,
        help: "On-demand: other nodes' recalls this node answered (the file written back, synced, its held mark removed).",
        labels: None,
        read: |s| int(s.recalls_answered),
    },
    Metric {
        name: "sluice_held_files",
        kind: Gauge,
        help: "On-demand: files whose held mark this node holds now (their newest bytes are in its log); 0 under the other modes.",
        labels: None,
        read: |s| int(s.held_files),
    },
    Metric {
        name: "sluice_flush_bytes_per_second",
        kind: Gauge,
        help: "Flush rate over the last second.",
        labels: None,
        read: |s| int(s.flush_bytes_per_s),
    },
    Metric {
        name: "sluice_regions_flushed_total",
        kind: Counter,
        help: "Log regions flushed and reused.",
        labels: None,
        read: |s| int(s.regions_flushed),
    },
    Metric {
        name: "sluice_regions",
        kind: Gauge,
        help: "Log regions by state.",
        labels: label("state", REGION_STATES),
        read: |s| {
            Some(
                REGION_STATES
                    .iter()
                    .map(|state| Value::Int(s.regions.iter().filter(|r| r == state).count() as u64))
                    .collect(),
            )
        },
    },
    Metric {
        name: "sluice_flush_errors_total",
        kind: Counter,
        help: "Failed flush attempts (the data stays buffered and is retried).",
        labels: None,
        read: |s| int(s.flush_errors),
    },
    Metric {
        name: "sluice_fast_errors_total",
        kind: Counter,
        help: "Appends to the log that failed (the fast tier's file system full, or an I/O error): each closes its region and sends data writes to the capacity tier for a while (docs/engine.md, \"A failing fast tier\").",
        labels: None,
        read: |s| int(s.fast_errors),
    },
    Metric {
        name: "sluice_fast_fallback_bytes_total",
        kind: Counter,
        help: "Bytes written to the capacity tier because an append to the log failed.",
        labels: None,
        read: |s| int(s.fast_fallback_bytes),
    },
    Metric {
        name: "sluice_quarantined_files",
        kind: Gauge,
        help: "Files whose recovered bytes were not written back because their capacity file was deleted, replaced or modified while the node was down (sluice quarantine list; docs/crash-consistency.md).",
        labels: None,
        read: |s| int(s.quarantined.len() as u64),
    },
    Metric {
        name: "sluice_corrupt_payloads_total",
        kind: Counter,
        help: "Log payloads whose checksum failed (never served; EIO).",
        labels: None,
        read: |s| int(s.corrupt_payloads),
    },
    Metric {
        name: "sluice_region_waits_total",
        kind: Counter,
        help: "Writes that waited for a free region.",
        labels: None,
        read: |s| int(s.region_waits),
    },
    Metric {
        name: "sluice_streams_total",
        kind: Counter,
        help: "Write streams classified by the detector.",
        labels: None,
        read: |s| int(s.streams),
    },
    Metric {
        name: "sluice_streams_fast_total",
        kind: Counter,
        help: "Write streams routed to the fast tier.",
        labels: None,
        read: |s| int(s.streams_to_fast),
    },
    Metric {
        name: "sluice_stream_random_fraction",
        kind: Gauge,
        help: "Random fraction of the last write stream, 0 to 1 (absent before the first).",
        labels: None,
        read: |s| s.last_random_fraction.map(|p| vec![Value::Real(p)]),
    },
    Metric {
        name: "sluice_threshold",
        kind: Gauge,
        help: "Threshold the last stream was judged against, 0 to 1.",
        labels: None,
        read: |s| Some(vec![Value::Real(s.threshold)]),
    },
    Metric {
        name: "sluice_route_fast",
        kind: Gauge,
        help: "1 while new streams go to the fast tier (stream policies; always 0 under cost, whose routes are per file: sluice status lists them).",
        labels: None,
        read: |s| int(u64::from(s.route == "fast")),
    },
    Metric {
        name: "sluice_tier_bytes",
        kind: Gauge,
        help: "Tier size in bytes.",
        labels: label("tier", TIERS),
        read: |s| ints([s.fast.total_bytes, s.capacity.total_bytes]),
    },
    Metric {
        name: "sluice_tier_free_bytes",
        kind: Gauge,
        help: "Tier free bytes.",
        labels: label("tier", TIERS),
        read: |s| ints([s.fast.free_bytes, s.capacity.free_bytes]),
    },
    Metric {
        name: "sluice_capacity_tier_state",
        kind: Gauge,
        help: "1 for the capacity tier's state now, 0 for the others: healthy; read_only (changes fail with EROFS, nothing is flushed); lost (its directory was unmounted or replaced: every call fails with ENODEV, nothing is flushed, buffered bytes stay in the log).",
        labels: label("state", TIER_STATES),
        read: |s| {
            let now = s.capacity.state.replace('-', "_");
            Some(
                TIER_STATES
                    .iter()
                    .map(|state| Value::Int(u64::from(*state == now)))
                    .collect(),
            )
        },
    },
    Metric {
        name: "sluice_fuse_requests_total",
        kind: Counter,
        help: "FUSE requests by kind.",
        labels: label("op", &["read", "write", "fsync", "fallocate", "metadata"]),
        read: |s| {
            ints([
                s.fuse_reads,
                s.fuse_writes,
                s.fuse_fsyncs,
                s.fuse_fallocates,
                s.fuse_metadata_ops,
            ])
        },
    },
    Metric {
        name: "sluice_fuse_bytes_total",
        kind: Counter,
        help: "Bytes through the mount by FUSE reads and writes.",
        labels: label("op", &["read", "write"]),
        read: |s| ints([s.fuse_read_bytes, s.fuse_write_bytes]),
    },
    Metric {
        name: "sluice_fuse_passthrough_opens_total",
        kind: Counter,
        help: "Opens and creates the kernel serves itself by FUSE passthrough (mount.passthrough): their reads and writes bypass sluice and are not in sluice_fuse_requests_total.",
        labels: None,
        read: |s| int(s.fuse_passthrough_opens),
    },
    Metric {
        name: "sluice_fuse_page_cache_opens_total",
        kind: Counter,
        help: "Opens answered with a small file's bytes kept in the kernel's page cache since its last close (mount.page_cache): their reads do not come to sluice and are not in sluice_fuse_requests_total.",
        labels: None,
        read: |s| int(s.fuse_page_cache_opens),
    },
    Metric {
        name: "sluice_fuse_page_cache_stores_total",
        kind: Counter,
        help: "Small files handed to the kernel's page cache at their last close (mount.page_cache).",
        labels: None,
        read: |s| int(s.fuse_page_cache_stores),
    },
    Metric {
        name: "sluice_fuse_errors_total",
        kind: Counter,
        help: "FUSE requests answered with an error.",
        labels: None,
        read: |s| int(s.fuse_errors),
    },
    Metric {
        name: "sluice_incidents_total",
        kind: Counter,
        help: "Failures recorded in last_errors since the mount: errors answered to applications that report a failure (EIO, ENOSPC, ...; not ENOENT and the other expected answers) and background failures (flush, demotion, catalogue, LiU); each is logged (docs/fuse.md, \"Logs and last_errors\").",
        labels: None,
        read: |s| int(s.incidents_total),
    },
    Metric {
        name: "sluice_recovered_records",
        kind: Gauge,
        help: "Log records recovered at mount.",
        labels: None,
        read: |s| int(s.recovered_records),
    },
    Metric {
        name: "sluice_liu_lifted_segments",
        kind: Gauge,
        help: "LiU (when on): segment heads served from the fast tier.",
        labels: None,
        read: |s| liu(s, |l| vec![l.lifted_segments]),
    },
    Metric {
        name: "sluice_liu_lifted_bodies",
        kind: Gauge,
        help: "LiU: lifted segments whose body is on the fast tier too (whole-segment lifts).",
        labels: None,
        read: |s| liu(s, |l| vec![l.lifted_bodies]),
    },
    Metric {
        name: "sluice_liu_buffered_segments",
        kind: Gauge,
        help: "LiU: segments in the DRAM buffer.",
        labels: None,
        read: |s| liu(s, |l| vec![l.buffered_segments]),
    },
    Metric {
        name: "sluice_liu_buffer_hits_total",
        kind: Counter,
        help: "LiU: reads served by the DRAM segment buffer.",
        labels: None,
        read: |s| liu(s, |l| vec![l.buffer_hits]),
    },
    Metric {
        name: "sluice_liu_loads_total",
        kind: Counter,
        help: "LiU: segments loaded into the buffer, by where the head came from.",
        labels: label("head", TIERS),
        read: |s| liu(s, |l| vec![l.lifted_loads, l.whole_loads]),
    },
    Metric {
        name: "sluice_liu_direct_reads_total",
        kind: Counter,
        help: "LiU: reads not through the buffer, by where they were served from.",
        labels: label("from", &["head", "capacity"]),
        read: |s| liu(s, |l| vec![l.head_reads, l.capacity_reads]),
    },
    Metric {
        name: "sluice_liu_load_bytes_skipped_total",
        kind: Counter,
        help: "LiU: bytes loads left unread because direct reads of the learning pass had read them.",
        labels: None,
        read: |s| liu(s, |l| vec![l.load_bytes_skipped]),
    },
    Metric {
        name: "sluice_liu_time_share_holds_total",
        kind: Counter,
        help: "LiU: times a file's capacity loads were held so other readers had the capacity tier (liu.time_share).",
        labels: None,
        read: |s| liu(s, |l| vec![l.time_share_holds]),
    },
    Metric {
        name: "sluice_liu_lifts_total",
        kind: Counter,
        help: "LiU: heads lifted to the fast tier.",
        labels: None,
        read: |s| liu(s, |l| vec![l.lifts]),
    },
    Metric {
        name: "sluice_liu_delifts_total",
        kind: Counter,
        help: "LiU: heads de-lifted (room for a warmer one, or a write).",
        labels: None,
        read: |s| liu(s, |l| vec![l.delifts]),
    },
    Metric {
        name: "sluice_liu_invalidations_total",
        kind: Counter,
        help: "LiU: buffered segments or heads dropped by capacity-tier writes.",
        labels: None,
        read: |s| liu(s, |l| vec![l.invalidations]),
    },
    Metric {
        name: "sluice_liu_locality_total",
        kind: Counter,
        help: "LiU: recorded segment localities (the fraction of a segment read while it was tracked), by tenth.",
        labels: label("bucket", LOCALITY_BUCKETS),
        read: |s| {
            liu(s, |l| {
                (0..LOCALITY_BUCKETS.len())
                    .map(|k| l.locality_histogram.get(k).copied().unwrap_or(0))
                    .collect()
            })
        },
    },
    Metric {
        name: "sluice_liu_errors_total",
        kind: Counter,
        help: "LiU: failed part loads and lifts (the capacity tier answered instead).",
        labels: None,
        read: |s| liu(s, |l| vec![l.errors]),
    },
    Metric {
        name: "sluice_ckpt_copies",
        kind: Gauge,
        help: "BBOS (when on): checkpoint copies on the fast tier.",
        labels: label("state", STAGED_CACHED),
        read: |s| bbos(s, |b| vec![b.staged_files, b.cached_files]),
    },
    Metric {
        name: "sluice_ckpt_room_bytes",
        kind: Gauge,
        help: "BBOS: the room a new checkpoint is placed in now: S, or less when the fast tier's file system has less free beside the copies (the log's growth kept out).",
        labels: None,
        read: |s| bbos(s, |b| vec![b.room_bytes]),
    },
    Metric {
        name: "sluice_ckpt_copy_bytes",
        kind: Gauge,
        help: "BBOS: bytes of checkpoint copies on the fast tier.",
        labels: label("state", STAGED_CACHED),
        read: |s| bbos(s, |b| vec![b.staged_bytes, b.cached_bytes]),
    },
    Metric {
        name: "sluice_ckpt_checkpoints_total",
        kind: Counter,
        help: "BBOS: checkpoints started, by where they went (catalogue_fallback: the catalogue failed, so an ordinary capacity-tier file; issue 19).",
        labels: label(
            "placement",
            &["staged", "cold_direct", "spilled", "catalogue_fallback"],
        ),
        read: |s| {
            bbos(s, |b| {
                let elsewhere = b.stats.cold_direct + b.stats.spills + b.stats.catalog_fallbacks;
                vec![
                    b.stats.checkpoints.saturating_sub(elsewhere),
                    b.stats.cold_direct,
                    b.stats.spills,
                    b.stats.catalog_fallbacks,
                ]
            })
        },
    },
    Metric {
        name: "sluice_ckpt_written_bytes_total",
        kind: Counter,
        help: "BBOS: checkpoint bytes written, by tier.",
        labels: label("tier", TIERS),
        read: |s| bbos(s, |b| vec![b.stats.staged_written_bytes, b.stats.direct_bytes]),
    },
    Metric {
        name: "sluice_ckpt_full_moves_total",
        kind: Counter,
        help: "BBOS: staged copies moved to the capacity tier mid-write because the fast tier's file system was full (ENOSPC or EDQUOT).",
        labels: None,
        read: |s| bbos(s, |b| vec![b.stats.full_moves]),
    },
    Metric {
        name: "sluice_ckpt_full_moved_bytes_total",
        kind: Counter,
        help: "BBOS: bytes those copies held when they moved.",
        labels: None,
        read: |s| bbos(s, |b| vec![b.stats.full_moved_bytes]),
    },
    Metric {
        name: "sluice_ckpt_demotions_total",
        kind: Counter,
        help: "BBOS: checkpoint copies demoted to the capacity tier.",
        labels: None,
        read: |s| bbos(s, |b| vec![b.stats.demotions]),
    },
    Metric {
        name: "sluice_ckpt_demoted_bytes_total",
        kind: Counter,
        help: "BBOS: bytes demoted to the capacity tier.",
        labels: None,
        read: |s| bbos(s, |b| vec![b.stats.demoted_bytes]),
    },
    Metric {
        name: "sluice_ckpt_evictions_total",
        kind: Counter,
        help: "BBOS: cached checkpoint copies evicted.",
        labels: None,
        read: |s| bbos(s, |b| vec![b.stats.evictions]),
    },
    Metric {
        name: "sluice_ckpt_restart_opens_total",
        kind: Counter,
        help: "BBOS: opens of checkpoint files for reading, served by the fast tier (hit) or the capacity tier (miss).",
        labels: label("result", HIT_MISS),
        read: |s| bbos(s, |b| vec![b.stats.restart_hits, b.stats.restart_misses]),
    },
    Metric {
        name: "sluice_ckpt_restart_bytes_total",
        kind: Counter,
        help: "BBOS: bytes those reads returned.",
        labels: label("result", HIT_MISS),
        read: |s| bbos(s, |b| vec![b.stats.hit_bytes, b.stats.miss_bytes]),
    },
    Metric {
        name: "sluice_ckpt_admission_waits_total",
        kind: Counter,
        help: "BBOS: new checkpoints that waited for their job's turn.",
        labels: None,
        read: |s| bbos(s, |b| vec![b.stats.admission_waits]),
    },
    Metric {
        name: "sluice_ckpt_admission_timeouts_total",
        kind: Counter,
        help: "BBOS: admission waits that ran out (the checkpoint went ahead).",
        labels: None,
        read: |s| bbos(s, |b| vec![b.stats.admission_timeouts]),
    },
    Metric {
        name: "sluice_ckpt_throttle_seconds_total",
        kind: Counter,
        help: "BBOS: seconds checkpoint writers waited for the write throttle.",
        labels: None,
        read: |s| s.bbos.as_ref().map(|b| vec![Value::Real(b.stats.throttle_ns as f64 / 1e9)]),
    },
    Metric {
        name: "sluice_ckpt_rate_bytes_per_second",
        kind: Gauge,
        help: "BBOS: the throttle now, bytes per second (write 0: no cap).",
        labels: label("kind", &["write", "demote"]),
        read: |s| bbos(s, |b| vec![b.write_rate, b.demote_rate]),
    },
    Metric {
        name: "sluice_ckpt_dwsf_bytes",
        kind: Gauge,
        help: "BBOS: checkpoint bytes written so far this planner period (DWSF).",
        labels: None,
        read: |s| bbos(s, |b| vec![b.dwsf_bytes]),
    },
    Metric {
        name: "sluice_ckpt_dwpp_bytes",
        kind: Gauge,
        help: "BBOS: data written per period the current plan is for (DWPP).",
        labels: None,
        read: |s| bbos(s, |b| vec![b.dwpp_bytes]),
    },
    Metric {
        name: "sluice_ckpt_errors_total",
        kind: Counter,
        help: "BBOS: failed demotions (retried) and catalogue calls (the staging directory stays the truth).",
        labels: label("what", &["demotion", "catalogue"]),
        read: |s| bbos(s, |b| vec![b.stats.demotion_errors, b.stats.catalog_errors]),
    },
    Metric {
        name: "sluice_ckpt_remote_waits_total",
        kind: Counter,
        help: "BBOS: restart reads that waited for another node to demote the only full copy (timed_out: EAGAIN after bbos.remote_wait).",
        labels: label("result", &["served", "timed_out"]),
        read: |s| {
            bbos(s, |b| {
                vec![
                    b.stats.remote_waits.saturating_sub(b.stats.remote_timeouts),
                    b.stats.remote_timeouts,
                ]
            })
        },
    },
];

/// The table of docs/metrics.md, rendered from [`METRICS`].
pub fn markdown_table() -> String {
    let mut out = String::from("| metric | type | labels | meaning |\n|---|---|---|---|\n");
    for metric in METRICS {
        let labels = metric.labels.map_or_else(String::new, |l| {
            format!("`{}` = {}", l.key, l.values.join(", "))
        });
        out.push_str(&format!(
            "| `{}` | {} | {} | {} |\n",
            metric.name,
            metric.kind.name(),
            labels,
            metric.help
        ));
    }
    out
}

/// A snapshot in which every metric applies (LiU and BBOS on, a stream
/// classified), with distinct values: for the tests of every view drawn
/// from [`METRICS`] (its invariants here, the exposition in `sluice-daemon`).
pub fn every_metric_applies() -> Status {
    Status {
        route: "fast".into(),
        last_random_fraction: Some(0.25),
        threshold: 0.5,
        regions: vec![
            "empty".into(),
            "filling".into(),
            "full".into(),
            "full".into(),
        ],
        fast_bytes: 100_000,
        buffered_bytes: 4096,
        recalls: 7,
        recall_timeouts: 1,
        recall_wait_s: 0.75,
        recalls_answered: 3,
        on_demand_node: Some("rack1-n07".into()),
        held_mark: Some("xattr".into()),
        held_files: 2,
        liu: Some(LiuStatusView {
            lifts: 3,
            locality_histogram: vec![1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11],
            ..LiuStatusView::default()
        }),
        bbos: Some(CkptStatusView {
            stats: CkptStats {
                checkpoints: 10,
                cold_direct: 2,
                spills: 1,
                catalog_fallbacks: 1,
                throttle_ns: 1_500_000_000,
                remote_waits: 5,
                remote_timeouts: 2,
                ..CkptStats::default()
            },
            ..CkptStatusView::default()
        }),
        ..Status::default()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn the_table_keeps_its_invariants() {
        let (mut seen, mut families) = (BTreeSet::new(), BTreeSet::new());
        for m in METRICS {
            assert!(seen.insert(m.name), "{} declared twice", m.name);
            // A counter `x_total` and a gauge `x` would be one family:
            // Prometheus refuses such a scrape.
            assert!(
                families.insert(m.name.strip_suffix("_total").unwrap_or(m.name)),
                "family of {} repeats",
                m.name
            );
            assert!(m.name.starts_with("sluice_"), "{}", m.name);
            assert!(
                m.name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
                "{}",
                m.name
            );
            assert_eq!(
                m.kind == Kind::Counter,
                m.name.ends_with("_total"),
                "{}",
                m.name
            );
            assert!(
                !m.help.is_empty() && !m.help.contains(['\n', '\\', '|']),
                "{}",
                m.name
            );
            let values =
                (m.read)(&every_metric_applies()).unwrap_or_else(|| panic!("{} absent", m.name));
            assert_eq!(
                values.len(),
                m.labels.map_or(1, |l| l.values.len()),
                "{}",
                m.name
            );
        }
    }

    /// docs/metrics.md's table is this table. `SLUICE_WRITE_DOCS=1 cargo
    /// test -p sluice-status metrics` rewrites it after a change here.
    #[test]
    fn docs_metrics_md_is_the_table() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/metrics.md");
        let doc = std::fs::read_to_string(path).unwrap();
        let (begin, end) = ("<!-- metrics table begin", "<!-- metrics table end -->");
        let start = doc.find(begin).expect("begin marker");
        let start = start + doc[start..].find('\n').unwrap() + 1;
        let stop = doc.find(end).expect("end marker");
        let table = markdown_table();
        if doc[start..stop] != table && std::env::var_os("SLUICE_WRITE_DOCS").is_some() {
            std::fs::write(path, format!("{}{table}{}", &doc[..start], &doc[stop..])).unwrap();
            return;
        }
        let documented: BTreeSet<&str> = doc[start..stop]
            .lines()
            .filter_map(|l| l.strip_prefix("| `")?.split('`').next())
            .collect();
        let declared: BTreeSet<&str> = METRICS.iter().map(|m| m.name).collect();
        assert_eq!(
            documented
                .symmetric_difference(&declared)
                .collect::<Vec<_>>(),
            Vec::<&&str>::new(),
            "docs/metrics.md and the table name different metrics"
        );
        assert!(
            doc[start..stop] == table,
            "docs/metrics.md's table differs from crates/status/src/metrics.rs: \
             run SLUICE_WRITE_DOCS=1 cargo test -p sluice-status metrics"
        );
    }
}
