//! Whether a tier is still the directory it was opened as, and writable
//! (issue 31; docs/crash-consistency.md, "Capacity-tier faults").
//!
//! A [`crate::posix::PosixBackend`] holds its root directory open and
//! resolves every path from that descriptor. When the directory at the
//! root's *name* changes under it — its file system lazily unmounted (a
//! parallel file system's client remounted or failed over), a directory
//! renamed away, another file system mounted over it — the descriptor
//! still works, but what it writes lands where nobody will look. A
//! [`RootWatch`] keeps the root's identity (device and inode when opened)
//! and the tier's [`TierHealth`]:
//!
//! * [`RootWatch::probe`] compares a `stat` of the name with that identity
//!   and finds whether the tier takes changes (the file system's read-only
//!   flag; after a refusal, an unnamed `O_TMPFILE` file); the engine calls
//!   it every second ([`crate::Backend::check_root`]), and the backend
//!   calls it after a call failed with an errno that may mean the tier
//!   went away ([`RootWatch::after_error`]); a change refused with EROFS
//!   makes the tier read-only at once.
//! * [`RootWatch::verify`] is the identity check alone, run after every
//!   sync of a file or directory: a sync answers success only when the
//!   synced bytes are where the tier's name leads, so nothing that relies
//!   on a sync (a flush resetting log regions, a per-file sync dropping
//!   bytes from the log, an application's fsync) can take bytes in a
//!   detached file system for durable ones.
//! * Every call is refused once the tier is lost ([`RootWatch::admit`]),
//!   with ENODEV ("No such device") and what happened. A read-only tier's
//!   file system answers EROFS to changes itself; files are opened
//!   read-only on it.
//!
//! A lost tier becomes healthy again only when its name leads to the very
//! directory it was opened on (the same device and inode: a bind mount
//! put back, a directory renamed back); a new file system at the name is
//! never adopted behind the operator's back. A read-only tier becomes
//! writable again as soon as its file system is.
//!
//! INVARIANT: the state only moves on a probe, a verify (which can only
//! find the tier lost) or an EROFS (which can only make it read-only), and
//! every refusal names the cause found.

use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Mutex;
use std::time::SystemTime;
use std::{fmt, io};

use rustix::fs as rfs;
use rustix::io::Errno;

use crate::{errno_error, lock};

/// A tier's health, as its backend last found it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum TierHealth {
    /// Reachable by its name and writable.
    #[default]
    Healthy,
    /// Its file system is read-only: reads work, every change fails with
    /// EROFS.
    ReadOnly {
        /// When it was found read-only.
        since: SystemTime,
        /// What was found.
        cause: String,
    },
    /// Its name no longer leads to the directory it was opened on
    /// (unmounted, replaced or removed): every call fails with ENODEV.
    Lost {
        /// When it was found lost.
        since: SystemTime,
        /// What was found.
        cause: String,
    },
}

impl TierHealth {
    /// `healthy`, `read-only` or `lost`: the state's name in status, logs
    /// and metrics.
    pub fn name(&self) -> &'static str {
        match self {
            TierHealth::Healthy => "healthy",
            TierHealth::ReadOnly { .. } => "read-only",
            TierHealth::Lost { .. } => "lost",
        }
    }

    /// Whether the tier takes every call.
    pub fn is_healthy(&self) -> bool {
        matches!(self, TierHealth::Healthy)
    }

    /// The cause found, unless healthy.
    pub fn cause(&self) -> Option<&str> {
        match self {
            TierHealth::Healthy => None,
            TierHealth::ReadOnly { cause, .. } | TierHealth::Lost { cause, .. } => Some(cause),
        }
    }

    /// The errno a refused call gets: ENODEV when lost, EROFS when
    /// read-only; `None` when healthy.
    pub fn errno(&self) -> Option<i32> {
        match self {
            TierHealth::Healthy => None,
            TierHealth::ReadOnly { .. } => Some(Errno::ROFS.raw_os_error()),
            TierHealth::Lost { .. } => Some(Errno::NODEV.raw_os_error()),
        }
    }
}

