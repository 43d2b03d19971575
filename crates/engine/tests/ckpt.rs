//! BBOS's checkpoint stager (`sluice_engine::ckpt`): placement, admission,
//! demotion, restart hits, eviction, and crash safety at every sync point.

mod ckpt_support;
mod gate_support;

use std::sync::Arc;
use std::time::Duration;

use ckpt_support::*;
use gate_support::{Gate, Gated, MARKER};

use sluice_catalog::{Failure, Location};
use sluice_engine::{Checkpoints, CkptOptions};
use sluice_env::crash::CrashBackend;
use sluice_env::posix::PosixBackend;
use sluice_env::{Backend, RelPath};
use sluice_policy::bbos::{Eviction, Scheme};

fn read_all(ck: &Checkpoints, path: &RelPath) -> Vec<u8> {
    let fh = ck.open_file(path, false, false).unwrap();
    let data = ck.read(fh, 0, 1 << 30).unwrap();
    ck.release(fh);
    data
}

fn write_file(ck: &Checkpoints, path: &RelPath, data: &[u8]) {
    let fh = ck.create(path).unwrap();
    ck.write(fh, 0, data).unwrap();
    ck.fsync(fh).unwrap();
    ck.release(fh);
}

fn mem() -> Tiers {
    tiers(&["ck", "a", "b", "hot", "cold"])
}

#[test]
fn staged_demoted_cached_then_evicted_by_a_newer_version() {
    let dir = tempfile::tempdir().unwrap();
    let (_fast, _cap, f, c) = mem();
    let ck = open(&f, &c, dir.path(), options(100 * KIB)).unwrap();
    ck.register(job("j", 60 * KIB, "ck/*", Failure::Nodes(4), 1))
        .unwrap();
    assert!(ck.handles(&p("ck/v1")));
    assert!(!ck.handles(&p("other/v1")));
    let v1 = bytes(1, 60 * KIB);
    write_file(&ck, &p("ck/v1"), &v1);
    // Staged: the capacity tier has only the (empty) name.
    assert_eq!(ck.size(&p("ck/v1")), Some(60 * KIB));
    assert_eq!(capacity_bytes(&c, &p("ck/v1")).len(), 0);
    let rec = ck.catalog().ckpt("ck/v1").unwrap().unwrap();
    assert_eq!(rec.location, Location::Staged);
    assert!(ck.demote_next().unwrap());
    assert!(!ck.demote_next().unwrap());
    assert_eq!(capacity_bytes(&c, &p("ck/v1")), v1);
    let s = ck.status();
    assert_eq!((s.staged.0, s.cached.0), (0, 1));
    assert_eq!(s.stats.demoted_bytes, 60 * KIB);
    // A restart read is served by the cached copy.
    assert_eq!(read_all(&ck, &p("ck/v1")), v1);
    assert_eq!(ck.status().stats.restart_hits, 1);
    assert_eq!(ck.status().stats.hit_bytes, 60 * KIB);
    // Version 2 does not fit beside version 1 (S = 100 KiB): v1 is evicted.
    let v2 = bytes(2, 60 * KIB);
    write_file(&ck, &p("ck/v2"), &v2);
    let s = ck.status();
    assert_eq!(s.stats.evictions, 1, "{s:?}");
    assert_eq!(ck.size(&p("ck/v1")), None);
    let rec = ck.catalog().ckpt("ck/v1").unwrap().unwrap();
    assert_eq!(rec.location, Location::Capacity);
    // Now a restart of v1 misses and reads the capacity tier.
    assert_eq!(read_all(&ck, &p("ck/v1")), v1);
    assert_eq!(ck.status().stats.restart_misses, 1);
    assert_eq!(read_all(&ck, &p("ck/v2")), v2);
    assert_eq!(ck.status().stats.restart_hits, 2);
}

