//! End-to-end tests through a real FUSE mount (`sluice mount` as a child
//! process, fuse3's fusermount3): a data exerciser against an in-memory
//! model, fio with --verify from several processes, kill -9 of the mount
//! during fsync'd writes, unmount without drain and recovery, permissions
//! with allow_other and a second uid, links/xattrs, fallocate's modes (and
//! an exerciser of them against a model), FUSE
//! passthrough, status and the metrics endpoint (and that it exports what
//! the Grafana dashboard queries).
//!
//! They need /dev/fuse and fusermount3 (`scripts/setup.sh` installs
//! fuse3). Without them the tests fail under CI=true and are skipped with a
//! message otherwise.

// Tests wait for mounts and processes by wall clock.
#![allow(clippy::disallowed_methods)]

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod support;

use support::{
    exact_change_times, fuse_available, is_mounted, mounts_at, others_reach_temp_dirs, Mounted,
    Rng, SLUICE,
};

/// A loopback address with a port free right now (for `--metrics`).
fn free_local_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    format!("127.0.0.1:{}", l.local_addr().unwrap().port())
}

/// Send one raw HTTP request to `addr` and return the whole answer.
fn http(addr: &str, request: &[u8]) -> String {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.write_all(request).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

fn config_file(dir: &Path, text: &str) -> String {
    let path = dir.join("sluice.toml");
    fs::write(&path, text).unwrap();
    path.display().to_string()
}

#[test]
fn exerciser_matches_an_in_memory_model() {
    if !fuse_available() {
        return;
    }
    let setup = tempfile::tempdir().unwrap();
    // Small regions so the run fills, flushes and reuses them.
    let config = config_file(
        setup.path(),
        "[log]\nregions = 3\nregion_size = \"2MiB\"\nrecord_max = \"256KiB\"\n[policy]\nstream_len = 16\n",
    );
    let mut m = Mounted::new(&["--config", &config]);
    let names = ["a", "b", "dir/c", "dir/d"];
    fs::create_dir(m.path("dir")).unwrap();
    let mut model: HashMap<String, Vec<u8>> = HashMap::new();
    let mut rng = Rng(0x5eed_1234);
    for step in 0..600u64 {
        let name = names[rng.below(names.len() as u64) as usize].to_string();
        let path = m.path(&name);
        match rng.below(10) {
            0..=4 => {
                // Write: random or sequential-ish offsets, varied sizes.
                let len = [1u64, 100, 4096, 65536, 200_000][rng.below(5) as usize];
                let cur = model.get(&name).map_or(0, Vec::len) as u64;
                let offset = if rng.below(2) == 0 {
                    cur
                } else {
                    rng.below(1 << 20)
                };
                let data: Vec<u8> = (0..len).map(|i| (step as u8) ^ (i as u8) | 1).collect();
                let f = OpenOptions::new()
                    .create(true)
                    .write(true)
                    .truncate(false)
                    .open(&path)
                    .unwrap();
                f.write_all_at(&data, offset).unwrap();
                let content = model.entry(name).or_default();
                let end = (offset + len) as usize;
                if content.len() < end {
                    content.resize(end, 0);
                }
                content[offset as usize..end].copy_from_slice(&data);
            }
            5 => {
                // Read a random range and compare.
                let Some(content) = model.get(&name) else {
                    continue;
                };
                let mut f = File::open(&path).unwrap();
                let mut got = Vec::new();
                f.read_to_end(&mut got).unwrap();
                assert!(
                    got == *content,
                    "step {step}: {name} differs ({} vs {} bytes)",
                    got.len(),
                    content.len()
                );
            }
            6 => {
                let Some(content) = model.get_mut(&name) else {
                    continue;
                };
                let size = rng.below(content.len() as u64 + 100_000);
                OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .unwrap()
                    .set_len(size)
                    .unwrap();
                content.resize(size as usize, 0);
            }
            7 => {
                let other = names[rng.below(names.len() as u64) as usize].to_string();
                if other == name || !model.contains_key(&name) {
                    continue;
                }
                fs::rename(&path, m.path(&other)).unwrap();
                let content = model.remove(&name).unwrap();
                model.insert(other, content);
            }
            8 => {
                if model.contains_key(&name) {
                    File::open(&path).unwrap().sync_all().unwrap();
                }
            }
            _ => {
                if model.remove(&name).is_some() {
                    fs::remove_file(&path).unwrap();
                }
            }
        }
    }
    for (name, content) in &model {
        assert!(
            fs::read(m.path(name)).unwrap() == *content,
            "{name} before unmount"
        );
    }
    let status = m.sluice(&["status", m.point.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(
        status.status.success() && text.contains("regions"),
        "{text}"
    );
    m.unmount(false);
    // Drained: the capacity directory alone holds the model.
    for (name, content) in &model {
        assert!(
            fs::read(m.capacity().join(name)).unwrap() == *content,
            "{name} on the capacity tier"
        );
    }
    for name in names {
        if !model.contains_key(name) {
            assert!(!m.capacity().join(name).exists(), "{name} was removed");
        }
    }
}

#[test]
fn fio_sequential_and_random_writes_verify_from_several_processes() {
    if !fuse_available() {
        return;
    }
    if Command::new("fio").arg("--version").output().is_err() {
        assert!(std::env::var_os("CI").is_none(), "CI: fio is required");
        eprintln!("skipped: no fio");
        return;
    }
    let mut m = Mounted::new(&[]);
    for (name, rw, bs) in [("seq", "write", "1M"), ("rand", "randwrite", "256k")] {
        // fio saves its verify state in its working directory: the
        // test's own temp dir, not the source tree.
        let out = Command::new("fio")
            .current_dir(m.dir.path())
            .args([
                &format!("--name={name}"),
                &format!("--directory={}", m.point.display()),
                &format!("--rw={rw}"),
                &format!("--bs={bs}"),
                "--size=16M",
                "--numjobs=4",
                "--ioengine=psync",
                "--verify=crc32c",
                "--do_verify=1",
                "--verify_fatal=1",
                "--end_fsync=1",
                "--group_reporting",
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "fio {name}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(!text.contains("verify: bad"), "{text}");
    }
    m.unmount(false);
}

#[test]
fn unmount_without_drain_leaves_data_for_the_next_mount() {
    if !fuse_available() {
        return;
    }
    // node-local: close and fsync leave the bytes in the log (under the
    // default close-to-open they would be on the capacity tier already).
    let setup = tempfile::tempdir().unwrap();
    let config = config_file(setup.path(), "[mount]\nconsistency = \"node-local\"\n");
    let mut m = Mounted::new(&["--policy", "fast-all", "--config", &config]);
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    {
        let mut f = File::create(m.path("kept")).unwrap();
        f.write_all(&data).unwrap();
        f.sync_all().unwrap();
    }
    m.unmount(true);
    let on_capacity = fs::read(m.capacity().join("kept")).unwrap_or_default();
    assert!(
        on_capacity != data,
        "the data stayed in the log, not on the capacity tier"
    );
    m.start();
    let status = m.sluice(&["status", "--json", m.point.to_str().unwrap()]);
    let json = String::from_utf8_lossy(&status.stdout);
    assert!(json.contains("\"recovered_records\""), "{json}");
    assert!(
        !json.contains("\"recovered_records\":0"),
        "records were recovered: {json}"
    );
    assert!(fs::read(m.path("kept")).unwrap() == data);
    m.unmount(false);
    assert!(fs::read(m.capacity().join("kept")).unwrap() == data);
}

#[test]
fn allow_other_enforces_modes_for_a_second_uid() {
    if !second_uid_available() {
        return;
    }
    let mut m = Mounted::new(&["--allow-other"]);
    fs::write(m.path("secret"), b"root only").unwrap();
    fs::set_permissions(m.path("secret"), fs::Permissions::from_mode(0o600)).unwrap();
    fs::write(m.path("public"), b"everyone").unwrap();
    fs::set_permissions(m.path("public"), fs::Permissions::from_mode(0o644)).unwrap();
    fs::create_dir(m.path("shared")).unwrap();
    fs::set_permissions(m.path("shared"), fs::Permissions::from_mode(0o777)).unwrap();
    // The temp dir above the mount point must be traversable by uid 65534.
    fs::set_permissions(m.dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let p = |n: &str| sh_quote(&m.path(n).display().to_string());
    let out = as_nobody(&format!("cat {}", p("secret")));
    assert!(!out.status.success(), "uid 65534 read a 0600 root file");
    assert!(String::from_utf8_lossy(&out.stderr).contains("Permission denied"));
    let out = as_nobody(&format!("cat {}", p("public")));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "everyone");
    let out = as_nobody(&format!("echo x > {}", p("nobody-in-root-dir")));
    assert!(
        !out.status.success(),
        "uid 65534 created a file in a 0755 root dir"
    );
    let out = as_nobody(&format!("echo mine > {}/mine", p("shared")));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta = fs::metadata(m.path("shared/mine")).unwrap();
    assert_eq!(
        (meta.uid(), meta.gid()),
        (65534, 65534),
        "new files belong to their creator"
    );
    assert_eq!(
        fs::metadata(m.capacity().join("shared/mine"))
            .unwrap()
            .uid(),
        65534,
        "on the capacity tier too"
    );
    m.unmount(false);
}

/// Runs `script` with `sh -c` as uid/gid 65534 without supplementary
/// groups or capabilities, in `/` and with that user's own environment
/// (`--reset-env`: its HOME and PATH, not ours), so nothing it does
/// depends on our working directory (the checkout) or ours. Paths in
/// `script` must be under `support::temp_base()` and quoted (`sh_quote`).
fn as_nobody(script: &str) -> std::process::Output {
    Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--reset-env",
            "sh",
            "-c",
            script,
        ])
        .current_dir("/")
        .output()
        .unwrap()
}

/// FUSE is here, we are root, and uid 65534 can reach the tests' temp
/// dirs; otherwise says why the test is skipped (fails under CI).
fn second_uid_available() -> bool {
    fuse_available_as_root("needs root to switch uid") && others_reach_temp_dirs()
}

/// The permission bits (`st_mode & 0o7777`) of `path`, not following a link.
fn mode_of(path: &Path) -> u32 {
    fs::symlink_metadata(path).unwrap().mode() & 0o7777
}

/// Issue: SUID/SGID were kept on a write by a process without CAP_FSETID
/// (ext4 clears them). Through an `--allow-other` mount, uid 65534 writes
/// and truncates root's set-ID files, and writes its own; root's writes
/// (it has CAP_FSETID) keep the bits.
#[test]
fn suid_sgid_kept_on_write_by_non_owner() {
    if !second_uid_available() {
        return;
    }
    let mut m = Mounted::new(&["--allow-other"]);
    fs::set_permissions(m.dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    for (name, mode) in [
        ("suid", 0o4777),
        ("sgid", 0o2777),
        ("truncated", 0o6777),
        ("root-writes", 0o6777),
    ] {
        fs::write(m.path(name), b"data").unwrap();
        fs::set_permissions(m.path(name), fs::Permissions::from_mode(mode)).unwrap();
        assert_eq!(mode_of(&m.path(name)), mode, "{name} set up");
    }
    fs::create_dir(m.path("shared")).unwrap();
    fs::set_permissions(m.path("shared"), fs::Permissions::from_mode(0o777)).unwrap();
    let p = |n: &str| sh_quote(&m.path(n).display().to_string());
    let out = as_nobody(&format!(
        "printf x >> {} && printf x >> {} && truncate -s 1 {} && \
         printf a > {own} && chmod 6755 {own} && printf b >> {own}",
        p("suid"),
        p("sgid"),
        p("truncated"),
        own = p("shared/own"),
    ));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(mode_of(&m.path("suid")), 0o777, "write clears S_ISUID");
    assert_eq!(
        mode_of(&m.path("sgid")),
        0o777,
        "write clears S_ISGID of a group-executable file"
    );
    assert_eq!(mode_of(&m.path("truncated")), 0o777, "truncate clears both");
    assert_eq!(
        mode_of(&m.path("shared/own")),
        0o755,
        "the owner without CAP_FSETID loses them too, as on ext4"
    );
    assert_eq!(
        mode_of(&m.capacity().join("suid")),
        0o777,
        "on the capacity tier too"
    );
    assert_eq!(fs::read(m.path("suid")).unwrap(), b"datax");
    // Root has CAP_FSETID: its writes and truncates keep the bits.
    {
        let mut f = OpenOptions::new()
            .append(true)
            .open(m.path("root-writes"))
            .unwrap();
        f.write_all(b"more").unwrap();
        f.set_len(2).unwrap();
    }
    assert_eq!(mode_of(&m.path("root-writes")), 0o6777);
    m.unmount(false);
}

/// Issue: reopening an existing file failed with ENOENT now and then: a
/// FORGET of the earlier lookups, handled on one mount thread while
/// another was answering a new LOOKUP of the same path, dropped the node
/// the LOOKUP then handed out, and the OPEN of it got ENOENT. Here the
/// kernel is made to forget (dropping its dentry and inode caches) while
/// threads keep reopening the same files.
#[test]
fn reopen_enoent_after_forget_races_a_lookup() {
    if !fuse_available_as_root("needs root to drop the kernel's caches") {
        return;
    }
    let mut m = Mounted::new(&["--threads", "4"]);
    let names = ["a", "b", "c", "d"];
    for name in names {
        fs::write(m.path(name), name.as_bytes()).unwrap();
    }
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                // 2: reclaim dentries and inodes, so the kernel FORGETs.
                let _ = fs::write("/proc/sys/vm/drop_caches", "2");
                std::thread::sleep(Duration::from_micros(200));
            }
        });
        let workers: Vec<_> = (0..3)
            .map(|t| {
                let m = &m;
                scope.spawn(move || {
                    for i in 0..6000 {
                        let name = names[(i + t) % names.len()];
                        let got = fs::read(m.path(name))
                            .unwrap_or_else(|e| panic!("reopen {i} of {name}: {e}"));
                        assert_eq!(got, name.as_bytes());
                    }
                })
            })
            .collect();
        let results: Vec<_> = workers.into_iter().map(|w| w.join()).collect();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for result in results {
            if let Err(panic) = result {
                std::panic::resume_unwind(panic);
            }
        }
    });
    m.unmount(false);
}

/// Unmounts a file system this test mounted (lazily, so a busy one goes
/// too), whatever happens in the test.
struct MountGuard(PathBuf);

