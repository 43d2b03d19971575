//! The shared catalogue: a Redis server, spoken to with [`crate::resp`].
//!
//! Key layout (PREFIX from the URL, `sluice` by default), six hashes:
//! * `PREFIX:jobs`: job id → JSON [`JobSpec`];
//! * `PREFIX:ckpts`: checkpoint path → JSON [`CkptRecord`];
//! * `PREFIX:versions`: job id → last version issued (decimal, `HINCRBY`);
//! * `PREFIX:periods`: period index (decimal) → JSON [`PeriodStats`];
//! * `PREFIX:open_versions`: job id → `VERSION STARTED_MS JOINED`, the
//!   job's open version (`join_version`);
//! * `PREFIX:meta`: `format` → [`crate::FORMAT`], `jobs_generation` →
//!   bumped with every job put or removed (in the same script).
//!
//! Nothing is written outside these keys, so sluice instances with different
//! prefixes share a server.
//!
//! Atomicity: every operation is one command (`put_job`, `remove_job` and
//! `join_version` are each one Lua script), except `rename_ckpt` (a read,
//! then a Lua compare-and-swap that moves the record only if the source still
//! holds the bytes read; retried up to [`RENAME_ATTEMPTS_MAX`] times) and
//! `trim_periods` (`HKEYS`, then one `HDEL` per chunk: a period added
//! meanwhile is kept, so at most `keep` plus the new ones remain). The record
//! is re-encoded in Rust, not in Lua, because Lua's cjson turns integers
//! above 2^53 (nanosecond timestamps) into rounded doubles.
//!
//! Durability: a call returns after the server acknowledged the command; with
//! `appendonly yes` and `appendfsync always` (as `scripts/redis.sh` starts
//! it) the server has written and fsynced its append-only file first.
//!
//! Security: with a password file, every new connection sends `AUTH [USER]
//! PASSWORD` first; with `rediss://`, it is TLS (rustls) and the handshake
//! completes before `AUTH` (`crate::redis_security`). A refused password or
//! permission (`WRONGPASS`, `NOAUTH`, `NOPERM`, on any command) is
//! [`CatalogError::RedisAuth`], a failed certificate check
//! [`CatalogError::RedisConfig`]: configuration errors, never
//! `is_unreachable`.
//!
//! Connections: idle connections are kept in a pool of at most
//! [`IDLE_CONNECTIONS_MAX`]; a thread with none idle opens its own. If a
//! command fails because the connection dropped (server restart), the pool
//! is emptied and the command is sent once more on a new connection. A
//! retried `HINCRBY` whose first attempt reached the server before the drop
//! skips a version: versions stay unique and increasing, not gap-free.
//! Timeouts are not retried (the server is there but slow; a retry would
//! double the wait).

use std::io;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use crate::model::{decode_ckpt, decode_job, decode_period, encode, non_empty};
use crate::redis_security::{self, TlsClient};
use crate::resp::{CallError, ConnectError, Connection, Reply};
use crate::{Catalog, CatalogError, CkptRecord, JobSpec, PeriodStats, RedisSpec};

/// How long to wait for a TCP connection to the server.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long to wait for a command to be sent or its reply to arrive.
pub const IO_TIMEOUT: Duration = Duration::from_secs(5);
/// Most idle connections kept for reuse.
pub const IDLE_CONNECTIONS_MAX: usize = 8;
/// Most compare-and-swap attempts of one `rename_ckpt`.
pub const RENAME_ATTEMPTS_MAX: u32 = 32;
/// Most fields deleted by one `HDEL` of `trim_periods`.
const HDEL_FIELDS_MAX: usize = 1024;

/// Moves field ARGV[1] of hash KEYS[1] to field ARGV[3] with value ARGV[4]
/// if ARGV[1] still holds ARGV[2]. Returns 1 if moved, 0 if ARGV[1] is
/// absent, -1 if it changed since it was read.
const RENAME_SCRIPT: &str = r"
local current = redis.call('HGET', KEYS[1], ARGV[1])
if not current then return 0 end
if current ~= ARGV[2] then return -1 end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('HSET', KEYS[1], ARGV[3], ARGV[4])
return 1
";

/// Sets job ARGV[1] of hash KEYS[1] to ARGV[2] and bumps the job generation
/// in hash KEYS[2], atomically.
const PUT_JOB_SCRIPT: &str = r"
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('HINCRBY', KEYS[2], 'jobs_generation', 1)
return 1
";

