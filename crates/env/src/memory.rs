//! [`MemBackend`]: a tier that lives in memory, for tests.
//!
//! A namespace tree (directories and files) behind one mutex, with POSIX
//! semantics: creating needs the parent directory (ENOENT), a non-empty
//! directory cannot be removed or renamed over (ENOTEMPTY), opening a
//! directory fails (EISDIR), rename replaces a file. A file is an
//! `Arc<MemFile>` holding its bytes behind its own `RwLock`, so an open
//! handle keeps working after the file is unlinked or renamed, like an open
//! file descriptor.
//!
//! Space: the backend has a capacity ([`MEMORY_CAPACITY_DEFAULT`] unless
//! given). Every file's length counts against it (holes too: files are
//! dense vectors) until the file is both unlinked and closed. A write or
//! `set_len` that would exceed it fails with ENOSPC
//! (`ErrorKind::StorageFull`) and changes nothing.
//!
//! Attributes ([`Backend::stat`], [`Backend::set_attr`]): every file and
//! directory keeps a mode (created 0644 and 0755), an owner (0:0), and
//! access, modification and change times (the creation time at first; a
//! file's write, `set_len` or truncating open moves its modification and
//! change times; `set_attr` sets what it names and the change time; a
//! directory's times change only by `set_attr`). Hard links
//! ([`Backend::hard_link`]) are two entries holding one `Arc<MemFile>`; a
//! file's link count is the number of its entries (a directory's is 1),
//! and linking or removing a name moves its change time. Block
//! size 4096, blocks the length in 512-byte units rounded up. Inode numbers
//! are fixed at creation and kept across renames: `2·id + 1` for a
//! directory (the root 1), even numbers for files, from a counter. There
//! are no symbolic links, special files (`mknod`) or extended attributes:
//! those calls fail with EOPNOTSUPP (the trait's defaults).
//!
//! Invariants: the space account's `used` equals the sum of the lengths of
//! the live `MemFile`s (each grows its vector only after reserving, and
//! releases what it shrinks and, on drop, what it held); `used <= capacity`.
//! Errors name the backend, the operation and the path; bad input (offsets
//! past `usize`, a path through a file) is an error, never a panic.

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use rustix::io::Errno;

use crate::namespace::{Node, Tree, ROOT_DIR_ID};
use crate::{
    errno_error, lock, owner_id, with_context, Backend, BackendFile, DirEntry, FileKind, Metadata,
    OpenOptions, RelPath, SetAttr, SpaceInfo, Stat, StatKind, TimeSet,
};

/// Capacity of [`MemBackend::new`]: 4 GiB, far above what tests write and
/// still below what a test machine could allocate.
pub const MEMORY_CAPACITY_DEFAULT: u64 = 4 << 30;

/// Bytes in use against a capacity, shared by a backend and its files.
#[derive(Debug)]
pub(crate) struct SpaceAccount {
    capacity_bytes: u64,
    used_bytes: AtomicU64,
}

impl SpaceAccount {
    pub(crate) fn new(capacity_bytes: u64) -> SpaceAccount {
        SpaceAccount {
            capacity_bytes,
            used_bytes: AtomicU64::new(0),
        }
    }

    /// Takes `bytes` more; false (and nothing taken) when that exceeds the
    /// capacity.
    pub(crate) fn reserve(&self, bytes: u64) -> bool {
        self.used_bytes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes)
                    .filter(|&total| total <= self.capacity_bytes)
            })
            .is_ok()
    }

    /// Gives `bytes` back.
    pub(crate) fn release(&self, bytes: u64) {
        // Saturating: releasing more than was reserved would be a bug of
        // this module; it must not wrap the account around.
        let _ = self
            .used_bytes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                Some(used.saturating_sub(bytes))
            });
    }

    pub(crate) fn space(&self) -> SpaceInfo {
        let used = self.used_bytes.load(Ordering::Acquire);
        SpaceInfo {
            total_bytes: self.capacity_bytes,
            free_bytes: self.capacity_bytes.saturating_sub(used),
        }
    }
}

/// `offset + len` as a vector index; EFBIG when it does not fit.
pub(crate) fn end_index(offset: u64, len: usize) -> Result<usize, Errno> {
    usize::try_from(offset)
        .ok()
        .and_then(|offset| offset.checked_add(len))
        .ok_or(Errno::FBIG)
}

