//! `fallocate(2)` of an open file (issue 37): plain allocation (with or
//! without `KEEP_SIZE`), hole punching, zeroing, and the two shifts,
//! collapse and insert, each carried out by the capacity file itself
//! ([`BackendFile::allocate`]); a mode the capacity tier refuses is
//! refused with its errno.
//!
//! The log is the difficulty: buffered bytes shadow the capacity file,
//! so a hole punched or a range zeroed on the capacity file alone would
//! still read as the buffered bytes, and the next flush (or a recovery)
//! would write them over the zeros. A shift moves bytes to other offsets,
//! while the index and the log records keep them at the old ones. So,
//! before a mode that changes bytes reaches the capacity file, the
//! file's buffered bytes are written back (the per-file sync of
//! close-to-open, [`Engine::sync_file`]): written to the capacity file,
//! synced, and dropped from the index behind a synced clean record, which
//! recovery honours. When the fast tier refuses that clean record (full,
//! or failing: degrade.rs), the bytes stay indexed; the fallocate then
//! waits, as a write that falls back to the capacity tier does, until
//! every region holding them has been flushed and retired. Only then, with
//! none of the file's bytes left in the affected range of the index and
//! no flush write of the file in flight, is the capacity file changed.
//!
//! INVARIANTS (docs/crash-consistency.md, "fallocate"):
//! - a punch or zero never reaches the capacity file while a buffered
//!   byte of its range is indexed, nor a shift while any byte of the file
//!   is: what a flush or a recovery could write back was written back
//!   first, and its clean record is durable, or every region holding a
//!   copy has been flushed and reset;
//! - the file's I/O lock is held alone throughout, so no write of the file is
//!   placed between the write-back and the capacity call;
//! - plain allocation changes no byte: it needs no write-back, and only
//!   the logical size follows it.
//!
//! *Chosen*: a write-back rather than a new record kind ("the range is
//! zero from sequence N on", replayed by recovery). A punch or zero over
//! buffered bytes costs the write-back of the file's buffered bytes; one
//! over capacity bytes only costs nothing more than the capacity call.
//! A shift could not be a record anyway: every buffered extent after the
//! offset would move.

use std::io;
use std::sync::Arc;

use sluice_env::{wait_while, Allocate};
use sluice_policy::FileId;

use super::files::{busy, file_io, hold_alone, unknown};
use super::{cache, context, Engine, Shared, State};

impl Engine {
    /// `fallocate(2)` of `[offset, offset + len)` of the open `file` in
    /// `mode` (module docs). The logical size follows: plain allocation
    /// and zeroing past the end without `KEEP_SIZE` make the file that
    /// long, a collapse makes it `len` shorter, an insert `len` longer.
    pub fn fallocate(&self, file: FileId, mode: Allocate, offset: u64, len: u64) -> io::Result<()> {
        let shared = &*self.shared;
        // Alone, as a truncate: no write of the file runs meanwhile.
        let io = file_io(shared, file)?;
        let _io = hold_alone(&io);
        // Re-read: the kernel writes a file opened by passthrough, and
        // other nodes may have changed it.
        let size = self.refresh_size(file)?;
        let path = {
            let state = sluice_env::lock(&shared.state);
            state
                .files
                .get(&file)
                .ok_or_else(|| unknown(file))?
                .path
                .clone()
        };
        let what = format!("fallocate {path}");
        // The checks the kernel makes (an empty range, a collapse to the
        // end, an insert past it), against the size buffered bytes make:
        // before anything is written back for a request that must fail.
        mode.new_len(size, offset, len)
            .map_err(|e| sluice_env::with_context(io::Error::from(e), &what))?;
        if needs_write_back(shared, file, mode, offset, len)? {
            // When the fast tier refuses the write-back's clean record
            // (full, or failing: degrade.rs), the sync waits until every
            // region holding the bytes was flushed and reset, or fails
            // (sync.rs, `clean`): no later flush or recovery writes them
            // over the range again.
            self.sync_file(file, false).map_err(context(&what))?;
        }
        // A flush write of the file looked up before the write-back must
        // land before the capacity file changes, or it would land on the
        // hole (the same wait as a truncate's).
        let state = wait_while(
            &shared.changed,
            sluice_env::lock(&shared.state),
            None,
            busy(file),
        );
        if let Some(byte) = first_in_the_way(&state, file, mode, offset, len) {
            // Cannot happen while the file's I/O lock is held alone (no
            // write of it is placed meanwhile); refused rather than risk a
            // punch under bytes that come back.
            return Err(io::Error::other(format!(
                "{what}: buffered bytes at offset {byte} could not be written back first \
                 (fast tier {}); nothing was changed",
                shared.fast.describe()
            )));
        }
        let open = state.files.get(&file).ok_or_else(|| unknown(file))?;
        let handle = Arc::clone(&open.handle);
        drop(state);
        handle.allocate(mode, offset, len).map_err(context(format!(
            "{what}: capacity tier {}",
            shared.capacity.describe()
        )))?;
        // The logical size follows the capacity file's new length (and
        // buffered bytes past it, which plain allocation leaves).
        let mut state = sluice_env::lock(&shared.state);
        if let Some(open) = state.files.get_mut(&file) {
            open.capacity_unsynced = true;
        }
        // The capacity file changed under its clean copies.
        cache::forget_file(&mut state, file);
        drop(state);
        self.refresh_size(file)?;
        Ok(())
    }
}

/// Whether buffered bytes of `file` (or records of it still being
/// appended) lie where `mode` changes bytes: the range for a punch or a
/// zero, anywhere for a shift (its bytes move).
fn needs_write_back(
    shared: &Shared,
    file: FileId,
    mode: Allocate,
    offset: u64,
    len: u64,
) -> io::Result<bool> {
    let state = sluice_env::lock(&shared.state);
    if !state.files.contains_key(&file) {
        return Err(unknown(file));
    }
    if !mode.zeroes_range() && !mode.shifts() {
        return Ok(false);
    }
    Ok(state.buffer.in_flight(file) || first_in_the_way(&state, file, mode, offset, len).is_some())
}

/// The first buffered byte of `file` that `mode` over `[offset, offset +
/// len)` would change under it, if any.
fn first_in_the_way(
    state: &State,
    file: FileId,
    mode: Allocate,
    offset: u64,
    len: u64,
) -> Option<u64> {
    let (from, count) = affected(mode, offset, len)?;
    state
        .buffer
        .buffered_pieces(file, from, count, None)
        .first()
        .map(|&(byte, _, _)| byte)
}

/// The bytes `mode` over `[offset, offset + len)` changes, as `(from,
/// count)`: the range for a punch or a zero, the whole file for a shift
/// (its bytes move), none for plain allocation.
fn affected(mode: Allocate, offset: u64, len: u64) -> Option<(u64, u64)> {
    if mode.shifts() {
        Some((0, u64::MAX))
    } else if mode.zeroes_range() {
        Some((offset, len))
    } else {
        None
    }
}
