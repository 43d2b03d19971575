//! Appending to the log: data records placed by the write buffer (or
//! written to the capacity tier when it says so), records that must reach
//! the log, log syncs and commit records.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use sluice_env::{wait_while, BackendFile};
use sluice_policy::extent_index::Extent;
use sluice_policy::write_buffer::Placement;
use sluice_policy::{FileId, LogLocation, RegionId, Tier, Time};

use crate::log::{record_len, RecordHeader, RecordKind, RegionFile, REGION_HEADER_BYTES};

use super::degrade::{
    fallback_wait, fast_append_failed, fast_append_worked, fell_back, wait_reset,
};
use super::files::unknown;
use super::holds::{Hold, OwnWrite};
use super::{cache, context, Shared, State, FORCED_WAIT_MAX};

/// What a record's append asks of its driver next ([`Append::step`]).
pub(super) enum Next<'p> {
    /// Done: the payload's location and the record's sequence number, or
    /// `None`: nothing was appended, and a data record is the caller's to
    /// write to the capacity tier (placed there, or falling back to it),
    /// any other record is not needed ([`fallback_wait`]).
    Done(io::Result<Option<(LogLocation, u64)>>),
    /// Wait on `Shared::changed` at most this long, then step again.
    Wait(Duration),
    /// Let the engine lock go, do this, take the lock again, hand its
    /// outcome to [`Append::resume`] and step again.
    Unlocked(Work<'p>),
}

/// What an append does with the engine lock let go.
pub(super) enum Work<'p> {
    /// Checksum and write a data record's payload to its place in the log.
    Payload {
        region_file: Arc<RegionFile>,
        at: u64,
        header: RecordHeader,
        payload: &'p [u8],
        mirrored: bool,
    },
    /// Wait until these regions were reset (each with the generation it
    /// had), flushing as a drain does ([`wait_reset`]).
    Reset {
        regions: Vec<(RegionId, u64)>,
        what: String,
    },
}

/// What [`Work`] came to.
pub(super) enum Outcome {
    Payload {
        crc: u32,
        written: io::Result<()>,
        /// The memory copy (mirror.rs), made outside the lock.
        copy: Option<Arc<[u8]>>,
    },
    Reset(io::Result<()>),
}

impl Work<'_> {
    pub(super) fn run(self, shared: &Shared) -> Outcome {
        match self {
            Work::Payload {
                region_file,
                at,
                mut header,
                payload,
                mirrored,
            } => {
                header.payload_crc = crc32c::crc32c(payload);
                let written = region_file.append_at(at, &header, payload);
                let copy = (mirrored && written.is_ok()).then(|| Arc::<[u8]>::from(payload));
                Outcome::Payload {
                    crc: header.payload_crc,
                    written,
                    copy,
                }
            }
            Work::Reset { regions, what } => Outcome::Reset(wait_reset(shared, &regions, &what)),
        }
    }
}

/// The sequence number of a record that must reach the log, from its
/// outcome; 0 when it was not needed after all ([`fallback_wait`]).
pub(super) fn seq_of(done: io::Result<Option<(LogLocation, u64)>>) -> io::Result<u64> {
    done.map(|appended| appended.map_or(0, |(_, seq)| seq))
}

/// Where a placed record goes: at `at` of `region`, placed when the
/// pipeline had `full_before` full regions.
#[derive(Clone, Copy)]
struct Slot {
    region: RegionId,
    at: u64,
    full_before: u32,
}

/// Where an [`Append`] is.
enum Phase {
    /// To be placed (again, after a wait for room).
    Place,
    /// Its payload is being written to its slot ([`Work::Payload`]).
    Writing(Slot),
    /// The payload write ended (`written`), with the memory copy made.
    Written(Slot, io::Result<()>, Option<Arc<[u8]>>),
    /// Not appended after all: waiting for the regions that make going on
    /// without it safe ([`Work::Reset`]).
    FallingBack,
    /// That wait ended.
    FellBack(io::Result<()>),
    Done,
}

