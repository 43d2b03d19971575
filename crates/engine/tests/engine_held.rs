//! On-demand consistency (issue 34; docs/fuse.md "On demand", the crash
//! argument in docs/crash-consistency.md "held marks and recalls"): two
//! engines, each with its own fast tier, over one capacity tier. A file's
//! bytes stay in its writer's log, its capacity file marked as held;
//! another engine's recall brings them, bounded, and a holder that is
//! down makes the recall fail with ETIMEDOUT instead of serving the older
//! bytes. Each scenario runs over every place a mark can live ([`Tier`]):
//! the xattr on a POSIX directory, and the sidecar entry on a POSIX
//! directory (`mount.held_mark = "sidecar"`) and on the memory tier, which
//! keeps no user xattrs (`auto` falls back to it).

mod redis_support;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis_support::RedisServer;
use sluice_engine::{
    Doorbell, Engine, EngineConfig, HeldMark, HeldState, MarkStore, OnDemand, Sealing, HELD_XATTR,
};
use sluice_env::memory::MemBackend;
use sluice_env::posix::PosixBackend;
use sluice_env::{Backend, BackendFile, ForwardFile, OpenOptions, RelPath, SetAttr, SystemClock};
use sluice_policy::redirector::{RedirectPolicy, RedirectorConfig};

fn tier(dir: &Path) -> Arc<dyn Backend> {
    std::fs::create_dir_all(dir).unwrap();
    Arc::new(PosixBackend::new(dir.to_path_buf()).unwrap())
}

/// Fast-all (every write goes to the log), small regions, no age flush;
/// `on_demand` as given.
fn config(on_demand: Option<OnDemand>) -> EngineConfig {
    let mut config = EngineConfig {
        redirector: RedirectorConfig {
            policy: RedirectPolicy::FastAll,
            ..RedirectorConfig::default()
        },
        region_bytes: 1024 * 1024,
        record_max_bytes: 64 * 1024,
        on_demand,
        ..EngineConfig::default()
    };
    config.flush_gate.flush_age = None;
    config
}

fn open(fast: &Arc<dyn Backend>, capacity: &Arc<dyn Backend>, config: EngineConfig) -> Engine {
    Engine::open(
        Arc::clone(fast),
        Arc::clone(capacity),
        Arc::new(SystemClock::new()),
        config,
    )
    .unwrap()
}

fn capacity_bytes(capacity: &Arc<dyn Backend>, path: &RelPath) -> Vec<u8> {
    let f = capacity.open(path, OpenOptions::default()).unwrap();
    let mut buf = vec![0u8; f.len().unwrap() as usize];
    let n = f.read_at(&mut buf, 0).unwrap();
    buf.truncate(n);
    buf
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// Write `data` as the new file `path` through `node`, fsync it (its bytes
/// in the node's log, its mark set) and close it: a file `node` holds.
fn write_held(node: &Engine, path: &RelPath, data: &[u8]) {
    let id = node.create(path).unwrap();
    node.write(id, 0, data).unwrap();
    node.fsync(id).unwrap();
    node.release(id);
}

/// Where the scenarios' marks live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tier {
    /// A POSIX directory, `auto`: the xattr.
    Xattr,
    /// A POSIX directory, `held_mark = "sidecar"`.
    SidecarPosix,
    /// The memory tier (no user xattrs), `auto`: the sidecar.
    SidecarMemory,
}

const TIERS: [Tier; 3] = [Tier::Xattr, Tier::SidecarPosix, Tier::SidecarMemory];

impl Tier {
    fn store(self) -> MarkStore {
        match self {
            Tier::Xattr => MarkStore::Xattr,
            _ => MarkStore::Sidecar,
        }
    }
}

struct Cluster {
    dir: tempfile::TempDir,
    capacity: Arc<dyn Backend>,
    tier: Tier,
}

impl Cluster {
    fn new(tier: Tier) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let capacity: Arc<dyn Backend> = match tier {
            Tier::SidecarMemory => Arc::new(MemBackend::new()),
            _ => self::tier(&dir.path().join("capacity")),
        };
        Cluster {
            dir,
            capacity,
            tier,
        }
    }

    fn fast(&self, name: &str) -> Arc<dyn Backend> {
        tier(&self.dir.path().join(name))
    }

    /// Node `name` under on-demand with `recall_wait`.
    fn node(&self, fast: &Arc<dyn Backend>, name: &str, recall_wait: Duration) -> Engine {
        self.node_over(fast, &self.capacity, name, recall_wait, None)
    }

    /// [`Cluster::node`] over `capacity` (the cluster's, wrapped), with a
    /// recall doorbell if given.
    fn node_over(
        &self,
        fast: &Arc<dyn Backend>,
        capacity: &Arc<dyn Backend>,
        name: &str,
        recall_wait: Duration,
        doorbell: Option<Doorbell>,
    ) -> Engine {
        let on_demand = OnDemand {
            node: Some(name.to_string()),
            recall_wait,
            doorbell,
            mark: match self.tier {
                Tier::SidecarPosix => HeldMark::Sidecar,
                _ => HeldMark::Auto,
            },
        };
        let engine = open(fast, capacity, config(Some(on_demand)));
        assert_eq!(
            engine.mark_store(),
            Some(self.tier.store()),
            "{:?}",
            self.tier
        );
        engine
    }

    /// The mark on `path` as the capacity tier keeps it, read without the
    /// engine: the xattr's value, or the sidecar entry's first line up to
    /// its sum (`None`: no mark).
    fn raw_mark(&self, path: &RelPath) -> Option<String> {
        match self.tier.store() {
            MarkStore::Xattr => self
                .capacity
                .get_xattr(path, HELD_XATTR)
                .ok()
                .map(|v| String::from_utf8_lossy(&v).into_owned()),
            MarkStore::Sidecar => {
                let ino = self.capacity.stat(path).ok()?.ino;
                let entry = RelPath::new(&format!(".sluice/held/{ino}")).unwrap();
                let f = self.capacity.open(&entry, OpenOptions::default()).ok()?;
                let mut buf = vec![0u8; f.len().unwrap() as usize];
                f.read_at(&mut buf, 0).unwrap();
                let text = String::from_utf8_lossy(&buf).into_owned();
                let (mark, _) = text.split_once(" sum=").expect("a whole entry");
                Some(mark.trim_end().to_string())
            }
        }
    }

    /// Remove the mark on `path` behind the engines' backs (as a mark lost
    /// with the capacity tier's unsynced state would be).
    fn lose_mark(&self, path: &RelPath, node: &str) {
        match self.tier.store() {
            MarkStore::Xattr => self.capacity.remove_xattr(path, HELD_XATTR).unwrap(),
            MarkStore::Sidecar => {
                let ino = self.capacity.stat(path).unwrap().ino;
                for name in [format!("{ino}"), format!("{ino}-{node}")] {
                    let entry = RelPath::new(&format!(".sluice/held/{name}")).unwrap();
                    self.capacity.remove_file(&entry).unwrap();
                }
            }
        }
    }
}

