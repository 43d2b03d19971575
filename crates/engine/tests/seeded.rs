//! The seeded crash harness (issue 35, deliverable 1; docs/crash-consistency.md,
//! "The seeded harness"). A seed draws:
//! - a workload over five names in four directories, two of them the
//!   workload's own (`d1` and `d1/d2`, made and removed as it goes):
//!   random and sequential writes, truncates, fsyncs, close-to-open's
//!   closes and fsyncs (write-backs), renames of one name over another
//!   (into and out of the drawn directories too), unlinks, mkdirs and
//!   rmdirs (of a directory with something in it as well: ENOTEMPTY), the
//!   application's fsync of the directories, drains and clean restarts (a
//!   restart ends with the drain of what recovery found);
//! - a crash point: either tier, before or after one of its sync points,
//!   torn writes or not, with or without a power cut of the other tier;
//! - the crash backends' own seeds.
//!
//! The workload runs once to count the sync points, then again on fresh
//! backends with the crash armed. After recovery, every file ([`Model`],
//! followed across renames) must read back what an fsync, a drain or a
//! close acknowledged and was not touched since, at a name it may have
//! (see [`Model`]); a drawn directory must be there, or not, where the
//! engine's guarantee says so (see [`Dir`]), and, while the capacity tier
//! kept its state, a name the workload left empty must hold no file (no
//! unlink, rename or rmdir undone); and a drain must put exactly what the
//! engine reads on the capacity tier. A run that stops with no crash
//! armed (the dry runs), or a directory operation answered otherwise than
//! the model says (an rmdir of a directory with something in it that does
//! not fail with ENOTEMPTY), fails the seed too.
//!
//! A failure names its seed; `SLUICE_SEED=N cargo test -p sluice-engine
//! --test seeded` replays it alone. CI runs [`SEEDS_IN_CI`] seeds;
//! `SLUICE_SEEDS=N` (from `SLUICE_SEED_FROM`, or `scripts/seeds.sh N
//! [FROM]`) runs more.
//!
//! What makes a seed replay the same run: the engine's own threads are
//! kept idle (regions large enough that none fills, so nothing flushes
//! but a drain, which the test thread waits on; one flush writer; no
//! idle write-back; the SSDUP+ policy, whose routing depends on the
//! request stream, not on time), so every sync point is reached in the
//! same order. The harness checks that for its first seeds (two dry runs,
//! the same counts). What it does not do yet: complete the engine's I/O
//! in random orders. That needs the engine's core without its threads
//! (the rest of deliverable 1); here the order is the engine's.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use sluice_devices::rng::DeviceRng as Rng;
use sluice_engine::{Engine, EngineConfig};
use sluice_env::crash::{Acked as Ack, CrashBackend};
use sluice_env::errno::{errno_name, errno_of};
use sluice_env::{Backend, FileKind, OpenOptions, RelPath, SystemClock};
use sluice_policy::detector::DetectorConfig;
use sluice_policy::flush_gate::FlushGateConfig;
use sluice_policy::redirector::{RedirectPolicy, RedirectorConfig};
use sluice_policy::FileId;

/// Seeds a CI run takes (a few seconds).
const SEEDS_IN_CI: u64 = 48;

/// Seeds whose dry run is done twice, to catch a run that does not replay.
const CHECKED_FOR_REPLAY: u64 = 4;

/// The names files are made at. `d` is the tiers' own directory, always
/// there; `d1` and `d1/d2` are [`DIRS`], which the workload makes and
/// removes (an op on a name in one that is missing gets its mkdir first,
/// see [`Shape`]).
const FILES: [&str; 5] = ["a", "d/b", "c", "d1/f3", "d1/d2/f4"];
/// The directories the workload makes and removes, parents first.
const DIRS: [&str; 2] = ["d1", "d1/d2"];
/// How often (in a hundred) an op is a directory op: a mkdir or rmdir,
/// or the application's fsync of the directories. The rest are drawn from
/// the table the harness had before it drew directories, in the same
/// shares.
const DIR_OPS: u64 = 8;
const SPAN: u64 = 96 * 1024;
const WRITE_MAX: u64 = 12 * 1024;
/// Ops drawn per seed: the 48 the harness drew before it drew directory
/// ops, and as many more as those take (about one in twelve), so the ops
/// of the earlier kinds a seed runs stay as many. The mkdirs a name needs
/// ([`Shape::needs`]) and the unlinks and renames that empty a directory
/// before its rmdir ([`Shape::emptied`]) come on top.
const OPS: usize = 52;

#[derive(Clone, Debug)]
enum Op {
    Write {
        file: usize,
        offset: u64,
        len: u64,
        seed: u8,
    },
    Truncate {
        file: usize,
        size: u64,
    },
    Fsync {
        file: usize,
    },
    /// Close-to-open's close: the file's buffered bytes written back to
    /// its capacity file and synced, a clean record in the log.
    Close {
        file: usize,
    },
    /// Close-to-open's fsync: the write-back, then the fsync.
    SyncFsync {
        file: usize,
    },
    /// A rename of one name over another (the file there, if any, is
    /// replaced).
    Rename {
        from: usize,
        to: usize,
    },
    Unlink {
        file: usize,
    },
    /// The application's `fsync` of the directories (the root, `d` and
    /// each drawn one there is): what makes a rename, a mkdir or an rmdir
    /// durable under POSIX (the engine's fsync of a renamed file does too
    /// for its rename: docs/crash-consistency.md, "rename"; for a mkdir or
    /// an rmdir nothing else does, see [`Dir`]).
    SyncDirs,
    /// `Engine::mkdir` of a drawn directory (its parent is there).
    Mkdir {
        dir: usize,
    },
    /// `Engine::rmdir` of a drawn directory that is there: it must fail
    /// with ENOTEMPTY, changing nothing, while a name or a directory is
    /// in it, and remove it otherwise.
    Rmdir {
        dir: usize,
    },
    Drain,
    Restart,
}

