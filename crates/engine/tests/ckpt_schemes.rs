//! Why BBOS beats MaxBW on the mount with synchronised bursts beyond S
//! (docs/results/bbos-mount.md, "Three runs of 300 s"; issue 23), asserted
//! at small scale through the real stager, on counts instead of time.
//!
//! The mount's runs: three jobs of one period checkpoint 384 MiB each at
//! once, 1,152 MiB per burst against S = 606 MiB (DWPP/S 1.9), ten bursts.
//! BBOS was faster (31.9 against 25.8 MB/s, median of three) because the
//! emulated SSD is one channel for checkpoint writes and demotion reads:
//! MaxBW stages every checkpoint and so demotes nearly all of them
//! (11,136 MiB) beside the next bursts, while BBOS's cold-first rule sends
//! the two colder jobs' checkpoints straight to the HDD (20 of 30) and
//! demotes a third as much (3,840 MiB). The price is restarts: BBOS's hit
//! the burst buffer 0.42 of the time, MaxBW's always.
//!
//! Here the same mix is 1,024 times smaller (384 KiB checkpoints, S = 606
//! KiB, bandwidths ÷ 1,024), ten periods of 30 s on a clock the test
//! advances. The throughput itself is the benchmark's to show; this test
//! asserts the counts behind it.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sluice_catalog::{Failure, JobSpec, MetaSpec};
use sluice_engine::{Checkpoints, CkptOptions, CkptStats};
use sluice_env::crash::CrashBackend;
use sluice_env::{Backend, Clock, RelPath};
use sluice_policy::bbos::{Bandwidths, Eviction, Scheme};
use sluice_policy::Time;

const KIB: u64 = 1024;

/// One checkpoint: the mount's 384 MiB, ÷ 1,024.
const CKPT: u64 = 384 * KIB;

/// `S` = DWPP / 1.9, DWPP being the three checkpoints of one burst.
const S: u64 = 3 * CKPT * 10 / 19;

/// The planner period and the jobs' period (the mount's `PERIOD=30s`).
const PERIOD_S: u64 = 30;

/// Bursts per run (the mount's 300 s).
const PERIODS: u64 = 10;

/// Bytes per write call, and per demotion step.
const WRITE: u64 = 16 * KIB;

/// Versions each job keeps (older ones are unlinked, as the load does).
const VERSIONS: u64 = 2;

/// The jobs, in the order they arrive in each burst: id and MTBF, seconds
/// (the mount's `a:30:384:20:2 b:30:384:40:2 c:30:384:120:2`).
const JOBS: [(&str, u64); 3] = [("a", 20), ("b", 40), ("c", 120)];

/// A clock that moves only when the stager sleeps (its write and demotion
/// throttles) or the test advances it: the planner's periods are the
/// test's, and nothing waits in real time.
#[derive(Debug, Default)]
struct ManualClock(AtomicU64);

