//! Log records: the 48-byte record header, its encoding and its validation.
//!
//! A record is a header followed by its payload; the next record starts at
//! the next multiple of [`RECORD_ALIGN`]. The header carries two crc32c
//! checksums: `header_crc` over bytes `0..40` (so recovery can trust a
//! header without reading its payload) and `payload_crc` over the payload
//! (checked at recovery only where the scan rules require it, and on every
//! read of the payload).
//!
//! Layout (little endian):
//!
//! | bytes  | field        | notes                                        |
//! |--------|--------------|----------------------------------------------|
//! | 0..4   | magic        | `SLRC`                                       |
//! | 4      | kind         | 1 data, 2 path, 3 truncate, 4 unlink, 5 commit, 6 clean |
//! | 5..8   | reserved     | zero                                         |
//! | 8..16  | file id      | 0 for commit records                         |
//! | 16..24 | offset       | data: file offset; truncate: new size; path: capacity inode (0: unknown); clean: the bound; else 0 |
//! | 24..28 | len          | payload bytes                                |
//! | 28..32 | payload crc  | crc32c of the payload                        |
//! | 32..40 | seq          | global sequence number                       |
//! | 40..44 | header crc   | crc32c of bytes 0..40                        |
//! | 44..48 | padding      | zero                                         |
//!
//! Invariants: [`RecordHeader::decode`] accepts exactly the headers that
//! [`RecordHeader::encode`] can produce from a header built by the
//! constructors (magic, checksum, kind, zero reserved/padding bytes, and the
//! per-kind field rules below); any single flipped bit is rejected.
//! Per-kind rules: commit records have file id, offset and length 0;
//! truncate and unlink records have no payload (unlink also offset 0);
//! a clean record's payload is empty (format version 3: the whole file)
//! or [`CLEAN_PAYLOAD_BYTES`], the byte range it covers (see
//! [`RecordHeader::clean`]); path
//! records have a payload of 1..=[`MAX_PATH_BYTES`] bytes, and their offset
//! is the capacity file's inode number when it was written (0 when unknown;
//! always 0 in format version 1, see `region.rs`); an
//! empty payload has checksum 0 (the crc32c of no bytes).
//! Decoding never allocates.

use std::fmt;

use sluice_env::RelPath;
use sluice_policy::FileId;

/// Bytes of the region header at offset 0 of every region file.
pub const REGION_HEADER_BYTES: u64 = 64;
/// Bytes of a record header.
pub const RECORD_HEADER_BYTES: u64 = 48;
/// Records start at multiples of this many bytes.
pub const RECORD_ALIGN: u64 = 8;
/// Longest path a path record may carry, in bytes.
pub const MAX_PATH_BYTES: usize = 4096;

/// Bytes of a clean record's payload: the start and end (exclusive) of
/// the byte range it covers, little endian.
pub const CLEAN_PAYLOAD_BYTES: usize = 16;

/// Magic of a record header; the scan resynchronises on it.
pub const RECORD_MAGIC: [u8; 4] = *b"SLRC";

/// Bytes covered by the header checksum: every field before it (0..40).
/// `docs/engine.md` says "the 44 bytes above", but the fields above the
/// checksum are 40 bytes; a checksum cannot cover itself.
const HEADER_CRC_COVERS: usize = 40;

/// Bytes a record with `payload_len` bytes of payload occupies in the log,
/// header and alignment padding included.
pub fn record_len(payload_len: u32) -> u64 {
    align_up(RECORD_HEADER_BYTES + u64::from(payload_len))
}

/// `offset` rounded up to the next multiple of [`RECORD_ALIGN`] (saturating
/// at the largest aligned `u64`).
pub(crate) fn align_up(offset: u64) -> u64 {
    offset.saturating_add(RECORD_ALIGN - 1) & !(RECORD_ALIGN - 1)
}

/// What a record says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RecordKind {
    /// Bytes written to a file at `offset`; the payload is the bytes.
    Data,
    /// The path of `file_id`; the payload is the UTF-8 relative path.
    Path,
    /// `file_id` was truncated to `offset` bytes.
    Truncate,
    /// `file_id` was unlinked.
    Unlink,
    /// The log was synced: every earlier record of this region is durable.
    Commit,
    /// `file_id`'s bytes in the payload's byte range from data records with
    /// a sequence number below `offset` (the bound) are on the capacity
    /// tier, written back and synced: replay skips them (format version 3,
    /// the whole file; version 4, a range; docs/engine.md, "Write-back").
    Clean,
}

