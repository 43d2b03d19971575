//! Per-process scripts of every benchmark generator, checked against the
//! paper descriptions: each byte written exactly once (or the HPIO spacing
//! left exactly), each process's order as the benchmark issues it,
//! barriers that line up, and the `for_total_bytes` helpers landing near
//! their target.

use core::time::Duration;

use proptest::prelude::*;
use sluice_policy::{FileId, WriteRequest};
use sluice_sim::workload::{
    Hpio, Ior, IorMpiIo, IorPattern, Job, MpiIoTest, MpiTileIo, Op, TileDecomposition,
};

const KIB: u64 = 1024;
const GIB: u64 = 1024 * 1024 * 1024;

/// The writes of one process, in issue order.
fn writes(ops: &[Op]) -> Vec<WriteRequest> {
    ops.iter()
        .filter_map(|op| match op {
            Op::Write(r) => Some(*r),
            _ => None,
        })
        .collect()
}

/// All writes of a job as sorted `(offset, len)` pairs.
fn sorted_extents(job: &Job) -> Vec<(u64, u64)> {
    let mut extents: Vec<(u64, u64)> = job
        .processes
        .iter()
        .flat_map(|p| writes(p))
        .map(|r| (r.offset, r.len))
        .collect();
    extents.sort_unstable();
    extents
}

/// Assert the writes tile `[0, total)` with no gap and no overlap.
fn assert_tiles(job: &Job, total: u64) {
    assert_spaced(job, total, 0);
}

/// Assert the sorted writes start at 0, are exactly `spacing` apart and
/// the last ends at `end`.
fn assert_spaced(job: &Job, end: u64, spacing: u64) {
    let extents = sorted_extents(job);
    assert!(!extents.is_empty(), "{}: no writes", job.name);
    let mut expected_start = 0;
    for (i, &(offset, len)) in extents.iter().enumerate() {
        assert_eq!(offset, expected_start, "{}: write {i} misplaced", job.name);
        assert!(len > 0, "{}: empty write", job.name);
        expected_start = offset + len + spacing;
    }
    let (offset, len) = extents[extents.len() - 1];
    assert_eq!(offset + len, end, "{}: last write ends elsewhere", job.name);
}

/// `bytes_written` and `requests` agree with a direct count of the ops.
fn assert_counts(job: &Job) {
    let all = job.processes.iter().flatten();
    let requests = all
        .clone()
        .filter(|op| matches!(op, Op::Write(_) | Op::Read(_)))
        .count() as u64;
    let bytes: u64 = all
        .filter_map(|op| match op {
            Op::Write(r) => Some(r.len),
            _ => None,
        })
        .sum();
    assert_eq!(job.requests(), requests, "{}", job.name);
    assert_eq!(job.bytes_written(), bytes, "{}", job.name);
}

/// Each process's writes are contiguous and ascending; returns each
/// process's `[start, end)`.
fn assert_each_process_sequential(job: &Job) -> Vec<(u64, u64)> {
    job.processes
        .iter()
        .enumerate()
        .map(|(p, ops)| {
            let w = writes(ops);
            for pair in w.windows(2) {
                assert_eq!(
                    pair[1].offset,
                    pair[0].end(),
                    "{}: process {p} not sequential",
                    job.name
                );
            }
            (w[0].offset, w[w.len() - 1].end())
        })
        .collect()
}

fn barriers(ops: &[Op]) -> usize {
    ops.iter().filter(|op| matches!(op, Op::Barrier)).count()
}

#[test]
fn ior_jobs_write_every_byte_once_in_per_process_order() {
    for pattern in IorPattern::ALL {
        let ior = Ior {
            pattern,
            file: FileId(3),
            processes: 8,
            request_bytes: 256 * KIB,
            file_bytes: 8 * 16 * 256 * KIB,
            seed: 11,
        };
        let job = ior.job(pattern.name()).unwrap();
        assert_eq!(job.processes.len(), 8);
        assert_tiles(&job, ior.file_bytes);
        assert_counts(&job);
        assert_eq!(job.requests(), 8 * 16);
        let per_process = ior.per_process().unwrap();
        for (ops, requests) in job.processes.iter().zip(&per_process) {
            assert_eq!(&writes(ops), requests, "{pattern}: issue order kept");
            assert_eq!(barriers(ops), 0);
        }
    }
}

