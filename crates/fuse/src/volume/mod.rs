//! [`Volume`]: the mounted namespace as plain methods, without FUSE. It owns
//! the inode table and the engine's [`Router`] (the engine and the
//! optional checkpoint stager behind one interface), and makes every
//! decision a request needs but which side serves a file; `fs.rs` only converts fuser's
//! arguments, calls one method and maps the `io::Error` to an errno (as
//! mountpoint-s3's `fuse.rs` forwards to its file system type). So all of
//! it is tested without a mount (`tests/volume_model.rs` drives it against
//! a reference model).
//!
//! What it decides, and where:
//! - this module: inode numbers and names (resolution, lookup counting:
//!   a reply's node is taken and its lookup counted under one hold of the
//!   table, see [`Volume::entry`]);
//! - `names`: the namespace — create, mknod, mkdir, symlink, link, unlink,
//!   rmdir, rename (its rules: `RENAME_NOREPLACE` checked and renamed
//!   under one mount-wide lock, two names of one file do nothing) — and
//!   directory handles (a snapshot of the entries taken at opendir);
//! - `attr`: attributes (the capacity tier's, with the engine's or the
//!   stager's logical size), setattr (truncate by path or handle),
//!   `access(2)`, ownership of new nodes, set-ID clearing, xattrs, statfs;
//! - `handles`: open/read/write/flush/fsync/release through the router
//!   (which says whether a path or handle is the stager's, a
//!   checkpoint-class file, or the engine's, and what close and fsync put
//!   on the capacity tier under the mount's consistency, docs/fuse.md
//!   "Many nodes"), with the node's open handles kept so a file that lost
//!   its name is still served; a create that meets a file another node
//!   made since the kernel's lookup opens it;
//! - `locks`: `fcntl` and `flock` locks, taken on the capacity file so the
//!   capacity tier arbitrates them between nodes (ENOLCK where it cannot).
//!
//! Data goes through the engine (writes classified, buffered or written
//! through; reads merged); metadata that does not touch file data (modes,
//! owners, times, symbolic links, special files, xattrs, listings) goes to
//! the capacity tier, where the files live.
//!
//! Errors are `io::Error`s whose kind (or raw OS error, for the few errnos
//! no kind names: EPERM, EBADF, ENODATA) is what the kernel must get;
//! `errno.rs` is the only place they become errnos.

mod attr;
mod handles;
mod locks;
mod names;

use std::collections::HashMap;
use std::ffi::OsStr;
use std::io;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use sluice_engine::{Checkpoints, Engine, Router};
use sluice_env::{RelPath, Stat, StatKind};

use crate::inodes::{Inodes, ROOT};

pub use attr::{mode_after_unprivileged_write, Attr, AttrChanges, FsStats};
pub use locks::LockRange;
pub use names::{node_to_make, DirEntry, NodeToMake, RENAME_NOREPLACE};
pub use sluice_engine::Consistency;

/// The virtual xattr on the root that names the control socket (defined
/// beside the client that reads it).
pub use sluice_status::client::CONTROL_XATTR;

/// Who makes a request: new nodes are theirs, `access` checks their
/// rights. (The kernel's request names the primary group only, not the
/// supplementary ones.)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caller {
    /// User.
    pub uid: u32,
    /// Primary group.
    pub gid: u32,
    /// Mode bits a new node does not get.
    pub umask: u32,
}

/// The entries of a directory handle, taken at opendir.
type DirSnapshot = Vec<(String, StatKind)>;

/// The mounted namespace: see the module doc.
pub struct Volume {
    /// The engine and, with BBOS on, the checkpoint stager, with the
    /// mount's consistency: every call that depends on a file's class
    /// (checkpoint or not) goes through it.
    router: Router,
    inodes: Mutex<Inodes>,
    /// Directory handles: a snapshot of the entries taken at opendir.
    dirs: Mutex<HashMap<u64, Arc<DirSnapshot>>>,
    next_dir: AtomicU64,
    /// Serialises renames so `RENAME_NOREPLACE`'s check and the rename are
    /// one step for this mount.
    renames: Mutex<()>,
    /// The control socket's path, served as [`CONTROL_XATTR`] on the root.
    control: Option<String>,
    /// This process's effective uid and gid: files are created by it, then
    /// given to the caller when they differ.
    euid: u32,
    egid: u32,
    /// Lock owners' descriptions of capacity files.
    locks: locks::Locks,
}

pub(crate) use sluice_env::lock;

/// An error with the errno `errno` itself (for errnos no `ErrorKind`
/// names).
pub(crate) fn os_error(errno: rustix::io::Errno) -> io::Error {
    io::Error::from_raw_os_error(errno.raw_os_error())
}

pub(crate) fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, what.to_string())
}

/// An extended attribute's name as UTF-8 (EINVAL otherwise). File names
/// need not be UTF-8: see [`Volume::child`].
pub(crate) fn name_str(name: &OsStr) -> io::Result<&str> {
    name.to_str().ok_or_else(|| invalid("name is not UTF-8"))
}

