//! LADS (seed 003; DESIGN §7): schedule a bulk transfer by object and
//! storage target instead of by file.
//!
//! * [`StripeLayout`] cuts a file into [`Object`]s aligned to the file
//!   system's object (stripe) size and says which target holds each one
//!   (RAID-0 striping as in Lustre: object `k` is on `targets[k % width]`).
//!   Layout providers that are not plain stripes (CephFS with a stripe unit
//!   smaller than its objects, say) build [`Object`]s themselves.
//! * [`Scheduler`] keeps one FIFO queue per target. I/O threads ask
//!   [`Scheduler::dispatch`] for work and report back with
//!   [`Scheduler::complete`]. Three [`Mode`]s:
//!   - [`Mode::RoundRobin`]: visit the targets round-robin from a shared
//!     cursor and take the head of the first queue that has work and is not
//!     being served by `target_depth` threads already (skip-busy; the
//!     paper's depth is 1).
//!   - [`Mode::CongestionAware`]: as round-robin, and each completion adds
//!     its service time to the target's samples; when the mean service time
//!     over the last window `W` exceeds the threshold `T`, the target is
//!     marked congested and the next `M` visits skip it (each skipped visit
//!     spends one). A thread serves a congested target only when every
//!     target that has work is congested; while a non-congested target with
//!     work is merely busy, the thread waits instead (`dispatch` returns `None`)
//!     rather than pile onto a slow target.
//!   - [`Mode::FileAtATime`]: the bbcp model, for comparison. One FIFO in
//!     the order objects were pushed (file by file, offset order); threads
//!     take the next object of the current file whatever its target.
//! * [`SlotPool`] is the transfer buffer: memory slots first, then spill
//!   slots on a fast-tier directory, then none (the reader waits).
//!
//! Nothing here reads a clock: every call that needs time takes it. The same
//! scheduler runs in `sluice xfer` (wall clock) and in the simulator.
//!
//! INVARIANTS: an object handed out by `dispatch` is in no queue; the busy count
//! of a target is the number of objects handed out for it and not yet
//! completed, and never exceeds `target_depth` except for objects handed out
//! in file-at-a-time mode; the sample window only holds completions newer
//! than `now − W` at the time of the last completion.

use alloc::collections::{BTreeMap, VecDeque};
use alloc::vec::Vec;
use core::time::Duration;

use crate::{FileId, Time};

/// A storage target (Lustre OST, GlusterFS brick, device).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TargetId(pub u32);

/// One object of one file: the unit of scheduling and of transfer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Object {
    /// File the object belongs to.
    pub file: FileId,
    /// Byte offset of the object in the file.
    pub offset: u64,
    /// Length in bytes (the object size, or less at the end of the file).
    pub len: u64,
    /// Target holding the object.
    pub target: TargetId,
}

/// RAID-0 striping of a file over targets, in objects of `object_size`
/// bytes: object `k` (bytes `k·size .. (k+1)·size`) lives on
/// `targets[k % targets.len()]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StripeLayout {
    /// Object (stripe) size in bytes; never 0.
    pub object_size: u64,
    /// Targets in stripe order; never empty.
    pub targets: Vec<TargetId>,
}

impl StripeLayout {
    /// A layout, or `None` if `object_size` is 0 or `targets` is empty.
    pub fn new(object_size: u64, targets: Vec<TargetId>) -> Option<StripeLayout> {
        (object_size > 0 && !targets.is_empty()).then_some(StripeLayout {
            object_size,
            targets,
        })
    }

    /// The target holding byte `offset`.
    pub fn target_of(&self, offset: u64) -> TargetId {
        let k = offset / self.object_size;
        // The modulus is below targets.len(), so it fits in usize.
        self.targets[(k % self.targets.len() as u64) as usize]
    }

