//! The stash: what direct reads of a ghost segment's head (or, with lifted
//! bodies, of all of it) returned,
//! kept so that the load that follows when the segment turns out to be
//! wanted does not read the head from the disk a second time (docs/liu.md,
//! "The learning pass").
//!
//! A pass that learns a segment reads it directly (it is a ghost) until
//! its requested fraction reaches `lift_locality`; the next access loads
//! it. The body below what was already read is left absent (loaded when a
//! reader needs it), but the head must be loaded whole because an eviction
//! lifts it. Direct reads that fall in a ghost's head copy their bytes
//! here; a load finds the head complete and takes it instead of reading
//! it. With lifted bodies on (docs/liu.md, "Whole segments") the whole
//! segment is kept so: the load takes every part the direct reads covered
//! (the head and the runs left absent), so the segment is whole in DRAM at
//! its eviction and its body is lifted with its head, without a second
//! read from the disk.
//!
//! Bounded: at most `capacity` entries, the least recently stored dropped
//! first. Coherent: every write, truncation and removal of a file drops its
//! entries and bumps [`Stash::epoch`]; a direct read stores its bytes only
//! if the epoch is the one it read under, so bytes read before a write
//! never land after it.

use std::collections::HashMap;
use std::sync::Arc;

use sluice_policy::segments::SegmentKey;
use sluice_policy::FileId;

/// Heads (or whole segments) assembled from direct reads; see the module
/// docs.
#[derive(Debug)]
pub(super) struct Stash {
    capacity: usize,
    entries: HashMap<SegmentKey, Partial>,
    epoch: u64,
    tick: u64,
}

#[derive(Debug)]
struct Partial {
    bytes: Vec<u8>,
    /// Byte ranges filled, sorted and merged.
    filled: Vec<(u64, u64)>,
    /// Last store, for dropping the oldest.
    stored: u64,
}

impl Stash {
    /// A stash of at most `capacity` entries (0: stores nothing).
    pub(super) fn new(capacity: usize) -> Stash {
        Stash {
            capacity,
            entries: HashMap::new(),
            epoch: 0,
            tick: 0,
        }
    }

    /// Bumped by every change of the capacity tier's bytes.
    pub(super) fn epoch(&self) -> u64 {
        self.epoch
    }

    /// `bytes`, read directly at `offset` of the segment `key` under
    /// `epoch`, whose head is `head_len` bytes: keep the part inside the
    /// head, unless a change happened since the read started.
    pub(super) fn store(
        &mut self,
        key: SegmentKey,
        head_len: u64,
        offset: u64,
        bytes: &[u8],
        epoch: u64,
    ) {
        let end = (offset + bytes.len() as u64).min(head_len);
        if epoch != self.epoch || self.capacity == 0 || offset >= end {
            return;
        }
        if !self.entries.contains_key(&key) && self.entries.len() >= self.capacity {
            let oldest = self
                .entries
                .iter()
                .min_by_key(|(_, p)| p.stored)
                .map(|(k, _)| *k);
            if let Some(oldest) = oldest {
                self.entries.remove(&oldest);
            }
        }
        self.tick += 1;
        let partial = self.entries.entry(key).or_insert_with(|| Partial {
            bytes: vec![0; head_len as usize],
            filled: Vec::new(),
            stored: 0,
        });
        if partial.bytes.len() as u64 != head_len {
            // The file changed length without a write through the stash's
            // owner: start again.
            partial.bytes = vec![0; head_len as usize];
            partial.filled.clear();
        }
        partial.stored = self.tick;
        partial.bytes[offset as usize..end as usize]
            .copy_from_slice(&bytes[..(end - offset) as usize]);
        fill(&mut partial.filled, offset, end);
    }

    /// The stashed bytes of `key` (stored for its first `len` bytes), for
    /// each of `parts` (offset, length) it holds whole; the entry is
    /// removed.
    pub(super) fn take(
        &mut self,
        key: SegmentKey,
        len: u64,
        parts: &[(u64, u64)],
    ) -> Vec<Option<Arc<[u8]>>> {
        let stashed = self
            .entries
            .remove(&key)
            .filter(|p| p.bytes.len() as u64 == len);
        parts
            .iter()
            .map(|&(offset, part)| {
                let p = stashed.as_ref()?;
                let end = offset + part;
                p.filled
                    .iter()
                    .any(|&(s, e)| s <= offset && end <= e)
                    .then(|| Arc::from(&p.bytes[offset as usize..end as usize]))
            })
            .collect()
    }

    /// Bytes of `file` changed: drop its entries and refuse stores of reads
    /// that started before.
    pub(super) fn changed(&mut self, file: FileId) {
        self.epoch += 1;
        self.entries.retain(|key, _| key.file != file);
    }

    /// Heads held.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether it holds all of `key`'s first `len` bytes (kept).
    #[cfg(test)]
    fn whole(&self, key: SegmentKey, len: u64) -> bool {
        self.entries
            .get(&key)
            .is_some_and(|p| p.bytes.len() as u64 == len && p.filled.as_slice() == [(0, len)])
    }
}

