//! FUSE passthrough (`mount.passthrough`, Linux 6.9+): a file the engine
//! would only ever write to and read from its capacity file is opened so
//! that the kernel reads and writes that file itself, and those requests
//! never come to sluice (docs/fuse.md, "Passthrough"). Whether a file
//! qualifies is the engine's call ([`Volume::passthrough_file`]); this
//! module keeps the kernel's rules for a node:
//! - every handle of a node open by passthrough must name the same backing
//!   file, so one backing id per node is shared while any handle is open;
//! - once a node is open by passthrough, every further open of it must be
//!   too (the kernel fails a plain open with EIO), so it is, whatever the
//!   engine would say now (nothing can have been buffered meanwhile);
//! - a passthrough open beside a page-cached handle fails with EIO, and a
//!   plain handle may become page-cached at any time (`mount.direct_io =
//!   false`, or a shared `mmap` of a direct-I/O handle), so a node open
//!   plainly stays plain until its last handle goes.
//!
//! So the handles open on a node at once are all of one kind, and a
//! release needs no handle of its own to say which kind ended.
//!
//! The backing id is dropped (closed in the kernel) when the node's last
//! handle is released.
//!
//! **Small files read stay plain** (issue 33): a read-only open of an
//! existing file shorter than [`PASSTHROUGH_MIN_BYTES`] gets a plain
//! handle. Registering a backing file costs two ioctls and the node's
//! bookkeeping at open and release, more than the one read request such a
//! file's reads take through sluice: mdtest's read phases (empty and
//! 3,901-byte files) ran at 0.53x and 0.73x mergerfs with passthrough,
//! 0.86x and 0.82x without (docs/results/mdtest.md). An open for writing
//! is registered whatever the size: the writes that follow are what
//! passthrough is for. (fio opens the file it just created again with
//! `O_RDWR`, empty; when that open stayed plain, every write of its job
//! came through sluice: 0.38-0.40x mergerfs with 4 jobs, issue 32.)
//!
//! **Directories of small files stay plain** (issue 33): a create or an
//! open for writing in a directory whose last [`SMALL_RUN`] files closed
//! shorter than [`PASSTHROUGH_MIN_BYTES`] gets a plain handle, without
//! asking the engine (or the capacity file's length, which would cost
//! what the rule saves). The file is most likely small too (mdtest's
//! empty and 3,901-byte files, a directory of job scripts or logs), and
//! for such a file the backing file costs more than the few requests it
//! takes through sluice: mdtest-easy's create and read, both opens for
//! writing of an empty file, ran at 0.81-0.84x and 0.65-0.77x mergerfs
//! registered, 0.91-1.10x and 1.12-1.25x with passthrough off
//! (docs/results/mdtest.md). A file closed at 64 KiB or more ends its
//! directory's run, so the files after it are registered again; a large
//! file written through a plain handle is served by sluice's own write
//! path meanwhile, at FUSE's request rate. The length at a node's last
//! release is its capacity file's (a stat) if the kernel served it, else
//! the engine's. fio's jobs, IOR's files and a checkpoint's are written
//! large before they close, so their directories never start a run.

use std::collections::HashMap;
use std::io;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use rustix::fs::OFlags;

use sluice_engine::KernelFile;
use sluice_env::BackendFile;

use crate::volume::{lock, Volume};

/// The smallest existing file a read-only open registers (module docs).
pub const PASSTHROUGH_MIN_BYTES: u64 = 64 * 1024;

/// Files closed shorter than [`PASSTHROUGH_MIN_BYTES`] in a row that make
/// a directory's new and short files plain (module docs).
pub const SMALL_RUN: u32 = 8;

/// Directories whose runs are kept at most; past it they start again
/// (the runs are a hint, not state the kernel's rules depend on).
const RUNS_KEPT: usize = 1 << 16;

/// Where a file being opened stands, as the caller knows it.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Place {
    /// The node of the directory the file was opened by.
    pub dir: Option<u64>,
    /// Its length, when known without asking the engine (a create's
    /// reply).
    pub len: Option<u64>,
}

