//! `sluice profile DIR`: measure a capacity device and recommend LiU's
//! segment sizes (DESIGN §5, seed 001 §II-B).
//!
//! LiU lifts the *head* of a segment to the fast tier so that the disk can
//! start streaming the *body* while the head is served. The head must cover
//! the disk's latency at its peak rate, `head = B × t80`; the body must be
//! large enough for the disk to run near its peak rate, the knee of the
//! throughput-vs-request-size curve. This command measures both on a real
//! directory or one behind an emulated device (`--device hdd|ssd`, opened by
//! the config crate's [`open_tier`], the same path `sluice mount` takes):
//!
//! 1. write `DIR/.sluice-profile` (`--region` bytes, 4 MiB requests), sync it;
//! 2. B: read its start sequentially in 4 MiB requests;
//! 3. t80: `--samples` 1-byte reads at seeded uniform offsets in the region;
//! 4. throughput: `--per-size` reads of each size from `--min-size` doubling
//!    to `--max-size`, at seeded random offsets aligned to the size.
//!
//! The recommendation ([`recommend`]) is a pure function of the three
//! measurements, unit-tested below with the paper's numbers.
//!
//! Invariants: the profile file is removed when the command ends — success,
//! error, SIGINT/SIGTERM (checked between requests) or panic — unless
//! `--keep`; nothing else in DIR is touched. On a plain directory the
//! file's pages are dropped from the page cache before each phase
//! (`posix_fadvise(DONTNEED)` through rustix; the workspace denies unsafe),
//! so reads reach the device as far as the kernel allows.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use serde_json::json;
use sluice_config::{ByteSize, Device, Span, TierConfig};
use sluice_daemon::tiers::open_tier;
use sluice_env::{Backend, BackendFile, Clock, OpenOptions, RelPath, SystemClock};
use sluice_policy::units::human_bytes;
use sluice_sim::output::{Plot, PlotKind, Series, XScale};
use sluice_sim::rng::SimRng;

mod report;
pub mod stored;
use report::*;

/// Name of the file the profile writes and reads in DIR.
pub const PROFILE_FILE_NAME: &str = ".sluice-profile";

/// Request size of the region write and of the sequential read (B).
const SEQUENTIAL_REQUEST_BYTES: u64 = 4 << 20;

/// Most bytes read to measure B: 16 requests are enough for a stable rate
/// and keep the run short on an emulated disk that really sleeps.
const SEQUENTIAL_READ_MAX_BYTES: u64 = 64 << 20;

/// Smallest head recommended: below this a lifted head saves less than the
/// bookkeeping of a segment costs.
pub const HEAD_MIN_BYTES: u64 = 64 << 10;

/// The knee: the first size from which one more doubling raises
/// throughput by less than this factor.
pub const KNEE_GAIN: f64 = 1.2;

/// Below this t80 the reads did not wait for a disk arm: a page cache or a
/// solid-state device served them.
const CACHE_LATENCY: Duration = Duration::from_micros(100);

/// Largest `--max-size`: one buffer of this size is held in memory.
const REQUEST_MAX_BYTES: u64 = 1 << 30;

/// What stands in front of DIR (the config's `device`, without `memory`:
/// profiling memory says nothing about a disk).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DeviceArg {
    /// The directory as it is (its real device, through the page cache).
    Posix,
    /// The directory behind the emulated 7200 rpm disk (sleeps in real time).
    Hdd,
    /// The directory behind the emulated SATA SSD (sleeps in real time).
    Ssd,
}

impl DeviceArg {
    fn device(self) -> Device {
        match self {
            DeviceArg::Posix => Device::Posix,
            DeviceArg::Hdd => Device::Hdd,
            DeviceArg::Ssd => Device::Ssd,
        }
    }

    fn name(self) -> &'static str {
        match self {
            DeviceArg::Posix => "posix",
            DeviceArg::Hdd => "hdd",
            DeviceArg::Ssd => "ssd",
        }
    }
}

