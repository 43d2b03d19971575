//! The LiU read path ([`LiuBackend`]) over real backends: reads always
//! equal a model of the file whatever was lifted or buffered (a property
//! test over reads, writes, truncations, renames and removals), lifting and
//! head loads happen, a write never leaves a stale head or buffer behind
//! (single-threaded and with concurrent readers), heads are dropped on a
//! restart, fast-tier errors fall back to the capacity tier, and the
//! engine's flusher writes through it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;

use proptest::prelude::*;
use sluice_engine::liu::HEADS_FILE;
use sluice_engine::{Engine, EngineConfig, LiuBackend, LiuOptions};
use sluice_env::fault::{FaultBackend, FaultOp, FaultRule};
use sluice_env::memory::MemBackend;
use sluice_env::posix::PosixBackend;
use sluice_env::{Backend, BackendFile, OpenOptions, RelPath, SystemClock};
use sluice_policy::redirector::{RedirectPolicy, RedirectorConfig};
use sluice_policy::segments::{Geometry, LiuConfig, Sharing};

const HEAD: u64 = 4096;
const BODY: u64 = 12 * 1024;
const SEGMENT: u64 = HEAD + BODY;

/// Tiny segments: a 2-segment buffer, room for 3 heads; under per-file
/// sharing, 2 bodies too (so some lifted segments are whole, others head
/// only).
fn options() -> LiuOptions {
    LiuOptions {
        policy: LiuConfig {
            geometry: Geometry::new(HEAD, BODY).unwrap(),
            buffer_bytes: 2 * SEGMENT,
            heads_bytes: 3 * HEAD,
            lift_locality: 0.5,
            grain_bytes: 1024,
            ..LiuConfig::default()
        },
        body_sections: 3,
        workers: 4,
        time_share: 1.0,
        bodies_bytes: 2 * BODY,
    }
}

fn liu_over(capacity: &Arc<dyn Backend>, fast: &Arc<dyn Backend>) -> Arc<LiuBackend> {
    Arc::new(LiuBackend::new(Arc::clone(capacity), fast, options()).unwrap())
}

fn path(name: &str) -> RelPath {
    RelPath::new(name).unwrap()
}

fn read(file: &dyn BackendFile, offset: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    let n = file.read_at(&mut buf, offset).unwrap();
    buf.truncate(n);
    buf
}

/// Read the whole of `file` `rounds` times, one segment at a time, so its
/// segments become wanted, load whole, are evicted and lifted.
fn sweep(file: &dyn BackendFile, segments: u64, rounds: u32) {
    for _ in 0..rounds {
        for s in 0..segments {
            for piece in 0..4 {
                read(
                    file,
                    s * SEGMENT + piece * (SEGMENT / 4),
                    (SEGMENT / 4) as usize,
                );
            }
        }
    }
}

fn pattern(seed: u8, len: u64) -> Vec<u8> {
    (0..len)
        .map(|i| seed.wrapping_mul(31).wrapping_add((i % 251) as u8))
        .collect()
}