/// One record on its way into the log: a state machine over the engine
/// state. [`Append::step`] runs under the engine lock and never lets it
/// go; it says what comes next ([`Next`]), and the caller carries that out
/// (`drive!`): a wait, or [`Work`] with the lock let go, whose outcome it
/// hands back with [`Append::resume`]. So every release of the engine
/// lock is in the driver, in plain sight.
///
/// The write buffer places the record in the log, preceded by a path
/// record of `file` when the region does not describe it yet. A data
/// record (`tier` given: the route of its write) may be placed on the
/// capacity tier instead. Any other record must reach the log and waits
/// for room (unless `!wait`: then it fails with `WouldBlock` at once).
pub(super) struct Append<'p> {
    header: RecordHeader,
    payload: &'p [u8],
    file: Option<FileId>,
    tier: Option<Tier>,
    wait: bool,
    /// The first try's instant: the pipeline counts a wait when a try's
    /// `now` is later.
    first_attempt: Option<Time>,
    phase: Phase,
}

impl<'p> Append<'p> {
    /// A data record of `file` (at most `record_max_bytes`), routed to
    /// `tier`.
    pub(super) fn data(header: RecordHeader, payload: &'p [u8], file: FileId, tier: Tier) -> Self {
        Append::new(header, payload, Some(file), Some(tier), true)
    }

    /// A record that must reach the log (truncate, unlink, path for a
    /// rename, clean), waiting for room.
    pub(super) fn required(header: RecordHeader, payload: &'p [u8], file: Option<FileId>) -> Self {
        Append::new(header, payload, file, None, true)
    }

    /// [`Append::required`], but only if the log has room now:
    /// `WouldBlock` instead of waiting. For the flusher's own records,
    /// which must not wait for the room only the flusher makes.
    pub(super) fn if_room(header: RecordHeader, payload: &'p [u8]) -> Self {
        Append::new(header, payload, None, None, false)
    }

    fn new(
        header: RecordHeader,
        payload: &'p [u8],
        file: Option<FileId>,
        tier: Option<Tier>,
        wait: bool,
    ) -> Self {
        Append {
            header,
            payload,
            file,
            tier,
            wait,
            first_attempt: None,
            phase: Phase::Place,
        }
    }

    /// The outcome of the [`Work`] the last step asked for.
    pub(super) fn resume(&mut self, outcome: Outcome) {
        self.phase = match (std::mem::replace(&mut self.phase, Phase::Done), outcome) {
            (Phase::Writing(slot), Outcome::Payload { crc, written, copy }) => {
                self.header.payload_crc = crc;
                Phase::Written(slot, written, copy)
            }
            (Phase::FallingBack, Outcome::Reset(settled)) => Phase::FellBack(settled),
            // INVARIANT: the driver hands back the outcome of the work the
            // step asked for, once.
            (phase, _) => unreachable!("an outcome that does not fit {}", phase.name()),
        };
    }

