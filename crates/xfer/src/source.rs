//! The source: `sluice xfer send SRC... sluice://HOST:PORT/DEST`.
//!
//! Threads (LADS §3, with TCP+TLS connections in place of CCI):
//! * the **announcer** (the calling thread) walks the sources, asks the
//!   layout provider for each file's objects and sends `NewFile` on the
//!   first connection, keeping at most `files_in_flight` files open;
//! * one **reader** per connection handles the sink's answers: `FileId`
//!   queues the file's objects in the [`Scheduler`] (minus those the
//!   journal says the sink already has), `BlockDone` frees the object's
//!   buffer slot and journals it, and when a file's last block is
//!   acknowledged the reader sends `FileDone` with the crc32c of the whole
//!   file (combined from the objects' crcs); `FileOk`/`FileFailed` close
//!   the file;
//! * `threads` **I/O threads** take a buffer slot ([`SlotPool`]: memory,
//!   else spill, else wait), ask the scheduler for an object, read it
//!   through the layout provider, checksum it, report its service time and
//!   queue it for sending (or write it to the spill file);
//! * the **spill mover** (with `--spill`) copies spilled objects into
//!   memory slots as they free up, like the paper's SSD thread;
//! * one **sender** per connection writes queued blocks.
//!
//! A memory slot is held from the read until the sink acknowledges the
//! block, so the in-memory buffer bounds the data read ahead and in flight
//! (the paper's RMA buffer). All shared state is one mutex with one
//! condition variable; no I/O happens under the lock.
//!
//! Before announcing files, the announcer sends `MakeDir` for every
//! directory and `Symlink` for every symbolic link (unless links are
//! skipped), then asks the sink, in `Stat` batches, for the size and mtime
//! of each file's destination; files equal by size and mtime (or by size
//! and crc32c with `--checksum`) are counted unchanged and not sent, as
//! rsync's quick check. Each file's size, mtime and ctime are taken at the
//! walk and checked again (`fstat` on the open file) before `FileDone`, and
//! when a read falls short: a file that changed while it was read is
//! cancelled (`FileCancel`), reported in [`Summary::changed`], and never
//! put in place.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::fmt;
use std::fs::{self, File};
use std::io;
use std::net::TcpStream;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use rustls::ClientConfig;
use serde::Serialize;
use sluice_policy::lads::{Mode, Object, Scheduler, SchedulerConfig, Slot, SlotPool};
use sluice_policy::{FileId, Time};

use crate::journal::{self, Journal, Progress};
use crate::layout::LayoutProvider;
use crate::tls::{self, Channel, Writer};
use crate::wire::{self, DestStat, Message, MAX_OBJECT, MAX_STAT};

/// `sluice://HOST:PORT/DEST`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Destination {
    /// Host name or IP address (IPv6 without brackets).
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// Directory under the sink's root (may be empty).
    pub dest: String,
}

impl FromStr for Destination {
    type Err = String;

    fn from_str(s: &str) -> Result<Destination, String> {
        let rest = s
            .strip_prefix("sluice://")
            .ok_or_else(|| format!("{s:?}: expected sluice://HOST:PORT/DEST"))?;
        let (hostport, dest) = rest.split_once('/').unwrap_or((rest, ""));
        let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
            let (h, p) = v6
                .split_once("]:")
                .ok_or_else(|| format!("{s:?}: expected [ADDR]:PORT"))?;
            (h, p)
        } else {
            hostport
                .rsplit_once(':')
                .ok_or_else(|| format!("{s:?}: missing :PORT"))?
        };
        if host.is_empty() {
            return Err(format!("{s:?}: missing host"));
        }
        let port = port
            .parse()
            .map_err(|_| format!("{s:?}: bad port {port:?}"))?;
        let dest = dest.trim_end_matches('/').to_owned();
        crate::sink::components(&dest).map_err(|e| format!("{s:?}: {e}"))?;
        Ok(Destination {
            host: host.to_owned(),
            port,
            dest,
        })
    }
}

impl fmt::Display for Destination {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "sluice://[{}]:{}/{}", self.host, self.port, self.dest)
        } else {
            write!(f, "sluice://{}:{}/{}", self.host, self.port, self.dest)
        }
    }
}

/// How a rerun decides that a destination file is already up to date.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compare {
    /// Equal size and mtime (to the nanosecond): rsync's quick check.
    SizeAndMtime,
    /// Equal size and crc32c (both sides read the file): `--checksum`.
    Checksum,
    /// Send every file (`--ignore-times`).
    Never,
}

/// How far a transfer is: given to [`SendOptions::progress`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SendProgress {
    /// Bytes sent and acknowledged this run, plus the bytes of the files
    /// found unchanged at the sink or complete in the journal.
    pub bytes_done: u64,
    /// Bytes of every file to send.
    pub bytes_total: u64,
    /// Files in place: sent this run, unchanged, or complete earlier.
    pub files_done: u64,
    /// Files to send.
    pub files_total: u64,
    /// Objects sent this run.
    pub objects: u64,
    /// The last call: the transfer ended (or stopped).
    pub ended: bool,
}

/// The progress observer of [`SendOptions::progress`].
pub type ProgressFn = Arc<dyn Fn(&SendProgress) + Send + Sync>;

