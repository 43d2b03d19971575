//! What each TOML key may be, in the words of `docs/config.md`: one table
//! for the errors of parsing (a negative size, a fraction where a count
//! goes) and of validation (a value out of range), so every config error
//! names the key and what it allows (issue 19).
//!
//! INVARIANT: every key that `sluice config show` prints, other than the
//! booleans (`true` or `false` says it), has a line here (tested).

use std::str::FromStr;

use crate::{ConfigError, Device, PolicyName};

/// What `key` (`section.name`) may be, or `None` for an unknown key.
pub(crate) fn allowed(key: &str) -> Option<&'static str> {
    const DURATION: &str = "a duration with a unit, like \"500ms\", \"1s\" or \"2min\"";
    Some(match key {
        "fast.path" => {
            "an existing directory (or --create), outside capacity.path and not around it"
        }
        "capacity.path" => {
            "an existing directory (or --create), outside fast.path and not around it"
        }
        "fast.device" | "capacity.device" => "\"posix\", \"hdd\", \"ssd\" or \"memory\"",
        "fast.shared_device" | "capacity.shared_device" => {
            "a file path (the shared emulated disk's state), with device = \"hdd\""
        }
        "log.regions" => "at least 2 (one fills while another flushes)",
        "log.region_size" => {
            "a size above 0 that holds the largest record (log.record_max) and a path \
             record, like \"256MiB\""
        }
        "log.record_max" => "1B to 4GiB - 1, and small enough for log.region_size",
        "log.when_full" => "\"wait\" or \"write-through\"",
        "log.wait_max" => DURATION,
        "log.memory_copy" => "a size, like \"64MiB\"; 0 keeps no copy",
        "policy.name" => "\"cost\", \"ssdup+\", \"ssdup\", \"fast-all\" or \"capacity-only\"",
        "policy.stream_len" => "at least 2",
        "policy.ssdup_high_water" => "within [0, 1], and at least policy.ssdup_low_water",
        "policy.ssdup_low_water" => "within [0, 1], and at most policy.ssdup_high_water",
        "policy.threshold_initial" | "policy.change_fraction" | "policy.change_margin" => {
            "within [0, 1]"
        }
        "policy.threshold_list_max" | "policy.change_window" => "at least 1",
        "policy.cost_seek" | "policy.cost_fast_request" => DURATION,
        "policy.cost_fast_bandwidth" => "bytes per second, above 0, like \"250MB\"",
        "policy.cost_hysteresis" => "within [0, 10]",
        "policy.cost_evidence" => "at least 2",
        "policy.cost_disk_streams" => "0 to 64",
        "policy.cost_disk_idle" => DURATION,
        "policy.cost_profile" => "\"auto\" or \"off\"",
        "flush.idle" => DURATION,
        "flush.run_max" => "a size above 0, like \"4MiB\"",
        "flush.bandwidth" => "bytes per second, like \"100MiB\"; \"0B\" = no cap",
        "flush.age" => "a duration with a unit, like \"30s\"; 0 = only full regions flush",
        "flush.writers" => "1 to 64",
        "flush.write_back_idle" => "a duration with a unit, like \"50ms\"; 0 = never",
        "mount.point" => "an existing directory outside both tiers",
        "mount.threads" => "1 to 256",
        "mount.max_write" => "4KiB to 1MiB",
        "mount.consistency" => "\"close-to-open\", \"node-local\" or \"on-demand\"",
        "bbos.consistency" => "\"close-to-open\" or \"node-local\"",
        "mount.recall_wait" => "a duration above 0 of at most 5min, like \"10s\"",
        "mount.held_mark" => "\"auto\", \"xattr\" or \"sidecar\"",
        "mount.close_sync" => "\"auto\", \"always\" or \"written\"",
        "mount.attr_timeout" => "a duration of at most 60s, like \"1s\"; 0 = ask every time",
        "metrics.listen" => "an address and port, like \"127.0.0.1:9464\"",
        "liu.head" | "liu.body" => "a size above 0, like \"1MiB\"",
        "liu.buffer" => "a size that holds one segment (liu.head + liu.body)",
        "liu.heads" => "a size of at most 2^32 - 1 heads (liu.heads / liu.head)",
        "liu.bodies" => "a size of at most 2^32 - 1 bodies (liu.bodies / liu.body); 0 = heads only",
        "liu.lift_locality" => "within [0, 1]",
        "liu.body_sections" => "1 to 64",
        "liu.workers" => "1 to 256",
        "liu.sharing" => "\"per-file\" or \"paper\"",
        "liu.time_share" => "0 to 8 (0: off)",
        "bbos.meta" => "redb:PATH, a path, or redis[s]://[USER@]HOST[:PORT][/DB][?prefix=NAME]",
        "bbos.redis_password_file" => {
            "a path to a file whose one line is the Redis password, not readable by every user"
        }
        "bbos.redis_tls_ca" => "a path to a PEM file of CA certificates (with rediss://)",
        "bbos.scheme" => "\"bbos\", \"maxbw\", \"maxeff\", \"datawarp\" or \"static\"",
        "bbos.static_percent" => "1 to 100",
        "bbos.eviction" => "\"bbos\", \"bbos-unversioned\", \"lru\" or \"fifo\"",
        "bbos.capacity" | "bbos.chunk" => "a size above 0, like \"4GiB\"",
        "bbos.period" => "a duration above 0, like \"1min\"",
        "bbos.node_mtbf" => "a duration above 0, like \"1825d\"",
        "bbos.window" => "1 to 64",
        "bbos.admit_wait" | "bbos.remote_wait" | "bbos.jobs_refresh" => DURATION,
        "bbos.node_id" => "1 to 128 of A-Z a-z 0-9 . _ -, like \"rack1-node07\"",
        "bbos.write_max" => "bytes per second, at least bbos.write_min",
        "bbos.write_min" => "bytes per second, above 0 and at most bbos.write_max",
        "bbos.demote_max" => "bytes per second, above 0 and at least bbos.demote_min",
        "bbos.demote_min" => "bytes per second, at most bbos.demote_max",
        "bbos.idle_demote" => "bytes per second, above 0",
        _ => return None,
    })
}

