//! Reading bytes back: capacity-tier reads that fill holes with zeros, and
//! buffered bytes verified against their record's payload checksum.

use std::io;
use std::sync::Arc;

use sluice_env::BackendFile;
use sluice_policy::{LogLocation, RegionId};

use crate::log::RegionFile;

use super::holds::{Hold, Pin};
use super::{Shared, State};

/// Read `buf.len()` bytes at `offset`; bytes past the end read as zeros.
pub(crate) fn read_fully(file: &dyn BackendFile, buf: &mut [u8], offset: u64) -> io::Result<()> {
    let read = file.read_full_at(buf, offset)?;
    // Past the capacity file's end: a hole reads as zeros.
    buf[read..].fill(0);
    Ok(())
}

/// Buffered bytes to copy outside the engine lock: the data record holding
/// them, in a region pinned by [`pin`] until [`unpin`] (or flushing, which
/// no one else resets).
pub(super) struct Located {
    pub(super) region: RegionId,
    file: Arc<RegionFile>,
    /// Payload offset, length and checksum of the record.
    record: (u64, u32, u32),
    /// Offset of the wanted bytes inside the payload.
    skip: usize,
    /// The record's payload in memory (mirror.rs), when it was kept: the
    /// copy comes from it, without a read of the fast tier.
    memory: Option<Arc<[u8]>>,
}

impl Located {
    /// Copy the bytes into `out` (its length is the piece's), verifying the
    /// whole record's payload checksum first.
    pub(super) fn copy_to(&self, out: &mut [u8]) -> io::Result<()> {
        if self.copy_from_memory(out) {
            return Ok(());
        }
        let (start, len, crc) = self.record;
        let location = LogLocation {
            region: self.region,
            offset: start,
        };
        if self.skip == 0 && out.len() == len as usize {
            // The whole record (the common case of a flush): straight into
            // `out`, without a second buffer and copy.
            return self
                .file
                .read_payload_into(location, crc, out)
                .map_err(log_io_error);
        }
        let payload = self
            .file
            .read_payload(location, len, crc)
            .map_err(log_io_error)?;
        out.copy_from_slice(&payload[self.skip..self.skip + out.len()]);
        Ok(())
    }

    /// Copy the bytes into `out` from the record's payload in memory, if
    /// it was kept (mirror.rs); `false` if not. The copy is the payload
    /// the record's checksum was computed from, so it is not checked.
    pub(super) fn copy_from_memory(&self, out: &mut [u8]) -> bool {
        let Some(memory) = &self.memory else {
            return false;
        };
        out.copy_from_slice(&memory[self.skip..self.skip + out.len()]);
        true
    }

    /// The record's payload: its offset in the region, and its length.
    pub(super) fn payload(&self) -> (u64, u64) {
        (self.record.0, u64::from(self.record.1))
    }

    /// Whether `other` lies in the same region file as this one.
    pub(super) fn same_region(&self, other: &Located) -> bool {
        self.region == other.region && Arc::ptr_eq(&self.file, &other.file)
    }

    /// Read `buf.len()` bytes of the region at `offset` in one request,
    /// unchecked ([`RegionFile::read_span`]).
    pub(super) fn read_span(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.file.read_span(offset, buf).map_err(log_io_error)
    }

    /// Copy the bytes into `out` from `span`, the region's bytes read at
    /// `span_start` by [`Located::read_span`], checking the record's payload
    /// first unless `checked` (another piece of the record checked it).
    pub(super) fn copy_from_span(
        &self,
        span: &[u8],
        span_start: u64,
        checked: bool,
        out: &mut [u8],
    ) -> io::Result<()> {
        let (start, len) = self.payload();
        // INVARIANT: the span was read to cover the whole payload.
        let at = (start - span_start) as usize;
        let payload = &span[at..at + len as usize];
        if !checked {
            self.file
                .check_payload(start, payload, self.record.2)
                .map_err(log_io_error)?;
        }
        out.copy_from_slice(&payload[self.skip..self.skip + out.len()]);
        Ok(())
    }
}

/// A log error as the `io::Error` the engine answers with: a corrupt or
/// truncated payload is `InvalidData`.
fn log_io_error(e: crate::log::LogError) -> io::Error {
    let kind = if e.is_corruption() {
        io::ErrorKind::InvalidData
    } else {
        io::ErrorKind::Other
    };
    io::Error::new(kind, e.to_string())
}

/// The record holding the buffered bytes at `location`, without pinning:
/// for the flusher, whose region cannot be reset while it flushes it.
pub(super) fn locate(state: &State, location: LogLocation) -> Located {
    let region = &state.regions[location.region.0 as usize];
    // INVARIANT: every indexed extent lies inside a recorded data record.
    let (&start, &(len, crc)) = region
        .records
        .range(..=location.offset)
        .next_back()
        .expect("an indexed extent points into a record");
    Located {
        region: location.region,
        file: Arc::clone(&region.file),
        record: (start, len, crc),
        skip: (location.offset - start) as usize,
        memory: state.mirror.get(location.region, start),
    }
}

/// [`locate`], and pin the region so the flusher does not reset it before
/// the bytes are copied; [`unpin`] once they are.
pub(super) fn pin(state: &mut State, location: LogLocation) -> (Located, Hold<Pin>) {
    (locate(state, location), Hold::take(state, location.region))
}

/// Give back a pin of [`pin`]; the last one wakes a flusher waiting to
/// reset the region.
pub(super) fn unpin(shared: &Shared, state: &mut State, pin: Hold<Pin>) {
    if pin.give_back(state) == Some(0) {
        shared.changed.notify_all();
    }
}
