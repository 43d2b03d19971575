//! Pipelined fast-tier log regions (DESIGN §4.5).
//!
//! The fast-tier log area is split into `regions` equal regions of
//! `region_bytes` each. Every region cycles through
//! `Empty → Filling → Full → Flushing → Empty`: foreground writes are appended
//! to the one `Filling` region; when a record does not fit, that region becomes
//! `Full` (its unused tail is wasted) and the oldest `Empty` region takes over,
//! while the engine flushes `Full` regions to the capacity tier in the order
//! they became full. With two or more regions, filling and flushing overlap:
//! that overlap is the pipeline of SSDUP+ (Eq. 4–7).
//!
//! [`RegionPipeline`] only keeps the books. It decides where a record goes
//! ([`RegionPipeline::reserve`]) and which region to flush next
//! ([`RegionPipeline::poll_flush`]); the engine writes the records, traverses
//! the extents, and reports back through [`RegionPipeline::start_flush`],
//! [`RegionPipeline::finish_flush`] and [`RegionPipeline::abort_flush`]. It
//! never reads a clock: waiting writers pass `now` and the time of their first
//! attempt.
//!
//! INVARIANTS (checked by [`RegionPipeline::check_invariants`], and with
//! `debug_assert!` after every mutation):
//! - there are exactly `regions` regions;
//! - at most one region is `Filling`, and it is the one the pipeline appends to;
//! - every region's used bytes are at most `region_bytes`; `Empty` regions use 0;
//! - the flush queue holds exactly the `Full` regions, each once, in the order
//!   they became full; the free queue holds exactly the `Empty` regions, each
//!   once.
//!
//! A state transition the engine asks for that is not allowed (flushing a
//! region that is not full, finishing a flush twice, ...) returns
//! [`PipelineError::InvalidTransition`] and changes nothing. It is not a
//! panic: a bug in the engine must not be turned into a crash that loses the
//! buffered data, and refusing the transition keeps the books consistent.

use alloc::collections::VecDeque;
use alloc::vec::Vec;
use core::fmt;
use core::time::Duration;

use crate::{RegionId, Time};

/// Default number of regions: one fills while the other flushes.
pub const REGIONS_DEFAULT: u32 = 2;

/// Upper bound on `regions`. Every region costs a few words of memory here and
/// a header on the fast tier; the bound turns a typo such as `regions = 2e9`
/// into a config error instead of an allocation failure.
pub const REGIONS_MAX: u32 = 65_536;

/// Default bound on how long a writer waits for a free region before its
/// write goes through to the capacity tier.
pub const WAIT_MAX_DEFAULT: Duration = Duration::from_secs(1);

/// How long a record that must reach the log
/// ([`RegionPipeline::reserve_required`]) waits before it polls again, if no
/// finished flush wakes it first.
pub const REQUIRED_RETRY: Duration = Duration::from_millis(100);

/// What to do with a write when no region has room for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WhenFull {
    /// Hold the writer until a flush frees a region (the paper's behaviour),
    /// but never longer than [`PipelineConfig::wait_max`] measured from the
    /// writer's first attempt; after that the write goes through to the
    /// capacity tier. There is no "wait forever": a stuck capacity tier
    /// would otherwise hang every writer. `wait_max = 0` writes through at
    /// once, but counts as a timed-out wait.
    Wait,
    /// Send the write straight to the capacity tier.
    WriteThrough,
}

/// Configuration of the region pipeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PipelineConfig {
    /// Number of log regions, at least 1 and at most [`REGIONS_MAX`]. One
    /// region is the conventional burst buffer (nothing can be appended while
    /// it flushes), kept for the simulator's baseline; sluice's own
    /// configuration asks for at least [`REGIONS_DEFAULT`] so that filling
    /// and flushing overlap (DESIGN §4.5).
    pub regions: u32,
    /// Size of each region in bytes: the space records are appended to.
    /// Greater than 0; a record longer than this is refused with
    /// [`Admission::TooLarge`].
    pub region_bytes: u64,
    /// Behaviour when every region is full or flushing.
    pub when_full: WhenFull,
    /// Longest wait for a free region under [`WhenFull::Wait`]. Ignored
    /// under [`WhenFull::WriteThrough`].
    pub wait_max: Duration,
}

impl PipelineConfig {
    /// The default configuration for regions of `region_bytes` each:
    /// [`REGIONS_DEFAULT`] regions, wait up to [`WAIT_MAX_DEFAULT`], then write
    /// through. There is no default region size: it follows from the fast
    /// tier's capacity and the log share of it.
    pub fn with_region_bytes(region_bytes: u64) -> PipelineConfig {
        PipelineConfig {
            regions: REGIONS_DEFAULT,
            region_bytes,
            when_full: WhenFull::Wait,
            wait_max: WAIT_MAX_DEFAULT,
        }
    }

    /// Checks the configuration; see [`ConfigError`] for what is rejected.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.regions == 0 {
            return Err(ConfigError::TooFewRegions {
                regions: self.regions,
            });
        }
        if self.regions > REGIONS_MAX {
            return Err(ConfigError::TooManyRegions {
                regions: self.regions,
            });
        }
        if self.region_bytes == 0 {
            return Err(ConfigError::ZeroRegionBytes);
        }
        Ok(())
    }
}

