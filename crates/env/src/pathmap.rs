//! A map from paths, hashed for lookups and kept in order too, so the
//! entries at and under a directory are one range: a rename of a
//! directory moves them without a scan of every entry.
//!
//! Why: the engine's name table (every file with buffered bytes) and the
//! mount's inode table (every name the kernel holds) were scanned whole at
//! every rename, under their locks. A job writing small files and renaming
//! each over a temporary name slowed from 3,290 creates and renames per
//! second over its first 1,000 files to 1,111 over its 40,000-60,000th
//! (mergerfs 2,727-2,960 throughout).
//!
//! INVARIANT: `ordered` holds exactly the keys of `by_path`.

use std::collections::{BTreeSet, HashMap};

use crate::RelPath;

/// See the module docs.
#[derive(Clone, Debug)]
pub struct PathMap<V> {
    by_path: HashMap<RelPath, V>,
    ordered: BTreeSet<RelPath>,
}

impl<V> Default for PathMap<V> {
    fn default() -> Self {
        PathMap {
            by_path: HashMap::new(),
            ordered: BTreeSet::new(),
        }
    }
}

impl<V> PathMap<V> {
    /// The value of `path`.
    pub fn get(&self, path: &RelPath) -> Option<&V> {
        self.by_path.get(path)
    }

    /// Whether `path` has a value.
    pub fn contains_key(&self, path: &RelPath) -> bool {
        self.by_path.contains_key(path)
    }

    /// Map `path` to `value`; the value it mapped to before, if any.
    pub fn insert(&mut self, path: RelPath, value: V) -> Option<V> {
        if !self.by_path.contains_key(&path) {
            self.ordered.insert(path.clone());
        }
        self.by_path.insert(path, value)
    }

    /// Remove `path`; its value, if it had one.
    pub fn remove(&mut self, path: &RelPath) -> Option<V> {
        let value = self.by_path.remove(path)?;
        self.ordered.remove(path);
        Some(value)
    }

    /// Entries.
    pub fn len(&self) -> usize {
        self.by_path.len()
    }

    /// Whether there is no entry.
    pub fn is_empty(&self) -> bool {
        self.by_path.is_empty()
    }

    /// Every entry, in no order.
    pub fn iter(&self) -> impl Iterator<Item = (&RelPath, &V)> {
        self.by_path.iter()
    }

    /// The entries at `dir` or under it ([`RelPath::is_within`]), in
    /// order.
    pub fn within<'a>(&'a self, dir: &'a RelPath) -> impl Iterator<Item = (&'a RelPath, &'a V)> {
        self.ordered
            .range(dir.subtree())
            .filter(move |path| path.is_within(dir))
            .filter_map(move |path| self.by_path.get(path).map(|value| (path, value)))
    }

    /// The module invariant, for tests: Err says how it is broken.
    pub fn check(&self) -> Result<(), String> {
        if self.ordered.len() != self.by_path.len()
            || self
                .ordered
                .iter()
                .any(|path| !self.by_path.contains_key(path))
        {
            return Err(format!(
                "path map: {} paths ordered, {} hashed, or not the same",
                self.ordered.len(),
                self.by_path.len()
            ));
        }
        Ok(())
    }
}

impl<'a, V> IntoIterator for &'a PathMap<V> {
    type Item = (&'a RelPath, &'a V);
    type IntoIter = std::collections::hash_map::Iter<'a, RelPath, V>;

    fn into_iter(self) -> Self::IntoIter {
        self.by_path.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_under_a_directory_are_found_and_both_indexes_agree() {
        let p = |s: &str| RelPath::new(s).unwrap();
        let mut map = PathMap::default();
        for (i, name) in ["d/a", "d/e/b", "d-x", "d0/c", "dd", "d"]
            .iter()
            .enumerate()
        {
            assert_eq!(map.insert(p(name), i), None);
        }
        assert_eq!(map.insert(p("d/a"), 9), Some(0));
        let within: Vec<(String, usize)> = map
            .within(&p("d"))
            .map(|(path, &i)| (path.to_string(), i))
            .collect();
        assert_eq!(
            within,
            [("d".into(), 5), ("d/a".into(), 9), ("d/e/b".into(), 1)]
        );
        assert_eq!(map.within(&RelPath::root()).count(), 6);
        assert_eq!(map.remove(&p("d/e/b")), Some(1));
        assert_eq!(map.remove(&p("d/e/b")), None);
        assert_eq!(map.within(&p("d/e")).count(), 0);
        map.check().unwrap();
        assert_eq!(map.len(), 5);
        assert_eq!((&map).into_iter().count(), 5);
    }
}
