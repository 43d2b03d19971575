//! The control socket's client side: finding the sluice mount that holds
//! a path and its control socket (the root's [`CONTROL_XATTR`]), sending
//! one request and reading the answer, and clearing a dead mount.
//!
//! A client that cannot reach a mount says why, from the errno and
//! `/proc/self/mountinfo` (issue 31): a sluice mount of another user
//! (EACCES: who may use it), a dead mount (ENOTCONN: `fusermount3 -u`,
//! which `sluice unmount` runs itself for a dead sluice mount), or a path
//! that is not a sluice mount at all. The protocol (a request line, one
//! answer line: JSON, `ok ...` or `error: ...`) is served by `sluice-daemon`'s
//! mount.

use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use rustix::io::Errno;

use crate::mounts::{fuse_mount_now, unmount_once, FuseMount, NotUnmounted};

/// The extended attribute of a mount's root that holds the path of its
/// control socket; clients find the socket through it.
pub const CONTROL_XATTR: &str = "user.sluice.control";

/// The sluice mount holding `path` (an existing file or directory) and
/// `path` relative to its root, as the engine names it: the nearest
/// ancestor that answers the control attribute.
pub fn mount_of(path: &Path) -> io::Result<(PathBuf, String)> {
    let absolute = std::fs::canonicalize(path).map_err(|e| {
        let (dead, denied) = (is_dead(&e), is_denied(&e));
        match enclosing_fuse_mount(path) {
            Some((point, mount)) if dead || denied => unreachable(&point, &mount, e),
            _ => io::Error::new(e.kind(), format!("{}: {e}", path.display())),
        }
    })?;
    let mut buf = [0u8; 4096];
    for root in absolute.ancestors() {
        if let Err(e) = rustix::fs::getxattr(root, CONTROL_XATTR, &mut buf[..]) {
            // A sluice mount that does not answer (dead, or another
            // user's) is the one the path is in: say so.
            let e = io::Error::from(e);
            match fuse_mount_now(root) {
                Some(mount) if mount.is_sluice() && (is_dead(&e) || is_denied(&e)) => {
                    return Err(unreachable(root, &mount, e))
                }
                _ => continue,
            }
        }
        let mut names = Vec::new();
        for part in absolute.strip_prefix(root).unwrap_or(Path::new("")).iter() {
            let name = sluice_env::name_from_os(part);
            if name.contains('\n') {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "{}: a name with a newline cannot be sent to the mount",
                        path.display()
                    ),
                ));
            }
            names.push(name.into_owned());
        }
        return Ok((root.to_path_buf(), names.join("/")));
    }
    Err(io::Error::new(
        io::ErrorKind::NotFound,
        format!("{} is not inside a sluice mount", path.display()),
    ))
}

/// The control socket of the mount at `mountpoint`, from its root's
/// `user.sluice.control` xattr. A client that must reach the mount after
/// it has left the mount point (progress during an unmount's drain) looks
/// it up first.
pub fn control_socket_of(mountpoint: &Path) -> io::Result<PathBuf> {
    let mut buf = vec![0u8; 4096];
    let n = rustix::fs::getxattr(mountpoint, CONTROL_XATTR, &mut buf[..]).map_err(|e| {
        let e = io::Error::from(e);
        match fuse_mount_now(mountpoint) {
            Some(mount) => unreachable(mountpoint, &mount, e),
            None => io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "{} is not a sluice mount (not the root of a FUSE mount; no {} \
                         attribute: {e})",
                    mountpoint.display(),
                    CONTROL_XATTR
                ),
            ),
        }
    })?;
    Ok(PathBuf::from(
        String::from_utf8_lossy(&buf[..n]).to_string(),
    ))
}

/// The nearest FUSE mount at or above `path` (its mount point and what
/// mountinfo says of it), found without touching anything inside it.
fn enclosing_fuse_mount(path: &Path) -> Option<(PathBuf, FuseMount)> {
    let absolute = std::path::absolute(path).ok()?;
    absolute
        .ancestors()
        .find_map(|a| fuse_mount_now(a).map(|m| (a.to_path_buf(), m)))
}

/// ENOTCONN: a FUSE mount whose process is gone.
fn is_dead(e: &io::Error) -> bool {
    e.raw_os_error() == Some(Errno::NOTCONN.raw_os_error())
}

/// EACCES or EPERM: the mount (or its socket) refuses this user.
fn is_denied(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::PermissionDenied
        || e.raw_os_error() == Some(Errno::PERM.raw_os_error())
}

/// Why the FUSE mount `mount` at `point` did not answer with `e`, in the
/// user's words and with what to do.
fn unreachable(point: &Path, mount: &FuseMount, e: io::Error) -> io::Error {
    let shown = point.display();
    if is_dead(&e) {
        let fix = if mount.is_sluice() {
            format!(
                "run `fusermount3 -u {shown}` (`sluice unmount {shown}` does it for you); the \
                 next mount of its fast tier recovers the log"
            )
        } else {
            format!("run `fusermount3 -u {shown}`")
        };
        return io::Error::new(
            io::ErrorKind::NotConnected,
            format!(
                "{shown} is a dead FUSE mount ({e}): the process that served it ended without \
                 unmounting (killed?); {fix}"
            ),
        );
    }
    if is_denied(&e) && mount.is_sluice() {
        return owned_by_another(point, mount.user_id, &e);
    }
    if !mount.is_sluice() {
        return io::Error::new(
            io::ErrorKind::NotFound,
            format!(
                "{shown} is not a sluice mount: it is a FUSE mount of {} ({e})",
                mount.fstype
            ),
        );
    }
    io::Error::new(
        e.kind(),
        format!(
            "{shown} is a sluice mount that did not answer for its control socket ({e}); \
             `sluice status {shown}` again, or see the mount's log"
        ),
    )
}

