//! Checks before a mount starts: the one list of refusals that
//! `sluice mount` and `sluice config check` share ([`preflight`]), and the
//! settings worth a warning.
//!
//! Every refusal of a mount that can be known without writing is here:
//! the config's values, the metrics address, the mount point, the tiers'
//! layout, the fast tier's directory (owner and mode, read-only, held by
//! a live mount), the log's regions against the configured count and
//! size, the entries sluice keeps in the fast tier, the catalogue's file,
//! the capacity tier (readable; read-only makes the mount read-only) and
//! FUSE itself (`/dev/fuse`, `allow_other` for a user). What is left to
//! the mount is what can only be done, not checked: creating a missing
//! tier, taking the fast tier's lock, recovering the log, opening the
//! catalogue, the FUSE mount, binding the control socket.
//!
//! INVARIANT: nothing here creates, writes or locks a file for longer
//! than the check itself (the lock test takes a shared `flock` and drops
//! it at once; the metrics test binds the address and closes it).

use super::*;
use rustix::fs::{Access, AtFlags, Mode, OFlags, StatVfsMountFlags};
use sluice_config::{ByteSize, ConfigError, TierConfig};
use sluice_engine::log::{check_region, RegionRefusal, REGION_HEADER_BYTES};
use sluice_policy::redirector::RedirectPolicy;
use sluice_policy::RegionId;
use std::os::unix::fs::FileExt;

/// What the preflight found: the mount may start.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Preflight {
    /// What the operator should know about the settings (an unprofiled
    /// `cost` policy, a public metrics endpoint); not refusals.
    pub warnings: Vec<String>,
    /// The capacity tier is on a read-only file system: the mount serves
    /// it read-only (the kernel answers EROFS to every change).
    pub capacity_read_only: bool,
    /// The mount point checked: the one given, else `mount.point`.
    pub mountpoint: Option<PathBuf>,
}

/// The checks `sluice mount` runs before it writes anything, and `sluice
/// config check` runs alone: `Err` is the refusal, with what to do. The
/// mount point checked is `mountpoint`, else the config's `mount.point`;
/// with neither, the mount point and FUSE checks are skipped. Creates,
/// writes and keeps nothing (module docs).
pub fn preflight(config: &Config, mountpoint: Option<&Path>) -> io::Result<Preflight> {
    let invalid = |e: ConfigError| io::Error::new(io::ErrorKind::InvalidInput, e.to_string());
    config.validate().map_err(invalid)?;
    let mut warnings = Vec::new();
    warnings.extend(check_metrics(config)?);
    warnings.extend(unprofiled_cost(config));
    let point = mountpoint.or(config.mount.point.as_deref());
    if let Some(point) = point {
        check_mount_point(point)?;
    }
    // The tiers' layout (with this mount point) is checked before either
    // tier is looked into: nothing of an unsafe layout is read further.
    let mut placed = config.clone();
    placed.mount.point = point.map(Path::to_path_buf);
    placed.check_layout().map_err(invalid)?;
    if let Some(point) = point {
        check_fuse(config, point)?;
    }
    if let Some(fast) = tier_dir(&config.fast) {
        check_fast_tier(config, fast)?;
    }
    let capacity_read_only = match tier_dir(&config.capacity) {
        Some(capacity) => check_capacity_tier(capacity)?,
        None => false,
    };
    check_catalogue(config)?;
    check_metrics_address(config)?;
    Ok(Preflight {
        warnings,
        capacity_read_only,
        mountpoint: point.map(Path::to_path_buf),
    })
}

/// The directory of a tier that has one (not `memory`).
fn tier_dir(tier: &TierConfig) -> Option<&Path> {
    tier.path
        .as_deref()
        .filter(|_| tier.device != Device::Memory)
}

fn uid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// `faccessat(path, access, AT_EACCESS)`: what this process may do there
/// (its effective ids), asked without doing it. EROFS when asking for
/// write access on a read-only file system.
fn may(path: &Path, access: Access) -> Result<(), Errno> {
    rustix::fs::accessat(rustix::fs::CWD, path, access, AtFlags::EACCESS)
}

