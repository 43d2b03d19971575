//! Many nodes over one parallel file system (issue 20): two or three real
//! `sluice mount` processes, each with its own fast tier, all over ONE
//! shared capacity directory, as sluice runs on every compute node in
//! front of one PFS. Each test is a scenario of the issue's "What was
//! measured", named `issue_20_*` after it.
//!
//! The shared capacity tier is a plain directory here (one kernel
//! arbitrates, as a coherent PFS would); the project's loopback GlusterFS
//! (`scripts/gluster.sh`) can stand in for it with `SLUICE_MULTINODE_
//! CAPACITY=/mnt/gluster-volume/dir` (each test makes its own directory
//! under it).
//!
//! They need /dev/fuse and fusermount3, as `mount_e2e.rs` does: without
//! them the tests fail under CI=true and are skipped with a message
//! otherwise.

// Tests wait for mounts and processes by wall clock.
#![allow(clippy::disallowed_methods)]

use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

mod support;

use support::{fuse_available, held_mark, is_mounted, kill_mount, required, wait_mounted};

use nix::fcntl::{fcntl, FcntlArg};
use nix::libc;

/// The `sluice` under test: this build's, or `SLUICE_MULTINODE_BIN` (to
/// run the scenarios against another build, such as the one before a
/// fix).
fn sluice_bin() -> String {
    std::env::var("SLUICE_MULTINODE_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_sluice").into())
}

/// One node: a `sluice mount` child with its own fast tier and mount
/// point, over the cluster's shared capacity directory.
struct Node {
    child: Option<Child>,
    dir: PathBuf,
    point: PathBuf,
}

impl Node {
    fn path(&self, name: &str) -> PathBuf {
        self.point.join(name)
    }

    fn log(&self) -> String {
        fs::read_to_string(self.dir.join("mount.log")).unwrap_or_default()
    }

    fn sluice(&self, args: &[&str]) -> std::process::Output {
        Command::new(sluice_bin()).args(args).output().unwrap()
    }

    fn drain(&self) {
        let out = self.sluice(&["drain", self.point.to_str().unwrap()]);
        assert!(
            out.status.success(),
            "sluice drain: {}{}",
            String::from_utf8_lossy(&out.stderr),
            self.log()
        );
    }
}

impl Node {
    /// Mount this node (`sluice mount` with its config and fast tier over
    /// `capacity`, and `args`), and wait until the mount is up.
    fn start(&mut self, capacity: &std::path::Path, args: &[&str]) {
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("mount.log"))
            .unwrap();
        let mut child = Command::new(sluice_bin())
            .arg("mount")
            .arg("--config")
            .arg(self.dir.join("sluice.toml"))
            .arg("--fast")
            .arg(self.dir.join("fast"))
            .arg("--capacity")
            .arg(capacity)
            .args(args)
            .arg(&self.point)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let node_log = self.dir.join("mount.log");
        wait_mounted(&mut child, &self.point, || {
            format!(
                "{}: {}",
                self.dir.display(),
                std::fs::read_to_string(&node_log).unwrap_or_default()
            )
        });
        self.child = Some(child);
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        kill_mount(self.child.take(), &self.point);
    }
}

/// A mergerfs mount over one directory (`-o use_ino,xattr=nosys`): a
/// shared capacity tier that keeps no user xattrs (every xattr call is
/// ENOTSUP), whose inode numbers are the file's (`use_ino`). Unmounted
/// when dropped, after the nodes over it.
struct MergerFs {
    child: Option<Child>,
    point: PathBuf,
}

impl MergerFs {
    /// mergerfs over `branch` at `point` with [`MergerFs::OPTIONS`];
    /// `None` (a skip; a failure under CI) where mergerfs is not installed.
    fn start(branch: &std::path::Path, point: &std::path::Path) -> Option<MergerFs> {
        MergerFs::start_with(branch, point, MergerFs::OPTIONS)
    }

    const OPTIONS: &str = "use_ino,xattr=nosys,minfreespace=0,cache.files=off,category.create=ff";

    fn start_with(
        branch: &std::path::Path,
        point: &std::path::Path,
        options: &str,
    ) -> Option<MergerFs> {
        let installed = Command::new("mergerfs")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        if !required(installed, "mergerfs (apt-get install mergerfs)") {
            return None;
        }
        fs::create_dir_all(branch).unwrap();
        fs::create_dir_all(point).unwrap();
        let mut child = Command::new("mergerfs")
            .arg("-f")
            .args(["-o", options])
            .arg(branch)
            .arg(point)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let up = within(Duration::from_secs(10), || {
            is_mounted(point) || child.try_wait().unwrap().is_some()
        });
        assert!(
            up.is_some() && is_mounted(point),
            "mergerfs did not mount {point:?}"
        );
        Some(MergerFs {
            child: Some(child),
            point: point.to_path_buf(),
        })
    }
}

impl Drop for MergerFs {
    fn drop(&mut self) {
        let unmounted = Command::new("fusermount3")
            .arg("-u")
            .arg(&self.point)
            .status()
            .is_ok_and(|s| s.success());
        if !unmounted {
            kill_mount(self.child.take(), &self.point);
        }
        if let Some(mut child) = self.child.take() {
            let _ = child.wait();
        }
    }
}

/// Nodes over one shared capacity directory.
struct Cluster {
    nodes: Vec<Node>,
    capacity: PathBuf,
    /// The mount arguments every node was started with.
    args: Vec<String>,
    /// A file system mounted for the capacity tier, if any (after the
    /// nodes, so it is unmounted once they are).
    _tier: Option<MergerFs>,
    _dir: tempfile::TempDir,
}

impl Cluster {
    /// `n` nodes, each mounted with `config` (TOML) and `args`.
    fn new(n: usize, config: &str, args: &[&str]) -> Cluster {
        let dir = support::tempdir();
        let capacity = match std::env::var_os("SLUICE_MULTINODE_CAPACITY") {
            Some(root) => {
                let unique = dir.path().file_name().unwrap().to_owned();
                let c = PathBuf::from(root).join(unique);
                fs::create_dir_all(&c).unwrap();
                c
            }
            None => dir.path().join("capacity"),
        };
        Cluster::start(dir, capacity, None, n, config, args)
    }

    /// [`Cluster::new`] over a mergerfs mount that keeps no user xattrs
    /// ([`MergerFs`]); `None` without mergerfs.
    fn over_mergerfs(n: usize, config: &str, args: &[&str]) -> Option<Cluster> {
        let dir = support::tempdir();
        let capacity = dir.path().join("merged");
        let tier = MergerFs::start(&dir.path().join("branch"), &capacity)?;
        Some(Cluster::start(dir, capacity, Some(tier), n, config, args))
    }

    fn start(
        dir: tempfile::TempDir,
        capacity: PathBuf,
        tier: Option<MergerFs>,
        n: usize,
        config: &str,
        args: &[&str],
    ) -> Cluster {
        fs::create_dir_all(&capacity).unwrap();
        let mut nodes = Vec::new();
        for i in 0..n {
            let node_dir = dir.path().join(format!("node{i}"));
            let (fast, point) = (node_dir.join("fast"), node_dir.join("mnt"));
            fs::create_dir_all(&fast).unwrap();
            fs::create_dir_all(&point).unwrap();
            fs::write(node_dir.join("sluice.toml"), config).unwrap();
            let mut node = Node {
                child: None,
                dir: node_dir,
                point,
            };
            node.start(&capacity, args);
            nodes.push(node);
        }
        Cluster {
            nodes,
            capacity,
            args: args.iter().map(|a| a.to_string()).collect(),
            _tier: tier,
            _dir: dir,
        }
    }

    /// Mount node `i` again over its fast tier (after it was killed):
    /// its recovery runs as after a crash.
    fn restart(&mut self, i: usize) {
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        self.nodes[i].start(&self.capacity, &args);
    }

    fn capacity_file(&self, name: &str) -> PathBuf {
        self.capacity.join(name)
    }
}

