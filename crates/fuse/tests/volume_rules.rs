//! The mount's decisions, one at a time, on a [`Volume`] without a mount:
//! class routing (a checkpoint-class path goes to BBOS's stager, with a
//! redb catalogue in a temporary directory; everything else to the
//! engine), `access(2)` from the modes, ownership and mode of new nodes,
//! set-ID clearing before an unprivileged write, rename flags, the control
//! xattr, and what a file that lost its name still answers.

use std::ffi::OsStr;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use sluice_catalog::{Failure, JobSpec, MetaSpec};
use sluice_engine::ckpt::HANDLE_BIT;
use sluice_engine::{Checkpoints, CkptOptions, Engine, EngineConfig};
use sluice_env::memory::MemBackend;
use sluice_env::{Backend, RelPath, StatKind, SystemClock};
use sluice_fuse::volume::{AttrChanges, Caller, Volume, CONTROL_XATTR};

const ROOT: u64 = 1;
const KIB: u64 = 1024;

fn os(s: &str) -> &OsStr {
    OsStr::new(s)
}

fn engine(fast: &Arc<dyn Backend>, capacity: &Arc<dyn Backend>) -> Arc<Engine> {
    Arc::new(
        Engine::open(
            Arc::clone(fast),
            Arc::clone(capacity),
            Arc::new(SystemClock::new()),
            EngineConfig::default(),
        )
        .unwrap(),
    )
}

fn backends() -> (Arc<dyn Backend>, Arc<dyn Backend>) {
    (Arc::new(MemBackend::new()), Arc::new(MemBackend::new()))
}

/// This process as the caller: new nodes are not chowned.
fn me() -> Caller {
    Caller {
        uid: rustix::process::geteuid().as_raw(),
        gid: rustix::process::getegid().as_raw(),
        umask: 0o022,
    }
}

fn volume() -> Volume {
    let (fast, capacity) = backends();
    Volume::new(
        engine(&fast, &capacity),
        None,
        Some("/run/sluice.sock".into()),
    )
}

/// A volume with BBOS on: jobs' files under `ckpt/j/` are checkpoints.
fn volume_with_stager(dir: &std::path::Path) -> (Volume, Arc<Checkpoints>) {
    let (fast, capacity) = backends();
    let catalog = sluice_catalog::open(&MetaSpec::Redb {
        path: dir.join("catalog.redb"),
    })
    .unwrap();
    let ckpt = Arc::new(
        Checkpoints::open(
            Arc::clone(&fast),
            Arc::clone(&capacity),
            catalog,
            Arc::new(SystemClock::new()),
            CkptOptions {
                capacity: 1024 * KIB,
                chunk_bytes: 16 * KIB,
                background: false,
                admit_wait: Duration::from_secs(20),
                ..CkptOptions::default()
            },
        )
        .unwrap(),
    );
    ckpt.register(JobSpec {
        id: "j".into(),
        period_s: 60,
        ckpt_bytes: 64 * KIB,
        failure: Failure::Nodes(4),
        versions: 1,
        glob: "ckpt/j/*".into(),
        files: 1,
    })
    .unwrap();
    let engine = engine(&fast, &capacity);
    (Volume::new(engine, Some(Arc::clone(&ckpt)), None), ckpt)
}

fn truncate(size: u64) -> AttrChanges {
    AttrChanges {
        size: Some(size),
        ..AttrChanges::default()
    }
}

fn chmod(mode: u32) -> AttrChanges {
    AttrChanges {
        mode: Some(mode),
        ..AttrChanges::default()
    }
}

