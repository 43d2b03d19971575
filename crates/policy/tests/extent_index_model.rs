//! Model test of the extent index: random operation sequences applied both to
//! an `ExtentIndex` and to a byte-array model (per file byte: which record's
//! seq, region and log byte holds it, or nothing), compared after every step.
//!
//! Every inserted extent gets its own log location (`op number × 1 MiB`), so
//! the model knows exactly which log byte must back each file byte; a wrong
//! split offset, a lost piece or a wrong winner shows up as a byte mismatch.

use proptest::prelude::*;
use sluice_policy::extent_index::{Extent, ExtentIndex, FlushRun, Piece};
use sluice_policy::{FileId, LogLocation, RegionId};

/// Bytes of each modelled file; operations stay inside (except the ranges
/// that run to `u64::MAX`, which must not disturb anything beyond).
const SIZE: u64 = 4096;
const FILES: usize = 2;
const REGIONS: u32 = 3;
/// Log distance between records, larger than any record.
const RECORD_STRIDE: u64 = 1 << 20;

/// What backs one file byte in the model: (seq, region, log byte offset).
type Byte = Option<(u64, u32, u64)>;

#[derive(Clone, Debug)]
enum Op {
    Insert {
        file: usize,
        offset: u64,
        len: u32,
        /// Seq used when the case runs in shuffled-seq mode.
        random_seq: u64,
        region: u32,
    },
    Invalidate {
        file: usize,
        offset: u64,
        len: u64,
    },
    Truncate {
        file: usize,
        new_size: u64,
    },
    RemoveRegion(u32),
    /// A clean record: drop the file's bytes with a seq below `bound`, in
    /// the whole file or in one of its stretches.
    Clean {
        file: usize,
        bound: u64,
        stretch: Option<usize>,
    },
    RemoveFile(usize),
    Rename {
        from: usize,
        to: usize,
    },
    Lookup {
        file: usize,
        offset: u64,
        len: u64,
    },
}

fn op_strategy() -> impl Strategy<Value = Op> {
    let file = 0..FILES;
    prop_oneof![
        8 => (file.clone(), 0..SIZE, 0u32..=1024, 0u64..16, 0..REGIONS).prop_map(
            |(file, offset, len, random_seq, region)| Op::Insert {
                file,
                offset,
                len,
                random_seq,
                region,
            }
        ),
        2 => (
            file.clone(),
            0..SIZE,
            prop_oneof![0u64..=600, Just(u64::MAX), (u64::MAX - 8)..=u64::MAX],
        )
            .prop_map(|(file, offset, len)| Op::Invalidate { file, offset, len }),
        1 => (file.clone(), 0..=SIZE).prop_map(|(file, new_size)| Op::Truncate { file, new_size }),
        1 => (0..REGIONS).prop_map(Op::RemoveRegion),
        1 => (file.clone(), 0u64..64, proptest::option::of(0usize..8))
            .prop_map(|(file, bound, stretch)| Op::Clean { file, bound, stretch }),
        1 => file.clone().prop_map(Op::RemoveFile),
        1 => (file.clone(), file.clone()).prop_map(|(from, to)| Op::Rename { from, to }),
        2 => (file, 0..SIZE, prop_oneof![0u64..=SIZE, Just(u64::MAX)])
            .prop_map(|(file, offset, len)| Op::Lookup { file, offset, len }),
    ]
}

fn fid(file: usize) -> FileId {
    FileId(file as u64)
}

/// Expands buffered pieces of `[offset, offset + len)` into model bytes
/// `[offset, min(offset + len, SIZE))`, checking that pieces cover the range
/// exactly and in order and that nothing is buffered at or beyond `SIZE`.
fn expand_lookup(index: &ExtentIndex, file: usize, offset: u64, len: u64) -> Vec<Byte> {
    let end = offset.saturating_add(len);
    let mut cursor = offset;
    let mut bytes = Vec::new();
    for piece in index.lookup(fid(file), offset, len) {
        assert_eq!(piece.file_offset(), cursor, "pieces not contiguous");
        assert!(!piece.is_empty(), "empty piece {piece:?}");
        match piece {
            Piece::Buffered {
                file_offset,
                len,
                location,
                seq,
            } => {
                assert!(file_offset + len <= SIZE, "buffered beyond the model");
                for i in 0..len {
                    bytes.push(Some((seq, location.region.0, location.offset + i)));
                }
            }
            Piece::Hole { file_offset, len } => {
                let model_len = SIZE.saturating_sub(file_offset).min(len);
                bytes.extend((0..model_len).map(|_| None));
            }
        }
        cursor = piece.end();
    }
    assert_eq!(cursor, end, "pieces do not reach the end of the range");
    bytes
}

