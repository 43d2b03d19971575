//! BBOS's per-job I/O queues ([`IoScheduler`]): one queue per job and
//! fast-tier device; one job's I/O runs at a time per device, jobs
//! admitted in arrival order (seed 004).

use super::*;

/// A ticket for one I/O of one job, handed out by [`IoScheduler::submit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ticket(pub u64);

/// Whether a submitted I/O may run now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Run it now.
    Now,
    /// Wait for [`IoScheduler::finish`] to hand it out.
    Queued,
}

#[derive(Clone, Debug, Default)]
struct Device {
    /// The job running and how many of its I/Os are in flight.
    active: Option<(u64, usize)>,
    /// Per-job queues of waiting tickets.
    queues: BTreeMap<u64, VecDeque<Ticket>>,
    /// Jobs with waiting tickets, in arrival order of their first waiting
    /// ticket.
    order: VecDeque<u64>,
}

/// Per-job I/O queues, one job at a time per fast-tier device (BBOS §IV-A).
///
/// An I/O of the running job joins it at once unless another job is
/// waiting (then it queues, so a job that keeps writing cannot starve the
/// others). When the running job's last I/O finishes, the job whose queue
/// head arrived first runs next, with all its queued I/Os.
#[derive(Clone, Debug)]
pub struct IoScheduler {
    devices: Vec<Device>,
    next: u64,
    where_: BTreeMap<Ticket, (usize, u64)>,
}

impl IoScheduler {
    /// A scheduler for `devices` fast-tier devices (at least one).
    pub fn new(devices: usize) -> IoScheduler {
        IoScheduler {
            devices: (0..devices.max(1)).map(|_| Device::default()).collect(),
            next: 0,
            where_: BTreeMap::new(),
        }
    }

    /// Number of devices.
    pub fn devices(&self) -> usize {
        self.devices.len()
    }

    /// Submits one I/O of `job` on `device` (taken modulo the device
    /// count).
    pub fn submit(&mut self, device: usize, job: u64) -> (Ticket, Admission) {
        let device = device % self.devices.len();
        let ticket = Ticket(self.next);
        self.next += 1;
        self.where_.insert(ticket, (device, job));
        let d = &mut self.devices[device];
        let admission = match d.active {
            None => {
                d.active = Some((job, 1));
                Admission::Now
            }
            Some((running, ref mut n)) if running == job && d.order.is_empty() => {
                *n += 1;
                Admission::Now
            }
            Some(_) => {
                let q = d.queues.entry(job).or_default();
                if q.is_empty() {
                    d.order.push_back(job);
                }
                q.push_back(ticket);
                Admission::Queued
            }
        };
        (ticket, admission)
    }

    /// Ends an admitted I/O. Returns the tickets admitted because of it
    /// (the next job's queue, whole). Unknown or still-queued tickets are
    /// withdrawn and admit nothing.
    pub fn finish(&mut self, ticket: Ticket) -> Vec<Ticket> {
        let Some((device, job)) = self.where_.remove(&ticket) else {
            return Vec::new();
        };
        let d = &mut self.devices[device];
        if let Some(q) = d.queues.get_mut(&job) {
            if let Some(pos) = q.iter().position(|&t| t == ticket) {
                q.remove(pos);
                if q.is_empty() {
                    d.queues.remove(&job);
                    d.order.retain(|&j| j != job);
                }
                return Vec::new();
            }
        }
        match d.active {
            Some((running, ref mut n)) if running == job => {
                *n -= 1;
                if *n > 0 {
                    return Vec::new();
                }
            }
            _ => return Vec::new(),
        }
        d.active = None;
        let Some(next) = d.order.pop_front() else {
            return Vec::new();
        };
        let admitted: Vec<Ticket> = d.queues.remove(&next).unwrap_or_default().into();
        d.active = Some((next, admitted.len()));
        admitted
    }

    /// The job running on `device`, if any.
    pub fn running(&self, device: usize) -> Option<u64> {
        self.devices
            .get(device % self.devices.len())
            .and_then(|d| d.active.map(|(j, _)| j))
    }

    /// Tickets waiting on `device`.
    pub fn waiting(&self, device: usize) -> usize {
        self.devices
            .get(device % self.devices.len())
            .map_or(0, |d| d.queues.values().map(VecDeque::len).sum())
    }
}
