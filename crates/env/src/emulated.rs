//! [`EmulatedBackend`]: another backend behind a device model applied in
//! real time, so a fast disk behaves like a 7200 rpm disk or a SATA SSD
//! (EVALUATION §1).
//!
//! Every `read_at`/`write_at` of a file becomes one device request of the
//! same length (empty ones are free). The caller blocks until the model
//! says the request is done, then performs the real I/O on the inner file.
//! So the model's time is the floor of every request (the real I/O is not
//! added to it: on the device thread's clock it overlaps the next service).
//! `set_len`, `len` and every namespace and metadata operation (attributes,
//! symbolic links, extended attributes) pass through without delay; `sync_data` and `sync_dir` wait a fixed sync latency (a cache
//! flush: [`HDD_SYNC_LATENCY`], [`SSD_SYNC_LATENCY`], or
//! [`EmulatedBackend::with_sync_latency`]) then sync the inner backend.
//! Every request completes before its call returns, so a sync has nothing
//! of this file in flight to wait for.
//!
//! **HDD**: one device thread per backend runs the
//! [`sluice_devices::hdd::Hdd`] model: callers `submit` requests (waiting
//! for room while the model's queue holds `queue_depth`), the thread calls
//! `start_next` (C-LOOK order, contiguous requests merged), sleeps the
//! service's duration on the [`Clock`], calls `complete` and wakes the
//! callers of every request of the service. Dropping the backend stops and
//! joins the thread; files still open afterwards (and callers still
//! waiting) bypass the model. If the thread died, the same happens.
//!
//! **Disk layout** (HDD; the seek model needs addresses): each file gets a
//! base address the first time it is opened: the previous base plus the
//! per-file reservation ([`FILE_RESERVATION_DEFAULT`] = 1 GiB, or
//! [`EmulatedBackend::with_file_reservation`]), modulo the capacity; the
//! first file starts at 0 (on a shared disk: the slot of the path's FNV-1a
//! hash, `hash mod (capacity / reservation)` times the reservation, so
//! every process places a file alike; two paths may share a slot, and a
//! process that did not see a rename places the file by its new name).
//! File offset `o` lives at `(base + o) mod capacity`; a request that
//! would run past the end of the disk is moved back to end at the last
//! byte (and one longer than the disk is cut to it). A rename carries the base along (a directory rename, every file
//! under it); removing a file forgets its base (addresses are not reused
//! until the allocator wraps). A file larger than the reservation runs into
//! the next file's span, which only makes the addresses overlap.
//!
//! **Shared disk** ([`EmulatedBackend::shared_hdd`]): the same, but each
//! service is placed on a platter that every process naming the same
//! state file shares ([`crate::shared_disk`]): the head starts where the
//! last service of any of them ended and the service waits until the
//! platter is free. File bases are then a hash of the path (below), so one
//! file has one address in every process. The sync latency is not a
//! service of the platter and stays per process.
//!
//! **SSD**: no thread: a caller schedules its request on the
//! [`sluice_devices::ssd::Ssd`] model at `clock.now()` (FIFO across callers
//! per channel) and sleeps until the completion time it returns.
//!
//! Invariants: the HDD model is only touched under its mutex, by callers
//! (`submit`) and the device thread (`start_next`, `complete`); a request id
//! is in `completed` at most once and removed by its waiter; the device
//! thread holds no lock while sleeping. Locks are poison-tolerant (see
//! `lock` in lib.rs); a panic of the device thread is caught by a guard that
//! marks the device stopped and wakes every waiter.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::io;
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use sluice_devices::hdd::{Hdd, HddConfig, HddRequest, HddStats};
use sluice_devices::ssd::{Ssd, SsdConfig, SsdStats};
use sluice_devices::IoKind;

use crate::shared_disk::SharedDisk;
use crate::{lock, Backend, BackendFile, Clock, Forward, ForwardFile, OpenOptions, RelPath};

/// Default disk span reserved per file: 1 GiB.
pub const FILE_RESERVATION_DEFAULT: u64 = 1 << 30;

/// Default cost of a sync on an emulated HDD: a write-cache flush with the
/// data already on the platter (every write completed before returning).
pub const HDD_SYNC_LATENCY: Duration = Duration::from_millis(1);

/// Default cost of a sync on an emulated SSD.
pub const SSD_SYNC_LATENCY: Duration = Duration::from_micros(100);

/// State of an emulated disk shared by callers and the device thread.
#[derive(Debug)]
struct HddState {
    hdd: Hdd,
    next_id: u64,
    /// Requests served, until their waiter collects them.
    completed: HashSet<u64>,
    /// Set by the backend's drop (or the thread's exit): callers bypass the
    /// model from then on.
    stopped: bool,
}

