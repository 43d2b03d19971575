//! BBOS's stager with a shared catalogue: several nodes (stagers with their
//! own fast tiers) over one capacity directory and one real `redis-server`
//! (started per test by `scripts/redis.sh` on 127.0.0.1, stopped by the pid
//! in its directory, also when a test panics), and the stager through a
//! catalogue outage. Issues 19 (an outage falls back) and 20 (a catalogue
//! that tells nodes apart).
//!
//! Without redis-server the Redis tests fail under `CI` and are skipped with
//! a message otherwise (`scripts/setup.sh` installs it).

mod redis_support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use redis_support::RedisServer;

use sluice_catalog::{
    Catalog, CatalogError, CkptRecord, Failure, JobSpec, Location, MetaSpec, PeriodStats,
};
use sluice_engine::ckpt::CATALOG_RETRY;
use sluice_engine::{Checkpoints, CkptOptions};
use sluice_env::posix::PosixBackend;
use sluice_env::{Backend, RelPath, SystemClock};

const KIB: u64 = 1024;

// ---------------------------------------------------------------------------
// Nodes over one capacity directory

/// One shared capacity directory and the fast tiers of the nodes.
struct Cluster {
    root: tempfile::TempDir,
    capacity: Arc<dyn Backend>,
}

impl Cluster {
    fn new() -> Cluster {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("capacity/ck")).unwrap();
        let capacity: Arc<dyn Backend> =
            Arc::new(PosixBackend::new(root.path().join("capacity")).unwrap());
        Cluster { root, capacity }
    }
    fn fast_dir(&self, node: &str) -> PathBuf {
        let dir = self.root.path().join(format!("fast-{node}"));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
    /// Opens node `node`'s stager (its fast tier is `fast-NODE`).
    fn node(&self, node: &str, catalog: Box<dyn Catalog>, options: CkptOptions) -> Checkpoints {
        let fast: Arc<dyn Backend> = Arc::new(PosixBackend::new(self.fast_dir(node)).unwrap());
        Checkpoints::open(
            fast,
            Arc::clone(&self.capacity),
            catalog,
            Arc::new(SystemClock::new()),
            options,
        )
        .unwrap()
    }
    fn capacity_file(&self, path: &str) -> Vec<u8> {
        std::fs::read(self.root.path().join("capacity").join(path)).unwrap()
    }
}

fn options() -> CkptOptions {
    CkptOptions {
        capacity: 1 << 20,
        chunk_bytes: 16 * KIB,
        background: false,
        admit_wait: Duration::from_secs(5),
        jobs_refresh: Duration::ZERO,
        remote_wait: Duration::from_millis(300),
        ..CkptOptions::default()
    }
}

fn job(files: u32) -> JobSpec {
    JobSpec {
        id: "j".into(),
        period_s: 600,
        ckpt_bytes: 64 * KIB,
        failure: Failure::Nodes(4),
        versions: 2,
        glob: "ck/*".into(),
        files,
    }
}

fn p(s: &str) -> RelPath {
    RelPath::new(s).unwrap()
}

fn bytes(seed: u8, len: u64) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn write_file(ck: &Checkpoints, path: &str, data: &[u8]) {
    let fh = ck.create(&p(path)).unwrap();
    ck.write(fh, 0, data).unwrap();
    ck.fsync(fh).unwrap();
    ck.release(fh);
}

fn read_all(ck: &Checkpoints, path: &str) -> std::io::Result<Vec<u8>> {
    let fh = ck.open_file(&p(path), false, false)?;
    let data = ck.read(fh, 0, 1 << 30);
    ck.release(fh);
    data
}

fn record(ck: &Checkpoints, path: &str) -> CkptRecord {
    ck.catalog().ckpt(path).unwrap().expect("a record")
}

// ---------------------------------------------------------------------------
// Issue 19: a catalogue outage falls back, counted and logged