/// A writes and closes a file: nothing reaches the capacity tier, whose
/// file carries A's mark with the size at close. B's stat shows that size
/// without a recall; B's recall brings every byte and removes the mark;
/// B then reads the file whole.
#[test]
fn issue_34_a_recall_brings_the_holders_bytes_and_removes_its_mark() {
    for tier in TIERS {
        let c = Cluster::new(tier);
        let (fast_a, fast_b) = (c.fast("fast-a"), c.fast("fast-b"));
        let a = c.node(&fast_a, "node-a", Duration::from_secs(10));
        let b = c.node(&fast_b, "node-b", Duration::from_secs(10));
        let path = RelPath::new("ckpt").unwrap();
        let data = pattern(300_000, 5);
        let id = a.create(&path).unwrap();
        a.write(id, 0, &data).unwrap();
        a.fsync(id).unwrap();
        a.update_mark(id).unwrap();
        a.release(id);
        assert_eq!(a.buffered_bytes(), data.len() as u64);
        assert!(
            capacity_bytes(&c.capacity, &path).is_empty(),
            "the close left every byte in A's log"
        );
        let mark = a.mark_of(&path).unwrap().expect("A's mark");
        assert_eq!(
            (mark.node.as_str(), mark.size),
            ("node-a", data.len() as u64)
        );

        // B's stat shows the mark's size; nothing is recalled by it.
        let mut stat = c.capacity.stat(&path).unwrap();
        b.overlay(&path, &mut stat, b.log_epoch());
        assert_eq!(stat.len, data.len() as u64, "B's stat shows the held size");
        assert!(capacity_bytes(&c.capacity, &path).is_empty());

        let started = Instant::now();
        b.recall(&path).unwrap();
        eprintln!("recall answered in {:?}", started.elapsed());
        assert_eq!(c.raw_mark(&path), None, "mark gone");
        assert!(
            capacity_bytes(&c.capacity, &path) == data,
            "every byte there"
        );
        assert_eq!(a.buffered_bytes(), 0, "the bytes left A's log");
        let (asked, answered) = (b.stats(), a.stats());
        assert_eq!((asked.recalls, asked.recall_timeouts), (1, 0));
        assert!(asked.recall_wait_ns > 0);
        assert_eq!(answered.recalls_answered, 1);
        let id_b = b.open_file(&path).unwrap();
        assert!(b.read(id_b, 0, 1 << 20).unwrap() == data);
        b.release(id_b);
    }
}

/// A node opening (recalling) a file it holds itself pays nothing: no
/// entry is written, no byte leaves its log, the mark stays.
#[test]
fn issue_34_a_node_recalls_nothing_of_its_own_files() {
    for tier in TIERS {
        let c = Cluster::new(tier);
        let fast_a = c.fast("fast-a");
        let a = c.node(&fast_a, "node-a", Duration::from_secs(10));
        let path = RelPath::new("mine").unwrap();
        let id = a.create(&path).unwrap();
        a.write(id, 0, &pattern(70_000, 1)).unwrap();
        a.release(id);
        a.recall(&path).unwrap();
        let id = a.open_file(&path).unwrap();
        a.recall_open(id).unwrap();
        a.release(id);
        assert_eq!(a.buffered_bytes(), 70_000, "nothing was written back");
        assert!(capacity_bytes(&c.capacity, &path).is_empty());
        assert_eq!(a.mark_of(&path).unwrap().unwrap().node, "node-a");
        let entries = c
            .capacity
            .read_dir(&RelPath::new(".sluice/recall/node-a").unwrap())
            .unwrap();
        assert!(entries.is_empty(), "no recall entry: {entries:?}");
    }
}

