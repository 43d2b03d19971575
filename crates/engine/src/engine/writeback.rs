//! Writing buffered bytes back to the capacity tier at disk speed (issue
//! 32; docs/engine.md, "Write-back"): the one path of the flusher and of a
//! file's sync (every close and fsync under close-to-open, `sluice sync`).
//!
//! * **In order, several in flight** ([`in_order`]): the bytes go in runs
//!   of file-contiguous bytes (merged whatever the size of the records
//!   holding them, each at most `flush.run_max`); `flush.writers` workers
//!   take the runs in file order, copy them out of the log in parallel and
//!   issue their writes in run order ([`Turn`]), so the writes in flight
//!   are neighbours in the file and the disk serves them without seeking.
//! * **One file at a time on the disk** ([`WritebackGate`]): syncs of
//!   different files write one after the other, in the order they came,
//!   instead of interleaving (which makes a disk seek between them); the
//!   flusher's runs give way to a waiting sync at their next turn, so a
//!   close never waits behind a whole background flush.
//!
//! INVARIANT: a turn passes exactly once (when dropped), after its run has
//! issued its last write or given up; the gate serves syncs in ticket
//! order and lets the flusher write only while no sync holds or waits for
//! it.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};

use sluice_env::BackendFile;

use super::read::Located;
use super::traffic::TrafficMeter;
use super::Shared;

/// Run `jobs` jobs with at most `writers` workers (the calling thread is
/// one): workers take the jobs in order and each runs `work(i, turn)`,
/// which prepares job `i` (copies it out of the log) in parallel with the
/// others, waits for its turn ([`Turn::wait`]) before its first write and
/// passes it (drops it) once its last write is issued. Returns what the
/// jobs returned, in no particular order; the first error stops the jobs
/// not started and is returned. A job with no order to keep drops its
/// turn at once ([`copy_stretches`]' reads).
pub(super) fn in_order<T: Send, E: Send>(
    writers: usize,
    jobs: usize,
    work: impl Fn(usize, Turn<'_>) -> Result<T, E> + Sync,
) -> Result<Vec<T>, E> {
    let done = Mutex::new(Vec::with_capacity(jobs));
    let next = AtomicUsize::new(0);
    let turns = Turns::new(jobs);
    let failed: Mutex<Option<E>> = Mutex::new(None);
    let worker = || loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        if i >= jobs {
            return;
        }
        // Passed when dropped, whatever happens to the job.
        let turn = turns.take(i);
        if sluice_env::lock(&failed).is_some() {
            return;
        }
        match work(i, turn) {
            Ok(value) => sluice_env::lock(&done).push(value),
            Err(e) => {
                sluice_env::lock(&failed).get_or_insert(e);
                return;
            }
        }
    };
    let writers = writers.clamp(1, jobs.max(1));
    if writers == 1 {
        worker();
    } else {
        std::thread::scope(|scope| {
            for _ in 1..writers {
                scope.spawn(worker);
            }
            worker();
        });
    }
    match failed.into_inner().unwrap_or_else(|e| e.into_inner()) {
        Some(e) => Err(e),
        None => Ok(done.into_inner().unwrap_or_else(|e| e.into_inner())),
    }
}

/// The order in which workers issue their writes: job `i` writes once
/// every job before it has issued its last write (or ended).
struct Turns {
    /// The first job that has not passed, and which jobs have passed.
    state: Mutex<(usize, Vec<bool>)>,
    changed: Condvar,
}

/// Job `i`'s turn; passes it when dropped.
pub(super) struct Turn<'a> {
    turns: &'a Turns,
    job: usize,
}

impl Turns {
    fn new(jobs: usize) -> Turns {
        Turns {
            state: Mutex::new((0, vec![false; jobs])),
            changed: Condvar::new(),
        }
    }

    fn take(&self, job: usize) -> Turn<'_> {
        Turn { turns: self, job }
    }
}

impl Turn<'_> {
    /// Wait until every earlier job has passed.
    pub(super) fn wait(&self) {
        let turns = &self.turns;
        drop(sluice_env::wait_while(
            &turns.changed,
            sluice_env::lock(&turns.state),
            None,
            |state| state.0 < self.job,
        ));
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        let mut state = sluice_env::lock(&self.turns.state);
        let (first, passed) = &mut *state;
        passed[self.job] = true;
        while passed.get(*first) == Some(&true) {
            *first += 1;
        }
        self.turns.changed.notify_all();
    }
}

/// Who writes back to the capacity tier now (module docs): syncs one at a
/// time in ticket order, the flusher only while no sync holds or waits.
#[derive(Debug, Default)]
pub(super) struct WritebackGate {
    /// (next ticket to hand out, ticket being served).
    tickets: Mutex<(u64, u64)>,
    changed: Condvar,
}

