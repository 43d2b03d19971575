//! The write buffer: SSDUP+'s write side as one sans-IO object (DESIGN
//! §4.3–4.6).
//!
//! [`WriteBuffer`] composes the [`Redirector`], the [`RegionPipeline`], the
//! [`FlushGate`], the [`ExtentIndex`] and the log's record sequence numbers.
//! The engine (real tiers, wall-clock time) and the simulator (device
//! models, virtual time) both drive this one object, in quinn-proto's
//! style: a write goes in through [`WriteBuffer::handle_write`] and
//! [`WriteBuffer::place_write`], a [`Placement`] comes out, and the caller
//! does the I/O and reports back ([`WriteBuffer::insert`] once a record's
//! payload is in the log). Flushing is polled ([`WriteBuffer::poll_flush`])
//! and reported ([`WriteBuffer::start_flush`],
//! [`WriteBuffer::finish_flush`], [`WriteBuffer::abort_flush`]).
//!
//! # The overlap rule
//! A write is "over buffered bytes" when any of its bytes is buffered for
//! the same file. Such a write always goes to the log, whatever the
//! redirector's route and whatever `when_full` says: it waits for room
//! ([`Placement::Wait`]) instead of going to the capacity tier. Sending it
//! to the capacity tier would leave the older buffered bytes indexed, so
//! reads would return them and the later flush would write them over the
//! new bytes (the data loss of a full log under `write-through`). Making the
//! older bytes unreachable first is the other correct choice, but it needs a
//! durable invalidation record (DESIGN §4.6, invariant 3) — so room in the
//! log all the same — plus a sync of the capacity file before that record,
//! on every such write. Waiting costs nothing when the log has room and is
//! what the paper does when it has none, so it is the one rule here. Records
//! that must reach the log for other reasons (truncate, unlink, a rename's
//! path) wait the same way ([`WriteBuffer::place_required`]).
//!
//! Bytes still being written to the log (reserved, not yet indexed) are
//! not in the index yet, but will be: a caller that lets writes of one
//! file run at once says so (`in_flight` of [`WriteBuffer::place_write`]),
//! and the write is treated as over buffered bytes, whatever it overlaps.
//!
//! # Descriptions
//! Regions are self-describing: before the first record of a file in a
//! region, the log holds a description of the file (the engine's path
//! record). The write buffer knows which files each region describes and
//! says in the [`Reservation`] when a description must be written first.
//!
//! # Records in flight
//! A caller that writes data records' payloads outside its own lock says
//! so: [`WriteBuffer::writing`] when a payload's write starts,
//! [`WriteBuffer::landed`] when it is in the log (it is indexed then),
//! [`WriteBuffer::abandon`] when it is not. Until then the file's bytes
//! are on their way to the log ([`WriteBuffer::in_flight`],
//! [`WriteBuffer::has_logged`]). A truncate placed meanwhile
//! ([`WriteBuffer::truncate`] with its record's sequence number) clips
//! every older record of the file that lands after it, as replay in
//! sequence order would.
//!
//! # Flushing
//! A flusher asks [`WriteBuffer::next_flush`] what to flush now, in one
//! of two ways ([`FlushSet`]): the papers' pipeline (the oldest full
//! region alone, gated or not: the simulator), or sluice's (every full
//! region whose records have landed, their runs merged across them: the
//! engine). The answer starts the regions; the flusher writes the runs
//! and ends each region with [`WriteBuffer::finish_flush`] or
//! [`WriteBuffer::abort_flush`].
//!
//! # A failing fast tier
//! An append the caller could not write (the fast tier's file system is
//! full, the device returns EIO) is reported with
//! [`WriteBuffer::append_failed`]: the region it was in is sealed (no
//! record may follow the hole), and for a while data writes are placed
//! as if routed to the capacity tier, the overlap rule still sending
//! those over buffered bytes to the log. The while doubles from
//! [`FAST_RETRY_MIN`] to [`FAST_RETRY_MAX`] as failures go on;
//! [`WriteBuffer::append_worked`] ends it.
//!
//! INVARIANTS:
//! - sequence numbers are handed out in reservation order, so log order is
//!   sequence order in every region;
//! - a region's described files are forgotten when the region is emptied
//!   by a finished flush, and a file's everywhere when the engine says its
//!   descriptions no longer hold (`forget_descriptions`);
//! - no byte of a write that overlapped buffered bytes is ever placed on
//!   the capacity tier.

use alloc::collections::{BTreeMap, BTreeSet};
use alloc::vec::Vec;
use core::fmt;

use crate::detector;
use crate::extent_index::{Extent, ExtentIndex, Piece};
use crate::flush_gate::{FlushGate, FlushGateConfig, FlushReason, GateDecision};
use crate::pipeline::{
    Admission, PipelineConfig, PipelineError, RegionPipeline, RegionState, RestoreError,
};
use crate::redirector::{Redirector, RedirectorConfig, Routing};
use crate::{FileId, LogLocation, RegionId, Tier, Time, WriteRequest};

/// The first while data writes skip the log after a failed append.
pub const FAST_RETRY_MIN: core::time::Duration = core::time::Duration::from_secs(1);
/// The longest while data writes skip the log after failed appends.
pub const FAST_RETRY_MAX: core::time::Duration = core::time::Duration::from_secs(30);

