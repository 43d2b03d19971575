//! A running mount: the engine, the FUSE session, the control socket
//! (`status`, `drain`, `unmount`), the metrics endpoint and a sampler that
//! measures the flush rate.
//!
//! Lifecycle: [`Mount::start`] recovers the log and mounts; the mount ends
//! when someone unmounts it (`sluice unmount`, `fusermount3 -u`), when
//! [`Mount::stop`] is asked (signals), or when the process dies (kill -9:
//! the log keeps every acknowledged byte and the next mount recovers it).
//! At the end [`Mount::finish`] drains unless told to keep data buffered.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fuser::{BackgroundSession, MountOption, SessionACL};
use sluice_catalog::JobSpec;
use sluice_config::Config;
use sluice_engine::{Checkpoints, Engine, LiuBackend};
use sluice_env::{Clock, SystemClock};

use crate::fs::{OpCounters, SluiceFs};
use crate::status::Status;

/// What to do with buffered data at the end.
const END_UNSET: u8 = 0;
const END_DRAIN: u8 = 1;
const END_KEEP: u8 = 2;

/// Longest control request line and longest HTTP request head read.
const REQUEST_MAX: u64 = 8192;

struct Shared {
    engine: Arc<Engine>,
    liu: Option<Arc<LiuBackend>>,
    ckpt: Option<Arc<Checkpoints>>,
    counters: Arc<OpCounters>,
    mountpoint: String,
    flush_rate: AtomicU64,
    stop: Arc<AtomicBool>,
    end: AtomicU8,
}

