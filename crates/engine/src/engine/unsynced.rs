//! The directory entries the engine made and no sync has made durable
//! yet: names it created, renamed or recovered, and directories it made. A file's fsync syncs the
//! directories its name needs ("durable with its name"), and a clean stop
//! syncs all of them (docs/crash-consistency.md, "create" and "rename").
//!
//! A name renamed into another directory needs two: its new parent, which
//! gains the entry, and its old parent, which still holds the old entry
//! until synced. Without the second, a power cut of the capacity tier
//! after the fsync could bring the file back at its old name only (the
//! seeded harness, seeds 1807 and 3977: the log's records for it then
//! quarantined as "deleted").
//!
//! A rename finds the names under its source by a range of the ordered
//! names, and looks at the old parents only when one of them is under the
//! source: every rename runs under the engine lock, and a scan of up to
//! [`super::flush`]'s 65,536 owed names per rename made a job that writes
//! temporary files and renames them slow down as the names piled up
//! (with the mount's inode table, scanned the same way: `PathMap`).
//!
//! INVARIANT: `old_parents` counts, per directory, the owed names whose
//! `old_parents` hold it; every change of a name's old parents goes
//! through [`UnsyncedNames::take`] and [`UnsyncedNames::put`].

use std::collections::{BTreeMap, BTreeSet};
use std::io;

use sluice_env::{Backend, RelPath};

/// Names owed a sync of their directory entries, each with the old
/// parents its renames left an entry in (its own parent is implied).
#[derive(Debug, Default)]
pub(super) struct UnsyncedNames {
    /// Ordered, so the names under a directory are one range.
    names: BTreeMap<RelPath, Owed>,
    /// Directories named as an old parent, with how many names do (module
    /// invariant).
    old_parents: BTreeMap<RelPath, usize>,
    /// Stamps each change of an entry, so a sync that ran without the
    /// engine lock settles only the entries it saw ([`UnsyncedNames::settle`]).
    next_stamp: u64,
}

#[derive(Debug, Default)]
struct Owed {
    old_parents: BTreeSet<RelPath>,
    stamp: u64,
}

/// What a sync must cover for one name: the directories, in the order to
/// sync them, and the entries (with their stamps) it settles.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct DirSync {
    pub(super) dirs: Vec<RelPath>,
    entries: Vec<(RelPath, u64)>,
}

impl DirSync {
    pub(super) fn is_empty(&self) -> bool {
        self.dirs.is_empty()
    }
}

fn parent(path: &RelPath) -> RelPath {
    path.parent().unwrap_or_else(RelPath::root)
}

/// Sync `dir` on `capacity`; if it is gone (removed since the names were
/// owed, or renamed by another node), the nearest ancestor still there:
/// that one holds the removal, so the entries the sync was for (the old
/// name a rename left) cannot come back after a power cut either. Before,
/// an fsync of a file renamed out of a directory then removed failed with
/// ENOENT (the FUSE layer's reference model, `volume_model.rs`).
pub(super) fn sync_dir_or_ancestor(capacity: &dyn Backend, dir: &RelPath) -> io::Result<()> {
    let mut dir = dir.clone();
    loop {
        match capacity.sync_dir(&dir) {
            Err(e) if e.kind() == io::ErrorKind::NotFound && !dir.is_root() => dir = parent(&dir),
            done => return done,
        }
    }
}

impl UnsyncedNames {
    fn stamp(&mut self) -> u64 {
        self.next_stamp += 1;
        self.next_stamp
    }

    /// `path` was just made (a create, a file recovered from the log, or a
    /// directory): its parent's entry for it is owed a sync.
    pub(super) fn created(&mut self, path: &RelPath) {
        let stamp = self.stamp();
        self.names.entry(path.clone()).or_default().stamp = stamp;
    }

