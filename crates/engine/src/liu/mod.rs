//! [`LiuBackend`]: LiU's read path (seed 001; DESIGN §5) as a wrapper
//! around the capacity backend, so every capacity read and write passes
//! through it: the application's direct writes, the flusher's writes,
//! truncations, removals and renames (docs/liu.md, "Engine and mount").
//!
//! The decisions are [`SegmentBuffer`]'s; this module holds the data:
//! * **Cache ids.** A capacity path gets a cache id the first time it is
//!   opened; every open of the path shares it; a rename moves it (a
//!   directory rename, every path under it); removing or replacing the file
//!   forgets it and everything cached for it. A hard link made through
//!   the backend gives the new name the same cache id; names linked on the
//!   tier behind its back get their own (a write through one would not
//!   invalidate what the other cached).
//! * **Reads** are split at segment boundaries and each piece asks
//!   [`SegmentBuffer::access`]: `Buffer` waits for the parts of the segment
//!   it needs and copies them; `Load` creates the segment in the DRAM buffer
//!   and queues its parts on the worker threads at once — the head (from the
//!   fast tier when lifted, else from the capacity tier) and the body in
//!   `body_sections` capacity reads — then waits only for the parts its
//!   range needs; `Direct` reads the lifted head on the fast tier or the
//!   capacity tier. A load of a segment that was a ghost queues only the
//!   body past its *frontier*, the end of the last byte requested while it
//!   was a ghost ([`SegmentBuffer::requested_runs`]); everything below it
//!   stays *absent* until a reader needs it (the reads already made, and
//!   each hole between them as a part of its own), the reader that made
//!   the load reads its own bytes directly, and the head comes from the
//!   direct reads' copies (`stash`). So the pass that learns a segment
//!   reads each byte once, and its load continues where the disk is
//!   (docs/liu.md, "The learning pass"). With lifted bodies on, the stash
//!   keeps whole segments and the load takes every run it covers, loads
//!   the rest (the loading read's own bytes included), so the segment is
//!   whole in DRAM at its eviction (docs/liu.md, "Whole segments").
//! * **Two readers** (`Sharing::PerFile`, the default; docs/liu.md, "Two
//!   readers"): a load of a lifted segment also loads the next one when
//!   [`SegmentBuffer::read_ahead`] says so, the workers take the files'
//!   jobs in turn (one FIFO per file) instead of first in, first out, and
//!   a file whose loads kept the capacity tier busy yields it to the other
//!   readers for part of that time (`share`, [`LiuOptions::time_share`]).
//! * **Lifting.** An evicted segment whose head is to be lifted has the
//!   head's DRAM copy written to a slot of the heads file on the fast tier
//!   (`liu-heads`, `heads_bytes / head_bytes` slots) by a worker; it is
//!   served from there only after [`SegmentBuffer::lift_done`] accepts it.
//!   A slot that a reader is using (pinned) is not reused until released.
//!   Under per-file sharing an evicted segment whose whole body is in
//!   DRAM may take the body to a slot of `liu-bodies` too, and is then
//!   loaded from the fast tier alone; the body goes with its head's
//!   de-lift (docs/liu.md, "Whole segments").
//! * **Coherence.** Writes and truncations call [`SegmentBuffer::written`]
//!   / [`SegmentBuffer::invalidate`] **before and after** the capacity
//!   write. The first call stops new readers from being served old bytes
//!   from the buffer or a head; the second drops any load that started in
//!   between (and read old bytes). A dropped segment still serves the
//!   readers already waiting on it: they started before the write ended.
//!   Lifts racing with a write are refused by `lift_done`.
//! * **Restart.** Heads are a cache keyed by cache ids that live only in
//!   this process, so the heads file is removed and recreated when the
//!   backend opens: a restart (clean or a crash) never serves a head that
//!   the capacity tier has overwritten since. The cost is re-learning the
//!   locality after a restart.
//! * **Errors.** A failed part read fails the readers waiting on it, drops
//!   the segment, and those readers retry the capacity tier directly; a
//!   failed lift is refused. Both are counted with the last error message.
//!
//! Modules: `segment` (a buffered segment's parts, the heads file's slots),
//! `stash` (heads, or whole segments, assembled from direct reads), `share` (the capacity
//! tier's time shared between files' loads), `backend` (the `Backend`
//! and `BackendFile` wrappers that every capacity access passes through).
//!
//! Lock order: `Inner::state`, then a segment's `parts`, then
//! `Inner::jobs`. No lock is held across device I/O.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::io;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Instant;

use sluice_env::{Backend, BackendFile, RelPath};
use sluice_policy::segments::{
    Action, FileCounters, Geometry, LiuConfig, LiuCounters, SegmentBuffer, SegmentKey, Serve,
    Sharing,
};
use sluice_policy::FileId;

use crate::engine::read_fully;
use crate::incidents::{Incident, Incidents};

mod backend;
mod segment;
mod share;
mod stash;

use segment::{cut_learned, parts, Bodies, Part, Segment, SlotFile, Slots};
use share::TimeShare;
use stash::Stash;

/// Name of the heads file on the fast tier.
pub const HEADS_FILE: &str = "liu-heads";

/// Name of the bodies file on the fast tier (whole-segment lifts).
pub const BODIES_FILE: &str = "liu-bodies";

