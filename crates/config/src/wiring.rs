//! From a checked config to the engine's typed options: the engine's
//! config, the `cost` model, LiU's and BBOS's options and the catalogue's
//! spec (the daemon's `tiers` opens the backends).

use super::*;

impl Config {
    /// The `cost` policy's model from `[policy]`.
    pub(super) fn cost_model(&self) -> CostModel {
        let p = &self.policy;
        CostModel {
            capacity_seek: p.cost_seek.0,
            fast_bytes_per_s: p.cost_fast_bandwidth.0 as f64,
            fast_request: p.cost_fast_request.0,
            hysteresis: p.cost_hysteresis,
            evidence: p.cost_evidence,
            disk_streams: p.cost_disk_streams,
            disk_idle: p.cost_disk_idle.0,
            new_file_seeks: self.mount.consistency != Consistency::CloseToOpen,
        }
    }

    /// BBOS's options (checked whether or not `bbos.enabled`).
    pub fn bbos_options(&self) -> Result<CkptOptions, ConfigError> {
        let b = &self.bbos;
        if !(1..=100).contains(&b.static_percent) {
            return Err(self.out_of_range("bbos.static_percent"));
        }
        if !(1..=64).contains(&b.window) {
            return Err(self.out_of_range("bbos.window"));
        }
        if b.consistency == Consistency::OnDemand {
            return Err(self.out_of_range("bbos.consistency"));
        }
        if b.node_id
            .as_deref()
            .is_some_and(|id| sluice_engine::ckpt::check_node_id(id).is_err())
        {
            return Err(self.out_of_range("bbos.node_id"));
        }
        for (key, zero) in [
            ("bbos.capacity", b.capacity.0 == 0),
            ("bbos.chunk", b.chunk.0 == 0),
            ("bbos.period", b.period.0.is_zero()),
            ("bbos.node_mtbf", b.node_mtbf.0.is_zero()),
            ("bbos.write_min", b.write_min.0 == 0),
            ("bbos.demote_max", b.demote_max.0 == 0),
            ("bbos.idle_demote", b.idle_demote.0 == 0),
        ] {
            if zero {
                return Err(self.out_of_range(key));
            }
        }
        if b.write_max < b.write_min {
            return Err(self.out_of_step("bbos.write_max", "bbos.write_min"));
        }
        if b.demote_min > b.demote_max {
            return Err(self.out_of_step("bbos.demote_min", "bbos.demote_max"));
        }
        let bandwidths = Bandwidths {
            write_max: b.write_max.0 as f64,
            write_min: b.write_min.0 as f64,
            demote_max: b.demote_max.0 as f64,
            demote_min: b.demote_min.0 as f64,
            idle_demote: b.idle_demote.0 as f64,
        };
        // Checked above in TOML words; a guard against drifting apart.
        bandwidths
            .check()
            .map_err(|e| ConfigError(format!("bbos bandwidths: {e}")))?;
        Ok(CkptOptions {
            scheme: match b.scheme {
                SchemeName::Bbos => Scheme::Bbos,
                SchemeName::Maxbw => Scheme::MaxBw,
                SchemeName::Maxeff => Scheme::MaxEff,
                SchemeName::Datawarp => Scheme::DataWarp,
                SchemeName::Static => Scheme::Static {
                    percent: b.static_percent,
                },
            },
            eviction: match b.eviction {
                EvictionName::Bbos => Eviction::Bbos {
                    version_aware: true,
                },
                EvictionName::BbosUnversioned => Eviction::Bbos {
                    version_aware: false,
                },
                EvictionName::Lru => Eviction::Lru,
                EvictionName::Fifo => Eviction::Fifo,
            },
            bandwidths,
            capacity: b.capacity.0,
            period: b.period.0,
            window: b.window as usize,
            node_mtbf: b.node_mtbf.0,
            admit_wait: b.admit_wait.0,
            chunk_bytes: b.chunk.0,
            background: true,
            node_id: b.node_id.clone(),
            remote_wait: b.remote_wait.0,
            jobs_refresh: b.jobs_refresh.0,
            publish_on_sync: b.consistency == Consistency::CloseToOpen,
        })
    }