impl ManualClock {
    fn advance_to(&self, t: Duration) {
        self.0.fetch_max(t.as_nanos() as u64, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Time {
        Time::from_nanos(self.0.load(Ordering::SeqCst))
    }

    fn sleep(&self, d: Duration) {
        self.0.fetch_add(d.as_nanos() as u64, Ordering::SeqCst);
    }
}

fn p(s: &str) -> RelPath {
    RelPath::new(s).unwrap()
}

/// Whether a job with this MTBF fails in period `k`: `period / MTBF` of
/// the periods (every one when the MTBF is shorter than the period),
/// spread evenly; the load draws the same rate at random.
fn fails(mtbf: u64, k: u64) -> bool {
    PERIOD_S >= mtbf || (k + 1) * PERIOD_S / mtbf > k * PERIOD_S / mtbf
}

/// One scheme's run: its counters.
struct Arm {
    name: &'static str,
    stats: CkptStats,
}

impl Arm {
    /// Bytes the fast tier carried: checkpoint writes and demotion reads,
    /// the two that share the SSD's one channel on the mount.
    fn fast_bytes(&self) -> u64 {
        self.stats.staged_written_bytes + self.stats.demoted_bytes
    }

    fn restarts(&self) -> u64 {
        self.stats.restart_hits + self.stats.restart_misses
    }
}

/// One demotion step, if the stager's own plan demotes now (a rate of 0 is
/// MaxBW under writes: no step, as its demotion thread would wait).
fn demote_step(ck: &Checkpoints) -> bool {
    ck.status().demote_rate > 0 && ck.demote_next().unwrap()
}

/// The job mix under `scheme` and `eviction`, driven in one thread without
/// the demotion thread, standing in for it at the points where it runs on
/// the mount:
/// - after each write call (one copy per step, at the plan's rate: under
///   writes for BBOS and MaxEff, idle while a checkpoint goes straight to
///   the capacity tier, never under MaxBW's writes);
/// - while a MaxBW job waits before it starts for its checkpoint to fit
///   (the wait is idle: demotion runs until the staged copies leave room);
/// - between bursts (idle until every closed copy is demoted).
///
/// Jobs admitted one at a time (as BBOS, MaxBW and MaxEff admit them) run
/// one after the other (DataWarp's run concurrently on the mount, but its
/// grants, not timing, place them); a failing job restarts right after its
/// checkpoint, as the load's do. `admit_wait` is zero so that no wait this
/// driver misjudged can hang on the manual clock: it would show as a spill.
fn run(scheme: Scheme, eviction: Eviction, dir: &Path) -> Arm {
    let fast = Arc::new(CrashBackend::new());
    let capacity = Arc::new(CrashBackend::new());
    let (f, c): (Arc<dyn Backend>, Arc<dyn Backend>) = (fast, capacity);
    c.create_dir(&p("ckpt")).unwrap();
    for (id, _) in JOBS {
        c.create_dir(&p(&format!("ckpt/{id}"))).unwrap();
    }
    c.sync_dir(&RelPath::root()).unwrap();
    let clock = Arc::new(ManualClock::default());
    // The mount's bandwidths (scripts/bench-bbos.sh), ÷ 1,024 as the data.
    let mb = 1e6 / 1024.0;
    let options = CkptOptions {
        scheme,
        eviction,
        bandwidths: Bandwidths {
            write_max: 140.0 * mb,
            write_min: 105.0 * mb,
            demote_max: 60.0 * mb,
            demote_min: 10.0 * mb,
            idle_demote: 60.0 * mb,
        },
        capacity: S,
        period: Duration::from_secs(PERIOD_S),
        chunk_bytes: WRITE,
        background: false,
        admit_wait: Duration::ZERO,
        node_id: Some("ci".into()),
        ..CkptOptions::default()
    };
    let catalog = sluice_catalog::open(&MetaSpec::Redb {
        path: dir.join("catalog.redb"),
    })
    .unwrap();
    let ck = Checkpoints::open(f, Arc::clone(&c), catalog, clock.clone(), options).unwrap();
    for (id, mtbf) in JOBS {
        ck.register(JobSpec {
            id: id.into(),
            period_s: PERIOD_S,
            ckpt_bytes: CKPT,
            failure: Failure::MtbfSecs(mtbf),
            versions: VERSIONS as u32,
            glob: format!("ckpt/{id}/*"),
            files: 1,
        })
        .unwrap();
    }
    for k in 0..PERIODS {
        // The burst starts at the period, or when the last one ended.
        clock.advance_to(Duration::from_secs(k * PERIOD_S));
        let version = k + 1;
        for (j, (id, mtbf)) in JOBS.into_iter().enumerate() {
            if scheme.reserves_before_start() {
                while ck.status().staged.1 + CKPT > S && demote_step(&ck) {}
            }
            let path = p(&format!("ckpt/{id}/v{version}"));
            let data: Vec<u8> = (0..CKPT)
                .map(|i| (i as u8) ^ (version as u8).wrapping_mul(7) ^ j as u8)
                .collect();
            let fh = ck.create(&path).unwrap();
            for (n, chunk) in data.chunks(WRITE as usize).enumerate() {
                ck.write(fh, n as u64 * WRITE, chunk).unwrap();
                demote_step(&ck);
            }
            ck.fsync(fh).unwrap();
            ck.release(fh);
            if version > VERSIONS {
                let old = p(&format!("ckpt/{id}/v{}", version - VERSIONS));
                ck.unlink(&old).unwrap();
                c.remove_file(&old).unwrap();
            }
            // A failure: the restart reads the newest checkpoint whole.
            if fails(mtbf, k) {
                let fh = ck.open_file(&path, false, false).unwrap();
                assert_eq!(ck.read(fh, 0, 2 * CKPT).unwrap(), data, "{path}");
                ck.release(fh);
            }
        }
        // Idle until the next burst: everything closed is demoted.
        while demote_step(&ck) {}
        assert_eq!(ck.status().staged.0, 0, "{}: all demoted", scheme.name());
    }
    Arm {
        name: scheme.name(),
        stats: ck.status().stats,
    }
}

/// BBOS against MaxBW (and MaxEff and DataWarp, as on the mount) over ten
/// synchronised bursts of 1.9 S. Asserted, as the mount measured:
/// - MaxBW stages every checkpoint (no spill, none direct); BBOS sends
///   most of them straight to the capacity tier (the colder jobs');
/// - MaxBW demotes at least twice what BBOS does, and its fast tier
///   carries at least twice the bytes (checkpoint writes + demotion
///   reads): the load on the one channel behind MaxBW's lower throughput;
/// - MaxBW's restarts hit the fast tier more often than BBOS's (all of
///   them): the price of cold-first;
/// - MaxEff and DataWarp also send part of the bursts to the capacity
///   tier, and demote less than MaxBW.
#[test]
fn bursts_beyond_s_maxbw_demotes_more_and_bbos_sends_cold_checkpoints_direct() {
    let dir = tempfile::tempdir().unwrap();
    let arm = |scheme, eviction, name: &str| {
        let d = dir.path().join(name);
        std::fs::create_dir(&d).unwrap();
        run(scheme, eviction, &d)
    };
    let bbos = arm(
        Scheme::Bbos,
        Eviction::Bbos {
            version_aware: true,
        },
        "bbos",
    );
    // The baselines with LRU, as scripts/bench-bbos.sh runs them.
    let maxbw = arm(Scheme::MaxBw, Eviction::Lru, "maxbw");
    let maxeff = arm(Scheme::MaxEff, Eviction::Lru, "maxeff");
    let datawarp = arm(Scheme::DataWarp, Eviction::Lru, "datawarp");
    let arms = [&bbos, &maxbw, &maxeff, &datawarp];
    eprintln!("scheme    staged/cold/spilled  demoted KiB  fast-tier KiB  restart hits/misses");
    for a in arms {
        let s = &a.stats;
        eprintln!(
            "{:<9} {:>6}/{}/{}  {:>11}  {:>13}  {}/{}",
            a.name,
            s.checkpoints - s.cold_direct - s.spills,
            s.cold_direct,
            s.spills,
            s.demoted_bytes / KIB,
            a.fast_bytes() / KIB,
            s.restart_hits,
            s.restart_misses,
        );
    }
    let restarts: u64 = (0..PERIODS)
        .map(|k| JOBS.iter().filter(|(_, m)| fails(*m, k)).count() as u64)
        .sum();
    for a in arms {
        let s = &a.stats;
        assert_eq!(s.checkpoints, PERIODS * 3, "{}", a.name);
        assert_eq!(
            s.staged_written_bytes + s.direct_bytes,
            PERIODS * 3 * CKPT,
            "{}: every byte written once, staged or direct",
            a.name
        );
        assert_eq!(a.restarts(), restarts, "{}", a.name);
        assert_eq!(s.admission_timeouts, 0, "{}: no job waited", a.name);
    }
    // MaxBW stages everything (its wait before start always ended with
    // room, as on the mount: 30 / 0 / 0).
    assert_eq!(
        (maxbw.stats.cold_direct, maxbw.stats.spills),
        (0, 0),
        "MaxBW stages every checkpoint"
    );
    assert_eq!(maxbw.stats.direct_bytes, 0);
    // BBOS: the colder jobs' checkpoints go straight to the capacity tier.
    assert!(
        bbos.stats.cold_direct > bbos.stats.checkpoints / 2
            && bbos.stats.direct_bytes > bbos.stats.staged_written_bytes,
        "BBOS sends most checkpoints direct: {:?}",
        bbos.stats
    );
    // The mechanism: MaxBW's demotion of everything loads the fast tier.
    assert!(
        maxbw.stats.demoted_bytes >= 2 * bbos.stats.demoted_bytes,
        "MaxBW demotes at least 2x BBOS: {} against {} KiB",
        maxbw.stats.demoted_bytes / KIB,
        bbos.stats.demoted_bytes / KIB
    );
    assert!(
        maxbw.fast_bytes() >= 2 * bbos.fast_bytes(),
        "MaxBW's fast tier carries at least 2x BBOS's bytes: {} against {} KiB",
        maxbw.fast_bytes() / KIB,
        bbos.fast_bytes() / KIB
    );
    // The price: BBOS's restarts of the jobs it sent direct miss.
    let (bh, mh) = (bbos.stats.restart_hits, maxbw.stats.restart_hits);
    assert!(bh > 0, "the hot job's restarts still hit under BBOS");
    assert!(
        mh == restarts && bh < mh,
        "MaxBW's restart hit ratio ({mh}/{restarts}) above BBOS's ({bh}/{restarts})"
    );
    // MaxEff and DataWarp send part of each burst direct too, and demote
    // less than MaxBW.
    for a in [&maxeff, &datawarp] {
        assert!(
            a.stats.direct_bytes > 0,
            "{} writes some checkpoints to the capacity tier",
            a.name
        );
        assert!(
            a.stats.demoted_bytes < maxbw.stats.demoted_bytes,
            "{} demotes less than MaxBW",
            a.name
        );
    }
}
