//! The two tiers' backends, opened from a checked config: a directory
//! (POSIX), an emulated disk or SSD over one (`device`), or memory; with
//! `liu.enabled` the capacity tier wrapped in LiU's read path. The config
//! crate checks and converts the values; opening them is the daemon's.

use std::sync::Arc;

use sluice_config::{missing_tier_dir, Config, ConfigError, Device, TierConfig};
use sluice_devices::hdd::HddConfig;
use sluice_devices::ssd::SsdConfig;
use sluice_engine::LiuBackend;
use sluice_env::emulated::EmulatedBackend;
use sluice_env::memory::MemBackend;
use sluice_env::posix::PosixBackend;
use sluice_env::{Backend, Clock};

/// Open both tiers of `config`, after [`Config::check_layout`]; a missing
/// directory is created only with its tier's `create`. With `liu.enabled`
/// the capacity tier is wrapped in LiU's read path, its heads on the fast
/// tier.
pub fn open_tiers(config: &Config, clock: &Arc<dyn Clock>) -> Result<Tiers, ConfigError> {
    config.check_layout()?;
    let fast = open_tier("fast", &config.fast, clock)?;
    let mut capacity = open_tier("capacity", &config.capacity, clock)?;
    let liu = if config.liu.enabled {
        let liu = Arc::new(
            LiuBackend::new(capacity, &fast, config.liu_options()?)
                .map_err(|e| ConfigError(format!("liu: {e}")))?,
        );
        capacity = Arc::clone(&liu) as Arc<dyn Backend>;
        Some(liu)
    } else {
        None
    };
    Ok(Tiers {
        fast,
        capacity,
        liu,
    })
}

/// The two opened tiers.
#[derive(Clone, Debug)]
pub struct Tiers {
    /// Holds the log.
    pub fast: Arc<dyn Backend>,
    /// Holds the files (through `liu` when it is on).
    pub capacity: Arc<dyn Backend>,
    /// LiU's read path, for its status.
    pub liu: Option<Arc<LiuBackend>>,
}

