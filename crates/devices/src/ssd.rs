//! A SATA/NVMe SSD: fixed latency plus a per-direction bandwidth, over a
//! number of independent internal channels (EVALUATION §1).
//!
//! A request's service time is `latency + len / rate(kind)`. `schedule`
//! serves requests first come, first served: each call takes the channel
//! that frees earliest, starts at `max(now, that channel's free time)` and
//! occupies it for the service time. With one channel the device is a
//! single FIFO server; with `n` it is `n` FIFO servers sharing one queue.
//!
//! Invariants: a channel's free time never moves backwards; the model holds
//! no queue of its own (a request is placed on a channel when scheduled), so
//! its memory is bounded by `channels`, itself at most [`CHANNELS_MAX`].

use core::time::Duration;

use sluice_policy::Time;

use crate::{
    duration_from_secs, require_latency, require_positive_finite, DeviceConfigError, IoKind,
};

/// Largest `channels` accepted; far above any real device's parallelism.
pub const CHANNELS_MAX: u32 = 1024;

/// Configuration of the SSD model. Defaults: the SSDUP+ testbed SATA SSD.
#[derive(Clone, Debug, PartialEq)]
pub struct SsdConfig {
    /// Fixed per-request latency (command overhead and flash access).
    pub latency: Duration,
    /// Read bandwidth of one channel.
    pub read_bytes_per_s: f64,
    /// Write bandwidth of one channel.
    pub write_bytes_per_s: f64,
    /// Independent channels serving requests in parallel, in
    /// 1..=[`CHANNELS_MAX`]. Each has the full bandwidth above.
    pub channels: u32,
}

impl Default for SsdConfig {
    fn default() -> SsdConfig {
        SsdConfig {
            latency: Duration::from_micros(60),
            read_bytes_per_s: 500e6,
            write_bytes_per_s: 250e6,
            channels: 1,
        }
    }
}

impl SsdConfig {
    /// Checks every value; the error names the first bad key.
    pub fn validate(&self) -> Result<(), DeviceConfigError> {
        require_latency("latency", self.latency)?;
        require_positive_finite("read_bytes_per_s", self.read_bytes_per_s)?;
        require_positive_finite("write_bytes_per_s", self.write_bytes_per_s)?;
        if self.channels == 0 || self.channels > CHANNELS_MAX {
            return Err(DeviceConfigError {
                key: "channels",
                expected: format!("in 1..={CHANNELS_MAX} (got {})", self.channels),
            });
        }
        Ok(())
    }
}

/// Counters of the SSD since it was created. Requests are counted when
/// scheduled.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SsdStats {
    /// Reads scheduled.
    pub read_ops: u64,
    /// Bytes read.
    pub read_bytes: u64,
    /// Writes scheduled.
    pub write_ops: u64,
    /// Bytes written.
    pub write_bytes: u64,
    /// Sum of service times over all channels (so up to `channels` times
    /// the elapsed time).
    pub busy_time: Duration,
    /// Sum of the waits between `now` and the start of service.
    pub wait_time_total: Duration,
    /// Longest wait between `now` and the start of service.
    pub wait_time_max: Duration,
}

/// The SSD: the time at which each channel becomes free.
#[derive(Clone, Debug)]
pub struct Ssd {
    config: SsdConfig,
    /// Free time of each channel; `channels` entries.
    channel_free_at: Vec<Time>,
    stats: SsdStats,
}

impl Ssd {
    /// An idle SSD (every channel free from time zero).
    pub fn new(config: SsdConfig) -> Result<Ssd, DeviceConfigError> {
        config.validate()?;
        Ok(Ssd {
            channel_free_at: vec![Time::ZERO; config.channels as usize],
            config,
            stats: SsdStats::default(),
        })
    }

    /// The configuration the SSD was built with.
    pub fn config(&self) -> &SsdConfig {
        &self.config
    }

    /// Time one request occupies a channel: `latency + len / rate(kind)`.
    pub fn service_time(&self, kind: IoKind, len: u64) -> Duration {
        let rate = match kind {
            IoKind::Read => self.config.read_bytes_per_s,
            IoKind::Write => self.config.write_bytes_per_s,
        };
        self.config
            .latency
            .saturating_add(duration_from_secs(len as f64 / rate))
    }