#[test]
fn one_job_at_a_time_others_wait_for_their_turn() {
    let dir = tempfile::tempdir().unwrap();
    let (_fast, _cap, f, c) = mem();
    let ck = Arc::new(open(&f, &c, dir.path(), options(1 << 20)).unwrap());
    ck.register(job("a", 10 * KIB, "a/*", Failure::Nodes(1), 2))
        .unwrap();
    ck.register(job("b", 10 * KIB, "b/*", Failure::Nodes(1), 2))
        .unwrap();
    let a1 = ck.create(&p("a/1")).unwrap();
    // The same job joins at once.
    let a2 = ck.create(&p("a/2")).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let ck2 = Arc::clone(&ck);
    let waiter = std::thread::spawn(move || {
        let fh = ck2.create(&p("b/1")).unwrap();
        tx.send(()).unwrap();
        ck2.release(fh);
    });
    assert!(
        rx.recv_timeout(Duration::from_millis(300)).is_err(),
        "job b must wait while job a writes"
    );
    ck.release(a1);
    assert!(
        rx.recv_timeout(Duration::from_millis(300)).is_err(),
        "job a still has a file open"
    );
    ck.release(a2);
    rx.recv_timeout(Duration::from_secs(5))
        .expect("job b runs once job a is done");
    waiter.join().unwrap();
    let s = ck.status().stats;
    assert_eq!((s.admission_waits, s.admission_timeouts), (1, 0));
}

#[test]
fn a_wait_that_runs_out_goes_ahead() {
    let dir = tempfile::tempdir().unwrap();
    let (_fast, _cap, f, c) = mem();
    let mut o = options(1 << 20);
    o.admit_wait = Duration::from_millis(100);
    let ck = open(&f, &c, dir.path(), o).unwrap();
    ck.register(job("a", KIB, "a/*", Failure::Nodes(1), 2))
        .unwrap();
    ck.register(job("b", KIB, "b/*", Failure::Nodes(1), 2))
        .unwrap();
    let a = ck.create(&p("a/1")).unwrap();
    let b = ck.create(&p("b/1")).unwrap();
    let s = ck.status().stats;
    assert_eq!((s.admission_waits, s.admission_timeouts), (1, 1));
    ck.release(a);
    ck.release(b);
    // The scheduler is free again: a third checkpoint runs at once.
    let b2 = ck.create(&p("b/2")).unwrap();
    ck.release(b2);
    assert_eq!(ck.status().stats.admission_waits, 1);
}

#[test]
fn cold_checkpoints_go_straight_to_capacity_and_full_ones_spill() {
    let dir = tempfile::tempdir().unwrap();
    let (_fast, _cap, f, c) = mem();
    let ck = open(&f, &c, dir.path(), options(100 * KIB)).unwrap();
    // "hot" fails often (many nodes), "cold" rarely (a long MTBF).
    ck.register(job("hot", 60 * KIB, "hot/*", Failure::Nodes(1000), 2))
        .unwrap();
    ck.register(job(
        "cold",
        60 * KIB,
        "cold/*",
        Failure::MtbfSecs(10_000_000),
        2,
    ))
    .unwrap();
    write_file(&ck, &p("hot/1"), &bytes(3, 60 * KIB));
    // Staged, not demoted: the cold job's checkpoint would be the first to
    // go, so it bypasses the fast tier.
    let cold = bytes(4, 60 * KIB);
    write_file(&ck, &p("cold/1"), &cold);
    let s = ck.status();
    assert_eq!(s.stats.cold_direct, 1, "{s:?}");
    assert_eq!(ck.size(&p("cold/1")), None);
    assert_eq!(capacity_bytes(&c, &p("cold/1")), cold);
    assert_eq!(s.stats.direct_bytes, 60 * KIB);
    // A second hot checkpoint is hotter than the staged one (same rate,
    // newer), but nothing is evictable yet (not demoted): it spills.
    let hot2 = bytes(5, 60 * KIB);
    write_file(&ck, &p("hot/2"), &hot2);
    assert_eq!(ck.status().stats.spills, 1);
    assert_eq!(capacity_bytes(&c, &p("hot/2")), hot2);
}

