//! Placeholder: the real burst buffer — fast-tier log with checksummed
//! records, recovery, flusher, read path, LiU buffer, checkpoint staging —
//! arrives with the engine issue (issue 4). It will drive the state machines
//! of `sluice-policy` through the traits of `sluice-env`. See ARCHITECTURE.md.
