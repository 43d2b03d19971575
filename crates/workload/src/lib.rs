//! Workloads of sluice that drive real file systems, kept out of the
//! binary so that `crates/cli` only parses flags and wires crates:
//!
//! * [`profile`] — `sluice profile`: measure a device (sequential and
//!   random requests, latency percentiles), find the knee, recommend the
//!   LiU head size and the cost model's seek;
//! * [`demo`] — `sluice demo`: the main job's writers, its live status
//!   lines and its byte-for-byte verifier.
//!
//! Its binaries are the benchmark load generators: `sluice-readers` (the
//! LiU paper's read benchmarks, for `scripts/bench-liu.sh`) and
//! `sluice-ckpt-load` (checkpoint/restart jobs, for
//! `scripts/bench-bbos.sh`). Their access patterns are the simulator's
//! (`sluice_sim::workload`), computed there once.

pub mod demo;
pub mod profile;
