//! The burst-buffer engine: SSDUP+ write path, merged read path, flusher,
//! drain and recovery over two [`Backend`]s (docs/engine.md).
//!
//! The policy side — redirector, region pipeline, flush gate, extent index,
//! sequence numbers and the overlap rule — is one sans-IO [`WriteBuffer`];
//! this module does its I/O. Records it places in the log are appended as
//! checksummed records to the region log and indexed; writes it places on
//! the capacity tier are written there (a write over buffered bytes is
//! always placed in the log, waiting for room if need be: it is newer, so
//! newest-wins keeps reads and the flush right without an invalidation
//! record). Reads merge buffered extents over capacity bytes. A background
//! flusher polls the write buffer for regions to flush.
//!
//! Concurrency: one mutex guards the policies, the index and the log;
//! foreground operations run under it, except the payload write of a data
//! record, which happens outside it between its reservation and its index
//! insert (in flight; syncs and flushes wait for in-flight records). The flusher
//! takes it to pick the next piece, marks the file busy, and writes to the
//! capacity tier outside it; truncate, unlink and rename wait for a busy
//! file. Before each piece is written the flusher looks it up again, so it
//! never writes bytes that a newer write, a truncate or an unlink has
//! superseded.
//!
//! INVARIANTS:
//! - every indexed extent points at a data record whose payload checksum is
//!   in its region's record table;
//! - every region holding a record of a file holds a path record of it
//!   written before that record (regions are self-describing);
//! - a region is reset only after every capacity file it was flushed to has
//!   been synced, and only when it is the oldest region holding records.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io;
use std::num::NonZeroU64;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use sluice_env::{Backend, BackendFile, Clock, DirEntry, FileKind, Metadata, OpenOptions, RelPath};
use sluice_policy::extent_index::{Extent, ExtentIndex, Piece};
use sluice_policy::flush_gate::FlushGateConfig;
use sluice_policy::pipeline::{PipelineConfig, RegionState, WhenFull};
use sluice_policy::redirector::RedirectorConfig;
use sluice_policy::token_bucket::TokenBucket;
use sluice_policy::write_buffer::{
    FlushPoll, FlushRunRef, Placement, WriteBuffer, WriteBufferConfig,
};
use sluice_policy::{FileId, LogLocation, RegionId, Tier, Time, WriteRequest};

use crate::log::{record_len, RecordHeader, RecordKind, RegionFile, ScanMode, REGION_HEADER_BYTES};

/// How long a write that must go to the log (it overlaps buffered bytes)
/// waits for space before it fails with "storage full".
const FORCED_WAIT_MAX: Duration = Duration::from_secs(60);

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
    /// Cap on the flusher's write rate to the capacity tier, bytes per
    /// second (`None`: as fast as the tier takes them). Applies to drains
    /// too: the cap protects a shared capacity tier, whoever asks.
    pub flush_bandwidth: Option<NonZeroU64>,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            redirector: RedirectorConfig::default(),
            regions: 2,
            region_bytes: 256 * 1024 * 1024,
            when_full: WhenFull::Wait,
            wait_max: Duration::from_secs(1),
            flush_gate: FlushGateConfig::default(),
            flush_run_max_bytes: 4 * 1024 * 1024,
            record_max_bytes: 1024 * 1024,
            flush_bandwidth: None,
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
        if self.record_max_bytes == 0 || self.flush_run_max_bytes == 0 {
            return invalid("record_max_bytes and flush_run_max_bytes must be above 0".into());
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
}

/// The burst buffer over a fast and a capacity backend.
pub struct Engine {
    shared: Arc<Shared>,
    flusher: Option<JoinHandle<()>>,
}

struct Shared {
    fast: Arc<dyn Backend>,
    capacity: Arc<dyn Backend>,
    clock: Arc<dyn Clock>,
    config: EngineConfig,
    state: Mutex<State>,
    changed: Condvar,
}

struct LogRegion {
    /// Shared so a data record's payload can be written outside the lock.
    file: Arc<RegionFile>,
    /// Data records reserved in this region whose payload is being written
    /// outside the lock: syncs and flushes of the region wait for 0, so a
    /// synced region never has a hole before a synced record.
    in_flight: u32,
    /// Data records: payload offset -> (length, payload checksum).
    records: BTreeMap<u64, (u32, u32)>,
    /// Appended since the last sync.
    dirty: bool,
}

struct OpenFile {
    path: RelPath,
    handle: Arc<dyn BackendFile>,
    /// Logical size: capacity bytes and buffered bytes together.
    size: u64,
    /// The flusher is writing this file outside the lock.
    busy: bool,
    /// Created by the engine and its directory not yet synced.
    created_unsynced: bool,
    /// `create`/`open_file` calls not yet matched by `release`. A released
    /// file is forgotten once nothing of it is buffered.
    opens: u32,
    /// Data records of this file being written outside the lock.
    appending: u32,
    /// Truncations (sequence, size) made while records of the file were in
    /// flight: a record older than one is clipped to its size when it is
    /// indexed, as recovery's replay in sequence order would do.
    truncations: Vec<(u64, u64)>,
}

struct State {
    /// Redirector, region pipeline, flush gate, extent index and sequence
    /// numbers: the policy side of every write, truncate and flush.
    buffer: WriteBuffer,
    /// The flush bandwidth cap.
    flush_tokens: TokenBucket,
    regions: Vec<LogRegion>,
    files: HashMap<FileId, OpenFile>,
    ids: HashMap<RelPath, FileId>,
    /// Files created by the engine, forgotten before an fsync synced their
    /// directory entry.
    unsynced_creates: HashSet<RelPath>,
    next_file_id: u64,
    draining: u32,
    shutdown: bool,
    stats: EngineStats,
}

impl State {
    /// The counters, with the byte and wait counts the write buffer keeps.
    fn stats(&self) -> EngineStats {
        let placed = self.buffer.counters();
        EngineStats {
            fast_bytes: placed.fast_bytes,
            capacity_bytes: placed.capacity_bytes,
            forced_to_log_bytes: placed.forced_to_log_bytes,
            write_through_bytes: placed.write_through_bytes,
            waits: self.buffer.pipeline().counters().waits,
            ..self.stats.clone()
        }
    }
}

fn context(what: impl std::fmt::Display) -> impl FnOnce(io::Error) -> io::Error {
    move |e| io::Error::new(e.kind(), format!("{what}: {e}"))
}