/// Grows or shrinks `data` to `new_len` (zero-filled), keeping `space` in
/// step: ENOSPC when the backend is full, ENOMEM when the allocation fails;
/// on error nothing changed.
pub(crate) fn resize_accounted(
    data: &mut Vec<u8>,
    new_len: usize,
    space: &SpaceAccount,
) -> Result<(), Errno> {
    let old_len = data.len();
    if new_len > old_len {
        let grow = new_len - old_len;
        if !space.reserve(grow as u64) {
            return Err(Errno::NOSPC);
        }
        if data.try_reserve(grow).is_err() {
            space.release(grow as u64);
            return Err(Errno::NOMEM);
        }
        data.resize(new_len, 0);
    } else {
        data.truncate(new_len);
        space.release((old_len - new_len) as u64);
    }
    Ok(())
}

/// Copies `data[offset..]` into `buf`; the count copied (0 past the end).
pub(crate) fn read_slice(data: &[u8], buf: &mut [u8], offset: u64) -> usize {
    let Ok(start) = usize::try_from(offset) else {
        return 0;
    };
    if start >= data.len() {
        return 0;
    }
    let count = buf.len().min(data.len() - start);
    buf[..count].copy_from_slice(&data[start..start + count]);
    count
}

/// Block size reported by [`MemBackend`]'s `stat`.
const MEMORY_BLKSIZE: u32 = 4096;

/// The POSIX attributes a [`MemBackend`] keeps for a file or directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct MemAttrs {
    ino: u64,
    /// Directory entries naming it (a directory: 1).
    nlink: u32,
    mode: u32,
    uid: u32,
    gid: u32,
    atime: SystemTime,
    mtime: SystemTime,
    ctime: SystemTime,
}

impl MemAttrs {
    /// Attributes of something created at `time`.
    fn new(ino: u64, mode: u32, time: SystemTime) -> MemAttrs {
        MemAttrs {
            ino,
            nlink: 1,
            mode,
            uid: 0,
            gid: 0,
            atime: time,
            mtime: time,
            ctime: time,
        }
    }

    /// Applies `attr` (already validated) at `now`.
    fn apply(&mut self, attr: &SetAttr, now: SystemTime) {
        let time = |time: TimeSet| match time {
            TimeSet::Now => now,
            TimeSet::At(time) => time,
        };
        if let Some(mode) = attr.mode {
            self.mode = mode & 0o7777;
        }
        if let Some(uid) = attr.uid {
            self.uid = uid;
        }
        if let Some(gid) = attr.gid {
            self.gid = gid;
        }
        if let Some(atime) = attr.atime {
            self.atime = time(atime);
        }
        if let Some(mtime) = attr.mtime {
            self.mtime = time(mtime);
        }
        self.ctime = now;
    }

    /// The contents changed at `now`.
    fn touch(&mut self, now: SystemTime) {
        self.mtime = now;
        self.ctime = now;
    }

    /// The `Stat` of a `kind` of `len` bytes with these attributes.
    fn stat(&self, kind: StatKind, len: u64) -> Stat {
        Stat {
            kind,
            len,
            blocks: len.div_ceil(512),
            mode: self.mode,
            uid: self.uid,
            gid: self.gid,
            nlink: self.nlink,
            ino: self.ino,
            dev: 0,
            atime: self.atime,
            mtime: self.mtime,
            ctime: self.ctime,
            blksize: MEMORY_BLKSIZE,
            rdev: 0,
        }
    }
}

/// Inode number of the directory with tree id `id` (odd; the root's is 1).
fn dir_ino(id: u64) -> u64 {
    id.saturating_mul(2).saturating_add(1)
}

/// The bytes of one file; lives as long as a directory entry or a handle
/// refers to it.
#[derive(Debug)]
struct MemFile {
    data: RwLock<Vec<u8>>,
    /// Never locked together with `data`.
    attrs: Mutex<MemAttrs>,
    space: Arc<SpaceAccount>,
}

impl MemFile {
    /// The contents changed now.
    fn touch(&self) {
        lock(&self.attrs).touch(SystemTime::now());
    }

    /// A name of the file was added (`+1`) or removed (`-1`) now.
    fn relink(&self, delta: i32) {
        let mut attrs = lock(&self.attrs);
        attrs.nlink = attrs.nlink.saturating_add_signed(delta);
        attrs.ctime = SystemTime::now();
    }