    /// The next step, under the engine lock.
    pub(super) fn step(&mut self, shared: &Shared, state: &mut State) -> Next<'p> {
        match std::mem::replace(&mut self.phase, Phase::Done) {
            Phase::Place => self.place(shared, state),
            Phase::Written(slot, written, copy) => self.landed(shared, state, slot, written, copy),
            Phase::FellBack(Err(e)) => Next::Done(Err(e)),
            Phase::FellBack(Ok(())) => {
                fell_back(state, &self.header);
                Next::Done(Ok(None))
            }
            // INVARIANT: a step that asks for work is followed by `resume`.
            phase @ (Phase::Writing(_) | Phase::FallingBack | Phase::Done) => {
                unreachable!("a step while {}", phase.name())
            }
        }
    }

    fn place(&mut self, shared: &Shared, state: &mut State) -> Next<'p> {
        let header = &mut self.header;
        let record = record_len(header.len);
        // Looked up at every try: a rename while this record waited for
        // room changes the name its path record must carry.
        // `in_flight`: records of the file other writers are still writing
        // (writes of one file run at once, `Engine::write`): not indexed
        // yet, so the write buffer treats them as overlapping.
        // A caller waits for the file's records in flight to land
        // (`quiescing`): a new one waits for it.
        let quiescing = self
            .file
            .and_then(|id| state.files.get(&id))
            .is_some_and(|open| open.quiescing > 0);
        if quiescing && header.kind == RecordKind::Data {
            self.phase = Phase::Place;
            return Next::Wait(Duration::from_millis(10));
        }
        let (path_len, nameless, in_flight) = match self.file {
            Some(id) => match state.files.get(&id) {
                Some(open) => (
                    record_len(open.path.as_str().len() as u32),
                    open.unlinked,
                    // A name-less file indexes nothing (append_data).
                    state.buffer.in_flight(id) && !open.unlinked,
                ),
                None => return Next::Done(Err(unknown(id))),
            },
            None => (0, false, false),
        };
        let now = shared.clock.now();
        // The same instant as `now` on the first try: the pipeline counts
        // a wait when the two are equal.
        let first_attempt = *self.first_attempt.get_or_insert(now);
        let full_before = state.buffer.pipeline().full_count();
        // A name-less file takes no log record (module docs of `OpenFile`),
        // and has nothing buffered for a write to overlap. (While the fast
        // tier is failing, the write buffer places data writes on the
        // capacity tier unless they overlap buffered bytes: degrade.rs.)
        let tier = self
            .tier
            .map(|tier| if nameless { Tier::Capacity } else { tier });
        let placement = match (tier, self.file) {
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
                .place_required(now, self.file, record, path_len, first_attempt),
        };
        match placement {
            Placement::Log(reservation) => {
                let region = reservation.region;
                // Filled again: its clean copies go before any byte lands.
                cache::reuse(state, region);
                state.regions[region.0 as usize].appends += 1;
                let mut at = REGION_HEADER_BYTES + reservation.offset;
                let describe = reservation.describe.zip(self.file).and_then(|(seq, id)| {
                    state
                        .files
                        .get(&id)
                        .map(|open| (seq, id, open.path.clone(), open.ino))
                });
                if let Some((seq, id, path, ino)) = describe {
                    let path_header = match RecordHeader::path(id, &path, seq) {
                        Ok(h) => h.with_identity(ino.map_or(0, |(_, ino)| ino)),
                        Err(e) => {
                            return Next::Done(Err(io::Error::new(
                                io::ErrorKind::InvalidInput,
                                e.to_string(),
                            )))
                        }
                    };
                    let log_region = &mut state.regions[region.0 as usize];
                    if let Err(e) =
                        log_region
                            .file
                            .append_at(at, &path_header, path.as_str().as_bytes())
                    {
                        let e = fast_append_failed(shared, state, region, at, e);
                        return self.fall_back_or_fail(state, e);
                    }
                    at += path_header.record_len();
                }
                debug_assert_eq!(at, REGION_HEADER_BYTES + reservation.record_offset);
                header.seq = reservation.seq;
                let log_region = &mut state.regions[region.0 as usize];
                if header.kind == RecordKind::Data {
                    // The payload is written outside the lock; the index
                    // learns of it only once it is there (append_data).
                    // INVARIANT: a sequence number is placed once.
                    let fresh = log_region.in_flight.insert(header.seq);
                    debug_assert!(fresh, "record {} placed twice", header.seq);
                    let region_file = Arc::clone(&log_region.file);
                    let mirrored = state.mirror.enabled();
                    if let Some(id) = self.file {
                        state.buffer.writing(id, header.seq);
                    }
                    self.phase = Phase::Writing(Slot {
                        region,
                        at,
                        full_before,
                    });
                    return Next::Unlocked(Work::Payload {
                        region_file,
                        at,
                        header: *header,
                        payload: self.payload,
                        mirrored,
                    });
                }
                if let Err(e) = log_region.file.append_at(at, header, self.payload) {
                    let e = fast_append_failed(shared, state, region, at, e);
                    return self.fall_back_or_fail(state, e);
                }
                let slot = Slot {
                    region,
                    at,
                    full_before,
                };
                self.appended(shared, state, slot, None)
            }
            Placement::Capacity => Next::Done(Ok(None)),
            Placement::Wait { .. } if !self.wait => {
                let e = io::Error::new(io::ErrorKind::WouldBlock, "no room in the log now");
                Next::Done(Err(e))
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
                    return Next::Done(Err(io::Error::new(io::ErrorKind::StorageFull, message)));
                }
                // Wake the flusher (the starvation guard lets it flush now).
                shared.changed.notify_all();
                self.phase = Phase::Place;
                Next::Wait(
                    retry_at_latest
                        .saturating_since(now)
                        .clamp(Duration::from_millis(1), Duration::from_millis(100)),
                )
            }
            Placement::TooLarge => {
                let message = format!(
                    "fast tier {}: no room for a {} B record",
                    shared.fast.describe(),
                    record + path_len
                );
                Next::Done(Err(io::Error::new(io::ErrorKind::StorageFull, message)))
            }
        }
    }

    /// A data record's payload write ended (`written`).
    fn landed(
        &mut self,
        shared: &Shared,
        state: &mut State,
        slot: Slot,
        written: io::Result<()>,
        copy: Option<Arc<[u8]>>,
    ) -> Next<'p> {
        let Slot { region, at, .. } = slot;
        let seq = self.header.seq;
        let log_region = &mut state.regions[region.0 as usize];
        // Waiters look at the oldest record in flight of each region
        // (`appends_in_flight`, the flusher): wake them when it lands.
        let oldest = log_region.in_flight.first() == Some(&seq);
        // INVARIANT: a payload lands once, while it is in flight.
        let was_in_flight = log_region.in_flight.remove(&seq);
        debug_assert!(was_in_flight, "record {seq} landed but was not in flight");
        if oldest {
            shared.changed.notify_all();
        }
        // Landed: indexed by the caller under this hold of the lock
        // (append_data); not landed: out of the file's flight now.
        let abandon = |state: &mut State| {
            if let Some(id) = self.file {
                state.buffer.abandon(id, seq);
            }
        };
        if let Err(e) = written {
            abandon(state);
            let e = fast_append_failed(shared, state, region, at, e);
            return self.fall_back_or_fail(state, e);
        }
        // An append before this one in the region failed while this one
        // was being written: recovery ends the region at that hole, so
        // this record must not be relied on.
        let hole = state.regions[region.0 as usize].broken_at;
        if let Some(hole) = hole.filter(|&hole| hole < at) {
            abandon(state);
            let e = io::Error::other(format!(
                "fast tier {}: an earlier append to region {} at {hole} failed",
                shared.fast.describe(),
                region.0
            ));
            return self.fall_back_or_fail(state, e);
        }
        self.appended(shared, state, slot, copy)
    }

    /// The record is in its slot of the log.
    fn appended(
        &mut self,
        shared: &Shared,
        state: &mut State,
        slot: Slot,
        copy: Option<Arc<[u8]>>,
    ) -> Next<'p> {
        let Slot {
            region,
            at,
            full_before,
        } = slot;
        let header = &self.header;
        fast_append_worked(state);
        let log_region = &mut state.regions[region.0 as usize];
        log_region.dirty = true;
        let payload_offset = at + crate::log::RECORD_HEADER_BYTES;
        if header.kind == RecordKind::Data {
            // INVARIANT: one record per place in a region until its reset.
            let earlier = log_region
                .records
                .insert(payload_offset, (header.len, header.payload_crc));
            debug_assert!(
                earlier.is_none(),
                "two records at {payload_offset} of region {}",
                region.0
            );
            if let Some(copy) = copy {
                state.mirror.keep(region, payload_offset, copy);
            }
        }
        // Wake the flusher only when a region filled: waking it at every
        // append costs a context switch and lock contention per write
        // (docs/benchmarks.md, absorption).
        if state.buffer.pipeline().full_count() > full_before {
            shared.changed.notify_all();
        }
        let location = LogLocation {
            region,
            offset: payload_offset,
        };
        Next::Done(Ok(Some((location, header.seq))))
    }

    /// The record could not be appended (`e`): done with `None` once that
    /// is safe (degrade.rs, [`fallback_wait`]), after waiting for regions
    /// if need be; a commit or clean record fails with `e` (a clean record
    /// only saves a later flush the same bytes: its caller keeps them
    /// buffered, sync.rs).
    fn fall_back_or_fail(&mut self, state: &mut State, e: io::Error) -> Next<'p> {
        match fallback_wait(state, &self.header, &e) {
            None => Next::Done(Err(e)),
            Some((regions, _)) if regions.is_empty() => {
                fell_back(state, &self.header);
                Next::Done(Ok(None))
            }
            Some((regions, what)) => {
                self.phase = Phase::FallingBack;
                Next::Unlocked(Work::Reset { regions, what })
            }
        }
    }
}