impl Shared {
    /// Drain the log and demote every closed checkpoint copy.
    fn drain(&self) -> io::Result<()> {
        self.engine.drain()?;
        match &self.ckpt {
            Some(c) => c.drain(),
            None => Ok(()),
        }
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
        Status::take(
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
}

/// How long an unmount retries while the mount is busy.
const UNMOUNT_BUSY_MAX: Duration = Duration::from_secs(5);

/// Unmount `mountpoint` (as root), retrying while it is busy: a process
/// that just closed its last file of the mount, or just left it, can keep
/// it busy for a moment, and giving up then left the daemon gone and the
/// mount dead ("Transport endpoint is not connected"; seen in 2 of about
/// 60 conformance runs). Returns whether it is unmounted now (or was not
/// mounted); `false` when not root (EPERM): then fuser unmounts through
/// `fusermount3 -u`.
fn unmount_when_not_busy(mountpoint: &Path) -> io::Result<bool> {
    let started = Instant::now();
    loop {
        match rustix::mount::unmount(mountpoint, rustix::mount::UnmountFlags::empty()) {
            Ok(()) | Err(rustix::io::Errno::INVAL) => return Ok(true),
            Err(rustix::io::Errno::PERM) => return Ok(false),
            Err(rustix::io::Errno::BUSY) if started.elapsed() < UNMOUNT_BUSY_MAX => {
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => {
                return Err(io::Error::new(
                    io::Error::from(e).kind(),
                    format!(
                        "{}: {e} (is a process still using the mount?)",
                        mountpoint.display()
                    ),
                ))
            }
        }
    }
}

/// The control socket of a mount whose fast tier is `fast`.
pub fn control_socket_path(fast: &Path) -> PathBuf {
    fast.join("sluice.sock")
}

impl Mount {
    /// Recover the log, open the engine and mount at `mountpoint`.
    pub fn start(config: &Config, mountpoint: &Path) -> io::Result<Mount> {
        let invalid = |e: sluice_config::ConfigError| {
            io::Error::new(io::ErrorKind::InvalidInput, e.to_string())
        };
        config.validate().map_err(invalid)?;
        let meta = std::fs::metadata(mountpoint).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("mount point {}: {e}", mountpoint.display()),
            )
        })?;
        if !meta.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("mount point {} is not a directory", mountpoint.display()),
            ));
        }
        let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
        let tiers = config.open_tiers(&clock).map_err(invalid)?;
        let engine_config = config.engine_config().map_err(invalid)?;
        let liu = tiers.liu;
        // BBOS first: its recovery must not race the engine's flusher for
        // nothing, and a bad catalogue should stop the mount early.
        let ckpt = match config.meta_spec().map_err(invalid)? {
            Some(spec) => {
                let catalog =
                    sluice_catalog::open(&spec).map_err(|e| io::Error::other(e.to_string()))?;
                Some(Arc::new(Checkpoints::open(
                    Arc::clone(&tiers.fast),
                    Arc::clone(&tiers.capacity),
                    catalog,
                    Arc::clone(&clock),
                    config.bbos_options().map_err(invalid)?,
                )?))
            }
            None => None,
        };
        let engine = Arc::new(Engine::open(
            tiers.fast,
            tiers.capacity,
            Arc::clone(&clock),
            engine_config,
        )?);
        let counters = Arc::new(OpCounters::default());
        // Absolute, so clients in any directory find it through the xattr.
        let control = config.fast.path.as_deref().map(|p| {
            control_socket_path(&std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf()))
        });
        let fs = SluiceFs::new(
            Arc::clone(&engine),
            ckpt.clone(),
            Arc::clone(&counters),
            control.as_ref().map(|p| p.display().to_string()),
            u32::try_from(config.mount.max_write.0).unwrap_or(1 << 20),
            config.mount.direct_io,
        );
        let mut options = vec![
            MountOption::FSName("sluice".to_string()),
            MountOption::Subtype("sluice".to_string()),
            MountOption::RW,
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
        fuse_config.n_threads = Some(config.mount.threads as usize);
        fuse_config.clone_fd = true;
        let session = fuser::spawn_mount(fs, mountpoint, &fuse_config).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "mount {}: {e} (is fuse3 installed and /dev/fuse usable?)",
                    mountpoint.display()
                ),
            )
        })?;
        let shared = Arc::new(Shared {
            engine,
            liu,
            ckpt,
            counters,
            mountpoint: mountpoint.display().to_string(),
            flush_rate: AtomicU64::new(0),
            stop: Arc::new(AtomicBool::new(false)),
            end: AtomicU8::new(END_UNSET),
        });
        let mut mount = Mount {
            shared,
            session: Some(session),
            control: None,
            metrics: None,
            drain_on_unmount: config.mount.drain_on_unmount,
        };
        mount.start_sampler()?;
        if let Some(path) = control {
            mount.start_control(&path)?;
            mount.control = Some(path);
        }
        if let Some(addr) = config.metrics.listen {
            mount.metrics = Some(mount.start_metrics(addr)?);
        }
        Ok(mount)
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

    /// The flag [`Mount::wait`] polls: setting it (a signal handler does)
    /// ends the wait, as [`Mount::stop`] does.
    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.shared.stop)
    }

    /// Block until the mount is unmounted from outside or asked to stop.
    pub fn wait(&mut self) {
        loop {
            if self.shared.stop.load(Ordering::Relaxed) {
                return;
            }
            if self.session.as_ref().is_none_or(|s| s.guard.is_finished()) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Ask the mount to stop (as `sluice unmount` does).
    pub fn stop(&self, drain: Option<bool>) {
        if let Some(drain) = drain {
            self.shared
                .end
                .store(if drain { END_DRAIN } else { END_KEEP }, Ordering::Relaxed);
        }
        self.shared.stop.store(true, Ordering::Relaxed);
    }

    /// Unmount (if still mounted), drain unless data is to stay buffered,
    /// close the engine. Returns whether it drained.
    pub fn finish(mut self) -> io::Result<bool> {
        let drain = match self.shared.end.load(Ordering::Relaxed) {
            END_DRAIN => true,
            END_KEEP => false,
            _ => self.drain_on_unmount,
        };
        // Drain while still mounted, so `sluice unmount` returns only once
        // the capacity tier holds every byte; again after the unmount for
        // writes that raced with the first drain.
        let first = if drain { self.shared.drain() } else { Ok(()) };
        if let Some(session) = self.session.take() {
            if session.guard.is_finished() {
                let _ = session.join();
            } else {
                let unmounted = unmount_when_not_busy(Path::new(&self.shared.mountpoint));
                match unmounted {
                    // The kernel ends the session: wait for its thread.
                    Ok(true) => session.join(),
                    Ok(false) => session.umount_and_join(),
                    Err(e) => Err(e),
                }
                .map_err(|e| io::Error::new(e.kind(), format!("unmount: {e}")))?;
            }
        }
        if let Some(path) = self.control.take() {
            let _ = std::fs::remove_file(path);
        }
        let drain_error = |e: io::Error| io::Error::new(e.kind(), format!("drain: {e}"));
        first.map_err(drain_error)?;
        if drain {
            self.shared.drain().map_err(drain_error)?;
        }
        Ok(drain)
    }

    fn start_sampler(&self) -> io::Result<()> {
        let shared = Arc::clone(&self.shared);
        std::thread::Builder::new()
            .name("sluice-sampler".into())
            .spawn(move || {
                let mut last = (Instant::now(), shared.engine.stats().flushed_bytes);
                loop {
                    std::thread::sleep(Duration::from_millis(1000));
                    let now = (Instant::now(), shared.engine.stats().flushed_bytes);
                    let secs = now.0.duration_since(last.0).as_secs_f64();
                    if secs > 0.0 {
                        let rate = now.1.saturating_sub(last.1) as f64 / secs;
                        shared.flush_rate.store(rate as u64, Ordering::Relaxed);
                    }
                    last = now;
                }
            })?;
        Ok(())
    }

    fn start_control(&self, path: &Path) -> io::Result<()> {
        if UnixStream::connect(path).is_ok() {
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!(
                    "{} answers: another sluice mount uses this fast tier",
                    path.display()
                ),
            ));
        }
        let _ = std::fs::remove_file(path);
        let listener = UnixListener::bind(path).map_err(|e| {
            io::Error::new(e.kind(), format!("control socket {}: {e}", path.display()))
        })?;
        let shared = Arc::clone(&self.shared);
        std::thread::Builder::new()
            .name("sluice-control".into())
            .spawn(move || {
                for stream in listener.incoming().flatten() {
                    let shared = Arc::clone(&shared);
                    // One thread per request: a drain may take a while.
                    let _ = std::thread::Builder::new()
                        .name("sluice-control-req".into())
                        .spawn(move || serve_control(&shared, stream));
                }
            })?;
        Ok(())
    }

    fn start_metrics(&self, addr: SocketAddr) -> io::Result<SocketAddr> {
        let listener = TcpListener::bind(addr)
            .map_err(|e| io::Error::new(e.kind(), format!("metrics endpoint {addr}: {e}")))?;
        let bound = listener.local_addr()?;
        let shared = Arc::clone(&self.shared);
        std::thread::Builder::new()
            .name("sluice-metrics".into())
            .spawn(move || {
                for stream in listener.incoming().flatten() {
                    let _ = serve_metrics(&shared, stream);
                }
            })?;
        Ok(bound)
    }
}

