//! The extent index (DESIGN §4.4): for every file, an ordered map from file
//! byte ranges to the places in the fast-tier log that hold the newest
//! buffered copy of those bytes.
//!
//! Writes redirected to the fast tier are appended to a log; each record
//! becomes one [`Extent`] here. Reads ask [`FileExtents::lookup`] which parts
//! of a range are buffered (read them from the log) and which are holes (read
//! them from the capacity tier): buffered bytes override capacity-tier bytes.
//! The flusher walks a file in file order with [`FileExtents::flush_runs`]
//! and, once a region is safely on the capacity tier, drops its extents with
//! [`ExtentIndex::remove_region`].
//!
//! Overlapping writes resolve by sequence number, not by arrival order: a
//! byte belongs to the extent with the highest `seq` that covers it (equal
//! `seq`: the later insert wins). Normal operation inserts in increasing
//! `seq`; recovery may replay records in any order and still maps every
//! byte to the same log location.
//!
//! # Structure: range-partitioned sorted leaves
//!
//! A [`FileExtents`] is a B-tree of *leaves* keyed by the first file offset
//! each leaf covers. A leaf covers the file range `[lo, hi)` and holds its
//! extents in a small sorted `Vec` (at most `LEAF_CAPACITY` = 64 of them).
//! The leaves partition the whole key space `[0, u64::MAX)`: the first leaf
//! has `lo = 0`, each next leaf starts at the previous leaf's `hi`, and the
//! last leaf has `hi = u64::MAX`. Every addressable byte lies below
//! `u64::MAX` (extent ends are clipped to `u64::MAX`), so no extra
//! representation is needed for extents ending exactly there.
//!
//! No stored extent crosses a leaf boundary, so every overlap decision is
//! local to one contiguous `Vec`: an insert finds its leaf with one top-level
//! B-tree search, finds the first entry ending after its start with an 8-way
//! search (entries are sorted and do not overlap, so their ends are sorted
//! too), and inserts, or splices in the entries that resolve an overlap. An
//! inserted extent that crosses a leaf's `hi` is split there, the second
//! piece's log offset advanced by the bytes before the boundary (as when an
//! overlap trims an extent's front), and each piece is resolved in its own
//! leaf. A leaf that overfills is split at the start of an entry (the middle
//! one, or next to the new entry when the write appended at either end of
//! the leaf, so that sequential writes fill leaves completely). A leaf other
//! than the first that becomes empty is removed and its range given to the
//! previous leaf; [`FileExtents::remove_region`] also merges neighbouring
//! leaves that became sparse. A truncate drops whole leaves at once.
//!
//! Observable consequences of the leaf boundaries, all within the documented
//! contracts: an extent crossing a boundary is stored as two (or more)
//! entries, so [`FileExtents::extent_count`] counts stored entries,
//! [`FileExtents::extents`] and [`FileExtents::lookup`] may yield two
//! adjacent pieces there, and [`FileExtents::flush_runs`] may list two log
//! reads for it. Flush runs still merge file-contiguous entries, so the bytes
//! and log locations flushed are unchanged; only where a greedy run is cut
//! may differ when a split entry is involved. Equality of two
//! [`FileExtents`] compares the stored entries, not the leaf layout.
//!
//! INVARIANTS (checked by [`FileExtents::check_invariants`] and
//! [`ExtentIndex::check_invariants`]):
//! - the leaves partition `[0, u64::MAX)` as described above; a file with no
//!   extents has no leaves at all;
//! - every stored extent lies inside its leaf's `[lo, hi)`; a leaf's entries
//!   are sorted, never overlap, and none has length 0;
//! - no leaf holds more than `LEAF_CAPACITY` entries between operations, and
//!   only the first leaf may be empty;
//! - adjacent extents are *not* merged: they may come from different records
//!   or regions, and each maps to one contiguous run of log bytes;
//! - every count and byte total equals the sum over the stored extents, and
//!   [`ExtentIndex`] holds no file without extents. The totals are kept up to
//!   date incrementally, never recomputed.
//!
//! Memory: one extent costs one 32-byte leaf entry (an 8-byte offset and a
//! 24-byte value) plus the unused slots of its leaf and a share of the
//! top-level B-tree, about [`ESTIMATED_BYTES_PER_EXTENT`] bytes for random
//! writes (less for sequential ones), inside the paper's 24–56 bytes per
//! request. Each file with extents also costs about
//! [`ESTIMATED_BYTES_PER_FILE`] bytes.

use alloc::collections::btree_map::{self, BTreeMap};
use alloc::vec::Vec;
use core::iter::FusedIterator;
use core::mem::size_of;
use core::ops::Bound::{Excluded, Unbounded};

use crate::{FileId, LogLocation, RegionId};

/// One buffered write as the log records it: `len` bytes of the file at
/// `file_offset`, stored at `location` in the fast-tier log.
///
/// `len` is a `u32` because a log record holds at most 4 GiB − 1 bytes; a
/// caller with a larger write splits it into several records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Extent {
    /// First file byte covered.
    pub file_offset: u64,
    /// Number of bytes covered.
    pub len: u32,
    /// Where the first byte sits in the log; byte `i` of the extent sits at
    /// `location.offset + i` in the same region.
    pub location: LogLocation,
    /// Sequence number of the log record; the highest one wins an overlap.
    pub seq: u64,
}

impl Extent {
    /// One past the last file byte covered, saturating at `u64::MAX`: bytes
    /// beyond `u64::MAX` cannot be addressed, and [`FileExtents::insert`]
    /// ignores them.
    pub fn end(&self) -> u64 {
        self.file_offset.saturating_add(u64::from(self.len))
    }
}

/// One stored extent without its file offset, which is stored beside it in
/// the leaf entry.
///
/// Kept at 24 bytes (checked below) because it is paid once per buffered
/// request, see [`ESTIMATED_BYTES_PER_EXTENT`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stored {
    len: u32,
    region: RegionId,
    log_offset: u64,
    seq: u64,
}

const _: () = assert!(size_of::<Stored>() == 24);

impl Stored {
    /// Filler for fixed-size buffers; never stored.
    const EMPTY: Stored = Stored {
        len: 0,
        region: RegionId(0),
        log_offset: 0,
        seq: 0,
    };

    /// One past the last file byte, given the entry's file offset `start`.
    fn end(&self, start: u64) -> u64 {
        // Saturation never triggers: insert clips extents to end <= u64::MAX.
        start.saturating_add(u64::from(self.len))
    }

    fn location(&self) -> LogLocation {
        LogLocation {
            region: self.region,
            offset: self.log_offset,
        }
    }

    /// The sub-extent that skips the first `skip` bytes and is `len` long.
    /// Skipping file bytes skips the same number of log bytes.
    fn slice(&self, skip: u64, len: u64) -> Stored {
        debug_assert!(len > 0 && skip.saturating_add(len) <= u64::from(self.len));
        Stored {
            // INVARIANT: callers pass a sub-range of this extent, whose length
            // is a u32, so `len` fits.
            len: u32::try_from(len).expect("sub-extent longer than its extent"),
            log_offset: self.log_offset.saturating_add(skip),
            ..*self
        }
    }
}

/// Estimated heap bytes per stored extent, for random (non-sequential)
/// writes.
///
/// Arithmetic (64-bit, `LEAF_CAPACITY` = 64):
/// - a leaf entry is an 8-byte offset and a 24-byte `Stored`: 32 bytes;
/// - a leaf that has been split has `LEAF_CAPACITY + 1 = 65` slots (a leaf
///   overfills to 65 entries before it splits, and the split-off part is
///   allocated with 65 slots so that it never regrows): 2,080 bytes;
/// - random inserts split full leaves in half, so a leaf holds between 32 and
///   64 entries, on average `ln 2 ≈ 69 %` of 64: 44 entries;
/// - each leaf also costs one entry of the top-level `BTreeMap<u64, Leaf>`,
///   an 8-byte key and a 32-byte `Leaf` (`hi` and the `Vec`): about 63 bytes
///   with std's node arithmetic (see `btree_bytes_per_entry` below);
/// - so `(2,080 + 63) / 44 ≈ 48.7`, rounded up to 49 bytes per extent.
///
/// This counts requested bytes; the allocator's own per-block overhead comes
/// on top. Sequential (or descending) writes fill every leaf to 64 entries,
/// so they cost about `(2,080 + 63) / 64 ≈ 34` bytes per extent. Several
/// interleaved sequential streams insert in the middle of leaves and cost
/// about as much as a half-full leaf: `(2,080 + 63) / 33 ≈ 65` bytes.
pub const ESTIMATED_BYTES_PER_EXTENT: usize = {
    let entry = size_of::<(u64, Stored)>();
    let leaf = (LEAF_CAPACITY + 1) * entry;
    let top_entry = btree_bytes_per_entry(size_of::<u64>() + size_of::<Leaf>());
    // Average fill ln 2 ≈ 0.69.
    let avg_entries = LEAF_CAPACITY * 69 / 100;
    (leaf + top_entry).div_ceil(avg_entries)
};

/// Estimated heap bytes per file with buffered extents, on top of
/// [`ESTIMATED_BYTES_PER_EXTENT`] per extent:
/// - one entry of the outer `FileId → FileExtents` B-tree, an 8-byte key and
///   a 40-byte `FileExtents`: about 75 bytes (same arithmetic as above);
/// - the file's first top-level B-tree node, which even a file with a
///   single leaf allocates whole: `8 + 2 + 2 + 11 × (8 + 32) = 452` bytes,
///   padded to 456.
///
/// So about 531 bytes. A file with few extents also has a first leaf of 4 or
/// 8 slots (128 or 256 bytes) rather than the estimate's share of 65 slots.
pub const ESTIMATED_BYTES_PER_FILE: usize = {
    const PTR: usize = size_of::<usize>();
    let top_entry = size_of::<u64>() + size_of::<Leaf>();
    let top_node = (PTR + 2 + 2 + BTREE_CAPACITY * top_entry).div_ceil(PTR) * PTR;
    btree_bytes_per_entry(size_of::<FileId>() + size_of::<FileExtents>()) + top_node
};

/// Keys (and values) per node of `std`'s B-tree (`B = 6`).
const BTREE_CAPACITY: usize = 11;

/// Average heap bytes per entry of `std`'s `BTreeMap` with `entry`-byte
/// key-value pairs:
/// - a leaf node holds up to 11 pairs plus a parent pointer and two `u16`s:
///   `8 + 2 + 2 + 11 × entry`, padded to pointer size;
/// - an internal node adds 12 child pointers;
/// - with about 8 children per internal node, one node in 8 is internal;
/// - nodes are about 2/3 full (random inserts split full nodes in half), so
///   a node holds `11 × 2/3 ≈ 7.3` entries.
const fn btree_bytes_per_entry(entry: usize) -> usize {
    const PTR: usize = size_of::<usize>();
    let leaf = (PTR + 2 + 2 + BTREE_CAPACITY * entry).div_ceil(PTR) * PTR;
    let internal = leaf + (BTREE_CAPACITY + 1) * PTR;
    let avg_node = (7 * leaf + internal) / 8;
    avg_node * 3 / (2 * BTREE_CAPACITY)
}

