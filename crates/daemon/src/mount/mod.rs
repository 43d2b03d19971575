//! A running mount: the engine, the FUSE session, the control socket
//! (`status`, `drain`, `sync`, `unmount`, `ckpt`), the metrics endpoint
//! and a sampler that measures the flush rate.
//!
//! Lifecycle: [`Mount::start`] refuses a mount point that is a dead FUSE
//! mount (saying to run `fusermount3 -u`) or already a live one, locks the
//! fast tier ([`crate::fast_lock`]) before anything there is written, then
//! recovers the log and mounts. [`Mount::serve`] serves until an unmount
//! is asked (`sluice unmount` over the control socket, or SIGINT/SIGTERM)
//! or the mount is unmounted from outside (`fusermount3 -u`). An asked
//! unmount of a busy mount (a file open, a working directory inside) is
//! refused and the mount keeps serving: giving up left a dead mount
//! ("Transport endpoint is not connected"). `lazy` drains, then detaches
//! the mount (MNT_DETACH): the files still open are served until they are
//! closed. After the unmount the mount drains unless told to keep data
//! buffered, closes the engine, the stager and LiU, releases the lock and
//! only then answers the `sluice unmount` that asked, with the outcome: its
//! exit status says whether the mount ended cleanly, and a new mount of
//! the fast tier may start as soon as it returns. An unmount asked while
//! one is under way waits for its outcome; `unmount keep` (a second
//! Ctrl-C) also stops its drain: the engine closes with the bytes not yet
//! flushed in the log, as a crash in the middle of a flush leaves them
//! (docs/crash-consistency.md, "a stopped drain"), and the next mount
//! recovers them. kill -9: the log keeps every acknowledged byte and the
//! next mount recovers it.
//!
//! Who may do what (docs/fuse.md, Security): the control socket is 0600 in
//! the fast tier's directory (itself the mount's own), and every request
//! is checked against the caller's credentials (SO_PEERCRED): only root and
//! the user who started the mount are served, `status` included (it names
//! the files written last). The metrics endpoint is read-only numbers; on
//! an address other than loopback it needs `metrics.public`.
//!
//! Modules: `checks` (before the mount starts), `control` (the control
//! socket's server; its client is `sluice_status::client`), `faults` (a test hook injecting capacity
//! tier errors), `unmount` (fusermount3, busy refusals).

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use fuser::{BackgroundSession, MountOption, SessionACL};
use rustix::io::Errno;
use sluice_catalog::JobSpec;
use sluice_config::{Config, Consistency, Device, PolicyName};
use sluice_engine::{Checkpoints, Drained, Engine, LiuBackend};
use sluice_env::{Clock, SystemClock};

use crate::fast_lock::{self, FastTierLock};
use crate::metrics;
use crate::status::Status;
use sluice_fuse::fs::{OpCounters, SluiceFs};

mod checks;
mod control;
mod faults;
mod unmount;

use checks::*;
pub use checks::{preflight, Preflight};
use control::*;
pub use sluice_status::client::{
    clear_dead_mount, control_request, control_request_at, control_socket_of, mount_of,
};
use sluice_status::mounts::{fuse_mount_at, unmount_once, NotUnmounted};
use unmount::*;

/// What to do with buffered data at the end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum End {
    /// The config's `mount.drain_on_unmount`.
    Default,
    Drain,
    Keep,
}

/// An unmount asked over the control socket, and the connection waiting
/// for its outcome.
struct UnmountRequest {
    end: End,
    lazy: bool,
    reply: UnixStream,
}

struct Shared {
    engine: Arc<Engine>,
    liu: Option<Arc<LiuBackend>>,
    ckpt: Option<Arc<Checkpoints>>,
    counters: Arc<OpCounters>,
    mountpoint: String,
    flush_rate: AtomicU64,
    /// Set by a signal or an unmount request: [`Mount::serve`] acts on it.
    stop: Arc<AtomicBool>,
    /// The unmount asked over the control socket, if one is pending.
    request: Mutex<Option<UnmountRequest>>,
    /// Unmount requests that came while one was under way: answered with
    /// its outcome.
    waiting: Mutex<Vec<UnixStream>>,
    /// Set by `unmount keep` during an unmount under way (a second Ctrl-C
    /// at `sluice unmount` or at a foreground `sluice mount`): its drain
    /// stops and the buffered bytes stay in the log for the next mount.
    keep_now: Arc<AtomicBool>,
    /// The mount is closing: control requests are refused.
    closing: AtomicBool,
    /// The user who started the mount: with root, the only one served.
    owner: u32,
}

