//! TLS for `sluice xfer`: configuration, key generation and a connection
//! that one thread can read while others write.
//!
//! Every connection is TLS 1.2/1.3 (rustls with the ring provider). The
//! sink presents a certificate; the source trusts exactly the certificates
//! in its `--ca` file (for a `keygen` pair, the sink's own self-signed
//! certificate). Peers authenticate by a shared token in `Hello`, by a
//! client certificate the sink's `--client-ca` file vouches for (mutual
//! TLS), or both.
//!
//! [`Channel`] splits one TLS session between a reader and any number of
//! writers: the rustls state machine sits under a mutex and socket I/O
//! happens outside it. Writers serialise on the socket's write half
//! (`tx`) *before* encrypting, so records reach the socket in the order
//! their sequence numbers were assigned; lock order is always `tx` then
//! `conn`. The reader reads ciphertext without holding a lock, then feeds
//! it to the state machine; if that leaves something to send (a key
//! update, an alert), it takes `tx` then `conn` like a writer.

use std::fs;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::path::Path;
use std::sync::{Arc, Mutex};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, Connection, RootCertStore, ServerConfig};

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn invalid(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, what)
}

/// Read every certificate of a PEM file.
pub fn load_certs(path: &Path) -> io::Result<Vec<CertificateDer<'static>>> {
    let certs: Vec<_> = CertificateDer::pem_file_iter(path)
        .map_err(|e| invalid(format!("{}: {e}", path.display())))?
        .collect::<Result<_, _>>()
        .map_err(|e| invalid(format!("{}: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(invalid(format!("{}: no certificate in it", path.display())));
    }
    Ok(certs)
}

/// Read the private key of a PEM file.
pub fn load_key(path: &Path) -> io::Result<PrivateKeyDer<'static>> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| invalid(format!("{}: {e}", path.display())))
}

fn roots(path: &Path) -> io::Result<RootCertStore> {
    let mut roots = RootCertStore::empty();
    for cert in load_certs(path)? {
        roots
            .add(cert)
            .map_err(|e| invalid(format!("{}: {e}", path.display())))?;
    }
    Ok(roots)
}

/// The sink's TLS setup: its certificate and key, and optionally the
/// certificates that client certificates must chain to (mutual TLS).
pub fn server_config(
    cert: &Path,
    key: &Path,
    client_ca: Option<&Path>,
) -> io::Result<Arc<ServerConfig>> {
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid(e.to_string()))?;
    let builder = match client_ca {
        Some(ca) => {
            let verifier =
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots(ca)?), provider())
                    .build()
                    .map_err(|e| invalid(format!("{}: {e}", ca.display())))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let config = builder
        .with_single_cert(load_certs(cert)?, load_key(key)?)
        .map_err(|e| invalid(format!("{} / {}: {e}", cert.display(), key.display())))?;
    Ok(Arc::new(config))
}

/// The source's TLS setup: the certificates it trusts, and optionally its
/// own certificate and key for mutual TLS.
pub fn client_config(ca: &Path, identity: Option<(&Path, &Path)>) -> io::Result<Arc<ClientConfig>> {
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid(e.to_string()))?
        .with_root_certificates(roots(ca)?);
    let config = match identity {
        Some((cert, key)) => builder
            .with_client_auth_cert(load_certs(cert)?, load_key(key)?)
            .map_err(|e| invalid(format!("{} / {}: {e}", cert.display(), key.display())))?,
        None => builder.with_no_client_auth(),
    };
    Ok(Arc::new(config))
}

/// The shared token in the file at `path` (`--token-file` of both ends),
/// without the whitespace around it: neither empty nor longer than
/// [`MAX_TOKEN`](crate::wire::MAX_TOKEN) bytes.
pub fn read_token(path: &Path) -> io::Result<Vec<u8>> {
    let t =
        fs::read(path).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    let t = t.trim_ascii().to_vec();
    if t.is_empty() {
        return Err(invalid(format!("{}: empty token", path.display())));
    }
    if t.len() > crate::wire::MAX_TOKEN {
        return Err(invalid(format!(
            "{}: token longer than {} bytes",
            path.display(),
            crate::wire::MAX_TOKEN
        )));
    }
    Ok(t)
}

