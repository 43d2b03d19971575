//! On-demand consistency (`mount.consistency = "on-demand"`, issue 34;
//! docs/fuse.md "On demand", the crash argument in
//! docs/crash-consistency.md "held marks and recalls").
//!
//! A file whose bytes this node buffers carries a *held mark* on its
//! capacity file, naming this node with the file's size and mtime: the
//! extended attribute [`HELD_XATTR`], or where the capacity tier keeps no
//! user xattrs a sidecar entry keyed by the file's inode number (marks.rs,
//! which keeps either behind the same calls; `mount.held_mark`). Another
//! node that opens, locks or starts buffering the file *recalls* it: it
//! writes a recall entry under [`RECALL_DIR`]`/HOLDER/` on the capacity
//! tier and waits, at most
//! `recall_wait`, for the mark to go. This node's `sluice-recall` thread
//! lists its directory every [`ANSWER_EVERY`], writes each recalled file
//! back through the per-file write-back (`sync.rs`), removes the mark and
//! the entry; it also sweeps the marks of closed files the flusher
//! emptied. Every node's heartbeat thread also sets the mtime of
//! [`ALIVE_DIR`]`/NODE` on the capacity tier every second: a requester
//! whose holder's mtime stops moving for [`DOWN_AFTER`] knows the holder
//! is down and fails at once, instead of after `recall_wait`. The beat is
//! metadata only, so it does not queue behind the holder's own
//! write-backs on a congested data path.
//!
//! INVARIANTS:
//! - a file with a byte in the index or being appended has
//!   `OpenFile::held` set, and its mark was set on the capacity tier
//!   before that byte's record was reserved (the mark is set with the
//!   file's I/O lock held, before the write places anything);
//! - a mark is removed only while this node holds the file's I/O lock
//!   alone and the mark lock ([`Held::marks`]), and only when nothing of
//!   the file is in the index or being appended: every byte this node
//!   acknowledged is then on the capacity file, synced;
//! - a file with `held` set is never forgotten (files.rs), so the sweep
//!   finds every mark this node set in this run.
//!
//! Lock order: a file's I/O lock, then its sync turn, then the mark lock,
//! then the engine lock; no lock is held while waiting for another node.

use std::io;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use sluice_env::{Backend, OpenOptions, RelPath, SetAttr, Stat, TimeSet};
use sluice_policy::{FileId, Tier};

use super::config::{Doorbell, OnDemand};
use super::files::{
    at_rest, file_io, file_of, forget_if_unused, forget_stale_name, hold_alone, unknown,
};
use super::marks::{make_dirs, MarkStore, Marked};
use super::read::read_fully;
use super::{context, sync, Engine, OpenFile, Shared, State};

/// The extended attribute that marks a capacity file as held by a node.
pub const HELD_XATTR: &str = "user.sluice.held";

/// The directory under the capacity root that sluice keeps its own files
/// in; an on-demand mount hides it from the root's listing and lookups.
pub const HIDDEN_DIR: &str = ".sluice";

/// Where recall entries go: `RECALL_DIR/HOLDER/REQUESTER-HASH`.
const RECALL_DIR: &str = ".sluice/recall";

/// The first line of a recall entry; the path follows on the second.
const ENTRY_MAGIC: &str = "sluice-recall v1";

/// A requester writes its entry under this prefix, then renames it into
/// place, so the holder never reads an entry half written; the holder
/// skips names with it. (Written in place, an entry whose bytes were slow
/// to land, as on a congested disk, was read empty by the holder, removed
/// as not understood, and the recall waited for the flusher instead:
/// `scripts/bench-multinode-ondemand.sh`, docs/results/multinode-ondemand.md.)
const ENTRY_WRITING_PREFIX: &str = ".writing-";

/// Where every on-demand node beats: `ALIVE_DIR/NODE`.
const ALIVE_DIR: &str = ".sluice/alive";

/// A holder whose heartbeat has not moved for this long is down (three
/// beats missed: the heartbeat thread beats every second).
const DOWN_AFTER: Duration = Duration::from_secs(3);

/// A waiting requester reads its holder's heartbeat after this many looks
/// at the mark (a quarter of a second).
const BEAT_EVERY_POLLS: u32 = 12;

/// How often the holder lists its recall directory (without a doorbell),
/// and sweeps the marks of files it emptied.
const ANSWER_EVERY: Duration = Duration::from_millis(100);

/// With a doorbell (the shared catalogue's): how often the holder takes
/// it, and how seldom it lists its recall directory (for entries whose
/// ring was lost: written while the catalogue was down, or before a
/// restart).
const DOORBELL_EVERY: Duration = Duration::from_millis(20);
const LIST_WITH_DOORBELL_EVERY: Duration = Duration::from_secs(2);

/// How often a requester looks at the mark while it waits.
const POLL_MARK_EVERY: Duration = Duration::from_millis(20);

/// A waiting requester writes its entry again after this many looks at
/// the mark (half a second).
const REASK_EVERY_POLLS: u32 = 25;

/// Recall entries answered in one pass (the rest wait for the next).
const ENTRIES_PER_PASS: usize = 64;

/// Marks of closed, emptied files removed in one pass.
const SWEEP_PER_PASS: usize = 64;

/// The on-demand state shared by the engine's threads.
pub(super) struct Held {
    /// This node's name in marks and recall entries.
    pub(super) node: String,
    /// Where marks live on this capacity tier (marks.rs).
    store: MarkStore,
    /// Longest wait for another node to give a file back.
    recall_wait: Duration,
    /// Held while a mark is set, rewritten or removed: a removal's check
    /// that this node buffers nothing of the file and the removal are one
    /// step for every other change of a mark.
    marks: Mutex<()>,
    /// The mtime this node's last beat gave its heartbeat file
    /// ([`ALIVE_DIR`]`/NODE` on the capacity tier).
    alive: Mutex<Option<SystemTime>>,
    /// The shared catalogue's recall doorbell, if configured.
    doorbell: Option<Doorbell>,
}

/// What a held mark says: `v1 node=NODE size=BYTES mtime=SECS.NANOS`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mark {
    /// The node whose log holds the file's newest bytes.
    pub node: String,
    /// The file's size as that node knew it at its last close or fsync.
    pub size: u64,
    /// The file's mtime then (none if that node had not written it yet).
    pub mtime: Option<SystemTime>,
}

