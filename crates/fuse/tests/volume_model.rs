//! The mount's [`Volume`] against a reference model, without a mount: random
//! sequences of lookup, forget, create, open, write, read, truncate (by
//! path and by handle), unlink, rename (files, a directory, with and
//! without `RENAME_NOREPLACE`), link, mkdir, rmdir, getattr, release, fsync
//! and drain, over an engine on memory tiers with small regions (routing
//! flips, regions fill and flush while it runs). Mostly as the kernel
//! would drive them: a FORGET never comes for a node with open files.
//! Renames are not preceded by lookups, which is harsher than the kernel
//! (it also sends no rename of a missing source; the model does, and the
//! target must keep its bytes).
//!
//! The model is the namespace (names to file or directory ids), the bytes
//! of each file, the nodes the kernel holds (references, what each stands
//! for, and the names it reached each by: its dentries) and the open
//! handles. Checked at every step: a name resolves to the node the kernel
//! holds and reaches by a name for its file (one node per file: hard links
//! share it) with the file's length, and a removed name to ENOENT; reads
//! through any handle give the model's bytes (an unlinked or renamed-over
//! open file included; hard links share bytes); every node the kernel
//! holds answers getattr while the kernel reaches it by a name or a handle
//! is open on it (forgets never drop a node still held); the table holds
//! exactly the root and the nodes the kernel holds (no leaks). At the end,
//! after every handle is released, every reference forgotten and the log
//! drained, the table holds the root only and the capacity tier holds the
//! model's bytes under every name.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use sluice_engine::{Engine, EngineConfig};
use sluice_env::memory::MemBackend;
use sluice_env::{Backend, OpenOptions, RelPath, StatKind, SystemClock};
use sluice_fuse::volume::{AttrChanges, Caller, Volume, RENAME_NOREPLACE};
use sluice_policy::detector::DetectorConfig;
use sluice_policy::flush_gate::FlushGateConfig;
use sluice_policy::redirector::RedirectorConfig;

const ROOT: u64 = 1;
const DIRS: [&str; 2] = ["d", "e"];
/// File names: three in the root and three in each directory.
const PATHS: [&str; 9] = ["a", "b", "c", "d/a", "d/b", "d/c", "e/a", "e/b", "e/c"];
const FILE_MAX: u64 = 24 * 1024;
const O_RDWR: i32 = 2;

/// Small regions and short streams, so routing flips between the tiers,
/// regions fill and flushes run within a few dozen operations.
fn small_config() -> EngineConfig {
    EngineConfig {
        redirector: RedirectorConfig {
            detector: DetectorConfig { stream_len: 4 },
            ..RedirectorConfig::default()
        },
        regions: 3,
        region_bytes: 64 * 1024,
        wait_max: Duration::from_millis(20),
        flush_gate: FlushGateConfig {
            flush_idle: Duration::from_millis(1),
            flush_age: None,
            hold_while_writing: false,
        },
        flush_run_max_bytes: 16 * 1024,
        record_max_bytes: 8 * 1024,
        ..EngineConfig::default()
    }
}

#[derive(Clone, Debug)]
enum Op {
    Lookup {
        path: usize,
    },
    /// Forget some (or all, if no handle is open on it) references of a
    /// held node.
    Forget {
        node: usize,
        all: bool,
    },
    Getattr {
        node: usize,
    },
    Create {
        path: usize,
    },
    Open {
        path: usize,
    },
    Write {
        handle: usize,
        offset: u64,
        len: u64,
        seed: u8,
    },
    Read {
        handle: usize,
        offset: u64,
        len: u64,
    },
    TruncatePath {
        path: usize,
        size: u64,
    },
    TruncateHandle {
        handle: usize,
        size: u64,
    },
    Unlink {
        path: usize,
    },
    Rename {
        from: usize,
        to: usize,
        no_replace: bool,
    },
    RenameDir {
        from: usize,
        no_replace: bool,
    },
    Link {
        from: usize,
        to: usize,
    },
    Mkdir {
        dir: usize,
    },
    Rmdir {
        dir: usize,
    },
    Release {
        handle: usize,
    },
    Fsync {
        handle: usize,
    },
    Drain,
}

