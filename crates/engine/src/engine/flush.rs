//! The flusher thread: polls the write buffer, flushes every full region
//! together (runs merged across them per file, several writes in flight in
//! file order through writeback.rs, each run looked up again under the
//! lock), syncs the files, resets the regions.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_env::{wait_while, with_context, BackendFile, SetAttr, TimeSet};
use sluice_policy::write_buffer::{FlushRunRef, FlushSet, FlushStart};
use sluice_policy::{FileId, RegionId};

use super::append::appends_in_flight_below;
use super::files::forget_if_unused;
use super::holds::{Busy, Hold, OwnWrite};
use super::read::{locate, Located};
use super::writeback::{copy_stretches, in_order, write_copied, StretchError, Turn};
use super::{ahead, cache, Shared, State};
use crate::log::RegionFile;

/// One region flush step's outcome.
pub(super) enum Step {
    /// Nothing to do now; wait this long or until notified.
    Idle(Duration),
    /// Stop the thread.
    Shutdown,
}

/// The first wait after a failed flush; each further failure doubles it,
/// up to [`FLUSH_BACKOFF_MAX`].
pub(super) const FLUSH_BACKOFF_MIN: Duration = Duration::from_millis(50);
/// The longest wait between two attempts of a failing flush.
const FLUSH_BACKOFF_MAX: Duration = Duration::from_secs(5);
/// Names owed a directory sync kept before the flusher syncs them all
/// (a journal commit of the capacity file system, which stalls its
/// creates meanwhile: at 8,192, mdtest-easy's create phase lost ~15 %).
const UNSYNCED_NAMES_MAX: usize = 65536;

pub(super) fn flusher_loop(shared: &Shared) {
    loop {
        // Names no fsync made durable are kept until a clean stop: past a
        // bound (mdtest's millions of creates), their directories are
        // synced now, which settles them and keeps the set small.
        if sluice_env::lock(&shared.state).unsynced_names.len() > UNSYNCED_NAMES_MAX {
            super::sync_unsynced_names(shared);
        }
        let mut polled = flush_regions(shared);
        // No region to flush now: while the capacity tier is idle, write a
        // file's bytes back instead (close-to-open; sync.rs).
        if let (Ok(Some(Step::Idle(_))), Some(idle)) = (&polled, shared.config.write_back_idle) {
            match super::sync::write_back_idle(shared, idle) {
                Ok(true) => polled = Ok(None),
                Ok(false) => {}
                Err(e) => polled = Err(e),
            }
        }
        match polled {
            Ok(Some(step)) => {
                let state = sluice_env::lock(&shared.state);
                match step {
                    Step::Shutdown => return,
                    Step::Idle(d) => {
                        let _ = shared.changed.wait_timeout(state, d);
                    }
                }
            }
            Ok(None) => sluice_env::lock(&shared.state).flush_backoff = FLUSH_BACKOFF_MIN,
            Err(e) => {
                // A write refused or failed because the tier went away or
                // turned read-only: the flusher stops until it is back.
                super::health::note_health(shared);
                let mut state = sluice_env::lock(&shared.state);
                if state.shutdown && e.kind() == io::ErrorKind::Interrupted {
                    // Stopped on purpose by `close`: not a failure.
                    return;
                }
                state.stats.flush_errors += 1;
                state.stats.last_flush_error = Some(e.to_string());
                shared.incidents.record_error("flush", None, None, &e);
                shared.changed.notify_all();
                let backoff = state.flush_backoff;
                state.flush_backoff = (backoff * 2).min(FLUSH_BACKOFF_MAX);
                state.flush_retry_now = false;
                // Sit the whole backoff out: a writer waiting for room
                // notifies whenever it wakes, and this notification wakes
                // it, so waking on any notification retried a failing
                // flush in a tight loop (issue 19). Only a drain asking
                // for a retry (`flush_retry_now`) or shutdown ends it early.
                let until = Instant::now() + backoff;
                loop {
                    if state.shutdown {
                        return;
                    }
                    let now = Instant::now();
                    if state.flush_retry_now || now >= until {
                        break;
                    }
                    state = sluice_env::wait_for(&shared.changed, state, until - now);
                }
            }
        }
    }
}

