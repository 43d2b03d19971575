//! `sluice xfer serve | send | copy | keygen`: the LADS bulk transfer tool
//! (crates/xfer; docs/lads.md).

use std::path::PathBuf;
use std::sync::Arc;

use clap::{Args, Subcommand, ValueEnum};
use sluice_config::{ByteSize, Span};
use sluice_policy::lads::{Mode, SchedulerConfig};
use sluice_xfer::copy::CopyOptions;
use sluice_xfer::layout::pfs::{self, EmulatedPfs, PfsConfig};
use sluice_xfer::layout::posix::PosixLayout;
use sluice_xfer::layout::{self, LayoutProvider};
use sluice_xfer::sink::{Sink, SinkOptions};
use sluice_xfer::source::{self, Compare, Destination, SendOptions};
use sluice_xfer::tls;

use sluice_term::progress::ProgressMode;

use crate::error::{Error, Result};

/// `sluice xfer ...`.
#[derive(Subcommand, Debug)]
pub enum XferCommand {
    /// Receive transfers into a directory (the sink).
    Serve(ServeArgs),
    /// Send files and directories to a sink (the source).
    Send(Box<SendArgs>),
    /// Copy files and directories between two local directories, in
    /// parallel by object and storage target, without the network.
    Copy(Box<CopyArgs>),
    /// Make a self-signed certificate and key (NAME.crt, NAME.key).
    Keygen(KeygenArgs),
}

/// `sluice xfer serve`.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Directory every received file lands under.
    #[arg(long)]
    root: PathBuf,
    /// Address to listen on, e.g. 127.0.0.1:7300.
    #[arg(long)]
    listen: String,
    /// The sink's certificate (PEM).
    #[arg(long)]
    cert: PathBuf,
    /// The sink's private key (PEM).
    #[arg(long)]
    key: PathBuf,
    /// File holding the shared token sources must present.
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// Require client certificates issued by (or equal to) these (PEM).
    #[arg(long)]
    client_ca: Option<PathBuf>,
    /// Do not fsync files and directories before and after their rename
    /// (rsync's default): faster, but a crash of this machine can leave a
    /// received file under its final name with bytes missing.
    #[arg(long)]
    no_fsync: bool,
    /// Write received blocks through the page cache even though each file
    /// is synced before its rename (by default aligned blocks go straight
    /// to the disk with O_DIRECT, as the sync would send them anyway; a
    /// file system that refuses O_DIRECT is written through the cache).
    #[arg(long, conflicts_with = "no_fsync")]
    buffered: bool,
}

/// Scheduling mode on the command line.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum ModeArg {
    /// Whole files in order (the bbcp model).
    File,
    /// Per-target queues, round-robin, skip busy targets.
    Rr,
    /// Round-robin and skip congested targets (LADS).
    Ca,
}

/// Layout provider on the command line.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum LayoutArg {
    /// Detect from the file system (Lustre, CephFS, GlusterFS, else POSIX).
    Auto,
    /// One target per device.
    Posix,
    /// The emulated striped PFS (`--pfs-*`).
    Pfs,
    /// GlusterFS (`trusted.glusterfs.pathinfo`).
    Gluster,
    /// Lustre (`lfs getstripe`).
    Lustre,
    /// CephFS (`ceph.file.layout`).
    Ceph,
}

/// Scheduling flags of `send` and `copy`.
#[derive(Args, Debug)]
pub struct ScheduleArgs {
    /// Scheduling mode.
    #[arg(long, value_enum, default_value_t = ModeArg::Ca)]
    mode: ModeArg,
    /// Congestion window W.
    #[arg(long, default_value = "1s")]
    window: Span,
    /// Congestion threshold T (mean object service time).
    #[arg(long, default_value = "50ms")]
    threshold: Span,
    /// Skips M of a congested target.
    #[arg(long, default_value_t = 8)]
    skips: u32,
    /// Threads allowed on one target at once (default: 1, the paper's
    /// skip-busy, on a parallel file system; all threads on a POSIX device,
    /// which has its own queue).
    #[arg(long)]
    target_depth: Option<u32>,
    /// Object size for layouts without one (POSIX): a big file is cut into
    /// objects of this size, read, sent and written in parallel.
    #[arg(long, default_value = "1MiB")]
    object_size: ByteSize,
    /// Files open at once (1 to 65536).
    #[arg(long, default_value_t = 64,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=65_536))]
    files_in_flight: usize,
}

