//! The engine's environment: where bytes live and what time it is.
//!
//! A tier is a [`Backend`]: a directory-like namespace of files addressed by
//! [`RelPath`]s, with positional reads and writes and explicit syncs. The
//! engine holds two (fast and capacity) and never touches `std::fs`
//! directly, so the same engine runs on
//! * [`posix::PosixBackend`] — a real directory;
//! * [`memory::MemBackend`] — memory, for tests;
//! * [`crash::CrashBackend`] — memory that keeps written and synced bytes
//!   apart and can crash (drop everything unsynced) at any sync point;
//! * [`fault::FaultBackend`] — wraps another backend and injects errors;
//! * [`emulated::EmulatedBackend`] — wraps another backend and applies a
//!   device model (HDD or SSD from `sluice-devices`) in real time.
//!
//! A backend that wraps another implements [`Forward`] (and its files
//! [`ForwardFile`]): only the calls it changes; the rest forward to the
//! inner backend, and a method added to the traits cannot skip a wrapper
//! unnoticed ([`forward`]).
//!
//! Errors are `std::io::Error` with the path in the message; [`errno`]
//! says which errno one stands for (its raw OS error, else its kind's),
//! which the FUSE layer answers with and incidents record.
//!
//! Beyond what the engine needs (regular files and directories), the trait
//! carries the POSIX metadata a FUSE mount serves: full attributes
//! ([`Backend::stat`], [`Backend::set_attr`]), symbolic links
//! ([`Backend::symlink`], [`Backend::read_link`], [`Backend::read_dir_all`]),
//! hard links ([`Backend::hard_link`]),
//! special files (FIFOs, sockets, devices: [`Backend::mknod`])
//! and extended attributes ([`Backend::get_xattr`] and friends). These have
//! default implementations that fail with EOPNOTSUPP (`ErrorKind::
//! Unsupported`), so a backend only implements what it can: the POSIX
//! backend all of them, the memory backend attributes and hard links, the
//! wrappers forward. The memory and crash-test backends refuse `mknod`
//! (EOPNOTSUPP, saying which backend cannot hold special files); the
//! crash-test backend refuses hard links likewise.
//! None of them ever follows a symbolic link that is the last component of
//! the path (nor, as everywhere, one on the way to it).
//!
//! INVARIANT: a `RelPath` never names anything outside its backend's root.

use std::fmt;
use std::io;
use std::ops::Bound;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use sluice_policy::Time;

pub use allocate::Allocate;
pub use forward::{Forward, ForwardFile};
pub use health::TierHealth;
pub use pathmap::PathMap;

/// How [`copy_range`] moved the bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopyHow {
    /// `copy_file_range(2)`: in the kernel, no user-space copy.
    Kernel,
    /// Read into a buffer and written back out through the backends.
    Buffered,
}

/// Copy `len` bytes at `offset` of `src` to the same offset of `dst`
/// (stopping early at the end of `src`); returns the bytes copied and how.
/// Uses `copy_file_range` when both handles expose a kernel file, and falls
/// back to read/write through `buf` when they do not or when the kernel
/// refuses (EXDEV across file system types, EINVAL, ENOSYS, EOPNOTSUPP).
pub fn copy_range(
    src: &dyn BackendFile,
    dst: &dyn BackendFile,
    offset: u64,
    len: u64,
    buf: &mut Vec<u8>,
) -> io::Result<(u64, CopyHow)> {
    if let (Some(from), Some(to)) = (src.as_fd(), dst.as_fd()) {
        let (mut off_in, mut off_out, mut done) = (offset, offset, 0u64);
        loop {
            if done == len {
                return Ok((done, CopyHow::Kernel));
            }
            let want = usize::try_from(len - done).unwrap_or(usize::MAX);
            match rustix::fs::copy_file_range(from, Some(&mut off_in), to, Some(&mut off_out), want)
            {
                Ok(0) => return Ok((done, CopyHow::Kernel)),
                Ok(n) => done += n as u64,
                Err(rustix::io::Errno::INTR) => {}
                Err(
                    rustix::io::Errno::XDEV
                    | rustix::io::Errno::INVAL
                    | rustix::io::Errno::NOSYS
                    | rustix::io::Errno::OPNOTSUPP,
                ) if done == 0 => break,
                Err(e) => return Err(io::Error::from(e)),
            }
        }
    }
    let mut done = 0u64;
    while done < len {
        let chunk = usize::try_from((len - done).min(1 << 20)).unwrap_or(1 << 20);
        buf.resize(chunk, 0);
        let n = src.read_at(&mut buf[..chunk], offset + done)?;
        if n == 0 {
            break;
        }
        dst.write_at(&buf[..n], offset + done)?;
        done += n as u64;
    }
    Ok((done, CopyHow::Buffered))
}

pub mod allocate;
pub mod crash;
pub mod emulated;
pub mod errno;
pub mod fault;
pub mod forward;
mod health;
pub mod memory;
mod namespace;
mod pathmap;
pub mod posix;
pub mod shared_disk;

/// The first of the 256 code points (U+F700–U+F7FF, private use) that stand
/// for single bytes in a name that is not UTF-8 (see [`name_from_os`]).
const NAME_BYTE_ESCAPE: u32 = 0xF700;

