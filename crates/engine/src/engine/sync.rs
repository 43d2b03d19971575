//! Making a file's writes durable and visible: `fsync` (durable where
//! they are: the capacity file, the log), and the per-file sync that puts
//! every buffered byte on the capacity tier (`sluice sync`, and every
//! close and fsync under `close-to-open`; docs/fuse.md, "Many nodes").

use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_env::{wait_while, OpenOptions, RelPath};
use sluice_policy::FileId;

use crate::log::RecordHeader;

use super::append::{commit, sync_log_unlocked, Append};
use super::degrade::{regions_holding, wait_reset};
use super::files::{
    appending_before, at_rest, busy, file_sync_lock, forget_if_unused, unknown, APPENDED_POLL,
};
use super::holds::{Busy, Hold, OwnWrite, Pin, Syncing};
use super::read::{pin, unpin, Located};
use super::unsynced::sync_dir_or_ancestor;
use super::writeback::{write_back, StretchError};
use super::{cache, context, ChangeStamp, Engine, KernelStamp, Shared, State};
use sluice_env::BackendFile;

impl Engine {
    /// Make `file`'s writes durable: its capacity file, the log regions
    /// holding its records (with its path records), and its creation.
    ///
    /// Every sync runs outside the engine lock, so writers and readers of
    /// other files go on meanwhile.
    pub fn fsync(&self, file: FileId) -> io::Result<()> {
        self.fsync_with(file, true)
    }

    /// `fsync` under close-to-open: [`Engine::sync_file`] puts every
    /// buffered byte on the capacity file and syncs it (always), then the
    /// rest of [`Engine::fsync`] (the file's creation, the log) without
    /// syncing the capacity file a second time. Returns the buffered bytes
    /// written.
    pub fn sync_file_and_fsync(&self, file: FileId) -> io::Result<u64> {
        let written = self.sync_file(file, true)?;
        self.fsync_with(file, false)?;
        Ok(written)
    }

    /// [`Engine::fsync`], syncing the capacity file only if `data`.
    pub(super) fn fsync_with(&self, file: FileId, data: bool) -> io::Result<()> {
        let shared = &*self.shared;
        let state = sluice_env::lock(&shared.state);
        let open = state.files.get(&file).ok_or_else(|| unknown(file))?;
        let what = format!("fsync {}", open.path);
        let handle = Arc::clone(&open.handle);
        let path = open.path.clone();
        let dirs = match open.unlinked {
            true => Default::default(),
            false => state.unsynced_names.for_path(&path),
        };
        drop(state);
        if data {
            handle.sync_data().map_err(context(&what))?;
        }
        if !dirs.is_empty() {
            // The new parent first, then the old ones: a crash between
            // leaves the file named twice, never at no name.
            for dir in &dirs.dirs {
                sync_dir_or_ancestor(shared.capacity.as_ref(), dir).map_err(context(&what))?;
            }
            sluice_env::lock(&shared.state).unsynced_names.settle(&dirs);
        }
        let behind_hole = sync_log_unlocked(shared, |state, synced| {
            let synced = synced.map_err(context(&what))?;
            commit(shared, state, &synced).map_err(context(&what))?;
            // Bytes of the file in a region behind a failed append are not
            // recovered from it (degrade.rs): durable only once flushed.
            Ok::<_, io::Error>(regions_holding(state, file, 0, u64::MAX, true))
        })?;
        wait_reset(shared, &behind_hole, &what)
    }

    /// `sluice sync PATH`: write every buffered byte of the file at `path`
    /// to its capacity file and sync that, so the capacity tier alone
    /// holds the file as written so far ([`Engine::sync_file`]). Returns
    /// the buffered bytes written.
    pub fn sync_path(&self, path: &RelPath) -> io::Result<u64> {
        let shared = &*self.shared;
        let what = format!("sync {path}");
        let Some(id) = sluice_env::lock(&shared.state).ids.get(path).copied() else {
            // Nothing of it is buffered: its capacity file is all of it.
            let handle = shared
                .capacity
                .open(path, OpenOptions::default())
                .map_err(context(&what))?;
            handle.sync_data().map_err(context(&what))?;
            return Ok(0);
        };
        self.sync_file(id, true)
    }

