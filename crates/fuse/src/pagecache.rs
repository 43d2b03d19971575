//! Small files kept in the kernel's page cache between opens (issue 33;
//! docs/fuse.md, "The kernel's page cache for small files").
//!
//! A plain handle is opened with `FOPEN_DIRECT_IO` by default, and the
//! kernel drops a node's page cache at every open that does not say
//! `FOPEN_KEEP_CACHE`: each read of a file comes to sluice, also the
//! second and every later open's. For a small file that costs a request
//! per open, most of the time of an open-read-close (mdtest-hard's read
//! phase: 3,901-byte files). NFS keeps a file's pages across opens while
//! its change attribute says nobody wrote it; this is that, for files
//! shorter than [`STORE_MAX_BYTES`]:
//! - **stored** at its node's last release: sluice reads the file (its
//!   bytes as the engine serves them, buffered ones included) and hands
//!   them to the kernel (`FUSE_NOTIFY_STORE`), with a stamp of its
//!   capacity file taken before the read ([`Engine::page_cache_stamp`]:
//!   identity, length, mtime and ctime);
//! - **kept** at the next open of the node while no handle is open on it,
//!   if the capacity file still has that stamp: the handle is opened
//!   page-cached (no `FOPEN_DIRECT_IO`) with `FOPEN_KEEP_CACHE`, and the
//!   kernel answers its reads from the stored pages;
//! - otherwise the handle is opened as before, and the kernel drops
//!   the pages.
//!
//! Why the copy is the file's bytes:
//! - between the last release and the next open no handle is open, so
//!   nothing of this node writes the file but a truncate by path, which
//!   the kernel applies to its pages itself (and which waits for a store
//!   under way, so the store cannot land after it), and this node's own
//!   flush of buffered bytes (the same bytes; it changes the stamp, so the
//!   copy is only dropped);
//! - another node's write, a replaced file or a changed length changes the
//!   stamp: the tier must give exact change times, or nothing is kept;
//! - the handles open on a node at once are all of one kind: an open
//!   while one is open takes the kind of those (page-cached or direct), so
//!   a page-cached handle never sits beside a direct one whose writes
//!   would bypass its pages; a page-cached handle's writes go through the
//!   kernel's pages to sluice (write-through), and its node is stored again
//!   at its last release when one was written;
//! - an open of the node waits while its store is under way;
//! - while page-cached handles are open, their pages are dropped
//!   (`FUSE_NOTIFY_INVAL_INODE`) when a lock is granted on the node, and
//!   every `mount.attr_timeout` when the capacity file's stamp changed
//!   ([`PageCache::revalidate`]): another node's write is read within the
//!   time `stat` may lag it (a direct handle reads it at its next read),
//!   and at once after a lock.
//!
//! Not kept: a file not closed through this node since the mount, an
//! empty one, a node that was opened by passthrough (the kernel serves it
//! from the capacity file; the table never sees it), a checkpoint's
//! (the stager's), and every file of a tier without exact change times or
//! behind an emulated device, fault injection or LiU, which must see every
//! read; nothing with `mount.attr_timeout = 0` (every request asks). The
//! stamps kept are a hint bounded by [`STAMPS_KEPT`].
//!
//! [`Engine::page_cache_stamp`]: sluice_engine::Engine::page_cache_stamp

use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, Weak};
use std::time::Duration;

use fuser::{FopenFlags, INodeNo, Notifier};
use sluice_engine::ChangeStamp;

use crate::passthrough::PASSTHROUGH_MIN_BYTES;
use crate::volume::{lock, Volume};

/// Files shorter than this are stored at their node's last release: the
/// length below which an existing file's read-only open is plain rather
/// than passed through (passthrough.rs).
const STORE_MAX_BYTES: u64 = PASSTHROUGH_MIN_BYTES;

/// Stamps of stored nodes kept at most; past it they start again.
const STAMPS_KEPT: usize = 1 << 17;

