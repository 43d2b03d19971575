//! `fallocate(2)`'s modes as one type ([`Allocate`]), the flags they stand
//! for, and what each does to a file's bytes, for the backends that keep
//! their files in memory (memory, crash-test): the semantics ext4 gives
//! them on Linux, so a test on memory means what it means on a disk.
//!
//! The modes are the combinations Linux accepts (`vfs_fallocate`): plain
//! allocation and zeroing with or without `FALLOC_FL_KEEP_SIZE`, hole
//! punching (always with it), and the two shifts, collapse and insert,
//! alone. Any other combination is not an [`Allocate`]: refused as Linux
//! refuses it ([`Allocate::from_flags`]).

use rustix::io::Errno;

/// `FALLOC_FL_KEEP_SIZE`.
pub const KEEP_SIZE: i32 = 0x01;
/// `FALLOC_FL_PUNCH_HOLE`.
pub const PUNCH_HOLE: i32 = 0x02;
/// `FALLOC_FL_COLLAPSE_RANGE`.
pub const COLLAPSE_RANGE: i32 = 0x08;
/// `FALLOC_FL_ZERO_RANGE`.
pub const ZERO_RANGE: i32 = 0x10;
/// `FALLOC_FL_INSERT_RANGE`.
pub const INSERT_RANGE: i32 = 0x20;

/// One `fallocate(2)` request's mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Allocate {
    /// Mode 0 (or `KEEP_SIZE`): reserve the blocks; the bytes read the
    /// same. Without `keep_size` a range past the end makes the file that
    /// long (zeros).
    Space {
        /// `FALLOC_FL_KEEP_SIZE`: the length stays.
        keep_size: bool,
    },
    /// `PUNCH_HOLE | KEEP_SIZE`: the range reads as zeros, its blocks are
    /// freed; the size never changes.
    PunchHole,
    /// `ZERO_RANGE` (or with `KEEP_SIZE`): the range reads as zeros, its
    /// blocks stay allocated; without `keep_size` a range past the end
    /// makes the file that long.
    ZeroRange {
        /// `FALLOC_FL_KEEP_SIZE`: the length stays.
        keep_size: bool,
    },
    /// `COLLAPSE_RANGE`: the range is removed and the bytes after it move
    /// down by its length; the file is that much shorter. The range must
    /// end before the end of the file.
    CollapseRange,
    /// `INSERT_RANGE`: a hole of the range's length is inserted at its
    /// offset, moving the bytes from there up; the file is that much
    /// longer. The offset must be before the end of the file.
    InsertRange,
}

impl Allocate {
    /// The mode of `fallocate(2)`'s `mode` argument, or the errno Linux
    /// answers it with: EOPNOTSUPP for a punch without `KEEP_SIZE` and for
    /// flags it does not know, EINVAL for a shift combined with anything.
    pub fn from_flags(mode: i32) -> Result<Allocate, Errno> {
        let keep_size = mode & KEEP_SIZE != 0;
        match mode & !KEEP_SIZE {
            0 => Ok(Allocate::Space { keep_size }),
            PUNCH_HOLE if keep_size => Ok(Allocate::PunchHole),
            PUNCH_HOLE => Err(Errno::OPNOTSUPP),
            ZERO_RANGE => Ok(Allocate::ZeroRange { keep_size }),
            COLLAPSE_RANGE if !keep_size => Ok(Allocate::CollapseRange),
            INSERT_RANGE if !keep_size => Ok(Allocate::InsertRange),
            COLLAPSE_RANGE | INSERT_RANGE => Err(Errno::INVAL),
            _ => Err(Errno::OPNOTSUPP),
        }
    }

    /// The flags `fallocate(2)` takes for this mode.
    pub fn flags(self) -> i32 {
        let keep = |keep_size| if keep_size { KEEP_SIZE } else { 0 };
        match self {
            Allocate::Space { keep_size } => keep(keep_size),
            Allocate::PunchHole => PUNCH_HOLE | KEEP_SIZE,
            Allocate::ZeroRange { keep_size } => ZERO_RANGE | keep(keep_size),
            Allocate::CollapseRange => COLLAPSE_RANGE,
            Allocate::InsertRange => INSERT_RANGE,
        }
    }

    /// Whether the bytes of the range read differently afterwards (zeros):
    /// punch and zero. Plain allocation changes no byte.
    pub fn zeroes_range(self) -> bool {
        matches!(self, Allocate::PunchHole | Allocate::ZeroRange { .. })
    }

    /// Whether bytes move to other offsets: collapse and insert.
    pub fn shifts(self) -> bool {
        matches!(self, Allocate::CollapseRange | Allocate::InsertRange)
    }

