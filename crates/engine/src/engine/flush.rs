//! The flusher thread: polls the write buffer for a region to flush,
//! writes its runs to the capacity tier (each looked up again under the
//! lock), syncs the files, resets the region.

use super::*;

/// One region flush step's outcome.
pub(super) enum Step {
    /// Nothing to do now; wait this long or until notified.
    Idle(Duration),
    /// Stop the thread.
    Shutdown,
}

pub(super) fn flusher_loop(shared: &Shared) {
    let mut backoff = Duration::from_millis(50);
    loop {
        match flush_one_region(shared) {
            Ok(Some(step)) => {
                let state = lock(shared);
                match step {
                    Step::Shutdown => return,
                    Step::Idle(d) => {
                        let _ = shared.changed.wait_timeout(state, d);
                    }
                }
            }
            Ok(None) => backoff = Duration::from_millis(50),
            Err(e) => {
                let mut state = lock(shared);
                state.stats.flush_errors += 1;
                state.stats.last_flush_error = Some(e.to_string());
                shared.changed.notify_all();
                if state.shutdown {
                    return;
                }
                let _ = shared.changed.wait_timeout(state, backoff);
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
        }
    }
}

/// Flush the oldest full region if the gate allows: `Ok(None)` when a
/// region was flushed and reset, `Ok(Some(step))` when there was nothing
/// to do, `Err` when a flush failed (the region stays buffered).
pub(super) fn flush_one_region(shared: &Shared) -> io::Result<Option<Step>> {
    let mut state = lock(shared);
    if state.shutdown {
        return Ok(Some(Step::Shutdown));
    }
    let now = shared.clock.now();
    let region = match state.buffer.poll_flush(now) {
        FlushPoll::Idle => return Ok(Some(Step::Idle(Duration::from_millis(100)))),
        FlushPoll::Pause { recheck_at } => {
            let wait = recheck_at.map_or(Duration::from_millis(100), |t| t.saturating_since(now));
            return Ok(Some(Step::Idle(
                wait.clamp(Duration::from_millis(1), Duration::from_millis(100)),
            )));
        }
        FlushPoll::Flush { region, .. } => region,
    };
    if state.regions[region.0 as usize].in_flight > 0 {
        // A record is still being written into it; its end notifies.
        return Ok(Some(Step::Idle(Duration::from_millis(10))));
    }
    let runs = state
        .buffer
        .start_flush(region, shared.config.flush_run_max_bytes)
        .map_err(|e| io::Error::other(e.to_string()))?;
    drop(state);
    let mut touched: HashMap<FileId, Arc<dyn BackendFile>> = HashMap::new();
    for run in runs {
        if let Err(e) = flush_run(shared, region, run, &mut touched) {
            let mut state = lock(shared);
            let _ = state.buffer.abort_flush(region);
            return Err(e);
        }
    }
    // Every capacity file the region's bytes went to is synced before the
    // region can be reused (DESIGN §4.5).
    for handle in touched.values() {
        if let Err(e) = handle.sync_data() {
            let mut state = lock(shared);
            let _ = state.buffer.abort_flush(region);
            return Err(io::Error::new(
                e.kind(),
                format!(
                    "capacity tier {}: sync after flush: {e}",
                    shared.capacity.describe()
                ),
            ));
        }
    }
    let mut state = lock(shared);
    // Readers copying buffered bytes of the region finish first.
    while state.regions[region.0 as usize].readers > 0 {
        state = shared
            .changed
            .wait(state)
            .unwrap_or_else(|e| e.into_inner());
    }
    let log_region = &mut state.regions[region.0 as usize];
    let generation = log_region.file.generation() + 1;
    let reset = log_region
        .file
        .reset(generation)
        .and_then(|()| log_region.file.sync());
    if let Err(e) = reset {
        let _ = state.buffer.abort_flush(region);
        return Err(io::Error::new(
            e.kind(),
            format!(
                "fast tier {}: reset region {}: {e}",
                shared.fast.describe(),
                region.0
            ),
        ));
    }
    log_region.records.clear();
    log_region.dirty = false;
    state
        .buffer
        .finish_flush(region)
        .map_err(|e| io::Error::other(e.to_string()))?;
    let flushed: Vec<FileId> = state.files.keys().copied().collect();
    for id in flushed {
        forget_if_unused(&mut state, id);
    }
    state.stats.regions_flushed += 1;
    shared.changed.notify_all();
    Ok(None)
}

/// Write the bytes of `run` that still live in `region` to the capacity
/// tier. They are looked up again under the lock, so superseded bytes are
/// never written, then copied from the log and written outside it, one
/// write per stretch of file-contiguous bytes (DESIGN §4.5: adjacent
/// extents merged into large sequential writes).
pub(super) fn flush_run(
    shared: &Shared,
    region: RegionId,
    run: FlushRunRef,
    touched: &mut HashMap<FileId, Arc<dyn BackendFile>>,
) -> io::Result<()> {
    let file = run.file;
    let mut state = lock(shared);
    let pieces = state.buffer.flush_pieces(region, run);
    if pieces.is_empty() {
        return Ok(());
    }
    // The region is flushing: nothing else resets it, so its records can
    // be read outside the lock without a pin.
    let located: Vec<(u64, u64, Pinned)> = pieces
        .into_iter()
        .map(|(file_offset, len, location)| (file_offset, len, locate(&state, location)))
        .collect();
    let Some(open) = state.files.get_mut(&file) else {
        return Ok(());
    };
    open.busy = true;
    let handle = Arc::clone(&open.handle);
    let path = open.path.clone();
    drop(state);
    let (written, stretches) = write_stretches(handle.as_ref(), &located, |bytes| {
        take_flush_tokens(shared, bytes)
    });
    let mut corrupt = false;
    let result = stretches.map_err(|failure| match failure {
        StretchError::Copy(e) => {
            corrupt = e.kind() == io::ErrorKind::InvalidData;
            io::Error::new(e.kind(), format!("flush {path}: {e}"))
        }
        StretchError::Write(e) => io::Error::new(
            e.kind(),
            format!(
                "capacity tier {}: flush {path}: {e}",
                shared.capacity.describe()
            ),
        ),
    });
    let mut state = lock(shared);
    let mut written_at = None;
    if let Some(open) = state.files.get_mut(&file) {
        open.busy = false;
        if !open.unlinked {
            written_at = open.written;
        }
    }
    if corrupt {
        state.stats.corrupt_payloads += 1;
    }
    state.stats.flushed_bytes += written;
    shared.changed.notify_all();
    drop(state);
    if let (Ok(()), Some(at)) = (&result, written_at) {
        // The flush's writes stamped the flush time on the file: give it
        // back the time of its last write (best effort: a rename racing
        // with the flush only leaves the flush time).
        let times = SetAttr {
            mtime: Some(TimeSet::At(at)),
            ..SetAttr::default()
        };
        let _ = shared.capacity.set_attr(&path, &times);
    }
    touched.insert(file, handle);
    result
}

/// Why [`write_stretches`] stopped.
pub(super) enum StretchError {
    /// Copying a payload out of the log failed (InvalidData: corrupt).
    Copy(io::Error),
    /// The capacity tier refused a write.
    Write(io::Error),
}

/// Copy `pieces` (file order: `(file_offset, len, record)`) out of the log
/// and write them to `handle`, one write per stretch of file-contiguous
/// bytes; `before_write(bytes)` runs before each write (the flush's
/// bandwidth cap). Returns the bytes written, and why it stopped early.
pub(super) fn write_stretches(
    handle: &dyn BackendFile,
    pieces: &[(u64, u64, Pinned)],
    mut before_write: impl FnMut(u64),
) -> (u64, Result<(), StretchError>) {
    let mut written = 0u64;
    let mut next = 0;
    while next < pieces.len() {
        let start = pieces[next].0;
        let mut buf = Vec::new();
        while let Some((file_offset, len, pinned)) = pieces.get(next) {
            if *file_offset != start + buf.len() as u64 {
                break;
            }
            let at = buf.len();
            buf.resize(at + *len as usize, 0);
            if let Err(e) = pinned.copy_to(&mut buf[at..]) {
                return (written, Err(StretchError::Copy(e)));
            }
            next += 1;
        }
        before_write(buf.len() as u64);
        if let Err(e) = handle.write_at(&buf, start) {
            return (written, Err(StretchError::Write(e)));
        }
        written += buf.len() as u64;
    }
    (written, Ok(()))
}

/// Wait until the flush bandwidth cap lets `bytes` more go to the capacity
/// tier (at once when there is no cap). A shutdown ends the wait early, so
/// closing never sleeps out the cap; that one run then goes unthrottled.
pub(super) fn take_flush_tokens(shared: &Shared, bytes: u64) {
    loop {
        let now = shared.clock.now();
        let mut state = lock(shared);
        if state.shutdown {
            return;
        }
        match state.flush_tokens.try_take(now, bytes) {
            Ok(()) => return,
            Err(at) => {
                drop(state);
                shared
                    .clock
                    .sleep(at.saturating_since(now).min(Duration::from_millis(100)));
            }
        }
    }
}