#[test]
fn lifted_heads_are_loaded_and_a_write_never_leaves_them_stale() {
    let capacity: Arc<dyn Backend> = Arc::new(MemBackend::new());
    let fast: Arc<dyn Backend> = Arc::new(MemBackend::new());
    let liu = liu_over(&capacity, &fast);
    let file = liu.open(&path("f"), OpenOptions::CREATE).unwrap();
    let data = pattern(1, 6 * SEGMENT);
    file.write_at(&data, 0).unwrap();
    // The heads file may still take its three slots from the fast tier
    // (the stager keeps them out of its room: tests/router.rs).
    // (Under the paper's sharing, as here, no bodies are lifted.)
    assert_eq!(liu.fast_tier_growth(), 3 * HEAD);
    sweep(file.as_ref(), 6, 3);
    let status = liu.status();
    assert!(status.counters.lifts >= 2, "{status:?}");
    assert!(status.counters.lifted_loads >= 1, "{status:?}");
    assert!(
        liu.fast_tier_growth() <= 2 * HEAD,
        "a lifted head was loaded from its written slot: {}",
        liu.fast_tier_growth()
    );
    assert!(status.head_bytes_read > 0, "{status:?}");
    assert!(status.lifted_segments <= 3, "at most the heads budget");
    assert_eq!(status.errors, 0, "{status:?}");

    // Overwrite the head of every segment, then read it back whole and
    // as head-only reads: never the lifted or buffered old bytes.
    let lifted_before = status.lifted_segments;
    assert!(lifted_before > 0);
    for s in 0..6 {
        file.write_at(&pattern(100 + s as u8, 100), s * SEGMENT + 10)
            .unwrap();
    }
    let mut expected = data.clone();
    for s in 0..6u64 {
        let at = (s * SEGMENT + 10) as usize;
        expected[at..at + 100].copy_from_slice(&pattern(100 + s as u8, 100));
    }
    assert_eq!(liu.status().lifted_segments, 0, "every head de-lifted");
    for s in 0..6 {
        assert_eq!(
            read(file.as_ref(), s * SEGMENT, 512),
            expected[(s * SEGMENT) as usize..(s * SEGMENT + 512) as usize]
        );
    }
    sweep(file.as_ref(), 6, 3);
    assert_eq!(read(file.as_ref(), 0, expected.len()), expected);
    assert!(liu.status().counters.invalidations > 0);
}

#[test]
fn truncation_rename_and_removal_forget_what_was_cached() {
    let capacity: Arc<dyn Backend> = Arc::new(MemBackend::new());
    let fast: Arc<dyn Backend> = Arc::new(MemBackend::new());
    let liu = liu_over(&capacity, &fast);
    let a = liu.open(&path("a"), OpenOptions::CREATE).unwrap();
    a.write_at(&pattern(1, 4 * SEGMENT), 0).unwrap();
    sweep(a.as_ref(), 4, 3);
    assert!(liu.status().lifted_segments > 0);

    // A truncation then regrowth by a write: no old byte comes back.
    a.set_len(HEAD / 2).unwrap();
    a.write_at(&[9u8; 8], 2 * SEGMENT).unwrap();
    let mut expected = pattern(1, HEAD / 2);
    expected.resize((2 * SEGMENT) as usize, 0);
    expected.extend_from_slice(&[9u8; 8]);
    assert_eq!(read(a.as_ref(), 0, (3 * SEGMENT) as usize), expected);

    // `b` replaced by a rename of `a`: reads of `b` are `a`'s bytes.
    let b = liu.open(&path("b"), OpenOptions::CREATE).unwrap();
    b.write_at(&pattern(2, 4 * SEGMENT), 0).unwrap();
    sweep(b.as_ref(), 4, 3);
    liu.rename(&path("a"), &path("b")).unwrap();
    let b = liu.open(&path("b"), OpenOptions::default()).unwrap();
    assert_eq!(read(b.as_ref(), 0, (3 * SEGMENT) as usize), expected);

    // A new file under a removed name starts with nothing cached.
    liu.remove_file(&path("b")).unwrap();
    let b = liu.open(&path("b"), OpenOptions::CREATE).unwrap();
    assert_eq!(read(b.as_ref(), 0, 100), Vec::<u8>::new());
    b.write_at(&[7u8; 100], 0).unwrap();
    assert_eq!(read(b.as_ref(), 0, 200), vec![7u8; 100]);
}