/// Issue 19: "When Redis dies, a new checkpoint create gets EIO, and the
/// catalogue error counter stays 0."
#[test]
fn issue_19_redis_down_a_new_checkpoint_falls_back_to_capacity() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let cluster = Cluster::new();
    let a = cluster.node("a", redis.catalog(), options());
    a.register(job(1)).unwrap();
    let v1 = bytes(1, 40 * KIB);
    write_file(&a, "ck/v1", &v1);
    assert_eq!(a.size(&p("ck/v1")), Some(40 * KIB), "staged");

    redis.kill9();
    // A new checkpoint while the catalogue is down: created, written and
    // read back whole, as an ordinary capacity-tier file.
    let v2 = bytes(2, 40 * KIB + 3);
    write_file(&a, "ck/v2", &v2);
    assert_eq!(a.size(&p("ck/v2")), None, "not staged");
    assert_eq!(cluster.capacity_file("ck/v2"), v2);
    assert_eq!(read_all(&a, "ck/v2").unwrap(), v2);
    // A second one within CATALOG_RETRY does not ask the catalogue.
    let v3 = bytes(3, 5 * KIB);
    write_file(&a, "ck/v3", &v3);
    assert_eq!(cluster.capacity_file("ck/v3"), v3);
    // What the node knows still serves: its staged copy.
    assert_eq!(read_all(&a, "ck/v1").unwrap(), v1);
    let s = a.status().stats;
    assert_eq!(s.catalog_fallbacks, 2, "{s:?}");
    assert!(s.catalog_errors >= 1, "{s:?}");
    let last = s.last_error.unwrap_or_default();
    assert!(last.contains("redis://127.0.0.1"), "{last}");

    // Redis back: after CATALOG_RETRY new checkpoints are staged again and
    // the records missed meanwhile are put again.
    redis.start_again();
    thread::sleep(CATALOG_RETRY + Duration::from_millis(100));
    let v4 = bytes(4, 20 * KIB);
    write_file(&a, "ck/v4", &v4);
    assert_eq!(a.size(&p("ck/v4")), Some(20 * KIB), "staged again");
    let rec = record(&a, "ck/v4");
    assert_eq!(rec.location, Location::Staged);
    assert_eq!(rec.node.as_deref(), Some(a.node_id()));
    assert_eq!(a.status().stats.catalog_fallbacks, 2);
    // Demotion reaches the catalogue again.
    a.drain().unwrap();
    assert_eq!(record(&a, "ck/v1").location, Location::Cached);
    assert_eq!(record(&a, "ck/v4").location, Location::Cached);
    assert_eq!(cluster.capacity_file("ck/v4"), v4);
}

/// Records a node could not update during an outage are put again when
/// the catalogue answers (here: a demotion finished while Redis was down).
#[test]
fn issue_19_records_missed_in_an_outage_are_put_again() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let cluster = Cluster::new();
    let a = cluster.node("a", redis.catalog(), options());
    a.register(job(1)).unwrap();
    write_file(&a, "ck/v1", &bytes(1, 10 * KIB));
    redis.kill9();
    a.drain().unwrap();
    assert!(a.status().stats.catalog_errors >= 1);
    redis.start_again();
    assert_eq!(record(&a, "ck/v1").location, Location::Staged, "missed");
    thread::sleep(CATALOG_RETRY + Duration::from_millis(100));
    write_file(&a, "ck/v2", &bytes(2, 10 * KIB));
    assert_eq!(record(&a, "ck/v1").location, Location::Cached, "put again");
}

// ---------------------------------------------------------------------------
// Issue 20: a shared catalogue that tells nodes apart

/// Issue 20: "Unmounting and remounting B rewrote A's two `staged`
/// checkpoint records (held only on A's fast tier) to `capacity`."
#[test]
fn issue_20_remounting_one_node_leaves_the_others_staged_records() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let cluster = Cluster::new();
    let a = cluster.node("a", redis.catalog(), options());
    let b = cluster.node("b", redis.catalog(), options());
    assert_ne!(a.node_id(), b.node_id());
    a.register(job(1)).unwrap();
    write_file(&a, "ck/a1", &bytes(1, 10 * KIB));
    write_file(&a, "ck/a2", &bytes(2, 10 * KIB));
    // B's own record of a copy its fast tier lost: B's to reconcile.
    b.catalog()
        .put_ckpt(&CkptRecord {
            path: "ck/lost".into(),
            job: "j".into(),
            version: 9,
            bytes: 1,
            location: Location::Staged,
            staged_id: Some(1),
            created_unix_ns: 1,
            node: Some(b.node_id().to_owned()),
        })
        .unwrap();
    let b_id = b.node_id().to_owned();
    drop(b);
    let b = cluster.node("b", redis.catalog(), options());
    assert_eq!(b.node_id(), b_id, "the id is kept on the fast tier");
    for path in ["ck/a1", "ck/a2"] {
        let rec = record(&b, path);
        assert_eq!(rec.location, Location::Staged, "{path}");
        assert_eq!(rec.node.as_deref(), Some(a.node_id()), "{path}");
    }
    assert_eq!(record(&b, "ck/lost").location, Location::Capacity);
    // A's remount keeps them too (they are its own, and it holds them).
    drop(a);
    let a = cluster.node("a", redis.catalog(), options());
    assert_eq!(record(&a, "ck/a1").location, Location::Staged);
    assert_eq!(a.status().stats.recovered, 2);
}

