//! Bad input refused as a user meets it (issue 19, part B): a config that
//! cannot mount, an unsafe tier layout, a missing tier directory, a
//! checkpoint job that could not work. Each gets a non-zero exit and an
//! error in the user's words (TOML keys, flags), before anything is
//! touched. Issue 31: `sluice config check` refuses every setup `sluice
//! mount` refuses, with the same words (one table of bad setups through
//! both).

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

/// The `sluice: error:` line of a command's stderr.
fn error_line(stderr: &str) -> String {
    stderr
        .lines()
        .find(|l| l.starts_with("sluice: error:"))
        .unwrap_or_default()
        .to_string()
}

/// Every path under `dirs`, sorted (what a refusal must not change).
fn listing(dirs: &[&Path]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack: Vec<PathBuf> = dirs.iter().map(|d| d.to_path_buf()).collect();
    while let Some(dir) = stack.pop() {
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            if fs::symlink_metadata(&path).unwrap().is_dir() {
                stack.push(path.clone());
            }
            out.push(path);
        }
    }
    out.sort();
    out
}

/// `sluice config check ARGS POINT` exits 1 and `sluice mount ARGS POINT`
/// refuses (never mounts), both saying `fragment` in the same error line,
/// and neither changes what is under `watched`.
fn both_refuse(case: &str, args: &[&str], point: &Path, fragment: &str, watched: &[&Path]) {
    let before = listing(watched);
    let check = sluice(&[&["config", "check"][..], args, &[text(point)]].concat());
    let check_err = stderr(&check);
    assert_eq!(
        check.status.code(),
        Some(1),
        "{case}: config check did not refuse: {check_err}{}",
        String::from_utf8_lossy(&check.stdout)
    );
    assert!(
        check_err.contains(fragment),
        "{case}: config check: {check_err}"
    );
    assert_eq!(
        listing(watched),
        before,
        "{case}: config check changed a tier"
    );
    let mount = refused_mount(args, point);
    let mount_err = stderr(&mount);
    assert!(!mount.status.success(), "{case}: mount: {mount_err}");
    assert!(mount_err.contains(fragment), "{case}: mount: {mount_err}");
    assert_eq!(
        error_line(&check_err),
        error_line(&mount_err),
        "{case}: config check and mount refuse in other words"
    );
    assert_eq!(
        listing(watched),
        before,
        "{case}: mount wrote before refusing"
    );
}

