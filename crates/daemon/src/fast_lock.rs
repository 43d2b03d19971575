//! The fast tier's lock: one mount per fast tier, decided before the mount
//! writes anything there.
//!
//! [`FastTierLock::acquire`] takes an exclusive `flock` on
//! `FAST/sluice.lock` and the mount holds it for its whole life. The mount
//! takes it before anything under the fast tier is opened for writing (log
//! regions, catalogue, staged checkpoints, lifted heads, control socket),
//! so a second mount of a live fast tier is refused without touching a
//! byte of it (issue 19: the control socket's check came after recovery
//! had rewritten and cut the live log). The kernel drops the lock when the
//! process ends, however it ends (kill -9 included): a stale lock never
//! blocks the next mount, which then recovers the log.
//!
//! The lock is only as strong as its name, so the fast tier's directory
//! must be the mount's own: owned by the mount's user or root and writable
//! by nobody else (another user could otherwise remove or replace the lock
//! file, the log or the control socket). A fast tier that is not is
//! refused with the `chmod` that fixes it; one the mount creates is made
//! 0700. The lock file is created 0600 without following a link, and holds
//! the holder's pid and mount point for the refusal message.
//!
//! `flock` is local to one machine's kernel: the fast tier is a local
//! device, never a shared file system.

use std::fs::File;
use std::io::{self, Read, Seek, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use rustix::fs::{flock, FlockOperation, Mode, OFlags};

/// The lock file's name in the fast tier's directory.
pub const LOCK_FILE: &str = "sluice.lock";

/// The fast tier's lock, held until dropped (or the process ends).
#[derive(Debug)]
pub struct FastTierLock {
    /// Holds the `flock`.
    _file: File,
    path: PathBuf,
}

impl FastTierLock {
    /// Lock the fast tier `fast` for the mount at `mountpoint`. Refuses a
    /// fast tier another sluice mount holds (naming it), one another user
    /// may write to, and a lock file that is not a regular file.
    pub fn acquire(fast: &Path, mountpoint: &Path) -> io::Result<FastTierLock> {
        check_directory(fast)?;
        let path = fast.join(LOCK_FILE);
        let what = |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", path.display()));
        let mut file = File::from(
            rustix::fs::open(
                &path,
                OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o600),
            )
            .map_err(|e| what(e.into()))?,
        );
        let meta = file.metadata().map_err(what)?;
        if !meta.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not a regular file: move it aside", path.display()),
            ));
        }
        match flock(&file, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {}
            Err(rustix::io::Errno::WOULDBLOCK) => return Err(in_use(fast, &file)),
            Err(e) => return Err(what(e.into())),
        }
        // Ours now: whatever the umask or an older sluice made of it.
        if meta.mode() & 0o7777 != 0o600 {
            file.set_permissions(std::fs::Permissions::from_mode(0o600))
                .map_err(what)?;
        }
        file.set_len(0).map_err(what)?;
        file.rewind().map_err(what)?;
        writeln!(
            file,
            "pid {}, mounted at {}",
            std::process::id(),
            mountpoint.display()
        )
        .map_err(what)?;
        Ok(FastTierLock { _file: file, path })
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Refuse a fast tier another live mount holds, without creating or
/// writing anything: `sluice config check` and the mount's preflight. A
/// lock file that does not exist is free; one that does is tested with a
/// shared non-blocking `flock`, which only an exclusive holder (a mount)
/// makes fail, and released at once. A lock file that is a link or not a
/// regular file is refused as [`FastTierLock::acquire`] would.
pub fn check_free(fast: &Path) -> io::Result<()> {
    let path = fast.join(LOCK_FILE);
    let what = |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", path.display()));
    let meta = match std::fs::symlink_metadata(&path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(what(e)),
    };
    if !meta.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{} is not a regular file{}: move it aside",
                path.display(),
                if meta.file_type().is_symlink() {
                    " (a symbolic link)"
                } else {
                    ""
                }
            ),
        ));
    }
    // NONBLOCK: never wait on whatever replaced the file since the stat.
    let file = File::from(
        rustix::fs::open(
            &path,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| what(e.into()))?,
    );
    match flock(&file, FlockOperation::NonBlockingLockShared) {
        Ok(()) => Ok(()),
        Err(rustix::io::Errno::WOULDBLOCK) => Err(in_use(fast, &file)),
        Err(e) => Err(what(e.into())),
    }
}

/// The refusal of a fast tier whose lock file `file` another mount holds,
/// naming the holder it wrote there.
fn in_use(fast: &Path, file: &File) -> io::Error {
    let mut holder = String::new();
    let _ = file.take(512).read_to_string(&mut holder);
    let holder = holder.trim();
    io::Error::new(
        io::ErrorKind::AddrInUse,
        format!(
            "fast tier {} is in use by another sluice mount ({}): unmount it first, or give \
             this mount its own fast tier",
            fast.display(),
            if holder.is_empty() {
                "holder unknown"
            } else {
                holder
            }
        ),
    )
}

