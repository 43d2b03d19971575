//! Taking a [`Status`] snapshot from a running mount: the engine's
//! status, LiU's and the stager's, the FUSE request counters, copied into
//! the views of `sluice-status` (which defines them, their JSON and their
//! text, and knows nothing of the engine). The metrics of [`crate::metrics`]
//! are read from this snapshot and nowhere else.

use std::sync::atomic::Ordering;

use sluice_engine::{Checkpoints, Engine, Incident, LiuBackend};
use sluice_policy::Tier;
pub use sluice_status::snapshot::*;

use sluice_fuse::fs::OpCounters;

/// A snapshot of the mount now: the engine's status, LiU's and the
/// stager's when on, the FUSE request counters, the flush rate the sampler
/// measured.
pub fn take(
    engine: &Engine,
    liu: Option<&LiuBackend>,
    ckpt: Option<&Checkpoints>,
    counters: &OpCounters,
    mountpoint: &str,
    flush_rate: u64,
) -> Status {
    let s = engine.status();
    let c = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    let liu_incidents = liu.map(LiuBackend::incidents);
    let (last_errors, incidents_total) = sluice_engine::incidents::merged(
        [Some(&**engine.incidents()), ckpt.map(|c| &**c.incidents())]
            .into_iter()
            .flatten()
            .chain(liu_incidents.as_deref()),
    );
    Status {
        mountpoint: mountpoint.to_string(),
        fast: tier_status(&**engine.fast_tier(), &engine.fast_tier().health()),
        capacity: tier_status(&**engine.capacity_tier(), &s.capacity_health),
        policy: s.policy.to_string(),
        route: match (s.policy, s.route) {
            ("cost", _) => "per file",
            (_, Tier::Fast) => "fast",
            (_, Tier::Capacity) => "capacity",
        }
        .to_string(),
        last_random_fraction: s.last_percentage,
        threshold: s.threshold,
        streams: s.stats.streams,
        streams_to_fast: s.stats.streams_to_fast,
        disk_deferred_requests: s.disk_deferred_requests,
        new_file_requests: s.new_file_requests,
        cost_seek_us: s
            .cost_seek
            .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX)),
        capacity_fit_seek_us: s
            .capacity_fit
            .map(|f| u64::try_from(f.seek.as_micros()).unwrap_or(u64::MAX)),
        capacity_fit_mb_per_s: s
            .capacity_fit
            .and_then(|f| f.bytes_per_s)
            .map(|rate| rate / 1e6),
        capacity_fit_observations: s.capacity_fit.map(|f| f.observations),
        regions: s
            .regions
            .iter()
            .map(|(st, _)| st.name().to_string())
            .collect(),
        region_used_bytes: s.regions.iter().map(|(_, used)| *used).collect(),
        region_bytes: s.region_bytes,
        buffered_bytes: s.buffered_bytes,
        oldest_buffered_age_s: s.oldest_buffered_age.map(|d| d.as_secs_f64()),
        fast_bytes: s.stats.fast_bytes,
        capacity_bytes: s.stats.capacity_bytes,
        forced_to_log_bytes: s.stats.forced_to_log_bytes,
        write_through_bytes: s.stats.write_through_bytes,
        region_waits: s.stats.waits,
        flushed_bytes: s.stats.flushed_bytes,
        synced_bytes: s.stats.synced_bytes,
        written_back_bytes: s.stats.written_back_bytes,
        fast_read_bytes: s.stats.fast_read_bytes,
        capacity_read_bytes: s.stats.capacity_read_bytes,
        clean_read_bytes: s.stats.clean_read_bytes,
        cached_bytes: s.stats.cached_bytes,
        cache_stale_drops: s.stats.cache_stale_drops,
        memory_copy_bytes: s.stats.memory_copy_bytes,
        memory_copy_hits: s.stats.memory_copy_hits,
        memory_copy_misses: s.stats.memory_copy_misses,
        recalls: s.stats.recalls,
        recall_timeouts: s.stats.recall_timeouts,
        recall_wait_s: std::time::Duration::from_nanos(s.stats.recall_wait_ns).as_secs_f64(),
        recalls_answered: s.stats.recalls_answered,
        on_demand_node: engine.node_name().map(str::to_string),
        held_mark: engine.mark_store().map(|m| m.name().to_string()),
        held_files: engine.held_files() as u64,
        flush_bytes_per_s: flush_rate,
        regions_flushed: s.stats.regions_flushed,
        draining: s.draining,
        flush_errors: s.stats.flush_errors,
        last_flush_error: s.stats.last_flush_error,
        fast_errors: s.stats.fast_errors,
        last_fast_error: s.stats.last_fast_error,
        fast_fallback_bytes: s.stats.fast_fallback_bytes,
        fast_space_warning: s.stats.fast_space_warning,
        corrupt_payloads: s.stats.corrupt_payloads,
        recovered_records: s.stats.recovered_records,
        recovery_records_per_s: s.stats.recovery_records_per_s,
        open_files: s.open_files,
        fuse_reads: c(&counters.reads),
        fuse_read_bytes: c(&counters.read_bytes),
        fuse_writes: c(&counters.writes),
        fuse_write_bytes: c(&counters.write_bytes),
        fuse_fsyncs: c(&counters.fsyncs),
        fuse_fallocates: c(&counters.fallocates),
        fuse_metadata_ops: c(&counters.metadata_ops),
        fuse_errors: c(&counters.errors),
        fuse_passthrough_opens: c(&counters.passthrough_opens),
        fuse_page_cache_opens: c(&counters.page_cache_opens),
        fuse_page_cache_stores: c(&counters.page_cache_stores),
        quarantined: engine
            .quarantined()
            .unwrap_or_default()
            .into_iter()
            .map(|e| QuarantineView {
                bytes: e.bytes(),
                name: e.name,
                path: e.path,
                reason: e.reason,
            })
            .collect(),
        liu: liu.map(liu_view),
        bbos: ckpt.map(ckpt_view),
        files: s
            .files
            .iter()
            .map(|f| FileStatusView {
                path: f.path.clone(),
                fast_bytes: f.fast_bytes,
                capacity_bytes: f.capacity_bytes,
                route: f.route.name().to_string(),
            })
            .collect(),
        last_errors: last_errors.iter().map(incident_view).collect(),
        incidents_total,
    }
}

