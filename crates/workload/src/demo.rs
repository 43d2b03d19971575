//! `sluice demo`: the main job, and what it is for. Mounts sluice with the
//! embedded config (config/demo.toml: the default placement policy,
//! `cost`; fast tier a local directory, capacity tier a local directory
//! behind an emulated 7200 rpm disk), then through the mount: a sequential
//! writer alone, random writers alone, both at once; prints live status
//! every second; reads every byte back; drains; unmounts; checks every
//! byte on the capacity tier's directory.
//!
//! Then the same writers (same phases, files and sizes) run again on a
//! second mount with `policy.name = "capacity-only"` (DIR/baseline: fresh
//! tiers, the same emulated disk, every write straight to it), and that
//! run's capacity tier is checked too. It is not read back through the
//! mount: that would time the emulated disk's reads, which the summary
//! does not compare. The summary is one table: per phase, sluice's time
//! and throughput beside capacity-only's, the speedup, and how many of the
//! sequential writers' and of the random writers' bytes sluice placed on
//! the fast tier (from the mount's per-file placements, `Status::files`,
//! taken right after each phase). The demo fails if either run's bytes
//! differ.
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

use sluice_config::{Config, PolicyName};
use sluice_daemon::{Mount, Status};

const KIB: u64 = 1024;
const MIB: u64 = 1024 * 1024;

/// The embedded demo config.
pub const DEMO_CONFIG: &str = include_str!("../../../config/demo.toml");

/// The 8-byte word `word` of file `seed`.
fn word_at(seed: u64, word: u64) -> u64 {
    word.wrapping_mul(0x9e37_79b9_7f4a_7c15)
        .wrapping_add(seed.wrapping_mul(0xbf58_476d_1ce4_e5b9))
}

/// Byte `offset` of file `seed`: distinct per file and offset.
fn byte_at(seed: u64, offset: u64) -> u8 {
    let x = word_at(seed, offset / 8);
    (x >> (8 * (offset % 8)) as u32) as u8 ^ (x >> 56) as u8
}