    /// The objects of a file of `len` bytes, in offset order. A file of 0
    /// bytes has no objects.
    pub fn objects(&self, file: FileId, len: u64) -> impl Iterator<Item = Object> + '_ {
        let size = self.object_size;
        let count = len.div_ceil(size);
        (0..count).map(move |k| {
            let offset = k * size;
            Object {
                file,
                offset,
                len: size.min(len - offset),
                target: self.target_of(offset),
            }
        })
    }
}

/// How threads pick their next object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The bbcp model: whole files in order, targets ignored.
    FileAtATime,
    /// Per-target queues, round-robin with skip-busy.
    RoundRobin,
    /// Round-robin, and congested targets are skipped `M` times.
    CongestionAware,
}

impl Mode {
    /// Every mode, in the order reports list them.
    pub const ALL: [Mode; 3] = [Mode::FileAtATime, Mode::RoundRobin, Mode::CongestionAware];

    /// The name used in flags, reports and metrics.
    pub fn name(self) -> &'static str {
        match self {
            Mode::FileAtATime => "file",
            Mode::RoundRobin => "rr",
            Mode::CongestionAware => "ca",
        }
    }

    /// The mode called `name` (see [`Mode::name`]).
    pub fn from_name(name: &str) -> Option<Mode> {
        Mode::ALL.into_iter().find(|m| m.name() == name)
    }
}

/// Scheduler settings. The defaults are the paper's (T and M chosen from
/// the best of Fig. 10's settings; W is not given in the paper).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SchedulerConfig {
    /// Scheduling mode.
    pub mode: Mode,
    /// W: completions older than this do not count toward the mean.
    pub window: Duration,
    /// T: a mean object service time above this marks a target congested.
    pub threshold: Duration,
    /// M: how many visits skip a target once it is marked congested.
    pub skips: u32,
    /// Threads allowed on one target at once (skip-busy; the paper's 1).
    pub target_depth: u32,
}

impl Default for SchedulerConfig {
    fn default() -> SchedulerConfig {
        SchedulerConfig {
            mode: Mode::CongestionAware,
            window: Duration::from_secs(1),
            threshold: Duration::from_millis(50),
            skips: 8,
            target_depth: 1,
        }
    }
}

/// Counters a transfer reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SchedulerStats {
    /// Objects handed out.
    pub dispatched: u64,
    /// Visits that passed a target because it was busy.
    pub busy_skips: u64,
    /// Visits that passed a target because it was marked congested.
    pub congested_skips: u64,
    /// Times a target was marked congested.
    pub congested_marks: u64,
    /// Objects served from a congested target because nothing else had work.
    pub congested_served: u64,
}

#[derive(Clone, Debug)]
struct TargetState {
    id: TargetId,
    queue: VecDeque<Object>,
    busy: u32,
    /// (completion time, service time) inside the window.
    samples: VecDeque<(Time, Duration)>,
    sample_sum: Duration,
    skips_left: u32,
}

impl TargetState {
    fn new(id: TargetId) -> TargetState {
        TargetState {
            id,
            queue: VecDeque::new(),
            busy: 0,
            samples: VecDeque::new(),
            sample_sum: Duration::ZERO,
            skips_left: 0,
        }
    }

    fn mean_service(&self) -> Option<Duration> {
        let n = u32::try_from(self.samples.len()).ok().filter(|&n| n > 0)?;
        Some(self.sample_sum / n)
    }
}

/// The object scheduler; see the module docs.
#[derive(Clone, Debug)]
pub struct Scheduler {
    config: SchedulerConfig,
    targets: Vec<TargetState>,
    index: BTreeMap<TargetId, usize>,
    cursor: usize,
    /// File-at-a-time mode's single FIFO.
    fifo: VecDeque<Object>,
    pending: usize,
    in_flight: usize,
    stats: SchedulerStats,
}

