//! The simulated cluster of the SSDUP+ evaluation (seed 002 §3.1).
//!
//! Clients run the processes of [`Job`]s as closed loops: a process issues
//! its next op when every piece of the previous one is acknowledged. Files
//! are striped over the I/O nodes (OrangeFS: `stripe_bytes` round robin); a
//! request becomes one piece per I/O node it touches, with a contiguous
//! server-local range. A piece crosses its client's link, then the I/O
//! node's link (both FIFO, Gigabit by default), and reaches the I/O node.
//! With [`ClusterConfig::fair_share_server_links`] the I/O node's link is
//! shared equally by the pieces crossing it instead (processor sharing).
//! With [`ClusterConfig::incast`] the switch port in front of the I/O
//! node's link also has TCP incast: a piece may lose its window there and
//! wait out a retransmission timeout before it is sent again.
//!
//! Each I/O node has an HDD (C-LOOK queue of `queue_depth`) and an SSD, and
//! runs one of five systems, all built from the policy crate's objects (the
//! paper's four, then sluice's own):
//! * `orangefs` — every write to the HDD (the baseline);
//! * `orangefs-bb` — every write to the SSD, one region, flushed as soon as
//!   it is full, writes go through to the HDD while it flushes (the
//!   conventional burst buffer);
//! * `ssdup` — static water marks, two regions, flush at once, writers wait
//!   for a free region;
//! * `ssdup+` — adaptive threshold, two regions, the traffic-aware flush
//!   gate, writers wait for a free region;
//! * `sluice` — policy `cost` (per file, by predicted device time;
//!   docs/policy.md) with its model taken from the simulated devices
//!   ([`cost_model`]), otherwise as `ssdup+`: two regions, the
//!   traffic-aware flush gate, writers wait.
//!
//! Each I/O node drives one [`WriteBuffer`] (the same object as the engine):
//! it routes every write piece, places it in the SSD log, on the HDD or
//! makes it wait, and says which region to flush. The baseline's buffer
//! routes everything to the HDD (`capacity-only`), so its log stays empty.
//! A write over buffered bytes goes to the log whatever its route (the
//! write buffer's overlap rule), waiting for room if the log is full.
//!
//! The detector sees server-local offsets, as in the paper's OrangeFS
//! server. Buffered writes are appended to the region log on the SSD and
//! indexed; the flusher reads merged runs back from the SSD and writes them
//! to the HDD through the same elevator queue as foreground writes, which is
//! where flushing and foreground traffic interfere.
//!
//! The simulation ends when the last process finishes: throughput is what
//! the application sees, as in the paper; bytes still buffered are reported.
//!
//! Modules: `network` (the switch port, the I/O node's link and request
//! threads), `system` (the five systems and `cost`'s device model),
//! `write` (placement, the dirty limit, the flush pipeline),
//! `read` (page cache with read-ahead, LiU), `disk` (device requests and
//! completions, striping), `results` (what a run measured).
//!
//! INVARIANT: every piece is acknowledged exactly once; a process has at
//! most one op outstanding.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;
use std::time::Duration;

use serde::Serialize;
use sluice_devices::hdd::{Hdd, HddConfig, HddRequest};
use sluice_devices::link::{IncastConfig, Link, LinkConfig, SharedLink};
use sluice_devices::ssd::{Ssd, SsdConfig};
use sluice_devices::IoKind;
use sluice_policy::cost::CostModel;
use sluice_policy::detector::DetectorConfig;
use sluice_policy::extent_index::Extent;
use sluice_policy::flush_gate::{FlushGateConfig, GateDecision};
use sluice_policy::pipeline::{PipelineConfig, WhenFull};
use sluice_policy::redirector::{RedirectPolicy, RedirectorConfig};
use sluice_policy::segments::{Action, LiuConfig, LiuCounters, SegmentBuffer, SegmentKey, Serve};
use sluice_policy::threshold::ThresholdConfig;
use sluice_policy::write_buffer::{
    FlushRunRef, FlushSet, FlushStart, Placement, WriteBuffer, WriteBufferConfig,
    WriteBufferCounters,
};
use sluice_policy::{FileId, LogLocation, RegionId, Tier, Time, WriteRequest};

