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
//! Paths ([`crate::dest`], shared with `xfer copy`): the destination and
//! every file path are checked component by component (no empty, `.`,
//! `..` or NUL components, never absolute), and the directories are then
//! walked from the root's descriptor with `openat(O_NOFOLLOW |
//! O_DIRECTORY)` one component at a time, so neither a `..` nor a symlink
//! planted inside the root can lead outside it. The same walk, without
//! creating anything, answers `Stat`: it reports only regular files
//! (`fstatat(AT_SYMLINK_NOFOLLOW)`) under the root, and a path with a
//! symlink in it reads as absent. `Symlink` stores the link's target as
//! given, under a hidden name renamed over the final one; the sink never
//! resolves a link it made, and files replace a link rather than write
//! through it (the partial copy is renamed over the link).
//!
//! Authentication: a connection must present the sink's token in `Hello`
//! (compared in constant time) when one is configured, and a client
//! certificate when `--client-ca` is configured (rustls refuses the
//! handshake otherwise). A sink with neither refuses to start.

use std::collections::HashMap;
use std::io::{self, Read};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::thread;

use rustix::fs::{Mode, OFlags, Timespec};
use rustls::ServerConfig;

use crate::dest::{make_symlink, open_dirs, stat_file, PartialCopy, PendingWrite};
use crate::direct::AlignedBuf;
use crate::tls::{Channel, Writer};
use crate::wire::{self, ErrorCode, Frame, Message};

mod conn;
use conn::*;

pub use crate::dest::{components, crc_of, PART_SUFFIX};
/// Threads that verify, sync and rename finished files.
pub const FINISHERS: usize = 4;
/// Threads that check blocks' crcs and write them to disk: with `O_DIRECT`
/// each write waits for the device, so the sink keeps this many in flight
/// whatever the number of connections.
pub const BLOCK_WRITERS: usize = 8;
/// Bytes of received blocks one connection may have waiting for (or in) a
/// write, at most; past it the connection stops reading (plus one frame of
/// at most [`wire::MAX_OBJECT`]).
pub const BLOCK_QUEUE_BYTES: usize = 32 << 20;
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
    /// With `fsync`, write aligned blocks with `O_DIRECT` into a
    /// preallocated partial copy instead of through the page cache (the
    /// file is synced before its rename either way; `serve --buffered`
    /// turns this off).
    pub direct: bool,
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
    /// Connections that carried at least one block: a big file's blocks
    /// spread over every connection of its session.
    pub block_connections: AtomicU64,
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
    /// Received blocks for the writer pool (ends the same way).
    blocks: SyncSender<BlockJob>,
}

/// A file whose `FileDone` arrived: verify, sync, rename, answer.
struct Finish {
    file: Arc<PartialCopy>,
    id: u32,
    size: u64,
    crc: u32,
    writer: Writer,
    stats: Arc<SinkStats>,
    fsync: bool,
}

impl Finish {
    fn run(self) {
        // Blocks of this file still being written (a source may send
        // FileDone on one connection while another's blocks are queued).
        self.file.wait_writes();
        let reply = match self.file.finish(self.size, self.crc, self.fsync, false) {
            Ok(()) => {
                self.stats.files.fetch_add(1, Ordering::Relaxed);
                Message::FileOk { file: self.id }
            }
            Err(e) => {
                self.stats.failed.fetch_add(1, Ordering::Relaxed);
                self.file.discard();
                Message::FileFailed {
                    file: self.id,
                    reason: format!("{}: {e}", self.file.name),
                }
            }
        };
        // The source may have gone; its rerun sends the file again.
        let _ = self.writer.message(&reply);
    }
}

/// A received block on its way to disk: its crc is checked and it is
/// written by a writer thread, which then answers `BlockDone` (or refuses
/// the connection) and gives the buffer back to the connection.
struct BlockJob {
    file: PendingWrite,
    id: u32,
    offset: u64,
    crc: u32,
    data: AlignedBuf,
    queue: Arc<BlockQueue>,
    stats: Arc<SinkStats>,
}

