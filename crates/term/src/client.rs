//! The client side of a mount's drain, as a person at a terminal sees it:
//! `sluice drain` and `sluice unmount` asking the mount over its control
//! socket while showing the drain's progress (bytes flushed of those
//! buffered, rate, ETA) through [`crate::progress`], and what Ctrl-C does
//! during an unmount (the first says what happens and what a second does;
//! the second keeps the rest buffered instead of draining; a third stops
//! waiting), at `sluice unmount` and at a foreground `sluice mount` alike.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::HumanBytes;
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;
use sluice_status::{clear_dead_mount, control_request_at, control_socket_of, Status};

use crate::progress::{Progress, ProgressMode, Unit};

/// How often a drain's progress asks the mount for its buffered bytes.
const DRAIN_SAMPLE_EVERY: Duration = Duration::from_millis(500);

/// What the signal watcher needs of a foreground mount (the daemon's
/// `Mount`, which this crate does not link): the flags its serve loop
/// watches and its buffered bytes.
pub struct ForegroundMount {
    /// Set: unmount with the config's defaults (`Mount::stop_flag`).
    pub stop: Arc<AtomicBool>,
    /// Set during an unmount: keep the buffered data instead of draining
    /// (`Mount::keep_flag`).
    pub keep: Arc<AtomicBool>,
    /// Whether an unmount that does not say drains
    /// (`Mount::drains_on_unmount`).
    pub drains: bool,
    /// Bytes buffered in the log now; 0 once the mount has closed (it must
    /// not keep the engine open: hold it weakly).
    pub buffered_bytes: Box<dyn Fn() -> u64 + Send>,
}

/// SIGINT and SIGTERM at a foreground mount: the first unmounts with the
/// config's defaults; a second Ctrl-C during that unmount makes it keep
/// the buffered data instead of draining (as `sluice unmount --keep`), and
/// the first says so. Returns the handle that stops the watcher.
pub fn watch_signals(
    running: ForegroundMount,
    point: &Path,
) -> Result<signal_hook::iterator::Handle, String> {
    let mut signals = Signals::new([SIGINT, SIGTERM])
        .map_err(|e| format!("installing the signal handler: {e}"))?;
    let handle = signals.handle();
    let ForegroundMount {
        stop,
        keep,
        drains,
        buffered_bytes,
    } = running;
    let point = point.display().to_string();
    std::thread::Builder::new()
        .name("sluice-signals".into())
        .spawn(move || {
            for signal in signals.forever() {
                if !stop.load(Ordering::Relaxed) {
                    let buffered = buffered_bytes();
                    stop.store(true, Ordering::Relaxed);
                    if signal == SIGINT {
                        eprintln!("{}", first_interrupt(&point, drains, buffered));
                    } else {
                        tracing::info!(mountpoint = %point, "SIGTERM: unmounting");
                    }
                } else if signal == SIGINT && !keep.swap(true, Ordering::Relaxed) {
                    eprintln!("{}", second_interrupt(&point, None));
                } else if signal == SIGINT {
                    eprintln!(
                        "sluice: already unmounting {point} without draining; it ends once the \
                         flush under way has (kill -9 is safe too: the next mount recovers the log)"
                    );
                }
            }
        })
        .map_err(|e| format!("starting the signal watcher: {e}"))?;
    Ok(handle)
}

/// What the first Ctrl-C during an unmount says: what happens now and what
/// a second Ctrl-C does. `drains`: whether the unmount drains (as far as
/// the caller knows); `buffered`: bytes buffered in the log now.
fn first_interrupt(mountpoint: &str, drains: bool, buffered: u64) -> String {
    if buffered == 0 {
        format!("sluice: unmounting {mountpoint}: nothing is buffered; it closes by itself")
    } else if drains {
        format!(
            "sluice: unmounting {mountpoint}, draining {} to the capacity tier; press Ctrl-C \
             again to unmount without draining: the buffered bytes stay in the fast tier's log \
             and the next mount of this fast tier recovers them",
            HumanBytes(buffered)
        )
    } else {
        format!(
            "sluice: unmounting {mountpoint} ({} buffered stay in the fast tier's log, which \
             the next mount recovers); it closes by itself",
            HumanBytes(buffered)
        )
    }
}

/// What the second Ctrl-C says (`third`: what a third one would do).
fn second_interrupt(mountpoint: &str, third: Option<&str>) -> String {
    let mut said = format!(
        "sluice: stopping the drain of {mountpoint}: the flush under way ends, the bytes not \
         flushed yet stay in the fast tier's log and the next mount of this fast tier recovers \
         them; nothing is lost"
    );
    if let Some(third) = third {
        said.push_str(&format!(" (Ctrl-C once more: {third})"));
    }
    said
}

