//! BBOS (seed 004; DESIGN §6): the checkpoint-aware policies of an
//! over-subscribed burst buffer.
//!
//! * [`Bandwidths`] holds the device trade-off of Eq. 1: a checkpoint write
//!   and a demotion share the fast tier, so while demoting at `BW_r` the
//!   writes get `BW_w = m·BW_r + b` (m < 0), the line through
//!   (Brmin, Bwmax) and (Brmax, Bwmin). With the fast tier idle, demotion
//!   runs at Bdmax.
//! * [`Plan`] solves Eq. 2 in closed form for one planner period: given the
//!   predicted data written per period (DWPP) and the capacity `S`, the
//!   excess `C = DWPP − S` must be demoted while checkpoints are written.
//!   Pattern 1 (C ≤ 0) never demotes under writes; pattern 2 writes at
//!   Bwmax for `t_c`, then ramps writes down to Bwmin and demotion up to
//!   Brmax over `t_dd`; pattern 3 ramps from the start (`t_c = 0`) and holds
//!   (Bwmin, Brmax) for `t_ds`. [`Plan::rates`] turns it into the throttle
//!   schedule: the write and demotion rates as a function of the data written
//!   so far in the period (DWSF). The ramp is linear in *write time*, as in
//!   the paper's integrals, so the schedule maps DWSF back to time by
//!   solving the quadratic.
//! * [`Scheme`] selects BBOS or a baseline: Harmonia MaxBW (never demote
//!   under writes), Harmonia MaxEff (always demote at Brmax under writes),
//!   dedicated allocation (DataWarp: no over-subscription, no I/O
//!   scheduling) and the static 90 % threshold of the paper's Fig. 1/2.
//! * [`DwppTracker`] keeps DWSF for the current period and the DWPP of past
//!   periods, and predicts the next DWPP (mean of the last `window` periods,
//!   or the registered jobs' expectation before any history; never below
//!   the current DWSF).
//! * [`Planner`] ties the tracker to the scheme's plan and re-plans at each
//!   period and whenever DWSF outgrows the prediction.
//! * [`IoScheduler`]: one queue per job and fast-tier device; one job's I/O
//!   runs at a time per device, jobs admitted in arrival order.
//! * [`cold_order`] ranks resident checkpoints for demotion and eviction
//!   (BBOS: superseded versions first, oldest first; then the latest
//!   versions by *lowest* failure rate; or LRU / FIFO), and
//!   [`direct_to_capacity`] decides whether an incoming checkpoint is cold
//!   enough to bypass the fast tier.
//!
//! On "failure rate": DESIGN §6 and the issue say deleters evict "older
//! versions first, then highest failure rate". The paper's own account
//! (§II-C, §VI-D, Fig. 9: "a single version checkpoint with high MTBF can be
//! selected as cold data") keeps the checkpoints most likely to be read for a
//! restart, which are those of the jobs that fail most often. sluice follows
//! the paper: after superseded versions, the checkpoint with the lowest
//! failure rate (highest MTBF) is the coldest. docs/decisions.md records it.
//!
//! Floating point: plans are in bytes and seconds as `f64`; the crate is
//! `no_std`, so the one square root is a Newton iteration.
//!
//! INVARIANTS: a valid [`Bandwidths`] has `write_max ≥ write_min > 0`,
//! `demote_max ≥ demote_min ≥ 0`, `demote_max > 0`, `idle_demote > 0`;
//! plan times are ≥ 0; [`Plan::rates`] stays on the Eq. 1 line and is
//! monotone in DWSF (writes never speed up, demotion never slows down within
//! a period); the scheduler runs at most one job per device.

use alloc::collections::{BTreeMap, VecDeque};
use alloc::vec::Vec;
use core::cmp::Ordering;
use core::fmt;
use core::time::Duration;

use crate::Time;

mod admission;
mod eviction;
mod placement;

pub use admission::*;
pub use eviction::*;
pub use placement::*;

/// A BBOS parameter was out of range.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BbosError(pub &'static str);

impl fmt::Display for BbosError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

/// The fast tier's bandwidths, bytes per second (Eq. 1 and Eq. 3).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bandwidths {
    /// Bwmax: checkpoint writes with no demotion beside them.
    pub write_max: f64,
    /// Bwmin: checkpoint writes while demoting at `demote_max`.
    pub write_min: f64,
    /// Brmax: the fastest demotion (the capacity tier's write bandwidth).
    pub demote_max: f64,
    /// Brmin: demotion while writing at `write_max`.
    pub demote_min: f64,
    /// Bdmax: demotion while no checkpoint is written.
    pub idle_demote: f64,
}

impl Bandwidths {
    /// The paper's testbed (§VI-A), GB/s as bytes/s (10⁹); Bdmax is taken
    /// as Brmax, the capacity tier being the bound.
    pub const PAPER: Bandwidths = Bandwidths {
        write_max: 3.56e9,
        write_min: 3.0e9,
        demote_max: 1.6e9,
        demote_min: 0.08e9,
        idle_demote: 1.6e9,
    };

    /// Checks the invariants in the module docs.
    pub fn check(&self) -> Result<(), BbosError> {
        let all = [
            self.write_max,
            self.write_min,
            self.demote_max,
            self.demote_min,
            self.idle_demote,
        ];
        if all.iter().any(|v| !v.is_finite()) {
            return Err(BbosError("bandwidths must be finite"));
        }
        if !(self.write_min > 0.0 && self.write_max >= self.write_min) {
            return Err(BbosError("need write_max >= write_min > 0"));
        }
        if !(self.demote_max > 0.0 && self.demote_min >= 0.0 && self.demote_max >= self.demote_min)
        {
            return Err(BbosError(
                "need demote_max >= demote_min >= 0 and demote_max > 0",
            ));
        }
        if self.idle_demote <= 0.0 {
            return Err(BbosError("need idle_demote > 0"));
        }
        Ok(())
    }

