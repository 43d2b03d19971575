//! BBOS in the engine (DESIGN §6, docs/bbos.md): checkpoint files staged
//! whole on the fast tier, admitted one job at a time, throttled by the
//! planner's schedule, demoted to the capacity tier, kept as a restart cache
//! and evicted cold-first.
//!
//! [`Checkpoints`] sits beside the SSDUP+ engine: the mount hands it the
//! files whose path matches a registered job's glob. Everything it decides
//! comes from `sluice_policy::bbos`; this module owns the files, the
//! threads and the crash story.
//!
//! Layout on the fast tier, the source of truth (the catalogue is an index
//! rebuilt from it at open):
//! - `ckpt/<id>.rec`: the file's [`CkptRecord`] as JSON, written to
//!   `<id>.rec.tmp`, synced, renamed and the directory synced before the
//!   data file exists, and rewritten the same way when the location changes;
//! - `ckpt/<id>.data`: the staged copy.
//!
//! Modules: `files` (create, open, read, write, fsync, close, truncate,
//! unlink, rename), `room` (space, eviction, period statistics), `demote`
//! (the demotion thread, drain), `records` (records and the catalogue, its
//! outages, copies on other nodes), `jobs` (jobs, globs, node ids),
//! `recovery` (rebuilding the state from the fast tier at open).
//!
//! INVARIANTS:
//! - a copy whose record says `cached` has a synced, identical copy on the
//!   capacity tier, and is synced itself (after a crash it serves restart
//!   reads); the record says `staged` before any byte of a copy
//!   differs from the capacity tier's (a write to a cached copy rewrites its
//!   record first);
//! - `fsync` of a staged file syncs its data file, whose name and record
//!   were made durable when it was created, and (once) the directory of
//!   its placeholder on the capacity tier: an acknowledged checkpoint
//!   survives a crash under its name whether or not its demotion finished;
//! - only `cached` copies no handle writes or reads are evicted; a
//!   `staged` copy leaves the fast tier for lack of room only after its
//!   bytes are synced on the capacity tier, its record removed durably
//!   before any handle writes there (`files.rs`, `move_when_full`);
//! - `used` is the sum of the lengths of all copies;
//! - every copy's job has a key in `job_keys` (given at `begin` or at
//!   recovery), so the cold ranking never takes two jobs for one;
//! - every record this node writes names it (`CkptRecord::node`, this
//!   node's id, kept in `ckpt/node-id`); at open a node rewrites only its
//!   own records (and, in a catalogue no other node shares, records
//!   without a node), never another node's.
//!
//! Many nodes, one catalogue (issue 20, docs/catalog.md): jobs registered
//! on another node are read again when the catalogue's job generation
//! changed (checked when a path is routed, at most every `jobs_refresh`);
//! a new checkpoint file joins its job's open version
//! ([`Catalog::join_version`]: `files` files per version); a restart read
//! of a checkpoint whose only full copy is staged on another node waits,
//! at most `remote_wait`, for its demotion, then fails with EAGAIN.
//!
//! A catalogue outage (issue 19) never fails a new checkpoint: when the
//! catalogue cannot give it a version it is created as an ordinary file on
//! the capacity tier (counted in `catalog_fallbacks`, logged with the
//! cause), and the catalogue is not asked again for new checkpoints for
//! [`CATALOG_RETRY`]. Copies' records missed meanwhile are put again once
//! it answers.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io;
use std::num::NonZeroU64;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use sluice_catalog::{Catalog, CkptRecord, JobSpec, Location};
use sluice_env::{Backend, BackendFile, Clock, FileKind, OpenOptions, RelPath};
use sluice_policy::bbos::{
    Bandwidths, DwppTracker, Eviction, IoScheduler, Planner, Scheme, Ticket,
};
use sluice_policy::token_bucket::TokenBucket;
use sluice_policy::Time;

use crate::incidents::Incidents;

mod demote;
mod files;
mod jobs;
mod records;
mod recovery;
mod room;

use demote::demoter_loop;
pub use jobs::{check_node_id, glob_match};
use jobs::{node_id, prior};
use recovery::recover;

