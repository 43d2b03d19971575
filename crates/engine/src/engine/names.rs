//! Namespace operations on files the engine may hold: hard links, unlink
//! and rename. A name removed while its file lives on (still open, or
//! another link left) gets the file's buffered bytes written out first;
//! a renamed file with buffered bytes gets its new name logged before the
//! capacity rename (docs/crash-consistency.md).

use std::collections::HashSet;
use std::io;

use sluice_env::{wait_while, FileKind, RelPath};
use sluice_policy::FileId;

use crate::log::RecordHeader;

use super::append::{appends_in_flight, sync_log, Append};
use super::files::{add_name, busy, drop_name, file_of, has_other_names, same_file};
use super::holds::{Hold, Unlinking};
use super::{cache, context, Engine, Shared, State};

impl Engine {
    /// Give the file `existing` the second name `new` (a hard link) on the
    /// capacity tier; if the engine holds the file, `new` names it too, so
    /// its buffered bytes are seen through either name.
    pub fn link(&self, existing: &RelPath, new: &RelPath) -> io::Result<()> {
        let shared = &*self.shared;
        let mut state = sluice_env::lock(&shared.state);
        shared
            .capacity
            .hard_link(existing, new)
            .map_err(context(format!("link {existing} to {new}")))?;
        state.names_epoch += 1;
        let ino = match state.ids.contains_key(existing) {
            true => None,
            false => shared.capacity.stat(existing).ok().map(|st| st.identity()),
        };
        if let Some(id) = file_of(&state, existing, ino) {
            add_name(&mut state, id, existing);
            add_name(&mut state, id, new);
        }
        Ok(())
    }

    /// Remove a name. A file with no other name loses its buffered bytes,
    /// durably first; one still open lives on for its handles (see
    /// [`Engine::stat_open`]), one with another name (a hard link) lives
    /// on under it, its buffered bytes written to it first (see
    /// `drop_name`).
    pub fn unlink(&self, path: &RelPath) -> io::Result<()> {
        let shared = &*self.shared;
        let mut state = sluice_env::lock(&shared.state);
        let Some(id) = state.ids.get(path).copied() else {
            let unlinking = begin_unheld_unlink(shared, &mut state, path);
            drop(state);
            let removed = shared.capacity.remove_file(path);
            return end_unheld_unlink(shared, path, unlinking, removed);
        };
        drop(state);
        let survives = has_other_names(shared, path);
        let still = |state: &State| state.ids.get(path) == Some(&id);
        // The lock is held across the capacity unlink of a file the engine
        // holds, so no write to the file can slip in between.
        drop_name(shared, id, path, survives, still, |state| {
            let removed = shared.capacity.remove_file(path);
            state.names_epoch += 1;
            removed.map_err(context(format!("unlink {path}")))?;
            state.unsynced_names.removed(path);
            Ok(())
        })
    }

