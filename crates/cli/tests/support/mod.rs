//! What the end-to-end tests share: the `sluice` binary (and a copy of it
//! another user can run), whether FUSE is there, temp dirs another user
//! can reach, and a `sluice mount` child process over fresh tiers in a
//! temp dir (`Mounted`). Each test binary uses part of it.
//!
//! Nothing here depends on where the checkout is (issue 39): cargo builds
//! `sluice` under the checkout's `target/`, which another user may not be
//! able to enter (a clone in `/root`, mode 0700 on Debian, or in a
//! `mktemp -d` directory). A test that acts as another user runs
//! `sluice_for_others`, a copy in its own temp dir, and keeps every file
//! that user touches under `temp_base()`.

#![allow(dead_code)]

use std::fs::{self, File};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub const SLUICE: &str = env!("CARGO_BIN_EXE_sluice");

/// Whether other users may search every directory from `/` down to `dir`
/// (the `x` bit for others on each), so a second user reaches what is
/// under it. Mode bits only: root is never refused, so asking the kernel
/// as ourselves would say yes.
pub fn others_can_search(dir: &Path) -> bool {
    let Ok(dir) = fs::canonicalize(dir) else {
        return false;
    };
    dir.ancestors()
        .all(|d| fs::metadata(d).is_ok_and(|m| m.permissions().mode() & 0o001 != 0))
}

/// The longest directory a test's temp dir may go in: a mount's control
/// socket, `DIR/.tmpXXXXXX/fast/sluice.sock`, must fit in a socket
/// address (107 bytes; sluice refuses a longer fast tier path).
const TEMP_BASE_BYTES_MAX: usize = 107 - "/.tmpXXXXXX/fast/sluice.sock".len();

/// The directory the tests' temp dirs go in: `TMPDIR` (default `/tmp`)
/// when others may search it and it is at most `TEMP_BASE_BYTES_MAX`
/// long, else `/tmp`. A `TMPDIR` of one's own (mode 0700, like
/// pam_tmpdir's `/tmp/user/0`) would hide the mount point and tiers from
/// the second user of the permission tests, and a deep one would leave
/// no room for the control socket; the files are small. Said once on
/// stderr when `TMPDIR` is passed over.
pub fn temp_base() -> &'static Path {
    static BASE: OnceLock<PathBuf> = OnceLock::new();
    BASE.get_or_init(|| {
        let tmpdir = std::env::temp_dir();
        let why = if !others_can_search(&tmpdir) {
            "is not searchable by other users, as the tests that act as another user need"
        } else if tmpdir.as_os_str().len() > TEMP_BASE_BYTES_MAX {
            "is too long for the control sockets of the mounts under it"
        } else {
            return tmpdir;
        };
        eprintln!(
            "note: TMPDIR={} {why}; temp dirs go under /tmp",
            tmpdir.display()
        );
        PathBuf::from("/tmp")
    })
}

/// A fresh temp dir under `temp_base()` (its mode follows the umask,
/// 0700 under `umask 077`: a test that lets another user in sets 0755
/// itself).
pub fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir_in(temp_base()).unwrap()
}

/// Whether a second user (uid 65534) can reach the tests' temp dirs;
/// under CI=true a failure if not, otherwise a skip that says why.
pub fn others_reach_temp_dirs() -> bool {
    required(
        others_can_search(temp_base()),
        &format!(
            "temp dir that other users can reach ({} or a directory above it is not searchable by others; set TMPDIR to one that is)",
            temp_base().display()
        ),
    )
}

/// The `sluice` under test copied into `dir/bin` (once per `dir`), mode
/// 0755, for another user to run: the one cargo built is under the
/// checkout's `target/`, which that user may not reach (issue 39). `dir`
/// must be reachable by that user too (a test's temp dir it opened).
pub fn sluice_for_others(dir: &Path) -> PathBuf {
    let bin = dir.join("bin");
    let copy = bin.join("sluice");
    if !copy.exists() {
        fs::create_dir_all(&bin).unwrap();
        fs::set_permissions(&bin, fs::Permissions::from_mode(0o755)).unwrap();
        // A copy, not a hard link: the copy's mode is ours to set, and
        // `target/` is left as cargo made it.
        let partial = bin.join("sluice.partial");
        fs::copy(SLUICE, &partial).unwrap();
        fs::set_permissions(&partial, fs::Permissions::from_mode(0o755)).unwrap();
        fs::rename(&partial, &copy).unwrap();
    }
    copy
}

