//! The sluice mount daemon: what runs behind `sluice mount`.
//!
//! - [`tiers`]: the two tiers' backends opened from a checked config
//!   (emulated devices, LiU's read path over the capacity tier);
//! - [`mount::Mount`]: a running mount: the fast tier's lock, the engine
//!   and the checkpoint stager started, the FUSE session of
//!   `sluice-fuse` served, its control socket, metrics endpoint and
//!   flush-rate sampler;
//! - [`fast_lock`]: the fast tier's lock (one mount per fast tier);
//! - [`status`]: taking the [`Status`] snapshot that `sluice status` and
//!   `/metrics` report (its types, JSON and text are `sluice-status`'s);
//! - [`metrics`]: the one table of metrics, encoded from a `Status` by
//!   prometheus-client, and the `/metrics` endpoint.
//!
//! `sluice-fuse` keeps the FUSE adapter and the namespace (`Volume`);
//! `sluice-config` the typed, checked config. Design: ARCHITECTURE.md;
//! the mount's behaviour: docs/fuse.md; metric names: docs/metrics.md.

pub mod fast_lock;
pub mod metrics;
pub mod mount;
pub mod status;
pub mod tiers;

pub use mount::{
    clear_dead_mount, control_request, control_request_at, control_socket_of, mount_of, preflight,
    Mount, Preflight,
};
pub use status::Status;
