//! Record and region headers: byte layout, round trips, and rejection of
//! every damaged header.

use sluice_engine::log::{
    record_len, RecordError, RecordHeader, RecordKind, RegionHeader, RegionHeaderError,
    MAX_PATH_BYTES, RECORD_ALIGN, RECORD_HEADER_BYTES, REGION_HEADER_BYTES,
};
use sluice_env::RelPath;
use sluice_policy::{FileId, RegionId};

fn one_of_each_kind() -> Vec<RecordHeader> {
    let path = RelPath::new("dir/sub/file.dat").unwrap();
    vec![
        RecordHeader::data(FileId(42), 1 << 33, b"hello, log", 7).unwrap(),
        RecordHeader::data(FileId(1), 0, &[], 8).unwrap(),
        RecordHeader::path(FileId(42), &path, 9).unwrap(),
        RecordHeader::truncate(FileId(42), 12345, 10),
        RecordHeader::unlink(FileId(42), 11),
        RecordHeader::clean(FileId(42), 11, 0..u64::MAX, 12).0,
        RecordHeader::clean(FileId(42), 11, 4096..1 << 20, 13).0,
        RecordHeader::commit(u64::MAX),
    ]
}

#[test]
fn constants_match_the_contract() {
    assert_eq!(REGION_HEADER_BYTES, 64);
    assert_eq!(RECORD_HEADER_BYTES, 48);
    assert_eq!(RECORD_ALIGN, 8);
    assert_eq!(MAX_PATH_BYTES, 4096);
    assert_eq!(record_len(0), 48);
    assert_eq!(record_len(1), 56);
    assert_eq!(record_len(8), 56);
    assert_eq!(record_len(9), 64);
    assert_eq!(record_len(u32::MAX), (48 + u64::from(u32::MAX) + 7) & !7);
    for code in 0..=255u8 {
        let kind = RecordKind::from_code(code);
        assert_eq!(kind.is_some(), (1..=6).contains(&code), "code {code}");
        if let Some(kind) = kind {
            assert_eq!(kind.code(), code);
        }
    }
}

#[test]
fn record_header_layout_is_little_endian_as_documented() {
    let header =
        RecordHeader::data(FileId(0x0102030405060708), 0x1112131415161718, b"abc", 99).unwrap();
    let bytes = header.encode();
    assert_eq!(&bytes[0..4], b"SLRC");
    assert_eq!(bytes[4], 1);
    assert_eq!(&bytes[5..8], &[0, 0, 0]);
    assert_eq!(&bytes[8..16], &0x0102030405060708u64.to_le_bytes());
    assert_eq!(&bytes[16..24], &0x1112131415161718u64.to_le_bytes());
    assert_eq!(&bytes[24..28], &3u32.to_le_bytes());
    assert_eq!(&bytes[28..32], &crc32c::crc32c(b"abc").to_le_bytes());
    assert_eq!(&bytes[32..40], &99u64.to_le_bytes());
    assert_eq!(&bytes[40..44], &crc32c::crc32c(&bytes[..40]).to_le_bytes());
    assert_eq!(&bytes[44..48], &[0, 0, 0, 0]);
}

#[test]
fn every_kind_round_trips() {
    for header in one_of_each_kind() {
        let decoded = RecordHeader::decode(&header.encode()).unwrap();
        assert_eq!(decoded, header);
    }
    let kinds: Vec<_> = one_of_each_kind().iter().map(|h| h.kind).collect();
    for kind in RecordKind::ALL {
        assert!(kinds.contains(&kind), "{kind} not covered");
    }
}

#[test]
fn constructors_fill_the_fields() {
    let path = RelPath::new("a/b").unwrap();
    let header = RecordHeader::path(FileId(5), &path, 3).unwrap();
    assert_eq!(
        (header.kind, header.file_id, header.offset, header.len),
        (RecordKind::Path, FileId(5), 0, 3)
    );
    assert!(header.payload_matches(b"a/b"));
    assert!(!header.payload_matches(b"a/c"));
    assert!(!header.payload_matches(b"a/bc"));

    let truncate = RecordHeader::truncate(FileId(5), 77, 4);
    assert_eq!((truncate.offset, truncate.len), (77, 0));
    let commit = RecordHeader::commit(9);
    assert_eq!((commit.file_id, commit.seq), (FileId(0), 9));

    let data = RecordHeader::data(FileId(1), 10, b"xyz", 1).unwrap();
    assert_eq!(data.payload_crc, crc32c::crc32c(b"xyz"));
    assert_eq!(data.record_len(), 56);
}

