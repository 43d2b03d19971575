//! BBOS Fig. 1 and 2: a static 90% demotion threshold under growing data
//! per period and under crowded arrivals, with the Fig. 1 ablation
//! (arrival crowding, the write cost of demotion).

use super::*;

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
