//! `xfer copy` between two local directories (issue 36): content and
//! metadata of every scheduling mode, big files cut into objects written
//! at their offsets, reruns that copy nothing, `--checksum`, a resumed
//! copy, a source that changes, `--verify`, and destinations it refuses.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use sluice_policy::lads::{Mode, Object, SchedulerConfig};
use sluice_xfer::copy::{copy, CopyOptions};
use sluice_xfer::layout::posix::PosixLayout;
use sluice_xfer::layout::{FileLayout, LayoutProvider, SourceFile};
use sluice_xfer::source::{Compare, Summary};

/// A tree of files whose sizes cover empty, tiny, unaligned tails and a
/// file of several objects (objects of 64 KiB below).
fn tree(root: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let sizes = [0usize, 1, 4096, 5000, (64 << 10) + 1, 300_000, 1 << 20];
    for (i, &size) in sizes.iter().enumerate() {
        let rel = PathBuf::from(format!("set/d{}/f{i}.bin", i % 3));
        let path = root.join(&rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        let data: Vec<u8> = (0..size).map(|k| (k * 31 + i * 7) as u8).collect();
        fs::write(&path, &data).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600 + i as u32)).unwrap();
        set_mtime(&path, 1_600_000_000 + i as i64);
        out.push((rel, data));
    }
    fs::create_dir_all(root.join("set/empty")).unwrap();
    std::os::unix::fs::symlink("../d0/f0.bin", root.join("set/d1/link")).unwrap();
    out
}

fn set_mtime(path: &Path, sec: i64) {
    let f = fs::File::open(path).unwrap();
    let t = rustix::fs::Timespec {
        tv_sec: sec,
        tv_nsec: 123_456_789,
    };
    rustix::fs::futimens(
        &f,
        &rustix::fs::Timestamps {
            last_access: t,
            last_modification: t,
        },
    )
    .unwrap();
}