#[test]
fn rename_and_unlink_follow_the_copy() {
    let dir = tempfile::tempdir().unwrap();
    let (_fast, _cap, f, c) = mem();
    let ck = open(&f, &c, dir.path(), options(1 << 20)).unwrap();
    ck.register(job("j", 10 * KIB, "ck/**", Failure::Nodes(1), 2))
        .unwrap();
    let data = bytes(6, 10 * KIB);
    write_file(&ck, &p("ck/tmp"), &data);
    ck.rename(&p("ck/tmp"), &p("ck/final")).unwrap();
    c.rename(&p("ck/tmp"), &p("ck/final")).unwrap();
    assert_eq!(ck.size(&p("ck/final")), Some(10 * KIB));
    assert!(ck.catalog().ckpt("ck/final").unwrap().is_some());
    assert!(ck.catalog().ckpt("ck/tmp").unwrap().is_none());
    ck.drain().unwrap();
    assert_eq!(capacity_bytes(&c, &p("ck/final")), data);
    ck.unlink(&p("ck/final")).unwrap();
    assert_eq!(ck.size(&p("ck/final")), None);
    assert!(ck.catalog().ckpt("ck/final").unwrap().is_none());
    // Nothing left of the copy; the node's id stays.
    let left: Vec<String> = f
        .read_dir(&p("ckpt"))
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(left, ["node-id"]);
}

#[test]
fn demotion_uses_copy_file_range_between_plain_directories() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("fast")).unwrap();
    std::fs::create_dir_all(dir.path().join("cap/ck")).unwrap();
    let f: Arc<dyn Backend> = Arc::new(PosixBackend::new(dir.path().join("fast")).unwrap());
    let c: Arc<dyn Backend> = Arc::new(PosixBackend::new(dir.path().join("cap")).unwrap());
    let ck = open(&f, &c, dir.path(), options(1 << 20)).unwrap();
    ck.register(job("j", 100 * KIB, "ck/*", Failure::Nodes(1), 2))
        .unwrap();
    let data = bytes(7, 100 * KIB + 5);
    write_file(&ck, &p("ck/1"), &data);
    ck.drain().unwrap();
    assert_eq!(
        std::fs::read(dir.path().join("cap/ck/1")).unwrap(),
        data,
        "demoted bytes"
    );
    let s = ck.status().stats;
    assert!(s.kernel_copies >= 7, "{s:?}");
}

#[test]
fn a_write_to_a_cached_copy_makes_it_staged_again() {
    let dir = tempfile::tempdir().unwrap();
    let (_fast, _cap, f, c) = mem();
    let ck = open(&f, &c, dir.path(), options(1 << 20)).unwrap();
    ck.register(job("j", 10 * KIB, "ck/*", Failure::Nodes(1), 2))
        .unwrap();
    let mut data = bytes(8, 10 * KIB);
    write_file(&ck, &p("ck/1"), &data);
    ck.drain().unwrap();
    let fh = ck.open_file(&p("ck/1"), true, false).unwrap();
    let more = bytes(9, 3 * KIB);
    ck.write(fh, data.len() as u64, &more).unwrap();
    data.extend_from_slice(&more);
    ck.fsync(fh).unwrap();
    assert_eq!(ck.status().staged.0, 1);
    // Not demoted while open for writing.
    assert!(!ck.demote_next().unwrap());
    ck.release(fh);
    ck.drain().unwrap();
    assert_eq!(capacity_bytes(&c, &p("ck/1")), data);
}

/// A file, the bytes written to it in order, and how many an fsync acked.
struct Written {
    path: RelPath,
    full: Vec<u8>,
    acked: usize,
}

/// Appends in chunks, fsyncs some, demotes between files and reopens a
/// demoted file to append to it. Stops at the first error (a crash).
fn workload(ck: &Checkpoints) -> Vec<Written> {
    let mut out = vec![];
    let _ = (|| -> std::io::Result<()> {
        ck.register(job("j", 64 * KIB, "ck/*", Failure::Nodes(2), 2))?;
        for (k, name) in ["ck/a", "ck/b"].iter().enumerate() {
            out.push(Written {
                path: p(name),
                full: vec![],
                acked: 0,
            });
            let w = out.last_mut().unwrap();
            let fh = ck.create(&w.path)?;
            for i in 0..4u8 {
                let chunk = bytes(10 * k as u8 + i, 16 * KIB);
                ck.write(fh, w.full.len() as u64, &chunk)?;
                w.full.extend_from_slice(&chunk);
                if i % 2 == 1 {
                    ck.fsync(fh)?;
                    w.acked = w.full.len();
                }
            }
            ck.release(fh);
            ck.demote_next()?;
        }
        // Append to the demoted file a: it must become staged again first.
        let w = &mut out[0];
        let fh = ck.open_file(&w.path, true, false)?;
        let chunk = bytes(99, 8 * KIB);
        ck.write(fh, w.full.len() as u64, &chunk)?;
        w.full.extend_from_slice(&chunk);
        ck.fsync(fh)?;
        w.acked = w.full.len();
        ck.release(fh);
        ck.drain()?;
        Ok(())
    })();
    out
}

