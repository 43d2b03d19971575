//! A 7200 rpm hard disk with an elevator (C-LOOK) scheduler queue
//! (EVALUATION §1).
//!
//! The disk holds up to `queue_depth` outstanding requests. When idle it
//! picks the request with the lowest offset at or above the head (wrapping
//! to the lowest offset when none is above), merges queued requests of the
//! same kind that continue it exactly, and serves them as one service whose
//! time is seek + rotation + transfer:
//! - seek: the three-point fit `seek(x) = T + a·x + b·sqrt(x)` of the
//!   distance fraction `x = d / capacity`, zero for `d = 0`;
//! - rotation: uniform in `[0, 60/rpm s)` from the seeded RNG, and none when
//!   the service starts exactly where the previous one ended (the platter is
//!   already under the head; idle time between the two is ignored, as if the
//!   drive's track buffer absorbed it);
//! - transfer: `len / rate(offset + len/2)`, the media rate at the
//!   service's midpoint (the rate falls linearly from the outer to the inner
//!   edge, so the midpoint is exact to first order and within a fraction of
//!   a percent for any service below a few GiB).
//!
//! Invariants: at most one service is in progress; the queue never holds
//! more than `queue_depth` requests and never drops one (a full queue hands
//! the request back); every queued request lies inside `[0, capacity)`
//! (requests reaching beyond are clamped at submit, and a debug build
//! asserts, because the simulator never issues them); the same config and
//! seed give the same services in the same order.

use core::time::Duration;
use std::collections::BTreeMap;

use crate::rng::DeviceRng;
use crate::{duration_from_secs, require_positive_finite, DeviceConfigError, IoKind};

/// Largest `queue_depth` accepted: far beyond the 32–512 the papers use,
/// small enough that a mistyped value is caught.
pub const QUEUE_DEPTH_MAX: u32 = 65_536;

/// Largest `rpm` accepted (the fastest drives ever sold spin at 15,000).
pub const RPM_MAX: u32 = 100_000;

/// Largest seek time accepted, in milliseconds; larger is a unit mistake.
pub const SEEK_MS_MAX: f64 = 1_000.0;

/// Configuration of the disk model. Defaults: a 300 GB 7200 rpm disk like
/// the papers' testbeds.
#[derive(Clone, Debug, PartialEq)]
pub struct HddConfig {
    /// Size of the disk; offsets run over `[0, capacity_bytes)`.
    pub capacity_bytes: u64,
    /// `T`: seek time to the adjacent track (the smallest non-zero distance).
    pub seek_track_ms: f64,
    /// `A`: mean seek time between two uniformly random offsets.
    pub seek_avg_ms: f64,
    /// `F`: seek time across the whole disk.
    pub seek_full_ms: f64,
    /// Spindle speed; the rotational delay is uniform in `[0, 60/rpm s)`.
    pub rpm: u32,
    /// Media rate at offset 0 (outer edge).
    pub media_outer_bytes_per_s: f64,
    /// Media rate at the last byte (inner edge); linear in between.
    pub media_inner_bytes_per_s: f64,
    /// Outstanding requests the scheduler holds, at most [`QUEUE_DEPTH_MAX`].
    pub queue_depth: u32,
    /// Largest service built by merging contiguous requests. A single
    /// request longer than this is still served whole, on its own.
    pub merge_max_bytes: u64,
}

impl Default for HddConfig {
    fn default() -> HddConfig {
        HddConfig {
            capacity_bytes: 300_000_000_000,
            seek_track_ms: 1.0,
            seek_avg_ms: 8.5,
            seek_full_ms: 18.0,
            rpm: 7200,
            media_outer_bytes_per_s: 200e6,
            media_inner_bytes_per_s: 100e6,
            queue_depth: 128,
            merge_max_bytes: 512 * 1024,
        }
    }
}

