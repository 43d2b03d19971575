//! The metrics endpoint: a minimal HTTP/1.x server of one resource,
//! `GET /metrics` (and `HEAD`), on a listener the mount bound to the
//! configured address only.
//!
//! Answers: 200 with [`super::CONTENT_TYPE`]; 404 for another path; 405
//! for another method on `/metrics`; 400 for a head that is not HTTP/1.x;
//! 431 for a head over [`Limits::head_max_bytes`]; 503 when
//! [`Limits::connections_max`] clients are being served already, or once
//! the mount is gone (then the server stops). One connection, one
//! request: `Connection: close`.
//!
//! Limits (a slow or hostile client must not hold the endpoint or the
//! mount): each connection has its own thread, at most
//! `connections_max` at once; the whole head must arrive within
//! `head_deadline` (a total, not per read, so a client trickling a byte
//! at a time is cut off like a silent one); the whole answer must be
//! taken within `write_deadline`, in total too. The mount's state is held
//! only while the body is rendered, never while a client is waited for.

use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The endpoint's bounds.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Longest request head (request line and headers).
    pub head_max_bytes: usize,
    /// Time a client has to send its whole head.
    pub head_deadline: Duration,
    /// Time a client has to take the whole answer.
    pub write_deadline: Duration,
    /// Clients served at once; more are answered 503.
    pub connections_max: usize,
}

impl Limits {
    /// The mount's: 8 KiB heads, 5 s to send one, 5 s to take the
    /// answer, 8 clients at once (a Prometheus or two and a few curls).
    pub const DEFAULT: Limits = Limits {
        head_max_bytes: 8192,
        head_deadline: Duration::from_secs(5),
        write_deadline: Duration::from_secs(5),
        connections_max: 8,
    };
}

/// The body of `/metrics` now, or `None` once the mount is gone; `Err`
/// when encoding failed (answered 500).
pub type Render = dyn Fn() -> Option<Result<String, std::fmt::Error>> + Send + Sync;

/// Serve `listener` on a thread of its own until `render` says the mount
/// is gone (noticed at the next connection after that).
pub fn spawn(listener: TcpListener, limits: Limits, render: Arc<Render>) -> io::Result<()> {
    let active = Arc::new(AtomicUsize::new(0));
    let gone = Arc::new(AtomicBool::new(false));
    std::thread::Builder::new()
        .name("sluice-metrics".into())
        .spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                if gone.load(Ordering::Acquire) {
                    return;
                }
                // Only this thread adds, so the count cannot pass the limit.
                if active.load(Ordering::Acquire) >= limits.connections_max {
                    // The answer fits an empty socket buffer: no wait.
                    let brief = Limits {
                        write_deadline: Duration::from_millis(100),
                        ..limits
                    };
                    let _ = respond(
                        &stream,
                        brief,
                        "503 Service Unavailable",
                        TEXT,
                        b"busy\n",
                        false,
                    );
                    continue;
                }
                active.fetch_add(1, Ordering::AcqRel);
                let (slots, gone, render) =
                    (Arc::clone(&active), Arc::clone(&gone), Arc::clone(&render));
                let spawned = std::thread::Builder::new()
                    .name("sluice-metrics-req".into())
                    .spawn(move || {
                        if serve(&stream, limits, &*render) {
                            gone.store(true, Ordering::Release);
                        }
                        slots.fetch_sub(1, Ordering::AcqRel);
                    });
                if let Err(e) = spawned {
                    // The connection went with the closure: free its slot.
                    active.fetch_sub(1, Ordering::AcqRel);
                    tracing::warn!("metrics endpoint: cannot start a thread: {e}");
                }
            }
        })?;
    Ok(())
}

const TEXT: &str = "text/plain; charset=utf-8";

/// Why a head was not read.
enum HeadError {
    /// Longer than the limit.
    TooLarge,
    /// The client closed, failed or ran out of time: nothing to answer.
    Gone,
}