/// How to send.
pub struct SendOptions {
    /// Files and directories to send; each lands under `DEST` by its name.
    pub sources: Vec<PathBuf>,
    /// Where to.
    pub destination: Destination,
    /// TLS client configuration.
    pub tls: Arc<ClientConfig>,
    /// Token for `Hello` (empty with mutual TLS only).
    pub token: Vec<u8>,
    /// I/O threads.
    pub threads: usize,
    /// TCP connections.
    pub connections: usize,
    /// Slot size: the nominal object size (1 MiB by default).
    pub slot_size: u64,
    /// In-memory buffer in bytes (slots = buffer / slot size, at least 1).
    pub buffer: u64,
    /// Spill directory and size on the fast tier.
    pub spill: Option<(PathBuf, u64)>,
    /// Where objects live.
    pub layout: Arc<dyn LayoutProvider>,
    /// Scheduling mode and congestion settings.
    pub scheduler: SchedulerConfig,
    /// Resume journal, if any.
    pub journal: Option<PathBuf>,
    /// Files announced and not yet finished, at most (1 in file-at-a-time
    /// mode, whatever this says).
    pub files_in_flight: usize,
    /// Told how far the transfer is, about four times a second and once
    /// at the end (the CLI draws it; the library prints nothing).
    pub progress: Option<ProgressFn>,
    /// Which destination files count as unchanged and are not sent.
    pub compare: Compare,
    /// Recreate symbolic links at the sink (`false`: skip and count them).
    pub links: bool,
}

/// What a transfer did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Summary {
    /// Files verified and in place this run.
    pub files: u64,
    /// Files the journal showed complete from an earlier run.
    pub files_already_done: u64,
    /// Files the sink already had, equal by size and mtime (or checksum).
    pub files_unchanged: u64,
    /// Bytes of the unchanged files.
    pub bytes_unchanged: u64,
    /// Directories created or found at the sink.
    pub dirs: u64,
    /// Symbolic links recreated at the sink.
    pub links: u64,
    /// Files, directories or links that failed (path and reason).
    pub failed: Vec<String>,
    /// Files that changed while they were read (path and what changed);
    /// their partial copies were dropped.
    pub changed: Vec<String>,
    /// Special files (and symlinks, when links are skipped) not sent.
    pub skipped_not_regular: u64,
    /// Bytes sent and acknowledged this run.
    pub bytes: u64,
    /// Objects sent this run.
    pub objects: u64,
    /// Objects the journal showed already at the sink.
    pub objects_resumed: u64,
    /// Wall time from the first connection to the last file's verification.
    pub seconds: f64,
    /// `bytes / seconds`, in MB/s (10^6).
    pub mb_per_s: f64,
    /// Scheduling mode.
    pub mode: String,
    /// Layout provider.
    pub layout: String,
    /// Storage targets the sent objects came from.
    pub targets: u64,
    /// I/O threads.
    pub threads: usize,
    /// Connections.
    pub connections: usize,
    /// Visits that skipped a busy target.
    pub busy_skips: u64,
    /// Visits that skipped a congested target.
    pub congested_skips: u64,
    /// Times a target was marked congested.
    pub congested_marks: u64,
    /// Objects read into the spill buffer.
    pub spilled: u64,
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "sent {} files, {:.1} MB in {:.2} s: {:.1} MB/s ({} mode, {} layout, {} target{}, {} threads, {} connections)",
            self.files,
            self.bytes as f64 / 1e6,
            self.seconds,
            self.mb_per_s,
            self.mode,
            self.layout,
            self.targets,
            if self.targets == 1 { "" } else { "s" },
            self.threads,
            self.connections
        )?;
        writeln!(
            f,
            "unchanged {} files ({:.1} MB) not sent; {} directories, {} symlinks",
            self.files_unchanged,
            self.bytes_unchanged as f64 / 1e6,
            self.dirs,
            self.links
        )?;
        writeln!(
            f,
            "objects {} sent, {} resumed; files {} already done; skips: {} busy, {} congested ({} marks); {} spilled",
            self.objects,
            self.objects_resumed,
            self.files_already_done,
            self.busy_skips,
            self.congested_skips,
            self.congested_marks,
            self.spilled
        )?;
        if self.skipped_not_regular > 0 {
            writeln!(
                f,
                "{} special files (or skipped symlinks) not sent",
                self.skipped_not_regular
            )?;
        }
        for fail in &self.failed {
            writeln!(f, "FAILED {fail}")?;
        }
        for change in &self.changed {
            writeln!(f, "CHANGED {change}")?;
        }
        Ok(())
    }
}

/// One regular file to send.
#[derive(Clone, Debug)]
struct Entry {
    src: PathBuf,
    rel: String,
    size: u64,
    mode: u32,
    mtime_sec: i64,
    mtime_nsec: u32,
    ctime_sec: i64,
    ctime_nsec: u32,
    key: String,
}

impl Entry {
    /// What changed in the open file since the walk (size, mtime, ctime),
    /// or `None`.
    fn changed(&self, file: &File) -> Option<String> {
        let m = match file.metadata() {
            Ok(m) => m,
            Err(e) => return Some(format!("fstat: {e}")),
        };
        let mut what = Vec::new();
        if m.len() != self.size {
            what.push(format!("size {} -> {} bytes", self.size, m.len()));
        }
        if (m.mtime(), m.mtime_nsec() as u32) != (self.mtime_sec, self.mtime_nsec) {
            what.push("mtime".to_owned());
        }
        if (m.ctime(), m.ctime_nsec() as u32) != (self.ctime_sec, self.ctime_nsec) {
            what.push("ctime".to_owned());
        }
        (!what.is_empty()).then(|| {
            format!(
                "{}: changed while it was sent ({})",
                self.src.display(),
                what.join(", ")
            )
        })
    }
}

/// What the walk found under the sources.
#[derive(Default)]
struct Tree {
    /// Regular files.
    files: Vec<Entry>,
    /// Directories, parents before children.
    dirs: Vec<String>,
    /// Symbolic links: path and target.
    links: Vec<(String, String)>,
    /// Special files, and links when they are skipped.
    skipped: u64,
}

