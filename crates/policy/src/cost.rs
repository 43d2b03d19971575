//! sluice's own placement rule: per-file routing by predicted device time
//! (policy `cost`, the default; design and equations in `docs/policy.md`).
//!
//! SSDUP+ classifies the *mixed* request stream of all processes and files
//! and routes the whole next stream to one tier. Two concurrent writers, one
//! sequential and one random, then share one verdict, and a steady mix
//! converges onto its own percentage so that ties stick (issue 18's
//! measurements). This rule keeps the evidence per file instead.
//!
//! For every file the classifier counts, over a window of `evidence`
//! requests of that file in arrival order: `n` requests, `s` seeks and `b`
//! bytes. A request of length `l` is a *seek* unless it starts within `l`
//! bytes of one of the file's two previous requests (`prev.start - l <=
//! offset <= prev.end + l`): a sequential writer whose consecutive requests
//! arrive swapped, or with one still on its way, does not seek, since the
//! disk's queue merges them. Then it
//! compares what the window costs each way:
//! - on the capacity tier now: `s · t_seek + b / B_cap`;
//! - buffered: `n · t_fast + b / B_fast` on the fast tier now, plus
//!   `b / B_cap` when the flusher writes it back sorted and merged.
//!
//! The capacity tier's sequential time `b / B_cap` is paid either way, so
//! buffering pays off by the ratio `r = s · t_seek / (n · t_fast + b /
//! B_fast)`: the seek time it saves over the fast-tier time it spends. A
//! file on the capacity tier moves to the fast tier when `r > 1 + h`, one on
//! the fast tier moves back when `r < 1 / (1 + h)` (hysteresis `h`). The
//! thresholds are constants of the devices, not of the traffic, so a steady
//! workload never converges onto them: no tie sticks. A window ends after
//! `evidence` requests of the file, or earlier, from its
//! [`EARLY_EVIDENCE`]th request on, as soon as its counts call for a
//! switch: a random file moves to the fast tier after its first 4
//! requests, not after a whole stream of everyone's.
//!
//! **The disk, not only the file** (issue 32). A file's own evidence cannot
//! see the other files: eight files each written sequentially look
//! sequential one by one, while the one disk they reach together seeks at
//! every switch between them. So the classifier also keeps the capacity
//! tier's *streams*: the files whose requests it serves now, at most
//! `disk_streams` of them (1 for a disk). A file whose evidence sends it to
//! the capacity tier takes a free stream; while every stream is held by a
//! file that wrote within `disk_idle`, its requests go to the fast tier
//! instead (deferred): on the disk they would interleave with the stream
//! and seek, while the fast tier takes them in parallel at its own
//! bandwidth. A stream frees itself when its file stops writing (its idle
//! time passes), and the next file that would go to the capacity tier
//! takes it. A file's first [`EARLY_EVIDENCE`] - 1 requests neither hold
//! nor wait for a stream (its pattern is not known yet), and random files
//! never hold one: their evidence moves them to the fast tier. A model
//! that can never buffer ([`CostModel::may_buffer`]: a tier that positions
//! about as fast as the fast tier takes a request) keeps no streams: its
//! files interleave at no cost.
//!
//! **A new file** (issue 32, with `new_file_seeks`). A file's first request
//! has no evidence of its own, yet the disk must position for it: it
//! continues nothing the disk was doing. mdtest-hard's files are one
//! 3,901-byte write each, so every file cost the emulated disk a
//! positioning inside the writer's time (160 files/s against `fast-all`'s
//! 984 under node-local). Where a close leaves the bytes in the log, the
//! first request goes to the fast tier when one request with one seek
//! calls for it (`r(1, 1, l) > 1 + h`: small requests); the flusher pays
//! the positioning later, off the writer's time. Under `close-to-open` the
//! close would write the file back at once and pay it anyway, plus the
//! fast tier's copy, so the rule is off there.
//!
//! INVARIANT: at most [`FILES_TRACKED_MAX`] files are tracked; the one
//! unseen longest is forgotten first (it starts over on the capacity tier).
//! `by_age` has one entry per tracked file, keyed by its `last_seen`, so
//! finding that file is a lookup, not a scan of every track (a scan under
//! the engine lock at every new file's first write, once 4,096 files were
//! tracked, held mdtest-hard's other rank off the lock). At most
//! `disk_streams` files hold a stream.