/// The holder is down (closed without a drain, as after kill -9): B's
/// recall fails within the bounded wait with ETIMEDOUT naming the node and
/// the file, and the capacity file still holds none of A's bytes (nothing
/// stale was made to look current). A's next open recovers its log, marks
/// the file again and answers the recall that waited: B then gets every
/// byte.
#[test]
fn issue_34_a_recall_of_a_node_that_is_down_times_out_then_its_restart_answers() {
    for tier in TIERS {
        let c = Cluster::new(tier);
        let (fast_a, fast_b) = (c.fast("fast-a"), c.fast("fast-b"));
        let path = RelPath::new("dir/ckpt").unwrap();
        c.capacity
            .create_dir(&RelPath::new("dir").unwrap())
            .unwrap();
        let data = pattern(200_000, 9);
        let a = c.node(&fast_a, "node-a", Duration::from_secs(10));
        write_held(&a, &path, &data);
        a.close();

        let wait = Duration::from_millis(600);
        let b = c.node(&fast_b, "node-b", wait);
        let started = Instant::now();
        let err = b.recall(&path).unwrap_err();
        let took = started.elapsed();
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut, "{err}");
        assert_eq!(sluice_env::errno::errno_of(&err), 110, "ETIMEDOUT: {err}");
        let message = err.to_string();
        assert!(
            message.contains("node-a") && message.contains("dir/ckpt"),
            "{message}"
        );
        assert!(
            took >= wait && took < wait + Duration::from_secs(2),
            "{took:?}"
        );
        assert!(capacity_bytes(&c.capacity, &path).is_empty());
        assert_eq!(b.mark_of(&path).unwrap().unwrap().node, "node-a");
        assert_eq!((b.stats().recalls, b.stats().recall_timeouts), (1, 1));

        // A comes back: its recall thread answers the entry that waited,
        // without B asking again.
        drop(b);
        let a = c.node(&fast_a, "node-a", Duration::from_secs(10));
        let answered = Instant::now();
        while a.mark_of(&path).unwrap().is_some() {
            assert!(
                answered.elapsed() < Duration::from_secs(5),
                "the pending recall was not answered"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(capacity_bytes(&c.capacity, &path) == data);
        assert_eq!(a.buffered_bytes(), 0);
    }
}

/// A holder that is down stops its heartbeat: a recall fails once the
/// heartbeat has stood still for 3 s, long before a `recall_wait` of 30 s,
/// with the same ETIMEDOUT and the cause. While the holder runs, its
/// heartbeat moves and the recall is answered (the other tests).
#[test]
fn issue_34_a_holder_whose_heartbeat_stopped_fails_the_recall_early() {
    for tier in TIERS {
        let c = Cluster::new(tier);
        let (fast_a, fast_b) = (c.fast("fast-a"), c.fast("fast-b"));
        let path = RelPath::new("ckpt").unwrap();
        let a = c.node(&fast_a, "node-a", Duration::from_secs(10));
        write_held(&a, &path, &pattern(50_000, 3));
        a.close();

        let b = c.node(&fast_b, "node-b", Duration::from_secs(30));
        let started = Instant::now();
        let err = b.recall(&path).unwrap_err();
        let took = started.elapsed();
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut, "{err}");
        assert!(err.to_string().contains("heartbeat"), "{err}");
        assert!(err.to_string().contains("node-a"), "{err}");
        assert!(
            took >= Duration::from_secs(3) && took < Duration::from_secs(6),
            "{took:?}"
        );
        assert_eq!((b.stats().recalls, b.stats().recall_timeouts), (1, 1));
    }
}

/// A capacity tier with one data path, a congested disk: every write and
/// sync of a file waits for the ones before it, and once `armed`, the
/// first write to `slow` holds the disk for `delay` (a large write-back).
#[derive(Debug)]
struct CongestedDisk {
    inner: Arc<dyn Backend>,
    disk: Arc<Mutex<()>>,
    slow: RelPath,
    delay: Duration,
    armed: Arc<AtomicBool>,
}

impl sluice_env::Forward for CongestedDisk {
    fn inner(&self) -> &dyn Backend {
        &*self.inner
    }
    fn open(&self, path: &RelPath, options: OpenOptions) -> std::io::Result<Arc<dyn BackendFile>> {
        let inner = self.inner.open(path, options)?;
        Ok(Arc::new(CongestedFile {
            inner,
            disk: Arc::clone(&self.disk),
            delay: (*path == self.slow).then_some(self.delay),
            armed: Arc::clone(&self.armed),
        }))
    }
}

#[derive(Debug)]
struct CongestedFile {
    inner: Arc<dyn BackendFile>,
    disk: Arc<Mutex<()>>,
    delay: Option<Duration>,
    armed: Arc<AtomicBool>,
}

impl ForwardFile for CongestedFile {
    fn inner(&self) -> &dyn BackendFile {
        &*self.inner
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        let _disk = self.disk.lock().unwrap();
        if let Some(delay) = self.delay {
            if self.armed.swap(false, Ordering::SeqCst) {
                std::thread::sleep(delay);
            }
        }
        self.inner.write_at(buf, offset)
    }
    fn sync_data(&self) -> std::io::Result<()> {
        let _disk = self.disk.lock().unwrap();
        self.inner.sync_data()
    }
}