/// The drawn directory `path` is in, if it is in one ([`DIRS`]; `d` and
/// the root are always there).
fn parent_of(path: &str) -> Option<usize> {
    let (parent, _) = path.rsplit_once('/')?;
    DIRS.iter().position(|dir| *dir == parent)
}

/// The names and directories the workload has at each point of its
/// drawing, as the run will have them (the run stops at the crash, so
/// the prefix it runs is as drawn). It puts the mkdirs a drawn op needs
/// before it (without, the op would fail with ENOENT, which the run takes
/// for the crash, ending the seed's workload there), and keeps the
/// appends' offsets at the files' ends.
#[derive(Debug, Default)]
struct Shape {
    sizes: [u64; FILES.len()],
    files: [bool; FILES.len()],
    dirs: [bool; DIRS.len()],
}

impl Shape {
    /// The drawn directories missing on the way to `path`, parents first.
    fn missing_dirs(&self, path: &str) -> Vec<usize> {
        let mut missing = Vec::new();
        let mut at = parent_of(path);
        while let Some(dir) = at {
            if !self.dirs[dir] {
                missing.insert(0, dir);
            }
            at = parent_of(DIRS[dir]);
        }
        missing
    }

    /// The mkdirs `op` needs first, then `op`.
    fn needs(&self, op: Op) -> Vec<Op> {
        let path = match op {
            Op::Write { file, .. }
            | Op::Truncate { file, .. }
            | Op::Fsync { file }
            | Op::Close { file }
            | Op::SyncFsync { file } => FILES[file],
            // A rename the run skips (no file to move) needs nothing.
            Op::Rename { from, to } if from != to && self.files[from] => FILES[to],
            Op::Mkdir { dir } => DIRS[dir],
            _ => return vec![op],
        };
        let mkdirs = self.missing_dirs(path).into_iter();
        mkdirs.map(|dir| Op::Mkdir { dir }).chain([op]).collect()
    }

    /// Whatever is in drawn directory `dir` taken out, then it removed, as
    /// `rm -r` goes: deepest first, each file there unlinked or renamed
    /// out to a name outside the drawn directories (where a later fsync
    /// syncs the parent the rename left, which is gone by then), each
    /// directory removed once empty.
    fn emptied(&self, dir: usize, rng: &mut Rng) -> Vec<Op> {
        let under = |d: usize| {
            d == dir
                || DIRS[d]
                    .strip_prefix(DIRS[dir])
                    .is_some_and(|rest| rest.starts_with('/'))
        };
        let mut ops = Vec::new();
        // `DIRS` lists parents first.
        for d in (0..DIRS.len()).rev().filter(|&d| under(d) && self.dirs[d]) {
            for file in
                (0..FILES.len()).filter(|&f| self.files[f] && parent_of(FILES[f]) == Some(d))
            {
                ops.push(match rng.chance(50) {
                    true => Op::Unlink { file },
                    false => {
                        let outside: Vec<usize> = (0..FILES.len())
                            .filter(|&f| parent_of(FILES[f]).is_none())
                            .collect();
                        Op::Rename {
                            from: file,
                            to: outside[rng.below(outside.len() as u64) as usize],
                        }
                    }
                });
            }
            ops.push(Op::Rmdir { dir: d });
        }
        ops
    }

    fn apply(&mut self, op: &Op) {
        match *op {
            Op::Write {
                file, offset, len, ..
            } => {
                self.files[file] = true;
                self.sizes[file] = self.sizes[file].max(offset + len);
            }
            Op::Truncate { file, size } => {
                self.files[file] = true;
                self.sizes[file] = size;
            }
            // These open the file first, which makes it.
            Op::Fsync { file } | Op::Close { file } | Op::SyncFsync { file } => {
                self.files[file] = true;
            }
            Op::Rename { from, to } if from != to && self.files[from] => {
                self.files[to] = true;
                self.sizes[to] = self.sizes[from];
                self.files[from] = false;
                self.sizes[from] = 0;
            }
            Op::Unlink { file } => {
                self.files[file] = false;
                self.sizes[file] = 0;
            }
            Op::Mkdir { dir } => self.dirs[dir] = true,
            Op::Rmdir { dir } => {
                let holds = (0..FILES.len())
                    .any(|f| self.files[f] && parent_of(FILES[f]) == Some(dir))
                    || (0..DIRS.len()).any(|d| self.dirs[d] && parent_of(DIRS[d]) == Some(dir));
                self.dirs[dir] = holds;
            }
            _ => {}
        }
    }
}

/// A name to draw: each of the three the harness had before it drew
/// directories a quarter of the time (a third before), so they keep most
/// of the ops that meet on one file; the two in drawn directories an
/// eighth each.
fn draw_name(rng: &mut Rng) -> usize {
    match rng.below(8) {
        0..=1 => 0,
        2..=3 => 1,
        4..=5 => 2,
        6 => 3,
        _ => 4,
    }
}

