//! `fallocate` through the engine (issue 37): every mode over buffered
//! bytes against a byte model (memory and POSIX tiers), the bug feared
//! most — a punched or zeroed range brought back by a later flush or by
//! recovery — and a crash at every sync point of either tier while
//! writes, fallocates and fsyncs alternate: the file recovers to the state
//! after its last acknowledged operation (with some of the later ones),
//! never to one with bytes an acknowledged punch removed.

use std::sync::Arc;

use sluice_engine::{Engine, EngineConfig};
use sluice_env::crash::CrashBackend;
use sluice_env::memory::MemBackend;
use sluice_env::posix::PosixBackend;
use sluice_env::{Allocate, Backend, OpenOptions, RelPath, SystemClock};
use sluice_policy::redirector::{RedirectPolicy, RedirectorConfig};

const SLOT: u64 = 4096;

/// Every write to the log, regions large enough that nothing flushes
/// unless asked: the bytes a fallocate meets are buffered.
fn config() -> EngineConfig {
    EngineConfig {
        redirector: RedirectorConfig {
            policy: RedirectPolicy::FastAll,
            ..RedirectorConfig::default()
        },
        regions: 2,
        region_bytes: 4 * 1024 * 1024,
        ..EngineConfig::default()
    }
}

fn open(fast: &Arc<dyn Backend>, capacity: &Arc<dyn Backend>) -> std::io::Result<Engine> {
    Engine::open(
        Arc::clone(fast),
        Arc::clone(capacity),
        Arc::new(SystemClock::new()),
        config(),
    )
}

fn pattern(i: u64) -> Vec<u8> {
    (0..SLOT)
        .map(|b| (i as u8).wrapping_mul(31).wrapping_add(b as u8) | 1)
        .collect()
}

#[derive(Clone, Copy, Debug)]
enum Op {
    /// Write `pattern(n)` at slot `slot`.
    Write { slot: u64, n: u64 },
    /// `fallocate` of slots `[slot, slot + slots)`.
    Fallocate {
        mode: Allocate,
        slot: u64,
        slots: u64,
    },
    /// `fsync`: every operation before it is acknowledged.
    Fsync,
}

/// The model: what each mode does to a file's bytes (written here from
/// fallocate(2)'s man page, apart from the env crate's own version).
fn apply(model: &mut Vec<u8>, op: Op) {
    match op {
        Op::Write { slot, n } => {
            let at = (slot * SLOT) as usize;
            if model.len() < at + SLOT as usize {
                model.resize(at + SLOT as usize, 0);
            }
            model[at..at + SLOT as usize].copy_from_slice(&pattern(n));
        }
        Op::Fallocate { mode, slot, slots } => {
            let (at, end) = ((slot * SLOT) as usize, ((slot + slots) * SLOT) as usize);
            let len = model.len();
            match mode {
                Allocate::Space { keep_size } => {
                    if !keep_size && end > len {
                        model.resize(end, 0);
                    }
                }
                Allocate::PunchHole => model[at.min(len)..end.min(len)].fill(0),
                Allocate::ZeroRange { keep_size } => {
                    model[at.min(len)..end.min(len)].fill(0);
                    if !keep_size && end > len {
                        model.resize(end, 0);
                    }
                }
                Allocate::CollapseRange => {
                    model.drain(at..end);
                }
                Allocate::InsertRange => {
                    model.splice(at..at, std::iter::repeat_n(0, end - at));
                }
            }
        }
        Op::Fsync => {}
    }
}

/// Writes land in the log, then a fallocate of each mode meets them
/// (punches and zeros right over bytes just written), each step fsynced.
fn ops() -> Vec<Op> {
    use Allocate::*;
    let w = |slot, n| Op::Write { slot, n };
    let f = |mode, slot, slots| Op::Fallocate { mode, slot, slots };
    let mut ops: Vec<Op> = [5, 0, 7, 2, 4, 1, 6, 3].iter().map(|&s| w(s, s)).collect();
    ops.push(Op::Fsync);
    ops.extend([w(2, 20), w(3, 21), f(PunchHole, 2, 2), Op::Fsync]);
    ops.extend([w(5, 22), f(ZeroRange { keep_size: false }, 4, 6), Op::Fsync]);
    ops.extend([w(1, 23), w(6, 24), f(CollapseRange, 1, 1), Op::Fsync]);
    ops.extend([w(0, 25), w(7, 26), f(InsertRange, 3, 2), Op::Fsync]);
    ops.extend([w(8, 27), f(Space { keep_size: false }, 12, 2), Op::Fsync]);
    ops.extend([
        w(9, 28),
        f(Space { keep_size: true }, 14, 2),
        f(ZeroRange { keep_size: true }, 9, 3),
        Op::Fsync,
    ]);
    ops.extend([w(3, 29), f(PunchHole, 0, 16), w(4, 30), Op::Fsync]);
    ops
}