fn check(ck: &Checkpoints, capacity: &Arc<dyn Backend>, written: &[Written], what: &str) {
    for w in written {
        if w.acked == 0 && ck.size(&w.path).is_none() && capacity.metadata(&w.path).is_err() {
            continue;
        }
        assert!(
            ck.size(&w.path).is_some() || capacity.metadata(&w.path).is_ok(),
            "{what}: {} ({} bytes acked) is gone",
            w.path,
            w.acked
        );
        let got = read_all(ck, &w.path);
        assert!(
            got.len() >= w.acked && w.full.starts_with(&got),
            "{what}: {} has {} bytes, {} acked, not a prefix of what was written",
            w.path,
            got.len(),
            w.acked
        );
    }
    ck.drain()
        .unwrap_or_else(|e| panic!("{what}: drain after recovery: {e}"));
    assert_eq!(ck.status().staged.0, 0, "{what}: all demoted");
    for w in written {
        if w.acked == 0 {
            continue;
        }
        let got = capacity_bytes(capacity, &w.path);
        assert!(
            got.len() >= w.acked && w.full.starts_with(&got),
            "{what}: capacity copy of {} has {} bytes, {} acked",
            w.path,
            got.len(),
            w.acked
        );
    }
}

#[test]
fn an_acknowledged_checkpoint_survives_a_crash_at_every_sync_point() {
    let (fast_points, cap_points) = {
        let dir = tempfile::tempdir().unwrap();
        let (fast, cap, f, c) = mem();
        let ck = open(&f, &c, dir.path(), options(1 << 20)).unwrap();
        let written = workload(&ck);
        assert!(written.iter().all(|w| w.acked == w.full.len()));
        assert_eq!(ck.status().stats.demotions, 3);
        (fast.sync_points(), cap.sync_points())
    };
    assert!(
        fast_points >= 10 && cap_points >= 3,
        "{fast_points} {cap_points}"
    );
    let mut cases = vec![];
    for n in 1..=fast_points {
        cases.push((true, n, false));
    }
    for n in 1..=cap_points {
        cases.push((false, n, false));
        cases.push((false, n, true));
    }
    for (on_fast, n, after) in cases {
        for torn in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let (fast, cap, f, c) = mem();
            fast.set_torn_writes(torn);
            cap.set_torn_writes(torn);
            let (crashing, other) = if on_fast {
                (&fast, &cap)
            } else {
                (&cap, &fast)
            };
            if after {
                crashing.crash_after(n);
            } else {
                crashing.crash_at(n);
            }
            let written = match open(&f, &c, dir.path(), options(1 << 20)) {
                Ok(ck) => {
                    let w = workload(&ck);
                    // Power cut: the other tier loses its unsynced state.
                    other.crash();
                    w
                }
                Err(_) => {
                    other.crash();
                    vec![]
                }
            };
            fast.restart();
            cap.restart();
            let what = format!(
                "crash at {} sync {n} (after {after}, torn {torn})",
                if on_fast { "fast" } else { "capacity" }
            );
            let ck = open(&f, &c, dir.path(), options(1 << 20))
                .unwrap_or_else(|e| panic!("{what}: recovery failed: {e}"));
            check(&ck, &c, &written, &what);
        }
    }
}

