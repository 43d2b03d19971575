//! Shared by tests that hold a write in flight (`mod gate_support;`): a
//! backend whose files hold a write of [`MARKER`] bytes, once armed,
//! until the test lets it go, so a test can open the window a lock-free
//! wait leaves and act in it; and the engine the log's tests put over it
//! ([`fast_all`] on [`gated_memory`]). Not every test uses every helper.
#![allow(dead_code)]

use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use sluice_engine::{Engine, EngineConfig};
use sluice_env::memory::MemBackend;
use sluice_env::{Backend, BackendFile, Forward, ForwardFile, OpenOptions, RelPath, SystemClock};
use sluice_policy::detector::DetectorConfig;
use sluice_policy::redirector::{RedirectPolicy, RedirectorConfig};

/// Bytes whose append the fast tier holds until told.
pub const MARKER: u8 = 0xee;

/// Held writes: `held` says one is held, `go` lets it go.
#[derive(Default)]
pub struct Gate {
    pub armed: Mutex<Option<(mpsc::Sender<()>, mpsc::Receiver<()>)>>,
}

struct GatedFile {
    inner: Arc<dyn BackendFile>,
    gate: Arc<Gate>,
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
    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        if buf.len() >= 64 && buf.iter().filter(|&&b| b == MARKER).count() >= 64 {
            let armed = self.gate.armed.lock().unwrap().take();
            if let Some((held, go)) = armed {
                held.send(()).unwrap();
                go.recv_timeout(Duration::from_secs(10)).unwrap();
            }
        }
        self.inner.write_at(buf, offset)
    }
}

/// A fast tier whose files hold a write of [`MARKER`] bytes once armed.
pub struct Gated {
    pub inner: Arc<dyn Backend>,
    pub gate: Arc<Gate>,
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
        }))
    }
}

impl Gate {
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
    let fast = Arc::new(Gated {
        inner: Arc::new(MemBackend::new()),
        gate: Arc::clone(&gate),
    });
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
