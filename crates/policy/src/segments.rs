//! LiU's segment layer (seed 001; DESIGN §5): segment geometry, the LRU
//! segment buffer with ghost segments, locality accounting, and the lift /
//! de-lift decisions within a heads-area budget.
//!
//! A file on the capacity tier is a sequence of fixed segments, each a
//! *head* (default 1 MiB) followed by a *body* (default 4 MiB). A *lifted*
//! segment also has a copy of its head on the fast tier, so a read of the
//! whole segment can start streaming from the fast tier while the disk seeks
//! to the body.
//!
//! [`SegmentBuffer`] decides, for each read of a segment, where it is served
//! from ([`Serve`]); the caller holds the data. The stack is one LRU order of
//! *regular* segments (loaded into the DRAM buffer, at most
//! `buffer_bytes / segment_bytes` of them) and *ghost* segments (metadata
//! only: accesses to segments not loaded). Every entry flags the grains
//! (`grain_bytes`, default 4 KiB) requested since it entered the stack; its
//! *locality* is the fraction of the segment's bytes requested, recorded when
//! a regular segment is evicted or a ghost removed:
//! * a regular segment is evicted from the bottom when a load needs room;
//!   after an eviction, ghosts below the least recently used regular
//!   segment are removed (they are less active than anything buffered);
//! * ghosts are also removed from the bottom when there are more than
//!   `max_ghosts` of them (the paper leaves this unbounded; a server needs a
//!   bound on metadata).
//!
//! Recorded locality drives everything else:
//! * a segment whose recorded locality reaches `lift_locality` is *wanted*:
//!   its next access loads it whole into the buffer (one large capacity read
//!   instead of many small ones);
//! * a wanted segment evicted from the buffer with locality at or above
//!   `lift_locality` is lifted: its head is copied from the evicted DRAM data
//!   to the fast tier ([`Action::Evict`] with `lift`), within the heads
//!   budget `heads_bytes / head_bytes`; when the area is full the coldest
//!   lifted segment is de-lifted first if it is colder than the new one;
//! * a read of a lifted segment with strong locality loads it (head from the
//!   fast tier, body from the capacity tier in sections); a read of a lifted
//!   segment with weak locality that lies inside the head is served by the
//!   fast tier directly; anything else reads the capacity tier directly.
//!
//! [`Sharing`] says how files share the buffer: [`Sharing::Paper`] is the
//! above exactly (the simulator's); [`Sharing::PerFile`], sluice's default,
//! evicts from the file holding the most segments, never evicts a file's
//! own unread segment to load another of it, loads a lifted segment only
//! for a read entering at its head, and offers the caller a read-ahead of
//! the next lifted segment ([`SegmentBuffer::read_ahead`]). Per-file
//! counters ([`FileCounters`]) show which reader loads, hits and is evicted.
//!
//! Writes to the capacity tier call [`SegmentBuffer::invalidate`]: buffered
//! copies of the range are dropped and lifted heads over it are de-lifted, so
//! a stale head is never served (the caller re-reads; a later load lifts it
//! again).
//!
//! INVARIANTS: regular segments × segment bytes ≤ `buffer_bytes`; lifted +
//! lifting heads × head bytes ≤ `heads_bytes`; ghosts ≤ `max_ghosts`; every
//! recorded locality is in [0, 1]; after an eviction the bottom of the stack
//! is a regular segment (or there is none); the stack, the regular order and
//! the entry map hold the same keys.

use alloc::collections::BTreeMap;
use alloc::vec;
use alloc::vec::Vec;
use core::fmt;

use crate::FileId;

mod geometry;

pub use geometry::{Geometry, SegmentSlice};

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;

/// Parameters of the segment buffer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LiuConfig {
    /// Head and body sizes.
    pub geometry: Geometry,
    /// DRAM buffer for regular segments (default 256 MiB).
    pub buffer_bytes: u64,
    /// Fast-tier space for lifted heads.
    pub heads_bytes: u64,
    /// Locality (fraction of a segment's bytes requested while it was in
    /// the stack) from which a segment is loaded whole and lifted.
    pub lift_locality: f64,
    /// Most ghost segments kept in the stack.
    pub max_ghosts: u32,
    /// Most wanted (strong-locality, not lifted) segments remembered.
    pub max_wanted: u32,
    /// Granularity of the requested-bytes flags.
    pub grain_bytes: u64,
    /// How files share the buffer: the paper's one LRU order, or sluice's
    /// per-file share ([`Sharing`]).
    pub sharing: Sharing,
}

/// How the files being read share the DRAM buffer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Sharing {
    /// The paper's LiU, exactly: one LRU order over every file's segments,
    /// and any read of a lifted segment with strong locality loads it.
    #[default]
    Paper,
    /// Sluice's default (docs/liu.md, "Two readers"):
    /// * a load that needs room evicts the least recently used segment of
    ///   the file holding the most segments, so a reader whose ranks spread
    ///   over many segments cannot push out the one or two that another
    ///   reader is in the middle of;
    /// * a file never evicts a segment of its own not yet read to
    ///   `lift_locality` to load another one (it reads directly meanwhile):
    ///   a spread reader cannot flood the disk with loads read for nothing;
    /// * a lifted segment is loaded only by a read that enters it at its
    ///   head: a read further in is a rank lagging behind a stream that has
    ///   passed, read directly instead of loading a whole body for it;
    /// * [`SegmentBuffer::read_ahead`] offers the next lifted segment.
    PerFile,
}

/// Per-file counters (the busiest [`MAX_FILE_COUNTERS`] files are kept):
/// which reader loads, hits, and has its segments evicted before they were
/// read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FileCounters {
    /// Reads of regular segments.
    pub buffer_hits: u64,
    /// Loads (lifted or whole).
    pub loads: u64,
    /// Of those, loads started by [`SegmentBuffer::read_ahead`].
    pub read_aheads: u64,
    /// Direct reads (head or capacity).
    pub direct_reads: u64,
    /// Of the direct reads, reads of a lifted segment with strong locality
    /// that [`Sharing::PerFile`] did not load (they did not enter at the
    /// head).
    pub lagging_reads: u64,
    /// Strong reads not loaded by [`Sharing::PerFile`] because the load
    /// would have evicted a segment of the same file not yet read.
    pub refused_loads: u64,
    /// Regular segments of this file evicted.
    pub evictions: u64,
    /// Of those, evicted by another file's load.
    pub evicted_by_other: u64,
    /// Of those, evicted with locality below `lift_locality`: loaded, then
    /// evicted before its readers had requested most of it (the lifted
    /// head's locality drops to that value, so it is no longer loaded).
    pub evicted_unread: u64,
    /// Heads lifted.
    pub lifts: u64,
}

impl FileCounters {
    fn activity(&self) -> u64 {
        self.buffer_hits + self.loads + self.direct_reads
    }
}

/// Most files whose [`FileCounters`] are kept; past it the least active is
/// dropped.
pub const MAX_FILE_COUNTERS: usize = 64;

impl Default for LiuConfig {
    fn default() -> Self {
        LiuConfig {
            geometry: Geometry::default(),
            buffer_bytes: 256 * MIB,
            heads_bytes: 4 * 1024 * MIB,
            lift_locality: 0.8,
            max_ghosts: 4096,
            max_wanted: 65_536,
            grain_bytes: 4 * KIB,
            sharing: Sharing::Paper,
        }
    }
}

/// A [`LiuConfig`] that cannot work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LiuConfigError(pub &'static str);

