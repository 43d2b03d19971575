//! [`SluiceFs`]: FUSE requests to engine calls. File data goes through the
//! engine (writes classified, buffered or written through; reads merged);
//! metadata that does not touch file data (modes, owners, times, symbolic
//! links, xattrs, directories) is passed to the capacity tier, where the
//! files live. The file handle the kernel holds is the engine's file id,
//! or, for a checkpoint-class file (a registered BBOS job's glob matches
//! it, or it has a staged copy), a handle of [`Checkpoints`] with
//! `HANDLE_BIT` set: those files' data goes to the stager instead
//! (docs/bbos.md); unlink and rename tell both.
//!
//! FIFOs, sockets and device nodes are made on the capacity tier
//! (`Backend::mknod`) and are entries of the namespace only: the kernel
//! serves their opens itself, so no data of theirs passes through sluice.
//!
//! Set-ID bits: a write by a process without CAP_FSETID clears S_ISUID,
//! and S_ISGID of a group-executable file, as ext4 does. With direct I/O
//! the kernel only flags such writes (`FUSE_WRITE_KILL_SUIDGID`, sent
//! whether or not `FUSE_HANDLE_KILLPRIV_V2` is negotiated, which sluice
//! does not): the clearing is sluice's, before the write. Truncation,
//! chown and cached writes need nothing here: without killpriv negotiated
//! the kernel computes the mode itself and sends it in the SETATTR.
//!
//! Hard links: the engine and the inode table know a file by its capacity
//! identity, so every name of it is one engine file (buffered bytes seen
//! through each) and one node (one inode for the kernel); `link` of a
//! symbolic link or special file goes to the capacity tier only; `link`
//! of or to a checkpoint-class path is refused (EOPNOTSUPP: its staged
//! copy belongs to one path).
//!
//! Refused rather than done wrong: `fallocate` of every mode (EOPNOTSUPP:
//! the log cannot promise the space; glibc's `posix_fallocate` then writes
//! zeros through the normal path), `RENAME_EXCHANGE` and `RENAME_WHITEOUT`
//! (EINVAL).

use std::collections::HashMap;
use std::ffi::OsStr;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use fuser::{
    AccessFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation,
    INodeNo, KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr,
    Request, TimeOrNow, WriteFlags,
};
use sluice_engine::{Checkpoints, Engine};
use sluice_env::{RelPath, SetAttr, SpecialFile, Stat, StatKind, TimeSet, XattrFlags};
use sluice_policy::FileId;

use crate::errno::errno;
use crate::inodes::{Inodes, ROOT, SETID_BITS};

/// How long the kernel may cache attributes and entries. Short: every
/// change goes through this mount, but the capacity tier may be shared.
const TTL: Duration = Duration::from_secs(1);

/// The virtual xattr on the root that names the control socket.
pub const CONTROL_XATTR: &str = "user.sluice.control";

/// The entries of a directory handle, taken at opendir.
type DirSnapshot = Vec<(String, StatKind)>;

/// Operation counters for metrics.
#[derive(Debug, Default)]
pub struct OpCounters {
    /// FUSE read requests.
    pub reads: AtomicU64,
    /// Bytes returned by reads.
    pub read_bytes: AtomicU64,
    /// FUSE write requests.
    pub writes: AtomicU64,
    /// Bytes accepted by writes.
    pub write_bytes: AtomicU64,
    /// fsync requests.
    pub fsyncs: AtomicU64,
    /// Requests answered with an error.
    pub errors: AtomicU64,
    /// Metadata requests (lookup, getattr, setattr, create, ...).
    pub metadata_ops: AtomicU64,
}

/// The mounted file system.
pub struct SluiceFs {
    engine: Arc<Engine>,
    /// BBOS: checkpoint-class files go here instead of the engine; its
    /// handles carry [`sluice_engine::ckpt::HANDLE_BIT`].
    ckpt: Option<Arc<Checkpoints>>,
    inodes: Mutex<Inodes>,
    /// Directory handles: a snapshot of the entries taken at opendir.
    dirs: Mutex<HashMap<u64, Arc<DirSnapshot>>>,
    next_dir: AtomicU64,
    /// Serialises renames so `RENAME_NOREPLACE`'s check and the rename are
    /// one step for this mount.
    renames: Mutex<()>,
    counters: Arc<OpCounters>,
    /// The control socket's path, served as [`CONTROL_XATTR`].
    control: Option<String>,
    max_write: u32,
    /// Open files with `FOPEN_DIRECT_IO`: no kernel page-cache copy.
    open_flags: FopenFlags,
    /// This process's effective uid: files are created by it, then given
    /// to the caller when they differ.
    euid: u32,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn name_str(name: &OsStr) -> Result<&str, Errno> {
    // The tiers are addressed by UTF-8 paths.
    name.to_str().ok_or(Errno::EINVAL)
}

fn to_time_set(t: TimeOrNow) -> TimeSet {
    match t {
        TimeOrNow::Now => TimeSet::Now,
        TimeOrNow::SpecificTime(t) => TimeSet::At(t),
    }
}

fn file_type(kind: StatKind) -> FileType {
    match kind {
        StatKind::File => FileType::RegularFile,
        StatKind::Dir => FileType::Directory,
        StatKind::Symlink => FileType::Symlink,
        StatKind::Fifo => FileType::NamedPipe,
        StatKind::Socket => FileType::Socket,
        StatKind::CharDevice => FileType::CharDevice,
        StatKind::BlockDevice => FileType::BlockDevice,
    }
}

/// What a `mknod` request makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum NodeToMake {
    /// A regular file (through the engine, like `create`).
    File,
    /// A FIFO, socket or device, on the capacity tier.
    Special(SpecialFile),
}

