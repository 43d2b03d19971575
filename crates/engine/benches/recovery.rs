//! Recovery scan speed: records per second over in-memory region files.
//!
//! Cases:
//! * `64B headers-only`: 1,000,000 data records of 64-byte payloads in
//!   16 MiB regions, each region ending with a commit record, so recovery
//!   verifies headers only;
//! * `64B full`: the same regions with every payload checksum verified
//!   ([`ScanMode::Full`], also what a region with no commit costs);
//! * `256KiB headers-only` / `256KiB full`: 1,024 records of 256 KiB
//!   payloads (256 MiB) in 64 MiB regions ending with a commit; headers only
//!   reads one small block per record instead of the payloads.
//!
//! The target (`docs/engine.md`): at least 1 M extents/s for headers-only
//! regions. The regions live in `sluice_env::memory::MemBackend`, so this
//! measures the scan's CPU cost and memory copies, not a device.
//!
//! Run: `cargo bench -p sluice-engine --bench recovery`; after criterion's
//! report it prints a table of records per second. `-- --quick` gives a
//! faster, rougher run. In test mode (`cargo test --benches`) the regions
//! are small.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput};
use sluice_engine::log::{
    scan_region_with, RecordHeader, RegionFile, ScanMode, REGION_HEADER_BYTES,
};
use sluice_env::memory::MemBackend;
use sluice_env::{Backend, BackendFile, OpenOptions, RelPath};
use sluice_policy::{FileId, RegionId};

const MIB: u64 = 1024 * 1024;

/// One workload: its regions and how they were built.
struct Regions {
    name: &'static str,
    region_bytes: u64,
    files: Vec<Arc<dyn BackendFile>>,
    records: u64,
    bytes: u64,
}

/// `records` data records of `payload_bytes` each, packed into regions of
/// `region_bytes`, each region closed by a commit record.
fn build(
    backend: &MemBackend,
    name: &'static str,
    records: u64,
    payload_bytes: usize,
    region_bytes: u64,
) -> Regions {
    let payload: Vec<u8> = (0..payload_bytes).map(|i| (i * 31 + 7) as u8).collect();
    let mut files = Vec::new();
    let mut written = 0u64;
    let mut seq = 0u64;
    let mut bytes = 0u64;
    while written < records {
        let path = RelPath::new(&format!("{name}-{}", files.len())).expect("valid path");
        let options = OpenOptions::CREATE;
        let file = backend.open(&path, options).expect("memory backend opens");
        let region =
            RegionFile::create(file.clone(), RegionId(files.len() as u32), region_bytes, 1)
                .expect("valid region");
        let mut offset = REGION_HEADER_BYTES;
        let commit_bytes = RegionFile::space_needed(0);
        while written < records
            && region.fits(offset, payload_bytes as u32)
            && offset + RegionFile::space_needed(payload_bytes as u32) + commit_bytes
                <= region_bytes
        {
            seq += 1;
            let header = RecordHeader::data(FileId(written % 64), written * 4096, &payload, seq)
                .expect("payload fits a record");
            region.append_at(offset, &header, &payload).expect("append");
            offset += header.record_len();
            written += 1;
        }
        seq += 1;
        region
            .append_at(offset, &RecordHeader::commit(seq), &[])
            .expect("append commit");
        bytes += offset + commit_bytes;
        files.push(file);
    }
    Regions {
        name,
        region_bytes,
        files,
        records: written,
        bytes,
    }
}

/// Scan every region; returns data records found and bytes read.
fn scan_all(regions: &Regions, mode: ScanMode) -> (u64, u64) {
    let mut records = 0;
    let mut bytes_read = 0;
    for file in &regions.files {
        let report = scan_region_with(&**file, regions.region_bytes, mode).expect("scan");
        assert!(report.corrupt.is_empty() && report.torn_tail_at.is_none());
        records += report.records.len() as u64 - 1; // minus the commit
        bytes_read += report.bytes_scanned;
        black_box(&report);
    }
    assert_eq!(records, regions.records);
    (records, bytes_read)
}

fn workloads(full_size: bool) -> (MemBackend, Vec<Regions>) {
    let backend = MemBackend::new();
    let (small, large) = if full_size {
        (1_000_000, 1024)
    } else {
        (10_000, 16)
    };
    let regions = vec![
        build(&backend, "64B", small, 64, 16 * MIB),
        build(&backend, "256KiB", large, 256 * 1024, 64 * MIB),
    ];
    (backend, regions)
}

const MODES: [(ScanMode, &str); 2] = [
    (ScanMode::Recovery, "headers-only"),
    (ScanMode::Full, "full"),
];

fn bench(criterion: &mut Criterion, regions: &[Regions]) {
    let mut group = criterion.benchmark_group("recovery scan");
    group.sample_size(10);
    for workload in regions {
        group.throughput(Throughput::Elements(workload.records));
        for (mode, mode_name) in MODES {
            group.bench_with_input(
                BenchmarkId::new(workload.name, mode_name),
                workload,
                |b, workload| b.iter(|| scan_all(workload, mode)),
            );
        }
    }
    group.finish();
}

fn table(regions: &[Regions], runs: usize) {
    println!();
    println!("Recovery scan of in-memory regions (MemBackend), median of {runs} runs");
    println!(
        "{:>8} {:>13} {:>9} {:>8} {:>10} {:>10} {:>14} {:>12} {:>10}",
        "payload",
        "mode",
        "records",
        "regions",
        "log MiB",
        "ms",
        "records/s",
        "read MiB",
        "read GB/s"
    );
    for workload in regions {
        for (mode, mode_name) in MODES {
            let mut samples: Vec<(Duration, u64)> = (0..runs)
                .map(|_| {
                    let start = Instant::now();
                    let (_, bytes_read) = scan_all(workload, mode);
                    (start.elapsed(), bytes_read)
                })
                .collect();
            samples.sort();
            let (median, bytes_read) = samples[samples.len() / 2];
            let seconds = median.as_secs_f64();
            println!(
                "{:>8} {:>13} {:>9} {:>8} {:>10.1} {:>10.2} {:>14.0} {:>12.1} {:>10.2}",
                workload.name,
                mode_name,
                workload.records,
                workload.files.len(),
                workload.bytes as f64 / MIB as f64,
                seconds * 1e3,
                workload.records as f64 / seconds,
                bytes_read as f64 / MIB as f64,
                bytes_read as f64 / seconds / 1e9
            );
        }
    }
    println!("target: >= 1,000,000 records/s for headers-only regions (docs/engine.md)");
}

fn main() {
    // `cargo test --benches` runs benches in test mode: keep that fast.
    let full_size = std::env::args().any(|a| a == "--bench");
    let (_backend, regions) = workloads(full_size);
    let mut criterion = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    bench(&mut criterion, &regions);
    criterion.final_summary();
    if full_size {
        table(&regions, 11);
    }
}