/// One control request: a line `status`, `drain`, `sync PATH` (relative to
/// the mount's root), `unmount`, `unmount drain` or `unmount keep`; the
/// answer is JSON (status), `ok`, `ok BYTES` (sync: the buffered bytes
/// written) or `error: ...`, then the connection closes.
fn serve_control(shared: &Shared, stream: UnixStream) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let mut line = String::new();
    let mut reader = BufReader::new((&stream).take(REQUEST_MAX));
    if reader.read_line(&mut line).is_err() {
        return;
    }
    let answer = match line.trim() {
        "status" => {
            serde_json::to_string(&shared.status()).unwrap_or_else(|e| format!("error: {e}"))
        }
        "drain" => match shared.drain() {
            Ok(()) => "ok".to_string(),
            Err(e) => format!("error: {e}"),
        },
        l if l.starts_with("sync ") => match sluice_env::RelPath::new(&l[5..]) {
            Ok(path) => match shared.engine.sync_path(&path) {
                Ok(bytes) => format!("ok {bytes}"),
                Err(e) => format!("error: {e}"),
            },
            Err(e) => format!("error: sync: {e}"),
        },
        "unmount" | "unmount drain" | "unmount keep" => {
            let end = match line.trim() {
                "unmount drain" => END_DRAIN,
                "unmount keep" => END_KEEP,
                _ => END_UNSET,
            };
            shared.end.store(end, Ordering::Relaxed);
            shared.stop.store(true, Ordering::Relaxed);
            "ok".to_string()
        }
        l if l.starts_with("ckpt ") => shared.ckpt_request(&l[5..]),
        other => format!(
            "error: unknown request {:?}; expected status, drain, sync PATH, unmount [drain|keep] or ckpt ...",
            other.chars().take(64).collect::<String>()
        ),
    };
    let mut stream = stream;
    let _ = writeln!(stream, "{answer}");
}

