//! The clean cache (docs/engine.md, "The clean cache"; issue 33): bytes
//! written back to the capacity tier stay readable from their region of
//! the log until the region is filled again, as a write-back cache keeps
//! clean lines. A restart that reads a checkpoint right after it was
//! written (and drained, or closed under close-to-open) reads it from the
//! fast tier.
//!
//! Where the copies come from: the write buffer moves an extent into its
//! cache when it leaves the index because its bytes are on the capacity
//! tier, synced (a region's flush, a file's write-back behind a clean
//! record), and drops cached bytes that a write, a truncate or an unlink
//! supersedes. A flushed region is *retired* instead of emptied: its header
//! is rewritten in place with a first sequence past every record in it, so
//! recovery replays none of them (log/scan.rs), while the bytes stay.
//!
//! When a copy is dropped:
//! - its region is filled again ([`reuse`]): every copy in it, at once;
//! - this node writes over it, truncates or removes the file (the write
//!   buffer);
//! - the capacity file changed behind it ([`check`]): its identity, size,
//!   modification or change time differ from the stamp ([`ChangeStamp`]) taken when the
//!   copies were last known to match it (after this node's own write-back
//!   of the file synced). Checked when the file is opened, when its size is
//!   read again (a getattr after the attribute timeout, a read past the
//!   known end), and when a lock is granted.
//!
//! INVARIANTS:
//! - a clean extent lies inside a data record of its region's `records`,
//!   which is cleared only together with the region's clean extents;
//! - a file has clean copies only while it has a stamp; a stamp is
//!   replaced only after a check of the old one against the capacity file
//!   (the first of this node's writers of the file checks before it
//!   writes, [`begin_own_write`]; the last stamps, [`end_own_write`]) or
//!   when the file had none; while one of them runs, no check is made
//!   (this node's own writes would look like another node's);
//! - a clean read copied while its region was filled again is not served
//!   (`reuses`): its bytes are read from the capacity tier instead.
//!
//! Recovery keeps no clean copies: the cache starts empty after a restart.

use std::io;

use sluice_env::Stat;
use sluice_policy::extent_index::Piece;
use sluice_policy::{FileId, RegionId};

use super::holds::{Hold, OwnWrite, Pin};
use super::read::{pin, unpin, Located};
use super::{ChangeStamp, Shared, State};

/// The capacity file of `id` as it is now, if the backend can tell.
fn stamp_now(state: &State, id: FileId) -> Option<ChangeStamp> {
    let open = state.files.get(&id)?;
    open.handle.stat().ok().map(|stat| ChangeStamp::of(&stat))
}

/// Drop `id`'s clean copies if its capacity file is no longer the one they
/// were taken from: `now` (a stat just made), else an `fstat` of its
/// handle. Returns whether copies were dropped.
pub(super) fn check(state: &mut State, id: FileId, now: Option<ChangeStamp>) -> bool {
    if !state.buffer.has_cached(id) {
        return false;
    }
    if own_writes_running(state, id) {
        // This node's own writes are landing: the capacity file cannot be
        // compared now; the last of them stamps it when it ends.
        return false;
    }
    let now = now.or_else(|| stamp_now(state, id));
    let then = state.stamps.get(&id).copied();
    if now.is_some() && then == now {
        return false;
    }
    tracing::debug!(
        file = id.0,
        ?then,
        ?now,
        "clean copies dropped: the capacity file changed"
    );
    forget_file(state, id);
    state.stats.cache_stale_drops += 1;
    true
}

/// Whether one of this node's writers of `id`'s capacity file runs
/// ([`begin_own_write`]).
fn own_writes_running(state: &State, id: FileId) -> bool {
    state
        .files
        .get(&id)
        .is_some_and(|open| open.own_writers > 0)
}

/// Every clean copy of `id` goes.
pub(super) fn forget_file(state: &mut State, id: FileId) {
    state.buffer.forget_cached_file(id);
    state.stamps.remove(&id);
}

/// This node starts writing `id`'s capacity file (a flush, a write-back, a
/// straight write, a truncate). The first such writer compares the copies
/// with the capacity file first: copies that no longer match it go
/// (another node wrote it since the last stamp), so the stamp taken when
/// the last writer ends vouches for this node's bytes only. The hold is
/// given back by [`end_own_write`].
pub(super) fn begin_own_write(state: &mut State, id: FileId) -> Hold<OwnWrite> {
    check(state, id, None);
    Hold::take(state, id)
}

/// A writer of [`begin_own_write`] ended (its writes landed, or failed):
/// the last one stamps the capacity file as it is now.
pub(super) fn end_own_write(state: &mut State, writer: Hold<OwnWrite>) {
    let id = writer.key();
    if writer.give_back(state) == Some(0) {
        restamp(state, id);
    }
}

/// What the cache holds of `id` matches its capacity file as it is now
/// (this node's own writes to it ended, or none ran).
pub(super) fn restamp(state: &mut State, id: FileId) {
    if own_writes_running(state, id) {
        return;
    }
    if !state.buffer.has_cached(id) {
        state.stamps.remove(&id);
        return;
    }
    match stamp_now(state, id) {
        Some(stamp) => {
            state.stamps.insert(id, stamp);
        }
        // Nothing to check them against later: not kept.
        None => forget_file(state, id),
    }
}

