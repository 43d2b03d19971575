//! The SSDUP+ paper's figures (seed 002): Fig. 2, 5/6, 9–14 and Table 1,
//! on the simulated cluster, with sluice's own `cost` policy beside the
//! paper's systems where they run, and the ablations that trace what does
//! not reproduce (docs/results/ssdup.md).
//!
//! This module holds the registry entries and what the figures share (the
//! IOR job, the cluster, the stream trace); the figures are in `sweeps`
//! (declared as data: Fig. 2, 9, 14, Table 1), `traced` (Fig. 5/6, 10, 13:
//! stream traces and ablations, declared, each ablation one more system)
//! and `limited` (Fig. 11, 12: a limited SSD, declared, their ablations
//! more systems or a part beside the figure).

use super::figure::{Columns, Sweep};
use super::*;
use crate::output::Finding;
use crate::workload::{Hpio, MpiTileIo, TileDecomposition};

mod limited;
mod sweeps;
mod traced;

pub use sweeps::policy_cost_ns_per_request;

/// `sluice sim run ssdup-fig2`.
pub(super) const FIG2: Experiment = Experiment {
    name: "ssdup-fig2",
    title: "SSDUP+ Fig. 2: baseline throughput vs process count per IOR pattern",
    run: sweeps::fig2,
};

/// `sluice sim run ssdup-fig5`.
pub(super) const FIG5: Experiment = Experiment {
    name: "ssdup-fig5",
    title: "SSDUP+ Fig. 5/6: random percentage after sorting; strided percentage and throughput vs processes",
    run: traced::fig5,
};

/// `sluice sim run ssdup-fig9`.
pub(super) const FIG9: Experiment = Experiment {
    name: "ssdup-fig9",
    title: "SSDUP+ Fig. 9: throughput and data sent to SSD, 8-512 processes, large SSD",
    run: sweeps::fig9,
};

/// `sluice sim run ssdup-fig10`.
pub(super) const FIG10: Experiment = Experiment {
    name: "ssdup-fig10",
    title: "SSDUP+ Fig. 10: HDD scheduler queue depth 32 / 128 / 512",
    run: traced::fig10,
};

/// `sluice sim run ssdup-fig11`.
pub(super) const FIG11: Experiment = Experiment {
    name: "ssdup-fig11",
    title: "SSDUP+ Fig. 11: limited SSD, two concurrent IOR instances",
    run: limited::fig11,
};

/// `sluice sim run ssdup-fig12`.
pub(super) const FIG12: Experiment = Experiment {
    name: "ssdup-fig12",
    title: "SSDUP+ Fig. 12: two IOR runs separated by 0-30 s of compute, SSD = 50% of data",
    run: limited::fig12,
};

/// `sluice sim run ssdup-fig13`.
pub(super) const FIG13: Experiment = Experiment {
    name: "ssdup-fig13",
    title: "SSDUP+ Fig. 13: HPIO, contiguous + non-contiguous instances, region size 32-256 KiB",
    run: traced::fig13,
};

/// `sluice sim run ssdup-fig14`.
pub(super) const FIG14: Experiment = Experiment {
    name: "ssdup-fig14",
    title: "SSDUP+ Fig. 14: MPI-Tile-IO, 1-D + 2-D instances, 16-128 processes",
    run: sweeps::fig14,
};

/// `sluice sim run ssdup-table1`.
pub(super) const TABLE1: Experiment = Experiment {
    name: "ssdup-table1",
    title: "SSDUP+ Table 1: detector + index cost against run time",
    run: sweeps::table1,
};

pub(super) fn ior(
    pattern: IorPattern,
    file: u64,
    processes: u32,
    bytes: u64,
    rc: &RunConfig,
) -> Result<Job, SimError> {
    let request = 256 * KIB;
    Ior {
        pattern,
        file: FileId(file),
        processes,
        request_bytes: request,
        file_bytes: scaled(bytes, rc.scale, u64::from(processes) * request),
        seed: rc.seed.wrapping_add(file),
    }
    .job(pattern.name())
    .map_err(|e| SimError(e.to_string()))
}

/// The paper's cluster; the page cache scales with the data so that a
/// scaled-down run is not absorbed by it.
pub(super) fn base_cluster(rc: &RunConfig) -> ClusterConfig {
    let default = ClusterConfig::default();
    ClusterConfig {
        seed: rc.seed,
        dirty_limit_bytes: scaled(default.dirty_limit_bytes, rc.scale, 1024 * KIB),
        ..default
    }
}