fn lock(shared: &Shared) -> MutexGuard<'_, State> {
    // A panic while holding the lock is a bug; the state may be mid-update,
    // but refusing every later call would lose the buffered data's chance
    // to be drained, so the guard is recovered.
    shared.state.lock().unwrap_or_else(|e| e.into_inner())
}

fn region_path(r: u32) -> io::Result<RelPath> {
    RelPath::new(&format!("log/region-{r:04}"))
}

impl Engine {
    /// Open the engine: create or recover the log on `fast`, then start the
    /// flusher. Buffered data found in the log is indexed and will be
    /// flushed.
    pub fn open(
        fast: Arc<dyn Backend>,
        capacity: Arc<dyn Backend>,
        clock: Arc<dyn Clock>,
        config: EngineConfig,
    ) -> io::Result<Engine> {
        config.validate()?;
        let started = Instant::now();
        let log_dir = RelPath::new("log")?;
        match fast.metadata(&log_dir) {
            Ok(m) if m.kind == FileKind::Dir => {}
            Ok(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!(
                        "fast tier {}: `log` exists and is not a directory",
                        fast.describe()
                    ),
                ))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                fast.create_dir(&log_dir)
                    .map_err(context(format!("fast tier {}", fast.describe())))?;
                fast.sync_dir(&RelPath::root())?;
            }
            Err(e) => return Err(e),
        }

        let mut regions = Vec::new();
        let mut created_any = false;
        let mut recovered: Vec<(RegionId, crate::log::ScannedRecord)> = Vec::new();
        let mut restore = Vec::new();
        let mut stats = EngineStats::default();
        let mut highest_seq = 0u64;
        let total_bytes = config.region_bytes + REGION_HEADER_BYTES;
        for r in 0..config.regions {
            let path = region_path(r)?;
            let what = format!("fast tier {}: {path}", fast.describe());
            let file = fast
                .open(&path, OpenOptions::CREATE)
                .map_err(context(&what))?;
            let len = file.len().map_err(context(&what))?;
            let region = if len <= REGION_HEADER_BYTES {
                // New, or a header torn while it was being written: nothing
                // was ever appended behind it.
                let region = RegionFile::create(file, RegionId(r), total_bytes, 1)
                    .map_err(|e| io::Error::other(format!("{what}: {e}")))?;
                region.sync().map_err(context(&what))?;
                created_any |= len == 0;
                restore.push((RegionState::Empty, 0));
                region
            } else {
                let (region, header) = RegionFile::open(file).map_err(|e| {
                    io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("{what}: {e}; the region holds data, so sluice will not overwrite it: move it aside to start anyway"),
                    )
                })?;
                if header.region_bytes != total_bytes || header.region != RegionId(r) {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!(
                            "{what}: written for region {} of {} bytes, configured {r} of {total_bytes}; \
                             drain with the old configuration first",
                            header.region.0, header.region_bytes
                        ),
                    ));
                }
                let report = region.scan(ScanMode::Recovery).map_err(|e| {
                    io::Error::new(io::ErrorKind::InvalidData, format!("{what}: {e}"))
                })?;
                if report.torn_tail_at.is_some() {
                    // Cut the torn tail so its leftovers can never line up
                    // with a later record (docs/engine.md, Recovery).
                    region
                        .file()
                        .set_len(report.end_offset)
                        .map_err(context(&what))?;
                    region.sync().map_err(context(&what))?;
                    stats.torn_tails += 1;
                }
                stats.corrupt_ranges += report.corrupt.len() as u64;
                highest_seq = highest_seq.max(report.highest_seq_seen.unwrap_or(0));
                let used = report.end_offset.saturating_sub(REGION_HEADER_BYTES);
                let holds_records = report.records.iter().any(|r| {
                    matches!(
                        r.header.kind,
                        RecordKind::Data | RecordKind::Truncate | RecordKind::Unlink
                    )
                });
                restore.push(if holds_records {
                    (RegionState::Full, used)
                } else {
                    (RegionState::Empty, 0)
                });
                if !holds_records && used > 0 {
                    let generation = region.generation() + 1;
                    region.reset(generation).map_err(context(&what))?;
                    region.sync().map_err(context(&what))?;
                }
                if holds_records {
                    recovered.extend(report.records.into_iter().map(|rec| (RegionId(r), rec)));
                }
                region
            };
            regions.push(LogRegion {
                file: Arc::new(region),
                in_flight: 0,
                records: BTreeMap::new(),
                dirty: false,
            });
        }

        if created_any {
            // A new region file exists only once its directory entry is
            // durable; without this a power cut loses the file and every
            // record later synced into it.
            fast.sync_dir(&log_dir).map_err(context(format!(
                "fast tier {}: sync {log_dir}",
                fast.describe()
            )))?;
        }

        // Apply every recovered record in sequence order.
        recovered.sort_by_key(|(_, rec)| rec.header.seq);
        stats.recovered_records = recovered.len() as u64;
        let mut index = ExtentIndex::new();
        let mut paths: HashMap<FileId, RelPath> = HashMap::new();
        // Every name each file had, oldest first, to redo a rename whose
        // capacity half a crash cut off.
        let mut names: HashMap<FileId, Vec<RelPath>> = HashMap::new();
        let mut next_file_id = 1u64;
        // (region, file) of every path record: the regions that describe
        // each file.
        let mut described: Vec<(RegionId, FileId)> = Vec::new();
        for (region, rec) in &recovered {
            let h = rec.header;
            next_file_id = next_file_id.max(h.file_id.0 + 1);
            let log_region = &mut regions[region.0 as usize];
            match h.kind {
                RecordKind::Path => {
                    if let Some(path) = &rec.path {
                        paths.insert(h.file_id, path.clone());
                        let history = names.entry(h.file_id).or_default();
                        if history.last() != Some(path) {
                            history.push(path.clone());
                        }
                        described.push((*region, h.file_id));
                    }
                }
                RecordKind::Data => {
                    log_region
                        .records
                        .insert(rec.payload_offset, (h.len, h.payload_crc));
                    index.insert(
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
                    index.truncate(h.file_id, h.offset);
                }
                RecordKind::Unlink => {
                    index.remove_file(h.file_id);
                    paths.remove(&h.file_id);
                    names.remove(&h.file_id);
                }
                RecordKind::Commit => {}
            }
        }
        let elapsed = started.elapsed().as_secs_f64();
        if elapsed > 0.0 {
            stats.recovery_records_per_s = (recovered.len() as f64 / elapsed) as u64;
        }

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
        let mut buffer = WriteBuffer::restore(buffer_config, &restore, index, highest_seq + 1)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
        for (region, file) in described {
            buffer.mark_described(region, file);
        }
        let mut state = State {
            buffer,
            flush_tokens: match config.flush_bandwidth {
                // One merged run may go at once; a larger burst would let
                // the flusher overshoot the cap after an idle spell.
                Some(rate) => TokenBucket::new(rate, config.flush_run_max_bytes, Time::ZERO),
                None => TokenBucket::unlimited(),
            },
            regions,
            files: HashMap::new(),
            ids: HashMap::new(),
            unsynced_creates: HashSet::new(),
            next_file_id,
            draining: 0,
            shutdown: false,
            stats,
        };
        // Reattach every file that still has buffered bytes.
        let buffered: Vec<FileId> = state.buffer.buffered_files().collect();
        for id in buffered {
            let Some(path) = paths.get(&id).cloned() else {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "fast tier {}: buffered data of file {} has no path record",
                        fast.describe(),
                        id.0
                    ),
                ));
            };
            if capacity.metadata(&path).is_err() {
                redo_rename(
                    capacity.as_ref(),
                    names.get(&id).map_or(&[][..], Vec::as_slice),
                    &path,
                )?;
            }
            let handle = open_creating_parents(capacity.as_ref(), &path)?;
            let capacity_len = handle.len()?;
            let buffered_end = state.buffer.buffered_end(id);
            attach(
                &mut state,
                id,
                path,
                handle,
                capacity_len.max(buffered_end),
                true,
            );
        }

        let shared = Arc::new(Shared {
            fast,
            capacity,
            clock,
            config,
            state: Mutex::new(state),
            changed: Condvar::new(),
        });
        let flusher_shared = Arc::clone(&shared);
        let flusher = std::thread::Builder::new()
            .name("sluice-flusher".into())
            .spawn(move || flusher_loop(&flusher_shared))?;
        Ok(Engine {
            shared,
            flusher: Some(flusher),
        })
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> EngineStats {
        lock(&self.shared).stats()
    }

    /// A snapshot for status displays and metrics.
    pub fn status(&self) -> EngineStatus {
        let state = lock(&self.shared);
        let redirector = state.buffer.redirector();
        let pipeline = state.buffer.pipeline();
        let last = redirector.last_report();
        EngineStatus {
            stats: state.stats(),
            policy: redirector.policy().name(),
            route: redirector.route(),
            last_percentage: last.map(|r| r.percentage),
            threshold: last.map_or_else(|| redirector.threshold().threshold(), |r| r.threshold),
            regions: pipeline
                .states()
                .map(|(r, st)| (st, pipeline.used_bytes(r).unwrap_or(0)))
                .collect(),
            region_bytes: self.shared.config.region_bytes,
            buffered_bytes: state.buffer.buffered_bytes(),
            open_files: state.files.len(),
            draining: state.draining > 0,
        }
    }

    /// The fast tier (for `statfs` and status).
    pub fn fast_tier(&self) -> &Arc<dyn Backend> {
        &self.shared.fast
    }

    /// The capacity tier, for metadata operations that do not touch file
    /// data (attributes, links, xattrs): the mount passes them through.
    pub fn capacity_tier(&self) -> &Arc<dyn Backend> {
        &self.shared.capacity
    }

    /// Bytes buffered in the log (not yet on the capacity tier).
    pub fn buffered_bytes(&self) -> u64 {
        lock(&self.shared).buffer.buffered_bytes()
    }

    /// Create a new regular file (error if it exists).
    pub fn create(&self, path: &RelPath) -> io::Result<FileId> {
        let mut state = lock(&self.shared);
        if state.ids.contains_key(path) {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("create {path}: file exists"),
            ));
        }
        let handle = self
            .shared
            .capacity
            .open(
                path,
                OpenOptions {
                    create: true,
                    create_new: true,
                    truncate: false,
                },
            )
            .map_err(context(format!("create {path}")))?;
        let id = register(&mut state, path.clone(), handle, 0, true);
        opened(&mut state, id);
        Ok(id)
    }

    /// Open an existing regular file.
    pub fn open_file(&self, path: &RelPath) -> io::Result<FileId> {
        let mut state = lock(&self.shared);
        if let Some(&id) = state.ids.get(path) {
            opened(&mut state, id);
            return Ok(id);
        }
        let handle = self
            .shared
            .capacity
            .open(path, OpenOptions::default())
            .map_err(context(format!("open {path}")))?;
        let size = handle.len()?;
        let id = register(&mut state, path.clone(), handle, size, false);
        opened(&mut state, id);
        Ok(id)
    }

    /// Match one `create`/`open_file`. When every open is released and
    /// nothing of the file is buffered, the engine forgets it (closing its
    /// capacity-tier handle); otherwise after the flush that empties it.
    pub fn release(&self, file: FileId) {
        let mut state = lock(&self.shared);
        if let Some(open) = state.files.get_mut(&file) {
            open.opens = open.opens.saturating_sub(1);
        }
        forget_if_unused(&mut state, file);
    }

    /// Files the engine holds open (for status and tests).
    pub fn open_files(&self) -> usize {
        lock(&self.shared).files.len()
    }

    /// Write `data` at `offset` of `file`.
    pub fn write(&self, file: FileId, offset: u64, data: &[u8]) -> io::Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        let end = offset.checked_add(data.len() as u64).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "write past the largest file offset",
            )
        })?;
        let shared = &*self.shared;
        let mut state = lock(shared);
        let now = shared.clock.now();
        if !state.files.contains_key(&file) {
            return Err(unknown(file));
        }
        let routing = state.buffer.handle_write(
            now,
            WriteRequest {
                file,
                offset,
                len: data.len() as u64,
            },
        );
        if let Some(report) = routing.completed {
            state.stats.streams += 1;
            if report.route == Tier::Fast {
                state.stats.streams_to_fast += 1;
            }
            if report.next_route != report.route {
                // The gate heard of it; a paused flusher may go now.
                shared.changed.notify_all();
            }
        }
        let (s, written) = append_data(shared, state, file, offset, data, routing.tier);
        let mut state = s;
        written?;
        let open = state.files.get_mut(&file).ok_or_else(|| unknown(file))?;
        open.size = open.size.max(end);
        Ok(())
    }

    /// Read up to `len` bytes at `offset`: buffered bytes over capacity bytes.
    ///
    /// Buffered pieces are copied under the engine lock (a flush may reuse
    /// their region once it is released); capacity pieces are read after it
    /// is released, so concurrent readers reach the capacity tier together
    /// instead of one at a time. A write racing with the read may or may not
    /// be seen in those pieces, as with any concurrent read and write.
    pub fn read(&self, file: FileId, offset: u64, len: u64) -> io::Result<Vec<u8>> {
        let shared = &*self.shared;
        let mut state = lock(shared);
        let open = state.files.get(&file).ok_or_else(|| unknown(file))?;
        if offset >= open.size {
            return Ok(Vec::new());
        }
        let len = len.min(open.size - offset);
        let mut buf =
            vec![0u8; usize::try_from(len).map_err(|_| io::Error::other("read too large"))?];
        let handle = Arc::clone(&open.handle);
        let path = open.path.clone();
        let pieces: Vec<Piece> = state.buffer.lookup(file, offset, len).collect();
        let mut holes = Vec::new();
        for piece in pieces {
            let start = (piece.file_offset() - offset) as usize;
            let out = &mut buf[start..start + piece.len() as usize];
            match piece {
                Piece::Hole { file_offset, len } => holes.push((start, len as usize, file_offset)),
                Piece::Buffered { location, .. } => {
                    if let Err(e) = read_buffered(&state, location, out) {
                        if e.kind() == io::ErrorKind::InvalidData {
                            state.stats.corrupt_payloads += 1;
                        }
                        return Err(e);
                    }
                }
            }
        }
        drop(state);
        for (start, len, file_offset) in holes {
            read_fully(handle.as_ref(), &mut buf[start..start + len], file_offset).map_err(
                context(format!(
                    "capacity tier {}: read {path}",
                    shared.capacity.describe()
                )),
            )?;
        }
        Ok(buf)
    }

    /// Make `file`'s writes durable: its capacity file, the log regions
    /// holding its records (with its path records), and its creation.
    pub fn fsync(&self, file: FileId) -> io::Result<()> {
        let shared = &*self.shared;
        let mut state = lock(shared);
        let open = state.files.get(&file).ok_or_else(|| unknown(file))?;
        let what = format!("fsync {}", open.path);
        open.handle.sync_data().map_err(context(&what))?;
        let path = open.path.clone();
        if open.created_unsynced || state.unsynced_creates.contains(&path) {
            let parent = path.parent().unwrap_or_else(RelPath::root);
            shared.capacity.sync_dir(&parent).map_err(context(&what))?;
            state.unsynced_creates.remove(&path);
        }
        let mut state = wait_appends(shared, state);
        let synced = sync_log(shared, &mut state).map_err(context(&what))?;
        commit(shared, &mut state, &synced).map_err(context(&what))?;
        if let Some(open) = state.files.get_mut(&file) {
            open.created_unsynced = false;
        }
        Ok(())
    }

    /// Set `file`'s size. Buffered bytes past it are dropped, durably first.
    pub fn truncate(&self, file: FileId, size: u64) -> io::Result<()> {
        let shared = &*self.shared;
        let mut state = wait_not_busy(shared, lock(shared), file)?;
        let appending = state.files.get(&file).is_some_and(|o| o.appending > 0);
        if state.buffer.has_buffered(file) || appending {
            let (s, appended) = append_required(
                shared,
                state,
                RecordHeader::truncate(file, size, 0),
                &[],
                None,
            );
            state = s;
            let seq = appended?;
            // Applied at once, under the same hold of the lock as the
            // record: records still being written are older and are clipped
            // when indexed; newer ones are not touched.
            state.buffer.truncate(file, size);
            if let Some(open) = state.files.get_mut(&file) {
                if open.appending > 0 {
                    open.truncations.push((seq, size));
                }
            }
            state = wait_appends(shared, state);
            sync_log(shared, &mut state)?;
        }
        let open = state.files.get_mut(&file).ok_or_else(|| unknown(file))?;
        open.handle
            .set_len(size)
            .map_err(context(format!("truncate {}", open.path)))?;
        open.size = size;
        Ok(())
    }

    /// Remove a file. Its buffered bytes are dropped, durably first.
    pub fn unlink(&self, path: &RelPath) -> io::Result<()> {
        let shared = &*self.shared;
        let state = lock(shared);
        // The lock is held across the capacity unlink so no write to the
        // file can slip in between.
        let mut state = match state.ids.get(path).copied() {
            Some(id) => {
                let state = wait_not_busy(shared, state, id)?;
                let (state, dropped) = drop_file(shared, state, id);
                dropped?;
                state
            }
            None => state,
        };
        shared
            .capacity
            .remove_file(path)
            .map_err(context(format!("unlink {path}")))?;
        state.unsynced_creates.remove(path);
        Ok(())
    }

    /// Rename `from` to `to`, replacing a file at `to`.
    pub fn rename(&self, from: &RelPath, to: &RelPath) -> io::Result<()> {
        let shared = &*self.shared;
        let mut state = lock(shared);
        if let Some(&id) = state.ids.get(from) {
            state = wait_not_busy(shared, state, id)?;
        }
        if let Some(&old) = state.ids.get(to) {
            state = wait_not_busy(shared, state, old)?;
            if Some(&old) != state.ids.get(from) {
                let (s, dropped) = drop_file(shared, state, old);
                state = s;
                dropped?;
            }
        }
        // The files that move: `from` itself, or every open file under a
        // renamed directory.
        let moved: Vec<(FileId, RelPath)> = state
            .ids
            .iter()
            .filter_map(|(path, &id)| path.rebase(from, to).map(|p| (id, p)))
            .collect();
        let mut logged = false;
        for (id, new_path) in &moved {
            if state.buffer.has_buffered(*id) {
                // The new path must be durable before the capacity rename,
                // or a crash could flush buffered bytes to the old name.
                let header = RecordHeader::path(*id, new_path, 0)
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
                let (s, appended) =
                    append_required(shared, state, header, new_path.as_str().as_bytes(), None);
                state = s;
                appended?;
                logged = true;
            }
        }
        if logged {
            state = wait_appends(shared, state);
            sync_log(shared, &mut state)?;
        }
        shared
            .capacity
            .rename(from, to)
            .map_err(context(format!("rename {from} to {to}")))?;
        for (id, new_path) in moved {
            if let Some(open) = state.files.get_mut(&id) {
                let old_path = std::mem::replace(&mut open.path, new_path.clone());
                state.ids.remove(&old_path);
                state.ids.insert(new_path.clone(), id);
            }
        }
        let unsynced: Vec<(RelPath, RelPath)> = state
            .unsynced_creates
            .iter()
            .filter_map(|p| p.rebase(from, to).map(|new| (p.clone(), new)))
            .collect();
        for (old_path, new_path) in unsynced {
            state.unsynced_creates.remove(&old_path);
            state.unsynced_creates.insert(new_path);
        }
        Ok(())
    }

    /// The logical size of `path` if the engine holds it open (buffered
    /// bytes included); `None` means the capacity tier's size is current.
    pub fn open_size(&self, path: &RelPath) -> Option<u64> {
        let state = lock(&self.shared);
        state
            .ids
            .get(path)
            .and_then(|id| state.files.get(id))
            .map(|open| open.size)
    }

    /// Attributes of a path; a file's size includes buffered bytes.
    pub fn getattr(&self, path: &RelPath) -> io::Result<Metadata> {
        let state = lock(&self.shared);
        if let Some(open) = state.ids.get(path).and_then(|id| state.files.get(id)) {
            return Ok(Metadata {
                kind: FileKind::File,
                len: open.size,
            });
        }
        drop(state);
        self.shared.capacity.metadata(path)
    }

    /// Entries of a directory.
    pub fn readdir(&self, path: &RelPath) -> io::Result<Vec<DirEntry>> {
        self.shared.capacity.read_dir(path)
    }

    /// Create a directory.
    pub fn mkdir(&self, path: &RelPath) -> io::Result<()> {
        self.shared.capacity.create_dir(path)
    }

    /// Remove an empty directory.
    pub fn rmdir(&self, path: &RelPath) -> io::Result<()> {
        self.shared.capacity.remove_dir(path)
    }

    /// Flush everything buffered and wait until the capacity tier holds
    /// every byte (synced). Errors if the flusher keeps failing.
    pub fn drain(&self) -> io::Result<()> {
        let shared = &*self.shared;
        let mut state = lock(shared);
        state.draining += 1;
        state.buffer.set_draining(true);
        shared.changed.notify_all();
        let errors_at_start = state.stats.flush_errors;
        let result = loop {
            if state.buffer.is_drained() {
                break Ok(());
            }
            if !state.buffer.flush_pending() {
                state.buffer.seal();
                shared.changed.notify_all();
            }
            if state.stats.flush_errors >= errors_at_start + 5 {
                break Err(io::Error::other(format!(
                    "drain: the flusher keeps failing: {}",
                    state.stats.last_flush_error.clone().unwrap_or_default()
                )));
            }
            state = shared
                .changed
                .wait_timeout(state, Duration::from_millis(50))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        };
        state.draining -= 1;
        if state.draining == 0 {
            state.buffer.set_draining(false);
        }
        result
    }

    /// Stop the flusher and close, leaving buffered data in the log (the
    /// next open recovers it). `drain()` first to leave nothing buffered.
    pub fn close(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        lock(&self.shared).shutdown = true;
        self.shared.changed.notify_all();
        if let Some(flusher) = self.flusher.take() {
            // A flusher panic is a bug already reported on stderr.
            let _ = flusher.join();
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.stop();
    }
}