impl Mark {
    /// The attribute's value.
    pub fn encode(&self) -> Vec<u8> {
        let mut text = format!("v1 node={} size={}", self.node, self.size);
        if let Some(at) = self.mtime.and_then(|t| t.duration_since(UNIX_EPOCH).ok()) {
            text.push_str(&format!(" mtime={}.{:09}", at.as_secs(), at.subsec_nanos()));
        }
        text.into_bytes()
    }

    /// A value read back; `None` if it is not one [`Mark::encode`] makes.
    pub fn decode(bytes: &[u8]) -> Option<Mark> {
        let text = std::str::from_utf8(bytes).ok()?;
        let mut fields = text.split_whitespace();
        if fields.next()? != "v1" {
            return None;
        }
        let (mut node, mut size, mut mtime) = (None, None, None);
        for field in fields {
            match field.split_once('=')? {
                ("node", v) => node = crate::ckpt::check_node_id(v).ok(),
                ("size", v) => size = v.parse::<u64>().ok(),
                ("mtime", v) => {
                    let (secs, nanos) = v.split_once('.')?;
                    let nanos: u32 = nanos.parse().ok().filter(|n| *n < 1_000_000_000)?;
                    mtime = Some(UNIX_EPOCH + Duration::new(secs.parse().ok()?, nanos));
                }
                // Later versions may add fields.
                _ => {}
            }
        }
        Some(Mark {
            node: node?,
            size: size?,
            mtime,
        })
    }
}

/// A file's on-demand state as every node sees it: the value of the
/// read-only virtual xattr [`STATE_XATTR`] through an on-demand mount.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HeldState {
    /// `held node=NODE`: a held mark names NODE, whose log has the file's
    /// newest bytes; another node's open recalls them.
    Held {
        /// The node the mark names.
        node: String,
    },
    /// `sealed`: no mark and no write bit in the file's mode (`chmod
    /// a-w`, or `sluice seal` of a read-only file): every node reads it
    /// from the capacity tier without a recall.
    Sealed,
    /// `clean`: no mark (no node buffers a byte of it), but writable.
    Clean,
}

impl std::fmt::Display for HeldState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HeldState::Held { node } => write!(f, "held node={node}"),
            HeldState::Sealed => f.write_str("sealed"),
            HeldState::Clean => f.write_str("clean"),
        }
    }
}

/// What [`Engine::seal`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Sealing {
    /// This node holds the file: its write-back has started (an entry in
    /// this node's own recall directory, answered within one pass).
    Started,
    /// Another node holds it: a recall entry asks that node to write it
    /// back (answered as any recall, without waiting here).
    Asked {
        /// The node the mark names.
        holder: String,
    },
    /// No node holds it: its bytes are on the capacity tier already.
    NotHeld,
}

/// The read-only virtual xattr that shows a file's [`HeldState`] through
/// an on-demand mount.
pub const STATE_XATTR: &str = "user.sluice.state";

/// What this node last wrote into a file's mark.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct MarkWritten {
    size: u64,
    mtime: Option<SystemTime>,
}

fn rel(path: &str) -> io::Result<RelPath> {
    RelPath::new(path)
}

fn recall_dir(node: &str) -> io::Result<RelPath> {
    rel(&format!("{RECALL_DIR}/{node}"))
}

/// FNV-1a, 64 bits: names a requester's entry for one path.
fn path_hash(path: &RelPath) -> u64 {
    super::marks::fnv1a(path.as_str().as_bytes())
}

/// An error of a call on an open file's descriptor that says the file is
/// no more: ESTALE, a network file system's answer (GlusterFS's, NFS's)
/// for the descriptor of a file another client removed. (Not NotFound:
/// by a name, that only says the name is gone, and the file may live on
/// under another.)
fn file_gone(e: &io::Error) -> bool {
    sluice_env::raw_os_error(e) == sluice_env::errno::errno_code("ESTALE")
}

/// The on-demand state for `config`, at open: this node's name (the
/// configured one, else the catalogue's node id kept on the fast tier),
/// its recall directory made on the capacity tier, and where marks live
/// there (`mount.held_mark`, resolved against the tier's record:
/// marks.rs).
pub(super) fn open(
    fast: &dyn Backend,
    capacity: &dyn Backend,
    config: &OnDemand,
) -> io::Result<Held> {
    let node = match &config.node {
        Some(node) => node.clone(),
        None => crate::ckpt::node_id_at_open(fast)?,
    };
    let dir = recall_dir(&node)?;
    let refused = |e: io::Error| {
        io::Error::new(
            e.kind(),
            format!(
                "mount.consistency = \"on-demand\" needs a {HIDDEN_DIR} directory in the \
                 capacity tier's root; capacity tier {}: {e}; use \"close-to-open\" or \
                 \"node-local\" there",
                capacity.describe()
            ),
        )
    };
    make_dirs(capacity, &dir).map_err(refused)?;
    let store = super::marks::resolve(capacity, config.mark, &node, &dir)?;
    make_dirs(capacity, &rel(ALIVE_DIR)?).map_err(refused)?;
    capacity
        .open(&alive_path(&node)?, OpenOptions::CREATE)
        .map_err(refused)?;
    Ok(Held {
        node,
        store,
        recall_wait: config.recall_wait,
        marks: Mutex::new(()),
        alive: Mutex::new(None),
        doorbell: config.doorbell.clone(),
    })
}

fn alive_path(node: &str) -> io::Result<RelPath> {
    rel(&format!("{ALIVE_DIR}/{node}"))
}

