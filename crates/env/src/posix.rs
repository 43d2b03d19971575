//! [`PosixBackend`]: a tier that is a real directory.
//!
//! The backend holds the root directory open and resolves every path from
//! that descriptor one component at a time with the `*at()` system calls,
//! each intermediate directory opened with `O_NOFOLLOW | O_DIRECTORY` and
//! the last component opened, stat'ed, removed or renamed without following
//! it. So **no symbolic link under the root is ever followed**: a path
//! through a link fails with ELOOP (or ENOTDIR), whatever the link points at,
//! and there is no window between a check and a use for a link to appear in.
//! The root itself is resolved once, when the backend is created, and may
//! be a link (it is the administrator's configuration).
//!
//! Only regular files and directories exist for the engine: `read_dir`
//! skips other entries (links, sockets, devices) and names that are not
//! UTF-8; `metadata` and `open` refuse them. Files are opened read-write
//! (the engine owns its tiers) with mode 0644, directories created 0755,
//! both before the umask.
//!
//! Positional I/O is `pread`/`pwrite` (`FileExt`), retried on EINTR, and a
//! read is short only at the end of file; `sync_data` is `fdatasync`,
//! `sync_dir` an `fsync` of the directory, `space` a `statvfs` of the root
//! (free = blocks available to unprivileged users).
//!
//! Invariants: every descriptor opened under the root was reached without
//! following a link; errors name the root, the operation and the path, and
//! keep the OS error as their source (see [`crate::raw_os_error`]).

use std::fmt;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

use crate::{
    errno_error, with_context, Backend, BackendFile, DirEntry, FileKind, Metadata, OpenOptions,
    RelPath, SpaceInfo,
};

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
        Ok(PosixBackend {
            root,
            root_fd,
            label,
        })
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn error(&self, errno: Errno, op: &str, path: &RelPath) -> io::Error {
        error(&self.label, errno, &format!("{op} {:?}", path.as_str()))
    }

    /// Opens directory `path` (every component, itself included, without
    /// following links).
    fn walk(&self, path: &RelPath) -> Result<DirFd<'_>, Errno> {
        let mut dir = DirFd::Root(self.root_fd.as_fd());
        if path.is_root() {
            return Ok(dir);
        }
        for name in path.as_str().split('/') {
            let next = match rfs::openat(&dir, name, dir_flags(), Mode::empty()) {
                Ok(next) => next,
                // Linux reports a link opened with O_DIRECTORY | O_NOFOLLOW
                // as ENOTDIR; say ELOOP so the message names the link.
                Err(Errno::NOTDIR) if is_symlink(&dir, name) => return Err(Errno::LOOP),
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
    ) -> Result<(DirFd<'_>, &'p str), Errno> {
        let parent = path.parent().ok_or(root_errno)?;
        Ok((self.walk(&parent)?, path.file_name()))
    }

    fn stat_kind(stat: &rfs::Stat) -> Option<FileKind> {
        match FileType::from_raw_mode(stat.st_mode) {
            FileType::RegularFile => Some(FileKind::File),
            FileType::Directory => Some(FileKind::Dir),
            _ => None,
        }
    }
}

/// Whether `name` in `dir` is a symbolic link (not following it).
fn is_symlink(dir: &DirFd<'_>, name: &str) -> bool {
    rfs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
        .is_ok_and(|stat| FileType::from_raw_mode(stat.st_mode) == FileType::Symlink)
}

/// `<label>: <what>: <errno>`, with a word on links for ELOOP.
fn error(label: &str, errno: Errno, what: &str) -> io::Error {
    if errno == Errno::LOOP {
        errno_error(
            errno,
            format_args!("{label}: {what}: refusing to follow a symbolic link under the root"),
        )
    } else {
        errno_error(errno, format_args!("{label}: {what}"))
    }
}

fn not_regular(label: &str, what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("{label}: {what}: not a regular file or directory"),
    )
}

impl Backend for PosixBackend {
    fn describe(&self) -> String {
        self.label.to_string()
    }

    fn open(&self, path: &RelPath, options: OpenOptions) -> io::Result<Arc<dyn BackendFile>> {
        let fail = |errno| self.error(errno, "open", path);
        let (dir, name) = self.walk_parent(path, Errno::ISDIR).map_err(fail)?;
        let mut flags = OFlags::RDWR | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        if options.create_new {
            flags |= OFlags::CREATE | OFlags::EXCL;
        } else if options.create {
            flags |= OFlags::CREATE;
        }
        if options.truncate {
            flags |= OFlags::TRUNC;
        }
        let fd = rfs::openat(&dir, name, flags, Mode::from_raw_mode(0o644)).map_err(fail)?;
        let stat = rfs::fstat(&fd).map_err(fail)?;
        if PosixBackend::stat_kind(&stat) != Some(FileKind::File) {
            return Err(not_regular(
                &self.label,
                &format!("open {:?}", path.as_str()),
            ));
        }
        Ok(Arc::new(PosixFile {
            file: File::from(fd),
            path: path.clone(),
            label: Arc::clone(&self.label),
        }))
    }