/// The seed's workload.
fn workload(rng: &mut Rng) -> Vec<Op> {
    let mut shape = Shape::default();
    (0..OPS)
        .flat_map(|_| {
            let file = draw_name(rng);
            let drawn = if rng.chance(DIR_OPS) {
                // A directory op: for a drawn directory, the mkdir of one
                // that is missing or the rmdir of one that is there, half
                // the time as it is (with whatever is in it: ENOTEMPTY),
                // half the time emptied first (its files are seldom all
                // gone by chance); a quarter of the time the fsync of the
                // directories, which makes them durable.
                match rng.below(4) {
                    0..=2 => {
                        let dir = rng.below(DIRS.len() as u64) as usize;
                        match (shape.dirs[dir], rng.chance(50)) {
                            (true, true) => shape.emptied(dir, rng),
                            (true, false) => vec![Op::Rmdir { dir }],
                            (false, _) => vec![Op::Mkdir { dir }],
                        }
                    }
                    _ => vec![Op::SyncDirs],
                }
            } else {
                vec![match rng.below(100) {
                    0..=34 => {
                        let len = 1 + rng.below(WRITE_MAX);
                        let offset = rng.below(SPAN);
                        Op::Write {
                            file,
                            offset,
                            len,
                            seed: rng.below(256) as u8,
                        }
                    }
                    // Appends: a sequential stream the policy may send to
                    // the capacity tier.
                    35..=51 => {
                        let len = 1 + rng.below(WRITE_MAX);
                        Op::Write {
                            file,
                            offset: shape.sizes[file],
                            len,
                            seed: rng.below(256) as u8,
                        }
                    }
                    52..=58 => Op::Truncate {
                        file,
                        size: rng.below(SPAN),
                    },
                    59..=68 => Op::Fsync { file },
                    69..=73 => Op::Close { file },
                    74..=77 => Op::SyncFsync { file },
                    78..=83 => Op::Rename {
                        from: file,
                        to: draw_name(rng),
                    },
                    84..=86 => Op::Unlink { file },
                    87 => Op::SyncDirs,
                    88..=95 => Op::Drain,
                    _ => Op::Restart,
                }]
            };
            let mut ops = Vec::new();
            for op in drawn {
                for op in shape.needs(op) {
                    shape.apply(&op);
                    ops.push(op);
                }
            }
            ops
        })
        .collect()
}

fn payload(seed: u8, offset: u64, len: u64) -> Vec<u8> {
    (offset..offset + len)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed) | 1)
        .collect()
}

/// What a file must hold after a crash. Two acknowledgements, of two
/// strengths (docs/crash-consistency.md, invariants 1, 3 and 4):
/// - `fsynced`, by a completed fsync (close-to-open's too): survives any
///   crash;
/// - `drained`, by a completed drain, or for one file its close-to-open
///   close: every byte is then on the capacity tier (and no older byte in
///   the log may be replayed over it), but only the bytes written back
///   from the log are synced there (a write that went straight to the
///   capacity file, or a new file's name, is as durable as the
///   application made it), so it binds only when the capacity tier did
///   not lose its unsynced state.
///
/// Where it must be found: at its name (or, if the crash cut a rename of
/// it, at either name) while the capacity tier kept its state; after a
/// power cut of that tier, at any name it had, and nowhere in particular
/// if it was renamed since the directories were last synced or it was
/// last fsynced, or if a drawn directory its name is in may not have come
/// back ([`Dir`]: the engine's fsync syncs the file's parent, not the
/// parent's own entry, which the mkdir left to the application). A file
/// unlinked or renamed over is owed nothing.
#[derive(Clone, Debug, Default)]
struct Model {
    /// The file was made (no name to keep before).
    exists: bool,
    /// Not unlinked, not renamed over: a file the workload still has.
    live: bool,
    /// Its name now, and every name it had (after a power cut of the
    /// capacity tier, a rename nobody synced may be undone: the file may
    /// be at any of them).
    name: usize,
    names: BTreeSet<usize>,
    /// The name it had before a rename that has not returned (the crash
    /// cut it): it may be at either.
    renaming_from: Option<usize>,
    /// Renamed since the directories were last synced or it was last
    /// fsynced: after a power cut of the capacity tier it may have no name
    /// at all (its new name was not synced, and its old one may hold
    /// another file by then), so nothing is required of it.
    renamed_unsynced: bool,
    current: Vec<u8>,
    fsynced: Option<Ack>,
    drained: Option<Ack>,
}

impl Model {
    fn acks(&mut self) -> impl Iterator<Item = &mut Ack> {
        [&mut self.fsynced, &mut self.drained].into_iter().flatten()
    }

    fn write(&mut self, offset: u64, data: &[u8]) {
        let end = offset + data.len() as u64;
        if end > self.current.len() as u64 {
            self.current.resize(end as usize, 0);
        }
        self.current[offset as usize..end as usize].copy_from_slice(data);
        self.acks().for_each(|ack| ack.write(offset, end));
    }

    fn truncate(&mut self, size: u64) {
        self.current.resize(size as usize, 0);
        self.acks().for_each(|ack| ack.truncate(size));
    }

    /// An fsync: the bytes, and the name (the engine syncs the parent of
    /// a file it created or renamed at its next fsync, and the old parent
    /// of one renamed from another directory).
    fn fsynced(&mut self) {
        self.fsynced = Some(Ack::of(&self.current));
        self.renamed_unsynced = false;
    }

