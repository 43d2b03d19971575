//! An emulated striped parallel file system: N targets, each a disk model
//! served one request at a time, with a congestion schedule.
//!
//! Files are real files (in any directory); the emulation decides their
//! layout and adds each target's service time to every object read. Layout:
//! like Lustre's default allocator, a file's first target is the next in a
//! round-robin over the targets (in the order files are first seen), and
//! its `stripe_count` objects go to consecutive targets. On each target the
//! file's objects get consecutive disk addresses after the previous file's,
//! so reading one file's objects in order is sequential on that disk.
//!
//! Reading an object takes the target's lock (one request at a time, as the
//! paper's OSTs), asks the [`Hdd`] model for the service time of a read at
//! the object's address, multiplies it by `factor` while the target is
//! congested, sleeps that long, then reads the real bytes. A target is
//! congested when it is listed in `congested` and the time since the
//! emulation started, modulo `on + off`, is below `on` (`off = 0` means
//! always congested). With `rotate = r`, the congested set moves `r`
//! targets on at each new period, so congestion wanders.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sluice_devices::hdd::{Hdd, HddConfig, HddRequest};
use sluice_devices::IoKind;
use sluice_policy::lads::{Object, StripeLayout, TargetId};

use super::{FileLayout, LayoutProvider, SourceFile};

/// A list of targets as `--pfs-congested` takes it: `0,1,5-7` (empty:
/// none).
pub fn parse_targets(spec: &str) -> io::Result<Vec<u32>> {
    let bad = || {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("bad target list {spec:?} (expected e.g. 0,1,4-7)"),
        )
    };
    let mut out = Vec::new();
    for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u32, u32) =
                    (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
                if a > b || b - a > 65_536 {
                    return Err(bad());
                }
                out.extend(a..=b);
            }
            None => out.push(part.parse().map_err(|_| bad())?),
        }
    }
    Ok(out)
}

/// Shape of the emulated file system.
#[derive(Clone, Debug, PartialEq)]
pub struct PfsConfig {
    /// Number of targets (OSTs).
    pub targets: u32,
    /// Targets each file is striped over.
    pub stripe_count: u32,
    /// Object (stripe) size in bytes.
    pub object_size: u64,
    /// Disk model of every target.
    pub disk: HddConfig,
    /// Targets that suffer congestion.
    pub congested: Vec<u32>,
    /// Service-time multiplier while congested.
    pub factor: f64,
    /// Congested phase length.
    pub on: Duration,
    /// Quiet phase length (0: congested throughout).
    pub off: Duration,
    /// Targets the congested set moves by at each new period (0: the same
    /// targets every period), so congestion wanders over the system as in
    /// the paper's Fig. 10.
    pub rotate: u32,
}

impl Default for PfsConfig {
    fn default() -> PfsConfig {
        PfsConfig {
            targets: 16,
            stripe_count: 1,
            object_size: 1 << 20,
            disk: HddConfig::default(),
            congested: Vec::new(),
            factor: 8.0,
            on: Duration::from_secs(5),
            off: Duration::ZERO,
            rotate: 0,
        }
    }
}

struct Target {
    disk: Hdd,
    /// Next free disk address.
    next: u64,
}

/// A file's first target and its disk base on each of its targets.
type Placement = (u32, Vec<u64>);

/// See the module docs.
pub struct EmulatedPfs {
    config: PfsConfig,
    targets: Vec<Mutex<Target>>,
    /// Round-robin counter and each file's (first target, disk bases).
    files: Mutex<(u32, HashMap<PathBuf, Placement>)>,
    epoch: Instant,
}