/// Whether `what` is there; under CI=true its absence fails the test.
pub fn required(ok: bool, what: &str) -> bool {
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI: {what} is required (scripts/setup.sh installs it; CI runs as root)"
        );
        eprintln!("skipped: no {what}");
    }
    ok
}

pub fn fuse_available() -> bool {
    let ok = Path::new("/dev/fuse").exists()
        && Command::new("fusermount3")
            .arg("-V")
            .output()
            .is_ok_and(|o| o.status.success());
    required(ok, "/dev/fuse or fusermount3 (install fuse3)")
}

/// Whether the file system at `dir` gives a write a new ctime at once
/// (the mount's own probe, `probe_change_times` in crates/env's posix.rs):
/// where it does not, a mount keeps no small files in the kernel's page
/// cache.
pub fn exact_change_times(dir: &Path) -> bool {
    use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
    let Ok(f) = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(nix::libc::O_TMPFILE)
        .mode(0o600)
        .open(dir)
    else {
        return false;
    };
    let ctime = |f: &File| f.metadata().map(|m| (m.ctime(), m.ctime_nsec())).ok();
    (0..3u64).all(|i| {
        let before = ctime(&f);
        f.write_at(b"x", i).is_ok() && before.is_some() && ctime(&f) != before
    })
}

pub fn is_mounted(point: &Path) -> bool {
    mounts_at(point) > 0
}

/// How many mounts `/proc/self/mounts` lists at `point` (a dead mount
/// stays listed; a new one on top adds a line).
pub fn mounts_at(point: &Path) -> usize {
    let mounts = fs::read("/proc/self/mounts").unwrap_or_default();
    let point = point.as_os_str().as_bytes();
    mounts
        .split(|&b| b == b'\n')
        .filter(|line| {
            line.split(|&b| b == b' ')
                .nth(1)
                .is_some_and(|field| unescape_mount_field(field) == point)
        })
        .count()
}