/// One beat of this node's heartbeat on the capacity tier (under
/// on-demand; the heartbeat thread calls it every second): the heartbeat
/// file's mtime set to now, or a second past the last beat's where the
/// clock has not passed it (other nodes only look for a change: no clocks
/// are compared). Metadata only: a data write here queued on a congested
/// disk behind this node's own write-backs, and a requester took this
/// node for down while it was answering (docs/results/multinode-ondemand.md).
/// A heartbeat file removed behind this node's back is made again.
pub(super) fn beat(shared: &Shared) -> io::Result<()> {
    let Some(held) = &shared.held else {
        return Ok(());
    };
    let mut last = sluice_env::lock(&held.alive);
    let wall = shared.clock.wall();
    let at = match *last {
        Some(last) if wall <= last => last + Duration::from_secs(1),
        _ => wall,
    };
    let path = alive_path(&held.node)?;
    let attr = SetAttr {
        mtime: Some(TimeSet::At(at)),
        ..SetAttr::default()
    };
    let capacity = shared.capacity.as_ref();
    match capacity.set_attr(&path, &attr) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            capacity.open(&path, OpenOptions::CREATE)?;
            capacity.set_attr(&path, &attr)
        }
        result => result,
    }?;
    *last = Some(at);
    Ok(())
}

/// `node`'s heartbeat (its heartbeat file's mtime), if it has one.
fn heartbeat_of(capacity: &dyn Backend, node: &str) -> Option<SystemTime> {
    Some(capacity.stat(&alive_path(node).ok()?).ok()?.mtime)
}

/// The on-demand state, or an Unsupported error saying that `what` needs
/// on-demand.
fn on_demand<'a>(shared: &'a Shared, what: &str) -> io::Result<&'a Held> {
    shared.held.as_ref().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::Unsupported,
            format!(
                "{what}: this mount is not on-demand (mount.consistency = \"on-demand\" \
                 holds files; under the other modes `sluice sync PATH` writes a file's \
                 buffered bytes back)"
            ),
        )
    })
}

/// Ok if `path` is a regular file on the capacity tier.
fn regular_file(shared: &Shared, path: &RelPath) -> io::Result<()> {
    let st = shared.capacity.stat(path)?;
    if st.kind == sluice_env::StatKind::File {
        return Ok(());
    }
    Err(io::Error::new(
        io::ErrorKind::InvalidInput,
        format!(
            "{path}: not a regular file ({:?}): only files are held and sealed",
            st.kind
        ),
    ))
}

/// The mark on `path`, if any (`None` as well when the file is gone: the
/// open that asked fails by itself).
fn read_mark(shared: &Shared, held: &Held, path: &RelPath) -> io::Result<Option<Mark>> {
    held.store.read(shared.capacity.as_ref(), path)
}

/// A stat of `path` on this node, which does not hold its mark: if
/// another node does, the size and mtime its mark carries (that node's
/// newest bytes are in its log, not on the capacity file). A mark that
/// cannot be read leaves the stat as it is.
pub(super) fn overlay_mark(shared: &Shared, path: &RelPath, stat: &mut Stat) {
    let Some(held) = &shared.held else {
        return;
    };
    let Ok(Some(mark)) = held.store.read_stat(shared.capacity.as_ref(), path, stat) else {
        return;
    };
    if mark.node == held.node {
        return;
    }
    stat.len = mark.size;
    stat.blocks = stat.blocks.max(mark.size.div_ceil(512));
    if let Some(mtime) = mark.mtime {
        stat.mtime = mtime;
        stat.ctime = stat.ctime.max(mtime);
    }
}

/// Recovery: mark again every file this node replays bytes of, before
/// the engine answers anything (a mark lost with the capacity tier's
/// unsynced metadata is put back; one still there is rewritten).
pub(super) fn mark_recovered(shared: &Shared) -> io::Result<()> {
    let Some(held) = &shared.held else {
        return Ok(());
    };
    let _marks = sluice_env::lock(&held.marks);
    let files: Vec<(FileId, RelPath, MarkWritten)> = {
        let state = sluice_env::lock(&shared.state);
        state
            .files
            .iter()
            .filter(|(id, open)| !open.unlinked && state.buffer.has_buffered(**id))
            .map(|(id, open)| (*id, open.path.clone(), written_of(open)))
            .collect()
    };
    for (id, path, now) in files {
        mark(shared, held, id, &path, now, sluice_env::XattrFlags::Either)
            .map_err(context(format!("recovery: mark {path} held")))?;
    }
    // Sidecar: every other entry this node made is an earlier run's, with
    // nothing behind it now (and its file may be gone, its inode number
    // another file's): removed before anything is answered.
    let holding: std::collections::HashSet<u64> = sluice_env::lock(&shared.state)
        .files
        .values()
        .filter(|open| open.held.is_some())
        .filter_map(|open| open.ino.map(|(_, ino)| ino))
        .collect();
    let stale = held
        .store
        .forget_stale(shared.capacity.as_ref(), &held.node, &holding)
        .map_err(context("recovery: remove this node's stale held marks"))?;
    if stale > 0 {
        tracing::info!(
            stale,
            "recovery: removed held marks of an earlier run with nothing behind them"
        );
    }
    Ok(())
}

fn written_of(open: &OpenFile) -> MarkWritten {
    MarkWritten {
        size: open.size,
        mtime: open.written,
    }
}

/// Set the mark of `file` (at `path`) to say `now`, and note that this
/// node holds it as written.
fn mark(
    shared: &Shared,
    held: &Held,
    file: FileId,
    path: &RelPath,
    now: MarkWritten,
    flags: sluice_env::XattrFlags,
) -> io::Result<()> {
    let mark = Mark {
        node: held.node.clone(),
        size: now.size,
        mtime: now.mtime,
    };
    // Through the file's own descriptor (or inode number): another node
    // may have renamed a file over `path` or made a new one there since
    // this node last looked, and that file is not this node's to mark
    // (its stat would show this node's size; its recalls would come here).
    let (handle, ino) = file_identity(shared, file)?;
    let target = Marked {
        handle: &handle,
        ino,
        path,
    };
    held.store
        .set(shared.capacity.as_ref(), &held.node, &target, &mark, flags)?;
    if let Some(open) = sluice_env::lock(&shared.state).files.get_mut(&file) {
        open.held = Some(now);
    }
    Ok(())
}

/// An open file's capacity handle and its identity (device, inode).
type HandleAndIdentity = (Arc<dyn sluice_env::BackendFile>, Option<(u64, u64)>);