impl Scheduler {
    /// An empty scheduler. A `target_depth` of 0 is taken as 1.
    pub fn new(config: SchedulerConfig) -> Scheduler {
        Scheduler {
            config: SchedulerConfig {
                target_depth: config.target_depth.max(1),
                ..config
            },
            targets: Vec::new(),
            index: BTreeMap::new(),
            cursor: 0,
            fifo: VecDeque::new(),
            pending: 0,
            in_flight: 0,
            stats: SchedulerStats::default(),
        }
    }

    /// The settings in force.
    pub fn config(&self) -> &SchedulerConfig {
        &self.config
    }

    /// Counters so far.
    pub fn stats(&self) -> SchedulerStats {
        self.stats
    }

    /// Objects queued and not yet handed out.
    pub fn pending(&self) -> usize {
        self.pending
    }

    /// Objects handed out and not yet completed.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// True when nothing is queued or in flight.
    pub fn is_done(&self) -> bool {
        self.pending == 0 && self.in_flight == 0
    }

    /// Whether `target` is marked congested (has skips left).
    pub fn is_congested(&self, target: TargetId) -> bool {
        self.index
            .get(&target)
            .is_some_and(|&i| self.targets[i].skips_left > 0)
    }

    /// Mean service time of `target` over the window, if it has samples.
    pub fn mean_service(&self, target: TargetId) -> Option<Duration> {
        self.index
            .get(&target)
            .and_then(|&i| self.targets[i].mean_service())
    }

    fn slot(&mut self, target: TargetId) -> usize {
        if let Some(&i) = self.index.get(&target) {
            return i;
        }
        let i = self.targets.len();
        self.targets.push(TargetState::new(target));
        self.index.insert(target, i);
        i
    }

    /// Queue an object behind the others of its target.
    pub fn push(&mut self, object: Object) {
        let i = self.slot(object.target);
        if self.config.mode == Mode::FileAtATime {
            self.fifo.push_back(object);
        } else {
            self.targets[i].queue.push_back(object);
        }
        self.pending += 1;
    }

    /// Put back an object that was handed out and not served (a failed
    /// read to retry): it goes to the head of its queue and no longer
    /// counts as in flight.
    pub fn requeue(&mut self, object: Object) {
        let i = self.slot(object.target);
        let t = &mut self.targets[i];
        t.busy = t.busy.saturating_sub(1);
        self.in_flight = self.in_flight.saturating_sub(1);
        if self.config.mode == Mode::FileAtATime {
            self.fifo.push_front(object);
        } else {
            self.targets[i].queue.push_front(object);
        }
        self.pending += 1;
    }

    /// The next object for an idle thread, or `None` if there is nothing it
    /// should serve now (everything is in flight, or the only work left is
    /// on busy targets). Call [`Scheduler::complete`] when it is served.
    pub fn dispatch(&mut self) -> Option<Object> {
        let object = match self.config.mode {
            Mode::FileAtATime => self.fifo.pop_front()?,
            Mode::RoundRobin | Mode::CongestionAware => {
                let i = self.pick_target()?;
                self.targets[i].queue.pop_front()?
            }
        };
        let i = self.slot(object.target);
        self.targets[i].busy += 1;
        self.pending -= 1;
        self.in_flight += 1;
        self.stats.dispatched += 1;
        Some(object)
    }

    fn pick_target(&mut self) -> Option<usize> {
        let n = self.targets.len();
        let aware = self.config.mode == Mode::CongestionAware;
        let mut congested_idle = None;
        let mut clear_busy = false;
        for step in 0..n {
            let i = (self.cursor + step) % n;
            let t = &mut self.targets[i];
            if t.queue.is_empty() {
                continue;
            }
            let congested = aware && t.skips_left > 0;
            if t.busy >= self.config.target_depth {
                self.stats.busy_skips += 1;
                clear_busy |= !congested;
                continue;
            }
            if congested {
                t.skips_left -= 1;
                self.stats.congested_skips += 1;
                congested_idle.get_or_insert(i);
                continue;
            }
            self.cursor = (i + 1) % n;
            return Some(i);
        }
        if clear_busy {
            // A target that is not congested has work; wait for it rather
            // than pile onto a congested one.
            return None;
        }
        let i = congested_idle?;
        self.stats.congested_served += 1;
        self.cursor = (i + 1) % n;
        Some(i)
    }