/// A file name as the OS has it (bytes: Linux names need not be UTF-8) as
/// sluice holds names (UTF-8, in [`RelPath`] and the log's path records).
/// UTF-8 is kept as it is, except that every byte that is not part of
/// valid UTF-8, and every byte of a code point in U+F700–U+F7FF, becomes
/// the code point U+F700 + byte. So every byte string has exactly one
/// string and [`name_to_os`] gives the bytes back: any name the capacity
/// tier accepts works through sluice. Borrowed when nothing is escaped.
pub fn name_from_os(name: &std::ffi::OsStr) -> std::borrow::Cow<'_, str> {
    use std::os::unix::ffi::OsStrExt;
    let bytes = name.as_bytes();
    if let Ok(text) = std::str::from_utf8(bytes) {
        if !text.chars().any(is_name_escape) {
            return std::borrow::Cow::Borrowed(text);
        }
    }
    let escape = |out: &mut String, byte: u8| {
        // INVARIANT: U+F700..=U+F7FF are scalar values.
        out.push(char::from_u32(NAME_BYTE_ESCAPE + u32::from(byte)).expect("a scalar value"));
    };
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            if is_name_escape(c) {
                let mut buf = [0u8; 4];
                for &byte in c.encode_utf8(&mut buf).as_bytes() {
                    escape(&mut out, byte);
                }
            } else {
                out.push(c);
            }
        }
        for &byte in chunk.invalid() {
            escape(&mut out, byte);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Whether `c` is one of the code points that stand for a byte.
fn is_name_escape(c: char) -> bool {
    (NAME_BYTE_ESCAPE..NAME_BYTE_ESCAPE + 256).contains(&(c as u32))
}

/// The OS's bytes of a name held as [`name_from_os`] made it. Borrowed when
/// nothing is escaped.
pub fn name_to_os(name: &str) -> std::borrow::Cow<'_, std::ffi::OsStr> {
    use std::os::unix::ffi::OsStrExt;
    if !name.chars().any(is_name_escape) {
        return std::borrow::Cow::Borrowed(std::ffi::OsStr::new(name));
    }
    let mut bytes = Vec::with_capacity(name.len());
    for c in name.chars() {
        if is_name_escape(c) {
            bytes.push((c as u32 - NAME_BYTE_ESCAPE) as u8);
        } else {
            let mut buf = [0u8; 4];
            bytes.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
        }
    }
    std::borrow::Cow::Owned(std::ffi::OsStr::from_bytes(&bytes).to_os_string())
}

/// A path relative to a backend's root: `/`-separated, non-empty components,
/// none of them `.` or `..`, no leading `/`. The empty path is the root.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RelPath(String);

impl RelPath {
    /// The root directory.
    pub fn root() -> RelPath {
        RelPath(String::new())
    }

    /// Validate `path`; errors (InvalidInput) name the offending path.
    pub fn new(path: &str) -> io::Result<RelPath> {
        let invalid = |why: &str| {
            io::Error::new(io::ErrorKind::InvalidInput, format!("path {path:?}: {why}"))
        };
        if path.starts_with('/') {
            return Err(invalid("absolute paths are not allowed"));
        }
        if path.contains('\0') {
            return Err(invalid("contains a NUL byte"));
        }
        if path.is_empty() {
            return Ok(RelPath::root());
        }
        for component in path.split('/') {
            match component {
                "" => return Err(invalid("empty component")),
                "." | ".." => return Err(invalid("`.` and `..` are not allowed")),
                _ => {}
            }
        }
        Ok(RelPath(path.to_string()))
    }

    /// The path as a string (empty for the root).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether this is the root.
    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }

    /// `self/name`; `name` must be a single valid component.
    pub fn join(&self, name: &str) -> io::Result<RelPath> {
        if name.contains('/') {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("name {name:?}: must be a single component"),
            ));
        }
        if self.is_root() {
            RelPath::new(name)
        } else {
            RelPath::new(&format!("{}/{name}", self.0))
        }
    }

    /// The parent directory (the root for a top-level name); `None` for the root.
    pub fn parent(&self) -> Option<RelPath> {
        if self.is_root() {
            return None;
        }
        Some(match self.0.rfind('/') {
            Some(i) => RelPath(self.0[..i].to_string()),
            None => RelPath::root(),
        })
    }

    /// This path after `from` was renamed to `to`: `to` itself if this is
    /// `from`, `to/rest` if this is `from/rest`, `None` if this path is not
    /// `from` nor under it (whole components only: `ab` is not under `a`).
    pub fn rebase(&self, from: &RelPath, to: &RelPath) -> Option<RelPath> {
        if self == from {
            return Some(to.clone());
        }
        let rest = if from.is_root() {
            self.as_str()
        } else {
            self.as_str()
                .strip_prefix(from.as_str())?
                .strip_prefix('/')?
        };
        if to.is_root() {
            return RelPath::new(rest).ok();
        }
        RelPath::new(&format!("{}/{rest}", to.as_str())).ok()
    }

    /// Whether this path is `dir` or under it (whole components: `ab` is
    /// not under `a`; every path is under the root).
    pub fn is_within(&self, dir: &RelPath) -> bool {
        dir.is_root()
            || self
                .as_str()
                .strip_prefix(dir.as_str())
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    }

    /// The range, in the paths' order, that holds this path and every
    /// path under it, for `range` of an ordered map or set; it also holds
    /// siblings that only begin like it (`a-b` for `a`), which
    /// [`RelPath::is_within`] leaves out. `/` sorts just below `0`, so the
    /// paths under `a` lie between `a` and `a0`.
    pub fn subtree(&self) -> (Bound<RelPath>, Bound<RelPath>) {
        if self.is_root() {
            return (Bound::Unbounded, Bound::Unbounded);
        }
        (
            Bound::Included(self.clone()),
            Bound::Excluded(RelPath(format!("{}0", self.0))),
        )
    }

    /// The last component (empty for the root).
    pub fn file_name(&self) -> &str {
        self.0.rsplit('/').next().unwrap_or("")
    }
}