/// The request head: up to the blank line, or to the end of a request
/// line the client ended its side after.
fn read_head(mut stream: &TcpStream, limits: Limits) -> Result<Vec<u8>, HeadError> {
    let deadline = Instant::now() + limits.head_deadline;
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        if let Some(end) = end_of_head(&head) {
            head.truncate(end);
            return Ok(head);
        }
        if head.len() > limits.head_max_bytes {
            return Err(HeadError::TooLarge);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            return Err(HeadError::Gone);
        }
        match stream.read(&mut buf) {
            Ok(0) if head.contains(&b'\n') => return Ok(head),
            Ok(0) => return Err(HeadError::Gone),
            Ok(n) => head.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return Err(HeadError::Gone),
        }
    }
}

fn end_of_head(head: &[u8]) -> Option<usize> {
    let crlf = head.windows(4).position(|w| w == b"\r\n\r\n");
    let lf = head.windows(2).position(|w| w == b"\n\n");
    match (crlf, lf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Serve one connection. True when the mount is gone.
fn serve(stream: &TcpStream, limits: Limits, render: &Render) -> bool {
    let head = match read_head(stream, limits) {
        Ok(head) => head,
        Err(HeadError::TooLarge) => {
            let _ = respond(
                stream,
                limits,
                "431 Request Header Fields Too Large",
                TEXT,
                b"request head too large\n",
                false,
            );
            return false;
        }
        Err(HeadError::Gone) => return false,
    };
    let line = head.split(|b| *b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut words = line.split_whitespace();
    let (method, target, version) = (words.next(), words.next(), words.next());
    let path = target.map(|t| t.split('?').next().unwrap_or(t));
    let http1 = version.is_some_and(|v| v.starts_with("HTTP/1.")) && words.next().is_none();
    match (method, path) {
        _ if !http1 || !path.is_some_and(|p| p.starts_with('/')) => {
            let _ = respond(
                stream,
                limits,
                "400 Bad Request",
                TEXT,
                b"bad request\n",
                false,
            );
        }
        (Some(m @ ("GET" | "HEAD")), Some("/metrics")) => match render() {
            Some(Ok(body)) => {
                let _ = respond(
                    stream,
                    limits,
                    "200 OK",
                    super::CONTENT_TYPE,
                    body.as_bytes(),
                    m == "HEAD",
                );
            }
            Some(Err(e)) => {
                tracing::warn!("metrics endpoint: encoding failed: {e}");
                let _ = respond(
                    stream,
                    limits,
                    "500 Internal Server Error",
                    TEXT,
                    b"encoding failed\n",
                    false,
                );
            }
            None => {
                let _ = respond(
                    stream,
                    limits,
                    "503 Service Unavailable",
                    TEXT,
                    b"the mount is gone\n",
                    false,
                );
                return true;
            }
        },
        (_, Some("/metrics")) => {
            let _ = respond(
                stream,
                limits,
                "405 Method Not Allowed",
                "text/plain; charset=utf-8\r\nAllow: GET, HEAD",
                b"use GET\n",
                false,
            );
        }
        _ => {
            let _ = respond(
                stream,
                limits,
                "404 Not Found",
                TEXT,
                b"not found: try /metrics\n",
                false,
            );
        }
    }
    false
}

/// Write one answer within `limits.write_deadline` in total (a client
/// reading a byte at a time is cut off like one that reads nothing);
/// `content_type` may carry further header lines.
fn respond(
    stream: &TcpStream,
    limits: Limits,
    status: &str,
    content_type: &str,
    body: &[u8],
    head_only: bool,
) -> io::Result<()> {
    let mut answer = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if !head_only {
        answer.extend_from_slice(body);
    }
    let deadline = Instant::now() + limits.write_deadline;
    let mut stream = stream;
    for chunk in answer.chunks(64 << 10) {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        stream.set_write_timeout(Some(left))?;
        stream.write_all(chunk)?;
    }
    stream.flush()
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::sync::atomic::AtomicBool;

    use super::*;

    /// An endpoint on loopback whose body is `metrics 1`, until `gone`.
    fn endpoint(limits: Limits) -> (SocketAddr, Arc<AtomicBool>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let gone = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&gone);
        let render =
            move || (!flag.load(Ordering::Relaxed)).then(|| Ok("metrics 1\n# EOF\n".to_string()));
        spawn(listener, limits, Arc::new(render)).unwrap();
        (addr, gone)
    }

    fn quick() -> Limits {
        Limits {
            head_deadline: Duration::from_secs(1),
            write_deadline: Duration::from_secs(1),
            connections_max: 2,
            ..Limits::DEFAULT
        }
    }

    /// Send `request`, read the whole answer (bounded by a timeout).
    fn ask(addr: SocketAddr, request: &[u8]) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(request).unwrap();
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    }

    #[test]
    fn get_metrics_answers_the_text_with_the_openmetrics_type() {
        let (addr, _) = endpoint(Limits::DEFAULT);
        let answer = ask(
            addr,
            b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n",
        );
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
        assert!(answer.contains(&format!(
            "\r\nContent-Type: {}\r\n",
            super::super::CONTENT_TYPE
        )));
        assert!(answer.contains("\r\nContent-Length: 16\r\n"), "{answer}");
        assert!(answer.ends_with("\r\n\r\nmetrics 1\n# EOF\n"), "{answer}");
        // A query string, HTTP/1.0 and bare newlines are fine too.
        assert!(ask(addr, b"GET /metrics?x=1 HTTP/1.0\n\n").ends_with("metrics 1\n# EOF\n"));
        let head = ask(addr, b"HEAD /metrics HTTP/1.1\r\n\r\n");
        assert!(
            head.starts_with("HTTP/1.1 200") && head.ends_with("\r\n\r\n"),
            "{head}"
        );
        assert!(head.contains("Content-Length: 16"), "{head}");
    }

    #[test]
    fn other_paths_methods_and_garbage_are_refused() {
        let (addr, _) = endpoint(Limits::DEFAULT);
        for (request, status) in [
            (&b"GET / HTTP/1.1\r\n\r\n"[..], "404"),
            (b"GET /metrics/../etc HTTP/1.1\r\n\r\n", "404"),
            (b"GET /metricsx HTTP/1.1\r\n\r\n", "404"),
            (
                b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
                "405",
            ),
            (b"\x00\xff garbage\r\n\r\n", "400"),
            (b"GET /metrics\r\n\r\n", "400"),
            (b"GET metrics HTTP/1.1\r\n\r\n", "400"),
            (b"GET /metrics HTTP/2.0\r\n\r\n", "400"),
        ] {
            let answer = ask(addr, request);
            assert!(
                answer.starts_with(&format!("HTTP/1.1 {status} ")),
                "{:?}: {answer}",
                String::from_utf8_lossy(request)
            );
            assert!(!answer.contains("metrics 1"), "{answer}");
        }
        assert!(ask(addr, b"PUT /metrics HTTP/1.1\r\n\r\n").contains("\r\nAllow: GET, HEAD\r\n"));
    }

    #[test]
    fn a_head_over_the_limit_is_refused_and_the_next_client_served() {
        let (addr, _) = endpoint(Limits::DEFAULT);
        let mut huge = b"GET /metrics HTTP/1.1\r\n".to_vec();
        while huge.len() < 3 * Limits::DEFAULT.head_max_bytes {
            huge.extend_from_slice(b"X-Padding: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n");
        }
        // The server may close while we still send: read what came back.
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let _ = s.write_all(&huge);
        let mut answer = Vec::new();
        let _ = s.read_to_end(&mut answer);
        let answer = String::from_utf8_lossy(&answer);
        assert!(
            answer.is_empty() || answer.starts_with("HTTP/1.1 431"),
            "{answer}"
        );
        assert!(ask(addr, b"GET /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 200"));
    }

    /// The old endpoint served one client at a time with a timeout per
    /// read: a client sending a byte every few seconds held it for as long
    /// as it liked, and every scrape waited behind it.
    #[test]
    fn slow_clients_are_cut_off_and_do_not_hold_up_others() {
        let limits = quick();
        let (addr, _) = endpoint(limits);
        let started = Instant::now();
        // A silent client and a trickling one (a byte every 100 ms, well
        // inside any per-read timeout).
        let silent = TcpStream::connect(addr).unwrap();
        let mut trickling = TcpStream::connect(addr).unwrap();
        let trickle = std::thread::spawn(move || {
            for b in b"GET /metrics HTTP/1.1\r\nX-Slow: "
                .iter()
                .cycle()
                .take(100)
            {
                if trickling.write_all(&[*b]).is_err() {
                    return Instant::now();
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            Instant::now()
        });
        // Both slots are taken (the server accepts in order): a third
        // client is told at once, not kept waiting.
        let asked = Instant::now();
        let busy = ask(addr, b"GET /metrics HTTP/1.1\r\n\r\n");
        assert!(busy.starts_with("HTTP/1.1 503"), "{busy}");
        assert!(
            asked.elapsed() < limits.head_deadline,
            "{:?}",
            asked.elapsed()
        );
        // The silent one is closed at the deadline without an answer.
        let mut silent = silent;
        silent
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut buf = Vec::new();
        let _ = silent.read_to_end(&mut buf);
        assert!(buf.is_empty(), "{}", String::from_utf8_lossy(&buf));
        let closed = started.elapsed();
        assert!(
            closed >= limits.head_deadline && closed < limits.head_deadline * 4,
            "{closed:?}"
        );
        // The trickling one is cut off by the total deadline too (its
        // writes fail soon after), long before its 10 s of bytes.
        let cut = trickle.join().unwrap().duration_since(started);
        assert!(cut < Duration::from_secs(5), "{cut:?}");
        // Then the slots are free again.
        std::thread::sleep(Duration::from_millis(100));
        assert!(ask(addr, b"GET /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 200"));
    }

    #[test]
    fn a_client_that_does_not_read_its_answer_is_dropped() {
        let limits = quick();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        // A body far larger than the socket buffers.
        let big = "x".repeat(64 << 20);
        spawn(listener, limits, Arc::new(move || Some(Ok(big.clone())))).unwrap();
        let mut hog = TcpStream::connect(addr).unwrap();
        hog.write_all(b"GET /metrics HTTP/1.1\r\n\r\n").unwrap();
        let mut other = TcpStream::connect(addr).unwrap();
        other.write_all(b"GET /nothing HTTP/1.1\r\n\r\n").unwrap();
        let mut answer = String::new();
        other.read_to_string(&mut answer).unwrap();
        assert!(answer.starts_with("HTTP/1.1 404"), "{answer}");
        // The hog's slot is given back once the write times out: two
        // clients at once are served again (with the hog still counted,
        // the second would be answered 503).
        std::thread::sleep(limits.write_deadline * 3);
        let mut third = TcpStream::connect(addr).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let mut fourth = TcpStream::connect(addr).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        for s in [&mut third, &mut fourth] {
            s.write_all(b"GET /nothing HTTP/1.1\r\n\r\n").unwrap();
            let mut answer = String::new();
            s.read_to_string(&mut answer).unwrap();
            assert!(answer.starts_with("HTTP/1.1 404"), "{answer}");
        }
        drop(hog);
    }

    #[test]
    fn once_the_mount_is_gone_the_endpoint_says_so_and_stops() {
        let (addr, gone) = endpoint(Limits::DEFAULT);
        gone.store(true, Ordering::Relaxed);
        assert!(ask(addr, b"GET /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 503"));
        std::thread::sleep(Duration::from_millis(100));
        // The next connection is accepted by the kernel's backlog, then
        // closed unanswered as the server thread ends.
        assert_eq!(ask(addr, b"GET /metrics HTTP/1.1\r\n\r\n"), "");
    }
}
