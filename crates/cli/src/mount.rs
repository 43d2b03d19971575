//! `sluice mount | unmount | status | drain | config show`: wiring of the
//! config, the FUSE mount and its control socket.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use clap::Args;
use sluice_config::{Config, Device, PolicyName};
use sluice_daemon::{control_request, Mount, Status};
use sluice_term::service;

use crate::error::{Error, Result};

/// Where the config comes from: a file, then flags over it.
#[derive(Args, Debug, Clone, Default)]
pub struct ConfigArgs {
    /// TOML config file (unknown keys are errors; `sluice config show`
    /// prints every key).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Fast-tier directory (holds the log).
    #[arg(long)]
    pub fast: Option<PathBuf>,
    /// Capacity-tier directory (holds the files).
    #[arg(long)]
    pub capacity: Option<PathBuf>,
    /// What stands in front of the fast-tier directory: posix, hdd, ssd
    /// or memory.
    #[arg(long)]
    pub fast_device: Option<Device>,
    /// What stands in front of the capacity-tier directory (`hdd` emulates
    /// a 7200 rpm disk).
    #[arg(long)]
    pub capacity_device: Option<Device>,
    /// Redirection policy: cost, ssdup+, ssdup, fast-all, capacity-only.
    #[arg(long)]
    pub policy: Option<PolicyName>,
    /// Let other users use the mount (implies default_permissions).
    #[arg(long)]
    pub allow_other: bool,
    /// Let the kernel check permissions from the file modes.
    #[arg(long)]
    pub default_permissions: bool,
    /// Leave buffered data in the log at unmount (the next mount of the
    /// same fast tier recovers it) instead of draining.
    #[arg(long)]
    pub no_drain: bool,
    /// Serve Prometheus metrics at this address (e.g. 127.0.0.1:9464).
    #[arg(long)]
    pub metrics: Option<SocketAddr>,
    /// Allow --metrics on an address other than loopback: the endpoint has
    /// no authentication, so every host that reaches it reads the metrics.
    #[arg(long)]
    pub metrics_public: bool,
    /// Threads serving FUSE requests.
    #[arg(long)]
    pub threads: Option<u32>,
    /// Turn on LiU's read path (segment buffer, lifted heads) over the
    /// capacity tier; the `[liu]` section sets its sizes.
    #[arg(long)]
    pub liu: bool,
    /// BBOS's catalogue: `redb:PATH`, a path, or `redis://127.0.0.1:PORT`
    /// (default FAST/catalog.redb).
    #[arg(long = "meta", id = "bbos_meta")]
    pub meta: Option<String>,
    /// Create missing tier directories (and their parents); without it a
    /// missing one is an error, so a typo does not become a new, empty
    /// tier (`fast.create`, `capacity.create` in the config).
    #[arg(long)]
    pub create: bool,
}

impl ConfigArgs {
    /// The config in effect: the file (or the defaults), flags over it.
    pub fn resolve(&self) -> Result<Config> {
        let config = match &self.config {
            Some(path) => Config::load(path)?,
            None => Config::default(),
        };
        Ok(apply_flags(self, config))
    }
}

/// The flags of `args` over `config`.
fn apply_flags(args: &ConfigArgs, mut config: Config) -> Config {
    if let Some(p) = &args.fast {
        config.fast.path = Some(p.clone());
    }
    if let Some(p) = &args.capacity {
        config.capacity.path = Some(p.clone());
    }
    if let Some(d) = args.fast_device {
        config.fast.device = d;
    }
    if let Some(d) = args.capacity_device {
        config.capacity.device = d;
    }
    if let Some(p) = args.policy {
        config.policy.name = p;
    }
    config.mount.allow_other |= args.allow_other;
    config.mount.default_permissions |= args.default_permissions || args.allow_other;
    if args.no_drain {
        config.mount.drain_on_unmount = false;
    }
    if let Some(m) = args.metrics {
        config.metrics.listen = Some(m);
    }
    config.metrics.public |= args.metrics_public;
    if let Some(t) = args.threads {
        config.mount.threads = t;
    }
    config.liu.enabled |= args.liu;
    if let Some(m) = &args.meta {
        config.bbos.meta = Some(m.clone());
    }
    if args.create {
        config.fast.create = true;
        config.capacity.create = true;
    }
    config
}

/// `sluice config show`: prints whatever the config is; a note says why
/// it cannot mount (the first refusal of `sluice config check`).
pub fn config_show(args: &ConfigArgs) -> Result<()> {
    let config = args.resolve()?;
    print!("{}", config.to_toml());
    if let Err(e) = sluice_daemon::preflight(&config, None) {
        eprintln!(
            "sluice: note: this config cannot mount yet: {e}\n\
             sluice: note: `sluice config check` with the same arguments exits non-zero on it"
        );
    }
    Ok(())
}

