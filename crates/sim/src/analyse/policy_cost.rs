//! Table 1's measured side (`sluice sim run ssdup-table1`): sluice's
//! detector and extent-index cost per request on this machine, beside the
//! paper's figures. It is wall clock, so it is printed after the report and
//! never written into it: the report files stay reproducible.

use std::io::{self, Write};

/// Passes per request size; the table shows their median.
const RUNS: usize = 5;

/// Request sizes in KiB and the paper's ns per request for each (SSDUP+,
/// Table 1).
const PAPER_NS_PER_REQUEST: [(u64, f64); 5] = [
    (32, 1869.0),
    (64, 1730.0),
    (128, 3522.0),
    (256, 3687.0),
    (512, 3809.0),
];

/// Measure and print the table, one request size at a time (each takes a
/// while), with [`crate::experiments::policy_cost_ns_per_request`].
pub fn print_measured_policy_cost(out: &mut impl Write) -> io::Result<()> {
    write_policy_cost(out, crate::experiments::policy_cost_ns_per_request)
}

/// The table with `ns_per_request(request_bytes, runs)` as the measurement.
fn write_policy_cost(
    out: &mut impl Write,
    mut ns_per_request: impl FnMut(u64, usize) -> f64,
) -> io::Result<()> {
    writeln!(out, "Measured on this machine (detector + extent-index insert, 2 GiB segmented-random, median of {RUNS}):")?;
    writeln!(
        out,
        "{:>8} {:>10} {:>14}",
        "request", "ns/req", "paper ns/req"
    )?;
    for (kib, paper) in PAPER_NS_PER_REQUEST {
        let ns = ns_per_request(kib * 1024, RUNS);
        writeln!(out, "{:>5}KiB {:>10.1} {:>14.0}", kib, ns, paper)?;
        out.flush()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The header, then one row per size: the measurement beside the paper's.
    #[test]
    fn rows_put_the_measurement_beside_the_paper() {
        let mut out = Vec::new();
        let mut asked = Vec::new();
        write_policy_cost(&mut out, |bytes, runs| {
            asked.push((bytes, runs));
            bytes as f64 / 100.0
        })
        .unwrap();
        assert_eq!(asked, [32, 64, 128, 256, 512].map(|kib| (kib * 1024, RUNS)));
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 7, "{text}");
        assert!(lines[0].ends_with("median of 5):"), "{}", lines[0]);
        assert_eq!(lines[1], " request     ns/req   paper ns/req");
        assert_eq!(lines[2], "   32KiB      327.7           1869");
        assert_eq!(lines[6], "  512KiB     5242.9           3809");
    }
}