/// Everything goes to the log, so nothing reaches the capacity tier by the
/// write itself: what other nodes see is what the consistency mode put
/// there. The age flush is far away unless a test says otherwise.
const BUFFERED: &str = "[policy]\nname = \"fast-all\"\n[flush]\nage = \"10min\"\n";

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// Poll `what` until it holds, at most `limit`; the time it took.
fn within(limit: Duration, mut what: impl FnMut() -> bool) -> Option<Duration> {
    let start = Instant::now();
    loop {
        if what() {
            return Some(start.elapsed());
        }
        if start.elapsed() > limit {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Issue 20, "buffered data never reaches the PFS by itself": with
/// fast-all, another node saw nothing after write, fsync, close or 60 s
/// idle. Under `close-to-open` (the default) the close puts the bytes on
/// the capacity tier before it returns: a second and a third node read all
/// of them at once, and the capacity file holds them.
#[test]
fn issue_20_close_to_open_close_makes_the_bytes_visible_to_other_nodes() {
    if !fuse_available() {
        return;
    }
    let c = Cluster::new(3, BUFFERED, &[]);
    let (a, b, third) = (&c.nodes[0], &c.nodes[1], &c.nodes[2]);
    let data = pattern(3 << 20, 7);
    let mut f = File::create(a.path("out")).unwrap();
    f.write_all(&data).unwrap();
    drop(f);
    assert_eq!(
        fs::read(c.capacity_file("out")).unwrap().len(),
        data.len(),
        "the close put every byte on the capacity tier"
    );
    for node in [b, third] {
        let seen = fs::read(node.path("out")).unwrap();
        assert_eq!(seen.len(), data.len(), "another node's size");
        assert!(seen == data, "another node's bytes");
    }
}

/// Issue 20: fsync through one node put nothing on the PFS. Under
/// `close-to-open` it does, while the writer still holds the file open.
#[test]
fn issue_20_close_to_open_fsync_makes_the_bytes_visible_to_other_nodes() {
    if !fuse_available() {
        return;
    }
    let c = Cluster::new(2, BUFFERED, &[]);
    let (a, b) = (&c.nodes[0], &c.nodes[1]);
    let data = pattern(1 << 20, 3);
    let mut f = File::create(a.path("ckpt")).unwrap();
    f.write_all(&data).unwrap();
    f.sync_all().unwrap();
    assert!(
        fs::read(b.path("ckpt")).unwrap() == data,
        "another node reads every fsynced byte while the writer holds the file open"
    );
    drop(f);
}

/// `node-local`: today's behaviour, bounded by the age flush. A close puts
/// nothing on the capacity tier, and the bytes reach it (and the other
/// node) once `flush.age` has passed.
#[test]
fn issue_20_node_local_is_bounded_by_the_age_flush() {
    if !fuse_available() {
        return;
    }
    let config = "[policy]\nname = \"fast-all\"\n[flush]\nage = \"2s\"\nidle = \"0s\"\n\
                  [mount]\nconsistency = \"node-local\"\n";
    let c = Cluster::new(2, config, &[]);
    let (a, b) = (&c.nodes[0], &c.nodes[1]);
    let data = pattern(256 << 10, 9);
    let mut f = File::create(a.path("slow")).unwrap();
    f.write_all(&data).unwrap();
    f.sync_all().unwrap();
    drop(f);
    assert_eq!(
        fs::metadata(c.capacity_file("slow")).unwrap().len(),
        0,
        "node-local: close and fsync leave the bytes on this node"
    );
    let took = within(Duration::from_secs(15), || {
        fs::read(b.path("slow")).is_ok_and(|seen| seen == data)
    });
    assert!(took.is_some(), "not on the other node after 15 s");
    eprintln!("node-local: visible on the other node after {took:?} (flush.age 2s)");
}

/// Issue 20, "sizes freeze": while a process on B held a file open, B kept
/// the size from that first open (stat and new opens returned it after A
/// had written and drained; an open descriptor read 4 of 8 MiB after A
/// appended). Now B sees the growth, through its open descriptor at once
/// and through stat within the attribute timeout, and a shrink by A's
/// truncate too.
#[test]
fn issue_20_sizes_froze_while_another_node_held_the_file_open() {
    if !fuse_available() {
        return;
    }
    let c = Cluster::new(2, BUFFERED, &[]);
    let (a, b) = (&c.nodes[0], &c.nodes[1]);
    let first = pattern(4 << 20, 1);
    fs::write(a.path("grow"), &first).unwrap();
    // B holds the file open from here on.
    let mut held = File::open(b.path("grow")).unwrap();
    let mut seen = Vec::new();
    held.read_to_end(&mut seen).unwrap();
    assert_eq!(seen.len(), first.len());
    // A appends 4 MiB and closes.
    let second = pattern(4 << 20, 2);
    let mut f = OpenOptions::new()
        .append(true)
        .open(a.path("grow"))
        .unwrap();
    f.write_all(&second).unwrap();
    drop(f);
    // The open descriptor reads on past its first size.
    let mut rest = Vec::new();
    held.read_to_end(&mut rest).unwrap();
    assert_eq!(
        rest.len(),
        second.len(),
        "the open descriptor read the append"
    );
    assert!(rest == second);
    // stat and a new open see 8 MiB (within the 1 s attribute timeout).
    let took = within(Duration::from_secs(3), || {
        fs::metadata(b.path("grow")).is_ok_and(|m| m.len() == 8 << 20)
    });
    assert!(
        took.is_some(),
        "stat on B: {:?}",
        fs::metadata(b.path("grow")).map(|m| m.len())
    );
    assert_eq!(fs::read(b.path("grow")).unwrap().len(), 8 << 20);
    // A truncates it to 1 MiB: B's stat and reads shrink with it.
    File::options()
        .write(true)
        .open(a.path("grow"))
        .unwrap()
        .set_len(1 << 20)
        .unwrap();
    let took = within(Duration::from_secs(3), || {
        fs::metadata(b.path("grow")).is_ok_and(|m| m.len() == 1 << 20)
    });
    assert!(
        took.is_some(),
        "stat on B after A's truncate: {:?}",
        fs::metadata(b.path("grow")).map(|m| m.len())
    );
    assert_eq!(fs::read(b.path("grow")).unwrap(), first[..1 << 20]);
    drop(held);
}

/// Issue 20, "creates race": in 40 rounds of A and B each calling
/// `open(O_CREAT|O_WRONLY)` (no `O_EXCL`) on the same new name at once,
/// 19–36 opens failed with EEXIST (plain Gluster clients: 0). Now none
/// does; with `O_EXCL` exactly one of the two wins each round.
#[test]
fn issue_20_create_race_without_o_excl_opens_the_existing_file() {
    if !fuse_available() {
        return;
    }
    let c = Cluster::new(2, BUFFERED, &[]);
    let points: Vec<PathBuf> = c.nodes.iter().map(|n| n.point.clone()).collect();
    let mut failures = Vec::new();
    let mut exclusive_wins = Vec::new();
    for round in 0..40 {
        for exclusive in [false, true] {
            let name = format!("race-{round}-{exclusive}");
            let barrier = Arc::new(Barrier::new(2));
            let results: Vec<std::io::Result<File>> = std::thread::scope(|s| {
                let handles: Vec<_> = points
                    .iter()
                    .map(|p| {
                        let (path, barrier) = (p.join(&name), Arc::clone(&barrier));
                        s.spawn(move || {
                            barrier.wait();
                            let mut o = OpenOptions::new();
                            o.write(true);
                            if exclusive {
                                o.create_new(true);
                            } else {
                                o.create(true);
                            }
                            o.open(path)
                        })
                    })
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            });
            if exclusive {
                let wins = results.iter().filter(|r| r.is_ok()).count();
                for r in &results {
                    if let Err(e) = r {
                        assert_eq!(e.kind(), ErrorKind::AlreadyExists, "{name}: {e}");
                    }
                }
                exclusive_wins.push(wins);
            } else {
                for r in results {
                    if let Err(e) = r {
                        failures.push(format!("{name}: {e}"));
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "opens failed: {failures:?}");
    assert!(
        exclusive_wins.iter().all(|&w| w == 1),
        "O_EXCL: one winner per round: {exclusive_wins:?}"
    );
}

/// `fcntl(F_SETLK)` on the whole file or a range: Ok, or the errno.
fn setlk(f: &File, typ: i32, start: i64, len: i64) -> Result<(), nix::errno::Errno> {
    let lock = libc::flock {
        l_type: typ as libc::c_short,
        l_whence: libc::SEEK_SET as libc::c_short,
        l_start: start,
        l_len: len,
        l_pid: 0,
    };
    fcntl(f.as_fd(), FcntlArg::F_SETLK(&lock)).map(drop)
}

/// `fcntl(F_GETLK)`: the type of the conflicting lock (`F_UNLCK`: none).
fn getlk(f: &File, typ: i32, start: i64, len: i64) -> i32 {
    let mut lock = libc::flock {
        l_type: typ as libc::c_short,
        l_whence: libc::SEEK_SET as libc::c_short,
        l_start: start,
        l_len: len,
        l_pid: 0,
    };
    fcntl(f.as_fd(), FcntlArg::F_GETLK(&mut lock)).unwrap();
    i32::from(lock.l_type)
}

fn is_conflict(e: nix::errno::Errno) -> bool {
    matches!(e, nix::errno::Errno::EAGAIN | nix::errno::Errno::EACCES)
}

/// Issue 20, "locks are node-local": an `fcntl` lock taken through A did
/// not stop B from taking the same lock (plain Gluster: EAGAIN). Now the
/// capacity tier arbitrates: B gets EAGAIN, F_GETLK through B reports A's
/// lock, disjoint ranges coexist, and once A unlocks (its buffered bytes
/// reach the capacity tier before the unlock returns, in either
/// consistency mode) B gets the lock and reads A's bytes. A close drops
/// the closer's locks (POSIX), and a blocking F_SETLKW on B returns once
/// A lets go.
#[test]
fn issue_20_fcntl_locks_are_arbitrated_by_the_capacity_tier() {
    if !fuse_available() {
        return;
    }
    // node-local: the unlock, not the close, must put the bytes there.
    let config = format!("{BUFFERED}[mount]\nconsistency = \"node-local\"\n");
    let c = Cluster::new(2, &config, &[]);
    let (a, b) = (&c.nodes[0], &c.nodes[1]);
    fs::write(a.path("shared"), pattern(64 << 10, 0)).unwrap();
    let fa = File::options()
        .read(true)
        .write(true)
        .open(a.path("shared"))
        .unwrap();
    let fb = File::options()
        .read(true)
        .write(true)
        .open(b.path("shared"))
        .unwrap();
    setlk(&fa, libc::F_WRLCK, 0, 4096).unwrap();
    let e = setlk(&fb, libc::F_WRLCK, 0, 4096).unwrap_err();
    assert!(is_conflict(e), "B's lock of A's range: {e}");
    assert_eq!(
        getlk(&fb, libc::F_WRLCK, 0, 0),
        libc::F_WRLCK,
        "F_GETLK sees A's lock"
    );
    assert_eq!(getlk(&fb, libc::F_WRLCK, 8192, 4096), libc::F_UNLCK);
    setlk(&fb, libc::F_WRLCK, 8192, 4096).expect("a disjoint range");
    // A writes under its lock (buffered: fast-all), then unlocks.
    let mine = pattern(4096, 42);
    fa.write_all_at(&mine, 0).unwrap();
    setlk(&fa, libc::F_UNLCK, 0, 4096).unwrap();
    assert_eq!(
        fs::read(c.capacity_file("shared")).unwrap()[..4096],
        mine[..],
        "the unlock put A's bytes on the capacity tier"
    );
    setlk(&fb, libc::F_WRLCK, 0, 4096).expect("B's lock after A's unlock");
    let mut seen = vec![0u8; 4096];
    fb.read_exact_at(&mut seen, 0).unwrap();
    assert_eq!(seen, mine, "B reads what A wrote under the lock");
    setlk(&fb, libc::F_UNLCK, 0, 0).unwrap();
    // A close drops the closer's locks.
    setlk(&fa, libc::F_WRLCK, 0, 0).unwrap();
    assert!(setlk(&fb, libc::F_RDLCK, 100, 1).is_err_and(is_conflict));
    drop(fa);
    setlk(&fb, libc::F_RDLCK, 100, 1).expect("A's close dropped its lock");
    setlk(&fb, libc::F_UNLCK, 0, 0).unwrap();
    // F_SETLKW through B waits for A.
    let fa = File::options()
        .read(true)
        .write(true)
        .open(a.path("shared"))
        .unwrap();
    setlk(&fa, libc::F_WRLCK, 0, 0).unwrap();
    let waiter = std::thread::spawn(move || {
        let lock = libc::flock {
            l_type: libc::F_WRLCK as libc::c_short,
            l_whence: libc::SEEK_SET as libc::c_short,
            l_start: 0,
            l_len: 0,
            l_pid: 0,
        };
        let started = Instant::now();
        fcntl(fb.as_fd(), FcntlArg::F_SETLKW(&lock)).unwrap();
        started.elapsed()
    });
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        !waiter.is_finished(),
        "F_SETLKW returned while A held the lock"
    );
    setlk(&fa, libc::F_UNLCK, 0, 0).unwrap();
    let waited = waiter.join().unwrap();
    assert!(waited >= Duration::from_millis(400), "waited {waited:?}");
}

/// The same for `flock`: an exclusive flock through A makes B's
/// non-blocking flock fail with EWOULDBLOCK, until A's close.
#[test]
fn issue_20_flock_locks_are_arbitrated_by_the_capacity_tier() {
    if !fuse_available() {
        return;
    }
    use rustix::fs::{flock, FlockOperation};
    let c = Cluster::new(2, BUFFERED, &[]);
    let (a, b) = (&c.nodes[0], &c.nodes[1]);
    fs::write(a.path("f"), b"x").unwrap();
    let fa = File::open(a.path("f")).unwrap();
    let fb = File::open(b.path("f")).unwrap();
    flock(&fa, FlockOperation::NonBlockingLockExclusive).unwrap();
    let e = flock(&fb, FlockOperation::NonBlockingLockShared).unwrap_err();
    assert_eq!(
        e,
        rustix::io::Errno::WOULDBLOCK,
        "B's flock while A holds one"
    );
    flock(&fa, FlockOperation::NonBlockingUnlock).unwrap();
    flock(&fb, FlockOperation::NonBlockingLockShared).expect("after A's unlock");
    flock(&fa, FlockOperation::NonBlockingLockShared).expect("two shared locks");
    flock(&fb, FlockOperation::NonBlockingUnlock).unwrap();
    let fa_excl = File::open(a.path("f")).unwrap();
    flock(&fa, FlockOperation::NonBlockingUnlock).unwrap();
    flock(&fa_excl, FlockOperation::NonBlockingLockExclusive).unwrap();
    assert!(flock(&fb, FlockOperation::NonBlockingLockShared).is_err());
    drop(fa_excl);
    let took = within(Duration::from_secs(2), || {
        flock(&fb, FlockOperation::NonBlockingLockShared).is_ok()
    });
    assert!(took.is_some(), "A's close released its flock");
}

/// Where the capacity tier cannot lock (an emulated disk: no kernel file
/// behind its handles), a lock is refused with ENOLCK, never granted by
/// the node alone.
#[test]
fn issue_20_locks_are_refused_with_enolck_where_the_capacity_tier_cannot_lock() {
    if !fuse_available() {
        return;
    }
    let c = Cluster::new(1, BUFFERED, &["--capacity-device", "hdd"]);
    let a = &c.nodes[0];
    fs::write(a.path("f"), b"x").unwrap();
    let f = File::options()
        .read(true)
        .write(true)
        .open(a.path("f"))
        .unwrap();
    assert_eq!(
        setlk(&f, libc::F_WRLCK, 0, 0),
        Err(nix::errno::Errno::ENOLCK)
    );
    let e = rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockExclusive);
    assert_eq!(e, Err(rustix::io::Errno::NOLCK));
}

/// Issue 20, "last drainer wins, not last writer": for overlapping ranges
/// the node that drained last won, whatever the write order; a
/// read-modify-write from A of bytes B had written and fsynced left zeros
/// after both drained. Under close-to-open the last close wins: bytes a
/// node put on the capacity tier at close are not written again by its
/// later drain.
#[test]
fn issue_20_last_drainer_won_now_the_last_close_wins() {
    if !fuse_available() {
        return;
    }
    let c = Cluster::new(2, BUFFERED, &[]);
    let (a, b) = (&c.nodes[0], &c.nodes[1]);
    // Write order: A, then B, then A's read-modify-write of B's bytes.
    fs::write(a.path("f"), pattern(64 << 10, 1)).unwrap();
    let from_b = pattern(64 << 10, 2);
    let mut f = File::options().write(true).open(b.path("f")).unwrap();
    f.write_all(&from_b).unwrap();
    f.sync_all().unwrap();
    drop(f);
    // A reads B's bytes, changes the second half, writes it back.
    let mut seen = fs::read(a.path("f")).unwrap();
    assert!(seen == from_b, "A reads B's fsynced bytes");
    for byte in &mut seen[32 << 10..] {
        *byte = 0xAB;
    }
    let f = File::options().write(true).open(a.path("f")).unwrap();
    f.write_all_at(&seen[32 << 10..], 32 << 10).unwrap();
    drop(f);
    // Drains in the "wrong" order: B (the earlier writer) last.
    a.drain();
    b.drain();
    for node in [a, b] {
        let end = fs::read(node.path("f")).unwrap();
        assert!(end == seen, "the last close's bytes, through every node");
    }
    assert!(fs::read(c.capacity_file("f")).unwrap() == seen);
}

/// Unlink and rename as on the PFS: a node's buffered bytes follow the
/// capacity file (its inode), not its name. A file another node deleted
/// is not brought back by this node's close or drain, and bytes of a file
/// another node renamed land under the new name. Both modes.
#[test]
fn issue_20_a_file_another_node_removed_or_renamed_is_not_brought_back() {
    if !fuse_available() {
        return;
    }
    for mode in ["close-to-open", "node-local"] {
        let config = format!("{BUFFERED}[mount]\nconsistency = \"{mode}\"\n");
        let c = Cluster::new(2, &config, &[]);
        let (a, b) = (&c.nodes[0], &c.nodes[1]);
        // A writes two files, buffered, and keeps them open.
        let mut gone = File::create(a.path("gone")).unwrap();
        let mut moved = File::create(a.path("moved")).unwrap();
        gone.write_all(&pattern(100_000, 1)).unwrap();
        let data = pattern(100_000, 2);
        moved.write_all(&data).unwrap();
        // B removes one and renames the other.
        let within_lookup = within(Duration::from_secs(3), || b.path("gone").exists());
        assert!(within_lookup.is_some(), "{mode}: B sees A's new file");
        fs::remove_file(b.path("gone")).unwrap();
        fs::rename(b.path("moved"), b.path("renamed")).unwrap();
        // A closes both and drains.
        drop(gone);
        drop(moved);
        a.drain();
        assert!(
            !c.capacity_file("gone").exists(),
            "{mode}: a file B deleted came back"
        );
        assert!(
            !c.capacity_file("moved").exists(),
            "{mode}: the old name came back"
        );
        assert!(
            fs::read(c.capacity_file("renamed")).unwrap() == data,
            "{mode}: A's bytes are under B's new name"
        );
    }
}

/// `sluice status --json` of `node`, parsed.
fn status_json(node: &Node) -> serde_json::Value {
    let out = node.sluice(&["status", "--json", node.point.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Issue 33: a clean copy (bytes written back, still in the writer's log)
/// is never served once another node changed the file. Node A writes a
/// file and closes it (close-to-open puts it on the capacity tier and
/// keeps the bytes as clean copies), and reads it back from them; node B
/// writes over part of it, same size, and closes; A opens it again and
/// reads B's bytes, not its own copies.
#[test]
fn issue_33_a_clean_copy_is_never_served_after_another_node_changed_the_file() {
    if !fuse_available() {
        return;
    }
    let c = Cluster::new(2, BUFFERED, &[]);
    let (a, b) = (&c.nodes[0], &c.nodes[1]);
    let mine = pattern(1 << 20, 1);
    fs::write(a.path("ckpt"), &mine).unwrap();
    assert!(fs::read(a.path("ckpt")).unwrap() == mine);
    let hits = status_json(a)["clean_read_bytes"].as_u64().unwrap();
    assert!(hits > 0, "A read its own bytes from its clean copies");
    let theirs = pattern(256 << 10, 9);
    let f = OpenOptions::new().write(true).open(b.path("ckpt")).unwrap();
    f.write_all_at(&theirs, 128 << 10).unwrap();
    drop(f);
    let mut want = mine.clone();
    want[128 << 10..384 << 10].copy_from_slice(&theirs);
    assert!(fs::read(c.capacity_file("ckpt")).unwrap() == want);
    let seen = fs::read(a.path("ckpt")).unwrap();
    assert_eq!(seen.len(), want.len());
    let first_wrong = seen.iter().zip(&want).position(|(x, y)| x != y);
    assert_eq!(first_wrong, None, "A served a stale clean copy");
    // The same for a file A keeps open across B's change: a lock granted
    // to A after B's unlock is the synchronisation that promises it.
    fs::write(a.path("locked"), &mine).unwrap();
    let held = OpenOptions::new()
        .read(true)
        .write(true)
        .open(a.path("locked"))
        .unwrap();
    let mut buf = vec![0u8; mine.len()];
    held.read_exact_at(&mut buf, 0).unwrap();
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(b.path("locked"))
        .unwrap();
    setlk(&f, libc::F_WRLCK, 0, 0).unwrap();
    f.write_all_at(&theirs, 0).unwrap();
    setlk(&f, libc::F_UNLCK, 0, 0).unwrap();
    setlk(&held, libc::F_RDLCK, 0, 0).unwrap();
    held.read_exact_at(&mut buf, 0).unwrap();
    assert!(
        buf[..theirs.len()] == theirs[..],
        "A read B's bytes after the lock"
    );
    setlk(&held, libc::F_UNLCK, 0, 0).unwrap();
}

/// Issue 33: a small file's bytes kept in a node's kernel page cache
/// (`mount.page_cache`) are never read after another node changed the
/// file: A writes and reads a small file (kept since its close), B writes
/// it over, same length; A reads B's bytes at its next open. A handle A
/// keeps open across B's next change reads B's bytes after a lock is
/// granted, and, with no lock, within the attribute timeout (1 s).
#[test]
fn issue_33_a_page_cache_copy_is_never_read_after_another_node_changed_the_file() {
    if !fuse_available() {
        return;
    }
    let c = Cluster::new(2, "[mount]\npassthrough = false\n", &[]);
    if !support::exact_change_times(&c.capacity) {
        eprintln!("skipped: the capacity tier gives no exact change times");
        return;
    }
    let (a, b) = (&c.nodes[0], &c.nodes[1]);
    let mine = pattern(3901, 1);
    fs::write(a.path("small"), &mine).unwrap();
    assert!(fs::read(a.path("small")).unwrap() == mine);
    assert!(fs::read(a.path("small")).unwrap() == mine);
    let kept = status_json(a)["fuse_page_cache_opens"].as_u64().unwrap();
    assert!(kept > 0, "A read its own bytes from its page cache");
    let theirs = pattern(3901, 9);
    fs::write(b.path("small"), &theirs).unwrap();
    assert!(
        fs::read(a.path("small")).unwrap() == theirs,
        "A read a stale page at open"
    );
    // A keeps a handle open (kept again: stored at A's last close).
    assert!(fs::read(a.path("small")).unwrap() == theirs);
    let held = OpenOptions::new()
        .read(true)
        .write(true)
        .open(a.path("small"))
        .unwrap();
    let mut buf = vec![0u8; 3901];
    held.read_exact_at(&mut buf, 0).unwrap();
    assert!(buf == theirs);
    let before = status_json(a)["fuse_page_cache_opens"].as_u64().unwrap();
    assert!(before > kept, "the held handle is page-cached");
    // B changes it under a lock; A's lock, once granted, sees it.
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(b.path("small"))
        .unwrap();
    let second = pattern(3901, 17);
    setlk(&f, libc::F_WRLCK, 0, 0).unwrap();
    f.write_all_at(&second, 0).unwrap();
    setlk(&f, libc::F_UNLCK, 0, 0).unwrap();
    drop(f);
    setlk(&held, libc::F_RDLCK, 0, 0).unwrap();
    held.read_exact_at(&mut buf, 0).unwrap();
    assert!(buf == second, "A read a stale page after its lock");
    setlk(&held, libc::F_UNLCK, 0, 0).unwrap();
    // B changes it again; A's open handle, with no lock, reads the new
    // bytes within the attribute timeout.
    let third = pattern(3901, 33);
    fs::write(b.path("small"), &third).unwrap();
    let seen = within(Duration::from_secs(5), || {
        held.read_exact_at(&mut buf, 0).unwrap();
        buf == third
    });
    assert!(
        seen.is_some_and(|t| t < Duration::from_millis(2500)),
        "A's open handle read B's bytes after {seen:?}"
    );
}

/// On-demand (issue 34): every write goes to the log, and a holder's
/// recall is answered well within the wait unless a test says otherwise.
fn on_demand(recall_wait: &str) -> String {
    format!("{BUFFERED}[mount]\nconsistency = \"on-demand\"\nrecall_wait = \"{recall_wait}\"\n")
}

/// The node id a node's fast tier keeps (`FAST/ckpt/node-id`), which its
/// marks carry.
fn node_id(node: &Node) -> String {
    fs::read_to_string(node.dir.join("fast/ckpt/node-id"))
        .unwrap()
        .trim()
        .to_string()
}

/// Issue 34 (a): under on-demand A's close returns without writing the
/// file back (the capacity file stays empty, marked as held by A); B's
/// stat shows the size at A's close without recalling it; B's open
/// recalls it, and B reads every byte at the exact size. `.sluice`, where
/// the recall entries live, is not listed.
#[test]
fn issue_34_on_demand_close_leaves_the_bytes_and_another_nodes_open_recalls_them() {
    if !fuse_available() {
        return;
    }
    let c = Cluster::new(2, &on_demand("10s"), &[]);
    let (a, b) = (&c.nodes[0], &c.nodes[1]);
    let data = pattern(3 << 20, 11);
    let mut f = File::create(a.path("ckpt")).unwrap();
    f.write_all(&data).unwrap();
    let closed = Instant::now();
    drop(f);
    eprintln!("on-demand close took {:?}", closed.elapsed());
    assert_eq!(
        fs::metadata(c.capacity_file("ckpt")).unwrap().len(),
        0,
        "the close left the bytes in A's log"
    );
    let mark = held_mark(&c.capacity_file("ckpt")).expect("the capacity file is marked");
    let a_id = node_id(a);
    assert!(
        mark.starts_with(&format!("v1 node={a_id} size={} ", data.len())),
        "{mark}"
    );

    assert_eq!(
        fs::metadata(b.path("ckpt")).unwrap().len(),
        data.len() as u64,
        "B's stat shows the size the mark carries"
    );
    assert_eq!(
        fs::metadata(c.capacity_file("ckpt")).unwrap().len(),
        0,
        "a stat recalls nothing"
    );
    let listed: Vec<_> = fs::read_dir(&b.point)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(!listed.iter().any(|n| n == ".sluice"), "{listed:?}");
    assert!(c.capacity.join(".sluice").exists());

    let opened = Instant::now();
    let seen = fs::read(b.path("ckpt")).unwrap();
    eprintln!("B's open and read took {:?}", opened.elapsed());
    assert_eq!(seen.len(), data.len(), "B reads the exact size");
    assert!(seen == data, "B reads every byte A wrote");
    assert!(fs::read(c.capacity_file("ckpt")).unwrap() == data);
    assert_eq!(held_mark(&c.capacity_file("ckpt")), None, "mark removed");
    assert_eq!(status_json(b)["recalls"], 1);
    assert_eq!(status_json(a)["recalls_answered"], 1);
}

/// Issue 34 (c): a node reopening a file it holds itself recalls nothing:
/// its bytes stay in its log and the mark stays.
#[test]
fn issue_34_on_demand_a_nodes_own_reopen_recalls_nothing() {
    if !fuse_available() {
        return;
    }
    let c = Cluster::new(1, &on_demand("10s"), &[]);
    let a = &c.nodes[0];
    let data = pattern(1 << 20, 4);
    fs::write(a.path("mine"), &data).unwrap();
    assert!(fs::read(a.path("mine")).unwrap() == data);
    let mut f = OpenOptions::new()
        .append(true)
        .open(a.path("mine"))
        .unwrap();
    f.write_all(&data[..4096]).unwrap();
    drop(f);
    assert_eq!(fs::metadata(c.capacity_file("mine")).unwrap().len(), 0);
    let mark = held_mark(&c.capacity_file("mine")).expect("still marked");
    assert!(
        mark.contains(&format!("size={} ", data.len() + 4096)),
        "the close updated the mark: {mark}"
    );
    let entries = fs::read_dir(c.capacity.join(".sluice/recall").join(node_id(a)))
        .unwrap()
        .count();
    assert_eq!(entries, 0, "no recall entry");
}

/// Issue 34 (b): the holder is killed (kill -9, no drain) with a file
/// closed under on-demand: B's open fails within `mount.recall_wait` with
/// ETIMEDOUT, never reading the empty capacity file, and B's `last_errors`
/// names the holder and the file. Once A is mounted again (its recovery
/// marks the file again and answers recalls), B reads every byte.
#[test]
fn issue_34_on_demand_a_holder_that_is_down_fails_the_open_with_etimedout_until_it_is_back() {
    if !fuse_available() {
        return;
    }
    let mut c = Cluster::new(2, &on_demand("2s"), &[]);
    let data = pattern(512 << 10, 6);
    fs::write(c.nodes[0].path("held"), &data).unwrap();
    let a_id = node_id(&c.nodes[0]);
    {
        let a = &mut c.nodes[0];
        kill_mount(a.child.take(), &a.point);
    }
    let b = &c.nodes[1];
    let started = Instant::now();
    let err = File::open(b.path("held")).unwrap_err();
    let took = started.elapsed();
    assert_eq!(err.raw_os_error(), Some(libc::ETIMEDOUT), "{err}");
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(8),
        "{took:?}"
    );
    assert_eq!(fs::metadata(c.capacity_file("held")).unwrap().len(), 0);
    let status = status_json(b);
    let errors = status["last_errors"].as_array().unwrap();
    assert!(
        errors.iter().any(|e| {
            let message = e["message"].as_str().unwrap_or_default();
            e["op"] == "open"
                && e["errno_name"] == "ETIMEDOUT"
                && message.contains(&a_id)
                && message.contains("held")
        }),
        "last_errors: {errors:?}"
    );
    assert_eq!(status["recall_timeouts"], 1);

    c.restart(0);
    let seen = fs::read(c.nodes[1].path("held")).unwrap();
    assert_eq!(seen.len(), data.len());
    assert!(seen == data, "every byte A acknowledged, after its restart");
    assert_eq!(held_mark(&c.capacity_file("held")), None);
}

/// Issue 34: a lock recalls too. B holds the file open from before A
/// wrote it; A writes and closes under on-demand (the bytes stay in A's
/// log); B's `fcntl` lock recalls them before it is granted, and B then
/// reads A's bytes through the descriptor it already had.
#[test]
fn issue_34_on_demand_a_lock_on_another_node_recalls_the_file() {
    if !fuse_available() {
        return;
    }
    let c = Cluster::new(2, &on_demand("10s"), &[]);
    let (a, b) = (&c.nodes[0], &c.nodes[1]);
    File::create(a.path("shared")).unwrap();
    let held = within(Duration::from_secs(3), || b.path("shared").exists());
    assert!(held.is_some(), "B sees A's new file");
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(b.path("shared"))
        .unwrap();
    let data = pattern(256 << 10, 2);
    fs::write(a.path("shared"), &data).unwrap();
    assert_eq!(fs::metadata(c.capacity_file("shared")).unwrap().len(), 0);
    assert!(held_mark(&c.capacity_file("shared")).is_some());
    setlk(&f, libc::F_RDLCK, 0, 0).unwrap();
    assert_eq!(held_mark(&c.capacity_file("shared")), None, "recalled");
    let mut seen = vec![0u8; data.len()];
    f.read_exact_at(&mut seen, 0).unwrap();
    assert!(seen == data, "B reads A's bytes after its lock");
    setlk(&f, libc::F_UNLCK, 0, 0).unwrap();
}

/// Issue 34: kill -9 of the holder in the middle of a recall loses no
/// acknowledged byte. A writes and fsyncs a file large enough for its
/// write-back to take a while; B's open recalls it, and A is killed as
/// soon as the write-back has begun (the capacity file grows). B's open
/// gives either the whole file or ETIMEDOUT, never a part; once A is
/// mounted again (recovery replays the log, marks the file, answers the
/// recall), B reads every byte.
#[test]
fn issue_34_on_demand_kill_9_of_the_holder_during_a_recall_loses_nothing() {
    if !fuse_available() {
        return;
    }
    let mut c = Cluster::new(2, &on_demand("3s"), &[]);
    let data = pattern(96 << 20, 5);
    let mut f = File::create(c.nodes[0].path("big")).unwrap();
    f.write_all(&data).unwrap();
    f.sync_all().unwrap();
    drop(f);
    assert_eq!(fs::metadata(c.capacity_file("big")).unwrap().len(), 0);
    let b_path = c.nodes[1].path("big");
    let opener = std::thread::spawn(move || fs::read(b_path));
    let capacity_file = c.capacity_file("big");
    let begun = within(Duration::from_secs(5), || {
        fs::metadata(&capacity_file).is_ok_and(|m| m.len() > 0)
    });
    {
        let a = &mut c.nodes[0];
        kill_mount(a.child.take(), &a.point);
    }
    let on_capacity = fs::metadata(&capacity_file).unwrap().len();
    eprintln!(
        "A killed {begun:?} into its write-back with {on_capacity} of {} bytes on the capacity tier",
        data.len()
    );
    match opener.join().unwrap() {
        Ok(seen) => assert!(seen == data, "B's open gave a part of the file"),
        Err(e) => assert_eq!(e.raw_os_error(), Some(libc::ETIMEDOUT), "{e}"),
    }
    c.restart(0);
    let seen = fs::read(c.nodes[1].path("big")).unwrap();
    assert_eq!(seen.len(), data.len());
    assert!(
        seen == data,
        "every fsynced byte after the holder's restart"
    );
    assert_eq!(held_mark(&c.capacity_file("big")), None);
}

/// Issue 34, sealing: `chmod a-w` of a file A holds starts its write-back
/// in the background; the capacity file soon holds every byte and no
/// mark, and B reads it without a recall.
#[test]
fn issue_34_on_demand_chmod_a_w_seals_the_file() {
    if !fuse_available() {
        return;
    }
    let c = Cluster::new(2, &on_demand("10s"), &[]);
    let (a, b) = (&c.nodes[0], &c.nodes[1]);
    let data = pattern(2 << 20, 13);
    fs::write(a.path("final"), &data).unwrap();
    assert_eq!(fs::metadata(c.capacity_file("final")).unwrap().len(), 0);
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(a.path("final"), fs::Permissions::from_mode(0o444)).unwrap();
    let sealed = within(Duration::from_secs(5), || {
        held_mark(&c.capacity_file("final")).is_none()
    });
    assert!(sealed.is_some(), "the mark is still there");
    assert!(fs::read(c.capacity_file("final")).unwrap() == data);
    assert!(fs::read(b.path("final")).unwrap() == data);
    assert_eq!(status_json(b)["recalls"], 0, "read without a recall");
    assert_eq!(status_json(a)["recalls_answered"], 0, "a seal is no recall");
}

/// The xattr `name` of `path` read through a mount.
fn xattr(path: &std::path::Path, name: &str) -> Result<String, rustix::io::Errno> {
    let mut buf = vec![0u8; 512];
    let n = rustix::fs::getxattr(path, name, &mut buf[..])?;
    Ok(String::from_utf8_lossy(&buf[..n]).into_owned())
}

/// Issue 34, sealing by `sluice seal` and the `user.sluice.state` xattr:
/// a file A holds shows `held node=A` through both mounts (read-only:
/// EPERM) and in A's status (`held_files`); `sluice seal --wait` on A
/// returns once the mark is gone, every byte on the capacity tier, the
/// state `clean`, then `sealed` after `chmod a-w`. A seal on B of a file A
/// holds asks A. A file no node holds is said so (exit 0); a directory, a
/// path outside a mount and a mount that is not on-demand are refused
/// (exit 1).
#[test]
fn issue_34_on_demand_sluice_seal_and_the_state_xattr() {
    if !fuse_available() {
        return;
    }
    let c = Cluster::new(2, &on_demand("10s"), &[]);
    let (a, b) = (&c.nodes[0], &c.nodes[1]);
    let a_id = node_id(a);
    let data = pattern(1 << 20, 21);
    fs::write(a.path("out"), &data).unwrap();
    let held = format!("held node={a_id}");
    assert_eq!(xattr(&a.path("out"), "user.sluice.state"), Ok(held.clone()));
    assert_eq!(xattr(&b.path("out"), "user.sluice.state"), Ok(held.clone()));
    assert_eq!(
        rustix::fs::setxattr(
            a.path("out"),
            "user.sluice.state",
            b"clean",
            rustix::fs::XattrFlags::empty()
        ),
        Err(rustix::io::Errno::PERM)
    );
    let status = status_json(a);
    assert_eq!(status["on_demand_node"], a_id.as_str());
    assert_eq!(status["held_files"], 1);
    let text = a.sluice(&["status", a.point.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    assert!(
        text.contains("held        1 files held by this node"),
        "{text}"
    );

    let out = a.sluice(&["seal", "--wait", a.path("out").to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("sealed") && stdout.contains("clean"),
        "{stdout}"
    );
    assert_eq!(
        held_mark(&c.capacity_file("out")),
        None,
        "--wait returned early"
    );
    assert!(fs::read(c.capacity_file("out")).unwrap() == data);
    assert_eq!(status_json(a)["held_files"], 0);
    assert_eq!(
        xattr(&b.path("out"), "user.sluice.state").as_deref(),
        Ok("clean")
    );
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(b.path("out"), fs::Permissions::from_mode(0o444)).unwrap();
    assert_eq!(
        xattr(&a.path("out"), "user.sluice.state").as_deref(),
        Ok("sealed")
    );

    // Held by no node: said so, exit 0.
    let out = b.sluice(&["seal", b.path("out").to_str().unwrap()]);
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        stdout.contains("held by no node") && stdout.contains("sealed"),
        "{stdout}"
    );

    // On B, of a file A holds: A is asked, and --wait sees its mark go.
    let other = pattern(512 << 10, 22);
    fs::write(a.path("other"), &other).unwrap();
    let out = b.sluice(&[
        "seal",
        "--wait",
        "--timeout",
        "10",
        b.path("other").to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(&format!("node {a_id} holds it")),
        "{stdout}"
    );
    assert_eq!(held_mark(&c.capacity_file("other")), None);
    assert!(fs::read(c.capacity_file("other")).unwrap() == other);

    // Refusals, exit 1 with the reason.
    fs::create_dir(a.path("dir")).unwrap();
    let outside = support::tempdir();
    fs::write(outside.path().join("f"), b"x").unwrap();
    for (path, why) in [
        (a.path("dir"), "not a regular file"),
        (outside.path().join("f"), "not inside a sluice mount"),
    ] {
        let out = a.sluice(&["seal", path.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(1), "{}: {stderr}", path.display());
        assert!(stderr.contains(why), "{stderr}");
    }
    let plain = Cluster::new(1, BUFFERED, &[]);
    let p = &plain.nodes[0];
    fs::write(p.path("f"), b"bytes").unwrap();
    let out = p.sluice(&["seal", p.path("f").to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("not on-demand"), "{stderr}");
    assert_eq!(
        xattr(&p.path("f"), "user.sluice.state"),
        Err(rustix::io::Errno::NODATA)
    );
}

/// Issue 34, another node unlinks or renames over a held file (the rule
/// in docs/fuse.md, "On demand"): the name goes at once, without a
/// recall, and the holder's bytes follow the inode they were written
/// for. Nothing comes back: not the removed name, not A's bytes over the
/// file B put at a name, not A's mark on B's file (which would make other
/// nodes read B's file at A's size, or wait for A). A's later writes to
/// a descriptor it kept open go to its own (now name-less) file; its
/// mount then reads B's files at those names. The unlink's time is
/// printed beside a recall of the same size (the cost the rule saves).
#[test]
fn issue_34_on_demand_another_nodes_unlink_or_rename_over_brings_nothing_back() {
    if !fuse_available() {
        return;
    }
    let c = Cluster::new(2, &on_demand("10s"), &[]);
    let (a, b) = (&c.nodes[0], &c.nodes[1]);
    let big = pattern(32 << 20, 31);
    fs::write(a.path("gone"), &big).unwrap();
    fs::write(a.path("recalled"), &big).unwrap();
    fs::write(a.path("replaced"), pattern(1 << 20, 32)).unwrap();
    let mut open_on_a = File::create(a.path("reused")).unwrap();
    open_on_a.write_all(&pattern(256 << 10, 33)).unwrap();
    open_on_a.sync_all().unwrap();
    // Created, but not written (so not held) before B removes it.
    let mut unwritten_on_a = File::create(a.path("unwritten")).unwrap();
    for name in ["gone", "recalled", "replaced", "reused"] {
        assert!(held_mark(&c.capacity_file(name)).is_some(), "{name} held");
    }

    let started = Instant::now();
    fs::remove_file(b.path("gone")).unwrap();
    let unlinked = started.elapsed();
    let started = Instant::now();
    assert!(fs::read(b.path("recalled")).unwrap() == big);
    let recalled = started.elapsed();
    eprintln!(
        "32 MiB held by another node: unlink {unlinked:?}, recall (open and read) {recalled:?}"
    );
    assert!(!c.capacity_file("gone").exists());

    // B replaces one file by a rename over it, and removes another and
    // makes a new one at its name, both with bytes B holds.
    let theirs = pattern(300 << 10, 34);
    fs::write(b.path("tmp"), &theirs).unwrap();
    fs::rename(b.path("tmp"), b.path("replaced")).unwrap();
    fs::remove_file(b.path("reused")).unwrap();
    let removed = within(Duration::from_secs(3), || b.path("unwritten").exists());
    assert!(removed.is_some(), "B sees A's new file");
    fs::remove_file(b.path("unwritten")).unwrap();
    let reused = pattern(100 << 10, 35);
    fs::write(b.path("reused"), &reused).unwrap();
    let b_id = node_id(b);
    for name in ["replaced", "reused"] {
        let mark = held_mark(&c.capacity_file(name)).unwrap_or_default();
        assert!(
            mark.starts_with(&format!("v1 node={b_id} ")),
            "{name}: {mark}"
        );
    }

    // A writes on through the descriptors it kept, and closes them: as
    // for any removed file still open, the writes succeed.
    open_on_a.write_all(&pattern(512 << 10, 36)).unwrap();
    open_on_a.sync_all().unwrap();
    drop(open_on_a);
    unwritten_on_a.write_all(&pattern(64 << 10, 37)).unwrap();
    unwritten_on_a.sync_all().unwrap();
    drop(unwritten_on_a);
    // A's kernel may keep a name's old entry for mount.attr_timeout (1 s).
    std::thread::sleep(Duration::from_millis(1500));
    for (name, want) in [("replaced", &theirs), ("reused", &reused)] {
        let mark = held_mark(&c.capacity_file(name)).unwrap_or_default();
        assert!(
            mark.starts_with(&format!("v1 node={b_id} size={} ", want.len())),
            "{name}: A's close changed B's mark: {mark}"
        );
        assert_eq!(
            fs::metadata(a.path(name)).unwrap().len(),
            want.len() as u64,
            "{name}: A's stat"
        );
        assert!(fs::read(a.path(name)).unwrap() == *want, "{name}: A's read");
    }
    a.drain();
    b.drain();
    for name in ["gone", "unwritten"] {
        assert!(
            !c.capacity_file(name).exists(),
            "{name}: a removed name came back"
        );
    }
    for (name, want) in [("replaced", &theirs), ("reused", &reused)] {
        assert!(
            fs::read(c.capacity_file(name)).unwrap() == *want,
            "{name}: A's bytes over B's file"
        );
        assert_eq!(held_mark(&c.capacity_file(name)), None, "{name}");
    }
    assert_eq!(status_json(a)["held_files"], 0);
}

/// Issue 34: another node renames a held file. The name moves at once,
/// without a recall (the capacity file stays empty); a stat through the
/// new name shows the held size; a read through it recalls the file, the
/// holder finding it by its inode; the old name stays gone, on every node.
#[test]
fn issue_34_on_demand_a_rename_by_another_node_moves_the_held_file() {
    if !fuse_available() {
        return;
    }
    let c = Cluster::new(2, &on_demand("10s"), &[]);
    let (a, b) = (&c.nodes[0], &c.nodes[1]);
    let data = pattern(2 << 20, 41);
    fs::write(a.path("old"), &data).unwrap();
    fs::create_dir(b.path("moved")).unwrap();
    fs::rename(b.path("old"), b.path("moved/new")).unwrap();
    let new = c.capacity_file("moved/new");
    assert_eq!(
        fs::metadata(&new).unwrap().len(),
        0,
        "the rename recalled it"
    );
    assert!(held_mark(&new).is_some(), "the mark went with the inode");
    assert_eq!(
        fs::metadata(b.path("moved/new")).unwrap().len(),
        data.len() as u64
    );
    assert!(fs::read(b.path("moved/new")).unwrap() == data);
    assert_eq!(held_mark(&new), None);
    assert!(fs::read(&new).unwrap() == data);
    assert!(fs::read(a.path("moved/new")).unwrap() == data);
    assert!(!c.capacity_file("old").exists());
    // A's kernel may keep the old entry for mount.attr_timeout (1 s).
    let gone_on_a = within(Duration::from_secs(3), || !a.path("old").exists());
    assert!(gone_on_a.is_some(), "A still sees the old name");
    a.drain();
    assert!(!c.capacity_file("old").exists(), "the old name came back");
    assert!(fs::read(&new).unwrap() == data);
}

/// Issue 34, the sidecar held mark through real mounts (docs/fuse.md, "On
/// demand"): A writes and closes `run/ckpt`: its bytes stay in A's log, and
/// the mark is a sidecar entry `.sluice/held/INO` on the capacity tier,
/// read as `user.sluice.held` through any mount. B renames the directory
/// while A holds the file; the entry, keyed by the inode number, stays
/// the file's: C's stat through the new name shows A's size without a
/// recall, and C's open recalls the file from A (who finds it by its
/// inode) and reads every byte; the entry and A's own name of it are gone.
fn sidecar_mark_follows_a_renamed_directory(c: &Cluster) {
    use std::os::unix::fs::MetadataExt;
    let (a, b, third) = (&c.nodes[0], &c.nodes[1], &c.nodes[2]);
    fs::create_dir(a.path("run")).unwrap();
    let data = pattern(3 << 20, 21);
    fs::write(a.path("run/ckpt"), &data).unwrap();
    let a_id = node_id(a);
    let on_tier = |name: &str| fs::metadata(c.capacity_file(name)).unwrap();
    assert_eq!(
        on_tier("run/ckpt").len(),
        0,
        "the close left the bytes in A's log"
    );
    let ino = on_tier("run/ckpt").ino();
    let entry = c.capacity.join(format!(".sluice/held/{ino}"));
    let own = c.capacity.join(format!(".sluice/held/{ino}-{a_id}"));
    assert!(entry.exists() && own.exists(), "sidecar entry {entry:?}");
    let mark = xattr(&b.path("run/ckpt"), "user.sluice.held").unwrap();
    assert!(
        mark.starts_with(&format!("v1 node={a_id} size={} ", data.len())),
        "{mark}"
    );
    assert_eq!(status_json(a)["held_mark"], "sidecar");
    let text = a.sluice(&["status", a.point.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("sidecar entries in .sluice/held"), "{text}");

    fs::rename(b.path("run"), b.path("run.done")).unwrap();
    assert_eq!(
        on_tier("run.done/ckpt").ino(),
        ino,
        "the inode number survived"
    );
    assert_eq!(
        fs::metadata(third.path("run.done/ckpt")).unwrap().len(),
        data.len() as u64,
        "C's stat shows the mark's size"
    );
    assert_eq!(on_tier("run.done/ckpt").len(), 0, "a stat recalls nothing");
    let opened = Instant::now();
    let seen = fs::read(third.path("run.done/ckpt")).unwrap();
    eprintln!("C's open and read took {:?}", opened.elapsed());
    assert_eq!(seen.len(), data.len(), "C reads the exact size");
    assert!(seen == data, "C reads every byte A wrote");
    assert!(fs::read(c.capacity_file("run.done/ckpt")).unwrap() == data);
    assert!(!entry.exists() && !own.exists(), "the entry went");
    assert_eq!(
        xattr(&third.path("run.done/ckpt"), "user.sluice.held"),
        Err(rustix::io::Errno::NODATA)
    );
    assert_eq!(status_json(third)["recalls"], 1);
    assert_eq!(status_json(b)["recalls"], 0, "a rename recalls nothing");
    assert_eq!(status_json(a)["recalls_answered"], 1);
}

/// [`sidecar_mark_follows_a_renamed_directory`] over a capacity tier that
/// keeps no user xattrs (mergerfs with `xattr=nosys`): on-demand, refused
/// there before, falls back to the sidecar under `held_mark = "auto"`.
#[test]
fn issue_34_on_demand_over_a_tier_without_user_xattrs_keeps_a_renamed_files_mark() {
    if !fuse_available() {
        return;
    }
    let Some(c) = Cluster::over_mergerfs(3, &on_demand("10s"), &[]) else {
        return;
    };
    assert!(
        rustix::fs::setxattr(
            &c.capacity,
            "user.probe",
            b"1",
            rustix::fs::XattrFlags::empty()
        )
        .is_err(),
        "the tier keeps no user xattrs"
    );
    sidecar_mark_follows_a_renamed_directory(&c);
}

/// The same with `mount.held_mark = "sidecar"` over the plain shared
/// directory (or `SLUICE_MULTINODE_CAPACITY`, such as the loopback
/// GlusterFS volume).
#[test]
fn issue_34_on_demand_with_the_sidecar_forced_keeps_a_renamed_files_mark() {
    if !fuse_available() {
        return;
    }
    let config = format!("{}held_mark = \"sidecar\"\n", on_demand("10s"));
    let c = Cluster::new(3, &config, &[]);
    sidecar_mark_follows_a_renamed_directory(&c);
}

/// The sidecar across a kill -9 of the holder, over mergerfs without user
/// xattrs: B's open fails with ETIMEDOUT within `mount.recall_wait`
/// (the entry stays, naming A), and once A is mounted again (its recovery
/// marks the file again, answers the recall) B reads every byte.
#[test]
fn issue_34_on_demand_sidecar_holder_killed_then_back() {
    if !fuse_available() {
        return;
    }
    let Some(mut c) = Cluster::over_mergerfs(2, &on_demand("2s"), &[]) else {
        return;
    };
    let data = pattern(512 << 10, 8);
    let mut f = File::create(c.nodes[0].path("held")).unwrap();
    f.write_all(&data).unwrap();
    f.sync_all().unwrap();
    drop(f);
    {
        let a = &mut c.nodes[0];
        kill_mount(a.child.take(), &a.point);
    }
    let err = File::open(c.nodes[1].path("held")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ETIMEDOUT), "{err}");
    assert_eq!(fs::metadata(c.capacity_file("held")).unwrap().len(), 0);
    c.restart(0);
    let seen = fs::read(c.nodes[1].path("held")).unwrap();
    assert!(seen == data, "every byte A fsynced, after its restart");
    let held = fs::read_dir(c.capacity.join(".sluice/held"))
        .unwrap()
        .count();
    assert_eq!(held, 0, "no entry left");
}

/// A tier that numbers names, not files (mergerfs without `use_ino`: two
/// names of one file show two inode numbers, and a number changes once
/// the kernel forgets a name) cannot key a sidecar mark: the mount is
/// refused, saying why and what to do, rather than losing marks later.
#[test]
fn issue_34_on_demand_refuses_a_tier_whose_inode_numbers_name_paths() {
    if !fuse_available() {
        return;
    }
    let dir = support::tempdir();
    let capacity = dir.path().join("merged");
    let options = MergerFs::OPTIONS.replace("use_ino,", "");
    let Some(_tier) = MergerFs::start_with(&dir.path().join("branch"), &capacity, &options) else {
        return;
    };
    let (fast, point) = (dir.path().join("fast"), dir.path().join("mnt"));
    fs::create_dir_all(&fast).unwrap();
    fs::create_dir_all(&point).unwrap();
    fs::write(dir.path().join("sluice.toml"), on_demand("10s")).unwrap();
    let log = dir.path().join("mount.log");
    let mut child = Command::new(sluice_bin())
        .arg("mount")
        .arg("--config")
        .arg(dir.path().join("sluice.toml"))
        .arg("--fast")
        .arg(&fast)
        .arg("--capacity")
        .arg(&capacity)
        .arg(&point)
        .stdin(Stdio::null())
        .stdout(File::create(&log).unwrap())
        .stderr(File::create(dir.path().join("mount.err")).unwrap())
        .spawn()
        .unwrap();
    // Refused at start; a mount that comes up instead is unmounted here.
    let exited = within(Duration::from_secs(30), || {
        child.try_wait().unwrap().is_some() || is_mounted(&point)
    });
    let status = child.try_wait().unwrap();
    if status.is_none() {
        kill_mount(Some(child), &point);
    }
    let said = fs::read_to_string(&log).unwrap_or_default()
        + &fs::read_to_string(dir.path().join("mount.err")).unwrap_or_default();
    assert!(
        exited.is_some() && status.is_some_and(|s| !s.success()),
        "not refused: {said}"
    );
    assert!(!is_mounted(&point));
    for fragment in ["different inode numbers", "use_ino", "sidecar"] {
        assert!(said.contains(fragment), "{fragment}: {said}");
    }
}
