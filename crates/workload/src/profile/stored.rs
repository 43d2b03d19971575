//! The capacity tier's measured seek, kept on the fast tier (issue 32;
//! docs/profile.md, "At mount").
//!
//! `cost` routes writes by a model of the capacity device whose one
//! device-specific number is `policy.cost_seek`, the positioning time of a
//! request that does not continue its file's previous one. Left at its
//! default (a 7200 rpm disk's), a mount over fast storage buffered random
//! writes the device would have taken as fast, and reached 0.34× of
//! mergerfs. So a mount over a plain directory whose config leaves
//! `cost_seek` at the default measures it, once:
//!
//! * **quick profile**: the profile's random-read phase alone, bounded
//!   ([`QUICK_REGION`] written and synced, its pages dropped from the page
//!   cache, then up to [`QUICK_SAMPLES`] 1-byte reads at seeded random
//!   offsets within [`QUICK_TIME_MAX`]); `cost_seek` is their median, as
//!   `sluice profile` suggests it;
//! * **kept** in `FAST/capacity-profile.json` with the capacity
//!   directory's path, device and inode: the next mount of that fast tier
//!   over the same directory reads it instead of measuring again;
//!   `sluice profile DIR --fast FAST` measures at length and replaces it.
//!
//! A config that sets `cost_seek`, another policy, an emulated capacity
//! device (whose model is known) or `policy.cost_profile = "off"` skips
//! all of it.

use std::time::{SystemTime, UNIX_EPOCH};

use super::*;

/// The record's file name in the fast tier's directory.
pub const RECORD_FILE: &str = "capacity-profile.json";
/// Bytes of the quick profile's file (at most a quarter of the free
/// space, at least [`QUICK_REGION_MIN`]).
pub const QUICK_REGION: u64 = 64 << 20;
/// The smallest quick profile file.
pub const QUICK_REGION_MIN: u64 = 4 << 20;
/// The quick profile's 1-byte reads, at most.
pub const QUICK_SAMPLES: u32 = 200;
/// The quick profile's reads stop after this long (at least
/// [`QUICK_SAMPLES_MIN`] are taken).
pub const QUICK_TIME_MAX: Duration = Duration::from_secs(2);
/// The fewest reads behind a quick profile's median.
pub const QUICK_SAMPLES_MIN: u32 = 20;

/// A measured `cost_seek` of one capacity directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeekRecord {
    /// The capacity directory, as given.
    pub capacity: PathBuf,
    /// Its device and inode when measured: a record of another directory
    /// at the same path (a new file system mounted there) is not used.
    pub identity: (u64, u64),
    /// The median 1-byte random read.
    pub cost_seek: Duration,
    /// Reads behind it.
    pub samples: u32,
    /// When, seconds since the Unix epoch.
    pub measured_at: u64,
    /// `quick profile at mount` or `sluice profile`.
    pub how: String,
}

impl SeekRecord {
    /// The record as stored.
    pub fn to_json(&self) -> serde_json::Value {
        json!({
            "capacity": self.capacity.display().to_string(),
            "device": self.identity.0,
            "inode": self.identity.1,
            "cost_seek_us": u64::try_from(self.cost_seek.as_micros()).unwrap_or(u64::MAX),
            "samples": self.samples,
            "measured_at": self.measured_at,
            "how": self.how,
        })
    }

    /// A stored record, `None` if it is not one.
    pub fn from_json(value: &serde_json::Value) -> Option<SeekRecord> {
        Some(SeekRecord {
            capacity: PathBuf::from(value.get("capacity")?.as_str()?),
            identity: (
                value.get("device")?.as_u64()?,
                value.get("inode")?.as_u64()?,
            ),
            cost_seek: Duration::from_micros(value.get("cost_seek_us")?.as_u64()?),
            samples: u32::try_from(value.get("samples")?.as_u64()?).ok()?,
            measured_at: value.get("measured_at")?.as_u64()?,
            how: value.get("how")?.as_str()?.to_string(),
        })
    }
}

/// Device and inode of `dir`.
pub fn identity(dir: &Path) -> Result<(u64, u64), String> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok((meta.dev(), meta.ino()))
}

/// The record in `fast` for the directory `capacity` is now, if there is
/// one and it is of that very directory.
pub fn load(fast: &Path, capacity: &Path) -> Option<SeekRecord> {
    let text = std::fs::read_to_string(fast.join(RECORD_FILE)).ok()?;
    let record = SeekRecord::from_json(&serde_json::from_str(&text).ok()?)?;
    (record.capacity == capacity && Some(record.identity) == identity(capacity).ok())
        .then_some(record)
}

