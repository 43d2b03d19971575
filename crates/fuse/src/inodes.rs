//! Inode numbers of the mount: sluice allocates them (1 is the root) and
//! maps each to the path it names now. Renames move a node and everything
//! under it; unlink and a replacing rename detach the node's path, so a
//! stale inode gets ENOENT instead of another file's bytes. A node is
//! dropped when the kernel forgets its last lookup.
//!
//!
//! Each node also keeps a hint for the write path: whether the file may
//! carry set-user-ID or set-group-ID bits, so a write by a process without
//! CAP_FSETID stats the file (to clear them) only when it may have some.
//! The hint starts set, is set whenever attributes with such a bit are
//! served, and is cleared only by the write path after a stat that found
//! none left, and only if no bit was noted meanwhile (an epoch counts the
//! notes), so a racing `chmod u+s` is never forgotten.
//!
//! INVARIANT: `by_path[p] = i` if and only if `nodes[i].path = Some(p)`.

use std::collections::HashMap;

use sluice_env::RelPath;

/// The root's inode number.
pub const ROOT: u64 = 1;

struct Node {
    path: Option<RelPath>,
    lookups: u64,
    /// The file may have S_ISUID or S_ISGID set (see the module doc).
    may_setid: bool,
    /// Bumped by every [`Inodes::note_mode`] that saw a set-ID bit.
    setid_epoch: u64,
    /// Engine handles open on this node: a node whose name was removed
    /// (unlinked, renamed over) is still served through them.
    handles: Vec<u64>,
}

/// The set-user-ID and set-group-ID bits.
pub const SETID_BITS: u32 = 0o6000;

/// The table.
pub struct Inodes {
    nodes: HashMap<u64, Node>,
    by_path: HashMap<RelPath, u64>,
    next: u64,
}

impl Default for Inodes {
    fn default() -> Self {
        let mut nodes = HashMap::new();
        nodes.insert(
            ROOT,
            Node {
                path: Some(RelPath::root()),
                lookups: 1,
                may_setid: true,
                setid_epoch: 0,
                handles: Vec::new(),
            },
        );
        let mut by_path = HashMap::new();
        by_path.insert(RelPath::root(), ROOT);
        Inodes {
            nodes,
            by_path,
            next: ROOT + 1,
        }
    }
}

impl Inodes {
    /// The path `ino` names now.
    pub fn path(&self, ino: u64) -> Option<RelPath> {
        self.nodes.get(&ino).and_then(|n| n.path.clone())
    }

    /// The inode of `path`, allocated if new; `lookup` counts a kernel
    /// reference (a reply that hands the inode to the kernel).
    pub fn get(&mut self, path: &RelPath, lookup: bool) -> u64 {
        let ino = match self.by_path.get(path) {
            Some(&ino) => ino,
            None => {
                let ino = self.next;
                self.next += 1;
                self.nodes.insert(
                    ino,
                    Node {
                        path: Some(path.clone()),
                        lookups: 0,
                        may_setid: true,
                        setid_epoch: 0,
                        handles: Vec::new(),
                    },
                );
                self.by_path.insert(path.clone(), ino);
                ino
            }
        };
        if lookup {
            if let Some(node) = self.nodes.get_mut(&ino) {
                node.lookups += 1;
            }
        }
        ino
    }

    /// The kernel dropped `n` references.
    pub fn forget(&mut self, ino: u64, n: u64) {
        if ino == ROOT {
            return;
        }
        let Some(node) = self.nodes.get_mut(&ino) else {
            return;
        };
        node.lookups = node.lookups.saturating_sub(n);
        if node.lookups == 0 {
            if let Some(path) = node.path.take() {
                self.by_path.remove(&path);
            }
            self.nodes.remove(&ino);
        }
    }

    /// `path` is gone (unlink, rmdir).
    pub fn detach(&mut self, path: &RelPath) {
        if let Some(ino) = self.by_path.remove(path) {
            if let Some(node) = self.nodes.get_mut(&ino) {
                node.path = None;
            }
        }
    }

    /// `from` was renamed to `to`: whatever `to` named is detached, and
    /// `from` and every path under it move.
    pub fn rename(&mut self, from: &RelPath, to: &RelPath) {
        self.detach(to);
        let moved: Vec<(RelPath, RelPath, u64)> = self
            .by_path
            .iter()
            .filter_map(|(p, &i)| p.rebase(from, to).map(|new| (p.clone(), new, i)))
            .collect();
        for (old, new, ino) in moved {
            self.by_path.remove(&old);
            if let Some(node) = self.nodes.get_mut(&ino) {
                node.path = Some(new.clone());
            }
            self.by_path.insert(new, ino);
        }
    }

