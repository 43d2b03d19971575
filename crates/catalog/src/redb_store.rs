//! The embedded catalogue: one redb database file.
//!
//! Tables (all keys and values as documented in `docs/catalog.md`):
//! * `jobs`: job id (`&str`) → JSON [`JobSpec`];
//! * `ckpts`: checkpoint path (`&str`) → JSON [`CkptRecord`];
//! * `versions`: job id (`&str`) → last version issued (`u64`);
//! * `periods`: period index (`u64`) → JSON [`PeriodStats`];
//! * `open_versions`: job id (`&str`) → (version, started ms since the
//!   epoch, files joined) of the job's open version (`join_version`);
//! * `meta`: `format` → [`crate::FORMAT`], `jobs_generation` → bumped by
//!   every job put or removed (in the same transaction).
//!
//! Every write is one redb write transaction committed with redb's default
//! `Durability::Immediate` (fsync before `commit` returns), so a call that
//! returned `Ok` survives a crash. redb serialises write transactions, which
//! makes `next_version` and `rename_ckpt` atomic across threads; readers see
//! the last committed state. An operation that decides to change nothing
//! (rename of an absent record) aborts its transaction.
//!
//! A file written by redb 2 (sluice before issue 21, file format v2) is
//! upgraded to v3 at open, through a copy and a rename
//! ([`crate::redb_upgrade`]); a failed upgrade leaves it unchanged and is
//! an error naming it.
//!
//! redb allows one open `Database` per file; a second `open` of the same file
//! (in this or another process) fails with a message naming the file.
//!
//! The file holds job ids and checkpoint paths of every user, so only its
//! owner may read it: it is created 0600 whatever the umask, and an older
//! file with a wider mode is narrowed when opened.

use std::fmt::Display;
use std::path::{Path, PathBuf};

use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};

use redb::backends::FileBackend;
use redb::{
    Builder, Database, DatabaseError, ReadableDatabase, ReadableTable, TableDefinition,
    WriteTransaction,
};

use crate::model::{decode_ckpt, decode_job, decode_period, encode, non_empty};
use crate::redb_upgrade::{self, REDB2_FORMAT};
use crate::{Catalog, CatalogError, CkptRecord, JobSpec, PeriodStats};

const JOBS: TableDefinition<&str, &[u8]> = TableDefinition::new("jobs");
const CKPTS: TableDefinition<&str, &[u8]> = TableDefinition::new("ckpts");
const VERSIONS: TableDefinition<&str, u64> = TableDefinition::new("versions");
const PERIODS: TableDefinition<u64, &[u8]> = TableDefinition::new("periods");
const OPEN_VERSIONS: TableDefinition<&str, (u64, u64, u64)> = TableDefinition::new("open_versions");
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
const FORMAT_KEY: &str = "format";
/// Why a file redb holds open elsewhere cannot be opened.
pub(crate) const ALREADY_OPEN: &str =
    "already open (by another sluice process, or another catalogue in this one)";
const JOBS_GENERATION_KEY: &str = "jobs_generation";

/// A catalogue in a redb database file.
pub struct RedbCatalog {
    db: Database,
    path: PathBuf,
}