/// An invalid [`PipelineConfig`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ConfigError {
    /// No region at all.
    TooFewRegions {
        /// The configured number of regions.
        regions: u32,
    },
    /// More than [`REGIONS_MAX`] regions.
    TooManyRegions {
        /// The configured number of regions.
        regions: u32,
    },
    /// `region_bytes` is 0.
    ZeroRegionBytes,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::TooFewRegions { regions } => write!(
                f,
                "log regions = {regions}: at least 1 is needed, and 2 or more \
                 let one region fill while another flushes; raise `regions`"
            ),
            ConfigError::TooManyRegions { regions } => write!(
                f,
                "log regions = {regions}: at most {REGIONS_MAX} are supported; \
                 lower `regions` and raise `region_bytes` instead"
            ),
            ConfigError::ZeroRegionBytes => f.write_str(
                "log region size is 0 bytes: set `region_bytes` to the log \
                 share of the fast tier divided by `regions`",
            ),
        }
    }
}

/// Why [`RegionPipeline::restore`] rejected the recovered region states.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RestoreError {
    /// The configuration itself is invalid.
    Config(ConfigError),
    /// The number of recovered regions differs from `regions`.
    RegionCount {
        /// `regions` from the configuration.
        expected: u32,
        /// Number of states passed in.
        actual: usize,
    },
    /// More than one region was recovered as `Filling`.
    SeveralFilling {
        /// The first `Filling` region.
        first: RegionId,
        /// Another `Filling` region.
        second: RegionId,
    },
    /// A region claims more used bytes than a region holds.
    UsedExceedsRegion {
        /// The region.
        region: RegionId,
        /// Its recovered used bytes.
        used_bytes: u64,
        /// The configured region size.
        region_bytes: u64,
    },
    /// An `Empty` region claims to hold bytes.
    EmptyWithBytes {
        /// The region.
        region: RegionId,
        /// Its recovered used bytes.
        used_bytes: u64,
    },
}

impl From<ConfigError> for RestoreError {
    fn from(error: ConfigError) -> RestoreError {
        RestoreError::Config(error)
    }
}

impl fmt::Display for RestoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RestoreError::Config(error) => error.fmt(f),
            RestoreError::RegionCount { expected, actual } => write!(
                f,
                "recovered {actual} log regions but the configuration has \
                 {expected}; changing `regions` needs a drained fast tier"
            ),
            RestoreError::SeveralFilling { first, second } => write!(
                f,
                "recovered log regions {} and {} are both filling; at most one \
                 region can be",
                first.0, second.0
            ),
            RestoreError::UsedExceedsRegion {
                region,
                used_bytes,
                region_bytes,
            } => write!(
                f,
                "recovered log region {} uses {used_bytes} bytes but regions \
                 hold {region_bytes}; was `region_bytes` changed without a drain?",
                region.0
            ),
            RestoreError::EmptyWithBytes { region, used_bytes } => write!(
                f,
                "recovered log region {} is empty but uses {used_bytes} bytes",
                region.0
            ),
        }
    }
}

/// Life-cycle state of one region.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RegionState {
    /// Holds no live data; waits in the free queue.
    Empty,
    /// Receives appended records. At most one region is filling.
    Filling,
    /// Closed for appends; waits in the flush queue.
    Full,
    /// The engine is copying its extents to the capacity tier.
    Flushing,
}

impl RegionState {
    /// Lower-case name used in reports and metrics labels.
    pub fn name(self) -> &'static str {
        match self {
            RegionState::Empty => "empty",
            RegionState::Filling => "filling",
            RegionState::Full => "full",
            RegionState::Flushing => "flushing",
        }
    }
}

impl fmt::Display for RegionState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a write was sent to the capacity tier instead of the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WriteThroughReason {
    /// No region had room and `when_full = write_through`.
    Configured,
    /// No region had room and the writer already waited `wait_max`.
    WaitTimedOut,
}

/// Answer of [`RegionPipeline::reserve`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Admission {
    /// Write the record at byte `offset` of `region`. The region's used bytes
    /// have already advanced by the record's length.
    Append {
        /// Region to append to.
        region: RegionId,
        /// Byte position inside the region where the record starts.
        offset: u64,
    },
    /// No region has room now. Retry when a flush finishes, and at the latest
    /// at `retry_at_latest`, passing the same `waiting_since`; that retry
    /// writes through if there is still no room.
    Wait {
        /// `waiting_since + wait_max`.
        retry_at_latest: Time,
    },
    /// Write to the capacity tier instead.
    WriteThrough {
        /// Why the log was bypassed.
        reason: WriteThroughReason,
    },
    /// The record is longer than a region and can never be appended: the
    /// caller must split it into records of at most `region_bytes`, or write
    /// it through. Nothing was reserved or counted, apart from
    /// [`PipelineCounters::too_large`].
    TooLarge,
}

/// A state transition the pipeline refused. The pipeline is unchanged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PipelineError {
    /// The region id is not below `regions`.
    UnknownRegion {
        /// The id passed in.
        region: RegionId,
    },
    /// The region is not in the state the transition starts from.
    InvalidTransition {
        /// The region.
        region: RegionId,
        /// Its current state.
        from: RegionState,
        /// The state that was asked for.
        to: RegionState,
    },
}

impl fmt::Display for PipelineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PipelineError::UnknownRegion { region } => {
                write!(f, "log region {} does not exist", region.0)
            }
            PipelineError::InvalidTransition { region, from, to } => {
                write!(f, "log region {} cannot go from {from} to {to}", region.0)
            }
        }
    }
}

/// A broken invariant of [`RegionPipeline`]; a bug in the pipeline itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct InvariantViolation {
    /// Which invariant broke.
    pub what: &'static str,
    /// The region it broke on, if it concerns one region.
    pub region: Option<RegionId>,
}

