//! Trace analysis: one write trace through every redirection policy.
//!
//! The trace is a sequence of phases (each a set of concurrent IOR
//! instances on fresh files). Every policy gets its own [`WriteBuffer`]
//! (the engine's write side) fed with the identical request sequence, so
//! the per-stream random factor is the same for all and only the decisions
//! differ. The buffer's log is one region too large to fill, so nothing
//! waits or is flushed: a request goes to the fast tier when its policy
//! routes it there or when it overlaps bytes already buffered (the write
//! buffer's overlap rule), and its extent is indexed at the position a log
//! append gives it, to report the index size the policy implies.
//!
//! This is the first real capability of `sluice` (the CLI's default job):
//! no devices and no time, only the policies' decisions.
//!
//! Beside it, [`print_measured_policy_cost`] measures what those decisions
//! cost on this machine (Table 1's measured side).

mod policy_cost;
mod report;
pub use policy_cost::print_measured_policy_cost;
pub use report::print_analysis;

use std::time::Duration;

use sluice_policy::detector::{ConfigError, DetectorConfig};
use sluice_policy::extent_index::Extent;
use sluice_policy::flush_gate::FlushGateConfig;
use sluice_policy::pipeline::{PipelineConfig, WhenFull};
use sluice_policy::redirector::{RedirectPolicy, RedirectorConfig};
use sluice_policy::threshold::ThresholdConfig;
use sluice_policy::write_buffer::{Placement, WriteBuffer, WriteBufferConfig};
use sluice_policy::{FileId, LogLocation, Tier, Time, WriteRequest};

use crate::workload::{arrive, Arrival, Ior, IorPattern, WorkloadError};

/// A named step of the trace: IOR instances running together.
#[derive(Clone, Debug)]
pub struct Phase {
    /// Name in reports (for example the pattern).
    pub name: String,
    /// The concurrent instances; their processes interleave.
    pub instances: Vec<Ior>,
}

/// A phase of the analysis's generated IOR trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PhaseKind {
    /// Each process writes its segment of a shared file in order.
    SegmentedContiguous,
    /// Iteration i, process j writes block i·n + j.
    Strided,
    /// Each process writes its segment in random order.
    SegmentedRandom,
    /// A segmented-contiguous and a segmented-random instance at once,
    /// half the bytes each.
    Mixed,
}

impl PhaseKind {
    /// The four phases, in the order `sluice analyse` runs them.
    pub const ALL: [PhaseKind; 4] = [
        PhaseKind::SegmentedContiguous,
        PhaseKind::Strided,
        PhaseKind::SegmentedRandom,
        PhaseKind::Mixed,
    ];

    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            PhaseKind::SegmentedContiguous => "segmented-contiguous",
            PhaseKind::Strided => "strided",
            PhaseKind::SegmentedRandom => "segmented-random",
            PhaseKind::Mixed => "mixed",
        }
    }
}

/// The phases `kinds` as IOR instances of `processes` processes writing
/// `request_bytes` requests, `phase_bytes` per phase, each instance on a
/// file of its own (ids 1, 2, ...) with a seed derived from `seed`.
pub fn ior_phases(
    kinds: &[PhaseKind],
    processes: u32,
    request_bytes: u64,
    phase_bytes: u64,
    seed: u64,
) -> Vec<Phase> {
    let mut next_file = 0u64;
    let mut instance = |pattern: IorPattern, file_bytes: u64| {
        next_file += 1;
        Ior {
            pattern,
            file: FileId(next_file),
            processes,
            request_bytes,
            file_bytes,
            seed: seed.wrapping_add(next_file),
        }
    };
    kinds
        .iter()
        .map(|&kind| Phase {
            name: kind.name().to_string(),
            instances: match kind {
                PhaseKind::SegmentedContiguous => {
                    vec![instance(IorPattern::SegmentedContiguous, phase_bytes)]
                }
                PhaseKind::Strided => vec![instance(IorPattern::Strided, phase_bytes)],
                PhaseKind::SegmentedRandom => {
                    vec![instance(IorPattern::SegmentedRandom, phase_bytes)]
                }
                PhaseKind::Mixed => vec![
                    instance(IorPattern::SegmentedContiguous, phase_bytes / 2),
                    instance(IorPattern::SegmentedRandom, phase_bytes / 2),
                ],
            },
        })
        .collect()
}

/// What to analyse and how.
#[derive(Clone, Debug)]
pub struct AnalysisConfig {
    /// Phases, run one after another.
    pub phases: Vec<Phase>,
    /// How processes' requests interleave at the server.
    pub arrival: Arrival,
    /// Stream grouping and threshold parameters shared by all policies.
    pub redirector: RedirectorConfig,
    /// Policies to compare (the `policy` in `redirector` is ignored).
    pub policies: Vec<RedirectPolicy>,
}