    fn drained(&mut self) {
        if !self.exists {
            return;
        }
        self.drained = Some(Ack::of(&self.current));
    }

    /// Whether `got` (None: no file) keeps what was acknowledged; the
    /// drain's acknowledgement only if the capacity tier kept its state.
    fn check(&self, got: Option<&[u8]>, capacity_kept: bool) -> Result<(), String> {
        if let Some(ack) = &self.fsynced {
            ack.check(got).map_err(|e| format!("fsynced: {e}"))?;
        }
        if let Some(ack) = self.drained.as_ref().filter(|_| capacity_kept) {
            ack.check(got).map_err(|e| format!("drained: {e}"))?;
        }
        Ok(())
    }
}

/// A drawn directory, and what a crash may make of it.
///
/// The guarantee tested (docs/crash-consistency.md, "create"):
/// `Engine::mkdir` and `Engine::rmdir` are the capacity tier's own `mkdir`
/// and `rmdir`, nothing logged, nothing synced then (engine/mod.rs), but a
/// new directory's entry is owed a sync, which the fsync of a file under
/// it makes (a file is durable with every directory of its name), so
/// - while the capacity tier keeps its state, a directory is there exactly
///   when the workload left it there: recovery neither makes one (it
///   quarantines a file's records rather than make its missing directory,
///   and redoes no rename into one: recovery.rs, `redo_rename`) nor
///   removes one;
/// - after a power cut of that tier, a mkdir or an rmdir is durable as
///   POSIX makes it: once its parent is synced, which the workload does
///   at [`Op::SyncDirs`], and, for a directory made, at the fsync of a
///   file under it (`World::fsynced`). The engine's other syncs of
///   directories (a created or renamed file's parent at its fsync, the
///   owed ones at a clean stop) may make it durable sooner, so until then
///   either outcome is allowed; after, the directory must be there if it
///   was then and must not be if it was not, and a directory under one
///   that must not be there must not be either. A file inside a directory
///   that may not have come back is owed nothing then ([`Model`]).
#[derive(Clone, Copy, Debug)]
struct Dir {
    /// There now (the workload's mkdir and rmdir).
    exists: bool,
    /// What the capacity tier's synced state says, if the workload synced
    /// its parent since it last changed: `Some(exists)` after a SyncDirs,
    /// `None` after a mkdir or rmdir not synced since. (A SyncDirs syncs
    /// every directory there, so the entry is the same in every
    /// incarnation of the parent a power cut can bring back: the parent
    /// cannot be removed and made again without this entry changing
    /// first, or without being missing itself.)
    durable: Option<bool>,
}

impl Default for Dir {
    /// Never made: not on the capacity tier, synced or not.
    fn default() -> Dir {
        Dir {
            exists: false,
            durable: Some(false),
        }
    }
}

fn config() -> EngineConfig {
    EngineConfig {
        redirector: RedirectorConfig {
            policy: RedirectPolicy::SsdupPlus,
            detector: DetectorConfig { stream_len: 4 },
            ..RedirectorConfig::default()
        },
        // Room for every write between two drains, and for the regions a
        // restart seals: none fills, so nothing flushes but a drain.
        regions: 8,
        region_bytes: 2 * 1024 * 1024,
        record_max_bytes: 8 * 1024,
        flush_run_max_bytes: 16 * 1024,
        flush_writers: 1,
        // No flush for traffic's sake either (SSDUP+'s rule flushes full
        // regions, the ones a restart recovered among them, while writes
        // go to the log): only a drain, or no empty region, flushes.
        flush_gate: FlushGateConfig {
            flush_idle: Duration::MAX,
            flush_age: None,
            hold_while_writing: true,
        },
        wait_max: Duration::from_millis(50),
        write_back_idle: None,
        ..EngineConfig::default()
    }
}

fn path(file: usize) -> RelPath {
    RelPath::new(FILES[file]).unwrap()
}

fn dir_path(dir: usize) -> RelPath {
    RelPath::new(DIRS[dir]).expect("the drawn directories are valid paths")
}

/// Whether `e` is what an application is answered for an rmdir of a
/// directory with something in it (the errno the mount answers with).
fn is_enotempty(e: &std::io::Error) -> bool {
    errno_name(errno_of(e)) == Some("ENOTEMPTY")
}

fn open(fast: &Arc<CrashBackend>, capacity: &Arc<CrashBackend>) -> std::io::Result<Engine> {
    let (f, c): (Arc<dyn Backend>, Arc<dyn Backend>) = (fast.clone(), capacity.clone());
    Engine::open(f, c, Arc::new(SystemClock::new()), config())
}

/// Fresh tiers: the capacity tier with the files' directory, durable, and
/// inode numbers, as a POSIX tier has them (recovery tells by them that a
/// name now holds another file, whose bytes the log's records for the
/// name must not land in).
fn tiers() -> (Arc<CrashBackend>, Arc<CrashBackend>) {
    let fast = Arc::new(CrashBackend::new());
    let capacity = Arc::new(CrashBackend::new());
    capacity.set_inode_numbers(true);
    capacity.create_dir(&RelPath::new("d").unwrap()).unwrap();
    capacity.sync_dir(&RelPath::root()).unwrap();
    (fast, capacity)
}

