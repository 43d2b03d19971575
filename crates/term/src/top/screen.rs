//! What `sluice top` knows about the mount: the newest snapshot, the rates
//! since the one before, the sparklines' history, and whether the mount
//! still answers.
//!
//! Pure: [`Screen::handle_sample`] takes each poll's outcome with the time
//! it was taken; the view draws a `&Screen`. When the mount stops
//! answering, the last snapshot stays on screen (marked stale) with the
//! error and for how long it has not answered; polling goes on, and the
//! next answer (the same mount, or a new one at the same path) takes over.
//!
//! INVARIANT: `rates` are always between `latest` and the snapshot before
//! it; after a failed poll there are none until two answers follow each
//! other again, so a rate never spans an outage.

use std::time::Duration;

use sluice_status::Status;

use crate::top::rates::{History, Rates, Sample};

/// Whether the mount answered the last poll.
#[derive(Clone, Debug, PartialEq)]
pub enum Link {
    /// No poll has finished yet.
    Waiting,
    /// It answered.
    Up,
    /// It did not answer since `since`; `error` is the last poll's error.
    Lost {
        /// When the first failed poll was taken.
        since: Duration,
        /// The last poll's error.
        error: String,
    },
}

/// The state of the view.
#[derive(Clone, Debug)]
pub struct Screen {
    /// The mount point, as given.
    pub mountpoint: String,
    /// Time between polls.
    pub interval: Duration,
    /// The newest snapshot the mount answered.
    pub latest: Option<Sample>,
    /// Rates from the snapshot before `latest` to it.
    pub rates: Option<Rates>,
    /// The sparklines' values.
    pub history: History,
    /// Whether the mount answers.
    pub link: Link,
    /// When the last poll was taken.
    pub now: Duration,
}

impl Screen {
    /// Nothing sampled yet; the history keeps `history` samples.
    pub fn new(mountpoint: impl Into<String>, interval: Duration, history: usize) -> Screen {
        Screen {
            mountpoint: mountpoint.into(),
            interval,
            latest: None,
            rates: None,
            history: History::new(history),
            link: Link::Waiting,
            now: Duration::ZERO,
        }
    }

    /// One poll's outcome, taken at `at`.
    pub fn handle_sample(&mut self, at: Duration, outcome: Result<Status, String>) {
        self.now = self.now.max(at);
        match outcome {
            Ok(status) => {
                let sample = Sample { at, status };
                self.rates = match (&self.link, &self.latest) {
                    (Link::Up, Some(previous)) => Rates::between(previous, &sample),
                    _ => None,
                };
                self.history.push(&sample.status, self.rates.as_ref());
                self.latest = Some(sample);
                self.link = Link::Up;
            }
            Err(error) => {
                let since = match &self.link {
                    Link::Lost { since, .. } => *since,
                    _ => at,
                };
                self.rates = None;
                self.link = Link::Lost { since, error };
            }
        }
    }

    /// How long the mount has not answered, if it does not.
    pub fn lost_for(&self) -> Option<Duration> {
        match &self.link {
            Link::Lost { since, .. } => Some(self.now.saturating_sub(*since)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(fast_bytes: u64) -> Status {
        Status {
            fast_bytes,
            ..Status::default()
        }
    }

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn rates_need_two_answers_in_a_row() {
        let mut screen = Screen::new("/mnt", secs(1), 60);
        assert_eq!(screen.link, Link::Waiting);
        screen.handle_sample(secs(0), Ok(status(0)));
        assert_eq!(screen.rates, None, "one snapshot has no rate");
        screen.handle_sample(secs(1), Ok(status(1000)));
        assert_eq!(screen.rates.unwrap().fast_write_bytes_per_s, 1000.0);
        assert_eq!(screen.history.fast_write, [0, 1000]);
    }

    /// The mount goes away, then answers again: the outage is shown with
    /// its start, the last snapshot stays, and no rate spans the outage
    /// (the 3000 bytes written meanwhile are not shown as one second's).
    #[test]
    fn an_outage_keeps_the_last_snapshot_and_no_rate_spans_it() {
        let mut screen = Screen::new("/mnt", secs(1), 60);
        screen.handle_sample(secs(0), Ok(status(0)));
        screen.handle_sample(secs(1), Ok(status(1000)));
        screen.handle_sample(secs(2), Err("not a sluice mount".into()));
        screen.handle_sample(secs(5), Err("still not".into()));
        assert_eq!(
            screen.link,
            Link::Lost {
                since: secs(2),
                error: "still not".into()
            }
        );
        assert_eq!(screen.lost_for(), Some(secs(3)));
        assert_eq!(screen.latest.as_ref().unwrap().status.fast_bytes, 1000);
        assert_eq!(screen.rates, None);
        screen.handle_sample(secs(6), Ok(status(4000)));
        assert_eq!(screen.link, Link::Up);
        assert_eq!(screen.rates, None, "no rate across the outage");
        screen.handle_sample(secs(7), Ok(status(4500)));
        assert_eq!(screen.rates.unwrap().fast_write_bytes_per_s, 500.0);
        assert_eq!(screen.lost_for(), None);
    }
}
