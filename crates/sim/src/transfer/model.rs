//! The storage side of the transfer model: each target's service model,
//! congestion episodes, the disks behind the targets, and where objects
//! land.

use super::*;

/// The service-time model of one storage target (an OST on one disk).
#[derive(Clone, Debug, PartialEq)]
pub struct TargetModel {
    /// Disk geometry: seek curve, spindle speed and media rates (the shared
    /// HDD model; its queue is not used: a target serves one request at a
    /// time, FIFO).
    pub hdd: HddConfig,
    /// File-system cost per request at the target (server and on-disk file
    /// system), paid by every read and writeback.
    pub fs_overhead: Duration,
    /// A request continuing the previous one on the disk streams (no seek,
    /// no rotation) when issued at most this long after it completed.
    pub streaming_gap: Duration,
}

impl TargetModel {
    /// The paper's testbed disks (§4.1): 1 TB 7200 rpm drives giving
    /// 2.3 GB/s over 16 disks (145 MB/s each, our outer-edge media rate,
    /// half that at the inner edge), and a file-system overhead of 5 ms per
    /// 1 MiB object, which takes a sequential object from 7.2 to 12.2 ms:
    /// the paper's "file system overhead reduces that by about 40%".
    pub fn testbed() -> TargetModel {
        TargetModel {
            hdd: HddConfig {
                capacity_bytes: 1_000_000_000_000,
                media_outer_bytes_per_s: 145e6,
                media_inner_bytes_per_s: 72.5e6,
                ..HddConfig::default()
            },
            fs_overhead: Duration::from_millis(5),
            streaming_gap: Duration::from_millis(1),
        }
    }
}

/// Congestion of one side's targets: periods of `busy` during which
/// `targets` of them (a subset drawn from the seed, anew each period) serve
/// `factor` times slower, each followed by `idle` without congestion. The
/// first period starts at `start`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Congestion {
    /// Service-time multiplier of a congested target; 1 is no congestion.
    pub factor: f64,
    /// Targets congested during a busy period (at most the side's count).
    pub targets: u32,
    /// Length of a congested period; zero is no congestion.
    pub busy: Duration,
    /// Congestion-free time after each congested period.
    pub idle: Duration,
    /// Start of the first congested period.
    pub start: Duration,
}

impl Congestion {
    /// No congestion.
    pub const NONE: Congestion = Congestion {
        factor: 1.0,
        targets: 0,
        busy: Duration::ZERO,
        idle: Duration::ZERO,
        start: Duration::ZERO,
    };

    pub(super) fn is_none(&self) -> bool {
        self.targets == 0 || self.busy.is_zero() || self.factor == 1.0
    }
}

/// The congested subset of the current period, cached per period.
#[derive(Clone, Debug)]
pub(super) struct CongestionState {
    pub(super) spec: Congestion,
    pub(super) seed: u64,
    pub(super) period: Option<u64>,
    pub(super) congested: Vec<bool>,
}

impl CongestionState {
    pub(super) fn new(spec: Congestion, seed: u64, targets: usize) -> CongestionState {
        CongestionState {
            spec,
            seed,
            period: None,
            congested: vec![false; targets],
        }
    }

    /// The service-time multiplier of `target` at `now`.
    pub(super) fn factor(&mut self, target: usize, now: Time) -> f64 {
        let spec = self.spec;
        if spec.is_none() {
            return 1.0;
        }
        let start = Time::ZERO.saturating_add(spec.start);
        if now < start {
            return 1.0;
        }
        let since = now.saturating_since(start);
        let cycle = spec.busy + spec.idle;
        let period = (since.as_nanos() / cycle.as_nanos()) as u64;
        let into = since.as_nanos() % cycle.as_nanos();
        if into >= spec.busy.as_nanos() {
            return 1.0;
        }
        if self.period != Some(period) {
            let mut order: Vec<usize> = (0..self.congested.len()).collect();
            SimRng::new(self.seed ^ period.wrapping_mul(0x9E37_79B9_7F4A_7C15)).shuffle(&mut order);
            self.congested.fill(false);
            for &t in order.iter().take(spec.targets as usize) {
                self.congested[t] = true;
            }
            self.period = Some(period);
        }
        if self.congested[target] {
            spec.factor
        } else {
            1.0
        }
    }
}

