//! Engine benchmarks (issue 4), printed as tables:
//!
//! 1. **Absorption**: random 256 KiB writes absorbed by the log vs the same
//!    pattern written straight into a file in the fast-tier directory, both
//!    ending with an fsync, on the same real directory (target >= 0.8x).
//! 2. **Recovery**: `Engine::open` on a log of 1,000,000 buffered extents
//!    (64-byte writes, memory backend): extents per second (target >= 1 M/s).
//! 3. **Policies on emulated devices**: a sequential writer (64 MiB in 1 MiB
//!    writes) and a random writer (32 MiB in 256 KiB writes) at once, on an
//!    emulated 7200 rpm HDD (capacity) and SATA SSD (fast) over real files,
//!    under capacity-only / fast-all / ssdup / ssdup+: time for the
//!    writers (median), bytes sent to each tier (range over runs), drain time.
//!
//! 4. **Scaling**: N writers (1, 2, 4), each writing its own file with
//!    random 256 KiB writes and ending with an fsync, under capacity-only
//!    (every write a capacity-tier write) and fast-all (every write a log
//!    append), on real directories beside N threads writing N files of a
//!    raw directory, and on emulated SSD + HDD tiers: aggregate MB/s, and
//!    the speed-up over one writer. Writers of different files must not
//!    wait for each other's tier I/O.
//!
//! Run: `cargo bench -p sluice-engine --bench engine` (add `-- --quick` for
//! one run of each instead of three, `-- absorption` / `recovery` /
//! `policies` / `scaling` for one part). Times are wall clock on this
//! machine.

// A benchmark measures wall-clock time.
#![allow(clippy::disallowed_methods)]

use std::sync::Arc;
use std::time::Instant;

use sluice_devices::hdd::HddConfig;
use sluice_devices::ssd::SsdConfig;
use sluice_engine::{Engine, EngineConfig};
use sluice_env::emulated::EmulatedBackend;
use sluice_env::memory::MemBackend;
use sluice_env::posix::PosixBackend;
use sluice_env::{Backend, OpenOptions, RelPath, SystemClock};
use sluice_policy::redirector::{RedirectPolicy, RedirectorConfig};

const KIB: u64 = 1024;
const MIB: u64 = 1024 * 1024;

