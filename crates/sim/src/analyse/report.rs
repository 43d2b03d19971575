//! The plain-text report of an analysis (`sluice analyse`, the CLI's
//! default job).

use std::io::{self, Write};

use sluice_policy::redirector::RedirectPolicy;
use sluice_policy::units::human_bytes;

use super::{Analysis, AnalysisConfig};
use crate::workload::Arrival;

fn percent(part: u64, whole: u64) -> String {
    if whole == 0 {
        return "-".to_string();
    }
    format!("{:.1}%", part as f64 * 100.0 / whole as f64)
}

/// The report of `sluice analyse`.
pub fn print_analysis(
    out: &mut impl Write,
    config: &AnalysisConfig,
    analysis: &Analysis,
    per_stream: bool,
) -> io::Result<()> {
    let first = config.phases.first().and_then(|p| p.instances.first());
    writeln!(
        out,
        "sluice analyse: IOR write trace through the SSDUP+ traffic detector"
    )?;
    if let Some(ior) = first {
        writeln!(
            out,
            "  {} phase(s), {} processes per instance, {} requests, {} requests in all",
            config.phases.len(),
            ior.processes,
            human_bytes(ior.request_bytes),
            analysis.requests
        )?;
    }
    let arrival = match config.arrival {
        Arrival::Lockstep => "lockstep (round robin)".to_string(),
        Arrival::Random { seed, max_lead } => format!("random (seed {seed}, max lead {max_lead})"),
    };
    let t = &config.redirector.threshold;
    writeln!(
        out,
        "  arrival {arrival}; stream_len {}; pattern change: k={} x={} margin={}",
        config.redirector.detector.stream_len, t.change_window, t.change_fraction, t.change_margin
    )?;
    writeln!(out)?;

    let adaptive = config
        .policies
        .iter()
        .position(|p| *p == RedirectPolicy::SsdupPlus);
    let switching: Vec<usize> = config
        .policies
        .iter()
        .enumerate()
        .filter(|(_, p)| matches!(p, RedirectPolicy::SsdupPlus | RedirectPolicy::Ssdup { .. }))
        .map(|(i, _)| i)
        .collect();

    if per_stream {
        write!(
            out,
            "{:>6}  {:<22} {:>4} {:>8} {:>10} {:>5}",
            "stream", "phase", "S", "random%", "threshold", "reset"
        )?;
        for &i in &switching {
            write!(out, " {:>9}", config.policies[i].name())?;
        }
        writeln!(out)?;
        for row in &analysis.streams {
            let (threshold, reset) = match adaptive {
                Some(i) => (
                    format!("{:.4}", row.decisions[i].threshold),
                    if row.decisions[i].pattern_reset {
                        "yes"
                    } else {
                        ""
                    },
                ),
                None => ("-".to_string(), ""),
            };
            write!(
                out,
                "{:>6}  {:<22} {:>4} {:>7.1}% {:>10} {:>5}",
                row.index,
                config.phases[row.phase].name,
                row.random_factor,
                row.percentage * 100.0,
                threshold,
                reset
            )?;
            for &i in &switching {
                write!(out, " {:>9}", row.decisions[i].route.name())?;
            }
            writeln!(out)?;
        }
        writeln!(out, "  (threshold and reset are ssdup+'s; a stream's route was decided by the stream before it)")?;
        writeln!(out)?;
    }

    writeln!(
        out,
        "Share of bytes sent to the fast tier, per policy and phase:"
    )?;
    write!(out, "{:<14} {:>20}", "policy", "fast tier (all)")?;
    for phase in &config.phases {
        write!(out, " {:>21}", phase.name)?;
    }
    writeln!(
        out,
        " {:>9} {:>14} {:>13}",
        "switches", "index extents", "index memory"
    )?;
    for summary in &analysis.policies {
        let all = format!(
            "{} ({})",
            human_bytes(summary.fast_bytes()),
            percent(summary.fast_bytes(), summary.bytes())
        );
        write!(out, "{:<14} {:>20}", summary.policy.name(), all)?;
        for (fast, bytes) in summary
            .fast_bytes_per_phase
            .iter()
            .zip(&summary.bytes_per_phase)
        {
            write!(out, " {:>21}", percent(*fast, *bytes))?;
        }
        writeln!(
            out,
            " {:>9} {:>14} {:>13}",
            summary.switches,
            summary.index_extents,
            human_bytes(summary.index_bytes_estimate)
        )?;
    }
    if let Some(i) = adaptive {
        let resets: Vec<String> = analysis
            .streams
            .iter()
            .filter(|row| row.decisions[i].pattern_reset)
            .map(|row| row.index.to_string())
            .collect();
        writeln!(
            out,
            "ssdup+ access-pattern resets of percent_list: {} (at streams {})",
            resets.len(),
            if resets.is_empty() {
                "-".to_string()
            } else {
                resets.join(", ")
            }
        )?;
    }
    writeln!(out)?;
    writeln!(
        out,
        "Random streams go to the fast tier, sequential ones to the capacity tier: ssdup+ should buffer\n\
         segmented-random and little of segmented-contiguous; fast-all buffers everything. Index memory is\n\
         the extent index's estimate for the buffered requests (see `cargo bench -p sluice-policy`)."
    )?;
    Ok(())
}
