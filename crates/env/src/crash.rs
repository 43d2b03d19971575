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
//!   same way.
//! * **Sync points**: every `sync_data` and `sync_dir` call is a numbered
//!   sync point (1, 2, … since the backend was created; calls on stale
//!   handles or while crashed do not count). [`CrashBackend::crash_at`]`(n)`
//!   arms a crash *instead of* sync point `n`, [`CrashBackend::crash_after`]
//!   `(n)` one right *after* it (the sync took effect). Either way that call
//!   returns an error and the backend stays **crashed**: every operation
//!   fails until [`CrashBackend::restart`], so threads of the dead workload
//!   cannot change the post-crash state. A test runs its workload once to
//!   count [`CrashBackend::sync_points`], then reruns it on a fresh backend
//!   crashing at each point in turn.
//! * **Attributes, symbolic links, extended attributes** are not modelled
//!   (their durability is not what this backend tests): `stat`,
//!   `set_attr`, `symlink`, `mknod`, `read_link` and the xattr calls keep the
//!   trait's default and fail with EOPNOTSUPP; `read_dir_all` is
//!   `read_dir`'s entries.
//!
//! Invariants: after a crash, current = synced for every file and every
//! directory; a file's synced bytes with its change list replayed equal its
//! current bytes; `used_bytes` is the sum of the current lengths of the
//! files kept (a file is dropped only when no current or synced entry names
//! it and no handle has it open); `used_bytes <= capacity_bytes`.
//!
//! One mutex guards the whole state (poison-tolerant, see `lock` in lib.rs):
//! the backend is for tests, where simplicity beats concurrency.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};

use rustix::io::Errno;

use crate::memory::{end_index, read_slice, MEMORY_CAPACITY_DEFAULT};
use crate::namespace::{DirNode, Node, Tree, ROOT_DIR_ID};
use crate::{
    errno_error, lock, Backend, BackendFile, DirEntry, Metadata, OpenOptions, RelPath, SpaceInfo,
};

type FileId = u64;

/// A synced directory entry: which file or directory a name stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SyncedEntry {
    File(FileId),
    Dir(u64),
}

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

#[derive(Debug, Default)]
struct CrashFile {
    current: Vec<u8>,
    synced: Vec<u8>,
    /// Changes since the last sync, oldest first.
    unsynced: Vec<Change>,
    /// Bytes written by the `unsynced` writes.
    unsynced_bytes: u64,
    open_handles: usize,
}