/// `sluice analyse`'s job: a generated IOR trace through SSDUP+'s stream
/// grouping and threshold, every redirection policy compared on it.
#[derive(Clone, Debug)]
pub struct IorAnalysis {
    /// Phases of the trace, in order.
    pub phases: Vec<PhaseKind>,
    /// Processes per IOR instance.
    pub processes: u32,
    /// Request (IOR transfer) size in bytes.
    pub request_bytes: u64,
    /// Bytes written per phase.
    pub phase_bytes: u64,
    /// Seed the instances' seeds derive from ([`ior_phases`]).
    pub seed: u64,
    /// How the processes' requests interleave at the server.
    pub arrival: Arrival,
    /// Stream grouping.
    pub detector: DetectorConfig,
    /// Threshold and pattern-change check.
    pub threshold: ThresholdConfig,
}

impl IorAnalysis {
    /// What to analyse: the phases as IOR instances and every policy, with
    /// the detector and threshold checked first.
    pub fn config(self) -> Result<AnalysisConfig, ConfigError> {
        let redirector = RedirectorConfig {
            policy: RedirectPolicy::SsdupPlus,
            detector: self.detector,
            threshold: self.threshold,
        };
        redirector.validate()?;
        Ok(AnalysisConfig {
            phases: ior_phases(
                &self.phases,
                self.processes,
                self.request_bytes,
                self.phase_bytes,
                self.seed,
            ),
            arrival: self.arrival,
            redirector,
            policies: RedirectPolicy::ALL.to_vec(),
        })
    }
}

/// One policy's view of one stream.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Decision {
    /// Threshold the stream was judged against.
    pub threshold: f64,
    /// Whether the adaptive list was reset at this stream.
    pub pattern_reset: bool,
    /// Tier the stream's requests went to.
    pub route: Tier,
}

/// One stream of the trace.
#[derive(Clone, Debug, PartialEq)]
pub struct StreamRow {
    /// Stream number in the trace.
    pub index: u64,
    /// Phase of the stream's first request.
    pub phase: usize,
    /// Total random factor `S`.
    pub random_factor: u32,
    /// Random percentage `S / (N - 1)`.
    pub percentage: f64,
    /// One decision per analysed policy, in `AnalysisConfig::policies` order.
    pub decisions: Vec<Decision>,
}

/// Totals of one policy.
#[derive(Clone, Debug, PartialEq)]
pub struct PolicySummary {
    /// The policy.
    pub policy: RedirectPolicy,
    /// Bytes sent to the fast tier, per phase (routed there, or over
    /// buffered bytes).
    pub fast_bytes_per_phase: Vec<u64>,
    /// Bytes written, per phase.
    pub bytes_per_phase: Vec<u64>,
    /// Times the route changed tier.
    pub switches: u64,
    /// Extents in the index after buffering this policy's fast-tier writes.
    pub index_extents: u64,
    /// The index's estimated memory.
    pub index_bytes_estimate: u64,
}

impl PolicySummary {
    /// Bytes sent to the fast tier over the whole trace.
    pub fn fast_bytes(&self) -> u64 {
        self.fast_bytes_per_phase.iter().sum()
    }

    /// Bytes written over the whole trace.
    pub fn bytes(&self) -> u64 {
        self.bytes_per_phase.iter().sum()
    }
}

/// The result of [`analyse`].
#[derive(Clone, Debug)]
pub struct Analysis {
    /// Requests in the trace.
    pub requests: u64,
    /// Every complete stream.
    pub streams: Vec<StreamRow>,
    /// One summary per policy, in `AnalysisConfig::policies` order.
    pub policies: Vec<PolicySummary>,
}

/// Generate the trace and run it through every policy.
pub fn analyse(config: &AnalysisConfig) -> Result<Analysis, WorkloadError> {
    config
        .redirector
        .validate()
        .map_err(|e| WorkloadError(e.to_string()))?;
    let mut trace: Vec<(usize, WriteRequest)> = Vec::new();
    for (phase_index, phase) in config.phases.iter().enumerate() {
        let mut processes = Vec::new();
        for instance in &phase.instances {
            processes.extend(instance.per_process()?);
        }
        trace.extend(
            arrive(processes, config.arrival)
                .into_iter()
                .map(|r| (phase_index, r)),
        );
    }

    let phases = config.phases.len();
    let mut runs: Vec<PolicyRun> = config
        .policies
        .iter()
        .map(|&policy| PolicyRun::new(policy, config.redirector, phases))
        .collect::<Result<_, _>>()?;
    let stream_len = config.redirector.detector.stream_len as usize;
    let mut streams = Vec::with_capacity(trace.len() / stream_len);
    for (position, &(phase, request)) in trace.iter().enumerate() {
        let mut row: Option<StreamRow> = None;
        for run in runs.iter_mut() {
            if let Some(report) = run.handle(phase, request) {
                let row = row.get_or_insert_with(|| StreamRow {
                    index: report.summary.index,
                    phase: trace[position + 1 - stream_len].0,
                    random_factor: report.summary.random_factor,
                    percentage: report.percentage,
                    decisions: Vec::with_capacity(config.policies.len()),
                });
                row.decisions.push(Decision {
                    threshold: report.threshold,
                    pattern_reset: report.pattern_reset,
                    route: report.route,
                });
            }
        }
        streams.extend(row);
    }
    Ok(Analysis {
        requests: trace.len() as u64,
        streams,
        policies: runs.into_iter().map(PolicyRun::finish).collect(),
    })
}

