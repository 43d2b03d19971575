//! One LADS bulk transfer (seed 003) as a deterministic discrete-event
//! model, driving the policy crate's scheduler (`sluice_policy::lads`): the
//! same [`Scheduler`], [`SlotPool`] and [`StripeLayout`] that `sluice xfer`
//! runs, here in virtual time.
//!
//! The pipeline, after the paper's §3 (steps 1–6):
//!
//! 1. **Source.** A master opens files one after another (each open costs
//!    `metadata`: open, layout query and the NEW FILE / FILE ID round trip)
//!    and pushes every object of an open file into the source
//!    [`Scheduler`]; at most `open_files_max` files are open (a file closes
//!    at the source when its last object has been read). In
//!    [`Mode::FileAtATime`] (the bbcp model) one file is open at a time: the
//!    next opens only when the current one has been read, so files go one
//!    by one.
//! 2. An idle source I/O thread needs a free buffer slot ([`SlotPool`]:
//!    memory first, then SSD spill), takes an object from
//!    [`Scheduler::dispatch`] and reads it from its target with direct I/O.
//!    The read time (issue to completion) is reported with
//!    [`Scheduler::complete`]. An object read into a spill slot is then
//!    written to the SSD (the thread waits); a single SSD thread copies
//!    spilled objects back into memory slots as they free up (SSD read)
//!    before they can be sent.
//! 3. **Network.** The source sends NEW BLOCK (one link latency); the sink
//!    reserves a slot of its buffer (or queues the request, FIFO) and
//!    RMA-reads the object over the [`Link`] (serialised, FIFO); BLOCK DONE
//!    (one latency) frees the source's memory slot.
//! 4. **Sink.** The object joins the sink's own [`Scheduler`] (its target is
//!    the sink file's target). An idle sink I/O thread writes it with
//!    buffered I/O: a copy into the page cache at `page_cache_bytes_per_s`,
//!    admitted while the host's dirty bytes stay within
//!    `dirty_limit_bytes`; past the limit the writer waits, FIFO, until
//!    writeback frees room. The write time the sink scheduler samples is
//!    issue to copy end, wait included: it measures the page cache, not the
//!    target, which is why congestion-aware scheduling cannot see a
//!    congested sink target (the paper's §4.3 finding). The write frees the
//!    sink slot; the last object of a file costs the thread a close
//!    (`metadata`).
//! 5. **Writeback.** Each sink target writes its dirty objects back in
//!    FIFO order, one at a time, with the target service-time model.
//!
//! **Targets** serve one request at a time, FIFO. A request's service time
//! is `(fs_overhead + positioning + transfer) × congestion factor`: the
//! transfer at the disk's media rate at that offset, and the positioning a
//! seek plus a uniform rotational delay from the shared HDD model's
//! geometry ([`Hdd::seek_time`], [`Hdd::media_bytes_per_s`]) — except for
//! a request that continues the previous one on that disk and is issued
//! within `streaming_gap` of its completion, which streams (the drive's
//! read-ahead). That is why one thread reading a file back to back (bbcp)
//! streams while round-robin visits do not (the paper's Fig. 7 note on
//! read-ahead).
//!
//! **Congestion** ([`Congestion`]): periods of `busy` during which
//! `targets` of a side's targets (a subset drawn from the seed, anew each
//! period) serve `factor` times slower, separated by `idle` gaps. A
//! service's factor is fixed when it starts.
//!
//! The run ends when the sink has written (into its page cache) and closed
//! every file: that is when the tool exits; writeback still pending is not
//! counted. Every random choice (rotational delays, congested subsets)
//! comes from the seed, so a configuration and seed give one result.
//!
//! INVARIANTS: every object is read once, sent once and written once
//! (checked: [`TransferResult::duplicates`] counts violations and
//! [`TransferResult::files_complete`] the files whose every byte arrived);
//! a target serves at most one request at a time; the sink's slots in use
//! never exceed its buffer; dirty bytes exceed the limit only for a single
//! object larger than the limit. Every queue is bounded by a configured
//! count: a target's queue and the dirty-limit waiters by the threads, the
//! SSD queue by the spill slots, the sink's waiting NEW BLOCKs by the
//! source's slots, the schedulers' queues by the open files.

use std::collections::VecDeque;
use std::time::Duration;

use sluice_devices::{Hdd, HddConfig, IoKind, Link, LinkConfig, Ssd, SsdConfig};
use sluice_policy::lads::{
    Mode, Object, Scheduler, SchedulerConfig, SchedulerStats, Slot, SlotPool, StripeLayout,
    TargetId,
};
use sluice_policy::{FileId, Time};

use crate::cluster::SimError;
use crate::event::EventQueue;
use crate::rng::SimRng;

mod model;

