//! A truncate as a machine (issue 35): [`Truncate::step`] runs under the
//! engine lock and never lets it go; it says what comes next ([`Next`]),
//! and its driver carries that out: a wait, or [`Work`] with the lock let
//! go, whose outcome it hands back ([`Truncate::resume`]).
//! [`Engine::truncate`](super::Engine::truncate) drives it with the file's
//! I/O lock held alone, waiting on `Shared::changed`; the harness of
//! random orders drives the same machine, landing the payloads it holds
//! where the truncate waits for records in flight (orders.rs).
//!
//! The steps, for a file with bytes in the log (without, only the last
//! two):
//! 1. wait for the file's flush runs (`busy`);
//! 2. make the capacity file's durable length at least the new size
//!    ([`grow_before_truncate`]), so the truncate record can never clip
//!    the older records below a length the capacity tier lost;
//! 3. wait for the flush runs again, then append the truncate record and
//!    apply it to the index under the same hold of the lock: records
//!    still in flight are older and are clipped when they land, newer ones
//!    are not touched;
//! 4. wait for the records in flight, sync the log;
//! 5. wait for the flush runs once more (one that looked up bytes past the
//!    size before the index was cut must land before the cut), drop the
//!    clean copies past the end, and cut the capacity file, synced when a
//!    record was written (it clips the older records at recovery);
//! 6. the file's size.

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_env::{BackendFile, RelPath};
use sluice_policy::FileId;

use crate::log::RecordHeader;

use super::append::{self, seq_of, sync_log, Append};
use super::files::{busy, unknown};
use super::holds::{Hold, OwnWrite};
use super::{ahead, cache, context, Shared, State};

/// What a [`Truncate`] asks of its driver next.
pub(super) enum Next {
    Done(io::Result<()>),
    /// Wait on `Shared::changed` at most this long, then step again (the
    /// record waits for room in the log).
    Wait(Duration),
    /// Wait on `Shared::changed` while this holds, then step again.
    WaitWhile(Until),
    /// Let the engine lock go, do this, take the lock again, hand its
    /// outcome to [`Truncate::resume`] and step again.
    Unlocked(Work),
}

/// A condition a truncate waits out.
#[derive(Clone, Copy, Debug)]
pub(super) enum Until {
    /// The file's flush runs or write-back writes are under way
    /// (`files::busy`).
    Busy(FileId),
    /// A record placed before the wait began is in flight
    /// (`append::appends_in_flight`).
    AppendsInFlight,
}

/// What a truncate does with the engine lock let go.
pub(super) enum Work {
    /// The truncate record's append ([`append::Work`]).
    Append(append::Work<'static>),
    /// Make the capacity file's durable length at least `size`, retrying
    /// ([`grow_retrying`]).
    Grow {
        handle: Arc<dyn BackendFile>,
        size: u64,
        owed: bool,
    },
    /// Cut the capacity file to `size`, and sync it if `sync`.
    Cut {
        handle: Arc<dyn BackendFile>,
        size: u64,
        sync: bool,
    },
}

/// What [`Work`] came to.
pub(super) enum Outcome {
    Append(append::Outcome),
    Io(io::Result<()>),
}

impl Work {
    pub(super) fn run(self, shared: &Shared) -> Outcome {
        match self {
            Work::Append(work) => Outcome::Append(work.run(shared)),
            Work::Grow { handle, size, owed } => {
                Outcome::Io(grow_retrying(shared, handle.as_ref(), size, owed))
            }
            Work::Cut { handle, size, sync } => Outcome::Io(handle.set_len(size).and_then(|()| {
                if sync {
                    handle.sync_data()
                } else {
                    Ok(())
                }
            })),
        }
    }
}

/// Where a [`Truncate`] is.
enum Phase {
    /// Wait for the file's flush runs, then grow (logged bytes) or cut.
    Start,
    /// The grow under way, this node writing the capacity file.
    Growing(Hold<OwnWrite>, RelPath),
    /// The grow ended.
    Grown(Hold<OwnWrite>, RelPath, io::Result<()>),
    /// Wait for the file's flush runs, then the record.
    BeforeRecord,
    Record(Append<'static>),
    /// The record applied; the driver waited for the records in flight:
    /// sync the log.
    Applied,
    /// Wait for the file's flush runs, then the cut.
    BeforeCut,
    Cutting(Hold<OwnWrite>, RelPath),
    Cut(Hold<OwnWrite>, RelPath, io::Result<()>),
    Done,
}

impl Phase {
    fn name(&self) -> &'static str {
        match self {
            Phase::Start => "start",
            Phase::Growing(..) => "growing",
            Phase::Grown(..) => "grown",
            Phase::BeforeRecord => "before the record",
            Phase::Record(_) => "record",
            Phase::Applied => "applied",
            Phase::BeforeCut => "before the cut",
            Phase::Cutting(..) => "cutting",
            Phase::Cut(..) => "cut",
            Phase::Done => "done",
        }
    }
}

/// A truncate of `file` to `size` (the module docs).
pub(super) struct Truncate {
    file: FileId,
    size: u64,
    /// The file had bytes in the log at the start: a truncate record.
    logged: bool,
    /// The record's sequence number, once appended.
    seq: Option<u64>,
    phase: Phase,
}

impl Truncate {
    pub(super) fn new(file: FileId, size: u64) -> Truncate {
        Truncate {
            file,
            size,
            logged: false,
            seq: None,
            phase: Phase::Start,
        }
    }

