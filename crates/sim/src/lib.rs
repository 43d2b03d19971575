//! sluice's simulation environment.
//!
//! Today it holds the workload generators ([`workload`]): the IOR access
//! patterns as the server sees them, a merged stream of write requests from
//! many processes. The discrete-event core, device models and experiment
//! definitions arrive with the simulator issue (issue 3) and reuse these
//! generators, so the same patterns drive the simulator and real runs.

pub mod analyse;
pub mod rng;
pub mod workload;