#[test]
fn concurrent_readers_never_see_bytes_older_than_a_finished_write() {
    const SEGMENTS: u64 = 6;
    const VERSIONS: u8 = 40;
    let capacity: Arc<dyn Backend> = Arc::new(MemBackend::new());
    let fast: Arc<dyn Backend> = Arc::new(MemBackend::new());
    let liu = liu_over(&capacity, &fast);
    let file = liu.open(&path("f"), OpenOptions::CREATE).unwrap();
    file.write_at(&vec![0u8; (SEGMENTS * SEGMENT) as usize], 0)
        .unwrap();
    // done[s]: the newest version whose write of segment s has returned.
    let done: Vec<AtomicU8> = (0..SEGMENTS).map(|_| AtomicU8::new(0)).collect();
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        for reader in 0..3u64 {
            let (file, done, stop) = (&file, &done, &stop);
            scope.spawn(move || {
                let mut n = reader;
                while !stop.load(Ordering::SeqCst) {
                    n = n
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let s = (n >> 33) % SEGMENTS;
                    // Head-only reads (served by a lifted head) and whole
                    // segments (served by loads) alternate.
                    let (offset, len) = if n >> 62 == 0 {
                        (0, SEGMENT)
                    } else {
                        ((n >> 40) % (HEAD - 64), 64)
                    };
                    let floor = done[s as usize].load(Ordering::SeqCst);
                    let got = read(file.as_ref(), s * SEGMENT + offset, len as usize);
                    assert_eq!(got.len(), len as usize);
                    let oldest = *got.iter().min().unwrap();
                    assert!(
                        oldest >= floor,
                        "segment {s}: read version {oldest} after version {floor} was written"
                    );
                }
            });
        }
        for v in 1..=VERSIONS {
            for s in 0..SEGMENTS {
                file.write_at(&vec![v; SEGMENT as usize], s * SEGMENT)
                    .unwrap();
                done[s as usize].store(v, Ordering::SeqCst);
            }
            // Let the readers lift between writes.
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        stop.store(true, Ordering::SeqCst);
    });
    let status = liu.status();
    assert!(
        status.counters.lifts > 0 && status.counters.invalidations > 0,
        "the race was not exercised: {status:?}"
    );
}

#[test]
fn heads_are_dropped_on_restart() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("fast")).unwrap();
    std::fs::create_dir_all(dir.path().join("capacity")).unwrap();
    let fast: Arc<dyn Backend> = Arc::new(PosixBackend::new(dir.path().join("fast")).unwrap());
    let capacity: Arc<dyn Backend> =
        Arc::new(PosixBackend::new(dir.path().join("capacity")).unwrap());
    {
        let liu = liu_over(&capacity, &fast);
        let file = liu.open(&path("f"), OpenOptions::CREATE).unwrap();
        file.write_at(&pattern(1, 4 * SEGMENT), 0).unwrap();
        sweep(file.as_ref(), 4, 3);
        assert!(liu.status().lifted_segments > 0);
        // A crash: the heads file stays as it is; then the capacity tier
        // changes behind sluice's back (another writer, or a recovery).
    }
    let heads = dir.path().join("fast").join(HEADS_FILE);
    assert!(std::fs::metadata(&heads).unwrap().len() > 0);
    capacity
        .open(&path("f"), OpenOptions::default())
        .unwrap()
        .write_at(&pattern(2, 4 * SEGMENT), 0)
        .unwrap();
    let liu = liu_over(&capacity, &fast);
    assert_eq!(std::fs::metadata(&heads).unwrap().len(), 0, "heads dropped");
    let file = liu.open(&path("f"), OpenOptions::default()).unwrap();
    sweep(file.as_ref(), 4, 3);
    assert_eq!(
        read(file.as_ref(), 0, (4 * SEGMENT) as usize),
        pattern(2, 4 * SEGMENT)
    );
}

#[test]
fn fast_tier_errors_fall_back_to_the_capacity_tier() {
    let capacity: Arc<dyn Backend> = Arc::new(MemBackend::new());
    let faulty = Arc::new(FaultBackend::new(Arc::new(MemBackend::new())));
    let fast: Arc<dyn Backend> = faulty.clone();
    let liu = liu_over(&capacity, &fast);
    let file = liu.open(&path("f"), OpenOptions::CREATE).unwrap();
    let data = pattern(3, 6 * SEGMENT);
    file.write_at(&data, 0).unwrap();
    sweep(file.as_ref(), 6, 2);
    assert!(liu.status().lifted_segments > 0);
    faulty.inject(FaultRule::new(FaultOp::Read, 5));
    faulty.inject(FaultRule::new(FaultOp::Write, 5));
    sweep(file.as_ref(), 6, 2);
    assert_eq!(read(file.as_ref(), 0, data.len()), data);
    let status = liu.status();
    assert!(status.errors > 0, "{status:?}");
    assert!(
        status
            .last_error
            .as_deref()
            .unwrap_or("")
            .contains("fast tier"),
        "{status:?}"
    );
}