/// Whether an open with `open(2)`'s `flags` may write: opened for writing,
/// or creating or truncating the file. The kernel strips `O_CREAT` from an
/// open of a file that exists (and `O_TRUNC` without atomic truncation), so
/// the access mode is what tells a writer.
fn opens_for_writing(flags: i32) -> bool {
    let flags = OFlags::from_bits_retain(flags as u32);
    flags & OFlags::ACCMODE != OFlags::RDONLY || flags.intersects(OFlags::CREATE | OFlags::TRUNC)
}

/// One node's handles through this mount.
struct Node<B> {
    opens: u32,
    /// The backing id the kernel serves the node from, while one is.
    backing: Option<Arc<B>>,
    /// The capacity file behind `backing`: its length at the last release
    /// is the file's (the kernel wrote it unseen).
    file: Option<Arc<dyn BackendFile>>,
    /// The directory of its first open ([`Place::dir`]).
    dir: Option<u64>,
    /// The node's first open is asking the engine and registering its
    /// backing file, without the map's lock: further opens wait for it.
    registering: bool,
    /// An open waits for that registration: its end wakes it (a wake-up
    /// with no waiter is a system call at every open).
    waited: bool,
}

/// The passthrough state of a mount's nodes and directories.
struct Table<B> {
    nodes: HashMap<u64, Node<B>>,
    /// Per directory node, files closed in a row shorter than
    /// [`PASSTHROUGH_MIN_BYTES`] (absent: none).
    small_runs: HashMap<u64, u32>,
}

impl<B> Table<B> {
    /// Whether `dir`'s new and short files are plain (module docs).
    fn small_dir(&self, dir: Option<u64>) -> bool {
        dir.and_then(|d| self.small_runs.get(&d))
            .is_some_and(|&run| run >= SMALL_RUN)
    }

    /// A file of `dir` closed `len` bytes long.
    fn closed(&mut self, dir: u64, len: u64) {
        if len >= PASSTHROUGH_MIN_BYTES {
            self.small_runs.remove(&dir);
            return;
        }
        if self.small_runs.len() >= RUNS_KEPT && !self.small_runs.contains_key(&dir) {
            self.small_runs.clear();
        }
        let run = self.small_runs.entry(dir).or_insert(0);
        *run = run.saturating_add(1);
    }
}

/// The passthrough state of a mount. `B` is the kernel's backing id
/// (fuser's `BackingId`; a plain value in the tests).
pub(crate) struct Passthrough<B> {
    /// Asked for by the config and granted by the kernel at init.
    enabled: bool,
    table: Mutex<Table<B>>,
    /// Signalled when a node's registration ends.
    registered: Condvar,
    /// A registration failed once (and was logged).
    warned: AtomicBool,
}

impl<B> Passthrough<B> {
    /// Passthrough asked for (`enabled`: the kernel still has to grant it,
    /// [`Passthrough::granted`]).
    pub(crate) fn new(enabled: bool) -> Passthrough<B> {
        Passthrough {
            enabled,
            table: Mutex::new(Table {
                nodes: HashMap::new(),
                small_runs: HashMap::new(),
            }),
            registered: Condvar::new(),
            warned: AtomicBool::new(false),
        }
    }

    /// Whether passthrough is asked for (before init) or on (after).
    pub(crate) fn enabled(&self) -> bool {
        self.enabled
    }

    /// The kernel's answer at init: passthrough stays on only if granted.
    pub(crate) fn granted(&mut self, granted: bool) {
        self.enabled &= granted;
    }