/// The node of `path` for a reply that hands it to the kernel, with that
/// reply's lookup counted, and the attributes `stat` found for it.
///
/// `stat` runs first (its identity says which node the path names: two
/// names of one file are one node); the node is then taken and its lookup
/// counted under one hold of the table: between two holds a FORGET of the
/// kernel's earlier references, handled on another thread, would drop the
/// node, and the reply would name an inode that no longer resolves (the
/// next OPEN gets ENOENT). If `stat` fails nothing is handed out and
/// nothing is counted.
fn counted_entry(
    inodes: &Mutex<Inodes>,
    path: &RelPath,
    stat: impl FnOnce() -> io::Result<Stat>,
) -> io::Result<(u64, Stat)> {
    let st = stat()?;
    let ino = lock(inodes).entry(path, st.identity(), true);
    Ok((ino, st))
}

impl Volume {
    /// A volume over `engine` (and the stager for checkpoint-class files,
    /// if BBOS is on); `control` is the control socket's path, served as
    /// [`CONTROL_XATTR`].
    pub fn new(
        engine: Arc<Engine>,
        ckpt: Option<Arc<Checkpoints>>,
        control: Option<String>,
    ) -> Volume {
        Volume {
            router: Router::new(engine, ckpt, Consistency::default()),
            inodes: Mutex::new(Inodes::default()),
            dirs: Mutex::new(HashMap::new()),
            next_dir: AtomicU64::new(1),
            renames: Mutex::new(()),
            control,
            euid: rustix::process::geteuid().as_raw(),
            egid: rustix::process::getegid().as_raw(),
            locks: locks::Locks::default(),
        }
    }

    /// The same volume with consistency mode `consistency` (the default is
    /// `close-to-open`).
    pub fn with_consistency(mut self, consistency: Consistency) -> Volume {
        self.router = Router::new(
            Arc::clone(self.router.engine()),
            self.router.stager().cloned(),
            consistency,
        );
        self
    }

    /// The engine under it.
    pub fn engine(&self) -> &Arc<Engine> {
        self.router.engine()
    }

    /// The engine and the stager, one way in by path or handle.
    pub fn router(&self) -> &Router {
        &self.router
    }

    /// Nodes in the inode table, the root included.
    pub fn nodes(&self) -> usize {
        lock(&self.inodes).len()
    }

    /// A name of `ino` (ENOENT for an unknown node or one with no name
    /// left).
    fn path(&self, ino: u64) -> io::Result<RelPath> {
        lock(&self.inodes)
            .path(ino)
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
    }

    /// What a request on `ino` (or on `name` in directory `ino`) was
    /// about, for logs and `last_errors`: the path relative to the mount
    /// (`/` for its root), or `inode N` for a node with no name left.
    pub fn describe(&self, ino: u64, name: Option<&OsStr>) -> String {
        let path = lock(&self.inodes).path(ino);
        let name = name.map(|n| sluice_env::name_from_os(n).into_owned());
        match (path, name) {
            (Some(dir), Some(name)) => dir
                .join(&name)
                .map_or_else(|_| format!("{dir}/{name}"), |p| p.to_string()),
            (Some(path), None) => path.to_string(),
            (None, Some(name)) => format!("inode {ino}/{name}"),
            (None, None) => format!("inode {ino}"),
        }
    }

    /// The path of `name` in directory `parent`. Any name the kernel
    /// passes works: bytes that are not UTF-8 are held escaped
    /// ([`sluice_env::name_from_os`]) and reach the capacity tier as they
    /// were.
    fn child(&self, parent: u64, name: &OsStr) -> io::Result<RelPath> {
        let parent = self.path(parent)?;
        parent
            .join(&sluice_env::name_from_os(name))
            .map_err(|_| invalid("not a valid name"))
    }

    /// Look `name` up in `parent` for the kernel (one reference counted).
    pub fn lookup(&self, parent: u64, name: &OsStr) -> io::Result<Attr> {
        if self.hides(parent, name) {
            return Err(io::ErrorKind::NotFound.into());
        }
        let path = self.child(parent, name)?;
        self.entry(&path)
    }

    /// Whether `name` in directory `parent` is sluice's own directory on
    /// the capacity tier ([`sluice_engine::HIDDEN_DIR`]: the recall
    /// entries), which an on-demand mount does not show.
    pub(super) fn hides(&self, parent: u64, name: &OsStr) -> bool {
        self.router.consistency() == Consistency::OnDemand
            && parent == ROOT
            && name == OsStr::new(sluice_engine::HIDDEN_DIR)
    }

    /// The kernel dropped `n` references to `ino`.
    pub fn forget(&self, ino: u64, n: u64) {
        lock(&self.inodes).forget(ino, n);
    }

