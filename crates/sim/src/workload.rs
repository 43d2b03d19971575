//! Workload generators: write traces as the server sees them, and
//! per-process scripts for the discrete-event simulator.
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
//! The simulator does not merge anything itself: it runs each process of a
//! [`Job`] as a closed loop over its script of [`Op`]s (one outstanding I/O
//! per process, like blocking MPI-IO calls), so the interleaving emerges
//! from device timing. The benchmark generators ([`Ior`], [`MpiIoTest`],
//! [`IorMpiIo`], [`MpiTileIo`], [`Hpio`]) each build such a job.
//!
//! INVARIANT: a generated trace holds every request of every process exactly
//! once, and each process's requests keep their issue order.
//!
//! INVARIANT: every generator writes each byte of its file at most once, and
//! every byte of `[0, file size)` exactly once unless it leaves spacing
//! between regions on purpose (HPIO); all processes of a job reach the same
//! number of [`Op::Barrier`]s, so a simulator cannot deadlock on them.
//! Parameters that break this (zero sizes, overflowing products, tile grids
//! that do not match the process count) are refused with a
//! [`WorkloadError`], never a panic.

use core::fmt;
use core::str::FromStr;
use core::time::Duration;

use sluice_policy::{FileId, WriteRequest};

use crate::rng::SimRng;

mod benchmarks;
pub use benchmarks::*;

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
        if self.file_bytes == 0 || !self.file_bytes.is_multiple_of(unit) {
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

/// Most ops one generated job may hold: about 8.6 GB of scripts at 32 B an
/// op. Paper-scale jobs need at most a few million; a count beyond this is
/// almost certainly a unit mistake and would exhaust memory instead of
/// failing cleanly, so generators refuse it.
pub const MAX_JOB_OPS: u64 = 1 << 28;

/// One step of a process's script.
///
/// The simulator runs a process as a closed loop: it issues the next op
/// when the previous one completes (one outstanding I/O per process, like
/// blocking MPI-IO calls).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// Write `len` bytes at `offset` of `file`.
    Write(WriteRequest),
    /// Read `len` bytes at `offset` of `file` (same fields as a write).
    Read(WriteRequest),
    /// Compute for this long without issuing I/O.
    Compute(Duration),
    /// Wait until every process of the same [`Job`] has reached its k-th
    /// barrier (k counted per process), then continue.
    Barrier,
}

// Paper-scale scripts hold millions of ops (16 GB in 4 KiB requests is 4 M),
// so an op must stay small: 32 B makes 4 M ops about 128 MB.
const _: () = assert!(core::mem::size_of::<Op>() <= 32);

/// A set of processes started together: one benchmark instance, or several
/// run back to back on the same processes (see [`Job::then`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Job {
    /// Name in reports.
    pub name: String,
    /// Each process's script in issue order; the index is the MPI rank.
    pub processes: Vec<Vec<Op>>,
    /// Delay after the experiment starts before the processes begin.
    pub start_after: Duration,
}

impl Job {
    /// A job of these scripts starting with the experiment.
    fn starting_now(name: &str, processes: Vec<Vec<Op>>) -> Job {
        Job {
            name: name.to_owned(),
            processes,
            start_after: Duration::ZERO,
        }
    }

    fn ops(&self) -> impl Iterator<Item = &Op> {
        self.processes.iter().flatten()
    }

    /// Bytes of all [`Op::Write`]s (saturating, so a hand-built job with
    /// absurd lengths cannot overflow).
    pub fn bytes_written(&self) -> u64 {
        self.ops()
            .filter_map(|op| match op {
                Op::Write(r) => Some(r.len),
                _ => None,
            })
            .fold(0, u64::saturating_add)
    }

    /// Bytes of all [`Op::Read`]s (saturating).
    pub fn bytes_read(&self) -> u64 {
        self.ops()
            .filter_map(|op| match op {
                Op::Read(r) => Some(r.len),
                _ => None,
            })
            .fold(0, u64::saturating_add)
    }

