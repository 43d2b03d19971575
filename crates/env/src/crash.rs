//! [`CrashBackend`]: an in-memory tier that keeps written and synced state
//! apart and can crash, dropping everything not yet synced.
//!
//! The model is the strict reading of POSIX durability:
//! * **File data** (bytes and length) becomes durable only by `sync_data`
//!   of that file. Each file keeps its current bytes, its synced bytes and
//!   the list of changes (writes, length changes) made since its last sync;
//!   a sync applies that list to the synced bytes.
//! * **Names** become durable only by `sync_dir` of the directory holding
//!   them: creating, removing or renaming an entry changes the current tree
//!   only; `sync_dir(d)` copies `d`'s entries (names → file or directory
//!   identity) into the synced state. A rename between two directories needs
//!   both synced. Directories keep their identity across renames, so a
//!   renamed directory brings its synced entries along. A file whose data was
//!   synced but whose name was not vanishes at a crash.
//! * **A crash** ([`CrashBackend::crash`]) rebuilds the tree from the synced
//!   entries, starting at the root (a directory reachable there but never
//!   synced itself comes back empty; a file or directory reachable twice,
//!   which only partial syncs of a cross-directory rename can produce, is
//!   kept at its first place in name order), and resets every surviving file
//!   to its synced bytes. Every handle opened before the crash fails from
//!   then on ("handle from before a crash"), so a test cannot read reverted
//!   bytes through one by mistake.
//! * **Torn writes** ([`CrashBackend::set_torn_writes`], off by default): at
//!   a crash a surviving file keeps a seeded-random prefix of its unsynced
//!   changes, counted in bytes written: changes are replayed in order onto
//!   the synced bytes until the budget runs out, the last write cut short.
//!   For an append-only log this keeps a random prefix of the unsynced tail
//!   (torn log tails); for preallocated files it tears in-place writes the
//!   same way. A write that lies within one [`SECTOR_BYTES`]-aligned sector
//!   is never cut short: the device writes a sector whole or not at all (the
//!   assumption PostgreSQL makes for its 512-byte `pg_control`), so the
//!   write the budget runs out in is then left out whole. Longer writes tear
//!   at any byte, more finely than a device would.
//! * **Sync points**: every `sync_data` and `sync_dir` call is a numbered
//!   sync point (1, 2, … since the backend was created; calls on stale
//!   handles or while crashed do not count). [`CrashBackend::crash_at`]`(n)`
//!   arms a crash *instead of* sync point `n`, [`CrashBackend::crash_after`]
//!   `(n)` one right *after* it (the sync took effect). Either way that call
//!   returns an error and the backend stays **crashed**: every operation
//!   fails until [`CrashBackend::restart`], so threads of the dead workload
//!   cannot change the post-crash state. A test runs its workload once to
//!   count [`CrashBackend::sync_points`], then reruns it on a fresh backend
//!   crashing at each point in turn. [`CrashBackend::halt`] stops it the
//!   same way at once, between any two calls, with or without the loss of
//!   the unsynced state (a power cut, or a kill of the process using it).
//! * **Extended attributes** (by path: `get_xattr`, `set_xattr`,
//!   `list_xattr`, `remove_xattr`; by an open file's handle, its inode
//!   whatever names it now: `set_xattr`, `remove_xattr`) are kept per file
//!   and per directory, current and synced, with Linux's answers: ENODATA
//!   for a missing one, EEXIST / ENODATA for `XattrFlags::CreateOnly` /
//!   `ReplaceOnly`, ERANGE for an empty name or one over 255 bytes, E2BIG
//!   for a value over 64 KiB, EOPNOTSUPP outside the `user.`, `trusted.`,
//!   `security.` and `system.` namespaces; names list sorted. Durability
//!   is the strict reading, the same as for bytes and names: a change of a
//!   file's xattrs becomes durable only at that file's next `sync_data`
//!   (of any handle of it), a directory's at its `sync_dir`; a crash
//!   reverts each surviving file's and directory's xattrs to their synced
//!   state, whole (torn writes never keep part of an xattr change). Real
//!   file systems journal xattrs as metadata and may keep them sooner; a
//!   test that passes here does not rely on that. (The engine's held
//!   marks, `user.sluice.held`, are what this models them for.)
//! * **Hard links** within one directory (`hard_link`; another directory
//!   is EXDEV, as BeeGFS answers): both names are entries of that one
//!   directory, durable at its `sync_dir` like any other, and a crash keeps
//!   every synced name of a file in one directory. (Across directories the
//!   rebuild keeps a file at its first place only: that is how it reads a
//!   cross-directory rename cut in half, which one-directory links never
//!   look like.)
//! * **Inode numbers**, opt-in ([`CrashBackend::set_inode_numbers`]): `stat`
//!   of a path and of an open handle answer the kind, length, link count and
//!   an inode number that stays with the file or directory across renames
//!   and crashes (files `2·id + 2`, directories `2·id + 1`, as the memory
//!   tier numbers them); mode, owner and times are not modelled (0o644 or
//!   0o755, root, the epoch). Off (the default), `stat` fails with
//!   EOPNOTSUPP, so the engine runs as over a tier that tells no identity.
//! * **Other attributes, symbolic links** are not modelled (their
//!   durability is not what this backend tests): `set_attr`, `symlink`,
//!   `mknod` and `read_link` keep the trait's default and fail with
//!   EOPNOTSUPP; `read_dir_all` is `read_dir`'s entries.
//!
//! Invariants: after a crash, current = synced for every file and every
//! directory (entries and xattrs); a file's synced bytes with its change
//! list replayed equal its current bytes; `used_bytes` is the sum of the
//! current lengths of the files kept (a file is dropped only when no
//! current or synced entry names it and no handle has it open; xattrs
//! count for nothing); `used_bytes <= capacity_bytes`.
//!
//! One mutex guards the whole state (poison-tolerant, see `lock` in lib.rs):
//! the backend is for tests, where simplicity beats concurrency.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::UNIX_EPOCH;

use rustix::io::Errno;

use crate::memory::{end_index, read_slice, MEMORY_CAPACITY_DEFAULT};
use crate::namespace::{DirNode, Node, Tree, ROOT_DIR_ID};
use crate::{
    errno_error, lock, Backend, BackendFile, DirEntry, Metadata, OpenOptions, RelPath, SpaceInfo,
    Stat, StatKind, XattrFlags,
};

type FileId = u64;

/// A synced directory entry: which file or directory a name stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SyncedEntry {
    File(FileId),
    Dir(u64),
}

/// The unit a device writes whole (module docs, torn writes): a write
/// within one aligned sector of this size is never torn.
pub const SECTOR_BYTES: usize = 512;

/// A change to a file since its last sync, kept to replay at a sync (and
/// partially at a crash with torn writes).
#[derive(Debug)]
enum Change {
    Write {
        offset: usize,
        data: Vec<u8>,
    },
    SetLen(usize),
    /// A `fallocate` (applied whole: it is one metadata change).
    Allocate {
        mode: crate::Allocate,
        offset: u64,
        len: u64,
    },
}

impl Change {
    /// Applies the change to `data`; a write only its first `limit` bytes.
    fn apply(&self, data: &mut Vec<u8>, limit: usize) {
        match self {
            Change::Write {
                offset,
                data: bytes,
            } => {
                let count = bytes.len().min(limit);
                if count == 0 {
                    return;
                }
                let end = offset + count;
                if data.len() < end {
                    data.resize(end, 0);
                }
                data[*offset..end].copy_from_slice(&bytes[..count]);
            }
            Change::SetLen(len) => data.resize(*len, 0),
            Change::Allocate { mode, offset, len } => {
                // It worked on the current bytes; on these, which are a
                // prefix of their history, it may not (a collapse past
                // their end): then it is as if it never ran.
                let _ = mode.apply(data, *offset, *len, |data, n| {
                    data.resize(n, 0);
                    Ok(())
                });
            }
        }
    }
}