/// Add `[start, end)` to the sorted, merged ranges.
fn fill(ranges: &mut Vec<(u64, u64)>, start: u64, end: u64) {
    let (mut start, mut end) = (start, end);
    ranges.retain(|&(s, e)| {
        let touches = s <= end && start <= e;
        if touches {
            start = start.min(s);
            end = end.max(e);
        }
        !touches
    });
    let at = ranges.partition_point(|&(s, _)| s < start);
    ranges.insert(at, (start, end));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(file: u64, index: u64) -> SegmentKey {
        SegmentKey {
            file: FileId(file),
            index,
        }
    }

    #[test]
    fn a_head_read_in_pieces_out_of_order_is_taken_whole() {
        let mut s = Stash::new(4);
        s.store(key(1, 0), 8, 4, b"efgh", 0);
        assert!(!s.whole(key(1, 0), 8), "half of it");
        s.store(key(1, 0), 8, 0, b"abcdXX", 0);
        assert_eq!(
            s.take(key(1, 0), 8, &[(0, 8)])[0].as_deref(),
            Some(&b"abcdXXgh"[..])
        );
        assert_eq!(s.len(), 0, "taken");
    }

    #[test]
    fn bytes_past_the_head_are_not_kept() {
        let mut s = Stash::new(4);
        s.store(key(1, 0), 4, 2, b"cdefgh", 0);
        s.store(key(1, 0), 4, 6, b"zz", 0);
        s.store(key(1, 0), 4, 0, b"ab", 0);
        assert_eq!(
            s.take(key(1, 0), 4, &[(0, 4)])[0].as_deref(),
            Some(&b"abcd"[..])
        );
    }

    #[test]
    fn a_read_that_started_before_a_change_is_not_stored() {
        let mut s = Stash::new(4);
        s.store(key(1, 0), 4, 0, b"ab", 0);
        let epoch = s.epoch();
        s.changed(FileId(1));
        s.store(key(1, 0), 4, 2, b"cd", epoch);
        s.store(key(1, 0), 4, 0, b"AB", s.epoch());
        assert!(
            !s.whole(key(1, 0), 4),
            "neither the half stored before the change nor the read that started before it"
        );
        s.store(key(1, 0), 4, 2, b"CD", s.epoch());
        assert_eq!(
            s.take(key(1, 0), 4, &[(0, 4)])[0].as_deref(),
            Some(&b"ABCD"[..])
        );
    }

    #[test]
    fn a_change_drops_only_that_files_heads() {
        let mut s = Stash::new(4);
        s.store(key(1, 0), 2, 0, b"ab", 0);
        s.store(key(2, 0), 2, 0, b"cd", 0);
        s.changed(FileId(1));
        assert_eq!(s.take(key(1, 0), 2, &[(0, 2)])[0], None);
        assert_eq!(
            s.take(key(2, 0), 2, &[(0, 2)])[0].as_deref(),
            Some(&b"cd"[..])
        );
    }

    #[test]
    fn the_least_recently_stored_head_goes_first_and_a_length_change_restarts() {
        let mut s = Stash::new(2);
        s.store(key(1, 0), 2, 0, b"a", 0);
        s.store(key(1, 1), 2, 0, b"b", 0);
        s.store(key(1, 0), 2, 1, b"A", 0);
        s.store(key(1, 2), 2, 0, b"cC", 0);
        assert_eq!(s.len(), 2);
        assert_eq!(s.take(key(1, 1), 2, &[(0, 2)])[0], None, "dropped: oldest");
        assert_eq!(
            s.take(key(1, 0), 2, &[(0, 2)])[0].as_deref(),
            Some(&b"aA"[..])
        );
        s.store(key(1, 3), 4, 0, b"xy", 0);
        s.store(key(1, 3), 2, 0, b"x", 0);
        assert_eq!(
            s.take(key(1, 3), 2, &[(0, 2)])[0],
            None,
            "restarted at the new length"
        );
    }

    #[test]
    fn a_segment_read_in_runs_gives_each_part_it_holds_whole() {
        let mut s = Stash::new(4);
        s.store(key(1, 0), 10, 0, b"abcd", 0);
        s.store(key(1, 0), 10, 6, b"gh", 0);
        let parts = s.take(key(1, 0), 10, &[(0, 4), (4, 2), (6, 2), (8, 2)]);
        assert_eq!(
            parts.iter().map(|p| p.as_deref()).collect::<Vec<_>>(),
            vec![Some(&b"abcd"[..]), None, Some(&b"gh"[..]), None],
            "the head and the run read; not the hole or the tail"
        );
        assert_eq!(s.len(), 0, "taken");
    }

    #[test]
    fn ranges_merge_when_they_touch() {
        let mut r = Vec::new();
        fill(&mut r, 4, 6);
        fill(&mut r, 0, 2);
        fill(&mut r, 8, 9);
        assert_eq!(r, vec![(0, 2), (4, 6), (8, 9)]);
        fill(&mut r, 2, 4);
        assert_eq!(r, vec![(0, 6), (8, 9)]);
        fill(&mut r, 1, 10);
        assert_eq!(r, vec![(0, 10)]);
    }
}
