//! The SSDUP+ figures whose reports trace the detector's streams and ablate
//! what moves them: Fig. 5/6 (random percentage after sorting, processes
//! drifting apart), Fig. 10 (HDD queue depth, each set's throughput, a
//! stream as long as the queue) and Fig. 13 (HPIO, each instance alone,
//! drifting processes). Fig. 10 and 13 are declared (an ablation, a run
//! alone, is one more system); Fig. 5/6 builds its tasks and tables
//! itself, on the shared runner.

use super::*;
use crate::experiments::figure::{keyed, Figure, Paper};
use sluice_devices::link::IncastConfig;

/// Fig. 5/6's server-thread ablation: threads per I/O node, and each
/// one's time per request (heavier than a PVFS2 server's request handling,
/// so that requests can pile up).
const SERVER_THREADS: u32 = 8;
const SERVER_REQUEST_TIME: Duration = Duration::from_millis(1);

/// Fig. 5/6's incast ablation: switch port buffers (KiB), the model's
/// default (128 KiB) between a small per-port share and a large one; the
/// paper does not name its switch, so the report shows all three.
const INCAST_BUFFERS_KIB: [u64; 3] = [32, 128, 512];

pub(super) fn fig5(rc: &RunConfig) -> Result<Report, SimError> {
    // (a) 16 processes per pattern, plus the mixed load of two instances.
    let mut tasks = Vec::new();
    for pattern in IorPattern::ALL {
        tasks.push(Task {
            cluster: base_cluster(rc),
            system: System::Baseline,
            jobs: vec![ior(pattern, 1, 16, 16 * GIB, rc)?],
        });
    }
    tasks.push(Task {
        cluster: base_cluster(rc),
        system: System::Baseline,
        jobs: vec![
            ior(IorPattern::SegmentedContiguous, 1, 16, 8 * GIB, rc)?,
            ior(IorPattern::SegmentedRandom, 2, 16, 8 * GIB, rc)?,
        ],
    });
    // (b) strided with 8..128 processes on the cluster `change` gives,
    // the baseline system.
    let procs = [8u32, 16, 32, 64, 128];
    let mut strided = |change: &dyn Fn(&mut ClusterConfig)| -> Result<(), SimError> {
        for &n in &procs {
            let mut cluster = base_cluster(rc);
            change(&mut cluster);
            tasks.push(Task {
                cluster,
                system: System::Baseline,
                jobs: vec![ior(IorPattern::Strided, 1, n, 16 * GIB, rc)?],
            });
        }
        Ok(())
    };
    strided(&|_| {})?;
    // Ablation: strided with processes drifting apart (a larger mean
    // client overhead per request; nothing else changed).
    for overhead in DRIFT_OVERHEADS {
        strided(&|c| c.client_overhead_mean = overhead)?;
    }
    // Ablation: server threads taking pending requests at random
    // (`server_threads`; nothing else changed).
    strided(&|c| {
        c.server_threads = SERVER_THREADS;
        c.server_request_time = SERVER_REQUEST_TIME;
    })?;
    // Ablation: TCP incast at the I/O nodes' switch ports (`incast`;
    // nothing else changed), one run per port buffer and count.
    for kib in INCAST_BUFFERS_KIB {
        strided(&|c| {
            c.incast = Some(IncastConfig {
                port_buffer_bytes: kib * KIB,
                ..IncastConfig::default()
            });
        })?;
    }
    // Ablation: the I/O nodes' links shared fairly by the pieces crossing
    // them (`fair_share_server_links`; nothing else changed).
    strided(&|c| c.fair_share_server_links = true)?;
    let results = run_all(&tasks, rc)?;
    // Every run of the experiment, ablations and traces included.
    let all_events = events(&results);
    let (results, ablations) = results.split_at(4 + procs.len());
    let (drifted, ablations) = ablations.split_at(DRIFT_OVERHEADS.len() * procs.len());
    let (threaded, ablations) = ablations.split_at(procs.len());
    let (incast, shared) = ablations.split_at(INCAST_BUFFERS_KIB.len() * procs.len());
    let incast_rows: Vec<Vec<String>> = procs
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            let mut row = vec![n.to_string(), pct(mean_percentage(&results[4 + i]))];
            for b in 0..INCAST_BUFFERS_KIB.len() {
                let r = &incast[b * procs.len() + i];
                // Every strided piece is half a 256 KiB request.
                let pieces = r.bytes_written / (128 * KIB);
                row.push(pct(mean_percentage(r)));
                row.push(mb_s(r.jobs[0].throughput_mb_s()));
                row.push(pct(r.incast_timeouts as f64 / pieces.max(1) as f64));
            }
            row
        })
        .collect();
    // The model's default port buffer, on the plots beside the default run.
    let default_buffer = INCAST_BUFFERS_KIB
        .iter()
        .position(|&kib| kib * KIB == IncastConfig::default().port_buffer_bytes)
        .expect("the default port buffer is one of the ablation's");
    let incast_default = &incast[default_buffer * procs.len()..(default_buffer + 1) * procs.len()];
    let incast_points = |value: fn(&RunResult) -> f64| -> Vec<(f64, f64)> {
        procs
            .iter()
            .zip(incast_default)
            .map(|(&n, r)| (f64::from(n), value(r)))
            .collect()
    };
    let incast_label = format!(
        "sim, incast ({} KiB port)",
        INCAST_BUFFERS_KIB[default_buffer]
    );
    let mut incast_headers = vec!["processes".to_string(), "off: random %".to_string()];
    for kib in INCAST_BUFFERS_KIB {
        for what in ["random %", "MB/s", "timeouts / piece"] {
            incast_headers.push(format!("{kib} KiB: {what}"));
        }
    }
    // Per count: the default run's random %, and the switched-on run's
    // random % and throughput.
    let on_off_rows = |on: &[RunResult]| -> Vec<Vec<String>> {
        procs
            .iter()
            .zip(on)
            .zip(results[4..].iter())
            .map(|((&n, r), base)| {
                vec![
                    n.to_string(),
                    pct(mean_percentage(base)),
                    pct(mean_percentage(r)),
                    mb_s(r.jobs[0].throughput_mb_s()),
                ]
            })
            .collect()
    };
    let on_off_headers = ["processes", "off: random %", "on: random %", "on: MB/s"]
        .map(String::from)
        .to_vec();
    let drift_rows: Vec<Vec<String>> = procs
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            let mut row = vec![n.to_string()];
            for d in 0..DRIFT_OVERHEADS.len() {
                let r = &drifted[d * procs.len() + i];
                row.push(pct(mean_percentage(r)));
                row.push(mb_s(r.jobs[0].throughput_mb_s()));
            }
            row
        })
        .collect();
    let names = [
        "segmented-contiguous",
        "strided",
        "segmented-random",
        "mixed",
    ];
    let paper_a = [11.0, 45.0, 100.0, 71.88];
    let mut headline: Vec<Finding> = (0..4)
        .map(|i| {
            Finding::new(
                format!("random percentage, {}, 16 processes", names[i]),
                format!("{}%", paper_a[i]),
                pct(mean_percentage(&results[i])),
            )
        })
        .collect();
    let rows_a = (0..4)
        .map(|i| {
            vec![
                names[i].to_string(),
                pct(mean_percentage(&results[i])),
                format!("{}%", paper_a[i]),
            ]
        })
        .collect();
    let paper_b = [
        (7.0, 208.1),
        (15.0, 211.76),
        (28.0, 175.8),
        (46.0, 159.29),
        (71.0, 132.68),
    ];
    let mut rows_b = Vec::new();
    let mut pct_points = Vec::new();
    let mut tput_points = Vec::new();
    for (i, &n) in procs.iter().enumerate() {
        let r = &results[4 + i];
        let p = mean_percentage(r);
        let t = r.jobs[0].throughput_mb_s();
        pct_points.push((f64::from(n), p * 100.0));
        tput_points.push((f64::from(n), t));
        if n == 8 || n == 128 {
            headline.push(Finding::new(
                format!("strided, {n} processes, random percentage"),
                format!("{}%", paper_b[i].0),
                pct(p),
            ));
            headline.push(Finding::new(
                format!("strided, {n} processes (MB/s)"),
                format!("{}", paper_b[i].1),
                mb_s(t),
            ));
            headline.push(Finding::new(
                format!(
                    "strided, {n} processes, random percentage, with TCP incast ({} KiB port)",
                    INCAST_BUFFERS_KIB[default_buffer]
                ),
                format!("{}%", paper_b[i].0),
                pct(mean_percentage(&incast_default[i])),
            ));
        }
        rows_b.push(vec![
            n.to_string(),
            pct(p),
            format!("{}%", paper_b[i].0),
            mb_s(t),
            format!("{}", paper_b[i].1),
        ]);
    }
    Ok(Report {
        experiment: FIG5.name.into(),
        title: "Fig. 5/6: random percentage of 128-request streams after sorting (server side)".into(),
        headline,
        paper: "At 16 processes: segmented-contiguous 11% (S = 15), strided 45% (S = 57), segmented-random \
                100% (S = 127), mixed 71.88% (S = 91). Strided with 8-128 processes: 7/15/28/46/71% random \
                and 208.1/211.76/175.8/159.29/132.68 MB/s."
            .into(),
        parameters: parameters(rc, &[("streams", "128 requests, I/O node 0, baseline system".into())]),
        tables: vec![
            Table {
                title: "Mean random percentage at 16 processes".into(),
                headers: ["pattern", "sim", "paper"].map(String::from).to_vec(),
                rows: rows_a,
            },
            Table {
                title: "Strided: random percentage and throughput vs processes".into(),
                headers: ["processes", "sim random %", "paper random %", "sim MB/s", "paper MB/s"]
                    .map(String::from)
                    .to_vec(),
                rows: rows_b,
            },
            Table {
                title: "Ablation: strided with processes drifting apart (mean client overhead per request; default 0.2 ms)".into(),
                headers: [
                    "processes",
                    "2 ms: random %",
                    "2 ms: MB/s",
                    "20 ms: random %",
                    "20 ms: MB/s",
                ]
                .map(String::from)
                .to_vec(),
                rows: drift_rows,
            },
            Table {
                title: format!(
                    "Ablation: {SERVER_THREADS} server threads taking pending requests at random, {} ms each \
                     (`server_threads`; default off)",
                    SERVER_REQUEST_TIME.as_secs_f64() * 1e3
                ),
                headers: on_off_headers.clone(),
                rows: on_off_rows(threaded),
            },
            Table {
                title: "Ablation: TCP incast at the I/O nodes' switch ports, by port buffer \
                        (`incast`; default off; 2 × 1448 B smallest window per flow, 200 ms timeout)"
                    .into(),
                headers: incast_headers,
                rows: incast_rows,
            },
            Table {
                title: "Ablation: I/O node links shared equally by the pieces crossing them \
                        (processor sharing, `fair_share_server_links`; default off: FIFO)"
                    .into(),
                headers: on_off_headers,
                rows: on_off_rows(shared),
            },
        ],
        plots: vec![
            log2_line_plot(
                "ssdup-fig6-random",
                "Strided: random percentage vs processes",
                "MPI processes",
                "random percentage (%)",
                vec![
                    Series {
                        name: "sim".into(),
                        points: pct_points,
                    },
                    Series {
                        name: incast_label.clone(),
                        points: incast_points(|r| mean_percentage(r) * 100.0),
                    },
                ],
            ),
            log2_line_plot(
                "ssdup-fig6-throughput",
                "Strided: throughput vs processes",
                "MPI processes",
                "throughput (MB/s)",
                vec![
                    Series {
                        name: "sim".into(),
                        points: tput_points,
                    },
                    Series {
                        name: incast_label,
                        points: incast_points(|r| r.jobs[0].throughput_mb_s()),
                    },
                ],
            ),
        ],
        notes: Vec::new(),
        events: all_events,
        checks: Vec::new(),
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
            .col("paper OrangeFS", |_, &d| {
                paper_or_dash(paper.get(&(Baseline, d)).copied())
            })
            .col("SSDUP+", move |r, d| mb_s(tput(r, SsdupPlus, d)))
            .col("SSDUP+ to SSD", move |r, d| {
                pct(run(r, SsdupPlus, d).fast_fraction())
            })
            .col("SSDUP+ gain", move |r, d| pct(gain(r, SsdupPlus, d)))
            .col("paper gain", |_, &d| {
                format!("{}%", paper_or_dash(paper.get(&(SsdupPlus, d)).copied()))
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
    let runs = System::ALL
        .map(Both)
        .into_iter()
        .chain([Alone(0), Alone(1)]);
    let runs = runs
        .chain(drifted.iter().map(|&(d, s)| Drift(d, s)))
        .collect();
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