    /// Eq. 1: the write bandwidth left while demoting at `demote` (clamped
    /// to [Brmin, Brmax]).
    pub fn write_for_demote(&self, demote: f64) -> f64 {
        let span = self.demote_max - self.demote_min;
        if span <= 0.0 {
            return self.write_min;
        }
        let f = ((demote - self.demote_min) / span).clamp(0.0, 1.0);
        self.write_max - f * (self.write_max - self.write_min)
    }

    /// The largest DWPP any scheme that demotes under writes can serve with
    /// capacity `s`: `S / (1 − Brmax/Bwmin)`; `None` when demotion keeps up
    /// with writes (Brmax ≥ Bwmin), so capacity sets no bound.
    pub fn max_dwpp(&self, s: f64) -> Option<f64> {
        let keep = 1.0 - self.demote_max / self.write_min;
        (keep > 0.0).then(|| s / keep)
    }
}

/// Which data-management scheme runs the fast tier.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scheme {
    /// BBOS: the DWPP planner of Eq. 2.
    Bbos,
    /// Harmonia MaxBW: demotion only while no checkpoint is written; a job
    /// waits before it starts until its checkpoint fits.
    MaxBw,
    /// Harmonia MaxEff: demotion always at Brmax, writes at Bwmin beside it.
    MaxEff,
    /// Dedicated allocation (DataWarp): capacity granted per job lifetime,
    /// never more than `S` in all; no I/O scheduling; demotion while idle.
    DataWarp,
    /// A static threshold (the paper's Fig. 1/2 at 90): demotion at Brmax
    /// under writes once the fast tier is this percent full, otherwise only
    /// while idle; no I/O scheduling.
    Static {
        /// Fill percentage that starts demotion under writes.
        percent: u8,
    },
}

impl Scheme {
    /// The name used in reports and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Scheme::Bbos => "BBOS",
            Scheme::MaxBw => "MaxBW",
            Scheme::MaxEff => "MaxEff",
            Scheme::DataWarp => "DataWarp",
            Scheme::Static { .. } => "Static",
        }
    }

    /// Whether checkpoint jobs go through the per-job [`IoScheduler`].
    pub fn schedules_io(self) -> bool {
        matches!(self, Scheme::Bbos | Scheme::MaxBw | Scheme::MaxEff)
    }

    /// Whether the capacity granted per period may exceed `S`.
    pub fn oversubscribes(self) -> bool {
        !matches!(self, Scheme::DataWarp)
    }

    /// Whether a job waits, before it starts writing, until its whole
    /// checkpoint fits on the fast tier (MaxBW's "stop" before execution).
    pub fn reserves_before_start(self) -> bool {
        matches!(self, Scheme::MaxBw)
    }
}

/// Which of the paper's three demotion patterns a plan follows (Fig. 3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pattern {
    /// Pattern 1: no demotion under writes (C ≤ 0, or MaxBW / DataWarp).
    IdleOnly,
    /// Pattern 2: Bwmax for `t_c`, then the ramp.
    Ramp,
    /// Pattern 3: the ramp from the start, then (Bwmin, Brmax).
    Saturated,
    /// A fixed fill threshold (the static baseline): rates depend on the
    /// fast tier's fill, not on DWSF.
    Threshold,
}

/// Write and demotion rates, bytes per second, while checkpoints are
/// written.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rates {
    /// Cap on checkpoint writes.
    pub write: f64,
    /// Demotion rate beside them (0: none).
    pub demote: f64,
}

/// One period's plan; see the module docs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Plan {
    /// The scheme it was made for.
    pub scheme: Scheme,
    /// Which pattern.
    pub pattern: Pattern,
    /// The DWPP planned for, bytes.
    pub dwpp: f64,
    /// `S`, bytes.
    pub capacity: f64,
    /// Seconds of writing at Bwmax before the ramp.
    pub t_c: f64,
    /// Seconds of the ramp.
    pub t_dd: f64,
    /// Seconds at (Bwmin, Brmax) after the ramp.
    pub t_ds: f64,
    /// Bytes demoted while writing, per the plan.
    pub demoted_under_writes: f64,
    /// Eq. 3 holds (what is left after writing can be demoted before the
    /// period ends) and the capacity bound is met.
    pub feasible: bool,
    bw: Bandwidths,
}

impl Plan {
    /// The plan of `scheme` for one period of `period_s` seconds in which
    /// `dwpp` bytes will be written to a fast tier of `capacity` bytes.
    pub fn new(
        scheme: Scheme,
        bw: Bandwidths,
        capacity: f64,
        dwpp: f64,
        period_s: f64,
    ) -> Result<Plan, BbosError> {
        bw.check()?;
        if !(capacity.is_finite() && capacity > 0.0) {
            return Err(BbosError("capacity must be > 0"));
        }
        if !(dwpp.is_finite() && dwpp >= 0.0) {
            return Err(BbosError("dwpp must be >= 0"));
        }
        if !(period_s.is_finite() && period_s > 0.0) {
            return Err(BbosError("period must be > 0"));
        }
        let mut plan = Plan {
            scheme,
            pattern: Pattern::IdleOnly,
            dwpp,
            capacity,
            t_c: dwpp / bw.write_max,
            t_dd: 0.0,
            t_ds: 0.0,
            demoted_under_writes: 0.0,
            feasible: true,
            bw,
        };
        match scheme {
            Scheme::MaxBw | Scheme::DataWarp => {}
            Scheme::Static { .. } => plan.pattern = Pattern::Threshold,
            Scheme::MaxEff => plan.saturate(),
            Scheme::Bbos => plan.solve(),
        }
        let written_s = plan.t_c + plan.t_dd + plan.t_ds;
        let left = dwpp - plan.demoted_under_writes;
        let in_time = (period_s - written_s) * bw.idle_demote >= left - 1e-6 * left.max(1.0);
        // MaxBW and the static threshold stop writes while the tier is
        // full and demote, so only time bounds them; the others must keep
        // what is left after writing within S.
        let fits = match scheme {
            Scheme::DataWarp => dwpp <= capacity,
            Scheme::MaxBw | Scheme::Static { .. } => true,
            Scheme::Bbos | Scheme::MaxEff => left <= capacity * (1.0 + 1e-9),
        };
        plan.feasible = in_time && fits;
        Ok(plan)
    }

