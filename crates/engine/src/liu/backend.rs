//! The LiU read path as a capacity backend: every read, write, truncation,
//! removal and rename of the capacity tier passes through here and keeps
//! the buffer and the lifted heads coherent.
//!
//! Both wrappers are strict ([`sluice_env::forward`]): a method added to
//! `Backend` or `BackendFile` fails the build here until it is written,
//! since one passed through unseen that changes a file's bytes or names
//! (an exchanging rename, a hole punched by path) would leave old bytes
//! in the buffer or a head for the next reader.

use std::fmt;
use std::io;
use std::sync::Arc;

use sluice_env::forward::read_full;
use sluice_env::{
    lock, Backend, BackendFile, DirEntry, Forward, ForwardFile, Metadata, OpenOptions, RelPath,
    SetAttr, SpaceInfo, SpecialFile, Stat, StatKind, XattrFlags,
};
use sluice_policy::FileId;

use super::{Inner, LiuBackend};

/// A capacity file seen through [`LiuBackend`].
pub(super) struct LiuFile {
    pub(super) id: FileId,
    pub(super) file: Arc<dyn BackendFile>,
    pub(super) inner: Arc<Inner>,
}

impl fmt::Debug for LiuFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LiuFile")
            .field("id", &self.id.0)
            .field("file", &self.file)
            .finish()
    }
}

impl LiuFile {
    /// Run `write` (which leaves the file at least `end` long) between the
    /// two coherence calls for `[start, end)`.
    pub(super) fn around_write(
        &self,
        start: u64,
        end: u64,
        write: impl FnOnce() -> io::Result<()>,
    ) -> io::Result<()> {
        if start >= end {
            return write();
        }
        let old_len = self.file.len()?;
        let len = old_len.max(end);
        self.inner.written(self.id, old_len, start, end, len);
        let result = write();
        // Even after a failed write: some of it may have landed.
        let len = self.file.len().unwrap_or(len).max(end);
        self.inner.written(self.id, old_len, start, end, len);
        result
    }
}

#[deny(clippy::missing_trait_methods)]
impl ForwardFile for LiuFile {
    fn inner(&self) -> &dyn BackendFile {
        &*self.file
    }

    fn stat(&self) -> io::Result<Stat> {
        self.file.stat()
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let file_len = self.file.len()?;
        if buf.is_empty() || offset >= file_len {
            return Ok(0);
        }
        let n = (buf.len() as u64).min(file_len - offset) as usize;
        let geometry = self.inner.geometry;
        let mut done = 0usize;
        for slice in geometry.split(offset, n as u64) {
            let segment_len =
                (file_len - geometry.start(slice.index)).min(geometry.segment_bytes());
            let out = &mut buf[done..done + slice.len as usize];
            self.inner.read_piece(
                self.id,
                &self.file,
                slice.index,
                slice.start,
                segment_len,
                file_len,
                out,
            )?;
            done += slice.len as usize;
        }
        Ok(n)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let end = offset.saturating_add(buf.len() as u64);
        self.around_write(offset, end, || self.file.write_at(buf, offset))
    }

    fn write_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> io::Result<()> {
        let len: u64 = bufs.iter().map(|b| b.len() as u64).sum();
        let end = offset.saturating_add(len);
        self.around_write(offset, end, || self.file.write_vectored_at(bufs, offset))
    }

    fn sync_data(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn len(&self) -> io::Result<u64> {
        self.file.len()
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let from = self.file.len()?.min(len);
        self.inner.invalidate_from(self.id, from);
        let result = self.file.set_len(len);
        self.inner.invalidate_from(self.id, from);
        result
    }
    fn allocate(&self, mode: sluice_env::Allocate, offset: u64, len: u64) -> io::Result<()> {
        // Bytes from `offset` on may read differently (zeros, moved) and
        // the length may change: what the buffer and the heads hold from
        // there is dropped, as for a truncation (before and after, so a
        // read racing with it cannot put old bytes back).
        let from = self.file.len()?.min(offset);
        self.inner.invalidate_from(self.id, from);
        let result = self.file.allocate(mode, offset, len);
        self.inner.invalidate_from(self.id, from);
        result
    }

    fn read_full_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        read_full(buf, offset, |buf, at| ForwardFile::read_at(self, buf, at))
    }

    fn is_empty(&self) -> io::Result<bool> {
        Ok(self.file.len()? == 0)
    }

    /// Refused, as before the forwarding layer (this wrapper never passed
    /// it on): the engine then sets its held marks by path, with an
    /// identity check. Changes no bytes, so forwarding it is safe; it is a
    /// change of its own.
    fn set_xattr(&self, name: &str, value: &[u8], flags: XattrFlags) -> io::Result<()> {
        let _ = (name, value, flags);
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "set_xattr of an open file: not supported by the LiU wrapper",
        ))
    }

    /// Refused, as [`LiuFile`]'s `set_xattr`.
    fn remove_xattr(&self, name: &str) -> io::Result<()> {
        let _ = name;
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "remove_xattr of an open file: not supported by the LiU wrapper",
        ))
    }

    /// None: a copy in the kernel would write past the buffer's coherence.
    fn as_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        None
    }
}

#[deny(clippy::missing_trait_methods)]
impl Forward for LiuBackend {
    fn inner(&self) -> &dyn Backend {
        &*self.inner.capacity
    }

    fn describe(&self) -> String {
        format!("{} (LiU)", self.inner.capacity.describe())
    }

    /// The heads and bodies files' growth, beside what the tier under it
    /// claims.
    fn fast_tier_growth(&self) -> u64 {
        self.slots_growth() + self.inner.capacity.fast_tier_growth()
    }

