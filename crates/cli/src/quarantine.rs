//! `sluice quarantine list | restore | drop`: bytes a recovery did not
//! write back because their capacity file was deleted, replaced or
//! modified while the node was down (docs/crash-consistency.md, "Recovery
//! never overwrites the future"). Works on the fast tier's folder, whether
//! or not a mount is running on it.

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use sluice_engine::{quarantine_list, QuarantineEntry, QUARANTINE_DIR};
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
            let entries = entries(&fast.fast)?;
            if entries.is_empty() {
                println!("nothing quarantined on {}", fast.fast.display());
            }
            for e in entries {
                println!("{}  {}  {} B  {}", e.name, e.path, e.bytes(), e.reason);
            }
            Ok(())
        }
        QuarantineCommand::Restore(args) => {
            let entry = find(&args.entry)?;
            let data = entry_dir(&args.entry).join("data");
            let from = std::fs::File::open(&data).map_err(Error::path(&data))?;
            let to = OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false)
                .open(&args.to)
                .map_err(Error::path(&args.to))?;
            for &(offset, len) in &entry.extents {
                let mut buf = vec![0u8; len as usize];
                from.read_exact_at(&mut buf, offset)
                    .map_err(Error::path(&data))?;
                to.write_all_at(&buf, offset)
                    .map_err(Error::path(&args.to))?;
            }
            to.sync_all()
                .map_err(|e| std::io::Error::new(e.kind(), format!("fsync: {e}")))
                .map_err(Error::path(&args.to))?;
            println!(
                "restored {} B of {} into {}",
                entry.bytes(),
                entry.path,
                args.to.display()
            );
            if !args.keep {
                remove(&args.entry)?;
            }
            Ok(())
        }
        QuarantineCommand::Drop(args) => {
            find(args)?;
            remove(args)
        }
    }
}

fn entries(fast: &Path) -> Result<Vec<QuarantineEntry>> {
    let backend = PosixBackend::new(fast.to_path_buf()).map_err(Error::Tier)?;
    quarantine_list(&backend).map_err(Error::Tier)
}

fn find(args: &EntryArgs) -> Result<QuarantineEntry> {
    entries(&args.fast.fast)?
        .into_iter()
        .find(|e| e.name == args.name)
        .ok_or_else(|| {
            Error::Usage(format!(
                "no quarantined entry {:?} on {} (see `sluice quarantine list --fast {}`)",
                args.name,
                args.fast.fast.display(),
                args.fast.fast.display()
            ))
        })
}

fn entry_dir(args: &EntryArgs) -> PathBuf {
    args.fast.fast.join(QUARANTINE_DIR).join(&args.name)
}

fn remove(args: &EntryArgs) -> Result<()> {
    let dir = entry_dir(args);
    std::fs::remove_dir_all(&dir).map_err(Error::path(&dir))?;
    println!("removed {}", dir.display());
    Ok(())
}