/// Rerun and resume flags of `send` and `copy`.
#[derive(Args, Debug)]
pub struct RerunArgs {
    /// Decide that a destination file is unchanged by size and crc32c
    /// (reading both copies) instead of size and mtime.
    #[arg(long, short = 'c', conflicts_with = "ignore_times")]
    checksum: bool,
    /// Copy every file, even those the destination holds with the same
    /// size and mtime.
    #[arg(long, short = 'I')]
    ignore_times: bool,
    /// Skip symbolic links (counted in the summary) instead of recreating
    /// them as links at the destination.
    #[arg(long)]
    no_links: bool,
    /// Resume journal (default under ~/.local/state/sluice/xfer).
    #[arg(long, conflicts_with = "no_journal")]
    journal: Option<PathBuf>,
    /// Keep no journal (a rerun copies every file not yet in place).
    #[arg(long)]
    no_journal: bool,
    /// Print the summary as JSON on stdout.
    #[arg(long)]
    json: bool,
}

/// Layout flags of `send` and `copy`: where the sources' objects live.
#[derive(Args, Debug)]
pub struct LayoutArgs {
    /// Layout provider.
    #[arg(long, value_enum, default_value_t = LayoutArg::Auto)]
    layout: LayoutArg,
    /// Emulated PFS: targets.
    #[arg(long, default_value_t = 16)]
    pfs_targets: u32,
    /// Emulated PFS: stripe count.
    #[arg(long, default_value_t = 1)]
    pfs_stripe: u32,
    /// Emulated PFS: congested targets, e.g. 0,1,2 or 0-3.
    #[arg(long, default_value = "")]
    pfs_congested: String,
    /// Emulated PFS: service-time factor while congested.
    #[arg(long, default_value_t = 8.0)]
    pfs_factor: f64,
    /// Emulated PFS: congested phase.
    #[arg(long, default_value = "5s")]
    pfs_on: Span,
    /// Emulated PFS: quiet phase (0s: always congested).
    #[arg(long, default_value = "0s")]
    pfs_off: Span,
    /// Emulated PFS: targets the congested set moves by each period.
    #[arg(long, default_value_t = 0)]
    pfs_rotate: u32,
}

/// `sluice xfer send`.
#[derive(Args, Debug)]
pub struct SendArgs {
    /// Files and directories to send, then the destination
    /// `sluice://HOST:PORT/DEST`.
    #[arg(required = true, num_args = 2..)]
    paths: Vec<String>,
    /// Certificates to trust for the sink (PEM; its keygen .crt).
    #[arg(long)]
    ca: PathBuf,
    /// File holding the sink's token.
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// Our certificate, for mutual TLS.
    #[arg(long, requires = "key")]
    cert: Option<PathBuf>,
    /// Our private key, for mutual TLS.
    #[arg(long, requires = "cert")]
    key: Option<PathBuf>,
    /// I/O threads (1 to 1024).
    #[arg(long, default_value_t = 8,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1024))]
    threads: usize,
    /// TCP connections (1 to 64): a big file's objects travel on all of
    /// them at once (4 moved the big set 15% faster than 2 on 2 CPUs;
    /// docs/lads.md, "Line rate").
    #[arg(long, default_value_t = 4,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=64))]
    connections: usize,
    #[command(flatten)]
    schedule: ScheduleArgs,
    /// In-memory send buffer: objects read and not yet acknowledged by
    /// the sink (at most 4 per connection wait to be sent; the rest are in
    /// flight).
    #[arg(long, default_value = "256MiB")]
    buffer: ByteSize,
    /// Spill directory on the fast tier, used when the buffer is full.
    #[arg(long)]
    spill: Option<PathBuf>,
    /// Spill buffer size.
    #[arg(long, default_value = "1GiB")]
    spill_size: ByteSize,
    #[command(flatten)]
    rerun: RerunArgs,
    #[command(flatten)]
    layout: LayoutArgs,
}

/// `sluice xfer copy`.
#[derive(Args, Debug)]
pub struct CopyArgs {
    /// Files and directories to copy, then the directory DEST they land
    /// under by their names (made if missing), as `cp -a SRC... DEST/`.
    #[arg(required = true, num_args = 2..)]
    paths: Vec<PathBuf>,
    /// Worker threads, each reading, checksumming and writing one object
    /// at a time (1 to 1024).
    #[arg(long, default_value_t = 8,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1024))]
    threads: usize,
    #[command(flatten)]
    schedule: ScheduleArgs,
    /// Do not sync files and directories before and after their rename
    /// (cp's and rsync's durability; writes then go through the page
    /// cache): faster on a slow disk, but a crash of this machine can leave
    /// a file under its final name with bytes missing.
    #[arg(long)]
    no_fsync: bool,
    /// Read every file back from the device after its sync and compare its
    /// crc32c with the source's before putting it in place (by default the
    /// crcs of the objects as read are combined and checked).
    #[arg(long)]
    verify: bool,
    #[command(flatten)]
    rerun: RerunArgs,
    #[command(flatten)]
    layout: LayoutArgs,
}