/// The files a workload made, which one each name holds now, and its
/// drawn directories.
#[derive(Debug, Default)]
struct World {
    files: Vec<Model>,
    at: [Option<usize>; FILES.len()],
    dirs: [Dir; DIRS.len()],
    /// The op that failed, ending the run (the crash, or with none armed
    /// a failure the seed reports), and its error.
    stopped: Option<(usize, String)>,
    /// An answer of the engine the model says is wrong (a directory op's).
    wrong: Option<String>,
}

impl World {
    /// The file name `name` holds, made now if it holds none.
    fn at(&mut self, name: usize) -> &mut Model {
        let index = match self.at[name] {
            Some(index) => index,
            None => {
                self.files.push(Model {
                    exists: true,
                    live: true,
                    name,
                    names: BTreeSet::from([name]),
                    ..Model::default()
                });
                self.at[name] = Some(self.files.len() - 1);
                self.files.len() - 1
            }
        };
        &mut self.files[index]
    }

    /// The file at `name` is gone (unlinked, or renamed over).
    fn drop_name(&mut self, name: usize) {
        if let Some(index) = self.at[name].take() {
            self.files[index].live = false;
        }
    }

    fn drained(&mut self) {
        for file in &mut self.files {
            file.drained();
        }
    }

    /// What is in drawn directory `dir` now, if anything: the names
    /// holding a file and the directories there (an rmdir of it must fail
    /// with ENOTEMPTY).
    fn in_dir(&self, dir: usize) -> Vec<&'static str> {
        let files =
            (0..FILES.len()).filter(|&f| self.at[f].is_some() && parent_of(FILES[f]) == Some(dir));
        let dirs =
            (0..DIRS.len()).filter(|&d| self.dirs[d].exists && parent_of(DIRS[d]) == Some(dir));
        files
            .map(|f| FILES[f])
            .chain(dirs.map(|d| DIRS[d]))
            .collect()
    }

    fn made_dir(&mut self, dir: usize) {
        self.dirs[dir] = Dir {
            exists: true,
            durable: None,
        };
    }

    fn removed_dir(&mut self, dir: usize) {
        self.dirs[dir] = Dir {
            exists: false,
            durable: None,
        };
    }

    /// The file at name `file` was fsynced: its bytes and its name, with
    /// every drawn directory on the way to it (the engine syncs the parent
    /// of each it made that no sync has made durable: engine/unsynced.rs).
    fn fsynced(&mut self, file: usize) {
        self.at(file).fsynced();
        let mut at = parent_of(FILES[file]);
        while let Some(dir) = at {
            self.dirs[dir].durable = Some(true);
            at = parent_of(DIRS[dir]);
        }
    }

    /// The workload synced every directory there is: each drawn one's
    /// entry is durable as it is now, and so is every file's name.
    fn dirs_synced(&mut self) {
        for dir in &mut self.dirs {
            dir.durable = Some(dir.exists);
        }
        for file in &mut self.files {
            file.renamed_unsynced = false;
        }
    }

    /// Whether drawn directory `dir` must be there after a power cut of
    /// the capacity tier (`Some(true)`), must not be (`Some(false)`), or
    /// may be either ([`Dir`]).
    fn dir_after_power_cut(&self, dir: usize) -> Option<bool> {
        let own = self.dirs[dir].durable;
        match parent_of(DIRS[dir]).map(|parent| self.dir_after_power_cut(parent)) {
            None | Some(Some(true)) => own,
            // Its parent is gone, and it with it.
            Some(Some(false)) => Some(false),
            Some(None) => own.filter(|&there| !there),
        }
    }

    /// Whether every drawn directory on the way to name `name` must come
    /// back after a power cut of the capacity tier.
    fn dirs_come_back(&self, name: usize) -> bool {
        parent_of(FILES[name]).is_none_or(|dir| self.dir_after_power_cut(dir) == Some(true))
    }

    /// Whether directory `dir` must be there after the crash, must not
    /// be, or may be either.
    fn dir_after(&self, dir: usize, capacity_kept: bool) -> Option<bool> {
        match capacity_kept {
            true => Some(self.dirs[dir].exists),
            false => self.dir_after_power_cut(dir),
        }
    }
}