impl fmt::Display for RelPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_root() {
            f.write_str("/")
        } else {
            f.write_str(&self.0)
        }
    }
}

/// How to open a file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpenOptions {
    /// Create the file if it does not exist.
    pub create: bool,
    /// Fail with AlreadyExists if it exists (with `create`).
    pub create_new: bool,
    /// Truncate to zero length on open.
    pub truncate: bool,
    /// Only the owner may read or write the file: a new file is created
    /// 0600 whatever the umask, and an existing one with a wider mode (an
    /// older sluice made it) is narrowed to 0600 when opened. For sluice's
    /// own files on the fast tier, which hold other users' data (log
    /// regions, staged checkpoints, lifted heads). Backends without
    /// permissions ignore it.
    pub private: bool,
}

impl OpenOptions {
    /// Open, creating the file if it does not exist; keep its bytes.
    pub const CREATE: OpenOptions = OpenOptions {
        create: true,
        create_new: false,
        truncate: false,
        private: false,
    };

    /// These options with [`OpenOptions::private`] set.
    pub const fn private(self) -> OpenOptions {
        OpenOptions {
            private: true,
            ..self
        }
    }
}

/// What a path names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FileKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
}

/// Metadata of a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Metadata {
    /// File or directory.
    pub kind: FileKind,
    /// Length in bytes (0 for directories).
    pub len: u64,
}

/// One directory entry.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct DirEntry {
    /// The entry's name (one component).
    pub name: String,
    /// File or directory.
    pub kind: FileKind,
}

/// What a path names, as [`Backend::stat`] and [`Backend::read_dir_all`]
/// see it (links not followed).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum StatKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link (never followed by a backend).
    Symlink,
    /// A named pipe (FIFO).
    Fifo,
    /// A Unix domain socket.
    Socket,
    /// A character device node.
    CharDevice,
    /// A block device node.
    BlockDevice,
}

impl StatKind {
    /// Whether the engine handles this kind itself (regular files and
    /// directories); the rest (links, FIFOs, sockets, devices) are entries
    /// of the namespace only, created, renamed and removed on the tier.
    pub fn is_file_or_dir(self) -> bool {
        matches!(self, StatKind::File | StatKind::Dir)
    }
}

/// A special file [`Backend::mknod`] makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SpecialFile {
    /// A named pipe (FIFO).
    Fifo,
    /// A Unix domain socket (the entry only; nothing listens on it).
    Socket,
    /// A character device; `rdev` in the kernel's 32-bit encoding, as in
    /// [`Stat::rdev`].
    CharDevice {
        /// Device number (`new_encode_dev`).
        rdev: u32,
    },
    /// A block device; `rdev` as for [`SpecialFile::CharDevice`].
    BlockDevice {
        /// Device number (`new_encode_dev`).
        rdev: u32,
    },
}

impl SpecialFile {
    /// The kind [`Backend::stat`] reports for it.
    pub fn kind(self) -> StatKind {
        match self {
            SpecialFile::Fifo => StatKind::Fifo,
            SpecialFile::Socket => StatKind::Socket,
            SpecialFile::CharDevice { .. } => StatKind::CharDevice,
            SpecialFile::BlockDevice { .. } => StatKind::BlockDevice,
        }
    }

    /// The special file a `mknod(2)` mode (`S_IFMT` bits) and device
    /// number ask for; `None` for a regular file, a directory, a link or
    /// an unknown type (not special files).
    pub fn from_mode(mode: u32, rdev: u32) -> Option<SpecialFile> {
        match mode & 0o170_000 {
            0o010_000 => Some(SpecialFile::Fifo),
            0o140_000 => Some(SpecialFile::Socket),
            0o020_000 => Some(SpecialFile::CharDevice { rdev }),
            0o060_000 => Some(SpecialFile::BlockDevice { rdev }),
            _ => None,
        }
    }
}

impl From<FileKind> for StatKind {
    fn from(kind: FileKind) -> StatKind {
        match kind {
            FileKind::File => StatKind::File,
            FileKind::Dir => StatKind::Dir,
        }
    }
}

