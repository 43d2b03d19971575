//! The binary's one error type. Each command returns it; `main` turns it
//! into the message on stderr and the exit status (`exit_status`), in one
//! place. Library crates keep their own error types: those with a type are
//! wrapped as they are, and their messages already name the path, address
//! or key; those that report text (sluice-term's client and top,
//! sluice-workload) are forwarded in [`Error::Message`].

use std::io;
use std::path::{Path, PathBuf};

/// What a `sluice` command failed on.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The command line asks for what cannot be (a value out of range, a
    /// name nothing has, a missing choice); the message says what to give.
    #[error("{0}")]
    Usage(String),
    /// Reading or writing a file or directory the command was given.
    #[error("{}: {source}", path.display())]
    Path {
        /// The file or directory.
        path: PathBuf,
        /// The failure.
        #[source]
        source: io::Error,
    },
    /// A system call on no path (stdout, the log subscriber).
    #[error("{doing}: {source}")]
    Os {
        /// What was being done.
        doing: &'static str,
        /// The failure.
        #[source]
        source: io::Error,
    },
    /// The config: a file that does not load, a value out of range, tiers
    /// that cannot mount.
    #[error(transparent)]
    Config(#[from] sluice_config::ConfigError),
    /// Mounting and serving, or a running mount's control socket (not
    /// there, not answering, refusing); the message names the mount point
    /// or the socket.
    #[error(transparent)]
    Mount(io::Error),
    /// A tier's directory read through sluice-env (its messages name it).
    #[error(transparent)]
    Tier(io::Error),
    /// A running mount answered a control request with something that is
    /// not what was asked for (a different sluice version?).
    #[error("{} answered something unreadable: {source}", mountpoint.display())]
    Answer {
        /// The mount point asked.
        mountpoint: PathBuf,
        /// Why the answer did not parse.
        #[source]
        source: serde_json::Error,
    },
    /// A `RUST_LOG` that is not a log filter.
    #[error(transparent)]
    Log(#[from] sluice_term::log::FilterError),
    /// The mount helper form or `--daemon`.
    #[error(transparent)]
    Service(#[from] sluice_term::service::ServiceError),
    /// BBOS's catalogue.
    #[error(transparent)]
    Catalog(#[from] sluice_catalog::CatalogError),
    /// A LADS transfer, its TLS files or its sink's address.
    #[error(transparent)]
    Xfer(io::Error),
    /// A LADS transfer that finished with files not put in place.
    #[error(
        "{failed} entries failed and {changed} files changed while they were sent \
         (not put in place); rerun to resend them"
    )]
    XferIncomplete {
        /// Entries that failed.
        failed: usize,
        /// Files that changed while they were sent.
        changed: usize,
    },
    /// A simulator experiment.
    #[error("{experiment}: {source}")]
    Sim {
        /// The experiment's name.
        experiment: &'static str,
        /// The failure.
        #[source]
        source: sluice_sim::cluster::SimError,
    },
    /// `sluice analyse`'s detector and threshold flags.
    #[error("{0}")]
    Analysis(sluice_policy::detector::ConfigError),
    /// The trace `sluice analyse` generates.
    #[error(transparent)]
    Workload(#[from] sluice_sim::workload::WorkloadError),
    /// Writing a simulator report's files.
    #[error(transparent)]
    Report(#[from] sluice_sim::output::OutputError),
    /// Encoding a JSON answer.
    #[error("encoding JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// A library crate's error given as text (sluice-term's client and
    /// top, sluice-workload's demo and profile).
    #[error("{0}")]
    Message(String),
}

impl Error {
    /// For `map_err`: I/O on `path` failed.
    pub fn path(path: &Path) -> impl FnOnce(io::Error) -> Error + '_ {
        move |source| Error::Path {
            path: path.to_path_buf(),
            source,
        }
    }

    /// For `map_err`: writing a report to stdout failed.
    pub fn stdout(source: io::Error) -> Error {
        Error::Os {
            doing: "writing the report to stdout",
            source,
        }
    }
}

/// A command's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;
