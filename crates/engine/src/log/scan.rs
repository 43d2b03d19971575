//! The recovery scan of one region file.
//!
//! Rules (`docs/engine.md`):
//! * records before the region's last commit record were synced: their
//!   headers are verified, their payloads are not (the payload checksum is
//!   checked again whenever the payload is read) — unless
//!   [`ScanMode::Full`] asks for every payload;
//! * records after the last commit are verified in full; the first failure
//!   there ends the region (a torn tail: the rest is dropped);
//! * a failure before the last commit is corruption: it is reported as a
//!   [`CorruptRange`], the scan resynchronises on the next 8-byte aligned
//!   `SLRC` magic whose header decodes with a valid checksum, and the newer
//!   records are kept;
//! * sequence numbers increase strictly within a region: a record whose
//!   sequence is not above the previous kept record's is a failure too;
//! * an all-zero header is the end of the log when no valid record follows
//!   it; when one does (a zeroed block inside the log), the zeros are a
//!   failure like any other;
//! * a valid record whose sequence is below the region header's first
//!   sequence (format 5) is the end of the log: it is left from a fill the
//!   flusher wrote back before it retired the region, and later records
//!   overwrite such records from the start.
//!
//! How: pass 1 walks the record headers from the start, reading the file in
//! large chunks ([`SCAN_CHUNK_BYTES`]), or with small reads that skip the
//! payloads while records are large; it keeps every record whose header is valid
//! and notes every failure. Where the last commit is is then known, so the
//! failures are classified (corruption before it, torn tail at the first one
//! after it) and pass 2 verifies the payloads that need it. Path payloads
//! are always read and checked in pass 1: recovery needs them.
//!
//! Invariants: the scan never panics and never trusts a length from the
//! file before bounding it by the region size; memory is one read buffer of
//! at most [`SCAN_CHUNK_BYTES`] (and at most the region size) plus the
//! report, which holds at most one record per [`RECORD_HEADER_BYTES`] of
//! region.

use std::fmt;
use std::io;

use sluice_env::{BackendFile, RelPath};
use sluice_policy::{LogLocation, RegionId};

use super::header::{RegionHeader, RegionHeaderError};
use super::record::{
    decode_path, RecordError, RecordHeader, RecordKind, RECORD_ALIGN, RECORD_HEADER_BYTES,
    RECORD_MAGIC, REGION_HEADER_BYTES,
};
use super::LogError;

/// Bytes the scan reads at a time.
pub const SCAN_CHUNK_BYTES: usize = 1024 * 1024;
/// Bytes read for the next header after skipping a large record.
const PROBE_BYTES: usize = 4096;
/// While records average at least this long (a moving average over about
/// the last four), a header outside the read window is fetched with a small
/// read instead of a chunk that would mostly hold payload bytes pass 1 does
/// not need; below it a chunk holds at least 16 headers and wins.
const LARGE_RECORD_BYTES: u64 = 64 * 1024;

/// How much of a region the scan verifies.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ScanMode {
    /// Recovery: headers only before the last commit, headers and payloads
    /// after it.
    #[default]
    Recovery,
    /// Every payload checksum too (scrub, tests); a payload failure before
    /// the last commit is reported as corruption and its record dropped.
    Full,
}

/// A record the scan kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScannedRecord {
    /// Its header.
    pub header: RecordHeader,
    /// Offset of its payload in the region file (the header is just before).
    pub payload_offset: u64,
    /// For path records: the path.
    pub path: Option<RelPath>,
    /// For clean records: the byte range they cover (the whole file for a
    /// format-3 clean record, which has no payload).
    pub clean: Option<std::ops::Range<u64>>,
}

impl ScannedRecord {
    /// Offset of the record (its header) in the region file.
    pub fn record_offset(&self) -> u64 {
        self.payload_offset - RECORD_HEADER_BYTES
    }

    /// Where its payload is, as the extent index keeps it.
    pub fn location(&self, region: RegionId) -> LogLocation {
        LogLocation {
            region,
            offset: self.payload_offset,
        }
    }
}

/// Why a byte range of a region was not accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CorruptReason {
    /// The header does not decode.
    BadHeader(RecordError),
    /// An all-zero header with valid records after it.
    ZeroFilled,
    /// The header's length runs past the end of the region.
    BeyondRegion {
        /// Where the record would end.
        record_end: u64,
    },
    /// The file ends inside the record.
    Truncated {
        /// Bytes of the file (or of the region, if smaller).
        file_len: u64,
    },
    /// The payload checksum does not match.
    PayloadChecksum {
        /// crc32c stored in the header.
        expected: u32,
        /// crc32c of the payload bytes.
        actual: u32,
    },
    /// A path record whose payload is not a valid relative path.
    BadPath,
    /// A clean record whose payload is not a byte range.
    BadCleanRange,
    /// The sequence number does not increase.
    SeqNotIncreasing {
        /// Sequence of the previous kept record.
        previous: u64,
        /// Sequence of this one.
        seq: u64,
    },
}

