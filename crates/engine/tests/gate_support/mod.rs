//! Shared by tests that hold a write in flight (`mod gate_support;`): a
//! backend whose files hold a write of [`MARKER`] bytes, once armed,
//! until the test lets it go, so a test can open the window a lock-free
//! wait leaves and act in it.

use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use sluice_env::{Backend, BackendFile, Metadata, OpenOptions, RelPath};

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

impl BackendFile for GatedFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        self.inner.read_at(buf, offset)
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
    fn sync_data(&self) -> std::io::Result<()> {
        self.inner.sync_data()
    }
    fn len(&self) -> std::io::Result<u64> {
        self.inner.len()
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.inner.set_len(len)
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

impl Backend for Gated {
    fn describe(&self) -> String {
        self.inner.describe()
    }
    fn open(&self, path: &RelPath, options: OpenOptions) -> std::io::Result<Arc<dyn BackendFile>> {
        let inner = self.inner.open(path, options)?;
        Ok(Arc::new(GatedFile {
            inner,
            gate: Arc::clone(&self.gate),
        }))
    }
    fn metadata(&self, path: &RelPath) -> std::io::Result<Metadata> {
        self.inner.metadata(path)
    }
    fn remove_file(&self, path: &RelPath) -> std::io::Result<()> {
        self.inner.remove_file(path)
    }
    fn rename(&self, from: &RelPath, to: &RelPath) -> std::io::Result<()> {
        self.inner.rename(from, to)
    }
    fn create_dir(&self, path: &RelPath) -> std::io::Result<()> {
        self.inner.create_dir(path)
    }
    fn remove_dir(&self, path: &RelPath) -> std::io::Result<()> {
        self.inner.remove_dir(path)
    }
    fn read_dir(&self, path: &RelPath) -> std::io::Result<Vec<sluice_env::DirEntry>> {
        self.inner.read_dir(path)
    }
    fn sync_dir(&self, path: &RelPath) -> std::io::Result<()> {
        self.inner.sync_dir(path)
    }
    fn space(&self) -> std::io::Result<sluice_env::SpaceInfo> {
        self.inner.space()
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
