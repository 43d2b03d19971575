//! No engine-wide lock across tier I/O: concurrent reads of capacity bytes,
//! capacity writes of different files, reads of buffered bytes and one
//! file's fsync reach the tiers together (a server that did one request at
//! a time would hide every seek the disk's queue could reorder, and one
//! slow file would stall every writer). A stress test checks that reads,
//! writes and flushes running at once on small regions never lose or mix
//! up a byte.

use std::fmt;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sluice_engine::{Engine, EngineConfig};
use sluice_env::memory::MemBackend;
use sluice_env::{Backend, BackendFile, Forward, ForwardFile, OpenOptions, RelPath, SystemClock};
use sluice_policy::redirector::{RedirectPolicy, RedirectorConfig};

/// Counts operations of one kind in progress and remembers the most at
/// once.
#[derive(Default)]
struct Gauge {
    now: AtomicUsize,
    most: AtomicUsize,
}

impl Gauge {
    /// Run `f` counted, taking at least `delay`.
    fn time<T>(&self, delay: Duration, f: impl FnOnce() -> T) -> T {
        if delay.is_zero() {
            return f();
        }
        let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        std::thread::sleep(delay);
        let result = f();
        self.now.fetch_sub(1, Ordering::SeqCst);
        result
    }

    fn most(&self) -> usize {
        self.most.load(Ordering::SeqCst)
    }
}

/// Delays per operation kind (zero: not slowed, not counted).
#[derive(Clone, Copy, Debug, Default)]
struct Delays {
    read: Duration,
    write: Duration,
    sync: Duration,
}

/// A gauge per operation kind.
#[derive(Default, Debug)]
struct Gauges {
    reads: Gauge,
    writes: Gauge,
    syncs: Gauge,
}

#[derive(Debug)]
struct SlowReads {
    inner: MemBackend,
    gauge: Arc<Gauges>,
    delays: Delays,
}

impl fmt::Debug for Gauge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Gauge")
    }
}

#[derive(Debug)]
struct SlowFile {
    inner: Arc<dyn BackendFile>,
    gauge: Arc<Gauges>,
    delays: Delays,
}

impl ForwardFile for SlowFile {
    fn inner(&self) -> &dyn BackendFile {
        &*self.inner
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.gauge
            .reads
            .time(self.delays.read, || self.inner.read_at(buf, offset))
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.gauge
            .writes
            .time(self.delays.write, || self.inner.write_at(buf, offset))
    }
    fn sync_data(&self) -> io::Result<()> {
        self.gauge
            .syncs
            .time(self.delays.sync, || self.inner.sync_data())
    }
}

impl Forward for SlowReads {
    fn inner(&self) -> &dyn Backend {
        &self.inner
    }
    fn describe(&self) -> String {
        "slow reads".into()
    }
    fn open(&self, path: &RelPath, options: OpenOptions) -> io::Result<Arc<dyn BackendFile>> {
        Ok(Arc::new(SlowFile {
            inner: self.inner.open(path, options)?,
            gauge: Arc::clone(&self.gauge),
            delays: self.delays,
        }))
    }
}

fn slow(delays: Delays) -> (Arc<Gauges>, Arc<dyn Backend>) {
    let gauge = Arc::new(Gauges::default());
    let backend = Arc::new(SlowReads {
        inner: MemBackend::new(),
        gauge: Arc::clone(&gauge),
        delays,
    });
    (gauge, backend)
}

fn engine(fast: Arc<dyn Backend>, capacity: Arc<dyn Backend>, policy: RedirectPolicy) -> Engine {
    Engine::open(
        fast,
        capacity,
        Arc::new(SystemClock::new()),
        EngineConfig {
            redirector: RedirectorConfig {
                policy,
                ..RedirectorConfig::default()
            },
            // Buffered reads read the log (not the memory copy of its
            // newest records, mirror.rs): the slow fast tier is what the
            // tests time.
            memory_copy_bytes: 0,
            ..EngineConfig::default()
        },
    )
    .unwrap()
}

const SLOW: Duration = Duration::from_millis(100);

#[test]
fn capacity_reads_of_three_files_overlap() {
    let (gauge, capacity) = slow(Delays {
        read: SLOW,
        ..Delays::default()
    });
    let engine = engine(
        Arc::new(MemBackend::new()),
        Arc::clone(&capacity),
        RedirectPolicy::SsdupPlus,
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
        gauge.reads.most() >= 2,
        "the three capacity reads ran one at a time"
    );
}

/// Regression (data-path issue): capacity-tier writes ran under the engine
/// lock, so writers of different files waited for each other's disk.
#[test]
fn capacity_writes_of_three_files_overlap() {
    let (gauge, capacity) = slow(Delays {
        write: SLOW,
        ..Delays::default()
    });
    let engine = engine(
        Arc::new(MemBackend::new()),
        capacity,
        RedirectPolicy::CapacityOnly,
    );
    let files: Vec<_> = ["a", "b", "c"]
        .iter()
        .map(|name| engine.create(&RelPath::new(name).unwrap()).unwrap())
        .collect();
    std::thread::scope(|s| {
        for (i, &id) in files.iter().enumerate() {
            let engine = &engine;
            s.spawn(move || engine.write(id, 0, &[i as u8; 4096]).unwrap());
        }
    });
    for (i, &id) in files.iter().enumerate() {
        assert_eq!(engine.read(id, 0, 4096).unwrap(), vec![i as u8; 4096]);
    }
    assert!(
        gauge.writes.most() >= 2,
        "the three capacity writes ran one at a time"
    );
}