#[test]
fn mpi_io_test_iterations_cover_consecutive_spans_with_one_barrier_each() {
    let test = MpiIoTest {
        file: FileId(1),
        processes: 14,
        chunk_bytes: 64 * KIB,
        iterations: 9,
    };
    let job = test.job("mpi-io-test").unwrap();
    let span = 14 * 64 * KIB;
    assert_tiles(&job, 9 * span);
    assert_counts(&job);
    assert_eq!(job.bytes_written(), 9 * span);
    assert_eq!(job.processes.len(), 14);
    for (rank, ops) in job.processes.iter().enumerate() {
        assert_eq!(barriers(ops), 9, "rank {rank}");
        assert_eq!(ops.len(), 18, "rank {rank}: only writes and barriers");
        for (i, step) in ops.chunks(2).enumerate() {
            let Op::Write(r) = step[0] else {
                panic!(
                    "rank {rank} iteration {i}: expected a write, got {:?}",
                    step[0]
                );
            };
            assert_eq!(step[1], Op::Barrier, "rank {rank} iteration {i}");
            // Iteration i stays inside its own contiguous span, at the
            // rank's slot.
            let i = i as u64;
            assert_eq!(r.offset, i * span + rank as u64 * 64 * KIB);
            assert_eq!(r.len, 64 * KIB);
            assert!(r.offset >= i * span && r.end() <= (i + 1) * span);
        }
    }
}

#[test]
fn ior_mpi_io_gives_each_process_its_contiguous_nth_in_order() {
    let bench = IorMpiIo {
        file: FileId(2),
        processes: 14,
        request_bytes: 64 * KIB,
        file_bytes: 14 * 64 * KIB * 20,
    };
    let job = bench.job("ior-mpi-io").unwrap();
    assert_tiles(&job, bench.file_bytes);
    assert_counts(&job);
    assert_eq!(job.requests(), 14 * 20);
    let chunk = bench.file_bytes / 14;
    let ranges = assert_each_process_sequential(&job);
    for (p, &range) in ranges.iter().enumerate() {
        let p = p as u64;
        assert_eq!(range, (p * chunk, (p + 1) * chunk));
        assert!(writes(&job.processes[p as usize])
            .iter()
            .all(|r| r.len == 64 * KIB && r.file == FileId(2)));
    }
}

#[test]
fn ior_mpi_io_refuses_a_file_it_cannot_split_and_suggests_sizes() {
    let bench = IorMpiIo {
        file: FileId(2),
        processes: 14,
        request_bytes: 64 * KIB,
        file_bytes: 20 * GIB,
    };
    let err = bench.job("x").unwrap_err();
    let unit = 14 * 64 * KIB;
    let below = 20 * GIB / unit * unit;
    assert!(err.0.contains("not a positive multiple"), "{err}");
    assert!(
        err.0
            .contains(&format!("use {below} B or {} B", below + unit)),
        "{err}"
    );
    let fixed = IorMpiIo {
        file_bytes: below,
        ..bench
    };
    assert_eq!(fixed.job("x").unwrap().bytes_written(), below);
    assert!(IorMpiIo {
        request_bytes: 0,
        ..bench
    }
    .job("x")
    .is_err());
}

fn tile(tiles_x: u32, tiles_y: u32) -> MpiTileIo {
    MpiTileIo {
        file: FileId(4),
        processes: tiles_x * tiles_y,
        tiles_x,
        tiles_y,
        tile_elements_x: 5,
        tile_elements_y: 3,
        element_bytes: 4 * KIB,
    }
}