/// A holder whose write-back of a recalled file holds its disk for 4.5 s,
/// longer than the 3 s after which a heartbeat that stands still means
/// down, is not taken for down: its heartbeat is metadata and does not
/// queue behind the write-back. (With the heartbeat a data write, it
/// waited for the write-back and the recall failed with ETIMEDOUT "that
/// node is down" while the holder was answering it:
/// docs/results/multinode-ondemand.md.)
#[test]
fn issue_34_a_holder_busy_writing_back_is_not_taken_for_down() {
    for tier in TIERS {
        let c = Cluster::new(tier);
        let (fast_a, fast_b) = (c.fast("fast-a"), c.fast("fast-b"));
        let path = RelPath::new("f").unwrap();
        let armed = Arc::new(AtomicBool::new(false));
        let congested: Arc<dyn Backend> = Arc::new(CongestedDisk {
            inner: Arc::clone(&c.capacity),
            disk: Arc::new(Mutex::new(())),
            slow: path.clone(),
            delay: Duration::from_millis(4500),
            armed: Arc::clone(&armed),
        });
        let wait = Duration::from_secs(20);
        let a = c.node_over(&fast_a, &congested, "node-a", wait, None);
        let b = c.node(&fast_b, "node-b", wait);
        let data = pattern(100_000, 5);
        write_held(&a, &path, &data);
        armed.store(true, Ordering::SeqCst);
        let started = Instant::now();
        b.recall(&path).unwrap_or_else(|e| panic!("{tier:?}: {e}"));
        let took = started.elapsed();
        assert!(
            !armed.load(Ordering::SeqCst),
            "{tier:?}: the write-back did not write"
        );
        assert!(took >= Duration::from_millis(4500), "{tier:?}: {took:?}");
        assert_eq!(capacity_bytes(&c.capacity, &path), data, "{tier:?}");
        assert_eq!(
            (b.stats().recalls, b.stats().recall_timeouts),
            (1, 0),
            "{tier:?}"
        );
    }
}

/// With the shared catalogue's doorbell (a real Redis), a holder answers a
/// recall at its next take of the doorbell (every 20 ms), not at its next
/// listing of its recall directory (every 2 s once it has a doorbell): so
/// three recalls made just after the holder's first listing are answered
/// well within the 2 s, and the doorbell is left empty.
#[test]
fn issue_34_a_recall_rings_the_holders_doorbell() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    for tier in TIERS {
        let c = Cluster::new(tier);
        let (fast_a, fast_b) = (c.fast("fast-a"), c.fast("fast-b"));
        let bell = || Some(Doorbell(Arc::from(redis.catalog())));
        let wait = Duration::from_secs(10);
        let a = c.node_over(&fast_a, &c.capacity, "node-a", wait, bell());
        let b = c.node_over(&fast_b, &c.capacity, "node-b", wait, bell());
        let files: Vec<(RelPath, Vec<u8>)> = (0..3u8)
            .map(|i| {
                let path = RelPath::new(&format!("f{i}")).unwrap();
                let data = pattern(100_000, i);
                write_held(&a, &path, &data);
                (path, data)
            })
            .collect();
        let started = Instant::now();
        for (path, data) in &files {
            b.recall(path).unwrap();
            assert!(capacity_bytes(&c.capacity, path) == *data, "{path}");
        }
        let took = started.elapsed();
        assert!(took < Duration::from_millis(1500), "{took:?}");
        assert_eq!(a.stats().recalls_answered, 3);
        assert!(redis
            .catalog()
            .take_recalls("node-a", 8)
            .unwrap()
            .is_empty());
    }
}

/// A capacity tier whose renames into `.sluice/recall/` (a recall entry
/// put in place) take `delay`: a small write queued behind other nodes'
/// write-backs on a congested disk.
#[derive(Debug)]
struct SlowEntries {
    inner: Arc<dyn Backend>,
    delay: Duration,
}

impl sluice_env::Forward for SlowEntries {
    fn inner(&self) -> &dyn Backend {
        &*self.inner
    }
    fn rename(&self, from: &RelPath, to: &RelPath) -> std::io::Result<()> {
        if to.as_str().starts_with(".sluice/recall/") {
            std::thread::sleep(self.delay);
        }
        self.inner.rename(from, to)
    }
}

/// With a doorbell, the requester waits for the mark, not for its recall
/// entry: the ring carried the request, and the entry (for a lost ring or
/// the holder's restart) is written beside the wait. Its renames here take
/// 2 s; the recall returns as soon as the holder's write-back ends
/// (docs/results/multinode-ondemand.md: opens 2.0-3.6 s late while the
/// entry's write queued behind the nodes' write-backs).
#[test]
fn issue_34_a_rung_recall_does_not_wait_for_its_entry() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    for tier in TIERS {
        let c = Cluster::new(tier);
        let (fast_a, fast_b) = (c.fast("fast-a"), c.fast("fast-b"));
        let bell = || Some(Doorbell(Arc::from(redis.catalog())));
        let wait = Duration::from_secs(10);
        let slow: Arc<dyn Backend> = Arc::new(SlowEntries {
            inner: Arc::clone(&c.capacity),
            delay: Duration::from_secs(2),
        });
        let a = c.node_over(&fast_a, &c.capacity, "node-a", wait, bell());
        let b = c.node_over(&fast_b, &slow, "node-b", wait, bell());
        let path = RelPath::new("f").unwrap();
        let data = pattern(100_000, 7);
        write_held(&a, &path, &data);
        let started = Instant::now();
        b.recall(&path).unwrap();
        let took = started.elapsed();
        assert_eq!(capacity_bytes(&c.capacity, &path), data, "{tier:?}");
        assert!(took < Duration::from_millis(1500), "{tier:?}: {took:?}");
        assert_eq!(a.stats().recalls_answered, 1, "{tier:?}");
        // The entry lands later; the holder, holding nothing of it now,
        // removes it at its next listing of its recall directory.
        std::thread::sleep(Duration::from_millis(2200));
    }
}