/// Flush as a drain does until `done` holds: the gate lets the flusher go
/// whatever the traffic, a failing flush is retried at once from the
/// shortest backoff (an operator or a writer is waiting, so the cause is
/// reported in about a second), and the filling region is closed whenever
/// nothing else is pending, so everything buffered flushes in merged
/// passes. Fails, saying `what`, after five more flush errors, or once
/// `deadline` has passed.
pub(super) fn flush_until(
    shared: &Shared,
    what: &str,
    deadline: Option<Duration>,
    mut done: impl FnMut(&State) -> bool,
) -> io::Result<()> {
    let started = Instant::now();
    let mut state = sluice_env::lock(&shared.state);
    state.draining += 1;
    state.buffer.set_draining(true);
    state.flush_backoff = FLUSH_BACKOFF_MIN;
    state.flush_retry_now = true;
    state.buffer.seal();
    shared.changed.notify_all();
    let errors_at_start = state.stats.flush_errors;
    let last_error = |state: &State| state.stats.last_flush_error.clone().unwrap_or_default();
    let result = loop {
        if done(&state) {
            break Ok(());
        }
        // Nothing is flushed while the capacity tier is lost or read-only:
        // say so now, with where the bytes are, rather than wait.
        if let Some(refused) = super::health::flush_refusal(shared, &state, what) {
            break Err(refused);
        }
        // The flusher has stopped (a close under way): nothing more will
        // be flushed, so say so rather than wait out the deadline.
        if state.shutdown {
            break Err(io::Error::new(
                io::ErrorKind::Interrupted,
                format!("{what}: the engine is stopping ({})", last_error(&state)),
            ));
        }
        if !state.buffer.flush_pending() {
            state.buffer.seal();
            shared.changed.notify_all();
        }
        if state.stats.flush_errors >= errors_at_start + 5 {
            break Err(io::Error::other(format!(
                "{what}: the flusher keeps failing: {}",
                last_error(&state)
            )));
        }
        if let Some(deadline) = deadline.filter(|&d| started.elapsed() > d) {
            break Err(io::Error::other(format!(
                "{what}: not flushed in {} s ({})",
                deadline.as_secs(),
                last_error(&state)
            )));
        }
        state = sluice_env::wait_for(&shared.changed, state, Duration::from_millis(50));
    };
    state.draining -= 1;
    if state.draining == 0 {
        state.buffer.set_draining(false);
    }
    result
}

/// When the gate allows, flush every full region together (docs/engine.md,
/// "Flush and region reuse"): their bytes merged per file and written in file order,
/// `flush_writers` writes in flight. `Ok(None)` when regions were flushed
/// and reset, `Ok(Some(step))` when there was nothing to do, `Err` when a
/// flush failed (the regions not yet reset stay buffered). In two steps,
/// which the harness of random orders also takes apart (`orders.rs`):
/// [`start_flush`] writes the set, [`retire_set`] retires it once every
/// record its lookups may have seen has landed.
pub(super) fn flush_regions(shared: &Shared) -> io::Result<Option<Step>> {
    let written = match start_flush(shared)? {
        Started::Step(step) => return Ok(Some(step)),
        Started::Written(written) => written,
    };
    let state = wait_while(
        &shared.changed,
        sluice_env::lock(&shared.state),
        None,
        |state| !state.shutdown && written.waits(state),
    );
    if state.shutdown && written.waits(&state) {
        // A close while a writer's append is stuck: the set stays in the
        // log, written, as after a crash before its retirement.
        drop(state);
        give_back(shared, &written.set, written.writers);
        return Ok(Some(Step::Shutdown));
    }
    drop(state);
    retire_set(shared, written)
}

/// A set not retired (its writes failed, or it was written and the
/// engine closes) goes back to the write buffer unflushed, its bytes in
/// the log for the next flush, and this node's `writers` of its files end.
fn give_back(shared: &Shared, set: &[RegionId], writers: Vec<Hold<OwnWrite>>) {
    unflush(&mut sluice_env::lock(&shared.state), set);
    forget_own_writes(shared, writers);
}

/// What [`start_flush`] did.
pub(super) enum Started {
    /// Nothing written: nothing to do now, or the tier is not healthy.
    Step(Step),
    /// A set written, to retire.
    Written(Written),
}