/// The model after each prefix of `ops`: `states[i]` after the first `i`.
fn states(ops: &[Op]) -> Vec<Vec<u8>> {
    let mut model = Vec::new();
    let mut states = vec![model.clone()];
    for &op in ops {
        apply(&mut model, op);
        states.push(model.clone());
    }
    states
}

/// Run `ops` on a new file `path`; after each operation (when `check`)
/// the file must read as the model. Returns how many operations an fsync
/// acknowledged before the first failure, and how many were issued (the
/// failed one included).
fn run(engine: &Engine, path: &RelPath, ops: &[Op], check: Option<&[Vec<u8>]>) -> (usize, usize) {
    let Ok(id) = engine.create(path) else {
        return (0, 0);
    };
    let mut acknowledged = 0;
    for (i, &op) in ops.iter().enumerate() {
        let done = match op {
            Op::Write { slot, n } => engine.write(id, slot * SLOT, &pattern(n)),
            Op::Fallocate { mode, slot, slots } => {
                engine.fallocate(id, mode, slot * SLOT, slots * SLOT)
            }
            Op::Fsync => engine.fsync(id),
        };
        if done.is_err() {
            return (acknowledged, i + 1);
        }
        if matches!(op, Op::Fsync) {
            acknowledged = i + 1;
        }
        if let Some(states) = check {
            let got = read_all(engine, id);
            assert!(
                got == states[i + 1],
                "after op {i} ({op:?}): {}",
                differs(&got, &states[i + 1])
            );
        }
    }
    engine.release(id);
    (acknowledged, ops.len())
}

/// Whether `got` is `from` with some of `ops` applied, in order (a crash
/// keeps any of the changes not yet acknowledged, each whole).
fn some_of_applied(from: &[u8], ops: &[Op], got: &[u8]) -> bool {
    assert!(ops.len() <= 12, "{} operations to choose from", ops.len());
    (0u32..1 << ops.len()).any(|chosen| {
        let mut model = from.to_vec();
        for (i, &op) in ops.iter().enumerate() {
            if chosen & (1 << i) != 0 {
                apply(&mut model, op);
            }
        }
        model == got
    })
}

fn read_all(engine: &Engine, id: sluice_policy::FileId) -> Vec<u8> {
    engine.read(id, 0, u64::MAX / 2).unwrap()
}

fn differs(got: &[u8], want: &[u8]) -> String {
    if got.len() != want.len() {
        return format!("{} bytes, the model has {}", got.len(), want.len());
    }
    let at = got.iter().zip(want).position(|(a, b)| a != b).unwrap_or(0);
    format!(
        "first difference at byte {at} (slot {}): {} where the model has {}",
        at as u64 / SLOT,
        got[at],
        want[at]
    )
}

fn capacity_bytes(capacity: &dyn Backend, path: &RelPath) -> Vec<u8> {
    let f = capacity.open(path, OpenOptions::default()).unwrap();
    let mut buf = vec![0; f.len().unwrap() as usize];
    f.read_full_at(&mut buf, 0).unwrap();
    buf
}

fn tiers_memory() -> (
    Arc<dyn Backend>,
    Arc<dyn Backend>,
    Option<tempfile::TempDir>,
) {
    (
        Arc::new(MemBackend::new()),
        Arc::new(MemBackend::new()),
        None,
    )
}

fn tiers_posix() -> (
    Arc<dyn Backend>,
    Arc<dyn Backend>,
    Option<tempfile::TempDir>,
) {
    let dir = tempfile::tempdir().unwrap();
    for tier in ["fast", "capacity"] {
        std::fs::create_dir(dir.path().join(tier)).unwrap();
    }
    let fast = PosixBackend::new(dir.path().join("fast")).unwrap();
    let capacity = PosixBackend::new(dir.path().join("capacity")).unwrap();
    (Arc::new(fast), Arc::new(capacity), Some(dir))
}

