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
//!
//! Every figure is declared: Fig. 7 and 9 here, Fig. 10 and 11
//! (congestion, each with a sweep beside it) in `congestion`.

use std::time::Duration;

use sluice_devices::LinkConfig;

use sluice_policy::lads::{Mode, SchedulerConfig};

use super::figure::{Figure, Paper, Sweep};

use super::{mb_s, pct, scaled, Experiment, RunConfig, SimError};

use crate::output::{Finding, Report};

use crate::transfer::{Congestion, TransferConfig, TransferResult};

mod congestion;

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
    run: congestion::fig10,
};

/// `sluice sim run lads-fig11`.
pub(super) const FIG11: Experiment = Experiment {
    name: "lads-fig11",
    title: "LADS Fig. 11: SSD spill at the source, sink congested with idle gaps",
    run: congestion::fig11,
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
    .paper_values(
        &paper,
        |&(set, n, value)| match (value, n) {
            (Lads, _) => format!("{set} set, {n} threads: LADS (MB/s)"),
            (Ratio, 1) => format!("{set} set, 1 thread: LADS / bbcp"),
            (Ratio, _) => format!("{set} set, {n} threads: LADS / bbcp"),
        },
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
    .log2_lines(
        [
            "threads",
            "LADS Fig. 7: throughput vs I/O threads",
            "I/O threads per side (bbcp: streams)",
            "throughput (MB/s)",
        ],
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
    .paper_values(
        &paper,
        move |&(set, claim)| match claim {
            SmallSink => {
                format!("{set} set, source {largest} MiB: sink {smallest} / {largest} MiB (MB/s)")
            }
            LargerSource => {
                format!("{set} set, sink {largest} MiB: source {smallest} / {largest} MiB (MB/s)")
            }
        },
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
                    t.col("source buffer", |_, source: &u32| format!("{source} MiB"))
                        .each(
                            BUFFERS_MIB,
                            |sink| format!("sink {sink} MiB"),
                            move |r, &source, sink| mb_s(tput(r, set, source, sink)),
                        )
                },
            )
            .log2_lines(
                [
                    set,
                    &format!("LADS Fig. 9: buffer sizes, {set} set"),
                    "source RMA buffer (MiB)",
                    "throughput (MB/s)",
                ],
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
