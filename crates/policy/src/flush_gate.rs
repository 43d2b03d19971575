//! Traffic-aware flush gate (DESIGN §4.5).
//!
//! Flushing a full region writes to the capacity tier, and so competes with
//! foreground writes the redirector sends there. The gate lets flushing
//! proceed only while it does not hurt them:
//! - while the redirector routes foreground writes to the fast tier, the
//!   capacity tier is quiet ([`FlushReason::FastTierTraffic`]);
//! - or while no foreground write has reached the capacity tier for
//!   `flush_idle` ([`FlushReason::CapacityIdle`]);
//!
//! and pauses otherwise. With `hold_while_writing` (sluice's default, not
//! the paper's) the traffic rules are replaced by one: flush once no
//! foreground write *of either tier* came for `flush_idle`
//! ([`FlushReason::Quiet`]), so a burst is absorbed whole and its regions
//! flush together, merged, after it. A starvation guard overrides the
//! traffic rules: when
//! no empty region is left (the next writer would wait) or while draining or
//! unmounting, it flushes regardless. The precedence, first match wins, is
//! `Draining`, `NoEmptyRegion`, `FastTierTraffic`, `CapacityIdle`.
//!
//! The gate only decides; the engine asks [`FlushGate::poll`] before each
//! flush step and, on [`GateDecision::Pause`], asks again at `recheck_at` or
//! on the next event. Before the redirector reports a route, the gate assumes
//! writes go to the capacity tier (the redirector's first stream does).
//!
//! INVARIANT: the last capacity write time only moves forward, so the idle
//! clock never restarts from an older write reported late (several engine
//! threads may take their timestamps before reaching the gate, so events can
//! arrive slightly out of order; that is tolerated, not asserted).

use core::fmt;
use core::time::Duration;

use crate::{Tier, Time};

/// Default `flush_idle`: capacity-tier quiet time after which flushing may
/// proceed even though the redirector routes to the capacity tier.
pub const FLUSH_IDLE_DEFAULT: Duration = Duration::from_millis(200);

/// Configuration of the flush gate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FlushGateConfig {
    /// How long the capacity tier must go without a foreground write before
    /// flushing may use it. [`Duration::MAX`] turns the idle rule off.
    pub flush_idle: Duration,
    /// Bytes buffered longer than this are flushed when the gate allows,
    /// even from a region that is not full (it is closed first; see
    /// [`crate::write_buffer::WriteBuffer::poll_flush`]). `None`: only full
    /// regions flush (the papers' pipeline).
    pub flush_age: Option<Duration>,
    /// Hold flushing while foreground writes arrive (to either tier) and an
    /// empty region remains; see the module docs. `false`: the papers'
    /// rules.
    pub hold_while_writing: bool,
}

impl Default for FlushGateConfig {
    fn default() -> FlushGateConfig {
        FlushGateConfig {
            flush_idle: FLUSH_IDLE_DEFAULT,
            flush_age: None,
            hold_while_writing: false,
        }
    }
}

/// Why the gate lets a flush proceed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FlushReason {
    /// A drain or unmount is in progress: flush regardless of traffic.
    Draining,
    /// Starvation guard: no empty region is left, so writers would soon wait.
    NoEmptyRegion,
    /// The redirector routes foreground writes to the fast tier, so the
    /// capacity tier is quiet.
    FastTierTraffic,
    /// No foreground write reached the capacity tier for `flush_idle`.
    CapacityIdle,
    /// `hold_while_writing`: no foreground write at all for `flush_idle`.
    Quiet,
}

impl FlushReason {
    /// Lower-case name used in reports and metrics labels.
    pub fn name(self) -> &'static str {
        match self {
            FlushReason::Draining => "draining",
            FlushReason::NoEmptyRegion => "no_empty_region",
            FlushReason::FastTierTraffic => "fast_tier_traffic",
            FlushReason::CapacityIdle => "capacity_idle",
            FlushReason::Quiet => "quiet",
        }
    }
}