/// `buf` = the bytes of file `seed` from `offset`: [`byte_at`], one word
/// at a time (the demo fills and checks each byte twice per run).
fn fill(seed: u64, offset: u64, buf: &mut [u8]) {
    // Bytes up to the first word boundary.
    let head = (((8 - offset % 8) % 8) as usize).min(buf.len());
    for (i, b) in buf[..head].iter_mut().enumerate() {
        *b = byte_at(seed, offset + i as u64);
    }
    let first_word = (offset + head as u64) / 8;
    for (word, chunk) in (first_word..).zip(buf[head..].chunks_mut(8)) {
        let x = word_at(seed, word);
        let bytes = (x ^ ((x >> 56) * 0x0101_0101_0101_0101)).to_le_bytes();
        chunk.copy_from_slice(&bytes[..chunk.len()]);
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
    for offset in w.offsets() {
        fill(w.seed, offset, &mut buf);
        file.write_all_at(&buf, offset)?;
    }
    // One fsync at the end, as a checkpoint writer (and IOR's `-e`) does:
    // under close-to-open an fsync puts the file's buffered bytes on the
    // capacity tier, so an fsync every few MiB of a random writer would
    // make the disk take them as the random writes they were.
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
    /// Bytes of the phase's sequential writers, and how many of them were
    /// placed on the fast tier.
    seq_bytes: u64,
    seq_fast: u64,
    /// The same for its random writers.
    random_bytes: u64,
    random_fast: u64,
}

/// Run `writers` at once through the mount, printing live status.
fn phase(
    name: &'static str,
    mount: &Mount,
    dir: &Path,
    writers: &[Writer],
) -> Result<PhaseResult, String> {
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
    // Each phase writes files of its own, so a file's placed bytes since
    // the mount are this phase's.
    let fast_of = |w: &Writer| {
        after
            .files
            .iter()
            .find(|f| f.path == w.name)
            .map_or(0, |f| f.fast_bytes)
    };
    let sum = |random: bool, of: &dyn Fn(&Writer) -> u64| -> u64 {
        writers.iter().filter(|w| w.random == random).map(of).sum()
    };
    Ok(PhaseResult {
        name,
        bytes: writers.iter().map(|w| w.bytes).sum(),
        seconds,
        seq_bytes: sum(false, &|w| w.bytes),
        seq_fast: sum(false, &fast_of),
        random_bytes: sum(true, &|w| w.bytes),
        random_fast: sum(true, &fast_of),
    })
}

/// The tiers and the mount point of one run, under `dir`.
struct Dirs {
    fast: PathBuf,
    capacity: PathBuf,
    point: PathBuf,
}

impl Dirs {
    /// Create them; remove the files of an earlier demo from the capacity
    /// tier (they would only be overwritten).
    fn prepare(dir: &Path) -> Result<Dirs, String> {
        let dirs = Dirs {
            fast: dir.join("fast"),
            capacity: dir.join("capacity"),
            point: dir.join("mnt"),
        };
        for d in [&dirs.fast, &dirs.capacity, &dirs.point] {
            std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
        }
        // The fast tier must be the mount's own whatever the umask (a
        // group-writable one is refused: docs/fuse.md, Security).
        std::fs::set_permissions(
            &dirs.fast,
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        )
        .map_err(|e| format!("{}: {e}", dirs.fast.display()))?;
        for entry in std::fs::read_dir(&dirs.capacity)
            .map_err(|e| format!("{}: {e}", dirs.capacity.display()))?
            .flatten()
        {
            let _ = std::fs::remove_file(entry.path());
        }
        Ok(dirs)
    }

    /// `config` with these tiers.
    fn config(&self, config: &Config) -> Config {
        let mut config = config.clone();
        config.fast.path = Some(self.fast.clone());
        config.capacity.path = Some(self.capacity.clone());
        config
    }
}

/// Check every written byte of every file on the capacity tier's
/// directory; the files that differ, with their first wrong byte.
fn verify_capacity(capacity: &Path, writers: &[Writer]) -> Result<Vec<String>, String> {
    let mut bad = Vec::new();
    for w in writers {
        let path = capacity.join(&w.name);
        let wrong = verify(&path, w).map_err(|e| format!("{}: {e}", path.display()))?;
        if let Some(off) = wrong {
            bad.push(format!("{} at byte {off}", w.name));
        }
    }
    Ok(bad)
}

/// `sluice demo`.
pub fn demo(dir: &Path, mib: u64) -> Result<(), String> {
    let config = Config::from_toml(DEMO_CONFIG).map_err(|e| e.to_string())?;
    let phases = phases(mib);

    // sluice, with the demo config (the default placement policy).
    let dirs = Dirs::prepare(dir)?;
    println!(
        "sluice demo: fast tier {} (local disk), capacity tier {} (emulated 7200 rpm disk), mount {}",
        dirs.fast.display(),
        dirs.capacity.display(),
        dirs.point.display()
    );
    let mount = Mount::start(&dirs.config(&config), &dirs.point).map_err(|e| e.to_string())?;
    println!("== sluice, policy {}", mount.status().policy);
    let result = run_sluice(&mount, &dirs.point, &phases);
    // Unmount (and drain) whatever happened.
    let finished = mount.finish().map_err(|e| e.to_string());
    let sluice = result?;
    finished?;
    let writers: Vec<Writer> = phases.iter().flat_map(|(_, w)| w.clone()).collect();
    let bad = verify_capacity(&dirs.capacity, &writers)?;

    // The same writers with every write straight to the same emulated disk.
    let mut baseline_config = config.clone();
    baseline_config.policy.name = PolicyName::CapacityOnly;
    let base_dirs = Dirs::prepare(&dir.join("baseline"))?;
    let mount = Mount::start(&base_dirs.config(&baseline_config), &base_dirs.point)
        .map_err(|e| e.to_string())?;
    println!(
        "== the same writers, policy {}: fast tier {}, capacity tier {} (emulated 7200 rpm disk), mount {}",
        mount.status().policy,
        base_dirs.fast.display(),
        base_dirs.capacity.display(),
        base_dirs.point.display()
    );
    let result = run_writers(&mount, &base_dirs.point, &phases);
    let finished = mount.finish().map_err(|e| e.to_string());
    let baseline = result?;
    finished?;
    let base_bad = verify_capacity(&base_dirs.capacity, &writers)?;

    print_summary(&sluice, &baseline, bad.is_empty(), base_bad.is_empty());
    let mut errors = Vec::new();
    if !bad.is_empty() {
        errors.push(format!(
            "sluice's capacity tier differs: {}",
            bad.join(", ")
        ));
    }
    if !base_bad.is_empty() {
        errors.push(format!(
            "capacity-only's capacity tier differs: {}",
            base_bad.join(", ")
        ));
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join("; "))
    }
}

/// The demo's writers, phase by phase: `mib` MiB per sequential writer
/// (1 MiB writes), a quarter of that per random writer (256 KiB writes,
/// each block of its file once, in random order: IOR's `-z`, a checkpoint
/// whose ranks write their pieces out of order).
fn phases(mib: u64) -> Vec<(&'static str, Vec<Writer>)> {
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
        span: bytes / 4,
        request: 256 * KIB,
        random: true,
    };
    vec![
        (
            "phase 1: one sequential writer (1 MiB writes)",
            vec![seq("checkpoint.0", 1)],
        ),
        (
            "phase 2: four random writers (256 KiB writes)",
            vec![
                rnd("mesh.0", 2),
                rnd("mesh.1", 3),
                rnd("mesh.2", 4),
                rnd("mesh.3", 5),
            ],
        ),
        (
            "phase 3: sequential and random writers at once",
            vec![
                seq("checkpoint.1", 6),
                rnd("mesh.4", 7),
                rnd("mesh.5", 8),
                rnd("mesh.6", 9),
                rnd("mesh.7", 10),
            ],
        ),
    ]
}

