//! Hot-path cost per write request: stream grouping + random factor + extent
//! index insert, the two costs of SSDUP+ Table 1 ("group cost" and "AVL
//! cost"), for 32 KiB to 512 KiB requests.
//!
//! Workload as in the paper's overhead analysis: a 2 GiB segmented-random
//! IOR write (16 processes), every request buffered, so every request is
//! grouped and indexed. Each measured iteration starts from an empty
//! detector and index and writes the whole 2 GiB.
//!
//! Run: `cargo bench -p sluice-policy --bench hot_path`. After criterion's
//! own report it prints a table of ns per request beside the paper's figure
//! (Table 1: (group + AVL cost) / requests).
//! `-- --quick` gives a faster, rougher run.

// A benchmark measures wall-clock time; the policy code it calls does not.
#![allow(clippy::disallowed_methods)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BatchSize, BenchmarkId, Criterion, Throughput};
use sluice_policy::detector::{DetectorConfig, StreamDetector};
use sluice_policy::extent_index::{Extent, ExtentIndex, ESTIMATED_BYTES_PER_EXTENT};
use sluice_policy::{FileId, LogLocation, RegionId, WriteRequest};

const KIB: u64 = 1024;
const TOTAL_BYTES: u64 = 2 * 1024 * 1024 * 1024;
const PROCESSES: u64 = 16;

/// (request KiB, paper group ms, paper AVL ms) from SSDUP+ Table 1.
const PAPER: [(u64, f64, f64); 5] = [
    (32, 29.1, 93.4),
    (64, 12.5, 44.2),
    (128, 15.9, 41.8),
    (256, 9.0, 21.2),
    (512, 6.1, 9.5),
];

/// Segmented-random IOR trace, processes interleaved round robin; the
/// random order comes from a fixed LCG so every run measures the same trace.
fn trace(request_bytes: u64) -> Vec<WriteRequest> {
    let per_process = TOTAL_BYTES / request_bytes / PROCESSES;
    let mut orders: Vec<Vec<u64>> = Vec::new();
    let mut state = 0x2020_u64;
    for p in 0..PROCESSES {
        let mut blocks: Vec<u64> = (0..per_process).map(|k| p * per_process + k).collect();
        for i in (1..blocks.len()).rev() {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let j = ((state >> 33) % (i as u64 + 1)) as usize;
            blocks.swap(i, j);
        }
        orders.push(blocks);
    }
    (0..per_process as usize)
        .flat_map(|k| orders.iter().map(move |o| o[k]))
        .map(|block| WriteRequest {
            file: FileId(1),
            offset: block * request_bytes,
            len: request_bytes,
        })
        .collect()
}

/// Which part of the hot path to run.
#[derive(Clone, Copy)]
enum Part {
    Both,
    Detector,
    Index,
}

/// The measured work: group and index every request, as a log append.
fn run(trace: &[WriteRequest], detector: &mut StreamDetector, index: &mut ExtentIndex) {
    run_part(trace, detector, index, Part::Both)
}

fn run_part(
    trace: &[WriteRequest],
    detector: &mut StreamDetector,
    index: &mut ExtentIndex,
    part: Part,
) {
    let mut log_offset = 0u64;
    for (seq, request) in trace.iter().enumerate() {
        if !matches!(part, Part::Index) {
            black_box(detector.handle_write(*request));
        }
        if matches!(part, Part::Detector) {
            continue;
        }
        index.insert(
            request.file,
            Extent {
                file_offset: request.offset,
                len: request.len as u32,
                location: LogLocation {
                    region: RegionId(0),
                    offset: log_offset,
                },
                seq: seq as u64,
            },
        );
        log_offset += request.len;
    }
}

fn fresh() -> (StreamDetector, ExtentIndex) {
    (
        StreamDetector::new(DetectorConfig::default()).expect("default config is valid"),
        ExtentIndex::new(),
    )
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("detector+index per 2 GiB");
    group.sample_size(10);
    for (kib, _, _) in PAPER {
        let trace = trace(kib * KIB);
        group.throughput(Throughput::Elements(trace.len() as u64));
        group.bench_with_input(
            BenchmarkId::from_parameter(format!("{kib}KiB")),
            &trace,
            |b, trace| {
                b.iter_batched(
                    fresh,
                    |(mut detector, mut index)| {
                        run(trace, &mut detector, &mut index);
                        (detector, index)
                    },
                    BatchSize::LargeInput,
                )
            },
        );
    }
    group.finish();
}

/// Median of `runs` timed passes over the whole trace, in ns per request.
fn ns_per_request(trace: &[WriteRequest], runs: usize, part: Part) -> (f64, f64, f64) {
    let mut samples: Vec<f64> = (0..runs)
        .map(|_| {
            let (mut detector, mut index) = fresh();
            let start = Instant::now();
            run_part(trace, &mut detector, &mut index, part);
            let elapsed = start.elapsed();
            black_box(&index);
            elapsed.as_nanos() as f64 / trace.len() as f64
        })
        .collect();
    samples.sort_by(f64::total_cmp);
    (
        samples[0],
        samples[samples.len() / 2],
        samples[samples.len() - 1],
    )
}

fn table(runs: usize) {
    println!();
    println!("Hot path: group + random factor + extent-index insert, 2 GiB segmented-random, {runs} runs");
    println!(
        "{:>8} {:>9} {:>12} {:>10} {:>10} {:>10} {:>10} {:>14} {:>11}",
        "request",
        "requests",
        "ns/req med",
        "min",
        "max",
        "detector",
        "index",
        "paper ns/req",
        "paper/ours"
    );
    for (kib, group_ms, avl_ms) in PAPER {
        let trace = trace(kib * KIB);
        let (min, median, max) = ns_per_request(&trace, runs, Part::Both);
        let (_, detector, _) = ns_per_request(&trace, runs, Part::Detector);
        let (_, index, _) = ns_per_request(&trace, runs, Part::Index);
        let paper = (group_ms + avl_ms) * 1e6 / trace.len() as f64;
        println!(
            "{:>5}KiB {:>9} {:>12.1} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>14.0} {:>10.0}x",
            kib,
            trace.len(),
            median,
            min,
            max,
            detector,
            index,
            paper,
            paper / median
        );
    }
    println!("index memory estimate: {ESTIMATED_BYTES_PER_EXTENT} B per extent (paper: 24-56 B per request)");
    println!(
        "detector and index columns: medians of each part run alone; target: < 100 ns per request"
    );
}

fn main() {
    let mut criterion = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    bench(&mut criterion);
    criterion.final_summary();
    // `cargo test --benches` runs benches in test mode: keep that fast.
    if std::env::args().any(|a| a == "--bench") {
        table(11);
    }
}
