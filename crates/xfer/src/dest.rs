//! The destination tree, shared by the sink and `xfer copy`: paths
//! checked and walked from a root descriptor, and files put in place
//! through partial copies.
//!
//! Paths: every relative path is checked component by component
//! ([`components`]: no empty, `.`, `..` or NUL components, never
//! absolute, no name ending in [`PART_SUFFIX`]), and directories are then
//! opened from the root's descriptor with `openat(O_NOFOLLOW |
//! O_DIRECTORY)` one component at a time ([`open_dirs`], [`find_dirs`]),
//! so neither a `..` nor a symlink planted inside the root can lead
//! outside it. [`stat_file`] answers what is at a path without creating
//! anything: only regular files, never through a symlink.
//!
//! Files: a [`PartialCopy`] is written as `.NAME.sluice-part` beside its
//! final name and renamed into place by [`PartialCopy::finish`] only after
//! the whole file's crc32c and size were verified, its mode and mtime
//! applied and (with `fsync`) the file synced; the directory is synced
//! after the rename. Nothing ever appears under the final name unverified.
//! [`make_symlink`] makes links the same way (a hidden name renamed over
//! the final one), so a file or link already there is replaced, never
//! written through.

use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use rustix::fs::{Mode, OFlags, Timespec, Timestamps};

use crate::direct::{open_direct, RangeFile};
use crate::wire::DestStat;

/// Suffix of partial copies.
pub const PART_SUFFIX: &str = ".sluice-part";

/// Blocks whose crcs a file keeps for its final check without a read-back
/// (a 16 GiB file of 1 MiB objects; about 1 MiB of memory).
pub const MAX_TRACKED_BLOCKS: usize = 16_384;

fn other(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

/// Check a `/`-separated relative path and split it into components.
pub fn components(path: &str) -> Result<Vec<String>, String> {
    if path.starts_with('/') {
        return Err(format!("absolute path {path:?} refused"));
    }
    let mut out = Vec::new();
    for c in path.split('/') {
        match c {
            "" if out.is_empty() && path.is_empty() => {}
            "" => return Err(format!("empty component in {path:?}")),
            "." | ".." => return Err(format!("{c:?} in {path:?} refused")),
            c if c.contains('\0') => return Err(format!("NUL in {path:?}")),
            c if c.ends_with(PART_SUFFIX) => {
                return Err(format!(
                    "{path:?}: names ending in {PART_SUFFIX} are reserved"
                ))
            }
            c => out.push(c.to_owned()),
        }
    }
    Ok(out)
}

/// Open the existing directory `dirs` under `root`, one component at a
/// time, never following a symlink and never creating anything.
pub fn find_dirs(root: &OwnedFd, dirs: &[String]) -> io::Result<OwnedFd> {
    let mut fd = rustix::fs::openat(
        root,
        ".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    for d in dirs {
        fd = rustix::fs::openat(
            &fd,
            d.as_str(),
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
    }
    Ok(fd)
}

/// What is at `dirs/name` under `root`: a regular file's size and mtime
/// (and crc32c when `checksum_if_size` names its size), else absent.
pub fn stat_file(
    root: &OwnedFd,
    dirs: &[String],
    name: &str,
    checksum_if_size: Option<u64>,
) -> io::Result<DestStat> {
    let Ok(dir) = find_dirs(root, dirs) else {
        return Ok(DestStat::Absent);
    };
    let st = match rustix::fs::statat(&dir, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => st,
        Err(_) => return Ok(DestStat::Absent),
    };
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
        return Ok(DestStat::Absent);
    }
    let size = st.st_size as u64;
    let crc = match checksum_if_size {
        Some(want) if want == size => {
            let fd = rustix::fs::openat(
                &dir,
                name,
                OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )?;
            Some(crc_of(&File::from(fd), size)?)
        }
        _ => None,
    };
    Ok(DestStat::File {
        size,
        mtime_sec: st.st_mtime as i64,
        mtime_nsec: st.st_mtime_nsec as u32,
        crc,
    })
}

/// crc32c of the first `size` bytes of `file`.
pub fn crc_of(file: &File, size: u64) -> io::Result<u32> {
    let mut crc = 0u32;
    let mut buf = vec![0u8; 1 << 20];
    let mut offset = 0u64;
    while offset < size {
        let n = (size - offset).min(buf.len() as u64) as usize;
        file.read_exact_at(&mut buf[..n], offset)?;
        crc = crc32c::crc32c_append(crc, &buf[..n]);
        offset += n as u64;
    }
    Ok(crc)
}

/// Make (or replace) the symlink `name` in `dir` pointing at `target`:
/// created under the hidden partial name, then renamed over `name`, so a
/// file or link already there is replaced, never written through. A
/// directory there is left alone (the rename fails).
pub fn make_symlink(dir: &OwnedFd, name: &str, target: &str) -> io::Result<()> {
    if let Ok(old) = rustix::fs::readlinkat(dir, name, Vec::new()) {
        if old.as_bytes() == target.as_bytes() {
            return Ok(());
        }
    }
    let part = format!(".{name}{PART_SUFFIX}");
    match rustix::fs::unlinkat(dir, part.as_str(), rustix::fs::AtFlags::empty()) {
        Ok(()) | Err(rustix::io::Errno::NOENT) => {}
        Err(e) => return Err(e.into()),
    }
    rustix::fs::symlinkat(target, dir, part.as_str())?;
    if let Err(e) = rustix::fs::renameat(dir, part.as_str(), dir, name) {
        let _ = rustix::fs::unlinkat(dir, part.as_str(), rustix::fs::AtFlags::empty());
        return Err(e.into());
    }
    Ok(())
}

/// Open (creating as needed) the directory `dirs` under `root`, one
/// component at a time, never following a symlink.
pub fn open_dirs(root: &OwnedFd, dirs: &[String]) -> io::Result<OwnedFd> {
    let mut fd = rustix::fs::openat(
        root,
        ".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    for d in dirs {
        match rustix::fs::mkdirat(&fd, d.as_str(), Mode::from_raw_mode(0o755)) {
            Ok(()) | Err(rustix::io::Errno::EXIST) => {}
            Err(e) => return Err(e.into()),
        }
        fd = rustix::fs::openat(
            &fd,
            d.as_str(),
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| match e {
            rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR => io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("{d:?} is a symlink or not a directory"),
            ),
            e => e.into(),
        })?;
    }
    Ok(fd)
}