impl RecordKind {
    /// Every kind, in code order.
    pub const ALL: [RecordKind; 6] = [
        RecordKind::Data,
        RecordKind::Path,
        RecordKind::Truncate,
        RecordKind::Unlink,
        RecordKind::Commit,
        RecordKind::Clean,
    ];

    /// The on-disk code of this kind.
    pub fn code(self) -> u8 {
        match self {
            RecordKind::Data => 1,
            RecordKind::Path => 2,
            RecordKind::Truncate => 3,
            RecordKind::Unlink => 4,
            RecordKind::Commit => 5,
            RecordKind::Clean => 6,
        }
    }

    /// The kind with on-disk code `code`, if any.
    pub fn from_code(code: u8) -> Option<RecordKind> {
        RecordKind::ALL.into_iter().find(|kind| kind.code() == code)
    }

    /// Lower-case name for messages.
    pub fn name(self) -> &'static str {
        match self {
            RecordKind::Data => "data",
            RecordKind::Path => "path",
            RecordKind::Truncate => "truncate",
            RecordKind::Unlink => "unlink",
            RecordKind::Commit => "commit",
            RecordKind::Clean => "clean",
        }
    }
}

impl fmt::Display for RecordKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why bytes are not a valid record header, or why a record cannot be built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecordError {
    /// The first four bytes are not `SLRC`.
    BadMagic([u8; 4]),
    /// The header checksum does not match bytes 0..40.
    BadHeaderChecksum {
        /// Checksum stored in the header.
        stored: u32,
        /// Checksum computed over the header bytes.
        computed: u32,
    },
    /// The kind byte is not a known kind.
    UnknownKind(u8),
    /// A reserved or padding byte is not zero.
    NonZeroReserved,
    /// The fields break a rule of the record's kind (see the module docs).
    Malformed {
        /// The record's kind.
        kind: RecordKind,
        /// Which rule.
        rule: &'static str,
    },
    /// A payload longer than a record can describe (`u32` bytes).
    PayloadTooLong {
        /// Payload length asked for.
        len: usize,
    },
    /// A path record for the root, or a path longer than [`MAX_PATH_BYTES`].
    BadPath {
        /// Length of the path in bytes.
        len: usize,
    },
}

impl fmt::Display for RecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecordError::BadMagic(magic) => write!(f, "bad record magic {magic:02x?}"),
            RecordError::BadHeaderChecksum { stored, computed } => write!(
                f,
                "record header checksum mismatch (stored {stored:#010x}, computed {computed:#010x})"
            ),
            RecordError::UnknownKind(code) => write!(f, "unknown record kind {code}"),
            RecordError::NonZeroReserved => f.write_str("reserved record header bytes not zero"),
            RecordError::Malformed { kind, rule } => write!(f, "malformed {kind} record: {rule}"),
            RecordError::PayloadTooLong { len } => {
                write!(f, "payload of {len} bytes does not fit a record")
            }
            RecordError::BadPath { len } => write!(
                f,
                "path of {len} bytes: a path record needs 1..={MAX_PATH_BYTES} bytes"
            ),
        }
    }
}

impl std::error::Error for RecordError {}

/// A decoded record header (everything but the magic, the checksum of the
/// header itself and the zero bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RecordHeader {
    /// What the record says.
    pub kind: RecordKind,
    /// The file the record is about (`FileId(0)` for commits).
    pub file_id: FileId,
    /// Data: file offset of the payload; truncate: the new size; path: the
    /// capacity inode; clean: the bound; else 0.
    pub offset: u64,
    /// Payload bytes.
    pub len: u32,
    /// crc32c of the payload.
    pub payload_crc: u32,
    /// Global sequence number, strictly increasing within a region.
    pub seq: u64,
}

