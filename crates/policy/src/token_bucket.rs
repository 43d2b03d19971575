//! A token bucket: the optional flush bandwidth cap (DESIGN §4.5), and later
//! checkpoint-demotion and transfer throttling.
//!
//! Tokens are bytes. They accrue at `rate_bytes_per_s` up to `burst_bytes`; a
//! caller takes tokens before moving that many bytes, and when there are not
//! enough it learns the earliest time there will be. The bucket never reads a
//! clock: every call passes `now`.
//!
//! Requests larger than the burst: a request is granted when the balance
//! holds at least `min(bytes, burst_bytes)` (so, for a big request, when the
//! bucket is full), and then takes all `bytes`, leaving the bucket in debt.
//! Later requests wait until the debt is paid back at `rate_bytes_per_s`. A
//! flush chunk larger than the burst is therefore never refused forever, and
//! the long-run rate still holds. One consequence: while in debt even a
//! 0-byte request waits.
//!
//! Arithmetic is integer and exact: the balance is kept in nanobytes
//! (bytes × 10⁹), so `rate × elapsed nanoseconds` adds whole units and no
//! fraction of a byte is lost between calls. Products are computed in 128
//! bits and saturate.
//!
//! INVARIANTS: the balance never exceeds `burst_bytes` (in nanobytes); it is
//! negative only after a request larger than what was available, and never
//! below `-u64::MAX` bytes; the refill time only moves forward, so time
//! reported out of order neither adds nor removes tokens.

use core::num::NonZeroU64;
use core::time::Duration;

use crate::Time;

/// Nanobytes per byte, and nanoseconds per second: the balance is in bytes ×
/// 10⁹ so that `rate_bytes_per_s × nanoseconds` is exact.
const NANO: u128 = 1_000_000_000;

/// A token bucket limiting bytes per second; see the module docs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenBucket {
    /// `None` means unlimited.
    rate_bytes_per_s: Option<NonZeroU64>,
    burst_bytes: u64,
    /// Tokens in nanobytes; negative while in debt.
    balance_nanobytes: i128,
    /// Time up to which tokens have been accrued.
    refilled_at: Time,
}

impl TokenBucket {
    /// A bucket allowing `rate_bytes_per_s` on average and bursts of up to
    /// `burst_bytes`, full at `now`. A `burst_bytes` of 0 paces every
    /// request (each one is granted once earlier debt is paid back).
    pub fn new(rate_bytes_per_s: NonZeroU64, burst_bytes: u64, now: Time) -> TokenBucket {
        TokenBucket {
            rate_bytes_per_s: Some(rate_bytes_per_s),
            burst_bytes,
            balance_nanobytes: nanobytes(burst_bytes),
            refilled_at: now,
        }
    }

    /// A bucket that grants every request at once (no bandwidth cap). Its
    /// burst is 0, which matters only if [`TokenBucket::set_rate`] later
    /// limits it.
    pub fn unlimited() -> TokenBucket {
        TokenBucket {
            rate_bytes_per_s: None,
            burst_bytes: 0,
            balance_nanobytes: 0,
            refilled_at: Time::ZERO,
        }
    }

    /// The rate, or `None` if unlimited.
    pub fn rate_bytes_per_s(&self) -> Option<NonZeroU64> {
        self.rate_bytes_per_s
    }

    /// The burst size.
    pub fn burst_bytes(&self) -> u64 {
        self.burst_bytes
    }

    /// Whether the bucket grants everything.
    pub fn is_unlimited(&self) -> bool {
        self.rate_bytes_per_s.is_none()
    }

    /// Changes the rate from `now` on. Tokens accrued until `now` at the old
    /// rate are kept (debt too). An unlimited bucket becomes limited and
    /// starts full.
    pub fn set_rate(&mut self, now: Time, rate_bytes_per_s: NonZeroU64) {
        if self.rate_bytes_per_s.is_some() {
            self.refill(now);
        } else {
            self.balance_nanobytes = nanobytes(self.burst_bytes);
            self.refilled_at = self.refilled_at.max(now);
        }
        self.rate_bytes_per_s = Some(rate_bytes_per_s);
    }

    /// Removes the cap: every later request is granted at once.
    pub fn set_unlimited(&mut self) {
        self.rate_bytes_per_s = None;
    }

