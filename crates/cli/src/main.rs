//! The `sluice` command: parses flags, wires the crates, maps errors to an
//! exit status.

mod ckpt;
mod error;
mod mount;
mod quarantine;
mod sim;
mod xfer;

use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};
use sluice_policy::detector::DetectorConfig;
use sluice_policy::threshold::ThresholdConfig;
use sluice_sim::analyse::{analyse, AnalysisConfig, IorAnalysis, PhaseKind};
use sluice_sim::workload::Arrival;
use sluice_term::log::LogLevel;
use sluice_term::progress::ProgressMode;
use sluice_term::service;
use sluice_workload::{demo, profile};

use crate::error::{Error, Result};

/// sluice — a hybrid-storage I/O layer for HPC (SSDUP+, LiU, BBOS, LADS).
///
/// Run without a subcommand, sluice analyses a generated IOR write trace
/// (the same as `sluice analyse`).
// The analysis flags at the top conflict with a subcommand; clap's
// `args_conflicts_with_subcommands` would refuse the global `--log-level`
// before one too, so `parse` checks it instead.
#[derive(Parser, Debug)]
#[command(name = "sluice", version)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// What the log on stderr shows (default: info). Wins over RUST_LOG,
    /// which may also hold filter directives such as
    /// `sluice_engine=debug,info`.
    #[arg(long, global = true, value_enum, value_name = "LEVEL")]
    log_level: Option<LogLevel>,
    /// Progress of drain, unmount, sim run and xfer send, on stderr: a bar
    /// when stderr is a terminal, else plain lines (auto); plain lines
    /// always (lines); nothing (off).
    #[arg(long, global = true, value_enum, value_name = "HOW", default_value_t)]
    progress: ProgressMode,
    #[command(flatten)]
    analyse: AnalyseArgs,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a generated IOR write trace through the traffic detector and
    /// every redirection policy; print per-stream random percentage,
    /// threshold and routing, and a summary per policy.
    Analyse(AnalyseArgs),
    /// The deterministic simulator: reproduce the papers' experiments.
    #[command(subcommand)]
    Sim(SimCommand),
    /// Mount sluice (FUSE) and serve until unmounted or signalled.
    Mount(MountArgs),
    /// Unmount a sluice mount: drains by default.
    Unmount(UnmountArgs),
    /// Tiers, regions, routing, flushing and errors of a running mount.
    Status(StatusArgs),
    /// A live view of a running mount: each tier's bandwidth, routing,
    /// buffered and flushed bytes, regions, LiU and BBOS, the latest
    /// errors, with sparklines; `q`, Esc or Ctrl-C quits.
    Top(TopArgs),
    /// Flush everything buffered to the capacity tier and wait.
    Drain(MountPointArg),
    /// Write the named files' buffered bytes to the capacity tier, sync
    /// them, and wait (they also stay in the log until it flushes).
    Sync(SyncArgs),
    /// On-demand: seal files (after UnifyFS's lamination). The node that
    /// holds each file starts writing it back at once, in the background,
    /// and removes its held mark when every byte is on the capacity tier;
    /// every node then reads it without a recall. Exits 0 when each file is
    /// being sealed or was held by no node (said so on stdout); 1 for a
    /// path outside a sluice mount, a mount that is not on-demand, what is
    /// not a regular file, or --timeout reached.
    Seal(SealArgs),
    /// The configuration.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// The main job: mount with embedded defaults (capacity tier an
    /// emulated HDD), run sequential and random writers, read back, drain,
    /// verify every byte, unmount; run the same writers on capacity-only,
    /// verify, and print a summary comparing the two.
    Demo(DemoArgs),
    /// Measure a capacity device and recommend LiU's segment sizes: peak
    /// sequential bandwidth B, t80 of 1-byte random reads, throughput per
    /// request size; head = B × t80, body = the knee of the curve.
    Profile(profile::ProfileArgs),
    /// BBOS checkpoint jobs: register, list, unregister.
    #[command(subcommand)]
    Ckpt(ckpt::CkptCommand),
    /// LADS bulk transfer: serve (sink), send (source), keygen.
    #[command(subcommand)]
    Xfer(xfer::XferCommand),
    /// Bytes a recovery did not write back because their file changed on
    /// the capacity tier while the node was down: list, restore, drop.
    #[command(subcommand)]
    Quarantine(quarantine::QuarantineCommand),
}

