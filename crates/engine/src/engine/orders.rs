//! Records in flight completed in random orders (issue 35, deliverable 1's
//! harness, its first part): a seeded test that drives the engine's own
//! record machine ([`Append`]) the way its threads do, but in one thread,
//! so that the order in which the payload writes outside the lock end is
//! the seed's, not the scheduler's.
//!
//! A seed draws a workload over three files: data records (routed to the
//! fast tier, or to the capacity tier, where the overlap rule may still
//! send them to the log) and truncates. Each data record is stepped under
//! the lock until its payload's write is handed out ([`Next::Unlocked`]),
//! and that work waits; at every turn the seed either places the next
//! operation or finishes one waiting payload, chosen at random, and steps
//! its record to the end, indexing it as `append_data` does
//! ([`index_landed`]). Truncates are the engine's own machine
//! ([`Truncate`]), placed while records of their file wait: its record
//! clips them when they land, which happens where the truncate waits for
//! them before it syncs the log.
//!
//! The model is replay in sequence order: every record applied in the
//! order of the sequence numbers the write buffer gave them, a capacity
//! write at the place it took between them. After every payload has
//! landed, a read of each file must give the model's bytes (zero past
//! either's end), and after a drain so must the capacity file alone.
//!
//! Fsyncs are in the workload too: one first lands every waiting payload,
//! in the seed's order, as the engine's fsync waits for the records in
//! flight, and acknowledges the file's bytes as the model has them then.
//! Half of them write the file back first, as an fsync under
//! close-to-open does ([`Engine::sync_file_and_fsync`]): every buffered
//! byte to the capacity file, one run a turn, then its sync, then, a
//! later turn, a clean record that drops them from the index and the
//! fsync's end, which acknowledges ([`Syncs`]).
//!
//! Each seed also runs a second time with a crash at a random turn, with
//! payloads waiting: both tiers stop at once ([`CrashBackend::halt`]) as a
//! kill of the mount, or as a power cut of the fast tier (torn writes or
//! not) with or without one of the capacity tier. The waiting payloads
//! never land. After recovery every file must keep what its last fsync
//! acknowledged and nothing changed since ([`Acked`]), and a drain must
//! put on the capacity tier exactly what the engine reads.
//!
//! The flusher is the harness's too: the engine runs without its thread,
//! and the regions are small (four of 16 KiB), so they fill and are
//! reused. A flush takes turns of its own, drawn as the others are, the
//! flusher's steps one at a time: the first looks up every full region up
//! to the first with a payload still waiting ([`begin_flush`]); each next
//! one carries out one command of the set's machine ([`SetWrite`]):
//! writes one run, or syncs one file; once it is done, a later turn
//! retires the set ([`retire_set`]) when no payload placed before its
//! lookups waits. Other turns fall between them, as writers go on while
//! the flusher writes outside the lock. A record that finds no room (the
//! flusher's thread would have made some) lands every waiting payload in
//! the seed's order, as the writers the engine would wait for do, writes
//! the set being written whole, retires, and flushes (`flush_regions`);
//! so does an fsync, whose write-back appends a record. A crash may so
//! come after any number of flushes, between two runs of a set, between
//! its writes and its syncs, before its retirement, and with payloads in
//! flight in regions flushed and reused before them. The drain at the end
//! starts the flusher's thread.
//!
//! Between any two turns the engine's state must meet its invariants
//! (`invariants.rs`), with exactly the work in flight the harness holds.
//!
//! A failure names its seed and its crash; `SLUICE_ORDERS_SEED=N cargo
//! test -p sluice-engine --lib orders` replays it, `SLUICE_ORDERS_SEEDS=N`
//! runs N (200 by default), each with and without its crash;
//! `SLUICE_ORDERS_VERBOSE=1` prints the workload and each turn.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_devices::rng::DeviceRng as Rng;
use sluice_env::crash::{Acked, CrashBackend};
use sluice_env::{Backend, OpenOptions, RelPath, SystemClock};
use sluice_policy::extent_index::Extent;
use sluice_policy::flush_gate::FlushGateConfig;
use sluice_policy::{FileId, Tier};

use super::append::{begin_capacity_write, index_landed, Append, Next, Work};
use super::flush::{
    begin_flush, flush_regions, retire_set, start_flush, sync_flushed, write_runs, write_set,
    Begun, Command, SetWrite, Started, Written,
};
use super::invariants::{self, UnderWay};
use super::sync::{begin_write_back, Begun as WriteBackBegun, Cleaning, Pass, WriteBack};
use super::truncate::{self, Truncate};
use super::writeback::{runs_of, write_back, StretchError};
use super::{cache, recovery, Engine, EngineConfig, Shared, State};
use crate::log::{RecordHeader, RecordKind};

const FILES: usize = 3;
const OPS: usize = 40;
const SPAN: u64 = 48 * 1024;
/// The least share of seeds, in percent, whose crash falls while a flush
/// set is being written (the crash test asserts it).
const MID_SET_PERCENT_MIN: usize = 5;
/// The least share of seeds, in percent, whose crash falls during a
/// write-back fsync.
const MID_WRITE_BACK_PERCENT_MIN: usize = 5;

#[derive(Clone)]
enum Op {
    Write {
        file: usize,
        offset: u64,
        payload: Vec<u8>,
        tier: Tier,
    },
    Truncate {
        file: usize,
        size: u64,
    },
    /// An fsync; with `write_back`, as under close-to-open: every
    /// buffered byte of the file written back to its capacity file first,
    /// and dropped from the index behind a clean record
    /// ([`Engine::sync_file_and_fsync`]).
    Fsync {
        file: usize,
        write_back: bool,
    },
}

