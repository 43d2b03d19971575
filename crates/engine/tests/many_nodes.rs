//! Two engines, each with its own fast tier, over one shared capacity
//! backend: the engine's part of issue 20 (many nodes over one parallel
//! file system). `Engine::sync_file` puts a file's buffered bytes on the
//! capacity tier and drops them, so neither a later flush nor a recovery
//! writes them again over another node's newer bytes; the logical size
//! follows the capacity file when another node changes it.

mod engine_support;

use engine_support::small_engine;
use std::sync::Arc;

use sluice_engine::{Engine, EngineConfig};
use sluice_env::memory::MemBackend;
use sluice_env::{Backend, OpenOptions, RelPath, SystemClock};
use sluice_policy::redirector::{RedirectPolicy, RedirectorConfig};

fn node(fast: &Arc<dyn Backend>, capacity: &Arc<dyn Backend>) -> Engine {
    small_engine(fast, capacity, RedirectPolicy::FastAll)
}

fn capacity_bytes(capacity: &Arc<dyn Backend>, path: &RelPath) -> Vec<u8> {
    let f = capacity.open(path, OpenOptions::default()).unwrap();
    let mut buf = vec![0u8; f.len().unwrap() as usize];
    let n = f.read_at(&mut buf, 0).unwrap();
    buf.truncate(n);
    buf
}

/// Issue 20, "last drainer wins, not last writer": `sluice sync` (and a
/// close under close-to-open) wrote a file's buffered bytes to the
/// capacity tier but left them in the log, so the node's later drain, or
/// its recovery after a crash, wrote them again over what another node had
/// written since.
#[test]
fn issue_20_synced_bytes_are_not_written_again_by_a_later_drain_or_recovery() {
    let capacity: Arc<dyn Backend> = Arc::new(MemBackend::new());
    let (fast_a, fast_b): (Arc<dyn Backend>, Arc<dyn Backend>) =
        (Arc::new(MemBackend::new()), Arc::new(MemBackend::new()));
    let path = RelPath::new("f").unwrap();
    let a = node(&fast_a, &capacity);
    let id = a.create(&path).unwrap();
    a.write(id, 0, &[1u8; 4096]).unwrap();
    assert_eq!(a.buffered_bytes(), 4096);
    assert_eq!(a.sync_file(id, false).unwrap(), 4096);
    assert_eq!(capacity_bytes(&capacity, &path), vec![1u8; 4096]);
    assert_eq!(a.buffered_bytes(), 0, "synced bytes leave the index");
    a.release(id);

    // B writes over them afterwards and puts its bytes there too.
    let b = node(&fast_b, &capacity);
    let id_b = b.open_file(&path).unwrap();
    b.write(id_b, 0, &[2u8; 4096]).unwrap();
    b.sync_file(id_b, false).unwrap();
    b.release(id_b);
    assert_eq!(capacity_bytes(&capacity, &path), vec![2u8; 4096]);

    // A's drain writes nothing of its older bytes.
    a.drain().unwrap();
    assert_eq!(capacity_bytes(&capacity, &path), vec![2u8; 4096]);
    // Nor does its recovery from the log it left.
    a.close();
    let a = node(&fast_a, &capacity);
    a.drain().unwrap();
    assert_eq!(
        capacity_bytes(&capacity, &path),
        vec![2u8; 4096],
        "recovery replayed bytes that were synced and dropped"
    );
}

/// A sync of a file with nothing buffered and nothing written since the
/// last one writes nothing, and the bytes written after a sync are kept
/// for the next one.
#[test]
fn sync_file_writes_what_is_buffered_since_the_last_sync() {
    let capacity: Arc<dyn Backend> = Arc::new(MemBackend::new());
    let fast: Arc<dyn Backend> = Arc::new(MemBackend::new());
    let path = RelPath::new("f").unwrap();
    let a = node(&fast, &capacity);
    let id = a.create(&path).unwrap();
    assert_eq!(a.sync_file(id, false).unwrap(), 0);
    a.write(id, 0, b"first").unwrap();
    assert_eq!(a.sync_file(id, false).unwrap(), 5);
    assert_eq!(a.sync_file(id, false).unwrap(), 0, "nothing new");
    a.write(id, 5, b"second").unwrap();
    assert_eq!(a.sync_file(id, false).unwrap(), 6);
    assert_eq!(capacity_bytes(&capacity, &path), b"firstsecond");
    assert_eq!(a.read(id, 0, 64).unwrap(), b"firstsecond");
}

