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
//! [`SharedLink`] is the same link with its bandwidth shared equally by
//! every transfer in flight (processor sharing, the fair share TCP flows
//! converge to on one port) instead of serialized first come first served.
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

/// A link whose bandwidth every transfer in flight shares equally
/// (processor sharing): with `n` transfers each sends at `bandwidth / n`,
/// so a transfer entering a busy link slows the others down instead of
/// waiting behind them. A transfer arrives `latency` after its last byte,
/// as on [`Link`]. The owner calls [`SharedLink::advance`] at
/// [`SharedLink::next_finish`] (and may at any other time) to learn which
/// transfers finished.
///
/// Invariants: every transfer in flight has bytes left; `updated` never
/// moves backwards; transfers finish in the order of their bytes left,
/// so of two equal transfers the one that entered first finishes first.
#[derive(Clone, Debug)]
pub struct SharedLink {
    config: LinkConfig,
    /// Transfers in flight, in the order they entered: id and bytes left.
    active: Vec<(u64, f64)>,
    /// When `active` was last brought up to date.
    updated: Time,
}

impl SharedLink {
    /// An idle link.
    pub fn new(config: LinkConfig) -> Result<SharedLink, DeviceConfigError> {
        config.validate()?;
        Ok(SharedLink {
            config,
            active: Vec::new(),
            updated: Time::ZERO,
        })
    }

    /// Transfers in flight.
    pub fn in_flight(&self) -> usize {
        self.active.len()
    }

    /// Transfer `id` of `bytes` enters the link at `now` (not before the
    /// last call). Returns the transfers that finished sending by `now`
    /// ([`SharedLink::advance`]).
    pub fn start(&mut self, now: Time, id: u64, bytes: u64) -> Vec<(u64, Time)> {
        let done = self.advance(now);
        // A zero-byte transfer still enters, and finishes at once.
        self.active.push((id, bytes as f64));
        done
    }

    /// When the next transfer finishes sending at the present share, if
    /// any is in flight.
    pub fn next_finish(&self) -> Option<Time> {
        self.least_left().map(|least| self.finish_after(least))
    }

    /// Bytes left of the transfer in flight closest to its end.
    fn least_left(&self) -> Option<f64> {
        self.active.iter().map(|&(_, left)| left).reduce(f64::min)
    }

    /// Bring the link up to `now` (not before the last call): every
    /// transfer gets its share of the time since. Returns the transfers
    /// that finished sending by `now`, each with its arrival time (end of
    /// sending plus latency), in the order they finished (entry order among
    /// ties).
    pub fn advance(&mut self, now: Time) -> Vec<(u64, Time)> {
        let mut done = Vec::new();
        while let Some(least) = self.least_left() {
            let finish = self.finish_after(least);
            if finish > now {
                break;
            }
            // Everyone sent as many bytes as the smallest had left.
            self.updated = finish;
            let arrival = finish.saturating_add(self.config.latency);
            self.active.retain_mut(|(id, left)| {
                *left -= least;
                if *left <= FINISHED_BYTES {
                    done.push((*id, arrival));
                    false
                } else {
                    true
                }
            });
        }
        if !self.active.is_empty() && now > self.updated {
            let share = self.config.bytes_per_s / self.active.len() as f64;
            let sent = now.saturating_since(self.updated).as_secs_f64() * share;
            for (_, left) in &mut self.active {
                // Never to zero: a transfer finishes at `next_finish`.
                *left = (*left - sent).max(FINISHED_BYTES * 2.0);
            }
        }
        self.updated = self.updated.max(now);
        done
    }

    /// When a transfer with `left` bytes finishes at the present share.
    fn finish_after(&self, left: f64) -> Time {
        let share = self.config.bytes_per_s / self.active.len() as f64;
        self.updated
            .saturating_add(duration_from_secs(left / share))
    }
}

/// Bytes left below which a shared transfer counts as finished (equal
/// transfers differ by float rounding).
const FINISHED_BYTES: f64 = 1e-3;

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
    fn shared_link_splits_the_bandwidth_and_keeps_equal_transfers_in_order() {
        let mut link = SharedLink::new(LinkConfig {
            bytes_per_s: 100e6,
            latency: Duration::from_micros(50),
        })
        .unwrap();
        assert_eq!(link.next_finish(), None);
        // Alone, 1 MB takes 10 ms.
        assert!(link.start(Time::ZERO, 1, 1_000_000).is_empty());
        assert_eq!(link.next_finish(), Some(at_us(10_000)));
        // A second 1 MB at 5 ms: the first has 0.5 MB left at half speed.
        assert!(link.start(at_us(5_000), 2, 1_000_000).is_empty());
        assert_eq!(link.next_finish(), Some(at_us(15_000)));
        assert_eq!(link.advance(at_us(15_000)), vec![(1, at_us(15_050))]);
        // The second had 0.5 MB left, now alone: 5 ms more.
        assert_eq!(link.next_finish(), Some(at_us(20_000)));
        assert!(link.advance(at_us(19_000)).is_empty());
        assert_eq!(link.advance(at_us(20_000)), vec![(2, at_us(20_050))]);
        assert_eq!(link.in_flight(), 0);
        // Equal transfers entering together finish together, in entry order.
        for id in 3..6 {
            link.start(at_us(30_000), id, 1_000_000);
        }
        let done = link.advance(at_us(60_000));
        assert_eq!(done.iter().map(|d| d.0).collect::<Vec<_>>(), vec![3, 4, 5]);
        assert!(done.iter().all(|d| d.1 == at_us(60_050)), "{done:?}");
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
