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
//! Layout: this file holds the shared state and the public API; `config`
//! (configuration, counters, status), `recovery` (open), `quarantine`
//! (the heartbeat, and recovered bytes not written over a file changed
//! meanwhile), `files` (the open-file table), `names` (link, unlink,
//! rename), `append` (placing and appending records, log syncs),
//! `degrade` (an append that fails), `read` (buffered and capacity reads),
//! `sync` (fsync, and the per-file sync that puts a file's buffered bytes
//! on the capacity tier), `attrs` (a held file's size when other nodes
//! share its capacity file), `fallocate` (fallocate's modes, buffered
//! bytes written back first where a mode changes them), `truncate` (a
//! truncate as a machine), `holds` (the counts of work under way, as
//! tokens) and `flush` (the flusher thread).
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

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use sluice_env::{
    wait_while, Backend, BackendFile, Clock, DirEntry, FileKind, Metadata, OpenOptions, RelPath,
    Stat,
};
use sluice_policy::extent_index::Piece;
use sluice_policy::token_bucket::TokenBucket;
use sluice_policy::write_buffer::WriteBuffer;
use sluice_policy::{FileId, Tier, WriteRequest};

use crate::incidents::Incidents;
use crate::log::RegionFile;

/// Carry an [`append::Append`] through to its end, with `$state` the
/// engine lock's guard (a `let mut` binding): its waits, and its work with
/// the lock let go, happen here in the caller, so every place the engine
/// lock is released is in plain sight. Evaluates to the record's outcome
/// (`io::Result<Option<(LogLocation, u64)>>`, as `append::Next::Done`).
macro_rules! drive {
    ($shared:expr, $state:ident, $append:expr) => {{
        let append = &mut $append;
        loop {
            match append.step($shared, &mut $state) {
                $crate::engine::append::Next::Done(done) => break done,
                $crate::engine::append::Next::Wait(wait) => {
                    $state = sluice_env::wait_for(&$shared.changed, $state, wait);
                }
                $crate::engine::append::Next::Unlocked(work) => {
                    drop($state);
                    let outcome = work.run($shared);
                    $state = sluice_env::lock(&$shared.state);
                    append.resume(outcome);
                }
            }
        }
    }};
}

mod ahead;
mod append;
mod attrs;
mod cache;
mod config;
mod degrade;
mod fallocate;
mod files;
mod flush;
mod health;
mod held;
mod holds;
#[cfg(test)]
mod invariants;
mod marks;
mod mirror;
mod names;
#[cfg(test)]
mod orders;
mod quarantine;
mod read;
mod recovery;
mod sync;
mod traffic;
mod truncate;
mod unsynced;
mod writeback;

use append::{append_data, appends_in_flight};
use config::Placements;
pub use config::{
    CloseSync, Doorbell, EngineConfig, EngineStats, EngineStatus, FilePlacement, HeldMark,
    OnDemand, FILES_PLACED_MAX,
};
use files::{
    add_name, at_rest, busy, capacity_stat, file_io, file_of, forget_if_unused, hold_alone, opened,
    register, unknown,
};
use flush::flush_until;
pub use held::{HeldState, Mark, Sealing, HELD_XATTR, HIDDEN_DIR, STATE_XATTR};
pub use marks::MarkStore;
pub use quarantine::{
    find as quarantine_find, list as quarantine_list, remove as quarantine_remove,
    restore as quarantine_restore, QuarantineEntry, QUARANTINE_DIR,
};
pub(crate) use read::read_fully;
use read::{pin, unpin};
use traffic::{keep_model_current, TrafficMeter};
use truncate::{Truncate, Until};
use writeback::WritebackGate;

/// How long a write that must go to the log (it overlaps buffered bytes)
/// waits for space before it fails with "storage full".
const FORCED_WAIT_MAX: Duration = Duration::from_secs(60);

/// The burst buffer over a fast and a capacity backend.
pub struct Engine {
    shared: Arc<Shared>,
    flusher: Option<JoinHandle<()>>,
    heartbeat: Option<JoinHandle<()>>,
    /// On-demand: answers other nodes' recalls (held.rs).
    recall: Option<JoinHandle<()>>,
}

struct Shared {
    fast: Arc<dyn Backend>,
    capacity: Arc<dyn Backend>,
    clock: Arc<dyn Clock>,
    config: EngineConfig,
    state: Mutex<State>,
    changed: Condvar,
    /// Bumped, under the engine lock, whenever buffered bytes leave the
    /// index because they reached the capacity tier (a region reset, a
    /// file's sync): a capacity length read before such a bump may miss
    /// bytes the index no longer shows, so the logical size (attrs.rs) is
    /// computed again from a new read. An atomic so a stat takes its epoch
    /// without the lock (every lookup and getattr does).
    left_log: AtomicU64,
    /// Set (and notified) when the engine stops: ends the heartbeat.
    alive_stop: (Mutex<bool>, Condvar),
    /// `last_errors`: the newest failures (flushes here; the FUSE adapter
    /// records the errors it answers applications with).
    incidents: Arc<Incidents>,
    /// Who writes back to the capacity tier now: one sync at a time, the
    /// flusher when none waits (writeback.rs).
    writeback: WritebackGate,
    /// The capacity tier as the write-backs find it (traffic.rs).
    traffic: TrafficMeter,
    /// On-demand consistency: this node's name and the mark lock
    /// (held.rs); `None` under the other modes.
    held: Option<held::Held>,
}

