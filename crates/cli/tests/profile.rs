//! `sluice profile DIR` as a user runs it: on the emulated 7200 rpm disk it
//! recommends the segment sizes the disk model implies; on a plain
//! directory it completes; bad input gets a clear error; the profile file
//! is gone afterwards unless `--keep`.
//!
//! The emulated disk sleeps in real time, so the request counts here are
//! small (a run takes a few seconds).

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;

fn sluice(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .output()
        .expect("the sluice binary runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn profile_file(dir: &Path) -> std::path::PathBuf {
    dir.join(".sluice-profile")
}

#[test]
fn the_emulated_disk_gets_a_head_near_1_mib_and_a_body_of_a_few_mib() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_str().unwrap();
    let start = Instant::now();
    let out = sluice(&[
        "profile",
        path,
        "--device",
        "hdd",
        "--region",
        "256MiB",
        "--samples",
        "150",
        "--per-size",
        "4",
        "--max-size",
        "16MiB",
        "--json",
    ]);
    let elapsed = start.elapsed();
    assert!(out.status.success(), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("one JSON object");
    // The measured figures, for the test log (`--nocapture`) and failures.
    println!(
        "emulated hdd, 256MiB region, {:.1} s: B = {:.1} MB/s, latency {}, throughput {}, \
         recommendation {}",
        elapsed.as_secs_f64(),
        report["sequential"]["peak_mb_per_s"],
        report["latency"],
        report["throughput"],
        report["recommendation"]
    );
    assert!(elapsed < Duration::from_secs(45), "took {elapsed:?}");
    // 200 MB/s outer rate; seek over 256MiB of 300 GB is ~1.3 ms plus
    // 0-8.33 ms rotation, so t80 is ~8 ms and B × t80 ~1.6 MB.
    let peak = report["sequential"]["peak_mb_per_s"].as_f64().unwrap();
    assert!((150.0..=200.0).contains(&peak), "B = {peak} MB/s");
    let t80 = report["latency"]["p80_ms"].as_f64().unwrap();
    assert!((5.0..=11.0).contains(&t80), "t80 = {t80} ms");
    let recommendation = &report["recommendation"];
    let head = recommendation["head_bytes"].as_u64().unwrap();
    let body = recommendation["body_bytes"].as_u64().unwrap();
    assert!((512 * KIB..=2 * MIB).contains(&head), "head {head}");
    assert!((2 * MIB..=8 * MIB).contains(&body), "body {body}");
    assert!(head.is_power_of_two() && body.is_power_of_two());
    assert_eq!(recommendation["segment_bytes"].as_u64(), Some(head + body));
    assert_eq!(report["throughput"].as_array().unwrap().len(), 9);
    assert!(!profile_file(dir.path()).exists(), "profile file removed");
}

#[test]
fn a_plain_directory_completes_with_a_recommendation_or_the_cache_warning() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_str().unwrap();
    let out = sluice(&[
        "profile",
        path,
        "--region",
        "64MiB",
        "--samples",
        "100",
        "--per-size",
        "2",
        "--max-size",
        "4MiB",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let (text, errors) = (stdout(&out), stderr(&out));
    println!("{text}{errors}");
    assert!(text.contains("head    = B × t80"), "{text}");
    assert!(text.contains("[liu]\nhead = \""), "{text}");
    assert!(text.contains("body = \""), "{text}");
    // The suggested cost_seek reads back as a config.
    let policy = text.split_once("[policy]\n").unwrap().1;
    assert!(policy.starts_with("cost_seek = \""), "{text}");
    let config = sluice_config::Config::from_toml(&format!("[policy]\n{policy}")).unwrap();
    assert!(config.policy.cost_seek.0 > std::time::Duration::ZERO);
    // With what that value means for `cost` as a comment.
    assert!(
        policy.contains("# ") && policy.contains("cost_fast_request = 90 us"),
        "{text}"
    );
    // "t80 (100 1-byte random reads in 64MiB)  40.2 µs   (p50 ...": below
    // 100 µs the cache warning must be on stderr.
    let t80_line = text.lines().find(|l| l.starts_with("t80")).unwrap();
    let t80_micros = t80_line
        .split_once(')')
        .and_then(|(_, rest)| rest.trim_start().split_once(" µs"))
        .and_then(|(number, _)| number.parse::<f64>().ok());
    let warned = errors.contains("a head is not worth lifting");
    assert_eq!(
        warned,
        t80_micros.is_some_and(|t| t < 100.0),
        "{t80_line}\n{errors}"
    );
    assert!(!profile_file(dir.path()).exists(), "profile file removed");
}

#[test]
fn keep_leaves_the_profile_file_of_the_region_size() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_str().unwrap();
    let out = sluice(&[
        "profile",
        path,
        "--region",
        "8MiB",
        "--samples",
        "10",
        "--per-size",
        "1",
        "--max-size",
        "1MiB",
        "--keep",
        "--json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let len = std::fs::metadata(profile_file(dir.path())).unwrap().len();
    assert_eq!(len, 8 * MIB);
    // A second run reuses (truncates) the kept file and removes it.
    let out = sluice(&[
        "profile",
        path,
        "--region",
        "8MiB",
        "--samples",
        "10",
        "--per-size",
        "1",
        "--max-size",
        "1MiB",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!profile_file(dir.path()).exists());
}

#[test]
fn a_missing_directory_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-dir");
    let out = sluice(&["profile", missing.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.starts_with("sluice: error: "), "{err}");
    assert!(
        err.contains("no-such-dir") && err.contains("does not exist"),
        "{err}"
    );
    assert!(!missing.exists(), "the directory is not created");

    let file = dir.path().join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let out = sluice(&["profile", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("is not a directory"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_bad_size_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_str().unwrap();
    let out = sluice(&["profile", path, "--region", "12XB"]);
    assert_eq!(out.status.code(), Some(2), "a usage error");
    let err = stderr(&out);
    assert!(
        err.contains("12XB") && err.contains("unknown unit"),
        "{err}"
    );

    for (args, fragment) in [
        (
            &["--min-size", "1MiB", "--max-size", "64KiB"][..],
            "above --max-size",
        ),
        (&["--region", "1MiB"][..], "smaller than --max-size"),
        (&["--region", "1000TiB"][..], "lower --region"),
    ] {
        let out = sluice(&[&["profile", path][..], args].concat());
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = stderr(&out);
        assert!(err.contains(fragment), "{args:?}: {err}");
    }
    assert!(!profile_file(dir.path()).exists(), "nothing written");
}

#[test]
fn png_writes_the_latency_cdf_and_the_throughput_curve() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_str().unwrap();
    let plots = dir.path().join("disk.png");
    let out = sluice(&[
        "profile",
        path,
        "--region",
        "8MiB",
        "--samples",
        "20",
        "--per-size",
        "1",
        "--max-size",
        "1MiB",
        "--png",
        plots.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    for name in ["disk-latency.png", "disk-throughput.png"] {
        let bytes = std::fs::read(dir.path().join(name)).unwrap();
        assert!(bytes.starts_with(b"\x89PNG"), "{name}");
        assert!(stdout(&out).contains(name), "{}", stdout(&out));
    }
}