/// Parameters of the LiU read path.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LiuOptions {
    /// The segment buffer's policy parameters.
    pub policy: LiuConfig,
    /// Capacity reads a segment body is loaded in, at once (default 4).
    pub body_sections: u32,
    /// Worker threads doing loads and lifts (default 16).
    pub workers: u32,
    /// Under [`Sharing::PerFile`]: a file whose loads kept the capacity
    /// tier busy yields it to each other file reading it for this many
    /// times the disk's time of those loads (`share.rs`; docs/liu.md,
    /// "The disk's time"; default 0.5); 0 is off, the paper's behaviour.
    pub time_share: f64,
    /// Fast-tier space for lifted *bodies*: a segment lifted while a
    /// slot of `body_bytes` is free has its whole body copied too, and is
    /// then loaded from the fast tier alone (docs/liu.md, "Whole
    /// segments"; sluice's, beyond the paper; default 4 GiB). 0, or
    /// [`Sharing::Paper`], lifts heads only, as the paper does.
    pub bodies_bytes: u64,
}

impl LiuOptions {
    /// Refuse options that cannot work (beyond [`SegmentBuffer::new`]'s
    /// checks of the policy); the message names the field.
    pub fn check(&self) -> Result<(), String> {
        if !(1..=64).contains(&self.body_sections) {
            return Err(format!(
                "body_sections = {}: must be 1 to 64",
                self.body_sections
            ));
        }
        if !(1..=256).contains(&self.workers) {
            return Err(format!("workers = {}: must be 1 to 256", self.workers));
        }
        if !(0.0..=8.0).contains(&self.time_share) {
            return Err(format!("time_share = {}: must be 0 to 8", self.time_share));
        }
        self.slot_count()?;
        self.body_slot_count().map(|_| ())
    }

    /// Slots of the heads file: `heads_bytes / head_bytes`.
    fn slot_count(&self) -> Result<u32, String> {
        let slots = self.policy.heads_bytes / self.policy.geometry.head_bytes();
        u32::try_from(slots).map_err(|_| {
            format!(
                "heads = {} B: {slots} head slots, at most 2^32 - 1",
                self.policy.heads_bytes
            )
        })
    }

    /// Slots of the bodies file: `bodies_bytes / body_bytes`, none under
    /// the paper's sharing.
    fn body_slot_count(&self) -> Result<u32, String> {
        if self.policy.sharing == Sharing::Paper {
            return Ok(0);
        }
        let slots = self.bodies_bytes / self.policy.geometry.body_bytes();
        u32::try_from(slots).map_err(|_| {
            format!(
                "bodies = {} B: {slots} body slots, at most 2^32 - 1",
                self.bodies_bytes
            )
        })
    }
}

impl Default for LiuOptions {
    fn default() -> Self {
        LiuOptions {
            // Sluice's default goes beyond the paper here (docs/liu.md,
            // "Two readers"); `Sharing::Paper` is the paper's algorithm.
            policy: LiuConfig {
                sharing: Sharing::PerFile,
                ..LiuConfig::default()
            },
            body_sections: 4,
            workers: 16,
            time_share: 0.5,
            bodies_bytes: 4 * 1024 * 1024 * 1024,
        }
    }
}

/// A snapshot for status displays and metrics.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LiuStatus {
    /// The policy's counters.
    pub counters: LiuCounters,
    /// Regular segments in the DRAM buffer.
    pub buffered_segments: u64,
    /// Ghost segments.
    pub ghost_segments: u64,
    /// Heads served from the fast tier.
    pub lifted_segments: u64,
    /// Bytes read from lifted heads (loads and direct reads).
    pub head_bytes_read: u64,
    /// Lifted segments whose body is on the fast tier too.
    pub lifted_bodies: u64,
    /// Bytes read from lifted bodies (loads and direct reads).
    pub body_bytes_read: u64,
    /// Bytes loads left unread because the pass that learned the segment
    /// had read them directly: heads taken from the stash, body runs left
    /// absent (a run loaded later, when a reader needs it, is not taken
    /// back; holes left absent are not counted).
    pub load_bytes_skipped: u64,
    /// Part reads and lifts that failed.
    pub errors: u64,
    /// The last of those errors.
    pub last_error: Option<String>,
    /// Times a file's capacity loads were held for other readers
    /// (docs/liu.md, "The disk's time").
    pub time_share_holds: u64,
    /// The total of those holds, in seconds.
    pub time_share_held_s: f64,
    /// Per-file counters of the busiest files, by the file's path (its
    /// first name known, or `#id` once it has none).
    pub files: Vec<(String, FileCounters)>,
}

/// The LiU read path over a capacity backend; see the module docs.
pub struct LiuBackend {
    inner: Arc<Inner>,
    workers: Vec<JoinHandle<()>>,
}

struct Inner {
    capacity: Arc<dyn Backend>,
    heads: SlotFile,
    bodies: SlotFile,
    geometry: Geometry,
    body_sections: u32,
    state: Mutex<State>,
    jobs: Mutex<Jobs>,
    job_ready: Condvar,
    /// The time share is on (`per-file` sharing, a yield above 0): off,
    /// reads and loads keep no account of it (no lock of `jobs` per read).
    time_share: bool,
}

struct State {
    buffer: SegmentBuffer,
    /// Data of the regular segments, by key.
    loaded: HashMap<SegmentKey, Arc<Segment>>,
    ids: sluice_env::PathMap<FileId>,
    next_id: u64,
    slots: Slots,
    bodies: Bodies,
    body_bytes_read: u64,
    /// Heads (or whole segments) of ghosts, from their direct reads.
    stash: Stash,
    head_bytes_read: u64,
    load_bytes_skipped: u64,
    errors: u64,
    last_error: Option<String>,
    /// `last_errors` of the LiU read path: failed loads, lifts and head
    /// reads (each served from the capacity tier instead).
    incidents: Arc<Incidents>,
}

