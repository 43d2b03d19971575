//! File lifetimes in the engine: released files are forgotten once nothing
//! of them is buffered (their capacity handles closed), and a directory
//! rename carries the buffered bytes of the files under it, across a
//! restart too.

use std::sync::Arc;

use sluice_engine::{Engine, EngineConfig};
use sluice_env::memory::MemBackend;
use sluice_env::{Backend, OpenOptions, RelPath, SystemClock};
use sluice_policy::redirector::{RedirectPolicy, RedirectorConfig};

fn open(fast: &Arc<dyn Backend>, capacity: &Arc<dyn Backend>) -> Engine {
    Engine::open(
        Arc::clone(fast),
        Arc::clone(capacity),
        Arc::new(SystemClock::new()),
        EngineConfig {
            redirector: RedirectorConfig {
                policy: RedirectPolicy::FastAll,
                ..RedirectorConfig::default()
            },
            region_bytes: 1024 * 1024,
            record_max_bytes: 64 * 1024,
            ..EngineConfig::default()
        },
    )
    .unwrap()
}

fn backends() -> (Arc<dyn Backend>, Arc<dyn Backend>) {
    (Arc::new(MemBackend::new()), Arc::new(MemBackend::new()))
}

#[test]
fn released_files_are_forgotten_once_flushed() {
    let (fast, capacity) = backends();
    let engine = open(&fast, &capacity);
    let a = RelPath::new("a").unwrap();
    let id = engine.create(&a).unwrap();
    let again = engine.open_file(&a).unwrap();
    assert_eq!(id, again, "one path, one engine file");
    engine.write(id, 0, b"buffered").unwrap();
    engine.release(id);
    engine.release(again);
    assert_eq!(engine.open_files(), 1, "buffered bytes keep the file");
    engine.drain().unwrap();
    assert_eq!(engine.open_files(), 0, "flushed and released: forgotten");
    let id = engine.open_file(&a).unwrap();
    assert_eq!(engine.read(id, 0, 8).unwrap(), b"buffered");
    engine.release(id);
    assert_eq!(
        engine.open_files(),
        0,
        "nothing buffered: forgotten at once"
    );
}

#[test]
fn a_directory_rename_carries_buffered_files_across_a_restart() {
    let (fast, capacity) = backends();
    let dir = RelPath::new("d").unwrap();
    let inside = RelPath::new("d/sub/f").unwrap();
    {
        let engine = open(&fast, &capacity);
        engine.mkdir(&dir).unwrap();
        engine.mkdir(&RelPath::new("d/sub").unwrap()).unwrap();
        let id = engine.create(&inside).unwrap();
        engine.write(id, 4096, b"in the log").unwrap();
        engine.fsync(id).unwrap();
        engine.rename(&dir, &RelPath::new("e").unwrap()).unwrap();
        let moved = RelPath::new("e/sub/f").unwrap();
        assert_eq!(engine.open_file(&moved).unwrap(), id, "the open file moved");
        assert_eq!(engine.read(id, 4096, 10).unwrap(), b"in the log");
        assert!(engine.buffered_bytes() > 0);
        engine.close();
    }
    // Restart: the log names the file by its new path.
    let engine = open(&fast, &capacity);
    engine.drain().unwrap();
    let file = capacity
        .open(&RelPath::new("e/sub/f").unwrap(), OpenOptions::default())
        .unwrap();
    let mut buf = [0u8; 10];
    file.read_at(&mut buf, 4096).unwrap();
    assert_eq!(&buf, b"in the log");
    assert!(
        capacity.metadata(&dir).is_err(),
        "no old directory recreated"
    );
}

#[test]
fn concurrent_writers_truncates_and_fsyncs_keep_every_byte() {
    let (fast, capacity) = backends();
    let engine = Arc::new(open(&fast, &capacity));
    let block = 16 * 1024u64;
    let handles: Vec<_> = (0..4u64)
        .map(|t| {
            let engine = Arc::clone(&engine);
            std::thread::spawn(move || {
                let path = RelPath::new(&format!("f{t}")).unwrap();
                let id = engine.create(&path).unwrap();
                for i in 0..150u64 {
                    let slot = (i * 37 + t) % 64;
                    engine
                        .write(
                            id,
                            slot * block,
                            &vec![(t * 50 + i % 50) as u8 | 1; block as usize],
                        )
                        .unwrap();
                    if i % 5 == 4 {
                        engine.fsync(id).unwrap();
                    }
                    if t == 3 && i % 40 == 39 {
                        // One writer truncates its own file now and then.
                        engine.truncate(id, 32 * block).unwrap();
                    }
                }
                id
            })
        })
        .collect();
    let ids: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    // The reference: replay each thread's writes (and truncates) in order.
    for (t, id) in ids.iter().enumerate() {
        let t = t as u64;
        let mut model = vec![0u8; (64 * block) as usize];
        let mut size = 0u64;
        for i in 0..150u64 {
            let slot = (i * 37 + t) % 64;
            let start = (slot * block) as usize;
            model[start..start + block as usize].fill((t * 50 + i % 50) as u8 | 1);
            size = size.max((slot + 1) * block);
            if t == 3 && i % 40 == 39 {
                size = 32 * block;
                model[size as usize..].fill(0);
            }
        }
        let got = engine.read(*id, 0, 64 * block).unwrap();
        assert_eq!(got.len() as u64, size, "file {t} size");
        assert!(got == model[..size as usize], "file {t} content");
    }
    engine.drain().unwrap();
    assert_eq!(engine.buffered_bytes(), 0);
}

