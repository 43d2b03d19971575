//! Device models: HDD, SSD and network link (EVALUATION §1).
//!
//! Pure: no I/O and no clock. A model is told the time (`now`) or asked for
//! a service time and decides what happens; the simulator applies the
//! answer in virtual time, the emulated tiers (engine issue) in real time by
//! sleeping before they complete real file I/O. One copy of each model.

pub mod hdd;
pub mod link;
pub mod ssd;
