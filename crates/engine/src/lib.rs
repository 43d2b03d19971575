//! The sluice burst-buffer engine (docs/engine.md).
//!
//! * [`log`] — the fast-tier log format: region files, checksummed records
//!   and the recovery scan;
//! * [`engine`] — the engine: the SSDUP+ write path, the merged read path,
//!   the flusher, drain, fsync and recovery, driving the `sluice-policy`
//!   state machines over two `sluice-env` backends;
//! * [`liu`] — LiU's read path: the segment buffer, lifted heads and
//!   sectioned loads as a wrapper around the capacity backend;
//! * [`ckpt`] — BBOS: checkpoint files staged on the fast tier, admitted
//!   per job, throttled, demoted, cached for restarts and evicted cold-first;
//! * [`router`] — one way in to both: a path or handle goes to the engine
//!   or, checkpoint-class, to the stager; what close and fsync do under
//!   the mount's consistency;
//! * [`incidents`] — `last_errors`: the ring of a mount's newest failures,
//!   each logged as it is recorded.

pub mod ckpt;
pub mod engine;
pub mod incidents;
pub mod liu;
pub mod log;
pub mod router;

pub use ckpt::{Checkpoints, CkptOptions, CkptStats, CkptStatus};
pub use engine::{
    quarantine_find, quarantine_list, quarantine_remove, quarantine_restore, ChangeStamp,
    CloseSync, Doorbell, Drained, Engine, EngineConfig, EngineStats, EngineStatus, HeldMark,
    HeldState, KernelFile, Mark, MarkStore, OnDemand, QuarantineEntry, Sealing, HELD_XATTR,
    HIDDEN_DIR, QUARANTINE_DIR, STATE_XATTR,
};
pub use incidents::{Incident, Incidents};
pub use liu::{LiuBackend, LiuOptions, LiuStatus};
pub use router::{Consistency, Router};