/// `sluice unmount`: asks the mount and waits for the outcome, which the
/// mount sends once it has unmounted, drained (or not) and closed; a busy
/// mount refuses and keeps serving. While it drains, progress (buffered
/// bytes left) shows on stderr. The first Ctrl-C says what happens and
/// what a second one does; the second asks the mount to keep the rest
/// buffered instead (`unmount keep` on a second connection); a third
/// stops waiting, the mount closing on its own.
pub fn unmount(
    mountpoint: &Path,
    keep: bool,
    drain: bool,
    lazy: bool,
    mode: ProgressMode,
) -> Result<(), String> {
    let mut request = match (keep, drain) {
        (true, _) => "unmount keep",
        (_, true) => "unmount drain",
        _ => "unmount",
    }
    .to_string();
    if lazy {
        request.push_str(" lazy");
    }
    let failed = |e: std::io::Error| format!("unmount {}: {e}", mountpoint.display());
    // The socket is found through the mount point, which stops answering
    // once unmounted: looked up before, for the progress of the drain.
    let socket = match control_socket_of(mountpoint) {
        Ok(socket) => socket,
        Err(e) if e.kind() == std::io::ErrorKind::NotConnected => {
            return clear_dead(mountpoint, keep, e)
        }
        Err(e) => return Err(failed(e)),
    };
    // With --keep there is no drain to stop: Ctrl-C ends the wait at once.
    let mut signals = match keep {
        true => None,
        false => Some(
            Signals::new([SIGINT]).map_err(|e| format!("installing the signal handler: {e}"))?,
        ),
    };
    let label = format!("draining {}", mountpoint.display());
    let mut watch = DrainWatch::new(&socket, mountpoint, mode, label, false);
    let answer = ask(&socket, mountpoint, &request);
    let mut interrupts = 0;
    let answer = loop {
        match answer.recv_timeout(Duration::from_millis(100)) {
            Ok(answer) => break answer.map_err(failed)?,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(format!("unmount {}: no answer", mountpoint.display()))
            }
        }
        watch.sample();
        for _ in signals.as_mut().map(|s| s.pending()).into_iter().flatten() {
            interrupts += 1;
            let point = mountpoint.display().to_string();
            match interrupts {
                1 => watch.say(&first_interrupt(&point, true, watch.left_bytes())),
                2 => {
                    // Its answer is the unmount's outcome, read below.
                    drop(ask(&socket, mountpoint, "unmount keep"));
                    watch.stopping = true;
                    watch.say(&second_interrupt(
                        &point,
                        Some("stop waiting; the mount closes on its own"),
                    ));
                }
                _ => {
                    return Err(format!(
                        "stopped waiting for {point}: it goes on closing by itself (its log says \
                         when it is done)"
                    ))
                }
            }
        }
    };
    let kept = "buffered data stays in the log; the next mount of its fast tier recovers it";
    let said = match answer.split_whitespace().collect::<Vec<_>>().as_slice() {
        ["ok", "drained"] => {
            watch.finish(true);
            "drained: the capacity tier holds every byte".to_string()
        }
        ["ok", "kept"] => {
            watch.finish(false);
            kept.to_string()
        }
        ["ok", "detached", open, end] => {
            watch.finish(*end == "drained");
            let mut said = format!(
                "detached; {}",
                if *end == "drained" {
                    "drained first: the capacity tier holds every byte written before"
                } else {
                    kept
                }
            );
            if *open != "0" {
                said.push_str(&format!(
                    "; {open} file(s) still open are served until they are closed"
                ));
            }
            said
        }
        _ => {
            return Err(format!(
                "the mount answered something unexpected: {answer:?}"
            ))
        }
    };
    println!("unmounted {}: {said}", mountpoint.display());
    Ok(())
}

/// `sluice unmount` of a dead mount (`dead` is why the socket was not
/// found): cleared when that is safe (`sluice_status::clear_dead_mount`),
/// saying what was done; nothing could drain, so it fails unless `keep`
/// was asked. When not safe, the error says to run `fusermount3 -u`.
fn clear_dead(mountpoint: &Path, keep: bool, dead: std::io::Error) -> Result<(), String> {
    let point = mountpoint.display();
    clear_dead_mount(mountpoint).map_err(|e| format!("unmount {point}: {dead}; {e}"))?;
    let done = format!(
        "{point} was a dead mount (its process ended without unmounting, killed?): cleared it, \
         as `fusermount3 -u {point}` does; nothing was drained: the buffered data stays in the \
         fast tier's log, and the next mount of that fast tier recovers it"
    );
    if keep {
        println!("unmounted {done}");
        Ok(())
    } else {
        // The drain asked for did not happen: not a success.
        Err(format!("unmount {point}: {done}"))
    }
}

/// Send `request` over `socket` from a thread; the answer arrives on the
/// channel returned.
fn ask(socket: &Path, mountpoint: &Path, request: &str) -> mpsc::Receiver<std::io::Result<String>> {
    let (tx, rx) = mpsc::channel();
    let (socket, mountpoint, request) = (
        socket.to_path_buf(),
        mountpoint.to_path_buf(),
        request.to_string(),
    );
    std::thread::spawn(move || {
        let _ = tx.send(control_request_at(&socket, &mountpoint, &request));
    });
    rx
}