use crate::event::EventQueue;
use crate::rng::SimRng;
use crate::workload::{Job, Op};

mod disk;
mod network;
mod read;
mod results;
mod system;
mod write;

use disk::*;
use read::*;
pub use results::*;
pub use system::*;
use write::*;

const KIB: u64 = 1024;
const GIB: u64 = 1024 * 1024 * 1024;

/// Shape and parameters of the simulated cluster. Defaults follow the
/// SSDUP+ testbed: 8 clients, 2 I/O nodes, Gigabit Ethernet, a 300 GB
/// 7200 rpm disk with a 128-deep CFQ-like queue and a 250 MB/s SSD per I/O
/// node, 64 KiB stripes.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterConfig {
    /// Compute nodes; processes are placed on them round robin.
    pub clients: u32,
    /// I/O nodes; files are striped over them.
    pub servers: u32,
    /// Stripe size of the file layout.
    pub stripe_bytes: u64,
    /// Each client's network link.
    pub client_link: LinkConfig,
    /// Each I/O node's network link.
    pub server_link: LinkConfig,
    /// Each I/O node's disk.
    pub hdd: HddConfig,
    /// Each I/O node's SSD.
    pub ssd: SsdConfig,
    /// SSD bytes per I/O node given to the buffer (all regions together).
    pub fast_bytes_per_server: u64,
    /// Dirty page-cache bytes per I/O node: writes to the HDD are
    /// acknowledged once cached and written back through the disk's queue,
    /// which is what fills the scheduler queue. 0 = synchronous writes.
    pub dirty_limit_bytes: u64,
    /// Regions of SSDUP and SSDUP+ (OrangeFS-BB always uses one).
    pub regions: u32,
    /// Requests per stream of the detector.
    pub stream_len: u32,
    /// Adaptive threshold parameters of SSDUP+.
    pub threshold: ThresholdConfig,
    /// Capacity-idle time after which SSDUP+'s gate lets a flush proceed.
    pub flush_idle: Duration,
    /// Largest merged write of a flush.
    pub flush_run_max_bytes: u64,
    /// Flush runs in flight per I/O node.
    pub flush_depth: u32,
    /// Mean client-side time between a process's ops (MPI and OS work),
    /// drawn from an exponential distribution per op. The jitter lets
    /// processes drift apart as real ones do; 0 = perfect lockstep.
    pub client_overhead_mean: Duration,
    /// Seed of every random choice (disk rotation, client jitter).
    pub seed: u64,
    /// LiU's segment layer on every I/O node's read path (seed 001): `None`
    /// serves each read piece from the HDD as it comes (the baseline).
    pub liu: Option<LiuConfig>,
    /// Sections a segment body is read in (LiU's default 4).
    pub liu_sections: u32,
    /// Page-cache read-ahead of the I/O nodes without LiU: a read piece
    /// that starts less than this past the end of the previous read of its
    /// file on that node (a sequential reader; concurrent pieces arrive out
    /// of order) fetches this much from its start; later pieces inside the
    /// window are served from memory. 0 = off.
    pub read_ahead_bytes: u64,
    /// Keep read-ahead state per process (Linux's per-open-file
    /// `file_ra_state`, as if each process had its own descriptor on the
    /// I/O node) instead of one stream per file and I/O node; the page
    /// cache stays shared. false (the default) = one stream per file, as a
    /// PVFS2 server that reuses one cached descriptor per datafile.
    pub read_ahead_per_process: bool,
    /// Ablation only: the placement policy every I/O node uses instead of
    /// its system's own ([`System::policy`]), to tell a system's routing
    /// from its flushing (docs/results/ssdup.md, Fig. 11). `None` = the
    /// system's own.
    pub policy_override: Option<RedirectPolicy>,
    /// Request threads of each I/O node's server (issue 23: "server
    /// threads reordering requests"): a request that reaches the node
    /// waits in its intake until one of these threads is free; a free
    /// thread takes a pending request *at random* (threads contend for the
    /// queue, no order is kept) and spends [`server_request_time`] on it
    /// before it is placed (and seen by the detector). The more requests
    /// pending, the more they are reordered, and across more iterations.
    /// 0 (the default) = requests are handled in arrival order at once.
    ///
    /// [`server_request_time`]: ClusterConfig::server_request_time
    pub server_threads: u32,
    /// A server thread's time per request (with `server_threads` > 0).
    pub server_request_time: Duration,
    /// TCP incast at the switch port of each I/O node (issue 23: the
    /// ordering before the server): a piece that reaches the switch times
    /// out with the probability [`IncastConfig::timeout_probability`] gives
    /// for the flows with data for that node (the pieces on their way to
    /// it, one per process and node, less those waiting out a timeout),
    /// and is offered again `retransmit_timeout` later. Its process, a
    /// closed loop, falls behind the others by that much. `None` (the
    /// default) = the switch forwards every piece at once (no loss).
    pub incast: Option<IncastConfig>,
    /// Each I/O node's link shares its bandwidth equally among the pieces
    /// crossing it ([`SharedLink`], processor sharing: the fair share TCP
    /// flows converge to on one switch port) instead of sending them one
    /// after another in the order they reach the switch. false (the
    /// default) = FIFO.
    pub fair_share_server_links: bool,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            clients: 8,
            servers: 2,
            stripe_bytes: 64 * KIB,
            client_link: LinkConfig::default(),
            server_link: LinkConfig::default(),
            hdd: HddConfig::default(),
            ssd: SsdConfig::default(),
            fast_bytes_per_server: 120 * GIB,
            // ~12% of the testbed I/O nodes' 8 GB RAM (Linux dirty_ratio
            // defaults to 10-20%).
            dirty_limit_bytes: GIB,
            regions: 2,
            stream_len: 128,
            threshold: ThresholdConfig::default(),
            flush_idle: Duration::from_millis(200),
            flush_run_max_bytes: 1024 * KIB,
            flush_depth: 2,
            client_overhead_mean: Duration::from_micros(200),
            seed: 1,
            liu: None,
            liu_sections: 4,
            read_ahead_bytes: 512 * KIB,
            read_ahead_per_process: false,
            policy_override: None,
            server_threads: 0,
            server_request_time: Duration::from_micros(100),
            incast: None,
            fair_share_server_links: false,
        }
    }
}

