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
//! ([`index_landed`]). Truncates are placed while records of their file
//! wait, as a truncate through another handle could be.
//!
//! The model is replay in sequence order: every record applied in the
//! order of the sequence numbers the write buffer gave them, a capacity
//! write at the place it took between them. After every payload has
//! landed, a read of each file must give the model's bytes (zero past
//! either's end), and after a drain so must the capacity file alone.
//!
//! The flusher runs, but nothing gives it work before the drain: the
//! regions never fill and the gate neither ages nor idles them out.
//!
//! A failure names its seed; `SLUICE_ORDERS_SEED=N cargo test -p
//! sluice-engine --lib orders` replays it, `SLUICE_ORDERS_SEEDS=N` runs N
//! (200 by default).

use std::sync::Arc;
use std::time::Duration;

use sluice_devices::rng::DeviceRng as Rng;
use sluice_env::memory::MemBackend;
use sluice_env::{Backend, RelPath, SystemClock};
use sluice_policy::extent_index::Extent;
use sluice_policy::flush_gate::FlushGateConfig;
use sluice_policy::{FileId, Tier};

use super::append::{index_landed, Append, Next, Work};
use super::{lock, Engine, EngineConfig, Shared, State};
use crate::log::{RecordHeader, RecordKind};

const FILES: usize = 3;
const OPS: usize = 40;
const SPAN: u64 = 48 * 1024;

#[derive(Clone, Debug)]
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
}

fn workload(rng: &mut Rng) -> Vec<Op> {
    (0..OPS)
        .map(|i| {
            let file = rng.below(FILES as u64) as usize;
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
        region_bytes: 4 * 1024 * 1024,
        record_max_bytes: 8 * 1024,
        flush_gate: FlushGateConfig {
            flush_idle: Duration::MAX,
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

/// Step `append` under the lock until it hands out work or ends; an end
/// with a place in the log is indexed as `append_data` indexes it.
/// Returns the work, or how it ended: `Some(seq)` placed in the log,
/// `None` placed on the capacity tier.
fn step<'p>(
    shared: &Shared,
    state: &mut State,
    append: &mut Append<'p>,
    file: FileId,
    offset: u64,
    len: usize,
    seed: u64,
) -> Result<Option<u64>, Work<'p>> {
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
            Ok(Some(seq))
        }
        Next::Done(Ok(None)) => Ok(None),
        Next::Done(Err(e)) => panic!("seed {seed}: a record failed: {e}"),
        Next::Wait(_) => panic!("seed {seed}: no room in the log (the regions are large)"),
        Next::Unlocked(work) => Err(work),
    }
}

