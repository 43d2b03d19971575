//! Where a segment lies in a file: [`Geometry`] (head and body sizes,
//! the segment holding an offset, the body's sections) and
//! [`SegmentSlice`] (a piece of a byte range inside one segment).

use super::*;

/// A segment's place: head then body, `head_bytes + body_bytes` long.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    head_bytes: u64,
    body_bytes: u64,
}

/// A piece of a byte range that falls in one segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentSlice {
    /// Segment index in the file.
    pub index: u64,
    /// Offset of the piece inside the segment.
    pub start: u64,
    /// Length of the piece.
    pub len: u64,
}

impl Geometry {
    /// A geometry of `head_bytes` + `body_bytes`; both above 0.
    pub fn new(head_bytes: u64, body_bytes: u64) -> Result<Geometry, LiuConfigError> {
        if head_bytes == 0 || body_bytes == 0 {
            return Err(LiuConfigError("head and body sizes must be above 0"));
        }
        if head_bytes.checked_add(body_bytes).is_none() {
            return Err(LiuConfigError("head + body overflows"));
        }
        Ok(Geometry {
            head_bytes,
            body_bytes,
        })
    }

    /// Head bytes.
    pub fn head_bytes(&self) -> u64 {
        self.head_bytes
    }

    /// Body bytes.
    pub fn body_bytes(&self) -> u64 {
        self.body_bytes
    }

    /// Head + body.
    pub fn segment_bytes(&self) -> u64 {
        self.head_bytes + self.body_bytes
    }

    /// Index of the segment holding `offset`.
    pub fn segment_of(&self, offset: u64) -> u64 {
        offset / self.segment_bytes()
    }

    /// File offset where segment `index` starts (saturating).
    pub fn start(&self, index: u64) -> u64 {
        index.saturating_mul(self.segment_bytes())
    }

    /// The body of a segment split into `sections` pieces of equal length
    /// (the last takes the remainder), as (offset in segment, length).
    /// `sections` of 0 is taken as 1.
    pub fn body_sections(&self, sections: u32) -> impl Iterator<Item = (u64, u64)> + '_ {
        let n = u64::from(sections.max(1)).min(self.body_bytes);
        let each = self.body_bytes / n;
        (0..n).map(move |k| {
            let start = self.head_bytes + k * each;
            let len = if k + 1 == n {
                self.body_bytes - k * each
            } else {
                each
            };
            (start, len)
        })
    }

    /// Split `[offset, offset + len)` at segment boundaries.
    pub fn split(&self, offset: u64, len: u64) -> impl Iterator<Item = SegmentSlice> + '_ {
        let end = offset.saturating_add(len);
        let seg = self.segment_bytes();
        let mut at = offset;
        core::iter::from_fn(move || {
            if at >= end {
                return None;
            }
            let index = at / seg;
            let start = at % seg;
            let piece = (seg - start).min(end - at);
            at += piece;
            Some(SegmentSlice {
                index,
                start,
                len: piece,
            })
        })
    }
}

impl Default for Geometry {
    /// The paper's 1 MiB head and 4 MiB body.
    fn default() -> Self {
        Geometry {
            head_bytes: MIB,
            body_bytes: 4 * MIB,
        }
    }
}
