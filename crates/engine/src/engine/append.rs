//! Appending to the log: data records placed by the write buffer (or
//! written to the capacity tier when it says so), records that must reach
//! the log, log syncs and commit records.

use std::io;
use std::sync::{Arc, MutexGuard};
use std::time::Duration;

use sluice_env::wait_while;
use sluice_policy::extent_index::Extent;
use sluice_policy::write_buffer::Placement;
use sluice_policy::{FileId, LogLocation, RegionId, Tier};

use crate::log::{record_len, RecordHeader, RecordKind, RegionFile, REGION_HEADER_BYTES};

use super::degrade::{
    fallback_wait, fast_append_failed, fast_append_worked, fast_degraded, fell_back, wait_reset,
};
use super::files::unknown;
use super::{cache, context, lock, Shared, State, FORCED_WAIT_MAX};

/// Write `data` at `offset` of `file`, routed to `tier`, record by record:
/// the write buffer places each in the log (a data record, indexed once
/// its payload is there) or on the capacity tier (written here).
pub(super) fn append_data<'a>(
    shared: &'a Shared,
    mut state: MutexGuard<'a, State>,
    file: FileId,
    offset: u64,
    data: &[u8],
    tier: Tier,
) -> (MutexGuard<'a, State>, io::Result<()>) {
    let chunk = shared.config.record_max_bytes as usize;
    let mut done = 0usize;
    while done < data.len() {
        let part = &data[done..(done + chunk).min(data.len())];
        let part_offset = offset + done as u64;
        // The payload's checksum is computed only once the write buffer
        // places the record in the log, outside the engine lock
        // (reserve_and_append): a write that goes to the capacity tier
        // needs none.
        // INVARIANT: a part is at most `record_max_bytes`, a u32.
        let len = u32::try_from(part.len()).expect("a part fits a record");
        let header = RecordHeader {
            kind: RecordKind::Data,
            file_id: file,
            offset: part_offset,
            len,
            payload_crc: 0,
            seq: 0,
        };
        let (s, appended) =
            reserve_and_append(shared, state, header, part, Some(file), Some(tier), true);
        state = s;
        match appended {
            Ok(Some((location, seq))) => {
                // A truncation newer than this record, made while it was
                // being written, clips it (as replay in sequence order
                // would); an unlinked file takes nothing.
                let limit = state.files.get(&file).map(|open| {
                    open.truncations
                        .iter()
                        .filter(|(t, _)| *t > seq)
                        .map(|(_, size)| *size)
                        .min()
                        .unwrap_or(u64::MAX)
                });
                let State {
                    files, placements, ..
                } = &mut *state;
                if let Some(open) = files.get(&file) {
                    placements.add(file, &open.path, Tier::Fast, part.len() as u64);
                }
                let len = match limit {
                    Some(limit) => limit.saturating_sub(part_offset).min(part.len() as u64),
                    None => 0,
                };
                if len > 0 {
                    state.buffer.insert(
                        file,
                        Extent {
                            file_offset: part_offset,
                            len: len as u32,
                            location,
                            seq,
                        },
                    );
                }
            }
            Ok(None) => {
                // Placed on the capacity tier: nothing buffered overlaps it.
                // Written outside the engine lock; the caller holds the
                // file's I/O lock, so this file's writes stay in order.
                // Clean copies of the range are superseded now (a copy may
                // have joined the cache while this write waited for an
                // older buffered copy to be flushed: degrade.rs).
                state
                    .buffer
                    .forget_cached(file, part_offset, part.len() as u64);
                // The file's other copies stay valid across this node's own
                // write: checked before it, stamped again after it.
                cache::begin_own_write(&mut state, file);
                let State {
                    files, placements, ..
                } = &mut *state;
                let Some(open) = files.get(&file) else {
                    return (state, Err(unknown(file)));
                };
                let handle = Arc::clone(&open.handle);
                placements.add(file, &open.path, Tier::Capacity, part.len() as u64);
                drop(state);
                let written = handle.write_at(part, part_offset);
                state = lock(shared);
                cache::end_own_write(&mut state, file);
                if let Err(e) = written {
                    let path = state.files.get(&file).map(|open| open.path.to_string());
                    let e = context(format!(
                        "capacity tier {}: write {}",
                        shared.capacity.describe(),
                        path.unwrap_or_else(|| format!("file {}", file.0))
                    ))(e);
                    return (state, Err(e));
                }
            }
            Err(e) => return (state, Err(e)),
        }
        done += part.len();
    }
    (state, Ok(()))
}

