//! The catalogue's records: jobs, checkpoints and per-period write totals.
//!
//! Every type is serde-serialisable and stored as JSON (one value per key;
//! `docs/catalog.md` has the key layout). Enums use snake_case names
//! (`{"nodes":64}`, `"cached"`), so the stored form is readable with
//! `redis-cli` and stable across Rust renames. Unknown fields are ignored
//! when reading, so a newer sluice can add a field without breaking an
//! older reader.
//!
//! INVARIANT: every record stored by a [`crate::Catalog`] passed its
//! `check()`; a stored value that does not is reported as corrupt.

use serde::{Deserialize, Serialize};

use crate::CatalogError;

/// One checkpointing job the BBOS planner schedules.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobSpec {
    /// Unique name of the job (the catalogue's key for it); not empty.
    pub id: String,
    /// Checkpoint period in seconds; at least 1.
    pub period_s: u64,
    /// Size of one checkpoint in bytes.
    pub ckpt_bytes: u64,
    /// How the job's failure rate is given.
    pub failure: Failure,
    /// How many checkpoint versions to keep; at least 1.
    pub versions: u32,
    /// Glob (relative to the mount) matching the job's checkpoint files; not
    /// empty.
    pub glob: String,
    /// Files in one checkpoint (one per rank of an N-N checkpoint); at
    /// least 1. A checkpoint version is the job's next `files` new files,
    /// closed early when half a period passes after its first
    /// ([`crate::Catalog::join_version`]). Stored jobs without it have 1.
    #[serde(default = "one_file")]
    pub files: u32,
}

fn one_file() -> u32 {
    1
}

/// How a job's failure rate is given to the planner.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Failure {
    /// The job runs on this many nodes; the planner derives the job's mean
    /// time between failures from a per-node rate. At least 1.
    Nodes(u32),
    /// The job's mean time between failures, in seconds. At least 1.
    MtbfSecs(u64),
}

/// Metadata of one checkpoint file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CkptRecord {
    /// Path of the checkpoint file (the catalogue's key for it); not empty.
    pub path: String,
    /// Id of the job that wrote it; not empty.
    pub job: String,
    /// Version number from [`crate::Catalog::next_version`].
    pub version: u64,
    /// Size in bytes.
    pub bytes: u64,
    /// Which tiers hold it.
    pub location: Location,
    /// Id of the staged copy on the fast tier, while there is one.
    pub staged_id: Option<u64>,
    /// When it was created, in nanoseconds since the Unix epoch.
    pub created_unix_ns: u64,
    /// The node whose fast tier holds the staged or cached copy (its node
    /// id, `docs/catalog.md`); `None` in records written before node ids
    /// (catalogue format 1), which only a catalogue no other node shares
    /// takes as its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}

/// Which tiers hold a checkpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Location {
    /// On the fast tier only: written, not yet demoted.
    Staged,
    /// On both tiers: demoted, the fast copy kept as a restart cache.
    Cached,
    /// On the capacity tier only.
    Capacity,
}

/// Bytes written in one planner period.
///
/// For a closed period this is the paper's DWPP (data written in the
/// previous period); for the current one it is DWSF (data written so far).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeriodStats {
    /// Index of the planner period (the catalogue's key for it).
    pub index: u64,
    /// Bytes written in that period.
    pub written_bytes: u64,
}

fn invalid(what: &'static str, field: &'static str, reason: &str) -> CatalogError {
    CatalogError::Invalid {
        what,
        field,
        reason: reason.to_owned(),
    }
}

/// `value` of `what`'s `field` must not be empty (records, version
/// counters and rename targets, in both stores).
pub(crate) fn non_empty(
    what: &'static str,
    field: &'static str,
    value: &str,
) -> Result<(), CatalogError> {
    if value.is_empty() {
        return Err(invalid(what, field, "must not be empty"));
    }
    Ok(())
}

impl JobSpec {
    /// Checks the fields a catalogue relies on: a non-empty `id` and `glob`,
    /// `period_s` and `versions` at least 1, and a non-zero failure rate.
    pub fn check(&self) -> Result<(), CatalogError> {
        const WHAT: &str = "job";
        non_empty(WHAT, "id", &self.id)?;
        if self.period_s == 0 {
            return Err(invalid(WHAT, "period_s", "must be at least 1 second"));
        }
        if self.versions == 0 {
            return Err(invalid(WHAT, "versions", "must be at least 1"));
        }
        if self.files == 0 {
            return Err(invalid(WHAT, "files", "must be at least 1"));
        }
        non_empty(WHAT, "glob", &self.glob)?;
        match self.failure {
            Failure::Nodes(0) => Err(invalid(WHAT, "failure", "nodes must be at least 1")),
            Failure::MtbfSecs(0) => Err(invalid(WHAT, "failure", "mtbf_secs must be at least 1")),
            _ => Ok(()),
        }
    }
}

