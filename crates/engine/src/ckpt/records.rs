//! The catalogue side: records written to the fast tier and put in the
//! catalogue, versions, a catalogue outage (fallback to the capacity tier,
//! records put again once it answers), and copies staged on other nodes.

use std::io;

use sluice_catalog::{CkptRecord, JobSpec, Location};
use sluice_env::{OpenOptions, RelPath};
use sluice_policy::bbos::Ticket;
use sluice_policy::Time;

use crate::incidents::Incident;

use super::{
    add_handle, dir, rec_path, rel, unix_ns, Checkpoints, Handle, Shared, State, Target,
    CATALOG_RETRY, DIR, REMOTE_POLL,
};

impl Shared {
    /// Counts and logs a failed catalogue call; the next new checkpoint
    /// asks the catalogue again only after [`CATALOG_RETRY`], and every
    /// copy's record is put again once it answers.
    pub(super) fn note_catalog(
        &self,
        state: &mut State,
        result: Result<(), sluice_catalog::CatalogError>,
    ) {
        if let Err(e) = result {
            state.stats.catalog_errors += 1;
            let message = format!("catalogue {}: {e}", self.catalog.describe());
            // The first failure after a good call is an incident (in
            // `last_errors`, logged); the rest of an outage is counted,
            // and logged at debug level. The staging directory stays the
            // truth: no tier failed, and no errno reached an application.
            if state.catalog_retry_at.is_none() {
                self.incidents.record(Incident {
                    at: std::time::SystemTime::now(),
                    op: "catalogue".to_string(),
                    path: None,
                    tier: None,
                    errno: None,
                    message: message.clone(),
                });
            } else {
                tracing::debug!(error = %message, "checkpoint catalogue call failed");
            }
            state.stats.last_error = Some(message);
            state.catalog_behind = true;
            state.catalog_retry_at = Some(self.clock.now().saturating_add(CATALOG_RETRY));
        }
    }

    /// Puts every copy's record again after failed updates; stays behind
    /// (and counts the error) if the catalogue still fails.
    pub(super) fn resync(&self, state: &mut State) {
        let recs: Vec<CkptRecord> = state.copies.values().map(|c| c.rec.clone()).collect();
        for rec in &recs {
            if let Err(e) = self.catalog.put_ckpt(rec) {
                self.note_catalog(state, Err(e));
                return;
            }
        }
        state.catalog_behind = false;
        state.catalog_retry_at = None;
        tracing::info!(
            catalogue = %self.catalog.describe(),
            records = recs.len(),
            "checkpoint catalogue answers again; records put again"
        );
    }

    /// The version a new checkpoint of `job` joins, or why the catalogue
    /// could not give one (then the caller falls back to the capacity
    /// tier).
    pub(super) fn version_for(
        &self,
        state: &mut State,
        job: &JobSpec,
        now: Time,
    ) -> Result<u64, String> {
        if let Some(at) = state.catalog_retry_at {
            if now < at {
                return Err(format!(
                    "catalogue {} failed less than {} ms ago ({})",
                    self.catalog.describe(),
                    CATALOG_RETRY.as_millis(),
                    state.stats.last_error.as_deref().unwrap_or("no message")
                ));
            }
        }
        // Half a period: the ranks of one checkpoint start within it, the
        // next checkpoint of the job starts a period later.
        let window_ms = job.period_s.saturating_mul(500).max(1000);
        let now_ms = unix_ns() / 1_000_000;
        match self
            .catalog
            .join_version(&job.id, job.files, window_ms, now_ms)
        {
            Ok(version) => {
                state.catalog_retry_at = None;
                if state.catalog_behind {
                    self.resync(state);
                }
                Ok(version)
            }
            Err(e) => {
                let message = format!("catalogue {}: {e}", self.catalog.describe());
                self.note_catalog(state, Err(e));
                Err(message)
            }
        }
    }

    /// Whether `rec` says its only full copy is staged on another node.
    pub(super) fn staged_elsewhere(&self, rec: &CkptRecord) -> bool {
        rec.location == Location::Staged
            && match &rec.node {
                Some(node) => *node != self.node,
                // Format 1: nobody's in a shared catalogue, ours otherwise.
                None => self.catalog.shared(),
            }
    }

