//! Property test of the write buffer's overlap rule against a byte model
//! (DESIGN §4.4–4.6).
//!
//! Random sequences of writes (routed to either tier, over tiny regions so
//! the log is often full, under both `when_full` settings), truncates,
//! renames that replace another file, flush steps and time passing drive a
//! [`WriteBuffer`] the way the engine does: records are kept in a model log
//! (region → payloads), capacity files in memory, and every `Wait` is
//! answered by flushing a region and retrying, as the flusher would. After
//! every step, every file read through the buffer (buffered pieces over
//! capacity bytes) must equal the model; after a final drain the capacity
//! files alone must equal it and nothing may stay buffered.
//!
//! This is the test that would have caught the full-log data loss: a write
//! written through to the capacity tier over older buffered bytes left those
//! indexed, so reads returned them and the flush wrote them over the new
//! bytes.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use proptest::prelude::*;
use sluice_policy::extent_index::{Extent, Piece};
use sluice_policy::flush_gate::FlushGateConfig;
use sluice_policy::pipeline::{PipelineConfig, WhenFull};
use sluice_policy::redirector::RedirectorConfig;
use sluice_policy::write_buffer::{
    FlushSet, FlushStart, Placement, WriteBuffer, WriteBufferConfig,
};
use sluice_policy::{FileId, LogLocation, Tier, Time};

const REGION_BYTES: u64 = 16 * 1024;
const HEADER: u64 = 64;
const DESCRIBE: u64 = 96;
const FILE_SPAN: u64 = 24 * 1024;
const NAMES: usize = 3;

#[derive(Clone, Debug)]
enum Op {
    Write {
        name: usize,
        offset: u64,
        len: u64,
        byte: u8,
        fast: bool,
    },
    Truncate {
        name: usize,
        size: u64,
    },
    RenameOver {
        from: usize,
        to: usize,
    },
    Flush,
    Advance {
        millis: u64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..NAMES, 0..FILE_SPAN, 1..6 * 1024u64, any::<u8>(), any::<bool>()).prop_map(
            |(name, offset, len, byte, fast)| Op::Write { name, offset, len, byte, fast }
        ),
        1 => (0..NAMES, 0..FILE_SPAN).prop_map(|(name, size)| Op::Truncate { name, size }),
        1 => (0..NAMES, 0..NAMES).prop_map(|(from, to)| Op::RenameOver { from, to }),
        2 => Just(Op::Flush),
        1 => (0..2_000u64).prop_map(|millis| Op::Advance { millis }),
    ]
}

/// The engine's side of the bargain, in memory.
struct Harness {
    buffer: WriteBuffer,
    now: Time,
    /// Region → payload offset → bytes of a data record.
    log: Vec<BTreeMap<u64, Vec<u8>>>,
    /// File id → capacity bytes.
    capacity: HashMap<FileId, Vec<u8>>,
    /// File id → logical size.
    sizes: HashMap<FileId, u64>,
    /// Name → file id.
    names: Vec<FileId>,
    next_id: u64,
    /// Name → the bytes the applications wrote (the model).
    model: Vec<Vec<u8>>,
}

impl Harness {
    fn new(when_full: WhenFull, regions: u32) -> Harness {
        let config = WriteBufferConfig {
            redirector: RedirectorConfig::default(),
            pipeline: PipelineConfig {
                regions,
                region_bytes: REGION_BYTES,
                when_full,
                wait_max: Duration::from_millis(500),
            },
            gate: FlushGateConfig::default(),
        };
        let mut h = Harness {
            buffer: WriteBuffer::new(config).expect("valid config"),
            now: Time::from_millis(1),
            log: vec![BTreeMap::new(); regions as usize],
            capacity: HashMap::new(),
            sizes: HashMap::new(),
            names: Vec::new(),
            next_id: 1,
            model: vec![Vec::new(); NAMES],
        };
        for _ in 0..NAMES {
            let id = h.new_file();
            h.names.push(id);
        }
        h
    }

    fn new_file(&mut self) -> FileId {
        let id = FileId(self.next_id);
        self.next_id += 1;
        self.capacity.insert(id, Vec::new());
        self.sizes.insert(id, 0);
        id
    }