#[derive(Default)]
struct Jobs {
    queue: JobQueue,
    /// Which files' capacity loads may start now.
    share: TimeShare,
    shutdown: bool,
}

/// The workers' queue: first in, first out ([`Sharing::Paper`]), or one
/// queue per file taken in turn ([`Sharing::PerFile`]), so one reader's
/// burst of loads does not hold back another's next segment behind it
/// (docs/liu.md, "Two readers").
#[derive(Default)]
struct JobQueue {
    per_file: bool,
    /// Files with jobs, in the order they are served; each file's jobs in
    /// the order they came. With `per_file` off, one queue under file 0.
    files: VecDeque<(FileId, VecDeque<Job>)>,
}

impl JobQueue {
    fn push(&mut self, job: Job) {
        let file = if self.per_file { job.file() } else { FileId(0) };
        match self.files.iter_mut().find(|(f, _)| *f == file) {
            Some((_, jobs)) => jobs.push_back(job),
            None => self.files.push_back((file, VecDeque::from([job]))),
        }
    }

    /// The next job that `may_start`: the first of the first file in
    /// turn order whose first job may; that file then goes to the back of
    /// the turn order.
    fn pop(&mut self, may_start: impl Fn(&Job) -> bool) -> Option<Job> {
        let at = self
            .files
            .iter()
            .position(|(_, jobs)| jobs.front().is_some_and(&may_start))?;
        let (file, mut jobs) = self.files.remove(at)?;
        let job = jobs.pop_front();
        if !jobs.is_empty() {
            self.files.push_back((file, jobs));
        }
        job
    }

    fn is_empty(&self) -> bool {
        self.files.is_empty()
    }
}

enum Job {
    /// Read part `part` of `segment` from `source`.
    Part {
        segment: Arc<Segment>,
        part: usize,
        source: Source,
    },
    /// Copy `bytes` (a head) to `slot` of the heads file, and the body
    /// of the evicted segment, if any, to its slot of the bodies file.
    Lift {
        key: SegmentKey,
        slot: u32,
        bytes: Arc<[u8]>,
        body: Option<BodyCopy>,
    },
    /// Copy the body of evicted segment `key`, whose head is lifted.
    Body { key: SegmentKey, copy: BodyCopy },
}

impl Job {
    fn file(&self) -> FileId {
        match self {
            Job::Part { segment, .. } => segment.key.file,
            Job::Lift { key, .. } | Job::Body { key, .. } => key.file,
        }
    }

    /// Whether it reads the capacity tier.
    fn reads_capacity(&self) -> bool {
        match self {
            Job::Part { source, .. } => matches!(source, Source::Capacity(_)),
            Job::Lift { .. } | Job::Body { .. } => false,
        }
    }
}

/// The copy of an evicted segment's body to `slot` of the bodies file
/// (docs/liu.md, "Whole segments").
struct BodyCopy {
    slot: u32,
    /// The body's parts, in order ([`Segment::ready_body`]).
    parts: Vec<Arc<[u8]>>,
}

impl BodyCopy {
    /// A slot for the body of the evicted `segment` (`key`), if one is
    /// free, it has a body not lifted yet, and every part of that body is
    /// in DRAM: a lift reads nothing from the capacity tier (copies that
    /// read the parts the learning pass left absent took the other
    /// readers' disk time; docs/liu.md, "Whole segments").
    fn take(state: &mut State, key: SegmentKey, segment: &Segment) -> Option<BodyCopy> {
        let parts = segment.ready_body()?;
        let slot = state.bodies.take(key)?;
        Some(BodyCopy { slot, parts })
    }
}

enum Source {
    /// The lifted head in this slot of the heads file.
    Head(u32),
    /// The lifted body in this slot of the bodies file.
    Body(u32),
    /// The capacity file, from the segment's start.
    Capacity(Arc<dyn BackendFile>),
}

use sluice_env::lock;

fn invalid(e: impl fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, format!("liu: {e}"))
}

impl LiuBackend {
    /// The LiU read path over `capacity`, with lifted heads in
    /// `fast/liu-heads` (removed and recreated: see "Restart" in the module
    /// docs).
    pub fn new(
        capacity: Arc<dyn Backend>,
        fast: &Arc<dyn Backend>,
        options: LiuOptions,
    ) -> io::Result<LiuBackend> {
        options.check().map_err(invalid)?;
        let slot_count = options.slot_count().map_err(invalid)?;
        let body_slots = options.body_slot_count().map_err(invalid)?;
        let buffer = SegmentBuffer::new(options.policy).map_err(invalid)?;
        // A quarter of the buffer's segment count in heads (at least 4):
        // about a twentieth of the buffer's bytes more in DRAM. With lifted
        // bodies it keeps whole segments, as many as the buffer holds (every
        // rank of a reader may be learning a segment of its own): at most
        // the buffer's bytes again.
        let entries = match body_slots {
            0 => buffer.capacity_segments() / 4,
            _ => buffer.capacity_segments(),
        };
        let stash = Stash::new(entries.max(4) as usize);
        let geometry = options.policy.geometry;
        let heads = SlotFile::create(fast.as_ref(), HEADS_FILE, slot_count, geometry.head_bytes())?;
        let bodies = SlotFile::create(
            fast.as_ref(),
            BODIES_FILE,
            body_slots,
            geometry.body_bytes(),
        )?;
        let incidents = Arc::new(Incidents::new(fast.describe(), capacity.describe()));
        let time_share = options.policy.sharing == Sharing::PerFile && options.time_share > 0.0;
        let inner = Arc::new(Inner {
            capacity,
            heads,
            bodies,
            geometry,
            body_sections: options.body_sections,
            state: Mutex::new(State {
                buffer,
                loaded: HashMap::new(),
                ids: Default::default(),
                next_id: 1,
                slots: Slots::new(slot_count),
                bodies: Bodies::new(body_slots),
                body_bytes_read: 0,
                stash,
                head_bytes_read: 0,
                load_bytes_skipped: 0,
                errors: 0,
                last_error: None,
                incidents,
            }),
            jobs: Mutex::new(Jobs {
                queue: JobQueue {
                    per_file: options.policy.sharing == Sharing::PerFile,
                    ..JobQueue::default()
                },
                share: TimeShare::new(if time_share { options.time_share } else { 0.0 }),
                shutdown: false,
            }),
            job_ready: Condvar::new(),
            time_share,
        });
        let mut workers = Vec::new();
        for n in 0..options.workers {
            let shared = Arc::clone(&inner);
            let spawned = std::thread::Builder::new()
                .name(format!("sluice-liu-{n}"))
                .spawn(move || worker(&shared));
            match spawned {
                Ok(handle) => workers.push(handle),
                Err(e) => {
                    let backend = LiuBackend { inner, workers };
                    drop(backend);
                    return Err(e);
                }
            }
        }
        Ok(LiuBackend { inner, workers })
    }

