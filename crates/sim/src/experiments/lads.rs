//! The LADS evaluation (seed 003 §4) as simulator experiments on the
//! transfer model of [`crate::transfer`], which runs the policy crate's
//! LADS scheduler (`sluice_policy::lads`).
//!
//! The testbed (§4.1), as the model takes it: 16 targets per side, each a
//! 1 TB 7200 rpm disk (2.3 GB/s over 16 disks: 145 MB/s at the outer
//! edge), a 5 ms file-system cost per 1 MiB object (the paper's "about
//! 40%" overhead), stripe count 1 with files placed round-robin over the
//! targets, 8 I/O threads unless varied, 256 MiB buffers at both ends, QDR
//! InfiniBand RMA for LADS (3.2 GB/s) and sockets over IPoIB for bbcp
//! (1 GB/s, the paper's Netperf figure). bbcp is the scheduler's
//! file-at-a-time mode with one file open at a time; its "threads" are the
//! streams working on the current file.
//!
//! `scale` multiplies the data: the small set has `10,000 × scale` files of
//! 1 MiB, the big set (also Fig. 10 and 11's "100 GB") 100 files of
//! `1 GiB × scale`. Buffer sizes, congestion periods and the scheduler's
//! `W`, `T`, `M` are physical and do not scale.
//!
//! Where the paper gives no value (the congestion it injected, the
//! figures' absolute numbers), the choice is stated in the report's
//! parameters and in `docs/results/lads.md`.

use std::time::Duration;

use sluice_devices::LinkConfig;
use sluice_policy::lads::{Mode, SchedulerConfig};

use super::figure::{Figure, Paper, Sweep};
use super::{
    bar_plot, events, log2_line_plot, mb_s, pct, run_all, scaled, Experiment, RunConfig, SimError,
};
use crate::output::{Finding, Report, Series, Table};
use crate::transfer::{Congestion, TransferConfig, TransferResult};

/// `sluice sim run lads-fig7`.
pub(super) const FIG7: Experiment = Experiment {
    name: "lads-fig7",
    title:
        "LADS Fig. 7: throughput vs I/O threads, object (LADS) vs file (bbcp), small and big sets",
    run: fig7,
};

/// `sluice sim run lads-fig9`.
pub(super) const FIG9: Experiment = Experiment {
    name: "lads-fig9",
    title: "LADS Fig. 9: throughput vs source and sink buffer sizes",
    run: fig9,
};

/// `sluice sim run lads-fig10`.
pub(super) const FIG10: Experiment = Experiment {
    name: "lads-fig10",
    title: "LADS Fig. 10 / Table 1: RR vs congestion-aware under source and sink congestion",
    run: fig10,
};

/// `sluice sim run lads-fig11`.
pub(super) const FIG11: Experiment = Experiment {
    name: "lads-fig11",
    title: "LADS Fig. 11: SSD spill at the source, sink congested with idle gaps",
    run: fig11,
};

const MIB: u64 = 1024 * 1024;
const GIB: u64 = 1024 * MIB;
const THREADS: [u32; 4] = [1, 2, 4, 8];
const BUFFERS_MIB: [u32; 5] = [1, 4, 16, 64, 256];

/// Fig. 10's congestion: a quarter of the targets (4 of 16) serve 8× slower;
/// a new quarter, drawn from the seed, every 10 s.
const PARTIAL: Congestion = Congestion {
    factor: 8.0,
    targets: 4,
    busy: Duration::from_secs(10),
    idle: Duration::ZERO,
    start: Duration::ZERO,
};

/// Fig. 11's congestion at the sink: every target 8× slower for 10 s, then
/// 10 s of idleness (the paper's gap).
const WIDE_WITH_GAPS: Congestion = Congestion {
    factor: 8.0,
    targets: 16,
    busy: Duration::from_secs(10),
    idle: Duration::from_secs(10),
    start: Duration::ZERO,
};

/// The small set: `10,000 × scale` files of 1 MiB.
fn small_set(rc: &RunConfig) -> Vec<u64> {
    let n = ((10_000.0 * rc.scale).round() as usize).max(1);
    vec![MIB; n]
}

/// The big set (and the "100 GB" of Fig. 10/11): 100 files of
/// `1 GiB × scale`.
fn big_set(rc: &RunConfig) -> Vec<u64> {
    vec![scaled(GIB, rc.scale, MIB); 100]
}

fn scheduler(mode: Mode, threshold_ms: u64, skips: u32) -> SchedulerConfig {
    SchedulerConfig {
        mode,
        threshold: Duration::from_millis(threshold_ms),
        skips,
        ..SchedulerConfig::default()
    }
}

