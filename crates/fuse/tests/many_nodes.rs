//! The mount's part of issue 20 (many nodes over one parallel file system)
//! on [`Volume`]s without a mount: two volumes, each with its own fast
//! tier, over one capacity backend. A create that meets a file another
//! node made opens it (without `O_EXCL`); close and fsync under
//! `close-to-open` put the bytes on the capacity tier and `node-local`
//! leaves them; locks are refused with ENOLCK where the capacity tier has
//! no kernel files (the real locks are tested through mounts in
//! `crates/cli/tests/multinode.rs`).

use std::ffi::OsStr;
use std::io;
use std::sync::Arc;

use sluice_engine::{Engine, EngineConfig};
use sluice_env::memory::MemBackend;
use sluice_env::{Backend, OpenOptions, RelPath, SystemClock};
use sluice_fuse::volume::{Caller, Consistency, LockRange, Volume};
use sluice_policy::redirector::{RedirectPolicy, RedirectorConfig};

const ROOT: u64 = 1;
const O_WRONLY: i32 = 0o1;
const O_CREAT: i32 = 0o100;
const O_EXCL: i32 = 0o200;
const O_TRUNC: i32 = 0o1000;
const F_WRLCK: i32 = 1;

fn os(s: &str) -> &OsStr {
    OsStr::new(s)
}

/// A node: a volume with its own fast tier over `capacity`, every write
/// buffered (fast-all).
fn node(capacity: &Arc<dyn Backend>, consistency: Consistency) -> Volume {
    volume(Arc::new(MemBackend::new()), capacity, consistency, None)
}

/// A volume over `fast` and `capacity`, every write buffered (fast-all),
/// with the engine's on-demand settings `on_demand`.
fn volume(
    fast: Arc<dyn Backend>,
    capacity: &Arc<dyn Backend>,
    consistency: Consistency,
    on_demand: Option<sluice_engine::OnDemand>,
) -> Volume {
    let engine = Engine::open(
        fast,
        Arc::clone(capacity),
        Arc::new(SystemClock::new()),
        EngineConfig {
            redirector: RedirectorConfig {
                policy: RedirectPolicy::FastAll,
                ..RedirectorConfig::default()
            },
            on_demand,
            ..EngineConfig::default()
        },
    )
    .unwrap();
    Volume::new(Arc::new(engine), None, None).with_consistency(consistency)
}

fn me() -> Caller {
    Caller {
        uid: rustix::process::geteuid().as_raw(),
        gid: rustix::process::getegid().as_raw(),
        umask: 0o022,
    }
}

fn capacity_len(capacity: &Arc<dyn Backend>, name: &str) -> u64 {
    capacity
        .open(&RelPath::new(name).unwrap(), OpenOptions::default())
        .unwrap()
        .len()
        .unwrap()
}

/// Issue 20, "creates race": `open(O_CREAT)` without `O_EXCL` on a name
/// another node created between the kernel's lookup and the create failed
/// with EEXIST. It opens the existing file (emptied with `O_TRUNC`);
/// with `O_EXCL` it is still EEXIST.
#[test]
fn issue_20_create_without_o_excl_opens_a_file_another_node_made() {
    let capacity: Arc<dyn Backend> = Arc::new(MemBackend::new());
    let a = node(&capacity, Consistency::CloseToOpen);
    let b = node(&capacity, Consistency::CloseToOpen);
    let (made, fh) = a
        .open_or_create(&me(), ROOT, os("f"), 0o644, O_CREAT | O_WRONLY)
        .unwrap();
    a.write(made.ino, fh, 0, b"from a", false).unwrap();
    a.flush(fh, 1).unwrap();
    a.release(made.ino, fh);

    let e = b
        .open_or_create(&me(), ROOT, os("f"), 0o644, O_CREAT | O_EXCL | O_WRONLY)
        .unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
    let (attr, fh) = b
        .open_or_create(&me(), ROOT, os("f"), 0o644, O_CREAT | O_WRONLY)
        .expect("O_CREAT without O_EXCL opens the existing file");
    assert_eq!(attr.size, 6);
    assert_eq!(b.read(fh, 0, 64).unwrap(), b"from a");
    b.release(attr.ino, fh);
    let (attr, fh) = b
        .open_or_create(&me(), ROOT, os("f"), 0o644, O_CREAT | O_TRUNC | O_WRONLY)
        .unwrap();
    assert_eq!(attr.size, 0, "O_TRUNC empties it");
    b.release(attr.ino, fh);
    assert_eq!(capacity_len(&capacity, "f"), 0);
    // A directory of that name: EISDIR, as open(2) says.
    a.mkdir(&me(), ROOT, os("d"), 0o755).unwrap();
    let e = b
        .open_or_create(&me(), ROOT, os("d"), 0o644, O_CREAT | O_WRONLY)
        .unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::IsADirectory);
}

