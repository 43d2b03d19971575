//! The recovery scan: random regions read back exactly; torn tails cut at
//! every offset; corruption before a commit reported and skipped; arbitrary
//! bytes never panic.

#[path = "log_support/mod.rs"]
mod support;

use proptest::prelude::*;
use sluice_engine::log::{
    scan_region, scan_region_with, CorruptReason, LogError, RecordKind, RegionFile, RegionHeader,
    RegionHeaderError, ScanMode, ScanReport, REGION_HEADER_BYTES,
};
use sluice_env::BackendFile;
use sluice_policy::RegionId;
use support::{assert_records, random_records, region_with, Planned, Rng, VecFile, Written};

const REGION_BYTES: u64 = 256 * 1024;

fn last_commit_index(written: &[Written]) -> Option<usize> {
    written
        .iter()
        .rposition(|w| w.header.kind == RecordKind::Commit)
}

/// A region of `before` random records, a commit, then `after` random
/// records without commits.
fn committed_then_tail(
    seed: u64,
    before: usize,
    after: usize,
    max_payload: usize,
) -> (std::sync::Arc<VecFile>, RegionFile, Vec<Written>, usize) {
    let mut rng = Rng::new(seed);
    let mut records = random_records(&mut rng, before, 0, max_payload, 10);
    let seq = records.last().map_or(0, |r| r.header.seq);
    records.push(Planned::commit(seq + 1));
    let commit_index = records.len() - 1;
    records.extend(random_records(&mut rng, after, seq + 1, max_payload, 0));
    let (file, region, written) = region_with(REGION_BYTES, &records);
    (file, region, written, commit_index)
}

/// Scan a copy of `bytes` (Recovery mode) and open it for payload reads.
fn scan_bytes(bytes: Vec<u8>) -> (ScanReport, RegionFile) {
    let file = VecFile::from_bytes(bytes);
    let report = scan_region(&*file, REGION_BYTES).unwrap();
    let (region, _) = RegionFile::open(file).unwrap();
    (report, region)
}

#[test]
fn random_regions_scan_back_exactly() {
    for seed in 0..40 {
        let mut rng = Rng::new(seed);
        let n = rng.below(300) as usize;
        let first_seq = rng.below(1000);
        let records = random_records(&mut rng, n, first_seq, 700, 8);
        let (file, region, written) = region_with(REGION_BYTES, &records);
        for mode in [ScanMode::Recovery, ScanMode::Full] {
            let report = scan_region_with(&*file, REGION_BYTES, mode).unwrap();
            assert_records(&report, &written, &region);
            assert_eq!(report.torn_tail_at, None, "seed {seed}");
            assert!(report.corrupt.is_empty(), "seed {seed}");
            assert_eq!(
                report.header,
                RegionHeader {
                    region: RegionId(7),
                    generation: 3,
                    region_bytes: REGION_BYTES,
                    first_seq: 0,
                }
            );
            assert_eq!(
                report.end_offset,
                written.last().map_or(REGION_HEADER_BYTES, |w| w.end())
            );
            let commit = last_commit_index(&written);
            assert_eq!(
                report.last_commit_seq,
                commit.map(|i| written[i].header.seq)
            );
            assert_eq!(
                report.highest_seq_seen,
                written.last().map(|w| w.header.seq)
            );
            // Headers only before the last commit: only path payloads
            // there are read (recovery needs them).
            let verified_min = match mode {
                ScanMode::Full => written.iter().filter(|w| w.header.len > 0).count(),
                ScanMode::Recovery => written
                    .iter()
                    .enumerate()
                    .filter(|(i, w)| {
                        w.header.len > 0
                            && (w.header.kind == RecordKind::Path || commit.is_none_or(|c| *i > c))
                    })
                    .count(),
            };
            assert_eq!(
                report.payloads_verified as usize, verified_min,
                "seed {seed}"
            );
        }
    }
}

