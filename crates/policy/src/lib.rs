//! sluice's policy layer: pure, sans-IO state machines.
//!
//! Every policy receives input through `handle_*` methods, with the current
//! time passed in as [`Time`] where time matters, and hands out decisions as
//! return values or through `poll_*` methods. No policy reads a clock, touches
//! a file, spawns a thread or blocks. The same objects run inside the real
//! engine (driven by wall-clock time and real tiers) and inside the simulator
//! (driven by virtual time), so there is exactly one copy of each algorithm.
//!
//! INVARIANT: this crate is `no_std` (with `alloc`) and has no dependencies;
//! `.ci/run` proves it by building for `x86_64-unknown-none`.
#![cfg_attr(not(test), no_std)]

extern crate alloc;

pub mod bbos;
pub mod cost;
pub mod detector;
pub mod extent_index;
pub mod flush_gate;
pub mod lads;
pub mod pipeline;
pub mod redirector;
pub mod seek_fit;
pub mod segments;
pub mod threshold;
pub mod token_bucket;
mod types;
pub mod units;
pub mod write_buffer;

pub use types::{FileId, LogLocation, RegionId, Tier, Time, WriteRequest};