/// Checks flush runs against the model, with and without a region filter.
fn check_flush_runs(
    index: &ExtentIndex,
    file: usize,
    model: &[Byte],
    region: Option<u32>,
    max: u64,
) {
    let runs: Vec<FlushRun> = index
        .flush_runs(fid(file), region.map(RegionId), max)
        .collect();
    let mut seen: Vec<Option<LogLocation>> = vec![None; SIZE as usize];
    let mut prev_end: Option<u64> = None;
    for (i, run) in runs.iter().enumerate() {
        assert!(!run.pieces.is_empty());
        if let Some(prev_end) = prev_end {
            assert!(run.file_offset >= prev_end, "runs out of order");
        }
        let sum: u64 = run.pieces.iter().map(|&(_, len)| u64::from(len)).sum();
        assert_eq!(sum, run.len, "run length differs from its pieces");
        assert!(
            run.len <= max || run.pieces.len() == 1,
            "run of {} bytes over max {max} with {} pieces",
            run.len,
            run.pieces.len()
        );
        // Greedy: a file-contiguous next run exists only if its first piece
        // did not fit.
        if let Some(next) = runs.get(i + 1) {
            if next.file_offset == run.file_offset + run.len {
                assert!(
                    run.len + u64::from(next.pieces[0].1) > max,
                    "runs not merged"
                );
            }
        }
        let mut at = run.file_offset;
        for &(location, len) in &run.pieces {
            if let Some(r) = region {
                assert_eq!(location.region.0, r, "region filter leaked");
            }
            for j in 0..u64::from(len) {
                let slot = &mut seen[at as usize];
                assert!(slot.is_none(), "byte {at} flushed twice");
                *slot = Some(LogLocation {
                    region: location.region,
                    offset: location.offset + j,
                });
                at += 1;
            }
        }
        prev_end = Some(run.file_offset + run.len);
    }
    for (i, (byte, flushed)) in model.iter().zip(&seen).enumerate() {
        let expected = byte
            .filter(|&(_, r, _)| region.is_none_or(|want| want == r))
            .map(|(_, r, addr)| LogLocation {
                region: RegionId(r),
                offset: addr,
            });
        assert_eq!(*flushed, expected, "flush runs wrong at byte {i}");
    }
}

fn check_all(index: &ExtentIndex, model: &[Vec<Byte>], flush_max: u64, flush_region: u32) {
    index.check_invariants();
    let mut total_bytes = 0u64;
    let mut total_extents = 0usize;
    for (file, model_file) in model.iter().enumerate() {
        let got = expand_lookup(index, file, 0, u64::MAX);
        assert_eq!(&got, model_file, "file {file} differs from the model");
        let buffered = model_file.iter().filter(|b| b.is_some()).count() as u64;
        total_bytes += buffered;
        match index.file(&fid(file)) {
            Some(extents) => {
                assert!(buffered > 0, "file {file} kept without extents");
                assert_eq!(extents.buffered_bytes(), buffered);
                let stored = extents.extents().count();
                let pieces = index
                    .lookup(fid(file), 0, u64::MAX)
                    .filter(|p| matches!(p, Piece::Buffered { .. }))
                    .count();
                assert_eq!(extents.extent_count(), stored);
                assert_eq!(stored, pieces);
                total_extents += stored;
            }
            None => assert_eq!(buffered, 0, "file {file} lost"),
        }
        check_flush_runs(index, file, model_file, None, flush_max);
        check_flush_runs(index, file, model_file, Some(flush_region), flush_max);
        // A max that two neighbouring extents fill exactly: they must merge.
        if let Some(extents) = index.file(&fid(file)) {
            let mut iter = extents.extents();
            if let (Some(a), Some(b)) = (iter.next(), iter.next()) {
                let exact_max = u64::from(a.len) + u64::from(b.len);
                check_flush_runs(index, file, model_file, None, exact_max);
            }
        }
    }
    assert_eq!(index.buffered_bytes(), total_bytes);
    assert_eq!(index.extent_count(), total_extents);
    assert_eq!(index.file_count(), index.files().count());
}

fn clear(model_file: &mut [Byte], offset: u64, len: u64) -> u64 {
    let start = offset.min(SIZE);
    let end = offset.saturating_add(len).min(SIZE);
    let mut removed = 0;
    for byte in &mut model_file[start as usize..end as usize] {
        if byte.take().is_some() {
            removed += 1;
        }
    }
    removed
}