/// Flags of `sluice profile`.
#[derive(Args, Debug)]
pub struct ProfileArgs {
    /// Directory on the device to profile (must exist); the command writes
    /// and removes DIR/.sluice-profile there.
    pub dir: PathBuf,
    /// What stands in front of DIR: `hdd` profiles the emulated disk that
    /// `sluice mount --capacity-device hdd` uses.
    #[arg(long, value_enum, default_value_t = DeviceArg::Posix)]
    pub device: DeviceArg,
    /// Size of the profile file; random reads fall anywhere in it, so a
    /// larger region means longer seeks (the paper used 1 GB and 10 GB).
    #[arg(long, value_name = "SIZE", default_value = "1GiB", value_parser = parse_size)]
    pub region: u64,
    /// Number of 1-byte random reads behind t80.
    #[arg(long, default_value_t = 400, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub samples: u32,
    /// Smallest request size of the throughput curve.
    #[arg(long, value_name = "SIZE", default_value = "64KiB", value_parser = parse_size)]
    pub min_size: u64,
    /// Largest request size of the throughput curve (sizes double from
    /// --min-size up to this).
    #[arg(long, value_name = "SIZE", default_value = "16MiB", value_parser = parse_size)]
    pub max_size: u64,
    /// Random reads per request size.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub per_size: u32,
    /// Seed of the random offsets (same seed, same offsets).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print one JSON object instead of the text report.
    #[arg(long)]
    pub json: bool,
    /// Also plot: FILE-latency.png (CDF of the 1-byte reads) and
    /// FILE-throughput.png (throughput per request size); a trailing .png
    /// of FILE is dropped first.
    #[arg(long, value_name = "FILE")]
    pub png: Option<PathBuf>,
    /// Leave DIR/.sluice-profile in place at the end.
    #[arg(long)]
    pub keep: bool,
    /// Also keep the measured `policy.cost_seek` in FAST/capacity-profile.json,
    /// where a mount of the fast tier FAST over DIR reads it instead of
    /// measuring DIR itself (a plain directory only; docs/profile.md, "At
    /// mount").
    #[arg(long, value_name = "FAST")]
    pub fast: Option<PathBuf>,
}

fn parse_size(text: &str) -> Result<u64, String> {
    text.parse::<ByteSize>().map(|size| size.0)
}

/// The request sizes of the throughput curve: `min`, doubling, up to `max`.
fn request_sizes(min_bytes: u64, max_bytes: u64) -> Vec<u64> {
    let mut sizes = Vec::new();
    let mut size = min_bytes;
    while size <= max_bytes {
        sizes.push(size);
        match size.checked_mul(2) {
            Some(next) => size = next,
            None => break,
        }
    }
    sizes
}

/// Checks the sizes against each other before anything is written.
fn validate(args: &ProfileArgs) -> Result<(), String> {
    if args.min_size == 0 {
        return Err("--min-size 0: give at least 1 byte, e.g. 64KiB".to_string());
    }
    if args.min_size > args.max_size {
        return Err(format!(
            "--min-size {} is above --max-size {}: swap them",
            ByteSize(args.min_size),
            ByteSize(args.max_size)
        ));
    }
    if args.max_size > REQUEST_MAX_BYTES {
        return Err(format!(
            "--max-size {}: at most {} (one buffer of it is held in memory)",
            ByteSize(args.max_size),
            ByteSize(REQUEST_MAX_BYTES)
        ));
    }
    if args.region < args.max_size {
        return Err(format!(
            "--region {} is smaller than --max-size {}: the largest request must fit in the region",
            ByteSize(args.region),
            ByteSize(args.max_size)
        ));
    }
    Ok(())
}

/// Throughput of random reads of one request size.
#[derive(Clone, Debug, PartialEq)]
pub struct SizePoint {
    /// Bytes per read.
    pub request_bytes: u64,
    /// Reads issued.
    pub reads: u32,
    /// Bytes read over the time spent reading.
    pub bytes_per_s: f64,
}

/// What the three phases measured.
#[derive(Clone, Debug)]
pub struct Measurement {
    /// B: sequential read rate after the first request (which only moves
    /// the head to the start of the file).
    pub peak_bytes_per_s: f64,
    /// Bytes read sequentially (the first request included).
    pub sequential_bytes: u64,
    /// Latencies of the 1-byte random reads, sorted.
    pub latencies: Vec<Duration>,
    /// Throughput per request size, sizes ascending.
    pub curve: Vec<SizePoint>,
}

