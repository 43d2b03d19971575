//! The BBOS evaluation (seed 004 §II-C, §VI) as simulator experiments on
//! the fluid checkpoint model of [`crate::checkpoint`].
//!
//! The testbed's values (§VI-A): Bwmax 3.56, Bwmin 3.0, Brmax 1.6,
//! Brmin 0.08 GB/s, period 3800 s, 80 GB checkpoints, one per job and
//! period. The paper does not give the burst buffer's capacity `S` used in
//! its runs; `S = 2.2 TB` is the value for which its utilisation figures
//! (MaxBW 190 %, MaxEff/BBOS 210 %) both follow from its rates and period,
//! and with it "Low" congestion at 1.9 S is exactly the load MaxBW can
//! demote in idle time, as the paper's Fig. 5 shows. The utilisation
//! experiment also reports `S = 3.2 TB` (its four 800 GB SSDs).
//!
//! Job arrivals (§VI-C): "Low" spreads a period's checkpoints evenly over
//! the period; "Med" halves the interval, "High" divides it by ten.
//! Results are taken from the second planner period on (the first starts
//! with an empty fast tier). The model moves bytes as flows, so its cost
//! does not depend on the data size and `--scale` does not change these
//! experiments.

use sluice_policy::bbos::{max_served_dwpp, Bandwidths, Eviction, Scheme};

use super::{bar_plot, events, line_plot, run_all, Experiment, RunConfig, SimError};
use crate::checkpoint::{run, CkptConfig, CkptJob, CkptResult, IoRecord};
use crate::output::{Finding, Report, Series, Table};
use crate::rng::SimRng;

/// `sluice sim run bbos-fig1`.
pub(super) const FIG1: Experiment = Experiment {
    name: "bbos-fig1",
    title: "BBOS Fig. 1: static 90% threshold, checkpoint throughput over time at DWPP 1.3-1.9 S",
    run: fig1,
};

/// `sluice sim run bbos-fig2`.
pub(super) const FIG2: Experiment = Experiment {
    name: "bbos-fig2",
    title: "BBOS Fig. 2: static 90% threshold under Low/Med/High arrivals at 1.9 S",
    run: fig2,
};

/// `sluice sim run bbos-fig5`.
pub(super) const FIG5: Experiment = Experiment {
    name: "bbos-fig5",
    title: "BBOS Fig. 5: throughput and latency, DataWarp / MaxBW / MaxEff / BBOS",
    run: fig5,
};

/// `sluice sim run bbos-utilisation`.
pub(super) const UTILISATION: Experiment = Experiment {
    name: "bbos-utilisation",
    title: "BBOS §VI-B: burst-buffer utilisation per scheme",
    run: utilisation,
};

/// `sluice sim run bbos-fig7`.
pub(super) const FIG7: Experiment = Experiment {
    name: "bbos-fig7",
    title: "BBOS Fig. 7: cold checkpoints straight to the capacity tier",
    run: fig7,
};

/// `sluice sim run bbos-fig8`.
pub(super) const FIG8: Experiment = Experiment {
    name: "bbos-fig8",
    title: "BBOS Fig. 8: restart hit ratio, BBOS vs LRU vs FIFO",
    run: fig8,
};

/// `sluice sim run bbos-fig9`.
pub(super) const FIG9: Experiment = Experiment {
    name: "bbos-fig9",
    title: "BBOS Fig. 9: version-aware eviction",
    run: fig9,
};

const GB: u64 = 1_000_000_000;
const CKPT: u64 = 80 * GB;
const S: u64 = 2200 * GB;
const PERIOD_S: f64 = 3800.0;
const HOUR_S: f64 = 3600.0;
/// Planner periods simulated; results from period 1 on.
const PERIODS: u32 = 4;
const STATIC_90: Scheme = Scheme::Static { percent: 90 };
const BBOS_EVICTION: Eviction = Eviction::Bbos {
    version_aware: true,
};

/// How crowded a period's checkpoint arrivals are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Congestion {
    Low,
    Med,
    High,
}

impl Congestion {
    const ALL: [Congestion; 3] = [Congestion::Low, Congestion::Med, Congestion::High];

    fn name(self) -> &'static str {
        match self {
            Congestion::Low => "Low",
            Congestion::Med => "Med",
            Congestion::High => "High",
        }
    }

    /// The fraction of the period the arrivals are spread over.
    fn spread(self) -> f64 {
        match self {
            Congestion::Low => 1.0,
            Congestion::Med => 0.5,
            Congestion::High => 0.1,
        }
    }
}

/// Number of 80 GB checkpoints per period for a DWPP of `k × S`.
fn jobs_for(k: f64) -> u64 {
    (k * S as f64 / CKPT as f64).round() as u64
}

