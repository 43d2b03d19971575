//! The engine against an in-memory reference: random writes, reads,
//! truncates, renames, unlinks, fsyncs and drains over several files, with
//! the flusher running concurrently, on the memory and POSIX backends.
//! After a final drain the capacity tier alone must hold exactly the model's
//! bytes (DESIGN §4.6, invariant 4).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use sluice_engine::{Engine, EngineConfig};
use sluice_env::memory::MemBackend;
use sluice_env::posix::PosixBackend;
use sluice_env::{Backend, OpenOptions, RelPath, SystemClock};
use sluice_policy::detector::DetectorConfig;
use sluice_policy::flush_gate::FlushGateConfig;
use sluice_policy::redirector::RedirectorConfig;
use sluice_policy::FileId;

const PATHS: [&str; 3] = ["a", "d/b", "c"];
const FILE_MAX: u64 = 96 * 1024;

/// An engine over `fast` and `capacity` with [`small_config`].
fn open(fast: &Arc<dyn Backend>, capacity: &Arc<dyn Backend>) -> Engine {
    Engine::open(
        Arc::clone(fast),
        Arc::clone(capacity),
        Arc::new(SystemClock::new()),
        small_config(),
    )
    .unwrap()
}

/// Small regions and short streams so that routing flips, regions fill,
/// flushes and waits all happen within a few dozen operations.
pub fn small_config() -> EngineConfig {
    EngineConfig {
        redirector: RedirectorConfig {
            detector: DetectorConfig { stream_len: 4 },
            ..RedirectorConfig::default()
        },
        regions: 3,
        region_bytes: 64 * 1024,
        wait_max: Duration::from_millis(20),
        flush_gate: FlushGateConfig {
            flush_idle: Duration::from_millis(1),
            flush_age: None,
            hold_while_writing: false,
        },
        flush_run_max_bytes: 16 * 1024,
        record_max_bytes: 8 * 1024,
        // Background write-back passes (whole stretches, range clean
        // records) race with every operation, restarts included.
        write_back_idle: Some(Duration::from_millis(1)),
        // Memory copies of some records and not others (mirror.rs): every
        // copy path meets both, and regions filled again drop theirs.
        memory_copy_bytes: 40 * 1024,
        ..EngineConfig::default()
    }
}

#[derive(Clone, Debug)]
enum Op {
    Write {
        path: usize,
        offset: u64,
        len: u64,
    },
    Read {
        path: usize,
        offset: u64,
        len: u64,
    },
    Truncate {
        path: usize,
        size: u64,
    },
    Rename {
        from: usize,
        to: usize,
    },
    Unlink {
        path: usize,
    },
    Fsync {
        path: usize,
    },
    /// Close-to-open's per-file sync: its bytes written back, a clean
    /// record in the log.
    Sync {
        path: usize,
    },
    /// Close the engine and open it again: recovery replays the log,
    /// clean records included.
    Restart,
    Drain,
}

fn op_strategy() -> impl Strategy<Value = Op> {
    let path = 0..PATHS.len();
    prop_oneof![
        6 => (path.clone(), 0..FILE_MAX, 1u64..20_000).prop_map(|(path, offset, len)| Op::Write { path, offset, len }),
        2 => (path.clone(), 0..FILE_MAX, 1u64..40_000).prop_map(|(path, offset, len)| Op::Read { path, offset, len }),
        1 => (path.clone(), 0..FILE_MAX).prop_map(|(path, size)| Op::Truncate { path, size }),
        1 => (path.clone(), path.clone()).prop_map(|(from, to)| Op::Rename { from, to }),
        1 => path.clone().prop_map(|path| Op::Unlink { path }),
        1 => path.clone().prop_map(|path| Op::Fsync { path }),
        2 => path.prop_map(|path| Op::Sync { path }),
        1 => Just(Op::Restart),
        1 => Just(Op::Drain),
    ]
}