impl Measurement {
    /// The `fraction` quantile of the 1-byte read latencies.
    pub fn latency(&self, fraction: f64) -> Duration {
        percentile(&self.latencies, fraction)
    }
}

/// Nearest-rank percentile of sorted `values`: the smallest value with at
/// least `fraction` of all values at or below it. Zero if empty.
pub fn percentile(sorted: &[Duration], fraction: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = (fraction * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// LiU's segment sizes for a measured device.
#[derive(Clone, Debug, PartialEq)]
pub struct Recommendation {
    /// `B × t80` in bytes, before rounding.
    pub head_exact_bytes: f64,
    /// The head: `B × t80` at the nearest power of two (on a log scale), at
    /// least [`HEAD_MIN_BYTES`].
    pub head_bytes: u64,
    /// The body: the knee of the throughput curve at the nearest power of two.
    pub body_bytes: u64,
}

impl Recommendation {
    /// Head plus body: the unit LiU buffers and lifts.
    pub fn segment_bytes(&self) -> u64 {
        self.head_bytes.saturating_add(self.body_bytes)
    }
}

/// The recommendation from B (`peak_bytes_per_s`), t80 and the throughput
/// curve (`(request bytes, bytes/s)`, sizes ascending, each twice the last).
///
/// head = B × t80 rounded to the nearest power of two on a log scale (so the
/// paper's 70 MB/s × 12 ms = 0.84 MB gives 1 MiB), never below
/// [`HEAD_MIN_BYTES`]. body = [`knee`] rounded likewise; with an empty curve,
/// the head (there is nothing to say about the body).
pub fn recommend(peak_bytes_per_s: f64, t80: Duration, curve: &[(u64, f64)]) -> Recommendation {
    let head_exact_bytes = peak_bytes_per_s * t80.as_secs_f64();
    let head_bytes = nearest_power_of_two(head_exact_bytes).max(HEAD_MIN_BYTES);
    let body_bytes = knee(curve).map_or(head_bytes, |size| nearest_power_of_two(size as f64));
    Recommendation {
        head_exact_bytes,
        head_bytes,
        body_bytes,
    }
}

/// The knee of a throughput curve: the smallest request size from which one
/// more doubling raises throughput by less than [`KNEE_GAIN`] (20%); the
/// largest size if every doubling gains more; `None` for an empty curve.
pub fn knee(curve: &[(u64, f64)]) -> Option<u64> {
    for pair in curve.windows(2) {
        let ((size, rate), (_, next_rate)) = (pair[0], pair[1]);
        if next_rate < rate * KNEE_GAIN {
            return Some(size);
        }
    }
    curve.last().map(|(size, _)| *size)
}

/// `2^round(log2(bytes))`: the power of two nearest on a log scale (1 for
/// anything at or below 1 byte or not finite; capped at 2^62).
pub fn nearest_power_of_two(bytes: f64) -> u64 {
    if !bytes.is_finite() || bytes <= 1.0 {
        return 1;
    }
    let exponent = bytes.log2().round().clamp(0.0, 62.0) as u32;
    1u64 << exponent
}

/// `sluice profile DIR`: measure, recommend, print; remove the profile file.
pub fn profile(args: &ProfileArgs) -> Result<(), String> {
    validate(args)?;
    check_dir(&args.dir)?;
    if let Some(fast) = &args.fast {
        check_dir(fast)?;
    }
    let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
    let tier = TierConfig {
        path: Some(args.dir.clone()),
        device: args.device.device(),
        // check_dir above: it exists.
        create: false,
        shared_device: None,
    };
    let backend = open_tier("profiled", &tier, &clock).map_err(|e| e.to_string())?;
    let path = RelPath::new(PROFILE_FILE_NAME).map_err(|e| e.to_string())?;
    check_space(backend.as_ref(), &args.dir, &path, args.region)?;
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, Arc::clone(&stop))
            .map_err(|e| format!("installing the signal handler: {e}"))?;
    }

    let mut guard = ProfileFile {
        backend: backend.as_ref(),
        path,
        keep: args.keep,
        created: false,
    };
    let file_path = args.dir.join(PROFILE_FILE_NAME);
    let mut warnings = Vec::new();
    let measurement = {
        let mut run = Run {
            args,
            stop: &stop,
            // Only a plain directory has page-cache effects to undo. On an
            // emulated device a read costs the model's sleep plus the real
            // read behind it, which had better be a cache hit.
            cached_file: (args.device == DeviceArg::Posix).then_some(file_path.as_path()),
            warnings: &mut warnings,
        };
        run.measure(&mut guard)?
    };
    guard.finish()?;

    let t80 = measurement.latency(0.8);
    if t80 < CACHE_LATENCY {
        warnings.push(format!(
            "t80 is {}: reads are served from a cache or a solid-state device; a head is not \
             worth lifting",
            format_latency(t80)
        ));
    }
    let curve: Vec<(u64, f64)> = measurement
        .curve
        .iter()
        .map(|point| (point.request_bytes, point.bytes_per_s))
        .collect();
    let recommendation = recommend(measurement.peak_bytes_per_s, t80, &curve);
    if let Some(fast) = &args.fast {
        if args.device != DeviceArg::Posix {
            return Err(
                "--fast keeps the figure of a plain directory: an emulated device's model is known"
                    .to_string(),
            );
        }
        let record = stored::SeekRecord {
            capacity: args.dir.clone(),
            identity: stored::identity(&args.dir)?,
            cost_seek: cost_seek(&measurement).0,
            samples: measurement.latencies.len() as u32,
            measured_at: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            how: "sluice profile".to_string(),
        };
        stored::store(fast, &record)?;
        eprintln!(
            "sluice profile: kept cost_seek {} µs in {}",
            record.cost_seek.as_micros(),
            fast.join(stored::RECORD_FILE).display()
        );
    }
    for warning in &warnings {
        eprintln!("sluice: warning: {warning}");
    }
    let describe = backend.describe();
    {
        let mut out = std::io::stdout().lock();
        let written = if args.json {
            let value = json_report(args, &describe, &measurement, &recommendation, &warnings);
            writeln_json(&mut out, &value)
        } else {
            print_report(&mut out, args, &describe, &measurement, &recommendation)
        };
        written.map_err(|e| format!("writing the report to stdout: {e}"))?;
    }
    // After the report, so a missing font costs the plots, not the figures.
    if let Some(base) = &args.png {
        for path in write_plots(base, &measurement, args)? {
            if args.json {
                eprintln!("sluice profile: wrote {}", path.display());
            } else {
                println!("wrote {}", path.display());
            }
        }
    }
    Ok(())
}

