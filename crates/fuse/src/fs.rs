//! [`SluiceFs`]: fuser's `Filesystem` over a [`Volume`]. Each handler
//! converts fuser's arguments to sluice's types, calls one `Volume` method,
//! maps an `io::Error` to an errno with [`errno`] (the only place errors
//! become errnos) and replies. An errno that reports a failure rather
//! than answers the request ([`is_failure`]: EIO, ENOSPC, ..., not ENOENT)
//! is recorded with the operation, the path and the error's message in
//! the engine's `last_errors`, which logs it ([`SluiceFs::answer`]). Decisions — routing between the engine and
//! the checkpoint stager, names, rename rules, permissions, set-ID
//! clearing, ownership of new nodes — are the volume's
//! (`crates/fuse/src/volume/`), tested without a mount. This module keeps
//! only what is FUSE's own: the kernel configuration at init, reply
//! shapes (TTLs, open flags, xattr size probing), the kernel's rules for
//! passthrough handles ([`crate::passthrough`]), the thread a waiting
//! lock request blocks on, and the operation counters for metrics.

use std::ffi::OsStr;
use std::io;
use std::os::fd::BorrowedFd;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use fuser::{
    AccessFlags, BackingId, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags,
    Generation, INodeNo, KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate,
    ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyLock, ReplyOpen, ReplyStatfs,
    ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use sluice_engine::{Checkpoints, Engine};
use sluice_env::{StatKind, TimeSet};

use crate::errno::{errno, is_failure};
use crate::pagecache::PageCache;
use crate::passthrough::{Passthrough, Place};
use crate::volume::{Attr, AttrChanges, Caller, LockRange, Volume};
use crate::workers::Workers;

pub use crate::volume::{Consistency, CONTROL_XATTR};

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
    /// fallocate requests (every mode).
    pub fallocates: AtomicU64,
    /// Requests answered with an error.
    pub errors: AtomicU64,
    /// Metadata requests (lookup, getattr, setattr, create, ...).
    pub metadata_ops: AtomicU64,
    /// Opens and creates the kernel serves itself by FUSE passthrough
    /// (their reads and writes are not counted above).
    pub passthrough_opens: AtomicU64,
    /// Opens answered with the file's bytes kept in the kernel's page
    /// cache since its last close (crate::pagecache): their reads do not
    /// come to sluice.
    pub page_cache_opens: AtomicU64,
    /// Small files handed to the kernel's page cache at their last close.
    pub page_cache_stores: AtomicU64,
    /// File handles open now (opens and creates not yet released): what
    /// keeps an unmount busy, with working directories, which FUSE does
    /// not see.
    pub open_files: AtomicU64,
}

/// The mounted file system: fuser's handlers on the reader threads, each
/// answering its request here or handing it to a worker (workers.rs).
pub struct SluiceFs {
    core: Arc<Core>,
    workers: Workers,
}

/// What a request is answered with, on a reader or a worker.
pub struct Core {
    /// Shared with the threads that wait for a lock (`F_SETLKW`).
    volume: Arc<Volume>,
    /// How long the kernel may cache attributes and entries
    /// (`mount.attr_timeout`): the capacity tier may be shared, and each
    /// ask re-reads what other nodes changed.
    ttl: Duration,
    counters: Arc<OpCounters>,
    max_write: u32,
    /// Open files with `FOPEN_DIRECT_IO` (no kernel page-cache copy) and
    /// `FOPEN_PARALLEL_DIRECT_WRITES`.
    open_flags: FopenFlags,
    passthrough: Passthrough<BackingId>,
    page_cache: Arc<PageCache>,
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

/// fuser's attributes of `attr`.
fn file_attr(attr: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(attr.ino),
        size: attr.size,
        blocks: attr.blocks,
        atime: attr.atime,
        mtime: attr.mtime,
        ctime: attr.ctime,
        crtime: attr.ctime,
        kind: file_type(attr.kind),
        perm: attr.perm,
        nlink: attr.nlink,
        uid: attr.uid,
        gid: attr.gid,
        rdev: attr.rdev,
        blksize: attr.blksize,
        flags: 0,
    }
}

