//! The source's pipeline once connected: the announcer (files to
//! objects, unchanged files skipped), the I/O threads reading objects,
//! the spill mover, the senders and the progress reporter, sharing one
//! `Core` of queues and counters.

use super::*;

/// What identifies and checks one object on the wire.
#[derive(Clone, Copy)]
pub(super) struct Block {
    pub(super) file: u32,
    pub(super) offset: u64,
    pub(super) len: u64,
    pub(super) crc: u32,
}

/// A block in a memory slot, ready to send.
pub(super) struct Ready {
    pub(super) block: Block,
    pub(super) buf: AlignedBuf,
}

/// A block in a spill slot, waiting for a memory slot.
pub(super) struct Spilled {
    pub(super) block: Block,
    pub(super) slot: u32,
}

pub(super) struct Live {
    pub(super) entry: usize,
    pub(super) file: Arc<SourceFile>,
    /// Objects not yet acknowledged.
    pub(super) left: usize,
    pub(super) crcs: BTreeMap<u64, (u64, u32)>,
    /// The file changed while it was read: what changed.
    pub(super) changed: Option<String>,
}

pub(super) struct Announced {
    pub(super) entry: usize,
    pub(super) file: Arc<SourceFile>,
    pub(super) objects: Vec<Object>,
}

pub(super) struct State {
    pub(super) sched: Scheduler,
    pub(super) pool: SlotPool,
    /// Buffers free for reuse: a few hot ones, not one per slot.
    pub(super) bufs: Vec<AlignedBuf>,
    pub(super) spill_free: Vec<u32>,
    pub(super) send_q: VecDeque<Ready>,
    pub(super) spill_q: VecDeque<Spilled>,
    pub(super) inflight: HashMap<(u32, u64), Block>,
    pub(super) live: HashMap<u32, Live>,
    pub(super) waiting: HashMap<u32, Announced>,
    pub(super) open: usize,
    pub(super) finished: usize,
    pub(super) fatal: Option<String>,
    pub(super) closing: bool,
    pub(super) summary: Summary,
    /// Targets that objects were queued on.
    pub(super) targets: HashSet<u32>,
    /// `StatReply` entries by request number, until the announcer takes them.
    pub(super) stat_replies: HashMap<u32, Vec<DestStat>>,
}

pub(super) struct Core {
    pub(super) state: Mutex<State>,
    pub(super) cv: Condvar,
    pub(super) entries: Vec<Entry>,
    /// Directories then links: `EntryDone` request numbers below
    /// `dirs.len()` are directories.
    pub(super) dirs: Vec<String>,
    pub(super) links: Vec<(String, String)>,
    /// `HOST:PORT` of the sink, for messages.
    pub(super) sink: String,
    pub(super) journal: Option<Journal>,
    pub(super) progress: Progress,
    pub(super) layout: Arc<dyn LayoutProvider>,
    pub(super) spill: Option<File>,
    /// Blocks read into memory and waiting for a sender, at most
    /// ([`READY_PER_CONNECTION`] per connection).
    pub(super) ready_max: usize,
    pub(super) start: Instant,
}

/// Blocks that may wait in memory for each connection's sender: enough to
/// keep it busy, few enough that the buffers stay in the CPU's cache (a
/// read-ahead of 256 blocks faulted in 256 MiB of fresh pages and copied
/// into memory that was never cached; docs/lads.md, "Line rate").
pub(super) const READY_PER_CONNECTION: usize = 4;