/// The capacity handle of open `file` and its identity, which a mark is
/// set and read through ([`Marked`]).
fn file_identity(shared: &Shared, file: FileId) -> io::Result<HandleAndIdentity> {
    let state = sluice_env::lock(&shared.state);
    let open = state.files.get(&file).ok_or_else(|| unknown(file))?;
    Ok((Arc::clone(&open.handle), open.ino))
}

/// Before a write of `file` routed to `tier` places anything: if its
/// bytes may go to the log (routed there, or over buffered bytes) and
/// this node does not hold the file's mark yet, set it, recalling the
/// file first if another node holds it. The caller holds the file's I/O
/// lock (shared or alone), so no record of the file is reserved before
/// the mark is on the capacity tier.
pub(super) fn before_write(shared: &Shared, file: FileId, tier: Tier) -> io::Result<()> {
    let Some(held) = &shared.held else {
        return Ok(());
    };
    // The common case, without the mark lock: held already, or nothing of
    // the write can reach the log.
    if needs_mark(&sluice_env::lock(&shared.state), file, tier)?.is_none() {
        return Ok(());
    }
    let started = Instant::now();
    loop {
        let marks = sluice_env::lock(&held.marks);
        let Some((path, now)) = needs_mark(&sluice_env::lock(&shared.state), file, tier)? else {
            return Ok(());
        };
        match mark(
            shared,
            held,
            file,
            &path,
            now,
            sluice_env::XattrFlags::CreateOnly,
        ) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            // Another node removed the file (GlusterFS answers ESTALE for
            // its descriptor): no node can open it to recall it, so its
            // writes go on unmarked, as writes to any removed file still
            // open do; the file counts as held, so its bytes are given
            // back (and nothing is marked) as any held file's.
            Err(e) if file_gone(&e) => {
                if let Some(open) = sluice_env::lock(&shared.state).files.get_mut(&file) {
                    open.held = Some(now);
                }
                return Ok(());
            }
            Err(e) => return Err(context(format!("mark {path} held before buffering"))(e)),
        }
        let (handle, ino) = file_identity(shared, file)?;
        let target = Marked {
            handle: &handle,
            ino,
            path: &path,
        };
        match held.store.read_file(shared.capacity.as_ref(), &target)? {
            // Ours, from an earlier run: take it over.
            Some(found) if found.node == held.node => {
                return mark(
                    shared,
                    held,
                    file,
                    &path,
                    now,
                    sluice_env::XattrFlags::Either,
                )
                .map_err(context(format!("mark {path} held before buffering")));
            }
            // Removed meanwhile: create it again (not for ever: a mark
            // that exists to create but not to read is a tier's fault).
            None if started.elapsed() < held.recall_wait => {
                drop(marks);
                shared.clock.sleep(POLL_MARK_EVERY);
                continue;
            }
            None => {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "mark {path} held before buffering: the capacity tier refuses a new \
                         mark (it exists) but shows none for {:?}",
                        held.recall_wait
                    ),
                ))
            }
            Some(_) => {
                // Another node's bytes come first; its mark lock is not
                // ours to hold while it answers.
                drop(marks);
                let left = held.recall_wait.saturating_sub(started.elapsed());
                recall_path(shared, held, &path, left)?;
                // What the holder wrote back is the file's size now (this
                // node's mark carries it next; its reads see it), as after
                // a lock's recall.
                super::attrs::refresh_size(shared, file)?;
            }
        }
    }
}

/// What a write of `file` routed to `tier` must mark first: its name and
/// what the mark says, unless this node holds the mark already, no byte
/// of the write can reach the log, or the file has no name.
fn needs_mark(
    state: &State,
    file: FileId,
    tier: Tier,
) -> io::Result<Option<(RelPath, MarkWritten)>> {
    let open = state.files.get(&file).ok_or_else(|| unknown(file))?;
    let may_log = tier == Tier::Fast || state.buffer.has_buffered(file);
    Ok((open.held.is_none() && may_log && !open.unlinked)
        .then(|| (open.path.clone(), written_of(open))))
}

/// At a close or fsync of `file`: the mark carries the size and mtime
/// this node knows now (so other nodes' stat shows them without a
/// recall). Nothing if this node does not hold the mark or they did not
/// change.
pub(super) fn update(shared: &Shared, file: FileId) -> io::Result<()> {
    let Some(held) = &shared.held else {
        return Ok(());
    };
    let _marks = sluice_env::lock(&held.marks);
    let state = sluice_env::lock(&shared.state);
    let Some(open) = state.files.get(&file) else {
        return Ok(());
    };
    let now = written_of(open);
    if open.held.is_none_or(|last| last == now) || open.unlinked {
        return Ok(());
    }
    let path = open.path.clone();
    drop(state);
    match mark(
        shared,
        held,
        file,
        &path,
        now,
        sluice_env::XattrFlags::Either,
    ) {
        // Another node removed the file: no node can read its mark.
        Err(e) if file_gone(&e) => Ok(()),
        result => result.map_err(context(format!("update the held mark of {path}"))),
    }
}

/// Whether this node holds the mark of the file at `path` (or of the
/// open `file`): then an open or lock of it recalls nothing.
fn holds(state: &State, file: Option<FileId>) -> bool {
    file.and_then(|id| state.files.get(&id))
        .is_some_and(|open| open.held.is_some())
}

/// The file this node holds the mark of that `path` on the capacity tier
/// names now: by the name, or by its identity (another node renamed it
/// since this node marked it, and the mark went with it).
fn held_at(shared: &Shared, path: &RelPath) -> Option<FileId> {
    let ino = shared.capacity.stat(path).ok().map(|st| st.identity());
    let state = sluice_env::lock(&shared.state);
    // By identity first: a name this node knows may name another file now
    // (another node renamed a file over it, or removed it and made a new
    // one), and that file is not the one this node holds.
    let by_ino = ino
        .and_then(|ino| state.by_ino.get(&ino).copied())
        .filter(|id| state.files.contains_key(id));
    let by_name = || {
        file_of(&state, path, ino)
            .filter(|id| ino.is_none() || state.files.get(id).is_some_and(|o| o.ino.is_none()))
    };
    by_ino
        .or_else(by_name)
        .filter(|id| holds(&state, Some(*id)))
}