#[test]
fn maxbw_never_demotes_while_a_checkpoint_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let (_fast, _cap, f, c) = mem();
    let mut o = options(1 << 20);
    o.scheme = Scheme::MaxBw;
    o.eviction = Eviction::Lru;
    let ck = open(&f, &c, dir.path(), o).unwrap();
    ck.register(job("a", 10 * KIB, "a/*", Failure::Nodes(1), 2))
        .unwrap();
    write_file(&ck, &p("a/1"), &bytes(1, 10 * KIB));
    let fh = ck.create(&p("a/2")).unwrap();
    ck.write(fh, 0, &bytes(2, KIB)).unwrap();
    assert_eq!(
        ck.status().demote_rate,
        0,
        "MaxBW: no demotion under writes"
    );
    ck.release(fh);
    assert!(ck.status().demote_rate > 0);
    ck.drain().unwrap();
    assert_eq!(ck.status().cached.0, 2);
}

#[test]
fn a_copy_being_read_for_a_restart_is_not_evicted() {
    let dir = tempfile::tempdir().unwrap();
    let (_fast, _cap, f, c) = mem();
    let ck = open(&f, &c, dir.path(), options(100 * KIB)).unwrap();
    ck.register(job("j", 60 * KIB, "ck/*", Failure::Nodes(4), 1))
        .unwrap();
    let v1 = bytes(1, 60 * KIB);
    write_file(&ck, &p("ck/v1"), &v1);
    ck.drain().unwrap();
    let reader = ck.open_file(&p("ck/v1"), false, false).unwrap();
    // v2 would evict v1, but a restart is reading it: v2 spills instead.
    write_file(&ck, &p("ck/v2"), &bytes(2, 60 * KIB));
    let s = ck.status().stats;
    assert_eq!((s.evictions, s.spills), (0, 1), "{s:?}");
    assert_eq!(ck.read(reader, 0, 1 << 20).unwrap(), v1);
    ck.release(reader);
    // Released, it is evictable again.
    write_file(&ck, &p("ck/v3"), &bytes(3, 60 * KIB));
    assert_eq!(ck.status().stats.evictions, 1);
}

#[test]
fn an_open_copy_stays_readable_after_unlink() {
    let dir = tempfile::tempdir().unwrap();
    let (_fast, _cap, f, c) = mem();
    let ck = open(&f, &c, dir.path(), options(1 << 20)).unwrap();
    ck.register(job("j", 10 * KIB, "ck/*", Failure::Nodes(1), 2))
        .unwrap();
    let data = bytes(5, 10 * KIB);
    write_file(&ck, &p("ck/1"), &data);
    let reader = ck.open_file(&p("ck/1"), false, false).unwrap();
    let writer = ck.create(&p("ck/2")).unwrap();
    ck.write(writer, 0, &data).unwrap();
    ck.unlink(&p("ck/1")).unwrap();
    ck.unlink(&p("ck/2")).unwrap();
    assert_eq!(ck.read(reader, 0, 1 << 20).unwrap(), data);
    // The unlinked file being written no longer counts as a writer.
    assert_eq!(ck.status().writers, 0);
    ck.write(writer, data.len() as u64, b"tail").unwrap();
    ck.release(reader);
    ck.release(writer);
    assert_eq!(ck.status().staged.0, 0);
}

#[test]
fn copies_recovered_at_open_keep_their_jobs_apart_in_the_cold_ranking() {
    let dir = tempfile::tempdir().unwrap();
    let (_fast, _cap, f, c) = mem();
    {
        let ck = open(&f, &c, dir.path(), options(130 * KIB)).unwrap();
        ck.register(job("hot", 60 * KIB, "a/*", Failure::Nodes(1000), 5))
            .unwrap();
        ck.register(job(
            "cold",
            60 * KIB,
            "b/*",
            Failure::MtbfSecs(10_000_000),
            5,
        ))
        .unwrap();
        ck.register(job("x", 60 * KIB, "ck/*", Failure::Nodes(500), 5))
            .unwrap();
        // cold's copy is its version 2, hot's its version 1.
        write_file(&ck, &p("b/1"), &bytes(1, 60 * KIB));
        ck.drain().unwrap();
        write_file(&ck, &p("b/2"), &bytes(2, 60 * KIB));
        ck.unlink(&p("b/1")).unwrap();
        c.remove_file(&p("b/1")).unwrap();
        write_file(&ck, &p("a/1"), &bytes(3, 60 * KIB));
        ck.drain().unwrap();
    }
    let ck = open(&f, &c, dir.path(), options(130 * KIB)).unwrap();
    assert_eq!(ck.status().cached.0, 2);
    // Room for x: the coldest goes, which is cold's copy (lowest failure
    // rate). hot's version 1 is not superseded by cold's version 2.
    write_file(&ck, &p("ck/1"), &bytes(4, 60 * KIB));
    assert_eq!(ck.size(&p("b/2")), None, "cold's copy evicted");
    assert_eq!(ck.size(&p("a/1")), Some(60 * KIB), "hot's copy kept");
}

