//! A region file of the fast-tier log: its 64-byte header, record appends
//! at offsets chosen by the caller, checksum-verified payload reads, reset.
//!
//! Header layout (little endian): magic `SLRG` (0..4), format version u16
//! (4..6), reserved u16 (6..8), region id u32 (8..12), generation u64
//! (12..20), region bytes u64 (20..28), reserved zeros (28..60), crc32c of
//! bytes 0..60 (60..64).
//!
//! Invariants:
//! * every record written by [`RegionFile::append_at`] starts at a multiple
//!   of [`RECORD_ALIGN`] at or after the header, ends (padding included)
//!   within `region_bytes`, and is written with one `write_at` of header,
//!   payload and zero padding;
//! * [`RegionFile::read_payload`] never returns bytes whose crc32c differs
//!   from the record's, and allocates only after checking the length
//!   against the region size;
//! * nothing here syncs on its own: the caller (the engine's fsync and
//!   flush protocol) decides when the file is made durable.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use sluice_env::BackendFile;
use sluice_policy::{LogLocation, RegionId};

use super::record::{
    record_len, RecordHeader, RECORD_ALIGN, RECORD_HEADER_BYTES, REGION_HEADER_BYTES,
};
use super::scan::{scan_region_with, ScanMode, ScanReport};
use super::LogError;

/// Magic of a region header.
pub const REGION_MAGIC: [u8; 4] = *b"SLRG";
/// The region format this code writes. It reads this one and version 1,
/// whose path records carry no capacity inode (their offset is 0). Version
/// 2 exists so that a build that reads only version 1 refuses a region
/// whose path records carry one, rather than taking them for corruption.
pub const REGION_FORMAT_VERSION: u16 = 2;

/// Bytes covered by the region header checksum.
const REGION_CRC_COVERS: usize = 60;

/// Why bytes are not a valid region header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RegionHeaderError {
    /// The file is shorter than a region header.
    Short {
        /// File length in bytes.
        len: u64,
    },
    /// The first four bytes are not `SLRG`.
    BadMagic([u8; 4]),
    /// A format version this code does not read.
    UnsupportedVersion(u16),
    /// The header checksum does not match bytes 0..60.
    BadChecksum {
        /// Checksum stored in the header.
        stored: u32,
        /// Checksum computed over the header bytes.
        computed: u32,
    },
    /// A reserved byte is not zero.
    NonZeroReserved,
    /// A region size that cannot hold a header and one record, or is not a
    /// multiple of the record alignment.
    BadRegionBytes(u64),
    /// The header's region size differs from the configured one.
    RegionBytesMismatch {
        /// Size the caller expected.
        expected: u64,
        /// Size the header records.
        found: u64,
    },
}

impl std::fmt::Display for RegionHeaderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RegionHeaderError::Short { len } => write!(
                f,
                "file is {len} bytes, shorter than the {REGION_HEADER_BYTES}-byte header"
            ),
            RegionHeaderError::BadMagic(magic) => {
                write!(f, "bad magic {magic:02x?} (expected \"SLRG\")")
            }
            RegionHeaderError::UnsupportedVersion(version) => write!(
                f,
                "format version {version}, this build reads versions 1 to {REGION_FORMAT_VERSION}"
            ),
            RegionHeaderError::BadChecksum { stored, computed } => write!(
                f,
                "checksum mismatch (stored {stored:#010x}, computed {computed:#010x})"
            ),
            RegionHeaderError::NonZeroReserved => f.write_str("reserved bytes not zero"),
            RegionHeaderError::BadRegionBytes(bytes) => write!(
                f,
                "region size {bytes} must be a multiple of {RECORD_ALIGN} and at least {}",
                min_region_bytes()
            ),
            RegionHeaderError::RegionBytesMismatch { expected, found } => write!(
                f,
                "header says the region is {found} bytes, the configuration says {expected}"
            ),
        }
    }
}

impl std::error::Error for RegionHeaderError {}

/// Smallest region: a header and one empty record.
fn min_region_bytes() -> u64 {
    REGION_HEADER_BYTES + RECORD_HEADER_BYTES
}