/// A sync's hold of the gate; the next sync's turn when dropped.
pub(super) struct SyncHold<'a> {
    gate: &'a WritebackGate,
}

impl WritebackGate {
    /// Wait for this sync's turn: every sync that asked before has written.
    pub(super) fn sync(&self) -> SyncHold<'_> {
        let mut tickets = sluice_env::lock(&self.tickets);
        let mine = tickets.0;
        tickets.0 += 1;
        while tickets.1 != mine {
            tickets = sluice_env::wait(&self.changed, tickets);
        }
        SyncHold { gate: self }
    }

    /// Wait until no sync holds or waits for the gate (the flusher, before
    /// each run's writes).
    pub(super) fn background(&self) {
        let mut tickets = sluice_env::lock(&self.tickets);
        while tickets.0 != tickets.1 {
            tickets = sluice_env::wait(&self.changed, tickets);
        }
    }
}

impl Drop for SyncHold<'_> {
    fn drop(&mut self) {
        let mut tickets = sluice_env::lock(&self.gate.tickets);
        tickets.1 += 1;
        self.gate.changed.notify_all();
    }
}

/// `pieces` (file order: `(file_offset, len, record)`) cut into runs: each
/// a slice of pieces of at most `run_max` bytes (a single larger piece
/// alone), cut only where the bytes are not file-contiguous or the run is
/// full, whatever the records' sizes.
pub(super) fn runs_of<T>(pieces: &[(u64, u64, T)], run_max: u64) -> Vec<&[(u64, u64, T)]> {
    let mut runs = Vec::new();
    let (mut start, mut bytes) = (0usize, 0u64);
    for (i, &(offset, len, _)) in pieces.iter().enumerate() {
        let contiguous = i > start && {
            let (prev, prev_len, _) = pieces[i - 1];
            prev + prev_len == offset
        };
        if i > start && (!contiguous || bytes + len > run_max) {
            runs.push(&pieces[start..i]);
            (start, bytes) = (i, 0);
        }
        bytes += len;
    }
    if start < pieces.len() {
        runs.push(&pieces[start..]);
    }
    runs
}

/// The most bytes one read of the log may take when it covers several
/// records at once ([`copy_stretches`]).
const SPAN_MAX_BYTES: u64 = 4 << 20;

/// The most bytes of other records (and record headers) a span may read
/// between two wanted records: a request's fixed cost buys about this
/// much transfer on a SATA SSD (60 µs at 500 MB/s, EVALUATION §1), so
/// reading through a shorter gap costs less than a second request.
const SPAN_GAP_MAX_BYTES: u64 = 32 << 10;

/// Reads of the log one copy ([`copy_stretches`]) keeps in flight at once.
const READS_IN_FLIGHT: usize = 8;

/// Pieces copied out of the log: each piece's index and its bytes.
type Copied = Vec<(usize, Vec<u8>)>;

