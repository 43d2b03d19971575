//! `sluice xfer copy SRC... DEST`: the LADS pipeline without the network,
//! between two directories of one machine (a parallel file system's mount
//! and another, say), in the manner of mpiFileUtils' `dcp` and `dsync`.
//!
//! * The **announcer** (the calling thread) walks the sources, makes their
//!   directories and links under `DEST`, skips the files `DEST` already
//!   holds (equal size and mtime, or size and crc32c with `--checksum`:
//!   rsync's quick check, as `send`), and opens the others, at most
//!   `files_in_flight` at once: the source (read through the page cache,
//!   whose readahead keeps a disk busy) and a partial copy under `DEST`
//!   ([`PartialCopy`]: preallocated, written around the page cache when it
//!   is synced). Each file's objects (its layout's, or fixed-size chunks
//!   of a POSIX file) go into the LADS [`Scheduler`], queued by the storage
//!   target that holds them.
//! * `threads` **workers** each take an object, read it into their own
//!   aligned buffer, checksum it and write it at its offset. The worker
//!   that handles a file's last object finishes the file: it checks that
//!   the source did not change while it was read (size, mtime, ctime),
//!   verifies the copy (the objects' crcs combined; with `verify`, every
//!   byte read back from the device after the sync), syncs it once and
//!   renames it into place, then syncs the directory.
//!
//! The resume journal is `send`'s: a line per object written, one per
//! file finished. A rerun with it continues the partial copies (each
//! resumed file is read back whole before it is renamed); a rerun after a
//! complete copy finds every file unchanged and writes nothing.
//!
//! Memory: one object-sized buffer per worker. No lock is held across I/O:
//! the workers and the announcer share one mutex-protected [`State`] for
//! the scheduler, the open files and the summary.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::{self, File};
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use rustix::fs::{Mode, OFlags, Timespec};
use sluice_policy::lads::{Mode as SchedMode, Scheduler, SchedulerConfig};
use sluice_policy::{FileId, Time};

use crate::dest::{self, PartialCopy};
use crate::direct::AlignedBuf;
use crate::journal::{Journal, Progress};
use crate::layout::{LayoutProvider, SourceFile};
use crate::source::{bounded, Compare, ProgressFn, SendProgress, Summary};
use crate::tree::{walk, Entry};
use crate::wire::DestStat;

/// How to copy.
pub struct CopyOptions {
    /// Files and directories to copy; each lands under `destination` by its
    /// name.
    pub sources: Vec<PathBuf>,
    /// The directory to copy into (made if missing).
    pub destination: PathBuf,
    /// Worker threads.
    pub threads: usize,
    /// Where the sources' objects live.
    pub layout: Arc<dyn LayoutProvider>,
    /// Scheduling mode and congestion settings.
    pub scheduler: SchedulerConfig,
    /// Resume journal, if any.
    pub journal: Option<PathBuf>,
    /// Files open at once, at most (1 in file-at-a-time mode).
    pub files_in_flight: usize,
    /// Which destination files count as unchanged and are not copied.
    pub compare: Compare,
    /// Recreate symbolic links (`false`: skip and count them).
    pub links: bool,
    /// Sync each file before its rename and its directory after (false:
    /// `--no-fsync`, `cp`'s and rsync's durability; writes then go through
    /// the page cache).
    pub fsync: bool,
    /// Read every file back from the device after its sync and compare its
    /// crc32c with the source's before the rename.
    pub verify: bool,
    /// Told how far the copy is, about four times a second and once at the
    /// end.
    pub progress: Option<ProgressFn>,
}

/// A file being copied: its source, its partial copy.
struct Open {
    entry: usize,
    source: SourceFile,
    copy: PartialCopy,
}

/// What the shared state knows of a file being copied.
struct InFlight {
    open: Arc<Open>,
    /// Objects not yet written.
    left: usize,
    /// Objects written (this run or, from the journal, an earlier one):
    /// offset → (length, crc32c).
    crcs: BTreeMap<u64, (u64, u32)>,
    /// The source changed while it was read: what changed.
    changed: Option<String>,
}

struct State {
    sched: Scheduler,
    files: HashMap<u64, InFlight>,
    /// The announcer has opened every file it will.
    announced: bool,
    fatal: Option<String>,
    summary: Summary,
    targets: HashSet<u32>,
}