#[test]
fn mpi_tile_io_one_d_tiles_are_contiguous_bands_in_rank_order() {
    let t = tile(1, 8);
    let job = t.job("tile-1d").unwrap();
    let tile_bytes = 5 * 3 * 4 * KIB;
    assert_tiles(&job, 8 * tile_bytes);
    assert_counts(&job);
    assert_eq!(job.requests(), 8 * 3, "one request per tile row");
    let ranges = assert_each_process_sequential(&job);
    for (p, &range) in ranges.iter().enumerate() {
        let p = p as u64;
        assert_eq!(range, (p * tile_bytes, (p + 1) * tile_bytes));
    }
}

#[test]
fn mpi_tile_io_two_d_rows_are_a_dataset_row_apart() {
    let t = tile(3, 2);
    let job = t.job("tile-2d").unwrap();
    let row_request_bytes = 5 * 4 * KIB;
    let dataset_row_bytes = 3 * row_request_bytes;
    assert_tiles(&job, 6 * 5 * 3 * 4 * KIB);
    assert_counts(&job);
    for (p, ops) in job.processes.iter().enumerate() {
        let w = writes(ops);
        assert_eq!(w.len(), 3, "process {p}: one request per tile row");
        let (column, row) = (p as u64 % 3, p as u64 / 3);
        // First row of the tile: its tile row's first dataset row, shifted
        // to its tile column.
        assert_eq!(
            w[0].offset,
            row * 3 * dataset_row_bytes + column * row_request_bytes
        );
        for pair in w.windows(2) {
            assert_eq!(pair[1].offset - pair[0].offset, dataset_row_bytes);
        }
        assert!(w.iter().all(|r| r.len == row_request_bytes));
    }
}

#[test]
fn mpi_tile_io_refuses_a_grid_that_does_not_match_the_processes() {
    let t = MpiTileIo {
        processes: 7,
        ..tile(2, 3)
    };
    let err = t.job("x").unwrap_err();
    assert!(err.0.contains("2 × 3 tile grid has 6 tiles"), "{err}");
    assert!(err.0.contains("7 processes"), "{err}");
    let zero = MpiTileIo {
        element_bytes: 0,
        ..tile(2, 3)
    };
    assert!(zero.job("x").unwrap_err().0.contains("element size is 0"));
}

#[test]
fn mpi_tile_io_at_paper_scale_is_exact_and_tiles_the_file() {
    // SSDUP+ §3.4: 16, 32, 64, 128 processes, 4 KiB elements, 16 GB each,
    // a 1-D and a 2-D instance.
    for processes in [16, 32, 64, 128] {
        for decomposition in [TileDecomposition::OneD, TileDecomposition::TwoD] {
            let t =
                MpiTileIo::for_total_bytes(FileId(5), processes, decomposition, 4 * KIB, 16 * GIB)
                    .unwrap();
            assert_eq!(t.tiles_x * t.tiles_y, processes);
            if decomposition == TileDecomposition::OneD {
                assert_eq!((t.tiles_x, t.tiles_y), (1, processes));
            } else {
                assert!(t.tiles_x > 1 && t.tiles_y > 1, "{t:?}");
            }
            assert!(t.tile_elements_x >= t.tile_elements_y);
            assert!(
                t.tile_elements_x <= 2 * t.tile_elements_y,
                "near-square tile: {t:?}"
            );
            let job = t.job("paper").unwrap();
            assert_eq!(job.bytes_written(), 16 * GIB, "{t:?}");
            assert_tiles(&job, 16 * GIB);
        }
    }
}

