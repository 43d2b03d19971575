//! A minimal, blocking RESP2 client: one TCP connection, plain or TLS
//! (rustls), one command at a time.
//!
//! The catalogue needs ten commands (`AUTH`, `PING`, `SELECT`, `HSET`,
//! `HGET`, `HDEL`, `HGETALL`, `HKEYS`, `HINCRBY`, `EVAL`), all sent as
//! arrays of bulk strings; replies are parsed into [`Reply`]. Why not the
//! `redis` crate: `docs/catalog.md`.
//!
//! Limits, so a broken or hostile server cannot make the client allocate
//! without bound: a status/error/integer line is at most [`LINE_BYTES_MAX`],
//! a bulk string at most [`BULK_BYTES_MAX`], an array at most
//! [`ARRAY_LEN_MAX`] elements and [`DEPTH_MAX`] levels deep. Anything that is
//! not RESP2 is a [`CallError::Protocol`] and the connection must be dropped
//! (its position in the stream is unknown); so must one that returned
//! [`CallError::Io`].

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use rustls::{ClientConnection, StreamOwned};

use crate::redis_security::TlsClient;

/// Longest accepted status, error or integer line, in bytes.
pub(crate) const LINE_BYTES_MAX: u64 = 64 * 1024;
/// Longest accepted bulk string, in bytes.
pub(crate) const BULK_BYTES_MAX: usize = 64 * 1024 * 1024;
/// Most elements accepted in one array.
pub(crate) const ARRAY_LEN_MAX: usize = 16 * 1024 * 1024;
/// Deepest accepted nesting of arrays.
pub(crate) const DEPTH_MAX: usize = 4;

/// One RESP2 reply.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Reply {
    /// `+OK`
    Status(String),
    /// `-ERR ...`: the server refused the command.
    Error(String),
    /// `:42`
    Int(i64),
    /// `$n` bytes, or `$-1` (nil).
    Bulk(Option<Vec<u8>>),
    /// `*n` replies, or `*-1` (nil).
    Array(Option<Vec<Reply>>),
}

/// Why no connection was made.
#[derive(Debug)]
pub(crate) enum ConnectError {
    /// The address did not resolve, or TCP or the TLS handshake failed on
    /// the network (refused, reset, closed, timed out).
    Io(io::Error),
    /// The TLS handshake failed on its own terms: an untrusted or
    /// mismatched certificate, a server that speaks no TLS, an alert.
    Tls(String),
}

/// Why a command got no reply.
#[derive(Debug)]
pub(crate) enum CallError {
    /// The socket failed (dropped connection, timeout).
    Io(io::Error),
    /// The bytes received are not a RESP2 reply.
    Protocol(String),
}

impl From<io::Error> for CallError {
    fn from(e: io::Error) -> CallError {
        CallError::Io(e)
    }
}

/// The byte stream under a connection.
enum Stream {
    Plain(TcpStream),
    Tls(Box<StreamOwned<ClientConnection, TcpStream>>),
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
        }
    }
}

/// A connection to one Redis server.
pub(crate) struct Connection {
    stream: BufReader<Stream>,
}

impl Connection {
    /// Connects to `host:port`, trying each resolved address with
    /// `connect_timeout`; reads and writes then time out after `io_timeout`.
    /// With `tls`, completes the TLS handshake before returning, so a bad
    /// certificate is a [`ConnectError::Tls`] here, not a failed command.
    pub(crate) fn connect(
        host: &str,
        port: u16,
        connect_timeout: Duration,
        io_timeout: Duration,
        tls: Option<&TlsClient>,
    ) -> Result<Connection, ConnectError> {
        let tcp =
            Self::connect_tcp(host, port, connect_timeout, io_timeout).map_err(ConnectError::Io)?;
        let stream = match tls {
            None => Stream::Plain(tcp),
            Some(tls) => Stream::Tls(Box::new(handshake(tls, tcp, io_timeout)?)),
        };
        Ok(Connection {
            stream: BufReader::new(stream),
        })
    }