fn unknown(file: FileId) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("no open file with id {}", file.0),
    )
}

fn register(
    state: &mut State,
    path: RelPath,
    handle: Arc<dyn BackendFile>,
    size: u64,
    created: bool,
) -> FileId {
    let id = FileId(state.next_file_id);
    state.next_file_id += 1;
    attach(state, id, path, handle, size, created);
    id
}

/// Make `id` an open file at `path`.
fn attach(
    state: &mut State,
    id: FileId,
    path: RelPath,
    handle: Arc<dyn BackendFile>,
    size: u64,
    created_unsynced: bool,
) {
    state.ids.insert(path.clone(), id);
    state.files.insert(
        id,
        OpenFile {
            path,
            handle,
            size,
            busy: false,
            created_unsynced,
            opens: 0,
            appending: 0,
            truncations: Vec::new(),
        },
    );
}

fn opened(state: &mut State, id: FileId) {
    if let Some(open) = state.files.get_mut(&id) {
        open.opens += 1;
    }
}

/// Drop `id` from the maps if no open is outstanding, the flusher is not
/// writing it and nothing of it is buffered.
fn forget_if_unused(state: &mut State, id: FileId) {
    let unused = state
        .files
        .get(&id)
        .is_some_and(|o| o.opens == 0 && !o.busy && o.appending == 0)
        && !state.buffer.has_buffered(id);
    if unused {
        if let Some(open) = state.files.remove(&id) {
            state.ids.remove(&open.path);
            if open.created_unsynced {
                // A later fsync of the file (opened again) still owes
                // its directory entry a sync.
                state.unsynced_creates.insert(open.path);
            }
        }
    }
}