    /// Write every buffered byte of the open file `id` to its capacity
    /// file and sync that: afterwards the capacity tier holds the file as
    /// written so far through this engine, and other nodes of a shared
    /// capacity tier see it (`sluice sync`, and the mount's close-to-open
    /// consistency at close, fsync and unlock). Returns the buffered bytes
    /// written. The capacity file is synced when bytes were written to it
    /// now, when the engine wrote or truncated it since the last such
    /// sync, or when `always`; so closing a file that was only read costs
    /// one look at the index.
    ///
    /// The bytes written are then dropped from the index, durably first (a
    /// clean record: every record of the file older than the write-back's
    /// bound is on the capacity tier): a later flush or a recovery must not
    /// write them again over what another node wrote since.
    ///
    /// Writers of the file go on meanwhile (docs/engine.md, "Write-back"):
    /// the write-back takes the bytes buffered when it starts, and what is
    /// written after stays buffered for the next one. The file counts as
    /// busy while its bytes are written, so a truncate, an unlink or a
    /// rename waits for them to land. Two syncs of one file take turns
    /// ([`OpenFile::sync_lock`]); the flusher's runs of the file wait for a
    /// sync, then look up what is left.
    pub fn sync_file(&self, id: FileId, always: bool) -> io::Result<u64> {
        if !always {
            match close_needs(&self.shared, id)? {
                CloseNeeds::Nothing => return Ok(0),
                CloseNeeds::TierCheck => return tier_check(&self.shared, id).map(|()| 0),
                CloseNeeds::WriteBack => {}
            }
        }
        write_back_file(&self.shared, id, Pass::Sync { always }, 0..u64::MAX)
    }
}

/// What a sync of a file that is not `always` (a close, an unlock) must do.
enum CloseNeeds {
    /// Nothing: no byte of the file is owed a sync.
    Nothing,
    /// Only bytes written straight to the capacity file are owed, which
    /// its file system shows every client already
    /// ([`CloseSync::syncs_straight_writes`]): the tier must still be
    /// where its name leads ([`tier_check`]).
    TierCheck,
    /// A write-back pass ([`write_back_file`]).
    WriteBack,
}

/// What a sync of `id` (not `always`) needs, decided with its sync turn
/// free and taken, so no other sync of the file is half done (a sync
/// clears `capacity_unsynced` before its capacity sync, and sets it again
/// if that fails, all under its turn). Nothing buffered or being
/// appended, and no flush run of it in flight: then nothing leaves the
/// log, and what is owed is the sync of bytes written straight to the
/// capacity file, by the engine (`capacity_unsynced`) or by the kernel
/// (see [`write_back_file`]: none if the file is empty, or as stamped).
/// Every close of a file only read, or opened for writing and left
/// unwritten, ends here (issue 33), and so does every close of a file
/// written straight to a tier whose closes need no sync (mdtest-hard's
/// creates): without the turn's wait, the bookkeeping of a write-back
/// pass, and its wake-up of every thread waiting on the engine's
/// condition variable (the flusher among them) at each close.
fn close_needs(shared: &Shared, id: FileId) -> io::Result<CloseNeeds> {
    // One take of the engine lock (a close of every file takes it): the
    // file's sync turn is only tried under it, never waited for.
    let state = sluice_env::lock(&shared.state);
    let open = state.files.get(&id).ok_or_else(|| unknown(id))?;
    let turn = Arc::clone(&open.sync_lock);
    let _turn = match turn.try_lock() {
        Ok(guard) => guard,
        Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
        Err(std::sync::TryLockError::WouldBlock) => return Ok(CloseNeeds::WriteBack),
    };
    if !at_rest(&state, id, open) {
        return Ok(CloseNeeds::WriteBack);
    }
    if !open.capacity_unsynced && !open.kernel_writes {
        return Ok(CloseNeeds::Nothing);
    }
    if !syncs_straight_writes(shared) {
        return Ok(CloseNeeds::TierCheck);
    }
    if open.capacity_unsynced {
        return Ok(CloseNeeds::WriteBack);
    }
    let (handle, stamp) = (Arc::clone(&open.handle), open.kernel_stamp.taken());
    drop(state);
    let unwritten = match handle.stat() {
        Ok(st) => st.len == 0 || stamp == Some(ChangeStamp::of(&st)),
        Err(_) => handle.len().is_ok_and(|len| len == 0),
    };
    Ok(if unwritten {
        CloseNeeds::Nothing
    } else {
        CloseNeeds::WriteBack
    })
}

