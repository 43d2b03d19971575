//! A held file's size and attributes when other nodes share its capacity
//! file (docs/fuse.md, "Many nodes"): the logical size is the capacity
//! file's length now, or the end of this node's last buffered byte if
//! further ([`logical_size`]), re-read whenever it is asked for.

use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use sluice_env::{BackendFile, RelPath, Stat};
use sluice_policy::FileId;

use super::files::{file_of, unknown};
use super::{cache, context, held, ChangeStamp, Engine, Shared, State};

/// The logical size of an open file whose capacity file is now
/// `capacity_len` bytes long (docs/fuse.md, "Many nodes"): the capacity
/// file's length, or the end of the file's last buffered byte if that is
/// further. The capacity length is the truth for every byte this node
/// does not buffer, so a file another node extended grows and one it
/// truncated shrinks; bytes this node still buffers past a shorter
/// capacity file keep the file that long (they reach the capacity tier at
/// the next flush, as a write of this node made after the truncate would).
/// While a write of the file is in flight, the size never goes below
/// `known` (that write's end is added once it is indexed).
fn logical_size(state: &State, id: FileId, known: u64, capacity_len: u64) -> u64 {
    let buffered_end = state.buffer.buffered_end(id);
    let size = capacity_len.max(buffered_end);
    if state.buffer.in_flight(id) {
        size.max(known)
    } else {
        size
    }
}

/// Set `file`'s logical size from its capacity file's length now
/// ([`logical_size`]); returns it.
fn update_size(state: &mut State, file: FileId, capacity_len: u64) -> u64 {
    let known = state.files.get(&file).map_or(0, |o| o.size);
    let size = logical_size(state, file, known, capacity_len);
    if let Some(open) = state.files.get_mut(&file) {
        open.size = size;
    }
    size
}

/// [`Engine::refresh_size`] (also after a recall made by a write: held.rs).
pub(super) fn refresh_size(shared: &Shared, file: FileId) -> io::Result<u64> {
    // One fstat gives the size and the stamp the clean copies are
    // compared with (the length alone on a backend without one).
    let read = |handle: &dyn BackendFile, path: &RelPath| {
        match handle.stat() {
            Ok(stat) => Ok((stat.len, Some(ChangeStamp::of(&stat)))),
            Err(_) => handle.len().map(|len| (len, None)),
        }
        .map_err(context(format!(
            "capacity tier {}: size of {path}",
            shared.capacity.describe()
        )))
    };
    read_steady(shared, file, read, |state, (capacity_len, stamp)| {
        if let Some(open) = state.files.get_mut(&file) {
            open.last_stamp = stamp;
        }
        // Clean copies of a capacity file changed behind them go.
        cache::check(state, file, stamp);
        update_size(state, file, capacity_len)
    })
}

/// `read` of `file`'s capacity handle (with its name, for messages), made
/// outside the engine lock, and made again while buffered bytes left the
/// index meanwhile (`Shared::left_log`: a length read before that may miss
/// bytes the index no longer shows). `then` gets what it read under the
/// hold of the lock taken after the last read.
fn read_steady<T, R>(
    shared: &Shared,
    file: FileId,
    read: impl Fn(&dyn BackendFile, &RelPath) -> io::Result<T>,
    then: impl FnOnce(&mut State, T) -> R,
) -> io::Result<R> {
    let mut state = sluice_env::lock(&shared.state);
    loop {
        let open = state.files.get(&file).ok_or_else(|| unknown(file))?;
        let (handle, path) = (Arc::clone(&open.handle), open.path.clone());
        let epoch = shared.left_log.load(Ordering::SeqCst);
        drop(state);
        let value = read(handle.as_ref(), &path)?;
        state = sluice_env::lock(&shared.state);
        if shared.left_log.load(Ordering::SeqCst) == epoch {
            return Ok(then(&mut state, value));
        }
    }
}

impl Engine {
    /// Re-read `file`'s size from its capacity file (`fstat` through the
    /// engine's handle) and set its logical size by [`logical_size`]: what
    /// another node wrote or truncated meanwhile is seen. Returns the size.
    pub fn refresh_size(&self, file: FileId) -> io::Result<u64> {
        refresh_size(&self.shared, file)
    }

    /// Attributes of an open file through its handle (`fstat`), with its
    /// logical size (buffered bytes included): they outlive its name, so a
    /// file unlinked or renamed over while open still has them.
    pub fn stat_open(&self, file: FileId) -> io::Result<Stat> {
        let read = |handle: &dyn BackendFile, _: &RelPath| handle.stat();
        read_steady(&self.shared, file, read, |state, mut stat| {
            cache::check(state, file, Some(ChangeStamp::of(&stat)));
            update_size(state, file, stat.len);
            if let Some(open) = state.files.get(&file) {
                open.overlay(&mut stat);
            }
            stat
        })
    }

    /// Correct the capacity tier's attributes `stat` of `path` (a stat
    /// just made) with what the engine knows better while it holds the
    /// file open: the logical size (buffered bytes included) and the time
    /// of the last write. The file is found by `path` or by `stat`'s inode
    /// number (another name of a file the engine holds). Unchanged when the
    /// engine does not hold it, or when `path` now names another file than
    /// the one the engine holds under that name (replaced behind its back).
    ///
    /// The stat's length is fresh: the file's logical size is set from it
    /// ([`logical_size`]), so a getattr sees what another node wrote or
    /// truncated. `epoch` is [`Engine::log_epoch`] from before the stat was
    /// made: if buffered bytes left the index since, the stat may not show
    /// them yet and is made again.
    ///
    /// On-demand, a file whose held mark names another node shows the
    /// size and mtime the mark carries instead, without a recall (held.rs).
    pub fn overlay(&self, path: &RelPath, stat: &mut Stat, epoch: u64) {
        if stat.kind != sluice_env::StatKind::File {
            return;
        }
        if !self.overlay_held_here(path, stat, epoch) {
            held::overlay_mark(&self.shared, path, stat);
        }
    }

    /// [`Engine::overlay`] from what this engine holds; whether this node
    /// holds the file's held mark (on-demand).
    fn overlay_held_here(&self, path: &RelPath, stat: &mut Stat, epoch: u64) -> bool {
        let mut state = sluice_env::lock(&self.shared.state);
        let mut epoch = epoch;
        while self.shared.left_log.load(Ordering::SeqCst) != epoch {
            epoch = self.shared.left_log.load(Ordering::SeqCst);
            drop(state);
            match self.shared.capacity.stat(path) {
                Ok(fresh) => *stat = fresh,
                // Gone meanwhile: the caller's stat stands.
                Err(_) => return true,
            }
            state = sluice_env::lock(&self.shared.state);
        }
        let Some(id) = file_of(&state, path, Some(stat.identity())) else {
            return false;
        };
        let Some(open) = state.files.get(&id) else {
            return false;
        };
        if open.ino.is_some_and(|ino| ino != stat.identity()) {
            return false;
        }
        // A getattr (after the attribute timeout) sees another node's
        // change: clean copies of what it changed go.
        cache::check(&mut state, id, Some(ChangeStamp::of(stat)));
        update_size(&mut state, id, stat.len);
        match state.files.get(&id) {
            Some(open) => {
                open.overlay(stat);
                open.held.is_some()
            }
            None => false,
        }
    }

    /// The count [`Engine::overlay`] compares: take it before a stat.
    pub fn log_epoch(&self) -> u64 {
        self.shared.left_log.load(Ordering::SeqCst)
    }
}
