//! The terminal side of sluice: what a person at a terminal sees of a
//! running mount, kept out of the binary so that `crates/cli` only parses
//! flags and wires crates.
//!
//! - [`top`]: `sluice top`, the live view (issue 21; docs/top.md);
//! - [`ckpt`]: the table of BBOS jobs `sluice ckpt list` prints;
//! - [`progress`]: the one progress display of long commands (an
//!   `indicatif` bar on a terminal, plain lines elsewhere);
//! - [`client`]: `sluice drain` and `sluice unmount` as the CLI runs them,
//!   with the drain's progress and what Ctrl-C does;
//! - [`service`]: the mount helper form that `mount(8)` and `/etc/fstab`
//!   run, read as the `sluice mount` line it stands for, and
//!   `sluice mount --daemon`, which leaves the terminal once the mount is
//!   up;
//! - [`log`]: the global `--log-level` flag and the filter the binary's
//!   one log subscriber takes from it and `RUST_LOG`.

pub mod ckpt;
pub mod client;
pub mod log;
pub mod progress;
pub mod service;
pub mod top;