#[derive(Args, Debug)]
struct MountArgs {
    /// Where to mount (or mount.point in the config).
    mountpoint: Option<std::path::PathBuf>,
    #[command(flatten)]
    config: mount::ConfigArgs,
    /// Return once the mount is up and serve it in the background, logging
    /// to --log-file (the mount helper form's default; see docs/fuse.md).
    #[arg(long)]
    daemon: bool,
    /// Serve in the foreground until unmounted or signalled (the default;
    /// `-f` as FUSE mounts take it).
    #[arg(long, short = 'f', conflicts_with = "daemon")]
    foreground: bool,
    /// With --daemon, the log file (default /var/log/sluice/NAME.log for
    /// root, else ~/.local/state/sluice/NAME.log, NAME the mount point with
    /// `/` as `-`).
    #[arg(long, requires = "daemon", value_name = "FILE")]
    log_file: Option<std::path::PathBuf>,
}

#[derive(Args, Debug)]
struct UnmountArgs {
    /// The mount point.
    mountpoint: std::path::PathBuf,
    /// Leave buffered data in the log (the next mount recovers it).
    #[arg(long, conflicts_with = "drain")]
    keep: bool,
    /// Drain even if the mount was started with --no-drain.
    #[arg(long)]
    drain: bool,
    /// Drain, then detach the mount even if it is busy (MNT_DETACH): files
    /// still open are served until they are closed. Without it a busy
    /// mount (a file open, a working directory inside) is refused and
    /// keeps serving.
    #[arg(long)]
    lazy: bool,
}

