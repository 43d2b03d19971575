//! The SSDUP+ figures whose reports trace the detector's streams and ablate
//! what moves them: Fig. 5/6 (random percentage after sorting, processes
//! drifting apart), Fig. 10 (HDD queue depth, each set's throughput, a
//! stream as long as the queue) and Fig. 13 (HPIO, each instance alone,
//! drifting processes). All three are declared: an ablation is one more
//! "system" (a changed cluster, a run alone), and Fig. 5/6 runs its
//! ablations at the strided loads only (`Figure::only`).

use super::*;
use crate::experiments::figure::{keyed, Columns, Figure, Paper, SeriesList};
use sluice_devices::link::IncastConfig;
use std::iter::zip;

/// Fig. 5/6's server-thread ablation: threads per I/O node, and each
/// one's time per request (heavier than a PVFS2 server's request handling,
/// so that requests can pile up).
const SERVER_THREADS: u32 = 8;
const SERVER_REQUEST_TIME: Duration = Duration::from_millis(1);

/// Fig. 5/6's incast ablation: switch port buffers (KiB), the model's
/// default (128 KiB) between a small per-port share and a large one; the
/// paper does not name its switch, so the report shows all three.
const INCAST_BUFFERS_KIB: [u64; 3] = [32, 128, 512];

/// What Fig. 5/6's strided runs change in the paper's cluster: nothing, or
/// one ablation (nothing else changed).
#[derive(Clone, Copy, PartialEq, Debug)]
enum Ablation {
    Off,
    /// Processes drifting apart: this mean client overhead per request.
    Drift(Duration),
    /// Server threads taking pending requests at random (`server_threads`).
    Threads,
    /// TCP incast at the I/O nodes' switch ports (`incast`), this port
    /// buffer in KiB.
    Incast(u64),
    /// The I/O nodes' links shared fairly by the pieces crossing them
    /// (`fair_share_server_links`).
    FairShare,
}

impl Ablation {
    /// The cluster `c` with the ablation.
    fn cluster(self, mut c: ClusterConfig) -> ClusterConfig {
        match self {
            Ablation::Off => {}
            Ablation::Drift(overhead) => c.client_overhead_mean = overhead,
            Ablation::Threads => {
                c.server_threads = SERVER_THREADS;
                c.server_request_time = SERVER_REQUEST_TIME;
            }
            Ablation::Incast(kib) => {
                let port_buffer_bytes = kib * KIB;
                c.incast = Some(IncastConfig {
                    port_buffer_bytes,
                    ..IncastConfig::default()
                });
            }
            Ablation::FairShare => c.fair_share_server_links = true,
        }
        c
    }

    /// What an ablation table's columns call it.
    fn label(self) -> String {
        match self {
            Ablation::Off => "off".into(),
            Ablation::Drift(overhead) => format!("{} ms", overhead.as_millis()),
            Ablation::Threads | Ablation::FairShare => "on".into(),
            Ablation::Incast(kib) => format!("{kib} KiB"),
        }
    }
}

/// Fig. 5/6's loads: (a) a pattern, or the mixed load of two instances, at
/// 16 processes; (b) strided with n processes.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Load {
    At16(IorPattern),
    Mixed,
    Strided(u32),
}

impl Load {
    /// What the report calls it.
    fn name(self) -> String {
        match self {
            Load::At16(pattern) => pattern.name().into(),
            Load::Mixed => "mixed".into(),
            Load::Strided(n) => format!("strided, {n} processes"),
        }
    }
}

type Fig5 = Sweep<Ablation, Load, RunResult>;

/// The strided run of `n` processes with `ablation`.
fn strided(r: &Fig5, ablation: Ablation, n: u32) -> &RunResult {
    r.at(&ablation, &Load::Strided(n))
}

/// A strided run's random percentage and throughput, as a table shows them.
fn random_pct(r: &RunResult) -> String {
    pct(mean_percentage(r))
}
fn throughput(r: &RunResult) -> String {
    mb_s(r.jobs[0].throughput_mb_s())
}

