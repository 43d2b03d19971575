//! BBOS through real FUSE mounts with a Redis catalogue (issues 19 and 20):
//! a Redis killed under a mount, and two mounts ("nodes", each with its own
//! fast tier) over one capacity directory and one Redis. `sluice mount`
//! runs as a child process; redis-server is started by `scripts/redis.sh`
//! on 127.0.0.1 and stopped by the pid in its directory.
//!
//! They need /dev/fuse, fusermount3 and redis-server; without them the tests
//! fail under CI=true and are skipped with a message otherwise.

// Tests wait for mounts and processes by wall clock.
#![allow(clippy::disallowed_methods)]

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod support;

use support::wait_mounted;

const SLUICE: &str = env!("CARGO_BIN_EXE_sluice");
const REDIS_SH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/redis.sh");

fn available() -> bool {
    let fuse = Path::new("/dev/fuse").exists()
        && Command::new("fusermount3")
            .arg("-V")
            .output()
            .is_ok_and(|o| o.status.success());
    let redis = Command::new("redis-server")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !(fuse && redis) {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI: FUSE and redis-server are required (scripts/setup.sh installs them)"
        );
        eprintln!("skipped: no /dev/fuse, fusermount3 or redis-server");
    }
    fuse && redis
}

fn redis_sh(args: &[&str]) -> String {
    let out = Command::new("bash")
        .arg(REDIS_SH)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "scripts/redis.sh {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A redis-server in a temp dir, stopped by its pid when dropped.
struct Redis {
    dir: tempfile::TempDir,
    port: u16,
}

impl Redis {
    fn start() -> Redis {
        let dir = tempfile::tempdir().unwrap();
        let port = redis_sh(&["start", dir.path().to_str().unwrap()])
            .trim()
            .parse()
            .unwrap();
        Redis { dir, port }
    }
    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
    /// SIGKILL: an outage, not a shutdown.
    fn kill9(&self) {
        let pid = fs::read_to_string(self.dir.path().join("redis.pid")).unwrap();
        let pid = pid.trim();
        assert!(Command::new("kill")
            .args(["-KILL", pid])
            .status()
            .unwrap()
            .success());
        let deadline = Instant::now() + Duration::from_secs(10);
        while Path::new(&format!("/proc/{pid}/cmdline")).exists()
            && !fs::read_to_string(format!("/proc/{pid}/stat"))
                .unwrap_or_default()
                .contains(") Z")
        {
            assert!(Instant::now() < deadline, "redis-server {pid} survived");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    fn start_again(&self) {
        let port = redis_sh(&[
            "start",
            self.dir.path().to_str().unwrap(),
            &self.port.to_string(),
        ]);
        assert_eq!(port.trim(), self.port.to_string());
    }
    /// `HGET KEY FIELD` through redis-cli.
    fn hget(&self, key: &str, field: &str) -> String {
        let out = Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(["HGET", key, field])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        if self.dir.path().join("redis.pid").exists() {
            let _ = Command::new("bash")
                .arg(REDIS_SH)
                .args(["stop", self.dir.path().to_str().unwrap()])
                .output();
        }
    }
}

/// One node: `sluice mount` over its own fast tier and the shared capacity
/// directory.
struct Node {
    child: Option<Child>,
    root: PathBuf,
    capacity: PathBuf,
    config: PathBuf,
    meta: String,
}

impl Node {
    fn mount(root: &Path, capacity: &Path, meta: &str, bbos: &str) -> Node {
        for d in ["fast", "mnt"] {
            fs::create_dir_all(root.join(d)).unwrap();
        }
        let config = root.join("sluice.toml");
        fs::write(&config, format!("[bbos]\n{bbos}")).unwrap();
        let mut node = Node {
            child: None,
            root: root.to_path_buf(),
            capacity: capacity.to_path_buf(),
            config,
            meta: meta.to_owned(),
        };
        node.start();
        node
    }
    fn point(&self) -> PathBuf {
        self.root.join("mnt")
    }
    fn path(&self, name: &str) -> PathBuf {
        self.point().join(name)
    }
    fn log(&self) -> String {
        fs::read_to_string(self.root.join("mount.log")).unwrap_or_default()
    }
    fn start(&mut self) {
        let log = File::create(self.root.join("mount.log")).unwrap();
        let child = Command::new(SLUICE)
            .arg("mount")
            .arg("--fast")
            .arg(self.root.join("fast"))
            .arg("--capacity")
            .arg(&self.capacity)
            .arg("--config")
            .arg(&self.config)
            .args(["--meta", &self.meta])
            .arg(self.point())
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let mut child = child;
        wait_mounted(&mut child, &self.point(), || self.log());
        self.child = Some(child);
    }
    fn sluice(&self, args: &[&str]) -> String {
        let out = Command::new(SLUICE).args(args).output().unwrap();
        assert!(
            out.status.success(),
            "sluice {args:?}: {}{}",
            String::from_utf8_lossy(&out.stderr),
            self.log()
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
    fn unmount(&mut self) {
        let point = self.point().display().to_string();
        self.sluice(&["unmount", &point]);
        let status = self.child.take().unwrap().wait().unwrap();
        assert!(status.success(), "mount process: {status}: {}", self.log());
    }
    fn status(&self) -> String {
        self.sluice(&["status", self.point().to_str().unwrap()])
    }
    /// Staged copies on this node's fast tier.
    fn staged(&self) -> usize {
        fs::read_dir(self.root.join("fast/ckpt"))
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().ends_with(".data"))
            .count()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
            let _ = Command::new("fusermount3")
                .args(["-u", "-z"])
                .arg(self.point())
                .status();
        }
    }
}

fn data(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(13) ^ seed)
        .collect()
}

fn write_synced(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut f = File::create(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}

fn register(node: &Node, files: &str) {
    let point = node.point().display().to_string();
    node.sluice(&[
        "ckpt", "register", "--mount", &point, "--id", "sim", "--period", "10min", "--size",
        "1MiB", "--nodes", "4", "--glob", "ckpt/*", "--files", files,
    ]);
}

/// Issue 19: "When Redis dies, a new checkpoint create gets EIO, and the
/// catalogue error counter stays 0."
#[test]
fn issue_19_redis_killed_a_checkpoint_create_through_the_mount_succeeds() {
    if !available() {
        return;
    }
    let redis = Redis::start();
    let tmp = support::tempdir();
    let capacity = tmp.path().join("capacity");
    fs::create_dir_all(capacity.join("ckpt")).unwrap();
    let mut a = Node::mount(
        &tmp.path().join("a"),
        &capacity,
        &redis.url(),
        "capacity = \"64MiB\"\n",
    );
    register(&a, "1");
    write_synced(&a.path("ckpt/1"), &data(1, 300_000)).unwrap();
    assert_eq!(a.staged(), 1);

    redis.kill9();
    write_synced(&a.path("ckpt/2"), &data(2, 300_000)).expect("create while Redis is down");
    assert_eq!(fs::read(a.path("ckpt/2")).unwrap(), data(2, 300_000));
    assert_eq!(fs::read(capacity.join("ckpt/2")).unwrap(), data(2, 300_000));
    assert_eq!(fs::read(a.path("ckpt/1")).unwrap(), data(1, 300_000));
    assert_eq!(a.staged(), 1, "the fallback is not staged");
    let status = a.status();
    assert!(status.contains("1 without catalogue"), "{status}");
    assert!(
        status.contains("redis://127.0.0.1"),
        "cause shown: {status}"
    );

    redis.start_again();
    std::thread::sleep(Duration::from_millis(1200));
    write_synced(&a.path("ckpt/3"), &data(3, 300_000)).unwrap();
    assert_eq!(a.staged(), 2, "staged again once Redis is back");
    a.unmount();
    for (name, seed) in [("ckpt/1", 1u8), ("ckpt/2", 2), ("ckpt/3", 3)] {
        assert!(
            fs::read(capacity.join(name)).unwrap() == data(seed, 300_000),
            "{name} on the capacity tier after the drain"
        );
    }
}

/// Issue 20, "the shared catalogue is corrupted by a second node", through
/// two mounts: B's remount leaves A's staged records alone, a job
/// registered on A reaches B, N rank files are one version, and a restart
/// read on B of A's undemoted file fails with EAGAIN instead of a short
/// file.
#[test]
fn issue_20_two_mounts_share_one_catalogue_without_harm() {
    if !available() {
        return;
    }
    let redis = Redis::start();
    let tmp = support::tempdir();
    let capacity = tmp.path().join("capacity");
    fs::create_dir_all(capacity.join("ckpt")).unwrap();
    let bbos = "capacity = \"64MiB\"\nremote_wait = \"300ms\"\njobs_refresh = \"100ms\"\n";
    // A demotes at 1 KiB/s: its copies stay staged for the test's length.
    let slow = format!(
        "{bbos}chunk = \"4KiB\"\ndemote_max = \"1KiB\"\ndemote_min = \"0\"\nidle_demote = \"1KiB\"\n"
    );
    let a = Node::mount(&tmp.path().join("a"), &capacity, &redis.url(), &slow);
    let mut b = Node::mount(&tmp.path().join("b"), &capacity, &redis.url(), bbos);
    register(&a, "2");
    // B picks the job up without a remount.
    std::thread::sleep(Duration::from_millis(300));
    write_synced(&a.path("ckpt/r0"), &data(0, 200_000)).unwrap();
    write_synced(&b.path("ckpt/r1"), &data(1, 200_000)).unwrap();
    assert_eq!(
        (a.staged(), b.staged()),
        (1, 1),
        "each node stages its rank"
    );
    for rank in ["ckpt/r0", "ckpt/r1"] {
        let rec = redis.hget("sluice:ckpts", rank);
        assert!(rec.contains("\"version\":1,"), "one version: {rec}");
    }
    // B remounts: A's staged record stays staged.
    b.unmount();
    b.start();
    let rec = redis.hget("sluice:ckpts", "ckpt/r0");
    assert!(rec.contains("\"location\":\"staged\""), "{rec}");
    // A restart read on B of A's staged copy: EAGAIN, not 0 bytes.
    let err = fs::read(b.path("ckpt/r0")).expect_err("A has not demoted it");
    assert_eq!(err.raw_os_error(), Some(11), "EAGAIN: {err}");
}

/// Issue 19, "a catalogue outage falls back": with Redis down at mount
/// time the mount failed. It mounts with BBOS off (checkpoint files are
/// ordinary files, status says why), unless this node's fast tier holds
/// staged copies only BBOS can serve: then it refuses, saying so.
#[test]
fn issue_19_redis_down_at_mount_mounts_without_bbos_unless_copies_are_staged() {
    if !available() {
        return;
    }
    let redis = Redis::start();
    let tmp = support::tempdir();
    let capacity = tmp.path().join("capacity");
    fs::create_dir_all(capacity.join("ckpt")).unwrap();
    redis.kill9();
    let mut a = Node::mount(
        &tmp.path().join("a"),
        &capacity,
        &redis.url(),
        "capacity = \"64MiB\"\n",
    );
    write_synced(&a.path("ckpt/1"), &data(1, 300_000)).expect("a write with the catalogue down");
    assert_eq!(fs::read(a.path("ckpt/1")).unwrap(), data(1, 300_000));
    let status = a.status();
    assert!(status.contains("BBOS off until the next mount"), "{status}");
    a.unmount();
    assert_eq!(fs::read(capacity.join("ckpt/1")).unwrap(), data(1, 300_000));

    // A node with a staged copy: refused while the catalogue is down.
    redis.start_again();
    let b_root = tmp.path().join("b");
    let mut b = Node::mount(&b_root, &capacity, &redis.url(), "capacity = \"64MiB\"\n");
    register(&b, "1");
    write_synced(&b.path("ckpt/2"), &data(2, 300_000)).unwrap();
    assert_eq!(b.staged(), 1);
    let point = b.point().display().to_string();
    b.sluice(&["unmount", &point, "--keep"]);
    let _ = b.child.take().unwrap().wait();
    redis.kill9();
    let out = Command::new(SLUICE)
        .arg("mount")
        .arg("--fast")
        .arg(b_root.join("fast"))
        .arg("--capacity")
        .arg(&capacity)
        .arg("--config")
        .arg(&b.config)
        .args(["--meta", &redis.url()])
        .arg(b.point())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("checkpoint copies"), "{stderr}");
}

/// Issue 20, "for checkpoints, fsync that means on the PFS": with
/// `bbos.consistency = "close-to-open"` an fsync of a staged checkpoint
/// puts its bytes on the capacity tier before it returns (the copy stays
/// on the fast tier as a cached copy), so another node reads it whole at
/// once, even while this node demotes at 1 KiB/s.
#[test]
fn issue_20_checkpoint_fsync_under_close_to_open_puts_the_bytes_on_the_pfs() {
    if !available() {
        return;
    }
    let redis = Redis::start();
    let tmp = support::tempdir();
    let capacity = tmp.path().join("capacity");
    fs::create_dir_all(capacity.join("ckpt")).unwrap();
    let bbos = "capacity = \"64MiB\"\nconsistency = \"close-to-open\"\nidle_demote = \"1KiB\"\n\
                demote_min = \"1KiB\"\ndemote_max = \"1KiB\"\njobs_refresh = \"100ms\"\n\
                remote_wait = \"300ms\"\n";
    let mut a = Node::mount(&tmp.path().join("a"), &capacity, &redis.url(), bbos);
    let mut b = Node::mount(&tmp.path().join("b"), &capacity, &redis.url(), bbos);
    register(&a, "1");
    let mut f = File::create(a.path("ckpt/1")).unwrap();
    f.write_all(&data(7, 300_000)).unwrap();
    f.sync_all().unwrap();
    assert!(
        fs::read(capacity.join("ckpt/1")).unwrap() == data(7, 300_000),
        "on the capacity tier when fsync returned"
    );
    assert_eq!(
        a.staged(),
        1,
        "the copy stays on the fast tier for restarts"
    );
    drop(f);
    // B knows the job by now: its stager reads the catalogue's record,
    // which says the capacity tier holds the checkpoint (no wait, no
    // EAGAIN as for a copy only staged on A).
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        fs::read(b.path("ckpt/1")).unwrap() == data(7, 300_000),
        "node B reads it whole"
    );
    b.unmount();
    a.unmount();
}