struct Harness {
    engine: Engine,
    fast: Arc<dyn Backend>,
    capacity: Arc<dyn Backend>,
    model: HashMap<String, Vec<u8>>,
    ids: HashMap<String, FileId>,
    stamp: u8,
}

impl Harness {
    fn new(fast: Arc<dyn Backend>, capacity: Arc<dyn Backend>) -> Harness {
        capacity.create_dir(&RelPath::new("d").unwrap()).unwrap();
        let engine = open(&fast, &capacity);
        Harness {
            engine,
            fast,
            capacity,
            model: HashMap::new(),
            ids: HashMap::new(),
            stamp: 0,
        }
    }

    fn id(&mut self, path: &str) -> FileId {
        if let Some(&id) = self.ids.get(path) {
            return id;
        }
        let rel = RelPath::new(path).unwrap();
        let id = if self.model.contains_key(path) {
            self.engine.open_file(&rel).unwrap()
        } else {
            self.model.insert(path.to_string(), Vec::new());
            self.engine.create(&rel).unwrap()
        };
        self.ids.insert(path.to_string(), id);
        id
    }

    fn check_file(&mut self, path: &str) {
        let Some(expected) = self.model.get(path).cloned() else {
            return;
        };
        let id = self.id(path);
        let got = self.engine.read(id, 0, FILE_MAX * 2).unwrap();
        assert_eq!(got.len(), expected.len(), "{path}: size");
        if let Some(i) = (0..got.len()).find(|&i| got[i] != expected[i]) {
            panic!(
                "{path}: byte {i} is {} but should be {}",
                got[i], expected[i]
            );
        }
    }

    fn apply(&mut self, op: &Op) {
        match *op {
            Op::Write { path, offset, len } => {
                let name = PATHS[path];
                let id = self.id(name);
                self.stamp = self.stamp.wrapping_add(1).max(1);
                let data: Vec<u8> = (0..len)
                    .map(|i| self.stamp.wrapping_add((i % 251) as u8))
                    .collect();
                self.engine.write(id, offset, &data).unwrap();
                let file = self.model.get_mut(name).unwrap();
                let end = (offset + len) as usize;
                if file.len() < end {
                    file.resize(end, 0);
                }
                file[offset as usize..end].copy_from_slice(&data);
            }
            Op::Read { path, offset, len } => {
                let name = PATHS[path];
                let Some(expected) = self.model.get(name).cloned() else {
                    return;
                };
                let id = self.id(name);
                let got = self.engine.read(id, offset, len).unwrap();
                let start = (offset as usize).min(expected.len());
                let end = ((offset + len) as usize).min(expected.len());
                assert_eq!(got, expected[start..end], "{name}: read {offset}+{len}");
            }
            Op::Truncate { path, size } => {
                let name = PATHS[path];
                if !self.model.contains_key(name) {
                    return;
                }
                let id = self.id(name);
                self.engine.truncate(id, size).unwrap();
                self.model.get_mut(name).unwrap().resize(size as usize, 0);
            }
            Op::Rename { from, to } => {
                let (from, to) = (PATHS[from], PATHS[to]);
                if from == to || !self.model.contains_key(from) {
                    return;
                }
                self.id(from);
                self.engine
                    .rename(&RelPath::new(from).unwrap(), &RelPath::new(to).unwrap())
                    .unwrap();
                let data = self.model.remove(from).unwrap();
                self.model.insert(to.to_string(), data);
                let id = self.ids.remove(from).unwrap();
                self.ids.insert(to.to_string(), id);
            }
            Op::Unlink { path } => {
                let name = PATHS[path];
                if self.model.remove(name).is_none() {
                    return;
                }
                self.engine.unlink(&RelPath::new(name).unwrap()).unwrap();
                self.ids.remove(name);
            }
            Op::Fsync { path } => {
                let name = PATHS[path];
                if self.model.contains_key(name) {
                    let id = self.id(name);
                    self.engine.fsync(id).unwrap();
                }
            }
            Op::Sync { path } => {
                let name = PATHS[path];
                if self.model.contains_key(name) {
                    let id = self.id(name);
                    self.engine.sync_file(id, true).unwrap();
                }
            }
            Op::Restart => {
                // Closed before the next opens the same log: a stand-in
                // engine over memory holds the place meanwhile.
                let stand_in = open(
                    &(Arc::new(MemBackend::new()) as Arc<dyn Backend>),
                    &(Arc::new(MemBackend::new()) as Arc<dyn Backend>),
                );
                std::mem::replace(&mut self.engine, stand_in).close();
                let reopened = open(&self.fast, &self.capacity);
                std::mem::replace(&mut self.engine, reopened).close();
                self.ids.clear();
            }
            Op::Drain => self.engine.drain().unwrap(),
        }
    }

