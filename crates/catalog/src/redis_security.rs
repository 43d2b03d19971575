//! What a Redis connection needs beyond an address: the password it
//! authenticates with (`AUTH [USER] PASSWORD`) and, for `rediss://`, the TLS
//! client configuration that checks the server's certificate.
//!
//! The password lives in a file (`bbos.redis_password_file`), never in the
//! URL, so it shows in no log line, status, `ps` listing or `config show`.
//! The file is read at every new connection (a rotated password is picked
//! up without a restart); it holds one line, at most
//! [`PASSWORD_BYTES_MAX`] bytes, one trailing newline dropped, and must not
//! be readable by every user.
//!
//! TLS is rustls with the ring provider, as `sluice-xfer` uses it. The
//! server's certificate must chain to a certificate in `bbos.redis_tls_ca`
//! (a PEM file), or, without that key, in the system's bundle
//! ([`SYSTEM_CA_BUNDLE`]), and name the URL's host (a DNS name, or an IP
//! address in its subjectAltName). No client certificate is sent: the
//! server must run with `tls-auth-clients no` (or `optional`) and identify
//! clients by ACL user and password.

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore};

use crate::RedisSpec;

/// Longest accepted password, in bytes.
pub const PASSWORD_BYTES_MAX: u64 = 4096;
/// The CA bundle used for `rediss://` without `bbos.redis_tls_ca` (Debian's
/// `ca-certificates`).
pub const SYSTEM_CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// A TLS client configuration and the name the server's certificate must
/// carry.
#[derive(Clone)]
pub(crate) struct TlsClient {
    pub(crate) config: Arc<ClientConfig>,
    pub(crate) server_name: ServerName<'static>,
}

/// Checks that the settings from outside the URL fit it (returns the
/// reason if not).
pub(crate) fn check_combination(spec: &RedisSpec) -> Result<(), String> {
    if spec.user.is_some() && spec.password_file.is_none() {
        return Err(format!(
            "user {:?} in the URL needs a password: name a file holding it with bbos.redis_password_file",
            spec.user.as_deref().unwrap_or_default()
        ));
    }
    if spec.tls_ca.is_some() && !spec.tls {
        return Err(
            "bbos.redis_tls_ca is set but the URL is redis:// (plain TCP): write rediss:// for TLS"
                .into(),
        );
    }
    Ok(())
}

/// The password from `spec.password_file`, if one is named. Errors start
/// with the config key and the file (`bbos.redis_password_file = "/x": …`).
pub(crate) fn password(spec: &RedisSpec) -> Result<Option<Vec<u8>>, String> {
    let Some(path) = &spec.password_file else {
        return Ok(None);
    };
    let bad = |reason: String| format!("bbos.redis_password_file = {path:?}: {reason}");
    let file = std::fs::File::open(path).map_err(|e| bad(format!("cannot read it: {e}")))?;
    let mode = file
        .metadata()
        .map_err(|e| bad(format!("cannot read it: {e}")))?
        .permissions()
        .mode();
    if mode & 0o004 != 0 {
        return Err(bad(format!(
            "readable by every user (mode {:o}): chmod o-r {}",
            mode & 0o7777,
            path.display()
        )));
    }
    let mut bytes = Vec::new();
    file.take(PASSWORD_BYTES_MAX + 3)
        .read_to_end(&mut bytes)
        .map_err(|e| bad(format!("cannot read it: {e}")))?;
    if bytes.last() == Some(&b'\n') {
        bytes.pop();
        if bytes.last() == Some(&b'\r') {
            bytes.pop();
        }
    }
    if bytes.is_empty() {
        return Err(bad("empty (the password is the file's one line)".into()));
    }
    if bytes.len() as u64 > PASSWORD_BYTES_MAX {
        return Err(bad(format!(
            "longer than {PASSWORD_BYTES_MAX} bytes (the password is the file's one line)"
        )));
    }
    if bytes.iter().any(|&b| b == b'\n' || b == b'\r') {
        return Err(bad(
            "more than one line (the password is the file's one line)".into(),
        ));
    }
    Ok(Some(bytes))
}

/// The TLS client of a `rediss://` spec (`None` for `redis://`).
pub(crate) fn tls_client(spec: &RedisSpec) -> Result<Option<TlsClient>, String> {
    if !spec.tls {
        return Ok(None);
    }
    let ca = spec
        .tls_ca
        .as_deref()
        .unwrap_or(Path::new(SYSTEM_CA_BUNDLE));
    let bad = |reason: String| match spec.tls_ca {
        Some(_) => format!("bbos.redis_tls_ca = {ca:?}: {reason}"),
        None => format!("the system's CA bundle {ca:?} (used without bbos.redis_tls_ca): {reason}"),
    };
    let mut roots = RootCertStore::empty();
    let certs =
        CertificateDer::pem_file_iter(ca).map_err(|e| bad(format!("cannot read it: {e}")))?;
    for cert in certs {
        let cert = cert.map_err(|e| bad(e.to_string()))?;
        roots
            .add(cert)
            .map_err(|e| bad(format!("bad certificate: {e}")))?;
    }
    if roots.is_empty() {
        return Err(bad("holds no PEM certificate".into()));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let server_name = ServerName::try_from(spec.host.clone()).map_err(|e| {
        format!(
            "host {:?} cannot be checked against a certificate: {e}",
            spec.host
        )
    })?;
    Ok(Some(TlsClient {
        config: Arc::new(config),
        server_name,
    }))
}