/// A write shows its length and byte, not its payload.
impl std::fmt::Debug for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Op::Write {
                file,
                offset,
                payload,
                tier,
            } => write!(
                f,
                "write f{file} {offset}+{} {tier:?} byte {}",
                payload.len(),
                payload[0]
            ),
            Op::Truncate { file, size } => write!(f, "truncate f{file} {size}"),
            Op::Fsync {
                file,
                write_back: false,
            } => write!(f, "fsync f{file}"),
            Op::Fsync {
                file,
                write_back: true,
            } => write!(f, "write back and fsync f{file}"),
        }
    }
}

fn workload(rng: &mut Rng) -> Vec<Op> {
    (0..OPS)
        .map(|i| {
            let file = rng.below(FILES as u64) as usize;
            if rng.chance(8) {
                return Op::Fsync {
                    file,
                    write_back: rng.chance(50),
                };
            }
            if rng.chance(15) {
                return Op::Truncate {
                    file,
                    size: rng.below(SPAN),
                };
            }
            let len = 1 + rng.below(4096) as usize;
            let offset = rng.below(SPAN);
            // A byte of its own per write, never zero (holes read as 0).
            let byte = 1 + (i % 250) as u8;
            let tier = if rng.chance(20) {
                Tier::Capacity
            } else {
                Tier::Fast
            };
            Op::Write {
                file,
                offset,
                payload: vec![byte; len],
                tier,
            }
        })
        .collect()
}

fn config() -> EngineConfig {
    EngineConfig {
        regions: 4,
        region_bytes: 16 * 1024,
        record_max_bytes: 8 * 1024,
        // A flush turn flushes every full region: no foreground write
        // holds it, and only full regions go.
        flush_gate: FlushGateConfig {
            flush_idle: Duration::ZERO,
            flush_age: None,
            hold_while_writing: true,
        },
        write_back_idle: None,
        ..EngineConfig::default()
    }
}

/// A data record whose payload's write waits for its turn.
struct Waiting<'p> {
    append: Append<'p>,
    work: Work<'p>,
    file: FileId,
    offset: u64,
    len: usize,
}

/// One operation's effect for the model: its place in sequence order.
struct Applied<'p> {
    seq: u64,
    /// Written to the capacity file, between the records placed before
    /// it and the one that took `seq` after it.
    capacity: bool,
    file: usize,
    write: Option<(u64, &'p [u8])>,
    truncate: Option<u64>,
}

/// How a record's step under the lock ended ([`step`]).
enum Stepped<'p> {
    /// Placed in the log at this sequence number, and indexed.
    Logged(u64),
    /// Placed on the capacity tier.
    Capacity,
    /// Its payload's write, handed out.
    Unlocked(Work<'p>),
    /// No room in the log: [`make_room`], then step it again.
    NoRoom,
}

/// Step `append` under the lock until it hands out work, waits, or ends;
/// an end with a place in the log is indexed as `append_data` indexes it.
fn step<'p>(
    shared: &Shared,
    state: &mut State,
    append: &mut Append<'p>,
    file: FileId,
    offset: u64,
    len: usize,
    seed: u64,
) -> Stepped<'p> {
    match append.step(shared, state) {
        Next::Done(Ok(Some((location, seq)))) => {
            // INVARIANT: records of the harness are at most 4 KiB.
            let len = u32::try_from(len).expect("a small record");
            let extent = Extent {
                file_offset: offset,
                len,
                location,
                seq,
            };
            index_landed(state, file, extent);
            Stepped::Logged(seq)
        }
        Next::Done(Ok(None)) => Stepped::Capacity,
        Next::Done(Err(e)) => panic!("seed {seed}: a record failed: {e}"),
        Next::Wait(_) => Stepped::NoRoom,
        Next::Unlocked(work) => Stepped::Unlocked(work),
    }
}

/// The harness's flusher: a set being written, one command of its
/// machine a turn ([`SetWrite`]), then written and not yet retired.
#[derive(Default)]
struct Flusher {
    writing: Option<SetWrite>,
    written: Option<Written>,
}

impl Flusher {
    /// The engine crashed: the set being written, or written, never ends.
    fn lost(self) {
        if let Some(writing) = self.writing {
            writing.lost();
        }
        if let Some(written) = self.written {
            written.lost();
        }
    }

    /// A flush turn, one step of the flusher's: with a set written,
    /// retire it if no record its lookups may have seen is still in
    /// flight (else the turn does nothing); with a set being written,
    /// write its next run or sync its next file; else look up every full
    /// region up to the first with a record in flight.
    fn turn(&mut self, shared: &Shared, verbose: bool, seed: u64) {
        if let Some(set) = self.written.take() {
            if set.waits(&sluice_env::lock(&shared.state)) {
                self.written = Some(set);
            } else {
                if verbose {
                    eprintln!("  retire {set:?}");
                }
                retire(shared, set, seed);
            }
            return;
        }
        let Some(mut writing) = self.writing.take() else {
            match begin_flush(shared) {
                Ok(Begun::Writing(writing)) => self.writing = Some(*writing),
                Ok(Begun::Step(_)) => {}
                Err(e) => panic!("seed {seed}: a flush failed: {e}"),
            }
            return;
        };
        match writing.next(shared) {
            Command::Write(runs) => {
                if verbose {
                    eprintln!("  flush run {:?}", runs[0]);
                }
                let touched = write_runs(shared, &runs[..1])
                    .unwrap_or_else(|e| panic!("seed {seed}: a flush's write failed: {e}"));
                writing.wrote(1, touched);
            }
            Command::Sync(files) => {
                if verbose {
                    eprintln!("  flush sync ({} left)", files.len());
                }
                sync_flushed(shared, files[0].as_ref())
                    .unwrap_or_else(|e| panic!("seed {seed}: a flush's sync failed: {e}"));
                writing.synced(1);
            }
            Command::Done => {
                let set = writing.written(shared);
                if verbose {
                    eprintln!("  written {set:?}");
                }
                self.written = Some(set);
                return;
            }
        }
        self.writing = Some(writing);
    }