/// Write a self-signed certificate and key valid for `names` (host names
/// or IP addresses) to `dir/NAME.crt` and `dir/NAME.key`; the key file is
/// created mode 0600. Returns the two paths.
pub fn keygen(
    dir: &Path,
    name: &str,
    names: &[String],
) -> io::Result<(std::path::PathBuf, std::path::PathBuf)> {
    use std::os::unix::fs::OpenOptionsExt;
    if name.is_empty() || name.contains('/') {
        return Err(invalid(format!("bad key name {name:?}")));
    }
    let pair = rcgen::generate_simple_self_signed(names.to_vec())
        .map_err(|e| invalid(format!("cannot make a certificate for {names:?}: {e}")))?;
    fs::create_dir_all(dir)?;
    let cert_path = dir.join(format!("{name}.crt"));
    let key_path = dir.join(format!("{name}.key"));
    let mut key = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&key_path)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", key_path.display())))?;
    key.write_all(pair.key_pair.serialize_pem().as_bytes())?;
    key.sync_all()?;
    fs::write(&cert_path, pair.cert.pem())?;
    Ok((cert_path, key_path))
}

/// The server name to check the sink's certificate against: an IP address
/// as such, else a DNS name.
pub fn server_name(host: &str) -> io::Result<ServerName<'static>> {
    ServerName::try_from(host.to_owned()).map_err(|e| invalid(format!("bad host {host:?}: {e}")))
}

struct Shared {
    conn: Mutex<Connection>,
    tx: Mutex<Tx>,
}

/// The socket's write half and the buffer records are encrypted into
/// ([`ENCRYPT_CHUNK`] of plaintext at a time), kept between sends.
struct Tx {
    stream: TcpStream,
    out: Vec<u8>,
}

/// Plaintext handed to rustls at once: four full TLS records.
const ENCRYPT_CHUNK: usize = 4 * 16_384;

use sluice_env::lock;

impl Shared {
    /// Encrypt `parts` (may be empty: flush pending records) and send.
    fn send(&self, parts: &[&[u8]]) -> io::Result<()> {
        let mut tx = lock(&self.tx);
        let Tx { stream, out } = &mut *tx;
        // rustls allocates every record it encrypts and frees it when
        // `write_tls` takes it; fed a whole 1 MiB block at once, that is
        // 1 MiB of heap grown and trimmed per block (a page fault per
        // 4 KiB). Fed a few records at a time, the same few allocations are
        // reused, and the ciphertext goes to the socket while it is still
        // in the cache. `tx` is held throughout, so records still reach the
        // socket in sequence order.
        for p in parts {
            for chunk in p.chunks(ENCRYPT_CHUNK) {
                out.clear();
                {
                    let mut conn = lock(&self.conn);
                    conn.writer().write_all(chunk)?;
                    while conn.wants_write() {
                        conn.write_tls(out)?;
                    }
                }
                stream.write_all(out)?;
            }
        }
        // Anything else pending (close_notify, a key update).
        out.clear();
        {
            let mut conn = lock(&self.conn);
            while conn.wants_write() {
                conn.write_tls(out)?;
            }
        }
        if out.is_empty() {
            Ok(())
        } else {
            stream.write_all(out)
        }
    }
}

/// The writing side of a [`Channel`]; clone it for several writers.
#[derive(Clone)]
pub struct Writer(Arc<Shared>);

impl Writer {
    /// Send `parts` as one contiguous piece of the plaintext stream.
    pub fn send(&self, parts: &[&[u8]]) -> io::Result<()> {
        self.0.send(parts)
    }

    /// Encode and send one message.
    pub fn message(&self, msg: &crate::wire::Message) -> io::Result<()> {
        let mut out = Vec::new();
        msg.encode(&mut out);
        self.send(&[&out])
    }

    /// Send close_notify and shut the socket's write half.
    pub fn close(&self) {
        lock(&self.0.conn).send_close_notify();
        let _ = self.0.send(&[]);
        let _ = lock(&self.0.tx).stream.shutdown(Shutdown::Write);
    }

    /// Shut the socket down both ways (wakes a blocked reader).
    pub fn abort(&self) {
        let _ = lock(&self.0.tx).stream.shutdown(Shutdown::Both);
    }
}