    /// Under on-demand, the shared catalogue whose recall doorbell the
    /// mount uses (`bbos.meta` when it names Redis, even with BBOS off);
    /// `None` otherwise: recalls then go through the capacity tier only.
    pub fn recall_doorbell_spec(&self) -> Result<Option<MetaSpec>, ConfigError> {
        if self.mount.consistency != Consistency::OnDemand {
            return Ok(None);
        }
        let Some(m) = &self.bbos.meta else {
            return Ok(None);
        };
        Ok(match parse_meta(m)? {
            MetaSpec::Redis(redis) => Some(self.with_redis_secrets(redis)),
            MetaSpec::Redb { .. } => None,
        })
    }

    /// A Redis catalogue's spec with `bbos.redis_password_file` and
    /// `bbos.redis_tls_ca`.
    fn with_redis_secrets(&self, mut redis: sluice_catalog::RedisSpec) -> MetaSpec {
        redis
            .password_file
            .clone_from(&self.bbos.redis_password_file);
        redis.tls_ca.clone_from(&self.bbos.redis_tls_ca);
        MetaSpec::Redis(redis)
    }

    /// The catalogue BBOS uses: `bbos.meta`, else `FAST/catalog.redb`;
    /// `None` when BBOS is off or the fast tier has no directory and no
    /// `bbos.meta` is given. A Redis spec carries `bbos.redis_password_file`
    /// and `bbos.redis_tls_ca` (`RedisSpec::check` reads them).
    pub fn meta_spec(&self) -> Result<Option<MetaSpec>, ConfigError> {
        if !self.bbos.enabled {
            return Ok(None);
        }
        let spec = match (&self.bbos.meta, &self.fast.path) {
            (Some(m), _) => Some(parse_meta(m)?),
            (None, Some(fast)) if self.fast.device != Device::Memory => Some(MetaSpec::Redb {
                path: fast.join("catalog.redb"),
            }),
            (None, _) => None,
        };
        let b = &self.bbos;
        match spec {
            Some(MetaSpec::Redis(redis)) => Ok(Some(self.with_redis_secrets(redis))),
            other => {
                let redis_key = [
                    ("bbos.redis_password_file", &b.redis_password_file),
                    ("bbos.redis_tls_ca", &b.redis_tls_ca),
                ]
                .into_iter()
                .find_map(|(key, value)| value.as_ref().map(|v| (key, v)));
                if let Some((key, value)) = redis_key {
                    return Err(ConfigError(format!(
                        "{key} = {value:?}: only for a Redis catalogue (bbos.meta = \"redis://…\" or \"rediss://…\"); this one is {}",
                        self.bbos.meta.as_deref().unwrap_or("FAST/catalog.redb (redb)")
                    )));
                }
                Ok(other)
            }
        }
    }

    /// LiU's options (checked whether or not `liu.enabled`).
    pub fn liu_options(&self) -> Result<LiuOptions, ConfigError> {
        let l = &self.liu;
        let defaults = LiuOptions::default();
        for (key, size) in [("liu.head", l.head), ("liu.body", l.body)] {
            if size.0 == 0 {
                return Err(self.out_of_range(key));
            }
        }
        let geometry = Geometry::new(l.head.0, l.body.0).map_err(|e| {
            ConfigError(format!("liu.head = {}, liu.body = {}: {e}", l.head, l.body))
        })?;
        let options = LiuOptions {
            policy: LiuConfig {
                geometry,
                buffer_bytes: l.buffer.0,
                heads_bytes: l.heads.0,
                lift_locality: l.lift_locality,
                sharing: match l.sharing {
                    LiuSharing::PerFile => Sharing::PerFile,
                    LiuSharing::Paper => Sharing::Paper,
                },
                ..defaults.policy
            },
            body_sections: l.body_sections,
            workers: l.workers,
            time_share: l.time_share,
            bodies_bytes: l.bodies.0,
        };
        if l.buffer.0 < geometry.segment_bytes() {
            return Err(ConfigError(format!(
                "liu.buffer = {}: must hold one segment (liu.head + liu.body = {})",
                self.value_of("liu.buffer"),
                ByteSize(geometry.segment_bytes())
            )));
        }
        if !(0.0..=1.0).contains(&l.lift_locality) {
            return Err(self.out_of_range("liu.lift_locality"));
        }
        if !(0.0..=8.0).contains(&l.time_share) {
            return Err(self.out_of_range("liu.time_share"));
        }
        options
            .check()
            .map_err(|e| ConfigError(format!("liu.{e}")))?;
        SegmentBuffer::new(options.policy).map_err(|e| ConfigError(format!("liu: {e}")))?;
        Ok(options)
    }