    /// Once every payload has landed: the set being written, written
    /// whole, and the set written, retired.
    fn finish(&mut self, shared: &Shared, seed: u64) {
        if let Some(writing) = self.writing.take() {
            let set = write_set(shared, writing)
                .unwrap_or_else(|e| panic!("seed {seed}: a flush failed: {e}"));
            self.written = Some(set);
        }
        if let Some(set) = self.written.take() {
            retire(shared, set, seed);
        }
    }
}

/// A write-back fsync under way (`Op::Fsync { write_back: true }`), as
/// the engine's sync takes its steps with other writers going on: the
/// pass's machine ([`WriteBack`]) writes one run a turn, then syncs the
/// capacity file and ends its writes ([`WriteBack::end`]); later, with
/// room in the log, its clean record ([`Cleaning::clean`]) and the
/// fsync's own end, which acknowledges. One at a time.
#[derive(Default)]
struct Syncs {
    current: Option<Syncing>,
}

struct Syncing {
    file: usize,
    stage: Stage,
    /// What the fsync acknowledges once it returns: the file as placed
    /// before it, and what changed since.
    ack: Acked,
}

enum Stage {
    /// Runs written so far, and their bytes.
    Writing {
        pass: WriteBack,
        runs: usize,
        written: u64,
    },
    Cleaning(Cleaning),
}

impl Syncs {
    /// The engine crashed: the write-back under way never ends (a
    /// cleaning one holds nothing of the state).
    fn lost(self) {
        if let Some(Syncing {
            stage: Stage::Writing { pass, .. },
            ..
        }) = self.current
        {
            pass.lost();
        }
    }

    /// Start the write-back fsync of `file` (`id`), to acknowledge `ack`
    /// once it returns. One with nothing to write gives `ack` back: the
    /// caller ends the fsync now.
    fn start(
        &mut self,
        shared: &Shared,
        file: usize,
        id: FileId,
        ack: Acked,
        seed: u64,
    ) -> Option<Acked> {
        let pass = Pass::Sync { always: true };
        match begin_write_back(shared, id, pass, 0..u64::MAX, Instant::now()) {
            Ok(WriteBackBegun::Writing(pass)) => {
                let stage = Stage::Writing {
                    pass: *pass,
                    runs: 0,
                    written: 0,
                };
                self.current = Some(Syncing { file, stage, ack });
                None
            }
            Ok(WriteBackBegun::Done(_)) => Some(ack),
            Err(e) => panic!("seed {seed}: write-back of f{file}: {e}"),
        }
    }

    /// Whether the pass of `file` is writing (the file is busy: a
    /// truncate of it waits; and syncing: its flush runs wait).
    fn writing(&self, file: Option<usize>) -> bool {
        self.current.as_ref().is_some_and(|s| {
            matches!(s.stage, Stage::Writing { .. }) && file.is_none_or(|f| f == s.file)
        })
    }

    /// Whether a pass waits for its clean record.
    fn cleaning(&self) -> bool {
        self.current
            .as_ref()
            .is_some_and(|s| matches!(s.stage, Stage::Cleaning(_)))
    }

    /// A change of `file` placed: the fsync under way acknowledges what
    /// was there before it.
    fn changed(&mut self, file: usize, change: impl FnOnce(&mut Acked)) {
        if let Some(s) = self.current.as_mut().filter(|s| s.file == file) {
            change(&mut s.ack);
        }
    }

    /// One step of a pass that is writing: its next run, or, all written,
    /// the capacity file's sync and the end of its writes.
    fn step(&mut self, shared: &Shared, verbose: bool, seed: u64) {
        let Some(Syncing {
            file,
            stage:
                Stage::Writing {
                    pass,
                    runs,
                    written,
                },
            ..
        }) = self.current.as_mut()
        else {
            return;
        };
        let all = runs_of(pass.pieces(), shared.config.flush_run_max_bytes);
        if let Some(run) = all.get(*runs) {
            if verbose {
                eprintln!("  write back f{file}: run {} of {}", *runs + 1, all.len());
            }
            let handle = Arc::clone(pass.handle());
            let (bytes, result) = write_back(shared, handle.as_ref(), run, false, || Ok(()));
            if result.is_err() {
                panic!("seed {seed}: write-back of f{file}: a run failed");
            }
            *runs += 1;
            *written += bytes;
            return;
        }
        if verbose {
            eprintln!("  write back f{file}: sync, end");
        }
        let Some(Syncing {
            file,
            stage: Stage::Writing { pass, written, .. },
            ack,
        }) = self.current.take()
        else {
            unreachable!("writing, above");
        };
        let synced = pass.handle().sync_data().map_err(StretchError::Write);
        let cleaning = pass
            .end(shared, written, synced)
            .unwrap_or_else(|e| panic!("seed {seed}: write-back of f{file}: {e}"));
        self.current = Some(Syncing {
            file,
            stage: Stage::Cleaning(cleaning),
            ack,
        });
    }

    /// Every run of a pass that is writing, its sync and its end.
    fn write_out(&mut self, shared: &Shared, seed: u64) {
        while self.writing(None) {
            self.step(shared, false, seed);
        }
    }

