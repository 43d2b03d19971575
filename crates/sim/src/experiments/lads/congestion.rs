//! LADS Fig. 10 / Table 1 and Fig. 11: round-robin against
//! congestion-aware scheduling under source and sink congestion (with the
//! factor × targets sensitivity sweep beside it), and the SSD spill at the
//! source with a congested sink (with its ablation beside it); each
//! declared as data ([`Figure`]).

use super::*;
use crate::experiments::figure::keyed;

/// A LADS scheduler setting (mode, T ms, M), or bbcp (`FileAtATime`).
type Setting = (Mode, u64, u32);

/// Fig. 10's settings: RR, CA with several (T ms, M), and bbcp.
const SETTINGS: [Setting; 7] = [
    (Mode::RoundRobin, 50, 8),
    (Mode::CongestionAware, 25, 8),
    (Mode::CongestionAware, 50, 2),
    (Mode::CongestionAware, 50, 8),
    (Mode::CongestionAware, 50, 32),
    (Mode::CongestionAware, 200, 8),
    (Mode::FileAtATime, 50, 8),
];

const RR: Setting = SETTINGS[0];

const BBCP: Setting = SETTINGS[6];

fn setting_name(&(mode, t, m): &Setting) -> String {
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

/// `t` MB/s with its gain over `base` MB/s.
fn with_gain(t: f64, base: f64) -> String {
    format!(
        "{} ({}{})",
        mb_s(t),
        if t >= base { "+" } else { "" },
        pct(t / base - 1.0)
    )
}

/// Fig. 10 (and Table 1): run time of the 100-file set, normal and with
/// congested source or sink targets, RR vs CA with several (T, M).
pub fn fig10(rc: &RunConfig) -> Result<Report, SimError> {
    let files = &big_set(rc);
    let none = Congestion::NONE;
    let conditions = vec!["Normal", "C-source", "C-sink"];
    type R = Sweep<Setting, &'static str, TransferResult>;
    let seconds = |r: &R, setting: Setting, condition: &str| r.at(&setting, &condition).seconds();
    // The best CA setting of a condition (shortest run time).
    let best_ca = move |r: &R, condition: &str| {
        SETTINGS
            .into_iter()
            .filter(|s| s.0 == Mode::CongestionAware)
            .map(|s| (seconds(r, s, condition), s))
            .min_by(|a, b| a.0.total_cmp(&b.0))
    };
    let bbcp_paper = |condition: &str| match condition {
        "C-source" => "run time +19% over normal (Table 1)",
        "C-sink" => "about the same as normal (Table 1)",
        _ => "slower than LADS (Table 1)",
    };
    // A cell of a LADS row; bbcp's is "-".
    let lads_only = |&(_, s): &(&str, Setting), cell: String| {
        if s == BBCP {
            "-".into()
        } else {
            cell
        }
    };
    let rows: Vec<(&str, Setting)> = conditions
        .iter()
        .flat_map(|&c| SETTINGS.map(|s| (c, s)))
        .collect();
    Figure::new(
        "LADS Fig. 10 / Table 1: run time with congested source or sink targets, RR vs CA (T, M)",
        "Transferring 100 GB: with part of the source congested, CA improves on RR by up to 35%; \
         too large a threshold, or too few or too many skips, lose the gain. With the sink \
         congested the impact is much larger and CA almost never helps, whatever (T, M): \
         buffered writes hide the targets' congestion from the service-time samples (mostly \
         false positives). bbcp (Table 1): +19% run time with the source congested, about \
         unchanged with the sink congested. The (T, M) values and run times are in the figure only.",
        parameters(
            rc,
            &[
                ("set", set_size(files)),
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
        SETTINGS.to_vec(),
        conditions.clone(),
        |&(mode, t, m), &condition| {
            let c = match mode {
                Mode::FileAtATime => bbcp(files, 8, rc),
                _ => lads(files, 8, scheduler(mode, t, m), rc),
            };
            Ok(match condition {
                "C-source" => with_congestion(c, PARTIAL, none),
                "C-sink" => with_congestion(c, none, PARTIAL),
                _ => with_congestion(c, none, none),
            })
        },
    )
    .headline(move |r| {
        let mut findings = Vec::new();
        for (condition, paper) in [("C-source", "up to +35%"), ("C-sink", "almost never better")] {
            if let Some((s, (_, t, m))) = best_ca(r, condition) {
                findings.push(Finding::new(
                    format!("{condition}: best CA ({t} ms, {m}) throughput vs RR"),
                    paper,
                    gain(seconds(r, RR, condition), s),
                ));
            }
            findings.push(Finding::new(
                format!("{condition}: bbcp run time vs normal"),
                bbcp_paper(condition),
                longer(seconds(r, BBCP, "Normal"), seconds(r, BBCP, condition)),
            ));
        }
        findings
    })
    .table("Run time per condition and scheduler", rows, |t| {
        t.col("condition", |_, (c, _): &(&str, Setting)| c.to_string())
            .col("scheduler", |_, (_, s)| setting_name(s))
            .col("run time s", move |r, &(c, s)| secs(seconds(r, s, c)))
            .col("MB/s", |r, (c, s)| mb_s(r.at(s, c).throughput_mb_s()))
            .col("throughput vs RR", move |r, row @ &(c, s)| {
                lads_only(row, gain(seconds(r, RR, c), seconds(r, s, c)))
            })
            .col("run time vs normal", move |r, &(c, s)| {
                let base = if s == BBCP { BBCP } else { RR };
                longer(seconds(r, base, "Normal"), seconds(r, s, c))
            })
            .col("source marks", move |r, row @ (c, s)| {
                let r = r.at(s, c);
                lads_only(row, marks(r.source.congested_marks, r.source_marks_on_congested))
            })
            .col("sink marks", move |r, row @ (c, s)| {
                let r = r.at(s, c);
                lads_only(row, marks(r.sink.congested_marks, r.sink_marks_on_congested))
            })
            .col("congested skips", move |r, row @ (c, s)| {
                lads_only(row, r.at(s, c).congested_skips().to_string())
            })
            .col("paper", move |_, &(c, (mode, ..))| {
                match (c, mode) {
                    (_, Mode::FileAtATime) => bbcp_paper(c),
                    ("C-source", Mode::CongestionAware) => "CA up to +35% over RR",
                    ("C-sink", Mode::CongestionAware) => "CA almost never better than RR",
                    ("C-sink", Mode::RoundRobin) => "impact much higher than at the source",
                    _ => "",
                }
                .to_string()
            })
    })
    .bars(
        [
            "congestion",
            "LADS Fig. 10: run time, RR vs CA",
            "congestion condition",
            "run time (s)",
        ],
        &conditions,
        |s| s.per_system(&SETTINGS[..6], setting_name, |i, _| i as f64, |r| r.seconds()),
    )
    .report_with(FIG10.name, rc, |r| {
        // Sensitivity: factor × congested targets, RR vs CA (50 ms, 8), each side.
        let normal_rr = seconds(r, RR, "Normal");
        let xs: Vec<X> = ["source", "sink"]
            .into_iter()
            .flat_map(|side| [2.0, 4.0, 8.0].into_iter().flat_map(move |f| [4, 8].map(|n| (side, f, n))))
            .collect();
        type X = (&'static str, f64, u32);
        let at = |r: &Sweep<Mode, X, TransferResult>, mode, x: &X| r.at(&mode, x).seconds();
        Figure::part(
            vec![Mode::RoundRobin, Mode::CongestionAware],
            xs.clone(),
            move |&mode, &(side, factor, targets)| {
                let congestion = Congestion {
                    factor,
                    targets,
                    ..PARTIAL
                };
                let c = lads(files, 8, scheduler(mode, 50, 8), rc);
                Ok(match side {
                    "source" => with_congestion(c, congestion, none),
                    _ => with_congestion(c, none, congestion),
                })
            },
        )
        .table(
            "Sensitivity: congestion factor and congested targets, RR vs CA (50 ms, 8)",
            xs,
            |t| {
                t.col("congested side", |_, (side, ..): &(&str, f64, u32)| side.to_string())
                    .col("factor", |_, (_, factor, _)| format!("{factor}×"))
                    .col("targets", |_, (.., targets)| format!("{targets} of 16"))
                    .col("RR s", move |r, x| secs(at(r, Mode::RoundRobin, x)))
                    .col("CA s", move |r, x| secs(at(r, Mode::CongestionAware, x)))
                    .col("CA throughput vs RR", move |r, x| {
                        gain(at(r, Mode::RoundRobin, x), at(r, Mode::CongestionAware, x))
                    })
                    .col("RR run time vs normal", move |r, x| {
                        longer(normal_rr, at(r, Mode::RoundRobin, x))
                    })
            },
        )
    })
}

/// Fig. 11: SSD spill at the source with the sink congested in periods
/// separated by 10 s of idleness; throughput vs source DRAM, with and
/// without SSD.
pub fn fig11(rc: &RunConfig) -> Result<Report, SimError> {
    let files = big_set(rc);
    let dram = vec![64u32, 128, 256, 512, 1024, 2048];
    let ssd = [0u32, 256, 512, 1024, 2048];
    let versus = vec![256u32, 512, 1024];
    // Throughput with `d` MiB of source DRAM and `s` MiB of SSD spill.
    let tput = |r: &Sweep<u32, u32, TransferResult>, d: u32, s: u32| r.at(&s, &d).throughput_mb_s();
    Figure::new(
        "LADS Fig. 11: SSD spill at the source, sink congested with 10 s idle gaps",
        "Throughput rises with the source's memory; a small SSD spill buffer raises it by 37% over \
         no SSD, and doubling DRAM reaches the same throughput at a higher cost (Fig. 11(b)). \
         Sink RMA buffer 256 MB, 8 I/O threads each side, no congestion-aware scheduling. \
         Memory and SSD sizes are in the figure only.",
        parameters(
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
        ssd.to_vec(),
        dram.clone(),
        |&s, &d| Ok(spill_config(&files, d, s, rc)),
    )
    .headline(move |r| {
        // The largest gain of any SSD size over no SSD, as its table cell.
        let best = r
            .xs()
            .iter()
            .flat_map(|&d| ssd[1..].iter().map(move |&s| (d, s)))
            .max_by(|&(d, s), &(e, t)| {
                (tput(r, d, s) / tput(r, d, 0)).total_cmp(&(tput(r, e, t) / tput(r, e, 0)))
            });
        let best = best.map(|(d, s)| {
            Finding::new(
                format!("largest gain of an SSD spill over no SSD (DRAM {d} MiB + SSD {s} MiB, MB/s)"),
                "+37% with a small SSD",
                with_gain(tput(r, d, s), tput(r, d, 0)),
            )
        });
        best.into_iter()
            .chain([256, 512, 1024].map(|d| {
                Finding::new(
                    format!("DRAM {d} MiB + SSD {d} MiB vs DRAM {} MiB", 2 * d),
                    "the same throughput",
                    pct(tput(r, d, d) / tput(r, 2 * d, 0) - 1.0),
                )
            }))
            .collect()
    })
    .table(
        "Throughput (MB/s) vs source DRAM and SSD spill (gain over no SSD)",
        dram,
        |t| {
            t.col("source DRAM", |_, d: &u32| format!("{d} MiB"))
                .each(
                    ssd,
                    |s| match s {
                        0 => "no SSD MB/s".to_string(),
                        _ => format!("+ SSD {s} MiB"),
                    },
                    move |r, &d, s| match s {
                        0 => mb_s(tput(r, d, 0)),
                        _ => with_gain(tput(r, d, s), tput(r, d, 0)),
                    },
                )
                .col("objects spilled (2 GiB SSD)", |r, d| r.at(&2048, d).spilled.to_string())
        },
    )
    .table("SSD instead of more DRAM: DRAM d + SSD d vs DRAM 2d", versus, |t| {
        t.col("DRAM d", |_, d: &u32| format!("{d} MiB"))
            .col("no SSD", move |r, &d| mb_s(tput(r, d, 0)))
            .col("d + SSD d", move |r, &d| mb_s(tput(r, d, d)))
            .col("DRAM 2d", move |r, &d| mb_s(tput(r, 2 * d, 0)))
            .col("difference", move |r, &d| {
                pct(tput(r, d, d) / tput(r, 2 * d, 0) - 1.0)
            })
    })
    .log2_lines(
        [
            "spill",
            "LADS Fig. 11: throughput vs source DRAM, with and without SSD",
            "source DRAM buffer (MiB)",
            "throughput (MB/s)",
        ],
        |series| {
            let name = |&s: &u32| match s {
                0 => "no SSD".to_string(),
                _ => format!("SSD {s} MiB"),
            };
            series.per_system(&ssd, name, |_, &d| f64::from(d), |r| r.throughput_mb_s())
        },
    )
    .report_with(FIG11.name, rc, |_| fig11_ablation(&files, rc))
}

/// Fig. 11's transfer: the sink congested with gaps and a 256 MiB
/// buffer, `dram` MiB of source buffer and `spill` MiB of SSD.
fn spill_config(files: &[u64], dram: u32, spill: u32, rc: &RunConfig) -> TransferConfig {
    let mut c = lads(files, 8, round_robin(), rc);
    c.sink.congestion = WIDE_WITH_GAPS;
    c.sink.buffer_slots = 256;
    c.source.buffer_slots = dram;
    c.spill_slots = spill;
    c
}

/// What limits the gain of a small spill (DRAM 256 MiB + SSD 512 MiB over
/// DRAM 256 MiB): Fig. 11's set-up with one thing changed at a time — the
/// sink's page cache, its RMA buffer, the congestion's rhythm, the SSD's
/// speed (docs/results/lads.md).
fn fig11_ablation<'a>(
    files: &'a [u64],
    rc: &'a RunConfig,
) -> Figure<'a, u32, &'static str, TransferConfig> {
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
    let names: Vec<&str> = cases.iter().map(|(name, _)| *name).collect();
    let tput = |r: &Sweep<u32, &'static str, TransferResult>, spill, name: &&'static str| {
        r.at(&spill, name).throughput_mb_s()
    };
    Figure::part(vec![0, 512], names.clone(), move |&spill, name| {
        let mut c = spill_config(files, 256, spill, rc);
        keyed(&cases, name)(&mut c);
        Ok(c)
    })
    .table(
        "Ablation: DRAM 256 MiB, no SSD vs SSD 512 MiB, one change at a time (MB/s)",
        names,
        |t| {
            t.col("change", |_, name: &&str| name.to_string())
                .col("no SSD", move |r, name| mb_s(tput(r, 0, name)))
                .col("SSD 512 MiB", move |r, name| mb_s(tput(r, 512, name)))
                .col("gain", move |r, name| {
                    let (without, with) = (tput(r, 0, name), tput(r, 512, name));
                    format!(
                        "{}{}",
                        if with >= without { "+" } else { "" },
                        pct(with / without - 1.0)
                    )
                })
                .col("objects spilled", |r, name| {
                    r.at(&512, name).spilled.to_string()
                })
        },
    )
}