/// The requester's side: before an open or lock of `path` (the open
/// `file` if given), wait until no other node holds its mark, recalling
/// it from the node that does. ETIMEDOUT after `recall_wait`.
pub(super) fn recall(shared: &Shared, path: &RelPath, file: Option<FileId>) -> io::Result<()> {
    let Some(held) = &shared.held else {
        return Ok(());
    };
    if file.is_none() {
        // A name another node gave to another file is not this node's.
        forget_stale_name(shared, path)?;
    }
    {
        let state = sluice_env::lock(&shared.state);
        let file = file.or_else(|| state.ids.get(path).copied());
        if holds(&state, file) {
            return Ok(());
        }
    }
    recall_path(shared, held, path, held.recall_wait)
}

fn recall_path(shared: &Shared, held: &Held, path: &RelPath, wait: Duration) -> io::Result<()> {
    let capacity = shared.capacity.as_ref();
    let started = Instant::now();
    let mut asked: Option<String> = None;
    let mut polls = 0u32;
    // The holder's heartbeat as last read, and since when it reads so.
    let mut beat: Option<(String, Option<SystemTime>, Instant)> = None;
    loop {
        let holder = match read_mark(shared, held, path)? {
            None => {
                if asked.is_some() {
                    count_recall(shared, started, false);
                }
                return Ok(());
            }
            Some(mark) if mark.node == held.node => {
                // This node's, left by an earlier run with nothing behind
                // it (this run would hold the file otherwise).
                clear_unheld(shared, held, path)?;
                return Ok(());
            }
            Some(mark) => mark.node,
        };
        // Asked again now and then: a holder that answered an entry but
        // could not clear the mark yet (its bytes came back) looks for it
        // again. With a doorbell a ring is enough (it carries the path):
        // the entry's rewrite, a small write that queues on a congested
        // disk, would keep this loop from seeing the mark go meanwhile.
        if asked.as_deref() != Some(holder.as_str()) {
            if ring(held, &holder, path) {
                // The holder answers from the ring. The entry, which
                // outlives a lost ring and the holder's restart, is written
                // beside this wait: on a congested capacity tier its
                // create, write and rename queue behind the nodes'
                // write-backs, and this loop saw the mark go only after
                // them (opens 2.0-3.6 s after the holder's write-back had
                // ended, docs/results/multinode-ondemand.md).
                write_entry_behind(shared, held, &holder, path);
            } else {
                write_entry_file(capacity, &held.node, &holder, path)
                    .map_err(context(format!("recall {path} from node {holder}")))?;
            }
            asked = Some(holder.clone());
        } else if polls.is_multiple_of(REASK_EVERY_POLLS) && !ring(held, &holder, path) {
            write_entry(capacity, held, &holder, path)
                .map_err(context(format!("recall {path} from node {holder}")))?;
        }
        polls += 1;
        if polls % BEAT_EVERY_POLLS == 1 {
            let now = heartbeat_of(capacity, &holder);
            match &beat {
                Some((node, seen, since)) if *node == holder && *seen == now => {
                    // No heartbeat file (a node before heartbeats): only
                    // the bound below decides.
                    if now.is_some() && since.elapsed() >= DOWN_AFTER {
                        count_recall(shared, started, true);
                        return Err(io::Error::new(
                            io::ErrorKind::TimedOut,
                            format!(
                                "recall of {path} from node {holder}: that node is down (its \
                                 heartbeat, {ALIVE_DIR}/{holder} on the capacity tier, has not \
                                 moved for {:.1} s); its newest bytes stay in its log until it \
                                 is mounted again, and the older bytes on the capacity tier \
                                 are not served",
                                since.elapsed().as_secs_f64()
                            ),
                        ));
                    }
                }
                _ => beat = Some((holder.clone(), now, Instant::now())),
            }
        }
        if started.elapsed() >= wait {
            count_recall(shared, started, true);
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "recall of {path} from node {holder}: no answer within {wait:?} \
                     (mount.recall_wait); its newest bytes stay in that node's log (is it \
                     down?), and the older bytes on the capacity tier are not served"
                ),
            ));
        }
        shared.clock.sleep(POLL_MARK_EVERY.min(wait));
    }
}

/// Count a recall that began at `started` (the metric `sluice_recalls_total`
/// and its wait).
fn count_recall(shared: &Shared, started: Instant, timed_out: bool) {
    let waited = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
    let mut state = sluice_env::lock(&shared.state);
    state.stats.recalls += 1;
    state.stats.recall_timeouts += u64::from(timed_out);
    state.stats.recall_wait_ns = state.stats.recall_wait_ns.saturating_add(waited);
}

/// A recall entry for `path` in `holder`'s directory: `ENTRY_MAGIC`, a
/// newline, the path, a newline. One per requester and path. Written
/// under [`ENTRY_WRITING_PREFIX`] and renamed into place: the holder sees
/// the whole entry or none (a repeated ask replaces it whole too).
///
/// With a doorbell, the holder's is rung first, with the entry's name and
/// the path (`NAME\nPATH`): a holder that takes it answers at once,
/// without waiting for the entry's small write and read, which on a
/// congested capacity tier queue behind the nodes' write-backs
/// (docs/results/multinode-ondemand.md). The entry is still written: it
/// is the request that outlives a lost ring and a restart.
fn write_entry(
    capacity: &dyn Backend,
    held: &Held,
    holder: &str,
    path: &RelPath,
) -> io::Result<()> {
    ring(held, holder, path);
    write_entry_file(capacity, &held.node, holder, path)
}

/// [`write_entry`]'s entry file, of requester `node` for `path` in
/// `holder`'s directory (no ring).
fn write_entry_file(
    capacity: &dyn Backend,
    node: &str,
    holder: &str,
    path: &RelPath,
) -> io::Result<()> {
    let dir = recall_dir(holder)?;
    make_dirs(capacity, &dir)?;
    let name = entry_name(node, path);
    let entry = dir.join(&name)?;
    let writing = dir.join(&format!("{ENTRY_WRITING_PREFIX}{name}"))?;
    let file = capacity.open(
        &writing,
        OpenOptions {
            create: true,
            truncate: true,
            ..OpenOptions::default()
        },
    )?;
    file.write_at(format!("{ENTRY_MAGIC}\n{path}\n").as_bytes(), 0)?;
    drop(file);
    capacity.rename(&writing, &entry)
}

