//! A directory tree in memory with POSIX namespace semantics, shared by the
//! in-memory and crash-test backends.
//!
//! The tree maps names to nodes: a directory (with an id that stays with it
//! across renames, which the crash-test backend uses to find its synced
//! entries) or a file handle of the backend's choosing (`F`: the file's data
//! for the memory backend, a file id for the crash-test backend).
//!
//! Operations return the POSIX `errno` a kernel would (ENOENT, ENOTDIR,
//! EEXIST, EISDIR, ENOTEMPTY, EINVAL, EBUSY) and leave the tree unchanged
//! when they fail: every check happens before the first mutation.
//!
//! Invariants: the root is a directory with id [`ROOT_DIR_ID`]; directory
//! ids are unique in the tree; a directory is never inside itself.

use std::collections::BTreeMap;

use rustix::io::Errno;

use crate::{DirEntry, FileKind, OpenOptions, RelPath};

/// Id of the root directory.
pub(crate) const ROOT_DIR_ID: u64 = 0;

/// A node of the tree.
#[derive(Clone, Debug)]
pub(crate) enum Node<F> {
    /// A regular file.
    File(F),
    /// A directory.
    Dir(DirNode<F>),
}

impl<F> Node<F> {
    fn kind(&self) -> FileKind {
        match self {
            Node::File(_) => FileKind::File,
            Node::Dir(_) => FileKind::Dir,
        }
    }
}

/// A directory: its id and its entries by name.
#[derive(Clone, Debug)]
pub(crate) struct DirNode<F> {
    /// Stays with the directory across renames.
    pub(crate) id: u64,
    /// Entries, sorted by name.
    pub(crate) entries: BTreeMap<String, Node<F>>,
}

impl<F> DirNode<F> {
    /// An empty directory with `id`.
    pub(crate) fn new(id: u64) -> DirNode<F> {
        DirNode {
            id,
            entries: BTreeMap::new(),
        }
    }
}

/// The tree: a root directory and the next directory id to hand out.
#[derive(Clone, Debug)]
pub(crate) struct Tree<F> {
    pub(crate) root: DirNode<F>,
    pub(crate) next_dir_id: u64,
}

/// Components of a non-root path.
fn components(path: &RelPath) -> impl Iterator<Item = &str> {
    path.as_str().split('/').filter(|c| !c.is_empty())
}

/// Parent and last component of a path; EBUSY for the root, which cannot be
/// created, removed or renamed.
fn split(path: &RelPath) -> Result<(RelPath, &str), Errno> {
    match path.parent() {
        Some(parent) => Ok((parent, path.file_name())),
        None => Err(Errno::BUSY),
    }
}

impl<F: Clone> Tree<F> {
    /// An empty tree.
    pub(crate) fn new() -> Tree<F> {
        Tree {
            root: DirNode::new(ROOT_DIR_ID),
            next_dir_id: ROOT_DIR_ID + 1,
        }
    }

    /// The directory at `path`: ENOENT when a component is missing, ENOTDIR
    /// when one is a file.
    pub(crate) fn dir(&self, path: &RelPath) -> Result<&DirNode<F>, Errno> {
        let mut dir = &self.root;
        for name in components(path) {
            dir = match dir.entries.get(name) {
                Some(Node::Dir(child)) => child,
                Some(Node::File(_)) => return Err(Errno::NOTDIR),
                None => return Err(Errno::NOENT),
            };
        }
        Ok(dir)
    }

    /// The directory at `path`, mutably (same errors as [`Tree::dir`]).
    pub(crate) fn dir_mut(&mut self, path: &RelPath) -> Result<&mut DirNode<F>, Errno> {
        let mut dir = &mut self.root;
        for name in components(path) {
            dir = match dir.entries.get_mut(name) {
                Some(Node::Dir(child)) => child,
                Some(Node::File(_)) => return Err(Errno::NOTDIR),
                None => return Err(Errno::NOENT),
            };
        }
        Ok(dir)
    }