struct Core {
    state: Mutex<State>,
    cv: Condvar,
    entries: Vec<Entry>,
    layout: Arc<dyn LayoutProvider>,
    journal: Option<Journal>,
    progress: Progress,
    fsync: bool,
    verify: bool,
    start: Instant,
}

impl Core {
    fn now(&self) -> Time {
        Time::from_nanos(u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }

    fn fail(&self, why: String) {
        sluice_env::lock(&self.state).fatal.get_or_insert(why);
        self.cv.notify_all();
    }

    fn journal(&self, r: Option<io::Result<()>>) {
        if let Some(Err(e)) = r {
            self.fail(format!("journal: {e}"));
        }
    }
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

/// Refuse what cannot work: zero threads or files in flight, no source,
/// and a destination inside a source directory (the copy would walk its
/// own output).
fn check(options: &CopyOptions) -> io::Result<()> {
    if options.threads == 0 || options.files_in_flight == 0 {
        return Err(invalid(
            "threads and files in flight must be at least 1, not 0".into(),
        ));
    }
    if options.sources.is_empty() {
        return Err(invalid("nothing to copy: give at least one source".into()));
    }
    let dest = absolute(&options.destination)?;
    for src in &options.sources {
        let s = fs::canonicalize(src)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", src.display())))?;
        if s.is_dir() && dest.starts_with(&s) {
            return Err(invalid(format!(
                "cannot copy {} into itself ({} is inside it)",
                src.display(),
                options.destination.display()
            )));
        }
    }
    Ok(())
}

/// `path` made absolute with its symlinks resolved as far as it exists.
fn absolute(path: &Path) -> io::Result<PathBuf> {
    let mut missing = Vec::new();
    let mut p = if path.is_absolute() {
        path.to_owned()
    } else {
        std::env::current_dir()?.join(path)
    };
    loop {
        match fs::canonicalize(&p) {
            Ok(mut found) => {
                found.extend(missing.iter().rev());
                return Ok(found);
            }
            Err(_) => match (p.file_name().map(ToOwned::to_owned), p.parent()) {
                (Some(name), Some(parent)) => {
                    missing.push(name);
                    p = parent.to_owned();
                }
                _ => return Ok(p),
            },
        }
    }
}

/// The default journal path for copying `sources` into `destination`.
pub fn default_journal(destination: &Path, sources: &[PathBuf]) -> Option<PathBuf> {
    let dest = absolute(destination).unwrap_or_else(|_| destination.to_owned());
    crate::source::default_journal_for(&format!("copy:{}", dest.display()), sources)
}

/// Copy the sources; returns the summary (which lists files that failed or
/// changed), or an error that stopped the whole copy.
pub fn copy(options: CopyOptions) -> io::Result<Summary> {
    check(&options)?;
    let tree = walk(&options.sources, options.links)?;
    fs::create_dir_all(&options.destination)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", options.destination.display())))?;
    let root = rustix::fs::open(
        &options.destination,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| {
        io::Error::new(
            io::Error::from(e).kind(),
            format!("{}: {e}", options.destination.display()),
        )
    })?;
    let (journal, progress) = match &options.journal {
        Some(p) => {
            let (j, p) = Journal::open(p)?;
            (Some(j), p)
        }
        None => (None, Progress::default()),
    };
    let core = Arc::new(Core {
        state: Mutex::new(State {
            sched: Scheduler::new(options.scheduler),
            files: HashMap::new(),
            announced: false,
            fatal: None,
            targets: HashSet::new(),
            summary: Summary {
                skipped_not_regular: tree.skipped,
                mode: options.scheduler.mode.name().to_owned(),
                layout: options.layout.name().to_owned(),
                threads: options.threads,
                connections: 0,
                ..Summary::default()
            },
        }),
        cv: Condvar::new(),
        entries: tree.files,
        layout: Arc::clone(&options.layout),
        journal,
        progress,
        fsync: options.fsync,
        verify: options.verify,
        start: Instant::now(),
    });

    let workers: Vec<_> = (0..options.threads)
        .map(|_| {
            let core = Arc::clone(&core);
            thread::spawn(move || worker(&core))
        })
        .collect();
    let progress_thread = options.progress.clone().map(|observer| {
        let core = Arc::clone(&core);
        thread::spawn(move || progress_loop(&core, observer.as_ref()))
    });

    make_entries(&core, &root, &tree.dirs, &tree.links);
    let in_flight = match options.scheduler.mode {
        SchedMode::FileAtATime => 1,
        SchedMode::RoundRobin | SchedMode::CongestionAware => options.files_in_flight,
    };
    announce(&core, &root, in_flight, options.compare);
    sluice_env::lock(&core.state).announced = true;
    core.cv.notify_all();
    for w in workers {
        let _ = w.join();
    }
    // Workers leave at a fatal error: wake the progress thread too.
    core.cv.notify_all();
    if let Some(t) = progress_thread {
        let _ = t.join();
    }

    let mut st = sluice_env::lock(&core.state);
    let stats = st.sched.stats();
    let targets = st.targets.len() as u64;
    let fatal = st.fatal.take();
    let summary = std::mem::take(&mut st.summary);
    // Partial copies of files still open (a fatal error) stay, for a
    // resumed rerun.
    st.files.clear();
    drop(st);
    let core = Arc::into_inner(core).expect("threads joined");
    summary.conclude(core.start, stats, targets, fatal, core.journal)
}

/// Split a walked path into its checked parent components and name.
fn split(rel: &str) -> io::Result<(Vec<String>, String)> {
    let mut parts = dest::components(rel).map_err(invalid)?;
    let name = parts
        .pop()
        .ok_or_else(|| invalid(format!("{rel:?}: empty path")))?;
    Ok((parts, name))
}

/// Make the directories, then the links.
fn make_entries(core: &Core, root: &OwnedFd, dirs: &[String], links: &[(String, String)]) {
    for path in dirs {
        let made = dest::components(path)
            .map_err(invalid)
            .and_then(|parts| dest::open_dirs(root, &parts));
        let mut st = sluice_env::lock(&core.state);
        match made {
            Ok(_) => st.summary.dirs += 1,
            Err(e) => st.summary.failed.push(format!("{path}: {e}")),
        }
    }
    for (path, target) in links {
        let made = split(path).and_then(|(parents, name)| {
            dest::open_dirs(root, &parents).and_then(|dir| dest::make_symlink(&dir, &name, target))
        });
        let mut st = sluice_env::lock(&core.state);
        match made {
            Ok(()) => st.summary.links += 1,
            Err(e) => st.summary.failed.push(format!("{path}: {e}")),
        }
    }
}

/// Skip the files done (journal) or unchanged at the destination, and open
/// the others, at most `in_flight` at once.
fn announce(core: &Core, root: &OwnedFd, in_flight: usize, compare: Compare) {
    for (idx, e) in core.entries.iter().enumerate() {
        if sluice_env::lock(&core.state).fatal.is_some() {
            return;
        }
        if core.progress.files.contains(&e.key) {
            sluice_env::lock(&core.state).summary.files_already_done += 1;
            continue;
        }
        if compare != Compare::Never && unchanged(root, e, compare) {
            let mut st = sluice_env::lock(&core.state);
            st.summary.files_unchanged += 1;
            st.summary.bytes_unchanged += e.size;
            continue;
        }
        let mut st = sluice_env::lock(&core.state);
        while st.fatal.is_none() && st.files.len() >= in_flight {
            st = sluice_env::wait(&core.cv, st);
        }
        drop(st);
        if let Err(why) = open_file(core, root, idx) {
            sluice_env::lock(&core.state).summary.failed.push(why);
        }
    }
}

/// Whether the destination already holds `e` (size and mtime, or size and
/// crc32c of both copies).
fn unchanged(root: &OwnedFd, e: &Entry, compare: Compare) -> bool {
    let Ok((parents, name)) = split(&e.rel) else {
        return false;
    };
    let checksum = (compare == Compare::Checksum).then_some(e.size);
    match dest::stat_file(root, &parents, &name, checksum) {
        Ok(DestStat::File {
            size,
            mtime_sec,
            mtime_nsec,
            crc,
        }) if size == e.size => match compare {
            Compare::SizeAndMtime => (mtime_sec, mtime_nsec) == (e.mtime_sec, e.mtime_nsec),
            Compare::Checksum => {
                crc.is_some()
                    && File::open(&e.src)
                        .and_then(|f| dest::crc_of(&f, e.size))
                        .ok()
                        == crc
            }
            Compare::Never => false,
        },
        _ => false,
    }
}

/// Open file `idx` at both ends and queue its objects; finish it at once
/// when nothing is left to write. A file that cannot be opened or laid out
/// fails alone.
fn open_file(core: &Core, root: &OwnedFd, idx: usize) -> Result<(), String> {
    let e = &core.entries[idx];
    // Through the page cache, even for a layout that could read around it
    // (`send` does): a copy is bound by the disk, not the CPU, and the
    // kernel's readahead kept reads ahead of the writes where direct reads
    // waited for each object (a cold big set: 1.11 s against 1.59 s, median
    // of 5; docs/lads.md, "Local copies").
    let source =
        SourceFile::open(&e.src, false).map_err(|err| format!("{}: {err}", e.src.display()))?;
    // Sequential advice doubles the readahead window: the cold big set
    // took 1.49 s against 1.59 without it (medians of 8 runs taking turns,
    // load 5-6; a small gain, inside the spread of either). Advice only:
    // a file system that ignores it loses nothing.
    let _ = rustix::fs::fadvise(&source.file, 0, None, rustix::fs::Advice::Sequential);
    let layout = core
        .layout
        .layout(&e.src, e.size)
        .map_err(|err| format!("{}: layout: {err}", e.src.display()))?;
    let earlier = core.progress.objects.get(&e.key);
    let (parents, name) = split(&e.rel).map_err(|err| format!("{}: {err}", e.rel))?;
    let copy = dest::open_dirs(root, &parents)
        .and_then(|dir| {
            let mtime = Timespec {
                tv_sec: e.mtime_sec,
                tv_nsec: i64::from(e.mtime_nsec.min(999_999_999)) as _,
            };
            PartialCopy::create(
                dir,
                name,
                e.size,
                e.mode,
                mtime,
                earlier.is_some(),
                core.fsync,
            )
        })
        .map_err(|err| format!("{}: {err}", e.rel))?;
    if earlier.is_some() && !copy.resumed {
        core.journal(core.journal.as_ref().map(|j| j.forget(&e.key)));
    }
    let mut st = sluice_env::lock(&core.state);
    let id = idx as u64;
    let mut crcs = BTreeMap::new();
    let mut left = 0;
    for o in bounded(layout.objects(FileId(id), e.size)) {
        if copy.resumed {
            if let Some(&(len, crc)) = earlier.and_then(|m| m.get(&o.offset)) {
                if len == o.len {
                    crcs.insert(o.offset, (len, crc));
                    st.summary.objects_resumed += 1;
                    continue;
                }
            }
        }
        st.targets.insert(o.target.0);
        st.sched.push(o);
        left += 1;
    }
    st.files.insert(
        id,
        InFlight {
            open: Arc::new(Open {
                entry: idx,
                source,
                copy,
            }),
            left,
            crcs,
            changed: None,
        },
    );
    drop(st);
    core.cv.notify_all();
    if left == 0 {
        finish_file(core, id);
    }
    Ok(())
}

fn worker(core: &Core) {
    let mut buf = AlignedBuf::new();
    loop {
        let mut st = sluice_env::lock(&core.state);
        let object = loop {
            if st.fatal.is_some() {
                return;
            }
            if let Some(object) = st.sched.dispatch() {
                break object;
            }
            if st.announced && st.files.is_empty() {
                return;
            }
            st = sluice_env::wait(&core.cv, st);
        };
        let id = object.file.0;
        let Some(open) = st.files.get(&id).map(|f| Arc::clone(&f.open)) else {
            drop(st);
            return core.fail(format!("object of unknown file {id}"));
        };
        drop(st);
        let entry = &core.entries[open.entry];
        buf.set_len(object.len as usize);
        let started = core.now();
        let read = core
            .layout
            .read_object(&entry.src, &open.source, &object, buf.as_mut_slice());
        let finished = core.now();
        let written = match read {
            Ok(()) => {
                let crc = crc32c::crc32c(buf.as_slice());
                if let Err(e) = open.copy.write(buf.as_slice(), object.offset, crc) {
                    return core.fail(format!("{}: write at {}: {e}", entry.rel, object.offset));
                }
                Ok(crc)
            }
            // A file that shrank (or otherwise changed) is that file's
            // failure; any other read error stops the copy.
            Err(e) => match entry.changed(&open.source.file) {
                Some(why) => Err(why),
                None => {
                    return core.fail(format!(
                        "{}: read at {}: {e}",
                        entry.src.display(),
                        object.offset
                    ))
                }
            },
        };
        let mut st = sluice_env::lock(&core.state);
        st.sched.complete(&object, started, finished);
        let Some(f) = st.files.get_mut(&id) else {
            drop(st);
            return core.fail(format!("object of unknown file {id}"));
        };
        f.left -= 1;
        let last = f.left == 0;
        let crc = match written {
            Ok(crc) => {
                f.crcs.insert(object.offset, (object.len, crc));
                st.summary.bytes += object.len;
                st.summary.objects += 1;
                Some(crc)
            }
            Err(why) => {
                f.changed.get_or_insert(why);
                None
            }
        };
        drop(st);
        core.cv.notify_all();
        if let (Some(crc), Some(j)) = (crc, &core.journal) {
            core.journal(Some(j.object(&entry.key, object.offset, object.len, crc)));
        }
        if last {
            finish_file(core, id);
        }
    }
}

/// Check, verify, sync and rename file `id` (all its objects are written),
/// or drop its partial copy if the source changed or the check failed.
fn finish_file(core: &Core, id: u64) {
    let Some(f) = sluice_env::lock(&core.state)
        .files
        .remove(&id)
        .map(|f| (f.open, f.crcs, f.changed))
    else {
        return core.fail(format!("finish of unknown file {id}"));
    };
    let (open, crcs, changed) = f;
    let entry = &core.entries[open.entry];
    // Checked after the last object was read: a file that changed since
    // the walk is not put in place torn.
    let outcome = match changed.or_else(|| entry.changed(&open.source.file)) {
        Some(why) => Err((true, why)),
        None => {
            let mut expect = 0u64;
            let tiled = crcs.iter().all(|(&off, &(len, _))| {
                let ok = off == expect;
                expect += len;
                ok
            });
            if !tiled || expect != entry.size {
                Err((
                    false,
                    format!("{}: objects do not tile the file", entry.rel),
                ))
            } else {
                let crc = crate::crc::combine_all(crcs.values().copied());
                open.copy
                    .finish(entry.size, crc, core.fsync, core.verify)
                    .map_err(|e| (false, format!("{}: {e}", entry.rel)))
            }
        }
    };
    let mut st = sluice_env::lock(&core.state);
    let done = match outcome {
        Ok(()) => {
            st.summary.files += 1;
            true
        }
        Err((changed, why)) => {
            open.copy.discard();
            if changed {
                st.summary.changed.push(why);
            } else {
                st.summary.failed.push(why);
            }
            false
        }
    };
    drop(st);
    core.cv.notify_all();
    core.journal(core.journal.as_ref().map(|j| {
        if done {
            j.file(&entry.key)
        } else {
            j.forget(&entry.key)
        }
    }));
}

/// Tell `observer` how far the copy is every 250 ms until it ends, then
/// once more with `ended` (as soon as it ends, not at the next tick).
fn progress_loop(core: &Core, observer: &(dyn Fn(&SendProgress) + Send + Sync)) {
    let (bytes_total, bytes_earlier) = SendProgress::totals(&core.entries, &core.progress);
    let ended = |st: &State| st.fatal.is_some() || (st.announced && st.files.is_empty());
    loop {
        let mut st = sluice_env::lock(&core.state);
        let tick = Instant::now() + Duration::from_millis(250);
        loop {
            let now = Instant::now();
            if ended(&st) || now >= tick {
                break;
            }
            st = core
                .cv
                .wait_timeout(st, tick - now)
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
        let stop = ended(&st);
        let files_total = core.entries.len() as u64;
        let now = SendProgress::of(&st.summary, bytes_total, bytes_earlier, files_total, stop);
        drop(st);
        observer(&now);
        if stop {
            return;
        }
    }
}
