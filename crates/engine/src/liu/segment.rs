//! A segment in the DRAM buffer (its parts, head and body sections, as
//! they arrive), the files of slots on the fast tier (lifted heads, lifted
//! bodies) and the slots' bookkeeping.

use std::collections::{HashMap, HashSet};
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};

use sluice_env::{lock, Backend, BackendFile, OpenOptions, RelPath};
use sluice_policy::segments::{Geometry, SegmentBuffer, SegmentKey};

use crate::engine::read_fully;

/// A segment in the DRAM buffer: its parts (head, then body sections) and
/// their data as they arrive.
pub(super) struct Segment {
    pub(super) key: SegmentKey,
    /// File offset of the segment's first byte.
    pub(super) start: u64,
    /// Bytes of the segment that existed when it was loaded.
    pub(super) len: u64,
    /// (offset in segment, length) of each part; part 0 is the head.
    pub(super) parts: Vec<(u64, u64)>,
    pub(super) state: Mutex<Vec<Part>>,
    pub(super) arrived: Condvar,
}

#[derive(Clone)]
pub(super) enum Part {
    /// Not loaded: bytes read directly while the segment was a ghost, or a
    /// hole between them; loaded by the first reader that needs it
    /// ([`Segment::claim`]; [`cut_learned`]).
    Absent,
    Pending,
    Ready(Arc<[u8]>),
    Failed(io::ErrorKind, String),
}

/// Slots of the heads file.
#[derive(Default)]
pub(super) struct Slots {
    pub(super) of: HashMap<SegmentKey, u32>,
    pub(super) free: Vec<u32>,
    /// Readers using each slot.
    pub(super) pins: Vec<u32>,
    /// Slots released while pinned: free once unpinned.
    pub(super) retired: HashSet<u32>,
}

/// The parts a segment of `segment_len` bytes is loaded in: the head, then
/// the body in `sections`, cut at the segment's end.
pub(super) fn parts(geometry: Geometry, segment_len: u64, sections: u32) -> Vec<(u64, u64)> {
    std::iter::once((0, geometry.head_bytes()))
        .chain(geometry.body_sections(sections))
        .filter_map(|(offset, len)| {
            let len = len.min(segment_len.saturating_sub(offset));
            (len > 0).then_some((offset, len))
        })
        .collect()
}

/// `parts` of the segment `key` about to be loaded, cut where the pass
/// that learned the segment left it: below the *frontier* (the end of the
/// last body byte requested while it was a ghost) everything is absent
/// ([`Part::Absent`], loaded when a reader needs it): the runs already
/// read directly, and each hole between them as a part of its own (the
/// reader that has not come yet loads only its hole). Only what lies past
/// the frontier is loaded now, starting where the disk is: the pass reads
/// each byte about once, and the load continues the direct reads instead
/// of going back for a hole. The head is never cut: an eviction lifts it.
/// Returns the parts, their initial states and the bytes left absent that
/// were read already.
pub(super) fn cut_learned(
    buffer: &SegmentBuffer,
    key: SegmentKey,
    parts: Vec<(u64, u64)>,
) -> (Vec<(u64, u64)>, Vec<Part>, u64) {
    let body_start = parts.first().map_or(0, |&(offset, len)| offset + len);
    let body_end = parts.last().map_or(0, |&(offset, len)| offset + len);
    let runs = buffer.requested_runs(key, body_start, body_end.saturating_sub(body_start));
    let frontier = runs.last().map_or(0, |&(offset, len)| offset + len);
    let mut cut = Vec::new();
    let mut initial = Vec::new();
    let mut skipped = 0;
    for (n, (offset, len)) in parts.into_iter().enumerate() {
        let end = offset + len;
        let below = if n == 0 {
            offset
        } else {
            frontier.clamp(offset, end)
        };
        let mut at = offset;
        for &(run, run_len) in &runs {
            let (from, to) = (run.max(offset), (run + run_len).min(below));
            if from >= to {
                continue;
            }
            if at < from {
                cut.push((at, from - at));
                initial.push(Part::Absent);
            }
            cut.push((from, to - from));
            initial.push(Part::Absent);
            skipped += to - from;
            at = to;
        }
        if at < below {
            cut.push((at, below - at));
            initial.push(Part::Absent);
        }
        if below < end {
            cut.push((below, end - below));
            initial.push(Part::Pending);
        }
    }
    (cut, initial, skipped)
}

impl Segment {
    pub(super) fn set(&self, part: usize, value: Part) {
        lock(&self.state)[part] = value;
        self.arrived.notify_all();
    }