    /// Number of I/O requests: [`Op::Write`]s plus [`Op::Read`]s.
    pub fn requests(&self) -> u64 {
        self.ops()
            .filter(|op| matches!(op, Op::Write(_) | Op::Read(_)))
            .count() as u64
    }

    /// The same job reading instead of writing: every [`Op::Write`]
    /// becomes an [`Op::Read`] of the same range (the read side of the
    /// MPI-IO benchmarks, which are configured as read or write).
    pub fn as_reads(mut self) -> Job {
        for op in self.processes.iter_mut().flatten() {
            if let Op::Write(r) = *op {
                *op = Op::Read(r);
            }
        }
        self
    }

    /// Barriers process 0 passes: a job built with [`Job::then`] starts
    /// its next part at the job's barrier release number `barriers() + 1`.
    pub fn barriers(&self) -> usize {
        self.processes.first().map_or(0, |ops| {
            ops.iter().filter(|op| matches!(op, Op::Barrier)).count()
        })
    }

    /// Run `other` on the same processes after this job, `gap` of compute
    /// apart: two IOR runs separated by compute time, as one job.
    ///
    /// Process `p` gets this job's ops, then [`Op::Barrier`], then
    /// [`Op::Compute`]`(gap)` (also when `gap` is zero), then `other`'s ops
    /// for rank `p`. The barrier is there because the paper runs the
    /// instances one after another: the second starts only when every
    /// process has finished the first, and the compute time is measured
    /// from there. The result keeps this job's name and `start_after`;
    /// `other`'s are dropped.
    ///
    /// Both jobs must have the same number of processes, otherwise the
    /// ranks do not line up and this is an error.
    pub fn then(mut self, gap: Duration, other: Job) -> Result<Job, WorkloadError> {
        if self.processes.len() != other.processes.len() {
            return Err(WorkloadError(format!(
                "cannot run job {:?} ({} processes) after job {:?} ({} processes) on the same processes: \
                 give both the same process count, or run them as separate jobs",
                other.name,
                other.processes.len(),
                self.name,
                self.processes.len()
            )));
        }
        let ops = (self.ops().count() as u64)
            .saturating_add(other.ops().count() as u64)
            .saturating_add(2 * self.processes.len() as u64);
        check_ops(&self.name, ops)?;
        for (mine, theirs) in self.processes.iter_mut().zip(other.processes) {
            mine.reserve_exact(2 + theirs.len());
            mine.push(Op::Barrier);
            mine.push(Op::Compute(gap));
            mine.extend(theirs);
        }
        Ok(self)
    }
}

/// Refuse a job of more than [`MAX_JOB_OPS`] ops.
fn check_ops(what: &str, ops: u64) -> Result<(), WorkloadError> {
    if ops > MAX_JOB_OPS {
        return Err(WorkloadError(format!(
            "{what}: the scripts would hold {ops} ops, more than the limit of {MAX_JOB_OPS}; \
             use larger requests or a smaller file"
        )));
    }
    Ok(())
}

/// The product of `factors`, or an error naming `what` if it overflows.
fn product(what: &str, factors: &[u64]) -> Result<u64, WorkloadError> {
    factors
        .iter()
        .try_fold(1u64, |acc, &f| acc.checked_mul(f))
        .ok_or_else(|| {
            WorkloadError(format!(
                "{what}: the product {factors:?} overflows 64 bits; use smaller sizes or counts"
            ))
        })
}

/// `Err` naming `what` and `field` if `value` is zero.
fn positive(what: &str, field: &str, value: u64) -> Result<(), WorkloadError> {
    if value == 0 {
        return Err(WorkloadError(format!(
            "{what}: {field} is 0; it must be at least 1"
        )));
    }
    Ok(())
}

/// `numerator / denominator` rounded to the nearest integer, halves up.
fn div_round(numerator: u64, denominator: u64) -> u64 {
    let rest = numerator % denominator;
    numerator / denominator + u64::from(rest >= denominator - rest)
}