fn op_strategy() -> impl Strategy<Value = Op> {
    let path = 0..PATHS.len();
    let index = 0usize..64;
    prop_oneof![
        3 => path.clone().prop_map(|path| Op::Lookup { path }),
        2 => (index.clone(), any::<bool>()).prop_map(|(node, all)| Op::Forget { node, all }),
        1 => index.clone().prop_map(|node| Op::Getattr { node }),
        3 => path.clone().prop_map(|path| Op::Create { path }),
        2 => path.clone().prop_map(|path| Op::Open { path }),
        5 => (index.clone(), 0..FILE_MAX, 1u64..6_000, any::<u8>())
            .prop_map(|(handle, offset, len, seed)| Op::Write { handle, offset, len, seed }),
        3 => (index.clone(), 0..FILE_MAX, 1u64..8_000)
            .prop_map(|(handle, offset, len)| Op::Read { handle, offset, len }),
        1 => (path.clone(), 0..FILE_MAX).prop_map(|(path, size)| Op::TruncatePath { path, size }),
        1 => (index.clone(), 0..FILE_MAX).prop_map(|(handle, size)| Op::TruncateHandle { handle, size }),
        2 => path.clone().prop_map(|path| Op::Unlink { path }),
        2 => (path.clone(), path.clone(), any::<bool>())
            .prop_map(|(from, to, no_replace)| Op::Rename { from, to, no_replace }),
        1 => (0..DIRS.len(), any::<bool>()).prop_map(|(from, no_replace)| Op::RenameDir { from, no_replace }),
        2 => (path.clone(), path.clone()).prop_map(|(from, to)| Op::Link { from, to }),
        2 => (0..DIRS.len()).prop_map(|dir| Op::Mkdir { dir }),
        1 => (0..DIRS.len()).prop_map(|dir| Op::Rmdir { dir }),
        2 => index.clone().prop_map(|handle| Op::Release { handle }),
        1 => index.prop_map(|handle| Op::Fsync { handle }),
        1 => Just(Op::Drain),
    ]
}

/// What a name or a node stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum What {
    File(usize),
    Dir(usize),
}

/// A node the kernel holds.
#[derive(Debug)]
struct Held {
    /// References (lookups) it holds.
    refs: u64,
    /// What the node stands for (never changes).
    what: What,
    /// The names the kernel reached it by (its dentries): given by a
    /// reply (lookup, create, mkdir, link), moved by renames, gone with
    /// unlink, rmdir or a rename over them. A node with none is
    /// unreachable by name (another name of its file, never looked up
    /// while it had one, may get a new node: the table only knows names it
    /// was shown).
    names: BTreeSet<String>,
}

/// The reference: namespace, file bytes, the kernel's references, handles.
#[derive(Default)]
struct Model {
    /// Every name ("d", "d/a", "a", ...; the root is implicit).
    names: BTreeMap<String, What>,
    /// Bytes of file `id`.
    files: Vec<Vec<u8>>,
    dirs: usize,
    /// The nodes the kernel holds.
    kernel: BTreeMap<u64, Held>,
    /// Open handles: (handle, node, file).
    handles: Vec<(u64, u64, usize)>,
}

impl Model {
    fn parent_of(path: &str) -> (&str, &str) {
        path.rsplit_once('/').unwrap_or(("", path))
    }

    /// The kernel took one more reference to `ino`, which stands for
    /// `what`, through `name`: a node the kernel holds always stands for
    /// the same thing.
    fn hold(&mut self, ino: u64, what: What, name: &str, step: &str) {
        let held = self.kernel.entry(ino).or_insert(Held {
            refs: 0,
            what,
            names: BTreeSet::new(),
        });
        assert_eq!(held.what, what, "{step}: node {ino} changed what it names");
        held.refs += 1;
        held.names.insert(name.to_string());
    }