/// Append a record that must reach the log (truncate, unlink, path for a
/// rename), waiting for space; returns its sequence number.
pub(super) fn append_required<'a>(
    shared: &'a Shared,
    state: MutexGuard<'a, State>,
    header: RecordHeader,
    payload: &[u8],
    file: Option<FileId>,
) -> (MutexGuard<'a, State>, io::Result<u64>) {
    let (state, result) = reserve_and_append(shared, state, header, payload, file, None, true);
    (state, result.map(|r| r.map_or(0, |(_, seq)| seq)))
}

/// [`append_required`], but only if the log has room now: `WouldBlock`
/// instead of waiting. For the flusher's own records, which must not wait
/// for the room only the flusher makes.
pub(super) fn append_if_room<'a>(
    shared: &'a Shared,
    state: MutexGuard<'a, State>,
    header: RecordHeader,
    payload: &[u8],
) -> (MutexGuard<'a, State>, io::Result<u64>) {
    let (state, result) = reserve_and_append(shared, state, header, payload, None, None, false);
    (state, result.map(|r| r.map_or(0, |(_, seq)| seq)))
}

/// Place `header` + `payload` through the write buffer and append it,
/// preceded by a path record of `file` when the region does not describe
/// it yet. A data record (`tier` given: the route of its write) may be
/// placed on the capacity tier instead: then `None` is returned and nothing
/// was appended. Any other record must reach the log and waits for room
/// (unless `!wait`: then it fails with `WouldBlock` at once).
/// Returns the payload's location and the record's sequence number.
pub(super) fn reserve_and_append<'a>(
    shared: &'a Shared,
    mut state: MutexGuard<'a, State>,
    mut header: RecordHeader,
    payload: &[u8],
    file: Option<FileId>,
    tier: Option<Tier>,
    wait: bool,
) -> (
    MutexGuard<'a, State>,
    io::Result<Option<(LogLocation, u64)>>,
) {
    let record = record_len(header.len);
    let mut first_attempt = None;
    loop {
        // Looked up at every try: a rename while this record waited for
        // room changes the name its path record must carry.
        // `in_flight`: records of the file other writers are still writing
        // (writes of one file run at once, `Engine::write`): not indexed
        // yet, so the write buffer treats them as overlapping.
        // A caller waits for the file's records in flight to land
        // (`quiescing`): a new one waits for it.
        let quiescing = file
            .and_then(|id| state.files.get(&id))
            .is_some_and(|open| open.quiescing > 0);
        if quiescing && header.kind == RecordKind::Data {
            state = shared
                .changed
                .wait_timeout(state, Duration::from_millis(10))
                .unwrap_or_else(|e| e.into_inner())
                .0;
            continue;
        }
        let (path_len, nameless, in_flight) = match file {
            Some(id) => match state.files.get(&id) {
                Some(open) => (
                    record_len(open.path.as_str().len() as u32),
                    open.unlinked,
                    // A name-less file indexes nothing (append_data).
                    !open.appending.is_empty() && !open.unlinked,
                ),
                None => return (state, Err(unknown(id))),
            },
            None => (0, false, false),
        };
        let now = shared.clock.now();
        // The same instant as `now` on the first try: the pipeline counts
        // a wait when the two are equal.
        let first_attempt = *first_attempt.get_or_insert(now);
        let full_before = state.buffer.pipeline().full_count();
        // A name-less file takes no log record (module docs of `OpenFile`),
        // and has nothing buffered for a write to overlap.
        // While the fast tier is failing (degrade.rs), data writes take the
        // capacity tier unless they overlap buffered bytes.
        let degraded = fast_degraded(shared, &state);
        let tier = tier.map(|tier| {
            if nameless || degraded {
                Tier::Capacity
            } else {
                tier
            }
        });
        let placement = match (tier, file) {
            (Some(tier), Some(id)) => state.buffer.place_write(
                now,
                id,
                header.offset,
                u64::from(header.len),
                record,
                path_len,
                tier,
                first_attempt,
                in_flight,
            ),
            _ => state
                .buffer
                .place_required(now, file, record, path_len, first_attempt),
        };
        match placement {
            Placement::Log(reservation) => {
                let region = reservation.region;
                // Filled again: its clean copies go before any byte lands.
                cache::reuse(&mut state, region);
                state.regions[region.0 as usize].appends += 1;
                let mut at = REGION_HEADER_BYTES + reservation.offset;
                let describe = reservation.describe.zip(file).and_then(|(seq, id)| {
                    state
                        .files
                        .get(&id)
                        .map(|open| (seq, id, open.path.clone(), open.ino))
                });
                if let Some((seq, id, path, ino)) = describe {
                    let path_header = match RecordHeader::path(id, &path, seq) {
                        Ok(h) => h.with_identity(ino.map_or(0, |(_, ino)| ino)),
                        Err(e) => {
                            return (
                                state,
                                Err(io::Error::new(io::ErrorKind::InvalidInput, e.to_string())),
                            )
                        }
                    };
                    let log_region = &mut state.regions[region.0 as usize];
                    if let Err(e) =
                        log_region
                            .file
                            .append_at(at, &path_header, path.as_str().as_bytes())
                    {
                        let e = fast_append_failed(shared, &mut state, region, at, e);
                        return fall_back_or_fail(shared, state, &header, e);
                    }
                    at += path_header.record_len();
                }
                debug_assert_eq!(at, REGION_HEADER_BYTES + reservation.record_offset);
                header.seq = reservation.seq;
                let log_region = &mut state.regions[region.0 as usize];
                let mut copy = None;
                if header.kind == RecordKind::Data {
                    // The payload is written outside the lock; the index
                    // learns of it only once it is there (append_data).
                    log_region.in_flight.insert(header.seq);
                    let region_file = Arc::clone(&log_region.file);
                    let mirrored = state.mirror.enabled();
                    if let Some(open) = file.and_then(|id| state.files.get_mut(&id)) {
                        open.appending.insert(header.seq);
                    }
                    drop(state);
                    header.payload_crc = crc32c::crc32c(payload);
                    let written = region_file.append_at(at, &header, payload);
                    // The memory copy (mirror.rs), made outside the lock.
                    copy = (mirrored && written.is_ok()).then(|| Arc::<[u8]>::from(payload));
                    state = lock(shared);
                    let log_region = &mut state.regions[region.0 as usize];
                    // Waiters look at the oldest record in flight of each
                    // region (`appends_in_flight`, the flusher): wake them when
                    // it lands.
                    let oldest = log_region.in_flight.first() == Some(&header.seq);
                    log_region.in_flight.remove(&header.seq);
                    if let Some(open) = file.and_then(|id| state.files.get_mut(&id)) {
                        open.appending.remove(&header.seq);
                        if open.appending.is_empty() {
                            open.truncations.clear();
                        }
                    }
                    if oldest {
                        shared.changed.notify_all();
                    }
                    if let Err(e) = written {
                        let e = fast_append_failed(shared, &mut state, region, at, e);
                        return fall_back_or_fail(shared, state, &header, e);
                    }
                    // An append before this one in the region failed while
                    // this one was being written: recovery ends the region
                    // at that hole, so this record must not be relied on.
                    let hole = state.regions[region.0 as usize].broken_at;
                    if let Some(hole) = hole.filter(|&hole| hole < at) {
                        let e = io::Error::other(format!(
                            "fast tier {}: an earlier append to region {} at {hole} failed",
                            shared.fast.describe(),
                            region.0
                        ));
                        return fall_back_or_fail(shared, state, &header, e);
                    }
                } else if let Err(e) = log_region.file.append_at(at, &header, payload) {
                    let e = fast_append_failed(shared, &mut state, region, at, e);
                    return fall_back_or_fail(shared, state, &header, e);
                }
                fast_append_worked(&mut state);
                let log_region = &mut state.regions[region.0 as usize];
                log_region.dirty = true;
                let payload_offset = at + crate::log::RECORD_HEADER_BYTES;
                if header.kind == RecordKind::Data {
                    log_region
                        .records
                        .insert(payload_offset, (header.len, header.payload_crc));
                    if let Some(copy) = copy {
                        state.mirror.keep(region, payload_offset, copy);
                    }
                }
                // Wake the flusher only when a region filled: waking it at
                // every append costs a context switch and lock contention
                // per write (docs/benchmarks.md, absorption).
                if state.buffer.pipeline().full_count() > full_before {
                    shared.changed.notify_all();
                }
                let location = LogLocation {
                    region,
                    offset: payload_offset,
                };
                return (state, Ok(Some((location, header.seq))));
            }
            Placement::Capacity => return (state, Ok(None)),
            Placement::Wait { .. } if !wait => {
                let e = io::Error::new(io::ErrorKind::WouldBlock, "no room in the log now");
                return (state, Err(e));
            }
            Placement::Wait { retry_at_latest } => {
                if now.saturating_since(first_attempt) > FORCED_WAIT_MAX {
                    // Only records that must reach the log wait this long;
                    // others go through after `wait_max`.
                    let message = format!(
                        "fast tier {} is full and has not freed a region for {} s; is the capacity tier failing? ({})",
                        shared.fast.describe(),
                        FORCED_WAIT_MAX.as_secs(),
                        state.stats.last_flush_error.clone().unwrap_or_default()
                    );
                    return (
                        state,
                        Err(io::Error::new(io::ErrorKind::StorageFull, message)),
                    );
                }
                // Wake the flusher (the starvation guard lets it flush now).
                shared.changed.notify_all();
                let wait = retry_at_latest
                    .saturating_since(now)
                    .clamp(Duration::from_millis(1), Duration::from_millis(100));
                state = shared
                    .changed
                    .wait_timeout(state, wait)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
            Placement::TooLarge => {
                let message = format!(
                    "fast tier {}: no room for a {} B record",
                    shared.fast.describe(),
                    record + path_len
                );
                return (
                    state,
                    Err(io::Error::new(io::ErrorKind::StorageFull, message)),
                );
            }
        }
    }
}

/// A record could not be appended (`e`), and `None` is returned once that
/// is safe (degrade.rs): a data record goes to the capacity tier instead,
/// and the caller writes it there; a truncate, unlink or path record of a
/// file is not needed once no region holds any of the file's bytes, so the
/// caller goes on without it. A commit or clean record fails with `e`.
fn fall_back_or_fail<'a>(
    shared: &'a Shared,
    state: MutexGuard<'a, State>,
    header: &RecordHeader,
    e: io::Error,
) -> (
    MutexGuard<'a, State>,
    io::Result<Option<(LogLocation, u64)>>,
) {
    // A clean record only saves a later flush the same bytes: its caller
    // keeps them buffered (sync.rs).
    let Some((holding, what)) = fallback_wait(&state, header, &e) else {
        return (state, Err(e));
    };
    let mut state = state;
    if !holding.is_empty() {
        drop(state);
        let settled = wait_reset(shared, &holding, &what);
        state = lock(shared);
        if let Err(e) = settled {
            return (state, Err(e));
        }
    }
    fell_back(&mut state, header);
    (state, Ok(None))
}