impl fmt::Display for FlushReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Answer of [`FlushGate::poll`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GateDecision {
    /// Flushing may proceed.
    Flush(FlushReason),
    /// Hold flushing back.
    Pause {
        /// When the idle rule could next allow a flush (last capacity write +
        /// `flush_idle`), if no other event comes first; `None` when the idle
        /// rule never fires (`flush_idle` reaches past the end of time). Any
        /// route change, drain or region becoming full is a reason to poll
        /// earlier.
        recheck_at: Option<Time>,
    },
}

/// The traffic-aware flush gate; see the module docs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlushGate {
    config: FlushGateConfig,
    route: Tier,
    last_capacity_write: Option<Time>,
    /// The latest foreground write to either tier.
    last_write: Option<Time>,
    draining: bool,
    /// When `route` last changed (epoch before any report).
    route_since: Time,
}

impl FlushGate {
    /// A gate that has seen no traffic yet and assumes capacity routing.
    pub fn new(config: FlushGateConfig) -> FlushGate {
        FlushGate {
            config,
            route: Tier::Capacity,
            last_capacity_write: None,
            last_write: None,
            draining: false,
            route_since: Time::ZERO,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &FlushGateConfig {
        &self.config
    }

    /// The redirector now routes foreground writes to `tier`.
    pub fn handle_route(&mut self, now: Time, tier: Tier) {
        if tier != self.route {
            self.route = tier;
            self.route_since = now;
        }
    }

    /// A foreground write just went to the capacity tier.
    pub fn handle_capacity_write(&mut self, now: Time) {
        // max: a write reported late must not move the idle clock back.
        self.last_capacity_write = Some(later(self.last_capacity_write, now));
        self.last_write = Some(later(self.last_write, now));
    }

    /// A foreground write just went to the fast tier's log.
    pub fn handle_fast_write(&mut self, now: Time) {
        self.last_write = Some(later(self.last_write, now));
    }

    /// Starts (`true`) or ends (`false`) a drain or unmount.
    pub fn set_draining(&mut self, draining: bool) {
        self.draining = draining;
    }

    /// Whether a drain or unmount is in progress.
    pub fn is_draining(&self) -> bool {
        self.draining
    }

    /// The route last reported by the redirector ([`Tier::Capacity`] before
    /// any report).
    pub fn route(&self) -> Tier {
        self.route
    }

    /// When the route last changed ([`Time::ZERO`] before any change).
    pub fn route_since(&self) -> Time {
        self.route_since
    }

    /// Time of the latest foreground capacity write, if any.
    pub fn last_capacity_write(&self) -> Option<Time> {
        self.last_capacity_write
    }

    /// Whether flushing may proceed at `now`. `has_empty_region` comes from
    /// the region pipeline ([`crate::pipeline::RegionPipeline::has_empty`]).
    pub fn poll(&self, now: Time, has_empty_region: bool) -> GateDecision {
        if self.draining {
            return GateDecision::Flush(FlushReason::Draining);
        }
        if !has_empty_region {
            return GateDecision::Flush(FlushReason::NoEmptyRegion);
        }
        if self.config.hold_while_writing {
            return self.idle_since(now, self.last_write, FlushReason::Quiet);
        }
        if self.route == Tier::Fast {
            return GateDecision::Flush(FlushReason::FastTierTraffic);
        }
        self.idle_since(now, self.last_capacity_write, FlushReason::CapacityIdle)
    }

    /// Whether the capacity tier is idle at `now`: no foreground write
    /// reached it for `idle` (or a drain runs). For work that uses it only
    /// while nothing else does, whatever the regions and the route:
    /// close-to-open's background write-back (docs/engine.md,
    /// "Write-back").
    pub fn capacity_idle(&self, now: Time, idle: Duration) -> GateDecision {
        if self.draining {
            return GateDecision::Flush(FlushReason::Draining);
        }
        idle_since(
            now,
            self.last_capacity_write,
            idle,
            FlushReason::CapacityIdle,
        )
    }

    /// Flush for `reason` once `flush_idle` has passed since `last`.
    fn idle_since(&self, now: Time, last: Option<Time>, reason: FlushReason) -> GateDecision {
        idle_since(now, last, self.config.flush_idle, reason)
    }
}

/// Go ahead for `reason` once `idle` has passed since `last`.
fn idle_since(now: Time, last: Option<Time>, idle: Duration, reason: FlushReason) -> GateDecision {
    let Some(last) = last else {
        return GateDecision::Flush(reason);
    };
    if now.saturating_since(last) >= idle {
        return GateDecision::Flush(reason);
    }
    let recheck_at = last.saturating_add(idle);
    GateDecision::Pause {
        // Saturated at the end of time: the idle rule can never fire.
        recheck_at: (recheck_at != Time::from_nanos(u64::MAX)).then_some(recheck_at),
    }
}

/// `last` moved to `now` unless it is later already.
fn later(last: Option<Time>, now: Time) -> Time {
    last.map_or(now, |last| last.max(now))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gate() -> FlushGate {
        FlushGate::new(FlushGateConfig::default())
    }

    fn ms(millis: u64) -> Time {
        Time::from_millis(millis)
    }

    #[test]
    fn default_flush_idle_is_200_ms() {
        assert_eq!(
            FlushGateConfig::default().flush_idle,
            Duration::from_millis(200)
        );
    }

    #[test]
    fn before_any_traffic_capacity_is_idle() {
        let g = gate();
        assert_eq!(g.route(), Tier::Capacity);
        assert_eq!(
            g.poll(ms(0), true),
            GateDecision::Flush(FlushReason::CapacityIdle)
        );
    }

    #[test]
    fn capacity_writes_pause_flushing_until_idle() {
        let mut g = gate();
        g.handle_capacity_write(ms(100));
        let pause = GateDecision::Pause {
            recheck_at: Some(ms(300)),
        };
        assert_eq!(g.poll(ms(100), true), pause);
        assert_eq!(g.poll(Time::from_nanos(300 * 1_000_000 - 1), true), pause);
        assert_eq!(
            g.poll(ms(300), true),
            GateDecision::Flush(FlushReason::CapacityIdle)
        );
        // A new write restarts the idle clock.
        g.handle_capacity_write(ms(350));
        assert_eq!(
            g.poll(ms(400), true),
            GateDecision::Pause {
                recheck_at: Some(ms(550))
            }
        );
    }

    #[test]
    fn late_capacity_write_does_not_move_idle_clock_back() {
        let mut g = gate();
        g.handle_capacity_write(ms(100));
        g.handle_capacity_write(ms(90));
        assert_eq!(g.last_capacity_write(), Some(ms(100)));
        assert_eq!(
            g.poll(ms(295), true),
            GateDecision::Pause {
                recheck_at: Some(ms(300))
            }
        );
    }

    #[test]
    fn fast_route_allows_flushing_despite_recent_capacity_writes() {
        let mut g = gate();
        g.handle_capacity_write(ms(10));
        g.handle_route(ms(10), Tier::Fast);
        assert_eq!(g.route_since(), ms(10));
        g.handle_route(ms(11), Tier::Fast);
        assert_eq!(g.route_since(), ms(10), "a repeated route is no change");
        assert_eq!(
            g.poll(ms(11), true),
            GateDecision::Flush(FlushReason::FastTierTraffic)
        );
        g.handle_route(ms(12), Tier::Capacity);
        assert_eq!(
            g.poll(ms(12), true),
            GateDecision::Pause {
                recheck_at: Some(ms(210))
            }
        );
    }

    #[test]
    fn precedence() {
        let mut g = gate();
        g.handle_route(ms(0), Tier::Fast);
        g.handle_capacity_write(ms(0));
        // Every rule allows a flush; the first in precedence order is reported.
        g.set_draining(true);
        assert!(g.is_draining());
        assert_eq!(
            g.poll(ms(0), false),
            GateDecision::Flush(FlushReason::Draining)
        );
        g.set_draining(false);
        assert_eq!(
            g.poll(ms(0), false),
            GateDecision::Flush(FlushReason::NoEmptyRegion)
        );
        assert_eq!(
            g.poll(ms(0), true),
            GateDecision::Flush(FlushReason::FastTierTraffic)
        );
        g.handle_route(ms(0), Tier::Capacity);
        assert_eq!(
            g.poll(ms(200), true),
            GateDecision::Flush(FlushReason::CapacityIdle)
        );
    }

    #[test]
    fn starvation_guard_and_drain_override_capacity_traffic() {
        let mut g = gate();
        g.handle_capacity_write(ms(5));
        assert!(matches!(g.poll(ms(5), true), GateDecision::Pause { .. }));
        assert_eq!(
            g.poll(ms(5), false),
            GateDecision::Flush(FlushReason::NoEmptyRegion)
        );
        g.set_draining(true);
        assert_eq!(
            g.poll(ms(5), true),
            GateDecision::Flush(FlushReason::Draining)
        );
    }

    #[test]
    fn idle_rule_off_pauses_without_recheck_time() {
        let mut g = FlushGate::new(FlushGateConfig {
            flush_age: None,
            hold_while_writing: false,
            flush_idle: Duration::MAX,
        });
        g.handle_capacity_write(ms(1));
        assert_eq!(
            g.poll(ms(1_000_000), true),
            GateDecision::Pause { recheck_at: None }
        );
        assert_eq!(
            g.poll(ms(1), false),
            GateDecision::Flush(FlushReason::NoEmptyRegion)
        );
    }

    #[test]
    fn zero_flush_idle_flushes_right_after_a_write() {
        let mut g = FlushGate::new(FlushGateConfig {
            flush_age: None,
            hold_while_writing: false,
            flush_idle: Duration::ZERO,
        });
        g.handle_capacity_write(ms(1));
        assert_eq!(
            g.poll(ms(1), true),
            GateDecision::Flush(FlushReason::CapacityIdle)
        );
    }

    #[test]
    fn reason_names() {
        assert_eq!(FlushReason::NoEmptyRegion.to_string(), "no_empty_region");
        assert_eq!(FlushReason::CapacityIdle.name(), "capacity_idle");
    }
}

#[cfg(test)]
mod hold_tests {
    use super::*;

    /// With `hold_while_writing`, writes to the fast tier hold flushing
    /// back too (SSDUP+ would flush: the capacity tier is idle), until no
    /// write came for `flush_idle`; the starvation guard still wins.
    #[test]
    fn holding_waits_for_quiet_of_both_tiers() {
        let mut g = FlushGate::new(FlushGateConfig {
            hold_while_writing: true,
            ..FlushGateConfig::default()
        });
        let ms = Time::from_millis;
        assert_eq!(g.poll(ms(0), true), GateDecision::Flush(FlushReason::Quiet));
        g.handle_route(ms(0), Tier::Fast);
        g.handle_fast_write(ms(100));
        assert_eq!(
            g.poll(ms(150), true),
            GateDecision::Pause {
                recheck_at: Some(ms(300))
            }
        );
        assert_eq!(
            g.poll(ms(150), false),
            GateDecision::Flush(FlushReason::NoEmptyRegion)
        );
        g.handle_capacity_write(ms(250));
        assert!(matches!(g.poll(ms(300), true), GateDecision::Pause { .. }));
        assert_eq!(
            g.poll(ms(450), true),
            GateDecision::Flush(FlushReason::Quiet)
        );
    }

    #[test]
    fn capacity_idle_ignores_fast_tier_traffic_and_holding() {
        let mut g = FlushGate::new(FlushGateConfig {
            hold_while_writing: true,
            ..FlushGateConfig::default()
        });
        g.handle_fast_write(Time::from_millis(0));
        g.handle_capacity_write(Time::from_millis(100));
        assert_eq!(
            g.capacity_idle(Time::from_millis(250), FLUSH_IDLE_DEFAULT),
            GateDecision::Pause {
                recheck_at: Some(Time::from_millis(300))
            }
        );
        // Fast-tier writes go on; the capacity tier is idle all the same.
        g.handle_fast_write(Time::from_millis(299));
        assert_eq!(
            g.capacity_idle(Time::from_millis(300), FLUSH_IDLE_DEFAULT),
            GateDecision::Flush(FlushReason::CapacityIdle)
        );
        g.set_draining(true);
        assert_eq!(
            g.capacity_idle(Time::from_millis(100), FLUSH_IDLE_DEFAULT),
            GateDecision::Flush(FlushReason::Draining)
        );
    }
}