/// Handles of checkpoint files carry this bit, so the mount can tell them
/// from the engine's file ids in one test.
pub const HANDLE_BIT: u64 = 1 << 62;

/// The staging directory on the fast tier.
const DIR: &str = "ckpt";

/// The file in the staging directory that keeps this node's id.
const NODE_ID_FILE: &str = "node-id";

/// Longest node id accepted (given or read back).
pub const NODE_ID_LEN_MAX: usize = 128;

/// After a failed catalogue call, new checkpoints go to the capacity tier
/// without asking the catalogue for this long (a down server is not waited
/// for by every create).
pub const CATALOG_RETRY: Duration = Duration::from_secs(1);

/// How often a restart read waiting for another node's demotion asks the
/// catalogue again.
const REMOTE_POLL: Duration = Duration::from_millis(50);

/// How the stager behaves; see docs/bbos.md.
#[derive(Clone, Debug, PartialEq)]
pub struct CkptOptions {
    /// BBOS or a baseline.
    pub scheme: Scheme,
    /// How cold copies are chosen.
    pub eviction: Eviction,
    /// The fast tier's bandwidths (Eq. 1), bytes per second.
    pub bandwidths: Bandwidths,
    /// `S`: fast-tier bytes for checkpoint copies.
    pub capacity: u64,
    /// The planner period.
    pub period: Duration,
    /// Closed periods the DWPP prediction averages.
    pub window: usize,
    /// MTBF of one node, for jobs registered by node count.
    pub node_mtbf: Duration,
    /// Longest wait of a new checkpoint in its job's queue (and, for MaxBW,
    /// for room); then it goes ahead (or to the capacity tier).
    pub admit_wait: Duration,
    /// Bytes per demotion step.
    pub chunk_bytes: u64,
    /// Run the demotion thread (tests step it by hand with
    /// [`Checkpoints::demote_next`]).
    pub background: bool,
    /// This node's id in the catalogue; `None`: the id kept in
    /// `FAST/ckpt/node-id`, generated at the first open as
    /// `HOSTNAME-XXXXXXXX` (random hex). 1 to [`NODE_ID_LEN_MAX`] of
    /// `A-Z a-z 0-9 . _ -`.
    pub node_id: Option<String>,
    /// Longest wait of a restart read whose checkpoint's only full copy is
    /// staged on another node's fast tier, for that node to demote it;
    /// then the open fails with EAGAIN.
    pub remote_wait: Duration,
    /// Least time between two checks of the catalogue's job generation
    /// for jobs registered through other nodes (zero: at every path
    /// routed).
    pub jobs_refresh: Duration,
    /// The checkpoint class's consistency (`bbos.consistency =
    /// "close-to-open"`): an fsync or a close of a staged checkpoint also
    /// writes its bytes to the capacity file and syncs that, so other
    /// nodes can read it at once. Off (`node-local`, BBOS's design): fsync
    /// is durable on the fast tier and demotion moves the bytes later.
    pub publish_on_sync: bool,
}

impl Default for CkptOptions {
    fn default() -> Self {
        CkptOptions {
            scheme: Scheme::Bbos,
            eviction: Eviction::Bbos {
                version_aware: true,
            },
            bandwidths: Bandwidths::PAPER,
            capacity: 4 << 30,
            period: Duration::from_secs(60),
            window: 3,
            node_mtbf: Duration::from_secs(5 * 365 * 24 * 3600),
            admit_wait: Duration::from_secs(30),
            chunk_bytes: 1 << 20,
            background: true,
            node_id: None,
            remote_wait: Duration::from_secs(60),
            jobs_refresh: Duration::from_secs(1),
            publish_on_sync: false,
        }
    }
}

/// Counters since open: defined in `sluice-status` (the status crate
/// serializes them as they are), counted here.
pub use sluice_status::CkptStats;