/// `region` is about to be filled again (the first record placed in it
/// since it was retired): its clean copies go, and a read copying one now
/// will not be served.
pub(super) fn reuse(state: &mut State, region: RegionId) {
    let log_region = &mut state.regions[region.0 as usize];
    if !log_region.cached {
        return;
    }
    log_region.cached = false;
    log_region.reuses += 1;
    log_region.records.clear();
    state.mirror.forget_region(region);
    if state.buffer.forget_cached_region(region) > 0 {
        // Files left without copies need no stamp, and a forgotten one no
        // parking place.
        let buffer = &state.buffer;
        state.stamps.retain(|id, _| buffer.has_cached(*id));
        state.parked.retain(|_, id| buffer.has_cached(*id));
    }
}

/// The engine forgets `id` (no open, nothing buffered): keep its clean
/// copies under its capacity identity, for the next open.
pub(super) fn park(state: &mut State, id: FileId, identity: Option<(u64, u64)>) {
    match identity {
        Some(identity) if state.buffer.has_cached(id) && state.stamps.contains_key(&id) => {
            if let Some(old) = state.parked.insert(identity, id) {
                if old != id {
                    forget_file(state, old);
                }
            }
        }
        _ => forget_file(state, id),
    }
}

/// An open of the capacity file `stat` describes: the id its clean copies
/// were parked under, if they still match it (dropped otherwise).
///
/// A parked id is never an open file's: it is parked when the engine
/// forgets the file and leaves the parking place when it is opened again.
pub(super) fn unpark(state: &mut State, stat: &Stat) -> Option<FileId> {
    let id = state.parked.remove(&stat.identity())?;
    if state.stamps.get(&id) != Some(&ChangeStamp::of(stat)) {
        tracing::debug!(
            file = id.0,
            then = ?state.stamps.get(&id),
            now = ?ChangeStamp::of(stat),
            "parked clean copies dropped: the capacity file changed"
        );
        forget_file(state, id);
        state.stats.cache_stale_drops += 1;
        return None;
    }
    Some(id)
}

/// The last name of the capacity file `identity` names goes: so do the
/// clean copies parked for it.
pub(super) fn forget_parked(state: &mut State, identity: (u64, u64)) {
    if let Some(id) = state.parked.remove(&identity) {
        forget_file(state, id);
    }
}

/// A clean copy being read outside the lock.
pub(super) struct CachedRead {
    /// Where in the caller's buffer, and how long.
    pub(super) start: usize,
    pub(super) len: usize,
    /// The file offset (read from the capacity tier if not served).
    pub(super) file_offset: u64,
    pub(super) located: Located,
    /// The region's pin, given back by [`settle`].
    pin: Hold<Pin>,
    /// The region's `reuses` when it was pinned.
    reuses: u64,
}

/// Split a hole of a read (`len` bytes at `file_offset`, at `start` in the
/// caller's buffer) into clean copies, pinned, and what is left for the
/// capacity tier.
pub(super) fn split_hole(
    state: &mut State,
    file: FileId,
    start: usize,
    file_offset: u64,
    len: u64,
    cached: &mut Vec<CachedRead>,
    holes: &mut Vec<(usize, usize, u64)>,
) {
    let pieces: Vec<Piece> = state.buffer.lookup_cached(file, file_offset, len).collect();
    for piece in pieces {
        let at = start + (piece.file_offset() - file_offset) as usize;
        match piece {
            Piece::Hole { file_offset, len } => holes.push((at, len as usize, file_offset)),
            Piece::Buffered {
                file_offset,
                len,
                location,
                ..
            } => {
                let reuses = state.regions[location.region.0 as usize].reuses;
                let (located, pin) = pin(state, location);
                cached.push(CachedRead {
                    start: at,
                    len: len as usize,
                    file_offset,
                    located,
                    pin,
                    reuses,
                });
            }
        }
    }
}

/// After the clean copies were copied (`copied[i]` for `cached[i]`):
/// unpin them, count the hits, and send every copy not served (its region
/// was filled again meanwhile, or it failed its checksum: then the file's
/// copies go) to the capacity tier with the holes.
pub(super) fn settle(
    shared: &Shared,
    state: &mut State,
    file: FileId,
    cached: Vec<CachedRead>,
    copied: &[io::Result<()>],
    holes: &mut Vec<(usize, usize, u64)>,
) {
    let mut corrupt = false;
    for (read, result) in cached.into_iter().zip(copied) {
        let region = read.pin.key();
        unpin(shared, state, read.pin);
        let reused = state.regions[region.0 as usize].reuses != read.reuses;
        match result {
            Ok(()) if !reused => state.stats.clean_read_bytes += read.len as u64,
            _ => {
                if !reused
                    && result
                        .as_ref()
                        .is_err_and(|e| e.kind() == io::ErrorKind::InvalidData)
                {
                    state.stats.corrupt_payloads += 1;
                    corrupt = true;
                }
                holes.push((read.start, read.len, read.file_offset));
            }
        }
    }
    if corrupt {
        forget_file(state, file);
    }
}
