//! Rates from consecutive status snapshots, and the short history the
//! sparklines draw.
//!
//! A mount's status carries cumulative byte counters since it mounted;
//! `sluice top` samples it every interval and divides the difference of
//! two samples by the time between them. Pure: the caller passes the time
//! each sample was taken, so the arithmetic is tested without a mount or a
//! clock.
//!
//! INVARIANTS: a rate is never negative and never computed over zero time:
//! when a counter went backwards (the mount restarted between two samples
//! and its counters began again at zero) or no time passed, there is no
//! rate for that pair ([`Rates::between`] is `None`), instead of a huge
//! number from an unsigned wrap. The history holds at most its capacity.

use std::collections::VecDeque;
use std::time::Duration;

use sluice_status::Status;

/// One status snapshot and when it was taken (time since `sluice top`
/// started).
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// When it was taken.
    pub at: Duration,
    /// What the mount answered.
    pub status: Status,
}

/// Cumulative byte counters of one snapshot, grouped by tier. Each tier's
/// writes and reads include the background traffic between the tiers
/// (flushes and BBOS demotions read the fast tier and write the capacity
/// tier), so they are the load each device sees from sluice.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    /// Appended to the log (routed or forced there) and written to BBOS's
    /// staged checkpoint copies.
    pub fast_write_bytes: u64,
    /// Reads served from the log, from staged copies (restart hits) and
    /// from LiU's lifted heads; flushed, synced and demoted bytes.
    pub fast_read_bytes: u64,
    /// Written straight to the capacity tier (routed, written through,
    /// after a failed append, cold or spilled checkpoints), flushed,
    /// synced and demoted.
    pub capacity_write_bytes: u64,
    /// Reads asked of the capacity tier (through LiU when it is on, which
    /// serves some from DRAM or lifted heads) and checkpoint restart
    /// misses.
    pub capacity_read_bytes: u64,
    /// Flushed from the log to the capacity tier.
    pub flushed_bytes: u64,
    /// Written from the log to the capacity tier by per-file syncs.
    pub synced_bytes: u64,
    /// BBOS copies demoted to the capacity tier.
    pub demoted_bytes: u64,
    /// Written through the mount (FUSE writes).
    pub mount_write_bytes: u64,
    /// Read through the mount (FUSE reads).
    pub mount_read_bytes: u64,
    /// Reads LiU served from its DRAM segment buffer (a count, not bytes).
    pub liu_buffer_hits: u64,
}

impl Totals {
    /// The counters of `status`.
    pub fn of(status: &Status) -> Totals {
        let liu_head_bytes = status.liu.as_ref().map_or(0, |l| l.head_bytes_read);
        let liu_buffer_hits = status.liu.as_ref().map_or(0, |l| l.buffer_hits);
        let (staged, hits, direct, demoted, misses) =
            status.bbos.as_ref().map_or((0, 0, 0, 0, 0), |b| {
                (
                    b.stats.staged_written_bytes,
                    b.stats.hit_bytes,
                    b.stats.direct_bytes,
                    b.stats.demoted_bytes,
                    b.stats.miss_bytes,
                )
            });
        Totals {
            fast_write_bytes: status.fast_bytes + status.forced_to_log_bytes + staged,
            fast_read_bytes: status.fast_read_bytes
                + status.clean_read_bytes
                + hits
                + liu_head_bytes
                + status.flushed_bytes
                + status.synced_bytes
                + status.written_back_bytes
                + demoted,
            capacity_write_bytes: status.capacity_bytes
                + status.fast_fallback_bytes
                + direct
                + status.flushed_bytes
                + status.synced_bytes
                + status.written_back_bytes
                + demoted,
            capacity_read_bytes: status.capacity_read_bytes + misses,
            flushed_bytes: status.flushed_bytes,
            synced_bytes: status.synced_bytes + status.written_back_bytes,
            demoted_bytes: demoted,
            mount_write_bytes: status.fuse_write_bytes,
            mount_read_bytes: status.fuse_read_bytes,
            liu_buffer_hits,
        }
    }

