//! Inode numbers of the mount: sluice allocates them (1 is the root) and
//! maps each to the file or directory it stands for, known by the capacity
//! tier's identity (`Stat::identity`: file system and inode number), with
//! every name of it seen so far. Two names of one file (hard links) are
//! one node, so the kernel sees one inode with one set of attributes and
//! the reply to a `link` names the existing inode, as the kernel expects.
//! Any name of a node serves the path-based operations on the capacity
//! tier. Renames move names (a directory's, every name under it); unlink
//! and a replacing rename remove one name, so a stale inode gets ENOENT
//! instead of another file's bytes, and a node with no name left is
//! served through its open handles. A node is dropped when the kernel
//! forgets its last lookup.
//!
//! Each node also keeps a hint for the write path: whether the file may
//! carry set-user-ID or set-group-ID bits, so a write by a process without
//! CAP_FSETID stats the file (to clear them) only when it may have some.
//! The hint starts set, is set whenever attributes with such a bit are
//! served, and is cleared only by the write path after a stat that found
//! none left, and only if no bit was noted meanwhile (an epoch counts the
//! notes), so a racing `chmod u+s` is never forgotten.
//!
//! INVARIANTS: `by_path[p] = i` if and only if `p` is in `nodes[i].names`;
//! `by_identity[c] = i` if and only if `nodes[i].identity = Some(c)` and
//! `nodes[i]` has a name (a name-less node's inode number may be reused by
//! the tier for a new file once it is closed).

use std::collections::{BTreeSet, HashMap};

use sluice_env::{PathMap, RelPath};

/// The root's inode number.
pub const ROOT: u64 = 1;

/// The capacity tier's identity of a file or directory (`Stat::identity`).
pub type Identity = (u64, u64);

struct Node {
    /// Every name of it known (hard links: several); empty once the last
    /// one was removed.
    names: BTreeSet<RelPath>,
    /// Its capacity identity, once a stat has said it.
    identity: Option<Identity>,
    lookups: u64,
    /// The file may have S_ISUID or S_ISGID set (see the module doc).
    may_setid: bool,
    /// Bumped by every [`Inodes::note_mode`] that saw a set-ID bit.
    setid_epoch: u64,
    /// Engine handles open on this node: a node whose names were removed
    /// (unlinked, renamed over) is still served through them.
    handles: Vec<u64>,
}

impl Node {
    fn new(path: &RelPath, identity: Option<Identity>) -> Node {
        Node {
            names: BTreeSet::from([path.clone()]),
            identity,
            lookups: 0,
            may_setid: true,
            setid_epoch: 0,
            handles: Vec::new(),
        }
    }
}

/// The set-user-ID and set-group-ID bits.
pub const SETID_BITS: u32 = 0o6000;

/// The table.
pub struct Inodes {
    nodes: HashMap<u64, Node>,
    /// Ordered too, so a renamed directory's names are one range.
    by_path: PathMap<u64>,
    by_identity: HashMap<Identity, u64>,
    next: u64,
}

impl Default for Inodes {
    fn default() -> Self {
        let mut root = Node::new(&RelPath::root(), None);
        root.lookups = 1;
        let mut nodes = HashMap::new();
        nodes.insert(ROOT, root);
        let mut by_path = PathMap::default();
        by_path.insert(RelPath::root(), ROOT);
        Inodes {
            nodes,
            by_path,
            by_identity: HashMap::new(),
            next: ROOT + 1,
        }
    }
}

impl Inodes {
    /// A name of `ino` (any serves the capacity tier's path-based calls;
    /// the first in order, so the same one while the names stay).
    pub fn path(&self, ino: u64) -> Option<RelPath> {
        self.nodes.get(&ino)?.names.first().cloned()
    }

    /// The node of the directory that holds `ino`'s name ([`Inodes::path`]),
    /// if known.
    pub fn parent(&self, ino: u64) -> Option<u64> {
        let name = self.nodes.get(&ino)?.names.first()?;
        self.by_path.get(&name.parent()?).copied()
    }