impl HddConfig {
    /// Checks every value; the error names the first bad key.
    ///
    /// Besides ranges, the seek times must satisfy
    /// `(F−T)/3 ≤ A−T ≤ 11(F−T)/15`: exactly the condition for the fitted
    /// curve to have `b ≥ 0` and `a + b/2 ≥ 0`, i.e. to rise with distance
    /// everywhere on `(0, 1]` (outside it a longer seek would be faster).
    pub fn validate(&self) -> Result<(), DeviceConfigError> {
        if self.capacity_bytes == 0 {
            return Err(DeviceConfigError {
                key: "capacity_bytes",
                expected: "> 0".to_string(),
            });
        }
        for (key, value) in [
            ("seek_track_ms", self.seek_track_ms),
            ("seek_avg_ms", self.seek_avg_ms),
            ("seek_full_ms", self.seek_full_ms),
        ] {
            if !(value.is_finite() && (0.0..=SEEK_MS_MAX).contains(&value)) {
                return Err(DeviceConfigError {
                    key,
                    expected: format!("a number in [0, {SEEK_MS_MAX}] ms (got {value})"),
                });
            }
        }
        let (t, a, f) = (self.seek_track_ms, self.seek_avg_ms, self.seek_full_ms);
        if f <= t {
            return Err(DeviceConfigError {
                key: "seek_full_ms",
                expected: format!("greater than seek_track_ms = {t} ms (got {f})"),
            });
        }
        let low = t + (f - t) / 3.0;
        let high = t + 11.0 * (f - t) / 15.0;
        if !(low..=high).contains(&a) {
            return Err(DeviceConfigError {
                key: "seek_avg_ms",
                expected: format!(
                    "in [{low:.3}, {high:.3}] ms for seek_track_ms = {t} and seek_full_ms = {f}, \
                     so that the seek curve rises with distance (got {a})"
                ),
            });
        }
        if self.rpm == 0 || self.rpm > RPM_MAX {
            return Err(DeviceConfigError {
                key: "rpm",
                expected: format!("in 1..={RPM_MAX} (got {})", self.rpm),
            });
        }
        require_positive_finite("media_outer_bytes_per_s", self.media_outer_bytes_per_s)?;
        require_positive_finite("media_inner_bytes_per_s", self.media_inner_bytes_per_s)?;
        if self.queue_depth == 0 || self.queue_depth > QUEUE_DEPTH_MAX {
            return Err(DeviceConfigError {
                key: "queue_depth",
                expected: format!("in 1..={QUEUE_DEPTH_MAX} (got {})", self.queue_depth),
            });
        }
        if self.merge_max_bytes == 0 {
            return Err(DeviceConfigError {
                key: "merge_max_bytes",
                expected: "> 0".to_string(),
            });
        }
        Ok(())
    }

    /// Coefficient `a = (8/3)(F−T) − 5(A−T)` of the seek fit, in ms.
    pub fn seek_linear_ms(&self) -> f64 {
        let (t, a, f) = (self.seek_track_ms, self.seek_avg_ms, self.seek_full_ms);
        8.0 / 3.0 * (f - t) - 5.0 * (a - t)
    }

    /// Coefficient `b = 5(A−T) − (5/3)(F−T)` of the seek fit, in ms.
    pub fn seek_sqrt_ms(&self) -> f64 {
        let (t, a, f) = (self.seek_track_ms, self.seek_avg_ms, self.seek_full_ms);
        5.0 * (a - t) - 5.0 / 3.0 * (f - t)
    }

    /// One full revolution, in seconds (`60 / rpm`).
    pub fn rotation_period_s(&self) -> f64 {
        60.0 / f64::from(self.rpm)
    }
}

/// One request to the disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HddRequest {
    /// Caller's identifier, handed back in the service; not interpreted.
    pub id: u64,
    /// Read or write.
    pub kind: IoKind,
    /// Byte address on the disk.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
}

impl HddRequest {
    /// One past the last byte, saturating.
    pub fn end(&self) -> u64 {
        self.offset.saturating_add(self.len)
    }
}

/// One service of the disk: one or more merged requests served as a single
/// transfer.
#[derive(Clone, Debug, PartialEq)]
pub struct HddService {
    /// The requests served, in address order; each ends where the next
    /// starts.
    pub requests: Vec<HddRequest>,
    /// Kind shared by every request of the service.
    pub kind: IoKind,
    /// First byte served.
    pub offset: u64,
    /// Bytes served (the sum of the requests' lengths).
    pub len: u64,
    /// Distance the head moved to reach `offset`.
    pub seek_distance_bytes: u64,
    /// `seek + rotation + transfer`.
    pub duration: Duration,
    /// Head movement.
    pub seek: Duration,
    /// Wait for the sector to come under the head.
    pub rotation: Duration,
    /// Media transfer.
    pub transfer: Duration,
}

impl HddService {
    /// One past the last byte served.
    pub fn end(&self) -> u64 {
        self.offset.saturating_add(self.len)
    }
}

/// Counters of the disk since it was created. Services are counted when
/// they start, so the one in progress is included.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HddStats {
    /// Services started.
    pub services: u64,
    /// Requests served (inside those services).
    pub requests_served: u64,
    /// Requests that joined a service behind another one (merged).
    pub requests_merged: u64,
    /// Bytes served.
    pub bytes: u64,
    /// Services that paid no rotational delay because they continued the
    /// previous one.
    pub services_sequential: u64,
    /// Sum of service durations.
    pub busy_time: Duration,
    /// Sum of seek times.
    pub seek_time_total: Duration,
    /// Sum of seek distances.
    pub seek_distance_bytes_total: u64,
    /// Sum of rotational delays.
    pub rotation_time_total: Duration,
    /// Sum of transfer times.
    pub transfer_time_total: Duration,
    /// Submits handed back because the queue was full.
    pub submits_rejected: u64,
    /// Requests accepted whose range reached past the capacity (clamped).
    pub requests_clamped: u64,
    /// Longest queue seen (after a submit).
    pub queue_len_max: usize,
}

