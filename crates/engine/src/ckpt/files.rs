//! File operations on checkpoints: create and open (admission, placement
//! on the fast tier or straight to the capacity tier), read, write, fsync,
//! close (publishing under close-to-open), truncate, unlink and rename.

use std::io;
use std::num::NonZeroU64;
use std::sync::Arc;
use std::time::Duration;

use sluice_catalog::{CkptRecord, JobSpec, Location};
use sluice_env::{
    copy_range, wait_for, wait_while, with_context, BackendFile, OpenOptions, RelPath,
};
use sluice_policy::bbos::{
    datawarp_grant, Admission, FastCopy, FastTier, PlaceConfig, Placement, Placer, Resident,
    Scheme, Ticket,
};

use super::jobs::job_rate;
use super::room::record_periods;
use super::{
    add_handle, bad_handle, data_path, dir, gone, invalid, rec_path, unix_ns, Checkpoints, Copy,
    Handle, Shared, State, Target,
};

/// How often a write waiting for its copy's move to the capacity tier,
/// and the move waiting for writes in flight, look again.
const MOVE_POLL: Duration = Duration::from_millis(10);

/// A new checkpoint's placement being decided ([`Checkpoints::placer`]):
/// the policy's placer, DataWarp's grant for the job, and the version the
/// checkpoint takes.
struct Placing {
    placer: Placer,
    grant: Option<u64>,
    version: u64,
}

impl Checkpoints {
    /// The length of `path`'s fast-tier copy, if it has one.
    pub fn size(&self, path: &RelPath) -> Option<u64> {
        let state = sluice_env::lock(&self.shared.state);
        let id = state.by_path.get(path)?;
        state.copies.get(id).map(|c| c.len)
    }

    /// Create `path` (which must not exist) as a new checkpoint.
    pub fn create(&self, path: &RelPath) -> io::Result<u64> {
        self.begin(path, true)
    }

    /// Open `path`. For writing, an empty checkpoint-class file (or one
    /// opened with `truncate`) starts a new checkpoint, unless another
    /// handle writes it now: then it is that checkpoint (an N-1
    /// checkpoint's ranks each open the shared file), joined, and cut to
    /// zero in place with `truncate`. A file with data is written in place
    /// where it is. For reading, a fast-tier copy is a restart hit, the
    /// capacity tier a miss.
    pub fn open_file(&self, path: &RelPath, write: bool, truncate: bool) -> io::Result<u64> {
        let shared = &*self.shared;
        let (class, written) = {
            let state = sluice_env::lock(&shared.state);
            let written = state.handles.values().any(|h| h.writing && h.path == *path);
            (Checkpoints::job_of(&state, path).is_some(), written)
        };
        if write && class && !written {
            let empty = match self.size(path) {
                Some(len) => len == 0,
                None => shared.capacity.metadata(path)?.len == 0,
            };
            if truncate || empty {
                return self.begin(path, false);
            }
        }
        let local = sluice_env::lock(&shared.state).by_path.contains_key(path);
        if !write && !local {
            self.wait_for_demotion_elsewhere(path)?;
        }
        let mut state = sluice_env::lock(&shared.state);
        let now = shared.clock.now();
        let target = match state.by_path.get(path).copied() {
            Some(id) => {
                if write {
                    self.stage_again(&mut state, id)?;
                }
                let c = state.copies.get_mut(&id).ok_or_else(|| gone(path))?;
                c.accessed = now;
                if write {
                    c.writers += 1;
                    c.generation += 1;
                } else {
                    c.readers += 1;
                }
                Target::Copy(id)
            }
            None => Target::Capacity(shared.capacity.open(path, OpenOptions::default())?),
        };
        if write && truncate && written {
            // O_TRUNC of the checkpoint the others write: cut in place.
            match &target {
                Target::Copy(id) => self.truncate_copy(&mut state, *id, 0)?,
                Target::Capacity(file) => file.set_len(0)?,
            }
        }
        let copy = matches!(target, Target::Copy(_));
        if write && copy {
            state.writers += 1;
        }
        if !write {
            if copy {
                state.stats.restart_hits += 1;
            } else {
                state.stats.restart_misses += 1;
            }
        }
        Ok(add_handle(
            &mut state,
            Handle {
                target,
                path: path.clone(),
                writing: write,
                hit: (!write).then_some(copy),
                ticket: None,
                created: None,
            },
        ))
    }

