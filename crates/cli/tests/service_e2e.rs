//! sluice as a service (issue 21 deliverable 6), end to end: the shipped
//! systemd unit (checked by `systemd-analyze verify`, its ExecStart and
//! ExecStop run as written), `sluice mount --daemon` (returns once the
//! mount is live; a bad config or a failed mount is an error on stderr with
//! nothing mounted), and the fstab path: `mount -t fuse.TYPE` and
//! `mount -T FSTAB` through util-linux's mount and fuse3's mount.fuse3.
//!
//! They need /dev/fuse and fusermount3, the mount(8) tests also root and
//! mount.fuse3, the unit test systemd-analyze (`scripts/setup.sh` installs
//! fuse3 and systemd). Without them the tests fail under CI=true and are
//! skipped with a message otherwise.

// Tests wait for mounts and processes by wall clock.
#![allow(clippy::disallowed_methods)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

mod support;

use support::{fuse_available, is_mounted, required, SLUICE};

const UNIT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../contrib/systemd/sluice@.service"
);

/// Fresh tiers and a mount point in a temp dir.
struct Tiers {
    dir: tempfile::TempDir,
}

impl Tiers {
    fn new() -> Tiers {
        let dir = support::tempdir();
        for d in ["fast", "capacity", "mnt"] {
            fs::create_dir_all(dir.path().join(d)).unwrap();
        }
        Tiers { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn point(&self) -> PathBuf {
        self.path("mnt")
    }

    /// A config file naming the tiers and the mount point.
    fn config(&self) -> PathBuf {
        let config = self.path("sluice.toml");
        fs::write(
            &config,
            format!(
                "[fast]\npath = {:?}\n[capacity]\npath = {:?}\n[mount]\npoint = {:?}\n",
                self.path("fast"),
                self.path("capacity"),
                self.point()
            ),
        )
        .unwrap();
        config
    }

    /// A file written through the mount reads back, and is on the
    /// capacity tier once unmounted (drained).
    fn write_and_read(&self) {
        let file = self.point().join("hello.txt");
        fs::write(&file, b"through the service\n").unwrap();
        assert_eq!(fs::read(&file).unwrap(), b"through the service\n");
    }

    fn unmount(&self) {
        let out = Command::new(SLUICE)
            .arg("unmount")
            .arg(self.point())
            .output()
            .unwrap();
        assert!(out.status.success(), "sluice unmount: {}", text(&out));
        assert!(!is_mounted(&self.point()));
        assert_eq!(
            fs::read(self.path("capacity").join("hello.txt")).unwrap(),
            b"through the service\n",
            "drained to the capacity tier"
        );
    }
}

impl Drop for Tiers {
    fn drop(&mut self) {
        if is_mounted(&self.point()) {
            let _ = Command::new("fusermount3")
                .args(["-u", "-z"])
                .arg(self.point())
                .status();
        }
    }
}

fn text(out: &Output) -> String {
    format!(
        "{}; stdout: {}; stderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The daemon's pid, from the `mount daemon started ... pid=N` line.
fn daemon_pid(stderr: &str) -> u32 {
    let line = stderr
        .lines()
        .find(|l| l.contains("mount daemon started"))
        .unwrap_or_else(|| panic!("no start line in {stderr:?}"));
    let pid = line
        .split("pid=")
        .nth(1)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap();
    pid.parse().unwrap()
}

/// Waits for the (not our child) daemon to exit, then checks its log says
/// it unmounted and no error.
fn daemon_ended_cleanly(pid: u32, log: &Path) {
    let start = Instant::now();
    while Path::new(&format!("/proc/{pid}")).exists() {
        // A zombie of an adopted process is reaped by init; "Z" counts as gone.
        let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        if stat.split_whitespace().nth(2) == Some("Z") {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "daemon {pid} still running"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let log = fs::read_to_string(log).unwrap();
    assert!(log.contains("unmounted: drained"), "{log}");
    assert!(!log.contains("sluice: error"), "{log}");
}

#[test]
fn daemon_returns_once_the_mount_is_live_and_unmount_ends_it() {
    if !fuse_available() {
        return;
    }
    let tiers = Tiers::new();
    let log = tiers.path("daemon.log");
    let out = Command::new(SLUICE)
        .args(["mount", "--daemon", "--log-file"])
        .arg(&log)
        .arg("--fast")
        .arg(tiers.path("fast"))
        .arg("--capacity")
        .arg(tiers.path("capacity"))
        .arg(tiers.point())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    // No waiting: the mount is live when --daemon returns.
    assert!(
        is_mounted(&tiers.point()),
        "not mounted when --daemon returned"
    );
    let pid = daemon_pid(&String::from_utf8_lossy(&out.stderr));
    tiers.write_and_read();
    tiers.unmount();
    daemon_ended_cleanly(pid, &log);
}

#[test]
fn daemon_with_a_bad_config_fails_on_stderr_and_mounts_nothing() {
    if !fuse_available() {
        return;
    }
    let tiers = Tiers::new();
    let log = tiers.path("daemon.log");
    // A fast tier that does not exist: refused before any child starts.
    let out = Command::new(SLUICE)
        .args(["mount", "--daemon", "--log-file"])
        .arg(&log)
        .arg("--fast")
        .arg(tiers.path("no-such-fast"))
        .arg("--capacity")
        .arg(tiers.path("capacity"))
        .arg(tiers.point())
        .output()
        .unwrap();
    assert!(!out.status.success(), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no-such-fast does not exist"), "{stderr}");
    assert!(!is_mounted(&tiers.point()));
    // A mount point that does not exist: refused by the checks `sluice
    // config check` runs too, before any child starts (issue 31).
    let missing = tiers.path("no-such-mnt");
    let out = Command::new(SLUICE)
        .args(["mount", "--daemon", "--log-file"])
        .arg(&log)
        .arg("--fast")
        .arg(tiers.path("fast"))
        .arg("--capacity")
        .arg(tiers.path("capacity"))
        .arg(&missing)
        .output()
        .unwrap();
    assert!(!out.status.success(), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("mount point {}", missing.display())),
        "{stderr}"
    );
    assert!(!stderr.contains("did not come up"), "{stderr}");
    // A catalogue file that is no catalogue passes the checks (they do not
    // open it): the daemon's mount fails, and its error comes back on
    // stderr, with the log's name.
    fs::write(tiers.path("fast/catalog.redb"), b"not a redb file").unwrap();
    let out = Command::new(SLUICE)
        .args(["mount", "--daemon", "--log-file"])
        .arg(&log)
        .arg("--fast")
        .arg(tiers.path("fast"))
        .arg("--capacity")
        .arg(tiers.path("capacity"))
        .arg(tiers.point())
        .output()
        .unwrap();
    assert!(!out.status.success(), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("did not come up"), "{stderr}");
    assert!(stderr.contains("catalog.redb"), "{stderr}");
    assert!(stderr.contains(&log.display().to_string()), "{stderr}");
    assert!(!is_mounted(&tiers.point()) && !is_mounted(&missing));
}

/// A link to the sluice under test named `sluice-test-PID` in
/// /usr/local/sbin, one of the directories mount.fuse3 finds the program
/// of `-t fuse.TYPE` in (mount(8) resets PATH), removed on drop. A name of
/// its own keeps an installed sluice and other test runs untouched.
struct Helper {
    link: PathBuf,
}

impl Helper {
    fn install() -> Option<Helper> {
        let root = Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| o.stdout == b"0\n");
        let helper =
            Path::new("/sbin/mount.fuse3").exists() || Path::new("/usr/sbin/mount.fuse3").exists();
        if !required(
            root && helper,
            "root or mount.fuse3 (the mount(8) tests need both)",
        ) {
            return None;
        }
        fs::create_dir_all("/usr/local/sbin").unwrap();
        let link = PathBuf::from(format!(
            "/usr/local/sbin/sluice-test-{}",
            std::process::id()
        ));
        let _ = fs::remove_file(&link);
        std::os::unix::fs::symlink(SLUICE, &link).unwrap();
        Some(Helper { link })
    }

    fn fs_type(&self) -> String {
        format!("fuse.{}", self.link.file_name().unwrap().to_string_lossy())
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.link);
    }
}

/// `path` as a field of an fstab line: space, tab, newline and backslash
/// as octal escapes (`\040`), which mount(8) reads back (a temp dir may
/// have a space in its name).
fn fstab_escape(path: &Path) -> String {
    let mut out = String::new();
    for c in path.display().to_string().chars() {
        match c {
            ' ' | '\t' | '\n' | '\\' => out.push_str(&format!("\\{:03o}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

#[test]
fn mount_t_fuse_sluice_and_an_fstab_line_mount_through_mount_fuse3() {
    if !fuse_available() {
        return;
    }
    let Some(helper) = Helper::install() else {
        return;
    };
    let tiers = Tiers::new();
    let config = tiers.config();
    let log = tiers.path("daemon.log");

    // `mount -t fuse.sluice CONFIG MOUNTPOINT -o OPTIONS`, the config as
    // the source; mount's own options (noauto, _netdev) pass.
    let out = Command::new("mount")
        .args(["-t", &helper.fs_type()])
        .arg(&config)
        .arg(tiers.point())
        .arg("-o")
        .arg(format!("log_file={},noauto,_netdev,nofail", log.display()))
        .output()
        .unwrap();
    assert!(out.status.success(), "mount -t: {}", text(&out));
    assert!(
        is_mounted(&tiers.point()),
        "not mounted when mount(8) returned"
    );
    let pid = daemon_pid(&String::from_utf8_lossy(&out.stderr));
    tiers.write_and_read();
    tiers.unmount();
    daemon_ended_cleanly(pid, &log);

    // The same through an fstab line (`mount -T FILE MOUNTPOINT` reads FILE
    // as /etc/fstab), tiers given as options and no config file.
    fs::remove_file(tiers.path("capacity").join("hello.txt")).unwrap();
    let fstab = tiers.path("fstab");
    fs::write(
        &fstab,
        format!(
            "sluice {} {} fast={},capacity={},log_file={},noauto,x-systemd.requires=network-online.target 0 0\n",
            fstab_escape(&tiers.point()),
            helper.fs_type(),
            fstab_escape(&tiers.path("fast")),
            fstab_escape(&tiers.path("capacity")),
            fstab_escape(&log)
        ),
    )
    .unwrap();
    let out = Command::new("mount")
        .arg("-T")
        .arg(&fstab)
        .arg(tiers.point())
        .output()
        .unwrap();
    assert!(out.status.success(), "mount -T: {}", text(&out));
    assert!(is_mounted(&tiers.point()));
    let pid = daemon_pid(&String::from_utf8_lossy(&out.stderr));
    tiers.write_and_read();
    tiers.unmount();
    daemon_ended_cleanly(pid, &log);

    // A misspelt option fails mount(8) with sluice's message; nothing mounted.
    let out = Command::new("mount")
        .args(["-t", &helper.fs_type()])
        .arg(&config)
        .arg(tiers.point())
        .args(["-o", "fsat=/nowhere"])
        .output()
        .unwrap();
    assert!(!out.status.success(), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("unknown mount option \"fsat=/nowhere\""),
        "{stderr}"
    );
    assert!(!is_mounted(&tiers.point()));
}

/// The unit's `KEY=` line.
fn unit_line(unit: &str, key: &str) -> String {
    unit.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no {key}= in the unit"))
        .to_string()
}

#[test]
fn the_systemd_unit_passes_systemd_analyze_verify() {
    let available = Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !required(available, "systemd-analyze (install systemd)") {
        return;
    }
    let unit = fs::read_to_string(UNIT).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let verify = |binary: &str| {
        // An instance named as `systemctl enable sluice@mnt-scratch` would.
        let path = dir.path().join("sluice@mnt-scratch.service");
        // Quoted, as systemd reads a word with a blank (a checkout path).
        let quoted = format!("\"{binary}\"");
        fs::write(&path, unit.replace("/usr/local/bin/sluice", &quoted)).unwrap();
        Command::new("systemd-analyze")
            .arg("verify")
            .arg(&path)
            .output()
            .unwrap()
    };
    let out = verify(SLUICE);
    assert!(out.status.success(), "{}", text(&out));
    assert!(out.stderr.is_empty(), "{}", text(&out));
    // The check can fail: a binary that is not there is refused.
    let out = verify("/nonexistent/sluice");
    assert!(!out.status.success(), "{}", text(&out));
    assert_eq!(unit_line(&unit, "Type"), "simple");
}

#[test]
fn the_systemd_units_exec_start_and_exec_stop_mount_and_unmount() {
    if !fuse_available() {
        return;
    }
    let unit = fs::read_to_string(UNIT).unwrap();
    let tiers = Tiers::new();
    let config = tiers.config();
    // systemd's specifiers: %i the instance (the config's name), %f the
    // mount point; /etc/sluice stands for our temp dir.
    // Split into words first, as systemd does before it expands
    // specifiers: a path with a space stays one argument.
    let expand = |key: &str| -> Vec<String> {
        unit_line(&unit, key)
            .split_whitespace()
            .map(|word| {
                word.replace("/etc/sluice/%i.toml", &config.display().to_string())
                    .replace("%f", &tiers.point().display().to_string())
            })
            .collect()
    };
    let start = expand("ExecStart");
    let stop = expand("ExecStop");
    assert_eq!(start[0], "/usr/local/bin/sluice");
    assert_eq!(stop[0], "/usr/local/bin/sluice");
    let mut service = Command::new(SLUICE)
        .args(&start[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(fs::File::create(tiers.path("journal")).unwrap())
        .spawn()
        .unwrap();
    let begun = Instant::now();
    while !is_mounted(&tiers.point()) {
        if let Some(status) = service.try_wait().unwrap() {
            panic!(
                "ExecStart exited {status}: {}",
                fs::read_to_string(tiers.path("journal")).unwrap()
            );
        }
        assert!(
            begun.elapsed() < Duration::from_secs(20),
            "ExecStart did not mount"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    tiers.write_and_read();
    let out = Command::new(SLUICE).args(&stop[1..]).output().unwrap();
    assert!(out.status.success(), "ExecStop: {}", text(&out));
    let status = service.wait().unwrap();
    assert!(
        status.success(),
        "ExecStart exited {status}: {}",
        fs::read_to_string(tiers.path("journal")).unwrap()
    );
    assert!(!is_mounted(&tiers.point()));
    assert_eq!(
        fs::read(tiers.path("capacity").join("hello.txt")).unwrap(),
        b"through the service\n"
    );
}