struct LogRegion {
    /// Shared so a data record's payload can be written outside the lock.
    file: Arc<RegionFile>,
    /// Sequence numbers of the data records reserved in this region whose
    /// payload is being written outside the lock: a sync waits for those
    /// reserved before it (`appends_in_flight`), so a synced region never has a
    /// hole before a record the sync covers; a flush of the region waits
    /// for none.
    in_flight: BTreeSet<u64>,
    /// Data records: payload offset -> (length, payload checksum).
    records: BTreeMap<u64, (u32, u32)>,
    /// Appended since the last sync.
    dirty: bool,
    /// Reads copying buffered bytes out of this region outside the lock
    /// (pins, holds.rs): the flusher resets the region only at 0.
    readers: u32,
    /// Records ever reserved in this region (never reset): an fsync that
    /// synced the region outside the lock appends its commit record only
    /// if nothing was appended since.
    appends: u64,
    /// The offset of the first record whose append failed since the last
    /// reset: the region was closed there, and recovery ends it there
    /// (degrade.rs).
    broken_at: Option<u64>,
    /// Flushed and retired, its records kept as clean copies (cache.rs)
    /// until the region is filled again.
    cached: bool,
    /// Times the region was filled again after it was retired: a clean
    /// read copied while this changed may hold new records' bytes.
    reuses: u64,
}

struct OpenFile {
    /// The name its path records use: one of `names` (or its last name
    /// before it became name-less, `unlinked`).
    path: RelPath,
    /// Every name of the file the engine knows (hard links: several), each
    /// mapped to it in `State::ids`.
    names: Vec<RelPath>,
    /// The capacity tier's identity of the file (`Stat::identity`: file
    /// system and inode number), the same across its names (`None` when
    /// the backend keeps none: known by path only).
    ino: Option<(u64, u64)>,
    handle: Arc<dyn BackendFile>,
    /// The name was removed (unlinked or renamed over) while the file was
    /// open: it lives on for its open handles (POSIX), has no name in the
    /// engine, and takes writes on its capacity file only (a log record
    /// would need a path record, which would bring the name back at
    /// recovery). Forgotten at its last release.
    unlinked: bool,
    /// Orders this file's writes and truncates, which do their tier I/O
    /// outside the engine lock: taken before that lock, never while holding
    /// it. Writers of other files do not wait for it. Writes routed to the
    /// log share it (their records are ordered by sequence number, and a
    /// write among them placed on the capacity tier waits for room in the
    /// log instead: `in_flight`, append.rs); a write routed to the
    /// capacity tier and a truncate hold it alone.
    io: Arc<RwLock<()>>,
    /// Orders this file's syncs ([`Engine::sync_file`]): two closes of one
    /// file share one write-back (the second finds what is left), and
    /// writers of the file do not wait for either.
    sync_lock: Arc<Mutex<()>>,
    /// Logical size: capacity bytes and buffered bytes together.
    size: u64,
    /// When the last write (buffered or not) was made: the file's mtime
    /// and ctime until its capacity file catches up, and the mtime the
    /// flusher gives it back after writing buffered bytes (which would
    /// otherwise stamp the flush time on it).
    written: Option<SystemTime>,
    /// Capacity writes of this file's buffered bytes in progress outside
    /// the lock (flush runs, write-backs). Like the other counts of work
    /// under way here and in [`LogRegion`], it changes only through the
    /// tokens of holds.rs.
    busy: u32,
    /// [`Engine::sync_file`] is writing every buffered byte of the file to
    /// its capacity file (0 or 1: under the file's `sync_lock`): a flush
    /// run of the file waits for it and then looks its bytes up again
    /// (gone once the sync dropped them), instead of writing the same
    /// bytes a second time beside it.
    syncing: u32,
    /// `create`/`open_file` calls not yet matched by `release`. A released
    /// file is forgotten once nothing of it is buffered.
    opens: u32,
    /// Callers waiting for the file's data records in flight (the write
    /// buffer's, `WriteBuffer::in_flight`; several at once: writers of one
    /// file share its I/O lock) to land ([`files::flush_file`]): while
    /// nonzero, no new data record of the file is reserved, so the wait
    /// ends however many writers the file has.
    quiescing: u32,
    /// Written or truncated through this engine since [`Engine::sync_file`]
    /// last synced its capacity file: a sync of a file only read costs
    /// nothing.
    capacity_unsynced: bool,
    /// Opened for writing through FUSE passthrough
    /// ([`Engine::passthrough_file`]): the kernel writes the capacity file
    /// without the engine seeing it, so every [`Engine::sync_file`] of the
    /// file syncs that (close-to-open) for as long as the engine holds it,
    /// unless the file is empty or as `kernel_stamp` says.
    kernel_writes: bool,
    /// This node's writers of the capacity file under way (a flush, a
    /// write-back, a straight write, a truncate): while any runs, its
    /// clean copies are not compared with the capacity file, which the
    /// last one stamps again when it ends (cache.rs).
    own_writers: u32,
    /// The capacity file as a stat saw it before the kernel could write
    /// it (the first handle opened for writing by passthrough, then each
    /// sync of kernel writes), on a tier with exact change times
    /// ([`Backend::change_times_exact`]); `Unknown` elsewhere. A sync that
    /// finds the file as this says has nothing of the kernel's to sync.
    kernel_stamp: KernelStamp,
    /// The capacity file's stamp at the engine's last stat of it: the
    /// open's (at registration or its size refresh), or a later size
    /// refresh ([`Engine::page_cache_stamp_at_open`]).
    last_stamp: Option<ChangeStamp>,
    /// On-demand: this node holds the capacity file's held mark, as last
    /// written (held.rs). Set before the file's first byte is placed in
    /// the log; while set, the file is not forgotten.
    held: Option<held::MarkWritten>,
}