use alloc::collections::BTreeMap;
use core::time::Duration;

use alloc::vec::Vec;

use crate::detector::ConfigError;
use crate::{FileId, Tier, Time, WriteRequest};

/// Files whose evidence is kept at once.
pub const FILES_TRACKED_MAX: usize = 4096;

/// Requests of a file after which its counts may already call for a
/// switch, before its window of `evidence` requests is complete.
pub const EARLY_EVIDENCE: u32 = 4;

/// The device model the rule predicts with, and its hysteresis.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CostModel {
    /// `t_seek`: positioning time of a capacity-tier request that does not
    /// continue the previous one (seek plus rotational delay).
    pub capacity_seek: Duration,
    /// `B_fast`: the fast tier's write bandwidth, bytes per second.
    pub fast_bytes_per_s: f64,
    /// `t_fast`: the fast tier's fixed cost per request.
    pub fast_request: Duration,
    /// `h`: switch to the fast tier above `1 + h`, back below `1 / (1 + h)`.
    pub hysteresis: f64,
    /// Requests of one file per verdict; at least 2.
    pub evidence: u32,
    /// Sequential streams the capacity tier serves at once without seeking
    /// between them (module docs); 0 leaves every file to its own evidence.
    pub disk_streams: u32,
    /// A file that holds a stream and wrote nothing for this long lets the
    /// stream go.
    pub disk_idle: Duration,
    /// A file's first request is judged as a positioning of the disk
    /// (module docs, "A new file"): set where a close leaves the file's
    /// buffered bytes in the log (consistency `node-local`, `on-demand`),
    /// so that buffering hides the positioning from the writer; under
    /// `close-to-open` the close would pay it anyway.
    pub new_file_seeks: bool,
}

impl Default for CostModel {
    fn default() -> CostModel {
        CostModel::EMULATED
    }
}

impl CostModel {
    /// The emulated devices' parameters (EVALUATION §1): a 7200 rpm disk's
    /// short seek (1 ms track-to-track plus half a revolution, 4.17 ms) and
    /// a SATA SSD's 250 MB/s with 60 µs per request; hysteresis 0.5, a
    /// verdict every 16 requests of a file; one stream at a time on the
    /// disk, let go after 50 ms without a write (a few services of a large
    /// request).
    pub const EMULATED: CostModel = CostModel {
        capacity_seek: Duration::from_micros(5_170),
        fast_bytes_per_s: 250e6,
        fast_request: Duration::from_micros(60),
        hysteresis: 0.5,
        evidence: 16,
        disk_streams: 1,
        disk_idle: Duration::from_millis(50),
        new_file_seeks: false,
    };

    /// Check the ranges.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(self.fast_bytes_per_s.is_finite() && self.fast_bytes_per_s > 0.0) {
            return Err(ConfigError {
                key: "cost_fast_bandwidth",
                expected: "greater than 0 bytes per second",
            });
        }
        if !(self.hysteresis.is_finite() && (0.0..=10.0).contains(&self.hysteresis)) {
            return Err(ConfigError {
                key: "cost_hysteresis",
                expected: "a number in [0, 10]",
            });
        }
        if self.evidence < 2 {
            return Err(ConfigError {
                key: "cost_evidence",
                expected: "at least 2",
            });
        }
        if self.disk_streams > 64 {
            return Err(ConfigError {
                key: "cost_disk_streams",
                expected: "0 to 64",
            });
        }
        Ok(())
    }

    /// `r`: seek time saved over fast-tier time spent, for a window of `n`
    /// requests with `s` seeks and `b` bytes (infinite when buffering is
    /// free and saves something; 0 when it saves nothing).
    pub fn ratio(&self, requests: u32, seeks: u32, bytes: u64) -> f64 {
        let saved = f64::from(seeks) * self.capacity_seek.as_secs_f64();
        let spent = f64::from(requests) * self.fast_request.as_secs_f64()
            + bytes as f64 / self.fast_bytes_per_s;
        if saved == 0.0 {
            0.0
        } else if spent == 0.0 {
            f64::INFINITY
        } else {
            saved / spent
        }
    }

    /// Whether any window can move a file to the fast tier. `r` is below
    /// `t_seek / t_fast` for every window (each of its `n` requests costs at
    /// least `t_fast` and saves at most `t_seek`), so a model with `t_seek <=
    /// (1 + h) · t_fast` never buffers a byte: a capacity tier that seeks
    /// about as fast as the fast tier takes a request (profiled flash, a
    /// parallel file system's servers) gains nothing from the log.
    pub fn may_buffer(&self) -> bool {
        self.capacity_seek > self.seek_bound()
    }

    /// `(1 + h) · t_fast`: the largest `t_seek` under which the model never
    /// buffers ([`CostModel::may_buffer`]).
    pub fn seek_bound(&self) -> Duration {
        self.fast_request.mul_f64(1.0 + self.hysteresis)
    }

    /// The tier a file on `current` goes to after a window with ratio `r`.
    pub fn next_route(&self, current: Tier, r: f64) -> Tier {
        let up = 1.0 + self.hysteresis;
        match current {
            Tier::Capacity if r > up => Tier::Fast,
            Tier::Fast if r < 1.0 / up => Tier::Capacity,
            tier => tier,
        }
    }
}

