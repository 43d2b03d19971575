//! The namespace: making and removing names (mknod, mkdir, symlink, link,
//! unlink, rmdir, rename) and directory handles.
//!
//! Rules decided here:
//! - regular files and directories are made and removed through the
//!   engine (it must know every name of a file it buffers); symbolic
//!   links, FIFOs, sockets and device nodes live on the capacity tier only
//!   (the kernel serves the opens of special files itself);
//! - a new node gets the caller's mode less its umask and the caller's
//!   owner (`Volume::own`);
//! - unlink and rename tell the checkpoint stager first, then the engine;
//!   `link` of or to a checkpoint-class path is refused (EOPNOTSUPP: a
//!   staged copy belongs to one path);
//! - rename: only `RENAME_NOREPLACE` is done (`RENAME_EXCHANGE` and
//!   `RENAME_WHITEOUT`: EINVAL), its check and the rename under one
//!   mount-wide lock; two names of one file (hard links) do nothing, as
//!   `rename(2)` says;
//! - hard links: the engine and the inode table know a file by its
//!   capacity identity, so every name of it is one engine file and one
//!   node; `link` answers the existing node, as the kernel expects;
//! - a directory handle is a sorted snapshot of the entries taken at
//!   opendir; readdir numbers entries without a stat (`Inodes::listed`).

use std::ffi::OsStr;
use std::io;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use sluice_env::{SpecialFile, StatKind};

use super::{invalid, lock, os_error, Attr, Caller, Volume};
use crate::inodes::ROOT;

/// `renameat2`'s flag: fail (EEXIST) rather than replace the target.
pub const RENAME_NOREPLACE: u32 = 1;

/// What a `mknod` request makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeToMake {
    /// A regular file (through the engine, like `create`).
    File,
    /// A FIFO, socket or device, on the capacity tier.
    Special(SpecialFile),
}

/// The node a `mknod` of `mode` (file type bits included) and `rdev`
/// asks for; EINVAL for a type mknod does not make (directories, links).
pub fn node_to_make(mode: u32, rdev: u32) -> io::Result<NodeToMake> {
    const S_IFMT: u32 = 0o170_000;
    const S_IFREG: u32 = 0o100_000;
    match SpecialFile::from_mode(mode, rdev) {
        Some(special) => Ok(NodeToMake::Special(special)),
        // mknod(2): a zero file type means a regular file.
        None if matches!(mode & S_IFMT, 0 | S_IFREG) => Ok(NodeToMake::File),
        None => Err(invalid("mknod makes files, FIFOs, sockets and devices")),
    }
}

/// One entry of a directory listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    /// The inode number of the entry.
    pub ino: u64,
    /// The offset of the entry after this one (what a readdir resumes at).
    pub next_offset: u64,
    /// What it is.
    pub kind: StatKind,
    /// Its name.
    pub name: String,
}

impl Volume {
    /// Make `name` in `parent`: a regular file (through the engine), or a
    /// FIFO, socket or device node (on the capacity tier), owned by
    /// `caller`.
    pub fn mknod(
        &self,
        caller: &Caller,
        parent: u64,
        name: &OsStr,
        mode: u32,
        rdev: u32,
    ) -> io::Result<Attr> {
        let node = node_to_make(mode, rdev)?;
        let path = self.child(parent, name)?;
        match node {
            NodeToMake::File => {
                let id = self.engine().create(&path)?;
                self.engine().release(id);
            }
            NodeToMake::Special(special) => {
                self.engine()
                    .capacity_tier()
                    .mknod(&path, special, mode & !caller.umask)?;
            }
        }
        self.own(caller, &path, mode)?;
        self.entry(&path)
    }

    /// Make the directory `name` in `parent`, owned by `caller`.
    pub fn mkdir(&self, caller: &Caller, parent: u64, name: &OsStr, mode: u32) -> io::Result<Attr> {
        let path = self.child(parent, name)?;
        self.engine().mkdir(&path)?;
        self.own(caller, &path, mode)?;
        self.entry(&path)
    }

    /// Make the symbolic link `name` in `parent` to `target`, owned by
    /// `caller` (links have no mode).
    pub fn symlink(
        &self,
        caller: &Caller,
        parent: u64,
        name: &OsStr,
        target: &Path,
    ) -> io::Result<Attr> {
        let path = self.child(parent, name)?;
        // A target that is not UTF-8 is held escaped, as names are.
        let target = sluice_env::name_from_os(target.as_os_str());
        let tier = self.engine().capacity_tier();
        tier.symlink(&target, &path)?;
        if caller.uid != self.euid {
            tier.set_attr(
                &path,
                &sluice_env::SetAttr {
                    uid: Some(caller.uid),
                    gid: Some(caller.gid),
                    ..sluice_env::SetAttr::default()
                },
            )?;
        }
        self.entry(&path)
    }