    // Poison-tolerant: every write-locked section either completes or
    // changes nothing (see `resize_accounted`).
    fn read(&self) -> RwLockReadGuard<'_, Vec<u8>> {
        self.data.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, Vec<u8>> {
        self.data.write().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for MemFile {
    fn drop(&mut self) {
        let len = self.read().len() as u64;
        self.space.release(len);
    }
}

/// An in-memory tier. Cheap to create; dropped with its last handle.
pub struct MemBackend {
    tree: Mutex<Tree<Arc<MemFile>>>,
    /// Attributes of each directory of `tree`, by directory id; locked only
    /// under `tree`'s lock.
    dirs: Mutex<HashMap<u64, MemAttrs>>,
    /// Files created so far (their inode numbers are `2·n + 2`).
    files_created: AtomicU64,
    space: Arc<SpaceAccount>,
}

impl fmt::Debug for MemBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemBackend")
            .field("space", &self.space.space())
            .finish_non_exhaustive()
    }
}

impl Default for MemBackend {
    fn default() -> Self {
        MemBackend::new()
    }
}

impl MemBackend {
    fn make_dir(&self, path: &RelPath, mode: u32) -> io::Result<()> {
        let mut tree = lock(&self.tree);
        let id = tree
            .create_dir(path)
            .map_err(|errno| self.error(errno, "mkdir", path))?;
        let attrs = MemAttrs::new(dir_ino(id), mode, SystemTime::now());
        lock(&self.dirs).insert(id, attrs);
        Ok(())
    }

    /// An empty tier of [`MEMORY_CAPACITY_DEFAULT`] bytes.
    pub fn new() -> MemBackend {
        MemBackend::with_capacity(MEMORY_CAPACITY_DEFAULT)
    }

    /// An empty tier of `capacity_bytes`.
    pub fn with_capacity(capacity_bytes: u64) -> MemBackend {
        let root = MemAttrs::new(dir_ino(ROOT_DIR_ID), 0o755, SystemTime::now());
        MemBackend {
            tree: Mutex::new(Tree::new()),
            dirs: Mutex::new(HashMap::from([(ROOT_DIR_ID, root)])),
            files_created: AtomicU64::new(0),
            space: Arc::new(SpaceAccount::new(capacity_bytes)),
        }
    }

    fn error(&self, errno: Errno, op: &str, path: &RelPath) -> io::Error {
        errno_error(errno, format_args!("memory: {op} {:?}", path.as_str()))
    }

    /// Attributes of directory `id` (a directory created before attributes
    /// were kept cannot exist; defaults just in case).
    fn dir_attrs(dirs: &mut HashMap<u64, MemAttrs>, id: u64) -> &mut MemAttrs {
        dirs.entry(id)
            .or_insert_with(|| MemAttrs::new(dir_ino(id), 0o755, UNIX_EPOCH))
    }
}

impl Backend for MemBackend {
    fn describe(&self) -> String {
        format!("memory ({} bytes)", self.space.capacity_bytes)
    }

    fn open(&self, path: &RelPath, options: OpenOptions) -> io::Result<Arc<dyn BackendFile>> {
        let (file, _created) = lock(&self.tree)
            .open(path, options, || {
                let n = self.files_created.fetch_add(1, Ordering::Relaxed);
                let ino = n.saturating_mul(2).saturating_add(2);
                Arc::new(MemFile {
                    data: RwLock::new(Vec::new()),
                    attrs: Mutex::new(MemAttrs::new(
                        ino,
                        if options.private { 0o600 } else { 0o644 },
                        SystemTime::now(),
                    )),
                    space: Arc::clone(&self.space),
                })
            })
            .map_err(|errno| self.error(errno, "open", path))?;
        if options.truncate {
            let mut data = file.write();
            let len = data.len() as u64;
            data.clear();
            self.space.release(len);
            drop(data);
            file.touch();
        }
        Ok(Arc::new(MemHandle {
            file,
            path: path.clone(),
        }))
    }

    fn metadata(&self, path: &RelPath) -> io::Result<Metadata> {
        let tree = lock(&self.tree);
        match tree.lookup(path) {
            Ok((FileKind::Dir, _)) => Ok(Metadata {
                kind: FileKind::Dir,
                len: 0,
            }),
            Ok((FileKind::File, file)) => Ok(Metadata {
                kind: FileKind::File,
                len: file.map_or(0, |file| file.read().len() as u64),
            }),
            Err(errno) => Err(self.error(errno, "stat", path)),
        }
    }