fn open_creating_parents(
    backend: &dyn Backend,
    path: &RelPath,
) -> io::Result<Arc<dyn BackendFile>> {
    let mut missing = Vec::new();
    let mut dir = path.parent();
    while let Some(d) = dir {
        if d.is_root() || backend.metadata(&d).is_ok() {
            break;
        }
        dir = d.parent();
        missing.push(d);
    }
    for d in missing.into_iter().rev() {
        backend.create_dir(&d)?;
    }
    backend.open(path, OpenOptions::CREATE)
}

/// The log names `path` as the file's newest name but the capacity tier has
/// no such file: a crash fell between a rename's log sync and the capacity
/// rename. Redo it from the newest older name that still exists.
fn redo_rename(capacity: &dyn Backend, history: &[RelPath], path: &RelPath) -> io::Result<()> {
    let older = history
        .iter()
        .rev()
        .skip(1)
        .find(|p| capacity.metadata(p).is_ok());
    if let Some(from) = older {
        if let Some(parent) = path.parent() {
            if !parent.is_root() && capacity.metadata(&parent).is_err() {
                return Ok(()); // the destination directory is gone: nothing to redo into
            }
        }
        capacity
            .rename(from, path)
            .map_err(context(format!("recovery: redo rename {from} to {path}")))?;
        capacity.sync_dir(&path.parent().unwrap_or_else(RelPath::root))?;
    }
    Ok(())
}