    /// Whole bytes available at `now` (0 while in debt; [`u64::MAX`] if
    /// unlimited).
    pub fn available(&self, now: Time) -> u64 {
        if self.is_unlimited() {
            return u64::MAX;
        }
        let bytes = self.balance_at(now).max(0) as u128 / NANO;
        // Cannot truncate: the balance never exceeds burst_bytes.
        bytes as u64
    }

    /// Takes `bytes` tokens at `now`, or returns the earliest time at which
    /// this same request would be granted (if nothing else is taken
    /// meanwhile). Requests larger than the burst put the bucket in debt; see
    /// the module docs.
    pub fn try_take(&mut self, now: Time, bytes: u64) -> Result<(), Time> {
        let Some(rate_bytes_per_s) = self.rate_bytes_per_s else {
            return Ok(());
        };
        self.refill(now);
        let needed_nanobytes = nanobytes(bytes.min(self.burst_bytes));
        if self.balance_nanobytes >= needed_nanobytes {
            self.balance_nanobytes -= nanobytes(bytes);
            return Ok(());
        }
        // Positive and below 2 × u64::MAX × 10⁹: fits in u128.
        let deficit_nanobytes = (needed_nanobytes - self.balance_nanobytes) as u128;
        // One nanosecond accrues `rate` nanobytes; round up so that the
        // returned time is never too early.
        let wait_nanos = deficit_nanobytes.div_ceil(u128::from(rate_bytes_per_s.get()));
        let wait = Duration::from_nanos(u64::try_from(wait_nanos).unwrap_or(u64::MAX));
        Err(self.refilled_at.saturating_add(wait))
    }

    /// Accrues tokens for the time between the last refill and `now`.
    fn refill(&mut self, now: Time) {
        if now > self.refilled_at {
            self.balance_nanobytes = self.balance_at(now);
            self.refilled_at = now;
        }
    }

    /// The balance the bucket would hold at `now`.
    fn balance_at(&self, now: Time) -> i128 {
        let Some(rate_bytes_per_s) = self.rate_bytes_per_s else {
            return self.balance_nanobytes;
        };
        let elapsed_nanos = u128::from(now.as_nanos().saturating_sub(self.refilled_at.as_nanos()));
        let burst_nanobytes = nanobytes(self.burst_bytes);
        debug_assert!(self.balance_nanobytes <= burst_nanobytes);
        // Non-negative, and at most 2 × u64::MAX × 10⁹: fits in u128.
        let room_nanobytes = (burst_nanobytes - self.balance_nanobytes) as u128;
        let accrued_nanobytes = u128::from(rate_bytes_per_s.get()).saturating_mul(elapsed_nanos);
        if accrued_nanobytes >= room_nanobytes {
            burst_nanobytes
        } else {
            // Below room_nanobytes, so it fits in i128 and the sum stays
            // below the burst.
            self.balance_nanobytes + accrued_nanobytes as i128
        }
    }
}