    fn open(&self, path: &RelPath, options: OpenOptions) -> io::Result<Arc<dyn BackendFile>> {
        let inner = &self.inner;
        let id = {
            let mut state = lock(&inner.state);
            match state.ids.get(path) {
                Some(&id) => id,
                None => {
                    let id = FileId(state.next_id);
                    state.next_id += 1;
                    state.ids.insert(path.clone(), id);
                    id
                }
            }
        };
        if options.truncate {
            inner.invalidate_from(id, 0);
        }
        let opened = inner.capacity.open(path, options);
        if options.truncate {
            inner.invalidate_from(id, 0);
        }
        Ok(Arc::new(LiuFile {
            id,
            file: opened?,
            inner: Arc::clone(inner),
        }))
    }

    fn metadata(&self, path: &RelPath) -> io::Result<Metadata> {
        self.inner.capacity.metadata(path)
    }

    fn remove_file(&self, path: &RelPath) -> io::Result<()> {
        self.inner.forget_path(path);
        self.inner.capacity.remove_file(path)
    }

    fn rename(&self, from: &RelPath, to: &RelPath) -> io::Result<()> {
        let same_file = {
            let state = lock(&self.inner.state);
            state.ids.contains_key(from) && state.ids.get(from) == state.ids.get(to)
        };
        if from == to || same_file {
            // Two names of one file (hard links): rename(2) does nothing.
            return self.inner.capacity.rename(from, to);
        }
        // What `to` named is replaced: free what was cached for it (its
        // cache id is unreachable once `to` maps to `from`'s).
        self.inner.forget_path(to);
        self.inner.capacity.rename(from, to)?;
        let mut state = lock(&self.inner.state);
        let moved: Vec<(RelPath, RelPath)> = state
            .ids
            .within(from)
            .filter_map(|(p, _)| p.rebase(from, to).map(|new| (p.clone(), new)))
            .collect();
        let ids: Vec<(RelPath, FileId)> = moved
            .into_iter()
            .filter_map(|(old, new)| state.ids.remove(&old).map(|id| (new, id)))
            .collect();
        for (path, id) in ids {
            state.ids.insert(path, id);
        }
        Ok(())
    }

    fn create_dir(&self, path: &RelPath) -> io::Result<()> {
        self.inner.capacity.create_dir(path)
    }

    fn create_private_dir(&self, path: &RelPath) -> io::Result<()> {
        self.inner.capacity.create_private_dir(path)
    }

    fn remove_dir(&self, path: &RelPath) -> io::Result<()> {
        self.inner.capacity.remove_dir(path)
    }

    fn read_dir(&self, path: &RelPath) -> io::Result<Vec<DirEntry>> {
        self.inner.capacity.read_dir(path)
    }

    fn sync_dir(&self, path: &RelPath) -> io::Result<()> {
        self.inner.capacity.sync_dir(path)
    }

    fn space(&self) -> io::Result<SpaceInfo> {
        self.inner.capacity.space()
    }

    fn check_root(&self) -> io::Result<()> {
        self.inner.capacity.check_root()
    }

    fn health(&self) -> sluice_env::TierHealth {
        self.inner.capacity.health()
    }

    fn page_cache_shared(&self) -> bool {
        self.inner.capacity.page_cache_shared()
    }

    /// `false`, as before the forwarding layer: this wrapper never passed
    /// it on (it came after the wrapper). Forwarding it would let a close
    /// of a file the kernel may write skip its sync under LiU: a change of
    /// its own.
    fn change_times_exact(&self) -> bool {
        false
    }

    fn stat(&self, path: &RelPath) -> io::Result<Stat> {
        self.inner.capacity.stat(path)
    }

    fn set_attr(&self, path: &RelPath, attr: &SetAttr) -> io::Result<()> {
        self.inner.capacity.set_attr(path, attr)
    }

    fn symlink(&self, target: &str, link: &RelPath) -> io::Result<()> {
        self.inner.capacity.symlink(target, link)
    }

    fn mknod(&self, path: &RelPath, node: SpecialFile, mode: u32) -> io::Result<()> {
        self.inner.capacity.mknod(path, node, mode)
    }

    fn hard_link(&self, existing: &RelPath, new: &RelPath) -> io::Result<()> {
        self.inner.capacity.hard_link(existing, new)?;
        // Both names share one cache id (made now if `existing` has none
        // yet), so a write through either invalidates what is cached for
        // the file.
        let mut state = lock(&self.inner.state);
        let id = match state.ids.get(existing) {
            Some(&id) => id,
            None => {
                let id = FileId(state.next_id);
                state.next_id += 1;
                state.ids.insert(existing.clone(), id);
                id
            }
        };
        state.ids.insert(new.clone(), id);
        Ok(())
    }

    fn read_link(&self, path: &RelPath) -> io::Result<String> {
        self.inner.capacity.read_link(path)
    }

    fn read_dir_all(&self, path: &RelPath) -> io::Result<Vec<(String, StatKind)>> {
        self.inner.capacity.read_dir_all(path)
    }

    fn get_xattr(&self, path: &RelPath, name: &str) -> io::Result<Vec<u8>> {
        self.inner.capacity.get_xattr(path, name)
    }

    fn set_xattr(
        &self,
        path: &RelPath,
        name: &str,
        value: &[u8],
        flags: XattrFlags,
    ) -> io::Result<()> {
        self.inner.capacity.set_xattr(path, name, value, flags)
    }

    fn list_xattr(&self, path: &RelPath) -> io::Result<Vec<String>> {
        self.inner.capacity.list_xattr(path)
    }

    fn remove_xattr(&self, path: &RelPath, name: &str) -> io::Result<()> {
        self.inner.capacity.remove_xattr(path, name)
    }
}