#[test]
fn the_next_append_goes_at_end_offset() {
    let mut rng = Rng::new(5);
    let records = random_records(&mut rng, 20, 0, 100, 20);
    let (file, region, mut written) = region_with(REGION_BYTES, &records);
    let report = scan_region(&*file, REGION_BYTES).unwrap();
    let seq = report.highest_seq_seen.unwrap() + 1;
    let more = Planned::data(1, 0, b"after recovery".to_vec(), seq);
    written.extend(support::append_all(&region, report.end_offset, &[more]));
    let again = scan_region(&*file, REGION_BYTES).unwrap();
    assert_records(&again, &written, &region);
}

/// Expected result of scanning a region whose bytes from `damage_at` on
/// were lost or replaced: every record fully before the damage.
fn kept_before(written: &[Written], damage_at: u64) -> usize {
    written
        .iter()
        .take_while(|w| w.payload_end() <= damage_at)
        .count()
}

#[test]
fn torn_tail_cut_at_every_offset() {
    for seed in 0..4 {
        let (file, _region, written, commit_index) = committed_then_tail(seed, 30, 12, 200);
        let bytes = file.bytes();
        let commit_end = written[commit_index].end();
        for cut in commit_end..=bytes.len() as u64 {
            let (report, region) = scan_bytes(bytes[..cut as usize].to_vec());
            let kept = kept_before(&written, cut);
            assert!(kept > commit_index);
            assert_records(&report, &written[..kept], &region);
            let first_lost = written.get(kept);
            let expected_torn = first_lost.map(|w| w.offset).filter(|&at| at < cut);
            assert_eq!(report.torn_tail_at, expected_torn, "seed {seed} cut {cut}");
            assert_eq!(
                report.end_offset,
                expected_torn.unwrap_or(written[kept - 1].end()),
                "seed {seed} cut {cut}"
            );
            if let Some(torn) = expected_torn {
                assert_eq!(report.torn_tail_bytes, cut - torn);
            }
            assert!(report.corrupt.is_empty(), "seed {seed} cut {cut}");
            assert_eq!(
                report.last_commit_seq,
                Some(written[commit_index].header.seq)
            );
        }
    }
}

#[test]
fn torn_tail_overwritten_with_garbage() {
    let mut rng = Rng::new(99);
    for seed in 0..4 {
        let (file, _region, written, commit_index) = committed_then_tail(seed, 30, 12, 300);
        let bytes = file.bytes();
        let commit_end = written[commit_index].end();
        let file_end = bytes.len() as u64;
        for _ in 0..200 {
            let at = commit_end + rng.below(file_end - commit_end + 1);
            let mut damaged = bytes.clone();
            for byte in &mut damaged[at as usize..] {
                *byte ^= rng.nonzero_byte();
            }
            let extra = 1 + rng.below(300) as usize;
            damaged.extend(rng.bytes(extra).iter().map(|b| b | 1));
            let (report, region) = scan_bytes(damaged);
            let kept = kept_before(&written, at);
            assert_records(&report, &written[..kept], &region);
            let expected_torn = written.get(kept).map_or(file_end, |w| w.offset);
            assert_eq!(
                report.torn_tail_at,
                Some(expected_torn),
                "seed {seed} at {at}"
            );
            assert_eq!(report.end_offset, expected_torn);
            assert!(report.corrupt.is_empty());
        }
    }
}

#[test]
fn a_damaged_header_before_the_commit_is_corruption_not_a_tail() {
    let mut rng = Rng::new(3);
    for seed in 0..200 {
        let (file, _region, written, commit_index) = committed_then_tail(seed, 40, 5, 300);
        let victim = rng.below(commit_index as u64) as usize;
        let mut bytes = file.bytes();
        let at = written[victim].offset + rng.below(48);
        bytes[at as usize] ^= rng.nonzero_byte();
        let (report, region) = scan_bytes(bytes);
        let mut expected = written.clone();
        expected.remove(victim);
        assert_records(&report, &expected, &region);
        assert_eq!(report.torn_tail_at, None, "seed {seed}");
        assert_eq!(report.corrupt.len(), 1, "seed {seed}");
        let corrupt = &report.corrupt[0];
        assert_eq!(corrupt.offset, written[victim].offset);
        assert_eq!(corrupt.len, written[victim].end() - written[victim].offset);
        assert!(matches!(corrupt.reason, CorruptReason::BadHeader(_)));
        assert_eq!(
            report.last_commit_seq,
            Some(written[commit_index].header.seq)
        );
    }
}