/// `n` jobs with period `period_s`, arriving per `congestion`, MTBF from
/// `mtbf` (seconds, by job index).
fn jobs(n: u64, period_s: f64, congestion: Congestion, mtbf: impl Fn(u64) -> f64) -> Vec<CkptJob> {
    spread_jobs(n, period_s, congestion.spread(), mtbf)
}

/// `n` jobs with period `period_s`, arriving evenly over the first
/// `spread` of the period, MTBF from `mtbf`.
fn spread_jobs(n: u64, period_s: f64, spread: f64, mtbf: impl Fn(u64) -> f64) -> Vec<CkptJob> {
    (0..n)
        .map(|i| CkptJob {
            id: i,
            period_s,
            first_s: i as f64 * period_s * spread / n as f64,
            bytes: CKPT,
            mtbf_s: mtbf(i),
            versions: 2,
        })
        .collect()
}

fn config(scheme: Scheme, jobs: Vec<CkptJob>, period_s: f64, seed: u64) -> CkptConfig {
    CkptConfig {
        scheme,
        eviction: BBOS_EVICTION,
        direct: false,
        bw: Bandwidths::PAPER,
        capacity: S,
        planner_period_s: period_s,
        periods: PERIODS,
        jobs,
        failures: false,
        seed,
    }
}

/// MTBFs drawn uniformly from (0, `max_min`] minutes, at least one minute.
fn random_mtbf(rng: &mut SimRng, n: u64, max_min: f64) -> Vec<f64> {
    (0..n)
        .map(|_| (rng.unit() * max_min).max(1.0) * 60.0)
        .collect()
}

/// Mean, over the measured checkpoints, of `f`.
fn mean(ios: &[&IoRecord], f: impl Fn(&IoRecord) -> f64) -> f64 {
    if ios.is_empty() {
        return f64::NAN;
    }
    ios.iter().map(|io| f(io)).sum::<f64>() / ios.len() as f64
}

fn measured(r: &CkptResult, period_s: f64) -> Vec<&IoRecord> {
    r.ios_from(1, period_s).collect()
}

fn gb_s(x: f64) -> String {
    format!("{:.2}", x / 1e9)
}

fn secs(x: f64) -> String {
    format!("{x:.0}")
}

fn parameters(extra: &[(&str, String)]) -> Vec<(String, String)> {
    let mut p = vec![
        (
            "bandwidths".to_string(),
            "Bwmax 3.56, Bwmin 3.0, Brmax 1.6, Brmin 0.08, idle demotion 1.6 GB/s".to_string(),
        ),
        (
            "capacity S".to_string(),
            "2.2 TB (inferred; see docs/results/bbos.md)".to_string(),
        ),
        (
            "checkpoint".to_string(),
            "80 GB, one per job per period".to_string(),
        ),
        (
            "runs".to_string(),
            format!("{PERIODS} planner periods, measured from the second"),
        ),
        ("scale".to_string(), "not used (fluid model)".to_string()),
    ];
    p.extend(extra.iter().map(|(k, v)| (k.to_string(), v.clone())));
    p
}

fn throughput_over_time(name: String, r: &CkptResult) -> Series {
    Series {
        name,
        points: r
            .ios
            .iter()
            .map(|io| (io.arrival_s, io.throughput() / 1e9))
            .collect(),
    }
}