pub use model::*;

const MIB: u64 = 1024 * 1024;

/// One end of the transfer: its file system's targets and its I/O threads.
#[derive(Clone, Debug, PartialEq)]
pub struct Endpoint {
    /// Storage targets (OSTs) of the file system.
    pub targets: u32,
    /// I/O threads.
    pub threads: u32,
    /// In-memory (RMA) buffer, in objects.
    pub buffer_slots: u32,
    /// How the I/O threads pick objects.
    pub scheduler: SchedulerConfig,
    /// Service-time model of every target.
    pub target: TargetModel,
    /// Congestion of the targets.
    pub congestion: Congestion,
}

/// Everything one transfer depends on.
#[derive(Clone, Debug, PartialEq)]
pub struct TransferConfig {
    /// Size of each file, in bytes (none may be 0).
    pub files: Vec<u64>,
    /// Object (stripe) size: the unit of scheduling and transfer.
    pub object_bytes: u64,
    /// Targets each file is striped over (1 in the paper's testbed runs).
    /// File `k`'s stripe `j` is on target `(k + j) mod targets`, on both
    /// sides; a target's objects lie on its disk in file order.
    pub stripe_count: u32,
    /// The source (reads with direct I/O).
    pub source: Endpoint,
    /// The sink (writes with buffered I/O).
    pub sink: Endpoint,
    /// Source spill slots on the SSD, in objects (0: no spill buffer).
    pub spill_slots: u32,
    /// The source's spill SSD.
    pub ssd: SsdConfig,
    /// The network between source and sink (RMA data; control messages pay
    /// its latency only).
    pub link: LinkConfig,
    /// One metadata operation: a file open (both ends and the NEW FILE /
    /// FILE ID round trip) or a close at the sink.
    pub metadata: Duration,
    /// Files open at the source at once (1 in file-at-a-time mode).
    pub open_files_max: u32,
    /// Dirty page-cache bytes the sink host holds before writers wait.
    pub dirty_limit_bytes: u64,
    /// Rate of one buffered write's copy into the page cache.
    pub page_cache_bytes_per_s: f64,
    /// Seed of every random choice.
    pub seed: u64,
}

impl TransferConfig {
    /// The paper's testbed (§4.1) moving `files` with `threads` I/O threads
    /// per side under `scheduler`: 16 targets per side, 1 MiB objects,
    /// stripe count 1, 256 MiB buffers at both ends, no spill, QDR
    /// InfiniBand (3.2 GB/s, 5 µs), no congestion.
    pub fn testbed(files: Vec<u64>, threads: u32, scheduler: SchedulerConfig) -> TransferConfig {
        let endpoint = Endpoint {
            targets: 16,
            threads,
            buffer_slots: 256,
            scheduler,
            target: TargetModel::testbed(),
            congestion: Congestion::NONE,
        };
        TransferConfig {
            files,
            object_bytes: MIB,
            stripe_count: 1,
            source: endpoint.clone(),
            sink: endpoint,
            spill_slots: 0,
            ssd: SsdConfig {
                // Fusion-io ioDrive Duo: two modules of 750 / 500 MB/s.
                latency: Duration::from_micros(30),
                read_bytes_per_s: 750e6,
                write_bytes_per_s: 500e6,
                channels: 2,
            },
            link: LinkConfig {
                bytes_per_s: 3.2e9,
                latency: Duration::from_micros(5),
            },
            metadata: Duration::from_millis(1),
            open_files_max: 256,
            dirty_limit_bytes: 512 * MIB,
            page_cache_bytes_per_s: 2e9,
            seed: 1,
        }
    }

    /// Checks the values a run depends on; the error names the field.
    pub fn validate(&self) -> Result<(), SimError> {
        let bad = |what: &str| Err(SimError(format!("transfer config: {what}")));
        if self.files.is_empty() {
            return bad("files is empty");
        }
        if let Some(k) = self.files.iter().position(|&b| b == 0) {
            return bad(&format!("files[{k}] has 0 bytes"));
        }
        if self.object_bytes == 0 {
            return bad("object_bytes must be > 0");
        }
        for (name, e) in [("source", &self.source), ("sink", &self.sink)] {
            if e.targets == 0 || e.threads == 0 || e.buffer_slots == 0 {
                return bad(&format!(
                    "{name}: targets, threads and buffer_slots must be > 0"
                ));
            }
            if self.stripe_count == 0 || self.stripe_count > e.targets {
                return bad(&format!(
                    "stripe_count {} must be in 1..={} ({name} targets)",
                    self.stripe_count, e.targets
                ));
            }
            let c = e.congestion;
            if !(c.factor.is_finite() && c.factor >= 1.0) || c.targets > e.targets {
                return bad(&format!(
                    "{name}.congestion: factor must be >= 1 and targets at most {}",
                    e.targets
                ));
            }
            Hdd::new(e.target.hdd.clone(), 0)
                .map_err(|err| SimError(format!("transfer config: {name}.target.hdd: {err}")))?;
        }
        if self.open_files_max == 0 {
            return bad("open_files_max must be > 0");
        }
        if !(self.page_cache_bytes_per_s.is_finite() && self.page_cache_bytes_per_s > 0.0) {
            return bad("page_cache_bytes_per_s must be > 0");
        }
        Link::new(self.link.clone())
            .map_err(|e| SimError(format!("transfer config: link: {e}")))?;
        Ssd::new(self.ssd.clone()).map_err(|e| SimError(format!("transfer config: ssd: {e}")))?;
        Ok(())
    }
}