fn check_tree(src: &Path, dst: &Path, files: &[(PathBuf, Vec<u8>)]) {
    for (rel, data) in files {
        let got = fs::read(dst.join(rel)).unwrap_or_else(|e| panic!("{}: {e}", rel.display()));
        assert!(got == *data, "{} differs", rel.display());
        let (a, b) = (
            fs::metadata(src.join(rel)).unwrap(),
            fs::metadata(dst.join(rel)).unwrap(),
        );
        assert_eq!(a.permissions().mode(), b.permissions().mode());
        assert_eq!((a.mtime(), a.mtime_nsec()), (b.mtime(), b.mtime_nsec()));
    }
    assert!(dst.join("set/empty").is_dir());
    assert_eq!(
        fs::read_link(dst.join("set/d1/link")).unwrap(),
        Path::new("../d0/f0.bin")
    );
    let leftovers: Vec<_> = walk(dst)
        .into_iter()
        .filter(|p| p.to_string_lossy().ends_with(".sluice-part"))
        .collect();
    assert!(leftovers.is_empty(), "partial copies left: {leftovers:?}");
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() && !p.is_symlink() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

fn options(layout: Arc<dyn LayoutProvider>, src: &Path, dst: &Path) -> CopyOptions {
    CopyOptions {
        sources: vec![src.join("set")],
        destination: dst.to_owned(),
        threads: 4,
        layout,
        scheduler: SchedulerConfig {
            target_depth: 4,
            ..SchedulerConfig::default()
        },
        journal: None,
        files_in_flight: 3,
        compare: Compare::SizeAndMtime,
        links: true,
        fsync: true,
        verify: false,
        progress: None,
    }
}

fn posix() -> Arc<dyn LayoutProvider> {
    Arc::new(PosixLayout::new(64 << 10))
}

fn run(opts: CopyOptions) -> Summary {
    let s = copy(opts).unwrap();
    assert!(s.failed.is_empty() && s.changed.is_empty(), "{s}");
    s
}

#[test]
fn issue_36_every_mode_copies_a_tree_with_content_mode_mtime_and_links() {
    let src = tempfile::tempdir().unwrap();
    let files = tree(src.path());
    let bytes: u64 = files.iter().map(|(_, d)| d.len() as u64).sum();
    for mode in [Mode::FileAtATime, Mode::RoundRobin, Mode::CongestionAware] {
        for (fsync, verify) in [(true, false), (true, true), (false, false)] {
            let dst = tempfile::tempdir().unwrap();
            let mut o = options(posix(), src.path(), dst.path());
            o.scheduler.mode = mode;
            (o.fsync, o.verify) = (fsync, verify);
            let s = run(o);
            check_tree(src.path(), dst.path(), &files);
            assert_eq!((s.files, s.bytes, s.links), (7, bytes, 1), "{s}");
            assert_eq!(s.connections, 0);
            assert!(s.to_string().starts_with("copied 7 files"), "{s}");
            // The 1 MiB file went in 16 objects of 64 KiB.
            assert!(s.objects >= 16 + 5, "{s}");
        }
    }
}

#[test]
fn issue_36_a_rerun_copies_nothing_and_checksum_sees_through_a_new_mtime() {
    let (src, dst) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let files = tree(src.path());
    run(options(posix(), src.path(), dst.path()));
    let s = run(options(posix(), src.path(), dst.path()));
    assert_eq!((s.files, s.bytes, s.files_unchanged), (0, 0, 7), "{s}");

    // A new mtime: the quick check copies the file again; --checksum
    // finds the bytes equal and leaves it.
    let f6 = src.path().join("set/d0/f6.bin");
    set_mtime(&f6, 1_700_000_000);
    let mut o = options(posix(), src.path(), dst.path());
    o.compare = Compare::Checksum;
    let s = run(o);
    assert_eq!((s.files, s.files_unchanged), (0, 7), "{s}");
    let s = run(options(posix(), src.path(), dst.path()));
    assert_eq!(
        (s.files, s.files_unchanged, s.bytes),
        (1, 6, 1 << 20),
        "{s}"
    );
    check_tree(src.path(), dst.path(), &files);

    // --ignore-times copies everything.
    let mut o = options(posix(), src.path(), dst.path());
    o.compare = Compare::Never;
    assert_eq!(run(o).files, 7);
}

/// POSIX objects, and a read error after `fail_after` reads (a crash of
/// the copy, as far as the journal can tell).
struct FailingReads {
    inner: PosixLayout,
    reads: AtomicUsize,
    fail_after: usize,
}

impl LayoutProvider for FailingReads {
    fn name(&self) -> &'static str {
        "posix"
    }
    fn layout(&self, path: &Path, len: u64) -> std::io::Result<FileLayout> {
        self.inner.layout(path, len)
    }
    fn default_depth(&self, threads: u32) -> u32 {
        threads
    }
    fn read_object(
        &self,
        path: &Path,
        file: &SourceFile,
        object: &Object,
        buf: &mut [u8],
    ) -> std::io::Result<()> {
        if self.reads.fetch_add(1, Ordering::SeqCst) >= self.fail_after {
            return Err(std::io::Error::other("injected read failure"));
        }
        self.inner.read_object(path, file, object, buf)
    }
}

#[test]
fn issue_36_a_stopped_copy_resumes_from_its_journal_and_reads_the_copy_back() {
    let (src, dst, state) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    // One big file of 64 objects.
    let big: Vec<u8> = (0..(4 << 20) + 17).map(|k| (k % 251) as u8).collect();
    fs::create_dir_all(src.path().join("set")).unwrap();
    fs::write(src.path().join("set/big"), &big).unwrap();
    let journal = state.path().join("journal");
    let mut o = options(
        Arc::new(FailingReads {
            inner: PosixLayout::new(64 << 10),
            reads: AtomicUsize::new(0),
            fail_after: 30,
        }),
        src.path(),
        dst.path(),
    );
    o.threads = 1;
    o.journal = Some(journal.clone());
    let e = copy(o).unwrap_err().to_string();
    assert!(e.contains("injected read failure"), "{e}");
    assert!(e.contains("rerun the same command to resume"), "{e}");
    assert!(!dst.path().join("set/big").exists());
    assert!(dst.path().join("set/.big.sluice-part").exists());

    let mut o = options(posix(), src.path(), dst.path());
    o.journal = Some(journal.clone());
    let s = run(o);
    assert_eq!(s.files, 1, "{s}");
    assert_eq!(s.objects_resumed, 30, "{s}");
    assert_eq!(s.objects + s.objects_resumed, 65, "{s}");
    assert_eq!(fs::read(dst.path().join("set/big")).unwrap(), big);
    assert!(!journal.exists(), "a complete copy removes its journal");
}

