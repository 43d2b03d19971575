//! The iterators over an index: entries, extents, a range lookup
//! (buffered pieces and holes), and the flush runs of a region set.

use super::*;

/// The stored entries of a file in order, leaf after leaf.
#[derive(Clone, Debug)]
pub(super) struct Entries<'a> {
    /// The leaves after the current one.
    pub(super) leaves: btree_map::Range<'a, u64, Leaf>,
    /// What is left of the current leaf.
    pub(super) current: core::slice::Iter<'a, (u64, Stored)>,
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
    pub(super) entries: Entries<'a>,
    /// Entries not yielded yet.
    pub(super) remaining: usize,
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
    pub(super) entries: Entries<'a>,
    /// Everything before `cursor` has been yielded (or is `queued`).
    pub(super) cursor: u64,
    pub(super) end: u64,
    /// A buffered piece that follows the hole just yielded.
    pub(super) queued: Option<Piece>,
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
    pub(super) entries: Entries<'a>,
    pub(super) regions: RegionFilter<'a>,
    pub(super) max_run_bytes: u64,
    /// The extent that did not fit into the previous run.
    pub(super) peeked: Option<(u64, Stored)>,
    /// Bridge gaps that extents of other regions fill exactly
    /// ([`FileExtents::flush_runs_filled`]).
    pub(super) fill_gaps: bool,
}

impl FlushRuns<'_> {
    /// Grow the run `[file_offset, file_offset + len)` with the extents
    /// that follow it contiguously within `max_run_bytes`: those of the
    /// filter's regions, and, with `fill_gaps`, those of other regions
    /// when an extent of the filter's regions follows them contiguously
    /// (the gap they fill). Extents of other regions at the run's end are
    /// left out; anything else ends the run. (Without `fill_gaps` an
    /// extent of another region right after the run ends it too: the
    /// filter's next extent cannot be contiguous past it.)
    fn extend(&mut self, file_offset: u64, len: &mut u64, pieces: &mut Vec<(LogLocation, u32)>) {
        let mut gap: Vec<(LogLocation, u32)> = Vec::new();
        let mut gap_len = 0u64;
        for (start, stored) in self.entries.by_ref() {
            let end = file_offset.saturating_add(*len).saturating_add(gap_len);
            let grown = len
                .saturating_add(gap_len)
                .saturating_add(u64::from(stored.len));
            let fits = start == end && grown <= self.max_run_bytes;
            if self.regions.contains(stored.region) {
                if !fits {
                    self.peeked = Some((start, stored));
                    return;
                }
                pieces.append(&mut gap);
                pieces.push((stored.location(), stored.len));
                *len = grown;
                gap_len = 0;
            } else if fits && self.fill_gaps {
                gap.push((stored.location(), stored.len));
                gap_len += u64::from(stored.len);
            } else {
                // A hole, too long, or not to be bridged: the run ends
                // before this extent, which is not the filter's, so the
                // next run starts after it.
                return;
            }
        }
    }

    /// The next stored extent passing the region filter.
    pub(super) fn next_matching(&mut self) -> Option<(u64, Stored)> {
        let regions = self.regions;
        self.entries
            .by_ref()
            .find(|(_, stored)| regions.contains(stored.region))
    }
}

/// Which regions' extents a [`FlushRuns`] takes.
#[derive(Clone, Copy, Debug)]
pub(super) enum RegionFilter<'a> {
    All,
    One(RegionId),
    /// Sorted.
    Sorted(&'a [RegionId]),
}

impl RegionFilter<'_> {
    pub(super) fn contains(self, region: RegionId) -> bool {
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
        self.extend(file_offset, &mut len, &mut pieces);
        Some(FlushRun {
            file_offset,
            len,
            pieces,
        })
    }
}

impl FusedIterator for FlushRuns<'_> {}