/// Where the stager stands, for `sluice status` and metrics.
#[derive(Clone, Debug, PartialEq)]
pub struct CkptStatus {
    /// The scheme's name.
    pub scheme: &'static str,
    /// The eviction policy's name.
    pub eviction: &'static str,
    /// The catalogue.
    pub catalog: String,
    /// This node's id in it.
    pub node: String,
    /// Registered jobs.
    pub jobs: usize,
    /// `S`.
    pub capacity_bytes: u64,
    /// The room a new checkpoint is placed in now (`S`, or less when the
    /// fast tier's file system has less free beside the copies).
    pub room_bytes: u64,
    /// Copies not yet demoted, and their bytes.
    pub staged: (u64, u64),
    /// Copies demoted and kept as a restart cache, and their bytes.
    pub cached: (u64, u64),
    /// Checkpoint files open for writing.
    pub writers: u64,
    /// Data written so far in the current planner period.
    pub dwsf_bytes: u64,
    /// The DWPP the current plan is for.
    pub dwpp_bytes: u64,
    /// The plan's pattern, as the paper numbers them (1, 2, 3; 0 for the
    /// static threshold).
    pub pattern: u8,
    /// Write cap now, bytes/s (0: none).
    pub write_rate: u64,
    /// Demotion rate now, bytes/s.
    pub demote_rate: u64,
    /// The counters.
    pub stats: CkptStats,
}

struct Copy {
    rec: CkptRecord,
    file: Arc<dyn BackendFile>,
    len: u64,
    /// Handles writing it.
    writers: u32,
    /// Handles reading it (a restart): it is not evicted under them.
    readers: u32,
    /// Bumped by every change, before and after the bytes change; a
    /// demotion or publication that saw another value leaves the copy
    /// staged.
    generation: u64,
    /// Writes in flight (between the two bumps): a publication that ends
    /// while one is in flight leaves the copy staged too.
    writing: u32,
    demoting: bool,
    /// Being moved to the capacity tier because the fast tier had no room
    /// for a write (`files.rs`, [`Checkpoints::move_when_full`]): writes
    /// wait until the handles write the capacity file.
    moving: bool,
    /// A move's removal of its record failed, so whether a crash would
    /// bring the copy back is unknown: it takes no more writes, truncates
    /// or fsyncs (they fail with this message), so none is acknowledged
    /// that either outcome would lose.
    broken: Option<String>,
    /// Its name on the capacity tier (the placeholder the mount looks up)
    /// was made durable by an fsync since the copy was made, recovered or
    /// renamed.
    name_synced: bool,
    written: Time,
    accessed: Time,
}

impl Copy {
    /// An error if the copy is [`Copy::broken`]: it takes no more
    /// changes.
    fn writable(&self) -> io::Result<()> {
        match &self.broken {
            None => Ok(()),
            Some(message) => Err(io::Error::other(message.clone())),
        }
    }

    /// Neither written, read, demoted nor moved: it may be evicted.
    fn unused(&self) -> bool {
        self.writers == 0 && self.readers == 0 && !self.demoting && !self.moving
    }
}

enum Target {
    Copy(u64),
    Capacity(Arc<dyn BackendFile>),
}

struct Handle {
    target: Target,
    /// The checkpoint's name, as opened (following the stager's renames):
    /// an open for writing of a name another handle writes joins that
    /// checkpoint instead of beginning a new one (`files.rs`,
    /// [`Checkpoints::open_file`]).
    path: RelPath,
    writing: bool,
    /// For a reader: whether a fast-tier copy serves it (a restart hit) or
    /// the capacity tier (a miss).
    hit: Option<bool>,
    ticket: Option<Ticket>,
    /// Created here on the capacity tier; its directory is synced at fsync.
    created: Option<RelPath>,
}

struct State {
    jobs: Vec<JobSpec>,
    job_keys: HashMap<String, u64>,
    copies: BTreeMap<u64, Copy>,
    by_path: sluice_env::PathMap<u64>,
    handles: HashMap<u64, Handle>,
    next_handle: u64,
    next_copy: u64,
    scheduler: IoScheduler,
    admitted: HashSet<Ticket>,
    planner: Planner,
    /// Period indexes in the catalogue are this plus the tracker's.
    period_base: u64,
    write_bucket: TokenBucket,
    demote_bucket: TokenBucket,
    writers: u32,
    stats: CkptStats,
    shutdown: bool,
    /// The catalogue's job generation `jobs` was read at.
    jobs_generation: u64,
    /// When the job generation was last checked.
    jobs_checked: Option<Time>,
    /// A record update failed: put every copy's record again when the
    /// catalogue answers.
    catalog_behind: bool,
    /// After a failed call, new checkpoints do not ask the catalogue
    /// before this time.
    catalog_retry_at: Option<Time>,
}

