//! Shared by the checkpoint stager's tests (`mod ckpt_support;`): a job,
//! small options, the stager over two tiers with a redb catalogue in a
//! temporary directory, both tiers as crash backends, and the bytes the
//! tests write and read back.
#![allow(dead_code)]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use sluice_catalog::{Catalog, Failure, JobSpec, MetaSpec};
use sluice_engine::{Checkpoints, CkptOptions};
use sluice_env::crash::CrashBackend;
use sluice_env::{Backend, OpenOptions, RelPath, SystemClock};

pub const KIB: u64 = 1024;

pub fn job(id: &str, bytes: u64, glob: &str, failure: Failure, versions: u32) -> JobSpec {
    JobSpec {
        id: id.into(),
        period_s: 60,
        ckpt_bytes: bytes,
        failure,
        versions,
        glob: glob.into(),
        files: 1,
    }
}

/// Small chunks, demotion only when a test asks (`background: false`).
pub fn options(capacity: u64) -> CkptOptions {
    CkptOptions {
        capacity,
        chunk_bytes: 16 * KIB,
        background: false,
        admit_wait: Duration::from_secs(20),
        ..CkptOptions::default()
    }
}

/// The redb catalogue in `dir`.
pub fn catalog(dir: &Path) -> Box<dyn Catalog> {
    sluice_catalog::open(&MetaSpec::Redb {
        path: dir.join("catalog.redb"),
    })
    .unwrap()
}

pub fn open(
    fast: &Arc<dyn Backend>,
    capacity: &Arc<dyn Backend>,
    dir: &Path,
    options: CkptOptions,
) -> std::io::Result<Checkpoints> {
    Checkpoints::open(
        Arc::clone(fast),
        Arc::clone(capacity),
        catalog(dir),
        Arc::new(SystemClock::new()),
        options,
    )
}

pub fn p(s: &str) -> RelPath {
    RelPath::new(s).unwrap()
}

pub fn bytes(seed: u8, len: u64) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// The capacity tier's own bytes at `path`.
pub fn capacity_bytes(capacity: &Arc<dyn Backend>, path: &RelPath) -> Vec<u8> {
    let f = capacity.open(path, OpenOptions::default()).unwrap();
    let mut buf = vec![0u8; f.len().unwrap() as usize];
    let n = f.read_at(&mut buf, 0).unwrap();
    buf.truncate(n);
    buf
}

/// Both tiers as crash backends, and as the trait objects the stager takes.
pub type Tiers = (
    Arc<CrashBackend>,
    Arc<CrashBackend>,
    Arc<dyn Backend>,
    Arc<dyn Backend>,
);

/// Both tiers, with `dirs` made on the capacity tier, durable before the
/// workload (the directories the jobs write in).
pub fn tiers(dirs: &[&str]) -> Tiers {
    tiers_with_fast(CrashBackend::new(), dirs)
}

/// [`tiers`] with `fast` as the fast tier (one of a given size).
pub fn tiers_with_fast(fast: CrashBackend, dirs: &[&str]) -> Tiers {
    let fast = Arc::new(fast);
    let capacity = Arc::new(CrashBackend::new());
    let (f, c): (Arc<dyn Backend>, Arc<dyn Backend>) = (fast.clone(), capacity.clone());
    for d in dirs {
        c.create_dir(&p(d)).unwrap();
    }
    c.sync_dir(&RelPath::root()).unwrap();
    (fast, capacity, f, c)
}