    /// `from` was renamed to `to` (a file or a directory): names under
    /// `from` move with it, `to`'s entry is owed a sync, and so is the
    /// old entry in `from`'s parent if that is another directory.
    pub(super) fn renamed(&mut self, from: &RelPath, to: &RelPath) {
        if from == to {
            return;
        }
        let moved: Vec<RelPath> = self
            .names
            .range(from.subtree())
            .map(|(path, _)| path)
            .filter(|path| path.is_within(from))
            .cloned()
            .collect();
        let mut owed_by_from = None;
        for path in moved {
            let owed = self.take(&path).expect("listed above");
            let new = path.rebase(from, to).expect("checked above");
            if path == *from {
                owed_by_from = Some(owed);
            } else {
                self.put(new, owed);
            }
        }
        // An old parent inside a renamed directory is the same directory
        // at its new path.
        if self
            .old_parents
            .range(from.subtree())
            .any(|(dir, _)| dir.is_within(from))
        {
            let affected: Vec<RelPath> = self
                .names
                .iter()
                .filter(|(_, owed)| owed.old_parents.iter().any(|dir| dir.is_within(from)))
                .map(|(path, _)| path.clone())
                .collect();
            for path in affected {
                let mut owed = self.take(&path).expect("listed above");
                owed.old_parents = std::mem::take(&mut owed.old_parents)
                    .into_iter()
                    .map(|dir| dir.rebase(from, to).unwrap_or(dir))
                    .collect();
                self.put(path, owed);
            }
        }
        let stamp = self.stamp();
        let mut owed = self.take(to).unwrap_or_default();
        owed.stamp = stamp;
        if let Some(old) = owed_by_from {
            owed.old_parents.extend(old.old_parents);
        }
        if parent(from) != parent(to) {
            owed.old_parents.insert(parent(from));
        }
        owed.old_parents.remove(&parent(to));
        self.put(to.clone(), owed);
    }

    /// Remove `path`'s entry, uncounting its old parents.
    fn take(&mut self, path: &RelPath) -> Option<Owed> {
        let owed = self.names.remove(path)?;
        for dir in &owed.old_parents {
            if let Some(count) = self.old_parents.get_mut(dir) {
                *count -= 1;
                if *count == 0 {
                    self.old_parents.remove(dir);
                }
            }
        }
        Some(owed)
    }

    /// Enter `owed` for `path` in place of its entry if it has one,
    /// counting its old parents.
    fn put(&mut self, path: RelPath, owed: Owed) {
        self.take(&path);
        for dir in &owed.old_parents {
            *self.old_parents.entry(dir.clone()).or_default() += 1;
        }
        self.names.insert(path, owed);
    }

    /// `path` was unlinked: nothing is owed for it any more.
    pub(super) fn removed(&mut self, path: &RelPath) {
        self.take(path);
    }

    /// The directories an fsync of the file at `path` must sync for its
    /// name to be durable: for `path` and each of its ancestors that is
    /// owed (a renamed directory above it), its parent and then the old
    /// parents its renames left. Empty if nothing is owed.
    pub(super) fn for_path(&self, path: &RelPath) -> DirSync {
        let mut sync = DirSync::default();
        if self.names.is_empty() {
            return sync;
        }
        let mut at = Some(path.clone());
        while let Some(name) = at {
            if let Some(owed) = self.names.get(&name) {
                let dirs = std::iter::once(parent(&name)).chain(owed.old_parents.iter().cloned());
                for dir in dirs {
                    if !sync.dirs.contains(&dir) {
                        sync.dirs.push(dir);
                    }
                }
                sync.entries.push((name.clone(), owed.stamp));
            }
            at = name.parent();
        }
        sync
    }

    /// Every directory owed a sync, sorted (a clean stop syncs them all).
    pub(super) fn all(&self) -> DirSync {
        let mut dirs = BTreeSet::new();
        let mut entries = Vec::with_capacity(self.names.len());
        for (name, owed) in &self.names {
            dirs.insert(parent(name));
            dirs.extend(owed.old_parents.iter().cloned());
            entries.push((name.clone(), owed.stamp));
        }
        DirSync {
            dirs: dirs.into_iter().collect(),
            entries,
        }
    }

    /// The directories of `sync` were synced: its entries are settled,
    /// unless changed since it was taken (a rename or create of the same
    /// name meanwhile owes a sync of its own).
    pub(super) fn settle(&mut self, sync: &DirSync) {
        for (name, stamp) in &sync.entries {
            if self
                .names
                .get(name)
                .is_some_and(|owed| owed.stamp == *stamp)
            {
                self.take(name);
            }
        }
    }

