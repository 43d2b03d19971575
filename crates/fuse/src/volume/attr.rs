//! Attributes and the metadata that lives on the capacity tier: what a
//! node looks like to the kernel (the tier's stat, with the engine's or
//! the stager's logical size for a file they hold), setattr (a truncate
//! by path or by handle, the rest to the tier), `access(2)` from the
//! modes, ownership of new nodes, set-ID clearing before an unprivileged
//! write, symbolic link targets, xattrs and statfs.
//!
//! Set-ID bits: a write by a process without CAP_FSETID clears S_ISUID,
//! and S_ISGID of a group-executable file, as ext4 does. With direct I/O
//! the kernel only flags such writes (`FUSE_WRITE_KILL_SUIDGID`, sent
//! whether or not `FUSE_HANDLE_KILLPRIV_V2` is negotiated, which sluice
//! does not): the clearing is sluice's, before the write. Truncation,
//! chown and cached writes need nothing here: without killpriv negotiated
//! the kernel computes the mode itself and sends it in the SETATTR.

use std::ffi::OsStr;
use std::io;
use std::time::SystemTime;

use sluice_engine::Router;
use sluice_env::{RelPath, SetAttr, Stat, StatKind, TimeSet, XattrFlags};

use super::{lock, name_str, os_error, Caller, Consistency, Volume, CONTROL_XATTR};
use crate::inodes::{ROOT, SETID_BITS};

/// A node's attributes as the kernel gets them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attr {
    /// Its inode number.
    pub ino: u64,
    /// What it is.
    pub kind: StatKind,
    /// Logical length in bytes (buffered bytes included).
    pub size: u64,
    /// Space allocated, in 512-byte units.
    pub blocks: u64,
    /// Last access.
    pub atime: SystemTime,
    /// Last modification of the contents.
    pub mtime: SystemTime,
    /// Last change of the attributes.
    pub ctime: SystemTime,
    /// Permission bits, set-ID and sticky included.
    pub perm: u16,
    /// Number of hard links.
    pub nlink: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Device number of a device node (the kernel's encoding).
    pub rdev: u32,
    /// Preferred I/O size (at least 4096).
    pub blksize: u32,
}

/// What a setattr asks to change (`None`: leave it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AttrChanges {
    /// Permission bits.
    pub mode: Option<u32>,
    /// Owner.
    pub uid: Option<u32>,
    /// Group.
    pub gid: Option<u32>,
    /// New length (truncate or extend).
    pub size: Option<u64>,
    /// Access time.
    pub atime: Option<TimeSet>,
    /// Modification time.
    pub mtime: Option<TimeSet>,
}

/// What statfs answers: the capacity tier's space, in blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FsStats {
    /// Total blocks.
    pub blocks: u64,
    /// Free blocks.
    pub blocks_free: u64,
    /// Free blocks for unprivileged users.
    pub blocks_available: u64,
    /// Block (and fragment) size in bytes.
    pub block_size: u32,
    /// Longest name.
    pub name_max: u32,
}