/// Removes job ARGV[1] of hash KEYS[1] and, if there was one, bumps the job
/// generation in hash KEYS[2]; returns how many were removed.
const REMOVE_JOB_SCRIPT: &str = r"
local n = redis.call('HDEL', KEYS[1], ARGV[1])
if n > 0 then redis.call('HINCRBY', KEYS[2], 'jobs_generation', 1) end
return n
";

/// `join_version` (see the trait): KEYS[1] the versions hash, KEYS[2] the
/// open versions hash; ARGV job, files, window_ms, now_ms. Milliseconds
/// since the epoch stay below 2^53, so Lua's doubles hold them exactly.
const JOIN_VERSION_SCRIPT: &str = r"
local last = redis.call('HGET', KEYS[1], ARGV[1])
local open = redis.call('HGET', KEYS[2], ARGV[1])
if last and open then
  local v, started, joined = string.match(open, '^(%d+) (%d+) (%d+)$')
  if v and v == last and tonumber(joined) < tonumber(ARGV[2])
     and math.abs(tonumber(ARGV[4]) - tonumber(started)) < tonumber(ARGV[3]) then
    redis.call('HSET', KEYS[2], ARGV[1], v .. ' ' .. started .. ' ' .. (tonumber(joined) + 1))
    return tonumber(v)
  end
end
local nv = redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
redis.call('HSET', KEYS[2], ARGV[1], string.format('%d %s 1', nv, ARGV[4]))
return nv
";

/// A catalogue in a Redis server.
pub struct RedisCatalog {
    spec: RedisSpec,
    url: String,
    jobs_key: String,
    ckpts_key: String,
    versions_key: String,
    periods_key: String,
    open_versions_key: String,
    meta_key: String,
    /// The TLS client of a `rediss://` spec, built once at open.
    tls: Option<TlsClient>,
    idle: Mutex<Vec<Connection>>,
}

/// Whether an I/O error means the connection is gone (so a new one may
/// work), as opposed to a timeout or a local failure.
fn connection_dropped(e: &io::Error) -> bool {
    use io::ErrorKind::*;
    matches!(
        e.kind(),
        BrokenPipe | ConnectionReset | ConnectionAborted | UnexpectedEof | NotConnected
    )
}

impl RedisCatalog {
    /// Connects to the server (failing fast if it cannot be reached),
    /// authenticates if a password file is set, and checks it answers
    /// `PING`.
    pub fn open(spec: &RedisSpec) -> Result<RedisCatalog, CatalogError> {
        let config = |reason| CatalogError::RedisConfig {
            url: spec.url(),
            reason,
        };
        redis_security::check_combination(spec).map_err(config)?;
        let tls = redis_security::tls_client(spec).map_err(config)?;
        let key = |name: &str| format!("{}:{name}", spec.prefix);
        let catalog = RedisCatalog {
            tls,
            url: spec.url(),
            jobs_key: key("jobs"),
            ckpts_key: key("ckpts"),
            versions_key: key("versions"),
            periods_key: key("periods"),
            open_versions_key: key("open_versions"),
            meta_key: key("meta"),
            spec: spec.clone(),
            idle: Mutex::new(Vec::new()),
        };
        match catalog.call("PING", &[b"PING"])? {
            Reply::Status(s) if s == "PONG" => {}
            other => return Err(catalog.unexpected("PING", &other)),
        }
        // Unmarked: format 1, read with the new fields' defaults.
        let found = match catalog.hget(&catalog.meta_key, "format")? {
            None => 1,
            Some(bytes) => std::str::from_utf8(&bytes)
                .ok()
                .and_then(|s| s.parse::<u64>().ok())
                .ok_or_else(|| CatalogError::Corrupt {
                    store: catalog.store(&catalog.meta_key),
                    key: "format".into(),
                    reason: "not a format number".into(),
                })?,
        };
        if found > crate::FORMAT {
            return Err(CatalogError::NewerFormat {
                store: catalog.describe(),
                found,
                supported: crate::FORMAT,
            });
        }
        if found < crate::FORMAT {
            let format = crate::FORMAT.to_string();
            catalog.hset(&catalog.meta_key, "format", format.as_bytes())?;
        }
        Ok(catalog)
    }

    /// The server's address, database and key prefix.
    pub fn spec(&self) -> &RedisSpec {
        &self.spec
    }

    /// `f` on the pool of idle connections, under its lock.
    fn with_idle<R>(&self, f: impl FnOnce(&mut Vec<Connection>) -> R) -> R {
        // A panic while holding the lock cannot leave the Vec inconsistent.
        f(&mut self.idle.lock().unwrap_or_else(PoisonError::into_inner))
    }

