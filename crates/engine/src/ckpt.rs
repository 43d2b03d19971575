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
//! INVARIANTS:
//! - a copy whose record says `cached` has a synced, identical copy on the
//!   capacity tier; the record says `staged` before any byte of a copy
//!   differs from the capacity tier's (a write to a cached copy rewrites its
//!   record first);
//! - `fsync` of a staged file syncs its data file, whose name and record
//!   were made durable when it was created: an acknowledged checkpoint
//!   survives a crash whether or not its demotion finished;
//! - only `cached` copies no handle writes or reads are evicted;
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
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use sluice_catalog::{Catalog, CkptRecord, Failure, JobSpec, Location, PeriodStats};
use sluice_env::{
    copy_range, with_context, Backend, BackendFile, Clock, CopyHow, FileKind, OpenOptions, RelPath,
};
use sluice_policy::bbos::{
    cold_order, direct_to_capacity, expected_dwpp, failure_rate, newest_versions, Admission,
    Bandwidths, DwppTracker, Eviction, IoScheduler, Planner, Resident, Scheme, Ticket,
};
use sluice_policy::token_bucket::TokenBucket;
use sluice_policy::Time;

use crate::incidents::{Incident, Incidents};

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

/// Counters since open.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CkptStats {
    /// Bytes written to the capacity tier at an fsync or close
    /// ([`CkptOptions::publish_on_sync`]).
    pub published_bytes: u64,
    /// New checkpoints started (staged or direct).
    pub checkpoints: u64,
    /// Bytes written to staged copies.
    pub staged_bytes: u64,
    /// Checkpoints written straight to the capacity tier because they were
    /// the coldest (BBOS) or had no grant (DataWarp).
    pub cold_direct: u64,
    /// Checkpoints written to the capacity tier because no room could be
    /// made.
    pub spills: u64,
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
    /// Bumped by every change; a demotion that saw another value restarts.
    generation: u64,
    demoting: bool,
    written: Time,
    accessed: Time,
}

impl Copy {
    /// Neither written, read nor being demoted: it may be evicted.
    fn unused(&self) -> bool {
        self.writers == 0 && self.readers == 0 && !self.demoting
    }
}

enum Target {
    Copy(u64),
    Capacity(Arc<dyn BackendFile>),
}

struct Handle {
    target: Target,
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
    by_path: HashMap<RelPath, u64>,
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
}

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

fn unix_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// Whether `path` matches `pattern`: `*` and `?` within one component,
/// `**` across components, everything else literally.
pub fn glob_match(pattern: &str, path: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let s: Vec<char> = path.chars().collect();
    // reach[j]: the pattern prefix read so far matches s[..j].
    let mut reach = vec![false; s.len() + 1];
    reach[0] = true;
    let mut i = 0;
    while i < p.len() {
        let mut next = vec![false; s.len() + 1];
        match p[i] {
            '*' if p.get(i + 1) == Some(&'*') => {
                let mut on = false;
                for j in 0..=s.len() {
                    on |= reach[j];
                    next[j] = on;
                }
                i += 1;
            }
            '*' => {
                let mut on = false;
                for j in 0..=s.len() {
                    if j > 0 && s[j - 1] == '/' {
                        on = false;
                    }
                    on |= reach[j];
                    next[j] = on;
                }
            }
            '?' => {
                for j in 1..=s.len() {
                    next[j] = reach[j - 1] && s[j - 1] != '/';
                }
            }
            c => {
                for j in 1..=s.len() {
                    next[j] = reach[j - 1] && s[j - 1] == c;
                }
            }
        }
        reach = next;
        i += 1;
    }
    reach[s.len()]
}

fn job_rate(job: &JobSpec, node_mtbf: Duration) -> f64 {
    match job.failure {
        Failure::MtbfSecs(s) => failure_rate(Some(Duration::from_secs(s)), 1, node_mtbf),
        Failure::Nodes(n) => failure_rate(None, n, node_mtbf),
    }
}