    /// Every counter with its value, to compare two snapshots.
    fn counters(&self) -> [u64; 10] {
        [
            self.fast_write_bytes,
            self.fast_read_bytes,
            self.capacity_write_bytes,
            self.capacity_read_bytes,
            self.flushed_bytes,
            self.synced_bytes,
            self.demoted_bytes,
            self.mount_write_bytes,
            self.mount_read_bytes,
            self.liu_buffer_hits,
        ]
    }
}

/// Rates between two snapshots, in bytes (or events) per second.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Rates {
    /// Seconds between the two snapshots.
    pub seconds: f64,
    /// The fast tier's writes (see [`Totals`]).
    pub fast_write_bytes_per_s: f64,
    /// The fast tier's reads.
    pub fast_read_bytes_per_s: f64,
    /// The capacity tier's writes.
    pub capacity_write_bytes_per_s: f64,
    /// The capacity tier's reads.
    pub capacity_read_bytes_per_s: f64,
    /// Flushes from the log.
    pub flushed_bytes_per_s: f64,
    /// Per-file syncs from the log.
    pub synced_bytes_per_s: f64,
    /// BBOS demotions.
    pub demoted_bytes_per_s: f64,
    /// Writes through the mount.
    pub mount_write_bytes_per_s: f64,
    /// Reads through the mount.
    pub mount_read_bytes_per_s: f64,
    /// LiU buffer hits per second.
    pub liu_buffer_hits_per_s: f64,
    /// How fast the buffered bytes grow (negative: they shrink).
    pub buffered_bytes_per_s: f64,
}

impl Rates {
    /// The rates from `earlier` to `later`, or `None` when no time passed
    /// between them or a counter went backwards (a new mount).
    pub fn between(earlier: &Sample, later: &Sample) -> Option<Rates> {
        let seconds = later.at.checked_sub(earlier.at)?.as_secs_f64();
        if seconds <= 0.0 {
            return None;
        }
        let (a, b) = (Totals::of(&earlier.status), Totals::of(&later.status));
        if a.counters().iter().zip(b.counters()).any(|(a, b)| b < *a) {
            return None;
        }
        let rate = |a: u64, b: u64| (b - a) as f64 / seconds;
        Some(Rates {
            seconds,
            fast_write_bytes_per_s: rate(a.fast_write_bytes, b.fast_write_bytes),
            fast_read_bytes_per_s: rate(a.fast_read_bytes, b.fast_read_bytes),
            capacity_write_bytes_per_s: rate(a.capacity_write_bytes, b.capacity_write_bytes),
            capacity_read_bytes_per_s: rate(a.capacity_read_bytes, b.capacity_read_bytes),
            flushed_bytes_per_s: rate(a.flushed_bytes, b.flushed_bytes),
            synced_bytes_per_s: rate(a.synced_bytes, b.synced_bytes),
            demoted_bytes_per_s: rate(a.demoted_bytes, b.demoted_bytes),
            mount_write_bytes_per_s: rate(a.mount_write_bytes, b.mount_write_bytes),
            mount_read_bytes_per_s: rate(a.mount_read_bytes, b.mount_read_bytes),
            liu_buffer_hits_per_s: rate(a.liu_buffer_hits, b.liu_buffer_hits),
            buffered_bytes_per_s: (later.status.buffered_bytes as f64
                - earlier.status.buffered_bytes as f64)
                / seconds,
        })
    }
}

/// Samples the sparklines keep by default (a minute at one per second).
pub const HISTORY_DEFAULT: usize = 60;

/// The last few values of what the sparklines draw, oldest first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct History {
    capacity: usize,
    /// Fast tier writes, bytes/s.
    pub fast_write: VecDeque<u64>,
    /// Capacity tier writes, bytes/s.
    pub capacity_write: VecDeque<u64>,
    /// Flushes, bytes/s.
    pub flushed: VecDeque<u64>,
    /// Bytes buffered in the log.
    pub buffered: VecDeque<u64>,
}

