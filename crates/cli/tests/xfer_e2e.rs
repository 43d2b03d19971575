//! `sluice xfer` end to end: the real binary as sink and source over
//! loopback TLS; kill -9 of the sender midway and a resumed rerun.

use std::fs;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

fn sluice() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Serve(Child);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn serve(dir: &Path, root: &Path, port: u16) -> Serve {
    let child = sluice()
        .args(["xfer", "serve", "--listen", &format!("127.0.0.1:{port}")])
        .arg("--root")
        .arg(root)
        .arg("--cert")
        .arg(dir.join("keys/sluice.crt"))
        .arg("--key")
        .arg(dir.join("keys/sluice.key"))
        .arg("--token-file")
        .arg(dir.join("token"))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "sink did not start");
        sleep(Duration::from_millis(50));
    }
    Serve(child)
}

fn send(dir: &Path, src: &Path, port: u16, extra: &[&str]) -> Command {
    send_with(dir, src, port, "token", extra)
}

fn send_with(dir: &Path, src: &Path, port: u16, token: &str, extra: &[&str]) -> Command {
    let mut c = sluice();
    c.args(["xfer", "send"])
        .arg(src)
        .arg(format!("sluice://127.0.0.1:{port}/in"))
        .arg("--ca")
        .arg(dir.join("keys/sluice.crt"))
        .arg("--token-file")
        .arg(dir.join(token))
        .arg("--journal")
        .arg(dir.join("journal"))
        .args(["--progress", "false", "--json"])
        .args(extra);
    c
}

