//! Tests of the extent index: unit cases, and properties against a byte
//! model.

use super::*;
use alloc::vec;

const R0: RegionId = RegionId(0);
const R1: RegionId = RegionId(1);
const R2: RegionId = RegionId(2);

fn loc(region: RegionId, offset: u64) -> LogLocation {
    LogLocation { region, offset }
}

fn ext(file_offset: u64, len: u32, region: RegionId, log_offset: u64, seq: u64) -> Extent {
    Extent {
        file_offset,
        len,
        location: loc(region, log_offset),
        seq,
    }
}

fn all(f: &FileExtents) -> Vec<Extent> {
    f.check_invariants();
    f.extents().collect()
}

fn buffered(file_offset: u64, len: u64, region: RegionId, log: u64, seq: u64) -> Piece {
    Piece::Buffered {
        file_offset,
        len,
        location: loc(region, log),
        seq,
    }
}

fn hole(file_offset: u64, len: u64) -> Piece {
    Piece::Hole { file_offset, len }
}

#[test]
fn stored_value_is_24_bytes_and_estimate_in_paper_range() {
    assert_eq!(size_of::<Stored>(), 24);
    assert!((24..=64).contains(&ESTIMATED_BYTES_PER_EXTENT));
}

#[test]
fn new_covers_old_fully() {
    let mut f = FileExtents::new();
    f.insert(ext(100, 10, R0, 0, 1));
    f.insert(ext(120, 10, R0, 10, 2));
    f.insert(ext(90, 50, R1, 1000, 3));
    assert_eq!(all(&f), vec![ext(90, 50, R1, 1000, 3)]);
    assert_eq!(f.buffered_bytes(), 50);
}

#[test]
fn new_inside_old_splits_in_three() {
    let mut f = FileExtents::new();
    f.insert(ext(0, 100, R0, 500, 1));
    f.insert(ext(30, 20, R1, 7000, 2));
    assert_eq!(
        all(&f),
        vec![
            ext(0, 30, R0, 500, 1),
            ext(30, 20, R1, 7000, 2),
            ext(50, 50, R0, 550, 1),
        ]
    );
    assert_eq!(f.buffered_bytes(), 100);
}

#[test]
fn new_overlapping_front_and_back() {
    // New extent over the back of the old one: old head stays.
    let mut f = FileExtents::new();
    f.insert(ext(0, 100, R0, 0, 1));
    f.insert(ext(80, 40, R1, 1000, 2));
    assert_eq!(
        all(&f),
        vec![ext(0, 80, R0, 0, 1), ext(80, 40, R1, 1000, 2)]
    );

    // New extent over the front of the old one: old tail advances.
    let mut f = FileExtents::new();
    f.insert(ext(100, 100, R0, 0, 1));
    f.insert(ext(50, 100, R1, 1000, 2));
    assert_eq!(
        all(&f),
        vec![ext(50, 100, R1, 1000, 2), ext(150, 50, R0, 50, 1)]
    );
    assert_eq!(f.buffered_bytes(), 150);
}

#[test]
fn new_spanning_several_trims_both_ends() {
    let mut f = FileExtents::new();
    f.insert(ext(0, 10, R0, 0, 1));
    f.insert(ext(10, 10, R0, 100, 2));
    f.insert(ext(20, 10, R0, 200, 3));
    f.insert(ext(5, 20, R1, 1000, 4));
    assert_eq!(
        all(&f),
        vec![
            ext(0, 5, R0, 0, 1),
            ext(5, 20, R1, 1000, 4),
            ext(25, 5, R0, 205, 3),
        ]
    );
}

#[test]
fn older_seq_arriving_late_fills_only_gaps() {
    let mut f = FileExtents::new();
    f.insert(ext(10, 10, R0, 100, 5));
    f.insert(ext(30, 10, R0, 200, 7));
    // Replayed older record over [0, 50): only the gaps are its.
    f.insert(ext(0, 50, R1, 1000, 3));
    assert_eq!(
        all(&f),
        vec![
            ext(0, 10, R1, 1000, 3),
            ext(10, 10, R0, 100, 5),
            ext(20, 10, R1, 1020, 3),
            ext(30, 10, R0, 200, 7),
            ext(40, 10, R1, 1040, 3),
        ]
    );
    assert_eq!(f.buffered_bytes(), 50);

    // Older record entirely inside a newer one changes nothing.
    let before = f.clone();
    f.insert(ext(12, 3, R2, 9000, 1));
    assert_eq!(f, before);

    // Mixed: the newer straddling predecessor stays, older pieces lose.
    f.insert(ext(15, 30, R2, 5000, 4));
    assert_eq!(
        all(&f),
        vec![
            ext(0, 10, R1, 1000, 3),
            ext(10, 10, R0, 100, 5),
            ext(20, 10, R2, 5005, 4),
            ext(30, 10, R0, 200, 7),
            ext(40, 5, R2, 5025, 4),
            ext(45, 5, R1, 1045, 3),
        ]
    );
}