fn wait_not_busy<'a>(
    shared: &'a Shared,
    mut state: MutexGuard<'a, State>,
    file: FileId,
) -> io::Result<MutexGuard<'a, State>> {
    while state.files.get(&file).is_some_and(|f| f.busy) {
        state = shared
            .changed
            .wait(state)
            .unwrap_or_else(|e| e.into_inner());
    }
    Ok(state)
}

/// Read `buf.len()` bytes at `offset`; bytes past the end read as zeros.
pub(crate) fn read_fully(file: &dyn BackendFile, buf: &mut [u8], offset: u64) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        let n = file.read_at(&mut buf[done..], offset + done as u64)?;
        if n == 0 {
            // Past the capacity file's end: a hole reads as zeros.
            buf[done..].fill(0);
            break;
        }
        done += n;
    }
    Ok(())
}

/// Copy the buffered bytes at `location` into `out`, verifying the whole
/// record's payload checksum first.
fn read_buffered(state: &State, location: LogLocation, out: &mut [u8]) -> io::Result<()> {
    let region = &state.regions[location.region.0 as usize];
    // INVARIANT: every indexed extent lies inside a recorded data record.
    let (&start, &(len, crc)) = region
        .records
        .range(..=location.offset)
        .next_back()
        .expect("an indexed extent points into a record");
    let payload = region
        .file
        .read_payload(
            LogLocation {
                region: location.region,
                offset: start,
            },
            len,
            crc,
        )
        .map_err(|e| {
            let kind = if e.is_corruption() {
                io::ErrorKind::InvalidData
            } else {
                io::ErrorKind::Other
            };
            io::Error::new(kind, e.to_string())
        })?;
    let skip = (location.offset - start) as usize;
    out.copy_from_slice(&payload[skip..skip + out.len()]);
    Ok(())
}