#[derive(Debug)]
struct HddDevice {
    state: Mutex<HddState>,
    /// Wakes the device thread: a request was queued, or stop.
    work: Condvar,
    /// Wakes callers: queue room or completions.
    progress: Condvar,
    /// The platter other processes share, if any.
    shared: Option<SharedDisk>,
}

impl HddDevice {
    /// Submits `kind, offset, len` and blocks until the model served it
    /// (or the device stopped).
    fn serve(&self, kind: IoKind, offset: u64, len: u64) {
        let mut state = lock(&self.state);
        let id = state.next_id;
        state.next_id += 1;
        let request = HddRequest {
            id,
            kind,
            offset,
            len,
        };
        // Wait for room; each completion or service start wakes us.
        loop {
            if state.stopped {
                return;
            }
            if state.hdd.submit(request).is_ok() {
                break;
            }
            state = crate::wait(&self.progress, state);
        }
        self.work.notify_one();
        while !state.completed.remove(&id) {
            if state.stopped {
                return;
            }
            state = crate::wait(&self.progress, state);
        }
    }

    /// The device thread's loop: serve until stopped.
    fn run(&self, clock: &dyn Clock) {
        let _stop_on_exit = StopOnExit(self);
        let mut state = lock(&self.state);
        while !state.stopped {
            let started = match &self.shared {
                None => state.hdd.start_next().map(|service| {
                    let wait = service.duration;
                    (service, wait)
                }),
                Some(_) if state.hdd.is_busy() || state.hdd.queue_len() == 0 => None,
                Some(shared) => shared.start_next(&mut state.hdd),
            };
            let Some((service, wait)) = started else {
                state = crate::wait(&self.work, state);
                continue;
            };
            drop(state);
            // The queue shrank: submitters waiting for room may go on.
            self.progress.notify_all();
            // Alone: the service's duration; shared: until the platter's
            // reservation for it ends.
            clock.sleep(wait);
            state = lock(&self.state);
            state.hdd.complete();
            state
                .completed
                .extend(service.requests.iter().map(|request| request.id));
            self.progress.notify_all();
        }
    }
}

/// Marks the device stopped and wakes everyone when the device thread
/// exits, normally or by a panic, so no caller waits forever.
struct StopOnExit<'a>(&'a HddDevice);

impl Drop for StopOnExit<'_> {
    fn drop(&mut self) {
        lock(&self.0.state).stopped = true;
        self.0.progress.notify_all();
    }
}

/// The device model in front of the inner backend.
enum Model {
    // Boxed: the HDD's state is much larger than the SSD's.
    Hdd(Box<HddDevice>),
    Ssd(Mutex<Ssd>),
}

/// What a backend and its files share.
struct Device {
    model: Model,
    clock: Arc<dyn Clock>,
    /// HDD capacity (addresses wrap at it); unused for an SSD.
    capacity_bytes: u64,
}

impl fmt::Debug for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.model {
            Model::Hdd(_) => "hdd",
            Model::Ssd(_) => "ssd",
        };
        f.debug_struct("Device")
            .field("model", &kind)
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}

impl Device {
    /// Waits as long as the model says a request of `len` bytes at disk
    /// address `base + offset` takes.
    fn request(&self, kind: IoKind, base: u64, offset: u64, len: u64) {
        if len == 0 {
            return;
        }
        match &self.model {
            Model::Hdd(hdd) => {
                let (address, len) = disk_range(self.capacity_bytes, base, offset, len);
                hdd.serve(kind, address, len);
            }
            Model::Ssd(ssd) => {
                let done = lock(ssd).schedule(self.clock.now(), kind, len);
                let wait = done.saturating_since(self.clock.now());
                if !wait.is_zero() {
                    self.clock.sleep(wait);
                }
            }
        }
    }
}

/// The disk range of `len` bytes at file offset `offset` of a file based at
/// `base`: wraps modulo the capacity, then is moved back (or cut) to fit.
fn disk_range(capacity_bytes: u64, base: u64, offset: u64, len: u64) -> (u64, u64) {
    let capacity = u128::from(capacity_bytes.max(1));
    let start = (u128::from(base) + u128::from(offset)) % capacity;
    let len = u128::from(len).min(capacity);
    let start = start.min(capacity - len);
    // Both fit in u64: they are at most the capacity.
    (start as u64, len as u64)
}