/// The permission bits a write or truncate by a process without
/// CAP_FSETID leaves on a file with `mode`, if they change (the kernel's
/// `setattr_should_drop_suidgid`, as ext4 applies it): S_ISUID always
/// goes; S_ISGID goes when the file is group-executable. Without group
/// execute S_ISGID grants nothing (it marks mandatory locking) and stays;
/// the kernel would clear it for a writer outside the file's group, but
/// the request names only the caller's primary group, not its
/// supplementary ones.
pub fn mode_after_unprivileged_write(mode: u32) -> Option<u32> {
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

/// The access bits (`R_OK` 4, `W_OK` 2, `X_OK` 1) `caller` has on a node
/// with attributes `st`: owner, group or other bits; root everything but
/// executing a file nobody may execute.
fn granted(caller: &Caller, st: &Stat, want: u32) -> u32 {
    if caller.uid == 0 {
        if want & 1 != 0 && st.kind == StatKind::File && st.mode & 0o111 == 0 {
            0o6
        } else {
            0o7
        }
    } else if caller.uid == st.uid {
        (st.mode >> 6) & 0o7
    } else if caller.gid == st.gid {
        (st.mode >> 3) & 0o7
    } else {
        st.mode & 0o7
    }
}

impl Volume {
    /// Attributes of `ino`: through its name, or, for a node whose names
    /// were removed while it is open, through an engine handle open on it
    /// (`fh` if given), as `fstat` does.
    pub fn getattr(&self, ino: u64, fh: Option<u64>) -> io::Result<Attr> {
        match self.path(ino) {
            Ok(path) => self.attr(ino, &path),
            Err(_) => self.open_attr(ino, fh),
        }
    }

    /// Change what `changes` names on `ino` and answer its attributes. A
    /// size truncates through the handle `fh` if given, else by path (the
    /// stager's copy for a checkpoint-class file, else the engine's file,
    /// opened for the call); a name-less open file can only be truncated
    /// (through its handle).
    pub fn setattr(&self, ino: u64, fh: Option<u64>, changes: &AttrChanges) -> io::Result<Attr> {
        let AttrChanges {
            mode,
            uid,
            gid,
            size,
            atime,
            mtime,
        } = *changes;
        let path = match self.path(ino) {
            Ok(p) => p,
            Err(e) => {
                // A name-less open file: ftruncate through its handle.
                let handle = fh
                    .or_else(|| lock(&self.inodes).open_handle(ino))
                    .filter(|&h| !Router::staged_handle(h));
                let only_size = mode.is_none() && uid.is_none() && gid.is_none();
                match (handle, size) {
                    (Some(h), Some(size)) if only_size => self.router.truncate(h, size)?,
                    (Some(_), None) if only_size => {}
                    _ => return Err(e),
                }
                return self.open_attr(ino, fh);
            }
        };
        if let Some(size) = size {
            match fh {
                Some(fh) => self.router.truncate_at(fh, &path, size)?,
                None => self.router.truncate_path(&path, size)?,
            }
        }
        let attr = SetAttr {
            mode,
            uid,
            gid,
            atime,
            mtime,
        };
        // With nothing to change it is `chown(path, -1, -1)` (the kernel
        // sends no field for it): the capacity file's ctime changes, as
        // ext4's does (pjdfstest's chown/00.t). A size alone has changed
        // it already (the truncate).
        if attr != SetAttr::default() || size.is_none() {
            self.engine().capacity_tier().set_attr(&path, &attr)?;
        }
        let attr = self.attr(ino, &path)?;
        if self.router.consistency() == Consistency::OnDemand
            && mode.is_some_and(|m| m & 0o222 == 0)
            && attr.kind == StatKind::File
        {
            // `chmod a-w` seals the file (after UnifyFS's lamination): its
            // write-back starts in the background (by the node that holds
            // it) and its mark goes, so every node reads it without a
            // recall. The chmod is done: a seal that cannot start is
            // logged, and the file stays held (recalled as before).
            if let Err(e) = self.engine().seal(&path) {
                tracing::warn!(path = %path, error = %e, "chmod a-w: the seal did not start");
            }
        }
        Ok(attr)
    }

    /// `access(2)`: whether `caller` may do what `mask` asks (`R_OK` 4,
    /// `W_OK` 2, `X_OK` 1; `F_OK` 0 only asks that it exists), from the
    /// modes (owner, group or other; root passes but cannot execute a file
    /// nobody may). PermissionDenied (EACCES) when not.
    pub fn access(&self, caller: &Caller, ino: u64, mask: u32) -> io::Result<()> {
        let path = self.path(ino)?;
        let st = self.engine().capacity_tier().stat(&path)?;
        let want = mask & 0o7;
        if want & !granted(caller, &st, want) == 0 {
            Ok(())
        } else {
            Err(io::ErrorKind::PermissionDenied.into())
        }
    }

    /// The target of the symbolic link `ino`.
    pub fn readlink(&self, ino: u64) -> io::Result<String> {
        let path = self.path(ino)?;
        self.engine().capacity_tier().read_link(&path)
    }

    /// Attributes of `path` as the kernel sees them.
    pub(super) fn attr(&self, ino: u64, path: &RelPath) -> io::Result<Attr> {
        Ok(self.attr_of(ino, &self.stat(path)?))
    }

    /// The capacity tier's attributes of `path`, with the stager's length
    /// of a staged copy, or the engine's logical size for a file it holds
    /// open (under this or another name).
    pub(super) fn stat(&self, path: &RelPath) -> io::Result<Stat> {
        let epoch = self.engine().log_epoch();
        let mut st: Stat = self.engine().capacity_tier().stat(path)?;
        if st.kind == StatKind::File {
            match self.router.staged_size(path) {
                Some(staged) => {
                    st.len = staged;
                    st.blocks = st.blocks.max(staged.div_ceil(512));
                }
                None => self.engine().overlay(path, &mut st, epoch),
            }
        }
        Ok(st)
    }

    /// Attributes of a node whose name was removed while it is open
    /// (unlinked, or renamed over): through an engine handle open on it,
    /// as `fstat` does. ENOENT when none is.
    pub(super) fn open_attr(&self, ino: u64, fh: Option<u64>) -> io::Result<Attr> {
        let handle = fh
            .or_else(|| lock(&self.inodes).open_handle(ino))
            .and_then(Router::engine_file)
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        let st = self.engine().stat_open(handle)?;
        Ok(self.attr_of(ino, &st))
    }

    /// The kernel's view of `st` for node `ino` (noting set-ID bits for
    /// the write path's hint).
    pub(super) fn attr_of(&self, ino: u64, st: &Stat) -> Attr {
        lock(&self.inodes).note_mode(ino, st.mode);
        Attr {
            ino,
            kind: st.kind,
            size: st.len,
            blocks: st.blocks,
            atime: st.atime,
            mtime: st.mtime,
            ctime: st.ctime,
            perm: (st.mode & 0o7777) as u16,
            nlink: st.nlink,
            uid: st.uid,
            gid: st.gid,
            rdev: st.rdev,
            blksize: st.blksize.max(4096),
        }
    }

    /// A new node belongs to the caller: `mode` without the umask, and the
    /// caller's owner when it is not this process.
    /// Whether a node with attributes `st`, just made, already is as
    /// [`Volume::own`] would leave it for `caller` and `mode`.
    pub(super) fn owned_as_asked(&self, caller: &Caller, st: &Stat, mode: u32) -> bool {
        let foreign = caller.uid != self.euid || caller.gid != self.egid;
        !foreign && st.mode & 0o7777 == mode & !caller.umask & 0o7777
    }

    pub(super) fn own(&self, caller: &Caller, path: &RelPath, mode: u32) -> io::Result<()> {
        let foreign = caller.uid != self.euid || caller.gid != self.egid;
        self.engine().capacity_tier().set_attr(
            path,
            &SetAttr {
                mode: Some(mode & !caller.umask & 0o7777),
                uid: foreign.then_some(caller.uid),
                gid: foreign.then_some(caller.gid),
                ..SetAttr::default()
            },
        )
    }

    /// Before a write the kernel flagged `FUSE_WRITE_KILL_SUIDGID` (the
    /// writer lacks CAP_FSETID): clear the file's set-ID bits as ext4
    /// would. Only files that may have some are stat'ed (the node's hint).
    pub(super) fn kill_setid(&self, ino: u64) -> io::Result<()> {
        let Some((path, epoch)) = lock(&self.inodes).setid_check(ino) else {
            return Ok(());
        };
        let tier = self.engine().capacity_tier();
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
            lock(&self.inodes).setid_cleared(ino, epoch);
        }
        Ok(())
    }

    /// Set the xattr `name` of `ino` (`flags`: 0, `XATTR_CREATE` 1 or
    /// `XATTR_REPLACE` 2; anything else EINVAL). The control xattr on the
    /// root is read-only (EPERM).
    pub fn set_xattr(&self, ino: u64, name: &OsStr, value: &[u8], flags: i32) -> io::Result<()> {
        let path = self.path(ino)?;
        let name = name_str(name)?;
        if (ino == ROOT && name == CONTROL_XATTR) || self.guards_mark(name) {
            return Err(os_error(rustix::io::Errno::PERM));
        }
        const XATTR_CREATE: i32 = 1;
        const XATTR_REPLACE: i32 = 2;
        let flags = match flags {
            0 => XattrFlags::Either,
            XATTR_CREATE => XattrFlags::CreateOnly,
            XATTR_REPLACE => XattrFlags::ReplaceOnly,
            _ => return Err(super::invalid("unknown xattr flags")),
        };
        self.engine()
            .capacity_tier()
            .set_xattr(&path, name, value, flags)
    }

    /// The value of the xattr `name` of `ino`; on the root,
    /// [`CONTROL_XATTR`] is the control socket's path (ENODATA without one).
    pub fn get_xattr(&self, ino: u64, name: &OsStr) -> io::Result<Vec<u8>> {
        let path = self.path(ino)?;
        let name = name_str(name)?;
        if ino == ROOT && name == CONTROL_XATTR {
            return match &self.control {
                Some(socket) => Ok(socket.as_bytes().to_vec()),
                None => Err(os_error(rustix::io::Errno::NODATA)),
            };
        }
        if self.router.consistency() == Consistency::OnDemand && name == sluice_engine::STATE_XATTR
        {
            // Virtual: the file's held, sealed or clean state, from its
            // mark and mode on the capacity tier (not listed: `cp -a`
            // would copy it).
            return match self.engine().held_state(&path)? {
                Some(state) => Ok(state.to_string().into_bytes()),
                None => Err(os_error(rustix::io::Errno::NODATA)),
            };
        }
        if self.router.consistency() == Consistency::OnDemand && name == sluice_engine::HELD_XATTR {
            // The held mark, from where this mount keeps marks: the xattr
            // itself, or a sidecar entry on a tier without user xattrs
            // (docs/fuse.md, "On demand"); either reads the same.
            return match self.engine().mark_of(&path)? {
                Some(mark) => Ok(mark.encode()),
                None => Err(os_error(rustix::io::Errno::NODATA)),
            };
        }
        self.engine().capacity_tier().get_xattr(&path, name)
    }

    /// The xattr names of `ino`, each followed by a NUL (listxattr's list).
    pub fn list_xattr(&self, ino: u64) -> io::Result<Vec<u8>> {
        let path = self.path(ino)?;
        let mut list = Vec::new();
        for name in self.engine().capacity_tier().list_xattr(&path)? {
            list.extend_from_slice(name.as_bytes());
            list.push(0);
        }
        Ok(list)
    }

    /// Remove the xattr `name` of `ino`.
    pub fn remove_xattr(&self, ino: u64, name: &OsStr) -> io::Result<()> {
        let path = self.path(ino)?;
        let name = name_str(name)?;
        if self.guards_mark(name) {
            return Err(os_error(rustix::io::Errno::PERM));
        }
        self.engine().capacity_tier().remove_xattr(&path, name)
    }

    /// Under on-demand the held mark ([`sluice_engine::HELD_XATTR`]) is
    /// sluice's to set and remove: an application's copy of it (`cp -a`)
    /// would make other nodes recall a file from a node that holds none
    /// of it, and its removal would let them read older bytes. It can be
    /// read (EPERM for changes); so can the virtual
    /// [`sluice_engine::STATE_XATTR`].
    fn guards_mark(&self, name: &str) -> bool {
        self.router.consistency() == Consistency::OnDemand
            && (name == sluice_engine::HELD_XATTR || name == sluice_engine::STATE_XATTR)
    }

    /// The space of the mount: the namespace and its space are the
    /// capacity tier's; the fast tier is a cache in front of it (its use
    /// is in `sluice status`).
    pub fn statfs(&self) -> io::Result<FsStats> {
        let space = self.engine().capacity_tier().space()?;
        let block = 4096u64;
        Ok(FsStats {
            blocks: space.total_bytes / block,
            blocks_free: space.free_bytes / block,
            blocks_available: space.free_bytes / block,
            block_size: block as u32,
            name_max: 255,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
