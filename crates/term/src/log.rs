//! What the log on stderr shows (issue 21): the global `--log-level` flag
//! and the filter chosen from it and `RUST_LOG`. The `sluice` binary
//! installs the one subscriber with this filter; the library crates only
//! emit events.
//!
//! The filter is chosen by, first to last: the `--log-level` flag (a
//! level), else `RUST_LOG` (a level or `tracing` filter directives such as
//! `sluice_engine=debug,info`), else `info`. A `RUST_LOG` that is not a
//! filter is an error, not ignored. The levels carry (docs/fuse.md, "Logs
//! and last_errors"): ERROR every incident — a failure answered to an
//! application or a background failure, with its operation, path, tier
//! and errno; WARN refusals, fallbacks, failed drains and warnings about
//! the settings; INFO one line per mount, recovery and unmount; DEBUG
//! control requests and other per-request detail.
//!
//! Logs are for operators; what a command prints for its user (reports,
//! tables, its final error) stays on stdout and stderr as plain lines.

use clap::ValueEnum;
use tracing_subscriber::EnvFilter;

/// A level for `--log-level`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogLevel {
    /// Nothing.
    Off,
    /// Incidents only: failures answered to applications, background failures.
    Error,
    /// And refusals, fallbacks, failed drains, warnings about the settings.
    Warn,
    /// And one line per mount, recovery and unmount (the default).
    Info,
    /// And control requests and other per-request detail.
    Debug,
    /// Everything.
    Trace,
}

impl LogLevel {
    fn directive(self) -> &'static str {
        match self {
            LogLevel::Off => "off",
            LogLevel::Error => "error",
            LogLevel::Warn => "warn",
            LogLevel::Info => "info",
            LogLevel::Debug => "debug",
            LogLevel::Trace => "trace",
        }
    }
}

/// A `RUST_LOG` that is not a log filter; the message says what to give.
#[derive(Debug, thiserror::Error)]
#[error(
    "RUST_LOG={value:?} is not a log filter ({reason}): give a level (off, error, warn, \
     info, debug, trace) or directives such as `sluice_engine=debug,info`, or use \
     --log-level"
)]
pub struct FilterError {
    /// `RUST_LOG` as set (trimmed).
    pub value: String,
    /// Why `tracing-subscriber` refused it.
    pub reason: String,
}

/// The filter in effect: `flag`, else `rust_log` (the value of
/// `RUST_LOG`, if set and not blank), else `info`.
pub fn filter(flag: Option<LogLevel>, rust_log: Option<&str>) -> Result<EnvFilter, FilterError> {
    match (flag, rust_log.map(str::trim).filter(|v| !v.is_empty())) {
        (Some(level), _) => Ok(EnvFilter::new(level.directive())),
        (None, Some(value)) => EnvFilter::try_new(value).map_err(|e| FilterError {
            value: value.to_string(),
            reason: e.to_string(),
        }),
        (None, None) => Ok(EnvFilter::new(LogLevel::Info.directive())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown(filter: &EnvFilter) -> String {
        filter.to_string()
    }

    /// The flag wins over RUST_LOG, which wins over the default.
    #[test]
    fn flag_then_rust_log_then_info() {
        let f = |flag, env| shown(&filter(flag, env).unwrap());
        assert_eq!(f(None, None), "info");
        assert_eq!(f(None, Some("  ")), "info");
        assert_eq!(f(None, Some("debug")), "debug");
        assert_eq!(f(Some(LogLevel::Warn), Some("debug")), "warn");
        assert_eq!(f(Some(LogLevel::Off), None), "off");
        assert!(f(None, Some("sluice_engine=debug,info")).contains("sluice_engine=debug"));
    }

    #[test]
    fn a_bad_rust_log_is_an_error_naming_it() {
        let e = filter(None, Some("sluice=loud")).unwrap_err().to_string();
        assert!(e.contains("RUST_LOG") && e.contains("sluice=loud"), "{e}");
        assert!(filter(Some(LogLevel::Info), Some("sluice=loud")).is_ok());
    }
}
