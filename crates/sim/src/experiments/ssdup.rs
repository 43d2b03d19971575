//! The SSDUP+ paper's figures (seed 002): Fig. 2, 5/6, 9–14 and Table 1,
//! on the simulated cluster, with sluice's own `cost` policy beside the
//! paper's systems where they run, and the ablations that trace what does
//! not reproduce (docs/results/ssdup.md).

use super::figure::{pairs, Columns, Figure, Paper, Sweep};
use super::*;

/// `sluice sim run ssdup-fig2`.
pub(super) const FIG2: Experiment = Experiment {
    name: "ssdup-fig2",
    title: "SSDUP+ Fig. 2: baseline throughput vs process count per IOR pattern",
    run: fig2,
};

/// `sluice sim run ssdup-fig5`.
pub(super) const FIG5: Experiment = Experiment {
    name: "ssdup-fig5",
    title: "SSDUP+ Fig. 5/6: random percentage after sorting; strided percentage and throughput vs processes",
    run: fig5,
};

/// `sluice sim run ssdup-fig9`.
pub(super) const FIG9: Experiment = Experiment {
    name: "ssdup-fig9",
    title: "SSDUP+ Fig. 9: throughput and data sent to SSD, 8-512 processes, large SSD",
    run: fig9,
};

/// `sluice sim run ssdup-fig10`.
pub(super) const FIG10: Experiment = Experiment {
    name: "ssdup-fig10",
    title: "SSDUP+ Fig. 10: HDD scheduler queue depth 32 / 128 / 512",
    run: fig10,
};

/// `sluice sim run ssdup-fig11`.
pub(super) const FIG11: Experiment = Experiment {
    name: "ssdup-fig11",
    title: "SSDUP+ Fig. 11: limited SSD, two concurrent IOR instances",
    run: fig11,
};

/// `sluice sim run ssdup-fig12`.
pub(super) const FIG12: Experiment = Experiment {
    name: "ssdup-fig12",
    title: "SSDUP+ Fig. 12: two IOR runs separated by 0-30 s of compute, SSD = 50% of data",
    run: fig12,
};

/// `sluice sim run ssdup-fig13`.
pub(super) const FIG13: Experiment = Experiment {
    name: "ssdup-fig13",
    title: "SSDUP+ Fig. 13: HPIO, contiguous + non-contiguous instances, region size 32-256 KiB",
    run: fig13,
};

/// `sluice sim run ssdup-fig14`.
pub(super) const FIG14: Experiment = Experiment {
    name: "ssdup-fig14",
    title: "SSDUP+ Fig. 14: MPI-Tile-IO, 1-D + 2-D instances, 16-128 processes",
    run: fig14,
};

/// `sluice sim run ssdup-table1`.
pub(super) const TABLE1: Experiment = Experiment {
    name: "ssdup-table1",
    title: "SSDUP+ Table 1: detector + index cost against run time",
    run: table1,
};

pub(super) fn ior(
    pattern: IorPattern,
    file: u64,
    processes: u32,
    bytes: u64,
    rc: &RunConfig,
) -> Result<Job, SimError> {
    let request = 256 * KIB;
    Ior {
        pattern,
        file: FileId(file),
        processes,
        request_bytes: request,
        file_bytes: scaled(bytes, rc.scale, u64::from(processes) * request),
        seed: rc.seed.wrapping_add(file),
    }
    .job(pattern.name())
    .map_err(|e| SimError(e.to_string()))
}

/// The paper's cluster; the page cache scales with the data so that a
/// scaled-down run is not absorbed by it.
pub(super) fn base_cluster(rc: &RunConfig) -> ClusterConfig {
    let default = ClusterConfig::default();
    ClusterConfig {
        seed: rc.seed,
        dirty_limit_bytes: scaled(default.dirty_limit_bytes, rc.scale, 1024 * KIB),
        ..default
    }
}

pub(super) fn paper_or_dash(v: Option<f64>) -> String {
    v.map_or("-".to_string(), |v| format!("{v}"))
}

/// The parameter line that says what the `sluice` system is, with the
/// model its policy takes from `cluster`'s devices.
pub(super) fn sluice_parameter(cluster: &ClusterConfig) -> (&'static str, String) {
    let m = cost_model(&cluster.hdd, &cluster.ssd);
    (
        "sluice",
        format!(
            "not in the paper: policy `cost` (docs/policy.md) with t_seek {:.2} ms ({} ms track-to-track \
             seek + half a revolution at {} rpm), B_fast {:.0} MB/s and t_fast {} us (the SSD model), \
             hysteresis {}, a verdict per {} requests of a file (a switch from its {}th on); two regions, writers wait, SSDUP+'s \
             traffic-aware flush gate",
            m.capacity_seek.as_secs_f64() * 1e3,
            cluster.hdd.seek_track_ms,
            cluster.hdd.rpm,
            m.fast_bytes_per_s / 1e6,
            m.fast_request.as_micros(),
            m.hysteresis,
            m.evidence,
            sluice_policy::cost::EARLY_EVIDENCE,
        ),
    )
}

/// One empty plot series per system, named as in the paper.
pub(super) fn series_per_system(systems: &[System]) -> Vec<Series> {
    systems
        .iter()
        .map(|s| Series {
            name: s.name().to_string(),
            points: Vec::new(),
        })
        .collect()
}

/// Mean random percentage of the streams seen by I/O node 0.
pub(super) fn mean_percentage(r: &RunResult) -> f64 {
    let ours: Vec<f64> = r
        .streams
        .iter()
        .filter(|s| s.server == 0)
        .map(|s| s.percentage)
        .collect();
    if ours.is_empty() {
        return 0.0;
    }
    ours.iter().sum::<f64>() / ours.len() as f64
}

/// The detector's streams of a run, over all I/O nodes: mean random
/// percentage, lowest / highest, mean threshold they were judged against, share of streams
/// above SSDUP's high water mark, share whose requests went to the SSD.
pub(super) fn stream_trace(r: &RunResult) -> [String; 5] {
    let n = r.streams.len().max(1) as f64;
    let mean =
        |f: &dyn Fn(&crate::cluster::StreamPoint) -> f64| r.streams.iter().map(f).sum::<f64>() / n;
    let high_water = match RedirectPolicy::ALL[2] {
        RedirectPolicy::Ssdup { high_water, .. } => high_water,
        _ => unreachable!("ALL[2] is SSDUP's static marks"),
    };
    let lowest = r
        .streams
        .iter()
        .map(|s| s.percentage)
        .fold(f64::INFINITY, f64::min);
    let highest = r.streams.iter().map(|s| s.percentage).fold(0.0, f64::max);
    [
        pct(mean(&|s| s.percentage)),
        if r.streams.is_empty() {
            "-".into()
        } else {
            format!("{} / {}", pct(lowest), pct(highest))
        },
        pct(mean(&|s| s.threshold)),
        pct(mean(&|s| f64::from(u8::from(s.percentage > high_water)))),
        pct(mean(&|s| f64::from(u8::from(s.buffered)))),
    ]
}

