//! One behavioural suite for every catalogue store, run against redb (a file
//! in a temp dir) and against a real redis-server (started per test by
//! `scripts/redis.sh` on 127.0.0.1 and a free port, stopped by pid when the
//! test ends, also when it panics), plus tests only one store can have
//! (server killed with SIGKILL, unreachable server, redb open errors) and
//! the spec parser's table.
//!
//! Without redis-server the Redis tests fail under `CI` and are skipped with
//! a message otherwise (`scripts/setup.sh` installs it).

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use sluice_catalog::{
    open, Catalog, CatalogError, CkptRecord, Failure, JobSpec, Location, MetaSpec, PeriodStats,
    RedisSpec,
};

// ---------------------------------------------------------------------------
// The stores under test

/// A store the suite can open, restart and tamper with.
trait Store {
    /// Opens a catalogue on the store (through `sluice_catalog::open`).
    fn open(&self) -> Box<dyn Catalog>;
    /// Restarts the store keeping its data. For redb the caller must have
    /// dropped every catalogue first (redb allows one open per file).
    fn restart(&mut self);
    /// Writes `value` at `key` of table/hash `table` behind the catalogue's
    /// back. redb: no catalogue may be open.
    fn write_raw(&self, table: &str, key: &str, value: &[u8]);
}

struct RedbStore {
    dir: tempfile::TempDir,
}

impl RedbStore {
    fn new() -> RedbStore {
        RedbStore {
            dir: tempfile::tempdir().unwrap(),
        }
    }
    fn path(&self) -> PathBuf {
        self.dir.path().join("catalog.redb")
    }
}

impl Store for RedbStore {
    fn open(&self) -> Box<dyn Catalog> {
        let spec = MetaSpec::parse(&format!("redb:{}", self.path().display())).unwrap();
        open(&spec).unwrap()
    }
    fn restart(&mut self) {}
    fn write_raw(&self, table: &str, key: &str, value: &[u8]) {
        let db = redb::Database::create(self.path()).unwrap();
        let txn = db.begin_write().unwrap();
        if table == "periods" {
            let def: redb::TableDefinition<u64, &[u8]> = redb::TableDefinition::new("periods");
            let index: u64 = key.parse().unwrap();
            txn.open_table(def).unwrap().insert(index, value).unwrap();
        } else {
            let def: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new(table);
            txn.open_table(def).unwrap().insert(key, value).unwrap();
        }
        txn.commit().unwrap();
    }
}

const REDIS_SH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/redis.sh");

fn redis_available() -> bool {
    let ok = Command::new("redis-server")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI: redis-server is required (scripts/setup.sh installs it)"
        );
        eprintln!("skipped: no redis-server (install redis-server)");
    }
    ok
}

/// A private redis-server in a temp dir, stopped (by the pid in its
/// pidfile) when dropped.
struct RedisServer {
    dir: tempfile::TempDir,
    port: u16,
    /// `--auth`, `--tls` (scripts/redis.sh), kept for a restart.
    flags: &'static [&'static str],
}

