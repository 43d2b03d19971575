//! Upgrade of a catalogue file written by redb 2 (file format v2) to the
//! format the catalogue's redb 4 reads (v3).
//!
//! sluice before issue 21 used redb 2.6, which writes file format v2; redb
//! 3.0 dropped v2, and its changelog names the one path across:
//! `Database::upgrade()` of redb 2.6. So this module — the only user of the
//! `redb2` dependency — runs it, on a copy:
//!
//! 1. open the original with redb 2 and keep it open: its exclusive file
//!    lock keeps another sluice process from opening (or upgrading) the
//!    file meanwhile;
//! 2. copy it to `PATH.v3-upgrade` (0600), sync the copy;
//! 3. open the copy with redb 2 and `upgrade()` it (redb's commits fsync);
//! 4. open the copy with redb 4, which proves it is readable;
//! 5. rename the copy over the original and sync the directory.
//!
//! Crash argument: until step 5 the original is untouched (redb 2's open
//! may repair it after an unclean shutdown, as it would have anyway), and a
//! crash leaves at most a stale copy, truncated and rewritten by the next
//! attempt. Step 5 is one `rename`: the path names either the whole v2 file
//! or the whole, synced v3 file. A failure at any step is an error naming
//! the file and saying it is unchanged; nothing is ever recreated empty.
//! The catalogue's own tables need no conversion: their key and value types
//! (`&str`, `u64`, `&[u8]`, and the fixed-width `(u64, u64, u64)`) are
//! encoded alike in both formats (redb 3.0's changelog: only variable-width
//! tuples changed).

use std::fs::{self, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::redb_store::ALREADY_OPEN;
use crate::CatalogError;

/// The file format version redb 2 wrote and redb 4 refuses.
pub(crate) const REDB2_FORMAT: u8 = 2;

/// The name of the copy being upgraded, beside `path`.
pub(crate) fn upgrade_copy_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".v3-upgrade");
    PathBuf::from(name)
}

/// Upgrades the redb-2 file at `path` to file format v3 in place (through a
/// copy and a rename, see the module documentation).
pub(crate) fn upgrade_v2(path: &Path) -> Result<(), CatalogError> {
    let failed = |step: &str, reason: String| CatalogError::RedbOpen {
        path: path.to_owned(),
        reason: format!(
            "it was written by redb 2 (file format v2, sluice before issue 21) and \
             upgrading it to v3 failed ({step}: {reason}); the file is unchanged: fix \
             the cause and open it again, or keep using the sluice that wrote it"
        ),
    };
    let original = match redb2::Database::open(path) {
        Ok(db) => db,
        Err(redb2::DatabaseError::DatabaseAlreadyOpen) => {
            return Err(CatalogError::RedbOpen {
                path: path.to_owned(),
                reason: ALREADY_OPEN.to_owned(),
            })
        }
        Err(e) => return Err(failed("opening it with redb 2", e.to_string())),
    };
    let copy = upgrade_copy_path(path);
    let result = upgrade_copy(path, &copy, &failed);
    if result.is_err() {
        // Best effort: a stale copy is harmless (the next attempt
        // truncates it), only untidy.
        let _ = fs::remove_file(&copy);
    }
    result?;
    // The lock on the original's inode is released only now: no other
    // process opened the path between the copy and the rename.
    drop(original);
    tracing::info!(
        path = %path.display(),
        "checkpoint catalogue upgraded from redb file format v2 (redb 2) to v3 (redb 4)"
    );
    Ok(())
}

/// Steps 2 to 5 of the module documentation.
fn upgrade_copy(
    path: &Path,
    copy: &Path,
    failed: &dyn Fn(&str, String) -> CatalogError,
) -> Result<(), CatalogError> {
    let io_failed = |step: &'static str| {
        let copy = copy.display().to_string();
        move |e: io::Error| failed(step, format!("{copy}: {e}"))
    };
    {
        let mut source = fs::File::open(path).map_err(io_failed("reading the original"))?;
        let mut target = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(copy)
            .map_err(io_failed("creating the copy"))?;
        io::copy(&mut source, &mut target).map_err(io_failed("copying"))?;
        target.sync_all().map_err(io_failed("syncing the copy"))?;
    }
    let mut upgraded = redb2::Database::open(copy)
        .map_err(|e| failed("opening the copy with redb 2", e.to_string()))?;
    upgraded
        .upgrade()
        .map_err(|e| failed("redb 2's upgrade", e.to_string()))?;
    drop(upgraded);
    drop(
        redb::Database::open(copy)
            .map_err(|e| failed("opening the upgraded copy with redb 4", e.to_string()))?,
    );
    fs::rename(copy, path).map_err(io_failed("renaming the copy over the original"))?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| CatalogError::RedbOpen {
                path: path.to_owned(),
                reason: format!(
                    "upgraded to redb file format v3, but syncing its directory failed: {e}"
                ),
            })?;
    }
    Ok(())
}