/// Copy `pieces` (file order) out of the log into stretches of
/// file-contiguous bytes: `(file_offset, bytes)`.
///
/// The records are read in log order, and records close together in one
/// region (at most [`SPAN_GAP_MAX_BYTES`] apart, [`SPAN_MAX_BYTES`] in
/// all) in one request: the small records of ranks writing one file in
/// turn (IO500's ior-hard: 47,008 bytes) lie next to each other in the
/// log, a few apart, and the fast tier serves the copy as a few large
/// reads instead of one per record while it also takes the burst's
/// appends. Up to [`READS_IN_FLIGHT`] of those reads are in flight at
/// once: one at a time, each waited behind the appends queued on the fast
/// tier before it (a single-channel SSD serves requests in arrival order),
/// so a close-to-open write-back of 4 MiB of 256 KiB records scattered
/// through the log among other files' took about 150 ms during a burst
/// (IO500's mixed pattern, issue 32), 55 ms with the reads in parallel. Every
/// payload is checked against its record's checksum before a byte of it
/// is copied.
pub(super) fn copy_stretches(pieces: &[(u64, u64, Located)]) -> io::Result<Vec<(u64, Vec<u8>)>> {
    // Where each piece goes: its stretch and its offset in it.
    let mut stretches: Vec<(u64, Vec<u8>)> = Vec::new();
    let mut places = Vec::with_capacity(pieces.len());
    for &(file_offset, len, _) in pieces {
        let continues = stretches
            .last()
            .is_some_and(|(start, buf)| start + buf.len() as u64 == file_offset);
        if !continues {
            stretches.push((file_offset, Vec::new()));
        }
        // INVARIANT: a stretch was pushed above if none continued.
        let last = stretches.len() - 1;
        let buf = &mut stretches[last].1;
        places.push((last, buf.len()));
        buf.resize(buf.len() + len as usize, 0);
    }
    // Pieces whose records are in memory (mirror.rs) are copied from
    // there; the others are read from the log.
    let mut order: Vec<usize> = Vec::with_capacity(pieces.len());
    for (i, &(_, len, ref pinned)) in pieces.iter().enumerate() {
        let (stretch, at) = places[i];
        let out = &mut stretches[stretch].1[at..at + len as usize];
        if !pinned.copy_from_memory(out) {
            order.push(i);
        }
    }
    order.sort_by_key(|&i| (pieces[i].2.region.0, pieces[i].2.payload().0));
    // The reads: runs of `order` read in one request, with the span of the
    // log each covers.
    let mut reads: Vec<(&[usize], u64, u64)> = Vec::new();
    let mut first = 0;
    while first < order.len() {
        let head = &pieces[order[first]].2;
        let (span_start, head_len) = head.payload();
        let mut span_end = span_start + head_len;
        let mut end = first + 1;
        while let Some(&i) = order.get(end) {
            let pinned = &pieces[i].2;
            let (start, len) = pinned.payload();
            let joins = pinned.same_region(head)
                && start.saturating_sub(span_end) <= SPAN_GAP_MAX_BYTES
                && (start + len).max(span_end) - span_start <= SPAN_MAX_BYTES;
            if !joins {
                break;
            }
            span_end = span_end.max(start + len);
            end += 1;
        }
        reads.push((&order[first..end], span_start, span_end));
        first = end;
    }
    // Each read gives its pieces' bytes, copied into place below.
    let read = |&(wanted, span_start, span_end): &(&[usize], u64, u64)| -> io::Result<Copied> {
        let mut out: Copied = Vec::with_capacity(wanted.len());
        if let [i] = wanted {
            // One record: read its payload alone, as a read does.
            let mut bytes = vec![0; pieces[*i].1 as usize];
            pieces[*i].2.copy_to(&mut bytes)?;
            out.push((*i, bytes));
            return Ok(out);
        }
        let head = &pieces[wanted[0]].2;
        let mut span = vec![0; (span_end - span_start) as usize];
        head.read_span(span_start, &mut span)?;
        let mut checked = None;
        for &i in wanted {
            let pinned = &pieces[i].2;
            let record = pinned.payload().0;
            let mut bytes = vec![0; pieces[i].1 as usize];
            pinned.copy_from_span(&span, span_start, checked == Some(record), &mut bytes)?;
            checked = Some(record);
            out.push((i, bytes));
        }
        Ok(out)
    };
    // The same pool as the write-back's runs, with no order to keep: each
    // read passes its turn at once.
    let copied = in_order(READS_IN_FLIGHT, reads.len(), |k, turn| {
        drop(turn);
        read(&reads[k])
    })?;
    for (i, bytes) in copied.into_iter().flatten() {
        let (stretch, at) = places[i];
        stretches[stretch].1[at..at + bytes.len()].copy_from_slice(&bytes);
    }
    Ok(stretches)
}

/// Why a run's write-back stopped.
pub(super) enum StretchError {
    /// Copying a payload out of the log failed (InvalidData: corrupt).
    Copy(io::Error),
    /// The capacity tier refused a write.
    Write(io::Error),
}

/// Write copied stretches to `handle`, each timed by `meter`
/// (traffic.rs); `before_write(i, bytes)` runs before the `i`th write (the
/// bandwidth cap, the turn).
pub(super) fn write_copied(
    meter: &TrafficMeter,
    handle: &dyn BackendFile,
    stretches: &[(u64, Vec<u8>)],
    mut before_write: impl FnMut(usize, u64),
) -> (u64, Result<(), StretchError>) {
    let mut written = 0u64;
    for (i, (start, buf)) in stretches.iter().enumerate() {
        before_write(i, buf.len() as u64);
        let begun = meter.begin(handle, *start, buf.len() as u64);
        let result = handle.write_at(buf, *start);
        meter.end(begun, result.is_ok());
        if let Err(e) = result {
            return (written, Err(StretchError::Write(e)));
        }
        written += buf.len() as u64;
    }
    (written, Ok(()))
}

