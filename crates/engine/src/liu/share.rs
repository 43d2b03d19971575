//! The capacity tier's time shared between files' loads (issue 38;
//! docs/liu.md, "Two readers", "The disk's time").
//!
//! A disk's elevator serves queued requests in address order, so a
//! reader's share of the disk follows its share of the *requests*, not of
//! the time. LiU turns a reader's small reads into 1 MiB body sections and
//! reads one segment ahead: that reader's turns grow, and a competing
//! reader that LiU has not learned yet (its reads are direct, one small
//! request per rank at a time) gets less of the disk than with LiU off.
//!
//! The rule: when a file's capacity loads stop (its last load part in
//! flight ends) while other files read the capacity tier, that file
//! starts no capacity load for as long as the disk needed to serve them,
//! times the number of other files reading, times the *yield*
//! (`liu.time_share`; 0 is off). The disk's time for the loads is their
//! bytes over the best rate a load part has reached (its seek included),
//! not the time they took: a load's wait in a queue that another reader
//! holds is not its use of the disk, and counting it would hold a reader
//! the longer, the longer it was kept waiting.
//! Meanwhile the others have the disk alone, in their own order
//! (sequential for a sequential reader: no seek between its requests). A
//! file counts as reading the capacity tier while it has a load or a
//! direct read in flight, or ended a direct read in the last [`WINDOW`].
//! Alone, a file never waits. Loads of heads from the fast tier and lifts
//! are never held: they do not use the disk.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use sluice_policy::FileId;

/// How recent a direct capacity read must be for its file to count as a
/// competing reader.
pub(super) const WINDOW: Duration = Duration::from_millis(50);

/// Longest hold, whatever the loads' bytes.
const HOLD_MAX: Duration = Duration::from_millis(250);

/// The best rate decays by this per load part, so it follows a tier that
/// became slower.
const RATE_DECAY: f64 = 0.999;

#[derive(Debug, Default)]
struct FileShare {
    /// The end of its last direct capacity read or load part.
    last_read: Option<Instant>,
    /// Capacity load parts and direct reads in flight.
    in_flight: u32,
    /// Of those, direct reads.
    direct_in_flight: u32,
    /// Bytes its loads read since its loads in flight last went from 0.
    busy_bytes: u64,
    /// No capacity load starts before this while others read.
    hold_until: Option<Instant>,
}

/// Each file's use of the capacity tier (see the module docs). With a
/// yield of 0 it holds nothing ([`crate::liu::LiuOptions::time_share`]).
#[derive(Debug, Default)]
pub(super) struct TimeShare {
    /// The fraction of its busy time a file yields to each other reader.
    yield_factor: f64,
    files: HashMap<FileId, FileShare>,
    /// The best rate of a load part so far (bytes/s), decaying.
    rate: f64,
    /// Loads held so far, and their total hold (for status).
    pub(super) holds: u64,
    pub(super) held: Duration,
}

impl TimeShare {
    pub(super) fn new(yield_factor: f64) -> TimeShare {
        TimeShare {
            yield_factor,
            ..TimeShare::default()
        }
    }

    fn enabled(&self) -> bool {
        self.yield_factor > 0.0
    }

    /// `file` starts a direct read of the capacity tier.
    pub(super) fn direct_started(&mut self, file: FileId) {
        if self.enabled() {
            let share = self.files.entry(file).or_default();
            share.in_flight += 1;
            share.direct_in_flight += 1;
        }
    }

    /// A direct read of `file` ended `now`.
    pub(super) fn direct_ended(&mut self, file: FileId, now: Instant) {
        if let Some(share) = self.files.get_mut(&file) {
            share.direct_in_flight = share.direct_in_flight.saturating_sub(1);
            share.in_flight = share.in_flight.saturating_sub(1);
            share.last_read = Some(now);
        }
    }

    /// Whether another file than `file` reads the capacity tier `now`.
    fn others_reading(&self, file: FileId, now: Instant) -> usize {
        self.files
            .iter()
            .filter(|(f, s)| {
                **f != file
                    && (s.in_flight > 0
                        || s.last_read
                            .is_some_and(|t| now.saturating_duration_since(t) <= WINDOW))
            })
            .count()
    }

    /// Whether a capacity load of `file` may start `now`.
    pub(super) fn may_start(&self, file: FileId, now: Instant) -> bool {
        match self.files.get(&file).and_then(|s| s.hold_until) {
            Some(until) if now < until => self.others_reading(file, now) == 0,
            _ => true,
        }
    }

    /// A capacity load part of `file` starts.
    pub(super) fn started(&mut self, file: FileId) {
        if !self.enabled() {
            return;
        }
        let share = self.files.entry(file).or_default();
        if share.in_flight == share.direct_in_flight {
            share.busy_bytes = 0;
        }
        share.in_flight += 1;
        share.hold_until = None;
    }

