//! FUSE passthrough from the engine's side (`Engine::passthrough_file`):
//! the kernel may serve a file straight from its capacity file only when
//! that changes nothing the engine would have done, and once the kernel
//! writes a file the engine's syncs of it always sync its capacity file.

mod engine_support;

use engine_support::{small_config, small_engine};
use std::sync::Arc;

use sluice_engine::{CloseSync, Engine, EngineConfig};
use sluice_env::crash::CrashBackend;
use sluice_env::fault::{FaultBackend, FaultOp, FaultRule};
use sluice_env::memory::MemBackend;
use sluice_env::posix::PosixBackend;
use sluice_env::{Backend, RelPath};
use sluice_policy::redirector::RedirectPolicy;

fn posix(dir: &tempfile::TempDir, name: &str) -> Arc<dyn Backend> {
    let root = dir.path().join(name);
    std::fs::create_dir_all(&root).unwrap();
    Arc::new(PosixBackend::new(root).unwrap())
}

/// The bug feared most: the kernel serving a file whose newest bytes are
/// still in the log (recovered from a mount under another policy) would
/// read stale bytes, and its writes would later be overwritten by the
/// flush of the older ones.
#[test]
fn a_file_with_buffered_bytes_is_not_passed_through_until_they_are_flushed() {
    let dir = tempfile::tempdir().unwrap();
    let (fast, capacity) = (posix(&dir, "fast"), posix(&dir, "capacity"));
    let f = RelPath::new("f").unwrap();
    {
        let e = small_engine(&fast, &capacity, RedirectPolicy::FastAll);
        let id = e.create(&f).unwrap();
        e.write(id, 0, b"in the log").unwrap();
        e.fsync(id).unwrap();
        assert_eq!(e.passthrough_file(id).map(|_| ()), None, "fast-all buffers");
        e.close();
    }
    let e = small_engine(&fast, &capacity, RedirectPolicy::CapacityOnly);
    let id = e.open_file(&f).unwrap();
    assert!(e.stats().recovered_records > 0, "recovered");
    // The flusher may flush the recovered region at any moment (nothing
    // holds it after a recovery); until it has, the file is not passed
    // through: bytes only leave the log, so a file passed through now had
    // nothing buffered left when it was asked.
    let passed = e.passthrough_file(id).is_some();
    assert!(
        !passed || e.buffered_bytes() == 0,
        "passed through with bytes still in the log"
    );
    e.drain().unwrap();
    let file = e.passthrough_file(id).expect("nothing buffered now").file;
    let mut buf = [0u8; 10];
    file.read_full_at(&mut buf, 0).unwrap();
    assert_eq!(
        &buf, b"in the log",
        "the capacity file holds the newest bytes"
    );
    e.release(id);
}

#[test]
fn only_a_policy_that_never_buffers_and_a_kernel_file_allow_it() {
    let dir = tempfile::tempdir().unwrap();
    let (fast, capacity) = (posix(&dir, "fast"), posix(&dir, "capacity"));
    let f = RelPath::new("f").unwrap();
    for (policy, allowed) in [
        (RedirectPolicy::CapacityOnly, true),
        (RedirectPolicy::COST, false),
        (RedirectPolicy::SsdupPlus, false),
    ] {
        let e = small_engine(&fast, &capacity, policy);
        let id = e.open_file(&f).or_else(|_| e.create(&f)).unwrap();
        assert_eq!(e.passthrough_file(id).is_some(), allowed, "{policy}");
        e.release(id);
        e.close();
    }
    // A backend that is not a kernel file (in memory, emulated, LiU).
    let memory: Arc<dyn Backend> = Arc::new(MemBackend::new());
    let e = small_engine(&fast, &memory, RedirectPolicy::CapacityOnly);
    let id = e.create(&f).unwrap();
    assert!(
        e.passthrough_file(id).is_none(),
        "no kernel file to hand over"
    );
}

