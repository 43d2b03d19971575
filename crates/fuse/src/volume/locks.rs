//! Byte-range (`fcntl`) and whole-file (`flock`) locks, arbitrated by the
//! capacity tier: every node of a shared capacity tier takes its locks on
//! the same capacity file, so the parallel file system (or, for one
//! machine's shared directory, its kernel) decides who gets one. Nothing
//! is granted by this mount alone: a capacity tier that cannot lock (an
//! emulated device, LiU, a handle without a kernel file) answers ENOLCK.
//!
//! How a lock is forwarded (docs/fuse.md, "Many nodes"): the kernel names
//! the owner of each request (`lock_owner`: the process's file table for
//! `fcntl` locks, the open file for `flock`). Each (engine file, owner)
//! pair gets its own open file description of the capacity file (a
//! reopen of the engine's handle through `/proc/self/fd`, so the same
//! inode whatever became of the name), and the lock is taken on it as an
//! open-file-description lock (`F_OFD_SETLK`). So two owners conflict,
//! on this node or another, exactly when their ranges and types do, and
//! one owner's locks merge and split as POSIX says. An `flock` arrives as
//! a whole-file lock and is taken as one (as the NFS client does), so on
//! sluice `flock` and `fcntl` locks of one file conflict with each other.
//!
//! Release: a POSIX owner loses its locks of a file at any close of it
//! (the kernel's FLUSH names the owner), an `flock` owner at the last
//! close of its open file (RELEASE with the flock flag); both by an
//! explicit unlock of the whole file on the owner's description, then
//! closing it (a network client may release a closed description's locks
//! only later, in its own release). Before an unlock, or a close that drops
//! locks, the file's buffered bytes are written to its capacity file and
//! synced (`Engine::sync_file`), so the next holder, on any node, reads
//! them.
//!
//! INVARIANT: a description is in `held` only while its owner may hold a
//! lock through it; dropping it (the last `Arc`) closes it, which releases
//! every lock on it.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::{Arc, Mutex};

use nix::fcntl::{fcntl, FcntlArg};
use nix::libc;
use rustix::io::Errno;
use sluice_engine::Router;
use sluice_policy::FileId;

use super::{lock, os_error, Volume};

/// The kernel's `OFFSET_MAX`: a lock's `end` that means "to the end of the
/// file, however far it grows".
const OFFSET_MAX: u64 = i64::MAX as u64;

/// A lock as the kernel describes it: `[start, end]` (inclusive; `end`
/// [`OFFSET_MAX`] for "to the end"), type `F_RDLCK`, `F_WRLCK` or
/// `F_UNLCK`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LockRange {
    /// First byte.
    pub start: u64,
    /// Last byte (inclusive).
    pub end: u64,
    /// `F_RDLCK`, `F_WRLCK` or `F_UNLCK`.
    pub typ: i32,
}

impl LockRange {
    fn flock(&self) -> io::Result<libc::flock> {
        let start = i64::try_from(self.start).map_err(|_| os_error(Errno::INVAL))?;
        let len = if self.end >= OFFSET_MAX {
            0
        } else if self.end < self.start {
            return Err(os_error(Errno::INVAL));
        } else {
            i64::try_from(self.end - self.start + 1).map_err(|_| os_error(Errno::INVAL))?
        };
        let typ = match self.typ {
            libc::F_RDLCK | libc::F_WRLCK | libc::F_UNLCK => self.typ as libc::c_short,
            _ => return Err(os_error(Errno::INVAL)),
        };
        Ok(libc::flock {
            l_type: typ,
            l_whence: libc::SEEK_SET as libc::c_short,
            l_start: start,
            l_len: len,
            // OFD locks: must be 0.
            l_pid: 0,
        })
    }
}

/// The open file descriptions that hold (or may hold) locks, per engine
/// file and lock owner.
#[derive(Default)]
pub(super) struct Locks {
    held: Mutex<HashMap<(u64, u64), Arc<OwnedFd>>>,
    /// The process that last took a lock through each description (the
    /// pid the kernel sends with `F_SETLK`): what `F_GETLK` reports for a
    /// lock this node holds, as a local file system does.
    pids: Mutex<HashMap<(u64, u64), u32>>,
}

