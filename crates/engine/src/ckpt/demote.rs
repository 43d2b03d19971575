//! Demotion: the thread that copies staged checkpoints to the capacity
//! tier under the planner's throttle, and drain.

use std::io;
use std::num::NonZeroU64;
use std::sync::Arc;
use std::time::Duration;

use sluice_catalog::Location;
use sluice_env::{copy_range, wait_for, BackendFile, CopyHow, OpenOptions, RelPath};
use sluice_policy::bbos::{cold_order, newest_versions, Resident};

use super::{Checkpoints, Shared, State};

impl Checkpoints {
    /// Demote the coldest closed staged copy, if any; `true` if one was
    /// demoted. The demotion thread calls this in a loop; tests step it.
    pub fn demote_next(&self) -> io::Result<bool> {
        demote_next(&self.shared)
    }

    /// Wait until every closed staged copy is demoted (errors if demotion
    /// keeps failing).
    pub fn drain(&self) -> io::Result<()> {
        loop {
            if !self.shared.options.background && !self.demote_next()? {
                return Ok(());
            }
            let state = sluice_env::lock(&self.shared.state);
            let pending = state
                .copies
                .values()
                .any(|c| c.rec.location == Location::Staged && c.writers == 0);
            if !pending {
                return Ok(());
            }
            if let Some(e) = state.stats.last_error.clone() {
                if state.stats.demotion_errors >= 5 {
                    return Err(io::Error::other(format!("drain checkpoints: {e}")));
                }
            }
            drop(wait_for(
                &self.shared.changed,
                state,
                Duration::from_millis(20),
            ));
        }
    }
}

/// The wait after a failed demotion: doubles per failure up to
/// [`DEMOTE_BACKOFF_MAX`], back to the minimum after one that worked, so a
/// failing capacity tier is retried and reported (each failure is an
/// incident, logged) without spinning.
pub(super) const DEMOTE_BACKOFF_MIN: Duration = Duration::from_millis(50);

pub(super) const DEMOTE_BACKOFF_MAX: Duration = Duration::from_secs(5);

pub(super) fn demoter_loop(shared: &Shared) {
    let mut backoff = DEMOTE_BACKOFF_MIN;
    loop {
        {
            let mut state = sluice_env::lock(&shared.state);
            if state.shutdown {
                return;
            }
            // Records missed during a catalogue outage, once it may answer.
            let due = state
                .catalog_retry_at
                .is_none_or(|at| shared.clock.now() >= at);
            if state.catalog_behind && due {
                shared.resync(&mut state);
            }
        }
        let wait = match demote_next(shared) {
            Ok(true) => {
                backoff = DEMOTE_BACKOFF_MIN;
                continue;
            }
            Ok(false) => DEMOTE_BACKOFF_MIN,
            Err(_) => {
                let wait = backoff;
                backoff = (backoff * 2).min(DEMOTE_BACKOFF_MAX);
                wait
            }
        };
        let state = sluice_env::lock(&shared.state);
        if state.shutdown {
            return;
        }
        drop(wait_for(&shared.changed, state, wait));
    }
}

