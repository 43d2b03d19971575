//! Opening the engine: create or scan the log regions, replay every record
//! in sequence order into a restored write buffer, reattach files with
//! buffered bytes (redoing a rename a crash cut in half), start the
//! flusher (docs/crash-consistency.md, recovery).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use sluice_env::{Backend, Clock, FileKind, OpenOptions, RelPath};
use sluice_policy::extent_index::{Extent, ExtentIndex};
use sluice_policy::pipeline::{PipelineConfig, RegionState};
use sluice_policy::token_bucket::TokenBucket;
use sluice_policy::write_buffer::{WriteBuffer, WriteBufferConfig};
use sluice_policy::{FileId, RegionId, Time};

use crate::incidents::Incidents;
use crate::log::{
    check_region, RecordKind, RegionFile, RegionRefusal, ScanMode, REGION_HEADER_BYTES,
};

use super::config::{EngineConfig, EngineStats, Placements};
use super::files::attach;
use super::flush::flusher_loop;
use super::mirror::Mirror;
use super::traffic::TrafficMeter;
use super::writeback::WritebackGate;
use super::{context, flush, held, quarantine, region_path, Engine, LogRegion, Shared, State};

/// Open the engine: create or recover the log on `fast`, then start the
/// flusher. Buffered data found in the log is indexed and will be
/// flushed. In phases, each its own function below: the log directory,
/// the regions scanned (or made), their records replayed in sequence
/// order, the engine's state restored from them, the files with buffered
/// bytes reattached (or quarantined), and the threads started: the
/// flusher only with `flusher` (the harness of completions in random
/// orders flushes in its own turns, `orders.rs`; [`Engine::start_flusher`]).
pub(super) fn open(
    fast: Arc<dyn Backend>,
    capacity: Arc<dyn Backend>,
    clock: Arc<dyn Clock>,
    config: EngineConfig,
    flusher: bool,
) -> io::Result<Engine> {
    config.validate()?;
    let started = Instant::now();
    let log_dir = RelPath::new("log")?;
    make_log_dir(fast.as_ref(), &log_dir)?;
    let mut scanned = scan_regions(fast.as_ref(), &config)?;
    scanned.stats.fast_space_warning = space_warning(
        fast.as_ref(),
        &scanned.regions,
        config.region_bytes + REGION_HEADER_BYTES,
    );
    if let Some(warning) = &scanned.stats.fast_space_warning {
        tracing::warn!("{warning}");
    }
    if scanned.created_any {
        // A new region file exists only once its directory entry is
        // durable; without this a power cut loses the file and every
        // record later synced into it.
        fast.sync_dir(&log_dir).map_err(context(format!(
            "fast tier {}: sync {log_dir}",
            fast.describe()
        )))?;
    }
    let mut replayed = replay(&mut scanned);
    let elapsed = started.elapsed().as_secs_f64();
    if elapsed > 0.0 {
        scanned.stats.recovery_records_per_s = (scanned.recovered.len() as f64 / elapsed) as u64;
    }
    let mut state = restore_state(&config, capacity.as_ref(), scanned, &mut replayed)?;
    reattach(fast.as_ref(), capacity.as_ref(), &mut state, &replayed)?;
    log_recovery(&fast, &state, started);
    start(fast, capacity, clock, config, state, flusher)
}

/// The log's directory on the fast tier, made (and its entry synced) if
/// missing; anything else by that name is refused.
fn make_log_dir(fast: &dyn Backend, log_dir: &RelPath) -> io::Result<()> {
    match fast.metadata(log_dir) {
        Ok(m) if m.kind == FileKind::Dir => Ok(()),
        Ok(_) => Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!(
                "fast tier {}: `log` exists and is not a directory",
                fast.describe()
            ),
        )),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            fast.create_private_dir(log_dir)
                .map_err(context(format!("fast tier {}", fast.describe())))?;
            fast.sync_dir(&RelPath::root())
        }
        Err(e) => Err(e),
    }
}

