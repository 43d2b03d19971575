//! The kernel's table of mounts as sluice reads it: which FUSE mount is at
//! a path (`/proc/self/mountinfo`), and one attempt to unmount one
//! (umount2, else `fusermount3 -u` for a user who is not root). Both the
//! mount daemon (its checks before mounting, its unmount) and the client
//! (messages about a dead or foreign mount, clearing a dead one) use it.

use std::io;
use std::path::Path;
use std::process::Command;

use rustix::io::Errno;
use rustix::mount::UnmountFlags;

/// A FUSE mount as `/proc/self/mountinfo` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FuseMount {
    /// `fuse.sluice`, `fuse.sshfs`, `fuse` ...
    pub fstype: String,
    /// The mount's source (`sluice` for sluice's own).
    pub source: String,
    /// Who mounted it: the `user_id=` of its super options.
    pub user_id: Option<u32>,
}

impl FuseMount {
    /// Whether sluice serves (or served) it.
    pub fn is_sluice(&self) -> bool {
        self.fstype == "fuse.sluice" || self.source == "sluice"
    }
}

/// The FUSE mount whose mount point is `point` (the topmost when several
/// are stacked there), from the text of `/proc/self/mountinfo`.
pub fn fuse_mount_at(mountinfo: &str, point: &Path) -> Option<FuseMount> {
    let unescape = |field: &str| -> Vec<u8> {
        let bytes = field.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            let octal = bytes.get(i + 1..i + 4).and_then(|d| {
                let d = std::str::from_utf8(d).ok()?;
                u8::from_str_radix(d, 8).ok()
            });
            match (bytes[i], octal) {
                (b'\\', Some(byte)) => {
                    out.push(byte);
                    i += 4;
                }
                (byte, _) => {
                    out.push(byte);
                    i += 1;
                }
            }
        }
        out
    };
    let point = std::os::unix::ffi::OsStrExt::as_bytes(point.as_os_str());
    mountinfo.lines().rev().find_map(|line| {
        let (fields, after) = line.split_once(" - ")?;
        let mounted_at = fields.split(' ').nth(4)?;
        let mut after = after.split(' ');
        let fstype = after.next()?;
        let source = after.next().unwrap_or("");
        let user_id = after.next().and_then(|options| {
            options
                .split(',')
                .find_map(|o| o.strip_prefix("user_id="))
                .and_then(|id| id.parse().ok())
        });
        (fstype.starts_with("fuse") && unescape(mounted_at) == point).then(|| FuseMount {
            fstype: fstype.to_string(),
            source: source.to_string(),
            user_id,
        })
    })
}

/// The FUSE mount at `point` now, if any. `point` is resolved without
/// touching its last component, which a dead mount answers only with
/// ENOTCONN.
pub fn fuse_mount_now(point: &Path) -> Option<FuseMount> {
    let absolute = std::path::absolute(point).ok()?;
    let resolved = match (absolute.parent(), absolute.file_name()) {
        (Some(parent), Some(name)) => std::fs::canonicalize(parent).ok()?.join(name),
        _ => absolute,
    };
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    fuse_mount_at(&mountinfo, &resolved)
}

/// Why an unmount did not happen.
#[derive(Debug)]
pub enum NotUnmounted {
    /// Something still uses the mount.
    Busy,
    /// Another failure, with its message.
    Failed(io::Error),
}

/// `fusermount3 -u [-z] MOUNTPOINT`: the unmount of a user who is not root.
pub fn fusermount_unmount(mountpoint: &Path, lazy: bool) -> Result<(), NotUnmounted> {
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
pub fn unmount_once(mountpoint: &Path, lazy: bool) -> Result<(), NotUnmounted> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_gives_the_owner_and_the_topmost_mount() {
        let mountinfo = "\
97 22 0:52 / /mnt/s rw,nosuid,nodev,relatime shared:50 - fuse.sluice sluice rw,user_id=1000,group_id=1000
98 97 0:53 / /mnt/s rw - fuse.sshfs host:/ rw,user_id=0,group_id=0";
        let top = fuse_mount_at(mountinfo, Path::new("/mnt/s")).unwrap();
        assert_eq!(top.fstype, "fuse.sshfs");
        assert_eq!(top.user_id, Some(0));
        let first = fuse_mount_at(mountinfo.lines().next().unwrap(), Path::new("/mnt/s")).unwrap();
        assert!(first.is_sluice());
        assert_eq!(first.user_id, Some(1000));
    }
}
