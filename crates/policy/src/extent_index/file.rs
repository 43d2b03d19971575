//! One file's extents: a B-tree of leaves keyed by their first offset,
//! with insert (overlaps replaced), truncate, region removal and lookup.

use super::*;

/// The extent index of one file. See the [module docs](self).
#[derive(Clone, Debug, Default)]
pub struct FileExtents {
    /// Leaf `lo` → the leaf covering `[lo, leaf.hi)`. Empty exactly when the
    /// file has no extents.
    pub(super) top: BTreeMap<u64, Leaf>,
    /// Number of stored extents and sum of their lengths.
    pub(super) totals: Totals,
}

/// An empty index, so that index-level queries on a file without extents can
/// borrow something.
pub(super) static EMPTY_FILE: FileExtents = FileExtents::new();

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

    /// Stretches of file-contiguous buffered bytes (extents that touch
    /// count as one), `[start, end)` in file order: their number is how
    /// many separate writes, at the least, put these bytes on the capacity
    /// tier. O(n).
    pub fn stretches(&self) -> impl Iterator<Item = core::ops::Range<u64>> + '_ {
        let mut extents = self.extents().peekable();
        core::iter::from_fn(move || {
            let first = extents.next()?;
            let mut end = first.end();
            while let Some(next) = extents.next_if(|e| e.file_offset == end) {
                end = next.end();
            }
            Some(first.file_offset..end)
        })
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
    pub fn remove_region(&mut self, region: RegionId) -> u64 {
        self.retain(|_, stored| stored.region != region)
    }

    /// Drops every extent inside `range` whose sequence number is below
    /// `bound`: the bytes of the records written before it, which a
    /// write-back put on the capacity tier (a clean record); newer bytes,
    /// and bytes outside the range, stay. An extent only partly inside
    /// stays whole (a write-back covers whole stretches). Returns the
    /// number of bytes dropped. O(n).
    pub fn clean(&mut self, bound: u64, range: core::ops::Range<u64>) -> u64 {
        self.retain(|offset, stored| !super::cleaned(offset, stored.len, stored.seq, bound, &range))
    }

    /// Keeps the extents `keep` holds for; returns the bytes dropped. O(n).
    ///
    /// Leaves left empty are removed, and a leaf is merged into its
    /// predecessor when both together hold at most `MERGE_LIMIT` entries.
    fn retain(&mut self, keep: impl Fn(u64, &Stored) -> bool) -> u64 {
        let FileExtents { top, totals } = self;
        let before = totals.bytes;
        let mut merged = false;
        // The last leaf kept so far.
        let mut previous: Option<&mut Leaf> = None;
        for leaf in top.values_mut() {
            leaf.entries.retain(|(offset, stored)| {
                let kept = keep(*offset, stored);
                if !kept {
                    totals.sub(stored);
                }
                kept
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
            fill_gaps: false,
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
            fill_gaps: false,
        }
    }

    /// [`FileExtents::flush_runs_in`], and a gap between two extents of
    /// `regions` that extents of other regions fill exactly (buffered
    /// bytes, no hole) joins the run too, within `max_run_bytes`: the
    /// run's range then spans it, and a flusher that writes every bytes
    /// buffered in the range (the newest, wherever they are) makes one
    /// write where the extents of `regions` alone would make one per
    /// piece, each a seek (issue 32: ior-hard's eight ranks each run a
    /// little ahead of the others, so the end of a full region's bytes
    /// alternates, record by record, with bytes already in the next
    /// region). The bytes of the gap are written again when their own
    /// region flushes.
    pub fn flush_runs_filled<'a>(
        &'a self,
        regions: &'a [RegionId],
        max_run_bytes: u64,
    ) -> FlushRuns<'a> {
        FlushRuns {
            fill_gaps: true,
            ..self.flush_runs_in(regions, max_run_bytes)
        }
    }

    /// [`FileExtents::flush_runs_filled`] from the extent holding or
    /// following `offset` on: the runs of one stretch of the file formed
    /// again, later, when newer bytes may have filled more of its gaps.
    ///
    /// # Panics
    /// If `max_run_bytes` is 0.
    pub fn flush_runs_filled_from<'a>(
        &'a self,
        regions: &'a [RegionId],
        max_run_bytes: u64,
        offset: u64,
    ) -> FlushRuns<'a> {
        FlushRuns {
            entries: self.entries_from(offset),
            ..self.flush_runs_filled(regions, max_run_bytes)
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
    pub(super) fn entries_from(&self, offset: u64) -> Entries<'_> {
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
