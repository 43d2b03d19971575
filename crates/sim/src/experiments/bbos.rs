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
//!
//! This module holds the registry entries and the shared model (rates,
//! capacity, arrivals, configs); the experiments are in `threshold` (Fig.
//! 1, 2), `schemes` (Fig. 5, utilisation) and `restart` (Fig. 7, 8, 9).

use sluice_policy::bbos::{max_served_dwpp, Bandwidths, Eviction, Scheme};

use super::{Experiment, RunConfig, SimError};

use crate::checkpoint::{run, CkptConfig, CkptJob, CkptResult, IoRecord};

use crate::output::{Finding, Report, Table};

use crate::rng::SimRng;

mod restart;
mod schemes;
mod threshold;

/// `sluice sim run bbos-fig1`.
pub(super) const FIG1: Experiment = Experiment {
    name: "bbos-fig1",
    title: "BBOS Fig. 1: static 90% threshold, checkpoint throughput over time at DWPP 1.3-1.9 S",
    run: threshold::fig1,
};

/// `sluice sim run bbos-fig2`.
pub(super) const FIG2: Experiment = Experiment {
    name: "bbos-fig2",
    title: "BBOS Fig. 2: static 90% threshold under Low/Med/High arrivals at 1.9 S",
    run: threshold::fig2,
};

/// `sluice sim run bbos-fig5`.
pub(super) const FIG5: Experiment = Experiment {
    name: "bbos-fig5",
    title: "BBOS Fig. 5: throughput and latency, DataWarp / MaxBW / MaxEff / BBOS",
    run: schemes::fig5,
};

/// `sluice sim run bbos-utilisation`.
pub(super) const UTILISATION: Experiment = Experiment {
    name: "bbos-utilisation",
    title: "BBOS §VI-B: burst-buffer utilisation per scheme",
    run: schemes::utilisation,
};

/// `sluice sim run bbos-fig7`.
pub(super) const FIG7: Experiment = Experiment {
    name: "bbos-fig7",
    title: "BBOS Fig. 7: cold checkpoints straight to the capacity tier",
    run: restart::fig7,
};

/// `sluice sim run bbos-fig8`.
pub(super) const FIG8: Experiment = Experiment {
    name: "bbos-fig8",
    title: "BBOS Fig. 8: restart hit ratio, BBOS vs LRU vs FIFO",
    run: restart::fig8,
};

/// `sluice sim run bbos-fig9`.
pub(super) const FIG9: Experiment = Experiment {
    name: "bbos-fig9",
    title: "BBOS Fig. 9: version-aware eviction",
    run: restart::fig9,
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

/// Each checkpoint's throughput (GB/s) at its arrival time (s).
fn throughput_over_time(r: &CkptResult) -> Vec<(f64, f64)> {
    r.ios
        .iter()
        .map(|io| (io.arrival_s, io.throughput() / 1e9))
        .collect()
}