/// Close-to-open: a close syncs the capacity file only if the engine wrote
/// it since the last sync, but the kernel's writes through passthrough
/// are unseen, so after `note_kernel_writes` every sync syncs.
#[test]
fn kernel_writes_make_every_sync_of_the_file_sync_its_capacity_file() {
    let fast: Arc<dyn Backend> = Arc::new(MemBackend::new());
    let crash = Arc::new(CrashBackend::new());
    let capacity: Arc<dyn Backend> = Arc::clone(&crash) as Arc<dyn Backend>;
    let e = small_engine(&fast, &capacity, RedirectPolicy::CapacityOnly);
    let id = e.create(&RelPath::new("f").unwrap()).unwrap();
    e.write(id, 0, b"through the engine").unwrap();
    e.sync_file(id, false).unwrap();
    let before = crash.sync_points();
    e.sync_file(id, false).unwrap();
    assert_eq!(
        crash.sync_points(),
        before,
        "nothing written since: no sync"
    );
    e.note_kernel_writes(id);
    e.sync_file(id, false).unwrap();
    e.sync_file(id, false).unwrap();
    assert_eq!(crash.sync_points(), before + 2, "each sync syncs");
}

/// Issue 33: a close of a file the kernel may write (opened for writing
/// by passthrough) synced its capacity file even when nothing had been
/// written: every create of mdtest's, and every open for reading and
/// writing of its read phase, waited for an fdatasync of a new empty
/// file. An empty capacity file holds no byte the kernel wrote (a write
/// lengthens it; a truncate back to empty comes to the engine), so its
/// sync is skipped; once the kernel has written, every sync syncs again.
#[test]
fn issue_33_closing_an_empty_file_the_kernel_may_write_syncs_nothing() {
    let fast: Arc<dyn Backend> = Arc::new(MemBackend::new());
    let crash = Arc::new(CrashBackend::new());
    let capacity: Arc<dyn Backend> = Arc::clone(&crash) as Arc<dyn Backend>;
    let e = small_engine(&fast, &capacity, RedirectPolicy::CapacityOnly);
    let f = RelPath::new("f").unwrap();
    let id = e.create(&f).unwrap();
    e.note_kernel_writes(id);
    let before = crash.sync_points();
    e.sync_file(id, false).unwrap();
    assert_eq!(crash.sync_points(), before, "empty: nothing to sync");
    // The kernel writes through its own descriptor of the capacity file.
    let kernel = capacity
        .open(&f, sluice_env::OpenOptions::default())
        .unwrap();
    kernel.write_at(b"by the kernel", 0).unwrap();
    e.sync_file(id, false).unwrap();
    e.sync_file(id, false).unwrap();
    assert_eq!(crash.sync_points(), before + 2, "written: each sync syncs");
    // Truncated back to empty through the engine: that is synced too.
    e.truncate(id, 0).unwrap();
    e.sync_file(id, false).unwrap();
    assert_eq!(crash.sync_points(), before + 3, "a truncate is owed a sync");
    e.sync_file(id, false).unwrap();
    assert_eq!(crash.sync_points(), before + 3, "empty again: no sync");
}

/// Issue 33: mdtest's read phase opens each file for reading and writing
/// and closes it unwritten, and every close synced the capacity file (a
/// cache flush of its device). On a tier with exact change times
/// (`Backend::change_times_exact`: this machine's ext4 or tmpfs on Linux
/// 6.13+) a file whose length, mtime and ctime are as they were before
/// the kernel could write it is not synced; a write by the kernel, even in
/// place and at once, is. The capacity tier's syncs fail here, so a sync
/// shows as an error.
#[test]
fn issue_33_closing_an_unwritten_file_on_a_tier_with_exact_change_times_syncs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let Some((faults, capacity, fast)) = faulty_posix(&dir, |b| b.change_times_exact()) else {
        eprintln!("skipped: this file system's change times are coarse");
        return;
    };
    // Closes that sync what the kernel wrote (a network tier's rule).
    let e = engine(
        &fast,
        &capacity,
        RedirectPolicy::CapacityOnly,
        CloseSync::Always,
    );
    let f = RelPath::new("f").unwrap();
    let id = e.create(&f).unwrap();
    e.write(id, 0, b"written before").unwrap();
    e.sync_file(id, false).unwrap();
    faults.inject(FaultRule::new(FaultOp::Sync, 5));
    e.note_kernel_writes(id);
    e.sync_file(id, false).expect("unchanged: no sync");
    e.sync_file(id, false).expect("still unchanged: no sync");
    // The kernel overwrites a byte in place (the length stays) right away.
    let kernel = capacity
        .open(&f, sluice_env::OpenOptions::default())
        .unwrap();
    kernel.write_at(b"W", 0).unwrap();
    assert!(e.sync_file(id, false).is_err(), "written: the sync is made");
    faults.clear();
    e.sync_file(id, false).unwrap();
    faults.inject(FaultRule::new(FaultOp::Sync, 5));
    e.sync_file(id, false)
        .expect("synced as it is now: no sync until the next write");
    kernel.write_at(b"X", 1).unwrap();
    assert!(e.sync_file(id, false).is_err(), "written again: synced");
}

