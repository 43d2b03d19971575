//! Device models: HDD, SSD and network link (EVALUATION §1).
//!
//! Pure: no I/O and no clock. A model is told the time (`now`) or asked for
//! a service time and decides what happens; the simulator applies the
//! answer in virtual time, the emulated tiers (engine issue) in real time by
//! sleeping before they complete real file I/O. One copy of each model.
//!
//! Invariants shared by every model: the same configuration and seed give
//! the same answers in the same order (all randomness comes from a seeded
//! SplitMix64 kept in this crate); every queue has a configured bound; a bad
//! configuration is refused by `new` with a [`DeviceConfigError`] naming the
//! key, never by a panic; every duration is finite and non-negative.

use core::fmt;
use core::time::Duration;

pub mod hdd;
pub mod link;
pub mod rng;
pub mod ssd;

pub use hdd::{Hdd, HddConfig, HddRequest, HddService, HddStats};
pub use link::{IncastConfig, Link, LinkConfig, LinkStats, SharedLink};
pub use ssd::{Ssd, SsdConfig, SsdStats};

/// Direction of a device request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum IoKind {
    /// Data moves from the device to the host.
    Read,
    /// Data moves from the host to the device.
    Write,
}

impl IoKind {
    /// Lower-case name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            IoKind::Read => "read",
            IoKind::Write => "write",
        }
    }
}

impl fmt::Display for IoKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A device configuration value out of its allowed range.
///
/// `key` is the field name in the model's config struct (`seek_avg_ms`,
/// `channels`, ...); the caller knows which device it configured and may
/// prefix its own section name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceConfigError {
    /// The offending config field.
    pub key: &'static str,
    /// What the value must be, with the value given.
    pub expected: String,
}

impl fmt::Display for DeviceConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "device config `{}` must be {}", self.key, self.expected)
    }
}

impl std::error::Error for DeviceConfigError {}

/// Seconds (computed in f64) to a [`Duration`]: NaN and negatives become
/// zero, values too large for a `Duration` saturate. Models compute in f64
/// because rates are fractional; this is the one place that converts.
pub(crate) fn duration_from_secs(secs: f64) -> Duration {
    if secs.is_nan() || secs <= 0.0 {
        return Duration::ZERO;
    }
    Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX)
}

/// `Ok` when `value` is finite and strictly positive, else an error for
/// `key` saying so.
pub(crate) fn require_positive_finite(
    key: &'static str,
    value: f64,
) -> Result<(), DeviceConfigError> {
    if value.is_finite() && value > 0.0 {
        Ok(())
    } else {
        Err(DeviceConfigError {
            key,
            expected: format!("a finite number > 0 (got {value})"),
        })
    }
}

/// Largest latency a link or SSD accepts: a minute is already far beyond
/// any device sluice models, so anything larger is a unit mistake.
pub(crate) const LATENCY_MAX: Duration = Duration::from_secs(60);

/// `Ok` when `latency` is at most [`LATENCY_MAX`].
pub(crate) fn require_latency(
    key: &'static str,
    latency: Duration,
) -> Result<(), DeviceConfigError> {
    if latency <= LATENCY_MAX {
        Ok(())
    } else {
        Err(DeviceConfigError {
            key,
            expected: format!("at most {LATENCY_MAX:?} (got {latency:?})"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duration_conversion_guards_nan_negative_and_overflow() {
        assert_eq!(duration_from_secs(f64::NAN), Duration::ZERO);
        assert_eq!(duration_from_secs(-1.0), Duration::ZERO);
        assert_eq!(duration_from_secs(f64::INFINITY), Duration::MAX);
        assert_eq!(duration_from_secs(1e30), Duration::MAX);
        assert_eq!(duration_from_secs(0.0015), Duration::from_micros(1500));
    }

    #[test]
    fn config_error_names_the_key() {
        let e = require_positive_finite("bytes_per_s", -3.0).unwrap_err();
        assert_eq!(e.key, "bytes_per_s");
        let text = e.to_string();
        assert!(text.contains("`bytes_per_s`"), "{text}");
        assert!(text.contains("-3"), "{text}");
        assert!(require_positive_finite("x", f64::INFINITY).is_err());
        assert!(require_positive_finite("x", 0.0).is_err());
        assert!(require_positive_finite("x", 1e-9).is_ok());
    }
}