/// Whether a close syncs bytes written straight to the capacity tier
/// (`mount.close_sync`, [`CloseSync`]).
pub(super) fn syncs_straight_writes(shared: &Shared) -> bool {
    shared
        .config
        .close_sync
        .syncs_straight_writes(shared.capacity.as_ref())
}

/// A close that syncs nothing still acknowledges that the file's bytes are
/// where other nodes look: the capacity tier must not be lost (replaced
/// or unmounted under the mount, where the kernel's writes through
/// passthrough went to the detached file system), as a sync's own check
/// would have found (docs/crash-consistency.md, "Capacity-tier faults").
fn tier_check(shared: &Shared, id: FileId) -> io::Result<()> {
    shared.capacity.check_root().map_err(|e| {
        let path = sluice_env::lock(&shared.state)
            .files
            .get(&id)
            .map(|o| o.path.to_string());
        context(format!("sync {}", path.unwrap_or_default()))(e)
    })
}

/// What a write-back pass of one file is for.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Pass {
    /// A sync ([`Engine::sync_file`]): waits for its turn, syncs the
    /// capacity file when owed (or `always`).
    Sync { always: bool },
    /// The flusher's pass while the capacity tier is idle: skipped when a
    /// sync of the file runs, gives way to syncs at each run.
    Background,
}

/// The flusher's background write-back (close-to-open,
/// `flush.write_back_idle`; docs/engine.md, "Write-back"): once no
/// foreground write reached the capacity tier for `idle_for` and it is
/// healthy, write back the longest stretch of buffered bytes of a file
/// that no sync, flush or other pass is writing, as a sync would, if it
/// is one run (`flush.run_max`) or longer: the short stretches of a file
/// still being written at random offsets would reach the disk as seeks,
/// and wait for their gaps or the close, while the head of a file being
/// written goes as its tail grows. A file not written for `idle_for`
/// whose bytes are one stretch goes too, however short (the tail a writer
/// left). Returns whether bytes were written.
pub(super) fn write_back_idle(shared: &Shared, idle_for: Duration) -> io::Result<bool> {
    let state = sluice_env::lock(&shared.state);
    if state.shutdown || !state.capacity_health.is_healthy() {
        return Ok(false);
    }
    let idle = matches!(
        state.buffer.capacity_idle(shared.clock.now(), idle_for),
        sluice_policy::flush_gate::GateDecision::Flush(_)
    );
    if !idle {
        return Ok(false);
    }
    let files = &state.files;
    let chosen = state
        .buffer
        .longest_stretch(shared.config.flush_run_max_bytes, |f| {
            let o = files.get(&f)?;
            if o.syncing > 0 || o.busy > 0 || o.unlinked {
                return None;
            }
            // Quiet: not written for as long as the tier has been idle.
            Some(
                o.written
                    .is_none_or(|w| w.elapsed().is_ok_and(|since| since >= idle_for)),
            )
        });
    drop(state);
    let Some((id, range)) = chosen else {
        return Ok(false);
    };
    Ok(write_back_file(shared, id, Pass::Background, range)? > 0)
}

/// Write every byte in `range` of the open file `id` buffered now back to
/// its capacity file, sync that, and drop those bytes from the index
/// behind a clean record ([`Engine::sync_file`] says how). Returns the
/// bytes written. Two passes of one file take turns: a sync waits for
/// its turn, a background pass gives way.
pub(super) fn write_back_file(
    shared: &Shared,
    id: FileId,
    pass: Pass,
    range: std::ops::Range<u64>,
) -> io::Result<u64> {
    let started = Instant::now();
    let turn = file_sync_lock(shared, id)?;
    let _turn = match pass {
        Pass::Sync { .. } => sluice_env::lock(&turn),
        Pass::Background => match turn.try_lock() {
            Ok(guard) => guard,
            Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
            // A sync of the file runs: it writes these bytes.
            Err(std::sync::TryLockError::WouldBlock) => return Ok(0),
        },
    };
    match begin_write_back(shared, id, pass, range, started)? {
        Begun::Done(written) => Ok(written),
        Begun::Writing(writing) => {
            let background = pass == Pass::Background;
            let (written, result) = write_back(
                shared,
                writing.handle().as_ref(),
                writing.pieces(),
                background,
                || writing.handle().sync_data(),
            );
            writing.end(shared, written, result)?.clean(shared)
        }
    }
}

