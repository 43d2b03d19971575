//! Jobs and nodes: the registered jobs and their globs (refreshed from
//! the catalogue when its job generation changes), job keys and failure
//! rates, and this node's id.

use std::io;
use std::time::Duration;

use sluice_catalog::{Failure, JobSpec};
use sluice_env::{Backend, OpenOptions, RelPath};
use sluice_policy::bbos::{expected_dwpp, failure_rate};

use super::{
    catalog_io, dir, rel, unix_ns, Checkpoints, Shared, State, DIR, NODE_ID_FILE, NODE_ID_LEN_MAX,
};

/// Whether `path` matches `pattern`: `*` and `?` within one component,
/// `**` across components, everything else literally.
pub fn glob_match(pattern: &str, path: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let s: Vec<char> = path.chars().collect();
    // reach[j]: the pattern prefix read so far matches s[..j].
    let mut reach = vec![false; s.len() + 1];
    reach[0] = true;
    let mut i = 0;
    while i < p.len() {
        let mut next = vec![false; s.len() + 1];
        match p[i] {
            '*' if p.get(i + 1) == Some(&'*') => {
                let mut on = false;
                for j in 0..=s.len() {
                    on |= reach[j];
                    next[j] = on;
                }
                i += 1;
            }
            '*' => {
                let mut on = false;
                for j in 0..=s.len() {
                    if j > 0 && s[j - 1] == '/' {
                        on = false;
                    }
                    on |= reach[j];
                    next[j] = on;
                }
            }
            '?' => {
                for j in 1..=s.len() {
                    next[j] = reach[j - 1] && s[j - 1] != '/';
                }
            }
            c => {
                for j in 1..=s.len() {
                    next[j] = reach[j - 1] && s[j - 1] == c;
                }
            }
        }
        reach = next;
        i += 1;
    }
    reach[s.len()]
}

pub(super) fn job_rate(job: &JobSpec, node_mtbf: Duration) -> f64 {
    match job.failure {
        Failure::MtbfSecs(s) => failure_rate(Some(Duration::from_secs(s)), 1, node_mtbf),
        Failure::Nodes(n) => failure_rate(None, n, node_mtbf),
    }
}

pub(super) fn prior(jobs: &[JobSpec], period: Duration) -> u64 {
    expected_dwpp(
        jobs.iter()
            .map(|j| (j.ckpt_bytes, Duration::from_secs(j.period_s))),
        period,
    )
}

impl Shared {
    pub(super) fn job_key(state: &mut State, job: &str) -> u64 {
        let next = state.job_keys.len() as u64;
        *state.job_keys.entry(job.to_string()).or_insert(next)
    }
}

impl Checkpoints {
    /// The job whose glob matches `path`, if any.
    pub(super) fn job_of(state: &State, path: &RelPath) -> Option<JobSpec> {
        state
            .jobs
            .iter()
            .find(|j| glob_match(&j.glob, path.as_str()))
            .cloned()
    }

    /// Whether the stager handles `path`: a registered glob matches it or a
    /// copy of it is staged. At most every `jobs_refresh` this checks the
    /// catalogue's job generation first and reads the jobs again if another
    /// node changed them (one small read per interval, not per call).
    pub fn handles(&self, path: &RelPath) -> bool {
        let shared = &*self.shared;
        {
            let mut state = sluice_env::lock(&shared.state);
            if state.by_path.contains_key(path) {
                return true;
            }
            let now = shared.clock.now();
            let fresh = state
                .jobs_checked
                .is_some_and(|t| now.saturating_since(t) < shared.options.jobs_refresh);
            if fresh {
                return Checkpoints::job_of(&state, path).is_some();
            }
            state.jobs_checked = Some(now);
        }
        self.refresh_jobs();
        Checkpoints::job_of(&sluice_env::lock(&shared.state), path).is_some()
    }

    /// Reads the jobs again if the catalogue's job generation changed;
    /// whether they were. A failing catalogue keeps the jobs known.
    pub(super) fn refresh_jobs(&self) -> bool {
        let shared = &*self.shared;
        let generation = match shared.catalog.jobs_generation() {
            Ok(g) => g,
            Err(e) => {
                shared.note_catalog(&mut sluice_env::lock(&shared.state), Err(e));
                return false;
            }
        };
        if generation == sluice_env::lock(&shared.state).jobs_generation {
            return false;
        }
        let jobs = match shared.catalog.jobs() {
            Ok(jobs) => jobs,
            Err(e) => {
                shared.note_catalog(&mut sluice_env::lock(&shared.state), Err(e));
                return false;
            }
        };
        let mut state = sluice_env::lock(&shared.state);
        let p = prior(&jobs, shared.options.period);
        state.planner.set_prior(p);
        tracing::info!(
            jobs = jobs.len(),
            generation,
            "checkpoint jobs changed in the catalogue: read again"
        );
        state.jobs = jobs;
        state.jobs_generation = generation;
        state.stats.jobs_reloads += 1;
        true
    }