fn round_robin() -> SchedulerConfig {
    scheduler(Mode::RoundRobin, 50, 8)
}

/// LADS on the testbed.
fn lads(files: &[u64], threads: u32, s: SchedulerConfig, rc: &RunConfig) -> TransferConfig {
    TransferConfig {
        seed: rc.seed,
        ..TransferConfig::testbed(files.to_vec(), threads, s)
    }
}

/// bbcp on the testbed: one file at a time, sockets over IPoIB.
fn bbcp(files: &[u64], threads: u32, rc: &RunConfig) -> TransferConfig {
    TransferConfig {
        link: LinkConfig {
            bytes_per_s: 1e9,
            latency: Duration::from_micros(20),
        },
        ..lads(files, threads, scheduler(Mode::FileAtATime, 50, 8), rc)
    }
}

fn secs(x: f64) -> String {
    format!("{x:.1}")
}

fn signed_pct(x: f64) -> String {
    format!("{}{}", if x >= 0.0 { "+" } else { "" }, pct(x))
}

/// Throughput gain of a run of `s` seconds over one of `baseline_s`.
fn gain(baseline_s: f64, s: f64) -> String {
    signed_pct(baseline_s / s - 1.0)
}

/// Run-time change of a run of `s` seconds against one of `baseline_s`.
fn longer(baseline_s: f64, s: f64) -> String {
    signed_pct(s / baseline_s - 1.0)
}

/// Congested marks, and the share of them on targets congested at the time.
fn marks(all: u64, right: u64) -> String {
    if all == 0 {
        "0".into()
    } else {
        format!("{all} ({:.0}% right)", 100.0 * right as f64 / all as f64)
    }
}

fn set_size(files: &[u64]) -> String {
    let total: u64 = files.iter().sum();
    let each = files[0];
    let each = if each >= GIB && each.is_multiple_of(GIB) {
        format!("{} GiB", each / GIB)
    } else {
        format!("{} MiB", each / MIB)
    };
    format!("{} × {each} ({:.1} GB)", files.len(), total as f64 / 1e9)
}

fn parameters(rc: &RunConfig, extra: &[(&str, String)]) -> Vec<(String, String)> {
    let mut p = vec![
        ("scale".to_string(), format!("{}", rc.scale)),
        ("seed".to_string(), rc.seed.to_string()),
        (
            "testbed".to_string(),
            "16 targets per side, each a 1 TB 7200 rpm disk (145 MB/s outer edge, seek 1/8.5/18 ms) \
             plus 5 ms file-system cost per request; a request streams (no seek, no rotation) only \
             when it continues the previous one within 1 ms; 1 MiB objects, stripe count 1, files \
             round-robin over targets"
                .to_string(),
        ),
        (
            "network".to_string(),
            "LADS: InfiniBand RMA 3.2 GB/s, 5 µs; bbcp: sockets over IPoIB 1 GB/s, 20 µs".to_string(),
        ),
        (
            "sink page cache".to_string(),
            "buffered writes copied at 2 GB/s while dirty bytes stay under 512 MiB (16 × Lustre's \
             32 MiB max_dirty_mb, pooled); writeback per target, FIFO"
                .to_string(),
        ),
        (
            "metadata".to_string(),
            "1 ms per file open (LADS's master opens ahead, up to 256 files; bbcp opens the next \
             file when the current one is read) and per close at the sink"
                .to_string(),
        ),
        (
            "scheduler".to_string(),
            "W = 1 s; T = 50 ms, M = 8 unless stated; one thread per target (skip-busy)".to_string(),
        ),
    ];
    p.extend(extra.iter().map(|(k, v)| (k.to_string(), v.clone())));
    p
}

