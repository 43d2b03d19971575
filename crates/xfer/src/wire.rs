//! The `sluice xfer` wire protocol, version 2.
//!
//! Every message is one frame: a 4-byte big-endian length `n`, then `n`
//! bytes: a 1-byte message type and the type's fields. Integers are
//! big-endian; strings and byte strings carry a 2-byte length; a block's
//! data is the rest of its frame. `n` is at most [`MAX_FRAME`], so a
//! reader never allocates more than that for one message, and every
//! variable field has its own bound ([`MAX_PATH`], [`MAX_TOKEN`],
//! [`MAX_TEXT`], [`MAX_OBJECT`]). A frame whose fields do not fill it
//! exactly, a type byte not listed here, a string that is not UTF-8 or a
//! field over its bound is a [`WireError`]; the decoder never panics
//! (proptest below, fuzz target in `crates/xfer/fuzz`).
//!
//! The conversation (source → sink unless noted):
//! 1. `Hello` (version, token, session, destination); the sink answers
//!    `Welcome` (its version, the session id) or `Error` and closes. A
//!    version mismatch is refused. Further connections of the same transfer
//!    send the session id they were given and join it.
//! 2. `Stat` (request number, whether to checksum, up to [`MAX_STAT`]
//!    relative paths with the source's sizes); the sink answers `StatReply`
//!    with, per path, the size and mtime of the regular file at that path
//!    under the destination (and its crc32c when asked and the sizes are
//!    equal), or nothing when there is no regular file there. The source
//!    skips files whose size and mtime (or size and crc) are equal.
//!    `MakeDir` and `Symlink` (request number, relative path, link target)
//!    create a directory or a symbolic link; the sink answers `EntryDone`
//!    (request number, and why it failed, if it did).
//! 3. `NewFile` (request number, relative path, size, mode, mtime, resume);
//!    the sink answers `FileId` (request number → file id, and whether an
//!    earlier partial copy was kept).
//! 4. `NewBlock` (file id, offset, crc32c, data) on any connection of the
//!    session; the sink checks the crc, writes the bytes and answers
//!    `BlockDone`.
//! 5. `FileDone` (file id, size, crc32c of the whole file); the sink reads
//!    the file back, compares, applies mode and mtime, syncs and renames
//!    the partial copy into place, and answers `FileOk` or `FileFailed`.
//!    `FileCancel` (file id, reason) instead drops the partial copy (the
//!    source saw the file change while it was read); the sink answers
//!    `FileFailed` with the reason.
//! 6. `Bye` ends a connection cleanly. `Error` from either side ends it
//!    with a reason.
//!
//! Version 2 added `Stat`, `StatReply`, `MakeDir`, `Symlink`, `EntryDone`
//! and `FileCancel`; a version-1 peer is refused at `Hello`.

use std::io::{self, Read};

/// Protocol version spoken by this build.
pub const VERSION: u16 = 2;
/// Largest object (block payload) in bytes: 16 MiB.
pub const MAX_OBJECT: usize = 16 << 20;
/// Largest frame: a block header plus [`MAX_OBJECT`] bytes.
pub const MAX_FRAME: usize = MAX_OBJECT + 64;
/// Longest relative path or destination, in bytes.
pub const MAX_PATH: usize = 4096;
/// Longest authentication token, in bytes.
pub const MAX_TOKEN: usize = 1024;
/// Longest error or failure text, in bytes.
pub const MAX_TEXT: usize = 4096;
/// Most paths in one `Stat` (and entries in one `StatReply`): with
/// [`MAX_PATH`] each, a `Stat` stays under [`MAX_FRAME`].
pub const MAX_STAT: usize = 1024;

/// What the sink found at one path of a `Stat`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DestStat {
    /// No regular file there (nothing, a directory, a symlink, a device,
    /// or a directory component that is a symlink).
    Absent,
    /// A regular file.
    File {
        /// Size in bytes.
        size: u64,
        /// Modification time, seconds since the epoch.
        mtime_sec: i64,
        /// Modification time, nanoseconds part.
        mtime_nsec: u32,
        /// crc32c of the whole file, when the `Stat` asked for checksums
        /// and the size equals the source's.
        crc: Option<u32>,
    },
}