/// A file's evidence.
#[derive(Clone, Copy, Debug)]
struct Track {
    route: Tier,
    /// `[start, end)` of the file's two previous requests, newest first.
    recent: [(u64, u64); 2],
    seen_any: bool,
    requests: u32,
    seeks: u32,
    bytes: u64,
    /// The classifier's request count when the file was last written.
    last_seen: u64,
    /// Requests of the file seen so far (saturating): from
    /// [`EARLY_EVIDENCE`] on, it may hold or wait for a disk stream.
    seen: u32,
}

/// One file's verdict, when a window completes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FileVerdict {
    /// The file.
    pub file: FileId,
    /// Requests, seeks and bytes of the window.
    pub requests: u32,
    /// Seeks among them.
    pub seeks: u32,
    /// Bytes among them.
    pub bytes: u64,
    /// `r` of the window.
    pub ratio: f64,
    /// The file's tier before and after.
    pub route: Tier,
    /// The file's tier for its next requests.
    pub next_route: Tier,
}

/// Per-file evidence and routes; see the module docs.
#[derive(Debug)]
pub struct FileClassifier {
    model: CostModel,
    files: BTreeMap<FileId, Track>,
    /// The tracked files by their `last_seen` (module invariant).
    by_age: BTreeMap<u64, FileId>,
    requests: u64,
    files_forgotten: u64,
    /// The files holding the capacity tier's streams, with the time of
    /// their last request.
    streams: Vec<(FileId, Time)>,
    /// Requests sent to the fast tier because every stream was held.
    deferred: u64,
    /// First requests of files sent to the fast tier (`new_file_seeks`).
    new_files: u64,
}

impl FileClassifier {
    /// A classifier that has seen no file.
    pub fn new(model: CostModel) -> Result<FileClassifier, ConfigError> {
        model.validate()?;
        Ok(FileClassifier {
            model,
            files: BTreeMap::new(),
            by_age: BTreeMap::new(),
            requests: 0,
            files_forgotten: 0,
            streams: Vec::new(),
            deferred: 0,
            new_files: 0,
        })
    }

    /// The model in effect.
    pub fn model(&self) -> &CostModel {
        &self.model
    }

    /// Route from now on with `t_seek` = `seek` (the capacity tier as
    /// measured since; `seek_fit`). Files keep their routes and evidence:
    /// each window completed from now on is judged with it.
    pub fn set_capacity_seek(&mut self, seek: Duration) {
        self.model.capacity_seek = seek;
    }

    /// The tier `file`'s next request goes to.
    pub fn route(&self, file: FileId) -> Tier {
        self.files.get(&file).map_or(Tier::Capacity, |t| t.route)
    }

    /// Files tracked now, and how many of them are routed to the fast tier.
    pub fn tracked(&self) -> (usize, usize) {
        let fast = self
            .files
            .values()
            .filter(|t| t.route == Tier::Fast)
            .count();
        (self.files.len(), fast)
    }

    /// Files forgotten to keep at most [`FILES_TRACKED_MAX`].
    pub fn files_forgotten(&self) -> u64 {
        self.files_forgotten
    }

