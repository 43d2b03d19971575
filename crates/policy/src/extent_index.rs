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
//! `seq`; recovery may replay records in any order and still rebuilds the
//! same index.
//!
//! INVARIANTS (checked by [`FileExtents::check_invariants`] and
//! [`ExtentIndex::check_invariants`]):
//! - stored extents of one file never overlap and none has length 0;
//! - no stored extent reaches past `u64::MAX` (its end is representable);
//! - adjacent extents are *not* merged: they may come from different records
//!   or regions, and each maps to one contiguous run of log bytes;
//! - every count and byte total equals the sum over the stored extents, and
//!   [`ExtentIndex`] holds no file without extents. The totals are kept up to
//!   date incrementally, never recomputed.
//!
//! Memory: one extent costs one B-tree entry (an 8-byte key and a 24-byte
//! value) plus node overhead, about [`ESTIMATED_BYTES_PER_EXTENT`] bytes,
//! inside the paper's 24–56 bytes per request.

use alloc::collections::btree_map::{self, BTreeMap};
use alloc::vec::Vec;
use core::iter::FusedIterator;
use core::mem::size_of;

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

/// The map value of one stored extent; the file offset is the map key.
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
    /// One past the last file byte, given the map key `start`.
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

/// Estimated heap bytes per stored extent in `std`'s `BTreeMap`.
///
/// Arithmetic (std's B-tree with `B = 6`):
/// - a leaf node holds up to 11 keys and 11 values plus a parent pointer and
///   two `u16`s: `8 + 2 + 2 + 11 × (8 + 24) = 364`, padded to 368 bytes;
/// - an internal node adds 12 child pointers: `368 + 96 = 464` bytes;
/// - with about 8 children per internal node, one node in 8 is internal, so
///   the average node is `(7 × 368 + 464) / 8 = 380` bytes;
/// - nodes are about 2/3 full (random inserts split full nodes in half), so
///   a node holds `11 × 2/3 ≈ 7.3` entries: `380 × 3 / 22 ≈ 51` bytes.
///
/// This counts requested bytes; the allocator's own per-block overhead comes
/// on top. Sequential appends leave nodes only about half full, so expect up
/// to about 65 bytes in that pattern.
pub const ESTIMATED_BYTES_PER_EXTENT: usize = {
    const CAPACITY: usize = 11;
    const PTR: usize = size_of::<usize>();
    let entry = size_of::<u64>() + size_of::<Stored>();
    let leaf = (PTR + 2 + 2 + CAPACITY * entry).div_ceil(PTR) * PTR;
    let internal = leaf + (CAPACITY + 1) * PTR;
    let avg_node = (7 * leaf + internal) / 8;
    avg_node * 3 / (2 * CAPACITY)
};

/// Estimated heap bytes per file with buffered extents: one entry of the
/// outer `FileId → FileExtents` B-tree, same arithmetic as
/// [`ESTIMATED_BYTES_PER_EXTENT`] with a `size_of::<FileId>()` key and a
/// `size_of::<FileExtents>()` value.
pub const ESTIMATED_BYTES_PER_FILE: usize = {
    const CAPACITY: usize = 11;
    const PTR: usize = size_of::<usize>();
    let entry = size_of::<FileId>() + size_of::<FileExtents>();
    let leaf = (PTR + 2 + 2 + CAPACITY * entry).div_ceil(PTR) * PTR;
    let internal = leaf + (CAPACITY + 1) * PTR;
    let avg_node = (7 * leaf + internal) / 8;
    avg_node * 3 / (2 * CAPACITY)
};

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
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FileExtents {
    /// File offset → the extent starting there.
    map: BTreeMap<u64, Stored>,
    /// Sum of the stored lengths.
    bytes: u64,
}

/// An empty index, so that index-level queries on a file without extents can
/// borrow something.
static EMPTY_FILE: FileExtents = FileExtents::new();

impl FileExtents {
    /// An empty index.
    pub const fn new() -> FileExtents {
        FileExtents {
            map: BTreeMap::new(),
            bytes: 0,
        }
    }

