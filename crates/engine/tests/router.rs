//! The router (issue 35, deliverable 4): one way in to the engine and the
//! checkpoint stager. Its rules through a mount's namespace are tested in
//! `crates/fuse/tests/volume_rules.rs`; here, the invariant the router
//! states: a handle keeps its class for its whole life, and a path whose
//! file the engine holds stays the engine's, even when a job registered
//! meanwhile makes the path checkpoint-class.

mod ckpt_support;

use std::sync::Arc;

use ckpt_support::*;
use sluice_catalog::Failure;
use sluice_engine::{Consistency, Engine, EngineConfig, LiuBackend, LiuOptions, Router};
use sluice_env::memory::MemBackend;
use sluice_env::{Backend, SystemClock};
use sluice_policy::segments::{Geometry, LiuConfig};

/// An engine over both tiers with `regions` regions of 256 KiB.
fn engine(fast: &Arc<dyn Backend>, capacity: &Arc<dyn Backend>, regions: u32) -> Arc<Engine> {
    let config = EngineConfig {
        regions,
        region_bytes: 256 * KIB,
        record_max_bytes: 16 * 1024,
        ..EngineConfig::default()
    };
    let clock = Arc::new(SystemClock::new());
    Arc::new(Engine::open(Arc::clone(fast), Arc::clone(capacity), clock, config).unwrap())
}

#[test]
fn a_handle_keeps_its_class_when_a_job_claims_its_path() {
    let dir = tempfile::tempdir().unwrap();
    let fast: Arc<dyn Backend> = Arc::new(MemBackend::new());
    let capacity: Arc<dyn Backend> = Arc::new(MemBackend::new());
    capacity.create_dir(&p("ckpt")).unwrap();
    let engine = engine(&fast, &capacity, 3);
    let stager = Arc::new(open(&fast, &capacity, dir.path(), options(1024 * KIB)).unwrap());
    let router = Router::new(
        Arc::clone(&engine),
        Some(Arc::clone(&stager)),
        Consistency::NodeLocal,
    );
    let path = p("ckpt/f");
    let data = bytes(3, 40 * KIB);

    // No job yet: the engine's file, its bytes buffered (node-local).
    assert!(!router.staged(&path));
    let (fh, _) = router.create(&path).unwrap();
    assert!(!Router::staged_handle(fh));
    router.write(fh, 0, &data).unwrap();
    router.close(fh).unwrap();

    // A job now claims the path; the engine holds the file: still its.
    stager
        .register(job("j", 64 * KIB, "ckpt/*", Failure::Nodes(4), 1))
        .unwrap();
    assert!(!router.staged(&path), "the engine holds it");
    let second = router.open(&path, false, false).unwrap();
    assert!(!Router::staged_handle(second));
    assert_eq!(router.read(fh, 0, 1 << 20).unwrap(), data);
    assert_eq!(router.read(second, 0, 1 << 20).unwrap(), data);
    assert_eq!(router.staged_size(&path), None);

    // Released and drained: the engine lets the file go, and the next
    // open is the stager's, reading the bytes the engine wrote back.
    assert_eq!(router.release(second), Some(data.len() as u64));
    assert_eq!(router.release(fh), Some(data.len() as u64));
    engine.drain().unwrap();
    assert!(router.staged(&path));
    let staged = router.open(&path, false, false).unwrap();
    assert!(Router::staged_handle(staged));
    assert_eq!(router.read(staged, 0, 1 << 20).unwrap(), data);
    assert_eq!(router.release(staged), None);
}

/// Whether a checkpoint of a job declaring `job_bytes` is staged on
/// `fast` (a small tier) beside an engine with two 256 KiB regions (the
/// log may still take about 512 KiB), with the router over both when
/// `routed`.
fn staged_beside_the_log(
    fast: &Arc<dyn Backend>,
    capacity: &Arc<dyn Backend>,
    job_bytes: u64,
    routed: bool,
) -> bool {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(fast, capacity, 2);
    assert!(engine.log_growth() > 500 * KIB, "{}", engine.log_growth());
    let stager = Arc::new(open(fast, capacity, dir.path(), options(4096 * KIB)).unwrap());
    stager
        .register(job("j", job_bytes, "ckpt/*", Failure::Nodes(4), 1))
        .unwrap();
    let _router = routed.then(|| {
        Router::new(
            Arc::clone(&engine),
            Some(Arc::clone(&stager)),
            Consistency::NodeLocal,
        )
    });
    let fh = stager.create(&p("ckpt/v1")).unwrap();
    stager.release(fh);
    stager.size(&p("ckpt/v1")).is_some()
}

/// A fast tier of `kib` KiB and a capacity tier with `ckpt/`.
fn tiers(kib: u64) -> (Arc<dyn Backend>, Arc<dyn Backend>) {
    let fast: Arc<dyn Backend> = Arc::new(MemBackend::with_capacity(kib * KIB));
    let capacity: Arc<dyn Backend> = Arc::new(MemBackend::new());
    capacity.create_dir(&p("ckpt")).unwrap();
    (fast, capacity)
}

/// The router shares the fast tier between the two: the stager places
/// checkpoints in the file system's free room less what the log's
/// regions may still grow by, so a checkpoint that would take the room
/// the log needs goes to the capacity tier at its create. Without the
/// router (the stager alone) the same checkpoint is staged.
#[test]
fn the_stager_keeps_the_logs_growth_out_of_its_room() {
    let run = |routed: bool| {
        let (fast, capacity) = tiers(1024);
        staged_beside_the_log(&fast, &capacity, 600 * KIB, routed)
    };
    assert!(
        !run(true),
        "routed: 600 KiB does not fit beside the log's 512 KiB"
    );
    assert!(run(false), "alone: the stager sees 1 MiB free");
}

/// LiU's heads file on the fast tier is the third user the router counts:
/// its slots not yet written stay out of the stager's room too, so the
/// checkpoint that fits beside the log alone goes to the capacity tier
/// when LiU reads the capacity tier.
#[test]
fn the_stager_keeps_lius_heads_growth_out_of_its_room() {
    let run = |liu: bool| {
        let (fast, mut capacity) = tiers(1536);
        if liu {
            let options = LiuOptions {
                policy: LiuConfig {
                    geometry: Geometry::new(64 * KIB, 192 * KIB).unwrap(),
                    buffer_bytes: 512 * KIB,
                    heads_bytes: 640 * KIB,
                    ..LiuConfig::default()
                },
                ..LiuOptions::default()
            };
            capacity = Arc::new(LiuBackend::new(capacity, &fast, options).unwrap());
            assert_eq!(capacity.fast_tier_growth(), 640 * KIB);
        }
        staged_beside_the_log(&fast, &capacity, 500 * KIB, true)
    };
    assert!(
        !run(true),
        "with LiU: 500 KiB does not fit in 1.5 MiB beside the log's 512 KiB and the heads' 640 KiB"
    );
    assert!(run(false), "without: it fits beside the log");
}