    /// A new handle `fh` of node `ino`, opened with `open(2)`'s `flags`
    /// where `place` says: the backing id the kernel is to serve it from,
    /// or `None` for a plain handle. `register` gives the kernel a
    /// capacity file and returns its backing id; when it fails (not
    /// CAP_SYS_ADMIN, a capacity tier stacked too deep), the handle is
    /// plain and the failure logged once.
    pub(crate) fn open(
        &self,
        volume: &Volume,
        ino: u64,
        fh: u64,
        flags: i32,
        place: Place,
        register: impl FnOnce(BorrowedFd<'_>) -> io::Result<B>,
    ) -> Option<Arc<B>> {
        if !self.enabled {
            return None;
        }
        // The table's lock is held only to count: the engine's answer and
        // the kernel's registration (an ioctl) run without it, so the opens
        // and releases of other nodes go on meanwhile (issue 33).
        let writes = opens_for_writing(flags);
        let mut table = lock(&self.table);
        let small_dir = table.small_dir(place.dir);
        let node = table.nodes.entry(ino).or_insert(Node {
            opens: 0,
            backing: None,
            file: None,
            dir: place.dir,
            registering: false,
            waited: false,
        });
        node.opens += 1;
        let first = node.opens == 1;
        loop {
            match table.nodes.get_mut(&ino) {
                Some(node) if node.registering => node.waited = true,
                _ => break,
            }
            table = sluice_env::wait(&self.registered, table);
        }
        let backing = match table.nodes.get(&ino).and_then(|n| n.backing.clone()) {
            Some(backing) => backing,
            None if !first => return None,
            None => {
                if let Some(node) = table.nodes.get_mut(&ino) {
                    node.registering = true;
                }
                drop(table);
                let wanted = Wanted {
                    writes,
                    small_dir,
                    len: place.len,
                };
                let registered = self.register(volume, fh, wanted, register);
                let mut table = lock(&self.table);
                let node = table.nodes.get_mut(&ino)?;
                node.registering = false;
                let (backing, file) = registered.unzip();
                node.backing = backing.clone();
                node.file = file;
                if std::mem::take(&mut node.waited) {
                    self.registered.notify_all();
                }
                backing?
            }
        };
        if writes {
            volume.note_kernel_writes(fh);
        }
        Some(backing)
    }

    /// The backing id of handle `fh`'s capacity file, and that file, if
    /// the open is `wanted` there, the engine lets the kernel serve it and
    /// the kernel takes it.
    fn register(
        &self,
        volume: &Volume,
        fh: u64,
        wanted: Wanted,
        register: impl FnOnce(BorrowedFd<'_>) -> io::Result<B>,
    ) -> Option<(Arc<B>, Arc<dyn BackendFile>)> {
        // A new or short file, or one opened for writing, in a directory
        // of short files: plain, without asking the engine.
        if wanted.small_dir
            && (wanted.writes || wanted.len.is_some_and(|len| len < PASSTHROUGH_MIN_BYTES))
        {
            return None;
        }
        let KernelFile { file, len } = volume.passthrough_file(fh)?;
        // The engine's length, else the file's (one statx less an open).
        let short = match wanted.len.or(len) {
            Some(len) => len < PASSTHROUGH_MIN_BYTES,
            None => file.len().ok()? < PASSTHROUGH_MIN_BYTES,
        };
        if short && !wanted.writes {
            return None;
        }
        match register(file.as_fd()?) {
            Ok(backing) => Some((Arc::new(backing), file)),
            Err(e) => {
                if !self.warned.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        "FUSE passthrough is unavailable ({e}): files are served \
                         through sluice (mount.passthrough = false silences this)"
                    );
                }
                None
            }
        }
    }

    /// A handle of node `ino` released; `len` is the file's length as the
    /// engine knows it (`None`: it does not). Its backing id goes with the
    /// node's last handle, whose length counts toward its directory's run
    /// (module docs).
    pub(crate) fn release(&self, ino: u64, len: Option<u64>) {
        if !self.enabled {
            return;
        }
        let mut table = lock(&self.table);
        let last = table.nodes.get_mut(&ino).is_some_and(|node| {
            node.opens = node.opens.saturating_sub(1);
            node.opens == 0
        });
        let Some(gone) = last.then(|| table.nodes.remove(&ino)).flatten() else {
            return;
        };
        drop(table);
        // Its length, and its backing id (an ioctl, when this was its last
        // holder, closes it in the kernel), without the table's lock.
        let len = match &gone.file {
            Some(file) => file.len().ok(),
            None => len,
        };
        let dir = gone.dir;
        drop(gone);
        if let (Some(dir), Some(len)) = (dir, len) {
            lock(&self.table).closed(dir, len);
        }
    }
}

/// What an open asks of [`Passthrough::register`].
#[derive(Clone, Copy)]
struct Wanted {
    /// It may write ([`opens_for_writing`]).
    writes: bool,
    /// Its directory's last files closed short ([`Table::small_dir`]).
    small_dir: bool,
    /// [`Place::len`].
    len: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{volume_with_file, RDONLY, RDWR};
    use sluice_policy::redirector::RedirectPolicy;