pub(super) fn demote_next(shared: &Shared) -> io::Result<bool> {
    let (id, generation, path, src, len) = {
        let mut state = sluice_env::lock(&shared.state);
        let candidates: Vec<(u64, Resident)> = state
            .copies
            .iter()
            .filter(|(_, c)| c.rec.location == Location::Staged && c.writers == 0 && !c.demoting)
            .map(|(&id, c)| (id, shared.resident(&state, c)))
            .collect();
        if candidates.is_empty() {
            return Ok(false);
        }
        let residents: Vec<Resident> = candidates.iter().map(|(_, r)| *r).collect();
        let newest = newest_versions(residents.iter(), []);
        let first = cold_order(shared.options.eviction, &residents, &newest)[0];
        let id = candidates[first].0;
        let Some(c) = state.copies.get_mut(&id) else {
            return Ok(false);
        };
        c.demoting = true;
        (
            id,
            c.generation,
            c.rec.path.clone(),
            Arc::clone(&c.file),
            c.len,
        )
    };
    let result = copy_out(shared, id, generation, &path, src.as_ref(), len);
    let mut state = sluice_env::lock(&shared.state);
    // Found by its file: a rename over another copy may have given it a
    // new id meanwhile (`Shared::renumber`).
    if let Some(c) = state
        .copies
        .values_mut()
        .find(|c| Arc::ptr_eq(&c.file, &src))
    {
        c.demoting = false;
    }
    match result {
        Ok(true) => {
            let still = state.copies.get(&id).is_some_and(|c| {
                c.generation == generation && c.writers == 0 && c.rec.path == path
            });
            if !still {
                state.stats.demotion_restarts += 1;
                shared.changed.notify_all();
                return Ok(true);
            }
            let Some(c) = state.copies.get_mut(&id) else {
                return Ok(true);
            };
            c.rec.location = Location::Cached;
            let rec = c.rec.clone();
            if let Err(e) = shared.write_rec(id, &rec, true) {
                if let Some(c) = state.copies.get_mut(&id) {
                    c.rec.location = Location::Staged;
                }
                return Err(demotion_failed(shared, &mut state, &path, e));
            }
            let r = shared.catalog.put_ckpt(&rec);
            shared.note_catalog(&mut state, r);
            state.stats.demotions += 1;
            state.stats.demoted_bytes += len;
            shared.changed.notify_all();
            Ok(true)
        }
        Ok(false) => {
            state.stats.demotion_restarts += 1;
            Ok(true)
        }
        Err(e) => Err(demotion_failed(shared, &mut state, &path, e)),
    }
}

pub(super) fn demotion_failed(
    shared: &Shared,
    state: &mut State,
    path: &str,
    e: io::Error,
) -> io::Error {
    shared
        .incidents
        .record_error("demote", Some(path), None, &e);
    state.stats.demotion_errors += 1;
    state.stats.last_error = Some(format!("demotion: {e}"));
    e
}

/// Copies a staged file to the capacity tier, paced; `false` if the file
/// changed (or the stager is shutting down) and the copy was abandoned.
pub(super) fn copy_out(
    shared: &Shared,
    id: u64,
    generation: u64,
    path: &str,
    src: &dyn BackendFile,
    len: u64,
) -> io::Result<bool> {
    let target = RelPath::new(path)?;
    let dst = shared.capacity.open(&target, OpenOptions::CREATE)?;
    let mut buf = Vec::new();
    let mut offset = 0;
    while offset < len {
        let chunk = (len - offset).min(shared.options.chunk_bytes);
        // Pace: wait for tokens at the current demotion rate.
        loop {
            let mut state = sluice_env::lock(&shared.state);
            let changed = state
                .copies
                .get(&id)
                .is_none_or(|c| c.generation != generation || c.writers > 0);
            if state.shutdown || changed {
                return Ok(false);
            }
            let now = shared.clock.now();
            let (_, rate) = shared.rates(&state);
            let Some(rate) = NonZeroU64::new(rate as u64) else {
                // No demotion under writes now (MaxBW, pattern 1).
                drop(wait_for(&shared.changed, state, Duration::from_millis(20)));
                continue;
            };
            state.demote_bucket.set_rate(now, rate);
            match state.demote_bucket.try_take(now, chunk) {
                Ok(()) => break,
                Err(at) => {
                    drop(state);
                    shared.clock.sleep(at.saturating_since(now));
                }
            }
        }
        let (n, how) = copy_range(src, dst.as_ref(), offset, chunk, &mut buf)?;
        if how == CopyHow::Kernel {
            sluice_env::lock(&shared.state).stats.kernel_copies += 1;
        }
        if n < chunk {
            break;
        }
        offset += n;
    }
    // The name too: the copy is `cached` only once the capacity tier would
    // keep it through a crash.
    shared.settle_on_capacity(dst.as_ref(), &target, len)?;
    // And the fast-tier copy: after a crash a `cached` record's copy
    // serves restart reads, so it must hold the bytes just copied, also
    // when the application closed it without an fsync.
    src.sync_data()?;
    Ok(true)
}
