//! POSIX attributes, symbolic links and extended attributes (the FUSE
//! mount's view of a backend): the POSIX backend applies them to the real
//! directory and never follows a link, the last component included; the
//! wrappers forward them; the memory backend keeps modes and times; the
//! crash-test backend refuses them.

use std::fs;
use std::io::ErrorKind;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sluice_devices::ssd::SsdConfig;
use sluice_env::crash::CrashBackend;
use sluice_env::emulated::EmulatedBackend;
use sluice_env::fault::{FaultBackend, FaultOp, FaultRule};
use sluice_env::memory::MemBackend;
use sluice_env::posix::PosixBackend;
use sluice_env::{
    raw_os_error, Backend, DirEntry, FileKind, OpenOptions, RelPath, SetAttr, StatKind,
    SystemClock, TimeSet, XattrFlags,
};

const EPERM: i32 = 1;
const EEXIST: i32 = 17;
const EINVAL: i32 = 22;
const ELOOP: i32 = 40;
const ENODATA: i32 = 61;
const EOPNOTSUPP: i32 = 95;

fn p(path: &str) -> RelPath {
    RelPath::new(path).unwrap()
}

/// A tempdir with a POSIX backend on `<tmp>/tier` and a directory
/// `<tmp>/outside` next to it.
fn posix() -> (tempfile::TempDir, PosixBackend) {
    let top = tempfile::tempdir().unwrap();
    fs::create_dir(top.path().join("tier")).unwrap();
    fs::create_dir(top.path().join("outside")).unwrap();
    let backend = PosixBackend::new(top.path().join("tier")).unwrap();
    (top, backend)
}

fn mode_of(path: &Path) -> u32 {
    fs::symlink_metadata(path).unwrap().permissions().mode() & 0o7777
}

/// `secs.nanos` after the epoch.
fn at(secs: u64, nanos: u32) -> SystemTime {
    UNIX_EPOCH + Duration::new(secs, nanos)
}

fn mode(mode: u32) -> SetAttr {
    SetAttr {
        mode: Some(mode),
        ..SetAttr::default()
    }
}

#[test]
fn stat_reports_files_directories_links_and_others_as_themselves() {
    let (top, backend) = posix();
    let tier = top.path().join("tier");
    backend.create_dir(&p("d")).unwrap();
    let file = backend.open(&p("d/f"), OpenOptions::CREATE).unwrap();
    file.write_at(b"12345", 0).unwrap();
    symlink("/etc/passwd", tier.join("link")).unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        tier.join("fifo"),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();

    let stat = backend.stat(&p("d/f")).unwrap();
    let real = fs::symlink_metadata(tier.join("d/f")).unwrap();
    assert_eq!(stat.kind, StatKind::File);
    assert_eq!(stat.len, 5);
    assert_eq!(stat.ino, real.ino());
    assert_eq!(stat.mode, real.mode() & 0o7777);
    assert_eq!((stat.uid, stat.gid), (real.uid(), real.gid()));
    assert_eq!(stat.nlink, 1);
    assert_eq!(stat.blocks, real.blocks());
    assert_eq!(u64::from(stat.blksize), real.blksize());
    assert_eq!(stat.mtime, real.modified().unwrap());
    assert_eq!(stat.rdev, 0);

    let dir = backend.stat(&p("d")).unwrap();
    assert_eq!(dir.kind, StatKind::Dir);
    assert_eq!(dir.ino, fs::metadata(tier.join("d")).unwrap().ino());
    let root = backend.stat(&RelPath::root()).unwrap();
    assert_eq!(root.kind, StatKind::Dir);
    assert_eq!(root.ino, fs::metadata(&tier).unwrap().ino());

    // The link itself, not /etc/passwd: its length is its target's string.
    let link = backend.stat(&p("link")).unwrap();
    assert_eq!(link.kind, StatKind::Symlink);
    assert_eq!(link.len, "/etc/passwd".len() as u64);
    assert_eq!(
        link.ino,
        fs::symlink_metadata(tier.join("link")).unwrap().ino()
    );
    assert_ne!(link.ino, fs::metadata("/etc/passwd").unwrap().ino());

    let fifo = backend.stat(&p("fifo")).unwrap();
    assert_eq!((fifo.kind, fifo.mode), (StatKind::Fifo, 0o600));

    let missing = backend.stat(&p("d/missing")).unwrap_err();
    assert_eq!(missing.kind(), ErrorKind::NotFound);
    assert!(missing.to_string().contains("d/missing"), "{missing}");

    // Everything is listed by read_dir_all; read_dir still shows only what
    // the engine knows.
    assert_eq!(
        backend.read_dir_all(&RelPath::root()).unwrap(),
        vec![
            ("d".to_string(), StatKind::Dir),
            ("fifo".to_string(), StatKind::Fifo),
            ("link".to_string(), StatKind::Symlink),
        ]
    );
    assert_eq!(
        backend.read_dir(&RelPath::root()).unwrap(),
        vec![DirEntry {
            name: "d".to_string(),
            kind: FileKind::Dir,
        }]
    );
    assert_eq!(
        backend.read_dir_all(&p("d")).unwrap(),
        vec![("f".to_string(), StatKind::File)]
    );
}

