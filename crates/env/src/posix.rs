//! [`PosixBackend`]: a tier that is a real directory.
//!
//! The backend holds the root directory open and resolves every path from
//! that descriptor with the `*at()` system calls: the directories of a
//! path with one `openat2(RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH)` (or, where
//! that fails, one component at a time, each intermediate directory opened
//! with `O_NOFOLLOW | O_DIRECTORY`), and the last component opened,
//! stat'ed, removed or renamed without following it. So **no symbolic link under the root is ever followed**: a path
//! through a link fails with ELOOP (or ENOTDIR), whatever the link points at,
//! and there is no window between a check and a use for a link to appear in.
//! The root itself is resolved once, when the backend is created, and may
//! be a link (it is the administrator's configuration).
//!
//! For the engine only regular files and directories exist: `read_dir`
//! skips other entries (links, sockets, devices) and names that are not
//! UTF-8; `metadata` and `open` refuse them. Files are opened read-write
//! (the engine owns its tiers; read-only on a read-only file system) with mode 0644, directories created 0755,
//! both before the umask. Private files (`OpenOptions::private`) are
//! created 0600 and private directories (`create_private_dir`) 0700, each
//! set again through its own descriptor afterwards, so no umask can widen
//! or zero them; an existing private file with a wider mode is narrowed
//! when opened.
//!
//! For the FUSE mount the backend also serves the rest of POSIX metadata,
//! still without following any link, the last component included:
//! * `stat` is `fstatat(AT_SYMLINK_NOFOLLOW)` (a link reports itself) and
//!   `read_dir_all` lists every entry with its kind;
//! * `symlink` is `symlinkat` (the target is stored verbatim, never
//!   resolved by the backend), `read_link` is `readlinkat`; `mknod` is
//!   `mknodat` (FIFOs, sockets, devices; the process umask applies);
//! * `set_attr` changes the owner (`fchownat(AT_SYMLINK_NOFOLLOW)`), then
//!   the mode, then the times (`utimensat(AT_SYMLINK_NOFOLLOW)`, with
//!   `UTIME_NOW` for "now" and `UTIME_OMIT` for one left unchanged). The
//!   mode has no no-follow `*at()` call (`fchmodat` follows; rustix does not
//!   expose `fchmodat2`): the entry is opened `O_PATH | O_NOFOLLOW` (a link
//!   yields a descriptor of the link itself), a link is refused with
//!   EOPNOTSUPP (as `fchmodat2(AT_SYMLINK_NOFOLLOW)` does for links), and
//!   anything else is chmod'ed through `/proc/self/fd/<that descriptor>`,
//!   which the kernel resolves to the open inode, not by name: nothing can
//!   be swapped in between the check and the change. The root is changed
//!   through its own descriptor (`fchown`, `fchmod`, `futimens`).
//! * Extended attributes: `O_PATH` descriptors refuse `f*xattr()` (EBADF,
//!   checked on Linux 6.18) and opening the entry for real needs read
//!   permission and may have side effects on devices and FIFOs, so the
//!   calls are the `l*xattr()` ones (no final link followed) on the path
//!   `/proc/self/fd/<parent>/<name>`: the parent directory is the
//!   descriptor the safe walk opened (the kernel jumps to it, whatever
//!   names change meanwhile) and `<name>` one validated component (no `/`,
//!   `.` or `..`), not followed if it is a link. The root's attributes use
//!   `f*xattr()` on the root descriptor. A missing attribute is ENODATA.
//!
//! Mode changes and extended attributes below the root need `/proc`
//! mounted; without it they fail with EOPNOTSUPP saying so.
//!
//! `hard_link` is `linkat` without `AT_SYMLINK_FOLLOW`: a link named as
//! the existing file gets the second name itself, never its target.
//!
//! Positional I/O is `pread`/`pwrite` (`FileExt`), retried on EINTR, and a
//! read is short only at the end of file; `sync_data` is `fdatasync`,
//! `sync_dir` an `fsync` of the directory, `space` a `statvfs` of the root
//! (free = blocks available to unprivileged users).
//!
//! The root's identity is watched (`crate::health`): once its name leads
//! to another directory (its file system unmounted, the directory
//! replaced), every call is refused with ENODEV, and a sync succeeds only
//! while the name leads to the root it synced into. On a read-only file
//! system an existing file is opened read-only (its writes answer EROFS).
//!
//! Invariants: every descriptor opened under the root was reached without
//! following a link, and every call on a last component acts on that
//! component itself; errors name the root, the operation and the path, and
//! keep the OS error as their source (see [`crate::raw_os_error`]).

use std::borrow::Cow;
use std::ffi::{OsStr, OsString};
use std::fmt;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustix::fs::{self as rfs, AtFlags, FileType, Gid, Mode, OFlags, Timespec, Timestamps, Uid};
use rustix::io::Errno;

use crate::health::RootWatch;
use crate::{
    errno_error, name_from_os, name_to_os, owner_id, with_context, Backend, BackendFile, DirEntry,
    FileKind, Metadata, OpenOptions, RelPath, SetAttr, SpaceInfo, SpecialFile, Stat, StatKind,
    TierHealth, TimeSet, XattrFlags,
};

mod convert;
use convert::*;

/// Flags of every intermediate directory of a walk.
fn dir_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

/// A directory reached by a walk: the root (borrowed) or one opened under it.
enum DirFd<'a> {
    Root(BorrowedFd<'a>),
    Opened(OwnedFd),
}