impl fmt::Display for CorruptReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CorruptReason::BadHeader(e) => write!(f, "{e}"),
            CorruptReason::ZeroFilled => f.write_str("zero-filled bytes inside the log"),
            CorruptReason::BeyondRegion { record_end } => {
                write!(f, "record would end at {record_end}, past the region")
            }
            CorruptReason::Truncated { file_len } => {
                write!(f, "file ends at {file_len}, inside the record")
            }
            CorruptReason::PayloadChecksum { expected, actual } => write!(
                f,
                "payload checksum mismatch (record says {expected:#010x}, payload has \
                 {actual:#010x})"
            ),
            CorruptReason::BadPath => f.write_str("path record with an invalid path"),
            CorruptReason::BadCleanRange => f.write_str("clean record with an invalid byte range"),
            CorruptReason::SeqNotIncreasing { previous, seq } => write!(
                f,
                "sequence {seq} does not follow the previous record's {previous}"
            ),
        }
    }
}

/// A byte range of a region the scan did not accept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CorruptRange {
    /// Offset in the region file.
    pub offset: u64,
    /// Bytes skipped (up to the next accepted record or the end).
    pub len: u64,
    /// What was wrong at `offset`.
    pub reason: CorruptReason,
}

/// What the scan of a region found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScanReport {
    /// The region header.
    pub header: RegionHeader,
    /// Records kept, in log order (so in increasing sequence order).
    pub records: Vec<ScannedRecord>,
    /// Where the next append would go: after the last kept record, or at
    /// the torn tail. Before appending there after a torn tail the engine
    /// must truncate the file to this offset and sync (so leftovers of the
    /// dropped tail can never line up with a later record boundary).
    pub end_offset: u64,
    /// Where the torn tail starts, if the region has one.
    pub torn_tail_at: Option<u64>,
    /// Bytes dropped with the torn tail (to the end of the file or region).
    pub torn_tail_bytes: u64,
    /// Corruption before the last commit, in offset order; the records
    /// around it are kept.
    pub corrupt: Vec<CorruptRange>,
    /// Sequence of the last commit record kept.
    pub last_commit_seq: Option<u64>,
    /// Highest sequence of any header with a valid checksum, kept or
    /// dropped: the engine resumes numbering above it so a dropped record
    /// can never look newer than a later one.
    pub highest_seq_seen: Option<u64>,
    /// Payloads whose checksum the scan verified (path payloads included).
    pub payloads_verified: u64,
    /// Bytes read from the file.
    pub bytes_scanned: u64,
}

/// Scan a region for recovery ([`ScanMode::Recovery`]). `region_bytes` is
/// the configured region size; a header recording another is an error.
/// Errors: the backend failed, or the region header is bad (the region's
/// records cannot be trusted to be this region's; the engine decides).
pub fn scan_region(file: &dyn BackendFile, region_bytes: u64) -> Result<ScanReport, LogError> {
    scan_region_with(file, region_bytes, ScanMode::Recovery)
}

/// Scan a region with the given verification mode (see [`scan_region`]).
pub fn scan_region_with(
    file: &dyn BackendFile,
    region_bytes: u64,
    mode: ScanMode,
) -> Result<ScanReport, LogError> {
    let header = RegionHeader::read_from(file)?;
    if header.region_bytes != region_bytes {
        return Err(LogError::BadRegionHeader {
            region: Some(header.region),
            reason: RegionHeaderError::RegionBytesMismatch {
                expected: region_bytes,
                found: header.region_bytes,
            },
        });
    }
    let io_error = |offset| {
        move |source| LogError::Io {
            region: Some(header.region),
            offset,
            source,
        }
    };
    let file_len = file.len().map_err(io_error(0))?;
    let limit = file_len.min(region_bytes);
    let mut scanner = Scanner {
        reader: Reader::new(file, limit),
        region_bytes,
        limit,
        records: Vec::new(),
        failures: Vec::new(),
        highest_seq_seen: None,
        payloads_verified: 0,
        first_seq: header.first_seq,
    };
    let clean_end = scanner
        .walk_headers()
        .map_err(|(offset, e)| io_error(offset)(e))?;
    scanner.finish(header, clean_end, mode)
}

