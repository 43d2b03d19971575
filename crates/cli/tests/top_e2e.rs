//! `sluice top` as a person uses it (issue 21): in a terminal (a detached
//! tmux session, 160×50), over a real mount, while a file is written
//! through it; the screen is read with `tmux capture-pane`, keys are sent
//! with `tmux send-keys`. Checks that the view shows the mount and its
//! bytes, that `q` and Ctrl-C quit with status 0 and give the terminal back
//! (the shell's output visible again, canonical mode and echo on), and that
//! a mount that goes away is shown as such.
//!
//! Needs FUSE (as `mount_e2e.rs`) and tmux (`scripts/setup.sh` installs
//! both). Without them the test fails under CI=true and is skipped with a
//! message otherwise.

// The test waits for the screen by wall clock.
#![allow(clippy::disallowed_methods)]

mod support;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use support::{fuse_available, required, Mounted, SLUICE};

fn tmux_available() -> bool {
    let ok = Command::new("tmux")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    required(ok, "tmux (for the sluice top test)")
}

/// A tmux server of the test's own (its socket in a temp dir) with one
/// detached 160×50 session running `sh`; killed when dropped.
struct Tmux {
    socket: PathBuf,
}

impl Tmux {
    fn start(dir: &Path) -> Tmux {
        let tmux = Tmux {
            socket: dir.join("tmux.sock"),
        };
        tmux.run(&[
            "new-session",
            "-d",
            "-x",
            "160",
            "-y",
            "50",
            "-s",
            "top",
            "env PS1='$ ' sh",
        ]);
        tmux
    }

    fn run(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "tmux {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Types `line` into the shell and presses Enter.
    fn type_line(&self, line: &str) {
        self.run(&["send-keys", "-t", "top", "-l", line]);
        self.run(&["send-keys", "-t", "top", "Enter"]);
    }

    /// The screen's text.
    fn screen(&self) -> String {
        self.run(&["capture-pane", "-p", "-t", "top"])
    }

    /// Waits until the screen satisfies `ready`, and returns it.
    fn wait_for(&self, what: &str, ready: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        loop {
            let screen = self.screen();
            if ready(&screen) {
                return screen;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "no {what} after 30 s; the screen:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .arg("kill-server")
            .output();
    }
}

/// Quit keys leave `sluice top` with status 0 and the terminal as it was:
/// the shell's output is on screen again (the alternate screen was left)
/// and the line discipline is canonical with echo (raw mode was left).
fn assert_exited_and_restored(tmux: &Tmux, marker: &str) {
    let screen = tmux.wait_for(marker, |s| s.contains(marker));
    assert!(
        !screen.contains("sluice top "),
        "the view is still drawn:\n{screen}"
    );
    tmux.type_line("stty -a | tr ' ' '\\n' | grep -x -e icanon -e -icanon -e echo -e -echo | tr '\\n' ' '; echo stty-done");
    // In raw mode stty would say -icanon -echo.
    tmux.wait_for("stty's answer: canonical mode and echo", |s| {
        s.contains("\nicanon echo stty-done")
    });
}

#[test]
fn top_shows_a_mount_live_and_quits_cleanly() {
    if !fuse_available() || !tmux_available() {
        return;
    }
    let setup = tempfile::tempdir().unwrap();
    // node-local: under close-to-open (the default) the close that ends
    // the write puts the bytes on the capacity tier at once, so nothing
    // would stay buffered; keeping the file open does not help, since
    // each child process of this test closes its inherited copy of the
    // descriptor at exec, and FUSE sends that close (FLUSH) too.
    let config = setup.path().join("sluice.toml");
    fs::write(&config, "[mount]\nconsistency = \"node-local\"\n").unwrap();
    let config = config.display().to_string();
    let mut m = Mounted::new(&["--config", &config, "--policy", "fast-all"]);
    let tmux = Tmux::start(m.dir.path());
    let point = m.point.display().to_string();
    let top = format!("'{SLUICE}' top --interval 0.5 '{point}'");
    // Without a terminal it refuses and points to `sluice status --json`.
    let piped = Command::new(SLUICE).args(["top", &point]).output().unwrap();
    assert!(!piped.status.success());
    assert!(
        String::from_utf8_lossy(&piped.stderr).contains("sluice top needs a terminal"),
        "{}",
        String::from_utf8_lossy(&piped.stderr)
    );

    tmux.type_line(&format!("{top}; echo top-exited-$?"));
    tmux.wait_for("the view", |s| {
        s.contains("sluice top") && s.contains("answering")
    });
    // A file written through the mount: its bytes go to the log
    // (fast-all) and stay there until the flusher takes them (node-local:
    // a close does not write them to the capacity tier).
    let data: Vec<u8> = (0..4 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
    fs::write(m.path("written-through-top"), &data).unwrap();
    let screen = tmux.wait_for(
        "the 4 MiB routed to the fast tier, buffered or flushed",
        |s| {
            s.contains("routed   fast 4.0 MiB")
                && (s.contains("buffered 4.0 MiB") || s.contains("flushed  4.0 MiB"))
        },
    );
    if screen.contains("buffered 4.0 MiB") {
        assert!(screen.contains("oldest buffered write"), "{screen}");
    }
    assert!(screen.contains(&point), "{screen}");
    assert!(screen.contains("policy fast-all"), "{screen}");
    // The mount's writes went through FUSE: its write rate was shown at
    // some point; the counters stay.
    assert!(
        screen.contains(" fast ") && screen.contains(" capacity "),
        "{screen}"
    );
    if let Some(out) = std::env::var_os("SLUICE_TOP_CAPTURE") {
        fs::write(out, &screen).unwrap();
    }
    tmux.run(&["send-keys", "-t", "top", "q"]);
    assert_exited_and_restored(&tmux, "top-exited-0");

    // The mount goes away under a running view: it says so and keeps
    // polling; Ctrl-C quits.
    tmux.type_line("clear");
    tmux.type_line(&format!("{top}; echo top-exited-again-$?"));
    tmux.wait_for("the view", |s| {
        s.contains("sluice top") && s.contains("answering")
    });
    m.unmount(false);
    let screen = tmux.wait_for("the lost mount", |s| s.contains("NOT ANSWERING"));
    assert!(screen.contains("still polling"), "{screen}");
    assert!(
        screen.contains("routed   fast 4.0 MiB"),
        "the last figures stay:\n{screen}"
    );
    tmux.run(&["send-keys", "-t", "top", "C-c"]);
    assert_exited_and_restored(&tmux, "top-exited-again-0");
}

#[test]
fn top_on_a_directory_that_is_no_mount_is_an_error_before_any_screen() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(SLUICE)
        .arg("top")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("is not a sluice mount"), "{stderr}");
    let out = Command::new(SLUICE)
        .args(["top", "--interval", "0"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("is not a number of seconds from 0.1"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