/// Longest xattr name Linux takes (`XATTR_NAME_MAX`).
const XATTR_NAME_MAX: usize = 255;

/// Largest xattr value Linux takes (`XATTR_SIZE_MAX`).
const XATTR_SIZE_MAX: usize = 64 * 1024;

/// The name spaces Linux knows; a name outside them is EOPNOTSUPP.
const XATTR_NAMESPACES: [&str; 4] = ["user.", "trusted.", "security.", "system."];

/// Refuses a name (and a value, when one is set) as Linux's `setxattr`
/// and `getxattr` do, so a test cannot pass here with a name a real tier
/// would refuse.
fn check_xattr(name: &str, value: Option<&[u8]>) -> Result<(), Errno> {
    if name.is_empty() || name.len() > XATTR_NAME_MAX {
        return Err(Errno::RANGE);
    }
    if !XATTR_NAMESPACES
        .iter()
        .any(|space| name.len() > space.len() && name.starts_with(space))
    {
        return Err(Errno::OPNOTSUPP);
    }
    if value.is_some_and(|value| value.len() > XATTR_SIZE_MAX) {
        return Err(Errno::TOOBIG);
    }
    Ok(())
}

/// The extended attributes of one file or directory: as they are now,
/// and as its last sync left them (what a crash goes back to).
#[derive(Clone, Debug, Default)]
struct Xattrs {
    current: BTreeMap<String, Vec<u8>>,
    synced: BTreeMap<String, Vec<u8>>,
}

impl Xattrs {
    fn get(&self, name: &str) -> Result<Vec<u8>, Errno> {
        check_xattr(name, None)?;
        self.current.get(name).cloned().ok_or(Errno::NODATA)
    }

    fn set(&mut self, name: &str, value: &[u8], flags: XattrFlags) -> Result<(), Errno> {
        check_xattr(name, Some(value))?;
        let exists = self.current.contains_key(name);
        match flags {
            XattrFlags::CreateOnly if exists => return Err(Errno::EXIST),
            XattrFlags::ReplaceOnly if !exists => return Err(Errno::NODATA),
            _ => {}
        }
        self.current.insert(name.to_string(), value.to_vec());
        Ok(())
    }

    fn remove(&mut self, name: &str) -> Result<(), Errno> {
        check_xattr(name, None)?;
        self.current.remove(name).map(drop).ok_or(Errno::NODATA)
    }

    fn list(&self) -> Vec<String> {
        self.current.keys().cloned().collect()
    }

    fn sync(&mut self) {
        self.synced.clone_from(&self.current);
    }

    fn revert(&mut self) {
        self.current.clone_from(&self.synced);
    }
}

#[derive(Debug, Default)]
struct CrashFile {
    current: Vec<u8>,
    synced: Vec<u8>,
    /// Changes since the last sync, oldest first.
    unsynced: Vec<Change>,
    /// Bytes written by the `unsynced` writes.
    unsynced_bytes: u64,
    open_handles: usize,
    /// Durable, like the bytes, at the file's next sync.
    xattrs: Xattrs,
}

impl CrashFile {
    fn sync(&mut self) {
        for change in self.unsynced.drain(..) {
            change.apply(&mut self.synced, usize::MAX);
        }
        self.unsynced_bytes = 0;
        self.xattrs.sync();
        debug_assert_eq!(self.synced.len(), self.current.len());
    }
}

/// What a path's extended attributes belong to.
#[derive(Clone, Copy, Debug)]
enum XattrOwner {
    File(FileId),
    Dir(u64),
}

/// Where an armed crash happens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CrashPoint {
    /// Instead of sync point `n`.
    Before(u64),
    /// Right after sync point `n` took effect.
    After(u64),
}

#[derive(Debug)]
struct CrashState {
    tree: Tree<FileId>,
    /// Synced entries of each directory, by directory id.
    synced_dirs: HashMap<u64, BTreeMap<String, SyncedEntry>>,
    files: HashMap<FileId, CrashFile>,
    /// Extended attributes of directories, by directory id (a directory
    /// that has none has no entry); durable at the directory's `sync_dir`.
    dir_xattrs: HashMap<u64, Xattrs>,
    next_file_id: FileId,
    /// Bumped at every crash; handles carry the epoch they were opened in.
    epoch: u64,
    sync_points: u64,
    armed: Option<CrashPoint>,
    /// The sync point at which an armed crash fired, until `restart`.
    crashed_at: Option<u64>,
    crashes: u64,
    torn_writes: bool,
    /// `stat` answers (kind, length, links, inode number) when set.
    inode_numbers: bool,
    rng_state: u64,
    capacity_bytes: u64,
    used_bytes: u64,
}