    /// The ring of LiU's newest failures (`last_errors`).
    pub fn incidents(&self) -> Arc<Incidents> {
        Arc::clone(&lock(&self.inner.state).incidents)
    }

    /// Bytes the heads and bodies files may still take from the fast
    /// tier: their slots fill lowest first, and each file grows with them
    /// up to `heads_bytes` / `bodies_bytes` (rounded down to whole
    /// slots); zero once full.
    pub fn slots_growth(&self) -> u64 {
        self.inner.heads.growth() + self.inner.bodies.growth()
    }

    /// A snapshot for status displays and metrics.
    pub fn status(&self) -> LiuStatus {
        let (time_share_holds, time_share_held_s) = {
            let jobs = lock(&self.inner.jobs);
            (jobs.share.holds, jobs.share.held.as_secs_f64())
        };
        let state = lock(&self.inner.state);
        LiuStatus {
            time_share_holds,
            time_share_held_s,
            counters: *state.buffer.counters(),
            buffered_segments: state.buffer.regular_count(),
            ghost_segments: state.buffer.ghost_count(),
            lifted_segments: state.buffer.lifted_count(),
            head_bytes_read: state.head_bytes_read,
            lifted_bodies: state.bodies.count(),
            body_bytes_read: state.body_bytes_read,
            load_bytes_skipped: state.load_bytes_skipped,
            errors: state.errors,
            last_error: state.last_error.clone(),
            files: state
                .buffer
                .file_counters()
                .map(|(id, c)| {
                    let name = state
                        .ids
                        .iter()
                        .filter(|(_, i)| **i == id)
                        .map(|(p, _)| p.to_string())
                        .min()
                        .unwrap_or_else(|| format!("#{}", id.0));
                    (name, *c)
                })
                .collect(),
        }
    }
}

impl Drop for LiuBackend {
    fn drop(&mut self) {
        lock(&self.inner.jobs).shutdown = true;
        self.inner.job_ready.notify_all();
        for worker in self.workers.drain(..) {
            // A worker panic is a bug already reported on stderr.
            let _ = worker.join();
        }
    }
}

impl fmt::Debug for LiuBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LiuBackend")
            .field("capacity", &self.inner.capacity.describe())
            .field("geometry", &self.inner.geometry)
            .finish()
    }
}

fn worker(inner: &Inner) {
    loop {
        let job = {
            let mut jobs = lock(&inner.jobs);
            loop {
                let now = Instant::now();
                let Jobs { queue, share, .. } = &mut *jobs;
                let job =
                    queue.pop(|job| !job.reads_capacity() || share.may_start(job.file(), now));
                if let Some(job) = job {
                    if job.reads_capacity() {
                        share.started(job.file());
                    }
                    break job;
                }
                if jobs.shutdown {
                    return;
                }
                // Jobs held by the time share wait for the earliest release
                // (or a change: a part ending, new jobs).
                let release = (!jobs.queue.is_empty())
                    .then(|| jobs.share.next_release(now))
                    .flatten();
                jobs = match release {
                    Some(at) => {
                        inner
                            .job_ready
                            .wait_timeout(jobs, at.saturating_duration_since(now))
                            .unwrap_or_else(PoisonError::into_inner)
                            .0
                    }
                    None => inner
                        .job_ready
                        .wait(jobs)
                        .unwrap_or_else(PoisonError::into_inner),
                };
            }
        };
        match job {
            Job::Part {
                segment,
                part,
                source,
            } => {
                let file = segment.key.file;
                let capacity = matches!(source, Source::Capacity(_));
                let started = Instant::now();
                inner.load_part(&segment, part, source);
                if capacity && inner.time_share {
                    let (now, bytes) = (Instant::now(), segment.parts[part].1);
                    lock(&inner.jobs)
                        .share
                        .finished(file, now, bytes, now - started);
                    // A held file's jobs may start once the others stop.
                    inner.job_ready.notify_all();
                }
            }
            Job::Lift {
                key,
                slot,
                bytes,
                body,
            } => inner.lift(key, slot, &bytes, body),
            Job::Body { key, copy } => {
                let copied = inner.lift_body(&copy);
                let mut state = lock(&inner.state);
                // Kept only while the head is still lifted.
                let keep = copied && state.buffer.is_lifted(key);
                state.bodies.landed(key, copy.slot, keep);
            }
        }
    }
}