/// Where files live on the emulated disk.
#[derive(Debug)]
struct Layout {
    reservation_bytes: u64,
    next_base: u64,
    bases: HashMap<RelPath, u64>,
    /// A shared disk: a new file's base is its path's hash slot.
    hashed: bool,
}

/// FNV-1a, 64 bits.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

impl Layout {
    fn new(hashed: bool) -> Layout {
        Layout {
            reservation_bytes: FILE_RESERVATION_DEFAULT,
            next_base: 0,
            bases: HashMap::new(),
            hashed,
        }
    }

    fn base(&mut self, path: &RelPath, capacity_bytes: u64) -> u64 {
        if let Some(base) = self.bases.get(path) {
            return *base;
        }
        if self.hashed {
            let slots = (capacity_bytes / self.reservation_bytes).max(1);
            let base = (fnv1a(path.as_str().as_bytes()) % slots) * self.reservation_bytes;
            self.bases.insert(path.clone(), base);
            return base;
        }
        let base = self.next_base;
        let next = (u128::from(base) + u128::from(self.reservation_bytes))
            % u128::from(capacity_bytes.max(1));
        // Less than the capacity, so it fits.
        self.next_base = next as u64;
        self.bases.insert(path.clone(), base);
        base
    }

    fn rename(&mut self, from: &RelPath, to: &RelPath) {
        self.bases.remove(to);
        if let Some(base) = self.bases.remove(from) {
            self.bases.insert(to.clone(), base);
        }
        // A directory: everything under it moves too.
        let prefix = format!("{}/", from.as_str());
        let moved: Vec<RelPath> = self
            .bases
            .keys()
            .filter(|path| path.as_str().starts_with(&prefix))
            .cloned()
            .collect();
        for path in moved {
            let rest = &path.as_str()[prefix.len()..];
            if let (Some(base), Ok(new_path)) = (
                self.bases.remove(&path),
                RelPath::new(&format!("{}/{rest}", to.as_str())),
            ) {
                self.bases.insert(new_path, base);
            }
        }
    }
}

/// A backend behind an emulated HDD or SSD (see the module doc).
pub struct EmulatedBackend {
    inner: Arc<dyn Backend>,
    device: Arc<Device>,
    layout: Mutex<Layout>,
    sync_latency: Duration,
    thread: Option<JoinHandle<()>>,
}

impl fmt::Debug for EmulatedBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EmulatedBackend")
            .field("inner", &self.inner)
            .field("device", &self.device)
            .field("sync_latency", &self.sync_latency)
            .finish_non_exhaustive()
    }
}

fn config_error(device: &str, error: impl fmt::Display) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("emulated {device}: {error}"),
    )
}

impl EmulatedBackend {
    /// `inner` behind an emulated disk of `config`, rotational delays drawn
    /// from `seed`; starts the device thread. Errors: an invalid config
    /// (naming the key), or the thread could not be spawned.
    pub fn hdd(
        inner: Arc<dyn Backend>,
        config: HddConfig,
        clock: Arc<dyn Clock>,
        seed: u64,
    ) -> io::Result<EmulatedBackend> {
        EmulatedBackend::hdd_on(inner, config, clock, seed, None)
    }

    /// As [`EmulatedBackend::hdd`], on the platter that every process
    /// naming the state file `state` shares ([`crate::shared_disk`]): their
    /// services never overlap and each seeks from where the last one left
    /// the head. Wants the real clock (the reservations are on the host's
    /// `CLOCK_MONOTONIC`). Errors: as `hdd`, or the state file cannot be
    /// opened or created.
    pub fn shared_hdd(
        inner: Arc<dyn Backend>,
        config: HddConfig,
        clock: Arc<dyn Clock>,
        seed: u64,
        state: &Path,
    ) -> io::Result<EmulatedBackend> {
        let shared = SharedDisk::open(state)?;
        EmulatedBackend::hdd_on(inner, config, clock, seed, Some(shared))
    }

    fn hdd_on(
        inner: Arc<dyn Backend>,
        config: HddConfig,
        clock: Arc<dyn Clock>,
        seed: u64,
        shared: Option<SharedDisk>,
    ) -> io::Result<EmulatedBackend> {
        let hashed = shared.is_some();
        let capacity_bytes = config.capacity_bytes;
        let hdd = Hdd::new(config, seed).map_err(|e| config_error("hdd", e))?;
        let device = Arc::new(Device {
            model: Model::Hdd(Box::new(HddDevice {
                state: Mutex::new(HddState {
                    hdd,
                    next_id: 0,
                    completed: HashSet::new(),
                    stopped: false,
                }),
                work: Condvar::new(),
                progress: Condvar::new(),
                shared,
            })),
            clock,
            capacity_bytes,
        });
        let thread_device = Arc::clone(&device);
        let thread = std::thread::Builder::new()
            .name("sluice-emulated-hdd".to_string())
            .spawn(move || {
                if let Model::Hdd(hdd) = &thread_device.model {
                    hdd.run(thread_device.clock.as_ref());
                }
            })
            .map_err(|e| config_error("hdd", format_args!("starting the device thread: {e}")))?;
        Ok(EmulatedBackend {
            inner,
            device,
            layout: Mutex::new(Layout::new(hashed)),
            sync_latency: HDD_SYNC_LATENCY,
            thread: Some(thread),
        })
    }

