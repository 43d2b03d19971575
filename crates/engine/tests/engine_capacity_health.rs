//! Issue 31: the capacity directory replaced under a live engine. No byte
//! leaves the log unless it is durable where the capacity tier's name
//! leads; the drain says what happened and where the bytes are; putting
//! the directory back lets the flush finish.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sluice_engine::{Engine, EngineConfig};
use sluice_env::memory::MemBackend;
use sluice_env::posix::PosixBackend;
use sluice_env::{
    raw_os_error, Backend, BackendFile, Forward, ForwardFile, OpenOptions, RelPath, SystemClock,
    TierHealth,
};
use sluice_policy::detector::DetectorConfig;
use sluice_policy::redirector::{RedirectPolicy, RedirectorConfig};
use sluice_policy::FileId;

const SLOT: u64 = 64 * 1024;
const SLOTS: u64 = 24;
const ENODEV: i32 = 19;

/// Every write to the log (`fast-all`), small regions.
fn open(fast: &Arc<dyn Backend>, capacity: &Arc<dyn Backend>) -> Engine {
    Engine::open(
        Arc::clone(fast),
        Arc::clone(capacity),
        Arc::new(SystemClock::new()),
        EngineConfig {
            redirector: RedirectorConfig {
                policy: RedirectPolicy::FastAll,
                detector: DetectorConfig { stream_len: 4 },
                ..RedirectorConfig::default()
            },
            regions: 4,
            region_bytes: 1024 * 1024,
            record_max_bytes: 64 * 1024,
            ..EngineConfig::default()
        },
    )
    .unwrap()
}

fn pattern(i: u64) -> Vec<u8> {
    (0..SLOT)
        .map(|b| (i as u8).wrapping_mul(13).wrapping_add(b as u8) | 1)
        .collect()
}

fn write_slots(engine: &Engine, id: FileId) {
    for i in 0..SLOTS {
        engine.write(id, i * SLOT, &pattern(i)).unwrap();
    }
    engine.fsync(id).unwrap();
}

fn check_file(path: &Path) {
    let bytes = fs::read(path).unwrap();
    assert_eq!(bytes.len() as u64, SLOTS * SLOT, "{}", path.display());
    for i in 0..SLOTS {
        let at = (i * SLOT) as usize;
        assert!(
            bytes[at..at + SLOT as usize] == pattern(i)[..],
            "{}: slot {i}",
            path.display()
        );
    }
}

/// The capacity directory and where it is moved meanwhile.
struct Dirs {
    _top: tempfile::TempDir,
    capacity: PathBuf,
    away: PathBuf,
}

impl Dirs {
    fn new() -> Dirs {
        let top = tempfile::tempdir().unwrap();
        let capacity = top.path().join("capacity");
        let away = top.path().join("away");
        fs::create_dir(&capacity).unwrap();
        Dirs {
            _top: top,
            capacity,
            away,
        }
    }

    /// Another (empty) directory at the capacity tier's name, as a file
    /// system lazily unmounted leaves the directory under it.
    fn replace(&self) {
        fs::rename(&self.capacity, &self.away).unwrap();
        fs::create_dir(&self.capacity).unwrap();
    }

    /// The original directory back at the name.
    fn put_back(&self) {
        fs::remove_dir_all(&self.capacity).unwrap();
        fs::rename(&self.away, &self.capacity).unwrap();
    }
}