#[test]
fn a_damaged_payload_before_the_commit_is_caught_on_read_or_in_full_mode() {
    let (file, _region, written, commit_index) = committed_then_tail(7, 40, 5, 300);
    let victim = written[..commit_index]
        .iter()
        .position(|w| w.header.kind == RecordKind::Data && w.header.len > 10)
        .unwrap();
    let mut bytes = file.bytes();
    bytes[written[victim].payload_offset() as usize + 5] ^= 0x40;
    let file = VecFile::from_bytes(bytes);
    let (region, _) = RegionFile::open(file.clone()).unwrap();

    // Recovery: headers only before the commit, so the record is kept ...
    let report = scan_region(&*file, REGION_BYTES).unwrap();
    assert_eq!(report.records.len(), written.len());
    assert!(report.corrupt.is_empty());
    // ... and its payload is refused when read.
    let record = &report.records[victim];
    let err = region
        .read_payload(
            record.location(RegionId(7)),
            record.header.len,
            record.header.payload_crc,
        )
        .unwrap_err();
    assert!(matches!(err, LogError::CorruptPayload { .. }), "{err}");

    // Full: reported as corruption, dropped, the rest kept.
    let report = scan_region_with(&*file, REGION_BYTES, ScanMode::Full).unwrap();
    let mut expected = written.clone();
    expected.remove(victim);
    assert_records(&report, &expected, &region);
    assert_eq!(report.corrupt.len(), 1);
    assert_eq!(report.corrupt[0].offset, written[victim].offset);
    assert!(matches!(
        report.corrupt[0].reason,
        CorruptReason::PayloadChecksum { .. }
    ));
    assert_eq!(report.torn_tail_at, None);
}

#[test]
fn a_damaged_payload_after_the_commit_ends_the_region() {
    let (file, _region, written, commit_index) = committed_then_tail(8, 10, 30, 300);
    let victim = written[commit_index + 1..]
        .iter()
        .position(|w| w.header.kind == RecordKind::Data && w.header.len > 0)
        .unwrap()
        + commit_index
        + 1;
    let mut bytes = file.bytes();
    bytes[written[victim].payload_end() as usize - 1] ^= 0x01;
    let (report, region) = scan_bytes(bytes);
    assert_records(&report, &written[..victim], &region);
    assert_eq!(report.torn_tail_at, Some(written[victim].offset));
    assert!(report.corrupt.is_empty());
}

#[test]
fn a_bad_path_before_the_commit_is_corruption() {
    let records = vec![
        Planned::path(1, "good/path", 1),
        Planned::path(2, "bad/pat", 2),
        Planned::data(2, 0, b"data".to_vec(), 3),
        Planned::commit(4),
    ];
    let (file, _region, written) = region_with(REGION_BYTES, &records);
    // Turn "bad/pat" into "bad//at" and re-seal the payload checksum in the
    // header: the record decodes but names an invalid path.
    let mut bytes = file.bytes();
    let w = &written[1];
    bytes[w.payload_offset() as usize + 4] = b'/';
    let mut header = w.header;
    header.payload_crc = crc32c::crc32c(b"bad//at");
    bytes[w.offset as usize..w.offset as usize + 48].copy_from_slice(&header.encode());
    let (report, region) = scan_bytes(bytes);
    assert_records(
        &report,
        &[written[0].clone(), written[2].clone(), written[3].clone()],
        &region,
    );
    assert_eq!(report.corrupt.len(), 1);
    assert_eq!(report.corrupt[0].reason, CorruptReason::BadPath);
}