#[test]
fn symlinks_round_trip_and_are_never_followed() {
    let (top, backend) = posix();
    let tier = top.path().join("tier");
    backend.symlink("/etc/passwd", &p("link")).unwrap();
    assert_eq!(
        fs::read_link(tier.join("link")).unwrap(),
        Path::new("/etc/passwd")
    );
    assert_eq!(backend.read_link(&p("link")).unwrap(), "/etc/passwd");
    // Stored verbatim, not resolved: relative, dangling, odd.
    backend.symlink("../../x/./y", &p("rel")).unwrap();
    assert_eq!(backend.read_link(&p("rel")).unwrap(), "../../x/./y");

    // The existing refusals still hold.
    let error = backend
        .open(
            &p("link"),
            OpenOptions {
                create: false,
                create_new: false,
                truncate: false,
                private: false,
            },
        )
        .unwrap_err();
    assert_eq!(raw_os_error(&error), Some(ELOOP), "{error:?}");
    let error = backend.metadata(&p("link")).unwrap_err();
    assert_eq!(raw_os_error(&error), Some(ELOOP), "{error:?}");
    assert_eq!(backend.stat(&p("link")).unwrap().kind, StatKind::Symlink);

    // A link cannot replace anything; only links are read as links.
    let error = backend.symlink("/elsewhere", &p("link")).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::AlreadyExists);
    assert_eq!(backend.read_link(&p("link")).unwrap(), "/etc/passwd");
    backend.open(&p("file"), OpenOptions::CREATE).unwrap();
    let error = backend.read_link(&p("file")).unwrap_err();
    assert_eq!(raw_os_error(&error), Some(EINVAL), "{error:?}");
    assert!(backend.read_link(&RelPath::root()).is_err());
    assert!(backend.symlink("x", &RelPath::root()).is_err());

    // Nothing is created or read through a directory link.
    symlink(top.path().join("outside"), tier.join("dlink")).unwrap();
    let error = backend.symlink("x", &p("dlink/new")).unwrap_err();
    assert_eq!(raw_os_error(&error), Some(ELOOP), "{error:?}");
    assert!(fs::read_dir(top.path().join("outside"))
        .unwrap()
        .next()
        .is_none());
    symlink("/etc/passwd", top.path().join("outside/inner")).unwrap();
    assert!(backend.read_link(&p("dlink/inner")).is_err());
    assert!(backend.stat(&p("dlink/inner")).is_err());
    assert!(backend.read_dir_all(&p("dlink")).is_err());
}