fn prior(jobs: &[JobSpec], period: Duration) -> u64 {
    expected_dwpp(
        jobs.iter()
            .map(|j| (j.ckpt_bytes, Duration::from_secs(j.period_s))),
        period,
    )
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn wait<'a>(&self, state: MutexGuard<'a, State>, max: Duration) -> MutexGuard<'a, State> {
        self.changed
            .wait_timeout(state, max)
            .unwrap_or_else(|e| e.into_inner())
            .0
    }

    /// Counts and logs a failed catalogue call; the next new checkpoint
    /// asks the catalogue again only after [`CATALOG_RETRY`], and every
    /// copy's record is put again once it answers.
    fn note_catalog(&self, state: &mut State, result: Result<(), sluice_catalog::CatalogError>) {
        if let Err(e) = result {
            state.stats.catalog_errors += 1;
            let message = format!("catalogue {}: {e}", self.catalog.describe());
            // The first failure after a good call is an incident (in
            // `last_errors`, logged); the rest of an outage is counted,
            // and logged at debug level. The staging directory stays the
            // truth: no tier failed, and no errno reached an application.
            if state.catalog_retry_at.is_none() {
                self.incidents.record(Incident {
                    at: std::time::SystemTime::now(),
                    op: "catalogue".to_string(),
                    path: None,
                    tier: None,
                    errno: None,
                    message: message.clone(),
                });
            } else {
                tracing::debug!(error = %message, "checkpoint catalogue call failed");
            }
            state.stats.last_error = Some(message);
            state.catalog_behind = true;
            state.catalog_retry_at = Some(self.clock.now().saturating_add(CATALOG_RETRY));
        }
    }

    /// Puts every copy's record again after failed updates; stays behind
    /// (and counts the error) if the catalogue still fails.
    fn resync(&self, state: &mut State) {
        let recs: Vec<CkptRecord> = state.copies.values().map(|c| c.rec.clone()).collect();
        for rec in &recs {
            if let Err(e) = self.catalog.put_ckpt(rec) {
                self.note_catalog(state, Err(e));
                return;
            }
        }
        state.catalog_behind = false;
        state.catalog_retry_at = None;
        tracing::info!(
            catalogue = %self.catalog.describe(),
            records = recs.len(),
            "checkpoint catalogue answers again; records put again"
        );
    }

    /// The version a new checkpoint of `job` joins, or why the catalogue
    /// could not give one (then the caller falls back to the capacity
    /// tier).
    fn version_for(&self, state: &mut State, job: &JobSpec, now: Time) -> Result<u64, String> {
        if let Some(at) = state.catalog_retry_at {
            if now < at {
                return Err(format!(
                    "catalogue {} failed less than {} ms ago ({})",
                    self.catalog.describe(),
                    CATALOG_RETRY.as_millis(),
                    state.stats.last_error.as_deref().unwrap_or("no message")
                ));
            }
        }
        // Half a period: the ranks of one checkpoint start within it, the
        // next checkpoint of the job starts a period later.
        let window_ms = job.period_s.saturating_mul(500).max(1000);
        let now_ms = unix_ns() / 1_000_000;
        match self
            .catalog
            .join_version(&job.id, job.files, window_ms, now_ms)
        {
            Ok(version) => {
                state.catalog_retry_at = None;
                if state.catalog_behind {
                    self.resync(state);
                }
                Ok(version)
            }
            Err(e) => {
                let message = format!("catalogue {}: {e}", self.catalog.describe());
                self.note_catalog(state, Err(e));
                Err(message)
            }
        }
    }

    /// Whether `rec` says its only full copy is staged on another node.
    fn staged_elsewhere(&self, rec: &CkptRecord) -> bool {
        rec.location == Location::Staged
            && match &rec.node {
                Some(node) => *node != self.node,
                // Format 1: nobody's in a shared catalogue, ours otherwise.
                None => self.catalog.shared(),
            }
    }

    /// Whether this node reconciles `rec` at open.
    fn own(&self, rec: &CkptRecord) -> bool {
        match &rec.node {
            Some(node) => *node == self.node,
            None => !self.catalog.shared(),
        }
    }

    /// Writes `rec` as `ckpt/<id>.rec` durably (tmp, sync, rename, dir sync
    /// unless `sync_dir` is false because the caller syncs it next).
    fn write_rec(&self, id: u64, rec: &CkptRecord, sync_dir: bool) -> io::Result<()> {
        let tmp = rel(format!("{DIR}/{id}.rec.tmp"));
        let file = self.fast.open(
            &tmp,
            OpenOptions {
                create: true,
                truncate: true,
                ..OpenOptions::default()
            }
            .private(),
        )?;
        let json = serde_json::to_vec(rec).map_err(io::Error::other)?;
        file.write_at(&json, 0)?;
        file.sync_data()?;
        drop(file);
        self.fast.rename(&tmp, &rec_path(id))?;
        if sync_dir {
            self.fast.sync_dir(&dir())?;
        }
        Ok(())
    }

    fn used(state: &State) -> u64 {
        state.copies.values().map(|c| c.len).sum()
    }

    /// (write cap, demotion rate) now, bytes/s; a write cap of `None` is
    /// no cap (no checkpoint is being written).
    fn rates(&self, state: &State) -> (Option<f64>, f64) {
        if state.writers == 0 {
            return (None, self.options.bandwidths.idle_demote);
        }
        let r = state.planner.rates(Shared::used(state));
        (Some(r.write), r.demote)
    }

    fn resident(&self, state: &State, c: &Copy) -> Resident {
        let rate = state
            .jobs
            .iter()
            .find(|j| j.id == c.rec.job)
            .map_or(0.0, |j| job_rate(j, self.options.node_mtbf));
        Resident {
            // INVARIANT: every copy's job has a key (module docs).
            job: state.job_keys.get(&c.rec.job).copied().unwrap_or(u64::MAX),
            version: c.rec.version,
            bytes: c.len,
            failure_rate: rate,
            written: c.written,
            accessed: c.accessed,
        }
    }

    fn job_key(state: &mut State, job: &str) -> u64 {
        let next = state.job_keys.len() as u64;
        *state.job_keys.entry(job.to_string()).or_insert(next)
    }

    /// Removes a copy's data and record (the capacity tier must hold it, or
    /// the file must be going away).
    fn remove_copy(&self, state: &mut State, id: u64) -> io::Result<()> {
        if let Some(c) = state.copies.remove(&id) {
            state.by_path.remove(&RelPath::new(&c.rec.path)?);
            // Handles still open keep the (now unnamed) file, as POSIX
            // keeps an unlinked file for its open descriptors.
            let mut writers = 0;
            for h in state.handles.values_mut() {
                if matches!(h.target, Target::Copy(t) if t == id) {
                    h.target = Target::Capacity(Arc::clone(&c.file));
                    writers += u32::from(h.writing);
                }
            }
            state.writers = state.writers.saturating_sub(writers);
        }
        for path in [data_path(id), rec_path(id)] {
            match self.fast.remove_file(&path) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        self.fast.sync_dir(&dir())
    }

    /// Evicts a cached copy: the capacity tier keeps the checkpoint.
    fn evict(&self, state: &mut State, id: u64) -> io::Result<()> {
        let Some(c) = state.copies.get(&id) else {
            return Ok(());
        };
        let mut rec = c.rec.clone();
        let bytes = c.len;
        self.remove_copy(state, id)?;
        rec.location = Location::Capacity;
        rec.staged_id = None;
        let r = self.catalog.put_ckpt(&rec);
        self.note_catalog(state, r);
        state.stats.evictions += 1;
        state.stats.evicted_bytes += bytes;
        Ok(())
    }

    /// Evicts cached copies the filter allows, coldest first, until
    /// `fits(state)`; whether it fits in the end.
    fn make_room(
        &self,
        state: &mut State,
        allow: impl Fn(&Copy) -> bool,
        fits: impl Fn(&State) -> bool,
    ) -> io::Result<bool> {
        if fits(state) {
            return Ok(true);
        }
        let all: Vec<Resident> = state
            .copies
            .values()
            .map(|c| self.resident(state, c))
            .collect();
        let newest = newest_versions(all.iter(), []);
        let candidates: Vec<(u64, Resident)> = state
            .copies
            .iter()
            .filter(|(_, c)| c.rec.location == Location::Cached && c.unused() && allow(c))
            .map(|(&id, c)| (id, self.resident(state, c)))
            .collect();
        let residents: Vec<Resident> = candidates.iter().map(|(_, r)| *r).collect();
        for i in cold_order(self.options.eviction, &residents, &newest) {
            if fits(state) {
                break;
            }
            self.evict(state, candidates[i].0)?;
        }
        Ok(fits(state))
    }
}