    /// (Bwmin, Brmax) from the start: MaxEff, and BBOS beyond its bound.
    fn saturate(&mut self) {
        self.pattern = Pattern::Saturated;
        self.t_c = 0.0;
        self.t_dd = 0.0;
        self.t_ds = self.dwpp / self.bw.write_min;
        self.demoted_under_writes = self.t_ds * self.bw.demote_max;
    }

    /// Eq. 2 in closed form.
    fn solve(&mut self) {
        let bw = self.bw;
        let c = self.dwpp - self.capacity;
        if c <= 0.0 {
            return; // pattern 1
        }
        let w_ramp = (bw.write_max + bw.write_min) / 2.0;
        let r_ramp = (bw.demote_max + bw.demote_min) / 2.0;
        // Pattern 2: Bwmax·t_c + w_ramp·t_dd = DWPP; Brmin·t_c + r_ramp·t_dd = C.
        if let Some((t_c, t_dd)) = solve2(bw.write_max, w_ramp, bw.demote_min, r_ramp, self.dwpp, c)
        {
            if t_c >= 0.0 && t_dd >= 0.0 {
                self.pattern = Pattern::Ramp;
                self.t_c = t_c;
                self.t_dd = t_dd;
                self.demoted_under_writes = c;
                return;
            }
        }
        // Pattern 3: w_ramp·t_dd + Bwmin·t_ds = DWPP; r_ramp·t_dd + Brmax·t_ds = C.
        if let Some((t_dd, t_ds)) =
            solve2(w_ramp, bw.write_min, r_ramp, bw.demote_max, self.dwpp, c)
        {
            if t_dd >= 0.0 && t_ds >= 0.0 {
                self.pattern = Pattern::Saturated;
                self.t_c = 0.0;
                self.t_dd = t_dd;
                self.t_ds = t_ds;
                self.demoted_under_writes = c;
                return;
            }
        }
        // Beyond S / (1 − Brmax/Bwmin): demote at Brmax from the start;
        // the plan is infeasible (the capacity bound fails).
        self.saturate();
    }

    /// DWSF at which demotion under writes starts to ramp up (`Bwmax·t_c`);
    /// `None` if this plan never ramps.
    pub fn ramp_threshold(&self) -> Option<f64> {
        match self.pattern {
            Pattern::Ramp | Pattern::Saturated if self.t_dd > 0.0 => {
                Some(self.bw.write_max * self.t_c)
            }
            _ => None,
        }
    }

    /// DWSF at which demotion reaches Brmax; `None` if it never does.
    pub fn full_speed_threshold(&self) -> Option<f64> {
        match self.pattern {
            Pattern::Ramp | Pattern::Saturated => Some(
                self.bw.write_max * self.t_c
                    + (self.bw.write_max + self.bw.write_min) / 2.0 * self.t_dd,
            ),
            _ => None,
        }
    }

    /// The throttle schedule: write cap and demotion rate while checkpoints
    /// are written, with `dwsf` bytes written so far this period and `used`
    /// bytes on the fast tier (only the static threshold looks at `used`).
    pub fn rates(&self, dwsf: f64, used: f64) -> Rates {
        let bw = self.bw;
        let idle = Rates {
            write: bw.write_max,
            demote: 0.0,
        };
        let full = Rates {
            write: bw.write_min,
            demote: bw.demote_max,
        };
        match self.pattern {
            Pattern::IdleOnly => idle,
            Pattern::Threshold => {
                let percent = match self.scheme {
                    Scheme::Static { percent } => f64::from(percent),
                    _ => 100.0,
                };
                if used >= self.capacity * percent / 100.0 {
                    full
                } else {
                    idle
                }
            }
            Pattern::Ramp | Pattern::Saturated => {
                let start = bw.write_max * self.t_c;
                if dwsf < start {
                    return Rates {
                        write: bw.write_max,
                        demote: bw.demote_min,
                    };
                }
                if self.t_dd <= 0.0 {
                    return full;
                }
                // Bytes written τ seconds into the ramp:
                // Bwmax·τ − (Bwmax − Bwmin)·τ²/(2·t_dd).
                let y = dwsf - start;
                let a = (bw.write_max - bw.write_min) / (2.0 * self.t_dd);
                let tau = if a <= 0.0 {
                    y / bw.write_max
                } else {
                    let disc = bw.write_max * bw.write_max - 4.0 * a * y;
                    if disc <= 0.0 {
                        self.t_dd
                    } else {
                        (bw.write_max - sqrt(disc)) / (2.0 * a)
                    }
                };
                let f = (tau / self.t_dd).clamp(0.0, 1.0);
                Rates {
                    write: bw.write_max - f * (bw.write_max - bw.write_min),
                    demote: bw.demote_min + f * (bw.demote_max - bw.demote_min),
                }
            }
        }
    }
}