/// The node a `mknod` of `mode` (file type bits included) and `rdev`
/// asks for; EINVAL for a type mknod does not make (directories, links).
fn node_to_make(mode: u32, rdev: u32) -> Result<NodeToMake, Errno> {
    const S_IFMT: u32 = 0o170_000;
    const S_IFREG: u32 = 0o100_000;
    match SpecialFile::from_mode(mode, rdev) {
        Some(special) => Ok(NodeToMake::Special(special)),
        // mknod(2): a zero file type means a regular file.
        None if matches!(mode & S_IFMT, 0 | S_IFREG) => Ok(NodeToMake::File),
        None => Err(Errno::EINVAL),
    }
}

/// The permission bits a write or truncate by a process without
/// CAP_FSETID leaves on a file with `mode`, if they change (the kernel's
/// `setattr_should_drop_suidgid`, as ext4 applies it): S_ISUID always
/// goes; S_ISGID goes when the file is group-executable. Without group
/// execute S_ISGID grants nothing (it marks mandatory locking) and stays;
/// the kernel would clear it for a writer outside the file's group, but
/// the request names only the caller's primary group, not its
/// supplementary ones.
fn mode_after_unprivileged_write(mode: u32) -> Option<u32> {
    const S_ISUID: u32 = 0o4000;
    const S_ISGID: u32 = 0o2000;
    const S_IXGRP: u32 = 0o010;
    let mut kept = mode & 0o7777;
    kept &= !S_ISUID;
    if kept & S_IXGRP != 0 {
        kept &= !S_ISGID;
    }
    (kept != mode & 0o7777).then_some(kept)
}

/// The node of `path` for a reply that hands it to the kernel, with that
/// reply's lookup counted, and the attributes `stat` found for it.
///
/// `stat` runs first (its identity says which node the path names: two
/// names of one file are one node); the node is then taken and its lookup
/// counted under one hold of the table: between two holds a FORGET of the
/// kernel's earlier references, handled on another thread, would drop the
/// node, and the reply would name an inode that no longer resolves (the
/// next OPEN gets ENOENT). If `stat` fails nothing is handed out and
/// nothing is counted.
fn counted_entry(
    inodes: &Mutex<Inodes>,
    path: &RelPath,
    stat: impl FnOnce() -> io::Result<Stat>,
) -> io::Result<(u64, Stat)> {
    let st = stat()?;
    let ino = lock(inodes).entry(path, st.identity(), true);
    Ok((ino, st))
}

impl SluiceFs {
    /// A file system over `engine`.
    pub fn new(
        engine: Arc<Engine>,
        ckpt: Option<Arc<Checkpoints>>,
        counters: Arc<OpCounters>,
        control: Option<String>,
        max_write: u32,
        direct_io: bool,
    ) -> SluiceFs {
        SluiceFs {
            engine,
            ckpt,
            inodes: Mutex::new(Inodes::default()),
            dirs: Mutex::new(HashMap::new()),
            next_dir: AtomicU64::new(1),
            renames: Mutex::new(()),
            counters,
            control,
            max_write,
            open_flags: if direct_io {
                FopenFlags::FOPEN_DIRECT_IO
            } else {
                FopenFlags::empty()
            },
            euid: rustix::process::geteuid().as_raw(),
        }
    }

    /// The stager, if it takes `path` (a registered glob matches it or it
    /// has a fast-tier copy).
    fn ckpt_for(&self, path: &RelPath) -> Option<&Checkpoints> {
        self.ckpt.as_deref().filter(|c| c.handles(path))
    }

    /// The stager, if `fh` is one of its handles.
    fn ckpt_handle(&self, fh: FileHandle) -> Option<&Checkpoints> {
        self.ckpt.as_deref().filter(|_| Checkpoints::owns(fh.0))
    }

    fn fail(&self, e: &io::Error) -> Errno {
        self.counters.errors.fetch_add(1, Ordering::Relaxed);
        errno(e)
    }

    fn meta(&self) {
        self.counters.metadata_ops.fetch_add(1, Ordering::Relaxed);
    }

    fn path(&self, ino: INodeNo) -> Result<RelPath, Errno> {
        lock(&self.inodes).path(ino.0).ok_or(Errno::ENOENT)
    }

