//! The memory copy of the newest log records (issue 32; engine/mirror.rs):
//! a write-back of records still in memory reads nothing from the fast
//! tier, records beyond the budget are read from the log, and the bug
//! feared most: a region filled again must never serve its old records'
//! copies for the new records at the same offsets.

mod gate_support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use gate_support::{Gate, Gated};
use sluice_engine::{Engine, EngineConfig};
use sluice_env::memory::MemBackend;
use sluice_env::{Backend, OpenOptions, RelPath, SystemClock};
use sluice_policy::redirector::{RedirectPolicy, RedirectorConfig};

const REGION: u64 = 256 * 1024;
const RECORD: usize = 4096;

struct Rig {
    engine: Engine,
    reads: Arc<AtomicU64>,
    capacity: Arc<dyn Backend>,
}

/// A `fast-all` engine of 2 regions keeping `memory_copy` bytes of copies.
fn rig(memory_copy: u64) -> Rig {
    // A fast tier that counts its reads (never armed: nothing is held).
    let fast = Gated::new(Arc::new(MemBackend::new()), &Arc::new(Gate::default()));
    let reads = Arc::clone(&fast.reads);
    let fast: Arc<dyn Backend> = Arc::new(fast);
    let capacity: Arc<dyn Backend> = Arc::new(MemBackend::new());
    let engine = Engine::open(
        fast,
        Arc::clone(&capacity),
        Arc::new(SystemClock::new()),
        EngineConfig {
            redirector: RedirectorConfig {
                policy: RedirectPolicy::FastAll,
                ..RedirectorConfig::default()
            },
            regions: 2,
            region_bytes: REGION,
            record_max_bytes: 64 * 1024,
            memory_copy_bytes: memory_copy,
            flush_gate: sluice_policy::flush_gate::FlushGateConfig {
                flush_age: None,
                ..Default::default()
            },
            ..EngineConfig::default()
        },
    )
    .unwrap();
    Rig {
        engine,
        reads,
        capacity,
    }
}

fn p(name: &str) -> RelPath {
    RelPath::new(name).unwrap()
}

/// `records` records of [`RECORD`] bytes: [`write_sized`].
fn write_records(engine: &Engine, name: &str, records: usize, seed: u8) -> Vec<u8> {
    write_sized(engine, name, records, RECORD, seed)
}

/// `records` records of `size` bytes, record `i` filled with `seed + i`,
/// written to the new file `name` backwards (so every byte is buffered and
/// a write-back must sort them); returns the file's bytes.
fn write_sized(engine: &Engine, name: &str, records: usize, size: usize, seed: u8) -> Vec<u8> {
    let id = engine.create(&p(name)).unwrap();
    let mut expected = vec![0u8; records * size];
    for i in (0..records).rev() {
        let data = vec![seed.wrapping_add(i as u8); size];
        engine.write(id, (i * size) as u64, &data).unwrap();
        expected[i * size..(i + 1) * size].copy_from_slice(&data);
    }
    engine.release(id);
    expected
}

fn on_capacity(capacity: &Arc<dyn Backend>, name: &str, len: usize) -> Vec<u8> {
    let file = capacity.open(&p(name), OpenOptions::default()).unwrap();
    let mut buf = vec![0; len];
    let read = file.read_full_at(&mut buf, 0).unwrap();
    assert_eq!(read, len, "{name} holds all its bytes");
    buf
}

#[test]
fn a_write_back_of_records_in_memory_reads_nothing_from_the_fast_tier() {
    let rig = rig(1 << 20);
    let expected = write_records(&rig.engine, "f", 32, 1);
    let before = rig.reads.load(Ordering::SeqCst);
    assert_eq!(
        rig.engine.sync_path(&p("f")).unwrap(),
        expected.len() as u64
    );
    assert_eq!(
        rig.reads.load(Ordering::SeqCst),
        before,
        "no read of the log"
    );
    assert!(on_capacity(&rig.capacity, "f", expected.len()) == expected);
    let stats = rig.engine.stats();
    assert_eq!(stats.memory_copy_misses, 0, "{stats:?}");
    assert!(stats.memory_copy_hits >= 32, "{stats:?}");
    assert_eq!(stats.memory_copy_bytes, expected.len() as u64, "{stats:?}");
    rig.engine.close();
}

#[test]
fn without_copies_or_beyond_their_budget_the_write_back_reads_the_log() {
    for (budget, hits) in [(0, false), (8 * RECORD as u64, true)] {
        let rig = rig(budget);
        let expected = write_records(&rig.engine, "f", 32, 7);
        let before = rig.reads.load(Ordering::SeqCst);
        rig.engine.sync_path(&p("f")).unwrap();
        assert!(
            rig.reads.load(Ordering::SeqCst) > before,
            "budget {budget}: the log was read"
        );
        assert!(on_capacity(&rig.capacity, "f", expected.len()) == expected);
        let stats = rig.engine.stats();
        assert!(stats.memory_copy_bytes <= budget, "{stats:?}");
        assert_eq!(
            stats.memory_copy_hits > 0,
            hits,
            "budget {budget}: {stats:?}"
        );
        assert_eq!(
            stats.memory_copy_misses > 0,
            hits,
            "budget {budget}: {stats:?}"
        );
        rig.engine.close();
    }
}

#[test]
fn a_region_filled_again_never_serves_its_old_copies() {
    // Room for small records' copies, none for a 32 KiB record's: the new
    // records at the old ones' offsets have no copy of their own.
    let big = 32 * 1024;
    let rig = rig(4 * RECORD as u64);
    // Region 0: "a"'s records, copies kept; drained, the region retired
    // with its records and their copies in place.
    write_records(&rig.engine, "a", 2, 10);
    rig.engine.drain().unwrap();
    assert_eq!(rig.engine.stats().memory_copy_bytes, 2 * RECORD as u64);
    // Region 1: "x", drained too.
    write_sized(&rig.engine, "x", 2, big, 50);
    rig.engine.drain().unwrap();
    // Region 0 is filled again by "b", whose name is as long as "a"'s: its
    // first record's payload starts where "a"'s did.
    let expected = write_sized(&rig.engine, "b", 2, big, 100);
    let stats = rig.engine.stats();
    assert_eq!(
        stats.memory_copy_bytes, 0,
        "the region's copies went: {stats:?}"
    );
    let id = rig.engine.open_file(&p("b")).unwrap();
    assert!(rig.engine.read(id, 0, expected.len() as u64).unwrap() == expected);
    rig.engine.release(id);
    rig.engine.sync_path(&p("b")).unwrap();
    assert!(on_capacity(&rig.capacity, "b", expected.len()) == expected);
    rig.engine.close();
}
