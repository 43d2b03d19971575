//! [`FaultBackend`]: forwards to another backend and injects errors by rule.
//!
//! A [`FaultRule`] names an operation class ([`FaultOp`]), an optional path
//! prefix, the OS error to return (a raw `errno`, so the FUSE layer's
//! mapping is exact: 5 = EIO, 28 = ENOSPC) and how many times it fires.
//! Every call checks the rules in the order they were injected; the first
//! that matches and has firings left fires: the call fails without reaching
//! the inner backend. Otherwise the call is forwarded unchanged (inner errors
//! pass through as they are). Files opened through the backend are wrapped
//! too, and their rules are checked at each call, so a rule injected after a
//! file was opened applies to it.
//!
//! Matching: the prefix is compared as a string with the path relative to the
//! root (`"log/"` matches everything under `log`, `"log/region-"` every
//! region file); a rename matches when either path does; a file's calls use
//! the path it was opened as. Operation classes: `Open`; `Read` (`read_at`);
//! `Write` (`write_at`); `Sync` (`sync_data`, `sync_dir`); `SetLen`;
//! `Rename`; `Remove` (`remove_file`, `remove_dir`); `CreateDir`;
//! `Symlink`; `Mknod`; `Link` (`hard_link`, either path); `ReadDir` (`read_dir`, `read_dir_all`); `Metadata`
//! (`metadata`, `stat`, `read_link`, `get_xattr`, `list_xattr`, a file's
//! `len`, `space` — the last matched against the root path, the empty
//! string); `SetAttr` (`set_attr`, `set_xattr`, `remove_xattr`); `Any`
//! matches all.
//!
//! Invariants: a rule with `remaining: Some(n)` fires at most `n` times;
//! [`FaultBackend::injected`] counts every fired fault; the rule list is
//! guarded by a poison-tolerant mutex (see `lock` in lib.rs) and never held
//! while calling the inner backend.

use std::fmt;
use std::io;
use std::sync::{Arc, Mutex};

use crate::forward::{read_full, write_joined};
use crate::{
    lock, with_context, Backend, BackendFile, DirEntry, Forward, ForwardFile, Metadata,
    OpenOptions, RelPath, SetAttr, SpaceInfo, SpecialFile, Stat, StatKind, XattrFlags,
};

/// Which calls a [`FaultRule`] applies to (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FaultOp {
    /// `open`.
    Open,
    /// A file's `read_at`.
    Read,
    /// A file's `write_at`.
    Write,
    /// A file's `sync_data` and the backend's `sync_dir`.
    Sync,
    /// A file's `set_len` and `allocate` (`fallocate`).
    SetLen,
    /// `rename` (either path may match).
    Rename,
    /// `remove_file` and `remove_dir`.
    Remove,
    /// `create_dir`.
    CreateDir,
    /// `symlink`.
    Symlink,
    /// `mknod`.
    Mknod,
    /// `hard_link` (either path may match).
    Link,
    /// `read_dir` and `read_dir_all`.
    ReadDir,
    /// `metadata`, `stat`, `read_link`, `get_xattr`, `list_xattr`, a
    /// file's `len` (and `is_empty`), `space`.
    Metadata,
    /// `set_attr`, `set_xattr`, `remove_xattr`.
    SetAttr,
    /// Every call.
    Any,
}

