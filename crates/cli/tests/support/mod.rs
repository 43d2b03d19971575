//! What the end-to-end tests share: the `sluice` binary, whether FUSE is
//! there, and a `sluice mount` child process over fresh tiers in a temp
//! dir (`Mounted`). Each test binary uses part of it.

#![allow(dead_code)]

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const SLUICE: &str = env!("CARGO_BIN_EXE_sluice");

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

pub fn is_mounted(point: &Path) -> bool {
    let mounts = fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let point = point.display().to_string();
    mounts
        .lines()
        .any(|l| l.split_whitespace().nth(1) == Some(point.as_str()))
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
        let dir = tempfile::tempdir().unwrap();
        let point = dir.path().join("mnt");
        for d in ["fast", "capacity", "mnt"] {
            fs::create_dir_all(dir.path().join(d)).unwrap();
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
        let mut child = child;
        wait_mounted(&mut child, &self.point, || self.log());
        self.child = Some(child);
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
