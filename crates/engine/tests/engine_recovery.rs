//! Restart and crash recovery (DESIGN §4.6): buffered data survives a
//! restart; after a crash at any sync point of the fast tier (and a power
//! cut of the capacity tier), or at any sync point of the capacity tier
//! while regions are being flushed and reused (and a power cut of the fast
//! tier), every write acknowledged by a completed fsync reads back, and a
//! drain puts it on the capacity tier.

use std::sync::Arc;

use sluice_engine::{Engine, EngineConfig};
use sluice_env::crash::CrashBackend;
use sluice_env::memory::MemBackend;
use sluice_env::{Backend, OpenOptions, RelPath, SystemClock};
use sluice_policy::detector::DetectorConfig;
use sluice_policy::redirector::RedirectorConfig;
use sluice_policy::FileId;

const SLOT: u64 = 4096;

fn config() -> EngineConfig {
    EngineConfig {
        regions: 2,
        region_bytes: 4 * 1024 * 1024,
        ..flushing_config()
    }
}

/// Small regions, so the workload fills, flushes and reuses them many
/// times: every flush syncs capacity files before a region is reset.
fn flushing_config() -> EngineConfig {
    EngineConfig {
        redirector: RedirectorConfig {
            detector: DetectorConfig { stream_len: 4 },
            ..RedirectorConfig::default()
        },
        regions: 3,
        region_bytes: 24 * 1024,
        record_max_bytes: 16 * 1024,
        ..EngineConfig::default()
    }
}

fn pattern(i: u64) -> Vec<u8> {
    (0..SLOT)
        .map(|b| (i as u8).wrapping_mul(31).wrapping_add(b as u8) | 1)
        .collect()
}

/// Shuffled slots: a random pattern, so most writes go to the log.
fn slots(n: u64) -> Vec<u64> {
    let mut v: Vec<u64> = (0..n).collect();
    let mut x = 0x5eedu64;
    for i in (1..v.len()).rev() {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        v.swap(i, (x >> 33) as usize % (i + 1));
    }
    v
}

fn open(fast: &Arc<dyn Backend>, capacity: &Arc<dyn Backend>) -> std::io::Result<Engine> {
    open_with(fast, capacity, config())
}

fn open_with(
    fast: &Arc<dyn Backend>,
    capacity: &Arc<dyn Backend>,
    config: EngineConfig,
) -> std::io::Result<Engine> {
    Engine::open(
        Arc::clone(fast),
        Arc::clone(capacity),
        Arc::new(SystemClock::new()),
        config,
    )
}

#[test]
fn buffered_data_survives_a_restart() {
    let fast: Arc<dyn Backend> = Arc::new(MemBackend::new());
    let capacity: Arc<dyn Backend> = Arc::new(MemBackend::new());
    let path = RelPath::new("f").unwrap();
    let order = slots(48);
    {
        let engine = open(&fast, &capacity).unwrap();
        let id = engine.create(&path).unwrap();
        for (i, &slot) in order.iter().enumerate() {
            engine.write(id, slot * SLOT, &pattern(i as u64)).unwrap();
        }
        engine.fsync(id).unwrap();
        assert!(
            engine.buffered_bytes() > 0,
            "the random writes are buffered"
        );
        engine.close();
    }
    let engine = open(&fast, &capacity).unwrap();
    let stats = engine.stats();
    assert!(stats.recovered_records > 0, "{stats:?}");
    let id = engine.open_file(&path).unwrap();
    for (i, &slot) in order.iter().enumerate() {
        assert!(
            engine.read(id, slot * SLOT, SLOT).unwrap() == pattern(i as u64),
            "slot {slot}"
        );
    }
    engine.drain().unwrap();
    let file = capacity.open(&path, OpenOptions::default()).unwrap();
    for (i, &slot) in order.iter().enumerate() {
        let mut buf = vec![0u8; SLOT as usize];
        file.read_at(&mut buf, slot * SLOT).unwrap();
        assert!(buf == pattern(i as u64), "slot {slot} on the capacity tier");
    }
}

/// The workload: writes to shuffled slots, an fsync after every third.
/// Returns how many writes a completed fsync acknowledged before the first
/// error (the crash).
fn workload(engine: &Engine, path: &RelPath, order: &[u64]) -> usize {
    workload_draining(engine, path, order, usize::MAX)
}