#[test]
fn modes_and_owners_are_set_on_the_entry_itself() {
    let (top, backend) = posix();
    let tier = top.path().join("tier");
    backend.open(&p("f"), OpenOptions::CREATE).unwrap();
    backend.create_dir(&p("d")).unwrap();

    backend.set_attr(&p("f"), &mode(0o600)).unwrap();
    assert_eq!(backend.stat(&p("f")).unwrap().mode, 0o600);
    assert_eq!(mode_of(&tier.join("f")), 0o600);
    // Set-id and sticky bits are kept; file type bits (as FUSE passes
    // them) are ignored.
    backend.set_attr(&p("d"), &mode(0o1777)).unwrap();
    assert_eq!(backend.stat(&p("d")).unwrap().mode, 0o1777);
    backend.set_attr(&p("f"), &mode(0o100_640)).unwrap();
    assert_eq!(mode_of(&tier.join("f")), 0o640);
    backend.set_attr(&RelPath::root(), &mode(0o750)).unwrap();
    assert_eq!(mode_of(&tier), 0o750);

    let me = fs::metadata(tier.join("f")).unwrap();
    let same = SetAttr {
        uid: Some(me.uid()),
        gid: Some(me.gid()),
        ..SetAttr::default()
    };
    backend.set_attr(&p("f"), &same).unwrap();
    let stat = backend.stat(&p("f")).unwrap();
    assert_eq!((stat.uid, stat.gid), (me.uid(), me.gid()));

    let reserved = SetAttr {
        uid: Some(u32::MAX),
        ..SetAttr::default()
    };
    let error = backend.set_attr(&p("f"), &reserved).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidInput, "{error}");
    let error = backend.set_attr(&p("missing"), &mode(0o600)).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::NotFound, "{error}");
    let error = backend
        .set_attr(&p("missing"), &SetAttr::default())
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::NotFound, "{error}");

    if me.uid() != 0 {
        eprintln!("not root: chown to 1000:1000 not tested");
        return;
    }
    let other = SetAttr {
        uid: Some(1000),
        gid: Some(1000),
        ..SetAttr::default()
    };
    backend.set_attr(&p("f"), &other).unwrap();
    let stat = backend.stat(&p("f")).unwrap();
    assert_eq!((stat.uid, stat.gid), (1000, 1000));
    let real = fs::metadata(tier.join("f")).unwrap();
    assert_eq!((real.uid(), real.gid()), (1000, 1000));
    // Only the group.
    let group = SetAttr {
        gid: Some(1001),
        ..SetAttr::default()
    };
    backend.set_attr(&p("f"), &group).unwrap();
    let stat = backend.stat(&p("f")).unwrap();
    assert_eq!((stat.uid, stat.gid), (1000, 1001));

    // A link's owner is its own; its target keeps its owner.
    symlink("f", tier.join("flink")).unwrap();
    backend.set_attr(&p("flink"), &same).unwrap();
    let link = backend.stat(&p("flink")).unwrap();
    assert_eq!((link.uid, link.gid), (me.uid(), me.gid()));
    let target = backend.stat(&p("f")).unwrap();
    assert_eq!((target.uid, target.gid), (1000, 1001));
}

#[test]
fn a_mode_change_on_a_link_is_refused_and_its_target_untouched() {
    let (top, backend) = posix();
    let tier = top.path().join("tier");
    let outside = top.path().join("outside/secret");
    fs::write(&outside, b"secret").unwrap();
    fs::set_permissions(&outside, fs::Permissions::from_mode(0o600)).unwrap();
    symlink(&outside, tier.join("out")).unwrap();
    backend.open(&p("inside"), OpenOptions::CREATE).unwrap();
    symlink("inside", tier.join("in")).unwrap();

    for (link, target, before) in [
        ("out", &outside, 0o600),
        ("in", &tier.join("inside"), 0o644),
    ] {
        let error = backend.set_attr(&p(link), &mode(0o777)).unwrap_err();
        assert_eq!(raw_os_error(&error), Some(EOPNOTSUPP), "{error:?}");
        assert_eq!(error.kind(), ErrorKind::Unsupported);
        assert!(error.to_string().contains("symbolic link"), "{error}");
        assert_eq!(mode_of(target), before, "{link}: target changed");
    }
    // Nor through a directory link.
    symlink(top.path().join("outside"), tier.join("dlink")).unwrap();
    let error = backend
        .set_attr(&p("dlink/secret"), &mode(0o777))
        .unwrap_err();
    assert_eq!(raw_os_error(&error), Some(ELOOP), "{error:?}");
    let times = SetAttr {
        mtime: Some(TimeSet::At(at(1, 0))),
        ..SetAttr::default()
    };
    assert!(backend.set_attr(&p("dlink/secret"), &times).is_err());
    assert_eq!(mode_of(&outside), 0o600);
    assert_ne!(
        fs::metadata(&outside).unwrap().modified().unwrap(),
        at(1, 0)
    );
}