/// A path as the kernel writes it in `/proc/self/mounts`: space, tab,
/// newline and backslash as three octal digits (`\040`), so a mount point
/// under a directory with a space in its name (a checkout or `TMPDIR`)
/// reads back as itself.
fn unescape_mount_field(field: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        let octal = field
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (field[i], octal) {
            (b'\\', Some(d)) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    out
}

/// Wait (30 s at most) until `child`, a `sluice mount`, has mounted
/// `point`; panics with `log()` if it exits or takes too long.
pub fn wait_mounted(child: &mut Child, point: &Path, log: impl Fn() -> String) {
    let start = Instant::now();
    while !is_mounted(point) {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("sluice mount exited with {status}: {}", log());
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "not mounted after 30 s: {}",
            log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Kill a test's `sluice mount` (if still running) and lazily unmount
/// `point` if it is still mounted: the cleanup of a test that failed.
pub fn kill_mount(child: Option<Child>, point: &Path) {
    if let Some(mut child) = child {
        let _ = child.kill();
        let _ = child.wait();
    }
    if is_mounted(point) {
        let _ = Command::new("fusermount3")
            .args(["-u", "-z"])
            .arg(point)
            .status();
    }
}

/// A `sluice mount` child process over fresh tiers in a temp dir.
pub struct Mounted {
    pub child: Option<Child>,
    pub dir: tempfile::TempDir,
    pub point: PathBuf,
    pub args: Vec<String>,
    /// The umask `sluice mount` runs with (octal digits), if not ours.
    pub umask: Option<&'static str>,
    /// `RUST_LOG` for `sluice mount` (unset when `None`).
    pub env: Option<String>,
    /// `--log-level` for `sluice mount`.
    pub log_level: Option<String>,
    /// More environment for `sluice mount` (the fault hook's
    /// `SLUICE_FAULTS`).
    pub vars: Vec<(String, String)>,
}

impl Mounted {
    pub fn new(args: &[&str]) -> Mounted {
        let mut m = Mounted::unstarted(args);
        m.start();
        m
    }

    /// Fresh tiers and a mount point, not mounted yet (to prepare the
    /// tiers first; `start` mounts).
    pub fn unstarted(args: &[&str]) -> Mounted {
        let dir = tempdir();
        let point = dir.path().join("mnt");
        for d in ["fast", "capacity", "mnt"] {
            fs::create_dir_all(dir.path().join(d)).unwrap();
            // 0755 whatever the umask (under `umask 077` the capacity
            // directory, the mount's root, would be 0700 and shut a second
            // user out of the whole mount).
            fs::set_permissions(dir.path().join(d), fs::Permissions::from_mode(0o755)).unwrap();
        }
        Mounted {
            child: None,
            point,
            args: args.iter().map(|s| s.to_string()).collect(),
            dir,
            umask: None,
            env: None,
            log_level: None,
            vars: Vec::new(),
        }
    }

    pub fn fast(&self) -> PathBuf {
        self.dir.path().join("fast")
    }

    pub fn capacity(&self) -> PathBuf {
        self.dir.path().join("capacity")
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.point.join(name)
    }

    pub fn start(&mut self) {
        let log = File::create(self.dir.path().join("mount.log")).unwrap();
        let mut command = match self.umask {
            // `exec`: the child is sluice itself (kill -9 reaches it).
            Some(umask) => {
                let mut sh = Command::new("sh");
                sh.args([
                    "-c",
                    &format!("umask {umask} && exec \"$0\" \"$@\""),
                    SLUICE,
                ]);
                sh
            }
            None => Command::new(SLUICE),
        };
        match &self.env {
            Some(filter) => command.env("RUST_LOG", filter),
            None => command.env_remove("RUST_LOG"),
        };
        command.envs(self.vars.iter().map(|(k, v)| (k, v)));
        command.arg("mount");
        if let Some(level) = &self.log_level {
            command.args(["--log-level", level]);
        }
        let child = command
            .arg("--fast")
            .arg(self.fast())
            .arg("--capacity")
            .arg(self.capacity())
            .args(&self.args)
            .arg(&self.point)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        // Kept before the wait: if the wait panics, Drop kills the child
        // (a mount the test never saw would otherwise outlive it).
        let log = self.dir.path().join("mount.log");
        let child = self.child.insert(child);
        wait_mounted(child, &self.point, || {
            fs::read_to_string(&log).unwrap_or_default()
        });
    }

    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.path().join("mount.log")).unwrap_or_default()
    }

    pub fn sluice(&self, args: &[&str]) -> std::process::Output {
        Command::new(SLUICE).args(args).output().unwrap()
    }

    /// `sluice unmount` (drain unless `keep`), then wait for the process.
    pub fn unmount(&mut self, keep: bool) {
        let point = self.point.display().to_string();
        let mut args = vec!["unmount", point.as_str()];
        if keep {
            args.push("--keep");
        }
        let out = self.sluice(&args);
        assert!(
            out.status.success(),
            "sluice unmount: {}{}",
            String::from_utf8_lossy(&out.stderr),
            self.log()
        );
        let status = self.child.take().unwrap().wait().unwrap();
        assert!(status.success(), "mount process: {status}: {}", self.log());
        assert!(!is_mounted(&self.point));
    }

    /// kill -9 the mount process and clear the dead mount.
    pub fn kill9(&mut self) {
        let mut child = self.child.take().unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
        let _ = Command::new("fusermount3")
            .args(["-u", "-z"])
            .arg(&self.point)
            .status();
        assert!(!is_mounted(&self.point));
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        kill_mount(self.child.take(), &self.point);
    }
}

/// xorshift64*: a test's seeded choices.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The held mark on a capacity file (`user.sluice.held`), if any.
pub fn held_mark(path: &std::path::Path) -> Option<String> {
    let mut buf = vec![0u8; 512];
    let n = rustix::fs::getxattr(path, "user.sluice.held", &mut buf[..]).ok()?;
    Some(String::from_utf8_lossy(&buf[..n]).into_owned())
}