    /// `true` when nothing of the file is buffered.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Number of stored extents.
    pub fn extent_count(&self) -> usize {
        self.map.len()
    }

    /// Number of buffered bytes (sum of the stored extent lengths).
    pub fn buffered_bytes(&self) -> u64 {
        self.bytes
    }

    /// The stored extents in file order.
    pub fn extents(&self) -> Extents<'_> {
        Extents {
            iter: self.map.iter(),
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
    /// empty extent changes nothing.
    ///
    /// Cost: O((k + 1) log n) for k overlapped extents.
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

        // [start, cursor) is resolved. The new extent owns [fill_from, cursor):
        // it has not been stored yet so that the run it owns between two
        // newer extents becomes one entry, not one per replaced piece.
        let mut cursor = start;
        let mut fill_from = start;

        // Only one stored extent can start before `start` and reach into the
        // range (stored extents do not overlap).
        if let Some((&old_start, old)) = self.map.range_mut(..start).next_back() {
            let old_end = old.end(old_start);
            if old_end > start {
                if old.seq > new.seq {
                    cursor = old_end.min(end);
                    fill_from = cursor;
                } else {
                    let whole = *old;
                    // Keep the head [old_start, start); a new tail follows.
                    old.len = whole.slice(0, start - old_start).len;
                    self.bytes -= old_end - start;
                    if old_end > end {
                        self.put(end, whole.slice(end - old_start, old_end - end));
                    }
                }
            }
        }

        // The remaining overlapped extents start inside [cursor, end). Each
        // pass re-queries the map, which is cheap and lets us mutate it.
        while let Some((&old_start, &old)) = self.map.range(cursor..end).next() {
            let old_end = old.end(old_start);
            if old.seq > new.seq {
                if fill_from < old_start {
                    self.put(
                        fill_from,
                        new.slice(fill_from - start, old_start - fill_from),
                    );
                }
                cursor = old_end.min(end);
                fill_from = cursor;
            } else {
                self.take(old_start);
                if old_end > end {
                    self.put(end, old.slice(end - old_start, old_end - end));
                }
                cursor = old_end.min(end);
            }
        }
        if fill_from < end {
            self.put(fill_from, new.slice(fill_from - start, end - fill_from));
        }
    }

    /// Describes `[offset, offset + len)` (clipped at `u64::MAX`) as pieces
    /// in file order: buffered pieces clipped to the range and holes between
    /// them. The pieces cover the range exactly; adjacent buffered pieces are
    /// not merged. Does not allocate.
    pub fn lookup(&self, offset: u64, len: u64) -> Lookup<'_> {
        let end = offset.saturating_add(len);
        // An empty range must yield nothing, not an empty straddling piece.
        let straddling = self
            .map
            .range(..offset)
            .next_back()
            .filter(|(&start, stored)| offset < end && stored.end(start) > offset)
            .map(|(&start, &stored)| (start, stored));
        Lookup {
            straddling,
            range: self.map.range(offset..end),
            cursor: offset,
            end,
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
        if offset >= end {
            return 0;
        }
        let before = self.bytes;

        if let Some((&old_start, old)) = self.map.range_mut(..offset).next_back() {
            let old_end = old.end(old_start);
            if old_end > offset {
                let whole = *old;
                old.len = whole.slice(0, offset - old_start).len;
                self.bytes -= old_end - offset;
                if old_end > end {
                    self.put(end, whole.slice(end - old_start, old_end - end));
                }
            }
        }

        if end == u64::MAX {
            // Truncate: every extent starting at or after `offset` ends by
            // u64::MAX, so all of them go; split_off avoids k searches.
            let gone = self.map.split_off(&offset);
            self.bytes -= gone.values().map(|s| u64::from(s.len)).sum::<u64>();
        } else {
            while let Some((&old_start, &old)) = self.map.range(offset..end).next() {
                self.take(old_start);
                let old_end = old.end(old_start);
                if old_end > end {
                    self.put(end, old.slice(end - old_start, old_end - end));
                }
            }
        }
        before - self.bytes
    }