/// The parameter line that says what the `sluice` system is, with the
/// model its policy takes from `cluster`'s devices.
pub(super) fn sluice_parameter(cluster: &ClusterConfig) -> (&'static str, String) {
    let m = cost_model(&cluster.hdd, &cluster.ssd);
    (
        "sluice",
        format!(
            "not in the paper: policy `cost` (docs/policy.md) with t_seek {:.2} ms ({} ms track-to-track \
             seek + half a revolution at {} rpm), B_fast {:.0} MB/s and t_fast {} us (the SSD model), \
             hysteresis {}, a verdict per {} requests of a file (a switch from its {}th on); two regions, writers wait, SSDUP+'s \
             traffic-aware flush gate",
            m.capacity_seek.as_secs_f64() * 1e3,
            cluster.hdd.seek_track_ms,
            cluster.hdd.rpm,
            m.fast_bytes_per_s / 1e6,
            m.fast_request.as_micros(),
            m.hysteresis,
            m.evidence,
            sluice_policy::cost::EARLY_EVIDENCE,
        ),
    )
}

/// Mean random percentage of the streams seen by I/O node 0.
pub(super) fn mean_percentage(r: &RunResult) -> f64 {
    let ours: Vec<f64> = r
        .streams
        .iter()
        .filter(|s| s.server == 0)
        .map(|s| s.percentage)
        .collect();
    if ours.is_empty() {
        return 0.0;
    }
    ours.iter().sum::<f64>() / ours.len() as f64
}

/// The detector's streams of a run, over all I/O nodes: mean random
/// percentage, lowest / highest, mean threshold they were judged against, share of streams
/// above SSDUP's high water mark, share whose requests went to the SSD.
pub(super) fn stream_trace(r: &RunResult) -> [String; 5] {
    let n = r.streams.len().max(1) as f64;
    let mean =
        |f: &dyn Fn(&crate::cluster::StreamPoint) -> f64| r.streams.iter().map(f).sum::<f64>() / n;
    let high_water = match RedirectPolicy::ALL[2] {
        RedirectPolicy::Ssdup { high_water, .. } => high_water,
        _ => unreachable!("ALL[2] is SSDUP's static marks"),
    };
    let lowest = r
        .streams
        .iter()
        .map(|s| s.percentage)
        .fold(f64::INFINITY, f64::min);
    let highest = r.streams.iter().map(|s| s.percentage).fold(0.0, f64::max);
    [
        pct(mean(&|s| s.percentage)),
        if r.streams.is_empty() {
            "-".into()
        } else {
            format!("{} / {}", pct(lowest), pct(highest))
        },
        pct(mean(&|s| s.threshold)),
        pct(mean(&|s| f64::from(u8::from(s.percentage > high_water)))),
        pct(mean(&|s| f64::from(u8::from(s.buffered)))),
    ]
}

/// The headers of [`stream_trace`]'s five values.
const STREAM_TRACE_HEADERS: [&str; 5] = [
    "mean stream random %",
    "lowest / highest",
    "mean threshold",
    "streams above 0.45",
    "streams buffered",
];

/// [`stream_trace`]'s five columns; `trace` is the stream trace of the
/// run a row shows.
pub(super) fn stream_trace_columns<'a, K, R: 'a>(
    t: Columns<'a, K, R>,
    trace: impl Fn(&R, &K) -> [String; 5] + Copy + 'a,
) -> Columns<'a, K, R> {
    STREAM_TRACE_HEADERS
        .into_iter()
        .enumerate()
        .fold(t, |t, (i, header)| {
            t.col(header, move |r, k| trace(r, k)[i].clone())
        })
}

/// Fig. 9's workload: the three test sets run one after another on the
/// same processes (16 GB segmented-contiguous, 16 GB strided, 8 GB
/// segmented-random, separate files).
pub(super) fn three_sets(n: u32, rc: &RunConfig) -> Result<Job, SimError> {
    sequence(
        "ior-three-sets",
        vec![
            ior(IorPattern::SegmentedContiguous, 1, n, 16 * GIB, rc)?,
            ior(IorPattern::Strided, 2, n, 16 * GIB, rc)?,
            ior(IorPattern::SegmentedRandom, 3, n, 8 * GIB, rc)?,
        ],
        Duration::ZERO,
    )
}

/// Mean client overheads of the drift ablations (Fig. 5/6, Fig. 13): 10×
/// and 100× the default 0.2 ms, to see which way the streams move, not to
/// match a number.
pub(super) const DRIFT_OVERHEADS: [Duration; 2] =
    [Duration::from_millis(2), Duration::from_millis(20)];