impl FaultOp {
    const NAMES: [(FaultOp, &'static str); 15] = [
        (FaultOp::Open, "open"),
        (FaultOp::Read, "read"),
        (FaultOp::Write, "write"),
        (FaultOp::Sync, "sync"),
        (FaultOp::SetLen, "set_len"),
        (FaultOp::Rename, "rename"),
        (FaultOp::Remove, "remove"),
        (FaultOp::CreateDir, "create_dir"),
        (FaultOp::Symlink, "symlink"),
        (FaultOp::Mknod, "mknod"),
        (FaultOp::Link, "link"),
        (FaultOp::ReadDir, "read_dir"),
        (FaultOp::Metadata, "metadata"),
        (FaultOp::SetAttr, "set_attr"),
        (FaultOp::Any, "any"),
    ];
}

/// Rules from text, one per line: `OP ERRNO [PATH_PREFIX]`, OP one of
/// `open read write sync set_len rename remove create_dir symlink mknod
/// link read_dir metadata set_attr any`, ERRNO a number or a name (`EIO`,
/// `ENOSPC`); empty lines and lines starting with `#` are skipped. Every
/// rule fires forever. The mount's test hook reads them (`SLUICE_FAULTS`,
/// docs/crash-consistency.md).
pub fn parse_rules(text: &str) -> Result<Vec<FaultRule>, String> {
    let mut rules = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = |why: &str| format!("fault rule on line {}: {why}: {line:?}", n + 1);
        let mut words = line.split_whitespace();
        let (Some(op), Some(errno)) = (words.next(), words.next()) else {
            return Err(bad("expected OP ERRNO [PATH_PREFIX]"));
        };
        let op = FaultOp::NAMES
            .iter()
            .find(|(_, name)| *name == op)
            .map(|&(op, _)| op)
            .ok_or_else(|| bad("unknown operation"))?;
        let raw_os_error = match errno.parse::<i32>() {
            Ok(n) if n > 0 => n,
            _ => crate::errno::errno_code(errno).ok_or_else(|| bad("unknown errno"))?,
        };
        rules.push(FaultRule {
            path_prefix: words.next().map(str::to_string),
            ..FaultRule::new(op, raw_os_error)
        });
        if words.next().is_some() {
            return Err(bad("too many words"));
        }
    }
    Ok(rules)
}

/// One fault to inject.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultRule {
    /// Which calls.
    pub op: FaultOp,
    /// Only paths starting with this string (relative to the root, no
    /// leading `/`); `None` for every path.
    pub path_prefix: Option<String>,
    /// The `errno` returned, e.g. 5 (EIO) or 28 (ENOSPC).
    pub raw_os_error: i32,
    /// Fire this many times, then stop; `None` fires forever.
    pub remaining: Option<u64>,
}

impl FaultRule {
    /// A rule firing forever on every path.
    pub fn new(op: FaultOp, raw_os_error: i32) -> FaultRule {
        FaultRule {
            op,
            path_prefix: None,
            raw_os_error,
            remaining: None,
        }
    }

    fn matches(&self, op: FaultOp, paths: &[&RelPath]) -> bool {
        if self.remaining == Some(0) {
            return false;
        }
        if self.op != FaultOp::Any && self.op != op {
            return false;
        }
        match &self.path_prefix {
            None => true,
            Some(prefix) => paths.iter().any(|path| path.as_str().starts_with(prefix)),
        }
    }
}

#[derive(Debug, Default)]
struct Rules {
    rules: Vec<FaultRule>,
    injected: u64,
}

impl Rules {
    /// Fires the first matching rule: the error to return, if any.
    fn check(
        &mut self,
        op: FaultOp,
        paths: &[&RelPath],
        what: &dyn fmt::Display,
    ) -> io::Result<()> {
        let Some(rule) = self.rules.iter_mut().find(|rule| rule.matches(op, paths)) else {
            return Ok(());
        };
        if let Some(remaining) = &mut rule.remaining {
            *remaining -= 1;
        }
        self.injected += 1;
        Err(with_context(
            io::Error::from_raw_os_error(rule.raw_os_error),
            format_args!("fault injected: {what}"),
        ))
    }
}

/// A backend wrapping another and failing calls by rule.
#[derive(Debug)]
pub struct FaultBackend {
    inner: Arc<dyn Backend>,
    rules: Arc<Mutex<Rules>>,
}

impl FaultBackend {
    /// Wraps `inner`, with no rules (every call passes through).
    pub fn new(inner: Arc<dyn Backend>) -> FaultBackend {
        FaultBackend {
            inner,
            rules: Arc::new(Mutex::new(Rules::default())),
        }
    }

    /// Adds `rule` after the existing ones.
    pub fn inject(&self, rule: FaultRule) {
        lock(&self.rules).rules.push(rule);
    }

    /// Removes every rule (the count of injected faults stays).
    pub fn clear(&self) {
        lock(&self.rules).rules.clear();
    }

    /// Faults injected so far.
    pub fn injected(&self) -> u64 {
        lock(&self.rules).injected
    }

    /// Replaces every rule with `rules` (the count of injected faults
    /// stays).
    pub fn set_rules(&self, rules: Vec<FaultRule>) {
        lock(&self.rules).rules = rules;
    }

    /// The rules with their firings left.
    pub fn rules(&self) -> Vec<FaultRule> {
        lock(&self.rules).rules.clone()
    }

    fn check(&self, op: FaultOp, paths: &[&RelPath], what: &dyn fmt::Display) -> io::Result<()> {
        lock(&self.rules).check(op, paths, what)
    }
}