/// One piece of a [`FileExtents::lookup`] answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Piece {
    /// These file bytes are buffered: read them from the fast-tier log.
    Buffered {
        /// First file byte of the piece.
        file_offset: u64,
        /// Length of the piece (at most `u32::MAX`).
        len: u64,
        /// Log location of the piece's first byte (already advanced past any
        /// part of the extent that lies before the looked-up range).
        location: LogLocation,
        /// Sequence number of the record holding the bytes.
        seq: u64,
    },
    /// Nothing is buffered here: read these bytes from the capacity tier.
    Hole {
        /// First file byte of the hole.
        file_offset: u64,
        /// Length of the hole.
        len: u64,
    },
}

impl Piece {
    /// First file byte of the piece.
    pub fn file_offset(&self) -> u64 {
        match *self {
            Piece::Buffered { file_offset, .. } | Piece::Hole { file_offset, .. } => file_offset,
        }
    }

    /// Length of the piece in bytes; never 0.
    pub fn len(&self) -> u64 {
        match *self {
            Piece::Buffered { len, .. } | Piece::Hole { len, .. } => len,
        }
    }

    /// Always `false`: lookups never yield empty pieces. Present because a
    /// `len` method asks for one.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// One past the last file byte of the piece.
    pub fn end(&self) -> u64 {
        self.file_offset().saturating_add(self.len())
    }
}

/// One run of file-contiguous buffered bytes for the flusher: write `len`
/// bytes at `file_offset` on the capacity tier, gathered from the log reads
/// in `pieces` (file order; their lengths sum to `len`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FlushRun {
    /// First file byte of the run.
    pub file_offset: u64,
    /// Total length of the run.
    pub len: u64,
    /// Log reads in file order: location of the first byte and length. One
    /// per stored extent; log-adjacent extents are not coalesced.
    pub pieces: Vec<(LogLocation, u32)>,
}

/// The extent index of one file. See the [module docs](self).
#[derive(Clone, Debug, Default)]
pub struct FileExtents {
    /// Leaf `lo` → the leaf covering `[lo, leaf.hi)`. Empty exactly when the
    /// file has no extents.
    top: BTreeMap<u64, Leaf>,
    /// Number of stored extents and sum of their lengths.
    totals: Totals,
}

/// Most entries a leaf holds between operations. An operation that leaves
/// more in a leaf splits it. 64 entries (2 KiB) balance the search and the
/// `Vec` shift inside a leaf against the depth of the top-level B-tree: on
/// the hot-path benchmark (65,536 random extents) 32, 48, 96 and 128 were
/// all 1–5 ns per insert slower, and larger leaves save little memory
/// (about 51, 49 and 47 bytes per extent for 32, 64 and 128).
const LEAF_CAPACITY: usize = 64;

// `Leaf::reserve` grows from 4 slots, and `Leaf::split` needs 2 entries.
const _: () = assert!(LEAF_CAPACITY >= 3);

/// [`FileExtents::remove_region`] merges a leaf into its predecessor when
/// both together hold at most this many entries, so that leaves thinned out
/// by flushing do not keep their capacity; below `LEAF_CAPACITY` so that the
/// merged leaf does not split again at the next insert.
const MERGE_LIMIT: usize = LEAF_CAPACITY * 3 / 4;

/// Replacement entries an overlapping insert builds on the stack before it
/// needs a heap buffer (enough for up to 3 overlapped entries).
const INLINE_REPLACEMENT: usize = 8;

/// Number of stored extents and sum of their lengths.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Totals {
    count: usize,
    bytes: u64,
}

impl Totals {
    fn add(&mut self, stored: &Stored) {
        self.count += 1;
        self.bytes += u64::from(stored.len);
    }

    fn sub(&mut self, stored: &Stored) {
        self.count -= 1;
        self.bytes -= u64::from(stored.len);
    }
}

/// A run of the key space with the extents stored in it. Its `lo` is the
/// key under which [`FileExtents::top`] holds it.
#[derive(Clone, Debug)]
struct Leaf {
    /// One past the last file offset the leaf covers; `u64::MAX` for the
    /// last leaf.
    hi: u64,
    /// `(file offset, extent)` sorted by offset; the extents do not overlap
    /// and lie inside `[lo, hi)`.
    entries: Vec<(u64, Stored)>,
}

impl Leaf {
    fn new(hi: u64) -> Leaf {
        Leaf {
            hi,
            entries: Vec::new(),
        }
    }

    /// Index of the first entry ending after `offset`. Entries are sorted
    /// and do not overlap, so their ends are sorted too.
    fn first_ending_after(&self, offset: u64) -> usize {
        wide_partition_point(&self.entries, |&(start, stored)| {
            stored.end(start) <= offset
        })
    }

    /// Makes room for `additional` more entries. Grows by doubling from 4
    /// like `Vec`, but not past `LEAF_CAPACITY + 1` unless more is needed:
    /// `Vec`'s own doubling would turn a full leaf of 64 into 128 slots just
    /// before splitting it.
    fn reserve(&mut self, additional: usize) {
        let needed = self.entries.len() + additional;
        let capacity = self.entries.capacity();
        if needed > capacity {
            let target = needed.max((2 * capacity).clamp(4, LEAF_CAPACITY + 1));
            self.entries.reserve_exact(target - self.entries.len());
        }
    }

    /// Stores `new` at `start` (its end must not pass `hi`), newest `seq`
    /// wins; see [`FileExtents::insert`]. Returns the index of the last
    /// entry written, which tells [`Leaf::split`] whether this was an append.
    fn insert(&mut self, start: u64, new: Stored, totals: &mut Totals) -> usize {
        let end = new.end(start);
        debug_assert!(end <= self.hi);
        let first = self.first_ending_after(start);
        // Fast path: nothing stored overlaps [start, end).
        if self
            .entries
            .get(first)
            .is_none_or(|&(next_start, _)| next_start >= end)
        {
            self.reserve(1);
            self.entries.insert(first, (start, new));
            totals.add(&new);
            return first;
        }
        let last = first + self.entries[first..].partition_point(|&(s, _)| s < end);
        let overlapped = last - first;
        // At most 2 entries per overlapped one plus a final fill, see
        // `resolve`.
        let mut written = 0;
        if 2 * overlapped < INLINE_REPLACEMENT {
            let mut buffer = [(0, Stored::EMPTY); INLINE_REPLACEMENT];
            resolve(&self.entries[first..last], start, new, |entry| {
                buffer[written] = entry;
                written += 1;
            });
            self.replace(first, last, &buffer[..written], totals);
        } else {
            let mut buffer = Vec::with_capacity(2 * overlapped + 1);
            resolve(&self.entries[first..last], start, new, |entry| {
                buffer.push(entry);
            });
            written = buffer.len();
            self.replace(first, last, &buffer, totals);
        }
        debug_assert!(written > 0, "the new extent's bytes went nowhere");
        first + written - 1
    }

    /// Replaces `entries[first..last]` with `with` and updates `totals`.
    fn replace(&mut self, first: usize, last: usize, with: &[(u64, Stored)], totals: &mut Totals) {
        for (_, stored) in &self.entries[first..last] {
            totals.sub(stored);
        }
        for (_, stored) in with {
            totals.add(stored);
        }
        self.reserve(with.len().saturating_sub(last - first));
        self.entries.splice(first..last, with.iter().copied());
    }

    /// Forgets the bytes in `[from, to)` (inside `[lo, hi)`), trimming or
    /// splitting the entries at the edges.
    fn remove_range(&mut self, from: u64, to: u64, totals: &mut Totals) {
        let first = self.first_ending_after(from);
        let last = first + self.entries[first..].partition_point(|&(s, _)| s < to);
        if first == last {
            return;
        }
        let (first_start, first_stored) = self.entries[first];
        let (last_start, last_stored) = self.entries[last - 1];
        let last_end = last_stored.end(last_start);
        // The head of the first entry and the tail of the last one stay.
        let mut kept = [(0, Stored::EMPTY); 2];
        let mut count = 0;
        if first_start < from {
            kept[count] = (first_start, first_stored.slice(0, from - first_start));
            count += 1;
        }
        if last_end > to {
            kept[count] = (to, last_stored.slice(to - last_start, last_end - to));
            count += 1;
        }
        self.replace(first, last, &kept[..count], totals);
    }

    /// Splits an overfull leaf: this leaf keeps `[lo, mid)`, the returned
    /// one covers `[mid, hi)`. `mid` is the start of an entry, so no entry
    /// crosses it. `placed`: index of the last entry the operation wrote.
    fn split(&mut self, placed: Option<usize>) -> (u64, Leaf) {
        let len = self.entries.len();
        debug_assert!(len > LEAF_CAPACITY);
        let at = match placed {
            // Appended after the last entry (sequential writes): keep this
            // leaf full and start a new one instead of leaving two half-full
            // leaves behind for good.
            Some(p) if len == LEAF_CAPACITY + 1 && p == len - 1 => len - 1,
            // The same for descending writes.
            Some(0) if len == LEAF_CAPACITY + 1 => 1,
            _ => len / 2,
        };
        let mid = self.entries[at].0;
        let mut upper = Vec::with_capacity((len - at).max(LEAF_CAPACITY + 1));
        upper.extend_from_slice(&self.entries[at..]);
        self.entries.truncate(at);
        let upper = Leaf {
            hi: self.hi,
            entries: upper,
        };
        self.hi = mid;
        (mid, upper)
    }
}

/// Parts [`wide_partition_point`] cuts its range into per round.
const SEARCH_FANOUT: usize = 8;

/// `slice.partition_point(pred)`, cutting the range into 8 parts per round
/// instead of 2. The 7 probes of a round do not depend on each other, so
/// their cache misses overlap: a leaf that is not in cache (the usual case
/// for random writes into a large index) costs two rounds of misses
/// (64 → 8 → counted) instead of six dependent ones. Measured about 10 ns
/// faster per insert than `partition_point` at 65,536 extents.
fn wide_partition_point<T>(slice: &[T], pred: impl Fn(&T) -> bool) -> usize {
    let holds = |i: usize| usize::from(pred(&slice[i]));
    // The answer lies in [lo, hi].
    let (mut lo, mut hi) = (0, slice.len());
    while hi - lo > SEARCH_FANOUT {
        let n = hi - lo;
        let probe = |j: usize| lo + j * n / SEARCH_FANOUT;
        // `pred` holds on a prefix, so it holds exactly for the first
        // `below` probes: the answer lies after probe `below` and at or
        // before probe `below + 1`.
        let below: usize = (1..SEARCH_FANOUT).map(|j| holds(probe(j))).sum();
        let new_lo = if below == 0 { lo } else { probe(below) + 1 };
        let new_hi = if below + 1 == SEARCH_FANOUT {
            hi
        } else {
            probe(below + 1)
        };
        (lo, hi) = (new_lo, new_hi);
    }
    lo + (lo..hi).map(holds).sum::<usize>()
}

