//! BBOS Fig. 1 and 2: a static 90% demotion threshold under growing data
//! per period and under crowded arrivals, with the Fig. 1 ablation
//! (arrival crowding, the write cost of demotion); declared as data
//! ([`Figure`]).

use super::*;
use crate::experiments::figure::{keyed, Figure, Sweep};

/// The share of a run's measured checkpoints slower than Bwmax / 2.
fn slow_share(r: &CkptResult) -> String {
    let all = measured(r, PERIOD_S);
    let slow = all
        .iter()
        .filter(|io| io.throughput() < Bandwidths::PAPER.write_max / 2.0)
        .count();
    format!("{:.0}%", 100.0 * slow as f64 / all.len().max(1) as f64)
}

/// One static-threshold run per case: per-period mean throughput and the
/// share of checkpoints slower than Bwmax / 2. `cases` holds each case's
/// label, config and what the paper says of it (the headline sets that
/// beside the case's share of slow checkpoints).
fn static_figure<'a>(
    title: &'a str,
    paper: &'a str,
    cases: Vec<(String, CkptConfig, &'a str)>,
) -> Figure<'a, (), String, CkptConfig> {
    let labels: Vec<String> = cases.iter().map(|c| c.0.clone()).collect();
    let says: Vec<(String, &str)> = cases.iter().map(|c| (c.0.clone(), c.2)).collect();
    let configs: Vec<(String, CkptConfig)> = cases.into_iter().map(|(l, c, _)| (l, c)).collect();
    Figure::new(
        title,
        paper,
        parameters(&[(
            "scheme",
            "static demotion threshold at 90% of S, no I/O scheduling".into(),
        )]),
        vec![()],
        labels.clone(),
        move |_, label| Ok(keyed(&configs, label).clone()),
    )
    .headline(move |r| {
        let finding = |(label, says): &(String, &str)| {
            Finding::new(
                format!("{label}: checkpoints slower than Bwmax/2"),
                *says,
                slow_share(r.at(&(), label)),
            )
        };
        says.iter().map(finding).collect()
    })
    .table(
        "Mean checkpoint throughput per period",
        labels.clone(),
        |t| {
            t.col("case", |_, label: &String| label.clone())
                .each(
                    0..PERIODS,
                    |p| format!("period {} GB/s", p + 1),
                    |r, label, p| {
                        let lo = f64::from(p) * PERIOD_S;
                        let ios: Vec<&IoRecord> = r
                            .at(&(), label)
                            .ios
                            .iter()
                            .filter(|io| io.arrival_s >= lo && io.arrival_s < lo + PERIOD_S)
                            .collect();
                        gb_s(mean(&ios, IoRecord::throughput))
                    },
                )
                .col("checkpoints < Bwmax/2", |r, label| {
                    slow_share(r.at(&(), label))
                })
                .col("unfinished", |r, label| {
                    r.at(&(), label).unfinished.to_string()
                })
        },
    )
    .lines(
        [
            "",
            title,
            "arrival time (s)",
            "checkpoint throughput (GB/s)",
        ],
        |s| {
            labels.into_iter().fold(s, |s, label| {
                s.points(label.clone(), move |r| {
                    throughput_over_time(r.at(&(), &label))
                })
            })
        },
    )
}

/// Fig. 1: a static 90 % threshold degrades as DWPP grows.
pub fn fig1(rc: &RunConfig) -> Result<Report, SimError> {
    let paper = [
        "slightly lower throughput after 1000 s",
        "throughput drops over time",
        "almost half get 4× lower throughput",
    ];
    let cases = [1.3, 1.6, 1.9]
        .into_iter()
        .zip(paper)
        .map(|(k, paper)| {
            let jobs = jobs(jobs_for(k), PERIOD_S, Congestion::Med, |_| HOUR_S);
            (
                format!("{k:.1} S"),
                config(STATIC_90, jobs, PERIOD_S, 1),
                paper,
            )
        })
        .collect();
    static_figure(
        "BBOS Fig. 1: checkpoint throughput over time with a static 90% threshold, DWPP 1.3-1.9 S (Med arrivals)",
        "1.3 S: slightly lower after 1000 s; 1.6 S: the buffer sometimes fills mid-checkpoint and \
         throughput drops over time; 1.9 S: almost half of the applications get 4× lower throughput.",
        cases,
    )
    .report_with(FIG1.name, rc, |_| fig1_ablation())
}