pub(super) fn append_error(shared: &Shared, e: io::Error) -> io::Error {
    io::Error::new(
        e.kind(),
        format!(
            "fast tier {}: append to the log: {e}",
            shared.fast.describe()
        ),
    )
}

/// Whether a data record reserved before now is being written outside
/// the lock, so a sync covers a hole-free prefix of every region up to
/// every record placed so far. Records reserved meanwhile lie past them
/// (sequence numbers and offsets grow together in a region, and regions
/// fill in turn) and are not waited for: under writers that keep records
/// in flight without pause (eight IOR ranks), waiting for none in flight
/// at all held a close-to-open write-back's clean record, and with it the
/// flusher, until the burst ended (issue 32, docs/engine.md).
///
/// The condition to wait on (`wait_while(&shared.changed, state, None,
/// appends_in_flight(&state))`): true while one is.
pub(super) fn appends_in_flight(state: &State) -> impl FnMut(&mut State) -> bool {
    let bound = state.buffer.next_seq();
    move |state| {
        state
            .regions
            .iter()
            .any(|r| r.in_flight.first().is_some_and(|&seq| seq < bound))
    }
}

/// Sync every log region appended to since its last sync. Callers first
/// wait out [`appends_in_flight`].
pub(super) fn sync_log(shared: &Shared, state: &mut State) -> io::Result<Vec<RegionId>> {
    let mut synced = Vec::new();
    for region in state.regions.iter_mut().filter(|r| r.dirty) {
        region.file.sync().map_err(context(format!(
            "fast tier {}: sync the log",
            shared.fast.describe()
        )))?;
        region.dirty = false;
        synced.push(region.file.region());
    }
    Ok(synced)
}