/// Where [`OpenFile::kernel_stamp`] stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum KernelStamp {
    /// None: every sync of kernel writes syncs.
    Unknown,
    /// The first writer's stat is under way; `poisoned` once another
    /// handle that may write came before it was taken (its writes may be
    /// in the stat), so it is not kept.
    Pending { poisoned: bool },
    /// Taken: the file as a stat saw it.
    Taken(ChangeStamp),
}

impl KernelStamp {
    fn taken(self) -> Option<ChangeStamp> {
        match self {
            KernelStamp::Taken(stamp) => Some(stamp),
            _ => None,
        }
    }
}

/// A capacity file's identity, length, mtime and ctime: unchanged on a
/// tier with exact change times means not written. Closes of files the
/// kernel writes compare it (`KernelStamp`), so do the clean copies of a
/// file (cache.rs) and the mount's copies in the kernel's page cache
/// ([`Engine::page_cache_stamp`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChangeStamp {
    identity: (u64, u64),
    len: u64,
    mtime: SystemTime,
    ctime: SystemTime,
}

impl ChangeStamp {
    fn of(st: &Stat) -> ChangeStamp {
        ChangeStamp {
            identity: st.identity(),
            len: st.len,
            mtime: st.mtime,
            ctime: st.ctime,
        }
    }
}

struct State {
    /// Redirector, region pipeline, flush gate, extent index and sequence
    /// numbers: the policy side of every write, truncate and flush.
    buffer: WriteBuffer,
    /// The flush bandwidth cap.
    flush_tokens: TokenBucket,
    regions: Vec<LogRegion>,
    files: HashMap<FileId, OpenFile>,
    /// Every known name of every file (several names may map to one id),
    /// ordered too, for the names a renamed directory moves.
    ids: sluice_env::PathMap<FileId>,
    /// Files by capacity identity (`Stat::identity`), so another name of
    /// an open file opens that file (hard links).
    by_ino: HashMap<(u64, u64), FileId>,
    /// Names created, renamed or recovered by the engine whose directory
    /// entries no sync has made durable yet: a file's fsync syncs what its
    /// name needs, a clean stop syncs them all.
    unsynced_names: unsynced::UnsyncedNames,
    /// Counts the engine's changes of what a path names (link, unlink,
    /// rename), each bumped right after the capacity tier's change, under
    /// the same hold of the engine lock (an unlink of an unheld name,
    /// made without it, is counted in `unlinking` while it runs): an open
    /// or create that made its capacity call without the lock registers
    /// the file only if no such change ran meanwhile
    /// ([`Engine::open_file`]).
    names_epoch: u64,
    /// Unlinks of names the engine does not hold, running without the
    /// lock (names.rs, `begin_unheld_unlink`).
    unlinking: u32,
    /// An open or create waits for `unlinking` to reach 0 (woken through
    /// `Shared::changed` only when one does: `unlinks_running`).
    awaiting_unlinks: bool,
    next_file_id: u64,
    draining: u32,
    shutdown: bool,
    /// How long the flusher waits after its next failure (doubles per
    /// failure, back to the minimum after a flush that worked or when a
    /// drain starts).
    flush_backoff: Duration,
    /// A drain asks the flusher to retry now instead of sitting out its
    /// backoff.
    flush_retry_now: bool,
    stats: EngineStats,
    /// Where the most recently written files' bytes went.
    placements: Placements,
    /// The capacity tier's health as last noted (health.rs): nothing is
    /// flushed unless it is healthy.
    capacity_health: sluice_env::TierHealth,
    /// Per file with clean copies (cache.rs): its capacity file's
    /// attributes when they were last known to match the copies.
    stamps: HashMap<FileId, ChangeStamp>,
    /// Files the engine forgot (no open, nothing buffered) whose clean
    /// copies it keeps, by capacity identity: an open finds them again.
    parked: HashMap<(u64, u64), FileId>,
    /// Buffered bytes flush runs have written to the capacity tier
    /// already, per file (ahead.rs): a later flush or sync skips them.
    ahead: HashMap<FileId, Vec<ahead::Ahead>>,
    /// The newest records' payloads in memory (mirror.rs): write-backs,
    /// flushes and reads copy from them instead of the fast tier.
    mirror: mirror::Mirror,
}

impl OpenFile {
    /// See [`Engine::overlay`].
    fn overlay(&self, stat: &mut Stat) {
        stat.len = self.size;
        stat.blocks = stat.blocks.max(self.size.div_ceil(512));
        if let Some(written) = self.written {
            stat.mtime = stat.mtime.max(written);
            stat.ctime = stat.ctime.max(written);
        }
    }
}