/// `sluice xfer keygen`.
#[derive(Args, Debug)]
pub struct KeygenArgs {
    /// Directory for NAME.crt and NAME.key.
    #[arg(long)]
    out: PathBuf,
    /// File name stem.
    #[arg(long, default_value = "sluice")]
    name: String,
    /// Host names and addresses the certificate is valid for.
    #[arg(long = "host", default_values_t = ["127.0.0.1".to_owned(), "localhost".to_owned()])]
    hosts: Vec<String>,
}

/// Run a `sluice xfer` command; `mode`: how `send` shows its progress.
pub fn run(command: XferCommand, mode: ProgressMode) -> Result<()> {
    match command {
        XferCommand::Serve(a) => serve(&a),
        XferCommand::Send(a) => send(&a, mode),
        XferCommand::Copy(a) => copy(&a, mode),
        XferCommand::Keygen(a) => {
            let (crt, key) = tls::keygen(&a.out, &a.name, &a.hosts).map_err(Error::Xfer)?;
            println!("{}\n{}", crt.display(), key.display());
            Ok(())
        }
    }
}

fn serve(a: &ServeArgs) -> Result<()> {
    let token = a
        .token_file
        .as_deref()
        .map(tls::read_token)
        .transpose()
        .map_err(Error::Xfer)?;
    let tls = tls::server_config(&a.cert, &a.key, a.client_ca.as_deref()).map_err(Error::Xfer)?;
    let sink = Sink::bind(
        &a.listen,
        SinkOptions {
            root: a.root.clone(),
            tls,
            token,
            mutual_tls: a.client_ca.is_some(),
            fsync: !a.no_fsync,
            direct: !a.buffered,
        },
    )
    .map_err(Error::Xfer)?;
    let addr = sink.local_addr().map_err(Error::Xfer)?;
    tracing::info!("sluice xfer: serving {} on {addr}", a.root.display());
    sink.run();
    Ok(())
}

fn provider(
    a: &LayoutArgs,
    object: u64,
    first_source: &std::path::Path,
) -> Result<Arc<dyn LayoutProvider>> {
    Ok(match a.layout {
        LayoutArg::Posix => Arc::new(PosixLayout::new(object)),
        LayoutArg::Pfs => Arc::new(
            EmulatedPfs::new(PfsConfig {
                targets: a.pfs_targets,
                stripe_count: a.pfs_stripe,
                object_size: object,
                congested: pfs::parse_targets(&a.pfs_congested).map_err(Error::Xfer)?,
                factor: a.pfs_factor,
                on: a.pfs_on.0,
                off: a.pfs_off.0,
                rotate: a.pfs_rotate,
                ..PfsConfig::default()
            })
            .map_err(Error::Xfer)?,
        ),
        LayoutArg::Gluster => {
            Arc::new(layout::gluster::GlusterLayout::with_object_size(object).map_err(Error::Xfer)?)
        }
        LayoutArg::Lustre => Arc::new(layout::lustre::LustreLayout::new()),
        LayoutArg::Ceph => Arc::new(layout::ceph::CephLayout::new()),
        LayoutArg::Auto => layout::detect(first_source, object).map_err(Error::Xfer)?,
    })
}

/// The scheduler settings for `layout` and `threads`.
fn scheduler(a: &ScheduleArgs, layout: &dyn LayoutProvider, threads: usize) -> SchedulerConfig {
    SchedulerConfig {
        mode: match a.mode {
            ModeArg::File => Mode::FileAtATime,
            ModeArg::Rr => Mode::RoundRobin,
            ModeArg::Ca => Mode::CongestionAware,
        },
        window: a.window.0,
        threshold: a.threshold.0,
        skips: a.skips,
        target_depth: a
            .target_depth
            .unwrap_or_else(|| layout.default_depth(u32::try_from(threads).unwrap_or(u32::MAX))),
    }
}

fn compare(a: &RerunArgs) -> Compare {
    if a.ignore_times {
        Compare::Never
    } else if a.checksum {
        Compare::Checksum
    } else {
        Compare::SizeAndMtime
    }
}