/// Configuration of the parts the write buffer composes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WriteBufferConfig {
    /// Traffic detection and redirection.
    pub redirector: RedirectorConfig,
    /// Log regions and `when_full`.
    pub pipeline: PipelineConfig,
    /// When flushing may run.
    pub gate: FlushGateConfig,
}

/// Why a [`WriteBuffer`] could not be made.
#[derive(Clone, Debug, PartialEq)]
pub enum ConfigError {
    /// The redirector's configuration is invalid.
    Redirector(detector::ConfigError),
    /// The pipeline's configuration, or the recovered region states, are
    /// invalid.
    Pipeline(RestoreError),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Redirector(e) => e.fmt(f),
            ConfigError::Pipeline(e) => e.fmt(f),
        }
    }
}

/// Room in the log for one record, and its sequence numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Reservation {
    /// The region to append to.
    pub region: RegionId,
    /// Where the description (if any) and then the record start, as a byte
    /// position inside the region's record area.
    pub offset: u64,
    /// The sequence number of a description of the file to write at
    /// `offset` first (`describe_len` bytes), or `None` when the region
    /// already describes the file.
    pub describe: Option<u64>,
    /// Where the record itself starts: `offset`, or `offset + describe_len`.
    pub record_offset: u64,
    /// The record's sequence number.
    pub seq: u64,
}

/// Where one write (or one record) goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Placement {
    /// Append it to the log at the reservation; for a data record, call
    /// [`WriteBuffer::insert`] once its payload is written.
    Log(Reservation),
    /// Write it to the capacity tier: no buffered byte overlaps it.
    Capacity,
    /// No room now: retry when a flush finishes, and at the latest at
    /// `retry_at_latest`, passing the same `waiting_since`.
    Wait {
        /// The latest time to retry.
        retry_at_latest: Time,
    },
    /// The record is longer than a region and must reach the log: the
    /// caller must split it. Nothing was reserved.
    TooLarge,
}

/// Byte counters of placed writes, for metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct WriteBufferCounters {
    /// Bytes of writes routed to the fast tier and placed in the log.
    pub fast_bytes: u64,
    /// Bytes placed on the capacity tier (routed there, or written through).
    pub capacity_bytes: u64,
    /// The part of `capacity_bytes` routed to the fast tier that found the
    /// log full and was written through.
    pub write_through_bytes: u64,
    /// Bytes placed in the log although routed to the capacity tier,
    /// because they overlapped buffered bytes (the overlap rule).
    pub forced_to_log_bytes: u64,
}

/// What the flusher should do now; see [`WriteBuffer::poll_flush`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FlushPoll {
    /// No region is full.
    Idle,
    /// A region is full but the gate holds flushing back until
    /// `recheck_at` (or any route change, drain or newly full region).
    Pause {
        /// When the gate could next allow a flush.
        recheck_at: Option<Time>,
    },
    /// Flush this region.
    Flush {
        /// The oldest full region.
        region: RegionId,
        /// Why the gate allows it.
        reason: FlushReason,
    },
}

/// Which full regions one flush takes; see [`WriteBuffer::next_flush`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FlushSet {
    /// The papers' pipeline: the oldest full region alone, its runs
    /// within it (look each up again with [`WriteBuffer::flush_pieces`]).
    /// `gated`: only when the flush gate allows (SSDUP+); otherwise at
    /// once (OrangeFS-BB, SSDUP).
    Oldest {
        /// Ask the flush gate first.
        gated: bool,
    },
    /// sluice's flusher, when the gate allows: every full region, oldest
    /// first, up to the first one a record is still being written into;
    /// their runs merged across them, gaps other regions' bytes fill
    /// joined (look them up with [`WriteBuffer::buffered_pieces`] over
    /// every region).
    EveryFull,
}

/// What a flusher does now; see [`WriteBuffer::next_flush`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FlushStart {
    /// No region is full.
    Idle,
    /// The gate holds flushing back until `recheck_at` (or any route
    /// change, drain or newly full region).
    Pause {
        /// When the gate could next allow a flush.
        recheck_at: Option<Time>,
    },
    /// The oldest full region still has a record being written into it:
    /// look again once it landed.
    Busy,
    /// Flush `regions` (started: end each with
    /// [`WriteBuffer::finish_flush`] or [`WriteBuffer::abort_flush`]),
    /// oldest first, by `runs`.
    Flush {
        /// The regions, in the order they became full.
        regions: Vec<RegionId>,
        /// The runs to write.
        runs: Vec<FlushRunRef>,
    },
}

/// One run of file-contiguous buffered bytes of a region to flush.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FlushRunRef {
    /// The file.
    pub file: FileId,
    /// First file byte.
    pub file_offset: u64,
    /// Length in bytes.
    pub len: u64,
}

/// One file's data records in flight.
#[derive(Debug, Default)]
struct Flight {
    /// Their sequence numbers.
    seqs: BTreeSet<u64>,
    /// Truncates placed while any was in flight: (sequence, size).
    truncations: Vec<(u64, u64)>,
}