/// A value of a strided run as an ablation table shows it: its header, and
/// how it reads.
type Metric = (&'static str, fn(&RunResult) -> String);
const RANDOM: Metric = ("random %", random_pct);
const MB_S: Metric = ("MB/s", throughput);
/// Every strided piece is half a 256 KiB request.
const TIMEOUTS: Metric = ("timeouts / piece", |r| {
    pct(r.incast_timeouts as f64 / (r.bytes_written / (128 * KIB)).max(1) as f64)
});

/// A table of strided runs by process count: per (ablation, metric) of
/// `cells`, a column "label: metric".
fn by_processes<'a>(
    t: Columns<'a, u32, Fig5>,
    cells: impl IntoIterator<Item = (Ablation, Metric)>,
) -> Columns<'a, u32, Fig5> {
    t.col("processes", |_, n| n.to_string()).each(
        cells,
        |(a, (what, _))| format!("{}: {what}", a.label()),
        |r, &n, (a, (_, value))| value(strided(r, a, n)),
    )
}

/// A series per (ablation, name) of `lines`: `y` of its strided runs by
/// processes.
fn strided_lines<'a>(
    s: SeriesList<'a, Fig5>,
    procs: &[u32],
    lines: Vec<(Ablation, String)>,
    y: fn(&RunResult) -> f64,
) -> SeriesList<'a, Fig5> {
    lines.into_iter().fold(s, |s, (a, name)| {
        s.line(name, procs.to_vec(), move |r, &n| {
            (f64::from(n), y(strided(r, a, n)))
        })
    })
}