/// A file name as UTF-8 (the wire's paths are), or a clear error.
fn utf8(name: std::ffi::OsString) -> io::Result<String> {
    name.into_string()
        .map_err(|n| io::Error::new(io::ErrorKind::InvalidInput, format!("{n:?}: not UTF-8")))
}

fn walk(sources: &[PathBuf], links: bool) -> io::Result<Tree> {
    let mut tree = Tree::default();
    for src in sources {
        let name = match src.file_name() {
            Some(n) => n.to_owned(),
            None => fs::canonicalize(src)?
                .file_name()
                .map(|n| n.to_owned())
                .ok_or_else(|| {
                    io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!("{}: cannot send a root", src.display()),
                    )
                })?,
        };
        walk_one(src, utf8(name)?, links, &mut tree)?;
    }
    Ok(tree)
}

fn walk_one(path: &Path, rel: String, links: bool, tree: &mut Tree) -> io::Result<()> {
    let with_path = |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", path.display()));
    let meta = fs::symlink_metadata(path).map_err(with_path)?;
    if meta.is_dir() {
        tree.dirs.push(rel.clone());
        let mut names: Vec<_> = fs::read_dir(path)
            .and_then(|d| d.collect::<Result<Vec<_>, _>>())
            .map_err(with_path)?;
        names.sort_by_key(|e| e.file_name());
        for e in names {
            let name = utf8(e.file_name())?;
            walk_one(&e.path(), format!("{rel}/{name}"), links, tree)?;
        }
    } else if meta.is_file() {
        let (size, mtime_sec, mtime_nsec) = (meta.len(), meta.mtime(), meta.mtime_nsec() as u32);
        tree.files.push(Entry {
            src: path.to_owned(),
            key: journal::key(&rel, size, mtime_sec, mtime_nsec),
            rel,
            size,
            mode: meta.permissions().mode() & 0o7777,
            mtime_sec,
            mtime_nsec,
            ctime_sec: meta.ctime(),
            ctime_nsec: meta.ctime_nsec() as u32,
        });
    } else if meta.file_type().is_symlink() && links {
        let target = utf8(fs::read_link(path).map_err(with_path)?.into_os_string())?;
        tree.links.push((rel, target));
    } else {
        tree.skipped += 1;
    }
    Ok(())
}

/// What identifies and checks one object on the wire.
#[derive(Clone, Copy)]
struct Block {
    file: u32,
    offset: u64,
    len: u64,
    crc: u32,
}

/// A block in a memory slot, ready to send.
struct Ready {
    block: Block,
    buf: Vec<u8>,
}

/// A block in a spill slot, waiting for a memory slot.
struct Spilled {
    block: Block,
    slot: u32,
}

struct Live {
    entry: usize,
    file: Arc<File>,
    /// Objects not yet acknowledged.
    left: usize,
    crcs: BTreeMap<u64, (u64, u32)>,
    /// The file changed while it was read: what changed.
    changed: Option<String>,
}

struct Announced {
    entry: usize,
    file: Arc<File>,
    objects: Vec<Object>,
}

struct State {
    sched: Scheduler,
    pool: SlotPool,
    bufs: Vec<Vec<u8>>,
    spill_free: Vec<u32>,
    send_q: VecDeque<Ready>,
    spill_q: VecDeque<Spilled>,
    inflight: HashMap<(u32, u64), Block>,
    live: HashMap<u32, Live>,
    waiting: HashMap<u32, Announced>,
    open: usize,
    finished: usize,
    fatal: Option<String>,
    closing: bool,
    summary: Summary,
    /// Targets that objects were queued on.
    targets: HashSet<u32>,
    /// `StatReply` entries by request number, until the announcer takes them.
    stat_replies: HashMap<u32, Vec<DestStat>>,
}

struct Core {
    state: Mutex<State>,
    cv: Condvar,
    entries: Vec<Entry>,
    /// Directories then links: `EntryDone` request numbers below
    /// `dirs.len()` are directories.
    dirs: Vec<String>,
    links: Vec<(String, String)>,
    /// `HOST:PORT` of the sink, for messages.
    sink: String,
    journal: Option<Journal>,
    progress: Progress,
    layout: Arc<dyn LayoutProvider>,
    spill: Option<File>,
    start: Instant,
}

impl Core {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn wait<'a>(&self, g: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        self.cv.wait(g).unwrap_or_else(|p| p.into_inner())
    }

    fn now(&self) -> Time {
        Time::from_nanos(u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }

    fn fail(&self, why: String) {
        let mut st = self.lock();
        st.fatal.get_or_insert(why);
        drop(st);
        self.cv.notify_all();
    }

    fn stopped(st: &State) -> bool {
        st.fatal.is_some() || st.closing
    }
}

/// Cut objects longer than the wire's bound into pieces on the same target.
fn bounded(objects: Vec<Object>) -> Vec<Object> {
    let max = MAX_OBJECT as u64;
    if objects.iter().all(|o| o.len <= max) {
        return objects;
    }
    let mut out = Vec::new();
    for o in objects {
        let mut off = 0;
        while off < o.len {
            let len = (o.len - off).min(max);
            out.push(Object {
                offset: o.offset + off,
                len,
                ..o
            });
            off += len;
        }
    }
    out
}

/// `HOST:PORT` of the sink.
fn sink_address(d: &Destination) -> String {
    if d.host.contains(':') {
        format!("[{}]:{}", d.host, d.port)
    } else {
        format!("{}:{}", d.host, d.port)
    }
}