    /// The node `path` names for the kernel, for a reply that hands it
    /// over (lookup, create, mkdir, mknod, symlink): `identity` is what a
    /// stat of `path` just said. Another name of a known node (a hard
    /// link) joins it; a name that now names something else leaves its old
    /// node. Counts one lookup if `lookup`, in the same hold of the table
    /// as the choice of the node (see `counted_entry` in fs.rs).
    pub fn entry(&mut self, path: &RelPath, identity: Identity, lookup: bool) -> u64 {
        let ino = self.resolve(path, identity);
        if lookup {
            if let Some(node) = self.nodes.get_mut(&ino) {
                node.lookups += 1;
            }
        }
        ino
    }

    fn resolve(&mut self, path: &RelPath, identity: Identity) -> u64 {
        if let Some(&ino) = self.by_path.get(path) {
            let known = self.nodes.get(&ino).and_then(|n| n.identity);
            match known {
                Some(known) if known == identity => return ino,
                None => match self.by_identity.get(&identity) {
                    Some(&other) if other != ino => {
                        // Numbered by a listing before its identity was
                        // known: the name joins the node of its file.
                        self.unmap(path);
                        self.add_name(other, path);
                        return other;
                    }
                    _ => {
                        if let Some(node) = self.nodes.get_mut(&ino) {
                            node.identity = Some(identity);
                        }
                        self.by_identity.insert(identity, ino);
                        return ino;
                    }
                },
                // The name was taken by another file behind the mount's back.
                Some(_) => self.unmap(path),
            }
        }
        if let Some(&ino) = self.by_identity.get(&identity) {
            self.add_name(ino, path);
            return ino;
        }
        let ino = self.allocate(path, Some(identity));
        self.by_identity.insert(identity, ino);
        ino
    }

    /// A number for `path` in a directory listing, where no stat was made:
    /// its node if the name is known, else a new node without identity or
    /// lookup (a later [`Inodes::entry`] settles which file it is).
    pub fn listed(&mut self, path: &RelPath) -> u64 {
        match self.by_path.get(path) {
            Some(&ino) => ino,
            None => self.allocate(path, None),
        }
    }

    fn allocate(&mut self, path: &RelPath, identity: Option<Identity>) -> u64 {
        let ino = self.next;
        self.next += 1;
        self.nodes.insert(ino, Node::new(path, identity));
        self.by_path.insert(path.clone(), ino);
        ino
    }

    fn add_name(&mut self, ino: u64, path: &RelPath) {
        if let Some(node) = self.nodes.get_mut(&ino) {
            node.names.insert(path.clone());
            self.by_path.insert(path.clone(), ino);
        }
    }

    /// Forget the name `path`. A node left with no name loses its identity
    /// (the tier may give its inode number to a new file once it is
    /// closed), and is dropped if the kernel holds no reference to it and
    /// no handle is open on it (a node only a listing numbered).
    fn unmap(&mut self, path: &RelPath) {
        let Some(ino) = self.by_path.remove(path) else {
            return;
        };
        let Some(node) = self.nodes.get_mut(&ino) else {
            return;
        };
        node.names.remove(path);
        if !node.names.is_empty() || ino == ROOT {
            return;
        }
        if let Some(identity) = node.identity.take() {
            if self.by_identity.get(&identity) == Some(&ino) {
                self.by_identity.remove(&identity);
            }
        }
        if node.lookups == 0 && node.handles.is_empty() {
            self.nodes.remove(&ino);
        }
    }

    /// `new` was made a hard link of node `ino` (identity `identity`, what
    /// a stat of `new` said): the node takes the name, and one lookup is
    /// counted for the reply that hands it to the kernel.
    pub fn link(&mut self, ino: u64, new: &RelPath, identity: Identity) -> u64 {
        let Some(node) = self.nodes.get(&ino) else {
            return self.entry(new, identity, true);
        };
        match node.identity {
            Some(known) if known != identity => return self.entry(new, identity, true),
            Some(_) => {}
            None => {
                if self.by_identity.contains_key(&identity) {
                    return self.entry(new, identity, true);
                }
                if let Some(node) = self.nodes.get_mut(&ino) {
                    node.identity = Some(identity);
                }
                self.by_identity.insert(identity, ino);
            }
        }
        if self.by_path.get(new).is_some_and(|&other| other != ino) {
            self.unmap(new);
        }
        self.add_name(ino, new);
        if let Some(node) = self.nodes.get_mut(&ino) {
            node.lookups += 1;
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
            if let Some(node) = self.nodes.remove(&ino) {
                for name in &node.names {
                    if self.by_path.get(name) == Some(&ino) {
                        self.by_path.remove(name);
                    }
                }
                if let Some(identity) = node.identity {
                    if self.by_identity.get(&identity) == Some(&ino) {
                        self.by_identity.remove(&identity);
                    }
                }
            }
        }
    }

