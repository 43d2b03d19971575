//! The leaves of a file's extent map: sorted runs of at most
//! `LEAF_CAPACITY` entries, their search, splits and merges, and the
//! running totals.

use super::*;

/// Most entries a leaf holds between operations. An operation that leaves
/// more in a leaf splits it. 64 entries (2 KiB) balance the search and the
/// `Vec` shift inside a leaf against the depth of the top-level B-tree: on
/// the hot-path benchmark (65,536 random extents) 32, 48, 96 and 128 were
/// all 1–5 ns per insert slower, and larger leaves save little memory
/// (about 51, 49 and 47 bytes per extent for 32, 64 and 128).
pub(super) const LEAF_CAPACITY: usize = 64;

/// [`FileExtents::remove_region`] merges a leaf into its predecessor when
/// both together hold at most this many entries, so that leaves thinned out
/// by flushing do not keep their capacity; below `LEAF_CAPACITY` so that the
/// merged leaf does not split again at the next insert.
pub(super) const MERGE_LIMIT: usize = LEAF_CAPACITY * 3 / 4;

/// Replacement entries an overlapping insert builds on the stack before it
/// needs a heap buffer (enough for up to 3 overlapped entries).
pub(super) const INLINE_REPLACEMENT: usize = 8;

/// Number of stored extents and sum of their lengths.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Totals {
    pub(super) count: usize,
    pub(super) bytes: u64,
}

impl Totals {
    pub(super) fn add(&mut self, stored: &Stored) {
        self.count += 1;
        self.bytes += u64::from(stored.len);
    }

    pub(super) fn sub(&mut self, stored: &Stored) {
        self.count -= 1;
        self.bytes -= u64::from(stored.len);
    }
}

/// A run of the key space with the extents stored in it. Its `lo` is the
/// key under which [`FileExtents::top`] holds it.
#[derive(Clone, Debug)]
pub(super) struct Leaf {
    /// One past the last file offset the leaf covers; `u64::MAX` for the
    /// last leaf.
    pub(super) hi: u64,
    /// `(file offset, extent)` sorted by offset; the extents do not overlap
    /// and lie inside `[lo, hi)`.
    pub(super) entries: Vec<(u64, Stored)>,
}

impl Leaf {
    pub(super) fn new(hi: u64) -> Leaf {
        Leaf {
            hi,
            entries: Vec::new(),
        }
    }

    /// Index of the first entry ending after `offset`. Entries are sorted
    /// and do not overlap, so their ends are sorted too.
    pub(super) fn first_ending_after(&self, offset: u64) -> usize {
        wide_partition_point(&self.entries, |&(start, stored)| {
            stored.end(start) <= offset
        })
    }

    /// Makes room for `additional` more entries. Grows by doubling from 4
    /// like `Vec`, but not past `LEAF_CAPACITY + 1` unless more is needed:
    /// `Vec`'s own doubling would turn a full leaf of 64 into 128 slots just
    /// before splitting it.
    pub(super) fn reserve(&mut self, additional: usize) {
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
    pub(super) fn insert(&mut self, start: u64, new: Stored, totals: &mut Totals) -> usize {
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
    pub(super) fn replace(
        &mut self,
        first: usize,
        last: usize,
        with: &[(u64, Stored)],
        totals: &mut Totals,
    ) {
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
    pub(super) fn remove_range(&mut self, from: u64, to: u64, totals: &mut Totals) {
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
    pub(super) fn split(&mut self, placed: Option<usize>) -> (u64, Leaf) {
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
pub(super) const SEARCH_FANOUT: usize = 8;

/// `slice.partition_point(pred)`, cutting the range into 8 parts per round
/// instead of 2. The 7 probes of a round do not depend on each other, so
/// their cache misses overlap: a leaf that is not in cache (the usual case
/// for random writes into a large index) costs two rounds of misses
/// (64 → 8 → counted) instead of six dependent ones. Measured about 10 ns
/// faster per insert than `partition_point` at 65,536 extents.
pub(super) fn wide_partition_point<T>(slice: &[T], pred: impl Fn(&T) -> bool) -> usize {
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
pub(super) fn resolve(
    old: &[(u64, Stored)],
    start: u64,
    new: Stored,
    mut emit: impl FnMut((u64, Stored)),
) {
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
pub(super) fn split_overfull(top: &mut BTreeMap<u64, Leaf>, lo: u64) {
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
pub(super) fn add_split_off(
    top: &mut BTreeMap<u64, Leaf>,
    lo: u64,
    lower_len: usize,
    mid: u64,
    upper: Leaf,
) {
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
pub(super) fn remove_empty_leaf(top: &mut BTreeMap<u64, Leaf>, lo: u64) {
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