/// The name of requester `node`'s recall entry for `path`.
fn entry_name(node: &str, path: &RelPath) -> String {
    format!("{node}-{:016x}", path_hash(path))
}

/// [`write_entry_file`] on a thread of its own, for a recall whose ring
/// the holder already has (the caller waits for the mark meanwhile). A
/// failure, or no thread to write it, is logged: the ring carried the
/// request, and the waiting requester rings again every few polls.
fn write_entry_behind(shared: &Shared, held: &Held, holder: &str, path: &RelPath) {
    let capacity = Arc::clone(&shared.capacity);
    let (node, holder, path) = (held.node.clone(), holder.to_string(), path.clone());
    let write = move || {
        if let Err(e) = write_entry_file(capacity.as_ref(), &node, &holder, &path) {
            tracing::warn!(
                error = %e,
                holder = %holder,
                path = %path,
                "recall entry not written (the doorbell carried the request)"
            );
        }
    };
    let spawned = std::thread::Builder::new()
        .name("sluice-recall-entry".into())
        .spawn(write);
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "recall entry not written: no thread to write it");
    }
}

/// Ring `holder`'s doorbell for `path` (`NAME\nPATH`), if there is one:
/// whether it rang. A ring that fails is logged: the holder's listing
/// finds the entry later.
fn ring(held: &Held, holder: &str, path: &RelPath) -> bool {
    let Some(bell) = &held.doorbell else {
        return false;
    };
    let name = entry_name(&held.node, path);
    match bell.0.ring_recall(holder, &format!("{name}\n{path}")) {
        Ok(rang) => rang,
        Err(e) => {
            tracing::debug!(error = %e, holder, entry = %name, "recall doorbell not rung");
            false
        }
    }
}

/// The path a recall entry's bytes name.
fn parse_entry(bytes: &[u8]) -> Option<RelPath> {
    let text = std::str::from_utf8(bytes).ok()?;
    let rest = text.strip_prefix(ENTRY_MAGIC)?.strip_prefix('\n')?;
    RelPath::new(rest.strip_suffix('\n')?).ok()
}

/// Remove the mark on `path` if it names this node and this node buffers
/// nothing of the file it names there (a mark left by an earlier run, or
/// by a file the sweep has not reached).
fn clear_unheld(shared: &Shared, held: &Held, path: &RelPath) -> io::Result<()> {
    let _marks = sluice_env::lock(&held.marks);
    if held_at(shared, path).is_some() {
        return Ok(());
    }
    match read_mark(shared, held, path)? {
        Some(mark) if mark.node == held.node => held
            .store
            .remove_at(shared.capacity.as_ref(), &held.node, path)
            .map_err(context(format!("remove the held mark of {path}"))),
        _ => Ok(()),
    }
}

/// Give the open `id` back: with `write_back`, write every buffered byte
/// to its capacity file and sync it (the per-file write-back, at disk
/// speed); then, if nothing of it is left buffered, remove its mark.
/// Returns whether the mark is gone (false: bytes of the file are still
/// buffered, as when the fast tier refused the clean record; the caller
/// tries again at its next pass).
///
/// The mark is removed through this node's name of the file, or through
/// `named` (the name a recall gave: another node renamed the file), from
/// whichever names the very file (its identity), never from another file
/// put at the name since.
fn give_back(
    shared: &Shared,
    held: &Held,
    id: FileId,
    write_back: bool,
    named: Option<&RelPath>,
) -> io::Result<bool> {
    let io = file_io(shared, id)?;
    // No writer of the file places a record until the mark is gone.
    let _alone = hold_alone(&io);
    if write_back {
        sync::write_back_file(shared, id, sync::Pass::Sync { always: true }, 0..u64::MAX)?;
    }
    let _marks = sluice_env::lock(&held.marks);
    let state = sluice_env::lock(&shared.state);
    let Some(open) = state.files.get(&id) else {
        return Ok(true);
    };
    if open.held.is_none() {
        return Ok(true);
    }
    if state.buffer.has_logged(id) {
        return Ok(false);
    }
    let (path, ino, unlinked) = (open.path.clone(), open.ino, open.unlinked);
    let handle = Arc::clone(&open.handle);
    drop(state);
    // From the file's own inode, whatever names it now (marks.rs), and
    // before the descriptor is closed: while it is open, the inode and
    // its number stay this file's.
    let target = Marked {
        handle: &handle,
        ino,
        path: &path,
    };
    held.store
        .remove_file(
            shared.capacity.as_ref(),
            &held.node,
            &target,
            unlinked,
            named,
        )
        .map_err(context(format!("remove the held mark of {path}")))?;
    let mut state = sluice_env::lock(&shared.state);
    if let Some(open) = state.files.get_mut(&id) {
        open.held = None;
    }
    let handle = forget_if_unused(&mut state, id);
    drop(state);
    drop(handle);
    Ok(true)
}

/// Answer one recall entry: give the file back (or remove a mark of ours
/// with nothing behind it), then remove the entry. An entry whose file
/// could not be given back stays for the next pass.
fn answer(shared: &Shared, held: &Held, entry: &RelPath) -> io::Result<()> {
    let capacity = shared.capacity.as_ref();
    let file = capacity.open(entry, OpenOptions::default())?;
    let len = file.len()?.min(64 * 1024);
    let mut bytes = vec![0u8; usize::try_from(len).unwrap_or(0)];
    read_fully(file.as_ref(), &mut bytes, 0)?;
    drop(file);
    let Some(path) = parse_entry(&bytes) else {
        tracing::warn!(entry = %entry, "recall entry not understood: removed");
        return capacity.remove_file(entry);
    };
    answer_for(shared, held, entry, &path)
}