    /// Look `path` up for a reply that hands its node to the kernel (one
    /// reference counted, in the same hold of the table that chooses the
    /// node: [`counted_entry`]).
    fn entry(&self, path: &RelPath) -> io::Result<Attr> {
        let (ino, st) = counted_entry(&self.inodes, path, || self.stat(path))?;
        Ok(self.attr_of(ino, &st))
    }

    /// [`Volume::entry`] of `path` whose attributes `st` the caller has
    /// already (a create's own fstat of the new file).
    fn counted_attr(&self, path: &RelPath, st: Stat) -> Attr {
        let ino = lock(&self.inodes).entry(path, st.identity(), true);
        self.attr_of(ino, &st)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::SystemTime;

    fn p(s: &str) -> RelPath {
        RelPath::new(s).unwrap()
    }

    /// A capacity stat of a regular file with inode number `ino`.
    fn stat_of(ino: u64) -> Stat {
        Stat {
            kind: StatKind::File,
            len: 0,
            blocks: 0,
            mode: 0o644,
            uid: 0,
            gid: 0,
            nlink: 1,
            ino,
            dev: 0,
            atime: SystemTime::UNIX_EPOCH,
            mtime: SystemTime::UNIX_EPOCH,
            ctime: SystemTime::UNIX_EPOCH,
            blksize: 4096,
            rdev: 0,
        }
    }

    /// Issue: reopening an existing file failed with ENOENT. The kernel's
    /// FORGET of the earlier lookups, handled on another thread while a
    /// new LOOKUP of the same path was between taking the inode number and
    /// counting its reference, dropped the node: the reply named an inode
    /// that no longer resolved, and the OPEN that followed got ENOENT.
    /// (The node is now chosen after the stat, which says which file the
    /// path names, and counted in the same hold of the table.)
    #[test]
    fn reopen_enoent_forget_between_lookup_steps_keeps_the_node() {
        let inodes = Mutex::new(Inodes::default());
        let path = p("dir/file");
        // Two earlier lookups the kernel holds.
        let first = lock(&inodes).entry(&path, (0, 7), true);
        assert_eq!(lock(&inodes).entry(&path, (0, 7), true), first);
        let (ino, _) = counted_entry(&inodes, &path, || {
            // The stat is in progress; another thread handles the kernel's
            // FORGET of both earlier references now.
            lock(&inodes).forget(first, 2);
            Ok(stat_of(7))
        })
        .unwrap();
        assert_eq!(
            lock(&inodes).path(ino),
            Some(path.clone()),
            "the inode handed to the kernel still resolves (OPEN must not get ENOENT)"
        );
        // The reply's reference is the only one left: one FORGET drops it.
        lock(&inodes).forget(ino, 1);
        assert_eq!(lock(&inodes).path(ino), None);
        assert!(lock(&inodes).is_empty());
    }

    /// A failed stat hands nothing to the kernel, so it must count nothing:
    /// the node of a fresh path is not left behind.
    #[test]
    fn a_failed_entry_counts_no_lookup() {
        let inodes = Mutex::new(Inodes::default());
        let path = p("gone");
        let known = lock(&inodes).entry(&path, (0, 3), true);
        let result = counted_entry(&inodes, &path, || {
            Err(io::Error::from(io::ErrorKind::NotFound))
        });
        assert!(result.is_err());
        lock(&inodes).forget(known, 1);
        assert_eq!(
            lock(&inodes).path(known),
            None,
            "only the earlier lookup was counted"
        );
        let fresh = p("fresh");
        let result = counted_entry(&inodes, &fresh, || {
            Err(io::Error::from(io::ErrorKind::NotFound))
        });
        assert!(result.is_err());
        assert!(
            lock(&inodes).is_empty(),
            "no node left for a path never handed out"
        );
    }

    /// The same race with real threads: lookups and forgets of one file
    /// under two names (hard links) from several threads, each checking
    /// that the inode it was handed resolves (to one of the two names)
    /// while it holds the reference.
    #[test]
    fn reopen_enoent_concurrent_lookups_and_forgets_never_lose_a_held_node() {
        let inodes = Mutex::new(Inodes::default());
        let names = [p("f"), p("g")];
        std::thread::scope(|scope| {
            for t in 0..4 {
                let (inodes, names) = (&inodes, &names);
                scope.spawn(move || {
                    for i in 0..2000 {
                        let path = &names[(t + i) % 2];
                        let (ino, _) = counted_entry(inodes, path, || {
                            std::thread::yield_now();
                            Ok(stat_of(42))
                        })
                        .unwrap();
                        let resolved = lock(inodes).path(ino);
                        assert!(
                            resolved.as_ref().is_some_and(|r| names.contains(r)),
                            "inode {ino} handed out but dropped"
                        );
                        lock(inodes).forget(ino, 1);
                    }
                });
            }
        });
        assert!(lock(&inodes).is_empty(), "every reference was forgotten");
    }
}