/// What the page cache asks of the kernel: fuser's [`Notifier`] on a
/// mount, a recorder in the tests.
pub(crate) trait Kernel: Send + Sync + 'static {
    /// Node `ino`'s bytes from offset 0 are `data` (`FUSE_NOTIFY_STORE`).
    fn store(&self, ino: u64, data: &[u8]) -> io::Result<()>;
    /// Drop node `ino`'s pages and attributes (`FUSE_NOTIFY_INVAL_INODE`).
    fn invalidate(&self, ino: u64) -> io::Result<()>;
}

impl Kernel for Notifier {
    fn store(&self, ino: u64, data: &[u8]) -> io::Result<()> {
        Notifier::store(self, INodeNo(ino), 0, data)
    }

    fn invalidate(&self, ino: u64) -> io::Result<()> {
        self.inval_inode(INodeNo(ino), 0, 0)
    }
}

/// One node's plain handles.
#[derive(Default)]
struct Node {
    opens: u32,
    /// A handle of it, to stat its capacity file by while it is open.
    fh: u64,
    /// Its handles are page-cached (kept at the first open).
    cached: bool,
    /// While it is: the capacity file's stamp when its pages were last
    /// known to hold it (`None`: unknown, they go at the next look).
    seen: Option<ChangeStamp>,
    /// A write, truncate or fallocate came through sluice while it was
    /// open: the stored pages no longer hold the file.
    written: bool,
    /// Its last release is storing it: opens, truncates and fallocates
    /// of it wait.
    busy: bool,
    /// One of them waits: the end of `busy` wakes it (a wake-up with no
    /// waiter is a system call at every open).
    waited: bool,
}

#[derive(Default)]
struct Table {
    nodes: HashMap<u64, Node>,
    /// Per node, the stamp its stored pages were read under.
    stored: HashMap<u64, ChangeStamp>,
}

impl Table {
    fn keep(&mut self, ino: u64, stamp: ChangeStamp) {
        if self.stored.len() >= STAMPS_KEPT && !self.stored.contains_key(&ino) {
            self.stored.clear();
        }
        self.stored.insert(ino, stamp);
    }
}

/// The kernel's page cache for a mount's small files (module docs). `K`
/// is how it reaches the kernel ([`Kernel`]).
pub(crate) struct PageCache<K = Notifier> {
    /// `mount.page_cache`, and `mount.attr_timeout` not 0.
    enabled: bool,
    /// How often open page-cached nodes are compared with their capacity
    /// file (`mount.attr_timeout`).
    every: Duration,
    /// The session's notifier, once it is up; nothing is stored before.
    notifier: OnceLock<K>,
    table: Mutex<Table>,
    /// Signalled when a node stops being busy.
    idle: Condvar,
}

/// What a last release stores: the file's bytes and the stamp they were
/// read under.
struct Store {
    data: Vec<u8>,
    stamp: ChangeStamp,
}

impl<K: Kernel> PageCache<K> {
    /// Small files kept if `enabled` (`mount.page_cache`), once
    /// [`PageCache::start`]ed, their open nodes compared with their
    /// capacity files `every` `mount.attr_timeout` (0: nothing is kept).
    pub(crate) fn new(enabled: bool, every: Duration) -> PageCache<K> {
        PageCache {
            enabled: enabled && !every.is_zero(),
            every,
            notifier: OnceLock::new(),
            table: Mutex::new(Table::default()),
            idle: Condvar::new(),
        }
    }

    /// The session is up: stores can be sent through `kernel`, and a
    /// thread compares the open page-cached nodes with their capacity
    /// files every `mount.attr_timeout` for as long as `cache` lives.
    /// Without that thread nothing is kept.
    pub(crate) fn start(cache: &Arc<PageCache<K>>, volume: &Arc<Volume>, kernel: K) {
        if !cache.enabled {
            return;
        }
        let (weak, volume) = (Arc::downgrade(cache), Arc::downgrade(volume));
        let spawned = std::thread::Builder::new()
            .name("sluice-page-cache".into())
            .spawn(move || revalidating(&weak, &volume));
        match spawned {
            Ok(_) => {
                let _ = cache.notifier.set(kernel);
            }
            Err(e) => tracing::warn!("page cache: no thread to revalidate it ({e}): off"),
        }
    }

