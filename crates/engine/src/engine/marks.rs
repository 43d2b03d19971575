//! Where on-demand's held marks live (issue 34; docs/fuse.md "On demand",
//! the choice in docs/decisions.md): the extended attribute
//! [`HELD_XATTR`] on the capacity file, or a *sidecar entry*
//! `.sluice/held/INO` on the capacity tier where that tier keeps no user
//! xattrs. held.rs decides when a mark is set, rewritten, read and
//! removed; this module only keeps it, in one of the two stores
//! ([`MarkStore`]), behind the same few calls.
//!
//! The sidecar entry is keyed by the capacity file's inode number, which
//! survives another node's rename of the file or of a directory above it.
//! Its first [`SECTOR`] bytes are the mark's value ([`Mark::encode`]),
//! padded with spaces, then ` sum=` and the 16 hex digits of its FNV-1a
//! hash and a newline; `path=PATH` follows (for an operator only).
//!
//! INVARIANTS (sidecar):
//! - an entry `.sluice/held/INO` is only ever made by `link(2)` of an entry
//!   written whole and synced under its node's own name `INO-NODE`, so a
//!   reader never sees one half written and two nodes never both make it;
//!   the directory is synced before [`MarkStore::set`] returns;
//! - an entry is removed only by the node it names, and only when it is
//!   the very file of that node's `INO-NODE` (or names that node and has
//!   lost its `INO-NODE`): no node removes another's entry;
//! - a rewrite changes the first sector only, in one write, so an entry
//!   read whole (its sum right) is one that was written.

use std::collections::HashSet;
use std::io;
use std::sync::Arc;

use sluice_env::{Backend, BackendFile, OpenOptions, RelPath, Stat, XattrFlags};

use super::config::HeldMark;
use super::context;
use super::held::{Mark, HELD_XATTR, HIDDEN_DIR};
use super::read::read_fully;

/// Where held marks live on a capacity tier (`mount.held_mark`, resolved
/// at mount: [`resolve`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MarkStore {
    /// The extended attribute [`HELD_XATTR`] of the capacity file.
    Xattr,
    /// A sidecar entry `.sluice/held/INO` on the capacity tier.
    Sidecar,
}

impl MarkStore {
    /// The name `mount.held_mark`, `.sluice/held-mark` and `sluice status`
    /// give it.
    pub fn name(self) -> &'static str {
        match self {
            MarkStore::Xattr => "xattr",
            MarkStore::Sidecar => "sidecar",
        }
    }

    fn from_name(name: &str) -> Option<MarkStore> {
        match name {
            "xattr" => Some(MarkStore::Xattr),
            "sidecar" => Some(MarkStore::Sidecar),
            _ => None,
        }
    }
}

/// Where sidecar entries live: `SIDECAR_DIR/INO` and `SIDECAR_DIR/INO-NODE`.
pub(super) const SIDECAR_DIR: &str = ".sluice/held";

/// Where the first node records which store the tier uses.
const RECORD: &str = ".sluice/held-mark";

/// The first line of [`RECORD`]; the store's name follows.
const RECORD_MAGIC: &str = "sluice-held-mark v1";

/// The part of an entry that holds the mark and is rewritten in place:
/// one sector, which a device writes whole (docs/crash-consistency.md,
/// "Assumptions about the media").
const SECTOR: usize = 512;

/// ` sum=` + 16 hex digits + a newline, at the end of the sector.
const SUM_BYTES: usize = 22;

/// How often a reader reads an entry again whose sum is wrong (a rewrite
/// caught half done) before it calls it unreadable.
const READ_TRIES: u32 = 5;

/// An entry's bytes read at most (the sector and its path).
const ENTRY_BYTES_MAX: u64 = 8 * 1024;

/// The open capacity file a mark is set on or removed from.
pub(super) struct Marked<'a> {
    /// The capacity file's descriptor (the inode, whatever names it now).
    pub(super) handle: &'a Arc<dyn BackendFile>,
    /// Its identity (`Stat::identity`) when the tier tells one.
    pub(super) ino: Option<(u64, u64)>,
    /// The name this node knows it by.
    pub(super) path: &'a RelPath,
}