impl State {
    /// Count a failure of `op` on `tier`, keep its message and record it
    /// as an incident (logged).
    fn record_error(&mut self, op: &str, tier: &str, e: &io::Error, message: String) {
        self.errors += 1;
        self.incidents.record(Incident {
            at: std::time::SystemTime::now(),
            op: op.to_string(),
            path: None,
            tier: Some(tier.to_string()),
            errno: Some(sluice_env::errno::errno_of(e)),
            message: message.clone(),
        });
        self.last_error = Some(message);
    }
}

impl Inner {
    /// Change the state with `f` under its lock; `f` may queue jobs. The
    /// policy's queued actions then run under the same hold
    /// ([`run_actions`]: lifts of evicted segments' heads, freed slots),
    /// and every job is queued once the lock is let go.
    fn update<R>(&self, f: impl FnOnce(&mut State, &mut Vec<Job>) -> R) -> R {
        let mut jobs = Vec::new();
        let result = {
            let mut state = lock(&self.state);
            let result = f(&mut state, &mut jobs);
            jobs.extend(run_actions(&mut state));
            result
        };
        self.submit(jobs);
        result
    }

    /// Queue `jobs` (parts to load, lifts) for the loader threads.
    fn submit(&self, jobs: Vec<Job>) {
        if jobs.is_empty() {
            return;
        }
        let mut queue = lock(&self.jobs);
        if queue.shutdown {
            // Nobody will run them: fail the parts so their readers go to
            // the capacity tier, refuse the lifts.
            drop(queue);
            for job in jobs {
                match job {
                    Job::Part { segment, part, .. } => segment.set(
                        part,
                        Part::Failed(io::ErrorKind::Other, "liu: shutting down".into()),
                    ),
                    Job::Lift { key, body, .. } => {
                        self.lift_finished(key, false, body.map(|copy| (copy.slot, false)))
                    }
                    Job::Body { key, copy } => {
                        lock(&self.state).bodies.landed(key, copy.slot, false)
                    }
                }
            }
            return;
        }
        for job in jobs {
            queue.queue.push(job);
        }
        drop(queue);
        self.job_ready.notify_all();
    }

    fn load_part(&self, segment: &Segment, part: usize, source: Source) {
        let (offset, len) = segment.parts[part];
        let mut bytes = vec![0u8; len as usize];
        let head = self.geometry.head_bytes();
        let result = match &source {
            Source::Head(slot) => self.heads.read(*slot, offset, &mut bytes),
            Source::Body(slot) => self.bodies.read(*slot, offset - head, &mut bytes),
            Source::Capacity(file) => read_fully(file.as_ref(), &mut bytes, segment.start + offset),
        };
        self.update(|state, _| {
            match source {
                Source::Head(slot) => {
                    state.slots.unpin(slot);
                    if result.is_ok() {
                        state.head_bytes_read += len;
                    }
                }
                Source::Body(slot) => {
                    state.bodies.slots.unpin(slot);
                    match &result {
                        Ok(()) => state.body_bytes_read += len,
                        // Not served again: the capacity tier has it.
                        Err(_) => state.bodies.release(segment.key),
                    }
                }
                Source::Capacity(_) => {}
            }
            if let Err(e) = &result {
                let (what, tier) = match source {
                    Source::Head(_) => ("fast tier (lifted head)", "fast"),
                    Source::Body(_) => ("fast tier (lifted body)", "fast"),
                    Source::Capacity(_) => ("capacity tier", "capacity"),
                };
                state.record_error(
                    "liu-load",
                    tier,
                    e,
                    format!("liu: load from the {what}: {e}"),
                );
                // The segment is dropped so the next access reloads it.
                drop_if_current(state, segment);
            }
        });
        match result {
            Ok(()) => segment.set(part, Part::Ready(bytes.into())),
            Err(e) => segment.set(part, Part::Failed(e.kind(), e.to_string())),
        }
    }

    /// A lift job: the head, then the body if a slot was taken for it.
    fn lift(&self, key: SegmentKey, slot: u32, bytes: &[u8], body: Option<BodyCopy>) {
        let result = self.heads.write(slot, &[bytes]);
        if let Err(e) = &result {
            lock(&self.state).record_error(
                "liu-lift",
                "fast",
                e,
                format!("liu: lift a head to the fast tier: {e}"),
            );
        }
        let body = body.map(|copy| (copy.slot, result.is_ok() && self.lift_body(&copy)));
        self.lift_finished(key, result.is_ok(), body);
    }

    /// Copy a body to its slot: whether it landed. A full fast tier is
    /// no error: the segment keeps its head lifted alone.
    fn lift_body(&self, copy: &BodyCopy) -> bool {
        let parts: Vec<&[u8]> = copy.parts.iter().map(|p| &p[..]).collect();
        match self.bodies.write(copy.slot, &parts) {
            Ok(()) => true,
            Err(e) if sluice_env::no_room(&e) => {
                tracing::debug!(error = %e, "liu: no room for a lifted body");
                false
            }
            Err(e) => {
                lock(&self.state).record_error(
                    "liu-lift",
                    "fast",
                    &e,
                    format!("liu: lift a body to the fast tier: {e}"),
                );
                false
            }
        }
    }

    /// A lift ended: the head is served from its slot if `copied` and the
    /// policy still wants it; the body, `(slot, copied)`, only with it.
    fn lift_finished(&self, key: SegmentKey, copied: bool, body: Option<(u32, bool)>) {
        let mut state = lock(&self.state);
        let lifted = state.buffer.lift_done(key, copied);
        if !lifted {
            state.slots.release(key);
        }
        if let Some((slot, copied)) = body {
            state.bodies.landed(key, slot, copied && lifted);
        }
    }

