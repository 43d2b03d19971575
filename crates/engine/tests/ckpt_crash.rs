//! Crash safety of BBOS's checkpoint staging (`sluice_engine::ckpt`), the
//! claims of docs/crash-consistency.md, "Checkpoint staging": both tiers
//! are crash backends, the workload runs once to count sync points and
//! again crashing at each, then recovery must find every acknowledged
//! byte under its name and serve no byte older than the newest one
//! acknowledged. (`ckpt.rs` has the first such test: stage, fsync, demote,
//! write to a demoted copy.)

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use sluice_catalog::{Catalog, Failure, JobSpec, MetaSpec};
use sluice_engine::{Checkpoints, CkptOptions};
use sluice_env::crash::CrashBackend;
use sluice_env::{Backend, OpenOptions, RelPath, SystemClock};

const KIB: u64 = 1024;

fn job(id: &str, bytes: u64, glob: &str, failure: Failure, versions: u32) -> JobSpec {
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

fn options(capacity: u64) -> CkptOptions {
    CkptOptions {
        capacity,
        chunk_bytes: 16 * KIB,
        background: false,
        admit_wait: Duration::from_secs(20),
        ..CkptOptions::default()
    }
}

fn open(
    fast: &Arc<dyn Backend>,
    capacity: &Arc<dyn Backend>,
    dir: &Path,
    options: CkptOptions,
) -> std::io::Result<Checkpoints> {
    let catalog: Box<dyn Catalog> = sluice_catalog::open(&MetaSpec::Redb {
        path: dir.join("catalog.redb"),
    })
    .unwrap();
    Checkpoints::open(
        Arc::clone(fast),
        Arc::clone(capacity),
        catalog,
        Arc::new(SystemClock::new()),
        options,
    )
}

fn p(s: &str) -> RelPath {
    RelPath::new(s).unwrap()
}

fn bytes(seed: u8, len: u64) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// Both tiers as crash backends, and as the trait objects the stager takes.
type Tiers = (
    Arc<CrashBackend>,
    Arc<CrashBackend>,
    Arc<dyn Backend>,
    Arc<dyn Backend>,
);

fn tiers() -> Tiers {
    let fast = Arc::new(CrashBackend::new());
    let capacity = Arc::new(CrashBackend::new());
    let (f, c): (Arc<dyn Backend>, Arc<dyn Backend>) = (fast.clone(), capacity.clone());
    // The directories the jobs write in, durable before the workload.
    for d in ["ck", "cold"] {
        c.create_dir(&p(d)).unwrap();
    }
    c.sync_dir(&RelPath::root()).unwrap();
    (fast, capacity, f, c)
}

/// A power cut of both tiers, and both back.
fn power_cut(fast: &CrashBackend, capacity: &CrashBackend) {
    fast.crash();
    capacity.crash();
    fast.restart();
    capacity.restart();
}

/// What the mount shows at `path`: `None` when the capacity tier has no
/// such name (the mount looks names up there, docs/bbos.md), else the
/// bytes a read serves (the fast-tier copy's, or the capacity file's).
fn shown(ck: &Checkpoints, capacity: &Arc<dyn Backend>, path: &RelPath) -> Option<Vec<u8>> {
    capacity.metadata(path).ok()?;
    let fh = ck.open_file(path, false, false).unwrap();
    let data = ck.read(fh, 0, 1 << 30).unwrap();
    ck.release(fh);
    Some(data)
}

/// The capacity tier's own bytes at `path`.
fn capacity_bytes(capacity: &Arc<dyn Backend>, path: &RelPath) -> Vec<u8> {
    let f = capacity.open(path, OpenOptions::default()).unwrap();
    let mut buf = vec![0u8; f.len().unwrap() as usize];
    let n = f.read_at(&mut buf, 0).unwrap();
    buf.truncate(n);
    buf
}

/// A staged checkpoint acknowledged by fsync keeps its name through a
/// power cut: the mount finds a file by its capacity-tier name, so the
/// fsync makes the placeholder's directory entry durable too. (Before,
/// only the fast-tier copy was synced: after a power cut the name was
/// gone until the copy's demotion made it again, and a create of the name
/// meanwhile replaced the acknowledged copy.)
#[test]
fn an_fsynced_staged_checkpoint_keeps_its_name_through_a_power_cut() {
    let dir = tempfile::tempdir().unwrap();
    let (fast, cap, f, c) = tiers();
    let data = bytes(1, 20 * KIB);
    {
        let ck = open(&f, &c, dir.path(), options(1 << 20)).unwrap();
        ck.register(job("j", 64 * KIB, "ck/*", Failure::Nodes(2), 2))
            .unwrap();
        let fh = ck.create(&p("ck/a")).unwrap();
        ck.write(fh, 0, &data).unwrap();
        ck.fsync(fh).unwrap();
        ck.release(fh);
        assert_eq!(ck.status().staged.0, 1, "staged, not demoted");
    }
    power_cut(&fast, &cap);
    let ck = open(&f, &c, dir.path(), options(1 << 20)).unwrap();
    assert!(
        shown(&ck, &c, &p("ck/a")).as_deref() == Some(&data[..]),
        "the fsynced checkpoint under its name"
    );
    ck.drain().unwrap();
    assert!(capacity_bytes(&c, &p("ck/a")) == data, "demoted");
}