impl JobSpec {
    /// Checks a job about to be registered beside `registered` (the jobs
    /// there now), beyond [`JobSpec::check`]: a checkpoint of at least one
    /// byte; a glob relative to the mount (no leading `/`, no `..`, `.` or
    /// empty component: it could never match a file of the mount) that
    /// names something (a glob of only `*`, `?` and `/` would claim every
    /// file, or every file at a depth); no other job with the same glob
    /// (which one a file belongs to would be a matter of order). A job
    /// replacing itself (same `id`) may keep its glob.
    ///
    /// Stored jobs are not held to this, so a catalogue written before
    /// these rules still reads.
    pub fn check_new(&self, registered: &[JobSpec]) -> Result<(), CatalogError> {
        const WHAT: &str = "job";
        self.check()?;
        if self.ckpt_bytes == 0 {
            return Err(invalid(
                WHAT,
                "ckpt_bytes",
                "must be at least 1 byte: the size of one checkpoint, like 64GiB",
            ));
        }
        let glob = &self.glob;
        let relative = "a glob is relative to the mount, like ckpt/*.h5 or ckpt/**";
        if glob.starts_with('/') {
            return Err(invalid(
                WHAT,
                "glob",
                &format!("{glob:?} is absolute: {relative}"),
            ));
        }
        if let Some(bad) = glob.split('/').find(|c| matches!(*c, "" | "." | "..")) {
            let why = if bad == ".." {
                "leaves the mount"
            } else {
                "has an empty or `.` component, so no file of the mount matches it"
            };
            return Err(invalid(
                WHAT,
                "glob",
                &format!("{glob:?} {why}: {relative}"),
            ));
        }
        if glob.chars().all(|c| matches!(c, '*' | '?' | '/')) {
            return Err(invalid(
                WHAT,
                "glob",
                &format!(
                    "{glob:?} is only wildcards: it would claim other jobs' and programs' \
                     files; name a directory or part of a file name, like ckpt/** or **/*.h5"
                ),
            ));
        }
        if let Some(other) = registered
            .iter()
            .find(|j| j.id != self.id && j.glob == *glob)
        {
            return Err(invalid(
                WHAT,
                "glob",
                &format!(
                    "{glob:?} is job {:?}'s glob already: give this job its own files, \
                     or unregister {:?} first",
                    other.id, other.id
                ),
            ));
        }
        Ok(())
    }
}

impl CkptRecord {
    /// Checks the fields a catalogue relies on: a non-empty `path` and `job`,
    /// and a node id, if any, that is not empty.
    pub fn check(&self) -> Result<(), CatalogError> {
        const WHAT: &str = "checkpoint record";
        non_empty(WHAT, "path", &self.path)?;
        non_empty(WHAT, "job", &self.job)?;
        match &self.node {
            Some(node) => non_empty(WHAT, "node", node),
            None => Ok(()),
        }
    }
}

/// Encodes a record as the JSON stored for it.
pub(crate) fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    // INVARIANT: these types have only string, integer and enum fields and
    // derive Serialize, so serialisation to a Vec cannot fail.
    serde_json::to_vec(value).expect("catalogue records always serialise")
}

/// Decodes a stored JSON value, reporting any failure as corruption of
/// `key` in `store`.
pub(crate) fn decode<T: for<'de> Deserialize<'de>>(
    store: &str,
    key: &str,
    bytes: &[u8],
) -> Result<T, CatalogError> {
    serde_json::from_slice(bytes).map_err(|e| CatalogError::Corrupt {
        store: store.to_owned(),
        key: key.to_owned(),
        reason: format!("not a valid stored value ({e})"),
    })
}

/// Decodes a stored job and checks it is valid and stored under its own id.
pub(crate) fn decode_job(store: &str, key: &str, bytes: &[u8]) -> Result<JobSpec, CatalogError> {
    let job: JobSpec = decode(store, key, bytes)?;
    let corrupt = |reason: String| CatalogError::Corrupt {
        store: store.to_owned(),
        key: key.to_owned(),
        reason,
    };
    job.check().map_err(|e| corrupt(e.to_string()))?;
    if job.id != key {
        return Err(corrupt(format!("stored under another id ({:?})", job.id)));
    }
    Ok(job)
}

/// Decodes a stored checkpoint record and checks it is valid and stored
/// under its own path.
pub(crate) fn decode_ckpt(
    store: &str,
    key: &str,
    bytes: &[u8],
) -> Result<CkptRecord, CatalogError> {
    let rec: CkptRecord = decode(store, key, bytes)?;
    let corrupt = |reason: String| CatalogError::Corrupt {
        store: store.to_owned(),
        key: key.to_owned(),
        reason,
    };
    rec.check().map_err(|e| corrupt(e.to_string()))?;
    if rec.path != key {
        return Err(corrupt(format!(
            "stored under another path ({:?})",
            rec.path
        )));
    }
    Ok(rec)
}

