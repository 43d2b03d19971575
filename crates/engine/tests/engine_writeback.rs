//! Issue 32: a file's sync writes its buffered bytes back while writers of
//! the file go on. What they write meanwhile stays buffered (a clean
//! record drops only the records older than the write-back's bound), and
//! survives a restart, which replays the log with its clean records.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use sluice_devices::ssd::SsdConfig;
use sluice_engine::{Engine, EngineConfig};
use sluice_env::emulated::EmulatedBackend;
use sluice_env::memory::MemBackend;
use sluice_env::{Backend, Clock, OpenOptions, RelPath, SystemClock};
use sluice_policy::detector::DetectorConfig;
use sluice_policy::redirector::{RedirectPolicy, RedirectorConfig};

const SLOT: u64 = 8 * 1024;
const SLOTS: u64 = 64;

fn open(fast: &Arc<dyn Backend>, capacity: &Arc<dyn Backend>) -> Engine {
    Engine::open(
        Arc::clone(fast),
        Arc::clone(capacity),
        Arc::new(SystemClock::new()),
        EngineConfig {
            redirector: RedirectorConfig {
                policy: RedirectPolicy::FastAll,
                detector: DetectorConfig { stream_len: 4 },
                ..RedirectorConfig::default()
            },
            regions: 4,
            region_bytes: 1024 * 1024,
            record_max_bytes: 64 * 1024,
            ..EngineConfig::default()
        },
    )
    .unwrap()
}

fn fill(slot: u64, round: u32) -> Vec<u8> {
    vec![(slot as u8).wrapping_mul(31).wrapping_add(round as u8) | 1; SLOT as usize]
}

#[test]
fn writes_during_a_sync_stay_buffered_and_survive_a_restart() {
    let fast: Arc<dyn Backend> = Arc::new(MemBackend::new());
    // A capacity tier that takes its time (an emulated SSD), so many
    // writes land while each sync writes back.
    let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
    let capacity: Arc<dyn Backend> = Arc::new(
        EmulatedBackend::ssd(Arc::new(MemBackend::new()), SsdConfig::default(), clock).unwrap(),
    );
    let path = RelPath::new("shared").unwrap();
    let mut last: HashMap<u64, u32> = HashMap::new();
    {
        let engine = Arc::new(open(&fast, &capacity));
        let id = engine.create(&path).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let syncer = {
            let (engine, stop) = (Arc::clone(&engine), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut syncs = 0;
                while !stop.load(Ordering::Relaxed) {
                    engine.sync_file(id, true).unwrap();
                    syncs += 1;
                }
                syncs
            })
        };
        let mut x = 12345u64;
        for round in 0..2000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let slot = x % SLOTS;
            engine.write(id, slot * SLOT, &fill(slot, round)).unwrap();
            last.insert(slot, round);
        }
        stop.store(true, Ordering::Relaxed);
        let syncs = syncer.join().unwrap();
        assert!(syncs > 3, "the syncs ran beside the writes: {syncs}");
        // Bytes written after the last sync stay buffered: an fsync makes
        // them durable in the log, not on the capacity tier, and the
        // restart replays them after the clean records.
        for slot in 0..4 {
            engine.write(id, slot * SLOT, &fill(slot, 9999)).unwrap();
            last.insert(slot, 9999);
        }
        engine.fsync(id).unwrap();
        assert!(
            engine.buffered_bytes() > 0,
            "the last writes are still buffered"
        );
        engine.release(id);
        Arc::into_inner(engine).unwrap().close();
    }
    // Recovery replays the log, its clean records included.
    let engine = open(&fast, &capacity);
    let id = engine.open_file(&path).unwrap();
    for (&slot, &round) in &last {
        assert!(
            engine.read(id, slot * SLOT, SLOT).unwrap() == fill(slot, round),
            "slot {slot}: not its last write ({round}) after the restart"
        );
    }
    engine.drain().unwrap();
    let file = capacity.open(&path, OpenOptions::default()).unwrap();
    for (&slot, &round) in &last {
        let mut buf = vec![0u8; SLOT as usize];
        file.read_at(&mut buf, slot * SLOT).unwrap();
        assert!(buf == fill(slot, round), "slot {slot} on the capacity tier");
    }
}