#[test]
fn the_engine_flushes_through_it_and_reads_see_the_flushed_bytes() {
    let capacity: Arc<dyn Backend> = Arc::new(MemBackend::new());
    let fast: Arc<dyn Backend> = Arc::new(MemBackend::new());
    let liu = liu_over(&capacity, &fast);
    let tier: Arc<dyn Backend> = liu.clone();
    let start = || {
        Engine::open(
            Arc::clone(&fast),
            Arc::clone(&tier),
            Arc::new(SystemClock::new()),
            EngineConfig {
                redirector: RedirectorConfig {
                    policy: RedirectPolicy::FastAll,
                    ..RedirectorConfig::default()
                },
                ..EngineConfig::default()
            },
        )
        .unwrap()
    };
    let engine = start();
    let f = path("f");
    let id = engine.create(&f).unwrap();
    let data = pattern(4, 6 * SEGMENT);
    engine.write(id, 0, &data).unwrap();
    engine.drain().unwrap();
    // Restarted: the flushed bytes are no longer clean copies in the log
    // (the cache starts empty), so the reads reach the LiU layer.
    engine.release(id);
    engine.close();
    let engine = start();
    let id = engine.open_file(&f).unwrap();
    for _ in 0..3 {
        for s in 0..6 {
            engine.read(id, s * SEGMENT, SEGMENT).unwrap();
        }
    }
    assert!(liu.status().lifted_segments > 0);
    // Buffered in the log, then flushed to the capacity tier through the
    // LiU layer: the lifted heads must not survive it.
    engine
        .write(id, 0, &vec![0xEE; (6 * SEGMENT) as usize])
        .unwrap();
    engine.drain().unwrap();
    assert_eq!(liu.status().lifted_segments, 0);
    let raw = capacity.open(&f, OpenOptions::default()).unwrap();
    assert_eq!(read(raw.as_ref(), 0, 16), vec![0xEE; 16]);
    for s in 0..6 {
        assert_eq!(
            engine.read(id, s * SEGMENT, SEGMENT).unwrap(),
            vec![0xEE; SEGMENT as usize]
        );
    }
}

#[derive(Clone, Debug)]
enum Op {
    Read {
        file: usize,
        offset: u64,
        len: u64,
    },
    Write {
        file: usize,
        offset: u64,
        len: u64,
        seed: u8,
    },
    Truncate {
        file: usize,
        len: u64,
    },
    Rename {
        from: usize,
        to: usize,
    },
    Remove {
        file: usize,
    },
}

