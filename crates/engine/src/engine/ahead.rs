//! Buffered bytes already on the capacity tier (docs/engine.md, "Bytes
//! written ahead of their region").
//!
//! A flush run writes every byte buffered in its range, its own regions'
//! and, in the gaps between them, newer bytes of regions that are not
//! flushing yet (`flush_runs_filled`). Those bytes stay indexed until
//! their own region flushes. Each run notes its range and a sequence
//! bound: every piece in the range below the bound is on the capacity file
//! (synced once the run's flush set retires). A later flush run or sync skips
//! those pieces instead of writing them again, one short write each where
//! the ranks of a shared file were ragged when the region filled.
//!
//! Only this process's memory holds the notes: after a crash the log's
//! records are replayed and written again, the same bytes (as a gap's
//! bytes always were before the notes). The notes are forgotten when the
//! capacity tier is not healthy (a replaced tier does not hold them), and
//! the unsynced ones when a flush fails.

use std::ops::Range;

use sluice_policy::extent_index::Piece;
use sluice_policy::{FileId, LogLocation};

use super::State;

/// One flush run's bytes on the capacity file: the pieces in `range`
/// with a sequence number below `bound`.
#[derive(Clone, Debug)]
pub(super) struct Ahead {
    range: Range<u64>,
    bound: u64,
    /// The run's flush set synced the capacity file and retired. Before
    /// that, the runs of the same set (which syncs the file before it
    /// retires) and syncs (which sync it themselves) count on it; a flush
    /// that fails drops it.
    synced: bool,
}

/// The sequence bound for a lookup of `id` now: every record of the file
/// below it is indexed (a record reserved but still being appended has a
/// sequence number at or past it), so the lookup saw every piece below it.
pub(super) fn bound(state: &State, id: FileId) -> u64 {
    let next = state.buffer.next_seq();
    state
        .buffer
        .first_in_flight(id)
        .map_or(next, |first| first.min(next))
}

/// Every piece of `range` below `bound` is on the capacity file, and
/// `synced` says whether that file was synced since.
fn push(state: &mut State, id: FileId, range: Range<u64>, bound: u64, synced: bool) {
    if range.is_empty() {
        return;
    }
    state.ahead.entry(id).or_default().push(Ahead {
        range,
        bound,
        synced,
    });
}

/// A flush run wrote every piece of `range` below `bound`, not synced yet.
pub(super) fn note(state: &mut State, id: FileId, range: Range<u64>, bound: u64) {
    push(state, id, range, bound, false);
}

/// A sync wrote every piece of `range` below `bound` and synced the
/// capacity file: a flush run that looks the range up before the sync's
/// clean record drops those pieces from the index skips them
/// ([`forget_sync`] once it has).
pub(super) fn note_sync(state: &mut State, id: FileId, range: Range<u64>, bound: u64) {
    push(state, id, range, bound, true);
}

/// The sync's clean record is in (or could not be taken): its note of
/// [`note_sync`] goes. A flush that comes later finds the pieces gone from
/// the index, or writes them again if the record failed (as before the
/// note; the bytes are the same).
pub(super) fn forget_sync(state: &mut State, id: FileId, range: &Range<u64>, bound: u64) {
    let Some(list) = state.ahead.get_mut(&id) else {
        return;
    };
    if let Some(i) = list
        .iter()
        .position(|a| a.synced && a.bound == bound && a.range == *range)
    {
        list.swap_remove(i);
    }
    if list.is_empty() {
        state.ahead.remove(&id);
    }
}

/// Whether the piece of `len` bytes at `offset` from the record with
/// sequence number `seq` is on the capacity file.
fn covered(state: &State, id: FileId, offset: u64, len: u64, seq: u64) -> bool {
    let end = offset.saturating_add(len);
    state.ahead.get(&id).is_some_and(|notes| {
        notes
            .iter()
            .any(|a| seq < a.bound && a.range.start <= offset && end <= a.range.end)
    })
}

/// The pieces of `id` buffered in `offset..offset + len` that still have to
/// be written, `(file_offset, len, location)` in file order, and whether
/// any piece was left out because a flush run wrote it already (the caller
/// then syncs the capacity file: the run's set may not have yet).
pub(super) fn pieces_to_write(
    state: &State,
    id: FileId,
    offset: u64,
    len: u64,
) -> (Vec<(u64, u64, LogLocation)>, bool) {
    let mut skipped = false;
    let pieces = state
        .buffer
        .buffered_pieces_where(id, offset, len, |at, n, _, seq| {
            let written = covered(state, id, at, n, seq);
            skipped |= written;
            !written
        });
    (pieces, skipped)
}

/// A flush set retired: every capacity file its runs wrote was synced.
/// Notes whose pieces have all left the index since are dropped.
pub(super) fn settle(state: &mut State) {
    let mut notes = std::mem::take(&mut state.ahead);
    for (&id, list) in &mut notes {
        list.retain_mut(|a| {
            a.synced = true;
            let len = a.range.end - a.range.start;
            state
                .buffer
                .lookup(id, a.range.start, len)
                .any(|piece| matches!(piece, Piece::Buffered { seq, .. } if seq < a.bound))
        });
    }
    notes.retain(|_, list| !list.is_empty());
    state.ahead = notes;
}

/// Whether a flush run wrote to `id`'s capacity file since that file was
/// last synced (its set not retired yet, or the sync that counted on it
/// not done): the file's length may then be one a power cut takes back.
pub(super) fn unsynced(state: &State, id: FileId) -> bool {
    state
        .ahead
        .get(&id)
        .is_some_and(|list| list.iter().any(|a| !a.synced))
}

/// A flush failed: what its runs wrote may not be durable.
pub(super) fn forget_unsynced(state: &mut State) {
    state.ahead.retain(|_, list| {
        list.retain(|a| a.synced);
        !list.is_empty()
    });
}

/// The capacity tier is not healthy (lost, read-only, replaced): what
/// was written to it is not counted on.
pub(super) fn forget_all(state: &mut State) {
    state.ahead.clear();
}