    /// A volume over real directories under `policy`, with one file open
    /// that a plain open registers (module docs): its node and handle.
    fn volume(dir: &tempfile::TempDir, policy: RedirectPolicy) -> (Volume, u64, u64) {
        volume_with_file(dir, policy, PASSTHROUGH_MIN_BYTES as usize)
    }

    fn never(_: BorrowedFd<'_>) -> io::Result<u32> {
        panic!("registered a backing file where none may be")
    }

    #[test]
    fn a_node_shares_one_backing_id_until_its_last_handle_goes() {
        let dir = tempfile::tempdir().unwrap();
        let (v, ino, fh) = volume(&dir, RedirectPolicy::CapacityOnly);
        let p = Passthrough::new(true);
        let first = p
            .open(&v, ino, fh, RDWR, Place::default(), |_| Ok(7))
            .expect("passed through");
        let second = p
            .open(&v, ino, fh, RDWR, Place::default(), never)
            .expect("must be too");
        assert!(Arc::ptr_eq(&first, &second), "the same backing id");
        p.release(ino, None);
        assert!(
            p.open(&v, ino, fh, 0, Place::default(), never).is_some(),
            "one handle left"
        );
        p.release(ino, None);
        p.release(ino, None);
        assert_eq!(
            p.open(&v, ino, fh, 0, Place::default(), |_| Ok(8))
                .as_deref(),
            Some(&8)
        );
    }

    #[test]
    fn a_failed_registration_leaves_the_handle_plain() {
        let dir = tempfile::tempdir().unwrap();
        let (v, ino, fh) = volume(&dir, RedirectPolicy::CapacityOnly);
        let refused = |_: BorrowedFd<'_>| Err(io::ErrorKind::PermissionDenied.into());
        let p = Passthrough::<u32>::new(true);
        assert!(p
            .open(&v, ino, fh, RDWR, Place::default(), refused)
            .is_none());
        // A node open plainly stays plain (its handle may be page-cached,
        // beside which the kernel fails a passthrough open) ...
        assert!(p.open(&v, ino, fh, RDWR, Place::default(), never).is_none());
        p.release(ino, None);
        p.release(ino, None);
        // ... until its last handle goes.
        assert!(p
            .open(&v, ino, fh, RDWR, Place::default(), |_| Ok(1))
            .is_some());
    }

    #[test]
    fn a_small_file_opened_to_read_stays_plain_and_one_opened_to_write_does_not() {
        let dir = tempfile::tempdir().unwrap();
        let (v, ino, fh) = volume(&dir, RedirectPolicy::CapacityOnly);
        let size = |len| crate::volume::AttrChanges {
            size: Some(len),
            ..Default::default()
        };
        v.setattr(ino, Some(fh), &size(PASSTHROUGH_MIN_BYTES - 1))
            .unwrap();
        let p = Passthrough::new(true);
        assert!(
            p.open(&v, ino, fh, RDONLY, Place::default(), never)
                .is_none(),
            "small, read: plain"
        );
        p.release(ino, None);
        // fio's second open of the file it created: the kernel strips
        // O_CREAT, so only the access mode says it writes.
        assert!(
            p.open(&v, ino, fh, RDWR, Place::default(), |_| Ok(2))
                .is_some(),
            "read-write"
        );
        p.release(ino, None);
        let wronly = OFlags::WRONLY.bits() as i32;
        assert!(
            p.open(&v, ino, fh, wronly, Place::default(), |_| Ok(3))
                .is_some(),
            "write-only"
        );
        p.release(ino, None);
        let trunc = RDONLY | OFlags::TRUNC.bits() as i32;
        assert!(
            p.open(&v, ino, fh, trunc, Place::default(), |_| Ok(4))
                .is_some(),
            "truncating"
        );
        p.release(ino, None);
        let create = RDONLY | OFlags::CREATE.bits() as i32;
        assert!(
            p.open(&v, ino, fh, create, Place::default(), |_| Ok(5))
                .is_some(),
            "created"
        );
        p.release(ino, None);
        v.setattr(ino, Some(fh), &size(PASSTHROUGH_MIN_BYTES))
            .unwrap();
        assert!(
            p.open(&v, ino, fh, RDONLY, Place::default(), |_| Ok(6))
                .is_some(),
            "large enough"
        );
    }