/// A flush set written to the capacity tier, its files synced, not yet
/// retired ([`retire_set`]).
#[derive(Debug)]
pub(super) struct Written {
    set: Vec<RegionId>,
    /// This node's writes of the set's files, ended at its retirement.
    writers: Vec<Hold<OwnWrite>>,
    /// One past every record the runs' lookups may have seen.
    bound: u64,
}

impl Written {
    /// The engine crashed before the set retired ([`Hold::lost`]).
    #[cfg(test)]
    pub(super) fn lost(self) {
        self.writers.into_iter().for_each(Hold::lost);
    }

    /// Whether a record placed before the runs' lookups is still being
    /// appended: the retirement's sync of the newer records
    /// ([`sync_newer_records`]) waits for it, since a region's scan ends
    /// at the first record whose payload never landed, and the records
    /// behind it with it.
    pub(super) fn waits(&self, state: &State) -> bool {
        appends_in_flight_below(state, self.bound)
    }
}

/// The first step of [`flush_regions`]: pick the set the gate allows,
/// write its runs and sync the files they went to ([`begin_flush`], then
/// [`write_set`]).
pub(super) fn start_flush(shared: &Shared) -> io::Result<Started> {
    match begin_flush(shared)? {
        Begun::Step(step) => Ok(Started::Step(step)),
        Begun::Writing(writing) => write_set(shared, *writing).map(Started::Written),
    }
}

/// What [`begin_flush`] did.
pub(super) enum Begun {
    /// Nothing to write: nothing to do now, or the tier is not healthy.
    Step(Step),
    /// A set looked up, its writes to carry out.
    Writing(Box<SetWrite>),
}

/// Pick the set the gate allows and look up its runs: the set's writes,
/// as a machine to carry out ([`SetWrite`]).
pub(super) fn begin_flush(shared: &Shared) -> io::Result<Begun> {
    let mut state = sluice_env::lock(&shared.state);
    if state.shutdown {
        return Ok(Begun::Step(Step::Shutdown));
    }
    if !state.capacity_health.is_healthy() {
        // Lost or read-only: the bytes stay in the log (health.rs); the
        // heartbeat looks again every second and wakes this thread.
        return Ok(Begun::Step(Step::Idle(Duration::from_millis(250))));
    }
    let now = shared.clock.now();
    // Every full region together, up to the first with a record still
    // being written into it (the record's end notifies): the write
    // buffer's sluice set (`FlushSet::EveryFull`).
    let State {
        buffer, regions, ..
    } = &mut *state;
    let busy = |r: RegionId| !regions[r.0 as usize].in_flight.is_empty();
    let next = buffer
        .next_flush(
            now,
            FlushSet::EveryFull,
            shared.config.flush_run_max_bytes,
            busy,
        )
        .map_err(|e| io::Error::other(e.to_string()))?;
    let idle = |wait| Ok(Begun::Step(Step::Idle(wait)));
    let (set, runs) = match next {
        FlushStart::Idle => return idle(Duration::from_millis(100)),
        FlushStart::Pause { recheck_at } => {
            let wait = recheck_at.map_or(Duration::from_millis(100), |t| t.saturating_since(now));
            return idle(wait.clamp(Duration::from_millis(1), Duration::from_millis(100)));
        }
        FlushStart::Busy => return idle(Duration::from_millis(10)),
        FlushStart::Flush { regions, runs } => (regions, runs),
    };
    // This node writes these files now: their clean copies are compared
    // with them first, and stamped again once every write of theirs ended
    // (cache.rs), however the flush ends.
    let files: BTreeSet<FileId> = runs.iter().map(|run| run.file).collect();
    let writers: Vec<Hold<OwnWrite>> = files
        .into_iter()
        .map(|file| cache::begin_own_write(&mut state, file))
        .collect();
    drop(state);
    if let Some(step) = stopped_unhealthy(shared, &set, "before writing") {
        forget_own_writes(shared, writers);
        return Ok(Begun::Step(step));
    }
    let short = (shared.config.flush_run_max_bytes / 4).max(1);
    Ok(Begun::Writing(Box::new(SetWrite::new(
        set, writers, &runs, short,
    ))))
}