    /// The engine's configuration.
    pub fn engine_config(&self) -> Result<EngineConfig, ConfigError> {
        let p = &self.policy;
        let policy = match p.name {
            PolicyName::CapacityOnly => RedirectPolicy::CapacityOnly,
            PolicyName::FastAll => RedirectPolicy::FastAll,
            PolicyName::Ssdup => RedirectPolicy::Ssdup {
                high_water: p.ssdup_high_water,
                low_water: p.ssdup_low_water,
            },
            PolicyName::SsdupPlus => RedirectPolicy::SsdupPlus,
            PolicyName::Cost => RedirectPolicy::Cost(self.cost_model()),
        };
        let record_max = u32::try_from(self.log.record_max.0)
            .map_err(|_| self.out_of_range("log.record_max"))?;
        Ok(EngineConfig {
            redirector: RedirectorConfig {
                policy,
                detector: DetectorConfig {
                    stream_len: p.stream_len,
                },
                threshold: ThresholdConfig {
                    initial: p.threshold_initial,
                    list_max: p.threshold_list_max,
                    change_window: p.change_window,
                    change_fraction: p.change_fraction,
                    change_margin: p.change_margin,
                },
            },
            regions: self.log.regions,
            region_bytes: self.log.region_size.0,
            when_full: match self.log.when_full {
                WhenFullConfig::Wait => WhenFull::Wait,
                WhenFullConfig::WriteThrough => WhenFull::WriteThrough,
            },
            wait_max: self.log.wait_max.0,
            flush_gate: FlushGateConfig {
                flush_idle: self.flush.idle.0,
                flush_age: (!self.flush.age.0.is_zero()).then_some(self.flush.age.0),
                hold_while_writing: self.flush.hold_while_writing,
            },
            flush_run_max_bytes: self.flush.run_max.0,
            flush_writers: self.flush.writers,
            record_max_bytes: record_max,
            memory_copy_bytes: self.log.memory_copy.0,
            flush_bandwidth: NonZeroU64::new(self.flush.bandwidth.0),
            write_back_idle: (self.mount.consistency == Consistency::CloseToOpen
                && !self.flush.write_back_idle.0.is_zero())
            .then_some(self.flush.write_back_idle.0),
            close_sync: match self.mount.close_sync {
                CloseSyncConfig::Auto => CloseSync::Auto,
                CloseSyncConfig::Always => CloseSync::Always,
                CloseSyncConfig::Written => CloseSync::Written,
            },
            cost_seek_from_traffic: self.policy.cost_profile == CostProfile::Auto,
            on_demand: (self.mount.consistency == Consistency::OnDemand).then(|| OnDemand {
                node: self.bbos.node_id.clone(),
                recall_wait: self.mount.recall_wait.0,
                // The mount opens it (a connection to the shared
                // catalogue): see `Config::recall_doorbell_spec`.
                doorbell: None,
                mark: match self.mount.held_mark {
                    HeldMarkConfig::Auto => HeldMark::Auto,
                    HeldMarkConfig::Xattr => HeldMark::Xattr,
                    HeldMarkConfig::Sidecar => HeldMark::Sidecar,
                },
            }),
        })
    }
}

/// `bbos.meta`'s value as a catalogue spec, or the error naming the key.
fn parse_meta(m: &str) -> Result<MetaSpec, ConfigError> {
    MetaSpec::parse(m).map_err(|e| ConfigError(format!("bbos.meta = {m:?}: {e}")))
}

impl From<Consistency> for sluice_engine::Consistency {
    /// The engine's router takes the mode as the config spells it.
    fn from(consistency: Consistency) -> sluice_engine::Consistency {
        match consistency {
            Consistency::CloseToOpen => sluice_engine::Consistency::CloseToOpen,
            Consistency::NodeLocal => sluice_engine::Consistency::NodeLocal,
            Consistency::OnDemand => sluice_engine::Consistency::OnDemand,
        }
    }
}
