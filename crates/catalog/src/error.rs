//! The catalogue's one error type.
//!
//! Every message says what failed and where: the spec string, the redb file,
//! the Redis URL, or the store and key of a corrupt value. Lower-level errors
//! are part of the message (and kept as text or `io::Error`, so no storage
//! crate's types leak into the public API).

use std::io;
use std::path::PathBuf;

/// Why a catalogue operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CatalogError {
    /// A metadata store spec (`redb:PATH`, a path, or a `redis://` URL) could
    /// not be parsed.
    #[error("bad catalogue spec {spec:?}: {reason}")]
    Spec {
        /// The spec as given.
        spec: String,
        /// What is wrong with it and what is expected.
        reason: String,
    },
    /// A record handed to the catalogue is invalid.
    #[error("invalid {what}: field `{field}` {reason}")]
    Invalid {
        /// Which kind of record ("job", "checkpoint record").
        what: &'static str,
        /// The offending field.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// The redb file could not be opened or created.
    #[error("cannot open redb catalogue {path}: {reason}")]
    RedbOpen {
        /// The file.
        path: PathBuf,
        /// redb's error.
        reason: String,
    },
    /// A redb transaction, table or storage operation failed.
    #[error("redb catalogue {path}: {reason}")]
    Redb {
        /// The file.
        path: PathBuf,
        /// redb's error.
        reason: String,
    },
    /// No connection to the Redis server could be made.
    #[error("cannot reach Redis at {url}: {error}")]
    RedisConnect {
        /// The server's URL.
        url: String,
        /// The resolver's or socket's error.
        error: io::Error,
    },
    /// The server refused this client's credentials or permissions
    /// (`WRONGPASS`, `NOAUTH`, `NOPERM`): a configuration error, not an
    /// outage.
    #[error("Redis at {url} refused user {user}: {message}; this is a configuration error, not an outage: check the user in the URL, the password in bbos.redis_password_file and the user's ACL (docs/catalog.md)")]
    RedisAuth {
        /// The server's URL.
        url: String,
        /// The user (`default` without one in the URL).
        user: String,
        /// The server's error reply.
        message: String,
    },
    /// The client's own Redis settings are unusable: an unreadable or
    /// malformed password or CA file, a user without a password, or a TLS
    /// handshake that failed on the certificate (not on the network).
    #[error("Redis catalogue {url}: {reason}")]
    RedisConfig {
        /// The server's URL.
        url: String,
        /// What is wrong and what to do.
        reason: String,
    },
    /// The connection failed during a command (and, if the connection had
    /// dropped, once more after reconnecting).
    #[error("Redis at {url}: {command} failed: {error}")]
    RedisIo {
        /// The server's URL.
        url: String,
        /// The command (its name only, never its arguments).
        command: &'static str,
        /// The socket's error (a timeout shows as `WouldBlock`/`TimedOut`).
        error: io::Error,
    },
    /// The server answered a command with an error reply.
    #[error("Redis at {url} refused {command}: {message}")]
    RedisReply {
        /// The server's URL.
        url: String,
        /// The command (its name only).
        command: &'static str,
        /// The server's error reply.
        message: String,
    },
    /// The server's reply did not follow RESP2 or was not what the command
    /// returns.
    #[error("Redis at {url}: unexpected reply to {command}: {reason}")]
    RedisProtocol {
        /// The server's URL.
        url: String,
        /// The command (its name only).
        command: &'static str,
        /// What was wrong with the reply.
        reason: String,
    },
    /// A rename kept racing with concurrent writers of the same record.
    #[error("Redis at {url}: rename of {from:?} kept conflicting with concurrent writes ({attempts} attempts)")]
    RenameContended {
        /// The server's URL.
        url: String,
        /// The record being renamed.
        from: String,
        /// How many compare-and-swap attempts were made.
        attempts: u32,
    },
    /// The store was written by a newer sluice, in a format this one
    /// cannot read.
    #[error("catalogue {store} is in format {found}, written by a newer sluice; this one reads formats 1 to {supported}: upgrade sluice on this node, or give it its own catalogue (another redb file or Redis prefix)")]
    NewerFormat {
        /// The store (`redb /x/catalog.redb`, `redis redis://… prefix p`).
        store: String,
        /// The format found.
        found: u64,
        /// The newest format this sluice reads.
        supported: u64,
    },
    /// A stored value could not be decoded or is inconsistent.
    #[error("corrupt value in {store} at key {key:?}: {reason}")]
    Corrupt {
        /// The store and table or hash (e.g. `redb /x/catalog.redb table
        /// ckpts`, `redis redis://127.0.0.1:6390 hash sluice:ckpts`).
        store: String,
        /// The key within it.
        key: String,
        /// What is wrong with the value.
        reason: String,
    },
}

impl CatalogError {
    /// The store could not be reached (Redis refused the connection or
    /// the link failed): an outage, not a bad configuration or store.
    /// Refused credentials ([`CatalogError::RedisAuth`]) and a failed TLS
    /// handshake ([`CatalogError::RedisConfig`]) are not outages.
    pub fn is_unreachable(&self) -> bool {
        matches!(
            self,
            CatalogError::RedisConnect { .. } | CatalogError::RedisIo { .. }
        )
    }
}