/// SplitMix64 step: the same generator the device models use.
fn next_random(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Builds directory `id` of the post-crash tree from the synced entries,
/// skipping directories already placed and files already placed in
/// another directory (`placed_files`: file → the directory it is in; a
/// file's other names in the same directory are hard links, kept).
fn rebuild_dir(
    id: u64,
    synced_dirs: &HashMap<u64, BTreeMap<String, SyncedEntry>>,
    files: &HashMap<FileId, CrashFile>,
    placed_files: &mut HashMap<FileId, u64>,
    placed_dirs: &mut HashSet<u64>,
) -> DirNode<FileId> {
    placed_dirs.insert(id);
    let mut dir = DirNode::new(id);
    let Some(entries) = synced_dirs.get(&id) else {
        return dir;
    };
    for (name, entry) in entries {
        match *entry {
            SyncedEntry::File(file) => {
                if files.contains_key(&file) && *placed_files.entry(file).or_insert(id) == id {
                    dir.entries.insert(name.clone(), Node::File(file));
                }
            }
            SyncedEntry::Dir(child) => {
                // The placed set also breaks cycles, which partial syncs of
                // directory renames can create in the synced entries.
                if !placed_dirs.contains(&child) {
                    let node = rebuild_dir(child, synced_dirs, files, placed_files, placed_dirs);
                    dir.entries.insert(name.clone(), Node::Dir(node));
                }
            }
        }
    }
    dir
}

/// The synced form of a directory's current entries.
fn synced_entries(dir: &DirNode<FileId>) -> BTreeMap<String, SyncedEntry> {
    dir.entries
        .iter()
        .map(|(name, node)| {
            let entry = match node {
                Node::File(file) => SyncedEntry::File(*file),
                Node::Dir(child) => SyncedEntry::Dir(child.id),
            };
            (name.clone(), entry)
        })
        .collect()
}

/// Every directory of a tree, with its entries in synced form.
fn snapshot(dir: &DirNode<FileId>, into: &mut HashMap<u64, BTreeMap<String, SyncedEntry>>) {
    into.insert(dir.id, synced_entries(dir));
    for node in dir.entries.values() {
        if let Node::Dir(child) = node {
            snapshot(child, into);
        }
    }
}

/// How many entries of a tree name `file` (its link count).
fn names_of(dir: &DirNode<FileId>, file: FileId) -> u32 {
    dir.entries
        .values()
        .map(|node| match node {
            Node::File(id) => u32::from(*id == file),
            Node::Dir(child) => names_of(child, file),
        })
        .sum()
}

/// Files named anywhere in a tree.
fn files_in(dir: &DirNode<FileId>, into: &mut HashSet<FileId>) {
    for node in dir.entries.values() {
        match node {
            Node::File(file) => {
                into.insert(*file);
            }
            Node::Dir(child) => files_in(child, into),
        }
    }
}

impl CrashState {
    fn new(capacity_bytes: u64) -> CrashState {
        let mut synced_dirs = HashMap::new();
        synced_dirs.insert(ROOT_DIR_ID, BTreeMap::new());
        CrashState {
            tree: Tree::new(),
            synced_dirs,
            files: HashMap::new(),
            dir_xattrs: HashMap::new(),
            next_file_id: 0,
            epoch: 0,
            sync_points: 0,
            armed: None,
            crashed_at: None,
            crashes: 0,
            torn_writes: false,
            inode_numbers: false,
            rng_state: 0,
            capacity_bytes,
            used_bytes: 0,
        }
    }

    /// Error unless the backend is up.
    fn check_up(&self, what: impl fmt::Display) -> io::Result<()> {
        match self.crashed_at {
            None => Ok(()),
            Some(n) => Err(io::Error::other(format!(
                "crash-test: {what}: the backend crashed at sync point {n}; call restart()"
            ))),
        }
    }

    /// Error unless a handle of `epoch` is still valid.
    fn check_handle(&self, epoch: u64, what: impl fmt::Display) -> io::Result<()> {
        if epoch == self.epoch {
            Ok(())
        } else {
            Err(io::Error::other(format!(
                "crash-test: {what}: handle from before a crash"
            )))
        }
    }

    /// Counts a sync point and fires an armed crash "before" it. `Ok(n)`:
    /// the sync may proceed as point `n`.
    fn begin_sync(&mut self, what: &dyn fmt::Display) -> io::Result<u64> {
        self.sync_points += 1;
        let n = self.sync_points;
        if self.armed == Some(CrashPoint::Before(n)) {
            return Err(self.fire(n, "instead of", what));
        }
        Ok(n)
    }

    /// Fires an armed crash "after" sync point `n`, which took effect.
    fn end_sync(&mut self, n: u64, what: &dyn fmt::Display) -> io::Result<()> {
        if self.armed == Some(CrashPoint::After(n)) {
            return Err(self.fire(n, "right after", what));
        }
        Ok(())
    }

    fn fire(&mut self, n: u64, when: &str, what: &dyn fmt::Display) -> io::Error {
        self.go_down(n, true);
        io::Error::other(format!("crash-test: {what}: crashed {when} sync point {n}"))
    }

    /// Down at sync point `n` until a restart, an armed crash cancelled:
    /// with `power_cut` back at the synced state ([`CrashState::crash`]),
    /// without, every change kept and every handle closed (a kill of the
    /// process using the tier).
    fn go_down(&mut self, n: u64, power_cut: bool) {
        self.armed = None;
        if power_cut {
            self.crash();
        } else {
            self.epoch += 1;
            self.crashes += 1;
            for file in self.files.values_mut() {
                file.open_handles = 0;
            }
            self.collect_garbage();
        }
        self.crashed_at = Some(n);
    }

    /// Reverts to the synced state (see the module doc).
    fn crash(&mut self) {
        self.epoch += 1;
        self.crashes += 1;
        let mut placed_files = HashMap::new();
        let mut placed_dirs = HashSet::new();
        let root = rebuild_dir(
            ROOT_DIR_ID,
            &self.synced_dirs,
            &self.files,
            &mut placed_files,
            &mut placed_dirs,
        );
        self.files.retain(|id, _| placed_files.contains_key(id));
        let torn_writes = self.torn_writes;
        // In the order of the files' ids, so a seed tears the same
        // prefixes every time (a map's order differs from run to run).
        let mut files: Vec<(&FileId, &mut CrashFile)> = self.files.iter_mut().collect();
        files.sort_unstable_by_key(|&(id, _)| *id);
        for (_, file) in files {
            if torn_writes && !file.unsynced.is_empty() {
                let mut budget = next_random(&mut self.rng_state) % (file.unsynced_bytes + 1);
                let mut data = std::mem::take(&mut file.synced);
                for change in &file.unsynced {
                    match change {
                        Change::Write {
                            offset,
                            data: bytes,
                        } => {
                            let len = bytes.len() as u64;
                            if budget < len {
                                let one_sector = bytes.is_empty()
                                    || offset / SECTOR_BYTES
                                        == (offset + bytes.len() - 1) / SECTOR_BYTES;
                                let kept = if one_sector { 0 } else { budget as usize };
                                change.apply(&mut data, kept);
                                break;
                            }
                            change.apply(&mut data, bytes.len());
                            budget -= len;
                        }
                        Change::SetLen(_) | Change::Allocate { .. } => change.apply(&mut data, 0),
                    }
                }
                file.synced = data;
            }
            file.current = file.synced.clone();
            file.unsynced.clear();
            file.unsynced_bytes = 0;
            file.open_handles = 0;
            file.xattrs.revert();
        }
        // A directory that did not come back takes its attributes along;
        // one that did has those it had at its last sync.
        self.dir_xattrs.retain(|id, _| placed_dirs.contains(id));
        for xattrs in self.dir_xattrs.values_mut() {
            xattrs.revert();
        }
        self.tree.root = root;
        // What survived a crash is on the media: it is the synced state.
        self.synced_dirs.clear();
        snapshot(&self.tree.root, &mut self.synced_dirs);
        self.recount();
    }

    fn recount(&mut self) {
        self.used_bytes = self
            .files
            .values()
            .map(|file| file.current.len() as u64)
            .sum();
    }

    /// Drops files that nothing names (current tree, any synced entry) and
    /// no handle has open.
    fn collect_garbage(&mut self) {
        let mut named = HashSet::new();
        files_in(&self.tree.root, &mut named);
        for entries in self.synced_dirs.values() {
            for entry in entries.values() {
                if let SyncedEntry::File(file) = entry {
                    named.insert(*file);
                }
            }
        }
        let before = self.files.len();
        self.files
            .retain(|id, file| file.open_handles > 0 || named.contains(id));
        if self.files.len() != before {
            self.recount();
        }
    }

    fn file(&mut self, id: FileId) -> Result<&mut CrashFile, Errno> {
        // A valid handle's file is never collected (it is open); a missing
        // one would be a bug of this module, reported rather than panicked.
        self.files.get_mut(&id).ok_or(Errno::STALE)
    }

    /// What `path` names, for its extended attributes.
    fn xattr_owner(&self, path: &RelPath) -> Result<XattrOwner, Errno> {
        match self.tree.lookup(path)? {
            (_, Some(file)) => Ok(XattrOwner::File(*file)),
            (_, None) => Ok(XattrOwner::Dir(self.tree.dir(path)?.id)),
        }
    }

    /// The extended attributes of `owner`, to read (`None`: a directory
    /// that never had one).
    fn xattrs(&mut self, owner: XattrOwner) -> Result<Option<&Xattrs>, Errno> {
        match owner {
            XattrOwner::File(id) => Ok(Some(&self.file(id)?.xattrs)),
            XattrOwner::Dir(id) => Ok(self.dir_xattrs.get(&id)),
        }
    }

    /// The extended attributes of `owner`, to change.
    fn xattrs_mut(&mut self, owner: XattrOwner) -> Result<&mut Xattrs, Errno> {
        match owner {
            XattrOwner::File(id) => Ok(&mut self.file(id)?.xattrs),
            XattrOwner::Dir(id) => Ok(self.dir_xattrs.entry(id).or_default()),
        }
    }

    /// The modelled attributes of file `file` (`Some`) or directory
    /// `dir_id`: module doc, "Inode numbers". EOPNOTSUPP unless they are
    /// modelled.
    fn stat_of(&mut self, file: Option<FileId>, dir_id: u64) -> Result<Stat, Errno> {
        if !self.inode_numbers {
            return Err(Errno::OPNOTSUPP);
        }
        let (kind, len, ino, nlink, mode) = match file {
            Some(id) => {
                let len = self.file(id)?.current.len() as u64;
                let names = names_of(&self.tree.root, id);
                (StatKind::File, len, id * 2 + 2, names, 0o644)
            }
            None => (StatKind::Dir, 0, dir_id * 2 + 1, 1, 0o755),
        };
        Ok(Stat {
            kind,
            len,
            blocks: len.div_ceil(512),
            mode,
            uid: 0,
            gid: 0,
            nlink,
            ino,
            dev: 0,
            atime: UNIX_EPOCH,
            mtime: UNIX_EPOCH,
            ctime: UNIX_EPOCH,
            blksize: 4096,
            rdev: 0,
        })
    }

    /// Resizes file `id`'s current bytes to `new_len` within the capacity
    /// (the caller records the change).
    fn resize(&mut self, id: FileId, new_len: usize) -> Result<(), Errno> {
        let old_len = self.file(id)?.current.len();
        let used = self.used_bytes.saturating_sub(old_len as u64) + new_len as u64;
        if new_len > old_len && used > self.capacity_bytes {
            return Err(Errno::NOSPC);
        }
        let file = self.file(id)?;
        if new_len > old_len && file.current.try_reserve(new_len - old_len).is_err() {
            return Err(Errno::NOMEM);
        }
        file.current.resize(new_len, 0);
        self.used_bytes = used;
        Ok(())
    }
}

/// The oracle of the crash tests built on this backend: a file's bytes as
/// they were when a sync of them was acknowledged, and which of them (and
/// whether its length) the workload changed since, told by
/// [`Acked::write`] and [`Acked::truncate`]. After a crash the file must
/// keep every byte not changed since, and its length unless changed.
#[derive(Clone, Debug)]
pub struct Acked {
    bytes: Vec<u8>,
    /// The file's length now, after the changes since.
    len: u64,
    touched: Vec<bool>,
    size_touched: bool,
}

impl Acked {
    /// Acknowledged as `bytes`, nothing changed since.
    pub fn of(bytes: &[u8]) -> Acked {
        Acked {
            bytes: bytes.to_vec(),
            len: bytes.len() as u64,
            touched: Vec::new(),
            size_touched: false,
        }
    }

    /// The workload wrote bytes `offset..end` (a write past the end also
    /// changes the length and the hole it leaves).
    pub fn write(&mut self, offset: u64, end: u64) {
        if end > self.len {
            self.touch(self.len.min(offset), end, true);
            self.len = end;
        }
        self.touch(offset, end, false);
    }

    /// The workload set the file's length to `size`.
    pub fn truncate(&mut self, size: u64) {
        self.touch(size.min(self.len), size.max(self.len), true);
        self.len = size;
    }

    /// Bytes `from..to` changed (and the length, with `size`).
    fn touch(&mut self, from: u64, to: u64, size: bool) {
        let to = to as usize;
        if self.touched.len() < to {
            self.touched.resize(to, false);
        }
        for t in &mut self.touched[from as usize..to] {
            *t = true;
        }
        self.size_touched |= size;
    }

    /// Whether `got` (None: no file) keeps every byte of this
    /// acknowledgement not touched since.
    pub fn check(&self, got: Option<&[u8]>) -> Result<(), String> {
        let Some(got) = got else {
            return Err(format!(
                "acknowledged at {} bytes, the file is gone",
                self.bytes.len()
            ));
        };
        if !self.size_touched && got.len() != self.bytes.len() {
            return Err(format!(
                "size {} where {} was acknowledged",
                got.len(),
                self.bytes.len()
            ));
        }
        for (i, &byte) in self.bytes.iter().enumerate() {
            if self.touched.get(i).copied().unwrap_or(false) {
                continue;
            }
            if got.get(i) != Some(&byte) {
                return Err(format!(
                    "byte {i}: {:?} where {byte} was acknowledged",
                    got.get(i)
                ));
            }
        }
        Ok(())
    }
}

/// The crash-test tier. Cheap to create; see the module doc for the model.
pub struct CrashBackend {
    state: Arc<Mutex<CrashState>>,
}

impl fmt::Debug for CrashBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = lock(&self.state);
        f.debug_struct("CrashBackend")
            .field("files", &state.files.len())
            .field("sync_points", &state.sync_points)
            .field("crashes", &state.crashes)
            .field("crashed_at", &state.crashed_at)
            .finish_non_exhaustive()
    }
}

