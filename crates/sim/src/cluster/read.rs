//! The read path at an I/O node: the page cache with read-ahead (the
//! baseline) and LiU's segment buffer with lifted heads on the SSD.

use super::*;

/// What a LiU SSD request was for.
#[derive(Clone, Copy, Debug)]
pub(super) enum LiuSsd {
    /// The head of load `load` arrived from the SSD.
    Head { load: u64 },
    /// A read of a lifted head: one part of the piece.
    Direct { piece: u32 },
    /// A head copy to the SSD finished.
    Lifted { key: SegmentKey },
}

/// Read-ahead windows (of [`ClusterConfig::read_ahead_bytes`]) one file's
/// page cache keeps behind its frontier.
pub(super) const CACHED_WINDOWS: u64 = 8;

/// One file's page cache on an I/O node: the read-ahead streams reading
/// it and the windows in flight. The cache is shared: a piece is served by
/// any stream's cached range or window.
#[derive(Default)]
pub(super) struct PageCache {
    /// Read-ahead state per stream: one (key 0) per file, or one per
    /// process with [`ClusterConfig::read_ahead_per_process`] (Linux keeps
    /// a `file_ra_state` per open file). At most one per process.
    pub(super) streams: BTreeMap<u32, Stream>,
    pub(super) inflight: Vec<Window>,
}

/// One read-ahead stream: cached `[lo, hi)` and where its last miss ended.
#[derive(Default)]
pub(super) struct Stream {
    pub(super) lo: u64,
    pub(super) hi: u64,
    pub(super) last_end: u64,
}

/// A read-ahead window being read from the disk, and the pieces waiting
/// for it.
pub(super) struct Window {
    pub(super) id: u64,
    /// The stream that started it.
    pub(super) stream: u32,
    pub(super) from: u64,
    pub(super) stop: u64,
    pub(super) waiters: Vec<u32>,
}

/// A segment being loaded into (or held in) an I/O node's LiU buffer.
pub(super) struct Load {
    /// Head, then the body sections.
    pub(super) ready: Vec<bool>,
    /// Piece parts waiting: (piece, start, end) inside the segment.
    pub(super) waiters: Vec<(u32, u64, u64)>,
    /// Left the buffer (evicted or invalidated); kept until its parts land.
    pub(super) evicted: bool,
}

/// LiU's state on one I/O node: the policy and the loads it holds.
pub(super) struct LiuNode {
    pub(super) buffer: SegmentBuffer,
    /// The load holding each regular segment's data.
    pub(super) current: HashMap<SegmentKey, u64>,
    pub(super) loads: HashMap<u64, Load>,
    pub(super) next_load: u64,
}