impl Ior {
    /// The instance as a simulator job: each process's requests of
    /// [`Ior::per_process`], in order, each an [`Op::Write`], with no
    /// barriers (IOR synchronises only around its phases, not per request).
    pub fn job(&self, name: &str) -> Result<Job, WorkloadError> {
        self.validate()?;
        // Cannot overflow: requests × request size is the file size.
        check_ops(
            "IOR",
            self.requests_per_process() * u64::from(self.processes),
        )?;
        let processes = self
            .per_process()?
            .into_iter()
            .map(|requests| requests.into_iter().map(Op::Write).collect())
            .collect();
        Ok(Job::starting_now(name, processes))
    }
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

    #[test]
    fn an_op_fits_in_32_bytes() {
        assert!(
            core::mem::size_of::<Op>() <= 32,
            "{}",
            core::mem::size_of::<Op>()
        );
    }

    #[test]
    fn div_round_rounds_halves_up() {
        assert_eq!(div_round(10, 4), 3);
        assert_eq!(div_round(9, 4), 2);
        assert_eq!(div_round(8, 4), 2);
        assert_eq!(div_round(u64::MAX, u64::MAX), 1);
        assert_eq!(div_round(u64::MAX, 2), u64::MAX / 2 + 1);
    }

    #[test]
    fn two_d_tiles_take_the_divisor_nearest_the_square_root() {
        let grid = |processes| {
            let t = MpiTileIo::for_total_bytes(
                FileId(1),
                processes,
                TileDecomposition::TwoD,
                4096,
                1 << 30,
            )
            .unwrap();
            (t.tiles_x, t.tiles_y)
        };
        assert_eq!(grid(16), (4, 4));
        assert_eq!(grid(32), (4, 8));
        assert_eq!(grid(64), (8, 8));
        assert_eq!(grid(128), (8, 16));
        assert_eq!(grid(12), (3, 4));
        assert_eq!(grid(13), (1, 13), "a prime count degenerates to 1-D");
    }

    #[test]
    fn tile_shape_falls_back_to_near_square_without_a_close_divisor() {
        // 1009 elements per process is prime: no divisor in [16, 31].
        let t =
            MpiTileIo::for_total_bytes(FileId(1), 2, TileDecomposition::OneD, 10, 2 * 1009 * 10)
                .unwrap();
        assert_eq!((t.tile_elements_x, t.tile_elements_y), (33, 31));
        let written = 2 * 33 * 31 * 10;
        let bound = 2 * 10 * (1 + 31) / 2;
        assert!(written - 2 * 1009 * 10 <= bound);
    }

    #[test]
    fn absurd_op_counts_are_refused_not_allocated() {
        let huge = Hpio {
            file: FileId(1),
            processes: 4,
            region_bytes: 1,
            region_count: u64::MAX / 8,
            region_spacing_bytes: 0,
            file_contiguous: false,
        };
        let err = huge.job("huge").unwrap_err();
        assert!(err.0.contains("more than the limit"), "{err}");
        let overflow = Hpio {
            region_bytes: u64::MAX / 2,
            region_count: 4,
            ..huge
        };
        assert!(overflow.job("o").unwrap_err().0.contains("overflows"));
        let tile = MpiTileIo::for_total_bytes(FileId(1), 1, TileDecomposition::OneD, 1, u64::MAX)
            .unwrap_err();
        assert!(tile.0.contains("more than the limit"), "{tile}");
    }

    #[test]
    fn ior_job_is_per_process_as_writes() {
        let ior = ior(IorPattern::SegmentedRandom);
        let job = ior.job("r").unwrap();
        let expected: Vec<Vec<Op>> = ior
            .per_process()
            .unwrap()
            .into_iter()
            .map(|p| p.into_iter().map(Op::Write).collect())
            .collect();
        assert_eq!(job.processes, expected);
        assert_eq!(job.name, "r");
        assert_eq!(job.start_after, Duration::ZERO);
        assert_eq!(job.requests(), 24);
        assert_eq!(job.bytes_written(), 240);
        assert_eq!(job.bytes_read(), 0);
    }
}