/// FNV-1a, 64 bits.
pub(super) fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn rel(path: &str) -> io::Result<RelPath> {
    RelPath::new(path)
}

fn entry_path(ino: u64) -> io::Result<RelPath> {
    rel(&format!("{SIDECAR_DIR}/{ino}"))
}

fn index_path(ino: u64, node: &str) -> io::Result<RelPath> {
    rel(&format!("{SIDECAR_DIR}/{ino}-{node}"))
}

fn no_xattr(e: &io::Error) -> bool {
    sluice_env::raw_os_error(e) == sluice_env::errno::errno_code("ENODATA")
}

fn not_found(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound
}

/// `result`, with NotFound as done.
fn gone_is_done(result: io::Result<()>) -> io::Result<()> {
    match result {
        Err(e) if !not_found(&e) => Err(e),
        _ => Ok(()),
    }
}

/// The entry's first sector for `mark`.
fn sector(mark: &Mark) -> io::Result<Vec<u8>> {
    let mut bytes = mark.encode();
    if bytes.len() > SECTOR - SUM_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("held mark longer than {} bytes", SECTOR - SUM_BYTES),
        ));
    }
    bytes.resize(SECTOR - SUM_BYTES, b' ');
    let sum = fnv1a(&bytes);
    bytes.extend_from_slice(format!(" sum={sum:016x}\n").as_bytes());
    debug_assert_eq!(bytes.len(), SECTOR);
    Ok(bytes)
}

/// The mark of an entry's bytes; `None` if its sector is not whole (a
/// rewrite caught half done, or not an entry).
fn decode_entry(bytes: &[u8]) -> Option<Mark> {
    let sector = bytes.get(..SECTOR)?;
    let (text, sum) = sector.split_at(SECTOR - SUM_BYTES);
    let sum = std::str::from_utf8(sum).ok()?;
    let sum = sum.strip_prefix(" sum=")?.strip_suffix('\n')?;
    (u64::from_str_radix(sum, 16).ok()? == fnv1a(text)).then_some(())?;
    Mark::decode(std::str::from_utf8(text).ok()?.trim_end().as_bytes())
}

impl MarkStore {
    /// The mark on the file `path` names (`None`: none, or no such file).
    pub(super) fn read(self, capacity: &dyn Backend, path: &RelPath) -> io::Result<Option<Mark>> {
        match self {
            MarkStore::Xattr => read_xattr(capacity, path),
            MarkStore::Sidecar => match capacity.stat(path) {
                Ok(st) => self.read_stat(capacity, path, &st),
                Err(e) if not_found(&e) => Ok(None),
                Err(e) => Err(e),
            },
        }
    }

    /// [`MarkStore::read`] of `path`, whose stat the caller just made.
    pub(super) fn read_stat(
        self,
        capacity: &dyn Backend,
        path: &RelPath,
        stat: &Stat,
    ) -> io::Result<Option<Mark>> {
        match self {
            MarkStore::Xattr => read_xattr(capacity, path),
            MarkStore::Sidecar if stat.kind != sluice_env::StatKind::File => Ok(None),
            MarkStore::Sidecar => read_entry(capacity, stat.ino),
        }
    }

    /// The mark on the open `file`: by its inode number where it has one
    /// (a rename by another node since this node named it does not hide
    /// it), else by its name.
    pub(super) fn read_file(
        self,
        capacity: &dyn Backend,
        file: &Marked<'_>,
    ) -> io::Result<Option<Mark>> {
        match (self, file.ino) {
            (MarkStore::Sidecar, Some((_, ino))) => read_entry(capacity, ino),
            _ => self.read(capacity, file.path),
        }
    }

