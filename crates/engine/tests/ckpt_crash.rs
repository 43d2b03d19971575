//! Crash safety of BBOS's checkpoint staging (`sluice_engine::ckpt`), the
//! claims of docs/crash-consistency.md, "Checkpoint staging": both tiers
//! are crash backends, the workload runs once to count sync points and
//! again crashing at each, then recovery must find every acknowledged
//! byte under its name and serve no byte older than the newest one
//! acknowledged. (`ckpt.rs` has the first such test: stage, fsync, demote,
//! write to a demoted copy.)

mod ckpt_support;

use std::sync::Arc;

use ckpt_support::*;
use sluice_catalog::Failure;
use sluice_engine::{Checkpoints, CkptOptions};
use sluice_env::crash::CrashBackend;
use sluice_env::{Backend, RelPath};

fn tiers() -> Tiers {
    ckpt_support::tiers(&["ck", "cold"])
}

/// A power cut of both tiers, and both back.
fn power_cut(fast: &CrashBackend, capacity: &CrashBackend) {
    fast.crash();
    capacity.crash();
    fast.restart();
    capacity.restart();
}

/// What the mount shows at `path`: `None` when the capacity tier has no
/// such name (the mount looks names up there, docs/bbos.md), else the
/// bytes a read serves (the fast-tier copy's, or the capacity file's).
fn shown(ck: &Checkpoints, capacity: &Arc<dyn Backend>, path: &RelPath) -> Option<Vec<u8>> {
    capacity.metadata(path).ok()?;
    let fh = ck.open_file(path, false, false).unwrap();
    let data = ck.read(fh, 0, 1 << 30).unwrap();
    ck.release(fh);
    Some(data)
}

/// A staged checkpoint acknowledged by fsync keeps its name through a
/// power cut: the mount finds a file by its capacity-tier name, so the
/// fsync makes the placeholder's directory entry durable too. (Before,
/// only the fast-tier copy was synced: after a power cut the name was
/// gone until the copy's demotion made it again, and a create of the name
/// meanwhile replaced the acknowledged copy.)
#[test]
fn an_fsynced_staged_checkpoint_keeps_its_name_through_a_power_cut() {
    let dir = tempfile::tempdir().unwrap();
    let (fast, cap, f, c) = tiers();
    let data = bytes(1, 20 * KIB);
    {
        let ck = open(&f, &c, dir.path(), options(1 << 20)).unwrap();
        ck.register(job("j", 64 * KIB, "ck/*", Failure::Nodes(2), 2))
            .unwrap();
        let fh = ck.create(&p("ck/a")).unwrap();
        ck.write(fh, 0, &data).unwrap();
        ck.fsync(fh).unwrap();
        ck.release(fh);
        assert_eq!(ck.status().staged.0, 1, "staged, not demoted");
    }
    power_cut(&fast, &cap);
    let ck = open(&f, &c, dir.path(), options(1 << 20)).unwrap();
    assert!(
        shown(&ck, &c, &p("ck/a")).as_deref() == Some(&data[..]),
        "the fsynced checkpoint under its name"
    );
    ck.drain().unwrap();
    assert!(capacity_bytes(&c, &p("ck/a")) == data, "demoted");
}

/// The sync points of one run of `workload` on fresh tiers: (fast,
/// capacity).
fn sync_points<T>(
    tiers: &impl Fn() -> Tiers,
    options: &CkptOptions,
    workload: impl Fn(&Checkpoints, &Arc<dyn Backend>) -> T,
) -> (u64, u64) {
    let dir = tempfile::tempdir().unwrap();
    let (fast, cap, f, c) = tiers();
    let ck = open(&f, &c, dir.path(), options.clone()).unwrap();
    workload(&ck, &c);
    (fast.sync_points(), cap.sync_points())
}

/// Runs `workload` once per sync point of either tier, crashing there
/// (the fast tier's before the sync; the capacity tier's before and after
/// it), with and without torn writes, then cuts the power of the other
/// tier, recovers and hands `check` the stager, the capacity tier, what
/// the workload had acknowledged and a label for messages.
fn at_every_sync_point<T: Default>(
    options: &CkptOptions,
    workload: impl Fn(&Checkpoints, &Arc<dyn Backend>) -> T,
    check: impl Fn(&Checkpoints, &Arc<dyn Backend>, &T, &str),
) -> usize {
    at_every_sync_point_on(tiers, options, workload, check)
}

