//! A sync of the log waits for the appends in flight that were reserved
//! before it, and only for those (docs/engine.md, "Write path"): the
//! records reserved after it lie past everything it covers, so they leave
//! no hole before a record it makes durable.
//!
//! The bug this would have caught: the wait was for no append in flight
//! at all. Under writers that keep one in flight without pause (eight IOR
//! ranks), an fsync, and a close-to-open write-back's clean record (and
//! the flusher waiting on it), waited until the burst ended (issue 32:
//! IO500's mixed pattern wrote back 4 MiB during its whole burst).

mod gate_support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use gate_support::{fast_all, gated_memory, MARKER};
use sluice_env::memory::MemBackend;
use sluice_env::{Backend, RelPath};

fn path(p: &str) -> RelPath {
    RelPath::new(p).unwrap()
}

#[test]
fn an_fsync_waits_for_the_appends_reserved_before_it_and_not_after() {
    let (gate, fast) = gated_memory();
    let capacity: Arc<dyn Backend> = Arc::new(MemBackend::new());
    let engine = fast_all(fast, &capacity);
    let a = engine.create(&path("a")).unwrap();
    engine.write(a, 0, b"acknowledged").unwrap();
    // An append of another file held in flight, reserved before the fsync.
    let (held, go_before) = gate.arm();
    let x = engine.create(&path("x")).unwrap();
    let before = {
        let engine = Arc::clone(&engine);
        std::thread::spawn(move || engine.write(x, 0, &[MARKER; 4096]).unwrap())
    };
    held.recv_timeout(Duration::from_secs(10)).unwrap();
    let syncer = {
        let engine = Arc::clone(&engine);
        std::thread::spawn(move || engine.fsync(a))
    };
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        !syncer.is_finished(),
        "the fsync waits for the append reserved before it (a hole before its records)"
    );
    // Another append, reserved after the fsync began, held in flight.
    let (held, go_after) = gate.arm();
    let y = engine.create(&path("y")).unwrap();
    let after = {
        let engine = Arc::clone(&engine);
        std::thread::spawn(move || engine.write(y, 0, &[MARKER; 4096]).unwrap())
    };
    held.recv_timeout(Duration::from_secs(10)).unwrap();
    go_before.send(()).unwrap();
    before.join().unwrap();
    let started = Instant::now();
    while !syncer.is_finished() && started.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let finished = syncer.is_finished();
    go_after.send(()).unwrap();
    after.join().unwrap();
    syncer.join().unwrap().unwrap();
    assert!(
        finished,
        "the fsync waited for an append reserved after it began"
    );
    assert_eq!(engine.read(a, 0, 12).unwrap(), b"acknowledged");
    engine.drain().unwrap();
}