/// `<op> "<path>"`.
struct What<'a>(&'a str, &'a RelPath);

impl fmt::Display for What<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {:?}", self.0, self.1.as_str())
    }
}

/// Strict: a new method fails the build here until it is written
/// (`clippy::missing_trait_methods`), so no call escapes the rules unseen
/// and a fault test cannot pass because its fault never reached the call.
#[deny(clippy::missing_trait_methods)]
impl Forward for FaultBackend {
    fn inner(&self) -> &dyn Backend {
        &*self.inner
    }

    fn describe(&self) -> String {
        format!("fault-injecting {}", self.inner.describe())
    }

    fn open(&self, path: &RelPath, options: OpenOptions) -> io::Result<Arc<dyn BackendFile>> {
        self.check(FaultOp::Open, &[path], &What("open", path))?;
        let inner = self.inner.open(path, options)?;
        Ok(Arc::new(FaultFile {
            inner,
            rules: Arc::clone(&self.rules),
            path: path.clone(),
        }))
    }

    fn metadata(&self, path: &RelPath) -> io::Result<Metadata> {
        self.check(FaultOp::Metadata, &[path], &What("stat", path))?;
        self.inner.metadata(path)
    }

    fn remove_file(&self, path: &RelPath) -> io::Result<()> {
        self.check(FaultOp::Remove, &[path], &What("remove", path))?;
        self.inner.remove_file(path)
    }

    fn rename(&self, from: &RelPath, to: &RelPath) -> io::Result<()> {
        let what = format!("rename {:?} to {:?}", from.as_str(), to.as_str());
        self.check(FaultOp::Rename, &[from, to], &what)?;
        self.inner.rename(from, to)
    }

    fn create_dir(&self, path: &RelPath) -> io::Result<()> {
        self.check(FaultOp::CreateDir, &[path], &What("mkdir", path))?;
        self.inner.create_dir(path)
    }

    fn create_private_dir(&self, path: &RelPath) -> io::Result<()> {
        self.check(FaultOp::CreateDir, &[path], &What("mkdir", path))?;
        self.inner.create_private_dir(path)
    }

    fn remove_dir(&self, path: &RelPath) -> io::Result<()> {
        self.check(FaultOp::Remove, &[path], &What("rmdir", path))?;
        self.inner.remove_dir(path)
    }

    fn read_dir(&self, path: &RelPath) -> io::Result<Vec<DirEntry>> {
        self.check(FaultOp::ReadDir, &[path], &What("read_dir", path))?;
        self.inner.read_dir(path)
    }

    fn sync_dir(&self, path: &RelPath) -> io::Result<()> {
        self.check(FaultOp::Sync, &[path], &What("sync_dir", path))?;
        self.inner.sync_dir(path)
    }

    fn space(&self) -> io::Result<SpaceInfo> {
        let root = RelPath::root();
        self.check(FaultOp::Metadata, &[&root], &What("statvfs", &root))?;
        self.inner.space()
    }

    fn check_root(&self) -> io::Result<()> {
        self.inner.check_root()
    }

    fn change_times_exact(&self) -> bool {
        self.inner.change_times_exact()
    }

    fn page_cache_shared(&self) -> bool {
        self.inner.page_cache_shared()
    }

    fn fast_tier_growth(&self) -> u64 {
        self.inner.fast_tier_growth()
    }

    fn health(&self) -> crate::TierHealth {
        self.inner.health()
    }

    fn stat(&self, path: &RelPath) -> io::Result<Stat> {
        self.check(FaultOp::Metadata, &[path], &What("stat", path))?;
        self.inner.stat(path)
    }

    fn set_attr(&self, path: &RelPath, attr: &SetAttr) -> io::Result<()> {
        self.check(FaultOp::SetAttr, &[path], &What("set_attr", path))?;
        self.inner.set_attr(path, attr)
    }

    fn symlink(&self, target: &str, link: &RelPath) -> io::Result<()> {
        self.check(FaultOp::Symlink, &[link], &What("symlink", link))?;
        self.inner.symlink(target, link)
    }

    fn mknod(&self, path: &RelPath, node: SpecialFile, mode: u32) -> io::Result<()> {
        self.check(FaultOp::Mknod, &[path], &What("mknod", path))?;
        self.inner.mknod(path, node, mode)
    }