/// Run `ops` until the first error (the crash), or a wrong answer of a
/// directory op. Returns what was made, and where and why it stopped.
fn run(fast: &Arc<CrashBackend>, capacity: &Arc<CrashBackend>, ops: &[Op]) -> World {
    let mut world = World::default();
    let mut engine = match open(fast, capacity) {
        Ok(engine) => engine,
        Err(e) => {
            world.stopped = Some((0, format!("open: {e}")));
            return world;
        }
    };
    let mut ids: Vec<Option<FileId>> = vec![None; FILES.len()];
    let id_of = |engine: &Engine, ids: &mut Vec<Option<FileId>>, world: &mut World, file: usize| {
        if let Some(id) = ids[file] {
            return Ok(id);
        }
        let p = path(file);
        let id = match engine.open_file(&p) {
            Ok(id) => id,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => engine.create(&p)?,
            Err(e) => return Err(e),
        };
        ids[file] = Some(id);
        world.at(file);
        Ok(id)
    };
    let release = |engine: &Engine, ids: &mut Vec<Option<FileId>>, file: usize| {
        if let Some(id) = ids[file].take() {
            engine.release(id);
        }
    };
    for (i, op) in ops.iter().enumerate() {
        let done: std::io::Result<()> = (|| match *op {
            Op::Write {
                file,
                offset,
                len,
                seed,
            } => {
                let id = id_of(&engine, &mut ids, &mut world, file)?;
                let data = payload(seed, offset, len);
                // Touched before the call: a failed write may have landed.
                world.at(file).write(offset, &data);
                engine.write(id, offset, &data)
            }
            Op::Truncate { file, size } => {
                let id = id_of(&engine, &mut ids, &mut world, file)?;
                world.at(file).truncate(size);
                engine.truncate(id, size)
            }
            Op::Fsync { file } => {
                let id = id_of(&engine, &mut ids, &mut world, file)?;
                engine.fsync(id)?;
                world.fsynced(file);
                Ok(())
            }
            Op::Close { file } => {
                let id = id_of(&engine, &mut ids, &mut world, file)?;
                engine.sync_file(id, false)?;
                world.at(file).drained();
                Ok(())
            }
            Op::SyncFsync { file } => {
                let id = id_of(&engine, &mut ids, &mut world, file)?;
                engine.sync_file_and_fsync(id)?;
                world.fsynced(file);
                Ok(())
            }
            Op::Rename { from, to } => {
                if from == to || world.at[from].is_none() {
                    return Ok(());
                }
                release(&engine, &mut ids, from);
                release(&engine, &mut ids, to);
                // Taken before the call: a rename cut by the crash may
                // have happened.
                world.drop_name(to);
                let index = world.at[from].take().expect("checked above");
                let moved = &mut world.files[index];
                moved.name = to;
                moved.names.insert(to);
                moved.renaming_from = Some(from);
                moved.renamed_unsynced = true;
                world.at[to] = Some(index);
                engine.rename(&path(from), &path(to))?;
                world.files[index].renaming_from = None;
                Ok(())
            }
            Op::Unlink { file } => {
                if world.at[file].is_none() {
                    return Ok(());
                }
                release(&engine, &mut ids, file);
                world.drop_name(file);
                engine.unlink(&path(file))
            }
            Op::SyncDirs => {
                // Parents first, as `DIRS` lists them.
                for dir in ["", "d"] {
                    capacity.sync_dir(&RelPath::new(dir).unwrap())?;
                }
                for dir in (0..DIRS.len()).filter(|&d| world.dirs[d].exists) {
                    capacity.sync_dir(&dir_path(dir))?;
                }
                world.dirs_synced();
                Ok(())
            }
            Op::Mkdir { dir } => {
                engine.mkdir(&dir_path(dir))?;
                world.made_dir(dir);
                Ok(())
            }
            Op::Rmdir { dir } => {
                let inside = world.in_dir(dir);
                match (engine.rmdir(&dir_path(dir)), inside.is_empty()) {
                    (Ok(()), true) => {
                        world.removed_dir(dir);
                        Ok(())
                    }
                    // Refused, nothing removed: the files in it keep all
                    // they had (checked after the crash as ever).
                    (Err(e), false) if is_enotempty(&e) => Ok(()),
                    // Any other error is the crash's.
                    (Err(e), _) if !is_enotempty(&e) => Err(e),
                    (answer, _) => {
                        world.wrong = Some(format!(
                            "op {i}: rmdir {} with {inside:?} in it answered {answer:?}",
                            DIRS[dir]
                        ));
                        Err(std::io::Error::other("a wrong answer"))
                    }
                }
            }
            Op::Drain => {
                engine.drain()?;
                world.drained();
                Ok(())
            }
            Op::Restart => Ok(()),
        })();
        if let Err(e) = done {
            if verbose() {
                eprintln!("  op {i} failed: {e}");
            }
            world.stopped = Some((i, e.to_string()));
            break;
        }
        if let Op::Restart = op {
            for file in 0..FILES.len() {
                release(&engine, &mut ids, file);
            }
            engine.close();
            engine = match open(fast, capacity) {
                Ok(engine) => engine,
                Err(e) => {
                    world.stopped = Some((i, format!("open after the restart: {e}")));
                    return world;
                }
            };
            // A recovered engine flushes what it recovered at once, while
            // nothing is written (the gate's quiet rule); waited for here,
            // as a drain, so that it does not race the next operations.
            if let Err(e) = engine.drain() {
                world.stopped = Some((i, format!("drain after the restart: {e}")));
                break;
            }
            world.drained();
        }
    }
    for file in 0..FILES.len() {
        release(&engine, &mut ids, file);
    }
    engine.close();
    world
}

/// The whole file at `path` as the engine reads it, or `None` if it has
/// no file there.
fn read_all(engine: &Engine, path: &RelPath) -> Result<Option<Vec<u8>>, String> {
    let id = match engine.open_file(path) {
        Ok(id) => id,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("open {path}: {e}")),
    };
    let got = engine
        .read(id, 0, 4 * SPAN)
        .map_err(|e| format!("read {path}: {e}"));
    engine.release(id);
    got.map(Some)
}

fn capacity_bytes(capacity: &Arc<CrashBackend>, path: &RelPath) -> Option<Vec<u8>> {
    let file = capacity.open(path, OpenOptions::default()).ok()?;
    let mut buf = vec![0u8; file.len().ok()? as usize];
    let n = file.read_at(&mut buf, 0).ok()?;
    buf.truncate(n);
    Some(buf)
}