/// What [`begin_write_back`] found.
pub(super) enum Begun {
    /// Nothing to write: the pass is over, with these bytes written.
    Done(u64),
    /// Pieces to write back and the file to sync ([`WriteBack`]).
    Writing(Box<WriteBack>),
}

/// The first step of a write-back pass, under the file's sync turn (its
/// caller's): wait for the file's flush runs in flight and the records
/// placed before now, look up its buffered pieces in `range` and decide
/// whether the capacity file needs a write or a sync at all; if it does,
/// the pass to carry out, the file counted busy and the pieces pinned.
/// `started`: when the pass began waiting (for its turn, first).
pub(super) fn begin_write_back(
    shared: &Shared,
    id: FileId,
    pass: Pass,
    range: std::ops::Range<u64>,
    started: Instant,
) -> io::Result<Begun> {
    let mut state = sluice_env::lock(&shared.state);
    // From here on no flush run of the file starts (it waits for this
    // pass, then looks up what is left): the pass writes every buffered
    // byte once, instead of beside a flush writing the same bytes on the
    // same disk. Given back on every way out below, or by the pass's end.
    if !state.files.contains_key(&id) {
        return Err(unknown(id));
    }
    let syncing = Hold::take(&mut state, id);
    // A flush run of the file looked up before now may carry bytes older
    // than the newest (superseded since, masked by the index): it must
    // land before this pass writes the newest, or it would land after them
    // once they are dropped from the index, and win.
    let state = wait_while(&shared.changed, state, None, busy(id));
    // Every record reserved before the bound is indexed: what is in flight
    // lands first (new ones get a sequence number past it, and writers of
    // the file go on meanwhile).
    let bound = state.buffer.next_seq();
    let mut state = wait_while(
        &shared.changed,
        state,
        APPENDED_POLL,
        appending_before(id, bound),
    );
    let waited = started.elapsed();
    // Pieces a flush run wrote already (ahead.rs) are synced here, not
    // written again; the clean record below covers them too.
    let (pieces, flushed_unsynced) =
        super::ahead::pieces_to_write(&state, id, range.start, range.end - range.start);
    let Some(open) = state.files.get_mut(&id) else {
        end_sync(shared, &mut state, syncing);
        return Err(unknown(id));
    };
    let handle = Arc::clone(&open.handle);
    let what = format!("sync {}", open.path);
    if pieces.is_empty()
        && !flushed_unsynced
        && pass == (Pass::Sync { always: false })
        && !syncs_straight_writes(shared)
    {
        // Nothing leaves the log, and bytes written straight to the
        // capacity file are seen already (close_needs): they stay owed to
        // the next fsync.
        end_sync(shared, &mut state, syncing);
        drop(state);
        return tier_check(shared, id).map(|()| Begun::Done(0));
    }
    // Cleared before the writes: a write after this point sets it again
    // for the next sync. A background pass leaves it to the next sync.
    let (engine_owed, kernel_owed, always) = match pass {
        Pass::Sync { always } => (
            std::mem::take(&mut open.capacity_unsynced),
            open.kernel_writes,
            always,
        ),
        Pass::Background => (false, false, false),
    };
    let mut unsynced = engine_owed || kernel_owed || flushed_unsynced;
    // The stamp of the file as seen before this sync, kept once it synced.
    let mut seen_stamp = None;
    if kernel_owed {
        // Only the kernel may have written the file (FUSE passthrough),
        // unseen. It did not if the capacity file is empty now (a write
        // lengthens a file, and the only way back to empty is a truncate,
        // which comes to the engine: `capacity_unsynced`), or, on a tier
        // with exact change times, if its length, mtime and ctime are as
        // stamped before the kernel could write. So closing a file
        // created, or opened for writing, and never written costs no sync
        // (issue 33: every close of mdtest's create and read phases paid
        // an fdatasync, a cache flush of the capacity device). On such a
        // tier the stamp is taken again before every sync, so the next
        // close compares with what this one synced.
        let stamp = open.kernel_stamp.taken();
        let judged = pieces.is_empty() && !flushed_unsynced && !always && !engine_owed;
        if judged || stamp.is_some() {
            drop(state);
            let seen = handle.stat().ok();
            let empty = judged
                && match &seen {
                    Some(st) => st.len == 0,
                    None => handle.len().is_ok_and(|len| len == 0),
                };
            seen_stamp = seen
                .as_ref()
                .map(ChangeStamp::of)
                .filter(|_| stamp.is_some());
            state = sluice_env::lock(&shared.state);
            if judged && (empty || (stamp.is_some() && seen_stamp == stamp)) {
                unsynced = false;
            }
        }
    }
    if pieces.is_empty() && !unsynced && !always {
        end_sync(shared, &mut state, syncing);
        return Ok(Begun::Done(0));
    }
    if !state.files.contains_key(&id) {
        end_sync(shared, &mut state, syncing);
        return Err(unknown(id));
    }
    // Busy while its bytes are written: a truncate waits for them.
    let busy = Hold::take(&mut state, id);
    let writer = cache::begin_own_write(&mut state, id);
    let (pinned, pins) = pieces
        .iter()
        .map(|&(offset, len, location)| {
            let (located, pin) = pin(&mut state, location);
            ((offset, len, located), pin)
        })
        .unzip();
    Ok(Begun::Writing(Box::new(WriteBack {
        of: PassOf {
            id,
            pass,
            range,
            bound,
            what,
            flushed_unsynced,
            started,
            waited,
        },
        handle,
        pinned,
        pins,
        syncing,
        busy,
        writer,
        seen_stamp,
    })))
}