impl fmt::Display for InvariantViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.region {
            Some(region) => write!(f, "region {}: {}", region.0, self.what),
            None => f.write_str(self.what),
        }
    }
}

/// Monotonic counters of the pipeline, for metrics. They start at zero on
/// [`RegionPipeline::new`] and [`RegionPipeline::restore`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PipelineCounters {
    /// Writers that had to wait for a free region. Counted on the writer's
    /// first attempt only (`now == waiting_since`), so a writer retrying
    /// several times counts once; a retry at exactly the nanosecond of its
    /// first attempt would count again.
    pub waits: u64,
    /// Writes sent to the capacity tier because no region had room, for
    /// either [`WriteThroughReason`]. Excludes [`Admission::TooLarge`].
    pub write_throughs: u64,
    /// The subset of `write_throughs` whose wait timed out.
    pub wait_timeouts: u64,
    /// Reservations refused with [`Admission::TooLarge`].
    pub too_large: u64,
    /// Bytes left unused at the tail of regions closed because the next
    /// record did not fit. Tails left by [`RegionPipeline::seal`] are not
    /// counted: they are not lost to fragmentation.
    pub wasted_tail_bytes: u64,
    /// Regions that went from filling to full (by rollover or seal).
    pub regions_filled: u64,
    /// Regions that finished flushing and became empty.
    pub regions_flushed: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Region {
    state: RegionState,
    used_bytes: u64,
    /// Position in the order regions became full; orders the flush queue and
    /// lets an aborted flush return to its place. Meaningful only while the
    /// region is `Full` or `Flushing`.
    full_seq: u64,
}

/// The book-keeping of the pipelined log regions; see the module docs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegionPipeline {
    config: PipelineConfig,
    regions: Vec<Region>,
    /// The `Filling` region, if any.
    filling: Option<RegionId>,
    /// `Full` regions, ascending `full_seq` (the order they became full).
    flush_queue: VecDeque<RegionId>,
    /// `Empty` regions, in the order they became empty.
    free_queue: VecDeque<RegionId>,
    next_full_seq: u64,
    counters: PipelineCounters,
}

impl RegionPipeline {
    /// A pipeline whose regions are all empty.
    pub fn new(config: PipelineConfig) -> Result<RegionPipeline, ConfigError> {
        config.validate()?;
        let regions = alloc::vec![
            Region {
                state: RegionState::Empty,
                used_bytes: 0,
                full_seq: 0,
            };
            config.regions as usize
        ];
        let pipeline = RegionPipeline {
            config,
            regions,
            filling: None,
            flush_queue: VecDeque::with_capacity(config.regions as usize),
            free_queue: (0..config.regions).map(RegionId).collect(),
            next_full_seq: 0,
            counters: PipelineCounters::default(),
        };
        pipeline.debug_check();
        Ok(pipeline)
    }

    /// A pipeline rebuilt from the region states found by recovery:
    /// `states[i]` is `(state, used_bytes)` of region `i`.
    ///
    /// A region recovered as `Flushing` becomes `Full`: the crash interrupted
    /// its flush, so it is flushed again from the start (rewriting the same
    /// bytes to the capacity tier is harmless). `Full` regions are queued for
    /// flushing in region id order, because the states carry no fill order;
    /// an engine that knows a better order (by record sequence number) may
    /// call [`RegionPipeline::start_flush`] on any full region. Empty regions
    /// are reused in region id order.
    pub fn restore(
        config: PipelineConfig,
        states: &[(RegionState, u64)],
    ) -> Result<RegionPipeline, RestoreError> {
        config.validate()?;
        if states.len() != config.regions as usize {
            return Err(RestoreError::RegionCount {
                expected: config.regions,
                actual: states.len(),
            });
        }
        let mut pipeline = RegionPipeline {
            config,
            regions: Vec::with_capacity(states.len()),
            filling: None,
            flush_queue: VecDeque::with_capacity(states.len()),
            free_queue: VecDeque::with_capacity(states.len()),
            next_full_seq: 0,
            counters: PipelineCounters::default(),
        };
        for (index, &(state, used_bytes)) in states.iter().enumerate() {
            let region = region_id(index);
            if used_bytes > config.region_bytes {
                return Err(RestoreError::UsedExceedsRegion {
                    region,
                    used_bytes,
                    region_bytes: config.region_bytes,
                });
            }
            let mut full_seq = 0;
            let state = match state {
                RegionState::Empty => {
                    if used_bytes != 0 {
                        return Err(RestoreError::EmptyWithBytes { region, used_bytes });
                    }
                    pipeline.free_queue.push_back(region);
                    RegionState::Empty
                }
                RegionState::Filling => {
                    if let Some(first) = pipeline.filling {
                        return Err(RestoreError::SeveralFilling {
                            first,
                            second: region,
                        });
                    }
                    pipeline.filling = Some(region);
                    RegionState::Filling
                }
                RegionState::Full | RegionState::Flushing => {
                    full_seq = pipeline.next_full_seq;
                    pipeline.next_full_seq += 1;
                    pipeline.flush_queue.push_back(region);
                    RegionState::Full
                }
            };
            pipeline.regions.push(Region {
                state,
                used_bytes,
                full_seq,
            });
        }
        pipeline.debug_check();
        Ok(pipeline)
    }

    /// The configuration.
    pub fn config(&self) -> &PipelineConfig {
        &self.config
    }