/// A file being received: its partial copy, what was written to it, and
/// what it must become.
#[derive(Debug)]
pub struct PartialCopy {
    /// The directory holding the partial copy and the final name.
    pub dir: OwnedFd,
    /// The final name.
    pub name: String,
    /// The partial copy's name (`.NAME.sluice-part`).
    pub part: String,
    file: RangeFile,
    /// The announced size.
    pub size: u64,
    mode: u32,
    mtime: Timespec,
    /// Bytes of the file that blocks covered so far (for logs).
    written: AtomicU64,
    /// An earlier partial copy was kept: its bytes were not checked this
    /// session, so `finish` reads the whole file back.
    pub resumed: bool,
    /// Blocks written this session, offset → (length, crc32c), each
    /// checked against its crc before the write; `None` once more than
    /// [`MAX_TRACKED_BLOCKS`] (then `finish` reads the file back).
    blocks: Mutex<Option<BTreeMap<u64, (u64, u32)>>>,
    /// Writes handed to a writer thread and not yet done.
    writes: Mutex<usize>,
    writes_done: Condvar,
}

impl PartialCopy {
    /// Start the file `name` in `dir` (a directory opened by
    /// [`open_dirs`]): `size` bytes, permission bits `mode`, modification
    /// time `mtime`. With `resume`, an existing partial copy is kept (and
    /// [`PartialCopy::resumed`] says so); otherwise it starts empty. With
    /// `direct`, the copy is preallocated to `size` and aligned blocks are
    /// written around the page cache ([`RangeFile`]); for callers that sync
    /// the file before its rename anyway.
    pub fn create(
        dir: OwnedFd,
        name: String,
        size: u64,
        mode: u32,
        mtime: Timespec,
        resume: bool,
        direct: bool,
    ) -> io::Result<PartialCopy> {
        let part = format!(".{name}{PART_SUFFIX}");
        // Resume keeps an existing partial copy; otherwise (or when there
        // is none) start a fresh, empty one.
        let existing = if resume {
            match rustix::fs::openat(
                &dir,
                part.as_str(),
                OFlags::RDWR | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            ) {
                Ok(fd) => Some(fd),
                Err(rustix::io::Errno::NOENT) => None,
                Err(e) => return Err(e.into()),
            }
        } else {
            None
        };
        let resumed = existing.is_some();
        let fd = match existing {
            Some(fd) => fd,
            None => rustix::fs::openat(
                &dir,
                part.as_str(),
                OFlags::RDWR | OFlags::CREATE | OFlags::TRUNC | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o600),
            )?,
        };
        let file = File::from(fd);
        if !file.metadata()?.is_file() {
            return Err(other(format!("{part} is not a regular file")));
        }
        if resumed && file.metadata()?.len() > size {
            file.set_len(size)?;
        }
        let file = if direct {
            let file = RangeFile::new(file, open_direct(&dir, &part, true));
            file.preallocate(size)?;
            file
        } else {
            RangeFile::new(file, None)
        };
        Ok(PartialCopy {
            dir,
            name,
            part,
            file,
            size,
            mode,
            mtime,
            written: AtomicU64::new(0),
            resumed,
            blocks: Mutex::new(Some(BTreeMap::new())),
            writes: Mutex::new(0),
            writes_done: Condvar::new(),
        })
    }

    /// Write a block whose crc32c was checked (or computed) by the caller,
    /// and remember it for the final check.
    pub fn write(&self, data: &[u8], offset: u64, crc: u32) -> io::Result<()> {
        self.file.write_at(data, offset)?;
        self.written.fetch_add(data.len() as u64, Ordering::Relaxed);
        let mut blocks = sluice_env::lock(&self.blocks);
        if let Some(map) = blocks.as_mut() {
            map.insert(offset, (data.len() as u64, crc));
            if map.len() > MAX_TRACKED_BLOCKS {
                *blocks = None;
            }
        }
        Ok(())
    }

    /// Count a write handed to another thread until the returned token is
    /// dropped. The sink takes it under the lock that hands the file out,
    /// so that [`PartialCopy::wait_writes`], once the file was taken from
    /// that map, waits for every write there will be.
    pub fn begin_write(self: &Arc<Self>) -> PendingWrite {
        *sluice_env::lock(&self.writes) += 1;
        PendingWrite(Arc::clone(self))
    }

    /// Wait until no counted write is in progress (before the file is
    /// verified, synced and renamed, or dropped).
    pub fn wait_writes(&self) {
        let mut n = sluice_env::lock(&self.writes);
        while *n > 0 {
            n = sluice_env::wait(&self.writes_done, n);
        }
    }

    /// The crc32c of the whole file from the crcs of this session's
    /// blocks, when they cover it exactly; `None` otherwise.
    fn crc_from_blocks(&self, size: u64) -> Option<u32> {
        if self.resumed {
            return None;
        }
        let blocks = sluice_env::lock(&self.blocks);
        let blocks = blocks.as_ref()?;
        let mut expect = 0u64;
        for (&offset, &(len, _)) in blocks {
            if offset != expect {
                return None;
            }
            expect += len;
        }
        (expect == size).then(|| crate::crc::combine_all(blocks.values().copied()))
    }

    /// True while aligned blocks are written around the page cache.
    pub fn is_direct(&self) -> bool {
        self.file.is_direct()
    }

    /// Remove the partial copy (a failed or cancelled file).
    pub fn discard(&self) {
        let _ = rustix::fs::unlinkat(&self.dir, self.part.as_str(), rustix::fs::AtFlags::empty());
    }

    /// Verify the file against the source's size and crc32c, apply its
    /// mode and mtime, sync it (unless `fsync` is off) and rename it into
    /// place. The crc is checked before the sync, from the crcs of this
    /// session's blocks when they tile the file (each was checked or
    /// computed before its write) or else by reading the file back; with
    /// `read_back`, it is checked after the sync instead, by reading every
    /// byte back from the device (`xfer copy --verify`).
    pub fn finish(&self, size: u64, crc: u32, fsync: bool, read_back: bool) -> io::Result<()> {
        if size != self.size {
            return Err(other(format!(
                "size {size} differs from the announced {}",
                self.size
            )));
        }
        let len = self.file.file().metadata()?.len();
        if len != size {
            self.file.file().set_len(size)?;
        }
        let check = |got: u32| {
            if got == crc {
                Ok(())
            } else {
                Err(other(format!(
                    "verification failed: crc32c {got:08x} != source {crc:08x} ({} of {size} bytes written this run)",
                    self.written.load(Ordering::Relaxed)
                )))
            }
        };
        if !read_back {
            check(match self.crc_from_blocks(size) {
                Some(got) => got,
                None => crc_of(self.file.file(), size)?,
            })?;
        }
        rustix::fs::fchmod(self.file.file(), Mode::from_raw_mode(self.mode & 0o7777))?;
        rustix::fs::futimens(
            self.file.file(),
            &Timestamps {
                last_access: self.mtime,
                last_modification: self.mtime,
            },
        )?;
        if fsync {
            self.file.file().sync_all()?;
        }
        if read_back {
            check(self.file.read_back_crc(size)?)?;
        }
        rustix::fs::renameat(&self.dir, self.part.as_str(), &self.dir, self.name.as_str())?;
        if fsync {
            rustix::fs::fsync(&self.dir)?;
        }
        Ok(())
    }
}