/// Whether `path` is on a file system mounted read-only.
fn on_read_only_fs(path: &Path) -> bool {
    rustix::fs::statvfs(path).is_ok_and(|s| s.f_flag.contains(StatVfsMountFlags::RDONLY))
        || may(path, Access::WRITE_OK) == Err(Errno::ROFS)
}

/// A tier directory that does not exist yet (its `create` is set: the
/// layout check refused it otherwise): its nearest existing ancestor must
/// let this user create it there.
fn check_creatable(key: &str, path: &Path) -> io::Result<()> {
    let absolute = std::path::absolute(path)?;
    let Some(ancestor) = absolute.ancestors().skip(1).find(|a| a.exists()) else {
        return Ok(());
    };
    let refuse = |why: String| {
        Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{key} {} does not exist and cannot be created: {why}",
                path.display()
            ),
        ))
    };
    if on_read_only_fs(ancestor) {
        return refuse(format!(
            "{} is on a read-only file system",
            ancestor.display()
        ));
    }
    if let Err(e) = may(ancestor, Access::WRITE_OK | Access::EXEC_OK) {
        return refuse(format!(
            "uid {} may not create entries in {} ({})",
            uid(),
            ancestor.display(),
            io::Error::from(e)
        ));
    }
    Ok(())
}

/// The fast tier's directory and what sluice keeps in it, as the mount
/// would find them: the lock's rules on the directory, writable, not held
/// by a live mount, and a log recovery accepts.
fn check_fast_tier(config: &Config, fast: &Path) -> io::Result<()> {
    if !fast.exists() {
        // Created by the mount (the layout check let it through).
        return check_creatable("fast.path", fast);
    }
    fast_lock::check_directory(fast)?;
    if on_read_only_fs(fast) {
        return Err(io::Error::new(
            io::ErrorKind::ReadOnlyFilesystem,
            format!(
                "fast tier {} is on a read-only file system: sluice writes its log, its lock \
                 and its control socket there; remount it read-write, or give the mount a fast \
                 tier on a writable file system",
                fast.display()
            ),
        ));
    }
    if let Err(e) = may(fast, Access::READ_OK | Access::WRITE_OK | Access::EXEC_OK) {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "fast tier {}: uid {} may not write there ({}): give the mount a directory of \
                 its own user",
                fast.display(),
                uid(),
                io::Error::from(e)
            ),
        ));
    }
    fast_lock::check_free(fast)?;
    check_log(config, fast)?;
    // Entries the mount replaces, which must not be directories.
    let mut replaced = vec!["sluice.sock"];
    if config.liu.enabled {
        replaced.push(sluice_engine::liu::HEADS_FILE);
        replaced.push(sluice_engine::liu::BODIES_FILE);
    }
    for name in replaced {
        let path = fast.join(name);
        if std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir()) {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!(
                    "fast tier {}: {name} is a directory, where the mount makes a file of its \
                     own: move it aside",
                    fast.display()
                ),
            ));
        }
    }
    Ok(())
}