    /// A capacity load part of `file`, `bytes` long, ended `now`, `took`
    /// after it started: once its last one ends, hold its next loads
    /// while others read, for the disk's time its loads took.
    pub(super) fn finished(&mut self, file: FileId, now: Instant, bytes: u64, took: Duration) {
        if !self.enabled() {
            return;
        }
        if bytes > 0 && !took.is_zero() {
            let rate = bytes as f64 / took.as_secs_f64();
            self.rate = rate.max(self.rate * RATE_DECAY);
        }
        let others = self.others_reading(file, now);
        let Some(share) = self.files.get_mut(&file) else {
            return;
        };
        share.in_flight = share.in_flight.saturating_sub(1);
        share.last_read = Some(now);
        share.busy_bytes += bytes;
        if share.in_flight > share.direct_in_flight {
            return;
        }
        if others > 0 && self.rate > 0.0 {
            let served = Duration::from_secs_f64(share.busy_bytes as f64 / self.rate);
            let hold = served
                .mul_f64(self.yield_factor * others as f64)
                .min(HOLD_MAX);
            share.hold_until = Some(now + hold);
            self.holds += 1;
            self.held += hold;
        }
        self.forget_idle(now);
    }

    /// The earliest time a held file may start a load, if any is held.
    pub(super) fn next_release(&self, now: Instant) -> Option<Instant> {
        self.files
            .values()
            .filter_map(|s| s.hold_until)
            .filter(|&t| t > now)
            .min()
    }

    /// Drop files that neither read nor are held any more.
    fn forget_idle(&mut self, now: Instant) {
        if self.files.len() < 64 {
            return;
        }
        self.files.retain(|_, s| {
            s.in_flight > 0
                || s.hold_until.is_some_and(|t| t > now)
                || s.last_read
                    .is_some_and(|t| now.saturating_duration_since(t) <= WINDOW)
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: FileId = FileId(1);
    const B: FileId = FileId(2);
    const MIB: u64 = 1 << 20;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// B reads directly, ending at `at`.
    fn direct(share: &mut TimeShare, at: Instant) {
        share.direct_started(B);
        share.direct_ended(B, at);
    }

    #[test]
    fn a_file_alone_is_never_held() {
        let mut share = TimeShare::new(1.0);
        let t0 = Instant::now();
        share.started(A);
        share.finished(A, t0 + ms(40), MIB, ms(40));
        assert!(share.may_start(A, t0 + ms(41)));
        assert_eq!(share.holds, 0);
    }

    #[test]
    fn a_file_yields_the_disks_time_for_its_loads_to_a_competing_reader() {
        let mut share = TimeShare::new(1.0);
        let t0 = Instant::now();
        // A first load alone: 1 MiB in 10 ms, the best rate (100 MiB/s).
        share.started(A);
        share.finished(A, t0 + ms(10), MIB, ms(10));
        assert!(share.may_start(A, t0 + ms(10)));
        // Two parts at once while B reads; they waited behind B: 1 MiB in
        // 40 ms each.
        share.started(A);
        share.started(A);
        direct(&mut share, t0 + ms(40));
        share.finished(A, t0 + ms(50), MIB, ms(40));
        // One part still in flight: no hold yet.
        assert!(share.may_start(A, t0 + ms(51)));
        direct(&mut share, t0 + ms(55));
        share.finished(A, t0 + ms(60), MIB, ms(50));
        // 2 MiB at 100 MiB/s: 20 ms of the disk, held until 80 ms while B
        // reads (not for the 50 ms the parts took).
        assert!(!share.may_start(A, t0 + ms(70)));
        let release = share.next_release(t0 + ms(70)).unwrap();
        assert!(
            release >= t0 + ms(80) && release < t0 + ms(81),
            "{release:?}"
        );
        assert!(share.may_start(A, t0 + ms(81)));
        // B is not held: it made no load.
        assert!(share.may_start(B, t0 + ms(70)));
        assert_eq!(share.holds, 1);
    }

    #[test]
    fn the_yield_scales_the_hold() {
        let mut share = TimeShare::new(2.0);
        let t0 = Instant::now();
        share.started(A);
        direct(&mut share, t0 + ms(5));
        share.finished(A, t0 + ms(10), MIB, ms(10));
        let release = share.next_release(t0 + ms(10)).unwrap();
        assert!(
            release >= t0 + ms(30) && release < t0 + ms(31),
            "{release:?}"
        );
    }

    #[test]
    fn a_hold_ends_when_the_others_stop_reading() {
        let mut share = TimeShare::new(1.0);
        let t0 = Instant::now();
        share.started(A);
        direct(&mut share, t0 + ms(100));
        share.finished(A, t0 + ms(100), 8 * MIB, ms(100));
        assert!(!share.may_start(A, t0 + ms(120)));
        // B's last read is older than the window by then.
        assert!(share.may_start(A, t0 + ms(100) + WINDOW + ms(1)));
    }

    #[test]
    fn holds_are_bounded_and_off_means_never() {
        let mut share = TimeShare::new(1.0);
        let t0 = Instant::now();
        share.started(A);
        share.started(B);
        share.finished(A, t0 + ms(2000), 1024 * MIB, ms(2000));
        assert_eq!(
            share.next_release(t0 + ms(2000)),
            Some(t0 + ms(2000) + HOLD_MAX)
        );
        let mut off = TimeShare::new(0.0);
        off.started(A);
        direct(&mut off, t0 + ms(10));
        off.finished(A, t0 + ms(20), MIB, ms(20));
        assert!(off.may_start(A, t0 + ms(21)));
        assert_eq!(off.holds, 0);
    }
}