/// Newest-`seq`-wins merge of `new`, covering `[start, end)`, over `old`:
/// sorted, non-overlapping entries that all overlap `[start, end)`. Emits
/// the entries replacing `old`, in file order: at most two per old entry
/// (a fill of `new` before a newer old entry, and that entry; or the head
/// and the tail of an older one) plus a final fill, so at most
/// `2 * old.len() + 1`.
fn resolve(old: &[(u64, Stored)], start: u64, new: Stored, mut emit: impl FnMut((u64, Stored))) {
    let end = new.end(start);
    // `[start, fill_from)` is resolved. The new extent owns
    // `[fill_from, next newer entry)`: it is emitted only when that entry (or
    // the end) is reached, so that the run it owns between two newer extents
    // becomes one entry, not one per replaced piece.
    let mut fill_from = start;
    let mut tail = None;
    for &(old_start, old) in old {
        let old_end = old.end(old_start);
        if old.seq > new.seq {
            if fill_from < old_start {
                emit((
                    fill_from,
                    new.slice(fill_from - start, old_start - fill_from),
                ));
            }
            emit((old_start, old));
            fill_from = old_end;
        } else {
            // Only the first entry can start before `start`, only the last
            // can end after `end`.
            if old_start < start {
                emit((old_start, old.slice(0, start - old_start)));
            }
            if old_end > end {
                tail = Some((end, old.slice(end - old_start, old_end - end)));
            }
        }
    }
    if fill_from < end {
        emit((fill_from, new.slice(fill_from - start, end - fill_from)));
    }
    if let Some(tail) = tail {
        emit(tail);
    }
}

/// Splits the leaf at `lo` (and the leaves split off it) until none holds
/// more than `LEAF_CAPACITY` entries.
fn split_overfull(top: &mut BTreeMap<u64, Leaf>, lo: u64) {
    // INVARIANT: callers pass the key of an existing leaf.
    let leaf = top.get_mut(&lo).expect("split of a missing leaf");
    if leaf.entries.len() > LEAF_CAPACITY {
        let (mid, upper) = leaf.split(None);
        let lower_len = leaf.entries.len();
        add_split_off(top, lo, lower_len, mid, upper);
    }
}

/// Adds the upper part `upper` of the leaf at `lo`, split off at `mid`, to
/// `top`, and splits either part again if it is still overfull. That only
/// happens after an operation added many entries to one leaf at once (an
/// old record replayed across many newer ones).
fn add_split_off(top: &mut BTreeMap<u64, Leaf>, lo: u64, lower_len: usize, mid: u64, upper: Leaf) {
    let upper_overfull = upper.entries.len() > LEAF_CAPACITY;
    let previous = top.insert(mid, upper);
    debug_assert!(previous.is_none(), "split at an existing leaf key {mid}");
    if lower_len > LEAF_CAPACITY {
        split_overfull(top, lo);
    }
    if upper_overfull {
        split_overfull(top, mid);
    }
}

/// Removes the empty leaf at `lo` (not the first) and gives its range to the
/// previous leaf.
fn remove_empty_leaf(top: &mut BTreeMap<u64, Leaf>, lo: u64) {
    debug_assert!(lo != 0, "the first leaf stays");
    // INVARIANT: callers pass the key of an existing leaf.
    let gone = top.remove(&lo).expect("removal of a missing leaf");
    debug_assert!(gone.entries.is_empty());
    // INVARIANT: the first leaf has lo 0 < lo, so a previous leaf exists.
    let (_, previous) = top
        .range_mut(..lo)
        .next_back()
        .expect("leaf without a predecessor");
    previous.hi = gone.hi;
}

/// An empty index, so that index-level queries on a file without extents can
/// borrow something.
static EMPTY_FILE: FileExtents = FileExtents::new();

impl FileExtents {
    /// An empty index.
    pub const fn new() -> FileExtents {
        FileExtents {
            top: BTreeMap::new(),
            totals: Totals { count: 0, bytes: 0 },
        }
    }

    /// `true` when nothing of the file is buffered.
    pub fn is_empty(&self) -> bool {
        self.totals.count == 0
    }

    /// Number of stored extents. An extent crossing a leaf boundary (see the
    /// [module docs](self)) counts once per piece.
    pub fn extent_count(&self) -> usize {
        self.totals.count
    }

    /// Number of buffered bytes (sum of the stored extent lengths).
    pub fn buffered_bytes(&self) -> u64 {
        self.totals.bytes
    }

    /// The stored extents in file order (an extent crossing a leaf boundary
    /// as one entry per piece).
    pub fn extents(&self) -> Extents<'_> {
        Extents {
            entries: self.entries_from(0),
            remaining: self.totals.count,
        }
    }

    /// Records a buffered write, newest sequence wins.
    ///
    /// Stored bytes with a *higher* `seq` than `extent` stay, and `extent`
    /// only fills the gaps around them; stored bytes with a lower or equal
    /// `seq` are trimmed, split or removed where `extent` covers them (equal
    /// `seq`: the new extent wins). The outcome therefore does not depend on
    /// insertion order, apart from ties. A trimmed front advances the log
    /// offset by the bytes cut off. Bytes past `u64::MAX` are ignored; an
    /// empty extent changes nothing. The extent is stored in one piece per
    /// leaf it crosses.
    ///
    /// Cost: per leaf touched (usually one), a top-level B-tree search, an
    /// 8-way search and a shift of at most `LEAF_CAPACITY` entries; plus
    /// O(k) for k overlapped extents.
    pub fn insert(&mut self, extent: Extent) {
        let start = extent.file_offset;
        let end = extent.end();
        if start == end {
            return;
        }
        let new = Stored {
            // INVARIANT: end - start <= extent.len, a u32.
            len: u32::try_from(end - start).expect("clipped length exceeds u32"),
            region: extent.location.region,
            log_offset: extent.location.offset,
            seq: extent.seq,
        };
        debug_assert!(
            new.log_offset.checked_add(u64::from(new.len)).is_some(),
            "log location overflows u64"
        );
        let FileExtents { top, totals } = self;
        if top.is_empty() {
            top.insert(0, Leaf::new(u64::MAX));
        }
        // Each pass stores the part of the extent inside one leaf.
        let mut from = start;
        while from < end {
            // INVARIANT: the leaves partition the key space from 0 (the first
            // leaf was created above if the file had none).
            let (&lo, leaf) = top
                .range_mut(..=from)
                .next_back()
                .expect("no leaf covers the offset");
            let to = end.min(leaf.hi);
            let placed = leaf.insert(from, new.slice(from - start, to - from), totals);
            if leaf.entries.len() > LEAF_CAPACITY {
                // Split while the leaf is at hand: no second search.
                let (mid, upper) = leaf.split(Some(placed));
                let lower_len = leaf.entries.len();
                add_split_off(top, lo, lower_len, mid, upper);
            }
            from = to;
        }
    }

    /// Describes `[offset, offset + len)` (clipped at `u64::MAX`) as pieces
    /// in file order: buffered pieces clipped to the range and holes between
    /// them. The pieces cover the range exactly; adjacent buffered pieces are
    /// not merged. Does not allocate.
    pub fn lookup(&self, offset: u64, len: u64) -> Lookup<'_> {
        Lookup {
            entries: self.entries_from(offset),
            cursor: offset,
            end: offset.saturating_add(len),
            queued: None,
        }
    }

    /// Number of buffered bytes in `[offset, offset + len)` (clipped at
    /// `u64::MAX`). Does not allocate.
    pub fn covered_bytes(&self, offset: u64, len: u64) -> u64 {
        self.lookup(offset, len)
            .map(|piece| match piece {
                Piece::Buffered { len, .. } => len,
                Piece::Hole { .. } => 0,
            })
            .sum()
    }

    /// Forgets buffered bytes in `[offset, offset + len)` (clipped at
    /// `u64::MAX`), trimming or splitting extents at the edges; returns the
    /// number of bytes forgotten. Used when a write bypasses the fast tier
    /// (the capacity tier now holds newer bytes) and on truncate.
    pub fn invalidate(&mut self, offset: u64, len: u64) -> u64 {
        let end = offset.saturating_add(len);
        let FileExtents { top, totals } = self;
        if offset >= end || top.is_empty() {
            return 0;
        }
        let before = totals.bytes;
        if end == u64::MAX {
            // Truncate: every leaf after the one holding `offset` goes whole;
            // split_off avoids one search per leaf.
            // INVARIANT: the leaves partition the key space from 0.
            let (_, leaf) = top
                .range_mut(..=offset)
                .next_back()
                .expect("no leaf covers the offset");
            let next_lo = leaf.hi;
            if next_lo != u64::MAX {
                leaf.hi = u64::MAX;
                for gone in top.split_off(&next_lo).into_values() {
                    for (_, stored) in &gone.entries {
                        totals.sub(stored);
                    }
                }
            }
        }
        let mut from = offset;
        while from < end {
            // INVARIANT: the leaves partition the key space from 0.
            let (&lo, leaf) = top
                .range_mut(..=from)
                .next_back()
                .expect("no leaf covers the offset");
            let to = end.min(leaf.hi);
            leaf.remove_range(from, to, totals);
            if leaf.entries.is_empty() && lo != 0 {
                remove_empty_leaf(top, lo);
            } else if leaf.entries.len() > LEAF_CAPACITY {
                // A hole punched into an extent of a full leaf.
                split_overfull(top, lo);
            }
            from = to;
        }
        if totals.count == 0 {
            top.clear();
        }
        before - totals.bytes
    }

    /// Forgets every buffered byte at or after `new_size` (truncate); returns
    /// the number of bytes forgotten.
    pub fn truncate(&mut self, new_size: u64) -> u64 {
        self.invalidate(new_size, u64::MAX - new_size)
    }

    /// Drops every extent stored in `region` (after the region was flushed
    /// or discarded); returns the number of bytes dropped. O(n).
    ///
    /// Leaves left empty are removed, and a leaf is merged into its
    /// predecessor when both together hold at most `MERGE_LIMIT` entries.
    pub fn remove_region(&mut self, region: RegionId) -> u64 {
        let FileExtents { top, totals } = self;
        let before = totals.bytes;
        let mut merged = false;
        // The last leaf kept so far.
        let mut previous: Option<&mut Leaf> = None;
        for leaf in top.values_mut() {
            leaf.entries.retain(|(_, stored)| {
                let keep = stored.region != region;
                if !keep {
                    totals.sub(stored);
                }
                keep
            });
            let merge = previous.as_deref().is_some_and(|previous| {
                leaf.entries.is_empty()
                    || previous.entries.len() + leaf.entries.len() <= MERGE_LIMIT
            });
            match previous.as_deref_mut() {
                Some(previous) if merge => {
                    previous.reserve(leaf.entries.len());
                    previous.entries.append(&mut leaf.entries);
                    previous.hi = leaf.hi;
                    merged = true;
                }
                _ => previous = Some(leaf),
            }
        }
        if totals.count == 0 {
            top.clear();
        } else if merged {
            // Merged leaves are empty; the first leaf may stay empty.
            top.retain(|&lo, leaf| lo == 0 || !leaf.entries.is_empty());
        }
        before - totals.bytes
    }

    /// Runs of buffered bytes in file order for the flusher, optionally only
    /// extents stored in `region`.
    ///
    /// File-contiguous extents are merged into one run while the run stays
    /// within `max_run_bytes`; a single extent longer than `max_run_bytes`
    /// forms a run of its own (extents are never split here, so that each
    /// log read stays whole).
    ///
    /// # Panics
    /// If `max_run_bytes` is 0 (a caller bug: no run could be formed).
    pub fn flush_runs(&self, region: Option<RegionId>, max_run_bytes: u64) -> FlushRuns<'_> {
        assert!(max_run_bytes >= 1, "max_run_bytes must be at least 1");
        FlushRuns {
            entries: self.entries_from(0),
            regions: match region {
                Some(r) => RegionFilter::One(r),
                None => RegionFilter::All,
            },
            max_run_bytes,
            peeked: None,
        }
    }

    /// [`FileExtents::flush_runs`] over the extents stored in any of
    /// `regions` (sorted, as [`RegionId`]s order): runs merge across
    /// regions, so bytes that are contiguous once sorted flush in one write
    /// whichever region holds each piece.
    ///
    /// # Panics
    /// If `max_run_bytes` is 0.
    pub fn flush_runs_in<'a>(
        &'a self,
        regions: &'a [RegionId],
        max_run_bytes: u64,
    ) -> FlushRuns<'a> {
        assert!(max_run_bytes >= 1, "max_run_bytes must be at least 1");
        debug_assert!(regions.is_sorted(), "regions must be sorted");
        FlushRuns {
            entries: self.entries_from(0),
            regions: RegionFilter::Sorted(regions),
            max_run_bytes,
            peeked: None,
        }
    }

    /// Asserts the module invariants in debug builds (no-op in release).
    /// O(n): meant for tests and debugging, not for every mutation.
    pub fn check_invariants(&self) {
        let mut totals = Totals::default();
        // The `lo` the next leaf must have: the leaves partition the key
        // space.
        let mut next_lo = 0u64;
        let mut prev_end = 0u64;
        for (index, (&lo, leaf)) in self.top.iter().enumerate() {
            debug_assert_eq!(lo, next_lo, "leaf at {lo} leaves a gap or overlaps");
            debug_assert!(lo < leaf.hi, "leaf at {lo} is empty or reversed");
            debug_assert!(
                index == 0 || !leaf.entries.is_empty(),
                "leaf at {lo} is empty and not the first"
            );
            debug_assert!(
                leaf.entries.len() <= LEAF_CAPACITY,
                "leaf at {lo} holds {} entries",
                leaf.entries.len()
            );
            for &(start, stored) in &leaf.entries {
                debug_assert!(stored.len > 0, "empty extent at {start}");
                let end = start.checked_add(u64::from(stored.len));
                debug_assert!(end.is_some(), "extent at {start} ends past u64::MAX");
                debug_assert!(
                    start >= lo && end.is_some_and(|end| end <= leaf.hi),
                    "extent at {start} outside its leaf [{lo}, {})",
                    leaf.hi
                );
                debug_assert!(
                    start >= prev_end,
                    "extent at {start} overlaps its predecessor"
                );
                prev_end = stored.end(start);
                totals.add(&stored);
            }
            next_lo = leaf.hi;
        }
        debug_assert!(
            self.top.is_empty() || next_lo == u64::MAX,
            "the last leaf ends at {next_lo}, not u64::MAX"
        );
        debug_assert_eq!(
            self.top.is_empty(),
            totals.count == 0,
            "leaves kept without extents, or extents without leaves"
        );
        debug_assert_eq!(totals.count, self.totals.count, "extent count out of date");
        debug_assert_eq!(totals.bytes, self.totals.bytes, "byte total out of date");
    }

    /// The stored entries in file order, from the first one ending after
    /// `offset`.
    fn entries_from(&self, offset: u64) -> Entries<'_> {
        match self.top.range(..=offset).next_back() {
            Some((&lo, leaf)) => Entries {
                leaves: self.top.range((Excluded(lo), Unbounded)),
                current: leaf.entries[leaf.first_ending_after(offset)..].iter(),
            },
            // No leaves: the file is empty.
            None => Entries {
                leaves: self.top.range(..),
                current: [].iter(),
            },
        }
    }
}