    /// `inner` behind an emulated SSD of `config`. Errors: an invalid
    /// config (naming the key).
    pub fn ssd(
        inner: Arc<dyn Backend>,
        config: SsdConfig,
        clock: Arc<dyn Clock>,
    ) -> io::Result<EmulatedBackend> {
        let ssd = Ssd::new(config).map_err(|e| config_error("ssd", e))?;
        Ok(EmulatedBackend {
            inner,
            device: Arc::new(Device {
                model: Model::Ssd(Mutex::new(ssd)),
                clock,
                capacity_bytes: u64::MAX,
            }),
            layout: Mutex::new(Layout::new(false)),
            sync_latency: SSD_SYNC_LATENCY,
            thread: None,
        })
    }

    /// Sets the disk span reserved per file (at least 1 byte); applies to
    /// files opened from now on.
    pub fn with_file_reservation(self, bytes: u64) -> EmulatedBackend {
        lock(&self.layout).reservation_bytes = bytes.max(1);
        self
    }

    /// Sets the latency of `sync_data` and `sync_dir`.
    pub fn with_sync_latency(mut self, latency: Duration) -> EmulatedBackend {
        self.sync_latency = latency;
        self
    }

    /// Counters of the HDD model (`None` for an SSD).
    pub fn hdd_stats(&self) -> Option<HddStats> {
        match &self.device.model {
            Model::Hdd(hdd) => Some(lock(&hdd.state).hdd.stats()),
            Model::Ssd(_) => None,
        }
    }

    /// The shared platter's state (`None` unless [`EmulatedBackend::shared_hdd`]).
    pub fn shared_disk(&self) -> Option<&SharedDisk> {
        match &self.device.model {
            Model::Hdd(hdd) => hdd.shared.as_ref(),
            Model::Ssd(_) => None,
        }
    }

    /// Counters of the SSD model (`None` for an HDD).
    pub fn ssd_stats(&self) -> Option<SsdStats> {
        match &self.device.model {
            Model::Hdd(_) => None,
            Model::Ssd(ssd) => Some(lock(ssd).stats()),
        }
    }

    /// The disk address of byte 0 of `path` if it was given one.
    pub fn file_base_address(&self, path: &RelPath) -> Option<u64> {
        lock(&self.layout).bases.get(path).copied()
    }

    fn sync_delay(&self) {
        if !self.sync_latency.is_zero() {
            self.device.clock.sleep(self.sync_latency);
        }
    }
}

impl Drop for EmulatedBackend {
    fn drop(&mut self) {
        if let Model::Hdd(hdd) = &self.device.model {
            lock(&hdd.state).stopped = true;
            hdd.work.notify_all();
            hdd.progress.notify_all();
        }
        if let Some(thread) = self.thread.take() {
            // A panic of the thread was already handled by its guard.
            let _ = thread.join();
        }
    }
}

/// Namespace and metadata calls pass through (the module doc); what
/// changes is the device: its name, files opened through the model, a
/// sync's latency, and the layout following names.
///
/// Not strict about new methods: one that forwarded unseen would cost
/// the emulation's fidelity, not data, and a new call that moves bytes
/// is composed from `read_at`/`write_at` by [`ForwardFile`] (module
/// `forward`).
impl Forward for EmulatedBackend {
    fn inner(&self) -> &dyn Backend {
        &*self.inner
    }

    fn describe(&self) -> String {
        let kind = match self.device.model {
            Model::Hdd(_) => "hdd",
            Model::Ssd(_) => "ssd",
        };
        format!("emulated {kind} over {}", self.inner.describe())
    }

    fn open(&self, path: &RelPath, options: OpenOptions) -> io::Result<Arc<dyn BackendFile>> {
        let inner = self.inner.open(path, options)?;
        let base = match self.device.model {
            Model::Hdd(_) => lock(&self.layout).base(path, self.device.capacity_bytes),
            Model::Ssd(_) => 0,
        };
        Ok(Arc::new(EmulatedFile {
            inner,
            device: Arc::clone(&self.device),
            base,
            sync_latency: self.sync_latency,
        }))
    }