/// What a write-back pass is about, from its lookup to its clean record.
struct PassOf {
    id: FileId,
    pass: Pass,
    range: std::ops::Range<u64>,
    /// Every record of the file below it was indexed at the lookup.
    bound: u64,
    what: String,
    /// Pieces a flush run wrote already, which this pass syncs.
    flushed_unsynced: bool,
    started: Instant,
    waited: Duration,
}

/// A write-back pass between its lookup and its end (issue 35: the pass
/// as a machine its driver carries out): the pinned pieces to write to
/// the capacity file, at disk speed in file order, then its sync
/// ([`write_back`] does both in one call; the harness of random orders
/// one run a turn, `orders.rs`), then [`WriteBack::end`] with how that
/// went.
pub(super) struct WriteBack {
    of: PassOf,
    handle: Arc<dyn BackendFile>,
    /// The pieces, each pinned in its region until the pass ends (`pins`).
    pinned: Vec<(u64, u64, Located)>,
    pins: Vec<Hold<Pin>>,
    /// The file syncing and busy, and written by this node, until the pass
    /// ends.
    syncing: Hold<Syncing>,
    busy: Hold<Busy>,
    writer: Hold<OwnWrite>,
    /// The file's stamp as seen before this pass (see `begin_write_back`).
    seen_stamp: Option<ChangeStamp>,
}

impl WriteBack {
    /// The pieces to write, pinned, in file order.
    pub(super) fn pieces(&self) -> &[(u64, u64, Located)] {
        &self.pinned
    }

    /// The capacity file to write and sync.
    pub(super) fn handle(&self) -> &Arc<dyn BackendFile> {
        &self.handle
    }

    /// The engine crashed during the pass ([`Hold::lost`]).
    #[cfg(test)]
    pub(super) fn lost(self) {
        self.pins.into_iter().for_each(Hold::lost);
        self.syncing.lost();
        self.busy.lost();
        self.writer.lost();
    }

