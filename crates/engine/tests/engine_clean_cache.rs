//! The clean cache (issue 33; engine/cache.rs): bytes written back stay
//! readable from their region until it is filled again, and a clean copy
//! is never served once its bytes changed: a test for each way a copy goes
//! stale (the region reused, this node's write, a truncate, an unlink, the
//! capacity file written or replaced behind it, a fallocate), and the bug
//! feared most — a retired region's records replayed by recovery over
//! newer bytes.

mod gate_support;

use std::sync::Arc;
use std::time::Duration;

use gate_support::{AttrGated, Gate};
use sluice_engine::{Engine, EngineConfig};
use sluice_env::memory::MemBackend;
use sluice_env::{Allocate, Backend, OpenOptions, RelPath, SystemClock};
use sluice_policy::redirector::{RedirectPolicy, RedirectorConfig};

const REGION: u64 = 256 * 1024;

fn open(fast: &Arc<dyn Backend>, capacity: &Arc<dyn Backend>) -> Engine {
    open_with(fast, capacity, 2)
}

/// [`open`] with `regions` regions.
fn open_with(fast: &Arc<dyn Backend>, capacity: &Arc<dyn Backend>, regions: u32) -> Engine {
    Engine::open(
        Arc::clone(fast),
        Arc::clone(capacity),
        Arc::new(SystemClock::new()),
        EngineConfig {
            redirector: RedirectorConfig {
                policy: RedirectPolicy::FastAll,
                ..RedirectorConfig::default()
            },
            regions,
            region_bytes: REGION,
            record_max_bytes: 64 * 1024,
            ..EngineConfig::default()
        },
    )
    .unwrap()
}

fn backends() -> (Arc<dyn Backend>, Arc<dyn Backend>) {
    (Arc::new(MemBackend::new()), Arc::new(MemBackend::new()))
}

fn p(name: &str) -> RelPath {
    RelPath::new(name).unwrap()
}

fn bytes(b: u8, len: usize) -> Vec<u8> {
    vec![b; len]
}

/// Write `data` at 0 of a new file `name`, drain, release.
fn written_and_drained(engine: &Engine, name: &str, data: &[u8]) {
    let id = engine.create(&p(name)).unwrap();
    engine.write(id, 0, data).unwrap();
    engine.drain().unwrap();
    engine.release(id);
}

/// Behind the engine's back, as another node would.
fn write_behind(capacity: &Arc<dyn Backend>, name: &str, offset: u64, data: &[u8]) {
    // A later time than the drain's own write (the stamp compares times).
    std::thread::sleep(std::time::Duration::from_millis(5));
    let f = capacity.open(&p(name), OpenOptions::default()).unwrap();
    f.write_at(data, offset).unwrap();
}

fn read(engine: &Engine, name: &str, len: u64) -> Vec<u8> {
    let id = engine.open_file(&p(name)).unwrap();
    let got = engine.read(id, 0, len).unwrap();
    engine.release(id);
    got
}

#[test]
fn a_drained_file_is_read_back_from_the_fast_tier_after_it_was_closed() {
    let (fast, capacity) = backends();
    let engine = open(&fast, &capacity);
    written_and_drained(&engine, "f", &bytes(1, 100_000));
    assert_eq!(engine.buffered_bytes(), 0);
    assert_eq!(engine.stats().cached_bytes, 100_000);
    assert!(read(&engine, "f", 100_000) == bytes(1, 100_000));
    let stats = engine.stats();
    assert_eq!(stats.clean_read_bytes, 100_000, "{stats:?}");
    assert_eq!(stats.capacity_read_bytes, 0, "{stats:?}");
    engine.close();
}

#[test]
fn a_copy_goes_when_its_region_is_filled_again() {
    let (fast, capacity) = backends();
    let engine = open(&fast, &capacity);
    written_and_drained(&engine, "f", &bytes(1, 100_000));
    // Two regions' worth of another file: both regions filled again.
    written_and_drained(&engine, "g", &bytes(2, 2 * REGION as usize));
    assert!(read(&engine, "f", 100_000) == bytes(1, 100_000));
    let stats = engine.stats();
    assert_eq!(stats.capacity_read_bytes, 100_000, "{stats:?}");
    engine.close();
}