/// What a new checkpoint gets.
enum Placement {
    Stage,
    /// To the capacity tier; `true` when no room could be made.
    Direct {
        spill: bool,
    },
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
        match fast.metadata(&dir()) {
            Ok(m) if m.kind == FileKind::Dir => {}
            Ok(_) => {
                return Err(invalid(format!(
                    "fast tier {}: `{DIR}` exists and is not a directory",
                    fast.describe()
                )))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                fast.create_private_dir(&dir())?;
                fast.sync_dir(&RelPath::root())?;
            }
            Err(e) => return Err(e),
        }
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
            by_path: HashMap::new(),
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
        });
        {
            // No other thread yet: the lock only satisfies the types.
            let mut state = shared.lock();
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

    /// Whether `fh` is one of this stager's handles.
    pub fn owns(fh: u64) -> bool {
        fh & HANDLE_BIT != 0
    }

    /// The job whose glob matches `path`, if any.
    fn job_of(state: &State, path: &RelPath) -> Option<JobSpec> {
        state
            .jobs
            .iter()
            .find(|j| glob_match(&j.glob, path.as_str()))
            .cloned()
    }

    /// Whether the stager handles `path`: a registered glob matches it or a
    /// copy of it is staged. At most every `jobs_refresh` this checks the
    /// catalogue's job generation first and reads the jobs again if another
    /// node changed them (one small read per interval, not per call).
    pub fn handles(&self, path: &RelPath) -> bool {
        let shared = &*self.shared;
        {
            let mut state = shared.lock();
            if state.by_path.contains_key(path) {
                return true;
            }
            let now = shared.clock.now();
            let fresh = state
                .jobs_checked
                .is_some_and(|t| now.saturating_since(t) < shared.options.jobs_refresh);
            if fresh {
                return Checkpoints::job_of(&state, path).is_some();
            }
            state.jobs_checked = Some(now);
        }
        self.refresh_jobs();
        Checkpoints::job_of(&shared.lock(), path).is_some()
    }

    /// Reads the jobs again if the catalogue's job generation changed;
    /// whether they were. A failing catalogue keeps the jobs known.
    fn refresh_jobs(&self) -> bool {
        let shared = &*self.shared;
        let generation = match shared.catalog.jobs_generation() {
            Ok(g) => g,
            Err(e) => {
                shared.note_catalog(&mut shared.lock(), Err(e));
                return false;
            }
        };
        if generation == shared.lock().jobs_generation {
            return false;
        }
        let jobs = match shared.catalog.jobs() {
            Ok(jobs) => jobs,
            Err(e) => {
                shared.note_catalog(&mut shared.lock(), Err(e));
                return false;
            }
        };
        let mut state = shared.lock();
        let p = prior(&jobs, shared.options.period);
        state.planner.set_prior(p);
        tracing::info!(
            jobs = jobs.len(),
            generation,
            "checkpoint jobs changed in the catalogue: read again"
        );
        state.jobs = jobs;
        state.jobs_generation = generation;
        state.stats.jobs_reloads += 1;
        true
    }

    /// The length of `path`'s fast-tier copy, if it has one.
    pub fn size(&self, path: &RelPath) -> Option<u64> {
        let state = self.shared.lock();
        let id = state.by_path.get(path)?;
        state.copies.get(id).map(|c| c.len)
    }

    /// Registers (or replaces) a job: stored in the catalogue, used at once.
    /// A job that could not work is refused ([`JobSpec::check_new`]: no
    /// size, a glob outside the mount, one claiming every file, another
    /// job's glob), checked against the catalogue's jobs.
    pub fn register(&self, job: JobSpec) -> io::Result<()> {
        let registered = self.shared.catalog.jobs().map_err(catalog_io)?;
        job.check_new(&registered)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
        self.shared.catalog.put_job(&job).map_err(catalog_io)?;
        self.reload_jobs()
    }

    /// Removes a job; its files already staged stay until demoted and
    /// evicted. `false` if there was none.
    pub fn unregister(&self, id: &str) -> io::Result<bool> {
        let removed = self.shared.catalog.remove_job(id).map_err(catalog_io)?;
        self.reload_jobs()?;
        Ok(removed)
    }

    fn reload_jobs(&self) -> io::Result<()> {
        let generation = self.shared.catalog.jobs_generation().map_err(catalog_io)?;
        let jobs = self.shared.catalog.jobs().map_err(catalog_io)?;
        let mut state = self.shared.lock();
        let p = prior(&jobs, self.shared.options.period);
        state.planner.set_prior(p);
        state.jobs = jobs;
        state.jobs_generation = generation;
        Ok(())
    }

    /// This node's id in the catalogue.
    pub fn node_id(&self) -> &str {
        &self.shared.node
    }

    /// The registered jobs.
    pub fn jobs(&self) -> Vec<JobSpec> {
        self.shared.lock().jobs.clone()
    }

    /// Create `path` (which must not exist) as a new checkpoint.
    pub fn create(&self, path: &RelPath) -> io::Result<u64> {
        self.begin(path, true)
    }

    /// Open `path`. For writing, an empty checkpoint-class file (or one
    /// opened with `truncate`) starts a new checkpoint; one with data is
    /// written in place where it is. For reading, a fast-tier copy is a
    /// restart hit, the capacity tier a miss.
    pub fn open_file(&self, path: &RelPath, write: bool, truncate: bool) -> io::Result<u64> {
        let shared = &*self.shared;
        if write && Checkpoints::job_of(&shared.lock(), path).is_some() {
            let empty = match self.size(path) {
                Some(len) => len == 0,
                None => shared.capacity.metadata(path)?.len == 0,
            };
            if truncate || empty {
                return self.begin(path, false);
            }
        }
        let local = shared.lock().by_path.contains_key(path);
        if !write && !local {
            self.wait_for_demotion_elsewhere(path)?;
        }
        let mut state = shared.lock();
        let now = shared.clock.now();
        let target = match state.by_path.get(path).copied() {
            Some(id) => {
                if write {
                    self.stage_again(&mut state, id)?;
                }
                let c = state.copies.get_mut(&id).ok_or_else(|| gone(path))?;
                c.accessed = now;
                if write {
                    c.writers += 1;
                    c.generation += 1;
                } else {
                    c.readers += 1;
                }
                Target::Copy(id)
            }
            None => Target::Capacity(shared.capacity.open(path, OpenOptions::default())?),
        };
        let copy = matches!(target, Target::Copy(_));
        if write && copy {
            state.writers += 1;
        }
        if !write {
            if copy {
                state.stats.restart_hits += 1;
            } else {
                state.stats.restart_misses += 1;
            }
        }
        Ok(add_handle(
            &mut state,
            Handle {
                target,
                writing: write,
                hit: (!write).then_some(copy),
                ticket: None,
                created: None,
            },
        ))
    }

    /// Waits, at most `remote_wait`, while the catalogue says the only
    /// full copy of `path` is staged on another node's fast tier (its
    /// capacity-tier file is empty or partly copied): EAGAIN when the wait
    /// runs out, never a short file. With the catalogue down the node
    /// serves what it has (the capacity tier), and says so in the log.
    fn wait_for_demotion_elsewhere(&self, path: &RelPath) -> io::Result<()> {
        let shared = &*self.shared;
        let started = shared.clock.now();
        let deadline = started.saturating_add(shared.options.remote_wait);
        let mut waited = false;
        loop {
            let rec = match shared.catalog.ckpt(path.as_str()) {
                Ok(rec) => rec,
                Err(e) => {
                    tracing::warn!(
                        path = %path,
                        error = %e,
                        "restart read served by the capacity tier without asking the \
                         catalogue: a copy staged on another node would not be seen"
                    );
                    shared.note_catalog(&mut shared.lock(), Err(e));
                    return Ok(());
                }
            };
            let holder = match rec {
                Some(rec) if shared.staged_elsewhere(&rec) => rec.node,
                _ => {
                    if waited {
                        shared.lock().stats.remote_waits += 1;
                    }
                    return Ok(());
                }
            };
            let now = shared.clock.now();
            if now >= deadline {
                let holder = holder.as_deref().unwrap_or("(unknown: a format-1 record)");
                let message = format!(
                    "{path}: its only full copy is staged on node {holder}'s fast tier and \
                     was not demoted within {} ms (bbos.remote_wait); try again later",
                    shared.options.remote_wait.as_millis()
                );
                tracing::warn!(path = %path, node = %holder, "restart read refused: {message}");
                let mut state = shared.lock();
                state.stats.remote_waits += 1;
                state.stats.remote_timeouts += 1;
                state.stats.last_error = Some(message.clone());
                return Err(io::Error::new(io::ErrorKind::WouldBlock, message));
            }
            waited = true;
            shared
                .clock
                .sleep(deadline.saturating_since(now).min(REMOTE_POLL));
        }
    }

    /// A write to a cached copy makes it staged again, durably first.
    fn stage_again(&self, state: &mut State, id: u64) -> io::Result<()> {
        let Some(c) = state.copies.get_mut(&id) else {
            return Ok(());
        };
        if c.rec.location == Location::Staged {
            return Ok(());
        }
        c.rec.location = Location::Staged;
        let rec = c.rec.clone();
        self.shared.write_rec(id, &rec, true)?;
        let r = self.shared.catalog.put_ckpt(&rec);
        self.shared.note_catalog(state, r);
        Ok(())
    }

    /// A new checkpoint at `path`; see docs/bbos.md for the order of the
    /// decisions.
    fn begin(&self, path: &RelPath, create_new: bool) -> io::Result<u64> {
        let shared = &*self.shared;
        let options = &shared.options;
        let mut state = shared.lock();
        let job = Checkpoints::job_of(&state, path)
            .ok_or_else(|| invalid(format!("{path}: no registered job's glob matches it")))?;
        let key = Shared::job_key(&mut state, &job.id);
        // 1. The job's turn on the fast tier.
        let mut ticket = None;
        if options.scheme.schedules_io() {
            let (t, admission) = state.scheduler.submit(0, key);
            ticket = Some(t);
            if admission == Admission::Queued {
                state.stats.admission_waits += 1;
                let started = shared.clock.now();
                let deadline = started.saturating_add(options.admit_wait);
                while !state.admitted.contains(&t) {
                    let now = shared.clock.now();
                    if now >= deadline || state.shutdown {
                        state.stats.admission_timeouts += 1;
                        let _ = state.scheduler.finish(t);
                        ticket = None;
                        break;
                    }
                    state = shared.wait(
                        state,
                        deadline
                            .saturating_since(now)
                            .min(Duration::from_millis(100)),
                    );
                }
                state.admitted.remove(&t);
                let waited = shared.clock.now().saturating_since(started);
                state.stats.admission_wait_ns += u64::try_from(waited.as_nanos()).unwrap_or(0);
            }
        }
        let result = self.place(state, path, &job, key, create_new, ticket);
        if result.is_err() {
            if let Some(t) = ticket {
                let mut state = shared.lock();
                admit(&mut state, t);
                shared.changed.notify_all();
            }
        }
        result
    }

    fn place(
        &self,
        mut state: MutexGuard<'_, State>,
        path: &RelPath,
        job: &JobSpec,
        key: u64,
        create_new: bool,
        ticket: Option<Ticket>,
    ) -> io::Result<u64> {
        let shared = &*self.shared;
        let options = &shared.options;
        let now = shared.clock.now();
        // The old copy of this path is being replaced.
        if let Some(old) = state.by_path.get(path).copied() {
            shared.remove_copy(&mut state, old)?;
        }
        let version = match shared.version_for(&mut state, job, now) {
            Ok(version) => version,
            Err(cause) => return self.fallback(state, path, job, create_new, ticket, &cause),
        };
        // Superseded versions beyond what the job keeps leave the fast tier.
        let stale: Vec<u64> = state
            .copies
            .iter()
            .filter(|(_, c)| {
                c.rec.job == job.id
                    && c.rec.location == Location::Cached
                    && c.unused()
                    && c.rec.version + u64::from(job.versions) <= version
            })
            .map(|(&id, _)| id)
            .collect();
        for id in stale {
            shared.evict(&mut state, id)?;
        }
        let need = job.ckpt_bytes;
        let cap = options.capacity;
        // 2. MaxBW waits before the job starts until its checkpoint fits.
        if options.scheme.reserves_before_start() {
            let deadline = now.saturating_add(options.admit_wait);
            while !shared.make_room(&mut state, |_| true, |s| Shared::used(s) + need <= cap)? {
                let t = shared.clock.now();
                if t >= deadline || state.shutdown {
                    break;
                }
                state = shared.wait(
                    state,
                    deadline.saturating_since(t).min(Duration::from_millis(50)),
                );
            }
        }
        let incoming = Resident {
            job: key,
            version,
            bytes: need,
            failure_rate: job_rate(job, options.node_mtbf),
            written: now,
            accessed: now,
        };
        let placement = if options.scheme == Scheme::DataWarp {
            // 4. Grants of one checkpoint each, in job order, within S.
            let mut granted = 0u64;
            let mut grant = None;
            for j in &state.jobs {
                if granted + j.ckpt_bytes > cap {
                    break;
                }
                granted += j.ckpt_bytes;
                if j.id == job.id {
                    grant = Some(j.ckpt_bytes);
                }
            }
            match grant {
                None => Placement::Direct { spill: false },
                Some(g) => {
                    let own = |s: &State| {
                        s.copies
                            .values()
                            .filter(|c| c.rec.job == job.id)
                            .map(|c| c.len)
                            .sum::<u64>()
                    };
                    let fits = shared.make_room(
                        &mut state,
                        |c| c.rec.job == job.id,
                        |s| own(s) + need <= g,
                    )?;
                    if fits {
                        Placement::Stage
                    } else {
                        Placement::Direct { spill: true }
                    }
                }
            }
        } else {
            let residents: Vec<Resident> = state
                .copies
                .values()
                .map(|c| shared.resident(&state, c))
                .collect();
            // 3. Too cold to be worth the fast tier.
            if direct_to_capacity(options.eviction, &incoming, &residents, cap) {
                Placement::Direct { spill: false }
            } else if shared.make_room(&mut state, |_| true, |s| Shared::used(s) + need <= cap)? {
                Placement::Stage
            } else {
                Placement::Direct { spill: true }
            }
        };
        // The name on the capacity tier (empty while staged).
        let placeholder = shared.capacity.open(
            path,
            OpenOptions {
                create: true,
                create_new,
                truncate: true,
                ..OpenOptions::default()
            },
        )?;
        state.stats.checkpoints += 1;
        let mut rec = CkptRecord {
            path: path.as_str().to_string(),
            job: job.id.clone(),
            version,
            bytes: 0,
            location: Location::Capacity,
            staged_id: None,
            created_unix_ns: unix_ns(),
            node: Some(shared.node.clone()),
        };
        let target = match placement {
            Placement::Direct { spill } => {
                if spill {
                    state.stats.spills += 1;
                } else {
                    state.stats.cold_direct += 1;
                }
                let r = shared.catalog.put_ckpt(&rec);
                shared.note_catalog(&mut state, r);
                Target::Capacity(placeholder)
            }
            Placement::Stage => {
                let id = state.next_copy;
                state.next_copy += 1;
                rec.location = Location::Staged;
                rec.staged_id = Some(id);
                shared.write_rec(id, &rec, false)?;
                let file = shared.fast.open(
                    &data_path(id),
                    OpenOptions {
                        create: true,
                        truncate: true,
                        ..OpenOptions::default()
                    }
                    .private(),
                )?;
                shared.fast.sync_dir(&dir())?;
                let r = shared.catalog.put_ckpt(&rec);
                shared.note_catalog(&mut state, r);
                state.copies.insert(
                    id,
                    Copy {
                        rec,
                        file,
                        len: 0,
                        writers: 1,
                        readers: 0,
                        generation: 0,
                        demoting: false,
                        written: now,
                        accessed: now,
                    },
                );
                state.by_path.insert(path.clone(), id);
                state.writers += 1;
                Target::Copy(id)
            }
        };
        let created = matches!(target, Target::Capacity(_)).then(|| path.clone());
        Ok(add_handle(
            &mut state,
            Handle {
                target,
                writing: true,
                hit: None,
                ticket,
                created,
            },
        ))
    }

    /// A new checkpoint the catalogue could not give a version: an
    /// ordinary file on the capacity tier, with no record (issue 19: an
    /// outage costs the fast tier, never the create).
    fn fallback(
        &self,
        mut state: MutexGuard<'_, State>,
        path: &RelPath,
        job: &JobSpec,
        create_new: bool,
        ticket: Option<Ticket>,
        cause: &str,
    ) -> io::Result<u64> {
        let file = self.shared.capacity.open(
            path,
            OpenOptions {
                create: true,
                create_new,
                truncate: true,
                ..OpenOptions::default()
            },
        )?;
        state.stats.checkpoints += 1;
        state.stats.catalog_fallbacks += 1;
        tracing::warn!(
            path = %path,
            job = %job.id,
            cause = %cause,
            "new checkpoint written to the capacity tier as an ordinary file: no catalogue"
        );
        Ok(add_handle(
            &mut state,
            Handle {
                target: Target::Capacity(file),
                writing: true,
                hit: None,
                ticket,
                created: Some(path.clone()),
            },
        ))
    }

    /// Read up to `len` bytes at `offset`.
    pub fn read(&self, fh: u64, offset: u64, len: u64) -> io::Result<Vec<u8>> {
        let (file, size, hit) = {
            let state = self.shared.lock();
            let h = state.handles.get(&fh).ok_or_else(|| bad_handle(fh))?;
            match &h.target {
                Target::Copy(id) => {
                    let c = state.copies.get(id).ok_or_else(|| bad_handle(fh))?;
                    (Arc::clone(&c.file), Some(c.len), h.hit)
                }
                Target::Capacity(f) => (Arc::clone(f), None, h.hit),
            }
        };
        let size = match size {
            Some(s) => s,
            None => file.len()?,
        };
        if offset >= size {
            return Ok(Vec::new());
        }
        let n = usize::try_from(len.min(size - offset)).map_err(|_| invalid("read too large"))?;
        let mut buf = vec![0u8; n];
        let got = file.read_at(&mut buf, offset)?;
        buf.truncate(got);
        let mut state = self.shared.lock();
        match hit {
            Some(true) => state.stats.hit_bytes += got as u64,
            Some(false) => state.stats.miss_bytes += got as u64,
            None => {}
        }
        Ok(buf)
    }

    /// Write `data` at `offset`, paced by the write throttle.
    pub fn write(&self, fh: u64, offset: u64, data: &[u8]) -> io::Result<()> {
        let shared = &*self.shared;
        let bytes = data.len() as u64;
        let end = offset
            .checked_add(bytes)
            .ok_or_else(|| invalid("write past the largest file offset"))?;
        // The throttle: only writes to staged copies take tokens.
        let file = loop {
            let mut state = shared.lock();
            let h = state.handles.get(&fh).ok_or_else(|| bad_handle(fh))?;
            let id = match &h.target {
                Target::Capacity(f) => {
                    let f = Arc::clone(f);
                    drop(state);
                    f.write_at(data, offset)?;
                    shared.lock().stats.direct_bytes += bytes;
                    return Ok(());
                }
                Target::Copy(id) => *id,
            };
            let now = shared.clock.now();
            let (cap, _) = shared.rates(&state);
            match cap.and_then(|c| NonZeroU64::new(c as u64)) {
                Some(rate) => state.write_bucket.set_rate(now, rate),
                None => state.write_bucket.set_unlimited(),
            }
            match state.write_bucket.try_take(now, bytes) {
                Ok(()) => {
                    // A copy published at an fsync or close (cached, its
                    // bytes on the capacity tier) is staged again first.
                    self.stage_again(&mut state, id)?;
                    // Under the lock before the bytes change: a demotion
                    // finishing after this sees the change.
                    let c = state.copies.get_mut(&id).ok_or_else(|| bad_handle(fh))?;
                    c.generation += 1;
                    break (id, Arc::clone(&c.file));
                }
                Err(at) => {
                    let wait = at.saturating_since(now);
                    state.stats.throttle_ns += u64::try_from(wait.as_nanos()).unwrap_or(0);
                    drop(state);
                    shared.clock.sleep(wait);
                }
            }
        };
        let (id, file) = file;
        file.write_at(data, offset)?;
        let mut state = shared.lock();
        let now = shared.clock.now();
        if let Some(c) = state.copies.get_mut(&id) {
            c.len = c.len.max(end);
            c.rec.bytes = c.len;
            c.accessed = now;
        }
        state.stats.staged_bytes += bytes;
        let closed = state.planner.handle_written(now, bytes);
        record_periods(shared, &mut state, &closed);
        Ok(())
    }

    /// Make the file's writes durable.
    pub fn fsync(&self, fh: u64) -> io::Result<()> {
        let (file, created) = {
            let state = self.shared.lock();
            let h = state.handles.get(&fh).ok_or_else(|| bad_handle(fh))?;
            let file = match &h.target {
                Target::Copy(id) => {
                    Arc::clone(&state.copies.get(id).ok_or_else(|| bad_handle(fh))?.file)
                }
                Target::Capacity(f) => Arc::clone(f),
            };
            (file, h.created.clone())
        };
        file.sync_data()?;
        if let Some(path) = created {
            let parent = path.parent().unwrap_or_else(RelPath::root);
            self.shared.capacity.sync_dir(&parent)?;
        }
        if self.shared.options.publish_on_sync {
            self.publish(fh)?;
        }
        Ok(())
    }

    /// A close of handle `fh` (every `close(2)`, before it returns): under
    /// [`CkptOptions::publish_on_sync`] a staged copy's bytes are written
    /// to the capacity tier and synced, as close-to-open promises.
    pub fn close(&self, fh: u64) -> io::Result<()> {
        if self.shared.options.publish_on_sync {
            self.publish(fh)?;
        }
        Ok(())
    }

    /// Write the staged copy behind `fh` (if it is one) to its capacity
    /// file, cut that to the copy's length and sync it (and its
    /// directory); then the copy is cached (durably, and in the
    /// catalogue), as after a demotion, unless it changed meanwhile. Its
    /// next write stages it again.
    fn publish(&self, fh: u64) -> io::Result<()> {
        let shared = &*self.shared;
        let (id, generation, path, src, len) = {
            let state = shared.lock();
            let h = state.handles.get(&fh).ok_or_else(|| bad_handle(fh))?;
            let Target::Copy(id) = &h.target else {
                return Ok(());
            };
            let c = state.copies.get(id).ok_or_else(|| bad_handle(fh))?;
            if c.rec.location == Location::Cached {
                return Ok(()); // nothing written since it was published
            }
            (
                *id,
                c.generation,
                c.rec.path.clone(),
                Arc::clone(&c.file),
                c.len,
            )
        };
        let target = RelPath::new(&path)?;
        let what = format!(
            "publish {path} to capacity tier {}",
            shared.capacity.describe()
        );
        let dst = shared
            .capacity
            .open(&target, OpenOptions::CREATE)
            .map_err(|e| with_context(e, &what))?;
        let (copied, _) = copy_range(src.as_ref(), dst.as_ref(), 0, len, &mut Vec::new())
            .map_err(|e| with_context(e, &what))?;
        if copied < len {
            return Err(with_context(
                io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("the staged copy holds {copied} of its {len} bytes"),
                ),
                &what,
            ));
        }
        dst.set_len(len)
            .and_then(|()| dst.sync_data())
            .and_then(|()| {
                shared
                    .capacity
                    .sync_dir(&target.parent().unwrap_or_else(RelPath::root))
            })
            .map_err(|e| with_context(e, &what))?;
        let mut state = shared.lock();
        state.stats.published_bytes += len;
        let Some(c) = state.copies.get_mut(&id) else {
            return Ok(());
        };
        if c.generation != generation || c.len != len || c.rec.path != path {
            return Ok(()); // written meanwhile: stays staged
        }
        c.rec.location = Location::Cached;
        let rec = c.rec.clone();
        if let Err(e) = shared.write_rec(id, &rec, true) {
            if let Some(c) = state.copies.get_mut(&id) {
                c.rec.location = Location::Staged;
            }
            return Err(with_context(e, &what));
        }
        let r = shared.catalog.put_ckpt(&rec);
        shared.note_catalog(&mut state, r);
        shared.changed.notify_all();
        Ok(())
    }

    /// Set the file's size.
    pub fn truncate(&self, fh: u64, size: u64) -> io::Result<()> {
        let mut state = self.shared.lock();
        let h = state.handles.get(&fh).ok_or_else(|| bad_handle(fh))?;
        match &h.target {
            Target::Capacity(f) => f.set_len(size),
            Target::Copy(id) => {
                let id = *id;
                self.truncate_copy(&mut state, id, size)
            }
        }
    }

    /// Set the size of `path`'s fast-tier copy; `false` if it has none.
    pub fn truncate_path(&self, path: &RelPath, size: u64) -> io::Result<bool> {
        let mut state = self.shared.lock();
        let Some(id) = state.by_path.get(path).copied() else {
            return Ok(false);
        };
        self.truncate_copy(&mut state, id, size)?;
        Ok(true)
    }

    fn truncate_copy(&self, state: &mut State, id: u64, size: u64) -> io::Result<()> {
        self.stage_again(state, id)?;
        let c = state
            .copies
            .get_mut(&id)
            .ok_or_else(|| invalid("copy gone"))?;
        c.file.set_len(size)?;
        c.len = size;
        c.rec.bytes = size;
        c.generation += 1;
        Ok(())
    }

    /// Close a handle: a writer's end lets the next job in and its file be
    /// demoted.
    pub fn release(&self, fh: u64) {
        let shared = &*self.shared;
        let mut state = shared.lock();
        let Some(h) = state.handles.remove(&fh) else {
            return;
        };
        if let Target::Copy(id) = h.target {
            if h.writing {
                if let Some(c) = state.copies.get_mut(&id) {
                    c.writers = c.writers.saturating_sub(1);
                    let rec = c.rec.clone();
                    let r = shared.catalog.put_ckpt(&rec);
                    shared.note_catalog(&mut state, r);
                }
                state.writers = state.writers.saturating_sub(1);
            } else if let Some(c) = state.copies.get_mut(&id) {
                c.readers = c.readers.saturating_sub(1);
            }
        }
        if let Some(t) = h.ticket {
            admit(&mut state, t);
        }
        shared.changed.notify_all();
    }

    /// Forget `path`'s fast-tier copy and catalogue record (the file is
    /// being removed; the caller removes the capacity name).
    pub fn unlink(&self, path: &RelPath) -> io::Result<()> {
        let shared = &*self.shared;
        let mut state = shared.lock();
        if let Some(id) = state.by_path.get(path).copied() {
            shared.remove_copy(&mut state, id)?;
        }
        let r = shared.catalog.remove_ckpt(path.as_str()).map(|_| ());
        shared.note_catalog(&mut state, r);
        Ok(())
    }

    /// Move copies at or under `from` to `to` (durably, before the caller
    /// renames on the capacity tier), replacing a copy at `to`.
    pub fn rename(&self, from: &RelPath, to: &RelPath) -> io::Result<()> {
        let shared = &*self.shared;
        let mut state = shared.lock();
        if let Some(old) = state.by_path.get(to).copied() {
            if state.by_path.get(from) != Some(&old) {
                shared.remove_copy(&mut state, old)?;
            }
        }
        let moved: Vec<(RelPath, RelPath, u64)> = state
            .by_path
            .iter()
            .filter_map(|(p, &id)| p.rebase(from, to).map(|n| (p.clone(), n, id)))
            .collect();
        for (old, new, id) in moved {
            let Some(c) = state.copies.get_mut(&id) else {
                continue;
            };
            c.rec.path = new.as_str().to_string();
            c.generation += 1;
            let rec = c.rec.clone();
            shared.write_rec(id, &rec, true)?;
            state.by_path.remove(&old);
            state.by_path.insert(new.clone(), id);
            let r = shared
                .catalog
                .rename_ckpt(old.as_str(), new.as_str())
                .map(|_| ());
            shared.note_catalog(&mut state, r);
        }
        Ok(())
    }

    /// Demote the coldest closed staged copy, if any; `true` if one was
    /// demoted. The demotion thread calls this in a loop; tests step it.
    pub fn demote_next(&self) -> io::Result<bool> {
        demote_next(&self.shared)
    }

    /// Wait until every closed staged copy is demoted (errors if demotion
    /// keeps failing).
    pub fn drain(&self) -> io::Result<()> {
        loop {
            if !self.shared.options.background && !self.demote_next()? {
                return Ok(());
            }
            let state = self.shared.lock();
            let pending = state
                .copies
                .values()
                .any(|c| c.rec.location == Location::Staged && c.writers == 0);
            if !pending {
                return Ok(());
            }
            if let Some(e) = state.stats.last_error.clone() {
                if state.stats.demotion_errors >= 5 {
                    return Err(io::Error::other(format!("drain checkpoints: {e}")));
                }
            }
            drop(self.shared.wait(state, Duration::from_millis(20)));
        }
    }

    /// The ring of the stager's newest failures (`last_errors`): failed
    /// demotions and catalogue updates.
    pub fn incidents(&self) -> &Arc<Incidents> {
        &self.shared.incidents
    }

    /// A snapshot for status and metrics.
    pub fn status(&self) -> CkptStatus {
        let shared = &*self.shared;
        let state = shared.lock();
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
        self.shared.lock().shutdown = true;
        self.shared.changed.notify_all();
        if let Some(d) = self.demoter.take() {
            let _ = d.join();
        }
    }
}

