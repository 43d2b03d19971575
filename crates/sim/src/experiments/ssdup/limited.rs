//! The SSDUP+ figures with a limited SSD: Fig. 11 (two concurrent IOR
//! instances, with the routing / flushing ablation) and Fig. 12 (two runs
//! separated by compute time, with a one-region ablation and the first run
//! alone). Fig. 11 is custom on the shared runner: its ablation table
//! sets two of the figure's runs beside two runs of its own; Fig. 12 is
//! declared ([`Figure`]).

use super::*;
use crate::experiments::figure::Figure;

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
    // Every run of the experiment, ablations and traces included.
    let all_events = events(&results);
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
            headers: with_stream_trace(&["variant", "instance 1", "instance 2", "to SSD"]),
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
        events: all_events,
        checks: Vec::new(),
    })
}

/// Fig. 12: two runs separated by compute time, with SSDUP+ on one
/// region as one more system and the first run alone beside it.
pub(super) fn fig12(rc: &RunConfig) -> Result<Report, SimError> {
    use System::{BurstBuffer, SluiceCost, SsdupPlus};
    let gaps = vec![0u64, 10, 20, 30];
    // The systems, and SSDUP+ with one 4 GiB region instead of two of
    // 2 GiB, everything else its own: (system, one region).
    let systems = [
        (BurstBuffer, false),
        (SsdupPlus, false),
        (SluiceCost, false),
        (SsdupPlus, true),
    ];
    // The gap matters relative to the time a flush of the data takes, so it
    // scales with the data like every size.
    let gap_of = |seconds: u64| Duration::from_secs_f64(seconds as f64 * rc.scale);
    let two_runs = move |gap: u64| {
        sequence(
            "two-ior-runs",
            vec![
                ior(IorPattern::SegmentedRandom, 1, 16, 8 * GIB, rc)?,
                ior(IorPattern::SegmentedRandom, 2, 16, 8 * GIB, rc)?,
            ],
            gap_of(gap),
        )
    };
    // SSD = 50% of the 16 GB written: 4 GiB per I/O node (SSDUP+: two
    // 2 GiB regions; OrangeFS-BB: one 4 GiB region).
    let per_server = scaled(4 * GIB, rc.scale, 1024 * KIB);
    let limited = move |regions: u32| ClusterConfig {
        fast_bytes_per_server: per_server,
        regions,
        ..base_cluster(rc)
    };
    let regions = base_cluster(rc).regions;
    type R = Sweep<(System, bool), u64, RunResult>;
    // I/O throughput: bytes / (elapsed - compute time).
    let io = move |r: &R, system: System, gap: &u64| {
        let r = r.at(&(system, false), gap);
        r.bytes_written as f64 / 1e6 / (r.jobs[0].seconds() - gap_of(*gap).as_secs_f64())
    };
    let gain = move |r: &R, system, gap: &u64| io(r, system, gap) / io(r, BurstBuffer, gap) - 1.0;
    let paper_gain = |gap: &u64| [11.91, 10.65, 9.92].get(*gap as usize / 10).copied();
    let trace_rows: Vec<(u64, (System, bool))> = gaps
        .iter()
        .flat_map(|&gap| systems.map(|s| (gap, s)))
        .collect();
    Figure::new(
        "Fig. 12: two 8 GB segmented-random runs separated by compute time",
        "SSDUP+ outperforms OrangeFS-BB by 11.91%, 10.65% and 9.92% as the compute time grows; \
         OrangeFS-BB improves with longer compute time because its flush overlaps it.",
        parameters(
            rc,
            &[
                (
                    "throughput",
                    "bytes / (elapsed - compute time); 16 processes; 4 GiB SSD per I/O node; the compute \
                     times (0/10/20/30 s at scale 1) scale with the data"
                        .into(),
                ),
                sluice_parameter(&base_cluster(rc)),
            ],
        ),
        systems.to_vec(),
        gaps.clone(),
        |&(system, one_region), &gap| {
            let cluster = limited(if one_region { 1 } else { regions });
            task(cluster, system, two_runs(gap))
        },
    )
    .headline(move |r| {
        r.xs()
            .iter()
            .filter_map(|gap| {
                let paper = paper_gain(gap)?;
                Some(Finding::new(
                    format!("SSDUP+ gain over OrangeFS-BB, {gap} s compute time"),
                    format!("{paper}%"),
                    pct(gain(r, SsdupPlus, gap)),
                ))
            })
            .collect()
    })
    .table("I/O throughput (MB/s)", gaps.clone(), |t| {
        t.col("compute time", |_, gap: &u64| format!("{gap} s"))
            .col("OrangeFS-BB", move |r, gap| mb_s(io(r, BurstBuffer, gap)))
            .col("SSDUP+", move |r, gap| mb_s(io(r, SsdupPlus, gap)))
            .col("SSDUP+ gain", move |r, gap| pct(gain(r, SsdupPlus, gap)))
            .col("paper gain", move |_, gap| {
                paper_gain(gap).map_or("-".into(), |g| format!("{g}%"))
            })
            .col("sluice", move |r, gap| mb_s(io(r, SluiceCost, gap)))
            .col("sluice gain", move |r, gap| pct(gain(r, SluiceCost, gap)))
    })
    // Trace: each run's own throughput (the barrier release ends run 1;
    // run 2 starts a gap later), and what the buffer did.
    .table("Trace: each run's throughput (MB/s) and the buffer", trace_rows, |t| {
        let half_mb_s = move |r: &R, (gap, s): &(u64, (System, bool)), run: usize| {
            let r = r.at(s, gap);
            let job = &r.jobs[0];
            let run1_end = job.barriers.first().map_or(job.end_ns, |m| m.ns);
            let run2_start = run1_end + gap_of(*gap).as_nanos() as u64;
            let (a, b) = [(job.start_ns, run1_end), (run2_start, job.end_ns)][run];
            mb_s(r.bytes_written as f64 / 2.0 / 1e6 / (b.saturating_sub(a) as f64 / 1e9))
        };
        t.col("compute time", |_, (gap, _)| format!("{gap} s"))
            .col("system", |_, (_, (system, one_region))| match one_region {
                true => "SSDUP+, one 4 GiB region".into(),
                false => system.name().to_string(),
            })
            .col("run 1", move |r, row| half_mb_s(r, row, 0))
            .col("run 2", move |r, row| half_mb_s(r, row, 1))
            .col("to SSD", |r, (gap, s)| pct(r.at(s, gap).fast_fraction()))
            .col("written through", |r, (gap, s)| {
                let r = r.at(s, gap);
                pct(r.write_through_bytes as f64 / r.bytes_written as f64)
            })
            .col("regions flushed", |r, (gap, s)| {
                r.at(s, gap).regions_flushed.to_string()
            })
    })
    .bars(
        [
            "compute-time",
            "Throughput vs compute time between runs",
            "compute time between the two runs (s, at scale 1)",
            "I/O throughput (MB/s)",
        ],
        gaps.iter().map(|g| format!("{g} s")),
        |s| {
            [BurstBuffer, SsdupPlus, SluiceCost]
                .into_iter()
                .fold(s, |s, system| {
                    s.bars(system.name(), gaps.clone(), move |r, gap| io(r, system, gap))
                })
        },
    )
    // Trace: the first run alone, to see what it leaves in the SSD.
    .report_with(FIG12.name, rc, |_| {
        let run1 = move |&system: &System, _: &()| {
            let job = ior(IorPattern::SegmentedRandom, 1, 16, 8 * GIB, rc);
            task(limited(regions), system, job)
        };
        let servers = f64::from(base_cluster(rc).servers);
        let mib = move |b: u64| format!("{:.1}", b as f64 / servers / (1024.0 * 1024.0));
        let run1_systems = vec![BurstBuffer, SsdupPlus];
        Figure::part(run1_systems.clone(), vec![()], run1).table(
            "Trace: the first run alone, per I/O node (MiB)",
            run1_systems,
            |t| {
                t.col("system", |_, s: &System| s.name().to_string())
                    .col("region", move |_, &s| {
                        let regions = if s == BurstBuffer { 1 } else { regions };
                        format!("{:.1}", (per_server / u64::from(regions)) as f64 / (1024.0 * 1024.0))
                    })
                    .col("to SSD", move |r, s| mib(r.at(s, &()).fast_bytes))
                    .col("to HDD", move |r, s| mib(r.at(s, &()).capacity_bytes))
                    .col("flushed", move |r, s| mib(r.at(s, &()).flushed_bytes))
                    .col("buffered at the end", move |r, s| {
                        mib(r.at(s, &()).buffered_at_end_bytes)
                    })
            },
        )
    })
}
