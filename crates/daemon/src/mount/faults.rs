//! A test hook: faults injected into the capacity tier of a real mount
//! (issue 31's fault suite; docs/crash-consistency.md, "Capacity-tier
//! faults"). With `SLUICE_FAULTS=FILE` in the environment of `sluice
//! mount`, the capacity tier is wrapped in a [`FaultBackend`] whose rules
//! are FILE's lines (`OP ERRNO [PATH_PREFIX]`,
//! [`sluice_env::fault::parse_rules`]), read again every 100 ms while the
//! mount runs, so a test turns EIO on and off by rewriting the file. The
//! mount says so at WARN; without the variable nothing changes.

use std::path::PathBuf;
use std::sync::{Arc, Weak};
use std::time::Duration;

use sluice_env::fault::{parse_rules, FaultBackend};
use sluice_env::Backend;

use super::*;

/// The environment variable naming the rules file.
pub(super) const FAULTS_VAR: &str = "SLUICE_FAULTS";

/// `capacity` wrapped in the rules of `SLUICE_FAULTS`'s file, when it is
/// set; a bad file refuses the mount.
pub(super) fn wrap_capacity(capacity: Arc<dyn Backend>) -> io::Result<Arc<dyn Backend>> {
    let Some(file) = std::env::var_os(FAULTS_VAR).map(PathBuf::from) else {
        return Ok(capacity);
    };
    let read = |file: &PathBuf| -> io::Result<Vec<sluice_env::fault::FaultRule>> {
        let text = match std::fs::read_to_string(file) {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(e),
        };
        parse_rules(&text).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{FAULTS_VAR}={}: {e}", file.display()),
            )
        })
    };
    let faulty = Arc::new(FaultBackend::new(capacity));
    faulty.set_rules(read(&file)?);
    tracing::warn!(
        "{FAULTS_VAR}={} is set: the capacity tier fails calls by the rules in that file (a test hook)",
        file.display()
    );
    let watched: Weak<FaultBackend> = Arc::downgrade(&faulty);
    std::thread::Builder::new()
        .name("sluice-faults".into())
        .spawn(move || {
            let mut last = None;
            while let Some(faulty) = watched.upgrade() {
                match read(&file) {
                    Ok(rules) if last.as_ref() != Some(&rules) => {
                        faulty.set_rules(rules.clone());
                        last = Some(rules);
                    }
                    Ok(_) => {}
                    Err(e) => tracing::warn!("{e}; the rules before stay"),
                }
                drop(faulty);
                std::thread::sleep(Duration::from_millis(100));
            }
        })?;
    Ok(faulty)
}
