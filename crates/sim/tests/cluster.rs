//! The simulated cluster's books balance under every system, and bad
//! workloads get errors, not hangs.

use std::time::Duration;

use sluice_policy::{FileId, WriteRequest};
use sluice_sim::cluster::{simulate, ClusterConfig, System};
use sluice_sim::workload::{Ior, IorPattern, Job, Op};

const MIB: u64 = 1024 * 1024;

fn ior(pattern: IorPattern, file: u64, mib: u64) -> Job {
    Ior {
        pattern,
        file: FileId(file),
        processes: 16,
        request_bytes: 256 * 1024,
        file_bytes: mib * MIB,
        seed: file,
    }
    .job(pattern.name())
    .unwrap()
}

fn small() -> ClusterConfig {
    ClusterConfig {
        fast_bytes_per_server: 64 * MIB,
        dirty_limit_bytes: 16 * MIB,
        ..ClusterConfig::default()
    }
}

#[test]
fn every_byte_goes_to_exactly_one_tier() {
    let jobs = vec![
        ior(IorPattern::SegmentedContiguous, 1, 256),
        ior(IorPattern::SegmentedRandom, 2, 256),
    ];
    for system in System::ALL {
        let r = simulate(&small(), system, &jobs).unwrap();
        assert_eq!(r.bytes_written, 512 * MIB, "{system}");
        assert_eq!(r.fast_bytes + r.capacity_bytes, r.bytes_written, "{system}");
        assert!(
            r.flushed_bytes <= r.fast_bytes,
            "{system}: flushed {} fast {}",
            r.flushed_bytes,
            r.fast_bytes
        );
        // A region being flushed stays indexed until its flush completes.
        assert!(r.buffered_at_end_bytes <= r.fast_bytes, "{system}");
        assert!(r.jobs.iter().all(|j| j.end_ns > j.start_ns), "{system}");
        match system {
            System::Baseline => assert_eq!(r.fast_bytes, 0),
            System::BurstBuffer => {
                // One 64 MiB region against 256 MiB per I/O node: it
                // fills, starts flushing, and writes go through meanwhile
                // (competing with the flush, so it may not finish first).
                assert!(r.write_through_bytes > 0);
                assert!(r.flushed_bytes > 0);
            }
            System::Ssdup | System::SsdupPlus | System::SluiceCost => {
                // Writers wait for a free region instead of writing through.
                assert_eq!(r.write_through_bytes, 0, "{system}");
            }
        }
    }
}

#[test]
fn a_large_buffer_absorbs_everything_under_the_burst_buffer() {
    let config = ClusterConfig {
        fast_bytes_per_server: 1024 * MIB,
        ..small()
    };
    let r = simulate(
        &config,
        System::BurstBuffer,
        &[ior(IorPattern::SegmentedRandom, 1, 256)],
    )
    .unwrap();
    assert_eq!(r.fast_bytes, r.bytes_written);
    assert_eq!(r.regions_flushed, 0);
    assert_eq!(r.buffered_at_end_bytes, r.bytes_written);
}

#[test]
fn ssdup_plus_keeps_a_sequential_job_on_the_hdd() {
    let r = simulate(
        &small(),
        System::SsdupPlus,
        &[ior(IorPattern::SegmentedContiguous, 1, 256)],
    )
    .unwrap();
    assert_eq!(
        r.fast_bytes, 0,
        "11.8% random streams never beat the threshold"
    );
    assert!(r
        .streams
        .iter()
        .all(|s| (s.percentage - 15.0 / 127.0).abs() < 1e-9 || s.percentage < 0.2));
}

#[test]
fn same_seed_same_run() {
    let jobs = vec![ior(IorPattern::Strided, 1, 128)];
    let a = simulate(&small(), System::SsdupPlus, &jobs).unwrap();
    let b = simulate(&small(), System::SsdupPlus, &jobs).unwrap();
    assert_eq!(a, b);
}

#[test]
fn compute_time_and_barriers_shape_the_timeline() {
    let gap = Duration::from_secs(5);
    let job = ior(IorPattern::SegmentedContiguous, 1, 64)
        .then(gap, ior(IorPattern::SegmentedContiguous, 2, 64))
        .unwrap();
    let r = simulate(&small(), System::Baseline, &[job]).unwrap();
    assert!(
        r.jobs[0].seconds() > 5.0,
        "the compute gap is part of the elapsed time"
    );
}