    fn remove_file(&self, path: &RelPath) -> io::Result<()> {
        let removed = lock(&self.tree)
            .remove_file(path)
            .map_err(|errno| self.error(errno, "remove", path))?;
        removed.relink(-1);
        // Dropped outside the tree lock: the last reference frees the bytes.
        drop(removed);
        Ok(())
    }

    fn rename(&self, from: &RelPath, to: &RelPath) -> io::Result<()> {
        let mut tree = lock(&self.tree);
        if let (Ok((_, Some(a))), Ok((_, Some(b)))) = (tree.lookup(from), tree.lookup(to)) {
            if Arc::ptr_eq(a, b) {
                // Two names of one file: rename(2) does nothing.
                return Ok(());
            }
        }
        let replaced = tree.rename(from, to).map_err(|errno| {
            errno_error(
                errno,
                format_args!("memory: rename {:?} to {:?}", from.as_str(), to.as_str()),
            )
        })?;
        // A replaced directory is empty: only its own attributes go.
        match &replaced {
            Some(Node::Dir(dir)) => {
                lock(&self.dirs).remove(&dir.id);
            }
            Some(Node::File(file)) => file.relink(-1),
            None => {}
        }
        drop(tree);
        drop::<Option<Node<Arc<MemFile>>>>(replaced);
        Ok(())
    }

    fn create_dir(&self, path: &RelPath) -> io::Result<()> {
        self.make_dir(path, 0o755)
    }

    fn create_private_dir(&self, path: &RelPath) -> io::Result<()> {
        self.make_dir(path, 0o700)
    }

    fn remove_dir(&self, path: &RelPath) -> io::Result<()> {
        let mut tree = lock(&self.tree);
        let id = tree.dir(path).map(|dir| dir.id);
        tree.remove_dir(path)
            .map_err(|errno| self.error(errno, "rmdir", path))?;
        if let Ok(id) = id {
            lock(&self.dirs).remove(&id);
        }
        Ok(())
    }

    fn read_dir(&self, path: &RelPath) -> io::Result<Vec<DirEntry>> {
        lock(&self.tree)
            .read_dir(path)
            .map_err(|errno| self.error(errno, "read_dir", path))
    }

    fn sync_dir(&self, path: &RelPath) -> io::Result<()> {
        // Nothing to make durable; the directory must still exist.
        lock(&self.tree)
            .dir(path)
            .map(|_| ())
            .map_err(|errno| self.error(errno, "sync_dir", path))
    }

    fn space(&self) -> io::Result<SpaceInfo> {
        Ok(self.space.space())
    }

    fn stat(&self, path: &RelPath) -> io::Result<Stat> {
        let tree = lock(&self.tree);
        match tree.lookup(path) {
            Ok((FileKind::File, Some(file))) => {
                let len = file.read().len() as u64;
                let attrs = *lock(&file.attrs);
                Ok(attrs.stat(StatKind::File, len))
            }
            Ok((_, _)) => {
                let id = tree
                    .dir(path)
                    .map_err(|errno| self.error(errno, "stat", path))?
                    .id;
                let mut dirs = lock(&self.dirs);
                Ok(MemBackend::dir_attrs(&mut dirs, id).stat(StatKind::Dir, 0))
            }
            Err(errno) => Err(self.error(errno, "stat", path)),
        }
    }

    fn hard_link(&self, existing: &RelPath, new: &RelPath) -> io::Result<()> {
        let file = lock(&self.tree).link(existing, new).map_err(|errno| {
            errno_error(
                errno,
                format_args!("memory: link {:?} to {:?}", existing.as_str(), new.as_str()),
            )
        })?;
        file.relink(1);
        Ok(())
    }

    fn set_attr(&self, path: &RelPath, attr: &SetAttr) -> io::Result<()> {
        let invalid = |e| with_context(e, format_args!("memory: set_attr {:?}", path.as_str()));
        owner_id(attr.uid, "uid").map_err(invalid)?;
        owner_id(attr.gid, "gid").map_err(invalid)?;
        let now = SystemTime::now();
        let tree = lock(&self.tree);
        match tree.lookup(path) {
            Ok((FileKind::File, Some(file))) => lock(&file.attrs).apply(attr, now),
            Ok((_, _)) => {
                let id = tree
                    .dir(path)
                    .map_err(|errno| self.error(errno, "set_attr", path))?
                    .id;
                MemBackend::dir_attrs(&mut lock(&self.dirs), id).apply(attr, now);
            }
            Err(errno) => return Err(self.error(errno, "set_attr", path)),
        }
        Ok(())
    }
}