/// Fig. 5/6: the random percentage of the streams after sorting, per
/// pattern at 16 processes and strided with 8-128, on the baseline system;
/// the strided runs again with each ablation.
pub(super) fn fig5(rc: &RunConfig) -> Result<Report, SimError> {
    use Ablation::{Drift, FairShare, Incast, Off, Threads};
    use IorPattern::{SegmentedContiguous, SegmentedRandom};
    let procs = vec![8u32, 16, 32, 64, 128];
    let ablations = [Off]
        .into_iter()
        .chain(DRIFT_OVERHEADS.map(Drift))
        .chain([Threads])
        .chain(INCAST_BUFFERS_KIB.map(Incast))
        .chain([FairShare])
        .collect();
    let at16 = [IorPattern::ALL.map(Load::At16).to_vec(), vec![Load::Mixed]].concat();
    let strided_loads = procs.iter().map(|&n| Load::Strided(n));
    let loads = at16.iter().copied().chain(strided_loads).collect();
    let paper_a: Vec<(Load, f64)> = zip(at16.clone(), [11.0, 45.0, 100.0, 71.88]).collect();
    // Strided: (random %, MB/s) by processes.
    let paper_b = [
        (8, (7.0, 208.1)),
        (16, (15.0, 211.76)),
        (32, (28.0, 175.8)),
        (64, (46.0, 159.29)),
        (128, (71.0, 132.68)),
    ];
    let paper_random = move |n: &u32| format!("{}%", keyed(&paper_b, n).0);
    let paper_mb_s = move |n: &u32| keyed(&paper_b, n).1.to_string();
    // The model's default port buffer, on the plots beside the default run.
    let incast = Incast(IncastConfig::default().port_buffer_bytes / KIB);
    let lines = vec![
        (Off, "sim".to_string()),
        (incast, format!("sim, incast ({} port)", incast.label())),
    ];
    let on_off = |a| [(Off, RANDOM), (a, RANDOM), (a, MB_S)];
    let streams = "128 requests, I/O node 0, baseline system";
    Figure::new(
        "Fig. 5/6: random percentage of 128-request streams after sorting (server side)",
        "At 16 processes: segmented-contiguous 11% (S = 15), strided 45% (S = 57), \
         segmented-random 100% (S = 127), mixed 71.88% (S = 91). Strided with 8-128 processes: \
         7/15/28/46/71% random and 208.1/211.76/175.8/159.29/132.68 MB/s.",
        parameters(rc, &[("streams", streams.into())]),
        ablations,
        loads,
        |&ablation, &load| {
            let jobs = match load {
                Load::At16(pattern) => vec![ior(pattern, 1, 16, 16 * GIB, rc)?],
                Load::Mixed => vec![
                    ior(SegmentedContiguous, 1, 16, 8 * GIB, rc)?,
                    ior(SegmentedRandom, 2, 16, 8 * GIB, rc)?,
                ],
                Load::Strided(n) => vec![ior(IorPattern::Strided, 1, n, 16 * GIB, rc)?],
            };
            let cluster = ablation.cluster(base_cluster(rc));
            Ok(Task {
                cluster,
                system: System::Baseline,
                jobs,
            })
        },
    )
    .only(|&a, load| a == Off || matches!(load, Load::Strided(_)))
    .headline({
        let paper_a = paper_a.clone();
        move |r| {
            let finding = |(load, paper): &(Load, f64)| {
                Finding::new(
                    format!("random percentage, {}, 16 processes", load.name()),
                    format!("{paper}%"),
                    random_pct(r.at(&Off, load)),
                )
            };
            paper_a.iter().map(finding).collect()
        }
    })
    .headline(move |r| {
        let incast_label = incast.label();
        let finding = |n: u32| {
            [
                Finding::new(
                    format!("strided, {n} processes, random percentage"),
                    paper_random(&n),
                    random_pct(strided(r, Off, n)),
                ),
                Finding::new(
                    format!("strided, {n} processes (MB/s)"),
                    paper_mb_s(&n),
                    throughput(strided(r, Off, n)),
                ),
                Finding::new(
                    format!(
                        "strided, {n} processes, random percentage, \
                         with TCP incast ({incast_label} port)"
                    ),
                    paper_random(&n),
                    random_pct(strided(r, incast, n)),
                ),
            ]
        };
        [8, 128].into_iter().flat_map(finding).collect()
    })
    .table("Mean random percentage at 16 processes", at16, |t| {
        t.col("pattern", |_, load| load.name())
            .col("sim", |r, load| random_pct(r.at(&Off, load)))
            .col("paper", move |_, load| {
                format!("{}%", keyed(&paper_a, load))
            })
    })
    .table(
        "Strided: random percentage and throughput vs processes",
        procs.clone(),
        |t| {
            t.col("processes", |_, n: &u32| n.to_string())
                .col("sim random %", |r, &n| random_pct(strided(r, Off, n)))
                .col("paper random %", move |_, n| paper_random(n))
                .col("sim MB/s", |r, &n| throughput(strided(r, Off, n)))
                .col("paper MB/s", move |_, n| paper_mb_s(n))
        },
    )
    .table(
        "Ablation: strided with processes drifting apart \
         (mean client overhead per request; default 0.2 ms)",
        procs.clone(),
        |t| {
            let drifts = DRIFT_OVERHEADS.map(Drift).into_iter();
            by_processes(t, drifts.flat_map(|d| [(d, RANDOM), (d, MB_S)]))
        },
    )
    .table(
        format!(
            "Ablation: {SERVER_THREADS} server threads taking pending requests at random, \
             {} ms each (`server_threads`; default off)",
            SERVER_REQUEST_TIME.as_secs_f64() * 1e3
        ),
        procs.clone(),
        |t| by_processes(t, on_off(Threads)),
    )
    .table(
        "Ablation: TCP incast at the I/O nodes' switch ports, by port buffer (`incast`; \
         default off; 2 × 1448 B smallest window per flow, 200 ms timeout)",
        procs.clone(),
        |t| {
            let buffers = INCAST_BUFFERS_KIB.map(Incast).into_iter();
            let cells = buffers.flat_map(|b| [(b, RANDOM), (b, MB_S), (b, TIMEOUTS)]);
            by_processes(t, [(Off, RANDOM)].into_iter().chain(cells))
        },
    )
    .table(
        "Ablation: I/O node links shared equally by the pieces crossing them \
         (processor sharing, `fair_share_server_links`; default off: FIFO)",
        procs.clone(),
        |t| by_processes(t, on_off(FairShare)),
    )
    .log2_lines(
        [
            "random",
            "Strided: random percentage vs processes",
            "MPI processes",
            "random percentage (%)",
        ],
        |s| strided_lines(s, &procs, lines.clone(), |r| mean_percentage(r) * 100.0),
    )
    .log2_lines(
        [
            "throughput",
            "Strided: throughput vs processes",
            "MPI processes",
            "throughput (MB/s)",
        ],
        |s| strided_lines(s, &procs, lines, |r| r.jobs[0].throughput_mb_s()),
    )
    .report(FIG5.name, rc)
    .map(|mut report| {
        // The plots are Fig. 6's, and named after it.
        for plot in &mut report.plots {
            plot.file_stem = plot.file_stem.replacen("fig5", "fig6", 1);
        }
        report
    })
}