/// The disk: a scheduler queue, a head and at most one service in progress.
#[derive(Clone, Debug)]
pub struct Hdd {
    config: HddConfig,
    /// Queued requests keyed by (offset, submit sequence): C-LOOK order is a
    /// range lookup, and the sequence keeps requests at the same offset
    /// apart (in submit order) whatever ids the caller uses.
    queue: BTreeMap<(u64, u64), HddRequest>,
    submit_seq: u64,
    /// Where the head rests: the end of the last completed service.
    head_bytes: u64,
    /// End of the last completed service, `None` before the first one: a
    /// service starting there needs no rotational delay.
    previous_end: Option<u64>,
    /// End of the service in progress, if any.
    in_service_end: Option<u64>,
    rng: DeviceRng,
    stats: HddStats,
}

impl Hdd {
    /// A disk with an empty queue, head at offset 0, rotational delays
    /// drawn from `seed`.
    pub fn new(config: HddConfig, seed: u64) -> Result<Hdd, DeviceConfigError> {
        config.validate()?;
        Ok(Hdd {
            config,
            queue: BTreeMap::new(),
            submit_seq: 0,
            head_bytes: 0,
            previous_end: None,
            in_service_end: None,
            rng: DeviceRng::new(seed),
            stats: HddStats::default(),
        })
    }

    /// The configuration the disk was built with.
    pub fn config(&self) -> &HddConfig {
        &self.config
    }

    /// Requests waiting in the scheduler queue (not the one in service).
    pub fn queue_len(&self) -> usize {
        self.queue.len()
    }

    /// Whether the queue holds `queue_depth` requests, so `submit` refuses.
    pub fn queue_full(&self) -> bool {
        self.queue.len() >= self.config.queue_depth as usize
    }

    /// Whether a service is in progress.
    pub fn is_busy(&self) -> bool {
        self.in_service_end.is_some()
    }

    /// Where the head rests (the end of the last completed service).
    pub fn head_offset(&self) -> u64 {
        self.head_bytes
    }

    /// Puts the head at `head_bytes`, with `previous_end` the end of the
    /// last service (`None`: no service yet, so the next one pays a
    /// rotational delay). For a disk whose platter several models share
    /// (one per process, each with its own queue): before each
    /// `start_next`, the head is where the last service of *any* of them
    /// left it. Only while idle: calling it during a service is a
    /// programmer error (debug builds assert, release builds ignore it).
    pub fn set_head(&mut self, head_bytes: u64, previous_end: Option<u64>) {
        debug_assert!(!self.is_busy(), "set_head() during a service");
        if self.is_busy() {
            return;
        }
        let last = self.config.capacity_bytes;
        self.head_bytes = head_bytes.min(last);
        self.previous_end = previous_end.map(|end| end.min(last));
    }

    /// Queues `request`. Returns it as `Err(request)` when the queue holds
    /// `queue_depth` requests: the caller keeps it and retries after a
    /// completion.
    ///
    /// A request reaching past the capacity is a programmer error of the
    /// caller: debug builds assert; release builds clamp it into the disk
    /// (offset to the last byte, length to what fits) and count it in
    /// [`HddStats::requests_clamped`]; the clamped request is what the
    /// service hands back.
    pub fn submit(&mut self, request: HddRequest) -> Result<(), HddRequest> {
        if self.queue_full() {
            self.stats.submits_rejected += 1;
            return Err(request);
        }
        let capacity = self.config.capacity_bytes;
        debug_assert!(
            request.offset < capacity && request.end() <= capacity,
            "request {request:?} reaches past the disk capacity {capacity}"
        );
        let mut request = request;
        if request.offset >= capacity || request.end() > capacity {
            self.stats.requests_clamped += 1;
            request.offset = request.offset.min(capacity - 1);
            request.len = request.len.min(capacity - request.offset);
        }
        self.queue
            .insert((request.offset, self.submit_seq), request);
        self.submit_seq += 1;
        self.stats.queue_len_max = self.stats.queue_len_max.max(self.queue.len());
        Ok(())
    }

