//! The BBOS checkpoint catalogue: what the burst buffer knows about
//! checkpointing jobs, their checkpoint files, version counters and the bytes
//! written per planner period — behind one trait, [`Catalog`], with two
//! stores:
//! * [`RedbCatalog`] — an embedded redb file (the default);
//! * [`RedisCatalog`] — a Redis server, shared by several sluice instances
//!   under different key prefixes.
//!
//! [`open`] picks the store from a [`MetaSpec`] (`redb:PATH`, a path, or
//! `redis[s]://[USER@]HOST:PORT[/DB][?prefix=NAME]`, with a password file
//! and a CA file beside it). Design, key layouts and how to
//! run the tests against Redis: `docs/catalog.md`.
//!
//! Invariants every store keeps (one test suite, `tests/suite.rs`, checks
//! both):
//! * every write is durable when the call returns `Ok`;
//! * listings are sorted by key (job id, checkpoint path, period index);
//! * `next_version` is atomic across threads and processes and never
//!   returns a value twice for a job, also across restarts;
//! * `rename_ckpt` moves a record atomically: no reader sees it at both or
//!   neither path;
//! * a stored value that cannot be decoded is an error naming the store and
//!   key, never a panic and never silently skipped;
//! * `jobs_generation` changes whenever the set of jobs does, and is read
//!   before the jobs, so a node that saw generation `g` and then the jobs
//!   has jobs at least as new as `g`;
//! * a store is marked with its [`FORMAT`]; one marked with a newer format
//!   is refused at open, an unmarked (format 1) one is marked and read with
//!   the defaults of the fields format 2 added.

mod error;
mod model;
mod redb_store;
mod redb_upgrade;
mod redis_security;
mod redis_store;
mod resp;
mod spec;

pub use error::CatalogError;
pub use model::{CkptRecord, Failure, JobSpec, Location, PeriodStats};
pub use redb_store::RedbCatalog;
pub use redis_security::{PASSWORD_BYTES_MAX, SYSTEM_CA_BUNDLE};
pub use redis_store::{
    RedisCatalog, CONNECT_TIMEOUT, IDLE_CONNECTIONS_MAX, IO_TIMEOUT, RENAME_ATTEMPTS_MAX,
};
/// The catalogue format this sluice reads and writes. Format 2 added the
/// node id of a checkpoint record, a job's `files` per checkpoint, the job
/// generation and the open version of each job; format 1 stores (sluice
/// before node ids, unmarked) are read with `node: None` and `files: 1`.
pub const FORMAT: u64 = 2;

pub use spec::{MetaSpec, RedisSpec, DEFAULT_PREFIX, DEFAULT_REDIS_PORT, PREFIX_LEN_MAX};