/// Issue 20: "A job registered through A is unknown to B until B
/// remounts."
#[test]
fn issue_20_a_job_registered_on_one_node_reaches_the_others() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let cluster = Cluster::new();
    let a = cluster.node("a", redis.catalog(), options());
    let slow = CkptOptions {
        jobs_refresh: Duration::from_millis(500),
        ..options()
    };
    let b = cluster.node("b", redis.catalog(), slow);
    assert!(!b.handles(&p("ck/x")));
    a.register(job(1)).unwrap();
    // B checked less than jobs_refresh ago: not yet (bounded polling).
    assert!(!b.handles(&p("ck/x")));
    thread::sleep(Duration::from_millis(600));
    assert!(b.handles(&p("ck/x")), "B sees A's job without a remount");
    assert_eq!(b.jobs().len(), 1);
    assert_eq!(b.status().stats.jobs_reloads, 1);
    write_file(&b, "ck/x", &bytes(5, 8 * KIB));
    assert_eq!(b.size(&p("ck/x")), Some(8 * KIB), "staged on B");
    assert_eq!(record(&a, "ck/x").node.as_deref(), Some(b.node_id()));
    // An unregistration travels the same way.
    assert!(a.unregister("j").unwrap());
    thread::sleep(Duration::from_millis(600));
    assert!(!b.handles(&p("ck/y")));
    assert!(b.jobs().is_empty());
}

/// Issue 20: "A checkpoint of N rank files counts as N versions."
#[test]
fn issue_20_one_checkpoint_of_n_files_is_one_version() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let cluster = Cluster::new();
    let a = cluster.node("a", redis.catalog(), options());
    let b = cluster.node("b", redis.catalog(), options());
    a.register(job(4)).unwrap();
    assert!(b.handles(&p("ck/r0")));
    // Two checkpoints of four ranks, two ranks on each node, interleaved.
    for (round, want) in [(0u8, 1u64), (1, 2)] {
        for rank in 0..4u8 {
            let node = if rank % 2 == 0 { &a } else { &b };
            let path = format!("ck/s{round}-r{rank}");
            write_file(node, &path, &bytes(rank, 4 * KIB));
            assert_eq!(record(&a, &path).version, want, "{path}");
        }
    }
}

/// Issue 20: "A restart on B before A's demotion finished read short files
/// (0, 1, 2, 5 MiB of 16) with no error."
#[test]
fn issue_20_a_restart_read_of_a_copy_staged_elsewhere_waits_or_fails() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let cluster = Cluster::new();
    let a = Arc::new(cluster.node("a", redis.catalog(), options()));
    let b = cluster.node("b", redis.catalog(), options());
    a.register(job(1)).unwrap();
    let data = bytes(9, 48 * KIB);
    write_file(&a, "ck/r", &data);
    // Not demoted: B's wait (300 ms) runs out with EAGAIN naming A.
    let started = Instant::now();
    let err = read_all(&b, "ck/r").unwrap_err();
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_eq!(err.kind(), std::io::ErrorKind::WouldBlock, "{err}");
    assert!(err.to_string().contains(a.node_id()), "{err}");
    assert_eq!(b.status().stats.remote_timeouts, 1);
    // A demotes while B waits: B reads every byte.
    let b = cluster.node(
        "b",
        redis.catalog(),
        CkptOptions {
            remote_wait: Duration::from_secs(20),
            ..options()
        },
    );
    let demoter = {
        let a = Arc::clone(&a);
        thread::spawn(move || {
            thread::sleep(Duration::from_millis(200));
            a.drain().unwrap();
        })
    };
    assert_eq!(read_all(&b, "ck/r").unwrap(), data);
    demoter.join().unwrap();
    let s = b.status().stats;
    assert_eq!((s.remote_waits, s.remote_timeouts), (1, 0), "{s:?}");
    // Once demoted, no wait at all.
    assert_eq!(read_all(&b, "ck/r").unwrap(), data);
    assert_eq!(b.status().stats.remote_waits, 1);
}