    /// The clean record of a pass that waits for it, and the fsync's end,
    /// which acknowledges: with room in the log ([`make_room`] first).
    fn clean(&mut self, engine: &Engine, ids: &[FileId], acks: &mut [Option<Acked>], seed: u64) {
        if !self.cleaning() {
            return;
        }
        let Some(Syncing {
            file,
            stage: Stage::Cleaning(cleaning),
            ack,
        }) = self.current.take()
        else {
            unreachable!("cleaning, above");
        };
        cleaning
            .clean(&engine.shared)
            .and_then(|_| engine.fsync_with(ids[file], false))
            .unwrap_or_else(|e| panic!("seed {seed}: write back and fsync f{file}: {e}"));
        acks[file] = Some(ack);
    }
}

fn retire(shared: &Shared, set: Written, seed: u64) {
    if let Err(e) = retire_set(shared, set) {
        panic!("seed {seed}: a flush's retirement failed: {e}");
    }
}

/// The harness's state between turns, beside the engine.
struct Turns<'p> {
    waiting: Vec<Waiting<'p>>,
    flusher: Flusher,
    syncs: Syncs,
    /// What each file's last fsync acknowledged, and what changed since:
    /// every operation placed after an fsync comes after it in sequence
    /// order, so it is told in the order placed.
    acks: Vec<Option<Acked>>,
}

/// What the engine's waits for room come to: a write-back under way
/// writes its runs out (the flusher's runs of its file wait for it),
/// every waiting payload lands, in the seed's order, the set written is
/// retired, the full regions are flushed, and the write-back's clean
/// record and fsync end.
fn make_room(engine: &Engine, ids: &[FileId], turns: &mut Turns<'_>, rng: &mut Rng, seed: u64) {
    let shared = &*engine.shared;
    turns.syncs.write_out(shared, seed);
    let waiting = &mut turns.waiting;
    while !waiting.is_empty() {
        let i = rng.below(waiting.len() as u64) as usize;
        finish(shared, waiting.swap_remove(i), seed);
    }
    let flusher = &mut turns.flusher;
    flusher.finish(shared, seed);
    if let Err(e) = flush_regions(shared) {
        panic!("seed {seed}: a flush failed: {e}");
    }
    turns.syncs.clean(engine, ids, &mut turns.acks, seed);
}

/// Land a waiting payload: its work, then its record to the end.
fn finish(shared: &Shared, waiting: Waiting<'_>, seed: u64) {
    let Waiting {
        mut append,
        work,
        file,
        offset,
        len,
    } = waiting;
    let outcome = work.run(shared);
    let mut state = sluice_env::lock(&shared.state);
    append.resume(outcome);
    if let Stepped::Unlocked(_) | Stepped::NoRoom =
        step(shared, &mut state, &mut append, file, offset, len, seed)
    {
        panic!("seed {seed}: a landed record asked for more work");
    }
}