#[test]
fn mpi_tile_io_for_total_bytes_stays_within_the_documented_bound() {
    // Awkward sizes: 10 GB decimal over 14 processes.
    for (processes, total) in [(14, 10_000_000_000), (9, 7_600_000_000), (3, 1_000_003)] {
        for decomposition in [TileDecomposition::OneD, TileDecomposition::TwoD] {
            let t = MpiTileIo::for_total_bytes(FileId(5), processes, decomposition, 4 * KIB, total)
                .unwrap();
            let job = t.job("awkward").unwrap();
            let unit = u64::from(processes) * 4 * KIB;
            let side = ((total + unit / 2) / unit).isqrt();
            let bound = unit * (1 + side) / 2;
            assert!(
                job.bytes_written().abs_diff(total) <= bound,
                "{t:?}: {} vs {total}",
                job.bytes_written()
            );
            assert_tiles(&job, job.bytes_written());
        }
    }
    // At the paper's scale the bound is well under 1 %.
    let t = MpiTileIo::for_total_bytes(
        FileId(5),
        14,
        TileDecomposition::TwoD,
        4 * KIB,
        16_000_000_000,
    )
    .unwrap();
    let written = t.job("x").unwrap().bytes_written();
    assert!(written.abs_diff(16_000_000_000) * 100 < 16_000_000_000);
}

#[test]
fn mpi_tile_io_for_total_bytes_rejects_impossible_inputs() {
    let err = MpiTileIo::for_total_bytes(FileId(5), 16, TileDecomposition::OneD, 4 * KIB, 60 * KIB)
        .unwrap_err();
    assert!(err.0.contains("less than one 4096 B element"), "{err}");
    assert!(err.0.contains("at least 65536 B"), "{err}");
    let err = MpiTileIo::for_total_bytes(FileId(5), 0, TileDecomposition::TwoD, 4 * KIB, GIB)
        .unwrap_err();
    assert!(err.0.contains("process count is 0"), "{err}");
    let err =
        MpiTileIo::for_total_bytes(FileId(5), 4, TileDecomposition::TwoD, 0, GIB).unwrap_err();
    assert!(err.0.contains("element size is 0"), "{err}");
}

fn hpio(file_contiguous: bool, spacing: u64) -> Hpio {
    Hpio {
        file: FileId(6),
        processes: 4,
        region_bytes: 32 * KIB,
        region_count: 5,
        region_spacing_bytes: spacing,
        file_contiguous,
    }
}

#[test]
fn hpio_writes_every_region_once_with_exactly_the_spacing_between() {
    for file_contiguous in [true, false] {
        for spacing in [0, 1, 8 * KIB] {
            let h = hpio(file_contiguous, spacing);
            let job = h.job("hpio").unwrap();
            let stride = 32 * KIB + spacing;
            assert_spaced(&job, 4 * 5 * stride - spacing, spacing);
            assert_counts(&job);
            assert_eq!(job.requests(), 4 * 5);
            assert_eq!(job.bytes_written(), 4 * 5 * 32 * KIB);
        }
    }
}

#[test]
fn hpio_c_c_keeps_each_process_in_its_block_and_c_nc_interleaves() {
    let spacing = 8 * KIB;
    let stride = 32 * KIB + spacing;
    let cc = hpio(true, spacing).job("c-c").unwrap();
    let cnc = hpio(false, spacing).job("c-nc").unwrap();
    for p in 0..4u64 {
        let block: Vec<u64> = writes(&cc.processes[p as usize])
            .iter()
            .map(|r| r.offset)
            .collect();
        assert_eq!(
            block,
            (0..5).map(|k| (p * 5 + k) * stride).collect::<Vec<_>>(),
            "c-c process {p}"
        );
        let interleaved: Vec<u64> = writes(&cnc.processes[p as usize])
            .iter()
            .map(|r| r.offset)
            .collect();
        assert_eq!(
            interleaved,
            (0..5).map(|k| (k * 4 + p) * stride).collect::<Vec<_>>(),
            "c-nc process {p}"
        );
    }
}

