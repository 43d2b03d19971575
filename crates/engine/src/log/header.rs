//! The 64-byte header of a region file of the fast-tier log.
//!
//! Layout (little endian): magic `SLRG` (0..4), format version u16 (4..6),
//! reserved u16 (6..8), region id u32 (8..12), generation u64 (12..20),
//! region bytes u64 (20..28), first sequence u64 (28..36; format 5 on,
//! zeros before), reserved zeros (36..60), crc32c of bytes 0..60 (60..64).

use sluice_env::BackendFile;
use sluice_policy::RegionId;

use super::record::{RECORD_ALIGN, RECORD_HEADER_BYTES, REGION_HEADER_BYTES};
use super::LogError;

/// Magic of a region header.
pub const REGION_MAGIC: [u8; 4] = *b"SLRG";
/// The region format this code writes. It reads this one and the older
/// ones: version 1, whose path records carry no capacity inode (their
/// offset is 0), version 2, which has no clean records, and version 3,
/// whose clean records have no payload (they cover the whole file; from
/// version 4 on a clean record's payload names the byte range), and
/// version 4, whose header has no first sequence (a flushed region was
/// truncated instead; from version 5 on it keeps its records, as the clean
/// cache, behind a header whose first sequence is past them). Each version
/// exists so that a build that reads only the older ones refuses a region
/// that may hold what it does not know (a path record's inode, a clean
/// record), rather than taking it for corruption. Records are only ever
/// appended to a region whose header this build wrote (recovery treats
/// every region holding records as full, and resets it before reuse).
pub const REGION_FORMAT_VERSION: u16 = 5;

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

pub(super) fn check_region_bytes(region_bytes: u64) -> Result<(), RegionHeaderError> {
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
    /// Records with a lower sequence number are not part of the log: they
    /// were flushed before the header was written (the region keeps them
    /// as the clean cache, docs/engine.md), and the scan ends at the first
    /// one. 0 in headers of format 4 and older.
    pub first_seq: u64,
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
        bytes[28..36].copy_from_slice(&self.first_seq.to_le_bytes());
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
        if !(1..=REGION_FORMAT_VERSION).contains(&version) {
            return Err(RegionHeaderError::UnsupportedVersion(version));
        }
        let stored = u32::from_le_bytes([bytes[60], bytes[61], bytes[62], bytes[63]]);
        let computed = crc32c::crc32c(&bytes[..REGION_CRC_COVERS]);
        if stored != computed {
            return Err(RegionHeaderError::BadChecksum { stored, computed });
        }
        // The first sequence (28..36) is reserved before format 5.
        let reserved_from = if version >= 5 { 36 } else { 28 };
        if bytes[6..8] != [0; 2] || bytes[reserved_from..60].iter().any(|&b| b != 0) {
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
            first_seq: word(28),
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
        let read = file.read_full_at(&mut bytes, 0).map_err(io_error)?;
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