impl RecordHeader {
    /// A data record: `payload` was written to `file` at `offset`.
    pub fn data(
        file: FileId,
        offset: u64,
        payload: &[u8],
        seq: u64,
    ) -> Result<RecordHeader, RecordError> {
        let len = u32::try_from(payload.len())
            .map_err(|_| RecordError::PayloadTooLong { len: payload.len() })?;
        Ok(RecordHeader {
            kind: RecordKind::Data,
            file_id: file,
            offset,
            len,
            payload_crc: crc32c::crc32c(payload),
            seq,
        })
    }

    /// A path record: `file` is named `path`. The payload to append is
    /// `path.as_str().as_bytes()`.
    pub fn path(file: FileId, path: &RelPath, seq: u64) -> Result<RecordHeader, RecordError> {
        let bytes = path.as_str().as_bytes();
        if bytes.is_empty() || bytes.len() > MAX_PATH_BYTES {
            return Err(RecordError::BadPath { len: bytes.len() });
        }
        Ok(RecordHeader {
            kind: RecordKind::Path,
            file_id: file,
            offset: 0,
            // INVARIANT: bounded by MAX_PATH_BYTES just above.
            len: bytes.len() as u32,
            payload_crc: crc32c::crc32c(bytes),
            seq,
        })
    }

    /// This path record with the capacity file's inode number `ino`, so
    /// recovery can tell that the file at the path was replaced meanwhile
    /// (docs/crash-consistency.md, "Recovery never overwrites the future").
    pub fn with_identity(self, ino: u64) -> RecordHeader {
        debug_assert_eq!(self.kind, RecordKind::Path);
        RecordHeader {
            offset: ino,
            ..self
        }
    }

    /// A truncate record: `file` was truncated to `new_size` bytes.
    pub fn truncate(file: FileId, new_size: u64, seq: u64) -> RecordHeader {
        RecordHeader::empty(RecordKind::Truncate, file, new_size, seq)
    }

    /// An unlink record: `file` was unlinked.
    pub fn unlink(file: FileId, seq: u64) -> RecordHeader {
        RecordHeader::empty(RecordKind::Unlink, file, 0, seq)
    }

    /// A clean record and its payload: `file`'s bytes in `range` from
    /// data records with a sequence number below `bound` are on the
    /// capacity tier (written back and synced).
    pub fn clean(
        file: FileId,
        bound: u64,
        range: std::ops::Range<u64>,
        seq: u64,
    ) -> (RecordHeader, [u8; CLEAN_PAYLOAD_BYTES]) {
        let mut payload = [0u8; CLEAN_PAYLOAD_BYTES];
        payload[..8].copy_from_slice(&range.start.to_le_bytes());
        payload[8..].copy_from_slice(&range.end.to_le_bytes());
        let header = RecordHeader {
            kind: RecordKind::Clean,
            file_id: file,
            offset: bound,
            len: CLEAN_PAYLOAD_BYTES as u32,
            payload_crc: crc32c::crc32c(&payload),
            seq,
        };
        (header, payload)
    }

    /// The byte range a clean record's `payload` covers; an empty payload
    /// (format version 3) covers the whole file. `None` if the payload is
    /// not one a clean record carries, or names an empty or reversed range.
    pub fn clean_range(payload: &[u8]) -> Option<std::ops::Range<u64>> {
        match payload.len() {
            0 => Some(0..u64::MAX),
            CLEAN_PAYLOAD_BYTES => {
                let start = u64::from_le_bytes(payload[..8].try_into().ok()?);
                let end = u64::from_le_bytes(payload[8..].try_into().ok()?);
                (start < end).then_some(start..end)
            }
            _ => None,
        }
    }

    /// A commit record: the region's earlier records are durable.
    pub fn commit(seq: u64) -> RecordHeader {
        RecordHeader::empty(RecordKind::Commit, FileId(0), 0, seq)
    }

    fn empty(kind: RecordKind, file_id: FileId, offset: u64, seq: u64) -> RecordHeader {
        RecordHeader {
            kind,
            file_id,
            offset,
            len: 0,
            payload_crc: crc32c::crc32c(&[]),
            seq,
        }
    }

    /// Bytes this record occupies in the log, header and padding included.
    pub fn record_len(&self) -> u64 {
        record_len(self.len)
    }