// ---------------------------------------------------------------------------
// redb: one node, as before

fn redb(dir: &Path) -> Box<dyn Catalog> {
    sluice_catalog::open(&MetaSpec::Redb {
        path: dir.join("catalog.redb"),
    })
    .unwrap()
}

/// A redb catalogue is one node's: records written before node ids (no
/// `node`) are its own, reconciled at open as before, and a restart read
/// never waits.
#[test]
fn issue_20_redb_takes_records_without_a_node_as_its_own() {
    let cluster = Cluster::new();
    let meta = tempfile::tempdir().unwrap();
    {
        let c = redb(meta.path());
        assert!(!c.shared());
        c.put_ckpt(&CkptRecord {
            path: "ck/old".into(),
            job: "j".into(),
            version: 1,
            bytes: 3,
            location: Location::Staged,
            staged_id: Some(77),
            created_unix_ns: 1,
            node: None,
        })
        .unwrap();
    }
    std::fs::write(cluster.root.path().join("capacity/ck/old"), b"old").unwrap();
    let a = cluster.node("a", redb(meta.path()), options());
    assert_eq!(record(&a, "ck/old").location, Location::Capacity);
    a.register(job(1)).unwrap();
    assert_eq!(read_all(&a, "ck/old").unwrap(), b"old");
    assert_eq!(a.status().stats.remote_waits, 0);
    write_file(&a, "ck/new", &bytes(1, KIB));
    assert_eq!(
        record(&a, "ck/new").node.as_deref(),
        Some(a.node_id()),
        "new records name the node"
    );
}

/// The node id: kept on the fast tier, or given; a bad one is refused.
#[test]
fn node_ids_are_kept_or_given_and_checked() {
    let cluster = Cluster::new();
    let meta = tempfile::tempdir().unwrap();
    let a = cluster.node("a", redb(meta.path()), options());
    let id = a.node_id().to_owned();
    assert!(id.len() > 9 && id.is_ascii(), "{id}");
    drop(a);
    let a = cluster.node("a", redb(meta.path()), options());
    assert_eq!(a.node_id(), id);
    drop(a);
    let given = CkptOptions {
        node_id: Some("rack1-node07".into()),
        ..options()
    };
    let a = cluster.node("a", redb(meta.path()), given);
    assert_eq!(a.node_id(), "rack1-node07");
    drop(a);
    let fast: Arc<dyn Backend> = Arc::new(PosixBackend::new(cluster.fast_dir("a")).unwrap());
    let bad = Checkpoints::open(
        fast,
        Arc::clone(&cluster.capacity),
        redb(meta.path()),
        Arc::new(SystemClock::new()),
        CkptOptions {
            node_id: Some("has space".into()),
            ..options()
        },
    );
    let err = bad.err().expect("refused").to_string();
    assert!(err.contains("node id"), "{err}");
}

// ---------------------------------------------------------------------------
// Any store that fails: a redb catalogue with failures injected

/// A catalogue whose every call fails while `down` is set.
struct Flaky {
    inner: Box<dyn Catalog>,
    down: Arc<std::sync::atomic::AtomicBool>,
}

impl Flaky {
    fn check(&self) -> Result<(), CatalogError> {
        if self.down.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(CatalogError::Redb {
                path: "/injected/catalog.redb".into(),
                reason: "injected failure".into(),
            });
        }
        Ok(())
    }
}