impl RedbCatalog {
    /// Opens the database file at `path`, creating it (and its tables) if it
    /// does not exist. The directory must exist.
    pub fn open(path: impl AsRef<Path>) -> Result<RedbCatalog, CatalogError> {
        let path = path.as_ref().to_path_buf();
        let db = match open_database(&path) {
            Err(DatabaseError::UpgradeRequired(REDB2_FORMAT)) => {
                redb_upgrade::upgrade_v2(&path)?;
                open_database(&path)
            }
            other => other,
        }
        .map_err(|e| CatalogError::RedbOpen {
            path: path.clone(),
            reason: match e {
                DatabaseError::DatabaseAlreadyOpen => ALREADY_OPEN.to_owned(),
                DatabaseError::UpgradeRequired(format) => format!(
                    "it is in redb file format v{format} (redb 1), which this sluice cannot upgrade: the file is unchanged; move it aside and register the jobs again"
                ),
                e => e.to_string(),
            },
        })?;
        let catalog = RedbCatalog { db, path };
        catalog
            .write(|txn| {
                txn.open_table(JOBS)?;
                txn.open_table(CKPTS)?;
                txn.open_table(VERSIONS)?;
                txn.open_table(PERIODS)?;
                txn.open_table(OPEN_VERSIONS)?;
                let mut meta = txn.open_table(META)?;
                // Unmarked: format 1, read with the new fields' defaults.
                let found = meta.get(FORMAT_KEY)?.map_or(1, |v| v.value());
                if found > crate::FORMAT {
                    return Err(TxnError::Catalog(CatalogError::NewerFormat {
                        store: catalog.describe(),
                        found,
                        supported: crate::FORMAT,
                    }));
                }
                meta.insert(FORMAT_KEY, crate::FORMAT)?;
                Ok(())
            })
            .map_err(|e| match e {
                e @ CatalogError::NewerFormat { .. } => e,
                e => CatalogError::RedbOpen {
                    path: catalog.path.clone(),
                    reason: e.to_string(),
                },
            })?;
        Ok(catalog)
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn error(&self, e: impl Display) -> CatalogError {
        CatalogError::Redb {
            path: self.path.clone(),
            reason: e.to_string(),
        }
    }

    fn store(&self, table: &str) -> String {
        format!("redb {} table {table}", self.path.display())
    }

    /// Runs `f` in a write transaction and commits it if `f` returns `Ok`.
    fn write<T>(
        &self,
        f: impl FnOnce(&WriteTransaction) -> Result<T, TxnError>,
    ) -> Result<T, CatalogError> {
        let txn = self.db.begin_write().map_err(|e| self.error(e))?;
        match f(&txn) {
            Ok(value) => {
                txn.commit().map_err(|e| self.error(e))?;
                Ok(value)
            }
            Err(e) => {
                // Dropping would abort too; aborting explicitly reports
                // nothing we could act on beyond the error we already have.
                let _ = txn.abort();
                Err(e.into_catalog(self))
            }
        }
    }

    /// Reads the bytes stored under `key` in `table`.
    fn get_bytes(
        &self,
        table: TableDefinition<&str, &[u8]>,
        key: &str,
    ) -> Result<Option<Vec<u8>>, CatalogError> {
        let txn = self.db.begin_read().map_err(|e| self.error(e))?;
        let t = txn.open_table(table).map_err(|e| self.error(e))?;
        let value = t.get(key).map_err(|e| self.error(e))?;
        Ok(value.map(|v| v.value().to_vec()))
    }

    /// All (key, bytes) pairs of `table`, in key order.
    fn all_bytes(
        &self,
        table: TableDefinition<&str, &[u8]>,
    ) -> Result<Vec<(String, Vec<u8>)>, CatalogError> {
        let txn = self.db.begin_read().map_err(|e| self.error(e))?;
        let t = txn.open_table(table).map_err(|e| self.error(e))?;
        let mut out = Vec::new();
        for entry in t.iter().map_err(|e| self.error(e))? {
            let (k, v) = entry.map_err(|e| self.error(e))?;
            out.push((k.value().to_owned(), v.value().to_vec()));
        }
        Ok(out)
    }
}

/// Opens (or creates, 0600) the database file at `path` with redb 4.
fn open_database(path: &Path) -> Result<Database, DatabaseError> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)?;
    // The umask may have narrowed a new file, an older sluice widened it.
    if file.metadata()?.permissions().mode() & 0o7777 != 0o600 {
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    }
    Builder::new().create_with_backend(FileBackend::new(file)?)
}

