//! `sluice quarantine list | restore | drop`: bytes a recovery did not
//! write back because their capacity file was deleted, replaced or
//! modified while the node was down (docs/crash-consistency.md, "Recovery
//! never overwrites the future"). Works on the fast tier's folder, whether
//! or not a mount is running on it.

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use sluice_engine::{
    quarantine_find, quarantine_list, quarantine_remove, quarantine_restore, QUARANTINE_DIR,
};
use sluice_env::posix::PosixBackend;

use crate::error::{Error, Result};

/// `sluice quarantine ...`.
#[derive(Subcommand, Debug)]
pub enum QuarantineCommand {
    /// List the quarantined files: name, path, bytes, reason.
    List(FastArg),
    /// Write a quarantined file's bytes into FILE at their offsets (FILE
    /// is created if missing, its other bytes kept), then remove the
    /// entry unless `--keep`.
    Restore(RestoreArgs),
    /// Remove a quarantined entry and its bytes.
    Drop(EntryArgs),
}

/// The fast tier.
#[derive(Args, Debug)]
pub struct FastArg {
    /// The fast tier's directory (the mount's `--fast`).
    #[arg(long)]
    fast: PathBuf,
}

/// One entry.
#[derive(Args, Debug)]
pub struct EntryArgs {
    #[command(flatten)]
    fast: FastArg,
    /// The entry's name, as `list` shows it.
    name: String,
}

/// `sluice quarantine restore`.
#[derive(Args, Debug)]
pub struct RestoreArgs {
    #[command(flatten)]
    entry: EntryArgs,
    /// The file to write the bytes into: under a mount (they then go
    /// through sluice like any write), or anywhere else.
    #[arg(long)]
    to: PathBuf,
    /// Keep the entry after restoring.
    #[arg(long)]
    keep: bool,
}

/// Run a `sluice quarantine` command.
pub fn run(command: &QuarantineCommand) -> Result<()> {
    match command {
        QuarantineCommand::List(fast) => {
            let entries = quarantine_list(&backend(&fast.fast)?).map_err(Error::Tier)?;
            if entries.is_empty() {
                println!("nothing quarantined on {}", fast.fast.display());
            }
            for e in entries {
                println!("{}  {}  {} B  {}", e.name, e.path, e.bytes(), e.reason);
            }
            Ok(())
        }
        QuarantineCommand::Restore(args) => {
            let fast = backend(&args.entry.fast.fast)?;
            let entry = quarantine_find(&fast, &args.entry.name).map_err(Error::Tier)?;
            let to = OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false)
                .open(&args.to)
                .map_err(Error::path(&args.to))?;
            let bytes = quarantine_restore(&fast, &entry, &to).map_err(Error::path(&args.to))?;
            println!(
                "restored {bytes} B of {} into {}",
                entry.path,
                args.to.display()
            );
            if !args.keep {
                remove(&fast, &args.entry)?;
            }
            Ok(())
        }
        QuarantineCommand::Drop(args) => {
            let fast = backend(&args.fast.fast)?;
            quarantine_find(&fast, &args.name).map_err(Error::Tier)?;
            remove(&fast, args)
        }
    }
}

fn backend(fast: &Path) -> Result<PosixBackend> {
    PosixBackend::new(fast.to_path_buf()).map_err(Error::Tier)
}

fn remove(fast: &PosixBackend, args: &EntryArgs) -> Result<()> {
    quarantine_remove(fast, &args.name).map_err(Error::Tier)?;
    println!(
        "removed {}",
        args.fast
            .fast
            .join(QUARANTINE_DIR)
            .join(&args.name)
            .display()
    );
    Ok(())
}