    /// The body's parts (the segment past its head), in order, if it has
    /// a body and every part of it has arrived: shared, not copied (an
    /// arrived part never changes), so the lift copies them out of every
    /// lock.
    pub(super) fn ready_body(&self) -> Option<Vec<Arc<[u8]>>> {
        let head = self.parts[0].1;
        let mut end = head;
        let mut body = Vec::with_capacity(self.parts.len().saturating_sub(1));
        let parts = lock(&self.state);
        for (n, part) in parts.iter().enumerate().skip(1) {
            match part {
                Part::Ready(bytes) if self.parts[n].0 == end => {
                    end += bytes.len() as u64;
                    body.push(Arc::clone(bytes));
                }
                _ => return None,
            }
        }
        (end == self.len && !body.is_empty()).then_some(body)
    }

    /// The head's bytes if they have arrived.
    pub(super) fn ready_head(&self) -> Option<Arc<[u8]>> {
        match lock(&self.state).first() {
            Some(Part::Ready(bytes)) => Some(Arc::clone(bytes)),
            _ => None,
        }
    }

    /// Whether part `n` holds bytes of `[start, end)`.
    fn holds(&self, n: usize, start: u64, end: u64) -> bool {
        let (offset, len) = self.parts[n];
        offset < end && start < offset + len
    }

    /// Whether every part holding bytes of `[start, end)` is absent.
    pub(super) fn absent(&self, start: u64, end: u64) -> bool {
        let parts = lock(&self.state);
        (0..self.parts.len())
            .all(|n| !self.holds(n, start, end) || matches!(parts[n], Part::Absent))
    }

    /// The absent parts that hold bytes of `[start, end)`, now pending: the
    /// caller queues their loads.
    pub(super) fn claim(&self, start: u64, end: u64) -> Vec<usize> {
        let mut parts = lock(&self.state);
        let mut claimed = Vec::new();
        for n in 0..self.parts.len() {
            if self.holds(n, start, end) && matches!(parts[n], Part::Absent) {
                parts[n] = Part::Pending;
                claimed.push(n);
            }
        }
        claimed
    }

    /// Copy `[start, start + out.len())` of the segment into `out`, waiting
    /// for the parts that hold it (claimed first if absent).
    pub(super) fn copy(&self, start: u64, out: &mut [u8]) -> io::Result<()> {
        let end = start + out.len() as u64;
        for (n, &(offset, len)) in self.parts.iter().enumerate() {
            let (from, to) = (start.max(offset), end.min(offset + len));
            if from >= to {
                continue;
            }
            let mut parts = lock(&self.state);
            loop {
                match &parts[n] {
                    Part::Pending => {
                        parts = self
                            .arrived
                            .wait(parts)
                            .unwrap_or_else(PoisonError::into_inner)
                    }
                    Part::Ready(bytes) => {
                        out[(from - start) as usize..(to - start) as usize].copy_from_slice(
                            &bytes[(from - offset) as usize..(to - offset) as usize],
                        );
                        break;
                    }
                    Part::Failed(kind, message) => {
                        return Err(io::Error::new(*kind, message.clone()))
                    }
                    Part::Absent => {
                        return Err(io::Error::other("liu: part not claimed before the copy"))
                    }
                }
            }
        }
        Ok(())
    }
}

/// A file of equal slots on the fast tier (`liu-heads`, `liu-bodies`),
/// removed and recreated when the backend opens (module docs, "Restart").
/// It grows as slots are first written, lowest first.
pub(super) struct SlotFile {
    file: Arc<dyn BackendFile>,
    slot_bytes: u64,
    /// Its length once every slot was written.
    full: u64,
    /// How far its written slots reach now.
    len: AtomicU64,
}

impl SlotFile {
    /// `name` on `fast`, emptied, for `slots` slots of `slot_bytes`.
    pub(super) fn create(
        fast: &dyn Backend,
        name: &str,
        slots: u32,
        slot_bytes: u64,
    ) -> io::Result<SlotFile> {
        let path = RelPath::new(name)?;
        let what = |e: io::Error| {
            io::Error::new(
                e.kind(),
                format!("fast tier {}: {name}: {e}", fast.describe()),
            )
        };
        match fast.remove_file(&path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(what(e)),
            _ => {}
        }
        let file = fast
            .open(
                &path,
                OpenOptions {
                    create: true,
                    truncate: true,
                    ..OpenOptions::default()
                }
                .private(),
            )
            .map_err(what)?;
        Ok(SlotFile {
            file,
            slot_bytes,
            full: u64::from(slots) * slot_bytes,
            len: AtomicU64::new(0),
        })
    }

