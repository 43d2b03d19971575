//! One connection to the sink: its token check, then the requests of the
//! wire protocol (entries, data, finish) until the source hangs up, each
//! file made durable and put in place by `finish`.

use super::*;

pub(super) struct Conn<'a> {
    shared: &'a Shared,
    writer: Writer,
    session: Option<Arc<Session>>,
    /// This connection carried a block (counted once in the stats).
    carried_blocks: bool,
}

pub(super) fn refuse(writer: &Writer, code: ErrorCode, message: String) -> io::Error {
    let _ = writer.message(&Message::Error {
        code: code as u16,
        message: message.clone(),
    });
    writer.close();
    io::Error::new(io::ErrorKind::PermissionDenied, message)
}

pub(super) fn same_token(a: &[u8], b: &[u8]) -> bool {
    // Constant time in the contents (the length is not secret).
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

pub(super) fn serve_connection(shared: &Shared, tcp: TcpStream) -> io::Result<()> {
    let channel = match Channel::server(tcp, Arc::clone(&shared.options.tls)) {
        Ok(c) => c,
        Err(e) => {
            shared.stats.refused.fetch_add(1, Ordering::Relaxed);
            return Err(io::Error::new(e.kind(), format!("TLS handshake: {e}")));
        }
    };
    let Channel { mut reader, writer } = channel;
    let mut conn = Conn {
        shared,
        writer,
        session: None,
        carried_blocks: false,
    };
    let mut buf = Vec::new();
    let result = conn.hello(&mut reader, &mut buf).and_then(|()| {
        shared.stats.connections.fetch_add(1, Ordering::Relaxed);
        conn.serve(&mut reader, &mut buf)
    });
    if result.is_err() {
        conn.writer.abort();
    }
    result
}

impl Conn<'_> {
    fn hello(&mut self, reader: &mut impl Read, buf: &mut Vec<u8>) -> io::Result<()> {
        let refused = |e| {
            self.shared.stats.refused.fetch_add(1, Ordering::Relaxed);
            e
        };
        let msg = wire::read_message(reader, buf)
            .map_err(|e| refused(refuse(&self.writer, ErrorCode::Protocol, e.to_string())))?;
        let Some(Message::Hello {
            version,
            token,
            session,
            dest,
        }) = msg
        else {
            return Err(refused(refuse(
                &self.writer,
                ErrorCode::Protocol,
                "expected Hello".into(),
            )));
        };
        if version != wire::VERSION {
            return Err(refused(refuse(
                &self.writer,
                ErrorCode::Version,
                format!(
                    "protocol version {version} not supported (this sink speaks {})",
                    wire::VERSION
                ),
            )));
        }
        if let Some(want) = &self.shared.options.token {
            if !same_token(want, &token) {
                return Err(refused(refuse(
                    &self.writer,
                    ErrorCode::Unauthenticated,
                    "bad token".into(),
                )));
            }
        }
        let dest =
            components(&dest).map_err(|e| refused(refuse(&self.writer, ErrorCode::BadPath, e)))?;
        let session = {
            let mut sessions = sluice_env::lock(&self.shared.sessions);
            sessions.retain(|_, s| s.strong_count() > 0);
            if session == 0 {
                let id = self.shared.next_session.fetch_add(1, Ordering::Relaxed);
                let s = Arc::new(Session {
                    dest,
                    files: Mutex::new(HashMap::new()),
                    next_file: AtomicU32::new(1),
                });
                sessions.insert(id, Arc::downgrade(&s));
                (id, s)
            } else {
                let s = sessions.get(&session).and_then(Weak::upgrade);
                match s {
                    Some(s) if s.dest == dest => (session, s),
                    _ => {
                        drop(sessions);
                        return Err(refused(refuse(
                            &self.writer,
                            ErrorCode::Protocol,
                            format!("no session {session} for this destination"),
                        )));
                    }
                }
            }
        };
        self.session = Some(session.1);
        self.writer.message(&Message::Welcome {
            version: wire::VERSION,
            session: session.0,
        })
    }

    fn serve(&mut self, reader: &mut impl Read, buf: &mut Vec<u8>) -> io::Result<()> {
        // Blocks, nearly every frame, are read into an aligned buffer and
        // handed to a writer thread with it (written directly, when the
        // sink syncs); the next frame goes into another buffer meanwhile.
        let queue = Arc::new(BlockQueue::new(self.writer.clone()));
        let refused = || io::Error::new(io::ErrorKind::PermissionDenied, "a block failed");
        let mut data = queue.take().ok_or_else(refused)?;
        loop {
            match wire::read_frame_or_block(reader, buf, &mut data) {
                Ok(Frame::Block { file, offset, crc }) => {
                    let block = std::mem::take(&mut data);
                    self.queue_block(&queue, file, offset, crc, block)?;
                    data = queue.take().ok_or_else(refused)?;
                    continue;
                }
                Ok(Frame::Body) => {}
                Ok(Frame::End) => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                    return Err(refuse(&self.writer, ErrorCode::Protocol, e.to_string()));
                }
                Err(_) if queue.failed() => return Err(refused()),
                Err(e) => return Err(e),
            }
            if queue.failed() {
                return Err(refused());
            }
            // Every other message. `read_frame_or_block` returns every frame
            // typed NewBlock that holds a block header as a block, so one
            // that reaches `decode` is too short and refused here, as the
            // decoder words it.
            let msg = Message::decode(buf)
                .map_err(|e| refuse(&self.writer, ErrorCode::Protocol, e.to_string()))?;
            match msg {
                Message::NewFile {
                    req,
                    path,
                    size,
                    mode,
                    mtime_sec,
                    mtime_nsec,
                    resume,
                } => {
                    let mtime = Timespec {
                        tv_sec: mtime_sec,
                        tv_nsec: i64::from(mtime_nsec.min(999_999_999)) as _,
                    };
                    match self.new_file(&path, size, mode, mtime, resume) {
                        Ok((file, resumed)) => {
                            self.writer
                                .message(&Message::FileId { req, file, resumed })?
                        }
                        Err(e)
                            if e.kind() == io::ErrorKind::InvalidInput
                                || e.kind() == io::ErrorKind::PermissionDenied =>
                        {
                            return Err(refuse(
                                &self.writer,
                                ErrorCode::BadPath,
                                format!("{path:?}: {e}"),
                            ));
                        }
                        Err(e) => {
                            return Err(refuse(
                                &self.writer,
                                ErrorCode::Io,
                                format!("{path:?}: {e}"),
                            ))
                        }
                    }
                }
                Message::Stat {
                    req,
                    checksum,
                    files,
                } => {
                    let mut entries = Vec::with_capacity(files.len());
                    for (path, size) in &files {
                        let (dirs, name) = self.split(path)?;
                        let found =
                            stat_file(&self.shared.root, &dirs, &name, checksum.then_some(*size))
                                .map_err(|e| {
                                refuse(&self.writer, ErrorCode::Io, format!("{path:?}: {e}"))
                            })?;
                        entries.push(found);
                    }
                    self.writer.message(&Message::StatReply { req, entries })?;
                }
                Message::MakeDir { req, path } => {
                    let (mut dirs, name) = self.split(&path)?;
                    dirs.push(name);
                    let failure = self.entry(&path, open_dirs(&self.shared.root, &dirs))?;
                    self.writer.message(&Message::EntryDone { req, failure })?;
                }
                Message::Symlink { req, path, target } => {
                    if target.is_empty() || target.contains('\0') {
                        return Err(refuse(
                            &self.writer,
                            ErrorCode::BadPath,
                            format!("{path:?}: link target {target:?} refused"),
                        ));
                    }
                    let (dirs, name) = self.split(&path)?;
                    let made = open_dirs(&self.shared.root, &dirs)
                        .and_then(|dir| make_symlink(&dir, &name, &target));
                    let failure = self.entry(&path, made)?;
                    if failure.is_none() {
                        self.shared.stats.links.fetch_add(1, Ordering::Relaxed);
                    }
                    self.writer.message(&Message::EntryDone { req, failure })?;
                }
                Message::FileCancel { file, reason } => {
                    let f = self.take_file(file)?;
                    f.wait_writes();
                    f.discard();
                    self.shared.stats.failed.fetch_add(1, Ordering::Relaxed);
                    self.writer.message(&Message::FileFailed {
                        file,
                        reason: format!("{}: {reason}", f.name),
                    })?;
                }
                Message::FileDone { file, size, crc } => {
                    let job = Finish {
                        file: self.take_file(file)?,
                        id: file,
                        size,
                        crc,
                        writer: self.writer.clone(),
                        stats: Arc::clone(&self.shared.stats),
                        fsync: self.shared.options.fsync,
                    };
                    if self.shared.finish.send(job).is_err() {
                        return Err(io::Error::other("the finisher pool stopped"));
                    }
                }
                Message::Bye => {
                    self.writer.close();
                    return Ok(());
                }
                Message::Error { code, message } => {
                    return Err(io::Error::other(format!("peer error {code}: {message}")));
                }
                other => {
                    return Err(refuse(
                        &self.writer,
                        ErrorCode::Protocol,
                        format!("unexpected {} from a source", other.name()),
                    ));
                }
            }
        }
    }

    /// Check a block against its file and hand it to a writer thread,
    /// which checks its crc, writes it and acknowledges it.
    fn queue_block(
        &mut self,
        queue: &Arc<BlockQueue>,
        file: u32,
        offset: u64,
        crc: u32,
        data: AlignedBuf,
    ) -> io::Result<()> {
        // Counted under the files lock: once FileDone took the file, no
        // write can start that its finisher would not wait for.
        let found = sluice_env::lock(&self.session().files)
            .get(&file)
            .map(PartialCopy::begin_write);
        let f = found.ok_or_else(|| self.unknown(file))?;
        self.check_bounds(&f, file, offset, data.len())?;
        queue.sent(data.len());
        if !self.carried_blocks {
            self.carried_blocks = true;
            self.shared
                .stats
                .block_connections
                .fetch_add(1, Ordering::Relaxed);
        }
        let job = BlockJob {
            file: f,
            id: file,
            offset,
            crc,
            data,
            queue: Arc::clone(queue),
            stats: Arc::clone(&self.shared.stats),
        };
        self.shared
            .blocks
            .send(job)
            .map_err(|_| io::Error::other("the block writer pool stopped"))
    }

    fn check_bounds(&self, f: &PartialCopy, file: u32, offset: u64, len: usize) -> io::Result<()> {
        let end = offset.checked_add(len as u64);
        if end.is_none_or(|end| end > f.size) {
            return Err(refuse(
                &self.writer,
                ErrorCode::Protocol,
                format!(
                    "block at {offset}+{len} is past the end of file {file} ({} bytes)",
                    f.size
                ),
            ));
        }
        Ok(())
    }

    fn session(&self) -> &Session {
        self.session.as_deref().expect("hello sets the session")
    }

    /// Check `path` and split destination + path into the parent
    /// directories and the final name; a bad path ends the connection.
    fn split(&self, path: &str) -> io::Result<(Vec<String>, String)> {
        let mut parts = self.session().dest.clone();
        match components(path) {
            Ok(rel) if !rel.is_empty() => parts.extend(rel),
            Ok(_) => {
                return Err(refuse(
                    &self.writer,
                    ErrorCode::BadPath,
                    "empty path".into(),
                ))
            }
            Err(e) => return Err(refuse(&self.writer, ErrorCode::BadPath, e)),
        }
        let name = parts.pop().expect("not empty");
        Ok((parts, name))
    }

    /// The outcome of a `MakeDir` or `Symlink`: a path through a symlink
    /// ends the connection as `NewFile` does; other errors are the
    /// entry's failure.
    fn entry<T>(&self, path: &str, made: io::Result<T>) -> io::Result<Option<String>> {
        match made {
            Ok(_) => Ok(None),
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => Err(refuse(
                &self.writer,
                ErrorCode::BadPath,
                format!("{path:?}: {e}"),
            )),
            Err(e) => Ok(Some(format!("{path}: {e}"))),
        }
    }

    fn new_file(
        &self,
        path: &str,
        size: u64,
        mode: u32,
        mtime: Timespec,
        resume: bool,
    ) -> io::Result<(u32, bool)> {
        let session = self.session();
        let mut parts = session.dest.clone();
        let rel = components(path).map_err(other)?;
        if rel.is_empty() {
            return Err(other("empty file path".into()));
        }
        parts.extend(rel);
        let name = parts.pop().expect("not empty");
        let dir = open_dirs(&self.shared.root, &parts)?;
        let direct = self.shared.options.fsync && self.shared.options.direct;
        let f = PartialCopy::create(dir, name, size, mode, mtime, resume, direct)?;
        let resumed = f.resumed;
        let id = session.next_file.fetch_add(1, Ordering::Relaxed);
        let f = Arc::new(f);
        sluice_env::lock(&self.session().files).insert(id, f);
        Ok((id, resumed))
    }

    fn unknown(&self, id: u32) -> io::Error {
        refuse(
            &self.writer,
            ErrorCode::Protocol,
            format!("unknown file id {id}"),
        )
    }

    /// The open file `id`, forgotten (its `FileDone` arrived).
    fn take_file(&self, id: u32) -> io::Result<Arc<PartialCopy>> {
        let found = sluice_env::lock(&self.session().files).remove(&id);
        found.ok_or_else(|| self.unknown(id))
    }
}