fn wait_health(engine: &Engine, name: &str) {
    let start = Instant::now();
    while engine.status().capacity_health.name() != name {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "capacity tier not {name}: {}",
            engine.status().capacity_health
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn issue_31_a_replaced_capacity_directory_keeps_every_buffered_byte_in_the_log() {
    let dirs = Dirs::new();
    let fast: Arc<dyn Backend> = Arc::new(MemBackend::new());
    let capacity: Arc<dyn Backend> = Arc::new(PosixBackend::new(dirs.capacity.clone()).unwrap());
    let engine = open(&fast, &capacity);
    let id = engine.create(&RelPath::new("f").unwrap()).unwrap();
    write_slots(&engine, id);
    let buffered = engine.buffered_bytes();
    assert_eq!(buffered, SLOTS * SLOT);

    dirs.replace();
    let error = engine.drain().unwrap_err();
    assert_eq!(raw_os_error(&error), Some(ENODEV), "{error}");
    let message = error.to_string();
    assert!(message.contains("the capacity tier is lost"), "{message}");
    assert!(
        message.contains("stay buffered in the fast tier's log"),
        "{message}"
    );
    assert!(message.contains("removed or replaced"), "{message}");
    assert_eq!(engine.buffered_bytes(), buffered, "nothing left the log");
    assert!(matches!(
        engine.status().capacity_health,
        TierHealth::Lost { .. }
    ));
    assert!(
        !dirs.capacity.join("f").exists(),
        "nothing went to the new directory"
    );
    let incident = engine
        .incidents()
        .newest()
        .into_iter()
        .find(|i| i.op == "capacity")
        .expect("an incident says the tier is lost");
    assert_eq!(incident.errno, Some(ENODEV));

    // Anything that needs the capacity tier is refused, with the cause;
    // buffered writes still go to the log.
    let error = engine.create(&RelPath::new("g").unwrap()).unwrap_err();
    assert_eq!(raw_os_error(&error), Some(ENODEV), "{error}");
    engine.write(id, 0, &pattern(0)).unwrap();
    assert_eq!(engine.read(id, SLOT, SLOT).unwrap(), pattern(1));

    dirs.put_back();
    wait_health(&engine, "healthy");
    engine.drain().unwrap();
    assert_eq!(engine.buffered_bytes(), 0);
    check_file(&dirs.capacity.join("f"));
}

/// Runs once, at the first file write after it is armed.
type Hook = Arc<Mutex<Option<Box<dyn FnOnce() + Send>>>>;

/// A capacity backend over `inner` whose file writes run the hook: the
/// directory is replaced while a flush writes.
struct Hooked {
    inner: Arc<dyn Backend>,
    hook: Hook,
    armed: Arc<AtomicBool>,
}

struct HookedFile {
    inner: Arc<dyn BackendFile>,
    hook: Hook,
    armed: Arc<AtomicBool>,
}

impl std::fmt::Debug for Hooked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.fmt(f)
    }
}

impl std::fmt::Debug for HookedFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.fmt(f)
    }
}

impl Forward for Hooked {
    fn inner(&self) -> &dyn Backend {
        &*self.inner
    }
    fn open(&self, path: &RelPath, options: OpenOptions) -> std::io::Result<Arc<dyn BackendFile>> {
        Ok(Arc::new(HookedFile {
            inner: self.inner.open(path, options)?,
            hook: Arc::clone(&self.hook),
            armed: Arc::clone(&self.armed),
        }))
    }
}

impl ForwardFile for HookedFile {
    fn inner(&self) -> &dyn BackendFile {
        &*self.inner
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        let result = self.inner.write_at(buf, offset);
        if self.armed.load(Ordering::SeqCst) {
            if let Some(hook) = self.hook.lock().unwrap().take() {
                hook();
            }
        }
        result
    }
}

/// The directory replaced after the flush checked the tier and while it
/// writes: the writes that follow are refused, or land in the directory
/// moved away, and either way the regions are not reset, so every byte is
/// still in the log (the old code reset them, then said the drain failed).
#[test]
fn issue_31_a_directory_replaced_during_a_flush_leaves_its_regions_in_the_log() {
    let dirs = Dirs::new();
    let fast: Arc<dyn Backend> = Arc::new(MemBackend::new());
    let posix: Arc<dyn Backend> = Arc::new(PosixBackend::new(dirs.capacity.clone()).unwrap());
    let replace = {
        let (capacity, away) = (dirs.capacity.clone(), dirs.away.clone());
        move || {
            fs::rename(&capacity, &away).unwrap();
            fs::create_dir(&capacity).unwrap();
        }
    };
    let hooked = Hooked {
        inner: posix,
        hook: Arc::new(Mutex::new(Some(Box::new(replace)))),
        armed: Arc::new(AtomicBool::new(false)),
    };
    let armed = Arc::clone(&hooked.armed);
    let capacity: Arc<dyn Backend> = Arc::new(hooked);
    let engine = open(&fast, &capacity);
    let id = engine.create(&RelPath::new("f").unwrap()).unwrap();
    write_slots(&engine, id);
    let buffered = engine.buffered_bytes();
    armed.store(true, Ordering::SeqCst);

    let error = engine.drain().unwrap_err();
    assert_eq!(raw_os_error(&error), Some(ENODEV), "{error}");
    assert_eq!(engine.buffered_bytes(), buffered, "no region was reset");
    for i in 0..SLOTS {
        assert_eq!(engine.read(id, i * SLOT, SLOT).unwrap(), pattern(i));
    }

    dirs.put_back();
    wait_health(&engine, "healthy");
    engine.drain().unwrap();
    check_file(&dirs.capacity.join("f"));
}