fn check_region_bytes(region_bytes: u64) -> Result<(), RegionHeaderError> {
    if region_bytes < min_region_bytes() || !region_bytes.is_multiple_of(RECORD_ALIGN) {
        return Err(RegionHeaderError::BadRegionBytes(region_bytes));
    }
    Ok(())
}

/// The decoded header of a region file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RegionHeader {
    /// Which region this file is.
    pub region: RegionId,
    /// Incremented at every reset.
    pub generation: u64,
    /// Size of the region in bytes, header included.
    pub region_bytes: u64,
}

impl RegionHeader {
    /// The 64 header bytes, checksum included.
    pub fn encode(&self) -> [u8; 64] {
        let mut bytes = [0u8; 64];
        bytes[0..4].copy_from_slice(&REGION_MAGIC);
        bytes[4..6].copy_from_slice(&REGION_FORMAT_VERSION.to_le_bytes());
        bytes[8..12].copy_from_slice(&self.region.0.to_le_bytes());
        bytes[12..20].copy_from_slice(&self.generation.to_le_bytes());
        bytes[20..28].copy_from_slice(&self.region_bytes.to_le_bytes());
        let crc = crc32c::crc32c(&bytes[..REGION_CRC_COVERS]);
        bytes[60..64].copy_from_slice(&crc.to_le_bytes());
        bytes
    }

    /// Decode and validate 64 header bytes: magic, version, checksum, zero
    /// reserved bytes, a usable region size.
    pub fn decode(bytes: &[u8; 64]) -> Result<RegionHeader, RegionHeaderError> {
        let magic = [bytes[0], bytes[1], bytes[2], bytes[3]];
        if magic != REGION_MAGIC {
            return Err(RegionHeaderError::BadMagic(magic));
        }
        let version = u16::from_le_bytes([bytes[4], bytes[5]]);
        if version != REGION_FORMAT_VERSION && version != 1 {
            return Err(RegionHeaderError::UnsupportedVersion(version));
        }
        let stored = u32::from_le_bytes([bytes[60], bytes[61], bytes[62], bytes[63]]);
        let computed = crc32c::crc32c(&bytes[..REGION_CRC_COVERS]);
        if stored != computed {
            return Err(RegionHeaderError::BadChecksum { stored, computed });
        }
        if bytes[6..8] != [0; 2] || bytes[28..60].iter().any(|&b| b != 0) {
            return Err(RegionHeaderError::NonZeroReserved);
        }
        let word = |at: usize| {
            let mut word = [0u8; 8];
            word.copy_from_slice(&bytes[at..at + 8]);
            u64::from_le_bytes(word)
        };
        let header = RegionHeader {
            region: RegionId(u32::from_le_bytes([
                bytes[8], bytes[9], bytes[10], bytes[11],
            ])),
            generation: word(12),
            region_bytes: word(20),
        };
        check_region_bytes(header.region_bytes)?;
        Ok(header)
    }

    /// Read and decode the header of `file`.
    pub fn read_from(file: &dyn BackendFile) -> Result<RegionHeader, LogError> {
        let io_error = |source| LogError::Io {
            region: None,
            offset: 0,
            source,
        };
        let mut bytes = [0u8; 64];
        let read = read_full(file, &mut bytes, 0).map_err(io_error)?;
        if read < bytes.len() {
            return Err(LogError::BadRegionHeader {
                region: None,
                reason: RegionHeaderError::Short { len: read as u64 },
            });
        }
        RegionHeader::decode(&bytes).map_err(|reason| LogError::BadRegionHeader {
            region: None,
            reason,
        })
    }
}