#[derive(Args, Debug)]
struct StatusArgs {
    /// The mount point.
    mountpoint: std::path::PathBuf,
    /// Print the JSON snapshot instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
struct TopArgs {
    /// The mount point.
    mountpoint: std::path::PathBuf,
    /// Seconds between two status snapshots (rates are over this time).
    #[arg(long, default_value_t = 1.0, value_parser = sluice_term::top::parse_interval_s)]
    interval: f64,
}

#[derive(Args, Debug)]
struct SyncArgs {
    /// Files inside a sluice mount.
    #[arg(required = true)]
    paths: Vec<std::path::PathBuf>,
}

#[derive(Args, Debug)]
struct SealArgs {
    /// Files inside an on-demand sluice mount.
    #[arg(required = true)]
    paths: Vec<std::path::PathBuf>,
    /// Return once no node holds any of them (their `user.sluice.state`
    /// is `sealed` or `clean`), not as soon as their write-back started.
    /// Ctrl-C stops the wait, not the seal.
    #[arg(long)]
    wait: bool,
    /// With --wait, give up (exit 1) after this many seconds; the seal
    /// goes on.
    #[arg(long, requires = "wait", value_name = "SECONDS")]
    timeout: Option<f64>,
}

#[derive(Args, Debug)]
struct MountPointArg {
    /// The mount point.
    mountpoint: std::path::PathBuf,
}

#[derive(Subcommand, Debug)]
enum ConfigCommand {
    /// Print the normalized config in effect (file, then flags over it).
    Show(mount::ConfigArgs),
    /// Check that the config in effect can mount: the checks `sluice
    /// mount` runs before it writes anything (values in range, tier layout,
    /// the fast tier's directory, lock and log, read-only tiers, the mount
    /// point, the metrics address). Exits non-zero with the error
    /// otherwise; mounts, creates, writes and locks nothing.
    Check(CheckArgs),
}

#[derive(Args, Debug)]
struct CheckArgs {
    /// The mount point to check too (default mount.point in the config;
    /// with neither, the mount point is not checked).
    mountpoint: Option<std::path::PathBuf>,
    #[command(flatten)]
    config: mount::ConfigArgs,
}

#[derive(Args, Debug)]
struct DemoArgs {
    /// Directory for the tiers and the mount point.
    #[arg(long, default_value_os_t = demo::default_dir())]
    dir: std::path::PathBuf,
    /// MiB per sequential writer (random writers write a quarter each).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(4..=65536))]
    mib: u64,
}

#[derive(Subcommand, Debug)]
enum SimCommand {
    /// List the experiments.
    List,
    /// Run one experiment (or `all`): prints its table and writes
    /// DIR/<experiment>.md, .json and PNG plots.
    Run(SimRunArgs),
}

#[derive(Args, Debug)]
struct SimRunArgs {
    /// Experiment name from `sluice sim list`, or `all`.
    experiment: String,
    /// Multiplies every data size (1.0 = the paper's scale, e.g. 16 GB files).
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// Seed of every random choice (same seed, same report).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Directory for the Markdown, JSON and PNG files.
    #[arg(long, default_value = "sluice-out")]
    out: std::path::PathBuf,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum PhaseArg {
    /// All four phases in order.
    All,
    /// Each process writes its segment of a shared file in order.
    SegmentedContiguous,
    /// Iteration i, process j writes block i·n + j.
    Strided,
    /// Each process writes its segment in random order.
    SegmentedRandom,
    /// A segmented-contiguous and a segmented-random instance at once.
    Mixed,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum ArrivalArg {
    /// One request from each process in turn.
    Lockstep,
    /// Random process order, bounded by --max-lead.
    Random,
}

#[derive(Args, Debug, Clone)]
struct AnalyseArgs {
    /// Phases of the trace, in order (repeat the flag for several).
    #[arg(long = "phase", value_enum, default_values_t = [PhaseArg::All])]
    phases: Vec<PhaseArg>,
    /// Processes per IOR instance.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=65536))]
    processes: u32,
    /// Request (IOR transfer) size in KiB.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..=1048576))]
    request_kib: u64,
    /// Bytes written per phase, in MiB.
    #[arg(long, default_value_t = 512, value_parser = clap::value_parser!(u64).range(1..=1048576))]
    phase_mib: u64,
    /// Requests per stream (the paper's CFQ queue depth).
    #[arg(long, default_value_t = 128)]
    stream_len: u32,
    /// How the processes' requests interleave at the server.
    #[arg(long, value_enum, default_value_t = ArrivalArg::Random)]
    arrival: ArrivalArg,
    /// With --arrival random: how many requests a process may run ahead of
    /// the slowest one.
    #[arg(long, default_value_t = 8)]
    max_lead: u64,
    /// Seed of every random choice (same seed, same output).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Pattern-change check: streams looked at (k).
    #[arg(long, default_value_t = ThresholdConfig::default().change_window)]
    change_window: u32,
    /// Pattern-change check: fraction of the window that must deviate (x).
    #[arg(long, default_value_t = ThresholdConfig::default().change_fraction)]
    change_fraction: f64,
    /// Pattern-change check: deviation from the threshold that counts.
    #[arg(long, default_value_t = ThresholdConfig::default().change_margin)]
    change_margin: f64,
    /// Print only the summary, not one line per stream.
    #[arg(long)]
    summary_only: bool,
}

/// The command line, refusing top-level analysis flags together with a
/// subcommand (as clap's `args_conflicts_with_subcommands` would) while
/// `--log-level` may stand anywhere.
fn parse(argv: Vec<std::ffi::OsString>) -> Cli {
    use clap::{CommandFactory, FromArgMatches};
    let mut command = Cli::command();
    let matches = command.clone().get_matches_from(argv);
    if let Some((name, _)) = matches.subcommand() {
        let given = matches.ids().find(|id| {
            !["log_level", "progress"].contains(&id.as_str())
                && matches.value_source(id.as_str()) == Some(clap::parser::ValueSource::CommandLine)
        });
        if let Some(id) = given {
            let flag = command
                .get_arguments()
                .find(|a| a.get_id() == id)
                .and_then(|a| a.get_long())
                .unwrap_or(id.as_str())
                .to_string();
            command
                .error(
                    clap::error::ErrorKind::ArgumentConflict,
                    format!("the subcommand '{name}' cannot be used with '--{flag}'"),
                )
                .exit();
        }
    }
    Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => exit_status(&e),
    }
}

/// The one place an error becomes what the user sees: `sluice: error:`
/// and the message (what failed, on which path or address, what to do) on
/// stderr, and exit status 1. Clap's own refusals of the command line exit
/// with 2 before any command runs.
fn exit_status(e: &Error) -> ExitCode {
    eprintln!("sluice: error: {e}");
    ExitCode::FAILURE
}

fn run() -> Result<()> {
    // `sluice SOURCE MOUNTPOINT -o OPTIONS`, as mount.fuse3 runs it, is
    // read as the `sluice mount` line it stands for.
    let subcommands: Vec<String> = <Cli as clap::CommandFactory>::command()
        .get_subcommands()
        .map(|s| s.get_name().to_string())
        .chain(["help".to_string()])
        .collect();
    let argv = service::command_line(std::env::args_os().collect(), &subcommands)?;
    let cli = parse(argv.clone());
    init_log(cli.log_level)?;
    match cli.command {
        Some(Command::Analyse(args)) => run_analyse(&args),
        Some(Command::Sim(SimCommand::List)) => {
            sim::list();
            Ok(())
        }
        Some(Command::Sim(SimCommand::Run(args))) => sim::run(
            &args.experiment,
            args.scale,
            args.seed,
            &args.out,
            cli.progress,
        ),
        Some(Command::Mount(args)) if args.daemon && !service::is_daemon_child() => {
            mount::mount_daemon(
                &args.config,
                args.mountpoint.as_deref(),
                args.log_file,
                &argv,
            )
        }
        Some(Command::Mount(args)) => {
            service::leave_session_if_daemon_child()?;
            mount::mount(&args.config, args.mountpoint.as_deref())
        }
        Some(Command::Unmount(args)) => sluice_term::client::unmount(
            &args.mountpoint,
            args.keep,
            args.drain,
            args.lazy,
            cli.progress,
        )
        .map_err(Error::Message),
        Some(Command::Status(args)) => mount::status(&args.mountpoint, args.json),
        Some(Command::Top(args)) => sluice_term::top::run(
            &args.mountpoint,
            std::time::Duration::from_secs_f64(args.interval),
        )
        .map_err(Error::Message),
        Some(Command::Drain(args)) => {
            sluice_term::client::drain(&args.mountpoint, cli.progress).map_err(Error::Message)
        }
        Some(Command::Sync(args)) => mount::sync(&args.paths),
        Some(Command::Seal(args)) => mount::seal(&args.paths, args.wait, args.timeout),
        Some(Command::Config(ConfigCommand::Show(args))) => mount::config_show(&args),
        Some(Command::Config(ConfigCommand::Check(args))) => {
            mount::config_check(&args.config, args.mountpoint.as_deref())
        }
        Some(Command::Demo(args)) => demo::demo(&args.dir, args.mib).map_err(Error::Message),
        Some(Command::Profile(args)) => profile::profile(&args).map_err(Error::Message),
        Some(Command::Ckpt(command)) => ckpt::run(&command),
        Some(Command::Xfer(command)) => xfer::run(command, cli.progress),
        Some(Command::Quarantine(command)) => quarantine::run(&command),
        None => run_analyse(&cli.analyse),
    }
}

/// Install the one log subscriber (`sluice_term::log` chooses what it
/// shows): events at or above the chosen level go to stderr, with colours
/// only on a terminal.
fn init_log(flag: Option<LogLevel>) -> Result<()> {
    use std::io::IsTerminal;
    let rust_log = std::env::var("RUST_LOG").ok();
    let filter = sluice_term::log::filter(flag, rust_log.as_deref())?;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init()
        .map_err(|e| Error::Message(format!("setting up the log: {e}")))
}

fn run_analyse(args: &AnalyseArgs) -> Result<()> {
    let config = analysis_config(args)?;
    let analysis = analyse(&config)?;
    let mut out = std::io::stdout().lock();
    sluice_sim::analyse::print_analysis(&mut out, &config, &analysis, !args.summary_only)
        .map_err(Error::stdout)
}

fn analysis_config(args: &AnalyseArgs) -> Result<AnalysisConfig> {
    let mut phases = Vec::new();
    for phase in &args.phases {
        match phase {
            PhaseArg::All => phases.extend(PhaseKind::ALL),
            PhaseArg::SegmentedContiguous => phases.push(PhaseKind::SegmentedContiguous),
            PhaseArg::Strided => phases.push(PhaseKind::Strided),
            PhaseArg::SegmentedRandom => phases.push(PhaseKind::SegmentedRandom),
            PhaseArg::Mixed => phases.push(PhaseKind::Mixed),
        }
    }
    IorAnalysis {
        phases,
        processes: args.processes,
        request_bytes: args.request_kib * 1024,
        phase_bytes: args.phase_mib * 1024 * 1024,
        seed: args.seed,
        arrival: match args.arrival {
            ArrivalArg::Lockstep => Arrival::Lockstep,
            ArrivalArg::Random => Arrival::Random {
                seed: args.seed,
                max_lead: args.max_lead,
            },
        },
        detector: DetectorConfig {
            stream_len: args.stream_len,
        },
        threshold: ThresholdConfig {
            change_window: args.change_window,
            change_fraction: args.change_fraction,
            change_margin: args.change_margin,
            ..ThresholdConfig::default()
        },
    }
    .config()
    .map_err(Error::Analysis)
}