/// Each file's bytes as replay in sequence order gives them.
fn replay(applied: &[Applied<'_>]) -> Vec<Vec<u8>> {
    // A capacity write's `at` is the sequence number the next record
    // took: it sorts before that record (stable sort: operations placed
    // earlier come first at a tie).
    let mut order: Vec<&Applied<'_>> = applied.iter().collect();
    order.sort_by_key(|a| (a.seq, !a.capacity));
    let mut model = vec![Vec::new(); FILES];
    for a in order {
        let m = &mut model[a.file];
        if let Some(size) = a.truncate {
            m.resize(size as usize, 0);
        }
        if let Some((offset, bytes)) = a.write {
            let end = offset as usize + bytes.len();
            if m.len() < end {
                m.resize(end, 0);
            }
            m[offset as usize..end].copy_from_slice(bytes);
        }
    }
    model
}

/// How a run crashes (drawn from a stream of its own, so that up to the
/// crash the run is the plain one).
#[derive(Debug)]
struct Crash {
    /// The turn it comes at (past the last: after every payload landed).
    turn: usize,
    /// A power cut of the fast tier; without, a kill of the mount.
    fast_lost: bool,
    /// A power cut of the capacity tier too.
    capacity_lost: bool,
    torn: bool,
}

impl Crash {
    fn draw(seed: u64) -> Crash {
        let mut rng = Rng::new(seed ^ 0x9e37_79b9_7f4a_7c15);
        let turn = rng.below(2 * OPS as u64 + 1) as usize;
        let fast_lost = rng.chance(75);
        Crash {
            turn,
            fast_lost,
            capacity_lost: fast_lost && rng.chance(50),
            torn: rng.chance(50),
        }
    }
}

/// Fresh tiers: the capacity tier with inode numbers, as a POSIX tier
/// has them; torn writes at a crash as `crash` says.
fn tiers(seed: u64, crash: Option<&Crash>) -> (Arc<CrashBackend>, Arc<CrashBackend>) {
    let fast = Arc::new(CrashBackend::new());
    let capacity = Arc::new(CrashBackend::new());
    capacity.set_inode_numbers(true);
    for (tier, salt) in [(&fast, 1u64), (&capacity, 2)] {
        tier.set_torn_writes(crash.is_some_and(|c| c.torn));
        tier.set_seed(seed.wrapping_mul(0x2545_f491_4f6c_dd1d).wrapping_add(salt));
    }
    (fast, capacity)
}

/// The engine over the tiers; with `flusher`, its flusher's thread runs.
fn open(
    fast: &Arc<CrashBackend>,
    capacity: &Arc<CrashBackend>,
    flusher: bool,
) -> std::io::Result<Engine> {
    let (f, c): (Arc<dyn Backend>, Arc<dyn Backend>) = (fast.clone(), capacity.clone());
    recovery::open(f, c, Arc::new(SystemClock::new()), config(), flusher)
}

/// The first byte where `got` and `want` differ (zero past either's end).
fn differs(got: &[u8], want: &[u8]) -> Option<usize> {
    (0..got.len().max(want.len()))
        .find(|&i| got.get(i).copied().unwrap_or(0) != want.get(i).copied().unwrap_or(0))
}

/// The whole file, `None` if it has no name.
fn read_all(engine: &Engine, path: &RelPath) -> std::io::Result<Option<Vec<u8>>> {
    let id = match engine.open_file(path) {
        Ok(id) => id,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let got = engine.read(id, 0, SPAN * 2);
    engine.release(id);
    got.map(Some)
}

fn capacity_bytes(capacity: &CrashBackend, path: &RelPath) -> Option<Vec<u8>> {
    let file = capacity.open(path, OpenOptions::default()).ok()?;
    let mut got = vec![0u8; file.len().expect("len") as usize];
    crate::engine::read_fully(file.as_ref(), &mut got, 0).expect("read");
    Some(got)
}

/// What one seed's run came to.
struct Ran {
    /// The regions its flush turns flushed before the drain (0 after a
    /// crash).
    flushed: u64,
    /// It crashed while a flush set was being written.
    mid_set: bool,
    /// It crashed while a write-back fsync was under way.
    mid_write_back: bool,
}

/// One seed's run, crashed as `crash` says or not at all.
fn run(seed: u64, crash: Option<Crash>) -> Ran {
    let mut rng = Rng::new(seed);
    let ops = workload(&mut rng);
    let verbose = std::env::var_os("SLUICE_ORDERS_VERBOSE").is_some();
    if verbose {
        eprintln!("seed {seed}: {crash:?}");
        for (i, op) in ops.iter().enumerate() {
            eprintln!("{i:2} {op:?}");
        }
    }
    let (fast, capacity) = tiers(seed, crash.as_ref());
    let mut engine =
        open(&fast, &capacity, false).unwrap_or_else(|e| panic!("seed {seed}: open: {e}"));
    let paths: Vec<RelPath> = (0..FILES)
        .map(|i| RelPath::new(&format!("f{i}")).expect("a path"))
        .collect();
    let ids: Vec<FileId> = paths
        .iter()
        .map(|p| engine.create(p).expect("create"))
        .collect();
    let shared: &Shared = &engine.shared;
    let mut applied: Vec<Applied<'_>> = Vec::new();
    let mut turns = Turns {
        waiting: Vec::new(),
        flusher: Flusher::default(),
        syncs: Syncs::default(),
        acks: vec![None; FILES],
    };
    let mut next = ops.iter();
    let mut pending = ops.len();
    let mut turn = 0;
    while pending > 0 || !turns.waiting.is_empty() {
        // The engine's invariants hold between any two turns.
        let under_way = UnderWay {
            write_back: turns.syncs.writing(None).then(|| {
                let file = turns.syncs.current.as_ref().map_or(0, |s| s.file);
                ids[file]
            }),
            records_in_flight: turns.waiting.len(),
        };
        if let Err(e) = invariants::check(&sluice_env::lock(&shared.state), under_way) {
            panic!("seed {seed}, turn {turn}: {e}");
        }
        if crash.as_ref().is_some_and(|c| c.turn == turn) {
            break;
        }
        if verbose {
            eprintln!(
                "turn {turn}: {} placed, {} waiting",
                ops.len() - pending,
                turns.waiting.len()
            );
        }
        turn += 1;
        // Flush, step a write-back, finish a waiting payload, or place
        // the next operation.
        if rng.chance(10) {
            // The flusher's runs of a file being written back wait for it.
            if turns.syncs.writing(None) {
                turns.syncs.step(shared, verbose, seed);
            } else {
                turns.flusher.turn(shared, verbose, seed);
            }
            continue;
        }
        if turns.syncs.current.is_some() && rng.chance(20) {
            if turns.syncs.cleaning() {
                // Its clean record, with room in the log.
                make_room(&engine, &ids, &mut turns, &mut rng, seed);
            } else {
                turns.syncs.step(shared, verbose, seed);
            }
            continue;
        }
        let finishing = !turns.waiting.is_empty() && (pending == 0 || rng.chance(45));
        if finishing {
            let i = rng.below(turns.waiting.len() as u64) as usize;
            finish(shared, turns.waiting.swap_remove(i), seed);
            continue;
        }
        pending -= 1;
        // INVARIANT: `pending` counts the operations `next` still has.
        let op = next.next().expect("an operation left");
        if let Op::Fsync { file, write_back } = *op {
            // As the engine's fsync waits for every record in flight; and
            // its records (a commit, a clean record) find room. A
            // write-back under way ends first.
            make_room(&engine, &ids, &mut turns, &mut rng, seed);
            let ack = Acked::of(&replay(&applied)[file]);
            let ack = match write_back {
                true => turns.syncs.start(shared, file, ids[file], ack, seed),
                false => Some(ack),
            };
            if let Some(ack) = ack {
                engine
                    .fsync(ids[file])
                    .unwrap_or_else(|e| panic!("seed {seed}: {op:?}: {e}"));
                turns.acks[file] = Some(ack);
            }
            continue;
        }
        if let Op::Truncate { file, .. } = *op {
            // Engine::truncate waits for the file's write-back to write.
            if turns.syncs.writing(Some(file)) {
                turns.syncs.write_out(shared, seed);
            }
        }
        let mut state = sluice_env::lock(&shared.state);
        match op {
            Op::Write {
                file,
                offset,
                payload,
                tier,
            } => {
                let id = ids[*file];
                let len = payload.len() as u32;
                let end = offset + u64::from(len);
                if let Some(ack) = &mut turns.acks[*file] {
                    ack.write(*offset, end);
                }
                turns.syncs.changed(*file, |ack| ack.write(*offset, end));
                if let Some(open) = state.files.get_mut(&id) {
                    open.size = open.size.max(end);
                }
                let header = RecordHeader {
                    kind: RecordKind::Data,
                    file_id: id,
                    offset: *offset,
                    len,
                    payload_crc: 0,
                    seq: 0,
                };
                // The place a capacity write takes among the records.
                let at = state.buffer.next_seq();
                let mut append = Append::data(header, payload, id, *tier);
                let written = Applied {
                    seq: at,
                    capacity: false,
                    file: *file,
                    write: Some((*offset, payload)),
                    truncate: None,
                };
                let mut stepped;
                loop {
                    stepped = step(
                        shared,
                        &mut state,
                        &mut append,
                        id,
                        *offset,
                        payload.len(),
                        seed,
                    );
                    if !matches!(stepped, Stepped::NoRoom) {
                        break;
                    }
                    drop(state);
                    make_room(&engine, &ids, &mut turns, &mut rng, seed);
                    state = sluice_env::lock(&shared.state);
                }
                match stepped {
                    Stepped::NoRoom => unreachable!("stepped again above"),
                    Stepped::Unlocked(work) => {
                        turns.waiting.push(Waiting {
                            append,
                            work,
                            file: id,
                            offset: *offset,
                            len: payload.len(),
                        });
                        // Its sequence number, placed now.
                        let seq = state.buffer.next_seq() - 1;
                        applied.push(Applied { seq, ..written });
                    }
                    Stepped::Logged(seq) => applied.push(Applied { seq, ..written }),
                    Stepped::Capacity => {
                        // Placed on the capacity tier: written there now,
                        // as append_data does (nothing buffered overlaps;
                        // the clean copies of the range are forgotten),
                        // and owed to the next fsync.
                        let (handle, writer) =
                            begin_capacity_write(&mut state, id, *offset, payload.len())
                                .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
                        state
                            .files
                            .get_mut(&id)
                            .expect("an open file")
                            .capacity_unsynced = true;
                        drop(state);
                        handle
                            .write_at(payload, *offset)
                            .unwrap_or_else(|e| panic!("seed {seed}: capacity write: {e}"));
                        cache::end_own_write(&mut sluice_env::lock(&shared.state), writer);
                        // Before every record placed after it, after every
                        // one placed before.
                        applied.push(Applied {
                            capacity: true,
                            ..written
                        });
                    }
                }
            }
            Op::Truncate { file, size } => {
                let id = ids[*file];
                if let Some(ack) = &mut turns.acks[*file] {
                    ack.truncate(*size);
                }
                turns.syncs.changed(*file, |ack| ack.truncate(*size));
                // The engine's own truncate (truncate.rs), placed while
                // records of the file may be in flight: its record clips
                // them when they land. Where it waits (for room, or for the
                // records in flight before it syncs the log), the payloads
                // waiting land, in the seed's order ([`make_room`]). With
                // nothing of the file in the log it takes no record: it
                // falls between the records placed before it and after
                // it, as a capacity write does.
                let at = state.buffer.next_seq();
                let mut truncate = Truncate::new(id, *size);
                loop {
                    match truncate.step(shared, &mut state) {
                        truncate::Next::Done(done) => {
                            done.unwrap_or_else(|e| panic!("seed {seed}: truncate: {e}"));
                            break;
                        }
                        truncate::Next::Wait(_) | truncate::Next::WaitWhile(_) => {
                            drop(state);
                            make_room(&engine, &ids, &mut turns, &mut rng, seed);
                            state = sluice_env::lock(&shared.state);
                        }
                        truncate::Next::Unlocked(work) => {
                            drop(state);
                            let outcome = work.run(shared);
                            state = sluice_env::lock(&shared.state);
                            truncate.resume(outcome);
                        }
                    }
                }
                let (seq, capacity) = truncate.record_seq().map_or((at, true), |seq| (seq, false));
                applied.push(Applied {
                    seq,
                    capacity,
                    file: *file,
                    write: None,
                    truncate: Some(*size),
                });
            }
            Op::Fsync { .. } => unreachable!("placed above"),
        }
    }
    if let Some(crash) = crash {
        let mid_set = turns.flusher.writing.is_some();
        let mid_write_back = turns.syncs.current.is_some();
        // The payloads still waiting never land, a set being written or
        // written is never retired, and a write-back never ends.
        let acks = turns.acks;
        drop(turns.waiting);
        turns.flusher.lost();
        turns.syncs.lost();
        fast.halt(crash.fast_lost);
        capacity.halt(crash.capacity_lost);
        drop(engine);
        fast.restart();
        capacity.restart();
        recovered(seed, &crash, &fast, &capacity, &paths, &acks);
        return Ran {
            flushed: 0,
            mid_set,
            mid_write_back,
        };
    }
    if turns.syncs.current.is_some() {
        make_room(&engine, &ids, &mut turns, &mut rng, seed);
    }
    turns.flusher.finish(shared, seed);
    let model = replay(&applied);
    for (i, want) in model.iter().enumerate() {
        let got = engine
            .read(ids[i], 0, SPAN * 2)
            .unwrap_or_else(|e| panic!("seed {seed}: read: {e}"));
        if let Some(at) = differs(&got, want) {
            panic!(
                "seed {seed}: file {i} reads {:?} at {at}, replay in sequence order gives {:?} ({} ops)",
                got.get(at),
                want.get(at),
                applied.len()
            );
        }
    }
    let flushed = engine.stats().regions_flushed;
    engine
        .start_flusher()
        .unwrap_or_else(|e| panic!("seed {seed}: the flusher: {e}"));
    engine
        .drain()
        .unwrap_or_else(|e| panic!("seed {seed}: drain: {e}"));
    for (i, want) in model.iter().enumerate() {
        let got = capacity_bytes(&capacity, &paths[i]).expect("the capacity file");
        if let Some(at) = differs(&got, want) {
            panic!(
                "seed {seed}: after the drain, capacity file {i} holds {:?} at {at}, the model {:?}",
                got.get(at),
                want.get(at)
            );
        }
    }
    Ran {
        flushed,
        mid_set: false,
        mid_write_back: false,
    }
}

/// After `crash` and recovery: every fsync's acknowledgement is kept, and
/// a drain puts on the capacity tier what the engine reads.
fn recovered(
    seed: u64,
    crash: &Crash,
    fast: &Arc<CrashBackend>,
    capacity: &Arc<CrashBackend>,
    paths: &[RelPath],
    acks: &[Option<Acked>],
) {
    let engine = open(fast, capacity, true)
        .unwrap_or_else(|e| panic!("seed {seed}, {crash:?}: recovery failed: {e}"));
    let mut seen = Vec::new();
    for (path, ack) in paths.iter().zip(acks) {
        let got = read_all(&engine, path)
            .unwrap_or_else(|e| panic!("seed {seed}, {crash:?}: read {path}: {e}"));
        if let Some(ack) = ack {
            if let Err(e) = ack.check(got.as_deref()) {
                panic!(
                    "seed {seed}, {crash:?}: {path}: fsynced: {e} (reads {:?} bytes)",
                    got.map(|g| g.len())
                );
            }
        }
        seen.push(got);
    }
    engine
        .drain()
        .unwrap_or_else(|e| panic!("seed {seed}, {crash:?}: drain after recovery: {e}"));
    drop(engine);
    for (path, got) in paths.iter().zip(&seen) {
        let Some(got) = got else { continue };
        let on_capacity = capacity_bytes(capacity, path);
        if on_capacity.as_deref() != Some(got.as_slice()) {
            panic!(
                "seed {seed}, {crash:?}: {path}: after the drain the capacity tier holds {:?} bytes, the engine read {}",
                on_capacity.map(|b| b.len()),
                got.len()
            );
        }
    }
}

/// The seeds to run: `SLUICE_ORDERS_SEED` alone, else
/// `SLUICE_ORDERS_SEEDS` of them (200 by default).
fn seeds() -> Vec<u64> {
    let var = |name| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
    match (var("SLUICE_ORDERS_SEED"), var("SLUICE_ORDERS_SEEDS")) {
        (Some(seed), _) => vec![seed],
        (None, n) => (0..n.unwrap_or(200)).collect(),
    }
}

/// A data record of `id` at `offset` placed in the log, its payload's
/// write handed out and waiting.
fn place<'p>(shared: &Shared, id: FileId, offset: u64, payload: &'p [u8]) -> Waiting<'p> {
    let header = RecordHeader {
        kind: RecordKind::Data,
        file_id: id,
        offset,
        len: u32::try_from(payload.len()).expect("a small record"),
        payload_crc: 0,
        seq: 0,
    };
    let mut append = Append::data(header, payload, id, Tier::Fast);
    let mut state = sluice_env::lock(&shared.state);
    match step(
        shared,
        &mut state,
        &mut append,
        id,
        offset,
        payload.len(),
        0,
    ) {
        Stepped::Unlocked(work) => Waiting {
            append,
            work,
            file: id,
            offset,
            len: payload.len(),
        },
        _ => panic!("the record at {offset} did not wait for its payload"),
    }
}