    fn metadata(&self, path: &RelPath) -> io::Result<Metadata> {
        let fail = |errno| self.error(errno, "stat", path);
        let stat = match path.parent() {
            None => rfs::fstat(&self.root_fd).map_err(fail)?,
            Some(parent) => {
                let dir = self.walk(&parent).map_err(fail)?;
                rfs::statat(&dir, path.file_name(), AtFlags::SYMLINK_NOFOLLOW).map_err(fail)?
            }
        };
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
        let fail = |errno| error(&self.label, errno, &what);
        let (from_dir, from_name) = self.walk_parent(from, Errno::BUSY).map_err(fail)?;
        let (to_dir, to_name) = self.walk_parent(to, Errno::BUSY).map_err(fail)?;
        rfs::renameat(&from_dir, from_name, &to_dir, to_name).map_err(fail)
    }

    fn create_dir(&self, path: &RelPath) -> io::Result<()> {
        let fail = |errno| self.error(errno, "mkdir", path);
        let (dir, name) = self.walk_parent(path, Errno::EXIST).map_err(fail)?;
        rfs::mkdirat(&dir, name, Mode::from_raw_mode(0o755)).map_err(fail)
    }

    fn remove_dir(&self, path: &RelPath) -> io::Result<()> {
        let fail = |errno| self.error(errno, "rmdir", path);
        let (dir, name) = self.walk_parent(path, Errno::BUSY).map_err(fail)?;
        rfs::unlinkat(&dir, name, AtFlags::REMOVEDIR).map_err(fail)
    }

    fn read_dir(&self, path: &RelPath) -> io::Result<Vec<DirEntry>> {
        let fail = |errno| self.error(errno, "read_dir", path);
        let dir = self.walk(path).map_err(fail)?;
        let mut entries = Vec::new();
        for entry in rfs::Dir::read_from(&dir).map_err(fail)? {
            let entry = entry.map_err(fail)?;
            let Ok(name) = entry.file_name().to_str() else {
                continue;
            };
            if name == "." || name == ".." {
                continue;
            }
            let file_type = match entry.file_type() {
                // Some file systems do not report types in directory
                // entries: ask the entry itself (without following it).
                FileType::Unknown => {
                    match rfs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW) {
                        Ok(stat) => FileType::from_raw_mode(stat.st_mode),
                        // Removed meanwhile: not listed.
                        Err(Errno::NOENT) => continue,
                        Err(errno) => return Err(fail(errno)),
                    }
                }
                known => known,
            };
            let kind = match file_type {
                FileType::RegularFile => FileKind::File,
                FileType::Directory => FileKind::Dir,
                _ => continue,
            };
            entries.push(DirEntry {
                name: name.to_string(),
                kind,
            });
        }
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
        rfs::fsync(&fd).map_err(fail)
    }

    fn space(&self) -> io::Result<SpaceInfo> {
        let stat = rfs::fstatvfs(&self.root_fd)
            .map_err(|errno| errno_error(errno, format_args!("{}: statvfs", self.label)))?;
        Ok(SpaceInfo {
            total_bytes: stat.f_blocks.saturating_mul(stat.f_frsize),
            free_bytes: stat.f_bavail.saturating_mul(stat.f_frsize),
        })
    }
}

/// An open regular file of a [`PosixBackend`].
#[derive(Debug)]
struct PosixFile {
    file: File,
    path: RelPath,
    label: Arc<str>,
}

impl PosixFile {
    fn error(&self, cause: io::Error, op: &str) -> io::Error {
        with_context(
            cause,
            format_args!("{}: {op} {:?}", self.label, self.path.as_str()),
        )
    }
}

impl BackendFile for PosixFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
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
        self.file
            .write_all_at(buf, offset)
            .map_err(|e| self.error(e, "write"))
    }

    fn sync_data(&self) -> io::Result<()> {
        self.file
            .sync_data()
            .map_err(|e| self.error(e, "sync_data"))
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self
            .file
            .metadata()
            .map_err(|e| self.error(e, "len"))?
            .len())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.file.set_len(len).map_err(|e| self.error(e, "set_len"))
    }
}