#[test]
fn path_records_refuse_the_root_and_long_paths() {
    assert_eq!(
        RecordHeader::path(FileId(1), &RelPath::root(), 1),
        Err(RecordError::BadPath { len: 0 })
    );
    let long = RelPath::new(&"x".repeat(MAX_PATH_BYTES + 1)).unwrap();
    assert!(matches!(
        RecordHeader::path(FileId(1), &long, 1),
        Err(RecordError::BadPath { .. })
    ));
    let longest = RelPath::new(&"x".repeat(MAX_PATH_BYTES)).unwrap();
    assert!(RecordHeader::path(FileId(1), &longest, 1).is_ok());
}

#[test]
fn every_flipped_bit_of_a_record_header_is_rejected() {
    for header in one_of_each_kind() {
        let good = header.encode();
        for bit in 0..48 * 8 {
            let mut bad = good;
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(
                RecordHeader::decode(&bad).is_err(),
                "{} record with bit {bit} flipped was accepted",
                header.kind
            );
        }
    }
}

#[test]
fn decode_names_what_is_wrong() {
    let good = RecordHeader::commit(1).encode();

    let mut bad = good;
    bad[0] = b'X';
    assert!(matches!(
        RecordHeader::decode(&bad),
        Err(RecordError::BadMagic(_))
    ));

    let mut bad = good;
    bad[20] ^= 1;
    assert!(matches!(
        RecordHeader::decode(&bad),
        Err(RecordError::BadHeaderChecksum { .. })
    ));

    // Valid checksums over fields that break a rule: re-seal by hand.
    let reseal = |mut bytes: [u8; 48]| {
        let crc = crc32c::crc32c(&bytes[..40]);
        bytes[40..44].copy_from_slice(&crc.to_le_bytes());
        bytes
    };
    let mut bad = good;
    bad[4] = 9;
    assert_eq!(
        RecordHeader::decode(&reseal(bad)),
        Err(RecordError::UnknownKind(9))
    );
    let mut bad = good;
    bad[6] = 1;
    assert_eq!(
        RecordHeader::decode(&reseal(bad)),
        Err(RecordError::NonZeroReserved)
    );
    let mut bad = reseal(good);
    bad[47] = 1; // padding: outside the checksum, still checked
    assert_eq!(
        RecordHeader::decode(&bad),
        Err(RecordError::NonZeroReserved)
    );
    let mut bad = good;
    bad[8] = 1; // a commit about a file
    assert!(matches!(
        RecordHeader::decode(&reseal(bad)),
        Err(RecordError::Malformed { .. })
    ));
    let mut bad = good;
    bad[24] = 1; // a commit with a payload
    assert!(matches!(
        RecordHeader::decode(&reseal(bad)),
        Err(RecordError::Malformed { .. })
    ));
    let mut bad = RecordHeader::path(FileId(1), &RelPath::new("p").unwrap(), 1)
        .unwrap()
        .encode();
    bad[24..28].copy_from_slice(&(MAX_PATH_BYTES as u32 + 1).to_le_bytes());
    assert!(matches!(
        RecordHeader::decode(&reseal(bad)),
        Err(RecordError::Malformed { .. })
    ));
    // A clean record's payload is empty (format 3) or a byte range.
    let mut bad = RecordHeader::clean(FileId(1), 1, 0..8, 2).0.encode();
    bad[24..28].copy_from_slice(&8u32.to_le_bytes());
    assert!(matches!(
        RecordHeader::decode(&reseal(bad)),
        Err(RecordError::Malformed { .. })
    ));
    let (clean, payload) = RecordHeader::clean(FileId(1), 1, 4096..8192, 2);
    assert_eq!(RecordHeader::clean_range(&payload), Some(4096..8192));
    assert!(clean.payload_matches(&payload));
    assert_eq!(RecordHeader::clean_range(&[]), Some(0..u64::MAX));
    assert_eq!(RecordHeader::clean_range(&[0; 8]), None);
    let mut reversed = [0u8; 16];
    reversed[..8].copy_from_slice(&9u64.to_le_bytes());
    reversed[8..].copy_from_slice(&9u64.to_le_bytes());
    assert_eq!(RecordHeader::clean_range(&reversed), None, "empty range");
    let mut bad = RecordHeader::unlink(FileId(1), 1).encode();
    bad[28] = 1; // an empty payload with a checksum
    assert!(matches!(
        RecordHeader::decode(&reseal(bad)),
        Err(RecordError::Malformed { .. })
    ));
    // Messages say what is wrong.
    let message = RecordHeader::decode(&reseal({
        let mut b = good;
        b[4] = 9;
        b
    }))
    .unwrap_err()
    .to_string();
    assert!(message.contains("unknown record kind 9"), "{message}");
}

