//! The devices' side: requests to the HDD queue and the SSD, their
//! completions, acknowledgements, and file striping over the I/O nodes.

use super::*;

impl<'a> Sim<'a> {
    pub(super) fn disk_request(
        &mut self,
        server: u32,
        kind: IoKind,
        file: FileId,
        offset: u64,
        len: u64,
    ) -> HddRequest {
        let s = &mut self.servers[server as usize];
        s.next_hdd_id += 1;
        // INVARIANT: layout_objects placed every file any op touches.
        let base = self.object_base[&file];
        HddRequest {
            id: s.next_hdd_id,
            kind,
            offset: base + offset,
            len,
        }
    }

    pub(super) fn hdd_submit(&mut self, now: Time, server: u32, request: HddRequest, owner: Owner) {
        let s = &mut self.servers[server as usize];
        s.hdd_owner.insert(request.id, owner);
        if !s.hdd_backlog.is_empty() {
            s.hdd_backlog.push_back(request);
        } else if let Err(request) = s.hdd.submit(request) {
            s.hdd_backlog.push_back(request);
        }
        self.hdd_kick(now, server);
    }

    pub(super) fn hdd_kick(&mut self, now: Time, server: u32) {
        let s = &mut self.servers[server as usize];
        if s.hdd.is_busy() {
            return;
        }
        if let Some(service) = s.hdd.start_next() {
            s.hdd_current = service.requests;
            self.queue.schedule(
                now.saturating_add(service.duration),
                Event::HddDone { server },
            );
        }
    }

    pub(super) fn hdd_done(&mut self, now: Time, server: u32) {
        let s = &mut self.servers[server as usize];
        s.hdd.complete();
        let done = std::mem::take(&mut s.hdd_current);
        let mut liu_parts = Vec::new();
        let mut read_parts = Vec::new();
        let mut flushed = false;
        let mut freed = false;
        for request in &done {
            // INVARIANT: every submitted request has an owner until it completes.
            match s
                .hdd_owner
                .remove(&request.id)
                .expect("HDD request without an owner")
            {
                Owner::Piece(piece) => schedule_ack(&mut self.queue, self.config, now, piece),
                Owner::LiuPart { load, part } => liu_parts.push((load, part)),
                Owner::ReadPart { piece } => read_parts.push(piece),
                Owner::ReadAhead { file, window } => {
                    // INVARIANT: a window stays in its file's cache until
                    // its request completes.
                    let cache = s.read_ahead.get_mut(&file).expect("read-ahead cache");
                    let at = cache
                        .inflight
                        .iter()
                        .position(|w| w.id == window)
                        .expect("window in flight");
                    read_parts.extend(cache.inflight.remove(at).waiters);
                }
                Owner::Flush { len } => {
                    self.flushed_bytes += len;
                    s.flush.in_flight -= 1;
                    flushed = true;
                }
                Owner::Dirty { len } => {
                    s.dirty_bytes -= len;
                    freed = true;
                }
            }
        }
        while let Some(request) = s.hdd_backlog.pop_front() {
            if let Err(request) = s.hdd.submit(request) {
                s.hdd_backlog.push_front(request);
                break;
            }
        }
        self.hdd_kick(now, server);
        for (load, part) in liu_parts {
            self.liu_part_ready(now, server, load, part);
        }
        for piece in read_parts {
            self.part_done(now, piece);
        }
        if freed {
            flushed |= self.admit_dirty_waiters(now, server);
        }
        if flushed {
            self.maybe_flush(now, server);
        }
    }

    pub(super) fn acknowledge(&mut self, now: Time, piece: u32) {
        schedule_ack(&mut self.queue, self.config, now, piece);
    }

    /// One part of a read piece is served; the piece is acknowledged with
    /// its last part, and its latency at the I/O node recorded.
    pub(super) fn part_done(&mut self, now: Time, piece: u32) {
        let p = &mut self.pieces[piece as usize];
        p.parts -= 1;
        if p.parts > 0 {
            return;
        }
        let job = self.processes[p.process as usize].job as usize;
        let latency = now.as_nanos().saturating_sub(p.arrived.as_nanos());
        self.jobs[job]
            .read_latencies
            .push((now.as_nanos(), latency));
        schedule_ack(&mut self.queue, self.config, now, piece);
    }
}

/// The acknowledgement of a piece done at `now` reaches its client after
/// one link latency each way; a free function so it can be called while a
/// server is borrowed.
pub(super) fn schedule_ack(
    queue: &mut EventQueue<Event>,
    config: &ClusterConfig,
    now: Time,
    piece: u32,
) {
    let ack = now.saturating_add(config.server_link.latency + config.client_link.latency);
    queue.schedule(ack, Event::Acked { piece });
}

/// Pieces of `request` per I/O node: (server, server-local offset, length).
/// Consecutive stripes on one server are adjacent in its local object, so a
/// request gives each server one contiguous range.
pub(super) fn stripe(config: &ClusterConfig, request: WriteRequest) -> Vec<(u32, u64, u64)> {
    let stripe = config.stripe_bytes;
    let servers = u64::from(config.servers);
    let mut per_server: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
    let mut offset = request.offset;
    let end = request.end();
    while offset < end {
        let k = offset / stripe;
        let within = offset % stripe;
        let len = (stripe - within).min(end - offset);
        let server = (k % servers) as u32;
        let local = (k / servers) * stripe + within;
        per_server
            .entry(server)
            .and_modify(|(_, l)| *l += len)
            .or_insert((local, len));
        offset += len;
    }
    per_server
        .into_iter()
        .map(|(server, (local, len))| (server, local, len))
        .collect()
}

/// Place every file's object on the disks, one after another in file-id
/// order, each as large as the file's largest offset needs.
pub(super) fn layout_objects(
    config: &ClusterConfig,
    jobs: &[Job],
) -> Result<HashMap<FileId, u64>, SimError> {
    let mut sizes: BTreeMap<FileId, u64> = BTreeMap::new();
    for job in jobs {
        for ops in &job.processes {
            for op in ops {
                if let Op::Write(r) | Op::Read(r) = op {
                    let size = sizes.entry(r.file).or_insert(0);
                    *size = (*size).max(r.end());
                }
            }
        }
    }
    let unit = config.stripe_bytes * u64::from(config.servers);
    let mut base = 0u64;
    let mut bases = HashMap::new();
    for (file, size) in sizes {
        bases.insert(file, base);
        let object = size.div_ceil(unit) * config.stripe_bytes;
        base = base.saturating_add(object);
    }
    if base > config.hdd.capacity_bytes {
        return Err(SimError(format!(
            "the workload needs {} GB per I/O node but the simulated disk holds {} GB: \
             lower --scale or raise the disk capacity",
            base / 1_000_000_000,
            config.hdd.capacity_bytes / 1_000_000_000
        )));
    }
    Ok(bases)
}