impl Default for CrashBackend {
    fn default() -> Self {
        CrashBackend::new()
    }
}

impl CrashBackend {
    /// An empty tier of [`MEMORY_CAPACITY_DEFAULT`] bytes, torn writes off,
    /// seed 0.
    pub fn new() -> CrashBackend {
        CrashBackend::with_capacity(MEMORY_CAPACITY_DEFAULT)
    }

    /// An empty tier of `capacity_bytes` (current bytes of every file count;
    /// growth past it fails with ENOSPC and changes nothing).
    pub fn with_capacity(capacity_bytes: u64) -> CrashBackend {
        CrashBackend {
            state: Arc::new(Mutex::new(CrashState::new(capacity_bytes))),
        }
    }

    /// Crashes now: reverts to the synced state and invalidates every open
    /// handle. The backend stays usable (this is the crash and the reboot).
    pub fn crash(&self) {
        lock(&self.state).crash();
    }

    /// Arms a crash *instead of* sync point `n` (1-based, counted since
    /// creation): that `sync_data`/`sync_dir` call does not take effect,
    /// returns an error, and the backend stays crashed until
    /// [`CrashBackend::restart`]. Replaces any armed crash; a point already
    /// passed never fires.
    pub fn crash_at(&self, n: u64) {
        lock(&self.state).armed = Some(CrashPoint::Before(n));
    }

    /// Arms a crash right *after* sync point `n`: the sync takes effect,
    /// then the backend crashes; the call returns an error and the backend
    /// stays crashed until [`CrashBackend::restart`]. Replaces any armed
    /// crash.
    pub fn crash_after(&self, n: u64) {
        lock(&self.state).armed = Some(CrashPoint::After(n));
    }

    /// Stops the tier now, as the host or the process using it dies: with
    /// `power_cut` every unsynced change is lost (as [`CrashBackend::crash`]
    /// loses it); without, every change is kept (a kill of the process: the
    /// tier's own cache survives it). Either way the handles from before
    /// are closed and invalid, and the backend stays crashed until
    /// [`CrashBackend::restart`], so nothing the dead process still tries
    /// reaches the tier. Cancels an armed crash.
    pub fn halt(&self, power_cut: bool) {
        let mut state = lock(&self.state);
        let n = state.sync_points;
        state.go_down(n, power_cut);
    }

    /// Cancels an armed crash.
    pub fn disarm(&self) {
        lock(&self.state).armed = None;
    }

    /// Sync calls (`sync_data` + `sync_dir`) counted so far.
    pub fn sync_points(&self) -> u64 {
        lock(&self.state).sync_points
    }