/// SSDUP+'s write side; see the module docs.
#[derive(Debug)]
pub struct WriteBuffer {
    redirector: Redirector,
    pipeline: RegionPipeline,
    gate: FlushGate,
    index: ExtentIndex,
    /// The clean cache (docs/engine.md, "The clean cache"): bytes written
    /// back to the capacity tier whose records are still in their region,
    /// readable from there until it is reused. Never flushed.
    cache: ExtentIndex,
    /// Per region: the files it describes.
    described: Vec<BTreeSet<FileId>>,
    /// Per region: when its first record since it was last empty was
    /// placed (for the flush age).
    first_write: Vec<Option<Time>>,
    next_seq: u64,
    counters: WriteBufferCounters,
    /// Per file: its data records in flight, and the truncates placed
    /// while any was (module docs, "Records in flight").
    flight: BTreeMap<FileId, Flight>,
    /// After a failed append: data writes skip the log until then (module
    /// docs, "A failing fast tier").
    fast_retry_at: Option<Time>,
    /// The next such while.
    fast_backoff: core::time::Duration,
}

impl WriteBuffer {
    /// A write buffer with an empty log; sequence numbers start at 1.
    pub fn new(config: WriteBufferConfig) -> Result<WriteBuffer, ConfigError> {
        let states = alloc::vec![(RegionState::Empty, 0); config.pipeline.regions as usize];
        WriteBuffer::restore(config, &states, ExtentIndex::new(), 1)
    }

    /// A write buffer over a recovered log: `states[i]` is region `i`'s
    /// state and used bytes (see [`RegionPipeline::restore`]), `index` the
    /// replayed extents, `next_seq` one past the highest sequence number
    /// seen. Tell it which files each region describes with
    /// [`WriteBuffer::mark_described`].
    pub fn restore(
        config: WriteBufferConfig,
        states: &[(RegionState, u64)],
        index: ExtentIndex,
        next_seq: u64,
    ) -> Result<WriteBuffer, ConfigError> {
        let pipeline =
            RegionPipeline::restore(config.pipeline, states).map_err(ConfigError::Pipeline)?;
        let redirector = Redirector::new(config.redirector).map_err(ConfigError::Redirector)?;
        Ok(WriteBuffer {
            redirector,
            pipeline,
            gate: FlushGate::new(config.gate),
            index,
            cache: ExtentIndex::new(),
            described: alloc::vec![BTreeSet::new(); states.len()],
            // Recovered bytes count as written at the restore.
            first_write: states
                .iter()
                .map(|&(_, used)| (used > 0).then_some(Time::ZERO))
                .collect(),
            next_seq: next_seq.max(1),
            counters: WriteBufferCounters::default(),
            flight: BTreeMap::new(),
            fast_retry_at: None,
            fast_backoff: FAST_RETRY_MIN,
        })
    }

    /// Recovery found a description of `file` in `region`.
    pub fn mark_described(&mut self, region: RegionId, file: FileId) {
        if let Some(files) = self.described.get_mut(region.0 as usize) {
            files.insert(file);
        }
    }

    /// The descriptions of `file` no longer name it right (its name
    /// changed without a new description, or its removal was logged while
    /// the id lives on under another name): its next record in any region
    /// is described again.
    pub fn forget_descriptions(&mut self, file: FileId) {
        for files in &mut self.described {
            files.remove(&file);
        }
    }

    /// Classify one write request (Algorithm 1): the tier its stream goes
    /// to. A completed stream that changes the route tells the gate. Call
    /// once per write, not on retries.
    pub fn handle_write(&mut self, now: Time, request: WriteRequest) -> Routing {
        let routing = self.redirector.handle_write(now, request);
        if let Some(report) = routing.completed {
            if report.next_route != report.route {
                self.gate.handle_route(now, report.next_route);
            }
        }
        routing
    }

    /// Place one data record: `len` bytes of `file` at `offset`, routed to
    /// `tier`, taking `record_len` bytes of log (header included) plus
    /// `describe_len` if the region must describe the file first.
    /// `waiting_since` is the time of the first attempt (`now` then).
    /// `in_flight`: older records of the file are still being written, so
    /// its index does not yet show every buffered byte. Applies the overlap
    /// rule (module docs).
    #[allow(clippy::too_many_arguments)]
    pub fn place_write(
        &mut self,
        now: Time,
        file: FileId,
        offset: u64,
        len: u64,
        record_len: u64,
        describe_len: u64,
        tier: Tier,
        waiting_since: Time,
        in_flight: bool,
    ) -> Placement {
        // A failing fast tier: the capacity tier, unless the overlap rule
        // says otherwise (module docs).
        let tier = if self.fast_degraded(now) {
            Tier::Capacity
        } else {
            tier
        };
        let overlaps = in_flight || self.index.covered_bytes(file, offset, len) > 0;
        if tier == Tier::Capacity && !overlaps {
            self.count_capacity(now, len, false);
            return Placement::Capacity;
        }
        match self.reserve(
            now,
            Some(file),
            record_len,
            describe_len,
            waiting_since,
            overlaps,
        ) {
            Placement::Capacity => {
                self.count_capacity(now, len, true);
                Placement::Capacity
            }
            Placement::Log(r) => {
                self.gate.handle_fast_write(now);
                if tier == Tier::Fast {
                    self.counters.fast_bytes += len;
                } else {
                    self.counters.forced_to_log_bytes += len;
                }
                Placement::Log(r)
            }
            other => other,
        }
    }