impl fmt::Display for LiuConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LiU segment buffer: {}", self.0)
    }
}

/// A segment of a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SegmentKey {
    /// File.
    pub file: FileId,
    /// Segment index in the file.
    pub index: u64,
}

/// Where a read of one segment is served from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Serve {
    /// The segment is regular: its data is in the buffer or being loaded.
    Buffer,
    /// The segment just became regular: load it into the buffer now. With
    /// `head_from_fast` the head comes from the fast tier and the body from
    /// the capacity tier (in sections, at the same time); otherwise the whole
    /// segment from the capacity tier.
    Load {
        /// The head is lifted: read it from the fast tier.
        head_from_fast: bool,
    },
    /// Not loaded: read the requested bytes directly, from the fast tier's
    /// head copy when `from_head` (lifted, and the range lies in the head),
    /// else from the capacity tier.
    Direct {
        /// Served by the lifted head on the fast tier.
        from_head: bool,
    },
}

/// Work the caller must do, in order, handed out by
/// [`SegmentBuffer::poll_action`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Action {
    /// A regular segment left the buffer: free its data. With `lift`, first
    /// copy its head from that data to the fast tier and report the outcome
    /// with [`SegmentBuffer::lift_done`].
    Evict {
        /// The segment.
        key: SegmentKey,
        /// Its recorded locality.
        locality: f64,
        /// Copy the head to the fast tier before freeing the data.
        lift: bool,
    },
    /// Drop the fast-tier head copy of this segment (it is no longer
    /// served).
    DeLift {
        /// The segment.
        key: SegmentKey,
    },
}

/// Counters for metrics and experiment reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiuCounters {
    /// Reads of regular segments.
    pub buffer_hits: u64,
    /// Loads of lifted segments (head from the fast tier).
    pub lifted_loads: u64,
    /// Loads of wanted segments not lifted (whole from the capacity tier).
    pub whole_loads: u64,
    /// Direct reads from a lifted head.
    pub head_reads: u64,
    /// Direct reads from the capacity tier.
    pub capacity_reads: u64,
    /// Regular segments evicted.
    pub evictions: u64,
    /// Ghost segments removed.
    pub ghosts_removed: u64,
    /// Heads lifted (lifts completed).
    pub lifts: u64,
    /// Heads de-lifted (room, or invalidated by a write).
    pub delifts: u64,
    /// Segments dropped or de-lifted because the capacity tier was written.
    pub invalidations: u64,
    /// Recorded localities in tenths: bucket k holds [k/10, (k+1)/10),
    /// bucket 10 exactly 1.0.
    pub locality_histogram: [u64; 11],
}