/// Fig. 7: throughput vs I/O threads, object (LADS) vs file (bbcp)
/// scheduling, small and big sets.
pub fn fig7(rc: &RunConfig) -> Result<Report, SimError> {
    use Fig7Value::{Lads, Ratio};
    let (small, big) = (small_set(rc), big_set(rc));
    let sets = ["small", "big"];
    let xs: Vec<(&str, u32)> = sets
        .iter()
        .flat_map(|&set| THREADS.map(|n| (set, n)))
        .collect();
    let paper = Paper {
        source: "seed 003 Fig. 7, its text and the abstract",
        values: vec![
            (("small", 8, Ratio), "4-5× (abstract)"),
            (("big", 1, Ratio), "bbcp slightly above LADS"),
            (("big", 8, Lads), "400-450"),
            (("big", 8, Ratio), "4-5× (abstract)"),
        ],
    };
    // What the paper says of each (set, threads) row.
    let paper_says = |set: &str, n: u32| match (set, n) {
        ("small", 1) => "LADS above bbcp",
        ("big", 1) => "bbcp slightly above LADS (read-ahead)",
        ("big", 8) => "LADS 400-450 MB/s; 4-5× bbcp (abstract)",
        (_, 8) => "4-5× bbcp (abstract)",
        _ => "LADS near-linear, bbcp flat",
    };
    let tput = |r: &Sweep<&str, (&str, u32), TransferResult>, system: &str, x: &(&str, u32)| {
        r.at(&system, x).throughput_mb_s()
    };
    let ratio = move |r: &Sweep<_, _, _>, x: &(&str, u32)| {
        format!("{:.2}×", tput(r, "LADS", x) / tput(r, "bbcp", x))
    };
    Figure::new(
        "LADS Fig. 7: throughput vs I/O threads, object (LADS) vs file (bbcp) scheduling",
        "LADS scales almost linearly with I/O threads, bbcp barely improves with streams; LADS \
         outperforms bbcp in every case but one thread on the big set (bbcp benefits from \
         read-ahead); LADS peaks around 400-450 MB/s on the big set; 4-5× bbcp at 8 threads \
         (abstract, on the real file-size distribution). The figure's other values are in the \
         image only.",
        parameters(
            rc,
            &[
                ("small set", set_size(&small)),
                ("big set", set_size(&big)),
                ("LADS scheduler", "round-robin".into()),
            ],
        ),
        vec!["LADS", "bbcp"],
        xs.clone(),
        |&system, &(set, n)| {
            let files = if set == "small" { &small } else { &big };
            Ok(if system == "LADS" {
                lads(files, n, round_robin(), rc)
            } else {
                bbcp(files, n, rc)
            })
        },
    )
    .paper_findings(
        &paper,
        |_| true,
        |&(set, n, value)| match (value, n) {
            (Lads, _) => format!("{set} set, {n} threads: LADS (MB/s)"),
            (Ratio, 1) => format!("{set} set, 1 thread: LADS / bbcp"),
            (Ratio, _) => format!("{set} set, {n} threads: LADS / bbcp"),
        },
        |v| v.to_string(),
        move |r, &(set, n, value)| match value {
            Lads => mb_s(tput(r, "LADS", &(set, n))),
            Ratio => ratio(r, &(set, n)),
        },
    )
    .claim(
        "LADS outperforms bbcp in every case but one thread on the big set",
        move |r| {
            r.xs()
                .iter()
                .filter(|&&x| x != ("big", 1))
                .all(|x| tput(r, "LADS", x) > tput(r, "bbcp", x))
        },
    )
    .claim(
        "LADS gains more from 1 to 8 threads than bbcp, on both sets",
        move |r| {
            sets.iter().all(|&set| {
                let gain = |system| tput(r, system, &(set, 8)) / tput(r, system, &(set, 1));
                gain("LADS") > gain("bbcp")
            })
        },
    )
    .table("Throughput (MB/s) vs threads", xs, |t| {
        t.col("set", |_, (set, _): &(&str, u32)| set.to_string())
            .col("threads", |_, (_, n)| n.to_string())
            .col("LADS MB/s", move |r, x| mb_s(tput(r, "LADS", x)))
            .col("bbcp MB/s", move |r, x| mb_s(tput(r, "bbcp", x)))
            .col("LADS / bbcp", ratio)
            .col("paper", move |_, &(set, n)| paper_says(set, n).to_string())
    })
    .plot(
        log2_line_plot(
            "threads",
            "LADS Fig. 7: throughput vs I/O threads",
            "I/O threads per side (bbcp: streams)",
            "throughput (MB/s)",
            Vec::new(),
        ),
        |mut s| {
            for set in sets {
                for (system, scheduling) in [("LADS", "object"), ("bbcp", "file")] {
                    s = s.line(
                        format!("{system} ({scheduling}) {set}"),
                        THREADS.to_vec(),
                        move |r, &n| (f64::from(n), tput(r, system, &(set, n))),
                    );
                }
            }
            s
        },
    )
    .report(FIG7.name, rc)
}

/// Which of Fig. 7's values a paper value is.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Fig7Value {
    /// LADS's throughput.
    Lads,
    /// LADS's throughput over bbcp's.
    Ratio,
}