#[test]
fn sequence_numbers_must_increase() {
    let records = vec![
        Planned::data(1, 0, b"a".to_vec(), 10),
        Planned::data(1, 1, b"b".to_vec(), 11),
        Planned::data(1, 2, b"c".to_vec(), 11), // repeats
        Planned::data(1, 3, b"d".to_vec(), 5),  // goes back
        Planned::data(1, 4, b"e".to_vec(), 12),
        Planned::commit(13),
        Planned::data(1, 5, b"f".to_vec(), 14),
        Planned::data(1, 6, b"g".to_vec(), 14), // after the commit: a tail
        Planned::data(1, 7, b"h".to_vec(), 15),
    ];
    let (file, region, written) = region_with(REGION_BYTES, &records);
    let report = scan_region(&*file, REGION_BYTES).unwrap();
    let expected: Vec<_> = [0, 1, 4, 5, 6]
        .iter()
        .map(|&i| written[i].clone())
        .collect();
    assert_records(&report, &expected, &region);
    let corrupt: Vec<_> = report
        .corrupt
        .iter()
        .map(|c| (c.offset, &c.reason))
        .collect();
    assert_eq!(
        corrupt,
        vec![
            (
                written[2].offset,
                &CorruptReason::SeqNotIncreasing {
                    previous: 11,
                    seq: 11
                }
            ),
            (
                written[3].offset,
                &CorruptReason::SeqNotIncreasing {
                    previous: 11,
                    seq: 5
                }
            ),
        ]
    );
    assert_eq!(report.torn_tail_at, Some(written[7].offset));
    assert_eq!(report.highest_seq_seen, Some(15));
}

#[test]
fn zeros_end_the_log_unless_records_follow() {
    let mut rng = Rng::new(21);
    let records = random_records(&mut rng, 30, 0, 200, 0);
    let (file, region, written) = region_with(REGION_BYTES, &records);
    // A preallocated (zero-extended) file: the log ends at the zeros.
    file.set_len(REGION_BYTES).unwrap();
    let report = scan_region(&*file, REGION_BYTES).unwrap();
    assert_records(&report, &written, &region);
    assert_eq!(report.torn_tail_at, None);
    assert_eq!(report.end_offset, written.last().unwrap().end());

    // A zeroed block before a commit: corruption, the rest is kept.
    let mut records = random_records(&mut rng, 30, 0, 200, 0);
    let seq = records.last().unwrap().header.seq;
    records.push(Planned::commit(seq + 1));
    let (file, _, written) = region_with(REGION_BYTES, &records);
    let mut bytes = file.bytes();
    let (from, to) = (written[10].offset, written[12].end());
    bytes[from as usize..to as usize].fill(0);
    let (report, region) = scan_bytes(bytes.clone());
    let expected: Vec<_> = written[..10]
        .iter()
        .chain(&written[13..])
        .cloned()
        .collect();
    assert_records(&report, &expected, &region);
    assert_eq!(report.corrupt.len(), 1);
    assert_eq!(
        (report.corrupt[0].offset, report.corrupt[0].len),
        (from, to - from)
    );
    assert_eq!(report.corrupt[0].reason, CorruptReason::ZeroFilled);

    // The same zeros with no commit after them: a torn tail.
    let truncated_commit = bytes[..written.last().unwrap().offset as usize].to_vec();
    let (report, region) = scan_bytes(truncated_commit);
    assert_records(&report, &written[..10], &region);
    assert_eq!(report.torn_tail_at, Some(from));
}

