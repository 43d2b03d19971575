//! The SSDUP+ figures whose reports trace the detector's streams and ablate
//! what moves them: Fig. 5/6 (random percentage after sorting, processes
//! drifting apart), Fig. 10 (HDD queue depth, each set's throughput, a
//! stream as long as the queue) and Fig. 13 (HPIO, each instance alone,
//! drifting processes). Their runs are not one systems × xs grid, so they
//! build their tasks and tables themselves, on the shared runner.

use super::*;

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
            headers: with_stream_trace(&["region", "run"]),
            rows: trace_rows,
        }, Table {
            title: "Ablation: processes drifting apart (mean client overhead per request; default 0.2 ms)".into(),
            headers: with_stream_trace(&["region", "client overhead", "system", "MB/s", "to SSD"]),
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