const NAMES: [&str; 3] = ["x", "y", "z"];
const SPAN: u64 = 5 * SEGMENT;

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..3usize, 0..SPAN, 1..2 * SEGMENT)
            .prop_map(|(file, offset, len)| Op::Read { file, offset, len }),
        // Small reads make ghosts wanted a piece at a time (the learning
        // pass: absent body sections, stashed heads).
        4 => (0..3usize, 0..SPAN, 1..HEAD / 2)
            .prop_map(|(file, offset, len)| Op::Read { file, offset, len }),
        // Whole-segment reads make segments wanted and lifted.
        4 => (0..3usize, 0..5u64).prop_map(|(file, s)| Op::Read {
            file,
            offset: s * SEGMENT,
            len: SEGMENT
        }),
        3 => (0..3usize, 0..SPAN, 1..SEGMENT, any::<u8>())
            .prop_map(|(file, offset, len, seed)| Op::Write { file, offset, len, seed }),
        1 => (0..3usize, 0..SPAN).prop_map(|(file, len)| Op::Truncate { file, len }),
        1 => (0..3usize, 0..3usize).prop_map(|(from, to)| Op::Rename { from, to }),
        1 => (0..3usize).prop_map(|file| Op::Remove { file }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Every read equals the model, whatever the buffer and heads hold,
    /// with either sharing (sluice's per-file one reads ahead).
    #[test]
    fn reads_always_equal_the_model(
        ops in proptest::collection::vec(op(), 1..120),
        per_file in any::<bool>(),
    ) {
        let capacity: Arc<dyn Backend> = Arc::new(MemBackend::new());
        let fast: Arc<dyn Backend> = Arc::new(MemBackend::new());
        let mut opts = options();
        if per_file {
            opts.policy.sharing = Sharing::PerFile;
        }
        let liu = Arc::new(LiuBackend::new(Arc::clone(&capacity), &fast, opts).unwrap());
        let mut model: HashMap<&str, Vec<u8>> = HashMap::new();
        for name in NAMES {
            let f = liu.open(&path(name), OpenOptions::CREATE).unwrap();
            let data = pattern(name.as_bytes()[0], SPAN);
            f.write_at(&data, 0).unwrap();
            model.insert(name, data);
        }
        for op in ops {
            match op {
                Op::Read { file, offset, len } => {
                    let name = NAMES[file];
                    let Some(data) = model.get(name) else { continue };
                    let f = liu.open(&path(name), OpenOptions::default()).unwrap();
                    let end = (offset + len).min(data.len() as u64).max(offset);
                    let want = data.get(offset as usize..end as usize).unwrap_or(&[]);
                    prop_assert_eq!(read(f.as_ref(), offset, len as usize), want);
                }
                Op::Write { file, offset, len, seed } => {
                    let name = NAMES[file];
                    let f = liu.open(&path(name), OpenOptions::CREATE).unwrap();
                    let bytes = pattern(seed, len);
                    f.write_at(&bytes, offset).unwrap();
                    let data = model.entry(name).or_default();
                    let end = (offset + len) as usize;
                    if data.len() < end {
                        data.resize(end, 0);
                    }
                    data[offset as usize..end].copy_from_slice(&bytes);
                }
                Op::Truncate { file, len } => {
                    let name = NAMES[file];
                    let Some(data) = model.get_mut(name) else { continue };
                    liu.open(&path(name), OpenOptions::default()).unwrap().set_len(len).unwrap();
                    data.resize(len as usize, 0);
                }
                Op::Rename { from, to } => {
                    let (from, to) = (NAMES[from], NAMES[to]);
                    let Some(data) = model.get(from).cloned() else { continue };
                    liu.rename(&path(from), &path(to)).unwrap();
                    if from != to {
                        model.remove(from);
                        model.insert(to, data);
                    }
                }
                Op::Remove { file } => {
                    let name = NAMES[file];
                    if model.remove(name).is_some() {
                        liu.remove_file(&path(name)).unwrap();
                    }
                }
            }
        }
        prop_assert_eq!(liu.status().errors, 0);
    }
}

/// A file of `segments` segments of `pattern(seed)` on a capacity tier
/// behind an emulated SSD, opened through LiU with `options`, and the
/// tier's bytes read so far.
fn counted_file(
    options: LiuOptions,
    seed: u8,
    segments: u64,
) -> (
    Arc<LiuBackend>,
    Arc<dyn BackendFile>,
    Vec<u8>,
    impl Fn() -> u64,
) {
    use sluice_devices::ssd::SsdConfig;
    use sluice_env::emulated::EmulatedBackend;
    let emulated = Arc::new(
        EmulatedBackend::ssd(
            Arc::new(MemBackend::new()),
            SsdConfig::default(),
            Arc::new(SystemClock::new()),
        )
        .unwrap(),
    );
    let capacity: Arc<dyn Backend> = emulated.clone();
    let fast: Arc<dyn Backend> = Arc::new(MemBackend::new());
    let data = pattern(seed, segments * SEGMENT);
    capacity
        .open(&path("f"), OpenOptions::CREATE)
        .unwrap()
        .write_at(&data, 0)
        .unwrap();
    let liu = Arc::new(LiuBackend::new(Arc::clone(&capacity), &fast, options).unwrap());
    let f = liu.open(&path("f"), OpenOptions::default()).unwrap();
    (liu, f, data, move || {
        emulated.ssd_stats().unwrap().read_bytes
    })
}

