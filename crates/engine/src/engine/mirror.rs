//! The memory copy of the newest log records (docs/engine.md, "The memory
//! copy"; issue 32): a data record's payload is kept in memory as it is
//! appended, up to `log.memory_copy` bytes, so a write-back, a flush or a
//! read of it copies from memory instead of reading the fast tier. During
//! a burst the fast tier's channel then carries the appends alone,
//! instead of the appends and the idle write-back's reads queued behind
//! them (a SATA SSD serves its requests in arrival order).
//!
//! It is a copy and nothing more: the record is in the log (and durable
//! once the log is synced) whether or not its copy is kept, recovery
//! starts with none, and nothing but a copy of a payload in bytes ever
//! enters it.
//!
//! INVARIANTS:
//! - a copy lies at a payload offset of its region's `records` and holds
//!   that record's whole payload: it is kept only when the record is
//!   entered there, and every copy of a region goes when its `records`
//!   are cleared ([`Mirror::forget_region`], at `cache::reuse`);
//! - `bytes` is the sum of the copies' lengths, at most `budget`;
//! - `order` names every region with copies, each once, oldest first.
//!   The oldest region's lowest copies go first when room is needed:
//!   they are the ones a write-back that trails the burst has passed.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use sluice_policy::RegionId;

/// The memory copy: see the module docs.
pub(super) struct Mirror {
    budget: u64,
    bytes: u64,
    /// Per region: payload offset -> the record's payload.
    regions: Vec<BTreeMap<u64, Arc<[u8]>>>,
    order: VecDeque<RegionId>,
    /// Lookups of a record (by a write-back, flush or read) that found its
    /// copy, and that did not: counted under the engine lock held shared.
    hits: AtomicU64,
    misses: AtomicU64,
}