fn redis_sh(args: &[&str]) -> String {
    let out = Command::new("bash")
        .arg(REDIS_SH)
        .args(args)
        .output()
        .expect("run scripts/redis.sh");
    assert!(
        out.status.success(),
        "scripts/redis.sh {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

impl RedisServer {
    fn start() -> Option<RedisServer> {
        RedisServer::start_with(&[])
    }
    fn start_with(flags: &'static [&'static str]) -> Option<RedisServer> {
        if !redis_available() {
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let mut args = vec!["start"];
        args.extend(flags);
        args.push(dir.path().to_str().unwrap());
        let port = redis_sh(&args)
            .trim()
            .parse()
            .expect("scripts/redis.sh prints the port");
        Some(RedisServer { dir, port, flags })
    }
    fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
    fn dir(&self) -> &str {
        self.dir.path().to_str().unwrap()
    }
    fn pid(&self) -> u32 {
        std::fs::read_to_string(self.dir.path().join("redis.pid"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }
    fn stop(&self) {
        redis_sh(&["stop", self.dir()]);
    }
    fn start_again(&self) {
        let mut args = vec!["start"];
        args.extend(self.flags);
        let port = self.port.to_string();
        args.extend([self.dir(), &port]);
        let port = redis_sh(&args);
        assert_eq!(port.trim(), self.port.to_string());
    }
    /// SIGKILL, then waits until the process is gone (or a zombie).
    fn kill9(&self) {
        let pid = self.pid();
        let status = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let state = stat.rsplit(") ").next().and_then(|s| s.chars().next());
            if matches!(state, None | Some('Z' | 'X')) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "redis-server {pid} survived SIGKILL"
            );
            thread::sleep(Duration::from_millis(10));
        }
    }
    fn spec(&self, prefix: &str) -> MetaSpec {
        MetaSpec::parse(&format!("redis://127.0.0.1:{}?prefix={prefix}", self.port)).unwrap()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if !self.dir.path().join("redis.pid").exists() {
            return; // stopped by the test
        }
        // Never panic in drop (it may run while unwinding).
        let _ = Command::new("bash")
            .arg(REDIS_SH)
            .args(["stop", self.dir()])
            .status();
    }
}

struct RedisStore {
    server: RedisServer,
}

impl RedisStore {
    fn new() -> Option<RedisStore> {
        RedisServer::start().map(|server| RedisStore { server })
    }
}

impl Store for RedisStore {
    fn open(&self) -> Box<dyn Catalog> {
        open(&self.server.spec("suite")).unwrap()
    }
    fn restart(&mut self) {
        self.server.stop();
        self.server.start_again();
    }
    fn write_raw(&self, table: &str, key: &str, value: &[u8]) {
        let hash = format!("suite:{table}");
        let reply = raw_redis(
            self.server.port,
            &[b"HSET", hash.as_bytes(), key.as_bytes(), value],
        );
        assert!(matches!(reply, Raw::Int(0 | 1)), "{reply:?}");
    }
}

/// A reply from [`raw_redis`].
#[derive(Debug)]
enum Raw {
    Line(String),
    Int(i64),
    Bulk(Option<Vec<u8>>),
    Array(Vec<Raw>),
}

/// One command on a fresh connection, bypassing the crate's client.
fn raw_redis(port: u16, args: &[&[u8]]) -> Raw {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut msg = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        msg.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        msg.extend_from_slice(a);
        msg.extend_from_slice(b"\r\n");
    }
    stream.write_all(&msg).unwrap();
    fn read(r: &mut BufReader<TcpStream>) -> Raw {
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        let line = line.trim_end().to_owned();
        let (kind, rest) = line.split_at(1);
        match kind {
            "+" | "-" => Raw::Line(line),
            ":" => Raw::Int(rest.parse().unwrap()),
            "$" => {
                let n: i64 = rest.parse().unwrap();
                if n < 0 {
                    return Raw::Bulk(None);
                }
                let mut buf = vec![0; n as usize + 2];
                r.read_exact(&mut buf).unwrap();
                buf.truncate(n as usize);
                Raw::Bulk(Some(buf))
            }
            "*" => Raw::Array(
                (0..rest.parse::<usize>().unwrap())
                    .map(|_| read(r))
                    .collect(),
            ),
            _ => panic!("bad reply {line:?}"),
        }
    }
    read(&mut BufReader::new(stream))
}

// ---------------------------------------------------------------------------
// Fixtures

fn job(id: &str) -> JobSpec {
    JobSpec {
        id: id.to_owned(),
        period_s: 600,
        ckpt_bytes: 3 << 30,
        failure: Failure::Nodes(128),
        versions: 2,
        glob: format!("{id}/ckpt-*.h5"),
        files: 1,
    }
}

fn ckpt(path: &str, version: u64) -> CkptRecord {
    CkptRecord {
        path: path.to_owned(),
        job: "lammps".to_owned(),
        version,
        bytes: 1 << 30,
        location: Location::Staged,
        staged_id: Some(version * 10),
        // Above 2^53: must survive JSON and Redis without rounding.
        created_unix_ns: 1_763_000_000_123_456_789,
        node: Some("node-a".to_owned()),
    }
}

fn period(index: u64, written_bytes: u64) -> PeriodStats {
    PeriodStats {
        index,
        written_bytes,
    }
}

fn period_indexes(c: &dyn Catalog, last: usize) -> Vec<u64> {
    c.periods(last).unwrap().iter().map(|p| p.index).collect()
}

// ---------------------------------------------------------------------------
// The suite: each function runs on every store (see the macro at the end).

fn round_trip_every_type(store: &mut dyn Store) {
    let c = store.open();
    let jobs = [
        job("lammps"),
        JobSpec {
            failure: Failure::MtbfSecs(86_400),
            period_s: u64::MAX,
            ckpt_bytes: 0,
            versions: u32::MAX,
            ..job("vpic")
        },
        job("unicode ✓ job\r\nwith\0bytes"),
    ];
    for j in &jobs {
        c.put_job(j).unwrap();
        assert_eq!(c.job(&j.id).unwrap().as_ref(), Some(j));
    }
    let mut recs = Vec::new();
    for (i, location) in [Location::Staged, Location::Cached, Location::Capacity]
        .into_iter()
        .enumerate()
    {
        for staged_id in [None, Some(0), Some(u64::MAX)] {
            recs.push(CkptRecord {
                location,
                staged_id,
                version: u64::MAX - i as u64,
                bytes: u64::MAX,
                created_unix_ns: u64::MAX,
                node: (i != 1).then(|| format!("host ✓-{i}")),
                ..ckpt(&format!("/ckpt/{i}/{staged_id:?} ✓"), 1)
            });
        }
    }
    for r in &recs {
        c.put_ckpt(r).unwrap();
        assert_eq!(c.ckpt(&r.path).unwrap().as_ref(), Some(r));
    }
    for p in [period(0, 0), period(7, 1 << 40), period(u64::MAX, u64::MAX)] {
        c.put_period(&p).unwrap();
        assert!(c.periods(usize::MAX).unwrap().contains(&p));
    }
    assert_eq!(c.job("absent").unwrap(), None);
    assert_eq!(c.ckpt("absent").unwrap(), None);
    assert_eq!(c.jobs().unwrap().len(), jobs.len());
    assert_eq!(c.ckpts().unwrap().len(), recs.len());
    let describe = c.describe();
    assert!(
        describe.starts_with("redb /") || describe.starts_with("redis redis://127.0.0.1:"),
        "{describe}"
    );
}

fn listings_are_sorted(store: &mut dyn Store) {
    let c = store.open();
    let ids = ["m", "b", "a/b", "a", "Z", "aa", "é", "10", "2"];
    for id in ids {
        c.put_job(&job(id)).unwrap();
        c.put_ckpt(&ckpt(&format!("/x/{id}"), 1)).unwrap();
    }
    let mut sorted: Vec<String> = ids.iter().map(|s| s.to_string()).collect();
    sorted.sort();
    let got: Vec<String> = c.jobs().unwrap().into_iter().map(|j| j.id).collect();
    assert_eq!(got, sorted);
    let paths: Vec<String> = c.ckpts().unwrap().into_iter().map(|r| r.path).collect();
    let want: Vec<String> = sorted.iter().map(|id| format!("/x/{id}")).collect();
    assert_eq!(paths, want);
}

fn puts_replace_and_removes_report(store: &mut dyn Store) {
    let c = store.open();
    c.put_job(&job("a")).unwrap();
    let changed = JobSpec {
        period_s: 60,
        failure: Failure::MtbfSecs(3600),
        ..job("a")
    };
    c.put_job(&changed).unwrap();
    assert_eq!(c.jobs().unwrap(), vec![changed.clone()]);
    assert_eq!(c.job("a").unwrap(), Some(changed));

    c.put_ckpt(&ckpt("/c", 1)).unwrap();
    let demoted = CkptRecord {
        location: Location::Cached,
        staged_id: None,
        ..ckpt("/c", 1)
    };
    c.put_ckpt(&demoted).unwrap();
    assert_eq!(c.ckpts().unwrap(), vec![demoted.clone()]);

    c.put_period(&period(3, 10)).unwrap();
    c.put_period(&period(3, 25)).unwrap();
    assert_eq!(c.periods(10).unwrap(), vec![period(3, 25)]);

    assert!(c.remove_job("a").unwrap());
    assert!(!c.remove_job("a").unwrap());
    assert_eq!(c.job("a").unwrap(), None);
    assert!(c.remove_ckpt("/c").unwrap());
    assert!(!c.remove_ckpt("/c").unwrap());
    assert_eq!(c.ckpt("/c").unwrap(), None);
    assert!(c.ckpts().unwrap().is_empty());
}

fn invalid_records_are_rejected(store: &mut dyn Store) {
    let c = store.open();
    let cases = [
        (
            JobSpec {
                id: String::new(),
                ..job("x")
            },
            "`id`",
        ),
        (
            JobSpec {
                period_s: 0,
                ..job("x")
            },
            "`period_s`",
        ),
        (
            JobSpec {
                versions: 0,
                ..job("x")
            },
            "`versions`",
        ),
    ];
    for (bad, field) in cases {
        let err = c.put_job(&bad).unwrap_err();
        assert!(matches!(err, CatalogError::Invalid { .. }), "{err}");
        assert!(err.to_string().contains(field), "{err}");
    }
    let err = c
        .put_ckpt(&CkptRecord {
            path: String::new(),
            ..ckpt("x", 1)
        })
        .unwrap_err();
    assert!(err.to_string().contains("`path`"), "{err}");
    let err = c
        .put_ckpt(&CkptRecord {
            node: Some(String::new()),
            ..ckpt("x", 1)
        })
        .unwrap_err();
    assert!(err.to_string().contains("`node`"), "{err}");
    assert!(c.next_version("").is_err());
    assert!(c.jobs().unwrap().is_empty());
    assert!(c.ckpts().unwrap().is_empty());
}

fn next_version_persists_across_restart(store: &mut dyn Store) {
    let c = store.open();
    assert_eq!(
        (1..=3)
            .map(|_| c.next_version("a").unwrap())
            .collect::<Vec<_>>(),
        [1, 2, 3]
    );
    assert_eq!(c.next_version("b").unwrap(), 1);
    c.put_job(&job("a")).unwrap();
    c.put_ckpt(&ckpt("/a/3", 3)).unwrap();
    c.put_period(&period(9, 99)).unwrap();
    // A removed job keeps its counter: no version is ever reused.
    assert!(c.remove_job("a").unwrap());
    c.put_job(&job("a")).unwrap();
    drop(c);
    store.restart();
    let c = store.open();
    assert_eq!(c.next_version("a").unwrap(), 4);
    assert_eq!(c.next_version("b").unwrap(), 2);
    assert_eq!(c.job("a").unwrap(), Some(job("a")));
    assert_eq!(c.ckpt("/a/3").unwrap(), Some(ckpt("/a/3", 3)));
    assert_eq!(c.periods(5).unwrap(), vec![period(9, 99)]);
}

fn next_version_is_atomic_across_threads(store: &mut dyn Store) {
    const THREADS: usize = 8;
    const EACH: usize = 25;
    let c: Arc<dyn Catalog> = Arc::from(store.open());
    let handles: Vec<_> = (0..THREADS)
        .map(|_| {
            let c = Arc::clone(&c);
            thread::spawn(move || {
                (0..EACH)
                    .map(|_| c.next_version("job").unwrap())
                    .collect::<Vec<u64>>()
            })
        })
        .collect();
    let mut all = Vec::new();
    for h in handles {
        let mine = h.join().unwrap();
        assert!(
            mine.windows(2).all(|w| w[0] < w[1]),
            "not increasing per thread: {mine:?}"
        );
        all.extend(mine);
    }
    let distinct: BTreeSet<u64> = all.iter().copied().collect();
    assert_eq!(distinct.len(), THREADS * EACH, "duplicates handed out");
    assert_eq!(distinct, (1..=(THREADS * EACH) as u64).collect());
    assert_eq!(c.next_version("job").unwrap(), (THREADS * EACH) as u64 + 1);
}

fn rename_moves_and_replaces(store: &mut dyn Store) {
    let c = store.open();
    c.put_ckpt(&ckpt("/tmp/a.part", 5)).unwrap();
    c.put_ckpt(&ckpt("/final/a", 4)).unwrap();
    c.put_ckpt(&ckpt("/other", 1)).unwrap();

    assert!(c.rename_ckpt("/tmp/a.part", "/final/a").unwrap());
    assert_eq!(c.ckpt("/tmp/a.part").unwrap(), None);
    assert_eq!(c.ckpt("/final/a").unwrap(), Some(ckpt("/final/a", 5)));
    assert_eq!(
        c.ckpts().unwrap(),
        vec![ckpt("/final/a", 5), ckpt("/other", 1)]
    );

    // Absent source: false, nothing changes (also not the target).
    assert!(!c.rename_ckpt("/tmp/a.part", "/other").unwrap());
    assert_eq!(c.ckpt("/other").unwrap(), Some(ckpt("/other", 1)));
    // Onto itself: true, unchanged.
    assert!(c.rename_ckpt("/other", "/other").unwrap());
    assert_eq!(c.ckpt("/other").unwrap(), Some(ckpt("/other", 1)));
    // To a new path.
    assert!(c.rename_ckpt("/other", "/new").unwrap());
    assert_eq!(c.ckpt("/new").unwrap(), Some(ckpt("/new", 1)));
    assert_eq!(c.ckpts().unwrap().len(), 2);
}

/// While one thread renames a record back and forth, every listing shows it
/// at exactly one of its two paths.
fn rename_is_atomic_to_readers(store: &mut dyn Store) {
    const RENAMES: usize = 100;
    let c: Arc<dyn Catalog> = Arc::from(store.open());
    c.put_ckpt(&ckpt("/p0", 1)).unwrap();
    let renamer = {
        let c = Arc::clone(&c);
        thread::spawn(move || {
            for i in 0..RENAMES {
                let (from, to) = if i % 2 == 0 {
                    ("/p0", "/p1")
                } else {
                    ("/p1", "/p0")
                };
                assert!(
                    c.rename_ckpt(from, to).unwrap(),
                    "rename {i} lost the record"
                );
            }
        })
    };
    let mut seen = 0;
    while !renamer.is_finished() || seen == 0 {
        let all = c.ckpts().unwrap();
        assert_eq!(all.len(), 1, "record at both or neither path: {all:?}");
        assert!(all[0].path == "/p0" || all[0].path == "/p1");
        seen += 1;
    }
    renamer.join().unwrap();
    assert_eq!(c.ckpts().unwrap(), vec![ckpt("/p0", 1)]);
}

fn periods_are_ordered_and_trimmed(store: &mut dyn Store) {
    let c = store.open();
    c.trim_periods(3).unwrap();
    assert!(c.periods(10).unwrap().is_empty());
    // 10 and 2 catch a string order; u64::MAX catches a float one.
    for i in [5, 10, 1, 2, 9, u64::MAX, 7, 3] {
        c.put_period(&period(i, i.wrapping_mul(100))).unwrap();
    }
    assert_eq!(period_indexes(&*c, 3), [9, 10, u64::MAX]);
    assert_eq!(period_indexes(&*c, 100), [1, 2, 3, 5, 7, 9, 10, u64::MAX]);
    assert_eq!(period_indexes(&*c, 0), Vec::<u64>::new());
    assert_eq!(
        c.periods(1).unwrap(),
        vec![period(u64::MAX, u64::MAX.wrapping_mul(100))]
    );
    c.trim_periods(100).unwrap();
    assert_eq!(period_indexes(&*c, 100).len(), 8);
    c.trim_periods(3).unwrap();
    assert_eq!(period_indexes(&*c, 100), [9, 10, u64::MAX]);
    // A lower index may still be put after a trim; trim drops it again.
    c.put_period(&period(4, 4)).unwrap();
    assert_eq!(period_indexes(&*c, 100), [4, 9, 10, u64::MAX]);
    c.trim_periods(2).unwrap();
    assert_eq!(period_indexes(&*c, 100), [10, u64::MAX]);
    c.trim_periods(0).unwrap();
    assert!(c.periods(100).unwrap().is_empty());
}

fn corrupt_values_are_errors(store: &mut dyn Store) {
    let c = store.open();
    c.put_ckpt(&ckpt("/good", 1)).unwrap();
    c.put_job(&job("good")).unwrap();
    drop(c);
    let record_elsewhere = serde_json::to_vec(&ckpt("/elsewhere", 1)).unwrap();
    store.write_raw("ckpts", "/bad", b"\xff garbage {");
    store.write_raw("ckpts", "/moved", &record_elsewhere);
    store.write_raw("jobs", "bad", br#"{"id":"bad","period_s":0}"#);
    store.write_raw("periods", "3", b"[]");
    let c = store.open();

    let check = |result: Result<(), CatalogError>, key: &str| {
        let err = result.unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, CatalogError::Corrupt { .. }), "{msg}");
        assert!(msg.contains(&format!("{key:?}")), "key missing: {msg}");
        assert!(
            msg.contains("redb /") || msg.contains("redis redis://"),
            "store missing: {msg}"
        );
    };
    check(c.ckpt("/bad").map(drop), "/bad");
    check(c.ckpt("/moved").map(drop), "/moved");
    check(c.ckpts().map(drop), "/bad");
    check(c.rename_ckpt("/bad", "/x").map(drop), "/bad");
    check(c.job("bad").map(drop), "bad");
    check(c.jobs().map(drop), "bad");
    check(c.periods(10).map(drop), "3");
    // Good records stay readable, and corrupt ones can be overwritten or
    // removed.
    assert_eq!(c.ckpt("/good").unwrap(), Some(ckpt("/good", 1)));
    assert_eq!(c.job("good").unwrap(), Some(job("good")));
    c.put_ckpt(&ckpt("/bad", 2)).unwrap();
    assert!(c.remove_ckpt("/moved").unwrap());
    assert_eq!(c.ckpts().unwrap().len(), 2);
    assert!(c.remove_job("bad").unwrap());
    c.trim_periods(0).unwrap();
    assert!(c.periods(10).unwrap().is_empty());
}