#[test]
fn a_copy_goes_when_this_node_writes_truncates_or_removes_the_file() {
    let (fast, capacity) = backends();
    let engine = open(&fast, &capacity);
    written_and_drained(&engine, "f", &bytes(1, 8192));
    let id = engine.open_file(&p("f")).unwrap();
    engine.write(id, 0, &bytes(2, 4096)).unwrap();
    engine.drain().unwrap();
    assert!(engine.read(id, 0, 8192).unwrap() == [bytes(2, 4096), bytes(1, 4096)].concat());
    engine.truncate(id, 2048).unwrap();
    engine.truncate(id, 8192).unwrap();
    assert!(engine.read(id, 0, 8192).unwrap() == [bytes(2, 2048), bytes(0, 6144)].concat());
    engine.release(id);
    engine.unlink(&p("f")).unwrap();
    let id = engine.create(&p("f")).unwrap();
    assert!(engine.read(id, 0, 8192).unwrap().is_empty(), "a new file");
    assert_eq!(engine.stats().cached_bytes, 0);
    engine.close();
}

#[test]
fn a_copy_is_not_served_once_another_node_wrote_the_file() {
    let (fast, capacity) = backends();
    let engine = open(&fast, &capacity);
    written_and_drained(&engine, "f", &bytes(1, 8192));
    write_behind(&capacity, "f", 0, &bytes(9, 4096));
    assert!(read(&engine, "f", 8192) == [bytes(9, 4096), bytes(1, 4096)].concat());
    assert_eq!(engine.stats().cache_stale_drops, 1, "{:?}", engine.stats());
    // The same while the file stays open: checked when its size is read
    // again (a read past the known end, a lock granted) and at a getattr.
    written_and_drained(&engine, "g", &bytes(1, 8192));
    let id = engine.open_file(&p("g")).unwrap();
    write_behind(&capacity, "g", 0, &bytes(8, 4096));
    let mut stat = capacity.stat(&p("g")).unwrap();
    engine.overlay(&p("g"), &mut stat, engine.log_epoch());
    assert!(engine.read(id, 0, 4096).unwrap() == bytes(8, 4096));
    write_behind(&capacity, "g", 4096, &bytes(7, 4096));
    // A lock granted re-reads the size (crates/fuse volume/locks.rs).
    engine.refresh_size(id).unwrap();
    assert!(engine.read(id, 4096, 4096).unwrap() == bytes(7, 4096));
    engine.release(id);
    engine.close();
}

#[test]
fn a_copy_is_not_served_for_a_file_replaced_behind_the_engine() {
    let (fast, capacity) = backends();
    let engine = open(&fast, &capacity);
    written_and_drained(&engine, "f", &bytes(1, 8192));
    capacity.remove_file(&p("f")).unwrap();
    write_behind_new(&capacity, "f", &bytes(5, 8192));
    assert!(read(&engine, "f", 8192) == bytes(5, 8192));
    engine.close();
}

fn write_behind_new(capacity: &Arc<dyn Backend>, name: &str, data: &[u8]) {
    let f = capacity
        .open(
            &p(name),
            OpenOptions {
                create: true,
                ..OpenOptions::default()
            },
        )
        .unwrap();
    f.write_at(data, 0).unwrap();
}

#[test]
fn a_punch_drops_the_copies() {
    let (fast, capacity) = backends();
    let engine = open(&fast, &capacity);
    written_and_drained(&engine, "f", &bytes(1, 8192));
    let id = engine.open_file(&p("f")).unwrap();
    match engine.fallocate(id, Allocate::PunchHole, 0, 4096) {
        Ok(()) => {
            assert!(engine.read(id, 0, 8192).unwrap() == [bytes(0, 4096), bytes(1, 4096)].concat())
        }
        // The memory tier may refuse the mode: then nothing changed.
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::Unsupported, "{e}"),
    }
    engine.release(id);
    engine.close();
}

