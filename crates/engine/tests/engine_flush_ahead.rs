//! A region flush writes the gaps between its short runs that newer
//! bytes filled, last, and the flush of those newer bytes' own region
//! does not write them again (docs/engine.md, "Bytes written ahead of
//! their region").
//!
//! The case: IO500's ior-hard, eight ranks writing interleaved records
//! of one file, each a little ahead of the others. When the first region
//! fills, its last stretch of the file has a record of some ranks and
//! holes where the others have not written yet; the next region fills
//! those holes. The drain of `fast-all`'s log wrote that stretch as one
//! short write per record, twice (once per region): 0.68× the disk.
//!
//! The bug feared most: a later flush skipping bytes that were not on the
//! capacity file, because a record was still being appended (its
//! sequence number taken, not yet indexed) when the earlier run looked
//! its range up.

mod gate_support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gate_support::{Gate, Gated, MARKER};
use sluice_engine::{Engine, EngineConfig};
use sluice_env::memory::MemBackend;
use sluice_env::{Backend, OpenOptions, RelPath, SystemClock};
use sluice_policy::detector::DetectorConfig;
use sluice_policy::flush_gate::FlushGateConfig;
use sluice_policy::redirector::{RedirectPolicy, RedirectorConfig};

/// One record: a rank's write.
const SLOT: u64 = 4096;
/// Bytes whose append the fast tier holds once armed (the capacity
/// tier's gate holds writes of [`MARKER`] bytes).
const HELD: u8 = 0xdd;

fn path(p: &str) -> RelPath {
    RelPath::new(p).unwrap()
}

/// The bytes of `slot`, written in `round`.
fn fill(slot: u64, round: u8) -> Vec<u8> {
    vec![(slot % 97) as u8 ^ round; SLOT as usize]
}

struct Rig {
    engine: Arc<Engine>,
    /// Holds the capacity tier's writes of [`MARKER`] bytes.
    flush_gate: Arc<Gate>,
    /// Holds the fast tier's appends of [`HELD`] bytes.
    append_gate: Arc<Gate>,
    capacity: Arc<dyn Backend>,
    writes: Arc<AtomicU64>,
}

/// Every write buffered, two regions of 1 MiB, runs of at most 256 KiB
/// (so runs below 64 KiB are short), nothing flushed but full regions.
fn rig() -> Rig {
    let flush_gate = Arc::new(Gate::default());
    let append_gate = Arc::new(Gate::default());
    let writes = Arc::new(AtomicU64::new(0));
    let memory: Arc<dyn Backend> = Arc::new(MemBackend::new());
    let capacity: Arc<dyn Backend> = Arc::new(Gated {
        writes: Arc::clone(&writes),
        ..Gated::new(Arc::clone(&memory), &flush_gate)
    });
    let fast: Arc<dyn Backend> = Arc::new(Gated {
        byte: HELD,
        ..Gated::new(Arc::new(MemBackend::new()), &append_gate)
    });
    let config = EngineConfig {
        redirector: RedirectorConfig {
            policy: RedirectPolicy::FastAll,
            detector: DetectorConfig { stream_len: 4 },
            ..RedirectorConfig::default()
        },
        regions: 2,
        region_bytes: 1024 * 1024,
        record_max_bytes: 64 * 1024,
        flush_run_max_bytes: 256 * 1024,
        flush_gate: FlushGateConfig {
            flush_idle: Duration::from_secs(3600),
            flush_age: None,
            ..FlushGateConfig::default()
        },
        ..EngineConfig::default()
    };
    let engine = Arc::new(
        Engine::open(
            fast,
            Arc::clone(&capacity),
            Arc::new(SystemClock::new()),
            config,
        )
        .unwrap(),
    );
    Rig {
        engine,
        flush_gate,
        append_gate,
        capacity: memory,
        writes,
    }
}

