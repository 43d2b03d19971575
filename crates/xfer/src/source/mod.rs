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
//!
//! Modules: `crate::tree` (walking the sources), `pipeline` (the threads above,
//! sharing one `Core`).

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::fmt;
use std::fs::{self, File};
use std::io;
use std::net::TcpStream;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use rustls::ClientConfig;
use serde::Serialize;
use sluice_policy::lads::{
    Mode, Object, Scheduler, SchedulerConfig, SchedulerStats, Slot, SlotPool,
};
use sluice_policy::{FileId, Time};

use crate::direct::AlignedBuf;
use crate::journal::{Journal, Progress};
use crate::layout::{LayoutProvider, SourceFile};
use crate::tls::{self, Channel, Writer};
use crate::wire::{self, DestStat, Message, MAX_OBJECT, MAX_STAT};

mod pipeline;

use crate::tree::{walk, Entry};
use pipeline::*;

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

impl SendProgress {
    /// The progress of a run of `files_total` files of `bytes_total`
    /// bytes, of which files of `bytes_earlier` bytes were complete in the
    /// journal, from its summary so far.
    pub(crate) fn of(
        s: &Summary,
        bytes_total: u64,
        bytes_earlier: u64,
        files_total: u64,
        ended: bool,
    ) -> SendProgress {
        SendProgress {
            bytes_done: s.bytes + s.bytes_unchanged + bytes_earlier,
            bytes_total,
            files_done: s.files + s.files_unchanged + s.files_already_done,
            files_total,
            objects: s.objects,
            ended,
        }
    }

    /// Bytes of `entries` in all, and bytes of those the journal's
    /// `progress` shows complete (not sent again: done already).
    pub(crate) fn totals(entries: &[Entry], progress: &Progress) -> (u64, u64) {
        let total = entries.iter().map(|e| e.size).sum();
        let earlier = entries
            .iter()
            .filter(|e| progress.files.contains(&e.key))
            .map(|e| e.size)
            .sum();
        (total, earlier)
    }
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
    /// Connections (0 for a local copy, `xfer copy`).
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

impl Summary {
    /// The end of a run of `send` or `copy` that started at `start`: the
    /// time, rate and scheduler counts filled in; an error for a run
    /// stopped by `fatal`; the journal removed after a run that left no
    /// file failed or changed (a rerun then relies on the quick check).
    pub(crate) fn conclude(
        mut self,
        start: Instant,
        stats: SchedulerStats,
        targets: u64,
        fatal: Option<String>,
        journal: Option<Journal>,
    ) -> io::Result<Summary> {
        self.seconds = start.elapsed().as_secs_f64();
        self.mb_per_s = if self.seconds > 0.0 {
            self.bytes as f64 / 1e6 / self.seconds
        } else {
            0.0
        };
        self.busy_skips = stats.busy_skips;
        self.congested_skips = stats.congested_skips;
        self.congested_marks = stats.congested_marks;
        self.targets = targets;
        if let Some(why) = fatal {
            return Err(io::Error::other(format!(
                "{why} (after {} files; rerun the same command to resume)",
                self.files
            )));
        }
        if let Some(j) = journal {
            if self.failed.is_empty() && self.changed.is_empty() {
                j.remove()?;
            }
        }
        Ok(self)
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // A local copy (`xfer copy`) has no connections.
        let (verb, links) = if self.connections == 0 {
            ("copied", String::new())
        } else {
            ("sent", format!(", {} connections", self.connections))
        };
        writeln!(
            f,
            "{verb} {} files, {:.1} MB in {:.2} s: {:.1} MB/s ({} mode, {} layout, {} target{}, {} threads{links})",
            self.files,
            self.bytes as f64 / 1e6,
            self.seconds,
            self.mb_per_s,
            self.mode,
            self.layout,
            self.targets,
            if self.targets == 1 { "" } else { "s" },
            self.threads,
        )?;
        writeln!(
            f,
            "unchanged {} files ({:.1} MB) not {verb}; {} directories, {} symlinks",
            self.files_unchanged,
            self.bytes_unchanged as f64 / 1e6,
            self.dirs,
            self.links
        )?;
        writeln!(
            f,
            "objects {} {verb}, {} resumed; files {} already done; skips: {} busy, {} congested ({} marks); {} spilled",
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
                "{} special files (or skipped symlinks) not {verb}",
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

/// Cut objects longer than the wire's bound into pieces on the same target.
pub(crate) fn bounded(objects: Vec<Object>) -> Vec<Object> {
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
        ready_max: READY_PER_CONNECTION * options.connections.max(1),
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
    let mut st = sluice_env::lock(&core.state);
    while st.fatal.is_none() && st.finished < to_send {
        st = sluice_env::wait(&core.cv, st);
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
    let mut st = sluice_env::lock(&core.state);
    let stats = st.sched.stats();
    let spilled = st.pool.spilled();
    let targets = st.targets.len() as u64;
    let mut summary = std::mem::take(&mut st.summary);
    drop(st);
    summary.spilled = spilled;
    let core = Arc::into_inner(core).expect("threads joined");
    summary.conclude(core.start, stats, targets, fatal, core.journal)
}

/// The default journal path for a transfer: under
/// `$XDG_STATE_HOME/sluice/xfer` (or `~/.local/state/sluice/xfer`), named
/// by a hash of the destination and the sources.
pub fn default_journal(destination: &Destination, sources: &[PathBuf]) -> Option<PathBuf> {
    default_journal_for(&destination.to_string(), sources)
}

/// The default journal path for a transfer to `destination` (a sink's
/// URL, or `copy:` and a directory), as [`default_journal`].
pub fn default_journal_for(destination: &str, sources: &[PathBuf]) -> Option<PathBuf> {
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
    eat(destination.as_bytes());
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