#[test]
fn payload_checksum_mismatch_is_detected() {
    let payload = vec![0xA5u8; 4096];
    let header = RecordHeader::data(FileId(3), 0, &payload, 1).unwrap();
    assert!(header.payload_matches(&payload));
    for at in [0, 1, 2047, 4095] {
        let mut bad = payload.clone();
        bad[at] ^= 0x10;
        assert!(!header.payload_matches(&bad), "flip at {at}");
    }
}

#[test]
fn region_header_round_trips_and_rejects_damage() {
    let header = RegionHeader {
        region: RegionId(3),
        generation: 1 << 40,
        region_bytes: 1 << 30,
        first_seq: 77,
    };
    let good = header.encode();
    assert_eq!(&good[0..4], b"SLRG");
    assert_eq!(&good[4..6], &5u16.to_le_bytes());
    assert_eq!(&good[28..36], &77u64.to_le_bytes());
    assert_eq!(&good[8..12], &3u32.to_le_bytes());
    assert_eq!(&good[12..20], &(1u64 << 40).to_le_bytes());
    assert_eq!(&good[20..28], &(1u64 << 30).to_le_bytes());
    assert_eq!(&good[60..64], &crc32c::crc32c(&good[..60]).to_le_bytes());
    assert_eq!(RegionHeader::decode(&good), Ok(header));

    for bit in 0..64 * 8 {
        let mut bad = good;
        bad[bit / 8] ^= 1 << (bit % 8);
        assert!(RegionHeader::decode(&bad).is_err(), "bit {bit}");
    }

    let mut bad = good;
    bad[1] = b'X';
    assert!(matches!(
        RegionHeader::decode(&bad),
        Err(RegionHeaderError::BadMagic(_))
    ));
    let mut bad = good;
    bad[4] = 6;
    assert_eq!(
        RegionHeader::decode(&bad),
        Err(RegionHeaderError::UnsupportedVersion(6))
    );
    // Version 1 (path records without a capacity inode), version 2 (no
    // clean records), version 3 (clean records without a range) and
    // version 4 (no first sequence: those bytes are reserved, zero) are
    // still read.
    let without_first_seq = RegionHeader {
        first_seq: 0,
        ..header
    };
    for version in [1, 2, 3, 4] {
        let mut old = without_first_seq.encode();
        old[4] = version;
        let crc = crc32c::crc32c(&old[..60]);
        old[60..64].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(
            RegionHeader::decode(&old),
            Ok(without_first_seq),
            "version {version}"
        );
        // A first sequence in a header of a version without one.
        old[28] = 1;
        let crc = crc32c::crc32c(&old[..60]);
        old[60..64].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(
            RegionHeader::decode(&old),
            Err(RegionHeaderError::NonZeroReserved),
            "version {version}"
        );
    }
    let mut bad = good;
    bad[13] ^= 1;
    assert!(matches!(
        RegionHeader::decode(&bad),
        Err(RegionHeaderError::BadChecksum { .. })
    ));
    for region_bytes in [0, 64, 111, 1001] {
        let odd = RegionHeader {
            region_bytes,
            first_seq: 0,
            ..header
        };
        assert_eq!(
            RegionHeader::decode(&odd.encode()),
            Err(RegionHeaderError::BadRegionBytes(region_bytes)),
            "{region_bytes}"
        );
    }
}