/// What one transfer did.
#[derive(Clone, Debug, PartialEq)]
pub struct TransferResult {
    /// Bytes written at the sink.
    pub bytes: u64,
    /// Objects written at the sink.
    pub objects: u64,
    /// Files in the set.
    pub files: u64,
    /// Files whose every object arrived exactly once.
    pub files_complete: u64,
    /// Objects that arrived more than once (0 unless the model is wrong).
    pub duplicates: u64,
    /// From the start to the close of the last file at the sink.
    pub run_time: Duration,
    /// The source scheduler's counters.
    pub source: SchedulerStats,
    /// The sink scheduler's counters.
    pub sink: SchedulerStats,
    /// Source targets marked congested (CA) while they really were.
    pub source_marks_on_congested: u64,
    /// Sink targets marked congested (CA) while they really were.
    pub sink_marks_on_congested: u64,
    /// Objects read into the SSD spill buffer.
    pub spilled: u64,
    /// Sink writes that waited for the dirty limit.
    pub dirty_waits: u64,
    /// Most dirty bytes held at the sink at once.
    pub dirty_bytes_max: u64,
    /// Events delivered.
    pub events: u64,
}

impl TransferResult {
    /// Run time in seconds.
    pub fn seconds(&self) -> f64 {
        self.run_time.as_secs_f64()
    }

    /// End-to-end throughput in MB/s (10⁶ bytes).
    pub fn throughput_mb_s(&self) -> f64 {
        self.bytes as f64 / 1e6 / self.seconds().max(1e-12)
    }