/// `FAST/log` as recovery would find it: a directory whose region files
/// (`log/region-NNNN`) were written for the configured region count and
/// size, or hold nothing. A region recovery would refuse is refused here
/// with recovery's words (`sluice_engine::log::check_region`); a region
/// beyond `log.regions` that holds data is refused too, because recovery
/// would not read it (its records would be lost).
fn check_log(config: &Config, fast: &Path) -> io::Result<()> {
    let log = fast.join("log");
    let refuse = |kind, what: String| {
        Err(io::Error::new(
            kind,
            format!("fast tier {}: {what}", fast.display()),
        ))
    };
    match std::fs::symlink_metadata(&log) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => {
            return refuse(
                io::ErrorKind::AlreadyExists,
                "`log` exists and is not a directory".into(),
            )
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return refuse(e.kind(), format!("log: {e}")),
    }
    let region_bytes = config.log.region_size.0 + REGION_HEADER_BYTES;
    for r in 0..config.log.regions {
        let name = format!("log/region-{r:04}");
        let Some((len, head)) = read_head(&fast.join(&name)).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("fast tier {}: {name}: {e}", fast.display()),
            )
        })?
        else {
            continue;
        };
        match check_region(RegionId(r), region_bytes, len, &head) {
            Ok(_) => {}
            Err(refusal) => {
                let hint = match &refusal {
                    RegionRefusal::Mismatch { found, .. }
                        if found.region.0 == r && found.region_bytes > REGION_HEADER_BYTES =>
                    {
                        format!(
                            " (it holds data written with log.region_size = {}, the config says \
                             {}: mount with the old log.region_size and unmount, which drains, \
                             then change it)",
                            ByteSize(found.region_bytes - REGION_HEADER_BYTES),
                            config.log.region_size
                        )
                    }
                    _ => String::new(),
                };
                return refuse(
                    io::ErrorKind::InvalidData,
                    format!("{name}: {refusal}{hint}"),
                );
            }
        }
    }
    // Regions beyond the configured count that hold data.
    let mut stranded: Option<u32> = None;
    let listed =
        |e: io::Error| io::Error::new(e.kind(), format!("fast tier {}: log: {e}", fast.display()));
    for entry in std::fs::read_dir(&log).map_err(listed)? {
        let entry = entry.map_err(listed)?;
        let name = entry.file_name();
        let Some(r) = name
            .to_str()
            .and_then(|n| n.strip_prefix("region-"))
            .filter(|n| n.len() == 4)
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if r >= config.log.regions
            && entry
                .metadata()
                .is_ok_and(|m| m.is_file() && m.len() > REGION_HEADER_BYTES)
        {
            stranded = stranded.max(Some(r));
        }
    }
    if let Some(r) = stranded {
        return refuse(
            io::ErrorKind::InvalidData,
            format!(
                "log/region-{r:04} holds data but log.regions = {}: recovery would not read \
                 it and its bytes would be lost; mount with log.regions = {} (or the old value) \
                 and unmount, which drains, then lower it",
                config.log.regions,
                r + 1
            ),
        );
    }
    Ok(())
}

/// The length and first [`REGION_HEADER_BYTES`] bytes of an existing
/// region file, read without writing; `None` when there is none. A
/// region that is not a regular file (a link, a directory, a FIFO) or
/// that this user could not open for writing is refused, as recovery's
/// open would.
fn read_head(path: &Path) -> io::Result<Option<(u64, Vec<u8>)>> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_file() => {}
        Ok(_) => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "not a regular file: move it aside",
            ))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    }
    if let Err(e) = may(path, Access::READ_OK | Access::WRITE_OK) {
        return Err(io::Error::new(
            io::Error::from(e).kind(),
            format!(
                "uid {} may not read and write it ({})",
                uid(),
                io::Error::from(e)
            ),
        ));
    }
    let file = std::fs::File::from(
        rustix::fs::open(
            path,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(io::Error::from)?,
    );
    let len = file.metadata()?.len();
    let mut head = vec![0u8; REGION_HEADER_BYTES as usize];
    let mut read = 0;
    while read < head.len() {
        match file.read_at(&mut head[read..], read as u64)? {
            0 => break,
            n => read += n,
        }
    }
    head.truncate(read);
    Ok(Some((len, head)))
}

/// The capacity tier's directory: readable by this user (the mount opens
/// it); `Ok(true)` when it is on a read-only file system, which the mount
/// then serves read-only.
fn check_capacity_tier(capacity: &Path) -> io::Result<bool> {
    if !capacity.exists() {
        check_creatable("capacity.path", capacity)?;
        return Ok(false);
    }
    if let Err(e) = may(capacity, Access::READ_OK | Access::EXEC_OK) {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "capacity tier {}: uid {} may not read it ({})",
                capacity.display(),
                uid(),
                io::Error::from(e)
            ),
        ));
    }
    Ok(on_read_only_fs(capacity))
}