/// An open file of a [`MemBackend`]. Errors name the path it was opened as.
#[derive(Debug)]
struct MemHandle {
    file: Arc<MemFile>,
    path: RelPath,
}

impl MemHandle {
    fn error(&self, errno: Errno, op: &str) -> io::Error {
        errno_error(errno, format_args!("memory: {op} {:?}", self.path.as_str()))
    }
}

impl BackendFile for MemHandle {
    fn stat(&self) -> io::Result<Stat> {
        let len = self.file.read().len() as u64;
        Ok(lock(&self.file.attrs).stat(StatKind::File, len))
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        Ok(read_slice(&self.file.read(), buf, offset))
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        if buf.is_empty() {
            return Ok(());
        }
        let end = end_index(offset, buf.len()).map_err(|errno| self.error(errno, "write"))?;
        let mut data = self.file.write();
        if end > data.len() {
            resize_accounted(&mut data, end, &self.file.space)
                .map_err(|errno| self.error(errno, "write"))?;
        }
        // `offset <= end - buf.len()` fits in usize since `end` does.
        let start = end - buf.len();
        data[start..end].copy_from_slice(buf);
        drop(data);
        self.file.touch();
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        Ok(())
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.file.read().len() as u64)
    }

    fn allocate(&self, mode: crate::Allocate, offset: u64, len: u64) -> io::Result<()> {
        let mut data = self.file.write();
        let space = &self.file.space;
        let old_len = data.len();
        mode.apply(&mut data, offset, len, |data, new_len| {
            resize_accounted(data, new_len, space)
        })
        .map_err(|errno| self.error(errno, "fallocate"))?;
        // A collapse gives bytes back.
        space.release(old_len.saturating_sub(data.len()) as u64);
        drop(data);
        self.file.touch();
        Ok(())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let new_len = end_index(len, 0).map_err(|errno| self.error(errno, "set_len"))?;
        let mut data = self.file.write();
        resize_accounted(&mut data, new_len, &self.file.space)
            .map_err(|errno| self.error(errno, "set_len"))?;
        drop(data);
        self.file.touch();
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
    fn full_backend_refuses_growth_and_keeps_bytes() {
        let backend = MemBackend::with_capacity(100);
        let file = backend.open(&p("f"), OpenOptions::CREATE).unwrap();
        file.write_at(&[1; 60], 0).unwrap();
        let error = file.write_at(&[2; 50], 60).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::StorageFull);
        assert_eq!(
            crate::raw_os_error(&error),
            Some(Errno::NOSPC.raw_os_error())
        );
        assert!(error.to_string().contains("\"f\""), "{error}");
        assert_eq!(file.len().unwrap(), 60);
        assert_eq!(backend.space().unwrap().free_bytes, 40);
        // Overwrites inside the file need no space.
        file.write_at(&[3; 60], 0).unwrap();
        assert_eq!(
            file.set_len(101).unwrap_err().kind(),
            io::ErrorKind::StorageFull
        );
        file.set_len(10).unwrap();
        assert_eq!(backend.space().unwrap().free_bytes, 90);
        file.set_len(60).unwrap();
        // Unlinked but open: still counted; closed: freed.
        backend.remove_file(&p("f")).unwrap();
        assert_eq!(backend.space().unwrap().free_bytes, 40);
        drop(file);
        assert_eq!(backend.space().unwrap().free_bytes, 100);
    }

    #[test]
    fn huge_offsets_are_errors_not_panics() {
        let backend = MemBackend::new();
        let file = backend.open(&p("f"), OpenOptions::CREATE).unwrap();
        let error = file.write_at(&[1], u64::MAX).unwrap_err();
        assert!(error.to_string().contains("write \"f\""), "{error}");
        assert_eq!(
            file.write_at(&[1], 1 << 40).unwrap_err().kind(),
            io::ErrorKind::StorageFull
        );
        assert!(file.set_len(u64::MAX).is_err());
        let mut buf = [0u8; 4];
        assert_eq!(file.read_at(&mut buf, u64::MAX).unwrap(), 0);
    }
}