/// Answer the recall of `path` that `entry` asks for (read from the entry,
/// or rung with it): give the file back if this node holds it, then
/// remove the entry (which a ring may answer before it is written: its
/// listing later costs a check of the mark).
fn answer_for(shared: &Shared, held: &Held, entry: &RelPath, path: &RelPath) -> io::Result<()> {
    let capacity = shared.capacity.as_ref();
    // The holder's side of the recall's latency: its write-back of the
    // file and the mark's removal (logged below; the requester's whole
    // wait is `sluice_recall_wait_seconds_total`).
    let writing = Instant::now();
    let given = match held_at(shared, path) {
        Some(id) => {
            let given = give_back(shared, held, id, true, Some(path))?;
            // A seal is an entry of this node's own, not another's recall.
            let sealed = entry
                .file_name()
                .strip_prefix(held.node.as_str())
                .and_then(|rest| rest.strip_prefix('-'))
                .is_some_and(|hash| hash.len() == 16);
            sluice_env::lock(&shared.state).stats.recalls_answered += u64::from(given && !sealed);
            given
        }
        None => {
            clear_unheld(shared, held, path)?;
            true
        }
    };
    let write_back = writing.elapsed();
    if given {
        match capacity.remove_file(entry) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        tracing::debug!(
            path = %path,
            write_back_s = write_back.as_secs_f64(),
            "recall answered"
        );
    }
    Ok(())
}

/// Remove the marks of files this node holds with nothing buffered (the
/// flusher wrote them back), at most `limit` of them; with `closed_only`,
/// only of files no handle has open (an open one may be written again
/// soon: its mark stays until its close, a recall or a drain).
pub(super) fn sweep(shared: &Shared, limit: usize, closed_only: bool) -> io::Result<()> {
    let Some(held) = &shared.held else {
        return Ok(());
    };
    let idle: Vec<FileId> = {
        let state = sluice_env::lock(&shared.state);
        state
            .files
            .iter()
            .filter(|(id, open)| {
                open.held.is_some()
                    && (!closed_only || open.opens == 0)
                    && at_rest(&state, **id, open)
            })
            .map(|(id, _)| *id)
            .take(limit)
            .collect()
    };
    for id in idle {
        match give_back(shared, held, id, false, None) {
            // Forgotten since it was listed: another sweep (the recall
            // thread's, beside a drain's) gave it back meanwhile.
            Err(e)
                if e.kind() == io::ErrorKind::NotFound
                    && !sluice_env::lock(&shared.state).files.contains_key(&id) => {}
            given => {
                given?;
            }
        }
    }
    Ok(())
}

/// The `sluice-recall` thread: every [`ANSWER_EVERY`] until the engine
/// stops, answer the recall entries in this node's directory and sweep
/// the marks of closed files the flusher emptied.
pub(super) fn answer_loop(shared: &Shared) {
    let Some(held) = &shared.held else {
        return;
    };
    let Ok(dir) = recall_dir(&held.node) else {
        return;
    };
    // A failure that lasts (the capacity tier down) is logged every
    // WARN_EVERY, not at every pass.
    const WARN_EVERY: Duration = Duration::from_secs(10);
    let mut warned: Option<Instant> = None;
    let mut warn = |what: &str, error: &dyn std::fmt::Display| {
        if warned.is_none_or(|at| at.elapsed() >= WARN_EVERY) {
            tracing::warn!(error = %error, "{what}");
            warned = Some(Instant::now());
        }
    };
    let (tick, list_every) = match held.doorbell {
        Some(_) => (DOORBELL_EVERY, LIST_WITH_DOORBELL_EVERY),
        None => (ANSWER_EVERY, ANSWER_EVERY),
    };
    let (mut listed, mut swept): (Option<Instant>, Option<Instant>) = (None, None);
    loop {
        if let Some(bell) = &held.doorbell {
            match bell.0.take_recalls(&held.node, ENTRIES_PER_PASS) {
                Ok(rings) => {
                    for ring in rings {
                        // `NAME\nPATH`: an entry's name in this node's
                        // directory and the path it recalls (the ring
                        // comes from the network: checked as such).
                        let (name, path) = match ring.split_once('\n') {
                            Some((name, path)) => (name, RelPath::new(path).ok()),
                            None => (ring.as_str(), None),
                        };
                        let entry = (!name.contains('/') && !name.is_empty())
                            .then(|| dir.join(name).ok())
                            .flatten();
                        let (Some(entry), Some(path)) = (entry, path) else {
                            warn("recall doorbell rung with a bad entry", &ring);
                            continue;
                        };
                        if sluice_env::lock(&shared.state).shutdown {
                            return;
                        }
                        match answer_for(shared, held, &entry, &path) {
                            // Answered already (by a listing).
                            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                            Err(e) => warn(&format!("recall entry {path} not answered yet"), &e),
                            Ok(()) => {}
                        }
                    }
                }
                Err(e) => warn("recall doorbell not taken", &e),
            }
        }
        if listed.is_none_or(|at| at.elapsed() >= list_every) {
            listed = Some(Instant::now());
            match shared.capacity.read_dir(&dir) {
                Ok(entries) => {
                    let ready = entries
                        .iter()
                        .filter(|entry| !entry.name.starts_with(ENTRY_WRITING_PREFIX));
                    for entry in ready.take(ENTRIES_PER_PASS) {
                        let Ok(path) = dir.join(&entry.name) else {
                            continue;
                        };
                        if sluice_env::lock(&shared.state).shutdown {
                            return;
                        }
                        if let Err(e) = answer(shared, held, &path) {
                            warn(&format!("recall entry {path} not answered yet"), &e);
                        }
                    }
                }
                // Made at open: removed by hand meanwhile, made again.
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    let _ = make_dirs(shared.capacity.as_ref(), &dir);
                }
                Err(e) => warn(&format!("recall directory {dir} unreadable"), &e),
            }
        }
        if swept.is_none_or(|at| at.elapsed() >= ANSWER_EVERY) {
            swept = Some(Instant::now());
            if let Err(e) = sweep(shared, SWEEP_PER_PASS, true) {
                warn("held marks not swept", &e);
            }
        }
        // Woken at once by the engine's stop (which joins this thread
        // before the flusher's, so a write-back under way can still find
        // room in the log).
        let state = sluice_env::wait_while_at_most(
            &shared.changed,
            sluice_env::lock(&shared.state),
            tick,
            |s| !s.shutdown,
        );
        if state.shutdown {
            return;
        }
    }
}