/// The bug feared most: a retired region keeps its records; a recovery
/// that replayed them would write old bytes over what another node wrote
/// after the drain.
#[test]
fn recovery_never_replays_a_retired_region_over_newer_bytes() {
    let (fast, capacity) = backends();
    let engine = open(&fast, &capacity);
    written_and_drained(&engine, "f", &bytes(1, 8192));
    // Records of another file go to the log (the next region), then the
    // engine stops without a drain (a crash keeps the log): recovery
    // scans the retired region too, whose records must not come back.
    let id = engine.create(&p("g")).unwrap();
    engine.write(id, 0, &bytes(3, 4096)).unwrap();
    engine.fsync(id).unwrap();
    engine.release(id);
    engine.close();
    write_behind(&capacity, "f", 0, &bytes(9, 8192));
    let engine = open(&fast, &capacity);
    // g's path, data and commit records, none of f's retired ones (its
    // bytes may already be flushing: the flusher starts at open, so
    // `buffered_bytes` is no witness on a loaded machine).
    assert_eq!(engine.stats().recovered_records, 3, "g's records only");
    engine.drain().unwrap();
    assert!(read(&engine, "f", 8192) == bytes(9, 8192), "not replayed");
    assert!(read(&engine, "g", 4096) == bytes(3, 4096));
    engine.close();
    let engine = open(&fast, &capacity);
    assert_eq!(engine.buffered_bytes(), 0);
    engine.close();
    let f = capacity.open(&p("f"), OpenOptions::default()).unwrap();
    let mut buf = vec![0; 8192];
    f.read_at(&mut buf, 0).unwrap();
    assert!(buf == bytes(9, 8192));
}

/// This node's own write to the capacity tier changes the capacity file's
/// mtime: the file's other copies must stay (before, the next getattr
/// dropped them all, and ior-hard's read-back after a drain read
/// everything from the disk). The write goes to the capacity tier here
/// because the fast tier failed an append (degrade.rs).
#[test]
fn this_nodes_capacity_write_keeps_the_files_other_copies() {
    use sluice_env::fault::{FaultBackend, FaultOp, FaultRule};
    let faulty = Arc::new(FaultBackend::new(Arc::new(MemBackend::new())));
    let fast: Arc<dyn Backend> = faulty.clone();
    let capacity: Arc<dyn Backend> = Arc::new(MemBackend::new());
    let engine = open(&fast, &capacity);
    written_and_drained(&engine, "f", &bytes(1, 8192));
    let id = engine.open_file(&p("f")).unwrap();
    // The log refuses writes (its file system full) until this write fell
    // back to the capacity tier.
    faulty.inject(FaultRule {
        path_prefix: Some("log/".to_string()),
        ..FaultRule::new(FaultOp::Write, 28)
    });
    std::thread::sleep(std::time::Duration::from_millis(5));
    engine.write(id, 8192, &bytes(2, 4096)).unwrap();
    faulty.clear();
    // Straight to the capacity file (nothing buffered, nothing drained).
    assert_eq!(engine.buffered_bytes(), 0);
    let f = capacity.open(&p("f"), OpenOptions::default()).unwrap();
    let mut on_capacity = vec![0u8; 4096];
    f.read_at(&mut on_capacity, 8192).unwrap();
    assert!(on_capacity == bytes(2, 4096), "written to capacity");
    let mut stat = capacity.stat(&p("f")).unwrap();
    engine.overlay(&p("f"), &mut stat, engine.log_epoch());
    let before = engine.stats();
    let got = engine.read(id, 0, 12288).unwrap();
    assert!(got == [bytes(1, 8192), bytes(2, 4096)].concat());
    let after = engine.stats();
    assert_eq!(after.clean_read_bytes - before.clean_read_bytes, 8192);
    assert_eq!(after.cache_stale_drops, 0);
    engine.release(id);
    engine.close();
}