#[test]
fn large_records_across_chunk_boundaries() {
    // Payloads from a few bytes to 1.5 MiB, so headers, paths and payloads
    // straddle the 1 MiB read chunks and large records are skipped with
    // small reads.
    let region_bytes = 24 << 20;
    let mut rng = Rng::new(77);
    let mut records = Vec::new();
    let mut seq = 0;
    for i in 0..60 {
        seq += 1;
        let len = match i % 8 {
            0 | 4 => rng.below(100),
            1 | 5 => 100_000 + rng.below(200_000),
            2 => 1_500_000,
            _ => rng.below(5000),
        } as usize;
        if i % 7 == 0 {
            records.push(Planned::path(i, &support::random_path(&mut rng), seq));
            seq += 1;
        }
        records.push(Planned::data(i, 0, rng.bytes(len), seq));
        if i == 40 {
            seq += 1;
            records.push(Planned::commit(seq));
        }
    }
    let file = VecFile::new();
    let region = RegionFile::create(file.clone(), RegionId(7), region_bytes, 3).unwrap();
    let written = support::append_all(&region, REGION_HEADER_BYTES, &records);
    let commit_index = last_commit_index(&written).unwrap();
    let file_len = file.len().unwrap();

    let report = scan_region(&*file, region_bytes).unwrap();
    assert_records(&report, &written, &region);
    let tail_bytes = file_len - written[commit_index].end();
    assert!(
        report.bytes_scanned < tail_bytes + file_len / 4,
        "headers only before the commit: read {} of {file_len} bytes",
        report.bytes_scanned
    );
    let full = scan_region_with(&*file, region_bytes, ScanMode::Full).unwrap();
    assert_records(&full, &written, &region);

    // A flipped byte in the middle of a 1.5 MiB payload after the commit.
    let victim = written[commit_index..]
        .iter()
        .position(|w| w.header.len == 1_500_000)
        .unwrap()
        + commit_index;
    let mut bytes = file.bytes();
    bytes[written[victim].payload_offset() as usize + 1_100_000] ^= 0x80;
    let file = VecFile::from_bytes(bytes);
    let report = scan_region(&*file, region_bytes).unwrap();
    let (region, _) = RegionFile::open(file).unwrap();
    assert_records(&report, &written[..victim], &region);
    assert_eq!(report.torn_tail_at, Some(written[victim].offset));
}