/// Issue 20: jobs registered through one node reach the others; the
/// generation tells a node when to read the jobs again.
fn issue_20_jobs_generation_changes_with_the_jobs(store: &mut dyn Store) {
    let c = store.open();
    let g0 = c.jobs_generation().unwrap();
    c.put_job(&job("a")).unwrap();
    let g1 = c.jobs_generation().unwrap();
    assert_ne!(g0, g1);
    // Another handle on the same store (another node) sees the same.
    c.put_job(&job("b")).unwrap();
    let g2 = c.jobs_generation().unwrap();
    assert_ne!(g1, g2);
    assert!(!c.remove_job("nope").unwrap());
    assert_eq!(c.jobs_generation().unwrap(), g2, "nothing removed");
    assert!(c.remove_job("a").unwrap());
    let g3 = c.jobs_generation().unwrap();
    assert_ne!(g2, g3);
    drop(c);
    store.restart();
    let c = store.open();
    assert_eq!(c.jobs_generation().unwrap(), g3, "kept across a restart");
}

/// Issue 20: one checkpoint of N files is one version.
fn issue_20_join_version_groups_files(store: &mut dyn Store) {
    let c = store.open();
    const W: u64 = 30_000;
    let t = 1_763_000_000_000; // ms since the epoch
                               // Four files per checkpoint: 4 joins, then the fifth opens version 2.
    let got: Vec<u64> = (0..9)
        .map(|i| c.join_version("j", 4, W, t + i).unwrap())
        .collect();
    assert_eq!(got, [1, 1, 1, 1, 2, 2, 2, 2, 3]);
    // A version whose window passed is closed however few files it has;
    // a clock behind the opener's (another node) still joins.
    assert_eq!(c.join_version("j", 4, W, t + 10 - 5_000).unwrap(), 3);
    assert_eq!(c.join_version("j", 4, W, t + 10 + W).unwrap(), 4);
    // One file per checkpoint: every call is a new version.
    assert_eq!(c.join_version("k", 1, W, t).unwrap(), 1);
    assert_eq!(c.join_version("k", 1, W, t).unwrap(), 2);
    // The same counter as next_version: never a version twice.
    assert_eq!(c.next_version("k").unwrap(), 3);
    assert_eq!(c.join_version("k", 4, W, t).unwrap(), 4);
    assert_eq!(c.join_version("k", 4, W, t).unwrap(), 4);
    assert!(c.join_version("", 1, W, t).is_err());
    drop(c);
    store.restart();
    let c = store.open();
    assert_eq!(
        c.join_version("k", 4, W, t).unwrap(),
        4,
        "open version kept"
    );
}