    fn capacity_write(&mut self, id: FileId, offset: u64, data: &[u8]) {
        let file = self.capacity.get_mut(&id).expect("capacity file");
        let end = offset as usize + data.len();
        if file.len() < end {
            file.resize(end, 0);
        }
        file[offset as usize..end].copy_from_slice(data);
    }

    /// Flush every full region together, runs merged across them and the
    /// gaps between their bytes that other regions fill written too
    /// (sealing the filling one if none is full), as the engine's flusher
    /// does under a drain. False if nothing to flush.
    fn flush_region(&mut self) -> bool {
        self.buffer.set_draining(true);
        if !self.buffer.flush_pending() && self.buffer.seal().is_none() {
            self.buffer.set_draining(false);
            return false;
        }
        // As the engine's flusher asks (nothing is in flight here).
        let next = self
            .buffer
            .next_flush(self.now, FlushSet::EveryFull, 4096, |_| false)
            .expect("full regions");
        let FlushStart::Flush { regions: set, runs } = next else {
            panic!("a draining flusher with a full region must flush, got {next:?}");
        };
        for run in runs {
            let pieces = self
                .buffer
                .buffered_pieces(run.file, run.file_offset, run.len, None);
            for (file_offset, len, location) in pieces {
                let bytes = self.read_log(location, len);
                self.capacity_write(run.file, file_offset, &bytes);
            }
        }
        for region in set {
            self.log[region.0 as usize].clear();
            self.buffer.finish_flush(region).expect("flushing region");
        }
        self.buffer.set_draining(false);
        true
    }

    fn read_log(&self, location: LogLocation, len: u64) -> Vec<u8> {
        let records = &self.log[location.region.0 as usize];
        let (&start, payload) = records
            .range(..=location.offset)
            .next_back()
            .expect("an indexed extent points into a live record");
        let skip = (location.offset - start) as usize;
        assert!(
            skip + len as usize <= payload.len(),
            "an indexed extent runs past its record"
        );
        payload[skip..skip + len as usize].to_vec()
    }

    /// Retry `place` until it is not `Wait`, flushing a region each time.
    fn place(
        &mut self,
        mut place: impl FnMut(&mut WriteBuffer, Time, Time) -> Placement,
    ) -> Placement {
        let since = self.now;
        let mut waits = 0u32;
        loop {
            match place(&mut self.buffer, self.now, since) {
                Placement::Wait { retry_at_latest } => {
                    assert!(retry_at_latest >= self.now);
                    waits += 1;
                    if waits % 2 == 1 {
                        // The first wait runs out (under `wait`, the write
                        // may then go through unless it must reach the log).
                        self.now = retry_at_latest;
                    } else {
                        // A writer told to wait must be freed by a flush.
                        assert!(self.flush_region(), "told to wait with nothing to flush");
                    }
                }
                other => return other,
            }
        }
    }

    fn write(&mut self, name: usize, offset: u64, data: &[u8], tier: Tier) {
        let id = self.names[name];
        let len = data.len() as u64;
        let placement = self.place(|b, now, since| {
            b.place_write(
                now,
                id,
                offset,
                len,
                HEADER + len,
                DESCRIBE,
                tier,
                since,
                false,
            )
        });
        match placement {
            Placement::Log(r) => {
                self.log[r.region.0 as usize].insert(r.record_offset + HEADER, data.to_vec());
                self.buffer.insert(
                    id,
                    Extent {
                        file_offset: offset,
                        len: len as u32,
                        location: LogLocation {
                            region: r.region,
                            offset: r.record_offset + HEADER,
                        },
                        seq: r.seq,
                    },
                );
            }
            Placement::Capacity => self.capacity_write(id, offset, data),
            other => panic!("unexpected placement {other:?}"),
        }
        let size = self.sizes.get_mut(&id).expect("size");
        *size = (*size).max(offset + len);
    }

    /// A record that must reach the log (truncate, unlink, path).
    fn required(&mut self, file: Option<FileId>) {
        let placement =
            self.place(|b, now, since| b.place_required(now, file, HEADER, DESCRIBE, since));
        assert!(matches!(placement, Placement::Log(_)), "{placement:?}");
    }