#[test]
fn a_header_that_disagrees_with_the_configuration_is_an_error() {
    let (file, _, _) = region_with(REGION_BYTES, &[Planned::commit(1)]);
    let err = scan_region(&*file, REGION_BYTES * 2).unwrap_err();
    assert!(
        matches!(
            err,
            LogError::BadRegionHeader {
                region: Some(RegionId(7)),
                reason: RegionHeaderError::RegionBytesMismatch { .. }
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("region 7"), "{err}");
    let err = scan_region(&*VecFile::from_bytes(vec![1; 10]), REGION_BYTES).unwrap_err();
    assert!(matches!(err, LogError::BadRegionHeader { .. }), "{err}");
}

#[test]
fn bytes_past_the_region_are_ignored() {
    let (file, region, written) = region_with(1024, &[Planned::data(1, 0, vec![5; 800], 1)]);
    let mut bytes = file.bytes();
    bytes.resize(4096, 0xAB);
    let file = VecFile::from_bytes(bytes);
    let report = scan_region(&*file, 1024).unwrap();
    assert_records(&report, &written, &region);
    assert!(report.bytes_scanned <= 1024);
}

/// Invariants of any report, whatever the bytes.
fn check_report(report: &ScanReport, file: &VecFile, region_bytes: u64) {
    let limit = file.len().unwrap().min(region_bytes);
    let mut previous: Option<u64> = None;
    let mut previous_end = REGION_HEADER_BYTES;
    for record in &report.records {
        assert!(record.record_offset() >= previous_end);
        assert_eq!(record.record_offset() % 8, 0);
        assert!(record.payload_offset + u64::from(record.header.len) <= limit);
        assert!(previous.is_none_or(|p| record.header.seq > p));
        assert_eq!(
            record.path.is_some(),
            record.header.kind == RecordKind::Path
        );
        previous = Some(record.header.seq);
        previous_end = record.record_offset() + record.header.record_len();
    }
    assert!(report.end_offset >= previous_end);
    assert!(report.end_offset <= region_bytes);
    if let Some(torn) = report.torn_tail_at {
        assert_eq!(report.end_offset, torn);
    }
    let commit_offset = report
        .records
        .iter()
        .rev()
        .find(|r| r.header.kind == RecordKind::Commit)
        .map(|r| r.record_offset());
    for corrupt in &report.corrupt {
        assert!(commit_offset.is_some_and(|c| corrupt.offset < c));
    }
    assert!(report.bytes_scanned <= 3 * region_bytes + 64);
}

fn region_prefix(region_bytes: u64) -> Vec<u8> {
    RegionHeader {
        region: RegionId(1),
        generation: 1,
        region_bytes,
        first_seq: 0,
    }
    .encode()
    .to_vec()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Arbitrary bytes after a valid region header (and arbitrary bytes
    /// with none): an error or a report, never a panic.
    #[test]
    fn arbitrary_bytes_never_panic(
        body in proptest::collection::vec(any::<u8>(), 0..4096),
        region_kib in 1u64..8,
        with_header in any::<bool>(),
    ) {
        let region_bytes = region_kib * 1024;
        let mut bytes = if with_header { region_prefix(region_bytes) } else { Vec::new() };
        bytes.extend(body);
        let file = VecFile::from_bytes(bytes);
        for mode in [ScanMode::Recovery, ScanMode::Full] {
            if let Ok(report) = scan_region_with(&*file, region_bytes, mode) {
                check_report(&report, &file, region_bytes);
            }
        }
    }

    /// A valid region damaged by random edits (flips, zeroed ranges,
    /// copied ranges that duplicate records, truncation): a report that
    /// keeps the invariants, every kept payload verified in Full mode.
    #[test]
    fn damaged_regions_keep_the_invariants(
        seed in any::<u64>(),
        edits in proptest::collection::vec((0u8..4, any::<u64>(), any::<u64>(), 1u64..600), 0..6),
    ) {
        let region_bytes = 16 * 1024;
        let mut rng = Rng::new(seed);
        let records = random_records(&mut rng, 60, 0, 150, 10);
        let (file, _, _) = region_with(region_bytes, &records);
        let mut bytes = file.bytes();
        for (kind, a, b, len) in edits {
            let n = bytes.len() as u64;
            if n <= 64 {
                break;
            }
            let (a, b) = (64 + a % (n - 64), 64 + b % (n - 64));
            let len = len.min(n - a).min(n - b) as usize;
            let (a, b) = (a as usize, b as usize);
            match kind {
                0 => bytes[a] ^= 1 << (b % 8),
                1 => bytes[a..a + len].fill(0),
                2 => bytes.copy_within(b..b + len, a),
                _ => bytes.truncate(a),
            }
        }
        let file = VecFile::from_bytes(bytes);
        let (region, _) = RegionFile::open(file.clone()).unwrap();
        let report = scan_region(&*file, region_bytes).unwrap();
        check_report(&report, &file, region_bytes);
        let full = scan_region_with(&*file, region_bytes, ScanMode::Full).unwrap();
        check_report(&full, &file, region_bytes);
        for record in &full.records {
            region
                .read_payload(record.location(RegionId(7)), record.header.len, record.header.payload_crc)
                .unwrap();
        }
    }
}

/// A retired region (format 5): its header's first sequence ends the log
/// before every record left from the fill the flusher wrote back, both
/// when nothing was appended since and when new records overwrote the
/// start of the old ones (the scan must not read on into the rest, nor
/// report it as corruption).
#[test]
fn a_retired_region_scans_as_its_new_records_only() {
    for seed in 0..20 {
        let mut rng = Rng::new(seed);
        let old = random_records(&mut rng, 40, 0, 700, 10);
        let (file, region, old_written) = region_with(REGION_BYTES, &old);
        let first_seq = old_written.last().unwrap().header.seq + 1;
        region.retire(4, first_seq).unwrap();
        let report = scan_region(&*file, REGION_BYTES).unwrap();
        assert!(report.records.is_empty(), "seed {seed}: nothing replayed");
        assert_eq!(report.header.first_seq, first_seq);
        assert_eq!(report.end_offset, REGION_HEADER_BYTES);
        assert_eq!(report.torn_tail_at, None);
        // Fewer, smaller records from the start: old ones lie behind them.
        let new = random_records(&mut rng, 5, first_seq, 100, 0);
        let written = support::append_all(&region, REGION_HEADER_BYTES, &new);
        let report = scan_region(&*file, REGION_BYTES).unwrap();
        assert_records(&report, &written, &region);
        assert!(report.corrupt.is_empty(), "seed {seed}");
        assert_eq!(report.end_offset, written.last().unwrap().end());
        assert_eq!(
            report.highest_seq_seen,
            Some(written.last().unwrap().header.seq)
        );
    }
}