/// [`workload`], with a drain after every `drain_every` writes.
fn workload_draining(engine: &Engine, path: &RelPath, order: &[u64], drain_every: usize) -> usize {
    workload_with(engine, path, order, drain_every, Engine::fsync)
}

/// The workload, each third write acknowledged by `ack` (an fsync, or
/// close-to-open's per-file sync, which writes the bytes back and appends
/// a clean record), with a drain after every `drain_every` writes.
fn workload_with(
    engine: &Engine,
    path: &RelPath,
    order: &[u64],
    drain_every: usize,
    ack: fn(&Engine, FileId) -> std::io::Result<()>,
) -> usize {
    let Ok(id) = engine.create(path) else {
        return 0;
    };
    let mut durable = 0;
    for (i, &slot) in order.iter().enumerate() {
        if engine.write(id, slot * SLOT, &pattern(i as u64)).is_err() {
            return durable;
        }
        if i % 3 == 2 {
            if ack(engine, id).is_err() {
                return durable;
            }
            durable = i + 1;
        }
        if i % drain_every == drain_every - 1 {
            if engine.drain().is_err() {
                return durable;
            }
            durable = i + 1;
        }
    }
    durable
}

/// Read back the first `durable` writes of `order` after a crash, then
/// drain and check nothing stays buffered.
fn check_durable(engine: &Engine, path: &RelPath, order: &[u64], durable: usize, what: &str) {
    if durable == 0 {
        return;
    }
    let id = engine
        .open_file(path)
        .unwrap_or_else(|e| panic!("{what}: fsynced file lost: {e}"));
    for (i, &slot) in order.iter().enumerate().take(durable) {
        let got = engine.read(id, slot * SLOT, SLOT).unwrap();
        assert!(
            got == pattern(i as u64),
            "{what}: write {i} (slot {slot}) lost: read {} bytes starting {:?}",
            got.len(),
            &got[..got.len().min(8)]
        );
    }
    engine.drain().unwrap();
    assert_eq!(engine.buffered_bytes(), 0, "{what}");
}

#[test]
fn every_fsynced_write_survives_a_crash_at_every_sync_point() {
    let path = RelPath::new("f").unwrap();
    let order = slots(30);
    // Dry run: how many sync points does the fast tier see?
    let total = {
        let fast = Arc::new(CrashBackend::new());
        let capacity = Arc::new(CrashBackend::new());
        let (f, c): (Arc<dyn Backend>, Arc<dyn Backend>) = (fast.clone(), capacity.clone());
        let engine = open(&f, &c).unwrap();
        assert_eq!(workload(&engine, &path, &order), order.len());
        engine.close();
        fast.sync_points()
    };
    assert!(total >= 10, "the workload syncs the log: {total}");
    for n in 1..=total {
        for torn in [false, true] {
            let fast = Arc::new(CrashBackend::new());
            let capacity = Arc::new(CrashBackend::new());
            fast.set_torn_writes(torn);
            capacity.set_torn_writes(torn);
            fast.crash_at(n);
            let (f, c): (Arc<dyn Backend>, Arc<dyn Backend>) = (fast.clone(), capacity.clone());
            let durable = match open(&f, &c) {
                Ok(engine) => {
                    let durable = workload(&engine, &path, &order);
                    engine.close();
                    durable
                }
                Err(_) => 0,
            };
            // Power cut: the capacity tier loses its unsynced bytes too.
            capacity.crash();
            fast.restart();
            capacity.restart();
            let what = format!("crash at fast sync {n} (torn {torn})");
            let engine = open(&f, &c).unwrap_or_else(|e| panic!("{what}: recovery failed: {e}"));
            check_durable(&engine, &path, &order, durable, &what);
        }
    }
}