/// Concurrent joiners of one job (ranks on many nodes) get whole groups.
fn issue_20_join_version_is_atomic_across_threads(store: &mut dyn Store) {
    const THREADS: usize = 8;
    const EACH: usize = 10;
    let c: Arc<dyn Catalog> = Arc::from(store.open());
    let handles: Vec<_> = (0..THREADS)
        .map(|_| {
            let c = Arc::clone(&c);
            thread::spawn(move || {
                (0..EACH)
                    .map(|_| c.join_version("job", 8, u64::MAX, 1).unwrap())
                    .collect::<Vec<u64>>()
            })
        })
        .collect();
    let mut count = std::collections::BTreeMap::new();
    for h in handles {
        for v in h.join().unwrap() {
            *count.entry(v).or_insert(0) += 1;
        }
    }
    let want: std::collections::BTreeMap<u64, i32> = (1..=10).map(|v| (v, 8)).collect();
    assert_eq!(count, want, "80 files in groups of 8");
}

macro_rules! suite {
    ($($test:ident),* $(,)?) => {
        mod on_redb {
            $(
                #[test]
                fn $test() {
                    super::$test(&mut super::RedbStore::new());
                }
            )*
        }
        mod on_redis {
            $(
                #[test]
                fn $test() {
                    if let Some(mut store) = super::RedisStore::new() {
                        super::$test(&mut store);
                    }
                }
            )*
        }
    };
}

suite!(
    round_trip_every_type,
    listings_are_sorted,
    puts_replace_and_removes_report,
    invalid_records_are_rejected,
    next_version_persists_across_restart,
    next_version_is_atomic_across_threads,
    rename_moves_and_replaces,
    rename_is_atomic_to_readers,
    periods_are_ordered_and_trimmed,
    corrupt_values_are_errors,
    issue_20_jobs_generation_changes_with_the_jobs,
    issue_20_join_version_groups_files,
    issue_20_join_version_is_atomic_across_threads,
);

/// Issue 20: a store marked with a newer format is refused with a clear
/// message; an unmarked (format 1) one is marked and read.
#[test]
fn issue_20_newer_format_is_refused_older_is_marked() {
    let store = RedbStore::new();
    drop(store.open());
    {
        let db = redb::Database::create(store.path()).unwrap();
        let txn = db.begin_write().unwrap();
        let def: redb::TableDefinition<&str, u64> = redb::TableDefinition::new("meta");
        txn.open_table(def).unwrap().insert("format", 3).unwrap();
        txn.commit().unwrap();
    }
    let spec = MetaSpec::parse(&format!("redb:{}", store.path().display())).unwrap();
    let err = open(&spec).err().expect("format 3 refused").to_string();
    assert!(
        err.contains("format 3") && err.contains("newer sluice"),
        "{err}"
    );
    let Some(server) = RedisServer::start() else {
        return;
    };
    // Format 1: records without node or files, no format mark.
    raw_redis(
        server.port,
        &[
            b"HSET",
            b"old:ckpts",
            b"a/1",
            br#"{"path":"a/1","job":"j","version":1,"bytes":5,"location":"staged","staged_id":1,"created_unix_ns":1}"#,
        ],
    );
    let c = open(&server.spec("old")).unwrap();
    assert!(c.shared());
    assert_eq!(c.ckpt("a/1").unwrap().unwrap().node, None);
    let mark = raw_redis(server.port, &[b"HGET", b"old:meta", b"format"]);
    assert!(matches!(&mark, Raw::Bulk(Some(b)) if b == b"2"), "{mark:?}");
    raw_redis(server.port, &[b"HSET", b"old:meta", b"format", b"3"]);
    let err = open(&server.spec("old")).err().expect("format 3 refused");
    assert!(err.to_string().contains("format 3"), "{err}");
}

