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

/// The sync points of one run of `workload` on fresh tiers: (fast,
/// capacity).
fn sync_points<T>(workload: impl Fn(&Checkpoints, &Arc<dyn Backend>) -> T) -> (u64, u64) {
    let dir = tempfile::tempdir().unwrap();
    let (fast, cap, f, c) = tiers();
    let ck = open(&f, &c, dir.path(), options(1 << 20)).unwrap();
    workload(&ck, &c);
    (fast.sync_points(), cap.sync_points())
}

/// Runs `workload` once per sync point of either tier, crashing there
/// (the fast tier's before the sync; the capacity tier's before and after
/// it), with and without torn writes, then cuts the power of the other
/// tier, recovers and hands `check` the stager, the capacity tier, what
/// the workload had acknowledged and a label for messages.
fn at_every_sync_point<T: Default>(
    workload: impl Fn(&Checkpoints, &Arc<dyn Backend>) -> T,
    check: impl Fn(&Checkpoints, &Arc<dyn Backend>, &T, &str),
) -> usize {
    let (fast_points, cap_points) = sync_points(&workload);
    let mut cases = vec![];
    for n in 1..=fast_points {
        cases.push((true, n, false));
    }
    for n in 1..=cap_points {
        cases.push((false, n, false));
        cases.push((false, n, true));
    }
    let mut runs = 0;
    for (on_fast, n, after) in cases {
        for torn in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let (fast, cap, f, c) = tiers();
            fast.set_torn_writes(torn);
            cap.set_torn_writes(torn);
            let (crashing, other) = if on_fast {
                (&fast, &cap)
            } else {
                (&cap, &fast)
            };
            if after {
                crashing.crash_after(n);
            } else {
                crashing.crash_at(n);
            }
            let done = match open(&f, &c, dir.path(), options(1 << 20)) {
                Ok(ck) => workload(&ck, &c),
                Err(_) => T::default(),
            };
            // Power cut: the other tier loses its unsynced state too.
            other.crash();
            fast.restart();
            cap.restart();
            let what = format!(
                "crash at {} sync {n} (after {after}, torn {torn})",
                if on_fast { "fast" } else { "capacity" }
            );
            let ck = open(&f, &c, dir.path(), options(1 << 20))
                .unwrap_or_else(|e| panic!("{what}: recovery failed: {e}"));
            check(&ck, &c, &done, &what);
            runs += 1;
        }
    }
    runs
}

/// What a rename workload had acknowledged when it stopped.
#[derive(Default)]
struct RenameAcks {
    /// `ck/x` (the older checkpoint) fsynced.
    old: bool,
    /// `ck/x.tmp` (the newer) fsynced.
    new: bool,
    /// The rename returned and its directory was synced.
    renamed: bool,
}

/// Creates, writes and fsyncs `path` (stopping at the first error).
fn write_file(ck: &Checkpoints, path: &str, data: &[u8]) -> std::io::Result<()> {
    let fh = ck.create(&p(path))?;
    let r = ck.write(fh, 0, data).and_then(|()| ck.fsync(fh));
    ck.release(fh);
    r
}

/// The pattern of checkpoint libraries: write the new checkpoint beside
/// the old one, fsync it, rename it over the old one, sync the
/// directory. Both are staged (not demoted) when the rename runs. As the
/// mount does: the stager first, then the capacity tier's rename.
fn rename_over_a_staged_copy(ck: &Checkpoints, c: &Arc<dyn Backend>) -> RenameAcks {
    let mut acks = RenameAcks::default();
    let _ = (|| -> std::io::Result<()> {
        ck.register(job("j", 64 * KIB, "ck/*", Failure::Nodes(2), 5))?;
        write_file(ck, "ck/x", &bytes(1, 24 * KIB))?;
        acks.old = true;
        write_file(ck, "ck/x.tmp", &bytes(2, 20 * KIB))?;
        acks.new = true;
        ck.rename(&p("ck/x.tmp"), &p("ck/x"))?;
        c.rename(&p("ck/x.tmp"), &p("ck/x"))?;
        c.sync_dir(&p("ck"))?;
        acks.renamed = true;
        Ok(())
    })();
    acks
}