impl History {
    /// An empty history that keeps at most `capacity` values of each.
    pub fn new(capacity: usize) -> History {
        let series = || VecDeque::with_capacity(capacity);
        History {
            capacity,
            fast_write: series(),
            capacity_write: series(),
            flushed: series(),
            buffered: series(),
        }
    }

    /// Values kept at most.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Adds one snapshot's values (rates as 0 when there are none).
    pub fn push(&mut self, status: &Status, rates: Option<&Rates>) {
        let whole = |r: Option<f64>| r.map_or(0, |r| r.round() as u64);
        let capacity = self.capacity;
        let add = |series: &mut VecDeque<u64>, value: u64| {
            if capacity == 0 {
                return;
            }
            if series.len() == capacity {
                series.pop_front();
            }
            series.push_back(value);
        };
        add(
            &mut self.fast_write,
            whole(rates.map(|r| r.fast_write_bytes_per_s)),
        );
        add(
            &mut self.capacity_write,
            whole(rates.map(|r| r.capacity_write_bytes_per_s)),
        );
        add(
            &mut self.flushed,
            whole(rates.map(|r| r.flushed_bytes_per_s)),
        );
        add(&mut self.buffered, status.buffered_bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_status::{CkptStats, CkptStatusView, LiuStatusView};

    const MIB: u64 = 1024 * 1024;

    fn sample(at_ms: u64, status: Status) -> Sample {
        Sample {
            at: Duration::from_millis(at_ms),
            status,
        }
    }

    #[test]
    fn rates_are_counter_differences_over_the_time_between_samples() {
        let earlier = Status {
            fast_bytes: 10 * MIB,
            forced_to_log_bytes: MIB,
            capacity_bytes: 4 * MIB,
            flushed_bytes: 2 * MIB,
            buffered_bytes: 9 * MIB,
            fuse_write_bytes: 15 * MIB,
            fast_read_bytes: 0,
            capacity_read_bytes: MIB,
            ..Status::default()
        };
        let later = Status {
            fast_bytes: 30 * MIB,
            forced_to_log_bytes: MIB,
            capacity_bytes: 4 * MIB,
            flushed_bytes: 6 * MIB,
            buffered_bytes: 25 * MIB,
            fuse_write_bytes: 35 * MIB,
            fast_read_bytes: 2 * MIB,
            capacity_read_bytes: 3 * MIB,
            ..Status::default()
        };
        // Two seconds apart.
        let r = Rates::between(&sample(1_000, earlier), &sample(3_000, later)).unwrap();
        let mib_s = |x: f64| x / MIB as f64;
        assert_eq!(r.seconds, 2.0);
        assert_eq!(mib_s(r.fast_write_bytes_per_s), 10.0);
        // The flusher reads the log: 2 MiB of reads plus 4 MiB flushed.
        assert_eq!(mib_s(r.fast_read_bytes_per_s), 3.0);
        // Capacity writes are the flushes here (nothing routed there).
        assert_eq!(mib_s(r.capacity_write_bytes_per_s), 2.0);
        assert_eq!(mib_s(r.capacity_read_bytes_per_s), 1.0);
        assert_eq!(mib_s(r.flushed_bytes_per_s), 2.0);
        assert_eq!(mib_s(r.mount_write_bytes_per_s), 10.0);
        assert_eq!(mib_s(r.buffered_bytes_per_s), 8.0);
    }

    /// A close under close-to-open writes a file's buffered bytes to the
    /// capacity tier without a flush: the tiers' rates must show them.
    #[test]
    fn synced_bytes_are_read_from_the_log_and_written_to_the_capacity_tier() {
        let later = Status {
            synced_bytes: 4 * MIB,
            ..Status::default()
        };
        let r = Rates::between(&sample(0, Status::default()), &sample(1_000, later)).unwrap();
        assert_eq!(r.synced_bytes_per_s, 4.0 * MIB as f64);
        assert_eq!(r.fast_read_bytes_per_s, 4.0 * MIB as f64);
        assert_eq!(r.capacity_write_bytes_per_s, 4.0 * MIB as f64);
        assert_eq!(r.flushed_bytes_per_s, 0.0);
    }

    #[test]
    fn buffered_bytes_that_shrink_give_a_negative_rate() {
        let earlier = Status {
            buffered_bytes: 8 * MIB,
            ..Status::default()
        };
        let later = Status {
            buffered_bytes: 2 * MIB,
            flushed_bytes: 6 * MIB,
            ..Status::default()
        };
        let r = Rates::between(&sample(0, earlier), &sample(500, later)).unwrap();
        assert_eq!(r.buffered_bytes_per_s, -12.0 * MIB as f64);
        assert_eq!(r.flushed_bytes_per_s, 12.0 * MIB as f64);
    }

    /// The bug this guards: a remount between two samples starts every
    /// counter at zero again; `later - earlier` on u64 would wrap to about
    /// 16 EiB/s (or panic in a debug build).
    #[test]
    fn a_counter_that_went_back_gives_no_rate_instead_of_a_wrapped_one() {
        let before = Status {
            fast_bytes: 100 * MIB,
            flushed_bytes: 90 * MIB,
            ..Status::default()
        };
        let remounted = Status {
            fast_bytes: MIB,
            ..Status::default()
        };
        assert_eq!(
            Rates::between(&sample(0, before), &sample(1_000, remounted)),
            None
        );
    }

    #[test]
    fn no_time_between_samples_gives_no_rate() {
        let s = Status::default();
        assert_eq!(
            Rates::between(&sample(1_000, s.clone()), &sample(1_000, s.clone())),
            None
        );
        assert_eq!(
            Rates::between(&sample(2_000, s.clone()), &sample(1_000, s)),
            None
        );
    }

    #[test]
    fn checkpoints_and_liu_count_on_the_tiers_they_touch() {
        let bbos = |staged, demoted, hits, misses, direct| CkptStatusView {
            stats: CkptStats {
                staged_written_bytes: staged,
                demoted_bytes: demoted,
                hit_bytes: hits,
                miss_bytes: misses,
                direct_bytes: direct,
                ..CkptStats::default()
            },
            ..CkptStatusView::default()
        };
        let liu = |head_bytes_read, buffer_hits| LiuStatusView {
            head_bytes_read,
            buffer_hits,
            ..LiuStatusView::default()
        };
        let earlier = Status {
            bbos: Some(bbos(0, 0, 0, 0, 0)),
            liu: Some(liu(0, 0)),
            ..Status::default()
        };
        let later = Status {
            bbos: Some(bbos(8 * MIB, 4 * MIB, 2 * MIB, MIB, 3 * MIB)),
            liu: Some(liu(MIB, 50)),
            ..Status::default()
        };
        let r = Rates::between(&sample(0, earlier), &sample(1_000, later)).unwrap();
        let mib_s = |x: f64| x / MIB as f64;
        assert_eq!(mib_s(r.fast_write_bytes_per_s), 8.0);
        // Demotion reads the staged copy; restart hits and LiU heads too.
        assert_eq!(mib_s(r.fast_read_bytes_per_s), 4.0 + 2.0 + 1.0);
        assert_eq!(mib_s(r.capacity_write_bytes_per_s), 4.0 + 3.0);
        assert_eq!(mib_s(r.capacity_read_bytes_per_s), 1.0);
        assert_eq!(mib_s(r.demoted_bytes_per_s), 4.0);
        assert_eq!(r.liu_buffer_hits_per_s, 50.0);
    }

    #[test]
    fn the_history_keeps_the_newest_values_up_to_its_capacity() {
        let mut history = History::new(3);
        for i in 0..5u64 {
            let status = Status {
                buffered_bytes: i,
                ..Status::default()
            };
            let rates = Rates {
                fast_write_bytes_per_s: 10.0 * i as f64,
                ..Rates::default()
            };
            history.push(&status, (i % 2 == 0).then_some(&rates));
        }
        assert_eq!(history.buffered, [2, 3, 4]);
        // Samples without a rate draw as 0.
        assert_eq!(history.fast_write, [20, 0, 40]);
        let mut none = History::new(0);
        none.push(&Status::default(), None);
        assert!(none.buffered.is_empty());
    }
}