/// Keep `record` in `fast` (written to a temporary name, synced, renamed,
/// 0600: the fast tier is the mount's own).
pub fn store(fast: &Path, record: &SeekRecord) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let path = fast.join(RECORD_FILE);
    let temp = fast.join(format!("{RECORD_FILE}.new"));
    let what = |e: std::io::Error| format!("{}: {e}", temp.display());
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&temp)
        .map_err(what)?;
    file.write_all(format!("{:#}\n", record.to_json()).as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(what)?;
    std::fs::rename(&temp, &path).map_err(|e| format!("{}: {e}", path.display()))
}

/// The quick profile of the plain directory `dir` (module docs): its
/// median 1-byte random read, and how many reads it took. Writes and
/// removes `dir/.sluice-profile`.
pub fn quick(dir: &Path) -> Result<SeekRecord, String> {
    let identity = identity(dir)?;
    let backend: Arc<dyn Backend> = Arc::new(
        sluice_env::posix::PosixBackend::new(dir.to_path_buf()).map_err(|e| e.to_string())?,
    );
    // A quarter of the free space at most, so a small tier is measured too.
    let free = backend
        .space()
        .map_err(|e| format!("{}: free space: {e}", dir.display()))?
        .free_bytes;
    let region = QUICK_REGION.min(free / 4 / 4096 * 4096);
    if region < QUICK_REGION_MIN {
        return Err(format!(
            "{} has {} free: too little for a profile file of at least {}",
            dir.display(),
            human_bytes(free),
            ByteSize(QUICK_REGION_MIN)
        ));
    }
    let args = ProfileArgs {
        dir: dir.to_path_buf(),
        device: DeviceArg::Posix,
        region,
        samples: QUICK_SAMPLES,
        min_size: region,
        max_size: region,
        per_size: 1,
        seed: 1,
        json: false,
        png: None,
        keep: false,
        fast: None,
    };
    let path = RelPath::new(PROFILE_FILE_NAME).map_err(|e| e.to_string())?;
    let stop = AtomicBool::new(false);
    let mut guard = ProfileFile {
        backend: backend.as_ref(),
        path,
        keep: false,
        created: false,
    };
    let file_path = dir.join(PROFILE_FILE_NAME);
    let mut warnings = Vec::new();
    let latencies = {
        let mut run = Run {
            args: &args,
            stop: &stop,
            cached_file: Some(file_path.as_path()),
            warnings: &mut warnings,
        };
        run.measure_seek(&mut guard, QUICK_TIME_MAX, QUICK_SAMPLES_MIN)?
    };
    guard.finish()?;
    let measured = Measurement {
        peak_bytes_per_s: 0.0,
        sequential_bytes: 0,
        latencies,
        curve: Vec::new(),
    };
    Ok(SeekRecord {
        capacity: dir.to_path_buf(),
        identity,
        cost_seek: measured.latency(0.5),
        samples: measured.latencies.len() as u32,
        measured_at: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        how: "quick profile at mount".to_string(),
    })
}

impl Run<'_> {
    /// The quick profile's phase: write the region and sync it, drop its
    /// pages, then 1-byte random reads until `--samples` or `time_max`
    /// (at least `samples_min`); their latencies, sorted.
    fn measure_seek(
        &mut self,
        guard: &mut ProfileFile<'_>,
        time_max: Duration,
        samples_min: u32,
    ) -> Result<Vec<Duration>, String> {
        let file = guard.create()?;
        let mut buffer = vec![0u8; SEQUENTIAL_REQUEST_BYTES as usize];
        self.write_region(file.as_ref(), &mut buffer)?;
        self.drop_cache();
        let mut rng = SimRng::new(self.args.seed);
        let start = Instant::now();
        let mut byte = [0u8; 1];
        let mut latencies = Vec::with_capacity(self.args.samples as usize);
        while latencies.len() < self.args.samples as usize
            && (latencies.len() < samples_min as usize || start.elapsed() < time_max)
        {
            let offset = rng.below(self.args.region);
            latencies.push(timed_read(file.as_ref(), &mut byte, offset)?);
        }
        latencies.sort_unstable();
        Ok(latencies)
    }
}