/// A protocol message; see the module docs for the conversation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message {
    /// Source's greeting.
    Hello {
        /// Protocol version of the source.
        version: u16,
        /// Shared secret (empty when mutual TLS authenticates).
        token: Vec<u8>,
        /// 0 to start a transfer, else the session to join.
        session: u64,
        /// Destination directory under the sink's root (may be empty).
        dest: String,
    },
    /// Sink's acceptance.
    Welcome {
        /// Protocol version of the sink.
        version: u16,
        /// Session id for further connections.
        session: u64,
    },
    /// A file to transfer.
    NewFile {
        /// Source's request number, echoed in `FileId`.
        req: u32,
        /// Path relative to the destination, `/`-separated.
        path: String,
        /// Size in bytes.
        size: u64,
        /// Permission bits (`st_mode & 0o7777`).
        mode: u32,
        /// Modification time, seconds since the epoch.
        mtime_sec: i64,
        /// Modification time, nanoseconds part.
        mtime_nsec: u32,
        /// Keep an earlier partial copy (the source's journal has objects).
        resume: bool,
    },
    /// Ask what is at the sink for up to [`MAX_STAT`] files.
    Stat {
        /// Source's request number, echoed in `StatReply`.
        req: u32,
        /// Compute the crc32c of destination files whose size matches.
        checksum: bool,
        /// Paths relative to the destination with the source's sizes.
        files: Vec<(String, u64)>,
    },
    /// The answer to `Stat`, one entry per path in the same order.
    StatReply {
        /// The `Stat` request number.
        req: u32,
        /// What is at each path.
        entries: Vec<DestStat>,
    },
    /// Create a directory (and its parents) under the destination.
    MakeDir {
        /// Source's request number, echoed in `EntryDone`.
        req: u32,
        /// Path relative to the destination, `/`-separated.
        path: String,
    },
    /// Create (or replace) a symbolic link under the destination.
    Symlink {
        /// Source's request number, echoed in `EntryDone`.
        req: u32,
        /// Path of the link relative to the destination.
        path: String,
        /// What the link points to, stored as is and never followed.
        target: String,
    },
    /// A `MakeDir` or `Symlink` was carried out, or why not.
    EntryDone {
        /// The request number.
        req: u32,
        /// Why it failed (`None`: done).
        failure: Option<String>,
    },
    /// Drop a file's partial copy: the source saw it change while reading.
    FileCancel {
        /// File id.
        file: u32,
        /// Why.
        reason: String,
    },
    /// The sink's id for a file.
    FileId {
        /// The `NewFile` request number.
        req: u32,
        /// File id for blocks and `FileDone`.
        file: u32,
        /// True if an earlier partial copy was kept (resumed).
        resumed: bool,
    },
    /// One object's bytes.
    NewBlock {
        /// File id.
        file: u32,
        /// Byte offset in the file.
        offset: u64,
        /// crc32c of `data`.
        crc: u32,
        /// The bytes, at most [`MAX_OBJECT`].
        data: Vec<u8>,
    },
    /// The sink wrote a block.
    BlockDone {
        /// File id.
        file: u32,
        /// Offset of the block.
        offset: u64,
    },
    /// Every block of a file was acknowledged.
    FileDone {
        /// File id.
        file: u32,
        /// Final size.
        size: u64,
        /// crc32c of the whole file.
        crc: u32,
    },
    /// The file verified and is in place.
    FileOk {
        /// File id.
        file: u32,
    },
    /// The file did not verify; its partial copy was removed.
    FileFailed {
        /// File id.
        file: u32,
        /// Why.
        reason: String,
    },
    /// The sender is closing the connection.
    Error {
        /// Error class ([`ErrorCode`] as a number).
        code: u16,
        /// Human-readable reason.
        message: String,
    },
    /// Clean end of a connection.
    Bye,
}

/// Classes of `Error` messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u16)]
pub enum ErrorCode {
    /// Malformed or unexpected message.
    Protocol = 1,
    /// Wrong or missing token.
    Unauthenticated = 2,
    /// Versions differ.
    Version = 3,
    /// A path escapes the root or is not acceptable.
    BadPath = 4,
    /// I/O error at the peer.
    Io = 5,
    /// A block's checksum did not match.
    Checksum = 6,
}