fn wait_for(what: &str, done: impl Fn() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "timed out: {what}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The first region: slots 0..128 whole (their bytes are [`MARKER`]s, so
/// the flush's first write is held), then the odd slots from 129 on, one
/// rank ahead of the other, until the region is full and its flush is
/// held at its first write; then the even slots from 128 on, in the second
/// region, while the flush is held. Returns the odd slots written, and
/// what lets the flush go on.
fn ragged_first_region(
    rig: &Rig,
    file: sluice_policy::FileId,
) -> (Vec<u64>, std::sync::mpsc::Sender<()>) {
    let (held, go) = rig.flush_gate.arm();
    for slot in 0..128 {
        rig.engine
            .write(file, slot * SLOT, &vec![MARKER; SLOT as usize])
            .unwrap();
    }
    let mut odd = Vec::new();
    let mut slot = 129;
    while held.try_recv().is_err() {
        assert!(slot < 1000, "the first region never filled");
        rig.engine.write(file, slot * SLOT, &fill(slot, 0)).unwrap();
        odd.push(slot);
        slot += 2;
        std::thread::sleep(Duration::from_millis(1));
    }
    // The rank behind catches up: the even slots, in the second region,
    // while the first region's flush is held.
    let last = *odd.last().unwrap();
    for slot in (128..=last + 1).step_by(2) {
        rig.engine.write(file, slot * SLOT, &fill(slot, 0)).unwrap();
    }
    (odd, go)
}

fn capacity_bytes(rig: &Rig, name: &str, offset: u64, len: u64) -> Vec<u8> {
    let file = rig
        .capacity
        .open(&path(name), OpenOptions::default())
        .unwrap();
    let mut back = vec![0; len as usize];
    let got = file.read_at(&mut back, offset).unwrap();
    back.truncate(got);
    back
}

#[test]
fn the_gaps_a_region_leaves_are_written_once_with_its_short_runs() {
    let rig = rig();
    let file = rig.engine.create(&path("shared")).unwrap();
    let (odd, flush) = ragged_first_region(&rig, file);
    let last = *odd.last().unwrap();
    flush.send(()).unwrap();
    wait_for("the first region flushed", || {
        rig.engine.stats().regions_flushed >= 1
    });
    // Nothing reached the capacity tier before the first region's flush.
    let first_flush = rig.writes.load(Ordering::SeqCst);
    rig.engine.drain().unwrap();
    let stats = rig.engine.stats();
    let size = (last + 2) * SLOT;
    // Every byte reached the capacity tier once.
    assert_eq!(
        stats.flushed_bytes, size,
        "bytes flushed (the file has {size}): the second region's flush wrote again \
         the bytes the first region's flush had written in its gaps"
    );
    // The odd slots went with the even ones between them, in runs of at
    // most 256 KiB (the stretch from slot 129 is about 1 MiB), not one
    // write per record.
    let stretch = (last - 129 + 1) * SLOT;
    let runs = stretch.div_ceil(256 * 1024);
    assert!(
        first_flush <= 2 + runs + 1,
        "the first region's flush made {first_flush} writes for 2 long runs and a \
         stretch of {stretch} bytes ({} short runs of its own)",
        odd.len()
    );
    for slot in 0..=last + 1 {
        let want = if slot < 128 {
            vec![MARKER; SLOT as usize]
        } else {
            fill(slot, 0)
        };
        assert_eq!(
            capacity_bytes(&rig, "shared", slot * SLOT, SLOT),
            want,
            "slot {slot} on the capacity tier"
        );
    }
}

#[test]
fn a_record_still_being_appended_when_a_run_looked_its_range_up_is_flushed_later() {
    let rig = rig();
    let file = rig.engine.create(&path("shared")).unwrap();
    let (odd, flush) = ragged_first_region(&rig, file);
    // A newer write of an odd slot in the middle of the stretch: its
    // append is held, so its record has its sequence number but is not
    // indexed when the first region's short runs are formed again and
    // written (the old bytes of the slot, from the first region).
    let over = odd[odd.len() / 2];
    let newer = vec![HELD; SLOT as usize];
    let (appending, let_append) = rig.append_gate.arm();
    let writer = {
        let engine = Arc::clone(&rig.engine);
        let newer = newer.clone();
        std::thread::spawn(move || engine.write(file, over * SLOT, &newer))
    };
    appending
        .recv_timeout(Duration::from_secs(10))
        .expect("the newer write's append is held");
    flush.send(()).unwrap();
    // The set is written, not retired: the retirement waits for the
    // record in flight (docs/crash-consistency.md, "superseded bytes").
    wait_for(
        "the first region's flush wrote the slot's older bytes",
        || capacity_bytes(&rig, "shared", over * SLOT, SLOT) == fill(over, 0),
    );
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(
        rig.engine.stats().regions_flushed,
        0,
        "the set retired while a record placed before its lookups was in flight"
    );
    let_append.send(()).unwrap();
    writer.join().unwrap().unwrap();
    wait_for("the first region retired", || {
        rig.engine.stats().regions_flushed >= 1
    });
    rig.engine.drain().unwrap();
    assert_eq!(
        capacity_bytes(&rig, "shared", over * SLOT, SLOT),
        newer,
        "the drain skipped the newer bytes as if the first flush had written them"
    );
    assert_eq!(rig.engine.read(file, over * SLOT, SLOT).unwrap(), newer);
}