    fn truncate(&mut self, name: usize, size: u64) {
        let id = self.names[name];
        if self.buffer.has_buffered(id) {
            self.required(None);
            let seq = self.buffer.next_seq() - 1;
            self.buffer.truncate(id, size, seq);
        }
        self.capacity
            .get_mut(&id)
            .expect("file")
            .resize(size as usize, 0);
        self.sizes.insert(id, size);
    }

    fn rename_over(&mut self, from: usize, to: usize) {
        if from == to {
            return;
        }
        let (source, target) = (self.names[from], self.names[to]);
        if self.buffer.has_buffered(target) {
            self.required(None); // the unlink record
            self.buffer.remove_file(target);
        }
        if self.buffer.has_buffered(source) {
            self.required(Some(source)); // the new path
        }
        self.capacity.remove(&target);
        self.sizes.remove(&target);
        self.names[to] = source;
        let fresh = self.new_file();
        self.names[from] = fresh;
    }

    fn read(&self, name: usize) -> Vec<u8> {
        let id = self.names[name];
        let size = self.sizes[&id];
        let mut out = vec![0u8; size as usize];
        for piece in self.buffer.lookup(id, 0, size) {
            let at = piece.file_offset() as usize;
            let dst = &mut out[at..at + piece.len() as usize];
            match piece {
                Piece::Buffered { location, len, .. } => {
                    dst.copy_from_slice(&self.read_log(location, len));
                }
                Piece::Hole { file_offset, len } => {
                    let cap = &self.capacity[&id];
                    for (i, b) in dst.iter_mut().enumerate() {
                        *b = cap.get(file_offset as usize + i).copied().unwrap_or(0);
                    }
                    let _ = len;
                }
            }
        }
        out
    }

    fn apply(&mut self, op: &Op) {
        match *op {
            Op::Write {
                name,
                offset,
                len,
                byte,
                fast,
            } => {
                let data = vec![byte; len as usize];
                let tier = if fast { Tier::Fast } else { Tier::Capacity };
                self.write(name, offset, &data, tier);
                let m = &mut self.model[name];
                let end = (offset + len) as usize;
                if m.len() < end {
                    m.resize(end, 0);
                }
                m[offset as usize..end].fill(byte);
            }
            Op::Truncate { name, size } => {
                self.truncate(name, size);
                self.model[name].resize(size as usize, 0);
            }
            Op::RenameOver { from, to } => {
                if from != to {
                    self.rename_over(from, to);
                    self.model[to] = std::mem::take(&mut self.model[from]);
                }
            }
            Op::Flush => {
                self.flush_region();
            }
            Op::Advance { millis } => {
                self.now = self.now.saturating_add(Duration::from_millis(millis));
            }
        }
    }
}