    fn offset(&self, slot: u32) -> u64 {
        u64::from(slot) * self.slot_bytes
    }

    /// Write `bufs`, one after another, from the start of `slot`.
    pub(super) fn write(&self, slot: u32, bufs: &[&[u8]]) -> io::Result<()> {
        let at = self.offset(slot);
        self.file.write_vectored_at(bufs, at)?;
        let len: usize = bufs.iter().map(|b| b.len()).sum();
        self.len.fetch_max(at + len as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Fill `out` from `slot`, `at` bytes into it.
    pub(super) fn read(&self, slot: u32, at: u64, out: &mut [u8]) -> io::Result<()> {
        read_fully(self.file.as_ref(), out, self.offset(slot) + at)
    }

    /// Its slots.
    pub(super) fn slots(&self) -> u64 {
        self.full / self.slot_bytes
    }

    /// Bytes it may still take from the fast tier.
    pub(super) fn growth(&self) -> u64 {
        self.full.saturating_sub(self.len.load(Ordering::Relaxed))
    }
}

/// Lifted bodies (sluice's whole-segment lifts, beyond the paper;
/// docs/liu.md, "Whole segments"): the slots of the bodies file, each the
/// body of a segment whose head is lifted. A body is served only once
/// its copy has landed ([`Bodies::ready`]), and goes with its head's
/// de-lift, which every write, truncation or removal over any byte of
/// the segment causes (`SegmentBuffer::invalidate`).
pub(super) struct Bodies {
    pub(super) slots: Slots,
    /// Taken, their copy not yet written.
    lifting: HashSet<SegmentKey>,
}

impl Bodies {
    /// `count` free slots.
    pub(super) fn new(count: u32) -> Bodies {
        Bodies {
            slots: Slots::new(count),
            lifting: HashSet::new(),
        }
    }

    /// A slot for the body of `key`, pinned while its copy is written;
    /// none when it has one already or every slot is taken.
    pub(super) fn take(&mut self, key: SegmentKey) -> Option<u32> {
        if self.slots.of.contains_key(&key) {
            return None;
        }
        let slot = self.slots.take(key)?;
        self.slots.pin(slot);
        self.lifting.insert(key);
        Some(slot)
    }

    /// The copy of `key`'s body to `slot` ended: kept if `keep` and the
    /// slot is still the key's (no write dropped it meanwhile).
    pub(super) fn landed(&mut self, key: SegmentKey, slot: u32, keep: bool) {
        if self.slots.of.get(&key) == Some(&slot) {
            self.lifting.remove(&key);
            if !keep {
                self.slots.release(key);
            }
        }
        self.slots.unpin(slot);
    }

    /// The slot serving `key`'s body, if its copy has landed.
    pub(super) fn ready(&self, key: SegmentKey) -> Option<u32> {
        if self.lifting.contains(&key) {
            return None;
        }
        self.slots.of.get(&key).copied()
    }

    /// Drop `key`'s body (its head was de-lifted).
    pub(super) fn release(&mut self, key: SegmentKey) {
        self.lifting.remove(&key);
        self.slots.release(key);
    }

    /// Bodies served now.
    pub(super) fn count(&self) -> u64 {
        (self.slots.of.len() - self.lifting.len()) as u64
    }
}

impl Slots {
    /// `count` free slots.
    pub(super) fn new(count: u32) -> Slots {
        Slots {
            free: (0..count).rev().collect(),
            pins: vec![0; count as usize],
            ..Slots::default()
        }
    }

    pub(super) fn take(&mut self, key: SegmentKey) -> Option<u32> {
        let slot = self.free.pop()?;
        self.of.insert(key, slot);
        Some(slot)
    }

    pub(super) fn release(&mut self, key: SegmentKey) {
        if let Some(slot) = self.of.remove(&key) {
            if self.pins[slot as usize] == 0 {
                self.free.push(slot);
            } else {
                self.retired.insert(slot);
            }
        }
    }

    pub(super) fn pin(&mut self, slot: u32) {
        self.pins[slot as usize] += 1;
    }

    pub(super) fn unpin(&mut self, slot: u32) {
        let pins = &mut self.pins[slot as usize];
        *pins -= 1;
        if *pins == 0 && self.retired.remove(&slot) {
            self.free.push(slot);
        }
    }
}
