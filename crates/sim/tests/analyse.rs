//! The trace analysis behind `sluice`'s main job: every policy sees the same
//! streams, and the decisions have the shape SSDUP+ promises.

use sluice_policy::redirector::{RedirectPolicy, RedirectorConfig};
use sluice_policy::{FileId, Tier};
use sluice_sim::analyse::{analyse, AnalysisConfig, Phase};
use sluice_sim::workload::{Arrival, Ior, IorPattern};

const MIB: u64 = 1024 * 1024;

fn phase(pattern: IorPattern, file: u64) -> Phase {
    Phase {
        name: pattern.name().to_string(),
        instances: vec![Ior {
            pattern,
            file: FileId(file),
            processes: 16,
            request_bytes: 256 * 1024,
            file_bytes: 256 * MIB,
            seed: file,
        }],
    }
}

fn config() -> AnalysisConfig {
    AnalysisConfig {
        phases: vec![
            phase(IorPattern::SegmentedContiguous, 1),
            phase(IorPattern::SegmentedRandom, 2),
            phase(IorPattern::SegmentedContiguous, 3),
        ],
        arrival: Arrival::Random {
            seed: 7,
            max_lead: 8,
        },
        redirector: RedirectorConfig::default(),
        policies: RedirectPolicy::ALL.to_vec(),
    }
}

#[test]
fn ssdup_plus_buffers_random_phases_and_not_sequential_ones() {
    let analysis = analyse(&config()).unwrap();
    assert_eq!(analysis.requests, 3 * 1024);
    assert_eq!(analysis.streams.len(), 3 * 8);
    let by_name = |name: &str| {
        analysis
            .policies
            .iter()
            .find(|p| p.policy.name() == name)
            .unwrap()
    };
    assert_eq!(by_name("capacity-only").fast_bytes(), 0);
    let fast_all = by_name("fast-all");
    assert_eq!(fast_all.fast_bytes(), fast_all.bytes());
    assert_eq!(fast_all.index_extents, 3 * 1024);

    let plus = by_name("ssdup+");
    let share = |p: usize| plus.fast_bytes_per_phase[p] as f64 / plus.bytes_per_phase[p] as f64;
    assert_eq!(share(0), 0.0, "sequential phase stays on the capacity tier");
    // Algorithm 1 reacts one stream late: the first random stream still
    // goes to capacity, so 7 of 8 streams are buffered.
    assert!(share(1) >= 7.0 / 8.0, "random phase buffered: {}", share(1));
    // The first sequential stream after the random phase is still buffered;
    // then the route switches back.
    assert!(share(2) <= 2.0 / 8.0, "back to capacity: {}", share(2));
    // Distinct files, nothing rewritten: one extent per buffered request.
    assert_eq!(plus.index_extents * 256 * 1024, plus.fast_bytes());
}

#[test]
fn every_policy_sees_the_same_streams() {
    let analysis = analyse(&config()).unwrap();
    for row in &analysis.streams {
        assert_eq!(row.decisions.len(), RedirectPolicy::ALL.len());
    }
    // capacity-only and fast-all never switch; their rows differ only in route.
    assert!(analysis
        .streams
        .iter()
        .all(|r| r.decisions[0].route == Tier::Capacity));
    assert!(analysis
        .streams
        .iter()
        .all(|r| r.decisions[1].route == Tier::Fast));
}

#[test]
fn same_seed_same_analysis() {
    let a = analyse(&config()).unwrap();
    let b = analyse(&config()).unwrap();
    assert_eq!(a.streams, b.streams);
    assert_eq!(a.policies, b.policies);
}

#[test]
fn a_rewrite_over_buffered_bytes_goes_to_the_fast_tier() {
    // File 1 written randomly (ssdup+ buffers most of it), then rewritten
    // sequentially (ssdup+ routes most of that to the capacity tier). A
    // rewrite of a buffered block goes to the log all the same (the write
    // buffer's overlap rule), so the second phase sends at least what the
    // first buffered. Every block is rewritten once in the second phase and
    // the newest write wins, so what stays indexed is exactly what the
    // second phase sent to the fast tier.
    let mut c = config();
    c.phases = vec![
        phase(IorPattern::SegmentedRandom, 1),
        phase(IorPattern::SegmentedContiguous, 1),
    ];
    let analysis = analyse(&c).unwrap();
    let plus = analysis
        .policies
        .iter()
        .find(|p| p.policy == RedirectPolicy::SsdupPlus)
        .unwrap();
    assert!(plus.fast_bytes_per_phase[0] > 0);
    assert!(plus.fast_bytes_per_phase[1] >= plus.fast_bytes_per_phase[0]);
    assert_eq!(
        plus.index_extents * 256 * 1024,
        plus.fast_bytes_per_phase[1]
    );
}

/// sluice's `cost` rule judges each file by what its own requests cost the
/// disk in arrival order: a single sequential writer is left on the
/// capacity tier; random writers, and sixteen writers interleaving their
/// segments of one file (a seek between every two requests), are buffered
/// from their first 4 requests on. In the mixed phase (a single writer's
/// file and a random instance's file at once) the two are routed apart.
#[test]
fn cost_routes_each_file_by_what_the_disk_would_pay() {
    let single = |pattern, file| {
        let mut p = phase(pattern, file);
        p.instances[0].processes = 1;
        p
    };
    let mut c = config();
    let mut mixed = phase(IorPattern::SegmentedRandom, 6);
    mixed
        .instances
        .extend(single(IorPattern::SegmentedContiguous, 5).instances);
    mixed.name = "mixed".to_string();
    c.phases = vec![
        single(IorPattern::SegmentedContiguous, 1),
        phase(IorPattern::SegmentedContiguous, 2),
        phase(IorPattern::SegmentedRandom, 3),
        phase(IorPattern::Strided, 4),
        mixed,
    ];
    c.policies = vec![RedirectPolicy::COST];
    let analysis = analyse(&c).unwrap();
    let cost = &analysis.policies[0];
    let share = |p: usize| cost.fast_bytes_per_phase[p] as f64 / cost.bytes_per_phase[p] as f64;
    assert_eq!(share(0), 0.0, "one sequential writer stays on the disk");
    for p in 1..4 {
        assert!(share(p) >= 0.98, "phase {p} buffered: {}", share(p));
    }
    // Mixed: half the bytes are the random file's, all but its first
    // window buffered; none of the sequential file's.
    assert!((0.49..=0.5).contains(&share(4)), "mixed: {}", share(4));
}