/// The smallest read or write that [`SluiceFs::serve`] counts as one that
/// may wait: a small one (mdtest's 3,901 bytes) is answered on its reader,
/// as a hand-over would cost more than it does.
const BULK_BYTES: u64 = 64 << 10;

/// Whether a read or write of `len` bytes is bulk data ([`BULK_BYTES`]).
fn bulk(len: u64) -> bool {
    len >= BULK_BYTES
}

fn caller(req: &Request, umask: u32) -> Caller {
    Caller {
        uid: req.uid(),
        gid: req.gid(),
        umask,
    }
}

impl std::ops::Deref for SluiceFs {
    type Target = Core;

    fn deref(&self) -> &Core {
        &self.core
    }
}

impl SluiceFs {
    /// A file system over `engine` (and the checkpoint stager, if BBOS is
    /// on); `control` is the control socket's path, served as
    /// [`CONTROL_XATTR`] on the root. Close and fsync follow
    /// `consistency`; the kernel keeps attributes `attr_timeout`. With
    /// `passthrough`, files the engine never buffers are served by the
    /// kernel itself where it allows (crate::passthrough). `readers`
    /// threads read requests (fuser's `n_threads`) and `workers` serve those
    /// handed over (workers.rs).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        engine: Arc<Engine>,
        ckpt: Option<Arc<Checkpoints>>,
        counters: Arc<OpCounters>,
        control: Option<String>,
        max_write: u32,
        direct_io: bool,
        passthrough: bool,
        page_cache: bool,
        consistency: Consistency,
        attr_timeout: Duration,
        readers: usize,
        workers: usize,
    ) -> io::Result<SluiceFs> {
        let core = Core {
            volume: Arc::new(Volume::new(engine, ckpt, control).with_consistency(consistency)),
            ttl: attr_timeout,
            counters,
            max_write,
            // Writes of one file come here at once (the kernel takes the
            // file's lock shared, except for writes past its end): the
            // engine orders them (its `Engine::write`).
            open_flags: if direct_io {
                FopenFlags::FOPEN_DIRECT_IO | FopenFlags::FOPEN_PARALLEL_DIRECT_WRITES
            } else {
                FopenFlags::empty()
            },
            passthrough: Passthrough::new(passthrough),
            page_cache: Arc::new(PageCache::new(page_cache, attr_timeout)),
        };
        Ok(SluiceFs {
            core: Arc::new(core),
            workers: Workers::new(readers, workers)?,
        })
    }

    /// What to call with the session's notifier once it is up: from then
    /// on small files are kept in the kernel's page cache between opens
    /// (crate::pagecache).
    pub fn page_cache_start(&self) -> impl FnOnce(fuser::Notifier) + Send + 'static {
        let (cache, volume) = (
            Arc::clone(&self.core.page_cache),
            Arc::clone(&self.core.volume),
        );
        move |notifier| PageCache::start(&cache, &volume, notifier)
    }

    /// Answer a request here, unless it `may_wait` on a tier or another
    /// node and no other reader waits for the next request: then on a
    /// worker (workers.rs). Called under the reader's
    /// [`Busy`](crate::workers::Busy). `may_wait` is asked only when no
    /// other reader waits (it may take the engine's lock).
    fn serve(&self, may_wait: impl FnOnce() -> bool, answer: impl FnOnce(&Core) + Send + 'static) {
        if self.workers.another_reader_waits() || !may_wait() {
            answer(&self.core);
        } else {
            let core = Arc::clone(&self.core);
            self.workers.hand_over(move || answer(&core));
        }
    }
}

