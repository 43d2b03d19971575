//! Discrete-event core: a virtual clock and an event queue.
//!
//! Events are ordered by `(time, sequence)`: two events at the same virtual
//! time run in the order they were scheduled, so a run is a pure function of
//! its inputs and seed. The clock only moves forward, to the time of the
//! event being delivered; scheduling into the past is a programmer error.
//!
//! INVARIANT: `now` never decreases; every queued event is at or after `now`.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::time::Duration;

use sluice_policy::Time;

struct Scheduled<E> {
    at: Time,
    sequence: u64,
    event: E,
}

impl<E> PartialEq for Scheduled<E> {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.sequence) == (other.at, other.sequence)
    }
}

impl<E> Eq for Scheduled<E> {}

impl<E> PartialOrd for Scheduled<E> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<E> Ord for Scheduled<E> {
    /// Reversed, so that `BinaryHeap` (a max-heap) pops the earliest event.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.sequence).cmp(&(self.at, self.sequence))
    }
}

/// The virtual clock and the pending events.
pub struct EventQueue<E> {
    heap: BinaryHeap<Scheduled<E>>,
    now: Time,
    next_sequence: u64,
    delivered: u64,
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        EventQueue::new()
    }
}

impl<E> EventQueue<E> {
    /// An empty queue at virtual time zero.
    pub fn new() -> EventQueue<E> {
        EventQueue {
            heap: BinaryHeap::new(),
            now: Time::ZERO,
            next_sequence: 0,
            delivered: 0,
        }
    }

    /// The current virtual time: that of the last delivered event.
    pub fn now(&self) -> Time {
        self.now
    }

    /// Events delivered so far.
    pub fn delivered(&self) -> u64 {
        self.delivered
    }

    /// Events waiting.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Whether no event is waiting.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// Schedule `event` at virtual time `at`.
    ///
    /// # Panics
    /// If `at` is before `now`: an event in the past is a simulator bug.
    pub fn schedule(&mut self, at: Time, event: E) {
        assert!(
            at >= self.now,
            "event scheduled in the past: {at:?} < {:?}",
            self.now
        );
        self.heap.push(Scheduled {
            at,
            sequence: self.next_sequence,
            event,
        });
        self.next_sequence += 1;
    }

    /// Schedule `event` `delay` after now.
    pub fn schedule_in(&mut self, delay: Duration, event: E) {
        self.schedule(self.now.saturating_add(delay), event);
    }

    /// Deliver the earliest event, advancing the clock to its time.
    pub fn pop(&mut self) -> Option<(Time, E)> {
        let next = self.heap.pop()?;
        debug_assert!(next.at >= self.now);
        self.now = next.at;
        self.delivered += 1;
        Some((next.at, next.event))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delivers_in_time_order_and_fifo_at_equal_times() {
        let mut q = EventQueue::new();
        q.schedule(Time::from_nanos(30), "c");
        q.schedule(Time::from_nanos(10), "a1");
        q.schedule(Time::from_nanos(10), "a2");
        q.schedule(Time::from_nanos(20), "b");
        let order: Vec<_> = std::iter::from_fn(|| q.pop()).map(|(_, e)| e).collect();
        assert_eq!(order, vec!["a1", "a2", "b", "c"]);
        assert_eq!(q.now(), Time::from_nanos(30));
        assert_eq!(q.delivered(), 4);
    }

    #[test]
    fn schedule_in_is_relative_to_the_last_delivered_event() {
        let mut q = EventQueue::new();
        q.schedule(Time::from_nanos(100), 1);
        q.pop();
        q.schedule_in(Duration::from_nanos(5), 2);
        assert_eq!(q.pop(), Some((Time::from_nanos(105), 2)));
    }

    #[test]
    #[should_panic(expected = "in the past")]
    fn scheduling_into_the_past_is_a_bug() {
        let mut q = EventQueue::new();
        q.schedule(Time::from_nanos(100), 1);
        q.pop();
        q.schedule(Time::from_nanos(99), 2);
    }
}