/// A simulation that cannot run: bad parameters or a workload that cannot
/// finish.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimError(pub String);

impl fmt::Display for SimError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SimError {}

/// Simulate `jobs` on the cluster running `system`.
pub fn simulate(
    config: &ClusterConfig,
    system: System,
    jobs: &[Job],
) -> Result<RunResult, SimError> {
    let mut sim = Sim::new(config, system, jobs)?;
    sim.run()?;
    Ok(sim.finish())
}

#[derive(Debug)]
enum Event {
    Start {
        job: u32,
    },
    Next {
        process: u32,
    },
    Issue {
        process: u32,
    },
    AtSwitch {
        piece: u32,
    },
    /// The next piece on `server`'s shared link may have finished sending
    /// (with `fair_share_server_links`); stale if the link changed since.
    PortDone {
        server: u32,
        generation: u64,
    },
    /// A piece that timed out at the switch is sent again (with `incast`).
    Retransmit {
        piece: u32,
    },
    AtServer {
        piece: u32,
    },
    /// A server thread is done with `piece` (with `server_threads`).
    Handled {
        piece: u32,
    },
    Acked {
        piece: u32,
    },
    SsdDone {
        piece: u32,
    },
    HddDone {
        server: u32,
    },
    FlushRead {
        server: u32,
        file: FileId,
        offset: u64,
        len: u64,
    },
    LiuSsdDone {
        server: u32,
        what: LiuSsd,
    },
    Retry {
        server: u32,
    },
    GateRecheck {
        server: u32,
    },
}

