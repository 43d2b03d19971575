//! Restart and crash recovery (DESIGN §4.6): buffered data survives a
//! restart; after a crash at any sync point of the fast tier (and a power
//! cut of the capacity tier), every write acknowledged by a completed fsync
//! reads back, and a drain puts it on the capacity tier.

use std::sync::Arc;

use sluice_engine::{Engine, EngineConfig};
use sluice_env::crash::CrashBackend;
use sluice_env::memory::MemBackend;
use sluice_env::{Backend, OpenOptions, RelPath, SystemClock};
use sluice_policy::detector::DetectorConfig;
use sluice_policy::redirector::RedirectorConfig;

const SLOT: u64 = 4096;

fn config() -> EngineConfig {
    EngineConfig {
        redirector: RedirectorConfig {
            detector: DetectorConfig { stream_len: 4 },
            ..RedirectorConfig::default()
        },
        regions: 2,
        region_bytes: 4 * 1024 * 1024,
        record_max_bytes: 64 * 1024,
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
    Engine::open(
        Arc::clone(fast),
        Arc::clone(capacity),
        Arc::new(SystemClock::new()),
        config(),
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
    let Ok(id) = engine.create(path) else {
        return 0;
    };
    let mut durable = 0;
    for (i, &slot) in order.iter().enumerate() {
        if engine.write(id, slot * SLOT, &pattern(i as u64)).is_err() {
            return durable;
        }
        if i % 3 == 2 {
            if engine.fsync(id).is_err() {
                return durable;
            }
            durable = i + 1;
        }
    }
    durable
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
            let engine = open(&f, &c).unwrap_or_else(|e| {
                panic!("crash at sync {n} (torn {torn}): recovery failed: {e}")
            });
            if durable == 0 {
                continue;
            }
            let id = engine
                .open_file(&path)
                .unwrap_or_else(|e| panic!("crash at sync {n}: fsynced file lost: {e}"));
            for (i, &slot) in order.iter().enumerate().take(durable) {
                let got = engine.read(id, slot * SLOT, SLOT).unwrap();
                assert!(
                    got == pattern(i as u64),
                    "crash at sync {n} (torn {torn}): write {i} (slot {slot}) lost: read {} bytes starting {:?}",
                    got.len(),
                    &got[..got.len().min(8)]
                );
            }
            engine.drain().unwrap();
            assert_eq!(engine.buffered_bytes(), 0);
        }
    }
}