    /// The path of `ino` and an xattr `name` as UTF-8.
    fn path_and_name<'n>(
        &self,
        ino: INodeNo,
        name: &'n OsStr,
    ) -> Result<(RelPath, &'n str), Errno> {
        Ok((self.path(ino)?, name_str(name)?))
    }

    fn child(&self, parent: INodeNo, name: &OsStr) -> Result<RelPath, Errno> {
        let parent = self.path(parent)?;
        parent.join(name_str(name)?).map_err(|_| Errno::EINVAL)
    }

    /// Attributes of `path` as the kernel sees them: the capacity tier's,
    /// with the engine's logical size for a file it holds open.
    fn attr(&self, ino: u64, path: &RelPath) -> io::Result<FileAttr> {
        Ok(self.file_attr(ino, &self.stat(path)?))
    }

    /// The capacity tier's attributes of `path`, with the engine's logical
    /// size for a file it holds open (under this or another name).
    fn stat(&self, path: &RelPath) -> io::Result<Stat> {
        let mut st: Stat = self.engine.capacity_tier().stat(path)?;
        if st.kind == StatKind::File {
            match self.ckpt.as_ref().and_then(|c| c.size(path)) {
                Some(staged) => {
                    st.len = staged;
                    st.blocks = st.blocks.max(staged.div_ceil(512));
                }
                None => self.engine.overlay(path, &mut st),
            }
        }
        Ok(st)
    }

    /// Attributes of a node whose name was removed while it is open
    /// (unlinked, or renamed over): through an engine handle open on it,
    /// as `fstat` does. ENOENT when none is.
    fn open_attr(&self, ino: u64, fh: Option<FileHandle>) -> io::Result<FileAttr> {
        let handle = fh
            .map(|fh| fh.0)
            .or_else(|| lock(&self.inodes).open_handle(ino))
            .filter(|&h| !Checkpoints::owns(h))
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        let st = self.engine.stat_open(FileId(handle))?;
        Ok(self.file_attr(ino, &st))
    }

    /// The kernel's view of `st` for node `ino`.
    fn file_attr(&self, ino: u64, st: &Stat) -> FileAttr {
        lock(&self.inodes).note_mode(ino, st.mode);
        let (size, blocks) = (st.len, st.blocks);
        FileAttr {
            ino: INodeNo(ino),
            size,
            blocks,
            atime: st.atime,
            mtime: st.mtime,
            ctime: st.ctime,
            crtime: st.ctime,
            kind: file_type(st.kind),
            perm: (st.mode & 0o7777) as u16,
            nlink: st.nlink,
            uid: st.uid,
            gid: st.gid,
            rdev: st.rdev,
            blksize: st.blksize.max(4096),
            flags: 0,
        }
    }

    /// Look `path` up for the kernel (one reference counted).
    fn entry(&self, path: &RelPath) -> io::Result<FileAttr> {
        let (ino, st) = counted_entry(&self.inodes, path, || self.stat(path))?;
        Ok(self.file_attr(ino, &st))
    }

    /// A new node belongs to the caller: mode without the umask, and the
    /// caller's owner when it is not this process.
    fn own(&self, req: &Request, path: &RelPath, mode: u32, umask: u32) -> io::Result<()> {
        let foreign = req.uid() != self.euid || req.gid() != rustix::process::getegid().as_raw();
        self.engine.capacity_tier().set_attr(
            path,
            &SetAttr {
                mode: Some(mode & !umask & 0o7777),
                uid: foreign.then(|| req.uid()),
                gid: foreign.then(|| req.gid()),
                ..SetAttr::default()
            },
        )
    }

    /// Before a write the kernel flagged `FUSE_WRITE_KILL_SUIDGID` (the
    /// writer lacks CAP_FSETID): clear the file's set-ID bits as ext4
    /// would. Only files that may have some are stat'ed (the node's hint).
    fn kill_setid(&self, ino: INodeNo) -> io::Result<()> {
        let Some((path, epoch)) = lock(&self.inodes).setid_check(ino.0) else {
            return Ok(());
        };
        let tier = self.engine.capacity_tier();
        let st = match tier.stat(&path) {
            Ok(st) => st,
            // Gone from the tier meanwhile: no bits to clear; the write
            // itself says what became of the file.
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        let mode = match mode_after_unprivileged_write(st.mode) {
            Some(mode) => {
                tier.set_attr(
                    &path,
                    &SetAttr {
                        mode: Some(mode),
                        ..SetAttr::default()
                    },
                )?;
                mode
            }
            None => st.mode,
        };
        if mode & SETID_BITS == 0 {
            lock(&self.inodes).setid_cleared(ino.0, epoch);
        }
        Ok(())
    }

    /// Answer a request that made a new entry.
    fn reply_entry(&self, result: io::Result<FileAttr>, reply: ReplyEntry) {
        match result {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(self.fail(&e)),
        }
    }

    fn xattr_reply(&self, value: &[u8], size: u32, reply: ReplyXattr) {
        if size == 0 {
            reply.size(u32::try_from(value.len()).unwrap_or(u32::MAX));
        } else if value.len() > size as usize {
            reply.error(Errno::ERANGE);
        } else {
            reply.data(value);
        }
    }
}