impl Mirror {
    /// No copies, room for `budget` bytes of them in `regions` regions.
    pub(super) fn new(budget: u64, regions: usize) -> Mirror {
        Mirror {
            budget,
            bytes: 0,
            regions: vec![BTreeMap::new(); regions],
            order: VecDeque::new(),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    /// The module's invariants on the copies alone (invariants.rs checks
    /// each against its region's records): `bytes` is their total, at most
    /// `budget`, and `order` names every region with copies, each once.
    #[cfg(test)]
    pub(super) fn check(&self) -> Result<(), String> {
        let total: u64 = self
            .regions
            .iter()
            .flat_map(|copies| copies.values())
            .map(|copy| copy.len() as u64)
            .sum();
        if total != self.bytes || total > self.budget {
            return Err(format!(
                "memory copy: {total} bytes held, {} counted, budget {}",
                self.bytes, self.budget
            ));
        }
        for (r, copies) in self.regions.iter().enumerate() {
            let named = self.order.iter().filter(|o| o.0 as usize == r).count();
            if named != usize::from(!copies.is_empty()) {
                return Err(format!(
                    "memory copy: region {r} with {} copies named {named} times",
                    copies.len()
                ));
            }
        }
        Ok(())
    }

    /// Every copy: its region, payload offset and length.
    #[cfg(test)]
    pub(super) fn copies(&self) -> impl Iterator<Item = (usize, u64, usize)> + '_ {
        self.regions.iter().enumerate().flat_map(|(r, copies)| {
            copies
                .iter()
                .map(move |(&offset, copy)| (r, offset, copy.len()))
        })
    }

    /// Whether copies are kept at all: callers skip the copy otherwise.
    pub(super) fn enabled(&self) -> bool {
        self.budget > 0
    }

    /// Keep `payload` as the copy of the record at `offset` of `region`,
    /// making room by dropping the oldest copies. A payload larger than
    /// the whole budget is not kept (nor any copy left at its offset).
    pub(super) fn keep(&mut self, region: RegionId, offset: u64, payload: Arc<[u8]>) {
        let len = payload.len() as u64;
        if len > self.budget {
            let copies = &mut self.regions[region.0 as usize];
            if let Some(old) = copies.remove(&offset) {
                self.bytes -= old.len() as u64;
                if copies.is_empty() {
                    self.order.retain(|&r| r != region);
                }
            }
            return;
        }
        while self.bytes + len > self.budget {
            let Some(&oldest) = self.order.front() else {
                break;
            };
            let copies = &mut self.regions[oldest.0 as usize];
            if let Some((_, dropped)) = copies.pop_first() {
                self.bytes -= dropped.len() as u64;
            }
            if copies.is_empty() {
                self.order.pop_front();
            }
        }
        let copies = &mut self.regions[region.0 as usize];
        if copies.is_empty() {
            self.order.push_back(region);
        }
        if let Some(old) = copies.insert(offset, payload) {
            // INVARIANT: a payload offset holds one record until its
            // region's records are cleared; should one come twice, the
            // count stays true.
            self.bytes -= old.len() as u64;
        }
        self.bytes += len;
    }

    /// The copy of the record at `offset` of `region`, if kept; counted
    /// as a hit or a miss when copies are kept at all.
    pub(super) fn get(&self, region: RegionId, offset: u64) -> Option<Arc<[u8]>> {
        if !self.enabled() {
            return None;
        }
        let copy = self.regions[region.0 as usize].get(&offset).cloned();
        let counter = if copy.is_some() {
            &self.hits
        } else {
            &self.misses
        };
        counter.fetch_add(1, Ordering::Relaxed);
        copy
    }

    /// `region`'s records are cleared: its copies go with them.
    pub(super) fn forget_region(&mut self, region: RegionId) {
        let copies = std::mem::take(&mut self.regions[region.0 as usize]);
        if copies.is_empty() {
            return;
        }
        self.bytes -= copies.values().map(|c| c.len() as u64).sum::<u64>();
        self.order.retain(|&r| r != region);
    }

    /// Bytes of copies held now, and the lookups that found a copy and
    /// that did not, ever.
    pub(super) fn usage(&self) -> (u64, u64, u64) {
        (
            self.bytes,
            self.hits.load(Ordering::Relaxed),
            self.misses.load(Ordering::Relaxed),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(len: usize, byte: u8) -> Arc<[u8]> {
        vec![byte; len].into()
    }

    #[test]
    fn the_oldest_regions_lowest_copies_make_room_first() {
        let mut mirror = Mirror::new(100, 3);
        mirror.keep(RegionId(1), 10, payload(40, 1));
        mirror.keep(RegionId(1), 60, payload(40, 2));
        mirror.keep(RegionId(2), 0, payload(40, 3));
        // Room for 40 more was made from region 1's lowest copy.
        assert!(mirror.get(RegionId(1), 10).is_none());
        assert_eq!(mirror.get(RegionId(1), 60).unwrap()[0], 2);
        assert_eq!(mirror.get(RegionId(2), 0).unwrap()[0], 3);
        assert_eq!(mirror.usage(), (80, 2, 1));
        mirror.keep(RegionId(0), 0, payload(60, 4));
        // Region 1's last copy went, and region 1 with it.
        assert!(mirror.get(RegionId(1), 60).is_none());
        assert_eq!(mirror.get(RegionId(2), 0).unwrap()[0], 3);
        assert_eq!(mirror.usage().0, 100);
        assert_eq!(mirror.order, [RegionId(2), RegionId(0)]);
        mirror.keep(RegionId(0), 70, payload(30, 5));
        assert!(mirror.get(RegionId(2), 0).is_none());
        assert_eq!(mirror.usage().0, 90);
        assert_eq!(mirror.order, [RegionId(0)]);
    }

    #[test]
    fn a_cleared_region_loses_its_copies_and_their_count() {
        let mut mirror = Mirror::new(1000, 2);
        mirror.keep(RegionId(0), 0, payload(100, 1));
        mirror.keep(RegionId(1), 0, payload(200, 2));
        mirror.forget_region(RegionId(0));
        assert!(mirror.get(RegionId(0), 0).is_none());
        assert_eq!(mirror.usage().0, 200);
        assert_eq!(mirror.order, [RegionId(1)]);
        // Filled again, it is the newest region.
        mirror.keep(RegionId(0), 0, payload(100, 3));
        assert_eq!(mirror.order, [RegionId(1), RegionId(0)]);
    }

    #[test]
    fn nothing_is_kept_without_a_budget_or_beyond_it() {
        let mut off = Mirror::new(0, 1);
        assert!(!off.enabled());
        off.keep(RegionId(0), 0, payload(1, 1));
        assert!(off.get(RegionId(0), 0).is_none());
        let mut small = Mirror::new(10, 1);
        small.keep(RegionId(0), 0, payload(5, 1));
        small.keep(RegionId(0), 8, payload(11, 2));
        assert!(small.get(RegionId(0), 8).is_none());
        assert_eq!(small.get(RegionId(0), 0).unwrap().len(), 5);
        assert_eq!(small.usage().0, 5);
        // A record too large for the budget at a kept copy's offset: the
        // old copy goes too, and the region, left without copies, leaves
        // the order (kept again, it is named once).
        small.keep(RegionId(0), 0, payload(11, 3));
        assert!(small.get(RegionId(0), 0).is_none());
        assert_eq!(small.usage().0, 0);
        assert!(small.order.is_empty());
        small.keep(RegionId(0), 0, payload(4, 4));
        assert_eq!(small.order, [RegionId(0)]);
    }
}