#[test]
fn times_are_set_to_the_nanosecond_or_to_now() {
    let (top, backend) = posix();
    let tier = top.path().join("tier");
    backend.open(&p("f"), OpenOptions::CREATE).unwrap();
    let atime = at(1_000_000_000, 123_456_789);
    let mtime = at(1_234_567_890, 987_654_321);
    let both = SetAttr {
        atime: Some(TimeSet::At(atime)),
        mtime: Some(TimeSet::At(mtime)),
        ..SetAttr::default()
    };
    backend.set_attr(&p("f"), &both).unwrap();
    let stat = backend.stat(&p("f")).unwrap();
    assert_eq!((stat.atime, stat.mtime), (atime, mtime));
    let real = fs::metadata(tier.join("f")).unwrap();
    assert_eq!(real.accessed().unwrap(), atime);
    assert_eq!(real.modified().unwrap(), mtime);

    // Only the modification time: the access time stays (UTIME_OMIT).
    let before = SystemTime::now() - Duration::from_secs(1);
    let now = SetAttr {
        mtime: Some(TimeSet::Now),
        ..SetAttr::default()
    };
    backend.set_attr(&p("f"), &now).unwrap();
    let stat = backend.stat(&p("f")).unwrap();
    assert_eq!(stat.atime, atime);
    assert!(stat.mtime > mtime, "{:?}", stat.mtime);
    assert!(stat.mtime >= before, "{:?}", stat.mtime);
    assert!(stat.mtime <= SystemTime::now() + Duration::from_secs(1));
    assert!(stat.ctime >= before);

    // A link's times are its own.
    symlink("f", tier.join("flink")).unwrap();
    let old = SetAttr {
        mtime: Some(TimeSet::At(at(1, 5))),
        ..SetAttr::default()
    };
    backend.set_attr(&p("flink"), &old).unwrap();
    assert_eq!(backend.stat(&p("flink")).unwrap().mtime, at(1, 5));
    assert_eq!(backend.stat(&p("f")).unwrap().mtime, stat.mtime);

    // The root's, through its descriptor.
    backend.set_attr(&RelPath::root(), &both).unwrap();
    assert_eq!(fs::metadata(&tier).unwrap().modified().unwrap(), mtime);
}

