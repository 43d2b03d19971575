//! `sluice sim`: list and run the simulator's experiments.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use sluice_sim::analyse::print_measured_policy_cost;
use sluice_sim::experiments::{find, Experiment, RunConfig, RunProgress, EXPERIMENTS};
use sluice_sim::output::Report;

use sluice_term::progress::{Progress, ProgressMode, Unit};

use crate::error::{Error, Result};

/// Print the experiments, one per line.
pub fn list() {
    for e in EXPERIMENTS {
        println!("{:<14} {}", e.name, e.title);
    }
}

/// Run `name` (or every experiment for `all`), print each report's
/// Markdown and write its files under `out`; progress (simulations
/// finished) on stderr.
pub fn run(name: &str, scale: f64, seed: u64, out: &Path, mode: ProgressMode) -> Result<()> {
    if !(scale > 0.0 && scale <= 16.0) {
        return Err(Error::Usage(format!(
            "--scale {scale}: must be above 0 and at most 16"
        )));
    }
    let chosen: Vec<_> = if name == "all" {
        EXPERIMENTS.iter().collect()
    } else {
        vec![find(name).ok_or_else(|| {
            Error::Usage(format!(
                "no experiment {name:?}: `sluice sim list` shows them"
            ))
        })?]
    };
    for experiment in chosen {
        let start = Instant::now();
        let report = run_watched(experiment, scale, seed, mode).map_err(|source| Error::Sim {
            experiment: experiment.name,
            source,
        })?;
        let seconds = start.elapsed().as_secs_f64();
        println!("{}", report.to_markdown());
        if experiment.name == "ssdup-table1" {
            print_measured_policy_cost(&mut std::io::stdout().lock()).map_err(Error::stdout)?;
        }
        let written = report.write(out)?;
        println!(
            "{}: {} events in {:.2} s ({:.2} M events/s); wrote {}",
            experiment.name,
            report.events,
            seconds,
            report.events as f64 / seconds.max(1e-9) / 1e6,
            written
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    Ok(())
}

/// Run one experiment while a second thread shows how many of its
/// simulations have finished.
fn run_watched(
    experiment: &Experiment,
    scale: f64,
    seed: u64,
    mode: ProgressMode,
) -> Result<Report, sluice_sim::cluster::SimError> {
    let runs = Arc::new(RunProgress::default());
    let config = RunConfig {
        progress: Some(Arc::clone(&runs)),
        ..RunConfig::new(scale, seed)
    };
    let label = format!("sim {}", experiment.name);
    Progress::new(mode, &label, Unit::Count("runs"), 0, Instant::now())
        .watch(|| runs.runs(), || (experiment.run)(&config))
}
