//! Where the catalogue lives: a [`MetaSpec`] parsed from one string.
//!
//! Accepted forms:
//! * `redb:PATH` or a bare `PATH` — an embedded redb file (created if
//!   missing; its directory must exist);
//! * `redis://[USER@]HOST[:PORT][/DB][?prefix=NAME]` — a Redis server (port
//!   6379, database 0 and prefix `sluice` by default); `rediss://` for TLS.
//!   HOST is a name, an IPv4 address or a bracketed IPv6 address. USER (an
//!   ACL user) and NAME are 1–64 of `A-Z a-z 0-9 _ . -`.
//!
//! The password and the TLS CA file are not part of the string: they are
//! [`RedisSpec::password_file`] and [`RedisSpec::tls_ca`], set from the
//! config (`bbos.redis_password_file`, `bbos.redis_tls_ca`), so a password
//! never shows where the URL does (logs, status, `ps`).
//!
//! Anything else is rejected with a message that shows the accepted forms:
//! another scheme (`postgres:`…), a password in the URL, a bad port,
//! database, user or prefix, an unknown query parameter. A path that really
//! starts with `word:` is written `./word:…` or `redb:word:…`.
//!
//! `Display` prints the canonical form, which parses back to the same spec
//! (the two files aside).

use std::fmt;
use std::net::Ipv6Addr;
use std::path::PathBuf;
use std::str::FromStr;

use crate::CatalogError;

/// The Redis key prefix used when a `redis://` URL names none.
pub const DEFAULT_PREFIX: &str = "sluice";
/// The Redis port used when a `redis://` URL names none.
pub const DEFAULT_REDIS_PORT: u16 = 6379;
/// The longest accepted Redis key prefix.
pub const PREFIX_LEN_MAX: usize = 64;

const FORMS: &str =
    "expected redb:PATH, a file path, or redis[s]://[USER@]HOST[:PORT][/DB][?prefix=NAME]";

/// Which store holds the catalogue, and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MetaSpec {
    /// An embedded redb database file.
    Redb {
        /// The database file.
        path: PathBuf,
    },
    /// A Redis server.
    Redis(RedisSpec),
}

/// The address, database, key prefix and credentials of a Redis catalogue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedisSpec {
    /// `rediss://`: TLS, the server's certificate checked against
    /// [`RedisSpec::tls_ca`].
    pub tls: bool,
    /// The ACL user (`redis://USER@HOST`); `None`: Redis's `default` user.
    pub user: Option<String>,
    /// A file holding the password (`AUTH`), read at every new connection;
    /// from the config, never from the URL. Needed with a user.
    pub password_file: Option<PathBuf>,
    /// A PEM file of the CA certificates the server's certificate must
    /// chain to (`rediss://` only); `None`: the system's bundle
    /// ([`crate::SYSTEM_CA_BUNDLE`]).
    pub tls_ca: Option<PathBuf>,
    /// Host name or IP address (IPv6 without brackets).
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// Database number (`SELECT`).
    pub db: u32,
    /// Every key of the catalogue starts with `PREFIX:`.
    pub prefix: String,
}

impl RedisSpec {
    /// A spec of `host:port` with every other setting at its default
    /// (database 0, prefix `sluice`, no user, password or TLS).
    pub fn new(host: &str, port: u16) -> RedisSpec {
        RedisSpec {
            tls: false,
            user: None,
            password_file: None,
            tls_ca: None,
            host: host.to_owned(),
            port,
            db: 0,
            prefix: DEFAULT_PREFIX.to_owned(),
        }
    }

    /// The server's URL without the prefix, as used in messages:
    /// `redis://` or `rediss://`, `USER@` if there is a user, `HOST:PORT`,
    /// and `/DB` when the database is not 0. Never a password.
    pub fn url(&self) -> String {
        let scheme = if self.tls { "rediss" } else { "redis" };
        let user = self
            .user
            .as_ref()
            .map_or(String::new(), |u| format!("{u}@"));
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        let db = if self.db == 0 {
            String::new()
        } else {
            format!("/{}", self.db)
        };
        format!("{scheme}://{user}{host}:{}{db}", self.port)
    }

    /// Checks what [`crate::open`] would otherwise find only when it
    /// connects: that a user has a password file, that a CA file comes with
    /// `rediss://`, and that the password file and the CA file can be read
    /// and hold what they should. For `sluice config check`.
    pub fn check(&self) -> Result<(), CatalogError> {
        let config = |reason| CatalogError::RedisConfig {
            url: self.url(),
            reason,
        };
        crate::redis_security::check_combination(self).map_err(config)?;
        crate::redis_security::password(self).map_err(config)?;
        crate::redis_security::tls_client(self).map_err(config)?;
        Ok(())
    }
}