    /// When idle and the queue is not empty: picks the next request in
    /// C-LOOK order (the lowest offset at or above the head, else the
    /// lowest offset), merges queued requests of the same kind that start
    /// exactly where the service ends, while the service stays within
    /// `merge_max_bytes`, computes the service time, becomes busy and
    /// returns the service. `None` when busy or the queue is empty.
    pub fn start_next(&mut self) -> Option<HddService> {
        if self.is_busy() {
            return None;
        }
        let first_key = self
            .queue
            .range((self.head_bytes, 0)..)
            .next()
            .or_else(|| self.queue.iter().next())
            .map(|(key, _)| *key)?;
        // INVARIANT: the key was just read from the map and nothing removed it.
        let first = self.queue.remove(&first_key).expect("key from the map");
        let kind = first.kind;
        let offset = first.offset;
        let mut len = first.len;
        let mut requests = vec![first];
        // Merge forward. Each round removes one queued request, so the loop
        // runs at most queue_depth times.
        loop {
            let end = offset.saturating_add(len);
            let next_key = self
                .queue
                .range((end, 0)..=(end, u64::MAX))
                .find(|(_, r)| r.kind == kind)
                .map(|(key, r)| (*key, r.len));
            let Some((key, next_len)) = next_key else {
                break;
            };
            if next_len == 0 || len.saturating_add(next_len) > self.config.merge_max_bytes {
                // A zero-length request would not extend the service; a
                // longer one would exceed the merge limit. Either way the
                // service ends here.
                break;
            }
            // INVARIANT: the key was just found in the map.
            let next = self.queue.remove(&key).expect("key from the map");
            len += next.len;
            requests.push(next);
        }

        let seek_distance_bytes = offset.abs_diff(self.head_bytes);
        let seek = self.seek_time(seek_distance_bytes);
        let rotation = if self.previous_end == Some(offset) {
            Duration::ZERO
        } else {
            duration_from_secs(self.rng.unit_f64() * self.config.rotation_period_s())
        };
        let midpoint = offset.saturating_add(len / 2);
        let transfer = duration_from_secs(len as f64 / self.media_bytes_per_s(midpoint));
        let duration = seek.saturating_add(rotation).saturating_add(transfer);

        let stats = &mut self.stats;
        stats.services += 1;
        stats.requests_served += requests.len() as u64;
        stats.requests_merged += requests.len() as u64 - 1;
        stats.bytes = stats.bytes.saturating_add(len);
        if self.previous_end == Some(offset) {
            stats.services_sequential += 1;
        }
        stats.busy_time = stats.busy_time.saturating_add(duration);
        stats.seek_time_total = stats.seek_time_total.saturating_add(seek);
        stats.seek_distance_bytes_total = stats
            .seek_distance_bytes_total
            .saturating_add(seek_distance_bytes);
        stats.rotation_time_total = stats.rotation_time_total.saturating_add(rotation);
        stats.transfer_time_total = stats.transfer_time_total.saturating_add(transfer);

        let service = HddService {
            requests,
            kind,
            offset,
            len,
            seek_distance_bytes,
            duration,
            seek,
            rotation,
            transfer,
        };
        self.in_service_end = Some(service.end());
        Some(service)
    }

    /// The service in progress finished: the disk is idle and the head
    /// rests at the service's end. Calling it while idle is a programmer
    /// error: debug builds assert, release builds ignore it.
    pub fn complete(&mut self) {
        debug_assert!(self.is_busy(), "complete() without a service in progress");
        if let Some(end) = self.in_service_end.take() {
            self.head_bytes = end;
            self.previous_end = Some(end);
        }
    }

    /// Seek time over `distance_bytes`: `T + a·x + b·sqrt(x)` with
    /// `x = distance / capacity` (capped at 1), zero for distance 0.
    pub fn seek_time(&self, distance_bytes: u64) -> Duration {
        if distance_bytes == 0 {
            return Duration::ZERO;
        }
        let x = distance_bytes.min(self.config.capacity_bytes) as f64
            / self.config.capacity_bytes as f64;
        let ms = self.config.seek_track_ms
            + self.config.seek_linear_ms() * x
            + self.config.seek_sqrt_ms() * x.sqrt();
        duration_from_secs(ms / 1e3)
    }

    /// Media rate at `offset`: the outer rate at 0 falling linearly to the
    /// inner rate at the last byte (offsets beyond are taken as the last
    /// byte).
    pub fn media_bytes_per_s(&self, offset: u64) -> f64 {
        let last = self.config.capacity_bytes - 1;
        let outer = self.config.media_outer_bytes_per_s;
        let inner = self.config.media_inner_bytes_per_s;
        if last == 0 {
            return outer;
        }
        let fraction = offset.min(last) as f64 / last as f64;
        outer + (inner - outer) * fraction
    }

    /// Counters since creation.
    pub fn stats(&self) -> HddStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KIB: u64 = 1024;