fn check(ops: &[Op], when_full: WhenFull, regions: u32) -> Result<(), TestCaseError> {
    let mut h = Harness::new(when_full, regions);
    for (step, op) in ops.iter().enumerate() {
        h.apply(op);
        h.buffer.index().check_invariants();
        for name in 0..NAMES {
            prop_assert_eq!(
                h.read(name),
                h.model[name].clone(),
                "read of name {} after step {} ({:?})",
                name,
                step,
                op
            );
        }
    }
    while h.flush_region() {}
    prop_assert!(h.buffer.is_drained());
    prop_assert_eq!(h.buffer.buffered_bytes(), 0);
    for name in 0..NAMES {
        let id = h.names[name];
        let mut cap = h.capacity[&id].clone();
        cap.resize(h.sizes[&id] as usize, 0);
        prop_assert_eq!(
            &cap,
            &h.model[name],
            "capacity file of name {} after drain",
            name
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn reads_and_drained_capacity_match_the_model_under_write_through(
        ops in prop::collection::vec(op(), 1..60),
        regions in 2..4u32,
    ) {
        check(&ops, WhenFull::WriteThrough, regions)?;
    }

    #[test]
    fn reads_and_drained_capacity_match_the_model_under_wait(
        ops in prop::collection::vec(op(), 1..60),
        regions in 2..4u32,
    ) {
        check(&ops, WhenFull::Wait, regions)?;
    }
}

/// The repro, step by step: a write through over older buffered
/// bytes of the same range must not leave them readable or flushable.
#[test]
fn write_through_over_buffered_bytes_is_not_shadowed_by_them() {
    let mut h = Harness::new(WhenFull::WriteThrough, 2);
    // Region 0: G 12 KiB and A; region 1: G 8 KiB and G 7.5 KiB, so both
    // are full when B comes.
    let ops = [
        Op::Write {
            name: 1,
            offset: 0,
            len: 12 * 1024,
            byte: b'G',
            fast: true,
        },
        Op::Write {
            name: 0,
            offset: 0,
            len: 1024,
            byte: b'A',
            fast: true,
        },
        Op::Write {
            name: 1,
            offset: 12 * 1024,
            len: 8 * 1024,
            byte: b'G',
            fast: true,
        },
        Op::Write {
            name: 1,
            offset: 20 * 1024,
            len: 7680,
            byte: b'G',
            fast: true,
        },
    ];
    for op in &ops {
        h.apply(op);
    }
    assert_eq!(h.buffer.pipeline().empty_count(), 0);
    assert!(h.buffer.pipeline().filling().is_none_or(|r| {
        h.buffer.pipeline().used_bytes(r).unwrap() + HEADER + 1024 > REGION_BYTES
    }));
    h.apply(&Op::Write {
        name: 0,
        offset: 0,
        len: 1024,
        byte: b'B',
        fast: true,
    });
    assert!(
        h.buffer.pipeline().counters().waits > 0,
        "B had to wait for room"
    );
    assert_eq!(h.read(0), vec![b'B'; 1024]);
    while h.flush_region() {}
    assert_eq!(h.capacity[&h.names[0]], vec![b'B'; 1024]);
}

/// Runs merge across the regions flushed together: a file written in two
/// halves, each half in its own region, flushes as one run per
/// `run_max`, not one per region; the single-region path (the papers'
/// pipeline, used by the simulator) gives one run per region.
#[test]
fn a_flush_set_merges_runs_across_regions() {
    let mut h = Harness::new(WhenFull::Wait, 3);
    let id = h.names[0];
    // Odd blocks first, then even ones: each region holds every other
    // block, so only together are they contiguous.
    let block = 512u64;
    for pass in [1u64, 0] {
        for i in 0..(REGION_BYTES / block / 4) {
            let offset = (2 * i + pass) * block;
            let now = h.now;
            let placed = h.buffer.place_write(
                now,
                id,
                offset,
                block,
                block + 64,
                0,
                Tier::Fast,
                now,
                false,
            );
            let Placement::Log(reservation) = placed else {
                panic!("{placed:?}");
            };
            h.buffer.insert(
                id,
                Extent {
                    file_offset: offset,
                    len: block as u32,
                    location: LogLocation {
                        region: reservation.region,
                        offset: reservation.record_offset,
                    },
                    seq: reservation.seq,
                },
            );
        }
        h.buffer.seal();
    }
    let set = h.buffer.full_regions();
    assert_eq!(set.len(), 2);
    let runs = h.buffer.start_flush_set(&set, u64::MAX, false).unwrap();
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0].len, REGION_BYTES / 2);
    for region in &set {
        h.buffer.abort_flush(*region).unwrap();
    }
    let one = h.buffer.start_flush(set[0], u64::MAX).unwrap();
    assert_eq!(one.len(), (REGION_BYTES / block / 4) as usize);
}

/// With a flush age, a partly filled region flushes once its first record
/// is that old (and the gate allows); without one it never does.
#[test]
fn a_region_older_than_the_flush_age_is_closed_and_flushed() {
    use sluice_policy::write_buffer::FlushPoll;
    for age in [None, Some(Duration::from_secs(30))] {
        let config = WriteBufferConfig {
            redirector: RedirectorConfig::default(),
            pipeline: PipelineConfig {
                regions: 2,
                region_bytes: REGION_BYTES,
                when_full: WhenFull::Wait,
                wait_max: Duration::from_millis(500),
            },
            gate: FlushGateConfig {
                flush_age: age,
                ..FlushGateConfig::default()
            },
        };
        let mut buffer = WriteBuffer::new(config).unwrap();
        let t0 = Time::from_millis(1000);
        let placed = buffer.place_write(t0, FileId(1), 0, 100, 164, 0, Tier::Fast, t0, false);
        assert!(matches!(placed, Placement::Log(_)));
        let early = buffer.poll_flush(t0.saturating_add(Duration::from_secs(29)));
        let late = buffer.poll_flush(t0.saturating_add(Duration::from_secs(31)));
        match age {
            None => {
                assert_eq!(early, FlushPoll::Idle);
                assert_eq!(late, FlushPoll::Idle);
            }
            Some(_) => {
                assert_eq!(
                    early,
                    FlushPoll::Pause {
                        recheck_at: Some(t0.saturating_add(Duration::from_secs(30)))
                    }
                );
                assert!(matches!(late, FlushPoll::Flush { .. }), "{late:?}");
                assert_eq!(buffer.full_regions().len(), 1);
            }
        }
    }
}