impl<'a> Sim<'a> {
    /// A read piece at an I/O node without LiU, through the page cache's
    /// read-ahead (see [`ClusterConfig::read_ahead_bytes`]). Per file and
    /// node each read-ahead stream (one per file, or one per process with
    /// [`ClusterConfig::read_ahead_per_process`]) holds one contiguous
    /// range `[lo, hi)` (its last few windows); the windows in flight are
    /// shared by the file.
    pub(super) fn cached_read(&mut self, now: Time, piece: u32) {
        let p = self.pieces[piece as usize];
        let ra = self.config.read_ahead_bytes;
        let end = p.offset + p.len;
        let key = if self.config.read_ahead_per_process {
            p.process
        } else {
            0
        };
        let cache = self.servers[p.server as usize]
            .read_ahead
            .entry(p.file)
            .or_default();
        if let Some(window) = cache
            .inflight
            .iter_mut()
            .find(|w| p.offset >= w.from && end <= w.stop)
        {
            return window.waiters.push(piece);
        }
        let idle = !cache.inflight.iter().any(|w| w.stream == key);
        let stream = cache.streams.entry(key).or_default();
        if p.offset >= stream.lo && end <= stream.hi {
            // Asynchronous read-ahead, as Linux's PG_readahead marker: a
            // hit in the last window fetches the next one before it is
            // needed.
            if ra > 0 && end + ra > stream.hi && idle {
                let from = stream.hi;
                self.read_ahead(now, p.server, p.file, key, from, from + ra, Vec::new());
            }
            return self.part_done(now, piece);
        }
        if cache
            .streams
            .values()
            .any(|s| p.offset >= s.lo && end <= s.hi)
        {
            // Cached by another process's stream: a page-cache hit that
            // leaves this stream's state alone.
            return self.part_done(now, piece);
        }
        let stream = cache.streams.entry(key).or_default();
        // A new sequential run (the first read, or one continuing the
        // previous read away from the cached range) restarts the cache.
        let first = stream.hi == 0
            || (p.offset.abs_diff(stream.last_end) < ra
                && (p.offset.saturating_add(ra) < stream.hi
                    || p.offset >= stream.hi.saturating_add(ra)));
        stream.last_end = end;
        let near = ra > 0
            && (first
                || (p.offset.saturating_add(ra) >= stream.hi
                    && p.offset < stream.hi.saturating_add(ra)));
        if near {
            // A sequential reader near the cached frontier: read ahead from
            // the frontier (or from the piece, past a gap).
            let from = if p.offset <= stream.hi && !first {
                stream.hi
            } else {
                p.offset
            };
            if p.offset > stream.hi || first {
                stream.lo = p.offset;
            }
            let stop = end.max(from + ra);
            return self.read_ahead(now, p.server, p.file, key, from, stop, vec![piece]);
        }
        let request = self.disk_request(p.server, IoKind::Read, p.file, p.offset, p.len);
        self.hdd_submit(now, p.server, request, Owner::ReadPart { piece });
    }