/// The results of a sweep of cluster runs over `X`, by system.
pub(super) type Runs<X> = Sweep<System, X, RunResult>;

/// [`stream_trace`]'s five columns; `trace` is the stream trace of the
/// run a row shows.
pub(super) fn stream_trace_columns<'a, K, R: 'a>(
    t: Columns<'a, K, R>,
    trace: impl Fn(&R, &K) -> [String; 5] + Copy + 'a,
) -> Columns<'a, K, R> {
    [
        "mean stream random %",
        "lowest / highest",
        "mean threshold",
        "streams above 0.45",
        "streams buffered",
    ]
    .into_iter()
    .enumerate()
    .fold(t, |t, (i, header)| {
        t.col(header, move |r, k| trace(r, k)[i].clone())
    })
}

/// Fig. 2: the baseline alone, one IOR pattern per series.
pub(super) fn fig2(rc: &RunConfig) -> Result<Report, SimError> {
    use IorPattern::{SegmentedContiguous as Contiguous, SegmentedRandom as Random, Strided};
    let procs = vec![4u32, 8, 16, 32, 64, 128];
    let paper = Paper {
        source: "seed 002 Fig. 2 and its text",
        values: vec![
            ((Contiguous, 16), 218.0),
            ((Contiguous, 32), 218.0),
            ((Contiguous, 128), 150.0),
            ((Strided, 16), 164.0),
            ((Strided, 32), 164.0),
            ((Strided, 128), 107.0),
            ((Random, 4), 95.0),
            ((Random, 8), 95.0),
            ((Random, 16), 95.0),
            ((Random, 32), 95.0),
            ((Random, 64), 95.0),
            ((Random, 128), 95.0),
        ],
    };
    let tput = |r: &RunResult| r.jobs[0].throughput_mb_s();
    Figure::new(
        "Fig. 2: OrangeFS-like baseline throughput vs process count (IOR, 256 KiB requests)",
        "Segmented-contiguous and strided rise then fall as processes grow (218 -> 150 MB/s and \
         164 -> 107 MB/s from 16/32 to 128 processes, -31% and -34%); segmented-random stays \
         near 95 MB/s because the scheduler can hardly merge.",
        parameters(
            rc,
            &[(
                "file",
                format!("{} GiB", scaled(16 * GIB, rc.scale, 1) / GIB),
            )],
        ),
        IorPattern::ALL.to_vec(),
        procs.clone(),
        |&pattern, &n| {
            Ok(Task {
                cluster: base_cluster(rc),
                system: System::Baseline,
                jobs: vec![ior(pattern, 1, n, 16 * GIB, rc)?],
            })
        },
    )
    .paper_findings(
        &paper,
        |(_, n)| matches!(n, 16 | 128),
        |(p, n)| format!("{}, {n} processes (MB/s)", p.name()),
        |v| format!("{v}"),
        |r, (p, n)| mb_s(tput(r.at(p, n))),
    )
    .claim(
        "segmented-contiguous and strided fall from 32 to 128 processes",
        |r| {
            [Contiguous, Strided]
                .iter()
                .all(|p| tput(r.at(p, &128)) < tput(r.at(p, &32)))
        },
    )
    .table(
        "Throughput per pattern and process count",
        pairs(&IorPattern::ALL, &procs),
        |t| {
            t.col("pattern", |_, (p, _)| p.name().to_string())
                .col("processes", |_, (_, n)| n.to_string())
                .col("sim MB/s", |r, (p, n)| mb_s(tput(r.at(p, n))))
                .col("paper MB/s", |_, k| paper_or_dash(paper.get(k).copied()))
                .col("HDD merges", |r, (p, n)| {
                    r.at(p, n).hdd_requests_merged.to_string()
                })
        },
    )
    .plot(
        log2_line_plot(
            "throughput",
            "Baseline throughput vs processes",
            "MPI processes",
            "throughput (MB/s)",
            Vec::new(),
        ),
        |s| {
            s.per_system(
                &IorPattern::ALL,
                |p| p.name().to_string(),
                |_, &n| f64::from(n),
                tput,
            )
        },
    )
    .report(FIG2.name, rc)
}

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
    // (b) strided with 8..128 processes.
    let procs = [8u32, 16, 32, 64, 128];
    for &n in &procs {
        tasks.push(Task {
            cluster: base_cluster(rc),
            system: System::Baseline,
            jobs: vec![ior(IorPattern::Strided, 1, n, 16 * GIB, rc)?],
        });
    }
    // Ablation: strided with processes drifting apart (a larger mean
    // client overhead per request; nothing else changed).
    for overhead in DRIFT_OVERHEADS {
        for &n in &procs {
            let mut cluster = base_cluster(rc);
            cluster.client_overhead_mean = overhead;
            tasks.push(Task {
                cluster,
                system: System::Baseline,
                jobs: vec![ior(IorPattern::Strided, 1, n, 16 * GIB, rc)?],
            });
        }
    }
    let results = run_all(&tasks, rc)?;
    let (results, drifted) = results.split_at(4 + procs.len());
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
        ],
        plots: vec![
            log2_line_plot(
                "ssdup-fig6-random",
                "Strided: random percentage vs processes",
                "MPI processes",
                "random percentage (%)",
                vec![Series {
                    name: "sim".into(),
                    points: pct_points,
                }],
            ),
            log2_line_plot(
                "ssdup-fig6-throughput",
                "Strided: throughput vs processes",
                "MPI processes",
                "throughput (MB/s)",
                vec![Series {
                    name: "sim".into(),
                    points: tput_points,
                }],
            ),
        ],
        notes: Vec::new(),
        events: events(results),
        checks: Vec::new(),
    })
}

/// Fig. 9's workload: the three test sets run one after another on the
/// same processes (16 GB segmented-contiguous, 16 GB strided, 8 GB
/// segmented-random, separate files).
pub(super) fn three_sets(n: u32, rc: &RunConfig) -> Result<Job, SimError> {
    sequence(
        "ior-three-sets",
        vec![
            ior(IorPattern::SegmentedContiguous, 1, n, 16 * GIB, rc)?,
            ior(IorPattern::Strided, 2, n, 16 * GIB, rc)?,
            ior(IorPattern::SegmentedRandom, 3, n, 8 * GIB, rc)?,
        ],
        Duration::ZERO,
    )
}

