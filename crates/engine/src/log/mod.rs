//! The fast-tier log format: region files of checksummed records, and the
//! recovery scan that reads them back.
//!
//! * [`record`] — the 48-byte record header and its two crc32c checksums
//!   (header, payload);
//! * [`header`] — the 64-byte region header;
//! * [`region`] — a region file: appends at offsets chosen by the caller,
//!   checked payload reads, reset;
//! * [`check`] — what recovery will make of an existing region file,
//!   judged from its length and header without writing (shared with the
//!   mount's preflight);
//! * [`scan`] — the recovery scan: headers only before the last commit
//!   record, headers and payloads after it, torn tails dropped, corruption
//!   reported and skipped.
//!
//! `docs/engine.md` is the contract. Invariants kept by this module:
//! * a payload whose checksum fails is never returned by a read
//!   ([`LogError::CorruptPayload`] instead);
//! * bad bytes (corrupt, truncated, hostile lengths) give an error value or
//!   a scan report, never a panic, and every length read from a file is
//!   bounded by the region size before anything is allocated for it;
//! * the log does not decide where records go: the engine's region pipeline
//!   chooses the offset, the log writes, checks and scans.

use std::fmt;
use std::io;

use sluice_policy::RegionId;

pub mod check;
pub mod header;
pub mod record;
pub mod region;
pub mod scan;

pub use check::{check_region, RegionOnDisk, RegionRefusal};
pub use header::{RegionHeader, RegionHeaderError, REGION_FORMAT_VERSION, REGION_MAGIC};
pub use record::{
    decode_path, record_len, RecordError, RecordHeader, RecordKind, MAX_PATH_BYTES, RECORD_ALIGN,
    RECORD_HEADER_BYTES, RECORD_MAGIC, REGION_HEADER_BYTES,
};
pub use region::RegionFile;
pub use scan::{
    scan_region, scan_region_with, CorruptRange, CorruptReason, ScanMode, ScanReport, ScannedRecord,
};

/// An error of the fast-tier log. Messages name the region (when known) and
/// the byte offset in the region file.
#[derive(Debug)]
pub enum LogError {
    /// The backend failed.
    Io {
        /// Region of the file, if its header was read already.
        region: Option<RegionId>,
        /// Offset of the failed access.
        offset: u64,
        /// The backend's error (it names the path).
        source: io::Error,
    },
    /// The region header is missing, damaged or of another format.
    BadRegionHeader {
        /// The region, when the header itself is valid and names it.
        region: Option<RegionId>,
        /// What is wrong.
        reason: RegionHeaderError,
    },
    /// A payload location outside the region file (or in another region).
    OutOfRange {
        /// Region of this file.
        region: RegionId,
        /// Region asked for.
        asked_region: RegionId,
        /// Payload offset asked for.
        offset: u64,
        /// Payload length asked for.
        len: u64,
        /// The region's size.
        region_bytes: u64,
    },
    /// The file ends inside the payload: the bytes were never written or
    /// were lost. Serve EIO, like a checksum failure.
    TruncatedPayload {
        /// Region of this file.
        region: RegionId,
        /// Payload offset.
        offset: u64,
        /// Payload length expected.
        len: u64,
        /// Bytes present in the file.
        available: u64,
    },
    /// The payload's checksum does not match its record: the bytes must not
    /// be served (the engine answers EIO and counts it).
    CorruptPayload {
        /// Region of this file.
        region: RegionId,
        /// Payload offset.
        offset: u64,
        /// Payload length.
        len: u64,
        /// crc32c stored in the record header.
        expected_crc: u32,
        /// crc32c of the bytes read.
        actual_crc: u32,
    },
}

impl LogError {
    /// Whether this error means the stored bytes are bad (checksum or
    /// truncation) rather than that the backend failed or the caller asked
    /// for something impossible. The engine answers EIO for these.
    pub fn is_corruption(&self) -> bool {
        matches!(
            self,
            LogError::CorruptPayload { .. }
                | LogError::TruncatedPayload { .. }
                | LogError::BadRegionHeader { .. }
        )
    }
}

/// `region 3` or `region ?` for messages.
struct RegionName(Option<RegionId>);

impl fmt::Display for RegionName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(RegionId(id)) => write!(f, "region {id}"),
            None => f.write_str("region file"),
        }
    }
}

impl fmt::Display for LogError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LogError::Io {
                region,
                offset,
                source,
            } => write!(
                f,
                "{} at offset {offset}: I/O error: {source}",
                RegionName(*region)
            ),
            LogError::BadRegionHeader { region, reason } => {
                write!(
                    f,
                    "{} at offset 0: bad region header: {reason}",
                    RegionName(*region)
                )
            }
            LogError::OutOfRange {
                region,
                asked_region,
                offset,
                len,
                region_bytes,
            } => write!(
                f,
                "{} at offset {offset}: payload of {len} bytes in region {} is outside this \
                 region file ({region_bytes} bytes)",
                RegionName(Some(*region)),
                asked_region.0
            ),
            LogError::TruncatedPayload {
                region,
                offset,
                len,
                available,
            } => write!(
                f,
                "{} at offset {offset}: payload of {len} bytes truncated, only {available} \
                 present",
                RegionName(Some(*region))
            ),
            LogError::CorruptPayload {
                region,
                offset,
                len,
                expected_crc,
                actual_crc,
            } => write!(
                f,
                "{} at offset {offset}: payload of {len} bytes is corrupt (crc32c \
                 {actual_crc:#010x}, record says {expected_crc:#010x})",
                RegionName(Some(*region))
            ),
        }
    }
}

impl std::error::Error for LogError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            LogError::Io { source, .. } => Some(source),
            LogError::BadRegionHeader { reason, .. } => Some(reason),
            _ => None,
        }
    }
}
