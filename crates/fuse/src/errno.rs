//! The one place errors become errnos (DESIGN §2): the OS error a tier
//! reported if there is one, else the error's kind.

use std::io;

use fuser::Errno;

/// The errno the kernel gets for `error`.
pub fn errno(error: &io::Error) -> Errno {
    if let Some(code) = sluice_env::raw_os_error(error) {
        return Errno::from_i32(code);
    }
    use io::ErrorKind as K;
    match error.kind() {
        K::NotFound => Errno::ENOENT,
        K::AlreadyExists => Errno::EEXIST,
        K::PermissionDenied => Errno::EACCES,
        K::InvalidInput => Errno::EINVAL,
        K::StorageFull => Errno::ENOSPC,
        K::Unsupported => Errno::EOPNOTSUPP,
        K::DirectoryNotEmpty => Errno::ENOTEMPTY,
        K::IsADirectory => Errno::EISDIR,
        K::NotADirectory => Errno::ENOTDIR,
        K::FileTooLarge => Errno::EFBIG,
        K::ResourceBusy => Errno::EBUSY,
        K::TimedOut => Errno::ETIMEDOUT,
        K::Interrupted => Errno::EINTR,
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
}
