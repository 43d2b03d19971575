//! sluice as a service (issue 21): the mount helper form that `mount(8)`,
//! `mount.fuse3` and `/etc/fstab` use, and `sluice mount --daemon`.
//!
//! The helper form is `sluice SOURCE MOUNTPOINT [-o OPTIONS] [-f]`, which
//! is how `mount.fuse3` runs the program named by the type `fuse.sluice`.
//! It is rewritten into the `sluice mount` command line before clap reads
//! it (a first argument that is no subcommand, with `-o`, a `/` in SOURCE or
//! SOURCE `sluice`), so both forms share one parser, one set of value checks and one
//! mount path. SOURCE is the config file (`sluice` or `none` for no file);
//! the helper form daemonizes unless `-f` or `-o foreground` is given.
//!
//! `--daemon` re-executes sluice (no fork in a multithreaded process): the
//! parent checks the config, starts a child with its stdout on a pipe and
//! its stderr on the log file, and returns 0 only once the child writes
//! `ready` on the pipe, which it does after the mount is up. If the pipe
//! closes first, the child failed: the parent waits for it and returns its
//! error with the log's new lines. The child leaves the parent's session
//! (setsid) first, and points its stdout at /dev/null once it is ready, so
//! it outlives the terminal and the parent.

use std::ffi::{OsStr, OsString};
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};

/// What can go wrong reading the mount helper form or running `--daemon`.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// The mount helper form's command line is wrong; the message says what
    /// to give instead.
    #[error("{0}")]
    Helper(String),
    /// No log file for `--daemon` could be chosen.
    #[error("no log file for --daemon: give --log-file (neither XDG_STATE_HOME nor HOME is set)")]
    NoLogFile,
    /// A system call failed: what it was doing, on which path.
    #[error("{doing}: {source}")]
    Io {
        /// What was being done, and on which path.
        doing: String,
        /// The failure.
        #[source]
        source: std::io::Error,
    },
    /// The daemon's child ended before its mount was up.
    #[error(
        "the mount of {} did not come up (daemon {status}); {}:\n{said}",
        mountpoint.display(),
        log.display()
    )]
    NotUp {
        /// The mount point.
        mountpoint: PathBuf,
        /// How the child ended.
        status: ExitStatus,
        /// Its log file.
        log: PathBuf,
        /// What it logged there this time.
        said: String,
    },
}

impl ServiceError {
    fn io(doing: impl Into<String>) -> impl FnOnce(std::io::Error) -> ServiceError {
        let doing = doing.into();
        move |source| ServiceError::Io { doing, source }
    }
}

/// Set in the environment of the re-executed child of `--daemon`.
const DAEMON_CHILD_ENV: &str = "SLUICE_DAEMON_CHILD";

/// What the child writes on its stdout once the mount is up.
const READY_LINE: &str = "ready";

/// `-o` options of the generic mount layer that mean nothing to sluice
/// (mount(8) and mount.fuse3 pass some of them on).
const IGNORED_OPTIONS: &[&str] = &[
    "rw",
    "dev",
    "nodev",
    "suid",
    "nosuid",
    "exec",
    "noexec",
    "auto",
    "noauto",
    "user",
    "nouser",
    "users",
    "owner",
    "group",
    "_netdev",
    "nofail",
    "defaults",
    "async",
    "atime",
    "noatime",
    "relatime",
    "strictatime",
    "diratime",
    "nodiratime",
];

/// `-o` options that are `sluice mount` flags without a value.
const FLAG_OPTIONS: &[&str] = &[
    "allow_other",
    "default_permissions",
    "no_drain",
    "metrics_public",
    "liu",
    "create",
];

/// `-o NAME=VALUE` options and the `sluice mount` flag each becomes.
const VALUE_OPTIONS: &[(&str, &str)] = &[
    ("config", "--config"),
    ("fast", "--fast"),
    ("capacity", "--capacity"),
    ("fast_device", "--fast-device"),
    ("capacity_device", "--capacity-device"),
    ("policy", "--policy"),
    ("metrics", "--metrics"),
    ("threads", "--threads"),
    ("meta", "--meta"),
    ("log_file", "--log-file"),
    ("log_level", "--log-level"),
];