/// [`at_every_sync_point`] on the tiers `tiers` makes.
fn at_every_sync_point_on<T: Default>(
    tiers: impl Fn() -> Tiers,
    options: &CkptOptions,
    workload: impl Fn(&Checkpoints, &Arc<dyn Backend>) -> T,
    check: impl Fn(&Checkpoints, &Arc<dyn Backend>, &T, &str),
) -> usize {
    let (fast_points, cap_points) = sync_points(&tiers, options, &workload);
    let mut cases = vec![];
    for n in 1..=fast_points {
        cases.push((true, n, false));
    }
    for n in 1..=cap_points {
        cases.push((false, n, false));
        cases.push((false, n, true));
    }
    let mut runs = 0;
    for (on_fast, n, after) in cases {
        for torn in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let (fast, cap, f, c) = tiers();
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
            let done = match open(&f, &c, dir.path(), options.clone()) {
                Ok(ck) => workload(&ck, &c),
                Err(_) => T::default(),
            };
            // Power cut: the other tier loses its unsynced state too.
            other.crash();
            fast.restart();
            cap.restart();
            let what = format!(
                "crash at {} sync {n} (after {after}, torn {torn})",
                if on_fast { "fast" } else { "capacity" }
            );
            let ck = open(&f, &c, dir.path(), options.clone())
                .unwrap_or_else(|e| panic!("{what}: recovery failed: {e}"));
            check(&ck, &c, &done, &what);
            runs += 1;
        }
    }
    runs
}

/// What a rename workload had acknowledged when it stopped.
#[derive(Default)]
struct RenameAcks {
    /// `ck/x` (the older checkpoint) fsynced.
    old: bool,
    /// `ck/x.tmp` (the newer) fsynced.
    new: bool,
    /// The rename returned and its directory was synced.
    renamed: bool,
}

/// Creates, writes and fsyncs `path` (stopping at the first error).
fn write_file(ck: &Checkpoints, path: &str, data: &[u8]) -> std::io::Result<()> {
    let fh = ck.create(&p(path))?;
    let r = ck.write(fh, 0, data).and_then(|()| ck.fsync(fh));
    ck.release(fh);
    r
}

/// The pattern of checkpoint libraries: write the new checkpoint beside
/// the old one, fsync it, rename it over the old one, sync the
/// directory. Both are staged (not demoted) when the rename runs. As the
/// mount does: the stager first, then the capacity tier's rename.
fn rename_over_a_staged_copy(ck: &Checkpoints, c: &Arc<dyn Backend>) -> RenameAcks {
    let mut acks = RenameAcks::default();
    let _ = (|| -> std::io::Result<()> {
        ck.register(job("j", 64 * KIB, "ck/*", Failure::Nodes(2), 5))?;
        write_file(ck, "ck/x", &bytes(1, 24 * KIB))?;
        acks.old = true;
        write_file(ck, "ck/x.tmp", &bytes(2, 20 * KIB))?;
        acks.new = true;
        ck.rename(&p("ck/x.tmp"), &p("ck/x"))?;
        c.rename(&p("ck/x.tmp"), &p("ck/x"))?;
        c.sync_dir(&p("ck"))?;
        acks.renamed = true;
        Ok(())
    })();
    acks
}

