//! LADS layout-aware bulk transfer for sluice (`sluice xfer`; DESIGN §7,
//! seed 003; docs/lads.md).
//!
//! * [`wire`]: the versioned, length-prefixed protocol;
//! * [`tls`]: rustls configuration, `keygen`, a TLS connection shared by a
//!   reader and writers;
//! * [`sink`]: `sluice xfer serve`, which writes partial copies and renames
//!   them into place after a whole-file check;
//! * [`source`]: `sluice xfer send`, which schedules objects per storage
//!   target with `sluice_policy::lads`;
//! * [`copy`]: `sluice xfer copy`, the same scheduling between two local
//!   directories, without the network;
//! * [`layout`]: where objects live (POSIX, emulated PFS, GlusterFS,
//!   Lustre, CephFS);
//! * [`journal`]: the source's resume journal;
//! * [`crc`]: a file's crc32c from its pieces';
//! * [`dest`]: the destination tree (checked paths, partial copies put in
//!   place);
//! * [`direct`]: aligned buffers and writes (and reads) around the page
//!   cache.

pub mod copy;
pub mod crc;
pub mod dest;
pub mod direct;
pub mod journal;
pub mod layout;
pub mod sink;
pub mod source;
pub mod tls;
mod tree;
pub mod wire;