/// Equal when the same entries are stored (see [`FileExtents::extents`]),
/// whatever the leaf layout.
impl PartialEq for FileExtents {
    fn eq(&self, other: &FileExtents) -> bool {
        self.totals == other.totals && self.extents().eq(other.extents())
    }
}

impl Eq for FileExtents {}

/// The stored entries of a file in order, leaf after leaf.
#[derive(Clone, Debug)]
struct Entries<'a> {
    /// The leaves after the current one.
    leaves: btree_map::Range<'a, u64, Leaf>,
    /// What is left of the current leaf.
    current: core::slice::Iter<'a, (u64, Stored)>,
}

impl Iterator for Entries<'_> {
    type Item = (u64, Stored);

    fn next(&mut self) -> Option<(u64, Stored)> {
        loop {
            if let Some(&entry) = self.current.next() {
                return Some(entry);
            }
            // Only the first leaf can be empty, so this loops at most twice.
            self.current = self.leaves.next()?.1.entries.iter();
        }
    }
}

impl FusedIterator for Entries<'_> {}

/// Iterator over a file's stored extents in file order; see
/// [`FileExtents::extents`].
#[derive(Clone, Debug)]
pub struct Extents<'a> {
    entries: Entries<'a>,
    /// Entries not yielded yet.
    remaining: usize,
}

impl Iterator for Extents<'_> {
    type Item = Extent;

    fn next(&mut self) -> Option<Extent> {
        let (file_offset, stored) = self.entries.next()?;
        self.remaining -= 1;
        Some(Extent {
            file_offset,
            len: stored.len,
            location: stored.location(),
            seq: stored.seq,
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining, Some(self.remaining))
    }
}

impl ExactSizeIterator for Extents<'_> {}
impl FusedIterator for Extents<'_> {}

/// Iterator over the pieces of a range; see [`FileExtents::lookup`].
#[derive(Clone, Debug)]
pub struct Lookup<'a> {
    /// Stored entries from the first one ending after the range start; the
    /// first may start before the range, any may end after it.
    entries: Entries<'a>,
    /// Everything before `cursor` has been yielded (or is `queued`).
    cursor: u64,
    end: u64,
    /// A buffered piece that follows the hole just yielded.
    queued: Option<Piece>,
}

impl Iterator for Lookup<'_> {
    type Item = Piece;

    fn next(&mut self) -> Option<Piece> {
        if let Some(piece) = self.queued.take() {
            return Some(piece);
        }
        // The pieces have covered the range (an empty range has none).
        if self.cursor >= self.end {
            return None;
        }
        let end = self.end;
        let Some((start, stored)) = self.entries.next().filter(|&(start, _)| start < end) else {
            let hole = Piece::Hole {
                file_offset: self.cursor,
                len: self.end - self.cursor,
            };
            self.cursor = self.end;
            return Some(hole);
        };
        // Clip to the range: only the first entry can start before it, and
        // any entry may end after it.
        let piece_start = start.max(self.cursor);
        let piece_end = stored.end(start).min(self.end);
        let buffered = Piece::Buffered {
            file_offset: piece_start,
            len: piece_end - piece_start,
            location: LogLocation {
                region: stored.region,
                offset: stored.log_offset.saturating_add(piece_start - start),
            },
            seq: stored.seq,
        };
        let hole_start = self.cursor;
        self.cursor = piece_end;
        if piece_start > hole_start {
            self.queued = Some(buffered);
            Some(Piece::Hole {
                file_offset: hole_start,
                len: piece_start - hole_start,
            })
        } else {
            Some(buffered)
        }
    }
}

impl FusedIterator for Lookup<'_> {}

/// Iterator over flush runs; see [`FileExtents::flush_runs`].
#[derive(Clone, Debug)]
pub struct FlushRuns<'a> {
    entries: Entries<'a>,
    regions: RegionFilter<'a>,
    max_run_bytes: u64,
    /// The extent that did not fit into the previous run.
    peeked: Option<(u64, Stored)>,
}

impl FlushRuns<'_> {
    /// The next stored extent passing the region filter.
    fn next_matching(&mut self) -> Option<(u64, Stored)> {
        let regions = self.regions;
        self.entries
            .by_ref()
            .find(|(_, stored)| regions.contains(stored.region))
    }
}

/// Which regions' extents a [`FlushRuns`] takes.
#[derive(Clone, Copy, Debug)]
enum RegionFilter<'a> {
    All,
    One(RegionId),
    /// Sorted.
    Sorted(&'a [RegionId]),
}

impl RegionFilter<'_> {
    fn contains(self, region: RegionId) -> bool {
        match self {
            RegionFilter::All => true,
            RegionFilter::One(r) => r == region,
            RegionFilter::Sorted(set) => set.binary_search(&region).is_ok(),
        }
    }
}

impl Iterator for FlushRuns<'_> {
    type Item = FlushRun;

    fn next(&mut self) -> Option<FlushRun> {
        let (file_offset, first) = match self.peeked.take() {
            Some(peeked) => peeked,
            None => self.next_matching()?,
        };
        let mut len = u64::from(first.len);
        let mut pieces = Vec::new();
        pieces.push((first.location(), first.len));
        while let Some((start, stored)) = self.next_matching() {
            let grown = len.saturating_add(u64::from(stored.len));
            if start != file_offset.saturating_add(len) || grown > self.max_run_bytes {
                self.peeked = Some((start, stored));
                break;
            }
            len = grown;
            pieces.push((stored.location(), stored.len));
        }
        Some(FlushRun {
            file_offset,
            len,
            pieces,
        })
    }
}

impl FusedIterator for FlushRuns<'_> {}

/// The extent indexes of all files, with running totals. See the
/// [module docs](self).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExtentIndex {
    /// Only files with at least one extent.
    files: BTreeMap<FileId, FileExtents>,
    /// Sum of the files' extent counts.
    extent_count: usize,
    /// Sum of the files' buffered bytes.
    buffered_bytes: u64,
}

impl ExtentIndex {
    /// An empty index.
    pub const fn new() -> ExtentIndex {
        ExtentIndex {
            files: BTreeMap::new(),
            extent_count: 0,
            buffered_bytes: 0,
        }
    }