/// The bug feared most: a punch over buffered bytes answered from the
/// capacity file alone, so the bytes still read back, and the next flush
/// or a recovery writes them over the hole.
#[test]
fn a_punched_range_is_not_resurrected_by_a_flush_or_by_recovery() {
    let path = RelPath::new("f").unwrap();
    for (what, make) in [
        ("memory", tiers_memory as fn() -> _),
        ("posix", tiers_posix),
    ] {
        let (fast, capacity, _dir) = make();
        let engine = open(&fast, &capacity).unwrap();
        let id = engine.create(&path).unwrap();
        for slot in 0..4 {
            engine.write(id, slot * SLOT, &pattern(slot)).unwrap();
        }
        engine.fsync(id).unwrap();
        assert_eq!(engine.buffered_bytes(), 4 * SLOT, "{what}: in the log");
        engine
            .fallocate(id, Allocate::PunchHole, SLOT, 2 * SLOT)
            .unwrap();
        let zeros = vec![0; 2 * SLOT as usize];
        assert_eq!(engine.read(id, SLOT, 2 * SLOT).unwrap(), zeros, "{what}");
        assert_eq!(engine.read(id, 0, SLOT).unwrap(), pattern(0), "{what}");
        // Restart without a drain: recovery replays the log.
        engine.fsync(id).unwrap();
        engine.release(id);
        engine.close();
        let engine = open(&fast, &capacity).unwrap();
        let id = engine.open_file(&path).unwrap();
        assert_eq!(
            engine.read(id, SLOT, 2 * SLOT).unwrap(),
            zeros,
            "{what}: recovery brought punched bytes back"
        );
        assert_eq!(engine.read(id, 3 * SLOT, SLOT).unwrap(), pattern(3));
        // A zeroed range the same way, then a flush of everything.
        engine.write(id, 0, &pattern(9)).unwrap();
        engine
            .fallocate(id, Allocate::ZeroRange { keep_size: true }, 0, SLOT)
            .unwrap();
        engine.release(id);
        engine.drain().unwrap();
        let on_capacity = capacity_bytes(capacity.as_ref(), &path);
        let mut want = [pattern(0), pattern(1), pattern(2), pattern(3)].concat();
        want[..3 * SLOT as usize].fill(0);
        assert!(
            on_capacity == want,
            "{what}: after the drain: {}",
            differs(&on_capacity, &want)
        );
        engine.close();
    }
}

/// Every mode over buffered bytes reads as the model after each
/// operation, on memory and POSIX tiers (ext4, or whatever holds the temp
/// directory: a mode it refuses fails the test), after a restart and, on
/// the capacity tier alone, after a drain.
#[test]
fn every_mode_over_buffered_bytes_reads_as_the_model() {
    let path = RelPath::new("f").unwrap();
    let ops = ops();
    let states = states(&ops);
    for (what, make) in [
        ("memory", tiers_memory as fn() -> _),
        ("posix", tiers_posix),
    ] {
        let (fast, capacity, _dir) = make();
        let engine = open(&fast, &capacity).unwrap();
        let (acknowledged, _) = run(&engine, &path, &ops, Some(&states));
        assert_eq!(acknowledged, ops.len(), "{what}");
        assert!(
            engine.buffered_bytes() > 0,
            "{what}: the last write is buffered"
        );
        engine.close();
        let engine = open(&fast, &capacity).unwrap();
        let id = engine.open_file(&path).unwrap();
        let last = states.last().unwrap();
        let got = read_all(&engine, id);
        assert!(
            got == *last,
            "{what}: after a restart: {}",
            differs(&got, last)
        );
        engine.release(id);
        engine.drain().unwrap();
        let got = capacity_bytes(capacity.as_ref(), &path);
        assert!(
            got == *last,
            "{what}: after the drain: {}",
            differs(&got, last)
        );
        engine.close();
    }
}

/// A mode refused by the capacity tier is refused with its errno, and a
/// request Linux refuses (a collapse reaching the end) changes nothing,
/// buffered bytes included.
#[test]
fn refused_requests_change_nothing() {
    let path = RelPath::new("f").unwrap();
    let (fast, capacity, _dir) = tiers_memory();
    let engine = open(&fast, &capacity).unwrap();
    let id = engine.create(&path).unwrap();
    engine
        .write(id, 0, &[pattern(0), pattern(1)].concat())
        .unwrap();
    let e = engine
        .fallocate(id, Allocate::CollapseRange, SLOT, SLOT)
        .unwrap_err();
    assert_eq!(sluice_env::raw_os_error(&e), Some(EINVAL), "{e}");
    let e = engine.fallocate(id, Allocate::PunchHole, 0, 0).unwrap_err();
    assert_eq!(sluice_env::raw_os_error(&e), Some(EINVAL), "{e}");
    assert_eq!(engine.buffered_bytes(), 2 * SLOT, "nothing written back");
    assert_eq!(
        engine.read(id, 0, 2 * SLOT).unwrap(),
        [pattern(0), pattern(1)].concat()
    );
    engine.release(id);
    engine.close();
}

