//! Workload generators: write traces as the server sees them.
//!
//! An IOR instance is `processes` processes writing one shared file with
//! fixed-size requests (EVALUATION §2):
//! * segmented-contiguous — process `j` writes its `1/n` of the file in order;
//! * segmented-random — the same regions, each in a seeded random order;
//! * strided — in iteration `i`, process `j` writes block `i·n + j`.
//!
//! Each process issues its own requests in order; the server sees them
//! merged. How they merge is the [`Arrival`] model, because the random
//! percentage of a stream depends on it (a strided job in perfect lockstep
//! is sequential after sorting; the same job with drifting processes is
//! not). Several instances (the paper's "mixed" load) are merged the same
//! way, their processes side by side.
//!
//! INVARIANT: a generated trace holds every request of every process exactly
//! once, and each process's requests keep their issue order.

use core::fmt;
use core::str::FromStr;

use sluice_policy::{FileId, WriteRequest};

use crate::rng::SimRng;

/// The IOR access pattern of one instance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IorPattern {
    /// Each process writes its contiguous segment in order.
    SegmentedContiguous,
    /// Each process writes its segment in random order.
    SegmentedRandom,
    /// Iteration `i`, process `j` writes block `i·n + j`.
    Strided,
}

impl IorPattern {
    /// All patterns, in report order.
    pub const ALL: [IorPattern; 3] = [
        IorPattern::SegmentedContiguous,
        IorPattern::Strided,
        IorPattern::SegmentedRandom,
    ];

    /// Name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            IorPattern::SegmentedContiguous => "segmented-contiguous",
            IorPattern::SegmentedRandom => "segmented-random",
            IorPattern::Strided => "strided",
        }
    }
}

impl fmt::Display for IorPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for IorPattern {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        IorPattern::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| {
                format!("unknown IOR pattern {s:?}: expected segmented-contiguous, strided or segmented-random")
            })
    }
}

/// One IOR instance writing one shared file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ior {
    /// Access pattern.
    pub pattern: IorPattern,
    /// File written.
    pub file: FileId,
    /// Number of processes.
    pub processes: u32,
    /// Bytes per request (IOR transfer size).
    pub request_bytes: u64,
    /// Bytes of the shared file; a multiple of `processes * request_bytes`.
    pub file_bytes: u64,
    /// Seed of the random order (segmented-random only).
    pub seed: u64,
}

/// A workload description that cannot be generated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkloadError(pub String);

impl fmt::Display for WorkloadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for WorkloadError {}

impl Ior {
    /// Requests each process issues.
    pub fn requests_per_process(&self) -> u64 {
        self.file_bytes / (u64::from(self.processes) * self.request_bytes)
    }

    fn validate(&self) -> Result<(), WorkloadError> {
        if self.processes == 0 || self.request_bytes == 0 {
            return Err(WorkloadError(
                "IOR needs at least one process and a request size above 0".into(),
            ));
        }
        let unit = u64::from(self.processes)
            .checked_mul(self.request_bytes)
            .ok_or_else(|| WorkloadError("processes × request size overflows".into()))?;
        if self.file_bytes == 0 || self.file_bytes % unit != 0 {
            return Err(WorkloadError(format!(
                "file size {} B is not a positive multiple of processes × request size ({} × {} B)",
                self.file_bytes, self.processes, self.request_bytes
            )));
        }
        Ok(())
    }

    /// Each process's requests in its own issue order.
    pub fn per_process(&self) -> Result<Vec<Vec<WriteRequest>>, WorkloadError> {
        self.validate()?;
        let n = u64::from(self.processes);
        let per_process = self.requests_per_process();
        let mut rng = SimRng::new(self.seed);
        let request = |block: u64| WriteRequest {
            file: self.file,
            offset: block * self.request_bytes,
            len: self.request_bytes,
        };
        let mut out = Vec::with_capacity(self.processes as usize);
        for j in 0..n {
            let blocks: Vec<u64> = match self.pattern {
                IorPattern::SegmentedContiguous => {
                    (0..per_process).map(|k| j * per_process + k).collect()
                }
                IorPattern::SegmentedRandom => {
                    let mut blocks: Vec<u64> =
                        (0..per_process).map(|k| j * per_process + k).collect();
                    rng.shuffle(&mut blocks);
                    blocks
                }
                IorPattern::Strided => (0..per_process).map(|i| i * n + j).collect(),
            };
            out.push(blocks.into_iter().map(request).collect());
        }
        Ok(out)
    }
}

