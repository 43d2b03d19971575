//! The sink: `sluice xfer serve --root DIR --listen ADDR`.
//!
//! One thread per connection reads messages in order and answers each.
//! Files are written to a partial copy `.NAME.sluice-part` beside their
//! final name and renamed into place only after `FileDone` verified the
//! whole file's crc32c and size, applied mode and mtime and synced the file;
//! the directory is synced after the rename. That end of a file (read
//! back, fsync, rename) runs on a pool of [`FINISHERS`] threads, so a
//! connection keeps writing the blocks of other files while one is synced;
//! the pool's queue is bounded ([`FINISH_QUEUE`]) and a full queue holds
//! the connection back. With `fsync` off ([`SinkOptions::fsync`], `serve
//! --no-fsync`), the file is renamed into place without either sync, as
//! rsync does by default: a crash of the sink's machine can then leave a
//! file under its final name with bytes missing. A broken connection, a bad
//! block or a failed verification never leaves a file under its final
//! name: at worst a partial copy, which a resumed transfer continues
//! (`NewFile` with `resume`) and any other transfer truncates.
//!
//! Paths: the destination and every file path are checked component by
//! component (no empty, `.`, `..` or NUL components, never absolute), and
//! the directories are then walked from the root's descriptor with
//! `openat(O_NOFOLLOW | O_DIRECTORY)` one component at a time, so neither a
//! `..` nor a symlink planted inside the root can lead outside it. The same
//! walk, without creating anything, answers `Stat`: it reports only regular
//! files (`fstatat(AT_SYMLINK_NOFOLLOW)`) under the root, and a path with a
//! symlink in it reads as absent. `Symlink` stores the link's target as
//! given, under a hidden name renamed over the final one; the sink never
//! resolves a link it made, and files replace a link rather than write
//! through it (the partial copy is renamed over the link).
//!
//! Authentication: a connection must present the sink's token in `Hello`
//! (compared in constant time) when one is configured, and a client
//! certificate when `--client-ca` is configured (rustls refuses the
//! handshake otherwise). A sink with neither refuses to start.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{self, Read};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::{Arc, Mutex, Weak};
use std::thread;

use rustix::fs::{Mode, OFlags, Timespec, Timestamps};
use rustls::ServerConfig;

use crate::tls::{Channel, Writer};
use crate::wire::{self, DestStat, ErrorCode, Message};

mod conn;
use conn::*;

/// Suffix of partial copies.
pub const PART_SUFFIX: &str = ".sluice-part";
/// Threads that verify, sync and rename finished files.
pub const FINISHERS: usize = 4;
/// Finished files waiting for a finisher, at most.
pub const FINISH_QUEUE: usize = 256;

/// How a sink runs.
#[derive(Clone)]
pub struct SinkOptions {
    /// Directory every received file lands under.
    pub root: PathBuf,
    /// TLS configuration (certificate, optional client CA).
    pub tls: Arc<ServerConfig>,
    /// Required token, if any.
    pub token: Option<Vec<u8>>,
    /// True when the TLS configuration requires client certificates.
    pub mutual_tls: bool,
    /// Sync each file and its directory before and after the rename
    /// (false: `--no-fsync`, rsync's default durability).
    pub fsync: bool,
}

/// Counters of a running sink.
#[derive(Debug, Default)]
pub struct SinkStats {
    /// Connections accepted past authentication.
    pub connections: AtomicU64,
    /// Connections refused (handshake, token, version, protocol).
    pub refused: AtomicU64,
    /// Files verified and renamed into place.
    pub files: AtomicU64,
    /// Files that failed verification.
    pub failed: AtomicU64,
    /// Block bytes written.
    pub bytes: AtomicU64,
    /// Symlinks made or found already in place.
    pub links: AtomicU64,
}

struct Shared {
    root: OwnedFd,
    options: SinkOptions,
    sessions: Mutex<HashMap<u64, Weak<Session>>>,
    next_session: AtomicU64,
    stats: Arc<SinkStats>,
    stop: AtomicBool,
    /// Finished files for the finisher pool; dropping the last sender
    /// (with `Shared`) ends the pool.
    finish: SyncSender<Finish>,
}

/// A file whose `FileDone` arrived: verify, sync, rename, answer.
struct Finish {
    file: Arc<SinkFile>,
    id: u32,
    size: u64,
    crc: u32,
    writer: Writer,
    stats: Arc<SinkStats>,
    fsync: bool,
}

impl Finish {
    fn run(self) {
        let reply = match finish(&self.file, self.size, self.crc, self.fsync) {
            Ok(()) => {
                self.stats.files.fetch_add(1, Ordering::Relaxed);
                Message::FileOk { file: self.id }
            }
            Err(e) => {
                self.stats.failed.fetch_add(1, Ordering::Relaxed);
                let f = &self.file;
                let _ = rustix::fs::unlinkat(&f.dir, f.part.as_str(), rustix::fs::AtFlags::empty());
                Message::FileFailed {
                    file: self.id,
                    reason: format!("{}: {e}", f.name),
                }
            }
        };
        // The source may have gone; its rerun sends the file again.
        let _ = self.writer.message(&reply);
    }
}

