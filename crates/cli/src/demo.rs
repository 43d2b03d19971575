//! `sluice demo`: the main job. Mounts sluice with the embedded config
//! (config/demo.toml: fast tier a local directory, capacity tier a local
//! directory behind an emulated 7200 rpm disk), then through the mount:
//! a sequential writer alone, random writers alone, both at once; prints
//! live status every second; reads every byte back; drains; checks every
//! byte on the capacity tier's directory; unmounts; prints a summary.
//!
//! Every byte written is a function of (file, offset), so verification
//! needs no copy of the data.

// The demo reports wall-clock throughput.
#![allow(clippy::disallowed_methods)]

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use sluice_config::Config;
use sluice_fuse::{Mount, Status};

const KIB: u64 = 1024;
const MIB: u64 = 1024 * 1024;

/// The embedded demo config.
pub const DEMO_CONFIG: &str = include_str!("../../../config/demo.toml");

/// Byte `i` of file `seed`: distinct per file and offset.
fn byte_at(seed: u64, offset: u64) -> u8 {
    let x = (offset / 8)
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        .wrapping_add(seed.wrapping_mul(0xbf58_476d_1ce4_e5b9));
    (x >> (8 * (offset % 8)) as u32) as u8 ^ (x >> 56) as u8
}

fn fill(seed: u64, offset: u64, buf: &mut [u8]) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = byte_at(seed, offset + i as u64);
    }
}

/// One writer: a file, its size, the request size and whether the offsets
/// are shuffled.
#[derive(Clone)]
struct Writer {
    name: String,
    seed: u64,
    /// Bytes written.
    bytes: u64,
    /// File size: random writers scatter their writes over a larger file.
    span: u64,
    request: u64,
    random: bool,
}

impl Writer {
    /// Offsets of the blocks written, in write order.
    fn offsets(&self) -> Vec<u64> {
        let slots = self.span / self.request;
        let order: Vec<u64> = if self.random {
            shuffled(slots, self.seed)
        } else {
            (0..slots).collect()
        };
        order
            .into_iter()
            .take((self.bytes / self.request) as usize)
            .map(|b| b * self.request)
            .collect()
    }
}

fn shuffled(n: u64, seed: u64) -> Vec<u64> {
    let mut v: Vec<u64> = (0..n).collect();
    let mut x = seed | 1;
    for i in (1..v.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.swap(i, (x % (i as u64 + 1)) as usize);
    }
    v
}

fn run_writer(dir: &Path, w: &Writer) -> io::Result<()> {
    let file = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(false)
        .open(dir.join(&w.name))?;
    file.set_len(w.span)?;
    let mut buf = vec![0u8; w.request as usize];
    for (i, offset) in w.offsets().into_iter().enumerate() {
        fill(w.seed, offset, &mut buf);
        file.write_all_at(&buf, offset)?;
        if i % 64 == 63 {
            file.sync_data()?;
        }
    }
    file.sync_data()
}

/// Compare the written blocks of `path` with the pattern; the first wrong
/// offset if any.
fn verify(path: &Path, w: &Writer) -> io::Result<Option<u64>> {
    let file = File::open(path)?;
    let len = file.metadata()?.len();
    if len != w.span {
        return Ok(Some(len.min(w.span)));
    }
    let mut got = vec![0u8; w.request as usize];
    let mut want = vec![0u8; w.request as usize];
    for offset in w.offsets() {
        file.read_exact_at(&mut got, offset)?;
        fill(w.seed, offset, &mut want);
        if got != want {
            let i = got.iter().zip(&want).position(|(a, b)| a != b);
            return Ok(Some(offset + i.unwrap_or(0) as u64));
        }
    }
    Ok(None)
}

struct PhaseResult {
    name: &'static str,
    bytes: u64,
    seconds: f64,
    to_fast: u64,
    to_capacity: u64,
}

/// Run `writers` at once through the mount, printing live status.
fn phase(
    name: &'static str,
    mount: &Mount,
    dir: &Path,
    writers: &[Writer],
) -> Result<PhaseResult, String> {
    let before = mount.status();
    let start = Instant::now();
    let done = AtomicBool::new(false);
    println!("-- {name}");
    let result = std::thread::scope(|scope| {
        let handles: Vec<_> = writers
            .iter()
            .map(|w| {
                scope.spawn(move || run_writer(dir, w).map_err(|e| format!("{}: {e}", w.name)))
            })
            .collect();
        let done = &done;
        let ticker = scope.spawn(move || {
            let mut last_print = Instant::now();
            while !done.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(50));
                if last_print.elapsed() >= Duration::from_secs(1) {
                    last_print = Instant::now();
                    println!("   {}", mount.status().line());
                }
            }
        });
        let mut result = Ok(());
        for h in handles {
            match h.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => result = Err(e),
                Err(_) => result = Err("a writer thread panicked".to_string()),
            }
        }
        done.store(true, Ordering::Relaxed);
        let _ = ticker.join();
        result
    });
    result?;
    let seconds = start.elapsed().as_secs_f64();
    let after = mount.status();
    println!("   {}", after.line());
    Ok(PhaseResult {
        name,
        bytes: writers.iter().map(|w| w.bytes).sum(),
        seconds,
        to_fast: (after.fast_bytes + after.forced_to_log_bytes)
            .saturating_sub(before.fast_bytes + before.forced_to_log_bytes),
        to_capacity: (after.capacity_bytes + after.write_through_bytes)
            .saturating_sub(before.capacity_bytes + before.write_through_bytes),
    })
}