/// Fig. 9: every system, 8-512 processes, an SSD that holds everything.
pub(super) fn fig9(rc: &RunConfig) -> Result<Report, SimError> {
    use System::{Baseline, BurstBuffer, SluiceCost, Ssdup, SsdupPlus};
    let procs = vec![8u32, 16, 32, 64, 128, 256, 512];
    // SSDUP+'s share of the data sent to the SSD.
    let paper = Paper {
        source: "seed 002 Fig. 9 and its text",
        values: vec![
            (8, 25.0),
            (16, 25.0),
            (32, 25.0),
            (64, 40.0),
            (128, 66.0),
            (256, 84.5),
            (512, 97.0),
        ],
    };
    let tput = |r: &RunResult| r.jobs[0].throughput_mb_s();
    let to_ssd = |r: &RunResult| r.fast_fraction();
    Figure::new(
        "Fig. 9: IOR with 8-512 processes, SSD large enough for all data",
        "SSDUP+ sends about 25% of the data to the SSD at 8-32 processes (only the random set) and \
         40/66/84.5/97% at 64-512, staying within 2.15/4.99/2.53% of OrangeFS-BB's throughput from \
         64 processes; OrangeFS rises to 32 processes then declines; SSDUP buffers far more than \
         SSDUP+ (41.5/33/15.5/3% more SSD space at 64-512).",
        parameters(
            rc,
            &[
                (
                    "workload",
                    "one job per process count: seg-contiguous 16 GB, then strided 16 GB, then \
                     seg-random 8 GB (separate files, a barrier between sets); 120 GiB SSD buffer per \
                     I/O node"
                        .into(),
                ),
                sluice_parameter(&base_cluster(rc)),
            ],
        ),
        System::ALL.to_vec(),
        procs.clone(),
        |&system, &n| {
            Ok(Task {
                cluster: base_cluster(rc),
                system,
                jobs: vec![three_sets(n, rc)?],
            })
        },
    )
    .paper_findings(
        &paper,
        |n| matches!(n, 8 | 64 | 128 | 256 | 512),
        |n| format!("SSDUP+ share of data to the SSD, {n} processes"),
        |v| format!("{v}%"),
        |r, n| pct(to_ssd(r.at(&SsdupPlus, n))),
    )
    .claim("SSDUP sends more to the SSD than SSDUP+ at 64-512 processes", |r| {
        [64, 128, 256, 512]
            .iter()
            .all(|n| to_ssd(r.at(&Ssdup, n)) > to_ssd(r.at(&SsdupPlus, n)))
    })
    .claim("OrangeFS rises to 32 processes, then declines", |r| {
        let at = |n: u32| tput(r.at(&Baseline, &n));
        at(32) > at(8) && at(512) < at(32)
    })
    .table("Throughput (MB/s) and share of data sent to the SSD", procs, |t| {
        let mut t = t.col("processes", |_, n: &u32| n.to_string());
        for system in System::ALL {
            t = t.col(system.name(), move |r, n| mb_s(tput(r.at(&system, n))));
        }
        let vs_bb = |s| move |r: &Runs<u32>, n: &u32| {
            pct(tput(r.at(&s, n)) / tput(r.at(&BurstBuffer, n)) - 1.0)
        };
        t.col("SSDUP to SSD", |r, n| pct(to_ssd(r.at(&Ssdup, n))))
            .col("SSDUP+ to SSD", |r, n| pct(to_ssd(r.at(&SsdupPlus, n))))
            .col("sluice to SSD", |r, n| pct(to_ssd(r.at(&SluiceCost, n))))
            .col("paper SSDUP+ to SSD", |_, n| format!("{}%", paper_or_dash(paper.get(n).copied())))
            .col("SSDUP+ vs BB", vs_bb(SsdupPlus))
            .col("sluice vs BB", vs_bb(SluiceCost))
    })
    .plot(
        log2_line_plot("throughput", "Throughput vs processes", "MPI processes", "throughput (MB/s)", Vec::new()),
        |s| s.per_system(&System::ALL, |s| s.name().into(), |_, &n| f64::from(n), tput),
    )
    .plot(
        log2_line_plot(
            "ssd-share",
            "Share of data sent to the SSD",
            "MPI processes",
            "data sent to the SSD (% of bytes)",
            Vec::new(),
        ),
        |s| s.per_system(&System::ALL, |s| s.name().into(), |_, &n| f64::from(n), |r| to_ssd(r) * 100.0),
    )
    .report(FIG9.name, rc)
}

pub(super) fn fig10(rc: &RunConfig) -> Result<Report, SimError> {
    let depths = [32u32, 128, 512];
    let mut tasks = Vec::new();
    let job = three_sets(32, rc)?;
    for &depth in &depths {
        for system in [System::Baseline, System::SsdupPlus, System::SluiceCost] {
            let mut cluster = base_cluster(rc);
            cluster.hdd.queue_depth = depth;
            tasks.push(Task {
                cluster,
                system,
                jobs: vec![job.clone()],
            });
        }
    }
    // Ablation: SSDUP+ with its stream as long as the queue (the paper
    // "adjusted the length of the request stream" with the queue size,
    // §2.3.1 and §3.2.2).
    for &depth in &depths {
        let mut cluster = base_cluster(rc);
        cluster.hdd.queue_depth = depth;
        cluster.stream_len = depth;
        tasks.push(Task {
            cluster,
            system: System::SsdupPlus,
            jobs: vec![job.clone()],
        });
    }
    let results = run_all(&tasks, rc)?;
    let (results, stream_len_runs) = results.split_at(3 * depths.len());
    // Trace: each of the three sets' own throughput (the barriers between
    // them end the first two).
    let set_mb = [
        ior(IorPattern::SegmentedContiguous, 1, 32, 16 * GIB, rc)?.bytes_written(),
        ior(IorPattern::Strided, 2, 32, 16 * GIB, rc)?.bytes_written(),
        ior(IorPattern::SegmentedRandom, 3, 32, 8 * GIB, rc)?.bytes_written(),
    ]
    .map(|b| b as f64 / 1e6);
    let per_set = |r: &RunResult| -> Vec<String> {
        let job = &r.jobs[0];
        let mut bounds = vec![job.start_ns];
        bounds.extend(job.barriers.iter().map(|m| m.ns));
        bounds.truncate(3);
        bounds.push(job.end_ns);
        (0..3)
            .map(|k| mb_s(set_mb[k] / (bounds[k + 1].saturating_sub(bounds[k]) as f64 / 1e9)))
            .collect()
    };
    let mut trace_rows = Vec::new();
    for (i, &depth) in depths.iter().enumerate() {
        for (name, r) in [
            ("OrangeFS", &results[i * 3]),
            ("SSDUP+", &results[i * 3 + 1]),
            ("SSDUP+, stream = queue depth", &stream_len_runs[i]),
        ] {
            let mut row = vec![depth.to_string(), name.to_string()];
            row.extend(per_set(r));
            row.push(mb_s(r.jobs[0].throughput_mb_s()));
            row.push(pct(r.fast_fraction()));
            trace_rows.push(row);
        }
    }
    let paper = [(59.7, Some(124.0)), (41.5, None), (12.3, Some(179.0))];
    let mut rows = Vec::new();
    let mut base = Vec::new();
    let mut plus = Vec::new();
    let mut ours = Vec::new();
    let mut headline = Vec::new();
    for (i, &depth) in depths.iter().enumerate() {
        let b = results[i * 3].jobs[0].throughput_mb_s();
        let p = results[i * 3 + 1].jobs[0].throughput_mb_s();
        let c = results[i * 3 + 2].jobs[0].throughput_mb_s();
        base.push((i as f64, b));
        plus.push((i as f64, p));
        ours.push((i as f64, c));
        if let Some(paper_b) = paper[i].1 {
            headline.push(Finding::new(
                format!("OrangeFS, queue depth {depth} (MB/s)"),
                format!("{paper_b}"),
                mb_s(b),
            ));
        }
        headline.push(Finding::new(
            format!("SSDUP+ gain over OrangeFS, queue depth {depth}"),
            format!("{}%", paper[i].0),
            pct(p / b - 1.0),
        ));
        rows.push(vec![
            depth.to_string(),
            mb_s(b),
            paper_or_dash(paper[i].1),
            mb_s(p),
            pct(results[i * 3 + 1].fast_fraction()),
            pct(p / b - 1.0),
            format!("{}%", paper[i].0),
            mb_s(c),
            pct(results[i * 3 + 2].fast_fraction()),
            pct(c / b - 1.0),
        ]);
    }
    Ok(Report {
        experiment: FIG10.name.into(),
        title: "Fig. 10: HDD scheduler queue depth, 32 processes".into(),
        headline,
        paper: "SSDUP+ improves on OrangeFS by 59.7%, 41.5% and 12.3% with queue depths 32, 128 and 512; \
                OrangeFS reaches 124 MB/s at depth 32 and 179 MB/s at 512 (per I/O node in the paper's \
                figure)."
            .into(),
        parameters: parameters(
            rc,
            &[
                ("workload", "Fig. 9's three sets, 32 processes".into()),
                sluice_parameter(&base_cluster(rc)),
            ],
        ),
        tables: vec![Table {
            title: "Aggregate throughput (MB/s)".into(),
            headers: [
                "queue depth",
                "OrangeFS",
                "paper OrangeFS",
                "SSDUP+",
                "SSDUP+ to SSD",
                "SSDUP+ gain",
                "paper gain",
                "sluice",
                "sluice to SSD",
                "sluice gain",
            ]
            .map(String::from)
            .to_vec(),
            rows,
        }, Table {
            title: "Trace: each set's throughput (MB/s), and SSDUP+ with a stream as long as the queue".into(),
            headers: [
                "depth",
                "run",
                "segmented-contiguous",
                "strided",
                "segmented-random",
                "all",
                "to SSD",
            ]
            .map(String::from)
            .to_vec(),
            rows: trace_rows,
        }],
        plots: vec![bar_plot(
            &format!("{}-queue-depth", FIG10.name),
            "Throughput vs HDD queue depth",
            "HDD scheduler queue depth (requests)",
            "throughput (MB/s)",
            depths.iter().map(|d| d.to_string()).collect(),
            vec![
                Series {
                    name: "OrangeFS".into(),
                    points: base,
                },
                Series {
                    name: "SSDUP+".into(),
                    points: plus,
                },
                Series {
                    name: System::SluiceCost.name().into(),
                    points: ours,
                },
            ],
        )],
        notes: Vec::new(),
        events: events(results),
        checks: Vec::new(),
    })
}

