//! The one place errors become errnos (DESIGN §2): the OS error a tier
//! reported if there is one, else the error's kind.

use std::io;

use fuser::Errno;

/// The errno the kernel gets for `error`.
pub fn errno(error: &io::Error) -> Errno {
    if let Some(code) = sluice_env::raw_os_error(error) {
        return Errno::from_i32(code);
    }
    // No OS error: context was put in front of it by formatting (the
    // engine does), so only its kind is left. Every kind std derives from
    // an errno maps back to that errno (EROFS must stay EROFS, not EIO).
    use io::ErrorKind as K;
    match error.kind() {
        K::NotFound => Errno::ENOENT,
        K::AlreadyExists => Errno::EEXIST,
        K::PermissionDenied => Errno::EACCES,
        K::InvalidInput => Errno::EINVAL,
        K::StorageFull => Errno::ENOSPC,
        K::ReadOnlyFilesystem => Errno::EROFS,
        K::Unsupported => Errno::EOPNOTSUPP,
        K::DirectoryNotEmpty => Errno::ENOTEMPTY,
        K::IsADirectory => Errno::EISDIR,
        K::NotADirectory => Errno::ENOTDIR,
        K::FileTooLarge => Errno::EFBIG,
        K::ResourceBusy => Errno::EBUSY,
        K::TimedOut => Errno::ETIMEDOUT,
        K::Interrupted => Errno::EINTR,
        K::WouldBlock => Errno::EAGAIN,
        K::CrossesDevices => Errno::EXDEV,
        K::TooManyLinks => Errno::EMLINK,
        K::InvalidFilename => Errno::ENAMETOOLONG,
        K::ArgumentListTooLong => Errno::E2BIG,
        K::ExecutableFileBusy => Errno::ETXTBSY,
        K::StaleNetworkFileHandle => Errno::ESTALE,
        K::NotSeekable => Errno::ESPIPE,
        K::QuotaExceeded => Errno::EDQUOT,
        K::Deadlock => Errno::EDEADLK,
        K::OutOfMemory => Errno::ENOMEM,
        K::BrokenPipe => Errno::EPIPE,
        K::NotConnected => Errno::ENOTCONN,
        K::ConnectionRefused => Errno::ECONNREFUSED,
        K::ConnectionReset => Errno::ECONNRESET,
        K::ConnectionAborted => Errno::ECONNABORTED,
        K::AddrInUse => Errno::EADDRINUSE,
        K::AddrNotAvailable => Errno::EADDRNOTAVAIL,
        K::HostUnreachable => Errno::EHOSTUNREACH,
        K::NetworkUnreachable => Errno::ENETUNREACH,
        K::NetworkDown => Errno::ENETDOWN,
        // Corrupt data (a payload whose checksum fails) and everything
        // else: an I/O error, never wrong bytes.
        _ => Errno::EIO,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn os_errors_pass_through_and_kinds_map() {
        assert_eq!(errno(&io::Error::from_raw_os_error(28)), Errno::ENOSPC);
        let wrapped = io::Error::other(io::Error::from_raw_os_error(5));
        assert_eq!(errno(&wrapped), Errno::EIO);
        assert_eq!(
            errno(&io::Error::from(io::ErrorKind::NotFound)),
            Errno::ENOENT
        );
        assert_eq!(
            errno(&io::Error::from(io::ErrorKind::StorageFull)),
            Errno::ENOSPC
        );
        assert_eq!(
            errno(&io::Error::from(io::ErrorKind::InvalidData)),
            Errno::EIO
        );
        assert_eq!(
            errno(&io::Error::from(io::ErrorKind::Unsupported)),
            Errno::EOPNOTSUPP
        );
    }

    /// Issue: a create on a read-only capacity tier returned EIO while
    /// mkdir got EROFS. The engine puts context in front of the tier's
    /// error by formatting it into a new error of the same kind, so the OS
    /// error is gone and only the kind (`ReadOnlyFilesystem`) is left.
    #[test]
    fn create_on_read_only_tier_is_erofs_not_eio() {
        let tier = io::Error::from_raw_os_error(Errno::EROFS.code());
        let engine = io::Error::new(tier.kind(), format!("create a/b: {tier}"));
        assert_eq!(
            sluice_env::raw_os_error(&engine),
            None,
            "the OS error is lost"
        );
        assert_eq!(errno(&engine), Errno::EROFS);
    }

    /// Every kind std derives from an errno maps back to that errno, so
    /// context that keeps only the kind loses nothing the caller sees.
    #[test]
    fn kinds_decoded_from_errnos_map_back_to_them() {
        for code in 1..134 {
            let kind = io::Error::from_raw_os_error(code).kind();
            // Only the kind survives, as after the engine's context.
            let mapped = errno(&io::Error::new(kind, "context"));
            let kind_of_mapped = io::Error::from_raw_os_error(mapped.code()).kind();
            // Errnos std leaves uncategorized have no kind to map back;
            // kinds not yet stable (ELOOP, EINPROGRESS) cannot be named.
            let name = format!("{kind:?}");
            if ["Uncategorized", "FilesystemLoop", "InProgress"].contains(&name.as_str()) {
                continue;
            }
            assert_eq!(
                kind_of_mapped, kind,
                "errno {code} ({kind:?}) came back as {mapped:?}"
            );
        }
    }
}