/// Full POSIX attributes of a path, the link itself for a symbolic link
/// (`lstat`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stat {
    /// What the path names.
    pub kind: StatKind,
    /// Length in bytes (a link: the length of its target string; a
    /// directory: what the file system says).
    pub len: u64,
    /// Space allocated, in 512-byte units.
    pub blocks: u64,
    /// Permission bits including set-user-ID, set-group-ID and sticky:
    /// `st_mode & 0o7777` (the file type is in `kind`).
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Number of hard links (saturated at `u32::MAX`).
    pub nlink: u32,
    /// Inode number: identifies the file or directory (not its name) for
    /// as long as it lives, across renames, within its file system (`dev`).
    pub ino: u64,
    /// The file system holding it (`st_dev`; 0 for a backend with one):
    /// with `ino`, its identity under the tier's root, which may span
    /// mounts ([`Stat::identity`]).
    pub dev: u64,
    /// Last access.
    pub atime: SystemTime,
    /// Last modification of the contents.
    pub mtime: SystemTime,
    /// Last change of the attributes.
    pub ctime: SystemTime,
    /// Preferred I/O size.
    pub blksize: u32,
    /// Device number of a device node in the kernel's 32-bit encoding
    /// (`new_encode_dev`, what FUSE's `fuse_attr.rdev` carries); 0 otherwise.
    pub rdev: u32,
}

impl Stat {
    /// What identifies the file across its names (hard links) and renames
    /// while it lives: its file system and inode number.
    pub fn identity(&self) -> (u64, u64) {
        (self.dev, self.ino)
    }
}

/// A time to set with [`Backend::set_attr`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeSet {
    /// The current time of the backend (`UTIME_NOW`).
    Now,
    /// This time, to the nanosecond when the file system keeps them.
    At(SystemTime),
}

/// Attributes to change with [`Backend::set_attr`]; `None` leaves one
/// unchanged. The size is not an attribute here (files are truncated
/// through [`BackendFile::set_len`]).
///
/// Every call sets the ctime, as the kernel's `setattr` does; one with
/// nothing to change (the default) is `chown(path, -1, -1)`, which sets
/// only that.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SetAttr {
    /// New permission bits; only `mode & 0o7777` is applied (FUSE passes
    /// the file type bits along).
    pub mode: Option<u32>,
    /// New owner (`u32::MAX`, the "unchanged" value of `chown(2)`, is
    /// refused: say `None`).
    pub uid: Option<u32>,
    /// New group (`u32::MAX` refused likewise).
    pub gid: Option<u32>,
    /// New access time.
    pub atime: Option<TimeSet>,
    /// New modification time.
    pub mtime: Option<TimeSet>,
}

/// How [`Backend::set_xattr`] treats an existing attribute.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum XattrFlags {
    /// Create it or replace it.
    #[default]
    Either,
    /// Create only: EEXIST if it exists (`XATTR_CREATE`).
    CreateOnly,
    /// Replace only: ENODATA if it does not exist (`XATTR_REPLACE`).
    ReplaceOnly,
}

/// Space of a backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpaceInfo {
    /// Total bytes.
    pub total_bytes: u64,
    /// Bytes available for new data.
    pub free_bytes: u64,
}

/// An open file of a backend. Positional I/O only; safe to share between
/// threads (`&self` methods).
pub trait BackendFile: Send + Sync + fmt::Debug {
    /// Read up to `buf.len()` bytes at `offset`; returns the bytes read (0
    /// at or past the end). Short reads happen only at the end of file.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
    /// Read into `buf` at `offset` until it is full or the file ends
    /// (retrying interrupted reads); returns the bytes read. The one
    /// "read fully" of the workspace: callers that want a hole past the
    /// end fill the rest themselves.
    fn read_full_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        forward::read_full(buf, offset, |buf, at| self.read_at(buf, at))
    }
    /// Write all of `buf` at `offset`, extending the file as needed.
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// Writes `bufs` back to back at `offset`, all of them or an error.
    /// The default joins them and calls [`BackendFile::write_at`] (so
    /// wrappers keep their rules); the POSIX backend issues `pwritev`,
    /// saving the copy on the log's append path.
    fn write_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> io::Result<()> {
        forward::write_joined(bufs, offset, |buf, at| self.write_at(buf, at))
    }
    /// Make the file's data (and length) durable.
    fn sync_data(&self) -> io::Result<()>;
    /// Current length.
    fn len(&self) -> io::Result<u64>;
    /// Whether the file is empty.
    fn is_empty(&self) -> io::Result<bool> {
        Ok(self.len()? == 0)
    }
    /// Truncate or extend (with zeros) to `len`.
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// `fallocate(2)` of `[offset, offset + len)` in `mode`: reserve
    /// blocks, punch a hole, zero a range, or collapse or insert one
    /// ([`Allocate`] says what each does to the bytes and the length). The
    /// default refuses (EOPNOTSUPP) for backends that cannot; a backend
    /// whose file system refuses a mode answers its errno.
    fn allocate(&self, mode: Allocate, offset: u64, len: u64) -> io::Result<()> {
        let _ = (offset, len);
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!("fallocate ({mode:?}): not supported by this backend"),
        ))
    }
    /// Attributes of the open file itself (`fstat`): they outlive its name,
    /// so an unlinked file still open has them. The default refuses
    /// (Unsupported) for backends that keep none.
    fn stat(&self) -> io::Result<Stat> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "stat of an open file: not supported by this backend",
        ))
    }
    /// Sets extended attribute `name` of the open file itself (its inode,
    /// whatever names it now: `fsetxattr`) to `value`; `flags` as
    /// [`Backend::set_xattr`]'s. The default refuses (Unsupported) for
    /// backends whose handles have none: callers fall back to the path.
    fn set_xattr(&self, name: &str, value: &[u8], flags: XattrFlags) -> io::Result<()> {
        let _ = (name, value, flags);
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "set_xattr of an open file: not supported by this backend",
        ))
    }
    /// Removes extended attribute `name` of the open file itself
    /// (`fremovexattr`); ENODATA if it has none. The default refuses
    /// (Unsupported), as [`BackendFile::set_xattr`]'s.
    fn remove_xattr(&self, name: &str) -> io::Result<()> {
        let _ = name;
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "remove_xattr of an open file: not supported by this backend",
        ))
    }
    /// The kernel file behind this handle, for copies the kernel does
    /// itself ([`copy_range`]). `None` (the default) when there is none or
    /// when every byte must pass through the backend (emulated devices
    /// charge for them, fault injection fails them, LiU tracks writes).
    fn as_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        None
    }
}