// ---------------------------------------------------------------------------
// Redis only

#[test]
fn redis_acknowledged_put_survives_sigkill() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    // The server runs as scripts/redis.sh promises.
    assert!(matches!(raw_redis(server.port, &[b"PING"]), Raw::Line(l) if l == "+PONG"));
    for (name, want) in [
        ("appendonly", "yes"),
        ("appendfsync", "always"),
        ("bind", "127.0.0.1"),
    ] {
        let reply = raw_redis(server.port, &[b"CONFIG", b"GET", name.as_bytes()]);
        let Raw::Array(pair) = &reply else {
            panic!("{reply:?}")
        };
        assert!(
            matches!(&pair[1], Raw::Bulk(Some(v)) if v == want.as_bytes()),
            "{reply:?}"
        );
    }
    let c = open(&server.spec("suite")).unwrap();
    assert_eq!(c.next_version("lammps").unwrap(), 1);
    c.put_job(&job("lammps")).unwrap();
    c.put_ckpt(&ckpt("/ckpt/1", 1)).unwrap();
    assert!(c.rename_ckpt("/ckpt/1", "/ckpt/final").unwrap());
    c.put_period(&period(1, 4096)).unwrap();
    // No SHUTDOWN, no SAVE: only appendfsync always keeps these.
    server.kill9();
    server.start_again();
    let c = open(&server.spec("suite")).unwrap();
    assert_eq!(c.job("lammps").unwrap(), Some(job("lammps")));
    assert_eq!(c.ckpts().unwrap(), vec![ckpt("/ckpt/final", 1)]);
    assert_eq!(c.periods(1).unwrap(), vec![period(1, 4096)]);
    assert_eq!(c.next_version("lammps").unwrap(), 2);
}

#[test]
fn redis_reconnects_after_server_restart() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let c = open(&server.spec("suite")).unwrap();
    c.put_ckpt(&ckpt("/a", 1)).unwrap();
    // Several idle pooled connections, all broken by the restart.
    let c: Arc<dyn Catalog> = Arc::from(c);
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let c = Arc::clone(&c);
            thread::spawn(move || c.next_version("j").unwrap())
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    server.stop();
    server.start_again();
    // The same catalogue object: its first call reconnects.
    assert_eq!(c.ckpt("/a").unwrap(), Some(ckpt("/a", 1)));
    c.put_ckpt(&ckpt("/b", 1)).unwrap();
    assert_eq!(c.next_version("j").unwrap(), 5);
    // Server gone: a clear error naming the URL, soon.
    server.stop();
    let started = Instant::now();
    let err = c.ckpt("/a").unwrap_err().to_string();
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
    let url = format!("redis://127.0.0.1:{}", server.port);
    assert!(err.contains(&url), "{err}");
}

#[test]
fn redis_unreachable_is_a_quick_error_naming_the_url() {
    // A port nothing listens on: bind one, then let it go.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let spec = MetaSpec::parse(&format!("redis://127.0.0.1:{port}")).unwrap();
    let started = Instant::now();
    let err = open(&spec).err().expect("nothing listens there");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
    let msg = err.to_string();
    assert!(matches!(err, CatalogError::RedisConnect { .. }), "{msg}");
    assert!(
        msg.starts_with(&format!("cannot reach Redis at redis://127.0.0.1:{port}: ")),
        "{msg}"
    );
    assert!(msg.contains("refused"), "{msg}");
}

#[test]
fn redis_prefixes_keep_instances_apart() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let one = open(&server.spec("one")).unwrap();
    let two = open(&server.spec("two")).unwrap();
    assert_eq!(
        one.describe(),
        format!("redis redis://127.0.0.1:{} prefix one", server.port)
    );
    one.put_job(&job("a")).unwrap();
    one.put_ckpt(&ckpt("/a", 1)).unwrap();
    one.put_period(&period(1, 1)).unwrap();
    assert_eq!(one.next_version("a").unwrap(), 1);
    assert!(two.jobs().unwrap().is_empty());
    assert!(two.ckpts().unwrap().is_empty());
    assert!(two.periods(10).unwrap().is_empty());
    assert_eq!(two.next_version("a").unwrap(), 1);
    let Raw::Array(keys) = raw_redis(server.port, &[b"KEYS", b"*"]) else {
        panic!()
    };
    let mut keys: Vec<String> = keys
        .into_iter()
        .map(|k| match k {
            Raw::Bulk(Some(k)) => String::from_utf8(k).unwrap(),
            other => panic!("{other:?}"),
        })
        .collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "one:ckpts",
            "one:jobs",
            "one:meta",
            "one:periods",
            "one:versions",
            "two:meta",
            "two:versions"
        ]
    );
}

/// Issue 34: a node's recall doorbell is a list under the prefix; entries
/// come off it oldest first, each once, and one node's doorbell is not
/// another's. redb has none.
#[test]
fn issue_34_recall_doorbells_ring_in_order_and_are_taken_once() {
    let dir = tempfile::tempdir().unwrap();
    let redb = open(&MetaSpec::Redb {
        path: dir.path().join("catalog.redb"),
    })
    .unwrap();
    assert!(!redb.ring_recall("a", "b-0123").unwrap());
    assert!(redb.take_recalls("a", 8).unwrap().is_empty());
    let Some(server) = RedisServer::start() else {
        return;
    };
    let requester = open(&server.spec("nodes")).unwrap();
    let holder = open(&server.spec("nodes")).unwrap();
    assert!(holder.take_recalls("a", 8).unwrap().is_empty());
    for entry in ["b-1", "c-2", "b-3"] {
        assert!(requester.ring_recall("a", entry).unwrap());
    }
    assert!(requester.ring_recall("z", "b-9").unwrap());
    assert_eq!(holder.take_recalls("a", 2).unwrap(), ["b-1", "c-2"]);
    assert_eq!(holder.take_recalls("a", 8).unwrap(), ["b-3"]);
    assert!(holder.take_recalls("a", 8).unwrap().is_empty());
    assert_eq!(holder.take_recalls("z", 8).unwrap(), ["b-9"]);
    let other = open(&server.spec("other")).unwrap();
    requester.ring_recall("a", "b-4").unwrap();
    assert!(other.take_recalls("a", 8).unwrap().is_empty());
}

#[test]
fn redis_corrupt_version_counter_is_an_error() {
    let Some(store) = RedisStore::new() else {
        return;
    };
    store.write_raw("versions", "j", b"three");
    store.write_raw(
        "periods",
        "not-a-number",
        br#"{"index":1,"written_bytes":1}"#,
    );
    let c = store.open();
    let err = c.next_version("j").unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, CatalogError::Corrupt { .. }), "{msg}");
    assert!(
        msg.contains("hash suite:versions") && msg.contains("\"j\""),
        "{msg}"
    );
    let msg = c.periods(1).unwrap_err().to_string();
    assert!(msg.contains("\"not-a-number\""), "{msg}");
    let msg = c.trim_periods(0).unwrap_err().to_string();
    assert!(msg.contains("\"not-a-number\""), "{msg}");
}