/// Recovery marks again every file it still holds bytes of, before the
/// engine answers anything (a mark lost meanwhile is put back).
#[test]
fn issue_34_recovery_marks_what_it_still_holds() {
    for tier in TIERS {
        let c = Cluster::new(tier);
        let fast_a = c.fast("fast-a");
        let path = RelPath::new("kept").unwrap();
        let a = c.node(&fast_a, "node-a", Duration::from_secs(10));
        write_held(&a, &path, &pattern(50_000, 3));
        a.close();
        c.lose_mark(&path, "node-a");
        let a = c.node(&fast_a, "node-a", Duration::from_secs(10));
        let mark = a.mark_of(&path).unwrap().expect("marked again at recovery");
        assert_eq!((mark.node.as_str(), mark.size), ("node-a", 50_000));
    }
}

/// A drain leaves no mark behind (an unmount drains): other nodes must
/// not wait for a node that holds nothing.
#[test]
fn issue_34_a_drain_removes_every_mark() {
    for tier in TIERS {
        let c = Cluster::new(tier);
        let fast_a = c.fast("fast-a");
        let a = c.node(&fast_a, "node-a", Duration::from_secs(10));
        let paths: Vec<RelPath> = (0..3)
            .map(|i| RelPath::new(&format!("f{i}")).unwrap())
            .collect();
        for (i, path) in paths.iter().enumerate() {
            let id = a.create(path).unwrap();
            a.write(id, 0, &pattern(10_000, i as u8)).unwrap();
            if i > 0 {
                a.release(id);
            }
        }
        a.drain().unwrap();
        for (i, path) in paths.iter().enumerate() {
            assert_eq!(a.mark_of(path).unwrap(), None, "{path}");
            assert!(capacity_bytes(&c.capacity, path) == pattern(10_000, i as u8));
        }
    }
}

/// Without on-demand nothing is marked and a recall asks nothing.
#[test]
fn issue_34_other_modes_set_no_mark() {
    let c = Cluster::new(Tier::Xattr);
    let fast_a = c.fast("fast-a");
    let a = open(&fast_a, &c.capacity, config(None));
    let path = RelPath::new("plain").unwrap();
    let id = a.create(&path).unwrap();
    a.write(id, 0, &[7u8; 4096]).unwrap();
    a.release(id);
    assert_eq!(a.mark_of(&path).unwrap(), None);
    assert_eq!(a.node_name(), None);
    a.recall(&path).unwrap();
    assert!(c
        .capacity
        .metadata(&RelPath::new(".sluice").unwrap())
        .is_err());
}

/// Another node renamed a held file (the mark goes with the inode): a
/// recall through the new name is answered, the holder finding the file
/// by its identity, and the bytes land under the new name.
#[test]
fn issue_34_a_recall_through_another_nodes_new_name_is_answered() {
    for tier in TIERS {
        let c = Cluster::new(tier);
        let (fast_a, fast_b) = (c.fast("fast-a"), c.fast("fast-b"));
        let a = c.node(&fast_a, "node-a", Duration::from_secs(10));
        let b = c.node(&fast_b, "node-b", Duration::from_secs(10));
        let (old, new) = (RelPath::new("old").unwrap(), RelPath::new("new").unwrap());
        let data = pattern(100_000, 8);
        let id = a.create(&old).unwrap();
        a.write(id, 0, &data).unwrap();
        a.release(id);
        // B renames it on the capacity tier (its namespace changes go there).
        b.rename(&old, &new).unwrap();
        assert_eq!(b.mark_of(&new).unwrap().unwrap().node, "node-a");
        b.recall(&new).unwrap();
        assert_eq!(b.mark_of(&new).unwrap(), None);
        assert!(capacity_bytes(&c.capacity, &new) == data);
        assert!(
            c.capacity.metadata(&old).is_err(),
            "the old name stays gone"
        );
        assert_eq!(a.buffered_bytes(), 0);
    }
}