    /// Schedules a request arriving at `now`, first come first served over
    /// the channels: it starts at `max(now, earliest free channel)` and the
    /// completion time is returned.
    pub fn schedule(&mut self, now: Time, kind: IoKind, len: u64) -> Time {
        // The earliest free channel; ties go to the lowest index so the
        // choice is deterministic.
        let (channel, free_at) = self
            .channel_free_at
            .iter()
            .copied()
            .enumerate()
            .min_by_key(|&(index, free_at)| (free_at, index))
            // INVARIANT: validate() guarantees channels >= 1.
            .expect("at least one channel");
        let start = now.max(free_at);
        let service = self.service_time(kind, len);
        let done = start.saturating_add(service);
        self.channel_free_at[channel] = done;

        let wait = start.saturating_since(now);
        let stats = &mut self.stats;
        match kind {
            IoKind::Read => {
                stats.read_ops += 1;
                stats.read_bytes = stats.read_bytes.saturating_add(len);
            }
            IoKind::Write => {
                stats.write_ops += 1;
                stats.write_bytes = stats.write_bytes.saturating_add(len);
            }
        }
        stats.busy_time = stats.busy_time.saturating_add(service);
        stats.wait_time_total = stats.wait_time_total.saturating_add(wait);
        stats.wait_time_max = stats.wait_time_max.max(wait);
        done
    }

    /// When every channel is free again (the last scheduled completion).
    pub fn idle_at(&self) -> Time {
        self.channel_free_at
            .iter()
            .copied()
            .max()
            .unwrap_or(Time::ZERO)
    }

    /// Counters since creation.
    pub fn stats(&self) -> SsdStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB: u64 = 1_000_000;

    fn at_us(us: u64) -> Time {
        Time::from_nanos(us * 1000)
    }

    #[test]
    fn service_time_is_latency_plus_transfer_per_direction() {
        let ssd = Ssd::new(SsdConfig::default()).unwrap();
        // 1 MB: 2 ms at 500 MB/s, 4 ms at 250 MB/s.
        assert_eq!(
            ssd.service_time(IoKind::Read, MB),
            Duration::from_micros(2060)
        );
        assert_eq!(
            ssd.service_time(IoKind::Write, MB),
            Duration::from_micros(4060)
        );
        assert_eq!(ssd.service_time(IoKind::Read, 0), Duration::from_micros(60));
    }

    #[test]
    fn one_channel_is_a_fifo_server() {
        let mut ssd = Ssd::new(SsdConfig::default()).unwrap();
        // Two writes at t = 0: the second waits for the first.
        let first = ssd.schedule(Time::ZERO, IoKind::Write, MB);
        let second = ssd.schedule(Time::ZERO, IoKind::Write, MB);
        assert_eq!(first, at_us(4060));
        assert_eq!(second, at_us(8120));
        // A request after the device drained starts at its arrival.
        let third = ssd.schedule(at_us(10_000), IoKind::Read, MB);
        assert_eq!(third, at_us(12_060));
        let stats = ssd.stats();
        assert_eq!((stats.write_ops, stats.write_bytes), (2, 2 * MB));
        assert_eq!((stats.read_ops, stats.read_bytes), (1, MB));
        assert_eq!(stats.busy_time, Duration::from_micros(4060 * 2 + 2060));
        assert_eq!(stats.wait_time_total, Duration::from_micros(4060));
        assert_eq!(stats.wait_time_max, Duration::from_micros(4060));
        assert_eq!(ssd.idle_at(), third);
    }

    #[test]
    fn channels_serve_in_parallel_then_queue() {
        let config = SsdConfig {
            channels: 2,
            ..SsdConfig::default()
        };
        let mut ssd = Ssd::new(config).unwrap();
        let done: Vec<Time> = (0..5)
            .map(|_| ssd.schedule(Time::ZERO, IoKind::Write, MB))
            .collect();
        // Two at a time, in arrival order.
        assert_eq!(
            done,
            vec![
                at_us(4060),
                at_us(4060),
                at_us(8120),
                at_us(8120),
                at_us(12_180)
            ]
        );
        // A late arrival takes the channel that frees first.
        assert_eq!(ssd.schedule(at_us(9000), IoKind::Read, MB), at_us(11_060));
    }

    #[test]
    fn config_validation_names_the_key() {
        let bad = |config: SsdConfig| config.validate().unwrap_err().key;
        let base = SsdConfig::default();
        assert!(base.validate().is_ok());
        assert_eq!(
            bad(SsdConfig {
                latency: Duration::from_secs(61),
                ..base
            }),
            "latency"
        );
        assert_eq!(
            bad(SsdConfig {
                read_bytes_per_s: 0.0,
                ..base
            }),
            "read_bytes_per_s"
        );
        assert_eq!(
            bad(SsdConfig {
                write_bytes_per_s: f64::NAN,
                ..base
            }),
            "write_bytes_per_s"
        );
        assert_eq!(
            bad(SsdConfig {
                channels: 0,
                ..base
            }),
            "channels"
        );
        assert_eq!(
            bad(SsdConfig {
                channels: CHANNELS_MAX + 1,
                ..base
            }),
            "channels"
        );
        assert!(Ssd::new(SsdConfig {
            channels: 0,
            ..base
        })
        .unwrap_err()
        .to_string()
        .contains("channels"));
    }
}
