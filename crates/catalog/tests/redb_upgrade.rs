//! A catalogue written by sluice before issue 21 (redb 2.6, file format v2)
//! opened by this one (redb 4): upgraded in place with every record kept,
//! or, when the upgrade cannot run, refused with the file unchanged.
//!
//! The fixture `fixtures/catalog-redb2.redb.gz` was written by
//! `RedbCatalog` at commit 41c9907 (redb 2.6.4); `fixtures/README.md` has
//! the program. It is gzipped: a redb-2 file is at least ~2.5 MiB of
//! mostly zeros.

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use sluice_catalog::{open, Catalog, CkptRecord, Failure, JobSpec, Location, MetaSpec};

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/catalog-redb2.redb.gz"
);

/// The fixture, unzipped to `dir/catalog.redb`; returns its path and bytes.
fn unpack(dir: &Path) -> (PathBuf, Vec<u8>) {
    let mut bytes = Vec::new();
    flate2::read::GzDecoder::new(std::fs::File::open(FIXTURE).unwrap())
        .read_to_end(&mut bytes)
        .unwrap();
    let path = dir.join("catalog.redb");
    std::fs::write(&path, &bytes).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    (path, bytes)
}

fn redb_spec(path: &Path) -> MetaSpec {
    MetaSpec::Redb {
        path: path.to_owned(),
    }
}

/// redb 4 itself refuses the file as format v2: the fixture really is an
/// old one, and an upgraded file really is not.
fn is_redb2(path: &Path) -> bool {
    match redb::Database::open(path) {
        Err(redb::DatabaseError::UpgradeRequired(2)) => true,
        Ok(_) => false,
        Err(e) => panic!("{}: {e}", path.display()),
    }
}

fn check_fixture_records(catalog: &dyn Catalog) {
    assert_eq!(
        catalog.jobs().unwrap(),
        vec![
            JobSpec {
                id: "climate".into(),
                period_s: 600,
                ckpt_bytes: 64 << 30,
                failure: Failure::Nodes(128),
                versions: 2,
                glob: "climate/**/ckpt-*".into(),
                files: 4,
            },
            JobSpec {
                id: "md".into(),
                period_s: 3600,
                ckpt_bytes: 1 << 30,
                failure: Failure::MtbfSecs(86_400),
                versions: 1,
                glob: "md/*.chk".into(),
                files: 1,
            },
        ]
    );
    assert_eq!(
        catalog.ckpts().unwrap(),
        vec![
            CkptRecord {
                path: "climate/run1/ckpt-0".into(),
                job: "climate".into(),
                version: 1,
                bytes: 16 << 30,
                location: Location::Staged,
                staged_id: Some(7),
                created_unix_ns: 1_700_000_000_123_456_789,
                node: Some("node-a-0123abcd".into()),
            },
            CkptRecord {
                path: "md/2.chk".into(),
                job: "md".into(),
                version: 2,
                bytes: 1 << 30,
                location: Location::Cached,
                staged_id: None,
                created_unix_ns: 1_700_000_002_000_000_000,
                node: None,
            },
        ]
    );
    let periods: Vec<_> = catalog
        .periods(10)
        .unwrap()
        .iter()
        .map(|p| (p.index, p.written_bytes))
        .collect();
    assert_eq!(periods, vec![(10, 10_000), (11, 11_000), (12, 12_000)]);
    assert_eq!(catalog.jobs_generation().unwrap(), 2);
}

#[test]
fn issue_21_a_redb2_catalogue_is_upgraded_in_place_keeping_every_record() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = unpack(dir.path());
    assert!(is_redb2(&path), "the fixture must be a redb-2 file");

    let catalog = open(&redb_spec(&path)).unwrap();
    check_fixture_records(catalog.as_ref());
    // The counters go on where redb 2 left them: "md" issued 2, the open
    // version 1 of "climate" has had 2 of its 4 files.
    assert_eq!(catalog.next_version("md").unwrap(), 3);
    assert_eq!(
        catalog
            .join_version("climate", 4, 300_000, 1_700_000_002_000)
            .unwrap(),
        1
    );
    assert_eq!(
        catalog
            .join_version("climate", 4, 300_000, 1_700_000_003_000)
            .unwrap(),
        1
    );
    assert_eq!(
        catalog
            .join_version("climate", 4, 300_000, 1_700_000_004_000)
            .unwrap(),
        2,
        "the fifth file opens version 2"
    );
    drop(catalog);

    assert!(!is_redb2(&path), "the file is format v3 now");
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, vec!["catalog.redb"], "no upgrade copy is left");
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);

    // Opened again: no second upgrade, the writes after the upgrade kept.
    let catalog = open(&redb_spec(&path)).unwrap();
    check_fixture_records(catalog.as_ref());
    assert_eq!(catalog.next_version("md").unwrap(), 4);
}

#[test]
fn issue_21_a_redb2_catalogue_that_cannot_be_upgraded_is_refused_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let (path, bytes) = unpack(dir.path());
    // The copy cannot be created: its name is taken by a non-empty
    // directory (which the clean-up cannot remove either).
    let copy = dir.path().join("catalog.redb.v3-upgrade");
    std::fs::create_dir(&copy).unwrap();
    std::fs::write(copy.join("keep"), b"x").unwrap();

    let msg = open(&redb_spec(&path)).err().unwrap().to_string();
    assert!(
        msg.starts_with(&format!("cannot open redb catalogue {}", path.display())),
        "{msg}"
    );
    assert!(msg.contains("written by redb 2"), "{msg}");
    assert!(msg.contains("the file is unchanged"), "{msg}");
    assert!(msg.contains(&copy.display().to_string()), "{msg}");
    assert_eq!(std::fs::read(&path).unwrap(), bytes, "not one byte changed");
    assert!(is_redb2(&path));

    // The cause gone, the next open upgrades it.
    std::fs::remove_dir_all(&copy).unwrap();
    check_fixture_records(open(&redb_spec(&path)).unwrap().as_ref());
    assert!(!is_redb2(&path));
}

#[test]
fn issue_21_a_redb2_catalogue_open_elsewhere_is_refused_not_upgraded() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = unpack(dir.path());
    // Another process still on redb 2 (here: this one) has it open.
    let holder = redb2::Database::open(&path).unwrap();
    let msg = open(&redb_spec(&path)).err().unwrap().to_string();
    assert!(msg.contains(&path.display().to_string()), "{msg}");
    assert!(msg.contains("already open"), "{msg}");
    drop(holder);
    assert!(is_redb2(&path));
    check_fixture_records(open(&redb_spec(&path)).unwrap().as_ref());
}