    /// The node at a non-root `path`, or the root's kind for the root.
    fn node(&self, path: &RelPath) -> Result<Option<&Node<F>>, Errno> {
        match path.parent() {
            None => Ok(None),
            Some(parent) => match self.dir(&parent)?.entries.get(path.file_name()) {
                Some(node) => Ok(Some(node)),
                None => Err(Errno::NOENT),
            },
        }
    }

    /// What `path` names: `(kind, file)`, the file when it is one.
    pub(crate) fn lookup(&self, path: &RelPath) -> Result<(FileKind, Option<&F>), Errno> {
        match self.node(path)? {
            None => Ok((FileKind::Dir, None)),
            Some(Node::Dir(_)) => Ok((FileKind::Dir, None)),
            Some(Node::File(file)) => Ok((FileKind::File, Some(file))),
        }
    }

    /// Opens the file at `path` as `open(2)` would: the existing file, or a
    /// new one from `make` when `options` allow creating it. Returns the file
    /// and whether it was created. Truncation is the caller's business.
    pub(crate) fn open(
        &mut self,
        path: &RelPath,
        options: OpenOptions,
        make: impl FnOnce() -> F,
    ) -> Result<(F, bool), Errno> {
        let (parent, name) = split(path).map_err(|_| Errno::ISDIR)?;
        let dir = self.dir_mut(&parent)?;
        match dir.entries.get(name) {
            Some(_) if options.create && options.create_new => Err(Errno::EXIST),
            Some(Node::Dir(_)) => Err(Errno::ISDIR),
            Some(Node::File(file)) => Ok((file.clone(), false)),
            None if options.create || options.create_new => {
                let file = make();
                dir.entries
                    .insert(name.to_string(), Node::File(file.clone()));
                Ok((file, true))
            }
            None => Err(Errno::NOENT),
        }
    }

    /// Removes the file at `path` and returns it; EISDIR for a directory.
    pub(crate) fn remove_file(&mut self, path: &RelPath) -> Result<F, Errno> {
        let (parent, name) = split(path).map_err(|_| Errno::ISDIR)?;
        let dir = self.dir_mut(&parent)?;
        match dir.entries.get(name) {
            None => Err(Errno::NOENT),
            Some(Node::Dir(_)) => Err(Errno::ISDIR),
            Some(Node::File(_)) => match dir.entries.remove(name) {
                Some(Node::File(file)) => Ok(file),
                // Just matched a file under the same borrow.
                _ => Err(Errno::NOENT),
            },
        }
    }

    /// Enters the file at `existing` under `new` too (`link(2)`): both
    /// entries then hold clones of one `F` (the caller's file handle, e.g.
    /// one `Arc`). EPERM for a directory, EEXIST if `new` exists.
    pub(crate) fn link(&mut self, existing: &RelPath, new: &RelPath) -> Result<F, Errno> {
        let file = match self.node(existing)? {
            None | Some(Node::Dir(_)) => return Err(Errno::PERM),
            Some(Node::File(file)) => file.clone(),
        };
        let (parent, name) = split(new).map_err(|_| Errno::EXIST)?;
        let dir = self.dir_mut(&parent)?;
        if dir.entries.contains_key(name) {
            return Err(Errno::EXIST);
        }
        dir.entries
            .insert(name.to_string(), Node::File(file.clone()));
        Ok(file)
    }

    /// Creates an empty directory at `path` and returns its id.
    pub(crate) fn create_dir(&mut self, path: &RelPath) -> Result<u64, Errno> {
        let (parent, name) = split(path).map_err(|_| Errno::EXIST)?;
        let id = self.next_dir_id;
        let dir = self.dir_mut(&parent)?;
        if dir.entries.contains_key(name) {
            return Err(Errno::EXIST);
        }
        dir.entries
            .insert(name.to_string(), Node::Dir(DirNode::new(id)));
        self.next_dir_id += 1;
        Ok(id)
    }

