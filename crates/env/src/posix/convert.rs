//! Conversions between rustix's and the crate's types (stat, times, device
//! numbers, xattr flags) and the errors that name the operation and path,
//! for the posix backend.

use super::*;

/// Where an extended-attribute call acts.
pub(super) enum XattrTarget<'a> {
    /// The root, through its descriptor (`f*xattr`).
    Root(BorrowedFd<'a>),
    /// An entry, through its parent's descriptor (`l*xattr`).
    Entry {
        /// Keeps the descriptor in `proc_path` open.
        _dir: DirFd<'a>,
        proc_path: OsString,
    },
}

/// `/proc/self/fd/<fd>`: the kernel resolves it to the open file itself
/// (a jump, not a lookup by name).
pub(super) fn proc_fd_path(fd: BorrowedFd<'_>) -> String {
    format!("/proc/self/fd/{}", fd.as_raw_fd())
}

/// Whether `/proc/self/fd` is there.
pub(super) fn proc_mounted() -> bool {
    rfs::stat("/proc/self/fd").is_ok()
}

/// `value` as a `u64`, 0 if negative (`st_*` field types vary by
/// architecture; the kernel never reports these negative).
pub(super) fn to_u64<T: TryInto<u64>>(value: T) -> u64 {
    value.try_into().unwrap_or(0)
}

/// `value` as a `u32`, saturated.
pub(super) fn to_u32<T: TryInto<u32>>(value: T) -> u32 {
    value.try_into().unwrap_or(u32::MAX)
}

/// `secs` seconds and `nanos` nanoseconds from the epoch (either side); the
/// epoch itself if out of range.
pub(super) fn system_time<S: TryInto<i64>, N: TryInto<u32>>(secs: S, nanos: N) -> SystemTime {
    let (Ok(secs), Ok(nanos)) = (secs.try_into(), nanos.try_into()) else {
        return UNIX_EPOCH;
    };
    let whole = Duration::from_secs(secs.unsigned_abs());
    let time = if secs >= 0 {
        UNIX_EPOCH.checked_add(whole)
    } else {
        UNIX_EPOCH.checked_sub(whole)
    };
    time.and_then(|time| time.checked_add(Duration::from_nanos(u64::from(nanos))))
        .unwrap_or(UNIX_EPOCH)
}

/// `time` as a `utimensat` timestamp; `None` if it does not fit.
pub(super) fn timespec(time: TimeSet) -> Option<Timespec> {
    let (tv_sec, tv_nsec) = match time {
        TimeSet::Now => (0, rfs::UTIME_NOW),
        TimeSet::At(time) => match time.duration_since(UNIX_EPOCH) {
            Ok(after) => (
                i64::try_from(after.as_secs()).ok()?,
                i64::from(after.subsec_nanos()),
            ),
            Err(before) => {
                let before = before.duration();
                let secs = i64::try_from(before.as_secs()).ok()?;
                match before.subsec_nanos() {
                    0 => (-secs, 0),
                    nanos => (-secs - 1, i64::from(1_000_000_000 - nanos)),
                }
            }
        },
    };
    Some(Timespec { tv_sec, tv_nsec })
}

/// A `Stat` from the kernel's `struct stat`; `None` for a file type this
/// crate does not know (Linux has none).
/// [`stat_from`], or an InvalidData error naming `op` and `path` for a file
/// type the backend does not know.
pub(super) fn known_stat(
    stat: &rfs::Stat,
    label: &str,
    op: &str,
    path: &RelPath,
) -> io::Result<Stat> {
    stat_from(stat).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{label}: {op} {:?}: unknown file type (mode {:o})",
                path.as_str(),
                stat.st_mode
            ),
        )
    })
}

pub(super) fn stat_from(stat: &rfs::Stat) -> Option<Stat> {
    let rdev = to_u64(stat.st_rdev);
    Some(Stat {
        kind: stat_kind_of(FileType::from_raw_mode(stat.st_mode))?,
        len: to_u64(stat.st_size),
        blocks: to_u64(stat.st_blocks),
        mode: to_u32(stat.st_mode) & 0o7777,
        uid: stat.st_uid,
        gid: stat.st_gid,
        nlink: to_u32(stat.st_nlink),
        ino: to_u64(stat.st_ino),
        dev: to_u64(stat.st_dev),
        atime: system_time(stat.st_atime, stat.st_atime_nsec),
        mtime: system_time(stat.st_mtime, stat.st_mtime_nsec),
        ctime: system_time(stat.st_ctime, stat.st_ctime_nsec),
        blksize: to_u32(stat.st_blksize),
        rdev: encode_dev(rfs::major(rdev), rfs::minor(rdev)),
    })
}