    /// Place a record that must reach the log (truncate, unlink, a path):
    /// [`Placement::Log`], [`Placement::Wait`] or [`Placement::TooLarge`],
    /// never [`Placement::Capacity`]. `file` is the file it describes, if
    /// the region must describe it first.
    pub fn place_required(
        &mut self,
        now: Time,
        file: Option<FileId>,
        record_len: u64,
        describe_len: u64,
        waiting_since: Time,
    ) -> Placement {
        self.reserve(now, file, record_len, describe_len, waiting_since, true)
    }

    /// Place a record that is worth writing only if the filling region has
    /// room for it now (the engine's commit marker): never waits, never
    /// opens a new region.
    pub fn place_optional(&mut self, now: Time, record_len: u64) -> Option<Reservation> {
        let region = self.pipeline.filling()?;
        if !self.fits(region, record_len) {
            return None;
        }
        match self.reserve(now, None, record_len, 0, now, true) {
            Placement::Log(r) => Some(r),
            _ => None,
        }
    }

    fn reserve(
        &mut self,
        now: Time,
        file: Option<FileId>,
        record_len: u64,
        describe_len: u64,
        waiting_since: Time,
        required: bool,
    ) -> Placement {
        // A description is needed unless the filling region describes the
        // file and the record fits there (the pipeline then appends there).
        let describe = match (file, self.pipeline.filling()) {
            (None, _) => false,
            (Some(_), None) => true,
            (Some(id), Some(region)) => {
                !(self.described[region.0 as usize].contains(&id) && self.fits(region, record_len))
            }
        };
        let extra = if describe { describe_len } else { 0 };
        let total = record_len.saturating_add(extra);
        let admission = if required {
            self.pipeline.reserve_required(now, total, waiting_since)
        } else {
            self.pipeline.reserve(now, total, waiting_since)
        };
        match admission {
            Admission::Append { region, offset } => {
                if offset == 0 {
                    self.first_write[region.0 as usize] = Some(now);
                }
                let describe_seq = match (describe, file) {
                    (true, Some(id)) => {
                        self.described[region.0 as usize].insert(id);
                        Some(self.take_seq())
                    }
                    _ => None,
                };
                Placement::Log(Reservation {
                    region,
                    offset,
                    describe: describe_seq,
                    record_offset: offset + extra,
                    seq: self.take_seq(),
                })
            }
            Admission::Wait { retry_at_latest } => Placement::Wait { retry_at_latest },
            Admission::WriteThrough { .. } => Placement::Capacity,
            Admission::TooLarge if required => Placement::TooLarge,
            Admission::TooLarge => Placement::Capacity,
        }
    }

    /// Whether `len` more bytes fit in `region` (the filling one) now.
    fn fits(&self, region: RegionId, len: u64) -> bool {
        let used = self.pipeline.used_bytes(region).unwrap_or(u64::MAX);
        used.saturating_add(len) <= self.pipeline.config().region_bytes
    }

    fn count_capacity(&mut self, now: Time, len: u64, written_through: bool) {
        self.gate.handle_capacity_write(now);
        self.counters.capacity_bytes += len;
        if written_through {
            self.counters.write_through_bytes += len;
        }
    }