fn capacity_bytes(capacity: &Arc<dyn Backend>, path: &str) -> Option<Vec<u8>> {
    let file = capacity
        .open(&RelPath::new(path).unwrap(), OpenOptions::default())
        .ok()?;
    let mut buf = vec![0u8; file.len().unwrap() as usize];
    file.read_at(&mut buf, 0).unwrap();
    Some(buf)
}

/// Regression (data-path issue): an open file that was unlinked became
/// unusable (reads and fstat through its handle failed with ENOENT). POSIX
/// keeps it alive for its handles; its buffered bytes must neither be lost
/// to them nor come back under the name after a restart.
#[test]
fn unlinked_while_open_keeps_reading_writing_and_stat() {
    let (fast, capacity) = backends();
    let engine = open(&fast, &capacity);
    let a = RelPath::new("a").unwrap();
    let old = engine.create(&a).unwrap();
    engine.write(old, 0, b"buffered").unwrap();
    assert!(engine.buffered_bytes() > 0);
    engine.unlink(&a).unwrap();
    assert!(capacity.metadata(&a).is_err(), "the name is gone");
    assert_eq!(engine.read(old, 0, 64).unwrap(), b"buffered");
    engine.write(old, 8, b" and more").unwrap();
    assert_eq!(engine.read(old, 0, 64).unwrap(), b"buffered and more");
    assert_eq!(engine.stat_open(old).unwrap().len, 17);
    engine.fsync(old).unwrap();
    assert!(
        engine.getattr(&a).is_err(),
        "no name, no attributes by path"
    );
    // The name can be reused meanwhile: a different file.
    let new = engine.create(&a).unwrap();
    assert_ne!(new, old);
    engine.write(new, 0, b"new").unwrap();
    assert_eq!(engine.read(old, 0, 64).unwrap(), b"buffered and more");
    assert_eq!(engine.read(new, 0, 64).unwrap(), b"new");
    engine.release(old);
    assert_eq!(engine.read(new, 0, 64).unwrap(), b"new");
    // A restart without a drain: the log still holds the old file's
    // records, which must not come back under the name.
    engine.close();
    let engine = open(&fast, &capacity);
    engine.drain().unwrap();
    assert_eq!(capacity_bytes(&capacity, "a").unwrap(), b"new");
}

/// Regression (data-path issue): a file replaced by a rename while open
/// became unusable; it keeps its bytes for its handles, and the name holds
/// the renamed file's bytes, across a restart too.
#[test]
fn renamed_over_while_open_keeps_its_bytes() {
    let (fast, capacity) = backends();
    let engine = open(&fast, &capacity);
    let (a, b) = (RelPath::new("a").unwrap(), RelPath::new("b").unwrap());
    let old = engine.create(&a).unwrap();
    engine.write(old, 0, b"old bytes").unwrap();
    let moving = engine.create(&b).unwrap();
    engine.write(moving, 0, b"new").unwrap();
    engine.rename(&b, &a).unwrap();
    assert_eq!(engine.read(old, 0, 64).unwrap(), b"old bytes");
    assert_eq!(engine.stat_open(old).unwrap().len, 9);
    let reopened = engine.open_file(&a).unwrap();
    assert_eq!(reopened, moving, "the name now names the renamed file");
    assert_eq!(engine.read(reopened, 0, 64).unwrap(), b"new");
    engine.write(old, 9, b"!").unwrap();
    assert_eq!(engine.read(old, 0, 64).unwrap(), b"old bytes!");
    engine.close();
    let engine = open(&fast, &capacity);
    engine.drain().unwrap();
    assert_eq!(capacity_bytes(&capacity, "a").unwrap(), b"new");
    assert!(capacity_bytes(&capacity, "b").is_none());
}

/// Regression (data-path issue): a buffered write did not change mtime or
/// ctime until its flush, and the flush then stamped the flush time on the
/// file. Every write sets them, and the flush gives the file back the time
/// of its last write.
#[test]
fn buffered_writes_set_mtime_and_the_flush_keeps_it() {
    use std::time::{Duration, SystemTime};
    let (fast, capacity) = backends();
    let engine = open(&fast, &capacity);
    let t = RelPath::new("t").unwrap();
    let id = engine.create(&t).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let before = SystemTime::now();
    engine.write(id, 0, b"buffered").unwrap();
    let after = SystemTime::now();
    assert!(engine.buffered_bytes() > 0);
    let mut st = capacity.stat(&t).unwrap();
    assert!(st.mtime < before, "the capacity file is older");
    engine.overlay(&t, &mut st);
    assert!(st.mtime >= before && st.mtime <= after, "write sets mtime");
    assert!(st.ctime >= before, "write sets ctime");
    assert_eq!(st.len, 8);
    std::thread::sleep(Duration::from_millis(300));
    engine.drain().unwrap();
    let st = capacity.stat(&t).unwrap();
    assert!(
        st.mtime >= before && st.mtime <= after,
        "the flush kept the write's mtime, not its own time"
    );
}