/// The analysis's log: one region no trace fills (far below `u64::MAX`, so
/// the pipeline's `used + len` cannot overflow).
const ANALYSIS_LOG_BYTES: u64 = 1 << 62;

/// One policy's write buffer and counters during the analysis.
struct PolicyRun {
    buffer: WriteBuffer,
    summary: PolicySummary,
    /// Requests handled so far: the analysis's clock.
    handled: u64,
}

impl PolicyRun {
    fn new(
        policy: RedirectPolicy,
        config: RedirectorConfig,
        phases: usize,
    ) -> Result<PolicyRun, WorkloadError> {
        let buffer = WriteBuffer::new(WriteBufferConfig {
            redirector: RedirectorConfig { policy, ..config },
            pipeline: PipelineConfig {
                regions: 1,
                region_bytes: ANALYSIS_LOG_BYTES,
                when_full: WhenFull::Wait,
                wait_max: Duration::ZERO,
            },
            gate: FlushGateConfig::default(),
        })
        .map_err(|e| WorkloadError(e.to_string()))?;
        Ok(PolicyRun {
            buffer,
            handled: 0,
            summary: PolicySummary {
                policy,
                fast_bytes_per_phase: vec![0; phases],
                bytes_per_phase: vec![0; phases],
                switches: 0,
                index_extents: 0,
                index_bytes_estimate: 0,
            },
        })
    }

    fn handle(
        &mut self,
        phase: usize,
        request: WriteRequest,
    ) -> Option<sluice_policy::redirector::StreamReport> {
        // The analysis has no clock of its own: requests arrive one
        // millisecond apart, in trace order (only `cost`'s capacity-tier
        // streams look at time: a file that stops writing lets its stream
        // go after `cost_disk_idle`).
        let now = Time::from_millis(self.handled);
        self.handled += 1;
        let routing = self.buffer.handle_write(now, request);
        self.summary.bytes_per_phase[phase] += request.len;
        let placement = self.buffer.place_write(
            now,
            request.file,
            request.offset,
            request.len,
            request.len,
            0,
            routing.tier,
            now,
            // Pieces are placed one after another: none is in flight.
            false,
        );
        match placement {
            Placement::Log(r) => {
                self.summary.fast_bytes_per_phase[phase] += request.len;
                // INVARIANT: generated requests are far below 4 GiB.
                let len = u32::try_from(request.len).expect("request fits a log record");
                self.buffer.insert(
                    request.file,
                    Extent {
                        file_offset: request.offset,
                        len,
                        location: LogLocation {
                            region: r.region,
                            offset: r.record_offset,
                        },
                        seq: r.seq,
                    },
                );
            }
            Placement::Capacity => {}
            // INVARIANT: the one region (ANALYSIS_LOG_BYTES) never fills
            // and no request is longer than it.
            Placement::Wait { .. } | Placement::TooLarge => {
                unreachable!("the analysis log never fills")
            }
        }
        let report = routing.completed?;
        if report.route != report.next_route {
            self.summary.switches += 1;
        }
        Some(report)
    }

    fn finish(mut self) -> PolicySummary {
        let index = self.buffer.index();
        self.summary.index_extents = index.extent_count() as u64;
        self.summary.index_bytes_estimate = index.memory_bytes_estimate() as u64;
        self.summary
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job() -> IorAnalysis {
        IorAnalysis {
            phases: vec![PhaseKind::Strided, PhaseKind::Mixed],
            processes: 4,
            request_bytes: 64 << 10,
            phase_bytes: 8 << 20,
            seed: 7,
            arrival: Arrival::Lockstep,
            detector: DetectorConfig { stream_len: 32 },
            threshold: ThresholdConfig::default(),
        }
    }

    /// The phases become IOR instances on files of their own, and every
    /// policy is compared under SSDUP+'s grouping and threshold.
    #[test]
    fn an_ior_analysis_is_its_phases_under_every_policy() {
        let config = job().config().unwrap();
        let names: Vec<&str> = config.phases.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["strided", "mixed"]);
        let files: Vec<u64> = config
            .phases
            .iter()
            .flat_map(|p| p.instances.iter().map(|i| i.file.0))
            .collect();
        assert_eq!(files, [1, 2, 3]);
        assert_eq!(config.phases[1].instances[0].file_bytes, 4 << 20);
        assert_eq!(config.redirector.policy, RedirectPolicy::SsdupPlus);
        assert_eq!(config.redirector.detector.stream_len, 32);
        assert_eq!(config.policies, RedirectPolicy::ALL.to_vec());
    }

    #[test]
    fn a_threshold_out_of_range_is_refused() {
        let mut bad = job();
        bad.threshold.change_fraction = 1.5;
        assert!(bad.config().is_err());
    }
}