#[test]
fn unequal_barriers_are_an_error_not_a_hang() {
    let write = Op::Write(WriteRequest {
        file: FileId(1),
        offset: 0,
        len: 4096,
    });
    let job = Job {
        name: "broken".into(),
        processes: vec![
            vec![write, Op::Barrier, write],
            vec![write, Op::Barrier, Op::Barrier, write],
        ],
        start_after: Duration::ZERO,
    };
    // Rank 0 finishes after one barrier, which releases rank 1's second
    // barrier: no hang, and the job completes.
    let r = simulate(&small(), System::Baseline, &[job]).unwrap();
    assert_eq!(r.bytes_written, 4 * 4096);
}

#[test]
fn a_workload_larger_than_the_disk_is_refused_with_advice() {
    let config = ClusterConfig {
        hdd: sluice_devices::hdd::HddConfig {
            capacity_bytes: 64 * MIB,
            ..Default::default()
        },
        ..small()
    };
    let err = simulate(
        &config,
        System::Baseline,
        &[ior(IorPattern::SegmentedContiguous, 1, 256)],
    )
    .unwrap_err();
    assert!(err.0.contains("lower --scale"), "{err}");
}

/// The write buffer's overlap rule in the simulator: a rewrite routed to
/// the HDD over bytes still buffered goes to the log instead (it used to
/// go to the HDD and drop the buffered bytes from the index).
#[test]
fn a_sequential_rewrite_over_buffered_bytes_goes_to_the_log() {
    let job = ior(IorPattern::SegmentedRandom, 1, 64)
        .then(
            Duration::from_millis(1),
            ior(IorPattern::SegmentedContiguous, 1, 64),
        )
        .unwrap();
    // SSDUP's static 45% mark buffers the random phase (SSDUP+'s adaptive
    // threshold needs more streams than this small job has to learn it).
    let r = simulate(&small(), System::Ssdup, &[job]).unwrap();
    assert_eq!(r.fast_bytes + r.capacity_bytes, r.bytes_written);
    assert!(r.forced_to_log_bytes > 0, "{r:?}");
    assert!(r.forced_to_log_bytes <= r.fast_bytes);
    assert_eq!(r.write_through_bytes, 0);
    assert!(
        r.streams.iter().any(|s| !s.buffered),
        "the rewrite is routed to the HDD"
    );
}

/// A write over buffered bytes must reach the log even when it is longer
/// than a region (the write buffer answers `TooLarge`): the I/O node splits
/// it into region-sized pieces, and the process still sees one write.
#[test]
fn a_write_over_buffered_bytes_longer_than_a_region_is_split() {
    let write = |offset, len| {
        Op::Write(WriteRequest {
            file: FileId(1),
            offset,
            len,
        })
    };
    let job = Job {
        name: "overwrite".into(),
        processes: vec![vec![write(0, 4096), write(0, MIB)]],
        start_after: Duration::ZERO,
    };
    // One 64 KiB region per I/O node; the second write is 512 KiB on each.
    let config = ClusterConfig {
        fast_bytes_per_server: 64 * 1024,
        ..small()
    };
    let r = simulate(&config, System::BurstBuffer, &[job]).unwrap();
    assert_eq!(r.bytes_written, MIB + 4096);
    assert_eq!(r.fast_bytes + r.capacity_bytes, r.bytes_written);
    // On the I/O node holding the first write, the pieces overlapping it
    // went to the log; the node without buffered bytes wrote its 512 KiB
    // through (too large for a region, nothing under it).
    assert!(r.fast_bytes >= 4096 + 64 * 1024, "{r:?}");
    assert!(r.write_through_bytes >= MIB / 2, "{r:?}");
}

/// The SSD bytes of `file` in a run.
fn fast_bytes_of(r: &sluice_sim::cluster::RunResult, file: u64) -> u64 {
    r.fast_bytes_by_file
        .iter()
        .find(|(f, _)| *f == FileId(file))
        .map_or(0, |(_, b)| *b)
}