/// The command line clap should read: `argv` itself, or, when `argv` is
/// the helper form (its first argument neither a flag nor one of
/// `subcommands`), the `sluice mount` command line it stands for.
pub fn command_line(
    argv: Vec<OsString>,
    subcommands: &[String],
) -> Result<Vec<OsString>, ServiceError> {
    // A misspelt subcommand (`sluice staus /mnt`) is left to clap, which
    // names it: the helper form has `-o` (mount.fuse3 always passes some),
    // a path as SOURCE, or SOURCE `sluice`/`none`.
    let helper_form = argv.get(1).is_some_and(|first| {
        let first = first.to_string_lossy();
        !first.starts_with('-')
            && !subcommands.iter().any(|s| *s == first)
            && (first.contains('/')
                || first == "sluice"
                || first == "none"
                || argv.iter().any(|a| a == "-o"))
    });
    if helper_form {
        mount_command_line(&argv)
    } else {
        Ok(argv)
    }
}

/// `sluice SOURCE MOUNTPOINT [-o OPTIONS]... [-f] [-n] [-s] [-v]` as a
/// `sluice mount` command line.
fn mount_command_line(argv: &[OsString]) -> Result<Vec<OsString>, ServiceError> {
    let usage = "the mount helper form is `sluice SOURCE MOUNTPOINT [-o OPTIONS] [-f]` \
                 (SOURCE: the config file, or `sluice` for none); see docs/fuse.md";
    let mut positional = Vec::new();
    let mut options = Vec::new();
    let mut foreground = false;
    let mut rest = argv.iter().skip(1);
    while let Some(arg) = rest.next() {
        match arg.to_str() {
            Some("-o") => {
                let list = rest
                    .next()
                    .ok_or_else(|| ServiceError::Helper(format!("-o needs OPTIONS: {usage}")))?;
                let list = list.to_str().ok_or_else(|| {
                    ServiceError::Helper(format!("-o {}: not UTF-8", list.to_string_lossy()))
                })?;
                options.extend(
                    list.split(',')
                        .filter(|o| !o.is_empty())
                        .map(str::to_string),
                );
            }
            Some("-f" | "--foreground") => foreground = true,
            // mount(8)'s "no mtab", "sloppy" and "verbose": nothing to do.
            Some("-n" | "-s" | "-v") => {}
            Some(flag) if flag.starts_with('-') => {
                return Err(ServiceError::Helper(format!(
                    "unknown mount helper flag {flag:?}: {usage}"
                )))
            }
            _ => positional.push(arg.clone()),
        }
    }
    let [source, mountpoint] = positional.as_slice() else {
        return Err(ServiceError::Helper(format!(
            "expected SOURCE and MOUNTPOINT, got {} argument(s): {usage}",
            positional.len()
        )));
    };
    let mut line: Vec<OsString> = vec![argv[0].clone(), "mount".into()];
    if source != OsStr::new("sluice") && source != OsStr::new("none") {
        line.extend(["--config".into(), source.clone()]);
    }
    for option in &options {
        let (name, value) = match option.split_once('=') {
            Some((name, value)) => (name, Some(value)),
            None => (option.as_str(), None),
        };
        if option == "foreground" {
            foreground = true;
        } else if IGNORED_OPTIONS.contains(&option.as_str())
            || name.starts_with("x-")
            || name == "comment"
        {
        } else if option == "ro" {
            return Err(ServiceError::Helper(
                "-o ro: sluice mounts read-write only (a read-only capacity tier is mounted \
                 read-only by itself)"
                    .to_string(),
            ));
        } else if FLAG_OPTIONS.contains(&option.as_str()) {
            line.push(format!("--{}", option.replace('_', "-")).into());
        } else if let (Some((_, flag)), Some(value)) =
            (VALUE_OPTIONS.iter().find(|(n, _)| *n == name), value)
        {
            if name == "config" && line.iter().any(|a| a == "--config") {
                return Err(ServiceError::Helper(format!(
                    "-o config={value}: SOURCE {} is the config file already \
                     (give SOURCE `sluice` to name it in -o)",
                    source.to_string_lossy()
                )));
            }
            line.extend([(*flag).into(), value.into()]);
        } else {
            let known: Vec<String> = VALUE_OPTIONS
                .iter()
                .map(|(n, _)| format!("{n}=..."))
                .chain(FLAG_OPTIONS.iter().map(|f| f.to_string()))
                .chain(["foreground".to_string()])
                .collect();
            return Err(ServiceError::Helper(format!(
                "unknown mount option {option:?}: sluice takes {}",
                known.join(", ")
            )));
        }
    }
    if !foreground {
        line.push("--daemon".into());
    }
    line.push(mountpoint.clone());
    Ok(line)
}