/// One HTTP request: `GET /metrics` gets the Prometheus text, anything
/// else 404 (a malformed head 400). Bounded read with a timeout.
fn serve_metrics(shared: &Shared, stream: std::net::TcpStream) -> io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut reader = BufReader::new((&stream).take(REQUEST_MAX));
    let mut raw = Vec::new();
    reader.read_until(b'\n', &mut raw)?;
    let request_line = String::from_utf8_lossy(&raw).to_string();
    // Drain the header lines (bounded by `take`).
    let mut header = Vec::new();
    while reader.read_until(b'\n', &mut header)? > 2 {
        header.clear();
    }
    let mut parts = request_line.split_whitespace();
    let (status, body) = match (parts.next(), parts.next()) {
        (Some("GET"), Some("/metrics")) => ("200 OK", shared.status().prometheus()),
        (Some("GET"), Some(path)) if path.starts_with('/') => {
            ("404 Not Found", "not found: try /metrics\n".to_string())
        }
        _ => ("400 Bad Request", "bad request\n".to_string()),
    };
    let mut stream = stream;
    write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// The sluice mount holding `path` (an existing file or directory) and
/// `path` relative to its root, as the engine names it: the nearest
/// ancestor that answers the control attribute.
pub fn mount_of(path: &Path) -> io::Result<(PathBuf, String)> {
    let absolute = std::fs::canonicalize(path)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    let mut buf = [0u8; 4096];
    for root in absolute.ancestors() {
        if rustix::fs::getxattr(root, crate::fs::CONTROL_XATTR, &mut buf[..]).is_err() {
            continue;
        }
        let mut names = Vec::new();
        for part in absolute.strip_prefix(root).unwrap_or(Path::new("")).iter() {
            let name = sluice_env::name_from_os(part);
            if name.contains('\n') {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "{}: a name with a newline cannot be sent to the mount",
                        path.display()
                    ),
                ));
            }
            names.push(name.into_owned());
        }
        return Ok((root.to_path_buf(), names.join("/")));
    }
    Err(io::Error::new(
        io::ErrorKind::NotFound,
        format!("{} is not inside a sluice mount", path.display()),
    ))
}

/// Send one control request to the mount at `mountpoint` (found through
/// its root's `user.sluice.control` xattr) and return the answer line.
pub fn control_request(mountpoint: &Path, request: &str) -> io::Result<String> {
    let mut buf = vec![0u8; 4096];
    let n =
        rustix::fs::getxattr(mountpoint, crate::fs::CONTROL_XATTR, &mut buf[..]).map_err(|e| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "{} is not a sluice mount (no {} attribute: {e})",
                    mountpoint.display(),
                    crate::fs::CONTROL_XATTR
                ),
            )
        })?;
    let path = String::from_utf8_lossy(&buf[..n]).to_string();
    let mut stream = UnixStream::connect(&path)
        .map_err(|e| io::Error::new(e.kind(), format!("control socket {path}: {e}")))?;
    writeln!(stream, "{request}")?;
    let mut answer = String::new();
    BufReader::new(stream).read_line(&mut answer)?;
    let answer = answer.trim_end().to_string();
    if let Some(message) = answer.strip_prefix("error: ") {
        return Err(io::Error::other(message.to_string()));
    }
    Ok(answer)
}
