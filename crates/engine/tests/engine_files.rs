//! File lifetimes in the engine: released files are forgotten once nothing
//! of them is buffered (their capacity handles closed), and a directory
//! rename carries the buffered bytes of the files under it, across a
//! restart too.

mod engine_support;

use engine_support::small_engine;
use std::sync::Arc;

use sluice_engine::{Engine, EngineConfig};
use sluice_env::memory::MemBackend;
use sluice_env::{Backend, OpenOptions, RelPath, SystemClock};
use sluice_policy::redirector::{RedirectPolicy, RedirectorConfig};

fn open(fast: &Arc<dyn Backend>, capacity: &Arc<dyn Backend>) -> Engine {
    small_engine(fast, capacity, RedirectPolicy::FastAll)
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
    engine.overlay(&t, &mut st, engine.log_epoch());
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

/// A write's mtime comes from the engine's clock (`Clock::wall`), not the
/// system's: a run on a clock of its own stamps what that clock says, so a
/// test (and a replay) sees the same times every run.
#[test]
fn a_writes_mtime_is_the_engines_clocks() {
    use std::time::{Duration, SystemTime, UNIX_EPOCH};
    #[derive(Debug)]
    struct Fixed(SystemClock);
    impl sluice_env::Clock for Fixed {
        fn now(&self) -> sluice_policy::Time {
            self.0.now()
        }
        fn sleep(&self, d: Duration) {
            self.0.sleep(d)
        }
        // Past the capacity file's own times (the overlay keeps the later).
        fn wall(&self) -> SystemTime {
            UNIX_EPOCH + Duration::from_secs(3_000_000_000)
        }
    }
    let (fast, capacity) = backends();
    let engine = Engine::open(
        Arc::clone(&fast),
        Arc::clone(&capacity),
        Arc::new(Fixed(SystemClock::new())),
        EngineConfig {
            redirector: RedirectorConfig {
                policy: RedirectPolicy::FastAll,
                ..RedirectorConfig::default()
            },
            ..EngineConfig::default()
        },
    )
    .unwrap();
    let t = RelPath::new("t").unwrap();
    let id = engine.create(&t).unwrap();
    engine.write(id, 0, b"buffered").unwrap();
    let mut st = capacity.stat(&t).unwrap();
    engine.overlay(&t, &mut st, engine.log_epoch());
    assert_eq!(st.mtime, UNIX_EPOCH + Duration::from_secs(3_000_000_000));
}

/// Both tiers in a fresh temporary directory each (POSIX), and in memory:
/// both backends hold hard links.
/// A fast and a capacity tier, with the temporary directory holding them
/// (if any): dropped last.
type Tiers = (
    Option<tempfile::TempDir>,
    Arc<dyn Backend>,
    Arc<dyn Backend>,
);

fn link_backends() -> Vec<Tiers> {
    use sluice_env::posix::PosixBackend;
    let dir = tempfile::tempdir().unwrap();
    for tier in ["fast", "capacity"] {
        std::fs::create_dir(dir.path().join(tier)).unwrap();
    }
    let fast: Arc<dyn Backend> = Arc::new(PosixBackend::new(dir.path().join("fast")).unwrap());
    let capacity: Arc<dyn Backend> =
        Arc::new(PosixBackend::new(dir.path().join("capacity")).unwrap());
    let (mem_fast, mem_capacity) = backends();
    vec![(Some(dir), fast, capacity), (None, mem_fast, mem_capacity)]
}

fn p(path: &str) -> RelPath {
    RelPath::new(path).unwrap()
}

/// Hard links (data-path issue, deliverable 4): the engine knew files by
/// path, so two names of one file were two engine files and a read through
/// one missed the bytes buffered through the other.
#[test]
fn hard_links_two_names_are_one_engine_file_with_its_buffered_bytes() {
    for (_dir, fast, capacity) in link_backends() {
        let engine = open(&fast, &capacity);
        let what = capacity.describe();
        let a = engine.create(&p("a")).unwrap();
        engine.write(a, 0, b"buffered through a").unwrap();
        assert!(engine.buffered_bytes() > 0);
        engine.link(&p("a"), &p("b")).unwrap();
        let b = engine.open_file(&p("b")).unwrap();
        assert_eq!(b, a, "{what}: one file, one engine file");
        assert_eq!(engine.read(b, 0, 64).unwrap(), b"buffered through a");
        // Attributes through the other name carry the logical size.
        let mut st = capacity.stat(&p("b")).unwrap();
        engine.overlay(&p("b"), &mut st, engine.log_epoch());
        assert_eq!(st.len, 18, "{what}");
        assert_eq!(st.nlink, 2, "{what}");
        // Names linked on the tier before the engine opened either: one
        // engine file too, whichever name is opened first.
        capacity
            .open(&p("c"), OpenOptions::CREATE)
            .unwrap()
            .write_at(b"on the tier", 0)
            .unwrap();
        capacity.hard_link(&p("c"), &p("d")).unwrap();
        let d = engine.open_file(&p("d")).unwrap();
        engine.write(d, 0, b"ON").unwrap();
        let c = engine.open_file(&p("c")).unwrap();
        assert_eq!(c, d, "{what}");
        assert_eq!(engine.read(c, 0, 64).unwrap(), b"ON the tier");
        for id in [a, b, c, d] {
            engine.release(id);
        }
        engine.drain().unwrap();
        assert_eq!(engine.open_files(), 0, "{what}: every name forgotten");
        assert_eq!(
            capacity_bytes(&capacity, "b").unwrap(),
            b"buffered through a"
        );
        assert_eq!(capacity_bytes(&capacity, "c").unwrap(), b"ON the tier");
        // Forgotten, then opened by the other name: a fresh engine file.
        let again = engine.open_file(&p("b")).unwrap();
        assert_eq!(engine.open_file(&p("a")).unwrap(), again, "{what}");
        engine.release(again);
        engine.release(again);
    }
}

/// Hard links: unlinking one name of a file with buffered bytes dropped
/// them (the engine dropped an unlinked file's bytes when it was not
/// open), though the file lived on under its other name.
#[test]
fn hard_links_unlink_of_one_name_keeps_the_buffered_bytes_for_the_other() {
    for (_dir, fast, capacity) in link_backends() {
        let engine = open(&fast, &capacity);
        let what = capacity.describe();
        let id = engine.create(&p("a")).unwrap();
        engine.write(id, 0, b"still here").unwrap();
        engine.link(&p("a"), &p("b")).unwrap();
        engine.release(id);
        // Not open, bytes buffered, the name the log uses goes.
        engine.unlink(&p("a")).unwrap();
        assert!(capacity.metadata(&p("a")).is_err(), "{what}");
        let b = engine.open_file(&p("b")).unwrap();
        assert_eq!(engine.read(b, 0, 64).unwrap(), b"still here", "{what}");
        // Later writes through b are buffered again under b.
        engine.write(b, 10, b", and more").unwrap();
        engine.release(b);
        engine.drain().unwrap();
        assert_eq!(
            capacity_bytes(&capacity, "b").unwrap(),
            b"still here, and more",
            "{what}"
        );
        assert_eq!(capacity.stat(&p("b")).unwrap().nlink, 1, "{what}");
        assert_eq!(engine.open_files(), 0, "{what}");

        // The same while open through the removed name: the handle and the
        // other name both keep the bytes.
        let held = engine.create(&p("x")).unwrap();
        engine.write(held, 0, b"xx").unwrap();
        engine.link(&p("x"), &p("y")).unwrap();
        engine.unlink(&p("x")).unwrap();
        engine.write(held, 2, b"yy").unwrap();
        assert_eq!(engine.read(held, 0, 8).unwrap(), b"xxyy");
        let y = engine.open_file(&p("y")).unwrap();
        assert_eq!(y, held, "{what}");
        assert_eq!(engine.read(y, 0, 8).unwrap(), b"xxyy");
        engine.release(y);
        engine.release(held);
        engine.drain().unwrap();
        assert_eq!(capacity_bytes(&capacity, "y").unwrap(), b"xxyy", "{what}");
        assert!(capacity_bytes(&capacity, "x").is_none(), "{what}");
    }
}

/// Hard links: a rename over one name of a file replaces that name only;
/// a rename between two names of one file does nothing (POSIX).
#[test]
fn hard_links_rename_over_a_linked_name_and_between_two_names() {
    for (_dir, fast, capacity) in link_backends() {
        let engine = open(&fast, &capacity);
        let what = capacity.describe();
        let id = engine.create(&p("a")).unwrap();
        engine.write(id, 0, b"linked").unwrap();
        engine.link(&p("a"), &p("b")).unwrap();
        // Between two names of one file: nothing happens.
        engine.rename(&p("a"), &p("b")).unwrap();
        assert!(capacity.metadata(&p("a")).is_ok(), "{what}: a stays");
        assert_eq!(engine.open_file(&p("a")).unwrap(), id, "{what}");
        assert_eq!(engine.open_file(&p("b")).unwrap(), id, "{what}");
        engine.release(id);
        engine.release(id);
        engine.release(id);
        // Over a name the log uses, while nothing is open.
        let other = engine.create(&p("c")).unwrap();
        engine.write(other, 0, b"replacement").unwrap();
        engine.release(other);
        engine.rename(&p("c"), &p("a")).unwrap();
        let b = engine.open_file(&p("b")).unwrap();
        assert_eq!(engine.read(b, 0, 64).unwrap(), b"linked", "{what}");
        let a = engine.open_file(&p("a")).unwrap();
        assert_eq!(a, other, "{what}: a names the renamed file");
        assert_eq!(engine.read(a, 0, 64).unwrap(), b"replacement");
        engine.release(a);
        engine.release(b);
        engine.drain().unwrap();
        assert_eq!(capacity_bytes(&capacity, "a").unwrap(), b"replacement");
        assert_eq!(capacity_bytes(&capacity, "b").unwrap(), b"linked");
        assert!(capacity_bytes(&capacity, "c").is_none(), "{what}");
    }
}

/// Hard links: a directory rename moves every name under it, the one the
/// log uses included, across a restart.
#[test]
fn hard_links_a_directory_rename_moves_every_name() {
    for (_dir, fast, capacity) in link_backends() {
        let what = capacity.describe();
        {
            let engine = open(&fast, &capacity);
            engine.mkdir(&p("d")).unwrap();
            let id = engine.create(&p("d/a")).unwrap();
            engine.write(id, 0, b"in d").unwrap();
            engine.link(&p("d/a"), &p("d/b")).unwrap();
            engine.link(&p("d/a"), &p("top")).unwrap();
            engine.rename(&p("d"), &p("e")).unwrap();
            assert_eq!(engine.open_file(&p("e/a")).unwrap(), id, "{what}");
            assert_eq!(engine.open_file(&p("e/b")).unwrap(), id, "{what}");
            assert_eq!(engine.open_file(&p("top")).unwrap(), id, "{what}");
            assert_eq!(engine.read(id, 0, 8).unwrap(), b"in d");
            engine.close();
        }
        let engine = open(&fast, &capacity);
        engine.drain().unwrap();
        assert_eq!(capacity_bytes(&capacity, "e/a").unwrap(), b"in d", "{what}");
        assert_eq!(capacity_bytes(&capacity, "e/b").unwrap(), b"in d");
        assert!(capacity.metadata(&p("d")).is_err(), "{what}");
    }
}

/// Crash/restart: a file with two names has buffered bytes; the name its
/// path records use is unlinked; the engine closes without a drain. After
/// the restart the bytes reach the capacity file under the other name
/// (and the removed name does not come back).
#[test]
fn hard_links_unlink_of_one_name_then_restart_keeps_the_bytes_under_the_other() {
    for (_dir, fast, capacity) in link_backends() {
        let what = capacity.describe();
        {
            let engine = open(&fast, &capacity);
            let id = engine.create(&p("a")).unwrap();
            engine.write(id, 0, b"before the link").unwrap();
            engine.link(&p("a"), &p("b")).unwrap();
            engine.write(id, 0, b"BEFORE").unwrap();
            engine.fsync(id).unwrap();
            engine.unlink(&p("a")).unwrap();
            // Written after the unlink: buffered under b.
            engine.write(id, 15, b", after").unwrap();
            engine.fsync(id).unwrap();
            assert!(engine.buffered_bytes() > 0, "{what}");
            engine.close();
        }
        let engine = open(&fast, &capacity);
        engine.drain().unwrap();
        assert_eq!(
            capacity_bytes(&capacity, "b").unwrap(),
            b"BEFORE the link, after",
            "{what}"
        );
        assert!(
            capacity.metadata(&p("a")).is_err(),
            "{what}: the removed name stays removed"
        );
    }
}

/// The same at every sync point of the fast tier: a power cut there (the
/// log keeps only what was synced; the capacity tier, in memory, keeps
/// everything) never loses an fsynced byte of the file with two names,
/// never fails recovery, and never brings the removed name back once its
/// unlink was acknowledged.
#[test]
fn hard_links_unlink_of_one_name_survives_a_crash_at_every_fast_sync_point() {
    use sluice_env::crash::CrashBackend;

    /// Steps acknowledged; the bytes fsynced by then.
    fn workload(engine: &Engine) -> (usize, &'static [u8]) {
        let mut done = (0, &b""[..]);
        let Ok(id) = engine.create(&p("a")) else {
            return done;
        };
        let steps: [&dyn Fn() -> std::io::Result<()>; 4] = [
            &|| {
                engine.write(id, 0, b"AAAA")?;
                engine.fsync(id)
            },
            &|| engine.link(&p("a"), &p("b")),
            &|| {
                engine.write(id, 4, b"BBBB")?;
                engine.fsync(id)?;
                engine.unlink(&p("a"))
            },
            &|| {
                engine.write(id, 8, b"CCCC")?;
                engine.fsync(id)
            },
        ];
        let durable: [&[u8]; 4] = [b"AAAA", b"AAAA", b"AAAABBBB", b"AAAABBBBCCCC"];
        for (n, step) in steps.iter().enumerate() {
            if step().is_err() {
                break;
            }
            done = (n + 1, durable[n]);
        }
        done
    }

    let total = {
        let fast = Arc::new(CrashBackend::new());
        let (f, c): (Arc<dyn Backend>, Arc<dyn Backend>) =
            (fast.clone(), Arc::new(MemBackend::new()));
        let engine = open(&f, &c);
        assert_eq!(workload(&engine).0, 4);
        engine.close();
        fast.sync_points()
    };
    assert!(total >= 5, "the workload syncs the log: {total}");
    // The last round crashes after the whole workload.
    for n in 1..=total + 1 {
        let fast = Arc::new(CrashBackend::new());
        let capacity: Arc<dyn Backend> = Arc::new(MemBackend::new());
        fast.crash_at(n);
        let f: Arc<dyn Backend> = fast.clone();
        let (steps, durable) = match Engine::open(
            Arc::clone(&f),
            Arc::clone(&capacity),
            Arc::new(SystemClock::new()),
            EngineConfig {
                redirector: RedirectorConfig {
                    policy: RedirectPolicy::FastAll,
                    ..RedirectorConfig::default()
                },
                ..EngineConfig::default()
            },
        ) {
            Ok(engine) => {
                let done = workload(&engine);
                engine.close();
                done
            }
            Err(_) => (0, &b""[..]),
        };
        // A power cut now (if the armed one did not fire) and a restart.
        fast.disarm();
        fast.crash();
        fast.restart();
        let what = format!("crash at fast sync {n} after {steps} steps");
        let engine = Engine::open(
            Arc::clone(&f),
            Arc::clone(&capacity),
            Arc::new(SystemClock::new()),
            EngineConfig::default(),
        )
        .unwrap_or_else(|e| panic!("{what}: recovery failed: {e}"));
        engine.drain().unwrap();
        let name = if steps >= 2 { "b" } else { "a" };
        let bytes = capacity_bytes(&capacity, name).unwrap_or_default();
        assert!(bytes.starts_with(durable), "{what}: {name} holds {bytes:?}");
        if steps >= 3 {
            assert!(
                capacity.metadata(&p("a")).is_err(),
                "{what}: the unlinked name came back"
            );
        }
    }
}

/// A rename of a file with nothing buffered appended no path record, but
/// the filling region still described the file by its old name: the next
/// write there went without a description, and after a restart its bytes
/// were flushed to the old name (recreated) instead of the new one.
#[test]
fn rename_with_nothing_buffered_then_a_write_restarts_under_the_new_name() {
    let (fast, capacity) = backends();
    {
        let engine = open(&fast, &capacity);
        let id = engine.create(&p("old")).unwrap();
        engine.write(id, 0, b"first").unwrap();
        engine.truncate(id, 0).unwrap();
        assert_eq!(engine.buffered_bytes(), 0);
        engine.rename(&p("old"), &p("new")).unwrap();
        engine.write(id, 0, b"second").unwrap();
        engine.fsync(id).unwrap();
        engine.close();
    }
    let engine = open(&fast, &capacity);
    engine.drain().unwrap();
    assert_eq!(capacity_bytes(&capacity, "new").unwrap(), b"second");
    assert!(
        capacity.metadata(&p("old")).is_err(),
        "the old name must not come back"
    );
}

/// Found by the mount's reference model: a rename of a missing source over
/// a file with buffered bytes dropped those bytes before the capacity
/// rename failed; so did a directory renamed over such a file.
#[test]
fn a_rename_that_fails_keeps_the_targets_buffered_bytes() {
    let (fast, capacity) = backends();
    let engine = open(&fast, &capacity);
    let t = RelPath::new("t").unwrap();
    let id = engine.create(&t).unwrap();
    engine.write(id, 0, b"buffered").unwrap();
    engine.release(id);
    assert!(engine.buffered_bytes() > 0);
    let missing = RelPath::new("missing").unwrap();
    assert!(engine.rename(&missing, &t).is_err());
    let dir = RelPath::new("d").unwrap();
    engine.mkdir(&dir).unwrap();
    assert!(engine.rename(&dir, &t).is_err());
    let id = engine.open_file(&t).unwrap();
    assert_eq!(engine.read(id, 0, 64).unwrap(), b"buffered");
    engine.drain().unwrap();
    assert_eq!(capacity_bytes(&capacity, "t").unwrap(), b"buffered");
}

/// `sluice top` shows each tier's read bandwidth from these counters: a
/// read of flushed and buffered bytes counts each part where it was read:
/// buffered bytes on the fast tier, flushed bytes still in their region as
/// clean hits, the rest (the clean cache's misses) on the capacity tier.
#[test]
fn reads_count_buffered_bytes_on_the_fast_tier_and_the_rest_on_the_capacity_tier() {
    let (fast, capacity) = backends();
    let engine = open(&fast, &capacity);
    let id = engine.create(&p("f")).unwrap();
    engine.write(id, 0, &[1u8; 4096]).unwrap();
    engine.drain().unwrap();
    engine.write(id, 4096, &[2u8; 2048]).unwrap();
    let before = engine.stats();
    assert_eq!(engine.read(id, 0, 8192).unwrap().len(), 6144);
    let after = engine.stats();
    assert_eq!(after.fast_read_bytes - before.fast_read_bytes, 2048);
    assert_eq!(after.clean_read_bytes - before.clean_read_bytes, 4096);
    assert_eq!(after.capacity_read_bytes - before.capacity_read_bytes, 0);
    // Written over on the capacity tier behind the engine: a miss.
    let f = capacity
        .open(&p("f"), sluice_env::OpenOptions::default())
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(5));
    f.write_at(&[3u8; 4096], 0).unwrap();
    engine.refresh_size(id).unwrap();
    let read = engine.read(id, 0, 4096).unwrap();
    assert!(read == [3u8; 4096], "the capacity file's new bytes");
    let last = engine.stats();
    assert_eq!(last.capacity_read_bytes - after.capacity_read_bytes, 4096);
    assert_eq!(last.cache_stale_drops, 1);
}
