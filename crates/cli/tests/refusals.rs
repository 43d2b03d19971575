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

mod support;

use support::{is_mounted, SLUICE};

fn sluice(args: &[&str]) -> Output {
    Command::new(SLUICE).args(args).output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn text(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// A temp dir with `fast/`, `capacity/` and `mnt/`.
fn tiers() -> (tempfile::TempDir, PathBuf) {
    let dir = support::tempdir();
    let root = dir.path().to_path_buf();
    for d in ["fast", "capacity", "mnt"] {
        fs::create_dir(root.join(d)).unwrap();
    }
    (dir, root)
}

/// Issue 19: `region_size = -5` gave "data did not match any variant of
/// untagged enum Raw", `ssdup_high_water = 1.7` was accepted, and `config
/// show` exited 0 on a config that cannot mount. `config check` exits
/// non-zero with the key and its range; `show` still prints, with a note.
#[test]
fn config_check_exits_non_zero_on_a_config_that_cannot_mount_issue_19() {
    let (_dir, root) = tiers();
    let (fast, capacity) = (root.join("fast"), root.join("capacity"));
    let tiers = ["--fast", text(&fast), "--capacity", text(&capacity)];
    let good = sluice(&[&["config", "check"][..], &tiers].concat());
    assert!(good.status.success(), "{}", stderr(&good));
    assert!(String::from_utf8_lossy(&good.stdout).contains("ok"));

    let file = root.join("sluice.toml");
    for (toml, key, range) in [
        ("[log]\nregion_size = -5\n", "log.region_size", "negative"),
        (
            "[policy]\nssdup_high_water = 1.7\n",
            "policy.ssdup_high_water",
            "[0, 1]",
        ),
        ("[log]\nregion_size = 0\n", "log.region_size", "at least"),
        (
            "[policy]\nthreshold_initial = 2.0\n",
            "policy.threshold_initial",
            "[0, 1]",
        ),
    ] {
        fs::write(&file, toml).unwrap();
        let args = [&["config", "check", "--config", text(&file)][..], &tiers].concat();
        let out = sluice(&args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{toml:?}: {err}");
        assert!(err.contains(key) && err.contains(range), "{toml:?}: {err}");
        for internal in ["untagged", "region_bytes", "threshold.initial"] {
            assert!(!err.contains(internal), "{toml:?}: {err}");
        }
    }
    // `config show` prints what it can, and says how to check.
    fs::write(&file, "[policy]\nssdup_high_water = 1.7\n").unwrap();
    let out = sluice(&[&["config", "show", "--config", text(&file)][..], &tiers].concat());
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("ssdup_high_water = 1.7"));
    let err = stderr(&out);
    assert!(
        err.contains("policy.ssdup_high_water") && err.contains("sluice config check"),
        "{err}"
    );
}

/// Issue 19: tier paths were compared as text (`--fast c/../c --capacity
/// c` mounted), nesting and symlinks into the other tier went unnoticed,
/// and a missing directory (a typo) was created with its parents.
#[test]
fn config_check_refuses_unsafe_tier_layouts_issue_19() {
    let (_dir, root) = tiers();
    let c = root.join("capacity");
    fs::create_dir(c.join("inner")).unwrap();
    std::os::unix::fs::symlink(c.join("inner"), root.join("into-capacity")).unwrap();
    for (fast, capacity, fragment) in [
        (
            root.join("capacity/../capacity"),
            c.clone(),
            "same directory",
        ),
        (c.join("inner"), c.clone(), "is inside"),
        (root.join("fast"), root.join("fast/sub"), "is inside"),
        (root.join("into-capacity"), c.clone(), "is inside"),
        (
            root.join("fast"),
            root.join("typo/capacity"),
            "does not exist",
        ),
    ] {
        let out = sluice(&[
            "config",
            "check",
            "--fast",
            text(&fast),
            "--capacity",
            text(&capacity),
        ]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{fast:?} {capacity:?}: {err}");
        assert!(err.contains(fragment), "{fast:?} {capacity:?}: {err}");
    }
    // --create lets a missing tier through the check, which creates nothing.
    let out = sluice(&[
        "config",
        "check",
        "--fast",
        text(&root.join("fast")),
        "--capacity",
        text(&root.join("new/capacity")),
        "--create",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!root.join("new").exists());
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

fn register(target: &[&str], id: &str, size: &str, glob: &str) -> Output {
    let args = [
        &[
            "ckpt", "register", "--id", id, "--period", "10min", "--size", size,
        ][..],
        &["--nodes", "4", "--glob", glob],
        target,
    ]
    .concat();
    sluice(&args)
}

/// The refusals of `ckpt register` against `target` (`--meta SPEC` or
/// `--mount MNT`): job `a` holds `ckpt/a/*`; job `b` is refused each time.
fn refuses_bad_jobs(target: &[&str]) {
    let ok = register(target, "a", "1GiB", "ckpt/a/*");
    assert!(ok.status.success(), "{}", stderr(&ok));
    for (size, glob, fragments) in [
        ("0", "ckpt/b/*", ["--size", "at least 1 byte"]),
        ("1GiB", "../*", ["--glob", "leaves the mount"]),
        ("1GiB", "/etc/*", ["--glob", "absolute"]),
        ("1GiB", "**", ["--glob", "only wildcards"]),
        ("1GiB", "*", ["--glob", "only wildcards"]),
        ("1GiB", "ckpt/a/*", ["glob", "job \"a\"'s glob already"]),
    ] {
        let out = register(target, "b", size, glob);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{size} {glob}: {err}");
        for fragment in fragments {
            assert!(err.contains(fragment), "{size} {glob}: {err}");
        }
    }
    // A job may replace itself and keep its glob.
    let ok = register(target, "a", "2GiB", "ckpt/a/*");
    assert!(ok.status.success(), "{}", stderr(&ok));
    let list = sluice(&[&["ckpt", "list", "--json"][..], target].concat());
    let jobs = String::from_utf8_lossy(&list.stdout);
    assert!(jobs.contains("\"a\"") && !jobs.contains("\"b\""), "{jobs}");
}

/// Issue 19: `ckpt register` accepted `--size 0`, globs like `../*`,
/// `/etc/*` and `**`, and two jobs with the same glob; straight into a
/// catalogue store.
#[test]
fn ckpt_register_refuses_jobs_that_could_not_work_issue_19() {
    let dir = tempfile::tempdir().unwrap();
    let meta = format!("redb:{}", dir.path().join("catalog.redb").display());
    refuses_bad_jobs(&["--meta", &meta]);
}

/// The same through a running mount's control socket (the engine checks
/// against the jobs it has).
#[test]
fn ckpt_register_through_a_mount_refuses_jobs_that_could_not_work_issue_19() {
    let fuse = Path::new("/dev/fuse").exists()
        && Command::new("fusermount3")
            .arg("-V")
            .output()
            .is_ok_and(|o| o.status.success());
    if !fuse {
        assert!(std::env::var_os("CI").is_none(), "CI: FUSE is required");
        eprintln!("skipped: no /dev/fuse or fusermount3 (install fuse3)");
        return;
    }
    let (_dir, root) = tiers();
    let point = root.join("mnt");
    let mut child = Command::new(SLUICE)
        .arg("mount")
        .args(["--fast", text(&root.join("fast"))])
        .args(["--capacity", text(&root.join("capacity"))])
        .arg(&point)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while !is_mounted(&point) {
        assert!(child.try_wait().unwrap().is_none(), "sluice mount exited");
        assert!(start.elapsed() < Duration::from_secs(30), "not mounted");
        std::thread::sleep(Duration::from_millis(20));
    }
    let result = std::panic::catch_unwind(|| refuses_bad_jobs(&["--mount", text(&point)]));
    let out = sluice(&["unmount", text(&point)]);
    let _ = child.wait();
    assert!(out.status.success(), "{}", stderr(&out));
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// Issue 21: a Redis catalogue behind a password and an ACL user, reached
/// through the config's keys by the commands a user runs; a wrong password
/// and a world-readable password file are refused naming what to fix.
#[test]
fn redis_catalogue_with_a_password_through_the_config_issue_21() {
    const REDIS_SH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/redis.sh");
    if !Command::new("redis-server")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI: redis-server is required (scripts/setup.sh installs it)"
        );
        eprintln!("skipped: no redis-server (install redis-server)");
        return;
    }
    /// Stops the server by the pid in its directory, also on a panic.
    struct Server(tempfile::TempDir);
    impl Drop for Server {
        fn drop(&mut self) {
            let _ = Command::new("bash")
                .args([REDIS_SH, "stop", text(self.0.path())])
                .output();
        }
    }
    let server = Server(tempfile::tempdir().unwrap());
    let out = Command::new("bash")
        .args([REDIS_SH, "start", "--auth", text(server.0.path())])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let port = String::from_utf8_lossy(&out.stdout).trim().to_owned();

    let (_dir, root) = tiers();
    let config = |password_file: &Path| {
        let file = root.join(format!(
            "{}.toml",
            password_file.file_name().unwrap().to_str().unwrap()
        ));
        fs::write(
            &file,
            format!(
                "[fast]\npath = {:?}\n[capacity]\npath = {:?}\n[bbos]\nmeta = \"redis://sluice@127.0.0.1:{port}\"\nredis_password_file = {:?}\n",
                root.join("fast"),
                root.join("capacity"),
                password_file
            ),
        )
        .unwrap();
        file
    };
    let good = config(&server.0.path().join("sluice.password"));
    let good = ["--config", text(&good)];
    let check = sluice(&[&["config", "check"][..], &good].concat());
    assert!(check.status.success(), "{}", stderr(&check));
    let ok = register(&good, "a", "1GiB", "ckpt/a/*");
    assert!(ok.status.success(), "{}", stderr(&ok));
    let list = sluice(&[&["ckpt", "list", "--json"][..], &good].concat());
    assert!(list.status.success(), "{}", stderr(&list));
    assert!(String::from_utf8_lossy(&list.stdout).contains("\"a\""));

    let wrong = root.join("wrong.password");
    fs::write(&wrong, "not-it\n").unwrap();
    fs::set_permissions(&wrong, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let wrong = config(&wrong);
    let out = sluice(&["ckpt", "list", "--config", text(&wrong)]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    for fragment in [
        "refused user sluice",
        "WRONGPASS",
        "not an outage",
        "bbos.redis_password_file",
    ] {
        assert!(err.contains(fragment), "{fragment:?} missing in: {err}");
    }
    assert!(!err.contains("not-it"), "the password never shows: {err}");

    let open_to_all = root.join("open.password");
    fs::copy(server.0.path().join("sluice.password"), &open_to_all).unwrap();
    fs::set_permissions(
        &open_to_all,
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .unwrap();
    let open_to_all = config(&open_to_all);
    let out = sluice(&["config", "check", "--config", text(&open_to_all)]);
    let err = stderr(&out);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("bbos.redis_password_file = ") && err.contains("chmod o-r"),
        "{err}"
    );
}
