//! sluice's simulation environment: a deterministic discrete-event
//! simulator that drives the policy crate's objects in virtual time.
//!
//! * [`event`] — virtual clock and event queue, ordered by (time, sequence);
//! * [`rng`] — the seeded generator every random choice comes from;
//! * [`workload`] — IOR, mpi-io-test, ior-mpi-io, MPI-Tile-IO and HPIO
//!   generators, as traces (server view) and as per-process scripts;
//! * [`checkpoint`] — a fluid model of an over-subscribed burst buffer
//!   under checkpoint traffic, running the BBOS policies;
//! * [`cluster`] — clients, links and I/O nodes with an HDD and an SSD each,
//!   running OrangeFS, OrangeFS-BB, SSDUP, SSDUP+ or sluice (policy `cost`)
//!   built from the policies;
//! * [`experiments`] — the four papers' figures as runnable experiments:
//!   one runner for every kind of simulation, and a figure of the common
//!   shape (systems × a sweep) declared as data;
//! * [`output`] — reports as Markdown, JSON and PNG plots;
//! * [`analyse`] — a trace through every redirection policy (no devices);
//! * [`transfer`] — one LADS bulk transfer (source PFS, buffers, network,
//!   sink PFS with a page cache) running the LADS scheduler.
//!
//! Device models live in `sluice-devices`, shared with the engine's
//! emulated tiers.

pub mod analyse;
pub mod checkpoint;
pub mod cluster;
pub mod event;
pub mod experiments;
pub mod output;
pub mod rng;
pub mod transfer;
pub mod workload;