    /// Removes the empty directory at `path`.
    pub(crate) fn remove_dir(&mut self, path: &RelPath) -> Result<(), Errno> {
        let (parent, name) = split(path)?;
        let dir = self.dir_mut(&parent)?;
        match dir.entries.get(name) {
            None => Err(Errno::NOENT),
            Some(Node::File(_)) => Err(Errno::NOTDIR),
            Some(Node::Dir(child)) if !child.entries.is_empty() => Err(Errno::NOTEMPTY),
            Some(Node::Dir(_)) => {
                dir.entries.remove(name);
                Ok(())
            }
        }
    }

    /// Renames as `rename(2)`: replaces a file with a file or an empty
    /// directory with a directory; refuses to move a directory inside
    /// itself. Returns the replaced node, if any.
    pub(crate) fn rename(
        &mut self,
        from: &RelPath,
        to: &RelPath,
    ) -> Result<Option<Node<F>>, Errno> {
        let (from_parent, from_name) = split(from)?;
        let (to_parent, to_name) = split(to)?;
        let from_kind = match self.dir(&from_parent)?.entries.get(from_name) {
            Some(node) => node.kind(),
            None => return Err(Errno::NOENT),
        };
        if from == to {
            return Ok(None);
        }
        if to.as_str().starts_with(&format!("{}/", from.as_str())) {
            return Err(Errno::INVAL);
        }
        match (from_kind, self.dir(&to_parent)?.entries.get(to_name)) {
            (_, None) | (FileKind::File, Some(Node::File(_))) => {}
            (FileKind::File, Some(Node::Dir(_))) => return Err(Errno::ISDIR),
            (FileKind::Dir, Some(Node::File(_))) => return Err(Errno::NOTDIR),
            (FileKind::Dir, Some(Node::Dir(target))) if !target.entries.is_empty() => {
                return Err(Errno::NOTEMPTY)
            }
            (FileKind::Dir, Some(Node::Dir(_))) => {}
        }
        // Every check passed: the two mutations below cannot fail (`to` is
        // not inside `from`, so removing `from` keeps `to`'s parent).
        let node = match self.dir_mut(&from_parent)?.entries.remove(from_name) {
            Some(node) => node,
            None => return Err(Errno::NOENT),
        };
        let replaced = self
            .dir_mut(&to_parent)?
            .entries
            .insert(to_name.to_string(), node);
        Ok(replaced)
    }

    /// Entries of the directory at `path`, sorted by name.
    pub(crate) fn read_dir(&self, path: &RelPath) -> Result<Vec<DirEntry>, Errno> {
        Ok(self
            .dir(path)?
            .entries
            .iter()
            .map(|(name, node)| DirEntry {
                name: name.clone(),
                kind: node.kind(),
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(path: &str) -> RelPath {
        RelPath::new(path).unwrap()
    }

    #[test]
    fn rename_refuses_moving_a_directory_into_itself_and_changes_nothing() {
        let mut tree: Tree<u32> = Tree::new();
        tree.create_dir(&p("a")).unwrap();
        tree.create_dir(&p("a/b")).unwrap();
        assert_eq!(tree.rename(&p("a"), &p("a/b/c")).unwrap_err(), Errno::INVAL);
        assert_eq!(tree.rename(&p("a"), &p("a/b")).unwrap_err(), Errno::INVAL);
        assert!(tree.dir(&p("a/b")).is_ok());
        // Replacing a non-empty directory is refused, an empty one allowed.
        tree.create_dir(&p("c")).unwrap();
        tree.open(&p("c/f"), OpenOptions::CREATE, || 1).unwrap();
        assert_eq!(tree.rename(&p("a"), &p("c")).unwrap_err(), Errno::NOTEMPTY);
        tree.create_dir(&p("d")).unwrap();
        assert!(tree.rename(&p("a"), &p("d")).unwrap().is_some());
        assert!(tree.dir(&p("d/b")).is_ok());
        assert_eq!(tree.dir(&p("a")).unwrap_err(), Errno::NOENT);
        // Root cannot move.
        assert_eq!(
            tree.rename(&RelPath::root(), &p("x")).unwrap_err(),
            Errno::BUSY
        );
    }
}