/// A message that cannot be decoded.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WireError {
    /// The frame length is over [`MAX_FRAME`] or zero.
    #[error("frame of {0} bytes is outside 1..={MAX_FRAME}")]
    FrameSize(usize),
    /// The frame ended inside a field.
    #[error("message truncated: {0}")]
    Truncated(&'static str),
    /// Bytes left over after the last field.
    #[error("{0} unexpected bytes after a {1} message")]
    Trailing(usize, &'static str),
    /// An unknown message type.
    #[error("unknown message type {0}")]
    UnknownType(u8),
    /// A field over its bound.
    #[error("{field} of {len} bytes exceeds {max}")]
    TooLong {
        /// Which field.
        field: &'static str,
        /// Its length.
        len: usize,
        /// Its bound.
        max: usize,
    },
    /// A string field that is not UTF-8.
    #[error("{0} is not UTF-8")]
    NotUtf8(&'static str),
    /// A boolean byte other than 0 or 1.
    #[error("bad flag byte {0}")]
    BadFlag(u8),
}

const T_HELLO: u8 = 1;
const T_WELCOME: u8 = 2;
const T_NEW_FILE: u8 = 3;
const T_FILE_ID: u8 = 4;
const T_NEW_BLOCK: u8 = 5;
const T_BLOCK_DONE: u8 = 6;
const T_FILE_DONE: u8 = 7;
const T_FILE_OK: u8 = 8;
const T_FILE_FAILED: u8 = 9;
const T_ERROR: u8 = 10;
const T_BYE: u8 = 11;
const T_STAT: u8 = 12;
const T_STAT_REPLY: u8 = 13;
const T_MAKE_DIR: u8 = 14;
const T_SYMLINK: u8 = 15;
const T_ENTRY_DONE: u8 = 16;
const T_FILE_CANCEL: u8 = 17;

/// Header bytes of a `NewBlock` frame before its data: type, file,
/// offset, crc.
const BLOCK_HEADER: usize = 1 + 4 + 8 + 4;

struct Enc<'a>(&'a mut Vec<u8>);

impl Enc<'_> {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u16(&mut self, v: u16) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }
    /// A length-prefixed byte string, cut at `max` (callers check bounds
    /// before encoding; cutting keeps the frame decodable regardless).
    fn bytes(&mut self, v: &[u8], max: usize) {
        let v = &v[..v.len().min(max)];
        self.u16(v.len() as u16);
        self.0.extend_from_slice(v);
    }
    fn str(&mut self, v: &str, max: usize) {
        let mut end = v.len().min(max);
        while !v.is_char_boundary(end) {
            end -= 1;
        }
        self.bytes(&v.as_bytes()[..end], max);
    }
}