    #[test]
    fn off_or_under_a_policy_that_buffers_nothing_is_registered() {
        let dir = tempfile::tempdir().unwrap();
        let (v, ino, fh) = volume(&dir, RedirectPolicy::CapacityOnly);
        assert!(Passthrough::new(false)
            .open(&v, ino, fh, RDWR, Place::default(), never)
            .is_none());
        let mut p = Passthrough::new(true);
        p.granted(false);
        assert!(
            p.open(&v, ino, fh, RDWR, Place::default(), never).is_none(),
            "not granted"
        );
        let dir = tempfile::tempdir().unwrap();
        let (v, ino, fh) = volume(&dir, RedirectPolicy::FastAll);
        assert!(Passthrough::new(true)
            .open(&v, ino, fh, RDWR, Place::default(), never)
            .is_none());
    }

    #[test]
    fn a_directory_of_small_files_opens_them_plain_until_a_large_one_closes() {
        let dir = tempfile::tempdir().unwrap();
        let (v, ino, fh) = volume(&dir, RedirectPolicy::CapacityOnly);
        let p = Passthrough::new(true);
        let in_dir = |d: u64| Place {
            dir: Some(d),
            len: Some(0),
        };
        // A registered file's length is its capacity file's (the kernel
        // wrote it), not what the engine says: 64 KiB, so no run.
        for _ in 0..SMALL_RUN {
            assert!(p.open(&v, ino, fh, RDWR, in_dir(42), |_| Ok(1)).is_some());
            p.release(ino, Some(10));
        }
        // Now short, and SMALL_RUN files of another directory closed.
        let short = crate::volume::AttrChanges {
            size: Some(10),
            ..Default::default()
        };
        v.setattr(ino, Some(fh), &short).unwrap();
        for _ in 0..SMALL_RUN {
            assert!(p.open(&v, ino, fh, RDWR, in_dir(7), |_| Ok(2)).is_some());
            p.release(ino, None);
        }
        assert!(
            p.open(&v, ino, fh, RDWR, in_dir(7), never).is_none(),
            "directory 7's run"
        );
        p.release(ino, None);
        for _ in 0..SMALL_RUN {
            assert!(p.open(&v, ino, fh, RDWR, in_dir(42), |_| Ok(3)).is_some());
            p.release(ino, None);
        }
        // SMALL_RUN files of the directory closed short: the next new
        // file, and the next open for writing, are plain without asking.
        assert!(
            p.open(&v, ino, fh, RDWR, in_dir(42), never).is_none(),
            "created"
        );
        p.release(ino, Some(10));
        let existing = Place {
            dir: Some(42),
            len: None,
        };
        assert!(
            p.open(&v, ino, fh, RDWR, existing, never).is_none(),
            "opened to write"
        );
        // A plain file closed large (the engine's length) ends the run; a
        // close whose length is unknown changes nothing.
        p.release(ino, None);
        assert!(p.open(&v, ino, fh, RDWR, existing, never).is_none());
        p.release(ino, Some(PASSTHROUGH_MIN_BYTES));
        assert!(p.open(&v, ino, fh, RDWR, in_dir(42), |_| Ok(4)).is_some());
    }

    #[test]
    fn an_open_waiting_for_a_registration_is_woken_by_its_end() {
        let dir = tempfile::tempdir().unwrap();
        let (v, ino, fh) = volume(&dir, RedirectPolicy::CapacityOnly);
        let p = Passthrough::new(true);
        let (entered, go) = (std::sync::Barrier::new(2), std::sync::Barrier::new(2));
        std::thread::scope(|s| {
            let first = s.spawn(|| {
                p.open(&v, ino, fh, RDWR, Place::default(), |_| {
                    entered.wait();
                    go.wait();
                    Ok(9)
                })
            });
            entered.wait();
            let second = s.spawn(|| p.open(&v, ino, fh, RDWR, Place::default(), never));
            // The second open counts itself and waits for the registration.
            while lock(&p.table).nodes.get(&ino).map(|n| n.waited) != Some(true) {
                std::thread::yield_now();
            }
            go.wait();
            assert_eq!(first.join().unwrap().as_deref(), Some(&9));
            assert_eq!(second.join().unwrap().as_deref(), Some(&9), "shares the id");
        });
    }
}