/// A network error in words a user can act on: a connection the sink
/// closed or reset reads "the sink ADDR closed the connection" whatever
/// layer (TCP, TLS) noticed it first.
fn network_error(sink: &str, doing: &str, e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::UnexpectedEof
        | io::ErrorKind::ConnectionReset
        | io::ErrorKind::ConnectionAborted
        | io::ErrorKind::BrokenPipe
        | io::ErrorKind::NotConnected => {
            format!("the sink {sink} closed the connection (while {doing})")
        }
        _ => format!("the connection to the sink {sink} failed while {doing}: {e}"),
    }
}

fn connect(options: &SendOptions, session: u64) -> io::Result<(Channel, u64)> {
    let d = &options.destination;
    let tcp = TcpStream::connect((d.host.as_str(), d.port))
        .map_err(|e| io::Error::new(e.kind(), format!("connect to {d}: {e}")))?;
    let mut ch = Channel::client(tcp, Arc::clone(&options.tls), tls::server_name(&d.host)?)
        .map_err(|e| io::Error::new(e.kind(), format!("TLS with {d}: {e}")))?;
    ch.writer.message(&Message::Hello {
        version: wire::VERSION,
        token: options.token.clone(),
        session,
        dest: d.dest.clone(),
    })?;
    let mut buf = Vec::new();
    match wire::read_message(&mut ch.reader, &mut buf) {
        Ok(Some(Message::Welcome { version, session })) if version == wire::VERSION => {
            Ok((ch, session))
        }
        Ok(Some(Message::Error { message, .. })) => Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("{d} refused: {message}"),
        )),
        Ok(Some(other)) => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{d}: unexpected answer to Hello: {other:?}"),
        )),
        Ok(None) => Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!(
                "the sink {} closed the connection after Hello",
                sink_address(d)
            ),
        )),
        Err(e) => Err(io::Error::new(
            e.kind(),
            network_error(&sink_address(d), "waiting for Welcome", &e),
        )),
    }
}

/// Refuse settings that cannot work: zero threads, connections, files in
/// flight or object size.
fn check(options: &SendOptions) -> io::Result<()> {
    let zero = [
        ("threads", options.threads as u64),
        ("connections", options.connections as u64),
        ("files in flight", options.files_in_flight as u64),
        ("object size (bytes)", options.slot_size),
        ("buffer (bytes)", options.buffer),
    ];
    for (what, v) in zero {
        if v == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{what} must be at least 1, not 0"),
            ));
        }
    }
    Ok(())
}

/// Send the sources; returns the summary (which lists files that failed),
/// or an error that stopped the whole transfer.
pub fn send(options: SendOptions) -> io::Result<Summary> {
    check(&options)?;
    let tree = walk(&options.sources, options.links)?;
    let (journal, progress) = match &options.journal {
        Some(p) => {
            let (j, p) = Journal::open(p)?;
            (Some(j), p)
        }
        None => (None, Progress::default()),
    };
    let spill = match &options.spill {
        Some((dir, _)) => {
            fs::create_dir_all(dir)?;
            // An unnamed file: nothing to clean up after a crash.
            let f = rustix::fs::open(
                dir,
                rustix::fs::OFlags::TMPFILE
                    | rustix::fs::OFlags::RDWR
                    | rustix::fs::OFlags::CLOEXEC,
                rustix::fs::Mode::from_raw_mode(0o600),
            )
            .map_err(|e| {
                io::Error::new(
                    io::Error::from(e).kind(),
                    format!("spill directory {}: {e}", dir.display()),
                )
            })?;
            Some(File::from(f))
        }
        None => None,
    };
    let slot = options.slot_size.clamp(1, MAX_OBJECT as u64);
    let memory_slots = u32::try_from((options.buffer / slot).max(1)).unwrap_or(u32::MAX);
    let spill_slots = options.spill.as_ref().map_or(0, |(_, bytes)| {
        u32::try_from(bytes / slot).unwrap_or(u32::MAX)
    });
    let core = Arc::new(Core {
        state: Mutex::new(State {
            sched: Scheduler::new(options.scheduler),
            pool: SlotPool::new(memory_slots, spill_slots),
            bufs: Vec::new(),
            spill_free: (0..spill_slots).rev().collect(),
            send_q: VecDeque::new(),
            spill_q: VecDeque::new(),
            inflight: HashMap::new(),
            live: HashMap::new(),
            waiting: HashMap::new(),
            open: 0,
            finished: 0,
            fatal: None,
            closing: false,
            targets: HashSet::new(),
            stat_replies: HashMap::new(),
            summary: Summary {
                skipped_not_regular: tree.skipped,
                mode: options.scheduler.mode.name().to_owned(),
                layout: options.layout.name().to_owned(),
                threads: options.threads.max(1),
                connections: options.connections.max(1),
                ..Summary::default()
            },
        }),
        cv: Condvar::new(),
        entries: tree.files,
        dirs: tree.dirs,
        links: tree.links,
        sink: sink_address(&options.destination),
        journal,
        progress,
        layout: Arc::clone(&options.layout),
        spill,
        start: Instant::now(),
    });

    let mut writers = Vec::new();
    let mut readers = Vec::new();
    let mut session = 0;
    for _ in 0..options.connections.max(1) {
        let (ch, s) = connect(&options, session)?;
        session = s;
        writers.push(ch.writer);
        readers.push(ch.reader);
    }

    let mut threads = Vec::new();
    for (reader, writer) in readers.into_iter().zip(writers.iter().cloned()) {
        let core = Arc::clone(&core);
        threads.push(thread::spawn(move || read_loop(&core, reader, &writer)));
    }
    for writer in &writers {
        let (core, writer) = (Arc::clone(&core), writer.clone());
        threads.push(thread::spawn(move || send_loop(&core, &writer)));
    }
    for _ in 0..options.threads.max(1) {
        let (core, writer) = (Arc::clone(&core), writers[0].clone());
        threads.push(thread::spawn(move || io_loop(&core, &writer)));
    }
    if core.spill.is_some() {
        let core = Arc::clone(&core);
        threads.push(thread::spawn(move || spill_loop(&core)));
    }
    let progress_thread = options.progress.clone().map(|observer| {
        let core = Arc::clone(&core);
        thread::spawn(move || progress_loop(&core, observer.as_ref()))
    });

    // The bbcp model moves one file at a time: the next file is announced
    // only when the previous one is in place.
    let in_flight = match options.scheduler.mode {
        Mode::FileAtATime => 1,
        Mode::RoundRobin | Mode::CongestionAware => options.files_in_flight.max(1),
    };
    let to_send = announce(&core, &writers[0], in_flight, options.compare);

    // Wait for every announced file to finish, or for a fatal error.
    let mut st = core.lock();
    while st.fatal.is_none() && st.finished < to_send {
        st = core.wait(st);
    }
    st.closing = true;
    let fatal = st.fatal.clone();
    drop(st);
    core.cv.notify_all();
    for w in &writers {
        if fatal.is_none() {
            let _ = w.message(&Message::Bye);
            w.close();
        } else {
            w.abort();
        }
    }
    for t in threads {
        let _ = t.join();
    }
    if let Some(t) = progress_thread {
        let _ = t.join();
    }
    let mut st = core.lock();
    let stats = st.sched.stats();
    let spilled = st.pool.spilled();
    let targets = st.targets.len() as u64;
    let mut summary = std::mem::take(&mut st.summary);
    drop(st);
    summary.seconds = core.start.elapsed().as_secs_f64();
    summary.mb_per_s = if summary.seconds > 0.0 {
        summary.bytes as f64 / 1e6 / summary.seconds
    } else {
        0.0
    };
    summary.busy_skips = stats.busy_skips;
    summary.congested_skips = stats.congested_skips;
    summary.congested_marks = stats.congested_marks;
    summary.spilled = spilled;
    summary.targets = targets;
    if let Some(why) = fatal {
        return Err(io::Error::other(format!(
            "{why} (after {} files; rerun the same command to resume)",
            summary.files
        )));
    }
    let core = Arc::into_inner(core).expect("threads joined");
    if let Some(j) = core.journal {
        if summary.failed.is_empty() && summary.changed.is_empty() {
            j.remove()?;
        }
    }
    Ok(summary)
}

