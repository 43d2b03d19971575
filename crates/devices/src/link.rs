//! A network link: bandwidth plus latency, transfers serialized first come
//! first served (EVALUATION §1; the SSDUP+ cluster used Gigabit Ethernet,
//! about 117 MB/s per link).
//!
//! A transfer starts when the link is free (`max(now, free_at)`), occupies
//! it for `bytes / bandwidth`, and arrives `latency` after its last byte was
//! sent. Latency overlaps with the next transfer (it is propagation, not
//! occupancy), so back-to-back transfers stream at the full bandwidth.
//!
//! Invariants: `free_at` never moves backwards; the link holds no queue of
//! its own (each transfer is placed when it is asked for), so its memory is
//! constant.
//!
//! [`IncastConfig`] is an optional part of a switch port in front of a
//! link: TCP incast (many flows converging on one port overflow its buffer
//! and some of them lose a whole window, so they wait out a retransmission
//! timeout). The link itself stays FIFO; the simulator draws, per transfer,
//! whether it times out ([`IncastConfig::timeout_probability`]).

use core::time::Duration;

use sluice_policy::Time;

use crate::{duration_from_secs, require_latency, require_positive_finite, DeviceConfigError};

/// Configuration of the link model. Defaults: Gigabit Ethernet.
#[derive(Clone, Debug, PartialEq)]
pub struct LinkConfig {
    /// Payload bandwidth.
    pub bytes_per_s: f64,
    /// One-way latency added after the last byte is sent.
    pub latency: Duration,
}

impl Default for LinkConfig {
    fn default() -> LinkConfig {
        LinkConfig {
            bytes_per_s: 117e6,
            latency: Duration::from_micros(50),
        }
    }
}

impl LinkConfig {
    /// Checks every value; the error names the first bad key.
    pub fn validate(&self) -> Result<(), DeviceConfigError> {
        require_positive_finite("bytes_per_s", self.bytes_per_s)?;
        require_latency("latency", self.latency)?;
        Ok(())
    }
}

/// TCP incast at a switch's output port (issue 23; Phanishayee et al.,
/// "Measurement and Analysis of TCP Throughput Collapse in Cluster-based
/// Storage Systems", FAST 2008). `flows` TCP flows with data for the port
/// each keep at least `flow_window_bytes` in the network (the smallest
/// congestion window); while the port's buffer holds all of them, losses
/// are repaired by fast retransmit and nobody stalls. Once
/// `flows × flow_window_bytes` exceeds `port_buffer_bytes`, the excess is
/// dropped, a flow that loses its whole window gets no duplicate
/// acknowledgements and waits out `retransmit_timeout`. First-order model:
/// a transfer that reaches the port times out with probability
/// `1 − buffer / (flows × window)` (the share of the flows' minimal windows
/// that does not fit), and is then offered again one timeout later.
///
/// Defaults: a 128 KiB port buffer (commodity Gigabit switches share some
/// hundreds of KB of packet memory among all their ports; the SSDUP+ paper
/// does not name its switch), two 1448-byte segments per flow (Linux's
/// smallest congestion window), and Linux's minimum retransmission timeout,
/// 200 ms (`TCP_RTO_MIN`, also in the paper's kernel 2.6.32).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IncastConfig {
    /// Bytes the switch port can hold for its link.
    pub port_buffer_bytes: u64,
    /// Bytes each flow keeps in flight at least (its smallest window).
    pub flow_window_bytes: u64,
    /// How long a flow that lost its window waits before resending.
    pub retransmit_timeout: Duration,
}

impl Default for IncastConfig {
    fn default() -> IncastConfig {
        IncastConfig {
            port_buffer_bytes: 128 * 1024,
            flow_window_bytes: 2 * 1448,
            retransmit_timeout: Duration::from_millis(200),
        }
    }
}

impl IncastConfig {
    /// Checks every value; the error names the first bad key.
    pub fn validate(&self) -> Result<(), DeviceConfigError> {
        require_positive_finite("port_buffer_bytes", self.port_buffer_bytes as f64)?;
        require_positive_finite("flow_window_bytes", self.flow_window_bytes as f64)?;
        require_latency("retransmit_timeout", self.retransmit_timeout)?;
        Ok(())
    }

    /// Probability that a transfer reaching the port times out when `flows`
    /// flows (itself included) have data for it: 0 while their smallest
    /// windows fit in the buffer, else the share that does not fit. Rises
    /// with `flows`, never reaches 1.
    pub fn timeout_probability(&self, flows: u64) -> f64 {
        let demand = flows as f64 * self.flow_window_bytes as f64;
        let buffer = self.port_buffer_bytes as f64;
        if demand <= buffer {
            0.0
        } else {
            1.0 - buffer / demand
        }
    }
}

/// Counters of the link since it was created.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Transfers placed.
    pub transfers: u64,
    /// Bytes carried.
    pub bytes: u64,
    /// Time the link spent sending (serialization, not latency).
    pub busy_time: Duration,
    /// Sum of the waits between `now` and the start of sending.
    pub wait_time_total: Duration,
    /// Longest wait between `now` and the start of sending.
    pub wait_time_max: Duration,
}

/// The link: the time at which it is free to send again.
#[derive(Clone, Debug)]
pub struct Link {
    config: LinkConfig,
    free_at: Time,
    stats: LinkStats,
}