/// `sluice config check [MOUNTPOINT]`: the checks `sluice mount` runs
/// before it writes anything (`sluice_daemon::preflight`, one list for
/// both), without mounting, creating, writing or locking anything. An
/// error (and a non-zero exit) unless the config can mount, at
/// `mountpoint` or `mount.point` when either is given; the warnings
/// `sluice mount` would log go to stderr.
pub fn config_check(args: &ConfigArgs, mountpoint: Option<&Path>) -> Result<()> {
    let config = args.resolve()?;
    let preflight = sluice_daemon::preflight(&config, mountpoint).map_err(Error::Mount)?;
    for warning in &preflight.warnings {
        eprintln!("sluice: warning: {warning}");
    }
    let engine = config.engine_config()?;
    let tier = |t: &sluice_config::TierConfig| match &t.path {
        Some(p) if t.device != Device::Memory => p.display().to_string(),
        _ => "memory".to_string(),
    };
    let at = preflight
        .mountpoint
        .as_deref()
        .map_or_else(String::new, |p| format!(" at {}", p.display()));
    let read_only = if preflight.capacity_read_only {
        " (capacity tier read-only: the mount will be read-only)"
    } else {
        ""
    };
    println!(
        "ok: this config can mount{at} (fast tier {}, capacity tier {}, policy {}){read_only}",
        tier(&config.fast),
        tier(&config.capacity),
        engine.redirector.policy.name()
    );
    Ok(())
}

/// `sluice mount`: mount and serve until unmounted or signalled. With no
/// config, no tier and no mount point it mounts the demo's setup under
/// `./sluice-demo` (fast tier `fast/`, capacity tier `capacity/` behind an
/// emulated disk, mount point `mnt/`).
pub fn mount(args: &ConfigArgs, mountpoint: Option<&Path>) -> Result<()> {
    let bare = args.config.is_none()
        && args.fast.is_none()
        && args.capacity.is_none()
        && mountpoint.is_none();
    let mut config = if bare {
        let dir = sluice_workload::demo::default_dir();
        let mut config = Config::from_toml(sluice_workload::demo::DEMO_CONFIG)?;
        config.fast.path = Some(dir.join("fast"));
        config.capacity.path = Some(dir.join("capacity"));
        config.mount.point = Some(dir.join("mnt"));
        for d in ["fast", "capacity", "mnt"] {
            std::fs::create_dir_all(dir.join(d)).map_err(Error::path(&dir))?;
        }
        tracing::info!(
            "no tiers given: mounting the demo setup under {} (fast/, capacity/ behind an emulated disk, mnt/)",
            dir.display()
        );
        apply_flags(args, config)
    } else {
        args.resolve()?
    };
    if let Some(p) = mountpoint {
        config.mount.point = Some(p.to_path_buf());
    }
    let point = config.mount.point.clone().ok_or_else(no_mount_point)?;
    // Refused before anything is measured or written (Mount::start runs
    // the same checks again).
    sluice_daemon::preflight(&config, Some(&point)).map_err(Error::Mount)?;
    // A tier that cannot be measured keeps the default, and the mount
    // says so; it is no reason to refuse.
    match sluice_workload::profile::stored::settle_cost_seek(&mut config) {
        Ok(Some(settled)) => tracing::info!("{settled}"),
        Ok(None) => {}
        Err(e) => tracing::warn!("{e}"),
    }
    let running = Mount::start(&config, &point).map_err(Error::Mount)?;
    for warning in running.warnings() {
        tracing::warn!("{warning}");
    }
    // Weak: the engine must close with the mount, whatever the watcher does.
    let engine = std::sync::Arc::downgrade(running.engine());
    let foreground = sluice_term::client::ForegroundMount {
        stop: running.stop_flag(),
        keep: running.keep_flag(),
        drains: running.drains_on_unmount(),
        buffered_bytes: Box::new(move || engine.upgrade().map_or(0, |e| e.buffered_bytes())),
    };
    let signals = sluice_term::client::watch_signals(foreground, &point).map_err(Error::Message)?;
    let status = running.status();
    tracing::info!(
        mountpoint = %point.display(),
        fast = %status.fast.describe,
        capacity = %status.capacity.describe,
        policy = %status.policy,
        recovered_records = status.recovered_records,
        metrics = %running
            .metrics_addr()
            .map_or_else(|| "off".to_string(), |a| format!("http://{a}/metrics")),
        "mounted"
    );
    service::notify_ready();
    // A refused unmount (busy) is reported and the mount serves on.
    let drained = running
        .serve(&mut |message| tracing::warn!(mountpoint = %point.display(), "{message}"))
        .map_err(Error::Mount);
    signals.close();
    let drained = drained?;
    tracing::info!(
        mountpoint = %point.display(),
        "unmounted: {}",
        if drained {
            "drained: the capacity tier holds every byte"
        } else {
            "left buffered data in the log; the next mount of this fast tier recovers it"
        }
    );
    Ok(())
}

