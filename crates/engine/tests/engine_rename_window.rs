//! A rename or an unlink that logs a record for a buffered file waits for
//! the appends in flight, without the engine lock; what it decided before
//! the wait must be decided again after it.
//!
//! The rename: the bug feared most was an open registering a name under
//! the renamed directory during that wait, which kept the old name after
//! the rename (its names were looked up before the wait), so the engine
//! served the file under a name the capacity tier no longer has, and its
//! buffered bytes under their old path. The unlink: below, at its test.

mod gate_support;

use std::sync::Arc;
use std::time::Duration;

use gate_support::{fast_all, gated_memory, MARKER};
use sluice_env::memory::MemBackend;
use sluice_env::{Backend, OpenOptions, RelPath};

fn path(p: &str) -> RelPath {
    RelPath::new(p).unwrap()
}

#[test]
fn a_name_opened_under_a_directory_while_its_rename_waits_moves_with_it() {
    let (gate, fast) = gated_memory();
    let capacity: Arc<dyn Backend> = Arc::new(MemBackend::new());
    capacity.create_dir(&path("d")).unwrap();
    let b = capacity.open(&path("d/b"), OpenOptions::CREATE).unwrap();
    b.write_at(b"on the tier", 0).unwrap();
    drop(b);
    let engine = fast_all(fast, &capacity);
    // d/a is buffered: the rename logs its new path, then waits for the
    // appends in flight.
    let a = engine.create(&path("d/a")).unwrap();
    engine.write(a, 0, b"buffered").unwrap();
    // An append held in flight (another file's).
    let (held, go) = gate.arm();
    let w = engine.create(&path("w")).unwrap();
    let writer = {
        let engine = Arc::clone(&engine);
        std::thread::spawn(move || engine.write(w, 0, &[MARKER; 4096]).unwrap())
    };
    held.recv_timeout(Duration::from_secs(10)).unwrap();
    let renamer = {
        let engine = Arc::clone(&engine);
        std::thread::spawn(move || engine.rename(&path("d"), &path("e")))
    };
    // Long enough for the rename to log d/a's new path and wait.
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        !renamer.is_finished(),
        "the rename waits for the held append"
    );
    // Meanwhile d/b is opened (the lock is free) and written.
    let opened = engine.open_file(&path("d/b")).unwrap();
    engine.write(opened, 0, b"ON").unwrap();
    go.send(()).unwrap();
    writer.join().unwrap();
    renamer.join().unwrap().unwrap();
    assert!(!engine.holds(&path("d/b")), "the old name is gone");
    assert!(
        engine.holds(&path("e/b")),
        "the name moved with its directory"
    );
    assert!(matches!(
        engine.open_file(&path("d/b")),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound
    ));
    assert_eq!(engine.read(opened, 0, 11).unwrap(), b"ON the tier");
    // Its buffered bytes reach the file at its new name.
    engine.release(opened);
    engine.drain().unwrap();
    let moved = capacity.open(&path("e/b"), OpenOptions::default()).unwrap();
    let mut buf = [0u8; 11];
    moved.read_at(&mut buf, 0).unwrap();
    assert_eq!(&buf, b"ON the tier");
    assert!(capacity.metadata(&path("d/b")).is_err());
}

/// The unlink of a buffered, closed file logs an unlink record and waits
/// for the appends in flight without the engine lock. The bug feared: an
/// open of the name during that wait joined the file, and the unlink,
/// which had judged it dead before the wait, then dropped its entry and
/// its buffered bytes under the opener. POSIX: an open before the unlink
/// keeps reading every byte written before it.
#[test]
fn a_file_opened_while_its_unlink_waits_keeps_its_bytes() {
    let (gate, fast) = gated_memory();
    let capacity: Arc<dyn Backend> = Arc::new(MemBackend::new());
    let engine = fast_all(fast, &capacity);
    // x is buffered and closed.
    let x = engine.create(&path("x")).unwrap();
    engine.write(x, 0, b"buffered bytes").unwrap();
    engine.release(x);
    // An append held in flight (another file's).
    let (held, go) = gate.arm();
    let w = engine.create(&path("w")).unwrap();
    let writer = {
        let engine = Arc::clone(&engine);
        std::thread::spawn(move || engine.write(w, 0, &[MARKER; 4096]).unwrap())
    };
    held.recv_timeout(Duration::from_secs(10)).unwrap();
    let unlinker = {
        let engine = Arc::clone(&engine);
        std::thread::spawn(move || engine.unlink(&path("x")))
    };
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        !unlinker.is_finished(),
        "the unlink waits for the held append"
    );
    // Meanwhile x is opened (the lock is free).
    let opened = engine.open_file(&path("x")).unwrap();
    go.send(()).unwrap();
    writer.join().unwrap();
    unlinker.join().unwrap().unwrap();
    assert!(!engine.holds(&path("x")), "the name is gone");
    assert!(capacity.metadata(&path("x")).is_err());
    assert_eq!(
        engine.read(opened, 0, 14).unwrap(),
        b"buffered bytes",
        "the opener reads every byte written before the unlink"
    );
    engine.release(opened);
    engine.drain().unwrap();
}