fn finisher_pool() -> SyncSender<Finish> {
    let (tx, rx) = mpsc::sync_channel::<Finish>(FINISH_QUEUE);
    let rx = Arc::new(Mutex::new(rx));
    for _ in 0..FINISHERS {
        let rx: Arc<Mutex<Receiver<Finish>>> = Arc::clone(&rx);
        thread::spawn(move || loop {
            let job = rx.lock().unwrap_or_else(|p| p.into_inner()).recv();
            match job {
                Ok(job) => job.run(),
                Err(_) => return,
            }
        });
    }
    tx
}

struct Session {
    dest: Vec<String>,
    files: Mutex<HashMap<u32, Arc<SinkFile>>>,
    next_file: AtomicU32,
}

struct SinkFile {
    dir: OwnedFd,
    name: String,
    part: String,
    file: File,
    size: u64,
    mode: u32,
    mtime: Timespec,
    /// Bytes of the file that blocks covered so far (for logs).
    written: AtomicU64,
    /// An earlier partial copy was kept: its bytes were not checked this
    /// session, so `finish` reads the whole file back.
    resumed: bool,
    /// Blocks written this session, offset → (length, crc32c), each
    /// checked against its crc before the write; `None` once more than
    /// [`MAX_TRACKED_BLOCKS`] (then `finish` reads the file back).
    blocks: Mutex<Option<BTreeMap<u64, (u64, u32)>>>,
}

/// Blocks whose crcs a file keeps for its final check without a read-back
/// (a 16 GiB file of 1 MiB objects; about 1 MiB of memory).
pub const MAX_TRACKED_BLOCKS: usize = 16_384;

impl SinkFile {
    /// The crc32c of the whole file from the crcs of this session's
    /// blocks, when they cover it exactly; `None` otherwise.
    fn crc_from_blocks(&self, size: u64) -> Option<u32> {
        if self.resumed {
            return None;
        }
        let blocks = self.blocks.lock().unwrap_or_else(|p| p.into_inner());
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
}

/// A bound sink; [`Sink::run`] serves it.
pub struct Sink {
    listener: TcpListener,
    shared: Arc<Shared>,
}

/// Stops a sink started with [`Sink::spawn`] when dropped.
pub struct SinkHandle {
    addr: SocketAddr,
    shared: Arc<Shared>,
    thread: Option<thread::JoinHandle<()>>,
}

impl SinkHandle {
    /// The address the sink listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Counters.
    pub fn stats(&self) -> &SinkStats {
        &self.shared.stats
    }
}

impl Drop for SinkHandle {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop.
        let _ = TcpStream::connect(self.addr);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn other(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

impl Sink {
    /// Open the root and bind the listener.
    pub fn bind(addr: &str, options: SinkOptions) -> io::Result<Sink> {
        if options.token.is_none() && !options.mutual_tls {
            return Err(other(
                "refusing to serve without authentication: give a token (--token-file) or a client CA (--client-ca)"
                    .into(),
            ));
        }
        let root = rustix::fs::open(
            &options.root,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| {
            io::Error::new(
                io::Error::from(e).kind(),
                format!("{}: {e}", options.root.display()),
            )
        })?;
        let listener = TcpListener::bind(addr)
            .map_err(|e| io::Error::new(e.kind(), format!("listen on {addr}: {e}")))?;
        Ok(Sink {
            listener,
            shared: Arc::new(Shared {
                root,
                options,
                sessions: Mutex::new(HashMap::new()),
                next_session: AtomicU64::new(1),
                stats: Arc::new(SinkStats::default()),
                stop: AtomicBool::new(false),
                finish: finisher_pool(),
            }),
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serve connections until the process ends (or the handle stops it).
    pub fn run(self) {
        for stream in self.listener.incoming() {
            if self.shared.stop.load(Ordering::SeqCst) {
                break;
            }
            let Ok(stream) = stream else { continue };
            let shared = Arc::clone(&self.shared);
            thread::spawn(move || {
                let peer = stream.peer_addr().ok();
                if let Err(e) = serve_connection(&shared, stream) {
                    log(peer, &e);
                }
            });
        }
    }

    /// Serve on a background thread; the handle stops it when dropped.
    pub fn spawn(self) -> io::Result<SinkHandle> {
        let addr = self.local_addr()?;
        let shared = Arc::clone(&self.shared);
        let thread = thread::spawn(move || self.run());
        Ok(SinkHandle {
            addr,
            shared,
            thread: Some(thread),
        })
    }
}

fn log(peer: Option<SocketAddr>, e: &io::Error) {
    let peer = peer.map_or_else(|| "?".to_owned(), |p| p.to_string());
    tracing::warn!(%peer, "sluice xfer serve: {e}");
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
fn find_dirs(root: &OwnedFd, dirs: &[String]) -> io::Result<OwnedFd> {
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
fn stat_file(
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
fn make_symlink(dir: &OwnedFd, name: &str, target: &str) -> io::Result<()> {
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
fn open_dirs(root: &OwnedFd, dirs: &[String]) -> io::Result<OwnedFd> {
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
