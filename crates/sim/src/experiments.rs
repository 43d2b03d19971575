//! The papers' evaluations as simulator experiments: the registry
//! ([`EXPERIMENTS`], [`find`]), the run configuration and the helpers they
//! share. The SSDUP+ evaluation (seed 002 §2–3) is the `ssdup` submodule,
//! LiU (seed 001) `liu`, BBOS (seed 004) `bbos`, LADS (seed 003) `lads`;
//! each declares its experiments' registry entries ([`Experiment`] consts),
//! so an experiment's name is written once.
//!
//! Each experiment builds its simulations (cluster runs of
//! [`crate::cluster`], checkpoint models of [`crate::checkpoint`], LADS
//! transfers of [`crate::transfer`]) and returns a [`Report`] with the
//! paper's numbers beside the simulator's. Two pieces serve them all:
//!
//! - `runner`: a `Simulation` is anything that runs to a result;
//!   `run_all` runs a list of them on up to two threads and returns the
//!   results in input order, so the report is a pure function of
//!   `(scale, seed)`. A caller may watch how many runs have finished
//!   ([`RunProgress`]); the runs write it and never read it.
//! - `figure`: a figure of the common shape (systems × a swept x) is a
//!   declaration, a `Figure`: the systems, the xs, the task of one
//!   (system, x), the paper's values with their source, the paper's
//!   claims, and the tables, plots and headline read from the results by
//!   (system, x). `Figure::report` runs it and builds the report, which
//!   also lists each claim with whether this run bears it out. A figure
//!   may run only some pairs (`Figure::only`) and have a sweep beside it
//!   (`Figure::part`, an ablation). Every experiment is a declaration but
//!   BBOS's utilisation (a bisection), which builds its task lists and
//!   tables itself on the same runner. `docs/simulator.md` shows how to
//!   add a figure.
//!
//! `scale` multiplies every data size (1.0 = the paper's sizes); process
//! counts never change.
//!
//! Wherever SSDUP+ runs, sluice's own policy (`cost`,
//! [`System::SluiceCost`]) runs too, as one more column or series named
//! `sluice`. The paper's systems' runs do not depend on it: their numbers
//! are the same with or without it.
//!
//! Where the paper leaves a parameter open, the choice is stated in the
//! experiment's parameters and in `docs/results/ssdup.md`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sluice_policy::redirector::RedirectPolicy;
use sluice_policy::FileId;

use crate::cluster::{cost_model, ClusterConfig, RunResult, SimError, System};
use crate::output::{Plot, PlotKind, Report, Series, XScale};
use crate::workload::{Ior, IorPattern, Job};

pub use ssdup::policy_cost_ns_per_request;

const KIB: u64 = 1024;
const GIB: u64 = 1024 * 1024 * 1024;

/// Inputs every experiment takes.
#[derive(Clone, Debug)]
pub struct RunConfig {
    /// Multiplies every data size; 1.0 is the paper's scale.
    pub scale: f64,
    /// Seed of every random choice.
    pub seed: u64,
    /// Where the runs count themselves, for a caller that shows progress
    /// (`sluice sim run`); `None` counts nothing.
    pub progress: Option<Arc<RunProgress>>,
}

impl RunConfig {
    /// `scale` and `seed`, counting nothing.
    pub fn new(scale: f64, seed: u64) -> RunConfig {
        RunConfig {
            scale,
            seed,
            progress: None,
        }
    }

    /// `runs` more simulations are about to run.
    fn queue_runs(&self, runs: usize) {
        if let Some(p) = &self.progress {
            p.queued.fetch_add(runs as u64, Ordering::Relaxed);
        }
    }

