//! Which checkpoints are cold (seed 004 §II-C, §VI-D): [`cold_order`]
//! ranks resident checkpoints for demotion and eviction, and
//! [`direct_to_capacity`] decides whether an incoming checkpoint is cold
//! enough to bypass the fast tier. On "failure rate", see the parent
//! module's docs.

use super::*;

/// How cold checkpoints are chosen for demotion order and eviction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Eviction {
    /// BBOS: superseded versions first (when `version_aware`), then the
    /// lowest failure rate.
    Bbos {
        /// Rank superseded versions before every latest version.
        version_aware: bool,
    },
    /// Least recently used (written or read) first.
    Lru,
    /// First written first.
    Fifo,
}

impl Eviction {
    /// The name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            Eviction::Bbos {
                version_aware: true,
            } => "BBOS",
            Eviction::Bbos {
                version_aware: false,
            } => "BBOS without versions",
            Eviction::Lru => "LRU",
            Eviction::Fifo => "FIFO",
        }
    }
}

/// A checkpoint file as the ranking sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Resident {
    /// Its job.
    pub job: u64,
    /// Its version within the job (higher is newer).
    pub version: u64,
    /// Its size.
    pub bytes: u64,
    /// Its job's failure rate, failures per second (1 / MTBF).
    pub failure_rate: f64,
    /// When it was written.
    pub written: Time,
    /// When it was last written or read.
    pub accessed: Time,
}

/// A job's failure rate from its registration: an MTBF, or a node count
/// with the MTBF of one node (failures grow linearly with nodes, §II-B).
pub fn failure_rate(mtbf: Option<Duration>, nodes: u32, node_mtbf: Duration) -> f64 {
    match mtbf {
        Some(m) if !m.is_zero() => 1.0 / m.as_secs_f64(),
        Some(_) => f64::INFINITY,
        None => f64::from(nodes.max(1)) / node_mtbf.as_secs_f64().max(1e-9),
    }
}

/// The ranking key; smaller is colder.
fn cold_key(
    eviction: Eviction,
    f: &Resident,
    newest: &BTreeMap<u64, u64>,
) -> (u8, f64, Time, u64, u64) {
    match eviction {
        Eviction::Lru => (0, 0.0, f.accessed, f.job, f.version),
        Eviction::Fifo => (0, 0.0, f.written, f.job, f.version),
        Eviction::Bbos { version_aware } => {
            let superseded = newest.get(&f.job).is_some_and(|&v| v > f.version);
            if version_aware && superseded {
                (0, 0.0, f.written, f.job, f.version)
            } else {
                (1, f.failure_rate, f.written, f.job, f.version)
            }
        }
    }
}

fn cmp_key(a: &(u8, f64, Time, u64, u64), b: &(u8, f64, Time, u64, u64)) -> Ordering {
    a.0.cmp(&b.0)
        .then(a.1.total_cmp(&b.1))
        .then(a.2.cmp(&b.2))
        .then(a.3.cmp(&b.3))
        .then(a.4.cmp(&b.4))
}

/// The newest version of each job among `files` and `also` (versions known
/// elsewhere, e.g. on the capacity tier).
pub fn newest_versions<'a>(
    files: impl IntoIterator<Item = &'a Resident>,
    also: impl IntoIterator<Item = (u64, u64)>,
) -> BTreeMap<u64, u64> {
    let mut newest = BTreeMap::new();
    let pairs = files.into_iter().map(|f| (f.job, f.version)).chain(also);
    for (job, version) in pairs {
        let v = newest.entry(job).or_insert(version);
        *v = (*v).max(version);
    }
    newest
}

/// Indexes of `files`, coldest first, under `eviction`; `newest` gives each
/// job's newest version (see [`newest_versions`]).
pub fn cold_order(
    eviction: Eviction,
    files: &[Resident],
    newest: &BTreeMap<u64, u64>,
) -> Vec<usize> {
    let keys: Vec<_> = files
        .iter()
        .map(|f| cold_key(eviction, f, newest))
        .collect();
    let mut order: Vec<usize> = (0..files.len()).collect();
    order.sort_by(|&a, &b| cmp_key(&keys[a], &keys[b]));
    order
}

/// Whether `incoming` should be written straight to the capacity tier
/// (BBOS §III-C): the files the ranking would keep ahead of it, with it,
/// exceed `capacity`, so it would be the first to go. LRU and FIFO rank a
/// new file hottest, so they never bypass.
pub fn direct_to_capacity(
    eviction: Eviction,
    incoming: &Resident,
    residents: &[Resident],
    capacity: u64,
) -> bool {
    if !matches!(eviction, Eviction::Bbos { .. }) {
        return false;
    }
    let newest = newest_versions(residents.iter().chain(core::iter::once(incoming)), []);
    let key = cold_key(eviction, incoming, &newest);
    let hotter: u64 = residents
        .iter()
        .filter(|f| cmp_key(&cold_key(eviction, f, &newest), &key) == Ordering::Greater)
        .map(|f| f.bytes)
        .sum();
    hotter.saturating_add(incoming.bytes) > capacity
}