/// Sync every log region appended to since its last sync, with the engine
/// lock released during the syncs (for fsync: writers of other files go
/// on). Waits for records in flight first, so each synced region is a
/// hole-free prefix. `then` gets each synced region with its append count
/// at the time of the sync, for [`commit`], under the hold of the lock
/// taken after the syncs. A failed sync leaves the regions dirty.
pub(super) fn sync_log_unlocked<R>(
    shared: &Shared,
    then: impl FnOnce(&mut State, io::Result<Vec<(RegionId, u64)>>) -> R,
) -> R {
    let state = lock(shared);
    let pending = appends_in_flight(&state);
    let mut state = wait_while(&shared.changed, state, None, pending);
    let dirty: Vec<(RegionId, u64, Arc<RegionFile>)> = state
        .regions
        .iter_mut()
        .filter(|r| r.dirty)
        .map(|r| {
            r.dirty = false;
            (r.file.region(), r.appends, Arc::clone(&r.file))
        })
        .collect();
    drop(state);
    let mut result = Ok(());
    for (_, _, file) in &dirty {
        if let Err(e) = file.sync() {
            result = Err(context(format!(
                "fast tier {}: sync the log",
                shared.fast.describe()
            ))(e));
            break;
        }
    }
    let mut state = lock(shared);
    if result.is_err() {
        for (region, _, _) in &dirty {
            state.regions[region.0 as usize].dirty = true;
        }
    }
    let synced = dirty
        .into_iter()
        .map(|(region, appends, _)| (region, appends));
    then(&mut state, result.map(|()| synced.collect()))
}