#[test]
fn insertion_order_does_not_matter() {
    let extents = [
        ext(0, 50, R0, 0, 1),
        ext(20, 50, R1, 1000, 2),
        ext(10, 20, R2, 2000, 3),
        ext(60, 5, R0, 3000, 4),
    ];
    let mut forward = FileExtents::new();
    for e in extents {
        forward.insert(e);
    }
    let mut backward = FileExtents::new();
    for e in extents.iter().rev() {
        backward.insert(*e);
    }
    // The backward build may split the oldest record into more entries
    // only where a newer one interrupts it; here both agree exactly.
    assert_eq!(all(&forward), all(&backward));
}

#[test]
fn equal_seq_new_wins() {
    let mut f = FileExtents::new();
    f.insert(ext(0, 10, R0, 0, 4));
    f.insert(ext(5, 10, R1, 100, 4));
    assert_eq!(all(&f), vec![ext(0, 5, R0, 0, 4), ext(5, 10, R1, 100, 4)]);
}

#[test]
fn adjacent_extents_are_not_merged() {
    let mut f = FileExtents::new();
    f.insert(ext(0, 10, R0, 0, 1));
    f.insert(ext(10, 10, R0, 10, 2));
    assert_eq!(f.extent_count(), 2);
}

#[test]
fn empty_extent_is_ignored_and_end_is_clipped() {
    let mut f = FileExtents::new();
    f.insert(ext(5, 0, R0, 0, 1));
    assert!(f.is_empty());
    f.insert(ext(u64::MAX - 4, 10, R0, 0, 1));
    assert_eq!(all(&f), vec![ext(u64::MAX - 4, 4, R0, 0, 1)]);
    assert_eq!(f.buffered_bytes(), 4);
}

#[test]
fn lookup_clips_and_fills_holes() {
    let mut f = FileExtents::new();
    f.insert(ext(10, 10, R0, 100, 1));
    f.insert(ext(20, 5, R1, 200, 2));
    f.insert(ext(40, 10, R0, 300, 3));
    let pieces: Vec<Piece> = f.lookup(15, 30).collect();
    assert_eq!(
        pieces,
        vec![
            buffered(15, 5, R0, 105, 1),
            buffered(20, 5, R1, 200, 2),
            hole(25, 15),
            buffered(40, 5, R0, 300, 3),
        ]
    );
    assert_eq!(f.covered_bytes(15, 30), 15);
    let pieces: Vec<Piece> = f.lookup(0, 10).collect();
    assert_eq!(pieces, vec![hole(0, 10)]);
    let pieces: Vec<Piece> = f.lookup(12, 2).collect();
    assert_eq!(pieces, vec![buffered(12, 2, R0, 102, 1)]);
    assert_eq!(f.lookup(12, 0).count(), 0);
    let pieces: Vec<Piece> = f.lookup(45, u64::MAX).collect();
    assert_eq!(
        pieces,
        vec![buffered(45, 5, R0, 305, 3), hole(50, u64::MAX - 50)]
    );
}

#[test]
fn invalidate_at_edges() {
    let mut f = FileExtents::new();
    f.insert(ext(0, 10, R0, 0, 1));
    f.insert(ext(10, 10, R0, 100, 2));
    f.insert(ext(30, 10, R0, 200, 3));
    // Cuts the back of the first, the whole second, the front of the third.
    assert_eq!(f.invalidate(5, 30), 20);
    assert_eq!(all(&f), vec![ext(0, 5, R0, 0, 1), ext(35, 5, R0, 205, 3)]);
    // A range with nothing buffered.
    assert_eq!(f.invalidate(10, 20), 0);
    // Punch a hole inside one extent: split in two.
    let mut g = FileExtents::new();
    g.insert(ext(0, 100, R1, 1000, 1));
    assert_eq!(g.invalidate(40, 10), 10);
    assert_eq!(
        all(&g),
        vec![ext(0, 40, R1, 1000, 1), ext(50, 50, R1, 1050, 1)]
    );
    // Exact fit and empty range.
    assert_eq!(g.invalidate(0, 40), 40);
    assert_eq!(g.invalidate(50, 0), 0);
    assert_eq!(all(&g), vec![ext(50, 50, R1, 1050, 1)]);
}

#[test]
fn truncate_style_invalidate_to_u64_max() {
    let mut f = FileExtents::new();
    f.insert(ext(0, 10, R0, 0, 1));
    f.insert(ext(20, 10, R0, 10, 2));
    f.insert(ext(u64::MAX - 10, 10, R0, 20, 3));
    assert_eq!(f.invalidate(25, u64::MAX - 25), 15);
    assert_eq!(all(&f), vec![ext(0, 10, R0, 0, 1), ext(20, 5, R0, 10, 2)]);
    // Overflowing length saturates instead of wrapping.
    assert_eq!(f.invalidate(5, u64::MAX), 10);
    assert_eq!(all(&f), vec![ext(0, 5, R0, 0, 1)]);
    assert_eq!(f.truncate(0), 5);
    assert!(f.is_empty());
    assert_eq!(f.buffered_bytes(), 0);
}