/// What the scan of the regions found ([`scan_regions`]).
struct Scanned {
    regions: Vec<LogRegion>,
    /// Each region's state and bytes used, for the pipeline.
    restore: Vec<(RegionState, u64)>,
    /// Every record of the regions that hold any, with its region.
    recovered: Vec<(RegionId, crate::log::ScannedRecord)>,
    stats: EngineStats,
    /// The highest sequence number any region used or retired.
    highest_seq: u64,
    /// A region file was made: the log directory must be synced.
    created_any: bool,
}

/// Open every region file, making the missing ones: an existing one must
/// pass `log::check_region` (the mount's preflight and `config check`
/// apply the same rule), its torn tail is cut, and one whose records
/// hold nothing to replay is reset.
fn scan_regions(fast: &dyn Backend, config: &EngineConfig) -> io::Result<Scanned> {
    let mut scanned = Scanned {
        regions: Vec::new(),
        restore: Vec::new(),
        recovered: Vec::new(),
        stats: EngineStats::default(),
        highest_seq: 0,
        created_any: false,
    };
    let total_bytes = config.region_bytes + REGION_HEADER_BYTES;
    for r in 0..config.regions {
        let path = region_path(r)?;
        let what = format!("fast tier {}: {path}", fast.describe());
        let file = fast
            .open(&path, OpenOptions::CREATE.private())
            .map_err(context(&what))?;
        let len = file.len().map_err(context(&what))?;
        let region = if len <= REGION_HEADER_BYTES {
            // New, or a header torn while it was being written: nothing
            // was ever appended behind it.
            let region = RegionFile::create(file, RegionId(r), total_bytes, 1)
                .map_err(|e| io::Error::other(format!("{what}: {e}")))?;
            region.sync().map_err(context(&what))?;
            scanned.created_any |= len == 0;
            scanned.restore.push((RegionState::Empty, 0));
            region
        } else {
            let mut head = [0u8; 64];
            let read = file.read_full_at(&mut head, 0).map_err(context(&what))?;
            if let Err(refusal) = check_region(RegionId(r), total_bytes, len, &head[..read]) {
                let kind = match refusal {
                    RegionRefusal::BadHeader(_) => io::ErrorKind::InvalidData,
                    RegionRefusal::Mismatch { .. } => io::ErrorKind::InvalidInput,
                };
                return Err(io::Error::new(kind, format!("{what}: {refusal}")));
            }
            let (region, _) = RegionFile::open(file).map_err(|e| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{what}: {e}; the region holds data, so sluice will not overwrite it: move it aside to start anyway"),
                )
            })?;
            scan_region(&region, RegionId(r), &what, &mut scanned)?;
            region
        };
        scanned.regions.push(LogRegion {
            file: Arc::new(region),
            in_flight: BTreeSet::new(),
            readers: 0,
            appends: 0,
            records: BTreeMap::new(),
            dirty: false,
            broken_at: None,
            cached: false,
            reuses: 0,
        });
    }
    Ok(scanned)
}

