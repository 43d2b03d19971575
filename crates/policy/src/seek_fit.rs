//! Keeping `cost`'s `t_seek` current from the mount's own traffic (issue
//! 32; docs/policy.md, "The model kept current").
//!
//! Every stretch of file-contiguous bytes that the engine writes back to
//! the capacity tier (a flush run, a close's or an fsync's write-back, the
//! idle pass) is traffic whose cost the rule predicts: a stretch that does
//! not continue the previous one makes the device position (`t_seek`),
//! and its bytes pass at the device's rate (`B_cap`). Over a stretch of
//! time in which the tier was busy with such writes, `k` positionings and
//! `b` bytes took
//!
//! ```text
//! T ≈ k · t_seek + b / B_cap
//! ```
//!
//! [`SeekFit`] fits `t_seek` and `1 / B_cap` to the observations `(k, b,
//! T)` by least squares, each weighted by [`DECAY`] to the power of its
//! age in observations, so the fit follows a tier whose behaviour changes
//! (a parallel file system that other jobs congest) within a few dozen
//! observations. The two terms separate only when the observations mix
//! positionings and bytes in different proportions (one long contiguous
//! write-back beside a fragmented one), and `t_seek` is only known from
//! positionings: so there is no estimate (and the model keeps what it had)
//! before [`OBSERVATIONS_MIN`] observations holding [`POSITIONINGS_MIN`]
//! positionings (weighted), while the mixes do not separate the terms, or
//! while the fit's standard error of `t_seek` is above half of it
//! (or [`SEEK_ERROR_FLOOR`] for a `t_seek` near zero); the rate is given
//! only while its inverse's standard error is at most half of it, since a
//! mix of short stretches pins `t_seek` long before the bytes' time
//! stands out of a loaded machine's noise. A burst whose
//! write-backs trail it contiguously (IO500's ior-hard) positions once per
//! pass: its first fits, from a few passes, put `t_seek` anywhere from 0
//! to 15 ms, and routing by them sent ior-hard's interleaved records
//! straight to the disk (16 against 61 MiB/s).
//!
//! INVARIANT: the weighted sums are finite and non-negative on the
//! diagonal; an estimate has a finite non-negative `t_seek` and a finite
//! positive rate.

use core::time::Duration;

/// Weight of an observation relative to the next one: after 64
/// observations an old one counts `1/e` as much as a new one.
pub const DECAY: f64 = 1.0 - 1.0 / 64.0;

/// Observations before the first estimate.
pub const OBSERVATIONS_MIN: u64 = 16;

/// Positionings (weighted as their observations) before the first
/// estimate: `t_seek` is measured by them alone.
pub const POSITIONINGS_MIN: f64 = 64.0;

/// The standard error of `t_seek` an estimate may have however small
/// `t_seek` is (module docs).
pub const SEEK_ERROR_FLOOR: Duration = Duration::from_micros(50);

/// The largest `t_seek` an estimate gives: above it, something other than
/// the device (a stalled server, a suspended process) took the time.
pub const SEEK_MAX: Duration = Duration::from_millis(100);

/// How far apart (relatively) the observations' mixes must be: the
/// normal equations' determinant over the product of its diagonal.
const SEPARATION_MIN: f64 = 1e-3;

/// A fit of `t_seek` and the capacity tier's rate (module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SeekFit {
    /// Weighted sums over observations of `k²`, `k·m`, `m²`, `k·T`, `m·T`,
    /// `T²`, `k` and 1 (`m`: bytes in MiB, `T` in seconds).
    kk: f64,
    km: f64,
    mm: f64,
    kt: f64,
    mt: f64,
    tt: f64,
    k: f64,
    weight: f64,
    observations: u64,
}

/// What [`SeekFit::estimate`] gives.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SeekEstimate {
    /// `t_seek`: the positioning time per stretch that does not continue
    /// the previous one.
    pub seek: Duration,
    /// `B_cap`: the capacity tier's write rate, bytes per second; `None`
    /// while the fit's standard error of its inverse is above half of it
    /// (the bytes' time is small beside the times' noise). `t_seek` may be
    /// known without it: positionings and bytes are separated either way.
    pub bytes_per_s: Option<f64>,
    /// Observations behind it.
    pub observations: u64,
}

impl SeekFit {
    /// A fit that has seen nothing.
    pub fn new() -> SeekFit {
        SeekFit::default()
    }

    /// Observations seen so far.
    pub fn observations(&self) -> u64 {
        self.observations
    }

