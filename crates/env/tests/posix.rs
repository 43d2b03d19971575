//! The POSIX backend: symbolic links under the root are never followed, a
//! bad root is refused, errors carry the OS error and the path.

use std::fs;
use std::io::ErrorKind;
use std::os::unix::fs::symlink;

use sluice_env::posix::PosixBackend;
use sluice_env::{raw_os_error, Backend, DirEntry, FileKind, OpenOptions, RelPath};

fn p(path: &str) -> RelPath {
    RelPath::new(path).unwrap()
}

const EXISTING: OpenOptions = OpenOptions {
    create: false,
    create_new: false,
    truncate: false,
    private: false,
};

#[test]
fn symlinks_out_of_the_root_are_refused() {
    let top = tempfile::tempdir().unwrap();
    let tier = top.path().join("tier");
    let outside = top.path().join("outside");
    fs::create_dir(&tier).unwrap();
    fs::create_dir(&outside).unwrap();
    fs::write(outside.join("secret"), b"secret").unwrap();
    symlink(&outside, tier.join("link")).unwrap();
    symlink(outside.join("secret"), tier.join("flink")).unwrap();
    symlink("/tmp", tier.join("tmp")).unwrap();
    let backend = PosixBackend::new(tier.clone()).unwrap();

    // Through a directory link.
    let error = backend.open(&p("link/secret"), EXISTING).unwrap_err();
    assert!(error.to_string().contains("symbolic link"), "{error}");
    assert!(error.to_string().contains("link/secret"), "{error}");
    assert!(backend.open(&p("link/new"), OpenOptions::CREATE).is_err());
    assert!(!outside.join("new").exists(), "created outside the root");
    assert!(backend
        .open(&p("tmp/sluice-escape"), OpenOptions::CREATE)
        .is_err());
    assert!(backend.create_dir(&p("link/dir")).is_err());
    assert!(!outside.join("dir").exists());
    assert!(backend.read_dir(&p("link")).is_err());
    assert!(backend.metadata(&p("link/secret")).is_err());
    assert!(backend.remove_file(&p("link/secret")).is_err());
    assert!(outside.join("secret").exists());
    assert!(backend.rename(&p("link/secret"), &p("stolen")).is_err());
    assert!(backend.sync_dir(&p("link")).is_err());

    // A link to a file.
    let error = backend.open(&p("flink"), OpenOptions::CREATE).unwrap_err();
    assert_eq!(raw_os_error(&error), Some(40), "ELOOP: {error:?}");
    assert!(backend.metadata(&p("flink")).is_err());
    assert_eq!(fs::read(outside.join("secret")).unwrap(), b"secret");

    // A stat neither follows a link on the way nor leaves the root; a
    // trailing link is the link's own (lstat), and each failure says why.
    let stat_errno = |path: &str| raw_os_error(&backend.stat(&p(path)).unwrap_err());
    assert_eq!(stat_errno("link/secret"), Some(40), "ELOOP through a link");
    assert_eq!(stat_errno("link/missing"), Some(40), "ELOOP before ENOENT");
    assert_eq!(stat_errno("missing/x"), Some(2), "ENOENT");
    assert_eq!(
        backend.stat(&p("flink")).unwrap().kind,
        sluice_env::StatKind::Symlink
    );

    // Links are not listed.
    backend.open(&p("real"), OpenOptions::CREATE).unwrap();
    assert_eq!(stat_errno("real/x"), Some(20), "ENOTDIR under a file");
    assert_eq!(stat_errno("real-not"), Some(2), "ENOENT");
    assert_eq!(
        backend.read_dir(&RelPath::root()).unwrap(),
        vec![DirEntry {
            name: "real".to_string(),
            kind: FileKind::File,
        }]
    );
}

#[test]
fn the_root_must_be_an_existing_directory() {
    let top = tempfile::tempdir().unwrap();
    let error = PosixBackend::new(top.path().join("missing")).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::NotFound);
    assert!(error.to_string().contains("missing"), "{error}");
    fs::write(top.path().join("file"), b"").unwrap();
    let error = PosixBackend::new(top.path().join("file")).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::NotADirectory, "{error}");
    // A link as the root itself is the administrator's choice: followed.
    symlink(top.path(), top.path().join("root-link")).unwrap();
    let backend = PosixBackend::new(top.path().join("root-link")).unwrap();
    assert_eq!(backend.metadata(&p("file")).unwrap().kind, FileKind::File);
}