use sluice_env::lock;

impl Shared {
    /// Drain the log and demote every closed checkpoint copy. `Ok(false)`
    /// when [`Shared::keep_now`] stopped it: what was not flushed yet
    /// stays in the log (and closed checkpoint copies staged), where the
    /// next mount finds them, as after `unmount keep`.
    fn drain(&self) -> io::Result<bool> {
        let stopped = || -> io::Result<bool> {
            tracing::info!(
                mountpoint = %self.mountpoint,
                left_bytes = self.engine.buffered_bytes(),
                "drain stopped (an unmount without draining was asked): the bytes left stay in \
                 the fast tier's log; the next mount of this fast tier recovers them"
            );
            Ok(false)
        };
        if self.keep_now.load(Ordering::Relaxed) {
            return stopped();
        }
        if self.engine.drain_or_stop(&self.keep_now)? == Drained::Stopped {
            return stopped();
        }
        if self.keep_now.load(Ordering::Relaxed) {
            return stopped();
        }
        if let Some(c) = &self.ckpt {
            c.drain()?;
        }
        Ok(true)
    }

    /// `ckpt list | register JSON | unregister ID`: the answer line.
    fn ckpt_request(&self, args: &str) -> String {
        let Some(c) = &self.ckpt else {
            return "error: BBOS is off on this mount (bbos.enabled = false, or a memory fast tier without bbos.meta)".to_string();
        };
        let (verb, rest) = args.split_once(' ').unwrap_or((args, ""));
        let result = match verb {
            "list" => serde_json::to_string(&c.jobs()).map_err(io::Error::other),
            "register" => serde_json::from_str::<JobSpec>(rest)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("job: {e}")))
                .and_then(|job| c.register(job))
                .map(|()| "ok".to_string()),
            "unregister" => c
                .unregister(rest.trim())
                .map(|removed| if removed { "ok" } else { "absent" }.to_string()),
            _ => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "expected ckpt list, ckpt register JSON or ckpt unregister ID",
            )),
        };
        result.unwrap_or_else(|e| format!("error: {e}"))
    }

    fn status(&self) -> Status {
        crate::status::take(
            &self.engine,
            self.liu.as_deref(),
            self.ckpt.as_deref(),
            &self.counters,
            &self.mountpoint,
            self.flush_rate.load(Ordering::Relaxed),
        )
    }
}

/// A mounted sluice.
pub struct Mount {
    shared: Arc<Shared>,
    session: Option<BackgroundSession>,
    control: Option<PathBuf>,
    metrics: Option<SocketAddr>,
    drain_on_unmount: bool,
    /// The fast tier's lock (none for a memory fast tier), released only
    /// once nothing of this mount can write there any more.
    fast_lock: Option<FastTierLock>,
    warnings: Vec<String>,
}

