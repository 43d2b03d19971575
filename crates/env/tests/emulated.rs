//! Emulated devices in real time: requests take at least what the model
//! says, the HDD's queue serves concurrent callers, the thread stops.
//!
//! Timing assertions are one-sided (real sleeps only run long), so a busy
//! machine cannot make them fail; each test prints what it measured.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_devices::hdd::HddConfig;
use sluice_devices::ssd::SsdConfig;
use sluice_env::emulated::EmulatedBackend;
use sluice_env::memory::MemBackend;
use sluice_env::{Backend, Clock, OpenOptions, RelPath, SystemClock};

fn p(path: &str) -> RelPath {
    RelPath::new(path).unwrap()
}

fn clock() -> Arc<dyn Clock> {
    Arc::new(SystemClock::new())
}

/// SplitMix64, for reproducible offsets.
fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[test]
fn random_reads_on_a_default_disk_take_seek_plus_rotation() {
    let config = HddConfig::default();
    let capacity = config.capacity_bytes;
    let backend = EmulatedBackend::hdd(Arc::new(MemBackend::new()), config, clock(), 1).unwrap();
    // One file at disk address 0, read at random offsets over the whole
    // disk (past its end, so the memory backend allocates nothing).
    let file = backend.open(&p("f"), OpenOptions::CREATE).unwrap();
    let requests = 64u32;
    let mut rng = 42;
    let mut buf = vec![0u8; 4096];
    let start = Instant::now();
    for _ in 0..requests {
        let offset = next(&mut rng) % (capacity - 4096) / 4096 * 4096;
        assert_eq!(file.read_at(&mut buf, offset).unwrap(), 0);
    }
    let elapsed = start.elapsed();
    let stats = backend.hdd_stats().unwrap();
    assert_eq!(stats.requests_served, u64::from(requests));
    let predicted = stats.busy_time;
    // The model itself: mean seek 8.5 ms + mean rotation 4.17 ms + transfer.
    let per_request_ms = predicted.as_secs_f64() * 1e3 / f64::from(requests);
    let expected_ms = 8.5 + 60_000.0 / 7200.0 / 2.0 + 4096.0 / 150e6 * 1e3;
    println!(
        "hdd random 4 KiB reads: {requests} in {elapsed:?}, model {predicted:?} \
         ({per_request_ms:.2} ms/request, expected ≈ {expected_ms:.2})"
    );
    assert!(
        (per_request_ms / expected_ms - 1.0).abs() < 0.25,
        "{per_request_ms} ms per request"
    );
    assert!(
        elapsed >= predicted.mul_f64(0.6),
        "elapsed {elapsed:?} < 60% of the model's {predicted:?}"
    );
}

#[test]
fn a_sequential_16_mib_write_streams_at_the_media_rate() {
    let backend = EmulatedBackend::hdd(
        Arc::new(MemBackend::new()),
        HddConfig::default(),
        clock(),
        2,
    )
    .unwrap();
    let file = backend.open(&p("f"), OpenOptions::CREATE).unwrap();
    let chunk = vec![0x5Au8; 256 * 1024];
    let start = Instant::now();
    for i in 0..64u64 {
        file.write_at(&chunk, i * chunk.len() as u64).unwrap();
    }
    let elapsed = start.elapsed();
    let stats = backend.hdd_stats().unwrap();
    println!(
        "hdd sequential 16 MiB write: {elapsed:?}, model {:?}",
        stats.busy_time
    );
    // 16.8 MB at ~200 MB/s (outer edge) = 84 ms; each chunk continues the
    // previous one, so only the first pays a rotation.
    assert!(elapsed >= Duration::from_millis(70), "{elapsed:?}");
    assert!(stats.services_sequential >= 63, "{stats:?}");
    assert!(stats.busy_time < Duration::from_millis(100), "{stats:?}");
    assert_eq!(file.len().unwrap(), 16 << 20);
}

