//! `sluice-ckpt-load`: a checkpoint/restart workload on real files (a
//! sluice mount or any directory), for `scripts/bench-bbos.sh`
//! (docs/bbos.md, "Real run").
//!
//! Each job is a thread that, every `period`, writes its next checkpoint
//! `DIR/ckpt/<job>/v<k>` (`size` bytes in `chunk`-byte writes, then fsync
//! and close) and keeps `versions` of them (older ones are unlinked, as a
//! checkpoint library does). A checkpoint that takes longer than the
//! period delays the next one (the application waits for it). After each
//! period the job fails with probability `period / mtbf` (seeded); a
//! failure is followed by a restart that reads the job's newest complete
//! checkpoint whole. It prints one JSON object: per job the checkpoints,
//! bytes, the time spent checkpointing, each checkpoint's latency
//! (create to close), and the restarts with their read times.

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Parser;

/// Run checkpointing jobs in DIR for a while and print JSON.
#[derive(Parser, Debug)]
#[command(name = "sluice-ckpt-load", version)]
struct Args {
    /// Directory (a sluice mount, or any directory).
    dir: PathBuf,
    /// A job: `ID:PERIOD_S:SIZE_MIB:MTBF_S:VERSIONS` (repeat the flag).
    #[arg(long = "job", required = true, value_parser = parse_job)]
    jobs: Vec<Job>,
    /// How long to run, seconds.
    #[arg(long, default_value_t = 60.0)]
    duration: f64,
    /// Bytes per write, KiB.
    #[arg(long, default_value_t = 1024)]
    chunk_kib: usize,
    /// Seed of the failures.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

#[derive(Clone, Debug)]
struct Job {
    id: String,
    period: f64,
    size: u64,
    mtbf: f64,
    versions: u32,
}

fn parse_job(s: &str) -> Result<Job, String> {
    let parts: Vec<&str> = s.split(':').collect();
    let [id, period, size, mtbf, versions] = parts[..] else {
        return Err(format!(
            "{s:?}: expected ID:PERIOD_S:SIZE_MIB:MTBF_S:VERSIONS"
        ));
    };
    let num = |v: &str, what: &str| {
        v.parse::<f64>()
            .ok()
            .filter(|x| x.is_finite() && *x > 0.0)
            .ok_or_else(|| format!("{s:?}: {what} must be a number above 0"))
    };
    Ok(Job {
        id: id.to_string(),
        period: num(period, "period")?,
        size: (num(size, "size")? * 1048576.0) as u64,
        mtbf: num(mtbf, "mtbf")?,
        versions: versions
            .parse()
            .ok()
            .filter(|v| *v >= 1)
            .ok_or_else(|| format!("{s:?}: versions must be at least 1"))?,
    })
}

/// xorshift64*.
struct Rng(u64);

impl Rng {
    fn unit(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[derive(Default)]
struct Outcome {
    checkpoints: u64,
    bytes: u64,
    busy_s: f64,
    latencies_s: Vec<f64>,
    restarts: u64,
    restart_s: Vec<f64>,
    errors: Vec<String>,
}

fn write_ckpt(path: &Path, size: u64, chunk: &[u8]) -> std::io::Result<()> {
    let mut f = File::create(path)?;
    let mut left = size;
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        f.write_all(&chunk[..n])?;
        left -= n as u64;
    }
    f.sync_all()
}

fn read_ckpt(path: &Path) -> std::io::Result<u64> {
    let mut f = File::open(path)?;
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0;
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            return Ok(total);
        }
        total += n as u64;
    }
}

fn run_job(dir: &Path, job: &Job, end: Instant, chunk: usize, seed: u64) -> Outcome {
    let mut out = Outcome::default();
    let jdir = dir.join("ckpt").join(&job.id);
    if let Err(e) = std::fs::create_dir_all(&jdir) {
        out.errors.push(format!("mkdir {}: {e}", jdir.display()));
        return out;
    }
    let data: Vec<u8> = (0..chunk).map(|i| (i as u8) ^ (seed as u8)).collect();
    let mut rng = Rng(seed | 1);
    let period = Duration::from_secs_f64(job.period);
    let mut next = Instant::now();
    let mut version = 0u64;
    let mut newest: Option<PathBuf> = None;
    while next < end {
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        }
        version += 1;
        let path = jdir.join(format!("v{version}"));
        let started = Instant::now();
        match write_ckpt(&path, job.size, &data) {
            Ok(()) => {
                let took = started.elapsed().as_secs_f64();
                out.checkpoints += 1;
                out.bytes += job.size;
                out.busy_s += took;
                out.latencies_s.push(took);
                newest = Some(path);
            }
            Err(e) => out.errors.push(format!("write {}: {e}", path.display())),
        }
        if version > u64::from(job.versions) {
            let old = jdir.join(format!("v{}", version - u64::from(job.versions)));
            let _ = std::fs::remove_file(old);
        }
        next = (started + period).max(Instant::now());
        // A failure in this period: restart from the newest checkpoint.
        if rng.unit() < job.period / job.mtbf {
            if let Some(p) = &newest {
                let t = Instant::now();
                match read_ckpt(p) {
                    Ok(_) => {
                        out.restarts += 1;
                        out.restart_s.push(t.elapsed().as_secs_f64());
                    }
                    Err(e) => out.errors.push(format!("restart {}: {e}", p.display())),
                }
            }
        }
    }
    out
}

fn stats(v: &[f64]) -> serde_json::Value {
    if v.is_empty() {
        return serde_json::json!({"n": 0});
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let mean = s.iter().sum::<f64>() / s.len() as f64;
    let p95 = s[((s.len() as f64 * 0.95).ceil() as usize).clamp(1, s.len()) - 1];
    serde_json::json!({"n": s.len(), "mean": mean, "p95": p95, "max": s[s.len() - 1]})
}

fn main() {
    let args = Args::parse();
    let end = Instant::now() + Duration::from_secs_f64(args.duration);
    let chunk = args.chunk_kib.max(4) * 1024;
    let started = Instant::now();
    let handles: Vec<_> = args
        .jobs
        .iter()
        .enumerate()
        .map(|(k, job)| {
            let (dir, job) = (args.dir.clone(), job.clone());
            let seed = args
                .seed
                .wrapping_mul(0x9e37_79b9)
                .wrapping_add(k as u64 + 1);
            std::thread::spawn(move || (job.clone(), run_job(&dir, &job, end, chunk, seed)))
        })
        .collect();
    let mut jobs = Vec::new();
    let mut failed = false;
    for h in handles {
        let (job, o) = h.join().expect("job thread");
        failed |= !o.errors.is_empty();
        jobs.push(serde_json::json!({
            "id": job.id,
            "period_s": job.period,
            "size_bytes": job.size,
            "mtbf_s": job.mtbf,
            "checkpoints": o.checkpoints,
            "bytes": o.bytes,
            "busy_s": o.busy_s,
            "latency_s": stats(&o.latencies_s),
            "restarts": o.restarts,
            "restart_s": stats(&o.restart_s),
            "errors": o.errors,
        }));
    }
    let report = serde_json::json!({
        "elapsed_s": started.elapsed().as_secs_f64(),
        "jobs": jobs,
    });
    println!("{report}");
    if failed {
        std::process::exit(1);
    }
}