/// A capacity tier in `dir` behind fault injection, and a memory fast
/// tier, if the directory's tier has the property `has` (asked of the
/// wrapper, which must forward it); `None` otherwise.
#[allow(clippy::type_complexity)]
fn faulty_posix(
    dir: &tempfile::TempDir,
    has: impl Fn(&dyn Backend) -> bool,
) -> Option<(Arc<FaultBackend>, Arc<dyn Backend>, Arc<dyn Backend>)> {
    let posix = posix(dir, "capacity");
    if !has(posix.as_ref()) {
        return None;
    }
    let faults = Arc::new(FaultBackend::new(posix));
    let capacity: Arc<dyn Backend> = faults.clone();
    assert!(has(capacity.as_ref()), "the wrapper forwards it");
    Some((faults, capacity, Arc::new(MemBackend::new())))
}

fn engine(
    fast: &Arc<dyn Backend>,
    capacity: &Arc<dyn Backend>,
    policy: RedirectPolicy,
    close_sync: CloseSync,
) -> Engine {
    let config = EngineConfig {
        close_sync,
        ..small_config(policy)
    };
    Engine::open(
        Arc::clone(fast),
        Arc::clone(capacity),
        Arc::new(sluice_env::SystemClock::new()),
        config,
    )
    .unwrap()
}

/// Issue 33, mdtest-hard's creates: under close-to-open every close of a
/// file the kernel wrote by passthrough synced it, one cache flush of the
/// capacity device per file, which neither the local file system nor
/// mergerfs pays. On a tier local to this host (one page cache for every
/// mount of it) bytes written straight to a capacity file are seen by
/// every mount once written, so a close (`mount.close_sync = "auto"`)
/// syncs only what leaves the log; what was written straight stays owed
/// to the next fsync. The capacity tier's syncs fail here, so a sync
/// shows as an error.
#[test]
fn issue_33_a_close_on_a_local_tier_syncs_only_bytes_leaving_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let Some((faults, capacity, fast)) = faulty_posix(&dir, |b| b.page_cache_shared()) else {
        eprintln!("skipped: the temporary directory is not on a local file system");
        return;
    };
    let f = RelPath::new("f").unwrap();
    let g = RelPath::new("g").unwrap();

    // Written by the kernel, and by the engine straight to the capacity
    // file: a close syncs neither, an fsync both.
    let e = engine(
        &fast,
        &capacity,
        RedirectPolicy::CapacityOnly,
        CloseSync::Auto,
    );
    let id = e.create(&f).unwrap();
    e.note_kernel_writes(id);
    let kernel = capacity
        .open(&f, sluice_env::OpenOptions::default())
        .unwrap();
    kernel.write_at(b"by the kernel", 0).unwrap();
    faults.inject(FaultRule::new(FaultOp::Sync, 5));
    e.sync_file(id, false)
        .expect("kernel writes: no sync at close");
    e.write(id, 0, b"by the engine").unwrap();
    e.sync_file(id, false)
        .expect("engine writes: no sync at close");
    assert!(e.sync_file(id, true).is_err(), "an fsync syncs");
    assert!(
        e.sync_file(id, false).is_ok(),
        "still no sync at the next close"
    );
    faults.clear();
    e.sync_file(id, true).unwrap();
    assert_eq!(e.read(id, 0, 13).unwrap(), b"by the engine");
    drop(e);

    // Bytes buffered in the log leave it at the close: synced first.
    let e = engine(&fast, &capacity, RedirectPolicy::FastAll, CloseSync::Auto);
    let id = e.create(&g).unwrap();
    e.write(id, 0, b"buffered").unwrap();
    faults.inject(FaultRule::new(FaultOp::Sync, 5));
    assert!(
        e.sync_file(id, false).is_err(),
        "bytes leaving the log are synced"
    );
    faults.clear();
    e.sync_file(id, false).unwrap();
    drop(e);

    // `always`: the close syncs what was written straight, as before.
    let e = engine(
        &fast,
        &capacity,
        RedirectPolicy::CapacityOnly,
        CloseSync::Always,
    );
    let id = e.open_file(&f).unwrap();
    e.write(id, 0, b"x").unwrap();
    faults.inject(FaultRule::new(FaultOp::Sync, 5));
    assert!(e.sync_file(id, false).is_err(), "always: the close syncs");
    faults.clear();
}