    fn connect(&self) -> Result<Connection, CatalogError> {
        let connect_error = |error| CatalogError::RedisConnect {
            url: self.url.clone(),
            error,
        };
        let config_error = |reason| CatalogError::RedisConfig {
            url: self.url.clone(),
            reason,
        };
        // Read first: an unreadable password file fails before any I/O.
        let password = redis_security::password(&self.spec).map_err(config_error)?;
        let mut conn = Connection::connect(
            &self.spec.host,
            self.spec.port,
            CONNECT_TIMEOUT,
            IO_TIMEOUT,
            self.tls.as_ref(),
        )
        .map_err(|e| match e {
            ConnectError::Io(error) => connect_error(error),
            ConnectError::Tls(reason) => config_error(format!(
                "TLS handshake failed: {reason}; this is a configuration error, not an outage: the server's certificate must chain to a CA in {} and name {:?} (is the port a TLS port?)",
                self.spec
                    .tls_ca
                    .as_deref()
                    .unwrap_or(std::path::Path::new(redis_security::SYSTEM_CA_BUNDLE))
                    .display(),
                self.spec.host,
            )),
        })?;
        if let Some(password) = password {
            let mut args: Vec<&[u8]> = vec![b"AUTH"];
            if let Some(user) = &self.spec.user {
                args.push(user.as_bytes());
            }
            args.push(&password);
            match conn.call(&args) {
                Ok(Reply::Status(_)) => {}
                Ok(Reply::Error(message)) => return Err(self.reply_error("AUTH", message)),
                Ok(other) => return Err(self.unexpected("AUTH", &other)),
                Err(e) => return Err(self.call_error("AUTH", e)),
            }
        }
        if self.spec.db != 0 {
            let db = self.spec.db.to_string();
            match conn.call(&[b"SELECT", db.as_bytes()]) {
                Ok(Reply::Status(_)) => {}
                Ok(Reply::Error(message)) => return Err(self.reply_error("SELECT", message)),
                Ok(other) => return Err(self.unexpected("SELECT", &other)),
                Err(e) => return Err(self.call_error("SELECT", e)),
            }
        }
        Ok(conn)
    }

    /// An error reply: refused credentials or permissions are
    /// [`CatalogError::RedisAuth`], anything else [`CatalogError::RedisReply`].
    fn reply_error(&self, command: &'static str, message: String) -> CatalogError {
        let code = message.split_whitespace().next().unwrap_or_default();
        if matches!(code, "WRONGPASS" | "NOAUTH" | "NOPERM") {
            CatalogError::RedisAuth {
                url: self.url.clone(),
                user: self.spec.user.clone().unwrap_or_else(|| "default".into()),
                message,
            }
        } else {
            CatalogError::RedisReply {
                url: self.url.clone(),
                command,
                message,
            }
        }
    }