/// Scan one existing region (`what` names it in errors) into `scanned`.
fn scan_region(
    region: &RegionFile,
    id: RegionId,
    what: &str,
    scanned: &mut Scanned,
) -> io::Result<()> {
    let report = region
        .scan(ScanMode::Recovery)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("{what}: {e}")))?;
    if report.torn_tail_at.is_some() {
        // Cut the torn tail so its leftovers can never line up
        // with a later record (docs/engine.md, Recovery).
        region
            .file()
            .set_len(report.end_offset)
            .map_err(context(what))?;
        region.sync().map_err(context(what))?;
        scanned.stats.torn_tails += 1;
    }
    scanned.stats.corrupt_ranges += report.corrupt.len() as u64;
    let highest = &mut scanned.highest_seq;
    *highest = (*highest).max(report.highest_seq_seen.unwrap_or(0));
    // Records below a retired region's first sequence were flushed:
    // new ones must number past them.
    *highest = (*highest).max(report.header.first_seq.saturating_sub(1));
    let used = report.end_offset.saturating_sub(REGION_HEADER_BYTES);
    let holds_records = report.records.iter().any(|r| {
        matches!(
            r.header.kind,
            RecordKind::Data | RecordKind::Truncate | RecordKind::Unlink
        )
    });
    scanned.restore.push(if holds_records {
        (RegionState::Full, used)
    } else {
        (RegionState::Empty, 0)
    });
    if !holds_records && used > 0 {
        let generation = region.generation() + 1;
        region.reset(generation).map_err(context(what))?;
        region.sync().map_err(context(what))?;
    }
    if holds_records {
        scanned
            .recovered
            .extend(report.records.into_iter().map(|rec| (id, rec)));
    }
    Ok(())
}

/// What replaying the records gave ([`replay`]).
struct Replayed {
    index: ExtentIndex,
    /// Each file's newest name.
    paths: HashMap<FileId, RelPath>,
    /// Every name each file had, oldest first, to redo a rename whose
    /// capacity half a crash cut off.
    names: HashMap<FileId, Vec<RelPath>>,
    next_file_id: u64,
    /// (region, file) of every path record: the regions that describe
    /// each file.
    described: Vec<(RegionId, FileId)>,
    /// The capacity inode each file's newest path record names (0 unknown).
    identity: HashMap<FileId, u64>,
}

/// Apply every recovered record in sequence order: the extent index, the
/// files' names, and the regions' payload checksums.
fn replay(scanned: &mut Scanned) -> Replayed {
    let recovered = &mut scanned.recovered;
    recovered.sort_by_key(|(_, rec)| rec.header.seq);
    scanned.stats.recovered_records = recovered.len() as u64;
    let mut replayed = Replayed {
        index: ExtentIndex::new(),
        paths: HashMap::new(),
        names: HashMap::new(),
        next_file_id: 1,
        described: Vec::new(),
        identity: HashMap::new(),
    };
    let r = &mut replayed;
    for (region, rec) in recovered.iter() {
        let h = rec.header;
        r.next_file_id = r.next_file_id.max(h.file_id.0 + 1);
        match h.kind {
            RecordKind::Path => {
                if let Some(path) = &rec.path {
                    r.paths.insert(h.file_id, path.clone());
                    if h.offset != 0 {
                        r.identity.insert(h.file_id, h.offset);
                    }
                    let history = r.names.entry(h.file_id).or_default();
                    if history.last() != Some(path) {
                        history.push(path.clone());
                    }
                    r.described.push((*region, h.file_id));
                }
            }
            RecordKind::Data => {
                scanned.regions[region.0 as usize]
                    .records
                    .insert(rec.payload_offset, (h.len, h.payload_crc));
                r.index.insert(
                    h.file_id,
                    Extent {
                        file_offset: h.offset,
                        len: h.len,
                        location: rec.location(*region),
                        seq: h.seq,
                    },
                );
            }
            RecordKind::Truncate => {
                r.index.truncate(h.file_id, h.offset);
            }
            RecordKind::Unlink => {
                r.index.remove_file(h.file_id);
                r.paths.remove(&h.file_id);
                r.identity.remove(&h.file_id);
                r.names.remove(&h.file_id);
            }
            RecordKind::Clean => {
                // Written back before this record: not replayed.
                if let Some(range) = rec.clean.clone() {
                    r.index.clean(h.file_id, h.offset, range);
                }
            }
            RecordKind::Commit => {}
        }
    }
    replayed
}

