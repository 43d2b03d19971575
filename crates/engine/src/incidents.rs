//! `last_errors`: a bounded ring of the newest failures of a mount
//! (issue 19, "visible causes").
//!
//! An [`Incident`] is one failure someone must be able to find the cause
//! of: an error the FUSE adapter answered an application with (EIO,
//! ENOSPC, ...; not an expected answer such as ENOENT), or a background
//! failure (a flush, a demotion, a catalogue update, a LiU load). Each says
//! when, which operation, on which path and tier, the errno, and the
//! error's whole message. [`Incidents::record`] keeps it and logs it as a
//! `tracing` ERROR event with the same fields, so the log and
//! `sluice status`'s `last_errors` always agree.
//!
//! INVARIANTS: the ring holds at most [`INCIDENTS_KEPT`] incidents, the
//! newest; `total` counts every incident ever recorded (it only grows).
//! The ring's lock is a leaf: nothing else is locked while holding it, so
//! recording under another lock (the engine's, the stager's) cannot
//! deadlock.

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

/// How many incidents a ring keeps: the newest.
pub const INCIDENTS_KEPT: usize = 32;

/// One failure: see the module docs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Incident {
    /// When it was recorded (UTC, RFC 3339 in JSON).
    #[serde(serialize_with = "serialize_at")]
    pub at: SystemTime,
    /// The operation that failed: a FUSE request (`write`, `create`,
    /// `fsync`, ...) or background work (`flush`, `demote`, `catalogue`,
    /// `liu-load`, ...).
    pub op: String,
    /// The path (relative to the mount) or `inode N` it concerns, if one.
    pub path: Option<String>,
    /// `fast` or `capacity`: the tier the error came from, if known.
    pub tier: Option<String>,
    /// The errno (answered to the application, or of the tier's error).
    pub errno: Option<i32>,
    /// The error's whole message (backend, path and cause).
    pub message: String,
}

impl Incident {
    /// The errno's symbolic name (`ENOSPC`), if it has one sluice knows.
    pub fn errno_name(&self) -> Option<&'static str> {
        self.errno.and_then(sluice_env::errno::errno_name)
    }
}

fn serialize_at<S: serde::Serializer>(at: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&utc_rfc3339(*at))
}

/// `at` as `YYYY-MM-DDTHH:MM:SS.mmmZ` (UTC). Times before 1970 show as
/// the epoch.
pub fn utc_rfc3339(at: SystemTime) -> String {
    let since = at.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60,
        since.subsec_millis()
    )
}

/// The ring of the newest incidents of one mount (engine, stager and LiU
/// each hold one; status merges them).
#[derive(Debug)]
pub struct Incidents {
    kept: Mutex<VecDeque<Incident>>,
    total: AtomicU64,
    /// What names a tier in an error's message, and the tier: the
    /// engine's words and each tier's `Backend::describe` (with what a
    /// wrapping backend wraps: `emulated hdd over posix DIR` also as
    /// `posix DIR`, whose errors the inner backend writes), each followed
    /// by `:`.
    labels: Vec<(String, &'static str)>,
}

impl Incidents {
    /// An empty ring for the tiers described as `fast` and `capacity`
    /// (their `Backend::describe`).
    pub fn new(fast: impl Into<String>, capacity: impl Into<String>) -> Incidents {
        let mut labels = vec![
            ("fast tier".to_string(), "fast"),
            ("capacity tier".to_string(), "capacity"),
        ];
        for (describe, tier) in [(fast.into(), "fast"), (capacity.into(), "capacity")] {
            let mut rest = describe.as_str();
            while !rest.is_empty() {
                labels.push((format!("{rest}:"), tier));
                rest = rest.split_once(" over ").map_or("", |(_, inner)| inner);
            }
        }
        Incidents {
            kept: Mutex::new(VecDeque::with_capacity(INCIDENTS_KEPT)),
            total: AtomicU64::new(0),
            labels,
        }
    }

    /// Keep `incident` (dropping the oldest beyond [`INCIDENTS_KEPT`]) and
    /// log it as an ERROR event with its fields.
    pub fn record(&self, incident: Incident) {
        tracing::error!(
            op = %incident.op,
            path = incident.path.as_deref().unwrap_or("-"),
            tier = incident.tier.as_deref().unwrap_or("-"),
            errno = incident.errno_name().map_or_else(
                || incident.errno.map_or_else(|| "-".to_string(), |n| n.to_string()),
                str::to_string
            ),
            "{}",
            incident.message
        );
        self.total.fetch_add(1, Ordering::Relaxed);
        let mut kept = sluice_env::lock(&self.kept);
        if kept.len() == INCIDENTS_KEPT {
            kept.pop_front();
        }
        kept.push_back(incident);
    }

    /// Record `error` of operation `op` on `path`: its errno
    /// ([`sluice_env::errno::errno_of`]), the tier it came from (`tier`,
    /// else the one its message names: [`Incidents::tier_named`]) and its
    /// message.
    pub fn record_error(
        &self,
        op: &str,
        path: Option<&str>,
        tier: Option<&str>,
        error: &io::Error,
    ) {
        let message = error.to_string();
        let tier = tier.or_else(|| self.tier_named(&message));
        self.record(Incident {
            at: SystemTime::now(),
            op: op.to_string(),
            path: path.map(str::to_string),
            tier: tier.map(str::to_string),
            errno: Some(sluice_env::errno::errno_of(error)),
            message,
        });
    }