    /// The sync point at which an armed crash fired, while the backend is
    /// crashed (`None` once restarted or if none fired).
    pub fn crashed_at(&self) -> Option<u64> {
        lock(&self.state).crashed_at
    }

    /// Brings the backend back after an armed crash fired: operations work
    /// again on the post-crash state (handles from before stay invalid).
    pub fn restart(&self) {
        lock(&self.state).crashed_at = None;
    }

    /// Crashes so far (manual and armed).
    pub fn crashes(&self) -> u64 {
        lock(&self.state).crashes
    }

    /// Whether a crash keeps a random prefix of each file's unsynced changes
    /// (see the module doc). Off by default.
    pub fn set_torn_writes(&self, enabled: bool) {
        lock(&self.state).torn_writes = enabled;
    }

    /// Seeds the generator that picks torn prefixes (0 by default).
    pub fn set_seed(&self, seed: u64) {
        lock(&self.state).rng_state = seed;
    }

    /// Whether `stat` answers with inode numbers (module doc, "Inode
    /// numbers"); off by default: EOPNOTSUPP, as before they were modelled.
    pub fn set_inode_numbers(&self, enabled: bool) {
        lock(&self.state).inode_numbers = enabled;
    }
}

/// `crash-test: <op> "<path>"`, the context of errors.
struct What<'a>(&'a str, &'a RelPath);

impl fmt::Display for What<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {:?}", self.0, self.1.as_str())
    }
}

fn errno(errno: Errno, what: What<'_>) -> io::Error {
    errno_error(errno, format_args!("crash-test: {what}"))
}

impl Backend for CrashBackend {
    fn describe(&self) -> String {
        "crash-test memory".to_string()
    }

    fn open(&self, path: &RelPath, options: OpenOptions) -> io::Result<Arc<dyn BackendFile>> {
        let what = What("open", path);
        let mut state = lock(&self.state);
        state.check_up(&what)?;
        let candidate = state.next_file_id;
        let (id, created) = state
            .tree
            .open(path, options, || candidate)
            .map_err(|e| errno(e, What("open", path)))?;
        if created {
            state.next_file_id += 1;
            state.files.insert(id, CrashFile::default());
        }
        if options.truncate {
            state
                .resize(id, 0)
                .map_err(|e| errno(e, What("open", path)))?;
            let file = state.file(id).map_err(|e| errno(e, What("open", path)))?;
            file.unsynced.push(Change::SetLen(0));
        }
        state
            .file(id)
            .map_err(|e| errno(e, What("open", path)))?
            .open_handles += 1;
        Ok(Arc::new(CrashHandle {
            state: Arc::clone(&self.state),
            id,
            epoch: state.epoch,
            path: path.clone(),
        }))
    }

    fn metadata(&self, path: &RelPath) -> io::Result<Metadata> {
        let mut state = lock(&self.state);
        state.check_up(What("stat", path))?;
        let (kind, file) = state
            .tree
            .lookup(path)
            .map_err(|e| errno(e, What("stat", path)))?;
        let file = file.copied();
        let len = match file {
            Some(id) => state
                .file(id)
                .map_err(|e| errno(e, What("stat", path)))?
                .current
                .len() as u64,
            None => 0,
        };
        Ok(Metadata { kind, len })
    }

    fn remove_file(&self, path: &RelPath) -> io::Result<()> {
        let mut state = lock(&self.state);
        state.check_up(What("remove", path))?;
        state
            .tree
            .remove_file(path)
            .map_err(|e| errno(e, What("remove", path)))?;
        state.collect_garbage();
        Ok(())
    }

    fn rename(&self, from: &RelPath, to: &RelPath) -> io::Result<()> {
        let mut state = lock(&self.state);
        let what = format!("rename {:?} to {:?}", from.as_str(), to.as_str());
        state.check_up(&what)?;
        if let (Ok((_, Some(a))), Ok((_, Some(b)))) =
            (state.tree.lookup(from), state.tree.lookup(to))
        {
            if a == b {
                // Two names of one file (a hard link): rename(2) does nothing.
                return Ok(());
            }
        }
        state
            .tree
            .rename(from, to)
            .map_err(|e| errno_error(e, format_args!("crash-test: {what}")))?;
        state.collect_garbage();
        Ok(())
    }

    fn create_dir(&self, path: &RelPath) -> io::Result<()> {
        let mut state = lock(&self.state);
        state.check_up(What("mkdir", path))?;
        state
            .tree
            .create_dir(path)
            .map(|_| ())
            .map_err(|e| errno(e, What("mkdir", path)))
    }

    fn remove_dir(&self, path: &RelPath) -> io::Result<()> {
        let mut state = lock(&self.state);
        state.check_up(What("rmdir", path))?;
        state
            .tree
            .remove_dir(path)
            .map_err(|e| errno(e, What("rmdir", path)))
    }

    fn read_dir(&self, path: &RelPath) -> io::Result<Vec<DirEntry>> {
        let state = lock(&self.state);
        state.check_up(What("read_dir", path))?;
        state
            .tree
            .read_dir(path)
            .map_err(|e| errno(e, What("read_dir", path)))
    }

    fn sync_dir(&self, path: &RelPath) -> io::Result<()> {
        let what = What("sync_dir", path);
        let mut state = lock(&self.state);
        state.check_up(&what)?;
        let n = state.begin_sync(&what)?;
        let dir = match state.tree.dir(path) {
            Ok(dir) => dir,
            Err(e) => {
                // Still a sync point, counted: a crash armed after it
                // fires (it returns the crash's error then), or a run
                // crashed there would not stop where its dry run counted
                // (the seeded harness, an old parent removed before the
                // engine syncs it).
                state.end_sync(n, &what)?;
                return Err(errno(e, What("sync_dir", path)));
            }
        };
        let (id, entries) = (dir.id, synced_entries(dir));
        state.synced_dirs.insert(id, entries);
        if let Some(xattrs) = state.dir_xattrs.get_mut(&id) {
            xattrs.sync();
        }
        state.collect_garbage();
        state.end_sync(n, &what)
    }

    fn space(&self) -> io::Result<SpaceInfo> {
        let state = lock(&self.state);
        Ok(SpaceInfo {
            total_bytes: state.capacity_bytes,
            free_bytes: state.capacity_bytes.saturating_sub(state.used_bytes),
        })
    }

    fn stat(&self, path: &RelPath) -> io::Result<Stat> {
        let mut state = lock(&self.state);
        state.check_up(What("stat", path))?;
        let file = match state.tree.lookup(path) {
            Ok((_, file)) => file.copied(),
            Err(e) => return Err(errno(e, What("stat", path))),
        };
        let dir_id = match file {
            Some(_) => 0,
            None => {
                state
                    .tree
                    .dir(path)
                    .map_err(|e| errno(e, What("stat", path)))?
                    .id
            }
        };
        state
            .stat_of(file, dir_id)
            .map_err(|e| errno(e, What("stat", path)))
    }

    fn hard_link(&self, existing: &RelPath, new: &RelPath) -> io::Result<()> {
        let what = format!("link {:?} to {:?}", existing.as_str(), new.as_str());
        let mut state = lock(&self.state);
        state.check_up(&what)?;
        // One directory only (module doc, "Hard links"), after the
        // errors a kernel finds first: a missing file or parent.
        if existing.parent() != new.parent() {
            let parent = new.parent().unwrap_or_else(RelPath::root);
            let found = state.tree.lookup(existing).and_then(|(_, file)| {
                state.tree.dir(&parent)?;
                file.map(drop).ok_or(Errno::PERM)
            });
            let e = found.err().unwrap_or(Errno::XDEV);
            return Err(errno_error(
                e,
                format_args!("crash-test: {what} (links are modelled within one directory)"),
            ));
        }
        state
            .tree
            .link(existing, new)
            .map(drop)
            .map_err(|e| errno_error(e, format_args!("crash-test: {what}")))
    }