impl Catalog for Flaky {
    fn put_job(&self, job: &JobSpec) -> Result<(), CatalogError> {
        self.check()?;
        self.inner.put_job(job)
    }
    fn remove_job(&self, id: &str) -> Result<bool, CatalogError> {
        self.check()?;
        self.inner.remove_job(id)
    }
    fn job(&self, id: &str) -> Result<Option<JobSpec>, CatalogError> {
        self.check()?;
        self.inner.job(id)
    }
    fn jobs(&self) -> Result<Vec<JobSpec>, CatalogError> {
        self.check()?;
        self.inner.jobs()
    }
    fn next_version(&self, job: &str) -> Result<u64, CatalogError> {
        self.check()?;
        self.inner.next_version(job)
    }
    fn put_ckpt(&self, rec: &CkptRecord) -> Result<(), CatalogError> {
        self.check()?;
        self.inner.put_ckpt(rec)
    }
    fn ckpt(&self, path: &str) -> Result<Option<CkptRecord>, CatalogError> {
        self.check()?;
        self.inner.ckpt(path)
    }
    fn remove_ckpt(&self, path: &str) -> Result<bool, CatalogError> {
        self.check()?;
        self.inner.remove_ckpt(path)
    }
    fn rename_ckpt(&self, from: &str, to: &str) -> Result<bool, CatalogError> {
        self.check()?;
        self.inner.rename_ckpt(from, to)
    }
    fn ckpts(&self) -> Result<Vec<CkptRecord>, CatalogError> {
        self.check()?;
        self.inner.ckpts()
    }
    fn put_period(&self, p: &PeriodStats) -> Result<(), CatalogError> {
        self.check()?;
        self.inner.put_period(p)
    }
    fn periods(&self, last: usize) -> Result<Vec<PeriodStats>, CatalogError> {
        self.check()?;
        self.inner.periods(last)
    }
    fn trim_periods(&self, keep: usize) -> Result<(), CatalogError> {
        self.check()?;
        self.inner.trim_periods(keep)
    }
    fn shared(&self) -> bool {
        self.inner.shared()
    }
    fn jobs_generation(&self) -> Result<u64, CatalogError> {
        self.check()?;
        self.inner.jobs_generation()
    }
    fn join_version(
        &self,
        job: &str,
        files: u32,
        window_ms: u64,
        now_ms: u64,
    ) -> Result<u64, CatalogError> {
        self.check()?;
        self.inner.join_version(job, files, window_ms, now_ms)
    }
    fn describe(&self) -> String {
        format!("flaky {}", self.inner.describe())
    }
}

/// Issue 19 with the embedded store: a redb catalogue that errors falls
/// back the same way, and the node keeps serving what it knows.
#[test]
fn issue_19_a_failing_redb_catalogue_falls_back_the_same_way() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let cluster = Cluster::new();
    let meta = tempfile::tempdir().unwrap();
    let down = Arc::new(AtomicBool::new(false));
    let flaky = Flaky {
        inner: redb(meta.path()),
        down: Arc::clone(&down),
    };
    let a = cluster.node("a", Box::new(flaky), options());
    a.register(job(1)).unwrap();
    let v1 = bytes(1, 30 * KIB);
    write_file(&a, "ck/v1", &v1);
    a.drain().unwrap();
    std::fs::write(cluster.root.path().join("capacity/ck/old"), b"older").unwrap();

    down.store(true, Ordering::SeqCst);
    let v2 = bytes(2, 30 * KIB);
    write_file(&a, "ck/v2", &v2);
    assert_eq!(a.size(&p("ck/v2")), None);
    assert_eq!(cluster.capacity_file("ck/v2"), v2);
    // Reads: the cached copy, and the capacity tier for the rest (the
    // catalogue cannot say whether another node stages it).
    assert_eq!(read_all(&a, "ck/v1").unwrap(), v1);
    assert_eq!(read_all(&a, "ck/old").unwrap(), b"older");
    let s = a.status().stats;
    assert_eq!(s.catalog_fallbacks, 1, "{s:?}");
    assert!(s.catalog_errors >= 2, "{s:?}");
    assert!(s.last_error.unwrap().contains("injected failure"));

    down.store(false, Ordering::SeqCst);
    thread::sleep(CATALOG_RETRY + Duration::from_millis(50));
    write_file(&a, "ck/v3", &bytes(3, 30 * KIB));
    assert_eq!(a.size(&p("ck/v3")), Some(30 * KIB), "staged again");
}