/// Refuses a DIR that is missing or not a directory (the config crate's
/// tier opener would create it: right for a tier, wrong for a profile).
fn check_dir(dir: &Path) -> Result<(), String> {
    match std::fs::metadata(dir) {
        Ok(meta) if meta.is_dir() => Ok(()),
        Ok(_) => Err(format!(
            "{} is not a directory: give a directory on the device to profile",
            dir.display()
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(format!(
            "{} does not exist: give an existing directory on the device to profile",
            dir.display()
        )),
        Err(e) => Err(format!("{}: {e}", dir.display())),
    }
}

/// Refuses a region that does not fit in the free space (a profile file
/// left by `--keep` is counted as free: it is truncated first).
fn check_space(
    backend: &dyn Backend,
    dir: &Path,
    path: &RelPath,
    region: u64,
) -> Result<(), String> {
    let space = backend
        .space()
        .map_err(|e| format!("{}: free space: {e}", dir.display()))?;
    let reusable = backend.metadata(path).map(|meta| meta.len).unwrap_or(0);
    let available = space.free_bytes.saturating_add(reusable);
    if available < region {
        return Err(format!(
            "{} has {} free; the profile file needs --region {}: lower --region or free space",
            dir.display(),
            human_bytes(available),
            ByteSize(region)
        ));
    }
    Ok(())
}

/// The profile file while it may exist: removed by [`ProfileFile::finish`]
/// or, on an early return or a panic, by `drop`, unless `--keep`.
struct ProfileFile<'a> {
    backend: &'a dyn Backend,
    path: RelPath,
    keep: bool,
    /// Set once the open (create and truncate) succeeded: before that the
    /// name may be someone else's, and is not removed.
    created: bool,
}

impl ProfileFile<'_> {
    /// Creates (or truncates) the file; from then on it is removed at the
    /// end.
    fn create(&mut self) -> Result<Arc<dyn BackendFile>, String> {
        let options = OpenOptions {
            create: true,
            truncate: true,
            ..OpenOptions::default()
        };
        let file = self
            .backend
            .open(&self.path, options)
            .map_err(|e| format!("creating the profile file: {e}"))?;
        self.created = true;
        Ok(file)
    }

    /// Removes the file (unless kept); an error says what to remove by hand.
    fn finish(mut self) -> Result<(), String> {
        let result = self.remove();
        self.created = false;
        result
    }

    fn remove(&self) -> Result<(), String> {
        if self.keep || !self.created {
            return Ok(());
        }
        match self.backend.remove_file(&self.path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(format!("removing the profile file: {e}; remove it by hand")),
        }
    }
}

