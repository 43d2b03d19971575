//! [`SharedDisk`]: one emulated platter that several processes share, so
//! that N mounts with `capacity.device = "hdd"` over one directory queue
//! on one disk instead of each emulating a disk of its own (issue 34's
//! multi-node benchmark: a congested, shared parallel file system).
//!
//! The disk's state that matters across processes lives in a small file
//! (the *state file*, `capacity.shared_device`): where the head rests, where
//! the last service ended (a service that continues it pays no rotation),
//! and until when the platter is busy, on the host's `CLOCK_MONOTONIC`
//! (one clock for every process of the host). Each process keeps its own
//! [`Hdd`] model with its own queue, elevator and merging; when its device
//! thread starts a service it takes an exclusive `flock` of the state file,
//! puts its model's head where the file says, lets the model pick and time
//! the service from there, reserves the platter from
//! `max(now, busy_until)` for the service's duration, writes the new head
//! and `busy_until` back and unlocks. It then sleeps until its reservation
//! ends. So the services of every process sharing the file never overlap
//! in time, and each pays the seek from wherever the previous one (of any
//! process) left the head.
//!
//! What this models: one disk, one head, services serialized across
//! processes in the order they reserve it (first come, first served
//! between processes: each process has at most one service in flight,
//! and its own queue is served in C-LOOK order), seeks between the
//! processes' files. What it does not: an elevator across processes'
//! queues (a real disk's scheduler would sort everyone's requests
//! together), a PFS's servers, striping, caches or network links.
//!
//! State file format (little-endian, 48 bytes): magic `SLUHDD01`,
//! `busy_until_ns`, `head_bytes`, `previous_end` (`u64::MAX` = none),
//! `services`, `busy_ns` (sum of service times: the platter's busy time).
//! A missing, short or foreign file starts as an idle disk at offset 0; a
//! `busy_until` more than [`STALE_AFTER`] ahead (a file from before a
//! reboot) is taken as idle too.
//!
//! Invariants: the state file is read and written only under its `flock`;
//! an I/O error on it never stops the device: that service is timed by the
//! process's own model alone, and the error is counted
//! ([`SharedDisk::errors`]).

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use sluice_devices::hdd::{Hdd, HddService};

const MAGIC: &[u8; 8] = b"SLUHDD01";
const RECORD_BYTES: usize = 48;

/// A `busy_until` further ahead than this is a stale file, not a queue.
pub const STALE_AFTER: Duration = Duration::from_secs(3600);

/// The shared part of the disk's state (see the module doc).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SharedDiskState {
    /// Until when the platter is reserved, in `CLOCK_MONOTONIC` ns.
    pub busy_until_ns: u64,
    /// Where the head rests.
    pub head_bytes: u64,
    /// End of the last service, if any.
    pub previous_end: Option<u64>,
    /// Services of every process so far.
    pub services: u64,
    /// Sum of their service times, ns.
    pub busy_ns: u64,
}

impl SharedDiskState {
    fn decode(bytes: &[u8; RECORD_BYTES]) -> SharedDiskState {
        if &bytes[..8] != MAGIC {
            return SharedDiskState::default();
        }
        let word = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&bytes[8 + 8 * i..16 + 8 * i]);
            u64::from_le_bytes(w)
        };
        SharedDiskState {
            busy_until_ns: word(0),
            head_bytes: word(1),
            previous_end: Some(word(2)).filter(|end| *end != u64::MAX),
            services: word(3),
            busy_ns: word(4),
        }
    }

    fn encode(&self) -> [u8; RECORD_BYTES] {
        let mut bytes = [0u8; RECORD_BYTES];
        bytes[..8].copy_from_slice(MAGIC);
        let words = [
            self.busy_until_ns,
            self.head_bytes,
            self.previous_end.unwrap_or(u64::MAX),
            self.services,
            self.busy_ns,
        ];
        for (i, word) in words.iter().enumerate() {
            bytes[8 + 8 * i..16 + 8 * i].copy_from_slice(&word.to_le_bytes());
        }
        bytes
    }
}

