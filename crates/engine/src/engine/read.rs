//! Reading bytes back: capacity-tier reads that fill holes with zeros, and
//! buffered bytes verified against their record's payload checksum.

use super::*;

/// Read `buf.len()` bytes at `offset`; bytes past the end read as zeros.
pub(crate) fn read_fully(file: &dyn BackendFile, buf: &mut [u8], offset: u64) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        let n = file.read_at(&mut buf[done..], offset + done as u64)?;
        if n == 0 {
            // Past the capacity file's end: a hole reads as zeros.
            buf[done..].fill(0);
            break;
        }
        done += n;
    }
    Ok(())
}

/// Copy the buffered bytes at `location` into `out`, verifying the whole
/// record's payload checksum first.
pub(super) fn read_buffered(
    state: &State,
    location: LogLocation,
    out: &mut [u8],
) -> io::Result<()> {
    let region = &state.regions[location.region.0 as usize];
    // INVARIANT: every indexed extent lies inside a recorded data record.
    let (&start, &(len, crc)) = region
        .records
        .range(..=location.offset)
        .next_back()
        .expect("an indexed extent points into a record");
    let payload = region
        .file
        .read_payload(
            LogLocation {
                region: location.region,
                offset: start,
            },
            len,
            crc,
        )
        .map_err(|e| {
            let kind = if e.is_corruption() {
                io::ErrorKind::InvalidData
            } else {
                io::ErrorKind::Other
            };
            io::Error::new(kind, e.to_string())
        })?;
    let skip = (location.offset - start) as usize;
    out.copy_from_slice(&payload[skip..skip + out.len()]);
    Ok(())
}