/// Make the directories and links, then announce every file not already
/// done or unchanged at the sink; returns how many requests were sent or
/// failed before sending (what the caller waits for).
fn announce(core: &Core, writer: &Writer, files_in_flight: usize, compare: Compare) -> usize {
    let mut count = 0;
    for (req, path) in core.dirs.iter().enumerate() {
        count += 1;
        let msg = Message::MakeDir {
            req: req as u32,
            path: path.clone(),
        };
        if let Err(err) = writer.message(&msg) {
            core.fail(network_error(&core.sink, "sending", &err));
            return count;
        }
    }
    for (i, (path, target)) in core.links.iter().enumerate() {
        count += 1;
        let msg = Message::Symlink {
            req: (core.dirs.len() + i) as u32,
            path: path.clone(),
            target: target.clone(),
        };
        if let Err(err) = writer.message(&msg) {
            core.fail(network_error(&core.sink, "sending", &err));
            return count;
        }
    }
    let mut pending = Vec::new();
    for (idx, e) in core.entries.iter().enumerate() {
        if core.progress.files.contains(&e.key) {
            core.lock().summary.files_already_done += 1;
        } else {
            pending.push(idx);
        }
    }
    for (batch, chunk) in pending.chunks(MAX_STAT).enumerate() {
        let changed = match compare {
            Compare::Never => chunk.to_vec(),
            Compare::SizeAndMtime | Compare::Checksum => {
                match unchanged(core, writer, batch as u32, chunk, compare) {
                    Some(changed) => changed,
                    None => return count,
                }
            }
        };
        for idx in changed {
            count += 1;
            if !announce_file(core, writer, files_in_flight, idx) {
                return count;
            }
        }
    }
    count
}

/// Ask the sink what it holds for the files `chunk` (entry indices) and
/// return those to send; the others are counted unchanged. `None` when
/// the transfer stopped.
fn unchanged(
    core: &Core,
    writer: &Writer,
    req: u32,
    chunk: &[usize],
    compare: Compare,
) -> Option<Vec<usize>> {
    let files = chunk
        .iter()
        .map(|&i| (core.entries[i].rel.clone(), core.entries[i].size))
        .collect();
    let msg = Message::Stat {
        req,
        checksum: compare == Compare::Checksum,
        files,
    };
    if let Err(err) = writer.message(&msg) {
        core.fail(network_error(&core.sink, "sending", &err));
        return None;
    }
    let mut st = core.lock();
    let found = loop {
        if st.fatal.is_some() {
            return None;
        }
        if let Some(found) = st.stat_replies.remove(&req) {
            break found;
        }
        st = core.wait(st);
    };
    drop(st);
    if found.len() != chunk.len() {
        core.fail(format!(
            "the sink answered {} of {} paths in a Stat",
            found.len(),
            chunk.len()
        ));
        return None;
    }
    let mut send = Vec::new();
    for (&idx, dest) in chunk.iter().zip(found) {
        let e = &core.entries[idx];
        let same = match dest {
            DestStat::Absent => false,
            DestStat::File {
                size,
                mtime_sec,
                mtime_nsec,
                crc,
            } => {
                size == e.size
                    && match compare {
                        Compare::SizeAndMtime => {
                            (mtime_sec, mtime_nsec) == (e.mtime_sec, e.mtime_nsec)
                        }
                        // A file we cannot read now is sent, and its read
                        // reports the error.
                        Compare::Checksum => {
                            crc.is_some()
                                && File::open(&e.src)
                                    .and_then(|f| crate::sink::crc_of(&f, e.size))
                                    .ok()
                                    == crc
                        }
                        Compare::Never => false,
                    }
            }
        };
        if same {
            let mut st = core.lock();
            st.summary.files_unchanged += 1;
            st.summary.bytes_unchanged += e.size;
        } else {
            send.push(idx);
        }
    }
    Some(send)
}

