//! Region files: create/open, appends at caller-chosen offsets, checked
//! payload reads, reset.

#[path = "log_support/mod.rs"]
mod support;

use std::io;
use std::sync::Arc;

use sluice_engine::log::{
    record_len, scan_region, LogError, RecordHeader, RegionFile, RegionHeader, RegionHeaderError,
    REGION_HEADER_BYTES,
};
use sluice_env::BackendFile;
use sluice_policy::{FileId, LogLocation, RegionId};
use support::{region_with, Planned, Rng, VecFile};

const REGION_BYTES: u64 = 64 * 1024;

#[test]
fn create_writes_a_header_that_open_reads() {
    let file = VecFile::from_bytes(vec![0xEE; 1000]);
    let region = RegionFile::create(file.clone(), RegionId(2), REGION_BYTES, 5).unwrap();
    assert_eq!(
        file.len().unwrap(),
        REGION_HEADER_BYTES,
        "old bytes dropped"
    );
    assert_eq!(region.generation(), 5);
    let (opened, header) = RegionFile::open(file).unwrap();
    assert_eq!(
        header,
        RegionHeader {
            region: RegionId(2),
            generation: 5,
            region_bytes: REGION_BYTES,
            first_seq: 0,
        }
    );
    assert_eq!(opened.header(), header);
    assert_eq!(opened.region(), RegionId(2));
    assert_eq!(opened.region_bytes(), REGION_BYTES);
}

#[test]
fn create_refuses_unusable_sizes() {
    for bad in [0, 100, 1001] {
        let err = RegionFile::create(VecFile::new(), RegionId(0), bad, 0).unwrap_err();
        assert!(
            matches!(
                err,
                LogError::BadRegionHeader {
                    reason: RegionHeaderError::BadRegionBytes(_),
                    ..
                }
            ),
            "{err}"
        );
    }
}

#[test]
fn open_names_what_is_wrong_with_the_header() {
    let good = RegionHeader {
        region: RegionId(1),
        generation: 0,
        region_bytes: REGION_BYTES,
        first_seq: 0,
    }
    .encode();
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (Vec::new(), "shorter than"),
        (good[..63].to_vec(), "shorter than"),
        (
            {
                let mut b = good.to_vec();
                b[0] = b'X';
                b
            },
            "bad magic",
        ),
        (
            {
                let mut b = good.to_vec();
                b[4] = 7;
                b
            },
            "format version 7",
        ),
        (
            {
                let mut b = good.to_vec();
                b[30] = 1;
                b
            },
            "checksum mismatch",
        ),
    ];
    for (bytes, expected) in cases {
        let err = RegionFile::open(VecFile::from_bytes(bytes)).unwrap_err();
        let message = err.to_string();
        assert!(message.contains(expected), "{message}");
        assert!(message.contains("offset 0"), "{message}");
        assert!(err.is_corruption());
    }
}

#[test]
fn append_and_read_back_every_kind() {
    let records = vec![
        Planned::path(1, "a/b.dat", 1),
        Planned::data(1, 4096, b"some bytes".to_vec(), 2),
        Planned::data(1, 0, Vec::new(), 3),
        Planned::truncate(1, 10, 4),
        Planned::unlink(1, 5),
        Planned::commit(6),
    ];
    let (file, region, written) = region_with(REGION_BYTES, &records);
    assert_eq!(written[0].offset, 64);
    for w in &written {
        assert_eq!(w.offset % 8, 0);
        let payload = region
            .read_payload(
                LogLocation {
                    region: RegionId(7),
                    offset: w.payload_offset(),
                },
                w.header.len,
                w.header.payload_crc,
            )
            .unwrap();
        assert_eq!(payload, w.payload);
        let mut into = vec![0u8; w.payload.len()];
        region
            .read_payload_into(
                LogLocation {
                    region: RegionId(7),
                    offset: w.payload_offset(),
                },
                w.header.payload_crc,
                &mut into,
            )
            .unwrap();
        assert_eq!(into, w.payload);
    }
    // Records are padded with zeros to the alignment, in the same write.
    let end = written.last().unwrap().end();
    assert_eq!(file.len().unwrap(), end);
    let bytes = file.bytes();
    let data = &written[1];
    assert!(bytes[data.payload_end() as usize..data.end() as usize]
        .iter()
        .all(|&b| b == 0));
}

#[test]
fn a_corrupt_payload_is_never_served() {
    let payload = Rng::new(1).bytes(3000);
    let (file, region, written) = region_with(REGION_BYTES, &[Planned::data(9, 0, payload, 1)]);
    let w = &written[0];
    let location = LogLocation {
        region: RegionId(7),
        offset: w.payload_offset(),
    };
    let mut bytes = file.bytes();
    bytes[w.payload_offset() as usize + 1234] ^= 0x01;
    file.set_bytes(bytes);
    let err = region
        .read_payload(location, w.header.len, w.header.payload_crc)
        .unwrap_err();
    assert!(matches!(err, LogError::CorruptPayload { .. }), "{err}");
    assert!(err.is_corruption());
    let message = err.to_string();
    assert!(
        message.contains("region 7") && message.contains(&format!("offset {}", w.payload_offset())),
        "{message}"
    );
    let mut into = vec![0u8; w.payload.len()];
    assert!(matches!(
        region.read_payload_into(location, w.header.payload_crc, &mut into),
        Err(LogError::CorruptPayload { .. })
    ));

    // A file cut inside the payload: truncated, not served either.
    file.set_len(w.payload_offset() + 100).unwrap();
    let err = region
        .read_payload(location, w.header.len, w.header.payload_crc)
        .unwrap_err();
    assert!(
        matches!(err, LogError::TruncatedPayload { available: 100, .. }),
        "{err}"
    );
}