/// A store of checkpoint metadata. Implementations are shared between
/// threads; every method is one atomic, durable operation.
pub trait Catalog: Send + Sync {
    /// Inserts `job`, or replaces the job with the same id. Fails with
    /// [`CatalogError::Invalid`] if [`JobSpec::check`] does.
    fn put_job(&self, job: &JobSpec) -> Result<(), CatalogError>;
    /// Removes the job `id`; `false` if there was none. Its version counter
    /// stays, so a re-added job never reuses a version.
    fn remove_job(&self, id: &str) -> Result<bool, CatalogError>;
    /// The job `id`, if there is one.
    fn job(&self, id: &str) -> Result<Option<JobSpec>, CatalogError>;
    /// All jobs, sorted by id.
    fn jobs(&self) -> Result<Vec<JobSpec>, CatalogError>;
    /// The next checkpoint version of `job`: 1 the first time, then
    /// increasing; atomic across threads, never repeated, kept across
    /// restarts. (Redis: a reconnect may skip one, see `docs/catalog.md`.)
    fn next_version(&self, job: &str) -> Result<u64, CatalogError>;
    /// Inserts `rec`, or replaces the record with the same path. Fails with
    /// [`CatalogError::Invalid`] if [`CkptRecord::check`] does.
    fn put_ckpt(&self, rec: &CkptRecord) -> Result<(), CatalogError>;
    /// The record of checkpoint `path`, if there is one.
    fn ckpt(&self, path: &str) -> Result<Option<CkptRecord>, CatalogError>;
    /// Removes the record of `path`; `false` if there was none.
    fn remove_ckpt(&self, path: &str) -> Result<bool, CatalogError>;
    /// Atomically moves the record at `from` to `to` (updating its `path`),
    /// replacing any record at `to`; `false`, changing nothing, if there is
    /// no record at `from`.
    fn rename_ckpt(&self, from: &str, to: &str) -> Result<bool, CatalogError>;
    /// All checkpoint records, sorted by path.
    fn ckpts(&self) -> Result<Vec<CkptRecord>, CatalogError>;
    /// Inserts the statistics of period `p.index`, or replaces them.
    fn put_period(&self, p: &PeriodStats) -> Result<(), CatalogError>;
    /// The `last` periods with the highest indexes, in ascending order.
    fn periods(&self, last: usize) -> Result<Vec<PeriodStats>, CatalogError>;
    /// Removes all periods but the `keep` with the highest indexes.
    fn trim_periods(&self, keep: usize) -> Result<(), CatalogError>;
    /// Whether other sluice nodes may use this catalogue at the same time
    /// (Redis). A record without a node id (format 1) is then nobody's to
    /// reconcile; in a catalogue only one node opens (redb), it is that
    /// node's.
    fn shared(&self) -> bool;
    /// A counter that changes whenever a job is put or removed (0 before
    /// any): a node compares it with the value it last saw and re-reads
    /// [`Catalog::jobs`] only when it differs.
    fn jobs_generation(&self) -> Result<u64, CatalogError>;
    /// The version a new checkpoint file of `job` belongs to, atomically
    /// across nodes: the job's open version if it has had fewer than
    /// `files` files and began less than `window_ms` before `now_ms` (in
    /// either direction: clocks of nodes differ); otherwise a new version
    /// from the same counter as [`Catalog::next_version`], opened at
    /// `now_ms` with this file as its first. With `files` = 1 every call is
    /// a new version.
    fn join_version(
        &self,
        job: &str,
        files: u32,
        window_ms: u64,
        now_ms: u64,
    ) -> Result<u64, CatalogError>;
    /// The store and its location, for logs and status:
    /// `redb /path/catalog.redb` or
    /// `redis redis://127.0.0.1:6390 prefix sluice`.
    fn describe(&self) -> String;
    /// Ring `node`'s recall doorbell with `entry`, the name of a recall
    /// entry written for it on the capacity tier (on-demand consistency:
    /// a holder takes its doorbell often and lists its entry directory
    /// seldom; docs/fuse.md, "On demand"). `Ok(false)`: this catalogue has
    /// no doorbell (redb: one node's).
    fn ring_recall(&self, node: &str, entry: &str) -> Result<bool, CatalogError> {
        let _ = (node, entry);
        Ok(false)
    }
    /// Take up to `max` entries rung for `node` (oldest first) off its
    /// doorbell. Empty when none was rung, or without a doorbell.
    fn take_recalls(&self, node: &str, max: usize) -> Result<Vec<String>, CatalogError> {
        let _ = (node, max);
        Ok(Vec::new())
    }
}

/// Opens the catalogue `spec` names: a redb file (created if missing) or a
/// connection to a Redis server (which must answer within
/// [`CONNECT_TIMEOUT`]).
pub fn open(spec: &MetaSpec) -> Result<Box<dyn Catalog>, CatalogError> {
    Ok(match spec {
        MetaSpec::Redb { path } => Box::new(RedbCatalog::open(path)?),
        MetaSpec::Redis(redis) => Box::new(RedisCatalog::open(redis)?),
    })
}