/// A drain watched from the client: `status` over the mount's control
/// socket every [`DRAIN_SAMPLE_EVERY`], shown as the bytes flushed since
/// the watch began of those buffered then (more if more were buffered
/// since). Flushed bytes, not buffered ones, measure it: a region's bytes
/// leave the buffered count only when the whole region is flushed.
struct DrainWatch {
    socket: PathBuf,
    mountpoint: PathBuf,
    mode: ProgressMode,
    label: String,
    /// Shown from the start (`sluice drain`), else once the mount drains.
    progress: Option<Progress>,
    /// The mount's flushed-bytes counter when the watch began.
    flushed_at_start: Option<u64>,
    /// Bytes to drain: buffered at the start, or more if more came.
    total_bytes: u64,
    /// Bytes flushed since the start.
    done_bytes: u64,
    started: Instant,
    sampled: Instant,
    /// A stop was asked: the last line says what stays buffered.
    stopping: bool,
}

impl DrainWatch {
    fn new(
        socket: &Path,
        mountpoint: &Path,
        mode: ProgressMode,
        label: String,
        show_now: bool,
    ) -> DrainWatch {
        let mut watch = DrainWatch {
            socket: socket.to_path_buf(),
            mountpoint: mountpoint.to_path_buf(),
            mode,
            label,
            progress: None,
            flushed_at_start: None,
            total_bytes: 0,
            done_bytes: 0,
            started: Instant::now(),
            sampled: Instant::now(),
            stopping: false,
        };
        let draining = watch.take_sample();
        if show_now || draining {
            watch.show();
        }
        watch
    }

    /// One `status`: records the buffered bytes; whether the mount drains.
    /// A mount that does not answer (it is closing) keeps the last numbers.
    fn take_sample(&mut self) -> bool {
        self.sampled = Instant::now();
        let Some(status) = control_request_at(&self.socket, &self.mountpoint, "status")
            .ok()
            .and_then(|a| serde_json::from_str::<Status>(&a).ok())
        else {
            return false;
        };
        let flushed_at_start = *self.flushed_at_start.get_or_insert(status.flushed_bytes);
        self.done_bytes = status.flushed_bytes.saturating_sub(flushed_at_start);
        // Buffered bytes still count those of regions being flushed: at
        // least this much is (or was) to drain.
        self.total_bytes = self
            .total_bytes
            .max(status.buffered_bytes)
            .max(self.done_bytes);
        status.draining
    }

    /// Bytes not flushed yet.
    fn left_bytes(&self) -> u64 {
        self.total_bytes - self.done_bytes
    }

    fn show(&mut self) {
        let left = self.left_bytes();
        let progress = self.progress.get_or_insert_with(|| {
            Progress::new(
                self.mode,
                &self.label,
                Unit::Bytes,
                self.total_bytes,
                self.started,
            )
        });
        progress.update(
            self.done_bytes,
            self.total_bytes,
            &format!("{} left", HumanBytes(left)),
        );
    }

    /// A new sample and a new frame, when one is due.
    fn sample(&mut self) {
        if self.sampled.elapsed() < DRAIN_SAMPLE_EVERY {
            return;
        }
        if self.take_sample() || self.progress.is_some() {
            self.show();
        }
    }

    /// A message above the progress.
    fn say(&self, message: &str) {
        match &self.progress {
            Some(p) => p.say(message),
            None => eprintln!("{message}"),
        }
    }

    /// The last frame: all drained, or what stays buffered.
    fn finish(&mut self, drained: bool) {
        let Some(progress) = &self.progress else {
            return;
        };
        if drained {
            progress.finish(self.total_bytes, self.total_bytes, "drained");
        } else {
            let note = match self.stopping {
                true => "drain stopped",
                false => "not drained",
            };
            progress.finish(
                self.done_bytes,
                self.total_bytes,
                &format!(
                    "{note}: {} not flushed stay in the log",
                    HumanBytes(self.left_bytes())
                ),
            );
        }
    }
}

/// `sluice drain`: asks the mount to drain and shows the buffered bytes
/// left on stderr until it answers.
pub fn drain(mountpoint: &Path, mode: ProgressMode) -> Result<(), String> {
    let socket = control_socket_of(mountpoint).map_err(|e| e.to_string())?;
    let label = format!("draining {}", mountpoint.display());
    let mut watch = DrainWatch::new(&socket, mountpoint, mode, label, true);
    let answer = ask(&socket, mountpoint, "drain");
    let outcome = loop {
        match answer.recv_timeout(Duration::from_millis(100)) {
            Ok(outcome) => break outcome,
            Err(mpsc::RecvTimeoutError::Timeout) => watch.sample(),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(format!("drain {}: no answer", mountpoint.display()))
            }
        }
    };
    watch.finish(outcome.is_ok());
    outcome.map_err(|e| e.to_string())?;
    println!("drained: the capacity tier holds every byte");
    Ok(())
}