    /// The truncate record's sequence number, if it took one (the orders
    /// harness's model places the truncate there).
    #[cfg(test)]
    pub(super) fn record_seq(&self) -> Option<u64> {
        self.seq
    }

    /// The outcome of the [`Work`] the last step asked for.
    pub(super) fn resume(&mut self, outcome: Outcome) {
        self.phase = match (std::mem::replace(&mut self.phase, Phase::Done), outcome) {
            (Phase::Record(mut append), Outcome::Append(outcome)) => {
                append.resume(outcome);
                Phase::Record(append)
            }
            (Phase::Growing(writer, path), Outcome::Io(grown)) => Phase::Grown(writer, path, grown),
            (Phase::Cutting(writer, path), Outcome::Io(cut)) => Phase::Cut(writer, path, cut),
            // INVARIANT: the driver hands back the outcome of the work the
            // step asked for, once.
            (phase, _) => unreachable!("an outcome that does not fit {}", phase.name()),
        };
    }

    /// The next step, under the engine lock.
    pub(super) fn step(&mut self, shared: &Shared, state: &mut State) -> Next {
        let (file, size) = (self.file, self.size);
        loop {
            match std::mem::replace(&mut self.phase, Phase::Done) {
                phase @ (Phase::Start | Phase::BeforeRecord | Phase::BeforeCut)
                    if busy(file)(state) =>
                {
                    self.phase = phase;
                    return Next::WaitWhile(Until::Busy(file));
                }
                Phase::Start => {
                    self.logged = state.buffer.has_logged(file);
                    if !self.logged {
                        self.phase = Phase::BeforeCut;
                        continue;
                    }
                    // The capacity file's durable length reaches `size`
                    // before the record can be (`grow_before_truncate`):
                    // once the record is durable, recovery clips the
                    // file's older records to `size`, and a capacity file
                    // that kept a shorter length (the record synced, then
                    // a power cut before the cut) came back shorter than
                    // both the length before the truncate and after it
                    // (an fsynced file's hole gone). Growing first is
                    // safe: before the record, the older records still
                    // cover every byte below the old length. A capacity
                    // tier that keeps failing it fails the truncate, with
                    // no record.
                    let owed = capacity_owed(state, file);
                    let Some(open) = state.files.get(&file) else {
                        return Next::Done(Err(unknown(file)));
                    };
                    let (handle, path) = (Arc::clone(&open.handle), open.path.clone());
                    self.phase = Phase::Growing(cache::begin_own_write(state, file), path);
                    return Next::Unlocked(Work::Grow { handle, size, owed });
                }
                Phase::Grown(writer, path, grown) => {
                    cache::end_own_write(state, writer);
                    if let Err(e) = grown {
                        return Next::Done(Err(context(format!(
                            "truncate {path}: capacity tier {}: make the new length durable first",
                            shared.capacity.describe()
                        ))(e)));
                    }
                    self.phase = Phase::BeforeRecord;
                }
                Phase::BeforeRecord => {
                    let header = RecordHeader::truncate(file, size, 0);
                    self.phase = Phase::Record(Append::required(header, &[], None));
                }
                Phase::Record(mut append) => match append.step(shared, state) {
                    append::Next::Done(done) => {
                        let seq = match seq_of(done) {
                            Ok(seq) => seq,
                            Err(e) => return Next::Done(Err(e)),
                        };
                        // Applied at once, under the same hold of the lock
                        // as the record: records still being written are
                        // older and are clipped when they land (the write
                        // buffer's "Records in flight"); newer ones are not
                        // touched.
                        state.buffer.truncate(file, size, seq);
                        // 0: not appended after all (a failing fast tier's
                        // fallback, `seq_of`).
                        self.seq = (seq != 0).then_some(seq);
                        self.phase = Phase::Applied;
                        return Next::WaitWhile(Until::AppendsInFlight);
                    }
                    append::Next::Wait(wait) => {
                        self.phase = Phase::Record(append);
                        return Next::Wait(wait);
                    }
                    append::Next::Unlocked(work) => {
                        self.phase = Phase::Record(append);
                        return Next::Unlocked(Work::Append(work));
                    }
                },
                Phase::Applied => {
                    if let Err(e) = sync_log(shared, state) {
                        return Next::Done(Err(e));
                    }
                    // The waits may have let the lock go: a flush run of
                    // bytes past `size` looked up before the index was cut
                    // must land before the capacity file is cut.
                    self.phase = Phase::BeforeCut;
                }
                Phase::BeforeCut => {
                    // Only now, after every wait above: while the truncate
                    // waited for log room with the lock released, a flush
                    // could finish and move bytes past the end that the
                    // index still held into the clean cache, and a read of
                    // the hole a later extension leaves there served them
                    // (fsx, full-fast seed 2).
                    let (handle, path, writer) = match begin_cut(state, file, size) {
                        Ok(cut) => cut,
                        Err(e) => return Next::Done(Err(e)),
                    };
                    self.phase = Phase::Cutting(writer, path);
                    // With a truncate record in the log, the capacity
                    // file's new length is synced before the truncate
                    // returns: the record clips the file's older records
                    // at recovery, and over a length the capacity tier
                    // lost the file came back shorter than before the
                    // truncate and than after it (the seeded harness, seed
                    // 945: an fsynced hole's bytes gone).
                    return Next::Unlocked(Work::Cut {
                        handle,
                        size,
                        sync: self.logged,
                    });
                }
                Phase::Cut(writer, path, cut) => {
                    cache::end_own_write(state, writer);
                    if let Err(e) = cut {
                        return Next::Done(Err(context(format!("truncate {path}"))(e)));
                    }
                    if let Some(open) = state.files.get_mut(&file) {
                        open.size = size;
                        open.capacity_unsynced |= !self.logged;
                    }
                    return Next::Done(Ok(()));
                }
                // INVARIANT: a step that asks for work is followed by
                // `resume`, and none follows the end.
                phase @ (Phase::Growing(..) | Phase::Cutting(..) | Phase::Done) => {
                    unreachable!("a truncate's step while {}", phase.name())
                }
            }
        }
    }
}

/// Before the capacity file of `file` is cut to `size`, under the lock:
/// its handle and path to cut it with, outside the lock, and the own
/// write to give back to [`cache::end_own_write`] after. Clean copies past the new end go with
/// the bytes (a truncate that grows the file changes no byte a copy
/// holds); the copies below it stay across this node's own change of the
/// capacity file (cache.rs).
fn begin_cut(
    state: &mut State,
    file: FileId,
    size: u64,
) -> io::Result<(Arc<dyn BackendFile>, RelPath, Hold<OwnWrite>)> {
    let open = state.files.get(&file).ok_or_else(|| unknown(file))?;
    let (handle, path) = (Arc::clone(&open.handle), open.path.clone());
    state.buffer.forget_cached(file, size, u64::MAX - size);
    Ok((handle, path, cache::begin_own_write(state, file)))
}

/// Before a truncate record that clips a file's logged bytes to `size`:
/// make the capacity file's *durable* length at least `size` (Engine::
/// truncate). Once the record is durable, recovery clips the older records
/// to `size` and sizes the file by them and the capacity file; a capacity
/// file that came back shorter would lose the length (an fsynced hole's
/// bytes). A shorter file grows and is synced; a longer one is synced if
/// `owed` (changed since its last sync: its length may be one a power cut
/// takes back). Found by the seeded harness (seed 21404) and the orders
/// harness with crashes (seed 1277: a straight write had lengthened the
/// file unsynced).
fn grow_before_truncate(handle: &dyn BackendFile, size: u64, owed: bool) -> io::Result<()> {
    if handle.len()? < size {
        handle.set_len(size)?;
    } else if !owed {
        return Ok(());
    }
    handle.sync_data()
}

/// Whether `file`'s capacity file may have changed since its last sync,
/// so that its length may be one a power cut takes back: a straight write
/// or the kernel's (passthrough) owed to the next fsync, or a flush run's
/// write whose set has not synced the file yet (ahead.rs). A truncate
/// between a flush's runs and its sync saw the length a run gave the file
/// and skipped the sync; a power cut of both tiers then took that length
/// back, and the truncate record clipped the older records, so an fsynced
/// file came back shorter than both lengths (the orders harness, once the
/// flush took turns run by run: seed 10595, with the torn prefixes drawn
/// in another order).
fn capacity_owed(state: &State, file: FileId) -> bool {
    ahead::unsynced(state, file)
        || state
            .files
            .get(&file)
            .is_some_and(|open| open.capacity_unsynced || open.kernel_writes)
}

/// [`grow_before_truncate`], tried again for up to `wait_max` while the
/// capacity tier fails it (a transient fault, as the flush retries), then
/// its error: the truncate then fails and appends no record. It was best
/// effort before: the record became durable over a length the tier had not
/// synced, and a crash of the capacity tier right there lost the file's
/// length (the seeded harness, seed 27616: the crash fell on the grow's
/// sync, and the fast tier, still up, took the record).
fn grow_retrying(
    shared: &Shared,
    handle: &dyn BackendFile,
    size: u64,
    owed: bool,
) -> io::Result<()> {
    let deadline = Instant::now() + shared.config.wait_max;
    loop {
        match grow_before_truncate(handle, size, owed) {
            Err(e) if Instant::now() < deadline && !sluice_env::lock(&shared.state).shutdown => {
                tracing::debug!(error = %e, "truncate: the new length is not durable yet; trying again");
                std::thread::sleep(Duration::from_millis(20));
            }
            done => return done,
        }
    }
}