    /// One simulation has finished.
    fn run_finished(&self) {
        if let Some(p) = &self.progress {
            p.finished.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// How far an experiment is: simulations finished and queued so far (an
/// experiment may queue more as it goes: its phases run one after the
/// other). The runs only write it and never read it, so the report is the
/// same whoever watches (the determinism tests run with and without it).
#[derive(Debug, Default)]
pub struct RunProgress {
    queued: AtomicU64,
    finished: AtomicU64,
}

impl RunProgress {
    /// `(finished, queued)` simulations.
    pub fn runs(&self) -> (u64, u64) {
        // Finished first: never more finished than queued in one answer.
        let finished = self.finished.load(Ordering::Relaxed);
        (finished, self.queued.load(Ordering::Relaxed).max(finished))
    }
}

/// One reproducible experiment.
pub struct Experiment {
    /// Name on the command line (`sluice sim run NAME`).
    pub name: &'static str,
    /// What it reproduces.
    pub title: &'static str,
    /// Builds and runs it.
    pub run: fn(&RunConfig) -> Result<Report, SimError>,
}

/// Every experiment, in the paper's order. Each is declared once, in its
/// paper's module, where its name and title live beside what it runs.
pub const EXPERIMENTS: &[Experiment] = &[
    ssdup::FIG2,
    ssdup::FIG5,
    ssdup::FIG9,
    ssdup::FIG10,
    ssdup::FIG11,
    ssdup::FIG12,
    ssdup::FIG13,
    ssdup::FIG14,
    ssdup::TABLE1,
    liu::FIG4,
    liu::TABLE2,
    liu::FIG8,
    liu::FIG9,
    bbos::FIG1,
    bbos::FIG2,
    bbos::FIG5,
    bbos::UTILISATION,
    bbos::FIG7,
    bbos::FIG8,
    bbos::FIG9,
    lads::FIG7,
    lads::FIG9,
    lads::FIG10,
    lads::FIG11,
];

mod bbos;
mod figure;
mod lads;
mod liu;
mod runner;
mod ssdup;

/// The experiment called `name`.
pub fn find(name: &str) -> Option<&'static Experiment> {
    EXPERIMENTS.iter().find(|e| e.name == name)
}

/// One simulation to run.
struct Task {
    cluster: ClusterConfig,
    system: System,
    jobs: Vec<Job>,
}

/// The task of one cluster run: `job` (or the error building it) on
/// `system`.
fn task(
    cluster: ClusterConfig,
    system: System,
    job: Result<Job, SimError>,
) -> Result<Task, SimError> {
    Ok(Task {
        cluster,
        system,
        jobs: vec![job?],
    })
}

/// `bytes × scale`, rounded down to a multiple of `unit` (at least one unit).
fn scaled(bytes: u64, scale: f64, unit: u64) -> u64 {
    let target = (bytes as f64 * scale) as u64;
    (target / unit).max(1) * unit
}

/// Run `parts` one after another on the same processes, `gap` of compute
/// apart; [`Job::then`] puts a barrier before each gap, so the next part
/// starts together (separate IOR runs).
fn sequence(name: &str, parts: Vec<Job>, gap: Duration) -> Result<Job, SimError> {
    let mut parts = parts.into_iter();
    // INVARIANT: callers pass at least one part.
    let mut job = parts.next().expect("at least one part");
    for part in parts {
        job = job.then(gap, part).map_err(|e| SimError(e.to_string()))?;
    }
    job.name = name.to_string();
    Ok(job)
}

fn mb_s(x: f64) -> String {
    format!("{x:.1}")
}

fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

fn parameters(rc: &RunConfig, extra: &[(&str, String)]) -> Vec<(String, String)> {
    let mut p = vec![
        ("scale".to_string(), format!("{}", rc.scale)),
        ("seed".to_string(), rc.seed.to_string()),
        (
            "cluster".to_string(),
            "8 clients, 2 I/O nodes (HDD 7200 rpm + SSD 250 MB/s each), Gigabit links, 64 KiB stripes".to_string(),
        ),
    ];
    p.extend(extra.iter().map(|(k, v)| (k.to_string(), v.clone())));
    p
}

/// A line plot on a linear x axis; `x` and `y` are the axis labels with
/// their units.
fn line_plot(stem: &str, title: &str, x: &str, y: &str, series: Vec<Series>) -> Plot {
    Plot {
        file_stem: stem.to_string(),
        title: title.to_string(),
        x_label: x.to_string(),
        x_scale: XScale::Linear,
        y_label: y.to_string(),
        kind: PlotKind::Lines,
        x_categories: Vec::new(),
        series,
    }
}

/// A grouped bar chart; `x` names what the categories are (with a unit
/// where they have one), `y` is the value axis with its unit.
fn bar_plot(
    stem: &str,
    title: &str,
    x: &str,
    y: &str,
    categories: Vec<String>,
    series: Vec<Series>,
) -> Plot {
    Plot {
        file_stem: stem.to_string(),
        title: title.to_string(),
        x_label: x.to_string(),
        x_scale: XScale::Linear,
        y_label: y.to_string(),
        kind: PlotKind::Bars,
        x_categories: categories,
        series,
    }
}
