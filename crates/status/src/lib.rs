//! What a sluice mount reports, and how to ask for it (issue 35, "One
//! status table").
//!
//! - [`snapshot`]: the [`Status`] snapshot and its views, with their JSON
//!   (serde) and the text of `sluice status`;
//! - [`metrics`]: every metric declared once (name, kind, help, label, the
//!   snapshot field it is read from), from which the Prometheus exposition
//!   and docs/metrics.md are drawn;
//! - [`client`]: the control socket's client: find a mount's socket, send
//!   a request, read the answer; clear a dead mount;
//! - [`mounts`]: the kernel's mount table as sluice reads it, and one
//!   unmount attempt, shared by the client and the mount daemon.
//!
//! The crate knows nothing of the engine, FUSE or TLS: the mount daemon
//! (`sluice-daemon`) takes a snapshot from the live engine and serves it;
//! `sluice status`, `sluice top` and the drain and unmount clients read it
//! through this crate alone.

pub mod client;
pub mod metrics;
pub mod mounts;
pub mod snapshot;

pub use client::{
    clear_dead_mount, control_request, control_request_at, control_socket_of, mount_of,
};
pub use snapshot::{
    region_letter, CkptStats, CkptStatusView, FileStatusView, IncidentView, LiuFileView,
    LiuStatusView, QuarantineView, Status, TierStatus,
};