/// One target: a disk serving one request at a time, FIFO.
pub(super) struct Disk {
    pub(super) geometry: Hdd,
    pub(super) rng: SimRng,
    pub(super) head: u64,
    pub(super) last_done: Option<Time>,
    pub(super) in_service: Option<(Job, u64)>,
    pub(super) queue: VecDeque<(Job, u64)>,
}

impl Disk {
    pub(super) fn service(
        &mut self,
        model: &TargetModel,
        now: Time,
        offset: u64,
        len: u64,
        factor: f64,
    ) -> Duration {
        let streaming = self.head == offset
            && self
                .last_done
                .is_some_and(|done| now.saturating_since(done) <= model.streaming_gap);
        let positioning = if streaming {
            Duration::ZERO
        } else {
            let rotation = self.rng.unit() * self.geometry.config().rotation_period_s();
            self.geometry
                .seek_time(offset.abs_diff(self.head))
                .saturating_add(Duration::from_secs_f64(rotation))
        };
        let rate = self
            .geometry
            .media_bytes_per_s(offset.saturating_add(len / 2));
        let transfer = Duration::from_secs_f64(len as f64 / rate);
        model
            .fs_overhead
            .saturating_add(positioning)
            .saturating_add(transfer)
            .mul_f64(factor)
    }
}

/// Where each file's stripes lie: target and disk offset per stripe index.
pub(super) struct Placement {
    /// `(target, disk offset of the stripe's first object)` per file and
    /// stripe index.
    pub(super) stripes: Vec<Vec<(u32, u64)>>,
}

impl Placement {
    pub(super) fn new(
        files: &[u64],
        object_bytes: u64,
        stripe_count: u32,
        targets: u32,
    ) -> Placement {
        let mut cursor = vec![0u64; targets as usize];
        let stripes = files
            .iter()
            .enumerate()
            .map(|(k, &len)| {
                let objects = len.div_ceil(object_bytes);
                (0..u64::from(stripe_count))
                    .map(|j| {
                        let target = ((k as u64 + j) % u64::from(targets)) as u32;
                        let mine = objects / u64::from(stripe_count)
                            + u64::from(j < objects % u64::from(stripe_count));
                        let base = cursor[target as usize];
                        cursor[target as usize] += mine * object_bytes;
                        (target, base)
                    })
                    .collect()
            })
            .collect();
        Placement { stripes }
    }

    pub(super) fn layout(&self, file: usize, object_bytes: u64) -> StripeLayout {
        let targets = self.stripes[file]
            .iter()
            .map(|&(t, _)| TargetId(t))
            .collect();
        // INVARIANT: object_bytes > 0 and stripe_count >= 1 (validated).
        StripeLayout::new(object_bytes, targets).expect("validated layout")
    }

    /// Target and disk offset of the object at `offset` of `file`.
    pub(super) fn locate(&self, file: usize, offset: u64, object_bytes: u64) -> (usize, u64) {
        let stripes = &self.stripes[file];
        let k = offset / object_bytes;
        let c = stripes.len() as u64;
        let (target, base) = stripes[(k % c) as usize];
        (target as usize, base + (k / c) * object_bytes)
    }
}

pub(super) fn disks(side: &Endpoint, seed: u64, salt: u64) -> Result<Vec<Disk>, SimError> {
    (0..side.targets)
        .map(|t| {
            let geometry = Hdd::new(side.target.hdd.clone(), 0)
                .map_err(|e| SimError(format!("transfer config: target.hdd: {e}")))?;
            Ok(Disk {
                geometry,
                rng: SimRng::new(seed ^ salt ^ (u64::from(t) << 32)),
                head: 0,
                last_done: None,
                in_service: None,
                queue: VecDeque::new(),
            })
        })
        .collect()
}