    /// Reserves `len` bytes of log for one record.
    ///
    /// `waiting_since` is the time of this writer's first attempt for this
    /// record (equal to `now` on the first call; kept across retries after
    /// [`Admission::Wait`]); it bounds the wait by `wait_max`.
    ///
    /// If the filling region cannot fit `len`, it becomes full (its tail stays
    /// unused) and the oldest empty region takes over. A region that an append
    /// fills exactly becomes full at once. A record of 0 bytes follows the same
    /// rules: it fits in any open region and gets the current append position,
    /// opening the oldest empty region if none is filling (the engine's
    /// records carry a header, so it never asks for 0).
    pub fn reserve(&mut self, now: Time, len: u64, waiting_since: Time) -> Admission {
        self.reserve_as(now, len, waiting_since, false)
    }

    /// Reserves `len` bytes for a record that must reach the log whatever
    /// `when_full` says: a truncation, an unlink, a rename's path, or a
    /// write over buffered bytes (writing those through would leave the
    /// older buffered bytes to shadow it). The answer is
    /// [`Admission::Append`], [`Admission::Wait`] (retry at the latest at
    /// `retry_at_latest`; it never turns into a write-through) or
    /// [`Admission::TooLarge`]. Waits are counted as for
    /// [`RegionPipeline::reserve`].
    pub fn reserve_required(&mut self, now: Time, len: u64, waiting_since: Time) -> Admission {
        self.reserve_as(now, len, waiting_since, true)
    }

    fn reserve_as(
        &mut self,
        now: Time,
        len: u64,
        waiting_since: Time,
        required: bool,
    ) -> Admission {
        debug_assert!(
            waiting_since <= now,
            "a writer cannot have started waiting in the future"
        );
        if len > self.config.region_bytes {
            self.counters.too_large += 1;
            return Admission::TooLarge;
        }
        if let Some(region) = self.filling {
            let used_bytes = self.regions[index(region)].used_bytes;
            // Cannot overflow: used_bytes and len are both at most region_bytes.
            if used_bytes + len > self.config.region_bytes {
                self.close_filling();
                self.counters.wasted_tail_bytes += self.config.region_bytes - used_bytes;
            }
        }
        if self.filling.is_none() {
            if let Some(region) = self.free_queue.pop_front() {
                self.regions[index(region)].state = RegionState::Filling;
                self.filling = Some(region);
            }
        }
        let admission = match self.filling {
            Some(region) => {
                let slot = &mut self.regions[index(region)];
                let offset = slot.used_bytes;
                slot.used_bytes += len;
                if slot.used_bytes == self.config.region_bytes {
                    // Nothing more fits: close it now so that it can flush
                    // before the next write arrives.
                    self.close_filling();
                }
                Admission::Append { region, offset }
            }
            None if required => {
                if now == waiting_since {
                    self.counters.waits += 1;
                }
                Admission::Wait {
                    retry_at_latest: now.saturating_add(REQUIRED_RETRY),
                }
            }
            None => self.admit_when_full(now, waiting_since),
        };
        self.debug_check();
        admission
    }

    /// Every region is full or flushing: wait or write through.
    fn admit_when_full(&mut self, now: Time, waiting_since: Time) -> Admission {
        let reason = match self.config.when_full {
            WhenFull::WriteThrough => WriteThroughReason::Configured,
            WhenFull::Wait => {
                let retry_at_latest = waiting_since.saturating_add(self.config.wait_max);
                if now < retry_at_latest {
                    if now == waiting_since {
                        self.counters.waits += 1;
                    }
                    return Admission::Wait { retry_at_latest };
                }
                self.counters.wait_timeouts += 1;
                WriteThroughReason::WaitTimedOut
            }
        };
        self.counters.write_throughs += 1;
        Admission::WriteThrough { reason }
    }

    /// Closes the filling region: it becomes full and joins the flush queue.
    fn close_filling(&mut self) {
        if let Some(region) = self.filling.take() {
            let slot = &mut self.regions[index(region)];
            slot.state = RegionState::Full;
            slot.full_seq = self.next_full_seq;
            self.next_full_seq += 1;
            self.flush_queue.push_back(region);
            self.counters.regions_filled += 1;
        }
    }

    /// Makes the filling region full if it holds any bytes, so that a drain or
    /// unmount can flush a partly filled region. Returns that region.
    pub fn seal(&mut self) -> Option<RegionId> {
        let region = self.filling?;
        if self.regions[index(region)].used_bytes == 0 {
            return None;
        }
        self.close_filling();
        self.debug_check();
        Some(region)
    }

    /// The full region to flush next: the one that became full first.
    pub fn poll_flush(&self) -> Option<RegionId> {
        self.flush_queue.front().copied()
    }