/// `fast` must be a directory that only its owner (the mount's user or
/// root) may change: what [`FastTierLock::acquire`] checks first, and
/// the mount's preflight with it.
pub fn check_directory(fast: &Path) -> io::Result<()> {
    let meta = std::fs::metadata(fast)
        .map_err(|e| io::Error::new(e.kind(), format!("fast tier {}: {e}", fast.display())))?;
    if !meta.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("fast tier {} is not a directory", fast.display()),
        ));
    }
    let user = rustix::process::geteuid().as_raw();
    if meta.uid() != user && meta.uid() != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "fast tier {} belongs to uid {}: its owner could remove or replace the log, \
                 the lock and the control socket; give the mount a directory of its own user \
                 (uid {user}) or root",
                fast.display(),
                meta.uid()
            ),
        ));
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "fast tier {} is writable by other users (mode {mode:04o}): they could remove \
                 or replace the log, the lock and the control socket; run `chmod go-w {}` \
                 (or chmod 700: nobody else needs it)",
                fast.display(),
                fast.display()
            ),
        ));
    }
    Ok(())
}

/// Make `dir` 0700: the fast tier's directory when the mount created it
/// (with whatever the umask allowed).
pub fn make_private(dir: &Path) -> io::Result<()> {
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        .map_err(|e| io::Error::new(e.kind(), format!("fast tier {}: {e}", dir.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn private_dir() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        make_private(dir.path()).unwrap();
        dir
    }

    #[test]
    fn a_second_lock_is_refused_naming_the_holder_until_the_first_is_dropped() {
        let dir = private_dir();
        let first = FastTierLock::acquire(dir.path(), Path::new("/mnt/a")).unwrap();
        let err = FastTierLock::acquire(dir.path(), Path::new("/mnt/b")).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AddrInUse);
        let message = err.to_string();
        assert!(
            message.contains("in use by another sluice mount"),
            "{message}"
        );
        assert!(message.contains("mounted at /mnt/a"), "{message}");
        let mode = std::fs::metadata(first.path()).unwrap().mode() & 0o7777;
        assert_eq!(mode, 0o600);
        drop(first);
        FastTierLock::acquire(dir.path(), Path::new("/mnt/b")).unwrap();
    }

    #[test]
    fn check_free_refuses_a_held_lock_and_creates_nothing() {
        let dir = private_dir();
        check_free(dir.path()).unwrap();
        assert!(!dir.path().join(LOCK_FILE).exists(), "nothing created");
        let held = FastTierLock::acquire(dir.path(), Path::new("/mnt/a")).unwrap();
        let err = check_free(dir.path()).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AddrInUse);
        assert!(err.to_string().contains("mounted at /mnt/a"), "{err}");
        drop(held);
        check_free(dir.path()).unwrap();
        // The test itself holds nothing: a mount may lock right after it.
        check_free(dir.path()).unwrap();
        FastTierLock::acquire(dir.path(), Path::new("/mnt/b")).unwrap();
        std::fs::remove_file(dir.path().join(LOCK_FILE)).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", dir.path().join(LOCK_FILE)).unwrap();
        let err = check_free(dir.path()).unwrap_err();
        assert!(err.to_string().contains("symbolic link"), "{err}");
    }

    #[test]
    fn a_fast_tier_others_may_write_to_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        for mode in [0o777, 0o775, 0o1777] {
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(mode)).unwrap();
            let err = FastTierLock::acquire(dir.path(), Path::new("/mnt")).unwrap_err();
            assert!(err.to_string().contains("chmod go-w"), "{mode:o}: {err}");
            assert!(!dir.path().join(LOCK_FILE).exists(), "nothing written");
        }
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        FastTierLock::acquire(dir.path(), Path::new("/mnt")).unwrap();
    }

    #[test]
    fn a_linked_or_odd_lock_file_is_refused() {
        let dir = private_dir();
        let target = dir.path().join("elsewhere");
        std::fs::write(&target, b"keep").unwrap();
        std::os::unix::fs::symlink(&target, dir.path().join(LOCK_FILE)).unwrap();
        assert!(FastTierLock::acquire(dir.path(), Path::new("/mnt")).is_err());
        assert_eq!(std::fs::read(&target).unwrap(), b"keep");
        std::fs::remove_file(dir.path().join(LOCK_FILE)).unwrap();
        std::fs::create_dir(dir.path().join(LOCK_FILE)).unwrap();
        assert!(FastTierLock::acquire(dir.path(), Path::new("/mnt")).is_err());
    }
}