    /// Give node `ino` the new name `new_name` in `new_parent` (a hard
    /// link); the answer names the existing node, with the link count both
    /// names now share.
    pub fn link(&self, ino: u64, new_parent: u64, new_name: &OsStr) -> io::Result<Attr> {
        let existing = self.path(ino)?;
        let new = self.child(new_parent, new_name)?;
        if self.router.staged(&existing) || self.router.staged(&new) {
            // A staged checkpoint is one path's copy on the fast tier; a
            // second name would miss it.
            return Err(io::ErrorKind::Unsupported.into());
        }
        let tier = self.engine().capacity_tier();
        match tier.stat(&existing)?.kind {
            // The engine learns the name of a file, so its buffered bytes
            // are seen through both.
            StatKind::File => self.engine().link(&existing, &new)?,
            _ => tier.hard_link(&existing, &new)?,
        }
        // The reply names the existing node (the kernel relies on it).
        let st = self.stat(&new)?;
        let node = lock(&self.inodes).link(ino, &new, st.identity());
        Ok(self.attr_of(node, &st))
    }

    /// Remove the name `name` from `parent` (not a directory). The node
    /// lives on under its other names, or through its open handles.
    pub fn unlink(&self, parent: u64, name: &OsStr) -> io::Result<()> {
        let path = self.child(parent, name)?;
        // A symbolic link or a special file is never an engine file, and
        // the engine removes a name it does not hold with the tier's
        // `remove_file` (`unlinkat`, whatever the entry is): no stat
        // first to tell them apart (one more path walk per unlink).
        self.router.unlink(&path)?;
        lock(&self.inodes).detach(&path);
        Ok(())
    }

    /// Remove the empty directory `name` from `parent`.
    pub fn rmdir(&self, parent: u64, name: &OsStr) -> io::Result<()> {
        let path = self.child(parent, name)?;
        self.engine().rmdir(&path)?;
        lock(&self.inodes).detach(&path);
        Ok(())
    }

    /// Rename `name` in `parent` to `new_name` in `new_parent`. `flags`
    /// are `renameat2`'s: [`RENAME_NOREPLACE`] (EEXIST if the target
    /// exists) is done; any other flag is EINVAL.
    pub fn rename(
        &self,
        parent: u64,
        name: &OsStr,
        new_parent: u64,
        new_name: &OsStr,
        flags: u32,
    ) -> io::Result<()> {
        let from = self.child(parent, name)?;
        let to = self.child(new_parent, new_name)?;
        if flags & !RENAME_NOREPLACE != 0 {
            return Err(invalid("rename: only RENAME_NOREPLACE is supported"));
        }
        let _serial = lock(&self.renames);
        let tier = self.engine().capacity_tier();
        if flags & RENAME_NOREPLACE != 0 && tier.stat(&to).is_ok() {
            return Err(io::ErrorKind::AlreadyExists.into());
        }
        self.router.rename_staged(&from, &to)?;
        let from_stat = tier.stat(&from);
        let same_file = match (&from_stat, tier.stat(&to)) {
            (Ok(a), Ok(b)) => from != to && a.identity() == b.identity(),
            _ => false,
        };
        if same_file {
            // Two names of one file (hard links): rename(2) does nothing,
            // so no name moves in the table either (with `from` unknown to
            // it, moving would drop `to` from the node).
            return Ok(());
        }
        match from_stat {
            // Links, FIFOs, sockets and devices are not engine files.
            Ok(st) if !st.kind.is_file_or_dir() => tier.rename(&from, &to)?,
            _ => self.engine().rename(&from, &to)?,
        }
        lock(&self.inodes).rename(&from, &to);
        Ok(())
    }

    /// Open directory `ino`: a handle on a sorted snapshot of its entries.
    pub fn opendir(&self, ino: u64) -> io::Result<u64> {
        let path = self.path(ino)?;
        let mut entries = self.engine().capacity_tier().read_dir_all(&path)?;
        entries.retain(|(name, _)| !self.hides(ino, OsStr::new(name)));
        entries.sort();
        let fh = self.next_dir.fetch_add(1, Ordering::Relaxed);
        lock(&self.dirs).insert(fh, Arc::new(entries));
        Ok(fh)
    }