    fn get_xattr(&self, path: &RelPath, name: &str) -> io::Result<Vec<u8>> {
        let op = format!("get_xattr {name:?}");
        let mut state = lock(&self.state);
        state.check_up(What(&op, path))?;
        let owner = state
            .xattr_owner(path)
            .map_err(|e| errno(e, What(&op, path)))?;
        let xattrs = state.xattrs(owner).map_err(|e| errno(e, What(&op, path)))?;
        match xattrs {
            Some(xattrs) => xattrs.get(name),
            None => check_xattr(name, None).and(Err(Errno::NODATA)),
        }
        .map_err(|e| errno(e, What(&op, path)))
    }

    fn set_xattr(
        &self,
        path: &RelPath,
        name: &str,
        value: &[u8],
        flags: XattrFlags,
    ) -> io::Result<()> {
        let op = format!("set_xattr {name:?}");
        let mut state = lock(&self.state);
        state.check_up(What(&op, path))?;
        state
            .xattr_owner(path)
            .and_then(|owner| state.xattrs_mut(owner)?.set(name, value, flags))
            .map_err(|e| errno(e, What(&op, path)))
    }

    fn list_xattr(&self, path: &RelPath) -> io::Result<Vec<String>> {
        let op = "list_xattr";
        let mut state = lock(&self.state);
        state.check_up(What(op, path))?;
        let owner = state
            .xattr_owner(path)
            .map_err(|e| errno(e, What(op, path)))?;
        let xattrs = state.xattrs(owner).map_err(|e| errno(e, What(op, path)))?;
        Ok(xattrs.map(Xattrs::list).unwrap_or_default())
    }

    fn remove_xattr(&self, path: &RelPath, name: &str) -> io::Result<()> {
        let op = format!("remove_xattr {name:?}");
        let mut state = lock(&self.state);
        state.check_up(What(&op, path))?;
        state
            .xattr_owner(path)
            .and_then(|owner| state.xattrs_mut(owner)?.remove(name))
            .map_err(|e| errno(e, What(&op, path)))
    }
}

/// An open file of a [`CrashBackend`]; valid until the next crash.
struct CrashHandle {
    state: Arc<Mutex<CrashState>>,
    id: FileId,
    epoch: u64,
    path: RelPath,
}

impl fmt::Debug for CrashHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CrashHandle")
            .field("id", &self.id)
            .field("epoch", &self.epoch)
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl CrashHandle {
    /// `f` on the state, after checking that this handle is still valid
    /// (`op` names the call in the error).
    fn checked<R>(
        &self,
        op: &str,
        f: impl FnOnce(&mut CrashState) -> io::Result<R>,
    ) -> io::Result<R> {
        let mut state = lock(&self.state);
        state.check_handle(self.epoch, What(op, &self.path))?;
        f(&mut state)
    }

    fn error(&self, e: Errno, op: &str) -> io::Error {
        errno(e, What(op, &self.path))
    }
}

impl Drop for CrashHandle {
    fn drop(&mut self) {
        let mut state = lock(&self.state);
        if state.epoch != self.epoch {
            return;
        }
        if let Ok(file) = state.file(self.id) {
            file.open_handles = file.open_handles.saturating_sub(1);
        }
        state.collect_garbage();
    }
}