fn incident_view(incident: &Incident) -> IncidentView {
    IncidentView {
        at: sluice_engine::incidents::utc_rfc3339(incident.at),
        op: incident.op.clone(),
        path: incident.path.clone(),
        tier: incident.tier.clone(),
        errno: incident.errno,
        errno_name: incident.errno_name().map(str::to_string),
        message: incident.message.clone(),
    }
}

fn ckpt_view(c: &Checkpoints) -> CkptStatusView {
    let s = c.status();
    CkptStatusView {
        scheme: s.scheme.to_string(),
        eviction: s.eviction.to_string(),
        catalog: s.catalog,
        node: s.node,
        jobs: s.jobs,
        capacity_bytes: s.capacity_bytes,
        room_bytes: s.room_bytes,
        staged_files: s.staged.0,
        staged_bytes: s.staged.1,
        cached_files: s.cached.0,
        cached_bytes: s.cached.1,
        writers: s.writers,
        dwsf_bytes: s.dwsf_bytes,
        dwpp_bytes: s.dwpp_bytes,
        pattern: s.pattern,
        write_rate: s.write_rate,
        demote_rate: s.demote_rate,
        stats: s.stats,
    }
}

fn liu_view(liu: &LiuBackend) -> LiuStatusView {
    let s = liu.status();
    let c = s.counters;
    LiuStatusView {
        buffered_segments: s.buffered_segments,
        ghost_segments: s.ghost_segments,
        lifted_segments: s.lifted_segments,
        buffer_hits: c.buffer_hits,
        lifted_loads: c.lifted_loads,
        whole_loads: c.whole_loads,
        head_reads: c.head_reads,
        capacity_reads: c.capacity_reads,
        lifts: c.lifts,
        delifts: c.delifts,
        invalidations: c.invalidations,
        head_bytes_read: s.head_bytes_read,
        lifted_bodies: s.lifted_bodies,
        body_bytes_read: s.body_bytes_read,
        load_bytes_skipped: s.load_bytes_skipped,
        time_share_holds: s.time_share_holds,
        time_share_held_s: s.time_share_held_s,
        locality_histogram: c.locality_histogram.to_vec(),
        errors: s.errors,
        last_error: s.last_error,
        files: s
            .files
            .into_iter()
            .map(|(path, f)| LiuFileView {
                path,
                buffer_hits: f.buffer_hits,
                loads: f.loads,
                direct_reads: f.direct_reads,
                lagging_reads: f.lagging_reads,
                refused_loads: f.refused_loads,
                evictions: f.evictions,
                evicted_by_other: f.evicted_by_other,
                evicted_unread: f.evicted_unread,
                read_aheads: f.read_aheads,
                lifts: f.lifts,
            })
            .collect(),
    }
}

/// `b`'s description and space, with `health`.
fn tier_status(b: &dyn sluice_env::Backend, health: &sluice_env::TierHealth) -> TierStatus {
    use sluice_env::TierHealth;
    let space = b.space().ok();
    let since = match health {
        TierHealth::Healthy => None,
        TierHealth::ReadOnly { since, .. } | TierHealth::Lost { since, .. } => {
            Some(sluice_engine::incidents::utc_rfc3339(*since))
        }
    };
    TierStatus {
        describe: b.describe(),
        total_bytes: space.map_or(0, |s| s.total_bytes),
        free_bytes: space.map_or(0, |s| s.free_bytes),
        state: health.name().to_string(),
        state_cause: health.cause().map(str::to_string),
        state_since: since,
    }
}