#[test]
fn a_checkpoint_class_path_goes_to_the_stager_and_others_to_the_engine() {
    let dir = tempfile::tempdir().unwrap();
    let (v, ckpt) = volume_with_stager(dir.path());
    let me = me();
    let top = v.mkdir(&me, ROOT, os("ckpt"), 0o755).unwrap().ino;
    let jobs = v.mkdir(&me, top, os("j"), 0o755).unwrap().ino;

    // A checkpoint: the stager's handle, its bytes staged, none in the
    // engine.
    let (attr, fh) = v.create(&me, jobs, os("c1"), 0o644).unwrap();
    assert_ne!(fh & HANDLE_BIT, 0, "a checkpoint gets a stager handle");
    assert!(Checkpoints::owns(fh));
    let data = vec![7u8; 40 * KIB as usize];
    v.write(attr.ino, fh, 0, &data, false).unwrap();
    v.fsync(fh).unwrap();
    assert_eq!(v.read(fh, 0, 1 << 20).unwrap(), data);
    assert_eq!(v.engine().open_files(), 0, "the engine never saw it");
    assert_eq!(v.engine().buffered_bytes(), 0);
    let c1 = RelPath::new("ckpt/j/c1").unwrap();
    assert_eq!(ckpt.size(&c1), Some(data.len() as u64), "staged");
    assert_eq!(
        v.getattr(attr.ino, None).unwrap().size,
        data.len() as u64,
        "attributes show the staged copy's length"
    );
    // Issue 37: fallocate of the staged copy (punch, then allocate past
    // the end), seen by reads and attributes.
    v.fallocate(fh, 4 * KIB, 4 * KIB, 0x02 | 0x01).unwrap();
    let mut punched = data.clone();
    punched[4 * KIB as usize..8 * KIB as usize].fill(0);
    assert_eq!(v.read(fh, 0, 1 << 20).unwrap(), punched);
    v.fallocate(fh, 0, 64 * KIB, 0).unwrap();
    assert_eq!(ckpt.size(&c1), Some(64 * KIB), "allocated");
    assert_eq!(v.getattr(attr.ino, None).unwrap().size, 64 * KIB);
    // Truncate by path: the staged copy.
    assert_eq!(v.setattr(attr.ino, None, &truncate(100)).unwrap().size, 100);
    assert_eq!(ckpt.size(&c1), Some(100));
    // A staged copy has one name: links of or to it are refused.
    let refused = v.link(attr.ino, ROOT, os("second")).unwrap_err();
    assert_eq!(refused.kind(), io::ErrorKind::Unsupported);
    v.release(attr.ino, fh);

    // Reopened: the stager again (it has the copy).
    let ino = v.lookup(jobs, os("c1")).unwrap().ino;
    let fh = v.open(ino, 0).unwrap();
    assert!(Checkpoints::owns(fh));
    assert_eq!(v.read(fh, 0, 1 << 20).unwrap(), vec![7u8; 100]);
    v.release(ino, fh);

    // Any other path: the engine's handle.
    let (plain, fh) = v.create(&me, ROOT, os("plain"), 0o644).unwrap();
    assert_eq!(fh & HANDLE_BIT, 0, "an engine file id");
    v.write(plain.ino, fh, 0, b"engine", false).unwrap();
    assert_eq!(v.engine().open_files(), 1);
    assert_eq!(v.read(fh, 0, 100).unwrap(), b"engine");
    let refused = v.link(plain.ino, jobs, os("c2")).unwrap_err();
    assert_eq!(
        refused.kind(),
        io::ErrorKind::Unsupported,
        "no link into a job's glob"
    );
    v.release(plain.ino, fh);

    // Unlink tells the stager: the staged copy is gone.
    v.unlink(jobs, os("c1")).unwrap();
    assert_eq!(ckpt.size(&c1), None);
    assert_eq!(
        v.lookup(jobs, os("c1")).unwrap_err().kind(),
        io::ErrorKind::NotFound
    );
}

#[test]
fn access_is_answered_from_owner_group_and_other_bits() {
    let v = volume();
    // The memory tier makes every node 0:0; this process is the creator,
    // so nothing is chowned.
    let (file, fh) = v.create(&me(), ROOT, os("f"), 0o640).unwrap();
    v.release(file.ino, fh);
    assert_eq!((file.uid, file.gid, file.perm), (0, 0, 0o640 & !0o022));
    let f = file.ino;
    const R: u32 = 4;
    const W: u32 = 2;
    const X: u32 = 1;
    let who = |uid, gid| Caller { uid, gid, umask: 0 };
    let denied = |r: io::Result<()>| r.unwrap_err().kind() == io::ErrorKind::PermissionDenied;
    v.setattr(f, None, &chmod(0o640)).unwrap();
    let root = who(0, 0);
    assert!(v.access(&root, f, R | W).is_ok(), "root reads and writes");
    assert!(
        denied(v.access(&root, f, X)),
        "root cannot execute a file nobody may execute"
    );
    v.setattr(f, None, &chmod(0o100)).unwrap();
    assert!(v.access(&root, f, X).is_ok(), "someone may: root may");
    v.setattr(f, None, &chmod(0o640)).unwrap();
    let group = who(1000, 0);
    assert!(v.access(&group, f, R).is_ok(), "group bits r--");
    assert!(denied(v.access(&group, f, W)));
    let other = who(1000, 1000);
    assert!(denied(v.access(&other, f, R)), "other bits ---");
    assert!(v.access(&other, f, 0).is_ok(), "F_OK: it exists");
    // The owner's bits once it is theirs.
    v.setattr(
        f,
        None,
        &AttrChanges {
            uid: Some(1000),
            ..AttrChanges::default()
        },
    )
    .unwrap();
    assert!(v.access(&other, f, R | W).is_ok(), "owner bits rw-");
    assert!(denied(v.access(&other, f, X)));
    // A directory: root may search it.
    let d = v.mkdir(&me(), ROOT, os("d"), 0o700).unwrap().ino;
    assert!(v.access(&root, d, R | W | X).is_ok());
    assert!(denied(v.access(&other, d, X)));
    assert_eq!(
        v.access(&root, 999, R).unwrap_err().kind(),
        io::ErrorKind::NotFound
    );
}