impl Engine {
    /// This node's name in held marks (`None` unless on-demand).
    pub fn node_name(&self) -> Option<&str> {
        self.shared.held.as_ref().map(|h| h.node.as_str())
    }

    /// On-demand, before an open of `path`: wait until no other node
    /// holds the file, recalling it from the one that does (ETIMEDOUT
    /// after `recall_wait`, naming that node). Nothing to do for a file
    /// this node holds, or under the other modes.
    pub fn recall(&self, path: &RelPath) -> io::Result<()> {
        recall(&self.shared, path, None)
    }

    /// [`Engine::recall`] for the open `file` (before a lock is taken).
    pub fn recall_open(&self, file: FileId) -> io::Result<()> {
        if self.shared.held.is_none() {
            return Ok(());
        }
        let path = {
            let state = sluice_env::lock(&self.shared.state);
            let open = state.files.get(&file).ok_or_else(|| unknown(file))?;
            if open.unlinked {
                return Ok(());
            }
            open.path.clone()
        };
        recall(&self.shared, &path, Some(file))
    }

    /// On-demand, sealing the regular file at `path` (`chmod a-w` or
    /// `sluice seal`, after UnifyFS's lamination): its write-back starts in
    /// the background and its mark goes when every byte is on the capacity
    /// tier; other nodes then read it without a recall. If this node holds
    /// it, through an entry in this node's own recall directory (the
    /// `sluice-recall` thread answers it within its next pass); if another
    /// node does, through a recall entry in that node's directory, not
    /// waited for. Nothing for a file no node holds (a mark of this node's
    /// with nothing behind it is removed). Refused (InvalidInput) for what
    /// is not a regular file, and (Unsupported) under the other modes.
    pub fn seal(&self, path: &RelPath) -> io::Result<Sealing> {
        let held = on_demand(&self.shared, "seal")?;
        regular_file(&self.shared, path)?;
        let capacity = self.shared.capacity.as_ref();
        if held_at(&self.shared, path).is_some() {
            write_entry(capacity, held, &held.node, path)
                .map_err(context(format!("seal {path}")))?;
            return Ok(Sealing::Started);
        }
        match read_mark(&self.shared, held, path)? {
            None => Ok(Sealing::NotHeld),
            Some(mark) if mark.node == held.node => {
                clear_unheld(&self.shared, held, path)?;
                Ok(Sealing::NotHeld)
            }
            Some(mark) => {
                write_entry(capacity, held, &mark.node, path)
                    .map_err(context(format!("seal {path}: ask node {}", mark.node)))?;
                Ok(Sealing::Asked { holder: mark.node })
            }
        }
    }

    /// On-demand, the [`HeldState`] of `path` (one stat and one
    /// `getxattr` on the capacity tier); `None` for what is not a regular
    /// file. Unsupported under the other modes.
    pub fn held_state(&self, path: &RelPath) -> io::Result<Option<HeldState>> {
        let held = on_demand(&self.shared, "user.sluice.state")?;
        let capacity = self.shared.capacity.as_ref();
        let st = capacity.stat(path)?;
        if st.kind != sluice_env::StatKind::File {
            return Ok(None);
        }
        Ok(Some(match held.store.read_stat(capacity, path, &st)? {
            Some(mark) => HeldState::Held { node: mark.node },
            None if st.mode & 0o222 == 0 => HeldState::Sealed,
            None => HeldState::Clean,
        }))
    }

    /// On-demand, how many files this node holds the mark of now.
    pub fn held_files(&self) -> usize {
        sluice_env::lock(&self.shared.state)
            .files
            .values()
            .filter(|open| open.held.is_some())
            .count()
    }

    /// On-demand, at a close or fsync of `file`: its held mark carries
    /// its size and mtime now.
    pub fn update_mark(&self, file: FileId) -> io::Result<()> {
        update(&self.shared, file)
    }

    /// The held mark on `path`, whoever set it (`None`: none), from where
    /// this mount keeps marks (the xattr under the other modes).
    pub fn mark_of(&self, path: &RelPath) -> io::Result<Option<Mark>> {
        let store = self.mark_store().unwrap_or(MarkStore::Xattr);
        store.read(self.shared.capacity.as_ref(), path)
    }

    /// On-demand, where this mount keeps held marks (`None` under the
    /// other modes).
    pub fn mark_store(&self) -> Option<MarkStore> {
        self.shared.held.as_ref().map(|h| h.store)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_read_back_as_written() {
        let mark = Mark {
            node: "rack1-n07".into(),
            size: 3 << 20,
            mtime: Some(UNIX_EPOCH + Duration::new(1_795_934_461, 123_456_789)),
        };
        let bytes = mark.encode();
        assert_eq!(
            String::from_utf8_lossy(&bytes),
            "v1 node=rack1-n07 size=3145728 mtime=1795934461.123456789"
        );
        assert_eq!(Mark::decode(&bytes), Some(mark.clone()));
        let unwritten = Mark {
            mtime: None,
            ..mark
        };
        assert_eq!(Mark::decode(&unwritten.encode()), Some(unwritten));
        // Later fields are skipped; a bad node, size or version is no mark.
        assert!(Mark::decode(b"v1 node=a size=1 later=x").is_some());
        for bad in [
            &b"v2 node=a size=1"[..],
            b"v1 node=a",
            b"v1 node=a/b size=1",
            b"v1 node=a size=-1",
            b"v1 node=a size=1 mtime=1.2000000000",
            b"",
            b"\xff",
        ] {
            assert_eq!(
                Mark::decode(bad),
                None,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn recall_entries_name_their_path() {
        let path = RelPath::new("dir/ckpt.0001").unwrap();
        let bytes = format!("{ENTRY_MAGIC}\n{path}\n");
        assert_eq!(parse_entry(bytes.as_bytes()), Some(path.clone()));
        assert_eq!(parse_entry(b"sluice-recall v2\ndir/x\n"), None);
        assert_eq!(
            parse_entry(format!("{ENTRY_MAGIC}\n../x\n").as_bytes()),
            None
        );
        assert_ne!(
            path_hash(&path),
            path_hash(&RelPath::new("dir/ckpt.0002").unwrap())
        );
    }
}
