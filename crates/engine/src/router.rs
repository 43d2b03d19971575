//! One way in to the fast tier's two burst buffers (issue 35, deliverable
//! 4): the [`Engine`] (every file: SSDUP+'s log, write-back, on-demand)
//! and, with BBOS on, the [`Checkpoints`] stager (checkpoint-class paths:
//! staged copies, admission, demotion). The namespace above (the FUSE
//! crate's `Volume`) asks the router by path or by handle and never picks
//! a side itself.
//!
//! - **By path.** A path is the stager's when a registered job's glob
//!   matches it or it has a staged copy, unless the engine holds the file
//!   (a job registered, or learned from another node, after the file was
//!   written through the engine would otherwise serve the capacity tier's
//!   bytes without the ones still buffered): [`Router::staged`].
//! - **By handle.** The stager's handles carry
//!   [`crate::ckpt::HANDLE_BIT`]; every other handle is an engine file id.
//! - **What a close and an fsync do** is the mount's [`Consistency`] for
//!   engine files, the stager's own (`bbos.consistency`) for checkpoints.
//!
//! INVARIANT: a handle the router gave out is answered by the side that
//! gave it, for its whole life: the class of a handle never changes, even
//! when the class of its path does (a job registered while it is open).

use std::io;
use std::sync::Arc;

use sluice_env::{Allocate, RelPath, Stat};
use sluice_policy::FileId;

use crate::{Checkpoints, Engine, KernelFile};

/// When buffered bytes of an engine file reach the capacity tier, where
/// other nodes see them (`mount.consistency`; docs/fuse.md, "Many nodes").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Consistency {
    /// As NFS: a close, an fsync and the release of a lock write the
    /// file's buffered bytes to its capacity file and sync it first.
    #[default]
    CloseToOpen,
    /// Bytes stay on this node until the flusher moves them; fsync makes
    /// them durable in the log.
    NodeLocal,
    /// As `NodeLocal` at close and fsync, with the file held by this node
    /// (its mark) until another node recalls it.
    OnDemand,
}

/// The engine and the optional stager behind one interface; see the
/// module docs.
#[derive(Clone)]
pub struct Router {
    engine: Arc<Engine>,
    stager: Option<Arc<Checkpoints>>,
    consistency: Consistency,
}

impl std::fmt::Debug for Router {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Router")
            .field("stager", &self.stager.is_some())
            .field("consistency", &self.consistency)
            .finish_non_exhaustive()
    }
}

impl Router {
    /// A router over `engine` and, with BBOS on, its `stager`, under
    /// `consistency`. The two share the fast tier: the stager places
    /// checkpoints in its file system's free room less what the log's
    /// regions and the capacity tier's own files there (LiU's heads and
    /// bodies) may still grow by (docs/bbos.md, "A full fast tier").
    pub fn new(
        engine: Arc<Engine>,
        stager: Option<Arc<Checkpoints>>,
        consistency: Consistency,
    ) -> Router {
        if let Some(stager) = &stager {
            // Weak: the stager must not keep the engine open.
            let log = Arc::downgrade(&engine);
            stager.share_fast_tier(Box::new(move || {
                log.upgrade().map_or(0, |engine| {
                    engine.log_growth() + engine.capacity_tier().fast_tier_growth()
                })
            }));
        }
        Router {
            engine,
            stager,
            consistency,
        }
    }

    /// The engine (for what only it does: the namespace's names and
    /// attributes on the capacity tier, status).
    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// The stager, if BBOS is on.
    pub fn stager(&self) -> Option<&Arc<Checkpoints>> {
        self.stager.as_ref()
    }

    /// The mount's consistency mode.
    pub fn consistency(&self) -> Consistency {
        self.consistency
    }

    /// The stager, if it takes `path`.
    fn stager_for(&self, path: &RelPath) -> Option<&Checkpoints> {
        self.stager
            .as_deref()
            .filter(|c| c.handles(path) && !self.engine.holds(path))
    }

    /// The stager, if `fh` is one of its handles.
    fn stager_of(&self, fh: u64) -> Option<&Checkpoints> {
        self.stager.as_deref().filter(|_| Checkpoints::owns(fh))
    }