/// `bytes` in nanobytes. At most u64::MAX × 10⁹ < 2⁹⁴: fits in i128.
fn nanobytes(bytes: u64) -> i128 {
    i128::from(bytes) * NANO as i128
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate(bytes_per_s: u64) -> NonZeroU64 {
        // INVARIANT: tests pass non-zero rates.
        NonZeroU64::new(bytes_per_s).expect("non-zero rate")
    }

    fn ms(millis: u64) -> Time {
        Time::from_millis(millis)
    }

    #[test]
    fn starts_full_and_refills_at_rate_up_to_burst() {
        let mut b = TokenBucket::new(rate(1000), 500, ms(0));
        assert_eq!(b.available(ms(0)), 500);
        assert_eq!(b.try_take(ms(0), 500), Ok(()));
        assert_eq!(b.available(ms(0)), 0);
        assert_eq!(b.try_take(ms(0), 100), Err(ms(100)));
        assert_eq!(b.available(ms(50)), 50);
        assert_eq!(b.try_take(ms(99), 100), Err(ms(100)));
        assert_eq!(b.try_take(ms(100), 100), Ok(()));
        assert_eq!(b.available(ms(10_000)), 500, "capped at the burst");
    }

    #[test]
    fn fractions_of_a_byte_are_not_lost() {
        // 3 bytes/s refilled every millisecond: 3/1000 byte per step.
        let mut b = TokenBucket::new(rate(3), 3, ms(0));
        assert_eq!(b.try_take(ms(0), 3), Ok(()));
        for t in 1..1000 {
            assert!(b.try_take(ms(t), 3).is_err());
        }
        assert_eq!(b.try_take(ms(1000), 3), Ok(()));
    }

    #[test]
    fn returned_time_is_exact_and_rounded_up() {
        let mut b = TokenBucket::new(rate(3), 3, ms(0));
        assert_eq!(b.try_take(ms(0), 3), Ok(()));
        // 1 byte takes 333_333_333.3 ns: rounded up.
        let at = b.try_take(ms(0), 1).unwrap_err();
        assert_eq!(at, Time::from_nanos(333_333_334));
        assert!(b.try_take(Time::from_nanos(333_333_333), 1).is_err());
        assert_eq!(b.try_take(at, 1), Ok(()));
    }

    #[test]
    fn request_larger_than_burst_goes_into_debt() {
        let mut b = TokenBucket::new(rate(1000), 100, ms(0));
        // Granted because the bucket is full, although 1000 > burst.
        assert_eq!(b.try_take(ms(0), 1000), Ok(()));
        assert_eq!(b.available(ms(0)), 0);
        // 900 bytes of debt, then 1 byte: 901 ms.
        assert_eq!(b.try_take(ms(0), 1), Err(ms(901)));
        assert_eq!(b.available(ms(900)), 0);
        assert!(b.try_take(ms(899), 0).is_err(), "no request while in debt");
        assert_eq!(b.try_take(ms(900), 1), Err(ms(901)));
        assert_eq!(b.try_take(ms(901), 1), Ok(()));
    }

    #[test]
    fn request_larger_than_burst_waits_for_a_full_bucket() {
        let mut b = TokenBucket::new(rate(1000), 100, ms(0));
        assert_eq!(b.try_take(ms(0), 50), Ok(()));
        assert_eq!(b.try_take(ms(0), 1000), Err(ms(50)));
        assert_eq!(b.try_take(ms(50), 1000), Ok(()));
    }

    #[test]
    fn zero_burst_paces_every_request() {
        let mut b = TokenBucket::new(rate(1000), 0, ms(0));
        assert_eq!(b.try_take(ms(0), 10), Ok(()));
        assert_eq!(b.try_take(ms(0), 10), Err(ms(10)));
        assert_eq!(b.try_take(ms(10), 10), Ok(()));
    }

    #[test]
    fn set_rate_keeps_accrued_tokens() {
        let mut b = TokenBucket::new(rate(1000), 1000, ms(0));
        assert_eq!(b.try_take(ms(0), 1000), Ok(()));
        b.set_rate(ms(100), rate(2000));
        assert_eq!(b.rate_bytes_per_s(), Some(rate(2000)));
        // 100 bytes at the old rate, 200 at the new.
        assert_eq!(b.available(ms(200)), 300);
    }

    #[test]
    fn unlimited_grants_everything() {
        let mut b = TokenBucket::unlimited();
        assert!(b.is_unlimited());
        assert_eq!(b.try_take(ms(0), u64::MAX), Ok(()));
        assert_eq!(b.try_take(ms(0), u64::MAX), Ok(()));
        assert_eq!(b.available(ms(0)), u64::MAX);
        b.set_rate(ms(5), rate(1000));
        assert_eq!(b.try_take(ms(5), 1), Ok(()), "burst 0 paces");
        assert_eq!(b.try_take(ms(5), 1), Err(ms(6)));
        b.set_unlimited();
        assert_eq!(b.try_take(ms(5), 1), Ok(()));
    }

    #[test]
    fn time_going_backwards_adds_nothing() {
        let mut b = TokenBucket::new(rate(1000), 100, ms(10));
        assert_eq!(b.try_take(ms(10), 100), Ok(()));
        assert_eq!(b.try_take(ms(5), 10), Err(ms(20)));
        assert_eq!(b.available(ms(0)), 0);
        assert_eq!(b.try_take(ms(20), 10), Ok(()));
    }

    #[test]
    fn extreme_values_do_not_overflow() {
        let end = Time::from_nanos(u64::MAX);
        let mut b = TokenBucket::new(rate(u64::MAX), u64::MAX, Time::ZERO);
        assert_eq!(b.try_take(Time::ZERO, u64::MAX), Ok(()));
        assert_eq!(b.available(end), u64::MAX);
        let mut b = TokenBucket::new(rate(1), u64::MAX, Time::ZERO);
        assert_eq!(b.try_take(Time::ZERO, u64::MAX), Ok(()));
        assert_eq!(b.try_take(Time::ZERO, u64::MAX), Err(end));
        assert_eq!(b.available(end), u64::MAX / 1_000_000_000);
    }
}