impl MetaSpec {
    /// Parses a spec string (see the module documentation for the forms).
    pub fn parse(spec: &str) -> Result<MetaSpec, CatalogError> {
        let bad = |reason: String| CatalogError::Spec {
            spec: spec.to_owned(),
            reason,
        };
        if spec.is_empty() {
            return Err(bad(format!("empty; {FORMS}")));
        }
        if spec.trim() != spec {
            return Err(bad(format!("leading or trailing white space; {FORMS}")));
        }
        if let Some(rest) = spec.strip_prefix("redis://") {
            return parse_redis(rest, false).map(MetaSpec::Redis).map_err(bad);
        }
        if let Some(rest) = spec.strip_prefix("rediss://") {
            return parse_redis(rest, true).map(MetaSpec::Redis).map_err(bad);
        }
        if let Some(rest) = spec.strip_prefix("redb:") {
            if rest.is_empty() {
                return Err(bad("redb: needs a file path (redb:PATH)".into()));
            }
            if rest.starts_with("//") {
                return Err(bad("write redb:PATH, without //".into()));
            }
            return Ok(MetaSpec::Redb { path: rest.into() });
        }
        if let Some(scheme) = scheme_of(spec) {
            let hint = match scheme.to_ascii_lowercase().as_str() {
                "redis" | "rediss" => {
                    format!("a Redis URL starts with {}://", scheme.to_ascii_lowercase())
                }
                _ => format!("unsupported scheme {scheme:?}"),
            };
            let path_hint = if spec.contains("://") {
                String::new()
            } else {
                format!(" (write ./{spec} for a path with a colon)")
            };
            return Err(bad(format!("{hint}; {FORMS}{path_hint}")));
        }
        Ok(MetaSpec::Redb { path: spec.into() })
    }
}

impl FromStr for MetaSpec {
    type Err = CatalogError;
    fn from_str(s: &str) -> Result<MetaSpec, CatalogError> {
        MetaSpec::parse(s)
    }
}

impl fmt::Display for MetaSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MetaSpec::Redb { path } => write!(f, "redb:{}", path.display()),
            MetaSpec::Redis(r) => {
                write!(f, "{}", r.url())?;
                if r.prefix != DEFAULT_PREFIX {
                    write!(f, "?prefix={}", r.prefix)?;
                }
                Ok(())
            }
        }
    }
}

/// `Some(scheme)` if `spec` starts like a URL scheme (`word:`, two or more
/// characters, letters first).
fn scheme_of(spec: &str) -> Option<&str> {
    let (scheme, _) = spec.split_once(':')?;
    let mut chars = scheme.chars();
    let first = chars.next()?;
    (scheme.len() >= 2
        && first.is_ascii_alphabetic()
        && chars.all(|c| c.is_ascii_alphanumeric() || "+.-".contains(c)))
    .then_some(scheme)
}

fn parse_redis(rest: &str, tls: bool) -> Result<RedisSpec, String> {
    let (rest, query) = match rest.split_once('?') {
        Some((r, q)) => (r, Some(q)),
        None => (rest, None),
    };
    let (authority, db) = match rest.split_once('/') {
        Some((a, d)) => (a, Some(d)),
        None => (rest, None),
    };
    let (user, authority) = match authority.rsplit_once('@') {
        Some((user, _)) if user.contains(':') => {
            return Err(
                "a password in the URL is not accepted (it would show in logs and \
                        status): put it in a file and name it with bbos.redis_password_file"
                    .into(),
            )
        }
        Some((user, host)) => {
            check_name("user", user)?;
            (Some(user.to_owned()), host)
        }
        None => (None, authority),
    };
    let (host, port) = split_host_port(authority)?;
    let db = match db {
        None | Some("") => 0,
        Some(d) if d.bytes().all(|b| b.is_ascii_digit()) => d
            .parse()
            .map_err(|_| format!("database number {d:?} is too large"))?,
        Some(d) => return Err(format!("database must be a number, not {d:?}")),
    };
    let mut prefix = None;
    for param in query.into_iter().flat_map(|q| q.split('&')) {
        match param.split_once('=') {
            Some(("prefix", value)) => {
                if prefix.is_some() {
                    return Err("prefix given twice".into());
                }
                check_name("prefix", value)?;
                prefix = Some(value.to_owned());
            }
            _ => {
                return Err(format!(
                    "unknown query parameter {param:?} (only prefix=NAME is accepted)"
                ))
            }
        }
    }
    Ok(RedisSpec {
        tls,
        user,
        password_file: None,
        tls_ca: None,
        host,
        port,
        db,
        prefix: prefix.unwrap_or_else(|| DEFAULT_PREFIX.to_owned()),
    })
}

fn split_host_port(authority: &str) -> Result<(String, u16), String> {
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (addr, after) = v6
            .split_once(']')
            .ok_or_else(|| "unclosed [ in IPv6 host".to_owned())?;
        addr.parse::<Ipv6Addr>()
            .map_err(|_| format!("bad IPv6 address {addr:?}"))?;
        match after {
            "" => (addr, None),
            p => match p.strip_prefix(':') {
                Some(p) => (addr, Some(p)),
                None => return Err(format!("unexpected {p:?} after the IPv6 address")),
            },
        }
    } else {
        match authority.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return Err("missing host (redis://HOST:PORT)".into());
    }
    if !authority.starts_with('[')
        && !host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || ".-_".contains(c))
    {
        return Err(format!("bad host {host:?}"));
    }
    let port = match port {
        None => DEFAULT_REDIS_PORT,
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n > 0 && p.bytes().all(|b| b.is_ascii_digit()) => n,
            _ => return Err(format!("bad port {p:?} (1-65535)")),
        },
    };
    Ok((host.to_owned(), port))
}

/// Checks a key prefix or user name: 1–64 of `A-Z a-z 0-9 _ . -`.
fn check_name(what: &str, name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= PREFIX_LEN_MAX
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "bad {what} {name:?} (1-{PREFIX_LEN_MAX} of A-Z a-z 0-9 _ . -)"
        ))
    }
}
