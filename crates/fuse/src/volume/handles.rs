//! Class routing and file handles. A checkpoint-class path (a registered
//! BBOS job's glob matches it, or it has a staged copy: `Checkpoints::
//! handles`) is created and opened by the stager, whose handles carry
//! [`sluice_engine::ckpt::HANDLE_BIT`]; every other file by the engine,
//! whose handles are its file ids. Reads, writes, fsyncs and releases go
//! by the handle's class.
//!
//! Each node keeps the handles open on it (`Inodes::opened`/`released`),
//! so a file whose names were removed while it is open (unlinked, renamed
//! over) is still served: getattr and setattr find an engine handle there.

use std::ffi::OsStr;
use std::io;
use std::sync::Arc;

use sluice_engine::Checkpoints;
use sluice_env::{Allocate, BackendFile, RelPath};
use sluice_policy::FileId;

use super::{lock, Attr, Caller, Consistency, Volume};

impl Volume {
    /// The stager, if it takes `path` (a registered glob matches it or it
    /// has a fast-tier copy).
    pub(super) fn ckpt_for(&self, path: &RelPath) -> Option<&Checkpoints> {
        // A file the engine holds stays the engine's until it lets it go:
        // a job registered (or learned from another node) after the file
        // was written through the engine would otherwise serve the capacity
        // tier's bytes without the ones still buffered.
        self.ckpt
            .as_deref()
            .filter(|c| c.handles(path) && !self.engine.holds(path))
    }

    /// The stager, if `fh` is one of its handles.
    fn ckpt_handle(&self, fh: u64) -> Option<&Checkpoints> {
        self.ckpt.as_deref().filter(|_| Checkpoints::owns(fh))
    }

    /// Create the regular file `name` in `parent`, owned by `caller`, and
    /// open it: its attributes and a handle (the stager's for a
    /// checkpoint-class path, else the engine's).
    pub fn create(
        &self,
        caller: &Caller,
        parent: u64,
        name: &OsStr,
        mode: u32,
    ) -> io::Result<(Attr, u64)> {
        let path = self.child(parent, name)?;
        let ckpt = self.ckpt_for(&path);
        let (fh, made) = match ckpt {
            Some(c) => (c.create(&path)?, None),
            None => {
                let (id, stat) = self.engine.create_stat(&path)?;
                (id.0, stat)
            }
        };
        let attr = match made.filter(|st| self.owned_as_asked(caller, st, mode)) {
            // The new file already has the mode and owner asked for (the
            // common case: the tier's 0644 less the daemon's umask, made by
            // the caller's uid): its attributes from the create's fstat
            // answer the kernel, with no chmod and no stat by path (two
            // path walks and three system calls fewer per create). It is
            // empty and nothing of it is buffered: nothing to overlay.
            Some(st) => Ok(self.counted_attr(&path, st)),
            None => self
                .own(caller, &path, mode)
                .and_then(|()| self.entry(&path)),
        };
        match attr {
            Ok(attr) => {
                lock(&self.inodes).opened(attr.ino, fh);
                Ok((attr, fh))
            }
            Err(e) => {
                match ckpt {
                    Some(c) => c.release(fh),
                    None => {
                        self.engine.release(FileId(fh));
                    }
                }
                Err(e)
            }
        }
    }

    /// Open node `ino` with `open(2)`'s `flags` (access mode, `O_TRUNC`: a
    /// checkpoint opened for writing empty starts a new checkpoint): a
    /// handle.
    pub fn open(&self, ino: u64, flags: i32) -> io::Result<u64> {
        let path = self.path(ino)?;
        let fh = match self.ckpt_for(&path) {
            Some(c) => {
                let bits = rustix::fs::OFlags::from_bits_retain(flags as u32);
                let write = bits & rustix::fs::OFlags::ACCMODE != rustix::fs::OFlags::RDONLY;
                c.open_file(&path, write, bits.contains(rustix::fs::OFlags::TRUNC))?
            }
            None => {
                // On-demand: another node's bytes of the file come to the
                // capacity tier first (nothing under the other modes).
                self.engine.recall(&path)?;
                self.engine.open_file(&path)?.0
            }
        };
        lock(&self.inodes).opened(ino, fh);
        Ok(fh)
    }