/// The refusal of a sluice mount's control socket to this user.
fn owned_by_another(point: &Path, owner: Option<u32>, e: &io::Error) -> io::Error {
    let owner = owner.map_or_else(|| "another user".to_string(), |uid| format!("uid {uid}"));
    io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!(
            "{} is a sluice mount owned by {owner}: only root and that user may use its control \
             socket (uid {} was refused: {e})",
            point.display(),
            rustix::process::geteuid().as_raw()
        ),
    )
}

/// `sluice unmount` of a dead mount (its process was killed): clear it,
/// as `fusermount3 -u` does, when that is safe: the mount point is a
/// dead (ENOTCONN) FUSE mount that sluice made (`fuse.sluice` in
/// mountinfo). Nothing is drained: its buffered bytes stay in the fast
/// tier's log, which the next mount recovers. `Err` says why it was not
/// done and what to run instead.
pub fn clear_dead_mount(mountpoint: &Path) -> io::Result<()> {
    let shown = mountpoint.display();
    let Some(mount) = fuse_mount_now(mountpoint) else {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("{shown} is not a FUSE mount: nothing to clear"),
        ));
    };
    match std::fs::metadata(mountpoint) {
        Err(e) if e.raw_os_error() == Some(Errno::NOTCONN.raw_os_error()) => {}
        _ => {
            return Err(io::Error::other(format!(
                "{shown} answers: it is not a dead mount, so it is not cleared"
            )))
        }
    }
    if !mount.is_sluice() {
        return Err(io::Error::new(
            io::ErrorKind::NotConnected,
            format!(
                "{shown} is a dead FUSE mount of {}, not sluice's: run `fusermount3 -u {shown}`",
                mount.fstype
            ),
        ));
    }
    unmount_once(mountpoint, false).map_err(|e| match e {
        NotUnmounted::Busy => io::Error::new(
            io::ErrorKind::ResourceBusy,
            format!(
                "{shown} is a dead sluice mount, and busy: a process has its working directory \
                 or a file inside; leave it and run `fusermount3 -u {shown}` (or `fusermount3 \
                 -u -z {shown}` to detach it now)"
            ),
        ),
        NotUnmounted::Failed(e) => io::Error::new(
            e.kind(),
            format!(
                "{shown} is a dead sluice mount that could not be cleared ({e}): run \
                 `fusermount3 -u {shown}`"
            ),
        ),
    })
}

/// Send one control request to the mount at `mountpoint` and return the
/// answer line.
pub fn control_request(mountpoint: &Path, request: &str) -> io::Result<String> {
    control_request_at(&control_socket_of(mountpoint)?, mountpoint, request)
}

/// Send one control request over `socket` (the control socket of the
/// mount at `mountpoint`, named in messages) and return the answer line.
pub fn control_request_at(socket: &Path, mountpoint: &Path, request: &str) -> io::Result<String> {
    let path = socket.display();
    let mut stream = UnixStream::connect(socket).map_err(|e| {
        if e.kind() == io::ErrorKind::PermissionDenied {
            // The mount's owner: mountinfo's user_id, else the socket's.
            let owner = fuse_mount_now(mountpoint)
                .and_then(|m| m.user_id)
                .or_else(|| {
                    let meta = std::fs::metadata(socket).ok()?;
                    Some(std::os::unix::fs::MetadataExt::uid(&meta))
                });
            owned_by_another(
                mountpoint,
                owner,
                &io::Error::new(e.kind(), format!("control socket {path}: {e}")),
            )
        } else if matches!(
            e.kind(),
            io::ErrorKind::ConnectionRefused | io::ErrorKind::NotFound
        ) {
            io::Error::new(
                e.kind(),
                format!(
                    "control socket {path}: {e}: no sluice process serves {} (it ended, or is \
                     still starting); see its log",
                    mountpoint.display()
                ),
            )
        } else {
            io::Error::new(e.kind(), format!("control socket {path}: {e}"))
        }
    })?;
    writeln!(stream, "{request}")?;
    let mut answer = String::new();
    BufReader::new(stream).read_line(&mut answer)?;
    let answer = answer.trim_end().to_string();
    if answer.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!(
                "the mount at {} closed the control connection without answering (was its process killed? \
                 if `ls {}` says \"Transport endpoint is not connected\", run `fusermount3 -u {}`)",
                mountpoint.display(),
                mountpoint.display(),
                mountpoint.display()
            ),
        ));
    }
    if let Some(message) = answer.strip_prefix("error: ") {
        return Err(io::Error::other(message.to_string()));
    }
    Ok(answer)
}
