//! The SSDUP+ figures with a limited SSD: Fig. 11 (two concurrent IOR
//! instances, with the routing / flushing ablation) and Fig. 12 (two runs
//! separated by compute time, with a one-region ablation and the first run
//! alone); both declared ([`Figure`]).

use super::*;
use crate::experiments::figure::Figure;

/// Fig. 11: two concurrent IOR instances on a limited SSD, with the
/// ablation of workload 1 (each of SSDUP and SSDUP+ with the other's
/// routing, so routing and flushing are told apart) as two more systems.
pub(super) fn fig11(rc: &RunConfig) -> Result<Report, SimError> {
    use System::{BurstBuffer, SluiceCost, Ssdup, SsdupPlus};
    let main = [BurstBuffer, Ssdup, SsdupPlus, SluiceCost];
    // (system, the routing it runs with instead of its own).
    let ablations = [
        (SsdupPlus, Some(RedirectPolicy::ALL[2])),
        (Ssdup, Some(RedirectPolicy::SsdupPlus)),
    ];
    let systems: Vec<(System, Option<RedirectPolicy>)> =
        main.iter().map(|&s| (s, None)).chain(ablations).collect();
    let workloads = [
        [IorPattern::SegmentedContiguous, IorPattern::SegmentedRandom],
        [IorPattern::SegmentedRandom, IorPattern::SegmentedRandom],
    ];
    // The paper's per-instance MB/s; sluice is not in the paper, and its
    // SSDUP in workload 2 is SSDUP+'s.
    let paper = |w: u32, s: System| match (w, s) {
        (1, BurstBuffer) => Some((73.04, 72.71)),
        (1, Ssdup) => Some((67.85, 66.15)),
        (1, SsdupPlus) => Some((90.21, 90.49)),
        (2, BurstBuffer) => Some((71.16, 71.54)),
        (2, Ssdup | SsdupPlus) => Some((97.32, 98.38)),
        _ => None,
    };
    let variants = [
        ("SSDUP (static marks, flush at once)", systems[1]),
        ("SSDUP+ (adaptive threshold, flush gate)", systems[2]),
        ("SSDUP+ flushing, SSDUP's static marks", systems[4]),
        ("SSDUP flushing, SSDUP+'s adaptive threshold", systems[5]),
    ];
    type Variant = (&'static str, (System, Option<RedirectPolicy>));
    type R = Sweep<(System, Option<RedirectPolicy>), u32, RunResult>;
    let instance =
        |r: &R, s: System, w: &u32, i: usize| r.at(&(s, None), w).jobs[i].throughput_mb_s();
    let rows: Vec<(u32, System)> = [1, 2]
        .into_iter()
        .flat_map(|w| main.map(|s| (w, s)))
        .collect();
    Figure::new(
        "Fig. 11: limited SSD (8 GB in all), two concurrent IOR instances of 8 GB",
        "Workload 1 (segmented-contiguous + random): OrangeFS-BB 73.04 / 72.71 MB/s, SSDUP 67.85 / \
         66.15, SSDUP+ 90.21 / 90.49. Workload 2 (both random): SSDUP+ 97.32 / 98.38, OrangeFS-BB \
         71.16 / 71.54; SSDUP performs as SSDUP+ there.",
        parameters(
            rc,
            &[
                (
                    "SSD",
                    "8 GB in all read as 4 GiB per I/O node (OrangeFS-BB: one region; SSDUP/SSDUP+: two 2 GiB \
                     regions); 16 processes per instance; paper for SSDUP workload 2 = SSDUP+'s"
                        .into(),
                ),
                sluice_parameter(&base_cluster(rc)),
            ],
        ),
        systems,
        vec![1u32, 2],
        |&(system, policy_override), &w| {
            let [a, b] = workloads[w as usize - 1];
            // 8 GB of SSD in all: 4 GiB per I/O node, two 2 GiB regions.
            let cluster = ClusterConfig {
                fast_bytes_per_server: scaled(4 * GIB, rc.scale, 1024 * KIB),
                policy_override,
                ..base_cluster(rc)
            };
            let jobs = vec![ior(a, 1, 16, 8 * GIB, rc)?, ior(b, 2, 16, 8 * GIB, rc)?];
            Ok(Task { cluster, system, jobs })
        },
    )
    .only(|(_, policy), &w| policy.is_none() || w == 1)
    .headline({
        let rows = rows.clone();
        move |r| {
        rows.iter()
            .filter_map(|&(w, s)| {
                let (a, b) = paper(w, s)?;
                Some(Finding::new(
                    format!("workload {w}, {} instance 1 / 2 (MB/s)", s.name()),
                    format!("{a} / {b}"),
                    format!("{} / {}", mb_s(instance(r, s, &w, 0)), mb_s(instance(r, s, &w, 1))),
                ))
            })
            .collect()
        }
    })
    .table("Per-instance throughput (MB/s)", rows, |t| {
        fn at<'r>(r: &'r R, &(w, s): &(u32, System)) -> &'r RunResult {
            r.at(&(s, None), &w)
        }
        t.col("workload", |_, (w, _): &(u32, System)| format!("workload {w}"))
            .col("system", |_, (_, s)| s.name().to_string())
            .col("instance 1", move |r, &(w, s)| mb_s(instance(r, s, &w, 0)))
            .col("instance 2", move |r, &(w, s)| mb_s(instance(r, s, &w, 1)))
            .col("paper", move |_, &(w, s)| {
                paper(w, s).map_or("-".into(), |(a, b)| format!("{a} / {b}"))
            })
            .col("to SSD", |r, row| pct(at(r, row).fast_fraction()))
            .col("regions flushed", |r, row| at(r, row).regions_flushed.to_string())
            .col("written through", |r, row| {
                let r = at(r, row);
                pct(r.write_through_bytes as f64 / r.bytes_written as f64)
            })
    })
    .table(
        "Workload 1 ablation: routing against flushing, with the detector's streams",
        variants.to_vec(),
        |t| {
            let at = |r: &R, (_, system): &Variant, i: usize| r.at(system, &1).jobs[i].throughput_mb_s();
            let t = t
                .col("variant", |_, (name, _): &Variant| name.to_string())
                .col("instance 1", move |r, v| mb_s(at(r, v, 0)))
                .col("instance 2", move |r, v| mb_s(at(r, v, 1)))
                .col("to SSD", |r, (_, s)| pct(r.at(s, &1).fast_fraction()));
            stream_trace_columns(t, |r, (_, s)| stream_trace(r.at(s, &1)))
        },
    )
    .bars(
        [
            "limited-ssd",
            "Limited SSD: per-instance throughput",
            "workload (W) and IOR instance",
            "throughput (MB/s)",
        ],
        ["W1 inst 1", "W1 inst 2", "W2 inst 1", "W2 inst 2"],
        |s| {
            main.into_iter().fold(s, |s, system| {
                let keys = vec![(1, 0), (1, 1), (2, 0), (2, 1)];
                s.bars(system.name(), keys, move |r, &(w, i)| instance(r, system, &w, i))
            })
        },
    )
    .report(FIG11.name, rc)
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