impl AsFd for DirFd<'_> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            DirFd::Root(fd) => *fd,
            DirFd::Opened(fd) => fd.as_fd(),
        }
    }
}

/// A tier in a real directory.
pub struct PosixBackend {
    root: PathBuf,
    root_fd: OwnedFd,
    /// `posix <root>`, the start of every error message.
    label: Arc<str>,
    /// The root's identity and the tier's health (crate::health): every
    /// call is refused once the root's name leads elsewhere.
    watch: Arc<RootWatch>,
    /// Fine-grained change times, as probed at open
    /// ([`probe_change_times`]).
    change_times_exact: bool,
    /// A file system local to this host ([`local_file_system`]).
    page_cache_shared: bool,
}

/// Whether the file system of `root` is local to this host
/// ([`Backend::page_cache_shared`]), from `fstatfs`'s `f_type`: the magic
/// numbers of Linux's `magic.h` (and zfs's) for file systems whose
/// mounts on one host share one page cache. Anything else, or a failed
/// `fstatfs`, is not (network, cluster and FUSE file systems among it).
fn local_file_system(root: BorrowedFd<'_>) -> bool {
    const LOCAL: [i64; 9] = [
        0xEF53,      // ext2, ext3, ext4
        0x5846_5342, // xfs
        0x9123_683E, // btrfs
        0x0102_1994, // tmpfs
        0xF2F5_2010, // f2fs
        0xCA45_1A4E, // bcachefs
        0x2FC1_2FC1, // zfs
        0x794C_7630, // overlay
        0x8584_58F6, // ramfs
    ];
    // f_type's integer type differs between architectures.
    #[allow(clippy::unnecessary_cast)]
    rfs::fstatfs(root).is_ok_and(|st| LOCAL.contains(&(st.f_type as i64)))
}

/// Whether the file system at `root` gives a write a ctime after the one
/// a stat just saw ([`Backend::change_times_exact`]): three times over, an
/// unnamed `O_TMPFILE` file is stat'ed, written and stat'ed again at once.
/// Coarse timestamps (a clock tick of milliseconds) keep the ctime through
/// such a write, so one unchanged ctime means no. No `O_TMPFILE` (or a
/// read-only file system): no.
fn probe_change_times(root: BorrowedFd<'_>) -> bool {
    let flags = OFlags::TMPFILE | OFlags::RDWR | OFlags::CLOEXEC;
    let Ok(fd) = rfs::openat(root, ".", flags, Mode::from_raw_mode(0o600)) else {
        return false;
    };
    let file = File::from(fd);
    (0..3u64).all(|i| {
        let ctime = |f: &File| rfs::fstat(f).map(|st| (st.st_ctime, st.st_ctime_nsec));
        let Ok(before) = ctime(&file) else {
            return false;
        };
        file.write_at(b"x", i).is_ok() && ctime(&file).is_ok_and(|after| after != before)
    })
}

impl fmt::Debug for PosixBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PosixBackend")
            .field("root", &self.root)
            .finish_non_exhaustive()
    }
}

impl PosixBackend {
    /// A tier rooted at `root`, which must exist and be a directory.
    pub fn new(root: PathBuf) -> io::Result<PosixBackend> {
        let label: Arc<str> = format!("posix {}", root.display()).into();
        let root_fd = rfs::open(
            &root,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|errno| errno_error(errno, format_args!("{label}: open the root")))?;
        let watched = root_fd
            .try_clone()
            .map_err(|e| with_context(e, format_args!("{label}: open the root")))?;
        let watch = Arc::new(RootWatch::new(root.clone(), watched, &label)?);
        let change_times_exact = probe_change_times(root_fd.as_fd());
        let page_cache_shared = local_file_system(root_fd.as_fd());
        Ok(PosixBackend {
            root,
            root_fd,
            label,
            watch,
            change_times_exact,
            page_cache_shared,
        })
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn error(&self, errno: Errno, op: &str, path: &RelPath) -> io::Error {
        self.fail(errno, &format!("{op} {:?}", path.as_str()))
    }

    /// The error of a call (`what`) that failed with `errno`: the tier's
    /// refusal with its cause when it is lost (ENODEV from [`Self::dir`]),
    /// else the OS error, after which the watch looks again if the errno
    /// may mean the tier went away or turned read-only.
    fn fail(&self, errno: Errno, what: &str) -> io::Error {
        if errno == Errno::NODEV && self.watch.lost() {
            return self.watch.refusal(&what);
        }
        let e = error(&self.label, errno, what);
        self.watch.after_error(&e);
        e
    }

    /// The root's descriptor, for a call that starts there: ENODEV once
    /// the tier is lost (crate::health), so nothing reaches a directory
    /// its name no longer leads to.
    fn root_dir(&self) -> Result<BorrowedFd<'_>, Errno> {
        if self.watch.lost() {
            return Err(Errno::NODEV);
        }
        Ok(self.root_fd.as_fd())
    }