    /// The tier an error's message names first: the engine puts
    /// `fast tier DIR:` or `capacity tier DIR:` in front of a tier's
    /// error, and a backend puts its own description (`posix DIR:`) in
    /// front of its errors. The first one in the message is the outermost
    /// context, the tier the failed step was on.
    pub fn tier_named(&self, message: &str) -> Option<&'static str> {
        self.labels
            .iter()
            .filter_map(|(label, tier)| {
                message
                    .find(label.as_str())
                    .map(|at| (at, label.len(), *tier))
            })
            // The earliest; at one position the longer label (a tier
            // whose description extends the other's) is the one meant.
            .min_by_key(|&(at, len, _)| (at, std::cmp::Reverse(len)))
            .map(|(_, _, tier)| tier)
    }

    /// The kept incidents, newest first.
    pub fn newest(&self) -> Vec<Incident> {
        let kept = sluice_env::lock(&self.kept);
        kept.iter().rev().cloned().collect()
    }

    /// Incidents recorded since the ring was made (kept or not).
    pub fn total(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }
}

/// The newest [`INCIDENTS_KEPT`] incidents of several rings, newest first,
/// and their total count.
pub fn merged<'a>(rings: impl IntoIterator<Item = &'a Incidents>) -> (Vec<Incident>, u64) {
    let mut all = Vec::new();
    let mut total = 0;
    for ring in rings {
        all.extend(ring.newest());
        total += ring.total();
    }
    all.sort_by_key(|incident| std::cmp::Reverse(incident.at));
    all.truncate(INCIDENTS_KEPT);
    (all, total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn incident(n: u64) -> Incident {
        Incident {
            at: UNIX_EPOCH + Duration::from_secs(n),
            op: "write".to_string(),
            path: Some(format!("f{n}")),
            tier: None,
            errno: Some(5),
            message: format!("failure {n}"),
        }
    }

    /// The ring keeps the newest 32, newest first, and counts them all.
    #[test]
    fn the_ring_keeps_the_newest_and_counts_all() {
        let ring = Incidents::new("posix /f", "posix /c");
        for n in 0..100 {
            ring.record(incident(n));
        }
        let kept = ring.newest();
        assert_eq!(kept.len(), INCIDENTS_KEPT);
        assert_eq!(ring.total(), 100);
        assert_eq!(kept[0].message, "failure 99", "newest first");
        assert_eq!(kept[INCIDENTS_KEPT - 1].message, "failure 68");
    }

    #[test]
    fn merged_rings_are_newest_first_and_bounded() {
        let (a, b) = (Incidents::new("", ""), Incidents::new("", ""));
        for n in 0..40 {
            if n % 2 == 0 { &a } else { &b }.record(incident(n));
        }
        let (kept, total) = merged([&a, &b]);
        assert_eq!(total, 40);
        assert_eq!(kept.len(), INCIDENTS_KEPT);
        assert_eq!(kept[0].message, "failure 39");
        assert_eq!(kept[1].message, "failure 38");
    }

    /// The tier is the one the message names first, by the engine's words
    /// or by the backend's description; a description that extends the
    /// other's is told apart.
    #[test]
    fn the_tier_is_the_one_the_message_names_first() {
        let ring = Incidents::new("posix /t/f", "posix /t/fc");
        let tier = |m: &str| ring.tier_named(m);
        assert_eq!(
            tier("capacity tier posix /t/fc: write a: No space left on device (os error 28)"),
            Some("capacity")
        );
        assert_eq!(
            tier("fast tier posix /t/f is full; is the capacity tier failing?"),
            Some("fast")
        );
        assert_eq!(
            tier("create a: posix /t/fc: open \"a\": Read-only file system"),
            Some("capacity")
        );
        assert_eq!(tier("posix /t/f: open \"log\": EIO"), Some("fast"));
        let emulated = Incidents::new("posix /f", "emulated hdd over posix /c");
        assert_eq!(
            emulated.tier_named("create a: posix /c: open \"a\": No space left on device"),
            Some("capacity")
        );
        assert_eq!(tier("checkpoint catalogue: connection refused"), None);
    }

    #[test]
    fn record_error_takes_errno_tier_and_message() {
        let ring = Incidents::new("posix /f", "posix /c");
        let tier_error = io::Error::from_raw_os_error(28);
        let error = sluice_env::with_context(tier_error, "capacity tier posix /c: write a");
        ring.record_error("write", Some("a"), None, &error);
        let kept = &ring.newest()[0];
        assert_eq!(kept.errno, Some(28));
        assert_eq!(kept.errno_name(), Some("ENOSPC"));
        assert_eq!(kept.tier.as_deref(), Some("capacity"));
        assert_eq!(kept.path.as_deref(), Some("a"));
        assert!(kept.message.contains("write a"), "{}", kept.message);
    }

    #[test]
    fn times_are_utc_rfc3339() {
        assert_eq!(utc_rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let t = UNIX_EPOCH + Duration::from_millis(1_795_934_461_123);
        assert_eq!(utc_rfc3339(t), "2026-11-29T06:41:01.123Z");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400);
        assert_eq!(utc_rfc3339(leap), "2000-02-29T00:00:00.000Z");
    }
}