    /// The tier positioned `positionings` times and took `bytes` in
    /// `took`. An observation without bytes, or with a time that is not a
    /// number of seconds, is ignored.
    pub fn observe(&mut self, positionings: u32, bytes: u64, took: Duration) {
        let t = took.as_secs_f64();
        if bytes == 0 || !t.is_finite() {
            return;
        }
        let k = f64::from(positionings);
        let m = bytes as f64 / (1u64 << 20) as f64;
        self.kk = self.kk * DECAY + k * k;
        self.km = self.km * DECAY + k * m;
        self.mm = self.mm * DECAY + m * m;
        self.kt = self.kt * DECAY + k * t;
        self.mt = self.mt * DECAY + m * t;
        self.tt = self.tt * DECAY + t * t;
        self.k = self.k * DECAY + k;
        self.weight = self.weight * DECAY + 1.0;
        self.observations += 1;
    }

    /// The fitted `t_seek` and rate, once the observations determine them
    /// (module docs); `t_seek` is at least 0 and at most [`SEEK_MAX`].
    pub fn estimate(&self) -> Option<SeekEstimate> {
        if self.observations < OBSERVATIONS_MIN || self.k < POSITIONINGS_MIN {
            return None;
        }
        let det = self.kk * self.mm - self.km * self.km;
        // Also false for NaN sums.
        let separated = det > SEPARATION_MIN * self.kk * self.mm;
        if !separated {
            return None;
        }
        let seek = (self.kt * self.mm - self.mt * self.km) / det;
        let per_mib = (self.kk * self.mt - self.km * self.kt) / det;
        if !(per_mib > 0.0 && per_mib.is_finite() && seek.is_finite()) {
            return None;
        }
        // The residuals' weighted sum of squares, from the sums (clamped:
        // rounding may take it below zero), and `t_seek`'s variance.
        let rss = (self.tt - 2.0 * seek * self.kt - 2.0 * per_mib * self.mt
            + seek * seek * self.kk
            + 2.0 * seek * per_mib * self.km
            + per_mib * per_mib * self.mm)
            .max(0.0);
        let freedom = self.weight - 2.0;
        if freedom <= 0.0 {
            return None;
        }
        let residual_variance = rss / freedom;
        let seek_variance = residual_variance * self.mm / det;
        let floor = SEEK_ERROR_FLOOR.as_secs_f64();
        let allowed = (0.5 * seek).max(floor);
        let certain = seek_variance <= allowed * allowed;
        if !certain {
            return None;
        }
        let per_mib_variance = residual_variance * self.kk / det;
        let rate_known = per_mib_variance <= 0.25 * per_mib * per_mib;
        let seek = seek.clamp(0.0, SEEK_MAX.as_secs_f64());
        Some(SeekEstimate {
            seek: Duration::from_secs_f64(seek),
            bytes_per_s: rate_known.then(|| (1u64 << 20) as f64 / per_mib),
            observations: self.observations,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    /// `k` positionings of `seek` and `bytes` at `rate`.
    fn took(k: u32, bytes: u64, seek: f64, rate: f64) -> Duration {
        Duration::from_secs_f64(f64::from(k) * seek + bytes as f64 / rate)
    }

    #[test]
    fn a_disk_seen_through_contiguous_and_fragmented_write_backs_is_fitted() {
        // The emulated 7200 rpm disk: about 5 ms per positioning, 150 MB/s.
        let mut fit = SeekFit::new();
        for i in 0..40u32 {
            let (k, bytes) = if i.is_multiple_of(2) {
                (1, 18 * MIB)
            } else {
                (180 + i, 8 * MIB)
            };
            fit.observe(k, bytes, took(k, bytes, 0.005, 150e6));
        }
        let e = fit.estimate().expect("an estimate");
        assert!((e.seek.as_secs_f64() - 0.005).abs() < 1e-5, "{e:?}");
        assert!((e.bytes_per_s.unwrap() - 150e6).abs() < 1e4, "{e:?}");
        assert_eq!(e.observations, 40);
    }

    #[test]
    fn no_estimate_before_enough_observations_or_while_the_terms_do_not_separate() {
        let mut fit = SeekFit::new();
        // Every pass one 4 MiB stretch after a positioning: seeks and bytes
        // in one proportion, so the time cannot be split between them.
        for _ in 0..100 {
            fit.observe(1, 4 * MIB, took(1, 4 * MIB, 0.005, 150e6));
        }
        assert_eq!(fit.estimate(), None);
        let mut fit = SeekFit::new();
        for i in 0..OBSERVATIONS_MIN - 1 {
            let k = 1 + (i as u32 % 3) * 50;
            fit.observe(k, 8 * MIB, took(k, 8 * MIB, 0.005, 150e6));
        }
        assert_eq!(fit.estimate(), None, "one short of the minimum");
        fit.observe(7, 8 * MIB, took(7, 8 * MIB, 0.005, 150e6));
        assert!(fit.estimate().is_some());
    }

    #[test]
    fn the_fit_follows_a_tier_whose_seeks_grow() {
        let mut fit = SeekFit::new();
        let pass = |fit: &mut SeekFit, i: u32, seek: f64| {
            let k = if i.is_multiple_of(2) { 1 } else { 100 };
            fit.observe(k, 16 * MIB, took(k, 16 * MIB, seek, 200e6));
        };
        for i in 0..100 {
            pass(&mut fit, i, 0.0001);
        }
        let before = fit.estimate().unwrap().seek;
        assert!(before < Duration::from_micros(150), "{before:?}");
        // The tier is congested now: ten times the positioning time.
        for i in 0..200 {
            pass(&mut fit, i, 0.001);
        }
        let after = fit.estimate().unwrap().seek;
        assert!(
            after > Duration::from_micros(900) && after < Duration::from_micros(1100),
            "{after:?}"
        );
    }

    #[test]
    fn a_tier_whose_time_is_all_bytes_gets_no_negative_seek_and_stalls_are_capped() {
        let mut fit = SeekFit::new();
        // A page-cached directory: noise around zero positioning time.
        for i in 0..40u32 {
            let k = if i.is_multiple_of(2) { 1 } else { 200 };
            let noise = if i % 4 < 2 { -2e-6 } else { 2e-6 };
            let t = (16.0 * MIB as f64) / 2e9 + f64::from(k) * noise;
            fit.observe(k, 16 * MIB, Duration::from_secs_f64(t.max(0.0)));
        }
        let e = fit.estimate().unwrap();
        assert!(e.seek < Duration::from_micros(5), "{e:?}");
        let mut fit = SeekFit::new();
        for i in 0..40u32 {
            let k = if i.is_multiple_of(2) { 10 } else { 20 };
            fit.observe(k, MIB, took(k, MIB, 5.0, 150e6));
        }
        assert_eq!(fit.estimate().unwrap().seek, SEEK_MAX);
        // Nothing written is no observation.
        let mut fit = SeekFit::new();
        fit.observe(3, 0, Duration::from_millis(20));
        assert_eq!(fit.observations(), 0);
    }

    #[test]
    fn write_backs_that_trail_a_burst_contiguously_never_give_an_estimate() {
        // ior-hard under close-to-open: each pass one positioning, then
        // 10-25 MiB contiguous, timed with the noise of a busy machine.
        let mut fit = SeekFit::new();
        for i in 0..500u64 {
            let bytes = (10 + i % 16) * MIB;
            let jitter = if i % 3 == 0 { 0.004 } else { -0.002 };
            let t = took(1, bytes, 0.005, 150e6).as_secs_f64() + jitter;
            fit.observe(1, bytes, Duration::from_secs_f64(t));
        }
        assert_eq!(fit.estimate(), None, "one positioning per pass");
    }

    #[test]
    fn a_rate_the_noise_hides_is_not_given_beside_a_known_seek() {
        // Busy periods of four positionings with 16 KiB each, and of two
        // with 64 KiB each: the bytes take 0.4-0.9 ms of each, their
        // positionings 10-20 ms; `noise` (a loaded machine's late
        // wake-ups) is drawn from a seeded generator.
        let observe = |noise: f64| {
            let mut fit = SeekFit::new();
            let mut x: u64 = 1;
            for i in 0..128u32 {
                let (k, bytes) = if i.is_multiple_of(2) {
                    (4, 64 * 1024)
                } else {
                    (2, 128 * 1024)
                };
                x = x
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                let uniform = (x >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0;
                let t = took(k, bytes, 0.005, 150e6).as_secs_f64() + noise * uniform;
                fit.observe(k, bytes, Duration::from_secs_f64(t));
            }
            fit.estimate().expect("t_seek is pinned")
        };
        let e = observe(0.005);
        assert!((e.seek.as_secs_f64() - 0.005).abs() < 0.0005, "{e:?}");
        assert_eq!(e.bytes_per_s, None, "{e:?}");
        // The same mix with a tenth of the noise gives the rate.
        let rate = observe(0.0005).bytes_per_s.expect("the rate");
        assert!((rate - 150e6).abs() < 0.2 * 150e6, "{rate}");
    }

    #[test]
    fn times_too_noisy_to_pin_t_seek_give_no_estimate() {
        let mut fit = SeekFit::new();
        for i in 0..40u64 {
            let k = if i % 2 == 0 { 2 } else { 40 };
            // Times that do not follow the positionings at all (another
            // job's traffic on a shared tier): 0.1-0.5 s whatever k.
            let t = 0.1 + 0.4 * ((i * 7919) % 97) as f64 / 97.0;
            fit.observe(k as u32, 8 * MIB, Duration::from_secs_f64(t));
        }
        assert_eq!(fit.estimate(), None);
    }
}