pub(super) fn fig11(rc: &RunConfig) -> Result<Report, SimError> {
    let systems = [
        System::BurstBuffer,
        System::Ssdup,
        System::SsdupPlus,
        System::SluiceCost,
    ];
    let workloads = |rc: &RunConfig| -> Result<[Vec<Job>; 2], SimError> {
        Ok([
            vec![
                ior(IorPattern::SegmentedContiguous, 1, 16, 8 * GIB, rc)?,
                ior(IorPattern::SegmentedRandom, 2, 16, 8 * GIB, rc)?,
            ],
            vec![
                ior(IorPattern::SegmentedRandom, 1, 16, 8 * GIB, rc)?,
                ior(IorPattern::SegmentedRandom, 2, 16, 8 * GIB, rc)?,
            ],
        ])
    };
    let mut tasks = Vec::new();
    for jobs in workloads(rc)? {
        for system in systems {
            let mut cluster = base_cluster(rc);
            // 8 GB of SSD in all: 4 GiB per I/O node, two 2 GiB regions.
            cluster.fast_bytes_per_server = scaled(4 * GIB, rc.scale, 1024 * KIB);
            tasks.push(Task {
                cluster,
                system,
                jobs: jobs.clone(),
            });
        }
    }
    // Ablation of workload 1: each of SSDUP and SSDUP+ with the other's
    // routing, so routing and flushing are told apart.
    let ablations = [
        (
            "SSDUP+ flushing, SSDUP's static marks",
            System::SsdupPlus,
            RedirectPolicy::ALL[2],
        ),
        (
            "SSDUP flushing, SSDUP+'s adaptive threshold",
            System::Ssdup,
            RedirectPolicy::SsdupPlus,
        ),
    ];
    let workload1 = workloads(rc)?[0].clone();
    for &(_, system, policy) in &ablations {
        let mut cluster = base_cluster(rc);
        cluster.fast_bytes_per_server = scaled(4 * GIB, rc.scale, 1024 * KIB);
        cluster.policy_override = Some(policy);
        tasks.push(Task {
            cluster,
            system,
            jobs: workload1.clone(),
        });
    }
    let results = run_all(&tasks, rc)?;
    let (results, ablated) = results.split_at(2 * systems.len());
    let ablation_row = |name: &str, r: &RunResult| {
        let mut row = vec![
            name.to_string(),
            mb_s(r.jobs[0].throughput_mb_s()),
            mb_s(r.jobs[1].throughput_mb_s()),
            pct(r.fast_fraction()),
        ];
        row.extend(stream_trace(r));
        row
    };
    let ablation_rows = vec![
        ablation_row("SSDUP (static marks, flush at once)", &results[1]),
        ablation_row("SSDUP+ (adaptive threshold, flush gate)", &results[2]),
        ablation_row(ablations[0].0, &ablated[0]),
        ablation_row(ablations[1].0, &ablated[1]),
    ];
    // sluice is not in the paper.
    let paper = [
        [
            Some((73.04, 72.71)),
            Some((67.85, 66.15)),
            Some((90.21, 90.49)),
            None,
        ],
        [
            Some((71.16, 71.54)),
            Some((97.32, 98.38)),
            Some((97.32, 98.38)),
            None,
        ],
    ];
    let mut rows = Vec::new();
    let mut series = series_per_system(&systems);
    let mut headline = Vec::new();
    for w in 0..2 {
        for (k, system) in systems.iter().enumerate() {
            let r = &results[w * systems.len() + k];
            let (a, b) = (r.jobs[0].throughput_mb_s(), r.jobs[1].throughput_mb_s());
            series[k].points.push(((w * 2) as f64, a));
            series[k].points.push(((w * 2 + 1) as f64, b));
            if let Some((paper_a, paper_b)) = paper[w][k] {
                headline.push(Finding::new(
                    format!(
                        "workload {}, {} instance 1 / 2 (MB/s)",
                        w + 1,
                        system.name()
                    ),
                    format!("{paper_a} / {paper_b}"),
                    format!("{} / {}", mb_s(a), mb_s(b)),
                ));
            }
            rows.push(vec![
                format!("workload {}", w + 1),
                system.name().to_string(),
                mb_s(a),
                mb_s(b),
                paper[w][k].map_or("-".into(), |(a, b)| format!("{a} / {b}")),
                pct(r.fast_fraction()),
                r.regions_flushed.to_string(),
                pct(r.write_through_bytes as f64 / r.bytes_written as f64),
            ]);
        }
    }
    Ok(Report {
        experiment: FIG11.name.into(),
        title: "Fig. 11: limited SSD (8 GB in all), two concurrent IOR instances of 8 GB".into(),
        headline,
        paper: "Workload 1 (segmented-contiguous + random): OrangeFS-BB 73.04 / 72.71 MB/s, SSDUP 67.85 / \
                66.15, SSDUP+ 90.21 / 90.49. Workload 2 (both random): SSDUP+ 97.32 / 98.38, OrangeFS-BB \
                71.16 / 71.54; SSDUP performs as SSDUP+ there."
            .into(),
        parameters: parameters(
            rc,
            &[(
                "SSD",
                "8 GB in all read as 4 GiB per I/O node (OrangeFS-BB: one region; SSDUP/SSDUP+: two 2 GiB \
                 regions); 16 processes per instance; paper for SSDUP workload 2 = SSDUP+'s"
                    .into(),
            ), sluice_parameter(&base_cluster(rc))],
        ),
        tables: vec![Table {
            title: "Per-instance throughput (MB/s)".into(),
            headers: [
                "workload",
                "system",
                "instance 1",
                "instance 2",
                "paper",
                "to SSD",
                "regions flushed",
                "written through",
            ]
            .map(String::from)
            .to_vec(),
            rows,
        }, Table {
            title: "Workload 1 ablation: routing against flushing, with the detector's streams".into(),
            headers: [
                "variant",
                "instance 1",
                "instance 2",
                "to SSD",
                "mean stream random %",
                "lowest / highest",
                "mean threshold",
                "streams above 0.45",
                "streams buffered",
            ]
            .map(String::from)
            .to_vec(),
            rows: ablation_rows,
        }],
        plots: vec![bar_plot(
            &format!("{}-limited-ssd", FIG11.name),
            "Limited SSD: per-instance throughput",
            "workload (W) and IOR instance",
            "throughput (MB/s)",
            ["W1 inst 1", "W1 inst 2", "W2 inst 1", "W2 inst 2"].map(String::from).to_vec(),
            series,
        )],
        notes: Vec::new(),
        events: events(results),
        checks: Vec::new(),
    })
}