/// BBOS's catalogue, as far as it can be checked without opening it
/// (opening a redb file writes its tables; a Redis server is not asked):
/// a redb file must be a regular file this user may read and write, or be
/// creatable. Redis's password and CA files are read by
/// `Config::validate`.
fn check_catalogue(config: &Config) -> io::Result<()> {
    let invalid = |e: ConfigError| io::Error::new(io::ErrorKind::InvalidInput, e.to_string());
    let Some(sluice_catalog::MetaSpec::Redb { path }) = config.meta_spec().map_err(invalid)? else {
        return Ok(());
    };
    let refuse = |why: String| {
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("checkpoint catalogue {}: {why}", path.display()),
        ))
    };
    match std::fs::metadata(&path) {
        Ok(meta) if !meta.is_file() => refuse("not a regular file: move it aside".into()),
        Ok(_) => match may(&path, Access::READ_OK | Access::WRITE_OK) {
            Ok(()) => Ok(()),
            Err(e) => refuse(format!(
                "uid {} may not read and write it ({})",
                uid(),
                io::Error::from(e)
            )),
        },
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let parent = path.parent().unwrap_or(Path::new("."));
            // The default, FAST/catalog.redb, in a fast tier the mount
            // creates: checked with the fast tier.
            let in_new_fast = config.fast.path.as_deref() == Some(parent) && !parent.exists();
            if in_new_fast {
                return Ok(());
            }
            if !parent.is_dir() {
                return refuse(format!(
                    "its directory {} does not exist (bbos.meta)",
                    parent.display()
                ));
            }
            match may(parent, Access::WRITE_OK | Access::EXEC_OK) {
                Ok(()) => Ok(()),
                Err(e) => refuse(format!(
                    "uid {} may not create it in {} ({})",
                    uid(),
                    parent.display(),
                    io::Error::from(e)
                )),
            }
        }
        Err(e) => refuse(e.to_string()),
    }
}

/// The metrics address can be bound now (closed at once): a port in use
/// or an address of no interface of this host is refused before mounting.
fn check_metrics_address(config: &Config) -> io::Result<()> {
    let Some(addr) = config.metrics.listen else {
        return Ok(());
    };
    TcpListener::bind(addr).map(drop).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!(
                "metrics endpoint {addr}: {e}: choose another address or port (metrics.listen, \
                 --metrics)"
            ),
        )
    })
}

/// FUSE as the mount at `point` will use it: `/dev/fuse` usable, and for a
/// user other than root, a mount point it may write to and `allow_other`
/// only if `/etc/fuse.conf` allows it (fusermount3 refuses otherwise).
fn check_fuse(config: &Config, point: &Path) -> io::Result<()> {
    const DEVICE: &str = "/dev/fuse";
    if let Err(e) = may(Path::new(DEVICE), Access::READ_OK | Access::WRITE_OK) {
        return Err(io::Error::new(
            io::Error::from(e).kind(),
            format!(
                "{DEVICE}: {}: the mount needs FUSE (install fuse3; in a container, pass \
                 {DEVICE} in)",
                io::Error::from(e)
            ),
        ));
    }
    if uid() == 0 {
        return Ok(());
    }
    if let Err(e) = may(point, Access::WRITE_OK) {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "mount point {}: uid {} may not write to it ({}), and fusermount3 mounts only \
                 there for a user other than root: mount on a directory of your own",
                point.display(),
                uid(),
                io::Error::from(e)
            ),
        ));
    }
    if config.mount.allow_other {
        let conf = std::fs::read_to_string("/etc/fuse.conf").unwrap_or_default();
        if !conf.lines().any(|l| l.trim() == "user_allow_other") {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "mount.allow_other (--allow-other) as uid {}: fusermount3 allows it only \
                     with a line `user_allow_other` in /etc/fuse.conf; add it (as root), or \
                     mount as root",
                    uid()
                ),
            ));
        }
    }
    Ok(())
}