/// Under close-to-open (`publish_on_sync`) an fsync of one handle
/// publishes the copy while another handle's write is in flight: the bug
/// feared was a publish that copied the bytes before that write landed
/// and still marked the copy cached (its generation was bumped only
/// before the write), so the writer's own fsync found it cached, copied
/// nothing, and acknowledged bytes the capacity tier never got; an
/// eviction of the cached copy would then have lost them.
#[test]
fn a_publish_during_another_handles_write_leaves_the_copy_staged() {
    let dir = tempfile::tempdir().unwrap();
    let gate = Arc::new(Gate::default());
    let f: Arc<dyn Backend> = Arc::new(Gated::new(Arc::new(CrashBackend::new()), &gate));
    let (_fast, _cap, _, c) = mem();
    let o = CkptOptions {
        publish_on_sync: true,
        ..options(1 << 20)
    };
    let ck = open(&f, &c, dir.path(), o).unwrap();
    ck.register(job("j", 64 * KIB, "ck/*", Failure::Nodes(2), 2))
        .unwrap();
    let first = bytes(1, 16 * KIB);
    let fh1 = ck.create(&p("ck/x")).unwrap();
    ck.write(fh1, 0, &first).unwrap();
    ck.fsync(fh1).unwrap();
    assert_eq!(ck.status().cached.0, 1, "published");
    let fh2 = ck.open_file(&p("ck/x"), true, false).unwrap();
    let (held, go) = gate.arm();
    std::thread::scope(|s| {
        let writer = s.spawn(|| ck.write(fh2, 0, &[MARKER; 4096]));
        held.recv_timeout(Duration::from_secs(10)).unwrap();
        // The write is in flight: this fsync publishes what is there.
        ck.fsync(fh1).unwrap();
        go.send(()).unwrap();
        writer.join().unwrap().unwrap();
    });
    ck.fsync(fh2).unwrap();
    let on_capacity = capacity_bytes(&c, &p("ck/x"));
    assert!(
        on_capacity[..4096].iter().all(|&b| b == MARKER),
        "the fsynced write is on the capacity tier"
    );
    assert!(on_capacity[4096..] == first[4096..]);
    ck.release(fh1);
    ck.release(fh2);
}

/// A stager over a crash-backed fast tier of `fast_bytes` (its file
/// system, whatever `S` says) and the usual capacity tier, with S =
/// `capacity` and job `j` of `job_bytes` over `ck/*`.
fn on_a_small_fast_tier(
    dir: &tempfile::TempDir,
    fast_bytes: u64,
    capacity: u64,
    job_bytes: u64,
) -> (
    Arc<CrashBackend>,
    Arc<dyn Backend>,
    Arc<dyn Backend>,
    Checkpoints,
) {
    let fast = Arc::new(CrashBackend::with_capacity(fast_bytes));
    let f: Arc<dyn Backend> = fast.clone();
    let (_, _, _, c) = mem();
    let ck = open(&f, &c, dir.path(), options(capacity)).unwrap();
    ck.register(job("j", job_bytes, "ck/*", Failure::Nodes(4), 1))
        .unwrap();
    (fast, f, c, ck)
}