    /// Set the mark of `file` to `mark` (`node`'s): `CreateOnly` fails with
    /// AlreadyExists if the file has a mark already, `Either` creates it or
    /// rewrites it. Through the file's own descriptor or inode number, so
    /// a file another node put at the name since is never marked.
    pub(super) fn set(
        self,
        capacity: &dyn Backend,
        node: &str,
        file: &Marked<'_>,
        mark: &Mark,
        flags: XattrFlags,
    ) -> io::Result<()> {
        match self {
            MarkStore::Xattr => set_xattr(capacity, file, mark, flags),
            MarkStore::Sidecar => set_entry(capacity, node, file, mark, flags),
        }
    }

    /// Remove `node`'s mark of the open `file` (a mark that is not there
    /// is removed). `unlinked`: no name reaches the file now; `named`: a
    /// name another node gave it (the xattr store's fallback by name).
    pub(super) fn remove_file(
        self,
        capacity: &dyn Backend,
        node: &str,
        file: &Marked<'_>,
        unlinked: bool,
        named: Option<&RelPath>,
    ) -> io::Result<()> {
        match self {
            MarkStore::Xattr => remove_xattr_of(capacity, file, unlinked, named),
            MarkStore::Sidecar => match file.ino {
                Some((_, ino)) => remove_entry(capacity, node, ino),
                // Never marked: setting needs the inode number.
                None => Ok(()),
            },
        }
    }

    /// Remove `node`'s mark of the file `path` names (the caller read it
    /// there and found it `node`'s, with nothing behind it).
    pub(super) fn remove_at(
        self,
        capacity: &dyn Backend,
        node: &str,
        path: &RelPath,
    ) -> io::Result<()> {
        match self {
            MarkStore::Xattr => match capacity.remove_xattr(path, HELD_XATTR) {
                Err(e) if !no_xattr(&e) && !not_found(&e) => Err(e),
                _ => Ok(()),
            },
            MarkStore::Sidecar => match capacity.stat(path) {
                Ok(st) => remove_entry(capacity, node, st.ino),
                Err(e) if not_found(&e) => Ok(()),
                Err(e) => Err(e),
            },
        }
    }

    /// At recovery, once every file this node still holds is marked again
    /// (their inode numbers `held`): remove `node`'s other sidecar entries,
    /// marks an earlier run left with nothing behind them — among them any
    /// whose file was deleted while this node was down, whose inode number
    /// another file may have taken since. Returns how many went. Nothing
    /// for the xattr store (a stale xattr goes with its inode, or at the
    /// next recall).
    pub(super) fn forget_stale(
        self,
        capacity: &dyn Backend,
        node: &str,
        held: &HashSet<u64>,
    ) -> io::Result<usize> {
        if self == MarkStore::Xattr {
            return Ok(0);
        }
        let dir = rel(SIDECAR_DIR)?;
        let mut removed = 0;
        for entry in capacity.read_dir(&dir)? {
            let Some((ino, owner)) = entry.name.split_once('-') else {
                continue;
            };
            let Ok(ino) = ino.parse::<u64>() else {
                continue;
            };
            if owner == node && !held.contains(&ino) {
                remove_entry(capacity, node, ino)?;
                removed += 1;
            }
        }
        Ok(removed)
    }
}

fn read_xattr(capacity: &dyn Backend, path: &RelPath) -> io::Result<Option<Mark>> {
    match capacity.get_xattr(path, HELD_XATTR) {
        Ok(bytes) => Mark::decode(&bytes).map(Some).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{path}: unreadable held mark {HELD_XATTR} = {:?}: remove it \
                     (setfattr -x {HELD_XATTR}) once no node holds the file",
                    String::from_utf8_lossy(&bytes)
                ),
            )
        }),
        Err(e) if no_xattr(&e) || not_found(&e) => Ok(None),
        Err(e) => Err(e),
    }
}