    fn hard_link(&self, existing: &RelPath, new: &RelPath) -> io::Result<()> {
        let what = format!("link {:?} to {:?}", existing.as_str(), new.as_str());
        self.check(FaultOp::Link, &[existing, new], &what)?;
        self.inner.hard_link(existing, new)
    }

    fn read_link(&self, path: &RelPath) -> io::Result<String> {
        self.check(FaultOp::Metadata, &[path], &What("read_link", path))?;
        self.inner.read_link(path)
    }

    fn read_dir_all(&self, path: &RelPath) -> io::Result<Vec<(String, StatKind)>> {
        self.check(FaultOp::ReadDir, &[path], &What("read_dir", path))?;
        self.inner.read_dir_all(path)
    }

    fn get_xattr(&self, path: &RelPath, name: &str) -> io::Result<Vec<u8>> {
        self.check(FaultOp::Metadata, &[path], &What("get_xattr", path))?;
        self.inner.get_xattr(path, name)
    }

    fn set_xattr(
        &self,
        path: &RelPath,
        name: &str,
        value: &[u8],
        flags: XattrFlags,
    ) -> io::Result<()> {
        self.check(FaultOp::SetAttr, &[path], &What("set_xattr", path))?;
        self.inner.set_xattr(path, name, value, flags)
    }

    fn list_xattr(&self, path: &RelPath) -> io::Result<Vec<String>> {
        self.check(FaultOp::Metadata, &[path], &What("list_xattr", path))?;
        self.inner.list_xattr(path)
    }

    fn remove_xattr(&self, path: &RelPath, name: &str) -> io::Result<()> {
        self.check(FaultOp::SetAttr, &[path], &What("remove_xattr", path))?;
        self.inner.remove_xattr(path, name)
    }
}

/// A file of a [`FaultBackend`]: its calls are checked against the rules.
struct FaultFile {
    inner: Arc<dyn BackendFile>,
    rules: Arc<Mutex<Rules>>,
    path: RelPath,
}

impl fmt::Debug for FaultFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultFile")
            .field("path", &self.path)
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl FaultFile {
    fn check(&self, op: FaultOp, name: &str) -> io::Result<()> {
        lock(&self.rules).check(op, &[&self.path], &What(name, &self.path))
    }
}

/// Strict, as [`FaultBackend`]'s impl.
#[deny(clippy::missing_trait_methods)]
impl ForwardFile for FaultFile {
    fn inner(&self) -> &dyn BackendFile {
        &*self.inner
    }

    fn stat(&self) -> io::Result<Stat> {
        self.check(FaultOp::Metadata, "fstat")?;
        self.inner.stat()
    }

    fn set_xattr(&self, name: &str, value: &[u8], flags: XattrFlags) -> io::Result<()> {
        self.check(FaultOp::SetAttr, "fsetxattr")?;
        self.inner.set_xattr(name, value, flags)
    }

    fn remove_xattr(&self, name: &str) -> io::Result<()> {
        self.check(FaultOp::SetAttr, "fremovexattr")?;
        self.inner.remove_xattr(name)
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.check(FaultOp::Read, "read")?;
        self.inner.read_at(buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.check(FaultOp::Write, "write")?;
        self.inner.write_at(buf, offset)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.check(FaultOp::Sync, "sync_data")?;
        self.inner.sync_data()
    }

    fn len(&self) -> io::Result<u64> {
        self.check(FaultOp::Metadata, "len")?;
        self.inner.len()
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.check(FaultOp::SetLen, "set_len")?;
        self.inner.set_len(len)
    }

    fn allocate(&self, mode: crate::Allocate, offset: u64, len: u64) -> io::Result<()> {
        // It changes the file's bytes or blocks, as a truncate does.
        self.check(FaultOp::SetLen, "fallocate")?;
        self.inner.allocate(mode, offset, len)
    }

    // The rest go through the checked calls above: every byte meets the
    // `Read` and `Write` rules, every length the `Metadata` ones.

    fn read_full_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        read_full(buf, offset, |buf, at| ForwardFile::read_at(self, buf, at))
    }

    fn write_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> io::Result<()> {
        write_joined(bufs, offset, |buf, at| ForwardFile::write_at(self, buf, at))
    }

    fn is_empty(&self) -> io::Result<bool> {
        Ok(ForwardFile::len(self)? == 0)
    }

    /// None: a copy in the kernel would pass no rule.
    fn as_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        None
    }
}