/// A rename over a staged checkpoint is the old state or the new one
/// after a crash at any point: the old checkpoint is never lost before
/// the new one has its name. (Before, the stager removed the old copy
/// first, durably, then moved the new one's record: a crash in between
/// left `ck/x` as its empty placeholder, the old checkpoint's acknowledged
/// bytes gone and the new one still at `ck/x.tmp`.)
#[test]
fn a_rename_over_a_staged_checkpoint_is_old_or_new_after_a_crash_at_every_sync_point() {
    let (old, new) = (bytes(1, 24 * KIB), bytes(2, 20 * KIB));
    let runs = at_every_sync_point(rename_over_a_staged_copy, |ck, c, acks, what| {
        let x = shown(ck, c, &p("ck/x"));
        let tmp = shown(ck, c, &p("ck/x.tmp"));
        let is = |got: &Option<Vec<u8>>, want: &[u8]| got.as_deref() == Some(want);
        let len = |got: &Option<Vec<u8>>| got.as_ref().map(Vec::len);
        let state = format!("{what}: ck/x {:?} bytes, ck/x.tmp {:?}", len(&x), len(&tmp));
        if acks.renamed {
            assert!(is(&x, &new) && tmp.is_none(), "{state}: not renamed");
        } else if acks.new {
            // The new name with the new bytes (the old name may be left
            // as an empty file: the rename was not acknowledged), or the
            // old state whole.
            let renamed = is(&x, &new) && tmp.as_ref().is_none_or(Vec::is_empty);
            let before = is(&x, &old) && is(&tmp, &new);
            assert!(renamed || before, "{state}: neither before nor after");
        } else if acks.old {
            assert!(is(&x, &old), "{state}: the old checkpoint lost");
        }
        // One copy per name: a second copy of `ck/x` would hold room and
        // its demotion could write the older bytes over the newer.
        let named = ["ck/x", "ck/x.tmp"]
            .iter()
            .filter(|n| ck.size(&p(n)).is_some())
            .count() as u64;
        let s = ck.status();
        assert_eq!(s.staged.0 + s.cached.0, named, "{state}: copies");
        // What a read showed is what the capacity tier keeps.
        ck.drain()
            .unwrap_or_else(|e| panic!("{what}: drain after recovery: {e}"));
        if let Some(x) = x {
            assert!(capacity_bytes(c, &p("ck/x")) == x, "{state}: demoted");
        }
    });
    assert!(runs > 20, "{runs} runs");
}

/// The copy moved over another one takes a new id: its open handle
/// follows it, and it is demoted under its new name.
#[test]
fn a_copy_renamed_over_another_keeps_its_open_handle() {
    let dir = tempfile::tempdir().unwrap();
    let (_fast, _cap, f, c) = tiers();
    let ck = open(&f, &c, dir.path(), options(1 << 20)).unwrap();
    ck.register(job("j", 64 * KIB, "ck/*", Failure::Nodes(2), 5))
        .unwrap();
    write_file(&ck, "ck/x", &bytes(1, 24 * KIB)).unwrap();
    let fh = ck.create(&p("ck/x.tmp")).unwrap();
    let mut data = bytes(2, 20 * KIB);
    ck.write(fh, 0, &data).unwrap();
    ck.rename(&p("ck/x.tmp"), &p("ck/x")).unwrap();
    c.rename(&p("ck/x.tmp"), &p("ck/x")).unwrap();
    let tail = bytes(3, 4 * KIB);
    ck.write(fh, data.len() as u64, &tail).unwrap();
    data.extend_from_slice(&tail);
    ck.fsync(fh).unwrap();
    ck.release(fh);
    assert_eq!(ck.status().staged.0, 1, "one copy left");
    assert!(shown(&ck, &c, &p("ck/x")).as_deref() == Some(&data[..]));
    ck.drain().unwrap();
    assert!(capacity_bytes(&c, &p("ck/x")) == data, "demoted");
    let rec = ck.catalog().ckpt("ck/x").unwrap().unwrap();
    assert_eq!(rec.bytes, data.len() as u64);
    assert!(ck.catalog().ckpt("ck/x.tmp").unwrap().is_none());
}