/// Bumps the job generation in the transaction that changes the jobs.
fn bump_jobs_generation(txn: &WriteTransaction) -> Result<(), TxnError> {
    let mut meta = txn.open_table(META)?;
    let generation = meta.get(JOBS_GENERATION_KEY)?.map_or(0, |v| v.value());
    meta.insert(JOBS_GENERATION_KEY, generation.wrapping_add(1))?;
    Ok(())
}

/// An error inside a write transaction: redb's own or the catalogue's.
enum TxnError {
    Redb(Box<redb::Error>),
    Catalog(CatalogError),
}

impl TxnError {
    fn into_catalog(self, store: &RedbCatalog) -> CatalogError {
        match self {
            TxnError::Redb(e) => store.error(e),
            TxnError::Catalog(e) => e,
        }
    }
}

impl<E: Into<redb::Error>> From<E> for TxnError {
    fn from(e: E) -> TxnError {
        TxnError::Redb(Box::new(e.into()))
    }
}

impl Catalog for RedbCatalog {
    fn put_job(&self, job: &JobSpec) -> Result<(), CatalogError> {
        job.check()?;
        let bytes = encode(job);
        self.write(|txn| {
            txn.open_table(JOBS)?
                .insert(job.id.as_str(), bytes.as_slice())?;
            bump_jobs_generation(txn)
        })
    }

    fn remove_job(&self, id: &str) -> Result<bool, CatalogError> {
        self.write(|txn| {
            let removed = txn.open_table(JOBS)?.remove(id)?.is_some();
            if removed {
                bump_jobs_generation(txn)?;
            }
            Ok(removed)
        })
    }

    fn job(&self, id: &str) -> Result<Option<JobSpec>, CatalogError> {
        self.get_bytes(JOBS, id)?
            .map(|b| decode_job(&self.store("jobs"), id, &b))
            .transpose()
    }

    fn jobs(&self) -> Result<Vec<JobSpec>, CatalogError> {
        let store = self.store("jobs");
        self.all_bytes(JOBS)?
            .into_iter()
            .map(|(k, b)| decode_job(&store, &k, &b))
            .collect()
    }

    fn next_version(&self, job: &str) -> Result<u64, CatalogError> {
        non_empty("version counter", "job", job)?;
        self.write(|txn| {
            let mut t = txn.open_table(VERSIONS)?;
            let last = t.get(job)?.map_or(0, |v| v.value());
            let next = last.checked_add(1).ok_or_else(|| {
                TxnError::Catalog(CatalogError::Corrupt {
                    store: self.store("versions"),
                    key: job.to_owned(),
                    reason: "version counter at u64::MAX".into(),
                })
            })?;
            t.insert(job, next)?;
            Ok(next)
        })
    }

    fn shared(&self) -> bool {
        false
    }

    fn jobs_generation(&self) -> Result<u64, CatalogError> {
        let txn = self.db.begin_read().map_err(|e| self.error(e))?;
        let t = txn.open_table(META).map_err(|e| self.error(e))?;
        let value = t.get(JOBS_GENERATION_KEY).map_err(|e| self.error(e))?;
        Ok(value.map_or(0, |v| v.value()))
    }

    fn join_version(
        &self,
        job: &str,
        files: u32,
        window_ms: u64,
        now_ms: u64,
    ) -> Result<u64, CatalogError> {
        non_empty("version counter", "job", job)?;
        self.write(|txn| {
            let mut versions = txn.open_table(VERSIONS)?;
            let mut open = txn.open_table(OPEN_VERSIONS)?;
            let last = versions.get(job)?.map_or(0, |v| v.value());
            let current = open.get(job)?.map(|v| v.value());
            if let Some((version, started_ms, joined)) = current {
                if version == last
                    && last > 0
                    && joined < u64::from(files)
                    && now_ms.abs_diff(started_ms) < window_ms
                {
                    open.insert(job, (version, started_ms, joined + 1))?;
                    return Ok(version);
                }
            }
            let next = last.checked_add(1).ok_or_else(|| {
                TxnError::Catalog(CatalogError::Corrupt {
                    store: self.store("versions"),
                    key: job.to_owned(),
                    reason: "version counter at u64::MAX".into(),
                })
            })?;
            versions.insert(job, next)?;
            open.insert(job, (next, now_ms, 1))?;
            Ok(next)
        })
    }

