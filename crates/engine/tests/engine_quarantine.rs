//! Recovery never overwrites the future (issue 20, docs/crash-consistency.md):
//! bytes buffered when the engine stopped are not replayed over a capacity
//! file that was deleted, replaced or modified after it last ran; they are
//! quarantined on the fast tier instead, listed and restorable.

mod engine_support;

use engine_support::small_engine;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use sluice_engine::{
    quarantine_find, quarantine_list, quarantine_remove, quarantine_restore, Engine,
};
use sluice_env::memory::MemBackend;
use sluice_env::{Backend, OpenOptions, RelPath, SetAttr, TimeSet};
use sluice_policy::redirector::RedirectPolicy;

fn open(fast: &Arc<dyn Backend>, capacity: &Arc<dyn Backend>) -> Engine {
    small_engine(fast, capacity, RedirectPolicy::FastAll)
}

fn tiers() -> (Arc<dyn Backend>, Arc<dyn Backend>) {
    (Arc::new(MemBackend::new()), Arc::new(MemBackend::new()))
}

/// `f` holds "old" on the capacity tier and "NEW!" buffered at 0, fsynced;
/// the engine stops without a drain (as a kill -9 leaves it).
fn stop_with_buffered_bytes(fast: &Arc<dyn Backend>, capacity: &Arc<dyn Backend>) -> RelPath {
    let f = RelPath::new("f").unwrap();
    let engine = open(fast, capacity);
    let id = engine.create(&f).unwrap();
    engine.write(id, 0, b"NEW!").unwrap();
    engine.fsync(id).unwrap();
    assert!(engine.buffered_bytes() > 0);
    engine.release(id);
    engine.close();
    f
}

fn capacity_text(capacity: &Arc<dyn Backend>, path: &RelPath) -> Vec<u8> {
    let file = capacity.open(path, OpenOptions::default()).unwrap();
    let mut buf = vec![0u8; file.len().unwrap() as usize];
    file.read_at(&mut buf, 0).unwrap();
    buf
}

fn write_capacity(capacity: &Arc<dyn Backend>, path: &RelPath, text: &[u8]) {
    let file = capacity.open(path, OpenOptions::CREATE).unwrap();
    file.set_len(0).unwrap();
    file.write_at(text, 0).unwrap();
}

#[test]
fn issue_20_a_file_deleted_while_the_node_was_down_is_not_resurrected() {
    let (fast, capacity) = tiers();
    let f = stop_with_buffered_bytes(&fast, &capacity);
    capacity.remove_file(&f).unwrap();
    let engine = open(&fast, &capacity);
    assert!(
        capacity.metadata(&f).is_err(),
        "recovery recreated the deleted file"
    );
    assert_eq!(engine.stats().quarantined_files, 1);
    let entries = engine.quarantined().unwrap();
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_eq!(entries[0].path, "f");
    assert!(entries[0].reason.contains("deleted"), "{entries:?}");
    assert_eq!(entries[0].extents, vec![(0, 4)]);
    let data = RelPath::new(&format!("quarantine/{}/data", entries[0].name)).unwrap();
    assert_eq!(capacity_text(&fast, &data), b"NEW!");
    engine.drain().unwrap();
    assert!(capacity.metadata(&f).is_err(), "the drain recreated it");
    engine.close();
    // A second recovery (nothing left in the log) keeps the one entry.
    let engine = open(&fast, &capacity);
    assert_eq!(engine.quarantined().unwrap().len(), 1);
    engine.close();
    // Restored into a file whose other bytes are kept, then removed.
    let name = &entries[0].name;
    let entry = quarantine_find(fast.as_ref(), name).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let to_path = dir.path().join("restored");
    std::fs::write(&to_path, b"old-old-").unwrap();
    let to = std::fs::OpenOptions::new()
        .write(true)
        .open(&to_path)
        .unwrap();
    assert_eq!(quarantine_restore(fast.as_ref(), &entry, &to).unwrap(), 4);
    assert_eq!(std::fs::read(&to_path).unwrap(), b"NEW!old-");
    quarantine_remove(fast.as_ref(), name).unwrap();
    assert!(quarantine_list(fast.as_ref()).unwrap().is_empty());
    let missing = quarantine_find(fast.as_ref(), name).unwrap_err();
    assert!(
        missing.to_string().contains("sluice quarantine list"),
        "{missing}"
    );
}

#[test]
fn issue_20_a_file_replaced_while_the_node_was_down_keeps_the_new_file() {
    let (fast, capacity) = tiers();
    let f = stop_with_buffered_bytes(&fast, &capacity);
    // Another node replaces it: a new file renamed over the name.
    let tmp = RelPath::new("f.tmp").unwrap();
    write_capacity(&capacity, &tmp, b"theirs");
    capacity.rename(&tmp, &f).unwrap();
    let engine = open(&fast, &capacity);
    engine.drain().unwrap();
    assert_eq!(capacity_text(&capacity, &f), b"theirs");
    let entries = engine.quarantined().unwrap();
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert!(entries[0].reason.contains("replaced"), "{entries:?}");
}

#[test]
fn issue_20_a_file_modified_while_the_node_was_down_is_not_overwritten() {
    let (fast, capacity) = tiers();
    let f = stop_with_buffered_bytes(&fast, &capacity);
    // Another node rewrites it in place, later than this one last ran.
    write_capacity(&capacity, &f, b"theirs");
    capacity
        .set_attr(
            &f,
            &SetAttr {
                mtime: Some(TimeSet::At(SystemTime::now() + Duration::from_secs(60))),
                ..SetAttr::default()
            },
        )
        .unwrap();
    let engine = open(&fast, &capacity);
    engine.drain().unwrap();
    assert_eq!(capacity_text(&capacity, &f), b"theirs");
    let entries = engine.quarantined().unwrap();
    assert!(entries[0].reason.contains("modified"), "{entries:?}");
}

#[test]
fn issue_20_an_untouched_file_is_replayed_as_before() {
    let (fast, capacity) = tiers();
    let f = stop_with_buffered_bytes(&fast, &capacity);
    let engine = open(&fast, &capacity);
    engine.drain().unwrap();
    assert_eq!(capacity_text(&capacity, &f), b"NEW!");
    assert_eq!(engine.stats().quarantined_files, 0);
    assert!(engine.quarantined().unwrap().is_empty());
}
