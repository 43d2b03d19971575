//! Shared definitions of the SIGKILL test: the writer binary
//! (`src/bin/sluice-kill-writer.rs`, which includes this file by path) and
//! the test that kills it (`tests/engine_kill.rs`) must agree on the file,
//! the slots and the bytes. Test support: not part of the engine's API.

use std::time::Duration;

use sluice_policy::detector::DetectorConfig;
use sluice_policy::flush_gate::FlushGateConfig;
use sluice_policy::redirector::RedirectorConfig;

use sluice_engine::EngineConfig;

/// The file written.
pub const FILE: &str = "victim";
/// Bytes per write.
pub const SLOT: u64 = 4096;
/// Slots in the file (a power of two).
const SLOTS: u64 = 1 << 16;

/// Where write `i` goes: a fixed permutation of the slots, so the writes
/// look random and most go to the log.
pub fn slot_offset(i: u64) -> u64 {
    (i.wrapping_mul(40503) % SLOTS) * SLOT
}

/// The bytes of write `i`.
pub fn pattern(i: u64) -> Vec<u8> {
    (0..SLOT)
        .map(|b| (i as u8).wrapping_mul(13).wrapping_add(b as u8) | 1)
        .collect()
}

/// Small regions and short streams, so kills land during flushes and
/// region resets too.
pub fn config() -> EngineConfig {
    EngineConfig {
        redirector: RedirectorConfig {
            detector: DetectorConfig { stream_len: 4 },
            ..RedirectorConfig::default()
        },
        regions: 3,
        region_bytes: 128 * 1024,
        record_max_bytes: 16 * 1024,
        flush_gate: FlushGateConfig {
            flush_idle: Duration::from_millis(1),
            flush_age: None,
            hold_while_writing: false,
        },
        ..EngineConfig::default()
    }
}