const EINVAL: i32 = 22;

/// A crash at every sync point of either tier (and a power cut of both)
/// while writes, fallocates of every mode and fsyncs alternate: the file
/// recovers to the model after its last acknowledged operation with some
/// of the operations issued since applied (a crash may keep any of the
/// changes not yet acknowledged, each whole, as a file system may), never
/// to a state with bytes an acknowledged punch or zero removed; a drain
/// then puts that same state on the capacity tier.
#[test]
fn every_acknowledged_fallocate_survives_a_crash_at_every_sync_point_of_either_tier() {
    let path = RelPath::new("f").unwrap();
    let ops = ops();
    let states = states(&ops);
    let run_crashing = |crash: &dyn Fn(&CrashBackend, &CrashBackend), torn: bool| {
        let fast = Arc::new(CrashBackend::new());
        let capacity = Arc::new(CrashBackend::new());
        // Torn log tails only: a torn write on the capacity tier tears a
        // write not yet acknowledged in place (POSIX allows it, and the
        // model of whole operations cannot say it); acknowledged bytes
        // under torn capacity writes are engine_recovery.rs's tests.
        fast.set_torn_writes(torn);
        crash(&fast, &capacity);
        let (f, c): (Arc<dyn Backend>, Arc<dyn Backend>) = (fast.clone(), capacity.clone());
        let (acknowledged, issued) = match open(&f, &c) {
            Ok(engine) => {
                let done = run(&engine, &path, &ops, None);
                engine.close();
                done
            }
            Err(_) => (0, 0),
        };
        fast.crash();
        capacity.crash();
        fast.restart();
        capacity.restart();
        (f, c, acknowledged, issued)
    };
    let (fast_total, capacity_total) = {
        let fast = Arc::new(CrashBackend::new());
        let capacity = Arc::new(CrashBackend::new());
        let (f, c): (Arc<dyn Backend>, Arc<dyn Backend>) = (fast.clone(), capacity.clone());
        let engine = open(&f, &c).unwrap();
        assert_eq!(run(&engine, &path, &ops, Some(&states)).0, ops.len());
        engine.close();
        (fast.sync_points(), capacity.sync_points())
    };
    assert!(
        fast_total >= 8 && capacity_total >= 8,
        "the workload syncs both tiers: {fast_total} {capacity_total}"
    );
    let check = |f: &Arc<dyn Backend>,
                 c: &Arc<dyn Backend>,
                 (acknowledged, issued): (usize, usize),
                 what: &str| {
        let engine = open(f, c).unwrap_or_else(|e| panic!("{what}: recovery failed: {e}"));
        let got = match engine.open_file(&path) {
            Ok(id) => {
                let got = read_all(&engine, id);
                engine.release(id);
                got
            }
            Err(e) => {
                assert_eq!(acknowledged, 0, "{what}: acknowledged file lost: {e}");
                return;
            }
        };
        assert!(
            some_of_applied(&states[acknowledged], &ops[acknowledged..issued], &got),
            "{what}: {acknowledged} operations acknowledged, {issued} issued, but the file \
             is the acknowledged state with no choice of the others applied: {}",
            differs(&got, &states[acknowledged])
        );
        engine.drain().unwrap();
        assert_eq!(capacity_bytes(c.as_ref(), &path), got, "{what}: drained");
        engine.close();
    };
    for torn in [false, true] {
        for n in 1..=fast_total {
            let (f, c, acknowledged, issued) = run_crashing(&|fast, _| fast.crash_at(n), torn);
            let what = format!("crash at fast sync {n} (torn {torn})");
            check(&f, &c, (acknowledged, issued), &what);
        }
        for n in 1..=capacity_total {
            for after in [false, true] {
                let (f, c, acknowledged, issued) = run_crashing(
                    &|_, capacity| {
                        if after {
                            capacity.crash_after(n)
                        } else {
                            capacity.crash_at(n)
                        }
                    },
                    torn,
                );
                let what = format!("crash at capacity sync {n} (torn {torn}, after {after})");
                check(&f, &c, (acknowledged, issued), &what);
            }
        }
    }
}