/// Open, lay out and announce file `idx`, waiting for room among the
/// files in flight; false when the transfer stopped.
fn announce_file(core: &Core, writer: &Writer, files_in_flight: usize, idx: usize) -> bool {
    let e = &core.entries[idx];
    let prepared = File::open(&e.src)
        .map_err(|err| format!("{}: {err}", e.src.display()))
        .and_then(|f| {
            core.layout
                .layout(&e.src, e.size)
                .map(|l| (f, bounded(l.objects(FileId(0), e.size))))
                .map_err(|err| format!("{}: layout: {err}", e.src.display()))
        });
    let (file, objects) = match prepared {
        Ok(p) => p,
        Err(why) => {
            let mut st = core.lock();
            st.summary.failed.push(why);
            st.finished += 1;
            drop(st);
            core.cv.notify_all();
            return true;
        }
    };
    let mut st = core.lock();
    while st.fatal.is_none() && st.open >= files_in_flight {
        st = core.wait(st);
    }
    if st.fatal.is_some() {
        return false;
    }
    st.open += 1;
    let req = idx as u32;
    st.waiting.insert(
        req,
        Announced {
            entry: idx,
            file: Arc::new(file),
            objects,
        },
    );
    drop(st);
    let msg = Message::NewFile {
        req,
        path: e.rel.clone(),
        size: e.size,
        mode: e.mode,
        mtime_sec: e.mtime_sec,
        mtime_nsec: e.mtime_nsec,
        resume: core.progress.objects.contains_key(&e.key),
    };
    if let Err(err) = writer.message(&msg) {
        core.fail(network_error(&core.sink, "sending", &err));
        return false;
    }
    true
}

fn journal_note(core: &Core, r: io::Result<()>) {
    if let Err(e) = r {
        core.fail(format!("journal: {e}"));
    }
}

fn read_loop(core: &Core, mut reader: tls::Reader, writer: &Writer) {
    let mut buf = Vec::new();
    loop {
        let msg = match wire::read_message(&mut reader, &mut buf) {
            Ok(Some(m)) => m,
            Ok(None) | Err(_) if core.lock().closing => return,
            Ok(None) => return core.fail(format!("the sink {} closed the connection", core.sink)),
            Err(e) => return core.fail(network_error(&core.sink, "receiving", &e)),
        };
        match msg {
            Message::StatReply { req, entries } => {
                core.lock().stat_replies.insert(req, entries);
                core.cv.notify_all();
            }
            Message::EntryDone { req, failure } => entry_done(core, req, failure),
            Message::FileId { req, file, resumed } => file_id(core, writer, req, file, resumed),
            Message::BlockDone { file, offset } => block_done(core, writer, file, offset),
            Message::FileOk { file } => file_finished(core, file, None),
            Message::FileFailed { file, reason } => file_finished(core, file, Some(reason)),
            Message::Error { message, .. } => {
                return core.fail(format!("the sink stopped the transfer: {message}"))
            }
            other => return core.fail(format!("unexpected {} from the sink", other.name())),
        }
    }
}

fn entry_done(core: &Core, req: u32, failure: Option<String>) {
    let mut st = core.lock();
    let req = req as usize;
    if req >= core.dirs.len() + core.links.len() {
        drop(st);
        return core.fail(format!("EntryDone for unknown request {req}"));
    }
    st.finished += 1;
    match failure {
        Some(why) => st.summary.failed.push(why),
        None if req < core.dirs.len() => st.summary.dirs += 1,
        None => st.summary.links += 1,
    }
    drop(st);
    core.cv.notify_all();
}

fn file_id(core: &Core, writer: &Writer, req: u32, id: u32, resumed: bool) {
    let mut st = core.lock();
    let Some(a) = st.waiting.remove(&req) else {
        drop(st);
        return core.fail(format!("FileId for unknown request {req}"));
    };
    if st.live.contains_key(&id) {
        drop(st);
        return core.fail(format!("the sink reused file id {id}"));
    }
    let entry = &core.entries[a.entry];
    let mut crcs = BTreeMap::new();
    let earlier = core.progress.objects.get(&entry.key);
    let mut queued = 0;
    for mut o in a.objects {
        if resumed {
            if let Some(&(len, crc)) = earlier.and_then(|m| m.get(&o.offset)) {
                if len == o.len {
                    crcs.insert(o.offset, (len, crc));
                    st.summary.objects_resumed += 1;
                    continue;
                }
            }
        }
        o.file = FileId(u64::from(id));
        st.targets.insert(o.target.0);
        st.sched.push(o);
        queued += 1;
    }
    st.live.insert(
        id,
        Live {
            entry: a.entry,
            file: a.file,
            left: queued,
            crcs,
            changed: None,
        },
    );
    drop(st);
    if !resumed && earlier.is_some() {
        if let Some(j) = &core.journal {
            journal_note(core, j.forget(&entry.key));
        }
    }
    core.cv.notify_all();
    if queued == 0 {
        file_done(core, writer, id);
    }
}