impl State {
    /// The counters, with the byte and wait counts the write buffer keeps.
    fn stats(&self) -> EngineStats {
        let placed = self.buffer.counters();
        let (memory_copy_bytes, memory_copy_hits, memory_copy_misses) = self.mirror.usage();
        EngineStats {
            fast_bytes: placed.fast_bytes,
            capacity_bytes: placed.capacity_bytes,
            forced_to_log_bytes: placed.forced_to_log_bytes,
            write_through_bytes: placed.write_through_bytes,
            waits: self.buffer.pipeline().counters().waits,
            cached_bytes: self.buffer.cached_bytes(),
            memory_copy_bytes,
            memory_copy_hits,
            memory_copy_misses,
            ..self.stats.clone()
        }
    }
}

/// `what` in front of an error's message; its kind and OS error stay (the
/// mount turns the OS error back into the errno the tier returned).
fn context(what: impl std::fmt::Display) -> impl FnOnce(io::Error) -> io::Error {
    move |e| sluice_env::with_context(e, what)
}

fn region_path(r: u32) -> io::Result<RelPath> {
    RelPath::new(&format!("log/region-{r:04}"))
}

/// The condition to wait on while an unlink of a name the engine does not
/// hold is under way (names.rs, `begin_unheld_unlink`): their end is a change of
/// names an open or create made without the lock must see. A waiter leaves
/// `awaiting_unlinks` set, so the last unlink to end wakes it.
fn unlinks_running(state: &mut State) -> bool {
    let running = state.unlinking > 0;
    state.awaiting_unlinks |= running;
    running
}

/// Whether `path` on the capacity tier names the file whose attributes
/// are `stat` (a backend without attributes: whether the name is there).
fn still_named(shared: &Shared, path: &RelPath, stat: Option<&Stat>) -> bool {
    match (stat, shared.capacity.stat(path)) {
        (Some(mine), Ok(now)) => now.identity() == mine.identity(),
        (None, _) => shared.capacity.metadata(path).is_ok(),
        (Some(_), Err(_)) => false,
    }
}

/// How [`Engine::drain_or_stop`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Drained {
    /// The capacity tier holds every byte.
    All,
    /// Asked to stop first: the rest stays buffered in the log.
    Stopped,
}

