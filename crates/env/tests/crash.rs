//! The crash-test backend: what survives a crash is exactly what was synced
//! (data by `sync_data`, names by `sync_dir`), armed crashes fire at the
//! chosen sync point, stale handles fail, torn writes keep a prefix.

use std::io::ErrorKind;
use std::sync::Arc;

use proptest::prelude::*;

use sluice_env::crash::CrashBackend;
use sluice_env::{Backend, BackendFile, FileKind, OpenOptions, RelPath};

fn p(path: &str) -> RelPath {
    RelPath::new(path).unwrap()
}

const EXISTING: OpenOptions = OpenOptions {
    create: false,
    create_new: false,
    truncate: false,
    private: false,
};

fn contents(backend: &dyn Backend, path: &str) -> Option<Vec<u8>> {
    let file = match backend.open(&p(path), EXISTING) {
        Ok(file) => file,
        Err(error) if error.kind() == ErrorKind::NotFound => return None,
        Err(error) => panic!("{error}"),
    };
    let mut buf = vec![0u8; file.len().unwrap() as usize];
    assert_eq!(file.read_at(&mut buf, 0).unwrap(), buf.len());
    Some(buf)
}

#[test]
fn unsynced_writes_vanish_synced_ones_stay() {
    let backend = CrashBackend::new();
    let file = backend.open(&p("f"), OpenOptions::CREATE).unwrap();
    backend.sync_dir(&RelPath::root()).unwrap();
    file.write_at(b"synced", 0).unwrap();
    file.sync_data().unwrap();
    file.write_at(b" lost", 6).unwrap();
    file.write_at(b"S", 0).unwrap();
    backend.crash();
    assert_eq!(contents(&backend, "f").unwrap(), b"synced");
    // The old handle fails rather than showing reverted bytes.
    let error = file.read_at(&mut [0u8; 4], 0).unwrap_err();
    assert!(error.to_string().contains("before a crash"), "{error}");
    assert!(file.write_at(b"x", 0).is_err());
    assert!(file.sync_data().is_err());
    assert!(file.len().is_err());
    assert_eq!(backend.crashes(), 1);
}

#[test]
fn unsynced_length_changes_revert() {
    let backend = CrashBackend::new();
    let file = backend.open(&p("f"), OpenOptions::CREATE).unwrap();
    backend.sync_dir(&RelPath::root()).unwrap();
    file.write_at(b"0123456789", 0).unwrap();
    file.sync_data().unwrap();
    file.set_len(3).unwrap();
    backend.crash();
    assert_eq!(contents(&backend, "f").unwrap(), b"0123456789");
}

#[test]
fn names_need_a_directory_sync() {
    let backend = CrashBackend::new();
    backend.create_dir(&p("d")).unwrap();
    backend.sync_dir(&RelPath::root()).unwrap();
    // Names made durable by syncing d (and d/sub for x).
    let empty = backend.open(&p("d/empty"), OpenOptions::CREATE).unwrap();
    backend.create_dir(&p("d/sub")).unwrap();
    backend.open(&p("d/sub/x"), OpenOptions::CREATE).unwrap();
    backend.sync_dir(&p("d/sub")).unwrap();
    backend.sync_dir(&p("d")).unwrap();
    // Data synced, name not (syncing another directory does not help): the
    // file vanishes.
    let lost = backend.open(&p("d/lost"), OpenOptions::CREATE).unwrap();
    lost.write_at(b"data", 0).unwrap();
    lost.sync_data().unwrap();
    backend.sync_dir(&RelPath::root()).unwrap();
    // Name synced, data not: the file is there, empty.
    empty.write_at(b"unsynced", 0).unwrap();
    backend.crash();
    let names: Vec<String> = backend
        .read_dir(&p("d"))
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(names, ["empty", "sub"]);
    assert_eq!(contents(&backend, "d/empty").unwrap(), b"");
    assert_eq!(contents(&backend, "d/sub/x").unwrap(), b"");
}

#[test]
fn unsynced_create_remove_rename_and_mkdir_revert() {
    let backend = CrashBackend::new();
    let keep = backend.open(&p("keep"), OpenOptions::CREATE).unwrap();
    keep.write_at(b"kept", 0).unwrap();
    keep.sync_data().unwrap();
    backend.create_dir(&p("dir")).unwrap();
    backend.sync_dir(&RelPath::root()).unwrap();
    backend.remove_file(&p("keep")).unwrap();
    backend.open(&p("new"), OpenOptions::CREATE).unwrap();
    backend.create_dir(&p("newdir")).unwrap();
    backend.rename(&p("dir"), &p("dir2")).unwrap();
    backend.crash();
    assert_eq!(contents(&backend, "keep").unwrap(), b"kept");
    assert_eq!(contents(&backend, "new"), None);
    assert_eq!(
        backend.metadata(&p("dir")).unwrap().kind,
        FileKind::Dir,
        "rename not synced"
    );
    assert!(backend.metadata(&p("dir2")).is_err());
    assert!(backend.metadata(&p("newdir")).is_err());
}