    /// The entries of directory handle `fh` of `ino` from `offset` on
    /// ("." and ".." first), each given to `add` until it answers `true`
    /// (full). Offsets: 1 after ".", 2 after "..", 2 + i + 1 after entry
    /// i. EBADF for an unknown handle.
    pub fn readdir(
        &self,
        ino: u64,
        fh: u64,
        offset: u64,
        mut add: impl FnMut(&DirEntry) -> bool,
    ) -> io::Result<()> {
        let Some(entries) = lock(&self.dirs).get(&fh).cloned() else {
            return Err(os_error(rustix::io::Errno::BADF));
        };
        let path = self.path(ino)?;
        let parent_ino = match path.parent() {
            Some(parent) => lock(&self.inodes).listed(&parent),
            None => ROOT,
        };
        let mut index = offset;
        while index < 2 + entries.len() as u64 {
            let (child_ino, kind, name) = match index {
                0 => (ino, StatKind::Dir, ".".to_string()),
                1 => (parent_ino, StatKind::Dir, "..".to_string()),
                _ => {
                    let (name, kind) = &entries[(index - 2) as usize];
                    let Ok(child) = path.join(name) else {
                        index += 1;
                        continue;
                    };
                    let child_ino = lock(&self.inodes).listed(&child);
                    (child_ino, *kind, name.clone())
                }
            };
            let entry = DirEntry {
                ino: child_ino,
                next_offset: index + 1,
                kind,
                name,
            };
            if add(&entry) {
                break;
            }
            index += 1;
        }
        Ok(())
    }

    /// Close directory handle `fh`.
    pub fn releasedir(&self, fh: u64) {
        lock(&self.dirs).remove(&fh);
    }

    /// Make directory `ino`'s entries durable.
    pub fn fsyncdir(&self, ino: u64) -> io::Result<()> {
        let path = self.path(ino)?;
        self.engine().capacity_tier().sync_dir(&path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_engine::{Engine, EngineConfig};
    use sluice_env::memory::MemBackend;
    use sluice_env::{Backend, SystemClock};

    /// Issue (found by the reference model, tests/volume_model.rs): a
    /// rename between two names of one file, whose source name the inode
    /// table had not been shown, took the target name away from the file's
    /// node (the table moved a name it did not know onto one it did), so
    /// the node the kernel held through that name answered ENOENT once its
    /// file was closed. rename(2) between two names of one file does
    /// nothing: now the table does nothing too.
    #[test]
    fn rename_between_hard_links_dropped_the_targets_name_from_its_node() {
        let (fast, capacity): (Arc<dyn Backend>, Arc<dyn Backend>) =
            (Arc::new(MemBackend::new()), Arc::new(MemBackend::new()));
        let engine = Engine::open(
            fast,
            capacity,
            Arc::new(SystemClock::new()),
            EngineConfig::default(),
        )
        .unwrap();
        let v = Volume::new(Arc::new(engine), None, None);
        let me = Caller {
            uid: v.euid,
            gid: v.egid,
            umask: 0o022,
        };
        let os = OsStr::new;
        let (b, fh) = v.create(&me, ROOT, os("b"), 0o644).unwrap();
        v.release(b.ino, fh);
        let linked = v.link(b.ino, ROOT, os("a")).unwrap();
        assert_eq!(linked.ino, b.ino);
        // The kernel forgets the node (both names), then reaches the file
        // through "a" only.
        v.forget(b.ino, 2);
        let a = v.lookup(ROOT, os("a")).unwrap().ino;
        let fh = v.open(a, 0).unwrap();
        v.rename(ROOT, os("b"), ROOT, os("a"), 0).unwrap();
        v.release(a, fh);
        assert_eq!(v.getattr(a, None).unwrap().nlink, 2, "still both names");
        assert_eq!(v.lookup(ROOT, os("b")).unwrap().ino, a, "one node");
    }

    /// Issue: FIFOs, sockets and devices were refused (EOPNOTSUPP).
    #[test]
    fn fifos_sockets_and_devices_refused_mknod_makes_each_kind() {
        let made = |mode, rdev| node_to_make(mode, rdev).map_err(|e| e.kind());
        assert_eq!(
            made(0o010_644, 0),
            Ok(NodeToMake::Special(SpecialFile::Fifo))
        );
        assert_eq!(
            made(0o140_755, 0),
            Ok(NodeToMake::Special(SpecialFile::Socket))
        );
        assert_eq!(
            made(0o020_600, 0x103),
            Ok(NodeToMake::Special(SpecialFile::CharDevice { rdev: 0x103 }))
        );
        assert_eq!(
            made(0o060_600, 0x700),
            Ok(NodeToMake::Special(SpecialFile::BlockDevice {
                rdev: 0x700
            }))
        );
        assert_eq!(made(0o100_644, 0), Ok(NodeToMake::File));
        assert_eq!(made(0o644, 0), Ok(NodeToMake::File));
        assert_eq!(made(0o040_755, 0), Err(io::ErrorKind::InvalidInput));
        assert_eq!(made(0o120_777, 0), Err(io::ErrorKind::InvalidInput));
    }
}