pub(super) fn fig12(rc: &RunConfig) -> Result<Report, SimError> {
    let gaps = [0u64, 10, 20, 30];
    let systems = [System::BurstBuffer, System::SsdupPlus, System::SluiceCost];
    let mut tasks = Vec::new();
    // The gap matters relative to the time a flush of the data takes, so it
    // scales with the data like every size.
    let gap_of = |seconds: u64| Duration::from_secs_f64(seconds as f64 * rc.scale);
    for &gap in &gaps {
        let job = sequence(
            "two-ior-runs",
            vec![
                ior(IorPattern::SegmentedRandom, 1, 16, 8 * GIB, rc)?,
                ior(IorPattern::SegmentedRandom, 2, 16, 8 * GIB, rc)?,
            ],
            gap_of(gap),
        )?;
        for system in systems {
            let mut cluster = base_cluster(rc);
            // SSD = 50% of the 16 GB written: 4 GiB per I/O node (SSDUP+:
            // two 2 GiB regions; OrangeFS-BB: one 4 GiB region).
            cluster.fast_bytes_per_server = scaled(4 * GIB, rc.scale, 1024 * KIB);
            tasks.push(Task {
                cluster,
                system,
                jobs: vec![job.clone()],
            });
        }
    }
    // Ablation: SSDUP+ with one 4 GiB region instead of two of 2 GiB,
    // everything else its own.
    for &gap in &gaps {
        let job = sequence(
            "two-ior-runs",
            vec![
                ior(IorPattern::SegmentedRandom, 1, 16, 8 * GIB, rc)?,
                ior(IorPattern::SegmentedRandom, 2, 16, 8 * GIB, rc)?,
            ],
            gap_of(gap),
        )?;
        let mut cluster = base_cluster(rc);
        cluster.fast_bytes_per_server = scaled(4 * GIB, rc.scale, 1024 * KIB);
        cluster.regions = 1;
        tasks.push(Task {
            cluster,
            system: System::SsdupPlus,
            jobs: vec![job],
        });
    }
    // Trace: the first run alone, to see what it leaves in the SSD.
    let run1_systems = [System::BurstBuffer, System::SsdupPlus];
    for system in run1_systems {
        let mut cluster = base_cluster(rc);
        cluster.fast_bytes_per_server = scaled(4 * GIB, rc.scale, 1024 * KIB);
        tasks.push(Task {
            cluster,
            system,
            jobs: vec![ior(IorPattern::SegmentedRandom, 1, 16, 8 * GIB, rc)?],
        });
    }
    let results = run_all(&tasks, rc)?;
    let (results, rest) = results.split_at(gaps.len() * systems.len());
    let (one_region, run1_alone) = rest.split_at(gaps.len());
    let region_mib = |system: System| {
        let cluster = base_cluster(rc);
        let per_server = scaled(4 * GIB, rc.scale, 1024 * KIB);
        let regions = if system == System::BurstBuffer {
            1
        } else {
            cluster.regions
        };
        (per_server / u64::from(regions)) as f64 / (1024.0 * 1024.0)
    };
    let run1_rows: Vec<Vec<String>> = run1_systems
        .iter()
        .zip(run1_alone)
        .map(|(system, r)| {
            let servers = f64::from(base_cluster(rc).servers);
            let mib = |b: u64| format!("{:.1}", b as f64 / servers / (1024.0 * 1024.0));
            vec![
                system.name().to_string(),
                format!("{:.1}", region_mib(*system)),
                mib(r.fast_bytes),
                mib(r.capacity_bytes),
                mib(r.flushed_bytes),
                mib(r.buffered_at_end_bytes),
            ]
        })
        .collect();
    // Trace: each run's own throughput (the barrier release ends run 1;
    // run 2 starts a gap later), and what the buffer did.
    let mut trace_rows = Vec::new();
    for (i, &gap) in gaps.iter().enumerate() {
        let runs = systems
            .iter()
            .enumerate()
            .map(|(k, system)| (system.name(), &results[i * systems.len() + k]))
            .chain([("SSDUP+, one 4 GiB region", &one_region[i])]);
        for (name, r) in runs {
            let job = &r.jobs[0];
            let half_mb = r.bytes_written as f64 / 2.0 / 1e6;
            let run1_end = job.barriers.first().map_or(job.end_ns, |m| m.ns);
            let run2_start = run1_end + gap_of(gap).as_nanos() as u64;
            let seconds = |a: u64, b: u64| b.saturating_sub(a) as f64 / 1e9;
            trace_rows.push(vec![
                format!("{gap} s"),
                name.to_string(),
                mb_s(half_mb / seconds(job.start_ns, run1_end)),
                mb_s(half_mb / seconds(run2_start, job.end_ns)),
                pct(r.fast_fraction()),
                pct(r.write_through_bytes as f64 / r.bytes_written as f64),
                r.regions_flushed.to_string(),
            ]);
        }
    }
    let paper_gain = [Some(11.91), Some(10.65), Some(9.92), None];
    let mut rows = Vec::new();
    let mut series = series_per_system(&systems);
    let mut headline = Vec::new();
    for (i, &gap) in gaps.iter().enumerate() {
        let io = |r: &RunResult| {
            let seconds = r.jobs[0].seconds() - gap_of(gap).as_secs_f64();
            r.bytes_written as f64 / 1e6 / seconds
        };
        let bb = io(&results[i * 3]);
        let plus = io(&results[i * 3 + 1]);
        let ours = io(&results[i * 3 + 2]);
        series[0].points.push((i as f64, bb));
        series[1].points.push((i as f64, plus));
        series[2].points.push((i as f64, ours));
        if let Some(paper) = paper_gain[i] {
            headline.push(Finding::new(
                format!("SSDUP+ gain over OrangeFS-BB, {gap} s compute time"),
                format!("{paper}%"),
                pct(plus / bb - 1.0),
            ));
        }
        rows.push(vec![
            format!("{gap} s"),
            mb_s(bb),
            mb_s(plus),
            pct(plus / bb - 1.0),
            paper_gain[i].map_or("-".into(), |g| format!("{g}%")),
            mb_s(ours),
            pct(ours / bb - 1.0),
        ]);
    }
    Ok(Report {
        experiment: FIG12.name.into(),
        title: "Fig. 12: two 8 GB segmented-random runs separated by compute time".into(),
        headline,
        paper: "SSDUP+ outperforms OrangeFS-BB by 11.91%, 10.65% and 9.92% as the compute time grows; \
                OrangeFS-BB improves with longer compute time because its flush overlaps it."
            .into(),
        parameters: parameters(
            rc,
            &[(
                "throughput",
                "bytes / (elapsed - compute time); 16 processes; 4 GiB SSD per I/O node; the compute \
                 times (0/10/20/30 s at scale 1) scale with the data"
                    .into(),
            ), sluice_parameter(&base_cluster(rc))],
        ),
        tables: vec![Table {
            title: "I/O throughput (MB/s)".into(),
            headers: [
                "compute time",
                "OrangeFS-BB",
                "SSDUP+",
                "SSDUP+ gain",
                "paper gain",
                "sluice",
                "sluice gain",
            ]
            .map(String::from)
            .to_vec(),
            rows,
        }, Table {
            title: "Trace: each run's throughput (MB/s) and the buffer".into(),
            headers: [
                "compute time",
                "system",
                "run 1",
                "run 2",
                "to SSD",
                "written through",
                "regions flushed",
            ]
            .map(String::from)
            .to_vec(),
            rows: trace_rows,
        }, Table {
            title: "Trace: the first run alone, per I/O node (MiB)".into(),
            headers: [
                "system",
                "region",
                "to SSD",
                "to HDD",
                "flushed",
                "buffered at the end",
            ]
            .map(String::from)
            .to_vec(),
            rows: run1_rows,
        }],
        plots: vec![bar_plot(
            &format!("{}-compute-time", FIG12.name),
            "Throughput vs compute time between runs",
            "compute time between the two runs (s, at scale 1)",
            "I/O throughput (MB/s)",
            gaps.iter().map(|g| format!("{g} s")).collect(),
            series,
        )],
        notes: Vec::new(),
        events: events(results),
        checks: Vec::new(),
    })
}