    /// The node the kernel holds and reaches by a name for `what`, if any.
    fn reachable(&self, what: What) -> Option<u64> {
        self.kernel
            .iter()
            .find(|(_, h)| h.what == what && !h.names.is_empty())
            .map(|(&ino, _)| ino)
    }

    /// The name `path` (and every name under it) is gone for the kernel.
    fn drop_names(&mut self, path: &str) {
        let under = format!("{path}/");
        for held in self.kernel.values_mut() {
            held.names.retain(|n| n != path && !n.starts_with(&under));
        }
    }

    /// `from` (and every name under it) was renamed to `to`.
    fn move_names(&mut self, from: &str, to: &str) {
        self.drop_names(to);
        let under = format!("{from}/");
        for held in self.kernel.values_mut() {
            let moved: BTreeSet<String> = held
                .names
                .iter()
                .map(|n| match n.strip_prefix(&under) {
                    Some(rest) => format!("{to}/{rest}"),
                    None if n == from => to.to_string(),
                    None => n.clone(),
                })
                .collect();
            held.names = moved;
        }
    }
}

fn os(s: &str) -> &OsStr {
    OsStr::new(s)
}

fn bytes(seed: u8, offset: u64, len: u64) -> Vec<u8> {
    (offset..offset + len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

struct Harness {
    volume: Volume,
    capacity: Arc<dyn Backend>,
    model: Model,
    caller: Caller,
}

impl Harness {
    fn new() -> Harness {
        let fast: Arc<dyn Backend> = Arc::new(MemBackend::new());
        let capacity: Arc<dyn Backend> = Arc::new(MemBackend::new());
        let engine = Engine::open(
            fast,
            Arc::clone(&capacity),
            Arc::new(SystemClock::new()),
            small_config(),
        )
        .unwrap();
        Harness {
            volume: Volume::new(Arc::new(engine), None, None),
            capacity,
            model: Model::default(),
            caller: Caller {
                uid: rustix::process::geteuid().as_raw(),
                gid: rustix::process::getegid().as_raw(),
                umask: 0o022,
            },
        }
    }

    /// The node of `path`'s parent directory as the kernel would find it
    /// (a lookup, counted), or `None` if the model says it does not exist
    /// (and then the volume must say ENOENT).
    fn parent(&mut self, path: &str, step: &str) -> Option<(u64, String)> {
        let (dir, name) = Model::parent_of(path);
        if dir.is_empty() {
            return Some((ROOT, name.to_string()));
        }
        match self.model.names.get(dir).copied() {
            Some(what @ What::Dir(_)) => {
                let attr = self.volume.lookup(ROOT, os(dir)).unwrap();
                assert_eq!(attr.kind, StatKind::Dir, "{step}: {dir}");
                self.model.hold(attr.ino, what, dir, step);
                Some((attr.ino, name.to_string()))
            }
            _ => {
                let e = self.volume.lookup(ROOT, os(dir)).unwrap_err();
                assert_eq!(e.kind(), io::ErrorKind::NotFound, "{step}: {dir}");
                None
            }
        }
    }

    /// Look `path` up as the kernel would and check the answer against the
    /// model: the node it holds for that file, the file's length. Returns
    /// the node (one reference taken) and what it stands for.
    fn lookup(&mut self, path: &str, step: &str) -> Option<(u64, What)> {
        let (parent, name) = self.parent(path, step)?;
        let expected = self.model.names.get(path).copied();
        match (self.volume.lookup(parent, os(&name)), expected) {
            (Ok(attr), Some(what)) => {
                if let Some(held) = self.model.reachable(what) {
                    assert_eq!(attr.ino, held, "{step}: {path} resolves to another node");
                }
                match what {
                    What::File(id) => {
                        assert_eq!(attr.kind, StatKind::File, "{step}: {path}");
                        let len = self.model.files[id].len() as u64;
                        assert_eq!(attr.size, len, "{step}: length of {path}");
                    }
                    What::Dir(_) => assert_eq!(attr.kind, StatKind::Dir, "{step}: {path}"),
                }
                self.model.hold(attr.ino, what, path, step);
                Some((attr.ino, what))
            }
            (Err(e), None) => {
                assert_eq!(e.kind(), io::ErrorKind::NotFound, "{step}: {path}");
                None
            }
            (got, expected) => panic!("{step}: lookup {path}: {got:?}, model {expected:?}"),
        }
    }

    fn handle(&self, i: usize) -> Option<(u64, u64, usize)> {
        let h = &self.model.handles;
        (!h.is_empty()).then(|| h[i % h.len()])
    }

    fn apply(&mut self, op: &Op, step: &str) {
        match *op {
            Op::Lookup { path } => {
                self.lookup(PATHS[path], step);
            }
            Op::Forget { node, all } => {
                let held: Vec<(u64, u64)> = self
                    .model
                    .kernel
                    .iter()
                    .map(|(&ino, h)| (ino, h.refs))
                    .collect();
                if held.is_empty() {
                    return;
                }
                let (ino, n) = held[node % held.len()];
                let open = self.model.handles.iter().any(|&(_, i, _)| i == ino);
                // The kernel keeps a reference while a file is open.
                let forget = if all && !open { n } else { n - 1 };
                if forget == 0 {
                    return;
                }
                self.volume.forget(ino, forget);
                let entry = self.model.kernel.get_mut(&ino).unwrap();
                entry.refs -= forget;
                if entry.refs == 0 {
                    self.model.kernel.remove(&ino);
                }
            }
            Op::Getattr { node } => {
                let held: Vec<(u64, What)> = self
                    .model
                    .kernel
                    .iter()
                    .map(|(&ino, h)| (ino, h.what))
                    .collect();
                if let Some(&(ino, what)) = held.get(node % held.len().max(1)) {
                    self.check_node(ino, what, step);
                }
            }
            Op::Create { path } => {
                let path = PATHS[path];
                let Some((parent, name)) = self.parent(path, step) else {
                    return;
                };
                let result = self.volume.create(&self.caller, parent, os(&name), 0o644);
                if self.model.names.contains_key(path) {
                    assert!(result.is_err(), "{step}: create over existing {path}");
                    return;
                }
                let (attr, fh) = result.unwrap_or_else(|e| panic!("{step}: create {path}: {e}"));
                assert_eq!((attr.kind, attr.size), (StatKind::File, 0), "{step}");
                assert_eq!(attr.perm, 0o644, "{step}: mode less the umask");
                let id = self.model.files.len();
                self.model.files.push(Vec::new());
                self.model.names.insert(path.to_string(), What::File(id));
                self.model.hold(attr.ino, What::File(id), path, step);
                self.model.handles.push((fh, attr.ino, id));
            }
            Op::Open { path } => {
                let path = PATHS[path];
                let Some((ino, What::File(id))) = self.lookup(path, step) else {
                    return;
                };
                let fh = self
                    .volume
                    .open(ino, O_RDWR)
                    .unwrap_or_else(|e| panic!("{step}: open {path}: {e}"));
                self.model.handles.push((fh, ino, id));
            }
            Op::Write {
                handle,
                offset,
                len,
                seed,
            } => {
                let Some((fh, ino, id)) = self.handle(handle) else {
                    return;
                };
                let data = bytes(seed, offset, len);
                self.volume
                    .write(ino, fh, offset, &data, false)
                    .unwrap_or_else(|e| panic!("{step}: write: {e}"));
                let file = &mut self.model.files[id];
                let end = (offset + len) as usize;
                if file.len() < end {
                    file.resize(end, 0);
                }
                file[offset as usize..end].copy_from_slice(&data);
            }
            Op::Read {
                handle,
                offset,
                len,
            } => {
                let Some((fh, _, id)) = self.handle(handle) else {
                    return;
                };
                let got = self
                    .volume
                    .read(fh, offset, len)
                    .unwrap_or_else(|e| panic!("{step}: read: {e}"));
                let file = &self.model.files[id];
                let start = (offset as usize).min(file.len());
                let end = ((offset + len) as usize).min(file.len());
                assert!(
                    got == file[start..end],
                    "{step}: read file {id} at {offset}+{len}: {} bytes, model {}",
                    got.len(),
                    end - start
                );
            }
            Op::TruncatePath { path, size } => {
                let path = PATHS[path];
                let Some((ino, What::File(id))) = self.lookup(path, step) else {
                    return;
                };
                let changes = AttrChanges {
                    size: Some(size),
                    ..AttrChanges::default()
                };
                let attr = self
                    .volume
                    .setattr(ino, None, &changes)
                    .unwrap_or_else(|e| panic!("{step}: truncate {path}: {e}"));
                assert_eq!(attr.size, size, "{step}");
                self.model.files[id].resize(size as usize, 0);
            }
            Op::TruncateHandle { handle, size } => {
                let Some((fh, ino, id)) = self.handle(handle) else {
                    return;
                };
                let changes = AttrChanges {
                    size: Some(size),
                    ..AttrChanges::default()
                };
                let attr = self
                    .volume
                    .setattr(ino, Some(fh), &changes)
                    .unwrap_or_else(|e| panic!("{step}: ftruncate: {e}"));
                assert_eq!(attr.size, size, "{step}");
                self.model.files[id].resize(size as usize, 0);
            }
            Op::Unlink { path } => {
                let path = PATHS[path];
                let Some((parent, name)) = self.parent(path, step) else {
                    return;
                };
                let result = self.volume.unlink(parent, os(&name));
                match self.model.names.get(path) {
                    Some(What::File(_)) => {
                        result.unwrap_or_else(|e| panic!("{step}: unlink {path}: {e}"));
                        self.model.names.remove(path);
                        self.model.drop_names(path);
                    }
                    _ => assert!(result.is_err(), "{step}: unlink of missing {path}"),
                }
            }
            Op::Rename {
                from,
                to,
                no_replace,
            } => self.rename_file(PATHS[from], PATHS[to], no_replace, step),
            Op::RenameDir { from, no_replace } => {
                let (from, to) = (DIRS[from], DIRS[1 - from]);
                let Some(&what @ What::Dir(_)) = self.model.names.get(from) else {
                    return;
                };
                let exists = self.model.names.contains_key(to);
                if exists && !no_replace {
                    return;
                }
                let flags = if no_replace { RENAME_NOREPLACE } else { 0 };
                let result = self.volume.rename(ROOT, os(from), ROOT, os(to), flags);
                if exists {
                    let e = result.unwrap_err();
                    assert_eq!(e.kind(), io::ErrorKind::AlreadyExists, "{step}");
                    return;
                }
                result.unwrap_or_else(|e| panic!("{step}: rename {from} {to}: {e}"));
                let prefix = format!("{from}/");
                let moved: Vec<(String, What)> = self
                    .model
                    .names
                    .iter()
                    .filter(|(k, _)| k.starts_with(&prefix))
                    .map(|(k, &w)| (k.clone(), w))
                    .collect();
                self.model.names.remove(from);
                self.model.names.insert(to.to_string(), what);
                self.model.move_names(from, to);
                for (k, w) in moved {
                    self.model.names.remove(&k);
                    self.model
                        .names
                        .insert(format!("{to}/{}", &k[prefix.len()..]), w);
                }
            }
            Op::Link { from, to } => {
                let (from, to) = (PATHS[from], PATHS[to]);
                let Some((ino, what @ What::File(_))) = self.lookup(from, step) else {
                    return;
                };
                let Some((parent, name)) = self.parent(to, step) else {
                    return;
                };
                let result = self.volume.link(ino, parent, os(&name));
                if self.model.names.contains_key(to) {
                    let e = result.unwrap_err();
                    assert_eq!(
                        e.kind(),
                        io::ErrorKind::AlreadyExists,
                        "{step}: link to {to}"
                    );
                    return;
                }
                let attr = result.unwrap_or_else(|e| panic!("{step}: link {from} {to}: {e}"));
                assert_eq!(attr.ino, ino, "{step}: a link answers the existing node");
                self.model.names.insert(to.to_string(), what);
                self.model.hold(ino, what, to, step);
                let names = self.model.names.values().filter(|&&w| w == what).count();
                assert_eq!(attr.nlink as usize, names, "{step}: link count");
            }
            Op::Mkdir { dir } => {
                let dir = DIRS[dir];
                let result = self.volume.mkdir(&self.caller, ROOT, os(dir), 0o777);
                if self.model.names.contains_key(dir) {
                    assert!(result.is_err(), "{step}: mkdir over existing {dir}");
                    return;
                }
                let attr = result.unwrap_or_else(|e| panic!("{step}: mkdir {dir}: {e}"));
                assert_eq!((attr.kind, attr.perm), (StatKind::Dir, 0o755), "{step}");
                let what = What::Dir(self.model.dirs);
                self.model.dirs += 1;
                self.model.names.insert(dir.to_string(), what);
                self.model.hold(attr.ino, what, dir, step);
            }
            Op::Rmdir { dir } => {
                let dir = DIRS[dir];
                let result = self.volume.rmdir(ROOT, os(dir));
                let prefix = format!("{dir}/");
                let empty = !self.model.names.keys().any(|k| k.starts_with(&prefix));
                match self.model.names.get(dir) {
                    Some(What::Dir(_)) if empty => {
                        result.unwrap_or_else(|e| panic!("{step}: rmdir {dir}: {e}"));
                        self.model.names.remove(dir);
                        self.model.drop_names(dir);
                    }
                    _ => assert!(result.is_err(), "{step}: rmdir {dir}"),
                }
            }
            Op::Release { handle } => {
                let Some((fh, ino, _)) = self.handle(handle) else {
                    return;
                };
                self.volume.release(ino, fh);
                let i = handle % self.model.handles.len();
                self.model.handles.remove(i);
            }
            Op::Fsync { handle } => {
                if let Some((fh, _, _)) = self.handle(handle) {
                    self.volume
                        .fsync(fh)
                        .unwrap_or_else(|e| panic!("{step}: fsync: {e}"));
                }
            }
            Op::Drain => self.volume.engine().drain().unwrap(),
        }
    }

    fn rename_file(&mut self, from: &str, to: &str, no_replace: bool, step: &str) {
        let Some((from_parent, from_name)) = self.parent(from, step) else {
            return;
        };
        let Some((to_parent, to_name)) = self.parent(to, step) else {
            return;
        };
        let source = self.model.names.get(from).copied();
        let target = self.model.names.get(to).copied();
        let flags = if no_replace { RENAME_NOREPLACE } else { 0 };
        let result =
            self.volume
                .rename(from_parent, os(&from_name), to_parent, os(&to_name), flags);
        match (source, target) {
            (Some(What::File(_)), Some(_)) if no_replace => {
                let e = result.unwrap_err();
                assert_eq!(e.kind(), io::ErrorKind::AlreadyExists, "{step}: noreplace");
            }
            (Some(What::File(_)), Some(What::Dir(_))) => {
                assert!(result.is_err(), "{step}: a file over a directory");
            }
            (Some(w @ What::File(_)), target) => {
                result.unwrap_or_else(|e| panic!("{step}: rename {from} {to}: {e}"));
                // Two names of one file (or one name): nothing happens.
                if target != Some(w) {
                    self.model.names.remove(from);
                    self.model.names.insert(to.to_string(), w);
                    self.model.move_names(from, to);
                }
            }
            _ => assert!(result.is_err(), "{step}: rename of missing {from}"),
        }
    }

    /// Node `ino`, held by the kernel for `what`, answers getattr while
    /// the kernel reaches it by a name or an open handle is on it, with
    /// its length.
    fn check_node(&self, ino: u64, what: What, step: &str) {
        let open = self.model.handles.iter().any(|&(_, i, _)| i == ino);
        let named = self
            .model
            .kernel
            .get(&ino)
            .is_some_and(|h| !h.names.is_empty());
        if !named && !open {
            return;
        }
        let attr = self
            .volume
            .getattr(ino, None)
            .unwrap_or_else(|e| panic!("{step}: held node {ino} ({what:?}) lost: {e}"));
        assert_eq!(attr.ino, ino, "{step}");
        match what {
            What::File(id) => {
                assert_eq!(attr.kind, StatKind::File, "{step}: node {ino}");
                let len = self.model.files[id].len() as u64;
                assert_eq!(attr.size, len, "{step}: length of node {ino}");
            }
            What::Dir(_) => assert_eq!(attr.kind, StatKind::Dir, "{step}: node {ino}"),
        }
    }

    /// The checks after every step.
    fn check(&self, step: &str) {
        for (&ino, held) in &self.model.kernel {
            for name in &held.names {
                // The model's own bookkeeping: a dentry names its file.
                assert_eq!(
                    self.model.names.get(name),
                    Some(&held.what),
                    "{step}: {name}"
                );
            }
            self.check_node(ino, held.what, step);
        }
        assert_eq!(
            self.volume.nodes(),
            1 + self.model.kernel.len(),
            "{step}: the table holds the root and the held nodes only"
        );
    }

    /// Release and forget everything, drain, and compare the capacity tier
    /// with the model.
    fn finish(mut self) {
        for (fh, ino, _) in std::mem::take(&mut self.model.handles) {
            self.volume.release(ino, fh);
        }
        for (ino, held) in std::mem::take(&mut self.model.kernel) {
            self.volume.forget(ino, held.refs);
        }
        assert_eq!(self.volume.nodes(), 1, "only the root is left");
        self.volume.engine().drain().unwrap();
        for (name, what) in &self.model.names {
            let What::File(id) = *what else { continue };
            let file = self
                .capacity
                .open(&RelPath::new(name).unwrap(), OpenOptions::default())
                .unwrap();
            let mut buf = vec![0u8; file.len().unwrap() as usize];
            let n = file.read_at(&mut buf, 0).unwrap();
            assert!(
                buf[..n] == self.model.files[id][..],
                "capacity tier's {name}: {n} bytes, model {}",
                self.model.files[id].len()
            );
        }
    }
}

fn run(ops: &[Op]) {
    let mut h = Harness::new();
    for (i, op) in ops.iter().enumerate() {
        let step = format!("step {i} {op:?}");
        h.apply(op, &step);
        h.check(&step);
    }
    h.finish();
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn volume_matches_the_reference_model(ops in prop::collection::vec(op_strategy(), 1..120)) {
        run(&ops);
    }
}

/// A fixed sequence through the cases the model test must reach: an
/// unlinked open file keeps its bytes, a hard link shares them, a rename
/// over an open file leaves it readable, and a forget of a held node does
/// not drop it.
#[test]
fn unlinked_and_linked_files_keep_their_bytes() {
    use Op::*;
    run(&[
        Create { path: 0 },
        Write {
            handle: 0,
            offset: 0,
            len: 5000,
            seed: 1,
        },
        Link { from: 0, to: 1 },
        Open { path: 1 },
        Write {
            handle: 1,
            offset: 100,
            len: 10,
            seed: 2,
        },
        Read {
            handle: 0,
            offset: 0,
            len: 6000,
        },
        Unlink { path: 0 },
        Read {
            handle: 1,
            offset: 0,
            len: 6000,
        },
        Create { path: 2 },
        Write {
            handle: 2,
            offset: 0,
            len: 300,
            seed: 3,
        },
        Rename {
            from: 2,
            to: 1,
            no_replace: false,
        },
        Read {
            handle: 0,
            offset: 0,
            len: 6000,
        },
        TruncateHandle {
            handle: 0,
            size: 17,
        },
        Getattr { node: 0 },
        Forget { node: 0, all: true },
        Drain,
        Read {
            handle: 1,
            offset: 0,
            len: 6000,
        },
        Lookup { path: 1 },
        Mkdir { dir: 0 },
        Create { path: 3 },
        RenameDir {
            from: 0,
            no_replace: true,
        },
        Lookup { path: 6 },
        Rmdir { dir: 1 },
    ]);
}