    fn put_ckpt(&self, rec: &CkptRecord) -> Result<(), CatalogError> {
        rec.check()?;
        let bytes = encode(rec);
        self.write(|txn| {
            txn.open_table(CKPTS)?
                .insert(rec.path.as_str(), bytes.as_slice())?;
            Ok(())
        })
    }

    fn ckpt(&self, path: &str) -> Result<Option<CkptRecord>, CatalogError> {
        self.get_bytes(CKPTS, path)?
            .map(|b| decode_ckpt(&self.store("ckpts"), path, &b))
            .transpose()
    }

    fn remove_ckpt(&self, path: &str) -> Result<bool, CatalogError> {
        // The mount asks at every unlink, and nearly every path it asks
        // about never was a checkpoint: a read transaction answers those.
        // A write transaction is a durable commit (two writes and a sync
        // of the catalogue file), which made every unlink through the
        // mount wait for a disk flush (issue 33: mdtest's removals ran at
        // a sixth of mergerfs's rate). A record put between the read and
        // the next call is one put after this removal, as it would be
        // with the write transaction.
        if self.get_bytes(CKPTS, path)?.is_none() {
            return Ok(false);
        }
        self.write(|txn| Ok(txn.open_table(CKPTS)?.remove(path)?.is_some()))
    }

    fn rename_ckpt(&self, from: &str, to: &str) -> Result<bool, CatalogError> {
        non_empty("checkpoint rename", "to", to)?;
        let store = self.store("ckpts");
        let renamed = self.write(|txn| {
            let mut t = txn.open_table(CKPTS)?;
            let Some(old) = t.get(from)?.map(|v| v.value().to_vec()) else {
                return Ok(false);
            };
            let mut rec = decode_ckpt(&store, from, &old).map_err(TxnError::Catalog)?;
            rec.path = to.to_owned();
            t.remove(from)?;
            t.insert(to, encode(&rec).as_slice())?;
            Ok(true)
        })?;
        Ok(renamed)
    }

    fn ckpts(&self) -> Result<Vec<CkptRecord>, CatalogError> {
        let store = self.store("ckpts");
        self.all_bytes(CKPTS)?
            .into_iter()
            .map(|(k, b)| decode_ckpt(&store, &k, &b))
            .collect()
    }

    fn put_period(&self, p: &PeriodStats) -> Result<(), CatalogError> {
        let bytes = encode(p);
        self.write(|txn| {
            txn.open_table(PERIODS)?.insert(p.index, bytes.as_slice())?;
            Ok(())
        })
    }

    fn periods(&self, last: usize) -> Result<Vec<PeriodStats>, CatalogError> {
        let store = self.store("periods");
        let txn = self.db.begin_read().map_err(|e| self.error(e))?;
        let t = txn.open_table(PERIODS).map_err(|e| self.error(e))?;
        let mut out = Vec::with_capacity(last.min(1024));
        for entry in t.iter().map_err(|e| self.error(e))?.rev().take(last) {
            let (k, v) = entry.map_err(|e| self.error(e))?;
            out.push(decode_period(&store, k.value(), v.value())?);
        }
        out.reverse();
        Ok(out)
    }

    fn trim_periods(&self, keep: usize) -> Result<(), CatalogError> {
        self.write(|txn| {
            let mut t = txn.open_table(PERIODS)?;
            // The highest index that goes: the (keep+1)-th from the top.
            let first_dropped = match t.iter()?.rev().nth(keep) {
                Some(entry) => entry?.0.value(),
                None => return Ok(()),
            };
            t.retain_in(..=first_dropped, |_, _| false)?;
            Ok(())
        })
    }

    fn describe(&self) -> String {
        format!("redb {}", self.path.display())
    }
}