fn permutation(n: u64, seed: u64) -> Vec<u64> {
    let mut v: Vec<u64> = (0..n).collect();
    let mut x = seed;
    for i in (1..v.len()).rev() {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        v.swap(i, (x >> 33) as usize % (i + 1));
    }
    v
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// MB/s of writing `slots` (256 KiB each, random order) into a raw file.
fn raw_directory(dir: &std::path::Path, slots: &[u64], data: &[u8]) -> f64 {
    let backend = PosixBackend::new(dir.to_path_buf()).unwrap();
    let path = RelPath::new("raw").unwrap();
    let _ = backend.remove_file(&path);
    let file = backend.open(&path, OpenOptions::CREATE).unwrap();
    let start = Instant::now();
    for &slot in slots {
        file.write_at(data, slot * data.len() as u64).unwrap();
    }
    file.sync_data().unwrap();
    let mb = (slots.len() * data.len()) as f64 / 1e6;
    mb / start.elapsed().as_secs_f64()
}

/// MB/s of the same writes through the engine (fast-all: every write is
/// appended to the log on `fast`).
fn through_log(
    fast: &std::path::Path,
    capacity: &std::path::Path,
    slots: &[u64],
    data: &[u8],
) -> f64 {
    let _ = std::fs::remove_dir_all(fast);
    let _ = std::fs::remove_dir_all(capacity);
    std::fs::create_dir_all(fast).unwrap();
    std::fs::create_dir_all(capacity).unwrap();
    let config = EngineConfig {
        redirector: RedirectorConfig {
            policy: RedirectPolicy::FastAll,
            ..RedirectorConfig::default()
        },
        region_bytes: 512 * MIB,
        ..EngineConfig::default()
    };
    let engine = Engine::open(
        Arc::new(PosixBackend::new(fast.to_path_buf()).unwrap()),
        Arc::new(PosixBackend::new(capacity.to_path_buf()).unwrap()),
        Arc::new(SystemClock::new()),
        config,
    )
    .unwrap();
    let id = engine.create(&RelPath::new("f").unwrap()).unwrap();
    let start = Instant::now();
    for &slot in slots {
        engine.write(id, slot * data.len() as u64, data).unwrap();
    }
    engine.fsync(id).unwrap();
    let mb = (slots.len() * data.len()) as f64 / 1e6;
    let result = mb / start.elapsed().as_secs_f64();
    engine.close();
    result
}

fn absorption(runs: usize) {
    let dir =
        tempfile::tempdir_in(std::env::var("SLUICE_BENCH_DIR").unwrap_or_else(|_| ".".into()))
            .unwrap();
    let data = vec![0x5au8; 256 * KIB as usize];
    let slots = permutation(1024, 7); // 256 MiB
    let mut raw = Vec::new();
    let mut log = Vec::new();
    for _ in 0..runs {
        raw.push(raw_directory(dir.path(), &slots, &data));
        log.push(through_log(
            &dir.path().join("fast"),
            &dir.path().join("capacity"),
            &slots,
            &data,
        ));
    }
    let (raw, log) = (median(raw), median(log));
    let runs = runs.max(2);
    println!("\n1. Absorption: 256 MiB of random 256 KiB writes + fsync, same directory ({}), median of {runs}, alternating order", dir.path().display());
    println!("{:<34} {:>10}", "", "MB/s");
    println!("{:<34} {:>10.1}", "raw fast-tier directory (pwrite)", raw);
    println!("{:<34} {:>10.1}", "sluice log (fast-all)", log);
    println!("{:<34} {:>9.2}x   (target >= 0.8x)", "ratio", log / raw);
}

/// Write a log of `extents` buffered 64-byte extents on a fresh memory
/// backend and return the backends and config to reopen it.
fn build_log(extents: u64) -> (Arc<dyn Backend>, Arc<dyn Backend>, EngineConfig) {
    let fast: Arc<dyn Backend> = Arc::new(MemBackend::with_capacity(4 * 1024 * MIB));
    let capacity: Arc<dyn Backend> = Arc::new(MemBackend::new());
    let config = EngineConfig {
        redirector: RedirectorConfig {
            policy: RedirectPolicy::FastAll,
            ..RedirectorConfig::default()
        },
        regions: 2,
        region_bytes: 256 * MIB,
        ..EngineConfig::default()
    };
    let engine = Engine::open(
        Arc::clone(&fast),
        Arc::clone(&capacity),
        Arc::new(SystemClock::new()),
        config.clone(),
    )
    .unwrap();
    let id = engine.create(&RelPath::new("f").unwrap()).unwrap();
    let data = [7u8; 64];
    for i in 0..extents {
        engine.write(id, i * 128, &data).unwrap();
    }
    engine.fsync(id).unwrap();
    engine.close();
    (fast, capacity, config)
}

fn recovery(runs: usize) {
    let extents = 1_000_000u64;
    let mut rates = Vec::new();
    let mut seconds = Vec::new();
    for _ in 0..runs {
        // A fresh log each run: the reopened engine's flusher drains it.
        let (fast, capacity, config) = build_log(extents);
        let start = Instant::now();
        let engine = Engine::open(fast, capacity, Arc::new(SystemClock::new()), config).unwrap();
        let elapsed = start.elapsed().as_secs_f64();
        let recovered = engine.stats().recovered_records;
        engine.close();
        assert!(recovered >= extents, "recovered {recovered} records");
        seconds.push(elapsed);
        rates.push(recovered as f64 / elapsed);
    }
    println!("\n2. Recovery: Engine::open on a log of {extents} buffered extents (64 B writes, memory backend), median of {runs}");
    println!(
        "   {:.2} s, {:.2} M records/s (path + data records; target >= 1 M extents/s)",
        median(seconds),
        median(rates) / 1e6
    );
}

struct PolicyRun {
    writers_s: f64,
    fast_bytes: u64,
    capacity_bytes: u64,
    drain_s: f64,
}

fn emulated_run(policy: RedirectPolicy) -> PolicyRun {
    let dir =
        tempfile::tempdir_in(std::env::var("SLUICE_BENCH_DIR").unwrap_or_else(|_| ".".into()))
            .unwrap();
    std::fs::create_dir(dir.path().join("fast")).unwrap();
    std::fs::create_dir(dir.path().join("capacity")).unwrap();
    let clock = Arc::new(SystemClock::new());
    let fast: Arc<dyn Backend> = Arc::new(
        EmulatedBackend::ssd(
            Arc::new(PosixBackend::new(dir.path().join("fast")).unwrap()),
            SsdConfig::default(),
            clock.clone(),
        )
        .unwrap(),
    );
    let capacity: Arc<dyn Backend> = Arc::new(
        EmulatedBackend::hdd(
            Arc::new(PosixBackend::new(dir.path().join("capacity")).unwrap()),
            HddConfig::default(),
            clock.clone(),
            1,
        )
        .unwrap(),
    );
    let config = EngineConfig {
        redirector: RedirectorConfig {
            policy,
            ..RedirectorConfig::default()
        },
        region_bytes: 64 * MIB,
        ..EngineConfig::default()
    };
    let engine = Engine::open(fast, capacity, clock, config).unwrap();
    let seq = engine.create(&RelPath::new("seq").unwrap()).unwrap();
    let rnd = engine.create(&RelPath::new("rnd").unwrap()).unwrap();
    let big = vec![1u8; MIB as usize];
    let small = vec![2u8; 256 * KIB as usize];
    let start = Instant::now();
    std::thread::scope(|s| {
        s.spawn(|| {
            for i in 0..64 {
                engine.write(seq, i * MIB, &big).unwrap();
            }
            engine.fsync(seq).unwrap();
        });
        s.spawn(|| {
            for slot in permutation(1024, 3).into_iter().take(128) {
                engine.write(rnd, slot * 256 * KIB, &small).unwrap();
            }
            engine.fsync(rnd).unwrap();
        });
    });
    let writers_s = start.elapsed().as_secs_f64();
    let drain_start = Instant::now();
    engine.drain().unwrap();
    let drain_s = drain_start.elapsed().as_secs_f64();
    let stats = engine.stats();
    engine.close();
    PolicyRun {
        writers_s,
        fast_bytes: stats.fast_bytes + stats.forced_to_log_bytes,
        capacity_bytes: stats.capacity_bytes,
        drain_s,
    }
}

fn policies(runs: usize) {
    println!(
        "\n3. Sequential 64 MiB (1 MiB writes) + random 32 MiB (256 KiB writes) at once, emulated HDD + SSD, \
         {runs} runs each (the two writers interleave differently each run, so routing varies)"
    );
    println!(
        "{:<14} {:>12} {:>10} {:>16} {:>16} {:>10}",
        "policy", "writers s", "MB/s", "to fast MiB", "to HDD MiB", "drain s"
    );
    for policy in RedirectPolicy::ALL {
        let rs: Vec<PolicyRun> = (0..runs).map(|_| emulated_run(policy)).collect();
        let writers = median(rs.iter().map(|r| r.writers_s).collect());
        let range = |f: &dyn Fn(&PolicyRun) -> u64| {
            let lo = rs.iter().map(f).min().unwrap_or(0) as f64 / MIB as f64;
            let hi = rs.iter().map(f).max().unwrap_or(0) as f64 / MIB as f64;
            if (hi - lo).abs() < 0.05 {
                format!("{lo:.1}")
            } else {
                format!("{lo:.1}-{hi:.1}")
            }
        };
        println!(
            "{:<14} {:>12.2} {:>10.1} {:>16} {:>16} {:>10.2}",
            policy.name(),
            writers,
            (96 * MIB) as f64 / 1e6 / writers,
            range(&|r| r.fast_bytes),
            range(&|r| r.capacity_bytes),
            median(rs.iter().map(|r| r.drain_s).collect())
        );
    }
}

/// Which tiers a scaling run uses.
#[derive(Clone, Copy)]
enum Tiers {
    Real,
    Emulated,
}

/// Aggregate MB/s of `writers` threads, each writing `per_writer` bytes of
/// random 256 KiB writes to its own file and then fsyncing it, through an
/// engine under `policy` (`None`: a raw directory, no engine).
fn scaling_run(
    tiers: Tiers,
    policy: Option<RedirectPolicy>,
    writers: usize,
    per_writer: u64,
) -> f64 {
    let dir =
        tempfile::tempdir_in(std::env::var("SLUICE_BENCH_DIR").unwrap_or_else(|_| ".".into()))
            .unwrap();
    let data = vec![0x3cu8; 256 * KIB as usize];
    let slots = permutation(per_writer / (256 * KIB), 11);
    let Some(policy) = policy else {
        let raw = PosixBackend::new(dir.path().to_path_buf()).unwrap();
        let files: Vec<_> = (0..writers)
            .map(|w| {
                raw.open(
                    &RelPath::new(&format!("w{w}")).unwrap(),
                    OpenOptions::CREATE,
                )
                .unwrap()
            })
            .collect();
        let start = Instant::now();
        std::thread::scope(|s| {
            for file in &files {
                let (slots, data) = (&slots, &data);
                s.spawn(move || {
                    for &slot in slots {
                        file.write_at(data, slot * data.len() as u64).unwrap();
                    }
                    file.sync_data().unwrap();
                });
            }
        });
        return (writers as u64 * per_writer) as f64 / 1e6 / start.elapsed().as_secs_f64();
    };
    std::fs::create_dir(dir.path().join("fast")).unwrap();
    std::fs::create_dir(dir.path().join("capacity")).unwrap();
    let clock = Arc::new(SystemClock::new());
    let fast_dir: Arc<dyn Backend> = Arc::new(PosixBackend::new(dir.path().join("fast")).unwrap());
    let capacity_dir: Arc<dyn Backend> =
        Arc::new(PosixBackend::new(dir.path().join("capacity")).unwrap());
    let (fast, capacity): (Arc<dyn Backend>, Arc<dyn Backend>) = match tiers {
        Tiers::Real => (fast_dir, capacity_dir),
        Tiers::Emulated => (
            Arc::new(EmulatedBackend::ssd(fast_dir, SsdConfig::default(), clock.clone()).unwrap()),
            Arc::new(
                EmulatedBackend::hdd(capacity_dir, HddConfig::default(), clock.clone(), 1).unwrap(),
            ),
        ),
    };
    let config = EngineConfig {
        redirector: RedirectorConfig {
            policy,
            ..RedirectorConfig::default()
        },
        region_bytes: 512 * MIB,
        ..EngineConfig::default()
    };
    let engine = Engine::open(fast, capacity, clock, config).unwrap();
    let ids: Vec<_> = (0..writers)
        .map(|w| {
            engine
                .create(&RelPath::new(&format!("w{w}")).unwrap())
                .unwrap()
        })
        .collect();
    let start = Instant::now();
    std::thread::scope(|s| {
        for &id in &ids {
            let (engine, slots, data) = (&engine, &slots, &data);
            s.spawn(move || {
                for &slot in slots {
                    engine.write(id, slot * data.len() as u64, data).unwrap();
                }
                engine.fsync(id).unwrap();
            });
        }
    });
    let mbs = (writers as u64 * per_writer) as f64 / 1e6 / start.elapsed().as_secs_f64();
    engine.close();
    mbs
}

fn scaling(runs: usize) {
    println!(
        "\n4. N writers to N files, random 256 KiB writes + fsync each, aggregate MB/s \
         (median of {runs}; xN = speed-up over 1 writer)"
    );
    println!(
        "{:<10} {:<22} {:>14} {:>14} {:>14}",
        "tiers", "system", "1 writer", "2 writers", "4 writers"
    );
    let systems: [(Tiers, &str, Option<RedirectPolicy>, u64); 5] = [
        (Tiers::Real, "raw directory", None, 64 * MIB),
        (
            Tiers::Real,
            "sluice capacity-only",
            Some(RedirectPolicy::CapacityOnly),
            64 * MIB,
        ),
        (
            Tiers::Real,
            "sluice fast-all",
            Some(RedirectPolicy::FastAll),
            64 * MIB,
        ),
        (
            Tiers::Emulated,
            "sluice capacity-only",
            Some(RedirectPolicy::CapacityOnly),
            4 * MIB,
        ),
        (
            Tiers::Emulated,
            "sluice fast-all",
            Some(RedirectPolicy::FastAll),
            16 * MIB,
        ),
    ];
    for (tiers, name, policy, per_writer) in systems {
        let mut cells = Vec::new();
        let mut one = 0.0;
        for writers in [1, 2, 4] {
            let mbs = median(
                (0..runs)
                    .map(|_| scaling_run(tiers, policy, writers, per_writer))
                    .collect(),
            );
            if writers == 1 {
                one = mbs;
                cells.push(format!("{mbs:.1}"));
            } else {
                cells.push(format!("{mbs:.1} x{:.2}", mbs / one));
            }
        }
        let tiers = match tiers {
            Tiers::Real => "real",
            Tiers::Emulated => "emulated",
        };
        println!(
            "{:<10} {:<22} {:>14} {:>14} {:>14}",
            tiers, name, cells[0], cells[1], cells[2]
        );
    }
}

fn main() {
    // `cargo test --benches` runs this without `--bench`: stay quick there.
    let bench = std::env::args().any(|a| a == "--bench");
    if !bench {
        return;
    }
    let quick = std::env::args().any(|a| a == "--quick");
    let runs = if quick { 1 } else { 3 };
    // `-- absorption` (or recovery, policies) runs one part only.
    let only = ["absorption", "recovery", "policies", "scaling"]
        .into_iter()
        .find(|part| std::env::args().any(|a| a == *part));
    let wanted = |part: &str| only.is_none_or(|o| o == part);
    if wanted("absorption") {
        absorption(runs);
    }
    if wanted("recovery") {
        recovery(runs);
    }
    if wanted("policies") {
        policies(runs);
    }
    if wanted("scaling") {
        scaling(runs);
    }
}