/// A flush set's writes as a machine (issue 35: it says what to do, its
/// driver does the I/O): its long runs, then the runs put last formed
/// again, then a sync of every capacity file written, each in file order.
/// The flusher's thread carries out each command whole ([`write_set`]);
/// the harness of random orders one run or one sync a turn, with other
/// records placed and landed between them, as writers do while the
/// flusher writes outside the lock, so a crash can fall between any two
/// (`orders.rs`).
///
/// Short runs (a positioning each) go last, formed again then: the gaps
/// between them that newer bytes filled meanwhile join them (ior-hard's
/// ranks, ragged where the region filled, have written on). So do runs
/// with a hole before or after them (a random writer's file, mixed's: its
/// long runs lie between holes the next region fills), so that the
/// stretch goes out whole instead of split around them.
pub(super) struct SetWrite {
    set: Vec<RegionId>,
    writers: Vec<Hold<OwnWrite>>,
    /// The runs to write now, in file order.
    runs: Vec<FlushRunRef>,
    /// The runs put last, formed again once `runs` are written (`None`
    /// once they were).
    later: Option<Vec<FlushRunRef>>,
    /// The capacity files written, by file.
    touched: BTreeMap<FileId, Arc<dyn BackendFile>>,
    /// The files still to sync, in file order, once every run is written
    /// (`None` before).
    unsynced: Option<Vec<Arc<dyn BackendFile>>>,
    /// Where the set's time went, for its log line.
    tally: Tally,
}

/// A set's runs and time ([`SetWrite`]'s log line).
struct Tally {
    started: Instant,
    long: usize,
    long_bytes: u64,
    long_ms: u128,
    later: usize,
    later_bytes: u64,
    again: usize,
    again_bytes: u64,
}

/// What a [`SetWrite`] asks its driver to do next.
pub(super) enum Command {
    /// Write these runs ([`write_runs`]), in file order, or a first part
    /// of them; then [`SetWrite::wrote`].
    Write(Vec<FlushRunRef>),
    /// Sync these capacity files, in file order, or a first part of them;
    /// then [`SetWrite::synced`].
    Sync(Vec<Arc<dyn BackendFile>>),
    /// Every run written and every file synced: [`SetWrite::written`].
    Done,
}

impl SetWrite {
    fn new(
        set: Vec<RegionId>,
        writers: Vec<Hold<OwnWrite>>,
        runs: &[FlushRunRef],
        short: u64,
    ) -> SetWrite {
        let (mut long, mut later) = (Vec::new(), Vec::new());
        for (i, &run) in runs.iter().enumerate() {
            if run.len >= short && !beside_a_hole(runs, i) {
                long.push(run);
            } else {
                later.push(run);
            }
        }
        let tally = Tally {
            started: Instant::now(),
            long: long.len(),
            long_bytes: long.iter().map(|r| r.len).sum(),
            long_ms: 0,
            later: later.len(),
            later_bytes: later.iter().map(|r| r.len).sum(),
            again: 0,
            again_bytes: 0,
        };
        SetWrite {
            set,
            writers,
            runs: long,
            later: Some(later),
            touched: BTreeMap::new(),
            unsynced: None,
            tally,
        }
    }

    /// What to do next. The runs put last are formed again under the
    /// lock once the others are written.
    pub(super) fn next(&mut self, shared: &Shared) -> Command {
        if !self.runs.is_empty() {
            return Command::Write(self.runs.clone());
        }
        if let Some(later) = self.later.take() {
            self.tally.long_ms = self.elapsed_ms();
            if !later.is_empty() {
                self.runs = runs_again(
                    &sluice_env::lock(&shared.state),
                    &self.set,
                    &later,
                    shared.config.flush_run_max_bytes,
                );
                self.tally.again = self.runs.len();
                self.tally.again_bytes = self.runs.iter().map(|r| r.len).sum();
                if !self.runs.is_empty() {
                    return Command::Write(self.runs.clone());
                }
            }
        }
        // Every capacity file the regions' bytes went to is synced before
        // a region can be reused (DESIGN §4.5), in file order: the same
        // run syncs in the same order (the seeded harness replays a crash
        // at one sync point; tests/seeded.rs).
        let unsynced = self
            .unsynced
            .get_or_insert_with(|| self.touched.values().cloned().collect());
        if unsynced.is_empty() {
            Command::Done
        } else {
            Command::Sync(unsynced.clone())
        }
    }

