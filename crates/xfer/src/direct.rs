//! Writes (and reads) that go around the page cache where they can.
//!
//! The sink and `xfer copy` write every byte of a file once, at its
//! offset, and sync the file before they rename it into place. Copying
//! those bytes into the page cache first, only to write them back at the
//! sync, cost about 1 CPU second per GiB on the machine measured, against
//! 0.1–0.4 s for the same writes with `O_DIRECT` (docs/lads.md, "Line
//! rate"). [`RangeFile`] is a file opened twice: a `pwrite` whose offset,
//! length and buffer are [`ALIGN`]-aligned goes through the `O_DIRECT`
//! descriptor, anything else (a file's unaligned tail) through the
//! ordinary one. `fsync` of either descriptor syncs the inode, so one sync
//! per file still covers every byte.
//!
//! A file system that refuses `O_DIRECT` at open (or a write with
//! `EINVAL`) is written through the page cache instead: slower, never
//! wrong. [`AlignedBuf`] is a buffer whose bytes start on an [`ALIGN`]
//! boundary, built from a `Vec` without `unsafe`.
//!
//! [`read_at`] is the read side: a range whose first page is in the page
//! cache is copied from it (`preadv2(RWF_NOWAIT)` on one page says so), a
//! cold range is read with `O_DIRECT` into the caller's aligned buffer, so
//! a cold file is not copied through the cache either.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};

use rustix::fs::{FallocateFlags, Mode, OFlags};

/// Alignment of direct I/O: offsets, lengths and buffer addresses are
/// multiples of it. 4 KiB covers 512-byte and 4Kn devices alike.
pub const ALIGN: usize = 4096;

/// Bytes read at once by [`RangeFile::read_back_crc`].
pub const MAX_READ_BACK: usize = 4 << 20;

/// A byte buffer whose contents start at an [`ALIGN`] boundary.
#[derive(Debug, Default)]
pub struct AlignedBuf {
    vec: Vec<u8>,
    start: usize,
    len: usize,
}

impl AlignedBuf {
    /// An empty buffer (allocates on the first [`AlignedBuf::set_len`]).
    pub fn new() -> AlignedBuf {
        AlignedBuf::default()
    }

    /// A buffer of `len` zero bytes.
    pub fn with_len(len: usize) -> AlignedBuf {
        let mut b = AlignedBuf::new();
        b.set_len(len);
        b
    }

    /// Make the buffer `len` bytes long. Bytes kept from before are left as
    /// they were (callers overwrite them); new memory is zeroed.
    pub fn set_len(&mut self, len: usize) {
        if self.vec.len() < len + ALIGN {
            self.vec = vec![0; len + ALIGN];
        }
        let addr = self.vec.as_ptr() as usize;
        self.start = (ALIGN - addr % ALIGN) % ALIGN;
        self.len = len;
    }

    /// Its length.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when it holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        &self.vec[self.start..self.start + self.len]
    }

    /// The bytes, to fill.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.vec[self.start..self.start + self.len]
    }
}

fn aligned(data: &[u8], offset: u64) -> bool {
    offset.is_multiple_of(ALIGN as u64) && (data.as_ptr() as usize).is_multiple_of(ALIGN)
}