/// The engine's state from the scan and the replay: the write buffer
/// restored over the replayed index (taken from `replayed`), no file open
/// yet.
fn restore_state(
    config: &EngineConfig,
    capacity: &dyn Backend,
    scanned: Scanned,
    replayed: &mut Replayed,
) -> io::Result<State> {
    let buffer_config = WriteBufferConfig {
        redirector: config.redirector,
        pipeline: PipelineConfig {
            regions: config.regions,
            region_bytes: config.region_bytes,
            when_full: config.when_full,
            wait_max: config.wait_max,
        },
        gate: config.flush_gate,
    };
    let index = std::mem::replace(&mut replayed.index, ExtentIndex::new());
    let mut buffer = WriteBuffer::restore(
        buffer_config,
        &scanned.restore,
        index,
        scanned.highest_seq + 1,
    )
    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
    for &(region, file) in &replayed.described {
        buffer.mark_described(region, file);
    }
    Ok(State {
        buffer,
        flush_tokens: match config.flush_bandwidth {
            // One merged run may go at once; a larger burst would let
            // the flusher overshoot the cap after an idle spell.
            Some(rate) => TokenBucket::new(rate, config.flush_run_max_bytes, Time::ZERO),
            None => TokenBucket::unlimited(),
        },
        regions: scanned.regions,
        files: HashMap::new(),
        ids: Default::default(),
        by_ino: HashMap::new(),
        unsynced_names: Default::default(),
        names_epoch: 0,
        unlinking: 0,
        awaiting_unlinks: false,
        next_file_id: replayed.next_file_id,
        draining: 0,
        shutdown: false,
        flush_backoff: flush::FLUSH_BACKOFF_MIN,
        flush_retry_now: false,
        stats: scanned.stats,
        placements: Placements::default(),
        capacity_health: capacity.health(),
        stamps: HashMap::new(),
        parked: HashMap::new(),
        ahead: HashMap::new(),
        mirror: Mirror::new(config.memory_copy_bytes, config.regions as usize),
    })
}

/// Reattach every file that still has buffered bytes, unless its
/// capacity file was deleted, replaced or modified since this node last
/// ran: then quarantine them (quarantine.rs).
fn reattach(
    fast: &dyn Backend,
    capacity: &dyn Backend,
    state: &mut State,
    replayed: &Replayed,
) -> io::Result<()> {
    let alive = quarantine::last_alive(fast);
    let buffered: Vec<FileId> = state.buffer.buffered_files().collect();
    for id in buffered {
        let Some(path) = replayed.paths.get(&id).cloned() else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "fast tier {}: buffered data of file {} has no path record",
                    fast.describe(),
                    id.0
                ),
            ));
        };
        let ino = replayed.identity.get(&id).copied().unwrap_or(0);
        let history = replayed.names.get(&id).map_or(&[][..], Vec::as_slice);
        let mut path = path;
        // A rename that did not happen (not redone, or never done): the
        // file is at an older name, which its next record names.
        let older = if capacity.metadata(&path).is_err() {
            redo_rename(capacity, history, &path, ino)?
        } else {
            rename_not_done(capacity, history, &path, ino)
        };
        if let Some(older) = older {
            state.buffer.forget_descriptions(id);
            path = older;
        }
        if let Some(reason) = quarantine::judge(capacity, &path, ino, alive)? {
            let entry = quarantine::quarantine(fast, state, id, &path, &reason)?;
            tracing::warn!(
                path = %path,
                bytes = entry.bytes(),
                entry = %entry.name,
                "recovery: buffered bytes not written back: {reason}; kept in {}/{} on the fast tier (sluice quarantine restore)",
                quarantine::QUARANTINE_DIR,
                entry.name
            );
            state.stats.quarantined_files += 1;
            continue;
        }
        let handle = capacity
            .open(&path, OpenOptions::default())
            .map_err(context(format!(
                "recovery: capacity tier {}: open {path}",
                capacity.describe()
            )))?;
        let capacity_len = handle.len()?;
        let buffered_end = state.buffer.buffered_end(id);
        let ino = handle
            .stat()
            .or_else(|_| capacity.stat(&path))
            .ok()
            .map(|stat| stat.identity());
        // Recovered files are marked as created: their next fsync syncs
        // the parent (docs/crash-consistency.md, "create").
        state.unsynced_names.created(&path);
        attach(state, id, path, handle, capacity_len.max(buffered_end), ino);
    }
    Ok(())
}