#[test]
fn extended_attributes_round_trip_without_following_links() {
    let (top, backend) = posix();
    let tier = top.path().join("tier");
    backend.create_dir(&p("d")).unwrap();
    backend.open(&p("d/f"), OpenOptions::CREATE).unwrap();
    let f = p("d/f");

    backend
        .set_xattr(&f, "user.sluice", b"value", XattrFlags::Either)
        .unwrap();
    assert_eq!(backend.get_xattr(&f, "user.sluice").unwrap(), b"value");
    // Longer than the first read buffer; empty.
    let long: Vec<u8> = (0..3000u32).map(|i| i as u8).collect();
    backend
        .set_xattr(&f, "user.long", &long, XattrFlags::CreateOnly)
        .unwrap();
    assert_eq!(backend.get_xattr(&f, "user.long").unwrap(), long);
    backend
        .set_xattr(&f, "user.empty", b"", XattrFlags::Either)
        .unwrap();
    assert_eq!(backend.get_xattr(&f, "user.empty").unwrap(), b"");
    let mut names = backend.list_xattr(&f).unwrap();
    names.retain(|name| name.starts_with("user."));
    names.sort();
    assert_eq!(names, ["user.empty", "user.long", "user.sluice"]);

    let error = backend
        .set_xattr(&f, "user.sluice", b"other", XattrFlags::CreateOnly)
        .unwrap_err();
    assert_eq!(raw_os_error(&error), Some(EEXIST), "{error:?}");
    assert!(error.to_string().contains("user.sluice"), "{error}");
    assert_eq!(backend.get_xattr(&f, "user.sluice").unwrap(), b"value");
    backend
        .set_xattr(&f, "user.sluice", b"other", XattrFlags::ReplaceOnly)
        .unwrap();
    assert_eq!(backend.get_xattr(&f, "user.sluice").unwrap(), b"other");
    let error = backend
        .set_xattr(&f, "user.new", b"x", XattrFlags::ReplaceOnly)
        .unwrap_err();
    assert_eq!(raw_os_error(&error), Some(ENODATA), "{error:?}");

    backend.remove_xattr(&f, "user.sluice").unwrap();
    let error = backend.get_xattr(&f, "user.sluice").unwrap_err();
    assert_eq!(raw_os_error(&error), Some(ENODATA), "{error:?}");
    assert!(error.to_string().contains("d/f"), "{error}");
    let error = backend.remove_xattr(&f, "user.sluice").unwrap_err();
    assert_eq!(raw_os_error(&error), Some(ENODATA), "{error:?}");
    let error = backend.get_xattr(&p("d/missing"), "user.x").unwrap_err();
    assert_eq!(error.kind(), ErrorKind::NotFound, "{error}");

    // Directories and the root have theirs.
    backend
        .set_xattr(&p("d"), "user.dir", b"1", XattrFlags::Either)
        .unwrap();
    backend
        .set_xattr(&RelPath::root(), "user.root", b"2", XattrFlags::Either)
        .unwrap();
    assert_eq!(backend.get_xattr(&p("d"), "user.dir").unwrap(), b"1");
    assert_eq!(
        backend.get_xattr(&RelPath::root(), "user.root").unwrap(),
        b"2"
    );
    assert!(backend
        .list_xattr(&RelPath::root())
        .unwrap()
        .contains(&"user.root".to_string()));
    backend.remove_xattr(&RelPath::root(), "user.root").unwrap();
    let error = backend
        .get_xattr(&RelPath::root(), "user.root")
        .unwrap_err();
    assert_eq!(raw_os_error(&error), Some(ENODATA), "{error:?}");

    // A link is not followed: its target's attributes are not its own, and
    // setting one on it does not reach the target (Linux allows `user.`
    // attributes on regular files and directories only: EPERM).
    symlink("d/f", tier.join("flink")).unwrap();
    for name in ["user.long", "user.empty"] {
        let error = backend.get_xattr(&p("flink"), name).unwrap_err();
        assert_eq!(raw_os_error(&error), Some(ENODATA), "{name}: {error:?}");
    }
    assert!(!backend
        .list_xattr(&p("flink"))
        .unwrap()
        .iter()
        .any(|name| name.starts_with("user.")));
    let error = backend
        .set_xattr(&p("flink"), "user.via-link", b"x", XattrFlags::Either)
        .unwrap_err();
    assert_eq!(raw_os_error(&error), Some(EPERM), "{error:?}");
    let error = backend.get_xattr(&f, "user.via-link").unwrap_err();
    assert_eq!(raw_os_error(&error), Some(ENODATA), "{error:?}");
    // Nor through a directory link.
    let outside = top.path().join("outside/secret");
    fs::write(&outside, b"").unwrap();
    symlink(top.path().join("outside"), tier.join("dlink")).unwrap();
    let error = backend
        .set_xattr(&p("dlink/secret"), "user.x", b"x", XattrFlags::Either)
        .unwrap_err();
    assert_eq!(raw_os_error(&error), Some(ELOOP), "{error:?}");
    assert!(backend.list_xattr(&p("dlink/secret")).is_err());
    let real = rustix::fs::getxattr(&outside, "user.x", &mut [0u8; 8][..]).unwrap_err();
    assert_eq!(real.raw_os_error(), ENODATA);
}

#[test]
fn the_emulated_device_forwards_attributes_to_the_inner_directory() {
    let (top, inner) = posix();
    let tier = top.path().join("tier");
    let backend = EmulatedBackend::ssd(
        Arc::new(inner),
        SsdConfig::default(),
        Arc::new(SystemClock::new()),
    )
    .unwrap();
    backend.open(&p("f"), OpenOptions::CREATE).unwrap();
    backend.set_attr(&p("f"), &mode(0o640)).unwrap();
    assert_eq!(mode_of(&tier.join("f")), 0o640);
    let stat = backend.stat(&p("f")).unwrap();
    assert_eq!(stat.ino, fs::metadata(tier.join("f")).unwrap().ino());
    assert_eq!(stat.mode, 0o640);
    backend
        .set_xattr(&p("f"), "user.emulated", b"yes", XattrFlags::Either)
        .unwrap();
    let mut buf = [0u8; 8];
    let len = rustix::fs::getxattr(tier.join("f"), "user.emulated", &mut buf[..]).unwrap();
    assert_eq!(&buf[..len], b"yes");
    assert_eq!(backend.list_xattr(&p("f")).unwrap(), ["user.emulated"]);
    backend.remove_xattr(&p("f"), "user.emulated").unwrap();
    backend.symlink("f", &p("link")).unwrap();
    assert_eq!(backend.read_link(&p("link")).unwrap(), "f");
    assert_eq!(
        backend.read_dir_all(&RelPath::root()).unwrap(),
        vec![
            ("f".to_string(), StatKind::File),
            ("link".to_string(), StatKind::Symlink)
        ]
    );
}