impl CrashFile {
    fn sync(&mut self) {
        for change in self.unsynced.drain(..) {
            change.apply(&mut self.synced, usize::MAX);
        }
        self.unsynced_bytes = 0;
        debug_assert_eq!(self.synced.len(), self.current.len());
    }
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
    next_file_id: FileId,
    /// Bumped at every crash; handles carry the epoch they were opened in.
    epoch: u64,
    sync_points: u64,
    armed: Option<CrashPoint>,
    /// The sync point at which an armed crash fired, until `restart`.
    crashed_at: Option<u64>,
    crashes: u64,
    torn_writes: bool,
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
/// skipping files and directories already placed.
fn rebuild_dir(
    id: u64,
    synced_dirs: &HashMap<u64, BTreeMap<String, SyncedEntry>>,
    files: &HashMap<FileId, CrashFile>,
    placed_files: &mut HashSet<FileId>,
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
                if files.contains_key(&file) && placed_files.insert(file) {
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
            next_file_id: 0,
            epoch: 0,
            sync_points: 0,
            armed: None,
            crashed_at: None,
            crashes: 0,
            torn_writes: false,
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
        self.armed = None;
        self.crash();
        self.crashed_at = Some(n);
        io::Error::other(format!("crash-test: {what}: crashed {when} sync point {n}"))
    }

    /// Reverts to the synced state (see the module doc).
    fn crash(&mut self) {
        self.epoch += 1;
        self.crashes += 1;
        let mut placed_files = HashSet::new();
        let mut placed_dirs = HashSet::new();
        let root = rebuild_dir(
            ROOT_DIR_ID,
            &self.synced_dirs,
            &self.files,
            &mut placed_files,
            &mut placed_dirs,
        );
        self.files.retain(|id, _| placed_files.contains(id));
        let torn_writes = self.torn_writes;
        for file in self.files.values_mut() {
            if torn_writes && !file.unsynced.is_empty() {
                let mut budget = next_random(&mut self.rng_state) % (file.unsynced_bytes + 1);
                let mut data = std::mem::take(&mut file.synced);
                for change in &file.unsynced {
                    match change {
                        Change::Write { data: bytes, .. } => {
                            let len = bytes.len() as u64;
                            if budget < len {
                                change.apply(&mut data, budget as usize);
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

    fn state(&self) -> MutexGuard<'_, CrashState> {
        lock(&self.state)
    }

    /// Crashes now: reverts to the synced state and invalidates every open
    /// handle. The backend stays usable (this is the crash and the reboot).
    pub fn crash(&self) {
        self.state().crash();
    }

    /// Arms a crash *instead of* sync point `n` (1-based, counted since
    /// creation): that `sync_data`/`sync_dir` call does not take effect,
    /// returns an error, and the backend stays crashed until
    /// [`CrashBackend::restart`]. Replaces any armed crash; a point already
    /// passed never fires.
    pub fn crash_at(&self, n: u64) {
        self.state().armed = Some(CrashPoint::Before(n));
    }

    /// Arms a crash right *after* sync point `n`: the sync takes effect,
    /// then the backend crashes; the call returns an error and the backend
    /// stays crashed until [`CrashBackend::restart`]. Replaces any armed
    /// crash.
    pub fn crash_after(&self, n: u64) {
        self.state().armed = Some(CrashPoint::After(n));
    }

    /// Cancels an armed crash.
    pub fn disarm(&self) {
        self.state().armed = None;
    }

    /// Sync calls (`sync_data` + `sync_dir`) counted so far.
    pub fn sync_points(&self) -> u64 {
        self.state().sync_points
    }

    /// The sync point at which an armed crash fired, while the backend is
    /// crashed (`None` once restarted or if none fired).
    pub fn crashed_at(&self) -> Option<u64> {
        self.state().crashed_at
    }

    /// Brings the backend back after an armed crash fired: operations work
    /// again on the post-crash state (handles from before stay invalid).
    pub fn restart(&self) {
        self.state().crashed_at = None;
    }

    /// Crashes so far (manual and armed).
    pub fn crashes(&self) -> u64 {
        self.state().crashes
    }

    /// Whether a crash keeps a random prefix of each file's unsynced changes
    /// (see the module doc). Off by default.
    pub fn set_torn_writes(&self, enabled: bool) {
        self.state().torn_writes = enabled;
    }

    /// Seeds the generator that picks torn prefixes (0 by default).
    pub fn set_seed(&self, seed: u64) {
        self.state().rng_state = seed;
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
        let mut state = self.state();
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
        let mut state = self.state();
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
        let mut state = self.state();
        state.check_up(What("remove", path))?;
        state
            .tree
            .remove_file(path)
            .map_err(|e| errno(e, What("remove", path)))?;
        state.collect_garbage();
        Ok(())
    }

    fn rename(&self, from: &RelPath, to: &RelPath) -> io::Result<()> {
        let mut state = self.state();
        let what = format!("rename {:?} to {:?}", from.as_str(), to.as_str());
        state.check_up(&what)?;
        state
            .tree
            .rename(from, to)
            .map_err(|e| errno_error(e, format_args!("crash-test: {what}")))?;
        state.collect_garbage();
        Ok(())
    }

    fn create_dir(&self, path: &RelPath) -> io::Result<()> {
        let mut state = self.state();
        state.check_up(What("mkdir", path))?;
        state
            .tree
            .create_dir(path)
            .map(|_| ())
            .map_err(|e| errno(e, What("mkdir", path)))
    }

    fn remove_dir(&self, path: &RelPath) -> io::Result<()> {
        let mut state = self.state();
        state.check_up(What("rmdir", path))?;
        state
            .tree
            .remove_dir(path)
            .map_err(|e| errno(e, What("rmdir", path)))
    }

    fn read_dir(&self, path: &RelPath) -> io::Result<Vec<DirEntry>> {
        let state = self.state();
        state.check_up(What("read_dir", path))?;
        state
            .tree
            .read_dir(path)
            .map_err(|e| errno(e, What("read_dir", path)))
    }

    fn sync_dir(&self, path: &RelPath) -> io::Result<()> {
        let what = What("sync_dir", path);
        let mut state = self.state();
        state.check_up(&what)?;
        let n = state.begin_sync(&what)?;
        let dir = state
            .tree
            .dir(path)
            .map_err(|e| errno(e, What("sync_dir", path)))?;
        let (id, entries) = (dir.id, synced_entries(dir));
        state.synced_dirs.insert(id, entries);
        state.collect_garbage();
        state.end_sync(n, &what)
    }

    fn space(&self) -> io::Result<SpaceInfo> {
        let state = self.state();
        Ok(SpaceInfo {
            total_bytes: state.capacity_bytes,
            free_bytes: state.capacity_bytes.saturating_sub(state.used_bytes),
        })
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
    /// The state, after checking that this handle is still valid.
    fn valid_state(&self, op: &str) -> io::Result<MutexGuard<'_, CrashState>> {
        let state = lock(&self.state);
        state.check_handle(self.epoch, What(op, &self.path))?;
        Ok(state)
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
        let mut state = self.valid_state("read")?;
        let file = state.file(self.id).map_err(|e| self.error(e, "read"))?;
        Ok(read_slice(&file.current, buf, offset))
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let mut state = self.valid_state("write")?;
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
    }

    fn sync_data(&self) -> io::Result<()> {
        let what = What("sync_data", &self.path);
        let mut state = self.valid_state("sync_data")?;
        let n = state.begin_sync(&what)?;
        state
            .file(self.id)
            .map_err(|e| self.error(e, "sync_data"))?
            .sync();
        state.end_sync(n, &what)
    }

    fn len(&self) -> io::Result<u64> {
        let mut state = self.valid_state("len")?;
        let file = state.file(self.id).map_err(|e| self.error(e, "len"))?;
        Ok(file.current.len() as u64)
    }

    fn allocate(&self, mode: crate::Allocate, offset: u64, len: u64) -> io::Result<()> {
        let mut state = self.valid_state("fallocate")?;
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
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let mut state = self.valid_state("set_len")?;
        let new_len = end_index(len, 0).map_err(|e| self.error(e, "set_len"))?;
        state
            .resize(self.id, new_len)
            .map_err(|e| self.error(e, "set_len"))?;
        let file = state.file(self.id).map_err(|e| self.error(e, "set_len"))?;
        file.unsynced.push(Change::SetLen(new_len));
        Ok(())
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
        let state = backend.state();
        let crash_file = &state.files[&0];
        assert_eq!(crash_file.synced, crash_file.current);
        assert_eq!(crash_file.current, b"hello\0\0\0!");
        assert!(crash_file.unsynced.is_empty());
    }

    #[test]
    fn unlinked_files_are_collected_once_closed_and_unnamed() {
        let backend = CrashBackend::new();
        let file = backend.open(&p("f"), OpenOptions::CREATE).unwrap();
        backend.sync_dir(&RelPath::root()).unwrap();
        backend.remove_file(&p("f")).unwrap();
        drop(file);
        // Still named by the synced root.
        assert_eq!(backend.state().files.len(), 1);
        backend.sync_dir(&RelPath::root()).unwrap();
        assert_eq!(backend.state().files.len(), 0);
    }
}
