//! The `sluice` binary as a user runs it: exit codes, messages, determinism.

use std::process::{Command, Output};

fn sluice(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .output()
        .expect("the sluice binary runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn main_job_runs_with_embedded_defaults() {
    let out = sluice(&["--phase-mib", "64"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = stdout(&out);
    for name in [
        "capacity-only",
        "fast-all",
        "ssdup",
        "ssdup+",
        "segmented-contiguous",
        "strided",
        "segmented-random",
        "mixed",
    ] {
        assert!(text.contains(name), "report names {name}");
    }
    assert!(text.contains("threshold"), "per-stream table printed");
    // The summary's header and rows have the same columns.
    let header = text.lines().find(|l| l.starts_with("policy ")).unwrap();
    let row = text.lines().find(|l| l.starts_with("ssdup+ ")).unwrap();
    let columns = |l: &str| l.split_whitespace().count();
    // Word counts: "fast tier (all)" and "N GiB (P%)" are three each, "index
    // memory" and "N KiB" two each; "index extents" is two words over one number.
    assert_eq!(columns(header), columns(row) + 1, "{header}\n{row}");
}

#[test]
fn same_seed_same_report_and_another_seed_differs() {
    let a = sluice(&["analyse", "--phase-mib", "64", "--seed", "5"]);
    let b = sluice(&["analyse", "--phase-mib", "64", "--seed", "5"]);
    let c = sluice(&["analyse", "--phase-mib", "64", "--seed", "6"]);
    assert_eq!(stdout(&a), stdout(&b));
    assert_ne!(stdout(&a), stdout(&c));
}

#[test]
fn unknown_flag_is_a_usage_error() {
    let out = sluice(&["--no-such-flag"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--no-such-flag"));
}

#[test]
fn impossible_sizes_get_a_clear_error() {
    let out = sluice(&["--phase-mib", "1", "--processes", "3"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("sluice: error: "), "{err}");
    assert!(err.contains("not a positive multiple"), "{err}");
    let out = sluice(&["--stream-len", "1"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("stream_len"));
    let out = sluice(&["--change-fraction", "2"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("change_fraction"));
}

#[test]
fn sim_list_names_every_experiment() {
    let out = sluice(&["sim", "list"]);
    assert!(out.status.success());
    let text = stdout(&out);
    for name in [
        "ssdup-fig2",
        "ssdup-fig9",
        "ssdup-fig11",
        "ssdup-fig14",
        "ssdup-table1",
    ] {
        assert!(text.contains(name), "{name}");
    }
}

#[test]
fn sim_run_writes_markdown_json_and_plots() {
    let dir = std::env::temp_dir().join(format!("sluice-cli-sim-{}", std::process::id()));
    let out = sluice(&[
        "sim",
        "run",
        "ssdup-fig5",
        "--scale",
        "0.01",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = stdout(&out);
    assert!(
        text.contains("| segmented-contiguous |"),
        "the table is printed"
    );
    assert!(text.contains("events/s"), "the event rate is printed");
    for file in [
        "ssdup-fig5.md",
        "ssdup-fig5.json",
        "ssdup-fig6-random.png",
        "ssdup-fig6-throughput.png",
    ] {
        let bytes = std::fs::read(dir.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert!(!bytes.is_empty(), "{file}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn sim_run_refuses_unknown_experiments_and_bad_scales() {
    let out = sluice(&["sim", "run", "fig99"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("sluice sim list"));
    let out = sluice(&["sim", "run", "ssdup-fig2", "--scale", "0"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--scale"));
}

/// Issue 21: an unknown `--log-level` is a usage error naming the levels,
/// and so is a `RUST_LOG` that is not a filter (not silently ignored).
#[test]
fn issue_21_unknown_log_level_is_a_clear_error() {
    let out = sluice(&["--log-level", "loud", "sim", "list"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("loud") && err.contains("debug"), "{err}");
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["sim", "list"])
        .env("RUST_LOG", "sluice=loud")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("RUST_LOG"), "{err}");
    // The flag wins over RUST_LOG, so a bad RUST_LOG does not matter then.
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["--log-level", "debug", "sim", "list"])
        .env("RUST_LOG", "sluice=loud")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The analysis flags at the top still refuse a subcommand (`--log-level`,
/// global, does not).
#[test]
fn analysis_flags_conflict_with_a_subcommand() {
    let out = sluice(&["--seed", "3", "sim", "list"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("'sim'") && err.contains("--seed"), "{err}");
    let out = sluice(&["--log-level", "warn", "sim", "list"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = sluice(&["sim", "list", "--log-level", "warn"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Issue 21: `sluice sim run` printed nothing until it finished (Fig. 9:
/// 18.7 s silent). With stderr not a terminal it writes plain progress
/// lines there (simulations finished of queued, rate), the last at 100 %,
/// and stdout keeps only the report; `--progress off` writes none, and the
/// report is the same either way.
#[test]
fn issue_21_sim_run_shows_plain_progress_lines_when_piped() {
    let dir = std::env::temp_dir().join(format!("sluice-cli-progress-{}", std::process::id()));
    let run = |progress: &str| {
        sluice(&[
            "sim",
            "run",
            "lads-fig9",
            "--scale",
            "0.02",
            "--progress",
            progress,
            "--out",
            dir.to_str().unwrap(),
        ])
    };
    let out = run("auto");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("sim lads-fig9: "))
        .collect();
    assert!(!lines.is_empty(), "no progress line on stderr: {err}");
    let last = lines.last().unwrap();
    assert!(
        last.contains(" runs (100%)") && last.contains("runs/s") && last.ends_with("done"),
        "{last}"
    );
    // The same numbers as the run: N of N, N > 0.
    let counts: Vec<&str> = last["sim lads-fig9: ".len()..]
        .split(" runs")
        .next()
        .unwrap()
        .split(" of ")
        .collect();
    assert_eq!(counts.len(), 2, "{last}");
    assert_eq!(counts[0], counts[1], "{last}");
    assert!(counts[0].parse::<u64>().unwrap() > 0, "{last}");
    assert!(
        !stdout(&out).contains("runs/s"),
        "progress stays off stdout"
    );
    let quiet = run("off");
    assert!(quiet.status.success());
    let quiet_err = String::from_utf8_lossy(&quiet.stderr);
    assert!(!quiet_err.contains("runs/s"), "{quiet_err}");
    // The report does not depend on being watched (only the wall-clock
    // line at its end does).
    let report = |o: &Output| {
        let text = stdout(o);
        text.lines()
            .filter(|l| !l.contains("events in"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(report(&out), report(&quiet));
    std::fs::remove_dir_all(&dir).unwrap();
}