    /// `file` was removed: forget its evidence (and its stream).
    pub fn forget(&mut self, file: FileId) {
        if let Some(track) = self.files.remove(&file) {
            self.by_age.remove(&track.last_seen);
        }
        self.streams.retain(|&(f, _)| f != file);
    }

    /// Requests sent to the fast tier so far because every stream of the
    /// capacity tier was held by another file (module docs).
    pub fn deferred(&self) -> u64 {
        self.deferred
    }

    /// First requests of files sent to the fast tier so far as the disk's
    /// positioning for a new file (`new_file_seeks`, module docs).
    pub fn new_files(&self) -> u64 {
        self.new_files
    }

    /// The files holding the capacity tier's streams now.
    pub fn stream_holders(&self, now: Time) -> Vec<FileId> {
        let idle = self.model.disk_idle;
        self.streams
            .iter()
            .filter(|&&(_, last)| now.saturating_since(last) <= idle)
            .map(|&(file, _)| file)
            .collect()
    }

    /// Count one request at `now`; returns the tier it goes to and the
    /// verdict when it completes a window. The tier is the file's route
    /// before this request, unless that is the capacity tier and every
    /// stream of it is held by another file: then the fast tier.
    pub fn handle_write(
        &mut self,
        now: Time,
        request: WriteRequest,
    ) -> (Tier, Option<FileVerdict>) {
        let (route, verdict) = self.handle_evidence(request);
        // Requests of the file so far, this one included.
        let seen = self.files.get(&request.file).map_or(0, |t| t.seen);
        if seen == 1 && route == Tier::Capacity && self.model.new_file_seeks {
            let r = self.model.ratio(1, 1, request.len);
            if self.model.next_route(Tier::Capacity, r) == Tier::Fast {
                self.new_files += 1;
                return (Tier::Fast, verdict);
            }
        }
        // A file too new to have shown its pattern neither holds a stream
        // nor waits for one: a random file moves to the fast tier after
        // its first few requests, and must not keep a sequential writer
        // off the disk meanwhile.
        let known = seen >= EARLY_EVIDENCE;
        // A file whose evidence moves it to the fast tier with this
        // request takes no stream for it.
        let leaving = verdict.is_some_and(|v| v.next_route == Tier::Fast);
        match route {
            Tier::Capacity if !known || leaving => {
                self.streams.retain(|&(f, _)| f != request.file);
            }
            Tier::Capacity if !self.take_stream(now, request.file) => {
                self.deferred += 1;
                return (Tier::Fast, verdict);
            }
            Tier::Capacity => {}
            // Its evidence moved it to the fast tier: its stream is free.
            Tier::Fast => self.streams.retain(|&(f, _)| f != request.file),
        }
        (route, verdict)
    }

    /// Whether `file` may send a request to the capacity tier at `now`:
    /// it holds a stream, or takes a free one (an idle holder's counts as
    /// free). Always with `disk_streams` 0.
    fn take_stream(&mut self, now: Time, file: FileId) -> bool {
        let max = self.model.disk_streams as usize;
        if max == 0 || !self.model.may_buffer() {
            return true;
        }
        let idle = self.model.disk_idle;
        self.streams
            .retain(|&(f, last)| f == file || now.saturating_since(last) <= idle);
        if let Some(held) = self.streams.iter_mut().find(|(f, _)| *f == file) {
            held.1 = now;
            return true;
        }
        if self.streams.len() < max {
            self.streams.push((file, now));
            return true;
        }
        false
    }

