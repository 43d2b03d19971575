//! The LiU experiments at a reduced scale, with the results the simulator
//! reproduces asserted (docs/results/liu.md discusses the ones it does
//! not). The same assertions hold at the paper's scale:
//! `SLUICE_SIM_TEST_SCALE=1 cargo test --release -p sluice-sim --test liu_experiments`.

use sluice_sim::experiments::{find, RunConfig};
use sluice_sim::output::Report;

fn run(name: &str) -> Report {
    let scale = std::env::var("SLUICE_SIM_TEST_SCALE")
        .ok()
        .map(|s| s.parse().expect("SLUICE_SIM_TEST_SCALE is a number"))
        .unwrap_or(0.1);
    let experiment = find(name).unwrap_or_else(|| panic!("experiment {name}"));
    (experiment.run)(&RunConfig::new(scale, 1)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The number in a cell like "1.46×" or "335.8".
fn number(text: &str) -> f64 {
    text.trim_end_matches('×')
        .parse()
        .unwrap_or_else(|_| panic!("not a number: {text:?}"))
}

fn cell(report: &Report, table: usize, row: &str, column: &str) -> f64 {
    let t = &report.tables[table];
    let c = t.headers.iter().position(|h| h == column).expect("column");
    let r = t.rows.iter().find(|r| r[0] == row).expect("row");
    number(&r[c])
}

/// Regression (issue 21): liu-table2's headline said "1.15×" (the paper's)
/// where the run measured 0.98×. The headline now carries the run's ratio,
/// the same text as its table cell, with the paper's beside it.
#[test]
fn table2_headline_gives_the_runs_ratio_beside_the_papers() {
    let r = run("liu-table2");
    let ratio_column = r.tables[0]
        .headers
        .iter()
        .position(|h| h == "ratio")
        .unwrap();
    for (case, label, paper) in [
        ("none", "alone", "1.15×"),
        ("by mpi-io-test", "interfered by mpi-io-test", "2.10×"),
        ("by ior-mpi-io", "interfered by ior-mpi-io", "3.45×"),
    ] {
        let row = r.tables[0].rows.iter().find(|row| row[0] == case).unwrap();
        let finding = r
            .headline
            .iter()
            .find(|f| f.what == format!("{label}: LiU / PVFS2"))
            .unwrap_or_else(|| panic!("no headline for {case}: {:?}", r.headline));
        assert_eq!(finding.run, row[ratio_column], "{case}");
        assert_eq!(finding.paper, paper, "{case}");
        let md = r.to_markdown();
        assert!(
            md.contains(&format!(
                "paper: {paper}; this run: **{}**",
                row[ratio_column]
            )),
            "{md}"
        );
    }
}

#[test]
fn table2_interference_is_where_liu_pays_off() {
    let r = run("liu-table2");
    let alone = cell(&r, 0, "none", "ratio");
    let sequential = cell(&r, 0, "by mpi-io-test", "ratio");
    let random = cell(&r, 0, "by ior-mpi-io", "ratio");
    assert!(
        (0.8..1.4).contains(&alone),
        "alone {alone}: LiU neither helps nor hurts much"
    );
    assert!(
        sequential > alone,
        "sequential interference {sequential} vs alone {alone}"
    );
    assert!(
        random >= 2.0,
        "random interference {random}: the issue's target is at least 2×"
    );
    assert!(
        random > sequential,
        "random interference hurts the baseline most"
    );
    // The interferer ran through the whole measured pass in every run.
    for row in &r.tables[0].rows[1..] {
        assert_eq!(row[5], "100% / 100%", "{row:?}");
    }
}

#[test]
fn fig9_random_reads_need_the_buffer_sequential_ones_do_not() {
    let r = run("liu-fig9");
    let seq32 = cell(&r, 0, "mpi-io-test", "LiU 32 MiB");
    let seq512 = cell(&r, 0, "mpi-io-test", "LiU 512 MiB");
    assert!(
        (seq32 / seq512 - 1.0).abs() < 0.1,
        "mpi-io-test {seq32} vs {seq512}"
    );
    let rnd32 = cell(&r, 0, "ior-mpi-io", "LiU 32 MiB");
    let rnd128 = cell(&r, 0, "ior-mpi-io", "LiU 128 MiB");
    assert!(
        rnd32 < 0.6 * rnd128,
        "ior-mpi-io 32 MiB {rnd32} vs 128 MiB {rnd128}"
    );
}

#[test]
fn fig4_liu_raises_random_reads_and_leaves_writes_alone() {
    let r = run("liu-fig4");
    assert!(cell(&r, 0, "ior-mpi-io", "read ratio") > 2.0);
    for b in ["mpi-io-test", "mpi-tile-io", "ior-mpi-io"] {
        let w = cell(&r, 0, b, "write ratio");
        assert!((0.9..1.1).contains(&w), "{b} write ratio {w}");
    }
}

/// Issue 23: Fig. 8's 5–7× comes from the baseline's read-ahead. With one
/// stream per file, LiU is far ahead; with a stream per process (Linux's
/// per-open-file state) the baseline streams and LiU is within tens of
/// percent of it, as in the paper (+12% to +42%). The paper's ordering of
/// those small gains (growing with processes, B above C) holds at scale
/// 0.5 and 1 but not at 0.1 or 0.3, so it is not asserted here
/// (docs/results/liu.md).
#[test]
fn fig8_gap_closes_with_per_process_read_ahead() {
    let r = run("liu-fig8");
    let t = &r.tables[0];
    let col = |name: &str| t.headers.iter().position(|h| h == name).expect("column");
    let (base, pp, liu) = (col("PVFS2"), col("PVFS2 per-process RA"), col("LiU"));
    for row in &t.rows {
        let (base, pp, liu) = (number(&row[base]), number(&row[pp]), number(&row[liu]));
        assert!(liu > 3.0 * base, "LiU over one stream per file: {row:?}");
        assert!(
            (0.5..1.5).contains(&(liu / pp)),
            "LiU over a stream per process: {row:?}"
        );
    }
}