struct Shared {
    fast: Arc<dyn Backend>,
    capacity: Arc<dyn Backend>,
    catalog: Box<dyn Catalog>,
    clock: Arc<dyn Clock>,
    options: CkptOptions,
    /// This node's id (records name it).
    node: String,
    state: Mutex<State>,
    changed: Condvar,
    /// `last_errors` of the stager: failed demotions and catalogue updates.
    incidents: Arc<Incidents>,
    /// Bytes of the fast tier's free space others may still claim (the
    /// log's growth), kept out of placement's room
    /// ([`Checkpoints::share_fast_tier`]); none until told.
    others: Mutex<Option<Claim>>,
}

/// Bytes another user of the fast tier may still take from its free space.
pub type Claim = Box<dyn Fn() -> u64 + Send + Sync>;

/// The checkpoint stager; see the module docs.
pub struct Checkpoints {
    shared: Arc<Shared>,
    demoter: Option<JoinHandle<()>>,
}

fn invalid(message: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, message.into())
}

fn catalog_io(e: sluice_catalog::CatalogError) -> io::Error {
    io::Error::other(format!("checkpoint catalogue: {e}"))
}

fn rel(name: String) -> RelPath {
    // INVARIANT: names built here are `ckpt/<digits>.<ext>`, always valid.
    RelPath::new(&name).expect("staging names are valid paths")
}

fn rec_path(id: u64) -> RelPath {
    rel(format!("{DIR}/{id}.rec"))
}

fn data_path(id: u64) -> RelPath {
    rel(format!("{DIR}/{id}.data"))
}

fn dir() -> RelPath {
    rel(DIR.to_string())
}

/// This node's id as the catalogue's records carry it (`FAST/ckpt/
/// node-id`, generated and kept at the first call), for the engine's held
/// marks (on-demand consistency) when BBOS is off or opens later: one node
/// has one name in both. The staging directory is made if missing, as
/// [`Checkpoints::open`] makes it.
pub(crate) fn node_id_at_open(fast: &dyn Backend) -> io::Result<String> {
    make_dir(fast)?;
    node_id(fast)
}

/// The staging directory, made (private, its entry synced) if missing.
fn make_dir(fast: &dyn Backend) -> io::Result<()> {
    match fast.metadata(&dir()) {
        Ok(m) if m.kind == FileKind::Dir => Ok(()),
        Ok(_) => Err(invalid(format!(
            "fast tier {}: `{DIR}` exists and is not a directory",
            fast.describe()
        ))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            fast.create_private_dir(&dir())?;
            fast.sync_dir(&RelPath::root())
        }
        Err(e) => Err(e),
    }
}

fn unix_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

impl Shared {
    /// A new checkpoint's name on the capacity tier, created (or, without
    /// `create_new`, truncated): the placeholder of a staged copy, or the
    /// file itself when the checkpoint goes there directly.
    fn create_on_capacity(
        &self,
        path: &RelPath,
        create_new: bool,
    ) -> io::Result<Arc<dyn BackendFile>> {
        self.capacity.open(
            path,
            OpenOptions {
                create: true,
                create_new,
                truncate: true,
                ..OpenOptions::default()
            },
        )
    }

    /// A copy of `len` bytes just written to `dst`, the capacity file at
    /// `target`, made durable there: cut to `len`, synced, and its name
    /// synced (a demotion, a publication and a move all end so before the
    /// copy's record may say the capacity tier holds it).
    fn settle_on_capacity(
        &self,
        dst: &dyn BackendFile,
        target: &RelPath,
        len: u64,
    ) -> io::Result<()> {
        dst.set_len(len)?;
        dst.sync_data()?;
        self.capacity
            .sync_dir(&target.parent().unwrap_or_else(RelPath::root))
    }
}