impl Drop for ProfileFile<'_> {
    fn drop(&mut self) {
        if let Err(message) = self.remove() {
            eprintln!("sluice: warning: {message}");
        }
    }
}

/// One profiling run: the flags, the stop flag and what to warn about.
struct Run<'a> {
    args: &'a ProfileArgs,
    stop: &'a AtomicBool,
    /// The profile file's path on a plain directory, whose cached pages are
    /// dropped before each phase; `None` for an emulated device.
    cached_file: Option<&'a Path>,
    warnings: &'a mut Vec<String>,
}

impl Run<'_> {
    fn measure(&mut self, guard: &mut ProfileFile<'_>) -> Result<Measurement, String> {
        let args = self.args;
        let file = guard.create()?;
        let mut buffer = vec![0u8; args.max_size.max(SEQUENTIAL_REQUEST_BYTES) as usize];

        progress(format_args!(
            "writing {} to {}",
            ByteSize(args.region),
            args.dir.join(PROFILE_FILE_NAME).display()
        ));
        self.write_region(file.as_ref(), &mut buffer)?;

        self.drop_cache();
        let sequential_bytes = args.region.min(SEQUENTIAL_READ_MAX_BYTES);
        progress(format_args!(
            "reading {} sequentially (B)",
            ByteSize(sequential_bytes)
        ));
        let peak_bytes_per_s =
            self.read_sequential(file.as_ref(), &mut buffer, sequential_bytes)?;

        self.drop_cache();
        progress(format_args!("{} random 1-byte reads (t80)", args.samples));
        let mut rng = SimRng::new(args.seed);
        let latencies = self.read_random_bytes(file.as_ref(), &mut rng)?;

        let sizes = request_sizes(args.min_size, args.max_size);
        progress(format_args!(
            "{} random reads at each of {} sizes, {} to {} (throughput curve)",
            args.per_size,
            sizes.len(),
            ByteSize(args.min_size),
            ByteSize(args.max_size)
        ));
        let mut curve = Vec::with_capacity(sizes.len());
        for size in sizes {
            self.drop_cache();
            curve.push(self.read_random_requests(file.as_ref(), &mut buffer, &mut rng, size)?);
        }
        Ok(Measurement {
            peak_bytes_per_s,
            sequential_bytes,
            latencies,
            curve,
        })
    }

    /// Fails once SIGINT or SIGTERM arrived, so the file is cleaned up.
    fn check_stop(&self) -> Result<(), String> {
        if self.stop.load(Ordering::Relaxed) {
            return Err(
                "interrupted by a signal (the profile file is removed unless --keep)".to_string(),
            );
        }
        Ok(())
    }

    /// Writes the region in 4 MiB requests and syncs it. Each 4 KiB block
    /// carries its offset, so a deduplicating file system cannot fold the
    /// region into a few blocks and fake the reads.
    fn write_region(&self, file: &dyn BackendFile, buffer: &mut [u8]) -> Result<(), String> {
        let mut rng = SimRng::new(self.args.seed ^ 0x5eed_f11e);
        for byte in buffer.iter_mut() {
            *byte = rng.next_u64() as u8;
        }
        let mut offset = 0u64;
        while offset < self.args.region {
            self.check_stop()?;
            let len = (self.args.region - offset).min(SEQUENTIAL_REQUEST_BYTES) as usize;
            let chunk = &mut buffer[..len];
            for (i, block) in chunk.chunks_mut(4096).enumerate() {
                let stamp = (offset + i as u64 * 4096).to_le_bytes();
                let n = block.len().min(stamp.len());
                block[..n].copy_from_slice(&stamp[..n]);
            }
            file.write_at(chunk, offset)
                .map_err(|e| format!("writing the profile file: {e}"))?;
            offset += len as u64;
        }
        file.sync_data()
            .map_err(|e| format!("syncing the profile file: {e}"))
    }

    /// B over the requests after the first: the first one's time is a seek
    /// to the start of the file (a latency, measured by t80), not a rate.
    fn read_sequential(
        &self,
        file: &dyn BackendFile,
        buffer: &mut [u8],
        total_bytes: u64,
    ) -> Result<f64, String> {
        let mut offset = 0u64;
        let (mut first, mut rest) = ((0u64, Duration::ZERO), (0u64, Duration::ZERO));
        while offset < total_bytes {
            self.check_stop()?;
            let len = (total_bytes - offset).min(SEQUENTIAL_REQUEST_BYTES) as usize;
            let elapsed = timed_read(file, &mut buffer[..len], offset)?;
            let part = if offset == 0 { &mut first } else { &mut rest };
            part.0 += len as u64;
            part.1 += elapsed;
            offset += len as u64;
        }
        let (bytes, elapsed) = if rest.0 > 0 { rest } else { first };
        Ok(bytes as f64 / seconds(elapsed))
    }

    /// Latencies of `--samples` 1-byte reads at uniform offsets, sorted.
    fn read_random_bytes(
        &self,
        file: &dyn BackendFile,
        rng: &mut SimRng,
    ) -> Result<Vec<Duration>, String> {
        let mut byte = [0u8; 1];
        let mut latencies = Vec::with_capacity(self.args.samples as usize);
        for _ in 0..self.args.samples {
            self.check_stop()?;
            let offset = rng.below(self.args.region);
            latencies.push(timed_read(file, &mut byte, offset)?);
        }
        latencies.sort_unstable();
        Ok(latencies)
    }

    /// Throughput of `--per-size` reads of `size` bytes at random offsets
    /// aligned to `size` (as a file system lays out requests of that size).
    fn read_random_requests(
        &self,
        file: &dyn BackendFile,
        buffer: &mut [u8],
        rng: &mut SimRng,
        size: u64,
    ) -> Result<SizePoint, String> {
        // validate() keeps size <= max_size <= region, so there is a slot.
        let slots = (self.args.region / size).max(1);
        let mut elapsed = Duration::ZERO;
        for _ in 0..self.args.per_size {
            self.check_stop()?;
            let offset = rng.below(slots) * size;
            elapsed += timed_read(file, &mut buffer[..size as usize], offset)?;
        }
        Ok(SizePoint {
            request_bytes: size,
            reads: self.args.per_size,
            bytes_per_s: (size * u64::from(self.args.per_size)) as f64 / seconds(elapsed),
        })
    }

    /// Drops the profile file's pages from the page cache (plain directory
    /// only); a failure becomes one warning, not an error: the figures are
    /// still printed, flagged.
    fn drop_cache(&mut self) {
        let Some(path) = self.cached_file else {
            return;
        };
        let result = std::fs::File::open(path).and_then(|file| {
            rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::DontNeed)
                .map_err(std::io::Error::from)
        });
        if let Err(e) = result {
            let warning = format!(
                "cannot drop {} from the page cache ({e}): reads may be served from memory",
                path.display()
            );
            if !self.warnings.contains(&warning) {
                self.warnings.push(warning);
            }
        }
    }
}

