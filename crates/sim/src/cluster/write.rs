//! The write path at an I/O node: placement by the shared write buffer
//! (redirector, region pipeline, flush gate, extent index), the page
//! cache's dirty limit, and the region flush pipeline with its gate.

use super::*;

impl<'a> Sim<'a> {
    pub(super) fn at_server(&mut self, now: Time, piece: u32) {
        self.pieces[piece as usize].arrived = now;
        let p = self.pieces[piece as usize];
        let server = p.server as usize;
        if p.kind == IoKind::Read {
            if self.servers[server].liu.is_some() {
                return self.liu_read(now, piece);
            }
            return self.cached_read(now, piece);
        }
        if let Some(liu) = self.servers[server].liu.as_mut() {
            // The capacity copy changes: no buffered segment or lifted head
            // over it may be served again; the bytes count as requested.
            let segment = liu.buffer.config().geometry.segment_bytes();
            for key in liu
                .buffer
                .written(p.file, p.offset, p.offset + p.len, segment)
            {
                if let Some(load) = liu.current.remove(&key) {
                    if let Some(l) = liu.loads.get_mut(&load) {
                        l.evicted = true;
                    }
                }
            }
            self.liu_actions(now, p.server);
        }
        let routing = self.servers[server].buffer.handle_write(
            now,
            WriteRequest {
                file: p.file,
                offset: p.offset,
                len: p.len,
            },
        );
        if let Some(report) = routing.completed {
            self.streams.push(StreamPoint {
                server: p.server,
                percentage: report.percentage,
                threshold: report.threshold,
                buffered: report.route == Tier::Fast,
            });
        }
        self.pieces[piece as usize].route = routing.tier;
        self.place(now, piece);
        if routing.completed.is_some() {
            self.maybe_flush(now, p.server);
        }
    }

    /// Place a write piece through the I/O node's write buffer: append it to
    /// the SSD log, write it to the HDD, or make it wait for a free region
    /// (retried by [`Sim::retry_waiting`]).
    pub(super) fn place(&mut self, now: Time, piece: u32) {
        let p = self.pieces[piece as usize];
        let server = &mut self.servers[p.server as usize];
        let waiting_since = p.waiting_since.unwrap_or(now);
        // The simulated log's records are the bare payload: no header and
        // no file description (the figures were made that way).
        let placement = server.buffer.place_write(
            now,
            p.file,
            p.offset,
            p.len,
            p.len,
            0,
            p.route,
            waiting_since,
            // Pieces are placed one after another: none is in flight.
            false,
        );
        match placement {
            Placement::Log(r) => {
                // INVARIANT: pieces are at most a request long, far below 4 GiB.
                let len = u32::try_from(p.len).expect("piece fits a log record");
                server.buffer.insert(
                    p.file,
                    Extent {
                        file_offset: p.offset,
                        len,
                        location: LogLocation {
                            region: r.region,
                            offset: r.record_offset,
                        },
                        seq: r.seq,
                    },
                );
                let done = server.ssd.schedule(now, IoKind::Write, p.len);
                self.queue.schedule(done, Event::SsdDone { piece });
                *self.fast_bytes_by_file.entry(p.file).or_insert(0) += p.len;
                self.maybe_flush(now, p.server);
            }
            Placement::Capacity => {
                // Nothing buffered lies under it (the overlap rule), so
                // nothing is invalidated.
                let request = self.disk_request(p.server, IoKind::Write, p.file, p.offset, p.len);
                self.cached_write(now, p.server, DirtyWaiter::Piece(piece, request));
            }
            Placement::Wait { retry_at_latest } => {
                self.pieces[piece as usize].waiting_since = Some(waiting_since);
                server.waiting.push_back(piece);
                if server.retry_at.is_none_or(|t| t > retry_at_latest) {
                    server.retry_at = Some(retry_at_latest);
                    self.queue
                        .schedule(retry_at_latest, Event::Retry { server: p.server });
                }
                self.maybe_flush(now, p.server);
            }
            Placement::TooLarge => self.split(now, piece),
        }
    }

    /// A piece over buffered bytes that is longer than a region must still
    /// reach the log: place it as pieces of at most a region each, all
    /// acknowledged to the same process. Each part fits a region, so no
    /// part is split again; a part over no buffered bytes may go to the HDD.
    pub(super) fn split(&mut self, now: Time, piece: u32) {
        let p = self.pieces[piece as usize];
        let region_bytes = self.servers[p.server as usize].buffer.record_bytes_max();
        let mut parts = Vec::new();
        let mut offset = p.offset + region_bytes;
        while offset < p.offset + p.len {
            let len = region_bytes.min(p.offset + p.len - offset);
            parts.push(self.new_piece(Piece { offset, len, ..p }));
            offset += len;
        }
        self.processes[p.process as usize].outstanding += parts.len() as u32;
        self.pieces[piece as usize].len = region_bytes;
        self.place(now, piece);
        for part in parts {
            self.place(now, part);
        }
    }

