//! The capacity tier's health as the engine sees it (issue 31;
//! docs/crash-consistency.md, "Capacity-tier faults").
//!
//! The capacity backend keeps the tier's health (`sluice_env::TierHealth`:
//! healthy, read-only, or lost when its name no longer leads to the
//! directory it was opened on) and refuses every call once it is lost.
//! The engine looks at it every second (the heartbeat thread), before a
//! flush writes and again before it resets regions, and after a flush
//! failed. What it does with it:
//!
//! * **No byte leaves the log unless the tier is healthy.** The flusher
//!   does not start while the tier is unhealthy; a flush that finds it
//!   lost or read-only before its regions are reset leaves them in the
//!   log (the bytes written meanwhile went to a directory nobody reads, or
//!   nowhere, and are written again later). Every capacity sync checks the
//!   root's identity too (the backend), so a per-file sync never drops
//!   bytes from the log for a copy in a detached file system.
//! * **Drains and forced waits fail at once**, with ENODEV (lost) or EROFS
//!   (read-only), the cause, and how many bytes stay in the log.
//! * **A change is said once**: a `last_errors` incident (logged as an
//!   ERROR) when the tier turns lost or read-only, an INFO line when it is
//!   healthy again, and the state in status and metrics. A tier read-only
//!   from the start is no incident: the mount serves it read-only.
//!
//! Flushing resumes by itself when the tier is healthy again: for a lost
//! tier, only when its name leads to the very directory it was opened on.

use std::io;
use std::time::SystemTime;

use sluice_env::TierHealth;

use super::{Shared, State};

/// Look at the capacity tier again (the heartbeat calls this every
/// second), then note what was found.
pub(super) fn watch_capacity(shared: &Shared) {
    let _ = shared.capacity.check_root();
    note_health(shared);
}

/// Take the capacity tier's health as last found into the engine's state:
/// on a change, say it (module docs) and wake the flusher and any drain.
/// Returns it.
pub(super) fn note_health(shared: &Shared) -> TierHealth {
    let health = shared.capacity.health();
    let mut state = sluice_env::lock(&shared.state);
    if state.capacity_health.name() == health.name() {
        return health;
    }
    state.capacity_health = health.clone();
    if !health.is_healthy() {
        super::ahead::forget_all(&mut state);
    }
    let buffered = state.buffer.buffered_bytes();
    shared.changed.notify_all();
    // The incident is kept before the lock is let go: a drain that finds
    // the new state (and fails on it) finds its incident too, whichever
    // thread noticed the change first.
    match &health {
        TierHealth::Lost { cause, .. } => {
            let message = format!(
                "capacity tier lost: {cause}; sluice writes nothing more to it and flushes \
                 nothing: {} stay buffered in the fast tier's log",
                bytes_text(buffered)
            );
            record(shared, &health, message);
        }
        TierHealth::ReadOnly { cause, .. } => {
            let message = format!(
                "capacity tier read-only: {cause}; changes fail with EROFS and nothing is \
                 flushed: {} stay buffered in the fast tier's log until it is writable",
                bytes_text(buffered)
            );
            record(shared, &health, message);
        }
        TierHealth::Healthy => tracing::info!(
            capacity = %shared.capacity.describe(),
            buffered_bytes = buffered,
            "capacity tier healthy again: flushing resumes"
        ),
    }
    drop(state);
    health
}

/// An incident for `last_errors` (logged): a tier state that refuses calls.
fn record(shared: &Shared, health: &TierHealth, message: String) {
    shared.incidents.record(crate::Incident {
        at: SystemTime::now(),
        op: "capacity".to_string(),
        path: None,
        tier: Some("capacity".to_string()),
        errno: health.errno(),
        message,
    });
}

/// Why nothing may be flushed now, as the error a waiting drain (`what`)
/// fails with: the tier's errno (ENODEV when lost, EROFS when read-only),
/// its cause, and where the bytes are. `None` when the tier is healthy.
pub(super) fn flush_refusal(shared: &Shared, state: &State, what: &str) -> Option<io::Error> {
    let health = &state.capacity_health;
    let errno = health.errno()?;
    let buffered = bytes_text(state.buffer.buffered_bytes());
    let root = shared.capacity.describe();
    let message = match health {
        TierHealth::Lost { cause, .. } => format!(
            "{what}: the capacity tier is lost: {cause}. Nothing more was written to it; \
             {buffered} stay buffered in the fast tier's log. Flushing resumes by itself if \
             the name leads to that directory again; otherwise unmount (the bytes stay in the \
             log) and mount again: recovery writes them back to the tier then at its name, and \
             keeps in quarantine the bytes of files it does not hold (sluice quarantine list)"
        ),
        _ => format!(
            "{what}: the capacity tier ({root}) is read-only: {}; {buffered} stay buffered in \
             the fast tier's log and are flushed once it is writable again",
            health.cause().unwrap_or_default()
        ),
    };
    Some(sluice_env::with_context(
        io::Error::from_raw_os_error(errno),
        message,
    ))
}

/// `1.5 MiB`.
pub(super) fn bytes_text(bytes: u64) -> String {
    if bytes < 1024 * 1024 {
        format!("{bytes} bytes")
    } else {
        format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
    }
}