/// Checks a node id given in the options (1 to [`NODE_ID_LEN_MAX`] of
/// `A-Z a-z 0-9 . _ -`); the message says what is accepted.
pub fn check_node_id(id: &str) -> Result<String, String> {
    let ok = !id.is_empty()
        && id.len() <= NODE_ID_LEN_MAX
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
    if ok {
        Ok(id.to_owned())
    } else {
        Err(format!(
            "bbos node id {id:?}: give 1 to {NODE_ID_LEN_MAX} of A-Z a-z 0-9 . _ -"
        ))
    }
}

/// This node's id, kept in `ckpt/node-id` on the fast tier: read back, or
/// generated (`HOSTNAME-XXXXXXXX`) and written durably at the first open.
/// The id goes with the fast tier because the copies it names are there:
/// a node whose fast tier is replaced is a new node.
fn node_id(fast: &dyn Backend) -> io::Result<String> {
    let path = rel(format!("{DIR}/{NODE_ID_FILE}"));
    match fast.open(&path, OpenOptions::default().private()) {
        Ok(file) => {
            let len = file.len()?.min(NODE_ID_LEN_MAX as u64 + 1);
            let mut buf = vec![0u8; usize::try_from(len).unwrap_or(0)];
            crate::engine::read_fully(file.as_ref(), &mut buf, 0)?;
            let text = String::from_utf8_lossy(&buf);
            check_node_id(text.trim_end()).map_err(|e| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "fast tier {}: {path}: {e}; remove the file to have a new id generated \
                         (this node's catalogue records then belong to nobody)",
                        fast.describe()
                    ),
                )
            })
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
            let mut host: String = host
                .trim()
                .chars()
                .filter(|c| c.is_ascii_alphanumeric() || "._-".contains(*c))
                .take(NODE_ID_LEN_MAX - 9)
                .collect();
            if host.is_empty() {
                host = "node".into();
            }
            let id = format!("{host}-{:08x}", random_u32());
            let tmp = rel(format!("{DIR}/{NODE_ID_FILE}.tmp"));
            let file = fast.open(
                &tmp,
                OpenOptions {
                    create: true,
                    truncate: true,
                    ..OpenOptions::default()
                }
                .private(),
            )?;
            file.write_at(format!("{id}\n").as_bytes(), 0)?;
            file.sync_data()?;
            drop(file);
            fast.rename(&tmp, &path)?;
            fast.sync_dir(&dir())?;
            Ok(id)
        }
        Err(e) => Err(e),
    }
}