#[test]
fn a_synced_directory_rename_keeps_the_directory_contents() {
    let backend = CrashBackend::new();
    backend.create_dir(&p("a")).unwrap();
    let file = backend.open(&p("a/f"), OpenOptions::CREATE).unwrap();
    file.write_at(b"x", 0).unwrap();
    file.sync_data().unwrap();
    backend.sync_dir(&p("a")).unwrap();
    backend.sync_dir(&RelPath::root()).unwrap();
    backend.rename(&p("a"), &p("b")).unwrap();
    backend.sync_dir(&RelPath::root()).unwrap();
    backend.crash();
    assert_eq!(contents(&backend, "b/f").unwrap(), b"x");
    assert!(backend.metadata(&p("a")).is_err());
}

#[test]
fn unlinked_open_file_keeps_its_data_until_the_crash() {
    let backend = CrashBackend::new();
    let file = backend.open(&p("f"), OpenOptions::CREATE).unwrap();
    backend.sync_dir(&RelPath::root()).unwrap();
    file.write_at(b"abc", 0).unwrap();
    file.sync_data().unwrap();
    backend.remove_file(&p("f")).unwrap();
    backend.sync_dir(&RelPath::root()).unwrap();
    let mut buf = [0u8; 3];
    assert_eq!(file.read_at(&mut buf, 0).unwrap(), 3);
    assert_eq!(&buf, b"abc");
    backend.crash();
    assert_eq!(contents(&backend, "f"), None);
}

/// The workload of the sync-point tests; returns the first error.
fn workload(backend: &CrashBackend) -> std::io::Result<()> {
    let file = backend.open(&p("f"), OpenOptions::CREATE)?;
    file.write_at(b"one", 0)?;
    backend.sync_dir(&RelPath::root())?; // 1: name "f"
    file.sync_data()?; // 2: "one"
    file.write_at(b"two", 3)?;
    file.sync_data()?; // 3: "onetwo"
    backend.rename(&p("f"), &p("g"))?;
    backend.sync_dir(&RelPath::root())?; // 4: name "g"
    Ok(())
}

/// (path, contents) after a crash once sync points `1..=synced` took effect.
fn expected_after(synced: u64) -> (&'static str, Option<&'static [u8]>) {
    match synced {
        0 => ("f", None),
        1 => ("f", Some(b"")),
        2 => ("f", Some(b"one")),
        3 => ("f", Some(b"onetwo")),
        _ => ("g", Some(b"onetwo")),
    }
}

#[test]
fn crash_at_every_sync_point() {
    let counting = CrashBackend::new();
    workload(&counting).unwrap();
    let points = counting.sync_points();
    assert_eq!(points, 4);
    for n in 1..=points {
        for after in [false, true] {
            let backend = CrashBackend::new();
            if after {
                backend.crash_after(n);
            } else {
                backend.crash_at(n);
            }
            let error = workload(&backend).expect_err("the armed crash fires");
            assert!(
                error.to_string().contains(&format!("sync point {n}")),
                "{error}"
            );
            assert_eq!(backend.sync_points(), n, "the crash stops at point {n}");
            assert_eq!(backend.crashed_at(), Some(n));
            // Down until restarted: nothing can change the crashed state.
            let down = backend.open(&p("other"), OpenOptions::CREATE).unwrap_err();
            assert!(down.to_string().contains("restart"), "{down}");
            backend.restart();
            let synced = if after { n } else { n - 1 };
            let (path, expected) = expected_after(synced);
            assert_eq!(
                contents(&backend, path).as_deref(),
                expected,
                "crash {} sync point {n}",
                if after { "after" } else { "at" }
            );
            if path == "g" {
                assert_eq!(contents(&backend, "f"), None);
            }
        }
    }
}