    /// Opens directory `path` (every component, itself included, without
    /// following links).
    ///
    /// One `openat2` with `RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH` does the
    /// whole walk in the kernel (Linux 5.6+): no link is followed, none
    /// of the path's components included, and nothing outside the root is
    /// reached. A path of depth d cost 2d system calls one component at a
    /// time (an open and a close each), and every FUSE request makes one
    /// or more walks (issue 33: mdtest through the mount). Any failure
    /// (no `openat2`, a rename racing `RESOLVE_BENEATH`'s check, a link,
    /// a missing directory) walks again one component at a time, which
    /// gives the precise errno (ELOOP naming a link, ENOTDIR, ENOENT).
    fn walk(&self, path: &RelPath) -> Result<DirFd<'_>, Errno> {
        let root = self.root_dir()?;
        if path.is_root() {
            return Ok(DirFd::Root(root));
        }
        match self.open_beneath(path, dir_flags(), Mode::empty()) {
            Ok(fd) => Ok(DirFd::Opened(fd)),
            Err(_) => self.walk_components(path),
        }
    }

    /// One `openat2` of `path` from the root with `RESOLVE_NO_SYMLINKS |
    /// RESOLVE_BENEATH`: no link followed on the way (the last component
    /// too, unless `flags` has `O_PATH | O_NOFOLLOW`), nothing outside the
    /// root. The one resolution [`Self::walk`], [`Self::lstat`] and `open`
    /// share; each falls back to a walk one component at a time for the
    /// precise errno.
    fn open_beneath(&self, path: &RelPath, flags: OFlags, mode: Mode) -> Result<OwnedFd, Errno> {
        let resolve = rfs::ResolveFlags::NO_SYMLINKS | rfs::ResolveFlags::BENEATH;
        rfs::openat2(
            self.root_dir()?,
            &*name_to_os(path.as_str()),
            flags,
            mode,
            resolve,
        )
    }

    /// [`Self::walk`] one component at a time, each with `openat` and
    /// `O_NOFOLLOW | O_DIRECTORY`.
    fn walk_components(&self, path: &RelPath) -> Result<DirFd<'_>, Errno> {
        let mut dir = DirFd::Root(self.root_dir()?);
        if path.is_root() {
            return Ok(dir);
        }
        for name in path.as_str().split('/') {
            let name = name_to_os(name);
            let next = match rfs::openat(&dir, &*name, dir_flags(), Mode::empty()) {
                Ok(next) => next,
                // Linux reports a link opened with O_DIRECTORY | O_NOFOLLOW
                // as ENOTDIR; say ELOOP so the message names the link.
                Err(Errno::NOTDIR) if is_symlink(&dir, &name) => return Err(Errno::LOOP),
                Err(errno) => return Err(errno),
            };
            dir = DirFd::Opened(next);
        }
        Ok(dir)
    }

    /// Opens the parent of a non-root `path`; `root_errno` for the root.
    fn walk_parent<'p>(
        &self,
        path: &'p RelPath,
        root_errno: Errno,
    ) -> Result<(DirFd<'_>, Cow<'p, OsStr>), Errno> {
        let parent = path.parent().ok_or(root_errno)?;
        Ok((self.walk(&parent)?, name_to_os(path.file_name())))
    }

    /// `lstat` of `path`: the root's descriptor, or the last component in
    /// its parent without following it.
    ///
    /// First one `openat2` of the path itself, as [`Self::walk`] opens a
    /// directory, with `O_PATH | O_NOFOLLOW` (a trailing link is opened,
    /// not followed) and an `fstat` of it: a name that does not exist (a
    /// create's lookup) costs that one call instead of the parent's walk,
    /// a `statat` and a `close`. Any other failure stats in the walked
    /// parent, for the precise errno.
    fn lstat(&self, path: &RelPath) -> Result<rfs::Stat, Errno> {
        match path.parent() {
            None => rfs::fstat(self.root_dir()?),
            Some(parent) => {
                let flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
                match self.open_beneath(path, flags, Mode::empty()) {
                    Ok(fd) => return rfs::fstat(&fd),
                    Err(Errno::NOENT) => return Err(Errno::NOENT),
                    Err(_) => {}
                }
                let dir = self.walk(&parent)?;
                rfs::statat(
                    &dir,
                    &*name_to_os(path.file_name()),
                    AtFlags::SYMLINK_NOFOLLOW,
                )
            }
        }
    }

    /// Entries of directory `path` with their types (links not followed),
    /// unsorted, without `.` and `..`; names as [`name_from_os`] holds them.
    fn entries(&self, path: &RelPath, op: &str) -> io::Result<Vec<(String, FileType)>> {
        let fail = |errno| self.error(errno, op, path);
        let dir = self.walk(path).map_err(fail)?;
        let mut entries = Vec::new();
        for entry in rfs::Dir::read_from(&dir).map_err(fail)? {
            let entry = entry.map_err(fail)?;
            let raw = OsStr::from_bytes(entry.file_name().to_bytes());
            if raw == "." || raw == ".." {
                continue;
            }
            let file_type = match entry.file_type() {
                // Some file systems do not report types in directory
                // entries: ask the entry itself (without following it).
                FileType::Unknown => {
                    match rfs::statat(&dir, raw, AtFlags::SYMLINK_NOFOLLOW) {
                        Ok(stat) => FileType::from_raw_mode(stat.st_mode),
                        // Removed meanwhile: not listed.
                        Err(Errno::NOENT) => continue,
                        Err(errno) => return Err(fail(errno)),
                    }
                }
                known => known,
            };
            entries.push((name_from_os(raw).into_owned(), file_type));
        }
        Ok(entries)
    }

    /// Where an extended-attribute call on `path` acts (see the module
    /// doc): the root's descriptor, or `/proc/self/fd/<parent>/<name>`
    /// with the parent reached by the safe walk (and kept open as long as
    /// the target lives).
    fn xattr_target(&self, path: &RelPath) -> Result<XattrTarget<'_>, Errno> {
        match path.parent() {
            None => Ok(XattrTarget::Root(self.root_dir()?)),
            Some(parent) => {
                let dir = self.walk(&parent)?;
                let mut proc_path = OsString::from(format!("{}/", proc_fd_path(dir.as_fd())));
                proc_path.push(name_to_os(path.file_name()));
                Ok(XattrTarget::Entry {
                    _dir: dir,
                    proc_path,
                })
            }
        }
    }

    /// The error of an operation that went through `/proc/self/fd`: ENOENT
    /// there while `/proc` is not mounted is not about the path, say so.
    fn proc_error(&self, errno: Errno, what: &str) -> io::Error {
        if errno == Errno::NOENT && !proc_mounted() {
            return errno_error(
                Errno::OPNOTSUPP,
                format_args!(
                    "{}: {what}: needs /proc mounted (to act on an entry without following links)",
                    self.label
                ),
            );
        }
        self.fail(errno, what)
    }

    fn stat_kind(stat: &rfs::Stat) -> Option<FileKind> {
        match FileType::from_raw_mode(stat.st_mode) {
            FileType::RegularFile => Some(FileKind::File),
            FileType::Directory => Some(FileKind::Dir),
            _ => None,
        }
    }
}