    pub(super) fn len(&self) -> usize {
        self.names.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> RelPath {
        RelPath::new(s).unwrap()
    }

    fn dirs(sync: &DirSync) -> Vec<&str> {
        sync.dirs.iter().map(RelPath::as_str).collect()
    }

    #[test]
    fn a_created_name_owes_its_parent() {
        let mut owed = UnsyncedNames::default();
        owed.created(&p("d/a"));
        assert_eq!(dirs(&owed.for_path(&p("d/a"))), ["d"]);
        assert!(owed.for_path(&p("d/b")).is_empty());
        let sync = owed.for_path(&p("d/a"));
        owed.settle(&sync);
        assert!(owed.for_path(&p("d/a")).is_empty());
        assert_eq!(owed.len(), 0);
    }

    #[test]
    fn a_rename_across_directories_owes_the_new_parent_then_the_old() {
        let mut owed = UnsyncedNames::default();
        owed.renamed(&p("a"), &p("d/b"));
        assert_eq!(dirs(&owed.for_path(&p("d/b"))), ["d", ""]);
        // Within one directory, only that directory.
        let mut owed = UnsyncedNames::default();
        owed.renamed(&p("d/a"), &p("d/b"));
        assert_eq!(dirs(&owed.for_path(&p("d/b"))), ["d"]);
        // Back where it came from: the old entry is the new one.
        let mut owed = UnsyncedNames::default();
        owed.renamed(&p("a"), &p("d/b"));
        owed.renamed(&p("d/b"), &p("c"));
        assert_eq!(dirs(&owed.for_path(&p("c"))), ["", "d"]);
    }

    #[test]
    fn a_directory_rename_carries_names_and_old_parents_with_it() {
        let mut owed = UnsyncedNames::default();
        owed.renamed(&p("a"), &p("d/x/b"));
        owed.created(&p("d/y"));
        owed.renamed(&p("d"), &p("e"));
        // b's new entry is in e/x; its old one in the root; e's in the
        // root too, and d's old entry is in the root.
        assert_eq!(dirs(&owed.for_path(&p("e/x/b"))), ["e/x", ""]);
        assert_eq!(dirs(&owed.for_path(&p("e/y"))), ["e", ""]);
        assert!(owed.for_path(&p("d/y")).is_empty());
        // A file moved out of a directory later renamed: the old parent
        // follows the directory.
        let mut owed = UnsyncedNames::default();
        owed.renamed(&p("d/a"), &p("c"));
        owed.renamed(&p("d"), &p("e"));
        assert_eq!(dirs(&owed.for_path(&p("c"))), ["", "e"]);
    }

    #[test]
    fn a_sync_settles_only_what_it_saw() {
        let mut owed = UnsyncedNames::default();
        owed.created(&p("a"));
        let sync = owed.for_path(&p("a"));
        // Renamed away and a new file made at the name while the sync ran
        // without the lock: the new file's entry is still owed.
        owed.renamed(&p("a"), &p("d/a"));
        owed.created(&p("a"));
        owed.settle(&sync);
        assert_eq!(dirs(&owed.for_path(&p("a"))), [""]);
        assert_eq!(dirs(&owed.for_path(&p("d/a"))), ["d", ""]);
        let all = owed.all();
        assert_eq!(dirs(&all), ["", "d"]);
        owed.settle(&all);
        assert_eq!(owed.len(), 0);
    }

    #[test]
    fn a_rename_moves_only_names_under_its_source() {
        let mut owed = UnsyncedNames::default();
        for name in ["d/a", "d-x/a", "d0/a", "d!/a", "dd/a", "d"] {
            owed.created(&p(name));
        }
        owed.renamed(&p("d"), &p("e"));
        for name in ["e/a", "d-x/a", "d0/a", "d!/a", "dd/a", "e"] {
            assert!(!owed.for_path(&p(name)).is_empty(), "{name} is owed");
        }
        assert!(owed.for_path(&p("d/a")).is_empty());
        assert_eq!(owed.len(), 6);
    }

    #[test]
    fn old_parents_are_counted_as_names_come_and_go() {
        let mut owed = UnsyncedNames::default();
        owed.renamed(&p("d/a"), &p("c"));
        owed.renamed(&p("d/b"), &p("f"));
        assert_eq!(owed.old_parents.get(&p("d")), Some(&2));
        owed.removed(&p("c"));
        assert_eq!(owed.old_parents.get(&p("d")), Some(&1));
        // The directory is renamed: f's old parent follows it.
        owed.renamed(&p("d"), &p("e"));
        assert_eq!(dirs(&owed.for_path(&p("f"))), ["", "e"]);
        assert_eq!(owed.old_parents.get(&p("d")), None);
        assert_eq!(owed.old_parents.get(&p("e")), Some(&1));
        let all = owed.all();
        owed.settle(&all);
        assert!(owed.old_parents.is_empty());
        assert_eq!(owed.len(), 0);
    }

    #[test]
    fn an_unlinked_name_owes_nothing() {
        let mut owed = UnsyncedNames::default();
        owed.renamed(&p("a"), &p("d/a"));
        owed.removed(&p("d/a"));
        assert!(owed.for_path(&p("d/a")).is_empty());
        assert_eq!(owed.len(), 0);
    }
}