/// 32 random bits from the standard library's per-process random hash
/// keys (seeded by the OS), mixed with the time and the process id.
fn random_u32() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(unix_ns());
    h.write_u32(std::process::id());
    (h.finish() >> 16) as u32
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

/// Ends ticket `t`; the tickets it admits are marked for their waiters.
fn admit(state: &mut State, t: Ticket) {
    for next in state.scheduler.finish(t) {
        state.admitted.insert(next);
    }
}

fn record_periods(shared: &Shared, state: &mut State, closed: &[(u64, u64)]) {
    for &(index, bytes) in closed {
        let p = PeriodStats {
            index: state.period_base + index,
            written_bytes: bytes,
        };
        let r = shared
            .catalog
            .put_period(&p)
            .and_then(|()| shared.catalog.trim_periods(shared.options.window));
        shared.note_catalog(state, r);
    }
}

/// Rebuilds the copies from the staging directory and makes the catalogue
/// agree; see the module docs.
fn recover(shared: &Shared, state: &mut State, now: Time) -> io::Result<()> {
    let fast = &shared.fast;
    let mut recs = BTreeMap::new();
    let mut datas = HashSet::new();
    for entry in fast.read_dir(&dir())? {
        let name = entry.name;
        let path = rel(format!("{DIR}/{name}"));
        if let Some(id) = name
            .strip_suffix(".rec")
            .and_then(|s| s.parse::<u64>().ok())
        {
            recs.insert(id, path);
        } else if let Some(id) = name
            .strip_suffix(".data")
            .and_then(|s| s.parse::<u64>().ok())
        {
            datas.insert(id);
        } else if name.ends_with(".tmp") {
            fast.remove_file(&path)?;
        }
    }
    let mut changed = false;
    for (&id, path) in &recs {
        state.next_copy = state.next_copy.max(id + 1);
        if !datas.contains(&id) {
            // Created but never given data, or its data already removed.
            fast.remove_file(path)?;
            changed = true;
            continue;
        }
        let file = fast.open(path, OpenOptions::default().private())?;
        let mut buf = vec![0u8; usize::try_from(file.len()?).unwrap_or(0)];
        crate::engine::read_fully(file.as_ref(), &mut buf, 0)?;
        let rec: CkptRecord = serde_json::from_slice(&buf).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("fast tier {}: {path}: corrupt record: {e}", fast.describe()),
            )
        })?;
        let data = fast.open(&data_path(id), OpenOptions::default().private())?;
        let len = data.len()?;
        let mut rec = rec;
        rec.bytes = len;
        rec.staged_id = Some(id);
        // Held here: ours, also if written before node ids.
        rec.node = Some(shared.node.clone());
        let rpath = RelPath::new(&rec.path)?;
        // Every copy's job has a scheduler/ranking key (see `resident`).
        Shared::job_key(state, &rec.job);
        let r = shared.catalog.put_ckpt(&rec);
        shared.note_catalog(state, r);
        state.by_path.insert(rpath, id);
        state.copies.insert(
            id,
            Copy {
                rec,
                file: data,
                len,
                writers: 0,
                readers: 0,
                generation: 0,
                demoting: false,
                written: now,
                accessed: now,
            },
        );
        state.stats.recovered += 1;
    }
    for id in datas {
        if !recs.contains_key(&id) {
            fast.remove_file(&data_path(id))?;
            changed = true;
        }
    }
    if changed {
        fast.sync_dir(&dir())?;
    }
    // Catalogue records of copies the staging dir no longer has: only
    // this node's (issue 20: another node's staged copy is on its tier).
    match shared.catalog.ckpts() {
        Ok(all) => {
            for mut rec in all {
                let held = RelPath::new(&rec.path)
                    .ok()
                    .is_some_and(|p| state.by_path.contains_key(&p));
                if !held && rec.location != Location::Capacity && shared.own(&rec) {
                    rec.location = Location::Capacity;
                    rec.staged_id = None;
                    let r = shared.catalog.put_ckpt(&rec);
                    shared.note_catalog(state, r);
                }
            }
        }
        Err(e) => shared.note_catalog(state, Err(e)),
    }
    Ok(())
}

