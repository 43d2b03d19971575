//! Issue 21: a drain told to stop (a second Ctrl-C during an unmount)
//! stops waiting, and the close that follows stops the flush between two
//! runs instead of finishing the merged pass at the capacity tier's pace.
//! The bytes not flushed stay in the log and the next open recovers every
//! one of them (docs/crash-consistency.md, "a stopped drain").

// The drain is slowed by a bandwidth cap: the test waits by wall clock.
#![allow(clippy::disallowed_methods)]

use std::num::NonZeroU64;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_engine::{Drained, Engine, EngineConfig};
use sluice_env::memory::MemBackend;
use sluice_env::{Backend, OpenOptions, RelPath, SystemClock};
use sluice_policy::redirector::{RedirectPolicy, RedirectorConfig};

const KIB: u64 = 1024;
const SLOTS: u64 = 32;

/// An engine whose drain of 2 MiB takes about 2 s: 1 MiB/s, 64 KiB runs,
/// one at a time.
fn open(fast: &Arc<dyn Backend>, capacity: &Arc<dyn Backend>) -> Engine {
    let config = EngineConfig {
        redirector: RedirectorConfig {
            policy: RedirectPolicy::FastAll,
            ..RedirectorConfig::default()
        },
        regions: 2,
        region_bytes: 4 * 1024 * KIB,
        record_max_bytes: 64 * 1024,
        flush_run_max_bytes: 64 * KIB,
        flush_bandwidth: NonZeroU64::new(1024 * KIB),
        flush_writers: 1,
        ..EngineConfig::default()
    };
    Engine::open(
        Arc::clone(fast),
        Arc::clone(capacity),
        Arc::new(SystemClock::new()),
        config,
    )
    .unwrap()
}

fn slot(i: u64) -> Vec<u8> {
    vec![i as u8 | 1; 64 * KIB as usize]
}

/// How many 64 KiB slots of `f` the capacity tier holds with their bytes.
fn slots_on_capacity(capacity: &Arc<dyn Backend>) -> u64 {
    let Ok(file) = capacity.open(&RelPath::new("f").unwrap(), OpenOptions::default()) else {
        return 0;
    };
    (0..SLOTS)
        .filter(|&i| {
            let mut buf = vec![0u8; 64 * KIB as usize];
            file.read_at(&mut buf, i * 128 * KIB).is_ok() && buf == slot(i)
        })
        .count() as u64
}

#[test]
fn issue_21_a_stopped_drain_keeps_the_rest_in_the_log_for_the_next_open() {
    let fast: Arc<dyn Backend> = Arc::new(MemBackend::new());
    let capacity: Arc<dyn Backend> = Arc::new(MemBackend::new());
    let engine = open(&fast, &capacity);
    let id = engine.create(&RelPath::new("f").unwrap()).unwrap();
    // Every other 64 KiB slot, so runs do not merge: 32 runs of 64 KiB.
    for i in 0..SLOTS {
        engine.write(id, i * 128 * KIB, &slot(i)).unwrap();
    }
    engine.release(id);
    let stop = AtomicBool::new(false);
    let started = Instant::now();
    let drained = std::thread::scope(|scope| {
        let drain = scope.spawn(|| engine.drain_or_stop(&stop));
        std::thread::sleep(Duration::from_millis(300));
        stop.store(true, Ordering::Relaxed);
        drain.join().unwrap()
    });
    assert_eq!(drained.unwrap(), Drained::Stopped);
    engine.close();
    let closed_after = started.elapsed();
    // The whole drain takes 2 s at the cap; the close did not wait for it.
    assert!(
        closed_after < Duration::from_millis(1500),
        "the close finished the flush: {closed_after:?}"
    );
    let flushed = slots_on_capacity(&capacity);
    assert!(
        flushed < SLOTS,
        "everything was flushed: the stop did nothing"
    );
    // The next open recovers the rest from the log: nothing is lost.
    let engine = open(&fast, &capacity);
    assert!(engine.buffered_bytes() > 0, "the log kept the rest");
    engine.drain().unwrap();
    assert_eq!(slots_on_capacity(&capacity), SLOTS);
    engine.close();
}

#[test]
fn a_drain_with_a_flag_never_set_drains_everything() {
    let fast: Arc<dyn Backend> = Arc::new(MemBackend::new());
    let capacity: Arc<dyn Backend> = Arc::new(MemBackend::new());
    let engine = open(&fast, &capacity);
    let id = engine.create(&RelPath::new("f").unwrap()).unwrap();
    for i in 0..4 {
        engine.write(id, i * 128 * KIB, &slot(i)).unwrap();
    }
    assert_eq!(
        engine.drain_or_stop(&AtomicBool::new(false)).unwrap(),
        Drained::All
    );
    assert_eq!(engine.buffered_bytes(), 0);
    engine.close();
}