/// sluice's `cost` policy routes per file: beside a random IOR job, a
/// single sequential writer's data stays on the HDD and the random job is
/// buffered from its first window on. SSDUP+ classifies the mixed stream
/// of both and routes it whole, so it buffers the sequential writer's data
/// with the random job's.
#[test]
fn sluice_buffers_random_writers_and_leaves_a_lone_sequential_writer_on_the_hdd() {
    let sequential = Ior {
        pattern: IorPattern::SegmentedContiguous,
        file: FileId(1),
        processes: 1,
        request_bytes: 256 * 1024,
        file_bytes: 64 * MIB,
        seed: 1,
    }
    .job("one-writer")
    .unwrap();
    let jobs = vec![sequential, ior(IorPattern::SegmentedRandom, 2, 256)];
    let config = ClusterConfig {
        fast_bytes_per_server: 1024 * MIB,
        ..small()
    };
    let sluice = simulate(&config, System::SluiceCost, &jobs).unwrap();
    assert_eq!(fast_bytes_of(&sluice, 1), 0, "the sequential writer");
    let random = fast_bytes_of(&sluice, 2);
    // Each I/O node routes a file to the SSD after its first 4 pieces
    // (128 KiB each; measured: 255 of 256 MiB buffered).
    assert!(
        random >= 250 * MIB,
        "random job: {} MiB to SSD",
        random / MIB
    );

    let plus = simulate(&config, System::SsdupPlus, &jobs).unwrap();
    assert!(
        fast_bytes_of(&plus, 1) > 0,
        "SSDUP+ routes whole mixed streams, the sequential writer's pieces too"
    );
}

/// The system's policy is `cost` with its model from the simulated
/// devices, not the emulated defaults.
#[test]
fn sluice_takes_its_cost_model_from_the_devices() {
    use sluice_policy::redirector::RedirectPolicy;
    use sluice_sim::cluster::cost_model;

    let config = ClusterConfig::default();
    let model = cost_model(&config.hdd, &config.ssd);
    // 1 ms track-to-track + half a revolution at 7200 rpm (4.1667 ms).
    assert!((model.capacity_seek.as_secs_f64() - 5.1667e-3).abs() < 1e-6);
    assert_eq!(model.fast_bytes_per_s, 250e6);
    assert_eq!(model.fast_request, Duration::from_micros(60));
    assert_eq!(
        System::SluiceCost.policy(&config),
        RedirectPolicy::Cost(model)
    );

    let mut slow = ClusterConfig::default();
    slow.hdd.rpm = 5400;
    slow.hdd.seek_track_ms = 2.0;
    slow.ssd.write_bytes_per_s = 100e6;
    let m = cost_model(&slow.hdd, &slow.ssd);
    assert!((m.capacity_seek.as_secs_f64() - (2.0 + 30_000.0 / 5400.0) / 1e3).abs() < 1e-9);
    assert_eq!(m.fast_bytes_per_s, 100e6);
    assert_eq!(System::SluiceCost.name(), "sluice");
    assert!(System::SluiceCost.traffic_aware());
}

/// `server_threads`: requests that pile up at an I/O node are taken in a
/// random order, so a strided job's sorted streams get holes they do not
/// have in arrival order; with the threads off, or free whenever a
/// request arrives, the run is the same as without them.
#[test]
fn server_threads_reorder_only_requests_that_pile_up() {
    let mean_random = |threads: u32, per_request: Duration| {
        let config = ClusterConfig {
            server_threads: threads,
            server_request_time: per_request,
            ..small()
        };
        let r = simulate(
            &config,
            System::Baseline,
            &[ior(IorPattern::Strided, 1, 64)],
        )
        .unwrap();
        let p: Vec<f64> = r.streams.iter().map(|s| s.percentage).collect();
        p.iter().sum::<f64>() / p.len().max(1) as f64
    };
    let off = mean_random(0, Duration::ZERO);
    let idle = mean_random(64, Duration::from_nanos(1));
    assert!(
        (idle - off).abs() < 1e-9,
        "free threads reorder nothing: {off} vs {idle}"
    );
    let piled = mean_random(1, Duration::from_millis(5));
    assert!(
        piled > off + 0.05,
        "a saturated thread takes them out of order: {off} vs {piled}"
    );
}