/// Write `data` at `offset` of `file`, routed to `tier`, record by record:
/// the write buffer places each in the log (a data record, indexed once
/// its payload is there) or on the capacity tier (written here).
fn append_data<'a>(
    shared: &'a Shared,
    mut state: MutexGuard<'a, State>,
    file: FileId,
    offset: u64,
    data: &[u8],
    tier: Tier,
) -> (MutexGuard<'a, State>, io::Result<()>) {
    let chunk = shared.config.record_max_bytes as usize;
    let mut done = 0usize;
    while done < data.len() {
        let part = &data[done..(done + chunk).min(data.len())];
        let part_offset = offset + done as u64;
        let header = match RecordHeader::data(file, part_offset, part, 0) {
            Ok(h) => h,
            Err(e) => {
                return (
                    state,
                    Err(io::Error::new(io::ErrorKind::InvalidInput, e.to_string())),
                )
            }
        };
        let (s, appended) = reserve_and_append(shared, state, header, part, Some(file), Some(tier));
        state = s;
        match appended {
            Ok(Some((location, seq))) => {
                // A truncation newer than this record, made while it was
                // being written, clips it (as replay in sequence order
                // would); an unlinked file takes nothing.
                let limit = state.files.get(&file).map(|open| {
                    open.truncations
                        .iter()
                        .filter(|(t, _)| *t > seq)
                        .map(|(_, size)| *size)
                        .min()
                        .unwrap_or(u64::MAX)
                });
                let len = match limit {
                    Some(limit) => limit.saturating_sub(part_offset).min(part.len() as u64),
                    None => 0,
                };
                if len > 0 {
                    state.buffer.insert(
                        file,
                        Extent {
                            file_offset: part_offset,
                            len: len as u32,
                            location,
                            seq,
                        },
                    );
                }
            }
            Ok(None) => {
                // Placed on the capacity tier: nothing buffered overlaps it.
                let result = match state.files.get(&file) {
                    Some(open) => {
                        open.handle
                            .write_at(part, part_offset)
                            .map_err(context(format!(
                                "capacity tier {}: write {}",
                                shared.capacity.describe(),
                                open.path
                            )))
                    }
                    None => Err(unknown(file)),
                };
                if let Err(e) = result {
                    return (state, Err(e));
                }
            }
            Err(e) => return (state, Err(e)),
        }
        done += part.len();
    }
    (state, Ok(()))
}

/// Append a record that must reach the log (truncate, unlink, path for a
/// rename), waiting for space; returns its sequence number.
fn append_required<'a>(
    shared: &'a Shared,
    state: MutexGuard<'a, State>,
    header: RecordHeader,
    payload: &[u8],
    file: Option<FileId>,
) -> (MutexGuard<'a, State>, io::Result<u64>) {
    let (state, result) = reserve_and_append(shared, state, header, payload, file, None);
    (state, result.map(|r| r.map_or(0, |(_, seq)| seq)))
}