/// Fig. 9: throughput vs source and sink buffer sizes, 8 threads.
pub fn fig9(rc: &RunConfig) -> Result<Report, SimError> {
    use Fig9Claim::{LargerSource, SmallSink};
    let (small, big) = (small_set(rc), big_set(rc));
    let sets = ["small", "big"];
    let (smallest, largest) = (BUFFERS_MIB[0], BUFFERS_MIB[BUFFERS_MIB.len() - 1]);
    // The paper's words (no numbers in its text), per set.
    let paper = Paper {
        source: "seed 003 Fig. 9 and its text",
        values: sets
            .iter()
            .flat_map(|&set| {
                [
                    ((set, SmallSink), "a few MB at the sink reach the maximum"),
                    ((set, LargerSource), "a larger source buffer is faster"),
                ]
            })
            .collect(),
    };
    // Throughput with `source` and `sink` buffers (MiB) on `set`.
    let tput = |r: &Sweep<u32, (&str, u32), TransferResult>, set: &str, source: u32, sink: u32| {
        r.at(&sink, &(set, source)).throughput_mb_s()
    };
    let mut figure = Figure::new(
        "LADS Fig. 9: throughput vs source and sink RMA buffer sizes, 8 threads",
        "A few MB of buffer at the sink reach the maximum rate (buffered writes are fast); a \
         larger source buffer improves throughput (direct reads are the bottleneck and more \
         slots let more threads read in parallel); on the big set a small sink buffer was \
         sometimes a bottleneck, never on the small set. No numbers in the text.",
        parameters(
            rc,
            &[
                ("small set", set_size(&small)),
                ("big set", set_size(&big)),
                (
                    "buffers",
                    "1, 4, 16, 64, 256 MiB at each end (1 MiB slots)".into(),
                ),
            ],
        ),
        BUFFERS_MIB.to_vec(),
        sets.iter()
            .flat_map(|&set| BUFFERS_MIB.map(|source| (set, source)))
            .collect(),
        |&sink, &(set, source)| {
            let files = if set == "small" { &small } else { &big };
            let mut c = lads(files, 8, round_robin(), rc);
            c.source.buffer_slots = source;
            c.sink.buffer_slots = sink;
            Ok(c)
        },
    )
    .paper_findings(
        &paper,
        |_| true,
        move |&(set, claim)| match claim {
            SmallSink => {
                format!("{set} set, source {largest} MiB: sink {smallest} / {largest} MiB (MB/s)")
            }
            LargerSource => {
                format!("{set} set, sink {largest} MiB: source {smallest} / {largest} MiB (MB/s)")
            }
        },
        |v| v.to_string(),
        move |r, &(set, claim)| {
            let (source, sink) = match claim {
                SmallSink => ((largest, smallest), (largest, largest)),
                LargerSource => ((smallest, largest), (largest, largest)),
            };
            format!(
                "{} / {}",
                mb_s(tput(r, set, source.0, source.1)),
                mb_s(tput(r, set, sink.0, sink.1))
            )
        },
    )
    .claim("a larger source buffer is faster, on both sets", move |r| {
        sets.iter()
            .all(|set| tput(r, set, largest, largest) > tput(r, set, smallest, largest))
    })
    .claim(
        "on the small set, a 4 MiB sink buffer reaches 95% of the largest one's throughput",
        move |r| tput(r, "small", largest, 4) >= 0.95 * tput(r, "small", largest, largest),
    );
    for set in sets {
        figure = figure
            .table(
                format!("{set} set: throughput (MB/s), source buffer × sink buffer"),
                BUFFERS_MIB.to_vec(),
                |t| {
                    let t = t.col("source buffer", |_, source: &u32| format!("{source} MiB"));
                    BUFFERS_MIB.iter().fold(t, |t, &sink| {
                        t.col(format!("sink {sink} MiB"), move |r, &source| {
                            mb_s(tput(r, set, source, sink))
                        })
                    })
                },
            )
            .plot(
                log2_line_plot(
                    set,
                    &format!("LADS Fig. 9: buffer sizes, {set} set"),
                    "source RMA buffer (MiB)",
                    "throughput (MB/s)",
                    Vec::new(),
                ),
                |s| {
                    BUFFERS_MIB.iter().fold(s, |s, &sink| {
                        s.line(
                            format!("sink {sink} MiB"),
                            BUFFERS_MIB.to_vec(),
                            move |r, &source| (f64::from(source), tput(r, set, source, sink)),
                        )
                    })
                },
            );
    }
    figure.report(FIG9.name, rc)
}

/// Which of Fig. 9's statements a paper value is.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Fig9Claim {
    /// A small sink buffer reaches the maximum.
    SmallSink,
    /// A larger source buffer is faster.
    LargerSource,
}

