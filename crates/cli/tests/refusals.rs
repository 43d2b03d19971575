//! Bad input refused as a user meets it (issue 19, part B): a config that
//! cannot mount, an unsafe tier layout, a missing tier directory, a
//! checkpoint job that could not work. Each gets a non-zero exit and an
//! error in the user's words (TOML keys, flags), before anything is
//! touched.

// Tests wait for a child process by wall clock.
#![allow(clippy::disallowed_methods)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const SLUICE: &str = env!("CARGO_BIN_EXE_sluice");

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn text(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// A temp dir with `fast/`, `capacity/` and `mnt/`.
fn tiers() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    for d in ["fast", "capacity", "mnt"] {
        fs::create_dir(root.join(d)).unwrap();
    }
    (dir, root)
}

/// `sluice mount ARGS` that must be refused: its output, or a panic after
/// unmounting if it mounted (as today's code did).
fn refused_mount(args: &[&str], point: &Path) -> Output {
    let mut child = Command::new(SLUICE)
        .arg("mount")
        .args(args)
        .arg(point)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(30) {
            let _ = Command::new("fusermount3").arg("-u").arg(point).status();
            let _ = child.kill();
            let _ = child.wait();
            panic!("sluice mount {args:?} {point:?} did not refuse: it mounted");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

/// Issue 19: `sluice mount` opened unsafe layouts and created missing
/// tiers. It refuses them before writing a byte under either tier.
#[test]
fn mount_refuses_unsafe_tier_layouts_before_touching_them_issue_19() {
    let (_dir, root) = tiers();
    let point = root.join("mnt");
    let c = root.join("capacity");
    let same = root.join("capacity/../capacity");
    let out = refused_mount(&["--fast", text(&same), "--capacity", text(&c)], &point);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("same directory"), "{}", stderr(&out));
    assert_eq!(fs::read_dir(&c).unwrap().count(), 0, "capacity untouched");

    let typo = root.join("capacty");
    let fast = root.join("fast");
    let out = refused_mount(&["--fast", text(&fast), "--capacity", text(&typo)], &point);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("--create"), "{}", stderr(&out));
    assert!(!typo.exists(), "the typo is not created");
    assert_eq!(fs::read_dir(&fast).unwrap().count(), 0, "fast untouched");

    // The mount point inside the capacity tier: sluice would serve itself.
    let inner = c.join("mnt");
    fs::create_dir(&inner).unwrap();
    let out = refused_mount(&["--fast", text(&fast), "--capacity", text(&c)], &inner);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("mount.point"), "{}", stderr(&out));
}
