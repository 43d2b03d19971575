//! File handles. Which side takes a path or a handle (the engine, or for
//! a checkpoint-class path the BBOS stager) is the engine's [`Router`]'s
//! to say; this module opens, reads, writes, syncs and closes through it
//! and keeps the kernel's view: each node keeps the handles open on it
//! (`Inodes::opened`/`released`), so a file whose names were removed
//! while it is open (unlinked, renamed over) is still served: getattr and
//! setattr find an engine handle there.
//!
//! [`Router`]: sluice_engine::Router

use std::ffi::OsStr;
use std::io;

use sluice_engine::{ChangeStamp, KernelFile, Router};
use sluice_env::Allocate;

use super::{lock, Attr, Caller, Volume};

impl Volume {
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
        let (fh, made) = self.router.create(&path)?;
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
                self.router.release(fh);
                Err(e)
            }
        }
    }

    /// Open node `ino` with `open(2)`'s `flags` (access mode, `O_TRUNC`: a
    /// checkpoint opened for writing empty starts a new checkpoint): a
    /// handle.
    pub fn open(&self, ino: u64, flags: i32) -> io::Result<u64> {
        let path = self.path(ino)?;
        let bits = rustix::fs::OFlags::from_bits_retain(flags as u32);
        let write = bits & rustix::fs::OFlags::ACCMODE != rustix::fs::OFlags::RDONLY;
        let fh = self
            .router
            .open(&path, write, bits.contains(rustix::fs::OFlags::TRUNC))?;
        lock(&self.inodes).opened(ino, fh);
        Ok(fh)
    }

    /// The capacity file the kernel may serve handle `fh` from itself
    /// (FUSE passthrough): [`Router::passthrough_file`].
    pub fn passthrough_file(&self, fh: u64) -> Option<KernelFile> {
        self.router.passthrough_file(fh)
    }

    /// The capacity file of handle `fh` as it is now, where the kernel's
    /// copy of its bytes can be checked against it
    /// ([`Engine::page_cache_stamp`]); never for the stager's handles.
    ///
    /// [`Engine::page_cache_stamp`]: sluice_engine::Engine::page_cache_stamp
    pub fn page_cache_stamp(&self, fh: u64) -> Option<ChangeStamp> {
        Router::engine_file(fh).and_then(|id| self.engine().page_cache_stamp(id))
    }

    /// [`Volume::page_cache_stamp`] as the open of `fh` that just returned
    /// saw it, with no `fstat` of its own
    /// ([`Engine::page_cache_stamp_at_open`]).
    ///
    /// [`Engine::page_cache_stamp_at_open`]: sluice_engine::Engine::page_cache_stamp_at_open
    pub fn page_cache_stamp_at_open(&self, fh: u64) -> Option<ChangeStamp> {
        Router::engine_file(fh).and_then(|id| self.engine().page_cache_stamp_at_open(id))
    }

    /// The length of handle `fh`'s file as the engine knows it
    /// ([`Engine::open_size`]); `None` for the stager's handles.
    ///
    /// [`Engine::open_size`]: sluice_engine::Engine::open_size
    pub fn handle_len(&self, fh: u64) -> Option<u64> {
        Router::engine_file(fh).and_then(|id| self.engine().open_size(id))
    }

    /// Handle `fh`, opened for writing, is served by passthrough: the
    /// kernel writes its file from now on, unseen by the engine.
    pub fn note_kernel_writes(&self, fh: u64) {
        self.router.note_kernel_writes(fh);
    }

    /// Up to `len` bytes of handle `fh` from `offset` (fewer at the end).
    pub fn read(&self, fh: u64, offset: u64, len: u64) -> io::Result<Vec<u8>> {
        self.router.read(fh, offset, len)
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
        self.router.write(fh, offset, data)
    }

    /// Make what was written through `fh` durable (with its name):
    /// [`Router::fsync`], under the mount's consistency.
    pub fn fsync(&self, fh: u64) -> io::Result<()> {
        self.router.fsync(fh)
    }

    /// Whether closing handle `fh` ([`Volume::flush`]) may wait on a tier
    /// or another node ([`Router::close_may_wait`]).
    pub fn flush_may_wait(&self, fh: u64) -> bool {
        self.router.close_may_wait(fh)
    }

    /// Whether an open of `ino` may wait for another node or for room
    /// ([`Router::open_may_wait`]).
    pub fn open_may_wait(&self, ino: u64) -> bool {
        self.router.opens_may_wait() && self.path(ino).is_ok_and(|p| self.router.open_may_wait(&p))
    }

    /// [`Volume::open_may_wait`] for a create of `name` in `parent`.
    pub fn create_may_wait(&self, parent: u64, name: &OsStr) -> bool {
        self.router.opens_may_wait()
            && self
                .child(parent, name)
                .is_ok_and(|p| self.router.open_may_wait(&p))
    }

    /// A `close(2)` of a descriptor of handle `fh` by lock owner `owner`
    /// (the kernel's FLUSH; `close` returns its error). Under
    /// `close-to-open` the file's buffered bytes go to its capacity file,
    /// synced, before it returns, as NFS does at close; in either mode the
    /// owner's `fcntl` locks on the file go (POSIX), after its bytes.
    pub fn flush(&self, fh: u64, owner: u64) -> io::Result<()> {
        self.router.close(fh)?;
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
                    // The stager emptied a checkpoint at its open already.
                    let truncated = if bits.contains(OFlags::TRUNC) && !Router::staged_handle(fh) {
                        self.router.truncate(fh, 0)
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
        self.router.fallocate(fh, mode, offset, len)
    }

    /// Close handle `fh` of node `ino`: the file's length as the engine
    /// knew it then ([`Engine::release`]; `None` for the stager's
    /// handles).
    ///
    /// [`Engine::release`]: sluice_engine::Engine::release
    pub fn release(&self, ino: u64, fh: u64) -> Option<u64> {
        lock(&self.inodes).released(ino, fh);
        self.router.release(fh)
    }

    /// The node of the directory `ino` was last opened by (a name of it),
    /// if known.
    pub fn parent_dir(&self, ino: u64) -> Option<u64> {
        lock(&self.inodes).parent(ino)
    }
}