impl Core {
    /// A write of `data` at `offset` through handle `fh` of `ino`.
    fn write(
        &self,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        kill_setid: bool,
        reply: ReplyWrite,
    ) {
        self.counters.writes.fetch_add(1, Ordering::Relaxed);
        self.page_cache.changed(ino.0);
        match self.volume.write(ino.0, fh.0, offset, data, kill_setid) {
            Ok(()) => {
                self.counters
                    .write_bytes
                    .fetch_add(data.len() as u64, Ordering::Relaxed);
                reply.written(u32::try_from(data.len()).unwrap_or(u32::MAX));
            }
            Err(e) => reply.error(self.fail("write", ino.0, None, &e)),
        }
    }

    /// The backing id the kernel is to serve the new handle `fh` of `ino`
    /// from, if any (counted); see [`Passthrough::open`].
    fn passthrough_open(
        &self,
        ino: u64,
        fh: u64,
        flags: i32,
        place: Place,
        register: impl FnOnce(BorrowedFd<'_>) -> io::Result<BackingId>,
    ) -> Option<Arc<BackingId>> {
        let backing = self
            .passthrough
            .open(&self.volume, ino, fh, flags, place, register);
        if backing.is_some() {
            self.counters
                .passthrough_opens
                .fetch_add(1, Ordering::Relaxed);
        }
        backing
    }

    /// The flags of a plain handle `fh` of node `ino` (`new`: a create's):
    /// direct I/O as the mount says, or page-cached with the kernel's
    /// pages kept ([`PageCache::open`]; counted).
    fn plain_open(&self, ino: u64, fh: u64, new: bool) -> FopenFlags {
        let flags = self
            .page_cache
            .open(&self.volume, ino, fh, self.open_flags, new);
        if flags.contains(FopenFlags::FOPEN_KEEP_CACHE) {
            self.counters
                .page_cache_opens
                .fetch_add(1, Ordering::Relaxed);
        }
        flags
    }

    /// The errno for `e`, counted as a failed request; see
    /// [`SluiceFs::answer`].
    fn fail(&self, op: &str, ino: u64, name: Option<&OsStr>, e: &io::Error) -> Errno {
        self.counters.errors.fetch_add(1, Ordering::Relaxed);
        self.answer(op, ino, name, e)
    }

    /// The errno for `e`, the answer to request `op` on node `ino` (or on
    /// `name` in directory `ino`). A failure (not an expected answer such
    /// as ENOENT: [`is_failure`]) is recorded as an incident with its
    /// path, the tier its message names, the errno and the message, and
    /// logged.
    fn answer(&self, op: &str, ino: u64, name: Option<&OsStr>, e: &io::Error) -> Errno {
        let errno = errno(e);
        if is_failure(errno) {
            let path = self.volume.describe(ino, name);
            self.volume
                .engine()
                .incidents()
                .record_error(op, Some(&path), None, e);
        }
        errno
    }

    fn meta(&self) {
        self.counters.metadata_ops.fetch_add(1, Ordering::Relaxed);
    }

    /// Answer request `op` on `ino` (or `name` in it) that returns nothing.
    fn reply_empty(
        &self,
        op: &str,
        ino: u64,
        name: Option<&OsStr>,
        result: io::Result<()>,
        reply: ReplyEmpty,
    ) {
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(self.fail(op, ino, name, &e)),
        }
    }

    fn reply_attr(&self, op: &str, ino: u64, result: io::Result<Attr>, reply: ReplyAttr) {
        match result {
            Ok(attr) => reply.attr(&self.ttl, &file_attr(&attr)),
            Err(e) => reply.error(self.fail(op, ino, None, &e)),
        }
    }

    /// Answer a request (`op` on `name` in directory `parent`) that handed
    /// a node to the kernel.
    fn reply_entry(
        &self,
        op: &str,
        parent: u64,
        name: &OsStr,
        result: io::Result<Attr>,
        reply: ReplyEntry,
    ) {
        match result {
            Ok(attr) => reply.entry(&self.ttl, &file_attr(&attr), Generation(0)),
            Err(e) => reply.error(self.fail(op, parent, Some(name), &e)),
        }
    }