/// The wait after a failed demotion: doubles per failure up to
/// [`DEMOTE_BACKOFF_MAX`], back to the minimum after one that worked, so a
/// failing capacity tier is retried and reported (each failure is an
/// incident, logged) without spinning.
const DEMOTE_BACKOFF_MIN: Duration = Duration::from_millis(50);
const DEMOTE_BACKOFF_MAX: Duration = Duration::from_secs(5);

fn demoter_loop(shared: &Shared) {
    let mut backoff = DEMOTE_BACKOFF_MIN;
    loop {
        {
            let mut state = shared.lock();
            if state.shutdown {
                return;
            }
            // Records missed during a catalogue outage, once it may answer.
            let due = state
                .catalog_retry_at
                .is_none_or(|at| shared.clock.now() >= at);
            if state.catalog_behind && due {
                shared.resync(&mut state);
            }
        }
        let wait = match demote_next(shared) {
            Ok(true) => {
                backoff = DEMOTE_BACKOFF_MIN;
                continue;
            }
            Ok(false) => DEMOTE_BACKOFF_MIN,
            Err(_) => {
                let wait = backoff;
                backoff = (backoff * 2).min(DEMOTE_BACKOFF_MAX);
                wait
            }
        };
        let state = shared.lock();
        if state.shutdown {
            return;
        }
        drop(shared.wait(state, wait));
    }
}

