//! Recovery never overwrites the future (docs/crash-consistency.md, issue
//! 20): before the bytes a file had buffered when this node stopped are
//! replayed to its capacity file, recovery checks that the file is still
//! the one they were written to, unchanged since this node was last
//! running. When it was deleted, replaced (another inode at the path) or
//! modified after that, the bytes are not written over it: they are kept
//! in `quarantine/NAME/` on the fast tier (`data`, a sparse file holding
//! them at their offsets, and `manifest.json`), listed by status and
//! restorable with `sluice quarantine restore`.
//!
//! "Last running" is the heartbeat: `log/alive` holds the wall-clock time,
//! rewritten every [`HEARTBEAT_EVERY`] while the engine runs and once at
//! close. A capacity file whose mtime is later than the heartbeat plus
//! [`ALIVE_SLACK`] was written by someone else while this node was down
//! (this node's own writes all came before its last beat, or within one
//! interval of it). The slack also absorbs clock skew between this node
//! and the capacity tier's time stamps up to about its length.

use std::io;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sluice_env::{Backend, BackendFile, FileKind, OpenOptions, RelPath, Stat};
use sluice_policy::extent_index::Piece;
use sluice_policy::FileId;

use super::read::{locate, read_fully};
use super::{context, Shared, State};

/// How often the heartbeat is written.
pub(super) const HEARTBEAT_EVERY: Duration = Duration::from_secs(1);
/// A capacity file modified later than the heartbeat plus this was
/// modified by someone else (module docs).
pub(super) const ALIVE_SLACK: Duration = Duration::from_secs(3);
/// The folder of quarantined bytes on the fast tier.
pub const QUARANTINE_DIR: &str = "quarantine";

const ALIVE_MAGIC: [u8; 4] = *b"SLAL";

fn alive_path() -> io::Result<RelPath> {
    RelPath::new("log/alive")
}

/// The heartbeat's 16 bytes: magic, crc32c of the time, nanoseconds since
/// the Unix epoch.
fn encode_alive(at: SystemTime) -> [u8; 16] {
    let nanos = at
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    let mut bytes = [0u8; 16];
    bytes[0..4].copy_from_slice(&ALIVE_MAGIC);
    bytes[4..8].copy_from_slice(&crc32c::crc32c(&nanos.to_le_bytes()).to_le_bytes());
    bytes[8..16].copy_from_slice(&nanos.to_le_bytes());
    bytes
}

/// When this node was last known to be running, from `log/alive`; `None`
/// when there is no valid heartbeat (a log older than the heartbeat, or a
/// torn one): recovery then checks deletion and replacement only.
pub(super) fn last_alive(fast: &dyn Backend) -> Option<SystemTime> {
    let file = fast
        .open(&alive_path().ok()?, OpenOptions::default())
        .ok()?;
    let mut bytes = [0u8; 16];
    read_fully(file.as_ref(), &mut bytes, 0).ok()?;
    let nanos = u64::from_le_bytes(bytes[8..16].try_into().ok()?);
    let crc = u32::from_le_bytes(bytes[4..8].try_into().ok()?);
    (bytes[0..4] == ALIVE_MAGIC && crc == crc32c::crc32c(&nanos.to_le_bytes()))
        .then(|| UNIX_EPOCH + Duration::from_nanos(nanos))
}

/// The heartbeat's file, created if missing.
pub(super) fn open_alive(fast: &dyn Backend) -> io::Result<Arc<dyn BackendFile>> {
    fast.open(&alive_path()?, OpenOptions::CREATE.private())
        .map_err(context(format!("fast tier {}: log/alive", fast.describe())))
}

/// Write the heartbeat now. Not synced: after a power cut an older beat
/// only makes recovery quarantine more, never less.
pub(super) fn beat(file: &dyn BackendFile) -> io::Result<()> {
    file.write_at(&encode_alive(SystemTime::now()), 0)
}

/// The heartbeat thread: a beat every [`HEARTBEAT_EVERY`] until the engine
/// stops, and a last one then; each time it also looks at the capacity
/// tier's health (health.rs).
pub(super) fn heartbeat_loop(shared: &Shared, file: &dyn BackendFile) {
    loop {
        // First, before this node's own writes and the capacity tier's
        // health check, which may be slow: other nodes take a heartbeat
        // that stops for a node that is down.
        let _ = super::held::beat(shared);
        let _ = beat(file);
        super::health::watch_capacity(shared);
        let stop = sluice_env::wait_while_at_most(
            &shared.alive_stop.1,
            sluice_env::lock(&shared.alive_stop.0),
            HEARTBEAT_EVERY,
            |stop| !*stop,
        );
        if *stop {
            let _ = beat(file);
            return;
        }
    }
}