    /// Copy `id` is about to change (a write, truncate or fallocate): it
    /// is refused if [`Copy::broken`], else staged again if cached.
    fn to_change(&self, state: &mut State, id: u64) -> io::Result<()> {
        if let Some(c) = state.copies.get(&id) {
            c.writable()?;
        }
        self.stage_again(state, id)
    }

    /// A write to a cached copy makes it staged again, durably first.
    pub(super) fn stage_again(&self, state: &mut State, id: u64) -> io::Result<()> {
        let Some(c) = state.copies.get_mut(&id) else {
            return Ok(());
        };
        if c.rec.location == Location::Staged {
            return Ok(());
        }
        c.rec.location = Location::Staged;
        let rec = c.rec.clone();
        self.shared.write_rec(id, &rec, true)?;
        let r = self.shared.catalog.put_ckpt(&rec);
        self.shared.note_catalog(state, r);
        Ok(())
    }

    /// A new checkpoint at `path`; see docs/bbos.md for the order of the
    /// decisions.
    pub(super) fn begin(&self, path: &RelPath, create_new: bool) -> io::Result<u64> {
        let shared = &*self.shared;
        let options = &shared.options;
        let mut state = sluice_env::lock(&shared.state);
        let job = Checkpoints::job_of(&state, path)
            .ok_or_else(|| invalid(format!("{path}: no registered job's glob matches it")))?;
        let key = Shared::job_key(&mut state, &job.id);
        // 1. The job's turn on the fast tier.
        let mut ticket = None;
        if options.scheme.schedules_io() {
            let (t, admission) = state.scheduler.submit(0, key);
            ticket = Some(t);
            if admission == Admission::Queued {
                state.stats.admission_waits += 1;
                let started = shared.clock.now();
                let deadline = started.saturating_add(options.admit_wait);
                while !state.admitted.contains(&t) {
                    let now = shared.clock.now();
                    if now >= deadline || state.shutdown {
                        state.stats.admission_timeouts += 1;
                        let _ = state.scheduler.finish(t);
                        ticket = None;
                        break;
                    }
                    state = wait_for(
                        &shared.changed,
                        state,
                        deadline
                            .saturating_since(now)
                            .min(Duration::from_millis(100)),
                    );
                }
                state.admitted.remove(&t);
                let waited = shared.clock.now().saturating_since(started);
                state.stats.admission_wait_ns += u64::try_from(waited.as_nanos()).unwrap_or(0);
            }
        }
        // 2. Where it goes (sluice_policy::bbos decides; waits for room
        // with the lock let go), 3. carried out.
        let result = 'place: {
            let mut placing = match self.placer(&mut state, path, &job, key) {
                Err(e) => break 'place Err(e),
                Ok(Err(cause)) => {
                    break 'place self.fallback(&mut state, path, &job, create_new, ticket, &cause)
                }
                Ok(Ok(placing)) => placing,
            };
            let placement = loop {
                match self.decide(&mut state, &mut placing) {
                    Err(e) => break 'place Err(e),
                    Ok(Placement::Wait { until }) => {
                        let t = shared.clock.now();
                        let wait = until.saturating_since(t).min(Duration::from_millis(50));
                        state = wait_for(&shared.changed, state, wait);
                    }
                    Ok(placement) => break placement,
                }
            };
            self.carry_out(
                &mut state,
                path,
                &job,
                placing.version,
                placement,
                create_new,
                ticket,
            )
        };
        if result.is_err() {
            if let Some(t) = ticket {
                admit(&mut state, t);
                shared.changed.notify_all();
            }
        }
        result
    }

    /// The placement of a new checkpoint of `job` at `path` about to be
    /// decided: the old copy of the path removed, the version taken, the
    /// policy's placer made (with DataWarp's grant). `Err(cause)` inside:
    /// the catalogue gave no version ([`Checkpoints::fallback`]).
    fn placer(
        &self,
        state: &mut State,
        path: &RelPath,
        job: &JobSpec,
        key: u64,
    ) -> io::Result<Result<Placing, String>> {
        let shared = &*self.shared;
        let options = &shared.options;
        let now = shared.clock.now();
        // The old copy of this path is being replaced.
        if let Some(old) = state.by_path.get(path).copied() {
            shared.remove_copy(state, old)?;
        }
        let version = match shared.version_for(state, job, now) {
            Ok(version) => version,
            Err(cause) => return Ok(Err(cause)),
        };
        // Where it goes is sluice_policy::bbos's decision; this carries it
        // out: evictions, MaxBW's wait, then the files below.
        let incoming = Resident {
            job: key,
            version,
            bytes: job.ckpt_bytes,
            failure_rate: job_rate(job, options.node_mtbf),
            written: now,
            accessed: now,
        };
        // S, or the fast tier's room when its file system has less.
        let room = shared.room(state);
        let config = PlaceConfig {
            scheme: options.scheme,
            eviction: options.eviction,
            capacity: room,
            cold_direct: true,
        };
        let deadline = now.saturating_add(options.admit_wait);
        let grant = if options.scheme == Scheme::DataWarp {
            let sizes: Vec<u64> = state.jobs.iter().map(|j| j.ckpt_bytes).collect();
            let index = state.jobs.iter().position(|j| j.id == job.id);
            index.and_then(|i| datawarp_grant(&sizes, i, room))
        } else {
            None
        };
        Ok(Ok(Placing {
            placer: Placer::new(config, incoming, job.versions, deadline),
            grant,
            version,
        }))
    }

    /// One decision of the placer over the fast tier now, its evictions
    /// carried out: a final placement, or `Placement::Wait`.
    fn decide(&self, state: &mut State, placing: &mut Placing) -> io::Result<Placement> {
        let shared = &*self.shared;
        let (ids, copies): (Vec<u64>, Vec<FastCopy>) = state
            .copies
            .iter()
            .map(|(&id, c)| {
                let evictable = c.rec.location == Location::Cached && c.unused();
                let resident = shared.resident(state, c);
                (
                    id,
                    FastCopy {
                        resident,
                        evictable,
                    },
                )
            })
            .unzip();
        let decision = placing.placer.decide(&FastTier {
            now: shared.clock.now(),
            copies: &copies,
            grant: placing.grant,
            closing: state.shutdown,
        });
        for i in decision.evict {
            shared.evict(state, ids[i])?;
        }
        Ok(decision.placement)
    }

    /// Carry out the final `placement` of checkpoint `version` of `job`
    /// at `path`: a staged copy on the fast tier, or the capacity file
    /// straight away. Returns its handle.
    #[allow(clippy::too_many_arguments)]
    fn carry_out(
        &self,
        state: &mut State,
        path: &RelPath,
        job: &JobSpec,
        version: u64,
        placement: Placement,
        create_new: bool,
        ticket: Option<Ticket>,
    ) -> io::Result<u64> {
        let shared = &*self.shared;
        let now = shared.clock.now();
        // The name on the capacity tier (empty while staged).
        let placeholder = shared.create_on_capacity(path, create_new)?;
        state.stats.checkpoints += 1;
        let mut rec = CkptRecord {
            path: path.as_str().to_string(),
            job: job.id.clone(),
            version,
            bytes: 0,
            location: Location::Capacity,
            staged_id: None,
            created_unix_ns: unix_ns(),
            node: Some(shared.node.clone()),
        };
        let target = match placement {
            Placement::Stage => {
                let id = state.next_copy;
                state.next_copy += 1;
                rec.location = Location::Staged;
                rec.staged_id = Some(id);
                shared.write_rec(id, &rec, false)?;
                let file = shared.fast.open(
                    &data_path(id),
                    OpenOptions {
                        create: true,
                        truncate: true,
                        ..OpenOptions::default()
                    }
                    .private(),
                )?;
                shared.fast.sync_dir(&dir())?;
                let r = shared.catalog.put_ckpt(&rec);
                shared.note_catalog(state, r);
                state.copies.insert(
                    id,
                    Copy {
                        rec,
                        file,
                        len: 0,
                        writers: 1,
                        readers: 0,
                        generation: 0,
                        writing: 0,
                        demoting: false,
                        moving: false,
                        broken: None,
                        name_synced: false,
                        written: now,
                        accessed: now,
                    },
                );
                state.by_path.insert(path.clone(), id);
                state.writers += 1;
                Target::Copy(id)
            }
            direct => {
                // INVARIANT: the loop above ends only on a final placement.
                debug_assert!(direct.is_direct(), "{direct:?}");
                if direct == Placement::Spill {
                    state.stats.spills += 1;
                } else {
                    state.stats.cold_direct += 1;
                }
                let r = shared.catalog.put_ckpt(&rec);
                shared.note_catalog(state, r);
                Target::Capacity(placeholder)
            }
        };
        let created = matches!(target, Target::Capacity(_)).then(|| path.clone());
        Ok(add_handle(
            state,
            Handle {
                target,
                path: path.clone(),
                writing: true,
                hit: None,
                ticket,
                created,
            },
        ))
    }

    /// Read up to `len` bytes at `offset`.
    pub fn read(&self, fh: u64, offset: u64, len: u64) -> io::Result<Vec<u8>> {
        let (file, size, hit) = {
            let state = sluice_env::lock(&self.shared.state);
            let h = state.handles.get(&fh).ok_or_else(|| bad_handle(fh))?;
            match &h.target {
                Target::Copy(id) => {
                    let c = state.copies.get(id).ok_or_else(|| bad_handle(fh))?;
                    (Arc::clone(&c.file), Some(c.len), h.hit)
                }
                Target::Capacity(f) => (Arc::clone(f), None, h.hit),
            }
        };
        let size = match size {
            Some(s) => s,
            None => file.len()?,
        };
        if offset >= size {
            return Ok(Vec::new());
        }
        let n = usize::try_from(len.min(size - offset)).map_err(|_| invalid("read too large"))?;
        let mut buf = vec![0u8; n];
        let got = file.read_at(&mut buf, offset)?;
        buf.truncate(got);
        let mut state = sluice_env::lock(&self.shared.state);
        match hit {
            Some(true) => state.stats.hit_bytes += got as u64,
            Some(false) => state.stats.miss_bytes += got as u64,
            None => {}
        }
        Ok(buf)
    }

    /// Write `data` at `offset`, paced by the write throttle. A staged
    /// copy the fast tier has no room for is moved to the capacity tier
    /// ([`Checkpoints::move_when_full`]) and the write made there.
    pub fn write(&self, fh: u64, offset: u64, data: &[u8]) -> io::Result<()> {
        let shared = &*self.shared;
        let bytes = data.len() as u64;
        let end = offset
            .checked_add(bytes)
            .ok_or_else(|| invalid("write past the largest file offset"))?;
        loop {
            // The throttle: only writes to staged copies take tokens.
            let (id, file) = loop {
                let mut state = sluice_env::lock(&shared.state);
                let h = state.handles.get(&fh).ok_or_else(|| bad_handle(fh))?;
                let id = match &h.target {
                    Target::Capacity(f) => {
                        let f = Arc::clone(f);
                        drop(state);
                        f.write_at(data, offset)?;
                        sluice_env::lock(&shared.state).stats.direct_bytes += bytes;
                        return Ok(());
                    }
                    Target::Copy(id) => *id,
                };
                if state.copies.get(&id).is_some_and(|c| c.moving) {
                    // Its handles move to the capacity file first.
                    drop(wait_for(&shared.changed, state, MOVE_POLL));
                    continue;
                }
                let now = shared.clock.now();
                let (cap, _) = shared.rates(&state);
                match cap.and_then(|c| NonZeroU64::new(c as u64)) {
                    Some(rate) => state.write_bucket.set_rate(now, rate),
                    None => state.write_bucket.set_unlimited(),
                }
                match state.write_bucket.try_take(now, bytes) {
                    Ok(()) => {
                        // A copy published at an fsync or close (cached, its
                        // bytes on the capacity tier) is staged again first.
                        self.to_change(&mut state, id)?;
                        // Under the lock before the bytes change: a demotion
                        // finishing after this sees the change.
                        let c = state.copies.get_mut(&id).ok_or_else(|| bad_handle(fh))?;
                        c.generation += 1;
                        c.writing += 1;
                        break (id, Arc::clone(&c.file));
                    }
                    Err(at) => {
                        let wait = at.saturating_since(now);
                        state.stats.throttle_ns += u64::try_from(wait.as_nanos()).unwrap_or(0);
                        drop(state);
                        shared.clock.sleep(wait);
                    }
                }
            };
            let written = file.write_at(data, offset);
            let mut state = sluice_env::lock(&shared.state);
            let now = shared.clock.now();
            if let Some(c) = state.copies.get_mut(&id) {
                // Bumped again once the bytes changed: a publication or
                // demotion that took its snapshot while this write was in
                // flight copied the bytes before it (or some of them), and
                // must not mark the copy cached.
                c.generation += 1;
                c.writing -= 1;
                if written.is_ok() {
                    c.len = c.len.max(end);
                    c.rec.bytes = c.len;
                    c.accessed = now;
                }
            }
            shared.changed.notify_all();
            match written {
                Ok(()) => {}
                Err(e) if sluice_env::no_room(&e) => {
                    drop(state);
                    self.move_when_full(id, &e)?;
                    // Made again through the handle, now on the capacity file.
                    continue;
                }
                Err(e) => return Err(e),
            }
            state.stats.staged_written_bytes += bytes;
            let closed = state.planner.handle_written(now, bytes);
            record_periods(shared, &mut state, &closed);
            return Ok(());
        }
    }

    /// Move staged copy `id` to the capacity tier because a write found
    /// the fast tier full (`cause`): once no write of it is in flight, its
    /// bytes are copied to its capacity file, which is synced with its
    /// directory; then its handles write that file, and the copy and its
    /// record leave the fast tier as an eviction's do (docs/bbos.md, "A
    /// full fast tier"). Writes of the copy wait meanwhile. A copy
    /// already moved or removed is left alone; on an error the copy stays
    /// staged and the error names both.
    pub(super) fn move_when_full(&self, id: u64, cause: &io::Error) -> io::Result<()> {
        let shared = &*self.shared;
        let mut state = sluice_env::lock(&shared.state);
        match state.copies.get_mut(&id) {
            Some(c) if !c.moving => c.moving = true,
            // Another writer moves it: the caller writes through its
            // handle again once that move ended (if it failed, the caller
            // finds no room again and tries the move itself).
            Some(_) => {
                drop(wait_while(&shared.changed, state, Some(MOVE_POLL), |s| {
                    s.copies.get(&id).is_some_and(|c| c.moving)
                }));
                return Ok(());
            }
            None => return Ok(()),
        }
        let moved = loop {
            state = wait_while(&shared.changed, state, Some(MOVE_POLL), |s| {
                s.copies.get(&id).is_some_and(|c| c.writing > 0)
            });
            let Some(c) = state.copies.get(&id) else {
                return Ok(());
            };
            let (generation, len, path, src) =
                (c.generation, c.len, c.rec.path.clone(), Arc::clone(&c.file));
            drop(state);
            let copied = self.copy_to_capacity(&path, src.as_ref(), len);
            state = sluice_env::lock(&shared.state);
            let Some(c) = state.copies.get_mut(&id) else {
                return Ok(());
            };
            match copied {
                // A truncate or fallocate changed it meanwhile: again.
                Ok(_) if c.generation != generation || c.rec.path != path => continue,
                Ok(dst) => break Ok((dst, len, path)),
                Err(e) => break Err(e),
            }
        };
        let (dst, len, path) = match moved {
            Ok(moved) => moved,
            Err(e) => {
                if let Some(c) = state.copies.get_mut(&id) {
                    c.moving = false;
                }
                shared.changed.notify_all();
                return Err(io::Error::new(
                    e.kind(),
                    format!("the fast tier is full ({cause}), and moving the checkpoint to the capacity tier failed: {e}"),
                ));
            }
        };
        // The record goes first, durably: a crash after that finds no copy
        // to serve, so the capacity file, synced above, is the checkpoint;
        // before it, the copy is. Only then do the handles write the
        // capacity file.
        let dropped = shared
            .fast
            .remove_file(&rec_path(id))
            .and_then(|()| shared.fast.sync_dir(&dir()));
        if let Err(e) = dropped {
            let message = format!(
                "the fast tier is full ({cause}), and removing the checkpoint's copy from it after its move to the capacity tier failed: {e}"
            );
            if let Some(c) = state.copies.get_mut(&id) {
                c.moving = false;
                c.broken = Some(message.clone());
            }
            shared.changed.notify_all();
            let e = io::Error::new(e.kind(), message);
            shared
                .incidents
                .record_error("move when full", Some(&path), Some("fast"), &e);
            return Err(e);
        }
        let removed = shared.leave_fast_tier(&mut state, id, Some(&dst));
        state.stats.full_moves += 1;
        state.stats.full_moved_bytes += len;
        shared.changed.notify_all();
        drop(state);
        tracing::warn!(
            bytes = len,
            "checkpoint copy {id} moved to the capacity tier: the fast tier is full ({cause})"
        );
        if let Err(e) = removed {
            // Harmless: recovery removes a data file without a record.
            let e = io::Error::new(
                e.kind(),
                format!(
                    "remove checkpoint copy {id}'s data from the fast tier after its move: {e}"
                ),
            );
            shared
                .incidents
                .record_error("move when full", Some(&path), Some("fast"), &e);
        }
        Ok(())
    }

    /// Copy `len` bytes of `src` to `path`'s capacity file, cut it to
    /// that length, sync it and its directory. Returns the capacity file.
    pub(super) fn copy_to_capacity(
        &self,
        path: &str,
        src: &dyn BackendFile,
        len: u64,
    ) -> io::Result<Arc<dyn BackendFile>> {
        let shared = &*self.shared;
        let target = RelPath::new(path)?;
        let what = format!(
            "copy {path} to capacity tier {}",
            shared.capacity.describe()
        );
        let dst = shared
            .capacity
            .open(&target, OpenOptions::CREATE)
            .map_err(|e| with_context(e, &what))?;
        let (copied, _) = copy_range(src, dst.as_ref(), 0, len, &mut Vec::new())
            .map_err(|e| with_context(e, &what))?;
        if copied < len {
            return Err(with_context(
                io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("the staged copy holds {copied} of its {len} bytes"),
                ),
                &what,
            ));
        }
        shared
            .settle_on_capacity(dst.as_ref(), &target, len)
            .map_err(|e| with_context(e, &what))?;
        Ok(dst)
    }

    /// Make the file's writes durable, and its name: the capacity file
    /// of a checkpoint created there, or the placeholder of a staged copy
    /// (the mount finds a file by its capacity-tier name, so a copy whose
    /// placeholder a power cut took would be out of sight until its
    /// demotion, and a create of the name would replace it).
    pub fn fsync(&self, fh: u64) -> io::Result<()> {
        let (file, created, copy) = {
            let state = sluice_env::lock(&self.shared.state);
            let h = state.handles.get(&fh).ok_or_else(|| bad_handle(fh))?;
            match &h.target {
                Target::Copy(id) => {
                    let c = state.copies.get(id).ok_or_else(|| bad_handle(fh))?;
                    let name = (!c.name_synced).then(|| (*id, c.rec.path.clone()));
                    (Arc::clone(&c.file), None, name)
                }
                Target::Capacity(f) => (Arc::clone(f), h.created.clone(), None),
            }
        };
        file.sync_data()?;
        if let Some(path) = created {
            let parent = path.parent().unwrap_or_else(RelPath::root);
            self.shared.capacity.sync_dir(&parent)?;
        }
        if let Some((id, path)) = copy {
            let parent = RelPath::new(&path)?.parent().unwrap_or_else(RelPath::root);
            self.shared.capacity.sync_dir(&parent)?;
            let mut state = sluice_env::lock(&self.shared.state);
            if let Some(c) = state.copies.get_mut(&id) {
                // Renamed meanwhile: the new name's directory is synced
                // at the next fsync.
                c.name_synced = c.rec.path == path;
            }
        }
        if self.shared.options.publish_on_sync {
            self.publish(fh)?;
        }
        Ok(())
    }

    /// A close of handle `fh` (every `close(2)`, before it returns): under
    /// [`CkptOptions::publish_on_sync`] a staged copy's bytes are written
    /// to the capacity tier and synced, as close-to-open promises.
    pub fn close(&self, fh: u64) -> io::Result<()> {
        if self.shared.options.publish_on_sync {
            self.publish(fh)?;
        }
        Ok(())
    }

    /// Write the staged copy behind `fh` (if it is one) to its capacity
    /// file, cut that to the copy's length and sync it (and its
    /// directory); then the copy is cached (durably, and in the
    /// catalogue), as after a demotion, unless it changed meanwhile. Its
    /// next write stages it again.
    pub(super) fn publish(&self, fh: u64) -> io::Result<()> {
        let shared = &*self.shared;
        let (id, generation, path, src, len) = {
            let state = sluice_env::lock(&shared.state);
            let h = state.handles.get(&fh).ok_or_else(|| bad_handle(fh))?;
            let Target::Copy(id) = &h.target else {
                return Ok(());
            };
            let c = state.copies.get(id).ok_or_else(|| bad_handle(fh))?;
            if c.rec.location == Location::Cached {
                return Ok(()); // nothing written since it was published
            }
            (
                *id,
                c.generation,
                c.rec.path.clone(),
                Arc::clone(&c.file),
                c.len,
            )
        };
        // The fast-tier copy is synced too (a close syncs nothing else):
        // after a crash a `cached` record's copy serves restart reads.
        let what = format!("publish {path}");
        self.copy_to_capacity(&path, src.as_ref(), len)
            .and_then(|_| src.sync_data())
            .map_err(|e| with_context(e, &what))?;
        let mut state = sluice_env::lock(&shared.state);
        state.stats.published_bytes += len;
        let Some(c) = state.copies.get_mut(&id) else {
            return Ok(());
        };
        if c.generation != generation || c.writing > 0 || c.len != len || c.rec.path != path {
            return Ok(()); // written meanwhile (or being written): stays staged
        }
        c.rec.location = Location::Cached;
        let rec = c.rec.clone();
        if let Err(e) = shared.write_rec(id, &rec, true) {
            if let Some(c) = state.copies.get_mut(&id) {
                c.rec.location = Location::Staged;
            }
            return Err(with_context(e, &what));
        }
        let r = shared.catalog.put_ckpt(&rec);
        shared.note_catalog(&mut state, r);
        shared.changed.notify_all();
        Ok(())
    }

    /// Set the file's size.
    pub fn truncate(&self, fh: u64, size: u64) -> io::Result<()> {
        let mut state = sluice_env::lock(&self.shared.state);
        let h = state.handles.get(&fh).ok_or_else(|| bad_handle(fh))?;
        match &h.target {
            Target::Capacity(f) => f.set_len(size),
            Target::Copy(id) => {
                let id = *id;
                self.truncate_copy(&mut state, id, size)
            }
        }
    }

    /// `fallocate(2)` through handle `fh` (issue 37): on the capacity
    /// file of a checkpoint written there directly, or on the staged copy
    /// as a truncate changes it (staged again, its generation bumped so a
    /// demotion in flight starts over), its length read back.
    pub fn fallocate(
        &self,
        fh: u64,
        mode: sluice_env::Allocate,
        offset: u64,
        len: u64,
    ) -> io::Result<()> {
        loop {
            let mut state = sluice_env::lock(&self.shared.state);
            let h = state.handles.get(&fh).ok_or_else(|| bad_handle(fh))?;
            let id = match &h.target {
                Target::Capacity(f) => {
                    let f = Arc::clone(f);
                    drop(state);
                    return f.allocate(mode, offset, len);
                }
                Target::Copy(id) => *id,
            };
            self.to_change(&mut state, id)?;
            let c = state
                .copies
                .get_mut(&id)
                .ok_or_else(|| invalid("copy gone"))?;
            c.generation += 1;
            match c.file.allocate(mode, offset, len) {
                Err(e) if sluice_env::no_room(&e) => {
                    // As a write that finds no room: on the capacity file.
                    drop(state);
                    self.move_when_full(id, &e)?;
                    continue;
                }
                r => r?,
            }
            c.len = c.file.len()?;
            c.rec.bytes = c.len;
            return Ok(());
        }
    }

    /// Set the size of `path`'s fast-tier copy; `false` if it has none.
    pub fn truncate_path(&self, path: &RelPath, size: u64) -> io::Result<bool> {
        let mut state = sluice_env::lock(&self.shared.state);
        let Some(id) = state.by_path.get(path).copied() else {
            return Ok(false);
        };
        self.truncate_copy(&mut state, id, size)?;
        Ok(true)
    }

    pub(super) fn truncate_copy(&self, state: &mut State, id: u64, size: u64) -> io::Result<()> {
        self.to_change(state, id)?;
        let c = state
            .copies
            .get_mut(&id)
            .ok_or_else(|| invalid("copy gone"))?;
        c.file.set_len(size)?;
        c.len = size;
        c.rec.bytes = size;
        c.generation += 1;
        Ok(())
    }

    /// Close a handle: a writer's end lets the next job in and its file be
    /// demoted.
    pub fn release(&self, fh: u64) {
        let shared = &*self.shared;
        let mut state = sluice_env::lock(&shared.state);
        let Some(h) = state.handles.remove(&fh) else {
            return;
        };
        if let Target::Copy(id) = h.target {
            if h.writing {
                if let Some(c) = state.copies.get_mut(&id) {
                    c.writers = c.writers.saturating_sub(1);
                    let rec = c.rec.clone();
                    let r = shared.catalog.put_ckpt(&rec);
                    shared.note_catalog(&mut state, r);
                }
                state.writers = state.writers.saturating_sub(1);
            } else if let Some(c) = state.copies.get_mut(&id) {
                c.readers = c.readers.saturating_sub(1);
            }
        }
        if let Some(t) = h.ticket {
            admit(&mut state, t);
        }
        shared.changed.notify_all();
    }

    /// Forget `path`'s fast-tier copy and catalogue record (the file is
    /// being removed; the caller removes the capacity name).
    pub fn unlink(&self, path: &RelPath) -> io::Result<()> {
        let shared = &*self.shared;
        let mut state = sluice_env::lock(&shared.state);
        if let Some(id) = state.by_path.get(path).copied() {
            shared.remove_copy(&mut state, id)?;
        }
        let r = shared.catalog.remove_ckpt(path.as_str()).map(|_| ());
        shared.note_catalog(&mut state, r);
        Ok(())
    }

    /// Move copies at or under `from` to `to` (durably, before the caller
    /// renames on the capacity tier), replacing a copy at `to`.
    ///
    /// A copy moved over another one takes a new id (its record written
    /// under it, then its data file renamed to it), and only then is the
    /// replaced copy removed: a crash in between leaves two records of
    /// `to`, and recovery keeps the newer, the highest id. Removing the
    /// replaced copy first lost it, acknowledged, when the crash came
    /// before the moved record was durable.
    pub fn rename(&self, from: &RelPath, to: &RelPath) -> io::Result<()> {
        let shared = &*self.shared;
        let mut state = sluice_env::lock(&shared.state);
        let replaced = state
            .by_path
            .get(to)
            .copied()
            .filter(|&old| state.by_path.get(from) != Some(&old));
        let moved: Vec<(RelPath, RelPath, u64)> = state
            .by_path
            .within(from)
            .filter_map(|(p, &id)| p.rebase(from, to).map(|n| (p.clone(), n, id)))
            .collect();
        let mut over = None;
        for (old, new, id) in moved {
            let Some(c) = state.copies.get_mut(&id) else {
                continue;
            };
            c.rec.path = new.as_str().to_string();
            c.generation += 1;
            c.name_synced = false;
            let rec = c.rec.clone();
            state.by_path.remove(&old);
            let renumbered = if replaced.is_some() && new == *to {
                // `by_path` keeps the replaced copy at `to` until it goes.
                let id = shared.renumber(&mut state, id, rec)?;
                over = Some(id);
                state.copies.get(&id).map(|c| c.rec.clone())
            } else {
                shared.write_rec(id, &rec, true)?;
                state.by_path.insert(new.clone(), id);
                None
            };
            let r = shared
                .catalog
                .rename_ckpt(old.as_str(), new.as_str())
                .map(|_| ());
            shared.note_catalog(&mut state, r);
            if let Some(rec) = renumbered {
                let r = shared.catalog.put_ckpt(&rec);
                shared.note_catalog(&mut state, r);
            }
        }
        if let Some(old) = replaced {
            shared.remove_copy(&mut state, old)?;
        }
        if let Some(id) = over {
            state.by_path.insert(to.clone(), id);
        }
        // Handles follow their file to its new name (a handle of a file
        // the rename replaced keeps its old name, now another file's: it
        // can only make a later open join rather than begin, which writes
        // in place as any open does).
        for h in state.handles.values_mut() {
            if let Some(new) = h.path.rebase(from, to) {
                h.path = new;
            }
        }
        Ok(())
    }
}

