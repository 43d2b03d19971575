//! A failing fast tier (docs/engine.md, "A failing fast tier"): an append
//! to the log that fails (its file system is full, the device returns EIO)
//! does not fail the application's write. The write buffer decides what
//! follows (`sluice_policy::write_buffer`, "A failing fast tier"): the
//! region is closed at the failed record, data writes go to the capacity
//! tier for a while (doubling from `FAST_RETRY_MIN` to `FAST_RETRY_MAX`
//! while the failures go on), and a write whose range overlaps buffered
//! bytes first waits until no log copy of those bytes can be replayed
//! over it. This module carries it out: the hole's place, the report,
//! the wait.
//!
//! Why the region is closed: the failed record leaves a hole (zeros, or a
//! record whose checksum fails) after the last commit, where recovery ends
//! the region (a torn tail). A record placed behind the hole would be
//! dropped at recovery, so no record may be placed there: records already
//! in flight behind it take the capacity tier too, and an fsync of a file
//! with indexed bytes behind a hole waits for that region's reset.
//!
//! Why the wait (the overlap rule): recovery replays every record still in
//! the log. Bytes written to the capacity tier over an older buffered copy
//! would be overwritten by that copy's replay after a crash, so they are
//! written only once every region holding a copy has been flushed and
//! reset (regions reset oldest first, so older copies went before).

use std::io;

use sluice_policy::{FileId, RegionId};

use crate::log::{RecordHeader, RecordKind};

use super::append::append_error;
use super::flush::flush_until;
use super::{Shared, State, FORCED_WAIT_MAX};

/// An append at `at` in `region` failed with `e`: close the region there,
/// send data writes to the capacity tier until the retry time, count and
/// report it. Returns the error with its context.
pub(super) fn fast_append_failed(
    shared: &Shared,
    state: &mut State,
    region: RegionId,
    at: u64,
    e: io::Error,
) -> io::Error {
    let log_region = &mut state.regions[region.0 as usize];
    log_region.broken_at = Some(log_region.broken_at.map_or(at, |b| b.min(at)));
    let backoff = state.buffer.append_failed(shared.clock.now(), region);
    state.stats.fast_errors += 1;
    let e = append_error(shared, e);
    state.stats.last_fast_error = Some(e.to_string());
    shared
        .incidents
        .record_error("append", None, Some("fast"), &e);
    tracing::warn!(
        region = region.0,
        for_s = backoff.as_secs(),
        "region closed after a failed append; data writes go to the capacity tier meanwhile"
    );
    // The closed region is full: the flusher may take it.
    shared.changed.notify_all();
    e
}

/// An append to the log worked: after a failure, the retry time passed and
/// the fast tier takes records again.
pub(super) fn fast_append_worked(state: &mut State) {
    if state.buffer.append_worked() {
        tracing::info!("the fast tier takes log records again");
    }
}

/// Each region holding a buffered piece of `file` in `offset..offset+len`
/// (with `behind_hole`: only pieces behind a failed append of their
/// region), with its generation now.
pub(super) fn regions_holding(
    state: &State,
    file: FileId,
    offset: u64,
    len: u64,
    behind_hole: bool,
) -> Vec<(RegionId, u64)> {
    let mut regions: Vec<(RegionId, u64)> = state
        .buffer
        .buffered_pieces(file, offset, len, None)
        .into_iter()
        .filter(|(_, _, location)| {
            !behind_hole
                || state.regions[location.region.0 as usize]
                    .broken_at
                    .is_some_and(|b| location.offset > b)
        })
        .map(|(_, _, location)| {
            let region = location.region;
            (region, state.regions[region.0 as usize].file.generation())
        })
        .collect();
    regions.sort_unstable();
    regions.dedup();
    regions
}

/// Wait until every region of `regions` (each with the generation it had)
/// has been reset, flushing as a drain does meanwhile. Fails after
/// [`FORCED_WAIT_MAX`] with `what` and the flusher's last error.
pub(super) fn wait_reset(
    shared: &Shared,
    regions: &[(RegionId, u64)],
    what: &str,
) -> io::Result<()> {
    let reset = |state: &State| {
        regions
            .iter()
            .all(|&(r, generation)| state.regions[r.0 as usize].file.generation() != generation)
    };
    if regions.is_empty() || reset(&sluice_env::lock(&shared.state)) {
        return Ok(());
    }
    flush_until(shared, what, Some(FORCED_WAIT_MAX), reset)
}

/// A record (`header`) could not be appended (`cause`). What makes it
/// safe to go on without it: the regions to wait for (their reset) and
/// what to say if that wait fails; `None` if nothing does.
///
/// - A data record goes to the capacity tier instead, once no region holds
///   an older copy of its range (the overlap rule above).
/// - A truncate, unlink or path record is not needed once no region holds
///   any byte of the file (each flushed to the capacity tier, then reset):
///   recovery has nothing of it to replay, and its next record comes with
///   a new path record.
/// - A commit or clean record cannot be done without.
pub(super) fn fallback_wait(
    state: &State,
    header: &RecordHeader,
    cause: &io::Error,
) -> Option<(Vec<(RegionId, u64)>, String)> {
    let file = header.file_id;
    match header.kind {
        RecordKind::Data => Some((
            regions_holding(state, file, header.offset, u64::from(header.len), false),
            format!("write after a fast tier failure ({cause})"),
        )),
        RecordKind::Truncate | RecordKind::Unlink | RecordKind::Path => Some((
            regions_holding(state, file, 0, u64::MAX, false),
            format!("after a fast tier failure ({cause})"),
        )),
        RecordKind::Commit | RecordKind::Clean => None,
    }
}

/// The wait [`fallback_wait`] asked for is over: a data record's bytes are
/// counted (the caller writes them to the capacity tier); any other
/// record's file gets a new path record with its next one.
pub(super) fn fell_back(state: &mut State, header: &RecordHeader) {
    match header.kind {
        RecordKind::Data => state.stats.fast_fallback_bytes += u64::from(header.len),
        _ => state.buffer.forget_descriptions(header.file_id),
    }
}