/// Why recovered bytes of a file are not replayed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Reason {
    /// No file at its path (and no older name of it to redo a rename from).
    Deleted,
    /// Another inode at its path.
    Replaced { was: u64, now: u64 },
    /// Modified after this node was last running.
    Modified {
        mtime: SystemTime,
        alive: SystemTime,
    },
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reason::Deleted => write!(f, "deleted from the capacity tier while this node was down"),
            Reason::Replaced { was, now } => write!(
                f,
                "replaced on the capacity tier (inode {now}, the bytes were written to inode {was})"
            ),
            Reason::Modified { mtime, alive } => write!(
                f,
                "modified on the capacity tier at {} s, after this node was last running ({} s)",
                unix_secs(*mtime),
                unix_secs(*alive)
            ),
        }
    }
}

fn unix_secs(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// The capacity tier's attributes of `path`; `None` when the backend keeps
/// none (a test double) and can tell only that the file is there. NotFound
/// when it is not.
pub(super) fn stat_if_known(capacity: &dyn Backend, path: &RelPath) -> io::Result<Option<Stat>> {
    match capacity.stat(path) {
        Ok(stat) => Ok(Some(stat)),
        Err(e) if e.kind() == io::ErrorKind::Unsupported => match capacity.metadata(path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Err(e),
            _ => Ok(None),
        },
        Err(e) => Err(e),
    }
}

/// Judge the capacity file at `path` for the recovered bytes of a file
/// written to inode `ino` (0: unknown) while this node ran until `alive`.
/// `None`: replay them.
pub(super) fn judge(
    capacity: &dyn Backend,
    path: &RelPath,
    ino: u64,
    alive: Option<SystemTime>,
) -> io::Result<Option<Reason>> {
    let stat = match stat_if_known(capacity, path) {
        Ok(Some(stat)) => stat,
        Ok(None) => return Ok(None),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Some(Reason::Deleted)),
        Err(e) => {
            return Err(context(format!(
                "recovery: capacity tier {}: stat {path}",
                capacity.describe()
            ))(e))
        }
    };
    if ino != 0 && stat.ino != ino {
        return Ok(Some(Reason::Replaced {
            was: ino,
            now: stat.ino,
        }));
    }
    if let Some(alive) = alive {
        if stat.mtime > alive + ALIVE_SLACK {
            return Ok(Some(Reason::Modified {
                mtime: stat.mtime,
                alive,
            }));
        }
    }
    Ok(None)
}

/// One quarantined file, as `manifest.json` describes it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct QuarantineEntry {
    /// The entry's folder name under `quarantine/` (not in the manifest).
    #[serde(skip)]
    pub name: String,
    /// The file's path (relative to the mount) when its bytes were written.
    pub path: String,
    /// Why they were not replayed.
    pub reason: String,
    /// When recovery quarantined them (seconds since the Unix epoch).
    #[serde(default)]
    pub quarantined_at: u64,
    /// The byte ranges held, (offset, length), in offset order.
    pub extents: Vec<(u64, u64)>,
}

impl QuarantineEntry {
    /// Bytes held.
    pub fn bytes(&self) -> u64 {
        self.extents.iter().map(|&(_, len)| len).sum()
    }

    fn to_json(&self) -> String {
        // INVARIANT: strings, numbers and pairs of numbers always serialize.
        serde_json::to_string(self).expect("a quarantine manifest serializes")
    }

    /// Parse the manifest of entry `name`.
    pub fn from_json(name: &str, text: &str) -> io::Result<QuarantineEntry> {
        let mut entry: QuarantineEntry = serde_json::from_str(text).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("quarantine entry {name}: manifest.json: {e}"),
            )
        })?;
        entry.name = name.to_string();
        Ok(entry)
    }
}