/// A rename over a staged checkpoint is the old state or the new one
/// after a crash at any point: the old checkpoint is never lost before
/// the new one has its name. (Before, the stager removed the old copy
/// first, durably, then moved the new one's record: a crash in between
/// left `ck/x` as its empty placeholder, the old checkpoint's acknowledged
/// bytes gone and the new one still at `ck/x.tmp`.)
#[test]
fn a_rename_over_a_staged_checkpoint_is_old_or_new_after_a_crash_at_every_sync_point() {
    let (old, new) = (bytes(1, 24 * KIB), bytes(2, 20 * KIB));
    let o = options(1 << 20);
    let runs = at_every_sync_point(&o, rename_over_a_staged_copy, |ck, c, acks, what| {
        let x = shown(ck, c, &p("ck/x"));
        let tmp = shown(ck, c, &p("ck/x.tmp"));
        let is = |got: &Option<Vec<u8>>, want: &[u8]| got.as_deref() == Some(want);
        let len = |got: &Option<Vec<u8>>| got.as_ref().map(Vec::len);
        let state = format!("{what}: ck/x {:?} bytes, ck/x.tmp {:?}", len(&x), len(&tmp));
        if acks.renamed {
            assert!(is(&x, &new) && tmp.is_none(), "{state}: not renamed");
        } else if acks.new {
            // The new name with the new bytes (the old name may be left
            // as an empty file: the rename was not acknowledged), or the
            // old state whole.
            let renamed = is(&x, &new) && tmp.as_ref().is_none_or(Vec::is_empty);
            let before = is(&x, &old) && is(&tmp, &new);
            assert!(renamed || before, "{state}: neither before nor after");
        } else if acks.old {
            assert!(is(&x, &old), "{state}: the old checkpoint lost");
        }
        // One copy per name: a second copy of `ck/x` would hold room and
        // its demotion could write the older bytes over the newer.
        let named = ["ck/x", "ck/x.tmp"]
            .iter()
            .filter(|n| ck.size(&p(n)).is_some())
            .count() as u64;
        let s = ck.status();
        assert_eq!(s.staged.0 + s.cached.0, named, "{state}: copies");
        // What a read showed is what the capacity tier keeps.
        ck.drain()
            .unwrap_or_else(|e| panic!("{what}: drain after recovery: {e}"));
        if let Some(x) = x {
            assert!(capacity_bytes(c, &p("ck/x")) == x, "{state}: demoted");
        }
    });
    assert!(runs > 20, "{runs} runs");
}

/// The copy moved over another one takes a new id: its open handle
/// follows it, and it is demoted under its new name.
#[test]
fn a_copy_renamed_over_another_keeps_its_open_handle() {
    let dir = tempfile::tempdir().unwrap();
    let (_fast, _cap, f, c) = tiers();
    let ck = open(&f, &c, dir.path(), options(1 << 20)).unwrap();
    ck.register(job("j", 64 * KIB, "ck/*", Failure::Nodes(2), 5))
        .unwrap();
    write_file(&ck, "ck/x", &bytes(1, 24 * KIB)).unwrap();
    let fh = ck.create(&p("ck/x.tmp")).unwrap();
    let mut data = bytes(2, 20 * KIB);
    ck.write(fh, 0, &data).unwrap();
    ck.rename(&p("ck/x.tmp"), &p("ck/x")).unwrap();
    c.rename(&p("ck/x.tmp"), &p("ck/x")).unwrap();
    let tail = bytes(3, 4 * KIB);
    ck.write(fh, data.len() as u64, &tail).unwrap();
    data.extend_from_slice(&tail);
    ck.fsync(fh).unwrap();
    ck.release(fh);
    assert_eq!(ck.status().staged.0, 1, "one copy left");
    assert!(shown(&ck, &c, &p("ck/x")).as_deref() == Some(&data[..]));
    ck.drain().unwrap();
    assert!(capacity_bytes(&c, &p("ck/x")) == data, "demoted");
    let rec = ck.catalog().ckpt("ck/x").unwrap().unwrap();
    assert_eq!(rec.bytes, data.len() as u64);
    assert!(ck.catalog().ckpt("ck/x.tmp").unwrap().is_none());
}

/// A state a checkpoint's name may be found in after a crash.
#[derive(Clone, Debug)]
enum Seen {
    /// No such name.
    Gone,
    /// Exactly these bytes.
    Bytes(Vec<u8>),
    /// A prefix of these bytes, at least `min` long (a write in flight;
    /// `min` is what an fsync acknowledged of it).
    Prefix(Vec<u8>, usize),
    /// An empty file (the placeholder of a copy removed by an
    /// unacknowledged unlink).
    Empty,
}

impl Seen {
    fn matches(&self, got: Option<&[u8]>) -> bool {
        match (self, got) {
            (Seen::Gone, None) => true,
            (Seen::Bytes(d), Some(g)) => d == g,
            (Seen::Prefix(d, min), Some(g)) => g.len() >= *min && d.starts_with(g),
            (Seen::Empty, Some(g)) => g.is_empty(),
            _ => false,
        }
    }
}

/// Per name, the states recovery may find it in: the last acknowledged
/// one, and those an operation in flight may leave.
#[derive(Default)]
struct Model {
    names: Vec<(&'static str, Vec<Seen>)>,
}

impl Model {
    fn allowed(&mut self, name: &'static str) -> &mut Vec<Seen> {
        if let Some(i) = self.names.iter().position(|(n, _)| *n == name) {
            return &mut self.names[i].1;
        }
        self.names.push((name, vec![Seen::Gone]));
        &mut self.names.last_mut().unwrap().1
    }