#[test]
fn reads_outside_the_region_are_refused_before_allocating() {
    let (_file, region, _) = region_with(REGION_BYTES, &[Planned::commit(1)]);
    let cases = [
        (RegionId(7), REGION_BYTES - 10, 11),
        (RegionId(7), 0, 10),
        (RegionId(7), 112, u32::MAX), // would allocate 4 GiB if trusted
        (RegionId(7), u64::MAX - 2, 10),
        (RegionId(8), 112, 10),
    ];
    for (region_id, offset, len) in cases {
        let err = region
            .read_payload(
                LogLocation {
                    region: region_id,
                    offset,
                },
                len,
                0,
            )
            .unwrap_err();
        assert!(matches!(err, LogError::OutOfRange { .. }), "{err}");
    }
}

#[test]
fn appends_that_do_not_fit_are_refused() {
    let (_file, region, _) = region_with(1024, &[]);
    let header = RecordHeader::data(FileId(1), 0, &[1; 100], 1).unwrap();
    let payload = [1u8; 100];
    for offset in [0, 8, 63, 65, 1024 - 8, 1024 - 144] {
        let err = region.append_at(offset, &header, &payload).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{offset}: {err}");
        assert!(err.to_string().contains("region 7"), "{err}");
    }
    // The last offset where it fits.
    assert_eq!(RegionFile::space_needed(100), 152);
    assert!(region.fits(1024 - 152, 100));
    region.append_at(1024 - 152, &header, &payload).unwrap();
    // A header that does not describe the payload.
    let err = region.append_at(64, &header, &payload[..99]).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
}

#[test]
fn concurrent_appends_at_reserved_offsets() {
    let file = VecFile::new();
    let region = Arc::new(RegionFile::create(file.clone(), RegionId(1), 1 << 20, 0).unwrap());
    let threads = 4u64;
    let per_thread = 200u64;
    let payload_len = 40u32;
    let slot = record_len(payload_len);
    std::thread::scope(|scope| {
        for t in 0..threads {
            let region = region.clone();
            scope.spawn(move || {
                for i in 0..per_thread {
                    let n = i * threads + t;
                    let payload = vec![n as u8; payload_len as usize];
                    let header = RecordHeader::data(FileId(t), i, &payload, n + 1).unwrap();
                    region
                        .append_at(REGION_HEADER_BYTES + n * slot, &header, &payload)
                        .unwrap();
                }
            });
        }
    });
    let report = scan_region(&*file, 1 << 20).unwrap();
    assert_eq!(report.records.len() as u64, threads * per_thread);
    assert!(report.corrupt.is_empty() && report.torn_tail_at.is_none());
    for (n, record) in report.records.iter().enumerate() {
        assert_eq!(record.header.seq, n as u64 + 1);
        let payload = region
            .read_payload(
                record.location(RegionId(1)),
                record.header.len,
                record.header.payload_crc,
            )
            .unwrap();
        assert_eq!(payload, vec![n as u8; payload_len as usize]);
    }
}

#[test]
fn reset_empties_the_region_with_a_new_generation() {
    let mut rng = Rng::new(11);
    let records = support::random_records(&mut rng, 50, 0, 500, 10);
    let (file, region, _) = region_with(REGION_BYTES, &records);
    let before = scan_region(&*file, REGION_BYTES).unwrap();
    assert_eq!(before.records.len(), 50);
    assert_eq!(before.header.generation, 3);

    region.reset(4).unwrap();
    assert_eq!(region.generation(), 4);
    assert_eq!(file.len().unwrap(), REGION_HEADER_BYTES);
    let after = scan_region(&*file, REGION_BYTES).unwrap();
    assert!(after.records.is_empty());
    assert_eq!(after.header.generation, 4);
    assert_eq!(after.header.region, RegionId(7));
    assert_eq!(after.end_offset, REGION_HEADER_BYTES);
    assert_eq!(after.torn_tail_at, None);
    assert!(after.corrupt.is_empty());
    let (_, header) = RegionFile::open(file.clone()).unwrap();
    assert_eq!(header.generation, 4);

    // The region is reusable from the first record offset.
    let commit = RecordHeader::commit(1);
    region
        .append_at(RegionFile::first_record_offset(), &commit, &[])
        .unwrap();
    let again = scan_region(&*file, REGION_BYTES).unwrap();
    assert_eq!(again.records.len(), 1);
    assert_eq!(again.last_commit_seq, Some(1));
}