fn setup() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let out = sluice()
        .args(["xfer", "keygen", "--out"])
        .arg(dir.path().join("keys"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    fs::write(dir.path().join("token"), "e2e-token\n").unwrap();
    dir
}

fn json(out: &std::process::Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "send failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn a_killed_sender_resumes_and_moves_only_missing_objects() {
    let dir = setup();
    let (src, dst) = (dir.path().join("src/set"), dir.path().join("dst"));
    fs::create_dir_all(&src).unwrap();
    fs::create_dir_all(&dst).unwrap();
    for i in 0..6 {
        let data: Vec<u8> = (0..(8usize << 20))
            .map(|k| (k / 4099 + i * 13) as u8)
            .collect();
        fs::write(src.join(format!("f{i}")), data).unwrap();
    }
    let port = free_port();
    let _sink = serve(dir.path(), &dst, port);
    // A slow source: an emulated PFS of 2 congested disks, 256 KiB objects.
    let slow = [
        "--layout",
        "pfs",
        "--pfs-targets",
        "2",
        "--pfs-congested",
        "0-1",
        "--pfs-factor",
        "4",
        "--object-size",
        "256KiB",
        "--threads",
        "2",
    ];
    let mut child = send(dir.path(), &src, port, &slow)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Kill it once the journal shows acknowledged objects.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let lines = fs::read_to_string(dir.path().join("journal")).map_or(0, |j| j.lines().count());
        if lines >= 20 {
            break;
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "the sender finished before it could be killed"
        );
        assert!(Instant::now() < deadline, "no progress in the journal");
        sleep(Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    // Nothing under a final name is incomplete.
    for e in fs::read_dir(dst.join("in/set")).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().into_string().unwrap();
        if !name.ends_with(".sluice-part") {
            assert_eq!(
                fs::read(e.path()).unwrap(),
                fs::read(src.join(&name)).unwrap(),
                "{name}"
            );
        }
    }
    let out = send(dir.path(), &src, port, &["--object-size", "256KiB"])
        .output()
        .unwrap();
    let s = json(&out);
    let total = 6 * 32;
    let resumed = s["objects_resumed"].as_u64().unwrap();
    let sent = s["objects"].as_u64().unwrap();
    let done_before = s["files_already_done"].as_u64().unwrap();
    // Killed after ~20 of 192 objects: no file was complete, some were partial.
    assert!(resumed > 0, "{s}");
    assert_eq!(sent + resumed + done_before * 32, total, "{s}");
    for i in 0..6 {
        let name = format!("f{i}");
        assert_eq!(
            fs::read(dst.join("in/set").join(&name)).unwrap(),
            fs::read(src.join(&name)).unwrap()
        );
    }
    assert!(
        !dir.path().join("journal").exists(),
        "journal kept after success"
    );
    let leftovers = fs::read_dir(dst.join("in/set")).unwrap().count();
    assert_eq!(leftovers, 6);
}

#[test]
fn bad_credentials_and_a_sink_without_authentication_are_refused() {
    let dir = setup();
    let src = dir.path().join("f");
    fs::write(&src, b"x").unwrap();
    let dst = dir.path().join("dst");
    fs::create_dir(&dst).unwrap();
    // No authentication configured: the sink will not start.
    let out = sluice()
        .args(["xfer", "serve", "--listen", "127.0.0.1:0", "--root"])
        .arg(&dst)
        .arg("--cert")
        .arg(dir.path().join("keys/sluice.crt"))
        .arg("--key")
        .arg(dir.path().join("keys/sluice.key"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("authentication"));

    let port = free_port();
    let _sink = serve(dir.path(), &dst, port);
    fs::write(dir.path().join("wrong"), "guess").unwrap();
    let out = send_with(dir.path(), &src, port, "wrong", &[])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("bad token"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(fs::read_dir(&dst).unwrap().count(), 0);
    // A destination outside the root.
    let out = sluice()
        .args(["xfer", "send"])
        .arg(&src)
        .arg(format!("sluice://127.0.0.1:{port}/../up"))
        .arg("--ca")
        .arg(dir.path().join("keys/sluice.crt"))
        .arg("--token-file")
        .arg(dir.path().join("token"))
        .arg("--no-journal")
        .output()
        .unwrap();
    assert!(!out.status.success());
    // The right token works.
    let s = json(&send(dir.path(), &src, port, &[]).output().unwrap());
    assert_eq!(s["files"], 1);
    assert_eq!(fs::read(dst.join("in/f")).unwrap(), b"x");
}

fn symlink_metadata_is_link(p: &Path) -> bool {
    fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_symlink())
}

#[test]
fn issue_21_a_second_run_moves_no_bytes() {
    let dir = setup();
    let (src, dst) = (dir.path().join("src/set"), dir.path().join("dst"));
    fs::create_dir_all(src.join("sub/empty")).unwrap();
    fs::create_dir_all(&dst).unwrap();
    for i in 0..5 {
        fs::write(src.join(format!("sub/f{i}")), vec![i as u8; 300_000]).unwrap();
    }
    std::os::unix::fs::symlink("sub/f0", src.join("link")).unwrap();
    let port = free_port();
    let _sink = serve(dir.path(), &dst, port);
    let first = json(&send(dir.path(), &src, port, &[]).output().unwrap());
    assert_eq!(first["files"], 5, "{first}");
    assert_eq!(first["bytes"], 1_500_000, "{first}");
    assert_eq!(first["dirs"], 3, "{first}");
    assert_eq!(first["links"], 1, "{first}");
    assert!(dst.join("in/set/sub/empty").is_dir());
    assert!(symlink_metadata_is_link(&dst.join("in/set/link")));

    // The second run, in words: nothing sent, everything counted.
    let out = sluice()
        .args(["xfer", "send"])
        .arg(&src)
        .arg(format!("sluice://127.0.0.1:{port}/in"))
        .arg("--ca")
        .arg(dir.path().join("keys/sluice.crt"))
        .arg("--token-file")
        .arg(dir.path().join("token"))
        .args(["--no-journal", "--progress", "false"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("sent 0 files, 0.0 MB"), "{text}");
    assert!(text.contains("posix layout, 0 targets"), "{text}");
    assert!(
        text.contains("unchanged 5 files (1.5 MB) not sent"),
        "{text}"
    );
    let again = json(&send(dir.path(), &src, port, &[]).output().unwrap());
    assert_eq!(again["bytes"], 0, "{again}");
    assert_eq!(again["files_unchanged"], 5, "{again}");
    // --ignore-times sends it all again.
    let all = json(
        &send(dir.path(), &src, port, &["--ignore-times"])
            .output()
            .unwrap(),
    );
    assert_eq!(all["bytes"], 1_500_000, "{all}");
    assert_eq!(all["targets"], 1, "{all}");
    // --checksum reads both copies and finds them equal.
    let sums = json(
        &send(dir.path(), &src, port, &["--checksum"])
            .output()
            .unwrap(),
    );
    assert_eq!(sums["bytes"], 0, "{sums}");
    assert_eq!(sums["files_unchanged"], 5, "{sums}");
    // --no-links leaves the link out and counts it.
    fs::remove_file(dst.join("in/set/link")).unwrap();
    let nolinks = json(
        &send(dir.path(), &src, port, &["--no-links"])
            .output()
            .unwrap(),
    );
    assert_eq!(nolinks["links"], 0, "{nolinks}");
    assert_eq!(nolinks["skipped_not_regular"], 1, "{nolinks}");
    assert!(fs::symlink_metadata(dst.join("in/set/link")).is_err());
}

#[test]
fn issue_21_zero_object_size_threads_and_connections_are_refused() {
    let dir = setup();
    let src = dir.path().join("f");
    fs::write(&src, vec![1u8; 9800]).unwrap();
    let dst = dir.path().join("dst");
    fs::create_dir(&dst).unwrap();
    let port = free_port();
    let _sink = serve(dir.path(), &dst, port);
    for (flag, value) in [
        ("--object-size", "0B"),
        ("--threads", "0"),
        ("--connections", "0"),
        ("--files-in-flight", "0"),
        ("--buffer", "0B"),
    ] {
        let out = send(dir.path(), &src, port, &[flag, value])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{flag} {value} accepted");
        assert!(err.contains(flag), "{flag}: {err}");
    }
    assert_eq!(fs::read_dir(&dst).unwrap().count(), 0);
}

/// A slow source (an emulated PFS of 2 congested disks, 256 KiB objects)
/// sending `src`; returns once the journal shows `lines` acknowledged
/// objects.
fn slow_send(dir: &Path, src: &Path, port: u16, lines: usize) -> Child {
    let slow = [
        "--layout",
        "pfs",
        "--pfs-targets",
        "2",
        "--pfs-congested",
        "0-1",
        "--pfs-factor",
        "4",
        "--object-size",
        "256KiB",
        "--threads",
        "2",
    ];
    let mut child = send(dir, src, port, &slow)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let n = fs::read_to_string(dir.join("journal")).map_or(0, |j| j.lines().count());
        if n >= lines {
            return child;
        }
        assert!(child.try_wait().unwrap().is_none(), "finished too early");
        assert!(Instant::now() < deadline, "no progress in the journal");
        sleep(Duration::from_millis(20));
    }
}

#[test]
fn issue_21_a_file_that_grows_during_its_send_fails_the_transfer() {
    let dir = setup();
    let (src, dst) = (dir.path().join("src/set"), dir.path().join("dst"));
    fs::create_dir_all(&src).unwrap();
    fs::create_dir_all(&dst).unwrap();
    fs::write(src.join("log"), vec![5u8; 8 << 20]).unwrap();
    let port = free_port();
    let _sink = serve(dir.path(), &dst, port);
    let child = slow_send(dir.path(), &src, port, 3);
    let mut f = fs::OpenOptions::new()
        .append(true)
        .open(src.join("log"))
        .unwrap();
    std::io::Write::write_all(&mut f, b"one more line\n").unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a torn copy exited 0: {err}");
    assert!(
        err.contains("1 files changed while they were sent"),
        "{err}"
    );
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(report.contains("size 8388608 -> 8388622"), "{report}");
    assert!(!dst.join("in/set/log").exists(), "torn copy put in place");
    eprintln!("sender said: {report}{err}");
}

#[test]
fn issue_21_a_sink_killed_midway_reads_as_a_closed_connection() {
    let dir = setup();
    let (src, dst) = (dir.path().join("src/set"), dir.path().join("dst"));
    fs::create_dir_all(&src).unwrap();
    fs::create_dir_all(&dst).unwrap();
    fs::write(src.join("big"), vec![5u8; 16 << 20]).unwrap();
    let port = free_port();
    let sink = serve(dir.path(), &dst, port);
    let child = slow_send(dir.path(), &src, port, 3);
    drop(sink); // kill -9
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains(&format!("the sink 127.0.0.1:{port} closed the connection")),
        "{err}"
    );
    assert!(!err.contains("docs.rs") && !err.contains("rustls"), "{err}");
    eprintln!("sender said: {err}");
}

fn local_copy(dir: &Path, src: &Path, dst: &Path, extra: &[&str]) -> Command {
    let mut c = sluice();
    c.args(["xfer", "copy"])
        .arg(src)
        .arg(dst)
        .arg("--journal")
        .arg(dir.join("copy-journal"))
        .args(["--progress", "false", "--json"])
        .args(extra);
    c
}

#[test]
fn issue_36_a_killed_local_copy_resumes_and_a_rerun_copies_nothing() {
    let dir = setup();
    let (src, dst) = (dir.path().join("src/set"), dir.path().join("dst"));
    fs::create_dir_all(&src).unwrap();
    for i in 0..4 {
        let data: Vec<u8> = (0..(8usize << 20))
            .map(|k| (k / 4099 + i * 13) as u8)
            .collect();
        fs::write(src.join(format!("f{i}")), data).unwrap();
    }
    // A slow source, as for the sender above.
    let slow = [
        "--layout",
        "pfs",
        "--pfs-targets",
        "2",
        "--pfs-congested",
        "0-1",
        "--pfs-factor",
        "4",
        "--object-size",
        "256KiB",
        "--threads",
        "2",
    ];
    let mut child = local_copy(dir.path(), &src, &dst, &slow)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let lines =
            fs::read_to_string(dir.path().join("copy-journal")).map_or(0, |j| j.lines().count());
        if lines >= 20 {
            break;
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "the copy finished before it could be killed"
        );
        assert!(Instant::now() < deadline, "no progress in the journal");
        sleep(Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    for e in fs::read_dir(dst.join("set")).unwrap() {
        let name = e.unwrap().file_name().into_string().unwrap();
        if !name.ends_with(".sluice-part") {
            assert_eq!(
                fs::read(dst.join("set").join(&name)).unwrap(),
                fs::read(src.join(&name)).unwrap(),
                "{name}"
            );
        }
    }
    let s = json(
        &local_copy(dir.path(), &src, &dst, &["--object-size", "256KiB"])
            .output()
            .unwrap(),
    );
    let (resumed, copied, before) = (
        s["objects_resumed"].as_u64().unwrap(),
        s["objects"].as_u64().unwrap(),
        s["files_already_done"].as_u64().unwrap(),
    );
    assert!(resumed > 0, "{s}");
    assert_eq!(copied + resumed + before * 32, 4 * 32, "{s}");
    assert_eq!(s["connections"], 0);
    for i in 0..4 {
        let name = format!("f{i}");
        assert_eq!(
            fs::read(dst.join("set").join(&name)).unwrap(),
            fs::read(src.join(&name)).unwrap()
        );
    }
    assert_eq!(fs::read_dir(dst.join("set")).unwrap().count(), 4);
    assert!(!dir.path().join("copy-journal").exists());

    // The second run finds every file unchanged; the text summary says so.
    let out = local_copy(dir.path(), &src, &dst, &[]).output().unwrap();
    let s = json(&out);
    assert_eq!(
        (s["files"].as_u64(), s["files_unchanged"].as_u64()),
        (Some(0), Some(4))
    );
    assert_eq!(s["bytes"], 0);
    let out = sluice()
        .args(["xfer", "copy"])
        .arg(&src)
        .arg(&dst)
        .args(["--no-journal", "--progress", "false"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("copied 0 files"), "{text}");
    assert!(text.contains("unchanged 4 files"), "{text}");

    // A destination inside the source is refused before anything is made.
    let out = local_copy(dir.path(), &src, &src.join("sub"), &[])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("into itself"));
    assert!(!src.join("sub").exists());
}