impl Checkpoints {
    /// Open the stager: recover the staging directory on `fast`, make the
    /// catalogue agree with it, and start the demotion thread.
    pub fn open(
        fast: Arc<dyn Backend>,
        capacity: Arc<dyn Backend>,
        catalog: Box<dyn Catalog>,
        clock: Arc<dyn Clock>,
        options: CkptOptions,
    ) -> io::Result<Checkpoints> {
        options
            .bandwidths
            .check()
            .map_err(|e| invalid(format!("bbos bandwidths: {e}")))?;
        if options.capacity == 0 || options.chunk_bytes == 0 {
            return Err(invalid("bbos: capacity and chunk must be above 0"));
        }
        make_dir(fast.as_ref())?;
        let node = match &options.node_id {
            Some(id) => check_node_id(id).map_err(invalid)?,
            None => node_id(fast.as_ref())?,
        };
        // The generation first: jobs read after it are at least as new.
        let jobs_generation = catalog.jobs_generation().map_err(catalog_io)?;
        let jobs = catalog.jobs().map_err(catalog_io)?;
        let mut tracker = DwppTracker::new(options.period, options.window, 0)
            .map_err(|e| invalid(format!("bbos: {e}")))?;
        tracker.set_prior(prior(&jobs, options.period));
        let history = catalog.periods(options.window).map_err(catalog_io)?;
        let period_base = history.last().map_or(0, |p| p.index + 1);
        let values: Vec<u64> = history.iter().map(|p| p.written_bytes).collect();
        tracker.restore(0, 0, &values);
        let planner = Planner::new(
            options.scheme,
            options.bandwidths,
            options.capacity,
            tracker,
        )
        .map_err(|e| invalid(format!("bbos: {e}")))?;
        let now = clock.now();
        let state = State {
            jobs,
            job_keys: HashMap::new(),
            copies: BTreeMap::new(),
            by_path: Default::default(),
            handles: HashMap::new(),
            next_handle: 1,
            next_copy: 1,
            scheduler: IoScheduler::new(1),
            admitted: HashSet::new(),
            planner,
            period_base,
            // Limited (full, with a chunk of burst) whenever a checkpoint is
            // written; unlimited otherwise.
            write_bucket: {
                let mut b = TokenBucket::new(
                    NonZeroU64::new(options.bandwidths.write_max.max(1.0) as u64)
                        .unwrap_or(NonZeroU64::MIN),
                    options.chunk_bytes,
                    now,
                );
                b.set_unlimited();
                b
            },
            demote_bucket: TokenBucket::new(
                NonZeroU64::new(options.bandwidths.idle_demote.max(1.0) as u64)
                    .unwrap_or(NonZeroU64::MIN),
                options.chunk_bytes,
                now,
            ),
            writers: 0,
            stats: CkptStats::default(),
            shutdown: false,
            jobs_generation,
            jobs_checked: Some(now),
            catalog_behind: false,
            catalog_retry_at: None,
        };
        let incidents = Arc::new(Incidents::new(fast.describe(), capacity.describe()));
        let shared = Arc::new(Shared {
            fast,
            capacity,
            catalog,
            clock,
            options,
            node,
            state: Mutex::new(state),
            changed: Condvar::new(),
            incidents,
            others: Mutex::new(None),
        });
        {
            // No other thread yet: the lock only satisfies the types.
            let mut state = sluice_env::lock(&shared.state);
            recover(&shared, &mut state, now)?;
        }
        let demoter = if shared.options.background {
            let s = Arc::clone(&shared);
            Some(
                std::thread::Builder::new()
                    .name("sluice-demoter".into())
                    .spawn(move || demoter_loop(&s))?,
            )
        } else {
            None
        };
        Ok(Checkpoints { shared, demoter })
    }