/// One static-threshold run per case: per-period mean throughput and the
/// share of checkpoints slower than Bwmax / 2. `cases` holds each case's
/// label, config and what the paper says of it (the headline sets that
/// beside the case's share of slow checkpoints).
fn static_report(
    name: &str,
    title: &str,
    paper: &str,
    cases: Vec<(String, CkptConfig, &str)>,
    rc: &RunConfig,
) -> Result<Report, SimError> {
    let configs: Vec<CkptConfig> = cases.iter().map(|(_, c, _)| c.clone()).collect();
    let results = run_all(&configs, rc)?;
    let mut rows = Vec::new();
    let mut series = Vec::new();
    let mut headline = Vec::new();
    for ((label, _, paper_says), r) in cases.iter().zip(&results) {
        let mut row = vec![label.clone()];
        for p in 0..PERIODS {
            let lo = f64::from(p) * PERIOD_S;
            let ios: Vec<&IoRecord> = r
                .ios
                .iter()
                .filter(|io| io.arrival_s >= lo && io.arrival_s < lo + PERIOD_S)
                .collect();
            row.push(gb_s(mean(&ios, IoRecord::throughput)));
        }
        let all = measured(r, PERIOD_S);
        let slow = all
            .iter()
            .filter(|io| io.throughput() < Bandwidths::PAPER.write_max / 2.0)
            .count();
        let slow_share = format!("{:.0}%", 100.0 * slow as f64 / all.len().max(1) as f64);
        headline.push(Finding::new(
            format!("{label}: checkpoints slower than Bwmax/2"),
            *paper_says,
            slow_share.clone(),
        ));
        row.push(slow_share);
        row.push(r.unfinished.to_string());
        rows.push(row);
        series.push(throughput_over_time(label.clone(), r));
    }
    let mut headers = vec!["case".to_string()];
    headers.extend((1..=PERIODS).map(|p| format!("period {p} GB/s")));
    headers.push("checkpoints < Bwmax/2".into());
    headers.push("unfinished".into());
    Ok(Report {
        experiment: name.into(),
        title: title.into(),
        headline,
        paper: paper.into(),
        parameters: parameters(&[(
            "scheme",
            "static demotion threshold at 90% of S, no I/O scheduling".into(),
        )]),
        tables: vec![Table {
            title: "Mean checkpoint throughput per period".into(),
            headers,
            rows,
        }],
        plots: vec![line_plot(
            name,
            title,
            "arrival time (s)",
            "checkpoint throughput (GB/s)",
            series,
        )],
        notes: vec![],
        events: events(&results),
        checks: Vec::new(),
    })
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
            let n = jobs_for(k);
            (
                format!("{k:.1} S"),
                config(
                    STATIC_90,
                    jobs(n, PERIOD_S, Congestion::Med, |_| HOUR_S),
                    PERIOD_S,
                    1,
                ),
                paper,
            )
        })
        .collect();
    let mut report = static_report(
        FIG1.name,
        "BBOS Fig. 1: checkpoint throughput over time with a static 90% threshold, DWPP 1.3-1.9 S (Med arrivals)",
        "1.3 S: slightly lower after 1000 s; 1.6 S: the buffer sometimes fills mid-checkpoint and \
         throughput drops over time; 1.9 S: almost half of the applications get 4× lower throughput.",
        cases,
        rc,
    )?;
    let (table, events) = fig1_ablation(rc)?;
    report.tables.push(table);
    report.events += events;
    Ok(report)
}

/// Fig. 1's 1.9 S case (static 90 %) with one thing changed at a time: the
/// arrivals crowded into a smaller share of the period, or a larger write
/// cost of demotion (Bwmin, Eq. 1's writer rate beside a full-speed
/// demotion). It shows what it takes for the tier to fill and writers to
/// stall, the paper's "4× lower" (docs/results/bbos.md).
fn fig1_ablation(rc: &RunConfig) -> Result<(Table, u64), SimError> {
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
    let configs: Vec<CkptConfig> = cases.iter().map(|(_, c)| c.clone()).collect();
    let results = run_all(&configs, rc)?;
    let rows = cases
        .iter()
        .zip(&results)
        .map(|((label, _), r)| {
            let all = measured(r, PERIOD_S);
            let slow = all
                .iter()
                .filter(|io| io.throughput() < Bandwidths::PAPER.write_max / 2.0)
                .count();
            let stalled = all.iter().filter(|io| io.stalled_s > 0.0).count();
            vec![
                label.clone(),
                gb_s(mean(&all, IoRecord::throughput)),
                format!("{:.0}%", 100.0 * slow as f64 / all.len().max(1) as f64),
                format!("{:.0}%", 100.0 * stalled as f64 / all.len().max(1) as f64),
                format!("{:.0}", r.spilled_bytes / 1e9),
            ]
        })
        .collect();
    let table = Table {
        title: "Ablation at 1.9 S (static 90%): arrival crowding and the write cost of demotion"
            .into(),
        headers: [
            "case",
            "mean GB/s",
            "checkpoints < Bwmax/2",
            "checkpoints that stalled on a full tier",
            "GB spilled to the capacity tier (all periods)",
        ]
        .map(String::from)
        .to_vec(),
        rows,
    };
    Ok((table, events(&results)))
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
            (
                c.name().to_string(),
                config(STATIC_90, jobs(n, PERIOD_S, c, |_| HOUR_S), PERIOD_S, 1),
                paper,
            )
        })
        .collect();
    static_report(
        FIG2.name,
        "BBOS Fig. 2: checkpoint throughput with a static 90% threshold under Low/Med/High arrivals, 1.9 S",
        "Low always shows high throughput (idle time between jobs demotes); Med and High, with \
         checkpoints arriving in crowds, show low throughput.",
        cases,
        rc,
    )
}