    /// The name `path` is gone (unlink, rmdir); the node keeps its other
    /// names.
    pub fn detach(&mut self, path: &RelPath) {
        self.unmap(path);
    }

    /// `from` was renamed to `to`: whatever `to` named loses that name, and
    /// `from` and every name under it move. Two names of one node: nothing
    /// happens (as `rename(2)` does nothing for two names of one file).
    pub fn rename(&mut self, from: &RelPath, to: &RelPath) {
        if from == to {
            return;
        }
        if let (Some(a), Some(b)) = (self.by_path.get(from), self.by_path.get(to)) {
            if a == b {
                return;
            }
        }
        self.unmap(to);
        let moved: Vec<(RelPath, RelPath, u64)> = self
            .by_path
            .within(from)
            .filter_map(|(p, &i)| p.rebase(from, to).map(|new| (p.clone(), new, i)))
            .collect();
        // Two passes, so a node whose every name moves is never name-less
        // in between (it would lose its identity).
        for (old, _, ino) in &moved {
            self.by_path.remove(old);
            if let Some(node) = self.nodes.get_mut(ino) {
                node.names.remove(old);
            }
        }
        for (_, new, ino) in moved {
            if self.by_path.contains_key(&new) {
                // A stale name under the target: it is gone.
                self.unmap(&new);
            }
            self.add_name(ino, &new);
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
        Some((node.names.first()?.clone(), node.setid_epoch))
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
impl Inodes {
    /// Checks the module's invariants (tests only).
    fn check(&self) {
        self.by_path.check().unwrap();
        for (path, ino) in &self.by_path {
            let node = self.nodes.get(ino).expect("by_path names a live node");
            assert!(
                node.names.contains(path),
                "{path} in by_path but not in node {ino}"
            );
        }
        for (ino, node) in &self.nodes {
            for name in &node.names {
                assert_eq!(self.by_path.get(name), Some(ino), "name {name} of {ino}");
            }
            if let Some(identity) = node.identity {
                if !node.names.is_empty() {
                    assert_eq!(self.by_identity.get(&identity), Some(ino));
                }
            }
        }
        for (identity, ino) in &self.by_identity {
            let node = self.nodes.get(ino).expect("by_identity names a live node");
            assert_eq!(node.identity, Some(*identity));
            assert!(!node.names.is_empty(), "a name-less node keeps no identity");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn p(s: &str) -> RelPath {
        RelPath::new(s).unwrap()
    }

    /// A lookup of `path` whose stat said capacity inode `cap`.
    fn look(t: &mut Inodes, path: &str, cap: u64) -> u64 {
        t.entry(&p(path), (0, cap), true)
    }

    #[test]
    fn renames_move_subtrees_and_detach_the_target() {
        let mut t = Inodes::default();
        let d = look(&mut t, "d", 10);
        let f = look(&mut t, "d/f", 11);
        let g = look(&mut t, "g", 12);
        t.rename(&p("d"), &p("e"));
        assert_eq!(t.path(d), Some(p("e")));
        assert_eq!(t.path(f), Some(p("e/f")));
        assert_eq!(t.listed(&p("e/f")), f);
        t.rename(&p("e/f"), &p("g"));
        assert_eq!(t.path(g), None, "the replaced file is detached");
        assert_eq!(t.path(f), Some(p("g")));
        // Prefixes match whole components only.
        let dd = look(&mut t, "ee", 13);
        t.rename(&p("e"), &p("x"));
        assert_eq!(t.path(dd), Some(p("ee")));
        t.check();
    }

    #[test]
    fn the_setid_hint_is_cleared_only_when_no_bit_was_noted_meanwhile() {
        let mut t = Inodes::default();
        let f = look(&mut t, "f", 10);
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
        let a = look(&mut t, "a", 10);
        assert_eq!(look(&mut t, "a", 10), a);
        t.forget(a, 1);
        assert_eq!(t.path(a), Some(p("a")));
        t.forget(a, 1);
        assert_eq!(t.path(a), None);
        assert_ne!(look(&mut t, "a", 10), a, "a new node, a new number");
        t.forget(ROOT, 10);
        assert_eq!(t.path(ROOT), Some(RelPath::root()));
        t.check();
    }

    /// Hard links (data-path issue, deliverable 4): the table was keyed by
    /// path, so two names of one file were two nodes (two inode numbers
    /// for the kernel, and a `link` reply naming a new inode).
    #[test]
    fn hard_links_two_names_one_node() {
        let mut t = Inodes::default();
        let a = look(&mut t, "a", 10);
        assert_eq!(t.link(a, &p("b"), (0, 10)), a, "the link reply names a");
        assert_eq!(look(&mut t, "b", 10), a);
        // A name listed before any stat joins its file's node at lookup.
        let listed = t.listed(&p("c"));
        assert_ne!(listed, a);
        assert_eq!(look(&mut t, "c", 10), a, "c is a third name of a");
        assert_eq!(t.path(listed), None, "the listing's node is gone");
        // Unlinking one name keeps the node under the others.
        t.detach(&p("a"));
        assert_eq!(t.path(a), Some(p("b")));
        t.rename(&p("b"), &p("c"));
        assert_eq!(t.path(a), Some(p("b")), "two names of one file: no-op");
        t.detach(&p("b"));
        t.detach(&p("c"));
        assert_eq!(t.path(a), None);
        // Name-less: its capacity inode number may name a new file now.
        assert_ne!(look(&mut t, "new", 10), a);
        // A name taken by another file behind the mount's back.
        let x = look(&mut t, "x", 20);
        assert_ne!(look(&mut t, "x", 21), x);
        assert_eq!(t.path(x), None);
        t.check();
    }

    /// A reference model: the capacity tier (names to capacity inode
    /// numbers, in two directories) and the kernel (references per node),
    /// driven by random lookups, forgets, links, unlinks, file and
    /// directory renames. After each step: every name the table knows
    /// resolves to the node of its capacity inode (one node per inode
    /// among the names looked up), every node the kernel holds is there,
    /// and nothing else is (no leaks).
    #[test]
    fn hard_links_random_operations_match_a_reference_model() {
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for round in 0..200 {
            let mut t = Inodes::default();
            // Capacity tier: path -> inode; directories "d" and "e" (or
            // whichever of them exists) hold files.
            let mut tier: BTreeMap<String, u64> = BTreeMap::new();
            tier.insert("d".into(), 1000);
            let mut next_cap = 1u64;
            // Kernel: node -> references it holds.
            let mut kernel: BTreeMap<u64, u64> = BTreeMap::new();
            let names = ["a", "b", "c"];
            let dirs = ["", "d", "e"];
            let random_path = |next: &mut dyn FnMut(u64) -> u64| {
                let dir = dirs[next(3) as usize];
                let name = names[next(3) as usize];
                if dir.is_empty() {
                    name.to_string()
                } else {
                    format!("{dir}/{name}")
                }
            };
            let parent_exists =
                |tier: &BTreeMap<String, u64>, path: &str| match path.rsplit_once('/') {
                    None => true,
                    Some((dir, _)) => tier.contains_key(dir),
                };
            for step in 0..60 {
                let what = format!("round {round} step {step}");
                match next(6) {
                    // lookup (creating the file if missing)
                    0 | 1 => {
                        let path = random_path(&mut next);
                        if !parent_exists(&tier, &path) {
                            continue;
                        }
                        let cap = *tier.entry(path.clone()).or_insert_with(|| {
                            next_cap += 1;
                            next_cap
                        });
                        let ino = look(&mut t, &path, cap);
                        *kernel.entry(ino).or_default() += 1;
                    }
                    // forget everything the kernel holds of one node
                    2 => {
                        if kernel.is_empty() {
                            continue;
                        }
                        let i = next(kernel.len() as u64) as usize;
                        let (&ino, &n) = kernel.iter().nth(i).unwrap();
                        t.forget(ino, n);
                        kernel.remove(&ino);
                    }
                    // link a looked-up file to a new name
                    3 => {
                        let (from, to) = (random_path(&mut next), random_path(&mut next));
                        if !tier.contains_key(&from)
                            || tier.contains_key(&to)
                            || !parent_exists(&tier, &to)
                            || from == "d"
                            || from == "e"
                        {
                            continue;
                        }
                        let cap = tier[&from];
                        tier.insert(to.clone(), cap);
                        let known = t.by_path.get(&p(&from)).copied();
                        if let Some(ino) = known.filter(|i| kernel.contains_key(i)) {
                            let got = t.link(ino, &p(&to), (0, cap));
                            *kernel.entry(got).or_default() += 1;
                        }
                    }
                    // unlink a file
                    4 => {
                        let path = random_path(&mut next);
                        if tier.remove(&path).is_some() {
                            t.detach(&p(&path));
                        }
                    }
                    // rename a file, or a directory
                    _ => {
                        let (from, to) = if next(4) == 0 {
                            ("d".to_string(), "e".to_string())
                        } else {
                            (random_path(&mut next), random_path(&mut next))
                        };
                        let (from, to) = if from == "d" && !tier.contains_key("d") {
                            ("e".to_string(), "d".to_string())
                        } else {
                            (from, to)
                        };
                        if !tier.contains_key(&from) || !parent_exists(&tier, &to) || from == to {
                            continue;
                        }
                        let is_dir = from == "d" || from == "e";
                        if is_dir {
                            if tier.contains_key(&to) {
                                continue;
                            }
                            let prefix = format!("{from}/");
                            let moved: Vec<(String, u64)> = tier
                                .iter()
                                .filter(|(k, _)| k.starts_with(&prefix) || **k == from)
                                .map(|(k, v)| (k.clone(), *v))
                                .collect();
                            for (k, v) in moved {
                                tier.remove(&k);
                                tier.insert(format!("{to}{}", &k[from.len()..]), v);
                            }
                        } else {
                            if to == "d" || to == "e" {
                                continue;
                            }
                            let cap = tier[&from];
                            if tier.get(&to) == Some(&cap) {
                                // Two names of one file: rename(2) does nothing.
                            } else {
                                tier.remove(&from);
                                tier.insert(to.clone(), cap);
                            }
                        }
                        t.rename(&p(&from), &p(&to));
                    }
                }
                t.check();
                // Every known name names the node of its capacity inode.
                let mut node_of_cap: BTreeMap<u64, u64> = BTreeMap::new();
                for (path, &ino) in &t.by_path {
                    if path.is_root() {
                        continue;
                    }
                    let cap = *tier
                        .get(path.as_str())
                        .unwrap_or_else(|| panic!("{what}: {path} known but gone"));
                    if let Some(identity) = t.nodes[&ino].identity {
                        assert_eq!(identity, (0, cap), "{what}: {path}");
                        let prior = node_of_cap.insert(cap, ino);
                        assert!(
                            prior.is_none() || prior == Some(ino),
                            "{what}: inode {cap} has two nodes"
                        );
                    }
                }
                // The kernel's nodes are there; nothing else is.
                for ino in kernel.keys() {
                    assert!(t.nodes.contains_key(ino), "{what}: held node {ino} gone");
                }
                assert_eq!(t.nodes.len(), kernel.len() + 1, "{what}: leaked nodes");
            }
            // Forgetting everything leaves the root only.
            for (ino, n) in kernel {
                t.forget(ino, n);
            }
            assert!(t.is_empty());
            assert!(t.by_identity.is_empty());
            assert_eq!(t.by_path.len(), 1);
        }
    }
}