/// A learning pass (small reads in order, each segment a ghost until half
/// of it was read, then loaded) reads each byte of the capacity file once:
/// the body sections already read are left absent and the head comes from
/// the stash of its direct reads. Before, the load read the whole segment
/// again (1.5 times the file here). The heads are still lifted on eviction,
/// and a second pass reads right.
#[test]
fn a_learning_pass_reads_each_byte_once_and_still_lifts_heads() {
    let segments = 4;
    let (liu, f, data, read_bytes) = counted_file(options(), 7, segments);
    let before = read_bytes();
    for offset in (0..segments * SEGMENT).step_by(1024) {
        let want = &data[offset as usize..offset as usize + 1024];
        assert_eq!(read(f.as_ref(), offset, 1024), want, "pass 1 at {offset}");
    }
    let status = liu.status();
    assert_eq!(
        status.counters.whole_loads, segments,
        "every segment learned"
    );
    assert_eq!(
        read_bytes() - before,
        segments * SEGMENT,
        "the learning pass read the file once"
    );
    assert!(status.counters.lifts > 0, "evicted heads were lifted");
    for offset in (0..segments * SEGMENT).step_by(1024) {
        let want = &data[offset as usize..offset as usize + 1024];
        assert_eq!(read(f.as_ref(), offset, 1024), want, "pass 2 at {offset}");
    }
    assert_eq!(liu.status().errors, 0);
}

/// The learning pass with a late reader: one 1 KiB piece of each
/// segment's body is read only after the segment was loaded. The load
/// leaves that hole absent (and the reads made so far) and reads only what
/// lies past the last byte read; the late read then loads just its hole.
/// Each byte is still read from the capacity tier once.
#[test]
fn a_hole_left_by_a_late_reader_is_loaded_alone() {
    let segments = 4;
    let (liu, f, data, read_bytes) = counted_file(options(), 9, segments);
    let before = read_bytes();
    let check = |offset: u64| {
        let want = &data[offset as usize..offset as usize + 1024];
        assert_eq!(read(f.as_ref(), offset, 1024), want, "at {offset}");
    };
    for s in 0..segments {
        let start = s * SEGMENT;
        let late = start + HEAD + 1024;
        for offset in (start..start + SEGMENT).step_by(1024) {
            if offset != late {
                check(offset);
            }
            // Half the segment read (its load has happened): the late
            // reader comes.
            if offset == start + SEGMENT / 2 + 1024 {
                check(late);
            }
        }
    }
    assert_eq!(liu.status().counters.whole_loads, segments);
    assert_eq!(
        read_bytes() - before,
        segments * SEGMENT,
        "each byte read once, the holes included"
    );
    assert_eq!(liu.status().errors, 0);
}

#[test]
/// Found by the property test: a segment cached or lifted while the file
/// ended inside it must not serve the bytes a later write past the end
/// turned into zeros.
fn a_write_past_the_end_invalidates_the_segments_it_grew() {
    {
        let capacity: Arc<dyn Backend> = Arc::new(MemBackend::new());
        let fast: Arc<dyn Backend> = Arc::new(MemBackend::new());
        let liu = liu_over(&capacity, &fast);
        for name in NAMES {
            let f = liu.open(&path(name), OpenOptions::CREATE).unwrap();
            f.write_at(&pattern(name.as_bytes()[0], SPAN), 0).unwrap();
        }
        let y = liu.open(&path("y"), OpenOptions::default()).unwrap();
        read(y.as_ref(), 0, 16385);
        read(y.as_ref(), 32768, 16384);
        liu.rename(&path("x"), &path("y")).unwrap();
        let x = liu.open(&path("x"), OpenOptions::CREATE).unwrap();
        x.write_at(&pattern(0, 1850), 14535).unwrap();
        let mut model = vec![0u8; 14535];
        model.extend(pattern(0, 1850));
        assert_eq!(read(x.as_ref(), 0, 16397), model);
        x.write_at(&[1], 32768).unwrap();
        model.resize(32768, 0);
        model.push(1);
        let z = liu.open(&path("z"), OpenOptions::default()).unwrap();
        read(z.as_ref(), 53015, 19083);
        let got = read(x.as_ref(), 13611, 25978);
        assert_eq!(got.len(), model.len() - 13611);
        for (i, (a, b)) in got.iter().zip(&model[13611..]).enumerate() {
            assert_eq!(a, b, "at {}", i + 13611);
        }
    }
}