struct Scanner<'a> {
    reader: Reader<'a>,
    region_bytes: u64,
    /// End of what can be read: the file or the region, whichever is shorter.
    limit: u64,
    records: Vec<ScannedRecord>,
    /// Failures of pass 1, in offset order.
    failures: Vec<CorruptRange>,
    highest_seq_seen: Option<u64>,
    payloads_verified: u64,
    /// The header's first sequence: a record below it was flushed before
    /// the region was retired, and ends the log.
    first_seq: u64,
}

/// An I/O error with the offset it happened at.
type IoAt = (u64, io::Error);

impl Scanner<'_> {
    /// Pass 1: every header from the first record on. Returns where the log
    /// ends cleanly (meaningful only when no failure ends it).
    fn walk_headers(&mut self) -> Result<u64, IoAt> {
        let mut pos = REGION_HEADER_BYTES;
        let mut previous_seq: Option<u64> = None;
        let mut average_record_bytes = 0u64;
        loop {
            if pos >= self.limit {
                return Ok(pos);
            }
            let read_ahead = if average_record_bytes >= LARGE_RECORD_BYTES {
                PROBE_BYTES
            } else {
                SCAN_CHUNK_BYTES
            };
            let window = self
                .reader
                .window(pos, RECORD_HEADER_BYTES as usize, read_ahead)
                .map_err(|e| (pos, e))?;
            if window.len() < RECORD_HEADER_BYTES as usize {
                // A partial header at the end of the file.
                if window.iter().all(|&b| b == 0) {
                    return Ok(pos);
                }
                self.fail(
                    pos,
                    self.limit - pos,
                    CorruptReason::Truncated {
                        file_len: self.limit,
                    },
                );
                return Ok(self.limit);
            }
            let mut bytes = [0u8; 48];
            bytes.copy_from_slice(&window[..48]);
            if bytes == [0u8; 48] {
                match self.resync(pos + RECORD_ALIGN)? {
                    None => return Ok(pos),
                    Some(next) => {
                        self.fail(pos, next - pos, CorruptReason::ZeroFilled);
                        pos = next;
                        continue;
                    }
                }
            }
            let header = match RecordHeader::decode(&bytes) {
                Ok(header) => header,
                Err(e) => {
                    match self.skip_bad(pos, CorruptReason::BadHeader(e))? {
                        Some(next) => pos = next,
                        None => return Ok(self.limit),
                    }
                    continue;
                }
            };
            if header.seq < self.first_seq {
                // A record of a former fill, flushed before the region was
                // retired (the clean cache): the log ends here.
                return Ok(pos);
            }
            self.highest_seq_seen = self.highest_seq_seen.max(Some(header.seq));
            let payload_offset = pos + RECORD_HEADER_BYTES;
            let payload_end = payload_offset + u64::from(header.len);
            let record_end = pos + header.record_len();
            if record_end > self.region_bytes {
                match self.skip_bad(pos, CorruptReason::BeyondRegion { record_end })? {
                    Some(next) => pos = next,
                    None => return Ok(self.limit),
                }
                continue;
            }
            if payload_end > self.limit {
                let reason = CorruptReason::Truncated {
                    file_len: self.limit,
                };
                match self.skip_bad(pos, reason)? {
                    Some(next) => pos = next,
                    None => return Ok(self.limit),
                }
                continue;
            }
            // The header is sound, so its length is trusted from here on.
            let record_len = record_end - pos;
            if let Some(previous) = previous_seq.filter(|&previous| header.seq <= previous) {
                let reason = CorruptReason::SeqNotIncreasing {
                    previous,
                    seq: header.seq,
                };
                self.fail(pos, record_len, reason);
                pos = record_end;
                continue;
            }
            // Path and clean payloads are read (and checked) here, before
            // the last commit too: recovery applies them.
            let decoded = match header.kind {
                RecordKind::Path => self
                    .read_payload(&header, payload_offset, |p| {
                        decode_path(p).ok_or(CorruptReason::BadPath)
                    })?
                    .map(|path| (Some(path), None)),
                RecordKind::Clean => self
                    .read_payload(&header, payload_offset, |p| {
                        RecordHeader::clean_range(p).ok_or(CorruptReason::BadCleanRange)
                    })?
                    .map(|range| (None, Some(range))),
                _ => Ok((None, None)),
            };
            let (path, clean) = match decoded {
                Ok(decoded) => decoded,
                Err(reason) => {
                    self.fail(pos, record_len, reason);
                    pos = record_end;
                    continue;
                }
            };
            self.records.push(ScannedRecord {
                header,
                payload_offset,
                path,
                clean,
            });
            previous_seq = Some(header.seq);
            average_record_bytes = average_record_bytes - average_record_bytes / 4 + record_len / 4;
            pos = record_end;
        }
    }

    fn fail(&mut self, offset: u64, len: u64, reason: CorruptReason) {
        self.failures.push(CorruptRange {
            offset,
            len,
            reason,
        });
    }

    /// Note a failure at `pos` whose header cannot be trusted and find the
    /// next record start after it.
    fn skip_bad(&mut self, pos: u64, reason: CorruptReason) -> Result<Option<u64>, IoAt> {
        let next = self.resync(pos + RECORD_ALIGN)?;
        self.fail(pos, next.unwrap_or(self.limit) - pos, reason);
        Ok(next)
    }

    /// The first 8-byte aligned offset at or after `from` holding a header
    /// that decodes (magic, checksum, field rules).
    fn resync(&mut self, from: u64) -> Result<Option<u64>, IoAt> {
        let header_bytes = RECORD_HEADER_BYTES as usize;
        let mut pos = from.next_multiple_of(RECORD_ALIGN);
        while pos.saturating_add(RECORD_HEADER_BYTES) <= self.limit {
            let window = self
                .reader
                .window(pos, header_bytes, SCAN_CHUNK_BYTES)
                .map_err(|e| (pos, e))?;
            if window.len() < header_bytes {
                return Ok(None);
            }
            let mut at = 0;
            while at + header_bytes <= window.len() {
                if window[at..at + 4] == RECORD_MAGIC {
                    let mut bytes = [0u8; 48];
                    bytes.copy_from_slice(&window[at..at + header_bytes]);
                    if RecordHeader::decode(&bytes).is_ok() {
                        return Ok(Some(pos + at as u64));
                    }
                }
                at += RECORD_ALIGN as usize;
            }
            pos += at as u64;
        }
        Ok(None)
    }

    /// Read and check a path record's payload (bounded by
    /// [`super::MAX_PATH_BYTES`] by the header rules).
    /// Read a record's payload, check it against its checksum and decode
    /// it.
    fn read_payload<T>(
        &mut self,
        header: &RecordHeader,
        payload_offset: u64,
        decode: impl FnOnce(&[u8]) -> Result<T, CorruptReason>,
    ) -> Result<Result<T, CorruptReason>, IoAt> {
        let len = header.len as usize;
        if len == 0 {
            return Ok(decode(&[]));
        }
        let window = self
            .reader
            .window(payload_offset, len, SCAN_CHUNK_BYTES)
            .map_err(|e| (payload_offset, e))?;
        self.payloads_verified += 1;
        if window.len() < len {
            return Ok(Err(CorruptReason::Truncated {
                file_len: self.limit,
            }));
        }
        let payload = &window[..len];
        let actual = crc32c::crc32c(payload);
        if actual != header.payload_crc {
            return Ok(Err(CorruptReason::PayloadChecksum {
                expected: header.payload_crc,
                actual,
            }));
        }
        Ok(decode(payload))
    }

    /// Classify the failures around the last commit, verify the payloads
    /// that need it (pass 2), and build the report.
    fn finish(
        mut self,
        header: RegionHeader,
        clean_end: u64,
        mode: ScanMode,
    ) -> Result<ScanReport, LogError> {
        let last_commit = self
            .records
            .iter()
            .rposition(|r| r.header.kind == RecordKind::Commit);
        let commit_offset = last_commit.map(|i| self.records[i].record_offset());
        let before_commit = |offset: u64| commit_offset.is_some_and(|commit| offset < commit);

        let mut corrupt = Vec::new();
        let mut torn_tail_at = None;
        for failure in std::mem::take(&mut self.failures) {
            if before_commit(failure.offset) {
                corrupt.push(failure);
            } else {
                torn_tail_at = Some(failure.offset);
                break;
            }
        }
        if let Some(torn) = torn_tail_at {
            let kept = self.records.partition_point(|r| r.record_offset() < torn);
            self.records.truncate(kept);
        }

        // Pass 2: payload checksums after the last commit (all in Full).
        let verify_from = match mode {
            ScanMode::Full => 0,
            ScanMode::Recovery => last_commit.map_or(0, |i| i + 1),
        };
        let mut dropped = Vec::new();
        for index in verify_from..self.records.len() {
            let record = &self.records[index];
            if matches!(record.header.kind, RecordKind::Path | RecordKind::Clean)
                || record.header.len == 0
            {
                // Path and clean payloads were checked in pass 1; empty
                // payloads by the header rules.
                continue;
            }
            let offset = record.record_offset();
            let actual = self
                .reader
                .crc_range(record.payload_offset, u64::from(record.header.len))
                .map_err(|source| LogError::Io {
                    region: Some(header.region),
                    offset: record.payload_offset,
                    source,
                })?;
            self.payloads_verified += 1;
            let reason = match actual {
                Some(actual) if actual == record.header.payload_crc => continue,
                Some(actual) => CorruptReason::PayloadChecksum {
                    expected: record.header.payload_crc,
                    actual,
                },
                None => CorruptReason::Truncated {
                    file_len: self.limit,
                },
            };
            if before_commit(offset) {
                corrupt.push(CorruptRange {
                    offset,
                    len: record.header.record_len(),
                    reason,
                });
                dropped.push(index);
            } else {
                torn_tail_at = Some(offset);
                self.records.truncate(index);
                break;
            }
        }
        for index in dropped.into_iter().rev() {
            self.records.remove(index);
        }
        corrupt.sort_by_key(|range| range.offset);

        let end_offset = torn_tail_at.unwrap_or(clean_end);
        let last_commit_seq = self
            .records
            .iter()
            .rev()
            .find(|r| r.header.kind == RecordKind::Commit)
            .map(|r| r.header.seq);
        Ok(ScanReport {
            header,
            records: self.records,
            end_offset,
            torn_tail_at,
            torn_tail_bytes: torn_tail_at.map_or(0, |torn| self.limit.saturating_sub(torn)),
            corrupt,
            last_commit_seq,
            highest_seq_seen: self.highest_seq_seen,
            payloads_verified: self.payloads_verified,
            bytes_scanned: REGION_HEADER_BYTES + self.reader.bytes_read,
        })
    }
}