/// The host's monotonic clock, in ns: one time base for every process.
fn monotonic_ns() -> u64 {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    let secs = u64::try_from(now.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(now.tv_nsec).unwrap_or(0);
    secs.saturating_mul(1_000_000_000).saturating_add(nanos)
}

/// A process's handle on a shared disk's state file.
#[derive(Debug)]
pub struct SharedDisk {
    file: File,
    path: PathBuf,
    errors: AtomicU64,
}

impl SharedDisk {
    /// Opens (creating it if missing) the state file at `path`.
    pub fn open(path: &Path) -> io::Result<SharedDisk> {
        let file = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("shared disk state file {}: {e}", path.display()),
                )
            })?;
        Ok(SharedDisk {
            file,
            path: path.to_path_buf(),
            errors: AtomicU64::new(0),
        })
    }

    /// The state file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// I/O errors on the state file so far (each such service was timed
    /// by this process's model alone).
    pub fn errors(&self) -> u64 {
        self.errors.load(Ordering::Relaxed)
    }

    /// The shared state now (under the lock).
    pub fn state(&self) -> io::Result<SharedDiskState> {
        self.file.lock()?;
        let state = self.read();
        let _ = self.file.unlock();
        state
    }

    fn read(&self) -> io::Result<SharedDiskState> {
        let mut bytes = [0u8; RECORD_BYTES];
        match self.file.read_exact_at(&mut bytes, 0) {
            Ok(()) => Ok(SharedDiskState::decode(&bytes)),
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(SharedDiskState::default()),
            Err(e) => Err(e),
        }
    }

    /// Starts `hdd`'s next service on the shared platter (`hdd` idle):
    /// the service and how long from now until it ends, or `None` when
    /// `hdd`'s queue is empty.
    pub fn start_next(&self, hdd: &mut Hdd) -> Option<(HddService, Duration)> {
        if self.file.lock().is_err() {
            return self.alone(hdd);
        }
        let started = self.start_locked(hdd);
        let _ = self.file.unlock();
        started
    }

    /// Under the lock: read, set the head, start, reserve, write.
    fn start_locked(&self, hdd: &mut Hdd) -> Option<(HddService, Duration)> {
        let now = monotonic_ns();
        let Ok(mut state) = self.read() else {
            return self.alone(hdd);
        };
        let stale_ns = u64::try_from(STALE_AFTER.as_nanos()).unwrap_or(u64::MAX);
        if state.busy_until_ns > now.saturating_add(stale_ns) {
            state = SharedDiskState::default();
        }
        hdd.set_head(state.head_bytes, state.previous_end);
        let service = hdd.start_next()?;
        let duration_ns = u64::try_from(service.duration.as_nanos()).unwrap_or(u64::MAX);
        let end = state.busy_until_ns.max(now).saturating_add(duration_ns);
        state = SharedDiskState {
            busy_until_ns: end,
            head_bytes: service.end(),
            previous_end: Some(service.end()),
            services: state.services + 1,
            busy_ns: state.busy_ns.saturating_add(duration_ns),
        };
        if self.file.write_all_at(&state.encode(), 0).is_err() {
            self.errors.fetch_add(1, Ordering::Relaxed);
            let wait = service.duration;
            return Some((service, wait));
        }
        Some((service, Duration::from_nanos(end - now)))
    }

    /// The state file failed us: this service on this process's model.
    fn alone(&self, hdd: &mut Hdd) -> Option<(HddService, Duration)> {
        self.errors.fetch_add(1, Ordering::Relaxed);
        let service = hdd.start_next()?;
        let wait = service.duration;
        Some((service, wait))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_round_trips_and_foreign_bytes_are_an_idle_disk() {
        let state = SharedDiskState {
            busy_until_ns: 7,
            head_bytes: 1 << 40,
            previous_end: Some(3),
            services: 9,
            busy_ns: 11,
        };
        assert_eq!(SharedDiskState::decode(&state.encode()), state);
        let none = SharedDiskState {
            previous_end: None,
            ..state
        };
        assert_eq!(SharedDiskState::decode(&none.encode()), none);
        assert_eq!(
            SharedDiskState::decode(&[1u8; RECORD_BYTES]),
            SharedDiskState::default()
        );
    }
}