/// A mount point must be a directory that is not a mount of a FUSE file
/// system already: a dead one (its process was killed) needs
/// `fusermount3 -u`, a live one would be hidden.
pub(super) fn check_mount_point(mountpoint: &Path) -> io::Result<()> {
    let meta = std::fs::metadata(mountpoint).map_err(|e| {
        if e.raw_os_error() == Some(Errno::NOTCONN.raw_os_error()) {
            io::Error::new(
                e.kind(),
                format!(
                    "mount point {} is a dead FUSE mount ({e}): the process that served it \
                     ended without unmounting (killed?); run `fusermount3 -u {}` and mount again \
                     (a sluice fast tier recovers its log)",
                    mountpoint.display(),
                    mountpoint.display()
                ),
            )
        } else {
            io::Error::new(
                e.kind(),
                format!("mount point {}: {e}", mountpoint.display()),
            )
        }
    })?;
    if !meta.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("mount point {} is not a directory", mountpoint.display()),
        ));
    }
    let absolute = std::fs::canonicalize(mountpoint)?;
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    if let Some((fstype, source)) = fuse_mounted_at(&mountinfo, &absolute) {
        let sluice = fstype == "fuse.sluice" || source == "sluice";
        let fstype = if sluice { "sluice" } else { fstype.as_str() };
        let hint = if sluice {
            format!("`sluice unmount {}`", mountpoint.display())
        } else {
            format!("`fusermount3 -u {}`", mountpoint.display())
        };
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!(
                "mount point {} is already mounted ({fstype}): mounting over it would hide it; \
                 unmount it first ({hint}) or choose another mount point",
                mountpoint.display()
            ),
        ));
    }
    Ok(())
}

/// The file system type and source of a FUSE mount whose mount point is
/// `point`, from the text of `/proc/self/mountinfo` (mount point in field
/// 5, type and source after the ` - ` separator; names escape space, tab,
/// newline and backslash as octal).
pub(super) fn fuse_mounted_at(mountinfo: &str, point: &Path) -> Option<(String, String)> {
    fuse_mount_at(mountinfo, point).map(|m| (m.fstype, m.source))
}

/// `cost` placement with the default `policy.cost_seek` (a 7200 rpm disk's
/// positioning time) over a capacity directory that is not the emulated
/// disk: the rule then buffers random writes a fast device would take as
/// they come, and the operator should measure the device. Not an error:
/// the default is right for a disk. With `policy.cost_profile = "auto"`
/// the mount measures it (docs/profile.md, "At mount"): no warning, since
/// `sluice mount` sets it before the engine starts.
pub(super) fn unprofiled_cost(config: &Config) -> Option<String> {
    let default_seek = sluice_policy::cost::CostModel::default().capacity_seek;
    (config.policy.name == PolicyName::Cost
        && config.policy.cost_profile == sluice_config::CostProfile::Off
        && config.policy.cost_seek.0 == default_seek
        && config.capacity.device == Device::Posix)
        .then(|| {
            format!(
                "policy.cost_seek is the default {} µs, a 7200 rpm disk's positioning time: if \
                 the capacity tier is faster (SSD, a parallel file system's cache), random \
                 writes are buffered that it would take as fast; `sluice profile {}` measures \
                 it and prints the value to set",
                default_seek.as_micros(),
                config
                    .capacity
                    .path
                    .as_deref()
                    .map_or_else(|| "CAPACITY_DIR".into(), |p| p.display().to_string())
            )
        })
}

/// Why `mount.passthrough` will serve no file of this mount, when the
/// config alone says so (docs/fuse.md, "Passthrough"): the capacity tier
/// must see every byte (an emulated device, LiU), or the redirect policy
/// may buffer writes. For the mount's log, so an operator who profiled the
/// capacity tier sees whether the measured seek keeps buffering possible.
pub(super) fn passthrough_unused(config: &Config, policy: &RedirectPolicy) -> Option<String> {
    if !config.mount.passthrough {
        return None;
    }
    if config.capacity.device != Device::Posix || config.liu.enabled {
        return Some(
            "the capacity tier is emulated or read through LiU, which must see every byte"
                .to_string(),
        );
    }
    match policy {
        RedirectPolicy::Cost(model) if model.may_buffer() => Some(format!(
            "policy cost may buffer writes: policy.cost_seek {} µs is above (1 + \
             cost_hysteresis) × cost_fast_request = {} µs",
            model.capacity_seek.as_micros(),
            model.seek_bound().as_micros()
        )),
        p if p.may_route_fast() => Some(format!("policy {p} buffers writes")),
        _ => None,
    }
}