    /// Registers (or replaces) a job: stored in the catalogue, used at once.
    /// A job that could not work is refused ([`JobSpec::check_new`]: no
    /// size, a glob outside the mount, one claiming every file, another
    /// job's glob), checked against the catalogue's jobs.
    pub fn register(&self, job: JobSpec) -> io::Result<()> {
        let registered = self.shared.catalog.jobs().map_err(catalog_io)?;
        job.check_new(&registered)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
        self.shared.catalog.put_job(&job).map_err(catalog_io)?;
        self.reload_jobs()
    }

    /// Removes a job; its files already staged stay until demoted and
    /// evicted. `false` if there was none.
    pub fn unregister(&self, id: &str) -> io::Result<bool> {
        let removed = self.shared.catalog.remove_job(id).map_err(catalog_io)?;
        self.reload_jobs()?;
        Ok(removed)
    }

    pub(super) fn reload_jobs(&self) -> io::Result<()> {
        let generation = self.shared.catalog.jobs_generation().map_err(catalog_io)?;
        let jobs = self.shared.catalog.jobs().map_err(catalog_io)?;
        let mut state = sluice_env::lock(&self.shared.state);
        let p = prior(&jobs, self.shared.options.period);
        state.planner.set_prior(p);
        state.jobs = jobs;
        state.jobs_generation = generation;
        Ok(())
    }

    /// This node's id in the catalogue.
    pub fn node_id(&self) -> &str {
        &self.shared.node
    }

    /// The registered jobs.
    pub fn jobs(&self) -> Vec<JobSpec> {
        sluice_env::lock(&self.shared.state).jobs.clone()
    }
}

/// Checks a node id given in the options (1 to [`NODE_ID_LEN_MAX`] of
/// `A-Z a-z 0-9 . _ -`); the message says what is accepted.
pub fn check_node_id(id: &str) -> Result<String, String> {
    let ok = !id.is_empty()
        && id.len() <= NODE_ID_LEN_MAX
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
    if ok {
        Ok(id.to_owned())
    } else {
        Err(format!(
            "bbos node id {id:?}: give 1 to {NODE_ID_LEN_MAX} of A-Z a-z 0-9 . _ -"
        ))
    }
}

/// This node's id, kept in `ckpt/node-id` on the fast tier: read back, or
/// generated (`HOSTNAME-XXXXXXXX`) and written durably at the first open.
/// The id goes with the fast tier because the copies it names are there:
/// a node whose fast tier is replaced is a new node.
pub(super) fn node_id(fast: &dyn Backend) -> io::Result<String> {
    let path = rel(format!("{DIR}/{NODE_ID_FILE}"));
    match fast.open(&path, OpenOptions::default().private()) {
        Ok(file) => {
            let len = file.len()?.min(NODE_ID_LEN_MAX as u64 + 1);
            let mut buf = vec![0u8; usize::try_from(len).unwrap_or(0)];
            crate::engine::read_fully(file.as_ref(), &mut buf, 0)?;
            let text = String::from_utf8_lossy(&buf);
            check_node_id(text.trim_end()).map_err(|e| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "fast tier {}: {path}: {e}; remove the file to have a new id generated \
                         (this node's catalogue records then belong to nobody)",
                        fast.describe()
                    ),
                )
            })
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
            let mut host: String = host
                .trim()
                .chars()
                .filter(|c| c.is_ascii_alphanumeric() || "._-".contains(*c))
                .take(NODE_ID_LEN_MAX - 9)
                .collect();
            if host.is_empty() {
                host = "node".into();
            }
            let id = format!("{host}-{:08x}", random_u32());
            let tmp = rel(format!("{DIR}/{NODE_ID_FILE}.tmp"));
            let file = fast.open(
                &tmp,
                OpenOptions {
                    create: true,
                    truncate: true,
                    ..OpenOptions::default()
                }
                .private(),
            )?;
            file.write_at(format!("{id}\n").as_bytes(), 0)?;
            file.sync_data()?;
            drop(file);
            fast.rename(&tmp, &path)?;
            fast.sync_dir(&dir())?;
            Ok(id)
        }
        Err(e) => Err(e),
    }
}

/// 32 random bits from the standard library's per-process random hash
/// keys (seeded by the OS), mixed with the time and the process id.
pub(super) fn random_u32() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(unix_ns());
    h.write_u32(std::process::id());
    (h.finish() >> 16) as u32
}