fn run(seed: u64) {
    let mut rng = Rng::new(seed);
    let ops = workload(&mut rng);
    let fast: Arc<dyn Backend> = Arc::new(MemBackend::new());
    let capacity: Arc<dyn Backend> = Arc::new(MemBackend::new());
    let engine = Engine::open(
        Arc::clone(&fast),
        Arc::clone(&capacity),
        Arc::new(SystemClock::new()),
        config(),
    )
    .unwrap_or_else(|e| panic!("seed {seed}: open: {e}"));
    let paths: Vec<RelPath> = (0..FILES)
        .map(|i| RelPath::new(&format!("f{i}")).expect("a path"))
        .collect();
    let ids: Vec<FileId> = paths
        .iter()
        .map(|p| engine.create(p).expect("create"))
        .collect();
    let shared: &Shared = &engine.shared;
    let mut applied: Vec<Applied<'_>> = Vec::new();
    let mut waiting: Vec<Waiting<'_>> = Vec::new();
    let mut next = ops.iter();
    let mut pending = ops.len();
    while pending > 0 || !waiting.is_empty() {
        // Finish a waiting payload, or place the next operation.
        let finish = !waiting.is_empty() && (pending == 0 || rng.chance(45));
        if finish {
            let i = rng.below(waiting.len() as u64) as usize;
            let Waiting {
                mut append,
                work,
                file,
                offset,
                len,
            } = waiting.swap_remove(i);
            let outcome = work.run(shared);
            let mut state = lock(shared);
            append.resume(outcome);
            match step(shared, &mut state, &mut append, file, offset, len, seed) {
                Ok(_) => {}
                Err(_) => panic!("seed {seed}: a landed record asked for more work"),
            }
            continue;
        }
        pending -= 1;
        // INVARIANT: `pending` counts the operations `next` still has.
        let op = next.next().expect("an operation left");
        let mut state = lock(shared);
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
                match step(
                    shared,
                    &mut state,
                    &mut append,
                    id,
                    *offset,
                    payload.len(),
                    seed,
                ) {
                    Err(work) => {
                        waiting.push(Waiting {
                            append,
                            work,
                            file: id,
                            offset: *offset,
                            len: payload.len(),
                        });
                        // Its sequence number, placed now.
                        let seq = state.buffer.next_seq() - 1;
                        applied.push(Applied {
                            seq,
                            capacity: false,
                            file: *file,
                            write: Some((*offset, payload)),
                            truncate: None,
                        });
                    }
                    Ok(Some(seq)) => applied.push(Applied {
                        seq,
                        capacity: false,
                        file: *file,
                        write: Some((*offset, payload)),
                        truncate: None,
                    }),
                    Ok(None) => {
                        // Placed on the capacity tier: written there now,
                        // as append_data does (nothing buffered overlaps).
                        let handle = Arc::clone(&state.files[&id].handle);
                        drop(state);
                        handle
                            .write_at(payload, *offset)
                            .unwrap_or_else(|e| panic!("seed {seed}: capacity write: {e}"));
                        // Before every record placed after it, after every
                        // one placed before.
                        applied.push(Applied {
                            seq: at,
                            capacity: true,
                            file: *file,
                            write: Some((*offset, payload)),
                            truncate: None,
                        });
                    }
                }
            }
            Op::Truncate { file, size } => {
                let id = ids[*file];
                // As Engine::truncate, without its waits (a truncate
                // through another handle, while records are in flight).
                let mut append = Append::required(RecordHeader::truncate(id, *size, 0), &[], None);
                let Next::Done(Ok(Some((_, seq)))) = append.step(shared, &mut state) else {
                    panic!("seed {seed}: a truncate record did not land at once");
                };
                state.buffer.truncate(id, *size, seq);
                if let Some(open) = state.files.get_mut(&id) {
                    open.size = *size;
                }
                drop(state);
                // Cut the capacity file too (bytes written there before).
                let handle = Arc::clone(&lock(shared).files[&id].handle);
                handle
                    .set_len(*size)
                    .unwrap_or_else(|e| panic!("seed {seed}: cut: {e}"));
                applied.push(Applied {
                    seq,
                    capacity: false,
                    file: *file,
                    write: None,
                    truncate: Some(*size),
                });
            }
        }
    }
    // Replay in sequence order. A capacity write's `at` is the sequence
    // number the next record took: it sorts before that record (stable
    // sort: operations placed earlier come first at a tie).
    applied.sort_by_key(|a| (a.seq, !a.capacity));
    let mut model = vec![Vec::new(); FILES];
    for a in &applied {
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
    let same = |got: &[u8], want: &[u8]| -> Option<usize> {
        (0..got.len().max(want.len()))
            .find(|&i| got.get(i).copied().unwrap_or(0) != want.get(i).copied().unwrap_or(0))
    };
    for (i, want) in model.iter().enumerate() {
        let got = engine
            .read(ids[i], 0, SPAN * 2)
            .unwrap_or_else(|e| panic!("seed {seed}: read: {e}"));
        if let Some(at) = same(&got, want) {
            panic!(
                "seed {seed}: file {i} reads {:?} at {at}, replay in sequence order gives {:?} ({} ops)",
                got.get(at),
                want.get(at),
                applied.len()
            );
        }
    }
    engine
        .drain()
        .unwrap_or_else(|e| panic!("seed {seed}: drain: {e}"));
    for (i, want) in model.iter().enumerate() {
        let file = capacity
            .open(&paths[i], sluice_env::OpenOptions::default())
            .expect("the capacity file");
        let mut got = vec![0u8; file.len().expect("len") as usize];
        crate::engine::read_fully(file.as_ref(), &mut got, 0).expect("read");
        if let Some(at) = same(&got, want) {
            panic!(
                "seed {seed}: after the drain, capacity file {i} holds {:?} at {at}, the model {:?}",
                got.get(at),
                want.get(at)
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

#[test]
fn records_landing_in_any_order_index_as_replay_in_sequence_order() {
    for seed in seeds() {
        run(seed);
    }
}