    /// Drain, then compare the capacity tier's files with the model.
    fn finish(mut self) {
        self.engine.drain().unwrap();
        assert_eq!(self.engine.buffered_bytes(), 0);
        for path in PATHS {
            self.check_file(path);
            let rel = RelPath::new(path).unwrap();
            match self.model.get(path) {
                Some(expected) => {
                    let file = self.capacity.open(&rel, OpenOptions::default()).unwrap();
                    let mut got = vec![0u8; file.len().unwrap() as usize];
                    let n = file.read_at(&mut got, 0).unwrap();
                    assert_eq!(n, got.len());
                    assert_eq!(
                        got.len(),
                        expected.len(),
                        "{path}: capacity size after drain"
                    );
                    assert!(
                        got == *expected,
                        "{path}: capacity bytes after drain differ from the model"
                    );
                }
                None => assert!(
                    self.capacity.metadata(&rel).is_err(),
                    "{path} should not exist"
                ),
            }
        }
    }
}

fn run(fast: Arc<dyn Backend>, capacity: Arc<dyn Backend>, ops: &[Op]) {
    let mut h = Harness::new(fast, capacity);
    for op in ops {
        h.apply(op);
        for path in PATHS {
            h.check_file(path);
        }
    }
    h.finish();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn engine_matches_the_model_on_memory(ops in prop::collection::vec(op_strategy(), 1..60)) {
        run(Arc::new(MemBackend::new()), Arc::new(MemBackend::new()), &ops);
    }

    #[test]
    fn engine_matches_the_model_on_posix(ops in prop::collection::vec(op_strategy(), 1..40)) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("fast")).unwrap();
        std::fs::create_dir(dir.path().join("capacity")).unwrap();
        let fast = Arc::new(PosixBackend::new(dir.path().join("fast")).unwrap());
        let capacity = Arc::new(PosixBackend::new(dir.path().join("capacity")).unwrap());
        run(fast, capacity, &ops);
    }
}

#[test]
fn random_writes_go_to_the_log_and_sequential_ones_to_the_capacity_tier() {
    let fast: Arc<dyn Backend> = Arc::new(MemBackend::new());
    let capacity: Arc<dyn Backend> = Arc::new(MemBackend::new());
    let config = EngineConfig {
        region_bytes: 8 * 1024 * 1024,
        ..small_config()
    };
    let engine = Engine::open(
        fast,
        Arc::clone(&capacity),
        Arc::new(SystemClock::new()),
        config,
    )
    .unwrap();
    let seq = engine.create(&RelPath::new("seq").unwrap()).unwrap();
    let rnd = engine.create(&RelPath::new("rnd").unwrap()).unwrap();
    for i in 0..64u64 {
        engine.write(seq, i * 4096, &[1u8; 4096]).unwrap();
    }
    let mut x = 7u64;
    for _ in 0..64 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        engine
            .write(rnd, (x >> 40) % 1024 * 8192, &[2u8; 4096])
            .unwrap();
    }
    let stats = engine.stats();
    assert!(stats.capacity_bytes >= 60 * 4096, "{stats:?}");
    assert!(stats.fast_bytes >= 50 * 4096, "{stats:?}");
    engine.drain().unwrap();
    assert_eq!(engine.buffered_bytes(), 0);
}