/// `auto` on a tier that is not local to this host (a network file
/// system's client may hold written bytes until a sync; here a memory
/// tier, which claims nothing): every close of a written file syncs it.
#[test]
fn issue_33_a_close_on_a_tier_not_known_local_syncs_straight_writes() {
    let faults = Arc::new(FaultBackend::new(Arc::new(MemBackend::new())));
    let capacity: Arc<dyn Backend> = faults.clone();
    assert!(!capacity.page_cache_shared());
    let fast: Arc<dyn Backend> = Arc::new(MemBackend::new());
    let e = engine(
        &fast,
        &capacity,
        RedirectPolicy::CapacityOnly,
        CloseSync::Auto,
    );
    let id = e.create(&RelPath::new("f").unwrap()).unwrap();
    e.write(id, 0, b"x").unwrap();
    faults.inject(FaultRule::new(FaultOp::Sync, 5));
    assert!(e.sync_file(id, false).is_err(), "the close syncs");
    // `written`: not even there (the operator says the tier is coherent).
    let e = engine(
        &fast,
        &capacity,
        RedirectPolicy::CapacityOnly,
        CloseSync::Written,
    );
    let id = e.open_file(&RelPath::new("f").unwrap()).unwrap();
    e.write(id, 0, b"y").unwrap();
    e.sync_file(id, false).expect("written: no sync at close");
    faults.clear();
}

/// A close that syncs nothing still refuses to acknowledge bytes when the
/// capacity tier is lost (issue 31): the kernel's writes through
/// passthrough went to the file system the mount opened, no longer where
/// the tier's name leads.
#[test]
fn issue_33_a_close_that_syncs_nothing_fails_when_the_tier_is_lost() {
    let dir = tempfile::tempdir().unwrap();
    let capacity = posix(&dir, "capacity");
    if !capacity.page_cache_shared() {
        eprintln!("skipped: the temporary directory is not on a local file system");
        return;
    }
    let fast: Arc<dyn Backend> = Arc::new(MemBackend::new());
    let e = engine(
        &fast,
        &capacity,
        RedirectPolicy::CapacityOnly,
        CloseSync::Auto,
    );
    let id = e.create(&RelPath::new("f").unwrap()).unwrap();
    e.write(id, 0, b"x").unwrap();
    e.sync_file(id, false).unwrap();
    e.write(id, 0, b"y").unwrap();
    std::fs::rename(dir.path().join("capacity"), dir.path().join("moved")).unwrap();
    std::fs::create_dir(dir.path().join("capacity")).unwrap();
    let err = e.sync_file(id, false).unwrap_err();
    assert_eq!(sluice_env::raw_os_error(&err), Some(19), "ENODEV: {err}");
    assert!(err.to_string().contains("sync f"), "{err}");
}