/// The reading side of a [`Channel`]: plaintext in order.
pub struct Reader {
    shared: Arc<Shared>,
    rx: TcpStream,
    buf: Vec<u8>,
    /// Ciphertext in `buf[start..end]` not yet given to rustls.
    start: usize,
    end: usize,
}

impl Read for Reader {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        loop {
            {
                let mut conn = lock(&self.shared.conn);
                match conn.reader().read(out) {
                    Ok(n) => return Ok(n),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
            }
            let eof = if self.start < self.end {
                false
            } else {
                let n = self.rx.read(&mut self.buf)?;
                (self.start, self.end) = (0, n);
                n == 0
            };
            let pending = {
                let mut conn = lock(&self.shared.conn);
                // rustls takes what fits its buffers; the rest of the
                // ciphertext waits in `buf` until the plaintext is read.
                let mut data = &self.buf[self.start..self.end];
                let before = data.len();
                conn.read_tls(&mut data)?;
                self.start += before - data.len();
                conn.process_new_packets()
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                conn.wants_write()
            };
            if pending {
                self.shared.send(&[])?;
            }
            if eof {
                // The peer closed the socket: rustls knows whether the
                // close was clean (close_notify seen) or a truncation.
                let mut conn = lock(&self.shared.conn);
                // rustls words the truncation with a URL; say it plainly.
                return match conn.reader().read(out) {
                    Err(e)
                        if e.kind() == io::ErrorKind::WouldBlock
                            || e.kind() == io::ErrorKind::UnexpectedEof =>
                    {
                        Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "peer closed the connection without close_notify",
                        ))
                    }
                    other => other,
                };
            }
        }
    }
}

/// One TLS connection after its handshake.
pub struct Channel {
    /// Plaintext reads.
    pub reader: Reader,
    /// Plaintext writes.
    pub writer: Writer,
}

impl Channel {
    fn finish(mut conn: Connection, mut tcp: TcpStream) -> io::Result<Channel> {
        tcp.set_nodelay(true)?;
        while conn.is_handshaking() {
            conn.complete_io(&mut tcp)?;
        }
        // `send` encrypts everything it is given before writing it out, so
        // rustls must not cap its plaintext buffer.
        conn.set_buffer_limit(None);
        let rx = tcp.try_clone()?;
        let shared = Arc::new(Shared {
            conn: Mutex::new(conn),
            tx: Mutex::new(Tx {
                stream: tcp,
                out: Vec::new(),
            }),
        });
        Ok(Channel {
            reader: Reader {
                shared: Arc::clone(&shared),
                rx,
                buf: vec![0; 64 << 10],
                start: 0,
                end: 0,
            },
            writer: Writer(shared),
        })
    }

    /// Connect as a client and complete the handshake.
    pub fn client(
        tcp: TcpStream,
        config: Arc<ClientConfig>,
        name: ServerName<'static>,
    ) -> io::Result<Channel> {
        let conn =
            rustls::ClientConnection::new(config, name).map_err(|e| invalid(e.to_string()))?;
        Channel::finish(conn.into(), tcp)
    }

    /// Accept as a server and complete the handshake.
    pub fn server(tcp: TcpStream, config: Arc<ServerConfig>) -> io::Result<Channel> {
        let conn = rustls::ServerConnection::new(config).map_err(|e| invalid(e.to_string()))?;
        Channel::finish(conn.into(), tcp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_file_is_trimmed_and_refused_empty_too_long_or_missing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        fs::write(&path, "  secret\n").unwrap();
        assert_eq!(read_token(&path).unwrap(), b"secret");
        fs::write(&path, " \n").unwrap();
        let e = read_token(&path).unwrap_err().to_string();
        assert!(e.ends_with("token: empty token"), "{e}");
        fs::write(&path, vec![b'x'; crate::wire::MAX_TOKEN + 1]).unwrap();
        let e = read_token(&path).unwrap_err().to_string();
        assert!(e.contains("token longer than 1024 bytes"), "{e}");
        let e = read_token(&dir.path().join("none")).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(e.to_string().contains("none: "), "{e}");
    }
}
