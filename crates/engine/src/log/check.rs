//! What recovery will make of an existing region file, judged from its
//! length and its first bytes alone: a pure function, so a check that must
//! not write (`sluice config check`, the mount's preflight) and recovery
//! can share it.
//!
//! The rules are recovery's (`engine/recovery.rs`): a file no longer than
//! the region header holds nothing (new, or a header torn while it was
//! written) and is created again; a longer one must have a valid header
//! naming the region it is found as and the configured region size, or
//! recovery refuses it rather than overwrite the data it holds.
//!
//! INVARIANT: nothing here reads or writes a file; the caller passes the
//! length and up to [`REGION_HEADER_BYTES`] bytes from offset 0.

use std::fmt;

use sluice_policy::RegionId;

use super::header::{RegionHeader, RegionHeaderError};
use super::record::REGION_HEADER_BYTES;

/// An existing region file that recovery accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegionOnDisk {
    /// At most a header long: recovery writes a new header over it.
    Empty,
    /// Longer than a header, with a header that fits the configuration:
    /// recovery scans its records.
    Holds(RegionHeader),
}

/// Why recovery would refuse an existing region file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RegionRefusal {
    /// The file holds more than a header, and the header is missing,
    /// damaged or of a format this build does not read.
    BadHeader(RegionHeaderError),
    /// The header is valid but was written for another region or another
    /// region size than the configured ones.
    Mismatch {
        /// What the header says.
        found: RegionHeader,
        /// The region the file is found as.
        region: RegionId,
        /// The configured region size, header included.
        region_bytes: u64,
    },
}

impl fmt::Display for RegionRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RegionRefusal::BadHeader(reason) => write!(
                f,
                "bad region header: {reason}; the region holds data, so sluice will not \
                 overwrite it: move it aside to start anyway"
            ),
            RegionRefusal::Mismatch {
                found,
                region,
                region_bytes,
            } => write!(
                f,
                "written for region {} of {} bytes, configured {} of {region_bytes}; drain with \
                 the old configuration first",
                found.region.0, found.region_bytes, region.0
            ),
        }
    }
}

impl std::error::Error for RegionRefusal {}

/// Judge the region file found as `region`, `len` bytes long, whose first
/// bytes are `head` (up to [`REGION_HEADER_BYTES`]; fewer when the read
/// came short), against the configured `region_bytes` (header included, as
/// [`RegionHeader::region_bytes`]).
pub fn check_region(
    region: RegionId,
    region_bytes: u64,
    len: u64,
    head: &[u8],
) -> Result<RegionOnDisk, RegionRefusal> {
    if len <= REGION_HEADER_BYTES {
        return Ok(RegionOnDisk::Empty);
    }
    let Ok(bytes) = <&[u8; 64]>::try_from(head.get(..64).unwrap_or(head)) else {
        return Err(RegionRefusal::BadHeader(RegionHeaderError::Short {
            len: head.len() as u64,
        }));
    };
    let found = RegionHeader::decode(bytes).map_err(RegionRefusal::BadHeader)?;
    if found.region != region || found.region_bytes != region_bytes {
        return Err(RegionRefusal::Mismatch {
            found,
            region,
            region_bytes,
        });
    }
    Ok(RegionOnDisk::Holds(found))
}

#[cfg(test)]
mod tests {
    use super::*;

    const BYTES: u64 = 1 << 20;

    fn header(region: u32, region_bytes: u64) -> [u8; 64] {
        RegionHeader {
            region: RegionId(region),
            generation: 3,
            region_bytes,
            first_seq: 0,
        }
        .encode()
    }

    #[test]
    fn a_file_no_longer_than_a_header_is_empty_whatever_it_holds() {
        for len in [0, 1, 63, 64] {
            assert_eq!(
                check_region(RegionId(0), BYTES, len, &[0xff; 64]),
                Ok(RegionOnDisk::Empty)
            );
        }
    }

    #[test]
    fn a_matching_header_over_data_is_recovered() {
        let found = check_region(RegionId(2), BYTES, 4096, &header(2, BYTES)).unwrap();
        assert!(matches!(found, RegionOnDisk::Holds(h) if h.generation == 3));
    }

    #[test]
    fn another_size_or_region_over_data_is_refused() {
        for (region, bytes) in [(2, BYTES * 2), (1, BYTES)] {
            let refusal = check_region(RegionId(2), BYTES, 4096, &header(region, bytes))
                .expect_err("a mismatch");
            let text = refusal.to_string();
            assert!(text.contains("drain with the old configuration"), "{text}");
            assert!(matches!(refusal, RegionRefusal::Mismatch { .. }));
        }
    }

    #[test]
    fn a_bad_or_short_header_over_data_is_refused() {
        let mut bad = header(0, BYTES);
        bad[10] ^= 1;
        for head in [&bad[..], &[0u8; 64][..], &header(0, BYTES)[..20]] {
            let refusal = check_region(RegionId(0), BYTES, 4096, head).expect_err("refused");
            assert!(matches!(refusal, RegionRefusal::BadHeader(_)), "{refusal}");
            assert!(refusal.to_string().contains("move it aside"), "{refusal}");
        }
    }
}