#[test]
fn data_lands_in_real_files_and_space_is_reported() {
    let top = tempfile::tempdir().unwrap();
    let backend = PosixBackend::new(top.path().to_path_buf()).unwrap();
    backend.create_dir(&p("d")).unwrap();
    let file = backend.open(&p("d/f"), OpenOptions::CREATE).unwrap();
    file.write_at(b"bytes", 3).unwrap();
    file.sync_data().unwrap();
    backend.sync_dir(&p("d")).unwrap();
    assert_eq!(fs::read(top.path().join("d/f")).unwrap(), b"\0\0\0bytes");
    let space = backend.space().unwrap();
    assert!(space.total_bytes > 0 && space.free_bytes <= space.total_bytes);
    assert!(backend
        .describe()
        .contains(&top.path().display().to_string()));
    let error = backend.open(&p("d/missing"), EXISTING).unwrap_err();
    let message = error.to_string();
    assert!(
        message.starts_with(&format!(
            "posix {}: open \"d/missing\": ",
            top.path().display()
        )),
        "{message}"
    );
}

/// Regression (data-path issue): names that are not UTF-8 were refused
/// (EINVAL) or left out of listings. Every name the OS accepts is held as
/// a string that maps back to its exact bytes.
#[test]
fn names_that_are_not_utf8_round_trip_through_the_backend() {
    use sluice_env::{name_from_os, name_to_os};
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let top = tempfile::tempdir().unwrap();
    let raw: &[u8] = b"caf\xe9-\xff\xfe";
    let pua = "\u{f7e9}-plain-\u{f700}";
    fs::write(top.path().join(OsStr::from_bytes(raw)), b"latin-1 name").unwrap();
    fs::write(top.path().join(pua), b"private use").unwrap();
    let backend = PosixBackend::new(top.path().to_path_buf()).unwrap();
    let listed: Vec<String> = backend
        .read_dir(&RelPath::root())
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    let held = name_from_os(OsStr::from_bytes(raw)).into_owned();
    assert!(listed.contains(&held), "{listed:?}");
    assert!(
        listed.contains(&name_from_os(OsStr::new(pua)).into_owned()),
        "{listed:?}"
    );
    for name in &listed {
        let file = backend.open(&p(name), EXISTING).unwrap();
        let mut buf = vec![0u8; 64];
        let n = file.read_at(&mut buf, 0).unwrap();
        assert!(n > 0, "{name:?} reads");
    }
    // Made through the backend: the OS gets the exact bytes.
    let made: &[u8] = b"\x80\x81 made";
    let name = name_from_os(OsStr::from_bytes(made)).into_owned();
    backend.open(&p(&name), OpenOptions::CREATE).unwrap();
    assert!(top.path().join(OsStr::from_bytes(made)).exists());
    assert_eq!(name_to_os(&name).as_bytes(), made);
    backend.remove_file(&p(&name)).unwrap();
    assert!(!top.path().join(OsStr::from_bytes(made)).exists());
}

/// Issue 19: the fast tier's own files held other users' data 0644 (0666
/// under `umask 000`). Private files are 0600 and private directories
/// 0700; an older, wider private file is narrowed when opened; ordinary
/// files keep 0644 less the umask.
#[test]
fn private_files_and_directories_are_for_the_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let backend = PosixBackend::new(dir.path().to_path_buf()).unwrap();
    let mode = |name: &str| {
        fs::symlink_metadata(dir.path().join(name))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777
    };
    backend.create_private_dir(&p("log")).unwrap();
    assert_eq!(mode("log"), 0o700);
    let file = backend
        .open(&p("log/region-0000"), OpenOptions::CREATE.private())
        .unwrap();
    file.write_at(b"secret", 0).unwrap();
    assert_eq!(mode("log/region-0000"), 0o600);
    fs::write(dir.path().join("old"), b"x").unwrap();
    fs::set_permissions(dir.path().join("old"), fs::Permissions::from_mode(0o666)).unwrap();
    backend
        .open(&p("old"), OpenOptions::default().private())
        .unwrap();
    assert_eq!(mode("old"), 0o600);
    backend.open(&p("plain"), OpenOptions::CREATE).unwrap();
    assert_eq!(mode("plain") & 0o600, 0o600);
    assert!(backend.create_private_dir(&p("log")).is_err(), "exists");
}