#[derive(Clone, Copy, Debug)]
struct Piece {
    process: u32,
    server: u32,
    kind: IoKind,
    file: FileId,
    /// Server-local offset.
    offset: u64,
    len: u64,
    /// The tier the I/O node's redirector routed a write to (decided once,
    /// kept across retries).
    route: Tier,
    waiting_since: Option<Time>,
    /// When it reached its I/O node.
    arrived: Time,
    /// Parts still outstanding (a LiU read spanning segments has several).
    parts: u32,
}

struct Process<'a> {
    job: u32,
    ops: &'a [Op],
    next: usize,
    client: u32,
    outstanding: u32,
    rng: SimRng,
}

struct JobState {
    processes: u32,
    remaining: u32,
    barrier_waiting: Vec<u32>,
    bytes: u64,
    start: Time,
    end: Time,
    barriers: Vec<Mark>,
    end_mark: Mark,
    read_latencies: Vec<(u64, u64)>,
}

/// Who is told when an HDD request completes.
#[derive(Clone, Copy, Debug)]
enum Owner {
    /// A synchronous piece (a read, or a write with no write-back cache):
    /// acknowledge it.
    Piece(u32),
    /// A flush run written synchronously: the flusher may go on.
    Flush { len: u64 },
    /// Cached bytes written back: free them from the dirty budget.
    Dirty { len: u64 },
    /// Part `part` of LiU segment load `load` (0 = head, k = section k).
    LiuPart { load: u64, part: u32 },
    /// A read served from the HDD: one part of the piece.
    ReadPart { piece: u32 },
    /// A read-ahead window of the page cache arrived.
    ReadAhead { file: FileId, window: u64 },
}

/// A write waiting for room in the dirty budget.
#[derive(Clone, Copy, Debug)]
enum DirtyWaiter {
    Piece(u32, HddRequest),
    Flush(HddRequest),
}

#[derive(Default)]
struct FlushState {
    region: Option<RegionId>,
    runs: VecDeque<FlushRunRef>,
    in_flight: u32,
}

struct Server {
    link: Link,
    /// The link shared by its pieces (`fair_share_server_links`), used
    /// instead of `link`, and the number of its latest `PortDone`.
    shared_link: Option<SharedLink>,
    port_generation: u64,
    hdd: Hdd,
    ssd: Ssd,
    /// Routing, the SSD log's regions and index, and the flush gate.
    buffer: WriteBuffer,
    /// Whether flushing waits for the gate (SSDUP+, sluice); the other
    /// systems flush a region as soon as it is full.
    traffic_aware: bool,
    hdd_owner: HashMap<u64, Owner>,
    hdd_backlog: VecDeque<HddRequest>,
    dirty_bytes: u64,
    dirty_waiters: VecDeque<DirtyWaiter>,
    hdd_current: Vec<HddRequest>,
    next_hdd_id: u64,
    waiting: VecDeque<u32>,
    retry_at: Option<Time>,
    recheck_at: Option<Time>,
    flush: FlushState,
    liu: Option<LiuNode>,
    /// Per file: the page cache's read-ahead state.
    read_ahead: HashMap<FileId, PageCache>,
    next_window: u64,
    /// Requests waiting for a server thread, and the threads busy
    /// (`server_threads`); the random pick's generator.
    intake: Vec<u32>,
    threads_busy: u32,
    intake_rng: SimRng,
    /// Pieces on their way to this node (issued, not arrived), those of
    /// them waiting out a retransmission timeout (`incast`), the timeouts
    /// so far, and the draw's generator.
    in_flight: u32,
    stalled: u32,
    incast_timeouts: u64,
    incast_rng: SimRng,
}

struct Sim<'a> {
    config: &'a ClusterConfig,
    system: System,
    queue: EventQueue<Event>,
    clients: Vec<Link>,
    servers: Vec<Server>,
    processes: Vec<Process<'a>>,
    jobs: Vec<JobState>,
    job_names: Vec<String>,
    job_start_after: Vec<Duration>,
    jobs_remaining: usize,
    pieces: Vec<Piece>,
    free_pieces: Vec<u32>,
    /// Disk offset of each file's object (the same on every I/O node).
    object_base: HashMap<FileId, u64>,
    flushed_bytes: u64,
    streams: Vec<StreamPoint>,
    bytes_written: u64,
    /// Bytes appended to the SSD logs per file.
    fast_bytes_by_file: BTreeMap<FileId, u64>,
}