/// Unmounts (lazily) a file system a test mounted, whatever happens.
struct Unmount(PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// `dir` bind-mounted over itself read-only (root): a read-only file
/// system that holds what `dir` held.
fn read_only(dir: &Path) -> Unmount {
    for args in [
        &["--bind", text(dir), text(dir)][..],
        &["-o", "remount,bind,ro", text(dir)],
    ] {
        let out = Command::new("mount").args(args).output().unwrap();
        assert!(out.status.success(), "mount {args:?}: {}", stderr(&out));
    }
    Unmount(dir.to_path_buf())
}

/// A kept log: a mount of `config` writes `bytes` bytes to a file with
/// nothing flushed (node-local, fast-all, no idle flush), then `sluice
/// unmount --keep`. Returns the tiers' temp dir.
fn kept_log(config: &str, bytes: usize) -> support::Mounted {
    let file = tempfile::NamedTempFile::new().unwrap();
    fs::write(file.path(), config).unwrap();
    let mut m = support::Mounted::new(&["--config", text(file.path()), "--policy", "fast-all"]);
    fs::write(m.path("f"), vec![0x5a; bytes]).unwrap();
    m.unmount(true);
    m
}

/// Issue 31: `sluice config check` passed setups that `sluice mount`
/// refused (`--metrics 0.0.0.0:9100` without `--metrics-public`, a fast
/// tier of mode 0777, a read-only fast tier, a changed `region_size` over
/// a kept log). Both now run one list of checks: every bad setup below is
/// refused by both, in the same words, and neither writes a byte first;
/// a good setup is accepted by both.
#[test]
fn config_check_refuses_every_setup_mount_refuses_issue_31() {
    if !support::fuse_available()
        || !support::required(is_root(), "root (bind mounts, chown, a second uid)")
    {
        return;
    }
    let small = "[log]\nregions = 4\nregion_size = \"1MiB\"\nrecord_max = \"256KiB\"\n\
                 [mount]\nconsistency = \"node-local\"\n[flush]\nidle = \"1h\"\nage = \"0s\"\n";

    // Fresh tiers and a mount point for each case.
    let fresh = || {
        let (dir, root) = tiers();
        let fast = root.join("fast");
        fs::set_permissions(&fast, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
        (dir, root)
    };
    let base = |root: &Path| -> Vec<String> {
        vec![
            "--fast".into(),
            text(&root.join("fast")).into(),
            "--capacity".into(),
            text(&root.join("capacity")).into(),
        ]
    };
    let watched = |root: &Path| [root.join("fast"), root.join("capacity")];

    // The four of the issue.
    {
        let (_d, root) = fresh();
        let mut args = base(&root);
        args.extend(["--metrics".into(), "0.0.0.0:9100".into()]);
        let w = watched(&root);
        both_refuse(
            "metrics not on loopback",
            &strs(&args),
            &root.join("mnt"),
            "--metrics-public",
            &[&w[0], &w[1]],
        );
    }
    {
        let (_d, root) = fresh();
        fs::set_permissions(
            root.join("fast"),
            std::os::unix::fs::PermissionsExt::from_mode(0o777),
        )
        .unwrap();
        let w = watched(&root);
        both_refuse(
            "fast tier mode 0777",
            &strs(&base(&root)),
            &root.join("mnt"),
            "chmod go-w",
            &[&w[0], &w[1]],
        );
    }
    {
        let (_d, root) = fresh();
        let _ro = read_only(&root.join("fast"));
        let w = watched(&root);
        both_refuse(
            "read-only fast tier",
            &strs(&base(&root)),
            &root.join("mnt"),
            "is on a read-only file system",
            &[&w[0], &w[1]],
        );
    }
    {
        let m = kept_log(small, 2 << 20);
        let config = m.dir.path().join("bigger.toml");
        fs::write(&config, small.replace("\"1MiB\"", "\"2MiB\"")).unwrap();
        let mut args = base(m.dir.path());
        args.extend(["--config".into(), text(&config).into()]);
        let (fast, capacity) = (m.fast(), m.capacity());
        both_refuse(
            "region_size changed over a kept log",
            &strs(&args),
            &m.point,
            "log.region_size = 1MiB",
            &[&fast, &capacity],
        );
        // Fewer regions than the kept log fills: region 2 and 3 would
        // never be recovered.
        let fewer = m.dir.path().join("fewer.toml");
        fs::write(&fewer, small.replace("regions = 4", "regions = 2")).unwrap();
        let mut args = base(m.dir.path());
        args.extend(["--config".into(), text(&fewer).into()]);
        both_refuse(
            "log.regions lowered over a kept log",
            &strs(&args),
            &m.point,
            "holds data but log.regions = 2",
            &[&fast, &capacity],
        );
    }

    // Every other refusal of `sluice mount` before it serves.
    let file = |root: &Path, name: &str, toml: &str| {
        let path = root.join(name);
        fs::write(&path, toml).unwrap();
        path
    };
    {
        let (_d, root) = fresh();
        let w = watched(&root);
        let mut cases: Vec<(&str, Vec<String>, PathBuf, &str)> = Vec::new();
        let unknown = file(&root, "unknown.toml", "[log]\nregion_sise = \"4MiB\"\n");
        let mut args = base(&root);
        args.extend(["--config".into(), text(&unknown).into()]);
        cases.push(("unknown key", args, root.join("mnt"), "region_sise"));
        let range = file(&root, "range.toml", "[log]\nregions = 1\n");
        let mut args = base(&root);
        args.extend(["--config".into(), text(&range).into()]);
        cases.push(("out-of-range value", args, root.join("mnt"), "log.regions"));
        let args = vec![
            "--fast".into(),
            text(&root.join("fast")).into(),
            "--capacity".into(),
            text(&root.join("capacty")).into(),
        ];
        cases.push(("missing capacity tier", args, root.join("mnt"), "--create"));
        fs::create_dir(root.join("capacity/inner")).unwrap();
        let args = vec![
            "--fast".into(),
            text(&root.join("capacity/inner")).into(),
            "--capacity".into(),
            text(&root.join("capacity")).into(),
        ];
        cases.push((
            "fast tier inside capacity",
            args,
            root.join("mnt"),
            "is inside",
        ));
        fs::remove_dir(root.join("capacity/inner")).unwrap();
        cases.push((
            "mount point inside capacity",
            base(&root),
            root.join("capacity"),
            "mount.point",
        ));
        fs::write(root.join("plain"), b"").unwrap();
        cases.push((
            "mount point not a directory",
            base(&root),
            root.join("plain"),
            "is not a directory",
        ));
        cases.push((
            "missing mount point",
            base(&root),
            root.join("nowhere"),
            "mount point",
        ));
        for (case, args, point, fragment) in cases {
            both_refuse(case, &strs(&args), &point, fragment, &[&w[0], &w[1]]);
        }
    }
    {
        let (_d, root) = fresh();
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = taken.local_addr().unwrap().to_string();
        let mut args = base(&root);
        args.extend(["--metrics".into(), addr.clone()]);
        let w = watched(&root);
        both_refuse(
            "metrics address in use",
            &strs(&args),
            &root.join("mnt"),
            &format!("metrics endpoint {addr}"),
            &[&w[0], &w[1]],
        );
    }
    {
        let (_d, root) = fresh();
        std::os::unix::fs::chown(root.join("fast"), Some(65534), Some(65534)).unwrap();
        let w = watched(&root);
        both_refuse(
            "fast tier of another user",
            &strs(&base(&root)),
            &root.join("mnt"),
            "belongs to uid 65534",
            &[&w[0], &w[1]],
        );
    }
    {
        let (_d, root) = fresh();
        fs::write(root.join("fast/log"), b"").unwrap();
        let w = watched(&root);
        both_refuse(
            "log not a directory",
            &strs(&base(&root)),
            &root.join("mnt"),
            "`log` exists and is not a directory",
            &[&w[0], &w[1]],
        );
        fs::remove_file(root.join("fast/log")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", root.join("fast/sluice.lock")).unwrap();
        both_refuse(
            "lock file a link",
            &strs(&base(&root)),
            &root.join("mnt"),
            "sluice.lock is not a regular file",
            &[&w[0], &w[1]],
        );
    }

    // Live mounts: the fast tier held by another mount, a live mount
    // point, a dead one.
    {
        let m = support::Mounted::new(&[]);
        let (fast, capacity) = (m.fast(), m.capacity());
        let other = m.dir.path().join("mnt2");
        fs::create_dir(&other).unwrap();
        both_refuse(
            "fast tier held by a live mount",
            &strs(&base(m.dir.path())),
            &other,
            "in use by another sluice mount",
            &[&capacity],
        );
        let (_d, root) = fresh();
        let w = watched(&root);
        both_refuse(
            "live mount point",
            &strs(&base(&root)),
            &m.point,
            "already mounted",
            &[&w[0], &w[1]],
        );
        assert!(support::is_mounted(&m.point), "the live mount serves on");
        assert!(fast.join("sluice.sock").exists());
    }
    {
        let mut m = support::Mounted::new(&[]);
        let mut child = m.child.take().unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
        let (_d, root) = fresh();
        let w = watched(&root);
        both_refuse(
            "dead mount point",
            &strs(&base(&root)),
            &m.point,
            &format!("fusermount3 -u {}", m.point.display()),
            &[&w[0], &w[1]],
        );
    }

    // What both accept: a good setup.
    {
        let (_d, root) = fresh();
        let check = sluice(
            &[
                &["config", "check"][..],
                &strs(&base(&root)),
                &[text(&root.join("mnt"))],
            ]
            .concat(),
        );
        assert!(check.status.success(), "{}", stderr(&check));
        let said = String::from_utf8_lossy(&check.stdout);
        assert!(said.starts_with("ok: this config can mount at"), "{said}");
        assert!(!said.contains("read-only"), "{said}");
        let mut m = support::Mounted::unstarted(&[]);
        m.start();
        m.unmount(false);
    }
}

/// Issue 31: a read-only capacity tier is served read-only: `config
/// check` says so, the mount is `ro` (the kernel answers EROFS to every
/// change), lists what is there and logs it once at WARN.
#[test]
fn a_read_only_capacity_tier_is_served_read_only_issue_31() {
    if !support::fuse_available() || !support::required(is_root(), "root (a read-only bind mount)")
    {
        return;
    }
    let base = |root: &Path| -> Vec<String> {
        vec![
            "--fast".into(),
            text(&root.join("fast")).into(),
            "--capacity".into(),
            text(&root.join("capacity")).into(),
        ]
    };
    let mut m = support::Mounted::unstarted(&[]);
    fs::write(m.capacity().join("existing"), b"old").unwrap();
    let _ro = read_only(&m.capacity());
    let check = sluice(
        &[
            &["config", "check"][..],
            &strs(&base(m.dir.path())),
            &[text(&m.point)],
        ]
        .concat(),
    );
    assert!(check.status.success(), "{}", stderr(&check));
    let said = String::from_utf8_lossy(&check.stdout);
    assert!(
        said.contains("capacity tier read-only: the mount will be read-only"),
        "{said}"
    );
    m.start();
    let mounts = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let options = mounts
        .lines()
        .find(|l| l.split(' ').nth(4) == Some(text(&m.point)))
        .and_then(|l| l.split(' ').nth(5))
        .unwrap_or_default()
        .to_string();
    assert!(options.split(',').any(|o| o == "ro"), "mounted {options}");
    const EROFS: i32 = 30;
    for (what, result) in [
        ("create", fs::write(m.path("new"), b"x")),
        ("mkdir", fs::create_dir(m.path("dir"))),
        ("unlink", fs::remove_file(m.path("existing"))),
    ] {
        let error = result.expect_err(what);
        assert_eq!(error.raw_os_error(), Some(EROFS), "{what}: {error}");
    }
    let names: Vec<_> = fs::read_dir(&m.point)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["existing"], "listed");
    let log = m.log();
    let warned: Vec<_> = log
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("read-only"))
        .collect();
    assert_eq!(warned.len(), 1, "logged once at WARN: {log}");
    m.unmount(false);
    assert_eq!(fs::read(m.capacity().join("existing")).unwrap(), b"old");
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}