/// Run the phases one after the other through the mount.
fn run_writers(
    mount: &Mount,
    point: &Path,
    phases: &[(&'static str, Vec<Writer>)],
) -> Result<Vec<PhaseResult>, String> {
    phases
        .iter()
        .map(|(name, writers)| phase(name, mount, point, writers))
        .collect()
}

/// What the sluice run measured.
struct SluiceRun {
    phases: Vec<PhaseResult>,
    read_seconds: f64,
    drain_seconds: f64,
    final_status: Status,
}

/// The phases, then every byte read back through the mount, then a drain.
fn run_sluice(
    mount: &Mount,
    point: &Path,
    phases: &[(&'static str, Vec<Writer>)],
) -> Result<SluiceRun, String> {
    let results = run_writers(mount, point, phases)?;
    let writers: Vec<&Writer> = phases.iter().flat_map(|(_, w)| w).collect();
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
    Ok(SluiceRun {
        phases: results,
        read_seconds,
        drain_seconds,
        final_status,
    })
}

fn print_summary(s: &SluiceRun, base: &[PhaseResult], verified: bool, base_verified: bool) {
    let mib = |b: u64| b as f64 / MIB as f64;
    let mbps = |bytes: u64, seconds: f64| bytes as f64 / 1e6 / seconds;
    // "placed of written" MiB, or "-" for a phase without such writers.
    let placed = |fast: u64, of: u64| {
        if of == 0 {
            "-".to_string()
        } else {
            format!("{:.1} of {:.0}", mib(fast), mib(of))
        }
    };
    let row = |name: &str,
               bytes: u64,
               seconds: f64,
               base_seconds: f64,
               seq: String,
               random: String| {
        println!(
            "| {name} | {:.0} | {seconds:.2} | {:.1} | {base_seconds:.2} | {:.1} | {:.1}x | {seq} | {random} |",
            mib(bytes),
            mbps(bytes, seconds),
            mbps(bytes, base_seconds),
            base_seconds / seconds,
        );
    };
    println!();
    println!(
        "| phase | MiB | sluice s | sluice MB/s | capacity-only s | capacity-only MB/s | speedup | sequential writers' MiB to the fast tier | random writers' MiB to the fast tier |"
    );
    println!("|---|--:|--:|--:|--:|--:|--:|--:|--:|");
    for (p, b) in s.phases.iter().zip(base) {
        row(
            p.name,
            p.bytes,
            p.seconds,
            b.seconds,
            placed(p.seq_fast, p.seq_bytes),
            placed(p.random_fast, p.random_bytes),
        );
    }
    let total = |f: fn(&PhaseResult) -> u64| s.phases.iter().map(f).sum::<u64>();
    row(
        "all phases",
        total(|p| p.bytes),
        s.phases.iter().map(|p| p.seconds).sum(),
        base.iter().map(|p| p.seconds).sum(),
        placed(total(|p| p.seq_fast), total(|p| p.seq_bytes)),
        placed(total(|p| p.random_fast), total(|p| p.random_bytes)),
    );
    println!();
    println!(
        "sluice: read back {:.2} s; drain {:.2} s ({:.1} MiB flushed in {} regions); buffered after drain: {} B",
        s.read_seconds,
        s.drain_seconds,
        mib(s.final_status.flushed_bytes),
        s.final_status.regions_flushed,
        s.final_status.buffered_bytes
    );
    let verdict = |ok: bool| {
        if ok {
            "every byte of every file is on the capacity tier"
        } else {
            "MISMATCH"
        }
    };
    println!("verified, sluice: {}", verdict(verified));
    println!("verified, capacity-only: {}", verdict(base_verified));
}

/// The default demo directory.
pub fn default_dir() -> PathBuf {
    PathBuf::from("sluice-demo")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_is_byte_at_from_any_offset() {
        for offset in [0, 1, 7, 8, 13, 256 * KIB] {
            for len in [0, 1, 5, 8, 9, 31] {
                let mut buf = vec![0u8; len];
                fill(42, offset, &mut buf);
                let want: Vec<u8> = (0..len as u64).map(|i| byte_at(42, offset + i)).collect();
                assert_eq!(buf, want, "offset {offset}, len {len}");
            }
        }
    }
}