#[test]
fn the_fault_backend_forwards_attributes_and_can_fail_them() {
    let (top, inner) = posix();
    let tier = top.path().join("tier");
    let backend = FaultBackend::new(Arc::new(inner));
    backend.open(&p("f"), OpenOptions::CREATE).unwrap();
    backend.set_attr(&p("f"), &mode(0o604)).unwrap();
    assert_eq!(mode_of(&tier.join("f")), 0o604);
    assert_eq!(backend.stat(&p("f")).unwrap().mode, 0o604);
    backend
        .set_xattr(&p("f"), "user.fault", b"no", XattrFlags::Either)
        .unwrap();
    assert_eq!(backend.get_xattr(&p("f"), "user.fault").unwrap(), b"no");

    backend.inject(FaultRule::new(FaultOp::SetAttr, 5));
    let error = backend.set_attr(&p("f"), &mode(0o600)).unwrap_err();
    assert_eq!(raw_os_error(&error), Some(5), "{error:?}");
    assert!(backend
        .set_xattr(&p("f"), "user.fault", b"x", XattrFlags::Either)
        .is_err());
    assert!(backend.remove_xattr(&p("f"), "user.fault").is_err());
    assert_eq!(
        mode_of(&tier.join("f")),
        0o604,
        "the fault reached the inner backend"
    );
    assert_eq!(backend.get_xattr(&p("f"), "user.fault").unwrap(), b"no");
    backend.clear();
    backend.inject(FaultRule::new(FaultOp::Metadata, 5));
    assert!(backend.stat(&p("f")).is_err());
    assert!(backend.get_xattr(&p("f"), "user.fault").is_err());
    backend.clear();
    backend.inject(FaultRule::new(FaultOp::Symlink, 28));
    let error = backend.symlink("f", &p("link")).unwrap_err();
    assert_eq!(raw_os_error(&error), Some(28), "{error:?}");
    assert!(fs::symlink_metadata(tier.join("link")).is_err());
    backend.clear();
    backend.inject(FaultRule {
        path_prefix: Some("hard".into()),
        ..FaultRule::new(FaultOp::Link, 28)
    });
    let error = backend.hard_link(&p("f"), &p("hard")).unwrap_err();
    assert_eq!(raw_os_error(&error), Some(28), "{error:?}");
    assert!(
        error.to_string().contains("link \"f\" to \"hard\""),
        "{error}"
    );
    assert!(fs::symlink_metadata(tier.join("hard")).is_err());
    backend.hard_link(&p("f"), &p("other")).unwrap();
    assert_eq!(backend.stat(&p("other")).unwrap().nlink, 2);
    assert_eq!(backend.injected(), 7);
}

