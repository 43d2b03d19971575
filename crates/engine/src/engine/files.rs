//! The table of open files: registering, forgetting, waiting for the
//! flusher, dropping a removed file's buffered bytes durably.

use super::*;

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
    size: u64,
    created: bool,
) -> FileId {
    let id = FileId(state.next_file_id);
    state.next_file_id += 1;
    attach(state, id, path, handle, size, created);
    id
}

/// Make `id` an open file at `path`.
pub(super) fn attach(
    state: &mut State,
    id: FileId,
    path: RelPath,
    handle: Arc<dyn BackendFile>,
    size: u64,
    created_unsynced: bool,
) {
    state.ids.insert(path.clone(), id);
    state.files.insert(
        id,
        OpenFile {
            path,
            handle,
            unlinked: false,
            written: None,
            io: Arc::new(Mutex::new(())),
            size,
            busy: false,
            created_unsynced,
            opens: 0,
            appending: 0,
            truncations: Vec::new(),
        },
    );
}

pub(super) fn opened(state: &mut State, id: FileId) {
    if let Some(open) = state.files.get_mut(&id) {
        open.opens += 1;
    }
}

/// Drop `id` from the maps if no open is outstanding, the flusher is not
/// writing it and nothing of it is buffered.
pub(super) fn forget_if_unused(state: &mut State, id: FileId) {
    let unused = state
        .files
        .get(&id)
        .is_some_and(|o| o.opens == 0 && !o.busy && o.appending == 0)
        && !state.buffer.has_buffered(id);
    if unused {
        if let Some(open) = state.files.remove(&id) {
            if open.unlinked {
                return;
            }
            state.ids.remove(&open.path);
            if open.created_unsynced {
                // A later fsync of the file (opened again) still owes
                // its directory entry a sync.
                state.unsynced_creates.insert(open.path);
            }
        }
    }
}

pub(super) fn wait_not_busy<'a>(
    shared: &'a Shared,
    mut state: MutexGuard<'a, State>,
    file: FileId,
) -> io::Result<MutexGuard<'a, State>> {
    while state.files.get(&file).is_some_and(|f| f.busy) {
        state = shared
            .changed
            .wait(state)
            .unwrap_or_else(|e| e.into_inner());
    }
    Ok(state)
}

/// Forget `id`: an unlink record (durable) if it has buffered bytes, then
/// the index and the maps.
pub(super) fn drop_file<'a>(
    shared: &'a Shared,
    mut state: MutexGuard<'a, State>,
    id: FileId,
) -> (MutexGuard<'a, State>, io::Result<()>) {
    let still_open = state.files.get(&id).is_some_and(|o| o.opens > 0);
    if still_open {
        // Its handles keep reading what was written: the buffered bytes
        // go to its capacity file (which outlives the name) first.
        let (s, flushed) = flush_file(shared, state, id);
        state = s;
        if let Err(e) = flushed {
            return (state, Err(e));
        }
    }
    // A record of the file still being written needs the unlink record
    // too, or recovery would bring the file back with it.
    let appending = state.files.get(&id).is_some_and(|o| o.appending > 0);
    if state.buffer.has_buffered(id) || appending {
        let (s, result) = append_required(shared, state, RecordHeader::unlink(id, 0), &[], None);
        state = wait_appends(shared, s);
        if let Err(e) = result.and_then(|_| sync_log(shared, &mut state)) {
            return (state, Err(e));
        }
        state.buffer.remove_file(id);
    }
    if still_open {
        if let Some(open) = state.files.get_mut(&id) {
            open.unlinked = true;
            let path = open.path.clone();
            if state.ids.get(&path) == Some(&id) {
                state.ids.remove(&path);
            }
        }
    } else if let Some(open) = state.files.remove(&id) {
        state.ids.remove(&open.path);
    }
    (state, Ok(()))
}

/// Write every buffered byte of `id` to its capacity file and sync it,
/// under the engine lock (for the rare unlink or rename over a file still
/// open). Records of the file still being written are waited for first,
/// so none is indexed after. The bytes stay indexed (the caller drops
/// them durably).
fn flush_file<'a>(
    shared: &'a Shared,
    mut state: MutexGuard<'a, State>,
    id: FileId,
) -> (MutexGuard<'a, State>, io::Result<()>) {
    while state.files.get(&id).is_some_and(|o| o.appending > 0) {
        state = shared
            .changed
            .wait_timeout(state, Duration::from_millis(10))
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
    let Some(open) = state.files.get(&id) else {
        return (state, Ok(()));
    };
    let (handle, path) = (Arc::clone(&open.handle), open.path.clone());
    let pieces: Vec<(u64, u64, Pinned)> = state
        .buffer
        .lookup(id, 0, u64::MAX)
        .filter_map(|piece| match piece {
            Piece::Buffered {
                file_offset,
                len,
                location,
                ..
            } => Some((file_offset, len, location)),
            Piece::Hole { .. } => None,
        })
        .map(|(file_offset, len, location)| (file_offset, len, locate(&state, location)))
        .collect();
    if pieces.is_empty() {
        return (state, Ok(()));
    }
    let result = pieces
        .iter()
        .try_for_each(|(file_offset, len, pinned)| {
            let mut buf = vec![0u8; *len as usize];
            pinned.copy_to(&mut buf)?;
            handle.write_at(&buf, *file_offset)
        })
        .and_then(|()| handle.sync_data())
        .map_err(context(format!(
            "capacity tier {}: flush {path} before removing its name",
            shared.capacity.describe()
        )));
    (state, result)
}

/// `file`'s I/O lock ([`OpenFile::io`]), looked up under the engine lock
/// and returned with it released: take it before the engine lock.
pub(super) fn file_io(shared: &Shared, file: FileId) -> io::Result<Arc<Mutex<()>>> {
    lock(shared)
        .files
        .get(&file)
        .map(|open| Arc::clone(&open.io))
        .ok_or_else(|| unknown(file))
}

/// Hold a file's I/O lock (a panic while holding it leaves nothing half
/// done that the lock protects, so poisoning is ignored).
pub(super) fn hold(io: &Mutex<()>) -> MutexGuard<'_, ()> {
    io.lock().unwrap_or_else(|e| e.into_inner())
}