#[test]
fn concurrent_callers_share_a_shallow_queue() {
    let config = HddConfig {
        capacity_bytes: 1 << 30,
        seek_track_ms: 0.01,
        seek_avg_ms: 0.05,
        seek_full_ms: 0.1,
        rpm: 60_000,
        media_outer_bytes_per_s: 1e9,
        media_inner_bytes_per_s: 1e9,
        queue_depth: 2,
        ..HddConfig::default()
    };
    let backend = EmulatedBackend::hdd(Arc::new(MemBackend::new()), config, clock(), 3)
        .unwrap()
        .with_file_reservation(1 << 20);
    let files: Vec<_> = (0..8)
        .map(|i| {
            backend
                .open(&p(&format!("f{i}")), OpenOptions::CREATE)
                .unwrap()
        })
        .collect();
    assert_eq!(backend.file_base_address(&p("f3")), Some(3 << 20));
    std::thread::scope(|scope| {
        for (i, file) in files.iter().enumerate() {
            scope.spawn(move || {
                for block in 0..16u64 {
                    file.write_at(&[i as u8; 4096], block * 4096).unwrap();
                }
            });
        }
    });
    for (i, file) in files.iter().enumerate() {
        let mut buf = vec![0u8; 16 * 4096];
        assert_eq!(file.read_at(&mut buf, 0).unwrap(), buf.len());
        assert!(buf.iter().all(|&b| b == i as u8));
    }
    let stats = backend.hdd_stats().unwrap();
    assert_eq!(stats.requests_served, 8 * 16 + 8);
    assert!(stats.queue_len_max <= 2, "{stats:?}");
    assert!(
        stats.submits_rejected > 0,
        "the queue was never full: {stats:?}"
    );
}

#[test]
fn dropping_the_backend_stops_the_device_and_open_files_bypass_it() {
    let backend = EmulatedBackend::hdd(
        Arc::new(MemBackend::new()),
        HddConfig::default(),
        clock(),
        4,
    )
    .unwrap();
    let file = backend.open(&p("f"), OpenOptions::CREATE).unwrap();
    file.write_at(b"x", 0).unwrap();
    drop(backend);
    // 100 reads 1 GiB apart would take about a second on the model.
    let start = Instant::now();
    for i in 1..=100u64 {
        assert_eq!(file.read_at(&mut [0u8; 4096], i << 30).unwrap(), 0);
    }
    assert!(start.elapsed() < Duration::from_millis(300));
    file.write_at(b"y", 1).unwrap();
    assert_eq!(file.len().unwrap(), 2);
}

#[test]
fn ssd_requests_queue_behind_each_other() {
    let config = SsdConfig {
        latency: Duration::from_micros(60),
        read_bytes_per_s: 2e9,
        write_bytes_per_s: 1e9,
        channels: 1,
    };
    let backend = EmulatedBackend::ssd(Arc::new(MemBackend::new()), config, clock()).unwrap();
    let file = backend.open(&p("f"), OpenOptions::CREATE).unwrap();
    let chunk = vec![1u8; 1_000_000];
    let start = Instant::now();
    std::thread::scope(|scope| {
        for t in 0..2u64 {
            let file = &file;
            let chunk = &chunk;
            scope.spawn(move || {
                for i in 0..20u64 {
                    file.write_at(chunk, (t * 20 + i) * 1_000_000).unwrap();
                }
            });
        }
    });
    let elapsed = start.elapsed();
    let stats = backend.ssd_stats().unwrap();
    println!(
        "ssd 40 × 1 MB writes, 2 threads: {elapsed:?}, model {:?}",
        stats.busy_time
    );
    // 40 × (1 ms + 60 µs) on one channel: ≈ 42 ms, FIFO across the threads.
    assert_eq!(stats.busy_time, Duration::from_micros(40 * 1060));
    assert!(
        elapsed >= Duration::from_micros(40 * 1060).mul_f64(0.95),
        "{elapsed:?}"
    );
}

#[test]
fn bad_device_configs_are_errors_naming_the_key() {
    let error = EmulatedBackend::hdd(
        Arc::new(MemBackend::new()),
        HddConfig {
            rpm: 0,
            ..HddConfig::default()
        },
        clock(),
        0,
    )
    .unwrap_err();
    assert_eq!(error.kind(), std::io::ErrorKind::InvalidInput);
    assert!(error.to_string().contains("rpm"), "{error}");
    let error = EmulatedBackend::ssd(
        Arc::new(MemBackend::new()),
        SsdConfig {
            channels: 0,
            ..SsdConfig::default()
        },
        clock(),
    )
    .unwrap_err();
    assert!(error.to_string().contains("channels"), "{error}");
}

