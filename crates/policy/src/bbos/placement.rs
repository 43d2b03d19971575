//! Where a new checkpoint goes (docs/bbos.md, "A new checkpoint"): staged
//! on the fast tier, straight to the capacity tier (cold, or without a
//! DataWarp grant), spilled there when no room can be made, or, under
//! MaxBW, held until it fits. [`Placer`] decides from plain values (the
//! copies on the fast tier, `S`, the scheme, `now`) and returns a
//! [`Decision`]: the copies to evict first, then the [`Placement`]. The
//! engine's stager carries it out (evictions, waiting, files); the
//! simulator takes its direct-or-fast answer at a checkpoint's arrival.
//!
//! The rules, in order, each on the copies the ones before it left:
//! 1. the job's versions beyond the `versions` it keeps leave the fast tier
//!    (once per checkpoint, not again after a wait);
//! 2. MaxBW: room for the checkpoint is made, coldest copies first; while
//!    it does not fit, [`Placement::Wait`] until the deadline (then the
//!    rules below run, and usually spill);
//! 3. DataWarp: a job without a grant ([`datawarp_grant`]) goes to the
//!    capacity tier; one with a grant makes room within it among its own
//!    copies, or spills;
//! 4. the other schemes: a checkpoint the cold ranking would evict first
//!    goes to the capacity tier ([`direct_to_capacity`]); otherwise room is
//!    made among all copies, or it spills.
//!
//! INVARIANTS: only copies marked evictable are evicted, each at most once,
//! in the order given (coldest first under the [`Eviction`] order); room
//! for a checkpoint is its job's checkpoint size, in `S` (DataWarp: in its
//! grant); a decision other than [`Placement::Wait`] is final.

use super::*;

/// A copy on the fast tier as placement sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FastCopy {
    /// The copy as the cold ranking sees it; `bytes` is its length now.
    pub resident: Resident,
    /// Demoted (the capacity tier holds it too) and in no handle's or
    /// demotion's use: it may be evicted.
    pub evictable: bool,
}

/// How the fast tier is run, for placement.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PlaceConfig {
    /// BBOS or a baseline.
    pub scheme: Scheme,
    /// How cold copies are chosen.
    pub eviction: Eviction,
    /// `S`: fast-tier bytes for checkpoint copies.
    pub capacity: u64,
    /// Send a checkpoint the cold ranking would evict first straight to the
    /// capacity tier (BBOS §III-C). The engine always does; the simulator's
    /// Fig. 9 compares runs with and without.
    pub cold_direct: bool,
}

/// What the fast tier holds when a decision is asked for.
#[derive(Clone, Copy, Debug)]
pub struct FastTier<'a> {
    /// Now.
    pub now: Time,
    /// The copies on the fast tier, in the order that breaks ties between
    /// equally cold copies (the stager's: by copy id).
    pub copies: &'a [FastCopy],
    /// DataWarp: the bytes granted to the checkpoint's job
    /// ([`datawarp_grant`]); the other schemes ignore it.
    pub grant: Option<u64>,
    /// The stager is closing: nothing is waited for.
    pub closing: bool,
}

/// Where a new checkpoint goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// On the fast tier (the decision's evictions made the room).
    Stage,
    /// To the capacity tier: the cold ranking would evict it first.
    Cold,
    /// To the capacity tier: DataWarp granted its job no room.
    Ungranted,
    /// To the capacity tier: no room could be made (a spill).
    Spill,
    /// MaxBW: no room yet. Ask again when the fast tier changes, and at
    /// `until` at the latest.
    Wait {
        /// When waiting ends and the checkpoint is placed as it can be.
        until: Time,
    },
}

impl Placement {
    /// Whether the checkpoint is written to the capacity tier.
    pub fn is_direct(self) -> bool {
        matches!(
            self,
            Placement::Cold | Placement::Ungranted | Placement::Spill
        )
    }
}

/// One answer of [`Placer::decide`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// Indexes into [`FastTier::copies`] to evict, in this order, before
    /// the placement is carried out (also before a wait).
    pub evict: Vec<usize>,
    /// Where the checkpoint goes.
    pub placement: Placement,
}

/// DataWarp's dedicated allocation: each registered job is granted room
/// for one checkpoint of its size, in registration order, while the grants
/// fit in `capacity`; the first that does not fit ends the grants.
/// `sizes` are the jobs' checkpoint sizes in that order; the bytes granted
/// to the job at index `job`, if any.
pub fn datawarp_grant(sizes: &[u64], job: usize, capacity: u64) -> Option<u64> {
    let mut granted = 0u64;
    for (i, &bytes) in sizes.iter().enumerate() {
        if granted.saturating_add(bytes) > capacity {
            return None;
        }
        granted += bytes;
        if i == job {
            return Some(bytes);
        }
    }
    None
}

