//! Checks of a parsed config that serde cannot express: ranges between
//! keys, the log's and the policy's settings, and the tiers' layout.

use super::*;

impl Config {
    /// Check everything that parsing cannot: tier paths present, ranges.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (name, tier) in [("fast", &self.fast), ("capacity", &self.capacity)] {
            if tier.device != Device::Memory && tier.path.is_none() {
                return Err(ConfigError(format!(
                    "{name}.path is not set: give it in the config or with --{name} DIR"
                )));
            }
        }
        for (name, tier) in [("fast", &self.fast), ("capacity", &self.capacity)] {
            if tier.shared_device.is_some() && tier.device != Device::Hdd {
                return Err(ConfigError(format!(
                    "{name}.shared_device is set but {name}.device is not \"hdd\": \
                     only an emulated disk can be shared; set {name}.device = \"hdd\" \
                     or remove {name}.shared_device"
                )));
            }
        }
        if let (Some(f), Some(c)) = (&self.fast.path, &self.capacity.path) {
            if f == c {
                return Err(ConfigError(format!(
                    "fast.path and capacity.path are the same directory ({}); they must differ",
                    f.display()
                )));
            }
        }
        self.check_log()?;
        if self.flush.run_max.0 == 0 {
            return Err(self.out_of_range("flush.run_max"));
        }
        if !(1..=64).contains(&self.flush.writers) {
            return Err(self.out_of_range("flush.writers"));
        }
        if !(1..=256).contains(&self.mount.threads) {
            return Err(self.out_of_range("mount.threads"));
        }
        if self.mount.attr_timeout.0 > std::time::Duration::from_secs(60) {
            return Err(self.out_of_range("mount.attr_timeout"));
        }
        let recall_wait = self.mount.recall_wait.0;
        if recall_wait.is_zero() || recall_wait > std::time::Duration::from_secs(300) {
            return Err(self.out_of_range("mount.recall_wait"));
        }
        if !(4096..=(1 << 20)).contains(&self.mount.max_write.0) {
            return Err(self.out_of_range("mount.max_write"));
        }
        self.check_policy()?;
        self.liu_options()?;
        self.bbos_options()?;
        if let Some(MetaSpec::Redis(redis)) = self.meta_spec()? {
            // The password and CA files, read now rather than at mount.
            redis.check().map_err(|e| ConfigError(e.to_string()))?;
        }
        // Every range the engine checks was checked above in TOML words;
        // this only guards against the two drifting apart.
        self.engine_config()?
            .validate()
            .map_err(|e| ConfigError(format!("engine config: {e}")))
    }

    /// The `[log]` keys, which the engine would report by its field names.
    pub(super) fn check_log(&self) -> Result<(), ConfigError> {
        let log = &self.log;
        if log.regions < 2 {
            return Err(self.out_of_range("log.regions"));
        }
        let record_max = match u32::try_from(log.record_max.0) {
            Ok(n) if n > 0 => n,
            _ => return Err(self.out_of_range("log.record_max")),
        };
        // The engine's rule: a record and the path record before it fit.
        let largest = record_len(record_max) + record_len(MAX_PATH_BYTES as u32);
        if log.region_size.0 < largest {
            return Err(ConfigError(format!(
                "log.region_size = {}: must hold the largest record (log.record_max = {}) \
                 and a path record: at least {}; raise log.region_size or lower log.record_max",
                self.value_of("log.region_size"),
                self.value_of("log.record_max"),
                ByteSize(largest)
            )));
        }
        Ok(())
    }

    /// The `[policy]` keys, whatever `policy.name` is (a bad value is a
    /// mistake even while another policy is in use): the static water
    /// marks here, the rest by the policy crate's checks with its keys
    /// turned into TOML keys.
    pub(super) fn check_policy(&self) -> Result<(), ConfigError> {
        let p = &self.policy;
        for (key, mark) in [
            ("policy.ssdup_high_water", p.ssdup_high_water),
            ("policy.ssdup_low_water", p.ssdup_low_water),
        ] {
            if !(0.0..=1.0).contains(&mark) {
                return Err(self.out_of_range(key));
            }
        }
        if p.ssdup_low_water > p.ssdup_high_water {
            return Err(self.out_of_step("policy.ssdup_low_water", "policy.ssdup_high_water"));
        }
        let in_toml_words = |e: detector::ConfigError| {
            let key = keys::policy_key(e.key);
            ConfigError(format!(
                "{key} = {}: must be {}",
                self.value_of(&key),
                e.expected
            ))
        };
        let redirector = self.engine_config()?.redirector;
        redirector.detector.validate().map_err(in_toml_words)?;
        redirector.threshold.validate().map_err(in_toml_words)?;
        self.cost_model().validate().map_err(in_toml_words)?;
        redirector.validate().map_err(in_toml_words)
    }

    /// Check where the tiers and the mount point (when `mount.point` is
    /// set) are, as the kernel resolves them: each tier's directory exists
    /// (or its `create` is set), and no two of them are the same directory
    /// or one inside the other (see the `layout` module). Reads the file
    /// system; creates nothing.
    pub fn check_layout(&self) -> Result<(), ConfigError> {
        let mut places = Vec::new();
        for (key, tier) in [("fast.path", &self.fast), ("capacity.path", &self.capacity)] {
            let Some(path) = tier
                .path
                .as_deref()
                .filter(|_| tier.device != Device::Memory)
            else {
                continue;
            };
            let place = layout::Place::new(key, path)?;
            if place.exists && !place.resolved.is_dir() {
                return Err(ConfigError(format!(
                    "{key} {} is not a directory",
                    path.display()
                )));
            }
            places.push(place);
        }
        if let Some(point) = &self.mount.point {
            let place = layout::Place::new("mount.point", point)?;
            if !place.resolved.is_dir() {
                return Err(ConfigError(format!(
                    "mount.point {} is not a directory: create it (mkdir) first",
                    point.display()
                )));
            }
            places.push(place);
        }
        layout::check(&places)?;
        for place in &places {
            let create = match place.key {
                "fast.path" => self.fast.create,
                "capacity.path" => self.capacity.create,
                _ => continue,
            };
            if !place.exists && !create {
                return Err(layout::missing(place.key, &place.given));
            }
        }
        Ok(())
    }
}
