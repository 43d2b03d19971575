//! `sluice-readers`: the LiU paper's read benchmarks as real processes'
//! threads on real files (any directory: a sluice mount, a plain
//! directory), for `scripts/bench-liu.sh` (docs/liu.md, "Real runs").
//!
//! One case = a target mpi-io-test file, optionally an interferer (a second
//! mpi-io-test, or ior-mpi-io) on its own file, both written first with
//! their own pattern, then `passes` read passes of the target while the
//! interferer reads its file over and over until the target's last pass
//! ends. It prints one JSON object: per pass the target's MB/s and request
//! latencies, and the interferer's MB/s during the pass.
//!
//! Patterns (the simulator's `MpiIoTest` and `IorMpiIo`, `crates/sim`):
//! * mpi-io-test: in iteration `i`, rank `r` reads `request` bytes at
//!   `(i · processes + r) · request`, then all ranks meet at a barrier;
//! * ior-mpi-io: rank `r` reads its contiguous `1/processes` of the file
//!   sequentially in `request`-byte reads.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use sluice_config::ByteSize;
use sluice_policy::FileId;
use sluice_sim::workload::{IorMpiIo, MpiIoTest};

/// Run one case of the LiU read benchmarks in DIR and print JSON.
#[derive(Parser, Debug)]
#[command(name = "sluice-readers", version)]
struct Args {
    /// Directory to create the files in (a sluice mount, or any directory).
    dir: PathBuf,
    /// What interferes with the target mpi-io-test.
    #[arg(long, value_enum, default_value = "none")]
    interferer: Interferer,
    /// Bytes of each file (rounded down to a multiple of processes ×
    /// request), with a unit: 256MiB, 1GiB.
    #[arg(long, default_value = "256MiB", value_parser = parse_size)]
    bytes: u64,
    /// Bytes of the interferer's file (default: --bytes). A file much larger
    /// than a cache keeps the looping interferer from being served by it.
    #[arg(long, value_parser = parse_size)]
    interferer_bytes: Option<u64>,
    /// Write the files here instead of in DIR (the capacity tier's
    /// directory under a mount that serves it at DIR): reads then find a
    /// cold cache that learned nothing from the writes.
    #[arg(long)]
    prepare_in: Option<PathBuf>,
    /// Processes (threads) per benchmark.
    #[arg(long, default_value_t = 14)]
    processes: u32,
    /// Bytes per request.
    #[arg(long, default_value = "64KiB", value_parser = parse_size)]
    request: u64,
    /// Read passes of the target after the write (the last is the
    /// measured one; earlier ones let a cache learn).
    #[arg(long, default_value_t = 2)]
    passes: u32,
    /// Run this command (split on spaces) between the writes and the
    /// reads, e.g. `sluice drain MNT`.
    #[arg(long)]
    between: Option<String>,
    /// Run this command (split on spaces, `{pass}` replaced by the pass
    /// number from 1) after each read pass of the target, while the
    /// interferer goes on, e.g. `sh -c 'sluice status --json MNT >
    /// pass-{pass}.json'`: counters per pass. Not part of any pass's time.
    #[arg(long)]
    after_pass: Option<String>,
    /// Run an mpi-io-test interferer without its barrier per iteration, so
    /// its ranks drift apart (what `scripts/bench-liu.sh` ran before issue
    /// 38; the paper's mpi-io-test has the barrier).
    #[arg(long)]
    interferer_without_barriers: bool,
}