    /// Bytes of a ghost segment of `segment_len` bytes that its direct
    /// reads keep in the stash: the head, or with lifted bodies on, the
    /// whole segment (a lifted body must be whole in DRAM).
    fn stash_len(&self, segment_len: u64) -> u64 {
        if self.bodies.slots() > 0 {
            segment_len
        } else {
            self.geometry.head_bytes().min(segment_len)
        }
    }

    /// Create segment `key` (`segment_len` bytes) in the buffer and queue
    /// the loads of its pending parts on `jobs` (see [`cut_learned`]): the
    /// head from the fast tier with `head_from_fast`.
    fn start_load(
        &self,
        state: &mut State,
        key: SegmentKey,
        segment_len: u64,
        head_from_fast: bool,
        file: &Arc<dyn BackendFile>,
        jobs: &mut Vec<Job>,
    ) -> Arc<Segment> {
        let segment_start = self.geometry.start(key.index);
        let slot = if head_from_fast {
            state.slots.of.get(&key).copied()
        } else {
            None
        };
        let body_slot = state.bodies.ready(key);
        let (cut, mut initial, skipped) = cut_learned(
            &state.buffer,
            key,
            parts(self.geometry, segment_len, self.body_sections),
        );
        // What direct reads assembled is not read again: the head, and
        // with lifted bodies the runs the learning pass read, so that the
        // segment is whole in DRAM when it is evicted (its body lifted).
        let whole = self.bodies.slots() > 0;
        let stashed = state.stash.take(key, self.stash_len(segment_len), &cut);
        let mut from_stash = 0;
        for (n, bytes) in stashed.into_iter().enumerate() {
            let Some(bytes) = bytes else { continue };
            let wanted = match initial[n] {
                Part::Pending => n > 0 || slot.is_none(),
                Part::Absent => whole,
                _ => false,
            };
            if wanted {
                from_stash += cut[n].1;
                initial[n] = Part::Ready(bytes);
            }
        }
        state.load_bytes_skipped += if whole {
            // What the stash missed (reads still in flight when the load
            // came, holes not read yet) is loaded now: the segment must be
            // whole at its eviction for its body to go.
            for part in initial.iter_mut() {
                if matches!(part, Part::Absent) {
                    *part = Part::Pending;
                }
            }
            from_stash
        } else {
            skipped + from_stash
        };
        let segment = Arc::new(Segment {
            key,
            start: segment_start,
            len: segment_len,
            state: Mutex::new(initial),
            parts: cut,
            arrived: Condvar::new(),
        });
        for (part, initial) in lock(&segment.state).iter().enumerate() {
            if !matches!(initial, Part::Pending) {
                continue;
            }
            let source = match (slot, body_slot) {
                (Some(slot), _) if part == 0 => {
                    state.slots.pin(slot);
                    Source::Head(slot)
                }
                (_, Some(body)) if part > 0 => {
                    state.bodies.slots.pin(body);
                    Source::Body(body)
                }
                _ => Source::Capacity(Arc::clone(file)),
            };
            jobs.push(Job::Part {
                segment: Arc::clone(&segment),
                part,
                source,
            });
        }
        state.loaded.insert(key, Arc::clone(&segment));
        segment
    }

    /// After loading `key`: load the next segment too if the policy says so
    /// ([`SegmentBuffer::read_ahead`]; the file is `file_len` bytes).
    fn read_ahead(
        &self,
        state: &mut State,
        key: SegmentKey,
        file_len: u64,
        file: &Arc<dyn BackendFile>,
        jobs: &mut Vec<Job>,
    ) {
        let Some(next) = state.buffer.read_ahead(key) else {
            return;
        };
        let len = file_len
            .saturating_sub(self.geometry.start(next.index))
            .min(self.geometry.segment_bytes());
        if len == 0 {
            return;
        }
        if let Serve::Load { head_from_fast } = state.buffer.access(next, 0, 0, len) {
            self.start_load(state, next, len, head_from_fast, file, jobs);
        }
    }

    /// Read `out` from `file` at `offset` on the capacity tier, for a
    /// reader of `id`: the time share counts it as `id` reading the tier.
    fn read_direct(
        &self,
        id: FileId,
        file: &Arc<dyn BackendFile>,
        out: &mut [u8],
        offset: u64,
    ) -> io::Result<()> {
        if !self.time_share {
            return read_fully(file.as_ref(), out, offset);
        }
        lock(&self.jobs).share.direct_started(id);
        let result = read_fully(file.as_ref(), out, offset);
        lock(&self.jobs).share.direct_ended(id, Instant::now());
        result
    }