/// A tier: a namespace of files under a root.
pub trait Backend: Send + Sync + fmt::Debug {
    /// A short description for messages and `sluice status` (kind and root).
    fn describe(&self) -> String;
    /// Open (and maybe create) a regular file.
    fn open(&self, path: &RelPath, options: OpenOptions) -> io::Result<Arc<dyn BackendFile>>;
    /// Metadata of `path`; NotFound if absent.
    fn metadata(&self, path: &RelPath) -> io::Result<Metadata>;
    /// Remove a regular file.
    fn remove_file(&self, path: &RelPath) -> io::Result<()>;
    /// Rename a file or directory, replacing a file at `to`.
    fn rename(&self, from: &RelPath, to: &RelPath) -> io::Result<()>;
    /// Create a directory (the parent must exist).
    fn create_dir(&self, path: &RelPath) -> io::Result<()>;
    /// Create a directory only its owner may use (0700 whatever the umask;
    /// the parent must exist): sluice's own directories on the fast tier.
    /// The default, for backends without permissions, is
    /// [`Backend::create_dir`]; [`Forward`] forwards it.
    fn create_private_dir(&self, path: &RelPath) -> io::Result<()> {
        self.create_dir(path)
    }
    /// Remove an empty directory.
    fn remove_dir(&self, path: &RelPath) -> io::Result<()>;
    /// Entries of a directory, sorted by name.
    fn read_dir(&self, path: &RelPath) -> io::Result<Vec<DirEntry>>;
    /// Make namespace changes in directory `path` (creates, removes,
    /// renames of its entries) durable.
    fn sync_dir(&self, path: &RelPath) -> io::Result<()>;
    /// Total and free space.
    fn space(&self) -> io::Result<SpaceInfo>;

    /// Look at the tier's root again (docs/crash-consistency.md,
    /// "Capacity-tier faults"): whether its name still leads to the
    /// directory the backend was opened on, and whether its file system
    /// is read-only; the answer is kept as [`Backend::health`]. An error
    /// (ENODEV, saying what was found) when the tier is lost: removed,
    /// replaced or unmounted since, so that files written through the open
    /// root are no longer where users look. Backends without a named root
    /// answer Ok; wrappers forward.
    fn check_root(&self) -> io::Result<()> {
        Ok(())
    }

    /// The tier's health as last found ([`Backend::check_root`], or a call
    /// that failed with an errno that may mean the tier went away):
    /// healthy, read-only or lost. Once lost, every call fails with ENODEV
    /// until the root's name leads to the same directory again. Backends
    /// without a named root are always healthy; wrappers forward.
    fn health(&self) -> TierHealth {
        TierHealth::Healthy
    }

    /// Whether every change of a file's bytes gives it a change time
    /// (ctime) after any ctime a stat saw before the change: fine-grained
    /// change times, as Linux 6.13's multigrain timestamps give ext4, xfs,
    /// btrfs and tmpfs. Then a file whose length, mtime and ctime are what
    /// a stat saw earlier was not written since. `false` (the default)
    /// claims nothing.
    fn change_times_exact(&self) -> bool {
        false
    }

    /// Whether a write to a file of the tier is read by every client of
    /// the tier as soon as it returned, with no sync: a file system local
    /// to this host (ext4, xfs, btrfs, tmpfs, f2fs, bcachefs, zfs,
    /// overlay), whose one page cache every mount of it on the host reads
    /// through. Network and cluster file systems (NFS, GlusterFS, Lustre,
    /// GPFS, CephFS, FUSE file systems) may hold written bytes in a
    /// client's cache until a flush or a sync, and answer `false`, as does
    /// the default. A close under
    /// close-to-open then needs no sync for bytes written straight to the
    /// tier (docs/fuse.md, "Many nodes").
    fn page_cache_shared(&self) -> bool {
        false
    }

    /// Bytes this backend may still take from the *fast* tier's file
    /// system for its own files: LiU's heads and bodies files until they
    /// have filled once. The stager keeps them out of the room it places checkpoints
    /// in, as it keeps the log's growth (docs/bbos.md, "A full fast
    /// tier"). None for a backend that keeps nothing there (the default).
    fn fast_tier_growth(&self) -> u64 {
        0
    }

