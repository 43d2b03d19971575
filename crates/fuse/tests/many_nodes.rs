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
    let engine = Engine::open(
        Arc::new(MemBackend::new()),
        Arc::clone(capacity),
        Arc::new(SystemClock::new()),
        EngineConfig {
            redirector: RedirectorConfig {
                policy: RedirectPolicy::FastAll,
                ..RedirectorConfig::default()
            },
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