    /// The 48 header bytes, checksum included.
    pub fn encode(&self) -> [u8; 48] {
        let mut bytes = [0u8; 48];
        bytes[0..4].copy_from_slice(&RECORD_MAGIC);
        bytes[4] = self.kind.code();
        bytes[8..16].copy_from_slice(&self.file_id.0.to_le_bytes());
        bytes[16..24].copy_from_slice(&self.offset.to_le_bytes());
        bytes[24..28].copy_from_slice(&self.len.to_le_bytes());
        bytes[28..32].copy_from_slice(&self.payload_crc.to_le_bytes());
        bytes[32..40].copy_from_slice(&self.seq.to_le_bytes());
        let crc = crc32c::crc32c(&bytes[..HEADER_CRC_COVERS]);
        bytes[40..44].copy_from_slice(&crc.to_le_bytes());
        bytes
    }

    /// Decode and validate 48 header bytes: magic, header checksum, kind,
    /// zero reserved and padding bytes, per-kind field rules. The payload is
    /// not looked at (see [`RecordHeader::payload_matches`]).
    pub fn decode(bytes: &[u8; 48]) -> Result<RecordHeader, RecordError> {
        let magic = [bytes[0], bytes[1], bytes[2], bytes[3]];
        if magic != RECORD_MAGIC {
            return Err(RecordError::BadMagic(magic));
        }
        let stored = u32_at(bytes, 40);
        let computed = crc32c::crc32c(&bytes[..HEADER_CRC_COVERS]);
        if stored != computed {
            return Err(RecordError::BadHeaderChecksum { stored, computed });
        }
        let kind = RecordKind::from_code(bytes[4]).ok_or(RecordError::UnknownKind(bytes[4]))?;
        if bytes[5..8] != [0; 3] || bytes[44..48] != [0; 4] {
            return Err(RecordError::NonZeroReserved);
        }
        let header = RecordHeader {
            kind,
            file_id: FileId(u64_at(bytes, 8)),
            offset: u64_at(bytes, 16),
            len: u32_at(bytes, 24),
            payload_crc: u32_at(bytes, 28),
            seq: u64_at(bytes, 32),
        };
        header.check_kind_rules()?;
        Ok(header)
    }

    fn check_kind_rules(&self) -> Result<(), RecordError> {
        let malformed = |rule| {
            Err(RecordError::Malformed {
                kind: self.kind,
                rule,
            })
        };
        if self.len == 0 && self.payload_crc != 0 {
            // crc32c of no bytes is 0.
            return malformed("empty payload with a non-zero checksum");
        }
        match self.kind {
            RecordKind::Data => Ok(()),
            RecordKind::Path if self.len == 0 || self.len as usize > MAX_PATH_BYTES => {
                malformed("path length out of range")
            }
            RecordKind::Path => Ok(()),
            RecordKind::Truncate if self.len != 0 => malformed("payload must be empty"),
            RecordKind::Clean if self.len != 0 && self.len as usize != CLEAN_PAYLOAD_BYTES => {
                malformed("payload must be empty or a byte range")
            }
            RecordKind::Truncate | RecordKind::Clean => Ok(()),
            RecordKind::Unlink | RecordKind::Commit if self.len != 0 => {
                malformed("payload must be empty")
            }
            RecordKind::Unlink | RecordKind::Commit if self.offset != 0 => {
                malformed("offset must be 0")
            }
            RecordKind::Commit if self.file_id != FileId(0) => malformed("file id must be 0"),
            RecordKind::Unlink | RecordKind::Commit => Ok(()),
        }
    }

    /// Whether `payload` is this record's payload (length and checksum).
    pub fn payload_matches(&self, payload: &[u8]) -> bool {
        payload.len() == self.len as usize && crc32c::crc32c(payload) == self.payload_crc
    }
}

/// Decode the payload of a path record: UTF-8 and a valid non-root
/// [`RelPath`]; `None` if it is neither (corruption).
pub fn decode_path(payload: &[u8]) -> Option<RelPath> {
    let text = std::str::from_utf8(payload).ok()?;
    let path = RelPath::new(text).ok()?;
    (!path.is_root()).then_some(path)
}

fn u32_at(bytes: &[u8; 48], at: usize) -> u32 {
    u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

fn u64_at(bytes: &[u8; 48], at: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(word)
}