/// A sync of a missing directory fails, and is a sync point all the
/// same: a crash armed at or after it fires there.
#[test]
fn a_failed_directory_sync_is_a_sync_point_a_crash_fires_at() {
    for after in [false, true] {
        let backend = CrashBackend::new();
        match after {
            true => backend.crash_after(1),
            false => backend.crash_at(1),
        }
        let error = backend.sync_dir(&p("gone")).unwrap_err();
        assert!(error.to_string().contains("sync point 1"), "{error}");
        assert_eq!(backend.crashed_at(), Some(1));
    }
    let backend = CrashBackend::new();
    let error = backend.sync_dir(&p("gone")).unwrap_err();
    assert_eq!(error.kind(), std::io::ErrorKind::NotFound, "{error}");
    assert_eq!((backend.sync_points(), backend.crashed_at()), (1, None));
}

#[test]
fn stale_handles_fail_after_an_armed_crash_and_restart() {
    let backend = CrashBackend::new();
    let file = backend.open(&p("f"), OpenOptions::CREATE).unwrap();
    backend.crash_at(1);
    assert!(file.sync_data().is_err());
    backend.restart();
    let error = file.write_at(b"x", 0).unwrap_err();
    assert!(error.to_string().contains("before a crash"), "{error}");
    // The backend works again; no file, as its name was never synced.
    assert_eq!(contents(&backend, "f"), None);
    backend
        .open(&p("f"), OpenOptions::CREATE)
        .unwrap()
        .write_at(b"y", 0)
        .unwrap();
    // Disarmed crashes do not fire.
    backend.crash_at(backend.sync_points() + 1);
    backend.disarm();
    backend.sync_dir(&RelPath::root()).unwrap();
    assert_eq!(backend.crashed_at(), None);
}

#[test]
fn a_halt_stops_the_tier_at_once_with_or_without_the_unsynced_state() {
    for power_cut in [false, true] {
        let backend = CrashBackend::new();
        let file = backend.open(&p("f"), OpenOptions::CREATE).unwrap();
        backend.sync_dir(&RelPath::root()).unwrap();
        file.write_at(b"synced", 0).unwrap();
        file.sync_data().unwrap();
        file.write_at(b"SYN", 0).unwrap();
        backend.halt(power_cut);
        // Down: the dead process changes nothing, by handle or by path.
        assert!(file.write_at(b"x", 0).is_err());
        assert!(backend.open(&p("g"), OpenOptions::CREATE).is_err());
        assert!(backend.crashed_at().is_some());
        backend.restart();
        assert!(file.write_at(b"x", 0).is_err(), "a handle from before");
        let want: &[u8] = if power_cut { b"synced" } else { b"SYNced" };
        assert_eq!(
            contents(&backend, "f").as_deref(),
            Some(want),
            "power cut {power_cut}"
        );
    }
}

/// Record length of [`torn_run`]: longer than a sector, so every record can
/// tear (a write within one sector cannot).
const RECORD: usize = 700;

/// Appends 20 records of [`RECORD`] bytes after a synced header, then
/// crashes with torn writes on; returns what survived.
fn torn_run(seed: u64) -> Vec<u8> {
    let backend = CrashBackend::new();
    let file = backend.open(&p("log"), OpenOptions::CREATE).unwrap();
    file.write_at(b"HEADER", 0).unwrap();
    file.sync_data().unwrap();
    backend.sync_dir(&RelPath::root()).unwrap();
    for i in 0..20u8 {
        file.write_at(&[i; RECORD], 6 + u64::from(i) * RECORD as u64)
            .unwrap();
    }
    backend.set_torn_writes(true);
    backend.set_seed(seed);
    backend.crash();
    contents(&backend, "log").unwrap()
}

#[test]
fn torn_writes_keep_a_prefix_of_the_unsynced_tail() {
    let full: Vec<u8> = b"HEADER"
        .iter()
        .copied()
        .chain((0..20u8).flat_map(|i| [i; RECORD]))
        .collect();
    let mut partial_record = false;
    let mut lengths = Vec::new();
    for seed in 0..20 {
        let kept = torn_run(seed);
        assert!(
            kept.len() >= 6 && kept.len() <= full.len(),
            "{}",
            kept.len()
        );
        assert_eq!(kept[..], full[..kept.len()], "seed {seed}: not a prefix");
        partial_record |= !(kept.len() - 6).is_multiple_of(RECORD);
        lengths.push(kept.len());
        assert_eq!(torn_run(seed), kept, "seed {seed}: not reproducible");
    }
    assert!(partial_record, "no torn record in 20 seeds: {lengths:?}");
    lengths.sort_unstable();
    lengths.dedup();
    assert!(lengths.len() > 10, "prefixes should vary: {lengths:?}");

    // Off by default: the unsynced tail is gone entirely.
    let backend = CrashBackend::new();
    let file = backend.open(&p("log"), OpenOptions::CREATE).unwrap();
    backend.sync_dir(&RelPath::root()).unwrap();
    file.write_at(&[1; 100], 0).unwrap();
    backend.crash();
    assert_eq!(contents(&backend, "log").unwrap(), b"");
}

