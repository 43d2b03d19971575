//! LADS Fig. 10 / Table 1 and Fig. 11: round-robin against
//! congestion-aware scheduling under source and sink congestion (with the
//! factor × targets sensitivity sweep), and the SSD spill at the source
//! with a congested sink (with its ablation).

use super::*;

/// Fig. 10's (T, M) settings: RR, then CA with (T ms, M).
const SETTINGS: [(Mode, u64, u32); 6] = [
    (Mode::RoundRobin, 50, 8),
    (Mode::CongestionAware, 25, 8),
    (Mode::CongestionAware, 50, 2),
    (Mode::CongestionAware, 50, 8),
    (Mode::CongestionAware, 50, 32),
    (Mode::CongestionAware, 200, 8),
];

fn setting_name(mode: Mode, t: u64, m: u32) -> String {
    match mode {
        Mode::CongestionAware => format!("CA ({t} ms, {m})"),
        Mode::RoundRobin => "RR".into(),
        Mode::FileAtATime => "bbcp".into(),
    }
}

fn with_congestion(mut c: TransferConfig, source: Congestion, sink: Congestion) -> TransferConfig {
    c.source.congestion = source;
    c.sink.congestion = sink;
    c
}

/// Fig. 10 (and Table 1): run time of the 100-file set, normal and with
/// congested source or sink targets, RR vs CA with several (T, M).
pub fn fig10(rc: &RunConfig) -> Result<Report, SimError> {
    let files = big_set(rc);
    let none = Congestion::NONE;
    let conditions = [
        ("Normal", none, none),
        ("C-source", PARTIAL, none),
        ("C-sink", none, PARTIAL),
    ];
    let mut configs = Vec::new();
    for &(_, source, sink) in &conditions {
        for &(mode, t, m) in &SETTINGS {
            configs.push(with_congestion(
                lads(&files, 8, scheduler(mode, t, m), rc),
                source,
                sink,
            ));
        }
        configs.push(with_congestion(bbcp(&files, 8, rc), source, sink));
    }
    // Sensitivity: factor × congested targets, RR vs CA (50 ms, 8), each side.
    let factors = [2.0, 4.0, 8.0];
    let counts = [4u32, 8];
    let sweep_start = configs.len();
    for side in ["source", "sink"] {
        for &factor in &factors {
            for &targets in &counts {
                let congestion = Congestion {
                    factor,
                    targets,
                    ..PARTIAL
                };
                let (source, sink) = if side == "source" {
                    (congestion, none)
                } else {
                    (none, congestion)
                };
                for mode in [Mode::RoundRobin, Mode::CongestionAware] {
                    configs.push(with_congestion(
                        lads(&files, 8, scheduler(mode, 50, 8), rc),
                        source,
                        sink,
                    ));
                }
            }
        }
    }
    let results = run_all(&configs, rc)?;
    let per_condition = SETTINGS.len() + 1;
    let mut rows = Vec::new();
    let mut series: Vec<Series> = SETTINGS
        .iter()
        .map(|&(mode, t, m)| Series {
            name: setting_name(mode, t, m),
            points: Vec::new(),
        })
        .collect();
    let normal_rr = results[0].seconds();
    let normal_bbcp = results[SETTINGS.len()].seconds();
    let mut headline = Vec::new();
    for (ci, (condition, _, _)) in conditions.iter().enumerate() {
        let base = ci * per_condition;
        let rr = results[base].seconds();
        // The best CA setting of this condition (shortest run time).
        let best_ca = SETTINGS
            .iter()
            .enumerate()
            .filter(|(_, s)| s.0 == Mode::CongestionAware)
            .map(|(k, &(_, t, m))| (results[base + k].seconds(), t, m))
            .min_by(|a, b| a.0.total_cmp(&b.0));
        let paper_ca = match *condition {
            "C-source" => Some("up to +35%"),
            "C-sink" => Some("almost never better"),
            _ => None,
        };
        if let (Some(paper), Some((seconds, t, m))) = (paper_ca, best_ca) {
            headline.push(Finding::new(
                format!("{condition}: best CA ({t} ms, {m}) throughput vs RR"),
                paper,
                gain(rr, seconds),
            ));
        }
        for (k, &(mode, t, m)) in SETTINGS.iter().enumerate() {
            let r = &results[base + k];
            series[k].points.push((ci as f64, r.seconds()));
            let paper = match (*condition, mode) {
                ("C-source", Mode::CongestionAware) => "CA up to +35% over RR",
                ("C-sink", Mode::CongestionAware) => "CA almost never better than RR",
                ("C-sink", Mode::RoundRobin) => "impact much higher than at the source",
                _ => "",
            };
            rows.push(vec![
                condition.to_string(),
                setting_name(mode, t, m),
                secs(r.seconds()),
                mb_s(r.throughput_mb_s()),
                gain(rr, r.seconds()),
                longer(normal_rr, r.seconds()),
                marks(r.source.congested_marks, r.source_marks_on_congested),
                marks(r.sink.congested_marks, r.sink_marks_on_congested),
                r.congested_skips().to_string(),
                paper.to_string(),
            ]);
        }
        let b = &results[base + SETTINGS.len()];
        let paper = match *condition {
            "C-source" => "run time +19% over normal (Table 1)",
            "C-sink" => "about the same as normal (Table 1)",
            _ => "slower than LADS (Table 1)",
        };
        if ci > 0 {
            headline.push(Finding::new(
                format!("{condition}: bbcp run time vs normal"),
                paper,
                longer(normal_bbcp, b.seconds()),
            ));
        }
        rows.push(vec![
            condition.to_string(),
            "bbcp".into(),
            secs(b.seconds()),
            mb_s(b.throughput_mb_s()),
            "-".into(),
            longer(normal_bbcp, b.seconds()),
            "-".into(),
            "-".into(),
            "-".into(),
            paper.to_string(),
        ]);
    }
    let mut sweep_rows = Vec::new();
    let mut i = sweep_start;
    for side in ["source", "sink"] {
        for &factor in &factors {
            for &targets in &counts {
                let (rr, ca) = (&results[i], &results[i + 1]);
                i += 2;
                sweep_rows.push(vec![
                    side.to_string(),
                    format!("{factor}×"),
                    format!("{targets} of 16"),
                    secs(rr.seconds()),
                    secs(ca.seconds()),
                    gain(rr.seconds(), ca.seconds()),
                    longer(normal_rr, rr.seconds()),
                ]);
            }
        }
    }
    Ok(Report {
        experiment: FIG10.name.into(),
        title: "LADS Fig. 10 / Table 1: run time with congested source or sink targets, RR vs CA (T, M)".into(),
        headline,
        paper: "Transferring 100 GB: with part of the source congested, CA improves on RR by up to 35%; \
                too large a threshold, or too few or too many skips, lose the gain. With the sink \
                congested the impact is much larger and CA almost never helps, whatever (T, M): \
                buffered writes hide the targets' congestion from the service-time samples (mostly \
                false positives). bbcp (Table 1): +19% run time with the source congested, about \
                unchanged with the sink congested. The (T, M) values and run times are in the figure only."
            .into(),
        parameters: parameters(
            rc,
            &[
                ("set", set_size(&files)),
                ("threads", "8 per side".into()),
                (
                    "congestion",
                    "4 of the 16 targets serve 8× slower; a new 4, drawn from the seed, every 10 s \
                     (the paper does not describe its congestion); the same schedule at the source \
                     (C-source) or the sink (C-sink)"
                        .into(),
                ),
                ("CA", "at both ends, same (T, M)".into()),
            ],
        ),
        tables: vec![
            Table {
                title: "Run time per condition and scheduler".into(),
                headers: [
                    "condition",
                    "scheduler",
                    "run time s",
                    "MB/s",
                    "throughput vs RR",
                    "run time vs normal",
                    "source marks",
                    "sink marks",
                    "congested skips",
                    "paper",
                ]
                .map(String::from)
                .to_vec(),
                rows,
            },
            Table {
                title: "Sensitivity: congestion factor and congested targets, RR vs CA (50 ms, 8)".into(),
                headers: [
                    "congested side",
                    "factor",
                    "targets",
                    "RR s",
                    "CA s",
                    "CA throughput vs RR",
                    "RR run time vs normal",
                ]
                .map(String::from)
                .to_vec(),
                rows: sweep_rows,
            },
        ],
        plots: vec![bar_plot(
            &format!("{}-congestion", FIG10.name),
            "LADS Fig. 10: run time, RR vs CA",
            "congestion condition",
            "run time (s)",
            conditions.iter().map(|c| c.0.to_string()).collect(),
            series,
        )],
        notes: Vec::new(),
        events: events(&results),
        checks: Vec::new(),
    })
}

