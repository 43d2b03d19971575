//! The control socket's server side: where a mount's socket is, who may
//! use it, and the server that answers `status`, `drain`, `sync`,
//! `unmount` and `ckpt`. The client side (the CLI, `sluice top`) is
//! `sluice_status::client`.

use super::*;

/// Longest control request line.
pub(super) const REQUEST_MAX: u64 = 8192;

/// The control socket of a mount whose fast tier is `fast`.
pub fn control_socket_path(fast: &Path) -> PathBuf {
    fast.join("sluice.sock")
}

/// Whether the caller on `stream` may use the control socket: root, or the
/// user who started the mount. `Err` is the refusal.
pub(super) fn authorize(shared: &Shared, stream: &UnixStream) -> Result<(), String> {
    let peer = rustix::net::sockopt::socket_peercred(stream)
        .map_err(|e| format!("cannot tell who is calling (SO_PEERCRED: {e})"))?;
    let uid = peer.uid.as_raw();
    if uid == 0 || uid == shared.owner {
        return Ok(());
    }
    Err(format!(
        "permission denied: uid {uid} may not control the mount at {}; only root and uid {} \
         (who mounted it) may",
        shared.mountpoint, shared.owner
    ))
}

/// One control request: a line `status`, `drain`, `sync PATH`, `seal
/// PATH`, `state PATH` (paths relative to the mount's root), `unmount
/// [drain|keep] [lazy]` or `ckpt ...`; the answer is JSON (status), `ok`,
/// `ok BYTES` (sync: the buffered bytes written), `ok started`, `ok asked
/// NODE` or `ok not-held STATE` (seal: see [`seal_request`]), `ok STATE`
/// (state: the value of `user.sluice.state`) or `error: ...`, then the
/// connection closes. An unmount is
/// answered by the main thread when it is done (`ok drained`, `ok kept`,
/// `ok detached N drained|kept`) or refused (busy); one asked while an
/// unmount is under way gets that unmount's answer, and `unmount keep`
/// then stops its drain. Callers other than
/// root and the mount's user are refused whatever they ask.
pub(super) fn serve_control(shared: &Arc<Shared>, stream: UnixStream) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let mut line = String::new();
    let mut reader = BufReader::new((&stream).take(REQUEST_MAX));
    if reader.read_line(&mut line).is_err() {
        return;
    }
    let request = line.trim();
    tracing::debug!(
        request = %request.chars().take(80).collect::<String>(),
        "control request"
    );
    let answer = if let Err(refusal) = authorize(shared, &stream) {
        tracing::warn!(mountpoint = %shared.mountpoint, "refused a control request: {refusal}");
        format!("error: {refusal}")
    } else if shared.closing.load(Ordering::Relaxed) {
        format!("error: {} is being unmounted", shared.mountpoint)
    } else if request == "unmount" || request.starts_with("unmount ") {
        let mut end = End::Default;
        let mut lazy = false;
        for word in request.split_whitespace().skip(1) {
            match word {
                "drain" => end = End::Drain,
                "keep" => end = End::Keep,
                "lazy" => lazy = true,
                other => {
                    let mut stream = stream;
                    let _ = writeln!(
                        stream,
                        "error: unknown unmount option {:?}; expected drain, keep or lazy",
                        other.chars().take(64).collect::<String>()
                    );
                    return;
                }
            }
        }
        let mut pending = lock(&shared.request);
        if pending.is_some() || shared.stop.load(Ordering::Relaxed) {
            // One is under way: this one waits for its outcome, and a
            // `keep` stops its drain (a second Ctrl-C at `sluice unmount`).
            if end == End::Keep {
                shared.keep_now.store(true, Ordering::Relaxed);
            }
            lock(&shared.waiting).push(stream);
            return;
        }
        // The main thread answers once it is done (or refuses).
        *pending = Some(UnmountRequest {
            end,
            lazy,
            reply: stream,
        });
        shared.stop.store(true, Ordering::Relaxed);
        return;
    } else {
        match request {
            "status" => serde_json::to_string(&shared.status())
                .unwrap_or_else(|e| format!("error: {e}")),
            "drain" => match shared.drain() {
                Ok(true) => "ok".to_string(),
                Ok(false) => format!(
                    "error: drain stopped: {} is being unmounted without draining",
                    shared.mountpoint
                ),
                Err(e) => {
                    tracing::warn!(mountpoint = %shared.mountpoint, "drain failed: {e}");
                    format!("error: {e}")
                }
            },
            l if l.starts_with("sync ") => match sluice_env::RelPath::new(&l[5..]) {
                Ok(path) => match shared.engine.sync_path(&path) {
                    Ok(bytes) => format!("ok {bytes}"),
                    Err(e) => format!("error: {e}"),
                },
                Err(e) => format!("error: sync: {e}"),
            },
            l if l.starts_with("seal ") => seal_request(shared, &l[5..]),
            l if l.starts_with("state ") => match sluice_env::RelPath::new(&l[6..]) {
                Ok(path) => match shared.engine.held_state(&path) {
                    Ok(Some(state)) => format!("ok {state}"),
                    Ok(None) => format!("error: {path}: not a regular file: it has no state"),
                    Err(e) => format!("error: {e}"),
                },
                Err(e) => format!("error: state: {e}"),
            },
            l if l.starts_with("ckpt ") => shared.ckpt_request(&l[5..]),
            other => format!(
                "error: unknown request {:?}; expected status, drain, sync PATH, seal PATH, state PATH, unmount [drain|keep] [lazy] or ckpt ...",
                other.chars().take(64).collect::<String>()
            ),
        }
    };
    let mut stream = stream;
    let _ = writeln!(stream, "{answer}");
}

/// `seal PATH` (on-demand, `sluice seal`): start the file's write-back
/// without waiting for it. `ok started` (this node holds the file), `ok
/// asked NODE` (NODE holds it and was asked to write it back) or `ok
/// not-held STATE` (no node holds it; STATE is `sealed` or `clean`).
fn seal_request(shared: &Shared, path: &str) -> String {
    let path = match sluice_env::RelPath::new(path) {
        Ok(path) => path,
        Err(e) => return format!("error: seal: {e}"),
    };
    match shared.engine.seal(&path) {
        Ok(sluice_engine::Sealing::Started) => "ok started".to_string(),
        Ok(sluice_engine::Sealing::Asked { holder }) => format!("ok asked {holder}"),
        Ok(sluice_engine::Sealing::NotHeld) => match shared.engine.held_state(&path) {
            Ok(Some(state)) => format!("ok not-held {state}"),
            Ok(None) => "ok not-held".to_string(),
            Err(e) => format!("error: {e}"),
        },
        Err(e) => format!("error: {e}"),
    }
}