    /// A write to the HDD through the I/O node's page cache: cached and
    /// acknowledged at once while the dirty budget allows, written back
    /// through the disk queue; otherwise it waits (FIFO) for write-back to
    /// free room. With no cache it is synchronous.
    pub(super) fn cached_write(&mut self, now: Time, server: u32, write: DirtyWaiter) {
        let limit = self.config.dirty_limit_bytes;
        let s = &mut self.servers[server as usize];
        let request = match write {
            DirtyWaiter::Piece(_, r) | DirtyWaiter::Flush(r) => r,
        };
        if limit == 0 {
            let owner = match write {
                DirtyWaiter::Piece(piece, _) => Owner::Piece(piece),
                DirtyWaiter::Flush(r) => Owner::Flush { len: r.len },
            };
            return self.hdd_submit(now, server, request, owner);
        }
        // A write larger than the whole budget is admitted alone.
        let fits = s.dirty_bytes == 0 || s.dirty_bytes + request.len <= limit;
        if !fits || !s.dirty_waiters.is_empty() {
            s.dirty_waiters.push_back(write);
            return;
        }
        s.dirty_bytes += request.len;
        match write {
            DirtyWaiter::Piece(piece, _) => self.acknowledge(now, piece),
            DirtyWaiter::Flush(r) => {
                self.flush_written(server, r.len);
                self.hdd_submit(now, server, request, Owner::Dirty { len: request.len });
                return self.maybe_flush(now, server);
            }
        }
        self.hdd_submit(now, server, request, Owner::Dirty { len: request.len });
    }

    /// Admit waiting writes while the dirty budget has room.
    pub(super) fn admit_dirty_waiters(&mut self, now: Time, server: u32) -> bool {
        let limit = self.config.dirty_limit_bytes;
        let mut flushed = false;
        loop {
            let s = &mut self.servers[server as usize];
            let Some(&write) = s.dirty_waiters.front() else {
                return flushed;
            };
            let request = match write {
                DirtyWaiter::Piece(_, r) | DirtyWaiter::Flush(r) => r,
            };
            if s.dirty_bytes != 0 && s.dirty_bytes + request.len > limit {
                return flushed;
            }
            s.dirty_waiters.pop_front();
            s.dirty_bytes += request.len;
            match write {
                DirtyWaiter::Piece(piece, _) => self.acknowledge(now, piece),
                DirtyWaiter::Flush(r) => {
                    self.flush_written(server, r.len);
                    flushed = true;
                }
            }
            self.hdd_submit(now, server, request, Owner::Dirty { len: request.len });
        }
    }

    /// A flush run reached the capacity tier (its cache, or the disk).
    pub(super) fn flush_written(&mut self, server: u32, len: u64) {
        self.flushed_bytes += len;
        self.servers[server as usize].flush.in_flight -= 1;
    }

    /// Whether the flusher of `server` may issue I/O now; schedules a
    /// recheck when the gate pauses it. Only SSDUP+ and sluice ask their
    /// gate.
    pub(super) fn gate_allows(&mut self, now: Time, server: u32) -> bool {
        let s = &self.servers[server as usize];
        if !s.traffic_aware {
            return true;
        }
        match s.buffer.gate_poll(now) {
            GateDecision::Flush(_) => true,
            GateDecision::Pause { recheck_at } => {
                self.schedule_recheck(now, server, recheck_at);
                false
            }
        }
    }

    /// The gate paused flushing until `recheck_at`: look again then.
    pub(super) fn schedule_recheck(&mut self, now: Time, server: u32, recheck_at: Option<Time>) {
        let s = &mut self.servers[server as usize];
        if let Some(at) = recheck_at {
            let at = at.max(now);
            if s.recheck_at.is_none_or(|t| t > at) {
                s.recheck_at = Some(at);
                self.queue.schedule(at, Event::GateRecheck { server });
            }
        }
    }

