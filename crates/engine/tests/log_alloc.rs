//! Memory bounds of the scan: whatever the bytes, the scan's allocations are
//! bounded by the region size, never by a length read from the file.
//!
//! A counting global allocator measures the scanning thread's allocations.
//! It is the only unsafe code of the crate, test-only: `GlobalAlloc` is an
//! unsafe trait, and the implementation only forwards to `System`.
#![allow(unsafe_code)]

#[path = "log_support/mod.rs"]
mod support;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use proptest::prelude::*;
use sluice_engine::log::{
    scan_region_with, RecordHeader, RegionHeader, ScanMode, REGION_HEADER_BYTES,
};
use sluice_policy::{FileId, RegionId};
use support::VecFile;

struct Counting;

thread_local! {
    /// Bytes allocated and not freed by this thread, the peak since the
    /// last reset, and the largest single allocation.
    static LIVE: Cell<i64> = const { Cell::new(0) };
    static PEAK: Cell<i64> = const { Cell::new(0) };
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

fn note(delta: i64, size: usize) {
    let _ = LIVE.try_with(|live| {
        let now = live.get() + delta;
        live.set(now);
        let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
    });
    let _ = LARGEST.try_with(|largest| largest.set(largest.get().max(size)));
}

// SAFETY: every method forwards to `System` with the caller's arguments;
// the bookkeeping touches only const-initialised thread locals without
// destructors, which never allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size() as i64, layout.size());
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size() as i64, layout.size());
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        note(-(layout.size() as i64), 0);
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size as i64 - layout.size() as i64, new_size);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Peak extra live bytes and largest single allocation of `f` on this thread.
fn measure<T>(f: impl FnOnce() -> T) -> (T, u64, u64) {
    let start = LIVE.with(Cell::get);
    PEAK.with(|peak| peak.set(start));
    LARGEST.with(|largest| largest.set(0));
    let result = f();
    let peak = PEAK.with(Cell::get) - start;
    (result, peak.max(0) as u64, LARGEST.with(Cell::get) as u64)
}

fn region_header(region_bytes: u64) -> Vec<u8> {
    RegionHeader {
        region: RegionId(1),
        generation: 1,
        region_bytes,
        first_seq: 0,
    }
    .encode()
    .to_vec()
}

#[test]
fn hostile_lengths_allocate_nothing_of_their_size() {
    let region_bytes = 64 * 1024;
    let mut bytes = region_header(region_bytes);
    // Valid headers claiming 4 GiB, then a region-sized payload, then a
    // path running past the end of the file.
    let huge = RecordHeader {
        len: u32::MAX,
        ..RecordHeader::data(FileId(1), 0, b"x", 1).unwrap()
    };
    bytes.extend(huge.encode());
    let big = RecordHeader {
        len: region_bytes as u32,
        ..RecordHeader::data(FileId(1), 0, b"x", 2).unwrap()
    };
    bytes.extend(big.encode());
    let path = RecordHeader {
        len: 4096,
        ..RecordHeader::path(FileId(1), &sluice_env::RelPath::new("p").unwrap(), 3).unwrap()
    };
    bytes.extend(path.encode());
    bytes.extend(b"partial");
    let file = VecFile::from_bytes(bytes);
    let (report, peak, largest) =
        measure(|| scan_region_with(&*file, region_bytes, ScanMode::Full).unwrap());
    assert!(report.records.is_empty());
    assert_eq!(report.torn_tail_at, Some(REGION_HEADER_BYTES));
    assert!(largest <= 1024, "largest allocation {largest} bytes");
    assert!(peak <= 4096, "peak {peak} bytes");
}

#[test]
fn the_worst_case_report_stays_proportional_to_the_region() {
    // Only empty records: the most records a region can hold.
    let region_bytes = 64 * 1024;
    let mut bytes = region_header(region_bytes);
    let mut seq = 0;
    while bytes.len() as u64 + 48 <= region_bytes {
        seq += 1;
        bytes.extend(RecordHeader::commit(seq).encode());
    }
    let file = VecFile::from_bytes(bytes);
    let (report, peak, largest) =
        measure(|| scan_region_with(&*file, region_bytes, ScanMode::Full).unwrap());
    assert_eq!(report.records.len() as u64, (region_bytes - 64) / 48);
    // 72-byte records for 48-byte headers, doubled by Vec growth, plus the
    // read buffer (at most the region).
    assert!(largest > region_bytes, "the counter counts: {largest}");
    assert!(largest <= 4 * region_bytes, "largest allocation {largest}");
    assert!(peak <= 5 * region_bytes, "peak {peak}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Arbitrary bytes after a valid region header: no single allocation
    /// above the region size, a peak within twice the region size.
    #[test]
    fn arbitrary_bytes_allocate_within_the_region_size(
        body in proptest::collection::vec(any::<u8>(), 0..16384),
        region_kib in 1u64..16,
    ) {
        let region_bytes = region_kib * 1024;
        let mut bytes = region_header(region_bytes);
        bytes.extend(body);
        let file = VecFile::from_bytes(bytes);
        for mode in [ScanMode::Recovery, ScanMode::Full] {
            let (result, peak, largest) =
                measure(|| scan_region_with(&*file, region_bytes, mode));
            prop_assert!(result.is_ok());
            prop_assert!(largest <= region_bytes, "largest {} for a {} region", largest, region_bytes);
            prop_assert!(peak <= 2 * region_bytes, "peak {} for a {} region", peak, region_bytes);
        }
    }
}
