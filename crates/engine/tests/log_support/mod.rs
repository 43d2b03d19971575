//! Helpers shared by the `log_*` tests (included with `#[path]`): a tiny
//! in-memory `BackendFile`, a seeded generator, and builders of regions of
//! random records whose expected scan result is known.
#![allow(dead_code)]

use std::io;
use std::sync::{Arc, Mutex};

use sluice_engine::log::{
    record_len, RecordHeader, RecordKind, RegionFile, ScanReport, REGION_HEADER_BYTES,
};
use sluice_env::{BackendFile, RelPath};
use sluice_policy::{FileId, RegionId};

/// A file in a `Mutex<Vec<u8>>`: what the log needs from a backend file,
/// and nothing else (no sync semantics).
#[derive(Debug, Default)]
pub struct VecFile(Mutex<Vec<u8>>);

impl VecFile {
    pub fn new() -> Arc<VecFile> {
        Arc::new(VecFile::default())
    }

    pub fn from_bytes(bytes: Vec<u8>) -> Arc<VecFile> {
        Arc::new(VecFile(Mutex::new(bytes)))
    }

    pub fn bytes(&self) -> Vec<u8> {
        self.0.lock().unwrap().clone()
    }

    pub fn set_bytes(&self, bytes: Vec<u8>) {
        *self.0.lock().unwrap() = bytes;
    }
}

impl BackendFile for VecFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let data = self.0.lock().unwrap();
        let Ok(start) = usize::try_from(offset) else {
            return Ok(0);
        };
        if start >= data.len() {
            return Ok(0);
        }
        let n = buf.len().min(data.len() - start);
        buf[..n].copy_from_slice(&data[start..start + n]);
        Ok(n)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let mut data = self.0.lock().unwrap();
        let start = offset as usize;
        if data.len() < start + buf.len() {
            data.resize(start + buf.len(), 0);
        }
        data[start..start + buf.len()].copy_from_slice(buf);
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        Ok(())
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.0.lock().unwrap().len() as u64)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.0.lock().unwrap().resize(len as usize, 0);
        Ok(())
    }
}

/// splitmix64: small, seeded, good enough for test data.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next_u64() as u8).collect()
    }

    /// A non-zero byte (to change a byte for sure by XOR).
    pub fn nonzero_byte(&mut self) -> u8 {
        1 + self.below(255) as u8
    }
}

/// A record to append: its header and payload.
#[derive(Clone, Debug)]
pub struct Planned {
    pub header: RecordHeader,
    pub payload: Vec<u8>,
}

impl Planned {
    pub fn data(file: u64, offset: u64, payload: Vec<u8>, seq: u64) -> Planned {
        Planned {
            header: RecordHeader::data(FileId(file), offset, &payload, seq).unwrap(),
            payload,
        }
    }

    pub fn path(file: u64, path: &str, seq: u64) -> Planned {
        let rel = RelPath::new(path).unwrap();
        Planned {
            header: RecordHeader::path(FileId(file), &rel, seq).unwrap(),
            payload: path.as_bytes().to_vec(),
        }
    }

    pub fn commit(seq: u64) -> Planned {
        Planned {
            header: RecordHeader::commit(seq),
            payload: Vec::new(),
        }
    }

    pub fn truncate(file: u64, size: u64, seq: u64) -> Planned {
        Planned {
            header: RecordHeader::truncate(FileId(file), size, seq),
            payload: Vec::new(),
        }
    }

    pub fn unlink(file: u64, seq: u64) -> Planned {
        Planned {
            header: RecordHeader::unlink(FileId(file), seq),
            payload: Vec::new(),
        }
    }
}

/// A record as written: where, and what.
#[derive(Clone, Debug)]
pub struct Written {
    pub offset: u64,
    pub header: RecordHeader,
    pub payload: Vec<u8>,
}

impl Written {
    pub fn payload_offset(&self) -> u64 {
        self.offset + 48
    }

    pub fn payload_end(&self) -> u64 {
        self.payload_offset() + self.payload.len() as u64
    }

    pub fn end(&self) -> u64 {
        self.offset + record_len(self.header.len)
    }

    pub fn path(&self) -> Option<RelPath> {
        (self.header.kind == RecordKind::Path)
            .then(|| RelPath::new(std::str::from_utf8(&self.payload).unwrap()).unwrap())
    }
}

/// A random valid relative path.
pub fn random_path(rng: &mut Rng) -> String {
    let depth = 1 + rng.below(3);
    (0..depth)
        .map(|_| format!("d{}", rng.below(1000)))
        .collect::<Vec<_>>()
        .join("/")
        + &format!("/file-{}.dat", rng.below(100_000))
}

/// `n` random records with increasing sequence numbers starting above
/// `first_seq`: data (lengths 0..=max_payload, some larger), path, truncate,
/// unlink and (with `commit_percent`) commit records.
pub fn random_records(
    rng: &mut Rng,
    n: usize,
    first_seq: u64,
    max_payload: usize,
    commit_percent: u64,
) -> Vec<Planned> {
    let mut seq = first_seq;
    let mut records = Vec::with_capacity(n);
    for _ in 0..n {
        seq += 1 + rng.below(3);
        let file = 1 + rng.below(20);
        let planned = if rng.chance(commit_percent) {
            Planned::commit(seq)
        } else {
            match rng.below(10) {
                0 | 1 => Planned::path(file, &random_path(rng), seq),
                2 => Planned::truncate(file, rng.below(1 << 40), seq),
                3 => Planned::unlink(file, seq),
                _ => {
                    let len = rng.below(max_payload as u64 + 1) as usize;
                    Planned::data(file, rng.below(1 << 40), rng.bytes(len), seq)
                }
            }
        };
        records.push(planned);
    }
    records
}

/// Append `records` back to back from `start`.
pub fn append_all(region: &RegionFile, start: u64, records: &[Planned]) -> Vec<Written> {
    let mut offset = start;
    records
        .iter()
        .map(|planned| {
            region
                .append_at(offset, &planned.header, &planned.payload)
                .unwrap();
            let written = Written {
                offset,
                header: planned.header,
                payload: planned.payload.clone(),
            };
            offset = written.end();
            written
        })
        .collect()
}

/// A fresh region over a new `VecFile` holding `records`.
pub fn region_with(
    region_bytes: u64,
    records: &[Planned],
) -> (Arc<VecFile>, RegionFile, Vec<Written>) {
    let file = VecFile::new();
    let region = RegionFile::create(file.clone(), RegionId(7), region_bytes, 3).unwrap();
    let written = append_all(&region, REGION_HEADER_BYTES, records);
    (file, region, written)
}

/// The scan kept exactly `expected`, in order, with the right payload
/// offsets and paths; and every data payload reads back.
pub fn assert_records(report: &ScanReport, expected: &[Written], region: &RegionFile) {
    let got: Vec<_> = report
        .records
        .iter()
        .map(|r| (r.record_offset(), r.header, r.path.clone()))
        .collect();
    let want: Vec<_> = expected
        .iter()
        .map(|w| (w.offset, w.header, w.path()))
        .collect();
    assert_eq!(got.len(), want.len(), "record count");
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g, w, "record {i}");
    }
    for (record, written) in report.records.iter().zip(expected) {
        assert_eq!(record.payload_offset, written.payload_offset());
        let payload = region
            .read_payload(
                record.location(region.region()),
                record.header.len,
                record.header.payload_crc,
            )
            .unwrap();
        assert_eq!(payload, written.payload);
    }
}