    /// Whether `path` is a checkpoint-class file, the stager's.
    pub fn staged(&self, path: &RelPath) -> bool {
        self.stager_for(path).is_some()
    }

    /// Whether handle `fh` is the stager's.
    pub fn staged_handle(fh: u64) -> bool {
        Checkpoints::owns(fh)
    }

    /// The engine's file of handle `fh`; `None` for the stager's handles.
    pub fn engine_file(fh: u64) -> Option<FileId> {
        (!Self::staged_handle(fh)).then_some(FileId(fh))
    }

    /// Create `path` (it must not exist) and open it: a handle, and the
    /// new file's attributes when the side that made it took them.
    pub fn create(&self, path: &RelPath) -> io::Result<(u64, Option<Stat>)> {
        match self.stager_for(path) {
            Some(c) => Ok((c.create(path)?, None)),
            None => {
                let (id, stat) = self.engine.create_stat(path)?;
                Ok((id.0, stat))
            }
        }
    }

    /// Open `path`: for writing (`write`), emptied first (`truncate`: a
    /// checkpoint opened so starts a new checkpoint; an engine file's
    /// truncate is the caller's, [`Router::truncate`]). Under on-demand,
    /// another node's bytes of an engine file come to the capacity tier
    /// first.
    pub fn open(&self, path: &RelPath, write: bool, truncate: bool) -> io::Result<u64> {
        match self.stager_for(path) {
            Some(c) => c.open_file(path, write, truncate),
            None => {
                self.engine.recall(path)?;
                Ok(self.engine.open_file(path)?.0)
            }
        }
    }

    /// Close handle `fh` for good: the file's length as the engine knew
    /// it then (`None` for the stager's handles).
    pub fn release(&self, fh: u64) -> Option<u64> {
        match self.stager_of(fh) {
            Some(c) => {
                c.release(fh);
                None
            }
            None => self.engine.release(FileId(fh)),
        }
    }

    /// Up to `len` bytes of handle `fh` from `offset` (fewer at the end).
    pub fn read(&self, fh: u64, offset: u64, len: u64) -> io::Result<Vec<u8>> {
        match self.stager_of(fh) {
            Some(c) => c.read(fh, offset, len),
            None => self.engine.read(FileId(fh), offset, len),
        }
    }

    /// Write `data` at `offset` through handle `fh`.
    pub fn write(&self, fh: u64, offset: u64, data: &[u8]) -> io::Result<()> {
        match self.stager_of(fh) {
            Some(c) => c.write(fh, offset, data),
            None => self.engine.write(FileId(fh), offset, data),
        }
    }

    /// `fallocate(2)` through handle `fh`.
    pub fn fallocate(&self, fh: u64, mode: Allocate, offset: u64, len: u64) -> io::Result<()> {
        match self.stager_of(fh) {
            Some(c) => c.fallocate(fh, mode, offset, len),
            None => self.engine.fallocate(FileId(fh), mode, offset, len),
        }
    }

    /// Truncate through handle `fh` to `size` (a file with no name left,
    /// or one this node has just opened: nothing to recall).
    pub fn truncate(&self, fh: u64, size: u64) -> io::Result<()> {
        match self.stager_of(fh) {
            Some(c) => c.truncate(fh, size),
            None => self.engine.truncate(FileId(fh), size),
        }
    }

    /// Truncate through handle `fh` of the file at `path` to `size`: under
    /// on-demand an engine file is recalled first (another node's
    /// buffered bytes land before the truncate, never after it).
    pub fn truncate_at(&self, fh: u64, path: &RelPath, size: u64) -> io::Result<()> {
        if self.stager_of(fh).is_none() {
            self.engine.recall(path)?;
        }
        self.truncate(fh, size)
    }