/// A metrics address other than loopback needs `metrics.public`: the
/// endpoint has no authentication. Returns the warning to print when it
/// is public.
pub(super) fn check_metrics(config: &Config) -> io::Result<Option<String>> {
    let Some(addr) = config.metrics.listen else {
        return Ok(None);
    };
    if addr.ip().is_loopback() {
        return Ok(None);
    }
    if !config.metrics.public {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "metrics endpoint {addr} is not a loopback address: anyone who can reach it \
                 would read this mount's metrics (no authentication); serve it on 127.0.0.1, \
                 or say so with --metrics-public (metrics.public = true)"
            ),
        ));
    }
    Ok(Some(format!(
        "metrics at http://{addr}/metrics are served without authentication to every host \
         that can reach this one (metrics.public = true)"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_engine::log::RegionHeader;
    use std::os::unix::fs::PermissionsExt;

    /// A temp dir with private `fast/` and `capacity/`, and a config over them.
    fn setup(extra: &str) -> (tempfile::TempDir, Config) {
        let dir = tempfile::tempdir().unwrap();
        for d in ["fast", "capacity"] {
            std::fs::create_dir(dir.path().join(d)).unwrap();
        }
        fast_lock::make_private(&dir.path().join("fast")).unwrap();
        let config = Config::from_toml(&format!(
            "[fast]\npath = {:?}\n[capacity]\npath = {:?}\n{extra}",
            dir.path().join("fast"),
            dir.path().join("capacity")
        ))
        .unwrap();
        (dir, config)
    }

    fn entries(dir: &Path) -> Vec<PathBuf> {
        let mut out: Vec<PathBuf> = walk(dir);
        out.sort();
        out
    }

    fn walk(dir: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                out.extend(walk(&path));
            }
            out.push(path);
        }
        out
    }

    /// A region file of `region_size` record bytes holding one record's
    /// worth of bytes behind its header.
    fn region(fast: &Path, r: u32, region_size: u64) {
        std::fs::create_dir_all(fast.join("log")).unwrap();
        let mut bytes = RegionHeader {
            region: RegionId(r),
            generation: 1,
            region_bytes: region_size + REGION_HEADER_BYTES,
            first_seq: 0,
        }
        .encode()
        .to_vec();
        bytes.extend([7u8; 512]);
        std::fs::write(fast.join(format!("log/region-{r:04}")), bytes).unwrap();
    }

    #[test]
    fn a_good_setup_passes_and_nothing_is_created() {
        let (dir, config) = setup("");
        let before = entries(dir.path());
        let found = preflight(&config, None).unwrap();
        assert!(!found.capacity_read_only);
        assert_eq!(found.mountpoint, None);
        // The default cost_seek is measured by the mount: nothing to warn.
        assert!(found.warnings.is_empty(), "{:?}", found.warnings);
        assert_eq!(entries(dir.path()), before, "nothing created");
    }

    #[test]
    fn a_fast_tier_others_may_write_to_is_refused_with_the_locks_words() {
        let (dir, config) = setup("");
        let fast = dir.path().join("fast");
        std::fs::set_permissions(&fast, std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = preflight(&config, None).unwrap_err().to_string();
        assert!(err.contains("chmod go-w"), "{err}");
        assert!(!fast.join(fast_lock::LOCK_FILE).exists());
    }

    #[test]
    fn a_fast_tier_held_by_a_live_mount_is_refused() {
        let (dir, config) = setup("");
        let fast = dir.path().join("fast");
        let held = FastTierLock::acquire(&fast, Path::new("/mnt/first")).unwrap();
        let err = preflight(&config, None).unwrap_err().to_string();
        assert!(err.contains("in use by another sluice mount"), "{err}");
        assert!(err.contains("/mnt/first"), "{err}");
        drop(held);
        preflight(&config, None).unwrap();
    }

    #[test]
    fn a_changed_region_size_over_a_kept_log_is_refused_as_recovery_would() {
        let (dir, config) = setup("[log]\nregion_size = \"8MiB\"\n");
        let fast = dir.path().join("fast");
        region(&fast, 0, 4 << 20);
        let err = preflight(&config, None).unwrap_err().to_string();
        assert!(err.contains("log/region-0000"), "{err}");
        assert!(err.contains("drain with the old configuration"), "{err}");
        assert!(err.contains("log.region_size = 4MiB"), "{err}");
        // The same size is recovered; an empty region (a drained log) is
        // made again whatever its size.
        region(&fast, 0, 8 << 20);
        preflight(&config, None).unwrap();
        std::fs::write(fast.join("log/region-0001"), [0u8; 64]).unwrap();
        preflight(&config, None).unwrap();
        // A damaged header over data.
        std::fs::write(fast.join("log/region-0001"), [1u8; 200]).unwrap();
        let err = preflight(&config, None).unwrap_err().to_string();
        assert!(
            err.contains("region-0001") && err.contains("move it aside"),
            "{err}"
        );
    }

    #[test]
    fn regions_beyond_the_configured_count_holding_data_are_refused() {
        let (dir, config) = setup("");
        let fast = dir.path().join("fast");
        let size = config.log.region_size.0;
        region(&fast, 5, size);
        let err = preflight(&config, None).unwrap_err().to_string();
        assert!(
            err.contains("region-0005 holds data but log.regions = 4"),
            "{err}"
        );
        assert!(err.contains("log.regions = 6"), "{err}");
        std::fs::write(fast.join("log/region-0005"), [0u8; 64]).unwrap();
        preflight(&config, None).unwrap();
    }

    #[test]
    fn odd_entries_in_the_fast_tier_are_refused() {
        let (dir, config) = setup("");
        let fast = dir.path().join("fast");
        std::fs::write(fast.join("log"), b"").unwrap();
        let err = preflight(&config, None).unwrap_err().to_string();
        assert!(err.contains("`log` exists and is not a directory"), "{err}");
        std::fs::remove_file(fast.join("log")).unwrap();
        std::fs::create_dir_all(fast.join("log/region-0001")).unwrap();
        let err = preflight(&config, None).unwrap_err().to_string();
        assert!(err.contains("region-0001: not a regular file"), "{err}");
        std::fs::remove_dir(fast.join("log/region-0001")).unwrap();
        std::fs::create_dir(fast.join("sluice.sock")).unwrap();
        let err = preflight(&config, None).unwrap_err().to_string();
        assert!(err.contains("sluice.sock is a directory"), "{err}");
        std::fs::remove_dir(fast.join("sluice.sock")).unwrap();
        std::fs::create_dir(fast.join("catalog.redb")).unwrap();
        let err = preflight(&config, None).unwrap_err().to_string();
        assert!(err.contains("catalog.redb: not a regular file"), "{err}");
    }

    #[test]
    fn a_metrics_address_in_use_is_refused() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = taken.local_addr().unwrap();
        let (_dir, config) = setup(&format!("[metrics]\nlisten = \"{addr}\"\n"));
        let err = preflight(&config, None).unwrap_err().to_string();
        assert!(err.contains(&format!("metrics endpoint {addr}")), "{err}");
        drop(taken);
        preflight(&config, None).unwrap();
    }

    #[test]
    fn a_missing_tier_with_create_is_checked_where_it_would_be_made() {
        let (dir, mut config) = setup("");
        config.capacity.path = Some(dir.path().join("new/capacity"));
        config.capacity.create = true;
        preflight(&config, None).unwrap();
        assert!(!dir.path().join("new").exists(), "nothing created");
    }
}