    /// An xattr value or list: its size when asked with `size` 0, ERANGE
    /// when it does not fit.
    fn reply_xattr(
        &self,
        op: &str,
        ino: u64,
        result: io::Result<Vec<u8>>,
        size: u32,
        reply: ReplyXattr,
    ) {
        match result {
            Ok(value) if size == 0 => reply.size(u32::try_from(value.len()).unwrap_or(u32::MAX)),
            Ok(value) if value.len() > size as usize => reply.error(Errno::ERANGE),
            Ok(value) => reply.data(&value),
            Err(e) => reply.error(self.fail(op, ino, None, &e)),
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
        // fcntl and flock locks come here (to be taken on the capacity
        // file), not to the kernel's node-local lock table.
        let _ = config.add_capabilities(fuser::InitFlags::FUSE_POSIX_LOCKS);
        let _ = config.add_capabilities(fuser::InitFlags::FUSE_FLOCK_LOCKS);
        // Lookups and readdirs of one directory run side by side (the
        // kernel still serialises them against creates, unlinks and
        // renames there by the directory's own lock): without this, every
        // lookup in a directory shared by many ranks waits for the last.
        let _ = config.add_capabilities(fuser::InitFlags::FUSE_PARALLEL_DIROPS);
        // Backing files one level deep: the capacity tier may not itself
        // be stacked (overlayfs), but sluice may be stacked on.
        if self.passthrough.enabled() {
            let granted = config
                .add_capabilities(fuser::InitFlags::FUSE_PASSTHROUGH)
                .is_ok()
                && config.set_max_stack_depth(1).is_ok();
            if !granted {
                tracing::info!("FUSE passthrough: not offered by this kernel");
            }
            // No request has been served yet: the core is not shared.
            match Arc::get_mut(&mut self.core) {
                Some(core) => core.passthrough.granted(granted),
                None => tracing::warn!("FUSE passthrough: could not be set up at init"),
            }
        }
        Ok(())
    }

    fn destroy(&mut self) {}

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        self.meta();
        match self.volume.lookup(parent.0, name) {
            Ok(attr) => reply.entry(&self.ttl, &file_attr(&attr), Generation(0)),
            // A miss is not an error worth counting.
            Err(e) => reply.error(self.answer("lookup", parent.0, Some(name), &e)),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        let _busy = self.workers.busy();
        self.volume.forget(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        let _busy = self.workers.busy();
        self.meta();
        self.reply_attr(
            "getattr",
            ino.0,
            self.volume.getattr(ino.0, fh.map(|fh| fh.0)),
            reply,
        );
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
        let _busy = self.workers.busy();
        let changes = AttrChanges {
            mode,
            uid,
            gid,
            size,
            atime: atime.map(to_time_set),
            mtime: mtime.map(to_time_set),
        };
        // A truncate waits for the file's writes in flight.
        self.serve(
            || size.is_some(),
            move |fs| {
                fs.meta();
                if size.is_some() {
                    fs.page_cache.changed(ino.0);
                }
                let result = fs.volume.setattr(ino.0, fh.map(|fh| fh.0), &changes);
                fs.reply_attr("setattr", ino.0, result, reply);
            },
        );
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let _busy = self.workers.busy();
        self.meta();
        match self.volume.readlink(ino.0) {
            Ok(target) => reply.data(sluice_env::name_to_os(&target).as_encoded_bytes()),
            Err(e) => reply.error(self.fail("readlink", ino.0, None, &e)),
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
        let _busy = self.workers.busy();
        self.meta();
        let result = self
            .volume
            .mknod(&caller(req, umask), parent.0, name, mode, rdev);
        self.reply_entry("mknod", parent.0, name, result, reply);
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
        let _busy = self.workers.busy();
        self.meta();
        let result = self.volume.mkdir(&caller(req, umask), parent.0, name, mode);
        self.reply_entry("mkdir", parent.0, name, result, reply);
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let _busy = self.workers.busy();
        self.meta();
        let result = self.volume.unlink(parent.0, name);
        self.reply_empty("unlink", parent.0, Some(name), result, reply);
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let _busy = self.workers.busy();
        self.meta();
        let result = self.volume.rmdir(parent.0, name);
        self.reply_empty("rmdir", parent.0, Some(name), result, reply);
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let _busy = self.workers.busy();
        self.meta();
        let result = self
            .volume
            .symlink(&caller(req, 0), parent.0, link_name, target);
        self.reply_entry("symlink", parent.0, link_name, result, reply);
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
        let _busy = self.workers.busy();
        self.meta();
        let result = self
            .volume
            .rename(parent.0, name, newparent.0, newname, flags.bits());
        self.reply_empty("rename", parent.0, Some(name), result, reply);
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let _busy = self.workers.busy();
        self.meta();
        let result = self.volume.link(ino.0, newparent.0, newname);
        self.reply_entry("link", newparent.0, newname, result, reply);
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let _busy = self.workers.busy();
        // May recall the file from its holder, or wait for room (a checkpoint).
        self.serve(
            || self.volume.open_may_wait(ino.0),
            move |fs| {
                fs.meta();
                match fs.volume.open(ino.0, flags.0) {
                    Ok(fh) => {
                        fs.counters.open_files.fetch_add(1, Ordering::Relaxed);
                        let place = Place {
                            dir: fs
                                .passthrough
                                .enabled()
                                .then(|| fs.volume.parent_dir(ino.0))
                                .flatten(),
                            len: None,
                        };
                        match fs.passthrough_open(ino.0, fh, flags.0, place, |fd| {
                            reply.open_backing(fd)
                        }) {
                            // Without FOPEN_DIRECT_IO, which would override it.
                            Some(id) => {
                                reply.opened_passthrough(FileHandle(fh), FopenFlags::empty(), &id)
                            }
                            None => {
                                let flags = fs.plain_open(ino.0, fh, false);
                                reply.opened(FileHandle(fh), flags)
                            }
                        }
                    }
                    Err(e) => reply.error(fs.fail("open", ino.0, None, &e)),
                }
            },
        );
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let _busy = self.workers.busy();
        self.serve(
            || bulk(u64::from(size)),
            move |fs| {
                fs.counters.reads.fetch_add(1, Ordering::Relaxed);
                match fs.volume.read(fh.0, offset, u64::from(size)) {
                    Ok(data) => {
                        fs.counters
                            .read_bytes
                            .fetch_add(data.len() as u64, Ordering::Relaxed);
                        reply.data(&data);
                    }
                    Err(e) => reply.error(fs.fail("read", ino.0, None, &e)),
                }
            },
        );
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
        let _busy = self.workers.busy();
        let kill_setid = write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID);
        if !bulk(data.len() as u64) || self.workers.another_reader_waits() {
            self.core.write(ino, fh, offset, data, kill_setid, reply);
        } else {
            // The payload lives in this reader's buffer: a worker gets a copy.
            let (core, data) = (Arc::clone(&self.core), data.to_vec());
            self.workers
                .hand_over(move || core.write(ino, fh, offset, &data, kill_setid, reply));
        }
    }

    fn flush(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        let _busy = self.workers.busy();
        // Close-to-open: may write the file back.
        self.serve(
            || self.volume.flush_may_wait(fh.0),
            move |fs| {
                let result = fs.volume.flush(fh.0, lock_owner.0);
                fs.reply_empty("close", ino.0, None, result, reply);
            },
        );
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let _busy = self.workers.busy();
        // An flock owner's lock goes with its open file; a failure to put
        // the bytes on the capacity tier first is counted (release has no
        // caller to tell: the bytes stay buffered and flush later).
        if let Some(owner) = lock_owner {
            if let Err(e) = self.volume.release_flock(fh.0, owner.0) {
                self.fail("release", ino.0, None, &e);
            }
        }
        let (len, stored) = self.page_cache.release(&self.volume, ino.0, fh.0, || {
            self.volume.release(ino.0, fh.0)
        });
        if stored {
            self.counters
                .page_cache_stores
                .fetch_add(1, Ordering::Relaxed);
        }
        self.passthrough.release(ino.0, len);
        // Saturating: a release the kernel sends for a handle it was never
        // given must not wrap the count around.
        let _ = self
            .counters
            .open_files
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                Some(n.saturating_sub(1))
            });
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let _busy = self.workers.busy();
        self.serve(
            || true,
            move |fs| {
                fs.counters.fsyncs.fetch_add(1, Ordering::Relaxed);
                fs.reply_empty("fsync", ino.0, None, fs.volume.fsync(fh.0), reply);
            },
        );
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let _busy = self.workers.busy();
        self.meta();
        match self.volume.opendir(ino.0) {
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::empty()),
            Err(e) => reply.error(self.fail("opendir", ino.0, None, &e)),
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
        let _busy = self.workers.busy();
        let listed = self.volume.readdir(ino.0, fh.0, offset, |entry| {
            reply.add(
                INodeNo(entry.ino),
                entry.next_offset,
                file_type(entry.kind),
                &*sluice_env::name_to_os(&entry.name),
            )
        });
        match listed {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(self.answer("readdir", ino.0, None, &e)),
        }
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        let _busy = self.workers.busy();
        self.volume.releasedir(fh.0);
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
        let _busy = self.workers.busy();
        self.reply_empty("fsyncdir", ino.0, None, self.volume.fsyncdir(ino.0), reply);
    }