fn block_done(core: &Core, writer: &Writer, id: u32, offset: u64) {
    let mut st = core.lock();
    let Some(Block { len, crc, .. }) = st.inflight.remove(&(id, offset)) else {
        drop(st);
        return core.fail(format!(
            "BlockDone for a block not in flight ({id}, {offset})"
        ));
    };
    st.pool.release(Slot::Memory);
    st.summary.bytes += len;
    st.summary.objects += 1;
    let Some(live) = st.live.get_mut(&id) else {
        drop(st);
        return core.fail(format!("BlockDone for unknown file {id}"));
    };
    live.crcs.insert(offset, (len, crc));
    live.left -= 1;
    let (last, key) = (live.left == 0, core.entries[live.entry].key.clone());
    drop(st);
    core.cv.notify_all();
    if let Some(j) = &core.journal {
        journal_note(core, j.object(&key, offset, len, crc));
    }
    if last {
        file_done(core, writer, id);
    }
}

fn file_done(core: &Core, writer: &Writer, id: u32) {
    let mut st = core.lock();
    let Some(live) = st.live.get(&id) else { return };
    let (entry, file, seen) = (live.entry, Arc::clone(&live.file), live.changed.clone());
    drop(st);
    // Checked after the last object was read: a file that changed since
    // the walk is dropped at the sink, not put in place torn.
    if let Some(why) = seen.or_else(|| core.entries[entry].changed(&file)) {
        st = core.lock();
        if let Some(live) = st.live.get_mut(&id) {
            live.changed = Some(why.clone());
        }
        drop(st);
        if let Err(e) = writer.message(&Message::FileCancel {
            file: id,
            reason: why,
        }) {
            core.fail(network_error(&core.sink, "sending", &e));
        }
        return;
    }
    st = core.lock();
    let Some(live) = st.live.get(&id) else { return };
    let mut expect = 0u64;
    for (&off, &(len, _)) in &live.crcs {
        if off != expect {
            let why = format!(
                "{}: objects do not tile the file at {expect}",
                core.entries[live.entry].src.display()
            );
            drop(st);
            return core.fail(why);
        }
        expect += len;
    }
    let pieces: Vec<(u64, u32)> = live.crcs.values().copied().collect();
    let size = core.entries[live.entry].size;
    drop(st);
    let crc = crate::crc::combine_all(pieces);
    if let Err(e) = writer.message(&Message::FileDone {
        file: id,
        size,
        crc,
    }) {
        core.fail(network_error(&core.sink, "sending", &e));
    }
}

fn file_finished(core: &Core, id: u32, failure: Option<String>) {
    let mut st = core.lock();
    let Some(live) = st.live.remove(&id) else {
        drop(st);
        return core.fail(format!("result for unknown file {id}"));
    };
    st.open -= 1;
    st.finished += 1;
    let key = core.entries[live.entry].key.clone();
    match (&failure, live.changed) {
        (None, _) => st.summary.files += 1,
        // The sink's answer to our `FileCancel`: report what changed.
        (Some(_), Some(changed)) => st.summary.changed.push(changed),
        (Some(reason), None) => st.summary.failed.push(reason.clone()),
    }
    drop(st);
    core.cv.notify_all();
    if let Some(j) = &core.journal {
        journal_note(
            core,
            if failure.is_none() {
                j.file(&key)
            } else {
                j.forget(&key)
            },
        );
    }
}

fn io_loop(core: &Core, writer: &Writer) {
    let mut scratch = Vec::new();
    loop {
        let mut st = core.lock();
        let (object, slot) = loop {
            if Core::stopped(&st) {
                return;
            }
            if let Some(object) = st.sched.dispatch() {
                if let Some(slot) = st.pool.reserve() {
                    break (object, slot);
                }
                st.sched.requeue(object);
            }
            st = core.wait(st);
        };
        let id = object.file.0 as u32;
        let Some(live) = st.live.get(&id) else {
            drop(st);
            return core.fail(format!("object of unknown file {id}"));
        };
        let (file, entry) = (Arc::clone(&live.file), live.entry);
        let path = core.entries[entry].src.clone();
        let mut buf = match slot {
            Slot::Memory => st.bufs.pop().unwrap_or_default(),
            Slot::Spill => std::mem::take(&mut scratch),
        };
        drop(st);
        buf.resize(object.len as usize, 0);
        let started = core.now();
        let read = core.layout.read_object(&path, &file, &object, &mut buf);
        let finished = core.now();
        if let Err(e) = read {
            // A file that shrank (or was otherwise changed) is that file's
            // failure; any other read error stops the transfer.
            let Some(why) = core.entries[entry].changed(&file) else {
                return core.fail(format!(
                    "{}: read at {}: {e}",
                    path.display(),
                    object.offset
                ));
            };
            let mut st = core.lock();
            st.sched.complete(&object, started, finished);
            st.pool.release(slot);
            match slot {
                Slot::Memory => st.bufs.push(buf),
                Slot::Spill => scratch = buf,
            }
            let last = st.live.get_mut(&id).is_some_and(|live| {
                live.changed.get_or_insert(why);
                live.left -= 1;
                live.left == 0
            });
            drop(st);
            core.cv.notify_all();
            if last {
                file_done(core, writer, id);
            }
            continue;
        }
        let crc = crc32c::crc32c(&buf);
        let mut st = core.lock();
        st.sched.complete(&object, started, finished);
        let block = Block {
            file: id,
            offset: object.offset,
            len: object.len,
            crc,
        };
        match slot {
            Slot::Memory => st.send_q.push_back(Ready { block, buf }),
            Slot::Spill => {
                let idx = st.spill_free.pop().expect("a spill slot per reservation");
                drop(st);
                let spill = core
                    .spill
                    .as_ref()
                    .expect("spill slots only with a spill file");
                if let Err(e) = spill.write_all_at(&buf, u64::from(idx) * MAX_OBJECT as u64) {
                    return core.fail(format!("spill: {e}"));
                }
                scratch = buf;
                st = core.lock();
                st.spill_q.push_back(Spilled { block, slot: idx });
            }
        }
        drop(st);
        core.cv.notify_all();
    }
}