impl<'a> Sim<'a> {
    fn new(
        config: &'a ClusterConfig,
        system: System,
        jobs: &'a [Job],
    ) -> Result<Sim<'a>, SimError> {
        if config.clients == 0 || config.servers == 0 || config.stripe_bytes == 0 {
            return Err(SimError(
                "the cluster needs at least one client, one I/O node and a stripe size above 0"
                    .into(),
            ));
        }
        if config.flush_depth == 0 || config.flush_run_max_bytes == 0 {
            return Err(SimError(
                "flush_depth and flush_run_max_bytes must be above 0".into(),
            ));
        }
        let device = |e: sluice_devices::DeviceConfigError| SimError(e.to_string());
        let mut servers = Vec::with_capacity(config.servers as usize);
        for s in 0..config.servers {
            // The devices first: sluice's policy is built from their models.
            let link = Link::new(config.server_link.clone()).map_err(device)?;
            let hdd = Hdd::new(config.hdd.clone(), config.seed.wrapping_add(u64::from(s)))
                .map_err(device)?;
            let ssd = Ssd::new(config.ssd.clone()).map_err(device)?;
            let buffer = WriteBuffer::new(buffer_config(config, system))
                .map_err(|e| SimError(e.to_string()))?;
            let shared_link = if config.fair_share_server_links {
                Some(SharedLink::new(config.server_link.clone()).map_err(device)?)
            } else {
                None
            };
            servers.push(Server {
                link,
                shared_link,
                port_generation: 0,
                hdd,
                ssd,
                buffer,
                traffic_aware: system.traffic_aware(),
                hdd_owner: HashMap::new(),
                hdd_backlog: VecDeque::new(),
                dirty_bytes: 0,
                dirty_waiters: VecDeque::new(),
                hdd_current: Vec::new(),
                next_hdd_id: 0,
                waiting: VecDeque::new(),
                retry_at: None,
                recheck_at: None,
                flush: FlushState::default(),
                read_ahead: HashMap::new(),
                next_window: 0,
                intake: Vec::new(),
                threads_busy: 0,
                intake_rng: SimRng::new(config.seed ^ 0x005E_ED0F_1A7A_u64.wrapping_add(s as u64)),
                in_flight: 0,
                stalled: 0,
                incast_timeouts: 0,
                incast_rng: SimRng::new(config.seed ^ 0x1AC5_7000_u64.wrapping_add(s as u64)),
                liu: match config.liu {
                    None => None,
                    Some(liu) => Some(LiuNode {
                        buffer: SegmentBuffer::new(liu).map_err(|e| SimError(e.to_string()))?,
                        current: HashMap::new(),
                        loads: HashMap::new(),
                        next_load: 0,
                    }),
                },
            });
        }
        let clients = (0..config.clients)
            .map(|_| Link::new(config.client_link.clone()).map_err(device))
            .collect::<Result<Vec<_>, _>>()?;