    /// An operation begins that may leave `name` as `seen`.
    fn may(&mut self, name: &'static str, seen: Seen) {
        self.allowed(name).push(seen);
    }

    /// An operation on `name` was acknowledged: only `seen` from now on.
    fn acked(&mut self, name: &'static str, seen: Seen) {
        *self.allowed(name) = vec![seen];
    }
}

/// Creates (or, with `truncate`, opens with `O_TRUNC`) `name`, writes
/// `data` in two halves and fsyncs, keeping the model up to date.
fn checkpoint(
    ck: &Checkpoints,
    m: &mut Model,
    name: &'static str,
    data: &[u8],
    truncate: bool,
) -> std::io::Result<()> {
    m.may(name, Seen::Prefix(data.to_vec(), 0));
    let fh = if truncate {
        ck.open_file(&p(name), true, true)?
    } else {
        ck.create(&p(name))?
    };
    let half = data.len() / 2;
    let r = (|| {
        ck.write(fh, 0, &data[..half])?;
        ck.write(fh, half as u64, &data[half..])?;
        ck.fsync(fh)
    })();
    if r.is_ok() {
        m.acked(name, Seen::Bytes(data.to_vec()));
    }
    ck.release(fh);
    r
}

/// Removes `name` as the mount does (the stager, then the capacity
/// tier), then syncs the directory: acknowledged.
fn unlink(
    ck: &Checkpoints,
    c: &Arc<dyn Backend>,
    m: &mut Model,
    name: &'static str,
) -> std::io::Result<()> {
    m.may(name, Seen::Gone);
    m.may(name, Seen::Empty);
    ck.unlink(&p(name))?;
    c.remove_file(&p(name))?;
    c.sync_dir(&p(name).parent().unwrap())?;
    m.acked(name, Seen::Gone);
    Ok(())
}

/// Every way a checkpoint is placed and leaves: staged, cold straight to
/// the capacity tier, spilled when no room can be made, demoted, evicted
/// as superseded, rewritten in place with `O_TRUNC`, unlinked (a staged
/// copy and a capacity-tier one), and a cached copy truncated through an
/// open handle. S is 100 KiB; each checkpoint 60 KiB.
fn placements(ck: &Checkpoints, c: &Arc<dyn Backend>) -> Model {
    let mut m = Model::default();
    let _ = (|| -> std::io::Result<()> {
        // hot fails often (many nodes) and keeps one version; cold rarely.
        ck.register(job("hot", 60 * KIB, "ck/*", Failure::Nodes(1000), 1))?;
        let cold = Failure::MtbfSecs(10_000_000);
        ck.register(job("cold", 60 * KIB, "cold/*", cold, 2))?;
        checkpoint(ck, &mut m, "ck/1", &bytes(1, 60 * KIB), false)?;
        // Colder than the staged one, which fills S with it: direct.
        checkpoint(ck, &mut m, "cold/1", &bytes(2, 60 * KIB), false)?;
        // Nothing evictable (ck/1 not demoted): spilled.
        checkpoint(ck, &mut m, "ck/2", &bytes(3, 60 * KIB), false)?;
        ck.demote_next()?;
        // ck/1 is cached and superseded (one version kept): evicted.
        checkpoint(ck, &mut m, "ck/3", &bytes(4, 60 * KIB), false)?;
        // A staged copy rewritten in place: a new checkpoint.
        checkpoint(ck, &mut m, "ck/3", &bytes(5, 50 * KIB), true)?;
        unlink(ck, c, &mut m, "ck/2")?;
        unlink(ck, c, &mut m, "ck/3")?;
        // A cached copy cut short: its record says staged again first.
        let data = bytes(6, 60 * KIB);
        checkpoint(ck, &mut m, "ck/4", &data, false)?;
        ck.drain()?;
        let short = data[..30 * KIB as usize].to_vec();
        m.may("ck/4", Seen::Bytes(short.clone()));
        let fh = ck.open_file(&p("ck/4"), true, false)?;
        let r = ck
            .truncate(fh, short.len() as u64)
            .and_then(|()| ck.fsync(fh));
        ck.release(fh);
        r?;
        m.acked("ck/4", Seen::Bytes(short));
        Ok(())
    })();
    m
}

/// Checks the model after recovery: each name in an allowed state, then
/// (drained) the capacity tier holds what a read showed, and a name that
/// was gone is back only in a state allowed (never after an acknowledged
/// unlink). With `published`
/// (close-to-open), an acknowledged checkpoint is on the capacity tier
/// itself before any demotion.
fn check_model(ck: &Checkpoints, c: &Arc<dyn Backend>, m: &Model, what: &str, published: bool) {
    let mut seen = vec![];
    for (name, allowed) in &m.names {
        let got = shown(ck, c, &p(name));
        assert!(
            allowed.iter().any(|s| s.matches(got.as_deref())),
            "{what}: {name} shows {:?} bytes, allowed {:?}",
            got.as_ref().map(Vec::len),
            allowed
                .iter()
                .map(|s| match s {
                    Seen::Bytes(d) => format!("bytes {}", d.len()),
                    Seen::Prefix(d, min) => format!("prefix {min}..={}", d.len()),
                    other => format!("{other:?}"),
                })
                .collect::<Vec<_>>()
        );
        if published {
            if let [Seen::Bytes(d)] = allowed.as_slice() {
                assert!(
                    capacity_bytes(c, &p(name)) == *d,
                    "{what}: {name} acknowledged, not on the capacity tier"
                );
            }
        }
        seen.push((name, allowed, got));
    }
    ck.drain()
        .unwrap_or_else(|e| panic!("{what}: drain after recovery: {e}"));
    for (name, allowed, got) in seen {
        match got {
            Some(got) => assert!(
                capacity_bytes(c, &p(name)) == got,
                "{what}: {name} drained differs from what a read showed"
            ),
            // A copy whose create was in flight may get its name back
            // at its demotion, in a state allowed; a removed name never.
            None => {
                let now = c
                    .metadata(&p(name))
                    .ok()
                    .map(|_| capacity_bytes(c, &p(name)));
                assert!(
                    allowed.iter().any(|s| s.matches(now.as_deref())),
                    "{what}: {name} came back at the drain"
                );
            }
        }
    }
}

fn placement_options() -> CkptOptions {
    CkptOptions {
        eviction: sluice_policy::bbos::Eviction::Bbos {
            version_aware: true,
        },
        ..options(100 * KIB)
    }
}

/// Staged, direct, spilled, demoted, evicted, rewritten and unlinked
/// checkpoints: after a crash at every sync point of either tier every
/// acknowledged checkpoint reads back whole under its name, an
/// acknowledged unlink stays done, and no read or demotion serves older
/// bytes than those acknowledged.
#[test]
fn every_placement_survives_a_crash_at_every_sync_point() {
    let o = placement_options();
    {
        // The workload does what it says.
        let dir = tempfile::tempdir().unwrap();
        let (_fast, _cap, f, c) = tiers();
        let ck = open(&f, &c, dir.path(), o.clone()).unwrap();
        let m = placements(&ck, &c);
        assert!(m.names.iter().all(|(_, a)| a.len() == 1), "all acked");
        let s = ck.status().stats;
        assert_eq!(
            (s.cold_direct, s.spills, s.demotions, s.evictions),
            (1, 1, 2, 1),
            "{s:?}"
        );
    }
    let runs = at_every_sync_point(&o, placements, |ck, c, m, what| {
        check_model(ck, c, m, what, false)
    });
    assert!(runs > 40, "{runs} runs");
}

/// Under `bbos.consistency = "close-to-open"` an fsync also writes the
/// staged copy to the capacity tier and syncs it there (published, the
/// copy cached): after a crash at every sync point of either tier an
/// acknowledged checkpoint is on the capacity tier itself, demoted or
/// not.
#[test]
fn a_published_checkpoint_is_on_the_capacity_tier_after_a_crash_at_every_sync_point() {
    let o = CkptOptions {
        publish_on_sync: true,
        ..placement_options()
    };
    let runs = at_every_sync_point(&o, placements, |ck, c, m, what| {
        check_model(ck, c, m, what, true)
    });
    assert!(runs > 40, "{runs} runs");
}

/// A checkpoint closed without fsync (node-local: close syncs nothing) is
/// demoted, or published by its close under close-to-open: its record
/// says `cached`, so after a power cut a restart read is served by the
/// fast-tier copy, which must then be the bytes the capacity tier holds.
/// (Before, neither synced the fast-tier copy: the power cut left it
/// empty behind a `cached` record, and a restart read was a hit of zero
/// bytes while the capacity tier held the checkpoint.)
#[test]
fn a_copy_cached_without_an_fsync_reads_as_its_capacity_copy_after_a_power_cut() {
    for publish in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let (fast, cap, f, c) = tiers();
        let data = bytes(7, 40 * KIB);
        let o = CkptOptions {
            publish_on_sync: publish,
            ..options(1 << 20)
        };
        {
            let ck = open(&f, &c, dir.path(), o.clone()).unwrap();
            ck.register(job("j", 64 * KIB, "ck/*", Failure::Nodes(2), 2))
                .unwrap();
            let fh = ck.create(&p("ck/a")).unwrap();
            ck.write(fh, 0, &data).unwrap();
            ck.close(fh).unwrap();
            ck.release(fh);
            if !publish {
                assert!(ck.demote_next().unwrap());
            }
            assert_eq!(ck.status().cached.0, 1, "publish {publish}: cached");
        }
        power_cut(&fast, &cap);
        let ck = open(&f, &c, dir.path(), o).unwrap();
        let got = shown(&ck, &c, &p("ck/a"));
        assert!(
            got.as_deref() == Some(&data[..]),
            "publish {publish}: a restart read shows {:?} bytes of {}",
            got.as_ref().map(Vec::len),
            data.len()
        );
        assert!(capacity_bytes(&c, &p("ck/a")) == data);
    }
}

