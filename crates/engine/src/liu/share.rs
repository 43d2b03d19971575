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
//! starts no capacity load for as long as it was busy, times the number of
//! other files reading, times the *yield* (`liu.time_share`; 0 is off).
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

/// Longest hold, whatever the busy time (a stalled load, a slow tier).
const HOLD_MAX: Duration = Duration::from_millis(250);

#[derive(Debug, Default)]
struct FileShare {
    /// The end of its last direct capacity read or load part.
    last_read: Option<Instant>,
    /// Capacity load parts and direct reads in flight.
    in_flight: u32,
    /// Of those, direct reads.
    direct_in_flight: u32,
    /// When `in_flight` last went from 0 to 1.
    busy_since: Option<Instant>,
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

    /// A capacity load part of `file` starts `now`.
    pub(super) fn started(&mut self, file: FileId, now: Instant) {
        if !self.enabled() {
            return;
        }
        let share = self.files.entry(file).or_default();
        if share.in_flight == share.direct_in_flight {
            share.busy_since = Some(now);
        }
        share.in_flight += 1;
        share.hold_until = None;
    }

    /// A capacity load part of `file` ended `now`: once its last one ends,
    /// hold its next loads while others read.
    pub(super) fn finished(&mut self, file: FileId, now: Instant) {
        if !self.enabled() {
            return;
        }
        let others = self.others_reading(file, now);
        let Some(share) = self.files.get_mut(&file) else {
            return;
        };
        share.in_flight = share.in_flight.saturating_sub(1);
        share.last_read = Some(now);
        if share.in_flight > share.direct_in_flight {
            return;
        }
        let busy = now.saturating_duration_since(share.busy_since.take().unwrap_or(now));
        if others > 0 {
            let hold = busy
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

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_file_alone_is_never_held() {
        let mut share = TimeShare::new(1.0);
        let t0 = Instant::now();
        share.started(A, t0);
        share.finished(A, t0 + ms(40));
        assert!(share.may_start(A, t0 + ms(41)));
        assert_eq!(share.holds, 0);
    }

    #[test]
    fn a_file_yields_its_busy_time_to_a_competing_reader() {
        let mut share = TimeShare::new(1.0);
        let t0 = Instant::now();
        share.started(A, t0);
        share.started(A, t0 + ms(1));
        share.direct_started(B);
        share.direct_ended(B, t0 + ms(20));
        share.finished(A, t0 + ms(30));
        // One part still in flight: no hold yet.
        assert!(share.may_start(A, t0 + ms(31)));
        share.direct_started(B);
        share.direct_ended(B, t0 + ms(35));
        share.finished(A, t0 + ms(40));
        // Busy 40 ms with one other reader: held until 80 ms while B reads.
        assert!(!share.may_start(A, t0 + ms(60)));
        assert_eq!(share.next_release(t0 + ms(60)), Some(t0 + ms(80)));
        assert!(share.may_start(A, t0 + ms(80)));
        // B is not held: it made no load.
        assert!(share.may_start(B, t0 + ms(60)));
        assert_eq!(share.holds, 1);
    }

    #[test]
    fn a_hold_ends_when_the_others_stop_reading() {
        let mut share = TimeShare::new(1.0);
        let t0 = Instant::now();
        share.started(A, t0);
        share.direct_started(B);
        share.direct_ended(B, t0 + ms(100));
        share.finished(A, t0 + ms(100));
        assert!(!share.may_start(A, t0 + ms(120)));
        // B's last read is older than the window by then.
        assert!(share.may_start(A, t0 + ms(100) + WINDOW + ms(1)));
    }

    #[test]
    fn holds_are_bounded_and_off_means_never() {
        let mut share = TimeShare::new(1.0);
        let t0 = Instant::now();
        share.started(A, t0);
        share.started(B, t0);
        share.finished(A, t0 + ms(2000));
        assert_eq!(
            share.next_release(t0 + ms(2000)),
            Some(t0 + ms(2000) + HOLD_MAX)
        );
        let mut off = TimeShare::new(0.0);
        off.started(A, t0);
        off.direct_started(B);
        off.direct_ended(B, t0 + ms(10));
        off.finished(A, t0 + ms(20));
        assert!(off.may_start(A, t0 + ms(21)));
        assert_eq!(off.holds, 0);
    }
}