    /// Congested skips at both ends.
    pub fn congested_skips(&self) -> u64 {
        self.source.congested_skips + self.sink.congested_skips
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Source,
    Sink,
}

#[derive(Clone, Copy, Debug)]
enum Job {
    /// A source thread's read into a buffer slot.
    Read {
        thread: usize,
        object: Object,
        slot: Slot,
        issued: Time,
    },
    /// Writeback of one dirty object at the sink.
    Writeback { object: Object },
}

impl Job {
    fn object(&self) -> &Object {
        match self {
            Job::Read { object, .. } | Job::Writeback { object } => object,
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum Event {
    FileOpened {
        file: usize,
    },
    TargetDone {
        side: Side,
        target: usize,
    },
    SpillWritten {
        thread: usize,
        object: Object,
    },
    SpillCopied {
        object: Object,
    },
    NewBlock {
        object: Object,
    },
    RmaDone {
        object: Object,
    },
    BlockDone,
    SinkWriteDone {
        thread: usize,
        object: Object,
        issued: Time,
    },
    SinkFileClosed {
        thread: usize,
    },
}

struct Sim<'a> {
    config: &'a TransferConfig,
    queue: EventQueue<Event>,
    source_place: Placement,
    sink_place: Placement,
    source_disks: Vec<Disk>,
    sink_disks: Vec<Disk>,
    source_congestion: CongestionState,
    sink_congestion: CongestionState,
    source_sched: Scheduler,
    sink_sched: Scheduler,
    pool: SlotPool,
    source_idle: VecDeque<usize>,
    sink_idle: VecDeque<usize>,
    // Master (file opening).
    next_file: usize,
    open_files: u32,
    open_files_max: u32,
    opener_busy: bool,
    objects_per_file: Vec<u64>,
    read_per_file: Vec<u64>,
    // SSD spill.
    ssd: Ssd,
    ssd_queue: VecDeque<Object>,
    ssd_busy: bool,
    // Network and sink buffer.
    link: Link,
    sink_slots_used: u32,
    sink_waiting: VecDeque<Object>,
    // Sink page cache.
    dirty_bytes: u64,
    dirty_bytes_max: u64,
    dirty_waiters: VecDeque<(usize, Object, Time)>,
    dirty_waits: u64,
    // Delivery.
    arrived: Vec<Vec<bool>>,
    written_per_file: Vec<u64>,
    files_closed: usize,
    source_marks_on_congested: u64,
    sink_marks_on_congested: u64,
    bytes: u64,
    objects: u64,
    duplicates: u64,
}

/// Runs one transfer.
pub fn simulate(config: &TransferConfig) -> Result<TransferResult, SimError> {
    config.validate()?;
    let mut sim = Sim::new(config)?;
    sim.run()
}

impl<'a> Sim<'a> {
    fn new(config: &'a TransferConfig) -> Result<Sim<'a>, SimError> {
        let c = config;
        let objects_per_file: Vec<u64> = c
            .files
            .iter()
            .map(|&b| b.div_ceil(c.object_bytes))
            .collect();
        let file_mode = c.source.scheduler.mode == Mode::FileAtATime;
        Ok(Sim {
            config,
            queue: EventQueue::new(),
            source_place: Placement::new(
                &c.files,
                c.object_bytes,
                c.stripe_count,
                c.source.targets,
            ),
            sink_place: Placement::new(&c.files, c.object_bytes, c.stripe_count, c.sink.targets),
            source_disks: disks(&c.source, c.seed, 0x5EED_0001)?,
            sink_disks: disks(&c.sink, c.seed, 0x5EED_0002)?,
            source_congestion: CongestionState::new(
                c.source.congestion,
                c.seed ^ 0xC0_0001,
                c.source.targets as usize,
            ),
            sink_congestion: CongestionState::new(
                c.sink.congestion,
                c.seed ^ 0xC0_0002,
                c.sink.targets as usize,
            ),
            source_sched: Scheduler::new(c.source.scheduler),
            sink_sched: Scheduler::new(c.sink.scheduler),
            pool: SlotPool::new(c.source.buffer_slots, c.spill_slots),
            source_idle: (0..c.source.threads as usize).collect(),
            sink_idle: (0..c.sink.threads as usize).collect(),
            next_file: 0,
            open_files: 0,
            open_files_max: if file_mode { 1 } else { c.open_files_max },
            opener_busy: false,
            arrived: objects_per_file
                .iter()
                .map(|&n| vec![false; n as usize])
                .collect(),
            read_per_file: vec![0; c.files.len()],
            written_per_file: vec![0; c.files.len()],
            objects_per_file,
            ssd: Ssd::new(c.ssd.clone())
                .map_err(|e| SimError(format!("transfer config: ssd: {e}")))?,
            ssd_queue: VecDeque::new(),
            ssd_busy: false,
            link: Link::new(c.link.clone())
                .map_err(|e| SimError(format!("transfer config: link: {e}")))?,
            sink_slots_used: 0,
            sink_waiting: VecDeque::new(),
            dirty_bytes: 0,
            dirty_bytes_max: 0,
            dirty_waiters: VecDeque::new(),
            dirty_waits: 0,
            files_closed: 0,
            source_marks_on_congested: 0,
            sink_marks_on_congested: 0,
            bytes: 0,
            objects: 0,
            duplicates: 0,
        })
    }

    fn run(&mut self) -> Result<TransferResult, SimError> {
        self.open_next(Time::ZERO);
        let end = loop {
            let Some((now, event)) = self.queue.pop() else {
                return Err(SimError(format!(
                    "transfer stalled at {:?}: {} of {} files closed, {} objects pending and {} in \
                     flight at the source, {} pending at the sink",
                    self.queue.now(),
                    self.files_closed,
                    self.config.files.len(),
                    self.source_sched.pending(),
                    self.source_sched.in_flight(),
                    self.sink_sched.pending(),
                )));
            };
            self.handle(now, event);
            if self.files_closed == self.config.files.len() {
                break now;
            }
        };
        let files_complete = self
            .arrived
            .iter()
            .filter(|objects| objects.iter().all(|&a| a))
            .count() as u64;
        Ok(TransferResult {
            bytes: self.bytes,
            objects: self.objects,
            files: self.config.files.len() as u64,
            files_complete,
            duplicates: self.duplicates,
            run_time: end.saturating_since(Time::ZERO),
            source: self.source_sched.stats(),
            sink: self.sink_sched.stats(),
            source_marks_on_congested: self.source_marks_on_congested,
            sink_marks_on_congested: self.sink_marks_on_congested,
            spilled: self.pool.spilled(),
            dirty_waits: self.dirty_waits,
            dirty_bytes_max: self.dirty_bytes_max,
            events: self.queue.delivered(),
        })
    }

    fn handle(&mut self, now: Time, event: Event) {
        match event {
            Event::FileOpened { file } => {
                self.opener_busy = false;
                self.open_files += 1;
                let layout = self.source_place.layout(file, self.config.object_bytes);
                for object in layout.objects(FileId(file as u64), self.config.files[file]) {
                    self.source_sched.push(object);
                }
                self.open_next(now);
                self.dispatch_source(now);
            }
            Event::TargetDone { side, target } => self.target_done(now, side, target),
            Event::SpillWritten { thread, object } => {
                self.ssd_queue.push_back(object);
                self.source_idle.push_back(thread);
                self.kick_ssd(now);
                self.dispatch_source(now);
            }
            Event::SpillCopied { object } => {
                self.pool.release(Slot::Spill);
                self.ssd_busy = false;
                self.send(now, object);
                self.kick_ssd(now);
                self.dispatch_source(now);
            }
            Event::NewBlock { object } => {
                if self.sink_slots_used < self.config.sink.buffer_slots {
                    self.sink_slots_used += 1;
                    self.start_rma(now, object);
                } else {
                    self.sink_waiting.push_back(object);
                }
            }
            Event::RmaDone { object } => {
                let (target, _) = self.sink_place.locate(
                    object.file.0 as usize,
                    object.offset,
                    self.config.object_bytes,
                );
                self.sink_sched.push(Object {
                    target: TargetId(target as u32),
                    ..object
                });
                self.queue.schedule(
                    now.saturating_add(self.config.link.latency),
                    Event::BlockDone,
                );
                self.dispatch_sink(now);
            }
            Event::BlockDone => {
                self.pool.release(Slot::Memory);
                self.kick_ssd(now);
                self.dispatch_source(now);
            }
            Event::SinkWriteDone {
                thread,
                object,
                issued,
            } => self.sink_write_done(now, thread, object, issued),
            Event::SinkFileClosed { thread } => {
                self.files_closed += 1;
                self.sink_idle.push_back(thread);
                self.dispatch_sink(now);
            }
        }
    }

    /// Opens the next file if the master is free and the open-file limit
    /// allows.
    fn open_next(&mut self, now: Time) {
        if self.opener_busy
            || self.next_file >= self.config.files.len()
            || self.open_files >= self.open_files_max
        {
            return;
        }
        self.opener_busy = true;
        let file = self.next_file;
        self.next_file += 1;
        self.queue.schedule(
            now.saturating_add(self.config.metadata),
            Event::FileOpened { file },
        );
    }

    fn slot_free(&self) -> bool {
        let (memory, spill) = self.pool.used();
        memory < self.config.source.buffer_slots || spill < self.config.spill_slots
    }

    /// Hands objects to idle source threads while a slot is free and the
    /// scheduler has something to serve.
    fn dispatch_source(&mut self, now: Time) {
        while !self.source_idle.is_empty() && self.slot_free() {
            let Some(object) = self.source_sched.dispatch() else {
                break;
            };
            // INVARIANT: the loop condition saw an idle thread and a free slot.
            let thread = self.source_idle.pop_front().expect("an idle thread");
            let slot = self.pool.reserve().expect("a free slot");
            let (target, offset) = self.source_place.locate(
                object.file.0 as usize,
                object.offset,
                self.config.object_bytes,
            );
            let job = Job::Read {
                thread,
                object,
                slot,
                issued: now,
            };
            self.submit(now, Side::Source, target, job, offset);
        }
    }

    fn submit(&mut self, now: Time, side: Side, target: usize, job: Job, offset: u64) {
        let disk = match side {
            Side::Source => &mut self.source_disks[target],
            Side::Sink => &mut self.sink_disks[target],
        };
        disk.queue.push_back((job, offset));
        if disk.in_service.is_none() {
            self.start_disk(now, side, target);
        }
    }

    fn start_disk(&mut self, now: Time, side: Side, target: usize) {
        let (disk, congestion, model) = match side {
            Side::Source => (
                &mut self.source_disks[target],
                &mut self.source_congestion,
                &self.config.source.target,
            ),
            Side::Sink => (
                &mut self.sink_disks[target],
                &mut self.sink_congestion,
                &self.config.sink.target,
            ),
        };
        let Some((job, offset)) = disk.queue.pop_front() else {
            return;
        };
        let factor = congestion.factor(target, now);
        let service = disk.service(model, now, offset, job.object().len, factor);
        disk.in_service = Some((job, offset));
        self.queue.schedule(
            now.saturating_add(service),
            Event::TargetDone { side, target },
        );
    }

    fn target_done(&mut self, now: Time, side: Side, target: usize) {
        let disk = match side {
            Side::Source => &mut self.source_disks[target],
            Side::Sink => &mut self.sink_disks[target],
        };
        // INVARIANT: TargetDone is scheduled only when a service starts.
        let (job, offset) = disk.in_service.take().expect("a service in progress");
        disk.head = offset + job.object().len;
        disk.last_done = Some(now);
        self.start_disk(now, side, target);
        match job {
            Job::Read {
                thread,
                object,
                slot,
                issued,
            } => {
                let marks = self.source_sched.stats().congested_marks;
                self.source_sched.complete(&object, issued, now);
                if self.source_sched.stats().congested_marks > marks
                    && self.source_congestion.factor(target, now) > 1.0
                {
                    self.source_marks_on_congested += 1;
                }
                let file = object.file.0 as usize;
                self.read_per_file[file] += 1;
                if self.read_per_file[file] == self.objects_per_file[file] {
                    self.open_files -= 1;
                    self.open_next(now);
                }
                match slot {
                    Slot::Memory => {
                        self.send(now, object);
                        self.source_idle.push_back(thread);
                    }
                    Slot::Spill => {
                        let done = self.ssd.schedule(now, IoKind::Write, object.len);
                        self.queue
                            .schedule(done, Event::SpillWritten { thread, object });
                    }
                }
                self.dispatch_source(now);
            }
            Job::Writeback { object } => {
                self.dirty_bytes -= object.len;
                self.admit_dirty_waiters(now);
            }
        }
    }

    /// The SSD thread: copy the oldest spilled object into a memory slot.
    fn kick_ssd(&mut self, now: Time) {
        if self.ssd_busy || self.ssd_queue.is_empty() || !self.pool.reserve_memory() {
            return;
        }
        // INVARIANT: the queue was checked non-empty above.
        let object = self.ssd_queue.pop_front().expect("a spilled object");
        self.ssd_busy = true;
        let done = self.ssd.schedule(now, IoKind::Read, object.len);
        self.queue.schedule(done, Event::SpillCopied { object });
    }

    /// The source's Comm thread sends NEW BLOCK for an object in memory.
    fn send(&mut self, now: Time, object: Object) {
        self.queue.schedule(
            now.saturating_add(self.config.link.latency),
            Event::NewBlock { object },
        );
    }

    fn start_rma(&mut self, now: Time, object: Object) {
        let arrival = self.link.transfer(now, object.len);
        self.queue.schedule(arrival, Event::RmaDone { object });
    }

    fn copy_time(&self, len: u64) -> Duration {
        Duration::from_secs_f64(len as f64 / self.config.page_cache_bytes_per_s)
    }

    fn dirty_fits(&self, len: u64) -> bool {
        self.dirty_bytes == 0 || self.dirty_bytes + len <= self.config.dirty_limit_bytes
    }

    fn dispatch_sink(&mut self, now: Time) {
        while !self.sink_idle.is_empty() {
            let Some(object) = self.sink_sched.dispatch() else {
                break;
            };
            // INVARIANT: the loop condition saw an idle thread.
            let thread = self.sink_idle.pop_front().expect("an idle sink thread");
            if self.dirty_waiters.is_empty() && self.dirty_fits(object.len) {
                self.admit_write(now, thread, object, now);
            } else {
                self.dirty_waits += 1;
                self.dirty_waiters.push_back((thread, object, now));
            }
        }
    }

    fn admit_write(&mut self, now: Time, thread: usize, object: Object, issued: Time) {
        self.dirty_bytes += object.len;
        self.dirty_bytes_max = self.dirty_bytes_max.max(self.dirty_bytes);
        self.queue.schedule(
            now.saturating_add(self.copy_time(object.len)),
            Event::SinkWriteDone {
                thread,
                object,
                issued,
            },
        );
    }

    fn admit_dirty_waiters(&mut self, now: Time) {
        while let Some(&(thread, object, issued)) = self.dirty_waiters.front() {
            if !self.dirty_fits(object.len) {
                break;
            }
            self.dirty_waiters.pop_front();
            self.admit_write(now, thread, object, issued);
        }
    }

    fn sink_write_done(&mut self, now: Time, thread: usize, object: Object, issued: Time) {
        let marks = self.sink_sched.stats().congested_marks;
        self.sink_sched.complete(&object, issued, now);
        let file = object.file.0 as usize;
        let (target, offset) =
            self.sink_place
                .locate(file, object.offset, self.config.object_bytes);
        if self.sink_sched.stats().congested_marks > marks
            && self.sink_congestion.factor(target, now) > 1.0
        {
            self.sink_marks_on_congested += 1;
        }
        self.submit(now, Side::Sink, target, Job::Writeback { object }, offset);
        // The write frees its sink slot for the next RMA read.
        if let Some(next) = self.sink_waiting.pop_front() {
            self.start_rma(now, next);
        } else {
            self.sink_slots_used -= 1;
        }
        let index = (object.offset / self.config.object_bytes) as usize;
        if std::mem::replace(&mut self.arrived[file][index], true) {
            self.duplicates += 1;
        }
        self.bytes += object.len;
        self.objects += 1;
        self.written_per_file[file] += 1;
        if self.written_per_file[file] == self.objects_per_file[file] {
            self.queue.schedule(
                now.saturating_add(self.config.metadata),
                Event::SinkFileClosed { thread },
            );
        } else {
            self.sink_idle.push_back(thread);
            self.dispatch_sink(now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(files: Vec<u64>, threads: u32, mode: Mode) -> TransferConfig {
        TransferConfig::testbed(
            files,
            threads,
            SchedulerConfig {
                mode,
                ..SchedulerConfig::default()
            },
        )
    }

    fn congested(factor: f64, targets: u32, busy_s: u64, idle_s: u64) -> Congestion {
        Congestion {
            factor,
            targets,
            busy: Duration::from_secs(busy_s),
            idle: Duration::from_secs(idle_s),
            start: Duration::ZERO,
        }
    }

    fn assert_conserved(c: &TransferConfig, r: &TransferResult) {
        let bytes: u64 = c.files.iter().sum();
        let objects: u64 = c.files.iter().map(|b| b.div_ceil(c.object_bytes)).sum();
        assert_eq!(r.bytes, bytes);
        assert_eq!(r.objects, objects);
        assert_eq!(r.files_complete, c.files.len() as u64);
        assert_eq!(r.duplicates, 0);
        assert_eq!(r.source.dispatched, objects);
        assert_eq!(r.sink.dispatched, objects);
    }

    #[test]
    fn every_byte_of_every_file_arrives_once() {
        // Odd sizes (partial last objects), several stripe counts, every
        // mode, congestion at both ends and a buffer small enough to spill.
        let files = [1, MIB, 3 * MIB + 17, 10 * MIB, 7 * MIB - 1, 2 * MIB];
        for mode in Mode::ALL {
            for stripes in [1, 3] {
                let mut c = config(files.repeat(4), 4, mode);
                c.stripe_count = stripes;
                c.source.targets = 5;
                c.sink.targets = 4;
                c.source.buffer_slots = 3;
                c.sink.buffer_slots = 2;
                c.spill_slots = 4;
                c.dirty_limit_bytes = 4 * MIB;
                c.source.congestion = congested(4.0, 2, 1, 1);
                c.sink.congestion = congested(8.0, 4, 1, 0);
                let r = simulate(&c).unwrap_or_else(|e| panic!("{mode:?}: {e}"));
                assert_conserved(&c, &r);
                assert!(r.spilled > 0, "{mode:?} {stripes}: the small buffer spills");
                assert!(
                    r.dirty_waits > 0,
                    "{mode:?} {stripes}: the dirty limit binds"
                );
                assert!(r.dirty_bytes_max <= c.dirty_limit_bytes);
            }
        }
    }

    #[test]
    fn same_seed_same_result_and_the_seed_matters() {
        let mut c = config(vec![4 * MIB; 64], 8, Mode::CongestionAware);
        c.source.congestion = congested(8.0, 4, 1, 0);
        let a = simulate(&c).unwrap();
        assert_eq!(a, simulate(&c).unwrap());
        c.seed = 2;
        let b = simulate(&c).unwrap();
        assert_conserved(&c, &b);
        assert_ne!(a.run_time, b.run_time);
    }

    #[test]
    fn one_thread_streams_a_file_back_to_back_but_not_round_robin() {
        // bbcp reading one 64 MiB file: every object after the first
        // continues the previous one at once, so it streams at
        // 1 MiB / (5 ms + 1 MiB at 145 MB/s) = 85.7 MB/s.
        let file = config(vec![64 * MIB], 1, Mode::FileAtATime);
        let r = simulate(&file).unwrap();
        let streaming = MIB as f64 / 1e6 / (0.005 + MIB as f64 / 145e6);
        let t = r.throughput_mb_s();
        assert!((t / streaming - 1.0).abs() < 0.03, "{t} vs {streaming}");
        // LADS's one thread visits 16 targets in turn: each object waits
        // for the platter (mean half a rotation, 4.2 ms).
        let rr = config(vec![64 * MIB; 16], 1, Mode::RoundRobin);
        let lads = simulate(&rr).unwrap().throughput_mb_s();
        assert!(lads < 0.85 * t, "LADS one thread {lads} vs bbcp {t}");
    }

    #[test]
    fn file_at_a_time_keeps_to_one_target_whatever_the_threads() {
        let files = vec![MIB; 64];
        let one = simulate(&config(files.clone(), 1, Mode::FileAtATime)).unwrap();
        let eight = simulate(&config(files.clone(), 8, Mode::FileAtATime)).unwrap();
        assert!(eight.throughput_mb_s() < 1.05 * one.throughput_mb_s());
        let lads = simulate(&config(files, 8, Mode::RoundRobin)).unwrap();
        assert!(lads.throughput_mb_s() > 4.0 * one.throughput_mb_s());
    }

    #[test]
    fn congestion_aware_avoids_congested_source_targets() {
        // A quarter of the source targets 8× slower, a new quarter every
        // 2 s: CA defers their objects until they recover.
        let mut rr = config(vec![MIB; 4000], 8, Mode::RoundRobin);
        rr.source.congestion = congested(8.0, 4, 2, 0);
        let mut ca = rr.clone();
        ca.source.scheduler.mode = Mode::CongestionAware;
        let (rr, ca) = (simulate(&rr).unwrap(), simulate(&ca).unwrap());
        assert!(ca.source.congested_marks > 0 && ca.source.congested_skips > 0);
        assert_eq!(rr.congested_skips(), 0);
        assert!(
            ca.throughput_mb_s() > 1.15 * rr.throughput_mb_s(),
            "CA {} vs RR {} MB/s",
            ca.throughput_mb_s(),
            rr.throughput_mb_s()
        );
    }

    #[test]
    fn a_fixed_congested_target_bounds_any_scheduler() {
        // With the same target slow for the whole run, its share of the
        // work takes as long whoever schedules it: CA cannot win much.
        let mut rr = config(vec![MIB; 800], 8, Mode::RoundRobin);
        rr.source.congestion = congested(10.0, 1, 3600, 0);
        let mut ca = rr.clone();
        ca.source.scheduler.mode = Mode::CongestionAware;
        let (rr, ca) = (simulate(&rr).unwrap(), simulate(&ca).unwrap());
        assert!(ca.seconds() > 0.9 * rr.seconds(), "{ca:?} vs {rr:?}");
    }

    #[test]
    fn the_sink_samples_the_page_cache_not_the_target() {
        // A congested sink target behind a large page cache: its writes
        // complete at copy speed, so CA never marks it.
        let mut c = config(vec![MIB; 400], 8, Mode::CongestionAware);
        c.sink.congestion = congested(10.0, 1, 3600, 0);
        let r = simulate(&c).unwrap();
        assert_eq!(r.sink.congested_marks, 0);
        assert_eq!(r.dirty_waits, 0);
    }

    #[test]
    fn spill_is_used_only_when_memory_is_full() {
        let mut c = config(vec![8 * MIB; 32], 8, Mode::RoundRobin);
        c.spill_slots = 64;
        assert_eq!(simulate(&c).unwrap().spilled, 0);
        c.source.buffer_slots = 8;
        c.sink.buffer_slots = 4;
        c.dirty_limit_bytes = 8 * MIB;
        c.sink.congestion = congested(20.0, 16, 3600, 0);
        let r = simulate(&c).unwrap();
        assert!(r.spilled > 0);
        assert_conserved(&c, &r);
    }

    #[test]
    fn congestion_draws_its_subset_per_busy_period() {
        let spec = congested(4.0, 3, 2, 1);
        let mut state = CongestionState::new(spec, 7, 10);
        let at = |s: f64| Time::ZERO.saturating_add(Duration::from_secs_f64(s));
        let count = |state: &mut CongestionState, s: f64| {
            (0..10).filter(|&t| state.factor(t, at(s)) == 4.0).count()
        };
        assert_eq!(count(&mut state, 0.5), 3);
        assert_eq!(count(&mut state, 1.9), 3);
        assert_eq!(count(&mut state, 2.5), 0, "idle gap");
        assert_eq!(count(&mut state, 3.5), 3);
        let first: Vec<f64> = (0..10).map(|t| state.factor(t, at(0.1))).collect();
        let again: Vec<f64> = (0..10).map(|t| state.factor(t, at(1.0))).collect();
        assert_eq!(first, again, "same period, same subset");
        assert_eq!(
            CongestionState::new(Congestion::NONE, 7, 10).factor(0, at(1.0)),
            1.0
        );
    }

    #[test]
    fn bad_configs_are_refused_with_the_field_named() {
        let good = config(vec![MIB; 4], 2, Mode::RoundRobin);
        assert!(good.validate().is_ok());
        type Breaker = fn(&mut TransferConfig);
        let cases: [(&str, Breaker); 6] = [
            ("files is empty", |c| c.files.clear()),
            ("files[1] has 0 bytes", |c| c.files[1] = 0),
            ("stripe_count", |c| c.stripe_count = 17),
            ("source: targets", |c| c.source.threads = 0),
            ("sink.congestion", |c| c.sink.congestion.factor = 0.5),
            ("open_files_max", |c| c.open_files_max = 0),
        ];
        for (text, break_it) in cases {
            let mut c = good.clone();
            break_it(&mut c);
            let e = simulate(&c).unwrap_err();
            assert!(e.0.contains(text), "{text}: {e}");
        }
    }
}