/// Regression (data-path issue): buffered bytes were copied out of the log
/// under the engine lock, one reader at a time.
#[test]
fn buffered_reads_of_three_files_overlap() {
    let (gauge, fast) = slow(Delays {
        read: SLOW,
        ..Delays::default()
    });
    let engine = engine(fast, Arc::new(MemBackend::new()), RedirectPolicy::FastAll);
    let files: Vec<_> = ["a", "b", "c"]
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let id = engine.create(&RelPath::new(name).unwrap()).unwrap();
            engine.write(id, 0, &[i as u8 + 1; 4096]).unwrap();
            id
        })
        .collect();
    assert!(engine.buffered_bytes() > 0);
    std::thread::scope(|s| {
        for (i, &id) in files.iter().enumerate() {
            let engine = &engine;
            s.spawn(move || assert_eq!(engine.read(id, 0, 4096).unwrap(), vec![i as u8 + 1; 4096]));
        }
    });
    assert!(
        gauge.reads.most() >= 2,
        "the three buffered reads ran one at a time"
    );
}

/// Regression (data-path issue): fsync synced the capacity file and the log
/// under the engine lock, so one file's fsync stalled every other writer.
#[test]
fn one_files_fsync_does_not_stall_writers_of_other_files() {
    let delays = Delays {
        sync: Duration::from_millis(400),
        ..Delays::default()
    };
    let (_, fast) = slow(delays);
    let (gauge, capacity) = slow(delays);
    let engine = engine(fast, capacity, RedirectPolicy::FastAll);
    let a = engine.create(&RelPath::new("a").unwrap()).unwrap();
    let b = engine.create(&RelPath::new("b").unwrap()).unwrap();
    engine.write(a, 0, &[1; 4096]).unwrap();
    std::thread::scope(|s| {
        let engine = &engine;
        s.spawn(move || engine.fsync(a).unwrap());
        // Let the fsync start its first (400 ms) sync, then write b.
        while gauge.syncs.now.load(Ordering::SeqCst) == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        let start = std::time::Instant::now();
        engine.write(b, 0, &[2; 4096]).unwrap();
        assert!(
            start.elapsed() < Duration::from_millis(200),
            "a write of b waited {:?} for a's fsync",
            start.elapsed()
        );
    });
    assert_eq!(engine.read(a, 0, 4096).unwrap(), vec![1; 4096]);
    assert_eq!(engine.read(b, 0, 4096).unwrap(), vec![2; 4096]);
}

/// Writers, readers and the flusher at once on small regions: every read
/// returns exactly the bytes last written (each thread owns its file and
/// checks read-your-writes), and after a drain the capacity tier alone
/// holds them.
#[test]
fn concurrent_writes_reads_and_flushes_lose_nothing() {
    let fast: Arc<dyn Backend> = Arc::new(MemBackend::new());
    let capacity: Arc<dyn Backend> = Arc::new(MemBackend::new());
    let engine = Engine::open(
        fast,
        Arc::clone(&capacity),
        Arc::new(SystemClock::new()),
        EngineConfig {
            redirector: RedirectorConfig {
                policy: RedirectPolicy::SsdupPlus,
                detector: sluice_policy::detector::DetectorConfig { stream_len: 8 },
                ..RedirectorConfig::default()
            },
            regions: 3,
            region_bytes: 256 * 1024,
            record_max_bytes: 16 * 1024,
            ..EngineConfig::default()
        },
    )
    .unwrap();
    const SPAN: u64 = 256 * 1024;
    let models: Vec<Vec<u8>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4u64)
            .map(|t| {
                let engine = &engine;
                s.spawn(move || {
                    let id = engine
                        .create(&RelPath::new(&format!("f{t}")).unwrap())
                        .unwrap();
                    let mut model = vec![0u8; SPAN as usize];
                    let mut x = t * 7919 + 1;
                    for step in 0..600u64 {
                        x = x
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        // Half the threads write sequentially, half at random.
                        let offset = if t % 2 == 0 {
                            (step * 4096) % SPAN
                        } else {
                            (x >> 20) % (SPAN - 8192)
                        };
                        let len = 1 + (x >> 45) % 8192;
                        let len = len.min(SPAN - offset);
                        let byte = (x >> 8) as u8;
                        engine.write(id, offset, &vec![byte; len as usize]).unwrap();
                        model[offset as usize..(offset + len) as usize].fill(byte);
                        if step % 7 == 0 {
                            let at = (x >> 30) % SPAN;
                            let n = 16 * 1024u64.min(SPAN - at);
                            let got = engine.read(id, at, n).unwrap();
                            let want = &model[at as usize..(at as usize + got.len())];
                            assert!(got == want, "thread {t} step {step}: read at {at}");
                        }
                        if step % 97 == 0 {
                            engine.fsync(id).unwrap();
                        }
                    }
                    let got = engine.read(id, 0, SPAN).unwrap();
                    assert!(got == model[..got.len()], "thread {t}: whole file");
                    model
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(
        engine.stats().regions_flushed > 0,
        "the flusher ran meanwhile"
    );
    engine.drain().unwrap();
    for (t, model) in models.iter().enumerate() {
        let file = capacity
            .open(
                &RelPath::new(&format!("f{t}")).unwrap(),
                OpenOptions::default(),
            )
            .unwrap();
        let mut got = vec![0u8; model.len()];
        let n = file.read_at(&mut got, 0).unwrap();
        assert!(got[..n] == model[..n], "capacity file f{t}");
        assert!(
            model[n..].iter().all(|&b| b == 0),
            "capacity file f{t} is short"
        );
    }
}