/// The flags and mode [`Backend::open`] opens a file with. The mode is
/// empty unless the open may create: `openat2` refuses a mode without
/// `O_CREAT` (EINVAL), and every open of an existing file then took the
/// walked parent's three calls instead of one.
fn open_how(options: OpenOptions) -> (OFlags, Mode) {
    let mut flags = OFlags::RDWR | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    if options.create_new {
        flags |= OFlags::CREATE | OFlags::EXCL;
    } else if options.create {
        flags |= OFlags::CREATE;
    }
    if options.truncate {
        flags |= OFlags::TRUNC;
    }
    let mode = match (flags.contains(OFlags::CREATE), options.private) {
        (false, _) => Mode::empty(),
        (true, true) => Mode::from_raw_mode(0o600),
        (true, false) => Mode::from_raw_mode(0o644),
    };
    (flags, mode)
}

impl Backend for PosixBackend {
    fn describe(&self) -> String {
        self.label.to_string()
    }

    fn open(&self, path: &RelPath, options: OpenOptions) -> io::Result<Arc<dyn BackendFile>> {
        let fail = |errno| self.error(errno, "open", path);
        let (flags, mode) = open_how(options);
        let mut read_only = false;
        // One openat2 of the whole path, as `walk` opens a directory (no
        // link followed on the way, the file itself included; nothing
        // outside the root): an open or a create in two calls with the
        // fstat below, where the walked parent took four (issue 33:
        // mdtest's create and read phases). Any failure opens again in
        // the walked parent, for the precise errno and the read-only
        // fallback.
        let fd = match self.open_beneath(path, flags, mode) {
            Ok(fd) => fd,
            Err(_) => {
                let (dir, name) = self.walk_parent(path, Errno::ISDIR).map_err(fail)?;
                match rfs::openat(&dir, &*name, flags, mode) {
                    // A read-only file system (a read-only export, a tier
                    // turned read-only): the file is still there to read.
                    // Opened read-only; its writes answer EROFS as the open
                    // would have.
                    Err(Errno::ROFS)
                        if !options.create && !options.create_new && !options.truncate =>
                    {
                        read_only = true;
                        let flags = (flags - OFlags::RDWR) | OFlags::RDONLY;
                        rfs::openat(&dir, &*name, flags, Mode::empty()).map_err(fail)?
                    }
                    opened => opened.map_err(fail)?,
                }
            }
        };
        let stat = rfs::fstat(&fd).map_err(fail)?;
        if PosixBackend::stat_kind(&stat) != Some(FileKind::File) {
            return Err(not_regular(
                &self.label,
                &format!("open {:?}", path.as_str()),
            ));
        }
        if options.private && stat.st_mode & 0o7777 != 0o600 {
            rfs::fchmod(&fd, Mode::from_raw_mode(0o600)).map_err(fail)?;
        }
        Ok(Arc::new(PosixFile {
            file: File::from(fd),
            path: path.clone(),
            label: Arc::clone(&self.label),
            watch: Arc::clone(&self.watch),
            read_only,
        }))
    }

    fn metadata(&self, path: &RelPath) -> io::Result<Metadata> {
        let fail = |errno| self.error(errno, "stat", path);
        let stat = self.lstat(path).map_err(fail)?;
        match PosixBackend::stat_kind(&stat) {
            Some(FileKind::File) => Ok(Metadata {
                kind: FileKind::File,
                len: u64::try_from(stat.st_size).unwrap_or(0),
            }),
            Some(FileKind::Dir) => Ok(Metadata {
                kind: FileKind::Dir,
                len: 0,
            }),
            None if FileType::from_raw_mode(stat.st_mode) == FileType::Symlink => {
                Err(fail(Errno::LOOP))
            }
            None => Err(not_regular(
                &self.label,
                &format!("stat {:?}", path.as_str()),
            )),
        }
    }

    fn remove_file(&self, path: &RelPath) -> io::Result<()> {
        let fail = |errno| self.error(errno, "remove", path);
        let (dir, name) = self.walk_parent(path, Errno::ISDIR).map_err(fail)?;
        rfs::unlinkat(&dir, name, AtFlags::empty()).map_err(fail)
    }