    /// Attributes with permission bits `mode` were served for `ino`.
    pub fn note_mode(&mut self, ino: u64, mode: u32) {
        if mode & SETID_BITS == 0 {
            return;
        }
        if let Some(node) = self.nodes.get_mut(&ino) {
            node.may_setid = true;
            node.setid_epoch += 1;
        }
    }

    /// The path of `ino` and the current epoch, if the file may have
    /// set-ID bits (unknown nodes and detached paths: nothing to check).
    pub fn setid_check(&self, ino: u64) -> Option<(RelPath, u64)> {
        let node = self.nodes.get(&ino)?;
        if !node.may_setid {
            return None;
        }
        Some((node.path.clone()?, node.setid_epoch))
    }

    /// A stat after [`Inodes::setid_check`] returned `epoch` found no set-ID
    /// bit left on `ino`: clear the hint unless a bit was noted meanwhile.
    pub fn setid_cleared(&mut self, ino: u64, epoch: u64) {
        if let Some(node) = self.nodes.get_mut(&ino) {
            if node.setid_epoch == epoch {
                node.may_setid = false;
            }
        }
    }

    /// Engine handle `fh` was opened on `ino`.
    pub fn opened(&mut self, ino: u64, fh: u64) {
        if let Some(node) = self.nodes.get_mut(&ino) {
            node.handles.push(fh);
        }
    }

    /// Engine handle `fh` of `ino` was released.
    pub fn released(&mut self, ino: u64, fh: u64) {
        if let Some(node) = self.nodes.get_mut(&ino) {
            if let Some(i) = node.handles.iter().position(|&h| h == fh) {
                node.handles.swap_remove(i);
            }
        }
    }

    /// An engine handle open on `ino`, if any.
    pub fn open_handle(&self, ino: u64) -> Option<u64> {
        self.nodes.get(&ino)?.handles.first().copied()
    }

    /// Nodes in the table (for status).
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Only the root is known.
    pub fn is_empty(&self) -> bool {
        self.nodes.len() <= 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> RelPath {
        RelPath::new(s).unwrap()
    }

    #[test]
    fn renames_move_subtrees_and_detach_the_target() {
        let mut t = Inodes::default();
        let d = t.get(&p("d"), true);
        let f = t.get(&p("d/f"), true);
        let g = t.get(&p("g"), true);
        t.rename(&p("d"), &p("e"));
        assert_eq!(t.path(d), Some(p("e")));
        assert_eq!(t.path(f), Some(p("e/f")));
        assert_eq!(t.get(&p("e/f"), false), f);
        t.rename(&p("e/f"), &p("g"));
        assert_eq!(t.path(g), None, "the replaced file is detached");
        assert_eq!(t.path(f), Some(p("g")));
        // Prefixes match whole components only.
        let dd = t.get(&p("ee"), true);
        t.rename(&p("e"), &p("x"));
        assert_eq!(t.path(dd), Some(p("ee")));
    }

    #[test]
    fn the_setid_hint_is_cleared_only_when_no_bit_was_noted_meanwhile() {
        let mut t = Inodes::default();
        let f = t.get(&p("f"), true);
        // Unknown at first: the write path must look.
        let (path, epoch) = t.setid_check(f).unwrap();
        assert_eq!(path, p("f"));
        t.setid_cleared(f, epoch);
        assert_eq!(t.setid_check(f), None, "no bits: writes skip the stat");
        t.note_mode(f, 0o755);
        assert_eq!(t.setid_check(f), None, "a mode without set-ID bits");
        t.note_mode(f, 0o4755);
        let (_, epoch) = t.setid_check(f).unwrap();
        // A chmod u+s noted between the write path's stat and its clear.
        t.note_mode(f, 0o4755);
        t.setid_cleared(f, epoch);
        assert!(t.setid_check(f).is_some(), "the later note wins");
        t.detach(&p("f"));
        assert_eq!(t.setid_check(f), None, "a detached node has no path");
        assert_eq!(t.setid_check(999), None);
    }

    #[test]
    fn forget_drops_a_node_after_its_last_lookup() {
        let mut t = Inodes::default();
        let a = t.get(&p("a"), true);
        assert_eq!(t.get(&p("a"), true), a);
        t.forget(a, 1);
        assert_eq!(t.path(a), Some(p("a")));
        t.forget(a, 1);
        assert_eq!(t.path(a), None);
        assert_ne!(t.get(&p("a"), true), a, "a new node, a new number");
        t.forget(ROOT, 10);
        assert_eq!(t.path(ROOT), Some(RelPath::root()));
    }
}