/// Whole-segment lifts (sluice's, beyond the paper; docs/liu.md, "Whole
/// segments"): under per-file sharing a lifted segment whose body found a
/// free slot is loaded from the fast tier alone, so a pass over it reads
/// nothing from the capacity tier; a write into its body drops the body
/// (never served stale) while its head stays lifted; a truncation drops
/// the rest.
#[test]
fn a_whole_lifted_segment_is_read_from_the_fast_tier_alone() {
    let mut opts = options();
    opts.policy.sharing = Sharing::PerFile;
    let segments = 6;
    let (liu, f, mut data, read_bytes) = counted_file(opts, 9, segments);
    sweep(f.as_ref(), segments, 3);
    let status = liu.status();
    assert_eq!(
        status.lifted_bodies, 2,
        "both body slots hold a body: {status:?}"
    );
    assert!(status.lifted_segments >= 2, "{status:?}");

    // The whole lifted segments: a pass over each reads no capacity byte.
    let whole: Vec<u64> = (0..segments)
        .filter(|&s| {
            let before = read_bytes();
            for piece in 0..4 {
                let at = s * SEGMENT + piece * (SEGMENT / 4);
                let want = &data[at as usize..(at + SEGMENT / 4) as usize];
                assert_eq!(read(f.as_ref(), at, (SEGMENT / 4) as usize), want);
            }
            read_bytes() == before
        })
        .collect();
    assert!(
        !whole.is_empty(),
        "a whole lifted segment was read from the fast tier"
    );
    assert!(liu.status().body_bytes_read > 0);

    // A write into one's body: the body goes, the bytes read are new.
    let s = whole[0];
    let at = s * SEGMENT + HEAD + 100;
    let bytes = pattern(200, 50);
    f.write_at(&bytes, at).unwrap();
    data[at as usize..at as usize + 50].copy_from_slice(&bytes);
    assert!(
        liu.status().lifted_bodies < 2,
        "the written body was dropped"
    );
    sweep(f.as_ref(), segments, 2);
    assert_eq!(read(f.as_ref(), 0, data.len()), data);

    // A truncation drops every body past it.
    f.set_len(SEGMENT).unwrap();
    data.truncate(SEGMENT as usize);
    let left = liu.status().lifted_bodies;
    assert!(left <= 1, "only segment 0 may keep its body: {left}");
    assert_eq!(read(f.as_ref(), 0, 2 * SEGMENT as usize), data);
    assert_eq!(liu.status().errors, 0);
}

/// With lifted bodies the learning pass still reads each byte of the
/// capacity file once, and the segments it evicts are whole in DRAM (the
/// runs it read directly come from the stash, the read that made a load
/// is loaded for it): their bodies are lifted with their heads, so the
/// second pass reads them from the fast tier alone.
#[test]
fn a_learning_pass_lifts_whole_segments_reading_each_byte_once() {
    let mut opts = options();
    opts.policy.sharing = Sharing::PerFile;
    let segments = 6;
    let (liu, f, data, read_bytes) = counted_file(opts, 7, segments);
    let pass = || {
        for offset in (0..segments * SEGMENT).step_by(1024) {
            let want = &data[offset as usize..offset as usize + 1024];
            assert_eq!(read(f.as_ref(), offset, 1024), want, "at {offset}");
        }
    };
    let before = read_bytes();
    pass();
    assert_eq!(read_bytes() - before, segments * SEGMENT, "read once");
    let status = liu.status();
    assert_eq!(status.lifted_bodies, 2, "both body slots: {status:?}");
    let before = read_bytes();
    pass();
    assert!(liu.status().body_bytes_read > 0);
    assert!(
        read_bytes() - before <= (segments - 2) * SEGMENT,
        "the two whole segments came from the fast tier: {}",
        read_bytes() - before
    );
    assert_eq!(liu.status().errors, 0);
}