    fn rename(&self, from: &RelPath, to: &RelPath) -> io::Result<()> {
        let what = format!("rename {:?} to {:?}", from.as_str(), to.as_str());
        let fail = |errno| self.fail(errno, &what);
        let (from_dir, from_name) = self.walk_parent(from, Errno::BUSY).map_err(fail)?;
        let (to_dir, to_name) = self.walk_parent(to, Errno::BUSY).map_err(fail)?;
        rfs::renameat(&from_dir, from_name, &to_dir, to_name).map_err(fail)
    }

    fn create_dir(&self, path: &RelPath) -> io::Result<()> {
        let fail = |errno| self.error(errno, "mkdir", path);
        let (dir, name) = self.walk_parent(path, Errno::EXIST).map_err(fail)?;
        rfs::mkdirat(&dir, name, Mode::from_raw_mode(0o755)).map_err(fail)
    }

    fn create_private_dir(&self, path: &RelPath) -> io::Result<()> {
        let fail = |errno| self.error(errno, "mkdir", path);
        let (dir, name) = self.walk_parent(path, Errno::EXIST).map_err(fail)?;
        rfs::mkdirat(&dir, &*name, Mode::from_raw_mode(0o700)).map_err(fail)?;
        // The umask can only have narrowed it; make it exactly 0700.
        let created = rfs::openat(
            &dir,
            &*name,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(fail)?;
        rfs::fchmod(&created, Mode::from_raw_mode(0o700)).map_err(fail)
    }

    fn remove_dir(&self, path: &RelPath) -> io::Result<()> {
        let fail = |errno| self.error(errno, "rmdir", path);
        let (dir, name) = self.walk_parent(path, Errno::BUSY).map_err(fail)?;
        rfs::unlinkat(&dir, name, AtFlags::REMOVEDIR).map_err(fail)
    }

    fn read_dir(&self, path: &RelPath) -> io::Result<Vec<DirEntry>> {
        let mut entries: Vec<DirEntry> = self
            .entries(path, "read_dir")?
            .into_iter()
            .filter_map(|(name, file_type)| {
                let kind = match file_type {
                    FileType::RegularFile => FileKind::File,
                    FileType::Directory => FileKind::Dir,
                    _ => return None,
                };
                Some(DirEntry { name, kind })
            })
            .collect();
        entries.sort();
        Ok(entries)
    }

    fn sync_dir(&self, path: &RelPath) -> io::Result<()> {
        let fail = |errno| self.error(errno, "sync_dir", path);
        let fd = match self.walk(path).map_err(fail)? {
            DirFd::Root(fd) => fd.try_clone_to_owned().map_err(|e| {
                with_context(
                    e,
                    format_args!("{}: sync_dir {:?}", self.label, path.as_str()),
                )
            })?,
            DirFd::Opened(fd) => fd,
        };
        rfs::fsync(&fd).map_err(fail)?;
        // Synced where the tier's name leads, or not at all.
        self.watch
            .verify(&format_args!("sync_dir {:?}", path.as_str()))
    }

    fn space(&self) -> io::Result<SpaceInfo> {
        let stat = self
            .root_dir()
            .and_then(rfs::fstatvfs)
            .map_err(|errno| self.fail(errno, "statvfs"))?;
        Ok(SpaceInfo {
            total_bytes: stat.f_blocks.saturating_mul(stat.f_frsize),
            free_bytes: stat.f_bavail.saturating_mul(stat.f_frsize),
        })
    }

    fn check_root(&self) -> io::Result<()> {
        self.watch.probe()
    }

    fn health(&self) -> TierHealth {
        self.watch.health()
    }

    fn change_times_exact(&self) -> bool {
        self.change_times_exact
    }

    fn page_cache_shared(&self) -> bool {
        self.page_cache_shared
    }

    fn stat(&self, path: &RelPath) -> io::Result<Stat> {
        let stat = self
            .lstat(path)
            .map_err(|errno| self.error(errno, "stat", path))?;
        known_stat(&stat, &self.label, "stat", path)
    }

    fn set_attr(&self, path: &RelPath, attr: &SetAttr) -> io::Result<()> {
        let what = format!("set_attr {:?}", path.as_str());
        let fail = |errno| self.fail(errno, &what);
        let invalid = |e: io::Error| with_context(e, format_args!("{}: {what}", self.label));
        let uid = owner_id(attr.uid, "uid").map_err(invalid)?;
        let gid = owner_id(attr.gid, "gid").map_err(invalid)?;
        let (uid, gid) = (uid.map(Uid::from_raw), gid.map(Gid::from_raw));
        let time = |time: Option<TimeSet>| match time {
            None => Ok(Timespec {
                tv_sec: 0,
                tv_nsec: rfs::UTIME_OMIT,
            }),
            Some(time) => timespec(time).ok_or_else(|| {
                invalid(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("time {time:?} out of range"),
                ))
            }),
        };
        let times = if attr.atime.is_some() || attr.mtime.is_some() {
            Some(Timestamps {
                last_access: time(attr.atime)?,
                last_modification: time(attr.mtime)?,
            })
        } else {
            None
        };
        // Nothing to change is `chown(path, -1, -1)`, which changes the
        // ctime only: ext4 does, so the chown with neither id does here.
        let chown = uid.is_some() || gid.is_some() || *attr == SetAttr::default();
        match path.parent() {
            None => {
                let root = self.root_dir().map_err(fail)?;
                if chown {
                    rfs::fchown(root, uid, gid).map_err(fail)?;
                }
                if let Some(mode) = attr.mode {
                    rfs::fchmod(root, Mode::from_raw_mode(mode & 0o7777)).map_err(fail)?;
                }
                if let Some(times) = &times {
                    rfs::futimens(root, times).map_err(fail)?;
                }
            }
            Some(parent) => {
                let dir = self.walk(&parent).map_err(fail)?;
                let name = &*name_to_os(path.file_name());
                if chown {
                    rfs::chownat(&dir, name, uid, gid, AtFlags::SYMLINK_NOFOLLOW).map_err(fail)?;
                }
                if let Some(mode) = attr.mode {
                    chmod_nofollow(&dir, name, mode).map_err(|errno| {
                        if errno == Errno::OPNOTSUPP {
                            errno_error(
                                errno,
                                format_args!(
                                    "{}: {what}: a symbolic link has no mode of its own \
                                     (refusing to change its target's)",
                                    self.label
                                ),
                            )
                        } else {
                            self.proc_error(errno, &what)
                        }
                    })?;
                }
                if let Some(times) = &times {
                    rfs::utimensat(&dir, name, times, AtFlags::SYMLINK_NOFOLLOW).map_err(fail)?;
                }
                if !chown && attr.mode.is_none() && times.is_none() {
                    // Nothing to change; the path must still exist.
                    rfs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW).map_err(fail)?;
                }
            }
        }
        Ok(())
    }

    fn symlink(&self, target: &str, link: &RelPath) -> io::Result<()> {
        let what = format!("symlink {:?} -> {target:?}", link.as_str());
        let fail = |errno| self.fail(errno, &what);
        let (dir, name) = self.walk_parent(link, Errno::EXIST).map_err(fail)?;
        rfs::symlinkat(&*name_to_os(target), &dir, name).map_err(fail)
    }

    fn hard_link(&self, existing: &RelPath, new: &RelPath) -> io::Result<()> {
        let what = format!("link {:?} to {:?}", existing.as_str(), new.as_str());
        let fail = |errno| self.fail(errno, &what);
        // The root is a directory: EPERM as for any directory.
        let (from_dir, from_name) = self.walk_parent(existing, Errno::PERM).map_err(fail)?;
        let (to_dir, to_name) = self.walk_parent(new, Errno::EXIST).map_err(fail)?;
        rfs::linkat(&from_dir, from_name, &to_dir, to_name, AtFlags::empty()).map_err(fail)
    }

    fn read_link(&self, path: &RelPath) -> io::Result<String> {
        let fail = |errno| self.error(errno, "read_link", path);
        let (dir, name) = self.walk_parent(path, Errno::INVAL).map_err(fail)?;
        let target = rfs::readlinkat(&dir, name, Vec::new()).map_err(fail)?;
        // A target that is not UTF-8 is held escaped, as names are.
        Ok(name_from_os(OsStr::from_bytes(target.as_bytes())).into_owned())
    }

    fn mknod(&self, path: &RelPath, node: SpecialFile, mode: u32) -> io::Result<()> {
        let what = format!("mknod {:?} ({node:?})", path.as_str());
        let fail = |errno| self.fail(errno, &what);
        let (dir, name) = self.walk_parent(path, Errno::EXIST).map_err(fail)?;
        let (file_type, dev) = match node {
            SpecialFile::Fifo => (FileType::Fifo, 0),
            SpecialFile::Socket => (FileType::Socket, 0),
            SpecialFile::CharDevice { rdev } => (FileType::CharacterDevice, decode_dev(rdev)),
            SpecialFile::BlockDevice { rdev } => (FileType::BlockDevice, decode_dev(rdev)),
        };
        rfs::mknodat(
            &dir,
            name,
            file_type,
            Mode::from_raw_mode(mode & 0o7777),
            dev,
        )
        .map_err(fail)
    }

    fn read_dir_all(&self, path: &RelPath) -> io::Result<Vec<(String, StatKind)>> {
        let mut entries: Vec<(String, StatKind)> = self
            .entries(path, "read_dir")?
            .into_iter()
            // A type this crate does not know (Linux has none) is not
            // listed, as names that are not UTF-8 are not.
            .filter_map(|(name, file_type)| Some((name, stat_kind_of(file_type)?)))
            .collect();
        entries.sort();
        Ok(entries)
    }

    fn get_xattr(&self, path: &RelPath, name: &str) -> io::Result<Vec<u8>> {
        let what = format!("get_xattr {name:?} of {:?}", path.as_str());
        let fail = |errno| self.proc_error(errno, &what);
        match self
            .xattr_target(path)
            .map_err(|errno| self.fail(errno, &what))?
        {
            XattrTarget::Root(fd) => read_growing(
                || rfs::fgetxattr_query(fd, name),
                |buf| rfs::fgetxattr(fd, name, buf),
            ),
            XattrTarget::Entry { proc_path, .. } => read_growing(
                || rfs::lgetxattr_query(&proc_path, name),
                |buf| rfs::lgetxattr(&proc_path, name, buf),
            ),
        }
        .map_err(fail)
    }

    fn set_xattr(
        &self,
        path: &RelPath,
        name: &str,
        value: &[u8],
        flags: XattrFlags,
    ) -> io::Result<()> {
        let what = format!("set_xattr {name:?} of {:?}", path.as_str());
        let fail = |errno| self.proc_error(errno, &what);
        let flags = raw_xattr_flags(flags);
        match self
            .xattr_target(path)
            .map_err(|errno| self.fail(errno, &what))?
        {
            XattrTarget::Root(fd) => rfs::fsetxattr(fd, name, value, flags),
            XattrTarget::Entry { proc_path, .. } => rfs::lsetxattr(&proc_path, name, value, flags),
        }
        .map_err(fail)
    }

    fn list_xattr(&self, path: &RelPath) -> io::Result<Vec<String>> {
        let what = format!("list_xattr {:?}", path.as_str());
        let fail = |errno| self.proc_error(errno, &what);
        let list = match self
            .xattr_target(path)
            .map_err(|errno| self.fail(errno, &what))?
        {
            XattrTarget::Root(fd) => {
                read_growing(|| rfs::flistxattr_query(fd), |buf| rfs::flistxattr(fd, buf))
            }
            XattrTarget::Entry { proc_path, .. } => read_growing(
                || rfs::llistxattr_query(&proc_path),
                |buf| rfs::llistxattr(&proc_path, buf),
            ),
        }
        .map_err(fail)?;
        // NUL-terminated names; ones that are not UTF-8 are skipped
        // (sluice's xattr names are strings).
        Ok(list
            .split(|&byte| byte == 0)
            .filter(|name| !name.is_empty())
            .filter_map(|name| std::str::from_utf8(name).ok())
            .map(str::to_string)
            .collect())
    }

    fn remove_xattr(&self, path: &RelPath, name: &str) -> io::Result<()> {
        let what = format!("remove_xattr {name:?} of {:?}", path.as_str());
        let fail = |errno| self.proc_error(errno, &what);
        match self
            .xattr_target(path)
            .map_err(|errno| self.fail(errno, &what))?
        {
            XattrTarget::Root(fd) => rfs::fremovexattr(fd, name),
            XattrTarget::Entry { proc_path, .. } => rfs::lremovexattr(&proc_path, name),
        }
        .map_err(fail)
    }
}