    /// The table, once `ino` is not busy.
    fn idle_node(&self, ino: u64) -> MutexGuard<'_, Table> {
        let mut table = lock(&self.table);
        loop {
            match table.nodes.get_mut(&ino) {
                Some(node) if node.busy => node.waited = true,
                _ => return table,
            }
            table = sluice_env::wait(&self.idle, table);
        }
    }

    /// `ino`'s store ended: it leaves the table, and an open waiting for
    /// it is woken.
    fn stored(&self, table: &mut Table, ino: u64) {
        if table.nodes.remove(&ino).is_some_and(|node| node.waited) {
            self.idle.notify_all();
        }
    }

    /// A plain handle `fh` of node `ino` opened (`new`: by a create): the
    /// flags to answer with, `direct` being the mount's plain ones.
    pub(crate) fn open(
        &self,
        volume: &Volume,
        ino: u64,
        fh: u64,
        direct: FopenFlags,
        new: bool,
    ) -> FopenFlags {
        if !self.enabled {
            return direct;
        }
        let mut table = self.idle_node(ino);
        let node = table.nodes.entry(ino).or_default();
        node.opens += 1;
        node.fh = fh;
        if node.opens > 1 {
            return if node.cached {
                FopenFlags::empty()
            } else {
                direct
            };
        }
        // (No stamp is kept before the session is up: the handles opened
        // meanwhile are counted all the same.)
        let Some(then) = table.stored.get(&ino).copied().filter(|_| !new) else {
            table.stored.remove(&ino);
            return direct;
        };
        // The stamp the open just took (no system call: the engine's
        // lock is taken under the table's, never the other way round).
        let unchanged = volume.page_cache_stamp_at_open(fh) == Some(then);
        match table.nodes.get_mut(&ino) {
            Some(node) if unchanged => {
                node.cached = true;
                node.seen = Some(then);
                FopenFlags::FOPEN_KEEP_CACHE
            }
            _ => {
                table.stored.remove(&ino);
                direct
            }
        }
    }

    /// A write, truncate or fallocate through sluice changes node `ino`'s
    /// bytes: with a handle open, the node is stored again at its last
    /// release; with none (a truncate by path), its stamp goes. Waits
    /// while the node is being stored, so a truncate by path lands after
    /// the store.
    pub(crate) fn changed(&self, ino: u64) {
        if !self.enabled {
            return;
        }
        let mut table = self.idle_node(ino);
        match table.nodes.get_mut(&ino) {
            Some(node) => node.written = true,
            None => {
                table.stored.remove(&ino);
            }
        }
    }

    /// A plain handle `fh` of node `ino` is released by `release` (the
    /// volume's, which closes it): its answer, and whether the file was
    /// stored. The node's last handle stores the file first, unless its
    /// pages were kept and nothing wrote it since.
    pub(crate) fn release<R>(
        &self,
        volume: &Volume,
        ino: u64,
        fh: u64,
        release: impl FnOnce() -> R,
    ) -> (R, bool) {
        if !self.enabled || !self.last_to_store(ino) {
            return (release(), false);
        }
        let store = self.read(volume, fh);
        let released = release();
        let stored = store.filter(|store| self.send(ino, store));
        let mut table = lock(&self.table);
        self.stored(&mut table, ino);
        let kept = stored.is_some();
        if let Some(store) = stored {
            table.keep(ino, store.stamp);
        }
        (released, kept)
    }

    /// One plain handle of node `ino` goes: whether it was the last and
    /// the file is to be stored. The node is then busy (opens of it wait
    /// until the kernel has its bytes) and its old stamp gone; a last
    /// handle with nothing to store takes the node out of the table.
    fn last_to_store(&self, ino: u64) -> bool {
        let mut guard = lock(&self.table);
        let table = &mut *guard;
        let Some(node) = table.nodes.get_mut(&ino) else {
            return false;
        };
        node.opens = node.opens.saturating_sub(1);
        if node.opens > 0 {
            return false;
        }
        let unchanged = node.cached && !node.written;
        if (unchanged && table.stored.contains_key(&ino)) || self.notifier.get().is_none() {
            table.nodes.remove(&ino);
            return false;
        }
        node.busy = true;
        table.stored.remove(&ino);
        true
    }

    /// The bytes of handle `fh`'s file and the stamp they are read under,
    /// if it is short and its stamp can be checked later.
    fn read(&self, volume: &Volume, fh: u64) -> Option<Store> {
        let len = volume.handle_len(fh)?;
        // An empty file has nothing to read: its reads end at the size
        // the kernel knows.
        if len == 0 || len >= STORE_MAX_BYTES {
            return None;
        }
        // Taken before the read: a change after it is seen at the next
        // open (its stamp differs).
        let stamp = volume.page_cache_stamp(fh)?;
        let data = volume.read(fh, 0, len).ok()?;
        (data.len() as u64 == len).then_some(Store { data, stamp })
    }

    /// Hand `store` to the kernel as node `ino`'s bytes.
    fn send(&self, ino: u64, store: &Store) -> bool {
        let Some(kernel) = self.notifier.get() else {
            return false;
        };
        match kernel.store(ino, &store.data) {
            Ok(()) => true,
            // The kernel forgot the node meanwhile: nothing to keep.
            Err(e) => {
                tracing::debug!(ino, "page cache: store refused: {e}");
                false
            }
        }
    }

    /// Whether node `ino`'s open handles are page-cached.
    pub(crate) fn cached(&self, ino: u64) -> bool {
        self.enabled && lock(&self.table).nodes.get(&ino).is_some_and(|n| n.cached)
    }

    /// A lock was granted on node `ino`: if its handles are page-cached,
    /// their pages go, so what another node wrote before unlocking is read
    /// (as the engine re-reads the size when a lock is granted).
    pub(crate) fn locked(&self, volume: &Volume, ino: u64) {
        let fh = match lock(&self.table).nodes.get(&ino) {
            Some(node) if node.cached => node.fh,
            _ => return,
        };
        self.drop_pages(volume, ino, fh);
    }

    /// Compare every node open page-cached with its capacity file, and
    /// drop the pages of those whose stamp changed since they were last
    /// known to hold it (another node wrote it, or this one did).
    pub(crate) fn revalidate(&self, volume: &Volume) {
        let open: Vec<(u64, u64, Option<ChangeStamp>)> = lock(&self.table)
            .nodes
            .iter()
            .filter(|(_, n)| n.cached)
            .map(|(&ino, n)| (ino, n.fh, n.seen))
            .collect();
        for (ino, fh, seen) in open {
            if seen.is_none() || volume.page_cache_stamp(fh) != seen {
                self.drop_pages(volume, ino, fh);
            }
        }
    }

    /// Drop the pages of node `ino`, open page-cached through `fh`: the
    /// kernel reads the file from sluice again, as its capacity file is
    /// from a stamp taken first (a change after it is seen at the next
    /// look). Its next last release stores it again.
    fn drop_pages(&self, volume: &Volume, ino: u64, fh: u64) {
        let Some(kernel) = self.notifier.get() else {
            return;
        };
        let now = volume.page_cache_stamp(fh);
        if let Some(node) = lock(&self.table).nodes.get_mut(&ino) {
            node.seen = now;
            node.written = true;
        }
        self.invalidate(kernel, ino);
    }

    fn invalidate(&self, kernel: &K, ino: u64) {
        if let Err(e) = kernel.invalidate(ino) {
            tracing::debug!(ino, "page cache: invalidation refused: {e}");
        }
    }
}