    /// The next record sequence number.
    fn take_seq(&mut self) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        seq
    }

    /// An append placed in `region` could not be written (module docs,
    /// "A failing fast tier"): the region is sealed if it is the one
    /// filling, and data writes skip the log for the returned while, which
    /// doubles (to [`FAST_RETRY_MAX`]) if failures go on.
    pub fn append_failed(&mut self, now: Time, region: RegionId) -> core::time::Duration {
        if self.pipeline.filling() == Some(region) {
            self.seal();
        }
        let backoff = self.fast_backoff;
        self.fast_retry_at = Some(now.saturating_add(backoff));
        self.fast_backoff = (backoff * 2).min(FAST_RETRY_MAX);
        backoff
    }

    /// An append was written: after failures, the log takes data writes
    /// again and the next while starts from [`FAST_RETRY_MIN`]. Returns
    /// whether it was skipped until now.
    pub fn append_worked(&mut self) -> bool {
        let recovered = self.fast_retry_at.take().is_some();
        if recovered {
            self.fast_backoff = FAST_RETRY_MIN;
        }
        recovered
    }

    /// Whether data writes skip the log at `now` (a recent append failed).
    pub fn fast_degraded(&self, now: Time) -> bool {
        self.fast_retry_at.is_some_and(|at| now < at)
    }

    /// A data record's payload is in the log: index it.
    pub fn insert(&mut self, file: FileId, extent: Extent) {
        self.cache
            .invalidate(file, extent.file_offset, u64::from(extent.len));
        self.index.insert(file, extent);
    }

    /// `file` was truncated to `size` by record `seq` (placed and
    /// written): buffered bytes past it are dropped, and so are those of
    /// the file's older records still in flight when they land. Returns
    /// the bytes dropped now.
    pub fn truncate(&mut self, file: FileId, size: u64, seq: u64) -> u64 {
        if let Some(flight) = self.flight.get_mut(&file) {
            flight.truncations.push((seq, size));
        }
        self.index.truncate(file, size)
    }

    /// The payload of data record `seq` of `file` (placed in the log) is
    /// being written: the file's bytes are on their way (module docs,
    /// "Records in flight").
    pub fn writing(&mut self, file: FileId, seq: u64) {
        let fresh = self.flight.entry(file).or_default().seqs.insert(seq);
        debug_assert!(fresh, "record {seq} in flight twice");
    }

    /// Data record `extent.seq` of `file`, in flight, is in the log: it is
    /// indexed, clipped to the smallest size a truncate placed after it
    /// gave the file. Returns the bytes indexed.
    pub fn landed(&mut self, file: FileId, extent: Extent) -> u64 {
        let limit = self.leave_flight(file, extent.seq).unwrap_or(u64::MAX);
        let len = limit
            .saturating_sub(extent.file_offset)
            .min(u64::from(extent.len));
        if len == 0 {
            return 0;
        }
        // INVARIANT: at most `extent.len`, a u32.
        let len = u32::try_from(len).expect("clipped to the extent");
        self.insert(file, Extent { len, ..extent });
        u64::from(len)
    }

    /// Data record `seq` of `file`, in flight, will not be indexed (its
    /// payload was not written, or the file is gone).
    pub fn abandon(&mut self, file: FileId, seq: u64) {
        self.leave_flight(file, seq);
    }

    /// Take record `seq` out of `file`'s flight; returns the smallest size
    /// a newer truncate gave the file, if any.
    fn leave_flight(&mut self, file: FileId, seq: u64) -> Option<u64> {
        let flight = self.flight.get_mut(&file)?;
        let was = flight.seqs.remove(&seq);
        debug_assert!(was, "record {seq} left a flight it was not in");
        let limit = flight
            .truncations
            .iter()
            .filter(|&&(t, _)| t > seq)
            .map(|&(_, size)| size)
            .min();
        if flight.seqs.is_empty() {
            self.flight.remove(&file);
        }
        limit
    }

    /// Whether data records of `file` are in flight.
    pub fn in_flight(&self, file: FileId) -> bool {
        self.flight.contains_key(&file)
    }

    /// The oldest data record of `file` in flight.
    pub fn first_in_flight(&self, file: FileId) -> Option<u64> {
        self.flight.get(&file).and_then(|f| f.seqs.first().copied())
    }

    /// Whether `file` has bytes in the log: buffered, or in flight.
    pub fn has_logged(&self, file: FileId) -> bool {
        self.has_buffered(file) || self.in_flight(file)
    }

    /// `file` was removed (its record placed and written): its buffered
    /// bytes are dropped. Returns whether it had any.
    pub fn remove_file(&mut self, file: FileId) -> bool {
        self.redirector.forget_file(file);
        self.cache.remove_file(file);
        self.index.remove_file(file).is_some()
    }

    /// Buffered pieces and holes of `[offset, offset + len)` of `file`.
    pub fn lookup(&self, file: FileId, offset: u64, len: u64) -> impl Iterator<Item = Piece> + '_ {
        self.index.lookup(file, offset, len)
    }

    /// Drop every buffered extent of `file` from the index, keeping its
    /// stream state (the redirector goes on classifying its writes): its
    /// bytes were written to the capacity tier by the caller, and a durable
    /// record says so. Returns whether it had any.
    pub fn drop_buffered(&mut self, file: FileId) -> bool {
        self.cache.remove_file(file);
        self.index.remove_file(file).is_some()
    }

    /// One past the sequence number of every record placed so far: a
    /// clean record with this bound covers every buffered byte now.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// `file`'s bytes in `range` written before sequence number `bound`
    /// are on the capacity tier (its clean record placed and written): they
    /// leave the index; newer bytes, and bytes outside the range, stay.
    /// Returns the bytes dropped.
    pub fn clean(&mut self, file: FileId, bound: u64, range: core::ops::Range<u64>) -> u64 {
        if let Some(extents) = self.index.file(&file) {
            let kept: Vec<Extent> = extents
                .extents()
                .filter(|e| e.cleaned_by(bound, &range))
                .collect();
            for extent in kept {
                self.cache.insert(file, extent);
            }
        }
        self.index.clean(file, bound, range)
    }

    /// Bytes of `file` in `[offset, offset + len)` changed, or may have,
    /// other than by a record of the log: their clean copies are dropped.
    pub fn forget_cached(&mut self, file: FileId, offset: u64, len: u64) {
        self.cache.invalidate(file, offset, len);
    }

    /// Every clean copy of `file` is dropped (its capacity file changed
    /// behind it).
    pub fn forget_cached_file(&mut self, file: FileId) -> bool {
        self.cache.remove_file(file).is_some()
    }

    /// `region` is filled again: the clean copies in it are dropped.
    /// Returns the bytes dropped.
    pub fn forget_cached_region(&mut self, region: RegionId) -> u64 {
        self.cache.remove_region(region)
    }

    /// Clean copies and holes of `[offset, offset + len)` of `file`.
    pub fn lookup_cached(
        &self,
        file: FileId,
        offset: u64,
        len: u64,
    ) -> impl Iterator<Item = Piece> + '_ {
        self.cache.lookup(file, offset, len)
    }

    /// Whether `file` has clean copies.
    pub fn has_cached(&self, file: FileId) -> bool {
        self.cache.file(&file).is_some()
    }

    /// Bytes in the clean cache.
    pub fn cached_bytes(&self) -> u64 {
        self.cache.buffered_bytes()
    }

    /// Whether `file` has buffered bytes.
    pub fn has_buffered(&self, file: FileId) -> bool {
        self.index.file(&file).is_some()
    }

    /// One past the last buffered byte of `file` (0 if none).
    pub fn buffered_end(&self, file: FileId) -> u64 {
        self.index
            .file(&file)
            .and_then(|f| f.extents().last().map(|e| e.end()))
            .unwrap_or(0)
    }

    /// Whether the capacity tier is idle at `now` (no foreground write
    /// reached it for `idle`, or a drain runs): see
    /// [`FlushGate::capacity_idle`].
    pub fn capacity_idle(&self, now: Time, idle: core::time::Duration) -> GateDecision {
        self.gate.capacity_idle(now, idle)
    }

    /// The longest stretch of buffered bytes (see
    /// [`FileExtents::stretches`](crate::extent_index::FileExtents::stretches))
    /// of a file `candidate` accepts (`Some(quiet)`; `None` skips it) that
    /// is at least `min_run` bytes long: written back now, it reaches the
    /// disk in large writes, not as the seeks the short stretches of a file
    /// still being written at random offsets would cost (they wait, for
    /// their gaps or the close). The head of a file still being written
    /// goes while its tail grows. A `quiet` file (no write for a while)
    /// whose bytes are one stretch goes whatever its length: one seek, and
    /// the tail a sequential writer left behind when it stopped.
    pub fn longest_stretch(
        &self,
        min_run: u64,
        candidate: impl Fn(FileId) -> Option<bool>,
    ) -> Option<(FileId, core::ops::Range<u64>)> {
        self.index
            .files()
            .filter_map(|(file, extents)| {
                // One walk of the extents (this runs under the engine lock
                // at every idle poll): the longest stretch, and whether it
                // is the only one.
                let (longest, stretches) =
                    extents.stretches().fold((0..0, 0u64), |(longest, n), r| {
                        if r.end - r.start > longest.end - longest.start {
                            (r, n + 1)
                        } else {
                            (longest, n + 1)
                        }
                    });
                if stretches == 0 {
                    return None;
                }
                let long = longest.end - longest.start >= min_run;
                if !long && stretches > 1 {
                    return None;
                }
                let quiet = candidate(file)?;
                (long || quiet).then_some((file, longest))
            })
            .max_by_key(|(_, r)| r.end - r.start)
    }

    /// Files with buffered bytes.
    pub fn buffered_files(&self) -> impl Iterator<Item = FileId> + '_ {
        self.index.files().map(|(f, _)| f)
    }

    /// Bytes buffered in the log.
    pub fn buffered_bytes(&self) -> u64 {
        self.index.buffered_bytes()
    }

    /// Whether nothing is buffered and no region is full or flushing: a
    /// drain is complete.
    pub fn is_drained(&self) -> bool {
        self.index.is_empty()
            && !self
                .pipeline
                .states()
                .any(|(_, s)| matches!(s, RegionState::Full | RegionState::Flushing))
    }

    /// Whether a region is full or flushing.
    pub fn flush_pending(&self) -> bool {
        self.pipeline.full_count() > 0 || self.pipeline.flushing_count() > 0
    }

    /// Close the filling region so a drain can flush it.
    pub fn seal(&mut self) -> Option<RegionId> {
        self.pipeline.seal()
    }

    /// A drain or unmount is (or is no longer) in progress: the gate lets
    /// flushing run regardless of traffic while it is.
    pub fn set_draining(&mut self, draining: bool) {
        self.gate.set_draining(draining);
    }

    /// The gate's answer now (for a flusher that checks it between runs).
    pub fn gate_poll(&self, now: Time) -> GateDecision {
        self.gate.poll(now, self.pipeline.has_empty())
    }

    /// What the flusher should do now: the oldest full region, if the
    /// gate allows flushing. With a flush age configured, a filling region
    /// whose first record is older than it is closed (made full) when the
    /// gate allows, and returned: its bytes then flush although it is not
    /// full. When the gate allows because writes have stopped
    /// ([`FlushReason::Quiet`]) or for a drain, the filling region is
    /// closed too, so that every buffered byte flushes in one merged pass
    /// ([`WriteBuffer::start_flush_set`] over [`WriteBuffer::full_regions`]).
    pub fn poll_flush(&mut self, now: Time) -> FlushPoll {
        let region = match self.pipeline.poll_flush() {
            Some(region) => region,
            None => match self.aged_filling(now) {
                Ok(region) => region,
                Err(poll) => return poll,
            },
        };
        match self.gate_poll(now) {
            GateDecision::Flush(reason) => {
                let aged = self.pipeline.state(region) == Some(RegionState::Filling);
                if aged || matches!(reason, FlushReason::Quiet | FlushReason::Draining) {
                    self.pipeline.seal();
                }
                FlushPoll::Flush { region, reason }
            }
            GateDecision::Pause { recheck_at } => FlushPoll::Pause { recheck_at },
        }
    }

    /// What to flush now, the way `set` says ([`FlushSet`]), runs of at
    /// most `run_max_bytes`; `busy(region)`: a record is still being
    /// written into it (sluice's set stops before such a region). A
    /// [`FlushStart::Flush`] has started its regions.
    pub fn next_flush(
        &mut self,
        now: Time,
        set: FlushSet,
        run_max_bytes: u64,
        busy: impl Fn(RegionId) -> bool,
    ) -> Result<FlushStart, PipelineError> {
        let gated = match set {
            FlushSet::Oldest { gated: false } => None,
            _ => Some(self.poll_flush(now)),
        };
        let regions: Vec<RegionId> = match (set, gated) {
            (_, Some(FlushPoll::Idle)) => return Ok(FlushStart::Idle),
            (_, Some(FlushPoll::Pause { recheck_at })) => {
                return Ok(FlushStart::Pause { recheck_at })
            }
            (FlushSet::Oldest { .. }, Some(FlushPoll::Flush { region, .. })) => alloc::vec![region],
            (FlushSet::Oldest { .. }, None) => match self.oldest_full_region() {
                Some(region) => alloc::vec![region],
                None => return Ok(FlushStart::Idle),
            },
            (FlushSet::EveryFull, _) => {
                // Regions are reset oldest first, so that a truncate or
                // unlink record never goes before older data it supersedes.
                let set: Vec<RegionId> = self
                    .full_regions()
                    .into_iter()
                    .take_while(|&r| !busy(r))
                    .collect();
                if set.is_empty() {
                    return Ok(FlushStart::Busy);
                }
                set
            }
        };
        let fill_gaps = set == FlushSet::EveryFull;
        let runs = self.start_flush_set(&regions, run_max_bytes, fill_gaps)?;
        Ok(FlushStart::Flush { regions, runs })
    }

    /// The filling region if its first record is older than the flush age;
    /// else what to tell the flusher (idle, or when the age is reached).
    fn aged_filling(&self, now: Time) -> Result<RegionId, FlushPoll> {
        let age = self.gate.config().flush_age;
        let filling = self.pipeline.filling();
        let first = filling.and_then(|r| self.first_write[r.0 as usize]);
        match (age, filling, first) {
            (Some(age), Some(region), Some(first)) => {
                let due = first.saturating_add(age);
                if now >= due {
                    Ok(region)
                } else {
                    Err(FlushPoll::Pause {
                        recheck_at: Some(due),
                    })
                }
            }
            _ => Err(FlushPoll::Idle),
        }
    }

    /// The oldest full region, whatever the gate says: for drivers whose
    /// flusher is not traffic-aware (the simulator's OrangeFS-BB and
    /// SSDUP). Traffic-aware ones use [`WriteBuffer::poll_flush`].
    pub fn oldest_full_region(&self) -> Option<RegionId> {
        self.pipeline.poll_flush()
    }

    /// When the oldest record not yet flushed was placed: the earliest
    /// first write of a region that is not empty, or `None` when every
    /// region is empty. `now` minus it is the age of the oldest buffered
    /// byte (`sluice status`, `sluice top`); it is an upper bound, since
    /// the bytes of that record may have been overwritten meanwhile and
    /// their region still waits for its flush. Recovered regions count as
    /// written at [`Time::ZERO`].
    pub fn oldest_unflushed_write(&self) -> Option<Time> {
        self.first_write.iter().flatten().min().copied()
    }

    /// The longest record the log can ever take (a region): a record that
    /// must reach the log and is longer ([`Placement::TooLarge`]) must be
    /// split into records of at most this many bytes, headers included.
    pub fn record_bytes_max(&self) -> u64 {
        self.pipeline.config().region_bytes
    }

    /// The full regions in the order they became full: flush them
    /// together with [`WriteBuffer::start_flush_set`], and reset them in
    /// this order (an older region first, so that a truncate or unlink
    /// record is never reset while older data it supersedes is still in
    /// the log).
    pub fn full_regions(&self) -> Vec<RegionId> {
        self.pipeline.full_regions().collect()
    }

    /// Start flushing `regions` (each full) together: the runs of bytes
    /// stored in any of them, per file in offset order and merged across
    /// the regions, each at most `run_max_bytes`. Bytes that are contiguous
    /// once sorted thus flush as one write although several regions hold
    /// them. Look each run up again with [`WriteBuffer::flush_set_pieces`];
    /// finish (or abort) each region on its own. On an error no region was
    /// started.
    ///
    /// With `fill_gaps`, a gap between bytes of the regions that bytes
    /// buffered in other regions fill joins the run
    /// ([`FileExtents::flush_runs_filled`]): look such runs up with
    /// [`WriteBuffer::buffered_pieces`] over every region, which writes
    /// the newest bytes of the whole range.
    pub fn start_flush_set(
        &mut self,
        regions: &[RegionId],
        run_max_bytes: u64,
        fill_gaps: bool,
    ) -> Result<Vec<FlushRunRef>, PipelineError> {
        let mut set = regions.to_vec();
        set.sort_unstable();
        set.dedup();
        for (i, &region) in set.iter().enumerate() {
            if let Err(e) = self.pipeline.start_flush(region) {
                for &started in &set[..i] {
                    let _ = self.pipeline.abort_flush(started);
                }
                return Err(e);
            }
        }
        let mut runs = Vec::new();
        for (file, extents) in self.index.files() {
            let file_runs = if fill_gaps {
                extents.flush_runs_filled(&set, run_max_bytes)
            } else {
                extents.flush_runs_in(&set, run_max_bytes)
            };
            for run in file_runs {
                runs.push(FlushRunRef {
                    file,
                    file_offset: run.file_offset,
                    len: run.len,
                });
            }
        }
        Ok(runs)
    }

    /// The runs of `file` that [`WriteBuffer::start_flush_set`] with
    /// `fill_gaps` would form now over the flushing `regions`, from the one
    /// holding `range.start` to the last starting before `range.end`: the
    /// flusher forms a stretch's short runs again at the end of its set,
    /// when newer bytes may have filled their gaps.
    pub fn flush_runs_within(
        &self,
        regions: &[RegionId],
        file: FileId,
        range: core::ops::Range<u64>,
        run_max_bytes: u64,
    ) -> Vec<FlushRunRef> {
        let mut set = regions.to_vec();
        set.sort_unstable();
        set.dedup();
        let Some(extents) = self.index.file(&file) else {
            return Vec::new();
        };
        extents
            .flush_runs_filled_from(&set, run_max_bytes, range.start)
            .take_while(|run| run.file_offset < range.end)
            .map(|run| FlushRunRef {
                file,
                file_offset: run.file_offset,
                len: run.len,
            })
            .collect()
    }

    /// The bytes of `run` still buffered in any of `regions` now:
    /// `(file_offset, len, location)` per piece, in file order.
    pub fn flush_set_pieces(
        &self,
        regions: &[RegionId],
        run: FlushRunRef,
    ) -> Vec<(u64, u64, LogLocation)> {
        self.buffered_pieces_where(run.file, run.file_offset, run.len, |_, _, at, _| {
            regions.contains(&at.region)
        })
    }

    /// Start flushing `region` (full): the runs of file-contiguous bytes
    /// it holds, per file in offset order, each at most `run_max_bytes`.
    /// Look each run up again with [`WriteBuffer::flush_pieces`] before
    /// writing it: a newer write, truncate or unlink may have superseded it.
    pub fn start_flush(
        &mut self,
        region: RegionId,
        run_max_bytes: u64,
    ) -> Result<Vec<FlushRunRef>, PipelineError> {
        self.start_flush_set(&[region], run_max_bytes, false)
    }

    /// The bytes of `run` still buffered in `region` now: `(file_offset,
    /// len, location)` per piece.
    pub fn flush_pieces(&self, region: RegionId, run: FlushRunRef) -> Vec<(u64, u64, LogLocation)> {
        self.flush_set_pieces(&[region], run)
    }

    /// The buffered pieces of `[offset, offset + len)` of `file`, in file
    /// order, only those in `region` if one is given: `(file_offset, len,
    /// location)` per piece.
    pub fn buffered_pieces(
        &self,
        file: FileId,
        offset: u64,
        len: u64,
        region: Option<RegionId>,
    ) -> Vec<(u64, u64, LogLocation)> {
        self.buffered_pieces_where(file, offset, len, |_, _, at, _| {
            region.is_none_or(|want| at.region == want)
        })
    }

    /// The buffered pieces of `file` in `offset..offset + len` that `keep`
    /// holds for, given each one's `(file_offset, len, location, seq)`:
    /// `(file_offset, len, location)` per piece, in file order.
    pub fn buffered_pieces_where(
        &self,
        file: FileId,
        offset: u64,
        len: u64,
        mut keep: impl FnMut(u64, u64, LogLocation, u64) -> bool,
    ) -> Vec<(u64, u64, LogLocation)> {
        self.index
            .lookup(file, offset, len)
            .filter_map(|piece| match piece {
                Piece::Buffered {
                    file_offset,
                    len,
                    location,
                    seq,
                } if keep(file_offset, len, location, seq) => Some((file_offset, len, location)),
                _ => None,
            })
            .collect()
    }

    /// `region`'s bytes are durable on the capacity tier and the region was
    /// reset durably: it is empty again.
    pub fn finish_flush(&mut self, region: RegionId) -> Result<(), PipelineError> {
        self.pipeline.finish_flush(region)?;
        // What was flushed stays readable in the region: clean copies.
        let flushed: Vec<(FileId, Extent)> = self
            .index
            .files()
            .flat_map(|(file, extents)| {
                extents
                    .extents()
                    .filter(|e| e.location.region == region)
                    .map(move |e| (file, e))
            })
            .collect();
        for (file, extent) in flushed {
            self.cache.insert(file, extent);
        }
        self.index.remove_region(region);
        if let Some(files) = self.described.get_mut(region.0 as usize) {
            files.clear();
        }
        if let Some(first) = self.first_write.get_mut(region.0 as usize) {
            *first = None;
        }
        Ok(())
    }

    /// The flush of `region` failed; it is retried later.
    pub fn abort_flush(&mut self, region: RegionId) -> Result<(), PipelineError> {
        self.pipeline.abort_flush(region)
    }

    /// The redirector (route, threshold, last stream), for status.
    pub fn redirector(&self) -> &Redirector {
        &self.redirector
    }

    /// Under `cost`: route with `t_seek` = `seek` from now on
    /// ([`Redirector::set_capacity_seek`]).
    pub fn set_capacity_seek(&mut self, seek: core::time::Duration) {
        self.redirector.set_capacity_seek(seek);
    }

    /// The region pipeline, for status.
    pub fn pipeline(&self) -> &RegionPipeline {
        &self.pipeline
    }

    /// The extent index, for status and checks.
    pub fn index(&self) -> &ExtentIndex {
        &self.index
    }

    /// The clean extents (bytes written back, still in their regions),
    /// for checks.
    pub fn cache(&self) -> &ExtentIndex {
        &self.cache
    }

    /// Byte counters of placed writes.
    pub fn counters(&self) -> WriteBufferCounters {
        self.counters
    }
}