fn demote_next(shared: &Shared) -> io::Result<bool> {
    let (id, generation, path, src, len) = {
        let mut state = shared.lock();
        let candidates: Vec<(u64, Resident)> = state
            .copies
            .iter()
            .filter(|(_, c)| c.rec.location == Location::Staged && c.writers == 0 && !c.demoting)
            .map(|(&id, c)| (id, shared.resident(&state, c)))
            .collect();
        if candidates.is_empty() {
            return Ok(false);
        }
        let residents: Vec<Resident> = candidates.iter().map(|(_, r)| *r).collect();
        let newest = newest_versions(residents.iter(), []);
        let first = cold_order(shared.options.eviction, &residents, &newest)[0];
        let id = candidates[first].0;
        let Some(c) = state.copies.get_mut(&id) else {
            return Ok(false);
        };
        c.demoting = true;
        (
            id,
            c.generation,
            c.rec.path.clone(),
            Arc::clone(&c.file),
            c.len,
        )
    };
    let result = copy_out(shared, id, generation, &path, src.as_ref(), len);
    let mut state = shared.lock();
    if let Some(c) = state.copies.get_mut(&id) {
        c.demoting = false;
    }
    match result {
        Ok(true) => {
            let still = state.copies.get(&id).is_some_and(|c| {
                c.generation == generation && c.writers == 0 && c.rec.path == path
            });
            if !still {
                state.stats.demotion_restarts += 1;
                shared.changed.notify_all();
                return Ok(true);
            }
            let Some(c) = state.copies.get_mut(&id) else {
                return Ok(true);
            };
            c.rec.location = Location::Cached;
            let rec = c.rec.clone();
            if let Err(e) = shared.write_rec(id, &rec, true) {
                if let Some(c) = state.copies.get_mut(&id) {
                    c.rec.location = Location::Staged;
                }
                return Err(demotion_failed(shared, &mut state, &path, e));
            }
            let r = shared.catalog.put_ckpt(&rec);
            shared.note_catalog(&mut state, r);
            state.stats.demotions += 1;
            state.stats.demoted_bytes += len;
            shared.changed.notify_all();
            Ok(true)
        }
        Ok(false) => {
            state.stats.demotion_restarts += 1;
            Ok(true)
        }
        Err(e) => Err(demotion_failed(shared, &mut state, &path, e)),
    }
}

