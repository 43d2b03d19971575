//! Room on the fast tier: the bytes used, the residents the cold ranking
//! sees, eviction (which copies to evict for a new one is
//! `sluice_policy::bbos::Placer`'s decision), and the per-period write
//! statistics the planner learns from.

use std::io;
use std::sync::Arc;

use sluice_catalog::{Location, PeriodStats};
use sluice_env::{BackendFile, RelPath};
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

    /// The room new checkpoints are placed in: `S`, or less when the fast
    /// tier's file system has less than that free beside the copies it
    /// holds, once its other users' claim (the log's growth) is kept out.
    /// `S` when the tier cannot tell its free space.
    pub(super) fn room(&self, state: &State) -> u64 {
        let s = self.options.capacity;
        let Ok(space) = self.fast.space() else {
            return s;
        };
        let others = sluice_env::lock(&self.others)
            .as_ref()
            .map_or(0, |claim| claim());
        s.min(Shared::used(state).saturating_add(space.free_bytes.saturating_sub(others)))
    }

    /// Removes a copy's data and record (the capacity tier must hold it, or
    /// the file must be going away).
    pub(super) fn remove_copy(&self, state: &mut State, id: u64) -> io::Result<()> {
        self.remove_copy_to(state, id, None)
    }

    /// [`Shared::remove_copy`], its handles writing `to` from then on; with
    /// `None`, the copy's own file, now unnamed, as POSIX keeps an
    /// unlinked file for its open descriptors. The copy leaves the state
    /// first, so after an error too.
    fn remove_copy_to(
        &self,
        state: &mut State,
        id: u64,
        to: Option<&Arc<dyn BackendFile>>,
    ) -> io::Result<()> {
        if let Some(c) = state.copies.remove(&id) {
            state.by_path.remove(&RelPath::new(&c.rec.path)?);
            let file = to.unwrap_or(&c.file);
            let mut writers = 0;
            for h in state.handles.values_mut() {
                if matches!(h.target, Target::Copy(t) if t == id) {
                    h.target = Target::Capacity(Arc::clone(file));
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
        if let Some(bytes) = self.leave_fast_tier(state, id, None)? {
            state.stats.evictions += 1;
            state.stats.evicted_bytes += bytes;
        }
        Ok(())
    }

    /// Removes copy `id` from the fast tier, the capacity tier holding the
    /// checkpoint (synced), its handles writing `to` then
    /// ([`Shared::remove_copy_to`]), and says so in the catalogue, also
    /// when the removal failed (the copy has left the state). Returns its
    /// length; `None` if there is no such copy.
    pub(super) fn leave_fast_tier(
        &self,
        state: &mut State,
        id: u64,
        to: Option<&Arc<dyn BackendFile>>,
    ) -> io::Result<Option<u64>> {
        let Some(c) = state.copies.get(&id) else {
            return Ok(None);
        };
        let mut rec = c.rec.clone();
        let bytes = c.len;
        let removed = self.remove_copy_to(state, id, to);
        rec.location = Location::Capacity;
        rec.staged_id = None;
        let r = self.catalog.put_ckpt(&rec);
        self.note_catalog(state, r);
        removed.map(|()| Some(bytes))
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
