//! Property tests of the region pipeline and the flush gate (DESIGN §4.5).
//!
//! Random sequences of events (reservations of random lengths, including 0
//! and longer than a region; flush transitions on random region ids,
//! including ids that do not exist and regions in the wrong state; seals;
//! time passing) drive a [`RegionPipeline`]. After every step the test
//! checks the pipeline's own invariants and, against a small model kept
//! here, that:
//! - no region is lost: the states always add up to `regions`;
//! - every state change is a legal edge of `Empty → Filling → Full →
//!   Flushing → Empty` (or an aborted flush `Flushing → Full`) caused by the
//!   right event, so a region never becomes empty twice without being filled
//!   and flushed in between; a refused transition changes nothing at all;
//! - bytes are accounted: bytes granted by `Append` = bytes used in regions
//!   now + bytes in regions flushed since; the wasted-tail counter grows by
//!   exactly the unused tails of regions closed by a reservation;
//! - flushing is FIFO by the order regions became full, and empty regions
//!   are reused in the order they became empty;
//! - no deadlock: whenever a writer is told to wait (or written through),
//!   a flush is in progress or available, and once every flush completes the
//!   same reservation succeeds.

use proptest::prelude::*;
use sluice_policy::flush_gate::{FlushGate, FlushGateConfig, FlushReason, GateDecision};
use sluice_policy::pipeline::{
    Admission, PipelineConfig, PipelineError, RegionPipeline, RegionState, WhenFull,
    WriteThroughReason,
};
use sluice_policy::{RegionId, Tier, Time};
use std::collections::VecDeque;
use std::time::Duration;

/// Highest region id the events use; above the largest `regions` generated so
/// that some events name regions that do not exist.
const REGION_ID_MAX: u32 = 7;

#[derive(Clone, Debug)]
enum Event {
    Advance {
        nanos: u64,
    },
    /// Reserve `len` bytes for a writer that has waited `waited_nanos` (capped
    /// at the current time).
    Reserve {
        len: u64,
        waited_nanos: u64,
    },
    StartFlush {
        region: u32,
    },
    FinishFlush {
        region: u32,
    },
    AbortFlush {
        region: u32,
    },
    /// What a well-behaved flusher does: start the region `poll_flush` names.
    StartPolled,
    /// Finish the lowest-numbered flushing region, or abort it.
    CompleteAnyFlushing {
        abort: bool,
    },
    Seal,
}

fn config_strategy() -> impl Strategy<Value = PipelineConfig> {
    (
        1u32..=5,
        1u64..=64,
        prop_oneof![Just(WhenFull::Wait), Just(WhenFull::WriteThrough)],
        0u64..=50,
    )
        .prop_map(
            |(regions, region_bytes, when_full, wait_max_nanos)| PipelineConfig {
                regions,
                region_bytes,
                when_full,
                wait_max: Duration::from_nanos(wait_max_nanos),
            },
        )
}

fn event_strategy() -> impl Strategy<Value = Event> {
    let waited = prop_oneof![Just(0u64), 0u64..=80];
    prop_oneof![
        2 => (0u64..=20).prop_map(|nanos| Event::Advance { nanos }),
        6 => (0u64..=70, waited).prop_map(|(len, waited_nanos)| Event::Reserve { len, waited_nanos }),
        1 => (0..=REGION_ID_MAX).prop_map(|region| Event::StartFlush { region }),
        1 => (0..=REGION_ID_MAX).prop_map(|region| Event::FinishFlush { region }),
        1 => (0..=REGION_ID_MAX).prop_map(|region| Event::AbortFlush { region }),
        2 => Just(Event::StartPolled),
        2 => any::<bool>().prop_map(|abort| Event::CompleteAnyFlushing { abort }),
        1 => Just(Event::Seal),
    ]
}

/// What the test remembers about the run, independently of the pipeline.
struct Model {
    now: Time,
    /// Sum of `len` over every `Append`.
    appended_bytes: u64,
    /// Sum of used bytes of regions at the moment their flush finished.
    flushed_bytes: u64,
    /// Flushes finished.
    flushes: u64,
    /// Order in which each region last became full (`Filling → Full`).
    full_seq: Vec<Option<u64>>,
    next_full_seq: u64,
    /// Empty regions in the order they became empty.
    free_order: VecDeque<RegionId>,
}

impl Model {
    fn new(config: &PipelineConfig) -> Model {
        Model {
            now: Time::ZERO,
            appended_bytes: 0,
            flushed_bytes: 0,
            flushes: 0,
            full_seq: vec![None; config.regions as usize],
            next_full_seq: 0,
            free_order: (0..config.regions).map(RegionId).collect(),
        }
    }
}

