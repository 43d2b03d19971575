//! BBOS Fig. 7, 8 and 9: cold checkpoints straight to the capacity tier,
//! restart hit ratio against LRU and FIFO, and version-aware eviction;
//! each declared as data ([`Figure`]).

use super::*;
use crate::experiments::figure::{Figure, Sweep};

/// Fig. 7: writing cold checkpoints straight to the capacity tier.
pub fn fig7(rc: &RunConfig) -> Result<Report, SimError> {
    let ks = vec![1.3, 1.6, 1.9];
    // Bytes demoted per period, from the second period on.
    let per = |r: &CkptResult| {
        r.demoted_per_period[1..PERIODS as usize]
            .iter()
            .sum::<f64>()
            / f64::from(PERIODS - 1)
    };
    let reduction = move |r: &Sweep<bool, f64, CkptResult>, k: &f64| {
        1.0 - per(r.at(&true, k)) / per(r.at(&false, k))
    };
    let gb_s_of = |r: &CkptResult| gb_s(mean(&measured(r, HOUR_S), IoRecord::throughput));
    Figure::new(
        "BBOS Fig. 7: demoted data with and without writing cold checkpoints straight to the capacity tier",
        "Bypassing the burst buffer for checkpoints predicted cold cuts demoted data by up to 38%, \
         more as DWPP grows (1.3 / 1.6 / 1.9 S).",
        parameters(&[
            ("period", "1 hour, Low arrivals".into()),
            ("MTBF", "uniform in (0, 100] minutes per job".into()),
        ]),
        vec![false, true],
        ks.clone(),
        |&direct, &k| {
            let n = jobs_for(k);
            let mtbf = random_mtbf(&mut SimRng::new(rc.seed), n, 100.0);
            let jobs = jobs(n, HOUR_S, Congestion::Low, |i| mtbf[i as usize]);
            Ok(CkptConfig { direct, ..config(Scheme::Bbos, jobs, HOUR_S, rc.seed) })
        },
    )
    .headline(move |r| {
        let reductions: Vec<String> =
            r.xs().iter().map(|k| format!("{:.0}%", 100.0 * reduction(r, k))).collect();
        vec![Finding::new(
            "reduction of demoted data at DWPP 1.3 / 1.6 / 1.9 S",
            "up to 38%, growing with DWPP",
            reductions.join(" / "),
        )]
    })
    .table("Bytes demoted per period (GB) and checkpoint throughput", ks.clone(), |t| {
        t.col("DWPP", |_, k: &f64| format!("{k:.1} S"))
            .col("demoted, buffer only", move |r, k| format!("{:.0}", per(r.at(&false, k)) / 1e9))
            .col("demoted, with direct", move |r, k| format!("{:.0}", per(r.at(&true, k)) / 1e9))
            .col("reduction", move |r, k| format!("{:.0}%", 100.0 * reduction(r, k)))
            .col("checkpoints direct", |r, k| {
                let direct = r.at(&true, k);
                let share = direct.ios_from(1, HOUR_S).filter(|io| io.direct).count() as f64
                    / direct.ios_from(1, HOUR_S).count().max(1) as f64;
                format!("{:.0}%", 100.0 * share)
            })
            .col("mean GB/s, buffer only", move |r, k| gb_s_of(r.at(&false, k)))
            .col("mean GB/s, with direct", move |r, k| gb_s_of(r.at(&true, k)))
    })
    .bars(
        [
            "",
            "BBOS Fig. 7: demoted GB per period",
            "data written per period (DWPP, × S)",
            "demoted per period (GB)",
        ],
        ks.iter().map(|k| format!("{k:.1} S")),
        |s| {
            s.per_system(
                &[false, true],
                |&direct| if direct { "cold checkpoints direct" } else { "through the buffer" }.into(),
                |i, _| i as f64,
                move |r| per(r) / 1e9,
            )
        },
    )
    .report(FIG7.name, rc)
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
    // (DWPP × S, MTBF variance and its largest MTBF in minutes).
    let xs: Vec<(f64, (&'static str, f64))> = [1.7, 1.9, 2.1]
        .into_iter()
        .flat_map(|k| [("low", 20.0), ("med", 50.0), ("high", 100.0)].map(|v| (k, v)))
        .collect();
    type R = Sweep<Eviction, (f64, (&'static str, f64)), CkptResult>;
    // BBOS's hit ratio over the worse of LRU and FIFO.
    let versus_worst = move |r: &R, x: &(f64, (&str, f64))| {
        let ratio = |e: &Eviction| r.at(e, x).hit_ratio_from(1);
        let worst_peer = ratio(&Eviction::Lru).min(ratio(&Eviction::Fifo)).max(1e-9);
        ratio(&BBOS_EVICTION) / worst_peer
    };
    let best = move |r: &R| {
        r.xs()
            .iter()
            .fold(0.0, |best: f64, x| best.max(versus_worst(r, x)))
    };
    Figure::new(
        "BBOS Fig. 8: restart hit ratio on the buffer, BBOS vs LRU vs FIFO, DWPP 1.7-2.1 S, MTBF variance",
        "BBOS has the highest hit ratio, up to 3.1× (3.4× in one case) LRU/FIFO; every scheme's \
         ratio falls as DWPP grows; LRU/FIFO do not depend on the MTBF variance, BBOS improves \
         as it grows.",
        parameters(&[
            ("period", "1 hour for every job, Low arrivals, 2 versions kept".into()),
            (
                "MTBF",
                "uniform in (0, 20 / 50 / 100] minutes (low / med / high variance); failures are \
                 Poisson per job; each asks for the job's newest complete checkpoint"
                    .into(),
            ),
        ]),
        evictions.to_vec(),
        xs.clone(),
        |&e, &(k, (_, max_min))| {
            let n = jobs_for(k);
            let mtbf = random_mtbf(&mut SimRng::new(rc.seed ^ (k * 10.0) as u64), n, max_min);
            let jobs = jobs(n, HOUR_S, Congestion::Low, |i| mtbf[i as usize]);
            Ok(with_failures(config(Scheme::Bbos, jobs, HOUR_S, rc.seed), e))
        },
    )
    .headline(move |r| {
        vec![Finding::new(
            "largest BBOS hit ratio / the worse of LRU and FIFO",
            "up to 3.1× (3.4× in one case)",
            format!("{:.2}×", best(r)),
        )]
    })
    .table("Restart requests served by the buffer", xs.clone(), |t| {
        t.col("DWPP", |_, (k, _): &(f64, (&str, f64))| format!("{k:.1} S"))
            .col("MTBF variance", |_, (_, (name, _))| name.to_string())
            .each(evictions, |e| e.name().into(), |r, x, e| {
                format!("{:.1}%", 100.0 * r.at(&e, x).hit_ratio_from(1))
            })
            .col("BBOS / worst", move |r, x| format!("{:.2}×", versus_worst(r, x)))
            .col("restarts", |r, x| r.at(&BBOS_EVICTION, x).restarts.to_string())
    })
    .bars(
        [
            "",
            "BBOS Fig. 8: restart hit ratio on the buffer",
            "data written per period (DWPP, × S) and MTBF variance",
            "restarts served by the buffer (%)",
        ],
        xs.iter().map(|(k, (name, _))| format!("{k:.1}S {name}")),
        |s| {
            s.per_system(&evictions, |e| e.name().into(), |i, _| i as f64, |r| {
                100.0 * r.hit_ratio_from(1)
            })
        },
    )
    .note_from(move |r| format!("Largest BBOS / worst-of-LRU-FIFO ratio: {:.2}×.", best(r)))
    .report(FIG8.name, rc)
}

/// Fig. 9's jobs of `mix` (jobs with 60 : 30 : 20 minute periods), so
/// many that DWPP per hour is about 1.9 S.
fn mix_jobs(mix: [u64; 3], seed: u64) -> Vec<CkptJob> {
    let periods = [HOUR_S, HOUR_S / 2.0, HOUR_S / 3.0];
    // Jobs per mix unit so that DWPP per hour is about 1.9 S.
    let per_unit: f64 = mix
        .iter()
        .zip(periods)
        .map(|(&m, p)| m as f64 * CKPT as f64 * HOUR_S / p)
        .sum();
    let units = (1.9 * S as f64 / per_unit).round().max(1.0) as u64;
    let mut list = Vec::new();
    let mut rng = SimRng::new(seed);
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
    list
}

/// Fig. 9: version-aware eviction, periods 60 / 30 / 20 minutes.
pub fn fig9(rc: &RunConfig) -> Result<Report, SimError> {
    // Each mix with the paper's hit ratio, version-aware and not (%).
    type Mix = (&'static str, [u64; 3], f64, f64);
    let mixes: Vec<Mix> = vec![
        ("1:1:1", [1, 1, 1], 96.4, 80.1),
        ("5:2:1", [5, 2, 1], 92.5, 71.7),
    ];
    let names = |aware: &bool| {
        if *aware {
            "version-aware"
        } else {
            "failure rate only"
        }
    };
    let hits = |r: &Sweep<bool, Mix, CkptResult>, aware, mix: &Mix| {
        format!("{:.1}%", 100.0 * r.at(&aware, mix).hit_ratio_from(1))
    };
    Figure::new(
        "BBOS Fig. 9: version-aware eviction, checkpoint periods 60/30/20 min mixed 1:1:1 and 5:2:1, DWPP 1.9 S",
        "Restart hit ratio on the buffer with version awareness 96.4% (1:1:1) and 92.5% (5:2:1); \
         without it (failure rate only) 80.1% and 71.7%.",
        parameters(&[
            ("periods", "60 / 30 / 20 minutes; planner period 1 hour; 3 versions kept".into()),
            ("MTBF", "uniform in (0, 100] minutes per job".into()),
        ]),
        vec![true, false],
        mixes.clone(),
        |&version_aware, (_, mix, _, _)| {
            let c = config(Scheme::Bbos, mix_jobs(*mix, rc.seed), HOUR_S, rc.seed);
            Ok(with_failures(c, Eviction::Bbos { version_aware }))
        },
    )
    .headline(move |r| {
        r.xs()
            .iter()
            .flat_map(|mix| {
                let (name, _, paper_aware, paper_not) = mix;
                [
                    Finding::new(
                        format!("{name}, version-aware hit ratio"),
                        format!("{paper_aware}%"),
                        hits(r, true, mix),
                    ),
                    Finding::new(
                        format!("{name}, failure rate only"),
                        format!("{paper_not}%"),
                        hits(r, false, mix),
                    ),
                ]
            })
            .collect()
    })
    .table("Restart requests served by the buffer", mixes.clone(), |t| {
        t.col("mix", |_, (name, ..): &Mix| name.to_string())
            .col("DWPP", |_, (_, mix, ..)| {
                let dwpp: f64 =
                    mix_jobs(*mix, rc.seed).iter().map(|j| CKPT as f64 * HOUR_S / j.period_s).sum();
                format!("{:.2} S", dwpp / S as f64)
            })
            .col("version-aware", move |r, mix| hits(r, true, mix))
            .col("paper", |_, (_, _, paper, _)| format!("{paper}%"))
            .col("failure rate only", move |r, mix| hits(r, false, mix))
            .col("paper", |_, (.., paper)| format!("{paper}%"))
            .col("restarts", |r, mix| r.at(&true, mix).restarts.to_string())
    })
    .bars(
        [
            "",
            "BBOS Fig. 9: restart hit ratio, version-aware or not",
            "job mix (jobs with 60 : 30 : 20 min periods)",
            "restarts served by the buffer (%)",
        ],
        mixes.iter().map(|m| m.0),
        |s| {
            s.per_system(&[true, false], |a| names(a).into(), |i, _| i as f64, |r| {
                100.0 * r.hit_ratio_from(1)
            })
        },
    )
    .report(FIG9.name, rc)
}