    /// Start flushing the full region `server` should flush now, if any:
    /// the oldest, once the gate allows it (SSDUP+, sluice), or at once
    /// (the others); the write buffer's papers' set
    /// ([`FlushSet::Oldest`]). Returns the region and its runs.
    pub(super) fn start_flush(
        &mut self,
        now: Time,
        server: u32,
    ) -> Option<(RegionId, Vec<FlushRunRef>)> {
        let run_max = self.config.flush_run_max_bytes;
        let s = &mut self.servers[server as usize];
        let set = FlushSet::Oldest {
            gated: s.traffic_aware,
        };
        // INVARIANT: the regions the write buffer names are full.
        match s
            .buffer
            .next_flush(now, set, run_max, |_| false)
            .expect("the write buffer starts full regions")
        {
            FlushStart::Idle | FlushStart::Busy => None,
            FlushStart::Pause { recheck_at } => {
                self.schedule_recheck(now, server, recheck_at);
                None
            }
            FlushStart::Flush { regions, runs } => Some((regions[0], runs)),
        }
    }

    /// Start or continue flushing full regions of `server`.
    pub(super) fn maybe_flush(&mut self, now: Time, server: u32) {
        loop {
            let region = match self.servers[server as usize].flush.region {
                Some(region) => region,
                None => {
                    let Some((region, runs)) = self.start_flush(now, server) else {
                        return;
                    };
                    let s = &mut self.servers[server as usize];
                    s.flush.runs = runs.into();
                    s.flush.region = Some(region);
                    region
                }
            };
            loop {
                let s = &self.servers[server as usize];
                if s.flush.in_flight >= self.config.flush_depth || s.flush.runs.is_empty() {
                    break;
                }
                if !self.gate_allows(now, server) {
                    return;
                }
                let s = &mut self.servers[server as usize];
                // INVARIANT: checked non-empty above.
                let run = s.flush.runs.pop_front().expect("a run");
                // Look the run up again: a newer write may have superseded
                // part of it since the flush started. Flush its first
                // file-contiguous stretch still in the region; the rest goes
                // back to the front of the queue.
                let mut stretch: Option<(u64, u64)> = None;
                for (offset, len, _) in s.buffer.flush_pieces(region, run) {
                    match stretch {
                        None => stretch = Some((offset, len)),
                        Some((start, so_far)) if start + so_far == offset => {
                            stretch = Some((start, so_far + len));
                        }
                        Some(_) => break,
                    }
                }
                let Some((offset, len)) = stretch else {
                    continue;
                };
                let run_end = run.file_offset + run.len;
                if offset + len < run_end {
                    s.flush.runs.push_front(FlushRunRef {
                        file_offset: offset + len,
                        len: run_end - (offset + len),
                        ..run
                    });
                }
                let done = s.ssd.schedule(now, IoKind::Read, len);
                s.flush.in_flight += 1;
                self.queue.schedule(
                    done,
                    Event::FlushRead {
                        server,
                        file: run.file,
                        offset,
                        len,
                    },
                );
            }
            let s = &mut self.servers[server as usize];
            if !(s.flush.runs.is_empty() && s.flush.in_flight == 0) {
                return;
            }
            // The region is on the HDD: free it and let waiting writers in.
            // INVARIANT: the region has been flushing since start_flush.
            s.buffer.finish_flush(region).expect("the flushing region");
            s.flush.region = None;
            self.retry_waiting(now, server);
        }
    }

    pub(super) fn retry_waiting(&mut self, now: Time, server: u32) {
        let waiting: Vec<u32> = self.servers[server as usize].waiting.drain(..).collect();
        for piece in waiting {
            self.place(now, piece);
        }
    }
}

/// The write buffer of an I/O node running `system`. The baseline's routes
/// everything to the HDD, so its one region (of at least a byte: the
/// baseline may be given no SSD) is never written.
pub(super) fn buffer_config(config: &ClusterConfig, system: System) -> WriteBufferConfig {
    let regions = match system {
        System::Baseline | System::BurstBuffer => 1,
        System::Ssdup | System::SsdupPlus | System::SluiceCost => config.regions,
    };
    let region_bytes = config.fast_bytes_per_server / u64::from(regions.max(1));
    WriteBufferConfig {
        redirector: RedirectorConfig {
            policy: config
                .policy_override
                .unwrap_or_else(|| system.policy(config)),
            detector: DetectorConfig {
                stream_len: config.stream_len,
            },
            threshold: config.threshold,
        },
        pipeline: PipelineConfig {
            regions,
            region_bytes: match system {
                System::Baseline => region_bytes.max(1),
                _ => region_bytes,
            },
            // The paper's OrangeFS-BB writes through while its only region
            // flushes; SSDUP and SSDUP+ block the writer until a region is
            // released (§2.4.1), and so does sluice.
            when_full: match system {
                System::BurstBuffer => WhenFull::WriteThrough,
                _ => WhenFull::Wait,
            },
            wait_max: Duration::from_secs(3600),
        },
        gate: FlushGateConfig {
            flush_idle: config.flush_idle,
            // The papers' pipeline: only full regions flush.
            flush_age: None,
            hold_while_writing: false,
        },
    }
}