fn set_xattr(
    capacity: &dyn Backend,
    file: &Marked<'_>,
    mark: &Mark,
    flags: XattrFlags,
) -> io::Result<()> {
    match file.handle.set_xattr(HELD_XATTR, &mark.encode(), flags) {
        // A backend whose handles keep no xattrs: through the name, if it
        // still names the file (its identity), else NotFound.
        Err(e) if e.kind() == io::ErrorKind::Unsupported => {
            if let Some(ino) = file.ino {
                if capacity.stat(file.path)?.identity() != ino {
                    return Err(io::Error::new(
                        io::ErrorKind::NotFound,
                        format!("{} names another file now: not marked", file.path),
                    ));
                }
            }
            capacity.set_xattr(file.path, HELD_XATTR, &mark.encode(), flags)
        }
        result => result,
    }
}

/// ESTALE: a network file system's answer (GlusterFS's, NFS's) for the
/// descriptor of a file another client removed.
fn file_gone(e: &io::Error) -> bool {
    sluice_env::raw_os_error(e) == sluice_env::errno::errno_code("ESTALE")
}

fn remove_xattr_of(
    capacity: &dyn Backend,
    file: &Marked<'_>,
    unlinked: bool,
    named: Option<&RelPath>,
) -> io::Result<()> {
    // From the file's own inode, whatever names it now; by a name only
    // where handles keep no xattrs.
    match file.handle.remove_xattr(HELD_XATTR) {
        Err(e) if e.kind() == io::ErrorKind::Unsupported => {
            let names_it = |p: &RelPath| match (file.ino, capacity.stat(p)) {
                (Some(ino), Ok(st)) => st.identity() == ino,
                (None, found) => found.is_ok(),
                (_, Err(_)) => false,
            };
            let at = std::iter::once(file.path)
                .chain(named)
                .find(|p| !unlinked && names_it(p));
            match at {
                Some(at) => MarkStore::Xattr.remove_at(capacity, "", at),
                None => Ok(()),
            }
        }
        // ESTALE: the file is gone (another node removed it; GlusterFS
        // answers so for the descriptor of a file unlinked elsewhere),
        // and its mark with it.
        Err(e) if !no_xattr(&e) && !file_gone(&e) => Err(e),
        _ => Ok(()),
    }
}

/// The mark in entry `.sluice/held/INO`, if there is one.
fn read_entry(capacity: &dyn Backend, ino: u64) -> io::Result<Option<Mark>> {
    let path = entry_path(ino)?;
    let mut last = Vec::new();
    for _ in 0..READ_TRIES {
        let file = match capacity.open(&path, OpenOptions::default()) {
            Ok(file) => file,
            Err(e) if not_found(&e) => return Ok(None),
            Err(e) => return Err(e),
        };
        let len = file.len()?.min(ENTRY_BYTES_MAX);
        let mut bytes = vec![0u8; usize::try_from(len).unwrap_or(0)];
        read_fully(file.as_ref(), &mut bytes, 0)?;
        if let Some(mark) = decode_entry(&bytes) {
            return Ok(Some(mark));
        }
        last = bytes;
        std::thread::yield_now();
    }
    let shown = String::from_utf8_lossy(&last[..last.len().min(SECTOR)]).into_owned();
    Err(io::Error::new(
        io::ErrorKind::InvalidData,
        format!(
            "{path}: unreadable held mark (sidecar entry) {:?}: remove it once no \
             node holds the file of inode {ino}",
            shown.trim_end()
        ),
    ))
}

/// Whether the open `file` and `path` are one file.
fn same_file(capacity: &dyn Backend, file: &dyn BackendFile, path: &RelPath) -> io::Result<bool> {
    let here = file.stat()?.identity();
    match capacity.stat(path) {
        Ok(st) => Ok(st.identity() == here),
        Err(e) if not_found(&e) => Ok(false),
        Err(e) => Err(e),
    }
}