/// Fig. 1's 1.9 S case (static 90 %) with one thing changed at a time: the
/// arrivals crowded into a smaller share of the period, or a larger write
/// cost of demotion (Bwmin, Eq. 1's writer rate beside a full-speed
/// demotion). It shows what it takes for the tier to fill and writers to
/// stall, the paper's "4× lower" (docs/results/bbos.md).
fn fig1_ablation() -> Figure<'static, (), String, CkptConfig> {
    let n = jobs_for(1.9);
    let mut cases: Vec<(String, CkptConfig)> = Vec::new();
    for spread in [0.5, 0.4, 0.3, 0.2, 0.1] {
        cases.push((
            format!(
                "arrivals over {:.0}% of the period, Bwmin 3.0",
                spread * 100.0
            ),
            config(
                STATIC_90,
                spread_jobs(n, PERIOD_S, spread, |_| HOUR_S),
                PERIOD_S,
                1,
            ),
        ));
    }
    for write_min in [2.0e9, 1.0e9, 0.5e9] {
        let mut c = config(
            STATIC_90,
            jobs(n, PERIOD_S, Congestion::Med, |_| HOUR_S),
            PERIOD_S,
            1,
        );
        c.bw.write_min = write_min;
        cases.push((format!("Med (50%), Bwmin {:.1}", write_min / 1e9), c));
    }
    let labels: Vec<String> = cases.iter().map(|c| c.0.clone()).collect();
    let share = |ios: &[&IoRecord], f: &dyn Fn(&IoRecord) -> bool| {
        let n = ios.iter().filter(|io| f(io)).count();
        format!("{:.0}%", 100.0 * n as f64 / ios.len().max(1) as f64)
    };
    Figure::part(vec![()], labels.clone(), move |_, label| {
        Ok(keyed(&cases, label).clone())
    })
    .table(
        "Ablation at 1.9 S (static 90%): arrival crowding and the write cost of demotion",
        labels,
        |t| {
            fn all<'r>(r: &'r Sweep<(), String, CkptResult>, label: &String) -> Vec<&'r IoRecord> {
                measured(r.at(&(), label), PERIOD_S)
            }
            t.col("case", |_, label: &String| label.clone())
                .col("mean GB/s", move |r, label| {
                    gb_s(mean(&all(r, label), IoRecord::throughput))
                })
                .col("checkpoints < Bwmax/2", move |r, label| {
                    let slow = |io: &IoRecord| io.throughput() < Bandwidths::PAPER.write_max / 2.0;
                    share(&all(r, label), &slow)
                })
                .col(
                    "checkpoints that stalled on a full tier",
                    move |r, label| share(&all(r, label), &|io| io.stalled_s > 0.0),
                )
                .col(
                    "GB spilled to the capacity tier (all periods)",
                    |r, label| format!("{:.0}", r.at(&(), label).spilled_bytes / 1e9),
                )
        },
    )
}

/// Fig. 2: the same threshold under Low / Med / High arrivals at 1.9 S.
pub fn fig2(rc: &RunConfig) -> Result<Report, SimError> {
    let n = jobs_for(1.9);
    let cases = Congestion::ALL
        .into_iter()
        .map(|c| {
            let paper = match c {
                Congestion::Low => "high throughput",
                Congestion::Med | Congestion::High => "low throughput",
            };
            let jobs = jobs(n, PERIOD_S, c, |_| HOUR_S);
            (
                c.name().to_string(),
                config(STATIC_90, jobs, PERIOD_S, 1),
                paper,
            )
        })
        .collect();
    static_figure(
        "BBOS Fig. 2: checkpoint throughput with a static 90% threshold under Low/Med/High arrivals, 1.9 S",
        "Low always shows high throughput (idle time between jobs demotes); Med and High, with \
         checkpoints arriving in crowds, show low throughput.",
        cases,
    )
    .report(FIG2.name, rc)
}