/// Two files, `a` and `b`, on fresh tiers to crash as `crash` says, the
/// engine without its flusher's thread.
struct Pair {
    fast: Arc<CrashBackend>,
    capacity: Arc<CrashBackend>,
    engine: Engine,
    paths: Vec<RelPath>,
    a: FileId,
    b: FileId,
}

fn pair(crash: &Crash) -> Pair {
    let (fast, capacity) = tiers(1, Some(crash));
    let engine = open(&fast, &capacity, false).expect("open");
    let paths: Vec<RelPath> = ["a", "b"]
        .iter()
        .map(|p| RelPath::new(p).unwrap())
        .collect();
    let (a, b) = (
        engine.create(&paths[0]).unwrap(),
        engine.create(&paths[1]).unwrap(),
    );
    Pair {
        fast,
        capacity,
        engine,
        paths,
        a,
        b,
    }
}

/// Records of `b` of `fill`'s bytes, landed one after the other, until
/// the log's filling region is full: the offset the next would take.
fn fill_region(shared: &Shared, b: FileId, fill: &[u8]) -> u64 {
    let filling = |shared: &Shared| sluice_env::lock(&shared.state).buffer.pipeline().filling();
    let first = filling(shared);
    let mut offset = 0;
    while filling(shared) == first {
        finish(shared, place(shared, b, offset, fill), 0);
        offset += fill.len() as u64;
    }
    offset
}