/// A capacity file the kernel may serve itself ([`Engine::passthrough_file`]).
pub struct KernelFile {
    /// The capacity file.
    pub file: Arc<dyn BackendFile>,
    /// Its length as the engine knows it (at rest, the capacity file's),
    /// so the mount need not stat it again; `None` once the kernel writes
    /// it unseen through another handle.
    pub len: Option<u64>,
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
        recovery::open(fast, capacity, clock, config, true)
    }

    /// The flusher of an engine opened without one (`orders.rs`).
    #[cfg(test)]
    fn start_flusher(&mut self) -> io::Result<()> {
        if self.flusher.is_none() {
            self.flusher = Some(recovery::spawn_flusher(&self.shared)?);
        }
        Ok(())
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> EngineStats {
        sluice_env::lock(&self.shared.state).stats()
    }

    /// A snapshot for status displays and metrics.
    pub fn status(&self) -> EngineStatus {
        let state = sluice_env::lock(&self.shared.state);
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
            // A region whose bytes all left the index (a per-file sync)
            // still waits for its flush, but holds nothing buffered.
            oldest_buffered_age: state
                .buffer
                .oldest_unflushed_write()
                .filter(|_| state.buffer.buffered_bytes() > 0)
                .map(|first| self.shared.clock.now().saturating_since(first)),
            files: state.placements.snapshot(|f| redirector.route_of(f)),
            capacity_health: state.capacity_health.clone(),
            disk_deferred_requests: redirector.classifier().map_or(0, |c| c.deferred()),
            new_file_requests: redirector.classifier().map_or(0, |c| c.new_files()),
            cost_seek: redirector.classifier().map(|c| c.model().capacity_seek),
            capacity_fit: self.shared.traffic.estimate(),
        }
    }

    /// Files whose recovered bytes were quarantined (this mount's recovery
    /// and earlier ones), oldest first: docs/crash-consistency.md.
    pub fn quarantined(&self) -> io::Result<Vec<QuarantineEntry>> {
        quarantine::list(self.shared.fast.as_ref())
    }

    /// The ring of this engine's newest failures (`last_errors`): the
    /// flusher records its errors there, the FUSE adapter the errors it
    /// answers applications with.
    pub fn incidents(&self) -> &Arc<Incidents> {
        &self.shared.incidents
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

    /// Whether the engine holds the file at `path` (open, or with bytes
    /// buffered): then its bytes are the engine's to serve, even if the
    /// path has since joined another class (a checkpoint job registered
    /// after it was written).
    pub fn holds(&self, path: &RelPath) -> bool {
        sluice_env::lock(&self.shared.state).ids.contains_key(path)
    }

    /// Bytes the log's region files may still take from the fast tier's
    /// file system: each grows to its full size as it fills, and stays so
    /// (a flushed region is reused in place). The stager keeps them out of
    /// the room it places checkpoints in ([`crate::Router::new`]).
    pub fn log_growth(&self) -> u64 {
        let full = self.shared.config.region_bytes + crate::log::REGION_HEADER_BYTES;
        let files: Vec<Arc<RegionFile>> = sluice_env::lock(&self.shared.state)
            .regions
            .iter()
            .map(|r| Arc::clone(&r.file))
            .collect();
        files
            .iter()
            .map(|f| full.saturating_sub(f.file().len().unwrap_or(full)))
            .sum()
    }

    /// Bytes buffered in the log (not yet on the capacity tier).
    pub fn buffered_bytes(&self) -> u64 {
        sluice_env::lock(&self.shared.state).buffer.buffered_bytes()
    }

    /// Create a new regular file (error if it exists).
    pub fn create(&self, path: &RelPath) -> io::Result<FileId> {
        self.create_stat(path).map(|(id, _)| id)
    }

    /// [`Engine::create`], with the new capacity file's attributes as
    /// its handle gave them right after the create (`None` from a backend
    /// without `stat`): the mount answers the kernel's CREATE from them
    /// instead of a second stat by path.
    ///
    /// The capacity tier's create runs without the engine lock (issue 33:
    /// held across it, every create, open and close of the mount waited
    /// for each create's journal work, one at a time); the file is
    /// registered after it, as [`Engine::open_file`] does.
    pub fn create_stat(&self, path: &RelPath) -> io::Result<(FileId, Option<Stat>)> {
        let shared = &*self.shared;
        let state = sluice_env::lock(&shared.state);
        if state.ids.contains_key(path) {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("create {path}: file exists"),
            ));
        }
        let epoch = state.names_epoch;
        drop(state);
        let handle = shared
            .capacity
            .open(
                path,
                OpenOptions {
                    create: true,
                    create_new: true,
                    ..OpenOptions::default()
                },
            )
            .map_err(context(format!("create {path}")))?;
        let mut state = wait_while(
            &shared.changed,
            sluice_env::lock(&shared.state),
            None,
            unlinks_running,
        );
        let stat = capacity_stat(shared, handle.as_ref(), path);
        if state.names_epoch != epoch && !still_named(shared, path, stat.as_ref()) {
            // A rename over the name, or of a directory above it, ran
            // between the create and now (the kernel's lock on the parent
            // directory keeps this mount's own renames and unlinks of the
            // name itself out): the file is not at `path` any more.
            return Err(io::Error::new(
                io::ErrorKind::Interrupted,
                format!("create {path}: the name was renamed or removed during the create"),
            ));
        }
        // An open of the new file (it exists from the create on) may have
        // registered it meanwhile: this create opens that file too.
        let ino = stat.as_ref().map(Stat::identity);
        if let Some(id) = file_of(&state, path, ino) {
            add_name(&mut state, id, path);
            state.unsynced_names.created(path);
            opened(&mut state, id);
            return Ok((id, stat));
        }
        let id = register(&mut state, path.clone(), handle, stat.as_ref(), true)?;
        opened(&mut state, id);
        Ok((id, stat))
    }

    /// Open an existing regular file. Another name of a file the engine
    /// holds (a hard link: the same capacity inode) opens that file.
    ///
    /// A file the engine already holds has its size re-read from its
    /// capacity file first (another node may have changed it: see
    /// the logical size, attrs.rs), as an NFS client revalidates at open.
    ///
    /// The capacity tier's open of a file the engine does not hold runs
    /// without the engine lock (issue 33: mdtest's read phase opened every
    /// file one at a time behind it). The file is registered after it
    /// only if no link, unlink or rename of the engine ran meanwhile
    /// (`State::names_epoch`) and none is under way (`State::unlinking`):
    /// such a change could have removed or moved the name between the
    /// open and the registration, unseen by either. Otherwise the open
    /// runs again under the lock, as before, once no unlink runs.
    pub fn open_file(&self, path: &RelPath) -> io::Result<FileId> {
        let shared = &*self.shared;
        let mut state = sluice_env::lock(&shared.state);
        if state.ids.contains_key(path) {
            // Another node may have given the name to another file.
            drop(state);
            files::forget_stale_name(shared, path)?;
            state = sluice_env::lock(&shared.state);
        }
        if let Some(&id) = state.ids.get(path) {
            opened(&mut state, id);
            drop(state);
            self.refresh_size(id)?;
            return Ok(id);
        }
        let epoch = state.names_epoch;
        drop(state);
        let open = || shared.capacity.open(path, OpenOptions::default());
        let unlocked = open();
        let mut state = sluice_env::lock(&shared.state);
        let handle = match unlocked {
            found if state.names_epoch == epoch && state.unlinking == 0 => found,
            _ => {
                state = wait_while(&shared.changed, state, None, unlinks_running);
                open()
            }
        }
        .map_err(context(format!("open {path}")))?;
        // Under the lock, as before: the size it gives is the file's now.
        let stat = capacity_stat(shared, handle.as_ref(), path);
        let ino = stat.as_ref().map(Stat::identity);
        // Held already, or registered meanwhile by an open or create of
        // the same name or another name of the file.
        if let Some(id) = file_of(&state, path, ino) {
            add_name(&mut state, id, path);
            opened(&mut state, id);
            drop(state);
            self.refresh_size(id)?;
            return Ok(id);
        }
        let id = register(&mut state, path.clone(), handle, stat.as_ref(), false)?;
        opened(&mut state, id);
        Ok(id)
    }

    /// Match one `create`/`open_file`. When every open is released and
    /// nothing of the file is buffered, the engine forgets it (closing its
    /// capacity-tier handle); otherwise after the flush that empties it.
    /// Returns the file's logical size then, unless the kernel wrote it
    /// unseen ([`Engine::note_kernel_writes`]) or the file is unknown.
    pub fn release(&self, file: FileId) -> Option<u64> {
        let mut state = sluice_env::lock(&self.shared.state);
        let size = state.files.get_mut(&file).and_then(|open| {
            open.opens = open.opens.saturating_sub(1);
            (!open.kernel_writes).then_some(open.size)
        });
        let handle = forget_if_unused(&mut state, file);
        drop(state);
        drop(handle);
        size
    }

    /// The capacity tier's handle of `file`, shared with the engine: for
    /// what the mount forwards to the capacity file itself (byte-range
    /// locks, through [`BackendFile::as_fd`]).
    pub fn capacity_file(&self, file: FileId) -> io::Result<Arc<dyn BackendFile>> {
        let state = sluice_env::lock(&self.shared.state);
        let open = state.files.get(&file).ok_or_else(|| unknown(file))?;
        Ok(Arc::clone(&open.handle))
    }

    /// The capacity file of the open `file` for the kernel to serve itself
    /// (FUSE passthrough: reads and writes no longer come to the engine),
    /// when that changes nothing the engine would have done: the redirect
    /// policy never routes a write to the fast tier
    /// ([`sluice_policy::RedirectPolicy::may_route_fast`]), nothing of the file is
    /// buffered, being appended or being flushed, and the capacity tier
    /// hands out the kernel file behind it ([`BackendFile::as_fd`]: not an
    /// emulated device, fault injection or LiU, which must see every byte).
    /// Nothing of such a file is buffered later either: the policy routes
    /// every write of this engine to the capacity tier. `None` otherwise.
    pub fn passthrough_file(&self, file: FileId) -> Option<KernelFile> {
        if self.shared.config.redirector.policy.may_route_fast() {
            return None;
        }
        let state = sluice_env::lock(&self.shared.state);
        let open = state.files.get(&file)?;
        if !at_rest(&state, file, open) {
            return None;
        }
        open.handle.as_fd()?;
        Some(KernelFile {
            file: Arc::clone(&open.handle),
            len: (!open.kernel_writes).then_some(open.size),
        })
    }

    /// The capacity file of the open `file` as a stat sees it now, where
    /// a copy of its bytes kept outside the engine (the kernel's page
    /// cache between opens, crates/fuse/src/pagecache.rs) can be checked
    /// against it: the tier gives exact change times
    /// ([`Backend::change_times_exact`]), so an unchanged stamp means the
    /// file was not written, and hands out a kernel file
    /// ([`BackendFile::as_fd`]: not an emulated device, fault injection or
    /// LiU, which must see every read). `None` otherwise.
    pub fn page_cache_stamp(&self, file: FileId) -> Option<ChangeStamp> {
        if !self.shared.capacity.change_times_exact() {
            return None;
        }
        let handle = {
            let state = sluice_env::lock(&self.shared.state);
            Arc::clone(&state.files.get(&file)?.handle)
        };
        handle.as_fd()?;
        handle.stat().ok().map(|stat| ChangeStamp::of(&stat))
    }

    /// [`Engine::page_cache_stamp`] as the open of `file` that just
    /// returned saw it (the stat every [`Engine::open_file`] makes: at
    /// registration, or the size refresh of a file held already), without
    /// another `fstat`.
    pub fn page_cache_stamp_at_open(&self, file: FileId) -> Option<ChangeStamp> {
        if !self.shared.capacity.change_times_exact() {
            return None;
        }
        let state = sluice_env::lock(&self.shared.state);
        let open = state.files.get(&file)?;
        open.handle.as_fd()?;
        open.last_stamp
    }

    /// The logical size of the open `file` (buffered bytes included), if
    /// the engine knows it: not once the kernel writes the file itself
    /// ([`Engine::note_kernel_writes`]).
    pub fn open_size(&self, file: FileId) -> Option<u64> {
        let state = sluice_env::lock(&self.shared.state);
        let open = state.files.get(&file)?;
        (!open.kernel_writes).then_some(open.size)
    }

    /// Whether a close-to-open close of the open `file` may write bytes
    /// back (some are buffered, being appended or being written): the
    /// mount answers such a close off the threads that read requests
    /// (crates/fuse/src/workers.rs). Unknown files: false.
    pub fn may_write_back(&self, file: FileId) -> bool {
        let state = sluice_env::lock(&self.shared.state);
        state
            .files
            .get(&file)
            .is_some_and(|open| !at_rest(&state, file, open))
    }

    /// The kernel writes the open `file` itself from now on (a handle
    /// opened for writing by FUSE passthrough): its syncs sync its capacity
    /// file, since the engine cannot tell whether anything was written.
    ///
    /// On a tier with exact change times whose closes sync bytes written
    /// straight to it ([`CloseSync`]) the capacity file is stat'ed first
    /// (the kernel cannot write through the handle before the open is
    /// answered), so a close that finds it unchanged syncs nothing (issue
    /// 33: mdtest's read phase opens its files for reading and writing).
    /// A second handle for writing opened before that stat is taken may
    /// write into it: the stamp is then not kept. Where closes sync no
    /// such bytes, no stamp is taken: only a close would compare it.
    pub fn note_kernel_writes(&self, file: FileId) {
        let shared = &*self.shared;
        let handle = {
            let mut state = sluice_env::lock(&shared.state);
            let Some(open) = state.files.get_mut(&file) else {
                return;
            };
            if open.kernel_writes {
                if let KernelStamp::Pending { poisoned } = &mut open.kernel_stamp {
                    *poisoned = true;
                }
                return;
            }
            open.kernel_writes = true;
            open.kernel_stamp = KernelStamp::Unknown;
            if !shared.capacity.change_times_exact() || !sync::syncs_straight_writes(shared) {
                return;
            }
            open.kernel_stamp = KernelStamp::Pending { poisoned: false };
            Arc::clone(&open.handle)
        };
        let stamp = handle.stat().ok().map(|st| ChangeStamp::of(&st));
        if let Some(open) = sluice_env::lock(&shared.state).files.get_mut(&file) {
            open.kernel_stamp = match (open.kernel_stamp, stamp) {
                (KernelStamp::Pending { poisoned: false }, Some(stamp)) => {
                    KernelStamp::Taken(stamp)
                }
                _ => KernelStamp::Unknown,
            };
        }
    }

    /// Files the engine holds open (for status and tests).
    pub fn open_files(&self) -> usize {
        sluice_env::lock(&self.shared.state).files.len()
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
        let io = file_io(shared, file)?;
        let mut state = sluice_env::lock(&shared.state);
        keep_model_current(shared, &mut state);
        let now = shared.clock.now();
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
        // Routed (the classifier saw the request in arrival order), then
        // placed in the file's order: writers of the file routed to the log
        // go at once (one shared file, many ranks), a capacity write waits
        // for them all.
        drop(state);
        let (_shared, _alone) = match routing.tier {
            Tier::Fast => (Some(io.read().unwrap_or_else(|e| e.into_inner())), None),
            Tier::Capacity => (None, Some(hold_alone(&io))),
        };
        // On-demand: the capacity file is marked as held by this node
        // before any byte of it is placed in the log (held.rs).
        held::before_write(shared, file, routing.tier)?;
        append_data(shared, file, offset, data, routing.tier, |state| {
            // An unlink while the bytes went to the capacity tier outside
            // the lock has forgotten the file: the write still happened.
            if let Some(open) = state.files.get_mut(&file) {
                open.size = open.size.max(end);
                open.written = Some(shared.clock.wall());
                open.capacity_unsynced = true;
            }
        })
    }

    /// Read up to `len` bytes at `offset`: buffered bytes over capacity bytes.
    ///
    /// The pieces are looked up under the engine lock, and the regions
    /// holding buffered pieces are pinned (the flusher does not reset a
    /// pinned region); every byte is then copied outside the lock, so
    /// readers and writers of other files do not wait for this one's tier
    /// I/O. A write racing with the read may or may not be seen, as with any
    /// concurrent read and write.
    ///
    /// A read that reaches past the size the engine knows re-reads it
    /// first ([`Engine::refresh_size`]): another node may have appended.
    pub fn read(&self, file: FileId, offset: u64, len: u64) -> io::Result<Vec<u8>> {
        let shared = &*self.shared;
        let mut state = sluice_env::lock(&shared.state);
        let known = state.files.get(&file).ok_or_else(|| unknown(file))?.size;
        if offset.saturating_add(len) > known {
            drop(state);
            self.refresh_size(file)?;
            state = sluice_env::lock(&shared.state);
        }
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
        let mut buffered = Vec::new();
        let mut pins = Vec::new();
        let mut cached = Vec::new();
        for piece in pieces {
            let start = (piece.file_offset() - offset) as usize;
            match piece {
                Piece::Hole { file_offset, len } => cache::split_hole(
                    &mut state,
                    file,
                    start,
                    file_offset,
                    len,
                    &mut cached,
                    &mut holes,
                ),
                Piece::Buffered { location, len, .. } => {
                    let (located, pin) = pin(&mut state, location);
                    buffered.push((start, len as usize, located));
                    pins.push(pin);
                }
            }
        }
        drop(state);
        let mut result = Ok(());
        for (start, len, pinned) in &buffered {
            if let Err(e) = pinned.copy_to(&mut buf[*start..*start + *len]) {
                result = Err(e);
                break;
            }
        }
        let copied: Vec<io::Result<()>> = cached
            .iter()
            .map(|c| c.located.copy_to(&mut buf[c.start..c.start + c.len]))
            .collect();
        let mut state = sluice_env::lock(&shared.state);
        cache::settle(shared, &mut state, file, cached, &copied, &mut holes);
        for pin in pins {
            unpin(shared, &mut state, pin);
        }
        if let Err(e) = result {
            if e.kind() == io::ErrorKind::InvalidData {
                state.stats.corrupt_payloads += 1;
            }
            return Err(e);
        }
        // Counted here, under the lock this read takes anyway; the holes
        // are read next.
        state.stats.fast_read_bytes += buffered.iter().map(|(_, len, _)| *len as u64).sum::<u64>();
        state.stats.capacity_read_bytes += holes.iter().map(|(_, len, _)| *len as u64).sum::<u64>();
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

    /// Set `file`'s size. Buffered bytes past it are dropped, durably first
    /// (truncate.rs: a machine this drives, with the file's I/O lock held
    /// alone).
    pub fn truncate(&self, file: FileId, size: u64) -> io::Result<()> {
        let shared = &*self.shared;
        let io = file_io(shared, file)?;
        let _io = hold_alone(&io);
        let mut truncate = Truncate::new(file, size);
        let mut state = sluice_env::lock(&shared.state);
        loop {
            match truncate.step(shared, &mut state) {
                truncate::Next::Done(done) => return done,
                truncate::Next::Wait(wait) => {
                    state = sluice_env::wait_for(&shared.changed, state, wait);
                }
                truncate::Next::WaitWhile(Until::Busy(file)) => {
                    state = wait_while(&shared.changed, state, None, busy(file));
                }
                truncate::Next::WaitWhile(Until::AppendsInFlight) => {
                    state = wait_while(&shared.changed, state, None, appends_in_flight());
                }
                truncate::Next::Unlocked(work) => {
                    drop(state);
                    let outcome = work.run(shared);
                    state = sluice_env::lock(&shared.state);
                    truncate.resume(outcome);
                }
            }
        }
    }

    /// Attributes of a path; a file's size includes buffered bytes.
    pub fn getattr(&self, path: &RelPath) -> io::Result<Metadata> {
        let state = sluice_env::lock(&self.shared.state);
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

    /// Create a directory. Its entry in its parent is owed a sync, as a
    /// new file's is: the fsync of a file made under it syncs that too, so
    /// the file is durable with every directory of its name (unsynced.rs).
    pub fn mkdir(&self, path: &RelPath) -> io::Result<()> {
        self.shared.capacity.create_dir(path)?;
        sluice_env::lock(&self.shared.state)
            .unsynced_names
            .created(path);
        Ok(())
    }

    /// Remove an empty directory (nothing under it is owed a sync any
    /// more).
    pub fn rmdir(&self, path: &RelPath) -> io::Result<()> {
        self.shared.capacity.remove_dir(path)?;
        sluice_env::lock(&self.shared.state)
            .unsynced_names
            .removed(path);
        Ok(())
    }

    /// Flush everything buffered and wait until the capacity tier holds
    /// every byte (synced). Errors if the flusher keeps failing.
    pub fn drain(&self) -> io::Result<()> {
        self.drain_or_stop(&AtomicBool::new(false)).map(|_| ())
    }

    /// [`Engine::drain`], but give up waiting as soon as `stop` is set (an
    /// unmount told to keep the data buffered after all): then the bytes
    /// not yet flushed stay in the log, where they are as safe as after
    /// `close` (the next open recovers them), and the flusher goes back to
    /// its usual pace. Stopping interrupts no flush: a flush in progress
    /// runs to its end (docs/crash-consistency.md covers every point).
    pub fn drain_or_stop(&self, stop: &AtomicBool) -> io::Result<Drained> {
        let shared = &*self.shared;
        let stopped = || stop.load(std::sync::atomic::Ordering::Relaxed);
        // Whether it was drained at the last look, under the hold of the
        // lock that ended the wait.
        let mut drained = false;
        let result = flush_until(shared, "drain", None, |state| {
            drained = state.buffer.is_drained();
            drained || stopped()
        });
        if result.is_ok() && !drained {
            return Ok(Drained::Stopped);
        }
        // The flush wrote through open files: if the capacity directory
        // was removed or replaced meanwhile, the bytes are not where users
        // look, and the drain must not say they are.
        result.and_then(|()| {
            shared
                .capacity
                .check_root()
                .map_err(context("drain: capacity tier"))
        })?;
        // On-demand: every byte is on the capacity tier, so no mark of
        // this node is left for other nodes to wait on.
        held::sweep(shared, usize::MAX, false).map_err(context("drain: held marks"))?;
        Ok(Drained::All)
    }

    /// Stop the flusher and close, leaving buffered data in the log (the
    /// next open recovers it). `drain()` first to leave nothing buffered.
    pub fn close(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        sluice_env::lock(&self.shared.state).shutdown = true;
        self.shared.changed.notify_all();
        // Before the flusher: a recall's write-back under way may wait for
        // log room that only the flusher makes.
        if let Some(recall) = self.recall.take() {
            let _ = recall.join();
        }
        if let Some(flusher) = self.flusher.take() {
            // A flusher panic is a bug already reported on stderr.
            let _ = flusher.join();
            // Once per engine: a stop after the flusher ended changes no
            // name.
            sync_unsynced_names(&self.shared);
        }
        *sluice_env::lock(&self.shared.alive_stop.0) = true;
        self.shared.alive_stop.1.notify_all();
        if let Some(heartbeat) = self.heartbeat.take() {
            let _ = heartbeat.join();
        }
    }
}

/// At a clean stop, sync the directories of the files this run created,
/// renamed or recovered whose names no fsync has made durable yet. The next run
/// does not know of them: its fsync of such a file synced the bytes and
/// left the name to chance, and a power cut of the capacity tier lost the
/// file (found by the seeded harness, `tests/seeded.rs`, seed 43). Sorted,
/// so the syncs come in one order; a failure is logged (the names stay as
/// durable as before, and owed). The flusher calls it too, when more
/// names are owed than it keeps (`flush.rs`).
fn sync_unsynced_names(shared: &Shared) {
    let sync = sluice_env::lock(&shared.state).unsynced_names.all();
    let mut failed = false;
    for dir in &sync.dirs {
        if let Err(e) = unsynced::sync_dir_or_ancestor(shared.capacity.as_ref(), dir) {
            tracing::warn!(dir = %dir, error = %e, "new names not synced");
            failed = true;
        }
    }
    if !failed {
        sluice_env::lock(&shared.state).unsynced_names.settle(&sync);
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.stop();
    }
}