    /// Rename `from` to `to`, replacing a file at `to` (which lives on if
    /// it has another name, as for [`Engine::unlink`]). Two names of one
    /// file: nothing happens (POSIX).
    pub fn rename(&self, from: &RelPath, to: &RelPath) -> io::Result<()> {
        let shared = &*self.shared;
        let mut state = sluice_env::lock(&shared.state);
        if from != to && same_file(shared, from, to) {
            drop(state);
            // rename(2) between two names of one file does nothing; the
            // tier still says whether the names are valid.
            return shared
                .capacity
                .rename(from, to)
                .map_err(context(format!("rename {from} to {to}")));
        }
        if let Some(&id) = state.ids.get(from) {
            state = wait_while(&shared.changed, state, None, busy(id));
        }
        if from != to {
            if let Some(&old) = state.ids.get(to) {
                // The target's buffered bytes are dropped below, before the
                // capacity rename: first make sure that rename can happen
                // (a missing source, or a directory over a file, would fail
                // it after the bytes were gone).
                // `stat` sees links as themselves; a backend without it
                // (the crash-test one) answers `metadata`.
                let source_is_dir = match shared.capacity.stat(from) {
                    Ok(stat) => Ok(stat.kind == sluice_env::StatKind::Dir),
                    Err(e) if e.kind() == io::ErrorKind::Unsupported => shared
                        .capacity
                        .metadata(from)
                        .map(|m| m.kind == FileKind::Dir),
                    Err(e) => Err(e),
                }
                .map_err(context(format!("rename {from} to {to}")))?;
                if source_is_dir {
                    const ENOTDIR: i32 = 20;
                    return Err(context(format!(
                        "rename {from} to {to}: a directory over a file"
                    ))(io::Error::from_raw_os_error(
                        ENOTDIR,
                    )));
                }
                if Some(&old) != state.ids.get(from) {
                    drop(state);
                    let survives = has_other_names(shared, to);
                    let still = |state: &State| state.ids.get(to) == Some(&old);
                    drop_name(shared, old, to, survives, still, |_| Ok(()))?;
                    state = sluice_env::lock(&shared.state);
                }
            }
        }
        // The names that move: `from` itself, or every known name under a
        // renamed directory; and the files whose path records must name
        // the new path (the moved name is the one their records use).
        // Logging those records may wait (for log room, for appends in
        // flight), and an open may register a name under `from`
        // meanwhile: so the names are looked up again after every wait,
        // until a lookup finds no file whose record is still to be
        // written. From that lookup to the capacity rename the lock is
        // held, so every name that moves is in `moved`.
        let mut logged_for: HashSet<FileId> = HashSet::new();
        let moved = loop {
            let moved: Vec<(RelPath, RelPath, FileId)> = state
                .ids
                .within(from)
                .filter_map(|(path, &id)| path.rebase(from, to).map(|p| (path.clone(), p, id)))
                .collect();
            let mut logged = false;
            for (old_path, new_path, id) in &moved {
                let Some(open) = state.files.get(id) else {
                    continue;
                };
                if open.unlinked || open.path != *old_path || logged_for.contains(id) {
                    continue;
                }
                if state.buffer.has_logged(*id) {
                    // The new path must be durable before the capacity
                    // rename, or a crash could flush buffered bytes to the
                    // old name.
                    let header = RecordHeader::path(*id, new_path, 0)
                        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?
                        .with_identity(open.ino.map_or(0, |(_, ino)| ino));
                    let mut append = Append::required(header, new_path.as_str().as_bytes(), None);
                    drive!(shared, state, append)?;
                    logged_for.insert(*id);
                    logged = true;
                } else {
                    // Nothing buffered: the next record needs a description
                    // with the new name, not the old one a region may hold.
                    state.buffer.forget_descriptions(*id);
                }
            }
            if !logged {
                break moved;
            }
            state = wait_while(&shared.changed, state, None, appends_in_flight());
            sync_log(shared, &mut state)?;
        };
        let renamed = shared.capacity.rename(from, to);
        state.names_epoch += 1;
        renamed.map_err(context(format!("rename {from} to {to}")))?;
        for (old_path, _, _) in &moved {
            state.ids.remove(old_path);
        }
        for (old_path, new_path, id) in moved {
            state.ids.insert(new_path.clone(), id);
            if let Some(open) = state.files.get_mut(&id) {
                for name in open.names.iter_mut() {
                    if *name == old_path {
                        *name = new_path.clone();
                    }
                }
                if !open.unlinked && open.path == old_path {
                    open.path = new_path;
                }
            }
        }
        // The new entry is owed a sync, as a new file's is, and so is the
        // old one if it was in another directory: at the next fsync of the
        // file (or of one under a renamed directory), or at a clean stop.
        state.unsynced_names.renamed(from, to);
        Ok(())
    }
}

/// Unlink a name the engine does not hold (mdtest's remove phase: every
/// file closed and forgotten). The capacity tier's unlink runs without the
/// engine lock (issue 33: held across it, every lookup, open and close of
/// the mount waited for each unlink's journal work). Meanwhile
/// `State::unlinking` counts it: an open that looked the name up without
/// the lock and finds an unlink under way waits for it to end, then opens
/// again under the lock ([`Engine::open_file`]), so it never registers a
/// name being removed. Begun under the caller's hold of the lock that
/// found the name not held; the caller then lets the lock go, unlinks,
/// and ends it with [`end_unheld_unlink`].
fn begin_unheld_unlink(shared: &Shared, state: &mut State, path: &RelPath) -> Hold<Unlinking> {
    // Its last name goes: so do clean copies kept for it.
    if !state.parked.is_empty() {
        if let Ok(stat) = shared.capacity.stat(path) {
            if stat.nlink <= 1 {
                cache::forget_parked(state, stat.identity());
            }
        }
    }
    Hold::take(state, ())
}

/// The capacity tier's unlink begun by [`begin_unheld_unlink`] ended
/// (`removed`).
fn end_unheld_unlink(
    shared: &Shared,
    path: &RelPath,
    unlinking: Hold<Unlinking>,
    removed: io::Result<()>,
) -> io::Result<()> {
    let mut state = sluice_env::lock(&shared.state);
    let left = unlinking.give_back(&mut state);
    state.names_epoch += 1;
    if left == Some(0) && state.awaiting_unlinks {
        state.awaiting_unlinks = false;
        shared.changed.notify_all();
    }
    removed.map_err(context(format!("unlink {path}")))?;
    state.unsynced_names.removed(path);
    Ok(())
}