    /// The first `n` runs of the last [`Command::Write`] were written, to
    /// the capacity files `touched`.
    pub(super) fn wrote(&mut self, n: usize, touched: BTreeMap<FileId, Arc<dyn BackendFile>>) {
        self.runs.drain(..n.min(self.runs.len()));
        self.touched.extend(touched);
    }

    /// The first `n` files of the last [`Command::Sync`] were synced.
    pub(super) fn synced(&mut self, n: usize) {
        if let Some(unsynced) = &mut self.unsynced {
            unsynced.drain(..n.min(unsynced.len()));
        }
    }

    /// A command failed: the set goes back ([`give_back`]).
    pub(super) fn abort(self, shared: &Shared) {
        give_back(shared, &self.set, self.writers);
    }

    /// Written and synced ([`Command::Done`]): the set, to retire.
    pub(super) fn written(self, shared: &Shared) -> Written {
        let t = &self.tally;
        // Where a set's time went: its long runs, then the runs put last
        // (short or beside a hole) formed again (how many became how many,
        // of how many bytes).
        tracing::debug!(
            regions = self.set.len(),
            long = t.long,
            long_bytes = t.long_bytes,
            long_ms = t.long_ms,
            later = t.later,
            later_bytes = t.later_bytes,
            again = t.again,
            again_bytes = t.again_bytes,
            ms = self.elapsed_ms(),
            "flush set written"
        );
        let bound = sluice_env::lock(&shared.state).buffer.next_seq();
        Written {
            set: self.set,
            writers: self.writers,
            bound,
        }
    }

    fn elapsed_ms(&self) -> u128 {
        self.tally.started.elapsed().as_millis()
    }

    /// The engine crashed while the set was being written ([`Hold::lost`]).
    #[cfg(test)]
    pub(super) fn lost(self) {
        self.writers.into_iter().for_each(Hold::lost);
    }
}

/// Sync `file`, a capacity file a flush wrote.
pub(super) fn sync_flushed(shared: &Shared, file: &dyn BackendFile) -> io::Result<()> {
    file.sync_data().map_err(|e| {
        let tier = shared.capacity.describe();
        with_context(e, format!("capacity tier {tier}: sync after flush"))
    })
}

/// Carry out `writing`'s commands, each whole (the flusher's thread): the
/// set written and synced. A failure sends it back unflushed.
pub(super) fn write_set(shared: &Shared, mut writing: SetWrite) -> io::Result<Written> {
    loop {
        let done = match writing.next(shared) {
            Command::Write(runs) => write_runs(shared, &runs).map(|t| writing.wrote(runs.len(), t)),
            Command::Sync(files) => files
                .iter()
                .try_for_each(|file| sync_flushed(shared, file.as_ref()))
                .map(|()| writing.synced(files.len())),
            Command::Done => return Ok(writing.written(shared)),
        };
        if let Err(e) = done {
            writing.abort(shared);
            return Err(e);
        }
    }
}

/// A flush that did not retire its set: the notes of bytes written ahead
/// that were not synced are dropped, and this node's `writers` of the
/// set's files end (cache.rs).
fn forget_own_writes(shared: &Shared, writers: Vec<Hold<OwnWrite>>) {
    let mut state = sluice_env::lock(&shared.state);
    ahead::forget_unsynced(&mut state);
    for writer in writers {
        cache::end_own_write(&mut state, writer);
    }
}

/// The set's regions back to the write buffer unflushed.
fn unflush(state: &mut State, set: &[RegionId]) {
    for &region in set {
        let _ = state.buffer.abort_flush(region);
    }
}

/// The tier must still be the directory its name leads to before any
/// byte goes to it, and again before the regions are reset: otherwise
/// the set's regions go back unflushed and the bytes stay in the log
/// (health.rs), and the flusher waits.
fn stopped_unhealthy(shared: &Shared, set: &[RegionId], at: &str) -> Option<Step> {
    let found = shared.capacity.check_root();
    let health = super::health::note_health(shared);
    if found.is_ok() && health.is_healthy() {
        return None;
    }
    tracing::warn!(
        regions = set.len(),
        "flush stopped {at}: the capacity tier is {health}; the regions stay in the log"
    );
    let mut state = sluice_env::lock(&shared.state);
    ahead::forget_all(&mut state);
    unflush(&mut state, set);
    Some(Step::Idle(Duration::from_millis(250)))
}