fn set_entry(
    capacity: &dyn Backend,
    node: &str,
    file: &Marked<'_>,
    mark: &Mark,
    flags: XattrFlags,
) -> io::Result<()> {
    let Some((_, ino)) = file.ino else {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!(
                "{}: no inode number from capacity tier {}: a sidecar held mark is keyed by it",
                file.path,
                capacity.describe()
            ),
        ));
    };
    let (entry, index) = (entry_path(ino)?, index_path(ino, node)?);
    let head = sector(mark)?;
    // A rewrite of this node's own entry: the sector in place, not synced
    // (as an xattr's change is not).
    if flags == XattrFlags::Either {
        match capacity.open(&index, OpenOptions::default()) {
            Ok(own) if same_file(capacity, own.as_ref(), &entry)? => {
                return own.write_at(&head, 0);
            }
            Ok(_) => {}
            Err(e) if not_found(&e) => {}
            Err(e) => return Err(e),
        }
    }
    // Whole under this node's own name, synced, then linked into place.
    let mut bytes = head;
    bytes.extend_from_slice(format!("path={}\n", file.path).as_bytes());
    let own = capacity.open(&index, OpenOptions::CREATE)?;
    own.write_at(&bytes, 0)?;
    own.set_len(bytes.len() as u64)?;
    own.sync_data()?;
    let dir = rel(SIDECAR_DIR)?;
    match capacity.hard_link(&index, &entry) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            if same_file(capacity, own.as_ref(), &entry)? {
                // Linked already (this node's entry from an earlier run,
                // just rewritten whole).
            } else if flags == XattrFlags::CreateOnly {
                // Another node's (or an earlier run's, without its
                // index): the caller reads it. This name goes; a crash
                // that keeps it leaves an index recovery removes.
                drop(own);
                gone_is_done(capacity.remove_file(&index))?;
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("{entry}: held mark exists"),
                ));
            } else {
                // Taken over (recovery marking what it holds): this
                // node's entry replaces the other, then gets its own
                // name back.
                capacity.rename(&index, &entry)?;
                capacity.hard_link(&entry, &index)?;
            }
        }
        Err(e) => return Err(e),
    }
    capacity.sync_dir(&dir)
}

/// Remove `node`'s entry for inode `ino` (module invariants: only its own).
fn remove_entry(capacity: &dyn Backend, node: &str, ino: u64) -> io::Result<()> {
    let (entry, index) = (entry_path(ino)?, index_path(ino, node)?);
    let stat = |p: &RelPath| match capacity.stat(p) {
        Ok(st) => Ok(Some(st.identity())),
        Err(e) if not_found(&e) => Ok(None),
        Err(e) => Err(e),
    };
    let ours = match (stat(&index)?, stat(&entry)?) {
        (Some(own), Some(at)) => own == at,
        // Its own name lost (removed by hand): the entry's word.
        (None, Some(_)) => read_entry(capacity, ino)?.is_some_and(|m| m.node == node),
        (_, None) => false,
    };
    if ours {
        gone_is_done(capacity.remove_file(&entry))?;
    }
    gone_is_done(capacity.remove_file(&index))
}