/// The outcome of one event, for the checks.
#[derive(Debug)]
enum Outcome {
    Nothing,
    Reserve {
        len: u64,
        waiting_since: Time,
        admission: Admission,
    },
    Transition {
        region: RegionId,
        to: RegionState,
        result: Result<(), PipelineError>,
    },
    Seal(Option<RegionId>),
}

fn state(p: &RegionPipeline, region: RegionId) -> RegionState {
    // INVARIANT: callers pass ids below `regions`.
    p.state(region).expect("region exists")
}

fn used(p: &RegionPipeline, region: RegionId) -> u64 {
    // INVARIANT: callers pass ids below `regions`.
    p.used_bytes(region).expect("region exists")
}

fn first_in(p: &RegionPipeline, wanted: RegionState) -> Option<RegionId> {
    p.states()
        .find(|&(_, state)| state == wanted)
        .map(|(region, _)| region)
}

fn apply(p: &mut RegionPipeline, model: &mut Model, event: &Event) -> Outcome {
    let transition = |region: RegionId, to, result| Outcome::Transition { region, to, result };
    match *event {
        Event::Advance { nanos } => {
            model.now = Time::from_nanos(model.now.as_nanos() + nanos);
            Outcome::Nothing
        }
        Event::Reserve { len, waited_nanos } => {
            let waiting_since =
                Time::from_nanos(model.now.as_nanos() - waited_nanos.min(model.now.as_nanos()));
            let admission = p.reserve(model.now, len, waiting_since);
            Outcome::Reserve {
                len,
                waiting_since,
                admission,
            }
        }
        Event::StartFlush { region } => {
            let region = RegionId(region);
            transition(region, RegionState::Flushing, p.start_flush(region))
        }
        Event::FinishFlush { region } => {
            let region = RegionId(region);
            transition(region, RegionState::Empty, p.finish_flush(region))
        }
        Event::AbortFlush { region } => {
            let region = RegionId(region);
            transition(region, RegionState::Full, p.abort_flush(region))
        }
        Event::StartPolled => match p.poll_flush() {
            Some(region) => transition(region, RegionState::Flushing, p.start_flush(region)),
            None => Outcome::Nothing,
        },
        Event::CompleteAnyFlushing { abort } => match first_in(p, RegionState::Flushing) {
            Some(region) if abort => transition(region, RegionState::Full, p.abort_flush(region)),
            Some(region) => transition(region, RegionState::Empty, p.finish_flush(region)),
            None => Outcome::Nothing,
        },
        Event::Seal => Outcome::Seal(p.seal()),
    }
}

/// Flushes everything a flusher can reach, as a drain would: finishes every
/// flushing region, then starts and finishes full regions until none is left.
fn flush_everything(p: &mut RegionPipeline) -> Result<(), TestCaseError> {
    while let Some(region) = first_in(p, RegionState::Flushing) {
        prop_assert_eq!(p.finish_flush(region), Ok(()));
    }
    // Bounded: each pass empties one full region.
    for _ in 0..p.config().regions {
        let Some(region) = p.poll_flush() else { break };
        prop_assert_eq!(p.start_flush(region), Ok(()));
        prop_assert_eq!(p.finish_flush(region), Ok(()));
    }
    prop_assert_eq!(p.poll_flush(), None);
    prop_assert_eq!(p.flushing_count(), 0);
    Ok(())
}