/// The age `sluice top` shows is measured from the first write of the
/// oldest region that is not empty: a region flushed no longer counts, a
/// younger one still filling takes over, and none when all are empty.
#[test]
fn the_oldest_unflushed_write_is_the_oldest_non_empty_regions_first_write() {
    let config = WriteBufferConfig {
        redirector: RedirectorConfig::default(),
        pipeline: PipelineConfig {
            regions: 2,
            region_bytes: REGION_BYTES,
            when_full: WhenFull::Wait,
            wait_max: Duration::from_millis(500),
        },
        gate: FlushGateConfig::default(),
    };
    let mut buffer = WriteBuffer::new(config).unwrap();
    assert_eq!(buffer.oldest_unflushed_write(), None);
    let t0 = Time::from_millis(1000);
    let t1 = Time::from_millis(2000);
    let t2 = Time::from_millis(3000);
    // Fills region 0 exactly (it closes), then a later write opens region 1.
    let whole = REGION_BYTES - HEADER;
    let placed = buffer.place_write(
        t0,
        FileId(1),
        0,
        whole,
        REGION_BYTES,
        0,
        Tier::Fast,
        t0,
        false,
    );
    assert!(matches!(placed, Placement::Log(_)), "{placed:?}");
    let placed = buffer.place_write(t1, FileId(2), 0, 100, 164, 0, Tier::Fast, t1, false);
    assert!(matches!(placed, Placement::Log(_)), "{placed:?}");
    // A later write into the same region does not make it younger.
    buffer.place_write(t2, FileId(2), 100, 100, 164, 0, Tier::Fast, t2, false);
    assert_eq!(buffer.oldest_unflushed_write(), Some(t0));
    let full = buffer.full_regions();
    assert_eq!(full.len(), 1);
    buffer.start_flush(full[0], u64::MAX).unwrap();
    assert_eq!(
        buffer.oldest_unflushed_write(),
        Some(t0),
        "flushing is not flushed"
    );
    buffer.finish_flush(full[0]).unwrap();
    assert_eq!(buffer.oldest_unflushed_write(), Some(t1));
    let sealed = buffer.seal().unwrap();
    buffer.start_flush(sealed, u64::MAX).unwrap();
    buffer.finish_flush(sealed).unwrap();
    assert_eq!(buffer.oldest_unflushed_write(), None);
}