/// Make `path` and its parents on `tier`, keeping what exists.
pub(super) fn make_dirs(tier: &dyn Backend, path: &RelPath) -> io::Result<()> {
    let mut at = RelPath::root();
    for part in path.as_str().split('/') {
        at = at.join(part)?;
        match tier.create_dir(&at) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Which store this node uses on `capacity` for `wanted`
/// (`mount.held_mark`): the one recorded in [`RECORD`] if a node recorded
/// one (refused if `wanted` names the other, or this node's client cannot
/// use it), else the one `wanted` gives (`auto`: the xattr where `probe`,
/// a directory of this node's on the tier, takes a user xattr), recorded.
pub(super) fn resolve(
    capacity: &dyn Backend,
    wanted: HeldMark,
    node: &str,
    probe: &RelPath,
) -> io::Result<MarkStore> {
    let tier = capacity.describe();
    let xattrs = || probe_xattrs(capacity, probe);
    let sidecar = || probe_sidecar(capacity, node);
    let refused = |store: MarkStore, e: io::Error| {
        let why = match store {
            MarkStore::Xattr => format!(
                "held marks as user xattrs ({HELD_XATTR}) need a capacity tier that keeps \
                 them; capacity tier {tier}: {e}; set mount.held_mark = \"sidecar\" (or \
                 \"auto\"), or use mount.consistency \"close-to-open\" or \"node-local\""
            ),
            MarkStore::Sidecar => format!(
                "sidecar held marks ({SIDECAR_DIR}/INO) need a capacity tier that gives inode \
                 numbers and hard links within a directory; capacity tier {tier}: {e}; use \
                 mount.consistency \"close-to-open\" or \"node-local\" there"
            ),
        };
        io::Error::new(
            e.kind(),
            format!("mount.consistency = \"on-demand\": {why}"),
        )
    };
    // Twice at most: a node that finds no record but loses the race to
    // make it reads the winner's.
    for _ in 0..2 {
        if let Some(recorded) = read_record(capacity)? {
            let conflict = match (wanted, recorded) {
                (HeldMark::Xattr, MarkStore::Sidecar) => Some("xattr"),
                (HeldMark::Sidecar, MarkStore::Xattr) => Some("sidecar"),
                _ => None,
            };
            if let Some(setting) = conflict {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "mount.held_mark = \"{setting}\", but capacity tier {tier} records held \
                         marks as {} ({HIDDEN_DIR}/held-mark, written by the first node that \
                         mounted it on-demand): every node must read marks where the others \
                         write them; set mount.held_mark = \"auto\" or \"{}\", or, with no \
                         node mounted and no mark left, remove {HIDDEN_DIR}/held-mark",
                        recorded.name(),
                        recorded.name()
                    ),
                ));
            }
            match recorded {
                MarkStore::Xattr => xattrs(),
                MarkStore::Sidecar => sidecar(),
            }
            .map_err(|e| refused(recorded, e))?;
            return Ok(recorded);
        }
        let chosen = match wanted {
            HeldMark::Xattr => {
                xattrs().map_err(|e| refused(MarkStore::Xattr, e))?;
                MarkStore::Xattr
            }
            HeldMark::Sidecar => MarkStore::Sidecar,
            HeldMark::Auto => match xattrs() {
                Ok(()) => MarkStore::Xattr,
                Err(e) => {
                    tracing::info!(
                        error = %e,
                        tier = %tier,
                        "the capacity tier keeps no user xattrs: held marks are sidecar \
                         entries in {SIDECAR_DIR}"
                    );
                    MarkStore::Sidecar
                }
            },
        };
        if chosen == MarkStore::Sidecar {
            sidecar().map_err(|e| refused(MarkStore::Sidecar, e))?;
        }
        if write_record(capacity, node, chosen)? {
            return Ok(chosen);
        }
    }
    Err(io::Error::other(format!(
        "capacity tier {tier}: {RECORD} neither readable nor made"
    )))
}

/// A user xattr set, read back and removed on `dir` (a tier that takes
/// one and keeps nothing would lose every mark).
fn probe_xattrs(capacity: &dyn Backend, dir: &RelPath) -> io::Result<()> {
    let probe = "user.sluice.probe";
    capacity.set_xattr(dir, probe, b"1", XattrFlags::Either)?;
    let kept = capacity.get_xattr(dir, probe)?;
    capacity.remove_xattr(dir, probe)?;
    if kept == b"1" {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!("a user xattr set to \"1\" read back as {kept:?}"),
        ))
    }
}