/// Rank `rank` of `ranks` writes its blocks of `data` through `fh`:
/// blocks `rank`, `rank + ranks`, ... of `block` bytes each.
fn write_strided(ck: &Checkpoints, fh: u64, data: &[u8], rank: u64, ranks: u64, block: u64) {
    let mut at = rank * block;
    while at < data.len() as u64 {
        let end = (at + block) as usize;
        ck.write(fh, at, &data[at as usize..end])
            .unwrap_or_else(|e| panic!("rank {rank} at {at}: {e}"));
        at += ranks * block;
    }
}

/// A fast tier whose file system holds less than `S` says (shared with
/// the log, or with other users), and a checkpoint larger than its job
/// declared, so placement staged it: when it finds no room mid-write it
/// moves to the capacity tier, and every write lands. (Before, the write
/// failed with ENOSPC although the capacity tier had room.)
#[test]
fn a_staged_checkpoint_the_fast_tier_has_no_room_for_moves_to_the_capacity_tier() {
    let dir = tempfile::tempdir().unwrap();
    let (fast, f, c, ck) = on_a_small_fast_tier(&dir, 200 * KIB, 1024 * KIB, 100 * KIB);
    let data = bytes(1, 600 * KIB);
    let fh = ck.create(&p("ck/v1")).unwrap();
    let reader = ck.open_file(&p("ck/v1"), false, false).unwrap();
    for (i, chunk) in data.chunks(64 * KIB as usize).enumerate() {
        ck.write(fh, i as u64 * 64 * KIB, chunk)
            .unwrap_or_else(|e| panic!("write {i}: {e}"));
    }
    ck.fsync(fh).unwrap();
    // A handle open across the move reads the capacity file too.
    assert_eq!(ck.read(reader, 0, 1 << 30).unwrap(), data);
    ck.release(reader);
    ck.release(fh);
    let s = ck.status();
    assert_eq!((s.stats.full_moves, s.stats.spills), (1, 0), "{s:?}");
    assert!(s.stats.full_moved_bytes > 0 && s.stats.full_moved_bytes < 200 * KIB);
    assert_eq!((s.staged.0, s.cached.0, s.writers), (0, 0, 0), "{s:?}");
    assert_eq!(ck.size(&p("ck/v1")), None, "no copy left on the fast tier");
    assert_eq!(capacity_bytes(&c, &p("ck/v1")), data);
    let rec = ck.catalog().ckpt("ck/v1").unwrap().unwrap();
    assert_eq!(rec.location, Location::Capacity);
    let left: Vec<String> = f
        .read_dir(&p("ckpt"))
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .filter(|n| n.ends_with(".data") || n.ends_with(".rec"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    // The room is the next checkpoint's again.
    let small = bytes(2, 64 * KIB);
    write_file(&ck, &p("ck/v2"), &small);
    assert_eq!(ck.size(&p("ck/v2")), Some(64 * KIB), "staged");
    // A crash now keeps both.
    fast.crash();
    fast.restart();
    drop(ck);
    let ck = open(&f, &c, dir.path(), options(1024 * KIB)).unwrap();
    assert_eq!(read_all(&ck, &p("ck/v1")), data);
    assert_eq!(read_all(&ck, &p("ck/v2")), small);
}

/// Threads writing one checkpoint file through one handle when the fast
/// tier fills: one moves the copy, the others wait for the move and
/// write on to the capacity file; no write fails or is lost.
#[test]
fn writers_of_one_checkpoint_all_land_when_the_fast_tier_fills() {
    let dir = tempfile::tempdir().unwrap();
    // Declared smaller than it is, so it is staged.
    let (_fast, _f, c, ck) = on_a_small_fast_tier(&dir, 256 * KIB, 4096 * KIB, 128 * KIB);
    let data = bytes(3, 1024 * KIB);
    let fh = ck.create(&p("ck/n1")).unwrap();
    let ranks = 4u64;
    let block = 16 * KIB;
    std::thread::scope(|scope| {
        for rank in 0..ranks {
            let (ck, data) = (&ck, &data);
            scope.spawn(move || write_strided(ck, fh, data, rank, ranks, block));
        }
    });
    ck.fsync(fh).unwrap();
    ck.release(fh);
    assert_eq!(ck.status().stats.full_moves, 1);
    assert_eq!(capacity_bytes(&c, &p("ck/n1")), data);
    assert_eq!(read_all(&ck, &p("ck/n1")), data);
}

/// Placement sees the fast tier's file system, not only `S`: a
/// checkpoint the tier has no room for goes to the capacity tier at its
/// create (a spill), not staged to be moved mid-write; one that fits is
/// staged.
#[test]
fn a_checkpoint_the_fast_tier_cannot_hold_spills_at_its_create() {
    let dir = tempfile::tempdir().unwrap();
    let (_fast, _f, c, ck) = on_a_small_fast_tier(&dir, 200 * KIB, 1024 * KIB, 600 * KIB);
    ck.register(job("small", 64 * KIB, "sm/*", Failure::Nodes(4), 1))
        .unwrap();
    c.create_dir(&p("sm")).unwrap();
    let data = bytes(4, 600 * KIB);
    write_file(&ck, &p("ck/v1"), &data);
    // To the capacity tier at its create: a spill, or BBOS's cold
    // ranking's direct placement, which sees the same room.
    let elsewhere = |ck: &Checkpoints| {
        let s = ck.status().stats;
        (s.spills + s.cold_direct, s.full_moves)
    };
    assert_eq!(elsewhere(&ck), (1, 0));
    assert_eq!(ck.size(&p("ck/v1")), None);
    assert_eq!(capacity_bytes(&c, &p("ck/v1")), data);
    // Status shows the room: less than S, as the file system has.
    let room = ck.status().room_bytes;
    assert!(room < 200 * KIB, "{room}");
    write_file(&ck, &p("sm/v1"), &bytes(5, 64 * KIB));
    assert_eq!(ck.size(&p("sm/v1")), Some(64 * KIB), "staged");
    // Others' claim on the tier (the log's growth, given by the router)
    // is kept out of the room too.
    ck.share_fast_tier(Box::new(|| 150 * KIB));
    write_file(&ck, &p("sm/v2"), &bytes(6, 64 * KIB));
    assert_eq!(
        elsewhere(&ck),
        (2, 0),
        "64 KiB did not fit beside the claim"
    );
    assert_eq!(ck.size(&p("sm/v2")), None);
}

/// An N-1 checkpoint (one shared file, every rank opening it): the ranks
/// open the file while it is still empty, and with `O_TRUNC`, while the
/// others write it. It is one checkpoint, written through every handle.
/// (Before, an open for writing of an empty file, or with `O_TRUNC`,
/// always began a new checkpoint and replaced the copy: the handles
/// already open wrote on into the replaced copy, unnamed, and their bytes
/// were lost. The same for a checkpoint written straight to the capacity
/// tier, whose next open staged a new copy over it.)
#[test]
fn ranks_opening_one_checkpoint_file_all_write_it() {
    for (size, capacity) in [(64 * KIB, 1024 * KIB), (600 * KIB, 256 * KIB)] {
        let dir = tempfile::tempdir().unwrap();
        let (_fast, _cap, f, c) = mem();
        let ck = open(&f, &c, dir.path(), options(capacity)).unwrap();
        ck.register(job("j", size, "ck/*", Failure::Nodes(4), 1))
            .unwrap();
        let path = p("ck/n1");
        let ranks = 4u64;
        let block = 4 * KIB;
        // Rank 0 creates it; the others open it empty, one with O_TRUNC.
        let mut handles = vec![ck.create(&path).unwrap()];
        for rank in 1..ranks {
            handles.push(ck.open_file(&path, true, rank == 2).unwrap());
        }
        let data = bytes(9, ranks * block * 4);
        for (rank, &fh) in handles.iter().enumerate() {
            write_strided(&ck, fh, &data, rank as u64, ranks, block);
        }
        for &fh in &handles {
            ck.fsync(fh).unwrap();
            ck.release(fh);
        }
        assert_eq!(ck.status().stats.checkpoints, 1, "one checkpoint");
        assert!(
            read_all(&ck, &path) == data,
            "S {capacity}: every rank's blocks"
        );
        ck.drain().unwrap();
        assert!(
            capacity_bytes(&c, &path) == data,
            "and on the capacity tier"
        );
    }
}
