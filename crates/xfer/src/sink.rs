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

struct Conn<'a> {
    shared: &'a Shared,
    writer: Writer,
    session: Option<Arc<Session>>,
}

fn refuse(writer: &Writer, code: ErrorCode, message: String) -> io::Error {
    let _ = writer.message(&Message::Error {
        code: code as u16,
        message: message.clone(),
    });
    writer.close();
    io::Error::new(io::ErrorKind::PermissionDenied, message)
}

fn same_token(a: &[u8], b: &[u8]) -> bool {
    // Constant time in the contents (the length is not secret).
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn serve_connection(shared: &Shared, tcp: TcpStream) -> io::Result<()> {
    let channel = match Channel::server(tcp, Arc::clone(&shared.options.tls)) {
        Ok(c) => c,
        Err(e) => {
            shared.stats.refused.fetch_add(1, Ordering::Relaxed);
            return Err(io::Error::new(e.kind(), format!("TLS handshake: {e}")));
        }
    };
    let Channel { mut reader, writer } = channel;
    let mut conn = Conn {
        shared,
        writer,
        session: None,
    };
    let mut buf = Vec::new();
    let result = conn.hello(&mut reader, &mut buf).and_then(|()| {
        shared.stats.connections.fetch_add(1, Ordering::Relaxed);
        conn.serve(&mut reader, &mut buf)
    });
    if result.is_err() {
        conn.writer.abort();
    }
    result
}

impl Conn<'_> {
    fn hello(&mut self, reader: &mut impl Read, buf: &mut Vec<u8>) -> io::Result<()> {
        let refused = |e| {
            self.shared.stats.refused.fetch_add(1, Ordering::Relaxed);
            e
        };
        let msg = wire::read_message(reader, buf)
            .map_err(|e| refused(refuse(&self.writer, ErrorCode::Protocol, e.to_string())))?;
        let Some(Message::Hello {
            version,
            token,
            session,
            dest,
        }) = msg
        else {
            return Err(refused(refuse(
                &self.writer,
                ErrorCode::Protocol,
                "expected Hello".into(),
            )));
        };
        if version != wire::VERSION {
            return Err(refused(refuse(
                &self.writer,
                ErrorCode::Version,
                format!(
                    "protocol version {version} not supported (this sink speaks {})",
                    wire::VERSION
                ),
            )));
        }
        if let Some(want) = &self.shared.options.token {
            if !same_token(want, &token) {
                return Err(refused(refuse(
                    &self.writer,
                    ErrorCode::Unauthenticated,
                    "bad token".into(),
                )));
            }
        }
        let dest =
            components(&dest).map_err(|e| refused(refuse(&self.writer, ErrorCode::BadPath, e)))?;
        let session = {
            let mut sessions = self
                .shared
                .sessions
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            sessions.retain(|_, s| s.strong_count() > 0);
            if session == 0 {
                let id = self.shared.next_session.fetch_add(1, Ordering::Relaxed);
                let s = Arc::new(Session {
                    dest,
                    files: Mutex::new(HashMap::new()),
                    next_file: AtomicU32::new(1),
                });
                sessions.insert(id, Arc::downgrade(&s));
                (id, s)
            } else {
                let s = sessions.get(&session).and_then(Weak::upgrade);
                match s {
                    Some(s) if s.dest == dest => (session, s),
                    _ => {
                        drop(sessions);
                        return Err(refused(refuse(
                            &self.writer,
                            ErrorCode::Protocol,
                            format!("no session {session} for this destination"),
                        )));
                    }
                }
            }
        };
        self.session = Some(session.1);
        self.writer.message(&Message::Welcome {
            version: wire::VERSION,
            session: session.0,
        })
    }

    fn serve(&mut self, reader: &mut impl Read, buf: &mut Vec<u8>) -> io::Result<()> {
        loop {
            match wire::read_frame(reader, buf) {
                Ok(true) => {}
                Ok(false) => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                    return Err(refuse(&self.writer, ErrorCode::Protocol, e.to_string()));
                }
                Err(e) => return Err(e),
            }
            // Blocks, nearly every frame, are written from the frame itself.
            if let Some(block) = wire::decode_block(buf) {
                let b =
                    block.map_err(|e| refuse(&self.writer, ErrorCode::Protocol, e.to_string()))?;
                self.block(b.file, b.offset, b.crc, b.data)?;
                continue;
            }
            let msg = Message::decode(buf)
                .map_err(|e| refuse(&self.writer, ErrorCode::Protocol, e.to_string()))?;
            match msg {
                Message::NewFile {
                    req,
                    path,
                    size,
                    mode,
                    mtime_sec,
                    mtime_nsec,
                    resume,
                } => {
                    let mtime = Timespec {
                        tv_sec: mtime_sec,
                        tv_nsec: i64::from(mtime_nsec.min(999_999_999)) as _,
                    };
                    match self.new_file(&path, size, mode, mtime, resume) {
                        Ok((file, resumed)) => {
                            self.writer
                                .message(&Message::FileId { req, file, resumed })?
                        }
                        Err(e)
                            if e.kind() == io::ErrorKind::InvalidInput
                                || e.kind() == io::ErrorKind::PermissionDenied =>
                        {
                            return Err(refuse(
                                &self.writer,
                                ErrorCode::BadPath,
                                format!("{path:?}: {e}"),
                            ));
                        }
                        Err(e) => {
                            return Err(refuse(
                                &self.writer,
                                ErrorCode::Io,
                                format!("{path:?}: {e}"),
                            ))
                        }
                    }
                }
                Message::Stat {
                    req,
                    checksum,
                    files,
                } => {
                    let mut entries = Vec::with_capacity(files.len());
                    for (path, size) in &files {
                        let (dirs, name) = self.split(path)?;
                        let found =
                            stat_file(&self.shared.root, &dirs, &name, checksum.then_some(*size))
                                .map_err(|e| {
                                refuse(&self.writer, ErrorCode::Io, format!("{path:?}: {e}"))
                            })?;
                        entries.push(found);
                    }
                    self.writer.message(&Message::StatReply { req, entries })?;
                }
                Message::MakeDir { req, path } => {
                    let (mut dirs, name) = self.split(&path)?;
                    dirs.push(name);
                    let failure = self.entry(&path, open_dirs(&self.shared.root, &dirs))?;
                    self.writer.message(&Message::EntryDone { req, failure })?;
                }
                Message::Symlink { req, path, target } => {
                    if target.is_empty() || target.contains('\0') {
                        return Err(refuse(
                            &self.writer,
                            ErrorCode::BadPath,
                            format!("{path:?}: link target {target:?} refused"),
                        ));
                    }
                    let (dirs, name) = self.split(&path)?;
                    let made = open_dirs(&self.shared.root, &dirs)
                        .and_then(|dir| make_symlink(&dir, &name, &target));
                    let failure = self.entry(&path, made)?;
                    if failure.is_none() {
                        self.shared.stats.links.fetch_add(1, Ordering::Relaxed);
                    }
                    self.writer.message(&Message::EntryDone { req, failure })?;
                }
                Message::FileCancel { file, reason } => {
                    let f = self.take_file(file)?;
                    let _ =
                        rustix::fs::unlinkat(&f.dir, f.part.as_str(), rustix::fs::AtFlags::empty());
                    self.shared.stats.failed.fetch_add(1, Ordering::Relaxed);
                    self.writer.message(&Message::FileFailed {
                        file,
                        reason: format!("{}: {reason}", f.name),
                    })?;
                }
                Message::NewBlock {
                    file,
                    offset,
                    crc,
                    data,
                } => self.block(file, offset, crc, &data)?,
                Message::FileDone { file, size, crc } => {
                    let job = Finish {
                        file: self.take_file(file)?,
                        id: file,
                        size,
                        crc,
                        writer: self.writer.clone(),
                        stats: Arc::clone(&self.shared.stats),
                        fsync: self.shared.options.fsync,
                    };
                    if self.shared.finish.send(job).is_err() {
                        return Err(io::Error::other("the finisher pool stopped"));
                    }
                }
                Message::Bye => {
                    self.writer.close();
                    return Ok(());
                }
                Message::Error { code, message } => {
                    return Err(io::Error::other(format!("peer error {code}: {message}")));
                }
                other => {
                    return Err(refuse(
                        &self.writer,
                        ErrorCode::Protocol,
                        format!("unexpected {} from a source", other.name()),
                    ));
                }
            }
        }
    }

    /// Check a block against its file and crc, write it, acknowledge it.
    fn block(&self, file: u32, offset: u64, crc: u32, data: &[u8]) -> io::Result<()> {
        let f = self.file(file)?;
        let end = offset.checked_add(data.len() as u64);
        if end.is_none_or(|end| end > f.size) {
            return Err(refuse(
                &self.writer,
                ErrorCode::Protocol,
                format!(
                    "block at {offset}+{} is past the end of file {file} ({} bytes)",
                    data.len(),
                    f.size
                ),
            ));
        }
        if crc32c::crc32c(data) != crc {
            return Err(refuse(
                &self.writer,
                ErrorCode::Checksum,
                format!("block at {offset} of file {file}: crc32c mismatch"),
            ));
        }
        if let Err(e) = f.file.write_all_at(data, offset) {
            return Err(refuse(
                &self.writer,
                ErrorCode::Io,
                format!("{}: {e}", f.name),
            ));
        }
        f.written.fetch_add(data.len() as u64, Ordering::Relaxed);
        {
            let mut blocks = f.blocks.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(map) = blocks.as_mut() {
                map.insert(offset, (data.len() as u64, crc));
                if map.len() > MAX_TRACKED_BLOCKS {
                    *blocks = None;
                }
            }
        }
        self.shared
            .stats
            .bytes
            .fetch_add(data.len() as u64, Ordering::Relaxed);
        self.writer.message(&Message::BlockDone { file, offset })
    }

    fn session(&self) -> &Session {
        self.session.as_deref().expect("hello sets the session")
    }

    /// Check `path` and split destination + path into the parent
    /// directories and the final name; a bad path ends the connection.
    fn split(&self, path: &str) -> io::Result<(Vec<String>, String)> {
        let mut parts = self.session().dest.clone();
        match components(path) {
            Ok(rel) if !rel.is_empty() => parts.extend(rel),
            Ok(_) => {
                return Err(refuse(
                    &self.writer,
                    ErrorCode::BadPath,
                    "empty path".into(),
                ))
            }
            Err(e) => return Err(refuse(&self.writer, ErrorCode::BadPath, e)),
        }
        let name = parts.pop().expect("not empty");
        Ok((parts, name))
    }

    /// The outcome of a `MakeDir` or `Symlink`: a path through a symlink
    /// ends the connection as `NewFile` does; other errors are the
    /// entry's failure.
    fn entry<T>(&self, path: &str, made: io::Result<T>) -> io::Result<Option<String>> {
        match made {
            Ok(_) => Ok(None),
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => Err(refuse(
                &self.writer,
                ErrorCode::BadPath,
                format!("{path:?}: {e}"),
            )),
            Err(e) => Ok(Some(format!("{path}: {e}"))),
        }
    }

    fn new_file(
        &self,
        path: &str,
        size: u64,
        mode: u32,
        mtime: Timespec,
        resume: bool,
    ) -> io::Result<(u32, bool)> {
        let session = self.session();
        let mut parts = session.dest.clone();
        let rel = components(path).map_err(other)?;
        if rel.is_empty() {
            return Err(other("empty file path".into()));
        }
        parts.extend(rel);
        let name = parts.pop().expect("not empty");
        let dir = open_dirs(&self.shared.root, &parts)?;
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
        let id = session.next_file.fetch_add(1, Ordering::Relaxed);
        let f = Arc::new(SinkFile {
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
        });
        self.files().insert(id, f);
        Ok((id, resumed))
    }

    fn files(&self) -> std::sync::MutexGuard<'_, HashMap<u32, Arc<SinkFile>>> {
        self.session()
            .files
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    fn unknown(&self, id: u32) -> io::Error {
        refuse(
            &self.writer,
            ErrorCode::Protocol,
            format!("unknown file id {id}"),
        )
    }

    /// The open file `id`.
    fn file(&self, id: u32) -> io::Result<Arc<SinkFile>> {
        let found = self.files().get(&id).cloned();
        found.ok_or_else(|| self.unknown(id))
    }

    /// The open file `id`, forgotten (its `FileDone` arrived).
    fn take_file(&self, id: u32) -> io::Result<Arc<SinkFile>> {
        let found = self.files().remove(&id);
        found.ok_or_else(|| self.unknown(id))
    }
}