#[test]
fn hpio_for_total_bytes_matches_the_paper_and_bounds_the_error() {
    // SSDUP+ §3.3: 32 processes, 32–256 KiB regions, about 8 GB, spacing 0.
    for region_bytes in [32 * KIB, 64 * KIB, 128 * KIB, 256 * KIB] {
        for file_contiguous in [true, false] {
            let h = Hpio::for_total_bytes(FileId(7), 32, region_bytes, 8 * GIB, file_contiguous)
                .unwrap();
            assert_eq!(h.region_spacing_bytes, 0);
            assert_eq!(h.file_contiguous, file_contiguous);
            assert_eq!(h.region_count, 8 * GIB / (32 * region_bytes));
            let job = h.job("paper").unwrap();
            assert_tiles(&job, 8 * GIB);
        }
    }
    // 8 GB decimal does not divide: within half a region per process.
    for region_bytes in [32 * KIB, 96 * KIB, 256 * KIB] {
        let h = Hpio::for_total_bytes(FileId(7), 32, region_bytes, 8_000_000_000, false).unwrap();
        let written = h.job("x").unwrap().bytes_written();
        assert!(written.abs_diff(8_000_000_000) <= 32 * region_bytes / 2);
    }
}

#[test]
fn hpio_rejects_impossible_inputs_with_a_message() {
    let err = Hpio::for_total_bytes(FileId(7), 32, 256 * KIB, 4 * 1024 * KIB, true).unwrap_err();
    assert!(err.0.contains("less than one 262144 B region"), "{err}");
    assert!(Hpio::for_total_bytes(FileId(7), 32, 0, GIB, true)
        .unwrap_err()
        .0
        .contains("region size is 0"));
    assert!(Hpio::for_total_bytes(FileId(7), 0, KIB, GIB, true).is_err());
    let none = Hpio {
        region_count: 0,
        ..hpio(true, 0)
    };
    assert!(none.job("x").unwrap_err().0.contains("region count is 0"));
}

fn segmented_random(file: u64, seed: u64) -> Job {
    Ior {
        pattern: IorPattern::SegmentedRandom,
        file: FileId(file),
        processes: 4,
        request_bytes: 10,
        file_bytes: 4 * 10 * 3,
        seed,
    }
    .job(&format!("run-{file}"))
    .unwrap()
}

#[test]
fn then_runs_the_second_job_after_a_barrier_and_the_gap() {
    let first = segmented_random(1, 1);
    let second = segmented_random(2, 2);
    let gap = Duration::from_secs(10);
    let both = first.clone().then(gap, second.clone()).unwrap();
    assert_eq!(both.name, first.name);
    assert_eq!(both.start_after, first.start_after);
    assert_eq!(both.processes.len(), 4);
    for p in 0..4 {
        let mut expected = first.processes[p].clone();
        expected.push(Op::Barrier);
        expected.push(Op::Compute(gap));
        expected.extend(second.processes[p].iter().copied());
        assert_eq!(both.processes[p], expected, "process {p}");
    }
    assert_eq!(
        both.bytes_written(),
        first.bytes_written() + second.bytes_written()
    );
    assert_eq!(both.requests(), first.requests() + second.requests());
    assert_counts(&both);

    // Zero compute still separates the runs.
    let back_to_back = first.then(Duration::ZERO, second).unwrap();
    assert!(back_to_back.processes[0].contains(&Op::Compute(Duration::ZERO)));
}

#[test]
fn then_keeps_barrier_counts_aligned_across_processes() {
    let test = MpiIoTest {
        file: FileId(1),
        processes: 3,
        chunk_bytes: 8,
        iterations: 4,
    };
    let twice = test
        .job("a")
        .unwrap()
        .then(Duration::from_secs(1), test.job("b").unwrap())
        .unwrap();
    for ops in &twice.processes {
        assert_eq!(barriers(ops), 4 + 1 + 4);
    }
}

#[test]
fn then_refuses_mismatched_process_counts() {
    let four = segmented_random(1, 1);
    let eight = Ior {
        pattern: IorPattern::Strided,
        file: FileId(2),
        processes: 8,
        request_bytes: 10,
        file_bytes: 80,
        seed: 0,
    }
    .job("eight")
    .unwrap();
    let err = four.then(Duration::from_secs(1), eight).unwrap_err();
    assert!(err.0.contains("(8 processes)"), "{err}");
    assert!(err.0.contains("(4 processes)"), "{err}");
    assert!(err.0.contains("same process count"), "{err}");
}

