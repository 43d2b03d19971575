//! A region file of the fast-tier log: record appends at offsets chosen by
//! the caller, checksum-verified payload reads, reset (its header is
//! [`super::header`]).
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

use super::header::{check_region_bytes, RegionHeader};
use super::record::{
    record_len, RecordHeader, RECORD_ALIGN, RECORD_HEADER_BYTES, REGION_HEADER_BYTES,
};
use super::scan::{scan_region_with, ScanMode, ScanReport};
use super::LogError;

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
    first_seq: AtomicU64,
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
        region_file
            .first_seq
            .store(header.first_seq, Ordering::Release);
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
            first_seq: AtomicU64::new(0),
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
            first_seq: self.first_seq.load(Ordering::Acquire),
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
        self.read_raw(offset, buf)?;
        self.check_payload(offset, buf, expected_crc)
    }

    /// Read `buf.len()` bytes at `offset` as they are, unchecked: a span
    /// holding several records' payloads and the headers between them, in
    /// one request to the fast tier (the write-back's copy, writeback.rs).
    /// Each payload in it must pass [`RegionFile::check_payload`] before
    /// it is used. The span must lie inside the region's records area.
    pub fn read_span(&self, offset: u64, buf: &mut [u8]) -> Result<(), LogError> {
        let location = LogLocation {
            region: self.region,
            offset,
        };
        self.check_range(location, buf.len() as u64)?;
        self.read_raw(offset, buf)
    }

    /// Check `payload`, the bytes read at payload offset `offset`, against
    /// its record's checksum: [`LogError::CorruptPayload`] on a mismatch.
    pub fn check_payload(
        &self,
        offset: u64,
        payload: &[u8],
        expected_crc: u32,
    ) -> Result<(), LogError> {
        let actual_crc = crc32c::crc32c(payload);
        if actual_crc != expected_crc {
            return Err(LogError::CorruptPayload {
                region: self.region,
                offset,
                len: payload.len() as u64,
                expected_crc,
                actual_crc,
            });
        }
        Ok(())
    }

    /// Read exactly `buf.len()` bytes at `offset`; fewer is
    /// [`LogError::TruncatedPayload`].
    fn read_raw(&self, offset: u64, buf: &mut [u8]) -> Result<(), LogError> {
        let read = self
            .file
            .read_full_at(buf, offset)
            .map_err(|source| LogError::Io {
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
        self.write_header(generation, 0)
    }

    /// Empty the region for recovery while its records stay where they are
    /// (the clean cache, docs/engine.md): write a header with `generation`
    /// and `first_seq`, one past every sequence number placed so far, in
    /// place. The scan ends at the first record below `first_seq`, so once
    /// the header is durable (the caller syncs) no record of it is replayed;
    /// records appended later (sequence numbers from `first_seq` on)
    /// overwrite them from the start. The header lies in the region's
    /// first sector, which a device writes whole, so a crash leaves the old
    /// header (the flushed records replayed again, harmless) or the new
    /// one; a header that fails its checksum over records is refused by
    /// recovery as corruption (docs/crash-consistency.md, "Assumptions
    /// about the media").
    pub fn retire(&self, generation: u64, first_seq: u64) -> io::Result<()> {
        self.write_header(generation, first_seq)
    }

    fn write_header(&self, generation: u64, first_seq: u64) -> io::Result<()> {
        let header = RegionHeader {
            region: self.region,
            generation,
            region_bytes: self.region_bytes,
            first_seq,
        };
        self.file.write_at(&header.encode(), 0)?;
        self.generation.store(generation, Ordering::Release);
        self.first_seq.store(first_seq, Ordering::Release);
        Ok(())
    }

    /// Scan this region (see [`super::scan`]).
    pub fn scan(&self, mode: ScanMode) -> Result<ScanReport, LogError> {
        scan_region_with(&*self.file, self.region_bytes, mode)
    }
}