/// Copy `pieces` (file order) out of the log and write them to `handle`
/// one after the other, one write per stretch of file-contiguous bytes,
/// outside the gate: for a file's bytes written before its name goes
/// (files.rs), a rare path. Returns the bytes written, and why it stopped.
pub(super) fn write_stretches(
    meter: &TrafficMeter,
    handle: &dyn BackendFile,
    pieces: &[(u64, u64, Located)],
) -> (u64, Result<(), StretchError>) {
    match copy_stretches(pieces) {
        Ok(stretches) => write_copied(meter, handle, &stretches, |_, _| {}),
        Err(e) => (0, Err(StretchError::Copy(e))),
    }
}

/// Write `pieces` (file order, pinned) to `handle` as a sync does: in runs
/// of at most `flush.run_max`, `flush.writers` in flight, in file order,
/// holding the write-back gate (`background`: giving way to syncs at each
/// run instead), then `then` (the capacity file's sync). With nothing to
/// write, only `then`, without the gate.
/// Returns the bytes written, and why it stopped early.
pub(super) fn write_back(
    shared: &Shared,
    handle: &dyn BackendFile,
    pieces: &[(u64, u64, Located)],
    background: bool,
    then: impl FnOnce() -> io::Result<()>,
) -> (u64, Result<(), StretchError>) {
    if pieces.is_empty() {
        return (0, then().map_err(StretchError::Write));
    }
    let runs = runs_of(pieces, shared.config.flush_run_max_bytes);
    let written = std::sync::atomic::AtomicU64::new(0);
    // A sync holds the gate; a background pass, like the flusher, lets
    // any sync go first at each of its runs.
    let _hold = (!background).then(|| shared.writeback.sync());
    let result = in_order(
        shared.config.flush_writers as usize,
        runs.len(),
        |i, turn| {
            let stretches = copy_stretches(runs[i]).map_err(StretchError::Copy)?;
            turn.wait();
            if background {
                shared.writeback.background();
            }
            let mut turn = Some(turn);
            let last = stretches.len().saturating_sub(1);
            let (bytes, result) = write_copied(&shared.traffic, handle, &stretches, |j, _| {
                if j == last {
                    drop(turn.take());
                }
            });
            written.fetch_add(bytes, Ordering::Relaxed);
            result
        },
    )
    .and_then(|_| then().map_err(StretchError::Write));
    (written.into_inner(), result)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    fn starts(runs: &[&[(u64, u64, ())]]) -> Vec<Vec<u64>> {
        runs.iter()
            .map(|run| run.iter().map(|p| p.0).collect())
            .collect()
    }

    #[test]
    fn runs_merge_contiguous_pieces_of_any_size_up_to_the_cap() {
        // IO500's ior-hard: 47,008-byte records, contiguous once sorted.
        let record = 47_008u64;
        let pieces: Vec<(u64, u64, ())> = (0..100).map(|i| (i * record, record, ())).collect();
        let runs = runs_of(&pieces, 4 << 20);
        let per_run = (4u64 << 20) / record;
        assert_eq!(runs.len() as u64, 100_u64.div_ceil(per_run));
        assert!(runs.iter().all(|r| r.len() as u64 <= per_run));
        assert_eq!(runs.iter().map(|r| r.len()).sum::<usize>(), 100);
        // A gap cuts a run; a piece larger than the cap is a run alone.
        let pieces = [
            (0, 10, ()),
            (10, 10, ()),
            (30, 10, ()),
            (40, 100, ()),
            (140, 5, ()),
        ];
        assert_eq!(
            starts(&runs_of(&pieces, 50)),
            vec![vec![0, 10], vec![30], vec![40], vec![140]]
        );
        assert!(runs_of::<()>(&[], 50).is_empty());
    }

    #[test]
    fn syncs_are_served_in_ticket_order_and_the_flusher_after_them() {
        let gate = Arc::new(WritebackGate::default());
        let order = Arc::new(Mutex::new(Vec::new()));
        let first = gate.sync();
        let waiters: Vec<_> = (0..3)
            .map(|i| {
                let (shared_gate, order) = (Arc::clone(&gate), Arc::clone(&order));
                let handle = std::thread::spawn(move || {
                    let _hold = shared_gate.sync();
                    order.lock().unwrap().push(i);
                });
                // Each takes its ticket before the next starts.
                while gate.tickets.lock().unwrap().0 < i + 2 {
                    std::thread::yield_now();
                }
                handle
            })
            .collect();
        let flusher = {
            let (gate, order) = (Arc::clone(&gate), Arc::clone(&order));
            std::thread::spawn(move || {
                gate.background();
                order.lock().unwrap().push(99);
            })
        };
        std::thread::sleep(Duration::from_millis(20));
        assert!(order.lock().unwrap().is_empty(), "all wait for the first");
        drop(first);
        for w in waiters {
            w.join().unwrap();
        }
        flusher.join().unwrap();
        assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 99]);
    }
}