    fn call_error(&self, command: &'static str, e: CallError) -> CatalogError {
        match e {
            CallError::Io(error) => CatalogError::RedisIo {
                url: self.url.clone(),
                command,
                // A read timeout shows as EAGAIN, whose text misleads.
                error: match error.kind() {
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("no reply within {} s", IO_TIMEOUT.as_secs()),
                    ),
                    _ => error,
                },
            },
            CallError::Protocol(reason) => CatalogError::RedisProtocol {
                url: self.url.clone(),
                command,
                reason,
            },
        }
    }

    fn unexpected(&self, command: &'static str, reply: &Reply) -> CatalogError {
        let mut shown = format!("{reply:?}");
        if shown.len() > 200 {
            let mut cut = 200;
            while !shown.is_char_boundary(cut) {
                cut -= 1;
            }
            shown.truncate(cut);
            shown.push('…');
        }
        CatalogError::RedisProtocol {
            url: self.url.clone(),
            command,
            reason: shown,
        }
    }

    /// The list that is `node`'s recall doorbell.
    fn recall_key(&self, node: &str) -> String {
        format!("{}:recall:{node}", self.spec.prefix)
    }

    fn store(&self, key: &str) -> String {
        format!("redis {} hash {key}", self.url)
    }

    /// Sends `args` (command name first) on a pooled or new connection;
    /// reconnects once if the connection had dropped. Error replies become
    /// [`CatalogError::RedisReply`].
    fn call(&self, command: &'static str, args: &[&[u8]]) -> Result<Reply, CatalogError> {
        let pooled = self.with_idle(Vec::pop);
        let mut conn = match pooled {
            Some(conn) => conn,
            None => self.connect()?,
        };
        let result = match conn.call(args) {
            Err(CallError::Io(e)) if connection_dropped(&e) => {
                // Every idle connection predates the drop: discard them all.
                self.with_idle(Vec::clear);
                conn = self.connect()?;
                conn.call(args)
            }
            other => other,
        };
        match result {
            Ok(reply) => {
                self.with_idle(|idle| {
                    if idle.len() < IDLE_CONNECTIONS_MAX {
                        idle.push(conn);
                    }
                });
                match reply {
                    Reply::Error(message) => Err(self.reply_error(command, message)),
                    reply => Ok(reply),
                }
            }
            // The connection's position in the stream is unknown: drop it.
            Err(e) => Err(self.call_error(command, e)),
        }
    }

    fn call_int(&self, command: &'static str, args: &[&[u8]]) -> Result<i64, CatalogError> {
        match self.call(command, args)? {
            Reply::Int(n) => Ok(n),
            other => Err(self.unexpected(command, &other)),
        }
    }

    fn hget(&self, key: &str, field: &str) -> Result<Option<Vec<u8>>, CatalogError> {
        match self.call("HGET", &[b"HGET", key.as_bytes(), field.as_bytes()])? {
            Reply::Bulk(value) => Ok(value),
            other => Err(self.unexpected("HGET", &other)),
        }
    }

    fn hset(&self, key: &str, field: &str, value: &[u8]) -> Result<(), CatalogError> {
        self.call_int("HSET", &[b"HSET", key.as_bytes(), field.as_bytes(), value])?;
        Ok(())
    }

    fn hdel(&self, key: &str, field: &str) -> Result<bool, CatalogError> {
        Ok(self.call_int("HDEL", &[b"HDEL", key.as_bytes(), field.as_bytes()])? > 0)
    }

    /// All (field, value) pairs of hash `key`, sorted by field.
    fn hgetall(&self, key: &str) -> Result<Vec<(String, Vec<u8>)>, CatalogError> {
        let items = match self.call("HGETALL", &[b"HGETALL", key.as_bytes()])? {
            Reply::Array(Some(items)) if items.len() % 2 == 0 => items,
            other => return Err(self.unexpected("HGETALL", &other)),
        };
        let mut pairs = Vec::with_capacity(items.len() / 2);
        let mut items = items.into_iter();
        while let (Some(field), Some(value)) = (items.next(), items.next()) {
            match (field, value) {
                (Reply::Bulk(Some(field)), Reply::Bulk(Some(value))) => {
                    let field = String::from_utf8(field).map_err(|e| CatalogError::Corrupt {
                        store: self.store(key),
                        key: String::from_utf8_lossy(e.as_bytes()).into_owned(),
                        reason: "field name is not UTF-8".into(),
                    })?;
                    pairs.push((field, value));
                }
                (field, _) => return Err(self.unexpected("HGETALL", &field)),
            }
        }
        pairs.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(pairs)
    }

    /// All periods with their indexes, sorted by index.
    fn all_periods(&self) -> Result<Vec<(u64, Vec<u8>)>, CatalogError> {
        let mut out = Vec::new();
        for (field, value) in self.hgetall(&self.periods_key)? {
            out.push((self.period_index(&field)?, value));
        }
        out.sort_by_key(|(index, _)| *index);
        Ok(out)
    }

    fn period_index(&self, field: &str) -> Result<u64, CatalogError> {
        field.parse().map_err(|_| CatalogError::Corrupt {
            store: self.store(&self.periods_key),
            key: field.to_owned(),
            reason: "field is not a period index".into(),
        })
    }
}

impl Catalog for RedisCatalog {
    fn put_job(&self, job: &JobSpec) -> Result<(), CatalogError> {
        job.check()?;
        let bytes = encode(job);
        let args: [&[u8]; 7] = [
            b"EVAL",
            PUT_JOB_SCRIPT.as_bytes(),
            b"2",
            self.jobs_key.as_bytes(),
            self.meta_key.as_bytes(),
            job.id.as_bytes(),
            &bytes,
        ];
        self.call_int("EVAL", &args)?;
        Ok(())
    }