/// The placement of one new checkpoint; see the module docs. Asked again
/// after each [`Placement::Wait`], with the fast tier as it is then.
#[derive(Clone, Debug)]
pub struct Placer {
    config: PlaceConfig,
    incoming: Resident,
    versions: u32,
    wait_until: Time,
    retired: bool,
}

impl Placer {
    /// A placement for `incoming` (its `bytes` the job's checkpoint size,
    /// `written` and `accessed` now), whose job keeps `versions` versions;
    /// MaxBW waits for room until `wait_until` (a placement that must not
    /// wait passes now).
    pub fn new(config: PlaceConfig, incoming: Resident, versions: u32, wait_until: Time) -> Placer {
        Placer {
            config,
            incoming,
            versions,
            wait_until,
            retired: false,
        }
    }

    /// Where the checkpoint goes, with `tier` as it is now.
    pub fn decide(&mut self, tier: &FastTier<'_>) -> Decision {
        let config = self.config;
        let incoming = self.incoming;
        let need = incoming.bytes;
        let cap = config.capacity;
        let mut room = Room::new(config.eviction, tier.copies);
        // 1. Superseded versions beyond what the job keeps.
        if !self.retired {
            self.retired = true;
            for (i, c) in tier.copies.iter().enumerate() {
                let r = &c.resident;
                let behind = incoming.version.checked_sub(r.version);
                if r.job == incoming.job
                    && c.evictable
                    && behind.is_some_and(|d| d >= u64::from(self.versions))
                {
                    room.evict(i);
                }
            }
        }
        // 2. MaxBW waits before the job starts until its checkpoint fits.
        if config.scheme.reserves_before_start() {
            let fits = room.make_room(|_| true, |room| room.used(None).saturating_add(need) <= cap);
            if !fits && tier.now < self.wait_until && !tier.closing {
                return room.decision(Placement::Wait {
                    until: self.wait_until,
                });
            }
        }
        let placement = if config.scheme == Scheme::DataWarp {
            // 3. Grants of one checkpoint each, in job order, within S.
            match tier.grant {
                None => Placement::Ungranted,
                Some(grant) => {
                    let job = incoming.job;
                    let own = |c: &FastCopy| c.resident.job == job;
                    if room.make_room(own, |room| {
                        room.used(Some(job)).saturating_add(need) <= grant
                    }) {
                        Placement::Stage
                    } else {
                        Placement::Spill
                    }
                }
            }
        } else {
            // 4. Too cold to be worth the fast tier, else room or a spill.
            let residents: Vec<Resident> = room.left().map(|(_, c)| c.resident).collect();
            if config.cold_direct && direct_to_capacity(config.eviction, &incoming, &residents, cap)
            {
                Placement::Cold
            } else if room.make_room(|_| true, |room| room.used(None).saturating_add(need) <= cap) {
                Placement::Stage
            } else {
                Placement::Spill
            }
        };
        room.decision(placement)
    }
}

/// The copies a decision leaves, and its evictions so far.
struct Room<'a> {
    eviction: Eviction,
    copies: &'a [FastCopy],
    gone: Vec<bool>,
    evict: Vec<usize>,
}

