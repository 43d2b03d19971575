//! The errno an `io::Error` stands for, and errno names.
//!
//! [`errno_of`] is what the FUSE adapter answers the kernel with
//! (`sluice-fuse`'s `errno.rs` turns it into fuser's type) and what an
//! incident records (`sluice-engine`'s `incidents`): the OS error a tier
//! reported if there is one anywhere in the error's chain
//! ([`crate::raw_os_error`]), else the errno the error's kind was derived
//! from. [`errno_name`] gives the symbolic name an operator looks up
//! (`ENOSPC`), for status and logs.
//!
//! INVARIANT: every `io::ErrorKind` std derives from an errno maps back to
//! that errno (tested), so context put in front of an error by formatting
//! it into a new one of the same kind loses nothing the caller sees.

use std::io;

use rustix::io::Errno;

/// The errno for `error`: its OS error, else the errno its kind stands
/// for; EIO for corrupt data (a payload whose checksum fails) and every
/// kind that stands for none — an I/O error, never wrong bytes.
pub fn errno_of(error: &io::Error) -> i32 {
    if let Some(code) = crate::raw_os_error(error) {
        return code;
    }
    use io::ErrorKind as K;
    let errno = match error.kind() {
        K::NotFound => Errno::NOENT,
        K::AlreadyExists => Errno::EXIST,
        K::PermissionDenied => Errno::ACCESS,
        K::InvalidInput => Errno::INVAL,
        K::StorageFull => Errno::NOSPC,
        K::ReadOnlyFilesystem => Errno::ROFS,
        K::Unsupported => Errno::OPNOTSUPP,
        K::DirectoryNotEmpty => Errno::NOTEMPTY,
        K::IsADirectory => Errno::ISDIR,
        K::NotADirectory => Errno::NOTDIR,
        K::FileTooLarge => Errno::FBIG,
        K::ResourceBusy => Errno::BUSY,
        K::TimedOut => Errno::TIMEDOUT,
        K::Interrupted => Errno::INTR,
        K::WouldBlock => Errno::AGAIN,
        K::CrossesDevices => Errno::XDEV,
        K::TooManyLinks => Errno::MLINK,
        K::InvalidFilename => Errno::NAMETOOLONG,
        K::ArgumentListTooLong => Errno::TOOBIG,
        K::ExecutableFileBusy => Errno::TXTBSY,
        K::StaleNetworkFileHandle => Errno::STALE,
        K::NotSeekable => Errno::SPIPE,
        K::QuotaExceeded => Errno::DQUOT,
        K::Deadlock => Errno::DEADLK,
        K::OutOfMemory => Errno::NOMEM,
        K::BrokenPipe => Errno::PIPE,
        K::NotConnected => Errno::NOTCONN,
        K::ConnectionRefused => Errno::CONNREFUSED,
        K::ConnectionReset => Errno::CONNRESET,
        K::ConnectionAborted => Errno::CONNABORTED,
        K::AddrInUse => Errno::ADDRINUSE,
        K::AddrNotAvailable => Errno::ADDRNOTAVAIL,
        K::HostUnreachable => Errno::HOSTUNREACH,
        K::NetworkUnreachable => Errno::NETUNREACH,
        K::NetworkDown => Errno::NETDOWN,
        _ => Errno::IO,
    };
    errno.raw_os_error()
}