    fn ms(d: Duration) -> f64 {
        d.as_secs_f64() * 1e3
    }

    fn request(id: u64, kind: IoKind, offset: u64, len: u64) -> HddRequest {
        HddRequest {
            id,
            kind,
            offset,
            len,
        }
    }

    fn write(id: u64, offset: u64, len: u64) -> HddRequest {
        request(id, IoKind::Write, offset, len)
    }

    fn disk(config: HddConfig) -> Hdd {
        Hdd::new(config, 42).unwrap()
    }

    /// Serves one service to completion and returns it.
    fn serve(hdd: &mut Hdd) -> HddService {
        let service = hdd.start_next().expect("a queued request");
        hdd.complete();
        service
    }

    #[test]
    fn seek_coefficients_match_the_three_point_fit() {
        let config = HddConfig::default();
        assert!((config.seek_linear_ms() - 7.8333).abs() < 1e-3);
        assert!((config.seek_sqrt_ms() - 9.1667).abs() < 1e-3);
    }

    #[test]
    fn seek_curve_zero_track_full_stroke() {
        let hdd = disk(HddConfig::default());
        let capacity = hdd.config().capacity_bytes;
        assert_eq!(hdd.seek_time(0), Duration::ZERO);
        assert!((ms(hdd.seek_time(1)) - 1.0).abs() < 1e-3);
        assert!((ms(hdd.seek_time(capacity)) - 18.0).abs() < 1e-6);
        assert!((ms(hdd.seek_time(capacity - 1)) - 18.0).abs() < 1e-6);
        // Beyond the full stroke is capped at it.
        assert_eq!(hdd.seek_time(u64::MAX), hdd.seek_time(capacity));
        // Monotone.
        let mut previous = Duration::ZERO;
        for i in 0..=1000u64 {
            let t = hdd.seek_time(capacity / 1000 * i);
            assert!(t >= previous);
            previous = t;
        }
    }

    #[test]
    fn seek_averaged_over_random_pairs_is_the_average_seek() {
        let hdd = disk(HddConfig::default());
        let capacity = hdd.config().capacity_bytes;
        let mut rng = DeviceRng::new(1);
        let n = 200_000;
        let mut total_ms = 0.0;
        for _ in 0..n {
            let u = rng.next_u64() % capacity;
            let v = rng.next_u64() % capacity;
            total_ms += ms(hdd.seek_time(u.abs_diff(v)));
        }
        let mean = total_ms / n as f64;
        assert!((mean - 8.5).abs() < 0.085, "mean seek {mean} ms");
    }

    #[test]
    fn media_rate_edges_and_middle() {
        let hdd = disk(HddConfig::default());
        let last = hdd.config().capacity_bytes - 1;
        assert_eq!(hdd.media_bytes_per_s(0), 200e6);
        assert!((hdd.media_bytes_per_s(last) - 100e6).abs() < 1e-3);
        assert!((hdd.media_bytes_per_s(last / 2) - 150e6).abs() < 1.0);
        assert!((hdd.media_bytes_per_s(u64::MAX) - 100e6).abs() < 1e-3);
    }

    #[test]
    fn transfer_uses_the_midpoint_rate() {
        let mut hdd = disk(HddConfig::default());
        let capacity = hdd.config().capacity_bytes;
        let len = 256 * KIB;
        let offset = capacity / 2 - len / 2;
        hdd.submit(write(1, offset, len)).unwrap();
        let s = serve(&mut hdd);
        let expected = len as f64 / hdd.media_bytes_per_s(offset + len / 2);
        assert!((s.transfer.as_secs_f64() - expected).abs() < 1e-9);
        assert_eq!(s.duration, s.seek + s.rotation + s.transfer);
    }

    #[test]
    fn c_look_serves_upward_then_wraps_to_the_lowest() {
        let mut hdd = disk(HddConfig::default());
        // Put the head at 500 KiB.
        hdd.submit(write(0, 496 * KIB, 4 * KIB)).unwrap();
        serve(&mut hdd);
        assert_eq!(hdd.head_offset(), 500 * KIB);
        for (id, offset_kib) in [(1, 900), (2, 100), (3, 600), (4, 300), (5, 500)] {
            hdd.submit(request(id, IoKind::Read, offset_kib * KIB, 4 * KIB))
                .unwrap();
        }
        let order: Vec<u64> = (0..5).map(|_| serve(&mut hdd).requests[0].id).collect();
        // 500 (at the head), 600, 900, wrap, 100, 300.
        assert_eq!(order, vec![5, 3, 1, 2, 4]);
        assert!(hdd.start_next().is_none());
    }