/// The second step of [`flush_regions`], once no record placed before the
/// runs' lookups is in flight ([`Written::waits`]): sync the newer
/// records, retire the regions, and end this node's writes of the set's
/// files under the same hold of the lock as the retirement, so no one
/// sees the regions flushed before the files' copies are stamped (a drain
/// returning in between let a release forget the copies of a file not
/// stamped yet).
pub(super) fn retire_set(shared: &Shared, written: Written) -> io::Result<Option<Step>> {
    let Written {
        set, mut writers, ..
    } = written;
    let result = retire(shared, &set, &mut writers);
    if !writers.is_empty() {
        forget_own_writes(shared, writers);
    }
    result
}

/// [`retire_set`]'s work; `writers` end with the retirement (taken out of
/// it), or stay for the caller to end if it fails or stops before.
fn retire(
    shared: &Shared,
    set: &[RegionId],
    writers: &mut Vec<Hold<OwnWrite>>,
) -> io::Result<Option<Step>> {
    sync_newer_records(shared, set)
        .inspect_err(|_| unflush(&mut sluice_env::lock(&shared.state), set))?;
    if let Some(step) = stopped_unhealthy(shared, set, "before resetting its regions") {
        return Ok(Some(step));
    }
    // Readers copying buffered bytes of the regions finish first.
    let mut state = wait_while(
        &shared.changed,
        sluice_env::lock(&shared.state),
        None,
        |state| set.iter().any(|r| state.regions[r.0 as usize].readers > 0),
    );
    // Retired, not emptied: the header's first sequence ends the log
    // before every record in it, which stay as clean copies (cache.rs).
    let first_seq = state.buffer.next_seq();
    for (i, &region) in set.iter().enumerate() {
        let log_region = &mut state.regions[region.0 as usize];
        let generation = log_region.file.generation() + 1;
        let reset = log_region
            .file
            .retire(generation, first_seq)
            .and_then(|()| log_region.file.sync());
        if let Err(e) = reset {
            unflush(&mut state, &set[i..]);
            return Err(io::Error::new(
                e.kind(),
                format!(
                    "fast tier {}: reset region {}: {e}",
                    shared.fast.describe(),
                    region.0
                ),
            ));
        }
        log_region.dirty = false;
        log_region.broken_at = None;
        // Its records (only those written whole are in `records`) stay
        // as clean copies until the region is filled again.
        log_region.cached = true;
        state
            .buffer
            .finish_flush(region)
            .map_err(|e| io::Error::other(e.to_string()))?;
        shared.left_log.fetch_add(1, Ordering::SeqCst);
        state.stats.regions_flushed += 1;
    }
    ahead::settle(&mut state);
    for writer in writers.drain(..) {
        cache::end_own_write(&mut state, writer);
    }
    let flushed: Vec<FileId> = state.files.keys().copied().collect();
    let handles: Vec<_> = flushed
        .into_iter()
        .filter_map(|id| forget_if_unused(&mut state, id))
        .collect();
    drop(state);
    drop(handles);
    shared.changed.notify_all();
    Ok(None)
}

/// Before `set` retires: sync every other region appended to since its
/// last sync. The runs left out the set's bytes that newer records
/// superseded (a write over them, a truncate, an unlink); once the set
/// retires its records are gone from the log, so those newer records must
/// be durable first, or a power cut of the fast tier loses the old bytes
/// and the new (an fsynced file came back shorter: the harness of random
/// orders, seed 1382; docs/crash-consistency.md, "Superseded bytes"). The
/// lookups saw only records that had landed, so their payloads are
/// written and a sync covers them. The regions stay marked for the next
/// fsync: a record still in flight in one is not covered.
fn sync_newer_records(shared: &Shared, set: &[RegionId]) -> io::Result<()> {
    let newer: Vec<Arc<RegionFile>> = sluice_env::lock(&shared.state)
        .regions
        .iter()
        .filter(|r| r.dirty && !set.contains(&r.file.region()))
        .map(|r| Arc::clone(&r.file))
        .collect();
    for file in newer {
        file.sync().map_err(|e| {
            let tier = shared.fast.describe();
            with_context(
                e,
                format!("fast tier {tier}: sync the log before a flush retires its regions"),
            )
        })?;
    }
    Ok(())
}