    /// Read `[from, stop)` of `file` into its page cache on `server` for
    /// read-ahead stream `stream`: the stream's cached range ends at `stop`
    /// (keeping [`CACHED_WINDOWS`] windows) and `waiters` are served when
    /// the disk delivers it.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn read_ahead(
        &mut self,
        now: Time,
        server: u32,
        file: FileId,
        stream: u32,
        from: u64,
        stop: u64,
        waiters: Vec<u32>,
    ) {
        let ra = self.config.read_ahead_bytes;
        let s = &mut self.servers[server as usize];
        let id = s.next_window;
        s.next_window += 1;
        // INVARIANT: callers looked the file's cache and stream up first.
        let cache = s.read_ahead.get_mut(&file).expect("read-ahead cache");
        let state = cache.streams.get_mut(&stream).expect("read-ahead stream");
        state.hi = stop;
        state.lo = state.lo.max(stop.saturating_sub(CACHED_WINDOWS * ra));
        cache.inflight.push(Window {
            id,
            stream,
            from,
            stop,
            waiters,
        });
        let request = self.disk_request(server, IoKind::Read, file, from, stop - from);
        self.hdd_submit(now, server, request, Owner::ReadAhead { file, window: id });
    }

    /// A read piece at an I/O node running LiU: each segment it touches is
    /// served as the segment buffer decides (DESIGN §5).
    pub(super) fn liu_read(&mut self, now: Time, piece: u32) {
        let p = self.pieces[piece as usize];
        let server = p.server as usize;
        // INVARIANT: called only for I/O nodes with LiU.
        let geometry = self.servers[server]
            .liu
            .as_ref()
            .expect("LiU node")
            .buffer
            .config()
            .geometry;
        let slices: Vec<_> = geometry.split(p.offset, p.len).collect();
        self.pieces[piece as usize].parts = slices.len() as u32;
        for slice in slices {
            let key = SegmentKey {
                file: p.file,
                index: slice.index,
            };
            let (start, end) = (slice.start, slice.start + slice.len);
            let liu = self.servers[server].liu.as_mut().expect("LiU node");
            let serve = liu
                .buffer
                .access(key, start, slice.len, geometry.segment_bytes());
            match serve {
                Serve::Buffer => {
                    // INVARIANT: a regular segment has a current load.
                    let load = liu.current[&key];
                    self.liu_wait(now, p.server, load, piece, start, end);
                }
                Serve::Load { head_from_fast } => {
                    let load = liu.next_load;
                    liu.next_load += 1;
                    let sections: Vec<(u64, u64)> =
                        geometry.body_sections(self.config.liu_sections).collect();
                    liu.loads.insert(
                        load,
                        Load {
                            ready: vec![false; sections.len() + 1],
                            waiters: Vec::new(),
                            evicted: false,
                        },
                    );
                    liu.current.insert(key, load);
                    let base = geometry.start(slice.index);
                    if head_from_fast {
                        // The head streams from the SSD while the disk seeks.
                        let s = &mut self.servers[server];
                        let done = s.ssd.schedule(now, IoKind::Read, geometry.head_bytes());
                        self.queue.schedule(
                            done,
                            Event::LiuSsdDone {
                                server: p.server,
                                what: LiuSsd::Head { load },
                            },
                        );
                    } else {
                        let request = self.disk_request(
                            p.server,
                            IoKind::Read,
                            p.file,
                            base,
                            geometry.head_bytes(),
                        );
                        self.hdd_submit(now, p.server, request, Owner::LiuPart { load, part: 0 });
                    }
                    for (k, (offset, len)) in sections.into_iter().enumerate() {
                        let request =
                            self.disk_request(p.server, IoKind::Read, p.file, base + offset, len);
                        let part = k as u32 + 1;
                        self.hdd_submit(now, p.server, request, Owner::LiuPart { load, part });
                    }
                    self.liu_wait(now, p.server, load, piece, start, end);
                }
                Serve::Direct { from_head: true } => {
                    let done = self.servers[server]
                        .ssd
                        .schedule(now, IoKind::Read, slice.len);
                    self.queue.schedule(
                        done,
                        Event::LiuSsdDone {
                            server: p.server,
                            what: LiuSsd::Direct { piece },
                        },
                    );
                }
                Serve::Direct { from_head: false } => {
                    let offset = geometry.start(slice.index) + start;
                    let request =
                        self.disk_request(p.server, IoKind::Read, p.file, offset, slice.len);
                    self.hdd_submit(now, p.server, request, Owner::ReadPart { piece });
                }
            }
            self.liu_actions(now, p.server);
        }
    }

    /// Serve `[start, end)` of load `load` to `piece` now if its parts are
    /// there, else when they arrive.
    pub(super) fn liu_wait(
        &mut self,
        now: Time,
        server: u32,
        load: u64,
        piece: u32,
        start: u64,
        end: u64,
    ) {
        let liu = self.servers[server as usize]
            .liu
            .as_mut()
            .expect("LiU node");
        let parts = liu_parts_of(
            liu.buffer.config().geometry,
            self.config.liu_sections,
            start,
            end,
        );
        // INVARIANT: loads stay until their last waiter is served.
        let l = liu.loads.get_mut(&load).expect("load");
        if parts.clone().all(|k| l.ready[k]) {
            self.part_done(now, piece);
        } else {
            l.waiters.push((piece, start, end));
        }
    }

    /// Part `part` of load `load` arrived: serve the waiters it completes.
    pub(super) fn liu_part_ready(&mut self, now: Time, server: u32, load: u64, part: u32) {
        let sections = self.config.liu_sections;
        let liu = self.servers[server as usize]
            .liu
            .as_mut()
            .expect("LiU node");
        let geometry = liu.buffer.config().geometry;
        let Some(l) = liu.loads.get_mut(&load) else {
            return;
        };
        l.ready[part as usize] = true;
        let mut served = Vec::new();
        l.waiters.retain(|&(piece, start, end)| {
            let ready = liu_parts_of(geometry, sections, start, end).all(|k| l.ready[k]);
            if ready {
                served.push(piece);
            }
            !ready
        });
        if l.evicted && l.ready.iter().all(|&r| r) && l.waiters.is_empty() {
            liu.loads.remove(&load);
        }
        for piece in served {
            self.part_done(now, piece);
        }
    }

    /// Carry out the segment buffer's evictions and lifts.
    pub(super) fn liu_actions(&mut self, now: Time, server: u32) {
        loop {
            let s = &mut self.servers[server as usize];
            let liu = s.liu.as_mut().expect("LiU node");
            let Some(action) = liu.buffer.poll_action() else {
                return;
            };
            let Action::Evict { key, lift, .. } = action else {
                // De-lifting frees SSD space: nothing to simulate.
                continue;
            };
            let load = liu.current.remove(&key);
            let head_ready = load
                .and_then(|id| liu.loads.get(&id))
                .is_some_and(|l| l.ready[0]);
            if let Some(id) = load {
                if let Some(l) = liu.loads.get_mut(&id) {
                    l.evicted = true;
                    if l.ready.iter().all(|&r| r) && l.waiters.is_empty() {
                        liu.loads.remove(&id);
                    }
                }
            }
            if lift {
                if head_ready {
                    // The head is copied from the buffer to the SSD.
                    let head = liu.buffer.config().geometry.head_bytes();
                    let done = s.ssd.schedule(now, IoKind::Write, head);
                    self.queue.schedule(
                        done,
                        Event::LiuSsdDone {
                            server,
                            what: LiuSsd::Lifted { key },
                        },
                    );
                } else {
                    liu.buffer.lift_done(key, false);
                }
            }
        }
    }
}