/// Fig. 11: SSD spill at the source with the sink congested in periods
/// separated by 10 s of idleness; throughput vs source DRAM, with and
/// without SSD.
pub fn fig11(rc: &RunConfig) -> Result<Report, SimError> {
    let files = big_set(rc);
    let dram = [64u32, 128, 256, 512, 1024, 2048];
    let ssd = [0u32, 256, 512, 1024, 2048];
    let mut configs = Vec::new();
    for &d in &dram {
        for &s in &ssd {
            let mut c = lads(&files, 8, round_robin(), rc);
            c.sink.congestion = WIDE_WITH_GAPS;
            c.sink.buffer_slots = 256;
            c.source.buffer_slots = d;
            c.spill_slots = s;
            configs.push(c);
        }
    }
    let results = run_all(&configs, rc)?;
    let at = |d: u32, s: u32| {
        let i = dram.iter().position(|&x| x == d).expect("dram size");
        let j = ssd.iter().position(|&x| x == s).expect("ssd size");
        &results[i * ssd.len() + j]
    };
    let mut rows = Vec::new();
    let mut series: Vec<Series> = ssd
        .iter()
        .map(|s| Series {
            name: if *s == 0 {
                "no SSD".into()
            } else {
                format!("SSD {s} MiB")
            },
            points: Vec::new(),
        })
        .collect();
    for &d in &dram {
        let base = at(d, 0).throughput_mb_s();
        let mut row = vec![format!("{d} MiB")];
        for (j, &s) in ssd.iter().enumerate() {
            let r = at(d, s);
            let t = r.throughput_mb_s();
            series[j].points.push((f64::from(d), t));
            row.push(if s == 0 {
                mb_s(t)
            } else {
                format!(
                    "{} ({}{})",
                    mb_s(t),
                    if t >= base { "+" } else { "" },
                    pct(t / base - 1.0)
                )
            });
        }
        row.push(at(d, 2048).spilled.to_string());
        rows.push(row);
    }
    let mut headers = vec!["source DRAM".to_string()];
    headers.extend(ssd.iter().map(|&s| {
        if s == 0 {
            "no SSD MB/s".to_string()
        } else {
            format!("+ SSD {s} MiB")
        }
    }));
    headers.push("objects spilled (2 GiB SSD)".into());
    // The largest gain of any SSD size over no SSD, as its table cell.
    let best_spill = dram
        .iter()
        .flat_map(|&d| ssd.iter().filter(|&&s| s > 0).map(move |&s| (d, s)))
        .max_by(|a, b| {
            let g = |(d, s): (u32, u32)| at(d, s).throughput_mb_s() / at(d, 0).throughput_mb_s();
            g(*a).total_cmp(&g(*b))
        });
    let mut headline = Vec::new();
    if let Some((d, s)) = best_spill {
        let (t, base) = (at(d, s).throughput_mb_s(), at(d, 0).throughput_mb_s());
        headline.push(Finding::new(
            format!("largest gain of an SSD spill over no SSD (DRAM {d} MiB + SSD {s} MiB, MB/s)"),
            "+37% with a small SSD",
            format!(
                "{} ({}{})",
                mb_s(t),
                if t >= base { "+" } else { "" },
                pct(t / base - 1.0)
            ),
        ));
    }
    let mut versus = Vec::new();
    for &d in &[256u32, 512, 1024] {
        let with_ssd = at(d, d).throughput_mb_s();
        let doubled = at(2 * d, 0).throughput_mb_s();
        headline.push(Finding::new(
            format!("DRAM {d} MiB + SSD {d} MiB vs DRAM {} MiB", 2 * d),
            "the same throughput",
            pct(with_ssd / doubled - 1.0),
        ));
        versus.push(vec![
            format!("{d} MiB"),
            mb_s(at(d, 0).throughput_mb_s()),
            mb_s(with_ssd),
            mb_s(doubled),
            pct(with_ssd / doubled - 1.0),
        ]);
    }
    let (ablation, ablation_results) = fig11_ablation(&files, rc)?;
    Ok(Report {
        experiment: FIG11.name.into(),
        title: "LADS Fig. 11: SSD spill at the source, sink congested with 10 s idle gaps".into(),
        headline,
        paper: "Throughput rises with the source's memory; a small SSD spill buffer raises it by 37% over \
                no SSD, and doubling DRAM reaches the same throughput at a higher cost (Fig. 11(b)). \
                Sink RMA buffer 256 MB, 8 I/O threads each side, no congestion-aware scheduling. \
                Memory and SSD sizes are in the figure only."
            .into(),
        parameters: parameters(
            rc,
            &[
                ("set", set_size(&files)),
                (
                    "congestion",
                    "sink: all 16 targets 8× slower for 10 s, then 10 s idle, repeated (the paper's \
                     wide-spread sink congestion with 10 s gaps; its congested period is not given)"
                        .into(),
                ),
                (
                    "spill SSD",
                    "Fusion-io ioDrive Duo: 2 channels of 750 MB/s read, 500 MB/s write, 30 µs; one \
                     SSD thread copies spilled objects back into memory"
                        .into(),
                ),
                ("scheduler", "RR at both ends; sink buffer 256 MiB".into()),
            ],
        ),
        tables: vec![
            Table {
                title: "Throughput (MB/s) vs source DRAM and SSD spill (gain over no SSD)".into(),
                headers,
                rows,
            },
            Table {
                title: "SSD instead of more DRAM: DRAM d + SSD d vs DRAM 2d".into(),
                headers: ["DRAM d", "no SSD", "d + SSD d", "DRAM 2d", "difference"]
                    .map(String::from)
                    .to_vec(),
                rows: versus,
            },
            ablation,
        ],
        plots: vec![log2_line_plot(
            &format!("{}-spill", FIG11.name),
            "LADS Fig. 11: throughput vs source DRAM, with and without SSD",
            "source DRAM buffer (MiB)",
            "throughput (MB/s)",
            series,
        )],
        notes: Vec::new(),
        events: events(&results) + events(&ablation_results),
        checks: Vec::new(),
    })
}