    fn connect_tcp(
        host: &str,
        port: u16,
        connect_timeout: Duration,
        io_timeout: Duration,
    ) -> io::Result<TcpStream> {
        let mut last = None;
        for addr in (host, port).to_socket_addrs()? {
            match TcpStream::connect_timeout(&addr, connect_timeout) {
                Ok(stream) => {
                    stream.set_read_timeout(Some(io_timeout))?;
                    stream.set_write_timeout(Some(io_timeout))?;
                    stream.set_nodelay(true)?;
                    return Ok(stream);
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| {
            io::Error::new(io::ErrorKind::NotFound, format!("{host} has no address"))
        }))
    }

    /// Sends one command (name first) and reads its reply.
    pub(crate) fn call(&mut self, args: &[&[u8]]) -> Result<Reply, CallError> {
        let stream = self.stream.get_mut();
        stream.write_all(&encode_command(args))?;
        stream.flush()?; // TLS: push out the last record
        read_reply(&mut self.stream, 0)
    }
}

/// Runs the TLS handshake on `tcp` (bounded by its read and write
/// timeouts, `io_timeout`: each step either progresses or fails). A server
/// that does not answer in time is a network error (it may be hung), named
/// so, with the likeliest cause: a plain port, which waits for more bytes.
fn handshake(
    tls: &TlsClient,
    mut tcp: TcpStream,
    io_timeout: Duration,
) -> Result<StreamOwned<ClientConnection, TcpStream>, ConnectError> {
    let mut conn = ClientConnection::new(tls.config.clone(), tls.server_name.clone())
        .map_err(|e| ConnectError::Tls(e.to_string()))?;
    while conn.is_handshaking() {
        if let Err(e) = conn.complete_io(&mut tcp) {
            // rustls reports its own failures as InvalidData wrapping a
            // rustls::Error; everything else is the socket's.
            return Err(
                match e.get_ref().and_then(|e| e.downcast_ref::<rustls::Error>()) {
                    Some(tls) => ConnectError::Tls(tls.to_string()),
                    None if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                    {
                        ConnectError::Io(io::Error::new(
                            io::ErrorKind::TimedOut,
                            format!(
                                "no TLS handshake reply within {} s (is the port a TLS port?)",
                                io_timeout.as_secs()
                            ),
                        ))
                    }
                    None => ConnectError::Io(e),
                },
            );
        }
    }
    Ok(StreamOwned::new(conn, tcp))
}

/// A command as a RESP2 array of bulk strings.
pub(crate) fn encode_command(args: &[&[u8]]) -> Vec<u8> {
    let len: usize = args.iter().map(|a| a.len() + 16).sum();
    let mut out = Vec::with_capacity(len + 16);
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Reads one reply (`depth` levels inside arrays already).
pub(crate) fn read_reply(r: &mut impl BufRead, depth: usize) -> Result<Reply, CallError> {
    let line = read_line(r)?;
    let (kind, rest) = line
        .split_first()
        .ok_or_else(|| CallError::Protocol("empty reply line".into()))?;
    let text = || String::from_utf8_lossy(rest).into_owned();
    match kind {
        b'+' => Ok(Reply::Status(text())),
        b'-' => Ok(Reply::Error(text())),
        b':' => Ok(Reply::Int(parse_int(rest)?)),
        b'$' => {
            let Some(len) = parse_len(rest, BULK_BYTES_MAX, "bulk string")? else {
                return Ok(Reply::Bulk(None));
            };
            let mut body = vec![0; len + 2];
            r.read_exact(&mut body)?;
            if !body.ends_with(b"\r\n") {
                return Err(CallError::Protocol(
                    "bulk string not followed by CRLF".into(),
                ));
            }
            body.truncate(len);
            Ok(Reply::Bulk(Some(body)))
        }
        b'*' => {
            let Some(len) = parse_len(rest, ARRAY_LEN_MAX, "array")? else {
                return Ok(Reply::Array(None));
            };
            if depth >= DEPTH_MAX {
                return Err(CallError::Protocol(format!(
                    "arrays nested deeper than {DEPTH_MAX}"
                )));
            }
            // The length came from the wire: grow as elements arrive.
            let mut items = Vec::with_capacity(len.min(1024));
            for _ in 0..len {
                items.push(read_reply(r, depth + 1)?);
            }
            Ok(Reply::Array(Some(items)))
        }
        other => Err(CallError::Protocol(format!(
            "unknown reply type byte 0x{other:02x}"
        ))),
    }
}

/// Reads a CRLF-terminated line and returns it without the CRLF.
fn read_line(r: &mut impl BufRead) -> Result<Vec<u8>, CallError> {
    let mut line = Vec::new();
    r.take(LINE_BYTES_MAX + 2).read_until(b'\n', &mut line)?;
    if line.is_empty() {
        return Err(CallError::Io(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed by the server",
        )));
    }
    if !line.ends_with(b"\r\n") {
        return Err(if line.len() as u64 > LINE_BYTES_MAX {
            CallError::Protocol(format!("reply line longer than {LINE_BYTES_MAX} bytes"))
        } else {
            CallError::Io(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed in the middle of a reply",
            ))
        });
    }
    line.truncate(line.len() - 2);
    Ok(line)
}