/// Whether this process is the re-executed child of `--daemon`.
pub fn is_daemon_child() -> bool {
    std::env::var_os(DAEMON_CHILD_ENV).is_some()
}

/// In the daemon's child: leave the parent's session and terminal, so a
/// hangup or Ctrl-C there does not reach the mount; elsewhere nothing.
pub fn leave_session_if_daemon_child() -> Result<(), ServiceError> {
    if !is_daemon_child() {
        return Ok(());
    }
    nix::unistd::setsid()
        .map(drop)
        .map_err(std::io::Error::from)
        .map_err(ServiceError::io(
            "leaving the session of `sluice mount --daemon` (setsid)",
        ))
}

/// Called once the mount is up: in the daemon's child, tells the waiting
/// parent and points stdout at /dev/null (the parent stops reading it);
/// elsewhere nothing. A parent gone already (killed while it waited) is
/// logged, and the mount serves on: it is up, and `sluice unmount` ends it.
pub fn notify_ready() {
    if !is_daemon_child() {
        return;
    }
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = writeln!(stdout, "{READY_LINE}").and_then(|()| stdout.flush()) {
        tracing::warn!(
            "could not tell `sluice mount --daemon` the mount is up (it is serving): {e}"
        );
    }
    let null = std::fs::File::options().write(true).open("/dev/null");
    if let Err(e) =
        null.and_then(|null| nix::unistd::dup2_stdout(&null).map_err(std::io::Error::from))
    {
        tracing::warn!("could not point stdout at /dev/null: {e}");
    }
}

/// The log file of a daemon mounted at `mountpoint` when none is given:
/// `/var/log/sluice/NAME.log` for root, else
/// `$XDG_STATE_HOME/sluice/NAME.log` (`~/.local/state/sluice/`), where
/// NAME is the mount point with `/` as `-` (as systemd names mounts).
pub fn default_log_file(mountpoint: &Path) -> Result<PathBuf, ServiceError> {
    let absolute = std::path::absolute(mountpoint)
        .map_err(ServiceError::io(mountpoint.display().to_string()))?;
    let name = absolute
        .to_string_lossy()
        .trim_matches('/')
        .replace('/', "-");
    let name = if name.is_empty() {
        "-".to_string()
    } else {
        name
    };
    let dir = if nix::unistd::geteuid().is_root() {
        PathBuf::from("/var/log/sluice")
    } else if let Some(state) = std::env::var_os("XDG_STATE_HOME").filter(|s| !s.is_empty()) {
        PathBuf::from(state).join("sluice")
    } else if let Some(home) = std::env::var_os("HOME").filter(|s| !s.is_empty()) {
        PathBuf::from(home).join(".local/state/sluice")
    } else {
        return Err(ServiceError::NoLogFile);
    };
    Ok(dir.join(format!("{name}.log")))
}

