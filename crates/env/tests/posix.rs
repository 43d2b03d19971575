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

    // Links are not listed.
    backend.open(&p("real"), OpenOptions::CREATE).unwrap();
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