#[test]
fn redis_database_number_is_selected() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let spec = MetaSpec::parse(&format!("redis://127.0.0.1:{}/3", server.port)).unwrap();
    let c = open(&spec).unwrap();
    c.put_job(&job("a")).unwrap();
    assert_eq!(
        c.describe(),
        format!("redis redis://127.0.0.1:{}/3 prefix sluice", server.port)
    );
    let db0 = open(&server.spec("sluice")).unwrap();
    assert!(db0.jobs().unwrap().is_empty());
    let bad = MetaSpec::parse(&format!("redis://127.0.0.1:{}/99", server.port)).unwrap();
    let msg = open(&bad).err().unwrap().to_string();
    assert!(msg.contains("SELECT") && msg.contains("/99"), "{msg}");
}

// ---------------------------------------------------------------------------
// redb only

#[test]
fn redb_open_errors_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let missing_dir = dir.path().join("no/such/dir/catalog.redb");
    let msg = open(&MetaSpec::Redb {
        path: missing_dir.clone(),
    })
    .err()
    .unwrap()
    .to_string();
    assert!(msg.contains(&missing_dir.display().to_string()), "{msg}");

    let garbage = dir.path().join("garbage.redb");
    std::fs::write(&garbage, vec![0x5a; 64 * 1024]).unwrap();
    let msg = open(&MetaSpec::Redb {
        path: garbage.clone(),
    })
    .err()
    .unwrap()
    .to_string();
    assert!(
        msg.starts_with(&format!("cannot open redb catalogue {}", garbage.display())),
        "{msg}"
    );

    let good = dir.path().join("catalog.redb");
    let first = open(&MetaSpec::Redb { path: good.clone() }).unwrap();
    let msg = open(&MetaSpec::Redb { path: good.clone() })
        .err()
        .unwrap()
        .to_string();
    assert!(msg.contains(&good.display().to_string()), "{msg}");
    drop(first);
    open(&MetaSpec::Redb { path: good }).unwrap();
}

/// Issue 33: every unlink through the mount removes its path's checkpoint
/// record, and almost none has one; each removal was a durable redb commit
/// (the catalogue file written and synced), so unlinks ran at disk-flush
/// speed. A removal of a path without a record now writes nothing.
#[test]
fn issue_33_removing_a_path_without_a_record_writes_nothing() {
    let store = RedbStore::new();
    let c = store.open();
    c.put_ckpt(&ckpt("ckpt/a", 1)).unwrap();
    let written = |p: &Path| {
        let m = std::fs::metadata(p).unwrap();
        (m.len(), m.modified().unwrap())
    };
    let before = written(&store.path());
    // Coarse file-system clocks: let a commit show in the mtime.
    thread::sleep(Duration::from_millis(20));
    assert!(!c.remove_ckpt("data/not-a-checkpoint").unwrap());
    assert_eq!(
        written(&store.path()),
        before,
        "no commit for a path without a record"
    );
    assert!(c.remove_ckpt("ckpt/a").unwrap());
    assert_ne!(written(&store.path()), before, "a real removal commits");
    assert_eq!(c.ckpt("ckpt/a").unwrap(), None);
}

// ---------------------------------------------------------------------------
// Issue 21: AUTH (password, ACL user) and TLS against a real redis-server

/// A Redis spec of `server` with the given user, password file and TLS.
fn secure_spec(
    server: &RedisServer,
    user: Option<&str>,
    password_file: Option<PathBuf>,
    tls_ca: Option<PathBuf>,
    prefix: &str,
) -> MetaSpec {
    let scheme = if server.flags.contains(&"--tls") {
        "rediss"
    } else {
        "redis"
    };
    let user = user.map_or(String::new(), |u| format!("{u}@"));
    let text = format!("{scheme}://{user}127.0.0.1:{}?prefix={prefix}", server.port);
    let MetaSpec::Redis(mut spec) = MetaSpec::parse(&text).unwrap() else {
        unreachable!()
    };
    spec.password_file = password_file;
    spec.tls_ca = tls_ca;
    MetaSpec::Redis(spec)
}

/// A password file (0600) holding `password`.
fn password_file(dir: &Path, name: &str, password: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, password).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path
}

/// What a refused connection must be: a config error naming the URL and
/// saying so, never an outage.
fn assert_config_error(err: &CatalogError, words: &[&str]) {
    let msg = err.to_string();
    assert!(!err.is_unreachable(), "not an outage: {msg}");
    assert!(
        matches!(
            err,
            CatalogError::RedisAuth { .. } | CatalogError::RedisConfig { .. }
        ),
        "{err:?}"
    );
    assert!(msg.contains("127.0.0.1:"), "names the server: {msg}");
    for word in words {
        assert!(msg.contains(word), "{word:?} missing in: {msg}");
    }
}

#[test]
fn issue_21_redis_auth_with_a_password_and_an_acl_user() {
    let Some(server) = RedisServer::start_with(&["--auth"]) else {
        return;
    };
    let default_pw = server.file("default.password");
    let sluice_pw = server.file("sluice.password");

    // requirepass: the default user with its password.
    let spec = secure_spec(&server, None, Some(default_pw.clone()), None, "sluice");
    spec_check(&spec).unwrap();
    let catalog = open(&spec).unwrap();
    catalog.put_job(&job("a")).unwrap();

    // The ACL user, on the keys its ACL grants (`sluice:*`).
    let acl = open(&secure_spec(
        &server,
        Some("sluice"),
        Some(sluice_pw.clone()),
        None,
        "sluice",
    ))
    .unwrap();
    assert_eq!(acl.job("a").unwrap(), Some(job("a")));
    acl.put_job(&job("b")).unwrap();
    assert_eq!(acl.next_version("b").unwrap(), 1);
    assert!(
        acl.describe().contains("redis://sluice@127.0.0.1:"),
        "{}",
        acl.describe()
    );

    // Wrong password, no password, a user's keys outside its ACL: refused,
    // each a configuration error naming the server and the user.
    let tmp = tempfile::tempdir().unwrap();
    let wrong = password_file(tmp.path(), "wrong", "not-the-password\n");
    let err = open(&secure_spec(
        &server,
        None,
        Some(wrong.clone()),
        None,
        "sluice",
    ))
    .err()
    .unwrap();
    assert_config_error(
        &err,
        &[
            "refused user default",
            "WRONGPASS",
            "configuration error",
            "bbos.redis_password_file",
        ],
    );
    let err = open(&secure_spec(
        &server,
        Some("sluice"),
        Some(wrong),
        None,
        "sluice",
    ))
    .err()
    .unwrap();
    assert_config_error(&err, &["refused user sluice", "WRONGPASS"]);
    let err = open(&secure_spec(&server, None, None, None, "sluice"))
        .err()
        .unwrap();
    assert_config_error(&err, &["refused user default", "NOAUTH"]);
    let err = open(&secure_spec(
        &server,
        Some("sluice"),
        Some(sluice_pw.clone()),
        None,
        "other",
    ))
    .err()
    .unwrap();
    assert_config_error(&err, &["refused user sluice", "NOPERM"]);

    // The client's own settings, refused before any connection.
    let err = open(&secure_spec(&server, Some("sluice"), None, None, "sluice"))
        .err()
        .unwrap();
    assert_config_error(&err, &["needs a password", "bbos.redis_password_file"]);
    let open_to_all = tmp.path().join("open");
    std::fs::copy(&default_pw, &open_to_all).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&open_to_all, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let spec = secure_spec(&server, None, Some(open_to_all.clone()), None, "sluice");
    let err = open(&spec).err().unwrap();
    assert_config_error(
        &err,
        &[
            "bbos.redis_password_file = ",
            "readable by every user",
            "chmod o-r",
        ],
    );
    assert!(matches!(
        spec_check(&spec),
        Err(CatalogError::RedisConfig { .. })
    ));
    let missing = tmp.path().join("missing");
    let err = open(&secure_spec(
        &server,
        None,
        Some(missing.clone()),
        None,
        "sluice",
    ))
    .err()
    .unwrap();
    assert_config_error(
        &err,
        &[
            "bbos.redis_password_file = ",
            "cannot read it",
            &missing.display().to_string(),
        ],
    );
    for (name, text, words) in [
        ("empty", "\n", "empty (the password"),
        ("two-lines", "a\nb\n", "more than one line"),
    ] {
        let file = password_file(tmp.path(), name, text);
        let err = open(&secure_spec(&server, None, Some(file), None, "sluice"))
            .err()
            .unwrap();
        assert_config_error(&err, &[words]);
    }
    let long = password_file(tmp.path(), "long", &"p".repeat(5000));
    let err = open(&secure_spec(&server, None, Some(long), None, "sluice"))
        .err()
        .unwrap();
    assert_config_error(&err, &["longer than 4096 bytes"]);

    // A restart: both catalogues reconnect and authenticate by themselves.
    drop(catalog);
    server.stop();
    server.start_again();
    assert_eq!(acl.next_version("b").unwrap(), 2);
    assert_eq!(acl.jobs().unwrap().len(), 2);
}

