//! The flush bandwidth cap: the flusher never writes to the capacity tier
//! faster than `flush_bandwidth` (plus one run of burst), and without a cap
//! it is not slowed.

// The cap is a rate: the test measures elapsed wall-clock time (a lower
// bound only, which sleeping can never break).
#![allow(clippy::disallowed_methods)]

use std::num::NonZeroU64;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_engine::{Engine, EngineConfig};
use sluice_env::memory::MemBackend;
use sluice_env::{Backend, OpenOptions, RelPath, SystemClock};
use sluice_policy::redirector::{RedirectPolicy, RedirectorConfig};

const KIB: u64 = 1024;

fn drain_time(cap: Option<NonZeroU64>) -> (Duration, Arc<dyn Backend>) {
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
        flush_run_max_bytes: 64 * KIB,
        flush_bandwidth: cap,
        ..EngineConfig::default()
    };
    let engine = Engine::open(
        Arc::clone(&fast),
        Arc::clone(&capacity),
        Arc::new(SystemClock::new()),
        config,
    )
    .unwrap();
    let id = engine.create(&RelPath::new("f").unwrap()).unwrap();
    // 1 MiB in 16 KiB writes, every other slot, so runs do not merge.
    for i in 0..64u64 {
        engine
            .write(id, i * 32 * KIB, &[i as u8 | 1; 16 * KIB as usize])
            .unwrap();
    }
    let start = Instant::now();
    engine.drain().unwrap();
    (start.elapsed(), capacity)
}

#[test]
fn a_flush_bandwidth_cap_bounds_the_drain_rate() {
    // 1 MiB at 2 MiB/s with a 64 KiB burst: at least (1024 - 64) / 2048 s.
    let (capped, capacity) = drain_time(NonZeroU64::new(2 * 1024 * KIB));
    assert!(
        capped >= Duration::from_millis(460),
        "1 MiB drained in {capped:?} under a 2 MiB/s cap"
    );
    // Every byte arrived all the same.
    let file = capacity
        .open(&RelPath::new("f").unwrap(), OpenOptions::default())
        .unwrap();
    for i in 0..64u64 {
        let mut buf = vec![0u8; 16 * KIB as usize];
        file.read_at(&mut buf, i * 32 * KIB).unwrap();
        assert!(buf.iter().all(|&b| b == i as u8 | 1), "slot {i}");
    }
    let (free, _) = drain_time(None);
    assert!(
        free < capped,
        "without a cap the drain took {free:?}, with one {capped:?}"
    );
}