/// Run `cmd` split on spaces (a word `'…'` quoted with single quotes is
/// kept whole), with `{pass}` replaced by `pass`.
fn run_command(cmd: &str, pass: u32) -> Result<(), String> {
    let cmd = cmd.replace("{pass}", &pass.to_string());
    let mut words = Vec::new();
    let mut rest = cmd.trim();
    while !rest.is_empty() {
        let (word, next) = match rest.strip_prefix('\'') {
            Some(quoted) => quoted.split_once('\'').unwrap_or((quoted, "")),
            None => rest.split_once(char::is_whitespace).unwrap_or((rest, "")),
        };
        words.push(word.to_string());
        rest = next.trim_start();
    }
    let (program, args) = words.split_first().ok_or("the command is empty")?;
    let status = std::process::Command::new(program)
        .args(args)
        .status()
        .map_err(|e| format!("{cmd}: {e}"))?;
    if !status.success() {
        return Err(format!("{cmd}: {status}"));
    }
    Ok(())
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Interferer {
    None,
    MpiIoTest,
    IorMpiIo,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pattern {
    MpiIoTest,
    IorMpiIo,
}

/// A size in the config's units (`64KiB`, `256MiB`, `1GiB`; docs/config.md),
/// above 0.
fn parse_size(text: &str) -> Result<u64, String> {
    match text.parse::<ByteSize>()? {
        ByteSize(0) => Err(format!("{text:?}: must be above 0")),
        ByteSize(n) => Ok(n),
    }
}

/// The offsets rank `rank` reads, in order: the simulator's patterns.
fn offsets(pattern: Pattern, bytes: u64, processes: u32, request: u64, rank: u32) -> Vec<u64> {
    let file = FileId(0);
    let rank = u64::from(rank);
    match pattern {
        Pattern::MpiIoTest => MpiIoTest {
            file,
            processes,
            chunk_bytes: request,
            iterations: bytes / u64::from(processes) / request,
        }
        .offsets(rank)
        .collect(),
        Pattern::IorMpiIo => IorMpiIo {
            file,
            processes,
            request_bytes: request,
            file_bytes: bytes,
        }
        .offsets(rank)
        .collect(),
    }
}

struct Pass {
    bytes: u64,
    seconds: f64,
    latencies_us: Vec<u64>,
}

/// File size, ranks and request size of a benchmark.
#[derive(Clone, Copy)]
struct Shape {
    bytes: u64,
    processes: u32,
    request: u64,
}

/// One pass of `pattern` over `path`, reading (`write` false) or writing;
/// with `until`, repeated until it is set. mpi-io-test's ranks meet at a
/// barrier after each request unless `barriers` is off; when repeating,
/// the rank the barrier elects reads `until` and a second barrier hands
/// its answer to every rank, so all stop after the same iteration (none is
/// left waiting). Bytes moved are added to `moved`.
fn run(
    path: &Path,
    pattern: Pattern,
    shape: Shape,
    write: bool,
    until: Option<&AtomicBool>,
    barriers: bool,
    moved: &AtomicU64,
) -> std::io::Result<Pass> {
    let Shape {
        bytes,
        processes,
        request,
    } = shape;
    let file = Arc::new(if write {
        OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .open(path)?
    } else {
        File::open(path)?
    });
    let barrier = Barrier::new(processes as usize);
    let barriers = barriers && pattern == Pattern::MpiIoTest;
    let stopping = AtomicBool::new(false);
    let start = Instant::now();
    let latencies = std::thread::scope(|s| -> std::io::Result<Vec<u64>> {
        let handles: Vec<_> = (0..processes)
            .map(|rank| {
                let (file, barrier, stopping) = (&file, &barrier, &stopping);
                s.spawn(move || -> std::io::Result<Vec<u64>> {
                    let mut buf = vec![0u8; request as usize];
                    let mut latencies = Vec::new();
                    let offsets = offsets(pattern, bytes, processes, request, rank);
                    loop {
                        for &offset in &offsets {
                            let t = Instant::now();
                            if write {
                                fill(&mut buf, offset);
                                file.write_all_at(&buf, offset)?;
                            } else {
                                file.read_exact_at(&mut buf, offset)?;
                                check(&buf, offset, path)?;
                            }
                            latencies.push(t.elapsed().as_micros() as u64);
                            moved.fetch_add(request, Ordering::Relaxed);
                            match until {
                                None if barriers => {
                                    barrier.wait();
                                }
                                Some(u) if barriers => {
                                    if barrier.wait().is_leader() {
                                        stopping
                                            .store(u.load(Ordering::Relaxed), Ordering::Relaxed);
                                    }
                                    barrier.wait();
                                    if stopping.load(Ordering::Relaxed) {
                                        return Ok(latencies);
                                    }
                                }
                                Some(u) if u.load(Ordering::Relaxed) => return Ok(latencies),
                                _ => {}
                            }
                        }
                        let stop = match until {
                            None => true,
                            Some(_) if barriers => stopping.load(Ordering::Relaxed),
                            Some(u) => u.load(Ordering::Relaxed),
                        };
                        if stop {
                            return Ok(latencies);
                        }
                    }
                })
            })
            .collect();
        let mut all = Vec::new();
        for h in handles {
            all.extend(
                h.join()
                    .map_err(|_| std::io::Error::other("a rank panicked"))??,
            );
        }
        Ok(all)
    })?;
    if write {
        file.sync_all()?;
    }
    Ok(Pass {
        bytes: moved.load(Ordering::Relaxed),
        seconds: start.elapsed().as_secs_f64(),
        latencies_us: latencies,
    })
}

/// The bytes written at `offset`: the offset, then a byte derived from it.
fn fill(buf: &mut [u8], offset: u64) {
    buf.fill((offset / 4096 % 251) as u8 + 1);
    let n = buf.len().min(8);
    buf[..n].copy_from_slice(&offset.to_le_bytes()[..n]);
}

/// Every read is checked against [`fill`]: a fast wrong answer is an
/// error, not a throughput.
fn check(buf: &[u8], offset: u64, path: &Path) -> std::io::Result<()> {
    let mut want = vec![0u8; buf.len()];
    fill(&mut want, offset);
    if buf != want.as_slice() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "{}: wrong bytes read at offset {offset} (found the block of offset {})",
                path.display(),
                u64::from_le_bytes(buf[..8.min(buf.len())].try_into().unwrap_or([0; 8]))
            ),
        ));
    }
    Ok(())
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    let args = Args::parse();
    if let Err(e) = bench(&args) {
        eprintln!("sluice-readers: {e}");
        std::process::exit(1);
    }
}