    /// Every full region, in the order they became full.
    pub fn full_regions(&self) -> impl ExactSizeIterator<Item = RegionId> + '_ {
        self.flush_queue.iter().copied()
    }

    /// `Full → Flushing`: the engine starts flushing `region`. Any full
    /// region may be flushed, not only [`RegionPipeline::poll_flush`]'s
    /// choice, so that several can flush at once.
    pub fn start_flush(&mut self, region: RegionId) -> Result<(), PipelineError> {
        self.expect_state(region, RegionState::Full, RegionState::Flushing)?;
        self.regions[index(region)].state = RegionState::Flushing;
        self.flush_queue.retain(|&queued| queued != region);
        self.debug_check();
        Ok(())
    }

    /// `Flushing → Empty`: the region's data is durable on the capacity tier
    /// and the region was marked empty durably. Its used bytes reset to 0 and
    /// it joins the back of the free queue.
    pub fn finish_flush(&mut self, region: RegionId) -> Result<(), PipelineError> {
        self.expect_state(region, RegionState::Flushing, RegionState::Empty)?;
        let slot = &mut self.regions[index(region)];
        slot.state = RegionState::Empty;
        slot.used_bytes = 0;
        self.free_queue.push_back(region);
        self.counters.regions_flushed += 1;
        self.debug_check();
        Ok(())
    }

    /// `Flushing → Full`: the flush failed (the capacity tier returned an
    /// error) and is retried later. The region goes back to its place in the
    /// flush queue (by the time it became full), so older data still flushes
    /// first.
    pub fn abort_flush(&mut self, region: RegionId) -> Result<(), PipelineError> {
        self.expect_state(region, RegionState::Flushing, RegionState::Full)?;
        let full_seq = self.regions[index(region)].full_seq;
        self.regions[index(region)].state = RegionState::Full;
        let position = self
            .flush_queue
            .iter()
            .position(|&queued| self.regions[index(queued)].full_seq > full_seq)
            .unwrap_or(self.flush_queue.len());
        self.flush_queue.insert(position, region);
        self.debug_check();
        Ok(())
    }

    fn expect_state(
        &self,
        region: RegionId,
        from: RegionState,
        to: RegionState,
    ) -> Result<(), PipelineError> {
        let current = self
            .state(region)
            .ok_or(PipelineError::UnknownRegion { region })?;
        if current == from {
            Ok(())
        } else {
            Err(PipelineError::InvalidTransition {
                region,
                from: current,
                to,
            })
        }
    }

    /// State of `region`, or `None` if there is no such region.
    pub fn state(&self, region: RegionId) -> Option<RegionState> {
        self.regions.get(index(region)).map(|slot| slot.state)
    }

    /// Bytes appended to `region` since it was last empty (its unused tail
    /// excluded), or `None` if there is no such region.
    pub fn used_bytes(&self, region: RegionId) -> Option<u64> {
        self.regions.get(index(region)).map(|slot| slot.used_bytes)
    }

    /// Every region with its state, in region id order.
    pub fn states(&self) -> impl ExactSizeIterator<Item = (RegionId, RegionState)> + '_ {
        self.regions
            .iter()
            .enumerate()
            .map(|(i, slot)| (region_id(i), slot.state))
    }

    /// The filling region, if any.
    pub fn filling(&self) -> Option<RegionId> {
        self.filling
    }

    /// Number of empty regions.
    pub fn empty_count(&self) -> u32 {
        // Cannot truncate: there are at most REGIONS_MAX regions.
        self.free_queue.len() as u32
    }

    /// Whether any region is empty. When none is, the flush gate's starvation
    /// guard flushes regardless of traffic.
    pub fn has_empty(&self) -> bool {
        !self.free_queue.is_empty()
    }

    /// Number of full regions waiting to be flushed.
    pub fn full_count(&self) -> u32 {
        // Cannot truncate: there are at most REGIONS_MAX regions.
        self.flush_queue.len() as u32
    }

    /// Number of regions being flushed.
    pub fn flushing_count(&self) -> u32 {
        self.count_in(RegionState::Flushing)
    }

    /// The counters since construction.
    pub fn counters(&self) -> PipelineCounters {
        self.counters
    }

    fn count_in(&self, state: RegionState) -> u32 {
        let count = self.regions.iter().filter(|s| s.state == state).count();
        // Cannot truncate: there are at most REGIONS_MAX regions.
        count as u32
    }

    /// Checks every invariant listed in the module docs.
    pub fn check_invariants(&self) -> Result<(), InvariantViolation> {
        let violation = |what, region| Err(InvariantViolation { what, region });
        if self.regions.len() != self.config.regions as usize {
            return violation("region count differs from the configuration", None);
        }
        // Linear in the number of regions: this runs after every mutation in
        // debug builds.
        let mut queued = alloc::vec![false; self.regions.len()];
        let queues = [
            (
                &self.flush_queue,
                RegionState::Full,
                "flush queue holds a region that is not full",
            ),
            (
                &self.free_queue,
                RegionState::Empty,
                "free queue holds a region that is not empty",
            ),
        ];
        for (queue, wanted, what) in queues {
            for &region in queue {
                match self.regions.get(index(region)) {
                    None => return violation("a queue holds an unknown region", Some(region)),
                    Some(slot) if slot.state != wanted => return violation(what, Some(region)),
                    Some(_) => {}
                }
                if core::mem::replace(&mut queued[index(region)], true) {
                    return violation("a region is queued twice", Some(region));
                }
            }
        }
        let mut filling_seen = None;
        for (i, slot) in self.regions.iter().enumerate() {
            let region = Some(region_id(i));
            if slot.used_bytes > self.config.region_bytes {
                return violation("used bytes exceed region_bytes", region);
            }
            match slot.state {
                RegionState::Empty if slot.used_bytes != 0 => {
                    return violation("empty region has used bytes", region);
                }
                RegionState::Empty if !queued[i] => {
                    return violation("empty region is not in the free queue", region);
                }
                RegionState::Full if !queued[i] => {
                    return violation("full region is not in the flush queue", region);
                }
                RegionState::Filling => {
                    if filling_seen.is_some() {
                        return violation("more than one filling region", region);
                    }
                    filling_seen = region;
                }
                _ => {}
            }
        }
        if filling_seen != self.filling {
            return violation("filling region differs from the recorded one", None);
        }
        let queue_ordered = self
            .flush_queue
            .iter()
            .zip(self.flush_queue.iter().skip(1))
            .all(|(&a, &b)| self.regions[index(a)].full_seq < self.regions[index(b)].full_seq);
        if !queue_ordered {
            return violation("flush queue is not in the order regions became full", None);
        }
        Ok(())
    }

    fn debug_check(&self) {
        debug_assert_eq!(self.check_invariants(), Ok(()));
    }
}