/// Open `name` in `dir` a second time with `O_DIRECT` (read and `write`,
/// or read only); `None` when the file system refuses it.
pub fn open_direct(dir: &OwnedFd, name: &str, write: bool) -> Option<File> {
    let access = if write { OFlags::RDWR } else { OFlags::RDONLY };
    rustix::fs::openat(
        dir,
        name,
        access | OFlags::DIRECT | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()
    .map(File::from)
}

/// Open the file at `path` a second time with `O_DIRECT` for reading;
/// `None` when its file system refuses it.
pub fn open_direct_path(path: &std::path::Path) -> Option<File> {
    rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::DIRECT | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()
    .map(File::from)
}

/// A file written at offsets, directly where the range is aligned.
#[derive(Debug)]
pub struct RangeFile {
    file: File,
    direct: Option<File>,
    /// A direct write failed with `EINVAL`: use the page cache from now on.
    direct_refused: AtomicBool,
}

impl RangeFile {
    /// `file` for every write, or with `direct` (the same file opened with
    /// `O_DIRECT`, read and write) for the aligned ones. With `direct`, the
    /// ordinary descriptor is told the access is random, so that
    /// [`RangeFile::read_back_crc`] reads nothing twice (see
    /// [`open_for_direct_reads`]).
    pub fn new(file: File, direct: Option<File>) -> RangeFile {
        if direct.is_some() {
            let _ = rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::Random);
        }
        RangeFile {
            file,
            direct,
            direct_refused: AtomicBool::new(false),
        }
    }

    /// The ordinary descriptor (metadata, reads, sync).
    pub fn file(&self) -> &File {
        &self.file
    }

    /// The crc32c of the first `size` bytes as the device holds them: read
    /// with [`read_at`] in [`MAX_READ_BACK`] pieces, directly (around the
    /// page cache) where the cache does not hold them, which after direct
    /// writes is everywhere but an unaligned tail.
    pub fn read_back_crc(&self, size: u64) -> io::Result<u32> {
        let mut buf = AlignedBuf::with_len(MAX_READ_BACK.min(size as usize));
        let mut crc = 0u32;
        let mut offset = 0u64;
        while offset < size {
            let n = (size - offset).min(MAX_READ_BACK as u64) as usize;
            buf.set_len(n);
            read_at(&self.file, self.direct.as_ref(), buf.as_mut_slice(), offset)?;
            crc = crc32c::crc32c_append(crc, buf.as_slice());
            offset += n as u64;
        }
        Ok(crc)
    }

    /// True while aligned writes go around the page cache.
    pub fn is_direct(&self) -> bool {
        self.direct.is_some() && !self.direct_refused.load(Ordering::Relaxed)
    }

    /// Allocate the file's blocks up to `size` (its length becomes at least
    /// `size`). Direct writes into allocated blocks within the file's size
    /// are overwrites, which ext4 lets run in parallel under a shared inode
    /// lock, and the file is laid out in one piece. A file system without
    /// `fallocate` is left as it is.
    pub fn preallocate(&self, size: u64) -> io::Result<()> {
        if size == 0 {
            return Ok(());
        }
        match rustix::fs::fallocate(self.file.as_fd(), FallocateFlags::empty(), 0, size) {
            Ok(()) => Ok(()),
            Err(rustix::io::Errno::OPNOTSUPP | rustix::io::Errno::NOSYS) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Write all of `data` at `offset`.
    pub fn write_at(&self, mut data: &[u8], mut offset: u64) -> io::Result<()> {
        if let Some(direct) = self.direct.as_ref().filter(|_| self.is_direct()) {
            if aligned(data, offset) {
                let whole = data.len() - data.len() % ALIGN;
                let mut done = 0;
                while done < whole {
                    match direct.write_at(&data[done..whole], offset + done as u64) {
                        Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                        Ok(n) => {
                            done += n;
                            // A short write that ends unaligned: finish
                            // through the page cache.
                            if !n.is_multiple_of(ALIGN) {
                                break;
                            }
                        }
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e)
                            if e.raw_os_error()
                                == Some(rustix::io::Errno::INVAL.raw_os_error()) =>
                        {
                            self.direct_refused.store(true, Ordering::Relaxed);
                            break;
                        }
                        Err(e) => return Err(e),
                    }
                }
                data = &data[done..];
                offset += done as u64;
            }
        }
        self.file.write_all_at(data, offset)
    }
}

/// Read `buf.len()` bytes at `offset` of `file`. With `direct` (the same
/// file opened with `O_DIRECT`; `file` should have been opened by
/// [`open_for_direct_reads`]), one page at `offset` is probed first: a read
/// that must not wait (`RWF_NOWAIT`) says whether the page cache holds it.
/// If it does, the range is read from the cache; if not, its aligned part
/// is read from the device into `buf` (which must then be aligned) without
/// passing through the cache, and only an unaligned tail through it. A read
/// past the end of the file is an `UnexpectedEof` error, as
/// `read_exact_at`.
pub fn read_at(file: &File, direct: Option<&File>, buf: &mut [u8], offset: u64) -> io::Result<()> {
    let Some(direct) = direct.filter(|_| aligned(buf, offset) && !buf.is_empty()) else {
        return file.read_exact_at(buf, offset);
    };
    let probe = buf.len().min(ALIGN);
    match rustix::io::preadv2(
        file.as_fd(),
        &mut [io::IoSliceMut::new(&mut buf[..probe])],
        offset,
        rustix::io::ReadWriteFlags::NOWAIT,
    ) {
        // Cached (or the end of the file): the page cache serves it.
        Ok(_) => return file.read_exact_at(buf, offset),
        Err(rustix::io::Errno::AGAIN) => {}
        // NOWAIT unsupported: no way to tell; the page cache.
        Err(_) => return file.read_exact_at(buf, offset),
    }
    let whole = buf.len() - buf.len() % ALIGN;
    let mut done = 0;
    while done < whole {
        match direct.read_at(&mut buf[done..whole], offset + done as u64) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => {
                done += n;
                if !n.is_multiple_of(ALIGN) {
                    break;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::INVAL.raw_os_error()) => break,
            Err(e) => return Err(e),
        }
    }
    file.read_exact_at(&mut buf[done..], offset + done as u64)
}

/// Open `path` for reads that [`read_at`] sends around the cache: the
/// ordinary descriptor is told the access is random
/// (`POSIX_FADV_RANDOM`), so that a probe of one uncached page reads that
/// page and does not start the kernel's readahead (8 MiB here) of bytes the
/// direct reads fetch anyway.
pub fn open_for_direct_reads(path: &std::path::Path) -> io::Result<(File, Option<File>)> {
    let file = File::open(path)?;
    let direct = open_direct_path(path);
    if direct.is_some() {
        let _ = rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::Random);
    }
    Ok((file, direct))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir_fd(path: &std::path::Path) -> OwnedFd {
        rustix::fs::open(path, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).unwrap()
    }

    #[test]
    fn aligned_buffers_start_on_a_boundary_whatever_their_length() {
        let mut b = AlignedBuf::new();
        for len in [0, 1, 4095, 4096, 1 << 20, 17, 3 << 20] {
            b.set_len(len);
            assert_eq!(b.len(), len);
            assert_eq!(b.as_slice().as_ptr() as usize % ALIGN, 0);
            b.as_mut_slice().fill(7);
            assert!(b.as_slice().iter().all(|&x| x == 7));
        }
    }

    /// Whatever mix of aligned and unaligned ranges is written, in any
    /// order, the file holds the bytes, directly or not.
    #[test]
    fn ranges_land_at_their_offsets_direct_or_buffered() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let size = 3 * (1 << 20) + 1234;
        let want: Vec<u8> = (0..size).map(|i| (i * 7 % 251) as u8).collect();
        let file = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        let direct = open_direct(&dir_fd(dir.path()), "f", true);
        let f = RangeFile::new(file, direct);
        f.preallocate(size as u64).unwrap();
        let chunk = 1 << 20;
        let mut buf = AlignedBuf::new();
        for start in [2 * chunk, 0, 3 * chunk, chunk] {
            let end = (start + chunk).min(size);
            buf.set_len(end - start);
            buf.as_mut_slice().copy_from_slice(&want[start..end]);
            f.write_at(buf.as_slice(), start as u64).unwrap();
        }
        // An unaligned buffer and offset go through the page cache.
        f.write_at(&want[10..5000], 10).unwrap();
        // Where the file system takes O_DIRECT, no write fell back, and
        // (a disk's file system; tmpfs is all cache) the aligned ranges
        // skipped the page cache: a read that must not wait finds nothing.
        assert_eq!(f.is_direct(), f.direct.is_some());
        const TMPFS_MAGIC: i64 = 0x0102_1994;
        #[allow(clippy::unnecessary_cast)] // f_type's width differs between targets
        let on_disk = rustix::fs::statfs(dir.path()).unwrap().f_type as i64 != TMPFS_MAGIC;
        if f.is_direct() && on_disk {
            let mut probe = [0u8; 4096];
            let cached = rustix::io::preadv2(
                f.file(),
                &mut [io::IoSliceMut::new(&mut probe)],
                2 * chunk as u64,
                rustix::io::ReadWriteFlags::NOWAIT,
            );
            assert_eq!(cached, Err(rustix::io::Errno::AGAIN));
        }
        f.file().sync_all().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), want);

        // And read back both ways: cached, then cold through O_DIRECT,
        // which leaves the cold range out of the cache (but for the probed
        // page).
        let (file, direct) = open_for_direct_reads(&path).unwrap();
        let mut back = AlignedBuf::with_len(chunk);
        read_at(&file, direct.as_ref(), back.as_mut_slice(), chunk as u64).unwrap();
        assert_eq!(back.as_slice(), &want[chunk..2 * chunk]);
        let _ = rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::DontNeed);
        back.set_len(size - 3 * chunk);
        read_at(
            &file,
            direct.as_ref(),
            back.as_mut_slice(),
            3 * chunk as u64,
        )
        .unwrap();
        assert_eq!(back.as_slice(), &want[3 * chunk..]);
        back.set_len(chunk);
        read_at(&file, direct.as_ref(), back.as_mut_slice(), 0).unwrap();
        assert_eq!(back.as_slice(), &want[..chunk]);
        if direct.is_some() && on_disk {
            let mut probe = [0u8; 4096];
            let cached = rustix::io::preadv2(
                &file,
                &mut [io::IoSliceMut::new(&mut probe)],
                (chunk / 2) as u64,
                rustix::io::ReadWriteFlags::NOWAIT,
            );
            assert_eq!(cached, Err(rustix::io::Errno::AGAIN));
        }
        let mut past = AlignedBuf::with_len(8192);
        let e = read_at(
            &file,
            direct.as_ref(),
            past.as_mut_slice(),
            size as u64 - 100,
        )
        .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
    }
}