/// `RedisSpec::check` of a Redis `MetaSpec`.
fn spec_check(spec: &MetaSpec) -> Result<(), CatalogError> {
    match spec {
        MetaSpec::Redis(redis) => redis.check(),
        MetaSpec::Redb { .. } => unreachable!(),
    }
}

#[test]
fn issue_21_redis_tls_with_the_ca_and_refused_without_it() {
    let Some(server) = RedisServer::start_with(&["--tls", "--auth"]) else {
        return;
    };
    let ca = server.file("tls/ca.crt");
    let pw = server.file("sluice.password");

    let spec = secure_spec(
        &server,
        Some("sluice"),
        Some(pw.clone()),
        Some(ca.clone()),
        "sluice",
    );
    spec_check(&spec).unwrap();
    assert!(
        spec.to_string().starts_with("rediss://sluice@127.0.0.1:"),
        "{spec}"
    );
    let catalog = open(&spec).unwrap();
    catalog.put_job(&job("t")).unwrap();
    assert_eq!(catalog.job("t").unwrap(), Some(job("t")));

    // Without the CA (the system's bundle does not hold the throwaway
    // one): the handshake fails on the certificate, a config error.
    let err = open(&secure_spec(
        &server,
        Some("sluice"),
        Some(pw.clone()),
        None,
        "sluice",
    ))
    .err()
    .unwrap();
    assert_config_error(
        &err,
        &[
            "rediss://sluice@127.0.0.1:",
            "TLS handshake failed",
            "certificate",
            "configuration error",
        ],
    );
    // A CA file that is no CA file.
    let tmp = tempfile::tempdir().unwrap();
    let bogus = tmp.path().join("bogus.pem");
    std::fs::write(&bogus, "not a certificate\n").unwrap();
    let err = open(&secure_spec(
        &server,
        Some("sluice"),
        Some(pw.clone()),
        Some(bogus),
        "sluice",
    ))
    .err()
    .unwrap();
    assert_config_error(&err, &["bbos.redis_tls_ca = ", "holds no PEM certificate"]);
    let missing = tmp.path().join("missing.pem");
    let err = open(&secure_spec(
        &server,
        Some("sluice"),
        Some(pw.clone()),
        Some(missing),
        "sluice",
    ))
    .err()
    .unwrap();
    assert_config_error(&err, &["bbos.redis_tls_ca = ", "cannot read it"]);

    // A CA with a plain redis:// URL is a contradiction, said so.
    let plain = MetaSpec::parse(&format!("redis://127.0.0.1:{}", server.port)).unwrap();
    let MetaSpec::Redis(mut plain) = plain else {
        unreachable!()
    };
    plain.tls_ca = Some(ca.clone());
    let err = open(&MetaSpec::Redis(plain)).err().unwrap();
    assert_config_error(&err, &["write rediss://"]);

    // Reconnects after a restart, TLS and AUTH again.
    server.stop();
    server.start_again();
    assert_eq!(catalog.job("t").unwrap(), Some(job("t")));
}

/// A plain server waits for the rest of what it takes for a command: the
/// handshake times out like a hung server would (an outage, as far as the
/// client can tell), and the message names the likely cause.
#[test]
fn issue_21_rediss_to_a_plain_port_times_out_naming_tls() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let ca = tempfile::tempdir().unwrap();
    // Any readable CA will do: the server never gets to show a certificate.
    let ca_file = ca.path().join("ca.crt");
    let status = Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=x",
        ])
        .arg("-keyout")
        .arg(ca.path().join("ca.key"))
        .arg("-out")
        .arg(&ca_file)
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    let spec = MetaSpec::parse(&format!("rediss://127.0.0.1:{}", server.port)).unwrap();
    let MetaSpec::Redis(mut spec) = spec else {
        unreachable!()
    };
    spec.tls_ca = Some(ca_file);
    let started = Instant::now();
    let err = open(&MetaSpec::Redis(spec)).err().unwrap();
    let msg = err.to_string();
    assert!(matches!(err, CatalogError::RedisConnect { .. }), "{err:?}");
    assert!(msg.contains("rediss://127.0.0.1:"), "{msg}");
    assert!(
        msg.contains("no TLS handshake reply within 5 s (is the port a TLS port?)"),
        "{msg}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );
}

// ---------------------------------------------------------------------------
// Spec parsing