/// Reads `buffer.len()` bytes at `offset` (all of them: the region is
/// that long) and returns how long it took.
fn timed_read(file: &dyn BackendFile, buffer: &mut [u8], offset: u64) -> Result<Duration, String> {
    let start = Instant::now();
    let read = file
        .read_full_at(buffer, offset)
        .map_err(|e| format!("reading the profile file at offset {offset}: {e}"))?;
    if read < buffer.len() {
        return Err(format!(
            "the profile file ended early at offset {}: was it truncated meanwhile?",
            offset + read as u64
        ));
    }
    Ok(start.elapsed())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    /// Doubling sizes from 64 KiB to 16 MiB, throughput from `rate(size)`.
    fn curve(rate: impl Fn(f64) -> f64) -> Vec<(u64, f64)> {
        request_sizes(64 << 10, 16 * MIB)
            .into_iter()
            .map(|size| (size, rate(size as f64)))
            .collect()
    }

    #[test]
    fn the_papers_disk_gets_a_1_mib_head() {
        // Seed 001 §II-B: 70 MB/s × 12 ms = 0.84 MB, "we choose 1 MB".
        let r = recommend(70e6, Duration::from_millis(12), &[]);
        assert!((r.head_exact_bytes - 840_000.0).abs() < 1e-6);
        assert_eq!(r.head_bytes, MIB);
    }

    #[test]
    fn an_hdd_like_curve_has_its_knee_at_4_mib() {
        // tp(s) = s / (12.7 ms + s / 150 MB/s): a doubling gains
        // 2(tB + s)/(tB + 2s) with tB = 1.905 MB, below 1.2 from s = 3.81 MB.
        let rates = curve(|s| s / (0.0127 + s / 150e6));
        assert_eq!(knee(&rates), Some(4 * MIB));
        let r = recommend(150e6, Duration::from_millis(12), &rates);
        assert_eq!(r.body_bytes, 4 * MIB);
        assert_eq!(r.segment_bytes(), r.head_bytes + 4 * MIB);
    }

    #[test]
    fn a_flat_curve_has_its_knee_at_the_smallest_size() {
        let rates = curve(|_| 500e6);
        assert_eq!(knee(&rates), Some(64 << 10));
        assert_eq!(
            recommend(500e6, Duration::from_micros(50), &rates).body_bytes,
            64 << 10
        );
    }

    #[test]
    fn a_curve_still_rising_has_its_knee_at_the_largest_size() {
        let rates = curve(|s| s);
        assert_eq!(knee(&rates), Some(16 * MIB));
        assert_eq!(knee(&[]), None);
    }

    #[test]
    fn heads_round_on_a_log_scale_and_never_below_64_kib() {
        assert_eq!(nearest_power_of_two(1.40 * MIB as f64), MIB);
        assert_eq!(nearest_power_of_two(1.42 * MIB as f64), 2 * MIB);
        assert_eq!(nearest_power_of_two(0.71 * MIB as f64), MIB);
        assert_eq!(nearest_power_of_two(0.70 * MIB as f64), MIB / 2);
        assert_eq!(nearest_power_of_two(0.0), 1);
        assert_eq!(nearest_power_of_two(f64::NAN), 1);
        // A cached device: 2 GB/s × 5 µs = 10 KB, raised to the floor.
        assert_eq!(
            recommend(2e9, Duration::from_micros(5), &[]).head_bytes,
            HEAD_MIN_BYTES
        );
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let values: Vec<Duration> = (1..=10).map(Duration::from_millis).collect();
        assert_eq!(percentile(&values, 0.8), Duration::from_millis(8));
        assert_eq!(percentile(&values, 0.5), Duration::from_millis(5));
        assert_eq!(percentile(&values, 0.81), Duration::from_millis(9));
        assert_eq!(percentile(&values, 0.0), Duration::from_millis(1));
        assert_eq!(percentile(&values, 1.0), Duration::from_millis(10));
        assert_eq!(percentile(&[], 0.8), Duration::ZERO);
    }

    #[test]
    fn sizes_double_up_to_the_largest_that_fits() {
        assert_eq!(
            request_sizes(64 << 10, 256 << 10),
            vec![64 << 10, 128 << 10, 256 << 10]
        );
        assert_eq!(request_sizes(3, 13), vec![3, 6, 12]);
        assert_eq!(request_sizes(5, 5), vec![5]);
    }

    #[test]
    fn plot_paths_drop_a_png_extension() {
        assert_eq!(
            plot_path(Path::new("out/disk.png"), "latency"),
            PathBuf::from("out/disk-latency.png")
        );
        assert_eq!(
            plot_path(Path::new("disk"), "throughput"),
            PathBuf::from("disk-throughput.png")
        );
    }
}