impl Core {
    pub(super) fn now(&self) -> Time {
        Time::from_nanos(u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }

    pub(super) fn fail(&self, why: String) {
        let mut st = sluice_env::lock(&self.state);
        st.fatal.get_or_insert(why);
        drop(st);
        self.cv.notify_all();
    }

    pub(super) fn stopped(st: &State) -> bool {
        st.fatal.is_some() || st.closing
    }
}

/// Make the directories and links, then announce every file not already
/// done or unchanged at the sink; returns how many requests were sent or
/// failed before sending (what the caller waits for).
pub(super) fn announce(
    core: &Core,
    writer: &Writer,
    files_in_flight: usize,
    compare: Compare,
) -> usize {
    let mut count = 0;
    for (req, path) in core.dirs.iter().enumerate() {
        count += 1;
        let msg = Message::MakeDir {
            req: req as u32,
            path: path.clone(),
        };
        if let Err(err) = writer.message(&msg) {
            core.fail(network_error(&core.sink, "sending", &err));
            return count;
        }
    }
    for (i, (path, target)) in core.links.iter().enumerate() {
        count += 1;
        let msg = Message::Symlink {
            req: (core.dirs.len() + i) as u32,
            path: path.clone(),
            target: target.clone(),
        };
        if let Err(err) = writer.message(&msg) {
            core.fail(network_error(&core.sink, "sending", &err));
            return count;
        }
    }
    let mut pending = Vec::new();
    for (idx, e) in core.entries.iter().enumerate() {
        if core.progress.files.contains(&e.key) {
            sluice_env::lock(&core.state).summary.files_already_done += 1;
        } else {
            pending.push(idx);
        }
    }
    for (batch, chunk) in pending.chunks(MAX_STAT).enumerate() {
        let changed = match compare {
            Compare::Never => chunk.to_vec(),
            Compare::SizeAndMtime | Compare::Checksum => {
                match unchanged(core, writer, batch as u32, chunk, compare) {
                    Some(changed) => changed,
                    None => return count,
                }
            }
        };
        for idx in changed {
            count += 1;
            if !announce_file(core, writer, files_in_flight, idx) {
                return count;
            }
        }
    }
    count
}

/// Ask the sink what it holds for the files `chunk` (entry indices) and
/// return those to send; the others are counted unchanged. `None` when
/// the transfer stopped.
pub(super) fn unchanged(
    core: &Core,
    writer: &Writer,
    req: u32,
    chunk: &[usize],
    compare: Compare,
) -> Option<Vec<usize>> {
    let files = chunk
        .iter()
        .map(|&i| (core.entries[i].rel.clone(), core.entries[i].size))
        .collect();
    let msg = Message::Stat {
        req,
        checksum: compare == Compare::Checksum,
        files,
    };
    if let Err(err) = writer.message(&msg) {
        core.fail(network_error(&core.sink, "sending", &err));
        return None;
    }
    let mut st = sluice_env::lock(&core.state);
    let found = loop {
        if st.fatal.is_some() {
            return None;
        }
        if let Some(found) = st.stat_replies.remove(&req) {
            break found;
        }
        st = sluice_env::wait(&core.cv, st);
    };
    drop(st);
    if found.len() != chunk.len() {
        core.fail(format!(
            "the sink answered {} of {} paths in a Stat",
            found.len(),
            chunk.len()
        ));
        return None;
    }
    let mut send = Vec::new();
    for (&idx, dest) in chunk.iter().zip(found) {
        let e = &core.entries[idx];
        let same = match dest {
            DestStat::Absent => false,
            DestStat::File {
                size,
                mtime_sec,
                mtime_nsec,
                crc,
            } => {
                size == e.size
                    && match compare {
                        Compare::SizeAndMtime => {
                            (mtime_sec, mtime_nsec) == (e.mtime_sec, e.mtime_nsec)
                        }
                        // A file we cannot read now is sent, and its read
                        // reports the error.
                        Compare::Checksum => {
                            crc.is_some()
                                && File::open(&e.src)
                                    .and_then(|f| crate::sink::crc_of(&f, e.size))
                                    .ok()
                                    == crc
                        }
                        Compare::Never => false,
                    }
            }
        };
        if same {
            let mut st = sluice_env::lock(&core.state);
            st.summary.files_unchanged += 1;
            st.summary.bytes_unchanged += e.size;
        } else {
            send.push(idx);
        }
    }
    Some(send)
}

/// Open, lay out and announce file `idx`, waiting for room among the
/// files in flight; false when the transfer stopped.
pub(super) fn announce_file(
    core: &Core,
    writer: &Writer,
    files_in_flight: usize,
    idx: usize,
) -> bool {
    let e = &core.entries[idx];
    let prepared = SourceFile::open(&e.src, core.layout.direct_reads())
        .map_err(|err| format!("{}: {err}", e.src.display()))
        .and_then(|f| {
            core.layout
                .layout(&e.src, e.size)
                .map(|l| (f, bounded(l.objects(FileId(0), e.size))))
                .map_err(|err| format!("{}: layout: {err}", e.src.display()))
        });
    let (file, objects) = match prepared {
        Ok(p) => p,
        Err(why) => {
            let mut st = sluice_env::lock(&core.state);
            st.summary.failed.push(why);
            st.finished += 1;
            drop(st);
            core.cv.notify_all();
            return true;
        }
    };
    let mut st = sluice_env::lock(&core.state);
    while st.fatal.is_none() && st.open >= files_in_flight {
        st = sluice_env::wait(&core.cv, st);
    }
    if st.fatal.is_some() {
        return false;
    }
    st.open += 1;
    let req = idx as u32;
    st.waiting.insert(
        req,
        Announced {
            entry: idx,
            file: Arc::new(file),
            objects,
        },
    );
    drop(st);
    let msg = Message::NewFile {
        req,
        path: e.rel.clone(),
        size: e.size,
        mode: e.mode,
        mtime_sec: e.mtime_sec,
        mtime_nsec: e.mtime_nsec,
        resume: core.progress.objects.contains_key(&e.key),
    };
    if let Err(err) = writer.message(&msg) {
        core.fail(network_error(&core.sink, "sending", &err));
        return false;
    }
    true
}

pub(super) fn journal_note(core: &Core, r: io::Result<()>) {
    if let Err(e) = r {
        core.fail(format!("journal: {e}"));
    }
}

pub(super) fn read_loop(core: &Core, mut reader: tls::Reader, writer: &Writer) {
    let mut buf = Vec::new();
    loop {
        let msg = match wire::read_message(&mut reader, &mut buf) {
            Ok(Some(m)) => m,
            Ok(None) | Err(_) if sluice_env::lock(&core.state).closing => return,
            Ok(None) => return core.fail(format!("the sink {} closed the connection", core.sink)),
            Err(e) => return core.fail(network_error(&core.sink, "receiving", &e)),
        };
        match msg {
            Message::StatReply { req, entries } => {
                sluice_env::lock(&core.state)
                    .stat_replies
                    .insert(req, entries);
                core.cv.notify_all();
            }
            Message::EntryDone { req, failure } => entry_done(core, req, failure),
            Message::FileId { req, file, resumed } => file_id(core, writer, req, file, resumed),
            Message::BlockDone { file, offset } => block_done(core, writer, file, offset),
            Message::FileOk { file } => file_finished(core, file, None),
            Message::FileFailed { file, reason } => file_finished(core, file, Some(reason)),
            Message::Error { message, .. } => {
                return core.fail(format!("the sink stopped the transfer: {message}"))
            }
            other => return core.fail(format!("unexpected {} from the sink", other.name())),
        }
    }
}

pub(super) fn entry_done(core: &Core, req: u32, failure: Option<String>) {
    let mut st = sluice_env::lock(&core.state);
    let req = req as usize;
    if req >= core.dirs.len() + core.links.len() {
        drop(st);
        return core.fail(format!("EntryDone for unknown request {req}"));
    }
    st.finished += 1;
    match failure {
        Some(why) => st.summary.failed.push(why),
        None if req < core.dirs.len() => st.summary.dirs += 1,
        None => st.summary.links += 1,
    }
    drop(st);
    core.cv.notify_all();
}

pub(super) fn file_id(core: &Core, writer: &Writer, req: u32, id: u32, resumed: bool) {
    let mut st = sluice_env::lock(&core.state);
    let Some(a) = st.waiting.remove(&req) else {
        drop(st);
        return core.fail(format!("FileId for unknown request {req}"));
    };
    if st.live.contains_key(&id) {
        drop(st);
        return core.fail(format!("the sink reused file id {id}"));
    }
    let entry = &core.entries[a.entry];
    let mut crcs = BTreeMap::new();
    let earlier = core.progress.objects.get(&entry.key);
    let mut queued = 0;
    for mut o in a.objects {
        if resumed {
            if let Some(&(len, crc)) = earlier.and_then(|m| m.get(&o.offset)) {
                if len == o.len {
                    crcs.insert(o.offset, (len, crc));
                    st.summary.objects_resumed += 1;
                    continue;
                }
            }
        }
        o.file = FileId(u64::from(id));
        st.targets.insert(o.target.0);
        st.sched.push(o);
        queued += 1;
    }
    st.live.insert(
        id,
        Live {
            entry: a.entry,
            file: a.file,
            left: queued,
            crcs,
            changed: None,
        },
    );
    drop(st);
    if !resumed && earlier.is_some() {
        if let Some(j) = &core.journal {
            journal_note(core, j.forget(&entry.key));
        }
    }
    core.cv.notify_all();
    if queued == 0 {
        file_done(core, writer, id);
    }
}

pub(super) fn block_done(core: &Core, writer: &Writer, id: u32, offset: u64) {
    let mut st = sluice_env::lock(&core.state);
    let Some(Block { len, crc, .. }) = st.inflight.remove(&(id, offset)) else {
        drop(st);
        return core.fail(format!(
            "BlockDone for a block not in flight ({id}, {offset})"
        ));
    };
    st.pool.release(Slot::Memory);
    st.summary.bytes += len;
    st.summary.objects += 1;
    let Some(live) = st.live.get_mut(&id) else {
        drop(st);
        return core.fail(format!("BlockDone for unknown file {id}"));
    };
    live.crcs.insert(offset, (len, crc));
    live.left -= 1;
    let (last, key) = (live.left == 0, core.entries[live.entry].key.clone());
    drop(st);
    core.cv.notify_all();
    if let Some(j) = &core.journal {
        journal_note(core, j.object(&key, offset, len, crc));
    }
    if last {
        file_done(core, writer, id);
    }
}

pub(super) fn file_done(core: &Core, writer: &Writer, id: u32) {
    let mut st = sluice_env::lock(&core.state);
    let Some(live) = st.live.get(&id) else { return };
    let (entry, file, seen) = (live.entry, Arc::clone(&live.file), live.changed.clone());
    drop(st);
    // Checked after the last object was read: a file that changed since
    // the walk is dropped at the sink, not put in place torn.
    if let Some(why) = seen.or_else(|| core.entries[entry].changed(&file.file)) {
        st = sluice_env::lock(&core.state);
        if let Some(live) = st.live.get_mut(&id) {
            live.changed = Some(why.clone());
        }
        drop(st);
        if let Err(e) = writer.message(&Message::FileCancel {
            file: id,
            reason: why,
        }) {
            core.fail(network_error(&core.sink, "sending", &e));
        }
        return;
    }
    st = sluice_env::lock(&core.state);
    let Some(live) = st.live.get(&id) else { return };
    let mut expect = 0u64;
    for (&off, &(len, _)) in &live.crcs {
        if off != expect {
            let why = format!(
                "{}: objects do not tile the file at {expect}",
                core.entries[live.entry].src.display()
            );
            drop(st);
            return core.fail(why);
        }
        expect += len;
    }
    let pieces: Vec<(u64, u32)> = live.crcs.values().copied().collect();
    let size = core.entries[live.entry].size;
    drop(st);
    let crc = crate::crc::combine_all(pieces);
    if let Err(e) = writer.message(&Message::FileDone {
        file: id,
        size,
        crc,
    }) {
        core.fail(network_error(&core.sink, "sending", &e));
    }
}

pub(super) fn file_finished(core: &Core, id: u32, failure: Option<String>) {
    let mut st = sluice_env::lock(&core.state);
    let Some(live) = st.live.remove(&id) else {
        drop(st);
        return core.fail(format!("result for unknown file {id}"));
    };
    st.open -= 1;
    st.finished += 1;
    let key = core.entries[live.entry].key.clone();
    match (&failure, live.changed) {
        (None, _) => st.summary.files += 1,
        // The sink's answer to our `FileCancel`: report what changed.
        (Some(_), Some(changed)) => st.summary.changed.push(changed),
        (Some(reason), None) => st.summary.failed.push(reason.clone()),
    }
    drop(st);
    core.cv.notify_all();
    if let Some(j) = &core.journal {
        journal_note(
            core,
            if failure.is_none() {
                j.file(&key)
            } else {
                j.forget(&key)
            },
        );
    }
}

pub(super) fn io_loop(core: &Core, writer: &Writer) {
    let mut scratch = AlignedBuf::new();
    loop {
        let mut st = sluice_env::lock(&core.state);
        let (object, slot) = loop {
            if Core::stopped(&st) {
                return;
            }
            // At most `ready_max` blocks wait in memory for a sender; past
            // that a read goes to the spill file, if there is one, or
            // waits. The other memory slots are for blocks in flight, which
            // hold a slot but no buffer (it was copied into the socket).
            let ready_full = st.send_q.len() >= core.ready_max;
            if !ready_full || core.spill.is_some() {
                if let Some(object) = st.sched.dispatch() {
                    let slot = if ready_full {
                        st.pool.reserve_spill().then_some(Slot::Spill)
                    } else {
                        st.pool.reserve()
                    };
                    if let Some(slot) = slot {
                        break (object, slot);
                    }
                    st.sched.requeue(object);
                }
            }
            st = sluice_env::wait(&core.cv, st);
        };
        let id = object.file.0 as u32;
        let Some(live) = st.live.get(&id) else {
            drop(st);
            return core.fail(format!("object of unknown file {id}"));
        };
        let (file, entry) = (Arc::clone(&live.file), live.entry);
        let path = core.entries[entry].src.clone();
        let mut buf = match slot {
            Slot::Memory => st.bufs.pop().unwrap_or_default(),
            Slot::Spill => std::mem::take(&mut scratch),
        };
        drop(st);
        buf.set_len(object.len as usize);
        let started = core.now();
        let read = core
            .layout
            .read_object(&path, &file, &object, buf.as_mut_slice());
        let finished = core.now();
        if let Err(e) = read {
            // A file that shrank (or was otherwise changed) is that file's
            // failure; any other read error stops the transfer.
            let Some(why) = core.entries[entry].changed(&file.file) else {
                return core.fail(format!(
                    "{}: read at {}: {e}",
                    path.display(),
                    object.offset
                ));
            };
            let mut st = sluice_env::lock(&core.state);
            st.sched.complete(&object, started, finished);
            st.pool.release(slot);
            match slot {
                Slot::Memory => st.bufs.push(buf),
                Slot::Spill => scratch = buf,
            }
            let last = st.live.get_mut(&id).is_some_and(|live| {
                live.changed.get_or_insert(why);
                live.left -= 1;
                live.left == 0
            });
            drop(st);
            core.cv.notify_all();
            if last {
                file_done(core, writer, id);
            }
            continue;
        }
        let crc = crc32c::crc32c(buf.as_slice());
        let mut st = sluice_env::lock(&core.state);
        st.sched.complete(&object, started, finished);
        let block = Block {
            file: id,
            offset: object.offset,
            len: object.len,
            crc,
        };
        match slot {
            Slot::Memory => st.send_q.push_back(Ready { block, buf }),
            Slot::Spill => {
                let idx = st.spill_free.pop().expect("a spill slot per reservation");
                drop(st);
                let spill = core
                    .spill
                    .as_ref()
                    .expect("spill slots only with a spill file");
                if let Err(e) =
                    spill.write_all_at(buf.as_slice(), u64::from(idx) * MAX_OBJECT as u64)
                {
                    return core.fail(format!("spill: {e}"));
                }
                scratch = buf;
                st = sluice_env::lock(&core.state);
                st.spill_q.push_back(Spilled { block, slot: idx });
            }
        }
        drop(st);
        core.cv.notify_all();
    }
}

pub(super) fn spill_loop(core: &Core) {
    let spill = core
        .spill
        .as_ref()
        .expect("spill thread only with a spill file");
    loop {
        let mut st = sluice_env::lock(&core.state);
        let item = loop {
            if Core::stopped(&st) {
                return;
            }
            if !st.spill_q.is_empty()
                && st.send_q.len() < core.ready_max
                && st.pool.reserve_memory()
            {
                break st.spill_q.pop_front().expect("not empty");
            }
            st = sluice_env::wait(&core.cv, st);
        };
        let mut buf = st.bufs.pop().unwrap_or_default();
        drop(st);
        buf.set_len(item.block.len as usize);
        if let Err(e) =
            spill.read_exact_at(buf.as_mut_slice(), u64::from(item.slot) * MAX_OBJECT as u64)
        {
            return core.fail(format!("spill: {e}"));
        }
        let mut st = sluice_env::lock(&core.state);
        st.pool.release(Slot::Spill);
        st.spill_free.push(item.slot);
        st.send_q.push_back(Ready {
            block: item.block,
            buf,
        });
        drop(st);
        core.cv.notify_all();
    }
}

pub(super) fn send_loop(core: &Core, writer: &Writer) {
    loop {
        let mut st = sluice_env::lock(&core.state);
        let ready = loop {
            if Core::stopped(&st) {
                return;
            }
            if let Some(r) = st.send_q.pop_front() {
                break r;
            }
            st = sluice_env::wait(&core.cv, st);
        };
        let b = ready.block;
        st.inflight.insert((b.file, b.offset), b);
        drop(st);
        // Room in the ready queue for a reader.
        core.cv.notify_all();
        let header = wire::block_header(b.file, b.offset, b.crc, ready.buf.len());
        if let Err(e) = writer.send(&[&header, ready.buf.as_slice()]) {
            return core.fail(network_error(&core.sink, "sending", &e));
        }
        sluice_env::lock(&core.state).bufs.push(ready.buf);
    }
}

/// Tell `observer` how far the transfer is every 250 ms until it stops,
/// then once more with `ended`.
pub(super) fn progress_loop(core: &Core, observer: &(dyn Fn(&SendProgress) + Send + Sync)) {
    let (bytes_total, bytes_earlier) = SendProgress::totals(&core.entries, &core.progress);
    let files_total = core.entries.len() as u64;
    loop {
        let st = sluice_env::lock(&core.state);
        let stop = Core::stopped(&st);
        let now = SendProgress::of(&st.summary, bytes_total, bytes_earlier, files_total, stop);
        drop(st);
        observer(&now);
        if stop {
            return;
        }
        thread::sleep(Duration::from_millis(250));
    }
}