fn demotion_failed(shared: &Shared, state: &mut State, path: &str, e: io::Error) -> io::Error {
    shared
        .incidents
        .record_error("demote", Some(path), None, &e);
    state.stats.demotion_errors += 1;
    state.stats.last_error = Some(format!("demotion: {e}"));
    e
}

/// Copies a staged file to the capacity tier, paced; `false` if the file
/// changed (or the stager is shutting down) and the copy was abandoned.
fn copy_out(
    shared: &Shared,
    id: u64,
    generation: u64,
    path: &str,
    src: &dyn BackendFile,
    len: u64,
) -> io::Result<bool> {
    let target = RelPath::new(path)?;
    let dst = shared.capacity.open(&target, OpenOptions::CREATE)?;
    let mut buf = Vec::new();
    let mut offset = 0;
    while offset < len {
        let chunk = (len - offset).min(shared.options.chunk_bytes);
        // Pace: wait for tokens at the current demotion rate.
        loop {
            let mut state = shared.lock();
            let changed = state
                .copies
                .get(&id)
                .is_none_or(|c| c.generation != generation || c.writers > 0);
            if state.shutdown || changed {
                return Ok(false);
            }
            let now = shared.clock.now();
            let (_, rate) = shared.rates(&state);
            let Some(rate) = NonZeroU64::new(rate as u64) else {
                // No demotion under writes now (MaxBW, pattern 1).
                drop(shared.wait(state, Duration::from_millis(20)));
                continue;
            };
            state.demote_bucket.set_rate(now, rate);
            match state.demote_bucket.try_take(now, chunk) {
                Ok(()) => break,
                Err(at) => {
                    drop(state);
                    shared.clock.sleep(at.saturating_since(now));
                }
            }
        }
        let (n, how) = copy_range(src, dst.as_ref(), offset, chunk, &mut buf)?;
        if how == CopyHow::Kernel {
            shared.lock().stats.kernel_copies += 1;
        }
        if n < chunk {
            break;
        }
        offset += n;
    }
    dst.set_len(len)?;
    dst.sync_data()?;
    // The name too: the copy is `cached` only once the capacity tier would
    // keep it through a crash.
    shared
        .capacity
        .sync_dir(&target.parent().unwrap_or_else(RelPath::root))?;
    Ok(true)
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