    /// Full attributes of `path`, the link itself if it is a symbolic link
    /// (unlike [`Backend::metadata`], which refuses links). NotFound if
    /// absent.
    fn stat(&self, path: &RelPath) -> io::Result<Stat> {
        Err(unsupported(&self.describe(), "stat", path))
    }

    /// Changes the attributes of `path` named in `attr`, never through a
    /// symbolic link: the owner and times of a link are its own, and a mode
    /// change on a link fails with EOPNOTSUPP (Linux has no link modes).
    /// Not atomic: owner, then mode, then times; a failure leaves the
    /// earlier changes made.
    fn set_attr(&self, path: &RelPath, attr: &SetAttr) -> io::Result<()> {
        let _ = attr;
        Err(unsupported(&self.describe(), "set_attr", path))
    }

    /// Creates a symbolic link `link` holding `target` verbatim (the backend
    /// never resolves it); AlreadyExists if `link` exists.
    fn symlink(&self, target: &str, link: &RelPath) -> io::Result<()> {
        let _ = target;
        Err(unsupported(&self.describe(), "symlink", link))
    }

    /// Creates the special file `node` at `path` with permission bits
    /// `mode & 0o7777` (the process umask may still apply: set the mode
    /// afterwards with [`Backend::set_attr`] when it must be exact);
    /// AlreadyExists if `path` exists. A backend that cannot hold special
    /// files fails with EOPNOTSUPP (`ErrorKind::Unsupported`) saying so.
    fn mknod(&self, path: &RelPath, node: SpecialFile, mode: u32) -> io::Result<()> {
        let _ = (node, mode);
        Err(unsupported(&self.describe(), "mknod", path))
    }

    /// Gives the file `existing` a second name `new` (`link(2)`, never
    /// following a symbolic link: a link named `existing` gets the new
    /// name itself). Both names then reach one file, with one inode number
    /// ([`Stat::ino`]) and a link count ([`Stat::nlink`]) of every name.
    /// AlreadyExists if `new` exists; EPERM for a directory; NotFound if
    /// `existing` or `new`'s parent is missing. A backend that cannot hold
    /// two names of one file fails with EOPNOTSUPP (`ErrorKind::
    /// Unsupported`) saying so.
    fn hard_link(&self, existing: &RelPath, new: &RelPath) -> io::Result<()> {
        Err(errno_error(
            rustix::io::Errno::OPNOTSUPP,
            format_args!(
                "{}: hard_link {:?} to {:?}: not supported by this backend",
                self.describe(),
                existing.as_str(),
                new.as_str()
            ),
        ))
    }

    /// The target of the symbolic link `path`; EINVAL if it is not a link,
    /// InvalidData if the target is not UTF-8.
    fn read_link(&self, path: &RelPath) -> io::Result<String> {
        Err(unsupported(&self.describe(), "read_link", path))
    }

    /// Every entry of a directory with its kind, links and other special
    /// files included (names that are not UTF-8 are skipped), sorted by
    /// name. The default lists [`Backend::read_dir`]: a backend without
    /// links or special files has nothing more to show.
    fn read_dir_all(&self, path: &RelPath) -> io::Result<Vec<(String, StatKind)>> {
        Ok(self
            .read_dir(path)?
            .into_iter()
            .map(|entry| (entry.name, entry.kind.into()))
            .collect())
    }

    /// The value of extended attribute `name` of `path` (a final link not
    /// followed); ENODATA (in [`raw_os_error`]) if it has none.
    fn get_xattr(&self, path: &RelPath, name: &str) -> io::Result<Vec<u8>> {
        let _ = name;
        Err(unsupported(&self.describe(), "get_xattr", path))
    }

    /// Sets extended attribute `name` of `path` (a final link not followed)
    /// to `value`; `flags` say whether it must or must not exist (EEXIST,
    /// ENODATA).
    fn set_xattr(
        &self,
        path: &RelPath,
        name: &str,
        value: &[u8],
        flags: XattrFlags,
    ) -> io::Result<()> {
        let _ = (name, value, flags);
        Err(unsupported(&self.describe(), "set_xattr", path))
    }

    /// Names of the extended attributes of `path` (a final link not
    /// followed) that the caller may see, in the file system's order.
    fn list_xattr(&self, path: &RelPath) -> io::Result<Vec<String>> {
        Err(unsupported(&self.describe(), "list_xattr", path))
    }

    /// Removes extended attribute `name` of `path` (a final link not
    /// followed); ENODATA if it has none.
    fn remove_xattr(&self, path: &RelPath, name: &str) -> io::Result<()> {
        let _ = name;
        Err(unsupported(&self.describe(), "remove_xattr", path))
    }
}

/// Where the engine gets the time and how it waits. The policies never see
/// this: the engine reads it and passes `now` in.
pub trait Clock: Send + Sync + fmt::Debug {
    /// Monotonic time since this clock's epoch.
    fn now(&self) -> Time;
    /// Block the calling thread for `duration`.
    fn sleep(&self, duration: Duration);
    /// Wall-clock time, for the times a file shows (a write's mtime):
    /// the system's by default; a test's clock may give its own, so that
    /// what a run stamps follows the clock it was given.
    fn wall(&self) -> std::time::SystemTime {
        std::time::SystemTime::now()
    }
}

/// The real monotonic clock; its epoch is its creation.
#[derive(Debug)]
pub struct SystemClock {
    epoch: std::time::Instant,
}