/// Vector index of a region id. Ids of regions that do not exist map to
/// indexes past the end, which `get` rejects.
fn index(region: RegionId) -> usize {
    region.0 as usize
}

/// Region id of a vector index.
fn region_id(index: usize) -> RegionId {
    debug_assert!(index < REGIONS_MAX as usize);
    // Cannot truncate: there are at most REGIONS_MAX regions.
    RegionId(index as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn config(regions: u32, region_bytes: u64, when_full: WhenFull) -> PipelineConfig {
        PipelineConfig {
            regions,
            region_bytes,
            when_full,
            wait_max: Duration::from_millis(100),
        }
    }

    fn append(region: u32, offset: u64) -> Admission {
        Admission::Append {
            region: RegionId(region),
            offset,
        }
    }

    fn flush(pipeline: &mut RegionPipeline, region: RegionId) {
        pipeline.start_flush(region).unwrap();
        pipeline.finish_flush(region).unwrap();
    }

    #[test]
    fn config_validation() {
        let ok = PipelineConfig::with_region_bytes(1 << 20);
        assert_eq!(ok.validate(), Ok(()));
        assert_eq!(ok.regions, 2);
        assert_eq!(ok.when_full, WhenFull::Wait);
        assert_eq!(ok.wait_max, Duration::from_secs(1));
        let bad = PipelineConfig { regions: 0, ..ok };
        assert_eq!(
            bad.validate(),
            Err(ConfigError::TooFewRegions { regions: 0 })
        );
        assert!(RegionPipeline::new(bad).is_err());
        // One region is the conventional burst buffer: valid, no overlap.
        assert_eq!(PipelineConfig { regions: 1, ..ok }.validate(), Ok(()));
        let bad = PipelineConfig {
            regions: REGIONS_MAX + 1,
            ..ok
        };
        assert!(matches!(
            bad.validate(),
            Err(ConfigError::TooManyRegions { .. })
        ));
        let bad = PipelineConfig {
            region_bytes: 0,
            ..ok
        };
        assert_eq!(bad.validate(), Err(ConfigError::ZeroRegionBytes));
        let message = ConfigError::TooFewRegions { regions: 0 }.to_string();
        assert!(message.contains("at least 1"), "{message}");
    }

    #[test]
    fn fill_rollover_and_fifo_flush() {
        let mut p = RegionPipeline::new(config(3, 100, WhenFull::Wait)).unwrap();
        let t = Time::ZERO;
        assert_eq!(p.reserve(t, 60, t), append(0, 0));
        assert_eq!(p.reserve(t, 40, t), append(0, 60));
        assert_eq!(p.used_bytes(RegionId(0)), Some(100));
        // Exactly full: closed at once, the next region opens on the next write.
        assert_eq!(p.state(RegionId(0)), Some(RegionState::Full));
        assert_eq!(p.filling(), None);
        assert_eq!(p.reserve(t, 1, t), append(1, 0));
        assert_eq!(p.counters().wasted_tail_bytes, 0);
        assert_eq!(p.reserve(t, 90, t), append(1, 1));
        // 9 bytes of region 1 stay unused.
        assert_eq!(p.reserve(t, 10, t), append(2, 0));
        assert_eq!(p.counters().wasted_tail_bytes, 9);
        assert_eq!(p.counters().regions_filled, 2);
        assert_eq!(p.empty_count(), 0);
        assert!(!p.has_empty());

        // FIFO: region 0 became full first.
        assert_eq!(p.poll_flush(), Some(RegionId(0)));
        p.start_flush(RegionId(0)).unwrap();
        assert_eq!(p.poll_flush(), Some(RegionId(1)));
        p.start_flush(RegionId(1)).unwrap();
        assert_eq!(p.poll_flush(), None);
        // Finishing out of order is allowed.
        p.finish_flush(RegionId(1)).unwrap();
        p.finish_flush(RegionId(0)).unwrap();
        assert_eq!(p.used_bytes(RegionId(1)), Some(0));
        assert_eq!(p.counters().regions_flushed, 2);
        // Free regions are reused in the order they became empty.
        assert_eq!(p.reserve(t, 95, t), append(1, 0));
        assert_eq!(p.reserve(t, 95, t), append(0, 0));
        assert_eq!(p.poll_flush(), Some(RegionId(2)));
        assert_eq!(p.check_invariants(), Ok(()));
    }

    #[test]
    fn abort_returns_region_to_its_place_in_the_queue() {
        let mut p = RegionPipeline::new(config(3, 10, WhenFull::Wait)).unwrap();
        let t = Time::ZERO;
        for _ in 0..3 {
            p.reserve(t, 10, t);
        }
        // All three regions are full.
        p.start_flush(RegionId(0)).unwrap();
        assert_eq!(p.poll_flush(), Some(RegionId(1)));
        p.abort_flush(RegionId(0)).unwrap();
        assert_eq!(p.state(RegionId(0)), Some(RegionState::Full));
        assert_eq!(p.used_bytes(RegionId(0)), Some(10));
        assert_eq!(p.poll_flush(), Some(RegionId(0)));
        // Flush out of queue order, then abort the younger one.
        p.start_flush(RegionId(1)).unwrap();
        p.start_flush(RegionId(0)).unwrap();
        p.abort_flush(RegionId(1)).unwrap();
        p.abort_flush(RegionId(0)).unwrap();
        assert_eq!(p.poll_flush(), Some(RegionId(0)));
        assert_eq!(p.check_invariants(), Ok(()));
    }

    #[test]
    fn wait_then_write_through_after_wait_max() {
        let mut p = RegionPipeline::new(config(2, 10, WhenFull::Wait)).unwrap();
        let t0 = Time::ZERO;
        p.reserve(t0, 10, t0);
        p.reserve(t0, 10, t0);
        let first = Time::from_millis(5);
        let wait = Admission::Wait {
            retry_at_latest: Time::from_millis(105),
        };
        // Both regions are full: nothing is free.
        assert_eq!(p.reserve(first, 1, first), wait);
        assert_eq!(p.state(RegionId(1)), Some(RegionState::Full));
        assert_eq!(p.counters().waits, 1);
        // A retry of the same writer is not counted again.
        assert_eq!(p.reserve(Time::from_millis(50), 1, first), wait);
        assert_eq!(p.counters().waits, 1);
        assert_eq!(p.reserve(Time::from_nanos(105 * MS - 1), 1, first), wait);
        assert_eq!(
            p.reserve(Time::from_millis(105), 1, first),
            Admission::WriteThrough {
                reason: WriteThroughReason::WaitTimedOut
            }
        );
        let counters = p.counters();
        assert_eq!(counters.waits, 1);
        assert_eq!(counters.write_throughs, 1);
        assert_eq!(counters.wait_timeouts, 1);
        // A flush frees a region: the waiting writer gets in.
        flush(&mut p, RegionId(0));
        let now = Time::from_millis(106);
        assert_eq!(p.reserve(now, 1, now), append(0, 0));
    }

    #[test]
    fn wait_max_zero_writes_through_at_once() {
        let mut p = RegionPipeline::new(PipelineConfig {
            wait_max: Duration::ZERO,
            ..config(2, 10, WhenFull::Wait)
        })
        .unwrap();
        let t = Time::from_millis(1);
        p.reserve(t, 10, t);
        p.reserve(t, 10, t);
        assert_eq!(
            p.reserve(t, 10, t),
            Admission::WriteThrough {
                reason: WriteThroughReason::WaitTimedOut
            }
        );
        assert_eq!(p.counters().waits, 0);
    }

    #[test]
    fn write_through_mode() {
        let mut p = RegionPipeline::new(config(2, 10, WhenFull::WriteThrough)).unwrap();
        let t = Time::ZERO;
        p.reserve(t, 10, t);
        p.reserve(t, 10, t);
        let through = Admission::WriteThrough {
            reason: WriteThroughReason::Configured,
        };
        assert_eq!(p.reserve(t, 1, t), through);
        assert_eq!(p.reserve(t, 1, t), through);
        assert_eq!(p.counters().write_throughs, 2);
        assert_eq!(p.counters().waits, 0);
        assert_eq!(p.counters().wait_timeouts, 0);
    }

    #[test]
    fn too_large_changes_nothing_but_its_counter() {
        let mut p = RegionPipeline::new(config(2, 10, WhenFull::Wait)).unwrap();
        let t = Time::ZERO;
        p.reserve(t, 5, t);
        let before = p.clone();
        assert_eq!(p.reserve(t, 11, t), Admission::TooLarge);
        assert_eq!(p.counters().too_large, 1);
        assert_eq!(
            p.states().collect::<Vec<_>>(),
            before.states().collect::<Vec<_>>()
        );
        assert_eq!(p.used_bytes(RegionId(0)), Some(5));
        // Exactly region_bytes fits (in a fresh region).
        assert_eq!(p.reserve(t, 10, t), append(1, 0));
    }

    #[test]
    fn zero_length_reservation_is_not_special() {
        let mut p = RegionPipeline::new(config(2, 10, WhenFull::Wait)).unwrap();
        let t = Time::ZERO;
        assert_eq!(p.reserve(t, 0, t), append(0, 0));
        assert_eq!(p.state(RegionId(0)), Some(RegionState::Filling));
        assert_eq!(
            p.seal(),
            None,
            "nothing to flush in an empty filling region"
        );
        assert_eq!(p.reserve(t, 10, t), append(0, 0));
        // Region 0 is exactly full and closed: a 0-byte record opens region 1.
        assert_eq!(p.reserve(t, 0, t), append(1, 0));
    }

    #[test]
    fn seal_closes_a_partly_filled_region() {
        let mut p = RegionPipeline::new(config(2, 10, WhenFull::Wait)).unwrap();
        let t = Time::ZERO;
        assert_eq!(p.seal(), None);
        p.reserve(t, 4, t);
        assert_eq!(p.seal(), Some(RegionId(0)));
        assert_eq!(p.state(RegionId(0)), Some(RegionState::Full));
        assert_eq!(p.filling(), None);
        assert_eq!(p.seal(), None);
        assert_eq!(p.counters().wasted_tail_bytes, 0);
        assert_eq!(p.counters().regions_filled, 1);
        assert_eq!(p.poll_flush(), Some(RegionId(0)));
        // The next write opens the next empty region.
        assert_eq!(p.reserve(t, 4, t), append(1, 0));
    }

    #[test]
    fn invalid_transitions_change_nothing() {
        let mut p = RegionPipeline::new(config(2, 10, WhenFull::Wait)).unwrap();
        let t = Time::ZERO;
        p.reserve(t, 10, t);
        p.reserve(t, 1, t);
        // Region 0 full, region 1 filling.
        let before = p.clone();
        let r0 = RegionId(0);
        let r1 = RegionId(1);
        assert_eq!(
            p.finish_flush(r0),
            Err(PipelineError::InvalidTransition {
                region: r0,
                from: RegionState::Full,
                to: RegionState::Empty
            })
        );
        assert_eq!(
            p.abort_flush(r0),
            Err(PipelineError::InvalidTransition {
                region: r0,
                from: RegionState::Full,
                to: RegionState::Full
            })
        );
        assert_eq!(
            p.start_flush(r1),
            Err(PipelineError::InvalidTransition {
                region: r1,
                from: RegionState::Filling,
                to: RegionState::Flushing
            })
        );
        assert_eq!(
            p.start_flush(RegionId(2)),
            Err(PipelineError::UnknownRegion {
                region: RegionId(2)
            })
        );
        assert_eq!(p, before);
        // Double free: the second finish is refused.
        flush(&mut p, r0);
        let before = p.clone();
        assert!(p.finish_flush(r0).is_err());
        assert_eq!(p, before);
        assert_eq!(p.state(RegionId(9)), None);
        assert_eq!(p.used_bytes(RegionId(9)), None);
        let message = PipelineError::InvalidTransition {
            region: r0,
            from: RegionState::Empty,
            to: RegionState::Empty,
        }
        .to_string();
        assert_eq!(message, "log region 0 cannot go from empty to empty");
    }

    #[test]
    fn restore_validates_and_requeues_interrupted_flushes() {
        let c = config(4, 10, WhenFull::Wait);
        let p = RegionPipeline::restore(
            c,
            &[
                (RegionState::Flushing, 7),
                (RegionState::Empty, 0),
                (RegionState::Full, 10),
                (RegionState::Filling, 3),
            ],
        )
        .unwrap();
        assert_eq!(p.check_invariants(), Ok(()));
        assert_eq!(p.state(RegionId(0)), Some(RegionState::Full));
        assert_eq!(p.used_bytes(RegionId(0)), Some(7));
        assert_eq!(p.poll_flush(), Some(RegionId(0)));
        assert_eq!(p.filling(), Some(RegionId(3)));
        assert_eq!(p.empty_count(), 1);
        assert_eq!(p.full_count(), 2);
        assert_eq!(p.counters(), PipelineCounters::default());
        let mut p = p;
        let t = Time::ZERO;
        assert_eq!(p.reserve(t, 7, t), append(3, 3));

        let e = (RegionState::Empty, 0);
        assert_eq!(
            RegionPipeline::restore(c, &[e, e, e]),
            Err(RestoreError::RegionCount {
                expected: 4,
                actual: 3
            })
        );
        assert_eq!(
            RegionPipeline::restore(
                c,
                &[e, (RegionState::Filling, 1), e, (RegionState::Filling, 0)]
            ),
            Err(RestoreError::SeveralFilling {
                first: RegionId(1),
                second: RegionId(3)
            })
        );
        assert_eq!(
            RegionPipeline::restore(c, &[e, (RegionState::Full, 11), e, e]),
            Err(RestoreError::UsedExceedsRegion {
                region: RegionId(1),
                used_bytes: 11,
                region_bytes: 10
            })
        );
        assert_eq!(
            RegionPipeline::restore(c, &[e, e, (RegionState::Empty, 1), e]),
            Err(RestoreError::EmptyWithBytes {
                region: RegionId(2),
                used_bytes: 1
            })
        );
        assert_eq!(
            RegionPipeline::restore(PipelineConfig { regions: 0, ..c }, &[]),
            Err(RestoreError::Config(ConfigError::TooFewRegions {
                regions: 0
            }))
        );
    }

    #[test]
    fn check_invariants_detects_corruption() {
        let mut healthy = RegionPipeline::new(config(3, 10, WhenFull::Wait)).unwrap();
        let t = Time::ZERO;
        healthy.reserve(t, 10, t);
        healthy.reserve(t, 10, t);
        healthy.reserve(t, 4, t);
        assert_eq!(healthy.check_invariants(), Ok(()));
        let broken = |corrupt: fn(&mut RegionPipeline)| {
            let mut p = healthy.clone();
            corrupt(&mut p);
            p.check_invariants().unwrap_err()
        };
        broken(|p| p.regions[0].used_bytes = 11);
        broken(|p| {
            p.regions.pop();
        });
        broken(|p| p.flush_queue.push_back(RegionId(0)));
        broken(|p| p.flush_queue.push_back(RegionId(7)));
        broken(|p| p.flush_queue.swap(0, 1));
        broken(|p| {
            p.flush_queue.pop_front();
        });
        broken(|p| p.free_queue.push_back(RegionId(2)));
        broken(|p| p.filling = None);
        broken(|p| p.regions[0].state = RegionState::Filling);
        broken(|p| {
            p.regions[2].state = RegionState::Empty;
            p.filling = None;
            p.free_queue.push_back(RegionId(2));
        });
    }

    #[test]
    fn observers() {
        let mut p = RegionPipeline::new(config(3, 10, WhenFull::Wait)).unwrap();
        let t = Time::ZERO;
        p.reserve(t, 10, t);
        p.reserve(t, 5, t);
        p.start_flush(RegionId(0)).unwrap();
        let states: Vec<_> = p.states().collect();
        assert_eq!(
            states,
            [
                (RegionId(0), RegionState::Flushing),
                (RegionId(1), RegionState::Filling),
                (RegionId(2), RegionState::Empty),
            ]
        );
        assert_eq!(p.states().len(), 3);
        assert_eq!(p.empty_count(), 1);
        assert_eq!(p.full_count(), 0);
        assert_eq!(p.flushing_count(), 1);
        assert_eq!(p.config().regions, 3);
    }
}