/// After `synced` regions were synced (each with its append count then):
/// append a commit record to the filling region if it is one of them,
/// nothing was appended to it since, and it has room. Records before a
/// commit are known to be synced, so recovery checks only their headers
/// and treats a failure among them as corruption (reported, the scan goes
/// on) instead of a torn tail (which would drop later records). The commit
/// itself is not synced: its claim is true whether or not it survives a
/// crash, and the next sync of the region for a later record takes it
/// along. It is an optimisation: when there is no room it is skipped, and
/// when its append fails the fsync still succeeds.
pub(super) fn commit(
    shared: &Shared,
    state: &mut State,
    synced: &[(RegionId, u64)],
) -> io::Result<()> {
    let Some(filling) = state.buffer.pipeline().filling() else {
        return Ok(());
    };
    let log_region = &state.regions[filling.0 as usize];
    let unchanged = synced
        .iter()
        .any(|&(region, appends)| region == filling && appends == log_region.appends);
    if !unchanged || !log_region.in_flight.is_empty() {
        return Ok(());
    }
    let Some(reservation) = state
        .buffer
        .place_optional(shared.clock.now(), record_len(0))
    else {
        return Ok(());
    };
    let log_region = &mut state.regions[reservation.region.0 as usize];
    // Not marked dirty: a commit alone is not worth a sync (and a sync
    // for it would let every idle fsync append another one).
    log_region.appends += 1;
    let at = REGION_HEADER_BYTES + reservation.offset;
    if let Err(e) = log_region
        .file
        .append_at(at, &RecordHeader::commit(reservation.seq), &[])
    {
        // An optimisation that failed: the records before it are synced
        // all the same; the region is closed at the hole (degrade.rs).
        fast_append_failed(shared, state, reservation.region, at, e);
    }
    Ok(())
}
