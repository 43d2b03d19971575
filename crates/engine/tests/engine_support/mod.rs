//! Shared by the engine's file tests (`mod engine_support;`): an engine
//! over two tiers with small log regions (1 MiB, records of at most
//! 64 KiB) under a given policy, so a few writes fill a region.

use std::sync::Arc;

use sluice_engine::{Engine, EngineConfig};
use sluice_env::{Backend, SystemClock};
use sluice_policy::redirector::{RedirectPolicy, RedirectorConfig};

/// An engine over `fast` and `capacity` under `policy`, small regions.
pub fn small_engine(
    fast: &Arc<dyn Backend>,
    capacity: &Arc<dyn Backend>,
    policy: RedirectPolicy,
) -> Engine {
    Engine::open(
        Arc::clone(fast),
        Arc::clone(capacity),
        Arc::new(SystemClock::new()),
        small_config(policy),
    )
    .unwrap()
}

/// [`small_engine`]'s configuration.
pub fn small_config(policy: RedirectPolicy) -> EngineConfig {
    EngineConfig {
        redirector: RedirectorConfig {
            policy,
            ..RedirectorConfig::default()
        },
        region_bytes: 1024 * 1024,
        record_max_bytes: 64 * 1024,
        ..EngineConfig::default()
    }
}