#[test]
fn every_fsynced_write_survives_a_crash_at_every_capacity_sync_during_flushes() {
    let path = RelPath::new("f").unwrap();
    let order = slots(39);
    let drain_every = 13;
    // Dry run: the capacity tier's sync points (flushes, fsyncs, creates),
    // and proof that the workload really cycles the regions.
    let total = {
        let fast = Arc::new(CrashBackend::new());
        let capacity = Arc::new(CrashBackend::new());
        let (f, c): (Arc<dyn Backend>, Arc<dyn Backend>) = (fast.clone(), capacity.clone());
        let engine = open_with(&f, &c, flushing_config()).unwrap();
        let durable = workload_draining(&engine, &path, &order, drain_every);
        assert_eq!(durable, order.len());
        let flushed = engine.stats().regions_flushed;
        assert!(
            flushed >= 6,
            "the workload reuses regions: {flushed} flushed"
        );
        engine.close();
        capacity.sync_points()
    };
    assert!(total >= 12, "the capacity tier is synced: {total}");
    for n in 1..=total {
        for (torn, after) in [(false, false), (true, false), (true, true)] {
            let fast = Arc::new(CrashBackend::new());
            let capacity = Arc::new(CrashBackend::new());
            fast.set_torn_writes(torn);
            capacity.set_torn_writes(torn);
            if after {
                capacity.crash_after(n);
            } else {
                capacity.crash_at(n);
            }
            let (f, c): (Arc<dyn Backend>, Arc<dyn Backend>) = (fast.clone(), capacity.clone());
            let durable = match open_with(&f, &c, flushing_config()) {
                Ok(engine) => {
                    let durable = workload_draining(&engine, &path, &order, drain_every);
                    // Power cut: the fast tier loses its unsynced bytes
                    // too, as soon as the workload sees the crash.
                    fast.crash();
                    engine.close();
                    durable
                }
                Err(_) => 0,
            };
            fast.restart();
            capacity.restart();
            let what = format!("crash at capacity sync {n} (torn {torn}, after {after})");
            let engine = open_with(&f, &c, flushing_config())
                .unwrap_or_else(|e| panic!("{what}: recovery failed: {e}"));
            check_durable(&engine, &path, &order, durable, &what);
        }
    }
}

/// Close-to-open's acknowledgement: the file's buffered bytes written back
/// and synced, a clean record in the log, then the log synced.
fn sync_and_fsync(engine: &Engine, id: FileId) -> std::io::Result<()> {
    engine.sync_file_and_fsync(id).map(drop)
}

/// Issue 32: write-backs that end in clean records. A crash at every sync
/// point of either tier (the fast tier's, where clean records become
/// durable; the capacity tier's, where written-back bytes do) loses no
/// acknowledged write and brings back no older byte.
#[test]
fn every_synced_write_survives_a_crash_at_every_sync_point_of_either_tier() {
    let path = RelPath::new("f").unwrap();
    let order = slots(30);
    let run = |crash: &dyn Fn(&CrashBackend, &CrashBackend), torn: bool| {
        let fast = Arc::new(CrashBackend::new());
        let capacity = Arc::new(CrashBackend::new());
        fast.set_torn_writes(torn);
        capacity.set_torn_writes(torn);
        crash(&fast, &capacity);
        let (f, c): (Arc<dyn Backend>, Arc<dyn Backend>) = (fast.clone(), capacity.clone());
        let durable = match open(&f, &c) {
            Ok(engine) => {
                let durable = workload_with(&engine, &path, &order, usize::MAX, sync_and_fsync);
                engine.close();
                durable
            }
            Err(_) => 0,
        };
        // Power cut of both tiers.
        fast.crash();
        capacity.crash();
        fast.restart();
        capacity.restart();
        (f, c, durable)
    };
    let (fast_total, capacity_total) = {
        let fast = Arc::new(CrashBackend::new());
        let capacity = Arc::new(CrashBackend::new());
        let (f, c): (Arc<dyn Backend>, Arc<dyn Backend>) = (fast.clone(), capacity.clone());
        let engine = open(&f, &c).unwrap();
        assert_eq!(
            workload_with(&engine, &path, &order, usize::MAX, sync_and_fsync),
            order.len()
        );
        engine.close();
        (fast.sync_points(), capacity.sync_points())
    };
    assert!(
        fast_total >= 10 && capacity_total >= 10,
        "{fast_total} {capacity_total}"
    );
    for torn in [false, true] {
        for n in 1..=fast_total {
            let (f, c, durable) = run(&|fast, _| fast.crash_at(n), torn);
            let what = format!("crash at fast sync {n} (torn {torn})");
            let engine = open(&f, &c).unwrap_or_else(|e| panic!("{what}: recovery failed: {e}"));
            check_durable(&engine, &path, &order, durable, &what);
        }
        for n in 1..=capacity_total {
            let (f, c, durable) = run(&|_, capacity| capacity.crash_at(n), torn);
            let what = format!("crash at capacity sync {n} (torn {torn})");
            let engine = open(&f, &c).unwrap_or_else(|e| panic!("{what}: recovery failed: {e}"));
            check_durable(&engine, &path, &order, durable, &what);
        }
    }
}
