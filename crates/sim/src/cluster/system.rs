//! The five storage systems an I/O node can run, and the `cost` policy's
//! model of the simulated devices.

use super::*;

/// The storage system an I/O node runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum System {
    /// Unmodified OrangeFS: every write to the HDD.
    Baseline,
    /// OrangeFS-BB: every write to the SSD, one region.
    BurstBuffer,
    /// SSDUP: static water marks, two regions, immediate flush.
    Ssdup,
    /// SSDUP+: adaptive threshold, two regions, traffic-aware flush.
    SsdupPlus,
    /// sluice: policy `cost` with the simulated devices' model
    /// ([`cost_model`]), two regions, traffic-aware flush (as SSDUP+).
    SluiceCost,
}

impl System {
    /// All five, in report order: the paper's four, then sluice.
    pub const ALL: [System; 5] = [
        System::Baseline,
        System::BurstBuffer,
        System::Ssdup,
        System::SsdupPlus,
        System::SluiceCost,
    ];

    /// Name in reports (the paper's names; `sluice` for sluice's own).
    pub fn name(self) -> &'static str {
        match self {
            System::Baseline => "OrangeFS",
            System::BurstBuffer => "OrangeFS-BB",
            System::Ssdup => "SSDUP",
            System::SsdupPlus => "SSDUP+",
            System::SluiceCost => "sluice",
        }
    }

    /// The placement policy of the system on `config`'s devices.
    pub fn policy(self, config: &ClusterConfig) -> RedirectPolicy {
        match self {
            System::Baseline => RedirectPolicy::CapacityOnly,
            System::BurstBuffer => RedirectPolicy::FastAll,
            System::Ssdup => RedirectPolicy::ALL[2],
            System::SsdupPlus => RedirectPolicy::SsdupPlus,
            System::SluiceCost => RedirectPolicy::Cost(cost_model(&config.hdd, &config.ssd)),
        }
    }

    /// Whether the flusher waits for the traffic-aware gate
    /// ([`WriteBuffer::poll_flush`]); the others flush a full region at
    /// once.
    pub fn traffic_aware(self) -> bool {
        matches!(self, System::SsdupPlus | System::SluiceCost)
    }
}

/// The `cost` policy's model for these devices (docs/policy.md): `t_seek`
/// is the HDD's short seek, a track-to-track seek plus half a revolution
/// (seeks within one file are short; the mean rotational delay of the
/// model's uniform rotation); `B_fast` and `t_fast` are the SSD's write
/// bandwidth and per-request latency (one request is served by one
/// channel). Hysteresis and evidence are the policy's defaults. The
/// default devices give [`CostModel::EMULATED`]'s figures (5.17 ms,
/// 250 MB/s, 60 µs).
///
/// A free function, not `CostModel::from_devices`: the policy crate owns
/// `CostModel` and must not depend on the device models.
pub fn cost_model(hdd: &HddConfig, ssd: &SsdConfig) -> CostModel {
    let half_revolution_ms = if hdd.rpm == 0 {
        0.0
    } else {
        30_000.0 / f64::from(hdd.rpm)
    };
    let seek_s = (hdd.seek_track_ms + half_revolution_ms) / 1e3;
    CostModel {
        // A device model out of range is refused by its own validation.
        capacity_seek: Duration::try_from_secs_f64(seek_s).unwrap_or(Duration::ZERO),
        fast_bytes_per_s: ssd.write_bytes_per_s,
        fast_request: ssd.latency,
        ..CostModel::EMULATED
    }
}

impl fmt::Display for System {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