impl Filesystem for SluiceFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        // Large writes reach the detector whole (as the application made
        // them, up to this size); the default would split them at 128 KiB.
        if let Err(nearest) = config.set_max_write(self.max_write) {
            let _ = config.set_max_write(nearest);
        }
        // With direct I/O, shared mmap still works where the kernel allows
        // it (Linux 6.6+); without the flag mmap of such files fails.
        if !self.open_flags.is_empty() {
            let _ = config.add_capabilities(fuser::InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP);
        }
        Ok(())
    }

    fn destroy(&mut self) {}

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        self.meta();
        let path = match self.child(parent, name) {
            Ok(p) => p,
            Err(e) => return reply.error(e),
        };
        match self.entry(&path) {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            // A miss is not an error worth counting.
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        lock(&self.inodes).forget(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        self.meta();
        let attr = match self.path(ino) {
            Ok(path) => self.attr(ino.0, &path),
            Err(_) => self.open_attr(ino.0, fh),
        };
        match attr {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(self.fail(&e)),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        self.meta();
        let path = match self.path(ino) {
            Ok(p) => p,
            Err(e) => {
                // A name-less open file: ftruncate through its handle.
                let handle = fh
                    .map(|fh| fh.0)
                    .or_else(|| lock(&self.inodes).open_handle(ino.0))
                    .filter(|&h| !Checkpoints::owns(h));
                let result = match (handle, size) {
                    (Some(h), Some(size)) if mode.is_none() && uid.is_none() && gid.is_none() => {
                        self.engine.truncate(FileId(h), size)
                    }
                    (Some(_), None) if mode.is_none() && uid.is_none() && gid.is_none() => Ok(()),
                    _ => return reply.error(e),
                };
                return match result.and_then(|()| self.open_attr(ino.0, fh)) {
                    Ok(attr) => reply.attr(&TTL, &attr),
                    Err(e) => reply.error(self.fail(&e)),
                };
            }
        };
        let result = (|| -> io::Result<()> {
            if let Some(size) = size {
                let staged = match (fh, self.ckpt.as_deref()) {
                    (Some(fh), Some(c)) if Checkpoints::owns(fh.0) => {
                        c.truncate(fh.0, size)?;
                        true
                    }
                    (None, Some(c)) => c.truncate_path(&path, size)?,
                    _ => false,
                };
                match fh {
                    _ if staged => {}
                    Some(fh) => self.engine.truncate(FileId(fh.0), size)?,
                    None => {
                        let id = self.engine.open_file(&path)?;
                        let result = self.engine.truncate(id, size);
                        self.engine.release(id);
                        result?;
                    }
                }
            }
            let attr = SetAttr {
                mode,
                uid,
                gid,
                atime: atime.map(to_time_set),
                mtime: mtime.map(to_time_set),
            };
            if attr != SetAttr::default() {
                self.engine.capacity_tier().set_attr(&path, &attr)?;
            }
            Ok(())
        })();
        match result.and_then(|()| self.attr(ino.0, &path)) {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(self.fail(&e)),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        self.meta();
        let path = match self.path(ino) {
            Ok(p) => p,
            Err(e) => return reply.error(e),
        };
        match self.engine.capacity_tier().read_link(&path) {
            Ok(target) => reply.data(target.as_bytes()),
            Err(e) => reply.error(self.fail(&e)),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        self.meta();
        let node = match node_to_make(mode, rdev) {
            Ok(node) => node,
            Err(e) => return reply.error(e),
        };
        let path = match self.child(parent, name) {
            Ok(p) => p,
            Err(e) => return reply.error(e),
        };
        let result = (|| {
            match node {
                NodeToMake::File => {
                    let id = self.engine.create(&path)?;
                    self.engine.release(id);
                }
                NodeToMake::Special(special) => {
                    self.engine
                        .capacity_tier()
                        .mknod(&path, special, mode & !umask)?;
                }
            }
            self.own(req, &path, mode, umask)?;
            self.entry(&path)
        })();
        self.reply_entry(result, reply);
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        self.meta();
        let path = match self.child(parent, name) {
            Ok(p) => p,
            Err(e) => return reply.error(e),
        };
        let result = (|| {
            self.engine.mkdir(&path)?;
            self.own(req, &path, mode, umask)?;
            self.entry(&path)
        })();
        self.reply_entry(result, reply);
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.meta();
        let path = match self.child(parent, name) {
            Ok(p) => p,
            Err(e) => return reply.error(e),
        };
        if let Some(c) = self.ckpt.as_deref() {
            if let Err(e) = c.unlink(&path) {
                return reply.error(self.fail(&e));
            }
        }
        // A symbolic link is not an engine file: remove it directly.
        let result = match self.engine.capacity_tier().stat(&path) {
            Ok(st) if st.kind != StatKind::File => self.engine.capacity_tier().remove_file(&path),
            _ => self.engine.unlink(&path),
        };
        match result {
            Ok(()) => {
                lock(&self.inodes).detach(&path);
                reply.ok();
            }
            Err(e) => reply.error(self.fail(&e)),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.meta();
        let path = match self.child(parent, name) {
            Ok(p) => p,
            Err(e) => return reply.error(e),
        };
        match self.engine.rmdir(&path) {
            Ok(()) => {
                lock(&self.inodes).detach(&path);
                reply.ok();
            }
            Err(e) => reply.error(self.fail(&e)),
        }
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        self.meta();
        let path = match self.child(parent, link_name) {
            Ok(p) => p,
            Err(e) => return reply.error(e),
        };
        let Some(target) = target.to_str() else {
            return reply.error(Errno::EINVAL);
        };
        let result = (|| {
            let tier = self.engine.capacity_tier();
            tier.symlink(target, &path)?;
            if req.uid() != self.euid {
                tier.set_attr(
                    &path,
                    &SetAttr {
                        uid: Some(req.uid()),
                        gid: Some(req.gid()),
                        ..SetAttr::default()
                    },
                )?;
            }
            self.entry(&path)
        })();
        self.reply_entry(result, reply);
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        self.meta();
        let (from, to) = match (self.child(parent, name), self.child(newparent, newname)) {
            (Ok(f), Ok(t)) => (f, t),
            (Err(e), _) | (_, Err(e)) => return reply.error(e),
        };
        if !(flags - RenameFlags::RENAME_NOREPLACE).is_empty() {
            return reply.error(Errno::EINVAL);
        }
        let _serial = lock(&self.renames);
        let tier = self.engine.capacity_tier();
        if flags.contains(RenameFlags::RENAME_NOREPLACE) && tier.stat(&to).is_ok() {
            return reply.error(Errno::EEXIST);
        }
        if let Some(c) = self.ckpt.as_deref() {
            if let Err(e) = c.rename(&from, &to) {
                return reply.error(self.fail(&e));
            }
        }
        let from_stat = tier.stat(&from);
        let same_file = match (&from_stat, tier.stat(&to)) {
            (Ok(a), Ok(b)) => from != to && a.identity() == b.identity(),
            _ => false,
        };
        let result = match from_stat {
            // Two names of one file (hard links): rename(2) does nothing.
            _ if same_file => Ok(()),
            // Links, FIFOs, sockets and devices are not engine files.
            Ok(st) if !st.kind.is_file_or_dir() => tier.rename(&from, &to),
            _ => self.engine.rename(&from, &to),
        };
        match result {
            Ok(()) => {
                lock(&self.inodes).rename(&from, &to);
                reply.ok();
            }
            Err(e) => reply.error(self.fail(&e)),
        }
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        self.meta();
        let (existing, new) = match (self.path(ino), self.child(newparent, newname)) {
            (Ok(e), Ok(n)) => (e, n),
            (Err(e), _) | (_, Err(e)) => return reply.error(e),
        };
        if self.ckpt_for(&existing).is_some() || self.ckpt_for(&new).is_some() {
            // A staged checkpoint is one path's copy on the fast tier; a
            // second name would miss it.
            return reply.error(Errno::EOPNOTSUPP);
        }
        let result = (|| {
            let tier = self.engine.capacity_tier();
            match tier.stat(&existing)?.kind {
                // The engine learns the name of a file, so its buffered
                // bytes are seen through both.
                StatKind::File => self.engine.link(&existing, &new)?,
                _ => tier.hard_link(&existing, &new)?,
            }
            // The reply names the existing node (the kernel relies on it),
            // with the link count both names now share.
            let st = self.stat(&new)?;
            let node = lock(&self.inodes).link(ino.0, &new, st.identity());
            Ok(self.file_attr(node, &st))
        })();
        self.reply_entry(result, reply);
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        self.meta();
        let path = match self.path(ino) {
            Ok(p) => p,
            Err(e) => return reply.error(e),
        };
        let opened = match self.ckpt_for(&path) {
            Some(c) => {
                let bits = rustix::fs::OFlags::from_bits_retain(flags.0 as u32);
                let write = bits & rustix::fs::OFlags::ACCMODE != rustix::fs::OFlags::RDONLY;
                c.open_file(&path, write, bits.contains(rustix::fs::OFlags::TRUNC))
            }
            None => self.engine.open_file(&path).map(|id| id.0),
        };
        match opened.map(FileId) {
            Ok(id) => {
                lock(&self.inodes).opened(ino.0, id.0);
                reply.opened(FileHandle(id.0), self.open_flags)
            }
            Err(e) => reply.error(self.fail(&e)),
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        self.counters.reads.fetch_add(1, Ordering::Relaxed);
        let data = match self.ckpt_handle(fh) {
            Some(c) => c.read(fh.0, offset, u64::from(size)),
            None => self.engine.read(FileId(fh.0), offset, u64::from(size)),
        };
        match data {
            Ok(data) => {
                self.counters
                    .read_bytes
                    .fetch_add(data.len() as u64, Ordering::Relaxed);
                reply.data(&data);
            }
            Err(e) => reply.error(self.fail(&e)),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        self.counters.writes.fetch_add(1, Ordering::Relaxed);
        // Before the data, as ext4 does: a failure leaves the file as it was.
        if write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID) {
            if let Err(e) = self.kill_setid(ino) {
                return reply.error(self.fail(&e));
            }
        }
        let written = match self.ckpt_handle(fh) {
            Some(c) => c.write(fh.0, offset, data),
            None => self.engine.write(FileId(fh.0), offset, data),
        };
        match written {
            Ok(()) => {
                self.counters
                    .write_bytes
                    .fetch_add(data.len() as u64, Ordering::Relaxed);
                reply.written(u32::try_from(data.len()).unwrap_or(u32::MAX));
            }
            Err(e) => reply.error(self.fail(&e)),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // close() makes nothing durable (POSIX): fsync does.
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        lock(&self.inodes).released(ino.0, fh.0);
        match self.ckpt_handle(fh) {
            Some(c) => c.release(fh.0),
            None => self.engine.release(FileId(fh.0)),
        }
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.counters.fsyncs.fetch_add(1, Ordering::Relaxed);
        let synced = match self.ckpt_handle(fh) {
            Some(c) => c.fsync(fh.0),
            None => self.engine.fsync(FileId(fh.0)),
        };
        match synced {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(self.fail(&e)),
        }
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        self.meta();
        let path = match self.path(ino) {
            Ok(p) => p,
            Err(e) => return reply.error(e),
        };
        match self.engine.capacity_tier().read_dir_all(&path) {
            Ok(mut entries) => {
                entries.sort();
                let fh = self.next_dir.fetch_add(1, Ordering::Relaxed);
                lock(&self.dirs).insert(fh, Arc::new(entries));
                reply.opened(FileHandle(fh), FopenFlags::empty());
            }
            Err(e) => reply.error(self.fail(&e)),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let Some(entries) = lock(&self.dirs).get(&fh.0).cloned() else {
            return reply.error(Errno::EBADF);
        };
        let path = match self.path(ino) {
            Ok(p) => p,
            Err(e) => return reply.error(e),
        };
        let parent_ino = match path.parent() {
            Some(parent) => lock(&self.inodes).listed(&parent),
            None => ROOT,
        };
        // Offsets: 1 after ".", 2 after "..", 2 + i + 1 after entry i.
        let dots = [
            (ino.0, FileType::Directory, ".".to_string()),
            (parent_ino, FileType::Directory, "..".to_string()),
        ];
        let mut index = offset;
        while index < 2 + entries.len() as u64 {
            let (child_ino, kind, name) = if index < 2 {
                dots[index as usize].clone()
            } else {
                let (name, kind) = &entries[(index - 2) as usize];
                let Ok(child) = path.join(name) else {
                    index += 1;
                    continue;
                };
                let child_ino = lock(&self.inodes).listed(&child);
                (child_ino, file_type(*kind), name.clone())
            };
            if reply.add(INodeNo(child_ino), index + 1, kind, &name) {
                break;
            }
            index += 1;
        }
        reply.ok();
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        lock(&self.dirs).remove(&fh.0);
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let path = match self.path(ino) {
            Ok(p) => p,
            Err(e) => return reply.error(e),
        };
        match self.engine.capacity_tier().sync_dir(&path) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(self.fail(&e)),
        }
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        // The namespace and its space are the capacity tier's; the fast
        // tier is a cache in front of it (its use is in `sluice status`).
        match self.engine.capacity_tier().space() {
            Ok(space) => {
                let block = 4096u64;
                reply.statfs(
                    space.total_bytes / block,
                    space.free_bytes / block,
                    space.free_bytes / block,
                    0,
                    0,
                    block as u32,
                    255,
                    block as u32,
                );
            }
            Err(e) => reply.error(self.fail(&e)),
        }
    }

    fn setxattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        self.meta();
        let (path, name) = match self.path_and_name(ino, name) {
            Ok(pn) => pn,
            Err(e) => return reply.error(e),
        };
        if ino.0 == ROOT && name == CONTROL_XATTR {
            return reply.error(Errno::EPERM);
        }
        const XATTR_CREATE: i32 = 1;
        const XATTR_REPLACE: i32 = 2;
        let flags = match flags {
            0 => XattrFlags::Either,
            XATTR_CREATE => XattrFlags::CreateOnly,
            XATTR_REPLACE => XattrFlags::ReplaceOnly,
            _ => return reply.error(Errno::EINVAL),
        };
        match self
            .engine
            .capacity_tier()
            .set_xattr(&path, name, value, flags)
        {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(self.fail(&e)),
        }
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        self.meta();
        let (path, name) = match self.path_and_name(ino, name) {
            Ok(pn) => pn,
            Err(e) => return reply.error(e),
        };
        if ino.0 == ROOT && name == CONTROL_XATTR {
            return match &self.control {
                Some(socket) => self.xattr_reply(socket.as_bytes(), size, reply),
                None => reply.error(Errno::ENODATA),
            };
        }
        match self.engine.capacity_tier().get_xattr(&path, name) {
            Ok(value) => self.xattr_reply(&value, size, reply),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        self.meta();
        let path = match self.path(ino) {
            Ok(p) => p,
            Err(e) => return reply.error(e),
        };
        match self.engine.capacity_tier().list_xattr(&path) {
            Ok(names) => {
                let mut list = Vec::new();
                for name in names {
                    list.extend_from_slice(name.as_bytes());
                    list.push(0);
                }
                self.xattr_reply(&list, size, reply);
            }
            Err(e) => reply.error(self.fail(&e)),
        }
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.meta();
        let (path, name) = match self.path_and_name(ino, name) {
            Ok(pn) => pn,
            Err(e) => return reply.error(e),
        };
        match self.engine.capacity_tier().remove_xattr(&path, name) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        self.meta();
        let path = match self.path(ino) {
            Ok(p) => p,
            Err(e) => return reply.error(e),
        };
        let st = match self.engine.capacity_tier().stat(&path) {
            Ok(st) => st,
            Err(e) => return reply.error(errno(&e)),
        };
        let want = mask.bits() as u32 & 0o7;
        let granted = if req.uid() == 0 {
            // Root may do anything but execute a file nobody may execute.
            if want & 1 != 0 && st.kind == StatKind::File && st.mode & 0o111 == 0 {
                0o6
            } else {
                0o7
            }
        } else if req.uid() == st.uid {
            (st.mode >> 6) & 0o7
        } else if req.gid() == st.gid {
            (st.mode >> 3) & 0o7
        } else {
            st.mode & 0o7
        };
        if want & !granted == 0 {
            reply.ok();
        } else {
            reply.error(Errno::EACCES);
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        self.meta();
        let path = match self.child(parent, name) {
            Ok(p) => p,
            Err(e) => return reply.error(e),
        };
        let result = (|| {
            let ckpt = self.ckpt_for(&path);
            let id = match ckpt {
                Some(c) => FileId(c.create(&path)?),
                None => self.engine.create(&path)?,
            };
            let attr = self
                .own(req, &path, mode, umask)
                .and_then(|()| self.entry(&path));
            if attr.is_err() {
                match ckpt {
                    Some(c) => c.release(id.0),
                    None => self.engine.release(id),
                }
            }
            attr.map(|a| (id, a))
        })();
        match result {
            Ok((id, attr)) => {
                lock(&self.inodes).opened(attr.ino.0, id.0);
                reply.created(
                    &TTL,
                    &attr,
                    Generation(0),
                    FileHandle(id.0),
                    self.open_flags,
                )
            }
            Err(e) => reply.error(self.fail(&e)),
        }
    }

    fn fallocate(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _offset: u64,
        _length: u64,
        _mode: i32,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::EOPNOTSUPP);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> RelPath {
        RelPath::new(s).unwrap()
    }

    /// A capacity stat of a regular file with inode number `ino`.
    fn stat_of(ino: u64) -> Stat {
        Stat {
            kind: StatKind::File,
            len: 0,
            blocks: 0,
            mode: 0o644,
            uid: 0,
            gid: 0,
            nlink: 1,
            ino,
            dev: 0,
            atime: SystemTime::UNIX_EPOCH,
            mtime: SystemTime::UNIX_EPOCH,
            ctime: SystemTime::UNIX_EPOCH,
            blksize: 4096,
            rdev: 0,
        }
    }

    /// Issue: reopening an existing file failed with ENOENT. The kernel's
    /// FORGET of the earlier lookups, handled on another thread while a
    /// new LOOKUP of the same path was between taking the inode number and
    /// counting its reference, dropped the node: the reply named an inode
    /// that no longer resolved, and the OPEN that followed got ENOENT.
    /// (The node is now chosen after the stat, which says which file the
    /// path names, and counted in the same hold of the table.)
    #[test]
    fn reopen_enoent_forget_between_lookup_steps_keeps_the_node() {
        let inodes = Mutex::new(Inodes::default());
        let path = p("dir/file");
        // Two earlier lookups the kernel holds.
        let first = lock(&inodes).entry(&path, (0, 7), true);
        assert_eq!(lock(&inodes).entry(&path, (0, 7), true), first);
        let (ino, _) = counted_entry(&inodes, &path, || {
            // The stat is in progress; another thread handles the kernel's
            // FORGET of both earlier references now.
            lock(&inodes).forget(first, 2);
            Ok(stat_of(7))
        })
        .unwrap();
        assert_eq!(
            lock(&inodes).path(ino),
            Some(path.clone()),
            "the inode handed to the kernel still resolves (OPEN must not get ENOENT)"
        );
        // The reply's reference is the only one left: one FORGET drops it.
        lock(&inodes).forget(ino, 1);
        assert_eq!(lock(&inodes).path(ino), None);
        assert!(lock(&inodes).is_empty());
    }

    /// Issue: SUID/SGID were kept on a write by a process without
    /// CAP_FSETID (ext4 clears them).
    #[test]
    fn suid_sgid_kept_on_write_the_unprivileged_write_clears_them() {
        assert_eq!(mode_after_unprivileged_write(0o4755), Some(0o755));
        assert_eq!(mode_after_unprivileged_write(0o2775), Some(0o775));
        assert_eq!(mode_after_unprivileged_write(0o6777), Some(0o777));
        assert_eq!(mode_after_unprivileged_write(0o7777), Some(0o1777));
        // S_ISGID without group execute grants nothing and stays.
        assert_eq!(mode_after_unprivileged_write(0o2765), None);
        assert_eq!(mode_after_unprivileged_write(0o6765), Some(0o2765));
        assert_eq!(mode_after_unprivileged_write(0o755), None);
        assert_eq!(mode_after_unprivileged_write(0o1777), None, "sticky stays");
        // File type bits are ignored.
        assert_eq!(mode_after_unprivileged_write(0o104_755), Some(0o755));
    }

    /// Issue: FIFOs, sockets and devices were refused (EOPNOTSUPP).
    #[test]
    fn fifos_sockets_and_devices_refused_mknod_makes_each_kind() {
        assert_eq!(
            node_to_make(0o010_644, 0),
            Ok(NodeToMake::Special(SpecialFile::Fifo))
        );
        assert_eq!(
            node_to_make(0o140_755, 0),
            Ok(NodeToMake::Special(SpecialFile::Socket))
        );
        assert_eq!(
            node_to_make(0o020_600, 0x103),
            Ok(NodeToMake::Special(SpecialFile::CharDevice { rdev: 0x103 }))
        );
        assert_eq!(
            node_to_make(0o060_600, 0x700),
            Ok(NodeToMake::Special(SpecialFile::BlockDevice {
                rdev: 0x700
            }))
        );
        assert_eq!(node_to_make(0o100_644, 0), Ok(NodeToMake::File));
        assert_eq!(node_to_make(0o644, 0), Ok(NodeToMake::File));
        assert_eq!(node_to_make(0o040_755, 0), Err(Errno::EINVAL));
        assert_eq!(node_to_make(0o120_777, 0), Err(Errno::EINVAL));
    }

    /// Issue: a socket on the capacity tier showed as a FIFO.
    #[test]
    fn socket_shown_as_fifo_every_kind_keeps_its_type() {
        assert_eq!(file_type(StatKind::Socket), FileType::Socket);
        assert_eq!(file_type(StatKind::Fifo), FileType::NamedPipe);
        assert_eq!(file_type(StatKind::CharDevice), FileType::CharDevice);
        assert_eq!(file_type(StatKind::BlockDevice), FileType::BlockDevice);
    }

    /// A failed stat hands nothing to the kernel, so it must count nothing:
    /// the node of a fresh path is not left behind.
    #[test]
    fn a_failed_entry_counts_no_lookup() {
        let inodes = Mutex::new(Inodes::default());
        let path = p("gone");
        let known = lock(&inodes).entry(&path, (0, 3), true);
        let result = counted_entry(&inodes, &path, || {
            Err(io::Error::from(io::ErrorKind::NotFound))
        });
        assert!(result.is_err());
        lock(&inodes).forget(known, 1);
        assert_eq!(
            lock(&inodes).path(known),
            None,
            "only the earlier lookup was counted"
        );
        let fresh = p("fresh");
        let result = counted_entry(&inodes, &fresh, || {
            Err(io::Error::from(io::ErrorKind::NotFound))
        });
        assert!(result.is_err());
        assert!(
            lock(&inodes).is_empty(),
            "no node left for a path never handed out"
        );
    }

    /// The same race with real threads: lookups and forgets of one file
    /// under two names (hard links) from several threads, each checking
    /// that the inode it was handed resolves (to one of the two names)
    /// while it holds the reference.
    #[test]
    fn reopen_enoent_concurrent_lookups_and_forgets_never_lose_a_held_node() {
        let inodes = Mutex::new(Inodes::default());
        let names = [p("f"), p("g")];
        std::thread::scope(|scope| {
            for t in 0..4 {
                let (inodes, names) = (&inodes, &names);
                scope.spawn(move || {
                    for i in 0..2000 {
                        let path = &names[(t + i) % 2];
                        let (ino, _) = counted_entry(inodes, path, || {
                            std::thread::yield_now();
                            Ok(stat_of(42))
                        })
                        .unwrap();
                        let resolved = lock(inodes).path(ino);
                        assert!(
                            resolved.as_ref().is_some_and(|r| names.contains(r)),
                            "inode {ino} handed out but dropped"
                        );
                        lock(inodes).forget(ino, 1);
                    }
                });
            }
        });
        assert!(lock(&inodes).is_empty(), "every reference was forgotten");
    }
}
