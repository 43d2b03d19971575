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