impl SystemClock {
    /// A clock starting at zero now.
    pub fn new() -> SystemClock {
        SystemClock {
            epoch: std::time::Instant::now(),
        }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        SystemClock::new()
    }
}

impl Clock for SystemClock {
    fn now(&self) -> Time {
        let nanos = u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX);
        Time::from_nanos(nanos)
    }

    fn sleep(&self, duration: Duration) {
        std::thread::sleep(duration);
    }
}

/// The OS error number behind `error`: its own raw OS error, else that of
/// the first `io::Error` in its `source()` chain.
///
/// Backends put the path in front of an OS error by wrapping it (so
/// `error.raw_os_error()` is `None` on what they return) and keep the
/// original as the source; this finds it again, for an exact errno mapping
/// at the FUSE boundary.
pub fn raw_os_error(error: &io::Error) -> Option<i32> {
    if let Some(code) = error.raw_os_error() {
        return Some(code);
    }
    let mut cause = std::error::Error::source(error);
    // Error chains are finite (each link owns the next), so this ends.
    while let Some(current) = cause {
        if let Some(code) = current
            .downcast_ref::<io::Error>()
            .and_then(io::Error::raw_os_error)
        {
            return Some(code);
        }
        cause = current.source();
    }
    None
}

/// An error with what failed (backend, operation, path) in front of its
/// cause, which stays reachable as `source()`.
#[derive(Debug)]
struct ContextError {
    context: String,
    cause: io::Error,
}

impl fmt::Display for ContextError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.context, self.cause)
    }
}

impl std::error::Error for ContextError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.cause)
    }
}

/// `cause` with `context` (e.g. `memory: open "a/b"`) in front of its
/// message; the kind is kept and the cause stays the source (see
/// [`raw_os_error`]).
pub fn with_context(cause: io::Error, context: impl fmt::Display) -> io::Error {
    io::Error::new(
        cause.kind(),
        ContextError {
            context: context.to_string(),
            cause,
        },
    )
}

/// An OS error (`errno`) with `context` in front of it.
pub(crate) fn errno_error(errno: rustix::io::Errno, context: impl fmt::Display) -> io::Error {
    with_context(io::Error::from(errno), context)
}

/// The error of an operation `backend` (its [`Backend::describe`]) does not
/// support: EOPNOTSUPP, whose kind is `ErrorKind::Unsupported`.
pub(crate) fn unsupported(backend: &str, op: &str, path: &RelPath) -> io::Error {
    errno_error(
        rustix::io::Errno::OPNOTSUPP,
        format_args!(
            "{backend}: {op} {:?}: not supported by this backend",
            path.as_str()
        ),
    )
}

/// A uid or gid to set: `u32::MAX` means "unchanged" to `chown(2)`, so it is
/// refused (InvalidInput) rather than silently ignored.
pub(crate) fn owner_id(id: Option<u32>, what: &str) -> io::Result<Option<u32>> {
    match id {
        Some(u32::MAX) => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{what} {} is reserved (\"unchanged\")", u32::MAX),
        )),
        id => Ok(id),
    }
}

/// Whether an error of a tier says it has no room: ENOSPC, or EDQUOT (a
/// quota on its file system).
pub fn no_room(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded
    )
}

/// Locks `mutex`, ignoring poisoning: sluice's one lock helper (every
/// crate that holds a `Mutex` takes it through this).
///
/// Poison-tolerant on purpose. A panic while a lock is held is a bug,
/// already reported on stderr; the data behind the lock may be mid-update,
/// but refusing every later call would turn one panicking thread into
/// failures everywhere, and for the engine would take away the buffered
/// data's chance to be drained. Critical sections are written to complete
/// their mutation or change nothing before the points that can panic
/// (allocation failure aborts instead).
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One wait on `changed`, until a notification (or a spurious wakeup:
/// callers look at the state again), poisoning ignored as by [`lock`].
pub fn wait<'a, T>(changed: &Condvar, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
    changed.wait(guard).unwrap_or_else(PoisonError::into_inner)
}

/// One wait on `changed`, of at most `max` (a notification may end it
/// sooner), poisoning ignored as by [`lock`].
pub fn wait_for<'a, T>(
    changed: &Condvar,
    guard: MutexGuard<'a, T>,
    max: Duration,
) -> MutexGuard<'a, T> {
    changed
        .wait_timeout(guard, max)
        .unwrap_or_else(PoisonError::into_inner)
        .0
}

/// Wait on `changed` while `cond` holds of what `guard` guards, but at
/// most `max` in all (notifications that leave `cond` true do not end
/// it), poisoning ignored as by [`lock`].
pub fn wait_while_at_most<'a, T>(
    changed: &Condvar,
    guard: MutexGuard<'a, T>,
    max: Duration,
    cond: impl FnMut(&mut T) -> bool,
) -> MutexGuard<'a, T> {
    changed
        .wait_timeout_while(guard, max, cond)
        .unwrap_or_else(PoisonError::into_inner)
        .0
}