    /// Serve `out` = bytes `[slice_start, slice_start + out.len())` of
    /// segment `index` of `file`, of which `segment_len` bytes exist (the
    /// file is `file_len` bytes).
    #[allow(clippy::too_many_arguments)]
    fn read_piece(
        &self,
        id: FileId,
        file: &Arc<dyn BackendFile>,
        index: u64,
        slice_start: u64,
        segment_len: u64,
        file_len: u64,
        out: &mut [u8],
    ) -> io::Result<()> {
        let key = SegmentKey { file: id, index };
        let segment_start = self.geometry.start(index);
        let len = out.len() as u64;
        let plan = self.update(|state, jobs| {
            let plan = match state.buffer.access(key, slice_start, len, segment_len) {
                Serve::Buffer => match state.loaded.get(&key) {
                    Some(segment) if segment.len >= slice_start + len => {
                        Plan::Wait(Arc::clone(segment))
                    }
                    // The data does not match (a bug, or a file grown without a
                    // write through this backend): the capacity tier is right.
                    _ => Plan::Capacity,
                },
                Serve::Load { head_from_fast } => {
                    let segment =
                        self.start_load(state, key, segment_len, head_from_fast, file, jobs);
                    if head_from_fast {
                        self.read_ahead(state, key, file_len, file, jobs);
                    }
                    if segment.absent(slice_start, slice_start + len) {
                        // This reader's bytes were requested (by this read):
                        // read directly, as while the segment was a ghost;
                        // the buffer loads them when a later reader needs
                        // them. (With lifted bodies nothing is left absent:
                        // `start_load`.)
                        Plan::Capacity
                    } else {
                        Plan::Wait(segment)
                    }
                }
                Serve::Direct { from_head: true } => match state.slots.of.get(&key).copied() {
                    Some(slot) => {
                        state.slots.pin(slot);
                        Plan::Head(slot)
                    }
                    None => Plan::Capacity,
                },
                Serve::Direct { from_head: false } => match state.bodies.ready(key) {
                    // Past the head, of a segment whose body is lifted too.
                    Some(slot) if slice_start >= self.geometry.head_bytes() => {
                        state.bodies.slots.pin(slot);
                        Plan::Body(slot)
                    }
                    // A ghost's head (and body, with lifted bodies), read
                    // directly: kept in the stash.
                    _ if slice_start < self.stash_len(segment_len) => {
                        Plan::Stash(state.stash.epoch())
                    }
                    _ => Plan::Capacity,
                },
            };
            if let Plan::Wait(segment) = &plan {
                let body = state.bodies.ready(key);
                for part in segment.claim(slice_start, slice_start + len) {
                    let source = match body {
                        Some(slot) if part > 0 => {
                            state.bodies.slots.pin(slot);
                            Source::Body(slot)
                        }
                        _ => Source::Capacity(Arc::clone(file)),
                    };
                    jobs.push(Job::Part {
                        segment: Arc::clone(segment),
                        part,
                        source,
                    });
                }
            }
            plan
        });
        match plan {
            Plan::Wait(segment) => {
                if segment.copy(slice_start, out).is_ok() {
                    return Ok(());
                }
                // The part failed (counted by the loader): the capacity tier
                // answers instead.
                self.read_direct(id, file, out, segment_start + slice_start)
            }
            Plan::Body(slot) => {
                let head = self.geometry.head_bytes();
                let result = self.bodies.read(slot, slice_start - head, out);
                let mut state = lock(&self.state);
                state.bodies.slots.unpin(slot);
                match result {
                    Ok(()) => {
                        state.body_bytes_read += len;
                        Ok(())
                    }
                    Err(e) => {
                        state.bodies.release(key);
                        state.record_error(
                            "liu-read-body",
                            "fast",
                            &e,
                            format!("liu: read a lifted body: {e}"),
                        );
                        drop(state);
                        self.read_direct(id, file, out, segment_start + slice_start)
                    }
                }
            }
            Plan::Head(slot) => {
                let result = self.heads.read(slot, slice_start, out);
                let mut state = lock(&self.state);
                state.slots.unpin(slot);
                match result {
                    Ok(()) => {
                        state.head_bytes_read += len;
                        Ok(())
                    }
                    Err(e) => {
                        state.record_error(
                            "liu-read-head",
                            "fast",
                            &e,
                            format!("liu: read a lifted head: {e}"),
                        );
                        drop(state);
                        self.read_direct(id, file, out, segment_start + slice_start)
                    }
                }
            }
            Plan::Stash(epoch) => {
                self.read_direct(id, file, out, segment_start + slice_start)?;
                lock(&self.state).stash.store(
                    key,
                    self.stash_len(segment_len),
                    slice_start,
                    out,
                    epoch,
                );
                Ok(())
            }
            Plan::Capacity => self.read_direct(id, file, out, segment_start + slice_start),
        }
    }

    /// Bytes `[start, end)` of `id` were (or are about to be) written on
    /// the capacity tier, the file `old_len` bytes long before and
    /// `file_len` after. A write past the end also changes
    /// `[old_len, start)`: those bytes now exist, as zeros (a segment cached
    /// or lifted while shorter must not serve them).
    fn written(&self, id: FileId, old_len: u64, start: u64, end: u64, file_len: u64) {
        self.update(|state, _| {
            state.stash.changed(id);
            if old_len < start {
                let dropped = state.buffer.invalidate(id, old_len, start);
                forget_segments(state, &dropped);
            }
            for slice in self.geometry.split(start, end.saturating_sub(start)) {
                let segment_start = self.geometry.start(slice.index);
                let from = segment_start + slice.start;
                let segment_len = file_len
                    .saturating_sub(segment_start)
                    .min(self.geometry.segment_bytes());
                let dropped = state
                    .buffer
                    .written(id, from, from + slice.len, segment_len);
                forget_segments(state, &dropped);
            }
        });
    }

    /// Bytes from `start` on of `id` changed (a truncation).
    fn invalidate_from(&self, id: FileId, start: u64) {
        self.update(|state, _| {
            state.stash.changed(id);
            let dropped = state.buffer.invalidate(id, start, u64::MAX);
            forget_segments(state, &dropped);
        });
    }

    /// Forget `path`'s cache id and everything cached for it.
    fn forget_path(&self, path: &RelPath) {
        self.update(|state, _| {
            if let Some(id) = state.ids.remove(path) {
                state.stash.changed(id);
                let dropped = state.buffer.forget_file(id);
                forget_segments(state, &dropped);
            }
        });
    }
}

