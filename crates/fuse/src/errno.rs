//! The one place errors become errnos for the kernel (DESIGN §2): the OS
//! error a tier reported if there is one, else the error's kind
//! ([`sluice_env::errno::errno_of`]), and which of those answers are
//! failures worth an incident ([`is_failure`]).

use std::io;

use fuser::Errno;

/// The errno the kernel gets for `error`.
pub fn errno(error: &io::Error) -> Errno {
    Errno::from_i32(sluice_env::errno::errno_of(error))
}

/// Errnos that answer a request rather than report a failure: the
/// application asked for something that is not there, not allowed or not
/// possible (a missing name, a name that exists, a directory not empty,
/// no permission, a bad argument, a missing xattr, a buffer too small, an
/// operation the mount does not do). Everything else — EIO, ENOSPC,
/// EDQUOT, EROFS, EFBIG, ENOLCK, ETIMEDOUT, ENOTCONN, ESTALE, ENOMEM and
/// any errno not listed here — is a failure: it is counted, logged and
/// kept in `last_errors` (docs/fuse.md, "Logs and last_errors").
const ANSWERS: &[Errno] = &[
    Errno::ENOENT,
    Errno::EEXIST,
    Errno::ENOTEMPTY,
    Errno::EACCES,
    Errno::EPERM,
    Errno::EINVAL,
    Errno::ENOTDIR,
    Errno::EISDIR,
    Errno::ENAMETOOLONG,
    Errno::NO_XATTR,
    Errno::ERANGE,
    Errno::EAGAIN,
    Errno::EINTR,
    Errno::EOPNOTSUPP,
    Errno::ENOSYS,
    Errno::EXDEV,
    Errno::EMLINK,
    Errno::ELOOP,
    Errno::EBUSY,
    Errno::EBADF,
    Errno::E2BIG,
    Errno::ETXTBSY,
    Errno::ESPIPE,
];

/// Whether answering with `errno` means something failed (see
/// [`ANSWERS`] for the errnos that do not).
pub fn is_failure(errno: Errno) -> bool {
    !ANSWERS.contains(&errno)
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

    /// Issue 19: the failures an operator must see are incidents; the
    /// answers an application expects (a lookup miss, an existing name)
    /// are not, or they would push the real causes out of `last_errors`.
    #[test]
    fn failures_are_incidents_answers_are_not() {
        for failure in [
            Errno::EIO,
            Errno::ENOSPC,
            Errno::EDQUOT,
            Errno::EROFS,
            Errno::ENOLCK,
            Errno::ETIMEDOUT,
            Errno::ENOTCONN,
            Errno::EFBIG,
            Errno::ESTALE,
        ] {
            assert!(is_failure(failure), "{failure:?}");
        }
        for answer in [
            Errno::ENOENT,
            Errno::EEXIST,
            Errno::ENOTEMPTY,
            Errno::EACCES,
            Errno::EPERM,
            Errno::EINVAL,
            Errno::ENOTDIR,
            Errno::EISDIR,
            Errno::ENAMETOOLONG,
            Errno::NO_XATTR,
            Errno::ERANGE,
            Errno::EAGAIN,
        ] {
            assert!(!is_failure(answer), "{answer:?}");
        }
    }

    /// The names status shows are the names of fuser's constants.
    #[test]
    fn errno_names_match_fusers_constants() {
        for (errno, name) in [
            (Errno::EIO, "EIO"),
            (Errno::ENOSPC, "ENOSPC"),
            (Errno::EDQUOT, "EDQUOT"),
            (Errno::EROFS, "EROFS"),
            (Errno::ENOLCK, "ENOLCK"),
            (Errno::ETIMEDOUT, "ETIMEDOUT"),
            (Errno::ENOTCONN, "ENOTCONN"),
            (Errno::EFBIG, "EFBIG"),
            (Errno::ENOENT, "ENOENT"),
            (Errno::EACCES, "EACCES"),
            (Errno::EOPNOTSUPP, "EOPNOTSUPP"),
        ] {
            assert_eq!(sluice_env::errno::errno_name(errno.code()), Some(name));
        }
    }
}