/// Fig. 5: throughput and latency of DataWarp, MaxBW, MaxEff and BBOS.
pub fn fig5(rc: &RunConfig) -> Result<Report, SimError> {
    let mut cases: Vec<(Scheme, f64, Congestion)> = Vec::new();
    for c in Congestion::ALL {
        cases.push((Scheme::DataWarp, 1.0, c));
        for k in [1.3, 1.6, 1.9] {
            for s in [Scheme::MaxBw, Scheme::MaxEff, Scheme::Bbos] {
                cases.push((s, k, c));
            }
        }
    }
    let configs: Vec<CkptConfig> = cases
        .iter()
        .map(|&(s, k, c)| {
            // Dedicated allocation never grants more than S.
            let n = if !s.oversubscribes() {
                S / CKPT
            } else {
                jobs_for(k)
            };
            config(s, jobs(n, PERIOD_S, c, |_| HOUR_S), PERIOD_S, 1)
        })
        .collect();
    let results = run_all(&configs, rc)?;
    let mut rows = Vec::new();
    let mut tput: Vec<Series> = Vec::new();
    let mut lat: Vec<Series> = Vec::new();
    let mut categories: Vec<String> = Vec::new();
    // (scheme, DWPP, arrivals) -> (mean GB/s, mean latency, max latency) as in the table.
    let mut cells: Vec<((Scheme, String, Congestion), [String; 3])> = Vec::new();
    for (&(s, k, c), r) in cases.iter().zip(&results) {
        let ios = measured(r, PERIOD_S);
        let t = mean(&ios, IoRecord::throughput);
        let l = mean(&ios, IoRecord::latency_s);
        let max = ios.iter().map(|io| io.latency_s()).fold(0.0, f64::max);
        let stalled = mean(&ios, |io| io.stalled_s);
        cells.push(((s, format!("{k:.1} S"), c), [gb_s(t), secs(l), secs(max)]));
        rows.push(vec![
            c.name().into(),
            format!("{k:.1} S"),
            s.name().into(),
            gb_s(t),
            secs(l),
            secs(max),
            format!("{stalled:.1}"),
            r.unfinished.to_string(),
        ]);
        let category = format!("{} {k:.1}S", c.name());
        let x = match categories.iter().position(|x| *x == category) {
            Some(x) => x,
            None => {
                categories.push(category);
                categories.len() - 1
            }
        };
        for (series, y) in [(&mut tput, t / 1e9), (&mut lat, l)] {
            match series.iter_mut().find(|x| x.name == s.name()) {
                Some(se) => se.points.push((x as f64, y)),
                None => series.push(Series {
                    name: s.name().into(),
                    points: vec![(x as f64, y)],
                }),
            }
        }
    }
    let cell = |s: Scheme, k: &str, c: Congestion, i: usize| -> String {
        cells
            .iter()
            .find(|((s2, k2, c2), _)| *s2 == s && k2 == k && *c2 == c)
            .map_or("-".into(), |(_, v)| v[i].clone())
    };
    let headline = vec![
        Finding::new(
            "DataWarp 1.0 S, Low / High arrivals (mean GB/s)",
            "high under Low, the lowest under High",
            format!(
                "{} / {}",
                cell(Scheme::DataWarp, "1.0 S", Congestion::Low, 0),
                cell(Scheme::DataWarp, "1.0 S", Congestion::High, 0)
            ),
        ),
        Finding::new(
            "MaxBW 1.9 S High, mean / max latency (s)",
            "max far above mean",
            format!(
                "{} / {}",
                cell(Scheme::MaxBw, "1.9 S", Congestion::High, 1),
                cell(Scheme::MaxBw, "1.9 S", Congestion::High, 2)
            ),
        ),
        Finding::new(
            "BBOS / MaxEff 1.9 S High, mean latency (s)",
            "BBOS lower",
            format!(
                "{} / {}",
                cell(Scheme::Bbos, "1.9 S", Congestion::High, 1),
                cell(Scheme::MaxEff, "1.9 S", Congestion::High, 1)
            ),
        ),
        Finding::new(
            "MaxEff / BBOS 1.9 S High, mean GB/s",
            "MaxEff the lowest of the over-subscribed schemes",
            format!(
                "{} / {}",
                cell(Scheme::MaxEff, "1.9 S", Congestion::High, 0),
                cell(Scheme::Bbos, "1.9 S", Congestion::High, 0)
            ),
        ),
    ];
    Ok(Report {
        experiment: FIG5.name.into(),
        title: "BBOS Fig. 5: checkpoint throughput and latency, DataWarp / MaxBW / MaxEff / BBOS, DWPP 1.0-1.9 S, Low/Med/High".into(),
        headline,
        paper: "DataWarp (1.0 S only): high throughput under Low, the lowest under High (jobs overlap), \
                latency similar to BBOS. MaxBW: the highest throughput when nothing waits (Low; Med at \
                1.3 S), but at Med/High from 1.6 S jobs stop for space and latency and its variance grow \
                (max far above mean). MaxEff: the lowest throughput of the over-subscribed schemes and, at \
                large DWPP, higher latency than BBOS. BBOS: throughput between, lower latency than MaxEff \
                and no explosion of the wait."
            .into(),
        parameters: parameters(&[(
            "jobs",
            "DataWarp 27 (≤ S); others 36 / 44 / 52 for 1.3 / 1.6 / 1.9 S".into(),
        )]),
        tables: vec![Table {
            title: "Checkpoint throughput (execution) and latency (arrival to completion)".into(),
            headers: [
                "arrivals",
                "DWPP",
                "scheme",
                "mean GB/s",
                "mean latency s",
                "max latency s",
                "mean s stalled on a full tier",
                "unfinished",
            ]
            .map(String::from)
            .to_vec(),
            rows,
        }],
        plots: vec![
            bar_plot(
                &format!("{}-throughput", FIG5.name),
                "BBOS Fig. 5(a): mean checkpoint throughput",
                "arrivals (Low/Med/High) and data written per period (DWPP, × S)",
                "mean checkpoint throughput (GB/s)",
                categories.clone(),
                tput,
            ),
            bar_plot(
                &format!("{}-latency", FIG5.name),
                "BBOS Fig. 5(b): mean checkpoint latency",
                "arrivals (Low/Med/High) and data written per period (DWPP, × S)",
                "mean checkpoint latency (s)",
                categories,
                lat,
            ),
        ],
        notes: vec![],
        events: events(&results),
        checks: Vec::new(),
    })
}

