//! The FUSE mount of sluice (DESIGN §1–3): a thin adapter from FUSE
//! requests to the engine, and the only place errors become errnos.
//!
//! - [`fs::SluiceFs`]: the request handlers, a thin adapter: fuser's
//!   arguments in, one [`volume::Volume`] call, errno and reply out;
//! - [`volume::Volume`]: the namespace without FUSE — inode table, class
//!   routing (engine or checkpoint stager), names, attributes, access
//!   checks, handles; tested against a reference model without a mount;
//! - [`inodes`]: inode numbers and the paths they name;
//! - `passthrough`: the kernel's rules for FUSE passthrough handles (files
//!   the engine never buffers, read and written by the kernel itself);
//! - [`mount::Mount`]: a running mount with its control socket, metrics
//!   endpoint and flush-rate sampler;
//! - [`fast_lock`]: the fast tier's lock (one mount per fast tier);
//! - [`status`]: taking the [`Status`] snapshot that `sluice status` and
//!   `/metrics` report (its types, JSON and text are `sluice-status`'s);
//! - [`metrics`]: the one table of metrics, encoded from a `Status` by
//!   prometheus-client, and the `/metrics` endpoint.
//!
//! Design and consistency model: docs/fuse.md; metric names: docs/metrics.md.

pub mod errno;
pub mod fast_lock;
pub mod fs;
pub mod inodes;
pub mod metrics;
pub mod mount;
mod passthrough;
pub mod status;
pub mod volume;
mod workers;

pub use mount::{
    clear_dead_mount, control_request, control_request_at, control_socket_of, mount_of, preflight,
    Mount, Preflight,
};
pub use status::Status;