        let mut processes = Vec::new();
        let mut job_states = Vec::new();
        for (j, job) in jobs.iter().enumerate() {
            for ops in &job.processes {
                processes.push(Process {
                    job: j as u32,
                    ops,
                    next: 0,
                    client: processes.len() as u32 % config.clients,
                    outstanding: 0,
                    rng: SimRng::new(
                        config.seed ^ (processes.len() as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15),
                    ),
                });
            }
            job_states.push(JobState {
                processes: job.processes.len() as u32,
                remaining: job.processes.len() as u32,
                barrier_waiting: Vec::new(),
                bytes: job.bytes_written().saturating_add(job.bytes_read()),
                start: Time::ZERO,
                end: Time::ZERO,
                barriers: Vec::new(),
                end_mark: Mark::default(),
                read_latencies: Vec::new(),
            });
        }
        let object_base = layout_objects(config, jobs)?;
        Ok(Sim {
            config,
            system,
            queue: EventQueue::new(),
            clients,
            servers,
            processes,
            jobs: job_states,
            job_names: jobs.iter().map(|j| j.name.clone()).collect(),
            job_start_after: jobs.iter().map(|j| j.start_after).collect(),
            jobs_remaining: jobs.len(),
            pieces: Vec::new(),
            free_pieces: Vec::new(),
            object_base,
            flushed_bytes: 0,
            streams: Vec::new(),
            bytes_written: jobs.iter().map(Job::bytes_written).sum(),
            fast_bytes_by_file: BTreeMap::new(),
        })
    }

    fn run(&mut self) -> Result<(), SimError> {
        for (j, after) in self.job_start_after.clone().into_iter().enumerate() {
            self.queue.schedule(
                Time::ZERO.saturating_add(after),
                Event::Start { job: j as u32 },
            );
        }
        while self.jobs_remaining > 0 {
            let Some((now, event)) = self.queue.pop() else {
                return Err(SimError(format!(
                    "the workload cannot finish: {} job(s) still running with nothing left to happen \
                     (do all processes of a job reach the same number of barriers?)",
                    self.jobs_remaining
                )));
            };
            self.handle(now, event);
        }
        Ok(())
    }

    fn handle(&mut self, now: Time, event: Event) {
        match event {
            Event::Start { job } => {
                let state = &mut self.jobs[job as usize];
                state.start = now;
                if state.processes == 0 {
                    state.end = now;
                    self.jobs_remaining -= 1;
                }
                let members: Vec<u32> = (0..self.processes.len() as u32)
                    .filter(|&p| self.processes[p as usize].job == job)
                    .collect();
                for p in members {
                    self.advance(now, p);
                }
            }
            Event::Next { process } => self.advance(now, process),
            Event::Issue { process } => {
                let state = &self.processes[process as usize];
                // INVARIANT: Issue is scheduled right after `next` moved
                // past a Write or Read op.
                match state.ops[state.next - 1] {
                    Op::Write(request) => self.issue(now, process, IoKind::Write, request),
                    Op::Read(request) => self.issue(now, process, IoKind::Read, request),
                    _ => unreachable!("Issue follows an I/O op"),
                }
            }
            Event::AtSwitch { piece } => self.at_switch(now, piece),
            Event::PortDone { server, generation } => self.port_done(now, server, generation),
            Event::Retransmit { piece } => self.retransmit(now, piece),
            Event::AtServer { piece } => self.at_server_port(now, piece),
            Event::Handled { piece } => self.handled(now, piece),
            Event::SsdDone { piece } => self.acknowledge(now, piece),
            Event::Acked { piece } => {
                let process = self.pieces[piece as usize].process;
                self.free_pieces.push(piece);
                let state = &mut self.processes[process as usize];
                state.outstanding -= 1;
                if state.outstanding == 0 {
                    self.advance(now, process);
                }
            }
            Event::HddDone { server } => self.hdd_done(now, server),
            Event::LiuSsdDone { server, what } => match what {
                LiuSsd::Head { load } => self.liu_part_ready(now, server, load, 0),
                LiuSsd::Direct { piece } => self.part_done(now, piece),
                LiuSsd::Lifted { key } => {
                    if let Some(liu) = self.servers[server as usize].liu.as_mut() {
                        liu.buffer.lift_done(key, true);
                    }
                }
            },
            Event::FlushRead {
                server,
                file,
                offset,
                len,
            } => {
                let request = self.disk_request(server, IoKind::Write, file, offset, len);
                self.cached_write(now, server, DirtyWaiter::Flush(request));
            }
            Event::Retry { server } => {
                let s = &mut self.servers[server as usize];
                if s.retry_at == Some(now) {
                    s.retry_at = None;
                }
                self.retry_waiting(now, server);
            }
            Event::GateRecheck { server } => {
                let s = &mut self.servers[server as usize];
                if s.recheck_at == Some(now) {
                    s.recheck_at = None;
                }
                self.maybe_flush(now, server);
            }
        }
    }

    /// Take process `p`'s next op: issue I/O (after the client overhead),
    /// compute, wait at a barrier, or finish.
    fn advance(&mut self, now: Time, p: u32) {
        let process = &mut self.processes[p as usize];
        let job = process.job as usize;
        let Some(&op) = process.ops.get(process.next) else {
            let state = &mut self.jobs[job];
            state.remaining -= 1;
            if state.remaining == 0 {
                state.end = now;
                self.jobs_remaining -= 1;
                let mark = self.mark(now);
                self.jobs[job].end_mark = mark;
            }
            // A finished process no longer holds back a barrier.
            return self.release_barrier(now, job);
        };
        process.next += 1;
        match op {
            Op::Write(_) | Op::Read(_) => {
                let overhead = process.rng.exponential(self.config.client_overhead_mean);
                self.queue
                    .schedule(now.saturating_add(overhead), Event::Issue { process: p });
            }
            Op::Compute(gap) => self
                .queue
                .schedule(now.saturating_add(gap), Event::Next { process: p }),
            Op::Barrier => {
                self.jobs[job].barrier_waiting.push(p);
                self.release_barrier(now, job);
            }
        }
    }

    /// Release a job's barrier once every unfinished process waits at it.
    fn release_barrier(&mut self, now: Time, job: usize) {
        let state = &mut self.jobs[job];
        if state.barrier_waiting.is_empty() || state.barrier_waiting.len() as u32 != state.remaining
        {
            return;
        }
        let waiters = std::mem::take(&mut state.barrier_waiting);
        let mark = self.mark(now);
        self.jobs[job].barriers.push(mark);
        for waiter in waiters {
            self.queue.schedule(now, Event::Next { process: waiter });
        }
    }

    /// The time and the disks' totals now.
    fn mark(&self, now: Time) -> Mark {
        let mut mark = Mark {
            ns: now.as_nanos(),
            ..Mark::default()
        };
        for s in &self.servers {
            let stats = s.hdd.stats();
            mark.seek_bytes += stats.seek_distance_bytes_total;
            mark.services += stats.services;
        }
        mark
    }

    /// Split a request over the I/O nodes and send each piece on its way.
    fn issue(&mut self, now: Time, p: u32, kind: IoKind, request: WriteRequest) {
        let pieces = stripe(self.config, request);
        let client = self.processes[p as usize].client as usize;
        self.processes[p as usize].outstanding = pieces.len() as u32;
        if pieces.is_empty() {
            // A zero-length request completes at once.
            self.queue.schedule(now, Event::Next { process: p });
            return;
        }
        for (server, offset, len) in pieces {
            let piece = self.new_piece(Piece {
                process: p,
                server,
                kind,
                file: request.file,
                offset,
                len,
                route: Tier::Capacity,
                waiting_since: None,
                arrived: now,
                parts: 1,
            });
            self.servers[server as usize].in_flight += 1;
            let sent = self.clients[client].transfer(now, len);
            self.queue.schedule(sent, Event::AtSwitch { piece });
        }
    }

    fn new_piece(&mut self, piece: Piece) -> u32 {
        match self.free_pieces.pop() {
            Some(id) => {
                self.pieces[id as usize] = piece;
                id
            }
            None => {
                self.pieces.push(piece);
                self.pieces.len() as u32 - 1
            }
        }
    }

    fn finish(self) -> RunResult {
        let mut waits = 0;
        let mut regions_flushed = 0;
        let mut placed = WriteBufferCounters::default();
        let mut merged = 0;
        let mut buffered = 0;
        let mut liu: Option<LiuCounters> = None;
        let mut incast_timeouts = 0;
        for s in &self.servers {
            incast_timeouts += s.incast_timeouts;
            if let Some(node) = &s.liu {
                liu.get_or_insert_with(LiuCounters::default)
                    .add(node.buffer.counters());
            }
            let pipeline = s.buffer.pipeline().counters();
            waits += pipeline.waits;
            regions_flushed += pipeline.regions_flushed;
            let c = s.buffer.counters();
            placed.fast_bytes += c.fast_bytes;
            placed.capacity_bytes += c.capacity_bytes;
            placed.write_through_bytes += c.write_through_bytes;
            placed.forced_to_log_bytes += c.forced_to_log_bytes;
            merged += s.hdd.stats().requests_merged;
            buffered += s.buffer.buffered_bytes();
        }
        RunResult {
            system: self.system,
            jobs: self
                .jobs
                .iter()
                .zip(&self.job_names)
                .map(|(j, name)| JobResult {
                    name: name.clone(),
                    bytes: j.bytes,
                    start_ns: j.start.as_nanos(),
                    end_ns: j.end.as_nanos(),
                    barriers: j.barriers.clone(),
                    end_mark: j.end_mark,
                    read_latencies: j.read_latencies.clone(),
                })
                .collect(),
            bytes_written: self.bytes_written,
            fast_bytes: placed.fast_bytes + placed.forced_to_log_bytes,
            capacity_bytes: placed.capacity_bytes,
            write_through_bytes: placed.write_through_bytes,
            forced_to_log_bytes: placed.forced_to_log_bytes,
            fast_bytes_by_file: self.fast_bytes_by_file.into_iter().collect(),
            flushed_bytes: self.flushed_bytes,
            buffered_at_end_bytes: buffered,
            waits,
            regions_flushed,
            streams: self.streams,
            hdd_requests_merged: merged,
            incast_timeouts,
            events: self.queue.delivered(),
            end_ns: self.queue.now().as_nanos(),
            liu,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stripes_map_to_contiguous_local_ranges() {
        let config = ClusterConfig::default();
        // 256 KiB at 0 over 2 servers with 64 KiB stripes: 128 KiB each.
        let pieces = stripe(
            &config,
            WriteRequest {
                file: FileId(1),
                offset: 0,
                len: 256 * KIB,
            },
        );
        assert_eq!(pieces, vec![(0, 0, 128 * KIB), (1, 0, 128 * KIB)]);
        // The next 256 KiB continues both local objects.
        let pieces = stripe(
            &config,
            WriteRequest {
                file: FileId(1),
                offset: 256 * KIB,
                len: 256 * KIB,
            },
        );
        assert_eq!(
            pieces,
            vec![(0, 128 * KIB, 128 * KIB), (1, 128 * KIB, 128 * KIB)]
        );
        // An unaligned 100 KiB request starting in stripe 1 (server 1).
        let pieces = stripe(
            &config,
            WriteRequest {
                file: FileId(1),
                offset: 100 * KIB,
                len: 100 * KIB,
            },
        );
        // Stripe 1 [64,128) -> server 1 local [36,64) 28 KiB; stripe 2
        // [128,192) -> server 0 local [64,128) 64 KiB; stripe 3 [192,200)
        // -> server 1 local [64,72) 8 KiB, adjacent to the first part.
        assert_eq!(
            pieces,
            vec![(0, 64 * KIB, 64 * KIB), (1, 36 * KIB, 36 * KIB)]
        );
    }

    #[test]
    fn objects_are_laid_out_in_file_order_and_capacity_is_checked() {
        let config = ClusterConfig::default();
        let job = |file: u64, end: u64| Job {
            name: "j".into(),
            processes: vec![vec![Op::Write(WriteRequest {
                file: FileId(file),
                offset: end - 10,
                len: 10,
            })]],
            start_after: Duration::ZERO,
        };
        let bases = layout_objects(&config, &[job(2, 1 << 20), job(1, 300 * KIB)]).unwrap();
        assert_eq!(bases[&FileId(1)], 0);
        // 300 KiB over 2 servers in 64 KiB stripes: 3 stripes per server.
        assert_eq!(bases[&FileId(2)], 192 * KIB);
        let err = layout_objects(&config, &[job(1, 2_000_000_000_000)]).unwrap_err();
        assert!(err.0.contains("lower --scale"), "{err}");
    }
}
