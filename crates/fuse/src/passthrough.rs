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

use std::collections::HashMap;
use std::io;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use rustix::fs::OFlags;

use crate::volume::{lock, Volume};

/// The smallest existing file a read-only open registers (module docs).
pub const PASSTHROUGH_MIN_BYTES: u64 = 64 * 1024;

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
    /// The node's first open is asking the engine and registering its
    /// backing file, without the map's lock: further opens wait for it.
    registering: bool,
}

/// The passthrough state of a mount. `B` is the kernel's backing id
/// (fuser's `BackingId`; a plain value in the tests).
pub(crate) struct Passthrough<B> {
    /// Asked for by the config and granted by the kernel at init.
    enabled: bool,
    nodes: Mutex<HashMap<u64, Node<B>>>,
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
            nodes: Mutex::new(HashMap::new()),
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

    /// A new handle `fh` of node `ino`, opened with `open(2)`'s `flags`:
    /// the backing id the kernel is to serve it from, or `None` for a plain
    /// handle. `register` gives the kernel a capacity file and returns its
    /// backing id; when it fails (not CAP_SYS_ADMIN, a capacity tier
    /// stacked too deep), the handle is plain and the failure logged once.
    pub(crate) fn open(
        &self,
        volume: &Volume,
        ino: u64,
        fh: u64,
        flags: i32,
        register: impl FnOnce(BorrowedFd<'_>) -> io::Result<B>,
    ) -> Option<Arc<B>> {
        if !self.enabled {
            return None;
        }
        // The map's lock is held only to count: the engine's answer and the
        // kernel's registration (an ioctl) run without it, so the opens
        // and releases of other nodes go on meanwhile (issue 33).
        let mut nodes = lock(&self.nodes);
        let node = nodes.entry(ino).or_insert(Node {
            opens: 0,
            backing: None,
            registering: false,
        });
        node.opens += 1;
        let first = node.opens == 1;
        while nodes.get(&ino).is_some_and(|n| n.registering) {
            nodes = self
                .registered
                .wait(nodes)
                .unwrap_or_else(|e| e.into_inner());
        }
        let backing = match nodes.get_mut(&ino).and_then(|n| n.backing.clone()) {
            Some(backing) => backing,
            None if !first => return None,
            None => {
                if let Some(node) = nodes.get_mut(&ino) {
                    node.registering = true;
                }
                drop(nodes);
                let writes_expected = opens_for_writing(flags);
                let registered = self.register(volume, fh, writes_expected, register);
                let mut nodes = lock(&self.nodes);
                let node = nodes.get_mut(&ino)?;
                node.registering = false;
                node.backing = registered.clone();
                self.registered.notify_all();
                registered?
            }
        };
        if opens_for_writing(flags) {
            volume.note_kernel_writes(fh);
        }
        Some(backing)
    }

    /// The backing id of handle `fh`'s capacity file, if the engine lets
    /// the kernel serve it and the kernel takes it.
    fn register(
        &self,
        volume: &Volume,
        fh: u64,
        writes_expected: bool,
        register: impl FnOnce(BorrowedFd<'_>) -> io::Result<B>,
    ) -> Option<Arc<B>> {
        let file = volume.passthrough_file(fh)?;
        if !writes_expected && file.len().ok()? < PASSTHROUGH_MIN_BYTES {
            return None;
        }
        match register(file.as_fd()?) {
            Ok(backing) => Some(Arc::new(backing)),
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

    /// Handle of node `ino` released: its backing id goes with the last.
    pub(crate) fn release(&self, ino: u64) {
        if !self.enabled {
            return;
        }
        let mut nodes = lock(&self.nodes);
        let last = nodes.get_mut(&ino).is_some_and(|node| {
            node.opens = node.opens.saturating_sub(1);
            node.opens == 0
        });
        let gone = last.then(|| nodes.remove(&ino)).flatten();
        drop(nodes);
        // Its backing id, if this was its last holder, closes in the
        // kernel (an ioctl) without the map's lock.
        drop(gone);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inodes::ROOT;
    use crate::volume::Caller;
    use sluice_engine::{Engine, EngineConfig};
    use sluice_env::posix::PosixBackend;
    use sluice_env::{Backend, SystemClock};
    use sluice_policy::redirector::{RedirectPolicy, RedirectorConfig};
    use std::ffi::OsStr;

    /// A volume over real directories under `policy`, with one file open:
    /// its node and handle.
    fn volume(dir: &tempfile::TempDir, policy: RedirectPolicy) -> (Volume, u64, u64) {
        let tier = |name: &str| -> Arc<dyn Backend> {
            let root = dir.path().join(name);
            std::fs::create_dir_all(&root).unwrap();
            Arc::new(PosixBackend::new(root).unwrap())
        };
        let config = EngineConfig {
            redirector: RedirectorConfig {
                policy,
                ..RedirectorConfig::default()
            },
            ..EngineConfig::default()
        };
        let engine = Engine::open(
            tier("fast"),
            tier("capacity"),
            Arc::new(SystemClock::new()),
            config,
        )
        .unwrap();
        let v = Volume::new(Arc::new(engine), None, None);
        let me = Caller {
            uid: rustix::process::geteuid().as_raw(),
            gid: rustix::process::getegid().as_raw(),
            umask: 0o022,
        };
        let (attr, fh) = v.create(&me, ROOT, OsStr::new("f"), 0o644).unwrap();
        // Long enough that a plain open registers it (module docs).
        let bytes = vec![7u8; PASSTHROUGH_MIN_BYTES as usize];
        v.write(attr.ino, fh, 0, &bytes, false).unwrap();
        (v, attr.ino, fh)
    }

    const RDWR: i32 = OFlags::RDWR.bits() as i32;
    const RDONLY: i32 = OFlags::RDONLY.bits() as i32;

    fn never(_: BorrowedFd<'_>) -> io::Result<u32> {
        panic!("registered a backing file where none may be")
    }

    #[test]
    fn a_node_shares_one_backing_id_until_its_last_handle_goes() {
        let dir = tempfile::tempdir().unwrap();
        let (v, ino, fh) = volume(&dir, RedirectPolicy::CapacityOnly);
        let p = Passthrough::new(true);
        let first = p
            .open(&v, ino, fh, RDWR, |_| Ok(7))
            .expect("passed through");
        let second = p.open(&v, ino, fh, RDWR, never).expect("must be too");
        assert!(Arc::ptr_eq(&first, &second), "the same backing id");
        p.release(ino);
        assert!(p.open(&v, ino, fh, 0, never).is_some(), "one handle left");
        p.release(ino);
        p.release(ino);
        assert_eq!(p.open(&v, ino, fh, 0, |_| Ok(8)).as_deref(), Some(&8));
    }

    #[test]
    fn a_failed_registration_leaves_the_handle_plain() {
        let dir = tempfile::tempdir().unwrap();
        let (v, ino, fh) = volume(&dir, RedirectPolicy::CapacityOnly);
        let refused = |_: BorrowedFd<'_>| Err(io::ErrorKind::PermissionDenied.into());
        let p = Passthrough::<u32>::new(true);
        assert!(p.open(&v, ino, fh, RDWR, refused).is_none());
        // A node open plainly stays plain (its handle may be page-cached,
        // beside which the kernel fails a passthrough open) ...
        assert!(p.open(&v, ino, fh, RDWR, never).is_none());
        p.release(ino);
        p.release(ino);
        // ... until its last handle goes.
        assert!(p.open(&v, ino, fh, RDWR, |_| Ok(1)).is_some());
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
            p.open(&v, ino, fh, RDONLY, never).is_none(),
            "small, read: plain"
        );
        p.release(ino);
        // fio's second open of the file it created: the kernel strips
        // O_CREAT, so only the access mode says it writes.
        assert!(p.open(&v, ino, fh, RDWR, |_| Ok(2)).is_some(), "read-write");
        p.release(ino);
        let wronly = OFlags::WRONLY.bits() as i32;
        assert!(
            p.open(&v, ino, fh, wronly, |_| Ok(3)).is_some(),
            "write-only"
        );
        p.release(ino);
        let trunc = RDONLY | OFlags::TRUNC.bits() as i32;
        assert!(
            p.open(&v, ino, fh, trunc, |_| Ok(4)).is_some(),
            "truncating"
        );
        p.release(ino);
        let create = RDONLY | OFlags::CREATE.bits() as i32;
        assert!(p.open(&v, ino, fh, create, |_| Ok(5)).is_some(), "created");
        p.release(ino);
        v.setattr(ino, Some(fh), &size(PASSTHROUGH_MIN_BYTES))
            .unwrap();
        assert!(
            p.open(&v, ino, fh, RDONLY, |_| Ok(6)).is_some(),
            "large enough"
        );
    }

    #[test]
    fn off_or_under_a_policy_that_buffers_nothing_is_registered() {
        let dir = tempfile::tempdir().unwrap();
        let (v, ino, fh) = volume(&dir, RedirectPolicy::CapacityOnly);
        assert!(Passthrough::new(false)
            .open(&v, ino, fh, RDWR, never)
            .is_none());
        let mut p = Passthrough::new(true);
        p.granted(false);
        assert!(p.open(&v, ino, fh, RDWR, never).is_none(), "not granted");
        let dir = tempfile::tempdir().unwrap();
        let (v, ino, fh) = volume(&dir, RedirectPolicy::FastAll);
        assert!(Passthrough::new(true)
            .open(&v, ino, fh, RDWR, never)
            .is_none());
    }
}