/// The recovered engine running: the on-demand marks set again on what
/// it holds (before anything is answered), then the flusher, heartbeat
/// and recall threads.
fn start(
    fast: Arc<dyn Backend>,
    capacity: Arc<dyn Backend>,
    clock: Arc<dyn Clock>,
    config: EngineConfig,
    state: State,
    flusher: bool,
) -> io::Result<Engine> {
    let held = match &config.on_demand {
        Some(on_demand) => Some(held::open(fast.as_ref(), capacity.as_ref(), on_demand)?),
        None => None,
    };
    let incidents = Arc::new(Incidents::new(fast.describe(), capacity.describe()));
    let alive_file = quarantine::open_alive(fast.as_ref())?;
    quarantine::beat(alive_file.as_ref())
        .map_err(context(format!("fast tier {}: log/alive", fast.describe())))?;
    let shared = Arc::new(Shared {
        fast,
        capacity,
        clock,
        config,
        state: Mutex::new(state),
        changed: Condvar::new(),
        left_log: AtomicU64::new(0),
        alive_stop: (Mutex::new(false), Condvar::new()),
        incidents,
        writeback: WritebackGate::default(),
        traffic: TrafficMeter::default(),
        held,
    });
    // Before anything is answered: no recovered byte is unmarked.
    held::mark_recovered(&shared)?;
    let flusher = if flusher {
        Some(spawn_flusher(&shared)?)
    } else {
        None
    };
    let heartbeat_shared = Arc::clone(&shared);
    let heartbeat = std::thread::Builder::new()
        .name("sluice-heartbeat".into())
        .spawn(move || quarantine::heartbeat_loop(&heartbeat_shared, alive_file.as_ref()))?;
    let recall = if shared.held.is_some() {
        let recall_shared = Arc::clone(&shared);
        Some(
            std::thread::Builder::new()
                .name("sluice-recall".into())
                .spawn(move || held::answer_loop(&recall_shared))?,
        )
    } else {
        None
    };
    Ok(Engine {
        shared,
        flusher,
        heartbeat: Some(heartbeat),
        recall,
    })
}

pub(super) fn spawn_flusher(shared: &Arc<Shared>) -> io::Result<JoinHandle<()>> {
    let shared = Arc::clone(shared);
    std::thread::Builder::new()
        .name("sluice-flusher".into())
        .spawn(move || flusher_loop(&shared))
}

/// One log line per recovery: what was found in the log and replayed;
/// a WARN when corrupt ranges were skipped.
fn log_recovery(fast: &Arc<dyn Backend>, state: &State, started: Instant) {
    let stats = &state.stats;
    let (regions, buffered_bytes, files) = (
        state.regions.len(),
        state.buffer.buffered_bytes(),
        state.files.len(),
    );
    let elapsed_ms = started.elapsed().as_millis() as u64;
    if stats.corrupt_ranges > 0 {
        tracing::warn!(
            fast = %fast.describe(),
            regions,
            records = stats.recovered_records,
            buffered_bytes,
            files,
            torn_tails = stats.torn_tails,
            corrupt_ranges = stats.corrupt_ranges,
            elapsed_ms,
            "recovered the log, skipping corrupt ranges (their records are lost; see docs/crash-consistency.md)"
        );
    } else {
        tracing::info!(
            fast = %fast.describe(),
            regions,
            records = stats.recovered_records,
            buffered_bytes,
            files,
            torn_tails = stats.torn_tails,
            corrupt_ranges = stats.corrupt_ranges,
            elapsed_ms,
            "recovered the log"
        );
    }
}