impl LiuCounters {
    /// Add `other`'s counts to these (several buffers' counters summed, as
    /// the simulator's I/O nodes report them).
    pub fn add(&mut self, other: &LiuCounters) {
        let LiuCounters {
            buffer_hits,
            lifted_loads,
            whole_loads,
            head_reads,
            capacity_reads,
            evictions,
            ghosts_removed,
            lifts,
            delifts,
            invalidations,
            locality_histogram,
        } = other;
        self.buffer_hits += buffer_hits;
        self.lifted_loads += lifted_loads;
        self.whole_loads += whole_loads;
        self.head_reads += head_reads;
        self.capacity_reads += capacity_reads;
        self.evictions += evictions;
        self.ghosts_removed += ghosts_removed;
        self.lifts += lifts;
        self.delifts += delifts;
        self.invalidations += invalidations;
        for (sum, count) in self.locality_histogram.iter_mut().zip(locality_histogram) {
            *sum += count;
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Regular,
    Ghost,
}

#[derive(Clone, Debug)]
struct Entry {
    stamp: u64,
    kind: Kind,
    /// Requested grains (bit per grain).
    touched: Vec<u64>,
    touched_count: u32,
    /// Bytes of the segment that exist (the last segment of a file is
    /// shorter); the locality's denominator.
    len: u64,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum HeadState {
    /// Copy in progress; counts against the budget, not served yet.
    Lifting { cancelled: bool },
    /// Served from the fast tier.
    Lifted,
}

#[derive(Clone, Copy, Debug, PartialEq)]
struct Head {
    state: HeadState,
    locality: f64,
}

/// The segment buffer's decisions; see the module docs.
#[derive(Clone, Debug)]
pub struct SegmentBuffer {
    config: LiuConfig,
    capacity: u64,
    heads_capacity: u64,
    grains: u64,
    entries: BTreeMap<SegmentKey, Entry>,
    /// The whole stack by last use; the smallest stamp is the bottom.
    stack: BTreeMap<u64, SegmentKey>,
    /// Regular segments only, by last use.
    regular: BTreeMap<u64, SegmentKey>,
    ghosts: u64,
    next_stamp: u64,
    /// Strong-locality segments not lifted, with their locality.
    wanted: BTreeMap<SegmentKey, f64>,
    heads: BTreeMap<SegmentKey, Head>,
    /// The segment [`SegmentBuffer::access`] is loading with its head from
    /// the fast tier: the evictions that load causes must not de-lift that
    /// head to make room for another (the caller is about to read it).
    loading: Option<SegmentKey>,
    actions: alloc::collections::VecDeque<Action>,
    counters: LiuCounters,
    /// Regular segments per file ([`Sharing::PerFile`]'s victim choice).
    regular_per_file: BTreeMap<FileId, u64>,
    /// The file whose load is making room (to count evictions by another).
    loading_file: Option<FileId>,
    files: BTreeMap<FileId, FileCounters>,
}

impl SegmentBuffer {
    /// A buffer with `config`, refusing parameters that cannot work.
    pub fn new(config: LiuConfig) -> Result<SegmentBuffer, LiuConfigError> {
        let segment = config.geometry.segment_bytes();
        let capacity = config.buffer_bytes / segment;
        if capacity == 0 {
            return Err(LiuConfigError(
                "the buffer must hold at least one segment (head + body)",
            ));
        }
        if config.grain_bytes == 0 || segment / config.grain_bytes > u64::from(u32::MAX) {
            return Err(LiuConfigError(
                "grain_bytes must be above 0 and at most 2^32 grains per segment",
            ));
        }
        if !(config.lift_locality >= 0.0 && config.lift_locality <= 1.0) {
            return Err(LiuConfigError("lift_locality must be within [0, 1]"));
        }
        Ok(SegmentBuffer {
            capacity,
            heads_capacity: config.heads_bytes / config.geometry.head_bytes(),
            grains: segment.div_ceil(config.grain_bytes),
            config,
            entries: BTreeMap::new(),
            stack: BTreeMap::new(),
            regular: BTreeMap::new(),
            ghosts: 0,
            next_stamp: 0,
            wanted: BTreeMap::new(),
            heads: BTreeMap::new(),
            loading: None,
            actions: alloc::collections::VecDeque::new(),
            counters: LiuCounters::default(),
            regular_per_file: BTreeMap::new(),
            loading_file: None,
            files: BTreeMap::new(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &LiuConfig {
        &self.config
    }

    /// Counters so far.
    pub fn counters(&self) -> &LiuCounters {
        &self.counters
    }

    /// Per-file counters of the busiest files (at most
    /// [`MAX_FILE_COUNTERS`]).
    pub fn file_counters(&self) -> impl Iterator<Item = (FileId, &FileCounters)> {
        self.files.iter().map(|(f, c)| (*f, c))
    }

    /// Regular segments held.
    pub fn regular_count(&self) -> u64 {
        self.regular.len() as u64
    }

    /// Most regular segments the buffer holds.
    pub fn capacity_segments(&self) -> u64 {
        self.capacity
    }

    /// Ghost segments held.
    pub fn ghost_count(&self) -> u64 {
        self.ghosts
    }

    /// Heads lifted or being lifted.
    pub fn heads_count(&self) -> u64 {
        self.heads.len() as u64
    }

    /// Heads served from the fast tier.
    pub fn lifted_count(&self) -> u64 {
        self.heads
            .values()
            .filter(|h| h.state == HeadState::Lifted)
            .count() as u64
    }

    /// Whether `key`'s head is served from the fast tier.
    pub fn is_lifted(&self, key: SegmentKey) -> bool {
        self.heads
            .get(&key)
            .is_some_and(|h| h.state == HeadState::Lifted)
    }

    /// Whether `key` is regular (its data is, or is being, loaded).
    pub fn is_regular(&self, key: SegmentKey) -> bool {
        self.entries
            .get(&key)
            .is_some_and(|e| e.kind == Kind::Regular)
    }

    /// The runs of `[start, start + len)` of `key` that lie in grains
    /// requested since `key` entered the stack, in order, as (offset,
    /// length) clipped to the range (none for a key not in the stack). A
    /// caller about to load a segment that was a ghost can leave out what
    /// was already read directly, and load it when it is next asked for.
    pub fn requested_runs(&self, key: SegmentKey, start: u64, len: u64) -> Vec<(u64, u64)> {
        let mut runs: Vec<(u64, u64)> = Vec::new();
        let Some(entry) = self.entries.get(&key) else {
            return runs;
        };
        let grain = self.config.grain_bytes;
        let end = start.saturating_add(len);
        let last = end.div_ceil(grain).min(self.grains);
        for g in start / grain..last {
            if entry.touched[(g / 64) as usize] & (1 << (g % 64)) == 0 {
                continue;
            }
            let (from, to) = ((g * grain).max(start), ((g + 1) * grain).min(end));
            match runs.last_mut() {
                Some((offset, run)) if *offset + *run == from => *run += to - from,
                _ => runs.push((from, to - from)),
            }
        }
        runs
    }

    /// The next piece of work for the caller, in order.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// A read of `[start, start + len)` inside segment `key`, of which
    /// `segment_len` bytes exist (the file may end inside it). Decides where
    /// it is served from and updates the stack; evictions and de-lifts are
    /// queued for [`poll_action`](Self::poll_action).
    pub fn access(&mut self, key: SegmentKey, start: u64, len: u64, segment_len: u64) -> Serve {
        let segment_len = segment_len
            .clamp(1, self.config.geometry.segment_bytes())
            .max(
                start
                    .saturating_add(len)
                    .min(self.config.geometry.segment_bytes()),
            );
        let stamp = self.bump();
        let serve = match self.entries.get(&key).map(|e| (e.kind, e.stamp)) {
            Some((Kind::Regular, old)) => {
                self.stack.remove(&old);
                self.regular.remove(&old);
                self.regular.insert(stamp, key);
                self.counters.buffer_hits += 1;
                self.file(key.file).buffer_hits += 1;
                Serve::Buffer
            }
            found => {
                if let Some((_, old)) = found {
                    self.stack.remove(&old);
                }
                let head = self.heads.get(&key).copied();
                let lifted = head.is_some_and(|h| h.state == HeadState::Lifted);
                let mut strong = match head {
                    Some(h) if lifted => h.locality >= self.config.lift_locality,
                    _ => self.wanted.contains_key(&key),
                };
                if strong
                    && lifted
                    && self.config.sharing == Sharing::PerFile
                    && start >= self.config.geometry.head_bytes()
                {
                    // A rank behind a stream that has passed: its segment
                    // was evicted under it. A load would read the whole
                    // body again for it.
                    strong = false;
                    self.file(key.file).lagging_reads += 1;
                }
                if strong && self.would_evict_own_unread(key.file) {
                    // The file's readers are spread over more segments
                    // than its share: it waits for one to be read rather
                    // than push out one that was loaded for nothing yet.
                    strong = false;
                    self.file(key.file).refused_loads += 1;
                }
                if strong {
                    if found.is_some() {
                        self.ghosts -= 1;
                    }
                    self.wanted.remove(&key);
                    if lifted {
                        self.counters.lifted_loads += 1;
                    } else {
                        self.counters.whole_loads += 1;
                    }
                    self.regular.insert(stamp, key);
                    *self.regular_per_file.entry(key.file).or_insert(0) += 1;
                    let counters = self.file(key.file);
                    counters.loads += 1;
                    counters.read_aheads += u64::from(len == 0);
                    Serve::Load {
                        head_from_fast: lifted,
                    }
                } else {
                    if found.is_none() {
                        self.ghosts += 1;
                    }
                    let from_head =
                        lifted && start.saturating_add(len) <= self.config.geometry.head_bytes();
                    if from_head {
                        self.counters.head_reads += 1;
                    } else {
                        self.counters.capacity_reads += 1;
                    }
                    self.file(key.file).direct_reads += 1;
                    Serve::Direct { from_head }
                }
            }
        };
        let kind = if matches!(serve, Serve::Direct { .. }) {
            Kind::Ghost
        } else {
            Kind::Regular
        };
        let grains = self.grains;
        let entry = self
            .entries
            .entry(key)
            .or_insert_with(|| Entry::new(stamp, kind, grains, segment_len));
        entry.stamp = stamp;
        entry.kind = kind;
        entry.len = entry.len.max(segment_len);
        mark(entry, self.config.grain_bytes, start, len);
        self.stack.insert(stamp, key);
        if kind == Kind::Ghost {
            self.promote_if_strong(key);
        }
        if let Serve::Load { head_from_fast } = serve {
            let mut evicted = false;
            self.loading = head_from_fast.then_some(key);
            self.loading_file = Some(key.file);
            while self.regular.len() as u64 > self.capacity {
                self.evict_one();
                evicted = true;
            }
            self.loading = None;
            self.loading_file = None;
            if evicted {
                self.trim_ghosts_below_regular();
            }
        }
        while self.ghosts > u64::from(self.config.max_ghosts) {
            self.remove_bottom_ghost();
        }
        serve
    }

    /// A lift announced by [`Action::Evict`] finished (`copied`: the head
    /// is on the fast tier). Returns whether it is now served from there:
    /// false if the copy failed or a write invalidated the segment
    /// meanwhile (the caller then discards the copy).
    pub fn lift_done(&mut self, key: SegmentKey, copied: bool) -> bool {
        match self.heads.get_mut(&key) {
            Some(head) if head.state == (HeadState::Lifting { cancelled: false }) && copied => {
                head.state = HeadState::Lifted;
                self.counters.lifts += 1;
                self.file(key.file).lifts += 1;
                true
            }
            Some(head) if matches!(head.state, HeadState::Lifting { .. }) => {
                self.heads.remove(&key);
                false
            }
            _ => false,
        }
    }

    /// Bytes `[start, end)` of `file` changed on the capacity tier (a write,
    /// a truncation, a removal): buffered segments over them are dropped
    /// (they become ghosts; the caller frees their data, see the module
    /// docs) and lifted heads over them de-lifted ([`Action::DeLift`]).
    /// Returns the regular segments dropped, for the caller to free.
    pub fn invalidate(&mut self, file: FileId, start: u64, end: u64) -> Vec<SegmentKey> {
        if start >= end {
            return Vec::new();
        }
        let first = SegmentKey {
            file,
            index: self.config.geometry.segment_of(start),
        };
        let last = SegmentKey {
            file,
            index: self.config.geometry.segment_of(end - 1),
        };
        let mut dropped = Vec::new();
        let keys: Vec<(SegmentKey, Kind, u64)> = self
            .entries
            .range(first..=last)
            .map(|(k, e)| (*k, e.kind, e.stamp))
            .collect();
        for (key, kind, stamp) in keys {
            if kind == Kind::Regular {
                self.regular.remove(&stamp);
                self.unregister(key.file);
                if let Some(e) = self.entries.get_mut(&key) {
                    e.kind = Kind::Ghost;
                }
                self.ghosts += 1;
                self.counters.invalidations += 1;
                dropped.push(key);
            }
        }
        let heads: Vec<SegmentKey> = self.heads.range(first..=last).map(|(k, _)| *k).collect();
        for key in heads {
            self.counters.invalidations += 1;
            self.drop_head(key);
        }
        while self.ghosts > u64::from(self.config.max_ghosts) {
            self.remove_bottom_ghost();
        }
        dropped
    }

    /// Bytes `[start, end)` of `file` were written to the capacity tier by
    /// the application (`segment_len`: bytes of a segment that exist, as in
    /// [`access`](Self::access)): [`invalidate`](Self::invalidate), then
    /// count the bytes as requested in ghost entries, so data written whole
    /// is wanted on its first read (the paper's LiU learns from writes too:
    /// they pass through its buffer). Returns the regular segments dropped.
    pub fn written(
        &mut self,
        file: FileId,
        start: u64,
        end: u64,
        segment_len: u64,
    ) -> Vec<SegmentKey> {
        let dropped = self.invalidate(file, start, end);
        let geometry = self.config.geometry;
        for slice in geometry.split(start, end.saturating_sub(start)) {
            let key = SegmentKey {
                file,
                index: slice.index,
            };
            let stamp = self.bump();
            let grains = self.grains;
            let len = segment_len.clamp(1, geometry.segment_bytes());
            let entry = self
                .entries
                .entry(key)
                .or_insert_with(|| Entry::new(stamp, Kind::Ghost, grains, len));
            if entry.stamp != stamp {
                self.stack.remove(&entry.stamp);
            } else {
                self.ghosts += 1;
            }
            entry.stamp = stamp;
            entry.len = entry.len.max(len).max(slice.start + slice.len);
            mark(entry, self.config.grain_bytes, slice.start, slice.len);
            self.stack.insert(stamp, key);
            self.promote_if_strong(key);
        }
        while self.ghosts > u64::from(self.config.max_ghosts) {
            self.remove_bottom_ghost();
        }
        dropped
    }

    /// A ghost whose requested fraction already reaches `lift_locality` is
    /// wanted at once: its locality can only grow until it is removed, and
    /// without this no segment would ever be wanted while nothing is
    /// buffered (ghosts are removed after evictions of regular segments).
    fn promote_if_strong(&mut self, key: SegmentKey) {
        let Some(entry) = self.entries.get(&key) else {
            return;
        };
        let locality = entry.locality(self.config.grain_bytes);
        if !self.heads.contains_key(&key)
            && locality >= self.config.lift_locality
            && !self.wanted.contains_key(&key)
        {
            self.want(key, locality);
        }
    }

    /// Remember `key` as wanted with `locality`; bounded memory: when
    /// `max_wanted` wishes are held, a new one forgets the oldest-keyed.
    fn want(&mut self, key: SegmentKey, locality: f64) {
        if self.config.max_wanted == 0 {
            return;
        }
        if !self.wanted.contains_key(&key)
            && self.wanted.len() as u64 >= u64::from(self.config.max_wanted)
        {
            self.wanted.pop_first();
        }
        self.wanted.insert(key, locality);
    }

    /// Forget every segment of `file` (removed): no locality is recorded.
    /// Lifted heads are de-lifted. Returns the regular segments dropped.
    pub fn forget_file(&mut self, file: FileId) -> Vec<SegmentKey> {
        let first = SegmentKey { file, index: 0 };
        let last = SegmentKey {
            file,
            index: u64::MAX,
        };
        let keys: Vec<SegmentKey> = self.entries.range(first..=last).map(|(k, _)| *k).collect();
        let mut dropped = Vec::new();
        for key in keys {
            if let Some(e) = self.entries.remove(&key) {
                self.stack.remove(&e.stamp);
                match e.kind {
                    Kind::Regular => {
                        self.regular.remove(&e.stamp);
                        self.unregister(key.file);
                        dropped.push(key);
                    }
                    Kind::Ghost => self.ghosts -= 1,
                }
            }
        }
        let wanted: Vec<SegmentKey> = self.wanted.range(first..=last).map(|(k, _)| *k).collect();
        for key in wanted {
            self.wanted.remove(&key);
        }
        let heads: Vec<SegmentKey> = self.heads.range(first..=last).map(|(k, _)| *k).collect();
        for key in heads {
            self.drop_head(key);
        }
        self.files.remove(&file);
        dropped
    }

    fn bump(&mut self) -> u64 {
        self.next_stamp += 1;
        self.next_stamp
    }

    /// The regular segment to evict: the least recently used one
    /// ([`Sharing::Paper`]), or the least recently used one of the file
    /// holding the most regular segments ([`Sharing::PerFile`]; among files
    /// holding as many, the one whose segment is least recently used).
    fn victim(&self) -> Option<(u64, SegmentKey)> {
        let most = match self.config.sharing {
            Sharing::Paper => None,
            Sharing::PerFile => self.regular_per_file.values().max().copied(),
        };
        self.regular
            .iter()
            .find(|(_, k)| most.is_none_or(|m| self.regular_per_file.get(&k.file) == Some(&m)))
            .map(|(&s, &k)| (s, k))
    }

    /// [`Sharing::PerFile`]: the segment after `key` when a reader that
    /// just loaded `key` should have it loaded too, ahead of its first
    /// read: it is lifted with strong locality, not buffered, and loading
    /// it would not evict a segment of the same file not yet read. The
    /// caller then calls [`access`](Self::access) on it with an empty range
    /// (it loads without marking anything requested). The body of the next
    /// segment then waits in the disk's queue while the reader is still in
    /// this one, instead of after it (under a competing reader, that wait
    /// is longer than the head takes to read).
    pub fn read_ahead(&self, key: SegmentKey) -> Option<SegmentKey> {
        if self.config.sharing != Sharing::PerFile {
            return None;
        }
        let next = SegmentKey {
            file: key.file,
            index: key.index.checked_add(1)?,
        };
        let strong = self.heads.get(&next).is_some_and(|h| {
            h.state == HeadState::Lifted && h.locality >= self.config.lift_locality
        });
        (strong && !self.is_regular(next) && !self.would_evict_own_unread(next.file))
            .then_some(next)
    }

    /// [`Sharing::PerFile`]: whether a load for `file` now would evict a
    /// segment of `file` itself that its readers have not yet read to
    /// `lift_locality` (it would be evicted unread, loaded for nothing).
    fn would_evict_own_unread(&self, file: FileId) -> bool {
        if self.config.sharing != Sharing::PerFile || (self.regular.len() as u64) < self.capacity {
            return false;
        }
        let count =
            |f: FileId| self.regular_per_file.get(&f).copied().unwrap_or(0) + u64::from(f == file);
        let most = self
            .regular_per_file
            .keys()
            .map(|&f| count(f))
            .max()
            .unwrap_or(0)
            .max(count(file));
        let victim = self
            .regular
            .values()
            .find(|k| count(k.file) == most)
            .copied();
        victim.is_some_and(|v| {
            v.file == file
                && self.entries.get(&v).is_some_and(|e| {
                    e.locality(self.config.grain_bytes) < self.config.lift_locality
                })
        })
    }

    fn evict_one(&mut self) {
        let Some((stamp, key)) = self.victim() else {
            return;
        };
        self.regular.remove(&stamp);
        self.unregister(key.file);
        self.stack.remove(&stamp);
        // INVARIANT: the regular order and the entry map hold the same keys.
        let entry = self.entries.remove(&key).expect("regular segment entry");
        self.counters.evictions += 1;
        let locality = self.record(key, &entry);
        let lift_locality = self.config.lift_locality;
        let by_other = self.loading_file.is_some_and(|f| f != key.file);
        let counters = self.file(key.file);
        counters.evictions += 1;
        counters.evicted_by_other += u64::from(by_other);
        counters.evicted_unread += u64::from(locality < lift_locality);
        let lift = !self.heads.contains_key(&key)
            && locality >= self.config.lift_locality
            && self.make_room_for_head(locality);
        if lift {
            self.wanted.remove(&key);
            self.heads.insert(
                key,
                Head {
                    state: HeadState::Lifting { cancelled: false },
                    locality,
                },
            );
        }
        self.actions.push_back(Action::Evict {
            key,
            locality,
            lift,
        });
    }

    /// One regular segment of `file` fewer.
    fn unregister(&mut self, file: FileId) {
        if let Some(n) = self.regular_per_file.get_mut(&file) {
            *n -= 1;
            if *n == 0 {
                self.regular_per_file.remove(&file);
            }
        }
    }

    /// `file`'s counters, made if new; past [`MAX_FILE_COUNTERS`] files the
    /// least active other file's are dropped.
    fn file(&mut self, file: FileId) -> &mut FileCounters {
        if !self.files.contains_key(&file) && self.files.len() >= MAX_FILE_COUNTERS {
            let quietest = self
                .files
                .iter()
                .min_by_key(|(_, c)| c.activity())
                .map(|(f, _)| *f);
            if let Some(f) = quietest {
                self.files.remove(&f);
            }
        }
        self.files.entry(file).or_default()
    }

    /// Remove ghosts from the bottom of the stack up to the least recently
    /// used regular segment.
    fn trim_ghosts_below_regular(&mut self) {
        let floor = self.regular.keys().next().copied().unwrap_or(u64::MAX);
        while let Some((&stamp, _)) = self.stack.iter().next() {
            if stamp >= floor {
                break;
            }
            self.remove_ghost_at(stamp);
        }
    }

    fn remove_bottom_ghost(&mut self) {
        let bottom = self
            .stack
            .iter()
            .find(|(_, k)| self.entries.get(k).is_some_and(|e| e.kind == Kind::Ghost))
            .map(|(&s, _)| s);
        if let Some(stamp) = bottom {
            self.remove_ghost_at(stamp);
        }
    }

    fn remove_ghost_at(&mut self, stamp: u64) {
        let Some(key) = self.stack.remove(&stamp) else {
            return;
        };
        // INVARIANT: the stack and the entry map hold the same keys, and
        // only ghosts sit below the least recently used regular segment.
        let entry = self.entries.remove(&key).expect("stack entry");
        debug_assert_eq!(entry.kind, Kind::Ghost);
        self.ghosts -= 1;
        self.counters.ghosts_removed += 1;
        let locality = self.record(key, &entry);
        if !self.heads.contains_key(&key) {
            if locality >= self.config.lift_locality {
                self.want(key, locality);
            } else {
                self.wanted.remove(&key);
            }
        }
    }

    /// Record a segment's locality: histogram, and the lifted head's value.
    fn record(&mut self, key: SegmentKey, entry: &Entry) -> f64 {
        let locality = entry.locality(self.config.grain_bytes);
        let bucket = ((locality * 10.0) as usize).min(10);
        self.counters.locality_histogram[bucket] += 1;
        if let Some(head) = self.heads.get_mut(&key) {
            head.locality = locality;
        }
        locality
    }

    /// Make room in the heads area for a head of `locality`: true if there
    /// is room, possibly after de-lifting the coldest lifted head (only if
    /// it is colder).
    fn make_room_for_head(&mut self, locality: f64) -> bool {
        if self.heads_capacity == 0 {
            return false;
        }
        if (self.heads.len() as u64) < self.heads_capacity {
            return true;
        }
        let coldest = self
            .heads
            .iter()
            .filter(|(k, h)| h.state == HeadState::Lifted && Some(**k) != self.loading)
            .min_by(|a, b| a.1.locality.total_cmp(&b.1.locality))
            .map(|(k, h)| (*k, h.locality));
        match coldest {
            Some((key, cold)) if cold < locality => {
                self.drop_head(key);
                true
            }
            _ => false,
        }
    }

    fn drop_head(&mut self, key: SegmentKey) {
        match self.heads.get_mut(&key).map(|h| h.state) {
            Some(HeadState::Lifted) => {
                self.heads.remove(&key);
                self.counters.delifts += 1;
                self.actions.push_back(Action::DeLift { key });
            }
            Some(HeadState::Lifting { .. }) => {
                // The copy is running: it stays counted until lift_done,
                // which then refuses it.
                if let Some(h) = self.heads.get_mut(&key) {
                    h.state = HeadState::Lifting { cancelled: true };
                }
            }
            None => {}
        }
    }
}

impl Entry {
    /// An entry of `grains` unflagged grains, `len` bytes existing.
    fn new(stamp: u64, kind: Kind, grains: u64, len: u64) -> Entry {
        Entry {
            stamp,
            kind,
            touched: vec![0; (grains as usize).div_ceil(64)],
            touched_count: 0,
            len,
        }
    }

    /// Fraction of the existing bytes' grains requested, in [0, 1].
    fn locality(&self, grain_bytes: u64) -> f64 {
        let grains = self.len.div_ceil(grain_bytes).max(1);
        (f64::from(self.touched_count) / grains as f64).clamp(0.0, 1.0)
    }
}

/// Flag the grains of `[start, start + len)` (inside the segment).
fn mark(entry: &mut Entry, grain: u64, start: u64, len: u64) {
    if len == 0 {
        return;
    }
    let first = start / grain;
    let last = (start + len - 1) / grain;
    let total = entry.touched.len() as u64 * 64;
    for g in first..=last.min(total.saturating_sub(1)) {
        let (word, bit) = ((g / 64) as usize, g % 64);
        if entry.touched[word] & (1 << bit) == 0 {
            entry.touched[word] |= 1 << bit;
            entry.touched_count += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn counters_add_every_field() {
        let mut histogram = [0; 11];
        histogram[3] = 2;
        histogram[10] = 1;
        let one = LiuCounters {
            buffer_hits: 1,
            lifted_loads: 2,
            whole_loads: 3,
            head_reads: 4,
            capacity_reads: 5,
            evictions: 6,
            ghosts_removed: 7,
            lifts: 8,
            delifts: 9,
            invalidations: 10,
            locality_histogram: histogram,
        };
        let mut sum = LiuCounters::default();
        sum.add(&one);
        sum.add(&one);
        let mut doubled = histogram;
        doubled.iter_mut().for_each(|c| *c *= 2);
        assert_eq!(
            sum,
            LiuCounters {
                buffer_hits: 2,
                lifted_loads: 4,
                whole_loads: 6,
                head_reads: 8,
                capacity_reads: 10,
                evictions: 12,
                ghosts_removed: 14,
                lifts: 16,
                delifts: 18,
                invalidations: 20,
                locality_histogram: doubled,
            }
        );
    }

    const F: FileId = FileId(1);

    fn key(index: u64) -> SegmentKey {
        SegmentKey { file: F, index }
    }

    /// Segments of 4 KiB head + 12 KiB body, 1 KiB grains, a buffer of
    /// `segments` segments and room for `heads` heads.
    fn small(segments: u64, heads: u64, max_ghosts: u32) -> SegmentBuffer {
        SegmentBuffer::new(LiuConfig {
            geometry: Geometry::new(4 * KIB, 12 * KIB).unwrap(),
            buffer_bytes: segments * 16 * KIB,
            heads_bytes: heads * 4 * KIB,
            lift_locality: 0.8,
            max_ghosts,
            max_wanted: 64,
            grain_bytes: KIB,
            sharing: Sharing::Paper,
        })
        .unwrap()
    }

    fn actions(b: &mut SegmentBuffer) -> Vec<Action> {
        core::iter::from_fn(|| b.poll_action()).collect()
    }

    /// Read a whole segment through the buffer.
    fn read_all(b: &mut SegmentBuffer, index: u64) -> Serve {
        let mut first = None;
        for k in 0..4 {
            let s = b.access(key(index), k * 4 * KIB, 4 * KIB, 16 * KIB);
            first.get_or_insert(s);
        }
        first.unwrap()
    }

    #[test]
    fn requested_runs_are_the_requested_grains_clipped_to_the_range() {
        let mut b = small(2, 2, 8);
        assert_eq!(b.requested_runs(key(0), 0, KIB), vec![], "not in the stack");
        b.access(key(0), 0, 2 * KIB, 16 * KIB);
        b.access(key(0), 3 * KIB + 5, 100, 16 * KIB);
        b.access(key(0), 4 * KIB, KIB, 16 * KIB);
        assert_eq!(
            b.requested_runs(key(0), 0, 16 * KIB),
            vec![(0, 2 * KIB), (3 * KIB, 2 * KIB)],
            "a grain touched anywhere counts; adjacent grains merge"
        );
        assert_eq!(
            b.requested_runs(key(0), KIB / 2, 3 * KIB),
            vec![(KIB / 2, 3 * KIB / 2), (3 * KIB, KIB / 2)],
            "clipped at both ends"
        );
        assert_eq!(b.requested_runs(key(0), 0, 0), vec![], "empty range");
        assert_eq!(
            b.requested_runs(key(0), 15 * KIB, 4 * KIB),
            vec![],
            "past the end"
        );
        assert_eq!(
            b.requested_runs(key(0), u64::MAX - 1, 2),
            vec![],
            "overflow"
        );
    }

    #[test]
    fn geometry_splits_at_segment_boundaries_and_sections_cover_the_body() {
        let g = Geometry::default();
        assert_eq!(g.segment_bytes(), 5 * MIB);
        let pieces: Vec<SegmentSlice> = g.split(4 * MIB, 2 * MIB).collect();
        assert_eq!(
            pieces,
            vec![
                SegmentSlice {
                    index: 0,
                    start: 4 * MIB,
                    len: MIB
                },
                SegmentSlice {
                    index: 1,
                    start: 0,
                    len: MIB
                }
            ]
        );
        let sections: Vec<(u64, u64)> = g.body_sections(4).collect();
        assert_eq!(sections.len(), 4);
        assert_eq!(sections[0], (MIB, MIB));
        assert_eq!(sections.iter().map(|s| s.1).sum::<u64>(), 4 * MIB);
        let odd = Geometry::new(10, 7).unwrap();
        let s: Vec<(u64, u64)> = odd.body_sections(4).collect();
        assert_eq!(s, vec![(10, 1), (11, 1), (12, 1), (13, 4)]);
        assert!(Geometry::new(0, 1).is_err());
        assert!(SegmentBuffer::new(LiuConfig {
            buffer_bytes: MIB,
            ..LiuConfig::default()
        })
        .is_err());
    }

    #[test]
    fn a_fully_read_segment_is_wanted_then_loaded_whole_then_lifted_then_loaded_with_its_head() {
        let mut b = small(2, 8, 2);
        // First pass: ghosts (nothing known), read directly.
        assert_eq!(read_all(&mut b, 0), Serve::Direct { from_head: false });
        // Three more ghosts push segment 0 out (max 2 ghosts): locality 1.
        read_all(&mut b, 1);
        read_all(&mut b, 2);
        assert_eq!(b.ghost_count(), 2);
        assert_eq!(b.counters().locality_histogram[10], 1);
        // Wanted: the next read loads it whole from the capacity tier.
        assert_eq!(
            b.access(key(0), 0, 1024, 16 * KIB),
            Serve::Load {
                head_from_fast: false
            }
        );
        for k in 1..16 {
            assert_eq!(b.access(key(0), k * KIB, KIB, 16 * KIB), Serve::Buffer);
        }
        // Two more loads (segments 1 and 2 are wanted by now or not: force
        // by reading them fully as regulars) evict segment 0: lifted.
        read_all(&mut b, 3);
        read_all(&mut b, 4);
        read_all(&mut b, 1);
        read_all(&mut b, 2);
        let evicted: Vec<Action> = actions(&mut b);
        let lift = evicted
            .iter()
            .find(|a| matches!(a, Action::Evict { key: k, .. } if *k == key(0)))
            .copied();
        assert_eq!(
            lift,
            Some(Action::Evict {
                key: key(0),
                locality: 1.0,
                lift: true
            })
        );
        assert!(!b.is_lifted(key(0)), "not served before the copy is done");
        assert!(b.lift_done(key(0), true));
        assert!(b.is_lifted(key(0)));
        // Lifted with strong locality: loaded with its head from the fast tier.
        assert_eq!(
            b.access(key(0), 8 * KIB, KIB, 16 * KIB),
            Serve::Load {
                head_from_fast: true
            }
        );
    }

    #[test]
    fn a_write_de_lifts_and_drops_the_buffered_copy_and_cancels_a_running_lift() {
        let mut b = small(1, 4, 8);
        b.wanted.insert(key(0), 1.0);
        b.wanted.insert(key(1), 1.0);
        assert!(matches!(read_all(&mut b, 0), Serve::Load { .. }));
        assert!(matches!(read_all(&mut b, 1), Serve::Load { .. }));
        assert_eq!(
            actions(&mut b),
            vec![Action::Evict {
                key: key(0),
                locality: 1.0,
                lift: true
            }]
        );
        // A write lands on segment 0 while its head is being copied.
        let dropped = b.invalidate(F, 100, 200);
        assert!(dropped.is_empty(), "segment 0 is no longer regular");
        assert!(!b.lift_done(key(0), true), "the copy is stale");
        assert!(!b.is_lifted(key(0)));
        // Segment 1 is regular: a write drops it.
        assert_eq!(b.invalidate(F, 16 * KIB, 17 * KIB), vec![key(1)]);
        assert!(!b.is_regular(key(1)));
        // A lifted head written over is de-lifted.
        b.heads.insert(
            key(3),
            Head {
                state: HeadState::Lifted,
                locality: 1.0,
            },
        );
        b.invalidate(F, 3 * 16 * KIB + 10, 3 * 16 * KIB + 11);
        assert_eq!(actions(&mut b), vec![Action::DeLift { key: key(3) }]);
        assert!(!b.is_lifted(key(3)));
    }

    #[test]
    fn heads_area_full_de_lifts_the_coldest_only_for_a_warmer_head() {
        let mut b = small(1, 1, 8);
        b.heads.insert(
            key(9),
            Head {
                state: HeadState::Lifted,
                locality: 0.85,
            },
        );
        b.wanted.insert(key(0), 1.0);
        read_all(&mut b, 0);
        b.wanted.insert(key(1), 1.0);
        read_all(&mut b, 1);
        assert_eq!(
            actions(&mut b),
            vec![
                Action::DeLift { key: key(9) },
                Action::Evict {
                    key: key(0),
                    locality: 1.0,
                    lift: true
                }
            ]
        );
        assert!(b.lift_done(key(0), true));
        // Segment 1 is as warm as 0, not warmer: no room, 0 stays lifted.
        b.wanted.insert(key(2), 1.0);
        b.access(key(2), 0, KIB, 16 * KIB);
        assert_eq!(
            actions(&mut b),
            vec![Action::Evict {
                key: key(1),
                locality: 1.0,
                lift: false
            }]
        );
        assert!(b.is_lifted(key(0)));
    }

    #[test]
    fn a_head_only_read_of_a_weak_lifted_segment_goes_to_the_fast_tier() {
        let mut b = small(2, 4, 8);
        b.heads.insert(
            key(0),
            Head {
                state: HeadState::Lifted,
                locality: 0.1,
            },
        );
        assert_eq!(
            b.access(key(0), 0, 4 * KIB, 16 * KIB),
            Serve::Direct { from_head: true }
        );
        assert_eq!(
            b.access(key(0), 3 * KIB, 2 * KIB, 16 * KIB),
            Serve::Direct { from_head: false }
        );
        assert_eq!(b.counters().head_reads, 1);
    }

    #[test]
    fn a_segment_written_whole_is_wanted_on_its_first_read() {
        let mut b = small(2, 4, 64);
        b.written(F, 0, 16 * KIB, 16 * KIB);
        b.written(F, 16 * KIB, 20 * KIB, 16 * KIB);
        assert_eq!(
            b.access(key(0), 0, KIB, 16 * KIB),
            Serve::Load {
                head_from_fast: false
            }
        );
        assert_eq!(
            b.access(key(1), 0, KIB, 16 * KIB),
            Serve::Direct { from_head: false },
            "a quarter written is not enough"
        );
    }

    #[test]
    fn forgetting_a_file_records_nothing_and_de_lifts() {
        let mut b = small(2, 4, 8);
        b.heads.insert(
            key(5),
            Head {
                state: HeadState::Lifted,
                locality: 1.0,
            },
        );
        b.wanted.insert(key(0), 1.0);
        read_all(&mut b, 0);
        read_all(&mut b, 1);
        let other = SegmentKey {
            file: FileId(2),
            index: 0,
        };
        b.access(other, 0, KIB, 16 * KIB);
        assert_eq!(b.forget_file(F), vec![key(0)]);
        assert_eq!(actions(&mut b), vec![Action::DeLift { key: key(5) }]);
        assert_eq!(b.regular_count(), 0);
        assert_eq!(b.ghost_count(), 1, "the other file's ghost stays");
        assert_eq!(b.counters().locality_histogram.iter().sum::<u64>(), 0);
    }

    fn file_key(file: u64, index: u64) -> SegmentKey {
        SegmentKey {
            file: FileId(file),
            index,
        }
    }

    /// `small`, with `sharing`.
    fn shared(segments: u64, heads: u64, sharing: Sharing) -> SegmentBuffer {
        let mut b = small(segments, heads, 64);
        b.config.sharing = sharing;
        b
    }

    /// Lift `key` with strong locality, as a past pass would have.
    fn lifted(b: &mut SegmentBuffer, key: SegmentKey) {
        b.heads.insert(
            key,
            Head {
                state: HeadState::Lifted,
                locality: 1.0,
            },
        );
    }

    #[test]
    fn per_file_sharing_evicts_from_the_file_holding_most() {
        for sharing in [Sharing::Paper, Sharing::PerFile] {
            let mut b = shared(4, 16, sharing);
            // The target's segment 0, read to the middle.
            lifted(&mut b, file_key(1, 0));
            assert!(matches!(
                b.access(file_key(1, 0), 0, 4 * KIB, 16 * KIB),
                Serve::Load { .. }
            ));
            // The interferer reads four segments after it, whole.
            for index in 0..4 {
                lifted(&mut b, file_key(2, index));
                assert!(matches!(
                    b.access(file_key(2, index), 0, KIB, 16 * KIB),
                    Serve::Load { .. }
                ));
                for k in 1..16 {
                    b.access(file_key(2, index), k * KIB, KIB, 16 * KIB);
                }
            }
            let evicted: Vec<SegmentKey> = actions(&mut b)
                .into_iter()
                .filter_map(|a| match a {
                    Action::Evict { key, .. } => Some(key),
                    Action::DeLift { .. } => None,
                })
                .collect();
            match sharing {
                // One LRU order: the target's segment is the oldest.
                Sharing::Paper => assert_eq!(evicted, vec![file_key(1, 0)]),
                // The interferer holds the most: its own oldest goes.
                Sharing::PerFile => {
                    assert_eq!(evicted, vec![file_key(2, 0)]);
                    assert!(b.is_regular(file_key(1, 0)));
                    let target = b.file_counters().find(|(f, _)| *f == FileId(1));
                    assert_eq!(target.map(|(_, c)| c.evictions), Some(0));
                    let other = b.file_counters().find(|(f, _)| *f == FileId(2));
                    assert_eq!(other.map(|(_, c)| c.evicted_by_other), Some(0));
                }
            }
        }
    }

    #[test]
    fn per_file_sharing_loads_a_lifted_segment_only_from_its_head() {
        for sharing in [Sharing::Paper, Sharing::PerFile] {
            let mut b = shared(2, 4, sharing);
            lifted(&mut b, key(0));
            let serve = b.access(key(0), 8 * KIB, KIB, 16 * KIB);
            match sharing {
                Sharing::Paper => assert_eq!(
                    serve,
                    Serve::Load {
                        head_from_fast: true
                    }
                ),
                Sharing::PerFile => {
                    assert_eq!(serve, Serve::Direct { from_head: false });
                    assert_eq!(b.file_counters().next().unwrap().1.lagging_reads, 1);
                    // A read entering at the head loads it.
                    assert_eq!(
                        b.access(key(0), 0, KIB, 16 * KIB),
                        Serve::Load {
                            head_from_fast: true
                        }
                    );
                }
            }
        }
    }

    #[test]
    fn per_file_sharing_does_not_evict_its_own_unread_segment_for_another() {
        for sharing in [Sharing::Paper, Sharing::PerFile] {
            let mut b = shared(2, 8, sharing);
            for index in 0..3 {
                lifted(&mut b, key(index));
            }
            // Two segments loaded, each read a little (ranks spread out).
            b.access(key(0), 0, KIB, 16 * KIB);
            b.access(key(1), 0, KIB, 16 * KIB);
            let serve = b.access(key(2), 0, KIB, 16 * KIB);
            match sharing {
                Sharing::Paper => assert!(matches!(serve, Serve::Load { .. })),
                Sharing::PerFile => {
                    assert_eq!(serve, Serve::Direct { from_head: true });
                    assert!(b.is_regular(key(0)) && b.is_regular(key(1)));
                    assert_eq!(b.file_counters().next().unwrap().1.refused_loads, 1);
                    // Once segment 0 is read (and the least recently
                    // used), the load goes ahead.
                    for k in 1..16 {
                        b.access(key(0), k * KIB, KIB, 16 * KIB);
                    }
                    b.access(key(1), KIB, KIB, 16 * KIB);
                    assert!(matches!(
                        b.access(key(2), 0, KIB, 16 * KIB),
                        Serve::Load { .. }
                    ));
                    assert!(!b.is_regular(key(0)));
                }
            }
        }
    }

    #[test]
    fn per_file_sharing_reads_one_lifted_segment_ahead() {
        for sharing in [Sharing::Paper, Sharing::PerFile] {
            let mut b = shared(3, 8, sharing);
            lifted(&mut b, key(0));
            lifted(&mut b, key(1));
            assert!(matches!(
                b.access(key(0), 0, KIB, 16 * KIB),
                Serve::Load { .. }
            ));
            match sharing {
                Sharing::Paper => assert_eq!(b.read_ahead(key(0)), None),
                Sharing::PerFile => {
                    assert_eq!(b.read_ahead(key(0)), Some(key(1)));
                    assert_eq!(
                        b.access(key(1), 0, 0, 16 * KIB),
                        Serve::Load {
                            head_from_fast: true
                        }
                    );
                    let c = *b.file_counters().next().unwrap().1;
                    assert_eq!((c.loads, c.read_aheads), (2, 1));
                    assert_eq!(b.read_ahead(key(0)), None, "already buffered");
                    assert_eq!(b.read_ahead(key(1)), None, "segment 2 is not lifted");
                    // A read-ahead marks nothing requested.
                    assert_eq!(b.requested_runs(key(1), 0, 16 * KIB), vec![]);
                }
            }
        }
    }

    #[test]
    fn another_files_load_may_evict_an_unread_segment_of_the_biggest_holder() {
        let mut b = shared(3, 8, Sharing::PerFile);
        for index in 0..3 {
            lifted(&mut b, file_key(2, index));
            b.access(file_key(2, index), 0, KIB, 16 * KIB);
        }
        lifted(&mut b, file_key(1, 0));
        assert!(matches!(
            b.access(file_key(1, 0), 0, KIB, 16 * KIB),
            Serve::Load { .. }
        ));
        assert!(!b.is_regular(file_key(2, 0)), "over its share: evicted");
    }

    #[derive(Clone, Debug)]
    enum Op {
        Read { index: u64, start: u64, len: u64 },
        Write { index: u64, start: u64, len: u64 },
        Forget,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            8 => (0u64..12, 0u64..16 * 1024, 1u64..8 * 1024)
                .prop_map(|(index, start, len)| Op::Read { index, start, len }),
            1 => (0u64..12, 0u64..16 * 1024, 1u64..8 * 1024)
                .prop_map(|(index, start, len)| Op::Write { index, start, len }),
            1 => Just(Op::Forget),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        #[test]
        fn budgets_bounds_and_the_ghost_trim_hold(
            ops in proptest::collection::vec(op(), 1..300),
            segments in 1u64..4,
            heads in 0u64..4,
            max_ghosts in 0u32..6,
            copy_ok in any::<bool>(),
            per_file in any::<bool>(),
        ) {
            let mut b = small(segments, heads, max_ghosts);
            if per_file {
                b.config.sharing = Sharing::PerFile;
            }
            // What the caller holds: segments loaded and not yet evicted.
            let mut loaded = std::collections::BTreeSet::new();
            for op in ops {
                let mut evicting = false;
                let evictions_before = b.counters().evictions;
                match op {
                    Op::Read { index, start, len } => {
                        let start = start.min(16 * 1024 - 1);
                        let len = len.min(16 * 1024 - start);
                        match b.access(key(index), start, len, 16 * 1024) {
                            Serve::Load { head_from_fast } => {
                                prop_assert_eq!(head_from_fast, b.is_lifted(key(index)));
                                prop_assert!(loaded.insert(index));
                                evicting = true;
                                if let Some(next) = b.read_ahead(key(index)) {
                                    prop_assert!(per_file);
                                    let ahead = b.access(next, 0, 0, 16 * 1024);
                                    prop_assert_eq!(ahead, Serve::Load { head_from_fast: true });
                                    prop_assert!(loaded.insert(next.index));
                                }
                            }
                            Serve::Buffer => prop_assert!(loaded.contains(&index)),
                            Serve::Direct { from_head } => {
                                prop_assert!(!loaded.contains(&index));
                                if from_head {
                                    prop_assert!(b.is_lifted(key(index)));
                                    prop_assert!(start + len <= 4 * 1024);
                                }
                            }
                        }
                    }
                    Op::Write { index, start, len } => {
                        let from = index * 16 * 1024 + start;
                        for k in b.written(F, from, from + len, 16 * 1024) {
                            prop_assert!(loaded.remove(&k.index));
                        }
                        for i in 0..12 {
                            let s = i * 16 * 1024;
                            if s < from + len && from < s + 16 * 1024 {
                                prop_assert!(!b.is_lifted(key(i)), "stale head served");
                                prop_assert!(!b.is_regular(key(i)));
                            }
                        }
                    }
                    Op::Forget => {
                        for k in b.forget_file(F) {
                            prop_assert!(loaded.remove(&k.index));
                        }
                        prop_assert_eq!(b.lifted_count(), 0);
                    }
                }
                while let Some(action) = b.poll_action() {
                    match action {
                        Action::Evict { key, locality, lift } => {
                            prop_assert!((0.0..=1.0).contains(&locality));
                            prop_assert!(loaded.remove(&key.index));
                            if lift {
                                prop_assert!(locality >= 0.8);
                                b.lift_done(key, copy_ok);
                            }
                        }
                        Action::DeLift { key } => prop_assert!(!b.is_lifted(key)),
                    }
                }
                // The buffer never exceeds its budget; the heads area its share.
                prop_assert!(b.regular_count() <= segments);
                prop_assert_eq!(b.regular_count(), loaded.len() as u64);
                prop_assert!(b.heads_count() <= heads);
                prop_assert!(b.ghost_count() <= u64::from(max_ghosts));
                // After an eviction the bottom of the stack is regular.
                if evicting && b.regular_count() > 0 && b.counters().evictions > evictions_before {
                    let bottom = *b.stack.values().next().unwrap();
                    prop_assert!(b.is_regular(bottom), "a ghost stayed below the LRU regular");
                }
                prop_assert_eq!(b.stack.len(), b.entries.len());
                prop_assert_eq!(
                    b.entries.values().filter(|e| e.kind == Kind::Ghost).count() as u64,
                    b.ghost_count()
                );
            }
        }

        #[test]
        fn recorded_locality_is_the_fraction_of_grains_requested(
            reads in proptest::collection::vec((0u64..16, 1u64..4), 1..20),
        ) {
            let mut b = small(1, 0, 0);
            b.wanted.insert(key(0), 1.0);
            let mut grains = std::collections::BTreeSet::new();
            for (g, n) in reads {
                let n = n.min(16 - g);
                b.access(key(0), g * KIB, n * KIB, 16 * KIB);
                grains.extend(g..g + n);
            }
            // Another load evicts segment 0.
            b.wanted.insert(key(1), 1.0);
            b.access(key(1), 0, 1, 16 * KIB);
            let Some(Action::Evict { locality, .. }) = b.poll_action() else {
                return Err(TestCaseError::fail("no eviction"));
            };
            prop_assert!((locality - grains.len() as f64 / 16.0).abs() < 1e-9);
        }
    }
}
