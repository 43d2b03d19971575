//! Test helper for `tests/engine_kill.rs`: writes and fsyncs through the
//! engine on two real directories until it is killed, printing `ack N` on
//! stdout after write N's fsync returned. Not a user tool.
//!
//! Usage: `sluice-kill-writer FAST_DIR CAPACITY_DIR FIRST_INDEX`

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use sluice_engine::Engine;
use sluice_env::posix::PosixBackend;
use sluice_env::{RelPath, SystemClock};

#[path = "../../tests/kill_support/mod.rs"]
mod kill_support;
use kill_support::{config, pattern, slot_offset, FILE};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let (Some(fast), Some(capacity), Some(first)) = (
        args.get(1),
        args.get(2),
        args.get(3).and_then(|a| a.parse::<u64>().ok()),
    ) else {
        eprintln!("usage: sluice-kill-writer FAST_DIR CAPACITY_DIR FIRST_INDEX");
        return ExitCode::from(2);
    };
    match run(PathBuf::from(fast), PathBuf::from(capacity), first) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sluice-kill-writer: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(fast: PathBuf, capacity: PathBuf, first: u64) -> std::io::Result<()> {
    let engine = Engine::open(
        Arc::new(PosixBackend::new(fast)?),
        Arc::new(PosixBackend::new(capacity)?),
        Arc::new(SystemClock::new()),
        config(),
    )?;
    let path = RelPath::new(FILE)?;
    let id = match engine.open_file(&path) {
        Ok(id) => id,
        Err(_) => engine.create(&path)?,
    };
    let mut out = std::io::stdout().lock();
    for i in first.. {
        engine.write(id, slot_offset(i), &pattern(i))?;
        engine.fsync(id)?;
        writeln!(out, "ack {i}")?;
        out.flush()?;
    }
    Ok(())
}