/// Names of the errnos sluice answers with or meets on a tier.
const NAMES: &[(Errno, &str)] = &[
    (Errno::PERM, "EPERM"),
    (Errno::NOENT, "ENOENT"),
    (Errno::INTR, "EINTR"),
    (Errno::IO, "EIO"),
    (Errno::NXIO, "ENXIO"),
    (Errno::TOOBIG, "E2BIG"),
    (Errno::BADF, "EBADF"),
    (Errno::AGAIN, "EAGAIN"),
    (Errno::NOMEM, "ENOMEM"),
    (Errno::ACCESS, "EACCES"),
    (Errno::FAULT, "EFAULT"),
    (Errno::BUSY, "EBUSY"),
    (Errno::EXIST, "EEXIST"),
    (Errno::XDEV, "EXDEV"),
    (Errno::NODEV, "ENODEV"),
    (Errno::NOTDIR, "ENOTDIR"),
    (Errno::ISDIR, "EISDIR"),
    (Errno::INVAL, "EINVAL"),
    (Errno::NFILE, "ENFILE"),
    (Errno::MFILE, "EMFILE"),
    (Errno::TXTBSY, "ETXTBSY"),
    (Errno::FBIG, "EFBIG"),
    (Errno::NOSPC, "ENOSPC"),
    (Errno::SPIPE, "ESPIPE"),
    (Errno::ROFS, "EROFS"),
    (Errno::MLINK, "EMLINK"),
    (Errno::PIPE, "EPIPE"),
    (Errno::RANGE, "ERANGE"),
    (Errno::DEADLK, "EDEADLK"),
    (Errno::NAMETOOLONG, "ENAMETOOLONG"),
    (Errno::NOLCK, "ENOLCK"),
    (Errno::NOSYS, "ENOSYS"),
    (Errno::NOTEMPTY, "ENOTEMPTY"),
    (Errno::LOOP, "ELOOP"),
    (Errno::NODATA, "ENODATA"),
    (Errno::OVERFLOW, "EOVERFLOW"),
    (Errno::OPNOTSUPP, "EOPNOTSUPP"),
    (Errno::ADDRINUSE, "EADDRINUSE"),
    (Errno::ADDRNOTAVAIL, "EADDRNOTAVAIL"),
    (Errno::NETDOWN, "ENETDOWN"),
    (Errno::NETUNREACH, "ENETUNREACH"),
    (Errno::CONNABORTED, "ECONNABORTED"),
    (Errno::CONNRESET, "ECONNRESET"),
    (Errno::NOBUFS, "ENOBUFS"),
    (Errno::NOTCONN, "ENOTCONN"),
    (Errno::TIMEDOUT, "ETIMEDOUT"),
    (Errno::CONNREFUSED, "ECONNREFUSED"),
    (Errno::HOSTUNREACH, "EHOSTUNREACH"),
    (Errno::STALE, "ESTALE"),
    (Errno::DQUOT, "EDQUOT"),
    (Errno::NOMEDIUM, "ENOMEDIUM"),
    (Errno::REMOTEIO, "EREMOTEIO"),
];

/// The symbolic name of errno `code` (`ENOSPC`), if it is one sluice
/// names; status and logs show the number otherwise.
pub fn errno_name(code: i32) -> Option<&'static str> {
    NAMES
        .iter()
        .find(|(errno, _)| errno.raw_os_error() == code)
        .map(|&(_, name)| name)
}

/// The errno named `name` (`ENOSPC`), the inverse of [`errno_name`].
pub fn errno_code(name: &str) -> Option<i32> {
    NAMES
        .iter()
        .find(|(_, known)| *known == name)
        .map(|(errno, _)| errno.raw_os_error())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn os_errors_pass_through_and_kinds_map() {
        assert_eq!(errno_of(&io::Error::from_raw_os_error(28)), 28);
        let wrapped = io::Error::other(io::Error::from_raw_os_error(5));
        assert_eq!(errno_of(&wrapped), Errno::IO.raw_os_error());
        let kind = |k: io::ErrorKind| errno_of(&io::Error::from(k));
        assert_eq!(kind(io::ErrorKind::NotFound), Errno::NOENT.raw_os_error());
        assert_eq!(
            kind(io::ErrorKind::StorageFull),
            Errno::NOSPC.raw_os_error()
        );
        assert_eq!(kind(io::ErrorKind::InvalidData), Errno::IO.raw_os_error());
        assert_eq!(
            kind(io::ErrorKind::Unsupported),
            Errno::OPNOTSUPP.raw_os_error()
        );
    }

    /// Every kind std derives from an errno maps back to that errno, so
    /// context that keeps only the kind loses nothing the caller sees.
    #[test]
    fn kinds_decoded_from_errnos_map_back_to_them() {
        for code in 1..134 {
            let kind = io::Error::from_raw_os_error(code).kind();
            // Only the kind survives, as after the engine's context.
            let mapped = errno_of(&io::Error::new(kind, "context"));
            let kind_of_mapped = io::Error::from_raw_os_error(mapped).kind();
            // Errnos std leaves uncategorized have no kind to map back;
            // kinds not yet stable (ELOOP, EINPROGRESS) cannot be named.
            let name = format!("{kind:?}");
            if ["Uncategorized", "FilesystemLoop", "InProgress"].contains(&name.as_str()) {
                continue;
            }
            assert_eq!(
                kind_of_mapped, kind,
                "errno {code} ({kind:?}) came back as {mapped}"
            );
        }
    }

    /// Names are the C names of their numbers: each name's errno decodes
    /// to the kind std gives that C errno, and no number is named twice.
    #[test]
    fn names_are_unique_and_match_their_numbers() {
        assert_eq!(errno_name(28), Some("ENOSPC"));
        assert_eq!(errno_name(5), Some("EIO"));
        assert_eq!(errno_name(30), Some("EROFS"));
        assert_eq!(errno_name(0), None);
        for (i, (a, _)) in NAMES.iter().enumerate() {
            for (b, _) in &NAMES[i + 1..] {
                assert_ne!(a, b, "named twice");
            }
        }
        let error =
            io::Error::from_raw_os_error(errno_of(&io::Error::from(io::ErrorKind::QuotaExceeded)));
        assert_eq!(
            errno_name(error.raw_os_error().unwrap()),
            Some("EDQUOT"),
            "{error}"
        );
    }
}