/// `sluice mount --daemon`: runs `mount_line` (this command line) again as
/// a child in its own session, logging to `log_file`, and returns once
/// the child's mount is up; the child's error if it ends before.
pub fn daemonize(
    mount_line: &[OsString],
    mountpoint: &Path,
    log_file: &Path,
) -> Result<(), ServiceError> {
    if let Some(dir) = log_file.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(ServiceError::io(format!("log directory {}", dir.display())))?;
    }
    let mut log = std::fs::File::options()
        .create(true)
        .append(true)
        .open(log_file)
        .map_err(ServiceError::io(format!("log file {}", log_file.display())))?;
    let log_start = log
        .seek(SeekFrom::End(0))
        .map_err(ServiceError::io(format!("log file {}", log_file.display())))?;
    let exe = std::env::current_exe().map_err(ServiceError::io("finding the sluice binary"))?;
    let mut child = Command::new(exe)
        .args(mount_line.iter().skip(1))
        .env(DAEMON_CHILD_ENV, "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .map_err(ServiceError::io("starting the mount daemon"))?;
    // INVARIANT: stdout was set to a pipe above.
    let pipe = child.stdout.take().expect("piped stdout");
    let mut line = String::new();
    let read = BufReader::new(pipe).read_line(&mut line);
    if read.is_ok() && line.trim_end() == READY_LINE {
        tracing::info!(
            mountpoint = %mountpoint.display(),
            pid = child.id(),
            log = %log_file.display(),
            "mount daemon started"
        );
        return Ok(());
    }
    let status = child
        .wait()
        .map_err(ServiceError::io("waiting for the mount daemon"))?;
    let mut said = String::new();
    if let Ok(mut log) = std::fs::File::open(log_file) {
        if log.seek(SeekFrom::Start(log_start)).is_ok() {
            let _ = log.take(64 * 1024).read_to_string(&mut said);
        }
    }
    Err(ServiceError::NotUp {
        mountpoint: mountpoint.to_path_buf(),
        status,
        log: log_file.to_path_buf(),
        said: said.trim_end().to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(args: &[&str]) -> Result<Vec<String>, String> {
        let argv = args.iter().map(OsString::from).collect();
        let subcommands = vec!["mount".to_string(), "unmount".to_string()];
        command_line(argv, &subcommands)
            .map(|l| l.into_iter().map(|a| a.into_string().unwrap()).collect())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn subcommands_and_flags_pass_through_unchanged() {
        let argv = ["sluice", "mount", "--fast", "/f", "/mnt"];
        assert_eq!(line(&argv).unwrap(), argv);
        assert_eq!(
            line(&["sluice", "--seed", "3"]).unwrap(),
            ["sluice", "--seed", "3"]
        );
        assert_eq!(line(&["sluice"]).unwrap(), ["sluice"]);
        // A misspelt subcommand is clap's to refuse, not a mount.
        assert_eq!(
            line(&["sluice", "staus", "/mnt"]).unwrap(),
            ["sluice", "staus", "/mnt"]
        );
    }

    #[test]
    fn the_helper_form_becomes_a_daemon_mount_with_source_as_config() {
        // What mount.fuse3 runs for `mount -t fuse.sluice /etc/s.toml /mnt
        // -o fast=/f,capacity=/c,allow_other,noauto,_netdev`.
        let got = line(&[
            "/usr/local/bin/sluice",
            "/etc/s.toml",
            "/mnt",
            "-o",
            "rw,fast=/f,capacity=/c,allow_other,no_drain,dev,suid,x-systemd.automount",
        ])
        .unwrap();
        assert_eq!(
            got,
            [
                "/usr/local/bin/sluice",
                "mount",
                "--config",
                "/etc/s.toml",
                "--fast",
                "/f",
                "--capacity",
                "/c",
                "--allow-other",
                "--no-drain",
                "--daemon",
                "/mnt"
            ]
        );
    }

    #[test]
    fn foreground_and_source_sluice_mean_no_daemon_and_no_config_file() {
        let expected = ["sluice", "mount", "--fast", "/f", "/mnt"];
        assert_eq!(
            line(&["sluice", "sluice", "/mnt", "-o", "fast=/f", "-f"]).unwrap(),
            expected
        );
        assert_eq!(
            line(&["sluice", "none", "/mnt", "-o", "fast=/f,foreground"]).unwrap(),
            expected
        );
        assert_eq!(
            line(&[
                "sluice",
                "sluice",
                "/mnt",
                "-o",
                "config=/c.toml,log_file=/l",
                "-f"
            ])
            .unwrap(),
            [
                "sluice",
                "mount",
                "--config",
                "/c.toml",
                "--log-file",
                "/l",
                "/mnt"
            ]
        );
    }

    #[test]
    fn unknown_options_read_only_and_a_second_config_are_refused_by_name() {
        let e = line(&["sluice", "sluice", "/mnt", "-o", "fsat=/f"]).unwrap_err();
        assert!(e.contains("\"fsat=/f\"") && e.contains("fast=..."), "{e}");
        let e = line(&["sluice", "sluice", "/mnt", "-o", "fast"]).unwrap_err();
        assert!(e.contains("unknown mount option \"fast\""), "{e}");
        let e = line(&["sluice", "sluice", "/mnt", "-o", "ro"]).unwrap_err();
        assert!(e.contains("read-write only"), "{e}");
        let e = line(&["sluice", "/a.toml", "/mnt", "-o", "config=/b.toml"]).unwrap_err();
        assert!(e.contains("/a.toml is the config file already"), "{e}");
        let e = line(&["sluice", "./a.toml"]).unwrap_err();
        assert!(e.contains("expected SOURCE and MOUNTPOINT, got 1"), "{e}");
        let e = line(&["sluice", "/a.toml", "/mnt", "-x"]).unwrap_err();
        assert!(e.contains("unknown mount helper flag \"-x\""), "{e}");
    }

    #[test]
    fn the_default_log_file_is_named_after_the_mount_point() {
        let log = default_log_file(Path::new("/mnt/scratch")).unwrap();
        assert_eq!(log.file_name().unwrap(), "mnt-scratch.log");
    }
}