/// What limits the gain of a small spill (DRAM 256 MiB + SSD 512 MiB over
/// DRAM 256 MiB): Fig. 11's set-up with one thing changed at a time — the
/// sink's page cache, its RMA buffer, the congestion's rhythm, the SSD's
/// speed (docs/results/lads.md).
fn fig11_ablation(files: &[u64], rc: &RunConfig) -> Result<(Table, Vec<TransferResult>), SimError> {
    let base = |spill: u32| {
        let mut c = lads(files, 8, round_robin(), rc);
        c.sink.congestion = WIDE_WITH_GAPS;
        c.sink.buffer_slots = 256;
        c.source.buffer_slots = 256;
        c.spill_slots = spill;
        c
    };
    let rhythm = |busy: u64, idle: u64| Congestion {
        busy: Duration::from_secs(busy),
        idle: Duration::from_secs(idle),
        ..WIDE_WITH_GAPS
    };
    type Change = Box<dyn Fn(&mut TransferConfig)>;
    let cases: Vec<(&str, Change)> = vec![
        ("as Fig. 11", Box::new(|_| {})),
        (
            "sink page cache 64 MiB",
            Box::new(|c| c.dirty_limit_bytes = 64 * MIB),
        ),
        (
            "sink page cache 16 MiB",
            Box::new(|c| c.dirty_limit_bytes = 16 * MIB),
        ),
        ("sink buffer 64 MiB", Box::new(|c| c.sink.buffer_slots = 64)),
        (
            "congestion 20 s on / 20 s off",
            Box::new(move |c| c.sink.congestion = rhythm(20, 20)),
        ),
        (
            "congestion 10 s on / 30 s off",
            Box::new(move |c| c.sink.congestion = rhythm(10, 30)),
        ),
        (
            "congestion 2 s on / 2 s off",
            Box::new(move |c| c.sink.congestion = rhythm(2, 2)),
        ),
        (
            "congestion 1 s on / 1 s off",
            Box::new(move |c| c.sink.congestion = rhythm(1, 1)),
        ),
        (
            "congestion 30 s on / 10 s off",
            Box::new(move |c| c.sink.congestion = rhythm(30, 10)),
        ),
        (
            "SSD 4× faster",
            Box::new(|c| {
                c.ssd.read_bytes_per_s *= 4.0;
                c.ssd.write_bytes_per_s *= 4.0;
            }),
        ),
        (
            "sink page cache 16 MiB, congestion 10 s on / 30 s off",
            Box::new(move |c| {
                c.dirty_limit_bytes = 16 * MIB;
                c.sink.congestion = rhythm(10, 30);
            }),
        ),
    ];
    let mut configs = Vec::new();
    for (_, change) in &cases {
        for spill in [0, 512] {
            let mut c = base(spill);
            change(&mut c);
            configs.push(c);
        }
    }
    let results = run_all(&configs, rc)?;
    let rows = cases
        .iter()
        .enumerate()
        .map(|(k, (name, _))| {
            let (without, with) = (
                results[2 * k].throughput_mb_s(),
                results[2 * k + 1].throughput_mb_s(),
            );
            vec![
                name.to_string(),
                mb_s(without),
                mb_s(with),
                format!(
                    "{}{}",
                    if with >= without { "+" } else { "" },
                    pct(with / without - 1.0)
                ),
                results[2 * k + 1].spilled.to_string(),
            ]
        })
        .collect();
    let table = Table {
        title: "Ablation: DRAM 256 MiB, no SSD vs SSD 512 MiB, one change at a time (MB/s)".into(),
        headers: ["change", "no SSD", "SSD 512 MiB", "gain", "objects spilled"]
            .map(String::from)
            .to_vec(),
        rows,
    };
    Ok((table, results))
}