enum Plan {
    Wait(Arc<Segment>),
    Head(u32),
    /// Read the lifted body in this slot of the bodies file.
    Body(u32),
    /// Read the capacity tier and keep what falls in the head, read under
    /// this stash epoch.
    Stash(u64),
    Capacity,
}

fn forget_segments(state: &mut State, keys: &[SegmentKey]) {
    for key in keys {
        state.loaded.remove(key);
    }
}

/// Drop `segment` from the buffer if it is still the loaded copy of its
/// key (its load failed).
fn drop_if_current(state: &mut State, segment: &Segment) {
    let current = state
        .loaded
        .get(&segment.key)
        .is_some_and(|s| std::ptr::eq(Arc::as_ptr(s), segment));
    if current {
        let end = segment.start + 1;
        let dropped = state
            .buffer
            .invalidate(segment.key.file, segment.start, end);
        forget_segments(state, &dropped);
    }
}

/// Do the policy's queued actions: free evicted data (starting lifts from
/// it), free de-lifted slots. Returns the lift jobs.
fn run_actions(state: &mut State) -> Vec<Job> {
    let mut jobs = Vec::new();
    while let Some(action) = state.buffer.poll_action() {
        match action {
            Action::Evict { key, lift, .. } => {
                let segment = state.loaded.remove(&key);
                if !lift {
                    // A lifted segment evicted whole, its body not lifted
                    // with its head (parts of it were not loaded then):
                    // the body joins the head if a slot is free.
                    if state.buffer.is_lifted(key) {
                        if let Some(copy) = segment
                            .as_ref()
                            .and_then(|segment| BodyCopy::take(state, key, segment))
                        {
                            jobs.push(Job::Body { key, copy });
                        }
                    }
                    continue;
                }
                let head = segment.as_ref().and_then(|s| s.ready_head());
                let slot = head.as_ref().and_then(|_| state.slots.take(key));
                match (head, slot) {
                    (Some(bytes), Some(slot)) => {
                        // The whole body too, if it is all here and a slot
                        // is free (docs/liu.md, "Whole segments").
                        let body = segment
                            .as_ref()
                            .and_then(|segment| BodyCopy::take(state, key, segment));
                        jobs.push(Job::Lift {
                            key,
                            slot,
                            bytes,
                            body,
                        })
                    }
                    // The head was still loading, or every free slot is
                    // being read: no lift this time.
                    _ => {
                        state.buffer.lift_done(key, false);
                    }
                }
            }
            Action::DeLift { key } => {
                state.slots.release(key);
                state.bodies.release(key);
            }
        }
    }
    jobs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_are_the_head_then_the_body_sections_cut_at_the_end() {
        let g = Geometry::new(4, 12).unwrap();
        assert_eq!(
            parts(g, 16, 4),
            vec![(0, 4), (4, 3), (7, 3), (10, 3), (13, 3)]
        );
        assert_eq!(parts(g, 9, 4), vec![(0, 4), (4, 3), (7, 2)]);
        assert_eq!(parts(g, 3, 4), vec![(0, 3)]);
    }

    /// A lift of segment `index` of file `file` (no bytes).
    fn lift(file: u64, index: u64) -> Job {
        Job::Lift {
            key: SegmentKey {
                file: FileId(file),
                index,
            },
            slot: 0,
            bytes: Arc::from(&[][..]),
            body: None,
        }
    }

    #[test]
    fn per_file_jobs_are_taken_in_turn_and_in_order_within_a_file() {
        let order = |per_file| {
            let mut q = JobQueue {
                per_file,
                ..JobQueue::default()
            };
            // One reader's burst of four, then another's one job.
            for index in 0..4 {
                q.push(lift(2, index));
            }
            q.push(lift(1, 0));
            q.push(lift(2, 4));
            std::iter::from_fn(|| q.pop(|_| true))
                .map(|job| match job {
                    Job::Lift { key, .. } => (key.file.0, key.index),
                    Job::Part { .. } | Job::Body { .. } => unreachable!(),
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(
            order(false),
            vec![(2, 0), (2, 1), (2, 2), (2, 3), (1, 0), (2, 4)],
            "first in, first out"
        );
        assert_eq!(
            order(true),
            vec![(2, 0), (1, 0), (2, 1), (2, 2), (2, 3), (2, 4)],
            "the other file's job goes second, not fifth"
        );
    }

    #[test]
    fn a_held_file_is_passed_over_and_keeps_its_turn() {
        let mut q = JobQueue {
            per_file: true,
            ..JobQueue::default()
        };
        q.push(lift(2, 0));
        q.push(lift(2, 1));
        q.push(lift(1, 0));
        let key = |job: Option<Job>| match job {
            Some(Job::Lift { key, .. }) => Some((key.file.0, key.index)),
            _ => None,
        };
        let not_two = |job: &Job| job.file() != FileId(2);
        assert_eq!(key(q.pop(not_two)), Some((1, 0)));
        assert_eq!(key(q.pop(not_two)), None, "only held jobs are left");
        assert_eq!(key(q.pop(|_| true)), Some((2, 0)));
        assert_eq!(key(q.pop(|_| true)), Some((2, 1)));
        assert!(q.is_empty());
    }

    #[test]
    fn a_pinned_slot_is_reused_only_once_unpinned() {
        let key = |index| SegmentKey {
            file: FileId(1),
            index,
        };
        let mut slots = Slots {
            free: vec![0],
            pins: vec![0],
            ..Slots::default()
        };
        let slot = slots.take(key(0)).unwrap();
        slots.pin(slot);
        slots.release(key(0));
        assert_eq!(slots.take(key(1)), None, "pinned: not free yet");
        slots.unpin(slot);
        assert_eq!(slots.take(key(1)), Some(slot));
    }
}