/// Fig. 10's (T, M) settings: RR, then CA with (T ms, M).
const SETTINGS: [(Mode, u64, u32); 6] = [
    (Mode::RoundRobin, 50, 8),
    (Mode::CongestionAware, 25, 8),
    (Mode::CongestionAware, 50, 2),
    (Mode::CongestionAware, 50, 8),
    (Mode::CongestionAware, 50, 32),
    (Mode::CongestionAware, 200, 8),
];

fn setting_name(mode: Mode, t: u64, m: u32) -> String {
    match mode {
        Mode::CongestionAware => format!("CA ({t} ms, {m})"),
        Mode::RoundRobin => "RR".into(),
        Mode::FileAtATime => "bbcp".into(),
    }
}

fn with_congestion(mut c: TransferConfig, source: Congestion, sink: Congestion) -> TransferConfig {
    c.source.congestion = source;
    c.sink.congestion = sink;
    c
}

/// Fig. 10 (and Table 1): run time of the 100-file set, normal and with
/// congested source or sink targets, RR vs CA with several (T, M).
pub fn fig10(rc: &RunConfig) -> Result<Report, SimError> {
    let files = big_set(rc);
    let none = Congestion::NONE;
    let conditions = [
        ("Normal", none, none),
        ("C-source", PARTIAL, none),
        ("C-sink", none, PARTIAL),
    ];
    let mut configs = Vec::new();
    for &(_, source, sink) in &conditions {
        for &(mode, t, m) in &SETTINGS {
            configs.push(with_congestion(
                lads(&files, 8, scheduler(mode, t, m), rc),
                source,
                sink,
            ));
        }
        configs.push(with_congestion(bbcp(&files, 8, rc), source, sink));
    }
    // Sensitivity: factor × congested targets, RR vs CA (50 ms, 8), each side.
    let factors = [2.0, 4.0, 8.0];
    let counts = [4u32, 8];
    let sweep_start = configs.len();
    for side in ["source", "sink"] {
        for &factor in &factors {
            for &targets in &counts {
                let congestion = Congestion {
                    factor,
                    targets,
                    ..PARTIAL
                };
                let (source, sink) = if side == "source" {
                    (congestion, none)
                } else {
                    (none, congestion)
                };
                for mode in [Mode::RoundRobin, Mode::CongestionAware] {
                    configs.push(with_congestion(
                        lads(&files, 8, scheduler(mode, 50, 8), rc),
                        source,
                        sink,
                    ));
                }
            }
        }
    }
    let results = run_all(&configs, rc)?;
    let per_condition = SETTINGS.len() + 1;
    let mut rows = Vec::new();
    let mut series: Vec<Series> = SETTINGS
        .iter()
        .map(|&(mode, t, m)| Series {
            name: setting_name(mode, t, m),
            points: Vec::new(),
        })
        .collect();
    let normal_rr = results[0].seconds();
    let normal_bbcp = results[SETTINGS.len()].seconds();
    let mut headline = Vec::new();
    for (ci, (condition, _, _)) in conditions.iter().enumerate() {
        let base = ci * per_condition;
        let rr = results[base].seconds();
        // The best CA setting of this condition (shortest run time).
        let best_ca = SETTINGS
            .iter()
            .enumerate()
            .filter(|(_, s)| s.0 == Mode::CongestionAware)
            .map(|(k, &(_, t, m))| (results[base + k].seconds(), t, m))
            .min_by(|a, b| a.0.total_cmp(&b.0));
        let paper_ca = match *condition {
            "C-source" => Some("up to +35%"),
            "C-sink" => Some("almost never better"),
            _ => None,
        };
        if let (Some(paper), Some((seconds, t, m))) = (paper_ca, best_ca) {
            headline.push(Finding::new(
                format!("{condition}: best CA ({t} ms, {m}) throughput vs RR"),
                paper,
                gain(rr, seconds),
            ));
        }
        for (k, &(mode, t, m)) in SETTINGS.iter().enumerate() {
            let r = &results[base + k];
            series[k].points.push((ci as f64, r.seconds()));
            let paper = match (*condition, mode) {
                ("C-source", Mode::CongestionAware) => "CA up to +35% over RR",
                ("C-sink", Mode::CongestionAware) => "CA almost never better than RR",
                ("C-sink", Mode::RoundRobin) => "impact much higher than at the source",
                _ => "",
            };
            rows.push(vec![
                condition.to_string(),
                setting_name(mode, t, m),
                secs(r.seconds()),
                mb_s(r.throughput_mb_s()),
                gain(rr, r.seconds()),
                longer(normal_rr, r.seconds()),
                marks(r.source.congested_marks, r.source_marks_on_congested),
                marks(r.sink.congested_marks, r.sink_marks_on_congested),
                r.congested_skips().to_string(),
                paper.to_string(),
            ]);
        }
        let b = &results[base + SETTINGS.len()];
        let paper = match *condition {
            "C-source" => "run time +19% over normal (Table 1)",
            "C-sink" => "about the same as normal (Table 1)",
            _ => "slower than LADS (Table 1)",
        };
        if ci > 0 {
            headline.push(Finding::new(
                format!("{condition}: bbcp run time vs normal"),
                paper,
                longer(normal_bbcp, b.seconds()),
            ));
        }
        rows.push(vec![
            condition.to_string(),
            "bbcp".into(),
            secs(b.seconds()),
            mb_s(b.throughput_mb_s()),
            "-".into(),
            longer(normal_bbcp, b.seconds()),
            "-".into(),
            "-".into(),
            "-".into(),
            paper.to_string(),
        ]);
    }
    let mut sweep_rows = Vec::new();
    let mut i = sweep_start;
    for side in ["source", "sink"] {
        for &factor in &factors {
            for &targets in &counts {
                let (rr, ca) = (&results[i], &results[i + 1]);
                i += 2;
                sweep_rows.push(vec![
                    side.to_string(),
                    format!("{factor}×"),
                    format!("{targets} of 16"),
                    secs(rr.seconds()),
                    secs(ca.seconds()),
                    gain(rr.seconds(), ca.seconds()),
                    longer(normal_rr, rr.seconds()),
                ]);
            }
        }
    }
    Ok(Report {
        experiment: FIG10.name.into(),
        title: "LADS Fig. 10 / Table 1: run time with congested source or sink targets, RR vs CA (T, M)".into(),
        headline,
        paper: "Transferring 100 GB: with part of the source congested, CA improves on RR by up to 35%; \
                too large a threshold, or too few or too many skips, lose the gain. With the sink \
                congested the impact is much larger and CA almost never helps, whatever (T, M): \
                buffered writes hide the targets' congestion from the service-time samples (mostly \
                false positives). bbcp (Table 1): +19% run time with the source congested, about \
                unchanged with the sink congested. The (T, M) values and run times are in the figure only."
            .into(),
        parameters: parameters(
            rc,
            &[
                ("set", set_size(&files)),
                ("threads", "8 per side".into()),
                (
                    "congestion",
                    "4 of the 16 targets serve 8× slower; a new 4, drawn from the seed, every 10 s \
                     (the paper does not describe its congestion); the same schedule at the source \
                     (C-source) or the sink (C-sink)"
                        .into(),
                ),
                ("CA", "at both ends, same (T, M)".into()),
            ],
        ),
        tables: vec![
            Table {
                title: "Run time per condition and scheduler".into(),
                headers: [
                    "condition",
                    "scheduler",
                    "run time s",
                    "MB/s",
                    "throughput vs RR",
                    "run time vs normal",
                    "source marks",
                    "sink marks",
                    "congested skips",
                    "paper",
                ]
                .map(String::from)
                .to_vec(),
                rows,
            },
            Table {
                title: "Sensitivity: congestion factor and congested targets, RR vs CA (50 ms, 8)".into(),
                headers: [
                    "congested side",
                    "factor",
                    "targets",
                    "RR s",
                    "CA s",
                    "CA throughput vs RR",
                    "RR run time vs normal",
                ]
                .map(String::from)
                .to_vec(),
                rows: sweep_rows,
            },
        ],
        plots: vec![bar_plot(
            &format!("{}-congestion", FIG10.name),
            "LADS Fig. 10: run time, RR vs CA",
            "congestion condition",
            "run time (s)",
            conditions.iter().map(|c| c.0.to_string()).collect(),
            series,
        )],
        notes: Vec::new(),
        events: events(&results),
        checks: Vec::new(),
    })
}