    /// Report that `object` was served from `started` to `finished`.
    pub fn complete(&mut self, object: &Object, started: Time, finished: Time) {
        let i = self.slot(object.target);
        let window = self.config.window;
        let aware = self.config.mode == Mode::CongestionAware;
        let (threshold, skips) = (self.config.threshold, self.config.skips);
        let t = &mut self.targets[i];
        t.busy = t.busy.saturating_sub(1);
        self.in_flight = self.in_flight.saturating_sub(1);
        let service = finished.saturating_since(started);
        t.samples.push_back((finished, service));
        t.sample_sum = t.sample_sum.saturating_add(service);
        while let Some(&(at, s)) = t.samples.front() {
            if finished.saturating_since(at) <= window {
                break;
            }
            t.samples.pop_front();
            t.sample_sum = t.sample_sum.saturating_sub(s);
        }
        if aware && t.skips_left == 0 && t.mean_service().is_some_and(|m| m > threshold) {
            t.skips_left = skips;
            self.stats.congested_marks += 1;
        }
    }

    /// Targets known to the scheduler, in first-seen order.
    pub fn targets(&self) -> impl Iterator<Item = TargetId> + '_ {
        self.targets.iter().map(|t| t.id)
    }
}

/// Where a transfer buffer slot lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slot {
    /// The in-memory send buffer.
    Memory,
    /// The spill buffer on the fast tier.
    Spill,
}

/// Transfer buffer accounting: `memory` in-memory slots, then `spill` slots
/// on a fast-tier directory (LADS §3.3: the source keeps reading into flash
/// when the network buffer is full).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotPool {
    memory_total: u32,
    spill_total: u32,
    memory_used: u32,
    spill_used: u32,
    spilled: u64,
}

impl SlotPool {
    /// A pool of `memory` + `spill` slots, all free.
    pub fn new(memory: u32, spill: u32) -> SlotPool {
        SlotPool {
            memory_total: memory,
            spill_total: spill,
            memory_used: 0,
            spill_used: 0,
            spilled: 0,
        }
    }

    /// Take a slot: memory if one is free, else spill, else `None`.
    pub fn reserve(&mut self) -> Option<Slot> {
        if self.memory_used < self.memory_total {
            self.memory_used += 1;
            Some(Slot::Memory)
        } else if self.spill_used < self.spill_total {
            self.spill_used += 1;
            self.spilled += 1;
            Some(Slot::Spill)
        } else {
            None
        }
    }

    /// Take a spill slot only (the memory that would hold the object is
    /// full of objects waiting to be sent).
    pub fn reserve_spill(&mut self) -> bool {
        let free = self.spill_used < self.spill_total;
        self.spill_used += u32::from(free);
        self.spilled += u64::from(free);
        free
    }

    /// Take a memory slot only (moving a spilled object back into memory).
    pub fn reserve_memory(&mut self) -> bool {
        let free = self.memory_used < self.memory_total;
        self.memory_used += u32::from(free);
        free
    }

    /// Give a slot back.
    pub fn release(&mut self, slot: Slot) {
        match slot {
            Slot::Memory => self.memory_used = self.memory_used.saturating_sub(1),
            Slot::Spill => self.spill_used = self.spill_used.saturating_sub(1),
        }
    }

    /// Slots in use: (memory, spill).
    pub fn used(&self) -> (u32, u32) {
        (self.memory_used, self.spill_used)
    }