/// Two slots of `f` written and fsynced through a log whose writes a
/// fault rule can fail.
fn two_slots_buffered_over_a_faulty_log() -> (
    Arc<sluice_env::fault::FaultBackend>,
    Arc<dyn Backend>,
    Engine,
    sluice_policy::FileId,
    RelPath,
) {
    let path = RelPath::new("f").unwrap();
    let faulty = Arc::new(sluice_env::fault::FaultBackend::new(Arc::new(
        MemBackend::new(),
    )));
    let fast: Arc<dyn Backend> = faulty.clone();
    let capacity: Arc<dyn Backend> = Arc::new(MemBackend::new());
    let engine = open(&fast, &capacity).unwrap();
    let id = engine.create(&path).unwrap();
    engine.write(id, 0, &pattern(0)).unwrap();
    engine.write(id, SLOT, &pattern(1)).unwrap();
    engine.fsync(id).unwrap();
    (faulty, capacity, engine, id, path)
}

/// When the fast tier keeps failing, the write-back's clean record is
/// refused and the regions holding the written-back bytes cannot be reset
/// either (degrade.rs): the bytes stay indexed and a later flush would
/// write them again, so a punch over them must fail and leave the
/// capacity file unpunched, not punch under bytes that come back.
#[test]
fn a_punch_fails_and_changes_nothing_when_the_log_keeps_failing() {
    use sluice_env::fault::{FaultOp, FaultRule};
    let (faulty, capacity, engine, id, path) = two_slots_buffered_over_a_faulty_log();
    // A device refusing every write to the log: neither the clean record
    // nor the header that retires a flushed region can be written.
    faulty.inject(FaultRule {
        path_prefix: Some("log/".to_string()),
        ..FaultRule::new(FaultOp::Write, 5)
    });
    let e = engine
        .fallocate(id, Allocate::PunchHole, 0, SLOT)
        .unwrap_err();
    assert!(e.to_string().contains("fallocate f"), "{e}");
    assert_eq!(engine.read(id, 0, SLOT).unwrap(), pattern(0), "not punched");
    assert_eq!(
        capacity_bytes(capacity.as_ref(), &path),
        [pattern(0), pattern(1)].concat(),
        "written back, not punched"
    );
    faulty.clear();
    engine.release(id);
    engine.drain().unwrap();
    assert_eq!(
        capacity_bytes(capacity.as_ref(), &path),
        [pattern(0), pattern(1)].concat()
    );
    engine.close();
}

/// The fsx failure of the full-fast-tier run: the log is full when a
/// punch over buffered bytes writes them back, so the clean record is
/// refused (ENOSPC). The punch must not fail for that: it waits until the
/// regions holding the bytes are flushed and reset (which frees room),
/// then punches; neither a drain nor a recovery brings the bytes back.
#[test]
fn a_punch_over_bytes_whose_clean_record_the_full_log_refused_waits_for_their_regions() {
    use sluice_env::fault::{FaultOp, FaultRule};
    let (faulty, capacity, engine, id, path) = two_slots_buffered_over_a_faulty_log();
    // The next write to the log (the clean record) finds it full.
    faulty.inject(FaultRule {
        path_prefix: Some("log/".to_string()),
        remaining: Some(1),
        ..FaultRule::new(FaultOp::Write, 28)
    });
    engine.fallocate(id, Allocate::PunchHole, 0, SLOT).unwrap();
    assert_eq!(faulty.injected(), 1, "the clean record was refused");
    let want = [vec![0; SLOT as usize], pattern(1)].concat();
    assert_eq!(read_all(&engine, id), want, "punched");
    assert_eq!(capacity_bytes(capacity.as_ref(), &path), want);
    engine.fsync(id).unwrap();
    engine.release(id);
    engine.drain().unwrap();
    assert_eq!(
        capacity_bytes(capacity.as_ref(), &path),
        want,
        "after a drain"
    );
    engine.close();
    let fast: Arc<dyn Backend> = faulty;
    let engine = open(&fast, &capacity).unwrap();
    engine.drain().unwrap();
    let id = engine.open_file(&path).unwrap();
    assert_eq!(read_all(&engine, id), want, "after recovery");
    engine.close();
}