impl Message {
    /// The message's name, for errors and logs.
    pub fn name(&self) -> &'static str {
        match self {
            Message::Hello { .. } => "Hello",
            Message::Welcome { .. } => "Welcome",
            Message::NewFile { .. } => "NewFile",
            Message::Stat { .. } => "Stat",
            Message::StatReply { .. } => "StatReply",
            Message::MakeDir { .. } => "MakeDir",
            Message::Symlink { .. } => "Symlink",
            Message::EntryDone { .. } => "EntryDone",
            Message::FileCancel { .. } => "FileCancel",
            Message::FileId { .. } => "FileId",
            Message::NewBlock { .. } => "NewBlock",
            Message::BlockDone { .. } => "BlockDone",
            Message::FileDone { .. } => "FileDone",
            Message::FileOk { .. } => "FileOk",
            Message::FileFailed { .. } => "FileFailed",
            Message::Error { .. } => "Error",
            Message::Bye => "Bye",
        }
    }

    /// Append this message as one frame (length prefix included). Strings
    /// over their bound are cut to it; a block over [`MAX_OBJECT`] or a
    /// `Stat`/`StatReply` over [`MAX_STAT`] is the caller's bug and panics.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(&[0; 4]);
        let mut e = Enc(out);
        match self {
            Message::Hello {
                version,
                token,
                session,
                dest,
            } => {
                e.u8(T_HELLO);
                e.u16(*version);
                e.bytes(token, MAX_TOKEN);
                e.u64(*session);
                e.str(dest, MAX_PATH);
            }
            Message::Welcome { version, session } => {
                e.u8(T_WELCOME);
                e.u16(*version);
                e.u64(*session);
            }
            Message::NewFile {
                req,
                path,
                size,
                mode,
                mtime_sec,
                mtime_nsec,
                resume,
            } => {
                e.u8(T_NEW_FILE);
                e.u32(*req);
                e.str(path, MAX_PATH);
                e.u64(*size);
                e.u32(*mode);
                e.u64(*mtime_sec as u64);
                e.u32(*mtime_nsec);
                e.u8(u8::from(*resume));
            }
            Message::Stat {
                req,
                checksum,
                files,
            } => {
                assert!(files.len() <= MAX_STAT, "Stat over MAX_STAT");
                e.u8(T_STAT);
                e.u32(*req);
                e.u8(u8::from(*checksum));
                e.u16(files.len() as u16);
                for (path, size) in files {
                    e.str(path, MAX_PATH);
                    e.u64(*size);
                }
            }
            Message::StatReply { req, entries } => {
                assert!(entries.len() <= MAX_STAT, "StatReply over MAX_STAT");
                e.u8(T_STAT_REPLY);
                e.u32(*req);
                e.u16(entries.len() as u16);
                for entry in entries {
                    match *entry {
                        DestStat::Absent => e.u8(0),
                        DestStat::File {
                            size,
                            mtime_sec,
                            mtime_nsec,
                            crc,
                        } => {
                            e.u8(if crc.is_some() { 2 } else { 1 });
                            e.u64(size);
                            e.u64(mtime_sec as u64);
                            e.u32(mtime_nsec);
                            if let Some(crc) = crc {
                                e.u32(crc);
                            }
                        }
                    }
                }
            }
            Message::MakeDir { req, path } => {
                e.u8(T_MAKE_DIR);
                e.u32(*req);
                e.str(path, MAX_PATH);
            }
            Message::Symlink { req, path, target } => {
                e.u8(T_SYMLINK);
                e.u32(*req);
                e.str(path, MAX_PATH);
                e.str(target, MAX_PATH);
            }
            Message::EntryDone { req, failure } => {
                e.u8(T_ENTRY_DONE);
                e.u32(*req);
                e.u8(u8::from(failure.is_some()));
                if let Some(f) = failure {
                    e.str(f, MAX_TEXT);
                }
            }
            Message::FileCancel { file, reason } => {
                e.u8(T_FILE_CANCEL);
                e.u32(*file);
                e.str(reason, MAX_TEXT);
            }
            Message::FileId { req, file, resumed } => {
                e.u8(T_FILE_ID);
                e.u32(*req);
                e.u32(*file);
                e.u8(u8::from(*resumed));
            }
            Message::NewBlock {
                file,
                offset,
                crc,
                data,
            } => {
                assert!(data.len() <= MAX_OBJECT, "block over MAX_OBJECT");
                e.u8(T_NEW_BLOCK);
                e.u32(*file);
                e.u64(*offset);
                e.u32(*crc);
                e.0.extend_from_slice(data);
            }
            Message::BlockDone { file, offset } => {
                e.u8(T_BLOCK_DONE);
                e.u32(*file);
                e.u64(*offset);
            }
            Message::FileDone { file, size, crc } => {
                e.u8(T_FILE_DONE);
                e.u32(*file);
                e.u64(*size);
                e.u32(*crc);
            }
            Message::FileOk { file } => {
                e.u8(T_FILE_OK);
                e.u32(*file);
            }
            Message::FileFailed { file, reason } => {
                e.u8(T_FILE_FAILED);
                e.u32(*file);
                e.str(reason, MAX_TEXT);
            }
            Message::Error { code, message } => {
                e.u8(T_ERROR);
                e.u16(*code);
                e.str(message, MAX_TEXT);
            }
            Message::Bye => e.u8(T_BYE),
        }
        let len = (out.len() - start - 4) as u32;
        out[start..start + 4].copy_from_slice(&len.to_be_bytes());
    }

    /// Decode one frame's body (the bytes after the length prefix).
    pub fn decode(body: &[u8]) -> Result<Message, WireError> {
        let mut d = Dec(body);
        let kind = d.u8("type")?;
        let msg = match kind {
            T_HELLO => Message::Hello {
                version: d.u16("version")?,
                token: d.bytes("token", MAX_TOKEN)?.to_vec(),
                session: d.u64("session")?,
                dest: d.str("destination", MAX_PATH)?,
            },
            T_WELCOME => Message::Welcome {
                version: d.u16("version")?,
                session: d.u64("session")?,
            },
            T_NEW_FILE => Message::NewFile {
                req: d.u32("request")?,
                path: d.str("path", MAX_PATH)?,
                size: d.u64("size")?,
                mode: d.u32("mode")?,
                mtime_sec: d.u64("mtime")? as i64,
                mtime_nsec: d.u32("mtime")?,
                resume: d.flag("resume")?,
            },
            T_STAT => {
                let req = d.u32("request")?;
                let checksum = d.flag("checksum")?;
                let n = d.count("paths")?;
                let mut files = Vec::with_capacity(n);
                for _ in 0..n {
                    files.push((d.str("path", MAX_PATH)?, d.u64("size")?));
                }
                Message::Stat {
                    req,
                    checksum,
                    files,
                }
            }
            T_STAT_REPLY => {
                let req = d.u32("request")?;
                let n = d.count("entries")?;
                let mut entries = Vec::with_capacity(n);
                for _ in 0..n {
                    entries.push(match d.u8("entry")? {
                        0 => DestStat::Absent,
                        kind @ (1 | 2) => DestStat::File {
                            size: d.u64("size")?,
                            mtime_sec: d.u64("mtime")? as i64,
                            mtime_nsec: d.u32("mtime")?,
                            crc: if kind == 2 { Some(d.u32("crc")?) } else { None },
                        },
                        b => return Err(WireError::BadFlag(b)),
                    });
                }
                Message::StatReply { req, entries }
            }
            T_MAKE_DIR => Message::MakeDir {
                req: d.u32("request")?,
                path: d.str("path", MAX_PATH)?,
            },
            T_SYMLINK => Message::Symlink {
                req: d.u32("request")?,
                path: d.str("path", MAX_PATH)?,
                target: d.str("link target", MAX_PATH)?,
            },
            T_ENTRY_DONE => {
                let req = d.u32("request")?;
                let failure = if d.flag("failure")? {
                    Some(d.str("failure", MAX_TEXT)?)
                } else {
                    None
                };
                Message::EntryDone { req, failure }
            }
            T_FILE_CANCEL => Message::FileCancel {
                file: d.u32("file")?,
                reason: d.str("reason", MAX_TEXT)?,
            },
            T_FILE_ID => Message::FileId {
                req: d.u32("request")?,
                file: d.u32("file")?,
                resumed: d.flag("resumed")?,
            },
            T_NEW_BLOCK => {
                let file = d.u32("file")?;
                let offset = d.u64("offset")?;
                let crc = d.u32("crc")?;
                let data = std::mem::take(&mut d.0);
                if data.len() > MAX_OBJECT {
                    return Err(WireError::TooLong {
                        field: "block",
                        len: data.len(),
                        max: MAX_OBJECT,
                    });
                }
                Message::NewBlock {
                    file,
                    offset,
                    crc,
                    data: data.to_vec(),
                }
            }
            T_BLOCK_DONE => Message::BlockDone {
                file: d.u32("file")?,
                offset: d.u64("offset")?,
            },
            T_FILE_DONE => Message::FileDone {
                file: d.u32("file")?,
                size: d.u64("size")?,
                crc: d.u32("crc")?,
            },
            T_FILE_OK => Message::FileOk {
                file: d.u32("file")?,
            },
            T_FILE_FAILED => Message::FileFailed {
                file: d.u32("file")?,
                reason: d.str("reason", MAX_TEXT)?,
            },
            T_ERROR => Message::Error {
                code: d.u16("code")?,
                message: d.str("message", MAX_TEXT)?,
            },
            T_BYE => Message::Bye,
            other => return Err(WireError::UnknownType(other)),
        };
        if !d.0.is_empty() {
            return Err(WireError::Trailing(d.0.len(), msg.name()));
        }
        Ok(msg)
    }
}