#[test]
fn new_nodes_get_the_callers_owner_and_mode_less_umask() {
    let v = volume();
    let someone = Caller {
        uid: 1000,
        gid: 1001,
        umask: 0o027,
    };
    let (file, fh) = v.create(&someone, ROOT, os("f"), 0o666).unwrap();
    v.release(file.ino, fh);
    assert_eq!((file.uid, file.gid, file.perm), (1000, 1001, 0o640));
    let dir = v.mkdir(&someone, ROOT, os("d"), 0o777).unwrap();
    assert_eq!((dir.uid, dir.gid, dir.perm), (1000, 1001, 0o750));
    assert_eq!(dir.kind, StatKind::Dir);
    // mknod of a regular file (type bits 0 or S_IFREG) goes through the
    // engine like create.
    let node = v.mknod(&someone, ROOT, os("n"), 0o100_644, 0).unwrap();
    assert_eq!(
        (node.kind, node.perm, node.uid),
        (StatKind::File, 0o640, 1000)
    );
    // mknod of a directory type is EINVAL; special files on a memory tier
    // are refused by the tier (EOPNOTSUPP).
    let e = v.mknod(&someone, ROOT, os("x"), 0o040_755, 0).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    let e = v.mknod(&someone, ROOT, os("p"), 0o010_644, 0).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::Unsupported);
}

/// Issue 33: a create made a chmod (and a stat by path) although the new
/// file already had the mode asked for, three path walks per create of
/// mdtest's. With the tier's set_attr failing, a create whose mode the
/// tier already gave still succeeds with the right attributes (it never
/// asks), and one that needs another mode fails: it still sets it.
#[test]
fn issue_33_a_create_sets_no_attributes_the_new_file_already_has() {
    use sluice_env::fault::{FaultBackend, FaultOp, FaultRule};
    let fast: Arc<dyn Backend> = Arc::new(MemBackend::new());
    let faults = Arc::new(FaultBackend::new(Arc::new(MemBackend::new())));
    let capacity: Arc<dyn Backend> = faults.clone();
    let v = Volume::new(engine(&fast, &capacity), None, None);
    faults.inject(FaultRule::new(FaultOp::SetAttr, 5));
    let (file, fh) = v.create(&me(), ROOT, os("plain"), 0o644).unwrap();
    v.release(file.ino, fh);
    assert_eq!(
        (file.kind, file.perm, file.size),
        (StatKind::File, 0o644, 0)
    );
    assert_eq!(v.lookup(ROOT, os("plain")).unwrap().ino, file.ino);
    assert_eq!(faults.injected(), 0, "no set_attr for a create as asked");
    let e = v.create(&me(), ROOT, os("private"), 0o600).unwrap_err();
    assert_eq!(
        sluice_env::raw_os_error(&e),
        Some(5),
        "a mode to set is still set"
    );
}

#[test]
fn an_unprivileged_write_clears_set_id_bits_first() {
    let v = volume();
    let (file, fh) = v.create(&me(), ROOT, os("f"), 0o755).unwrap();
    v.setattr(file.ino, None, &chmod(0o6755)).unwrap();
    v.write(file.ino, fh, 0, b"privileged", false).unwrap();
    assert_eq!(v.getattr(file.ino, None).unwrap().perm, 0o6755, "kept");
    v.write(file.ino, fh, 0, b"flagged", true).unwrap();
    assert_eq!(v.getattr(file.ino, None).unwrap().perm, 0o755, "cleared");
    // S_ISGID without group execute stays.
    v.setattr(file.ino, None, &chmod(0o2745)).unwrap();
    v.write(file.ino, fh, 0, b"flagged", true).unwrap();
    assert_eq!(v.getattr(file.ino, None).unwrap().perm, 0o2745);
    v.release(file.ino, fh);
}

#[test]
fn rename_refuses_exchange_and_whiteout_and_honours_noreplace() {
    let v = volume();
    for name in ["a", "b"] {
        let (attr, fh) = v.create(&me(), ROOT, os(name), 0o644).unwrap();
        v.release(attr.ino, fh);
    }
    const EXCHANGE: u32 = 2;
    const WHITEOUT: u32 = 4;
    for flags in [EXCHANGE, WHITEOUT] {
        let e = v.rename(ROOT, os("a"), ROOT, os("b"), flags).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }
    let e = v
        .rename(
            ROOT,
            os("a"),
            ROOT,
            os("b"),
            sluice_fuse::volume::RENAME_NOREPLACE,
        )
        .unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
    v.rename(
        ROOT,
        os("a"),
        ROOT,
        os("c"),
        sluice_fuse::volume::RENAME_NOREPLACE,
    )
    .unwrap();
    assert!(v.lookup(ROOT, os("c")).is_ok());
}