impl fmt::Display for TierHealth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.cause() {
            None => f.write_str(self.name()),
            Some(cause) => write!(f, "{}: {cause}", self.name()),
        }
    }
}

const HEALTHY: u8 = 0;
const READ_ONLY: u8 = 1;
const LOST: u8 = 2;

/// The identity and health of a backend's root (module docs).
pub(crate) struct RootWatch {
    /// The root's name, as configured.
    path: PathBuf,
    /// A descriptor of the root as opened (for its file system's flags).
    fd: OwnedFd,
    /// Device and inode of the root when opened.
    identity: (u64, u64),
    /// `posix <root>`, the start of every refusal.
    label: String,
    /// [`HEALTHY`], [`READ_ONLY`] or [`LOST`]: read on every call without
    /// taking the lock.
    state: AtomicU8,
    /// The state with its cause; changed only with `state`, under it.
    health: Mutex<TierHealth>,
}

impl fmt::Debug for RootWatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RootWatch")
            .field("path", &self.path)
            .field("identity", &self.identity)
            .field("state", &self.state.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl RootWatch {
    /// Watch the root `fd` opened at `path`; probed once now, so a
    /// read-only file system is known from the start.
    pub(crate) fn new(path: PathBuf, fd: OwnedFd, label: &str) -> io::Result<RootWatch> {
        let stat = rfs::fstat(&fd)
            .map_err(|errno| errno_error(errno, format_args!("{label}: fstat the root")))?;
        let watch = RootWatch {
            path,
            fd,
            identity: (stat.st_dev, stat.st_ino),
            label: label.to_string(),
            state: AtomicU8::new(HEALTHY),
            health: Mutex::new(TierHealth::Healthy),
        };
        let _ = watch.probe();
        Ok(watch)
    }

    /// The health now.
    pub(crate) fn health(&self) -> TierHealth {
        lock(&self.health).clone()
    }

    /// Whether the tier is lost: every call is refused.
    pub(crate) fn lost(&self) -> bool {
        self.state.load(Ordering::Acquire) == LOST
    }

    /// Before a call: a lost tier refuses it (ENODEV, saying why); `what`
    /// names the call. A read-only tier is not refused here: its file
    /// system answers EROFS to changes itself.
    pub(crate) fn admit(&self, what: &dyn fmt::Display) -> io::Result<()> {
        if self.lost() {
            return Err(self.refusal(what));
        }
        Ok(())
    }

    /// The error of a call refused now (see [`RootWatch::admit`]).
    pub(crate) fn refusal(&self, what: &dyn fmt::Display) -> io::Error {
        let health = self.health();
        let errno = match health {
            TierHealth::ReadOnly { .. } => Errno::ROFS,
            _ => Errno::NODEV,
        };
        errno_error(
            errno,
            format_args!("{}: {what}: refused, the tier is {health}", self.label),
        )
    }

    /// After a sync: the root's name still leads to the directory synced
    /// into, else the tier is lost and the sync fails (ENODEV) saying so.
    pub(crate) fn verify(&self, what: &dyn fmt::Display) -> io::Result<()> {
        if let Some(cause) = self.moved() {
            self.set(LOST, cause);
        }
        match self.state.load(Ordering::Acquire) {
            LOST => Err(self.refusal(what)),
            _ => Ok(()),
        }
    }

    /// Look again: identity, then whether the tier takes changes. Err
    /// (ENODEV, with the cause) when lost.
    ///
    /// Read-only is the file system's read-only flag, or a change refused
    /// with EROFS ([`RootWatch::after_error`]: a file system turned
    /// read-only after an error, or a server exporting it read-only, keeps
    /// the flag clear). Once found read-only the tier stays so until the
    /// flag is clear and an unnamed file (`O_TMPFILE`, which leaves no
    /// trace in the tier's namespace) can be made in its root; a file
    /// system without `O_TMPFILE` is taken at its flag's word.
    pub(crate) fn probe(&self) -> io::Result<()> {
        if let Some(cause) = self.moved() {
            self.set(LOST, cause);
            return Err(self.refusal(&"check the root"));
        }
        let flagged = rfs::fstatvfs(&self.fd)
            .is_ok_and(|stat| stat.f_flag.contains(rfs::StatVfsMountFlags::RDONLY));
        if flagged {
            self.set(
                READ_ONLY,
                format!(
                    "the file system of {} is mounted read-only",
                    self.path.display()
                ),
            );
        } else if self.state.load(Ordering::Acquire) != READ_ONLY || self.takes_changes() {
            self.set(HEALTHY, String::new());
        }
        Ok(())
    }

    /// Whether an unnamed file can be made in the root now (EROFS: no;
    /// made, or `O_TMPFILE` not supported there: yes).
    fn takes_changes(&self) -> bool {
        let flags = rfs::OFlags::TMPFILE | rfs::OFlags::WRONLY | rfs::OFlags::CLOEXEC;
        !matches!(
            rfs::openat(&self.fd, ".", flags, rfs::Mode::from_raw_mode(0o600)),
            Err(Errno::ROFS)
        )
    }

    /// A call failed with `error`: an EROFS makes the tier read-only (the
    /// refusal is the evidence); an errno that may mean the tier went away
    /// (EIO, ESTALE, ENOTCONN, ENODEV) makes the watch look again, so the
    /// next calls are refused with the cause.
    pub(crate) fn after_error(&self, error: &io::Error) {
        let Some(code) = crate::raw_os_error(error) else {
            return;
        };
        if code == Errno::ROFS.raw_os_error() {
            if self.moved().is_none() {
                self.set(
                    READ_ONLY,
                    format!(
                        "a change under {} was refused with EROFS (its file system, or the \
                         server behind it, is read-only)",
                        self.path.display()
                    ),
                );
                return;
            }
        } else if ![Errno::IO, Errno::STALE, Errno::NOTCONN, Errno::NODEV]
            .iter()
            .any(|errno| errno.raw_os_error() == code)
        {
            return;
        }
        let _ = self.probe();
    }

    /// Why the root's name no longer leads to the root, if it does not.
    fn moved(&self) -> Option<String> {
        let (dev, ino) = self.identity;
        match rfs::stat(&self.path) {
            Ok(now) if (now.st_dev, now.st_ino) == (dev, ino) => None,
            Ok(now) => Some(format!(
                "{} is no longer the directory sluice opened (device {}:{} inode {ino} then, \
                 device {}:{} inode {} now): its file system was unmounted, or the directory was \
                 moved, removed or replaced",
                self.path.display(),
                rfs::major(dev),
                rfs::minor(dev),
                rfs::major(now.st_dev),
                rfs::minor(now.st_dev),
                now.st_ino
            )),
            Err(Errno::NOENT | Errno::NOTDIR) => Some(format!(
                "{} no longer exists: the directory was moved, removed or replaced, or its file \
                 system unmounted",
                self.path.display()
            )),
            // Not known either way (EACCES on a parent, ENOTCONN of a dead
            // network mount above it): the name leads nowhere usable.
            Err(errno) => Some(format!(
                "{} cannot be looked up ({errno}): the tier is unreachable by its name",
                self.path.display()
            )),
        }
    }

    /// Move to `state` with `cause` (the cause of the first finding is
    /// kept while the state stays).
    fn set(&self, state: u8, cause: String) {
        let mut health = lock(&self.health);
        if self.state.load(Ordering::Acquire) == state {
            return;
        }
        let since = SystemTime::now();
        *health = match state {
            HEALTHY => TierHealth::Healthy,
            READ_ONLY => TierHealth::ReadOnly { since, cause },
            _ => TierHealth::Lost { since, cause },
        };
        self.state.store(state, Ordering::Release);
    }
}