/// The TOML key of a key named by the policy crate's `ConfigError`
/// (its keys are its own struct fields).
pub(crate) fn policy_key(key: &str) -> String {
    match key {
        "threshold.initial" => "policy.threshold_initial".to_string(),
        "threshold.list_max" => "policy.threshold_list_max".to_string(),
        "threshold.change_window" => "policy.change_window".to_string(),
        "threshold.change_fraction" => "policy.change_fraction".to_string(),
        "threshold.change_margin" => "policy.change_margin".to_string(),
        // The config checks both marks first, with their own keys.
        "ssdup water marks" => "policy.ssdup_high_water".to_string(),
        // stream_len and the cost model's keys are the TOML names.
        other => format!("policy.{other}"),
    }
}

/// The value named `name` of the enum at `key` (`fast.device`,
/// `policy.name`), as the config file spells it; an error naming what
/// `key` allows otherwise. Flags that take these values read them so.
fn named<T: serde::de::DeserializeOwned>(
    what: &str,
    key: &str,
    name: &str,
) -> Result<T, ConfigError> {
    let deserializer = serde::de::value::StrDeserializer::<serde::de::value::Error>::new(name);
    T::deserialize(deserializer).map_err(|_| {
        let allowed = allowed(key).unwrap_or("see docs/config.md");
        ConfigError(format!("unknown {what} {name:?}: {allowed}"))
    })
}

impl FromStr for Device {
    type Err = ConfigError;
    fn from_str(name: &str) -> Result<Device, ConfigError> {
        named("device", "fast.device", name)
    }
}

impl FromStr for PolicyName {
    type Err = ConfigError;
    fn from_str(name: &str) -> Result<PolicyName, ConfigError> {
        named("policy", "policy.name", name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Config;

    #[test]
    fn devices_and_policies_parse_by_their_config_names() {
        assert_eq!("hdd".parse::<Device>(), Ok(Device::Hdd));
        assert_eq!("memory".parse::<Device>(), Ok(Device::Memory));
        assert_eq!("ssdup+".parse::<PolicyName>(), Ok(PolicyName::SsdupPlus));
        assert_eq!("cost".parse::<PolicyName>(), Ok(PolicyName::Cost));
        let e = "disk".parse::<Device>().unwrap_err().to_string();
        assert_eq!(
            e,
            r#"unknown device "disk": "posix", "hdd", "ssd" or "memory""#
        );
        let e = "ssdup++".parse::<PolicyName>().unwrap_err().to_string();
        assert!(e.starts_with(r#"unknown policy "ssdup++": "cost""#), "{e}");
        // Every name the error lists parses.
        for name in ["posix", "hdd", "ssd", "memory"] {
            assert!(name.parse::<Device>().is_ok(), "{name}");
        }
        for name in ["cost", "ssdup+", "ssdup", "fast-all", "capacity-only"] {
            assert!(name.parse::<PolicyName>().is_ok(), "{name}");
        }
    }

    #[test]
    fn every_printed_key_says_what_it_allows() {
        let mut config = Config::default();
        config.fast.path = Some("/ssd".into());
        config.capacity.path = Some("/hdd".into());
        config.mount.point = Some("/mnt".into());
        config.metrics.listen = Some("127.0.0.1:9464".parse().unwrap());
        config.bbos.meta = Some("rediss://u@h:1".into());
        config.bbos.redis_password_file = Some("/p".into());
        config.bbos.redis_tls_ca = Some("/ca.pem".into());
        let printed: toml::Table = toml::from_str(&config.to_toml()).unwrap();
        for (section, keys) in &printed {
            let keys = keys.as_table().unwrap();
            for (name, value) in keys {
                let key = format!("{section}.{name}");
                assert!(
                    value.is_bool() || allowed(&key).is_some(),
                    "{key} has no allowed values in keys.rs"
                );
            }
        }
    }

    #[test]
    fn the_policy_crate_keys_become_toml_keys() {
        for (policy, toml) in [
            ("stream_len", "policy.stream_len"),
            ("threshold.initial", "policy.threshold_initial"),
            ("threshold.list_max", "policy.threshold_list_max"),
            ("threshold.change_window", "policy.change_window"),
            ("threshold.change_fraction", "policy.change_fraction"),
            ("threshold.change_margin", "policy.change_margin"),
            ("cost_fast_bandwidth", "policy.cost_fast_bandwidth"),
            ("cost_hysteresis", "policy.cost_hysteresis"),
            ("cost_evidence", "policy.cost_evidence"),
            ("cost_disk_streams", "policy.cost_disk_streams"),
            ("ssdup water marks", "policy.ssdup_high_water"),
        ] {
            assert_eq!(policy_key(policy), toml);
            assert!(allowed(toml).is_some(), "{toml}");
        }
    }
}
