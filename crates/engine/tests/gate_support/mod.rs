//! Shared by tests that hold a tier call in flight (`mod gate_support;`):
//! a backend whose files hold a write of marked bytes ([`Gated`], which
//! also counts the writes and reads), one that holds a `set_attr`
//! ([`AttrGated`]) or a `sync_data` ([`SyncGated`]), once armed, until the test lets it go, so a test can open the window a lock-free wait leaves
//! and act in it; and the engine the log's tests put over it
//! ([`fast_all`] on [`gated_memory`]). Not every test uses every helper.
#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use sluice_engine::{Engine, EngineConfig};
use sluice_env::memory::MemBackend;
use sluice_env::{
    Backend, BackendFile, Forward, ForwardFile, OpenOptions, RelPath, SetAttr, SystemClock,
};
use sluice_policy::detector::DetectorConfig;
use sluice_policy::redirector::{RedirectPolicy, RedirectorConfig};

/// Bytes whose append the fast tier holds until told.
pub const MARKER: u8 = 0xee;

/// Held calls: `held` says one is held, `go` lets it go.
#[derive(Debug, Default)]
pub struct Gate {
    pub armed: Mutex<Option<(mpsc::Sender<()>, mpsc::Receiver<()>)>>,
}

struct GatedFile {
    inner: Arc<dyn BackendFile>,
    gate: Arc<Gate>,
    byte: u8,
    writes: Arc<AtomicU64>,
    reads: Arc<AtomicU64>,
}

impl std::fmt::Debug for GatedFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.fmt(f)
    }
}

impl ForwardFile for GatedFile {
    fn inner(&self) -> &dyn BackendFile {
        &*self.inner
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.writes.fetch_add(1, Ordering::SeqCst);
        if buf.iter().filter(|&&b| b == self.byte).count() >= 64 {
            self.gate.hold();
        }
        self.inner.write_at(buf, offset)
    }
}

/// A tier whose files, once the gate is armed, hold the next write of 64
/// or more `byte`s ([`MARKER`] unless set), and count every write and
/// every read.
pub struct Gated {
    pub inner: Arc<dyn Backend>,
    pub gate: Arc<Gate>,
    pub byte: u8,
    pub writes: Arc<AtomicU64>,
    pub reads: Arc<AtomicU64>,
}

impl Gated {
    /// `inner` behind `gate`, holding writes of [`MARKER`] bytes.
    pub fn new(inner: Arc<dyn Backend>, gate: &Arc<Gate>) -> Gated {
        Gated {
            inner,
            gate: Arc::clone(gate),
            byte: MARKER,
            writes: Arc::default(),
            reads: Arc::default(),
        }
    }
}

impl std::fmt::Debug for Gated {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.fmt(f)
    }
}

impl Forward for Gated {
    fn inner(&self) -> &dyn Backend {
        &*self.inner
    }
    fn open(&self, path: &RelPath, options: OpenOptions) -> std::io::Result<Arc<dyn BackendFile>> {
        let inner = self.inner.open(path, options)?;
        Ok(Arc::new(GatedFile {
            inner,
            gate: Arc::clone(&self.gate),
            byte: self.byte,
            writes: Arc::clone(&self.writes),
            reads: Arc::clone(&self.reads),
        }))
    }
}

/// A tier whose next `set_attr` once armed is held until the test lets
/// it go: a flush's restore of a file's mtime after its writes
/// (flush.rs), for instance.
#[derive(Debug)]
pub struct AttrGated {
    pub inner: Arc<dyn Backend>,
    pub gate: Arc<Gate>,
}

impl Forward for AttrGated {
    fn inner(&self) -> &dyn Backend {
        &*self.inner
    }
    fn set_attr(&self, path: &RelPath, attr: &SetAttr) -> std::io::Result<()> {
        self.gate.hold();
        self.inner.set_attr(path, attr)
    }
}

/// A tier whose files' next `sync_data` once armed is held until the
/// test lets it go: the log sync behind a sync's clean record, for
/// instance.
#[derive(Debug)]
pub struct SyncGated {
    pub inner: Arc<dyn Backend>,
    pub gate: Arc<Gate>,
}

#[derive(Debug)]
struct SyncGatedFile {
    inner: Arc<dyn BackendFile>,
    gate: Arc<Gate>,
}

impl ForwardFile for SyncGatedFile {
    fn inner(&self) -> &dyn BackendFile {
        &*self.inner
    }
    fn sync_data(&self) -> std::io::Result<()> {
        self.gate.hold();
        self.inner.sync_data()
    }
}

impl Forward for SyncGated {
    fn inner(&self) -> &dyn Backend {
        &*self.inner
    }
    fn open(&self, path: &RelPath, options: OpenOptions) -> std::io::Result<Arc<dyn BackendFile>> {
        Ok(Arc::new(SyncGatedFile {
            inner: self.inner.open(path, options)?,
            gate: Arc::clone(&self.gate),
        }))
    }
}

impl Gate {
    /// If armed: say the call is held, and wait to be let go.
    fn hold(&self) {
        let armed = self.armed.lock().unwrap().take();
        if let Some((held, go)) = armed {
            held.send(()).unwrap();
            go.recv_timeout(Duration::from_secs(10)).unwrap();
        }
    }

    /// Arm the gate: the next marked write sends on the first channel's
    /// sender once it is held, and waits for a message on the second.
    pub fn arm(&self) -> (mpsc::Receiver<()>, mpsc::Sender<()>) {
        let (held_tx, held) = mpsc::channel();
        let (go, go_rx) = mpsc::channel();
        *self.armed.lock().unwrap() = Some((held_tx, go_rx));
        (held, go)
    }
}

/// A fast tier in memory whose marked writes the returned gate holds.
pub fn gated_memory() -> (Arc<Gate>, Arc<dyn Backend>) {
    let gate = Arc::new(Gate::default());
    let fast = Arc::new(Gated::new(Arc::new(MemBackend::new()), &gate));
    (gate, fast)
}

/// An engine over `fast` and `capacity` that buffers every write
/// (`fast-all`, streams of 4 requests), so each write is an append to the
/// log a gated fast tier can hold.
pub fn fast_all(fast: Arc<dyn Backend>, capacity: &Arc<dyn Backend>) -> Arc<Engine> {
    let config = EngineConfig {
        redirector: RedirectorConfig {
            policy: RedirectPolicy::FastAll,
            detector: DetectorConfig { stream_len: 4 },
            ..RedirectorConfig::default()
        },
        ..EngineConfig::default()
    };
    Arc::new(
        Engine::open(
            fast,
            Arc::clone(capacity),
            Arc::new(SystemClock::new()),
            config,
        )
        .unwrap(),
    )
}