/// Mean client overheads of the drift ablations (Fig. 5/6, Fig. 13): 10×
/// and 100× the default 0.2 ms, to see which way the streams move, not to
/// match a number.
pub(super) const DRIFT_OVERHEADS: [Duration; 2] =
    [Duration::from_millis(2), Duration::from_millis(20)];

pub(super) fn fig13(rc: &RunConfig) -> Result<Report, SimError> {
    let sizes = [32u64, 64, 128, 256];
    let mut tasks = Vec::new();
    for &kib in &sizes {
        let bytes = scaled(8 * GIB, rc.scale, 32 * kib * KIB);
        let instance = |file: u64, contiguous: bool| {
            Hpio::for_total_bytes(FileId(file), 32, kib * KIB, bytes, contiguous)
                .and_then(|h| h.job(if contiguous { "hpio-c-c" } else { "hpio-c-nc" }))
                .map_err(|e| SimError(e.to_string()))
        };
        let jobs = vec![instance(1, true)?, instance(2, false)?];
        for system in System::ALL {
            tasks.push(Task {
                cluster: base_cluster(rc),
                system,
                jobs: jobs.clone(),
            });
        }
        // Trace: each instance alone on the baseline, for the random
        // percentage its own streams have.
        for job in &jobs {
            tasks.push(Task {
                cluster: base_cluster(rc),
                system: System::Baseline,
                jobs: vec![job.clone()],
            });
        }
        // Ablation: processes that drift apart (a larger mean client
        // overhead between a process's requests), nothing else changed.
        for overhead in DRIFT_OVERHEADS {
            for system in [System::Ssdup, System::SsdupPlus] {
                let mut cluster = base_cluster(rc);
                cluster.client_overhead_mean = overhead;
                tasks.push(Task {
                    cluster,
                    system,
                    jobs: jobs.clone(),
                });
            }
        }
    }
    let results = run_all(&tasks, rc)?;
    let paper = [(2.84, 17.39), (5.0, 16.07), (5.2, 13.6), (1.4, 19.86)];
    let systems = System::ALL.len();
    let per_size = systems + 2 + 2 * DRIFT_OVERHEADS.len();
    let mut trace_rows = Vec::new();
    let mut drift_rows = Vec::new();
    for (i, &kib) in sizes.iter().enumerate() {
        let rs = &results[i * per_size..(i + 1) * per_size];
        for (name, r) in [
            ("c-c alone (OrangeFS)", &rs[systems]),
            ("c-nc alone (OrangeFS)", &rs[systems + 1]),
            ("both, SSDUP", &rs[2]),
            ("both, SSDUP+", &rs[3]),
        ] {
            let mut row = vec![format!("{kib} KiB"), name.to_string()];
            row.extend(stream_trace(r));
            trace_rows.push(row);
        }
        for (d, overhead) in DRIFT_OVERHEADS.iter().enumerate() {
            let (ssdup, plus) = (&rs[systems + 2 + 2 * d], &rs[systems + 3 + 2 * d]);
            for (name, r) in [("SSDUP", ssdup), ("SSDUP+", plus)] {
                let mut row = vec![
                    format!("{kib} KiB"),
                    format!("{} ms", overhead.as_millis()),
                    name.to_string(),
                    mb_s(r.aggregate_mb_s()),
                    pct(r.fast_fraction()),
                ];
                row.extend(stream_trace(r));
                drift_rows.push(row);
            }
        }
    }
    let results: Vec<RunResult> = results
        .chunks(per_size)
        .flat_map(|c| c[..systems].iter().cloned())
        .collect();
    let mut rows = Vec::new();
    let mut tput = series_per_system(&System::ALL);
    let mut headline = Vec::new();
    for (i, &kib) in sizes.iter().enumerate() {
        let rs = &results[i * systems..(i + 1) * systems];
        let mut row = vec![format!("{kib} KiB")];
        for (k, r) in rs.iter().enumerate() {
            let t = r.aggregate_mb_s();
            tput[k].points.push((i as f64, t));
            row.push(mb_s(t));
        }
        let (ssdup, plus) = (&rs[2], &rs[3]);
        headline.push(Finding::new(
            format!("SSDUP+ vs SSDUP throughput, {kib} KiB regions"),
            format!("-{}%", paper[i].0),
            pct(plus.aggregate_mb_s() / ssdup.aggregate_mb_s() - 1.0),
        ));
        row.push(pct(plus.aggregate_mb_s() / ssdup.aggregate_mb_s() - 1.0));
        row.push(format!("-{}%", paper[i].0));
        row.push(pct(ssdup.fast_fraction()));
        row.push(pct(plus.fast_fraction()));
        row.push(format!("{}%", paper[i].1));
        row.push(pct(rs[4].aggregate_mb_s() / ssdup.aggregate_mb_s() - 1.0));
        row.push(pct(rs[4].fast_fraction()));
        rows.push(row);
    }
    Ok(Report {
        experiment: FIG13.name.into(),
        title: "Fig. 13: HPIO, one contiguous (c-c) and one non-contiguous (c-nc) instance, 32 processes".into(),
        headline,
        paper: "OrangeFS-BB and SSDUP buffer 100% and perform alike; SSDUP+ is 2.84/5/5.2/1.4% below SSDUP \
                and saves 17.39/16.07/13.6/19.86% of the SSD space for region sizes 32-256 KiB."
            .into(),
        parameters: parameters(
            rc,
            &[(
                "workload",
                "two concurrent HPIO instances of ~8 GB each (region spacing 0), 32 processes each".into(),
            ), sluice_parameter(&base_cluster(rc))],
        ),
        tables: vec![Table {
            title: "Aggregate throughput (MB/s) and share of data sent to the SSD".into(),
            headers: [
                "region",
                "OrangeFS",
                "OrangeFS-BB",
                "SSDUP",
                "SSDUP+",
                "sluice",
                "SSDUP+ vs SSDUP",
                "paper",
                "SSDUP to SSD",
                "SSDUP+ to SSD",
                "paper: SSDUP+ saves",
                "sluice vs SSDUP",
                "sluice to SSD",
            ]
            .map(String::from)
            .to_vec(),
            rows,
        }, Table {
            title: "The detector's streams (all I/O nodes)".into(),
            headers: [
                "region",
                "run",
                "mean stream random %",
                "lowest / highest",
                "mean threshold",
                "streams above 0.45",
                "streams buffered",
            ]
            .map(String::from)
            .to_vec(),
            rows: trace_rows,
        }, Table {
            title: "Ablation: processes drifting apart (mean client overhead per request; default 0.2 ms)".into(),
            headers: [
                "region",
                "client overhead",
                "system",
                "MB/s",
                "to SSD",
                "mean stream random %",
                "lowest / highest",
                "mean threshold",
                "streams above 0.45",
                "streams buffered",
            ]
            .map(String::from)
            .to_vec(),
            rows: drift_rows,
        }],
        plots: vec![bar_plot(
            &format!("{}-hpio", FIG13.name),
            "HPIO throughput vs region size",
            "HPIO region size (KiB)",
            "aggregate throughput (MB/s)",
            sizes.iter().map(|s| format!("{s} KiB")).collect(),
            tput,
        )],
        notes: Vec::new(),
        events: events(&results),
        checks: Vec::new(),
    })
}