/// A write of a [`PartialCopy`] handed to another thread
/// ([`PartialCopy::begin_write`]): counted until it is dropped, done or
/// failed, and [`PartialCopy::wait_writes`] waits for it.
#[derive(Debug)]
#[must_use = "the write is counted until the token is dropped"]
pub struct PendingWrite(Arc<PartialCopy>);

impl std::ops::Deref for PendingWrite {
    type Target = PartialCopy;

    fn deref(&self) -> &PartialCopy {
        &self.0
    }
}

impl Drop for PendingWrite {
    fn drop(&mut self) {
        let mut n = sluice_env::lock(&self.0.writes);
        // INVARIANT: each token was counted once by begin_write.
        *n = n.checked_sub(1).expect("a write counted once");
        if *n == 0 {
            self.0.writes_done.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn components_refuse_escapes() {
        assert_eq!(components("a/b").unwrap(), vec!["a", "b"]);
        assert_eq!(components("").unwrap(), Vec::<String>::new());
        for bad in [
            "/etc/passwd",
            "a/../b",
            "..",
            "./a",
            "a//b",
            "a/",
            "a\0b",
            "x/.f.sluice-part",
        ] {
            assert!(components(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn wait_writes_returns_once_every_pending_write_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let root = rustix::fs::open(
            dir.path(),
            OFlags::RDONLY | OFlags::DIRECTORY,
            Mode::empty(),
        )
        .unwrap();
        let mtime = Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        let copy = PartialCopy::create(root, "f".into(), 8, 0o644, mtime, false, false);
        let copy = Arc::new(copy.unwrap());
        let (first, second) = (copy.begin_write(), copy.begin_write());
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter = {
            let copy = Arc::clone(&copy);
            std::thread::spawn(move || {
                copy.wait_writes();
                tx.send(()).unwrap();
            })
        };
        drop(first);
        let wait = std::time::Duration::from_millis(100);
        assert!(
            rx.recv_timeout(wait).is_err(),
            "returned with a write pending"
        );
        drop(second);
        rx.recv_timeout(std::time::Duration::from_secs(10)).unwrap();
        waiter.join().unwrap();
        // No write pending: no wait.
        copy.wait_writes();
    }

    #[test]
    fn open_dirs_refuses_symlinks_inside_the_root() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("link")).unwrap();
        let root = rustix::fs::open(
            dir.path(),
            OFlags::RDONLY | OFlags::DIRECTORY,
            Mode::empty(),
        )
        .unwrap();
        let e = open_dirs(&root, &["link".into(), "x".into()]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied);
        assert!(!outside.path().join("x").exists());
        open_dirs(&root, &["a".into(), "b".into()]).unwrap();
        assert!(dir.path().join("a/b").is_dir());
    }
}
