//! Issue 33: opens, creates and unlinks of names the engine does not hold
//! make their capacity-tier calls without the engine lock. The bug feared
//! most: an open that found the file at a name registering it under that
//! name after an unlink removed it, so the engine holds a name the tier no
//! longer has (a later create of the name fails with "file exists", and
//! writes go to the removed file). Each test runs the other operation from
//! inside the first one's capacity call, where the lock is not held.

use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use sluice_engine::{Engine, EngineConfig};
use sluice_env::posix::PosixBackend;
use sluice_env::{Backend, BackendFile, Forward, OpenOptions, RelPath, SystemClock};

type Hook = Mutex<Option<Box<dyn FnOnce() + Send>>>;

/// A capacity tier over a real directory whose next `open` (after the
/// inner open) or `remove_file` (before the inner removal) runs a hook.
#[derive(Default)]
struct Hooks {
    open: Hook,
    remove: Hook,
}

struct Hooked {
    inner: Arc<dyn Backend>,
    hooks: Arc<Hooks>,
}

impl std::fmt::Debug for Hooked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.fmt(f)
    }
}

fn run(hook: &Hook) {
    let hook = hook.lock().unwrap().take();
    if let Some(hook) = hook {
        hook();
    }
}

impl Forward for Hooked {
    fn inner(&self) -> &dyn Backend {
        &*self.inner
    }
    fn open(&self, path: &RelPath, options: OpenOptions) -> std::io::Result<Arc<dyn BackendFile>> {
        let file = self.inner.open(path, options);
        run(&self.hooks.open);
        file
    }
    fn remove_file(&self, path: &RelPath) -> std::io::Result<()> {
        run(&self.hooks.remove);
        self.inner.remove_file(path)
    }
}

/// An engine over a hooked real directory, the engine reachable from the
/// hooks, and a file `f` written and closed (so the engine forgot it).
fn setup(dir: &tempfile::TempDir) -> (Arc<Engine>, Arc<Hooks>, Arc<OnceLock<Arc<Engine>>>) {
    let root = |name: &str| {
        let p = dir.path().join(name);
        std::fs::create_dir_all(&p).unwrap();
        Arc::new(PosixBackend::new(p).unwrap()) as Arc<dyn Backend>
    };
    let hooks = Arc::new(Hooks::default());
    let capacity: Arc<dyn Backend> = Arc::new(Hooked {
        inner: root("capacity"),
        hooks: Arc::clone(&hooks),
    });
    let engine = Arc::new(
        Engine::open(
            root("fast"),
            capacity,
            Arc::new(SystemClock::new()),
            EngineConfig::default(),
        )
        .unwrap(),
    );
    let f = name();
    let id = engine.create(&f).unwrap();
    engine.write(id, 0, b"first").unwrap();
    engine.release(id);
    assert!(!engine.holds(&f), "forgotten once closed");
    let cell = Arc::new(OnceLock::new());
    cell.set(Arc::clone(&engine)).ok().unwrap();
    (engine, hooks, cell)
}

fn name() -> RelPath {
    RelPath::new("f").unwrap()
}

/// The unlink of `f` runs (to its end, in another thread) while an open
/// of `f` is inside its unlocked capacity open, after it found the file.
#[test]
fn an_open_racing_an_unlink_never_registers_the_removed_name() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, hooks, cell) = setup(&dir);
    *hooks.open.lock().unwrap() = Some(Box::new(move || {
        let engine = Arc::clone(cell.get().unwrap());
        let (done, finished) = mpsc::channel();
        std::thread::spawn(move || done.send(engine.unlink(&name())).unwrap());
        // A version holding the engine lock here would block the unlink
        // until the open ends: then there is no race to lose.
        if let Ok(unlinked) = finished.recv_timeout(Duration::from_secs(5)) {
            unlinked.unwrap();
        }
    }));
    let opened = engine.open_file(&name());
    std::thread::sleep(Duration::from_millis(50));
    assert!(!dir.path().join("capacity/f").exists(), "the unlink ran");
    match opened {
        Ok(id) => {
            assert!(!engine.holds(&name()), "a removed name is not held");
            engine.release(id);
        }
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::NotFound, "{e}"),
    }
    let id = engine
        .create(&name())
        .expect("the name is free: a new file can take it");
    engine.release(id);
}

/// An open of `f` starts while the unlink of `f` is inside its unlocked
/// capacity removal, before the file is gone: the open must not register
/// the name it found, since the removal is about to take it.
#[test]
fn an_open_during_an_unlink_under_way_waits_for_it() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, hooks, cell) = setup(&dir);
    let (tx, rx) = mpsc::channel();
    *hooks.remove.lock().unwrap() = Some(Box::new(move || {
        let engine = Arc::clone(cell.get().unwrap());
        std::thread::spawn(move || tx.send(engine.open_file(&name())).unwrap());
        // Long enough for the open to find the file and come back for
        // the lock: it must then wait for this removal.
        std::thread::sleep(Duration::from_millis(200));
    }));
    engine.unlink(&name()).unwrap();
    let opened = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the open ended");
    match opened {
        Ok(id) => panic!("opened {id:?} through a name being removed"),
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::NotFound, "{e}"),
    }
    assert!(!engine.holds(&name()));
    let id = engine
        .create(&name())
        .expect("the name is free: a new file can take it");
    engine.release(id);
}
