//! Unmounting through fusermount3, refusing while busy and retrying for
//! a bounded time.

use super::*;

/// How long an unmount retries while the mount is busy: a process that
/// just closed its last file of the mount, or just left it, can keep it
/// busy for a moment (seen in 2 of about 60 conformance runs).
pub(super) const UNMOUNT_BUSY_MAX: Duration = Duration::from_secs(5);

/// How long closing waits for control requests still being served (a
/// drain, a sync) before it gives up releasing the lock early.
pub(super) const CLOSE_WAIT_MAX: Duration = Duration::from_secs(30);

/// Why an unmount did not happen.
#[derive(Debug)]
pub(super) enum NotUnmounted {
    /// Something still uses the mount.
    Busy,
    /// Another failure, with its message.
    Failed(io::Error),
}

/// `fusermount3 -u [-z] MOUNTPOINT`: the unmount of a user who is not root.
pub(super) fn fusermount_unmount(mountpoint: &Path, lazy: bool) -> Result<(), NotUnmounted> {
    let mut command = Command::new("fusermount3");
    command.arg("-u");
    if lazy {
        command.arg("-z");
    }
    let out = command
        .arg(mountpoint)
        .output()
        .map_err(|e| NotUnmounted::Failed(io::Error::new(e.kind(), format!("fusermount3: {e}"))))?;
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    if stderr.contains("busy") {
        return Err(NotUnmounted::Busy);
    }
    Err(NotUnmounted::Failed(io::Error::other(format!(
        "fusermount3 -u {}: {}",
        mountpoint.display(),
        stderr.trim()
    ))))
}

/// One unmount attempt (MNT_DETACH when `lazy`); `Ok` also when it was not
/// mounted any more. Not root (EPERM): through `fusermount3`.
pub(super) fn unmount_once(mountpoint: &Path, lazy: bool) -> Result<(), NotUnmounted> {
    let flags = if lazy {
        UnmountFlags::DETACH
    } else {
        UnmountFlags::empty()
    };
    match rustix::mount::unmount(mountpoint, flags) {
        Ok(()) | Err(Errno::INVAL) => Ok(()),
        Err(Errno::PERM) => fusermount_unmount(mountpoint, lazy),
        Err(Errno::BUSY) => Err(NotUnmounted::Busy),
        Err(e) => Err(NotUnmounted::Failed(io::Error::new(
            io::Error::from(e).kind(),
            format!("unmount {}: {e}", mountpoint.display()),
        ))),
    }
}

/// Unmount `mountpoint`, retrying for [`UNMOUNT_BUSY_MAX`] while it is
/// busy; then refuse, saying what keeps it busy. The mount keeps serving.
pub(super) fn unmount_when_not_busy(mountpoint: &Path, counters: &OpCounters) -> io::Result<()> {
    let started = Instant::now();
    loop {
        match unmount_once(mountpoint, false) {
            Ok(()) => return Ok(()),
            Err(NotUnmounted::Failed(e)) => return Err(e),
            Err(NotUnmounted::Busy) if started.elapsed() < UNMOUNT_BUSY_MAX => {
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(NotUnmounted::Busy) => {
                return Err(busy_error(
                    mountpoint,
                    counters.open_files.load(Ordering::Relaxed),
                ))
            }
        }
    }
}

/// "MOUNTPOINT is busy: …; close them or use --lazy".
pub(super) fn busy_error(mountpoint: &Path, open_files: u64) -> io::Error {
    let what = match open_files {
        0 => "a process has its working directory (or a mapped file) inside; leave it".to_string(),
        1 => "1 file is open through it; close it".to_string(),
        n => format!("{n} files are open through it; close them"),
    };
    io::Error::new(
        io::ErrorKind::ResourceBusy,
        format!(
            "{} is busy: {what}, or use `sluice unmount --lazy` (the mount keeps serving)",
            mountpoint.display()
        ),
    )
}