/// The sidecar's needs: its directory, durable in its parents (an entry
/// synced into a directory a crash drops is lost with it), inode numbers
/// and hard links in it.
fn probe_sidecar(capacity: &dyn Backend, node: &str) -> io::Result<()> {
    let dir = rel(SIDECAR_DIR)?;
    make_dirs(capacity, &dir)?;
    let mut at = Some(dir.clone());
    while let Some(parent) = at.and_then(|d| d.parent()) {
        capacity.sync_dir(&parent)?;
        at = Some(parent).filter(|p| !p.is_root());
    }
    let a = dir.join(&format!(".probe-{node}"))?;
    let b = dir.join(&format!(".probe-{node}.link"))?;
    gone_is_done(capacity.remove_file(&b))?;
    drop(capacity.open(&a, OpenOptions::CREATE)?);
    let linked = capacity.hard_link(&a, &b).and_then(|()| {
        let (x, y) = (capacity.stat(&a)?, capacity.stat(&b)?);
        if x.ino == y.ino && x.ino != 0 {
            Ok(())
        } else {
            // A FUSE file system on libfuse's high-level API numbers
            // names, not files (mergerfs without `use_ino`): such a number
            // changes once the kernel forgets the name, so it keys nothing.
            Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!(
                    "two names of one file show different inode numbers ({} and {}): the \
                     tier numbers names, not files (mergerfs: mount it with -o use_ino)",
                    x.ino, y.ino
                ),
            ))
        }
    });
    gone_is_done(capacity.remove_file(&b))?;
    gone_is_done(capacity.remove_file(&a))?;
    linked
}

fn read_record(capacity: &dyn Backend) -> io::Result<Option<MarkStore>> {
    let path = rel(RECORD)?;
    let file = match capacity.open(&path, OpenOptions::default()) {
        Ok(file) => file,
        Err(e) if not_found(&e) => return Ok(None),
        Err(e) => return Err(e),
    };
    let len = file.len()?.min(256);
    let mut bytes = vec![0u8; usize::try_from(len).unwrap_or(0)];
    read_fully(file.as_ref(), &mut bytes, 0)?;
    let text = String::from_utf8_lossy(&bytes);
    let mut lines = text.lines();
    match (lines.next(), lines.next().and_then(MarkStore::from_name)) {
        (Some(RECORD_MAGIC), Some(store)) => Ok(Some(store)),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "capacity tier {}: {RECORD} is not a record of where held marks live \
                 ({text:?}): remove it, with no node mounted on-demand",
                capacity.describe()
            ),
        )),
    }
}