/// `close-to-open`: the close (FLUSH) and fsync put the buffered bytes on
/// the capacity tier; `node-local` leaves them in the log.
#[test]
fn close_and_fsync_follow_the_consistency_mode() {
    for (mode, on_capacity) in [
        (Consistency::CloseToOpen, true),
        (Consistency::NodeLocal, false),
    ] {
        let capacity: Arc<dyn Backend> = Arc::new(MemBackend::new());
        let a = node(&capacity, mode);
        let (attr, fh) = a
            .open_or_create(&me(), ROOT, os("f"), 0o644, O_CREAT | O_WRONLY)
            .unwrap();
        a.write(attr.ino, fh, 0, &[1u8; 5000], false).unwrap();
        a.fsync(fh).unwrap();
        let expected = if on_capacity { 5000 } else { 0 };
        assert_eq!(capacity_len(&capacity, "f"), expected, "{mode:?}: fsync");
        a.write(attr.ino, fh, 5000, &[2u8; 5000], false).unwrap();
        a.flush(fh, 7).unwrap();
        let expected = if on_capacity { 10_000 } else { 0 };
        assert_eq!(capacity_len(&capacity, "f"), expected, "{mode:?}: close");
        assert_eq!(a.engine().buffered_bytes(), 10_000 - expected);
        a.release(attr.ino, fh);
    }
}

/// A capacity tier without kernel files (here in memory; emulated disks
/// and LiU alike) cannot lock: ENOLCK, never a grant by this node alone.
#[test]
fn locks_are_refused_with_enolck_where_the_capacity_tier_cannot_lock() {
    let capacity: Arc<dyn Backend> = Arc::new(MemBackend::new());
    let a = node(&capacity, Consistency::CloseToOpen);
    let (attr, fh) = a
        .open_or_create(&me(), ROOT, os("f"), 0o644, O_CREAT | O_WRONLY)
        .unwrap();
    let range = LockRange {
        start: 0,
        end: i64::MAX as u64,
        typ: F_WRLCK,
    };
    let enolck = Some(rustix::io::Errno::NOLCK.raw_os_error());
    let e = a.set_lock(fh, 1, range, false, 1).unwrap_err();
    assert_eq!(sluice_env::raw_os_error(&e), enolck, "{e}");
    let e = a.get_lock(fh, 1, range).unwrap_err();
    assert_eq!(sluice_env::raw_os_error(&e), enolck, "{e}");
    a.release(attr.ino, fh);
}

/// A node under on-demand (issue 34) over `capacity`, its held marks where
/// `mark` says: its own fast tier in `dir`, named `name`.
fn on_demand_node(
    dir: &std::path::Path,
    capacity: &Arc<dyn Backend>,
    name: &str,
    mark: sluice_engine::HeldMark,
) -> Volume {
    let fast = dir.join(name);
    std::fs::create_dir_all(&fast).unwrap();
    let on_demand = sluice_engine::OnDemand {
        node: Some(name.to_string()),
        recall_wait: std::time::Duration::from_secs(10),
        doorbell: None,
        mark,
    };
    volume(
        Arc::new(sluice_env::posix::PosixBackend::new(fast).unwrap()),
        capacity,
        Consistency::OnDemand,
        Some(on_demand),
    )
}