/// One tier's backend from its section; a missing directory is an error
/// unless the section's `create` is set.
pub fn open_tier(
    name: &str,
    tier: &TierConfig,
    clock: &Arc<dyn Clock>,
) -> Result<Arc<dyn Backend>, ConfigError> {
    let error = |e: std::io::Error| ConfigError(format!("{name} tier: {e}"));
    let directory = || -> Result<Arc<dyn Backend>, ConfigError> {
        let path = tier
            .path
            .clone()
            .ok_or_else(|| ConfigError(format!("{name}.path is not set")))?;
        if !path.exists() {
            if !tier.create {
                return Err(missing_tier_dir(&format!("{name}.path"), &path));
            }
            std::fs::create_dir_all(&path)
                .map_err(|e| ConfigError(format!("{name} tier {}: {e}", path.display())))?;
        }
        Ok(Arc::new(PosixBackend::new(path).map_err(error)?))
    };
    Ok(match tier.device {
        Device::Posix => directory()?,
        Device::Memory => Arc::new(MemBackend::new()),
        Device::Hdd => Arc::new(
            match &tier.shared_device {
                None => {
                    EmulatedBackend::hdd(directory()?, HddConfig::default(), Arc::clone(clock), 1)
                }
                // A seed per process: the nodes sharing the platter draw
                // their rotational delays independently.
                Some(state) => EmulatedBackend::shared_hdd(
                    directory()?,
                    HddConfig::default(),
                    Arc::clone(clock),
                    u64::from(std::process::id()),
                    state,
                ),
            }
            .map_err(error)?,
        ),
        Device::Ssd => Arc::new(
            EmulatedBackend::ssd(directory()?, SsdConfig::default(), Arc::clone(clock))
                .map_err(error)?,
        ),
    })
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    #[test]
    fn liu_wraps_the_capacity_tier_when_enabled() {
        let dir = tempfile::tempdir().unwrap();
        let clock: Arc<dyn Clock> = Arc::new(sluice_env::SystemClock::new());
        let mut config = Config::default();
        config.fast.path = Some(dir.path().join("fast"));
        config.capacity.path = Some(dir.path().join("capacity"));
        config.fast.create = true;
        config.capacity.create = true;
        let tiers = open_tiers(&config, &clock).unwrap();
        assert!(tiers.liu.is_none());
        assert!(!tiers.capacity.describe().contains("LiU"));
        config.liu.enabled = true;
        let tiers = open_tiers(&config, &clock).unwrap();
        assert!(tiers.liu.is_some());
        assert!(tiers.capacity.describe().contains("LiU"));
        assert!(dir.path().join("fast").join("liu-heads").exists());
    }

    /// A shared device opens as a disk on its state file.
    #[test]
    fn a_shared_device_opens_on_its_state_file() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("disk");
        let clock: Arc<dyn Clock> = Arc::new(sluice_env::SystemClock::new());
        let tier = TierConfig {
            path: Some(dir.path().join("capacity")),
            device: Device::Hdd,
            create: true,
            shared_device: Some(state.clone()),
        };
        open_tier("capacity", &tier, &clock).unwrap();
        assert!(state.exists());
    }

    /// A config with these two tier directories, and `keys` over the
    /// defaults.
    fn with_tiers(fast: &Path, capacity: &Path) -> Config {
        let mut config = Config::default();
        config.fast.path = Some(fast.to_path_buf());
        config.capacity.path = Some(capacity.to_path_buf());
        config
    }

    /// Issue 19: tier paths were compared as text, so `--fast c/../c
    /// --capacity c` mounted, as did a fast tier nested inside the capacity
    /// tier (the log and catalogue then show inside the mount, writable),
    /// one around it, and one reached through a symlink into the other.
    #[test]
    fn unsafe_tier_layouts_are_refused_issue_19() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let c = root.join("c");
        std::fs::create_dir_all(c.join("inner")).unwrap();
        std::fs::create_dir_all(root.join("f")).unwrap();
        std::os::unix::fs::symlink(c.join("inner"), root.join("into-c")).unwrap();
        std::os::unix::fs::symlink(&c, root.join("c-again")).unwrap();
        let clock: Arc<dyn Clock> = Arc::new(sluice_env::SystemClock::new());
        for (fast, capacity, fragment) in [
            (root.join("c/../c"), c.clone(), "same directory"),
            (root.join("c-again"), c.clone(), "same directory"),
            (c.join("inner"), c.clone(), "inside"),
            (c.clone(), c.join("inner"), "inside"),
            (root.join("into-c"), c.clone(), "inside"),
            (root.join("f"), root.join("f/./new"), "inside"),
        ] {
            let config = with_tiers(&fast, &capacity);
            let err = open_tiers(&config, &clock).unwrap_err();
            let what = format!("fast {}, capacity {}", fast.display(), capacity.display());
            assert!(err.0.contains(fragment), "{what}: {err}");
            assert!(
                err.0.contains("fast.path") && err.0.contains("capacity.path"),
                "{what}: {err}"
            );
        }
        assert!(!root.join("f/new").exists(), "nothing is created");
        // Siblings are fine, also when reached through a symlink.
        std::fs::create_dir_all(c.join("cap")).unwrap();
        open_tiers(
            &with_tiers(&root.join("f"), &root.join("c-again/cap")),
            &clock,
        )
        .unwrap();
    }

    /// Issue 19: a mount point that is a tier, inside one, or around one
    /// (sluice would serve its own mount, or hide its socket) is refused.
    #[test]
    fn a_mount_point_inside_or_around_a_tier_is_refused_issue_19() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for d in ["tiers/fast", "tiers/capacity/mnt", "mnt"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        let clock: Arc<dyn Clock> = Arc::new(sluice_env::SystemClock::new());
        let mut config = with_tiers(&root.join("tiers/fast"), &root.join("tiers/capacity"));
        for point in [
            "tiers/capacity/mnt",
            "tiers/fast",
            "tiers",
            "tiers/capacity/../capacity",
        ] {
            config.mount.point = Some(root.join(point));
            let err = open_tiers(&config, &clock).unwrap_err();
            assert!(err.0.contains("mount.point"), "{point}: {err}");
        }
        config.mount.point = Some(root.join("mnt"));
        open_tiers(&config, &clock).unwrap();
    }

    /// Issue 19: a missing tier directory (a typo) was created silently,
    /// with its parents.
    #[test]
    fn a_missing_tier_directory_is_an_error_issue_19() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("fast")).unwrap();
        let clock: Arc<dyn Clock> = Arc::new(sluice_env::SystemClock::new());
        let config = with_tiers(&root.join("fast"), &root.join("typo/capacity"));
        let err = open_tiers(&config, &clock).unwrap_err();
        for fragment in ["capacity.path", "does not exist", "--create"] {
            assert!(err.0.contains(fragment), "{err}");
        }
        assert!(!root.join("typo").exists(), "nothing is created");
        let config = with_tiers(&root.join("nvme/fast"), &root.join("fast"));
        let err = open_tiers(&config, &clock).unwrap_err();
        assert!(err.0.contains("fast.path"), "{err}");
        assert!(!root.join("nvme").exists(), "nothing is created");
        // With `create` (`--create`), it is made, parents and all.
        let mut config = with_tiers(&root.join("fast"), &root.join("typo/capacity"));
        config.capacity.create = true;
        open_tiers(&config, &clock).unwrap();
        assert!(root.join("typo/capacity").is_dir());
        // `create` does not excuse a bad layout, and creates nothing then.
        let mut config = with_tiers(&root.join("fast/new"), &root.join("fast"));
        config.fast.create = true;
        assert!(open_tiers(&config, &clock).is_err());
        assert!(!root.join("fast/new").exists());
    }

    #[test]
    fn tiers_open_as_configured() {
        let dir = tempfile::tempdir().unwrap();
        let clock: Arc<dyn Clock> = Arc::new(sluice_env::SystemClock::new());
        for (device, described) in [
            (Device::Posix, "posix"),
            (Device::Hdd, "hdd"),
            (Device::Ssd, "ssd"),
            (Device::Memory, "memory"),
        ] {
            let tier = TierConfig {
                path: Some(dir.path().join(format!("{device:?}"))),
                device,
                create: true,
                shared_device: None,
            };
            let backend = open_tier("fast", &tier, &clock).unwrap();
            let text = backend.describe();
            assert!(text.contains(described), "{device:?}: {text}");
        }
    }
}