impl Phase {
    fn name(&self) -> &'static str {
        match self {
            Phase::Place => "placing",
            Phase::Writing(_) => "writing",
            Phase::Written(..) => "written",
            Phase::FallingBack => "falling back",
            Phase::FellBack(_) => "fell back",
            Phase::Done => "done",
        }
    }
}

/// Data record `extent` of `file` is in the log: it is indexed, clipped
/// by a truncation newer than the record made while it was being written
/// (as replay in sequence order would: the write buffer's "Records in
/// flight"); a file the engine forgot meanwhile takes nothing.
pub(super) fn index_landed(state: &mut State, file: FileId, extent: Extent) {
    let State {
        files,
        placements,
        buffer,
        ..
    } = state;
    match files.get(&file) {
        Some(open) => {
            placements.add(file, &open.path, Tier::Fast, u64::from(extent.len));
            buffer.landed(file, extent);
        }
        None => buffer.abandon(file, extent.seq),
    }
}

/// Write `data` at `offset` of `file`, routed to `tier`, record by record:
/// the write buffer places each in the log (a data record, indexed once
/// its payload is there) or on the capacity tier (written here). `then`
/// runs under the hold of the engine lock that saw the last record done.
pub(super) fn append_data(
    shared: &Shared,
    file: FileId,
    offset: u64,
    data: &[u8],
    tier: Tier,
    then: impl FnOnce(&mut State),
) -> io::Result<()> {
    let chunk = shared.config.record_max_bytes as usize;
    let mut state = sluice_env::lock(&shared.state);
    let mut done = 0usize;
    while done < data.len() {
        let part = &data[done..(done + chunk).min(data.len())];
        let part_offset = offset + done as u64;
        // The payload's checksum is computed only once the write buffer
        // places the record in the log, outside the engine lock
        // (`Work::Payload`): a write that goes to the capacity tier needs
        // none.
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
        let mut append = Append::data(header, part, file, tier);
        match drive!(shared, state, append)? {
            Some((location, seq)) => {
                let extent = Extent {
                    file_offset: part_offset,
                    len,
                    location,
                    seq,
                };
                index_landed(&mut state, file, extent);
            }
            None => {
                // Placed on the capacity tier: nothing buffered overlaps it.
                // Written outside the engine lock; the caller holds the
                // file's I/O lock, so this file's writes stay in order.
                let (handle, writer) =
                    begin_capacity_write(&mut state, file, part_offset, part.len())?;
                drop(state);
                let written = handle.write_at(part, part_offset);
                state = sluice_env::lock(&shared.state);
                cache::end_own_write(&mut state, writer);
                if let Err(e) = written {
                    let path = state.files.get(&file).map(|open| open.path.to_string());
                    return Err(context(format!(
                        "capacity tier {}: write {}",
                        shared.capacity.describe(),
                        path.unwrap_or_else(|| format!("file {}", file.0))
                    ))(e));
                }
            }
        }
        done += part.len();
    }
    then(&mut state);
    Ok(())
}