fn run(ops: Vec<Op>, increasing_seq: bool, flush_max: u64, flush_region: u32) {
    let mut index = ExtentIndex::new();
    let mut model: Vec<Vec<Byte>> = vec![vec![None; SIZE as usize]; FILES];
    for (step, op) in ops.into_iter().enumerate() {
        let step = step as u64;
        match op {
            Op::Insert {
                file,
                offset,
                len,
                random_seq,
                region,
            } => {
                let len = len.min((SIZE - offset) as u32);
                let seq = if increasing_seq { step } else { random_seq };
                let log_offset = step * RECORD_STRIDE;
                index.insert(
                    fid(file),
                    Extent {
                        file_offset: offset,
                        len,
                        location: LogLocation {
                            region: RegionId(region),
                            offset: log_offset,
                        },
                        seq,
                    },
                );
                for i in 0..u64::from(len) {
                    let byte = &mut model[file][(offset + i) as usize];
                    // Newest seq wins; on a tie the later insert wins.
                    if byte.is_none_or(|(old_seq, _, _)| old_seq <= seq) {
                        *byte = Some((seq, region, log_offset + i));
                    }
                }
            }
            Op::Invalidate { file, offset, len } => {
                let removed = index.invalidate(fid(file), offset, len);
                assert_eq!(removed, clear(&mut model[file], offset, len));
            }
            Op::Truncate { file, new_size } => {
                let removed = index.truncate(fid(file), new_size);
                assert_eq!(removed, clear(&mut model[file], new_size, u64::MAX));
            }
            Op::RemoveRegion(region) => {
                let mut expected = 0;
                for byte in model.iter_mut().flatten() {
                    if byte.is_some_and(|(_, r, _)| r == region) {
                        *byte = None;
                        expected += 1;
                    }
                }
                assert_eq!(index.remove_region(RegionId(region)), expected);
            }
            Op::Clean {
                file,
                bound,
                stretch,
            } => {
                // The whole file, or one of its stretches (what a
                // background write-back cleans).
                let stretches: Vec<_> = index
                    .file(&fid(file))
                    .map(|f| f.stretches().collect())
                    .unwrap_or_default();
                let range = match stretch {
                    Some(k) if !stretches.is_empty() => stretches[k % stretches.len()].clone(),
                    _ => 0..u64::MAX,
                };
                let mut expected = 0;
                let end = range.end.min(SIZE) as usize;
                for byte in model[file][range.start as usize..end].iter_mut() {
                    if byte.is_some_and(|(seq, _, _)| seq < bound) {
                        *byte = None;
                        expected += 1;
                    }
                }
                assert_eq!(index.clean(fid(file), bound, range), expected);
            }
            Op::RemoveFile(file) => {
                let expected = clear(&mut model[file], 0, u64::MAX);
                let removed = index.remove_file(fid(file));
                assert_eq!(removed.map_or(0, |f| f.buffered_bytes()), expected);
            }
            Op::Rename { from, to } => {
                let replaced = index.rename(fid(from), fid(to));
                if from == to {
                    assert!(replaced.is_none());
                } else {
                    let expected = model[to].iter().filter(|b| b.is_some()).count() as u64;
                    assert_eq!(replaced.map_or(0, |f| f.buffered_bytes()), expected);
                    model[to] = std::mem::replace(&mut model[from], vec![None; SIZE as usize]);
                }
            }
            Op::Lookup { file, offset, len } => {
                let got = expand_lookup(&index, file, offset, len);
                let end = offset.saturating_add(len).min(SIZE);
                assert_eq!(&got[..], &model[file][offset as usize..end as usize]);
                let covered = got.iter().filter(|b| b.is_some()).count() as u64;
                assert_eq!(index.covered_bytes(fid(file), offset, len), covered);
            }
        }
        check_all(&index, &model, flush_max, flush_region);
    }
}

proptest! {
    // No failure persistence: proptest cannot locate a source root for an
    // integration test and would only print a warning.
    #![proptest_config(ProptestConfig {
        failure_persistence: None,
        ..ProptestConfig::with_cases(256)
    })]

    #[test]
    fn extent_index_matches_byte_model(
        ops in prop::collection::vec(op_strategy(), 1..60),
        increasing_seq in any::<bool>(),
        flush_max in prop_oneof![1u64..=2048, Just(u64::MAX)],
        flush_region in 0..REGIONS,
    ) {
        run(ops, increasing_seq, flush_max, flush_region);
    }
}