#[test]
fn syncs_cost_the_sync_latency() {
    let backend = EmulatedBackend::ssd(Arc::new(MemBackend::new()), SsdConfig::default(), clock())
        .unwrap()
        .with_sync_latency(Duration::from_millis(5));
    let file = backend.open(&p("f"), OpenOptions::CREATE).unwrap();
    let start = Instant::now();
    file.sync_data().unwrap();
    backend.sync_dir(&RelPath::root()).unwrap();
    assert!(start.elapsed() >= Duration::from_millis(10));
    assert!(backend.describe().starts_with("emulated ssd over memory"));
}

/// Writes `count` sequential 1 MiB chunks to `name` on `backend`.
fn write_mib(backend: &EmulatedBackend, name: &str, count: u64) {
    let file = backend.open(&p(name), OpenOptions::CREATE).unwrap();
    let chunk = vec![0xA5u8; 1 << 20];
    for i in 0..count {
        file.write_at(&chunk, i << 20).unwrap();
    }
}

#[test]
fn two_handles_on_one_shared_disk_serialize() {
    // Two "processes" (two backends, each with its own model, queue and
    // device thread), one state file: one platter.
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("disk");
    let open = |seed| {
        EmulatedBackend::shared_hdd(
            Arc::new(MemBackend::new()),
            HddConfig::default(),
            clock(),
            seed,
            &state,
        )
        .unwrap()
    };
    let (a, b) = (open(1), open(2));
    let start = Instant::now();
    std::thread::scope(|scope| {
        scope.spawn(|| write_mib(&a, "node-a-file", 8));
        scope.spawn(|| write_mib(&b, "node-b-file", 8));
    });
    let elapsed = start.elapsed();
    let (busy_a, busy_b) = (
        a.hdd_stats().unwrap().busy_time,
        b.hdd_stats().unwrap().busy_time,
    );
    let shared = a.shared_disk().unwrap().state().unwrap();
    let services = a.hdd_stats().unwrap().services + b.hdd_stats().unwrap().services;
    println!(
        "shared disk: 2 × 8 MiB in {elapsed:?}, busy {busy_a:?} + {busy_b:?}, \
         {} services",
        shared.services
    );
    // Every service of both is on the one platter's record, back to back:
    // the whole run takes at least the sum of their service times.
    assert_eq!(shared.services, services);
    assert_eq!(
        Duration::from_nanos(shared.busy_ns),
        busy_a + busy_b,
        "the platter's busy time is the sum of both models' services"
    );
    assert!(
        elapsed >= busy_a + busy_b,
        "elapsed {elapsed:?} < {busy_a:?} + {busy_b:?}: services overlapped"
    );
    assert_eq!(a.shared_disk().unwrap().errors(), 0);
    // Interleaved, the two streams seek between their files (one address
    // per path in both processes): more than the one first seek each.
    let seeks = a.hdd_stats().unwrap().seek_time_total + b.hdd_stats().unwrap().seek_time_total;
    assert!(seeks > Duration::from_millis(20), "seeks {seeks:?}");
}

#[test]
fn one_handle_on_a_shared_disk_behaves_as_its_own_disk() {
    // One reservation as large as the disk: the file's base is 0 in both
    // layouts (the plain one's first file, the shared one's one slot), so
    // both models see the same addresses and must time them alike.
    let whole = HddConfig::default().capacity_bytes;
    let dir = tempfile::tempdir().unwrap();
    let alone = EmulatedBackend::hdd(
        Arc::new(MemBackend::new()),
        HddConfig::default(),
        clock(),
        7,
    )
    .unwrap()
    .with_file_reservation(whole);
    let shared = EmulatedBackend::shared_hdd(
        Arc::new(MemBackend::new()),
        HddConfig::default(),
        clock(),
        7,
        &dir.path().join("disk"),
    )
    .unwrap()
    .with_file_reservation(whole);
    for backend in [&alone, &shared] {
        write_mib(backend, "f", 4);
        write_mib(backend, "g", 2);
    }
    let (one, two) = (alone.hdd_stats().unwrap(), shared.hdd_stats().unwrap());
    println!("alone {one:?}\nshared {two:?}");
    assert_eq!(one, two);
    let state = shared.shared_disk().unwrap().state().unwrap();
    assert_eq!(state.services, two.services);
    assert_eq!(Duration::from_nanos(state.busy_ns), two.busy_time);
}