impl Link {
    /// An idle link.
    pub fn new(config: LinkConfig) -> Result<Link, DeviceConfigError> {
        config.validate()?;
        Ok(Link {
            config,
            free_at: Time::ZERO,
            stats: LinkStats::default(),
        })
    }

    /// The configuration the link was built with.
    pub fn config(&self) -> &LinkConfig {
        &self.config
    }

    /// Time `bytes` occupy the link: `bytes / bandwidth`.
    pub fn serialization_time(&self, bytes: u64) -> Duration {
        duration_from_secs(bytes as f64 / self.config.bytes_per_s)
    }

    /// FIFO serialization: the transfer starts when the link is free
    /// (`max(now, free_at)`), occupies it for `bytes / bandwidth`, and
    /// arrives `latency` after it ends. Returns the arrival time.
    pub fn transfer(&mut self, now: Time, bytes: u64) -> Time {
        let start = now.max(self.free_at);
        let sending = self.serialization_time(bytes);
        self.free_at = start.saturating_add(sending);

        let wait = start.saturating_since(now);
        let stats = &mut self.stats;
        stats.transfers += 1;
        stats.bytes = stats.bytes.saturating_add(bytes);
        stats.busy_time = stats.busy_time.saturating_add(sending);
        stats.wait_time_total = stats.wait_time_total.saturating_add(wait);
        stats.wait_time_max = stats.wait_time_max.max(wait);

        self.free_at.saturating_add(self.config.latency)
    }

    /// When the link is free to send again.
    pub fn free_at(&self) -> Time {
        self.free_at
    }

    /// Counters since creation.
    pub fn stats(&self) -> LinkStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at_us(us: u64) -> Time {
        Time::from_nanos(us * 1000)
    }

    fn gigabit() -> Link {
        // 100 MB/s keeps the arithmetic exact: 1 MB takes 10 ms.
        Link::new(LinkConfig {
            bytes_per_s: 100e6,
            latency: Duration::from_micros(50),
        })
        .unwrap()
    }

    #[test]
    fn single_transfer_is_serialization_plus_latency() {
        let mut link = gigabit();
        assert_eq!(link.transfer(at_us(1000), 1_000_000), at_us(11_050));
        assert_eq!(link.free_at(), at_us(11_000));
        // Zero bytes still pay the latency.
        assert_eq!(link.transfer(at_us(20_000), 0), at_us(20_050));
    }

    #[test]
    fn back_to_back_transfers_serialize_and_overlap_latency() {
        let mut link = gigabit();
        let first = link.transfer(Time::ZERO, 1_000_000);
        let second = link.transfer(Time::ZERO, 1_000_000);
        assert_eq!(first, at_us(10_050));
        // The second waits for the first's last byte, not its arrival.
        assert_eq!(second, at_us(20_050));
        let stats = link.stats();
        assert_eq!((stats.transfers, stats.bytes), (2, 2_000_000));
        assert_eq!(stats.busy_time, Duration::from_millis(20));
        assert_eq!(stats.wait_time_total, Duration::from_millis(10));
        assert_eq!(stats.wait_time_max, Duration::from_millis(10));
    }

    #[test]
    fn streaming_runs_at_the_bandwidth() {
        let mut link = Link::new(LinkConfig::default()).unwrap();
        let mut arrival = Time::ZERO;
        for _ in 0..1000 {
            arrival = link.transfer(Time::ZERO, 1 << 20);
        }
        let seconds = arrival.as_nanos() as f64 / 1e9;
        let rate = (1000u64 << 20) as f64 / seconds;
        assert!((rate / 117e6 - 1.0).abs() < 1e-3, "rate {rate}");
    }

    #[test]
    fn incast_times_out_only_flows_whose_windows_do_not_fit() {
        let incast = IncastConfig::default();
        assert!(incast.validate().is_ok());
        // 128 KiB holds 45 two-segment windows: no timeouts up to 45 flows.
        assert_eq!(incast.timeout_probability(1), 0.0);
        assert_eq!(incast.timeout_probability(45), 0.0);
        let at_46 = incast.timeout_probability(46);
        assert!(at_46 > 0.0 && at_46 < 0.02, "{at_46}");
        // 128 flows: 65% of the minimal windows do not fit.
        let at_128 = incast.timeout_probability(128);
        assert!((at_128 - (1.0 - 131_072.0 / (128.0 * 2896.0))).abs() < 1e-12);
        assert!(at_46 < at_128 && at_128 < 1.0);
        let e = IncastConfig {
            port_buffer_bytes: 0,
            ..incast
        }
        .validate()
        .unwrap_err();
        assert_eq!(e.key, "port_buffer_bytes");
        let e = IncastConfig {
            retransmit_timeout: Duration::from_secs(3600),
            ..incast
        }
        .validate()
        .unwrap_err();
        assert_eq!(e.key, "retransmit_timeout");
    }

    #[test]
    fn config_validation_names_the_key() {
        let base = LinkConfig::default();
        assert!(base.validate().is_ok());
        let e = LinkConfig {
            bytes_per_s: -1.0,
            ..base
        }
        .validate()
        .unwrap_err();
        assert_eq!(e.key, "bytes_per_s");
        let e = Link::new(LinkConfig {
            latency: Duration::from_secs(3600),
            ..base
        })
        .unwrap_err();
        assert_eq!(e.key, "latency");
        assert!(e.to_string().contains("`latency`"), "{e}");
    }
}