fn spill_loop(core: &Core) {
    let spill = core
        .spill
        .as_ref()
        .expect("spill thread only with a spill file");
    loop {
        let mut st = core.lock();
        let item = loop {
            if Core::stopped(&st) {
                return;
            }
            if !st.spill_q.is_empty() && st.pool.reserve_memory() {
                break st.spill_q.pop_front().expect("not empty");
            }
            st = core.wait(st);
        };
        let mut buf = st.bufs.pop().unwrap_or_default();
        drop(st);
        buf.resize(item.block.len as usize, 0);
        if let Err(e) = spill.read_exact_at(&mut buf, u64::from(item.slot) * MAX_OBJECT as u64) {
            return core.fail(format!("spill: {e}"));
        }
        let mut st = core.lock();
        st.pool.release(Slot::Spill);
        st.spill_free.push(item.slot);
        st.send_q.push_back(Ready {
            block: item.block,
            buf,
        });
        drop(st);
        core.cv.notify_all();
    }
}

fn send_loop(core: &Core, writer: &Writer) {
    loop {
        let mut st = core.lock();
        let ready = loop {
            if Core::stopped(&st) {
                return;
            }
            if let Some(r) = st.send_q.pop_front() {
                break r;
            }
            st = core.wait(st);
        };
        let b = ready.block;
        st.inflight.insert((b.file, b.offset), b);
        drop(st);
        let header = wire::block_header(b.file, b.offset, b.crc, ready.buf.len());
        if let Err(e) = writer.send(&[&header, &ready.buf]) {
            return core.fail(network_error(&core.sink, "sending", &e));
        }
        core.lock().bufs.push(ready.buf);
    }
}

/// Tell `observer` how far the transfer is every 250 ms until it stops,
/// then once more with `ended`.
fn progress_loop(core: &Core, observer: &(dyn Fn(&SendProgress) + Send + Sync)) {
    let bytes_total: u64 = core.entries.iter().map(|e| e.size).sum();
    // Files the journal shows complete are not sent again: done already.
    let bytes_earlier: u64 = core
        .entries
        .iter()
        .filter(|e| core.progress.files.contains(&e.key))
        .map(|e| e.size)
        .sum();
    loop {
        let st = core.lock();
        let stop = Core::stopped(&st);
        let s = &st.summary;
        let now = SendProgress {
            bytes_done: s.bytes + s.bytes_unchanged + bytes_earlier,
            bytes_total,
            files_done: s.files + s.files_unchanged + s.files_already_done,
            files_total: core.entries.len() as u64,
            objects: s.objects,
            ended: stop,
        };
        drop(st);
        observer(&now);
        if stop {
            return;
        }
        thread::sleep(Duration::from_millis(250));
    }
}

/// The default journal path for a transfer: under
/// `$XDG_STATE_HOME/sluice/xfer` (or `~/.local/state/sluice/xfer`), named
/// by a hash of the destination and the sources.
pub fn default_journal(destination: &Destination, sources: &[PathBuf]) -> Option<PathBuf> {
    let base = std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state")))?;
    // FNV-1a over the destination and the absolute sources.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |b: &[u8]| {
        for &x in b {
            h ^= u64::from(x);
            h = h.wrapping_mul(0x100_0000_01b3);
        }
        h ^= 0xff;
    };
    eat(destination.to_string().as_bytes());
    for s in sources {
        let abs = fs::canonicalize(s).unwrap_or_else(|_| s.clone());
        eat(abs.as_os_str().as_encoded_bytes());
    }
    Some(base.join("sluice/xfer").join(format!("{h:016x}.journal")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn destinations_parse() {
        let d: Destination = "sluice://127.0.0.1:7000/runs/a/".parse().unwrap();
        assert_eq!(
            (d.host.as_str(), d.port, d.dest.as_str()),
            ("127.0.0.1", 7000, "runs/a")
        );
        let d: Destination = "sluice://[::1]:7000".parse().unwrap();
        assert_eq!((d.host.as_str(), d.dest.as_str()), ("::1", ""));
        assert_eq!(d.to_string(), "sluice://[::1]:7000/");
        for bad in [
            "http://h:1/x",
            "sluice://h/x",
            "sluice://:1/x",
            "sluice://h:99999/x",
            "sluice://h:1/../x",
            "sluice://h:1//x",
        ] {
            assert!(bad.parse::<Destination>().is_err(), "{bad}");
        }
    }

    #[test]
    fn long_objects_are_cut_to_the_wire_bound() {
        let o = Object {
            file: FileId(0),
            offset: 0,
            len: MAX_OBJECT as u64 * 2 + 5,
            target: sluice_policy::lads::TargetId(3),
        };
        let cut = bounded(vec![o]);
        assert_eq!(cut.len(), 3);
        assert!(cut
            .iter()
            .all(|c| c.len <= MAX_OBJECT as u64 && c.target == o.target));
        assert_eq!(cut.iter().map(|c| c.len).sum::<u64>(), o.len);
    }
}