impl Shared {
    /// Gives copy `id` the next id, durably, with record `rec`; returns
    /// the new id. The record is written under the new id first (a crash
    /// then finds it without data and drops it), then the data file is
    /// renamed to it and the directory synced; the old record, left
    /// without data, is removed (recovery would drop it too). The copy
    /// keeps its file, handles follow it, and a demotion or publication in
    /// flight under the old id finds no copy there and leaves it staged.
    pub(super) fn renumber(
        &self,
        state: &mut State,
        id: u64,
        mut rec: CkptRecord,
    ) -> io::Result<u64> {
        let new = state.next_copy;
        state.next_copy += 1;
        rec.staged_id = Some(new);
        self.write_rec(new, &rec, true)?;
        self.fast.rename(&data_path(id), &data_path(new))?;
        self.fast.sync_dir(&dir())?;
        if let Some(mut c) = state.copies.remove(&id) {
            c.rec = rec;
            state.copies.insert(new, c);
        }
        for h in state.handles.values_mut() {
            if matches!(h.target, Target::Copy(t) if t == id) {
                h.target = Target::Copy(new);
            }
        }
        match self.fast.remove_file(&rec_path(id)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(new),
        }
    }
}

/// Ends ticket `t`; the tickets it admits are marked for their waiters.
pub(super) fn admit(state: &mut State, t: Ticket) {
    for next in state.scheduler.finish(t) {
        state.admitted.insert(next);
    }
}