    #[test]
    fn c_look_is_one_directional() {
        // A request just below the head waits for the wrap even though it is
        // nearer than the ones above.
        let mut hdd = disk(HddConfig::default());
        hdd.submit(write(0, 1000 * KIB, 4 * KIB)).unwrap();
        serve(&mut hdd);
        hdd.submit(write(1, 1000 * KIB, 4 * KIB)).unwrap(); // below head 1004 KiB
        hdd.submit(write(2, 90_000 * KIB, 4 * KIB)).unwrap();
        assert_eq!(serve(&mut hdd).requests[0].id, 2);
        assert_eq!(serve(&mut hdd).requests[0].id, 1);
    }

    #[test]
    fn merges_contiguous_same_kind_up_to_the_limit() {
        let config = HddConfig {
            merge_max_bytes: 512 * KIB,
            ..HddConfig::default()
        };
        let mut hdd = disk(config);
        // Five contiguous 128 KiB writes submitted out of order: the first
        // four merge (512 KiB), the fifth would exceed the limit.
        for i in [3u64, 0, 4, 1, 2] {
            hdd.submit(write(i, i * 128 * KIB, 128 * KIB)).unwrap();
        }
        let s = serve(&mut hdd);
        let ids: Vec<u64> = s.requests.iter().map(|r| r.id).collect();
        assert_eq!(ids, vec![0, 1, 2, 3]);
        assert_eq!((s.offset, s.len), (0, 512 * KIB));
        let s = serve(&mut hdd);
        assert_eq!(s.requests.len(), 1);
        assert_eq!(s.requests[0].id, 4);
        let stats = hdd.stats();
        assert_eq!(stats.services, 2);
        assert_eq!(stats.requests_served, 5);
        assert_eq!(stats.requests_merged, 3);
        assert_eq!(stats.bytes, 640 * KIB);
    }

    #[test]
    fn no_merge_of_read_with_write_or_across_a_gap() {
        let mut hdd = disk(HddConfig::default());
        hdd.submit(write(1, 0, 64 * KIB)).unwrap();
        hdd.submit(request(2, IoKind::Read, 64 * KIB, 64 * KIB))
            .unwrap();
        hdd.submit(write(3, 128 * KIB + 1, 64 * KIB)).unwrap();
        let s = serve(&mut hdd);
        assert_eq!(s.requests.len(), 1);
        assert_eq!(s.kind, IoKind::Write);
        let s = serve(&mut hdd);
        assert_eq!((s.requests.len(), s.kind), (1, IoKind::Read));
        let s = serve(&mut hdd);
        assert_eq!(s.requests[0].id, 3);
        assert_eq!(hdd.stats().requests_merged, 0);
    }

    #[test]
    fn merge_skips_the_other_kind_at_the_same_offset() {
        let mut hdd = disk(HddConfig::default());
        hdd.submit(write(1, 0, 64 * KIB)).unwrap();
        hdd.submit(request(2, IoKind::Read, 64 * KIB, 64 * KIB))
            .unwrap();
        hdd.submit(write(3, 64 * KIB, 64 * KIB)).unwrap();
        let s = serve(&mut hdd);
        let ids: Vec<u64> = s.requests.iter().map(|r| r.id).collect();
        assert_eq!(ids, vec![1, 3]);
    }

    #[test]
    fn oversized_single_request_is_served_whole() {
        let mut hdd = disk(HddConfig::default());
        hdd.submit(write(1, 0, 4 * 1024 * KIB)).unwrap();
        hdd.submit(write(2, 4 * 1024 * KIB, 4 * KIB)).unwrap();
        let s = serve(&mut hdd);
        assert_eq!((s.len, s.requests.len()), (4 * 1024 * KIB, 1));
    }

    #[test]
    fn sequential_follow_on_has_no_seek_and_no_rotation() {
        let mut hdd = disk(HddConfig::default());
        hdd.submit(write(1, 10 * 1024 * KIB, 256 * KIB)).unwrap();
        let first = serve(&mut hdd);
        assert!(first.seek > Duration::ZERO);
        hdd.submit(write(2, first.end(), 256 * KIB)).unwrap();
        let second = serve(&mut hdd);
        assert_eq!(second.seek, Duration::ZERO);
        assert_eq!(second.rotation, Duration::ZERO);
        assert_eq!(second.duration, second.transfer);
        assert_eq!(hdd.stats().services_sequential, 1);
    }

    #[test]
    fn rotation_is_within_one_revolution_and_averages_half() {
        let mut hdd = disk(HddConfig::default());
        let period_ms = 60_000.0 / 7200.0;
        let n = 20_000u64;
        let mut total = 0.0;
        for i in 0..n {
            // Alternate between two far apart addresses: never sequential.
            let offset = if i % 2 == 0 { 0 } else { 1 << 30 };
            hdd.submit(write(i, offset, 4 * KIB)).unwrap();
            let s = serve(&mut hdd);
            assert!(ms(s.rotation) < period_ms);
            total += ms(s.rotation);
        }
        let mean = total / n as f64;
        assert!((mean - period_ms / 2.0).abs() < 0.1, "mean rotation {mean}");
    }