/// An open regular file of a [`PosixBackend`].
#[derive(Debug)]
struct PosixFile {
    file: File,
    path: RelPath,
    label: Arc<str>,
    /// Its backend's root watch: a lost tier refuses the file's calls too,
    /// and a sync succeeds only where the tier's name leads.
    watch: Arc<RootWatch>,
    /// Opened read-only because its file system was (`open`): writes
    /// answer EROFS.
    read_only: bool,
}

impl PosixFile {
    fn error(&self, cause: io::Error, op: &str) -> io::Error {
        let e = with_context(
            cause,
            format_args!("{}: {op} {:?}", self.label, self.path.as_str()),
        );
        self.watch.after_error(&e);
        e
    }

    /// Before a call (`op`): refused once the tier is lost.
    fn admit(&self, op: &str) -> io::Result<()> {
        self.watch
            .admit(&format_args!("{op} {:?}", self.path.as_str()))
    }

    /// Before a change (`op`): [`Self::admit`], and EROFS for a file
    /// opened read-only.
    fn admit_change(&self, op: &str) -> io::Result<()> {
        self.admit(op)?;
        if self.read_only {
            return Err(errno_error(
                Errno::ROFS,
                format_args!(
                    "{}: {op} {:?}: opened read-only, its file system was read-only then",
                    self.label,
                    self.path.as_str()
                ),
            ));
        }
        Ok(())
    }
}