impl std::fmt::Debug for EmulatedPfs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmulatedPfs")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl EmulatedPfs {
    /// An emulation; errors name the bad setting.
    pub fn new(config: PfsConfig) -> io::Result<EmulatedPfs> {
        let bad = |m: String| io::Error::new(io::ErrorKind::InvalidInput, m);
        if config.targets == 0 || config.targets > 4096 {
            return Err(bad(format!(
                "pfs targets {} is outside 1..=4096",
                config.targets
            )));
        }
        if config.stripe_count == 0 || config.stripe_count > config.targets {
            return Err(bad(format!(
                "pfs stripe count {} is outside 1..={}",
                config.stripe_count, config.targets
            )));
        }
        if config.object_size == 0 || config.object_size > crate::wire::MAX_OBJECT as u64 {
            return Err(bad(format!(
                "pfs object size {} is outside 1..=16 MiB",
                config.object_size
            )));
        }
        if let Some(t) = config.congested.iter().find(|&&t| t >= config.targets) {
            return Err(bad(format!(
                "congested target {t} does not exist (targets: {})",
                config.targets
            )));
        }
        if !(config.factor.is_finite() && config.factor >= 1.0) {
            return Err(bad(format!(
                "congestion factor {} must be ≥ 1",
                config.factor
            )));
        }
        let mut targets = Vec::new();
        for t in 0..config.targets {
            let disk =
                Hdd::new(config.disk.clone(), u64::from(t) + 1).map_err(|e| bad(e.to_string()))?;
            targets.push(Mutex::new(Target { disk, next: 0 }));
        }
        Ok(EmulatedPfs {
            config,
            targets,
            files: Mutex::new((0, HashMap::new())),
            epoch: Instant::now(),
        })
    }

    /// The settings.
    pub fn config(&self) -> &PfsConfig {
        &self.config
    }

    /// Whether `target` is congested `at` after the emulation started.
    pub fn congested_at(&self, target: u32, at: Duration) -> bool {
        let c = &self.config;
        let period = (c.on + c.off).as_nanos().max(1);
        let phase = at.as_nanos() % period;
        if !c.off.is_zero() && phase >= c.on.as_nanos() {
            return false;
        }
        let n = u128::from(c.targets);
        let shift = (at.as_nanos() / period * u128::from(c.rotate)) % n;
        // The target that sat where `target` is before `shift` moves.
        let origin = ((u128::from(target) + n - shift) % n) as u32;
        c.congested.contains(&origin)
    }

    fn placement(&self, path: &Path, len: u64) -> Placement {
        let mut files = sluice_env::lock(&self.files);
        if let Some(p) = files.1.get(path) {
            return p.clone();
        }
        let n = self.config.targets;
        let first = files.0 % n;
        files.0 = files.0.wrapping_add(1);
        let width = u64::from(self.config.stripe_count);
        // Objects per target, rounded up, reserved contiguously.
        let per_target =
            len.div_ceil(self.config.object_size).div_ceil(width) * self.config.object_size;
        let bases = (0..self.config.stripe_count)
            .map(|i| {
                let mut t = sluice_env::lock(&self.targets[((first + i) % n) as usize]);
                let cap = t.disk.config().capacity_bytes;
                let base = t.next % cap;
                t.next = t.next.saturating_add(per_target);
                base
            })
            .collect::<Vec<_>>();
        let p = (first, bases);
        files.1.insert(path.to_owned(), p.clone());
        p
    }
}

impl LayoutProvider for EmulatedPfs {
    fn name(&self) -> &'static str {
        "pfs"
    }

    fn layout(&self, path: &Path, len: u64) -> io::Result<FileLayout> {
        let (first, _) = self.placement(path, len);
        let n = self.config.targets;
        let targets = (0..self.config.stripe_count)
            .map(|i| TargetId((first + i) % n))
            .collect();
        Ok(FileLayout::Stripe(
            StripeLayout::new(self.config.object_size, targets).expect("validated in new"),
        ))
    }

    fn read_object(
        &self,
        path: &Path,
        file: &SourceFile,
        object: &Object,
        buf: &mut [u8],
    ) -> io::Result<()> {
        let (first, bases) = self.placement(path, 0);
        let n = self.config.targets;
        let t = object.target.0;
        let stripe_pos = (t + n - first) % n;
        let base = bases.get(stripe_pos as usize).copied().unwrap_or(0);
        let k = object.offset / self.config.object_size / u64::from(self.config.stripe_count);
        let start = Instant::now();
        let mut target = sluice_env::lock(&self.targets[t as usize]);
        let cap = target.disk.config().capacity_bytes;
        let request = HddRequest {
            id: 0,
            kind: IoKind::Read,
            offset: (base + k * self.config.object_size) % cap,
            len: object.len,
        };
        let mut service = match target.disk.submit(request) {
            Ok(()) => {
                let s = target
                    .disk
                    .start_next()
                    .map(|s| s.duration)
                    .unwrap_or_default();
                target.disk.complete();
                s
            }
            Err(_) => Duration::ZERO,
        };
        if self.congested_at(t, start.duration_since(self.epoch)) {
            service = service.mul_f64(self.config.factor);
        }
        // Hold the target while it "serves": one request at a time.
        std::thread::sleep(service);
        drop(target);
        file.read_at(buf, object.offset)
    }

    /// The emulated targets' bytes are local files.
    fn direct_reads(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_lists_parse() {
        assert_eq!(parse_targets("0,2-4, 9").unwrap(), vec![0, 2, 3, 4, 9]);
        assert_eq!(parse_targets("").unwrap(), Vec::<u32>::new());
        assert!(parse_targets("3-1").is_err());
        assert!(parse_targets("x").is_err());
        assert!(parse_targets("0-4294967295").is_err());
    }

    #[test]
    fn congestion_follows_its_schedule_and_rotates() {
        let s = |secs: f64| Duration::from_secs_f64(secs);
        let pfs = |off, rotate| {
            EmulatedPfs::new(PfsConfig {
                targets: 8,
                congested: vec![0, 1],
                on: s(2.0),
                off,
                rotate,
                ..PfsConfig::default()
            })
            .unwrap()
        };
        let fixed = pfs(Duration::ZERO, 0);
        assert!(fixed.congested_at(1, s(0.5)) && fixed.congested_at(0, s(99.0)));
        assert!(!fixed.congested_at(2, s(0.5)));
        let blinking = pfs(s(1.0), 0);
        assert!(blinking.congested_at(0, s(1.9)) && !blinking.congested_at(0, s(2.5)));
        let wandering = pfs(Duration::ZERO, 2);
        assert!(wandering.congested_at(0, s(1.0)) && !wandering.congested_at(2, s(1.0)));
        assert!(wandering.congested_at(2, s(3.0)) && wandering.congested_at(3, s(3.0)));
        assert!(!wandering.congested_at(0, s(3.0)));
        assert!(wandering.congested_at(0, s(8.5)), "wraps after 4 periods");
    }
}