    /// The capacity file the kernel may serve handle `fh` from itself
    /// (FUSE passthrough), when the engine's [`Engine::passthrough_file`]
    /// allows it; never for the stager's handles.
    ///
    /// [`Engine::passthrough_file`]: sluice_engine::Engine::passthrough_file
    pub fn passthrough_file(&self, fh: u64) -> Option<Arc<dyn BackendFile>> {
        if self.ckpt_handle(fh).is_some() {
            return None;
        }
        self.engine.passthrough_file(FileId(fh))
    }

    /// Handle `fh`, opened for writing, is served by passthrough: the
    /// kernel writes its file from now on, unseen by the engine.
    pub fn note_kernel_writes(&self, fh: u64) {
        if self.ckpt_handle(fh).is_none() {
            self.engine.note_kernel_writes(FileId(fh));
        }
    }

    /// Up to `len` bytes of handle `fh` from `offset` (fewer at the end).
    pub fn read(&self, fh: u64, offset: u64, len: u64) -> io::Result<Vec<u8>> {
        match self.ckpt_handle(fh) {
            Some(c) => c.read(fh, offset, len),
            None => self.engine.read(FileId(fh), offset, len),
        }
    }

    /// Write `data` at `offset` through handle `fh` of node `ino`. With
    /// `kill_setid` (the kernel's `FUSE_WRITE_KILL_SUIDGID`: the writer
    /// lacks CAP_FSETID) the file's set-ID bits are cleared first, as ext4
    /// does, so a failure leaves the file as it was.
    pub fn write(
        &self,
        ino: u64,
        fh: u64,
        offset: u64,
        data: &[u8],
        kill_setid: bool,
    ) -> io::Result<()> {
        if kill_setid {
            self.kill_setid(ino)?;
        }
        match self.ckpt_handle(fh) {
            Some(c) => c.write(fh, offset, data),
            None => self.engine.write(FileId(fh), offset, data),
        }
    }

    /// Make what was written through `fh` durable (with its name). Under
    /// `close-to-open` the file's buffered bytes go to its capacity file
    /// first (synced), so other nodes see them when it returns; under
    /// `on-demand` its held mark carries its size and mtime after.
    pub fn fsync(&self, fh: u64) -> io::Result<()> {
        match self.ckpt_handle(fh) {
            Some(c) => c.fsync(fh),
            None if self.consistency == Consistency::CloseToOpen => {
                self.engine.sync_file_and_fsync(FileId(fh)).map(drop)
            }
            None => {
                self.engine.fsync(FileId(fh))?;
                self.update_mark(fh);
                Ok(())
            }
        }
    }

    /// On-demand: the held mark of handle `fh`'s file carries its size and
    /// mtime now. A failure is logged, not answered: the mark still names
    /// this node (other nodes recall the file), only their stat lags.
    fn update_mark(&self, fh: u64) {
        if self.consistency != Consistency::OnDemand {
            return;
        }
        if let Err(e) = self.engine.update_mark(FileId(fh)) {
            tracing::warn!(error = %e, "held mark not updated");
        }
    }

    /// Whether closing handle `fh` ([`Volume::flush`]) may wait on a tier
    /// or another node: a write-back under close-to-open, a checkpoint's
    /// close, the held mark's update under on-demand.
    pub fn flush_may_wait(&self, fh: u64) -> bool {
        if self.ckpt_handle(fh).is_some() {
            return true;
        }
        match self.consistency {
            Consistency::CloseToOpen => self.engine.may_write_back(FileId(fh)),
            Consistency::OnDemand => true,
            Consistency::NodeLocal => false,
        }
    }

    /// Whether an open of `ino` may wait for another node or for room:
    /// under on-demand, the recall of a file another node holds; for a
    /// checkpoint-class path, the stager's admission (`bbos.admit_wait`).
    pub fn open_may_wait(&self, ino: u64) -> bool {
        self.consistency == Consistency::OnDemand
            || self.path(ino).is_ok_and(|p| self.ckpt_for(&p).is_some())
    }

    /// [`Volume::open_may_wait`] for a create of `name` in `parent`.
    pub fn create_may_wait(&self, parent: u64, name: &OsStr) -> bool {
        self.consistency == Consistency::OnDemand
            || self
                .child(parent, name)
                .is_ok_and(|p| self.ckpt_for(&p).is_some())
    }