/// Read into `buf` at `offset` until it is full or the file ends; returns
/// the bytes read.
pub(crate) fn read_full(file: &dyn BackendFile, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// One region file of the log. Methods take `&self` so appends at
/// different offsets can run concurrently (the engine writes records
/// outside its lock); the caller keeps appends and [`RegionFile::reset`]
/// apart.
#[derive(Debug)]
pub struct RegionFile {
    file: Arc<dyn BackendFile>,
    region: RegionId,
    region_bytes: u64,
    generation: AtomicU64,
}

impl RegionFile {
    /// Make `file` an empty region: truncate it to the header and write a
    /// header for `region`, `region_bytes` and `generation`. Does not sync.
    pub fn create(
        file: Arc<dyn BackendFile>,
        region: RegionId,
        region_bytes: u64,
        generation: u64,
    ) -> Result<RegionFile, LogError> {
        check_region_bytes(region_bytes).map_err(|reason| LogError::BadRegionHeader {
            region: Some(region),
            reason,
        })?;
        let region_file = RegionFile::new(file, region, region_bytes, generation);
        region_file
            .reset(generation)
            .map_err(|source| LogError::Io {
                region: Some(region),
                offset: 0,
                source,
            })?;
        Ok(region_file)
    }

    /// Open an existing region file and validate its header.
    pub fn open(file: Arc<dyn BackendFile>) -> Result<(RegionFile, RegionHeader), LogError> {
        let header = RegionHeader::read_from(&*file)?;
        let region_file =
            RegionFile::new(file, header.region, header.region_bytes, header.generation);
        Ok((region_file, header))
    }

    fn new(
        file: Arc<dyn BackendFile>,
        region: RegionId,
        region_bytes: u64,
        generation: u64,
    ) -> RegionFile {
        RegionFile {
            file,
            region,
            region_bytes,
            generation: AtomicU64::new(generation),
        }
    }

    /// Which region this is.
    pub fn region(&self) -> RegionId {
        self.region
    }

    /// Size of the region, header included.
    pub fn region_bytes(&self) -> u64 {
        self.region_bytes
    }

    /// Current generation (as last written by create, open or reset).
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The header as last written.
    pub fn header(&self) -> RegionHeader {
        RegionHeader {
            region: self.region,
            generation: self.generation(),
            region_bytes: self.region_bytes,
        }
    }

    /// The underlying backend file.
    pub fn file(&self) -> &Arc<dyn BackendFile> {
        &self.file
    }

    /// Offset of the first record of a region.
    pub fn first_record_offset() -> u64 {
        REGION_HEADER_BYTES
    }

    /// Log bytes a record with `payload_len` payload bytes takes (header and
    /// alignment padding included): what the pipeline must reserve.
    pub fn space_needed(payload_len: u32) -> u64 {
        record_len(payload_len)
    }

    /// Whether a record with `payload_len` payload bytes fits at `offset`.
    pub fn fits(&self, offset: u64, payload_len: u32) -> bool {
        offset >= REGION_HEADER_BYTES
            && offset.is_multiple_of(RECORD_ALIGN)
            && offset
                .checked_add(record_len(payload_len))
                .is_some_and(|end| end <= self.region_bytes)
    }

    /// Write `header` and `payload` (and zero padding to the next multiple
    /// of [`RECORD_ALIGN`]) at `offset` with one `write_vectored_at`. The payload
    /// starts at `offset + RECORD_HEADER_BYTES`, the [`LogLocation`] offset
    /// the index keeps. `header` must have been built for `payload` (its
    /// constructors compute the checksum). Does not sync.
    ///
    /// Errors: InvalidInput if the record does not fit at `offset` or
    /// `header.len` is not the payload length; the backend's error
    /// otherwise, unchanged so its kind and OS error survive.
    pub fn append_at(&self, offset: u64, header: &RecordHeader, payload: &[u8]) -> io::Result<()> {
        if payload.len() != header.len as usize {
            return Err(self.invalid(
                offset,
                &format!(
                    "record header says {} payload bytes, {} given",
                    header.len,
                    payload.len()
                ),
            ));
        }
        if !self.fits(offset, header.len) {
            return Err(self.invalid(
                offset,
                &format!(
                    "a record of {} bytes does not fit at this offset (region of {} bytes, \
                     records {RECORD_ALIGN}-byte aligned after the header)",
                    header.record_len(),
                    self.region_bytes
                ),
            ));
        }
        debug_assert!(
            header.payload_matches(payload),
            "header built for another payload"
        );
        // INVARIANT: fits() bounded the record by region_bytes, and the
        // payload length is a u32, so the record length fits a usize.
        let total = header.record_len() as usize;
        // Header, payload and zero padding in one vectored write: no copy
        // of the payload (docs/benchmarks.md, absorption).
        let encoded = header.encode();
        let padding = [0u8; RECORD_ALIGN as usize];
        let pad = total - encoded.len() - payload.len();
        self.file
            .write_vectored_at(&[&encoded, payload, &padding[..pad]], offset)
    }

    fn invalid(&self, offset: u64, what: &str) -> io::Error {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("region {} at offset {offset}: {what}", self.region.0),
        )
    }

    /// Read the payload at `location` (its offset is the payload's, as in
    /// the index) of `len` bytes, and check it against `expected_crc`.
    /// A mismatch is [`LogError::CorruptPayload`]: the bytes are not
    /// returned.
    pub fn read_payload(
        &self,
        location: LogLocation,
        len: u32,
        expected_crc: u32,
    ) -> Result<Vec<u8>, LogError> {
        self.check_range(location, u64::from(len))?;
        let mut payload = vec![0u8; len as usize];
        self.read_checked(location.offset, &mut payload, expected_crc)?;
        Ok(payload)
    }

    /// Like [`RegionFile::read_payload`] into a caller's buffer of exactly
    /// the payload length. On error the buffer's content is unspecified and
    /// must not be served.
    pub fn read_payload_into(
        &self,
        location: LogLocation,
        expected_crc: u32,
        buf: &mut [u8],
    ) -> Result<(), LogError> {
        self.check_range(location, buf.len() as u64)?;
        self.read_checked(location.offset, buf, expected_crc)
    }

    fn check_range(&self, location: LogLocation, len: u64) -> Result<(), LogError> {
        let inside = location.region == self.region
            && location.offset >= REGION_HEADER_BYTES + RECORD_HEADER_BYTES
            && location
                .offset
                .checked_add(len)
                .is_some_and(|end| end <= self.region_bytes);
        if inside {
            Ok(())
        } else {
            Err(LogError::OutOfRange {
                region: self.region,
                asked_region: location.region,
                offset: location.offset,
                len,
                region_bytes: self.region_bytes,
            })
        }
    }

    fn read_checked(&self, offset: u64, buf: &mut [u8], expected_crc: u32) -> Result<(), LogError> {
        let read = read_full(&*self.file, buf, offset).map_err(|source| LogError::Io {
            region: Some(self.region),
            offset,
            source,
        })?;
        if read < buf.len() {
            return Err(LogError::TruncatedPayload {
                region: self.region,
                offset,
                len: buf.len() as u64,
                available: read as u64,
            });
        }
        let actual_crc = crc32c::crc32c(buf);
        if actual_crc != expected_crc {
            return Err(LogError::CorruptPayload {
                region: self.region,
                offset,
                len: buf.len() as u64,
                expected_crc,
                actual_crc,
            });
        }
        Ok(())
    }

    /// Make the region's records durable.
    pub fn sync(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    /// Empty the region: truncate the file to the header, then write a
    /// header with `generation`. The caller syncs (the flush protocol syncs
    /// before `finish_flush`).
    ///
    /// Truncating first means that, on a backend that persists unsynced
    /// changes in order, a crash before the caller's sync leaves the old
    /// region, the old header over an empty log, or a torn header over an
    /// empty log (the file is then at most [`REGION_HEADER_BYTES`] long and
    /// [`RegionFile::open`] reports [`LogError::BadRegionHeader`]: nothing
    /// is lost by creating the region again) — never the new header over
    /// the old records. A backend that reorders unsynced changes could
    /// leave the new header over the old records; they were flushed before
    /// the reset, so replaying them again is harmless as long as the
    /// caller's sync completes before the flush is declared finished.
    pub fn reset(&self, generation: u64) -> io::Result<()> {
        self.file.set_len(REGION_HEADER_BYTES)?;
        let header = RegionHeader {
            region: self.region,
            generation,
            region_bytes: self.region_bytes,
        };
        self.file.write_at(&header.encode(), 0)?;
        self.generation.store(generation, Ordering::Release);
        Ok(())
    }

    /// Scan this region (see [`super::scan`]).
    pub fn scan(&self, mode: ScanMode) -> Result<ScanReport, LogError> {
        scan_region_with(&*self.file, self.region_bytes, mode)
    }
}