impl<'a> Room<'a> {
    fn new(eviction: Eviction, copies: &'a [FastCopy]) -> Room<'a> {
        Room {
            eviction,
            copies,
            gone: alloc::vec![false; copies.len()],
            evict: Vec::new(),
        }
    }

    fn evict(&mut self, i: usize) {
        debug_assert!(self.copies[i].evictable && !self.gone[i]);
        self.gone[i] = true;
        self.evict.push(i);
    }

    /// The copies left, with their indexes.
    fn left(&self) -> impl Iterator<Item = (usize, &'a FastCopy)> + '_ {
        let copies = self.copies;
        copies
            .iter()
            .enumerate()
            .filter(move |&(i, _)| !self.gone[i])
    }

    /// Bytes of the copies left (of `job`'s only, if given).
    fn used(&self, job: Option<u64>) -> u64 {
        self.left()
            .filter(|(_, c)| job.is_none_or(|j| c.resident.job == j))
            .map(|(_, c)| c.resident.bytes)
            .sum()
    }

    /// Evicts the evictable copies `allow` accepts, coldest first, until
    /// `fits`; whether it fits in the end. The ranking's newest versions
    /// are those of the copies left when it starts.
    fn make_room(
        &mut self,
        allow: impl Fn(&FastCopy) -> bool,
        fits: impl Fn(&Room<'a>) -> bool,
    ) -> bool {
        if fits(self) {
            return true;
        }
        let newest = newest_versions(self.left().map(|(_, c)| &c.resident), []);
        let candidates: Vec<usize> = self
            .left()
            .filter(|(_, c)| c.evictable && allow(c))
            .map(|(i, _)| i)
            .collect();
        let residents: Vec<Resident> = candidates
            .iter()
            .map(|&i| self.copies[i].resident)
            .collect();
        for k in cold_order(self.eviction, &residents, &newest) {
            if fits(self) {
                break;
            }
            self.evict(candidates[k]);
        }
        fits(self)
    }

    fn decision(self, placement: Placement) -> Decision {
        Decision {
            evict: self.evict,
            placement,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 400;
    const BBOS: Eviction = Eviction::Bbos {
        version_aware: true,
    };

    fn t(secs: u64) -> Time {
        Time::from_millis(secs * 1000)
    }

    fn resident(job: u64, version: u64, bytes: u64, rate: f64, written: u64) -> Resident {
        Resident {
            job,
            version,
            bytes,
            failure_rate: rate,
            written: t(written),
            accessed: t(written),
        }
    }

    /// A demoted copy no one uses.
    fn cached(job: u64, version: u64, bytes: u64, rate: f64, written: u64) -> FastCopy {
        FastCopy {
            resident: resident(job, version, bytes, rate, written),
            evictable: true,
        }
    }

    /// A copy being written or read, or not yet demoted.
    fn busy(job: u64, version: u64, bytes: u64, rate: f64, written: u64) -> FastCopy {
        FastCopy {
            evictable: false,
            ..cached(job, version, bytes, rate, written)
        }
    }

    fn config(scheme: Scheme, eviction: Eviction) -> PlaceConfig {
        PlaceConfig {
            scheme,
            eviction,
            capacity: S,
            cold_direct: true,
        }
    }

    /// A placer for job `job`'s version `version` of 100 bytes at t = 10 s,
    /// keeping 2 versions, waiting (MaxBW) until t = 20 s.
    fn placer(config: PlaceConfig, job: u64, version: u64, rate: f64) -> Placer {
        Placer::new(config, resident(job, version, 100, rate, 10), 2, t(20))
    }

    fn tier(now: u64, copies: &[FastCopy]) -> FastTier<'_> {
        FastTier {
            now: t(now),
            copies,
            grant: None,
            closing: false,
        }
    }

    fn decision(evict: &[usize], placement: Placement) -> Decision {
        Decision {
            evict: evict.to_vec(),
            placement,
        }
    }

    #[test]
    fn staged_when_it_fits() {
        let copies = [busy(1, 1, 100, 0.5, 1), cached(2, 1, 100, 0.5, 2)];
        for scheme in [Scheme::Bbos, Scheme::MaxBw, Scheme::MaxEff] {
            let d = placer(config(scheme, BBOS), 3, 1, 0.5).decide(&tier(10, &copies));
            assert_eq!(d, decision(&[], Placement::Stage), "{scheme:?}");
        }
    }

    #[test]
    fn room_is_made_coldest_first_and_only_from_evictable_copies() {
        let copies = [
            cached(1, 1, 100, 0.3, 1), // latest of job 1
            busy(2, 1, 100, 0.1, 2),   // coldest, but being read
            cached(3, 1, 100, 0.2, 3), // coldest evictable
            cached(4, 1, 100, 0.4, 4),
        ];
        // A hot newcomer (not cold) needs 100 bytes: one eviction.
        let d = placer(config(Scheme::Bbos, BBOS), 5, 1, 0.9).decide(&tier(10, &copies));
        assert_eq!(d, decision(&[2], Placement::Stage));
        // 300 bytes: every evictable copy goes, coldest first.
        let mut p = Placer::new(
            config(Scheme::Bbos, Eviction::Lru),
            resident(5, 1, 300, 0.9, 10),
            2,
            t(20),
        );
        let d = p.decide(&tier(10, &copies));
        assert_eq!(d, decision(&[0, 2, 3], Placement::Stage));
    }

    #[test]
    fn spills_when_no_room_can_be_made() {
        let copies = [busy(1, 1, 200, 0.3, 1), busy(2, 1, 150, 0.3, 2)];
        let d = placer(config(Scheme::Bbos, Eviction::Fifo), 3, 1, 0.9).decide(&tier(10, &copies));
        assert_eq!(d, decision(&[], Placement::Spill));
        // Evictions that do not make room are still made (and counted).
        let copies = [busy(1, 1, 200, 0.3, 1), cached(2, 1, 150, 0.3, 2)];
        let mut p = Placer::new(
            config(Scheme::MaxEff, Eviction::Fifo),
            resident(3, 1, 250, 0.9, 10),
            2,
            t(20),
        );
        assert_eq!(
            p.decide(&tier(10, &copies)),
            decision(&[1], Placement::Spill)
        );
    }

    #[test]
    fn a_cold_checkpoint_goes_straight_to_the_capacity_tier() {
        // Hotter checkpoints fill S; the newcomer's job rarely fails.
        let copies = [
            busy(1, 1, 100, 0.5, 1),
            cached(2, 1, 100, 0.5, 2),
            cached(3, 1, 100, 0.5, 3),
            busy(4, 1, 100, 0.5, 4),
        ];
        let cold = |c| placer(c, 5, 1, 0.01).decide(&tier(10, &copies));
        assert_eq!(
            cold(config(Scheme::Bbos, BBOS)),
            decision(&[], Placement::Cold)
        );
        // Without the bypass (the simulator's ablation) it evicts.
        let off = PlaceConfig {
            cold_direct: false,
            ..config(Scheme::Bbos, BBOS)
        };
        assert_eq!(cold(off), decision(&[1], Placement::Stage));
        // LRU ranks a new checkpoint hottest: never cold.
        let lru = cold(config(Scheme::Bbos, Eviction::Lru));
        assert_eq!(lru, decision(&[1], Placement::Stage));
        // A hotter newcomer is staged.
        let d = placer(config(Scheme::Bbos, BBOS), 5, 1, 0.9).decide(&tier(10, &copies));
        assert_eq!(d, decision(&[1], Placement::Stage));
    }

    #[test]
    fn versions_beyond_those_kept_leave_first() {
        // Job 1 keeps 2 versions: v1 goes when v3 arrives, v2 stays.
        let copies = [
            cached(1, 1, 50, 0.5, 1),
            cached(1, 2, 50, 0.5, 2),
            busy(1, 0, 50, 0.5, 0), // in use: stays even though superseded
            cached(2, 1, 50, 0.5, 3),
        ];
        let d = placer(config(Scheme::Bbos, BBOS), 1, 3, 0.5).decide(&tier(10, &copies));
        assert_eq!(d, decision(&[0], Placement::Stage));
        // Other schemes too.
        let d = placer(config(Scheme::DataWarp, BBOS), 1, 3, 0.5).decide(&FastTier {
            grant: Some(200),
            ..tier(10, &copies)
        });
        assert_eq!(d, decision(&[0], Placement::Stage));
    }

    #[test]
    fn max_bw_waits_for_room_until_its_deadline() {
        let copies = [busy(1, 1, 350, 0.5, 1), cached(2, 1, 40, 0.5, 2)];
        let mut p = placer(config(Scheme::MaxBw, BBOS), 3, 1, 0.9);
        // What can be evicted is, and it still does not fit: wait.
        let first = p.decide(&tier(10, &copies));
        assert_eq!(first, decision(&[1], Placement::Wait { until: t(20) }));
        // Asked again before the deadline, the tier unchanged: wait again.
        let left = [copies[0]];
        assert_eq!(
            p.decide(&tier(15, &left)),
            decision(&[], Placement::Wait { until: t(20) })
        );
        // The writer finished and its copy was demoted: room now.
        let demoted = [cached(1, 1, 350, 0.5, 1)];
        let mut q = p.clone();
        assert_eq!(
            q.decide(&tier(16, &demoted)),
            decision(&[0], Placement::Stage)
        );
        // At the deadline it goes ahead and spills.
        assert_eq!(p.decide(&tier(20, &left)), decision(&[], Placement::Spill));
        // A closing stager waits for nothing.
        let mut p = placer(config(Scheme::MaxBw, BBOS), 3, 1, 0.9);
        let closing = FastTier {
            closing: true,
            ..tier(10, &copies)
        };
        assert_eq!(p.decide(&closing), decision(&[1], Placement::Spill));
    }

    #[test]
    fn max_bw_checks_coldness_once_its_wait_is_over() {
        // Hotter copies hold the tier past the deadline: a cold newcomer
        // goes to the capacity tier as cold, not as a spill.
        let copies = [busy(1, 1, 350, 0.5, 1)];
        let d = placer(config(Scheme::MaxBw, BBOS), 3, 1, 0.01).decide(&tier(20, &copies));
        assert_eq!(d, decision(&[], Placement::Cold));
    }

    #[test]
    fn superseded_versions_are_retired_once_not_after_a_wait() {
        let mut p = placer(config(Scheme::MaxBw, Eviction::Fifo), 1, 3, 0.5);
        let copies = [busy(2, 1, 350, 0.5, 0), busy(1, 1, 50, 0.5, 1)];
        assert_eq!(
            p.decide(&tier(10, &copies)),
            decision(&[], Placement::Wait { until: t(20) })
        );
        // Job 1's v1 is demoted meanwhile: now it is only room, taken
        // coldest first (FIFO: job 2's copy is older).
        let copies = [cached(2, 1, 350, 0.5, 0), cached(1, 1, 50, 0.5, 1)];
        assert_eq!(
            p.decide(&tier(12, &copies)),
            decision(&[0], Placement::Stage)
        );
    }

    #[test]
    fn data_warp_stages_within_its_grant() {
        let cfg = config(Scheme::DataWarp, BBOS);
        let copies = [
            cached(1, 1, 100, 0.5, 1), // job 1's previous version
            cached(2, 1, 100, 0.1, 0), // another job's, colder
        ];
        let granted = |grant| FastTier {
            grant,
            ..tier(10, &copies)
        };
        // The grant holds one checkpoint: its own older copy makes room,
        // never another job's, whatever S has free.
        let d = placer(cfg, 1, 2, 0.5).decide(&granted(Some(100)));
        assert_eq!(d, decision(&[0], Placement::Stage));
        let d = placer(cfg, 1, 2, 0.5).decide(&granted(Some(200)));
        assert_eq!(d, decision(&[], Placement::Stage));
        // No room within the grant: a spill.
        let d = placer(cfg, 3, 1, 0.5).decide(&granted(Some(50)));
        assert_eq!(d, decision(&[], Placement::Spill));
        // No grant: the capacity tier, cold or not.
        let d = placer(cfg, 3, 1, 0.9).decide(&granted(None));
        assert_eq!(d, decision(&[], Placement::Ungranted));
    }

    #[test]
    fn data_warp_grants_in_job_order_within_s() {
        let sizes = [100, 200, 150, 50];
        assert_eq!(datawarp_grant(&sizes, 0, 400), Some(100));
        assert_eq!(datawarp_grant(&sizes, 1, 400), Some(200));
        // 450 > 400: job 2 gets none, nor does job 3 after it (the first
        // that does not fit ends the grants).
        assert_eq!(datawarp_grant(&sizes, 2, 400), None);
        assert_eq!(datawarp_grant(&sizes, 3, 400), None);
        assert_eq!(datawarp_grant(&sizes, 3, 500), Some(50));
        assert_eq!(datawarp_grant(&sizes, 4, 10_000), None);
    }

    #[test]
    fn a_checkpoint_size_near_u64_max_does_not_overflow() {
        // `sluice ckpt register --size` takes any size above 0.
        let copies = [busy(1, 1, 1, 0.5, 1)];
        for scheme in [Scheme::Bbos, Scheme::MaxBw] {
            let mut p = Placer::new(
                config(scheme, Eviction::Lru),
                resident(2, 1, u64::MAX, 0.5, 10),
                2,
                t(10),
            );
            let d = p.decide(&tier(10, &copies));
            assert_eq!(d, decision(&[], Placement::Spill), "{scheme:?}");
        }
        // A grant after another job's is not one beyond S.
        assert_eq!(datawarp_grant(&[100, u64::MAX], 1, S), None);
        let mut p = Placer::new(
            config(Scheme::DataWarp, Eviction::Lru),
            resident(1, 1, u64::MAX, 0.5, 10),
            2,
            t(10),
        );
        let d = p.decide(&FastTier {
            grant: Some(S),
            ..tier(10, &copies)
        });
        assert_eq!(d, decision(&[], Placement::Spill));
        // Versions near u64::MAX.
        let copies = [cached(1, u64::MAX - 1, 1, 0.5, 1)];
        let mut p = Placer::new(
            config(Scheme::Bbos, Eviction::Lru),
            resident(1, u64::MAX, 1, 0.5, 10),
            2,
            t(10),
        );
        assert_eq!(
            p.decide(&tier(10, &copies)),
            decision(&[], Placement::Stage)
        );
    }

    #[test]
    fn direct_placements() {
        assert!(!Placement::Stage.is_direct());
        assert!(!Placement::Wait { until: t(1) }.is_direct());
        for p in [Placement::Cold, Placement::Ungranted, Placement::Spill] {
            assert!(p.is_direct());
        }
    }
}