struct Dec<'a>(&'a [u8]);

impl<'a> Dec<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], WireError> {
        if self.0.len() < n {
            return Err(WireError::Truncated(what));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    fn u8(&mut self, what: &'static str) -> Result<u8, WireError> {
        Ok(self.take(1, what)?[0])
    }
    fn u16(&mut self, what: &'static str) -> Result<u16, WireError> {
        let b = self.take(2, what)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }
    fn u32(&mut self, what: &'static str) -> Result<u32, WireError> {
        let mut a = [0; 4];
        a.copy_from_slice(self.take(4, what)?);
        Ok(u32::from_be_bytes(a))
    }
    fn u64(&mut self, what: &'static str) -> Result<u64, WireError> {
        let mut a = [0; 8];
        a.copy_from_slice(self.take(8, what)?);
        Ok(u64::from_be_bytes(a))
    }
    /// A 2-byte count of list entries, at most [`MAX_STAT`].
    fn count(&mut self, what: &'static str) -> Result<usize, WireError> {
        let n = usize::from(self.u16(what)?);
        if n > MAX_STAT {
            return Err(WireError::TooLong {
                field: what,
                len: n,
                max: MAX_STAT,
            });
        }
        Ok(n)
    }
    fn flag(&mut self, what: &'static str) -> Result<bool, WireError> {
        match self.u8(what)? {
            0 => Ok(false),
            1 => Ok(true),
            b => Err(WireError::BadFlag(b)),
        }
    }
    fn bytes(&mut self, what: &'static str, max: usize) -> Result<&'a [u8], WireError> {
        let len = usize::from(self.u16(what)?);
        if len > max {
            return Err(WireError::TooLong {
                field: what,
                len,
                max,
            });
        }
        self.take(len, what)
    }
    fn str(&mut self, what: &'static str, max: usize) -> Result<String, WireError> {
        let b = self.bytes(what, max)?;
        std::str::from_utf8(b)
            .map(str::to_owned)
            .map_err(|_| WireError::NotUtf8(what))
    }
}

/// A `NewBlock` whose data borrows from the frame it came in.
#[derive(Debug, PartialEq, Eq)]
pub struct BlockRef<'a> {
    /// File id.
    pub file: u32,
    /// Byte offset in the file.
    pub offset: u64,
    /// crc32c of `data`.
    pub crc: u32,
    /// The bytes.
    pub data: &'a [u8],
}

/// Decode a frame body as a `NewBlock` without copying its data (the
/// sink's write path); `None` when it is another type of message.
pub fn decode_block(body: &[u8]) -> Option<Result<BlockRef<'_>, WireError>> {
    if body.first() != Some(&T_NEW_BLOCK) {
        return None;
    }
    let mut d = Dec(&body[1..]);
    Some((|| {
        let file = d.u32("file")?;
        let offset = d.u64("offset")?;
        let crc = d.u32("crc")?;
        let data = d.0;
        if data.len() > MAX_OBJECT {
            return Err(WireError::TooLong {
                field: "block",
                len: data.len(),
                max: MAX_OBJECT,
            });
        }
        Ok(BlockRef {
            file,
            offset,
            crc,
            data,
        })
    })())
}