    /// A `close(2)` of a descriptor of handle `fh` by lock owner `owner`
    /// (the kernel's FLUSH; `close` returns its error). Under
    /// `close-to-open` the file's buffered bytes go to its capacity file,
    /// synced, before it returns, as NFS does at close; in either mode the
    /// owner's `fcntl` locks on the file go (POSIX), after its bytes.
    pub fn flush(&self, fh: u64, owner: u64) -> io::Result<()> {
        if let Some(c) = self.ckpt_handle(fh) {
            // The checkpoint class's own consistency (`bbos.consistency`).
            return c.close(fh);
        }
        match self.consistency {
            Consistency::CloseToOpen => {
                self.engine.sync_file(FileId(fh), false)?;
            }
            Consistency::OnDemand => self.update_mark(fh),
            Consistency::NodeLocal => {}
        }
        self.drop_locks(fh, owner)
    }

    /// `O_CREAT` of `name` in `parent` with `open(2)`'s `flags`: create it
    /// as [`Volume::create`] does, or, without `O_EXCL`, open it if it
    /// exists already (another node made it between the kernel's lookup
    /// and this create, or this node's engine holds it), as a parallel
    /// file system's clients do; `O_TRUNC` then empties it.
    pub fn open_or_create(
        &self,
        caller: &Caller,
        parent: u64,
        name: &OsStr,
        mode: u32,
        flags: i32,
    ) -> io::Result<(Attr, u64)> {
        use rustix::fs::OFlags;
        let bits = OFlags::from_bits_retain(flags as u32);
        match self.create(caller, parent, name, mode) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && !bits.contains(OFlags::EXCL) => {
                let path = self.child(parent, name)?;
                let attr = self.entry(&path)?;
                if attr.kind != sluice_env::StatKind::File {
                    // The reply hands nothing over: give back the lookup.
                    self.forget(attr.ino, 1);
                    return Err(match attr.kind {
                        sluice_env::StatKind::Dir => io::ErrorKind::IsADirectory.into(),
                        _ => e,
                    });
                }
                let opened = self.open(attr.ino, flags).and_then(|fh| {
                    let truncated =
                        if bits.contains(OFlags::TRUNC) && self.ckpt_handle(fh).is_none() {
                            self.engine.truncate(FileId(fh), 0)
                        } else {
                            Ok(())
                        };
                    match truncated.and_then(|()| self.attr(attr.ino, &path)) {
                        Ok(attr) => Ok((attr, fh)),
                        Err(e) => {
                            self.release(attr.ino, fh);
                            Err(e)
                        }
                    }
                });
                if opened.is_err() {
                    self.forget(attr.ino, 1);
                }
                opened
            }
            other => other,
        }
    }

    /// The `flock` owner `owner` closed its open file of handle `fh` for
    /// good (RELEASE with the flock flag): its lock goes, after the file's
    /// buffered bytes.
    pub fn release_flock(&self, fh: u64, owner: u64) -> io::Result<()> {
        self.drop_locks(fh, owner)
    }

    /// `fallocate(2)` through handle `fh`, `mode` as the kernel passes
    /// it: the engine carries it out on the capacity file, with the
    /// file's buffered bytes written back first where the mode changes
    /// bytes under them ([`Engine::fallocate`]); a checkpoint-class file's
    /// goes to its staged copy on the fast tier (or its capacity file when
    /// it was written there). A mode the tier refuses answers its errno.
    ///
    /// [`Engine::fallocate`]: sluice_engine::Engine::fallocate
    pub fn fallocate(&self, fh: u64, offset: u64, len: u64, mode: i32) -> io::Result<()> {
        let mode = Allocate::from_flags(mode).map_err(io::Error::from)?;
        match self.ckpt_handle(fh) {
            Some(c) => c.fallocate(fh, mode, offset, len),
            None => self.engine.fallocate(FileId(fh), mode, offset, len),
        }
    }

    /// Close handle `fh` of node `ino`: the file's length as the engine
    /// knew it then ([`Engine::release`]; `None` for the stager's
    /// handles).
    ///
    /// [`Engine::release`]: sluice_engine::Engine::release
    pub fn release(&self, ino: u64, fh: u64) -> Option<u64> {
        lock(&self.inodes).released(ino, fh);
        match self.ckpt_handle(fh) {
            Some(c) => {
                c.release(fh);
                None
            }
            None => self.engine.release(FileId(fh)),
        }
    }

    /// The node of the directory `ino` was last opened by (a name of it),
    /// if known.
    pub fn parent_dir(&self, ino: u64) -> Option<u64> {
        lock(&self.inodes).parent(ino)
    }
}