impl Mount {
    /// Run the preflight (`checks.rs`, the checks `sluice config check`
    /// runs too), lock the fast tier, recover the log, open the engine and
    /// mount at `mountpoint` (read-only over a read-only capacity tier).
    pub fn start(config: &Config, mountpoint: &Path) -> io::Result<Mount> {
        let invalid = |e: sluice_config::ConfigError| {
            io::Error::new(io::ErrorKind::InvalidInput, e.to_string())
        };
        // Every refusal that needs no write, shared with `sluice config
        // check` (checks.rs): nothing under either tier is touched before.
        let preflight = preflight(config, Some(mountpoint))?;
        let warnings = preflight.warnings;
        if preflight.capacity_read_only {
            tracing::warn!(
                mountpoint = %mountpoint.display(),
                capacity = %config.capacity.path.as_deref().unwrap_or(Path::new("")).display(),
                "the capacity tier is on a read-only file system: the mount serves it read-only \
                 (every write, create, rename and unlink is refused with EROFS)"
            );
        }
        // The fast tier's directory, locked before anything in it is
        // opened for writing; one that does not exist yet is created by
        // opening the tiers (nothing of another mount can be in it), then
        // made the mount's own and locked.
        let fast_dir = match config.fast.device {
            Device::Memory => None,
            _ => config.fast.path.clone(),
        };
        let fast_existed = fast_dir.as_deref().is_some_and(Path::exists);
        let mut fast_lock = match &fast_dir {
            Some(dir) if fast_existed => Some(FastTierLock::acquire(dir, mountpoint)?),
            _ => None,
        };
        let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
        let mut tiers = crate::tiers::open_tiers(config, &clock).map_err(invalid)?;
        tiers.capacity = faults::wrap_capacity(tiers.capacity)?;
        if let (Some(dir), false) = (&fast_dir, fast_existed) {
            fast_lock::make_private(dir)?;
            fast_lock = Some(FastTierLock::acquire(dir, mountpoint)?);
        }
        let mut engine_config = config.engine_config().map_err(invalid)?;
        if let (Some(on_demand), Some(spec)) = (
            engine_config.on_demand.as_mut(),
            config.recall_doorbell_spec().map_err(invalid)?,
        ) {
            // Recalls still work without it (through the capacity tier,
            // listed every 100 ms): an outage is a warning, not a refusal.
            match sluice_catalog::open(&spec) {
                Ok(catalog) => {
                    tracing::info!(
                        catalog = %catalog.describe(),
                        "on-demand: recalls ring each holder's doorbell in the shared catalogue"
                    );
                    on_demand.doorbell = Some(sluice_engine::Doorbell(Arc::from(catalog)));
                }
                Err(e) => tracing::warn!(
                    error = %e,
                    "on-demand: the shared catalogue is unreachable: recalls go through the capacity tier only until the next mount"
                ),
            }
        }
        if let Some(why) = passthrough_unused(config, &engine_config.redirector.policy) {
            tracing::info!("FUSE passthrough unused: {why}");
        }
        if config.mount.consistency == Consistency::CloseToOpen {
            let capacity = tiers.capacity.as_ref();
            let local = if capacity.page_cache_shared() {
                "is"
            } else {
                "is not known to be"
            };
            let syncs = if engine_config.close_sync.syncs_straight_writes(capacity) {
                "every file written since its last sync"
            } else {
                "only bytes leaving the log"
            };
            tracing::info!(
                "close-to-open: a close syncs {syncs} (mount.close_sync = \"{}\"; capacity tier {} {local} a file system local to this host)",
                config.mount.close_sync.name(),
                capacity.describe(),
            );
        }
        if config.mount.page_cache {
            let capacity = tiers.capacity.as_ref();
            if config.mount.attr_timeout.0.is_zero() {
                tracing::info!("page cache: small files are not kept (mount.attr_timeout = 0)");
            } else if capacity.change_times_exact() {
                tracing::info!(
                    "page cache: files shorter than 64 KiB are kept in the kernel's page cache between opens while unchanged (capacity tier {} has exact change times)",
                    capacity.describe()
                );
            } else {
                tracing::info!(
                    "page cache: small files are not kept: capacity tier {} has no exact change times",
                    capacity.describe()
                );
            }
        }
        let liu = tiers.liu;
        // BBOS first: its recovery must not race the engine's flusher for
        // nothing, and a bad catalogue should stop the mount early.
        let mut bbos_off = None;
        let ckpt = match config.meta_spec().map_err(invalid)? {
            Some(spec) => match sluice_catalog::open(&spec) {
                Ok(catalog) => Some(Arc::new(Checkpoints::open(
                    Arc::clone(&tiers.fast),
                    Arc::clone(&tiers.capacity),
                    catalog,
                    Arc::clone(&clock),
                    config.bbos_options().map_err(invalid)?,
                )?)),
                // A catalogue outage at mount: checkpoint files are then
                // ordinary files (as a create during an outage is), unless
                // this node holds copies only the stager serves.
                Err(e) if e.is_unreachable() && !Checkpoints::has_copies(tiers.fast.as_ref())? => {
                    tracing::warn!(
                        error = %e,
                        "checkpoint catalogue unreachable at mount: BBOS is off until the next mount; checkpoint files are written as ordinary files"
                    );
                    bbos_off = Some(e.to_string());
                    None
                }
                Err(e) if e.is_unreachable() => {
                    return Err(io::Error::other(format!(
                        "{e}; this node's fast tier holds checkpoint copies that only BBOS serves: start the catalogue, then mount"
                    )))
                }
                Err(e) => return Err(io::Error::other(e.to_string())),
            },
            None => None,
        };
        let engine = Arc::new(Engine::open(
            tiers.fast,
            tiers.capacity,
            Arc::clone(&clock),
            engine_config,
        )?);
        if let Some(node) = engine.node_name() {
            tracing::info!(
                "on-demand: files this mount buffers are marked as held by node {node} on the capacity tier; other nodes recall them (mount.recall_wait = {:?})",
                config.mount.recall_wait.0
            );
        }
        if let Some(cause) = bbos_off {
            // Shown in `sluice status` (`last_errors`) for the mount's life.
            engine.incidents().record(sluice_engine::Incident {
                at: std::time::SystemTime::now(),
                op: "catalogue".to_string(),
                path: None,
                tier: None,
                errno: None,
                message: format!(
                    "checkpoint catalogue unreachable at mount, BBOS off until the next mount: {cause}"
                ),
            });
        }
        let counters = Arc::new(OpCounters::default());
        // Absolute, so clients in any directory find it through the xattr.
        let control = fast_dir.as_deref().map(|p| {
            control_socket_path(&std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf()))
        });
        // A few readers of /dev/fuse, the threads beside them serving the
        // requests that wait on a tier (sluice_fuse::workers).
        let readers = request_readers(config.mount.threads as usize);
        let fs = SluiceFs::new(
            Arc::clone(&engine),
            ckpt.clone(),
            Arc::clone(&counters),
            control.as_ref().map(|p| p.display().to_string()),
            u32::try_from(config.mount.max_write.0).unwrap_or(1 << 20),
            config.mount.direct_io,
            config.mount.passthrough,
            config.mount.page_cache,
            config.mount.consistency.into(),
            config.mount.attr_timeout.0,
            readers,
            config.mount.threads as usize,
        )?;
        let mut options = vec![
            MountOption::FSName("sluice".to_string()),
            MountOption::Subtype("sluice".to_string()),
            if preflight.capacity_read_only {
                MountOption::RO
            } else {
                MountOption::RW
            },
            MountOption::NoDev,
            MountOption::NoSuid,
        ];
        let mut fuse_config = fuser::Config::default();
        if config.mount.allow_other {
            fuse_config.acl = SessionACL::All;
        }
        // Other users get the kernel's permission checks from the modes:
        // without them allow_other would let anyone read anything.
        if config.mount.default_permissions || config.mount.allow_other {
            options.push(MountOption::DefaultPermissions);
        }
        fuse_config.mount_options = options;
        fuse_config.n_threads = Some(readers);
        fuse_config.clone_fd = true;
        let page_cache_start = fs.page_cache_start();
        let session = fuser::spawn_mount(fs, mountpoint, &fuse_config).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "mount {}: {e} (is fuse3 installed and /dev/fuse usable?)",
                    mountpoint.display()
                ),
            )
        })?;
        page_cache_start(session.notifier());
        let shared = Arc::new(Shared {
            engine,
            liu,
            ckpt,
            counters,
            mountpoint: mountpoint.display().to_string(),
            flush_rate: AtomicU64::new(0),
            stop: Arc::new(AtomicBool::new(false)),
            request: Mutex::new(None),
            waiting: Mutex::new(Vec::new()),
            keep_now: Arc::new(AtomicBool::new(false)),
            closing: AtomicBool::new(false),
            owner: rustix::process::getuid().as_raw(),
        });
        let mut mount = Mount {
            shared,
            session: Some(session),
            control: None,
            metrics: None,
            drain_on_unmount: config.mount.drain_on_unmount,
            fast_lock,
            warnings,
        };
        if let Err(e) = mount.start_services(control, config.metrics.listen) {
            mount.abandon();
            return Err(e);
        }
        Ok(mount)
    }

    /// The sampler, the control socket and the metrics endpoint.
    fn start_services(
        &mut self,
        control: Option<PathBuf>,
        metrics: Option<SocketAddr>,
    ) -> io::Result<()> {
        self.start_sampler()?;
        if let Some(path) = control {
            self.start_control(&path)?;
            self.control = Some(path);
        }
        if let Some(addr) = metrics {
            self.metrics = Some(self.start_metrics(addr)?);
        }
        Ok(())
    }

    /// A mount whose setup failed: detach it (nothing uses it yet) and
    /// close it as after an unmount, leaving buffered data in the log, so
    /// the lock is released only once nothing of it can write any more.
    fn abandon(self) {
        let _ = unmount_once(Path::new(&self.shared.mountpoint), true);
        let _ = self.complete(false, None, None);
    }

    /// The engine (the demo reads its status).
    pub fn engine(&self) -> &Arc<Engine> {
        &self.shared.engine
    }

    /// A status snapshot.
    pub fn status(&self) -> Status {
        self.shared.status()
    }

    /// Where the metrics endpoint listens (the port chosen when 0 was asked).
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics
    }

    /// What the operator should know about this mount's settings (a
    /// public metrics endpoint).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// The flag [`Mount::serve`] watches: setting it (a signal handler
    /// does) asks for an unmount with the config's defaults.
    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.shared.stop)
    }

    /// The flag that turns an unmount under way into one that keeps the
    /// buffered data (as `unmount keep`): its drain stops, the bytes not
    /// flushed yet stay in the log and the next mount recovers them. A
    /// second Ctrl-C sets it. Cleared when an unmount is refused (busy).
    pub fn keep_flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.shared.keep_now)
    }

    /// Whether the mount drains at an unmount that does not say
    /// (`mount.drain_on_unmount`, a signal).
    pub fn drains_on_unmount(&self) -> bool {
        self.drain_on_unmount
    }

    fn session_ended(&self) -> bool {
        self.session.as_ref().is_none_or(|s| s.guard.is_finished())
    }

    /// Block until the mount is unmounted from outside or asked to stop.
    fn wait(&self) {
        while !self.shared.stop.load(Ordering::Relaxed) && !self.session_ended() {
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn drain_wanted(&self, end: End) -> bool {
        match end {
            End::Default => self.drain_on_unmount,
            End::Drain => true,
            End::Keep => false,
        }
    }

    /// Serve until unmounted: an asked unmount (`sluice unmount`, a
    /// signal) of a busy mount is refused (told to `report` and to the
    /// requester) and serving goes on. Returns whether it drained; an
    /// error when it did not end cleanly (a failed drain: the buffered
    /// data stays in the log for the next mount).
    pub fn serve(self, report: &mut dyn FnMut(&str)) -> io::Result<bool> {
        loop {
            self.wait();
            let request = lock(&self.shared.request).take();
            let (end, lazy, reply) = match request {
                Some(r) => (r.end, r.lazy, Some(r.reply)),
                None => (End::Default, false, None),
            };
            let drain = self.drain_wanted(end);
            if self.session_ended() {
                return self.complete(drain, reply, None);
            }
            if lazy {
                return self.detach_and_complete(drain, reply, report);
            }
            match unmount_when_not_busy(Path::new(&self.shared.mountpoint), &self.shared.counters) {
                Ok(()) => return self.complete(drain, reply, None),
                Err(e) => {
                    self.refuse(reply, &format!("error: {e}"));
                    report(&e.to_string());
                }
            }
        }
    }

    /// An unmount that did not happen (busy): tell whoever asked (the
    /// requester and those waiting on it) and serve on, as before it.
    fn refuse(&self, reply: Option<UnixStream>, answer: &str) {
        let waiting = std::mem::take(&mut *lock(&self.shared.waiting));
        for mut stream in reply.into_iter().chain(waiting) {
            let _ = writeln!(stream, "{answer}");
        }
        self.shared.keep_now.store(false, Ordering::Relaxed);
        self.shared.stop.store(false, Ordering::Relaxed);
    }

    /// Unmount now (as `sluice unmount` with the config's defaults; the
    /// demo), drain unless data is to stay buffered, close. Returns whether
    /// it drained; a busy mount is an error.
    pub fn finish(self) -> io::Result<bool> {
        let drain = self.drain_wanted(End::Default);
        if !self.session_ended() {
            unmount_when_not_busy(Path::new(&self.shared.mountpoint), &self.shared.counters)?;
        }
        self.complete(drain, None, None)
    }

    /// `--lazy`: drain while still mounted, detach, answer the requester,
    /// serve the files still open until they are closed, then complete.
    fn detach_and_complete(
        self,
        drain: bool,
        reply: Option<UnixStream>,
        report: &mut dyn FnMut(&str),
    ) -> io::Result<bool> {
        let first = if drain {
            self.shared.drain()
        } else {
            Ok(false)
        };
        let mountpoint = PathBuf::from(&self.shared.mountpoint);
        let detached = unmount_once(&mountpoint, true).map_err(|e| match e {
            NotUnmounted::Busy => busy_error(&mountpoint, 0),
            NotUnmounted::Failed(e) => e,
        });
        let open = self.shared.counters.open_files.load(Ordering::Relaxed);
        let answer = match (&first, &detached) {
            (_, Err(e)) => format!("error: {e}"),
            (Err(e), Ok(())) => format!(
                "error: drain: {e}; detached {}: the buffered data stays in the log",
                mountpoint.display()
            ),
            (Ok(drained), Ok(())) => format!(
                "ok detached {open} {}",
                if *drained { "drained" } else { "kept" }
            ),
        };
        if let Err(e) = detached {
            // Still mounted: serve on, as after a busy refusal.
            report(&e.to_string());
            self.refuse(reply, &answer);
            return self.serve(report);
        }
        if let Some(mut reply) = reply {
            let _ = writeln!(reply, "{answer}");
        }
        if open > 0 {
            report(&format!(
                "detached {}: serving the {open} file(s) still open until they are closed",
                mountpoint.display()
            ));
        }
        while !self.session_ended() {
            std::thread::sleep(Duration::from_millis(50));
        }
        self.complete(drain, None, first.err())
    }

    /// After the unmount: wait for the session, drain (if asked), close
    /// everything that writes to the fast tier, release its lock, then
    /// answer `reply` (and any unmount request that came meanwhile) with
    /// the outcome. `earlier` is a failure of a drain before the unmount.
    fn complete(
        self,
        drain: bool,
        reply: Option<UnixStream>,
        earlier: Option<io::Error>,
    ) -> io::Result<bool> {
        let Mount {
            shared,
            session,
            control,
            fast_lock,
            ..
        } = self;
        let joined = match session {
            Some(session) => session
                .join()
                .map_err(|e| io::Error::new(e.kind(), format!("FUSE session: {e}"))),
            None => Ok(()),
        };
        // After a drain failed while mounted, the one after the unmount
        // is its retry: only its outcome counts.
        let drained = match (drain, earlier) {
            (true, _) => shared.drain().map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!(
                        "drain: {e}; unmounted, and the buffered data stays in the fast tier's \
                         log: the next mount recovers it"
                    ),
                )
            }),
            (false, Some(e)) => Err(e),
            (false, None) => Ok(false),
        };
        shared.closing.store(true, Ordering::Relaxed);
        if let Some(path) = control {
            let _ = std::fs::remove_file(path);
        }
        let late = lock(&shared.request).take();
        let waiting = std::mem::take(&mut *lock(&shared.waiting));
        if close(shared) {
            drop(fast_lock);
        } else {
            // Something of this mount may still write to the fast tier:
            // the lock goes only with the process.
            std::mem::forget(fast_lock);
        }
        let outcome = joined.and(drained);
        let answer = match &outcome {
            Ok(true) => "ok drained".to_string(),
            Ok(false) => "ok kept".to_string(),
            Err(e) => format!("error: {e}"),
        };
        for mut stream in reply
            .into_iter()
            .chain(late.map(|r| r.reply))
            .chain(waiting)
        {
            let _ = writeln!(stream, "{answer}");
        }
        outcome
    }

    fn start_sampler(&self) -> io::Result<()> {
        // Weak: the sampler never keeps a closed mount's engine alive.
        let shared = Arc::downgrade(&self.shared);
        std::thread::Builder::new()
            .name("sluice-sampler".into())
            .spawn(move || {
                let flushed =
                    |s: &Weak<Shared>| s.upgrade().map(|s| s.engine.stats().flushed_bytes);
                let Some(bytes) = flushed(&shared) else {
                    return;
                };
                let mut last = (Instant::now(), bytes);
                loop {
                    std::thread::sleep(Duration::from_millis(1000));
                    let Some(strong) = shared.upgrade() else {
                        return;
                    };
                    let now = (Instant::now(), strong.engine.stats().flushed_bytes);
                    let secs = now.0.duration_since(last.0).as_secs_f64();
                    if secs > 0.0 {
                        let rate = now.1.saturating_sub(last.1) as f64 / secs;
                        strong.flush_rate.store(rate as u64, Ordering::Relaxed);
                    }
                    last = now;
                }
            })?;
        Ok(())
    }

    fn start_control(&self, path: &Path) -> io::Result<()> {
        // The fast tier's lock is ours: a socket left there is a dead
        // mount's.
        let _ = std::fs::remove_file(path);
        let socket_error = |e: io::Error| {
            io::Error::new(e.kind(), format!("control socket {}: {e}", path.display()))
        };
        let listener = UnixListener::bind(path).map_err(socket_error)?;
        // 0600 whatever the umask; callers are checked one by one too
        // (`serve_control`), which also covers the moment before this.
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
            .map_err(socket_error)?;
        let shared = Arc::downgrade(&self.shared);
        std::thread::Builder::new()
            .name("sluice-control".into())
            .spawn(move || {
                for stream in listener.incoming().flatten() {
                    let Some(shared) = shared.upgrade() else {
                        return;
                    };
                    // One thread per request: a drain may take a while.
                    let _ = std::thread::Builder::new()
                        .name("sluice-control-req".into())
                        .spawn(move || serve_control(&shared, stream));
                }
            })?;
        Ok(())
    }

    /// Bind the metrics endpoint to `addr` (only there) and serve it; the
    /// mount is held only while a scrape's snapshot is taken and encoded.
    fn start_metrics(&self, addr: SocketAddr) -> io::Result<SocketAddr> {
        let listener = TcpListener::bind(addr)
            .map_err(|e| io::Error::new(e.kind(), format!("metrics endpoint {addr}: {e}")))?;
        let bound = listener.local_addr()?;
        let shared = Arc::downgrade(&self.shared);
        let render = move || shared.upgrade().map(|s| metrics::encode(s.status()));
        metrics::http::spawn(listener, metrics::http::Limits::DEFAULT, Arc::new(render))?;
        Ok(bound)
    }
}