/// This node's flushes and write-backs of a file change its capacity file
/// again and again: its copies must stay across them, and across a
/// getattr in between. (Eight regions: none is filled again here.)
#[test]
fn this_nodes_flushes_and_write_backs_keep_the_files_copies() {
    let (fast, capacity) = backends();
    let engine = open_with(&fast, &capacity, 8);
    let id = engine.create(&p("f")).unwrap();
    for round in 0..4u64 {
        std::thread::sleep(std::time::Duration::from_millis(2));
        engine
            .write(id, round * 8192, &bytes(round as u8 + 1, 8192))
            .unwrap();
        if round % 2 == 0 {
            engine.drain().unwrap();
        } else {
            engine.sync_file(id, false).unwrap();
        }
        let mut stat = capacity.stat(&p("f")).unwrap();
        engine.overlay(&p("f"), &mut stat, engine.log_epoch());
    }
    let want: Vec<u8> = (0..4u8).flat_map(|r| bytes(r + 1, 8192)).collect();
    assert!(engine.read(id, 0, 4 * 8192).unwrap() == want);
    let stats = engine.stats();
    assert_eq!(stats.cache_stale_drops, 0, "{stats:?}");
    assert_eq!(stats.clean_read_bytes, 4 * 8192, "{stats:?}");
    engine.release(id);
    engine.close();
}

/// Issue 33 (IO500's mixed read-back, one read in four from the disk): a
/// file released while a flush of it was between its capacity writes and
/// the restore of its mtime (`set_attr`) was forgotten then, its clean
/// copies parked with a stamp the restore then changed, so the next open
/// dropped them. Here the second flush's restore is held (the capacity
/// tier's `set_attr`, [`AttrGated`]) while the file's close runs (its
/// sync, as under close-to-open, then the release); every copy must serve
/// the next open. Fails (a stale drop at that open) with
/// `forget_if_unused` not waiting for this node's own writers
/// (`own_writers == 0`, files.rs).
#[test]
fn issue_33_a_file_released_during_a_flushs_mtime_restore_keeps_its_clean_copies() {
    let gate = Arc::new(Gate::default());
    let fast: Arc<dyn Backend> = Arc::new(MemBackend::new());
    let capacity: Arc<dyn Backend> = Arc::new(AttrGated {
        inner: Arc::new(MemBackend::new()),
        gate: Arc::clone(&gate),
    });
    let engine = Arc::new(open_with(&fast, &capacity, 8));
    // f has clean copies, stamped, from a first drain; then more bytes.
    let id = engine.create(&p("f")).unwrap();
    engine.write(id, 0, &bytes(1, 8192)).unwrap();
    engine.drain().unwrap();
    engine.write(id, 8192, &bytes(2, 8192)).unwrap();
    let (held, go) = gate.arm();
    let drain = {
        let engine = Arc::clone(&engine);
        std::thread::spawn(move || engine.drain())
    };
    held.recv_timeout(Duration::from_secs(10))
        .expect("the flush restores the file's mtime");
    // The window: the flush wrote f and is restoring its mtime. f is
    // closed: its sync (of what the flush wrote) ends in a clean record
    // that drops its bytes from the index, then its last handle goes.
    engine.sync_file(id, false).unwrap();
    engine.release(id);
    go.send(()).unwrap();
    drain.join().unwrap().unwrap();
    assert_eq!(engine.buffered_bytes(), 0);
    let before = engine.stats();
    let want = [bytes(1, 8192), bytes(2, 8192)].concat();
    assert!(read(&engine, "f", 16384) == want);
    let after = engine.stats();
    assert_eq!(
        after.cache_stale_drops, before.cache_stale_drops,
        "{after:?}"
    );
    assert_eq!(
        after.clean_read_bytes - before.clean_read_bytes,
        16384,
        "read from the fast tier: {after:?}"
    );
    assert_eq!(after.capacity_read_bytes, before.capacity_read_bytes);
    Arc::into_inner(engine).expect("the drain ended").close();
}