/// Whether `runs[i]` (file order) has a hole between it and the run of
/// its file before or after it in the set: bytes the next region may hold
/// by the time the set's other runs are written. The ends of a file's
/// bytes in the set are not holes: a sequential file's last run there,
/// put last, only cost the drain a positioning per file.
fn beside_a_hole(runs: &[FlushRunRef], i: usize) -> bool {
    let run = runs[i];
    let gap = |a: &FlushRunRef, b: &FlushRunRef| {
        a.file == b.file && a.file_offset + a.len != b.file_offset
    };
    i.checked_sub(1).is_some_and(|j| gap(&runs[j], &run))
        || runs.get(i + 1).is_some_and(|next| gap(&run, next))
}

/// The runs of the flushing `set` over the stretches the runs put last,
/// `later` (file order), cover, formed again now (`flush_runs_within`):
/// one stretch per file, from its first such run to its last. Pieces in
/// it that a run wrote already are left out when each is written.
fn runs_again(
    state: &State,
    set: &[RegionId],
    later: &[FlushRunRef],
    run_max: u64,
) -> Vec<FlushRunRef> {
    let mut stretches: Vec<(FileId, std::ops::Range<u64>)> = Vec::new();
    for run in later {
        let end = run.file_offset + run.len;
        match stretches.last_mut() {
            Some((file, range)) if *file == run.file => range.end = range.end.max(end),
            _ => stretches.push((run.file, run.file_offset..end)),
        }
    }
    stretches
        .into_iter()
        .flat_map(|(file, range)| state.buffer.flush_runs_within(set, file, range, run_max))
        .collect()
}

/// Write `runs` (file order) to the capacity tier, `flush_writers` at a
/// time, in run order (writeback.rs, [`in_order`]): the writes in flight
/// are neighbours in the file, each starting where the one before ends,
/// and the capacity device serves them without seeking. Returns the files
/// written; the first error stops the others, and so does shutdown (an
/// `Interrupted` error: the regions stay buffered).
pub(super) fn write_runs(
    shared: &Shared,
    runs: &[FlushRunRef],
) -> io::Result<BTreeMap<FileId, Arc<dyn BackendFile>>> {
    let written = in_order(
        shared.config.flush_writers as usize,
        runs.len(),
        |i, turn| {
            // Closing (an unmount that keeps the data, a drain stopped by
            // a second Ctrl-C): the runs not started stay in the log,
            // whose regions are not reset, as after a crash in the middle
            // of a flush; the next open flushes them again.
            if sluice_env::lock(&shared.state).shutdown {
                return Err(io::Error::new(
                    io::ErrorKind::Interrupted,
                    "flush stopped: the engine is closing",
                ));
            }
            let run = runs[i];
            Ok(flush_run(shared, run, turn)?.map(|handle| (run.file, handle)))
        },
    )?;
    Ok(written.into_iter().flatten().collect())
}