/// Fig. 10: HDD scheduler queue depth 32 / 128 / 512, 32 processes, and
/// SSDUP+ with its stream as long as the queue.
pub(super) fn fig10(rc: &RunConfig) -> Result<Report, SimError> {
    use System::{Baseline, SluiceCost, SsdupPlus};
    let depths = vec![32u32, 128, 512];
    // The systems, and SSDUP+ again with its stream as long as the queue
    // (the paper "adjusted the length of the request stream" with the
    // queue size, §2.3.1 and §3.2.2): (system, stream = queue depth).
    let runs = [
        (Baseline, false),
        (SsdupPlus, false),
        (SluiceCost, false),
        (SsdupPlus, true),
    ];
    // OrangeFS's throughput (MB/s) and SSDUP+'s gain over it (%).
    let paper = Paper {
        source: "seed 002 Fig. 10 and its text",
        values: vec![
            ((Baseline, 32), 124.0),
            ((SsdupPlus, 32), 59.7),
            ((SsdupPlus, 128), 41.5),
            ((Baseline, 512), 179.0),
            ((SsdupPlus, 512), 12.3),
        ],
    };
    let job = three_sets(32, rc)?;
    // Each set's bytes, MB: the barriers between the sets end the first two.
    let set_mb = [
        ior(IorPattern::SegmentedContiguous, 1, 32, 16 * GIB, rc)?.bytes_written(),
        ior(IorPattern::Strided, 2, 32, 16 * GIB, rc)?.bytes_written(),
        ior(IorPattern::SegmentedRandom, 3, 32, 8 * GIB, rc)?.bytes_written(),
    ]
    .map(|b| b as f64 / 1e6);
    let per_set = move |r: &RunResult, k: usize| {
        let job = &r.jobs[0];
        let mut bounds = vec![job.start_ns];
        bounds.extend(job.barriers.iter().map(|m| m.ns));
        bounds.truncate(3);
        bounds.push(job.end_ns);
        mb_s(set_mb[k] / (bounds[k + 1].saturating_sub(bounds[k]) as f64 / 1e9))
    };
    type R = Sweep<(System, bool), u32, RunResult>;
    /// `system`'s run (its own stream length) at `depth`.
    fn run<'r>(r: &'r R, system: System, depth: &u32) -> &'r RunResult {
        r.at(&(system, false), depth)
    }
    let tput =
        move |r: &R, system: System, depth: &u32| run(r, system, depth).jobs[0].throughput_mb_s();
    let gain = move |r: &R, system: System, depth: &u32| {
        tput(r, system, depth) / tput(r, Baseline, depth) - 1.0
    };
    let trace_rows: Vec<(u32, &str, (System, bool))> = depths
        .iter()
        .flat_map(|&d| {
            [
                (d, "OrangeFS", (Baseline, false)),
                (d, "SSDUP+", (SsdupPlus, false)),
                (d, "SSDUP+, stream = queue depth", (SsdupPlus, true)),
            ]
        })
        .collect();
    Figure::new(
        "Fig. 10: HDD scheduler queue depth, 32 processes",
        "SSDUP+ improves on OrangeFS by 59.7%, 41.5% and 12.3% with queue depths 32, 128 and 512; \
         OrangeFS reaches 124 MB/s at depth 32 and 179 MB/s at 512 (per I/O node in the paper's \
         figure).",
        parameters(
            rc,
            &[
                ("workload", "Fig. 9's three sets, 32 processes".into()),
                sluice_parameter(&base_cluster(rc)),
            ],
        ),
        runs.to_vec(),
        depths.clone(),
        |&(system, stream_is_depth), &depth| {
            let mut cluster = base_cluster(rc);
            cluster.hdd.queue_depth = depth;
            if stream_is_depth {
                cluster.stream_len = depth;
            }
            Ok(Task {
                cluster,
                system,
                jobs: vec![job.clone()],
            })
        },
    )
    // The paper's values are OrangeFS's throughput and SSDUP+'s gain.
    .paper_headline(&paper, move |r, (system, depth), v| {
        vec![match system {
            Baseline => Finding::new(
                format!("OrangeFS, queue depth {depth} (MB/s)"),
                format!("{v}"),
                mb_s(tput(r, Baseline, depth)),
            ),
            _ => Finding::new(
                format!("SSDUP+ gain over OrangeFS, queue depth {depth}"),
                format!("{v}%"),
                pct(gain(r, SsdupPlus, depth)),
            ),
        }]
    })
    .claim("SSDUP+ above OrangeFS at every queue depth", move |r| {
        r.xs().iter().all(|d| gain(r, SsdupPlus, d) > 0.0)
    })
    .claim(
        "SSDUP+'s gain shrinks as the queue deepens (32 > 128 > 512)",
        move |r| {
            let g = |d| gain(r, SsdupPlus, &d);
            g(32) > g(128) && g(128) > g(512)
        },
    )
    .claim(
        "OrangeFS is faster with a 512-deep queue than a 32-deep one",
        move |r| tput(r, Baseline, &512) > tput(r, Baseline, &32),
    )
    .table("Aggregate throughput (MB/s)", depths.clone(), |t| {
        t.col("queue depth", |_, d: &u32| d.to_string())
            .col("OrangeFS", move |r, d| mb_s(tput(r, Baseline, d)))
            .col("paper OrangeFS", |_, &d| paper.shown(&(Baseline, d)))
            .col("SSDUP+", move |r, d| mb_s(tput(r, SsdupPlus, d)))
            .col("SSDUP+ to SSD", move |r, d| {
                pct(run(r, SsdupPlus, d).fast_fraction())
            })
            .col("SSDUP+ gain", move |r, d| pct(gain(r, SsdupPlus, d)))
            .col("paper gain", |_, &d| {
                format!("{}%", paper.shown(&(SsdupPlus, d)))
            })
            .col("sluice", move |r, d| mb_s(tput(r, SluiceCost, d)))
            .col("sluice to SSD", move |r, d| {
                pct(run(r, SluiceCost, d).fast_fraction())
            })
            .col("sluice gain", move |r, d| pct(gain(r, SluiceCost, d)))
    })
    .table(
        "Trace: each set's throughput (MB/s), and SSDUP+ with a stream as long as the queue",
        trace_rows,
        |t| {
            let t = t
                .col("depth", |_, (d, _, _): &(u32, &str, (System, bool))| {
                    d.to_string()
                })
                .col("run", |_, (_, name, _)| name.to_string());
            ["segmented-contiguous", "strided", "segmented-random"]
                .into_iter()
                .enumerate()
                .fold(t, |t, (k, set)| {
                    t.col(set, move |r, (d, _, run)| per_set(r.at(run, d), k))
                })
                .col("all", |r, (d, _, run)| {
                    mb_s(r.at(run, d).jobs[0].throughput_mb_s())
                })
                .col("to SSD", |r, (d, _, run)| pct(r.at(run, d).fast_fraction()))
        },
    )
    .plot(
        bar_plot(
            "queue-depth",
            "Throughput vs HDD queue depth",
            "HDD scheduler queue depth (requests)",
            "throughput (MB/s)",
            depths.iter().map(|d| d.to_string()).collect(),
            Vec::new(),
        ),
        |s| {
            s.per_system(
                &runs[..3],
                |(system, _)| system.name().into(),
                |i, _| i as f64,
                |r| r.jobs[0].throughput_mb_s(),
            )
        },
    )
    .report(FIG10.name, rc)
}