/// Checks one step from `before` to `after` (see the module docs).
fn check_step(
    before: &RegionPipeline,
    after: &RegionPipeline,
    model: &mut Model,
    outcome: &Outcome,
) -> Result<(), TestCaseError> {
    let config = *after.config();
    prop_assert_eq!(after.check_invariants(), Ok(()));

    // No region lost.
    let mut counts = [0u32; 4];
    for (_, state) in after.states() {
        counts[state as usize] += 1;
    }
    prop_assert_eq!(after.states().len(), config.regions as usize);
    prop_assert_eq!(counts.iter().sum::<u32>(), config.regions);
    prop_assert_eq!(after.empty_count(), counts[RegionState::Empty as usize]);
    prop_assert_eq!(after.has_empty(), after.empty_count() > 0);
    prop_assert_eq!(after.full_count(), counts[RegionState::Full as usize]);
    prop_assert_eq!(
        after.flushing_count(),
        counts[RegionState::Flushing as usize]
    );

    // Every state change is a legal edge caused by the right event.
    // Regions closed by this event: at most the one that was filling (rolled
    // over or sealed) and then one empty region that a reservation opened and
    // filled exactly (`Empty → Full`, through `Filling`), in that order.
    let mut closed_filling = None;
    let mut closed_opened = None;
    for ((region, from), (_, to)) in before.states().zip(after.states()) {
        if from == to {
            continue;
        }
        let is_transition_to = |wanted_region, wanted_to| {
            matches!(outcome, Outcome::Transition { region: r, to: t, result: Ok(()) }
                if *r == wanted_region && *t == wanted_to)
        };
        match (from, to) {
            (RegionState::Empty, RegionState::Filling | RegionState::Full) => {
                let by_reserve = matches!(outcome, Outcome::Reserve { .. });
                prop_assert!(by_reserve, "{} opened by {:?}", region.0, outcome);
                // The oldest empty region takes over.
                prop_assert_eq!(model.free_order.pop_front(), Some(region));
                if to == RegionState::Full {
                    prop_assert_eq!(used(after, region), config.region_bytes);
                    closed_opened = Some(region);
                }
            }
            (RegionState::Filling, RegionState::Full) => {
                let by_reserve_or_seal =
                    matches!(outcome, Outcome::Reserve { .. } | Outcome::Seal(Some(_)));
                prop_assert!(by_reserve_or_seal, "{} closed by {:?}", region.0, outcome);
                prop_assert_eq!(closed_filling, None);
                closed_filling = Some(region);
            }
            (RegionState::Full, RegionState::Flushing) => {
                prop_assert!(is_transition_to(region, RegionState::Flushing));
            }
            (RegionState::Flushing, RegionState::Empty) => {
                prop_assert!(is_transition_to(region, RegionState::Empty));
                model.flushed_bytes += used(before, region);
                model.flushes += 1;
                model.free_order.push_back(region);
            }
            (RegionState::Flushing, RegionState::Full) => {
                prop_assert!(is_transition_to(region, RegionState::Full));
            }
            (from, to) => {
                prop_assert!(false, "illegal edge {from} → {to} on region {region:?}");
            }
        }
    }
    let filled_now: Vec<RegionId> = closed_filling.into_iter().chain(closed_opened).collect();
    for &region in &filled_now {
        model.full_seq[region.0 as usize] = Some(model.next_full_seq);
        model.next_full_seq += 1;
    }

    let cb = before.counters();
    let ca = after.counters();
    prop_assert_eq!(
        ca.regions_filled - cb.regions_filled,
        filled_now.len() as u64
    );

    match outcome {
        Outcome::Nothing => prop_assert_eq!(before, after),
        Outcome::Transition { region, to, result } => match result {
            Ok(()) => {
                prop_assert_eq!(state(after, *region), *to);
                let flushed = u64::from(*to == RegionState::Empty);
                prop_assert_eq!(ca.regions_flushed - cb.regions_flushed, flushed);
            }
            Err(error) => {
                // Refused: nothing changed, not even a counter.
                prop_assert_eq!(before, after);
                match error {
                    PipelineError::UnknownRegion { region: r } => {
                        prop_assert_eq!(r, region);
                        prop_assert!(region.0 >= config.regions);
                    }
                    PipelineError::InvalidTransition {
                        region: r,
                        from,
                        to: t,
                    } => {
                        prop_assert_eq!(r, region);
                        prop_assert_eq!(t, to);
                        prop_assert_eq!(*from, state(before, *region));
                        let allowed_from = match to {
                            RegionState::Flushing => RegionState::Full,
                            _ => RegionState::Flushing,
                        };
                        prop_assert_ne!(*from, allowed_from);
                    }
                }
            }
        },
        Outcome::Seal(sealed) => {
            match (before.filling(), sealed) {
                (Some(region), Some(sealed)) => {
                    prop_assert_eq!(region, *sealed);
                    prop_assert!(used(before, region) > 0);
                    prop_assert_eq!(state(after, region), RegionState::Full);
                }
                (filling, None) => {
                    prop_assert!(filling.is_none_or(|r| used(before, r) == 0));
                    prop_assert_eq!(before, after);
                }
                (None, Some(_)) => prop_assert!(false, "sealed without a filling region"),
            }
            prop_assert_eq!(ca.wasted_tail_bytes, cb.wasted_tail_bytes);
        }
        Outcome::Reserve {
            len,
            waiting_since,
            admission,
        } => {
            let (len, waiting_since) = (*len, *waiting_since);
            // Tails of regions a reservation closed are counted as wasted
            // (zero for a region an append filled exactly).
            let tails: u64 = filled_now
                .iter()
                .map(|&r| config.region_bytes - used(after, r))
                .sum();
            prop_assert_eq!(ca.wasted_tail_bytes - cb.wasted_tail_bytes, tails);
            prop_assert_eq!(
                ca.too_large - cb.too_large,
                u64::from(*admission == Admission::TooLarge)
            );
            match *admission {
                Admission::TooLarge => {
                    prop_assert!(len > config.region_bytes);
                    prop_assert_eq!(
                        before.states().collect::<Vec<_>>(),
                        after.states().collect::<Vec<_>>()
                    );
                    for (region, _) in after.states() {
                        prop_assert_eq!(used(before, region), used(after, region));
                    }
                }
                Admission::Append { region, offset } => {
                    prop_assert!(len <= config.region_bytes);
                    let start = match state(before, region) {
                        RegionState::Filling => used(before, region),
                        RegionState::Empty => 0,
                        other => {
                            prop_assert!(false, "appended to a {other} region");
                            0
                        }
                    };
                    prop_assert_eq!(offset, start);
                    prop_assert_eq!(used(after, region), offset + len);
                    prop_assert!(offset + len <= config.region_bytes);
                    model.appended_bytes += len;
                }
                Admission::Wait { retry_at_latest } => {
                    prop_assert_eq!(config.when_full, WhenFull::Wait);
                    prop_assert_eq!(
                        retry_at_latest,
                        waiting_since.saturating_add(config.wait_max)
                    );
                    prop_assert!(retry_at_latest > model.now);
                    prop_assert_eq!(ca.waits - cb.waits, u64::from(model.now == waiting_since));
                    check_progress(after, model.now, len)?;
                }
                Admission::WriteThrough { reason } => {
                    prop_assert!(len <= config.region_bytes);
                    let expected = match config.when_full {
                        WhenFull::WriteThrough => WriteThroughReason::Configured,
                        WhenFull::Wait => {
                            prop_assert!(
                                model.now >= waiting_since.saturating_add(config.wait_max)
                            );
                            WriteThroughReason::WaitTimedOut
                        }
                    };
                    prop_assert_eq!(reason, expected);
                    prop_assert_eq!(ca.write_throughs - cb.write_throughs, 1);
                    check_progress(after, model.now, len)?;
                }
            }
            if !matches!(admission, Admission::Wait { .. }) {
                prop_assert_eq!(ca.waits, cb.waits);
            }
        }
    }

    // Bytes accounted: granted = still in regions + flushed.
    let in_regions: u64 = after.states().map(|(r, _)| used(after, r)).sum();
    prop_assert_eq!(model.appended_bytes, in_regions + model.flushed_bytes);
    prop_assert_eq!(ca.regions_flushed, model.flushes);
    let mut model_empty: Vec<RegionId> = model.free_order.iter().copied().collect();
    model_empty.sort();
    let empty: Vec<RegionId> = after
        .states()
        .filter(|&(_, s)| s == RegionState::Empty)
        .map(|(r, _)| r)
        .collect();
    prop_assert_eq!(model_empty, empty);

    // FIFO: the next flush is the full region that became full first.
    let oldest_full = after
        .states()
        .filter(|&(_, s)| s == RegionState::Full)
        .min_by_key(|&(r, _)| model.full_seq[r.0 as usize])
        .map(|(r, _)| r);
    prop_assert_eq!(after.poll_flush(), oldest_full);
    Ok(())
}