/// Place `header` + `payload` through the write buffer and append it,
/// preceded by a path record of `file` when the region does not describe
/// it yet. A data record (`tier` given: the route of its write) may be
/// placed on the capacity tier instead: then `None` is returned and nothing
/// was appended. Any other record must reach the log and waits for room.
/// Returns the payload's location and the record's sequence number.
fn reserve_and_append<'a>(
    shared: &'a Shared,
    mut state: MutexGuard<'a, State>,
    mut header: RecordHeader,
    payload: &[u8],
    file: Option<FileId>,
    tier: Option<Tier>,
) -> (
    MutexGuard<'a, State>,
    io::Result<Option<(LogLocation, u64)>>,
) {
    let record = record_len(header.len);
    let mut first_attempt = None;
    let path = match file {
        Some(id) => match state.files.get(&id) {
            Some(open) => Some((id, open.path.clone())),
            None => return (state, Err(unknown(id))),
        },
        None => None,
    };
    let path_len = path
        .as_ref()
        .map_or(0, |(_, p)| record_len(p.as_str().len() as u32));
    loop {
        let now = shared.clock.now();
        // The same instant as `now` on the first try: the pipeline counts
        // a wait when the two are equal.
        let first_attempt = *first_attempt.get_or_insert(now);
        let full_before = state.buffer.pipeline().full_count();
        let placement = match (tier, file) {
            (Some(tier), Some(id)) => state.buffer.place_write(
                now,
                id,
                header.offset,
                u64::from(header.len),
                record,
                path_len,
                tier,
                first_attempt,
            ),
            _ => state
                .buffer
                .place_required(now, file, record, path_len, first_attempt),
        };
        match placement {
            Placement::Log(reservation) => {
                let region = reservation.region;
                let mut at = REGION_HEADER_BYTES + reservation.offset;
                if let (Some(seq), Some((id, path))) = (reservation.describe, &path) {
                    let path_header = match RecordHeader::path(*id, path, seq) {
                        Ok(h) => h,
                        Err(e) => {
                            return (
                                state,
                                Err(io::Error::new(io::ErrorKind::InvalidInput, e.to_string())),
                            )
                        }
                    };
                    let log_region = &mut state.regions[region.0 as usize];
                    if let Err(e) =
                        log_region
                            .file
                            .append_at(at, &path_header, path.as_str().as_bytes())
                    {
                        return (state, Err(append_error(shared, e)));
                    }
                    at += path_header.record_len();
                }
                debug_assert_eq!(at, REGION_HEADER_BYTES + reservation.record_offset);
                header.seq = reservation.seq;
                let log_region = &mut state.regions[region.0 as usize];
                if header.kind == RecordKind::Data {
                    // The payload is written outside the lock; the index
                    // learns of it only once it is there (append_data).
                    log_region.in_flight += 1;
                    let region_file = Arc::clone(&log_region.file);
                    if let Some(open) = file.and_then(|id| state.files.get_mut(&id)) {
                        open.appending += 1;
                    }
                    drop(state);
                    let written = region_file.append_at(at, &header, payload);
                    state = lock(shared);
                    let log_region = &mut state.regions[region.0 as usize];
                    log_region.in_flight -= 1;
                    let idle = log_region.in_flight == 0;
                    if let Some(open) = file.and_then(|id| state.files.get_mut(&id)) {
                        open.appending -= 1;
                        if open.appending == 0 {
                            open.truncations.clear();
                        }
                    }
                    if idle {
                        shared.changed.notify_all();
                    }
                    if let Err(e) = written {
                        return (state, Err(append_error(shared, e)));
                    }
                } else if let Err(e) = log_region.file.append_at(at, &header, payload) {
                    return (state, Err(append_error(shared, e)));
                }
                let log_region = &mut state.regions[region.0 as usize];
                log_region.dirty = true;
                let payload_offset = at + crate::log::RECORD_HEADER_BYTES;
                if header.kind == RecordKind::Data {
                    log_region
                        .records
                        .insert(payload_offset, (header.len, header.payload_crc));
                }
                // Wake the flusher only when a region filled: waking it at
                // every append costs a context switch and lock contention
                // per write (docs/benchmarks.md, absorption).
                if state.buffer.pipeline().full_count() > full_before {
                    shared.changed.notify_all();
                }
                let location = LogLocation {
                    region,
                    offset: payload_offset,
                };
                return (state, Ok(Some((location, header.seq))));
            }
            Placement::Capacity => return (state, Ok(None)),
            Placement::Wait { retry_at_latest } => {
                if now.saturating_since(first_attempt) > FORCED_WAIT_MAX {
                    // Only records that must reach the log wait this long;
                    // others go through after `wait_max`.
                    let message = format!(
                        "fast tier {} is full and has not freed a region for {} s; is the capacity tier failing? ({})",
                        shared.fast.describe(),
                        FORCED_WAIT_MAX.as_secs(),
                        state.stats.last_flush_error.clone().unwrap_or_default()
                    );
                    return (
                        state,
                        Err(io::Error::new(io::ErrorKind::StorageFull, message)),
                    );
                }
                // Wake the flusher (the starvation guard lets it flush now).
                shared.changed.notify_all();
                let wait = retry_at_latest
                    .saturating_since(now)
                    .clamp(Duration::from_millis(1), Duration::from_millis(100));
                state = shared
                    .changed
                    .wait_timeout(state, wait)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
            Placement::TooLarge => {
                let message = format!(
                    "fast tier {}: no room for a {} B record",
                    shared.fast.describe(),
                    record + path_len
                );
                return (
                    state,
                    Err(io::Error::new(io::ErrorKind::StorageFull, message)),
                );
            }
        }
    }
}

fn append_error(shared: &Shared, e: io::Error) -> io::Error {
    io::Error::new(
        e.kind(),
        format!(
            "fast tier {}: append to the log: {e}",
            shared.fast.describe()
        ),
    )
}

/// Wait until no data record is being written outside the lock, so a
/// sync covers a hole-free prefix of every region.
fn wait_appends<'a>(shared: &'a Shared, mut state: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
    while state.regions.iter().any(|r| r.in_flight > 0) {
        state = shared
            .changed
            .wait(state)
            .unwrap_or_else(|e| e.into_inner());
    }
    state
}

/// Sync every log region appended to since its last sync. Callers first
/// [`wait_appends`].
fn sync_log(shared: &Shared, state: &mut State) -> io::Result<Vec<RegionId>> {
    let mut synced = Vec::new();
    for region in state.regions.iter_mut().filter(|r| r.dirty) {
        region.file.sync().map_err(context(format!(
            "fast tier {}: sync the log",
            shared.fast.describe()
        )))?;
        region.dirty = false;
        synced.push(region.file.region());
    }
    Ok(synced)
}

/// After `synced` regions were synced: append a commit record to the
/// filling region if it is one of them and has room, and sync it. Records
/// before a commit are known to be synced, so recovery checks only their
/// headers and treats a failure among them as corruption (reported, the
/// scan goes on) instead of a torn tail (which would drop later records).
/// The commit is an optimisation: when there is no room it is skipped.
fn commit(shared: &Shared, state: &mut State, synced: &[RegionId]) -> io::Result<()> {
    match state.buffer.pipeline().filling() {
        Some(region) if synced.contains(&region) => {}
        _ => return Ok(()),
    }
    let Some(reservation) = state
        .buffer
        .place_optional(shared.clock.now(), record_len(0))
    else {
        return Ok(());
    };
    let log_region = &mut state.regions[reservation.region.0 as usize];
    log_region
        .file
        .append_at(
            REGION_HEADER_BYTES + reservation.offset,
            &RecordHeader::commit(reservation.seq),
            &[],
        )
        .map_err(|e| append_error(shared, e))?;
    log_region.file.sync().map_err(context(format!(
        "fast tier {}: sync the log",
        shared.fast.describe()
    )))
}

/// Forget `id`: an unlink record (durable) if it has buffered bytes, then
/// the index and the maps.
fn drop_file<'a>(
    shared: &'a Shared,
    mut state: MutexGuard<'a, State>,
    id: FileId,
) -> (MutexGuard<'a, State>, io::Result<()>) {
    // A record of the file still being written needs the unlink record
    // too, or recovery would bring the file back with it.
    let appending = state.files.get(&id).is_some_and(|o| o.appending > 0);
    if state.buffer.has_buffered(id) || appending {
        let (s, result) = append_required(shared, state, RecordHeader::unlink(id, 0), &[], None);
        state = wait_appends(shared, s);
        if let Err(e) = result.and_then(|_| sync_log(shared, &mut state)) {
            return (state, Err(e));
        }
        state.buffer.remove_file(id);
    }
    if let Some(open) = state.files.remove(&id) {
        state.ids.remove(&open.path);
    }
    (state, Ok(()))
}