/// Copy the buffered bytes of `file` (last named `path`) out of the log
/// into a quarantine entry, synced, then drop them from the index so they
/// are never flushed. The entry's name is the file id and the newest
/// sequence number of its bytes, so a second recovery of the same log (a
/// crash before the regions were reset) finds the entry already made.
pub(super) fn quarantine(
    fast: &dyn Backend,
    state: &mut State,
    file: FileId,
    path: &RelPath,
    reason: &Reason,
) -> io::Result<QuarantineEntry> {
    let what = |w: &str| format!("fast tier {}: quarantine {path}: {w}", fast.describe());
    let pieces = state.buffer.buffered_pieces(file, 0, u64::MAX, None);
    let newest = state
        .buffer
        .lookup(file, 0, u64::MAX)
        .filter_map(|piece| match piece {
            Piece::Buffered { seq, .. } => Some(seq),
            _ => None,
        })
        .max()
        .unwrap_or(0);
    let name = format!("q-{newest}-{}", file.0);
    let entry = QuarantineEntry {
        name: name.clone(),
        path: path.to_string(),
        reason: reason.to_string(),
        quarantined_at: unix_secs(SystemTime::now()),
        extents: pieces
            .iter()
            .map(|&(offset, len, _)| (offset, len))
            .collect(),
    };
    let root = RelPath::new(QUARANTINE_DIR)?;
    let dir = entry_dir(&name)?;
    let manifest = dir.join("manifest.json")?;
    if fast.metadata(&manifest).is_err() {
        for d in [&root, &dir] {
            match fast.create_private_dir(d) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(context(what("create its folder"))(e)),
            }
        }
        let data = fast
            .open(&dir.join("data")?, OpenOptions::CREATE.private())
            .map_err(context(what("data")))?;
        for &(offset, len, location) in &pieces {
            let mut buf = vec![0u8; len as usize];
            locate(state, location)
                .copy_to(&mut buf)
                .map_err(context(what("read the log")))?;
            data.write_at(&buf, offset).map_err(context(what("data")))?;
        }
        data.sync_data().map_err(context(what("sync data")))?;
        // The manifest last: an entry without one is incomplete, redone by
        // the next recovery (the bytes are still in the log until then).
        let file = fast
            .open(&manifest, OpenOptions::CREATE.private())
            .map_err(context(what("manifest.json")))?;
        file.set_len(0)?;
        file.write_at(entry.to_json().as_bytes(), 0)
            .and_then(|()| file.sync_data())
            .map_err(context(what("manifest.json")))?;
        fast.sync_dir(&dir).map_err(context(what("sync")))?;
        fast.sync_dir(&root).map_err(context(what("sync")))?;
        fast.sync_dir(&RelPath::root())
            .map_err(context(what("sync")))?;
    }
    state.buffer.remove_file(file);
    Ok(entry)
}

/// Every complete quarantine entry on the fast tier, oldest first.
pub fn list(fast: &dyn Backend) -> io::Result<Vec<QuarantineEntry>> {
    let root = RelPath::new(QUARANTINE_DIR)?;
    let entries = match fast.read_dir(&root) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    for entry in entries.iter().filter(|e| e.kind == FileKind::Dir) {
        let manifest = entry_dir(&entry.name)?.join("manifest.json")?;
        let Ok(file) = fast.open(&manifest, OpenOptions::default()) else {
            continue; // incomplete: redone by the next recovery
        };
        let len = file.len()?;
        let mut text = vec![0u8; usize::try_from(len).unwrap_or(0).min(16 << 20)];
        read_fully(file.as_ref(), &mut text, 0)?;
        out.push(QuarantineEntry::from_json(
            &entry.name,
            &String::from_utf8_lossy(&text),
        )?);
    }
    out.sort_by(|a, b| (a.quarantined_at, &a.name).cmp(&(b.quarantined_at, &b.name)));
    Ok(out)
}

/// The folder of entry `name` on the fast tier.
fn entry_dir(name: &str) -> io::Result<RelPath> {
    RelPath::new(QUARANTINE_DIR)?.join(name)
}

/// The entry `name` on `fast`; an error naming `sluice quarantine list`
/// when there is none.
pub fn find(fast: &dyn Backend, name: &str) -> io::Result<QuarantineEntry> {
    list(fast)?
        .into_iter()
        .find(|e| e.name == name)
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "no quarantined entry {name:?} on fast tier {} (see `sluice quarantine list`)",
                    fast.describe()
                ),
            )
        })
}

/// Write `entry`'s bytes into `to` at their offsets (its other bytes are
/// kept), then sync `to`. Returns the bytes written. `to` is any file: one
/// under a mount (the bytes then go through sluice like any write) or
/// anywhere else.
pub fn restore(fast: &dyn Backend, entry: &QuarantineEntry, to: &std::fs::File) -> io::Result<u64> {
    use std::os::unix::fs::FileExt;
    let data = entry_dir(&entry.name)?.join("data")?;
    let from = fast.open(&data, OpenOptions::default())?;
    for &(offset, len) in &entry.extents {
        let mut buf = vec![0u8; usize::try_from(len).map_err(io::Error::other)?];
        read_fully(from.as_ref(), &mut buf, offset)?;
        to.write_all_at(&buf, offset)?;
    }
    to.sync_all()?;
    Ok(entry.bytes())
}

/// Remove the entry `name` and its bytes.
pub fn remove(fast: &dyn Backend, name: &str) -> io::Result<()> {
    let dir = entry_dir(name)?;
    for entry in fast.read_dir(&dir)? {
        fast.remove_file(&dir.join(&entry.name)?)?;
    }
    fast.remove_dir(&dir)
}