/// What the workload of a checkpoint that fills the fast tier had
/// acknowledged.
#[derive(Default)]
struct FullAcks {
    /// Bytes acknowledged by an fsync (a prefix of the data).
    synced: usize,
}

/// The data of [`fill_the_fast_tier`]: 320 KiB on a fast tier of 200 KiB.
fn full_data() -> Vec<u8> {
    bytes(7, 320 * KIB)
}

/// A checkpoint written in 32 KiB writes, fsynced after 128 KiB (staged)
/// and at the end (moved to the capacity tier when the fast tier filled,
/// at about 200 KiB).
fn fill_the_fast_tier(ck: &Checkpoints, _c: &Arc<dyn Backend>) -> FullAcks {
    let mut acks = FullAcks::default();
    let data = full_data();
    let _ = (|| -> std::io::Result<()> {
        // Declared smaller than it is, so placement stages it.
        ck.register(job("j", 96 * KIB, "ck/*", Failure::Nodes(2), 1))?;
        let fh = ck.create(&p("ck/big"))?;
        let step = 32 * KIB as usize;
        for (i, chunk) in data.chunks(step).enumerate() {
            ck.write(fh, (i * step) as u64, chunk)?;
            if (i + 1) * step == 128 * KIB as usize {
                ck.fsync(fh)?;
                acks.synced = 128 * KIB as usize;
            }
        }
        ck.fsync(fh)?;
        acks.synced = data.len();
        ck.release(fh);
        Ok(())
    })();
    acks
}