    /// The file's own evidence: the route its request goes to by it, and
    /// the verdict when the request completes a window.
    fn handle_evidence(&mut self, request: WriteRequest) -> (Tier, Option<FileVerdict>) {
        self.requests += 1;
        if !self.files.contains_key(&request.file) && self.files.len() >= FILES_TRACKED_MAX {
            self.forget_oldest();
        }
        let now = self.requests;
        let track = self.files.entry(request.file).or_insert(Track {
            route: Tier::Capacity,
            recent: [(0, 0); 2],
            seen_any: false,
            requests: 0,
            seeks: 0,
            bytes: 0,
            last_seen: now,
            seen: 0,
        });
        let tier = track.route;
        let end = request.end();
        let len = request.len;
        let continues = track.recent.iter().any(|&(start, prev_end)| {
            start.saturating_sub(len) <= request.offset
                && request.offset <= prev_end.saturating_add(len)
        });
        if track.seen_any && !continues {
            track.seeks += 1;
        }
        track.seen_any = true;
        track.recent = [(request.offset, end), track.recent[0]];
        track.requests += 1;
        track.seen = track.seen.saturating_add(1);
        track.bytes = track.bytes.saturating_add(request.len);
        // A new track was made with `last_seen` now and has no entry yet.
        if track.last_seen != now {
            self.by_age.remove(&track.last_seen);
        }
        track.last_seen = now;
        self.by_age.insert(now, request.file);
        if track.requests < EARLY_EVIDENCE.min(self.model.evidence) {
            return (tier, None);
        }
        let ratio = self.model.ratio(track.requests, track.seeks, track.bytes);
        let next_route = self.model.next_route(track.route, ratio);
        if track.requests < self.model.evidence && next_route == track.route {
            // Early, only a switch ends the window.
            return (tier, None);
        }
        let verdict = FileVerdict {
            file: request.file,
            requests: track.requests,
            seeks: track.seeks,
            bytes: track.bytes,
            ratio,
            route: track.route,
            next_route,
        };
        track.route = next_route;
        track.requests = 0;
        track.seeks = 0;
        track.bytes = 0;
        (tier, Some(verdict))
    }

