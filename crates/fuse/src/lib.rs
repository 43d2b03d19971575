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
//! - `pagecache`: small files kept in the kernel's page cache from their
//!   last close to their next open while their capacity file is unchanged;
//! - `workers`: the threads that read /dev/fuse and the pool that takes
//!   the requests that may wait on a tier.
//!
//! The daemon around it (the mount, its control socket, metrics and
//! status) is `sluice-daemon`. Design and consistency model: docs/fuse.md.

pub mod errno;
pub mod fs;
pub mod inodes;
mod pagecache;
mod passthrough;
#[cfg(test)]
mod testing;
pub mod volume;
mod workers;
