//! Shared by tests that need a real `redis-server` (`mod redis_support;`):
//! one per test, started by `scripts/redis.sh` on 127.0.0.1 and a free
//! port, stopped by the pid in its directory when dropped (also when a
//! test panics). Without redis-server the tests fail under `CI` and are
//! skipped with a message otherwise (`scripts/setup.sh` installs it).
#![allow(dead_code)]

use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use sluice_catalog::{Catalog, MetaSpec};

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

/// A redis-server in a temp dir, stopped (by the pid in its pidfile) when
/// dropped.
pub struct RedisServer {
    dir: tempfile::TempDir,
    pub port: u16,
}

impl RedisServer {
    pub fn start() -> Option<RedisServer> {
        if !redis_available() {
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let port = redis_sh(&["start", dir.path().to_str().unwrap()])
            .trim()
            .parse()
            .expect("scripts/redis.sh prints the port");
        Some(RedisServer { dir, port })
    }
    pub fn dir(&self) -> &str {
        self.dir.path().to_str().unwrap()
    }
    /// SIGKILL (an outage, not a shutdown), then waits until it is gone.
    pub fn kill9(&self) {
        let pid: u32 = std::fs::read_to_string(self.dir.path().join("redis.pid"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
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
            assert!(Instant::now() < deadline, "redis-server {pid} survived");
            thread::sleep(Duration::from_millis(10));
        }
    }
    pub fn start_again(&self) {
        let port = redis_sh(&["start", self.dir(), &self.port.to_string()]);
        assert_eq!(port.trim(), self.port.to_string());
    }
    pub fn catalog(&self) -> Box<dyn Catalog> {
        let spec = MetaSpec::parse(&format!("redis://127.0.0.1:{}?prefix=nodes", self.port));
        sluice_catalog::open(&spec.unwrap()).unwrap()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if !self.dir.path().join("redis.pid").exists() {
            return;
        }
        // Never panic in drop (it may run while unwinding).
        let _ = Command::new("bash")
            .arg(REDIS_SH)
            .args(["stop", self.dir()])
            .status();
    }
}