/// Issue 20, "sizes freeze": an engine that held a file open kept the
/// size of its first open, though another node had grown or shrunk the
/// capacity file. The logical size is the capacity file's length, or the
/// end of the node's own buffered bytes where those go further.
#[test]
fn issue_20_the_size_follows_the_capacity_file_changed_by_another_node() {
    let capacity: Arc<dyn Backend> = Arc::new(MemBackend::new());
    let (fast_a, fast_b): (Arc<dyn Backend>, Arc<dyn Backend>) =
        (Arc::new(MemBackend::new()), Arc::new(MemBackend::new()));
    let path = RelPath::new("f").unwrap();
    let a = node(&fast_a, &capacity);
    let b = node(&fast_b, &capacity);
    let id_b = b.create(&path).unwrap();
    b.write(id_b, 0, &[7u8; 1000]).unwrap();
    b.sync_file(id_b, false).unwrap();

    // A holds the file open.
    let held = a.open_file(&path).unwrap();
    assert_eq!(a.stat_open(held).unwrap().len, 1000);
    // B appends: A's open descriptor reads on, a new open and fstat see it.
    b.write(id_b, 1000, &[8u8; 1000]).unwrap();
    b.sync_file(id_b, false).unwrap();
    let read = a.read(held, 0, 4096).unwrap();
    assert_eq!(read.len(), 2000, "a read past the known size re-reads it");
    assert_eq!(read[1000..], [8u8; 1000]);
    let again = a.open_file(&path).unwrap();
    assert_eq!(again, held);
    assert_eq!(a.stat_open(held).unwrap().len, 2000);

    // A buffers bytes past the end; B truncates the capacity file short.
    a.write(held, 3000, &[9u8; 100]).unwrap();
    b.truncate(id_b, 500).unwrap();
    assert_eq!(
        a.refresh_size(held).unwrap(),
        3100,
        "A's own buffered bytes keep the file that long"
    );
    let read = a.read(held, 0, 4096).unwrap();
    assert_eq!(read.len(), 3100);
    assert_eq!(read[..500], [7u8; 500]);
    assert!(
        read[500..3000].iter().all(|&x| x == 0),
        "B's truncate is seen"
    );
    assert_eq!(read[3000..], [9u8; 100]);
    // Once A's bytes are on the capacity tier, B's shrink wins.
    a.sync_file(held, false).unwrap();
    b.truncate(id_b, 200).unwrap();
    assert_eq!(a.refresh_size(held).unwrap(), 200);
    let mut st = capacity.stat(&path).unwrap();
    a.overlay(&path, &mut st, a.log_epoch());
    assert_eq!(st.len, 200, "getattr's overlay takes the fresh length");
    a.release(held);
    a.release(again);
    b.release(id_b);
}

/// A sync (close or fsync under close-to-open) while the flusher flushes a
/// region of the same file wrote the region's bytes twice: the sync wrote
/// every buffered byte, and the flusher, looking each run up while the
/// bytes were still indexed, wrote them again beside it on the same disk.
/// Now a flush run of a syncing file waits and looks up again: at most
/// the runs already in flight are written twice.
#[test]
fn a_sync_during_a_flush_of_the_same_file_writes_its_bytes_once() {
    use sluice_devices::hdd::HddConfig;
    use sluice_engine::EngineStatus;
    use sluice_env::emulated::EmulatedBackend;
    use sluice_policy::pipeline::RegionState;
    use std::time::{Duration, Instant};

    const KIB: u64 = 1024;
    let clock = Arc::new(SystemClock::new());
    let fast: Arc<dyn Backend> = Arc::new(MemBackend::new());
    // A disk that seeks: each scattered 16 KiB write costs milliseconds,
    // so the flush of a region is still going when the sync starts.
    let capacity: Arc<dyn Backend> = Arc::new(
        EmulatedBackend::hdd(
            Arc::new(MemBackend::new()),
            HddConfig::default(),
            clock.clone(),
            1,
        )
        .unwrap(),
    );
    let run_max = 64 * KIB;
    let config = EngineConfig {
        redirector: RedirectorConfig {
            policy: RedirectPolicy::FastAll,
            ..RedirectorConfig::default()
        },
        regions: 4,
        region_bytes: 1024 * KIB,
        record_max_bytes: 64 * 1024,
        flush_run_max_bytes: run_max,
        ..EngineConfig::default()
    };
    let writers = u64::from(config.flush_writers);
    let engine = Engine::open(fast, Arc::clone(&capacity), clock, config).unwrap();
    let path = RelPath::new("f").unwrap();
    let id = engine.create(&path).unwrap();
    // 1.5 MiB in 16 KiB writes to every other slot (nothing merges): the
    // first region fills and its flush starts.
    let slots = 96u64;
    for i in 0..slots {
        engine
            .write(id, i * 32 * KIB, &[i as u8 | 1; 16 * KIB as usize])
            .unwrap();
    }
    let flushing = |status: &EngineStatus| {
        status
            .regions
            .iter()
            .any(|(state, _)| *state == RegionState::Flushing)
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !flushing(&engine.status()) {
        assert!(Instant::now() < deadline, "no region started flushing");
        std::thread::sleep(Duration::from_millis(1));
    }
    let synced = engine.sync_file(id, false).unwrap();
    engine.drain().unwrap();
    let flushed = engine.stats().flushed_bytes;
    let total = slots * 16 * KIB;
    // Each flush worker may have one run looked up before the sync began,
    // and one more in the window before the sync's unlink record.
    assert!(
        synced + flushed <= total + 2 * writers * run_max,
        "{synced} bytes synced and {flushed} flushed for {total} buffered"
    );
    let f = capacity.open(&path, OpenOptions::default()).unwrap();
    for i in 0..slots {
        let mut buf = vec![0u8; 16 * KIB as usize];
        f.read_at(&mut buf, i * 32 * KIB).unwrap();
        assert!(buf.iter().all(|&b| b == i as u8 | 1), "slot {i}");
    }
}