/// Both tiers stopped as `crash` says under the pair's engine, which is
/// dropped only then (nothing it still tries reaches them), then
/// recovery, with `a`'s fsync acknowledging `acked`.
fn crash_and_recover(crash: &Crash, pair: Pair, acked: Acked) {
    let Pair {
        fast,
        capacity,
        engine,
        paths,
        ..
    } = pair;
    fast.halt(crash.fast_lost);
    capacity.halt(crash.capacity_lost);
    drop(engine);
    fast.restart();
    capacity.restart();
    recovered(0, crash, &fast, &capacity, &paths, &[Some(acked), None]);
}

/// The case behind `Written::waits` (docs/crash-consistency.md,
/// "superseded bytes"): a flush leaves out fsynced bytes that a newer
/// record Y superseded, and Y lies behind a record X still in flight in
/// its region. Retired then, a power cut ends the region's scan at X, and
/// Y goes with it: the file came back shorter than its fsync.
#[test]
fn a_flush_retires_only_once_the_records_it_left_bytes_out_for_are_recoverable() {
    let crash = Crash {
        turn: 0,
        fast_lost: true,
        capacity_lost: false,
        torn: false,
    };
    let pair = pair(&crash);
    let (engine, a, b) = (&pair.engine, pair.a, pair.b);
    let shared: &Shared = &engine.shared;
    let (old, new, fill) = (vec![1u8; 4096], vec![2u8; 4096], vec![3u8; 4000]);
    finish(shared, place(shared, a, 0, &old), 0);
    engine.fsync(a).unwrap();
    let mut acked = Acked::of(&old);
    // Fill the first region with another file's bytes.
    let offset = fill_region(shared, b, &fill);
    // X in flight, then Y over the fsynced bytes, landed.
    let x = place(shared, b, offset, &fill);
    finish(shared, place(shared, a, 0, &new), 0);
    acked.write(0, new.len() as u64);
    let Ok(Started::Written(set)) = start_flush(shared) else {
        panic!("the full region was not flushed");
    };
    assert!(
        set.waits(&sluice_env::lock(&shared.state)),
        "the retirement does not wait for X"
    );
    finish(shared, x, 0);
    assert!(!set.waits(&sluice_env::lock(&shared.state)));
    retire(shared, set, 0);
    crash_and_recover(&crash, pair, acked);
}

