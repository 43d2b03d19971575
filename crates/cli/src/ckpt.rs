//! `sluice ckpt register | list | unregister`: BBOS's jobs in the
//! catalogue, through a running mount (`--mount`, takes effect at once) or
//! straight into the store (`--meta`, or the config's catalogue) when no
//! mount has it open.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use sluice_catalog::{Catalog, CatalogError, Failure, JobSpec, MetaSpec};
use sluice_config::{ByteSize, Span};
use sluice_daemon::control_request;

use crate::error::{Error, Result};
use crate::mount::ConfigArgs;

/// `sluice ckpt ...`.
#[derive(Subcommand, Debug)]
pub enum CkptCommand {
    /// Register (or replace) a checkpointing job.
    Register(RegisterArgs),
    /// List the registered jobs.
    List(ListArgs),
    /// Remove a job (its files stay; new ones are ordinary files).
    Unregister(UnregisterArgs),
}

/// Which catalogue: a running mount's, or a store.
#[derive(Args, Debug, Clone, Default)]
pub struct Target {
    /// A running sluice mount: the change takes effect at once. Without
    /// it the store is opened directly: `--meta SPEC`, or the config's
    /// catalogue (FAST/catalog.redb), which no mount may have open.
    #[arg(long)]
    mount: Option<PathBuf>,
    #[command(flatten)]
    config: ConfigArgs,
}

/// `sluice ckpt register`.
#[derive(Args, Debug)]
pub struct RegisterArgs {
    /// Job id (unique).
    #[arg(long)]
    id: String,
    /// Checkpoint period, e.g. `600s` or `10min`.
    #[arg(long)]
    period: Span,
    /// Size of one checkpoint, e.g. `64GiB`.
    #[arg(long)]
    size: ByteSize,
    /// Nodes the job runs on (its failure rate is nodes / bbos.node_mtbf).
    #[arg(long, conflicts_with = "mtbf", required_unless_present = "mtbf")]
    nodes: Option<u32>,
    /// The job's own mean time between failures, e.g. `24h`.
    #[arg(long)]
    mtbf: Option<Span>,
    /// Checkpoint versions kept on the fast tier.
    #[arg(long, default_value_t = 2)]
    versions: u32,
    /// Glob of the job's checkpoint files, relative to the mount
    /// (`*` and `?` within a component, `**` across).
    #[arg(long)]
    glob: String,
    /// Files in one checkpoint (one per rank for N-N checkpoints): the next
    /// this many new files of the job are one version (closed early half a
    /// period after the first).
    #[arg(long, default_value_t = 1)]
    files: u32,
    #[command(flatten)]
    target: Target,
}

/// `sluice ckpt list`.
#[derive(Args, Debug)]
pub struct ListArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    target: Target,
}

/// `sluice ckpt unregister`.
#[derive(Args, Debug)]
pub struct UnregisterArgs {
    /// Job id.
    id: String,
    #[command(flatten)]
    target: Target,
}

impl Target {
    fn store(&self) -> Result<Box<dyn Catalog>> {
        let spec: MetaSpec = self.config.resolve()?.meta_spec()?.ok_or_else(|| {
            Error::Usage(
                "no catalogue: give --mount MNT, --meta SPEC, or --fast DIR (or a config) \
                 for FAST/catalog.redb"
                    .to_string(),
            )
        })?;
        if let MetaSpec::Redb { path } = &spec {
            if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                std::fs::create_dir_all(parent).map_err(Error::path(parent))?;
            }
        }
        Ok(sluice_catalog::open(&spec)?)
    }

    fn request(&self, line: &str) -> Option<Result<String>> {
        self.mount
            .as_ref()
            .map(|m| control_request(m, line).map_err(Error::Mount))
    }
}

/// A job's error with its field named by the flag that sets it.
fn in_flags(e: CatalogError) -> Error {
    match &e {
        CatalogError::Invalid { field, reason, .. } => {
            let flag = match *field {
                "id" => "--id",
                "period_s" => "--period",
                "ckpt_bytes" => "--size",
                "versions" => "--versions",
                "files" => "--files",
                "glob" => "--glob",
                "failure" => "--nodes / --mtbf",
                _ => return Error::Catalog(e),
            };
            Error::Usage(format!("{flag}: {reason}"))
        }
        _ => Error::Catalog(e),
    }
}

/// Run `sluice ckpt ...`.
pub fn run(command: &CkptCommand) -> Result<()> {
    match command {
        CkptCommand::Register(a) => {
            let secs = |s: Span| s.0.as_secs();
            let job = JobSpec {
                id: a.id.clone(),
                period_s: secs(a.period),
                ckpt_bytes: a.size.0,
                failure: match (a.nodes, a.mtbf) {
                    (Some(n), _) => Failure::Nodes(n),
                    (None, Some(m)) => Failure::MtbfSecs(secs(m)),
                    (None, None) => return Err(Error::Usage("give --nodes or --mtbf".into())),
                },
                versions: a.versions,
                glob: a.glob.clone(),
                files: a.files,
            };
            // What can be checked without the other jobs, in flags' words;
            // the mount (or the store below) checks against its jobs too.
            job.check_new(&[]).map_err(in_flags)?;
            let json = serde_json::to_string(&job)?;
            match a.target.request(&format!("ckpt register {json}")) {
                Some(answer) => answer.map(|_| ()),
                None => {
                    let store = a.target.store()?;
                    let registered = store.jobs()?;
                    job.check_new(&registered).map_err(in_flags)?;
                    Ok(store.put_job(&job)?)
                }
            }?;
            println!("registered {}", a.id);
            Ok(())
        }
        CkptCommand::List(a) => {
            let jobs: Vec<JobSpec> = match &a.target.mount {
                Some(mountpoint) => {
                    let answer = control_request(mountpoint, "ckpt list").map_err(Error::Mount)?;
                    serde_json::from_str(&answer).map_err(|source| Error::Answer {
                        mountpoint: mountpoint.clone(),
                        source,
                    })?
                }
                None => a.target.store()?.jobs()?,
            };
            if a.json {
                println!("{}", serde_json::to_string_pretty(&jobs)?);
                return Ok(());
            }
            print!("{}", sluice_term::ckpt::jobs_table(&jobs));
            Ok(())
        }
        CkptCommand::Unregister(a) => {
            let removed = match a.target.request(&format!("ckpt unregister {}", a.id)) {
                Some(answer) => answer? == "ok",
                None => a.target.store()?.remove_job(&a.id)?,
            };
            if removed {
                println!("unregistered {}", a.id);
                Ok(())
            } else {
                Err(Error::Usage(format!("no job {:?}", a.id)))
            }
        }
    }
}