/// A staged checkpoint moved to the capacity tier because the fast tier
/// filled (docs/crash-consistency.md, "Checkpoint staging": the move)
/// keeps every acknowledged byte through a crash at any sync point of
/// either tier: before the move, the staged copy; after it, the capacity
/// file, synced before the copy's record goes.
#[test]
fn a_checkpoint_moved_when_the_fast_tier_filled_survives_a_crash_at_every_sync_point() {
    let data = full_data();
    let o = options(1 << 20);
    let sized = || tiers_with_fast(CrashBackend::with_capacity(200 * KIB), &["ck"]);
    let runs = at_every_sync_point_on(sized, &o, fill_the_fast_tier, |ck, c, acks, what| {
        let got = shown(ck, c, &p("ck/big"));
        if acks.synced == 0 {
            return;
        }
        let got = got.unwrap_or_else(|| panic!("{what}: ck/big gone"));
        assert!(
            got.len() >= acks.synced && got.len() <= data.len(),
            "{what}: {} bytes, {} acknowledged",
            got.len(),
            acks.synced
        );
        assert!(
            got[..acks.synced] == data[..acks.synced],
            "{what}: acknowledged bytes differ"
        );
    });
    // The dry run moved it: the move's syncs are among the crash points.
    let dir = tempfile::tempdir().unwrap();
    let (_, _, f, c) = tiers_with_fast(CrashBackend::with_capacity(200 * KIB), &["ck"]);
    let ck = open(&f, &c, dir.path(), o.clone()).unwrap();
    assert_eq!(fill_the_fast_tier(&ck, &c).synced, data.len());
    assert_eq!(ck.status().stats.full_moves, 1);
    assert!(runs > 20, "{runs} crash runs");
}