/// Issue 34 on volumes: A's close leaves the bytes in its log and its mark
/// on the capacity file with the size at close; B's lookup shows that
/// size, B's listing of the root hides `.sluice`, and B's open recalls
/// the file: B reads every byte, and A's log holds none of them after.
/// Over each place a mark lives: the xattr (a POSIX directory), the
/// sidecar entry (forced on a POSIX directory; the memory tier, which
/// keeps no xattrs, under `auto`), the mark reading the same through
/// `user.sluice.held` in all three.
#[test]
fn issue_34_on_demand_close_keeps_the_bytes_and_another_nodes_open_recalls_them() {
    use sluice_engine::{HeldMark, MarkStore};
    for (memory, mark, store) in [
        (false, HeldMark::Auto, MarkStore::Xattr),
        (false, HeldMark::Sidecar, MarkStore::Sidecar),
        (true, HeldMark::Auto, MarkStore::Sidecar),
    ] {
        close_then_recall(memory, mark, store);
    }
}

fn close_then_recall(memory: bool, mark: sluice_engine::HeldMark, store: sluice_engine::MarkStore) {
    let dir = tempfile::tempdir().unwrap();
    let capacity_dir = dir.path().join("capacity");
    std::fs::create_dir_all(&capacity_dir).unwrap();
    let capacity: Arc<dyn Backend> = if memory {
        Arc::new(sluice_env::memory::MemBackend::new())
    } else {
        Arc::new(sluice_env::posix::PosixBackend::new(capacity_dir).unwrap())
    };
    let a = on_demand_node(dir.path(), &capacity, "node-a", mark);
    let b = on_demand_node(dir.path(), &capacity, "node-b", mark);
    assert_eq!(a.engine().mark_store(), Some(store));
    let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let (attr, fh) = a
        .open_or_create(&me(), ROOT, os("f"), 0o644, O_CREAT | O_WRONLY)
        .unwrap();
    a.write(attr.ino, fh, 0, &data, false).unwrap();
    a.flush(fh, 1).unwrap();
    a.release(attr.ino, fh);
    assert_eq!(
        capacity_len(&capacity, "f"),
        0,
        "the close wrote nothing back"
    );
    let mark = a.engine().mark_of(&RelPath::new("f").unwrap()).unwrap();
    assert_eq!(
        mark.map(|m| (m.node, m.size)),
        Some(("node-a".to_string(), data.len() as u64)),
        "the close put the size in the mark"
    );

    let seen = b.lookup(ROOT, os("f")).unwrap();
    assert_eq!(
        seen.size,
        data.len() as u64,
        "B's stat shows the mark's size"
    );
    assert_eq!(capacity_len(&capacity, "f"), 0, "a lookup recalls nothing");
    assert_eq!(
        b.lookup(ROOT, os(".sluice")).unwrap_err().kind(),
        io::ErrorKind::NotFound
    );
    let dh = b.opendir(ROOT).unwrap();
    let mut names = Vec::new();
    b.readdir(ROOT, dh, 0, |e| {
        names.push(e.name.clone());
        false
    })
    .unwrap();
    b.releasedir(dh);
    assert!(!names.iter().any(|n| n == ".sluice"), "{names:?}");
    assert!(names.iter().any(|n| n == "f"), "{names:?}");

    // The mark is sluice's: readable, not to be copied or removed.
    let value = b.get_xattr(seen.ino, os("user.sluice.held")).unwrap();
    let value = String::from_utf8(value).unwrap();
    assert!(
        value.starts_with(&format!("v1 node=node-a size={} mtime=", data.len())),
        "{store:?}: {value}"
    );
    for refused in [
        b.set_xattr(seen.ino, os("user.sluice.held"), b"v1 node=x size=0", 0),
        b.remove_xattr(seen.ino, os("user.sluice.held")),
    ] {
        assert_eq!(refused.unwrap_err().raw_os_error(), Some(1), "EPERM");
    }
    let fh = b.open(seen.ino, 0).unwrap();
    assert_eq!(
        b.read(fh, 0, 1 << 20).unwrap(),
        data,
        "every byte, exact size"
    );
    b.release(seen.ino, fh);
    assert_eq!(a.engine().buffered_bytes(), 0, "the recall emptied A's log");
    assert_eq!(
        a.engine().mark_of(&RelPath::new("f").unwrap()).unwrap(),
        None
    );
}
