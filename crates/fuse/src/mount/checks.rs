//! Checks before a mount starts: the mount point, the metrics address,
//! and settings worth a warning.

use super::*;
use sluice_policy::redirector::RedirectPolicy;

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
    let unescape = |field: &str| -> Vec<u8> {
        let bytes = field.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            let octal = bytes.get(i + 1..i + 4).and_then(|d| {
                let d = std::str::from_utf8(d).ok()?;
                u8::from_str_radix(d, 8).ok()
            });
            match (bytes[i], octal) {
                (b'\\', Some(byte)) => {
                    out.push(byte);
                    i += 4;
                }
                (byte, _) => {
                    out.push(byte);
                    i += 1;
                }
            }
        }
        out
    };
    let point = std::os::unix::ffi::OsStrExt::as_bytes(point.as_os_str());
    mountinfo.lines().find_map(|line| {
        let (fields, after) = line.split_once(" - ")?;
        let mounted_at = fields.split(' ').nth(4)?;
        let mut after = after.split(' ');
        let fstype = after.next()?;
        let source = after.next().unwrap_or("");
        (fstype.starts_with("fuse") && unescape(mounted_at) == point)
            .then(|| (fstype.to_string(), source.to_string()))
    })
}

/// `cost` placement with the default `policy.cost_seek` (a 7200 rpm disk's
/// positioning time) over a capacity directory that is not the emulated
/// disk: the rule then buffers random writes a fast device would take as
/// they come, and the operator should measure the device. Not an error:
/// the default is right for a disk.
pub(super) fn unprofiled_cost(config: &Config) -> Option<String> {
    let default_seek = sluice_policy::cost::CostModel::default().capacity_seek;
    (config.policy.name == PolicyName::Cost
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