#[test]
fn remove_region_drops_only_that_region() {
    let mut f = FileExtents::new();
    f.insert(ext(0, 10, R0, 0, 1));
    f.insert(ext(10, 10, R1, 0, 2));
    f.insert(ext(20, 10, R0, 10, 3));
    assert_eq!(f.remove_region(R0), 20);
    assert_eq!(all(&f), vec![ext(10, 10, R1, 0, 2)]);
    assert_eq!(f.remove_region(R2), 0);
}

#[test]
fn flush_runs_merge_contiguous_up_to_max() {
    let mut f = FileExtents::new();
    f.insert(ext(0, 10, R0, 0, 1));
    f.insert(ext(10, 10, R1, 50, 2));
    f.insert(ext(20, 10, R0, 30, 3));
    f.insert(ext(35, 10, R0, 90, 4)); // gap before: new run
    f.insert(ext(45, 100, R0, 200, 5)); // larger than max: own run
    let runs: Vec<FlushRun> = f.flush_runs(None, 25).collect();
    assert_eq!(
        runs,
        vec![
            FlushRun {
                file_offset: 0,
                len: 20,
                pieces: vec![(loc(R0, 0), 10), (loc(R1, 50), 10)],
            },
            FlushRun {
                file_offset: 20,
                len: 10,
                pieces: vec![(loc(R0, 30), 10)],
            },
            FlushRun {
                file_offset: 35,
                len: 10,
                pieces: vec![(loc(R0, 90), 10)],
            },
            FlushRun {
                file_offset: 45,
                len: 100,
                pieces: vec![(loc(R0, 200), 100)],
            },
        ]
    );
    // A large max merges everything file-contiguous.
    let runs: Vec<(u64, u64)> = f
        .flush_runs(None, u64::MAX)
        .map(|r| (r.file_offset, r.len))
        .collect();
    assert_eq!(runs, vec![(0, 30), (35, 110)]);
    // Exact fit merges: 10 + 10 == 20.
    let runs: Vec<(u64, u64)> = f
        .flush_runs(None, 20)
        .map(|r| (r.file_offset, r.len))
        .collect();
    assert_eq!(runs, vec![(0, 20), (20, 10), (35, 10), (45, 100)]);
}

#[test]
fn flush_runs_region_filter() {
    let mut f = FileExtents::new();
    f.insert(ext(0, 10, R0, 0, 1));
    f.insert(ext(10, 10, R1, 50, 2));
    f.insert(ext(20, 10, R0, 30, 3));
    f.insert(ext(30, 10, R0, 40, 4));
    let runs: Vec<FlushRun> = f.flush_runs(Some(R0), 1000).collect();
    assert_eq!(
        runs,
        vec![
            FlushRun {
                file_offset: 0,
                len: 10,
                pieces: vec![(loc(R0, 0), 10)],
            },
            FlushRun {
                file_offset: 20,
                len: 20,
                pieces: vec![(loc(R0, 30), 10), (loc(R0, 40), 10)],
            },
        ]
    );
    assert_eq!(f.flush_runs(Some(R2), 1000).count(), 0);
}

/// Issue 32: a gap between two extents of the flushed regions that an
/// extent of another region fills exactly joins the run (one write
/// instead of two with a seek between); a hole does not, nor an extent of
/// another region at a run's end, nor a gap past `max_run_bytes`.
#[test]
fn filled_flush_runs_bridge_gaps_other_regions_fill() {
    let mut f = FileExtents::new();
    f.insert(ext(0, 10, R0, 0, 1));
    f.insert(ext(10, 10, R1, 50, 2));
    f.insert(ext(20, 10, R0, 30, 3));
    // [30, 40) a hole.
    f.insert(ext(40, 10, R0, 40, 4));
    f.insert(ext(50, 10, R1, 60, 5));
    let set = [R0];
    let runs = |max| -> Vec<(u64, u64)> {
        f.flush_runs_filled(&set, max)
            .map(|r| (r.file_offset, r.len))
            .collect()
    };
    assert_eq!(runs(1000), vec![(0, 30), (40, 10)]);
    let filled: Vec<FlushRun> = f.flush_runs_filled(&set, 1000).collect();
    assert_eq!(
        filled[0].pieces,
        vec![(loc(R0, 0), 10), (loc(R1, 50), 10), (loc(R0, 30), 10)]
    );
    // Unfilled, the same extents make three runs.
    let unfilled: Vec<(u64, u64)> = f
        .flush_runs_in(&set, 1000)
        .map(|r| (r.file_offset, r.len))
        .collect();
    assert_eq!(unfilled, vec![(0, 10), (20, 10), (40, 10)]);
    // A run never grows past its bound to bridge a gap.
    assert_eq!(runs(25), vec![(0, 10), (20, 10), (40, 10)]);
    // Nothing of the set: no run, whatever other regions hold.
    assert_eq!(f.flush_runs_filled(&[R2], 1000).count(), 0);
}

#[test]
#[should_panic(expected = "max_run_bytes")]
fn flush_runs_zero_max_panics() {
    let _ = FileExtents::new().flush_runs(None, 0);
}