/// Buffered positional reads over `0..limit` of a file: one window of at
/// most [`SCAN_CHUNK_BYTES`], refilled on demand.
struct Reader<'a> {
    file: &'a dyn BackendFile,
    limit: u64,
    buf: Vec<u8>,
    /// File offset of `buf[0]`.
    start: u64,
    /// Valid bytes in `buf`.
    filled: usize,
    bytes_read: u64,
}

impl<'a> Reader<'a> {
    fn new(file: &'a dyn BackendFile, limit: u64) -> Reader<'a> {
        // INVARIANT: the min with SCAN_CHUNK_BYTES makes the cast lossless.
        let capacity = limit.min(SCAN_CHUNK_BYTES as u64) as usize;
        Reader {
            file,
            limit,
            buf: vec![0; capacity],
            start: 0,
            filled: 0,
            bytes_read: 0,
        }
    }

    /// The bytes from `offset` to the end of the window, at least `need` of
    /// them unless the limit comes first (`need` must not exceed the buffer).
    /// Refills the window at `offset` with `read_ahead` bytes (at least
    /// `need`) when it does not already hold them.
    fn window(&mut self, offset: u64, need: usize, read_ahead: usize) -> io::Result<&[u8]> {
        let buffered_end = self.start + self.filled as u64;
        if offset < self.start || offset.saturating_add(need as u64) > buffered_end {
            let want = read_ahead.max(need).min(self.buf.len()) as u64;
            // INVARIANT: bounded by the buffer length, a usize.
            let want = want.min(self.limit.saturating_sub(offset)) as usize;
            let read = self.file.read_full_at(&mut self.buf[..want], offset)?;
            self.start = offset;
            self.filled = read;
            self.bytes_read += read as u64;
        }
        let from = (offset - self.start) as usize;
        Ok(&self.buf[from..self.filled])
    }

    /// crc32c of `len` bytes at `offset`; `None` if the limit comes first.
    fn crc_range(&mut self, offset: u64, len: u64) -> io::Result<Option<u32>> {
        let end = offset + len;
        let mut crc = 0;
        let mut pos = offset;
        while pos < end {
            let need = (end - pos).min(self.buf.len() as u64) as usize;
            let window = self.window(pos, need, SCAN_CHUNK_BYTES)?;
            if window.is_empty() {
                return Ok(None);
            }
            let take = (window.len() as u64).min(end - pos) as usize;
            crc = crc32c::crc32c_append(crc, &window[..take]);
            pos += take as u64;
        }
        Ok(Some(crc))
    }
}