    fn statfs(&self, _req: &Request, ino: INodeNo, reply: ReplyStatfs) {
        let _busy = self.workers.busy();
        match self.volume.statfs() {
            Ok(s) => reply.statfs(
                s.blocks,
                s.blocks_free,
                s.blocks_available,
                0,
                0,
                s.block_size,
                s.name_max,
                s.block_size,
            ),
            Err(e) => reply.error(self.fail("statfs", ino.0, None, &e)),
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
        let _busy = self.workers.busy();
        self.meta();
        let result = self.volume.set_xattr(ino.0, name, value, flags);
        self.reply_empty("setxattr", ino.0, None, result, reply);
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let _busy = self.workers.busy();
        self.meta();
        match self.volume.get_xattr(ino.0, name) {
            Ok(value) => self.reply_xattr("getxattr", ino.0, Ok(value), size, reply),
            // A missing attribute (ENODATA) is an answer, not a failure.
            Err(e) => reply.error(self.answer("getxattr", ino.0, None, &e)),
        }
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let _busy = self.workers.busy();
        self.meta();
        let result = self.volume.list_xattr(ino.0);
        self.reply_xattr("listxattr", ino.0, result, size, reply);
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let _busy = self.workers.busy();
        self.meta();
        match self.volume.remove_xattr(ino.0, name) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(self.answer("removexattr", ino.0, None, &e)),
        }
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        let _busy = self.workers.busy();
        self.meta();
        match self
            .volume
            .access(&caller(req, 0), ino.0, mask.bits() as u32)
        {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(self.answer("access", ino.0, None, &e)),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let _busy = self.workers.busy();
        let may_wait = self.volume.create_may_wait(parent.0, name);
        let (caller, name) = (caller(req, umask), name.to_os_string());
        // May wait for the file's holder, or for room (a checkpoint).
        self.serve(
            || may_wait,
            move |fs| {
                fs.meta();
                match fs
                    .volume
                    .open_or_create(&caller, parent.0, &name, mode, flags)
                {
                    Ok((attr, fh)) => {
                        fs.counters.open_files.fetch_add(1, Ordering::Relaxed);
                        let (ttl, attr, fh) = (&fs.ttl, &file_attr(&attr), FileHandle(fh));
                        let place = Place {
                            dir: Some(parent.0),
                            len: Some(attr.size),
                        };
                        match fs.passthrough_open(attr.ino.0, fh.0, flags, place, |fd| {
                            reply.open_backing(fd)
                        }) {
                            Some(id) => reply.created_passthrough(
                                ttl,
                                attr,
                                Generation(0),
                                fh,
                                FopenFlags::empty(),
                                &id,
                            ),
                            None => {
                                let flags = fs.plain_open(attr.ino.0, fh.0, true);
                                reply.created(ttl, attr, Generation(0), fh, flags)
                            }
                        }
                    }
                    Err(e) => reply.error(fs.fail("create", parent.0, Some(&name), &e)),
                }
            },
        );
    }

    fn getlk(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        _pid: u32,
        reply: ReplyLock,
    ) {
        let _busy = self.workers.busy();
        let range = LockRange { start, end, typ };
        match self.volume.get_lock(fh.0, lock_owner.0, range) {
            Ok((found, pid)) => reply.locked(found.start, found.end, found.typ, pid),
            Err(e) => reply.error(self.fail("getlk", ino.0, None, &e)),
        }
    }

    fn setlk(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        sleep: bool,
        reply: ReplyEmpty,
    ) {
        let _busy = self.workers.busy();
        let range = LockRange { start, end, typ };
        if !sleep {
            // A lock granted on a page-cached node drops its pages, which
            // may wait for a read of them in flight: not on the last free
            // reader (workers.rs).
            self.serve(
                || self.page_cache.cached(ino.0),
                move |fs| {
                    let result = fs.volume.set_lock(fh.0, lock_owner.0, range, false, pid);
                    if result.is_ok() && typ != nix::libc::F_UNLCK {
                        fs.page_cache.locked(&fs.volume, ino.0);
                    }
                    // A conflict is an answer, not a failure.
                    match result {
                        Err(e)
                            if e.raw_os_error()
                                == Some(rustix::io::Errno::AGAIN.raw_os_error()) =>
                        {
                            reply.error(Errno::EAGAIN)
                        }
                        other => fs.reply_empty("setlk", ino.0, None, other, reply),
                    }
                },
            );
            return;
        }
        // F_SETLKW blocks until the holder, on any node, lets go: on a
        // thread of its own, so the request threads keep serving (the
        // holder's unlock among them).
        let volume = Arc::clone(&self.volume);
        let counters = Arc::clone(&self.counters);
        let cache = Arc::clone(&self.page_cache);
        let spawned = std::thread::Builder::new()
            .name("sluice-lock-wait".into())
            .spawn(
                move || match volume.set_lock(fh.0, lock_owner.0, range, true, pid) {
                    Ok(()) => {
                        if typ != nix::libc::F_UNLCK {
                            cache.locked(&volume, ino.0);
                        }
                        reply.ok()
                    }
                    Err(e) => {
                        counters.errors.fetch_add(1, Ordering::Relaxed);
                        let errno = errno(&e);
                        if is_failure(errno) {
                            let path = volume.describe(ino.0, None);
                            volume.engine().incidents().record_error(
                                "setlk",
                                Some(&path),
                                None,
                                &e,
                            );
                        }
                        reply.error(errno);
                    }
                },
            );
        if let Err(e) = spawned {
            // The reply moved into the closure that never ran: the kernel
            // gets an error when it is dropped.
            self.fail("setlk", ino.0, None, &e);
        }
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let _busy = self.workers.busy();
        self.serve(
            || true,
            move |fs| {
                fs.counters.fallocates.fetch_add(1, Ordering::Relaxed);
                fs.page_cache.changed(ino.0);
                let result = fs.volume.fallocate(fh.0, offset, length, mode);
                fs.reply_empty("fallocate", ino.0, None, result, reply);
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue: a socket on the capacity tier showed as a FIFO.
    #[test]
    fn socket_shown_as_fifo_every_kind_keeps_its_type() {
        assert_eq!(file_type(StatKind::Socket), FileType::Socket);
        assert_eq!(file_type(StatKind::Fifo), FileType::NamedPipe);
        assert_eq!(file_type(StatKind::CharDevice), FileType::CharDevice);
        assert_eq!(file_type(StatKind::BlockDevice), FileType::BlockDevice);
    }
}