/// Verify a file against the source's size and crc32c (from the crcs of
/// its blocks, or by reading it back), apply its mode and mtime, sync it
/// (unless `fsync` is off) and rename it into place.
fn finish(f: &SinkFile, size: u64, crc: u32, fsync: bool) -> io::Result<()> {
    if size != f.size {
        return Err(other(format!(
            "size {size} differs from the announced {}",
            f.size
        )));
    }
    let len = f.file.metadata()?.len();
    if len != size {
        f.file.set_len(size)?;
    }
    // Every block was checked against its crc before it was written; when
    // this session's blocks tile the file, their crcs combined are the
    // file's. Otherwise (a resumed copy, gaps) read the file back.
    let got = match f.crc_from_blocks(size) {
        Some(got) => got,
        None => crc_of(&f.file, size)?,
    };
    if got != crc {
        return Err(other(format!(
            "verification failed: crc32c {got:08x} != source {crc:08x} ({} of {size} bytes received this run)",
            f.written.load(Ordering::Relaxed)
        )));
    }
    rustix::fs::fchmod(&f.file, Mode::from_raw_mode(f.mode & 0o7777))?;
    rustix::fs::futimens(
        &f.file,
        &Timestamps {
            last_access: f.mtime,
            last_modification: f.mtime,
        },
    )?;
    if fsync {
        f.file.sync_all()?;
    }
    rustix::fs::renameat(&f.dir, f.part.as_str(), &f.dir, f.name.as_str())?;
    if fsync {
        rustix::fs::fsync(&f.dir)?;
    }
    Ok(())
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