#[test]
fn index_totals_follow_every_operation() {
    let a = FileId(1);
    let b = FileId(2);
    let mut index = ExtentIndex::new();
    index.insert(a, ext(0, 10, R0, 0, 1));
    index.insert(a, ext(5, 10, R1, 0, 2));
    index.insert(b, ext(0, 100, R1, 100, 3));
    index.insert(b, ext(0, 0, R1, 100, 4));
    index.check_invariants();
    assert_eq!(index.extent_count(), 3);
    assert_eq!(index.buffered_bytes(), 115);
    assert_eq!(index.file_count(), 2);
    assert_eq!(
        index.memory_bytes_estimate(),
        3 * ESTIMATED_BYTES_PER_EXTENT + 2 * ESTIMATED_BYTES_PER_FILE
    );

    assert_eq!(index.invalidate(b, 50, 10), 10);
    assert_eq!(index.extent_count(), 4);
    assert_eq!(index.buffered_bytes(), 105);
    assert_eq!(index.covered_bytes(b, 0, 200), 90);
    assert_eq!(index.invalidate(FileId(9), 0, 10), 0);

    assert_eq!(index.remove_region(R1), 100);
    index.check_invariants();
    assert_eq!(index.file_count(), 1, "b became empty and is dropped");
    assert!(index.file(&b).is_none());
    assert_eq!(index.buffered_bytes(), 5);

    assert_eq!(index.truncate(a, 0), 5);
    assert!(index.is_empty());
    assert_eq!(index.extent_count(), 0);
    let pieces: Vec<Piece> = index.lookup(a, 0, 8).collect();
    assert_eq!(pieces, vec![hole(0, 8)]);
    assert_eq!(index.flush_runs(a, None, 8).count(), 0);
}

#[test]
fn rename_over_drops_destination() {
    let a = FileId(1);
    let b = FileId(2);
    let c = FileId(3);
    let mut index = ExtentIndex::new();
    index.insert(a, ext(0, 10, R0, 0, 1));
    index.insert(b, ext(0, 20, R0, 10, 2));
    index.insert(b, ext(40, 20, R0, 30, 3));

    let replaced = index.rename(a, b).expect("b had extents");
    assert_eq!(replaced.buffered_bytes(), 40);
    index.check_invariants();
    assert!(index.file(&a).is_none());
    assert_eq!(
        all(index.file(&b).expect("moved")),
        vec![ext(0, 10, R0, 0, 1)]
    );
    assert_eq!(index.extent_count(), 1);
    assert_eq!(index.buffered_bytes(), 10);

    // Rename of a file without extents over one with extents.
    assert!(index.rename(c, b).is_some());
    assert!(index.is_empty());
    assert_eq!(index.buffered_bytes(), 0);

    // Rename to itself is a no-op.
    index.insert(a, ext(0, 10, R0, 0, 4));
    assert!(index.rename(a, a).is_none());
    assert_eq!(index.buffered_bytes(), 10);

    let removed = index.remove_file(a).expect("a had extents");
    assert_eq!(removed.extent_count(), 1);
    assert!(index.is_empty());
    index.check_invariants();
}

// ---- Leaf structure -------------------------------------------------

/// `(lo, hi, entries)` of every leaf, in order.
fn leaves(f: &FileExtents) -> Vec<(u64, u64, usize)> {
    f.top
        .iter()
        .map(|(&lo, leaf)| (lo, leaf.hi, leaf.entries.len()))
        .collect()
}