/// The threads that read requests from /dev/fuse: one per CPU, at least
/// two, at most `mount.threads` (`sluice_fuse`'s workers say why so few).
fn request_readers(threads: usize) -> usize {
    let cpus = std::thread::available_parallelism().map_or(2, usize::from);
    cpus.max(2).min(threads.max(1))
}

/// Drop the engine, the stager and LiU (their threads write to the fast
/// tier) once no control request holds them. Returns whether they are
/// closed; not when something still held them after [`CLOSE_WAIT_MAX`].
fn close(shared: Arc<Shared>) -> bool {
    let deadline = Instant::now() + CLOSE_WAIT_MAX;
    while Arc::strong_count(&shared) > 1 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let Ok(shared) = Arc::try_unwrap(shared) else {
        return false;
    };
    let Shared {
        engine, ckpt, liu, ..
    } = shared;
    let ckpt_closed = ckpt.is_none_or(|c| Arc::try_unwrap(c).is_ok());
    let engine_closed = match Arc::try_unwrap(engine) {
        Ok(engine) => {
            engine.close();
            true
        }
        Err(_) => false,
    };
    let liu_closed = liu.is_none_or(|l| Arc::try_unwrap(l).is_ok());
    ckpt_closed && engine_closed && liu_closed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unprofiled_cost_policy_over_a_real_directory_is_warned_about() {
        let base = "[capacity]\npath = \"/srv/cap\"\n[fast]\npath = \"/srv/fast\"\n";
        let config = |extra: &str| Config::from_toml(&format!("{base}{extra}")).unwrap();
        // Measured at mount (cost_profile "auto", the default): no warning.
        assert_eq!(unprofiled_cost(&config("")), None);
        let off = "[policy]\ncost_profile = \"off\"\n";
        let warning = unprofiled_cost(&config(off)).expect("the default cost_seek is warned");
        assert!(warning.contains("sluice profile /srv/cap"), "{warning}");
        // Measured, another policy, or the emulated disk the default is: quiet.
        assert_eq!(
            unprofiled_cost(&config("[policy]\ncost_seek = \"58us\"\n")),
            None
        );
        assert_eq!(
            unprofiled_cost(&config("[policy]\nname = \"ssdup+\"\n")),
            None
        );
        let hdd = Config::from_toml(&base.replace(
            "path = \"/srv/cap\"\n",
            "path = \"/srv/cap\"\ndevice = \"hdd\"\n",
        ))
        .unwrap();
        assert_eq!(unprofiled_cost(&hdd), None);
    }

    #[test]
    fn the_log_says_why_passthrough_serves_no_file() {
        let base = "[capacity]\npath = \"/srv/cap\"\n[fast]\npath = \"/srv/fast\"\n";
        let why = |extra: &str| {
            let config = Config::from_toml(&format!("{base}{extra}")).unwrap();
            let policy = config.engine_config().unwrap().redirector.policy;
            passthrough_unused(&config, &policy)
        };
        let unprofiled = why("").expect("the default cost_seek may buffer");
        assert!(unprofiled.contains("5170 µs is above"), "{unprofiled}");
        assert!(unprofiled.contains("= 90 µs"), "{unprofiled}");
        assert_eq!(why("[policy]\ncost_seek = \"60us\"\n"), None);
        assert_eq!(why("[policy]\nname = \"capacity-only\"\n"), None);
        assert!(why("[policy]\nname = \"ssdup+\"\n").is_some());
        assert!(why("[policy]\nname = \"capacity-only\"\n[liu]\nenabled = true\n").is_some());
        assert_eq!(why("[mount]\npassthrough = false\n"), None, "not asked for");
    }

    #[test]
    fn fuse_mounts_are_found_by_their_unescaped_mount_point() {
        let mountinfo = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
97 22 0:52 / /tmp/a\\040b rw,nosuid,nodev,relatime shared:50 - fuse sluice rw,user_id=0
98 22 0:53 / /mnt/other rw - fuse.sshfs host:/ rw
99 22 0:54 / /mnt/tmp rw - tmpfs tmpfs rw";
        assert_eq!(
            fuse_mounted_at(mountinfo, Path::new("/tmp/a b")),
            Some(("fuse".to_string(), "sluice".to_string()))
        );
        assert_eq!(
            fuse_mounted_at(mountinfo, Path::new("/mnt/other")),
            Some(("fuse.sshfs".to_string(), "host:/".to_string()))
        );
        // Not FUSE, not mounted, a prefix of a mount point.
        assert_eq!(fuse_mounted_at(mountinfo, Path::new("/mnt/tmp")), None);
        assert_eq!(fuse_mounted_at(mountinfo, Path::new("/mnt")), None);
        assert_eq!(fuse_mounted_at(mountinfo, Path::new("/tmp/a")), None);
    }

    #[test]
    fn a_busy_refusal_says_what_keeps_the_mount_busy() {
        let text = |open| busy_error(Path::new("/m"), open).to_string();
        assert!(text(0).contains("working directory"), "{}", text(0));
        assert!(text(1).contains("1 file is open"), "{}", text(1));
        assert!(text(3).contains("3 files are open"), "{}", text(3));
        assert!(text(3).contains("--lazy") && text(3).contains("keeps serving"));
    }

    #[test]
    fn metrics_off_loopback_need_public() {
        let mut config = Config::default();
        config.metrics.listen = Some("127.0.0.1:9464".parse().unwrap());
        assert!(check_metrics(&config).unwrap().is_none());
        config.metrics.listen = Some("[::1]:9464".parse().unwrap());
        assert!(check_metrics(&config).unwrap().is_none());
        config.metrics.listen = Some("0.0.0.0:9464".parse().unwrap());
        let err = check_metrics(&config).unwrap_err().to_string();
        assert!(err.contains("--metrics-public"), "{err}");
        config.metrics.public = true;
        let warning = check_metrics(&config).unwrap().unwrap();
        assert!(warning.contains("without authentication"), "{warning}");
    }
}