/// One region flush step's outcome.
enum Step {
    /// Nothing to do now; wait this long or until notified.
    Idle(Duration),
    /// Stop the thread.
    Shutdown,
}

fn flusher_loop(shared: &Shared) {
    let mut backoff = Duration::from_millis(50);
    loop {
        match flush_one_region(shared) {
            Ok(Some(step)) => {
                let state = lock(shared);
                match step {
                    Step::Shutdown => return,
                    Step::Idle(d) => {
                        let _ = shared.changed.wait_timeout(state, d);
                    }
                }
            }
            Ok(None) => backoff = Duration::from_millis(50),
            Err(e) => {
                let mut state = lock(shared);
                state.stats.flush_errors += 1;
                state.stats.last_flush_error = Some(e.to_string());
                shared.changed.notify_all();
                if state.shutdown {
                    return;
                }
                let _ = shared.changed.wait_timeout(state, backoff);
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
        }
    }
}

/// Flush the oldest full region if the gate allows: `Ok(None)` when a
/// region was flushed and reset, `Ok(Some(step))` when there was nothing
/// to do, `Err` when a flush failed (the region stays buffered).
fn flush_one_region(shared: &Shared) -> io::Result<Option<Step>> {
    let mut state = lock(shared);
    if state.shutdown {
        return Ok(Some(Step::Shutdown));
    }
    let now = shared.clock.now();
    let region = match state.buffer.poll_flush(now) {
        FlushPoll::Idle => return Ok(Some(Step::Idle(Duration::from_millis(100)))),
        FlushPoll::Pause { recheck_at } => {
            let wait = recheck_at.map_or(Duration::from_millis(100), |t| t.saturating_since(now));
            return Ok(Some(Step::Idle(
                wait.clamp(Duration::from_millis(1), Duration::from_millis(100)),
            )));
        }
        FlushPoll::Flush { region, .. } => region,
    };
    if state.regions[region.0 as usize].in_flight > 0 {
        // A record is still being written into it; its end notifies.
        return Ok(Some(Step::Idle(Duration::from_millis(10))));
    }
    let runs = state
        .buffer
        .start_flush(region, shared.config.flush_run_max_bytes)
        .map_err(|e| io::Error::other(e.to_string()))?;
    drop(state);
    let mut touched: HashMap<FileId, Arc<dyn BackendFile>> = HashMap::new();
    for run in runs {
        if let Err(e) = flush_run(shared, region, run, &mut touched) {
            let mut state = lock(shared);
            let _ = state.buffer.abort_flush(region);
            return Err(e);
        }
    }
    // Every capacity file the region's bytes went to is synced before the
    // region can be reused (DESIGN §4.5).
    for handle in touched.values() {
        if let Err(e) = handle.sync_data() {
            let mut state = lock(shared);
            let _ = state.buffer.abort_flush(region);
            return Err(io::Error::new(
                e.kind(),
                format!(
                    "capacity tier {}: sync after flush: {e}",
                    shared.capacity.describe()
                ),
            ));
        }
    }
    let mut state = lock(shared);
    let log_region = &mut state.regions[region.0 as usize];
    let generation = log_region.file.generation() + 1;
    let reset = log_region
        .file
        .reset(generation)
        .and_then(|()| log_region.file.sync());
    if let Err(e) = reset {
        let _ = state.buffer.abort_flush(region);
        return Err(io::Error::new(
            e.kind(),
            format!(
                "fast tier {}: reset region {}: {e}",
                shared.fast.describe(),
                region.0
            ),
        ));
    }
    log_region.records.clear();
    log_region.dirty = false;
    state
        .buffer
        .finish_flush(region)
        .map_err(|e| io::Error::other(e.to_string()))?;
    let flushed: Vec<FileId> = state.files.keys().copied().collect();
    for id in flushed {
        forget_if_unused(&mut state, id);
    }
    state.stats.regions_flushed += 1;
    shared.changed.notify_all();
    Ok(None)
}

/// Write the bytes of `run` that still live in `region` to the capacity
/// tier, one piece at a time, looking them up again under the lock so
/// superseded bytes are never written.
fn flush_run(
    shared: &Shared,
    region: RegionId,
    run: FlushRunRef,
    touched: &mut HashMap<FileId, Arc<dyn BackendFile>>,
) -> io::Result<()> {
    let file = run.file;
    let mut state = lock(shared);
    let pieces = state.buffer.flush_pieces(region, run);
    let Some(open) = state.files.get(&file) else {
        return Ok(());
    };
    let handle = Arc::clone(&open.handle);
    let path = open.path.clone();
    let mut writes = Vec::with_capacity(pieces.len());
    for (file_offset, len, location) in pieces {
        let mut buf = vec![0u8; len as usize];
        if let Err(e) = read_buffered(&state, location, &mut buf) {
            if e.kind() == io::ErrorKind::InvalidData {
                state.stats.corrupt_payloads += 1;
            }
            return Err(io::Error::new(e.kind(), format!("flush {path}: {e}")));
        }
        writes.push((file_offset, buf));
    }
    if writes.is_empty() {
        return Ok(());
    }
    if let Some(open) = state.files.get_mut(&file) {
        open.busy = true;
    }
    drop(state);
    let mut result = Ok(());
    let mut written = 0u64;
    for (at, buf) in &writes {
        take_flush_tokens(shared, buf.len() as u64);
        if let Err(e) = handle.write_at(buf, *at) {
            result = Err(io::Error::new(
                e.kind(),
                format!(
                    "capacity tier {}: flush {path}: {e}",
                    shared.capacity.describe()
                ),
            ));
            break;
        }
        written += buf.len() as u64;
    }
    let mut state = lock(shared);
    if let Some(open) = state.files.get_mut(&file) {
        open.busy = false;
    }
    state.stats.flushed_bytes += written;
    shared.changed.notify_all();
    touched.insert(file, handle);
    result
}

/// Wait until the flush bandwidth cap lets `bytes` more go to the capacity
/// tier (at once when there is no cap). A shutdown ends the wait early, so
/// closing never sleeps out the cap; that one run then goes unthrottled.
fn take_flush_tokens(shared: &Shared, bytes: u64) {
    loop {
        let now = shared.clock.now();
        let mut state = lock(shared);
        if state.shutdown {
            return;
        }
        match state.flush_tokens.try_take(now, bytes) {
            Ok(()) => return,
            Err(at) => {
                drop(state);
                shared
                    .clock
                    .sleep(at.saturating_since(now).min(Duration::from_millis(100)));
            }
        }
    }
}