/// Fig. 14: MPI-Tile-IO, a 1-D and a 2-D instance, 16-128 processes.
pub(super) fn fig14(rc: &RunConfig) -> Result<Report, SimError> {
    use System::{Baseline, Ssdup, SsdupPlus};
    let procs = vec![16u32, 32, 64, 128];
    // Share of the data sent to the SSD.
    let paper = Paper {
        source: "seed 002 Fig. 14 and its text",
        values: vec![
            ((SsdupPlus, 16), 0.0),
            ((Ssdup, 16), 0.0),
            ((SsdupPlus, 32), 46.87),
            ((Ssdup, 32), 95.0),
            ((Ssdup, 64), 100.0),
            ((Ssdup, 128), 100.0),
        ],
    };
    let tput = |r: &RunResult| r.aggregate_mb_s();
    let to_ssd = |r: &RunResult| r.fast_fraction();
    let paper_pct = |system: System, n: u32| {
        paper
            .get(&(system, n))
            .map_or("-".into(), |v| format!("{v}%"))
    };
    let trace_rows: Vec<(u32, System)> = procs
        .iter()
        .flat_map(|&n| [(n, Ssdup), (n, SsdupPlus)])
        .collect();
    Figure::new(
        "Fig. 14: MPI-Tile-IO, a 1-D and a 2-D instance of 16 GB each, 4 KiB elements",
        "OrangeFS falls as processes grow; OrangeFS-BB keeps its peak; at 16 processes SSDUP and \
         SSDUP+ buffer nothing; at 32, SSDUP+ sends 46.87% to the SSD against SSDUP's 95% at the same \
         throughput; beyond, SSDUP buffers everything and SSDUP+ saves 27.5% / 15%.",
        parameters(
            rc,
            &[
                ("tiles", "square-ish tiles sized to reach the data size; one request per tile row".into()),
                sluice_parameter(&base_cluster(rc)),
            ],
        ),
        System::ALL.to_vec(),
        procs.clone(),
        |&system, &n| {
            let bytes = scaled(16 * GIB, rc.scale, u64::from(n) * 4 * KIB);
            let instance = |file: u64, decomposition: TileDecomposition, name: &str| {
                MpiTileIo::for_total_bytes(FileId(file), n, decomposition, 4 * KIB, bytes)
                    .and_then(|t| t.job(name))
                    .map_err(|e| SimError(e.to_string()))
            };
            Ok(Task {
                cluster: base_cluster(rc),
                system,
                jobs: vec![
                    instance(1, TileDecomposition::OneD, "tile-1d")?,
                    instance(2, TileDecomposition::TwoD, "tile-2d")?,
                ],
            })
        },
    )
    .paper_findings(
        &paper,
        |_| true,
        |(system, n)| format!("{} share of data to the SSD, {n} processes", system.name()),
        |v| format!("{v}%"),
        |r, (system, n)| pct(to_ssd(r.at(system, n))),
    )
    .claim("OrangeFS falls as processes grow (128 below 16)", |r| {
        tput(r.at(&Baseline, &128)) < tput(r.at(&Baseline, &16))
    })
    .claim("at 32 processes SSDUP+ sends less to the SSD than SSDUP", |r| {
        to_ssd(r.at(&SsdupPlus, &32)) < to_ssd(r.at(&Ssdup, &32))
    })
    .table("Aggregate throughput (MB/s) and share of data sent to the SSD", procs, |t| {
        let mut t = t.col("processes", |_, n: &u32| n.to_string());
        for system in System::ALL {
            t = t.col(system.name(), move |r, n| mb_s(tput(r.at(&system, n))));
        }
        t.col("SSDUP+ to SSD", |r, n| pct(to_ssd(r.at(&SsdupPlus, n))))
            .col("paper SSDUP+", |_, &n| paper_pct(SsdupPlus, n))
            .col("SSDUP to SSD", |r, n| pct(to_ssd(r.at(&Ssdup, n))))
            .col("paper SSDUP", |_, &n| paper_pct(Ssdup, n))
            .col("sluice to SSD", |r, n| pct(to_ssd(r.at(&System::SluiceCost, n))))
    })
    .table("The detector's streams (all I/O nodes)", trace_rows, |t| {
        stream_trace_columns(t.col("processes", |_, (n, _)| n.to_string()).col("system", |_, (_, s)| s.name().into()), |r, (n, s)| stream_trace(r.at(s, n)))
    })
    .plot(
        log2_line_plot(
            "tile-io",
            "MPI-Tile-IO throughput vs processes",
            "MPI processes",
            "aggregate throughput (MB/s)",
            Vec::new(),
        ),
        |s| s.per_system(&System::ALL, |s| s.name().into(), |_, &n| f64::from(n), tput),
    )
    .report(FIG14.name, rc)
}