    fn remove_job(&self, id: &str) -> Result<bool, CatalogError> {
        let args: [&[u8]; 6] = [
            b"EVAL",
            REMOVE_JOB_SCRIPT.as_bytes(),
            b"2",
            self.jobs_key.as_bytes(),
            self.meta_key.as_bytes(),
            id.as_bytes(),
        ];
        Ok(self.call_int("EVAL", &args)? > 0)
    }

    fn job(&self, id: &str) -> Result<Option<JobSpec>, CatalogError> {
        let store = self.store(&self.jobs_key);
        self.hget(&self.jobs_key, id)?
            .map(|b| decode_job(&store, id, &b))
            .transpose()
    }

    fn jobs(&self) -> Result<Vec<JobSpec>, CatalogError> {
        let store = self.store(&self.jobs_key);
        self.hgetall(&self.jobs_key)?
            .into_iter()
            .map(|(k, b)| decode_job(&store, &k, &b))
            .collect()
    }

    fn next_version(&self, job: &str) -> Result<u64, CatalogError> {
        non_empty("version counter", "job", job)?;
        let corrupt = |reason: String| CatalogError::Corrupt {
            store: self.store(&self.versions_key),
            key: job.to_owned(),
            reason,
        };
        let args: [&[u8]; 4] = [
            b"HINCRBY",
            self.versions_key.as_bytes(),
            job.as_bytes(),
            b"1",
        ];
        match self.call_int("HINCRBY", &args) {
            Ok(n) => u64::try_from(n)
                .ok()
                .filter(|&n| n >= 1)
                .ok_or_else(|| corrupt(format!("version counter is {n}"))),
            // The stored counter is not an integer, or would overflow.
            Err(CatalogError::RedisReply { message, .. })
                if message.contains("not an integer") || message.contains("overflow") =>
            {
                Err(corrupt(message))
            }
            Err(e) => Err(e),
        }
    }

    fn shared(&self) -> bool {
        true
    }

    fn jobs_generation(&self) -> Result<u64, CatalogError> {
        let Some(bytes) = self.hget(&self.meta_key, "jobs_generation")? else {
            return Ok(0);
        };
        std::str::from_utf8(&bytes)
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
            .ok_or_else(|| CatalogError::Corrupt {
                store: self.store(&self.meta_key),
                key: "jobs_generation".into(),
                reason: "not a counter".into(),
            })
    }

    fn join_version(
        &self,
        job: &str,
        files: u32,
        window_ms: u64,
        now_ms: u64,
    ) -> Result<u64, CatalogError> {
        non_empty("version counter", "job", job)?;
        let corrupt = |reason: String| CatalogError::Corrupt {
            store: self.store(&self.versions_key),
            key: job.to_owned(),
            reason,
        };
        // Above 2^53 a Lua double would round: clamp (a window that long
        // is "never closes by time", a clock that far is broken anyway).
        const EXACT_MAX: u64 = 1 << 53;
        let (files, window, now) = (
            files.to_string(),
            window_ms.min(EXACT_MAX).to_string(),
            now_ms.min(EXACT_MAX).to_string(),
        );
        let args: [&[u8]; 9] = [
            b"EVAL",
            JOIN_VERSION_SCRIPT.as_bytes(),
            b"2",
            self.versions_key.as_bytes(),
            self.open_versions_key.as_bytes(),
            job.as_bytes(),
            files.as_bytes(),
            window.as_bytes(),
            now.as_bytes(),
        ];
        match self.call_int("EVAL", &args) {
            Ok(n) => u64::try_from(n)
                .ok()
                .filter(|&n| n >= 1)
                .ok_or_else(|| corrupt(format!("version counter is {n}"))),
            Err(CatalogError::RedisReply { message, .. })
                if message.contains("not an integer") || message.contains("overflow") =>
            {
                Err(corrupt(message))
            }
            Err(e) => Err(e),
        }
    }

    fn put_ckpt(&self, rec: &CkptRecord) -> Result<(), CatalogError> {
        rec.check()?;
        self.hset(&self.ckpts_key, &rec.path, &encode(rec))
    }

    fn ckpt(&self, path: &str) -> Result<Option<CkptRecord>, CatalogError> {
        let store = self.store(&self.ckpts_key);
        self.hget(&self.ckpts_key, path)?
            .map(|b| decode_ckpt(&store, path, &b))
            .transpose()
    }

    fn remove_ckpt(&self, path: &str) -> Result<bool, CatalogError> {
        self.hdel(&self.ckpts_key, path)
    }