/// A failing fast tier ("A failing fast tier" in the module docs): after
/// a failed append the region is sealed and data writes routed to the
/// fast tier are placed on the capacity tier, except those over buffered
/// bytes (the overlap rule); the while doubles as failures go on, to
/// `FAST_RETRY_MAX`, and an append that works ends it and resets it.
#[test]
fn a_failed_append_sends_data_writes_to_the_capacity_tier_for_a_doubling_while() {
    use sluice_policy::write_buffer::{FAST_RETRY_MAX, FAST_RETRY_MIN};
    let mut h = Harness::new(WhenFull::Wait, 3);
    let (a, b) = (h.names[0], h.names[1]);
    let t0 = h.now;
    let place = |h: &mut Harness, file: FileId, offset: u64, at: Time| {
        h.buffer.place_write(
            at,
            file,
            offset,
            1024,
            HEADER + 1024,
            DESCRIBE,
            Tier::Fast,
            at,
            false,
        )
    };
    let Placement::Log(r) = place(&mut h, a, 0, t0) else {
        panic!("the log takes it");
    };
    h.buffer.insert(
        a,
        Extent {
            file_offset: 0,
            len: 1024,
            location: LogLocation {
                region: r.region,
                offset: r.record_offset,
            },
            seq: r.seq,
        },
    );
    assert_eq!(h.buffer.append_failed(t0, r.region), FAST_RETRY_MIN);
    assert_ne!(h.buffer.pipeline().filling(), Some(r.region), "sealed");
    assert!(h.buffer.fast_degraded(t0));
    assert_eq!(place(&mut h, b, 0, t0), Placement::Capacity);
    // Over buffered bytes: the log all the same.
    assert!(matches!(place(&mut h, a, 512, t0), Placement::Log(_)));
    // The while ends, then doubles at the next failure, up to the most.
    let later = t0.saturating_add(FAST_RETRY_MIN);
    assert!(!h.buffer.fast_degraded(later));
    assert!(matches!(place(&mut h, b, 0, later), Placement::Log(_)));
    let mut expected = FAST_RETRY_MIN * 2;
    for _ in 0..8 {
        assert_eq!(h.buffer.append_failed(later, r.region), expected);
        expected = (expected * 2).min(FAST_RETRY_MAX);
    }
    assert_eq!(expected, FAST_RETRY_MAX);
    assert!(h
        .buffer
        .fast_degraded(later.saturating_add(Duration::from_secs(29))));
    // An append that works ends it, and the next failure starts over.
    assert!(h.buffer.append_worked());
    assert!(!h.buffer.append_worked());
    assert!(!h.buffer.fast_degraded(later));
    assert_eq!(h.buffer.append_failed(later, r.region), FAST_RETRY_MIN);
}

/// Records in flight (the module docs' "Records in flight"): a data
/// record whose payload is being written counts as logged before it is
/// indexed; a truncate placed meanwhile clips it when it lands, as replay
/// in sequence order would; an abandoned one leaves no trace.
#[test]
fn a_truncate_placed_while_a_record_is_in_flight_clips_it_when_it_lands() {
    let mut h = Harness::new(WhenFull::Wait, 3);
    let (a, b) = (h.names[0], h.names[1]);
    let t0 = h.now;
    let place = |h: &mut Harness, file: FileId| {
        let Placement::Log(r) = h.buffer.place_write(
            t0,
            file,
            0,
            4096,
            HEADER + 4096,
            DESCRIBE,
            Tier::Fast,
            t0,
            h.buffer.in_flight(file),
        ) else {
            panic!("the log takes it");
        };
        h.buffer.writing(file, r.seq);
        r
    };
    let first = place(&mut h, a);
    let second = place(&mut h, a);
    assert!(h.buffer.in_flight(a) && h.buffer.has_logged(a) && !h.buffer.has_buffered(a));
    assert_eq!(h.buffer.first_in_flight(a), Some(first.seq));
    // A truncate to 1 KiB, placed after both records.
    let Placement::Log(cut) = h.buffer.place_required(t0, Some(a), HEADER, DESCRIBE, t0) else {
        panic!("the log takes the truncate");
    };
    assert_eq!(
        h.buffer.truncate(a, 1024, cut.seq),
        0,
        "nothing indexed yet"
    );
    let extent = |r: &sluice_policy::write_buffer::Reservation| Extent {
        file_offset: 0,
        len: 4096,
        location: LogLocation {
            region: r.region,
            offset: r.record_offset,
        },
        seq: r.seq,
    };
    assert_eq!(h.buffer.landed(a, extent(&second)), 1024, "clipped");
    assert_eq!(h.buffer.first_in_flight(a), Some(first.seq));
    assert_eq!(h.buffer.landed(a, extent(&first)), 1024, "clipped too");
    assert!(!h.buffer.in_flight(a));
    assert_eq!(h.buffer.buffered_end(a), 1024);
    // A record newer than the truncate is not clipped; an abandoned one
    // leaves nothing.
    let third = place(&mut h, a);
    assert_eq!(h.buffer.landed(a, extent(&third)), 4096);
    let lost = place(&mut h, b);
    h.buffer.abandon(b, lost.seq);
    assert!(!h.buffer.has_logged(b));
}