    /// Records a buffered write to `file`; see [`FileExtents::insert`].
    pub fn insert(&mut self, file: FileId, extent: Extent) {
        if extent.len == 0 {
            // Do not create an empty per-file map.
            return;
        }
        self.update(file, true, |extents| extents.insert(extent));
    }

    /// Pieces of `[offset, offset + len)` of `file`; see
    /// [`FileExtents::lookup`]. A file without extents is one hole.
    pub fn lookup(&self, file: FileId, offset: u64, len: u64) -> Lookup<'_> {
        self.file_or_empty(file).lookup(offset, len)
    }

    /// Buffered bytes of `file` in `[offset, offset + len)`; see
    /// [`FileExtents::covered_bytes`].
    pub fn covered_bytes(&self, file: FileId, offset: u64, len: u64) -> u64 {
        self.file_or_empty(file).covered_bytes(offset, len)
    }

    /// Forgets buffered bytes of `file` in a range; returns the bytes
    /// forgotten. See [`FileExtents::invalidate`].
    pub fn invalidate(&mut self, file: FileId, offset: u64, len: u64) -> u64 {
        self.update(file, false, |extents| extents.invalidate(offset, len))
            .unwrap_or(0)
    }

    /// Forgets buffered bytes of `file` at or after `new_size`; returns the
    /// bytes forgotten.
    pub fn truncate(&mut self, file: FileId, new_size: u64) -> u64 {
        self.update(file, false, |extents| extents.truncate(new_size))
            .unwrap_or(0)
    }

    /// Forgets everything buffered for `file` (unlink) and returns it, so
    /// the caller can account the now-dead log bytes.
    pub fn remove_file(&mut self, file: FileId) -> Option<FileExtents> {
        let removed = self.files.remove(&file)?;
        self.extent_count -= removed.extent_count();
        self.buffered_bytes -= removed.buffered_bytes();
        Some(removed)
    }

    /// Rename `from` to `to`: the extents of `from` now belong to `to`, and
    /// whatever was buffered for `to` is dropped and returned (rename over an
    /// existing file replaces it, even when `from` has nothing buffered).
    /// Renaming a file to itself changes nothing and returns `None`.
    pub fn rename(&mut self, from: FileId, to: FileId) -> Option<FileExtents> {
        if from == to {
            return None;
        }
        let replaced = self.remove_file(to);
        if let Some(moved) = self.files.remove(&from) {
            // The moved extents stay counted: they only change owner.
            self.files.insert(to, moved);
        }
        replaced
    }

    /// Drops every extent stored in `region`, in all files, and every file
    /// left without extents; returns the bytes dropped. O(total extents).
    pub fn remove_region(&mut self, region: RegionId) -> u64 {
        let mut removed_bytes = 0;
        let mut removed_extents = 0;
        self.files.retain(|_, extents| {
            let count_before = extents.extent_count();
            removed_bytes += extents.remove_region(region);
            removed_extents += count_before - extents.extent_count();
            !extents.is_empty()
        });
        self.extent_count -= removed_extents;
        self.buffered_bytes -= removed_bytes;
        removed_bytes
    }

    /// Flush runs of `file`; see [`FileExtents::flush_runs`].
    ///
    /// # Panics
    /// If `max_run_bytes` is 0.
    pub fn flush_runs(
        &self,
        file: FileId,
        region: Option<RegionId>,
        max_run_bytes: u64,
    ) -> FlushRuns<'_> {
        self.file_or_empty(file).flush_runs(region, max_run_bytes)
    }

    /// The index of `file`, if it has buffered extents.
    pub fn file(&self, file: &FileId) -> Option<&FileExtents> {
        self.files.get(file)
    }

    /// Files with buffered extents, in `FileId` order.
    pub fn files(&self) -> impl ExactSizeIterator<Item = (FileId, &FileExtents)> + '_ {
        self.files.iter().map(|(&file, extents)| (file, extents))
    }

    /// Number of files with buffered extents.
    pub fn file_count(&self) -> usize {
        self.files.len()
    }

    /// `true` when nothing is buffered.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// Number of stored extents over all files.
    pub fn extent_count(&self) -> usize {
        self.extent_count
    }

    /// Buffered bytes over all files.
    pub fn buffered_bytes(&self) -> u64 {
        self.buffered_bytes
    }

    /// Estimated heap bytes held by the index: [`ESTIMATED_BYTES_PER_EXTENT`]
    /// per extent plus [`ESTIMATED_BYTES_PER_FILE`] per file.
    pub fn memory_bytes_estimate(&self) -> usize {
        self.extent_count
            .saturating_mul(ESTIMATED_BYTES_PER_EXTENT)
            .saturating_add(self.files.len().saturating_mul(ESTIMATED_BYTES_PER_FILE))
    }

    /// Asserts the module invariants for every file and the running totals
    /// in debug builds (no-op in release). O(total extents).
    pub fn check_invariants(&self) {
        let mut count = 0;
        let mut bytes = 0;
        for (file, extents) in &self.files {
            debug_assert!(!extents.is_empty(), "{file:?} kept without extents");
            extents.check_invariants();
            count += extents.extent_count();
            bytes += extents.buffered_bytes();
        }
        debug_assert_eq!(count, self.extent_count, "extent count out of date");
        debug_assert_eq!(bytes, self.buffered_bytes, "byte total out of date");
    }

    fn file_or_empty(&self, file: FileId) -> &FileExtents {
        self.files.get(&file).unwrap_or(&EMPTY_FILE)
    }

    /// Runs `f` on the index of `file` (created if `create`), then folds the
    /// change of its counts into the totals and drops the file if it became
    /// empty. `None` if the file has no index and `create` is false.
    fn update<R>(
        &mut self,
        file: FileId,
        create: bool,
        f: impl FnOnce(&mut FileExtents) -> R,
    ) -> Option<R> {
        let extents = if create {
            self.files.entry(file).or_default()
        } else {
            self.files.get_mut(&file)?
        };
        let (count_before, bytes_before) = (extents.extent_count(), extents.buffered_bytes());
        let result = f(extents);
        let (count_after, bytes_after) = (extents.extent_count(), extents.buffered_bytes());
        let now_empty = extents.is_empty();
        self.extent_count = self.extent_count - count_before + count_after;
        self.buffered_bytes = self.buffered_bytes - bytes_before + bytes_after;
        if now_empty {
            self.files.remove(&file);
        }
        Some(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    const R0: RegionId = RegionId(0);
    const R1: RegionId = RegionId(1);
    const R2: RegionId = RegionId(2);

    fn loc(region: RegionId, offset: u64) -> LogLocation {
        LogLocation { region, offset }
    }

    fn ext(file_offset: u64, len: u32, region: RegionId, log_offset: u64, seq: u64) -> Extent {
        Extent {
            file_offset,
            len,
            location: loc(region, log_offset),
            seq,
        }
    }

    fn all(f: &FileExtents) -> Vec<Extent> {
        f.check_invariants();
        f.extents().collect()
    }

    fn buffered(file_offset: u64, len: u64, region: RegionId, log: u64, seq: u64) -> Piece {
        Piece::Buffered {
            file_offset,
            len,
            location: loc(region, log),
            seq,
        }
    }

    fn hole(file_offset: u64, len: u64) -> Piece {
        Piece::Hole { file_offset, len }
    }

    #[test]
    fn stored_value_is_24_bytes_and_estimate_in_paper_range() {
        assert_eq!(size_of::<Stored>(), 24);
        assert!((24..=64).contains(&ESTIMATED_BYTES_PER_EXTENT));
    }

    #[test]
    fn new_covers_old_fully() {
        let mut f = FileExtents::new();
        f.insert(ext(100, 10, R0, 0, 1));
        f.insert(ext(120, 10, R0, 10, 2));
        f.insert(ext(90, 50, R1, 1000, 3));
        assert_eq!(all(&f), vec![ext(90, 50, R1, 1000, 3)]);
        assert_eq!(f.buffered_bytes(), 50);
    }

    #[test]
    fn new_inside_old_splits_in_three() {
        let mut f = FileExtents::new();
        f.insert(ext(0, 100, R0, 500, 1));
        f.insert(ext(30, 20, R1, 7000, 2));
        assert_eq!(
            all(&f),
            vec![
                ext(0, 30, R0, 500, 1),
                ext(30, 20, R1, 7000, 2),
                ext(50, 50, R0, 550, 1),
            ]
        );
        assert_eq!(f.buffered_bytes(), 100);
    }

    #[test]
    fn new_overlapping_front_and_back() {
        // New extent over the back of the old one: old head stays.
        let mut f = FileExtents::new();
        f.insert(ext(0, 100, R0, 0, 1));
        f.insert(ext(80, 40, R1, 1000, 2));
        assert_eq!(
            all(&f),
            vec![ext(0, 80, R0, 0, 1), ext(80, 40, R1, 1000, 2)]
        );

        // New extent over the front of the old one: old tail advances.
        let mut f = FileExtents::new();
        f.insert(ext(100, 100, R0, 0, 1));
        f.insert(ext(50, 100, R1, 1000, 2));
        assert_eq!(
            all(&f),
            vec![ext(50, 100, R1, 1000, 2), ext(150, 50, R0, 50, 1)]
        );
        assert_eq!(f.buffered_bytes(), 150);
    }

    #[test]
    fn new_spanning_several_trims_both_ends() {
        let mut f = FileExtents::new();
        f.insert(ext(0, 10, R0, 0, 1));
        f.insert(ext(10, 10, R0, 100, 2));
        f.insert(ext(20, 10, R0, 200, 3));
        f.insert(ext(5, 20, R1, 1000, 4));
        assert_eq!(
            all(&f),
            vec![
                ext(0, 5, R0, 0, 1),
                ext(5, 20, R1, 1000, 4),
                ext(25, 5, R0, 205, 3),
            ]
        );
    }

    #[test]
    fn older_seq_arriving_late_fills_only_gaps() {
        let mut f = FileExtents::new();
        f.insert(ext(10, 10, R0, 100, 5));
        f.insert(ext(30, 10, R0, 200, 7));
        // Replayed older record over [0, 50): only the gaps are its.
        f.insert(ext(0, 50, R1, 1000, 3));
        assert_eq!(
            all(&f),
            vec![
                ext(0, 10, R1, 1000, 3),
                ext(10, 10, R0, 100, 5),
                ext(20, 10, R1, 1020, 3),
                ext(30, 10, R0, 200, 7),
                ext(40, 10, R1, 1040, 3),
            ]
        );
        assert_eq!(f.buffered_bytes(), 50);

        // Older record entirely inside a newer one changes nothing.
        let before = f.clone();
        f.insert(ext(12, 3, R2, 9000, 1));
        assert_eq!(f, before);

        // Mixed: the newer straddling predecessor stays, older pieces lose.
        f.insert(ext(15, 30, R2, 5000, 4));
        assert_eq!(
            all(&f),
            vec![
                ext(0, 10, R1, 1000, 3),
                ext(10, 10, R0, 100, 5),
                ext(20, 10, R2, 5005, 4),
                ext(30, 10, R0, 200, 7),
                ext(40, 5, R2, 5025, 4),
                ext(45, 5, R1, 1045, 3),
            ]
        );
    }

    #[test]
    fn insertion_order_does_not_matter() {
        let extents = [
            ext(0, 50, R0, 0, 1),
            ext(20, 50, R1, 1000, 2),
            ext(10, 20, R2, 2000, 3),
            ext(60, 5, R0, 3000, 4),
        ];
        let mut forward = FileExtents::new();
        for e in extents {
            forward.insert(e);
        }
        let mut backward = FileExtents::new();
        for e in extents.iter().rev() {
            backward.insert(*e);
        }
        // The backward build may split the oldest record into more entries
        // only where a newer one interrupts it; here both agree exactly.
        assert_eq!(all(&forward), all(&backward));
    }

    #[test]
    fn equal_seq_new_wins() {
        let mut f = FileExtents::new();
        f.insert(ext(0, 10, R0, 0, 4));
        f.insert(ext(5, 10, R1, 100, 4));
        assert_eq!(all(&f), vec![ext(0, 5, R0, 0, 4), ext(5, 10, R1, 100, 4)]);
    }

    #[test]
    fn adjacent_extents_are_not_merged() {
        let mut f = FileExtents::new();
        f.insert(ext(0, 10, R0, 0, 1));
        f.insert(ext(10, 10, R0, 10, 2));
        assert_eq!(f.extent_count(), 2);
    }

    #[test]
    fn empty_extent_is_ignored_and_end_is_clipped() {
        let mut f = FileExtents::new();
        f.insert(ext(5, 0, R0, 0, 1));
        assert!(f.is_empty());
        f.insert(ext(u64::MAX - 4, 10, R0, 0, 1));
        assert_eq!(all(&f), vec![ext(u64::MAX - 4, 4, R0, 0, 1)]);
        assert_eq!(f.buffered_bytes(), 4);
    }

    #[test]
    fn lookup_clips_and_fills_holes() {
        let mut f = FileExtents::new();
        f.insert(ext(10, 10, R0, 100, 1));
        f.insert(ext(20, 5, R1, 200, 2));
        f.insert(ext(40, 10, R0, 300, 3));
        let pieces: Vec<Piece> = f.lookup(15, 30).collect();
        assert_eq!(
            pieces,
            vec![
                buffered(15, 5, R0, 105, 1),
                buffered(20, 5, R1, 200, 2),
                hole(25, 15),
                buffered(40, 5, R0, 300, 3),
            ]
        );
        assert_eq!(f.covered_bytes(15, 30), 15);
        let pieces: Vec<Piece> = f.lookup(0, 10).collect();
        assert_eq!(pieces, vec![hole(0, 10)]);
        let pieces: Vec<Piece> = f.lookup(12, 2).collect();
        assert_eq!(pieces, vec![buffered(12, 2, R0, 102, 1)]);
        assert_eq!(f.lookup(12, 0).count(), 0);
        let pieces: Vec<Piece> = f.lookup(45, u64::MAX).collect();
        assert_eq!(
            pieces,
            vec![buffered(45, 5, R0, 305, 3), hole(50, u64::MAX - 50)]
        );
    }

    #[test]
    fn invalidate_at_edges() {
        let mut f = FileExtents::new();
        f.insert(ext(0, 10, R0, 0, 1));
        f.insert(ext(10, 10, R0, 100, 2));
        f.insert(ext(30, 10, R0, 200, 3));
        // Cuts the back of the first, the whole second, the front of the third.
        assert_eq!(f.invalidate(5, 30), 20);
        assert_eq!(all(&f), vec![ext(0, 5, R0, 0, 1), ext(35, 5, R0, 205, 3)]);
        // A range with nothing buffered.
        assert_eq!(f.invalidate(10, 20), 0);
        // Punch a hole inside one extent: split in two.
        let mut g = FileExtents::new();
        g.insert(ext(0, 100, R1, 1000, 1));
        assert_eq!(g.invalidate(40, 10), 10);
        assert_eq!(
            all(&g),
            vec![ext(0, 40, R1, 1000, 1), ext(50, 50, R1, 1050, 1)]
        );
        // Exact fit and empty range.
        assert_eq!(g.invalidate(0, 40), 40);
        assert_eq!(g.invalidate(50, 0), 0);
        assert_eq!(all(&g), vec![ext(50, 50, R1, 1050, 1)]);
    }

    #[test]
    fn truncate_style_invalidate_to_u64_max() {
        let mut f = FileExtents::new();
        f.insert(ext(0, 10, R0, 0, 1));
        f.insert(ext(20, 10, R0, 10, 2));
        f.insert(ext(u64::MAX - 10, 10, R0, 20, 3));
        assert_eq!(f.invalidate(25, u64::MAX - 25), 15);
        assert_eq!(all(&f), vec![ext(0, 10, R0, 0, 1), ext(20, 5, R0, 10, 2)]);
        // Overflowing length saturates instead of wrapping.
        assert_eq!(f.invalidate(5, u64::MAX), 10);
        assert_eq!(all(&f), vec![ext(0, 5, R0, 0, 1)]);
        assert_eq!(f.truncate(0), 5);
        assert!(f.is_empty());
        assert_eq!(f.buffered_bytes(), 0);
    }

    #[test]
    fn remove_region_drops_only_that_region() {
        let mut f = FileExtents::new();
        f.insert(ext(0, 10, R0, 0, 1));
        f.insert(ext(10, 10, R1, 0, 2));
        f.insert(ext(20, 10, R0, 10, 3));
        assert_eq!(f.remove_region(R0), 20);
        assert_eq!(all(&f), vec![ext(10, 10, R1, 0, 2)]);
        assert_eq!(f.remove_region(R2), 0);
    }

    #[test]
    fn flush_runs_merge_contiguous_up_to_max() {
        let mut f = FileExtents::new();
        f.insert(ext(0, 10, R0, 0, 1));
        f.insert(ext(10, 10, R1, 50, 2));
        f.insert(ext(20, 10, R0, 30, 3));
        f.insert(ext(35, 10, R0, 90, 4)); // gap before: new run
        f.insert(ext(45, 100, R0, 200, 5)); // larger than max: own run
        let runs: Vec<FlushRun> = f.flush_runs(None, 25).collect();
        assert_eq!(
            runs,
            vec![
                FlushRun {
                    file_offset: 0,
                    len: 20,
                    pieces: vec![(loc(R0, 0), 10), (loc(R1, 50), 10)],
                },
                FlushRun {
                    file_offset: 20,
                    len: 10,
                    pieces: vec![(loc(R0, 30), 10)],
                },
                FlushRun {
                    file_offset: 35,
                    len: 10,
                    pieces: vec![(loc(R0, 90), 10)],
                },
                FlushRun {
                    file_offset: 45,
                    len: 100,
                    pieces: vec![(loc(R0, 200), 100)],
                },
            ]
        );
        // A large max merges everything file-contiguous.
        let runs: Vec<(u64, u64)> = f
            .flush_runs(None, u64::MAX)
            .map(|r| (r.file_offset, r.len))
            .collect();
        assert_eq!(runs, vec![(0, 30), (35, 110)]);
        // Exact fit merges: 10 + 10 == 20.
        let runs: Vec<(u64, u64)> = f
            .flush_runs(None, 20)
            .map(|r| (r.file_offset, r.len))
            .collect();
        assert_eq!(runs, vec![(0, 20), (20, 10), (35, 10), (45, 100)]);
    }

    #[test]
    fn flush_runs_region_filter() {
        let mut f = FileExtents::new();
        f.insert(ext(0, 10, R0, 0, 1));
        f.insert(ext(10, 10, R1, 50, 2));
        f.insert(ext(20, 10, R0, 30, 3));
        f.insert(ext(30, 10, R0, 40, 4));
        let runs: Vec<FlushRun> = f.flush_runs(Some(R0), 1000).collect();
        assert_eq!(
            runs,
            vec![
                FlushRun {
                    file_offset: 0,
                    len: 10,
                    pieces: vec![(loc(R0, 0), 10)],
                },
                FlushRun {
                    file_offset: 20,
                    len: 20,
                    pieces: vec![(loc(R0, 30), 10), (loc(R0, 40), 10)],
                },
            ]
        );
        assert_eq!(f.flush_runs(Some(R2), 1000).count(), 0);
    }

    #[test]
    #[should_panic(expected = "max_run_bytes")]
    fn flush_runs_zero_max_panics() {
        let _ = FileExtents::new().flush_runs(None, 0);
    }

    #[test]
    fn index_totals_follow_every_operation() {
        let a = FileId(1);
        let b = FileId(2);
        let mut index = ExtentIndex::new();
        index.insert(a, ext(0, 10, R0, 0, 1));
        index.insert(a, ext(5, 10, R1, 0, 2));
        index.insert(b, ext(0, 100, R1, 100, 3));
        index.insert(b, ext(0, 0, R1, 100, 4));
        index.check_invariants();
        assert_eq!(index.extent_count(), 3);
        assert_eq!(index.buffered_bytes(), 115);
        assert_eq!(index.file_count(), 2);
        assert_eq!(
            index.memory_bytes_estimate(),
            3 * ESTIMATED_BYTES_PER_EXTENT + 2 * ESTIMATED_BYTES_PER_FILE
        );

        assert_eq!(index.invalidate(b, 50, 10), 10);
        assert_eq!(index.extent_count(), 4);
        assert_eq!(index.buffered_bytes(), 105);
        assert_eq!(index.covered_bytes(b, 0, 200), 90);
        assert_eq!(index.invalidate(FileId(9), 0, 10), 0);

        assert_eq!(index.remove_region(R1), 100);
        index.check_invariants();
        assert_eq!(index.file_count(), 1, "b became empty and is dropped");
        assert!(index.file(&b).is_none());
        assert_eq!(index.buffered_bytes(), 5);

        assert_eq!(index.truncate(a, 0), 5);
        assert!(index.is_empty());
        assert_eq!(index.extent_count(), 0);
        let pieces: Vec<Piece> = index.lookup(a, 0, 8).collect();
        assert_eq!(pieces, vec![hole(0, 8)]);
        assert_eq!(index.flush_runs(a, None, 8).count(), 0);
    }

    #[test]
    fn rename_over_drops_destination() {
        let a = FileId(1);
        let b = FileId(2);
        let c = FileId(3);
        let mut index = ExtentIndex::new();
        index.insert(a, ext(0, 10, R0, 0, 1));
        index.insert(b, ext(0, 20, R0, 10, 2));
        index.insert(b, ext(40, 20, R0, 30, 3));

        let replaced = index.rename(a, b).expect("b had extents");
        assert_eq!(replaced.buffered_bytes(), 40);
        index.check_invariants();
        assert!(index.file(&a).is_none());
        assert_eq!(
            all(index.file(&b).expect("moved")),
            vec![ext(0, 10, R0, 0, 1)]
        );
        assert_eq!(index.extent_count(), 1);
        assert_eq!(index.buffered_bytes(), 10);

        // Rename of a file without extents over one with extents.
        assert!(index.rename(c, b).is_some());
        assert!(index.is_empty());
        assert_eq!(index.buffered_bytes(), 0);

        // Rename to itself is a no-op.
        index.insert(a, ext(0, 10, R0, 0, 4));
        assert!(index.rename(a, a).is_none());
        assert_eq!(index.buffered_bytes(), 10);

        let removed = index.remove_file(a).expect("a had extents");
        assert_eq!(removed.extent_count(), 1);
        assert!(index.is_empty());
        index.check_invariants();
    }

    // ---- Leaf structure -------------------------------------------------

    /// `(lo, hi, entries)` of every leaf, in order.
    fn leaves(f: &FileExtents) -> Vec<(u64, u64, usize)> {
        f.top
            .iter()
            .map(|(&lo, leaf)| (lo, leaf.hi, leaf.entries.len()))
            .collect()
    }

    /// splitmix64, for reproducible random tests.
    fn next_random(state: &mut u64) -> u64 {
        *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = *state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// `count` extents of 5 bytes every 10 bytes from 0, region 0, log
    /// offset = file offset, seq 1: one split at 65 entries.
    fn comb(count: u64) -> FileExtents {
        let mut f = FileExtents::new();
        for i in 0..count {
            f.insert(ext(i * 10, 5, R0, i * 10, 1));
        }
        f
    }

    /// `comb(65)`, but inserted so that the leaf splits at its middle entry:
    /// leaves `[0, 320)` and `[320, u64::MAX)`.
    fn comb_split_in_the_middle() -> FileExtents {
        let mut f = FileExtents::new();
        for i in (0..65).filter(|&i| i != 32).chain([32]) {
            f.insert(ext(i * 10, 5, R0, i * 10, 1));
        }
        assert_eq!(leaves(&f), vec![(0, 320, 32), (320, u64::MAX, 33)]);
        f
    }

    #[test]
    fn wide_partition_point_matches_partition_point() {
        let mut state = 1;
        for len in 0..200 {
            let mut values: Vec<u64> = (0..len).map(|_| next_random(&mut state) % 64).collect();
            values.sort_unstable();
            for threshold in 0..66 {
                assert_eq!(
                    wide_partition_point(&values, |&v| v < threshold),
                    values.partition_point(|&v| v < threshold),
                    "len {len}, threshold {threshold}"
                );
            }
        }
    }

    #[test]
    fn overfull_leaf_splits_at_the_middle_entry() {
        let f = comb(64);
        assert_eq!(leaves(&f), vec![(0, u64::MAX, 64)]);
        let f = comb_split_in_the_middle();
        f.check_invariants();
        assert_eq!(f, comb(65));
    }

    #[test]
    fn sequential_writes_fill_leaves() {
        // Ascending: each split keeps the full leaf and starts a new one.
        let f = comb(200);
        f.check_invariants();
        assert_eq!(
            leaves(&f),
            vec![
                (0, 640, 64),
                (640, 1280, 64),
                (1280, 1920, 64),
                (1920, u64::MAX, 8)
            ]
        );
        // Descending: the mirror image.
        let mut g = FileExtents::new();
        for i in (0..200).rev() {
            g.insert(ext(i * 10, 5, R0, i * 10, 1));
        }
        g.check_invariants();
        assert_eq!(
            leaves(&g),
            vec![
                (0, 80, 8),
                (80, 720, 64),
                (720, 1360, 64),
                (1360, u64::MAX, 64)
            ]
        );
        // Same entries, different leaves: still equal.
        assert_eq!(f, g);
        assert_eq!(all(&f), all(&g));
    }

    #[test]
    fn extent_crossing_one_leaf_boundary_is_split_there() {
        let mut f = comb_split_in_the_middle();
        // Empty [300, 340): the boundary 320 is now in a gap.
        assert_eq!(f.invalidate(300, 40), 20);
        assert_eq!(leaves(&f), vec![(0, 320, 30), (320, u64::MAX, 31)]);

        // A write into the gap across the boundary: two entries, the second
        // one's log offset advanced by the bytes before the boundary.
        f.insert(ext(306, 28, R1, 5000, 2));
        assert_eq!(leaves(&f), vec![(0, 320, 31), (320, u64::MAX, 32)]);
        let stored = all(&f);
        assert_eq!(
            stored[29..33],
            [
                ext(290, 5, R0, 290, 1),
                ext(306, 14, R1, 5000, 2),
                ext(320, 14, R1, 5014, 2),
                ext(340, 5, R0, 340, 1),
            ]
        );
        assert_eq!(f.extent_count(), 63);
        assert_eq!(f.buffered_bytes(), 61 * 5 + 28);
        // Lookups see two adjacent pieces that together are the write.
        let pieces: Vec<Piece> = f.lookup(300, 40).collect();
        assert_eq!(
            pieces,
            vec![
                hole(300, 6),
                buffered(306, 14, R1, 5000, 2),
                buffered(320, 14, R1, 5014, 2),
                hole(334, 6),
            ]
        );
        let pieces: Vec<Piece> = f.lookup(318, 4).collect();
        assert_eq!(
            pieces,
            vec![buffered(318, 2, R1, 5012, 2), buffered(320, 2, R1, 5014, 2)]
        );
        // The flusher still gets one run for it.
        let runs: Vec<FlushRun> = f.flush_runs(Some(R1), u64::MAX).collect();
        assert_eq!(
            runs,
            vec![FlushRun {
                file_offset: 306,
                len: 28,
                pieces: vec![(loc(R1, 5000), 14), (loc(R1, 5014), 14)],
            }]
        );

        // Overwriting across the boundary again replaces both pieces.
        f.insert(ext(300, 40, R2, 9000, 3));
        let stored = all(&f);
        assert_eq!(
            stored[29..33],
            [
                ext(290, 5, R0, 290, 1),
                ext(300, 20, R2, 9000, 3),
                ext(320, 20, R2, 9020, 3),
                ext(340, 5, R0, 340, 1),
            ]
        );
        assert_eq!(f.buffered_bytes(), 61 * 5 + 40);
        // Invalidating across the boundary trims both sides.
        assert_eq!(f.invalidate(310, 20), 20);
        let stored = all(&f);
        assert_eq!(
            stored[29..33],
            [
                ext(290, 5, R0, 290, 1),
                ext(300, 10, R2, 9000, 3),
                ext(330, 10, R2, 9030, 3),
                ext(340, 5, R0, 340, 1),
            ]
        );
    }

    #[test]
    fn extent_crossing_several_leaf_boundaries() {
        let mut f = comb(400);
        assert_eq!(leaves(&f).len(), 7);
        // An older record replayed over everything only fills the 400 gaps.
        // Each leaf gets 64 new entries at once, overfills to 128 and
        // splits.
        f.insert(ext(0, 4000, R1, 100_000, 0));
        f.check_invariants();
        assert_eq!(f.extent_count(), 800);
        assert_eq!(f.buffered_bytes(), 4000);
        assert_eq!(leaves(&f).len(), 13);
        for piece in f.lookup(0, 4000) {
            let Piece::Buffered {
                file_offset,
                location,
                seq,
                ..
            } = piece
            else {
                panic!("hole {piece:?}");
            };
            let base = if seq == 0 { 100_000 } else { 0 };
            assert_eq!(location.offset, base + file_offset, "{piece:?}");
        }
        // A newer record over almost everything: one entry per leaf.
        let touched = leaves(&f)
            .iter()
            .filter(|&&(lo, hi, _)| lo < 3993 && hi > 3)
            .count();
        assert_eq!(touched, 13);
        f.insert(ext(3, 3990, R2, 200_000, 5));
        f.check_invariants();
        let stored = all(&f);
        assert_eq!(stored.len(), touched + 3);
        assert_eq!(stored[0], ext(0, 3, R0, 0, 1));
        assert_eq!(
            stored[stored.len() - 2..],
            [ext(3993, 2, R0, 3993, 1), ext(3995, 5, R1, 103_995, 0)]
        );
        for e in &stored[1..stored.len() - 2] {
            assert_eq!(
                (e.seq, e.location),
                (5, loc(R2, 200_000 + e.file_offset - 3))
            );
        }
        let runs: Vec<(u64, u64, usize)> = f
            .flush_runs(Some(R2), u64::MAX)
            .map(|r| (r.file_offset, r.len, r.pieces.len()))
            .collect();
        assert_eq!(runs, vec![(3, 3990, touched)]);
        assert_eq!(f.buffered_bytes(), 4000);
        assert_eq!(f.invalidate(1, 3998), 3998);
        assert_eq!(
            all(&f),
            vec![ext(0, 1, R0, 0, 1), ext(3999, 1, R1, 103_999, 0)]
        );
        // Both survivors' leaves stay; the ones in between went.
        assert_eq!(leaves(&f).iter().map(|l| l.2).collect::<Vec<_>>(), [1, 1]);
    }

    #[test]
    fn leaf_overfilled_by_more_than_twice_splits_repeatedly() {
        // 64 newer one-byte extents with gaps around each: an older record
        // over all of them adds 65 gap entries to the one full leaf.
        let mut f = FileExtents::new();
        for i in 0..64 {
            f.insert(ext(i * 10 + 5, 1, R0, i, 9));
        }
        assert_eq!(leaves(&f), vec![(0, u64::MAX, 64)]);
        f.insert(ext(0, 700, R1, 1000, 1));
        f.check_invariants();
        assert_eq!(f.extent_count(), 129);
        assert_eq!(f.buffered_bytes(), 700);
        assert_eq!(
            leaves(&f).iter().map(|l| l.2).collect::<Vec<_>>(),
            [64, 32, 33]
        );
        assert_eq!(f.covered_bytes(0, 700), 700);
        assert_eq!(f.lookup(0, 700).count(), 129);
    }

    #[test]
    fn overlapping_insert_across_a_split_point() {
        // Records in random order so the leaf splits at its middle entry.
        let mut f = FileExtents::new();
        let mut order: Vec<u64> = (0..65).collect();
        let mut state = 3;
        for i in (1..order.len()).rev() {
            order.swap(i, (next_random(&mut state) % (i as u64 + 1)) as usize);
        }
        for &i in &order {
            f.insert(ext(i * 10, 5, R0, i * 10, 10 + i));
        }
        assert_eq!(leaves(&f), vec![(0, 320, 32), (320, u64::MAX, 33)]);
        // Seq 42 wins over the extents at 300, 310 (seq 40, 41) and 320
        // (seq 42: equal, the later insert wins) but not over 330 (seq 43).
        // The bytes it owns before 330 cross the boundary 320.
        f.insert(ext(298, 40, R1, 7000, 42));
        let stored = all(&f);
        assert_eq!(
            stored[29..35],
            [
                ext(290, 5, R0, 290, 39),
                ext(298, 22, R1, 7000, 42),
                ext(320, 10, R1, 7022, 42),
                ext(330, 5, R0, 330, 43),
                ext(335, 3, R1, 7037, 42),
                ext(340, 5, R0, 340, 44),
            ]
        );
        assert_eq!(leaves(&f), vec![(0, 320, 31), (320, u64::MAX, 34)]);
        assert_eq!(f.buffered_bytes(), 65 * 5 - 15 + 35);
        // An older record across the boundary fills only the gaps.
        f.insert(ext(280, 60, R2, 9000, 0));
        let stored = all(&f);
        assert_eq!(
            stored[28..36],
            [
                ext(280, 5, R0, 280, 38),
                ext(285, 5, R2, 9005, 0),
                ext(290, 5, R0, 290, 39),
                ext(295, 3, R2, 9015, 0),
                ext(298, 22, R1, 7000, 42),
                ext(320, 10, R1, 7022, 42),
                ext(330, 5, R0, 330, 43),
                ext(335, 3, R1, 7037, 42),
            ]
        );
        f.check_invariants();
    }

    #[test]
    fn emptied_middle_leaf_is_removed() {
        let mut f = comb(200);
        assert_eq!(leaves(&f)[1], (640, 1280, 64));
        // Invalidate exactly the second leaf's range.
        assert_eq!(f.invalidate(640, 640), 320);
        assert_eq!(
            leaves(&f),
            vec![(0, 1280, 64), (1280, 1920, 64), (1920, u64::MAX, 8)]
        );
        // Writes there now go to the first leaf (which, full, splits).
        f.insert(ext(700, 100, R1, 0, 2));
        assert_eq!(
            leaves(&f),
            vec![
                (0, 700, 64),
                (700, 1280, 1),
                (1280, 1920, 64),
                (1920, u64::MAX, 8)
            ]
        );
        f.check_invariants();
        assert_eq!(f.covered_bytes(600, 800), 4 * 5 + 100 + 12 * 5);

        // A middle leaf emptied by remove_region goes too.
        let mut g = FileExtents::new();
        for i in 0..200 {
            let region = if (64..128).contains(&i) { R1 } else { R0 };
            g.insert(ext(i * 10, 5, region, i * 10, 1));
        }
        assert_eq!(leaves(&g).len(), 4);
        assert_eq!(g.remove_region(R1), 320);
        assert_eq!(
            leaves(&g),
            vec![(0, 1280, 64), (1280, 1920, 64), (1920, u64::MAX, 8)]
        );

        // The first leaf stays, even empty, while later leaves have entries.
        let mut h = comb(200);
        assert_eq!(h.invalidate(0, 640), 320);
        assert_eq!(leaves(&h)[0], (0, 640, 0));
        h.check_invariants();
        let pieces: Vec<Piece> = h.lookup(0, 650).collect();
        assert_eq!(
            pieces,
            vec![hole(0, 640), buffered(640, 5, R0, 640, 1), hole(645, 5)]
        );
        assert_eq!(all(&h).len(), 136);
        // ...and everything goes when the file empties.
        assert_eq!(h.truncate(0), 136 * 5);
        assert!(h.top.is_empty());
        assert!(h.is_empty());
    }

    #[test]
    fn remove_region_merges_sparse_leaves() {
        let mut f = FileExtents::new();
        let regions = [R0, R1, R2, RegionId(3)];
        for i in 0..640u64 {
            f.insert(ext(i * 10, 5, regions[(i % 4) as usize], i * 10, 1));
        }
        assert_eq!(leaves(&f).len(), 10);
        for region in &regions[..3] {
            f.remove_region(*region);
        }
        f.check_invariants();
        assert_eq!(f.extent_count(), 160);
        // 16 entries per old leaf; merged up to MERGE_LIMIT (48) each.
        assert_eq!(
            leaves(&f).iter().map(|l| l.2).collect::<Vec<_>>(),
            vec![48, 48, 48, 16]
        );
        assert!(all(&f).iter().all(|e| e.location.region == RegionId(3)));
    }

    #[test]
    fn extent_ending_at_u64_max() {
        let mut f = comb(100);
        let top = u64::MAX - 100;
        for i in 0..70 {
            f.insert(ext(top + i, 1, R1, 1000 + i, 2));
        }
        // Clipped at u64::MAX, and it ends the last leaf exactly.
        f.insert(ext(u64::MAX - 30, 100, R2, 5000, 3));
        f.check_invariants();
        let stored = all(&f);
        assert_eq!(stored.last(), Some(&ext(u64::MAX - 30, 30, R2, 5000, 3)));
        let last_leaf = *leaves(&f).last().unwrap();
        assert_eq!(last_leaf.1, u64::MAX);
        assert!(last_leaf.0 > 1000, "{:?}", leaves(&f));
        assert_eq!(f.covered_bytes(top, u64::MAX), 100);
        let pieces: Vec<Piece> = f.lookup(u64::MAX - 31, 1000).collect();
        assert_eq!(
            pieces,
            vec![
                buffered(u64::MAX - 31, 1, R1, 1069, 2),
                buffered(u64::MAX - 30, 30, R2, 5000, 3)
            ]
        );
        // Trim its tail, then punch a hole, then truncate into it.
        assert_eq!(f.invalidate(u64::MAX - 5, 5), 5);
        assert_eq!(f.invalidate(u64::MAX - 20, 5), 5);
        assert_eq!(f.truncate(u64::MAX - 10), 5);
        let stored = all(&f);
        assert_eq!(
            stored[stored.len() - 2..],
            [
                ext(u64::MAX - 30, 10, R2, 5000, 3),
                ext(u64::MAX - 15, 5, R2, 5015, 3),
            ]
        );
        // A truncate in an earlier leaf drops the later leaves whole.
        assert_eq!(f.truncate(500), 50 * 5 + 70 + 15);
        assert_eq!(leaves(&f), vec![(0, u64::MAX, 50)]);
        assert_eq!(f.buffered_bytes(), 50 * 5);
    }

    /// What backs one file byte: (seq, region, log byte).
    type ModelByte = Option<(u64, RegionId, u64)>;

    /// Checks `f` byte by byte against `model` (file bytes `0..model.len()`,
    /// nothing beyond) and checks its invariants and flush runs.
    fn check_model(f: &FileExtents, model: &[ModelByte]) {
        f.check_invariants();
        let mut got = Vec::with_capacity(model.len());
        for piece in f.lookup(0, model.len() as u64) {
            match piece {
                Piece::Buffered {
                    len, location, seq, ..
                } => {
                    got.extend((0..len).map(|i| Some((seq, location.region, location.offset + i))))
                }
                Piece::Hole { len, .. } => got.extend((0..len).map(|_| None)),
            }
        }
        assert_eq!(got.len(), model.len());
        if let Some(i) = (0..model.len()).find(|&i| got[i] != model[i]) {
            panic!("byte {i}: index {:?}, model {:?}", got[i], model[i]);
        }
        let buffered = model.iter().filter(|b| b.is_some()).count() as u64;
        assert_eq!(f.buffered_bytes(), buffered);
        assert_eq!(f.covered_bytes(0, u64::MAX), buffered);
        let mut flushed = 0;
        for run in f.flush_runs(None, 4096) {
            let mut at = run.file_offset;
            for (location, len) in run.pieces {
                assert_eq!(
                    model[at as usize].map(|b| (b.1, b.2)),
                    Some((location.region, location.offset))
                );
                at += u64::from(len);
            }
            assert_eq!(at, run.file_offset + run.len);
            flushed += run.len;
        }
        assert_eq!(flushed, buffered);
    }

    /// Random operations on a file of `size` bytes with many leaves,
    /// checked against a byte model.
    fn random_operations(
        seed: u64,
        size: u64,
        operations: usize,
        max_len: u64,
        check_every: usize,
    ) {
        let mut state = seed;
        let mut f = FileExtents::new();
        let mut model: Vec<ModelByte> = vec![None; size as usize];
        let mut max_leaves = 0;
        for step in 0..operations as u64 {
            let offset = next_random(&mut state) % size;
            let len = 1 + next_random(&mut state) % max_len;
            let len = len.min(size - offset);
            match next_random(&mut state) % 100 {
                0..=88 => {
                    // Mostly increasing seqs, some replays of older ones.
                    let seq = if next_random(&mut state).is_multiple_of(4) {
                        next_random(&mut state) % (step + 1)
                    } else {
                        step
                    };
                    let region = RegionId((next_random(&mut state) % 4) as u32);
                    let log = step << 20;
                    f.insert(ext(offset, len as u32, region, log, seq));
                    for i in 0..len {
                        let byte = &mut model[(offset + i) as usize];
                        if byte.is_none_or(|(old, _, _)| old <= seq) {
                            *byte = Some((seq, region, log + i));
                        }
                    }
                }
                89..=98 => {
                    let len = if next_random(&mut state).is_multiple_of(64) {
                        u64::MAX
                    } else {
                        len
                    };
                    let removed = f.invalidate(offset, len);
                    let end = offset.saturating_add(len).min(size);
                    let expected = model[offset as usize..end as usize]
                        .iter_mut()
                        .filter_map(Option::take)
                        .count() as u64;
                    assert_eq!(removed, expected);
                }
                _ => {
                    let region = RegionId((next_random(&mut state) % 4) as u32);
                    let removed = f.remove_region(region);
                    let expected = model
                        .iter_mut()
                        .filter(|b| b.is_some_and(|(_, r, _)| r == region))
                        .map(|b| *b = None)
                        .count() as u64;
                    assert_eq!(removed, expected);
                }
            }
            max_leaves = max_leaves.max(f.top.len());
            if (step as usize).is_multiple_of(check_every) {
                check_model(&f, &model);
            }
        }
        check_model(&f, &model);
        assert!(max_leaves >= 10, "only {max_leaves} leaves: test too small");
    }

    #[test]
    fn random_operations_across_many_leaves_match_a_byte_model() {
        random_operations(1, 40_000, 6_000, 12, 10);
        random_operations(2, 1 << 18, 4_000, 300, 50);
    }

    #[test]
    fn ten_thousand_random_extents_keep_invariants() {
        let mut state = 42;
        let mut f = FileExtents::new();
        for seq in 0..10_000 {
            let offset = next_random(&mut state) % (1 << 30);
            let len = 1 + (next_random(&mut state) % (1 << 16)) as u32;
            f.insert(ext(offset, len, R0, seq << 20, seq));
            if seq % 1000 == 0 {
                f.check_invariants();
            }
        }
        f.check_invariants();
        let layout = leaves(&f);
        assert!(layout.len() > 100, "{} leaves", layout.len());
        assert_eq!(f.extents().len(), f.extent_count());
        assert_eq!(
            f.extents().map(|e| u64::from(e.len)).sum::<u64>(),
            f.buffered_bytes()
        );
    }
}