/// Under `cost` over a plain directory whose `policy.cost_seek` is left
/// at the default and `policy.cost_profile = "auto"`: set `cost_seek` to
/// the capacity directory's measured seek, from the fast tier's record or
/// from a quick profile now (then kept there). Returns what was done, for
/// the mount's log; `None` when the config rules it out. A tier that
/// cannot be measured (full, read-only) is an error the mount reports as
/// a warning, keeping the default.
pub fn settle_cost_seek(config: &mut sluice_config::Config) -> Result<Option<String>, String> {
    use sluice_config::{CostProfile, PolicyName};
    let default_seek = sluice_policy::cost::CostModel::default().capacity_seek;
    let policy = &config.policy;
    if policy.name != PolicyName::Cost
        || policy.cost_profile != CostProfile::Auto
        || policy.cost_seek.0 != default_seek
        || config.capacity.device != Device::Posix
    {
        return Ok(None);
    }
    let Some(capacity) = config.capacity.path.clone().filter(|p| p.is_dir()) else {
        return Ok(None);
    };
    let fast = config
        .fast
        .path
        .clone()
        .filter(|p| config.fast.device != Device::Memory && p.is_dir());
    let kept = fast.as_deref().and_then(|fast| load(fast, &capacity));
    let (record, note) = match kept {
        Some(record) => (record, format!("kept in the fast tier's {RECORD_FILE}")),
        None => {
            let start = Instant::now();
            let record = quick(&capacity).map_err(|e| {
                format!(
                    "cannot measure the capacity tier's seek ({e}): policy.cost_seek stays the \
                     default {} µs (a 7200 rpm disk's); set it (`sluice profile {}` prints it) \
                     or policy.cost_profile = \"off\"",
                    default_seek.as_micros(),
                    capacity.display()
                )
            })?;
            let kept = match &fast {
                Some(fast) => match store(fast, &record) {
                    Ok(()) => format!("kept in the fast tier's {RECORD_FILE}"),
                    Err(e) => format!("not kept: {e}"),
                },
                None => "not kept: no fast-tier directory".to_string(),
            };
            let took = start.elapsed().as_secs_f64();
            (record, format!("measured now in {took:.1} s; {kept}"))
        }
    };
    config.policy.cost_seek = Span(record.cost_seek);
    let model = sluice_policy::cost::CostModel {
        capacity_seek: record.cost_seek,
        fast_request: config.policy.cost_fast_request.0,
        hysteresis: config.policy.cost_hysteresis,
        ..sluice_policy::cost::CostModel::default()
    };
    Ok(Some(format!(
        "policy.cost_seek = {} µs for {}: the median of {} 1-byte random reads ({}, {note}; \
         `sluice profile {} --fast FAST` measures at length and replaces it); cost {}",
        record.cost_seek.as_micros(),
        capacity.display(),
        record.samples,
        record.how,
        capacity.display(),
        if model.may_buffer() {
            format!(
                "may buffer writes (above {} µs)",
                model.seek_bound().as_micros()
            )
        } else {
            format!(
                "buffers none (at most {} µs): files are served by passthrough",
                model.seek_bound().as_micros()
            )
        }
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_is_kept_for_its_directory_only() {
        let top = tempfile::tempdir().unwrap();
        let (fast, capacity) = (top.path().join("fast"), top.path().join("capacity"));
        std::fs::create_dir(&fast).unwrap();
        std::fs::create_dir(&capacity).unwrap();
        let record = SeekRecord {
            capacity: capacity.clone(),
            identity: identity(&capacity).unwrap(),
            cost_seek: Duration::from_micros(58),
            samples: 200,
            measured_at: 1,
            how: "sluice profile".to_string(),
        };
        store(&fast, &record).unwrap();
        assert_eq!(load(&fast, &capacity), Some(record));
        // Another directory at the same path: not its record.
        std::fs::rename(&capacity, top.path().join("old")).unwrap();
        std::fs::create_dir(&capacity).unwrap();
        assert_eq!(load(&fast, &capacity), None);
        // Nor at another path, nor a damaged file.
        assert_eq!(load(&fast, &top.path().join("old")), None);
        std::fs::write(fast.join(RECORD_FILE), "{").unwrap();
        assert_eq!(load(&fast, &capacity), None);
    }

    #[test]
    fn a_quick_profile_is_bounded_and_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let start = Instant::now();
        let record = quick(dir.path()).unwrap();
        assert!(start.elapsed() < Duration::from_secs(10), "bounded");
        assert!(record.samples >= QUICK_SAMPLES_MIN, "{record:?}");
        assert_eq!(record.how, "quick profile at mount");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