impl Drop for MountGuard {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

fn run(command: &mut Command) -> std::process::Output {
    let out = command.output().unwrap();
    assert!(
        out.status.success(),
        "{command:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Issue: a create on a read-only capacity tier returned EIO (mkdir got
/// EROFS). Every create-like operation must say EROFS.
#[test]
fn create_on_read_only_capacity_is_eio() {
    if !fuse_available_as_root("needs root to mount a tmpfs") {
        return;
    }
    let mut m = Mounted::unstarted(&[]);
    fs::create_dir_all(m.capacity()).unwrap();
    run(Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=16m", "sluice-test"])
        .arg(m.capacity()));
    let _tmpfs = MountGuard(m.capacity());
    fs::write(m.capacity().join("existing"), b"old").unwrap();
    m.start();
    run(Command::new("mount")
        .args(["-o", "remount,ro"])
        .arg(m.capacity()));
    const EROFS: i32 = 30;
    let errno = |result: std::io::Result<()>, what: &str| {
        let error = result.expect_err(what);
        assert_eq!(error.raw_os_error(), Some(EROFS), "{what}: {error}");
    };
    errno(File::create(m.path("new")).map(drop), "create");
    errno(
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(m.path("new2"))
            .map(drop),
        "open O_CREAT|O_EXCL",
    );
    errno(fs::create_dir(m.path("dir")), "mkdir");
    errno(
        std::os::unix::fs::symlink("existing", m.path("link")),
        "symlink",
    );
    errno(
        std::os::unix::net::UnixListener::bind(m.path("sock")).map(drop),
        "bind (mknod of a socket)",
    );
    let out = Command::new("mkfifo").arg(m.path("fifo")).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("Read-only file system"),
        "mkfifo: {stderr}"
    );
    assert_eq!(
        fs::read(m.capacity().join("existing")).unwrap(),
        b"old",
        "nothing changed"
    );
    m.unmount(false);
}

/// Issue: FIFOs, sockets and device nodes were refused through the mount,
/// and a socket already on the capacity tier showed as a FIFO. They are
/// made on the capacity tier with the caller's mode and owner, and stat
/// and readdir report their real type.
#[test]
fn fifos_sockets_and_devices_refused_socket_shown_as_fifo() {
    use std::os::unix::fs::FileTypeExt;
    if !fuse_available_as_root("needs root for device nodes and a second uid")
        || !others_reach_temp_dirs()
    {
        return;
    }
    let mut m = Mounted::new(&["--allow-other"]);
    fs::set_permissions(m.dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    // A socket made on the capacity tier behind the mount's back.
    let outside = std::os::unix::net::UnixListener::bind(m.capacity().join("outside")).unwrap();
    run(Command::new("mkfifo")
        .args(["-m", "0640"])
        .arg(m.path("fifo")));
    run(Command::new("mknod")
        .args(["-m", "0600"])
        .arg(m.path("null"))
        .args(["c", "1", "3"]));
    run(Command::new("mknod")
        .arg(m.path("loop"))
        .args(["b", "7", "0"]));
    let inside = std::os::unix::net::UnixListener::bind(m.path("sock")).unwrap();
    let kind = |name: &str| fs::symlink_metadata(m.path(name)).unwrap().file_type();
    assert!(kind("outside").is_socket(), "{:?}", kind("outside"));
    assert!(kind("fifo").is_fifo(), "{:?}", kind("fifo"));
    assert!(kind("null").is_char_device(), "{:?}", kind("null"));
    assert!(kind("loop").is_block_device(), "{:?}", kind("loop"));
    assert!(kind("sock").is_socket(), "{:?}", kind("sock"));
    let rdev = |path: PathBuf| fs::symlink_metadata(path).unwrap().rdev();
    assert_eq!(rdev(m.path("null")), rdev(PathBuf::from("/dev/null")));
    assert_eq!(
        rdev(m.capacity().join("null")),
        rdev(PathBuf::from("/dev/null"))
    );
    assert_eq!(rdev(m.path("loop")), 0x700, "block device 7:0");
    assert_eq!(mode_of(&m.path("fifo")), 0o640);
    assert_eq!(mode_of(&m.path("null")), 0o600);
    let capacity_kind = |name: &str| {
        fs::symlink_metadata(m.capacity().join(name))
            .unwrap()
            .file_type()
    };
    assert!(capacity_kind("fifo").is_fifo());
    assert!(capacity_kind("null").is_char_device());
    assert!(capacity_kind("sock").is_socket());
    // readdir reports the types too.
    let mut listed: Vec<(String, &str)> = fs::read_dir(&m.point)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let t = e.file_type().unwrap();
            let kind = if t.is_fifo() {
                "fifo"
            } else if t.is_socket() {
                "socket"
            } else if t.is_char_device() {
                "char"
            } else if t.is_block_device() {
                "block"
            } else {
                "other"
            };
            (e.file_name().to_string_lossy().into_owned(), kind)
        })
        .collect();
    listed.sort();
    assert_eq!(
        listed,
        [
            ("fifo".to_string(), "fifo"),
            ("loop".to_string(), "block"),
            ("null".to_string(), "char"),
            ("outside".to_string(), "socket"),
            ("sock".to_string(), "socket"),
        ]
    );
    // The FIFO is one: bytes pass from a writer to a reader.
    let fifo = m.path("fifo");
    let writer = std::thread::spawn(move || fs::write(fifo, b"through the pipe"));
    assert_eq!(fs::read(m.path("fifo")).unwrap(), b"through the pipe");
    writer.join().unwrap().unwrap();
    // The device node is one: it reads as /dev/null (on the tier: the
    // mount itself is `nodev`, as fusermount3 makes every FUSE mount).
    assert_eq!(fs::read(m.capacity().join("null")).unwrap(), b"");
    let error = fs::read(m.path("null")).unwrap_err();
    assert_eq!(error.raw_os_error(), Some(13), "nodev: EACCES, {error}");
    // A second uid's FIFO is its own.
    fs::create_dir(m.path("shared")).unwrap();
    fs::set_permissions(m.path("shared"), fs::Permissions::from_mode(0o777)).unwrap();
    let out = as_nobody(&format!(
        "umask 027 && mkfifo {}",
        sh_quote(&m.path("shared/theirs").display().to_string())
    ));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let theirs = fs::symlink_metadata(m.path("shared/theirs")).unwrap();
    assert_eq!((theirs.uid(), theirs.gid()), (65534, 65534));
    assert_eq!(
        theirs.mode() & 0o7777,
        0o640,
        "mode 0666 less the umask 027"
    );
    // Renamed and removed like any entry.
    fs::rename(m.path("fifo"), m.path("fifo2")).unwrap();
    assert!(kind("fifo2").is_fifo());
    for name in ["fifo2", "null", "loop", "sock", "outside"] {
        fs::remove_file(m.path(name)).unwrap();
        assert!(!m.capacity().join(name).exists(), "{name} removed");
    }
    // A bound socket pins the mount (EBUSY): close them first.
    drop((inside, outside));
    m.unmount(false);
}

/// FUSE is here and we are root; otherwise says why the test is skipped.
fn fuse_available_as_root(why: &str) -> bool {
    if !fuse_available() {
        return false;
    }
    if rustix_is_not_root() {
        eprintln!("skipped: {why}");
        return false;
    }
    true
}

fn rustix_is_not_root() -> bool {
    // Read our effective uid from /proc (no unsafe, no extra crate).
    let status = fs::read_to_string("/proc/self/status").unwrap_or_default();
    let euid = status
        .lines()
        .find(|l| l.starts_with("Uid:"))
        .and_then(|l| l.split_whitespace().nth(2))
        .unwrap_or("1");
    euid != "0"
}

#[test]
fn links_xattrs_and_refusals_never_silently_wrong() {
    if !fuse_available() {
        return;
    }
    let mut m = Mounted::new(&[]);
    fs::write(m.path("target"), b"hello").unwrap();
    std::os::unix::fs::symlink("target", m.path("link")).unwrap();
    assert_eq!(
        fs::read_link(m.path("link")).unwrap(),
        PathBuf::from("target")
    );
    assert_eq!(
        fs::read(m.path("link")).unwrap(),
        b"hello",
        "the kernel follows it"
    );
    assert!(fs::symlink_metadata(m.path("link"))
        .unwrap()
        .file_type()
        .is_symlink());
    // A hard link of a symbolic link names the link itself.
    fs::hard_link(m.path("link"), m.path("hard")).unwrap();
    assert_eq!(
        fs::read_link(m.path("hard")).unwrap(),
        PathBuf::from("target")
    );
    fs::remove_file(m.path("hard")).unwrap();
    // fallocate works (issue 37; the modes: fallocate_* below).
    let out = Command::new("fallocate")
        .args(["-l", "1M"])
        .arg(m.path("target"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let data = fs::read(m.path("target")).unwrap();
    assert_eq!(data.len(), 1 << 20, "allocated to 1 MiB");
    assert_eq!(&data[..5], b"hello", "the bytes stay");
    fs::write(m.path("target"), b"hello").unwrap();
    let out = Command::new("setfattr")
        .args(["-n", "user.color", "-v", "blue"])
        .arg(m.path("target"))
        .output();
    if let Ok(out) = out {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let out = Command::new("getfattr")
            .args(["--only-values", "-n", "user.color"])
            .arg(m.path("target"))
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "blue");
    }
    fs::rename(m.path("link"), m.path("link2")).unwrap();
    fs::remove_file(m.path("link2")).unwrap();
    assert!(m.capacity().join("target").exists());
    m.unmount(false);
}

#[test]
fn metrics_endpoint_and_status_report_the_mount() {
    if !fuse_available() {
        return;
    }
    let addr = free_local_addr();
    let mut m = Mounted::new(&["--metrics", &addr, "--policy", "fast-all"]);
    fs::write(m.path("f"), vec![7u8; 100_000]).unwrap();
    let get = |request: &[u8]| http(&addr, request);
    let metrics = get(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(metrics.starts_with("HTTP/1.1 200"), "{metrics}");
    for name in [
        "sluice_routed_fast_bytes_total 100000",
        "sluice_buffered_bytes",
        "sluice_regions{state=\"filling\"} 1",
        "sluice_fuse_requests_total{op=\"write\"}",
    ] {
        assert!(metrics.contains(name), "{name} missing:\n{metrics}");
    }
    assert!(get(b"GET /other HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404"));
    // Bound to the configured address only: another loopback address of
    // this host, same port, has nothing listening.
    let elsewhere = addr.replacen("127.0.0.1", "127.0.0.2", 1);
    assert_eq!(
        std::net::TcpStream::connect(&elsewhere)
            .map_err(|e| e.kind())
            .err(),
        Some(std::io::ErrorKind::ConnectionRefused),
        "{elsewhere}"
    );
    assert!(get(b"\x00\xff garbage\r\n\r\n").starts_with("HTTP/1.1 400"));
    let drain = m.sluice(&["drain", m.point.to_str().unwrap()]);
    assert!(
        drain.status.success(),
        "{}",
        String::from_utf8_lossy(&drain.stderr)
    );
    assert!(get(b"GET /metrics HTTP/1.0\r\n\r\n").contains("sluice_buffered_bytes 0"));
    let status = m.sluice(&["status", m.point.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(text.contains("policy      fast-all"), "{text}");
    m.unmount(false);
    let not_mounted = m.sluice(&["status", m.point.to_str().unwrap()]);
    assert!(!not_mounted.status.success());
    assert!(String::from_utf8_lossy(&not_mounted.stderr).contains("not a sluice mount"));
}

/// FUSE passthrough: under a policy that never buffers, the kernel reads
/// and writes files itself (no read or write request reaches sluice), and
/// what POSIX promises still holds: O_APPEND, an unlinked file kept open,
/// the size seen by another name. Under the default policy nothing is
/// passed through. (Needs root for the kernel's backing-file ioctl.)
#[test]
fn passthrough_serves_files_the_engine_never_buffers() {
    if !fuse_available_as_root("FUSE passthrough needs CAP_SYS_ADMIN") {
        return;
    }
    let mut m = Mounted::new(&["--policy", "capacity-only"]);
    let status = |m: &Mounted| {
        let out = m.sluice(&["status", m.point.to_str().unwrap()]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    fs::write(m.path("f"), &data).unwrap();
    let mut append = OpenOptions::new().append(true).open(m.path("f")).unwrap();
    append.write_all(b"tail").unwrap();
    drop(append);
    let mut want = data.clone();
    want.extend_from_slice(b"tail");
    assert_eq!(fs::read(m.path("f")).unwrap(), want);
    assert_eq!(fs::read(m.capacity().join("f")).unwrap(), want);
    // Unlinked while open: still read, written and fstat'ed.
    let open = OpenOptions::new()
        .read(true)
        .write(true)
        .open(m.path("f"))
        .unwrap();
    fs::remove_file(m.path("f")).unwrap();
    open.write_all_at(b"after", 1).unwrap();
    let mut head = [0u8; 6];
    open.read_exact_at(&mut head, 0).unwrap();
    assert_eq!(&head, b"\x00after");
    assert_eq!(open.metadata().unwrap().len(), want.len() as u64);
    drop(open);
    let text = status(&m);
    assert!(text.contains("opens by passthrough"), "{text}");
    assert!(
        text.contains(" 0 reads (0.0 MiB), 0 writes (0.0 MiB)"),
        "{text}"
    );
    m.unmount(false);

    // The default policy over a tier modelled as a disk (the default
    // cost_seek kept as it is) may buffer: nothing passed through.
    let setup = tempfile::tempdir().unwrap();
    let disk = config_file(setup.path(), "[policy]\ncost_profile = \"off\"\n");
    let mut m = Mounted::new(&["--config", &disk]);
    fs::write(m.path("g"), b"default policy").unwrap();
    assert_eq!(fs::read(m.path("g")).unwrap(), b"default policy");
    let text = status(&m);
    assert!(!text.contains("passthrough"), "{text}");
    m.unmount(false);
}

/// Issue 33: a small file closed on this node is handed to the kernel's
/// page cache, and reopened unchanged it is read from there: no read
/// request comes to sluice. Changed behind the mount (another node's write,
/// same length), it is read from the capacity tier again; and a write
/// through the mount is read back at once.
#[test]
fn issue_33_a_small_file_reopened_unchanged_is_read_from_the_kernels_page_cache() {
    if !fuse_available() {
        return;
    }
    let setup = tempfile::tempdir().unwrap();
    // Plain handles only (as a non-root mount has), so every read the
    // kernel does not answer itself comes here.
    let config = config_file(setup.path(), "[mount]\npassthrough = false\n");
    let mut m = Mounted::new(&["--config", &config]);
    if !exact_change_times(&m.capacity()) {
        eprintln!("skipped: the capacity tier gives no exact change times");
        m.unmount(false);
        return;
    }
    let counts = |m: &Mounted| -> [u64; 3] {
        let status = status_json(m);
        [
            "fuse_reads",
            "fuse_page_cache_opens",
            "fuse_page_cache_stores",
        ]
        .map(|key| {
            status[key]
                .as_u64()
                .unwrap_or_else(|| panic!("no {key} in status: {status}"))
        })
    };
    let mine: Vec<u8> = (0..3901u32).map(|i| (i % 251) as u8).collect();
    fs::write(m.path("small"), &mine).unwrap();
    assert_eq!(counts(&m), [0, 0, 1], "stored at its close");
    for _ in 0..3 {
        assert!(fs::read(m.path("small")).unwrap() == mine);
    }
    assert_eq!(
        counts(&m),
        [0, 3, 1],
        "read three times from the kernel's pages"
    );
    // Another node writes the capacity file: same length, other bytes.
    let theirs = vec![b'B'; mine.len()];
    fs::write(m.capacity().join("small"), &theirs).unwrap();
    assert!(
        fs::read(m.path("small")).unwrap() == theirs,
        "a stale page served"
    );
    let [reads, _, stores] = counts(&m);
    assert!(reads > 0, "read from the capacity tier");
    assert_eq!(stores, 2, "stored again at its close");
    // A write through the mount, then a read of a kept handle.
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(m.path("small"))
        .unwrap();
    f.write_all_at(b"mine", 100).unwrap();
    let mut want = theirs.clone();
    want[100..104].copy_from_slice(b"mine");
    let mut got = vec![0u8; want.len()];
    f.read_exact_at(&mut got, 0).unwrap();
    assert!(got == want, "a write through a kept handle is read back");
    drop(f);
    assert!(fs::read(m.path("small")).unwrap() == want);
    // A file of 64 KiB is not stored.
    fs::write(m.path("large"), vec![1u8; 64 << 10]).unwrap();
    assert_eq!(counts(&m)[2], 3, "only the small file's closes stored");
    m.unmount(false);
}

/// Issue 33: in a directory whose last files closed short (mdtest's), new
/// files and opens for writing get plain handles, whose requests come to
/// sluice; a file closed large ends the run, and the next file is passed
/// through again. The bytes are right either way. (Needs root, as above.)
#[test]
fn a_directory_of_small_files_is_served_plainly_until_a_large_one_closes() {
    if !fuse_available_as_root("FUSE passthrough needs CAP_SYS_ADMIN") {
        return;
    }
    let mut m = Mounted::new(&["--policy", "capacity-only"]);
    // (opens by passthrough, write requests) from status.
    let counts = |m: &Mounted| -> (u64, u64) {
        let status = status_json(m);
        let count = |key: &str| {
            status[key]
                .as_u64()
                .unwrap_or_else(|| panic!("no {key} in status: {status}"))
        };
        (count("fuse_passthrough_opens"), count("fuse_writes"))
    };
    fs::create_dir(m.path("d")).unwrap();
    for i in 0..8 {
        fs::write(m.path(&format!("d/s{i}")), b"small").unwrap();
    }
    let (opens, writes) = counts(&m);
    assert_eq!((opens, writes), (8, 0), "the run's files: passed through");
    fs::write(m.path("d/s8"), b"small").unwrap();
    let rw = OpenOptions::new()
        .read(true)
        .write(true)
        .open(m.path("d/s0"))
        .unwrap();
    rw.write_all_at(b"S", 0).unwrap();
    drop(rw);
    assert_eq!(counts(&m), (8, 2), "created and opened to write: plain");
    assert_eq!(fs::read(m.capacity().join("d/s0")).unwrap(), b"Small");
    // A large file, written plainly, ends the run.
    let data: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8).collect();
    fs::write(m.path("d/large"), &data).unwrap();
    let (opens, writes) = counts(&m);
    assert_eq!(opens, 8);
    assert!(writes > 2, "the large file's writes came to sluice");
    assert_eq!(fs::read(m.capacity().join("d/large")).unwrap(), data);
    fs::write(m.path("d/next"), b"small").unwrap();
    assert_eq!(counts(&m), (9, writes), "passed through again");
    assert_eq!(fs::read(m.path("d/next")).unwrap(), b"small");
    m.unmount(false);
}

/// Issue 32: a mount of the default policy over a plain directory whose
/// cost_seek is left at the default measures the directory's seek once
/// (a quick profile, a few seconds at most), keeps it on the fast tier,
/// shows it in status, and reads it back at the next mount; an emulated
/// disk's model is known and is not measured.
#[test]
fn an_unprofiled_capacity_tier_is_measured_once_and_kept() {
    if !fuse_available() {
        return;
    }
    let status = |m: &Mounted| {
        let out = m.sluice(&["status", m.point.to_str().unwrap()]);
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let mut m = Mounted::new(&[]);
    let log = m.log();
    assert!(log.contains("policy.cost_seek = "), "{log}");
    assert!(log.contains("measured now"), "{log}");
    let record = m.fast().join("capacity-profile.json");
    let kept: serde_json::Value = serde_json::from_slice(&fs::read(&record).unwrap()).unwrap();
    let seek = kept["cost_seek_us"].as_u64().expect("a seek in µs");
    assert_eq!(kept["how"], "quick profile at mount");
    assert!(status(&m).contains(&format!("(capacity seek {seek} µs)")));
    assert!(
        fs::read_dir(m.capacity()).unwrap().next().is_none(),
        "the profile file is gone"
    );
    m.unmount(false);
    m.start();
    let log = m.log();
    assert!(
        log.contains("kept in the fast tier's capacity-profile.json"),
        "{log}"
    );
    assert!(!log.contains("measured now"), "measured once: {log}");
    m.unmount(false);

    let mut hdd = Mounted::new(&["--capacity-device", "hdd"]);
    assert!(!hdd.fast().join("capacity-profile.json").exists());
    assert!(status(&hdd).contains("(capacity seek 5170 µs)"));
    hdd.unmount(false);
}

/// Every PromQL query of the shipped Grafana dashboard
/// (`contrib/grafana/sluice.json`), panels inside rows and the template
/// variables' queries included, with the panel's title.
fn dashboard_queries() -> Vec<(String, String)> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../contrib/grafana/sluice.json"
    );
    let dashboard: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(path).unwrap()).unwrap();
    let mut out = Vec::new();
    let mut panels: Vec<&serde_json::Value> =
        dashboard["panels"].as_array().unwrap().iter().collect();
    while let Some(panel) = panels.pop() {
        panels.extend(panel["panels"].as_array().into_iter().flatten());
        for target in panel["targets"].as_array().into_iter().flatten() {
            out.push((
                panel["title"].as_str().unwrap().to_string(),
                target["expr"].as_str().unwrap().to_string(),
            ));
        }
    }
    for variable in dashboard["templating"]["list"].as_array().unwrap() {
        out.push((
            format!("variable {}", variable["name"]),
            variable["definition"].as_str().unwrap().to_string(),
        ));
    }
    out
}

/// Issue 21: the shipped Grafana dashboard works on a real mount. With
/// LiU and BBOS on and a stream classified, the scrape has every metric
/// of the table (`sluice_daemon::metrics::METRICS`), so every name the
/// dashboard queries; then a real Prometheus (on 127.0.0.1) scrapes the
/// mount and answers every query of the dashboard with data, which also
/// proves that Prometheus's own parser takes the exposition.
#[test]
fn every_metric_the_grafana_dashboard_queries_is_scraped() {
    if !fuse_available() {
        return;
    }
    let conf_dir = tempfile::tempdir().unwrap();
    let conf = config_file(
        conf_dir.path(),
        "[liu]\nenabled = true\n\n[bbos]\ncapacity = \"64MiB\"\n",
    );
    let addr = free_local_addr();
    let mut m = Mounted::new(&["--config", &conf, "--metrics", &addr]);
    // Enough writes for the detector to classify a stream (128 requests).
    let mut f = File::create(m.path("f")).unwrap();
    for i in 0..300u32 {
        f.write_all(&[i as u8; 4096]).unwrap();
    }
    f.sync_all().unwrap();
    drop(f);
    let answer = http(&addr, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(
        head.contains(&format!(
            "Content-Type: {}",
            sluice_daemon::metrics::CONTENT_TYPE
        )),
        "{head}"
    );
    assert!(body.ends_with("# EOF\n"), "{body}");
    let scraped: std::collections::BTreeSet<&str> = body
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split(['{', ' ']).next().unwrap())
        .collect();
    let declared: std::collections::BTreeSet<&str> = sluice_daemon::metrics::METRICS
        .iter()
        .map(|m| m.name)
        .collect();
    assert_eq!(scraped, declared, "{body}");
    let queries = dashboard_queries();
    let mut queried = 0;
    for (title, expr) in &queries {
        for (_, name) in sluice_daemon::metrics::names_in_promql(expr) {
            assert!(
                scraped.contains(name),
                "{title}: {name} is not exported by a mount"
            );
            queried += 1;
        }
    }
    assert!(queried > 40, "{queried} names queried");
    prometheus_answers_every_query(&addr, &queries);
    m.unmount(false);
}

/// A Prometheus server on 127.0.0.1 scraping `target` every second,
/// killed (by its pid) when dropped.
struct Prometheus {
    child: Child,
    addr: String,
    _dir: tempfile::TempDir,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `text` for a URL's query string.
fn percent_encoded(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

impl Prometheus {
    /// `None` when there is no `prometheus` (`scripts/setup.sh` installs
    /// it); CI must have it.
    fn start(target: &str) -> Option<Prometheus> {
        if Command::new("prometheus")
            .arg("--version")
            .output()
            .is_err()
        {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI: prometheus is required (scripts/setup.sh installs it)"
            );
            eprintln!("skipped: no prometheus (scripts/setup.sh installs it)");
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("prometheus.yml");
        fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n\
                 scrape_configs:\n  - job_name: sluice\n    static_configs:\n\
                 \x20     - targets: [\"{target}\"]\n"
            ),
        )
        .unwrap();
        let addr = free_local_addr();
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .arg("--log.level=warn")
            .stdout(Stdio::null())
            .stderr(File::create(dir.path().join("prometheus.log")).unwrap())
            .spawn()
            .unwrap();
        let prometheus = Prometheus {
            child,
            addr,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !std::net::TcpStream::connect(&prometheus.addr).is_ok_and(|_| {
            http(&prometheus.addr, b"GET /-/ready HTTP/1.0\r\n\r\n").starts_with("HTTP/1.0 200")
        }) {
            assert!(Instant::now() < deadline, "prometheus did not become ready");
            std::thread::sleep(Duration::from_millis(200));
        }
        Some(prometheus)
    }

    /// The JSON answer to an instant query.
    fn query(&self, expr: &str) -> serde_json::Value {
        let request = format!(
            "GET /api/v1/query?query={} HTTP/1.0\r\n\r\n",
            percent_encoded(expr)
        );
        let answer = http(&self.addr, request.as_bytes());
        let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        serde_json::from_str(body).unwrap_or_else(|e| panic!("{expr}: {e}: {answer}"))
    }
}

/// Start a Prometheus that scrapes `target`, wait for five scrapes (so
/// that `rate()` has points), then run every dashboard query with
/// Grafana's variables filled in: each must succeed with data.
fn prometheus_answers_every_query(target: &str, queries: &[(String, String)]) {
    let Some(prometheus) = Prometheus::start(target) else {
        return;
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let answer = prometheus.query("count_over_time(sluice_buffered_bytes[1m])");
        let scrapes = answer["data"]["result"][0]["value"][1]
            .as_str()
            .and_then(|v| v.parse::<u32>().ok())
            .unwrap_or(0);
        if scrapes >= 5 {
            break;
        }
        if Instant::now() > deadline {
            let targets = http(&prometheus.addr, b"GET /api/v1/targets HTTP/1.0\r\n\r\n");
            panic!("prometheus did not scrape the mount 5 times: {answer}\n{targets}");
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    for (title, expr) in queries {
        let expr = if let Some(inner) = expr
            .strip_prefix("label_values(")
            .and_then(|e| e.strip_suffix(')'))
        {
            // A variable's `label_values(SELECTOR, LABEL)`: its series.
            inner.rsplit_once(',').unwrap().0.to_string()
        } else {
            expr.clone()
        };
        let expr = expr
            .replace("$job", "sluice")
            .replace("$instance", &regex_escaped(target))
            .replace("$__rate_interval", "1m")
            .replace("$__range", "1m");
        let answer = prometheus.query(&expr);
        assert_eq!(answer["status"], "success", "{title}: {expr}: {answer}");
        let result = answer["data"]["result"].as_array().unwrap();
        assert!(!result.is_empty(), "{title}: {expr} has no data: {answer}");
    }
}

/// `text` as a literal in a PromQL regex (the dots of an address).
fn regex_escaped(text: &str) -> String {
    text.replace('.', "\\\\.")
}

#[test]
fn bad_config_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let config = config_file(dir.path(), "[log]\nregoins = 3\n");
    let out = Command::new(SLUICE)
        .args(["config", "show", "--config", &config])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("regoins"));
    let out = Command::new(SLUICE)
        .args([
            "config",
            "show",
            "--fast",
            "/a",
            "--capacity",
            "/b",
            "--policy",
            "ssdup",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("name = \"ssdup\""),
        "{text}"
    );
    let out = Command::new(SLUICE)
        .args(["mount", "--fast", "/nonexistent-parent/x"])
        .arg(dir.path().join("no-such-mountpoint"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("capacity.path"));
}

#[test]
fn bare_sluice_mount_mounts_the_demo_setup() {
    if !fuse_available() {
        return;
    }
    let dir = support::tempdir();
    let point = dir.path().join("sluice-demo/mnt");
    let mut child = Command::new(SLUICE)
        .arg("mount")
        .current_dir(dir.path())
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
    fs::write(point.join("hello"), b"world").unwrap();
    let out = Command::new(SLUICE)
        .arg("unmount")
        .arg(&point)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(child.wait().unwrap().success());
    let capacity = dir.path().join("sluice-demo/capacity/hello");
    assert_eq!(fs::read(capacity).unwrap(), b"world");
}

#[test]
fn liu_lifts_heads_through_the_mount_and_never_serves_stale_bytes() {
    if !fuse_available() {
        return;
    }
    // Segments of 64 KiB + 192 KiB, a 2-segment buffer, 4 heads.
    let conf_dir = tempfile::tempdir().unwrap();
    let conf = config_file(
        conf_dir.path(),
        "[liu]\nenabled = true\nhead = \"64KiB\"\nbody = \"192KiB\"\nbuffer = \"512KiB\"\n\
         heads = \"256KiB\"\nlift_locality = 0.5\n",
    );
    let addr = free_local_addr();
    let mut m = Mounted::new(&["--config", &conf, "--metrics", &addr]);
    const SEGMENT: usize = 256 * 1024;
    let data: Vec<u8> = (0..8 * SEGMENT).map(|i| (i % 253) as u8).collect();
    fs::write(m.path("f"), &data).unwrap();
    for _ in 0..3 {
        assert!(fs::read(m.path("f")).unwrap() == data, "read differs");
    }
    let metrics = || http(&addr, b"GET /metrics HTTP/1.0\r\n\r\n");
    let value = |text: &str, name: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name).and_then(|v| v.trim().parse().ok()))
            .unwrap_or_else(|| panic!("{name} missing:\n{text}"))
    };
    let before = metrics();
    assert!(value(&before, "sluice_liu_lifts_total") > 0.0, "{before}");
    assert!(
        value(&before, "sluice_liu_lifted_segments") > 0.0,
        "{before}"
    );
    assert!(before.contains("sluice_liu_locality_total{bucket=\"1.0\"}"));
    // Overwrite every head (through the log, then flushed, and direct):
    // the next reads must see the new bytes.
    let mut expected = data.clone();
    {
        let f = OpenOptions::new().write(true).open(m.path("f")).unwrap();
        for s in 0..8 {
            let at = s * SEGMENT + 100;
            f.write_all_at(&[0xAB; 1000], at as u64).unwrap();
            expected[at..at + 1000].fill(0xAB);
        }
    }
    let drain = m.sluice(&["drain", m.point.to_str().unwrap()]);
    assert!(drain.status.success());
    for _ in 0..2 {
        assert!(
            fs::read(m.path("f")).unwrap() == expected,
            "stale bytes served"
        );
    }
    let after = metrics();
    assert!(
        value(&after, "sluice_liu_invalidations_total") > 0.0,
        "{after}"
    );
    assert_eq!(value(&after, "sluice_liu_errors_total"), 0.0);
    let status = m.sluice(&["status", m.point.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(text.contains("liu ") && text.contains("lifted"), "{text}");
    m.unmount(false);
}

#[test]
fn bbos_checkpoints_are_staged_survive_kill_9_and_serve_restarts() {
    if !fuse_available() {
        return;
    }
    let addr = free_local_addr();
    let tmp = tempfile::tempdir().unwrap();
    let config = config_file(
        tmp.path(),
        "[bbos]\ncapacity = \"64MiB\"\nadmit_wait = \"5s\"\n",
    );
    let mut m = Mounted::new(&["--config", &config, "--metrics", &addr]);
    let point = m.point.to_str().unwrap().to_string();
    let out = m.sluice(&[
        "ckpt", "register", "--mount", &point, "--id", "sim", "--period", "10s", "--size", "8MiB",
        "--nodes", "16", "--glob", "ckpt/*",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    fs::create_dir(m.path("ckpt")).unwrap();
    let data = |seed: u8| -> Vec<u8> {
        (0..8 << 20)
            .map(|i: u32| (i as u8).wrapping_mul(13) ^ seed)
            .collect()
    };
    for (name, seed) in [("ckpt/1", 1u8), ("ckpt/2", 2)] {
        let mut f = File::create(m.path(name)).unwrap();
        f.write_all(&data(seed)).unwrap();
        f.sync_all().unwrap();
    }
    // An ordinary file beside them goes through the engine, not BBOS.
    fs::write(m.path("notes.txt"), b"not a checkpoint").unwrap();
    let staged: u64 = fs::read_dir(m.fast().join("ckpt"))
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".data"))
        .map(|e| e.metadata().unwrap().len())
        .sum();
    assert_eq!(staged, 16 << 20, "both checkpoints staged on the fast tier");
    assert_eq!(fs::metadata(m.path("ckpt/2")).unwrap().len(), 8 << 20);
    // Power cut: acknowledged checkpoints survive, demoted or not.
    m.kill9();
    m.start();
    for (name, seed) in [("ckpt/1", 1u8), ("ckpt/2", 2)] {
        assert!(
            fs::read(m.path(name)).unwrap() == data(seed),
            "{name} after kill -9"
        );
    }
    let metrics = http(&addr, b"GET /metrics HTTP/1.0\r\n\r\n");
    assert!(
        metrics.contains("sluice_ckpt_restart_opens_total{result=\"hit\"} 2"),
        "{metrics}"
    );
    let list = m.sluice(&["ckpt", "list", "--mount", &point]);
    assert!(String::from_utf8_lossy(&list.stdout).contains("ckpt/*"));
    m.unmount(false);
    for (name, seed) in [("ckpt/1", 1u8), ("ckpt/2", 2)] {
        assert!(
            fs::read(m.capacity().join(name)).unwrap() == data(seed),
            "{name} demoted to the capacity tier by the unmount's drain"
        );
    }
    assert_eq!(
        fs::read(m.capacity().join("notes.txt")).unwrap(),
        b"not a checkpoint"
    );
}

/// Regression (data-path issue): an open file that is unlinked, or replaced
/// by a rename, became unusable through the mount (`fstat` and `pread` on
/// the old descriptor returned ENOENT). POSIX keeps the inode alive for its
/// descriptors; its buffered bytes stay readable and never reach the name.
#[test]
fn unlinked_or_renamed_over_open_files_stay_usable() {
    use std::io::{Read, Seek, SeekFrom, Write};
    if !fuse_available() {
        return;
    }
    let mut m = Mounted::new(&["--policy", "fast-all"]);
    // Unlinked while open.
    let mut f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(m.path("u"))
        .unwrap();
    f.write_all(b"buffered bytes").unwrap();
    fs::remove_file(m.path("u")).unwrap();
    assert!(!m.path("u").exists());
    assert_eq!(f.metadata().unwrap().len(), 14, "fstat after unlink");
    f.write_all(b", then more").unwrap();
    let mut got = String::new();
    f.seek(SeekFrom::Start(0)).unwrap();
    f.read_to_string(&mut got).unwrap();
    assert_eq!(got, "buffered bytes, then more");
    f.set_len(8).unwrap();
    assert_eq!(f.metadata().unwrap().len(), 8, "ftruncate after unlink");
    f.sync_all().unwrap();
    // The name can be reused while the old file is open.
    fs::write(m.path("u"), b"new file").unwrap();
    drop(f);
    assert_eq!(fs::read(m.path("u")).unwrap(), b"new file");

    // Renamed over while open.
    fs::write(m.path("a"), b"old a").unwrap();
    let mut a = fs::File::open(m.path("a")).unwrap();
    fs::write(m.path("b"), b"b's bytes").unwrap();
    fs::rename(m.path("b"), m.path("a")).unwrap();
    let mut got = String::new();
    a.read_to_string(&mut got).unwrap();
    assert_eq!(got, "old a", "the replaced file keeps its bytes");
    assert_eq!(a.metadata().unwrap().len(), 5);
    drop(a);
    assert_eq!(fs::read(m.path("a")).unwrap(), b"b's bytes");
    m.unmount(false);
    assert_eq!(fs::read(m.capacity().join("a")).unwrap(), b"b's bytes");
    assert_eq!(fs::read(m.capacity().join("u")).unwrap(), b"new file");
    assert!(!m.capacity().join("b").exists());
}

/// Hard links (data-path issue, deliverable 4): `link` was refused
/// (EOPNOTSUPP). Now both names are one inode (same `st_ino`, `nlink` 2),
/// bytes buffered through one are read through the other, and removing
/// one name keeps them for the other, through the drain to the capacity
/// directory.
#[test]
fn hard_links_through_the_mount_share_buffered_bytes() {
    if !fuse_available() {
        return;
    }
    let mut m = Mounted::new(&["--policy", "fast-all"]);
    fs::create_dir(m.path("d")).unwrap();
    fs::write(m.path("a"), b"").unwrap();
    let out = Command::new("ln")
        .arg(m.path("a"))
        .arg(m.path("d/b"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "ln: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut a = OpenOptions::new().write(true).open(m.path("a")).unwrap();
    a.write_all(b"written through a, buffered").unwrap();
    let status = m.sluice(&["status", m.point.to_str().unwrap(), "--json"]);
    assert!(status.status.success());
    assert_eq!(
        fs::read(m.path("d/b")).unwrap(),
        b"written through a, buffered",
        "read through the other name"
    );
    let (sa, sb) = (
        fs::metadata(m.path("a")).unwrap(),
        fs::metadata(m.path("d/b")).unwrap(),
    );
    assert_eq!(sa.ino(), sb.ino(), "one inode for both names");
    assert_eq!((sa.nlink(), sb.nlink()), (2, 2));
    assert_eq!(sb.len(), 27, "the buffered size through either name");
    // Writes through b, then a is removed while still open.
    let b = OpenOptions::new().write(true).open(m.path("d/b")).unwrap();
    b.write_all_at(b"W", 0).unwrap();
    fs::remove_file(m.path("a")).unwrap();
    assert_eq!(fs::metadata(m.path("d/b")).unwrap().nlink(), 1);
    a.write_all(b"!").unwrap();
    drop(a);
    drop(b);
    assert_eq!(
        fs::read(m.path("d/b")).unwrap(),
        b"Written through a, buffered!"
    );
    // A rename between two names of one file does nothing.
    fs::hard_link(m.path("d/b"), m.path("c")).unwrap();
    fs::rename(m.path("c"), m.path("d/b")).unwrap();
    assert!(m.path("c").exists() && m.path("d/b").exists());
    fs::remove_file(m.path("c")).unwrap();
    m.unmount(false);
    assert_eq!(
        fs::read(m.capacity().join("d/b")).unwrap(),
        b"Written through a, buffered!"
    );
    assert!(!m.capacity().join("a").exists());
    assert!(!m.capacity().join("c").exists());
}

/// The data-path issue's repro through the mount: fast-all, a tiny log
/// (2 × 1 MiB regions) under `when_full = "write-through"`, an emulated
/// HDD capacity tier (so the flush is slow and the log stays full). A
/// write over buffered bytes while the log is full went to the capacity
/// tier and left the older bytes indexed: reads returned them and the
/// drain wrote them over the new ones.
#[test]
fn full_log_write_through_keeps_the_newest_bytes_through_the_mount() {
    use std::io::{Seek, SeekFrom, Write};
    use std::os::unix::fs::FileExt;
    if !fuse_available() {
        return;
    }
    let conf_dir = tempfile::tempdir().unwrap();
    let conf = config_file(
        conf_dir.path(),
        "[capacity]\ndevice = \"hdd\"\n[log]\nregions = 2\nregion_size = \"1MiB\"\n\
         record_max = \"256KiB\"\nwhen_full = \"write-through\"\n[policy]\nname = \"fast-all\"\n",
    );
    let mut m = Mounted::new(&["--config", &conf]);
    let mut g = fs::File::create(m.path("g")).unwrap();
    let f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(m.path("f"))
        .unwrap();
    g.write_all(&vec![b'G'; 1024 * 1024]).unwrap();
    f.write_all_at(&[b'A'; 64 * 1024], 0).unwrap();
    g.seek(SeekFrom::End(0)).unwrap();
    g.write_all(&vec![b'G'; 1536 * 1024]).unwrap();
    let status = m.sluice(&["status", m.point.to_str().unwrap(), "--json"]);
    let status = String::from_utf8_lossy(&status.stdout).to_string();
    let through = status
        .split("\"write_through_bytes\":")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no write_through_bytes in {status}"));
    assert!(
        through > 0,
        "the log was full: some of g went through ({status})"
    );
    f.write_all_at(&[b'B'; 64 * 1024], 0).unwrap();
    let mut got = vec![0u8; 64 * 1024];
    f.read_exact_at(&mut got, 0).unwrap();
    assert!(got.iter().all(|&b| b == b'B'), "pread after the write");
    drop((f, g));
    m.unmount(false);
    let cap = fs::read(m.capacity().join("f")).unwrap();
    assert!(
        cap.iter().all(|&b| b == b'B'),
        "the capacity file after the drain"
    );
    assert_eq!(cap.len(), 64 * 1024);
}

/// Regression (data-path issue): a name that is not valid UTF-8 got EINVAL
/// through the mount. Names are bytes: any name the capacity tier accepts
/// works, in listings, renames and symbolic link targets too, and reaches
/// the tier byte for byte.
#[test]
fn names_that_are_not_utf8_work_through_the_mount() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    if !fuse_available() {
        return;
    }
    let mut m = Mounted::new(&["--policy", "fast-all"]);
    let latin1 = OsStr::from_bytes(b"caf\xe9");
    let renamed = OsStr::from_bytes(b"\xff\xfe renamed");
    let escape_like = OsStr::new("\u{f7e9}");
    fs::write(m.point.join(latin1), b"buffered under a Latin-1 name").unwrap();
    fs::write(m.point.join(escape_like), b"private use").unwrap();
    let listed: Vec<_> = fs::read_dir(&m.point)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(listed.iter().any(|n| n == latin1), "{listed:?}");
    assert!(listed.iter().any(|n| n == escape_like), "{listed:?}");
    assert_eq!(
        fs::read(m.point.join(latin1)).unwrap(),
        b"buffered under a Latin-1 name"
    );
    fs::rename(m.point.join(latin1), m.point.join(renamed)).unwrap();
    std::os::unix::fs::symlink(OsStr::from_bytes(b"\xe9t\xe9"), m.point.join("link")).unwrap();
    assert_eq!(
        fs::read_link(m.point.join("link"))
            .unwrap()
            .as_os_str()
            .as_bytes(),
        b"\xe9t\xe9"
    );
    m.unmount(false);
    assert_eq!(
        fs::read(m.capacity().join(renamed)).unwrap(),
        b"buffered under a Latin-1 name"
    );
    assert!(!m.capacity().join(latin1).exists());
    assert_eq!(
        fs::read(m.capacity().join(escape_like)).unwrap(),
        b"private use"
    );
    assert_eq!(
        fs::read_link(m.capacity().join("link"))
            .unwrap()
            .as_os_str()
            .as_bytes(),
        b"\xe9t\xe9"
    );
}

/// `sluice sync PATH`: the named file's buffered bytes reach the capacity
/// tier (synced), other files' do not; paths outside a mount and missing
/// files are clear errors. (node-local: a close leaves the bytes buffered.)
#[test]
fn sync_puts_the_named_files_on_the_capacity_tier() {
    if !fuse_available() {
        return;
    }
    let setup = tempfile::tempdir().unwrap();
    let config = config_file(setup.path(), "[mount]\nconsistency = \"node-local\"\n");
    let m = Mounted::new(&["--policy", "fast-all", "--config", &config]);
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 253) as u8).collect();
    fs::create_dir(m.path("dir")).unwrap();
    for name in ["dir/synced", "other"] {
        let mut f = File::create(m.path(name)).unwrap();
        f.write_all(&data).unwrap();
    }
    assert_ne!(
        fs::read(m.capacity().join("dir/synced")).unwrap_or_default(),
        data
    );
    let out = m.sluice(&["sync", m.path("dir/synced").to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stderr),
        m.log()
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("300000 buffered bytes written"), "{said}");
    assert_eq!(fs::read(m.capacity().join("dir/synced")).unwrap(), data);
    assert_ne!(
        fs::read(m.capacity().join("other")).unwrap_or_default(),
        data
    );
    // Still served right through the mount.
    assert_eq!(fs::read(m.path("dir/synced")).unwrap(), data);
    for (path, expect) in [
        (m.path("missing"), "missing"),
        (
            m.dir.path().join("capacity/other"),
            "not inside a sluice mount",
        ),
    ] {
        let out = m.sluice(&["sync", path.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(expect),
            "{path:?}: {err}"
        );
    }
}

// Issue 19, "safe to deploy": a mount never harms a live tier, least
// privilege, honest exits. Each test below failed before its fix.

/// A private redis-server (`scripts/redis.sh`) in a temp dir, stopped by
/// the pid in its pidfile when dropped. `None` (with a message) without
/// redis-server, which fails under CI.
struct RedisServer {
    dir: tempfile::TempDir,
    port: u16,
}

const REDIS_SH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/redis.sh");

impl RedisServer {
    fn start() -> Option<RedisServer> {
        let available = Command::new("redis-server")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        if !available {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI: redis-server is required (scripts/setup.sh installs it)"
            );
            eprintln!("skipped the Redis case: no redis-server (install redis-server)");
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let out = Command::new("bash")
            .arg(REDIS_SH)
            .args(["start", dir.path().to_str().unwrap()])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "scripts/redis.sh start: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let port = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
        Some(RedisServer { dir, port })
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(REDIS_SH)
            .args(["stop", self.dir.path().to_str().unwrap()])
            .output();
    }
}

/// Runs `sluice mount ARGS` that is expected to fail; if it mounts instead
/// (it then serves until unmounted), it is stopped and unmounted, and the
/// test fails. Returns its stderr.
fn mount_expecting_refusal(args: &[&str], point: &Path) -> String {
    let mounted_before = mounts_at(point);
    let mut child = Command::new(SLUICE)
        .arg("mount")
        .args(args)
        .arg(point)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if start.elapsed() > Duration::from_secs(20) || mounts_at(point) > mounted_before {
            if mounts_at(point) > mounted_before {
                let _ = Command::new("fusermount3")
                    .args(["-u", "-z"])
                    .arg(point)
                    .status();
            }
            let _ = child.kill();
            let _ = child.wait();
            panic!("sluice mount {args:?} {} was not refused", point.display());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!out.status.success(), "exit 0: {stderr}");
    stderr
}

/// Every regular file under `dir` (relative name → bytes).
fn files_under(dir: &Path) -> std::collections::BTreeMap<PathBuf, Vec<u8>> {
    let mut out = std::collections::BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            let kind = fs::symlink_metadata(&path).unwrap().file_type();
            if kind.is_dir() {
                stack.push(path);
            } else if kind.is_file() {
                out.insert(
                    path.strip_prefix(dir).unwrap().to_path_buf(),
                    fs::read(&path).unwrap(),
                );
            }
        }
    }
    out
}

/// 64 KiB block `i` of the second-mount test's file.
fn block(i: u64) -> Vec<u8> {
    (0..65536u64)
        .map(|b| (i.wrapping_mul(31) ^ b.wrapping_mul(7)) as u8 | 1)
        .collect()
}

/// Issue 19: a second `sluice mount` of a fast tier that is already
/// mounted rewrote and truncated the live log regions before the control
/// socket check refused it (only the redb catalogue's file lock stopped it
/// earlier, and not before the tiers were opened): the live mount then
/// served EIO, failed its drain ("payload … truncated") or died. With BBOS
/// off, with the default redb catalogue and with Redis, the second mount
/// must be refused by the fast tier's lock while a writer keeps writing,
/// change no byte of a quiet log, and leave the first mount's data to read
/// back and drain.
#[test]
fn issue_19_second_mount_of_a_live_fast_tier_touches_nothing() {
    if !fuse_available() {
        return;
    }
    let redis = RedisServer::start();
    let setup = tempfile::tempdir().unwrap();
    // Small regions: they fill, flush and are reset while the second
    // mount is tried.
    let small = "[log]\nregions = 8\nregion_size = \"4MiB\"\n";
    let bbos_off = config_file(setup.path(), &format!("{small}[bbos]\nenabled = false\n"));
    let small_path = setup.path().join("small.toml");
    fs::write(&small_path, small).unwrap();
    let small = small_path.display().to_string();
    let mut cases: Vec<(&str, Vec<String>)> = vec![
        ("bbos off", vec!["--config".into(), bbos_off]),
        ("redb", vec!["--config".into(), small.clone()]),
    ];
    if let Some(redis) = &redis {
        cases.push((
            "redis",
            vec![
                "--config".into(),
                small.clone(),
                "--meta".into(),
                redis.url(),
            ],
        ));
    }
    for (case, catalogue) in cases {
        let mut args: Vec<&str> = catalogue.iter().map(String::as_str).collect();
        args.extend(["--policy", "fast-all"]);
        let mut m = Mounted::new(&args);
        let second_point = m.dir.path().join("mnt2");
        fs::create_dir(&second_point).unwrap();
        let fast = m.fast().display().to_string();
        let capacity = m.capacity().display().to_string();
        let mut second: Vec<&str> = vec!["--fast", &fast, "--capacity", &capacity];
        second.extend(&args);
        let refused = |second: &[&str]| {
            let err = mount_expecting_refusal(second, &second_point);
            assert!(
                err.contains("in use by another sluice mount"),
                "{case}: {err}"
            );
            assert!(!is_mounted(&second_point));
        };

        // A writer keeps writing while a second mount is tried.
        let file = m.path("f");
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writer = {
            let stop = std::sync::Arc::clone(&stop);
            let file = file.clone();
            std::thread::spawn(move || {
                let f = OpenOptions::new()
                    .create(true)
                    .write(true)
                    .truncate(false)
                    .open(&file)
                    .unwrap();
                let mut i = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) || i < 64 {
                    f.write_all_at(&block(i), i * 65536)
                        .unwrap_or_else(|e| panic!("write block {i}: {e}"));
                    if i % 8 == 7 {
                        f.sync_all().unwrap();
                    }
                    i += 1;
                }
                i
            })
        };
        std::thread::sleep(Duration::from_millis(500));
        refused(&second);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let blocks = writer.join().unwrap();
        let expected: Vec<u8> = (0..blocks).flat_map(block).collect();
        let read = fs::read(&file).unwrap_or_else(|e| panic!("{case}: read: {e}"));
        assert!(read == expected, "{case}: the data did not read back");

        // Not a byte of a quiet log changes (drained: nothing flushes).
        let drain = |m: &Mounted| {
            let out = m.sluice(&["drain", m.point.to_str().unwrap()]);
            assert!(
                out.status.success(),
                "{case}: drain: {}{}",
                String::from_utf8_lossy(&out.stderr),
                m.log()
            );
        };
        drain(&m);
        // The live mount's own heartbeat (`log/alive`, rewritten every
        // second) is left out: the region files are what must not change.
        let regions = || {
            let mut files = files_under(&m.fast().join("log"));
            files.remove(Path::new("alive"));
            files
        };
        let before = regions();
        refused(&second);
        assert!(
            regions() == before,
            "{case}: the refused mount changed the live log"
        );
        fs::OpenOptions::new()
            .write(true)
            .open(&file)
            .unwrap()
            .write_all_at(&block(blocks), blocks * 65536)
            .unwrap();
        let expected: Vec<u8> = (0..=blocks).flat_map(block).collect();
        assert!(fs::read(&file).unwrap() == expected, "{case}: read back");
        drain(&m);
        m.unmount(false);
        assert!(
            fs::read(m.capacity().join("f")).unwrap() == expected,
            "{case}: capacity tier after the drain"
        );
    }
}

/// Every entry under `dir` (recursively, not following links) with its
/// permission bits, `dir` itself as "".
fn modes_under(dir: &Path) -> Vec<(PathBuf, u32)> {
    let mut out = vec![(PathBuf::new(), mode_of(dir))];
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if fs::symlink_metadata(&path).unwrap().is_dir() {
                stack.push(path.clone());
            }
            out.push((
                path.strip_prefix(dir).unwrap().to_path_buf(),
                mode_of(&path),
            ));
        }
    }
    out
}

/// Quoted for `sh -c`.
fn sh_quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', "'\\''"))
}

/// Runs `sluice ARGS` as uid 65534: a copy of it in `dir` (a temp dir
/// that user can enter), as the one cargo built may be out of its reach.
fn sluice_as_nobody(dir: &Path, args: &[&str]) -> std::process::Output {
    let sluice = support::sluice_for_others(dir);
    let words: Vec<String> = std::iter::once(sluice.to_str().unwrap())
        .chain(args.iter().copied())
        .map(sh_quote)
        .collect();
    as_nobody(&words.join(" "))
}

/// Issue 19: the fast tier's files (log regions, staged checkpoints,
/// `catalog.redb`) were created 0644, 0666 under `umask 000`, so another
/// user read buffered data from the log: `strings FAST/log/region-0000`
/// printed a root file of mode 0600. Under `umask 000`, through an
/// `--allow-other` mount with BBOS and LiU on, uid 65534 finds none of the
/// secrets, and everything under the fast tier is 0600 or 0700.
#[test]
fn issue_19_fast_tier_files_are_private_whatever_the_umask() {
    if !second_uid_available() {
        return;
    }
    let setup = tempfile::tempdir().unwrap();
    let config = config_file(setup.path(), "[bbos]\ncapacity = \"64MiB\"\n");
    let mut m = Mounted::unstarted(&[
        "--allow-other",
        "--policy",
        "fast-all",
        "--liu",
        "--config",
        &config,
    ]);
    m.umask = Some("000");
    let created_by_sluice = !m.fast().exists();
    m.start();
    fs::set_permissions(m.dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let point = m.point.display().to_string();
    let out = m.sluice(&[
        "ckpt", "register", "--mount", &point, "--id", "j", "--period", "10min", "--size", "1MiB",
        "--nodes", "1", "--glob", "ckpt/*",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    fs::create_dir(m.path("ckpt")).unwrap();
    for (name, text) in [("s", "secret-log-19\n"), ("ckpt/c", "secret-ckpt-19\n")] {
        let mut f = File::create(m.path(name)).unwrap();
        f.set_permissions(fs::Permissions::from_mode(0o600))
            .unwrap();
        f.write_all(text.as_bytes()).unwrap();
        f.sync_all().unwrap();
    }
    let staged = fs::read_dir(m.fast().join("ckpt"))
        .unwrap()
        .filter_map(Result::ok)
        .any(|e| e.file_name().to_string_lossy().ends_with(".data"));
    assert!(staged, "the checkpoint is staged on the fast tier");
    let fast = sh_quote(&m.fast().display().to_string());
    // uid 65534 reaches the fast tier (0755, the test's): what keeps it
    // out below is the modes sluice gives what it makes there.
    let out = as_nobody(&format!("ls {fast}"));
    assert!(
        out.status.success(),
        "uid 65534 cannot list the fast tier: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = as_nobody(&format!(
        "cat {fast}/log/* {fast}/ckpt/* {fast}/catalog.redb {fast}/liu-heads; grep -r secret {fast}"
    ));
    let seen = String::from_utf8_lossy(&out.stdout);
    assert!(!seen.contains("secret"), "uid 65534 read: {seen}");
    for (path, mode) in modes_under(&m.fast()) {
        if path.as_os_str().is_empty() {
            // The directory itself: 0700 when sluice created it; one the
            // administrator made is kept, but never writable by others.
            assert_eq!(mode & 0o022, 0, "FAST is {mode:04o}");
            continue;
        }
        let dir = fs::symlink_metadata(m.fast().join(&path)).unwrap().is_dir();
        let expected = if dir { 0o700 } else { 0o600 };
        assert_eq!(mode, expected, "FAST/{} is {mode:04o}", path.display());
    }
    assert!(
        m.fast().join("sluice.sock").exists(),
        "the socket was checked"
    );
    if created_by_sluice {
        assert_eq!(mode_of(&m.fast()), 0o700, "created under umask 000");
    }
    m.unmount(false);
    assert_eq!(
        fs::read(m.capacity().join("s")).unwrap(),
        b"secret-log-19\n"
    );
}

/// Issue 19: the control socket did not check who was calling: under
/// `umask 000` any user could `sluice unmount`, `drain` or register a
/// checkpoint job on someone else's mount. Only root and the user who
/// mounted are served: the socket is out of other users' reach, and even
/// with its mode loosened the mount checks the caller (SO_PEERCRED).
#[test]
fn issue_19_only_root_and_the_owner_may_control_a_mount() {
    if !second_uid_available() {
        return;
    }
    let mut m = Mounted::unstarted(&["--allow-other", "--policy", "fast-all"]);
    m.umask = Some("000");
    m.start();
    fs::set_permissions(m.dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    fs::write(m.path("f"), b"buffered").unwrap();
    let point = m.point.display().to_string();
    let requests: [&[&str]; 5] = [
        &["unmount", &point],
        &["drain", &point],
        &["status", &point],
        &["sync", &format!("{point}/f")],
        &[
            "ckpt", "register", "--mount", &point, "--id", "x", "--period", "10min", "--size",
            "1MiB", "--nodes", "1", "--glob", "stolen/*",
        ],
    ];
    let refused_all = |expect: &str| {
        for args in requests {
            let out = sluice_as_nobody(m.dir.path(), args);
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                !out.status.success() && err.contains(expect),
                "{args:?} as uid 65534: {err}"
            );
            assert!(is_mounted(&m.point), "{args:?} as uid 65534 unmounted it");
        }
    };
    refused_all(
        "is a sluice mount owned by uid 0: only root and that user may use its control socket",
    );
    // Loosen the directory and the socket: the mount itself refuses.
    fs::set_permissions(m.fast(), fs::Permissions::from_mode(0o711)).unwrap();
    fs::set_permissions(
        m.fast().join("sluice.sock"),
        fs::Permissions::from_mode(0o666),
    )
    .unwrap();
    refused_all("permission denied: uid 65534 may not control");
    fs::set_permissions(m.fast(), fs::Permissions::from_mode(0o700)).unwrap();
    let list = m.sluice(&["ckpt", "list", "--mount", &point]);
    assert!(!String::from_utf8_lossy(&list.stdout).contains("stolen"));
    assert_eq!(fs::read(m.path("f")).unwrap(), b"buffered");
    m.unmount(false);
    assert_eq!(fs::read(m.capacity().join("f")).unwrap(), b"buffered");
}

/// Issue 19: `--metrics` on an address other than loopback served the
/// metrics to every host without a word. It needs `--metrics-public`, and
/// the mount warns.
#[test]
fn issue_19_metrics_on_a_public_address_needs_metrics_public() {
    if !fuse_available() {
        return;
    }
    let port = free_local_addr().rsplit(':').next().unwrap().to_string();
    let public = format!("0.0.0.0:{port}");
    let mut m = Mounted::unstarted(&["--metrics", &public, "--metrics-public"]);
    let fast = m.fast().display().to_string();
    let capacity = m.capacity().display().to_string();
    let err = mount_expecting_refusal(
        &[
            "--fast",
            &fast,
            "--capacity",
            &capacity,
            "--metrics",
            &public,
        ],
        &m.point,
    );
    assert!(err.contains("--metrics-public"), "{err}");
    assert!(
        !m.fast().join("log").exists(),
        "refused before opening the log"
    );
    m.start();
    let start = Instant::now();
    while !m.log().contains("without authentication") {
        assert!(start.elapsed() < Duration::from_secs(10), "{}", m.log());
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(m.log().contains("WARN"), "{}", m.log());
    let metrics = http(
        &format!("127.0.0.1:{port}"),
        b"GET /metrics HTTP/1.0\r\n\r\n",
    );
    assert!(metrics.starts_with("HTTP/1.1 200"), "{metrics}");
    m.unmount(false);
}

/// Waits up to 20 s for the mount process to exit; its status.
fn wait_exit(m: &mut Mounted) -> std::process::ExitStatus {
    let mut child = m.child.take().unwrap();
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if start.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            panic!("the mount process did not exit: {}", m.log());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Issue 19: `sluice unmount` of a busy mount (a file open, a shell `cd`'d
/// inside) exited 0 and the mount process exited too, leaving a dead mount
/// ("Transport endpoint is not connected") until someone ran
/// `fusermount3 -u -z`. It is refused with a clear message and the mount
/// keeps serving; `--lazy` drains, detaches, serves the open files until
/// they are closed, then ends cleanly.
#[test]
fn issue_19_a_busy_mount_is_refused_and_keeps_serving() {
    if !fuse_available() {
        return;
    }
    let mut m = Mounted::new(&["--policy", "fast-all"]);
    let point = m.point.display().to_string();
    let data = vec![19u8; 100_000];
    fs::write(m.path("f"), &data).unwrap();
    let refused = |m: &Mounted, expect: &str| {
        let out = m.sluice(&["unmount", &point]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "unmount of a busy mount exited 0");
        assert!(err.contains(expect) && err.contains("--lazy"), "{err}");
        assert!(fs::read(m.path("f")).unwrap() == data, "still serving");
        let status = m.sluice(&["status", &point]);
        assert!(status.status.success(), "{}", m.log());
    };
    let open = File::open(m.path("f")).unwrap();
    refused(&m, "1 file is open");
    drop(open);
    let mut shell = Command::new("sleep")
        .arg("60")
        .current_dir(&m.point)
        .spawn()
        .unwrap();
    refused(&m, "working directory");
    let mut held = File::open(m.path("f")).unwrap();
    let out = m.sluice(&["unmount", "--lazy", &point]);
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stderr),
        m.log()
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("detached") && said.contains("drained"),
        "{said}"
    );
    assert!(!is_mounted(&m.point), "detached");
    assert!(fs::read(m.capacity().join("f")).unwrap() == data, "drained");
    let mut again = Vec::new();
    held.read_to_end(&mut again).unwrap();
    assert!(again == data, "an open file is served after the detach");
    drop(held);
    shell.kill().unwrap();
    shell.wait().unwrap();
    let status = wait_exit(&mut m);
    assert!(status.success(), "{status}: {}", m.log());
}

/// Issue 19: `sluice unmount` exited 0 when the mount's drain failed (a
/// full capacity tier). It exits non-zero saying why, the mount process
/// too, and the data stays in the log for the next mount.
#[test]
fn issue_19_unmount_fails_when_the_drain_fails() {
    if !fuse_available_as_root("needs root to mount a tmpfs") {
        return;
    }
    let mut m = Mounted::unstarted(&["--policy", "fast-all"]);
    fs::create_dir_all(m.capacity()).unwrap();
    run(Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m", "sluice-test"])
        .arg(m.capacity()));
    let _tmpfs = MountGuard(m.capacity());
    m.start();
    let data: Vec<u8> = (0..4u32 << 20).map(|i| (i % 241) as u8).collect();
    fs::write(m.path("big"), &data).unwrap();
    let point = m.point.display().to_string();
    let out = m.sluice(&["unmount", &point]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "exit 0 after a failed drain");
    assert!(
        err.contains("No space left on device") && err.contains("next mount recovers"),
        "{err}"
    );
    let status = wait_exit(&mut m);
    assert!(!status.success(), "the mount process exited 0: {}", m.log());
    assert!(!is_mounted(&m.point));
    // Room again: the next mount recovers the data and drains it.
    run(Command::new("mount")
        .args(["-o", "remount,size=16m"])
        .arg(m.capacity()));
    m.start();
    assert!(fs::read(m.path("big")).unwrap() == data);
    m.unmount(false);
    assert!(fs::read(m.capacity().join("big")).unwrap() == data);
}

/// Issue 19: after kill -9, `sluice mount` on the dead mount point said
/// only "Transport endpoint is not connected (os error 107)". It says to
/// run `fusermount3 -u MOUNTPOINT`, after which the mount recovers.
#[test]
fn issue_19_a_dead_mount_point_says_to_run_fusermount3() {
    if !fuse_available() {
        return;
    }
    let mut m = Mounted::new(&["--policy", "fast-all"]);
    fs::write(m.path("f"), b"kept").unwrap();
    let mut child = m.child.take().unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    let fast = m.fast().display().to_string();
    let capacity = m.capacity().display().to_string();
    let err = mount_expecting_refusal(&["--fast", &fast, "--capacity", &capacity], &m.point);
    let fix = format!("fusermount3 -u {}", m.point.display());
    assert!(err.contains(&fix), "{err}");
    run(Command::new("fusermount3").arg("-u").arg(&m.point));
    m.start();
    assert_eq!(fs::read(m.path("f")).unwrap(), b"kept");
    m.unmount(false);
}

/// Issue 19: a live sluice mount point could be mounted over again,
/// silently (hiding the first mount). It is refused, and the first mount
/// serves on.
#[test]
fn issue_19_a_live_mount_point_is_refused() {
    if !fuse_available() {
        return;
    }
    let mut m = Mounted::new(&[]);
    let fast = m.dir.path().join("fast2").display().to_string();
    let capacity = m.dir.path().join("capacity2").display().to_string();
    let err = mount_expecting_refusal(&["--fast", &fast, "--capacity", &capacity], &m.point);
    assert!(
        err.contains("already mounted") && err.contains("sluice unmount"),
        "{err}"
    );
    fs::write(m.path("f"), b"first").unwrap();
    assert_eq!(fs::read(m.path("f")).unwrap(), b"first");
    m.unmount(false);
}

/// The `sluice` binary copied where uid 65534 can run it (the checkout
/// may sit under a directory only root may enter).
fn sluice_for_nobody() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let binary = dir.path().join("sluice");
    fs::copy(SLUICE, &binary).unwrap();
    fs::set_permissions(&binary, fs::Permissions::from_mode(0o755)).unwrap();
    (dir, binary)
}

/// Issue 31: `sluice status MNT` as a user the mount does not serve said
/// "is not a sluice mount (… Permission denied)". It says whose mount it
/// is and who may use its control socket; the mount serves on.
#[test]
fn issue_31_a_permission_refusal_says_who_may_use_the_socket() {
    if !fuse_available_as_root("needs root to switch uid") {
        return;
    }
    let (_bin, binary) = sluice_for_nobody();
    let mut m = Mounted::new(&[]);
    fs::set_permissions(m.dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    fs::write(m.path("f"), b"root's").unwrap();
    let point = m.point.display().to_string();
    let file = format!("{point}/f");
    for (verb, path) in [
        ("status", &point),
        ("drain", &point),
        ("unmount", &point),
        ("top", &point),
        ("sync", &file),
    ] {
        let out = as_nobody(&format!(
            "{} {verb} {}",
            sh_quote(binary.to_str().unwrap()),
            sh_quote(path)
        ));
        let err = String::from_utf8_lossy(&out.stderr);
        let said = format!(
            "{point} is a sluice mount owned by uid 0: only root and that user may use its \
             control socket"
        );
        assert!(
            !out.status.success() && err.contains(&said),
            "{verb}: {err}"
        );
        assert!(!err.contains("is not a sluice mount"), "{verb}: {err}");
        assert!(is_mounted(&m.point), "{verb} as uid 65534 unmounted it");
    }
    m.unmount(false);
}

/// Issue 31: `sluice unmount` of a dead mount (its process killed) said
/// "is not a sluice mount (… Transport endpoint is not connected)" with no
/// hint. `status` says it is dead and to run `fusermount3 -u`; `unmount`
/// clears it itself, says nothing was drained (and exits 1: the drain
/// asked for did not happen, `--keep` exits 0), and the next mount
/// recovers the log.
#[test]
fn issue_31_unmount_of_a_dead_mount_clears_it_and_the_log_is_recovered() {
    if !fuse_available() {
        return;
    }
    let setup = tempfile::tempdir().unwrap();
    // The bytes stay in the log: only recovery can bring them back.
    let config = config_file(setup.path(), "[mount]\nconsistency = \"node-local\"\n");
    for keep in [false, true] {
        let mut m = Mounted::new(&["--policy", "fast-all", "--config", &config]);
        fs::write(m.path("f"), b"kept in the log").unwrap();
        let mut child = m.child.take().unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
        assert_ne!(
            fs::read(m.capacity().join("f")).unwrap_or_default(),
            b"kept in the log"
        );
        let point = m.point.display().to_string();
        let out = m.sluice(&["status", &point]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{err}");
        for said in [
            format!("{point} is a dead FUSE mount"),
            format!("run `fusermount3 -u {point}`"),
        ] {
            assert!(err.contains(&said), "status: {said:?} missing: {err}");
        }
        let mut args = vec!["unmount", point.as_str()];
        if keep {
            args.push("--keep");
        }
        let out = m.sluice(&args);
        let (said, err) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert_eq!(out.status.success(), keep, "keep {keep}: {said}{err}");
        let text = format!("{said}{err}");
        for fragment in [
            "was a dead mount",
            "cleared it",
            "nothing was drained",
            "the next mount of that fast tier recovers it",
        ] {
            assert!(text.contains(fragment), "{fragment:?} missing: {text}");
        }
        assert!(!is_mounted(&m.point), "cleared");
        m.start();
        assert_eq!(fs::read(m.path("f")).unwrap(), b"kept in the log");
        m.unmount(false);
        assert_eq!(
            fs::read(m.capacity().join("f")).unwrap(),
            b"kept in the log"
        );
    }
}

/// Issue 31: a directory that is no mount at all, and a FUSE mount of
/// another file system, are told apart from a sluice mount.
#[test]
fn issue_31_a_path_that_is_not_a_sluice_mount_says_what_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(SLUICE)
        .arg("status")
        .arg(dir.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("is not a sluice mount (not the root of a FUSE mount"),
        "{err}"
    );
    let out = Command::new(SLUICE)
        .arg("unmount")
        .arg(dir.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("is not a sluice mount"),
        "{err}"
    );
    assert!(dir.path().exists());
}

/// Regression (issue 19): when the fast tier's file system filled, every
/// write got ENOSPC until a manual drain, although the capacity tier had
/// room, and nothing warned that the regions did not fit. On a 6 MiB
/// tmpfs fast tier with 2 × 4 MiB regions, 24 MiB of writes (and
/// rewrites of buffered ranges) all succeed, status says why bytes went to
/// the capacity tier, and the drain leaves every byte there.
#[test]
fn issue_19_a_full_fast_tier_file_system_falls_back_to_the_capacity_tier() {
    use std::io::Write;
    use std::os::unix::fs::FileExt;
    if !fuse_available_as_root("needs root to mount a tmpfs") {
        return;
    }
    let conf_dir = tempfile::tempdir().unwrap();
    let conf = config_file(
        conf_dir.path(),
        "[log]\nregions = 2\nregion_size = \"4MiB\"\nrecord_max = \"256KiB\"\n\
         [policy]\nname = \"fast-all\"\n",
    );
    let mut m = Mounted::unstarted(&["--config", &conf]);
    run(Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=6m,mode=0700", "sluice-test"])
        .arg(m.fast()));
    let _tmpfs = MountGuard(m.fast());
    m.start();
    assert!(
        m.log().contains("need up to"),
        "a warning at mount: {}",
        m.log()
    );
    let mut model = vec![0u8; 24 << 20];
    let mut rng = Rng(19);
    for b in model.iter_mut() {
        *b = (rng.next() >> 24) as u8;
    }
    let mut f = File::create(m.path("f")).unwrap();
    for chunk in model.chunks(1 << 20) {
        f.write_all(chunk).expect("a sequential write");
    }
    for i in 0..32u64 {
        let offset = (rng.next() % (24 << 20) as u64) & !4095;
        let len = (64 << 10).min(model.len() - offset as usize);
        let fill = vec![i as u8 | 0x80; len];
        f.write_all_at(&fill, offset).expect("a rewrite");
        model[offset as usize..offset as usize + len].copy_from_slice(&fill);
    }
    f.sync_all().unwrap();
    assert!(fs::read(m.path("f")).unwrap() == model, "read back");
    let status = m.sluice(&["status", m.point.to_str().unwrap(), "--json"]);
    let status = String::from_utf8_lossy(&status.stdout).to_string();
    let field = |name: &str| {
        status
            .split(&format!("\"{name}\":"))
            .nth(1)
            .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("no {name} in {status}"))
    };
    assert!(field("fast_errors") > 0, "{status}");
    assert!(field("fast_fallback_bytes") > 0, "{status}");
    assert!(status.contains("No space left"), "the cause: {status}");
    drop(f);
    m.unmount(false);
    assert!(
        fs::read(m.capacity().join("f")).unwrap() == model,
        "the capacity file after the drain"
    );
}

/// Regression (issue 20): a kill -9'd node that remounted replayed its log
/// over whatever happened meanwhile: a file deleted through the shared
/// capacity tier came back with the old bytes, and one replaced was
/// overwritten. They are quarantined instead: listed by status, restorable
/// with `sluice quarantine restore`.
#[test]
fn issue_20_recovery_after_kill_9_never_overwrites_the_future() {
    use std::os::unix::fs::FileExt;
    if !fuse_available() {
        return;
    }
    // node-local: an fsync leaves the bytes in the log (under the default
    // close-to-open they reach the capacity tier and leave the log).
    let setup = tempfile::tempdir().unwrap();
    let config = config_file(setup.path(), "[mount]\nconsistency = \"node-local\"\n");
    let mut m = Mounted::new(&["--config", &config, "--policy", "fast-all"]);
    for name in ["deleted", "replaced", "kept"] {
        let f = File::create(m.path(name)).unwrap();
        f.write_all_at(b"NEW!", 0).unwrap();
        f.sync_all().unwrap();
    }
    m.kill9();
    // Another node, through the shared capacity directory.
    fs::remove_file(m.capacity().join("deleted")).unwrap();
    fs::write(m.capacity().join("tmp"), b"theirs").unwrap();
    fs::rename(m.capacity().join("tmp"), m.capacity().join("replaced")).unwrap();
    m.start();
    assert!(!m.path("deleted").exists(), "a deleted file came back");
    assert_eq!(fs::read(m.path("replaced")).unwrap(), b"theirs");
    assert_eq!(fs::read(m.path("kept")).unwrap(), b"NEW!");
    let status = m.sluice(&["status", m.point.to_str().unwrap()]);
    let status = String::from_utf8_lossy(&status.stdout).to_string();
    assert!(
        status.contains("quarantine  2 files"),
        "status lists them: {status}"
    );
    let fast = m.fast().display().to_string();
    let list = m.sluice(&["quarantine", "list", "--fast", &fast]);
    let list = String::from_utf8_lossy(&list.stdout).to_string();
    let line = list
        .lines()
        .find(|l| l.contains(" deleted "))
        .unwrap_or_else(|| panic!("{list}"));
    assert!(line.contains("deleted from the capacity tier"), "{line}");
    let name = line.split_whitespace().next().unwrap();
    let to = m.path("restored");
    let out = m.sluice(&[
        "quarantine",
        "restore",
        "--fast",
        &fast,
        name,
        "--to",
        to.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(fs::read(&to).unwrap(), b"NEW!");
    let list = m.sluice(&["quarantine", "list", "--fast", &fast]);
    assert_eq!(String::from_utf8_lossy(&list.stdout).lines().count(), 1);
    m.unmount(false);
    assert!(!m.capacity().join("deleted").exists());
    assert_eq!(fs::read(m.capacity().join("replaced")).unwrap(), b"theirs");
}

/// Regression (issue 19): with the capacity directory deleted under a live
/// mount, writes got ENOENT, yet `sluice drain` said "the capacity tier
/// holds every byte". The drain fails and says the directory is gone.
#[test]
fn issue_19_drain_fails_when_the_capacity_directory_was_removed() {
    if !fuse_available() {
        return;
    }
    let mut m = Mounted::new(&["--policy", "fast-all"]);
    fs::write(m.path("f"), b"buffered").unwrap();
    fs::remove_dir_all(m.capacity()).unwrap();
    let out = m.sluice(&["drain", m.point.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!out.status.success(), "drain succeeded: {stderr}");
    assert!(
        stderr.contains("removed or replaced"),
        "the cause: {stderr}"
    );
    m.unmount(true);
}

/// `sluice status --json` of the mount at `m`, parsed.
fn status_json(m: &Mounted) -> serde_json::Value {
    let out = m.sluice(&["status", "--json", m.point.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "sluice status --json: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("status --json is JSON")
}

/// The `last_errors` entries of `status` whose `op` is `op`.
fn last_errors<'a>(status: &'a serde_json::Value, op: &str) -> Vec<&'a serde_json::Value> {
    status["last_errors"]
        .as_array()
        .expect("status has last_errors")
        .iter()
        .filter(|e| e["op"] == op)
        .collect()
}

/// Issue 19 (visible causes): an application's write got ENOSPC from a
/// full capacity tier and the cause was written nowhere: status showed a
/// count. `sluice status` (text and JSON) shows it under `last_errors` with
/// the path, the tier and the errno, and the mount's log has an ERROR line
/// saying the same. (Without FUSE passthrough, which capacity-only would
/// use: then the kernel writes the file itself, and the application gets
/// ENOSPC without sluice seeing it; docs/fuse.md, "Passthrough".)
#[test]
fn issue_19_status_shows_the_cause_of_an_error_an_application_got() {
    if !fuse_available_as_root("needs root to mount a tmpfs") {
        return;
    }
    let mut m = Mounted::unstarted(&["--policy", "capacity-only"]);
    let config = config_file(m.dir.path(), "[mount]\npassthrough = false\n");
    m.args.extend(["--config".to_string(), config]);
    run(Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m", "sluice-test"])
        .arg(m.capacity()));
    let _tmpfs = MountGuard(m.capacity());
    m.start();
    let error = fs::write(m.path("big"), vec![7u8; 4 << 20]).expect_err("4 MiB into 1 MiB");
    const ENOSPC: i32 = 28;
    assert_eq!(error.raw_os_error(), Some(ENOSPC), "{error}");
    let status = status_json(&m);
    let writes = last_errors(&status, "write");
    let entry = writes
        .iter()
        .find(|e| e["path"] == "big")
        .unwrap_or_else(|| panic!("no write error of big in {status:#}"));
    assert_eq!(entry["tier"], "capacity", "{entry:#}");
    assert_eq!(entry["errno"], ENOSPC, "{entry:#}");
    assert_eq!(entry["errno_name"], "ENOSPC", "{entry:#}");
    let message = entry["message"].as_str().unwrap();
    assert!(message.contains("No space left on device"), "{message}");
    assert!(entry["at"].as_str().unwrap().ends_with('Z'), "{entry:#}");
    assert!(
        status["incidents_total"].as_u64().unwrap() >= 1,
        "{status:#}"
    );
    // An expected answer (a lookup of a missing name) is not an incident.
    assert!(fs::metadata(m.path("missing")).is_err());
    assert!(last_errors(&status_json(&m), "lookup").is_empty());
    let text = m.sluice(&["status", m.point.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&text.stdout);
    let line = text
        .lines()
        .find(|l| l.contains("write big"))
        .unwrap_or_else(|| panic!("no last error line for big:\n{text}"));
    assert!(
        line.contains("ENOSPC") && line.contains("capacity"),
        "{line}"
    );
    let log = m.log();
    assert!(
        log.lines()
            .any(|l| l.contains("ERROR") && l.contains("big") && l.contains("ENOSPC")),
        "no ERROR line naming big and ENOSPC in the mount's log:\n{log}"
    );
    let metrics_free = m.sluice(&["status", m.point.to_str().unwrap()]);
    assert!(metrics_free.status.success());
    m.unmount(false);
}

/// Issue 19 (visible causes): a flush that fails in the background (a
/// full capacity tier) kept only a counter and the last message. It is in
/// `last_errors` as a `flush` on the capacity tier with its errno, and
/// logged.
#[test]
fn issue_19_status_shows_the_cause_of_a_background_flush_error() {
    if !fuse_available_as_root("needs root to mount a tmpfs") {
        return;
    }
    let mut m = Mounted::unstarted(&["--policy", "fast-all"]);
    run(Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m", "sluice-test"])
        .arg(m.capacity()));
    let _tmpfs = MountGuard(m.capacity());
    m.start();
    let data: Vec<u8> = (0..4u32 << 20).map(|i| (i % 241) as u8).collect();
    fs::write(m.path("big"), &data).unwrap();
    let drain = m.sluice(&["drain", m.point.to_str().unwrap()]);
    assert!(!drain.status.success(), "a drain into a full tier failed");
    let status = status_json(&m);
    let flushes = last_errors(&status, "flush");
    let entry = flushes
        .first()
        .unwrap_or_else(|| panic!("no flush error in {status:#}"));
    assert_eq!(entry["tier"], "capacity", "{entry:#}");
    assert_eq!(entry["errno_name"], "ENOSPC", "{entry:#}");
    assert!(
        entry["message"].as_str().unwrap().contains("big"),
        "{entry:#}"
    );
    assert!(
        m.log()
            .lines()
            .any(|l| l.contains("ERROR") && l.contains("flush") && l.contains("ENOSPC")),
        "{}",
        m.log()
    );
    // Room again: the data goes where it belongs.
    run(Command::new("mount")
        .args(["-o", "remount,size=16m"])
        .arg(m.capacity()));
    m.unmount(false);
    assert!(fs::read(m.capacity().join("big")).unwrap() == data);
}

/// Issue 21: logs go through `tracing`. `--log-level` wins over
/// `RUST_LOG`, which wins over the default (`info`): a debug event (the
/// control requests a mount serves) shows with either set to debug, and
/// `--log-level warn` silences the info line of the mount.
#[test]
fn issue_21_log_level_and_rust_log_choose_what_the_mount_logs() {
    if !fuse_available() {
        return;
    }
    let logged = |env: Option<&str>, flag: Option<&str>| -> String {
        let mut m = Mounted::unstarted(&[]);
        m.env = env.map(str::to_string);
        m.log_level = flag.map(str::to_string);
        m.start();
        let _ = status_json(&m);
        m.unmount(false);
        m.log()
    };
    let default = logged(None, None);
    assert!(
        default.contains(" INFO ") && default.contains("mounted"),
        "{default}"
    );
    assert!(!default.contains("DEBUG"), "{default}");
    let by_env = logged(Some("debug"), None);
    assert!(
        by_env.contains("DEBUG") && by_env.contains("control request"),
        "{by_env}"
    );
    let by_flag = logged(Some("error"), Some("debug"));
    assert!(
        by_flag.contains("DEBUG") && by_flag.contains("control request"),
        "{by_flag}"
    );
    let quiet = logged(None, Some("warn"));
    assert!(!quiet.contains("mounted"), "{quiet}");
}

/// A checkpoint job registered after a file of its glob was written through
/// the engine (and is still buffered) left the checkpoint stager serving
/// the capacity tier's bytes of it, without the buffered ones (found while
/// merging the shared-catalogue work of issue 20: a job learned from
/// another node does the same). The engine serves the file until it lets
/// it go.
#[test]
fn a_job_registered_after_a_buffered_write_never_hides_the_buffered_bytes() {
    if !fuse_available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let config = config_file(
        tmp.path(),
        "[bbos]\ncapacity = \"64MiB\"\n[policy]\nname = \"fast-all\"\n",
    );
    let mut m = Mounted::new(&["--config", &config]);
    let point = m.point.to_str().unwrap().to_string();
    fs::create_dir(m.path("ck")).unwrap();
    let data: Vec<u8> = (0..1u32 << 20).map(|i| (i % 251) as u8).collect();
    fs::write(m.path("ck/a"), &data).unwrap();
    let out = m.sluice(&[
        "ckpt", "register", "--mount", &point, "--id", "late", "--period", "10s", "--size", "8MiB",
        "--nodes", "1", "--glob", "ck/*",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        fs::read(m.path("ck/a")).unwrap() == data,
        "read after the job"
    );
    m.unmount(false);
    assert!(fs::read(m.capacity().join("ck/a")).unwrap() == data);
}

/// A mount whose drain is slow on purpose: everything goes to the log
/// (fast-all), stays there until drained (node-local, no age flush), and
/// flushes at `bandwidth` per second in 1 MiB runs, one at a time (a stop
/// takes effect between runs).
fn slow_drain_mount(bandwidth: &str) -> (Mounted, tempfile::TempDir) {
    let setup = tempfile::tempdir().unwrap();
    let config = config_file(
        setup.path(),
        &format!(
            "[mount]\nconsistency = \"node-local\"\n[flush]\nage = \"0s\"\n\
             bandwidth = \"{bandwidth}\"\nwriters = 1\nrun_max = \"1MiB\"\n"
        ),
    );
    (
        Mounted::new(&["--policy", "fast-all", "--config", &config]),
        setup,
    )
}

/// `MiB` MiB of a pattern that differs per byte position.
fn pattern(mib: usize) -> Vec<u8> {
    (0..mib << 20).map(|i| (i % 253) as u8).collect()
}

/// Start `sluice ARGS` with stdout and stderr piped; stderr's lines arrive
/// on the channel as they are written.
fn spawn_piped(args: &[&str]) -> (Child, std::sync::mpsc::Receiver<String>) {
    let mut child = Command::new(SLUICE)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    (child, rx)
}

/// Wait (at most 30 s) for a line of `lines` that contains `text`; every
/// line read meanwhile is kept in `seen`.
fn wait_for_line(
    lines: &std::sync::mpsc::Receiver<String>,
    text: &str,
    seen: &mut Vec<String>,
) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if let Ok(line) = lines.recv_timeout(Duration::from_millis(100)) {
            seen.push(line.clone());
            if line.contains(text) {
                return line;
            }
        }
    }
    panic!("no line with {text:?} in 30 s: {seen:#?}");
}

fn interrupt(pid: u32) {
    let status = Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill -INT {pid}");
}

/// Issue 21: `sluice drain` printed nothing until the drain ended. With
/// stderr piped it writes plain lines — bytes drained of those buffered,
/// rate, ETA, what is left — at least one every 2 s, the last at 100 %;
/// stdout keeps its one result line.
#[test]
fn issue_21_drain_shows_plain_progress_lines_when_piped() {
    if !fuse_available() {
        return;
    }
    let (m, _setup) = slow_drain_mount("2MiB");
    let data = pattern(8);
    fs::write(m.path("big"), &data).unwrap();
    let point = m.point.display().to_string();
    let started = Instant::now();
    let out = m.sluice(&["drain", &point]);
    let seconds = started.elapsed().as_secs_f64();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}{}", m.log());
    assert_eq!(
        stdout_text(&out).trim(),
        "drained: the capacity tier holds every byte"
    );
    let label = format!("draining {point}: ");
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with(&label)).collect();
    // One at the start, one every 2 s, one at the end.
    assert!(
        lines.len() >= 2 && lines.len() as f64 >= seconds / 2.0,
        "{seconds:.1} s of drain, {} lines: {err}",
        lines.len()
    );
    assert!(
        lines[0].contains("of 8.00 MiB") && lines[0].contains("8.00 MiB left"),
        "the first line counts what was buffered: {}",
        lines[0]
    );
    let last = lines.last().unwrap();
    assert!(
        last.contains("8.00 MiB of 8.00 MiB (100%)") && last.ends_with("drained"),
        "{last}"
    );
    assert!(fs::read(m.capacity().join("big")).unwrap() == data);
}

fn stdout_text(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// Issue 21: a second Ctrl-C during `sluice unmount`'s drain was ignored
/// without a word. The first says what happens and what a second does;
/// the second makes the unmount keep the rest in the log, the mount ends
/// cleanly, and the next mount recovers every byte: nothing is lost.
#[test]
fn issue_21_second_ctrl_c_at_unmount_keeps_the_rest_in_the_log() {
    if !fuse_available() {
        return;
    }
    let (mut m, _setup) = slow_drain_mount("1MiB");
    let data = pattern(12);
    fs::write(m.path("big"), &data).unwrap();
    let point = m.point.display().to_string();
    let (unmount, lines) = spawn_piped(&["unmount", &point]);
    let mut seen = Vec::new();
    wait_for_line(&lines, &format!("draining {point}: "), &mut seen);
    interrupt(unmount.id());
    let said = wait_for_line(&lines, "press Ctrl-C again", &mut seen);
    assert!(
        said.contains("unmount without draining") && said.contains("next mount"),
        "{said}"
    );
    interrupt(unmount.id());
    wait_for_line(&lines, "stopping the drain", &mut seen);
    let out = unmount.wait_with_output().unwrap();
    assert!(out.status.success(), "{seen:#?}{}", m.log());
    let said = stdout_text(&out);
    assert!(said.contains("stays in the log"), "{said}");
    let status = wait_exit(&mut m);
    assert!(status.success(), "{status}: {}", m.log());
    assert!(!is_mounted(&m.point));
    assert!(
        fs::read(m.capacity().join("big")).unwrap_or_default() != data,
        "the drain was stopped before its end"
    );
    // The next mount recovers the rest; nothing was lost.
    m.start();
    assert!(fs::read(m.path("big")).unwrap() == data, "{}", m.log());
    m.unmount(false);
    assert!(fs::read(m.capacity().join("big")).unwrap() == data);
}

/// Issue 21: the same at a foreground `sluice mount`: the first Ctrl-C
/// unmounts and says that a second one keeps the buffered bytes instead of
/// draining them; the second does, and the next mount recovers them.
#[test]
fn issue_21_second_ctrl_c_at_a_foreground_mount_keeps_the_rest_in_the_log() {
    if !fuse_available() {
        return;
    }
    let (mut m, _setup) = slow_drain_mount("1MiB");
    let data = pattern(12);
    fs::write(m.path("big"), &data).unwrap();
    let pid = m.child.as_ref().unwrap().id();
    interrupt(pid);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !m.log().contains("press Ctrl-C again") {
        assert!(Instant::now() < deadline, "no hint: {}", m.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(m.log().contains("draining 12.00 MiB"), "{}", m.log());
    // The second Ctrl-C in the middle of the drain: its first run is out.
    while fs::metadata(m.capacity().join("big")).map_or(0, |meta| meta.len()) == 0 {
        assert!(
            Instant::now() < deadline,
            "the drain did not start: {}",
            m.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    interrupt(pid);
    let status = wait_exit(&mut m);
    assert!(status.success(), "{status}: {}", m.log());
    let log = m.log();
    assert!(log.contains("stopping the drain"), "{log}");
    assert!(log.contains("drain stopped"), "{log}");
    assert!(!is_mounted(&m.point));
    assert!(fs::read(m.capacity().join("big")).unwrap_or_default() != data);
    m.start();
    assert!(fs::read(m.path("big")).unwrap() == data, "{}", m.log());
    m.unmount(false);
    assert!(fs::read(m.capacity().join("big")).unwrap() == data);
}

/// `fallocate(1)` on `path` with `args`; whether it worked, and its stderr.
fn fallocate(path: &Path, args: &[&str]) -> (bool, String) {
    let out = Command::new("fallocate")
        .args(args)
        .arg(path)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Issue 37: every fallocate mode through a real mount, over bytes the
/// log holds (policy fast-all) and through FUSE passthrough (capacity-only:
/// the kernel reads and writes the capacity file itself). The file reads
/// as a byte model after each step, and the capacity tier holds the same
/// bytes after the unmount's drain. Collapse and insert: Linux's FUSE
/// module answers them with EOPNOTSUPP itself, without asking the daemon
/// (docs/fuse.md, "fallocate"); should a kernel pass them on, the model
/// says what they must do. Also `chown(path, -1, -1)` sets the ctime, as
/// on ext4.
#[test]
fn fallocate_modes_through_the_mount_land_on_the_capacity_tier() {
    if !fuse_available() {
        return;
    }
    const K: usize = 4096;
    // node-local: a close leaves the bytes in the log (close-to-open
    // would write them back at every close of fallocate(1)).
    let setup = tempfile::tempdir().unwrap();
    let config = config_file(setup.path(), "[mount]\nconsistency = \"node-local\"\n");
    for policy in ["fast-all", "capacity-only"] {
        let mut m = Mounted::new(&["--policy", policy, "--config", &config]);
        let f = m.path("f");
        let mut model: Vec<u8> = (0..16 * K).map(|i| (i % 251) as u8 | 1).collect();
        fs::write(&f, &model).unwrap();
        let check = |model: &[u8], what: &str| {
            let got = fs::read(&f).unwrap();
            assert_eq!(got.len(), model.len(), "{policy}: {what}: size");
            assert!(got == model, "{policy}: {what}: bytes differ");
        };
        if policy == "fast-all" {
            let status = m.sluice(&["status", "--json", m.point.to_str().unwrap()]);
            let json = String::from_utf8_lossy(&status.stdout);
            assert!(
                json.contains("\"buffered_bytes\"") && !json.contains("\"buffered_bytes\":0"),
                "{policy}: the bytes are in the log: {json}"
            );
        }
        // Punch a hole (KEEP_SIZE implied) over written bytes.
        let (ok, e) = fallocate(&f, &["-p", "-o", "4096", "-l", "8192"]);
        assert!(ok, "{policy}: punch: {e}");
        model[K..3 * K].fill(0);
        check(&model, "punch");
        // Zero a range, and one past the end without KEEP_SIZE.
        let (ok, e) = fallocate(&f, &["-z", "-o", "20480", "-l", "4096"]);
        assert!(ok, "{policy}: zero: {e}");
        model[5 * K..6 * K].fill(0);
        let (ok, e) = fallocate(&f, &["-z", "-o", "61440", "-l", "8192"]);
        assert!(ok, "{policy}: zero past the end: {e}");
        model[15 * K..].fill(0);
        model.resize(17 * K, 0);
        check(&model, "zero");
        // Plain allocation past the end sets the size; KEEP_SIZE does not.
        let (ok, e) = fallocate(&f, &["-l", "131072"]);
        assert!(ok, "{policy}: allocate: {e}");
        model.resize(32 * K, 0);
        let (ok, e) = fallocate(&f, &["-n", "-l", "262144"]);
        assert!(ok, "{policy}: allocate, keep size: {e}");
        check(&model, "allocate");
        // Bytes written over the zeros after all this are buffered again.
        let file = OpenOptions::new().write(true).open(&f).unwrap();
        file.write_all_at(&[9; K], 2 * K as u64).unwrap();
        drop(file);
        model[2 * K..3 * K].fill(9);
        // Collapse and insert: refused by the kernel's FUSE module, or
        // done right.
        let served = || {
            let status = m.sluice(&["status", "--json", m.point.to_str().unwrap()]);
            let json = String::from_utf8_lossy(&status.stdout).into_owned();
            let at = json.find("\"fuse_fallocates\":").expect("counted") + 18;
            let digits: String = json[at..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            digits.parse::<u64>().unwrap()
        };
        for (flag, what) in [("-c", "collapse"), ("-i", "insert")] {
            let before = served();
            let (ok, e) = fallocate(&f, &[flag, "-o", "4096", "-l", "4096"]);
            if !ok {
                assert_eq!(
                    served(),
                    before,
                    "{policy}: {what}: refused before sluice saw it"
                );
            }
            if ok {
                if flag == "-c" {
                    model.drain(K..2 * K);
                } else {
                    model.splice(K..K, std::iter::repeat_n(0, K));
                }
            } else {
                assert!(
                    e.contains("Operation not supported"),
                    "{policy}: {what}: {e}"
                );
            }
            check(&model, what);
        }
        // chown(path, -1, -1): only the ctime changes (ext4 does this).
        let before = fs::metadata(&f).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        std::os::unix::fs::chown(&f, None, None).unwrap();
        let after = fs::metadata(&f).unwrap();
        assert!(
            (after.ctime(), after.ctime_nsec()) > (before.ctime(), before.ctime_nsec()),
            "{policy}: chown -1 -1 set the ctime"
        );
        assert_eq!(after.mtime(), before.mtime(), "{policy}: and not the mtime");
        let status = m.sluice(&["status", "--json", m.point.to_str().unwrap()]);
        let json = String::from_utf8_lossy(&status.stdout);
        assert!(
            json.contains("\"fuse_fallocates\":") && !json.contains("\"fuse_fallocates\":0"),
            "{policy}: the mount counts the fallocates it served: {json}"
        );
        m.unmount(false);
        let on_capacity = fs::read(m.capacity().join("f")).unwrap();
        assert!(
            on_capacity == model,
            "{policy}: the capacity tier after the drain differs"
        );
    }
}

/// Issue 37: what fsx 0.3.2 cannot do (it has no zero-range operation).
/// Random writes, reads, truncates, fsyncs and fallocates of every mode
/// the kernel passes on (plain, `KEEP_SIZE`, `PUNCH_HOLE`, `ZERO_RANGE`
/// with and without `KEEP_SIZE`) on one file through a real mount whose
/// log holds the bytes (policy fast-all, node-local, small regions that
/// fill, flush and get reused), each read checked against a byte model,
/// then the capacity tier after the drain. Zeros over log-held bytes that
/// a flush or a later write-back brought back would show here.
#[test]
fn fallocate_exerciser_through_the_mount_matches_a_model() {
    use rustix::fs::{fallocate, FallocateFlags};
    if !fuse_available() {
        return;
    }
    let setup = tempfile::tempdir().unwrap();
    let config = config_file(
        setup.path(),
        "[mount]\nconsistency = \"node-local\"\n\
         [log]\nregions = 3\nregion_size = \"2MiB\"\nrecord_max = \"256KiB\"\n",
    );
    let mut m = Mounted::new(&["--policy", "fast-all", "--config", &config]);
    let path = m.path("f");
    let file = OpenOptions::new()
        .create(true)
        .read(true)
        .write(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    let mut model: Vec<u8> = Vec::new();
    let mut rng = Rng(0x37_f411);
    let (mut zeroed, mut punched) = (0, 0);
    const MAX: u64 = 1 << 20;
    for step in 0..900u64 {
        let offset = rng.below(MAX);
        let len = 1 + rng.below(128 * 1024);
        let end = (offset + len) as usize;
        match rng.below(12) {
            0..=3 => {
                let data: Vec<u8> = (0..len).map(|i| (step as u8) ^ (i as u8) | 1).collect();
                file.write_all_at(&data, offset).unwrap();
                if model.len() < end {
                    model.resize(end, 0);
                }
                model[offset as usize..end].copy_from_slice(&data);
            }
            4 | 5 => {
                let mut got = vec![0u8; model.len()];
                file.read_exact_at(&mut got, 0).unwrap();
                let differs = got.iter().zip(&model).position(|(a, b)| a != b);
                assert!(differs.is_none(), "step {step}: byte {differs:?} differs");
                assert_eq!(
                    file.metadata().unwrap().len(),
                    model.len() as u64,
                    "step {step}: size"
                );
            }
            6 => {
                let size = rng.below(MAX);
                file.set_len(size).unwrap();
                model.resize(size as usize, 0);
            }
            7 => file.sync_all().unwrap(),
            8 => {
                fallocate(
                    &file,
                    FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE,
                    offset,
                    len,
                )
                .unwrap_or_else(|e| panic!("step {step}: punch: {e}"));
                let to = end.min(model.len());
                model[(offset as usize).min(to)..to].fill(0);
                punched += 1;
            }
            9 | 10 => {
                let keep = rng.below(2) == 0;
                let flags = if keep {
                    FallocateFlags::ZERO_RANGE | FallocateFlags::KEEP_SIZE
                } else {
                    FallocateFlags::ZERO_RANGE
                };
                fallocate(&file, flags, offset, len)
                    .unwrap_or_else(|e| panic!("step {step}: zero range: {e}"));
                let to = end.min(model.len());
                model[(offset as usize).min(to)..to].fill(0);
                if !keep && model.len() < end {
                    model.resize(end, 0);
                }
                zeroed += 1;
            }
            _ => {
                let keep = rng.below(2) == 0;
                let flags = if keep {
                    FallocateFlags::KEEP_SIZE
                } else {
                    FallocateFlags::empty()
                };
                fallocate(&file, flags, offset, len)
                    .unwrap_or_else(|e| panic!("step {step}: allocate: {e}"));
                if !keep && model.len() < end {
                    model.resize(end, 0);
                }
            }
        }
    }
    assert!(
        zeroed > 40 && punched > 40,
        "{zeroed} zeroed, {punched} punched"
    );
    drop(file);
    assert!(fs::read(&path).unwrap() == model, "before the unmount");
    let status = m.sluice(&["status", "--json", m.point.to_str().unwrap()]);
    let json = String::from_utf8_lossy(&status.stdout);
    assert!(
        json.contains("\"regions_flushed\":") && !json.contains("\"regions_flushed\":0"),
        "regions were flushed and reused: {json}"
    );
    m.unmount(false);
    assert!(
        fs::read(m.capacity().join("f")).unwrap() == model,
        "the capacity tier after the drain"
    );
}

/// Issue 37 (a known limit made smaller): `F_GETLK` through the mount
/// reports the pid of the process of this node that holds the lock, as
/// on the capacity directory itself (sluice takes locks as OFD locks,
/// which carry no pid, so it reported 0).
#[test]
fn f_getlk_reports_the_holders_pid() {
    use nix::fcntl::{fcntl, FcntlArg};
    use nix::libc;
    use std::io::BufRead;
    use std::os::fd::AsFd;
    if !fuse_available() {
        return;
    }
    if Command::new("python3").arg("--version").output().is_err() {
        assert!(std::env::var_os("CI").is_none(), "CI: python3 is required");
        eprintln!("skipped: no python3");
        return;
    }
    let mut m = Mounted::new(&[]);
    let path = m.path("locked");
    fs::write(&path, vec![1u8; 8192]).unwrap();
    // Another process takes a write lock on bytes 100..200 and holds it.
    let mut holder = Command::new("python3")
        .args([
            "-c",
            "import fcntl, sys, time\n\
             f = open(sys.argv[1], 'r+')\n\
             fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB, 100, 100)\n\
             print('locked', flush=True)\n\
             time.sleep(60)\n",
        ])
        .arg(&path)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(holder.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "locked");
    let f = File::open(&path).unwrap();
    let mut probe = libc::flock {
        l_type: libc::F_RDLCK as libc::c_short,
        l_whence: libc::SEEK_SET as libc::c_short,
        l_start: 0,
        l_len: 0,
        l_pid: 0,
    };
    fcntl(f.as_fd(), FcntlArg::F_GETLK(&mut probe)).unwrap();
    let _ = holder.kill();
    let _ = holder.wait();
    assert_eq!(i32::from(probe.l_type), libc::F_WRLCK, "the lock is seen");
    assert_eq!((probe.l_start, probe.l_len), (100, 100));
    assert_eq!(probe.l_pid, holder.id() as i32, "the holder's pid");
    drop(f);
    m.unmount(false);
}

/// Issue 33 (readers and workers: docs/fuse.md, "Threads"): closes that
/// write files back to a slow disk hold no reader of /dev/fuse. Six files
/// buffered under close-to-open are closed at once, each close writing its
/// 64 MiB back to the emulated disk, one file after another; meanwhile a
/// lookup and a listing through the mount are answered while most closes
/// still run. Were the closes answered on the few readers, the lookup
/// would queue behind them and return with at most one still running.
/// Judged by order, not by time (a loaded machine may hold the test's own
/// thread longer than a close takes); a round in which the closes were
/// mostly done before the lookup started tells nothing and is run again.
#[test]
fn closes_writing_back_leave_the_mount_answering() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    if !fuse_available() {
        return;
    }
    let conf_dir = tempfile::tempdir().unwrap();
    let conf = config_file(
        conf_dir.path(),
        // Nothing written back before the closes: no idle pass, no region
        // flushed for age or for a pause in the writes.
        "[capacity]\ndevice = \"hdd\"\n[policy]\nname = \"fast-all\"\n\
         [flush]\nwrite_back_idle = \"0\"\nage = \"0s\"\nidle = \"1h\"\n",
    );
    let mut m = Mounted::new(&["--config", &conf]);
    let mut rounds = Vec::new();
    for round in 0..3u8 {
        let names: Vec<String> = (0..6).map(|i| format!("r{round}f{i}")).collect();
        let files: Vec<File> = names
            .iter()
            .enumerate()
            .map(|(i, name)| {
                let mut f = File::create(m.path(name)).unwrap();
                f.write_all(&vec![i as u8; 64 << 20]).unwrap();
                f
            })
            .collect();
        let closed = AtomicUsize::new(0);
        let (before, after, took) = std::thread::scope(|scope| {
            for f in files {
                let closed = &closed;
                scope.spawn(move || {
                    drop(f);
                    closed.fetch_add(1, Ordering::SeqCst);
                });
            }
            std::thread::sleep(Duration::from_millis(200));
            let before = 6 - closed.load(Ordering::SeqCst);
            let started = Instant::now();
            let missing = fs::metadata(m.path("not-there"));
            assert_eq!(missing.unwrap_err().kind(), std::io::ErrorKind::NotFound);
            let listed = fs::read_dir(&m.point).unwrap().count();
            assert_eq!(listed, 6 * (usize::from(round) + 1));
            (before, 6 - closed.load(Ordering::SeqCst), started.elapsed())
        });
        for (i, name) in names.iter().enumerate() {
            let cap = fs::read(m.capacity().join(name)).unwrap();
            assert!(
                cap.len() == 64 << 20 && cap.iter().all(|&b| b == i as u8),
                "{name}"
            );
        }
        rounds.push((before, after, took));
        if before >= 3 {
            assert!(
                after >= 2,
                "a lookup and a listing returned after the closes behind them: \
                 {before} closes running when they started, {after} when they \
                 returned, {took:?}"
            );
            m.unmount(false);
            return;
        }
    }
    let status = m.sluice(&["status", m.point.to_str().unwrap()]);
    panic!(
        "in every round the closes ended before the lookup started (closes running \
         before, after, time: {rounds:?}); status:\n{}\nlog:\n{}",
        String::from_utf8_lossy(&status.stdout),
        m.log()
    );
}