impl BlockJob {
    fn run(self) {
        let BlockJob {
            file,
            id,
            offset,
            crc,
            data,
            queue,
            stats,
        } = self;
        let bytes = data.as_slice();
        let outcome = if crc32c::crc32c(bytes) != crc {
            Err((
                ErrorCode::Checksum,
                format!("block at {offset} of file {id}: crc32c mismatch"),
            ))
        } else {
            file.write(bytes, offset, crc)
                .map_err(|e| (ErrorCode::Io, format!("{}: {e}", file.name)))
        };
        match outcome {
            Ok(()) => {
                stats.bytes.fetch_add(bytes.len() as u64, Ordering::Relaxed);
                // The source may have gone; its rerun sends the block again.
                let _ = queue
                    .writer
                    .message(&Message::BlockDone { file: id, offset });
            }
            Err((code, why)) => {
                queue.fail();
                let _ = refuse(&queue.writer, code, why);
            }
        }
        // After the answer: a finisher waiting for this write answers
        // FileOk after this block's BlockDone.
        drop(file);
        queue.give_back(data);
    }
}

/// One connection's received blocks between the connection thread and the
/// writer threads: the buffers frames are read into, reused, and at most
/// [`BLOCK_QUEUE_BYTES`] of them given out at once.
struct BlockQueue {
    writer: Writer,
    state: Mutex<QueueState>,
    cv: Condvar,
}

#[derive(Default)]
struct QueueState {
    free: Vec<AlignedBuf>,
    /// Bytes of blocks given to writer threads and not yet back.
    bytes: usize,
    /// A write or a crc check failed: the connection was refused.
    failed: bool,
}

impl BlockQueue {
    fn new(writer: Writer) -> BlockQueue {
        BlockQueue {
            writer,
            state: Mutex::new(QueueState::default()),
            cv: Condvar::new(),
        }
    }

    /// A buffer to read the next frame into, once the blocks in flight are
    /// under their bound; `None` once a block failed.
    fn take(&self) -> Option<AlignedBuf> {
        let mut st = sluice_env::wait_while(&self.cv, sluice_env::lock(&self.state), None, |st| {
            !st.failed && st.bytes >= BLOCK_QUEUE_BYTES
        });
        if st.failed {
            return None;
        }
        Some(st.free.pop().unwrap_or_default())
    }

    /// `len` bytes go to a writer thread.
    fn sent(&self, len: usize) {
        sluice_env::lock(&self.state).bytes += len;
    }

    fn give_back(&self, buf: AlignedBuf) {
        let mut st = sluice_env::lock(&self.state);
        st.bytes -= buf.len();
        st.free.push(buf);
        drop(st);
        self.cv.notify_all();
    }

    fn fail(&self) {
        sluice_env::lock(&self.state).failed = true;
        self.cv.notify_all();
    }

    fn failed(&self) -> bool {
        sluice_env::lock(&self.state).failed
    }
}

fn block_writer_pool() -> SyncSender<BlockJob> {
    let (tx, rx) = mpsc::sync_channel::<BlockJob>(4 * BLOCK_WRITERS);
    let rx = Arc::new(Mutex::new(rx));
    for _ in 0..BLOCK_WRITERS {
        let rx: Arc<Mutex<Receiver<BlockJob>>> = Arc::clone(&rx);
        thread::spawn(move || loop {
            let job = sluice_env::lock(&rx).recv();
            match job {
                Ok(job) => job.run(),
                Err(_) => return,
            }
        });
    }
    tx
}

fn finisher_pool() -> SyncSender<Finish> {
    let (tx, rx) = mpsc::sync_channel::<Finish>(FINISH_QUEUE);
    let rx = Arc::new(Mutex::new(rx));
    for _ in 0..FINISHERS {
        let rx: Arc<Mutex<Receiver<Finish>>> = Arc::clone(&rx);
        thread::spawn(move || loop {
            let job = sluice_env::lock(&rx).recv();
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
    files: Mutex<HashMap<u32, Arc<PartialCopy>>>,
    next_file: AtomicU32,
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
                blocks: block_writer_pool(),
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
