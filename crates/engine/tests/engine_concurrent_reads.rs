//! Concurrent reads of capacity bytes reach the capacity tier together:
//! the engine lock is not held across them (a server that read one request
//! at a time would hide every seek the disk's queue could reorder).

use std::fmt;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sluice_engine::{Engine, EngineConfig};
use sluice_env::memory::MemBackend;
use sluice_env::{
    Backend, BackendFile, DirEntry, Metadata, OpenOptions, RelPath, SpaceInfo, SystemClock,
};

/// Counts reads in progress and remembers the most at once; every read
/// takes at least 100 ms.
#[derive(Default)]
struct Gauge {
    now: AtomicUsize,
    most: AtomicUsize,
}

#[derive(Debug)]
struct SlowReads {
    inner: MemBackend,
    gauge: Arc<Gauge>,
}

impl fmt::Debug for Gauge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Gauge")
    }
}

#[derive(Debug)]
struct SlowFile {
    inner: Arc<dyn BackendFile>,
    gauge: Arc<Gauge>,
}

impl BackendFile for SlowFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let now = self.gauge.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.gauge.most.fetch_max(now, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(100));
        let n = self.inner.read_at(buf, offset);
        self.gauge.now.fetch_sub(1, Ordering::SeqCst);
        n
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.inner.write_at(buf, offset)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.inner.sync_data()
    }
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.inner.set_len(len)
    }
}

impl Backend for SlowReads {
    fn describe(&self) -> String {
        "slow reads".into()
    }
    fn open(&self, path: &RelPath, options: OpenOptions) -> io::Result<Arc<dyn BackendFile>> {
        Ok(Arc::new(SlowFile {
            inner: self.inner.open(path, options)?,
            gauge: Arc::clone(&self.gauge),
        }))
    }
    fn metadata(&self, path: &RelPath) -> io::Result<Metadata> {
        self.inner.metadata(path)
    }
    fn remove_file(&self, path: &RelPath) -> io::Result<()> {
        self.inner.remove_file(path)
    }
    fn rename(&self, from: &RelPath, to: &RelPath) -> io::Result<()> {
        self.inner.rename(from, to)
    }
    fn create_dir(&self, path: &RelPath) -> io::Result<()> {
        self.inner.create_dir(path)
    }
    fn remove_dir(&self, path: &RelPath) -> io::Result<()> {
        self.inner.remove_dir(path)
    }
    fn read_dir(&self, path: &RelPath) -> io::Result<Vec<DirEntry>> {
        self.inner.read_dir(path)
    }
    fn sync_dir(&self, path: &RelPath) -> io::Result<()> {
        self.inner.sync_dir(path)
    }
    fn space(&self) -> io::Result<SpaceInfo> {
        self.inner.space()
    }
}

#[test]
fn capacity_reads_of_three_files_overlap() {
    let gauge = Arc::new(Gauge::default());
    let capacity: Arc<dyn Backend> = Arc::new(SlowReads {
        inner: MemBackend::new(),
        gauge: Arc::clone(&gauge),
    });
    let engine = Arc::new(
        Engine::open(
            Arc::new(MemBackend::new()),
            Arc::clone(&capacity),
            Arc::new(SystemClock::new()),
            EngineConfig::default(),
        )
        .unwrap(),
    );
    let files: Vec<_> = ["a", "b", "c"]
        .iter()
        .map(|name| {
            let path = RelPath::new(name).unwrap();
            let f = capacity.open(&path, OpenOptions::CREATE).unwrap();
            f.write_at(name.as_bytes(), 0).unwrap();
            engine.open_file(&path).unwrap()
        })
        .collect();
    std::thread::scope(|s| {
        for (id, name) in files.iter().zip(["a", "b", "c"]) {
            let engine = &engine;
            s.spawn(move || assert_eq!(engine.read(*id, 0, 1).unwrap(), name.as_bytes()));
        }
    });
    assert!(
        gauge.most.load(Ordering::SeqCst) >= 2,
        "the three capacity reads ran one at a time"
    );
}
