//! The table of open files: registering, forgetting, waiting for the
//! flusher, dropping a removed name's buffered bytes durably.
//!
//! A file is known by its capacity inode number, not its path: every name
//! of it (hard links) maps to one engine file, so buffered bytes are seen
//! through every name.
//!
//! INVARIANTS: `ids[p] = id` if and only if `p` is in `files[id].names`;
//! `by_ino[i] = id` only if `files[id].ino = Some(i)`; a file that is not
//! name-less (`unlinked`) has its `path` among its `names`.

use std::io;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use sluice_env::{wait_while, BackendFile, RelPath, Stat};
use sluice_policy::FileId;

use crate::log::RecordHeader;

use super::append::{appends_in_flight, sync_log, Append};
use super::holds::{Hold, Quiesce};
use super::read::{locate, Located};
use super::writeback::{write_stretches, StretchError};
use super::{cache, context, ChangeStamp, KernelStamp, OpenFile, Shared, State};

pub(super) fn unknown(file: FileId) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("no open file with id {}", file.0),
    )
}

pub(super) fn register(
    state: &mut State,
    path: RelPath,
    handle: Arc<dyn BackendFile>,
    stat: Option<&Stat>,
    created: bool,
) -> io::Result<FileId> {
    let ino = stat.map(Stat::identity);
    // The file's clean copies, kept since it was last forgotten, if its
    // capacity file did not change meanwhile (cache.rs).
    let id = match stat.and_then(|stat| cache::unpark(state, stat)) {
        Some(id) => id,
        None => {
            let id = FileId(state.next_file_id);
            state.next_file_id += 1;
            id
        }
    };
    // The stat has the length already; a backend without one is asked.
    let size = match stat {
        Some(stat) => stat.len,
        None => handle.len()?,
    };
    if created {
        state.unsynced_names.created(&path);
    }
    attach(state, id, path, handle, size, ino);
    if let Some(open) = state.files.get_mut(&id) {
        open.last_stamp = stat.map(ChangeStamp::of);
    }
    Ok(id)
}

/// The capacity tier's attributes of the file `handle` opens (`fstat`,
/// else a stat of `path`): its identity across its names is
/// [`Stat::identity`]. `None` when the backend keeps none (the file is
/// then known by `path` only).
pub(super) fn capacity_stat(
    shared: &Shared,
    handle: &dyn BackendFile,
    path: &RelPath,
) -> Option<Stat> {
    handle.stat().or_else(|_| shared.capacity.stat(path)).ok()
}

/// Make `id` an open file at `path`, with capacity inode number `ino`.
pub(super) fn attach(
    state: &mut State,
    id: FileId,
    path: RelPath,
    handle: Arc<dyn BackendFile>,
    size: u64,
    ino: Option<(u64, u64)>,
) {
    state.ids.insert(path.clone(), id);
    if let Some(ino) = ino {
        state.by_ino.insert(ino, id);
    }
    state.files.insert(
        id,
        OpenFile {
            names: vec![path.clone()],
            path,
            ino,
            handle,
            unlinked: false,
            written: None,
            io: Arc::new(RwLock::new(())),
            sync_lock: Arc::new(Mutex::new(())),
            size,
            busy: 0,
            syncing: 0,
            opens: 0,
            quiescing: 0,
            capacity_unsynced: false,
            kernel_writes: false,
            own_writers: 0,
            kernel_stamp: KernelStamp::Unknown,
            last_stamp: None,
            held: None,
        },
    );
}

/// The open file a path names: by the name, or else by the capacity
/// inode number `ino` of what the path names now (another name of it).
pub(super) fn file_of(state: &State, path: &RelPath, ino: Option<(u64, u64)>) -> Option<FileId> {
    state.ids.get(path).copied().or_else(|| {
        let id = *state.by_ino.get(&ino?)?;
        state.files.contains_key(&id).then_some(id)
    })
}

/// `path` is one more name of the open file `id`. A name-less file (its
/// last known name was removed while it was open) takes it as the name
/// its path records use.
pub(super) fn add_name(state: &mut State, id: FileId, path: &RelPath) {
    if let Some(old) = state.ids.insert(path.clone(), id) {
        if old != id {
            // A stale mapping (the name now names this file): drop it.
            if let Some(open) = state.files.get_mut(&old) {
                open.names.retain(|n| n != path);
            }
        }
    }
    if let Some(open) = state.files.get_mut(&id) {
        if !open.names.contains(path) {
            open.names.push(path.clone());
        }
        if open.unlinked {
            open.unlinked = false;
            open.path = path.clone();
            // Its earlier descriptions name a removed name.
            state.buffer.forget_descriptions(id);
        }
    }
}