/// Write the frame of a `NewBlock` without copying `data` into a message.
pub fn block_header(file: u32, offset: u64, crc: u32, len: usize) -> [u8; 4 + BLOCK_HEADER] {
    assert!(len <= MAX_OBJECT, "block over MAX_OBJECT");
    let mut h = [0; 4 + BLOCK_HEADER];
    h[..4].copy_from_slice(&((BLOCK_HEADER + len) as u32).to_be_bytes());
    h[4] = T_NEW_BLOCK;
    h[5..9].copy_from_slice(&file.to_be_bytes());
    h[9..17].copy_from_slice(&offset.to_be_bytes());
    h[17..21].copy_from_slice(&crc.to_be_bytes());
    h
}

/// Read one frame body into `buf` (reused between calls). `Ok(false)` at a
/// clean end of stream before any byte of a frame; a stream that ends
/// inside a frame, or a length outside `1..=MAX_FRAME`, is an error.
pub fn read_frame(r: &mut impl Read, buf: &mut Vec<u8>) -> io::Result<bool> {
    let Some(n) = read_frame_len(r)? else {
        return Ok(false);
    };
    // Every byte is overwritten by the read: only growth is zero-filled.
    if buf.len() > n {
        buf.truncate(n);
    } else {
        buf.resize(n, 0);
    }
    r.read_exact(buf).map_err(body_eof)?;
    Ok(true)
}

/// A frame's length, checked; `None` at a clean end of stream.
fn read_frame_len(r: &mut impl Read) -> io::Result<Option<usize>> {
    let mut len = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        match r.read(&mut len[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err(truncated("frame length")),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let n = u32::from_be_bytes(len) as usize;
    if n == 0 || n > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            WireError::FrameSize(n),
        ));
    }
    Ok(Some(n))
}

fn body_eof(e: io::Error) -> io::Error {
    if e.kind() == io::ErrorKind::UnexpectedEof {
        truncated("frame body")
    } else {
        e
    }
}

/// What [`read_frame_or_block`] read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Frame {
    /// The stream ended cleanly before a frame.
    End,
    /// A frame other than a well-formed `NewBlock` header: its body is in
    /// `buf`, for [`decode_block`] or [`Message::decode`].
    Body,
    /// A `NewBlock`: its data is in `data`.
    Block {
        /// File id.
        file: u32,
        /// Byte offset in the file.
        offset: u64,
        /// crc32c of the data.
        crc: u32,
    },
}

/// Read one frame as [`read_frame`] does, except that a `NewBlock`'s data
/// is read into `data`, an aligned buffer the sink can write to disk with
/// `O_DIRECT` as it is: the bytes are copied once, from the TLS layer's
/// plaintext into `data`. The same frames are accepted and refused as by
/// [`read_frame`] followed by [`decode_block`].
pub fn read_frame_or_block(
    r: &mut impl Read,
    buf: &mut Vec<u8>,
    data: &mut crate::direct::AlignedBuf,
) -> io::Result<Frame> {
    let Some(n) = read_frame_len(r)? else {
        return Ok(Frame::End);
    };
    let mut head = [0u8; BLOCK_HEADER];
    r.read_exact(&mut head[..1]).map_err(body_eof)?;
    if head[0] == T_NEW_BLOCK && n >= BLOCK_HEADER {
        r.read_exact(&mut head[1..]).map_err(body_eof)?;
        let len = n - BLOCK_HEADER;
        if len > MAX_OBJECT {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                WireError::TooLong {
                    field: "block",
                    len,
                    max: MAX_OBJECT,
                },
            ));
        }
        data.set_len(len);
        r.read_exact(data.as_mut_slice()).map_err(body_eof)?;
        let [_, f0, f1, f2, f3, o0, o1, o2, o3, o4, o5, o6, o7, c0, c1, c2, c3] = head;
        return Ok(Frame::Block {
            file: u32::from_be_bytes([f0, f1, f2, f3]),
            offset: u64::from_be_bytes([o0, o1, o2, o3, o4, o5, o6, o7]),
            crc: u32::from_be_bytes([c0, c1, c2, c3]),
        });
    }
    buf.clear();
    buf.resize(n, 0);
    buf[0] = head[0];
    r.read_exact(&mut buf[1..]).map_err(body_eof)?;
    Ok(Frame::Body)
}

fn truncated(what: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::UnexpectedEof, WireError::Truncated(what))
}