/// `sluice mount --daemon`: runs the checks `sluice config check` runs
/// (its refusals come out here, on stderr), then starts the mount in the
/// background and returns once it is up.
pub fn mount_daemon(
    args: &ConfigArgs,
    mountpoint: Option<&Path>,
    log_file: Option<PathBuf>,
    command_line: &[std::ffi::OsString],
) -> Result<()> {
    let config = args.resolve()?;
    let point = mountpoint
        .map(Path::to_path_buf)
        .or(config.mount.point.clone())
        .ok_or_else(no_mount_point)?;
    sluice_daemon::preflight(&config, Some(&point)).map_err(Error::Mount)?;
    let log_file = match log_file {
        Some(f) => f,
        None => service::default_log_file(&point)?,
    };
    Ok(service::daemonize(command_line, &point, &log_file)?)
}

fn no_mount_point() -> Error {
    Error::Usage("no mount point: give MOUNTPOINT or mount.point in the config".to_string())
}

/// `sluice status`.
pub fn status(mountpoint: &Path, json: bool) -> Result<()> {
    let answer = control_request(mountpoint, "status").map_err(Error::Mount)?;
    if json {
        println!("{answer}");
        return Ok(());
    }
    let status: Status = serde_json::from_str(&answer).map_err(|source| Error::Answer {
        mountpoint: mountpoint.to_path_buf(),
        source,
    })?;
    print!("{}", status.text());
    Ok(())
}

/// `sluice sync PATH...`: each file's buffered bytes written to the
/// capacity tier and synced, one after the other.
/// `sluice seal PATH…`: ask each file's mount to seal it (`seal REL`
/// on its control socket), then, with `wait`, ask for each one's state
/// (`state REL`) every 50 ms until no node holds it, at most `timeout`
/// seconds.
pub fn seal(paths: &[std::path::PathBuf], wait: bool, timeout: Option<f64>) -> Result<()> {
    let deadline = match timeout {
        Some(secs) if secs.is_finite() && secs >= 0.0 => {
            Some(std::time::Instant::now() + std::time::Duration::from_secs_f64(secs))
        }
        Some(secs) => {
            return Err(Error::Usage(format!(
                "--timeout {secs}: give a number of seconds, 0 or more"
            )))
        }
        None => None,
    };
    let mut pending = Vec::new();
    for path in paths {
        let (root, relative) = sluice_daemon::mount_of(path).map_err(Error::Mount)?;
        if relative.is_empty() {
            return Err(Error::Usage(format!(
                "{}: a mount's root is not a file; seal its files",
                path.display()
            )));
        }
        let answer =
            control_request(&root, &format!("seal {relative}")).map_err(Error::path(path))?;
        let shown = path.display();
        match answer
            .split_once(' ')
            .map_or((answer.as_str(), ""), |(a, b)| (a, b))
        {
            ("ok", "started") => {
                println!("sealing {shown}: this node's write-back of it has started");
                pending.push((path, root, relative));
            }
            ("ok", asked) if asked.starts_with("asked ") => {
                let node = &asked["asked ".len()..];
                println!("sealing {shown}: node {node} holds it and was asked to write it back");
                pending.push((path, root, relative));
            }
            ("ok", not_held) if not_held.starts_with("not-held") => {
                let state = not_held["not-held".len()..].trim();
                println!(
                    "{shown}: held by no node, nothing to seal (user.sluice.state: {})",
                    if state.is_empty() { "clean" } else { state }
                );
            }
            _ => {
                return Err(Error::Message(format!(
                    "{}: the mount answered {answer:?} to seal (a different sluice version?)",
                    root.display()
                )))
            }
        }
    }
    if !wait {
        return Ok(());
    }
    for (path, root, relative) in pending {
        loop {
            let answer =
                control_request(&root, &format!("state {relative}")).map_err(Error::path(path))?;
            let state = answer.strip_prefix("ok ").unwrap_or(&answer);
            if !state.starts_with("held") {
                println!("sealed {}: {state}", path.display());
                break;
            }
            if deadline.is_some_and(|d| std::time::Instant::now() >= d) {
                return Err(Error::Message(format!(
                    "{}: still {state} after --timeout {}s; its write-back goes on (is that node \
                     up? `sluice status` there shows its recalls)",
                    path.display(),
                    timeout.unwrap_or_default()
                )));
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
    Ok(())
}

pub fn sync(paths: &[std::path::PathBuf]) -> Result<()> {
    for path in paths {
        let (root, relative) = sluice_daemon::mount_of(path).map_err(Error::Mount)?;
        if relative.is_empty() {
            return Err(Error::Usage(format!(
                "{}: a mount's root is not a file; sync its files, or drain it",
                path.display()
            )));
        }
        let answer =
            control_request(&root, &format!("sync {relative}")).map_err(Error::path(path))?;
        let bytes = answer.strip_prefix("ok ").unwrap_or("0");
        println!(
            "synced {}: the capacity tier holds it ({bytes} buffered bytes written)",
            path.display()
        );
    }
    Ok(())
}