    /// The length a file of `len` bytes has after this mode over
    /// `[offset, offset + range)`, or the errno Linux answers: EINVAL for
    /// an empty range, a collapse reaching the end of the file or an
    /// insert at or past it; EFBIG past the largest offset.
    pub fn new_len(self, len: u64, offset: u64, range: u64) -> Result<u64, Errno> {
        if range == 0 {
            return Err(Errno::INVAL);
        }
        let end = offset.checked_add(range).ok_or(Errno::FBIG)?;
        if end > i64::MAX as u64 {
            return Err(Errno::FBIG);
        }
        match self {
            Allocate::Space { keep_size: false } | Allocate::ZeroRange { keep_size: false } => {
                Ok(len.max(end))
            }
            Allocate::Space { keep_size: true }
            | Allocate::ZeroRange { keep_size: true }
            | Allocate::PunchHole => Ok(len),
            Allocate::CollapseRange if end < len => Ok(len - range),
            Allocate::InsertRange if offset < len => len.checked_add(range).ok_or(Errno::FBIG),
            Allocate::CollapseRange | Allocate::InsertRange => Err(Errno::INVAL),
        }
    }

    /// Apply this mode to `data`, a file's bytes, as ext4 does (the
    /// blocks aside): zeros for a punch or a zeroed range, bytes moved for
    /// a shift, the new length from [`Allocate::new_len`]. `grow` makes
    /// `data` longer (zero-filled) for a backend that counts its space;
    /// on error nothing changed.
    pub(crate) fn apply(
        self,
        data: &mut Vec<u8>,
        offset: u64,
        range: u64,
        grow: impl FnOnce(&mut Vec<u8>, usize) -> Result<(), Errno>,
    ) -> Result<(), Errno> {
        let old_len = data.len();
        let new_len = self.new_len(old_len as u64, offset, range)?;
        let new_len = usize::try_from(new_len).map_err(|_| Errno::FBIG)?;
        if new_len > old_len {
            grow(data, new_len)?;
        }
        // In range of usize: both are at most max(old_len, new_len).
        let start = (offset as usize).min(data.len());
        let end = (offset.saturating_add(range) as usize).min(data.len());
        match self {
            Allocate::Space { .. } => {}
            Allocate::PunchHole | Allocate::ZeroRange { .. } => data[start..end].fill(0),
            Allocate::CollapseRange => {
                data.copy_within(end..old_len, start);
                data.truncate(new_len);
            }
            Allocate::InsertRange => {
                let range = range as usize;
                data.copy_within(start..old_len, start + range);
                data[start..start + range].fill(0);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(mode: Allocate, data: &[u8], offset: u64, range: u64) -> Result<Vec<u8>, Errno> {
        let mut v = data.to_vec();
        mode.apply(&mut v, offset, range, |v, n| {
            v.resize(n, 0);
            Ok(())
        })?;
        Ok(v)
    }

    #[test]
    fn flags_round_trip_and_refusals_match_linux() {
        for mode in [
            Allocate::Space { keep_size: false },
            Allocate::Space { keep_size: true },
            Allocate::PunchHole,
            Allocate::ZeroRange { keep_size: false },
            Allocate::ZeroRange { keep_size: true },
            Allocate::CollapseRange,
            Allocate::InsertRange,
        ] {
            assert_eq!(Allocate::from_flags(mode.flags()), Ok(mode));
        }
        assert_eq!(Allocate::from_flags(PUNCH_HOLE), Err(Errno::OPNOTSUPP));
        assert_eq!(
            Allocate::from_flags(COLLAPSE_RANGE | KEEP_SIZE),
            Err(Errno::INVAL)
        );
        assert_eq!(Allocate::from_flags(0x40), Err(Errno::OPNOTSUPP));
    }

    #[test]
    fn each_mode_changes_bytes_and_length_as_ext4_does() {
        let d = b"abcdefgh";
        let space = Allocate::Space { keep_size: false };
        assert_eq!(run(space, d, 6, 4).unwrap(), b"abcdefgh\0\0");
        let keep = Allocate::Space { keep_size: true };
        assert_eq!(run(keep, d, 6, 4).unwrap(), d);
        assert_eq!(run(Allocate::PunchHole, d, 2, 3).unwrap(), b"ab\0\0\0fgh");
        assert_eq!(run(Allocate::PunchHole, d, 6, 10).unwrap(), b"abcdef\0\0");
        let zero = Allocate::ZeroRange { keep_size: false };
        assert_eq!(run(zero, d, 6, 4).unwrap(), b"abcdef\0\0\0\0");
        let zero_keep = Allocate::ZeroRange { keep_size: true };
        assert_eq!(run(zero_keep, d, 6, 4).unwrap(), b"abcdef\0\0");
        assert_eq!(run(Allocate::CollapseRange, d, 2, 3).unwrap(), b"abfgh");
        assert_eq!(
            run(Allocate::CollapseRange, d, 2, 6).unwrap_err(),
            Errno::INVAL,
            "a collapse may not reach the end"
        );
        assert_eq!(
            run(Allocate::InsertRange, d, 2, 3).unwrap(),
            b"ab\0\0\0cdefgh"
        );
        assert_eq!(
            run(Allocate::InsertRange, d, 8, 3).unwrap_err(),
            Errno::INVAL,
            "an insert must start before the end"
        );
        assert_eq!(run(space, d, 0, 0).unwrap_err(), Errno::INVAL);
        assert_eq!(run(space, d, u64::MAX, 2).unwrap_err(), Errno::FBIG);
    }
}