impl Locks {
    fn get(&self, file: u64, owner: u64) -> Option<Arc<OwnedFd>> {
        lock(&self.held).get(&(file, owner)).cloned()
    }

    /// The pid of the process of this node that holds the lock `found`
    /// of `file` (found by `F_OFD_GETLK` for `owner`), if it can be told:
    /// an owner of this node whose description sees no conflicting lock
    /// over `found`'s range at all holds every lock there, `found` among
    /// them. When two owners hold locks there (shared read locks), or the
    /// holder is on another node, there is no telling: `None`.
    fn holder_pid(&self, file: u64, owner: u64, found: &libc::flock) -> Option<u32> {
        let candidates: Vec<((u64, u64), Arc<OwnedFd>)> = lock(&self.held)
            .iter()
            .filter(|((f, o), _)| *f == file && *o != owner)
            .map(|(key, fd)| (*key, Arc::clone(fd)))
            .collect();
        let mut holders = candidates.into_iter().filter(|(_, fd)| {
            let mut probe = libc::flock {
                l_type: libc::F_WRLCK as libc::c_short,
                l_whence: libc::SEEK_SET as libc::c_short,
                l_start: found.l_start,
                l_len: found.l_len,
                l_pid: 0,
            };
            fcntl(fd.as_fd(), FcntlArg::F_OFD_GETLK(&mut probe)).is_ok()
                && i32::from(probe.l_type) == libc::F_UNLCK
        });
        let (key, _) = holders.next()?;
        if holders.next().is_some() {
            return None;
        }
        lock(&self.pids).get(&key).copied()
    }

    /// Whether `owner` has a description on `file` (it may hold locks).
    pub(super) fn has(&self, file: u64, owner: u64) -> bool {
        lock(&self.held).contains_key(&(file, owner))
    }

    /// Close `owner`'s description of `file`: every lock on it goes. They
    /// are unlocked explicitly first: a network file system's client may
    /// release a closed description's locks only once its own release
    /// runs, after `close` returned (Gluster's FUSE client does), and the
    /// next holder on another node must not find them still held.
    pub(super) fn drop_owner(&self, file: u64, owner: u64) -> io::Result<()> {
        lock(&self.pids).remove(&(file, owner));
        let Some(fd) = lock(&self.held).remove(&(file, owner)) else {
            return Ok(());
        };
        let everything = LockRange {
            start: 0,
            end: OFFSET_MAX,
            typ: libc::F_UNLCK,
        }
        .flock()?;
        fcntl(fd.as_fd(), FcntlArg::F_OFD_SETLK(&everything))
            .map(drop)
            .map_err(lock_error)
    }
}

/// ENOLCK with what could not lock.
fn no_locks(what: &str) -> io::Error {
    let e = os_error(Errno::NOLCK);
    sluice_env::with_context(e, what)
}

/// The errno the kernel gets for a failed lock call: a conflict is EAGAIN
/// (`F_OFD_SETLK` may say EACCES); a file system that has no such locks
/// is ENOLCK, never a grant.
fn lock_error(e: nix::errno::Errno) -> io::Error {
    use nix::errno::Errno as N;
    match e {
        N::EAGAIN | N::EACCES => os_error(Errno::AGAIN),
        N::EINVAL | N::ENOSYS | N::EOPNOTSUPP => no_locks("the capacity tier refuses locks"),
        other => io::Error::from_raw_os_error(other as i32),
    }
}