/// Cramer's rule for `a·x + b·y = e`, `c·x + d·y = f`.
fn solve2(a: f64, b: f64, c: f64, d: f64, e: f64, f: f64) -> Option<(f64, f64)> {
    let det = a * d - b * c;
    if det.abs() < 1e-12 * (a * d).abs().max((b * c).abs()).max(1e-300) {
        return None;
    }
    Some(((e * d - b * f) / det, (a * f - e * c) / det))
}

/// Square root by Newton's method (`no_std` has no `f64::sqrt`).
fn sqrt(x: f64) -> f64 {
    if x <= 0.0 || !x.is_finite() {
        return 0.0;
    }
    let mut r = if x > 1.0 { x / 2.0 } else { 1.0 };
    for _ in 0..200 {
        let next = 0.5 * (r + x / r);
        if (next - r).abs() <= 1e-15 * next {
            return next;
        }
        r = next;
    }
    r
}

/// The largest DWPP `scheme` serves in a period of `period_s` seconds with
/// capacity `s`: the supremum of feasible plans, found by bisection (the
/// plans are monotone in DWPP).
pub fn max_served_dwpp(scheme: Scheme, bw: Bandwidths, s: f64, period_s: f64) -> f64 {
    let feasible = |d: f64| Plan::new(scheme, bw, s, d, period_s).is_ok_and(|p| p.feasible);
    let (mut lo, mut hi) = (0.0, s);
    while feasible(hi) && hi < 1e6 * s {
        lo = hi;
        hi *= 2.0;
    }
    for _ in 0..100 {
        let mid = (lo + hi) / 2.0;
        if feasible(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}

/// DWSF and DWPP history; see the module docs.
#[derive(Clone, Debug)]
pub struct DwppTracker {
    period: Duration,
    window: usize,
    index: u64,
    dwsf: u64,
    history: VecDeque<u64>,
    prior: u64,
}

impl DwppTracker {
    /// A tracker of `period`-long periods (numbered from time zero),
    /// predicting from the last `window` closed periods; `prior` is the
    /// prediction before any period has closed.
    pub fn new(period: Duration, window: usize, prior: u64) -> Result<DwppTracker, BbosError> {
        if period.is_zero() {
            return Err(BbosError("planner period must be > 0"));
        }
        if window == 0 {
            return Err(BbosError("DWPP window must be >= 1"));
        }
        Ok(DwppTracker {
            period,
            window,
            index: 0,
            dwsf: 0,
            history: VecDeque::new(),
            prior,
        })
    }

    /// Restores history (oldest first), e.g. from the catalogue; keeps the
    /// last `window` values.
    pub fn restore(&mut self, index: u64, dwsf: u64, history: &[u64]) {
        self.index = index;
        self.dwsf = dwsf;
        self.history.clear();
        for &h in history.iter().rev().take(self.window).rev() {
            self.history.push_back(h);
        }
    }

    /// Sets the prediction used while there is no history.
    pub fn set_prior(&mut self, prior: u64) {
        self.prior = prior;
    }

    /// The period `now` falls in.
    pub fn period_of(&self, now: Time) -> u64 {
        let nanos = self.period.as_nanos().max(1);
        u64::try_from(u128::from(now.as_nanos()) / nanos).unwrap_or(u64::MAX)
    }

    /// Moves to the period of `now`, closing the ones passed. Returns the
    /// closed periods as `(index, DWPP)`; an idle gap longer than the window
    /// closes only its last `window` periods (with 0), which is all the
    /// history keeps. Time going backwards changes nothing.
    pub fn advance(&mut self, now: Time) -> Vec<(u64, u64)> {
        let target = self.period_of(now);
        let mut closed = Vec::new();
        while self.index < target {
            closed.push((self.index, self.dwsf));
            self.history.push_back(self.dwsf);
            if self.history.len() > self.window {
                self.history.pop_front();
            }
            self.dwsf = 0;
            self.index += 1;
            let window = self.window as u64;
            if target - self.index > window {
                self.index = target - window;
            }
        }
        closed
    }

    /// Counts `bytes` of checkpoint data written at `now`.
    pub fn handle_written(&mut self, now: Time, bytes: u64) -> Vec<(u64, u64)> {
        let closed = self.advance(now);
        self.dwsf = self.dwsf.saturating_add(bytes);
        closed
    }

    /// Data written so far in the current period.
    pub fn dwsf(&self) -> u64 {
        self.dwsf
    }

    /// The current period's index.
    pub fn index(&self) -> u64 {
        self.index
    }

    /// Closed periods' DWPP, oldest first (at most `window`).
    pub fn history(&self) -> impl Iterator<Item = u64> + '_ {
        self.history.iter().copied()
    }

    /// The predicted DWPP of the current period: the mean of the history
    /// (or the prior without one), never below DWSF.
    pub fn predict(&self) -> u64 {
        let base = if self.history.is_empty() {
            self.prior
        } else {
            let sum: u128 = self.history.iter().map(|&v| u128::from(v)).sum();
            (sum / self.history.len() as u128) as u64
        };
        base.max(self.dwsf)
    }
}

/// The expected DWPP of registered jobs: each writes `bytes` every `period`,
/// so over a planner period of `planner` it writes `bytes × planner/period`.
pub fn expected_dwpp(jobs: impl IntoIterator<Item = (u64, Duration)>, planner: Duration) -> u64 {
    let mut total: u128 = 0;
    for (bytes, period) in jobs {
        let p = period.as_nanos().max(1);
        total += u128::from(bytes) * planner.as_nanos() / p;
    }
    u64::try_from(total).unwrap_or(u64::MAX)
}

/// The tracker and the scheme's plan together: the throttle schedule for
/// the current period, re-planned at each period and when DWSF outgrows
/// the prediction.
#[derive(Clone, Debug)]
pub struct Planner {
    tracker: DwppTracker,
    plan: Plan,
}

impl Planner {
    /// A planner for `scheme` on a fast tier of `capacity` bytes.
    pub fn new(
        scheme: Scheme,
        bw: Bandwidths,
        capacity: u64,
        tracker: DwppTracker,
    ) -> Result<Planner, BbosError> {
        let plan = Plan::new(
            scheme,
            bw,
            capacity as f64,
            tracker.predict() as f64,
            tracker.period.as_secs_f64(),
        )?;
        Ok(Planner { tracker, plan })
    }

    /// Re-plans for the current prediction; scheme, bandwidths and
    /// capacity are the current plan's.
    fn replan(&mut self) {
        let p = &self.plan;
        // Cannot fail: the same inputs made the current plan, and the
        // prediction and period are valid.
        if let Ok(plan) = Plan::new(
            p.scheme,
            p.bw,
            p.capacity,
            self.tracker.predict() as f64,
            self.tracker.period.as_secs_f64(),
        ) {
            self.plan = plan;
        }
    }

    /// Moves to the period of `now` (re-planning if one closed); returns
    /// the closed periods as [`DwppTracker::advance`] does.
    pub fn advance(&mut self, now: Time) -> Vec<(u64, u64)> {
        let closed = self.tracker.advance(now);
        if !closed.is_empty() {
            self.replan();
        }
        closed
    }

    /// Counts `bytes` of checkpoint data written at `now`.
    pub fn handle_written(&mut self, now: Time, bytes: u64) -> Vec<(u64, u64)> {
        let closed = self.tracker.handle_written(now, bytes);
        if !closed.is_empty() || self.tracker.dwsf() as f64 > self.plan.dwpp {
            self.replan();
        }
        closed
    }

    /// Sets the prediction used without history (registered jobs changed).
    pub fn set_prior(&mut self, prior: u64) {
        self.tracker.set_prior(prior);
        self.replan();
    }

    /// The rates while checkpoints are written, with `used` bytes on the
    /// fast tier.
    pub fn rates(&self, used: u64) -> Rates {
        self.plan.rates(self.tracker.dwsf() as f64, used as f64)
    }

    /// The current plan.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The tracker.
    pub fn tracker(&self) -> &DwppTracker {
        &self.tracker
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const GB: f64 = 1e9;
    const S: f64 = 2200.0 * GB;

    fn close(a: f64, b: f64, rel: f64) -> bool {
        (a - b).abs() <= rel * a.abs().max(b.abs()).max(1.0)
    }

    #[test]
    fn eq1_line_passes_through_both_corners() {
        let bw = Bandwidths::PAPER;
        assert!(close(
            bw.write_for_demote(bw.demote_min),
            bw.write_max,
            1e-12
        ));
        assert!(close(
            bw.write_for_demote(bw.demote_max),
            bw.write_min,
            1e-12
        ));
        let mid = (bw.demote_min + bw.demote_max) / 2.0;
        assert!(close(
            bw.write_for_demote(mid),
            (bw.write_min + bw.write_max) / 2.0,
            1e-12
        ));
    }

    #[test]
    fn largest_dwpp_served_is_s_over_one_minus_brmax_over_bwmin() {
        let bw = Bandwidths::PAPER;
        let bound = bw.max_dwpp(S).unwrap();
        assert!(close(bound / S, 1.0 / (1.0 - 1.6 / 3.0), 1e-12));
        assert!(close(bound / S, 2.142_857, 1e-6));
        // With a period long enough that Eq. 3 never binds, the planner's
        // own feasibility gives the same bound: the closed form is exact.
        let served = max_served_dwpp(Scheme::Bbos, bw, S, 1e9);
        assert!(
            close(served, bound, 1e-8),
            "{} vs {}",
            served / S,
            bound / S
        );
        assert!(close(
            max_served_dwpp(Scheme::MaxEff, bw, S, 1e9),
            bound,
            1e-8
        ));
        // Demotion as fast as writes: no capacity bound.
        let fast = Bandwidths {
            demote_max: 3.0e9,
            ..bw
        };
        assert_eq!(fast.max_dwpp(S), None);
    }

    #[test]
    fn paper_utilisation_with_its_period() {
        // Period 3800 s; S is not given by the paper; 2.2 TB reproduces
        // both of its figures (docs/results/bbos.md).
        let bw = Bandwidths::PAPER;
        let max_bw = max_served_dwpp(Scheme::MaxBw, bw, S, 3800.0) / S;
        let bbos = max_served_dwpp(Scheme::Bbos, bw, S, 3800.0) / S;
        let warp = max_served_dwpp(Scheme::DataWarp, bw, S, 3800.0) / S;
        assert!((1.85..1.95).contains(&max_bw), "MaxBW {max_bw}");
        assert!((2.1..2.15).contains(&bbos), "BBOS {bbos}");
        assert!(close(warp, 1.0, 1e-9), "DataWarp {warp}");
    }

    #[test]
    fn patterns_by_dwpp() {
        let bw = Bandwidths::PAPER;
        let plan = |k: f64| Plan::new(Scheme::Bbos, bw, S, k * S, 3800.0).unwrap();
        assert_eq!(plan(1.0).pattern, Pattern::IdleOnly);
        assert_eq!(plan(0.5).pattern, Pattern::IdleOnly);
        let p2 = plan(1.2);
        assert_eq!(p2.pattern, Pattern::Ramp);
        assert!(p2.t_c > 0.0 && p2.t_dd > 0.0 && p2.t_ds == 0.0);
        let p3 = plan(1.6);
        assert_eq!(p3.pattern, Pattern::Saturated);
        assert!(p3.t_c == 0.0 && p3.t_dd > 0.0 && p3.t_ds > 0.0);
        // Pattern 2 → 3 at t_c = 0: DWPP = S / (1 − r_ramp / w_ramp).
        let boundary = S / (1.0 - (1.6 + 0.08) / (3.56 + 3.0));
        assert_eq!(plan(boundary / S - 0.001).pattern, Pattern::Ramp);
        assert_eq!(plan(boundary / S + 0.001).pattern, Pattern::Saturated);
        // Beyond the bound: saturated and infeasible.
        let over = plan(2.2);
        assert_eq!(over.pattern, Pattern::Saturated);
        assert!(!over.feasible);
        assert!(plan(1.9).feasible);
    }

    /// Integrates the rate schedule over DWSF and checks Eq. 2: the bytes
    /// demoted under writes equal C, and the write time matches the plan.
    fn integrate(plan: &Plan) -> (f64, f64) {
        let steps = 200_000;
        let dx = plan.dwpp / steps as f64;
        let (mut time, mut demoted) = (0.0, 0.0);
        for i in 0..steps {
            let r = plan.rates((i as f64 + 0.5) * dx, 0.0);
            let dt = dx / r.write;
            time += dt;
            demoted += r.demote * dt;
        }
        (time, demoted)
    }

    #[test]
    fn schedule_integrates_to_the_equations() {
        let bw = Bandwidths::PAPER;
        for k in [1.1, 1.2, 1.3, 1.4, 1.6, 1.9, 2.1] {
            let plan = Plan::new(Scheme::Bbos, bw, S, k * S, 3800.0).unwrap();
            let (time, demoted) = integrate(&plan);
            let c = k * S - S;
            assert!(
                close(demoted, c, 1e-4),
                "k {k}: demoted {} vs C {}",
                demoted / S,
                c / S
            );
            let planned = plan.t_c + plan.t_dd + plan.t_ds;
            assert!(close(time, planned, 1e-4), "k {k}: {time} vs {planned}");
            assert!(close(plan.demoted_under_writes, c, 1e-9));
        }
    }

    #[test]
    fn thresholds_match_the_plan() {
        let bw = Bandwidths::PAPER;
        let p2 = Plan::new(Scheme::Bbos, bw, S, 1.2 * S, 3800.0).unwrap();
        let start = p2.ramp_threshold().unwrap();
        assert!(close(start, 3.56e9 * p2.t_c, 1e-12));
        // Below the threshold: Bwmax with Brmin; above: ramping.
        assert_eq!(p2.rates(start * 0.99, 0.0).write, bw.write_max);
        assert!(p2.rates(start * 1.01 + 1e9, 0.0).write < bw.write_max);
        let full = p2.full_speed_threshold().unwrap();
        assert!(
            close(full, 1.2 * S, 1e-9),
            "pattern 2 ends its ramp at DWPP"
        );
        let r = p2.rates(full, 0.0);
        assert!(close(r.write, bw.write_min, 1e-6) && close(r.demote, bw.demote_max, 1e-6));
        let p3 = Plan::new(Scheme::Bbos, bw, S, 1.6 * S, 3800.0).unwrap();
        assert_eq!(p3.ramp_threshold(), Some(0.0));
        assert!(p3.full_speed_threshold().unwrap() < 1.6 * S);
        // Pattern 1 never demotes under writes.
        let p1 = Plan::new(Scheme::Bbos, bw, S, 0.9 * S, 3800.0).unwrap();
        assert_eq!(p1.rates(0.5 * S, 0.0).demote, 0.0);
        assert_eq!(p1.ramp_threshold(), None);
    }

    #[test]
    fn baselines() {
        let bw = Bandwidths::PAPER;
        let max_bw = Plan::new(Scheme::MaxBw, bw, S, 1.9 * S, 3800.0).unwrap();
        assert_eq!(max_bw.rates(1.5 * S, 2.0 * S).demote, 0.0);
        let max_eff = Plan::new(Scheme::MaxEff, bw, S, 1.3 * S, 3800.0).unwrap();
        let r = max_eff.rates(0.0, 0.0);
        assert_eq!((r.write, r.demote), (bw.write_min, bw.demote_max));
        let stat = Plan::new(Scheme::Static { percent: 90 }, bw, S, 1.9 * S, 3800.0).unwrap();
        assert_eq!(stat.rates(0.0, 0.89 * S).demote, 0.0);
        assert_eq!(stat.rates(0.0, 0.9 * S).demote, bw.demote_max);
        assert!(!Scheme::DataWarp.oversubscribes() && Scheme::Bbos.oversubscribes());
        assert!(!Scheme::DataWarp.schedules_io() && Scheme::MaxBw.schedules_io());
        assert!(Scheme::MaxBw.reserves_before_start() && !Scheme::Bbos.reserves_before_start());
        let warp = Plan::new(Scheme::DataWarp, bw, S, 1.01 * S, 3800.0).unwrap();
        assert!(!warp.feasible, "dedicated allocation never exceeds S");
    }

    #[test]
    fn bad_inputs_are_refused() {
        let bw = Bandwidths::PAPER;
        let bad = [
            Bandwidths {
                write_min: 4e9,
                ..bw
            },
            Bandwidths {
                demote_max: 0.0,
                demote_min: 0.0,
                ..bw
            },
            Bandwidths {
                idle_demote: 0.0,
                ..bw
            },
            Bandwidths {
                write_max: f64::NAN,
                ..bw
            },
        ];
        for b in bad {
            assert!(Plan::new(Scheme::Bbos, b, S, S, 3800.0).is_err(), "{b:?}");
        }
        assert!(Plan::new(Scheme::Bbos, bw, 0.0, S, 3800.0).is_err());
        assert!(Plan::new(Scheme::Bbos, bw, S, -1.0, 3800.0).is_err());
        assert!(Plan::new(Scheme::Bbos, bw, S, S, 0.0).is_err());
        assert!(DwppTracker::new(Duration::ZERO, 3, 0).is_err());
        assert!(DwppTracker::new(Duration::from_secs(1), 0, 0).is_err());
    }

    #[test]
    fn sqrt_is_accurate() {
        for x in [1e-9, 0.25, 2.0, 1e6, 12.5e18, 1e300] {
            let r = sqrt(x);
            assert!(close(r * r, x, 1e-12), "{x}");
        }
        assert_eq!(sqrt(0.0), 0.0);
        assert_eq!(sqrt(-1.0), 0.0);
    }

    fn t(secs: u64) -> Time {
        Time::from_millis(secs * 1000)
    }

    #[test]
    fn tracker_predicts_from_history() {
        let mut tr = DwppTracker::new(Duration::from_secs(100), 3, 500).unwrap();
        assert_eq!(tr.predict(), 500, "prior before history");
        tr.handle_written(t(10), 300);
        tr.handle_written(t(20), 400);
        assert_eq!(tr.dwsf(), 700);
        assert_eq!(tr.predict(), 700, "never below DWSF");
        let closed = tr.handle_written(t(150), 100);
        assert_eq!(closed, [(0, 700)]);
        assert_eq!(tr.index(), 1);
        assert_eq!(tr.dwsf(), 100);
        assert_eq!(tr.predict(), 700);
        tr.advance(t(250));
        tr.advance(t(350));
        // History 700, 100, 0 → mean 266.
        assert_eq!(tr.history().collect::<Vec<_>>(), [700, 100, 0]);
        assert_eq!(tr.predict(), 266);
        tr.advance(t(450));
        assert_eq!(tr.history().collect::<Vec<_>>(), [100, 0, 0]);
        // Time going backwards changes nothing.
        assert!(tr.advance(t(10)).is_empty());
        assert_eq!(tr.index(), 4);
        // A long idle gap is skipped cheaply and leaves an idle history.
        tr.handle_written(t(1_000_000), 5);
        assert_eq!(tr.index(), 10_000);
        assert_eq!(tr.history().collect::<Vec<_>>(), [0, 0, 0]);
        assert_eq!(tr.dwsf(), 5);
    }

    #[test]
    fn expected_dwpp_of_registered_jobs() {
        let h = Duration::from_secs(3600);
        let jobs = [(80, h), (80, h / 2), (80, h / 3)];
        assert_eq!(expected_dwpp(jobs, h), 80 + 160 + 240);
    }

    #[test]
    fn planner_replans_when_dwsf_outgrows_the_prediction() {
        let bw = Bandwidths::PAPER;
        let s = 2_200_000_000_000_u64;
        let tr = DwppTracker::new(Duration::from_secs(3800), 3, s / 2).unwrap();
        let mut p = Planner::new(Scheme::Bbos, bw, s, tr).unwrap();
        assert_eq!(p.plan().pattern, Pattern::IdleOnly);
        assert_eq!(p.rates(0).demote, 0.0);
        p.handle_written(t(10), s + s / 2);
        assert_eq!(p.plan().pattern, Pattern::Saturated);
        assert!(p.rates(0).demote > 0.0);
        // The next period plans from history (1.5 S).
        p.advance(t(3900));
        assert_eq!(p.tracker().dwsf(), 0);
        assert_eq!(p.plan().dwpp, (s + s / 2) as f64);
        assert_eq!(
            p.rates(0).demote,
            bw.demote_min,
            "ramp starts at 0 in pattern 3"
        );
    }

    #[test]
    fn scheduler_runs_one_job_at_a_time_in_arrival_order() {
        let mut s = IoScheduler::new(2);
        let (a1, x) = s.submit(0, 1);
        assert_eq!(x, Admission::Now);
        let (a2, x) = s.submit(0, 1);
        assert_eq!(x, Admission::Now, "same job joins while nobody waits");
        let (b1, x) = s.submit(0, 2);
        assert_eq!(x, Admission::Queued);
        let (c1, _) = s.submit(0, 3);
        let (a3, x) = s.submit(0, 1);
        assert_eq!(x, Admission::Queued, "no joining while others wait");
        let (b2, _) = s.submit(0, 2);
        // Another device is independent.
        assert_eq!(s.submit(1, 2).1, Admission::Now);
        assert_eq!(s.running(0), Some(1));
        assert_eq!(s.waiting(0), 4);
        assert!(s.finish(a1).is_empty());
        assert_eq!(s.finish(a2), [b1, b2], "job 2 arrived first, all its queue");
        assert_eq!(s.running(0), Some(2));
        assert!(s.finish(b1).is_empty());
        assert_eq!(s.finish(b2), [c1]);
        assert_eq!(s.finish(c1), [a3]);
        assert_eq!(s.finish(a3), []);
        assert_eq!(s.running(0), None);
        assert_eq!(s.submit(0, 9).1, Admission::Now);
    }

    #[test]
    fn scheduler_withdraws_queued_tickets() {
        let mut s = IoScheduler::new(1);
        let (a, _) = s.submit(0, 1);
        let (b, _) = s.submit(0, 2);
        let (c, _) = s.submit(0, 3);
        assert!(s.finish(b).is_empty(), "withdrawn");
        assert_eq!(s.finish(a), [c]);
        assert!(s.finish(Ticket(999)).is_empty());
    }

    proptest! {
        #[test]
        fn scheduler_never_overlaps_jobs(ops in proptest::collection::vec((0u64..4, any::<bool>(), 0usize..8), 1..200)) {
            let mut s = IoScheduler::new(1);
            let mut running: Vec<(Ticket, u64)> = Vec::new();
            let mut queued: BTreeMap<Ticket, u64> = BTreeMap::new();
            for (job, submit, pick) in ops {
                if submit || running.is_empty() {
                    let (tk, adm) = s.submit(0, job);
                    match adm {
                        Admission::Now => running.push((tk, job)),
                        Admission::Queued => { queued.insert(tk, job); }
                    }
                } else {
                    let (tk, _) = running.remove(pick % running.len());
                    for a in s.finish(tk) {
                        let j = queued.remove(&a).expect("admitted a queued ticket");
                        running.push((a, j));
                    }
                }
                // One job at a time, and it is the one the scheduler names.
                if let Some(&(_, j)) = running.first() {
                    prop_assert!(running.iter().all(|&(_, k)| k == j));
                    prop_assert_eq!(s.running(0), Some(j));
                } else {
                    prop_assert!(queued.is_empty(), "idle device with waiting I/O");
                }
                prop_assert_eq!(s.waiting(0), queued.len());
            }
        }

        #[test]
        fn rates_stay_on_the_line_and_are_monotone(k in 0.5f64..2.5, a in 0.0f64..1.0, b in 0.0f64..1.0) {
            let bw = Bandwidths::PAPER;
            let plan = Plan::new(Scheme::Bbos, bw, S, k * S, 3800.0).unwrap();
            let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
            let r1 = plan.rates(lo * k * S, 0.0);
            let r2 = plan.rates(hi * k * S, 0.0);
            prop_assert!(r2.write <= r1.write + 1e-3);
            prop_assert!(r2.demote >= r1.demote - 1e-3);
            for r in [r1, r2] {
                if r.demote > 0.0 {
                    prop_assert!(close(r.write, bw.write_for_demote(r.demote), 1e-9));
                }
                prop_assert!(r.write >= bw.write_min - 1e-3 && r.write <= bw.write_max + 1e-3);
            }
        }
    }

    fn file(job: u64, version: u64, rate: f64, written: u64) -> Resident {
        Resident {
            job,
            version,
            bytes: 80,
            failure_rate: rate,
            written: t(written),
            accessed: t(written),
        }
    }

    #[test]
    fn cold_order_versions_then_lowest_failure_rate() {
        let files = [
            file(1, 2, 0.5, 30), // latest of job 1, high failure rate
            file(1, 1, 0.5, 10), // superseded
            file(2, 1, 0.1, 20), // latest of job 2, low failure rate
            file(3, 1, 0.9, 5),  // superseded by job 3's v2 on capacity
            file(4, 1, 0.3, 1),
        ];
        let newest = newest_versions(&files, [(3, 2)]);
        let aware = cold_order(
            Eviction::Bbos {
                version_aware: true,
            },
            &files,
            &newest,
        );
        assert_eq!(aware, [3, 1, 2, 4, 0]);
        let unaware = cold_order(
            Eviction::Bbos {
                version_aware: false,
            },
            &files,
            &newest,
        );
        assert_eq!(unaware, [2, 4, 1, 0, 3]);
        assert_eq!(cold_order(Eviction::Fifo, &files, &newest), [4, 3, 1, 2, 0]);
        let mut read = files;
        read[4].accessed = t(100);
        assert_eq!(cold_order(Eviction::Lru, &read, &newest), [3, 1, 2, 0, 4]);
    }

    #[test]
    fn cold_incoming_checkpoints_bypass_the_fast_tier() {
        let e = Eviction::Bbos {
            version_aware: true,
        };
        let residents = [file(1, 1, 0.5, 0), file(2, 1, 0.4, 0)];
        // Room for one more: stage it.
        assert!(!direct_to_capacity(
            e,
            &file(3, 1, 0.01, 9),
            &residents,
            240
        ));
        // Full of hotter checkpoints: the cold newcomer bypasses.
        assert!(direct_to_capacity(e, &file(3, 1, 0.01, 9), &residents, 160));
        // A hotter newcomer is staged (something colder will be evicted).
        assert!(!direct_to_capacity(
            e,
            &file(3, 1, 0.45, 9),
            &residents,
            160
        ));
        // A new version makes its predecessor cold, so it is staged.
        assert!(!direct_to_capacity(
            e,
            &file(2, 2, 0.01, 9),
            &residents,
            160
        ));
        assert!(!direct_to_capacity(
            Eviction::Lru,
            &file(3, 1, 0.01, 9),
            &residents,
            160
        ));
        assert!(!direct_to_capacity(
            Eviction::Fifo,
            &file(3, 1, 0.01, 9),
            &residents,
            160
        ));
    }

    #[test]
    fn failure_rates() {
        let h = Duration::from_secs(3600);
        assert!(close(failure_rate(Some(h), 0, h), 1.0 / 3600.0, 1e-12));
        assert!(close(
            failure_rate(None, 100, h * 1000),
            100.0 / 3_600_000.0,
            1e-12
        ));
        assert_eq!(failure_rate(Some(Duration::ZERO), 0, h), f64::INFINITY);
    }
}