/// The kernel's `new_encode_dev`: a device number in the 32 bits FUSE
/// carries (`fuse_attr.rdev`, `fuse_mknod_in.rdev`).
pub(super) fn encode_dev(major: u32, minor: u32) -> u32 {
    (minor & 0xff) | (major << 8) | ((minor & !0xff) << 12)
}

/// The kernel's `new_decode_dev`: the device number of a 32-bit encoded one.
pub(super) fn decode_dev(dev: u32) -> rfs::Dev {
    let major = (dev & 0xfff00) >> 8;
    let minor = (dev & 0xff) | ((dev >> 12) & 0xfff00);
    rfs::makedev(major, minor)
}

/// The kind of an entry of type `file_type`; `None` if unknown.
pub(super) fn stat_kind_of(file_type: FileType) -> Option<StatKind> {
    Some(match file_type {
        FileType::RegularFile => StatKind::File,
        FileType::Directory => StatKind::Dir,
        FileType::Symlink => StatKind::Symlink,
        FileType::Fifo => StatKind::Fifo,
        FileType::Socket => StatKind::Socket,
        FileType::CharacterDevice => StatKind::CharDevice,
        FileType::BlockDevice => StatKind::BlockDevice,
        FileType::Unknown => return None,
    })
}

/// Calls `read` with a buffer grown until the answer fits: a first try
/// with a small one, then the size `query` reports (the value may change
/// in between: ERANGE, retried a few times).
pub(super) fn read_growing(
    mut query: impl FnMut() -> Result<usize, Errno>,
    mut read: impl FnMut(&mut [u8]) -> Result<usize, Errno>,
) -> Result<Vec<u8>, Errno> {
    let mut buf = vec![0u8; 256];
    for _ in 0..8 {
        match read(&mut buf) {
            Ok(len) => {
                buf.truncate(len);
                return Ok(buf);
            }
            Err(Errno::RANGE) => {
                let size = query()?;
                if size == 0 {
                    // Emptied meanwhile (a zero-length buffer would be a
                    // size query): nothing to read.
                    return Ok(Vec::new());
                }
                buf.resize(size.max(buf.len()), 0);
            }
            Err(errno) => return Err(errno),
        }
    }
    Err(Errno::RANGE)
}

/// The raw `XATTR_*` flags of `flags`.
pub(super) fn raw_xattr_flags(flags: XattrFlags) -> rfs::XattrFlags {
    match flags {
        XattrFlags::Either => rfs::XattrFlags::empty(),
        XattrFlags::CreateOnly => rfs::XattrFlags::CREATE,
        XattrFlags::ReplaceOnly => rfs::XattrFlags::REPLACE,
    }
}

/// chmod of `name` in `dir` without following it (see the module doc):
/// EOPNOTSUPP for a link.
pub(super) fn chmod_nofollow(dir: &DirFd<'_>, name: &OsStr, mode: u32) -> Result<(), Errno> {
    let fd = rfs::openat(
        dir,
        name,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    if FileType::from_raw_mode(rfs::fstat(&fd)?.st_mode) == FileType::Symlink {
        return Err(Errno::OPNOTSUPP);
    }
    rfs::chmod(proc_fd_path(fd.as_fd()), Mode::from_raw_mode(mode & 0o7777))
}

/// Whether `name` in `dir` is a symbolic link (not following it).
pub(super) fn is_symlink(dir: &DirFd<'_>, name: &OsStr) -> bool {
    rfs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
        .is_ok_and(|stat| FileType::from_raw_mode(stat.st_mode) == FileType::Symlink)
}

/// `<label>: <what>: <errno>`, with a word on links for ELOOP.
pub(super) fn error(label: &str, errno: Errno, what: &str) -> io::Error {
    if errno == Errno::LOOP {
        errno_error(
            errno,
            format_args!("{label}: {what}: refusing to follow a symbolic link under the root"),
        )
    } else {
        errno_error(errno, format_args!("{label}: {what}"))
    }
}

pub(super) fn not_regular(label: &str, what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("{label}: {what}: not a regular file or directory"),
    )
}