    /// Truncate the file at `path` to `size`, with no handle: the staged
    /// copy if it has one, else the engine's file (recalled first under
    /// on-demand: another node's buffered bytes land before the
    /// truncate, never after it), opened for the call.
    pub fn truncate_path(&self, path: &RelPath, size: u64) -> io::Result<()> {
        if let Some(c) = self.stager.as_deref() {
            if c.truncate_path(path, size)? {
                return Ok(());
            }
        }
        self.engine.recall(path)?;
        let id = self.engine.open_file(path)?;
        let result = self.engine.truncate(id, size);
        self.engine.release(id);
        result
    }

    /// Make what was written through `fh` durable (with its name). Under
    /// close-to-open the file's buffered bytes go to its capacity file
    /// first (synced), so other nodes see them when it returns; under
    /// on-demand its held mark carries its size and mtime after.
    pub fn fsync(&self, fh: u64) -> io::Result<()> {
        match self.stager_of(fh) {
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

    /// A `close(2)` of a descriptor of handle `fh` (the kernel's FLUSH):
    /// under close-to-open the file's buffered bytes go to its capacity
    /// file, synced, before it returns, as NFS does at close; a
    /// checkpoint's close follows `bbos.consistency`.
    pub fn close(&self, fh: u64) -> io::Result<()> {
        if let Some(c) = self.stager_of(fh) {
            return c.close(fh);
        }
        match self.consistency {
            Consistency::CloseToOpen => self.engine.sync_file(FileId(fh), false).map(drop),
            Consistency::OnDemand => {
                self.update_mark(fh);
                Ok(())
            }
            Consistency::NodeLocal => Ok(()),
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

    /// Whether [`Router::close`] of `fh` may wait on a tier or another
    /// node: a write-back under close-to-open, a checkpoint's close, the
    /// held mark's update under on-demand.
    pub fn close_may_wait(&self, fh: u64) -> bool {
        if self.stager_of(fh).is_some() {
            return true;
        }
        match self.consistency {
            Consistency::CloseToOpen => self.engine.may_write_back(FileId(fh)),
            Consistency::OnDemand => true,
            Consistency::NodeLocal => false,
        }
    }

    /// Whether an open or create of `path` may wait for another node or
    /// for room: under on-demand, the recall of a file another node holds;
    /// for a checkpoint-class path, the stager's admission.
    pub fn open_may_wait(&self, path: &RelPath) -> bool {
        self.consistency == Consistency::OnDemand || self.staged(path)
    }

    /// Whether any open may wait ([`Router::open_may_wait`]): not under
    /// close-to-open or node-local without BBOS, which the mount then
    /// knows without building the path.
    pub fn opens_may_wait(&self) -> bool {
        self.consistency == Consistency::OnDemand || self.stager.is_some()
    }

    /// The capacity file the kernel may serve handle `fh` from itself
    /// (FUSE passthrough), when [`Engine::passthrough_file`] allows it;
    /// never for the stager's handles.
    pub fn passthrough_file(&self, fh: u64) -> Option<KernelFile> {
        if self.stager_of(fh).is_some() {
            return None;
        }
        self.engine.passthrough_file(FileId(fh))
    }

    /// Handle `fh`, opened for writing, is served by passthrough: the
    /// kernel writes its file from now on, unseen by the engine.
    pub fn note_kernel_writes(&self, fh: u64) {
        if self.stager_of(fh).is_none() {
            self.engine.note_kernel_writes(FileId(fh));
        }
    }

    /// The length of `path`'s staged copy, if the stager has one.
    pub fn staged_size(&self, path: &RelPath) -> Option<u64> {
        self.stager.as_ref().and_then(|c| c.size(path))
    }

    /// Remove the name `path`: the stager forgets its copy first, then the
    /// engine removes the name (a name it does not hold with the tier's
    /// `remove_file`).
    pub fn unlink(&self, path: &RelPath) -> io::Result<()> {
        if let Some(c) = self.stager.as_deref() {
            c.unlink(path)?;
        }
        self.engine.unlink(path)
    }

    /// The stager's part of a rename of `from` to `to` (its copies follow
    /// the name), done before the engine's or the tier's.
    pub fn rename_staged(&self, from: &RelPath, to: &RelPath) -> io::Result<()> {
        match self.stager.as_deref() {
            Some(c) => c.rename(from, to),
            None => Ok(()),
        }
    }
}