/// Print the summary (text or JSON); a closed stdout (`| head`) must not
/// turn a finished transfer into a panic.
fn print_summary(summary: &source::Summary, json: bool) -> Result<()> {
    let text = if json {
        serde_json::to_string_pretty(summary)? + "\n"
    } else {
        summary.to_string()
    };
    let _ = std::io::Write::write_all(&mut std::io::stdout(), text.as_bytes());
    Ok(())
}

fn check_object_size(a: &ScheduleArgs) -> Result<()> {
    if a.object_size.0 == 0 {
        return Err(Error::Usage(
            "--object-size 0B refused: objects must be at least 1 byte (default 1MiB)".into(),
        ));
    }
    Ok(())
}

fn send(a: &SendArgs, progress: ProgressMode) -> Result<()> {
    check_object_size(&a.schedule)?;
    if a.buffer.0 == 0 {
        return Err(Error::Usage(
            "--buffer 0B refused: the send buffer must hold at least one object".into(),
        ));
    }
    let (dest, sources) = a.paths.split_last().expect("clap requires two");
    let destination: Destination = dest.parse().map_err(Error::Usage)?;
    let sources: Vec<PathBuf> = sources.iter().map(PathBuf::from).collect();
    let token = a
        .token_file
        .as_deref()
        .map(tls::read_token)
        .transpose()
        .map_err(Error::Xfer)?
        .unwrap_or_default();
    let identity = a.cert.as_deref().zip(a.key.as_deref());
    if token.is_empty() && identity.is_none() {
        return Err(Error::Usage(
            "give --token-file or --cert/--key: the sink refuses unauthenticated sources".into(),
        ));
    }
    let tls = tls::client_config(&a.ca, identity).map_err(Error::Xfer)?;
    let journal = match (&a.rerun.journal, a.rerun.no_journal) {
        (_, true) => None,
        (Some(p), false) => Some(p.clone()),
        (None, false) => source::default_journal(&destination, &sources),
    };
    let layout = provider(&a.layout, a.schedule.object_size.0, &sources[0])?;
    let summary = source::send(SendOptions {
        scheduler: scheduler(&a.schedule, layout.as_ref(), a.threads),
        layout,
        sources,
        destination,
        tls,
        token,
        threads: a.threads,
        connections: a.connections,
        slot_size: a.schedule.object_size.0,
        buffer: a.buffer.0,
        spill: a.spill.clone().map(|d| (d, a.spill_size.0)),
        journal,
        files_in_flight: a.schedule.files_in_flight,
        progress: sluice_term::progress::xfer_send(progress),
        compare: compare(&a.rerun),
        links: !a.rerun.no_links,
    })
    .map_err(Error::Xfer)?;
    print_summary(&summary, a.rerun.json)?;
    match (summary.failed.len(), summary.changed.len()) {
        (0, 0) => Ok(()),
        (failed, changed) => Err(Error::XferIncomplete { failed, changed }),
    }
}

fn copy(a: &CopyArgs, progress: ProgressMode) -> Result<()> {
    check_object_size(&a.schedule)?;
    let (dest, sources) = a.paths.split_last().expect("clap requires two");
    let journal = match (&a.rerun.journal, a.rerun.no_journal) {
        (_, true) => None,
        (Some(p), false) => Some(p.clone()),
        (None, false) => sluice_xfer::copy::default_journal(dest, sources),
    };
    let layout = provider(&a.layout, a.schedule.object_size.0, &sources[0])?;
    let summary = sluice_xfer::copy::copy(CopyOptions {
        scheduler: scheduler(&a.schedule, layout.as_ref(), a.threads),
        layout,
        sources: sources.to_vec(),
        destination: dest.clone(),
        threads: a.threads,
        journal,
        files_in_flight: a.schedule.files_in_flight,
        compare: compare(&a.rerun),
        links: !a.rerun.no_links,
        fsync: !a.no_fsync,
        verify: a.verify,
        progress: sluice_term::progress::xfer_send(progress),
    })
    .map_err(Error::Xfer)?;
    print_summary(&summary, a.rerun.json)?;
    match (summary.failed.len(), summary.changed.len()) {
        (0, 0) => Ok(()),
        (failed, changed) => Err(Error::Xfer(std::io::Error::other(format!(
            "{failed} entries failed and {changed} files changed while they were copied \
             (not put in place); rerun to copy them"
        )))),
    }
}