/// Fig. 11: SSD spill at the source with the sink congested in periods
/// separated by 10 s of idleness; throughput vs source DRAM, with and
/// without SSD.
pub fn fig11(rc: &RunConfig) -> Result<Report, SimError> {
    let files = big_set(rc);
    let dram = [64u32, 128, 256, 512, 1024, 2048];
    let ssd = [0u32, 256, 512, 1024, 2048];
    let mut configs = Vec::new();
    for &d in &dram {
        for &s in &ssd {
            let mut c = lads(&files, 8, round_robin(), rc);
            c.sink.congestion = WIDE_WITH_GAPS;
            c.sink.buffer_slots = 256;
            c.source.buffer_slots = d;
            c.spill_slots = s;
            configs.push(c);
        }
    }
    let results = run_all(&configs, rc)?;
    let at = |d: u32, s: u32| {
        let i = dram.iter().position(|&x| x == d).expect("dram size");
        let j = ssd.iter().position(|&x| x == s).expect("ssd size");
        &results[i * ssd.len() + j]
    };
    let mut rows = Vec::new();
    let mut series: Vec<Series> = ssd
        .iter()
        .map(|s| Series {
            name: if *s == 0 {
                "no SSD".into()
            } else {
                format!("SSD {s} MiB")
            },
            points: Vec::new(),
        })
        .collect();
    for &d in &dram {
        let base = at(d, 0).throughput_mb_s();
        let mut row = vec![format!("{d} MiB")];
        for (j, &s) in ssd.iter().enumerate() {
            let r = at(d, s);
            let t = r.throughput_mb_s();
            series[j].points.push((f64::from(d), t));
            row.push(if s == 0 {
                mb_s(t)
            } else {
                format!(
                    "{} ({}{})",
                    mb_s(t),
                    if t >= base { "+" } else { "" },
                    pct(t / base - 1.0)
                )
            });
        }
        row.push(at(d, 2048).spilled.to_string());
        rows.push(row);
    }
    let mut headers = vec!["source DRAM".to_string()];
    headers.extend(ssd.iter().map(|&s| {
        if s == 0 {
            "no SSD MB/s".to_string()
        } else {
            format!("+ SSD {s} MiB")
        }
    }));
    headers.push("objects spilled (2 GiB SSD)".into());
    // The largest gain of any SSD size over no SSD, as its table cell.
    let best_spill = dram
        .iter()
        .flat_map(|&d| ssd.iter().filter(|&&s| s > 0).map(move |&s| (d, s)))
        .max_by(|a, b| {
            let g = |(d, s): (u32, u32)| at(d, s).throughput_mb_s() / at(d, 0).throughput_mb_s();
            g(*a).total_cmp(&g(*b))
        });
    let mut headline = Vec::new();
    if let Some((d, s)) = best_spill {
        let (t, base) = (at(d, s).throughput_mb_s(), at(d, 0).throughput_mb_s());
        headline.push(Finding::new(
            format!("largest gain of an SSD spill over no SSD (DRAM {d} MiB + SSD {s} MiB, MB/s)"),
            "+37% with a small SSD",
            format!(
                "{} ({}{})",
                mb_s(t),
                if t >= base { "+" } else { "" },
                pct(t / base - 1.0)
            ),
        ));
    }
    let mut versus = Vec::new();
    for &d in &[256u32, 512, 1024] {
        let with_ssd = at(d, d).throughput_mb_s();
        let doubled = at(2 * d, 0).throughput_mb_s();
        headline.push(Finding::new(
            format!("DRAM {d} MiB + SSD {d} MiB vs DRAM {} MiB", 2 * d),
            "the same throughput",
            pct(with_ssd / doubled - 1.0),
        ));
        versus.push(vec![
            format!("{d} MiB"),
            mb_s(at(d, 0).throughput_mb_s()),
            mb_s(with_ssd),
            mb_s(doubled),
            pct(with_ssd / doubled - 1.0),
        ]);
    }
    let (ablation, ablation_results) = fig11_ablation(&files, rc)?;
    Ok(Report {
        experiment: FIG11.name.into(),
        title: "LADS Fig. 11: SSD spill at the source, sink congested with 10 s idle gaps".into(),
        headline,
        paper: "Throughput rises with the source's memory; a small SSD spill buffer raises it by 37% over \
                no SSD, and doubling DRAM reaches the same throughput at a higher cost (Fig. 11(b)). \
                Sink RMA buffer 256 MB, 8 I/O threads each side, no congestion-aware scheduling. \
                Memory and SSD sizes are in the figure only."
            .into(),
        parameters: parameters(
            rc,
            &[
                ("set", set_size(&files)),
                (
                    "congestion",
                    "sink: all 16 targets 8× slower for 10 s, then 10 s idle, repeated (the paper's \
                     wide-spread sink congestion with 10 s gaps; its congested period is not given)"
                        .into(),
                ),
                (
                    "spill SSD",
                    "Fusion-io ioDrive Duo: 2 channels of 750 MB/s read, 500 MB/s write, 30 µs; one \
                     SSD thread copies spilled objects back into memory"
                        .into(),
                ),
                ("scheduler", "RR at both ends; sink buffer 256 MiB".into()),
            ],
        ),
        tables: vec![
            Table {
                title: "Throughput (MB/s) vs source DRAM and SSD spill (gain over no SSD)".into(),
                headers,
                rows,
            },
            Table {
                title: "SSD instead of more DRAM: DRAM d + SSD d vs DRAM 2d".into(),
                headers: ["DRAM d", "no SSD", "d + SSD d", "DRAM 2d", "difference"]
                    .map(String::from)
                    .to_vec(),
                rows: versus,
            },
            ablation,
        ],
        plots: vec![log2_line_plot(
            &format!("{}-spill", FIG11.name),
            "LADS Fig. 11: throughput vs source DRAM, with and without SSD",
            "source DRAM buffer (MiB)",
            "throughput (MB/s)",
            series,
        )],
        notes: Vec::new(),
        events: events(&results) + events(&ablation_results),
        checks: Vec::new(),
    })
}