impl Volume {
    /// The engine file behind handle `fh`, with a kernel descriptor of its
    /// capacity file; ENOLCK when there is none (a checkpoint handle, or a
    /// capacity backend without kernel files).
    fn lockable(&self, fh: u64) -> io::Result<FileId> {
        if Router::staged_handle(fh) {
            return Err(no_locks(
                "locks on checkpoint-class files (staged on the fast tier)",
            ));
        }
        let id = FileId(fh);
        let handle = self.engine().capacity_file(id)?;
        if handle.as_fd().is_none() {
            return Err(no_locks(&format!(
                "capacity tier {} cannot lock (no kernel file)",
                self.engine().capacity_tier().describe()
            )));
        }
        Ok(id)
    }

    /// A new open file description of `file`'s capacity file (the same
    /// inode as the engine's handle, through `/proc/self/fd`).
    fn reopen(&self, file: FileId) -> io::Result<OwnedFd> {
        let handle = self.engine().capacity_file(file)?;
        let fd = handle
            .as_fd()
            .ok_or_else(|| no_locks("capacity tier without kernel files"))?;
        let proc_path = format!("/proc/self/fd/{}", fd.as_raw_fd());
        use rustix::fs::{Mode, OFlags};
        rustix::fs::open(&proc_path, OFlags::RDWR | OFlags::CLOEXEC, Mode::empty())
            .or_else(|_| {
                rustix::fs::open(&proc_path, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())
            })
            .map_err(io::Error::from)
    }

    /// `owner`'s description of `file`, opened on first use.
    fn owner_fd(&self, file: FileId, owner: u64) -> io::Result<Arc<OwnedFd>> {
        if let Some(fd) = self.locks.get(file.0, owner) {
            return Ok(fd);
        }
        let fd = Arc::new(self.reopen(file)?);
        Ok(Arc::clone(
            lock(&self.locks.held).entry((file.0, owner)).or_insert(fd),
        ))
    }

    /// `F_GETLK` for `owner` through handle `fh`: the first lock of
    /// another owner, on any node, that conflicts with `range` (its range,
    /// type and pid: the holding process's when it is an owner of this
    /// node, 0 when the lock is another node's or the holder cannot be
    /// told), or `range` with type `F_UNLCK` if none does.
    pub fn get_lock(&self, fh: u64, owner: u64, range: LockRange) -> io::Result<(LockRange, u32)> {
        let file = self.lockable(fh)?;
        let mut flock = range.flock()?;
        // A fresh description when the owner has none: it holds nothing
        // that could hide a conflict.
        let fd = match self.locks.get(file.0, owner) {
            Some(fd) => fd,
            None => Arc::new(self.reopen(file)?),
        };
        fcntl(fd.as_fd(), FcntlArg::F_OFD_GETLK(&mut flock)).map_err(lock_error)?;
        if i32::from(flock.l_type) == libc::F_UNLCK {
            return Ok((
                LockRange {
                    typ: libc::F_UNLCK,
                    ..range
                },
                0,
            ));
        }
        let start = flock.l_start.max(0) as u64;
        let end = if flock.l_len == 0 {
            OFFSET_MAX
        } else {
            start + flock.l_len.max(1) as u64 - 1
        };
        let found = LockRange {
            start,
            end,
            typ: i32::from(flock.l_type),
        };
        // OFD locks carry no pid (the kernel says -1): the holder's pid
        // when it is an owner of this node, else 0.
        let pid = u32::try_from(flock.l_pid)
            .ok()
            .filter(|&pid| pid > 0)
            .or_else(|| self.locks.holder_pid(file.0, owner, &flock))
            .unwrap_or(0);
        Ok((found, pid))
    }