    /// Whether this node reconciles `rec` at open.
    pub(super) fn own(&self, rec: &CkptRecord) -> bool {
        match &rec.node {
            Some(node) => *node == self.node,
            None => !self.catalog.shared(),
        }
    }

    /// Writes `rec` as `ckpt/<id>.rec` durably (tmp, sync, rename, dir sync
    /// unless `sync_dir` is false because the caller syncs it next).
    pub(super) fn write_rec(&self, id: u64, rec: &CkptRecord, sync_dir: bool) -> io::Result<()> {
        let tmp = rel(format!("{DIR}/{id}.rec.tmp"));
        let file = self.fast.open(
            &tmp,
            OpenOptions {
                create: true,
                truncate: true,
                ..OpenOptions::default()
            }
            .private(),
        )?;
        let json = serde_json::to_vec(rec).map_err(io::Error::other)?;
        file.write_at(&json, 0)?;
        file.sync_data()?;
        drop(file);
        self.fast.rename(&tmp, &rec_path(id))?;
        if sync_dir {
            self.fast.sync_dir(&dir())?;
        }
        Ok(())
    }
}

impl Checkpoints {
    /// Waits, at most `remote_wait`, while the catalogue says the only
    /// full copy of `path` is staged on another node's fast tier (its
    /// capacity-tier file is empty or partly copied): EAGAIN when the wait
    /// runs out, never a short file. With the catalogue down the node
    /// serves what it has (the capacity tier), and says so in the log.
    pub(super) fn wait_for_demotion_elsewhere(&self, path: &RelPath) -> io::Result<()> {
        let shared = &*self.shared;
        let started = shared.clock.now();
        let deadline = started.saturating_add(shared.options.remote_wait);
        let mut waited = false;
        loop {
            let rec = match shared.catalog.ckpt(path.as_str()) {
                Ok(rec) => rec,
                Err(e) => {
                    tracing::warn!(
                        path = %path,
                        error = %e,
                        "restart read served by the capacity tier without asking the \
                         catalogue: a copy staged on another node would not be seen"
                    );
                    shared.note_catalog(&mut sluice_env::lock(&shared.state), Err(e));
                    return Ok(());
                }
            };
            let holder = match rec {
                Some(rec) if shared.staged_elsewhere(&rec) => rec.node,
                _ => {
                    if waited {
                        sluice_env::lock(&shared.state).stats.remote_waits += 1;
                    }
                    return Ok(());
                }
            };
            let now = shared.clock.now();
            if now >= deadline {
                let holder = holder.as_deref().unwrap_or("(unknown: a format-1 record)");
                let message = format!(
                    "{path}: its only full copy is staged on node {holder}'s fast tier and \
                     was not demoted within {} ms (bbos.remote_wait); try again later",
                    shared.options.remote_wait.as_millis()
                );
                tracing::warn!(path = %path, node = %holder, "restart read refused: {message}");
                let mut state = sluice_env::lock(&shared.state);
                state.stats.remote_waits += 1;
                state.stats.remote_timeouts += 1;
                state.stats.last_error = Some(message.clone());
                return Err(io::Error::new(io::ErrorKind::WouldBlock, message));
            }
            waited = true;
            shared
                .clock
                .sleep(deadline.saturating_since(now).min(REMOTE_POLL));
        }
    }

    /// A new checkpoint the catalogue could not give a version: an
    /// ordinary file on the capacity tier, with no record (issue 19: an
    /// outage costs the fast tier, never the create).
    pub(super) fn fallback(
        &self,
        state: &mut State,
        path: &RelPath,
        job: &JobSpec,
        create_new: bool,
        ticket: Option<Ticket>,
        cause: &str,
    ) -> io::Result<u64> {
        let file = self.shared.create_on_capacity(path, create_new)?;
        state.stats.checkpoints += 1;
        state.stats.catalog_fallbacks += 1;
        tracing::warn!(
            path = %path,
            job = %job.id,
            cause = %cause,
            "new checkpoint written to the capacity tier as an ordinary file: no catalogue"
        );
        Ok(add_handle(
            state,
            Handle {
                target: Target::Capacity(file),
                path: path.clone(),
                writing: true,
                hit: None,
                ticket,
                created: Some(path.clone()),
            },
        ))
    }
}