impl BackendFile for CrashHandle {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.checked("read", |state| {
            let file = state.file(self.id).map_err(|e| self.error(e, "read"))?;
            Ok(read_slice(&file.current, buf, offset))
        })
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.checked("write", |state| {
            if buf.is_empty() {
                return Ok(());
            }
            let end = end_index(offset, buf.len()).map_err(|e| self.error(e, "write"))?;
            if end
                > state
                    .file(self.id)
                    .map_err(|e| self.error(e, "write"))?
                    .current
                    .len()
            {
                state
                    .resize(self.id, end)
                    .map_err(|e| self.error(e, "write"))?;
            }
            let file = state.file(self.id).map_err(|e| self.error(e, "write"))?;
            let start = end - buf.len();
            file.current[start..end].copy_from_slice(buf);
            file.unsynced.push(Change::Write {
                offset: start,
                data: buf.to_vec(),
            });
            file.unsynced_bytes += buf.len() as u64;
            Ok(())
        })
    }

    fn sync_data(&self) -> io::Result<()> {
        let what = What("sync_data", &self.path);
        self.checked("sync_data", |state| {
            let n = state.begin_sync(&what)?;
            state
                .file(self.id)
                .map_err(|e| self.error(e, "sync_data"))?
                .sync();
            state.end_sync(n, &what)
        })
    }

    fn len(&self) -> io::Result<u64> {
        self.checked("len", |state| {
            let file = state.file(self.id).map_err(|e| self.error(e, "len"))?;
            Ok(file.current.len() as u64)
        })
    }

    fn allocate(&self, mode: crate::Allocate, offset: u64, len: u64) -> io::Result<()> {
        self.checked("fallocate", |state| {
            let old_len = state
                .file(self.id)
                .map_err(|e| self.error(e, "fallocate"))?
                .current
                .len();
            let new_len = mode
                .new_len(old_len as u64, offset, len)
                .and_then(|n| usize::try_from(n).map_err(|_| Errno::FBIG))
                .map_err(|e| self.error(e, "fallocate"))?;
            let used = state.used_bytes - old_len as u64 + new_len as u64;
            if new_len > old_len && used > state.capacity_bytes {
                return Err(self.error(Errno::NOSPC, "fallocate"));
            }
            let file = state
                .file(self.id)
                .map_err(|e| self.error(e, "fallocate"))?;
            mode.apply(&mut file.current, offset, len, |data, n| {
                data.resize(n, 0);
                Ok(())
            })
            .map_err(|e| self.error(e, "fallocate"))?;
            file.unsynced.push(Change::Allocate { mode, offset, len });
            state.used_bytes = used;
            Ok(())
        })
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.checked("set_len", |state| {
            let new_len = end_index(len, 0).map_err(|e| self.error(e, "set_len"))?;
            state
                .resize(self.id, new_len)
                .map_err(|e| self.error(e, "set_len"))?;
            let file = state.file(self.id).map_err(|e| self.error(e, "set_len"))?;
            file.unsynced.push(Change::SetLen(new_len));
            Ok(())
        })
    }

    fn stat(&self) -> io::Result<Stat> {
        self.checked("stat", |state| {
            state
                .stat_of(Some(self.id), 0)
                .map_err(|e| self.error(e, "stat"))
        })
    }

    fn set_xattr(&self, name: &str, value: &[u8], flags: XattrFlags) -> io::Result<()> {
        let op = format!("set_xattr {name:?}");
        self.checked(&op, |state| {
            state
                .file(self.id)
                .and_then(|file| file.xattrs.set(name, value, flags))
                .map_err(|e| self.error(e, &op))
        })
    }

    fn remove_xattr(&self, name: &str) -> io::Result<()> {
        let op = format!("remove_xattr {name:?}");
        self.checked(&op, |state| {
            state
                .file(self.id)
                .and_then(|file| file.xattrs.remove(name))
                .map_err(|e| self.error(e, &op))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(path: &str) -> RelPath {
        RelPath::new(path).unwrap()
    }

    #[test]
    fn sync_replays_changes_to_equal_current() {
        let backend = CrashBackend::new();
        let file = backend.open(&p("f"), OpenOptions::CREATE).unwrap();
        file.write_at(b"hello world", 0).unwrap();
        file.set_len(5).unwrap();
        file.write_at(b"!", 8).unwrap();
        file.sync_data().unwrap();
        let state = lock(&backend.state);
        let crash_file = &state.files[&0];
        assert_eq!(crash_file.synced, crash_file.current);
        assert_eq!(crash_file.current, b"hello\0\0\0!");
        assert!(crash_file.unsynced.is_empty());
    }

    /// Hard links (module doc): two names in one directory survive a crash
    /// together once that directory is synced, and vanish together before;
    /// a link to another directory is EXDEV.
    #[test]
    fn hard_links_in_one_directory_are_durable_with_it() {
        let backend = CrashBackend::new();
        backend.set_inode_numbers(true);
        backend.create_dir(&p("d")).unwrap();
        backend.sync_dir(&RelPath::root()).unwrap();
        let file = backend.open(&p("d/a"), OpenOptions::CREATE).unwrap();
        file.write_at(b"bytes", 0).unwrap();
        file.sync_data().unwrap();
        backend.sync_dir(&p("d")).unwrap();
        backend.hard_link(&p("d/a"), &p("d/b")).unwrap();
        let error = backend.hard_link(&p("d/a"), &p("c")).unwrap_err();
        assert_eq!(code(&error), errno_named("EXDEV"), "{error}");
        let ino = backend.stat(&p("d/a")).unwrap().ino;
        assert_eq!(backend.stat(&p("d/b")).unwrap().nlink, 2);
        // Not synced: the second name goes at a crash.
        backend.crash();
        assert!(backend.stat(&p("d/b")).is_err());
        assert_eq!(backend.stat(&p("d/a")).unwrap().nlink, 1);
        backend.hard_link(&p("d/a"), &p("d/b")).unwrap();
        backend.sync_dir(&p("d")).unwrap();
        backend.crash();
        let (a, b) = (
            backend.stat(&p("d/a")).unwrap(),
            backend.stat(&p("d/b")).unwrap(),
        );
        assert_eq!((a.ino, b.ino, a.nlink), (ino, ino, 2), "both names kept");
        let through_b = backend.open(&p("d/b"), OpenOptions::default()).unwrap();
        let mut buf = [0u8; 5];
        through_b.read_at(&mut buf, 0).unwrap();
        assert_eq!(&buf, b"bytes");
        // rename(2) between two names of one file does nothing.
        backend.rename(&p("d/a"), &p("d/b")).unwrap();
        assert_eq!(backend.stat(&p("d/a")).unwrap().nlink, 2);
    }

    /// Inode numbers are opt-in: EOPNOTSUPP by default; on, a file's stays
    /// with it across a rename, through an open handle, and at a crash.
    #[test]
    fn inode_numbers_are_opt_in_and_stay_with_the_file() {
        let backend = CrashBackend::new();
        let file = backend.open(&p("f"), OpenOptions::CREATE).unwrap();
        let error = backend.stat(&p("f")).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::Unsupported, "{error}");
        assert_eq!(file.stat().unwrap_err().kind(), io::ErrorKind::Unsupported);
        backend.set_inode_numbers(true);
        file.write_at(b"xyz", 0).unwrap();
        let st = backend.stat(&p("f")).unwrap();
        assert_eq!((st.kind, st.len, st.nlink), (crate::StatKind::File, 3, 1));
        assert_eq!(file.stat().unwrap().ino, st.ino);
        backend.create_dir(&p("d")).unwrap();
        let dir = backend.stat(&p("d")).unwrap();
        assert_eq!(dir.kind, crate::StatKind::Dir);
        assert_ne!(dir.ino, st.ino);
        backend.rename(&p("f"), &p("d/g")).unwrap();
        assert_eq!(backend.stat(&p("d/g")).unwrap().ino, st.ino);
        backend.sync_dir(&p("d")).unwrap();
        backend.sync_dir(&RelPath::root()).unwrap();
        backend.crash();
        assert_eq!(backend.stat(&p("d/g")).unwrap().ino, st.ino);
        assert_eq!(backend.stat(&p("d")).unwrap().ino, dir.ino);
    }

    #[test]
    fn unlinked_files_are_collected_once_closed_and_unnamed() {
        let backend = CrashBackend::new();
        let file = backend.open(&p("f"), OpenOptions::CREATE).unwrap();
        backend.sync_dir(&RelPath::root()).unwrap();
        backend.remove_file(&p("f")).unwrap();
        drop(file);
        // Still named by the synced root.
        assert_eq!(lock(&backend.state).files.len(), 1);
        backend.sync_dir(&RelPath::root()).unwrap();
        assert_eq!(lock(&backend.state).files.len(), 0);
    }

    fn code(error: &io::Error) -> Option<i32> {
        crate::raw_os_error(error)
    }

    fn errno_named(name: &str) -> Option<i32> {
        crate::errno::errno_code(name)
    }

    #[test]
    fn xattrs_set_get_list_and_remove_as_linux_answers() {
        let backend = CrashBackend::new();
        let f = p("f");
        let file = backend.open(&f, OpenOptions::CREATE).unwrap();
        backend
            .set_xattr(&f, "user.b", b"2", XattrFlags::Either)
            .unwrap();
        file.set_xattr("user.a", b"1", XattrFlags::CreateOnly)
            .unwrap();
        backend
            .set_xattr(&f, "user.empty", b"", XattrFlags::Either)
            .unwrap();
        assert_eq!(backend.get_xattr(&f, "user.a").unwrap(), b"1");
        assert_eq!(backend.get_xattr(&f, "user.empty").unwrap(), b"");
        assert_eq!(
            backend.list_xattr(&f).unwrap(),
            ["user.a", "user.b", "user.empty"]
        );

        // XATTR_CREATE on an existing one, XATTR_REPLACE on a missing one.
        let error = backend
            .set_xattr(&f, "user.a", b"x", XattrFlags::CreateOnly)
            .unwrap_err();
        assert_eq!(code(&error), errno_named("EEXIST"), "{error}");
        assert!(error.to_string().contains("user.a"), "{error}");
        let error = file
            .set_xattr("user.a", b"x", XattrFlags::CreateOnly)
            .unwrap_err();
        assert_eq!(code(&error), errno_named("EEXIST"), "{error}");
        assert_eq!(backend.get_xattr(&f, "user.a").unwrap(), b"1");
        let error = backend
            .set_xattr(&f, "user.new", b"x", XattrFlags::ReplaceOnly)
            .unwrap_err();
        assert_eq!(code(&error), errno_named("ENODATA"), "{error}");
        backend
            .set_xattr(&f, "user.a", b"3", XattrFlags::ReplaceOnly)
            .unwrap();
        assert_eq!(backend.get_xattr(&f, "user.a").unwrap(), b"3");

        // Removal, by path and by handle; a missing one is ENODATA.
        backend.remove_xattr(&f, "user.b").unwrap();
        file.remove_xattr("user.a").unwrap();
        for error in [
            backend.get_xattr(&f, "user.a").unwrap_err(),
            backend.remove_xattr(&f, "user.b").unwrap_err(),
            file.remove_xattr("user.a").unwrap_err(),
        ] {
            assert_eq!(code(&error), errno_named("ENODATA"), "{error}");
        }
        assert_eq!(backend.list_xattr(&f).unwrap(), ["user.empty"]);

        // Names and values Linux refuses; a missing path.
        let long = "user.".to_string() + &"x".repeat(XATTR_NAME_MAX);
        for (name, errno) in [("", "ERANGE"), (&long, "ERANGE"), ("other.x", "EOPNOTSUPP")] {
            let error = backend
                .set_xattr(&f, name, b"v", XattrFlags::Either)
                .unwrap_err();
            assert_eq!(code(&error), errno_named(errno), "{name:?}: {error}");
        }
        let big = vec![0u8; XATTR_SIZE_MAX + 1];
        let error = file
            .set_xattr("user.big", &big, XattrFlags::Either)
            .unwrap_err();
        assert_eq!(code(&error), errno_named("E2BIG"), "{error}");
        let error = backend.get_xattr(&p("missing"), "user.a").unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::NotFound, "{error}");

        // Directories and the root have theirs; they count for no space.
        backend.create_dir(&p("d")).unwrap();
        backend
            .set_xattr(&p("d"), "user.dir", b"1", XattrFlags::CreateOnly)
            .unwrap();
        backend
            .set_xattr(&RelPath::root(), "user.root", b"2", XattrFlags::Either)
            .unwrap();
        assert_eq!(backend.get_xattr(&p("d"), "user.dir").unwrap(), b"1");
        assert_eq!(backend.list_xattr(&RelPath::root()).unwrap(), ["user.root"]);
        let error = backend.get_xattr(&p("d"), "user.root").unwrap_err();
        assert_eq!(code(&error), errno_named("ENODATA"), "{error}");
        backend.remove_xattr(&p("d"), "user.dir").unwrap();
        assert!(backend.list_xattr(&p("d")).unwrap().is_empty());
        assert_eq!(lock(&backend.state).used_bytes, 0);
    }

    /// `fsetxattr`: the handle's file, whatever names it now.
    #[test]
    fn a_handles_xattrs_follow_its_file_not_its_name() {
        let backend = CrashBackend::new();
        let file = backend.open(&p("f"), OpenOptions::CREATE).unwrap();
        backend.rename(&p("f"), &p("moved")).unwrap();
        backend.open(&p("f"), OpenOptions::CREATE).unwrap();
        file.set_xattr("user.k", b"v", XattrFlags::CreateOnly)
            .unwrap();
        assert_eq!(backend.get_xattr(&p("moved"), "user.k").unwrap(), b"v");
        let none = backend.get_xattr(&p("f"), "user.k").unwrap_err();
        assert_eq!(code(&none), errno_named("ENODATA"), "{none}");
    }

    /// The strict reading: a file's xattr changes are durable at its next
    /// sync (of any handle), a directory's at its `sync_dir`; a crash
    /// reverts both to their synced state, torn writes or not.
    #[test]
    fn a_crash_reverts_xattrs_to_their_last_sync() {
        for torn in [false, true] {
            let backend = CrashBackend::new();
            backend.set_torn_writes(torn);
            backend.set_seed(7);
            let (f, g, d) = (p("f"), p("g"), p("d"));
            let file = backend.open(&f, OpenOptions::CREATE).unwrap();
            let other = backend.open(&g, OpenOptions::CREATE).unwrap();
            backend.create_dir(&d).unwrap();
            backend.sync_dir(&RelPath::root()).unwrap();
            file.set_xattr("user.kept", b"1", XattrFlags::Either)
                .unwrap();
            backend
                .set_xattr(&f, "user.gone", b"1", XattrFlags::Either)
                .unwrap();
            backend
                .set_xattr(&d, "user.dir", b"1", XattrFlags::Either)
                .unwrap();
            other
                .set_xattr("user.never", b"1", XattrFlags::Either)
                .unwrap();
            // A second handle's sync makes the file's xattrs durable.
            let again = backend.open(&f, OpenOptions::default()).unwrap();
            again.sync_data().unwrap();
            backend.sync_dir(&d).unwrap();
            // After the sync: a change, a removal, a new one, unsynced.
            file.set_xattr("user.kept", b"2", XattrFlags::ReplaceOnly)
                .unwrap();
            file.remove_xattr("user.gone").unwrap();
            file.set_xattr("user.late", b"1", XattrFlags::Either)
                .unwrap();
            backend.remove_xattr(&d, "user.dir").unwrap();
            file.write_at(b"bytes", 0).unwrap();
            backend.crash();
            assert_eq!(backend.list_xattr(&f).unwrap(), ["user.gone", "user.kept"]);
            assert_eq!(backend.get_xattr(&f, "user.kept").unwrap(), b"1");
            assert_eq!(backend.get_xattr(&d, "user.dir").unwrap(), b"1");
            assert!(backend.list_xattr(&g).unwrap().is_empty(), "never synced");
            let state = lock(&backend.state);
            for file in state.files.values() {
                assert_eq!(file.xattrs.current, file.xattrs.synced);
            }
            for xattrs in state.dir_xattrs.values() {
                assert_eq!(xattrs.current, xattrs.synced);
            }
            drop(state);
            // Handles from before the crash are refused.
            let stale = file
                .set_xattr("user.x", b"1", XattrFlags::Either)
                .unwrap_err();
            assert!(stale.to_string().contains("before a crash"), "{stale}");
        }
    }

    /// A crash instead of the file's sync keeps the old xattrs; right after
    /// it, the new ones. While crashed, every xattr call fails.
    #[test]
    fn an_armed_crash_keeps_xattrs_as_synced_before_or_at_its_point() {
        for after in [false, true] {
            let backend = CrashBackend::new();
            let f = p("f");
            let file = backend.open(&f, OpenOptions::CREATE).unwrap();
            backend.sync_dir(&RelPath::root()).unwrap();
            file.set_xattr("user.mark", b"old", XattrFlags::Either)
                .unwrap();
            file.sync_data().unwrap();
            file.set_xattr("user.mark", b"new", XattrFlags::Either)
                .unwrap();
            let n = backend.sync_points() + 1;
            if after {
                backend.crash_after(n);
            } else {
                backend.crash_at(n);
            }
            assert!(file.sync_data().is_err());
            assert!(backend.get_xattr(&f, "user.mark").is_err(), "crashed");
            assert!(backend
                .set_xattr(&f, "user.mark", b"x", XattrFlags::Either)
                .is_err());
            assert!(backend.list_xattr(&f).is_err());
            assert!(backend.remove_xattr(&f, "user.mark").is_err());
            backend.restart();
            let want: &[u8] = if after { b"new" } else { b"old" };
            assert_eq!(backend.get_xattr(&f, "user.mark").unwrap(), want);
        }
    }

    /// A directory that does not come back after a crash takes its xattrs
    /// along; one made again under its name starts with none.
    #[test]
    fn an_unsynced_directory_loses_its_xattrs_at_a_crash() {
        let backend = CrashBackend::new();
        let d = p("d");
        backend.create_dir(&d).unwrap();
        backend
            .set_xattr(&d, "user.dir", b"1", XattrFlags::Either)
            .unwrap();
        backend.sync_dir(&d).unwrap();
        backend.crash();
        assert!(backend.metadata(&d).is_err(), "its name was never synced");
        assert!(lock(&backend.state).dir_xattrs.is_empty());
        backend.create_dir(&d).unwrap();
        assert!(backend.list_xattr(&d).unwrap().is_empty());
    }
}
