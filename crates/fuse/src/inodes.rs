//! Inode numbers of the mount: sluice allocates them (1 is the root) and
//! maps each to the path it names now. Renames move a node and everything
//! under it; unlink and a replacing rename detach the node's path, so a
//! stale inode gets ENOENT instead of another file's bytes. A node is
//! dropped when the kernel forgets its last lookup.
//!
//! INVARIANT: `by_path[p] = i` if and only if `nodes[i].path = Some(p)`.

use std::collections::HashMap;

use sluice_env::RelPath;

/// The root's inode number.
pub const ROOT: u64 = 1;

struct Node {
    path: Option<RelPath>,
    lookups: u64,
}

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
