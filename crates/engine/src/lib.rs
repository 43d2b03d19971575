//! The sluice burst-buffer engine. It arrives in pieces: today it holds the
//! fast-tier log format ([`log`]: region files, checksummed records and the
//! recovery scan). The write/read path, flusher, fsync protocol and recovery
//! that drive the `sluice-policy` state machines through the `sluice-env`
//! backends follow; `docs/engine.md` is their contract.

pub mod log;