#[test]
fn counts_include_reads_and_skip_compute_and_barriers() {
    let r = WriteRequest {
        file: FileId(1),
        offset: 0,
        len: 100,
    };
    let job = Job {
        name: "hand-built".into(),
        processes: vec![
            vec![
                Op::Write(r),
                Op::Compute(Duration::from_secs(1)),
                Op::Read(r),
            ],
            vec![Op::Barrier, Op::Write(r)],
        ],
        start_after: Duration::from_secs(5),
    };
    assert_eq!(job.requests(), 3);
    assert_eq!(job.bytes_written(), 200);
    assert_eq!(job.bytes_read(), 100);
}

#[test]
fn an_op_is_at_most_32_bytes() {
    assert!(core::mem::size_of::<Op>() <= 32);
}

proptest! {
    #[test]
    fn any_valid_tile_grid_tiles_its_dataset(
        tiles_x in 1u32..6,
        tiles_y in 1u32..6,
        tile_elements_x in 1u64..7,
        tile_elements_y in 1u64..7,
        element_bytes in 1u64..9,
    ) {
        let t = MpiTileIo {
            file: FileId(9),
            processes: tiles_x * tiles_y,
            tiles_x,
            tiles_y,
            tile_elements_x,
            tile_elements_y,
            element_bytes,
        };
        let job = t.job("p").unwrap();
        assert_tiles(
            &job,
            u64::from(tiles_x * tiles_y) * tile_elements_x * tile_elements_y * element_bytes,
        );
        let dataset_row_bytes = u64::from(tiles_x) * tile_elements_x * element_bytes;
        for ops in &job.processes {
            let w = writes(ops);
            prop_assert_eq!(w.len() as u64, tile_elements_y);
            for pair in w.windows(2) {
                prop_assert_eq!(pair[1].offset - pair[0].offset, dataset_row_bytes);
            }
        }
    }

    #[test]
    fn any_valid_hpio_leaves_exactly_the_spacing(
        processes in 1u32..6,
        region_bytes in 1u64..50,
        region_count in 1u64..6,
        spacing in 0u64..20,
        file_contiguous: bool,
    ) {
        let h = Hpio {
            file: FileId(9),
            processes,
            region_bytes,
            region_count,
            region_spacing_bytes: spacing,
            file_contiguous,
        };
        let job = h.job("p").unwrap();
        let regions = u64::from(processes) * region_count;
        assert_spaced(&job, regions * (region_bytes + spacing) - spacing, spacing);
        for ops in &job.processes {
            let w = writes(ops);
            prop_assert!(w.windows(2).all(|pair| pair[0].offset < pair[1].offset));
        }
    }

    #[test]
    fn for_total_bytes_helpers_stay_within_their_bounds(
        processes in 1u32..40,
        unit_bytes in 1u64..5000,
        total_bytes in 1u64..50_000_000,
        two_d: bool,
    ) {
        let decomposition = if two_d { TileDecomposition::TwoD } else { TileDecomposition::OneD };
        let unit = u64::from(processes) * unit_bytes;
        match MpiTileIo::for_total_bytes(FileId(1), processes, decomposition, unit_bytes, total_bytes) {
            Ok(t) => {
                prop_assert!(total_bytes >= unit);
                let written = t.job("t").unwrap().bytes_written();
                let elements = (total_bytes + unit / 2) / unit;
                let bound = unit * (1 + elements.isqrt()) / 2;
                prop_assert!(written.abs_diff(total_bytes) <= bound, "{:?} wrote {}", t, written);
            }
            Err(_) => prop_assert!(total_bytes < unit),
        }
        match Hpio::for_total_bytes(FileId(1), processes, unit_bytes, total_bytes, two_d) {
            Ok(h) => {
                let written = h.job("h").unwrap().bytes_written();
                prop_assert!(written.abs_diff(total_bytes) <= unit / 2);
            }
            Err(_) => prop_assert!(total_bytes < unit),
        }
    }
}