/// Sealing (`chmod a-w` through the mount calls [`Engine::seal`]): the
/// holder writes the file back in the background and removes its mark,
/// with no other node asking; a file this node does not hold is left.
#[test]
fn issue_34_a_sealed_file_goes_back_in_the_background() {
    for tier in TIERS {
        let c = Cluster::new(tier);
        let fast_a = c.fast("fast-a");
        let a = c.node(&fast_a, "node-a", Duration::from_secs(10));
        let path = RelPath::new("sealed").unwrap();
        let data = pattern(150_000, 4);
        let id = a.create(&path).unwrap();
        a.write(id, 0, &data).unwrap();
        a.release(id);
        let not_held = RelPath::new("not-held").unwrap();
        c.capacity
            .open(
                &not_held,
                OpenOptions {
                    create: true,
                    ..OpenOptions::default()
                },
            )
            .unwrap();
        assert_eq!(a.seal(&not_held).unwrap(), Sealing::NotHeld);
        assert_eq!(a.held_files(), 1);
        assert_eq!(a.seal(&path).unwrap(), Sealing::Started);
        let started = Instant::now();
        while a.mark_of(&path).unwrap().is_some() {
            assert!(started.elapsed() < Duration::from_secs(5), "not sealed");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(capacity_bytes(&c.capacity, &path) == data);
        assert_eq!(a.buffered_bytes(), 0);
    }
}

/// `sluice seal` on a node that does not hold the file: it asks the
/// holder (a recall entry in its directory) and returns at once; the
/// holder writes the file back and removes its mark without anyone
/// waiting for it.
#[test]
fn issue_34_a_seal_on_another_node_asks_the_holder() {
    for tier in TIERS {
        let c = Cluster::new(tier);
        let (fast_a, fast_b) = (c.fast("fast-a"), c.fast("fast-b"));
        let a = c.node(&fast_a, "node-a", Duration::from_secs(10));
        let b = c.node(&fast_b, "node-b", Duration::from_secs(10));
        let path = RelPath::new("theirs").unwrap();
        let data = pattern(120_000, 6);
        let id = a.create(&path).unwrap();
        a.write(id, 0, &data).unwrap();
        a.release(id);
        let asked = Instant::now();
        assert_eq!(
            b.seal(&path).unwrap(),
            Sealing::Asked {
                holder: "node-a".into()
            }
        );
        assert!(asked.elapsed() < Duration::from_secs(1), "the seal waited");
        let started = Instant::now();
        while b.mark_of(&path).unwrap().is_some() {
            assert!(started.elapsed() < Duration::from_secs(5), "not sealed");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(capacity_bytes(&c.capacity, &path) == data);
        assert_eq!((a.buffered_bytes(), a.held_files()), (0, 0));
        assert_eq!(b.stats().recalls, 0, "B did not wait for it");
    }
}

/// `user.sluice.state`: `held node=NODE` while a mark names NODE (on
/// every node), then `clean` once written back, `sealed` once no write
/// bit is left; no state for a directory; a seal of a directory is
/// refused; both are refused outside on-demand.
#[test]
fn issue_34_the_state_is_held_sealed_or_clean() {
    for tier in TIERS {
        let c = Cluster::new(tier);
        let (fast_a, fast_b) = (c.fast("fast-a"), c.fast("fast-b"));
        let a = c.node(&fast_a, "node-a", Duration::from_secs(10));
        let b = c.node(&fast_b, "node-b", Duration::from_secs(10));
        let path = RelPath::new("f").unwrap();
        let id = a.create(&path).unwrap();
        a.write(id, 0, &pattern(10_000, 1)).unwrap();
        a.release(id);
        let held = HeldState::Held {
            node: "node-a".into(),
        };
        assert_eq!(a.held_state(&path).unwrap().as_ref(), Some(&held));
        assert_eq!(b.held_state(&path).unwrap().as_ref(), Some(&held));
        assert_eq!(held.to_string(), "held node=node-a");
        b.recall(&path).unwrap();
        assert_eq!(b.held_state(&path).unwrap(), Some(HeldState::Clean));
        c.capacity
            .set_attr(
                &path,
                &SetAttr {
                    mode: Some(0o444),
                    ..SetAttr::default()
                },
            )
            .unwrap();
        assert_eq!(a.held_state(&path).unwrap(), Some(HeldState::Sealed));
        assert_eq!(HeldState::Sealed.to_string(), "sealed");
        assert_eq!(HeldState::Clean.to_string(), "clean");

        let dir = RelPath::new("d").unwrap();
        c.capacity.create_dir(&dir).unwrap();
        assert_eq!(a.held_state(&dir).unwrap(), None);
        let err = a.seal(&dir).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput, "{err}");
        assert!(err.to_string().contains("not a regular file"), "{err}");

        let plain = open(&c.fast("fast-c"), &c.capacity, config(None));
        for err in [
            plain.seal(&path).unwrap_err(),
            plain.held_state(&path).unwrap_err(),
        ] {
            assert_eq!(err.kind(), std::io::ErrorKind::Unsupported, "{err}");
            assert!(err.to_string().contains("not on-demand"), "{err}");
        }
    }
}

/// Regression (found by `scripts/bench-multinode-ondemand.sh`): a recall
/// entry was created, then written in place. On a congested capacity
/// tier its bytes landed late, the holder read it empty, removed it as
/// "not understood", and each re-ask (which truncated it again) met the
/// same fate: the requester waited until the holder's flusher happened
/// to empty the file, or timed out. Now the entry is written under a
/// temporary name and renamed into place. Here B's capacity writes take
/// 400 ms each (an emulated device's latency), A's are immediate.
#[test]
fn issue_34_a_recall_entry_slow_to_write_is_not_read_half_written() {
    use sluice_devices::ssd::SsdConfig;
    use sluice_env::emulated::EmulatedBackend;
    for tier in TIERS {
        let c = Cluster::new(tier);
        let (fast_a, fast_b) = (c.fast("fast-a"), c.fast("fast-b"));
        let slow: Arc<dyn Backend> = Arc::new(
            EmulatedBackend::ssd(
                Arc::clone(&c.capacity),
                SsdConfig {
                    latency: Duration::from_millis(400),
                    ..SsdConfig::default()
                },
                Arc::new(SystemClock::new()),
            )
            .unwrap(),
        );
        let a = c.node(&fast_a, "node-a", Duration::from_secs(10));
        let b = c.node_over(&fast_b, &slow, "node-b", Duration::from_secs(4), None);
        let path = RelPath::new("ckpt").unwrap();
        let data = pattern(100_000, 9);
        write_held(&a, &path, &data);
        let started = Instant::now();
        b.recall(&path)
            .expect("the recall is answered, not timed out");
        let waited = started.elapsed();
        println!("recall through a slow capacity tier: {waited:?}");
        assert!(waited < Duration::from_secs(3), "waited {waited:?}");
        assert_eq!(capacity_bytes(&c.capacity, &path), data);
        assert!(a.mark_of(&path).unwrap().is_none());
    }
}

/// The sidecar's key survives what a name does not: another node renames
/// the directory of a file A holds and still has open. B's stat through
/// the new name shows the mark's size; A's next close (its fd, not a
/// name) puts the new size in the mark where B sees it; B's recall
/// through the new name brings every byte and removes the mark. (A
/// sidecar keyed by the path would be lost at the rename: B would read
/// the empty capacity file unasked.)
#[test]
fn issue_34_a_held_file_keeps_its_mark_when_another_node_renames_its_directory() {
    for tier in TIERS {
        let c = Cluster::new(tier);
        let (fast_a, fast_b) = (c.fast("fast-a"), c.fast("fast-b"));
        let a = c.node(&fast_a, "node-a", Duration::from_secs(10));
        let b = c.node(&fast_b, "node-b", Duration::from_secs(10));
        let (d, e) = (RelPath::new("d").unwrap(), RelPath::new("e").unwrap());
        let (old, new) = (RelPath::new("d/f").unwrap(), RelPath::new("e/f").unwrap());
        b.mkdir(&d).unwrap();
        let data = pattern(180_000, 2);
        let id = a.create(&old).unwrap();
        a.write(id, 0, &data[..60_000]).unwrap();
        a.update_mark(id).unwrap();
        b.rename(&d, &e).unwrap();
        let stat_b = |path: &RelPath| {
            let mut stat = c.capacity.stat(path).unwrap();
            b.overlay(path, &mut stat, b.log_epoch());
            stat.len
        };
        assert_eq!(stat_b(&new), 60_000, "{tier:?}: the mark came along");
        a.write(id, 60_000, &data[60_000..]).unwrap();
        a.update_mark(id).unwrap();
        assert_eq!(
            stat_b(&new),
            data.len() as u64,
            "{tier:?}: A's close updated the mark of its file, under its new name"
        );
        assert!(
            c.raw_mark(&new).unwrap().contains("node=node-a"),
            "{tier:?}"
        );
        a.release(id);
        assert!(capacity_bytes(&c.capacity, &new).is_empty(), "{tier:?}");
        b.recall(&new).unwrap();
        assert_eq!(c.raw_mark(&new), None, "{tier:?}");
        assert!(capacity_bytes(&c.capacity, &new) == data, "{tier:?}");
        assert_eq!(a.buffered_bytes(), 0, "{tier:?}");
        assert!(
            c.capacity.metadata(&old).is_err(),
            "{tier:?}: nothing at the old name"
        );
        let id = b.open_file(&new).unwrap();
        assert!(b.read(id, 0, 1 << 20).unwrap() == data, "{tier:?}");
        b.release(id);
    }
}

/// Two nodes never both hold a file: B's first buffered write of a file
/// A holds finds A's mark (the xattr's `XATTR_CREATE`, the sidecar's
/// `link(2)`, fail), recalls it, and only then marks it; the mark then
/// names B alone (in the sidecar, A's own name of the entry is gone too),
/// and the capacity file has A's bytes under B's.
#[test]
fn issue_34_a_write_on_another_node_recalls_the_holder_before_it_marks() {
    for tier in TIERS {
        let c = Cluster::new(tier);
        let (fast_a, fast_b) = (c.fast("fast-a"), c.fast("fast-b"));
        let a = c.node(&fast_a, "node-a", Duration::from_secs(10));
        let b = c.node(&fast_b, "node-b", Duration::from_secs(10));
        let path = RelPath::new("shared").unwrap();
        let theirs = pattern(90_000, 3);
        let id = a.create(&path).unwrap();
        a.write(id, 0, &theirs).unwrap();
        a.update_mark(id).unwrap();
        a.release(id);
        let id = b.open_file(&path).unwrap();
        b.write(id, 0, &[0xb; 1000]).unwrap();
        b.update_mark(id).unwrap();
        assert_eq!((a.buffered_bytes(), a.held_files()), (0, 0), "{tier:?}");
        assert!(capacity_bytes(&c.capacity, &path) == theirs, "{tier:?}");
        let mark = c.raw_mark(&path).unwrap();
        assert!(
            mark.starts_with("v1 node=node-b size=90000"),
            "{tier:?}: {mark}"
        );
        if tier.store() == MarkStore::Sidecar {
            let ino = c.capacity.stat(&path).unwrap().ino;
            let held = |name: String| {
                c.capacity
                    .metadata(&RelPath::new(&format!(".sluice/held/{name}")).unwrap())
                    .is_ok()
            };
            assert!(!held(format!("{ino}-node-a")), "A's name of the entry went");
            assert!(held(format!("{ino}-node-b")), "B's name of it is there");
        }
        b.release(id);
        let mut want = theirs.clone();
        want[..1000].fill(0xb);
        a.recall(&path).unwrap();
        assert!(capacity_bytes(&c.capacity, &path) == want, "{tier:?}");
        assert_eq!(c.raw_mark(&path), None, "{tier:?}");
    }
}

/// The sidecar's one window (docs/fuse.md, "On demand", stale entries): A
/// holds `f` and goes down; while it is down `f` is deleted and its inode
/// number goes to a new file `g` (made here by moving A's entry to `g`'s
/// number, as a file system reusing the number would leave it). B trusts
/// the entry while A is down: its stat of `g` shows A's size and its open
/// fails with ETIMEDOUT naming A, never serving anything stale. A's
/// recovery, before it answers anything, removes the entry (it holds
/// nothing behind it: `f`'s bytes are quarantined): B then stats and
/// opens `g` as it is, without a recall.
#[test]
fn issue_34_a_sidecar_entry_whose_inode_number_was_reused_goes_at_the_holders_recovery() {
    for tier in [Tier::SidecarPosix, Tier::SidecarMemory] {
        let c = Cluster::new(tier);
        let (fast_a, fast_b) = (c.fast("fast-a"), c.fast("fast-b"));
        let (f, g) = (RelPath::new("f").unwrap(), RelPath::new("g").unwrap());
        let a = c.node(&fast_a, "node-a", Duration::from_secs(10));
        let id = a.create(&f).unwrap();
        a.write(id, 0, &pattern(40_000, 5)).unwrap();
        a.fsync(id).unwrap();
        a.update_mark(id).unwrap();
        a.release(id);
        a.close();
        // While A is down: `f` goes, `g` comes with `f`'s inode number.
        let was = c.capacity.stat(&f).unwrap().ino;
        c.capacity.remove_file(&f).unwrap();
        let file = c.capacity.open(&g, OpenOptions::CREATE).unwrap();
        file.write_at(b"fresh", 0).unwrap();
        drop(file);
        let now = c.capacity.stat(&g).unwrap().ino;
        for (from, to) in [
            (format!("{was}"), format!("{now}")),
            (format!("{was}-node-a"), format!("{now}-node-a")),
        ] {
            let at = |name: &str| RelPath::new(&format!(".sluice/held/{name}")).unwrap();
            c.capacity.rename(&at(&from), &at(&to)).unwrap();
        }

        let b = c.node(&fast_b, "node-b", Duration::from_millis(600));
        let mut stat = c.capacity.stat(&g).unwrap();
        b.overlay(&g, &mut stat, b.log_epoch());
        assert_eq!(
            stat.len, 40_000,
            "{tier:?}: trusted while its holder is down"
        );
        let err = b.recall(&g).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut, "{tier:?}: {err}");
        assert!(err.to_string().contains("node-a"), "{err}");

        let a = c.node(&fast_a, "node-a", Duration::from_secs(10));
        assert_eq!(a.held_files(), 0, "{tier:?}: f's bytes are quarantined");
        assert_eq!(
            c.raw_mark(&g),
            None,
            "{tier:?}: gone before A answers anything"
        );
        let mut stat = c.capacity.stat(&g).unwrap();
        b.overlay(&g, &mut stat, b.log_epoch());
        assert_eq!(stat.len, 5, "{tier:?}");
        b.recall(&g).unwrap();
        assert_eq!(b.stats().recalls, 1, "{tier:?}: no recall was needed");
        assert_eq!(capacity_bytes(&c.capacity, &g), b"fresh");
    }
}

