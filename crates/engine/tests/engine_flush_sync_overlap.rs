//! A sync that comes while a region flush is under way writes only what
//! the flush has not written yet (docs/engine.md, "Write-back"): the
//! flush's runs leave their bytes indexed until the regions retire, and a
//! sync in between used to write them to the capacity tier a second time.
//!
//! The bug this would have caught: IO500's ior-easy under `fast-all` and
//! close-to-open wrote 692 MiB to the disk for its 512 (issue 32): the
//! eight ranks' closes came while the flusher flushed a full region, and
//! each close wrote its file's share of that region again.

mod gate_support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use gate_support::{fast_all, Gate, Gated, MARKER};
use sluice_env::memory::MemBackend;
use sluice_env::{Backend, RelPath};

fn path(p: &str) -> RelPath {
    RelPath::new(p).unwrap()
}

#[test]
fn a_sync_during_a_region_flush_syncs_what_the_flush_wrote_instead_of_writing_it_again() {
    let gate = Arc::new(Gate::default());
    let fast: Arc<dyn Backend> = Arc::new(MemBackend::new());
    let capacity: Arc<dyn Backend> = Arc::new(Gated::new(Arc::new(MemBackend::new()), &gate));
    let engine = fast_all(fast, &capacity);
    // File `a` first: its run is flushed before `b`'s (file order).
    let a = engine.create(&path("a")).unwrap();
    // No MARKER byte in it: the gate holds only `b`'s write.
    let data: Vec<u8> = (0..256 * 1024u32).map(|i| (i % 199) as u8).collect();
    assert!(!data.contains(&MARKER));
    engine.write(a, 0, &data).unwrap();
    let b = engine.create(&path("b")).unwrap();
    engine.write(b, 0, &[MARKER; 4096]).unwrap();
    // The drain flushes the region: `a`'s run lands, `b`'s is held, so the
    // region is still flushing (its bytes indexed) when `a` is synced.
    let (held, go) = gate.arm();
    let drain = {
        let engine = Arc::clone(&engine);
        std::thread::spawn(move || engine.drain())
    };
    held.recv_timeout(Duration::from_secs(10)).unwrap();
    // `a`'s write may still be landing: the turn passes as it is issued.
    let started = Instant::now();
    while engine.stats().flushed_bytes < data.len() as u64
        && started.elapsed() < Duration::from_secs(10)
    {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(
        engine.stats().flushed_bytes,
        data.len() as u64,
        "`a`'s run landed"
    );
    // Close-to-open's fsync: every buffered byte on the capacity file.
    let written = engine.sync_file_and_fsync(a).unwrap();
    let synced = engine.stats().synced_bytes;
    go.send(()).unwrap();
    drain.join().unwrap().unwrap();
    assert_eq!(
        (written, synced),
        (0, 0),
        "the sync wrote again bytes the flush had written already"
    );
    // Every byte is on the capacity tier, read back through the tier.
    let file = capacity
        .open(&path("a"), sluice_env::OpenOptions::default())
        .unwrap();
    let mut back = vec![0; data.len()];
    assert_eq!(file.read_at(&mut back, 0).unwrap(), data.len());
    assert_eq!(back, data);
    assert_eq!(engine.read(b, 0, 4096).unwrap(), vec![MARKER; 4096]);
}