/// No deadlock: a writer refused for lack of space can always be unblocked
/// by the flusher, and is admitted once every flush has completed.
fn check_progress(p: &RegionPipeline, now: Time, len: u64) -> Result<(), TestCaseError> {
    prop_assert!(!p.has_empty());
    prop_assert_eq!(p.filling(), None);
    prop_assert!(
        p.flushing_count() > 0 || p.poll_flush().is_some(),
        "writer refused but nothing to flush: {p:?}"
    );
    let mut drained = p.clone();
    flush_everything(&mut drained)?;
    let admission = drained.reserve(now, len, now);
    let appended = matches!(admission, Admission::Append { .. });
    prop_assert!(appended, "after flushing everything: {:?}", admission);
    Ok(())
}

#[derive(Clone, Debug)]
enum GateEvent {
    Advance { nanos: u64 },
    Route(Tier),
    CapacityWrite,
    Draining(bool),
}

fn gate_event_strategy() -> impl Strategy<Value = GateEvent> {
    prop_oneof![
        (0u64..=300).prop_map(|nanos| GateEvent::Advance { nanos }),
        prop_oneof![Just(Tier::Fast), Just(Tier::Capacity)].prop_map(GateEvent::Route),
        Just(GateEvent::CapacityWrite),
        any::<bool>().prop_map(GateEvent::Draining),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn pipeline_keeps_its_books(
        config in config_strategy(),
        events in prop::collection::vec(event_strategy(), 1..200),
    ) {
        let mut pipeline = RegionPipeline::new(config).unwrap();
        let mut model = Model::new(&config);
        for event in &events {
            let before = pipeline.clone();
            let outcome = apply(&mut pipeline, &mut model, event);
            check_step(&before, &pipeline, &mut model, &outcome)?;
        }
        // A drain always terminates with every byte flushed.
        pipeline.seal();
        flush_everything(&mut pipeline)?;
        let in_regions: u64 = pipeline.states().map(|(r, _)| used(&pipeline, r)).sum();
        prop_assert_eq!(in_regions, 0);
        prop_assert!(pipeline
            .states()
            .all(|(_, s)| s == RegionState::Empty || s == RegionState::Filling));
    }

    #[test]
    fn a_second_finish_is_refused(
        config in config_strategy(),
        lens in prop::collection::vec(1u64..=64, 1..20),
    ) {
        let mut pipeline = RegionPipeline::new(config).unwrap();
        let t = Time::ZERO;
        for len in lens {
            pipeline.reserve(t, len.min(config.region_bytes), t);
        }
        pipeline.seal();
        let region = pipeline.poll_flush().unwrap();
        pipeline.start_flush(region).unwrap();
        pipeline.finish_flush(region).unwrap();
        let snapshot = pipeline.clone();
        prop_assert!(pipeline.finish_flush(region).is_err());
        prop_assert!(pipeline.abort_flush(region).is_err());
        prop_assert!(pipeline.start_flush(region).is_err());
        prop_assert_eq!(&pipeline, &snapshot);
    }

    #[test]
    fn gate_flushes_without_an_empty_region(
        flush_idle_nanos in 0u64..=500,
        events in prop::collection::vec(gate_event_strategy(), 0..50),
    ) {
        let flush_idle = Duration::from_nanos(flush_idle_nanos);
        let mut gate = FlushGate::new(FlushGateConfig {
            flush_idle,
            flush_age: None,
            hold_while_writing: false,
        });
        let mut now = Time::ZERO;
        for event in events {
            match event {
                GateEvent::Advance { nanos } => now = Time::from_nanos(now.as_nanos() + nanos),
                GateEvent::Route(tier) => gate.handle_route(now, tier),
                GateEvent::CapacityWrite => gate.handle_capacity_write(now),
                GateEvent::Draining(draining) => gate.set_draining(draining),
            }
            // Starvation guard: without an empty region, always flush.
            let starved = gate.poll(now, false);
            prop_assert!(matches!(starved, GateDecision::Flush(_)));
            match gate.poll(now, true) {
                GateDecision::Flush(FlushReason::Draining) => prop_assert!(gate.is_draining()),
                GateDecision::Flush(FlushReason::NoEmptyRegion) => {
                    prop_assert!(false, "has an empty region");
                }
                GateDecision::Flush(FlushReason::Quiet) => {
                    prop_assert!(false, "hold_while_writing is off");
                }
                GateDecision::Flush(FlushReason::FastTierTraffic) => {
                    prop_assert!(!gate.is_draining());
                    prop_assert_eq!(gate.route(), Tier::Fast);
                }
                GateDecision::Flush(FlushReason::CapacityIdle) => {
                    prop_assert!(!gate.is_draining());
                    prop_assert_eq!(gate.route(), Tier::Capacity);
                    prop_assert!(gate
                        .last_capacity_write()
                        .is_none_or(|last| now.saturating_since(last) >= flush_idle));
                }
                GateDecision::Pause { recheck_at } => {
                    prop_assert!(!gate.is_draining());
                    prop_assert_eq!(gate.route(), Tier::Capacity);
                    let last = gate.last_capacity_write().unwrap();
                    prop_assert_eq!(recheck_at, Some(last.saturating_add(flush_idle)));
                    prop_assert!(recheck_at.unwrap() > now);
                    // At the recheck time, the idle rule allows a flush.
                    prop_assert_eq!(
                        gate.poll(recheck_at.unwrap(), true),
                        GateDecision::Flush(FlushReason::CapacityIdle)
                    );
                }
            }
            if gate.is_draining() {
                prop_assert_eq!(starved, GateDecision::Flush(FlushReason::Draining));
            } else {
                prop_assert_eq!(starved, GateDecision::Flush(FlushReason::NoEmptyRegion));
            }
        }
    }
}