/// Every node of a tier reads marks where the others write them: the
/// first node records its store (`.sluice/held-mark`); a later node
/// follows it under `auto` (even where the other store would work) and is
/// refused, with a message naming the record and the way out, when it
/// names the other store. `xattr` on a tier without user xattrs is
/// refused naming the tier; an unknown record is refused.
#[test]
fn issue_34_nodes_that_disagree_on_where_marks_live_are_refused() {
    let try_open = |c: &Cluster, name: &str, mark: HeldMark| {
        let on_demand = OnDemand {
            node: Some(name.to_string()),
            recall_wait: Duration::from_secs(10),
            doorbell: None,
            mark,
        };
        Engine::open(
            c.fast(name),
            Arc::clone(&c.capacity),
            Arc::new(SystemClock::new()),
            config(Some(on_demand)),
        )
    };
    let refused = |opened: std::io::Result<Engine>| match opened {
        Ok(_) => panic!("opened"),
        Err(e) => e,
    };
    // POSIX: the first node says sidecar; auto follows it.
    let c = Cluster::new(Tier::SidecarPosix);
    let first = try_open(&c, "node-a", HeldMark::Sidecar).unwrap();
    let follower = try_open(&c, "node-b", HeldMark::Auto).unwrap();
    assert_eq!(follower.mark_store(), Some(MarkStore::Sidecar));
    let err = refused(try_open(&c, "node-c", HeldMark::Xattr));
    for fragment in [
        "held_mark = \"xattr\"",
        "sidecar",
        ".sluice/held-mark",
        "\"auto\"",
    ] {
        assert!(err.to_string().contains(fragment), "{fragment}: {err}");
    }
    drop((first, follower));
    // POSIX, first node auto: the xattr; a sidecar node is refused.
    let c = Cluster::new(Tier::Xattr);
    assert_eq!(
        try_open(&c, "node-a", HeldMark::Auto).unwrap().mark_store(),
        Some(MarkStore::Xattr)
    );
    let err = refused(try_open(&c, "node-b", HeldMark::Sidecar));
    assert!(
        err.to_string().contains("records held marks as xattr"),
        "{err}"
    );
    // Memory (no user xattrs): xattr is refused; auto is the sidecar.
    let c = Cluster::new(Tier::SidecarMemory);
    let err = refused(try_open(&c, "node-a", HeldMark::Xattr));
    assert!(err.to_string().contains("user xattrs"), "{err}");
    assert!(err.to_string().contains("memory"), "{err}");
    assert_eq!(
        try_open(&c, "node-a", HeldMark::Auto).unwrap().mark_store(),
        Some(MarkStore::Sidecar)
    );
    // A record that is not one.
    let record = RelPath::new(".sluice/held-mark").unwrap();
    c.capacity.remove_file(&record).unwrap();
    let f = c.capacity.open(&record, OpenOptions::CREATE).unwrap();
    f.write_at(b"sluice-held-mark v1\nfloppy\n", 0).unwrap();
    let err = refused(try_open(&c, "node-b", HeldMark::Auto));
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidData, "{err}");
    assert!(err.to_string().contains("floppy"), "{err}");
}