impl BackendFile for PosixFile {
    fn stat(&self) -> io::Result<Stat> {
        self.admit("fstat")?;
        let stat = rfs::fstat(&self.file).map_err(|errno| self.error(errno.into(), "fstat"))?;
        known_stat(&stat, &self.label, "fstat", &self.path)
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.admit("read")?;
        let mut done = 0;
        while done < buf.len() {
            let Some(at) = offset.checked_add(done as u64) else {
                break;
            };
            match self.file.read_at(&mut buf[done..], at) {
                Ok(0) => break,
                Ok(count) => done += count,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.error(e, "read")),
            }
        }
        Ok(done)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.admit_change("write")?;
        self.file
            .write_all_at(buf, offset)
            .map_err(|e| self.error(e, "write"))
    }

    fn write_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> io::Result<()> {
        self.admit_change("write")?;
        let mut slices: Vec<io::IoSlice<'_>> = bufs
            .iter()
            .filter(|b| !b.is_empty())
            .map(|b| io::IoSlice::new(b))
            .collect();
        let mut remaining: &mut [io::IoSlice<'_>] = &mut slices;
        let mut at = offset;
        while !remaining.is_empty() {
            match rustix::io::pwritev(&self.file, remaining, at) {
                Ok(0) => {
                    return Err(self.error(io::ErrorKind::WriteZero.into(), "write"));
                }
                Ok(n) => {
                    at += n as u64;
                    io::IoSlice::advance_slices(&mut remaining, n);
                }
                Err(Errno::INTR) => {}
                Err(e) => return Err(self.error(e.into(), "write")),
            }
        }
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        self.admit("sync_data")?;
        self.file
            .sync_data()
            .map_err(|e| self.error(e, "sync_data"))?;
        // Durable where the tier's name leads, or the sync did not do what
        // its caller relies on (crate::health).
        self.watch
            .verify(&format_args!("sync_data {:?}", self.path.as_str()))
    }

    fn len(&self) -> io::Result<u64> {
        self.admit("len")?;
        Ok(self
            .file
            .metadata()
            .map_err(|e| self.error(e, "len"))?
            .len())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.admit_change("set_len")?;
        self.file.set_len(len).map_err(|e| self.error(e, "set_len"))
    }

    fn allocate(&self, mode: crate::Allocate, offset: u64, len: u64) -> io::Result<()> {
        self.admit_change("fallocate")?;
        let flags = rustix::fs::FallocateFlags::from_bits_retain(mode.flags() as u32);
        rustix::fs::fallocate(&self.file, flags, offset, len)
            .map_err(|e| self.error(io::Error::from(e), "fallocate"))
    }

    fn set_xattr(&self, name: &str, value: &[u8], flags: XattrFlags) -> io::Result<()> {
        self.admit_change("fsetxattr")?;
        rfs::fsetxattr(&self.file, name, value, raw_xattr_flags(flags))
            .map_err(|e| self.error(io::Error::from(e), &format!("fsetxattr {name:?}")))
    }

    fn remove_xattr(&self, name: &str) -> io::Result<()> {
        self.admit_change("fremovexattr")?;
        rfs::fremovexattr(&self.file, name)
            .map_err(|e| self.error(io::Error::from(e), &format!("fremovexattr {name:?}")))
    }

    fn as_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        Some(std::os::fd::AsFd::as_fd(&self.file))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `/dev/shm` is tmpfs, local; `/proc` and `/sys` are not file systems
    /// of files, and not on the list: the probe answers from the magic
    /// number, not the path.
    #[test]
    fn only_local_file_systems_claim_a_shared_page_cache() {
        let root = |p: &str| rfs::open(p, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty());
        if let Ok(shm) = root("/dev/shm") {
            assert!(local_file_system(shm.as_fd()), "tmpfs");
        }
        for not_local in ["/proc", "/sys"] {
            let fd = root(not_local).unwrap();
            assert!(!local_file_system(fd.as_fd()), "{not_local}");
        }
    }

    /// The one-call open takes every kind of open, not only creates: with
    /// a mode and no `O_CREAT`, `openat2` answered EINVAL to each open of
    /// an existing file, which then went through the walked parent.
    #[test]
    fn the_one_call_open_takes_opens_and_creates() {
        let dir = tempfile::tempdir().unwrap();
        let backend = PosixBackend::new(dir.path().to_path_buf()).unwrap();
        std::fs::create_dir(dir.path().join("d")).unwrap();
        let path = RelPath::new("d/f").unwrap();
        let kinds = [
            OpenOptions::CREATE,
            OpenOptions::default(),
            OpenOptions::CREATE.private(),
            OpenOptions {
                truncate: true,
                ..OpenOptions::default()
            },
        ];
        for options in kinds {
            let (flags, mode) = open_how(options);
            if let Err(errno) = backend.open_beneath(&path, flags, mode) {
                panic!("{options:?}: {errno}");
            }
        }
    }

    #[test]
    fn times_convert_both_ways_on_both_sides_of_the_epoch() {
        let cases = [
            (0, 0),
            (1, 5),
            (1_234_567_890, 987_654_321),
            (-1, 0),
            (-2, 500_000_000),
            (-1_000_000, 1),
        ];
        for (secs, nanos) in cases {
            let time = system_time(secs, nanos);
            let spec = timespec(TimeSet::At(time)).unwrap();
            assert_eq!((spec.tv_sec, spec.tv_nsec), (secs, i64::from(nanos)));
        }
        assert_eq!(
            system_time(-2, 500_000_000),
            UNIX_EPOCH - Duration::from_millis(1500)
        );
        assert_eq!(
            system_time(i64::MAX, 2_000_000_000u32),
            UNIX_EPOCH,
            "out of range"
        );
        let now = timespec(TimeSet::Now).unwrap();
        assert_eq!(now.tv_nsec, rfs::UTIME_NOW);
    }

    #[test]
    fn reads_grow_their_buffer_and_retry_when_the_value_changes() {
        // A value of 1000 bytes that grows to 3000 after the size query.
        let size = std::cell::Cell::new(1000);
        let calls = std::cell::Cell::new(0);
        let value = read_growing(
            || Ok(size.replace(3000)),
            |buf| {
                calls.set(calls.get() + 1);
                if buf.len() < size.get() {
                    return Err(Errno::RANGE);
                }
                buf[..size.get()].fill(7);
                Ok(size.get())
            },
        )
        .unwrap();
        assert_eq!(value, vec![7; 3000]);
        assert_eq!(calls.get(), 3);
        // Emptied meanwhile.
        assert_eq!(
            read_growing(|| Ok(0), |_| Err(Errno::RANGE)).unwrap(),
            Vec::<u8>::new()
        );
        // Never fits: ERANGE after a few tries, not forever.
        assert_eq!(
            read_growing(|| Ok(1), |_| Err(Errno::RANGE)).unwrap_err(),
            Errno::RANGE
        );
        assert_eq!(
            read_growing(|| Ok(1), |_| Err(Errno::NODATA)).unwrap_err(),
            Errno::NODATA
        );
    }

    #[test]
    fn device_numbers_use_the_kernel_encoding() {
        let mut stat = rfs::stat(".").unwrap();
        stat.st_mode = 0o020_644; // a character device
        stat.st_rdev = rfs::makedev(0x123, 0x45678);
        let converted = stat_from(&stat).unwrap();
        assert_eq!(converted.kind, StatKind::CharDevice);
        assert_eq!(converted.mode, 0o644);
        assert_eq!(converted.rdev, 0x78 | (0x123 << 8) | (0x45600 << 12));
        assert_eq!(decode_dev(converted.rdev), stat.st_rdev, "and back");
        assert_eq!(decode_dev(encode_dev(1, 3)), rfs::makedev(1, 3));
        stat.st_mode = 0o170_644; // no such type
        assert_eq!(stat_from(&stat), None);
    }
}