/// Wait on `changed` while `cond` holds of what `guard` guards, poisoning
/// ignored as by [`lock`]; with `poll`, look again at least that often,
/// for a condition whose change may come without a notification. With
/// [`lock`], [`wait`], [`wait_for`] and [`wait_while_at_most`], the only
/// places a guard is passed: callers keep their own helpers free of
/// guards, as predicates on the guarded state.
pub fn wait_while<'a, T>(
    changed: &Condvar,
    mut guard: MutexGuard<'a, T>,
    poll: Option<Duration>,
    mut cond: impl FnMut(&mut T) -> bool,
) -> MutexGuard<'a, T> {
    while cond(&mut guard) {
        guard = match poll {
            None => wait(changed, guard),
            Some(poll) => wait_for(changed, guard, poll),
        };
    }
    guard
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subtree_is_one_range_of_the_ordered_paths() {
        let p = |s: &str| RelPath::new(s).unwrap();
        let names = [
            "a", "a!", "a-b", "a.b", "a/b", "a/b/c", "a0", "a0/b", "aa", "a\u{e9}", "b", "a/\u{e9}",
        ];
        let set: std::collections::BTreeSet<RelPath> = names.iter().map(|s| p(s)).collect();
        for dir in ["a", "a/b", "a-b", "b", "c", ""] {
            let dir = if dir.is_empty() {
                RelPath::root()
            } else {
                p(dir)
            };
            let ranged: Vec<&RelPath> = set
                .range(dir.subtree())
                .filter(|q| q.is_within(&dir))
                .collect();
            let scanned: Vec<&RelPath> = set
                .iter()
                .filter(|q| q.rebase(&dir, &p("z")).is_some())
                .collect();
            assert_eq!(ranged, scanned, "under {dir}");
        }
        assert!(p("a/b").is_within(&p("a")));
        assert!(!p("ab").is_within(&p("a")));
    }

    #[test]
    fn rebase_moves_a_path_and_everything_under_it() {
        let p = |s: &str| RelPath::new(s).unwrap();
        let (from, to) = (p("a/b"), p("x"));
        assert_eq!(p("a/b").rebase(&from, &to), Some(p("x")));
        assert_eq!(p("a/b/c/d").rebase(&from, &to), Some(p("x/c/d")));
        assert_eq!(p("a/bc").rebase(&from, &to), None, "whole components only");
        assert_eq!(p("a").rebase(&from, &to), None);
        assert_eq!(p("a/b/c").rebase(&from, &RelPath::root()), Some(p("c")));
        assert_eq!(p("c").rebase(&RelPath::root(), &p("y")), Some(p("y/c")));
    }

    #[test]
    fn rel_paths_refuse_escapes() {
        for bad in ["/etc/passwd", "a/../b", "..", ".", "a//b", "a/", "a\0b"] {
            assert!(RelPath::new(bad).is_err(), "{bad:?}");
        }
        let p = RelPath::new("dir/sub/file").unwrap();
        assert_eq!(p.file_name(), "file");
        assert_eq!(p.parent().unwrap().as_str(), "dir/sub");
        assert_eq!(RelPath::new("top").unwrap().parent(), Some(RelPath::root()));
        assert_eq!(RelPath::root().parent(), None);
        assert_eq!(RelPath::root().join("x").unwrap().as_str(), "x");
        assert!(p.join("a/b").is_err());
        assert!(p.join("..").is_err());
    }

    #[test]
    fn system_clock_moves_forward() {
        let clock = SystemClock::new();
        let a = clock.now();
        clock.sleep(Duration::from_millis(2));
        assert!(clock.now().saturating_since(a) >= Duration::from_millis(2));
    }

    #[test]
    fn context_keeps_kind_and_os_error() {
        let error = errno_error(rustix::io::Errno::NOENT, "memory: open \"a/b\"");
        assert_eq!(error.kind(), io::ErrorKind::NotFound);
        assert_eq!(error.raw_os_error(), None);
        assert_eq!(raw_os_error(&error), Some(2));
        let message = error.to_string();
        assert!(message.starts_with("memory: open \"a/b\": "), "{message}");
        assert_eq!(raw_os_error(&io::Error::other("x")), None);
    }
}

#[cfg(test)]
mod name_tests {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;

    use proptest::prelude::*;

    use super::{name_from_os, name_to_os};

    proptest! {
        /// Every byte string maps to one string and back.
        #[test]
        fn any_bytes_round_trip(bytes in prop::collection::vec(any::<u8>(), 0..40)) {
            let held = name_from_os(OsStr::from_bytes(&bytes));
            let back = name_to_os(&held);
            prop_assert_eq!(back.as_bytes(), &bytes[..]);
        }

        /// UTF-8 names outside the escape range are kept as they are.
        #[test]
        fn utf8_names_are_kept(name in "[^\u{f700}-\u{f7ff}]{0,20}") {
            let held = name_from_os(OsStr::new(&name));
            prop_assert_eq!(held.as_ref(), name.as_str());
            prop_assert!(matches!(held, std::borrow::Cow::Borrowed(_)));
        }
    }

    #[test]
    fn escape_code_points_in_a_name_are_escaped_themselves() {
        let name = "a\u{f7ff}b";
        let held = name_from_os(OsStr::new(name));
        assert_ne!(
            held.as_ref(),
            name,
            "a literal escape code point is escaped"
        );
        assert_eq!(name_to_os(&held).as_bytes(), name.as_bytes());
    }
}