/// Table 1: run time of 2 GB in 32-512 KiB requests, everything grouped
/// and indexed; the paper's grouping and index cost beside it.
pub(super) fn table1(rc: &RunConfig) -> Result<Report, SimError> {
    let sizes = vec![32u64, 64, 128, 256, 512];
    // One data size for every row: a multiple of the largest request unit.
    let bytes = scaled(2 * GIB, rc.scale, 16 * 512 * KIB);
    // (run time s, grouping ms, AVL index ms) per request size.
    let paper = Paper {
        source: "seed 002 Table 1",
        values: vec![
            (32, (15.5, 29.1, 93.4)),
            (64, (12.5, 12.5, 44.2)),
            (128, (11.8, 15.9, 41.8)),
            (256, (11.54, 9.0, 21.2)),
            (512, (11.9, 6.1, 9.5)),
        ],
    };
    // INVARIANT: every row's request size has a paper value.
    let paper_of = |kib: &u64| *paper.get(kib).expect("Table 1 has every request size");
    let run_time = |r: &RunResult| format!("{:.2} s", r.jobs[0].seconds());
    Figure::new(
        "Table 1: grouping + index cost against run time (2 GB segmented-random, all to SSD)",
        "Group + AVL cost is 0.79% of the run time at 32 KB requests and 0.13% at 512 KB; about 1.9 us \
         per request at 32 KB.",
        parameters(rc, &[("system", "OrangeFS-BB (every request grouped and indexed)".into())]),
        vec![System::BurstBuffer],
        sizes.clone(),
        |&system, &kib| {
            let job = Ior {
                pattern: IorPattern::SegmentedRandom,
                file: FileId(1),
                processes: 16,
                request_bytes: kib * KIB,
                file_bytes: bytes,
                seed: rc.seed,
            }
            .job("ior-seg-random")
            .map_err(|e| SimError(e.to_string()))?;
            let mut cluster = base_cluster(rc);
            cluster.fast_bytes_per_server = 2 * GIB;
            Ok(Task {
                cluster,
                system,
                jobs: vec![job],
            })
        },
    )
    .paper_findings(
        &paper,
        |kib| matches!(kib, 32 | 512),
        |kib| format!("run time of 2 GB in {kib} KiB requests"),
        |(total, _, _)| format!("{total} s"),
        |r, kib| run_time(r.at(&System::BurstBuffer, kib)),
    )
    .claim("the run time falls from 32 KiB to 512 KiB requests", |r| {
        let seconds = |kib: u64| r.at(&System::BurstBuffer, &kib).jobs[0].seconds();
        seconds(512) < seconds(32)
    })
    .table("Simulated run time and the paper's cost per request", sizes, |t| {
        t.col("request", |_, kib: &u64| format!("{kib} KiB"))
            .col("requests", |r, kib| {
                (r.at(&System::BurstBuffer, kib).bytes_written / (kib * KIB)).to_string()
            })
            .col("sim run time", |r, kib| run_time(r.at(&System::BurstBuffer, kib)))
            .col("paper run time", |_, kib| format!("{} s", paper_of(kib).0))
            .col("paper ns/request", |_, kib| {
                let (_, group, avl) = paper_of(kib);
                format!("{:.0}", (group + avl) * 1e6 / (2.0 * GIB as f64 / (kib * KIB) as f64))
            })
            .col("paper overhead", |_, kib| {
                let (total, group, avl) = paper_of(kib);
                format!("{:.2}%", (group + avl) / 1e3 / total * 100.0)
            })
    })
    .note(
        "sluice's own cost per request is measured, not simulated: `sluice sim run ssdup-table1` prints it \
         beside this table (wall-clock, so it is kept out of this file to keep the report reproducible), \
         and `cargo bench -p sluice-policy --bench hot_path` measures it with criterion.",
    )
    .report(TABLE1.name, rc)
}

/// Wall-clock cost per request of the policy hot path (stream grouping,
/// random factor and extent-index insert) for a 2 GiB segmented-random IOR
/// trace of `request_bytes` requests: the median of `runs` passes, each on a
/// fresh detector and index. A measurement of this machine, not a
/// simulation: callers print it and keep it out of reproducible reports.
pub fn policy_cost_ns_per_request(request_bytes: u64, runs: usize) -> f64 {
    use sluice_policy::detector::{DetectorConfig, StreamDetector};
    use sluice_policy::extent_index::{Extent, ExtentIndex};
    use sluice_policy::{LogLocation, RegionId};

    let Ok(per_process) = (Ior {
        pattern: IorPattern::SegmentedRandom,
        file: FileId(1),
        processes: 16,
        request_bytes,
        file_bytes: 2 * GIB,
        seed: 2020,
    })
    .per_process() else {
        return f64::NAN;
    };
    let trace = crate::workload::arrive(per_process, crate::workload::Arrival::Lockstep);
    let mut samples: Vec<f64> = (0..runs.max(1))
        .map(|_| {
            // INVARIANT: the default detector config is valid.
            let mut detector =
                StreamDetector::new(DetectorConfig::default()).expect("default config");
            let mut index = ExtentIndex::new();
            let start = std::time::Instant::now();
            for (seq, r) in trace.iter().enumerate() {
                std::hint::black_box(detector.handle_write(*r));
                index.insert(
                    r.file,
                    Extent {
                        file_offset: r.offset,
                        len: r.len as u32,
                        location: LogLocation {
                            region: RegionId(0),
                            offset: seq as u64 * r.len,
                        },
                        seq: seq as u64,
                    },
                );
            }
            let ns = start.elapsed().as_nanos() as f64 / trace.len() as f64;
            std::hint::black_box(&index);
            ns
        })
        .collect();
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}