/// splitmix64, for reproducible random tests.
fn next_random(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// `count` extents of 5 bytes every 10 bytes from 0, region 0, log
/// offset = file offset, seq 1: one split at 65 entries.
fn comb(count: u64) -> FileExtents {
    let mut f = FileExtents::new();
    for i in 0..count {
        f.insert(ext(i * 10, 5, R0, i * 10, 1));
    }
    f
}

/// `comb(65)`, but inserted so that the leaf splits at its middle entry:
/// leaves `[0, 320)` and `[320, u64::MAX)`.
fn comb_split_in_the_middle() -> FileExtents {
    let mut f = FileExtents::new();
    for i in (0..65).filter(|&i| i != 32).chain([32]) {
        f.insert(ext(i * 10, 5, R0, i * 10, 1));
    }
    assert_eq!(leaves(&f), vec![(0, 320, 32), (320, u64::MAX, 33)]);
    f
}

#[test]
fn wide_partition_point_matches_partition_point() {
    let mut state = 1;
    for len in 0..200 {
        let mut values: Vec<u64> = (0..len).map(|_| next_random(&mut state) % 64).collect();
        values.sort_unstable();
        for threshold in 0..66 {
            assert_eq!(
                wide_partition_point(&values, |&v| v < threshold),
                values.partition_point(|&v| v < threshold),
                "len {len}, threshold {threshold}"
            );
        }
    }
}

#[test]
fn overfull_leaf_splits_at_the_middle_entry() {
    let f = comb(64);
    assert_eq!(leaves(&f), vec![(0, u64::MAX, 64)]);
    let f = comb_split_in_the_middle();
    f.check_invariants();
    assert_eq!(f, comb(65));
}

#[test]
fn sequential_writes_fill_leaves() {
    // Ascending: each split keeps the full leaf and starts a new one.
    let f = comb(200);
    f.check_invariants();
    assert_eq!(
        leaves(&f),
        vec![
            (0, 640, 64),
            (640, 1280, 64),
            (1280, 1920, 64),
            (1920, u64::MAX, 8)
        ]
    );
    // Descending: the mirror image.
    let mut g = FileExtents::new();
    for i in (0..200).rev() {
        g.insert(ext(i * 10, 5, R0, i * 10, 1));
    }
    g.check_invariants();
    assert_eq!(
        leaves(&g),
        vec![
            (0, 80, 8),
            (80, 720, 64),
            (720, 1360, 64),
            (1360, u64::MAX, 64)
        ]
    );
    // Same entries, different leaves: still equal.
    assert_eq!(f, g);
    assert_eq!(all(&f), all(&g));
}

#[test]
fn extent_crossing_one_leaf_boundary_is_split_there() {
    let mut f = comb_split_in_the_middle();
    // Empty [300, 340): the boundary 320 is now in a gap.
    assert_eq!(f.invalidate(300, 40), 20);
    assert_eq!(leaves(&f), vec![(0, 320, 30), (320, u64::MAX, 31)]);

    // A write into the gap across the boundary: two entries, the second
    // one's log offset advanced by the bytes before the boundary.
    f.insert(ext(306, 28, R1, 5000, 2));
    assert_eq!(leaves(&f), vec![(0, 320, 31), (320, u64::MAX, 32)]);
    let stored = all(&f);
    assert_eq!(
        stored[29..33],
        [
            ext(290, 5, R0, 290, 1),
            ext(306, 14, R1, 5000, 2),
            ext(320, 14, R1, 5014, 2),
            ext(340, 5, R0, 340, 1),
        ]
    );
    assert_eq!(f.extent_count(), 63);
    assert_eq!(f.buffered_bytes(), 61 * 5 + 28);
    // Lookups see two adjacent pieces that together are the write.
    let pieces: Vec<Piece> = f.lookup(300, 40).collect();
    assert_eq!(
        pieces,
        vec![
            hole(300, 6),
            buffered(306, 14, R1, 5000, 2),
            buffered(320, 14, R1, 5014, 2),
            hole(334, 6),
        ]
    );
    let pieces: Vec<Piece> = f.lookup(318, 4).collect();
    assert_eq!(
        pieces,
        vec![buffered(318, 2, R1, 5012, 2), buffered(320, 2, R1, 5014, 2)]
    );
    // The flusher still gets one run for it.
    let runs: Vec<FlushRun> = f.flush_runs(Some(R1), u64::MAX).collect();
    assert_eq!(
        runs,
        vec![FlushRun {
            file_offset: 306,
            len: 28,
            pieces: vec![(loc(R1, 5000), 14), (loc(R1, 5014), 14)],
        }]
    );

    // Overwriting across the boundary again replaces both pieces.
    f.insert(ext(300, 40, R2, 9000, 3));
    let stored = all(&f);
    assert_eq!(
        stored[29..33],
        [
            ext(290, 5, R0, 290, 1),
            ext(300, 20, R2, 9000, 3),
            ext(320, 20, R2, 9020, 3),
            ext(340, 5, R0, 340, 1),
        ]
    );
    assert_eq!(f.buffered_bytes(), 61 * 5 + 40);
    // Invalidating across the boundary trims both sides.
    assert_eq!(f.invalidate(310, 20), 20);
    let stored = all(&f);
    assert_eq!(
        stored[29..33],
        [
            ext(290, 5, R0, 290, 1),
            ext(300, 10, R2, 9000, 3),
            ext(330, 10, R2, 9030, 3),
            ext(340, 5, R0, 340, 1),
        ]
    );
}

#[test]
fn extent_crossing_several_leaf_boundaries() {
    let mut f = comb(400);
    assert_eq!(leaves(&f).len(), 7);
    // An older record replayed over everything only fills the 400 gaps.
    // Each leaf gets 64 new entries at once, overfills to 128 and
    // splits.
    f.insert(ext(0, 4000, R1, 100_000, 0));
    f.check_invariants();
    assert_eq!(f.extent_count(), 800);
    assert_eq!(f.buffered_bytes(), 4000);
    assert_eq!(leaves(&f).len(), 13);
    for piece in f.lookup(0, 4000) {
        let Piece::Buffered {
            file_offset,
            location,
            seq,
            ..
        } = piece
        else {
            panic!("hole {piece:?}");
        };
        let base = if seq == 0 { 100_000 } else { 0 };
        assert_eq!(location.offset, base + file_offset, "{piece:?}");
    }
    // A newer record over almost everything: one entry per leaf.
    let touched = leaves(&f)
        .iter()
        .filter(|&&(lo, hi, _)| lo < 3993 && hi > 3)
        .count();
    assert_eq!(touched, 13);
    f.insert(ext(3, 3990, R2, 200_000, 5));
    f.check_invariants();
    let stored = all(&f);
    assert_eq!(stored.len(), touched + 3);
    assert_eq!(stored[0], ext(0, 3, R0, 0, 1));
    assert_eq!(
        stored[stored.len() - 2..],
        [ext(3993, 2, R0, 3993, 1), ext(3995, 5, R1, 103_995, 0)]
    );
    for e in &stored[1..stored.len() - 2] {
        assert_eq!(
            (e.seq, e.location),
            (5, loc(R2, 200_000 + e.file_offset - 3))
        );
    }
    let runs: Vec<(u64, u64, usize)> = f
        .flush_runs(Some(R2), u64::MAX)
        .map(|r| (r.file_offset, r.len, r.pieces.len()))
        .collect();
    assert_eq!(runs, vec![(3, 3990, touched)]);
    assert_eq!(f.buffered_bytes(), 4000);
    assert_eq!(f.invalidate(1, 3998), 3998);
    assert_eq!(
        all(&f),
        vec![ext(0, 1, R0, 0, 1), ext(3999, 1, R1, 103_999, 0)]
    );
    // Both survivors' leaves stay; the ones in between went.
    assert_eq!(leaves(&f).iter().map(|l| l.2).collect::<Vec<_>>(), [1, 1]);
}

#[test]
fn leaf_overfilled_by_more_than_twice_splits_repeatedly() {
    // 64 newer one-byte extents with gaps around each: an older record
    // over all of them adds 65 gap entries to the one full leaf.
    let mut f = FileExtents::new();
    for i in 0..64 {
        f.insert(ext(i * 10 + 5, 1, R0, i, 9));
    }
    assert_eq!(leaves(&f), vec![(0, u64::MAX, 64)]);
    f.insert(ext(0, 700, R1, 1000, 1));
    f.check_invariants();
    assert_eq!(f.extent_count(), 129);
    assert_eq!(f.buffered_bytes(), 700);
    assert_eq!(
        leaves(&f).iter().map(|l| l.2).collect::<Vec<_>>(),
        [64, 32, 33]
    );
    assert_eq!(f.covered_bytes(0, 700), 700);
    assert_eq!(f.lookup(0, 700).count(), 129);
}

#[test]
fn overlapping_insert_across_a_split_point() {
    // Records in random order so the leaf splits at its middle entry.
    let mut f = FileExtents::new();
    let mut order: Vec<u64> = (0..65).collect();
    let mut state = 3;
    for i in (1..order.len()).rev() {
        order.swap(i, (next_random(&mut state) % (i as u64 + 1)) as usize);
    }
    for &i in &order {
        f.insert(ext(i * 10, 5, R0, i * 10, 10 + i));
    }
    assert_eq!(leaves(&f), vec![(0, 320, 32), (320, u64::MAX, 33)]);
    // Seq 42 wins over the extents at 300, 310 (seq 40, 41) and 320
    // (seq 42: equal, the later insert wins) but not over 330 (seq 43).
    // The bytes it owns before 330 cross the boundary 320.
    f.insert(ext(298, 40, R1, 7000, 42));
    let stored = all(&f);
    assert_eq!(
        stored[29..35],
        [
            ext(290, 5, R0, 290, 39),
            ext(298, 22, R1, 7000, 42),
            ext(320, 10, R1, 7022, 42),
            ext(330, 5, R0, 330, 43),
            ext(335, 3, R1, 7037, 42),
            ext(340, 5, R0, 340, 44),
        ]
    );
    assert_eq!(leaves(&f), vec![(0, 320, 31), (320, u64::MAX, 34)]);
    assert_eq!(f.buffered_bytes(), 65 * 5 - 15 + 35);
    // An older record across the boundary fills only the gaps.
    f.insert(ext(280, 60, R2, 9000, 0));
    let stored = all(&f);
    assert_eq!(
        stored[28..36],
        [
            ext(280, 5, R0, 280, 38),
            ext(285, 5, R2, 9005, 0),
            ext(290, 5, R0, 290, 39),
            ext(295, 3, R2, 9015, 0),
            ext(298, 22, R1, 7000, 42),
            ext(320, 10, R1, 7022, 42),
            ext(330, 5, R0, 330, 43),
            ext(335, 3, R1, 7037, 42),
        ]
    );
    f.check_invariants();
}

#[test]
fn emptied_middle_leaf_is_removed() {
    let mut f = comb(200);
    assert_eq!(leaves(&f)[1], (640, 1280, 64));
    // Invalidate exactly the second leaf's range.
    assert_eq!(f.invalidate(640, 640), 320);
    assert_eq!(
        leaves(&f),
        vec![(0, 1280, 64), (1280, 1920, 64), (1920, u64::MAX, 8)]
    );
    // Writes there now go to the first leaf (which, full, splits).
    f.insert(ext(700, 100, R1, 0, 2));
    assert_eq!(
        leaves(&f),
        vec![
            (0, 700, 64),
            (700, 1280, 1),
            (1280, 1920, 64),
            (1920, u64::MAX, 8)
        ]
    );
    f.check_invariants();
    assert_eq!(f.covered_bytes(600, 800), 4 * 5 + 100 + 12 * 5);

    // A middle leaf emptied by remove_region goes too.
    let mut g = FileExtents::new();
    for i in 0..200 {
        let region = if (64..128).contains(&i) { R1 } else { R0 };
        g.insert(ext(i * 10, 5, region, i * 10, 1));
    }
    assert_eq!(leaves(&g).len(), 4);
    assert_eq!(g.remove_region(R1), 320);
    assert_eq!(
        leaves(&g),
        vec![(0, 1280, 64), (1280, 1920, 64), (1920, u64::MAX, 8)]
    );

    // The first leaf stays, even empty, while later leaves have entries.
    let mut h = comb(200);
    assert_eq!(h.invalidate(0, 640), 320);
    assert_eq!(leaves(&h)[0], (0, 640, 0));
    h.check_invariants();
    let pieces: Vec<Piece> = h.lookup(0, 650).collect();
    assert_eq!(
        pieces,
        vec![hole(0, 640), buffered(640, 5, R0, 640, 1), hole(645, 5)]
    );
    assert_eq!(all(&h).len(), 136);
    // ...and everything goes when the file empties.
    assert_eq!(h.truncate(0), 136 * 5);
    assert!(h.top.is_empty());
    assert!(h.is_empty());
}

#[test]
fn remove_region_merges_sparse_leaves() {
    let mut f = FileExtents::new();
    let regions = [R0, R1, R2, RegionId(3)];
    for i in 0..640u64 {
        f.insert(ext(i * 10, 5, regions[(i % 4) as usize], i * 10, 1));
    }
    assert_eq!(leaves(&f).len(), 10);
    for region in &regions[..3] {
        f.remove_region(*region);
    }
    f.check_invariants();
    assert_eq!(f.extent_count(), 160);
    // 16 entries per old leaf; merged up to MERGE_LIMIT (48) each.
    assert_eq!(
        leaves(&f).iter().map(|l| l.2).collect::<Vec<_>>(),
        vec![48, 48, 48, 16]
    );
    assert!(all(&f).iter().all(|e| e.location.region == RegionId(3)));
}

#[test]
fn extent_ending_at_u64_max() {
    let mut f = comb(100);
    let top = u64::MAX - 100;
    for i in 0..70 {
        f.insert(ext(top + i, 1, R1, 1000 + i, 2));
    }
    // Clipped at u64::MAX, and it ends the last leaf exactly.
    f.insert(ext(u64::MAX - 30, 100, R2, 5000, 3));
    f.check_invariants();
    let stored = all(&f);
    assert_eq!(stored.last(), Some(&ext(u64::MAX - 30, 30, R2, 5000, 3)));
    let last_leaf = *leaves(&f).last().unwrap();
    assert_eq!(last_leaf.1, u64::MAX);
    assert!(last_leaf.0 > 1000, "{:?}", leaves(&f));
    assert_eq!(f.covered_bytes(top, u64::MAX), 100);
    let pieces: Vec<Piece> = f.lookup(u64::MAX - 31, 1000).collect();
    assert_eq!(
        pieces,
        vec![
            buffered(u64::MAX - 31, 1, R1, 1069, 2),
            buffered(u64::MAX - 30, 30, R2, 5000, 3)
        ]
    );
    // Trim its tail, then punch a hole, then truncate into it.
    assert_eq!(f.invalidate(u64::MAX - 5, 5), 5);
    assert_eq!(f.invalidate(u64::MAX - 20, 5), 5);
    assert_eq!(f.truncate(u64::MAX - 10), 5);
    let stored = all(&f);
    assert_eq!(
        stored[stored.len() - 2..],
        [
            ext(u64::MAX - 30, 10, R2, 5000, 3),
            ext(u64::MAX - 15, 5, R2, 5015, 3),
        ]
    );
    // A truncate in an earlier leaf drops the later leaves whole.
    assert_eq!(f.truncate(500), 50 * 5 + 70 + 15);
    assert_eq!(leaves(&f), vec![(0, u64::MAX, 50)]);
    assert_eq!(f.buffered_bytes(), 50 * 5);
}

/// What backs one file byte: (seq, region, log byte).
type ModelByte = Option<(u64, RegionId, u64)>;

/// Checks `f` byte by byte against `model` (file bytes `0..model.len()`,
/// nothing beyond) and checks its invariants and flush runs.
fn check_model(f: &FileExtents, model: &[ModelByte]) {
    f.check_invariants();
    let mut got = Vec::with_capacity(model.len());
    for piece in f.lookup(0, model.len() as u64) {
        match piece {
            Piece::Buffered {
                len, location, seq, ..
            } => got.extend((0..len).map(|i| Some((seq, location.region, location.offset + i)))),
            Piece::Hole { len, .. } => got.extend((0..len).map(|_| None)),
        }
    }
    assert_eq!(got.len(), model.len());
    if let Some(i) = (0..model.len()).find(|&i| got[i] != model[i]) {
        panic!("byte {i}: index {:?}, model {:?}", got[i], model[i]);
    }
    let buffered = model.iter().filter(|b| b.is_some()).count() as u64;
    assert_eq!(f.buffered_bytes(), buffered);
    assert_eq!(f.covered_bytes(0, u64::MAX), buffered);
    let mut flushed = 0;
    for run in f.flush_runs(None, 4096) {
        let mut at = run.file_offset;
        for (location, len) in run.pieces {
            assert_eq!(
                model[at as usize].map(|b| (b.1, b.2)),
                Some((location.region, location.offset))
            );
            at += u64::from(len);
        }
        assert_eq!(at, run.file_offset + run.len);
        flushed += run.len;
    }
    assert_eq!(flushed, buffered);
}

/// Random operations on a file of `size` bytes with many leaves,
/// checked against a byte model.
fn random_operations(seed: u64, size: u64, operations: usize, max_len: u64, check_every: usize) {
    let mut state = seed;
    let mut f = FileExtents::new();
    let mut model: Vec<ModelByte> = vec![None; size as usize];
    let mut max_leaves = 0;
    for step in 0..operations as u64 {
        let offset = next_random(&mut state) % size;
        let len = 1 + next_random(&mut state) % max_len;
        let len = len.min(size - offset);
        match next_random(&mut state) % 100 {
            0..=88 => {
                // Mostly increasing seqs, some replays of older ones.
                let seq = if next_random(&mut state).is_multiple_of(4) {
                    next_random(&mut state) % (step + 1)
                } else {
                    step
                };
                let region = RegionId((next_random(&mut state) % 4) as u32);
                let log = step << 20;
                f.insert(ext(offset, len as u32, region, log, seq));
                for i in 0..len {
                    let byte = &mut model[(offset + i) as usize];
                    if byte.is_none_or(|(old, _, _)| old <= seq) {
                        *byte = Some((seq, region, log + i));
                    }
                }
            }
            89..=98 => {
                let len = if next_random(&mut state).is_multiple_of(64) {
                    u64::MAX
                } else {
                    len
                };
                let removed = f.invalidate(offset, len);
                let end = offset.saturating_add(len).min(size);
                let expected = model[offset as usize..end as usize]
                    .iter_mut()
                    .filter_map(Option::take)
                    .count() as u64;
                assert_eq!(removed, expected);
            }
            _ => {
                let region = RegionId((next_random(&mut state) % 4) as u32);
                let removed = f.remove_region(region);
                let expected = model
                    .iter_mut()
                    .filter(|b| b.is_some_and(|(_, r, _)| r == region))
                    .map(|b| *b = None)
                    .count() as u64;
                assert_eq!(removed, expected);
            }
        }
        max_leaves = max_leaves.max(f.top.len());
        if (step as usize).is_multiple_of(check_every) {
            check_model(&f, &model);
        }
    }
    check_model(&f, &model);
    assert!(max_leaves >= 10, "only {max_leaves} leaves: test too small");
}

#[test]
fn random_operations_across_many_leaves_match_a_byte_model() {
    random_operations(1, 40_000, 6_000, 12, 10);
    random_operations(2, 1 << 18, 4_000, 300, 50);
}

#[test]
fn ten_thousand_random_extents_keep_invariants() {
    let mut state = 42;
    let mut f = FileExtents::new();
    for seq in 0..10_000 {
        let offset = next_random(&mut state) % (1 << 30);
        let len = 1 + (next_random(&mut state) % (1 << 16)) as u32;
        f.insert(ext(offset, len, R0, seq << 20, seq));
        if seq % 1000 == 0 {
            f.check_invariants();
        }
    }
    f.check_invariants();
    let layout = leaves(&f);
    assert!(layout.len() > 100, "{} leaves", layout.len());
    assert_eq!(f.extents().len(), f.extent_count());
    assert_eq!(
        f.extents().map(|e| u64::from(e.len)).sum::<u64>(),
        f.buffered_bytes()
    );
}

#[test]
fn stretches_join_touching_extents() {
    let mut index = ExtentIndex::new();
    let file = FileId(1);
    let put = |index: &mut ExtentIndex, offset: u64, len: u32, seq: u64| {
        index.insert(
            file,
            Extent {
                file_offset: offset,
                len,
                location: LogLocation {
                    region: RegionId(0),
                    offset: seq * 100,
                },
                seq,
            },
        );
    };
    put(&mut index, 0, 10, 1);
    put(&mut index, 10, 10, 2);
    put(&mut index, 30, 10, 3);
    let stretches =
        |index: &ExtentIndex| index.file(&file).unwrap().stretches().collect::<Vec<_>>();
    assert_eq!(stretches(&index), [0..20, 30..40]);
    put(&mut index, 20, 10, 4);
    let joined = stretches(&index);
    assert_eq!((joined.len(), joined[0].clone()), (1, 0..40));
}
