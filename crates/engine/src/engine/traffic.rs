//! The capacity tier measured by the mount's own write-backs (issue 32;
//! docs/policy.md, "The model kept current"): every write of a stretch of
//! buffered bytes to the capacity tier (flush runs, close and fsync
//! write-backs, the idle pass) is timed while the tier is busy with them,
//! and [`sluice_policy::seek_fit::SeekFit`] fits `t_seek` and the tier's
//! rate to what they took. Under `policy.cost_profile = "auto"` the fitted
//! `t_seek` replaces the one `cost` routes with once it differs by more
//! than [`CHANGE_MIN`]; the estimate is shown in `sluice status` either
//! way.
//!
//! An observation is a busy period: from the moment one such write is in
//! flight until none is, or [`OBSERVATION_MAX`] at most while writes keep
//! coming; it counts the writes' bytes and their positionings (a write
//! that does not start where the previous one issued to the tier ended).
//! Time the tier spent between two write-backs, or on foreground writes
//! the engine does not issue, is not observed.
//!
//! INVARIANT: `in_flight` counts the writes begun and not ended; the
//! counters of an observation are reset whenever one is taken.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sluice_env::BackendFile;
use sluice_policy::seek_fit::{SeekEstimate, SeekFit};

use super::{Shared, State};

/// Longest observation while writes keep the tier busy.
const OBSERVATION_MAX: Duration = Duration::from_millis(250);

/// Relative change of the fitted `t_seek` that replaces the model's.
pub(super) const CHANGE_MIN: f64 = 0.2;

/// A write begun, until [`TrafficMeter::end`].
pub(super) struct Begun {
    started: Instant,
    positioned: bool,
    bytes: u64,
}

#[derive(Default)]
struct MeterState {
    in_flight: u32,
    /// Start of the observation under way.
    since: Option<Instant>,
    positionings: u32,
    bytes: u64,
    /// The file (its handle's address) and offset where the last write
    /// begun ends.
    last_end: Option<(usize, u64)>,
    fit: SeekFit,
}

/// The meter (module docs).
#[derive(Default)]
pub(super) struct TrafficMeter {
    state: Mutex<MeterState>,
    /// A new estimate since [`TrafficMeter::take_new`] last looked.
    fresh: AtomicBool,
}

impl TrafficMeter {
    /// A write of `bytes` at `offset` of `handle` is issued now.
    pub(super) fn begin(&self, handle: &dyn BackendFile, offset: u64, bytes: u64) -> Begun {
        let file = std::ptr::from_ref(handle).cast::<()>() as usize;
        let now = Instant::now();
        let mut state = sluice_env::lock(&self.state);
        let positioned = state.last_end != Some((file, offset));
        state.last_end = Some((file, offset + bytes));
        if state.in_flight == 0 {
            state.since = Some(now);
        }
        state.in_flight += 1;
        Begun {
            started: now,
            positioned,
            bytes,
        }
    }

    /// The write of `begun` ended (`ok`: it wrote every byte).
    pub(super) fn end(&self, begun: Begun, ok: bool) {
        let now = Instant::now();
        let mut state = sluice_env::lock(&self.state);
        state.in_flight = state.in_flight.saturating_sub(1);
        if ok {
            state.positionings += u32::from(begun.positioned);
            state.bytes += begun.bytes;
        }
        let since = state.since.unwrap_or(begun.started);
        let took = now.saturating_duration_since(since);
        if state.in_flight > 0 && took < OBSERVATION_MAX {
            return;
        }
        let (positionings, bytes) = (state.positionings, state.bytes);
        state.fit.observe(positionings, bytes, took);
        (state.positionings, state.bytes) = (0, 0);
        state.since = (state.in_flight > 0).then_some(now);
        if bytes > 0 && state.fit.estimate().is_some() {
            self.fresh.store(true, Ordering::Release);
        }
    }

    /// The fit now, if it gives one.
    pub(super) fn estimate(&self) -> Option<SeekEstimate> {
        let state = sluice_env::lock(&self.state);
        state.fit.estimate()
    }

    /// The estimate, if a new one came since the last call.
    pub(super) fn take_new(&self) -> Option<SeekEstimate> {
        // A load first: every write of the mount asks, and a swap would
        // make each of them write the flag's cache line.
        if !self.fresh.load(Ordering::Acquire) || !self.fresh.swap(false, Ordering::AcqRel) {
            return None;
        }
        self.estimate()
    }
}

/// Under `policy.cost_profile = "auto"`, route with the fitted `t_seek`
/// once it differs from the model's by more than [`CHANGE_MIN`] (called
/// with the engine lock, at each write; one atomic load when nothing is
/// new).
pub(super) fn keep_model_current(shared: &Shared, state: &mut State) {
    // A config under which `cost` can never buffer lets the kernel write
    // files straight to the capacity tier (passthrough), on the promise
    // that the engine never buffers a byte of them: the fit must not
    // break it. Such a mount writes nothing back anyway.
    if !shared.config.cost_seek_from_traffic || !shared.config.redirector.policy.may_route_fast() {
        return;
    }
    let Some(estimate) = shared.traffic.take_new() else {
        return;
    };
    let Some(current) = state
        .buffer
        .redirector()
        .classifier()
        .map(|c| c.model().capacity_seek)
    else {
        return;
    };
    let (now, was) = (estimate.seek.as_secs_f64(), current.as_secs_f64());
    if (now - was).abs() <= CHANGE_MIN * was.max(1e-6) {
        return;
    }
    state.buffer.set_capacity_seek(estimate.seek);
    tracing::info!(
        was_us = current.as_micros() as u64,
        now_us = estimate.seek.as_micros() as u64,
        mb_per_s = estimate.bytes_per_s.map(|rate| (rate / 1e6).round()),
        observations = estimate.observations,
        "policy.cost_seek follows the capacity tier's write-backs"
    );
}