    /// The end of the pass's writes, `written` bytes that ended as
    /// `result` says: the pieces unpinned, the file no longer busy or
    /// syncing (its flush runs and truncates go on), the written range
    /// noted (ahead.rs); the write's or the sync's failure. Then, synced,
    /// the clean record is left to do ([`Cleaning`]).
    pub(super) fn end(
        self,
        shared: &Shared,
        written: u64,
        result: Result<(), StretchError>,
    ) -> io::Result<Cleaning> {
        let WriteBack {
            of,
            pinned,
            pins,
            syncing,
            busy,
            writer,
            seen_stamp,
            ..
        } = self;
        let PassOf {
            id,
            pass,
            ref range,
            bound,
            ref what,
            started,
            ..
        } = of;
        let synced = result.map_err(|(StretchError::Copy(e) | StretchError::Write(e))| e);
        let mut state = sluice_env::lock(&shared.state);
        for pin in pins {
            unpin(shared, &mut state, pin);
        }
        let _ = busy.give_back(&mut state);
        // The file's copies match what this pass left on the capacity
        // file, whether or not the log takes the clean record below
        // (cache.rs).
        cache::end_own_write(&mut state, writer);
        // Cleared before the clean record below, which may wait for log
        // room that only the flusher makes. A flush run of the file
        // waiting for this sync looks its range up as soon as it is
        // cleared, while the pieces are still indexed: the note makes it
        // skip what this pass wrote and synced (ahead.rs). Without it,
        // every close that met a region flush of its file had its bytes
        // written twice (IO500's ior-easy under fast-all and
        // close-to-open: 523–528 MiB for 512).
        let noted = synced.is_ok() && !pinned.is_empty();
        if noted {
            super::ahead::note_sync(&mut state, id, range.clone(), bound);
        }
        end_sync(shared, &mut state, syncing);
        drop(state);
        if let Err(e) = synced {
            let e = sluice_env::with_context(
                e,
                format!("{what}: capacity tier {}", shared.capacity.describe()),
            );
            if let (Pass::Sync { .. }, Some(open)) =
                (pass, sluice_env::lock(&shared.state).files.get_mut(&id))
            {
                // Still owed: the next sync tries again.
                open.capacity_unsynced = true;
            }
            return Err(e);
        }
        let written_at = started.elapsed();
        let mut state = sluice_env::lock(&shared.state);
        if let (Some(stamp), Some(open)) = (seen_stamp, state.files.get_mut(&id)) {
            // Synced as seen then: a write since changed the ctime.
            open.kernel_stamp = KernelStamp::Taken(stamp);
        }
        match pass {
            Pass::Sync { .. } => state.stats.synced_bytes += written,
            Pass::Background => state.stats.written_back_bytes += written,
        }
        Ok(Cleaning {
            of,
            noted,
            pieces: pinned.len(),
            written,
            written_at,
        })
    }
}

/// A write-back pass whose bytes are on the capacity file, synced: its
/// clean record is left to append ([`Cleaning::clean`]), which may wait
/// for log room that only the flusher makes.
pub(super) struct Cleaning {
    of: PassOf,
    /// The written range was noted (ahead.rs), to forget once clean.
    noted: bool,
    pieces: usize,
    written: u64,
    written_at: Duration,
}

impl Cleaning {
    /// The clean record, then the bytes dropped from the index (see
    /// [`clean`]). Returns the bytes the pass wrote.
    pub(super) fn clean(self, shared: &Shared) -> io::Result<u64> {
        let Cleaning {
            of:
                PassOf {
                    id,
                    pass,
                    range,
                    bound,
                    what,
                    flushed_unsynced,
                    started,
                    waited,
                },
            noted,
            pieces,
            written,
            written_at,
        } = self;
        if pieces > 0 || flushed_unsynced {
            let cleaned = clean(shared, id, bound, range.clone(), pass, &what, |state| {
                if noted {
                    super::ahead::forget_sync(state, id, &range, bound);
                }
            });
            // A flush of these same bytes looked up before they were dropped
            // lands before the caller goes on (a write of another node after
            // this returns must not be overwritten by it).
            let mut state = wait_while(
                &shared.changed,
                sluice_env::lock(&shared.state),
                None,
                busy(id),
            );
            // Released while this pass wrote it (a background pass, or the
            // last handle closed meanwhile): forgotten now, its copies parked
            // with the stamp just taken.
            let handle = forget_if_unused(&mut state, id);
            drop(state);
            drop(handle);
            cleaned?;
        }
        // Where a pass's time went: waiting for its turn and the records in
        // flight, writing and syncing, then the clean record.
        tracing::debug!(
            file = %what,
            background = pass == Pass::Background,
            written,
            pieces,
            waited_ms = waited.as_millis(),
            written_ms = written_at.as_millis(),
            ms = started.elapsed().as_millis(),
            "written back"
        );
        Ok(written)
    }
}