/// `sluice demo`.
pub fn demo(dir: &Path, mib: u64) -> Result<(), String> {
    let mut config = Config::from_toml(DEMO_CONFIG).map_err(|e| e.to_string())?;
    let fast = dir.join("fast");
    let capacity = dir.join("capacity");
    let point = dir.join("mnt");
    for d in [&fast, &capacity, &point] {
        std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
    }
    // A fresh run: files of an earlier demo would only be overwritten.
    for entry in std::fs::read_dir(&capacity)
        .map_err(|e| e.to_string())?
        .flatten()
    {
        let _ = std::fs::remove_file(entry.path());
    }
    config.fast.path = Some(fast);
    config.capacity.path = Some(capacity.clone());
    println!("sluice demo: fast tier {}/fast (local disk), capacity tier {}/capacity (emulated 7200 rpm disk), mount {}",
        dir.display(), dir.display(), point.display());
    let mount = Mount::start(&config, &point).map_err(|e| e.to_string())?;
    let result = run_phases(&mount, &point, mib);
    // Unmount (and drain) whatever happened.
    let finished = mount.finish().map_err(|e| e.to_string());
    let summary = result?;
    finished?;
    let verified = summary
        .writers
        .iter()
        .map(|w| verify(&capacity.join(&w.name), w).map_err(|e| e.to_string()))
        .collect::<Result<Vec<_>, _>>()?;
    let bad: Vec<String> = summary
        .writers
        .iter()
        .zip(&verified)
        .filter_map(|(w, v)| v.map(|off| format!("{} at byte {off}", w.name)))
        .collect();
    print_summary(&summary, bad.is_empty());
    if bad.is_empty() {
        Ok(())
    } else {
        Err(format!("capacity tier differs: {}", bad.join(", ")))
    }
}

struct Summary {
    phases: Vec<PhaseResult>,
    writers: Vec<Writer>,
    read_seconds: f64,
    drain_seconds: f64,
    final_status: Status,
}

fn run_phases(mount: &Mount, point: &Path, mib: u64) -> Result<Summary, String> {
    let bytes = mib * MIB;
    let seq = |name: &str, seed| Writer {
        name: name.to_string(),
        seed,
        bytes,
        span: bytes,
        request: MIB,
        random: false,
    };
    let rnd = |name: &str, seed| Writer {
        name: name.to_string(),
        seed,
        bytes: bytes / 4,
        span: bytes * 4,
        request: 256 * KIB,
        random: true,
    };
    let p1 = vec![seq("checkpoint.0", 1)];
    let p2 = vec![
        rnd("mesh.0", 2),
        rnd("mesh.1", 3),
        rnd("mesh.2", 4),
        rnd("mesh.3", 5),
    ];
    let p3 = vec![
        seq("checkpoint.1", 6),
        rnd("mesh.4", 7),
        rnd("mesh.5", 8),
        rnd("mesh.6", 9),
        rnd("mesh.7", 10),
    ];
    let phases = vec![
        phase(
            "phase 1: one sequential writer (1 MiB writes)",
            mount,
            point,
            &p1,
        )?,
        phase(
            "phase 2: four random writers (256 KiB writes)",
            mount,
            point,
            &p2,
        )?,
        phase(
            "phase 3: sequential and random writers at once",
            mount,
            point,
            &p3,
        )?,
    ];
    let writers: Vec<Writer> = p1.into_iter().chain(p2).chain(p3).collect();
    println!("-- reading every byte back through the mount");
    let start = Instant::now();
    for w in &writers {
        if let Some(off) = verify(&point.join(&w.name), w).map_err(|e| e.to_string())? {
            return Err(format!("{} reads back wrong at byte {off}", w.name));
        }
    }
    let read_seconds = start.elapsed().as_secs_f64();
    println!(
        "   all {} files read back correctly ({read_seconds:.1} s)",
        writers.len()
    );
    println!("-- draining the log to the capacity tier");
    let start = Instant::now();
    mount.engine().drain().map_err(|e| e.to_string())?;
    let drain_seconds = start.elapsed().as_secs_f64();
    let final_status = mount.status();
    println!("   {}", final_status.line());
    Ok(Summary {
        phases,
        writers,
        read_seconds,
        drain_seconds,
        final_status,
    })
}

fn print_summary(s: &Summary, verified: bool) {
    let mib = |b: u64| b as f64 / MIB as f64;
    println!();
    println!("| phase | MiB | s | MB/s | to fast tier MiB | to capacity tier MiB |");
    println!("|---|---|---|---|---|---|");
    for p in &s.phases {
        println!(
            "| {} | {:.0} | {:.2} | {:.1} | {:.1} | {:.1} |",
            p.name,
            mib(p.bytes),
            p.seconds,
            p.bytes as f64 / 1e6 / p.seconds,
            mib(p.to_fast),
            mib(p.to_capacity)
        );
    }
    println!();
    println!(
        "read back: {:.2} s; drain: {:.2} s ({:.1} MiB flushed in {} regions); buffered after drain: {} B",
        s.read_seconds,
        s.drain_seconds,
        mib(s.final_status.flushed_bytes),
        s.final_status.regions_flushed,
        s.final_status.buffered_bytes
    );
    println!(
        "verified: {}",
        if verified {
            "every byte of every file is on the capacity tier"
        } else {
            "MISMATCH"
        }
    );
}

/// The default demo directory.
pub fn default_dir() -> PathBuf {
    PathBuf::from("sluice-demo")
}