/// Decodes a stored period and checks it is stored under its own index.
pub(crate) fn decode_period(
    store: &str,
    index: u64,
    bytes: &[u8],
) -> Result<PeriodStats, CatalogError> {
    let key = index.to_string();
    let p: PeriodStats = decode(store, &key, bytes)?;
    if p.index != index {
        return Err(CatalogError::Corrupt {
            store: store.to_owned(),
            key,
            reason: format!("stored under another index ({})", p.index),
        });
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job() -> JobSpec {
        JobSpec {
            id: "lammps".into(),
            period_s: 600,
            ckpt_bytes: 1 << 30,
            failure: Failure::Nodes(64),
            versions: 2,
            glob: "ckpt/*.h5".into(),
            files: 1,
        }
    }

    #[test]
    fn job_check_names_the_field() {
        job().check().unwrap();
        type Break = fn(&mut JobSpec);
        let cases: [(Break, &str); 7] = [
            (|j| j.id.clear(), "`id`"),
            (|j| j.files = 0, "`files`"),
            (|j| j.period_s = 0, "`period_s`"),
            (|j| j.versions = 0, "`versions`"),
            (|j| j.glob.clear(), "`glob`"),
            (|j| j.failure = Failure::Nodes(0), "`failure`"),
            (|j| j.failure = Failure::MtbfSecs(0), "`failure`"),
        ];
        for (break_it, field) in cases {
            let mut j = job();
            break_it(&mut j);
            let msg = j.check().unwrap_err().to_string();
            assert!(msg.contains(field), "{msg}");
        }
    }

    /// Issue 19: `ckpt register` accepted `--size 0`, globs like `../*`,
    /// `/etc/*` and `**`, and two jobs with the same glob.
    #[test]
    fn a_new_job_is_refused_what_could_not_work_issue_19() {
        let registered = [job()];
        job().check_new(&[]).unwrap();
        job().check_new(&registered).unwrap();
        for glob in ["ckpt/**", "**/*.h5", "a?/*", "*.h5"] {
            let j = JobSpec {
                id: "other".into(),
                glob: glob.into(),
                ..job()
            };
            j.check_new(&registered).unwrap();
        }
        type Break = fn(&mut JobSpec);
        let cases: [(Break, &str); 11] = [
            (|j| j.ckpt_bytes = 0, "at least 1 byte"),
            (|j| j.glob = "../*".into(), "leaves the mount"),
            (|j| j.glob = "ckpt/../../x".into(), "leaves the mount"),
            (|j| j.glob = "/etc/*".into(), "absolute"),
            (|j| j.glob = "./ckpt/*".into(), "component"),
            (|j| j.glob = "ckpt//x".into(), "component"),
            (|j| j.glob = "**".into(), "only wildcards"),
            (|j| j.glob = "*".into(), "only wildcards"),
            (|j| j.glob = "*/*".into(), "only wildcards"),
            (|j| j.glob = "**/*".into(), "only wildcards"),
            (|j| j.id = "other".into(), "job \"lammps\"'s glob already"),
        ];
        for (break_it, fragment) in cases {
            let mut j = job();
            break_it(&mut j);
            let msg = j.check_new(&registered).unwrap_err().to_string();
            assert!(msg.contains(fragment), "{j:?}: {msg}");
        }
    }

    #[test]
    fn stored_form_is_snake_case_json() {
        let s = String::from_utf8(encode(&job())).unwrap();
        assert!(s.contains(r#""failure":{"nodes":64}"#), "{s}");
        let loc = String::from_utf8(encode(&Location::Cached)).unwrap();
        assert_eq!(loc, r#""cached""#);
    }

    /// Records written before node ids and multi-file versions (catalogue
    /// format 1) still read: one file per checkpoint, no node.
    #[test]
    fn format_1_records_read_with_defaults() {
        let old_job = br#"{"id":"lammps","period_s":600,"ckpt_bytes":1073741824,
            "failure":{"nodes":64},"versions":2,"glob":"ckpt/*.h5"}"#;
        assert_eq!(decode_job("test", "lammps", old_job).unwrap(), job());
        let old_rec = br#"{"path":"ckpt/a.h5","job":"lammps","version":3,"bytes":5,
            "location":"staged","staged_id":7,"created_unix_ns":1}"#;
        let rec = decode_ckpt("test", "ckpt/a.h5", old_rec).unwrap();
        assert_eq!(rec.node, None);
        // A record without a node is stored without the field.
        let s = String::from_utf8(encode(&rec)).unwrap();
        assert!(!s.contains("node"), "{s}");
    }

    #[test]
    fn record_under_another_key_is_corrupt() {
        let bytes = encode(&job());
        let err = decode_job("test", "other", &bytes).unwrap_err().to_string();
        assert!(err.contains("another id"), "{err}");
        let err = decode_period("test", 3, br#"{"index":4,"written_bytes":1}"#).unwrap_err();
        assert!(err.to_string().contains("another index"), "{err}");
    }
}