/// What limits the gain of a small spill (DRAM 256 MiB + SSD 512 MiB over
/// DRAM 256 MiB): Fig. 11's set-up with one thing changed at a time — the
/// sink's page cache, its RMA buffer, the congestion's rhythm, the SSD's
/// speed (docs/results/lads.md).
fn fig11_ablation(files: &[u64], rc: &RunConfig) -> Result<(Table, Vec<TransferResult>), SimError> {
    let base = |spill: u32| {
        let mut c = lads(files, 8, round_robin(), rc);
        c.sink.congestion = WIDE_WITH_GAPS;
        c.sink.buffer_slots = 256;
        c.source.buffer_slots = 256;
        c.spill_slots = spill;
        c
    };
    let rhythm = |busy: u64, idle: u64| Congestion {
        busy: Duration::from_secs(busy),
        idle: Duration::from_secs(idle),
        ..WIDE_WITH_GAPS
    };
    type Change = Box<dyn Fn(&mut TransferConfig)>;
    let cases: Vec<(&str, Change)> = vec![
        ("as Fig. 11", Box::new(|_| {})),
        (
            "sink page cache 64 MiB",
            Box::new(|c| c.dirty_limit_bytes = 64 * MIB),
        ),
        (
            "sink page cache 16 MiB",
            Box::new(|c| c.dirty_limit_bytes = 16 * MIB),
        ),
        ("sink buffer 64 MiB", Box::new(|c| c.sink.buffer_slots = 64)),
        (
            "congestion 20 s on / 20 s off",
            Box::new(move |c| c.sink.congestion = rhythm(20, 20)),
        ),
        (
            "congestion 10 s on / 30 s off",
            Box::new(move |c| c.sink.congestion = rhythm(10, 30)),
        ),
        (
            "congestion 2 s on / 2 s off",
            Box::new(move |c| c.sink.congestion = rhythm(2, 2)),
        ),
        (
            "congestion 1 s on / 1 s off",
            Box::new(move |c| c.sink.congestion = rhythm(1, 1)),
        ),
        (
            "congestion 30 s on / 10 s off",
            Box::new(move |c| c.sink.congestion = rhythm(30, 10)),
        ),
        (
            "SSD 4× faster",
            Box::new(|c| {
                c.ssd.read_bytes_per_s *= 4.0;
                c.ssd.write_bytes_per_s *= 4.0;
            }),
        ),
        (
            "sink page cache 16 MiB, congestion 10 s on / 30 s off",
            Box::new(move |c| {
                c.dirty_limit_bytes = 16 * MIB;
                c.sink.congestion = rhythm(10, 30);
            }),
        ),
    ];
    let mut configs = Vec::new();
    for (_, change) in &cases {
        for spill in [0, 512] {
            let mut c = base(spill);
            change(&mut c);
            configs.push(c);
        }
    }
    let results = run_all(&configs, rc)?;
    let rows = cases
        .iter()
        .enumerate()
        .map(|(k, (name, _))| {
            let (without, with) = (
                results[2 * k].throughput_mb_s(),
                results[2 * k + 1].throughput_mb_s(),
            );
            vec![
                name.to_string(),
                mb_s(without),
                mb_s(with),
                format!(
                    "{}{}",
                    if with >= without { "+" } else { "" },
                    pct(with / without - 1.0)
                ),
                results[2 * k + 1].spilled.to_string(),
            ]
        })
        .collect();
    let table = Table {
        title: "Ablation: DRAM 256 MiB, no SSD vs SSD 512 MiB, one change at a time (MB/s)".into(),
        headers: ["change", "no SSD", "SSD 512 MiB", "gain", "objects spilled"]
            .map(String::from)
            .to_vec(),
        rows,
    };
    Ok((table, results))
}