#[test]
fn issue_36_a_resumed_copy_that_lost_bytes_fails_its_check_and_is_redone() {
    let (src, dst, state) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let big: Vec<u8> = (0..(1 << 20)).map(|k| (k % 253) as u8).collect();
    fs::create_dir_all(src.path().join("set")).unwrap();
    fs::write(src.path().join("set/big"), &big).unwrap();
    let journal = state.path().join("journal");
    let mut o = options(
        Arc::new(FailingReads {
            inner: PosixLayout::new(64 << 10),
            reads: AtomicUsize::new(0),
            fail_after: 8,
        }),
        src.path(),
        dst.path(),
    );
    (o.threads, o.journal) = (1, Some(journal.clone()));
    copy(o).unwrap_err();
    // The journal says 8 objects are there; the partial copy lost them.
    let part = dst.path().join("set/.big.sluice-part");
    let f = fs::OpenOptions::new().write(true).open(&part).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, &[0u8; 64 << 10], 0).unwrap();
    f.sync_all().unwrap();
    let mut o = options(posix(), src.path(), dst.path());
    o.journal = Some(journal.clone());
    let s = copy(o).unwrap();
    assert_eq!(s.failed.len(), 1, "{s}");
    assert!(s.failed[0].contains("verification failed"), "{s}");
    assert!(!dst.path().join("set/big").exists());
    // The journal forgot the file: the next run copies it whole.
    let mut o = options(posix(), src.path(), dst.path());
    o.journal = Some(journal);
    let s = run(o);
    assert_eq!((s.files, s.objects_resumed), (1, 0), "{s}");
    assert_eq!(fs::read(dst.path().join("set/big")).unwrap(), big);
}

/// POSIX, and appends to `grow` while its first object is read.
struct Grower(PosixLayout);

impl LayoutProvider for Grower {
    fn name(&self) -> &'static str {
        "posix"
    }
    fn layout(&self, path: &Path, len: u64) -> std::io::Result<FileLayout> {
        self.0.layout(path, len)
    }
    fn read_object(
        &self,
        path: &Path,
        file: &SourceFile,
        object: &Object,
        buf: &mut [u8],
    ) -> std::io::Result<()> {
        if path.ends_with("grow") && object.offset == 0 {
            let mut f = fs::OpenOptions::new().append(true).open(path).unwrap();
            f.write_all(&[1; 10]).unwrap();
        }
        self.0.read_object(path, file, object, buf)
    }
}

#[test]
fn issue_36_a_file_that_changes_while_it_is_copied_is_reported_and_not_put_in_place() {
    let (src, dst) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    fs::create_dir_all(src.path().join("set")).unwrap();
    fs::write(src.path().join("set/grow"), vec![7u8; 200_000]).unwrap();
    fs::write(src.path().join("set/calm"), vec![8u8; 200_000]).unwrap();
    let s = copy(options(
        Arc::new(Grower(PosixLayout::new(64 << 10))),
        src.path(),
        dst.path(),
    ))
    .unwrap();
    assert_eq!(s.files, 1, "{s}");
    assert_eq!(s.changed.len(), 1, "{s}");
    assert!(s.changed[0].contains("size 200000 -> 200010"), "{s}");
    assert!(!dst.path().join("set/grow").exists());
    assert!(!dst.path().join("set/.grow.sluice-part").exists());
    assert_eq!(
        fs::read(dst.path().join("set/calm")).unwrap(),
        vec![8u8; 200_000]
    );
}

#[test]
fn issue_36_a_copy_into_its_own_source_and_zero_threads_are_refused() {
    let src = tempfile::tempdir().unwrap();
    tree(src.path());
    let inside = src.path().join("set/d0/out");
    let e = copy(options(posix(), src.path(), &inside))
        .unwrap_err()
        .to_string();
    assert!(e.contains("into itself"), "{e}");
    assert!(!inside.exists());
    let dst = tempfile::tempdir().unwrap();
    let mut o = options(posix(), src.path(), dst.path());
    o.threads = 0;
    assert!(copy(o).is_err());
}

#[test]
fn issue_36_a_symlink_planted_in_the_destination_is_never_followed() {
    let (src, dst, outside) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    tree(src.path());
    fs::create_dir_all(dst.path().join("set")).unwrap();
    std::os::unix::fs::symlink(outside.path(), dst.path().join("set/d0")).unwrap();
    let s = copy(options(posix(), src.path(), dst.path())).unwrap();
    // d0 and the files under it fail; the rest arrive.
    assert!(s.failed.iter().any(|f| f.starts_with("set/d0")), "{s}");
    assert_eq!(fs::read_dir(outside.path()).unwrap().count(), 0);
    assert!(dst.path().join("set/d1/f1.bin").exists());
}