const ENODEV: i32 = 19;

/// Issue 31: a root whose name leads to another directory (a lazily
/// unmounted file system, a directory replaced) is lost: every call is
/// refused with ENODEV saying what was found, and nothing more lands in
/// the directory no one reads. Putting the very directory back at the name
/// heals it.
#[test]
fn issue_31_a_replaced_root_is_lost_and_refuses_every_call_until_it_is_back() {
    let top = tempfile::tempdir().unwrap();
    let tier = top.path().join("tier");
    let away = top.path().join("away");
    fs::create_dir(&tier).unwrap();
    let backend = PosixBackend::new(tier.clone()).unwrap();
    let file = backend.open(&p("f"), OpenOptions::CREATE).unwrap();
    file.write_at(b"before", 0).unwrap();
    backend.check_root().unwrap();
    assert!(backend.health().is_healthy());

    fs::rename(&tier, &away).unwrap();
    fs::create_dir(&tier).unwrap();
    let error = backend.check_root().unwrap_err();
    assert_eq!(raw_os_error(&error), Some(ENODEV), "{error}");
    assert!(
        error
            .to_string()
            .contains("no longer the directory sluice opened"),
        "{error}"
    );
    assert_eq!(backend.health().name(), "lost");
    let refused = |result: std::io::Result<()>, what: &str| {
        let error = result.expect_err(what);
        assert_eq!(raw_os_error(&error), Some(ENODEV), "{what}: {error}");
        assert!(
            error.to_string().contains("refused, the tier is lost"),
            "{what}: {error}"
        );
    };
    refused(
        backend.open(&p("g"), OpenOptions::CREATE).map(drop),
        "create",
    );
    refused(backend.open(&p("f"), EXISTING).map(drop), "open");
    refused(backend.metadata(&p("f")).map(drop), "metadata");
    refused(backend.read_dir(&RelPath::root()).map(drop), "read_dir");
    refused(backend.create_dir(&p("d")), "mkdir");
    refused(backend.sync_dir(&RelPath::root()), "sync_dir");
    refused(backend.space().map(drop), "statvfs");
    refused(file.write_at(b"after", 0), "write through an open file");
    refused(file.sync_data(), "sync through an open file");
    let mut buf = [0u8; 6];
    refused(
        file.read_at(&mut buf, 0).map(drop),
        "read through an open file",
    );
    assert!(!away.join("g").exists() && !tier.join("g").exists());
    assert_eq!(fs::read(away.join("f")).unwrap(), b"before");

    // The very directory back at the name: healthy, calls go through.
    fs::remove_dir(&tier).unwrap();
    fs::rename(&away, &tier).unwrap();
    backend.check_root().unwrap();
    assert!(backend.health().is_healthy());
    file.write_at(b"after!", 0).unwrap();
    file.sync_data().unwrap();
    assert_eq!(fs::read(tier.join("f")).unwrap(), b"after!");

    // A removed root is lost too, and names the cause.
    fs::rename(&tier, &away).unwrap();
    let error = backend.check_root().unwrap_err();
    assert!(error.to_string().contains("no longer exists"), "{error}");
}

/// Issue 31: a sync answers success only where the tier's name leads. The
/// root replaced between a write and its sync makes the sync fail (ENODEV)
/// without anyone having looked at the root before: the sync looks.
#[test]
fn issue_31_a_sync_after_the_root_was_replaced_fails() {
    let top = tempfile::tempdir().unwrap();
    let tier = top.path().join("tier");
    fs::create_dir(&tier).unwrap();
    let backend = PosixBackend::new(tier.clone()).unwrap();
    let file = backend.open(&p("f"), OpenOptions::CREATE).unwrap();
    file.write_at(b"bytes", 0).unwrap();
    fs::rename(&tier, top.path().join("away")).unwrap();
    fs::create_dir(&tier).unwrap();
    let error = file.sync_data().unwrap_err();
    assert_eq!(raw_os_error(&error), Some(ENODEV), "{error}");
    assert_eq!(backend.health().name(), "lost");
    let error = backend.sync_dir(&RelPath::root()).unwrap_err();
    assert_eq!(raw_os_error(&error), Some(ENODEV), "{error}");
}