/// Largest number of jobs served per period, by bisection on the job
/// count: with the period's checkpoints arriving crowded (High: no idle
/// time between them to demote in, the worst case the planner is built
/// for), every checkpoint finishes within the period it arrived in without
/// stalling on a full tier, and everything written is on the capacity tier
/// when the period ends (Eq. 3), within one checkpoint.
fn max_jobs_simulated(scheme: Scheme, capacity: u64, steps: &mut u64) -> Result<u64, SimError> {
    let mut ok = |n: u64| -> Result<bool, SimError> {
        if n == 0 {
            return Ok(true);
        }
        let mut c = config(
            scheme,
            jobs(n, PERIOD_S, Congestion::High, |_| HOUR_S),
            PERIOD_S,
            1,
        );
        c.capacity = capacity;
        let r = run(&c)?;
        *steps += r.steps;
        let in_period = r
            .ios
            .iter()
            .all(|io| (io.end_s / PERIOD_S).floor() <= (io.arrival_s / PERIOD_S).floor());
        let drained = r.backlog_at_period_end.iter().all(|&b| b <= CKPT as f64);
        let no_stall = r.ios.iter().all(|io| io.stalled_s == 0.0);
        Ok(r.unfinished == 0 && in_period && drained && no_stall && r.spilled_bytes == 0.0)
    };
    let limit = if !scheme.oversubscribes() {
        capacity / CKPT
    } else {
        4 * capacity / CKPT
    };
    let (mut lo, mut hi) = (0, limit + 1);
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        if ok(mid)? {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Ok(lo)
}

/// Utilisation: the largest DWPP each scheme serves per period.
pub fn utilisation(_rc: &RunConfig) -> Result<Report, SimError> {
    let mut rows = Vec::new();
    let mut steps = 0;
    let schemes = [
        Scheme::DataWarp,
        Scheme::MaxBw,
        Scheme::MaxEff,
        Scheme::Bbos,
    ];
    let paper = ["≤ 100%", "190%", "210%", "210%"];
    let mut headline = Vec::new();
    for capacity in [S, 3200 * GB] {
        for (scheme, paper) in schemes.iter().zip(paper) {
            let planned = max_served_dwpp(*scheme, Bandwidths::PAPER, capacity as f64, PERIOD_S);
            let n = max_jobs_simulated(*scheme, capacity, &mut steps)?;
            let served = format!("{:.0}%", 100.0 * (n * CKPT) as f64 / capacity as f64);
            let size = format!("{:.1} TB", capacity as f64 / 1e12);
            if capacity == S {
                headline.push(Finding::new(
                    format!(
                        "{}, S = {size}: largest DWPP served, simulated",
                        scheme.name()
                    ),
                    paper,
                    served.clone(),
                ));
            }
            rows.push(vec![
                size,
                scheme.name().into(),
                paper.into(),
                format!("{:.0}%", 100.0 * planned / capacity as f64),
                n.to_string(),
                served,
            ]);
        }
    }
    Ok(Report {
        experiment: UTILISATION.name.into(),
        title: "BBOS §VI-B: burst-buffer utilisation (largest DWPP served per period)".into(),
        headline,
        paper:
            "DataWarp 0-100% (dedicated allocation); MaxBW up to 190%; MaxEff and BBOS up to 210%."
                .into(),
        parameters: parameters(&[(
            "method",
            "planned: the largest DWPP whose plan is feasible (Eq. 2-3 and the capacity bound, by \
             bisection); simulated: the most 80 GB jobs, arriving crowded (High), whose every \
             checkpoint finishes within its period without stalling on a full tier, with the \
             period's data demoted by its end"
                .into(),
        )]),
        tables: vec![Table {
            title: "Utilisation = DWPP served / S".into(),
            headers: [
                "S",
                "scheme",
                "paper",
                "planned",
                "simulated jobs",
                "simulated",
            ]
            .map(String::from)
            .to_vec(),
            rows,
        }],
        plots: vec![],
        notes: vec![],
        events: steps,
        checks: Vec::new(),
    })
}

/// Fig. 7: writing cold checkpoints straight to the capacity tier.
pub fn fig7(rc: &RunConfig) -> Result<Report, SimError> {
    let mut configs = Vec::new();
    let ks = [1.3, 1.6, 1.9];
    for &k in &ks {
        let n = jobs_for(k);
        let mut rng = SimRng::new(rc.seed);
        let mtbf = random_mtbf(&mut rng, n, 100.0);
        for direct in [false, true] {
            let mut c = config(
                Scheme::Bbos,
                jobs(n, HOUR_S, Congestion::Low, |i| mtbf[i as usize]),
                HOUR_S,
                rc.seed,
            );
            c.direct = direct;
            configs.push(c);
        }
    }
    let results = run_all(&configs, rc)?;
    let mut rows = Vec::new();
    let mut series = vec![
        Series {
            name: "through the buffer".into(),
            points: vec![],
        },
        Series {
            name: "cold checkpoints direct".into(),
            points: vec![],
        },
    ];
    let mut reductions = Vec::new();
    for (i, &k) in ks.iter().enumerate() {
        let base = &results[2 * i];
        let direct = &results[2 * i + 1];
        let per = |r: &CkptResult| {
            r.demoted_per_period[1..PERIODS as usize]
                .iter()
                .sum::<f64>()
                / f64::from(PERIODS - 1)
        };
        let (b, d) = (per(base), per(direct));
        let t_base = mean(&measured(base, HOUR_S), IoRecord::throughput);
        let t_direct = mean(&measured(direct, HOUR_S), IoRecord::throughput);
        let share = direct.ios_from(1, HOUR_S).filter(|io| io.direct).count() as f64
            / direct.ios_from(1, HOUR_S).count().max(1) as f64;
        reductions.push(format!("{:.0}%", 100.0 * (1.0 - d / b)));
        rows.push(vec![
            format!("{k:.1} S"),
            format!("{:.0}", b / 1e9),
            format!("{:.0}", d / 1e9),
            format!("{:.0}%", 100.0 * (1.0 - d / b)),
            format!("{:.0}%", 100.0 * share),
            gb_s(t_base),
            gb_s(t_direct),
        ]);
        series[0].points.push((i as f64, b / 1e9));
        series[1].points.push((i as f64, d / 1e9));
    }
    Ok(Report {
        experiment: FIG7.name.into(),
        title: "BBOS Fig. 7: demoted data with and without writing cold checkpoints straight to the capacity tier".into(),
        headline: vec![Finding::new(
            "reduction of demoted data at DWPP 1.3 / 1.6 / 1.9 S",
            "up to 38%, growing with DWPP",
            reductions.join(" / "),
        )],
        paper: "Bypassing the burst buffer for checkpoints predicted cold cuts demoted data by up to 38%, \
                more as DWPP grows (1.3 / 1.6 / 1.9 S)."
            .into(),
        parameters: parameters(&[
            ("period", "1 hour, Low arrivals".into()),
            ("MTBF", "uniform in (0, 100] minutes per job".into()),
        ]),
        tables: vec![Table {
            title: "Bytes demoted per period (GB) and checkpoint throughput".into(),
            headers: [
                "DWPP",
                "demoted, buffer only",
                "demoted, with direct",
                "reduction",
                "checkpoints direct",
                "mean GB/s, buffer only",
                "mean GB/s, with direct",
            ]
            .map(String::from)
            .to_vec(),
            rows,
        }],
        plots: vec![bar_plot(
            FIG7.name,
            "BBOS Fig. 7: demoted GB per period",
            "data written per period (DWPP, × S)",
            "demoted per period (GB)",
            ks.iter().map(|k| format!("{k:.1} S")).collect(),
            series,
        )],
        notes: vec![],
        events: events(&results),
        checks: Vec::new(),
    })
}

/// Restart hit ratio of one configuration with failures on.
fn with_failures(mut c: CkptConfig, eviction: Eviction) -> CkptConfig {
    c.eviction = eviction;
    c.failures = true;
    c
}

/// Fig. 8: restart hit ratio on the buffer, BBOS vs LRU vs FIFO.
pub fn fig8(rc: &RunConfig) -> Result<Report, SimError> {
    let evictions = [BBOS_EVICTION, Eviction::Lru, Eviction::Fifo];
    let ks = [1.7, 1.9, 2.1];
    let variances = [("low", 20.0), ("med", 50.0), ("high", 100.0)];
    let mut configs = Vec::new();
    for &k in &ks {
        for (_, max_min) in variances {
            let n = jobs_for(k);
            let mut rng = SimRng::new(rc.seed ^ (k * 10.0) as u64);
            let mtbf = random_mtbf(&mut rng, n, max_min);
            for e in evictions {
                let base = config(
                    Scheme::Bbos,
                    jobs(n, HOUR_S, Congestion::Low, |i| mtbf[i as usize]),
                    HOUR_S,
                    rc.seed,
                );
                configs.push(with_failures(base, e));
            }
        }
    }
    let results = run_all(&configs, rc)?;
    let mut rows = Vec::new();
    let mut series: Vec<Series> = evictions
        .iter()
        .map(|e| Series {
            name: e.name().into(),
            points: vec![],
        })
        .collect();
    let mut categories = Vec::new();
    let mut best_ratio: f64 = 0.0;
    let mut i = 0;
    for &k in &ks {
        for (name, _) in variances {
            let ratios: Vec<f64> = (0..3).map(|j| results[i + j].hit_ratio_from(1)).collect();
            let restarts = results[i].restarts;
            let x = categories.len() as f64;
            categories.push(format!("{k:.1}S {name}"));
            for (s, &r) in series.iter_mut().zip(&ratios) {
                s.points.push((x, 100.0 * r));
            }
            let worst_peer = ratios[1].min(ratios[2]).max(1e-9);
            best_ratio = best_ratio.max(ratios[0] / worst_peer);
            rows.push(vec![
                format!("{k:.1} S"),
                name.into(),
                format!("{:.1}%", 100.0 * ratios[0]),
                format!("{:.1}%", 100.0 * ratios[1]),
                format!("{:.1}%", 100.0 * ratios[2]),
                format!("{:.2}×", ratios[0] / worst_peer),
                restarts.to_string(),
            ]);
            i += 3;
        }
    }
    Ok(Report {
        experiment: FIG8.name.into(),
        title: "BBOS Fig. 8: restart hit ratio on the buffer, BBOS vs LRU vs FIFO, DWPP 1.7-2.1 S, MTBF variance".into(),
        headline: vec![Finding::new(
            "largest BBOS hit ratio / the worse of LRU and FIFO",
            "up to 3.1× (3.4× in one case)",
            format!("{best_ratio:.2}×"),
        )],
        paper: "BBOS has the highest hit ratio, up to 3.1× (3.4× in one case) LRU/FIFO; every scheme's \
                ratio falls as DWPP grows; LRU/FIFO do not depend on the MTBF variance, BBOS improves \
                as it grows."
            .into(),
        parameters: parameters(&[
            ("period", "1 hour for every job, Low arrivals, 2 versions kept".into()),
            (
                "MTBF",
                "uniform in (0, 20 / 50 / 100] minutes (low / med / high variance); failures are \
                 Poisson per job; each asks for the job's newest complete checkpoint"
                    .into(),
            ),
        ]),
        tables: vec![Table {
            title: "Restart requests served by the buffer".into(),
            headers: [
                "DWPP",
                "MTBF variance",
                "BBOS",
                "LRU",
                "FIFO",
                "BBOS / worst",
                "restarts",
            ]
            .map(String::from)
            .to_vec(),
            rows,
        }],
        plots: vec![bar_plot(
            FIG8.name,
            "BBOS Fig. 8: restart hit ratio on the buffer",
            "data written per period (DWPP, × S) and MTBF variance",
            "restarts served by the buffer (%)",
            categories,
            series,
        )],
        notes: vec![format!("Largest BBOS / worst-of-LRU-FIFO ratio: {best_ratio:.2}×.")],
        events: events(&results),
        checks: Vec::new(),
    })
}

/// Fig. 9: version-aware eviction, periods 60 / 30 / 20 minutes.
pub fn fig9(rc: &RunConfig) -> Result<Report, SimError> {
    let mixes: [(&str, [u64; 3], f64, f64); 2] = [
        ("1:1:1", [1, 1, 1], 96.4, 80.1),
        ("5:2:1", [5, 2, 1], 92.5, 71.7),
    ];
    let periods = [HOUR_S, HOUR_S / 2.0, HOUR_S / 3.0];
    let target = 1.9 * S as f64;
    let mut configs = Vec::new();
    let mut dwpps = Vec::new();
    for (_, mix, _, _) in mixes {
        // Jobs per mix unit so that DWPP per hour is about 1.9 S.
        let per_unit: f64 = mix
            .iter()
            .zip(periods)
            .map(|(&m, p)| m as f64 * CKPT as f64 * HOUR_S / p)
            .sum();
        let units = (target / per_unit).round().max(1.0) as u64;
        let mut list = Vec::new();
        let mut rng = SimRng::new(rc.seed);
        for (&m, period) in mix.iter().zip(periods) {
            let n = m * units;
            for i in 0..n {
                list.push(CkptJob {
                    id: list.len() as u64,
                    period_s: period,
                    first_s: i as f64 * period / n as f64,
                    bytes: CKPT,
                    mtbf_s: (rng.unit() * 100.0).max(1.0) * 60.0,
                    versions: 3,
                });
            }
        }
        let dwpp: f64 = list.iter().map(|j| CKPT as f64 * HOUR_S / j.period_s).sum();
        dwpps.push(dwpp);
        for aware in [true, false] {
            let base = config(Scheme::Bbos, list.clone(), HOUR_S, rc.seed);
            configs.push(with_failures(
                base,
                Eviction::Bbos {
                    version_aware: aware,
                },
            ));
        }
    }
    let results = run_all(&configs, rc)?;
    let mut rows = Vec::new();
    let mut series = vec![
        Series {
            name: "version-aware".into(),
            points: vec![],
        },
        Series {
            name: "failure rate only".into(),
            points: vec![],
        },
    ];
    let mut headline = Vec::new();
    for (i, (name, _, paper_aware, paper_not)) in mixes.iter().enumerate() {
        let aware = results[2 * i].hit_ratio_from(1);
        let not = results[2 * i + 1].hit_ratio_from(1);
        series[0].points.push((i as f64, 100.0 * aware));
        series[1].points.push((i as f64, 100.0 * not));
        headline.push(Finding::new(
            format!("{name}, version-aware hit ratio"),
            format!("{paper_aware}%"),
            format!("{:.1}%", 100.0 * aware),
        ));
        headline.push(Finding::new(
            format!("{name}, failure rate only"),
            format!("{paper_not}%"),
            format!("{:.1}%", 100.0 * not),
        ));
        rows.push(vec![
            name.to_string(),
            format!("{:.2} S", dwpps[i] / S as f64),
            format!("{:.1}%", 100.0 * aware),
            format!("{paper_aware}%"),
            format!("{:.1}%", 100.0 * not),
            format!("{paper_not}%"),
            results[2 * i].restarts.to_string(),
        ]);
    }
    Ok(Report {
        experiment: FIG9.name.into(),
        title: "BBOS Fig. 9: version-aware eviction, checkpoint periods 60/30/20 min mixed 1:1:1 and 5:2:1, DWPP 1.9 S".into(),
        headline,
        paper: "Restart hit ratio on the buffer with version awareness 96.4% (1:1:1) and 92.5% (5:2:1); \
                without it (failure rate only) 80.1% and 71.7%."
            .into(),
        parameters: parameters(&[
            ("periods", "60 / 30 / 20 minutes; planner period 1 hour; 3 versions kept".into()),
            ("MTBF", "uniform in (0, 100] minutes per job".into()),
        ]),
        tables: vec![Table {
            title: "Restart requests served by the buffer".into(),
            headers: [
                "mix",
                "DWPP",
                "version-aware",
                "paper",
                "failure rate only",
                "paper",
                "restarts",
            ]
            .map(String::from)
            .to_vec(),
            rows,
        }],
        plots: vec![bar_plot(
            FIG9.name,
            "BBOS Fig. 9: restart hit ratio, version-aware or not",
            "job mix (jobs with 60 : 30 : 20 min periods)",
            "restarts served by the buffer (%)",
            mixes.iter().map(|m| m.0.to_string()).collect(),
            series,
        )],
        notes: vec![],
        events: events(&results),
        checks: Vec::new(),
    })
}