#[test]
fn torn_writes_tear_in_place_writes_of_preallocated_files() {
    let backend = CrashBackend::new();
    let file: Arc<dyn BackendFile> = backend.open(&p("region"), OpenOptions::CREATE).unwrap();
    file.set_len(3000).unwrap();
    file.sync_data().unwrap();
    backend.sync_dir(&RelPath::root()).unwrap();
    file.write_at(&[7; 2000], 0).unwrap();
    backend.set_torn_writes(true);
    backend.set_seed(3);
    backend.crash();
    let kept = contents(&backend, "region").unwrap();
    assert_eq!(kept.len(), 3000);
    let sevens = kept.iter().take_while(|&&b| b == 7).count();
    assert!(kept[sevens..].iter().all(|&b| b == 0));
    assert!(sevens < 2000, "seed 3 tears this write");
}

/// A write within one sector is written whole or not at all, whatever the
/// seed (a region's 64-byte header rewritten in place relies on it); one
/// across a sector boundary tears.
#[test]
fn torn_writes_never_tear_a_write_within_one_sector() {
    let mut torn_across = false;
    for seed in 0..64 {
        let backend = CrashBackend::new();
        let file: Arc<dyn BackendFile> = backend.open(&p("region"), OpenOptions::CREATE).unwrap();
        file.set_len(2048).unwrap();
        file.sync_data().unwrap();
        backend.sync_dir(&RelPath::root()).unwrap();
        file.write_at(&[1; 64], 0).unwrap();
        file.write_at(&[2; 64], 448).unwrap();
        file.write_at(&[3; 64], 480).unwrap();
        backend.set_torn_writes(true);
        backend.set_seed(seed);
        backend.crash();
        let kept = contents(&backend, "region").unwrap();
        let first = kept[..64].iter().filter(|&&b| b == 1).count();
        assert!(
            first == 0 || first == 64,
            "seed {seed}: {first} of 64 bytes"
        );
        let second = kept[448..480].iter().filter(|&&b| b == 2).count();
        assert!(
            second == 0 || second == 32,
            "seed {seed}: {second} of 32 bytes"
        );
        let third = kept[480..544].iter().filter(|&&b| b == 3).count();
        torn_across |= third > 0 && third < 64;
    }
    assert!(
        torn_across,
        "a write across a sector boundary tore in 64 seeds"
    );
}

#[test]
fn full_crash_backend_refuses_growth() {
    let backend = CrashBackend::with_capacity(10);
    let file = backend.open(&p("f"), OpenOptions::CREATE).unwrap();
    file.write_at(&[1; 10], 0).unwrap();
    let error = file.write_at(&[1], 10).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::StorageFull);
    assert_eq!(backend.space().unwrap().free_bytes, 0);
}

#[derive(Clone, Debug)]
enum Op {
    Write { offset: u64, data: Vec<u8> },
    SetLen(u64),
    Sync,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u64..3000, prop::collection::vec(any::<u8>(), 1..300))
            .prop_map(|(offset, data)| Op::Write { offset, data }),
        1 => (0u64..3000).prop_map(Op::SetLen),
        1 => Just(Op::Sync),
    ]
}

proptest! {
    /// After any sequence of writes, truncations and syncs, a crash leaves
    /// exactly the bytes of the last sync.
    #[test]
    fn a_crash_leaves_the_last_synced_bytes(ops in prop::collection::vec(op(), 1..30)) {
        let backend = CrashBackend::new();
        let file = backend.open(&p("f"), OpenOptions::CREATE).unwrap();
        backend.sync_dir(&RelPath::root()).unwrap();
        let mut current: Vec<u8> = Vec::new();
        let mut synced: Vec<u8> = Vec::new();
        for op in &ops {
            match op {
                Op::Write { offset, data } => {
                    file.write_at(data, *offset).unwrap();
                    let end = *offset as usize + data.len();
                    if current.len() < end {
                        current.resize(end, 0);
                    }
                    current[*offset as usize..end].copy_from_slice(data);
                }
                Op::SetLen(len) => {
                    file.set_len(*len).unwrap();
                    current.resize(*len as usize, 0);
                }
                Op::Sync => {
                    file.sync_data().unwrap();
                    synced = current.clone();
                }
            }
        }
        backend.crash();
        prop_assert_eq!(contents(&backend, "f").unwrap(), synced);
    }
}