    #[test]
    fn the_first_service_at_offset_zero_pays_rotation() {
        let mut hdd = disk(HddConfig::default());
        hdd.submit(write(1, 0, 4 * KIB)).unwrap();
        let s = serve(&mut hdd);
        assert_eq!(s.seek, Duration::ZERO);
        assert!(s.rotation > Duration::ZERO);
    }

    #[test]
    fn full_queue_hands_the_request_back_and_loses_nothing() {
        let config = HddConfig {
            queue_depth: 4,
            ..HddConfig::default()
        };
        let mut hdd = disk(config);
        for i in 0..4 {
            hdd.submit(write(i, i * 1024 * KIB, 4 * KIB)).unwrap();
        }
        assert!(hdd.queue_full());
        let refused = write(99, 77 * KIB, 4 * KIB);
        assert_eq!(hdd.submit(refused), Err(refused));
        assert_eq!(hdd.queue_len(), 4);
        // Starting a service frees a slot (the queue excludes the service).
        let s = hdd.start_next().unwrap();
        assert!(hdd.is_busy());
        assert!(hdd.start_next().is_none(), "one service at a time");
        hdd.submit(refused).unwrap();
        hdd.complete();
        assert!(!hdd.is_busy());
        let mut served: Vec<u64> = s.requests.iter().map(|r| r.id).collect();
        while let Some(s) = hdd.start_next() {
            served.extend(s.requests.iter().map(|r| r.id));
            hdd.complete();
        }
        served.sort_unstable();
        assert_eq!(served, vec![0, 1, 2, 3, 99]);
        assert_eq!(hdd.stats().submits_rejected, 1);
        assert_eq!(hdd.stats().queue_len_max, 4);
    }

    #[test]
    fn same_id_at_same_offset_is_not_overwritten() {
        let mut hdd = disk(HddConfig::default());
        hdd.submit(write(7, 0, 4 * KIB)).unwrap();
        hdd.submit(write(7, 0, 4 * KIB)).unwrap();
        assert_eq!(hdd.queue_len(), 2);
    }

    #[test]
    fn complete_puts_the_head_at_the_service_end() {
        let mut hdd = disk(HddConfig::default());
        hdd.submit(write(1, 1 << 20, 12_345)).unwrap();
        let s = hdd.start_next().unwrap();
        assert_eq!(hdd.head_offset(), 0, "head moves on completion");
        hdd.complete();
        assert_eq!(hdd.head_offset(), s.end());
    }

    #[test]
    fn same_seed_same_services_other_seed_differs() {
        let run = |seed: u64| {
            let mut hdd = Hdd::new(HddConfig::default(), seed).unwrap();
            let mut durations = Vec::new();
            for i in 0..50u64 {
                hdd.submit(write(i, (i * 7919 % 50) << 30, 4 * KIB))
                    .unwrap();
                durations.push(serve(&mut hdd).duration);
            }
            durations
        };
        assert_eq!(run(3), run(3));
        assert_ne!(run(3), run(4));
    }

    #[test]
    fn config_validation_names_the_key() {
        let bad = |config: HddConfig| config.validate().unwrap_err().key;
        let base = HddConfig::default();
        assert!(base.validate().is_ok());
        assert_eq!(
            bad(HddConfig {
                capacity_bytes: 0,
                ..base
            }),
            "capacity_bytes"
        );
        assert_eq!(
            bad(HddConfig {
                seek_track_ms: f64::NAN,
                ..base
            }),
            "seek_track_ms"
        );
        assert_eq!(
            bad(HddConfig {
                seek_full_ms: 0.5,
                ..base
            }),
            "seek_full_ms"
        );
        // A = 17 makes b > 0 but a + b/2 < 0: the curve would fall near x = 1.
        assert_eq!(
            bad(HddConfig {
                seek_avg_ms: 17.0,
                ..base
            }),
            "seek_avg_ms"
        );
        // A = 2 makes b < 0: the curve would fall near x = 0.
        assert_eq!(
            bad(HddConfig {
                seek_avg_ms: 2.0,
                ..base
            }),
            "seek_avg_ms"
        );
        assert_eq!(bad(HddConfig { rpm: 0, ..base }), "rpm");
        assert_eq!(
            bad(HddConfig {
                media_inner_bytes_per_s: 0.0,
                ..base
            }),
            "media_inner_bytes_per_s"
        );
        assert_eq!(
            bad(HddConfig {
                media_outer_bytes_per_s: f64::INFINITY,
                ..base
            }),
            "media_outer_bytes_per_s"
        );
        assert_eq!(
            bad(HddConfig {
                queue_depth: 0,
                ..base
            }),
            "queue_depth"
        );
        assert_eq!(
            bad(HddConfig {
                queue_depth: QUEUE_DEPTH_MAX + 1,
                ..base
            }),
            "queue_depth"
        );
        assert_eq!(
            bad(HddConfig {
                merge_max_bytes: 0,
                ..base
            }),
            "merge_max_bytes"
        );
        let error = Hdd::new(
            HddConfig {
                seek_avg_ms: 2.0,
                ..base
            },
            0,
        )
        .unwrap_err();
        assert!(error.to_string().contains("seek_avg_ms"), "{error}");
    }