/// Every byte in `range` of `id` buffered before sequence number `bound` is
/// on the capacity tier, synced: say so durably (a clean record, the log
/// synced), then drop those bytes from the index; newer bytes, and bytes
/// outside the range, stay buffered. `then` runs under the hold of the
/// lock that drops them (or finds the record refused).
///
/// When the fast tier does not take the clean record (failing, or crashed
/// under it: degrade.rs), the bytes stay indexed, and it is reported. A
/// background pass ends there: a later flush writes the same bytes again,
/// and nothing was promised of them. A sync (a close, `sluice sync`) has
/// promised that the capacity tier holds them, and without the record a
/// recovery could replay an older durable record of the range over them
/// (the newer one that superseded it in the log not synced yet: the
/// seeded harness, seed 6429). So it waits, as a write falling back to the
/// capacity tier does, until the regions holding the range's newest copies
/// were flushed and reset (older copies lie in those regions or older
/// ones, reset first); if that fails too, the sync fails.
fn clean(
    shared: &Shared,
    id: FileId,
    bound: u64,
    range: std::ops::Range<u64>,
    pass: Pass,
    what: &str,
    then: impl FnOnce(&mut State),
) -> io::Result<()> {
    let (start, len) = (range.start, range.end - range.start);
    let (header, payload) = RecordHeader::clean(id, bound, range.clone(), 0);
    // The flusher's own pass must not wait for room only the flusher makes
    // (a full log would stop it for good): without room now, the bytes
    // stay indexed, and a flush or sync writes them again later.
    let mut state = sluice_env::lock(&shared.state);
    let mut append = match pass {
        Pass::Background => Append::if_room(header, &payload),
        Pass::Sync { .. } => Append::required(header, &payload, None),
    };
    let appended = drive!(shared, state, append);
    // `None`: no room now, nothing to say. Returns, for a sync whose
    // record failed, the regions to wait for, with the failure.
    let settle = |state: &mut State, cleaned: Option<io::Result<()>>| {
        let mut evacuate = None;
        match cleaned {
            Some(Ok(())) => {
                if state.buffer.clean(id, bound, range) > 0 {
                    shared.left_log.fetch_add(1, Ordering::SeqCst);
                }
                cache::restamp(state, id);
            }
            Some(Err(e)) => {
                shared
                    .incidents
                    .record_error("sync", None, Some("fast"), &e);
                if let Pass::Sync { .. } = pass {
                    evacuate = Some((regions_holding(state, id, start, len, false), e));
                }
            }
            None => {}
        }
        then(state);
        evacuate
    };
    // The lock is let go in every arm: the wait below takes it again.
    let evacuate = match appended {
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
            let evacuate = settle(&mut state, None);
            drop(state);
            evacuate
        }
        Err(e) => {
            let evacuate = settle(&mut state, Some(Err(context(what)(e))));
            drop(state);
            evacuate
        }
        Ok(_) => {
            // The log is synced with the lock released, as an fsync syncs
            // it: writers go on meanwhile (a sync of the emulated SSD waits
            // for every append queued before it).
            drop(state);
            sync_log_unlocked(shared, |state, synced| {
                settle(state, Some(synced.map(drop).map_err(context(what))))
            })
        }
    };
    match evacuate {
        Some((holding, e)) => wait_reset(
            shared,
            &holding,
            &format!("{what}: the fast tier took no clean record ({e})"),
        ),
        None => Ok(()),
    }
}

/// The sync of a file is done with its capacity writes: flush runs of the
/// file may go on.
fn end_sync(shared: &Shared, state: &mut State, syncing: Hold<Syncing>) {
    let _ = syncing.give_back(state);
    shared.changed.notify_all();
}