/// The log names `path` as the file's newest name but the capacity tier has
/// no such file: a crash fell between a rename's log sync and the capacity
/// rename. Redo it from the newest older name that still exists.
///
/// Only an older name that is still the same file (inode `ino`, when
/// known) is moved: another file there is someone else's. If `path`'s
/// directory is gone (another node removed it, or a power cut of the
/// capacity tier took its unsynced mkdir), there is nothing to redo the
/// rename into: it did not happen (it was not acknowledged), and this
/// returns the older name, where the file's records go. Before, they went
/// to `path`, missing, and were quarantined: a file fsynced before the
/// rename read back without its bytes at the name it still had
/// (`a_rename_into_a_directory_gone_before_recovery_keeps_the_file_at_its_old_name`).
fn redo_rename(
    capacity: &dyn Backend,
    history: &[RelPath],
    path: &RelPath,
    ino: u64,
) -> io::Result<Option<RelPath>> {
    let older =
        history
            .iter()
            .rev()
            .skip(1)
            .find(|p| match quarantine::stat_if_known(capacity, p) {
                Ok(Some(stat)) => ino == 0 || stat.ino == ino,
                Ok(None) => true,
                Err(_) => false,
            });
    if let Some(from) = older {
        if let Some(parent) = path.parent() {
            if !parent.is_root() && capacity.metadata(&parent).is_err() {
                return Ok(Some(from.clone()));
            }
        }
        capacity
            .rename(from, path)
            .map_err(context(format!("recovery: redo rename {from} to {path}")))?;
        capacity.sync_dir(&path.parent().unwrap_or_else(RelPath::root))?;
    }
    Ok(None)
}

/// A rename of the file (inode `ino`) over another one, cut by a crash
/// after its path record for `path` and before the capacity rename:
/// `path` still holds the file it was to replace (another inode), and the
/// file is at an older name in `history`, which this returns. The rename
/// did not happen (it was not acknowledged), so the log's records go to
/// the file where it is. Before, they were judged "replaced" and
/// quarantined, and the file's fsynced bytes were read from neither name
/// (the seeded harness, seed 3277). Not redone over `path` (as
/// [`redo_rename`] does when the new name is missing): the file there
/// may be another node's.
fn rename_not_done(
    capacity: &dyn Backend,
    history: &[RelPath],
    path: &RelPath,
    ino: u64,
) -> Option<RelPath> {
    if ino == 0 {
        return None;
    }
    let now = quarantine::stat_if_known(capacity, path).ok()??;
    if now.ino == ino {
        return None;
    }
    history
        .iter()
        .rev()
        .skip(1)
        .find(|p| {
            *p != path
                && matches!(quarantine::stat_if_known(capacity, p), Ok(Some(stat)) if stat.ino == ino)
        })
        .cloned()
}

/// A warning when the log regions, grown to their full size, would need
/// more than the fast tier's free space: appends then fail with ENOSPC
/// before a region is full, and data writes go to the capacity tier for a
/// while each time (degrade.rs). `None` when they fit, or when the fast
/// tier cannot tell its free space.
fn space_warning(fast: &dyn Backend, regions: &[LogRegion], total_bytes: u64) -> Option<String> {
    let space = fast.space().ok()?;
    let mut grow = 0u64;
    for region in regions {
        let len = region.file.file().len().ok()?;
        grow = grow.saturating_add(total_bytes.saturating_sub(len));
    }
    (grow > space.free_bytes).then(|| {
        format!(
            "fast tier {}: {} log regions of {:.1} MiB need up to {:.1} MiB more, and its file system has {:.1} MiB free; \
             when it fills, data writes go to the capacity tier until a region is flushed \
             (set [log] regions or region_size smaller to fit)",
            fast.describe(),
            regions.len(),
            mib(total_bytes - REGION_HEADER_BYTES),
            mib(grow),
            mib(space.free_bytes)
        )
    })
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}