    /// Whether `fast` holds checkpoint copies (`ckpt/*.data`, staged or
    /// cached): only the stager serves them, so a mount must not run
    /// without it. (A cached copy is on the capacity tier too; counting it
    /// keeps this check from reading records.)
    pub fn has_copies(fast: &dyn Backend) -> io::Result<bool> {
        match fast.read_dir(&dir()) {
            Ok(entries) => Ok(entries.iter().any(|e| e.name.ends_with(".data"))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// The catalogue.
    pub fn catalog(&self) -> &dyn Catalog {
        self.shared.catalog.as_ref()
    }

    /// The fast tier is shared: `others` gives the bytes its other users
    /// (the engine's log) may still take from its free space. A new
    /// checkpoint is then placed in `min(S, copies + free - others)`
    /// (docs/bbos.md, "A full fast tier"); replaces any earlier claim.
    pub fn share_fast_tier(&self, others: Claim) {
        *sluice_env::lock(&self.shared.others) = Some(others);
    }

    /// Whether `fh` is one of this stager's handles.
    pub fn owns(fh: u64) -> bool {
        fh & HANDLE_BIT != 0
    }

    /// The ring of the stager's newest failures (`last_errors`): failed
    /// demotions and catalogue updates.
    pub fn incidents(&self) -> &Arc<Incidents> {
        &self.shared.incidents
    }

    /// A snapshot for status and metrics.
    pub fn status(&self) -> CkptStatus {
        let shared = &*self.shared;
        let state = sluice_env::lock(&shared.state);
        let (mut staged, mut cached) = ((0, 0), (0, 0));
        for c in state.copies.values() {
            let slot = if c.rec.location == Location::Cached {
                &mut cached
            } else {
                &mut staged
            };
            slot.0 += 1;
            slot.1 += c.len;
        }
        let (write, demote) = shared.rates(&state);
        let plan = state.planner.plan();
        CkptStatus {
            scheme: shared.options.scheme.name(),
            eviction: shared.options.eviction.name(),
            catalog: shared.catalog.describe(),
            node: shared.node.clone(),
            jobs: state.jobs.len(),
            capacity_bytes: shared.options.capacity,
            room_bytes: shared.room(&state),
            staged,
            cached,
            writers: u64::from(state.writers),
            dwsf_bytes: state.planner.tracker().dwsf(),
            dwpp_bytes: plan.dwpp as u64,
            pattern: match plan.pattern {
                sluice_policy::bbos::Pattern::IdleOnly => 1,
                sluice_policy::bbos::Pattern::Ramp => 2,
                sluice_policy::bbos::Pattern::Saturated => 3,
                sluice_policy::bbos::Pattern::Threshold => 0,
            },
            write_rate: write.map_or(0, |w| w as u64),
            demote_rate: demote as u64,
            stats: state.stats.clone(),
        }
    }
}

impl Drop for Checkpoints {
    fn drop(&mut self) {
        sluice_env::lock(&self.shared.state).shutdown = true;
        self.shared.changed.notify_all();
        if let Some(d) = self.demoter.take() {
            let _ = d.join();
        }
    }
}

fn gone(path: &RelPath) -> io::Error {
    io::Error::new(io::ErrorKind::NotFound, format!("{path}: copy gone"))
}

fn bad_handle(fh: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("unknown checkpoint handle {fh:#x}"),
    )
}

fn add_handle(state: &mut State, h: Handle) -> u64 {
    let fh = HANDLE_BIT | state.next_handle;
    state.next_handle += 1;
    state.handles.insert(fh, h);
    fh
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        let cases = [
            ("ckpt/*.dat", "ckpt/a.dat", true),
            ("ckpt/*.dat", "ckpt/sub/a.dat", false),
            ("ckpt/**", "ckpt/sub/a.dat", true),
            ("**/*.ckpt", "a/b/c.ckpt", true),
            ("**/*.ckpt", "c.ckpt", false),
            ("job?/out", "job1/out", true),
            ("job?/out", "job/out", false),
            ("job?/out", "job12/out", false),
            ("a*b*c", "abc", true),
            ("a*b*c", "aXbYc", true),
            ("a*b*c", "aXbY", false),
            ("*", "", true),
            ("", "", true),
            ("x", "", false),
            ("run/*", "run/", true),
            ("run/*", "run", false),
        ];
        for (p, s, want) in cases {
            assert_eq!(glob_match(p, s), want, "{p:?} against {s:?}");
        }
    }
}
