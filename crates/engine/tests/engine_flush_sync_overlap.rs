//! A sync that comes while a region flush is under way writes only what
//! the flush has not written yet (docs/engine.md, "Write-back"): the
//! flush's runs leave their bytes indexed until the regions retire, and a
//! sync in between used to write them to the capacity tier a second time.
//!
//! The bug this would have caught: IO500's ior-easy under `fast-all` and
//! close-to-open wrote 692 MiB to the disk for its 512 (issue 32): the
//! eight ranks' closes came while the flusher flushed a full region, and
//! each close wrote its file's share of that region again. And the other
//! way round: a flush run that waited for a sync looked its range up
//! while the sync's clean record was still on its way, and wrote the
//! sync's bytes again (523–528 MiB for 512).

mod gate_support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use gate_support::{fast_all, Gate, Gated, SyncGated, MARKER};
use sluice_env::memory::MemBackend;
use sluice_env::{Backend, RelPath};

fn path(p: &str) -> RelPath {
    RelPath::new(p).unwrap()
}

/// `name` on the capacity tier holds exactly `data`.
fn assert_on_capacity(capacity: &Arc<dyn Backend>, name: &str, data: &[u8]) {
    let file = capacity
        .open(&path(name), sluice_env::OpenOptions::default())
        .unwrap();
    let mut back = vec![0; data.len()];
    assert_eq!(file.read_at(&mut back, 0).unwrap(), data.len());
    assert_eq!(back, data);
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
    assert_on_capacity(&capacity, "a", &data);
    assert_eq!(engine.read(b, 0, 4096).unwrap(), vec![MARKER; 4096]);
}

#[test]
fn a_flush_run_that_waited_for_a_sync_does_not_write_the_syncs_bytes_again() {
    let gate = Arc::new(Gate::default());
    let fast: Arc<dyn Backend> = Arc::new(SyncGated {
        inner: Arc::new(MemBackend::new()),
        gate: Arc::clone(&gate),
    });
    let capacity = Gated::new(Arc::new(MemBackend::new()), &Arc::new(Gate::default()));
    let capacity_writes = Arc::clone(&capacity.writes);
    let capacity: Arc<dyn Backend> = Arc::new(capacity);
    let engine = fast_all(fast, &capacity);
    let a = engine.create(&path("a")).unwrap();
    let data: Vec<u8> = (0..256 * 1024u32).map(|i| (i % 251) as u8).collect();
    engine.write(a, 0, &data).unwrap();
    // The sync writes `a` back and syncs the capacity file, then its clean
    // record's log sync is held: the bytes are on the capacity tier and
    // still indexed.
    let (held, go) = gate.arm();
    let sync = {
        let engine = Arc::clone(&engine);
        std::thread::spawn(move || engine.sync_file(a, true))
    };
    held.recv_timeout(Duration::from_secs(10)).unwrap();
    let written_by_sync = capacity_writes.load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        written_by_sync > 0,
        "the sync wrote `a` before its clean record"
    );
    // A drain now: its flush run of `a` looks the range up in that window.
    let (done_tx, done) = std::sync::mpsc::channel();
    let drain = {
        let engine = Arc::clone(&engine);
        std::thread::spawn(move || {
            let result = engine.drain();
            let _ = done_tx.send(());
            result
        })
    };
    let drained_while_held = done.recv_timeout(Duration::from_secs(5)).is_ok();
    let flushed = engine.stats().flushed_bytes;
    go.send(()).unwrap();
    assert_eq!(sync.join().unwrap().unwrap(), data.len() as u64);
    drain.join().unwrap().unwrap();
    assert!(
        drained_while_held,
        "the drain did not wait for the clean record"
    );
    assert_eq!(flushed, 0, "the flush wrote the sync's bytes again");
    assert_eq!(
        capacity_writes.load(std::sync::atomic::Ordering::SeqCst),
        written_by_sync,
        "no write after the sync's"
    );
    assert_on_capacity(&capacity, "a", &data);
}