/// One seed, end to end; the error says what was lost.
fn check_seed(seed: u64) -> Result<String, String> {
    let mut rng = Rng::new(seed);
    let ops = workload(&mut rng);
    if verbose() {
        for (i, op) in ops.iter().enumerate() {
            eprintln!("  {i:2} {op:?}");
        }
    }
    // With no crash armed every op must do what it says: a run that
    // stopped short would leave the rest of the workload unreached, the
    // seed passing on less than it drew.
    let dry = || {
        let (fast, capacity) = tiers();
        let world = run(&fast, &capacity, &ops);
        if let Some(wrong) = world.wrong {
            return Err(format!("no crash: {wrong}"));
        }
        if let Some((i, e)) = world.stopped {
            return Err(format!("no crash, yet op {i} ({:?}) failed: {e}", ops[i]));
        }
        Ok((fast.sync_points(), capacity.sync_points()))
    };
    let (fast_points, capacity_points) = dry()?;
    if seed < CHECKED_FOR_REPLAY {
        let again = dry()?;
        if again != (fast_points, capacity_points) {
            return Err(format!(
                "does not replay: sync points (fast, capacity) {:?} then {again:?}",
                (fast_points, capacity_points)
            ));
        }
    }
    // The tiers' own setup (the capacity tier's directory) is not the
    // workload's: its sync points come first and are not crashed at.
    let setup = tiers().1.sync_points();
    let on_fast = rng.chance(50) || capacity_points <= setup;
    let (first, points) = if on_fast {
        (1, fast_points)
    } else {
        (setup + 1, capacity_points)
    };
    let point = first + rng.below(points + 1 - first);
    let after = rng.chance(50);
    let torn = rng.chance(60);
    let power_cut = rng.chance(50);
    let what = format!(
        "crash {} {} sync {point} of {points}, torn {torn}, power cut of the other tier {power_cut}",
        if after { "after" } else { "at" },
        if on_fast { "fast" } else { "capacity" },
    );

    let (fast, capacity) = tiers();
    for (tier, salt) in [(&fast, 1u64), (&capacity, 2)] {
        tier.set_torn_writes(torn);
        tier.set_seed(seed.wrapping_mul(0x2545_f491_4f6c_dd1d).wrapping_add(salt));
    }
    let (crashing, other) = if on_fast {
        (&fast, &capacity)
    } else {
        (&capacity, &fast)
    };
    if after {
        crashing.crash_after(point);
    } else {
        crashing.crash_at(point);
    }
    if verbose() {
        eprintln!("seed {seed}: {what}");
    }
    let world = run(&fast, &capacity, &ops);
    if let Some(wrong) = &world.wrong {
        return Err(format!("{what}: {wrong}"));
    }
    if crashing.crashed_at().is_none() {
        return Err(format!("{what}: the armed crash never fired"));
    }
    if power_cut {
        other.crash();
    }
    let capacity_kept = on_fast && !power_cut;
    fast.restart();
    capacity.restart();

    let engine = open(&fast, &capacity).map_err(|e| format!("{what}: recovery failed: {e}"))?;
    let mut seen = Vec::new();
    for file in 0..FILES.len() {
        let got = read_all(&engine, &path(file)).map_err(|e| format!("{what}: {e}"))?;
        seen.push(got);
    }
    // Where the capacity tier kept its state, a name the workload left
    // without a file (never made, unlinked, renamed away, its directory
    // removed) must hold none: an acknowledged unlink or rename is never
    // undone by replay, and recovery makes no file whose name is gone
    // (docs/crash-consistency.md, "truncate / unlink" and "rename"). The
    // names the op the crash cut was changing may be either way.
    if capacity_kept {
        let cut: Vec<usize> = match world.stopped.as_ref().map(|&(i, _)| &ops[i]) {
            Some(&Op::Rename { from, to }) => vec![from, to],
            Some(&Op::Unlink { file }) => vec![file],
            _ => Vec::new(),
        };
        for name in (0..FILES.len()).filter(|name| !cut.contains(name)) {
            if world.at[name].is_none() {
                if let Some(got) = &seen[name] {
                    return Err(format!(
                        "{what}: {}: a file of {} bytes, where the workload left none",
                        FILES[name],
                        got.len()
                    ));
                }
            }
        }
    }
    // Each drawn directory there, or not, where it must be ([`Dir`]).
    for (dir, name) in DIRS.iter().enumerate() {
        let Some(must) = world.dir_after(dir, capacity_kept) else {
            continue;
        };
        let there = match engine.getattr(&dir_path(dir)) {
            Ok(meta) => meta.kind == FileKind::Dir,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
            Err(e) => return Err(format!("{what}: getattr {name}: {e}")),
        };
        if there != must {
            return Err(format!(
                "{what}: directory {name} {} after recovery ({:?})",
                if there { "there" } else { "missing" },
                world.dirs[dir]
            ));
        }
    }
    // After a power cut of the capacity tier a file is owed its bytes only
    // if its name is durable: not renamed since the last sync of it, and
    // in directories that must have come back.
    let required = |m: &&Model| {
        m.live && (capacity_kept || (!m.renamed_unsynced && world.dirs_come_back(m.name)))
    };
    for model in world.files.iter().filter(required) {
        // With the capacity tier's state kept, every name is as the
        // workload left it; after a power cut of it, a file may be at any
        // name it had.
        let names: Vec<usize> = if capacity_kept {
            std::iter::once(model.name)
                .chain(model.renaming_from)
                .collect()
        } else {
            model.names.iter().copied().collect()
        };
        let mut errors = Vec::new();
        let found =
            names.iter().any(
                |&name| match model.check(seen[name].as_deref(), capacity_kept) {
                    Ok(()) => true,
                    Err(e) => {
                        errors.push(format!("{}: {e}", FILES[name]));
                        false
                    }
                },
            );
        if !found {
            return Err(format!("{what}: {}", errors.join("; ")));
        }
    }
    engine
        .drain()
        .map_err(|e| format!("{what}: drain after recovery: {e}"))?;
    engine.close();
    for (file, got) in seen.iter().enumerate() {
        let p = path(file);
        if let Some(got) = got {
            let on_capacity = capacity_bytes(&capacity, &p);
            if on_capacity.as_deref() != Some(got.as_slice()) {
                return Err(format!(
                    "{what}: {p}: after the drain the capacity tier holds {:?} bytes, \
                     the engine read {}",
                    on_capacity.map(|b| b.len()),
                    got.len()
                ));
            }
        }
    }
    Ok(what)
}

