//! BBOS Fig. 5 and §VI-B: throughput and latency of DataWarp, MaxBW,
//! MaxEff and BBOS, and the largest load each scheme serves (by bisection
//! on the job count).

use super::*;

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
    // Each finding sets two cells (scheme, DWPP, arrivals, column: 0 mean
    // GB/s, 1 mean latency, 2 max latency) side by side.
    type Cell = (Scheme, &'static str, Congestion, usize);
    let pair = |what: &str, paper: &str, a: Cell, b: Cell| {
        Finding::new(
            what,
            paper,
            format!(
                "{} / {}",
                cell(a.0, a.1, a.2, a.3),
                cell(b.0, b.1, b.2, b.3)
            ),
        )
    };
    let high = Congestion::High;
    let headline = vec![
        pair(
            "DataWarp 1.0 S, Low / High arrivals (mean GB/s)",
            "high under Low, the lowest under High",
            (Scheme::DataWarp, "1.0 S", Congestion::Low, 0),
            (Scheme::DataWarp, "1.0 S", high, 0),
        ),
        pair(
            "MaxBW 1.9 S High, mean / max latency (s)",
            "max far above mean",
            (Scheme::MaxBw, "1.9 S", high, 1),
            (Scheme::MaxBw, "1.9 S", high, 2),
        ),
        pair(
            "BBOS / MaxEff 1.9 S High, mean latency (s)",
            "BBOS lower",
            (Scheme::Bbos, "1.9 S", high, 1),
            (Scheme::MaxEff, "1.9 S", high, 1),
        ),
        pair(
            "MaxEff / BBOS 1.9 S High, mean GB/s",
            "MaxEff the lowest of the over-subscribed schemes",
            (Scheme::MaxEff, "1.9 S", high, 0),
            (Scheme::Bbos, "1.9 S", high, 0),
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