    /// How many reservations went to spill so far.
    pub fn spilled(&self) -> u64 {
        self.spilled
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;
    use proptest::prelude::*;

    fn obj(file: u64, offset: u64, target: u32) -> Object {
        Object {
            file: FileId(file),
            offset,
            len: 1,
            target: TargetId(target),
        }
    }

    fn config(mode: Mode) -> SchedulerConfig {
        SchedulerConfig {
            mode,
            window: Duration::from_secs(1),
            threshold: Duration::from_millis(50),
            skips: 3,
            target_depth: 1,
        }
    }

    fn ms(n: u64) -> Time {
        Time::from_millis(n)
    }

    #[test]
    fn stripe_layout_cuts_aligned_objects_and_round_robins_targets() {
        let layout = StripeLayout::new(4, vec![TargetId(7), TargetId(2), TargetId(9)]).unwrap();
        let objects: Vec<_> = layout.objects(FileId(1), 14).collect();
        let got: Vec<_> = objects
            .iter()
            .map(|o| (o.offset, o.len, o.target.0))
            .collect();
        assert_eq!(got, vec![(0, 4, 7), (4, 4, 2), (8, 4, 9), (12, 2, 7)]);
        assert_eq!(layout.objects(FileId(1), 0).count(), 0);
        assert_eq!(layout.objects(FileId(1), 12).count(), 3);
        assert_eq!(layout.target_of(13), TargetId(7));
        assert!(StripeLayout::new(0, vec![TargetId(0)]).is_none());
        assert!(StripeLayout::new(1, vec![]).is_none());
    }

    #[test]
    fn round_robin_skips_busy_targets_and_waits_when_all_are_busy() {
        let mut s = Scheduler::new(config(Mode::RoundRobin));
        for k in 0..3 {
            s.push(obj(1, k, 0));
            s.push(obj(2, k, 1));
        }
        let a = s.dispatch().unwrap();
        let b = s.dispatch().unwrap();
        assert_eq!((a.target, b.target), (TargetId(0), TargetId(1)));
        assert_eq!(s.dispatch(), None, "both targets are busy");
        assert!(s.stats().busy_skips >= 2);
        s.complete(&b, ms(0), ms(1));
        assert_eq!(s.dispatch().unwrap(), obj(2, 1, 1));
        s.complete(&a, ms(0), ms(1));
        assert_eq!(s.dispatch().unwrap(), obj(1, 1, 0));
        assert_eq!((s.pending(), s.in_flight()), (2, 2));
    }

    #[test]
    fn round_robin_interleaves_files_across_targets() {
        // Three files on three targets: one thread visits them in turn
        // instead of finishing file 1 first.
        let mut s = Scheduler::new(config(Mode::RoundRobin));
        for f in 0..3 {
            for k in 0..2 {
                s.push(obj(f, k, f as u32));
            }
        }
        let mut order = Vec::new();
        while let Some(o) = s.dispatch() {
            order.push(o.file.0);
            s.complete(&o, ms(0), ms(1));
        }
        assert_eq!(order, vec![0, 1, 2, 0, 1, 2]);
        assert!(s.is_done());
    }

    #[test]
    fn target_depth_lets_several_threads_share_a_target() {
        let mut s = Scheduler::new(SchedulerConfig {
            target_depth: 2,
            ..config(Mode::RoundRobin)
        });
        for k in 0..3 {
            s.push(obj(1, k, 0));
        }
        assert!(s.dispatch().is_some());
        assert!(s.dispatch().is_some());
        assert_eq!(s.dispatch(), None);
    }

    #[test]
    fn file_at_a_time_keeps_file_order_and_ignores_targets() {
        let mut s = Scheduler::new(config(Mode::FileAtATime));
        s.push(obj(1, 0, 0));
        s.push(obj(1, 1, 0));
        s.push(obj(2, 0, 1));
        let got: Vec<_> = core::iter::from_fn(|| s.dispatch()).collect();
        assert_eq!(got, vec![obj(1, 0, 0), obj(1, 1, 0), obj(2, 0, 1)]);
        assert_eq!(s.in_flight(), 3);
    }

    #[test]
    fn congestion_aware_skips_a_slow_target_m_times() {
        let mut s = Scheduler::new(config(Mode::CongestionAware));
        for k in 0..20 {
            s.push(obj(1, k, 0));
            s.push(obj(2, k, 1));
        }
        // Target 0 serves an object in 200 ms (> T = 50 ms): congested.
        let a = s.dispatch().unwrap();
        assert_eq!(a.target, TargetId(0));
        s.complete(&a, ms(0), ms(200));
        assert!(s.is_congested(TargetId(0)));
        assert_eq!(s.stats().congested_marks, 1);
        // Visits pass it and take target 1 until its three skips are spent.
        let mut picks = 0;
        while s.is_congested(TargetId(0)) {
            let b = s.dispatch().unwrap();
            assert_eq!(b.target, TargetId(1));
            s.complete(&b, ms(200), ms(201));
            picks += 1;
        }
        assert_eq!(s.stats().congested_skips, 3);
        assert!(picks >= 3);
        // Skips spent: target 0 is visited again.
        assert_eq!(s.dispatch().unwrap().target, TargetId(0));
    }

    #[test]
    fn congestion_aware_waits_for_a_busy_healthy_target_but_serves_congested_work_left_alone() {
        let mut s = Scheduler::new(config(Mode::CongestionAware));
        s.push(obj(1, 0, 0));
        s.push(obj(1, 1, 0));
        s.push(obj(1, 2, 0));
        s.push(obj(2, 0, 1));
        s.push(obj(2, 1, 1));
        let a = s.dispatch().unwrap();
        s.complete(&a, ms(0), ms(500)); // target 0 congested
        let b = s.dispatch().unwrap();
        assert_eq!(b.target, TargetId(1));
        // Target 1 is busy and healthy: wait rather than go to target 0.
        assert_eq!(s.dispatch(), None);
        s.complete(&b, ms(500), ms(501));
        let c = s.dispatch().unwrap();
        assert_eq!(c.target, TargetId(1));
        s.complete(&c, ms(501), ms(502));
        // Only congested work is left: serve it rather than idle.
        let d = s.dispatch().unwrap();
        assert_eq!(d.target, TargetId(0));
        assert!(s.stats().congested_served >= 1);
    }

    #[test]
    fn round_robin_ignores_service_times() {
        let mut s = Scheduler::new(config(Mode::RoundRobin));
        s.push(obj(1, 0, 0));
        s.push(obj(1, 1, 0));
        let a = s.dispatch().unwrap();
        s.complete(&a, ms(0), ms(10_000));
        assert!(!s.is_congested(TargetId(0)));
        assert!(s.dispatch().is_some());
    }

    #[test]
    fn old_samples_leave_the_window() {
        let mut s = Scheduler::new(SchedulerConfig {
            skips: 0,
            ..config(Mode::CongestionAware)
        });
        for k in 0..3 {
            s.push(obj(1, k, 0));
        }
        let a = s.dispatch().unwrap();
        s.complete(&a, ms(0), ms(400));
        assert_eq!(
            s.mean_service(TargetId(0)),
            Some(Duration::from_millis(400))
        );
        let b = s.dispatch().unwrap();
        // 2 s later: the 400 ms sample is outside W = 1 s.
        s.complete(&b, ms(2_399), ms(2_400));
        assert_eq!(s.mean_service(TargetId(0)), Some(Duration::from_millis(1)));
    }

    #[test]
    fn requeued_objects_go_first_and_free_their_target() {
        let mut s = Scheduler::new(config(Mode::RoundRobin));
        s.push(obj(1, 0, 0));
        s.push(obj(1, 1, 0));
        let a = s.dispatch().unwrap();
        s.requeue(a);
        assert_eq!((s.pending(), s.in_flight()), (2, 0));
        assert_eq!(s.dispatch().unwrap(), a);
    }

    #[test]
    fn slot_pool_fills_memory_then_spill() {
        let mut p = SlotPool::new(2, 1);
        assert_eq!(p.reserve(), Some(Slot::Memory));
        assert_eq!(p.reserve(), Some(Slot::Memory));
        assert_eq!(p.reserve(), Some(Slot::Spill));
        assert_eq!(p.reserve(), None);
        assert!(!p.reserve_memory());
        p.release(Slot::Memory);
        assert!(p.reserve_memory());
        p.release(Slot::Spill);
        assert_eq!(p.used(), (2, 0));
        assert_eq!(p.spilled(), 1);
        // A spill slot alone, with memory free: counted as spilled.
        p.release(Slot::Memory);
        assert!(p.reserve_spill());
        assert!(!p.reserve_spill());
        assert_eq!((p.used(), p.spilled()), ((1, 1), 2));
    }

    #[test]
    fn mode_names_round_trip() {
        for m in Mode::ALL {
            assert_eq!(Mode::from_name(m.name()), Some(m));
        }
        assert_eq!(Mode::from_name("bbcp"), None);
    }

    proptest! {
        /// Whatever the mode and the order of completions, every object is
        /// handed out exactly once, busy never exceeds the depth outside
        /// file-at-a-time mode, and `dispatch` returns `None` only when no idle
        /// target has work (round-robin) or everything is in flight.
        #[test]
        fn every_object_is_served_once(
            mode in 0usize..3,
            depth in 1u32..3,
            objects in proptest::collection::vec((0u64..5, 0u32..4), 1..60),
            picks in proptest::collection::vec((any::<bool>(), 0usize..8, 0u64..200), 1..300),
        ) {
            let mode = Mode::ALL[mode];
            let mut s = Scheduler::new(SchedulerConfig { target_depth: depth, ..config(mode) });
            for (k, &(f, t)) in objects.iter().enumerate() {
                s.push(obj(f, k as u64, t));
            }
            let mut out: Vec<Object> = Vec::new();
            let mut served: Vec<Object> = Vec::new();
            let mut now = 0u64;
            let mut drive = |take: bool, which: usize, dur: u64, s: &mut Scheduler, out: &mut Vec<Object>, served: &mut Vec<Object>| {
                if take || out.is_empty() {
                    if let Some(o) = s.dispatch() {
                        out.push(o);
                        if mode != Mode::FileAtATime {
                            let busy = out.iter().filter(|x| x.target == o.target).count();
                            assert!(busy as u32 <= depth);
                        }
                        return;
                    }
                    if mode == Mode::RoundRobin {
                        // Nothing handed out: every target with work left
                        // must be at its depth.
                        for (k, &(f, t)) in objects.iter().enumerate() {
                            let o = obj(f, k as u64, t);
                            if served.contains(&o) || out.contains(&o) {
                                continue;
                            }
                            let busy = out.iter().filter(|x| x.target.0 == t).count();
                            assert!(busy >= depth as usize, "idle target {t} has work");
                        }
                    }
                }
                if !out.is_empty() {
                    let o = out.swap_remove(which % out.len());
                    now += dur;
                    s.complete(&o, Time::from_millis(now - dur), Time::from_millis(now));
                    served.push(o);
                }
            };
            for &(take, which, dur) in &picks {
                drive(take, which, dur, &mut s, &mut out, &mut served);
            }
            // Drain.
            while !s.is_done() {
                drive(true, 0, 1, &mut s, &mut out, &mut served);
            }
            prop_assert_eq!(out.len(), 0);
            let mut want: Vec<Object> = objects.iter().enumerate().map(|(k, &(f, t))| obj(f, k as u64, t)).collect();
            want.sort();
            served.sort();
            prop_assert_eq!(served, want);
        }
    }
}
