//! The random percentages of SSDUP+ §2.2 (Fig. 5): IOR with 16 processes,
//! 256 KiB requests and 128-request streams gives S = 15 (11%) for
//! segmented-contiguous, S = 57 (45%) for strided and S = 127 (100%) for
//! segmented-random, computed by the policy crate's detector on traces from
//! this crate's generators.

use sluice_policy::detector::{random_factor, DetectorConfig, StreamDetector, StreamSummary};
use sluice_policy::{FileId, WriteRequest};
use sluice_sim::workload::{ior_trace, Arrival, Ior, IorPattern};

const KIB: u64 = 1024;
const GIB: u64 = 1024 * 1024 * 1024;

fn ior(pattern: IorPattern, file: u64, processes: u32, file_bytes: u64) -> Ior {
    Ior {
        pattern,
        file: FileId(file),
        processes,
        request_bytes: 256 * KIB,
        file_bytes,
        seed: 2020,
    }
}

fn streams(trace: &[WriteRequest]) -> Vec<StreamSummary> {
    let mut detector = StreamDetector::new(DetectorConfig::default()).unwrap();
    trace
        .iter()
        .filter_map(|r| detector.handle_write(*r))
        .collect()
}

/// "11%" in the paper is 15/127 = 11.8% printed without its fraction.
fn paper_percent(s: &StreamSummary) -> u32 {
    (s.percentage() * 100.0) as u32
}

#[test]
fn segmented_contiguous_is_15_seeks_11_percent() {
    let trace = ior_trace(
        &[ior(IorPattern::SegmentedContiguous, 1, 16, 16 * GIB)],
        Arrival::Lockstep,
    )
    .unwrap();
    let all = streams(&trace);
    assert_eq!(all.len(), 65536 / 128);
    for s in &all {
        assert_eq!(s.random_factor, 15, "stream {}", s.index);
        assert_eq!(paper_percent(s), 11);
    }
    // Sorting is what makes it sequential: any interleaving of the 16
    // sequential writers gives one run per process present in the stream.
    let random = ior_trace(
        &[ior(IorPattern::SegmentedContiguous, 1, 16, GIB)],
        Arrival::Random {
            seed: 3,
            max_lead: 4,
        },
    )
    .unwrap();
    let all = streams(&random);
    assert!(all.iter().all(|s| s.random_factor <= 15));
    assert!(all.iter().filter(|s| s.random_factor == 15).count() * 10 >= all.len() * 9);
}

#[test]
fn segmented_random_is_127_seeks_100_percent() {
    let trace = ior_trace(
        &[ior(IorPattern::SegmentedRandom, 1, 16, 16 * GIB)],
        Arrival::Lockstep,
    )
    .unwrap();
    let all = streams(&trace);
    assert_eq!(all[0].random_factor, 127);
    assert_eq!(paper_percent(&all[0]), 100);
    // Over all 512 streams, adjacency by chance is rare: (fixed seed).
    let mean = all.iter().map(|s| f64::from(s.random_factor)).sum::<f64>() / all.len() as f64;
    assert!(mean > 126.5, "mean S {mean}");
}

/// The paper does not say in what order its strided requests arrived, and S
/// depends on it: in perfect lockstep a strided job is sequential after
/// sorting (S = 0). The paper's S = 57 corresponds to processes that have
/// drifted apart. Here process `j` is `d_j = floor(10·j / 3)` iterations
/// behind process 0, and each contributes 8 consecutive iterations to the
/// stream. Block (i, j) is adjacent to (i, j+1) when both are present, which
/// happens for `8 - (d_{j+1} - d_j)` iterations: the lags grow by 3, 3, 4,
/// ..., so 10 pairs share 5 iterations and 5 pairs share 4, 70 adjacent
/// pairs in all, and no (i, 15) -> (i+1, 0) pair is present (d_15 = 50).
/// 128 requests in 128 - 70 = 58 runs: S = 57, 45%.
#[test]
fn strided_with_drifting_processes_is_57_seeks_45_percent() {
    let processes = 16u64;
    let request = 256 * KIB;
    let mut stream = Vec::new();
    for j in 0..processes {
        let lag = (10 * j) / 3;
        for k in 0..8 {
            let iteration = 60 - lag + k;
            stream.push(WriteRequest {
                file: FileId(1),
                offset: (iteration * processes + j) * request,
                len: request,
            });
        }
    }
    assert_eq!(stream.len(), 128);
    let s = streams(&stream);
    assert_eq!(s[0].random_factor, 57);
    assert_eq!(
        paper_percent(&s[0]),
        44,
        "57/127 = 44.9%, printed as 45% in the paper"
    );
    assert_eq!((s[0].percentage() * 100.0).round(), 45.0);

    // The same job in lockstep: sequential after sorting.
    let lockstep = ior_trace(&[ior(IorPattern::Strided, 1, 16, GIB)], Arrival::Lockstep).unwrap();
    assert!(streams(&lockstep).iter().all(|s| s.random_factor == 0));
}

/// "In the mixed load, the random factor exhibits a superimposed
/// characteristic": S of a mixed stream is S of each instance's part plus
/// one seek for the second file.
#[test]
fn mixed_load_superimposes_the_parts() {
    let trace = ior_trace(
        &[
            ior(IorPattern::SegmentedContiguous, 1, 16, 8 * GIB),
            ior(IorPattern::SegmentedRandom, 2, 16, 8 * GIB),
        ],
        Arrival::Random {
            seed: 11,
            max_lead: 8,
        },
    )
    .unwrap();
    for chunk in trace.chunks_exact(128).take(64) {
        let mut whole = chunk.to_vec();
        let mut contiguous: Vec<_> = chunk
            .iter()
            .filter(|r| r.file == FileId(1))
            .copied()
            .collect();
        let mut random: Vec<_> = chunk
            .iter()
            .filter(|r| r.file == FileId(2))
            .copied()
            .collect();
        let both = usize::from(!contiguous.is_empty() && !random.is_empty()) as u32;
        assert_eq!(
            random_factor(&mut whole),
            random_factor(&mut contiguous) + random_factor(&mut random) + both
        );
    }
    // And it lands between the pure patterns.
    let s = streams(&trace);
    let mean = s.iter().map(|s| s.percentage()).sum::<f64>() / s.len() as f64;
    assert!(mean > 0.4 && mean < 0.9, "mixed mean {mean}");
}