fn parse_int(digits: &[u8]) -> Result<i64, CallError> {
    std::str::from_utf8(digits)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| {
            CallError::Protocol(format!("bad integer {:?}", String::from_utf8_lossy(digits)))
        })
}

/// A length of a bulk string or array: `None` for -1 (nil), an error if
/// negative otherwise or above `max`.
fn parse_len(digits: &[u8], max: usize, what: &str) -> Result<Option<usize>, CallError> {
    match parse_int(digits)? {
        -1 => Ok(None),
        n if n < 0 => Err(CallError::Protocol(format!("negative {what} length {n}"))),
        n => match usize::try_from(n) {
            Ok(n) if n <= max => Ok(Some(n)),
            _ => Err(CallError::Protocol(format!(
                "{what} of {n} exceeds the limit of {max}"
            ))),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(bytes: &[u8]) -> Result<Reply, CallError> {
        read_reply(&mut io::Cursor::new(bytes), 0)
    }

    #[test]
    fn encodes_arrays_of_bulk_strings() {
        assert_eq!(
            encode_command(&[b"HGET", b"k", b""]),
            b"*3\r\n$4\r\nHGET\r\n$1\r\nk\r\n$0\r\n\r\n"
        );
    }

    #[test]
    fn parses_every_reply_type() {
        assert_eq!(parse(b"+OK\r\n").unwrap(), Reply::Status("OK".into()));
        assert_eq!(
            parse(b"-ERR no\r\n").unwrap(),
            Reply::Error("ERR no".into())
        );
        assert_eq!(parse(b":-7\r\n").unwrap(), Reply::Int(-7));
        assert_eq!(parse(b"$-1\r\n").unwrap(), Reply::Bulk(None));
        assert_eq!(
            parse(b"$4\r\na\r\nb\r\n").unwrap(),
            Reply::Bulk(Some(b"a\r\nb".to_vec()))
        );
        assert_eq!(
            parse(b"*2\r\n$1\r\nx\r\n:1\r\n").unwrap(),
            Reply::Array(Some(vec![Reply::Bulk(Some(b"x".to_vec())), Reply::Int(1)]))
        );
        assert_eq!(parse(b"*-1\r\n").unwrap(), Reply::Array(None));
    }

    #[test]
    fn malformed_replies_are_errors_not_panics() {
        let cases: &[&[u8]] = &[
            b"",
            b"+OK",
            b"?\r\n",
            b"\r\n",
            b":x\r\n",
            b"$-2\r\n",
            b"$3\r\nab",
            b"$2\r\nabcd\r\n",
            b"$99999999999999999999\r\n",
            b"$100000000\r\n",
            b"*99999999999\r\n",
            b"*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n",
            b"*3\r\n:1\r\n",
        ];
        for bytes in cases {
            assert!(
                parse(bytes).is_err(),
                "{:?}",
                String::from_utf8_lossy(bytes)
            );
        }
        let long = [b"+".as_slice(), &vec![b'a'; 70_000], b"\r\n"].concat();
        assert!(matches!(parse(&long), Err(CallError::Protocol(_))));
    }
}
