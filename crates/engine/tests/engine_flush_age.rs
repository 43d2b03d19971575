//! Flush by age: buffered bytes older than `flush_age` reach the capacity
//! tier without a drain, from a region that is not full; without an age
//! they stay in the log (issue 18: 10 MiB written with fast-all were still
//! not on the capacity tier 60 s later).

// The age is wall-clock time: the test measures elapsed time (as a lower
// bound, which a slow machine cannot break) and waits with a deadline.
#![allow(clippy::disallowed_methods)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_engine::{Engine, EngineConfig};
use sluice_env::memory::MemBackend;
use sluice_env::{Backend, OpenOptions, RelPath, SystemClock};
use sluice_policy::flush_gate::FlushGateConfig;
use sluice_policy::redirector::{RedirectPolicy, RedirectorConfig};

const KIB: u64 = 1024;

/// Writes 64 KiB with fast-all and returns when (after the write) the
/// capacity tier held all of it, or `None` if it did not within `wait`.
fn flushed_after(age: Option<Duration>, wait: Duration) -> Option<Duration> {
    let fast: Arc<dyn Backend> = Arc::new(MemBackend::new());
    let capacity: Arc<dyn Backend> = Arc::new(MemBackend::new());
    let config = EngineConfig {
        redirector: RedirectorConfig {
            policy: RedirectPolicy::FastAll,
            ..RedirectorConfig::default()
        },
        regions: 2,
        region_bytes: 4 * 1024 * KIB,
        record_max_bytes: 64 * 1024,
        flush_gate: FlushGateConfig {
            flush_age: age,
            ..FlushGateConfig::default()
        },
        ..EngineConfig::default()
    };
    let engine = Engine::open(
        Arc::clone(&fast),
        Arc::clone(&capacity),
        Arc::new(SystemClock::new()),
        config,
    )
    .unwrap();
    let path = RelPath::new("f").unwrap();
    let id = engine.create(&path).unwrap();
    engine.write(id, 0, &[7u8; 64 * KIB as usize]).unwrap();
    let written = Instant::now();
    let file = capacity.open(&path, OpenOptions::default()).unwrap();
    while written.elapsed() < wait {
        let mut buf = vec![0u8; 64 * KIB as usize];
        let n = file.read_at(&mut buf, 0).unwrap();
        if n == buf.len() && buf.iter().all(|&b| b == 7) {
            return Some(written.elapsed());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

#[test]
fn bytes_older_than_the_flush_age_reach_the_capacity_tier_without_a_drain() {
    let age = Duration::from_millis(300);
    let at = flushed_after(Some(age), Duration::from_secs(20)).expect("flushed by age");
    assert!(at >= age, "flushed after {at:?}, before the age {age:?}");
}

#[test]
fn without_a_flush_age_a_partly_filled_region_stays_in_the_log() {
    assert_eq!(flushed_after(None, Duration::from_millis(1500)), None);
}

/// `sluice top` and `sluice status` show how long the oldest buffered
/// bytes have waited: none before a write, at least the time slept after
/// it, none again once a drain has flushed them or a sync has written
/// them to the capacity tier (and counted them as synced).
#[test]
fn status_reports_the_age_of_the_oldest_buffered_write() {
    let config = EngineConfig {
        redirector: RedirectorConfig {
            policy: RedirectPolicy::FastAll,
            ..RedirectorConfig::default()
        },
        ..EngineConfig::default()
    };
    let engine = Engine::open(
        Arc::new(MemBackend::new()),
        Arc::new(MemBackend::new()),
        Arc::new(SystemClock::new()),
        config,
    )
    .unwrap();
    assert_eq!(engine.status().oldest_buffered_age, None);
    let id = engine.create(&RelPath::new("f").unwrap()).unwrap();
    engine.write(id, 0, &[7u8; 4096]).unwrap();
    let slept = Duration::from_millis(200);
    std::thread::sleep(slept);
    let age = engine
        .status()
        .oldest_buffered_age
        .expect("bytes are buffered");
    assert!(age >= slept, "age {age:?} after sleeping {slept:?}");
    assert!(
        age < Duration::from_secs(60),
        "age {age:?} is not from this write"
    );
    engine.drain().unwrap();
    assert_eq!(engine.status().oldest_buffered_age, None);
    // A per-file sync (close-to-open) takes the bytes out of the index
    // though their region waits for a flush: nothing buffered, no age.
    engine.write(id, 0, &[8u8; 4096]).unwrap();
    assert!(engine.status().oldest_buffered_age.is_some());
    assert_eq!(engine.sync_file(id, false).unwrap(), 4096);
    let status = engine.status();
    assert_eq!(status.buffered_bytes, 0);
    assert_eq!(status.oldest_buffered_age, None);
    assert_eq!(status.stats.synced_bytes, 4096);
}