/// Forget the name `path` of `id` (removed or moved on the capacity
/// tier). If it was the name path records use, another known name takes
/// over, or the file becomes name-less ([`OpenFile::unlinked`]). Callers
/// have dropped the file's buffered bytes durably first when the name
/// was the one the log uses (see [`drop_name`]).
fn remove_name(state: &mut State, id: FileId, path: &RelPath) {
    if state.ids.get(path) == Some(&id) {
        state.ids.remove(path);
    }
    if let Some(open) = state.files.get_mut(&id) {
        open.names.retain(|n| n != path);
        if !open.unlinked && open.path == *path {
            match open.names.first() {
                Some(other) => open.path = other.clone(),
                None => open.unlinked = true,
            }
            // Descriptions in the log name the removed name.
            state.buffer.forget_descriptions(id);
        }
    }
}

/// A name this node knows for an open file that the capacity tier now
/// gives to another file, or to none: another node renamed a file over
/// it, removed it (and perhaps made a new file there), or moved the file
/// away. The name is forgotten as this node's own unlink would forget it,
/// except that the file's buffered bytes are never dropped: they are
/// written to its capacity file (its inode, which may live on under
/// another name) first (`drop_name` with `survives`). So an open of the
/// name reads what is there now, never this node's bytes of the file it
/// named before, and nothing of that file is written at the name again.
/// One stat of `path`, only when the name is known and its file's
/// identity too; a change of names on this node meanwhile leaves it
/// (this node's rename or unlink keeps the maps itself).
pub(super) fn forget_stale_name(shared: &Shared, path: &RelPath) -> io::Result<()> {
    let (id, ino, epoch) = {
        let state = sluice_env::lock(&shared.state);
        let Some(&id) = state.ids.get(path) else {
            return Ok(());
        };
        let Some(ino) = state.files.get(&id).and_then(|o| o.ino) else {
            return Ok(());
        };
        (id, ino, state.names_epoch)
    };
    let now = match shared.capacity.stat(path) {
        Ok(st) => Some(st.identity()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        // Not this check's to report: the open that follows meets it.
        Err(_) => return Ok(()),
    };
    if now == Some(ino) {
        return Ok(());
    }
    // No change of names by this engine since the look above, none under
    // way, and the name still the file's: another node's doing.
    let still = |state: &State| {
        let still =
            state.names_epoch == epoch && state.unlinking == 0 && state.ids.get(path) == Some(&id);
        if still {
            tracing::debug!(path = %path, "a name another node gave to another file (or removed) is forgotten");
        }
        still
    };
    drop_name(shared, id, path, true, still, |_| Ok(())).map_err(context(format!(
        "{path}: another node replaced or removed it: write this node's bytes of the file it named back"
    )))
}

/// Remove `id` from the maps: every name, its inode number.
fn remove_file_entry(state: &mut State, id: FileId) -> Option<OpenFile> {
    let open = state.files.remove(&id)?;
    for name in &open.names {
        if state.ids.get(name) == Some(&id) {
            state.ids.remove(name);
        }
    }
    if let Some(ino) = open.ino {
        if state.by_ino.get(&ino) == Some(&id) {
            state.by_ino.remove(&ino);
        }
    }
    Some(open)
}

pub(super) fn opened(state: &mut State, id: FileId) {
    if let Some(open) = state.files.get_mut(&id) {
        open.opens += 1;
    }
}

/// Drop `id` from the maps if no open is outstanding, the flusher is not
/// writing it and nothing of it is buffered. Returns its capacity-tier
/// handle then, for the caller to drop once it has let the engine lock go:
/// the last drop closes the descriptor, a system call (a file system's
/// release work on the file) that every lookup, open and release of the
/// mount would otherwise wait behind (issue 33).
#[must_use = "drop the handle after the engine lock"]
pub(super) fn forget_if_unused(state: &mut State, id: FileId) -> Option<Arc<dyn BackendFile>> {
    // Not while one of this node's writers of its capacity file is still
    // at work (cache.rs, `begin_own_write`): a flush restores the file's
    // mtime after its writes, and a file parked before that kept a stamp
    // the capacity file no longer matched, so its clean copies were
    // dropped at the next open (IO500's mixed read-back, issue 33). The
    // last writer's caller forgets it instead.
    let unused = state
        .files
        .get(&id)
        .is_some_and(|o| o.opens == 0 && o.busy == 0 && o.own_writers == 0 && o.held.is_none())
        && !state.buffer.has_logged(id);
    if !unused {
        return None;
    }
    let open = remove_file_entry(state, id)?;
    cache::park(state, id, open.ino.filter(|_| !open.unlinked));
    // The id may come back (unparked by its identity) under another name:
    // a rename while it was not held moves no path record. Its next
    // record then names it afresh, or recovery would replay it to the old
    // name, which may hold another file by then (the seeded harness, seed
    // 75: the bytes quarantined as "replaced").
    state.buffer.forget_descriptions(id);
    Some(open.handle)
}

/// The condition to wait on while flush writes of `file` run outside the
/// lock (`busy`): `wait_while(&shared.changed, state, None, busy(file))`.
pub(super) fn busy(file: FileId) -> impl FnMut(&mut State) -> bool {
    move |state| state.files.get(&file).is_some_and(|f| f.busy > 0)
}

/// The name `name` of file `id` is about to be removed from the capacity
/// tier (unlink, or a rename over it). `survives`: the file has other
/// names there (its link count is above 1), so it lives on.
///
/// A file that lives on — still open, or reachable through another name —
/// first gets its buffered bytes written to its capacity file (synced),
/// since the log's path records may name `name`; then, as for any removed
/// file, its buffered bytes are dropped durably (an unlink record, synced)
/// so recovery never flushes them to `name`. Then only `name` is
/// forgotten: the file keeps its other names (one of them becomes the name
/// its path records use) or, if none is known, becomes name-less while it
/// is open ([`OpenFile::unlinked`]). A file that does not live on is
/// forgotten at once, unless an open joined it while the unlink record
/// was waited for: then it lives on after all.
///
/// It starts once no flush write of the file runs (`busy`), if `still`
/// holds then (the caller's reason to drop the name, looked at again under
/// this hold of the lock); `then` runs under the hold that ends it (the
/// capacity unlink, so no write to the file slips in between), whether or
/// not the name was dropped, and not if dropping it failed.
pub(super) fn drop_name<R>(
    shared: &Shared,
    id: FileId,
    name: &RelPath,
    survives: bool,
    still: impl FnOnce(&State) -> bool,
    then: impl FnOnce(&mut State) -> io::Result<R>,
) -> io::Result<R> {
    let mut state = wait_while(
        &shared.changed,
        sluice_env::lock(&shared.state),
        None,
        busy(id),
    );
    if !still(&state) {
        return then(&mut state);
    }
    let open_now = |state: &State| state.files.get(&id).is_some_and(|o| o.opens > 0);
    let mut lives_on = open_now(&state) || survives;
    loop {
        if lives_on {
            // Its handles and other names keep reading what was written: the
            // buffered bytes go to its capacity file (which outlives the name)
            // first. Every record in flight lands first, not only those
            // older than now: the flush goes on under this hold of the
            // lock, and no new one starts meanwhile (`quiescing`).
            let quiesce = Hold::<Quiesce>::take(&mut state, id);
            state = wait_while(
                &shared.changed,
                state,
                APPENDED_POLL,
                appending_before(id, u64::MAX),
            );
            let _ = quiesce.give_back(&mut state);
            shared.changed.notify_all();
            flush_file(shared, &state, id)?;
        }
        // A record of the file still being written needs the unlink record
        // too, or recovery would bring the file back with it.
        if !state.buffer.has_logged(id) {
            break;
        }
        let mut append = Append::required(RecordHeader::unlink(id, 0), &[], None);
        let result = drive!(shared, state, append);
        state = wait_while(&shared.changed, state, None, appends_in_flight());
        result.and_then(|_| sync_log(shared, &mut state))?;
        // The waits let the lock go: an open of the name may have joined
        // the file meanwhile. Then it lives on after all, and reads every
        // byte written before the unlink: its buffered bytes go to the
        // capacity file before they are dropped (and a record it appended
        // after this unlink record gets one of its own).
        if !lives_on && open_now(&state) {
            lives_on = true;
            continue;
        }
        state.buffer.remove_file(id);
        // Recovery drops the id's path at the unlink record: its next
        // record anywhere needs a new one.
        state.buffer.forget_descriptions(id);
        break;
    }
    if lives_on {
        remove_name(&mut state, id, name);
        let _handle = forget_if_unused(&mut state, id);
    } else {
        remove_file_entry(&mut state, id);
        cache::forget_file(&mut state, id);
    }
    then(&mut state)
}

/// Whether the file `path` names on the capacity tier has another name
/// (link count above 1), so removing `path` leaves it alive. False when the
/// backend keeps no link counts.
pub(super) fn has_other_names(shared: &Shared, path: &RelPath) -> bool {
    shared
        .capacity
        .stat(path)
        .is_ok_and(|stat| stat.kind == sluice_env::StatKind::File && stat.nlink > 1)
}

/// Write every buffered byte of `id` to its capacity file and sync it,
/// under the engine lock (for the rare unlink or rename over a file still
/// open). The caller waits for the file's records in flight first, so
/// none is indexed after. The bytes stay indexed (the caller drops them
/// durably).
fn flush_file(shared: &Shared, state: &State, id: FileId) -> io::Result<()> {
    let Some(open) = state.files.get(&id) else {
        return Ok(());
    };
    let (handle, path) = (Arc::clone(&open.handle), open.path.clone());
    let pieces: Vec<(u64, u64, Located)> = state
        .buffer
        .buffered_pieces(id, 0, u64::MAX, None)
        .into_iter()
        .map(|(file_offset, len, location)| (file_offset, len, locate(state, location)))
        .collect();
    if pieces.is_empty() {
        return Ok(());
    }
    let (_, written) = write_stretches(&shared.traffic, handle.as_ref(), &pieces);
    written
        .map_err(|(StretchError::Copy(e) | StretchError::Write(e))| e)
        .and_then(|()| handle.sync_data())
        .map_err(context(format!(
            "capacity tier {}: flush {path} before removing its name",
            shared.capacity.describe()
        )))
}

/// The condition to wait on while a data record of `id` older than
/// sequence number `before` is being written outside the lock, so none of
/// them is indexed after the caller's lookup once it is false. Newer ones
/// may be (writers of the file go on). Polled (`APPENDED_POLL`): the
/// append that lands wakes waiters only when it was its region's oldest.
pub(super) fn appending_before(id: FileId, before: u64) -> impl FnMut(&mut State) -> bool {
    move |state| {
        state
            .buffer
            .first_in_flight(id)
            .is_some_and(|seq| seq < before)
    }
}

/// How often a wait on [`appending_before`] looks again.
pub(super) const APPENDED_POLL: Option<Duration> = Some(Duration::from_millis(10));

/// `file`'s I/O lock ([`OpenFile::io`]), looked up under the engine lock
/// and returned with it released: take it before the engine lock.
pub(super) fn file_io(shared: &Shared, file: FileId) -> io::Result<Arc<RwLock<()>>> {
    sluice_env::lock(&shared.state)
        .files
        .get(&file)
        .map(|open| Arc::clone(&open.io))
        .ok_or_else(|| unknown(file))
}

/// `file`'s sync lock ([`OpenFile::sync_lock`]).
pub(super) fn file_sync_lock(shared: &Shared, file: FileId) -> io::Result<Arc<Mutex<()>>> {
    sluice_env::lock(&shared.state)
        .files
        .get(&file)
        .map(|open| Arc::clone(&open.sync_lock))
        .ok_or_else(|| unknown(file))
}

/// Whether nothing of the open file `id` is buffered, being appended,
/// being written to its capacity file or being synced: a close has
/// nothing to write back, passthrough may serve it, a held mark may go.
pub(super) fn at_rest(state: &State, id: FileId, open: &OpenFile) -> bool {
    open.busy == 0 && open.syncing == 0 && !state.buffer.has_logged(id)
}

/// A file's I/O lock ([`OpenFile::io`]) held by one writer alone.
pub(super) fn hold_alone(io: &RwLock<()>) -> std::sync::RwLockWriteGuard<'_, ()> {
    io.write().unwrap_or_else(|e| e.into_inner())
}

/// Whether `a` and `b` name one regular file on the capacity tier (hard
/// links: the same inode number). False when the backend keeps none.
pub(super) fn same_file(shared: &Shared, a: &RelPath, b: &RelPath) -> bool {
    let stat = |p: &RelPath| {
        shared
            .capacity
            .stat(p)
            .ok()
            .filter(|st| st.kind == sluice_env::StatKind::File)
    };
    match (stat(a), stat(b)) {
        (Some(x), Some(y)) => x.identity() == y.identity(),
        _ => false,
    }
}