/// Record `store` in [`RECORD`]: written whole under a name of this
/// node's, then linked into place (so of two first nodes, one records).
/// False: another node recorded first.
fn write_record(capacity: &dyn Backend, node: &str, store: MarkStore) -> io::Result<bool> {
    let (path, own) = (rel(RECORD)?, rel(&format!("{RECORD}.{node}"))?);
    let file = capacity.open(
        &own,
        OpenOptions {
            create: true,
            truncate: true,
            ..OpenOptions::default()
        },
    )?;
    file.write_at(format!("{RECORD_MAGIC}\n{}\n", store.name()).as_bytes(), 0)?;
    file.sync_data()?;
    drop(file);
    let made = match capacity.hard_link(&own, &path) {
        Ok(()) => true,
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => false,
        // A tier without hard links (the sidecar refused it already):
        // renamed into place, the last of two first nodes' record kept.
        Err(e) if e.kind() == io::ErrorKind::Unsupported => {
            capacity.rename(&own, &path)?;
            true
        }
        Err(e) => return Err(e),
    };
    gone_is_done(capacity.remove_file(&own))?;
    capacity
        .sync_dir(&rel(HIDDEN_DIR)?)
        .map_err(context(format!("sync {HIDDEN_DIR}")))?;
    Ok(made)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn an_entry_reads_back_only_whole() {
        let mark = Mark {
            node: "rack1-n07".into(),
            size: 3 << 20,
            mtime: Some(UNIX_EPOCH + Duration::new(1_795_934_461, 5)),
        };
        let mut bytes = sector(&mark).unwrap();
        assert_eq!(bytes.len(), SECTOR);
        assert!(bytes.starts_with(b"v1 node=rack1-n07 size=3145728 mtime=1795934461.000000005 "));
        bytes.extend_from_slice(b"path=dir/ckpt\n");
        assert_eq!(decode_entry(&bytes), Some(mark.clone()));
        // A rewrite caught half done: the sum is wrong.
        let other = sector(&Mark {
            size: 7,
            ..mark.clone()
        })
        .unwrap();
        let mut torn = bytes.clone();
        torn[..40].copy_from_slice(&other[..40]);
        assert_eq!(decode_entry(&torn), None);
        assert_eq!(decode_entry(&bytes[..SECTOR - 1]), None);
        assert_eq!(decode_entry(b""), None);
        // The longest node id fits.
        let long = Mark {
            node: "n".repeat(128),
            size: u64::MAX,
            mtime: Some(UNIX_EPOCH + Duration::new(u64::from(u32::MAX), 999_999_999)),
        };
        assert_eq!(decode_entry(&sector(&long).unwrap()), Some(long));
    }

    fn mark(node: &str, size: u64) -> Mark {
        Mark {
            node: node.into(),
            size,
            mtime: None,
        }
    }

    /// The sidecar's rules on one tier (the memory tier: no xattrs): one
    /// node's entry at a time (`link(2)`, as `XATTR_CREATE`); a loser keeps
    /// no name of it; a rewrite stays the same file, read whole; no node
    /// removes another's entry (by the open file or by a name), and once
    /// its own goes, the other can make one.
    #[test]
    fn one_nodes_sidecar_entry_at_a_time_and_only_its_own_removed() {
        use sluice_env::memory::MemBackend;
        let tier = MemBackend::new();
        let store = MarkStore::Sidecar;
        probe_sidecar(&tier, "a").unwrap();
        let path = RelPath::new("f").unwrap();
        let handle = tier.open(&path, OpenOptions::CREATE).unwrap();
        let ino = handle.stat().unwrap().identity();
        let file = Marked {
            handle: &handle,
            ino: Some(ino),
            path: &path,
        };
        let held = |name: String| {
            tier.metadata(&rel(&format!("{SIDECAR_DIR}/{name}")).unwrap())
                .is_ok()
        };
        store
            .set(&tier, "a", &file, &mark("a", 1), XattrFlags::CreateOnly)
            .unwrap();
        let err = store
            .set(&tier, "b", &file, &mark("b", 2), XattrFlags::CreateOnly)
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AlreadyExists, "{err}");
        assert!(
            !held(format!("{}-b", ino.1)),
            "the loser keeps no name of it"
        );
        assert_eq!(store.read(&tier, &path).unwrap(), Some(mark("a", 1)));
        // A's rewrite: in place, the same file as A's own name.
        store
            .set(&tier, "a", &file, &mark("a", 7), XattrFlags::Either)
            .unwrap();
        assert_eq!(store.read_file(&tier, &file).unwrap(), Some(mark("a", 7)));
        let (own, at) = (index_path(ino.1, "a").unwrap(), entry_path(ino.1).unwrap());
        assert_eq!(tier.stat(&own).unwrap().ino, tier.stat(&at).unwrap().ino);
        // B removes nothing of A's, through the file or its name.
        store.remove_file(&tier, "b", &file, false, None).unwrap();
        store.remove_at(&tier, "b", &path).unwrap();
        assert_eq!(store.read(&tier, &path).unwrap(), Some(mark("a", 7)));
        store.remove_file(&tier, "a", &file, false, None).unwrap();
        assert_eq!(store.read(&tier, &path).unwrap(), None);
        assert!(!held(format!("{}-a", ino.1)));
        store
            .set(&tier, "b", &file, &mark("b", 2), XattrFlags::CreateOnly)
            .unwrap();
        assert_eq!(store.read(&tier, &path).unwrap(), Some(mark("b", 2)));
        // An earlier run's entry of this node's, its file's other entries
        // gone: recovery removes it, and leaves what it holds.
        let mut holding = HashSet::new();
        assert_eq!(store.forget_stale(&tier, "a", &holding).unwrap(), 0);
        holding.insert(ino.1);
        assert_eq!(store.forget_stale(&tier, "b", &holding).unwrap(), 0);
        assert_eq!(store.forget_stale(&tier, "b", &HashSet::new()).unwrap(), 1);
        assert_eq!(store.read(&tier, &path).unwrap(), None);
    }
}