/// Before a write of `len` bytes at `offset` that the write buffer placed
/// on the capacity tier, under the lock: the handle to write with,
/// outside it, and the own write to give back to [`cache::end_own_write`]
/// after. Clean copies of the
/// range are superseded now (a copy may have joined the cache while this
/// write waited for an older buffered copy to be flushed: degrade.rs); the
/// file's other copies stay valid across this node's own write: checked
/// before it, stamped again after it.
pub(super) fn begin_capacity_write(
    state: &mut State,
    file: FileId,
    offset: u64,
    len: usize,
) -> io::Result<(Arc<dyn BackendFile>, Hold<OwnWrite>)> {
    let State {
        files, placements, ..
    } = state;
    let Some(open) = files.get(&file) else {
        return Err(unknown(file));
    };
    placements.add(file, &open.path, Tier::Capacity, len as u64);
    let handle = Arc::clone(&open.handle);
    state.buffer.forget_cached(file, offset, len as u64);
    Ok((handle, cache::begin_own_write(state, file)))
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
/// appends_in_flight())`): true while one is. "Now" is its first look,
/// which `wait_while` makes under the caller's hold, before any wait.
pub(super) fn appends_in_flight() -> impl FnMut(&mut State) -> bool {
    let mut bound = None;
    move |state| {
        let bound = *bound.get_or_insert_with(|| state.buffer.next_seq());
        appends_in_flight_below(state, bound)
    }
}

/// Whether a data record with a sequence number below `bound` is being
/// written outside the lock ([`appends_in_flight`] with a bound of its
/// own).
pub(super) fn appends_in_flight_below(state: &State, bound: u64) -> bool {
    state
        .regions
        .iter()
        .any(|r| r.in_flight.first().is_some_and(|&seq| seq < bound))
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
    let mut state = wait_while(
        &shared.changed,
        sluice_env::lock(&shared.state),
        None,
        appends_in_flight(),
    );
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
    let mut state = sluice_env::lock(&shared.state);
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
