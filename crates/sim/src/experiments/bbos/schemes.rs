//! BBOS Fig. 5 and §VI-B: throughput and latency of DataWarp, MaxBW,
//! MaxEff and BBOS (declared, [`Figure`]), and the largest load each
//! scheme serves (by bisection on the job count: custom, as each run's
//! job count depends on the one before).

use super::*;
use crate::experiments::figure::{Figure, Sweep};

/// Mean throughput, mean and max latency, and mean time stalled on a
/// full tier of a run's measured checkpoints.
fn fig5_stats(r: &CkptResult) -> [f64; 4] {
    let ios = measured(r, PERIOD_S);
    [
        mean(&ios, IoRecord::throughput),
        mean(&ios, IoRecord::latency_s),
        ios.iter().map(|io| io.latency_s()).fold(0.0, f64::max),
        mean(&ios, |io| io.stalled_s),
    ]
}

/// Fig. 5: throughput and latency of DataWarp, MaxBW, MaxEff and BBOS.
pub fn fig5(rc: &RunConfig) -> Result<Report, SimError> {
    use Scheme::{Bbos, DataWarp, MaxBw, MaxEff};
    let schemes = [DataWarp, MaxBw, MaxEff, Bbos];
    // (arrivals, DWPP × S): DataWarp runs at 1.0 S only, the others above.
    let xs: Vec<(Congestion, f64)> = Congestion::ALL
        .into_iter()
        .flat_map(|c| [1.0, 1.3, 1.6, 1.9].map(|k| (c, k)))
        .collect();
    let runs = |s: &Scheme, &(_, k): &(Congestion, f64)| (*s == DataWarp) == (k == 1.0);
    let rows: Vec<(Scheme, (Congestion, f64))> = xs
        .iter()
        .flat_map(|&x| {
            schemes
                .into_iter()
                .filter(move |s| runs(s, &x))
                .map(move |s| (s, x))
        })
        .collect();
    // A cell of the table: 0 mean GB/s, 1 mean latency, 2 max latency.
    let cell = |r: &Sweep<Scheme, (Congestion, f64), CkptResult>, s, c, k, i: usize| {
        let stats = fig5_stats(r.at(&s, &(c, k)));
        [gb_s(stats[0]), secs(stats[1]), secs(stats[2])][i].clone()
    };
    let high = Congestion::High;
    // Each finding sets two cells (scheme, DWPP, arrivals, column) side by side.
    let pairs = [
        (
            "DataWarp 1.0 S, Low / High arrivals (mean GB/s)",
            "high under Low, the lowest under High",
            [
                (DataWarp, Congestion::Low, 1.0, 0),
                (DataWarp, high, 1.0, 0),
            ],
        ),
        (
            "MaxBW 1.9 S High, mean / max latency (s)",
            "max far above mean",
            [(MaxBw, high, 1.9, 1), (MaxBw, high, 1.9, 2)],
        ),
        (
            "BBOS / MaxEff 1.9 S High, mean latency (s)",
            "BBOS lower",
            [(Bbos, high, 1.9, 1), (MaxEff, high, 1.9, 1)],
        ),
        (
            "MaxEff / BBOS 1.9 S High, mean GB/s",
            "MaxEff the lowest of the over-subscribed schemes",
            [(MaxEff, high, 1.9, 0), (Bbos, high, 1.9, 0)],
        ),
    ];
    let categories = xs.iter().map(|(c, k)| format!("{} {k:.1}S", c.name()));
    let axis = "arrivals (Low/Med/High) and data written per period (DWPP, × S)";
    Figure::new(
        "BBOS Fig. 5: checkpoint throughput and latency, DataWarp / MaxBW / MaxEff / BBOS, DWPP 1.0-1.9 S, Low/Med/High",
        "DataWarp (1.0 S only): high throughput under Low, the lowest under High (jobs overlap), \
         latency similar to BBOS. MaxBW: the highest throughput when nothing waits (Low; Med at \
         1.3 S), but at Med/High from 1.6 S jobs stop for space and latency and its variance grow \
         (max far above mean). MaxEff: the lowest throughput of the over-subscribed schemes and, at \
         large DWPP, higher latency than BBOS. BBOS: throughput between, lower latency than MaxEff \
         and no explosion of the wait.",
        parameters(&[(
            "jobs",
            "DataWarp 27 (≤ S); others 36 / 44 / 52 for 1.3 / 1.6 / 1.9 S".into(),
        )]),
        schemes.to_vec(),
        xs.clone(),
        |&s, &(c, k)| {
            // Dedicated allocation never grants more than S.
            let n = if !s.oversubscribes() { S / CKPT } else { jobs_for(k) };
            Ok(config(s, jobs(n, PERIOD_S, c, |_| HOUR_S), PERIOD_S, 1))
        },
    )
    .only(runs)
    .headline(move |r| {
        pairs
            .iter()
            .map(|&(what, paper, [a, b])| {
                let sim = format!("{} / {}", cell(r, a.0, a.1, a.2, a.3), cell(r, b.0, b.1, b.2, b.3));
                Finding::new(what, paper, sim)
            })
            .collect()
    })
    .table(
        "Checkpoint throughput (execution) and latency (arrival to completion)",
        rows,
        |t| {
            let stats = |r: &Sweep<_, _, _>, (s, x): &(Scheme, (Congestion, f64))| fig5_stats(r.at(s, x));
            t.col("arrivals", |_, (_, (c, _)): &(Scheme, (Congestion, f64))| c.name().into())
                .col("DWPP", |_, (_, (_, k))| format!("{k:.1} S"))
                .col("scheme", |_, (s, _)| s.name().into())
                .col("mean GB/s", move |r, row| gb_s(stats(r, row)[0]))
                .col("mean latency s", move |r, row| secs(stats(r, row)[1]))
                .col("max latency s", move |r, row| secs(stats(r, row)[2]))
                .col("mean s stalled on a full tier", move |r, row| format!("{:.1}", stats(r, row)[3]))
                .col("unfinished", |r, (s, x)| r.at(s, x).unfinished.to_string())
        },
    )
    .bars(
        ["throughput", "BBOS Fig. 5(a): mean checkpoint throughput", axis, "mean checkpoint throughput (GB/s)"],
        categories.clone(),
        |s| s.per_system(&schemes, |s| s.name().into(), |i, _| i as f64, |r| fig5_stats(r)[0] / 1e9),
    )
    .bars(
        ["latency", "BBOS Fig. 5(b): mean checkpoint latency", axis, "mean checkpoint latency (s)"],
        categories,
        |s| s.per_system(&schemes, |s| s.name().into(), |i, _| i as f64, |r| fig5_stats(r)[1]),
    )
    .report(FIG5.name, rc)
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