    fn forget_oldest(&mut self) {
        if let Some((_, file)) = self.by_age.pop_first() {
            self.files.remove(&file);
            self.files_forgotten += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    const KIB: u64 = 1024;

    fn req(file: u64, offset: u64, len: u64) -> WriteRequest {
        WriteRequest {
            file: FileId(file),
            offset,
            len,
        }
    }

    fn classifier() -> FileClassifier {
        FileClassifier::new(CostModel::default()).unwrap()
    }

    /// A tiny deterministic generator (xorshift) for shuffled offsets.
    fn shuffled(n: u64, seed: u64) -> Vec<u64> {
        let mut v: Vec<u64> = (0..n).collect();
        let mut x = seed | 1;
        for i in (1..v.len()).rev() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            v.swap(i, (x % (i as u64 + 1)) as usize);
        }
        v
    }

    /// Whether 1-byte writes at random offsets (the most a window can save
    /// per byte spent) ever reach the fast tier under `model`.
    fn tiniest_random_writes_buffer(model: CostModel) -> bool {
        let mut c = FileClassifier::new(model).unwrap();
        shuffled(4096, 7)
            .into_iter()
            .any(|i| c.handle_write(Time::ZERO, req(1, i * 64 * KIB, 1)).0 == Tier::Fast)
    }

    #[test]
    fn may_buffer_is_exactly_whether_any_writes_can_be_buffered() {
        let at = |seek_us| CostModel {
            capacity_seek: Duration::from_micros(seek_us),
            ..CostModel::EMULATED
        };
        // t_fast 60 µs, h 0.5: the bound is t_seek = 90 µs.
        for (seek_us, buffers) in [(58, false), (90, false), (95, true), (5_170, true)] {
            let model = at(seek_us);
            assert_eq!(model.may_buffer(), buffers, "t_seek {seek_us} µs");
            assert_eq!(
                tiniest_random_writes_buffer(model),
                buffers,
                "t_seek {seek_us} µs"
            );
        }
    }

    #[test]
    fn a_sequential_writer_stays_on_the_capacity_tier() {
        let mut c = classifier();
        for i in 0..1000 {
            let (tier, _) = c.handle_write(Time::ZERO, req(1, i * 256 * KIB, 256 * KIB));
            assert_eq!(tier, Tier::Capacity);
        }
    }

    #[test]
    fn one_swap_of_consecutive_requests_is_not_a_seek_each() {
        let mut c = classifier();
        // 0, 2, 1, 3, 5, 4, ... : every other pair arrives swapped.
        let mut verdicts = Vec::new();
        for pair in 0..64u64 {
            for i in [2 * pair + 1, 2 * pair] {
                if let (_, Some(v)) = c.handle_write(Time::ZERO, req(1, i * 128 * KIB, 128 * KIB)) {
                    verdicts.push(v);
                }
            }
        }
        assert!(verdicts.iter().all(|v| v.next_route == Tier::Capacity));
        assert!(verdicts.iter().all(|v| v.seeks <= v.requests / 2 + 1));
    }

    #[test]
    fn a_random_writer_is_buffered_after_its_first_window() {
        let mut c = classifier();
        let mut tiers = Vec::new();
        for block in shuffled(2048, 7) {
            tiers.push(
                c.handle_write(Time::ZERO, req(1, block * 256 * KIB, 256 * KIB))
                    .0,
            );
        }
        // Clear evidence after 4 requests (3 seeks between them).
        assert!(tiers[..EARLY_EVIDENCE as usize]
            .iter()
            .all(|&t| t == Tier::Capacity));
        assert!(tiers[EARLY_EVIDENCE as usize..]
            .iter()
            .all(|&t| t == Tier::Fast));
    }

    /// Issue 18's mixed workload: one sequential writer and random writers
    /// on another file, interleaved. SSDUP+'s shared stream buffers both
    /// in proportion; per file, only the random file is buffered.
    #[test]
    fn concurrent_sequential_and_random_files_are_routed_apart() {
        let mut c = classifier();
        let mut fast = [0u64; 2];
        let blocks = shuffled(4096, 3);
        for (i, block) in blocks.into_iter().enumerate() {
            let seq = req(1, i as u64 * 256 * KIB, 256 * KIB);
            let rand = req(2, block * 256 * KIB, 256 * KIB);
            for (k, r) in [seq, rand].into_iter().enumerate() {
                if c.handle_write(Time::ZERO, r).0 == Tier::Fast {
                    fast[k] += r.len;
                }
            }
        }
        let total = 4096 * 256 * KIB;
        assert_eq!(fast[0], 0, "nothing of the sequential file");
        assert!(fast[1] as f64 >= 0.99 * total as f64, "{fast:?}");
    }

    /// Eight writers each streaming their own segment of one shared file:
    /// sorted, the stream looks sequential; in arrival order every request
    /// moves the head to another segment, so it is buffered.
    #[test]
    fn interleaved_segments_are_buffered() {
        let mut c = classifier();
        let segment = 64 << 20;
        let mut last = Tier::Capacity;
        for i in 0..256u64 {
            for w in 0..8u64 {
                last = c
                    .handle_write(Time::ZERO, req(1, w * segment + i * 256 * KIB, 256 * KIB))
                    .0;
            }
        }
        assert_eq!(last, Tier::Fast);
    }

    /// Large random writes cost the disk little more than sequential ones:
    /// a seek per 8 MiB saves less than writing 8 MiB to the SSD costs.
    #[test]
    fn large_random_writes_stay_on_the_capacity_tier() {
        let mut c = classifier();
        for block in shuffled(512, 5) {
            let (tier, _) =
                c.handle_write(Time::ZERO, req(1, block * 8 * 1024 * KIB, 8 * 1024 * KIB));
            assert_eq!(tier, Tier::Capacity);
        }
    }

    /// A steady workload right at the boundary does not flap: with ratio
    /// between 1/(1+h) and 1+h the file keeps its route.
    #[test]
    fn hysteresis_keeps_the_route_between_the_bounds() {
        let m = CostModel::default();
        for current in [Tier::Capacity, Tier::Fast] {
            assert_eq!(m.next_route(current, 1.0), current);
            assert_eq!(m.next_route(current, 1.49), current);
            assert_eq!(m.next_route(current, 0.67), current);
        }
        assert_eq!(m.next_route(Tier::Capacity, 1.51), Tier::Fast);
        assert_eq!(m.next_route(Tier::Fast, 0.66), Tier::Capacity);
    }

    #[test]
    fn a_file_that_turns_sequential_goes_back_to_the_capacity_tier() {
        let mut c = classifier();
        for block in shuffled(64, 9) {
            c.handle_write(Time::ZERO, req(1, block * 64 * KIB, 64 * KIB));
        }
        assert_eq!(c.route(FileId(1)), Tier::Fast);
        for i in 0..64 {
            c.handle_write(Time::ZERO, req(1, (1 << 30) + i * 64 * KIB, 64 * KIB));
        }
        assert_eq!(c.route(FileId(1)), Tier::Capacity);
    }

    #[test]
    fn tracking_is_bounded_and_forgets_the_stalest_file() {
        let mut c = classifier();
        for f in 0..(FILES_TRACKED_MAX as u64 + 10) {
            c.handle_write(Time::ZERO, req(f, 0, 1));
        }
        assert_eq!(c.tracked().0, FILES_TRACKED_MAX);
        assert_eq!(c.files_forgotten(), 10);
        assert!(c.files.contains_key(&FileId(FILES_TRACKED_MAX as u64 + 9)));
        assert!(!c.files.contains_key(&FileId(0)));
        assert_eq!(c.by_age.len(), c.files.len());
    }

    #[test]
    fn a_file_written_again_is_not_the_stalest() {
        let mut c = classifier();
        let max = FILES_TRACKED_MAX as u64;
        for f in 0..max {
            c.handle_write(Time::ZERO, req(f, 0, 1));
        }
        // File 0 was first, but is written again: file 1 is unseen longest.
        c.handle_write(Time::ZERO, req(0, 1, 1));
        c.handle_write(Time::ZERO, req(max, 0, 1));
        assert!(c.files.contains_key(&FileId(0)));
        assert!(!c.files.contains_key(&FileId(1)));
        // A forgotten file leaves no entry behind to be forgotten again.
        c.forget(FileId(2));
        c.handle_write(Time::ZERO, req(max + 1, 0, 1));
        assert!(c.files.contains_key(&FileId(3)));
        c.handle_write(Time::ZERO, req(max + 2, 0, 1));
        assert!(!c.files.contains_key(&FileId(3)));
        assert_eq!(c.files_forgotten(), 2);
        assert_eq!(c.by_age.len(), c.files.len());
        assert!(c
            .files
            .iter()
            .all(|(f, t)| c.by_age.get(&t.last_seen) == Some(f)));
    }

    #[test]
    fn bad_models_are_refused() {
        for (model, key) in [
            (
                CostModel {
                    fast_bytes_per_s: 0.0,
                    ..CostModel::default()
                },
                "cost_fast_bandwidth",
            ),
            (
                CostModel {
                    hysteresis: f64::NAN,
                    ..CostModel::default()
                },
                "cost_hysteresis",
            ),
            (
                CostModel {
                    evidence: 1,
                    ..CostModel::default()
                },
                "cost_evidence",
            ),
        ] {
            assert_eq!(FileClassifier::new(model).unwrap_err().key, key);
        }
    }

    /// Issue 32: eight files each written sequentially (IO500's ior-easy),
    /// interleaved at the disk. Once their pattern is known, one holds the
    /// disk's stream and goes to the capacity tier; the others' requests go
    /// to the fast tier while it writes (on the disk they would seek at
    /// every switch). Once it stops, the next file takes the stream.
    #[test]
    fn sequential_files_interleaved_at_one_disk_keep_it_to_one_stream() {
        let mut c = classifier();
        let ms = Time::from_millis;
        let mut to_capacity = [0u32; 8];
        for i in 0..32u64 {
            for f in 0..8u64 {
                let now = ms(i * 14 + f);
                let (tier, _) = c.handle_write(now, req(f, i * 2048 * KIB, 2048 * KIB));
                if tier == Tier::Capacity {
                    to_capacity[f as usize] += 1;
                }
            }
        }
        assert_eq!(
            to_capacity,
            // Each file's first 3 requests, before its pattern is known,
            // go where its evidence says; from the 4th on, one stream.
            [32, 3, 3, 3, 3, 3, 3, 3],
            "one stream on the disk"
        );
        assert_eq!(c.deferred(), 7 * 29);
        assert_eq!(c.stream_holders(ms(31 * 14)), vec![FileId(0)]);
        // File 0 is done; past its idle time the next writer takes the disk.
        let later = ms(31 * 14 + 100);
        assert!(c.stream_holders(later).is_empty());
        assert_eq!(
            c.handle_write(later, req(3, 32 * 2048 * KIB, 2048 * KIB)).0,
            Tier::Capacity
        );
        assert_eq!(
            c.handle_write(later, req(4, 32 * 2048 * KIB, 2048 * KIB)).0,
            Tier::Fast
        );
        // A removed file lets its stream go at once.
        c.forget(FileId(3));
        assert_eq!(
            c.handle_write(later, req(4, 33 * 2048 * KIB, 2048 * KIB)).0,
            Tier::Capacity
        );
    }

    #[test]
    fn with_no_disk_streams_every_file_keeps_to_its_own_evidence() {
        let mut c = FileClassifier::new(CostModel {
            disk_streams: 0,
            ..CostModel::default()
        })
        .unwrap();
        for f in 0..8u64 {
            assert_eq!(
                c.handle_write(Time::ZERO, req(f, 0, 2048 * KIB)).0,
                Tier::Capacity
            );
        }
        assert_eq!(c.deferred(), 0);
    }

    /// A random file's evidence keeps it on the fast tier; it never holds
    /// the stream a sequential writer needs.
    #[test]
    fn a_random_file_does_not_keep_the_disk_from_a_sequential_one() {
        let mut c = classifier();
        let offsets = shuffled(64, 7);
        let mut sequential_on_disk = 0;
        for (i, &block) in offsets.iter().enumerate() {
            let now = Time::from_millis(i as u64 * 10);
            c.handle_write(now, req(1, block * 256 * KIB, 256 * KIB));
            let (tier, _) = c.handle_write(now, req(2, i as u64 * 256 * KIB, 256 * KIB));
            sequential_on_disk += u32::from(tier == Tier::Capacity);
        }
        // The random file never holds the stream: too new to, until its
        // evidence moves it to the fast tier.
        assert_eq!(sequential_on_disk, 64);
    }

    /// A tier that positions about as fast as the fast tier takes a
    /// request never buffers (`may_buffer`), so its streams are not kept:
    /// eight sequential files interleave on it at no cost. (Over a local
    /// directory profiled at 61 µs, the stream rule sent 727 MiB of fio's
    /// 4-job sequential writes to the log: 0.38x mergerfs.)
    #[test]
    fn a_tier_that_positions_fast_keeps_no_streams() {
        let mut c = FileClassifier::new(CostModel {
            capacity_seek: Duration::from_micros(61),
            ..CostModel::default()
        })
        .unwrap();
        for i in 0..32u64 {
            for f in 0..8u64 {
                let now = Time::from_millis(i * 14 + f);
                let (tier, _) = c.handle_write(now, req(f, i * 1024 * KIB, 1024 * KIB));
                assert_eq!(tier, Tier::Capacity, "file {f}, request {i}");
            }
        }
        assert_eq!(c.deferred(), 0);
    }

    /// Issue 32: mdtest-hard's files, one 3,901-byte write each. With
    /// `new_file_seeks` (closes leave bytes in the log) a small first
    /// request goes to the fast tier, the disk's positioning paid later by
    /// the flusher; a large one stays (its transfer outweighs the
    /// positioning), and so does every request after the first of a
    /// sequential file. Without it (close-to-open), the first request
    /// goes where the file's route says.
    #[test]
    fn a_new_files_small_first_request_is_buffered_where_closes_leave_it() {
        let model = CostModel {
            new_file_seeks: true,
            ..CostModel::default()
        };
        let mut c = FileClassifier::new(model).unwrap();
        for f in 0..100u64 {
            assert_eq!(c.handle_write(Time::ZERO, req(f, 0, 3901)).0, Tier::Fast);
        }
        assert_eq!(c.new_files(), 100);
        // A sequential file: its first request only.
        let tiers: Vec<Tier> = (0..20u64)
            .map(|i| c.handle_write(Time::ZERO, req(200, i * 4 * KIB, 4 * KIB)).0)
            .collect();
        assert_eq!(tiers[0], Tier::Fast);
        assert!(tiers[1..].iter().all(|&t| t == Tier::Capacity), "{tiers:?}");
        // 2 MiB: r(1, 1, l) = 5.17 ms / 8.45 ms, below 1 + h.
        assert_eq!(
            c.handle_write(Time::ZERO, req(300, 0, 2048 * KIB)).0,
            Tier::Capacity
        );
        assert_eq!(c.new_files(), 101);

        let mut off = classifier();
        assert_eq!(
            off.handle_write(Time::ZERO, req(1, 0, 3901)).0,
            Tier::Capacity
        );
        assert_eq!(off.new_files(), 0);
    }
}