fn bench(args: &Args) -> Result<(), String> {
    let unit = u64::from(args.processes) * args.request;
    if args.processes == 0 || args.passes == 0 || args.bytes < unit {
        return Err(format!(
            "need processes ≥ 1, passes ≥ 1 and bytes ≥ processes × request ({unit})"
        ));
    }
    let bytes = args.bytes / unit * unit;
    let other_bytes = args.interferer_bytes.unwrap_or(args.bytes) / unit * unit;
    if other_bytes == 0 {
        return Err(format!(
            "--interferer-bytes must be ≥ processes × request ({unit})"
        ));
    }
    let target = args.dir.join("target");
    let other = args.dir.join("interferer");
    let write_dir = args.prepare_in.as_ref().unwrap_or(&args.dir);
    let interferer = match args.interferer {
        Interferer::None => None,
        Interferer::MpiIoTest => Some(Pattern::MpiIoTest),
        Interferer::IorMpiIo => Some(Pattern::IorMpiIo),
    };
    let io = |what: &str, e: std::io::Error| format!("{what}: {e}");
    let counter = AtomicU64::new(0);
    let (p, r) = (args.processes, args.request);
    let shape = Shape {
        bytes,
        processes: p,
        request: r,
    };
    let other_shape = Shape {
        bytes: other_bytes,
        ..shape
    };
    let written = run(
        &write_dir.join("target"),
        Pattern::MpiIoTest,
        shape,
        true,
        None,
        true,
        &counter,
    )
    .map_err(|e| io("write target", e))?;
    if let Some(pattern) = interferer {
        run(
            &write_dir.join("interferer"),
            pattern,
            other_shape,
            true,
            None,
            true,
            &AtomicU64::new(0),
        )
        .map_err(|e| io("write interferer", e))?;
    }
    if let Some(cmd) = &args.between {
        let mut words = cmd.split_whitespace();
        let program = words.next().ok_or("--between is empty")?;
        let status = std::process::Command::new(program)
            .args(words)
            .status()
            .map_err(|e| io(cmd, e))?;
        if !status.success() {
            return Err(format!("{cmd}: {status}"));
        }
    }
    let stop = AtomicBool::new(false);
    let interfered = AtomicU64::new(0);
    let mut passes = Vec::new();
    std::thread::scope(|s| -> Result<(), String> {
        let background = interferer.map(|pattern| {
            let (other, stop, interfered) = (&other, &stop, &interfered);
            let barriers = !args.interferer_without_barriers;
            s.spawn(move || {
                run(
                    other,
                    pattern,
                    other_shape,
                    false,
                    Some(stop),
                    barriers,
                    interfered,
                )
            })
        });
        // Let the interferer's ranks get going first.
        if background.is_some() {
            std::thread::sleep(Duration::from_millis(200));
        }
        let mut result = Ok(());
        for number in 1..=args.passes {
            let before = interfered.load(Ordering::Relaxed);
            let pass = run(
                &target,
                Pattern::MpiIoTest,
                shape,
                false,
                None,
                true,
                &AtomicU64::new(0),
            );
            let during = interfered.load(Ordering::Relaxed) - before;
            match pass {
                Ok(pass) => passes.push((pass, during)),
                Err(e) => {
                    result = Err(io("read target", e));
                    break;
                }
            }
            if let Some(cmd) = &args.after_pass {
                if let Err(e) = run_command(cmd, number) {
                    result = Err(e);
                    break;
                }
            }
        }
        stop.store(true, Ordering::Relaxed);
        if let Some(h) = background {
            h.join()
                .map_err(|_| "the interferer panicked".to_string())?
                .map_err(|e| io("read interferer", e))?;
        }
        result
    })?;
    let mb = |bytes: u64, s: f64| bytes as f64 / 1e6 / s.max(1e-9);
    let rendered: Vec<serde_json::Value> = passes
        .into_iter()
        .map(|(mut pass, during)| {
            pass.latencies_us.sort_unstable();
            let n = pass.latencies_us.len().max(1) as f64;
            serde_json::json!({
                "target_mb_s": mb(pass.bytes, pass.seconds),
                "seconds": pass.seconds,
                "latency_ms_mean": pass.latencies_us.iter().sum::<u64>() as f64 / n / 1e3,
                "latency_ms_p80": percentile(&pass.latencies_us, 0.8) as f64 / 1e3,
                "latency_ms_p99": percentile(&pass.latencies_us, 0.99) as f64 / 1e3,
                "interferer_mb_s": mb(during, pass.seconds),
            })
        })
        .collect();
    let out = serde_json::json!({
        "interferer": format!("{:?}", args.interferer),
        "file_bytes": bytes,
        "interferer_file_bytes": other_bytes,
        "written_through": args.prepare_in.is_none(),
        "interferer_barriers": !args.interferer_without_barriers,
        "processes": p,
        "request_bytes": r,
        "write_mb_s": mb(written.bytes, written.seconds),
        "passes": rendered,
    });
    println!("{out}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_cover_the_file_once() {
        for pattern in [Pattern::MpiIoTest, Pattern::IorMpiIo] {
            let mut all: Vec<u64> = (0..4)
                .flat_map(|rank| offsets(pattern, 64, 4, 2, rank))
                .collect();
            all.sort_unstable();
            assert_eq!(all, (0..32).map(|i| i * 2).collect::<Vec<_>>());
        }
        assert_eq!(offsets(Pattern::MpiIoTest, 64, 4, 2, 1)[..2], [2, 10]);
        assert_eq!(offsets(Pattern::IorMpiIo, 64, 4, 2, 1)[..2], [16, 18]);
    }

    #[test]
    fn a_command_after_a_pass_gets_its_number_and_keeps_quoted_words() {
        let dir = std::env::temp_dir().join(format!("sluice-readers-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join("pass-{pass}.txt");
        let cmd = format!("sh -c 'echo hello > {}'", out.display());
        run_command(&cmd, 3).unwrap();
        let written = std::fs::read_to_string(dir.join("pass-3.txt")).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(written, "hello\n");
        assert!(run_command("false", 1).is_err());
        assert!(run_command("  ", 1).is_err());
    }

    #[test]
    fn sizes_parse_with_units() {
        assert_eq!(parse_size("64KiB"), Ok(64 << 10));
        assert_eq!(parse_size("3GiB"), Ok(3 << 30));
        assert!(parse_size("0").is_err());
        assert!(parse_size("12 parsecs").is_err());
    }
}