/// The case behind `truncate::capacity_owed`'s flush notes: a flush run gives the
/// capacity file a length its set has not synced yet, and a truncate
/// below it, clipping every logged byte, skipped the grow's sync. A power
/// cut of the capacity tier before the cut's sync took the length back,
/// and the durable record clipped the older records: the fsynced file
/// came back shorter than its truncate.
#[test]
fn a_truncate_between_a_flush_run_and_its_sync_keeps_the_files_length() {
    let crash = Crash {
        turn: 0,
        fast_lost: true,
        capacity_lost: true,
        torn: false,
    };
    let pair = pair(&crash);
    let (engine, a, b) = (&pair.engine, pair.a, pair.b);
    let shared: &Shared = &engine.shared;
    // a: a hole, then 4 KiB, fsynced (in the log only).
    let (bytes, fill) = (vec![1u8; 4096], vec![3u8; 4000]);
    finish(shared, place(shared, a, 8192, &bytes), 0);
    engine.fsync(a).unwrap();
    let mut acked = Acked::of(&[vec![0u8; 8192], bytes].concat());
    // Fill the region with another file's bytes, so that it flushes.
    fill_region(shared, b, &fill);
    // Every run of the set written, none of its files synced yet.
    let Ok(Begun::Writing(mut writing)) = begin_flush(shared) else {
        panic!("the full region was not flushed");
    };
    while let Command::Write(runs) = writing.next(shared) {
        let touched = write_runs(shared, &runs).expect("a flush run");
        writing.wrote(runs.len(), touched);
    }
    assert_eq!(
        capacity_bytes(&pair.capacity, &pair.paths[0]).map(|c| c.len()),
        Some(12288)
    );
    // A truncate below every logged byte of a, the capacity tier's power
    // cut at its first sync: the grow's (it was owed one), or else the
    // cut's, behind a durable record.
    pair.capacity.crash_at(pair.capacity.sync_points() + 1);
    assert!(
        engine.truncate(a, 4096).is_err(),
        "the capacity tier went down"
    );
    acked.truncate(4096);
    writing.lost();
    crash_and_recover(&crash, pair, acked);
}

#[test]
fn records_landing_in_any_order_index_as_replay_in_sequence_order() {
    let seeds = seeds();
    let flushing = seeds
        .iter()
        .filter(|&&seed| run(seed, None).flushed > 0)
        .count();
    // The harness's reach: regions filled, flushed and reused while
    // payloads wait, in nearly every seed (each of 0-199 does).
    assert!(
        seeds.len() < 10 || flushing * 10 >= seeds.len() * 9,
        "only {flushing} of {} seeds flushed a region before the drain",
        seeds.len()
    );
}

#[test]
fn a_crash_with_records_landing_in_any_order_keeps_every_fsynced_byte() {
    let seeds = seeds();
    let ran: Vec<Ran> = seeds
        .iter()
        .map(|&seed| run(seed, Some(Crash::draw(seed))))
        .collect();
    let mid_set = ran.iter().filter(|r| r.mid_set).count();
    let mid_write_back = ran.iter().filter(|r| r.mid_write_back).count();
    // The harness's reach: a crash between a set's runs or syncs, and
    // during a write-back, in some seeds (21 and 31 of 0-199 crash so,
    // 279 and 335 of 0-1999).
    assert!(
        seeds.len() < 100 || mid_set * 100 >= seeds.len() * MID_SET_PERCENT_MIN,
        "only {mid_set} of {} seeds crashed while a flush set was being written",
        seeds.len()
    );
    assert!(
        seeds.len() < 100 || mid_write_back * 100 >= seeds.len() * MID_WRITE_BACK_PERCENT_MIN,
        "only {mid_write_back} of {} seeds crashed during a write-back",
        seeds.len()
    );
}