/// Read and decode one message; `Ok(None)` at a clean end of stream.
pub fn read_message(r: &mut impl Read, buf: &mut Vec<u8>) -> io::Result<Option<Message>> {
    if !read_frame(r, buf)? {
        return Ok(None);
    }
    Message::decode(buf)
        .map(Some)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn samples() -> Vec<Message> {
        vec![
            Message::Hello {
                version: VERSION,
                token: b"secret".to_vec(),
                session: 0,
                dest: "runs/a".into(),
            },
            Message::Welcome {
                version: VERSION,
                session: 42,
            },
            Message::NewFile {
                req: 7,
                path: "d/ü.dat".into(),
                size: 5 << 30,
                mode: 0o640,
                mtime_sec: -5,
                mtime_nsec: 999_999_999,
                resume: true,
            },
            Message::FileId {
                req: 7,
                file: 3,
                resumed: false,
            },
            Message::NewBlock {
                file: 3,
                offset: 1 << 20,
                crc: 0xdead_beef,
                data: vec![9; 1000],
            },
            Message::BlockDone {
                file: 3,
                offset: 1 << 20,
            },
            Message::FileDone {
                file: 3,
                size: 10,
                crc: 1,
            },
            Message::FileOk { file: 3 },
            Message::FileFailed {
                file: 3,
                reason: "crc".into(),
            },
            Message::Error {
                code: ErrorCode::BadPath as u16,
                message: "no".into(),
            },
            Message::Bye,
            Message::Stat {
                req: 9,
                checksum: true,
                files: vec![("a/b".into(), 5), ("c".into(), 0)],
            },
            Message::StatReply {
                req: 9,
                entries: vec![
                    DestStat::Absent,
                    DestStat::File {
                        size: 5,
                        mtime_sec: -1,
                        mtime_nsec: 7,
                        crc: None,
                    },
                    DestStat::File {
                        size: 0,
                        mtime_sec: 1,
                        mtime_nsec: 0,
                        crc: Some(3),
                    },
                ],
            },
            Message::MakeDir {
                req: 1,
                path: "d/e".into(),
            },
            Message::Symlink {
                req: 2,
                path: "d/l".into(),
                target: "/etc/passwd".into(),
            },
            Message::EntryDone {
                req: 2,
                failure: None,
            },
            Message::EntryDone {
                req: 2,
                failure: Some("exists".into()),
            },
            Message::FileCancel {
                file: 3,
                reason: "grew".into(),
            },
        ]
    }

    #[test]
    fn every_message_round_trips_through_a_stream() {
        let mut stream = Vec::new();
        for m in samples() {
            m.encode(&mut stream);
        }
        let mut r = &stream[..];
        let mut buf = Vec::new();
        for m in samples() {
            assert_eq!(read_message(&mut r, &mut buf).unwrap(), Some(m));
        }
        assert_eq!(read_message(&mut r, &mut buf).unwrap(), None);
    }

    #[test]
    fn decode_block_borrows_what_decode_copies() {
        let m = Message::NewBlock {
            file: 1,
            offset: 2,
            crc: 3,
            data: vec![4; 5],
        };
        let mut out = Vec::new();
        m.encode(&mut out);
        let b = decode_block(&out[4..]).unwrap().unwrap();
        assert_eq!((b.file, b.offset, b.crc, b.data), (1, 2, 3, &[4u8; 5][..]));
        assert!(decode_block(&out[4..10]).unwrap().is_err());
        let mut bye = Vec::new();
        Message::Bye.encode(&mut bye);
        assert!(decode_block(&bye[4..]).is_none());
    }

    #[test]
    fn block_header_matches_the_encoder() {
        let m = Message::NewBlock {
            file: 1,
            offset: 2,
            crc: 3,
            data: vec![4; 5],
        };
        let mut a = Vec::new();
        m.encode(&mut a);
        let mut b = block_header(1, 2, 3, 5).to_vec();
        b.extend_from_slice(&[4; 5]);
        assert_eq!(a, b);
    }

    #[test]
    fn bad_frames_are_errors() {
        let mut buf = Vec::new();
        // Oversized length: refused before allocating.
        let big = ((MAX_FRAME + 1) as u32).to_be_bytes();
        let e = read_frame(&mut &big[..], &mut buf).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert!(buf.capacity() < 1024);
        // Zero length.
        assert!(read_frame(&mut &[0u8, 0, 0, 0][..], &mut buf).is_err());
        // Ends inside the length or the body.
        assert!(read_frame(&mut &[0u8, 0][..], &mut buf).is_err());
        assert!(read_frame(&mut &[0u8, 0, 0, 9, 1][..], &mut buf).is_err());
        // Unknown type, trailing bytes, truncated field, bad flag.
        assert_eq!(Message::decode(&[99]), Err(WireError::UnknownType(99)));
        assert_eq!(
            Message::decode(&[T_BYE, 0]),
            Err(WireError::Trailing(1, "Bye"))
        );
        assert!(matches!(
            Message::decode(&[T_FILE_OK, 0, 0]),
            Err(WireError::Truncated(_))
        ));
        assert_eq!(
            Message::decode(&[T_FILE_ID, 0, 0, 0, 1, 0, 0, 0, 2, 7]),
            Err(WireError::BadFlag(7))
        );
        // A string whose declared length exceeds its bound.
        let mut body = vec![T_ERROR, 0, 1];
        body.extend_from_slice(&((MAX_TEXT + 1) as u16).to_be_bytes());
        body.extend(std::iter::repeat_n(b'x', MAX_TEXT + 1));
        assert!(matches!(
            Message::decode(&body),
            Err(WireError::TooLong { .. })
        ));
        // Not UTF-8.
        let body = [T_ERROR, 0, 1, 0, 1, 0xff];
        assert_eq!(Message::decode(&body), Err(WireError::NotUtf8("message")));
        // A Stat or StatReply that lists more than MAX_STAT entries, and an
        // entry kind that does not exist.
        let over = ((MAX_STAT + 1) as u16).to_be_bytes();
        let body = [T_STAT, 0, 0, 0, 1, 0, over[0], over[1]];
        assert!(matches!(
            Message::decode(&body),
            Err(WireError::TooLong { max: MAX_STAT, .. })
        ));
        let body = [T_STAT_REPLY, 0, 0, 0, 1, over[0], over[1]];
        assert!(matches!(
            Message::decode(&body),
            Err(WireError::TooLong { max: MAX_STAT, .. })
        ));
        let body = [T_STAT_REPLY, 0, 0, 0, 1, 0, 1, 3];
        assert_eq!(Message::decode(&body), Err(WireError::BadFlag(3)));
    }

    /// A message read with [`read_frame_or_block`], as [`read_message`]
    /// would return it.
    fn read_split(
        r: &mut impl Read,
        buf: &mut Vec<u8>,
        data: &mut crate::direct::AlignedBuf,
    ) -> io::Result<Option<Message>> {
        match read_frame_or_block(r, buf, data)? {
            Frame::End => Ok(None),
            Frame::Block { file, offset, crc } => Ok(Some(Message::NewBlock {
                file,
                offset,
                crc,
                data: data.as_slice().to_vec(),
            })),
            Frame::Body => Message::decode(buf)
                .map(Some)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e)),
        }
    }

    /// Both readers over the same bytes: the same messages, then the same
    /// end or the same kind of error.
    fn same_readings(stream: &[u8]) {
        let (mut a, mut b) = (stream, stream);
        let (mut buf_a, mut buf_b) = (Vec::new(), Vec::new());
        let mut data = crate::direct::AlignedBuf::new();
        loop {
            let x = read_message(&mut a, &mut buf_a);
            let y = read_split(&mut b, &mut buf_b, &mut data);
            match (x, y) {
                (Ok(Some(x)), Ok(Some(y))) => assert_eq!(x, y),
                (Ok(None), Ok(None)) => return,
                (Err(x), Err(y)) => return assert_eq!(x.kind(), y.kind(), "{x} / {y}"),
                (x, y) => panic!("{x:?} / {y:?}"),
            }
        }
    }

    #[test]
    fn the_block_reader_reads_what_read_message_reads() {
        let mut stream = Vec::new();
        for m in samples() {
            m.encode(&mut stream);
        }
        same_readings(&stream);
        // A NewBlock frame too short for its header, and one cut short.
        same_readings(&[0, 0, 0, 3, T_NEW_BLOCK, 0, 0]);
        let mut block = Vec::new();
        samples()[4].encode(&mut block);
        for cut in 0..block.len() {
            same_readings(&block[..cut]);
        }
        // Data over MAX_OBJECT (a frame within MAX_FRAME).
        let mut big = ((MAX_OBJECT + 1 + BLOCK_HEADER) as u32)
            .to_be_bytes()
            .to_vec();
        big.push(T_NEW_BLOCK);
        big.resize(big.len() + 16 + MAX_OBJECT + 1, 0);
        same_readings(&big);
    }

    proptest! {
        #[test]
        fn both_readers_agree_on_any_bytes(
            stream in proptest::collection::vec(any::<u8>(), 0..200),
        ) {
            same_readings(&stream);
        }

        #[test]
        fn decode_never_panics(body in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = Message::decode(&body);
        }

        #[test]
        fn decode_never_panics_on_valid_prefixes(cut in 0usize..64, which in 0usize..18) {
            let mut out = Vec::new();
            samples()[which].encode(&mut out);
            let body = &out[4..];
            let cut = cut.min(body.len());
            let _ = Message::decode(&body[..cut]);
        }
    }
}