    fn rename_ckpt(&self, from: &str, to: &str) -> Result<bool, CatalogError> {
        non_empty("checkpoint rename", "to", to)?;
        let store = self.store(&self.ckpts_key);
        for _ in 0..RENAME_ATTEMPTS_MAX {
            let Some(old) = self.hget(&self.ckpts_key, from)? else {
                return Ok(false);
            };
            let mut rec = decode_ckpt(&store, from, &old)?;
            rec.path = to.to_owned();
            let new = encode(&rec);
            let args: [&[u8]; 8] = [
                b"EVAL",
                RENAME_SCRIPT.as_bytes(),
                b"1",
                self.ckpts_key.as_bytes(),
                from.as_bytes(),
                &old,
                to.as_bytes(),
                &new,
            ];
            match self.call_int("EVAL", &args)? {
                1 => return Ok(true),
                0 => return Ok(false),
                -1 => continue, // changed since read: read again
                n => return Err(self.unexpected("EVAL", &Reply::Int(n))),
            }
        }
        Err(CatalogError::RenameContended {
            url: self.url.clone(),
            from: from.to_owned(),
            attempts: RENAME_ATTEMPTS_MAX,
        })
    }

    fn ckpts(&self) -> Result<Vec<CkptRecord>, CatalogError> {
        let store = self.store(&self.ckpts_key);
        self.hgetall(&self.ckpts_key)?
            .into_iter()
            .map(|(k, b)| decode_ckpt(&store, &k, &b))
            .collect()
    }

    fn put_period(&self, p: &PeriodStats) -> Result<(), CatalogError> {
        self.hset(&self.periods_key, &p.index.to_string(), &encode(p))
    }

    fn periods(&self, last: usize) -> Result<Vec<PeriodStats>, CatalogError> {
        let store = self.store(&self.periods_key);
        let all = self.all_periods()?;
        let skip = all.len().saturating_sub(last);
        all[skip..]
            .iter()
            .map(|(index, bytes)| decode_period(&store, *index, bytes))
            .collect()
    }

    fn trim_periods(&self, keep: usize) -> Result<(), CatalogError> {
        let fields = match self.call("HKEYS", &[b"HKEYS", self.periods_key.as_bytes()])? {
            Reply::Array(Some(fields)) => fields,
            other => return Err(self.unexpected("HKEYS", &other)),
        };
        let mut indexes = Vec::with_capacity(fields.len());
        for field in fields {
            let Reply::Bulk(Some(field)) = field else {
                return Err(self.unexpected("HKEYS", &field));
            };
            let field = String::from_utf8_lossy(&field).into_owned();
            indexes.push((self.period_index(&field)?, field));
        }
        indexes.sort();
        let dropped = indexes.len().saturating_sub(keep);
        for chunk in indexes[..dropped].chunks(HDEL_FIELDS_MAX) {
            let mut args: Vec<&[u8]> = vec![b"HDEL", self.periods_key.as_bytes()];
            args.extend(chunk.iter().map(|(_, field)| field.as_bytes()));
            self.call_int("HDEL", &args)?;
        }
        Ok(())
    }

    fn describe(&self) -> String {
        format!("redis {} prefix {}", self.url, self.spec.prefix)
    }

    /// `RPUSH PREFIX:recall:NODE ENTRY`.
    fn ring_recall(&self, node: &str, entry: &str) -> Result<bool, CatalogError> {
        let key = self.recall_key(node);
        self.call_int("RPUSH", &[b"RPUSH", key.as_bytes(), entry.as_bytes()])?;
        Ok(true)
    }

    /// `LPOP PREFIX:recall:NODE MAX` (Redis 6.2 and later).
    fn take_recalls(&self, node: &str, max: usize) -> Result<Vec<String>, CatalogError> {
        let key = self.recall_key(node);
        let count = max.max(1).to_string();
        match self.call("LPOP", &[b"LPOP", key.as_bytes(), count.as_bytes()])? {
            Reply::Array(None) | Reply::Bulk(None) => Ok(Vec::new()),
            Reply::Array(Some(items)) => items
                .into_iter()
                .map(|item| match item {
                    Reply::Bulk(Some(bytes)) => {
                        String::from_utf8(bytes).map_err(|e| CatalogError::Corrupt {
                            store: format!("redis {} list {key}", self.url),
                            key: String::from_utf8_lossy(e.as_bytes()).into_owned(),
                            reason: "recall entry name is not UTF-8".into(),
                        })
                    }
                    other => Err(self.unexpected("LPOP", &other)),
                })
                .collect(),
            other => Err(self.unexpected("LPOP", &other)),
        }
    }
}