/// How the requests of concurrent processes interleave at the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arrival {
    /// Round robin: one request from each process in turn.
    Lockstep,
    /// Each next request comes from a process chosen at random among those
    /// at most `max_lead` requests ahead of the slowest unfinished process
    /// (loosely coupled processes, as under a fair server).
    Random {
        /// Seed of the choices.
        seed: u64,
        /// How far ahead of the slowest process a process may run.
        max_lead: u64,
    },
}

/// Merge per-process request sequences into the order the server sees.
pub fn arrive(per_process: Vec<Vec<WriteRequest>>, arrival: Arrival) -> Vec<WriteRequest> {
    let total: usize = per_process.iter().map(Vec::len).sum();
    let mut out = Vec::with_capacity(total);
    let mut next = vec![0usize; per_process.len()];
    match arrival {
        Arrival::Lockstep => {
            while out.len() < total {
                for (p, requests) in per_process.iter().enumerate() {
                    if let Some(r) = requests.get(next[p]) {
                        out.push(*r);
                        next[p] += 1;
                    }
                }
            }
        }
        Arrival::Random { seed, max_lead } => {
            let mut rng = SimRng::new(seed);
            let mut eligible = Vec::with_capacity(per_process.len());
            while out.len() < total {
                let unfinished = (0..per_process.len()).filter(|&p| next[p] < per_process[p].len());
                // INVARIANT: out.len() < total, so some process is unfinished.
                let slowest = unfinished
                    .clone()
                    .map(|p| next[p])
                    .min()
                    .expect("unfinished process");
                eligible.clear();
                eligible
                    .extend(unfinished.filter(|&p| next[p] as u64 <= slowest as u64 + max_lead));
                let p = eligible[rng.below(eligible.len() as u64) as usize];
                out.push(per_process[p][next[p]]);
                next[p] += 1;
            }
        }
    }
    out
}

/// Generate the server-side trace of several concurrent IOR instances
/// (one instance is the common case; two make the paper's "mixed" load).
pub fn ior_trace(instances: &[Ior], arrival: Arrival) -> Result<Vec<WriteRequest>, WorkloadError> {
    let mut processes = Vec::new();
    for instance in instances {
        processes.extend(instance.per_process()?);
    }
    Ok(arrive(processes, arrival))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ior(pattern: IorPattern) -> Ior {
        Ior {
            pattern,
            file: FileId(1),
            processes: 4,
            request_bytes: 10,
            file_bytes: 4 * 10 * 6,
            seed: 9,
        }
    }

    #[test]
    fn every_pattern_writes_every_block_exactly_once() {
        for pattern in IorPattern::ALL {
            let mut offsets: Vec<u64> = ior_trace(&[ior(pattern)], Arrival::Lockstep)
                .unwrap()
                .iter()
                .map(|r| r.offset)
                .collect();
            offsets.sort_unstable();
            assert_eq!(
                offsets,
                (0..24).map(|b| b * 10).collect::<Vec<_>>(),
                "{pattern}"
            );
        }
    }

    #[test]
    fn strided_lockstep_is_in_file_order() {
        let trace = ior_trace(&[ior(IorPattern::Strided)], Arrival::Lockstep).unwrap();
        let offsets: Vec<u64> = trace.iter().map(|r| r.offset).collect();
        assert_eq!(offsets, (0..24).map(|b| b * 10).collect::<Vec<_>>());
    }

    #[test]
    fn random_arrival_keeps_process_order_and_bounds_the_lead() {
        let per_process = ior(IorPattern::SegmentedContiguous).per_process().unwrap();
        let trace = arrive(
            per_process.clone(),
            Arrival::Random {
                seed: 5,
                max_lead: 2,
            },
        );
        assert_eq!(trace.len(), 24);
        for requests in &per_process {
            let seen: Vec<_> = trace
                .iter()
                .filter(|r| requests.contains(r))
                .copied()
                .collect();
            assert_eq!(&seen, requests, "issue order kept");
        }
        // Replaying with the same seed gives the same trace.
        assert_eq!(
            trace,
            arrive(
                per_process,
                Arrival::Random {
                    seed: 5,
                    max_lead: 2
                }
            )
        );
    }

    #[test]
    fn bad_sizes_are_refused_with_a_message() {
        let bad = Ior {
            file_bytes: 25,
            ..ior(IorPattern::Strided)
        };
        let err = bad.per_process().unwrap_err();
        assert!(err.0.contains("not a positive multiple"), "{err}");
        let none = Ior {
            processes: 0,
            ..ior(IorPattern::Strided)
        };
        assert!(none.per_process().is_err());
    }
}
