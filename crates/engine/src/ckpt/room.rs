//! Room on the fast tier: the bytes used, the residents the cold ranking
//! sees, eviction (which copies to evict for a new one is
//! `sluice_policy::bbos::Placer`'s decision), and the per-period write
//! statistics the planner learns from.

use std::io;
use std::sync::Arc;

use sluice_catalog::{Location, PeriodStats};
use sluice_env::RelPath;
use sluice_policy::bbos::Resident;

use super::jobs::job_rate;
use super::{data_path, dir, rec_path, Copy, Shared, State, Target};

impl Shared {
    pub(super) fn used(state: &State) -> u64 {
        state.copies.values().map(|c| c.len).sum()
    }

    /// (write cap, demotion rate) now, bytes/s; a write cap of `None` is
    /// no cap (no checkpoint is being written).
    pub(super) fn rates(&self, state: &State) -> (Option<f64>, f64) {
        if state.writers == 0 {
            return (None, self.options.bandwidths.idle_demote);
        }
        let r = state.planner.rates(Shared::used(state));
        (Some(r.write), r.demote)
    }

    pub(super) fn resident(&self, state: &State, c: &Copy) -> Resident {
        let rate = state
            .jobs
            .iter()
            .find(|j| j.id == c.rec.job)
            .map_or(0.0, |j| job_rate(j, self.options.node_mtbf));
        Resident {
            // INVARIANT: every copy's job has a key (module docs).
            job: state.job_keys.get(&c.rec.job).copied().unwrap_or(u64::MAX),
            version: c.rec.version,
            bytes: c.len,
            failure_rate: rate,
            written: c.written,
            accessed: c.accessed,
        }
    }

    /// Removes a copy's data and record (the capacity tier must hold it, or
    /// the file must be going away).
    pub(super) fn remove_copy(&self, state: &mut State, id: u64) -> io::Result<()> {
        if let Some(c) = state.copies.remove(&id) {
            state.by_path.remove(&RelPath::new(&c.rec.path)?);
            // Handles still open keep the (now unnamed) file, as POSIX
            // keeps an unlinked file for its open descriptors.
            let mut writers = 0;
            for h in state.handles.values_mut() {
                if matches!(h.target, Target::Copy(t) if t == id) {
                    h.target = Target::Capacity(Arc::clone(&c.file));
                    writers += u32::from(h.writing);
                }
            }
            state.writers = state.writers.saturating_sub(writers);
        }
        for path in [data_path(id), rec_path(id)] {
            match self.fast.remove_file(&path) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        self.fast.sync_dir(&dir())
    }

    /// Evicts a cached copy: the capacity tier keeps the checkpoint.
    pub(super) fn evict(&self, state: &mut State, id: u64) -> io::Result<()> {
        let Some(c) = state.copies.get(&id) else {
            return Ok(());
        };
        let mut rec = c.rec.clone();
        let bytes = c.len;
        self.remove_copy(state, id)?;
        rec.location = Location::Capacity;
        rec.staged_id = None;
        let r = self.catalog.put_ckpt(&rec);
        self.note_catalog(state, r);
        state.stats.evictions += 1;
        state.stats.evicted_bytes += bytes;
        Ok(())
    }
}

pub(super) fn record_periods(shared: &Shared, state: &mut State, closed: &[(u64, u64)]) {
    for &(index, bytes) in closed {
        let p = PeriodStats {
            index: state.period_base + index,
            written_bytes: bytes,
        };
        let r = shared
            .catalog
            .put_period(&p)
            .and_then(|()| shared.catalog.trim_periods(shared.options.window));
        shared.note_catalog(state, r);
    }
}