#[test]
fn memory_keeps_modes_and_times_and_refuses_links() {
    let backend = MemBackend::new();
    backend.create_dir(&p("d")).unwrap();
    let file = backend.open(&p("d/f"), OpenOptions::CREATE).unwrap();
    file.write_at(b"1234567", 0).unwrap();

    let stat = backend.stat(&p("d/f")).unwrap();
    assert_eq!((stat.kind, stat.len, stat.mode), (StatKind::File, 7, 0o644));
    assert_eq!((stat.uid, stat.gid, stat.nlink, stat.blocks), (0, 0, 1, 1));
    let dir = backend.stat(&p("d")).unwrap();
    assert_eq!((dir.kind, dir.len, dir.mode), (StatKind::Dir, 0, 0o755));
    let root = backend.stat(&RelPath::root()).unwrap();
    assert_eq!((root.kind, root.ino), (StatKind::Dir, 1));
    assert!(stat.ino != dir.ino && stat.ino != root.ino && dir.ino != root.ino);

    backend.set_attr(&p("d/f"), &mode(0o100_600)).unwrap();
    assert_eq!(backend.stat(&p("d/f")).unwrap().mode, 0o600);
    backend.set_attr(&p("d"), &mode(0o700)).unwrap();
    assert_eq!(backend.stat(&p("d")).unwrap().mode, 0o700);
    let times = SetAttr {
        atime: Some(TimeSet::At(at(5, 6))),
        mtime: Some(TimeSet::At(at(7, 8))),
        uid: Some(1000),
        ..SetAttr::default()
    };
    backend.set_attr(&p("d/f"), &times).unwrap();
    let stat = backend.stat(&p("d/f")).unwrap();
    assert_eq!(
        (stat.atime, stat.mtime, stat.uid),
        (at(5, 6), at(7, 8), 1000)
    );
    // A write moves the modification time.
    file.write_at(b"x", 0).unwrap();
    assert!(backend.stat(&p("d/f")).unwrap().mtime > at(7, 8));

    // Attributes and inode numbers follow a rename.
    backend.rename(&p("d"), &p("e")).unwrap();
    assert_eq!(backend.stat(&p("e")).unwrap().ino, dir.ino);
    assert_eq!(backend.stat(&p("e")).unwrap().mode, 0o700);
    assert_eq!(backend.stat(&p("e/f")).unwrap().ino, stat.ino);
    assert_eq!(
        backend.stat(&p("d")).unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert_eq!(
        backend.set_attr(&p("d"), &mode(0o700)).unwrap_err().kind(),
        ErrorKind::NotFound
    );

    let error = backend.symlink("/etc/passwd", &p("link")).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Unsupported);
    assert_eq!(raw_os_error(&error), Some(EOPNOTSUPP));
    assert!(error.to_string().contains("link"), "{error}");
    assert_eq!(
        backend.get_xattr(&p("e/f"), "user.x").unwrap_err().kind(),
        ErrorKind::Unsupported
    );
    assert_eq!(
        backend.read_dir_all(&p("e")).unwrap(),
        vec![("f".to_string(), StatKind::File)]
    );
}

#[test]
fn the_crash_backend_does_not_model_attributes() {
    let backend = CrashBackend::new();
    backend.open(&p("f"), OpenOptions::CREATE).unwrap();
    let error = backend.stat(&p("f")).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Unsupported);
    assert_eq!(raw_os_error(&error), Some(EOPNOTSUPP));
    assert!(backend.set_attr(&p("f"), &mode(0o600)).is_err());
    assert_eq!(
        backend.read_dir_all(&RelPath::root()).unwrap(),
        vec![("f".to_string(), StatKind::File)]
    );
}

/// Issue 34: the xattrs of an open file are its inode's (`fsetxattr`,
/// `fremovexattr`), whatever names it now: a file renamed away keeps
/// them, and the file put at its old name gets none of them. The memory
/// backend's handles keep none and refuse (Unsupported), so callers fall
/// back to the path.
#[test]
fn an_open_files_xattrs_follow_its_inode_not_its_name() {
    let (_top, tier) = posix();
    let create = OpenOptions {
        create: true,
        ..OpenOptions::default()
    };
    let file = tier.open(&p("f"), create).unwrap();
    tier.rename(&p("f"), &p("moved")).unwrap();
    tier.open(&p("f"), create).unwrap();
    file.set_xattr("user.k", b"v", XattrFlags::CreateOnly)
        .unwrap();
    assert_eq!(tier.get_xattr(&p("moved"), "user.k").unwrap(), b"v");
    let none = tier.get_xattr(&p("f"), "user.k").unwrap_err();
    assert_eq!(raw_os_error(&none), Some(ENODATA), "{none}");
    let again = file
        .set_xattr("user.k", b"w", XattrFlags::CreateOnly)
        .unwrap_err();
    assert_eq!(raw_os_error(&again), Some(EEXIST), "{again}");
    file.remove_xattr("user.k").unwrap();
    let gone = file.remove_xattr("user.k").unwrap_err();
    assert_eq!(raw_os_error(&gone), Some(ENODATA), "{gone}");

    let mem = MemBackend::new();
    let handle = mem.open(&p("f"), create).unwrap();
    let refused = handle
        .set_xattr("user.k", b"v", XattrFlags::Either)
        .unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::Unsupported, "{refused}");
}