    /// Forgets every buffered byte at or after `new_size` (truncate); returns
    /// the number of bytes forgotten.
    pub fn truncate(&mut self, new_size: u64) -> u64 {
        self.invalidate(new_size, u64::MAX - new_size)
    }

    /// Drops every extent stored in `region` (after the region was flushed
    /// or discarded); returns the number of bytes dropped. O(n).
    pub fn remove_region(&mut self, region: RegionId) -> u64 {
        let mut removed = 0;
        self.map.retain(|_, stored| {
            if stored.region == region {
                removed += u64::from(stored.len);
                false
            } else {
                true
            }
        });
        self.bytes -= removed;
        removed
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
            iter: self.map.iter(),
            region,
            max_run_bytes,
            peeked: None,
        }
    }

    /// Asserts the module invariants in debug builds (no-op in release).
    /// O(n): meant for tests and debugging, not for every mutation.
    pub fn check_invariants(&self) {
        let mut prev_end = 0u64;
        let mut bytes = 0u64;
        for (&start, stored) in &self.map {
            debug_assert!(stored.len > 0, "empty extent at {start}");
            debug_assert!(
                start.checked_add(u64::from(stored.len)).is_some(),
                "extent at {start} ends past u64::MAX"
            );
            debug_assert!(
                start >= prev_end,
                "extent at {start} overlaps its predecessor"
            );
            prev_end = stored.end(start);
            bytes += u64::from(stored.len);
        }
        debug_assert_eq!(bytes, self.bytes, "byte total out of date");
    }

    /// Stores an extent at a free key and counts its bytes.
    fn put(&mut self, start: u64, stored: Stored) {
        debug_assert!(stored.len > 0);
        let previous = self.map.insert(start, stored);
        debug_assert!(previous.is_none(), "key {start} already stored");
        self.bytes += u64::from(stored.len);
    }

    /// Removes a stored extent and uncounts its bytes.
    fn take(&mut self, start: u64) {
        let removed = self.map.remove(&start);
        debug_assert!(removed.is_some(), "no extent at {start}");
        if let Some(stored) = removed {
            self.bytes -= u64::from(stored.len);
        }
    }
}

/// Iterator over a file's stored extents in file order; see
/// [`FileExtents::extents`].
#[derive(Clone, Debug)]
pub struct Extents<'a> {
    iter: btree_map::Iter<'a, u64, Stored>,
}

impl Iterator for Extents<'_> {
    type Item = Extent;

    fn next(&mut self) -> Option<Extent> {
        self.iter.next().map(|(&file_offset, stored)| Extent {
            file_offset,
            len: stored.len,
            location: stored.location(),
            seq: stored.seq,
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.iter.size_hint()
    }
}

impl ExactSizeIterator for Extents<'_> {}
impl FusedIterator for Extents<'_> {}

/// Iterator over the pieces of a range; see [`FileExtents::lookup`].
#[derive(Clone, Debug)]
pub struct Lookup<'a> {
    /// The extent starting before the range that reaches into it, if any.
    straddling: Option<(u64, Stored)>,
    /// Extents starting inside the range.
    range: btree_map::Range<'a, u64, Stored>,
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
        let Some((start, stored)) = self
            .straddling
            .take()
            .or_else(|| self.range.next().map(|(&start, &stored)| (start, stored)))
        else {
            if self.cursor >= self.end {
                return None;
            }
            let hole = Piece::Hole {
                file_offset: self.cursor,
                len: self.end - self.cursor,
            };
            self.cursor = self.end;
            return Some(hole);
        };
        // Clip to the range: only the straddling extent starts before it,
        // and any extent may end after it.
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
    iter: btree_map::Iter<'a, u64, Stored>,
    region: Option<RegionId>,
    max_run_bytes: u64,
    /// The extent that did not fit into the previous run.
    peeked: Option<(u64, Stored)>,
}

impl FlushRuns<'_> {
    /// The next stored extent passing the region filter.
    fn next_matching(&mut self) -> Option<(u64, Stored)> {
        let region = self.region;
        self.iter
            .by_ref()
            .find(|(_, stored)| region.is_none_or(|r| stored.region == r))
            .map(|(&start, &stored)| (start, stored))
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
}