/// Write the bytes of `run` that still live in the flushing regions `set`
/// to the capacity tier. They are looked up again under the lock, so
/// superseded bytes are never written, then copied from the log outside
/// it, and written, once `turn` comes, one write per stretch of
/// file-contiguous bytes (DESIGN §4.5: adjacent extents merged into large
/// sequential writes); the turn passes as the last write is issued.
/// Returns the file's capacity handle when something was written.
fn flush_run(
    shared: &Shared,
    run: FlushRunRef,
    turn: Turn<'_>,
) -> io::Result<Option<Arc<dyn BackendFile>>> {
    let file = run.file;
    let mut state = sluice_env::lock(&shared.state);
    let mut turn = Some(turn);
    // A sync of the file is writing all its buffered bytes: wait for it,
    // then look up what is left (nothing, unless the sync failed). The
    // turn passes first: the sync waits for the file's runs in flight,
    // which may be waiting for this turn. (Turns only keep the disk's
    // writes in file order; the runs are disjoint, so order does not
    // matter for what the file holds.)
    if state.files.get(&file).is_some_and(|f| f.syncing > 0) {
        drop(turn.take());
        state = wait_while(&shared.changed, state, None, |state| {
            state.files.get(&file).is_some_and(|f| f.syncing > 0)
        });
    }
    // Every byte buffered in the run's range, wherever it is now: the
    // set's own (those still current) and the newer bytes that fill the
    // gaps between them (`start_flush_set`'s `fill_gaps`), so the range
    // goes as one write. Regions outside the set are not reset while
    // this flush runs (only the flusher resets regions), so their records
    // too can be read outside the lock.
    // Pieces an earlier run wrote already (ahead.rs) are left out.
    let bound = ahead::bound(&state, file);
    let (pieces, _) = ahead::pieces_to_write(&state, file, run.file_offset, run.len);
    if pieces.is_empty() {
        return Ok(None);
    }
    // The regions are flushing: nothing else resets them, so their records
    // can be read outside the lock without a pin.
    let located: Vec<(u64, u64, Located)> = pieces
        .into_iter()
        .map(|(file_offset, len, location)| (file_offset, len, locate(&state, location)))
        .collect();
    let Some(open) = state.files.get(&file) else {
        return Ok(None);
    };
    let handle = Arc::clone(&open.handle);
    let path = open.path.clone();
    let busy = Hold::<Busy>::take(&mut state, file);
    drop(state);
    let copied = copy_stretches(&located);
    if let Some(turn) = &turn {
        turn.wait();
    }
    // A sync (a close under close-to-open) waiting to write back goes
    // first; this run's writes follow it (writeback.rs).
    shared.writeback.background();
    let (written, stretches) = match copied {
        Ok(stretches) => {
            let last = stretches.len().saturating_sub(1);
            write_copied(&shared.traffic, handle.as_ref(), &stretches, |i, bytes| {
                take_flush_tokens(shared, bytes);
                if i == last {
                    drop(turn.take());
                }
            })
        }
        Err(e) => (0, Err(StretchError::Copy(e))),
    };
    drop(turn);
    let mut corrupt = false;
    let result = stretches.map_err(|failure| match failure {
        StretchError::Copy(e) => {
            corrupt = e.kind() == io::ErrorKind::InvalidData;
            io::Error::new(e.kind(), format!("flush {path}: {e}"))
        }
        StretchError::Write(e) => io::Error::new(
            e.kind(),
            format!(
                "capacity tier {}: flush {path}: {e}",
                shared.capacity.describe()
            ),
        ),
    });
    let mut state = sluice_env::lock(&shared.state);
    let _ = busy.give_back(&mut state);
    let written_at = state
        .files
        .get(&file)
        .filter(|open| !open.unlinked)
        .and_then(|open| open.written);
    if corrupt {
        state.stats.corrupt_payloads += 1;
    }
    state.stats.flushed_bytes += written;
    if result.is_ok() {
        // On the capacity file now, synced with the set's files before
        // the regions retire: a sync of the file before then syncs these
        // bytes, and a later flush skips them (ahead.rs).
        ahead::note(
            &mut state,
            file,
            run.file_offset..run.file_offset + run.len,
            bound,
        );
    }
    shared.changed.notify_all();
    drop(state);
    result?;
    if let Some(at) = written_at {
        // The flush's writes stamped the flush time on the file: give it
        // back the time of its last write (best effort: a rename racing
        // with the flush only leaves the flush time).
        let times = SetAttr {
            mtime: Some(TimeSet::At(at)),
            ..SetAttr::default()
        };
        let _ = shared.capacity.set_attr(&path, &times);
    }
    Ok(Some(handle))
}

/// Wait until the flush bandwidth cap lets `bytes` more go to the capacity
/// tier (at once when there is no cap). A shutdown ends the wait early, so
/// closing never sleeps out the cap; that one run then goes unthrottled.
pub(super) fn take_flush_tokens(shared: &Shared, bytes: u64) {
    loop {
        let now = shared.clock.now();
        let mut state = sluice_env::lock(&shared.state);
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