#[test]
fn meta_spec_parse_table() {
    let redis = |host: &str, port: u16, db: u32, prefix: &str| {
        MetaSpec::Redis(RedisSpec {
            db,
            prefix: prefix.into(),
            ..RedisSpec::new(host, port)
        })
    };
    let redb = |p: &str| MetaSpec::Redb {
        path: Path::new(p).into(),
    };
    let good = [
        (
            "redb:/var/lib/sluice/catalog.redb",
            redb("/var/lib/sluice/catalog.redb"),
        ),
        ("redb:relative.redb", redb("relative.redb")),
        ("redb:odd:name", redb("odd:name")),
        ("/abs/catalog.redb", redb("/abs/catalog.redb")),
        ("catalog.redb", redb("catalog.redb")),
        ("./x:y", redb("./x:y")),
        ("a:b", redb("a:b")), // one letter before ':' is no scheme
        (
            "redis://127.0.0.1:6390",
            redis("127.0.0.1", 6390, 0, "sluice"),
        ),
        ("redis://localhost", redis("localhost", 6379, 0, "sluice")),
        ("redis://h:1/", redis("h", 1, 0, "sluice")),
        ("redis://h:65535/15", redis("h", 65535, 15, "sluice")),
        ("redis://h:7?prefix=bb-1.x_y", redis("h", 7, 0, "bb-1.x_y")),
        ("redis://h:7/2?prefix=p", redis("h", 7, 2, "p")),
        ("redis://[::1]:6390", redis("::1", 6390, 0, "sluice")),
        ("redis://[::1]", redis("::1", 6379, 0, "sluice")),
        (
            "redis://redis-0.svc.local:6379",
            redis("redis-0.svc.local", 6379, 0, "sluice"),
        ),
        (
            "rediss://h:6380",
            MetaSpec::Redis(RedisSpec {
                tls: true,
                ..RedisSpec::new("h", 6380)
            }),
        ),
        (
            "rediss://sluice@h:6380/2?prefix=p",
            MetaSpec::Redis(RedisSpec {
                tls: true,
                user: Some("sluice".into()),
                db: 2,
                prefix: "p".into(),
                ..RedisSpec::new("h", 6380)
            }),
        ),
        (
            "redis://a.b-c_d@[::1]:7",
            MetaSpec::Redis(RedisSpec {
                user: Some("a.b-c_d".into()),
                ..RedisSpec::new("::1", 7)
            }),
        ),
    ];
    for (text, want) in good {
        let got = MetaSpec::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(got, want, "{text}");
        // Display is canonical and parses back.
        assert_eq!(
            MetaSpec::parse(&got.to_string()).unwrap(),
            got,
            "{text} -> {got}"
        );
    }
    assert_eq!(
        MetaSpec::parse("redis://h:7/0?prefix=sluice")
            .unwrap()
            .to_string(),
        "redis://h:7"
    );

    let bad = [
        ("", "empty"),
        (" redb:x", "white space"),
        ("redb:", "needs a file path"),
        ("redb://x", "without //"),
        ("rediss:h:6379", "starts with rediss://"),
        ("redis:h:6379", "starts with redis://"),
        ("postgres://h/db", "unsupported scheme \"postgres\""),
        ("sqlite:cat.db", "unsupported scheme \"sqlite\""),
        ("http://h", "unsupported scheme"),
        ("redis://", "missing host"),
        ("redis://:6379", "missing host"),
        ("redis://h:", "bad port"),
        ("redis://h:0", "bad port"),
        ("redis://h:65536", "bad port"),
        ("redis://h:+1", "bad port"),
        ("redis://h:x", "bad port"),
        ("redis://h:1:2", "bad port"),
        ("redis://h:1/x", "database must be a number"),
        ("redis://h:1/-1", "database must be a number"),
        ("redis://h:1/99999999999", "too large"),
        ("redis://h:1/1/2", "database must be a number"),
        ("redis://user:pw@h:1", "password in the URL"),
        ("rediss://:pw@h:1", "password in the URL"),
        ("redis://@h:1", "bad user"),
        ("redis://a b@h:1", "bad user"),
        ("redis://u@v@h:1", "bad user"),
        ("redis://h:1?prefix=", "bad prefix"),
        ("redis://h:1?prefix=a:b", "bad prefix"),
        ("redis://h:1?prefix=a b", "bad prefix"),
        ("redis://h:1?prefix=a&prefix=b", "twice"),
        ("redis://h:1?db=2", "unknown query parameter"),
        ("redis://h:1?prefix", "unknown query parameter"),
        ("redis://h h:1", "bad host"),
        ("redis://[::1:1", "unclosed"),
        ("redis://[zz]:1", "bad IPv6"),
        ("redis://[::1]x", "after the IPv6"),
    ];
    let long_prefix = format!("redis://h:1?prefix={}", "p".repeat(65));
    for (text, want) in bad
        .iter()
        .copied()
        .chain([(long_prefix.as_str(), "bad prefix")])
    {
        let err = MetaSpec::parse(text).expect_err(text);
        let msg = err.to_string();
        assert!(matches!(err, CatalogError::Spec { .. }), "{text}: {msg}");
        assert!(msg.contains(want), "{text}: {msg}");
        assert!(
            msg.contains(&format!("{text:?}")),
            "{text}: spec missing in {msg}"
        );
    }
}

// ---------------------------------------------------------------------------
// A misbehaving server (a thread on 127.0.0.1): each connection gets the
// canned `replies`, one per command, then silence until the client hangs up.

fn fake_redis(replies: &'static [&'static [u8]]) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            thread::spawn(move || {
                let mut buf = [0u8; 4096];
                let mut replies = replies.iter();
                // One read per command is enough for these small commands.
                while matches!(stream.read(&mut buf), Ok(n) if n > 0) {
                    if let Some(reply) = replies.next() {
                        if stream.write_all(reply).is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    port
}

/// The reply to `open`'s `HGET PREFIX:meta format` of a format 2 store.
const FORMAT_2: &[u8] = b"$1\r\n2\r\n";

// Named to sort first: libtest starts tests in name order, and this one
// waits out the 5 s read timeout while the others run.
#[test]
fn hung_redis_times_out_naming_the_url() {
    let port = fake_redis(&[b"+PONG\r\n", FORMAT_2]);
    let c = open(&MetaSpec::parse(&format!("redis://127.0.0.1:{port}")).unwrap()).unwrap();
    let started = Instant::now();
    let msg = c.ckpt("/x").unwrap_err().to_string();
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(4) && took < Duration::from_secs(8),
        "took {took:?}"
    );
    assert_eq!(
        msg,
        format!("Redis at redis://127.0.0.1:{port}: HGET failed: no reply within 5 s")
    );
}

#[test]
fn redis_malformed_replies_are_errors() {
    let cases: [(&'static [&'static [u8]], &str); 4] = [
        (
            &[b"+PONG\r\n", FORMAT_2, b"?what\r\n"],
            "unknown reply type",
        ),
        (
            &[b"+PONG\r\n", FORMAT_2, b"$999999999999\r\n"],
            "exceeds the limit",
        ),
        (
            &[b"+PONG\r\n", FORMAT_2, b":12\r\n"],
            "unexpected reply to HGET",
        ),
        (
            &[b"+PONG\r\n", FORMAT_2, b"-ERR nope\r\n"],
            "refused HGET: ERR nope",
        ),
    ];
    for (replies, want) in cases {
        let port = fake_redis(replies);
        let c = open(&MetaSpec::parse(&format!("redis://127.0.0.1:{port}")).unwrap()).unwrap();
        let msg = c.ckpt("/x").unwrap_err().to_string();
        assert!(msg.contains(want), "{want}: {msg}");
        assert!(msg.contains(&format!("redis://127.0.0.1:{port}")), "{msg}");
    }
    // Not a Redis server at all.
    let port = fake_redis(&[b"HTTP/1.1 400 Bad Request\r\n\r\n"]);
    let err = open(&MetaSpec::parse(&format!("redis://127.0.0.1:{port}")).unwrap()).err();
    assert!(
        matches!(err, Some(CatalogError::RedisProtocol { .. })),
        "{err:?}"
    );
}