    /// `F_SETLK` (`wait`: `F_SETLKW`) for `owner` through handle `fh`. An
    /// unlock first puts the file's buffered bytes on the capacity tier
    /// (synced); a granted lock re-reads the file's size, so what the last
    /// holder wrote on another node is read. EAGAIN on a conflict (without
    /// `wait`); ENOLCK where the capacity tier cannot lock.
    ///
    /// With `wait` the call blocks until the lock is granted: the caller
    /// runs it off the FUSE request threads. `pid`: the process asking
    /// (what `F_GETLK` reports for the lock while this node holds it).
    pub fn set_lock(
        &self,
        fh: u64,
        owner: u64,
        range: LockRange,
        wait: bool,
        pid: u32,
    ) -> io::Result<()> {
        let file = self.lockable(fh)?;
        let flock = range.flock()?;
        if range.typ == libc::F_UNLCK {
            let Some(fd) = self.locks.get(file.0, owner) else {
                return Ok(());
            };
            self.engine().sync_file(file, false)?;
            return fcntl(fd.as_fd(), FcntlArg::F_OFD_SETLK(&flock))
                .map(drop)
                .map_err(lock_error);
        }
        // On-demand: another node's bytes of the file reach the capacity
        // tier before the lock is taken (nothing under the other modes).
        self.engine().recall_open(file)?;
        let fd = self.owner_fd(file, owner)?;
        let arg = if wait {
            FcntlArg::F_OFD_SETLKW(&flock)
        } else {
            FcntlArg::F_OFD_SETLK(&flock)
        };
        fcntl(fd.as_fd(), arg).map_err(lock_error)?;
        lock(&self.locks.pids).insert((file.0, owner), pid);
        self.engine().refresh_size(file)?;
        Ok(())
    }

    /// `owner` closed a descriptor of the file behind `fh` (POSIX: every
    /// `fcntl` lock of the owner on the file goes), or closed its open file
    /// for good (`flock`): its buffered bytes go to the capacity tier first
    /// if the owner may hold a lock, then the owner's description is
    /// closed.
    pub(super) fn drop_locks(&self, fh: u64, owner: u64) -> io::Result<()> {
        if Router::staged_handle(fh) || !self.locks.has(fh, owner) {
            return Ok(());
        }
        let synced = self.engine().sync_file(FileId(fh), false).map(drop);
        let dropped = self.locks.drop_owner(fh, owner);
        synced.and(dropped)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel's inclusive `[start, end]` becomes `fcntl`'s start and
    /// length; `end` OFFSET_MAX is length 0 ("to the end, however far").
    #[test]
    fn kernel_ranges_become_fcntl_ranges() {
        let flock = |start, end, typ| LockRange { start, end, typ }.flock();
        let l = flock(0, OFFSET_MAX, libc::F_WRLCK).unwrap();
        assert_eq!((l.l_start, l.l_len), (0, 0));
        let l = flock(100, 100, libc::F_RDLCK).unwrap();
        assert_eq!((l.l_start, l.l_len), (100, 1), "one byte");
        let l = flock(4096, 8191, libc::F_UNLCK).unwrap();
        assert_eq!(
            (l.l_start, l.l_len, i32::from(l.l_type)),
            (4096, 4096, libc::F_UNLCK)
        );
        let invalid = Some(Errno::INVAL.raw_os_error());
        assert_eq!(
            flock(10, 9, libc::F_WRLCK).unwrap_err().raw_os_error(),
            invalid
        );
        assert_eq!(flock(0, 0, 99).unwrap_err().raw_os_error(), invalid);
        assert_eq!(
            flock(u64::MAX, OFFSET_MAX, libc::F_WRLCK)
                .unwrap_err()
                .raw_os_error(),
            invalid
        );
    }

    /// A conflict is EAGAIN whatever `F_OFD_SETLK` said (EACCES or
    /// EAGAIN); a file system without such locks is ENOLCK, never a grant.
    #[test]
    fn lock_errors_map_to_what_fcntl_callers_expect() {
        use nix::errno::Errno as N;
        let code = |e| lock_error(e).raw_os_error();
        assert_eq!(code(N::EACCES), Some(Errno::AGAIN.raw_os_error()));
        assert_eq!(code(N::EAGAIN), Some(Errno::AGAIN.raw_os_error()));
        for unsupported in [N::EINVAL, N::ENOSYS, N::EOPNOTSUPP] {
            assert_eq!(
                sluice_env::raw_os_error(&lock_error(unsupported)),
                Some(Errno::NOLCK.raw_os_error())
            );
        }
        assert_eq!(code(N::EIO), Some(N::EIO as i32));
    }
}