/// `SLUICE_SEED_VERBOSE`: print each seed's workload and crash.
fn verbose() -> bool {
    std::env::var_os("SLUICE_SEED_VERBOSE").is_some()
}

/// The seeds to run: `SLUICE_SEED` alone, else `SLUICE_SEEDS` of them
/// from `SLUICE_SEED_FROM` (0), else [`SEEDS_IN_CI`] from 0.
fn seeds() -> Vec<u64> {
    let var = |name| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
    let from = var("SLUICE_SEED_FROM").unwrap_or(0);
    match (var("SLUICE_SEED"), var("SLUICE_SEEDS")) {
        (Some(seed), _) => vec![seed],
        (None, Some(n)) => (from..from.saturating_add(n)).collect(),
        (None, None) => (0..SEEDS_IN_CI).collect(),
    }
}

#[test]
fn issue_35_seeded_crashes_lose_no_acknowledged_byte() {
    let mut failures = Vec::new();
    for seed in seeds() {
        if let Err(e) = check_seed(seed) {
            eprintln!("seed {seed}: {e}");
            failures.push(seed);
        }
    }
    assert!(
        failures.is_empty(),
        "seeds {failures:?} failed (above); replay one with \
         SLUICE_SEED=N cargo test -p sluice-engine --test seeded"
    );
}

/// The harness's own check: its model must catch a lost byte. An
/// acknowledged file read back with one byte changed, shorter, or gone
/// fails; a byte written after the acknowledgement may be either.
#[test]
fn the_model_catches_a_lost_acknowledged_byte() {
    let mut model = Model::default();
    model.write(0, &[1, 2, 3, 4]);
    model.fsynced();
    model.write(2, &[9]);
    for kept in [false, true] {
        assert!(model.check(Some(&[1, 2, 3, 4]), kept).is_ok());
        assert!(model.check(Some(&[1, 2, 9, 4]), kept).is_ok());
        assert!(model.check(Some(&[1, 7, 3, 4]), kept).is_err());
        assert!(model.check(Some(&[1, 2, 3]), kept).is_err());
        assert!(model.check(None, kept).is_err());
    }
    model.truncate(1);
    assert!(model.check(Some(&[1]), true).is_ok(), "size touched since");
    assert!(model.check(Some(&[5]), true).is_err());
    // A drain's acknowledgement binds while the capacity tier keeps its
    // state, and not after it lost it; a file never made has none.
    let mut model = Model::default();
    model.drained();
    assert!(model.check(None, true).is_ok());
    model.exists = true;
    model.write(0, &[1, 2]);
    model.drained();
    assert!(model.check(Some(&[1, 2]), true).is_ok());
    assert!(model.check(None, true).is_err());
    assert!(model.check(Some(&[1, 0]), true).is_err());
    assert!(model.check(None, false).is_ok());
}

/// The harness's own check of its directory model: after a power cut of
/// the capacity tier a mkdir or an rmdir binds only once the directories
/// were synced, a directory under one that must be gone must be gone, and
/// a file in a directory that may be gone is owed nothing; while the tier
/// kept its state, each directory is as the workload left it.
#[test]
fn the_directory_model_binds_only_what_a_sync_made_durable() {
    let mut world = World::default();
    // Never made: not there, whatever the crash.
    assert_eq!(world.dir_after(0, false), Some(false));
    world.made_dir(0);
    world.made_dir(1);
    assert_eq!(world.dir_after(1, true), Some(true));
    assert_eq!(world.dir_after(1, false), None);
    assert!(!world.dirs_come_back(3));
    world.at(3);
    assert_eq!(world.in_dir(0), ["d1/f3", "d1/d2"]);
    assert_eq!(world.in_dir(1), Vec::<&str>::new());
    world.dirs_synced();
    assert_eq!(world.dir_after(1, false), Some(true));
    assert!(world.dirs_come_back(4) && world.dirs_come_back(0));
    world.removed_dir(1);
    assert_eq!(world.dir_after(1, true), Some(false));
    assert_eq!(world.dir_after(1, false), None);
    assert!(!world.dirs_come_back(4) && world.dirs_come_back(3));
    world.dirs_synced();
    assert_eq!(world.dir_after(1, false), Some(false));
    // d1 made again after its removal was synced: d1/d2, never made in
    // it, is not there whichever d1 comes back.
    world.drop_name(3);
    world.removed_dir(0);
    world.dirs_synced();
    world.made_dir(0);
    assert_eq!(world.dir_after(0, false), None);
    assert_eq!(world.dir_after(1, false), Some(false));
    assert!(!world.dirs_come_back(3));
}