/// The thread of [`PageCache::start`]: [`PageCache::revalidate`] every
/// `mount.attr_timeout` until the mount is gone.
fn revalidating<K: Kernel>(cache: &Weak<PageCache<K>>, volume: &Weak<Volume>) {
    loop {
        let Some(every) = cache.upgrade().map(|c| c.every) else {
            return;
        };
        std::thread::sleep(every);
        let (Some(cache), Some(volume)) = (cache.upgrade(), volume.upgrade()) else {
            return;
        };
        cache.revalidate(&volume);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{volume_with_file, RDWR};
    use sluice_policy::redirector::RedirectPolicy;

    /// What the page cache asked of the kernel.
    #[derive(Default)]
    struct Recorder {
        stores: Mutex<Vec<(u64, Vec<u8>)>>,
        invalidations: Mutex<Vec<u64>>,
    }

    impl Kernel for Recorder {
        fn store(&self, ino: u64, data: &[u8]) -> io::Result<()> {
            lock(&self.stores).push((ino, data.to_vec()));
            Ok(())
        }

        fn invalidate(&self, ino: u64) -> io::Result<()> {
            lock(&self.invalidations).push(ino);
            Ok(())
        }
    }

    const DIRECT: FopenFlags = FopenFlags::FOPEN_DIRECT_IO;
    const SMALL: usize = 3901;

    /// A volume with the file `f` of `len` bytes just created (its handle
    /// counted as a create's), and a started page cache.
    struct Setup {
        dir: tempfile::TempDir,
        v: Volume,
        ino: u64,
        cache: PageCache<Recorder>,
    }

    impl Setup {
        /// `None` where the temporary directory's file system gives no
        /// exact change times (nothing can be kept there).
        fn new(len: usize) -> Option<(Setup, u64)> {
            let dir = tempfile::tempdir().unwrap();
            let (v, ino, fh) = volume_with_file(&dir, RedirectPolicy::CapacityOnly, len);
            if v.page_cache_stamp(fh).is_none() {
                eprintln!("skipped: no exact change times under {:?}", dir.path());
                return None;
            }
            let cache = PageCache::new(true, Duration::from_secs(1));
            let _ = cache.notifier.set(Recorder::default());
            assert_eq!(cache.open(&v, ino, fh, DIRECT, true), DIRECT, "a create");
            Some((Setup { dir, v, ino, cache }, fh))
        }

        fn open(&self) -> (u64, FopenFlags) {
            let fh = self.v.open(self.ino, RDWR).unwrap();
            (fh, self.cache.open(&self.v, self.ino, fh, DIRECT, false))
        }

        /// Release `fh`: whether the file was stored.
        fn release(&self, fh: u64) -> bool {
            let (ino, v) = (self.ino, &self.v);
            self.cache.release(v, ino, fh, || v.release(ino, fh)).1
        }

        fn kernel(&self) -> &Recorder {
            self.cache.notifier.get().unwrap()
        }

        fn stores(&self) -> Vec<(u64, Vec<u8>)> {
            lock(&self.kernel().stores).clone()
        }

        fn invalidations(&self) -> usize {
            lock(&self.kernel().invalidations).len()
        }

        /// Another node writes the capacity file, same length.
        fn written_elsewhere(&self) {
            std::fs::write(self.dir.path().join("capacity/f"), vec![9u8; SMALL]).unwrap();
        }
    }

    #[test]
    fn a_small_file_is_stored_at_its_last_release_and_kept_while_unchanged() {
        let Some((s, created)) = Setup::new(SMALL) else {
            return;
        };
        assert!(s.release(created), "stored at the create's release");
        assert_eq!(s.stores(), vec![(s.ino, vec![7u8; SMALL])]);
        let (first, flags) = s.open();
        assert_eq!(flags, FopenFlags::FOPEN_KEEP_CACHE, "unchanged: kept");
        let (second, flags) = s.open();
        assert_eq!(flags, FopenFlags::empty(), "beside it: page-cached too");
        assert!(!s.release(second));
        assert!(
            !s.release(first),
            "nothing wrote it: its pages still hold it"
        );
        assert_eq!(s.stores().len(), 1);
        assert_eq!(s.open().1, FopenFlags::FOPEN_KEEP_CACHE, "still kept");
    }

    #[test]
    fn a_file_another_node_changed_is_not_kept() {
        let Some((s, created)) = Setup::new(SMALL) else {
            return;
        };
        assert!(s.release(created));
        s.written_elsewhere();
        let (fh, flags) = s.open();
        assert_eq!(
            flags, DIRECT,
            "the stamp changed: the kernel drops the pages"
        );
        // Stored again, with the other node's bytes, at the last release.
        assert!(s.release(fh));
        assert_eq!(s.stores().last().unwrap().1, vec![9u8; SMALL]);
        assert_eq!(s.open().1, FopenFlags::FOPEN_KEEP_CACHE);
    }

    #[test]
    fn an_open_beside_a_direct_handle_is_direct() {
        let Some((s, created)) = Setup::new(SMALL) else {
            return;
        };
        assert!(s.release(created));
        s.written_elsewhere();
        let (first, flags) = s.open();
        assert_eq!(flags, DIRECT);
        // Unchanged since, but the node has a direct handle, whose writes
        // would bypass the pages.
        let (second, flags) = s.open();
        assert_eq!(flags, DIRECT);
        s.release(second);
        s.release(first);
    }

    #[test]
    fn a_write_through_a_kept_handle_stores_the_file_again() {
        let Some((s, created)) = Setup::new(SMALL) else {
            return;
        };
        assert!(s.release(created));
        let (fh, flags) = s.open();
        assert_eq!(flags, FopenFlags::FOPEN_KEEP_CACHE);
        s.cache.changed(s.ino);
        s.v.write(s.ino, fh, 0, b"new", false).unwrap();
        assert!(s.release(fh), "written: stored again");
        let mut want = vec![7u8; SMALL];
        want[..3].copy_from_slice(b"new");
        assert_eq!(s.stores().last().unwrap().1, want);
        assert_eq!(s.open().1, FopenFlags::FOPEN_KEEP_CACHE);
    }

    #[test]
    fn a_truncate_by_path_drops_what_was_stored() {
        let Some((s, created)) = Setup::new(SMALL) else {
            return;
        };
        assert!(s.release(created));
        // No handle open: the record goes (the kernel cuts its own pages).
        s.cache.changed(s.ino);
        assert_eq!(s.open().1, DIRECT);
    }

    #[test]
    fn a_file_of_64_kib_or_more_is_not_stored() {
        let Some((s, created)) = Setup::new(STORE_MAX_BYTES as usize) else {
            return;
        };
        assert!(!s.release(created));
        assert!(s.stores().is_empty());
        assert_eq!(s.open().1, DIRECT);
    }

    #[test]
    fn an_open_kept_node_loses_its_pages_when_another_node_writes_or_a_lock_is_granted() {
        let Some((s, created)) = Setup::new(SMALL) else {
            return;
        };
        assert!(s.release(created));
        let (fh, flags) = s.open();
        assert_eq!(flags, FopenFlags::FOPEN_KEEP_CACHE);
        s.cache.revalidate(&s.v);
        assert_eq!(s.invalidations(), 0, "unchanged: kept");
        s.written_elsewhere();
        s.cache.revalidate(&s.v);
        assert_eq!(s.invalidations(), 1, "changed: dropped");
        s.cache.revalidate(&s.v);
        assert_eq!(s.invalidations(), 1, "once");
        assert!(s.release(fh), "stored again at its last release");
        assert_eq!(s.stores().last().unwrap().1, vec![9u8; SMALL]);
        let (fh, flags) = s.open();
        assert_eq!(flags, FopenFlags::FOPEN_KEEP_CACHE);
        s.cache.locked(&s.v, s.ino);
        assert_eq!(s.invalidations(), 2, "a lock granted drops the pages");
        s.release(fh);
    }

    #[test]
    fn nothing_is_kept_when_off_or_with_no_attribute_caching() {
        let dir = tempfile::tempdir().unwrap();
        let (v, ino, fh) = volume_with_file(&dir, RedirectPolicy::CapacityOnly, SMALL);
        for cache in [
            PageCache::new(false, Duration::from_secs(1)),
            PageCache::new(true, Duration::ZERO),
        ] {
            let cache = Arc::new(cache);
            PageCache::start(
                &cache,
                &Arc::new(Volume::new(Arc::clone(v.engine()), None, None)),
                Recorder::default(),
            );
            assert_eq!(cache.open(&v, ino, fh, DIRECT, false), DIRECT);
            assert!(!cache.release(&v, ino, fh, || ()).1);
            assert!(cache.notifier.get().is_none());
        }
    }
}