    fn remove_file(&self, path: &RelPath) -> io::Result<()> {
        self.inner.remove_file(path)?;
        lock(&self.layout).bases.remove(path);
        Ok(())
    }

    fn rename(&self, from: &RelPath, to: &RelPath) -> io::Result<()> {
        self.inner.rename(from, to)?;
        lock(&self.layout).rename(from, to);
        Ok(())
    }

    fn sync_dir(&self, path: &RelPath) -> io::Result<()> {
        self.sync_delay();
        self.inner.sync_dir(path)
    }

    /// `false`, as before the forwarding layer: this wrapper never passed
    /// it on (it came after the wrapper, and only the fault wrapper was
    /// given it). Forwarding it would let a close of a file the kernel
    /// may write skip its sync on an emulated tier: a change of its own.
    fn change_times_exact(&self) -> bool {
        false
    }

    fn hard_link(&self, existing: &RelPath, new: &RelPath) -> io::Result<()> {
        self.inner.hard_link(existing, new)?;
        // One file, one place on the disk: the new name shares its base.
        let mut layout = lock(&self.layout);
        if let Some(&base) = layout.bases.get(existing) {
            layout.bases.insert(new.clone(), base);
        }
        Ok(())
    }
}

/// A file of an [`EmulatedBackend`]: requests go through the device model.
#[derive(Debug)]
struct EmulatedFile {
    inner: Arc<dyn BackendFile>,
    device: Arc<Device>,
    /// Disk address of byte 0.
    base: u64,
    sync_latency: Duration,
}

/// Reads, writes and syncs wait for the model; `len`, `set_len`,
/// `allocate` (metadata on a real disk: extents, unwritten blocks, no
/// data transfer to charge), `stat` and xattrs pass through.
impl ForwardFile for EmulatedFile {
    fn inner(&self) -> &dyn BackendFile {
        &*self.inner
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.device
            .request(IoKind::Read, self.base, offset, buf.len() as u64);
        self.inner.read_at(buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.device
            .request(IoKind::Write, self.base, offset, buf.len() as u64);
        self.inner.write_at(buf, offset)
    }

    fn sync_data(&self) -> io::Result<()> {
        if !self.sync_latency.is_zero() {
            self.device.clock.sleep(self.sync_latency);
        }
        self.inner.sync_data()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disk_ranges_wrap_and_fit() {
        assert_eq!(disk_range(100, 0, 10, 5), (10, 5));
        assert_eq!(disk_range(100, 90, 20, 5), (10, 5));
        // Would run past the end: moved back to end at the last byte.
        assert_eq!(disk_range(100, 90, 8, 5), (95, 5));
        // Longer than the disk: the whole disk.
        assert_eq!(disk_range(100, 50, 0, 500), (0, 100));
        assert_eq!(disk_range(100, u64::MAX, u64::MAX, 1).1, 1);
    }

    #[test]
    fn layout_allocates_wraps_and_follows_renames() {
        let mut layout = Layout {
            reservation_bytes: 40,
            ..Layout::new(false)
        };
        let p = |s: &str| RelPath::new(s).unwrap();
        assert_eq!(layout.base(&p("a"), 100), 0);
        assert_eq!(layout.base(&p("d/b"), 100), 40);
        assert_eq!(layout.base(&p("a"), 100), 0);
        assert_eq!(layout.base(&p("c"), 100), 80);
        assert_eq!(layout.base(&p("e"), 100), 20);
        layout.rename(&p("d"), &p("x"));
        assert_eq!(layout.bases.get(&p("x/b")), Some(&40));
        layout.rename(&p("a"), &p("c"));
        assert_eq!(layout.bases.get(&p("c")), Some(&0));
        assert_eq!(layout.bases.get(&p("a")), None);
    }

    #[test]
    fn a_shared_layout_places_a_path_alike_in_every_process() {
        let p = |s: &str| RelPath::new(s).unwrap();
        let (mut one, mut two) = (Layout::new(true), Layout::new(true));
        let capacity = 300 * FILE_RESERVATION_DEFAULT;
        two.base(&p("other"), capacity);
        for name in ["a", "d/b", "ckpt/node1/file3"] {
            let base = one.base(&p(name), capacity);
            assert_eq!(base, two.base(&p(name), capacity), "{name}");
            assert_eq!(base % FILE_RESERVATION_DEFAULT, 0);
            assert!(base < capacity);
        }
    }
}
