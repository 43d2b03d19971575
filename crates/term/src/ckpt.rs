//! The table `sluice ckpt list` prints: one line per BBOS job registered
//! in the catalogue, under a header, in the catalogue's order. Sizes read
//! as the config writes them (`64GiB`), so a row can be typed back into
//! `sluice ckpt register`.

use std::fmt::Write;

use sluice_catalog::{Failure, JobSpec};
use sluice_config::ByteSize;

/// The jobs as a table: job, period, checkpoint size, failure rate,
/// versions kept, files per checkpoint and glob; a header and no row when
/// there are none. Every line ends in a newline.
pub fn jobs_table(jobs: &[JobSpec]) -> String {
    let mut table = format!(
        "{:<16} {:>10} {:>12} {:>14} {:>8} {:>6}  glob\n",
        "job", "period", "checkpoint", "failure", "versions", "files"
    );
    for j in jobs {
        let failure = match j.failure {
            Failure::Nodes(n) => format!("{n} nodes"),
            Failure::MtbfSecs(s) => format!("MTBF {s}s"),
        };
        // INVARIANT: writing to a String cannot fail.
        writeln!(
            table,
            "{:<16} {:>9}s {:>12} {:>14} {:>8} {:>6}  {}",
            j.id,
            j.period_s,
            ByteSize(j.ckpt_bytes).to_string(),
            failure,
            j.versions,
            j.files,
            j.glob
        )
        .expect("writing to a String");
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(id: &str, failure: Failure) -> JobSpec {
        JobSpec {
            id: id.to_string(),
            period_s: 600,
            ckpt_bytes: 64 << 30,
            failure,
            versions: 2,
            glob: "ckpt/*.dat".to_string(),
            files: 1,
        }
    }

    #[test]
    fn no_jobs_is_the_header_alone() {
        assert_eq!(
            jobs_table(&[]),
            "job                  period   checkpoint        failure versions  files  glob\n"
        );
    }

    #[test]
    fn a_row_per_job_with_its_failure_rate_and_size_in_config_units() {
        let table = jobs_table(&[
            job("climate", Failure::Nodes(128)),
            job("md", Failure::MtbfSecs(86_400)),
        ]);
        let rows: Vec<&str> = table.lines().skip(1).collect();
        assert_eq!(
            rows,
            [
                "climate                600s        64GiB      128 nodes        2      1  ckpt/*.dat",
                "md                     600s        64GiB    MTBF 86400s        2      1  ckpt/*.dat",
            ]
        );
    }
}
