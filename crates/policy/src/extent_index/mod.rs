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
//! Modules: `file` (one file's extents), `leaf` (its leaves), `iter` (the
//! iterators), `tests`.
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

mod file;
mod iter;
mod leaf;

use file::*;
pub use iter::*;
use leaf::*;

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

    /// Whether a clean record with `bound` over `range` covers this extent
    /// ([`FileExtents::clean`]): written before the bound, and wholly
    /// inside the range.
    pub fn cleaned_by(&self, bound: u64, range: &core::ops::Range<u64>) -> bool {
        cleaned(self.file_offset, self.len, self.seq, bound, range)
    }
}

/// [`Extent::cleaned_by`], for the extent of `len` bytes at `offset` with
/// sequence number `seq`.
fn cleaned(offset: u64, len: u32, seq: u64, bound: u64, range: &core::ops::Range<u64>) -> bool {
    seq < bound && offset >= range.start && offset.saturating_add(u64::from(len)) <= range.end
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

// `Leaf::reserve` grows from 4 slots, and `Leaf::split` needs 2 entries.
const _: () = assert!(LEAF_CAPACITY >= 3);

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

    /// Drops `file`'s extents in `range` written before sequence number
    /// `bound` (a clean record: they are on the capacity tier); the file is
    /// forgotten when nothing is left. Returns the bytes dropped. See
    /// [`FileExtents::clean`].
    pub fn clean(&mut self, file: FileId, bound: u64, range: core::ops::Range<u64>) -> u64 {
        self.update(file, false, |extents| extents.clean(bound, range))
            .unwrap_or(0)
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
mod tests;