    #[test]
    fn fitted_curve_bounds_are_the_monotonicity_bounds() {
        // At both ends of the accepted range of A the curve still rises.
        let base = HddConfig::default();
        let (t, f) = (base.seek_track_ms, base.seek_full_ms);
        for a in [t + (f - t) / 3.0, t + 11.0 * (f - t) / 15.0] {
            let config = HddConfig {
                seek_avg_ms: a,
                ..base
            };
            let capacity = config.capacity_bytes;
            let hdd = disk(config);
            let mut previous = Duration::ZERO;
            for i in 1..=1000u64 {
                let t = hdd.seek_time(capacity / 1000 * i);
                assert!(t >= previous, "A = {a}: seek falls at {i}/1000");
                previous = t;
            }
        }
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            /// Whatever is submitted, in whatever order, every request is
            /// served exactly once, services are contiguous same-kind runs
            /// within the merge limit, and the queue never exceeds its depth.
            #[test]
            fn every_request_served_once(
                requests in prop::collection::vec((0u64..64, 1u64..5, any::<bool>()), 1..200),
                depth in 1u32..16,
            ) {
                let config = HddConfig {
                    capacity_bytes: 1 << 20,
                    queue_depth: depth,
                    merge_max_bytes: 3 * 4096,
                    ..HddConfig::default()
                };
                let mut hdd = Hdd::new(config, 1).unwrap();
                let mut pending: Vec<HddRequest> = requests
                    .iter()
                    .enumerate()
                    .map(|(i, &(block, blocks, is_read))| HddRequest {
                        id: i as u64,
                        kind: if is_read { IoKind::Read } else { IoKind::Write },
                        offset: block * 4096,
                        len: blocks * 4096,
                    })
                    .collect();
                pending.reverse();
                let mut served = Vec::new();
                loop {
                    while let Some(r) = pending.pop() {
                        if let Err(r) = hdd.submit(r) {
                            pending.push(r);
                            break;
                        }
                    }
                    prop_assert!(hdd.queue_len() <= depth as usize);
                    let Some(s) = hdd.start_next() else { break };
                    prop_assert!(s.requests.len() == 1 || s.len <= 3 * 4096);
                    let mut end = s.offset;
                    for r in &s.requests {
                        prop_assert_eq!(r.offset, end);
                        prop_assert_eq!(r.kind, s.kind);
                        end = r.end();
                    }
                    prop_assert_eq!(end, s.end());
                    served.extend(s.requests.iter().map(|r| r.id));
                    hdd.complete();
                }
                prop_assert!(pending.is_empty());
                served.sort_unstable();
                prop_assert_eq!(served, (0..requests.len() as u64).collect::<Vec<_>>());
            }
        }
    }

    #[test]
    fn set_head_moves_where_the_next_service_seeks_from() {
        let mut hdd = disk(HddConfig::default());
        hdd.submit(write(1, 0, 4 * KIB)).unwrap();
        let first = serve(&mut hdd);
        assert_eq!(first.seek_distance_bytes, 0);
        // Another model's service ended far away: the next one seeks back
        // and, not continuing it, pays a rotation.
        hdd.set_head(100 * KIB * KIB, Some(100 * KIB * KIB));
        assert_eq!(hdd.head_offset(), 100 * KIB * KIB);
        hdd.submit(write(2, 4 * KIB, 4 * KIB)).unwrap();
        let second = serve(&mut hdd);
        assert_eq!(second.seek_distance_bytes, 100 * KIB * KIB - 4 * KIB);
        assert!(second.seek > Duration::ZERO);
        // Continuing where the shared head rests costs no seek or rotation.
        hdd.set_head(second.end(), Some(second.end()));
        hdd.submit(write(3, second.end(), 4 * KIB)).unwrap();
        let third = serve(&mut hdd);
        assert_eq!(third.seek, Duration::ZERO);
        assert_eq!(third.rotation, Duration::ZERO);
    }
}