/// The parts of a LiU load (0 = head, k = body section k) that hold
/// `[start, end)` of the segment.
pub(super) fn liu_parts_of(
    geometry: sluice_policy::segments::Geometry,
    sections: u32,
    start: u64,
    end: u64,
) -> std::ops::RangeInclusive<usize> {
    let part = |offset: u64| -> usize {
        if offset < geometry.head_bytes() {
            return 0;
        }
        let mut k = 0;
        for (i, (s, _)) in geometry.body_sections(sections).enumerate() {
            if offset >= s {
                k = i + 1;
            }
        }
        k
    };
    part(start)..=part(end.saturating_sub(1).max(start))
}

#[cfg(test)]
mod tests {
    use sluice_policy::{FileId, WriteRequest};

    use crate::cluster::{simulate, ClusterConfig, System};
    use crate::workload::{Job, Op};

    /// Two processes read their own far-apart halves of one file in 16 KiB
    /// requests; the run time of the job in seconds.
    fn two_readers(per_process: bool) -> f64 {
        let read = |base: u64| -> Vec<Op> {
            (0..256)
                .map(|k| {
                    Op::Read(WriteRequest {
                        file: FileId(1),
                        offset: base + k * 16 * 1024,
                        len: 16 * 1024,
                    })
                })
                .collect()
        };
        let job = Job {
            name: "two readers".into(),
            processes: vec![read(0), read(1 << 30)],
            start_after: std::time::Duration::ZERO,
        };
        let config = ClusterConfig {
            clients: 2,
            servers: 1,
            read_ahead_per_process: per_process,
            ..ClusterConfig::default()
        };
        let r = simulate(&config, System::Baseline, &[job]).expect("run");
        (r.jobs[0].end_ns - r.jobs[0].start_ns) as f64 / 1e9
    }

    /// Issue 23: with one read-ahead stream per file, the second reader
    /// resets nothing but gets no read-ahead either (every piece is a disk
    /// request with a seek); with one stream per process both stream.
    #[test]
    fn per_process_read_ahead_lets_interleaved_readers_both_stream() {
        let (per_file, per_process) = (two_readers(false), two_readers(true));
        assert!(
            per_process * 3.0 < per_file,
            "per file {per_file} s, per process {per_process} s"
        );
    }
}