/// A run of Fig. 13 at one region size: both instances on a system, one
/// instance alone on the baseline (for the random percentage of its own
/// streams), or both with processes drifting apart (a larger mean client
/// overhead between a process's requests, nothing else changed).
#[derive(Clone, Copy, PartialEq, Debug)]
enum HpioRun {
    Both(System),
    Alone(usize),
    Drift(Duration, System),
}

/// Fig. 13: two HPIO instances at region sizes 32-256 KiB on every
/// system, with each instance alone and the drift ablation beside them.
pub(super) fn fig13(rc: &RunConfig) -> Result<Report, SimError> {
    use HpioRun::{Alone, Both, Drift};
    use System::{SluiceCost, Ssdup, SsdupPlus};
    let sizes = vec![32u64, 64, 128, 256];
    let drifted: Vec<(Duration, System)> = DRIFT_OVERHEADS
        .into_iter()
        .flat_map(|d| [(d, Ssdup), (d, SsdupPlus)])
        .collect();
    let mut runs = System::ALL.map(Both).to_vec();
    runs.extend([Alone(0), Alone(1)]);
    runs.extend(drifted.iter().map(|&(d, s)| Drift(d, s)));
    // SSDUP+ against SSDUP: throughput lost, SSD space saved (%).
    let paper = [
        (32, (2.84, 17.39)),
        (64, (5.0, 16.07)),
        (128, (5.2, 13.6)),
        (256, (1.4, 19.86)),
    ];
    type R = Sweep<HpioRun, u64, RunResult>;
    let tput = |r: &R, s, kib: &u64| r.at(&Both(s), kib).aggregate_mb_s();
    let vs_ssdup = move |r: &R, s, kib: &u64| pct(tput(r, s, kib) / tput(r, Ssdup, kib) - 1.0);
    let to_ssd = |r: &R, s, kib: &u64| pct(r.at(&Both(s), kib).fast_fraction());
    let region = |kib: &u64| format!("{kib} KiB");
    let traced = [
        ("c-c alone (OrangeFS)", Alone(0)),
        ("c-nc alone (OrangeFS)", Alone(1)),
        ("both, SSDUP", Both(Ssdup)),
        ("both, SSDUP+", Both(SsdupPlus)),
    ];
    let trace_rows: Vec<(u64, &str, HpioRun)> = sizes
        .iter()
        .flat_map(|&kib| traced.map(|(name, run)| (kib, name, run)))
        .collect();
    let drift_rows: Vec<(u64, Duration, System)> = sizes
        .iter()
        .flat_map(|&kib| drifted.iter().map(move |&(d, s)| (kib, d, s)))
        .collect();
    Figure::new(
        "Fig. 13: HPIO, one contiguous (c-c) and one non-contiguous (c-nc) instance, \
         32 processes",
        "OrangeFS-BB and SSDUP buffer 100% and perform alike; SSDUP+ is 2.84/5/5.2/1.4% below \
         SSDUP and saves 17.39/16.07/13.6/19.86% of the SSD space for region sizes 32-256 KiB.",
        parameters(
            rc,
            &[
                (
                    "workload",
                    "two concurrent HPIO instances of ~8 GB each (region spacing 0), \
                     32 processes each"
                        .into(),
                ),
                sluice_parameter(&base_cluster(rc)),
            ],
        ),
        runs,
        sizes.clone(),
        |&run, &kib| {
            let bytes = scaled(8 * GIB, rc.scale, 32 * kib * KIB);
            let instance = |file: u64, contiguous: bool| {
                Hpio::for_total_bytes(FileId(file), 32, kib * KIB, bytes, contiguous)
                    .and_then(|h| h.job(if contiguous { "hpio-c-c" } else { "hpio-c-nc" }))
                    .map_err(|e| SimError(e.to_string()))
            };
            let jobs = vec![instance(1, true)?, instance(2, false)?];
            let mut cluster = base_cluster(rc);
            let (system, jobs) = match run {
                Both(system) => (system, jobs),
                Alone(i) => (System::Baseline, vec![jobs[i].clone()]),
                Drift(overhead, system) => {
                    cluster.client_overhead_mean = overhead;
                    (system, jobs)
                }
            };
            Ok(Task {
                cluster,
                system,
                jobs,
            })
        },
    )
    .headline(move |r| {
        paper
            .iter()
            .map(|(kib, (lost, _))| {
                Finding::new(
                    format!("SSDUP+ vs SSDUP throughput, {kib} KiB regions"),
                    format!("-{lost}%"),
                    vs_ssdup(r, SsdupPlus, kib),
                )
            })
            .collect()
    })
    .table(
        "Aggregate throughput (MB/s) and share of data sent to the SSD",
        sizes.clone(),
        |t| {
            t.col("region", move |_, kib| region(kib))
                .each(
                    System::ALL,
                    |s| s.name().into(),
                    move |r, kib, s| mb_s(tput(r, s, kib)),
                )
                .col("SSDUP+ vs SSDUP", move |r, kib| vs_ssdup(r, SsdupPlus, kib))
                .col("paper", move |_, kib| format!("-{}%", keyed(&paper, kib).0))
                .col("SSDUP to SSD", move |r, kib| to_ssd(r, Ssdup, kib))
                .col("SSDUP+ to SSD", move |r, kib| to_ssd(r, SsdupPlus, kib))
                .col("paper: SSDUP+ saves", move |_, kib| {
                    format!("{}%", keyed(&paper, kib).1)
                })
                .col("sluice vs SSDUP", move |r, kib| {
                    vs_ssdup(r, SluiceCost, kib)
                })
                .col("sluice to SSD", move |r, kib| to_ssd(r, SluiceCost, kib))
        },
    )
    .table("The detector's streams (all I/O nodes)", trace_rows, |t| {
        let t = t
            .col("region", move |_, (kib, _, _): &(u64, &str, HpioRun)| {
                region(kib)
            })
            .col("run", |_, (_, name, _)| name.to_string());
        stream_trace_columns(t, |r, (kib, _, run)| stream_trace(r.at(run, kib)))
    })
    .table(
        "Ablation: processes drifting apart (mean client overhead per request; default 0.2 ms)",
        drift_rows,
        |t| {
            fn at<'r>(r: &'r R, &(kib, d, s): &(u64, Duration, System)) -> &'r RunResult {
                r.at(&HpioRun::Drift(d, s), &kib)
            }
            let t = t
                .col("region", move |_, (kib, _, _)| region(kib))
                .col("client overhead", |_, (_, d, _)| {
                    format!("{} ms", d.as_millis())
                })
                .col("system", |_, (_, _, s)| s.name().into())
                .col("MB/s", |r, row| mb_s(at(r, row).aggregate_mb_s()))
                .col("to SSD", |r, row| pct(at(r, row).fast_fraction()));
            stream_trace_columns(t, |r, row| stream_trace(at(r, row)))
        },
    )
    .bars(
        [
            "hpio",
            "HPIO throughput vs region size",
            "HPIO region size (KiB)",
            "aggregate throughput (MB/s)",
        ],
        sizes.iter().map(region),
        |s| {
            System::ALL.into_iter().fold(s, |s, system| {
                s.bars(system.name(), sizes.clone(), move |r, kib| {
                    tput(r, system, kib)
                })
            })
        },
    )
    .report(FIG13.name, rc)
}
