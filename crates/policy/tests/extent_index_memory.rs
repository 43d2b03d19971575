//! Measures the heap cost of one extent in the index and checks it against
//! the paper's range (24–56 bytes per request, DESIGN §4.4) and against
//! `ESTIMATED_BYTES_PER_EXTENT`.
//!
//! A counting global allocator tracks live heap bytes; the test inserts
//! 100,000 non-overlapping extents in random file order into one file (the
//! ordinary case of random writes absorbed by the log) and divides the growth
//! of live bytes by the number of extents.

// `GlobalAlloc` is an `unsafe trait` and its methods are `unsafe fn`s, so a
// counting allocator cannot be written without `unsafe`; it only forwards to
// `System` and adjusts a counter.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use sluice_policy::extent_index::{Extent, ExtentIndex, ESTIMATED_BYTES_PER_EXTENT};
use sluice_policy::{FileId, LogLocation, RegionId};

struct Counting;

static LIVE_BYTES: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every method forwards to `System` with the caller's arguments, so
// `System`'s guarantees carry over; the counter does not affect allocation.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged; the caller upholds `alloc`'s contract.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            LIVE_BYTES.fetch_add(layout.size(), Ordering::Relaxed);
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged; `ptr` came from `System` via `alloc`.
        unsafe { System.dealloc(ptr, layout) };
        LIVE_BYTES.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged; the caller upholds the contract.
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            LIVE_BYTES.fetch_add(layout.size(), Ordering::Relaxed);
        }
        ptr
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded unchanged; the caller upholds `realloc`'s contract.
        let new_ptr = unsafe { System.realloc(ptr, layout, new_size) };
        if !new_ptr.is_null() {
            LIVE_BYTES.fetch_sub(layout.size(), Ordering::Relaxed);
            LIVE_BYTES.fetch_add(new_size, Ordering::Relaxed);
        }
        new_ptr
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const EXTENTS: u64 = 100_000;
const EXTENT_LEN: u32 = 4096;

/// splitmix64: a tiny deterministic generator, enough for a shuffle.
fn next_random(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Live heap bytes per extent after inserting one extent per slot, in the
/// given order; slot `k` covers every other 4 KiB block, so extents never
/// touch or overlap.
fn bytes_per_extent(slots: &[u64]) -> (f64, ExtentIndex) {
    let file = FileId(7);
    let before = LIVE_BYTES.load(Ordering::SeqCst);
    let mut index = ExtentIndex::new();
    for (seq, &slot) in slots.iter().enumerate() {
        index.insert(
            file,
            Extent {
                file_offset: slot * 2 * u64::from(EXTENT_LEN),
                len: EXTENT_LEN,
                location: LogLocation {
                    region: RegionId((seq % 4) as u32),
                    offset: seq as u64 * 8192,
                },
                seq: seq as u64,
            },
        );
    }
    let after = LIVE_BYTES.load(Ordering::SeqCst);
    assert_eq!(index.extent_count() as u64, slots.len() as u64);
    assert_eq!(
        index.buffered_bytes(),
        slots.len() as u64 * u64::from(EXTENT_LEN)
    );
    let per_extent = after.saturating_sub(before) as f64 / slots.len() as f64;
    (per_extent, index)
}

/// One test function on purpose: the live-byte counter is global, and tests
/// in one binary run on parallel threads.
#[test]
fn heap_bytes_per_extent_match_estimate() {
    let mut random: Vec<u64> = (0..EXTENTS).collect();
    let mut state = 0x5eed;
    for i in (1..random.len()).rev() {
        let j = (next_random(&mut state) % (i as u64 + 1)) as usize;
        random.swap(i, j);
    }
    let (per_extent, index) = bytes_per_extent(&random);
    let estimate = ESTIMATED_BYTES_PER_EXTENT as f64;
    println!(
        "extent index, random order: {per_extent:.1} heap bytes per extent (estimate {estimate}), \
         memory_bytes_estimate {} B",
        index.memory_bytes_estimate(),
    );
    drop(index);
    assert!(
        (24.0..=64.0).contains(&per_extent),
        "{per_extent:.1} bytes per extent outside 24..=64"
    );
    assert!(
        (estimate * 0.5..=estimate * 1.5).contains(&per_extent),
        "{per_extent:.1} bytes per extent not within 50% of the estimate {estimate}"
    );

    // Appends fill leaves completely: close to the 32-byte entry itself.
    let sequential: Vec<u64> = (0..EXTENTS).collect();
    let (per_extent, index) = bytes_per_extent(&sequential);
    drop(index);
    println!("extent index, sequential order: {per_extent:.1} heap bytes per extent");
    assert!((32.0..=40.0).contains(&per_extent), "{per_extent:.1}");

    // 16 sequential writers in separate segments, interleaved round robin.
    let per_writer = EXTENTS / 16;
    let interleaved: Vec<u64> = (0..per_writer)
        .flat_map(|k| (0..16).map(move |w| w * per_writer + k))
        .collect();
    let (per_extent, index) = bytes_per_extent(&interleaved);
    drop(index);
    println!(
        "extent index, 16 interleaved sequential writers: {per_extent:.1} heap bytes per extent"
    );
    assert!((32.0..=72.0).contains(&per_extent), "{per_extent:.1}");
}