#[test]
fn the_control_xattr_is_served_on_the_root_and_read_only() {
    let v = volume();
    assert_eq!(
        v.get_xattr(ROOT, os(CONTROL_XATTR)).unwrap(),
        b"/run/sluice.sock"
    );
    let e = v.set_xattr(ROOT, os(CONTROL_XATTR), b"x", 0).unwrap_err();
    assert_eq!(
        e.raw_os_error(),
        Some(rustix::io::Errno::PERM.raw_os_error())
    );
    let (fast, capacity) = backends();
    let without = Volume::new(engine(&fast, &capacity), None, None);
    let e = without.get_xattr(ROOT, os(CONTROL_XATTR)).unwrap_err();
    assert_eq!(
        e.raw_os_error(),
        Some(rustix::io::Errno::NODATA.raw_os_error())
    );
}

#[test]
fn a_file_that_lost_its_name_answers_through_its_handle_only() {
    let v = volume();
    let (file, fh) = v.create(&me(), ROOT, os("f"), 0o644).unwrap();
    v.write(file.ino, fh, 0, b"still here", false).unwrap();
    v.unlink(ROOT, os("f")).unwrap();
    assert_eq!(v.getattr(file.ino, None).unwrap().size, 10, "fstat");
    assert_eq!(v.setattr(file.ino, Some(fh), &truncate(5)).unwrap().size, 5);
    assert_eq!(v.read(fh, 0, 100).unwrap(), b"still");
    // Issue 37: fallocate through the handle, on the file that lives on.
    v.fallocate(fh, 0, 4096, 0).unwrap();
    assert_eq!(v.getattr(file.ino, None).unwrap().size, 4096, "allocated");
    v.fallocate(fh, 0, 2, 0x02 | 0x01).unwrap();
    assert_eq!(v.read(fh, 0, 5).unwrap(), b"\0\0ill", "punched");
    v.setattr(file.ino, Some(fh), &truncate(5)).unwrap();
    let e = v.setattr(file.ino, None, &chmod(0o600)).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::NotFound, "no name to chmod");
    v.release(file.ino, fh);
    assert_eq!(
        v.getattr(file.ino, None).unwrap_err().kind(),
        io::ErrorKind::NotFound
    );
    v.forget(file.ino, 1);
    assert_eq!(v.nodes(), 1);
}

/// Issue 37: `chown(path, -1, -1)` reaches the volume as a setattr with
/// nothing to change; ext4 sets the ctime for it (pjdfstest's chown/00.t),
/// so the volume does.
#[test]
fn chown_with_neither_id_sets_the_ctime() {
    let v = volume();
    let (file, fh) = v.create(&me(), ROOT, os("f"), 0o644).unwrap();
    v.release(file.ino, fh);
    let before = v.getattr(file.ino, None).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let after = v.setattr(file.ino, None, &AttrChanges::default()).unwrap();
    assert!(
        after.ctime > before.ctime,
        "{:?} -> {:?}",
        before.ctime,
        after.ctime
    );
    assert_eq!(
        (after.uid, after.gid, after.perm),
        (before.uid, before.gid, before.perm)
    );
    assert_eq!(after.mtime, before.mtime, "the contents did not change");
}

/// Issue 37: fallocate modes through the volume over buffered bytes, and
/// the modes Linux refuses answered as Linux does.
#[test]
fn fallocate_modes_through_the_volume() {
    let v = volume();
    let (file, fh) = v.create(&me(), ROOT, os("f"), 0o644).unwrap();
    v.write(file.ino, fh, 0, &[7u8; 8192], false).unwrap();
    // Plain allocation past the end: the size follows (mode 0).
    v.fallocate(fh, 8192, 8192, 0).unwrap();
    assert_eq!(v.getattr(file.ino, None).unwrap().size, 16384);
    // KEEP_SIZE: it does not.
    v.fallocate(fh, 16384, 8192, 0x01).unwrap();
    assert_eq!(v.getattr(file.ino, None).unwrap().size, 16384);
    // ZERO_RANGE over written bytes.
    v.fallocate(fh, 4096, 4096, 0x10).unwrap();
    let data = v.read(fh, 0, 16384).unwrap();
    assert!(data[..4096].iter().all(|&b| b == 7));
    assert!(data[4096..].iter().all(|&b| b == 0));
    // PUNCH_HOLE without KEEP_SIZE: EOPNOTSUPP, as Linux answers.
    let e = v.fallocate(fh, 0, 4096, 0x02).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::Unsupported, "{e}");
    v.release(file.ino, fh);
}
