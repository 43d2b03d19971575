//! GlusterFS layout provider: where a file on a GlusterFS FUSE mount lives,
//! from the virtual xattr `trusted.glusterfs.pathinfo` (DESIGN §7).
//!
//! The client stack answers that xattr with a tree of the translators the
//! file passes through, for example (recorded on GlusterFS 10.3):
//!
//! ```text
//! <POSIX(/b1):host1:/b1/f>                                  one brick
//! (<DISTRIBUTE:vol-dht> <POSIX(/b2):host1:/b2/f>)           distribute
//! (<DISTRIBUTE:vol-dht> (<REPLICATE:vol-replicate-1>
//!     <POSIX(/r4):host1:/r4/f> <POSIX(/r3):host1:/r3/f>))   distribute-replicate
//! (<EC:vol-disperse-0> <POSIX(..)..> <POSIX(..)..> ...)     disperse
//! ```
//!
//! A `<POSIX(BRICK):HOST:PATH>` leaf is one brick holding the file at PATH;
//! `(<KIND:NAME> children…)` is a cluster translator. A directory's value
//! additionally carries a layout stanza `(vol-dht-layout (vol-client-0 0
//! 2147483646) …)`, which [`parse_pathinfo`] accepts and ignores.
//!
//! Design: distribute (DHT) places a whole file on one subvolume, which is
//! either one brick or one replica/disperse set. That subvolume is the
//! file's single storage target, so the layout is a
//! [`FileLayout::Stripe`] with one target and objects of a configurable
//! size (default 1 MiB; distribute has no striping of its own). The target
//! key is the set's translator name (`vol-replicate-1`) when the file is in
//! a replica/disperse set — the order of its bricks in the xattr varies
//! from call to call — and `HOST:BRICK` otherwise. A registry maps each key
//! to a dense [`TargetId`] in order of first sight.
//!
//! Limits: with `features.shard` on, the xattr names only the brick of the
//! first shard, so a sharded file is treated as living there. A file name
//! containing `> <` or `> (` can make the leaf's PATH ambiguous; PATH is
//! not used for scheduling, and such a value parses to a wrong-but-valid
//! brick or an error, never a panic.
//!
//! INVARIANTS: the same key always maps to the same id for the lifetime of
//! a [`GlusterLayout`]; ids are `0..n` with `n ≤` [`MAX_TARGETS`]; the
//! parser reads at most [`MAX_PATHINFO_BYTES`] bytes, nests at most
//! [`MAX_DEPTH`] levels and returns at most [`MAX_BRICKS`] bricks.

use std::collections::HashMap;
use std::io;
use std::path::Path;
use std::sync::Mutex;

use sluice_policy::lads::{StripeLayout, TargetId};

use super::{FileLayout, LayoutProvider};

/// The virtual xattr GlusterFS answers with the file's location (root only).
pub const PATHINFO_XATTR: &str = "trusted.glusterfs.pathinfo";
/// The same value under a name unprivileged users may read.
pub const USER_PATHINFO_XATTR: &str = "glusterfs.pathinfo";
/// Longest pathinfo value accepted (Linux's `XATTR_SIZE_MAX`).
pub const MAX_PATHINFO_BYTES: usize = 64 * 1024;
/// Deepest translator nesting accepted.
pub const MAX_DEPTH: usize = 32;
/// Most bricks one pathinfo value may name.
pub const MAX_BRICKS: usize = 4096;
/// Most distinct targets one [`GlusterLayout`] registers.
pub const MAX_TARGETS: usize = 1 << 20;
/// Largest object size accepted (4 GiB).
pub const MAX_OBJECT_BYTES: u64 = 4 << 30;

/// A cluster translator that groups bricks (`REPLICATE`, `EC`, ...).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Subvolume {
    /// Translator kind as printed (`REPLICATE`, `EC`, `DISTRIBUTE`).
    pub kind: String,
    /// Translator name (`vol-replicate-0`).
    pub name: String,
}

/// One `<POSIX(BRICK):HOST:PATH>` leaf of a pathinfo value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Brick {
    /// Host name of the brick server, as the brick process knows itself.
    pub host: String,
    /// Brick root directory on that host.
    pub brick_path: String,
    /// Path of the file on the brick.
    pub file_path: String,
    /// The innermost enclosing translator other than `DISTRIBUTE` (the
    /// replica or disperse set the brick belongs to), if any.
    pub set: Option<Subvolume>,
}

impl Brick {
    /// `HOST:BRICK`, the usual way GlusterFS names a brick.
    pub fn id(&self) -> String {
        format!("{}:{}", self.host, self.brick_path)
    }
}

/// Why a pathinfo value could not be understood.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PathinfoError {
    /// The value was empty (or only NULs and blanks).
    #[error("pathinfo is empty")]
    Empty,
    /// The value was longer than [`MAX_PATHINFO_BYTES`].
    #[error("pathinfo is {0} bytes, more than the {MAX_PATHINFO_BYTES} accepted")]
    TooLong(usize),
    /// Translators nested deeper than [`MAX_DEPTH`].
    #[error("pathinfo nests translators deeper than {MAX_DEPTH} levels")]
    TooDeep,
    /// More than [`MAX_BRICKS`] bricks.
    #[error("pathinfo names more than {MAX_BRICKS} bricks")]
    TooManyBricks,
    /// No `<POSIX(...)...>` leaf at all.
    #[error("pathinfo names no brick (no <POSIX(BRICK):HOST:PATH> entry)")]
    NoBrick,
    /// A syntax error.
    #[error("pathinfo is malformed at byte {at}: {what} (near {near:?})")]
    Malformed {
        /// Byte offset of the problem.
        at: usize,
        /// What was expected or found.
        what: &'static str,
        /// Up to 40 bytes of the value from `at`, for the message.
        near: String,
    },
    /// The bricks are in different subvolumes, so the file has no single
    /// target (a directory's value, or a translator stack not understood).
    #[error(
        "pathinfo names {count} bricks in more than one subvolume; expected a regular file \
         on a distribute, replicate or disperse volume"
    )]
    NoSingleTarget {
        /// Bricks named.
        count: usize,
    },
    /// The provider has registered [`MAX_TARGETS`] targets already.
    #[error("more than {MAX_TARGETS} distinct GlusterFS targets")]
    TooManyTargets,
}

/// Parses a `trusted.glusterfs.pathinfo` value into the bricks it names, in
/// the order they appear. Trailing NULs and blanks are ignored (the xattr
/// value includes the C string's NUL).
pub fn parse_pathinfo(value: &str) -> Result<Vec<Brick>, PathinfoError> {
    if value.len() > MAX_PATHINFO_BYTES {
        return Err(PathinfoError::TooLong(value.len()));
    }
    let value = value.trim_end_matches(|c: char| c == '\0' || c.is_ascii_whitespace());
    let value = value.trim_start_matches(|c: char| c.is_ascii_whitespace());
    if value.is_empty() {
        return Err(PathinfoError::Empty);
    }
    let mut parser = Parser {
        s: value,
        pos: 0,
        bricks: Vec::new(),
    };
    parser.node(0, None)?;
    parser.skip_blanks();
    if parser.pos != value.len() {
        return Err(parser.error("unexpected text after the end of the value"));
    }
    if parser.bricks.is_empty() {
        return Err(PathinfoError::NoBrick);
    }
    Ok(parser.bricks)
}

/// Recursive-descent parser over the value. All delimiters are ASCII, so
/// every byte offset it slices at is a char boundary.
struct Parser<'a> {
    s: &'a str,
    pos: usize,
    bricks: Vec<Brick>,
}

const POSIX_OPEN: &str = "<POSIX(";

impl<'a> Parser<'a> {
    fn rest(&self) -> &'a str {
        let s: &'a str = self.s;
        &s[self.pos..]
    }

    fn error(&self, what: &'static str) -> PathinfoError {
        let rest = self.rest();
        let mut end = rest.len().min(40);
        while !rest.is_char_boundary(end) {
            end -= 1;
        }
        PathinfoError::Malformed {
            at: self.pos,
            what,
            near: rest[..end].to_string(),
        }
    }

    fn skip_blanks(&mut self) {
        let rest = self.rest();
        self.pos += rest.len() - rest.trim_start_matches([' ', '\t', '\n']).len();
    }

    /// One node: a brick leaf or a parenthesised group.
    fn node(&mut self, depth: usize, set: Option<&Subvolume>) -> Result<(), PathinfoError> {
        self.skip_blanks();
        if self.rest().starts_with(POSIX_OPEN) {
            self.posix(set)
        } else if self.rest().starts_with('(') {
            self.group(depth + 1, set)
        } else if self.rest().is_empty() {
            Err(self.error("value ends where a brick or '(' was expected"))
        } else {
            Err(self.error("expected <POSIX(...)...> or '('"))
        }
    }

    /// `<POSIX(BRICK):HOST:PATH>`.
    fn posix(&mut self, set: Option<&Subvolume>) -> Result<(), PathinfoError> {
        if self.bricks.len() >= MAX_BRICKS {
            return Err(PathinfoError::TooManyBricks);
        }
        self.pos += POSIX_OPEN.len();
        let rest = self.rest();
        let Some(brick_len) = rest.find("):") else {
            return Err(self.error("unterminated brick path (no \"):\")"));
        };
        let brick_path = &rest[..brick_len];
        if brick_path.is_empty() {
            return Err(self.error("empty brick path"));
        }
        self.pos += brick_len + 2;
        let rest = self.rest();
        let Some(host_len) = rest.find(':') else {
            return Err(self.error("no ':' after the brick host"));
        };
        let host = &rest[..host_len];
        if host.is_empty() || host.contains(['<', '>', '(', ')', ' ']) {
            return Err(self.error("bad brick host"));
        }
        self.pos += host_len + 1;
        // The file path ends at the first '>' that is followed by the end of
        // the value, a ')' or another node (file names may hold '>').
        let rest = self.rest();
        let mut path_len = None;
        for (i, _) in rest.match_indices('>') {
            let after = rest[i + 1..].trim_start_matches([' ', '\t', '\n']);
            let spaced = after.len() < rest.len() - i - 1;
            if after.is_empty()
                || after.starts_with(')')
                || (spaced && (after.starts_with('<') || after.starts_with('(')))
            {
                path_len = Some(i);
                break;
            }
        }
        let Some(path_len) = path_len else {
            return Err(self.error("unterminated brick entry (no closing '>')"));
        };
        let file_path = &rest[..path_len];
        if file_path.is_empty() {
            return Err(self.error("empty file path in brick entry"));
        }
        self.bricks.push(Brick {
            host: host.to_string(),
            brick_path: brick_path.to_string(),
            file_path: file_path.to_string(),
            set: set.cloned(),
        });
        self.pos += path_len + 1;
        Ok(())
    }

    /// `( [<KIND:NAME>] node… )`, or a layout stanza `(word (word n n)…)`.
    fn group(&mut self, depth: usize, set: Option<&Subvolume>) -> Result<(), PathinfoError> {
        if depth > MAX_DEPTH {
            return Err(PathinfoError::TooDeep);
        }
        self.pos += 1; // '('
        self.skip_blanks();
        let rest = self.rest();
        let own;
        let mut set = set;
        if rest.starts_with('<') && !rest.starts_with(POSIX_OPEN) {
            let Some(len) = rest.find('>') else {
                return Err(self.error("unterminated translator header (no '>')"));
            };
            let header = &rest[1..len];
            let Some((kind, name)) = header.split_once(':') else {
                return Err(self.error("translator header is not <KIND:NAME>"));
            };
            let bad = |t: &str| {
                t.is_empty() || t.contains(|c: char| c.is_whitespace() || "<>()".contains(c))
            };
            if bad(kind) || bad(name) {
                return Err(self.error("bad translator kind or name"));
            }
            self.pos += len + 1;
            if kind != "DISTRIBUTE" {
                own = Subvolume {
                    kind: kind.to_string(),
                    name: name.to_string(),
                };
                set = Some(&own);
            }
        } else if !rest.starts_with('<') && !rest.starts_with('(') {
            return self.stanza(depth);
        }
        let mut children = 0usize;
        loop {
            self.skip_blanks();
            let rest = self.rest();
            if rest.starts_with(')') {
                self.pos += 1;
                break;
            }
            if rest.is_empty() {
                return Err(self.error("unbalanced '(': value ends inside a group"));
            }
            // A bare-word group among the children is a layout stanza.
            let stanza = rest.starts_with('(')
                && rest[1..]
                    .trim_start_matches([' ', '\t', '\n'])
                    .starts_with(|c: char| c != '<' && c != '(' && c != ')');
            if stanza {
                if depth + 1 > MAX_DEPTH {
                    return Err(PathinfoError::TooDeep);
                }
                self.pos += 1;
                self.stanza(depth + 1)?;
            } else {
                self.node(depth, set)?;
            }
            children += 1;
        }
        if children == 0 {
            // "()" or "(<KIND:NAME>)": nothing under it.
            return Err(PathinfoError::NoBrick);
        }
        Ok(())
    }

    /// The rest of a layout stanza after its '(' — words, numbers and
    /// nested parentheses, no bricks — up to and including its ')'.
    fn stanza(&mut self, depth: usize) -> Result<(), PathinfoError> {
        let mut level = 1usize;
        let bytes = self.s.as_bytes();
        while self.pos < bytes.len() {
            match bytes[self.pos] {
                b'(' => {
                    level += 1;
                    if depth + level - 1 > MAX_DEPTH {
                        return Err(PathinfoError::TooDeep);
                    }
                }
                b')' => {
                    level -= 1;
                    if level == 0 {
                        self.pos += 1;
                        return Ok(());
                    }
                }
                b'<' | b'>' => return Err(self.error("unexpected '<' or '>' in a layout stanza")),
                _ => {}
            }
            self.pos += 1;
        }
        Err(self.error("unbalanced '(': value ends inside a layout stanza"))
    }
}

/// The target key and display name of the single subvolume holding a
/// file, from its bricks.
fn target_of(bricks: &[Brick]) -> Result<(String, String), PathinfoError> {
    let first = bricks.first().ok_or(PathinfoError::NoBrick)?;
    match &first.set {
        Some(set) => {
            if bricks.iter().any(|b| b.set.as_ref() != Some(set)) {
                return Err(PathinfoError::NoSingleTarget {
                    count: bricks.len(),
                });
            }
            let mut ids: Vec<String> = bricks.iter().map(Brick::id).collect();
            ids.sort();
            ids.dedup();
            Ok((
                set.name.clone(),
                format!("{} [{}]", set.name, ids.join(" ")),
            ))
        }
        None => {
            let id = first.id();
            if bricks.iter().any(|b| b.set.is_some() || b.id() != id) {
                return Err(PathinfoError::NoSingleTarget {
                    count: bricks.len(),
                });
            }
            Ok((id.clone(), id))
        }
    }
}

/// Key → id map, plus each id's display name.
#[derive(Debug, Default)]
struct Registry {
    ids: HashMap<String, u32>,
    names: Vec<String>,
}

/// [`LayoutProvider`] for files on a GlusterFS FUSE mount.
#[derive(Debug)]
pub struct GlusterLayout {
    object_size: u64,
    registry: Mutex<Registry>,
}

impl Default for GlusterLayout {
    fn default() -> Self {
        GlusterLayout::new()
    }
}

impl GlusterLayout {
    /// Object size when none is configured: 1 MiB.
    pub const DEFAULT_OBJECT_SIZE: u64 = 1 << 20;

    /// A provider with [`Self::DEFAULT_OBJECT_SIZE`] objects.
    pub fn new() -> GlusterLayout {
        GlusterLayout {
            object_size: Self::DEFAULT_OBJECT_SIZE,
            registry: Mutex::new(Registry::default()),
        }
    }

    /// A provider cutting files into objects of `object_size` bytes
    /// (1 byte ..= 4 GiB).
    pub fn with_object_size(object_size: u64) -> io::Result<GlusterLayout> {
        if object_size == 0 || object_size > MAX_OBJECT_BYTES {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("GlusterFS object size {object_size} is out of range: use 1 byte to 4 GiB"),
            ));
        }
        Ok(GlusterLayout {
            object_size,
            ..GlusterLayout::new()
        })
    }

    /// Bytes per object.
    pub fn object_size(&self) -> u64 {
        self.object_size
    }

    /// The layout a pathinfo value describes, registering its target.
    pub fn layout_of_pathinfo(&self, value: &str) -> Result<FileLayout, PathinfoError> {
        let bricks = parse_pathinfo(value)?;
        let (key, name) = target_of(&bricks)?;
        let target = self.register(key, name)?;
        // INVARIANT: object_size is in 1..=4 GiB (checked when built) and
        // there is one target, so StripeLayout::new accepts them.
        let stripe = StripeLayout::new(self.object_size, vec![target])
            .expect("object size > 0 and one target");
        Ok(FileLayout::Stripe(stripe))
    }

    fn register(&self, key: String, name: String) -> Result<TargetId, PathinfoError> {
        // A poisoned lock only means another thread panicked mid-insert;
        // both maps are updated together after all checks, so they agree.
        let mut registry = sluice_env::lock(&self.registry);
        if let Some(&id) = registry.ids.get(&key) {
            return Ok(TargetId(id));
        }
        if registry.names.len() >= MAX_TARGETS {
            return Err(PathinfoError::TooManyTargets);
        }
        // MAX_TARGETS < u32::MAX, so the id fits.
        let id = registry.names.len() as u32;
        registry.names.push(name);
        registry.ids.insert(key, id);
        Ok(TargetId(id))
    }
}

/// Reads xattr `name` of `path` (not following a final symlink), growing
/// the buffer up to Linux's 64 KiB limit if the value is longer than 4 KiB.
pub(crate) fn read_xattr(path: &Path, name: &str) -> io::Result<Vec<u8>> {
    let mut size = 4096;
    loop {
        let mut buf = vec![0u8; size];
        match rustix::fs::lgetxattr(path, name, &mut buf[..]) {
            Ok(len) => {
                buf.truncate(len);
                return Ok(buf);
            }
            Err(rustix::io::Errno::RANGE) if size < MAX_PATHINFO_BYTES => size = MAX_PATHINFO_BYTES,
            Err(e) => return Err(e.into()),
        }
    }
}

impl LayoutProvider for GlusterLayout {
    fn name(&self) -> &'static str {
        "gluster"
    }

    fn layout(&self, path: &Path, _len: u64) -> io::Result<FileLayout> {
        let value = match read_xattr(path, PATHINFO_XATTR) {
            Ok(v) => v,
            // Not root: GlusterFS also answers the unprivileged name.
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                read_xattr(path, USER_PATHINFO_XATTR)
                    .map_err(|e| xattr_error(path, USER_PATHINFO_XATTR, e))?
            }
            Err(e) => return Err(xattr_error(path, PATHINFO_XATTR, e)),
        };
        let value = String::from_utf8_lossy(&value);
        self.layout_of_pathinfo(&value).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: {PATHINFO_XATTR}: {e}", path.display()),
            )
        })
    }

    fn target_name(&self, target: TargetId) -> String {
        let registry = sluice_env::lock(&self.registry);
        match registry.names.get(target.0 as usize) {
            Some(name) => name.clone(),
            None => format!("unknown brick #{}", target.0),
        }
    }
}

/// An error reading the pathinfo xattr, saying what it most likely means.
fn xattr_error(path: &Path, name: &str, e: io::Error) -> io::Error {
    let code = e.raw_os_error();
    let hint = if code == Some(rustix::io::Errno::NODATA.raw_os_error()) {
        ": the file is not on a GlusterFS FUSE mount"
    } else if code == Some(rustix::io::Errno::NOTSUP.raw_os_error()) {
        ": the file system has no xattrs (not a GlusterFS FUSE mount)"
    } else {
        ""
    };
    io::Error::new(
        e.kind(),
        format!("{}: cannot read xattr {name}: {e}{hint}", path.display()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(name: &str) -> &'static str {
        match name {
            "single" => include_str!("../../testdata/gluster/single-brick.txt"),
            "distribute" => include_str!("../../testdata/gluster/distribute.txt"),
            "distribute-other" => include_str!("../../testdata/gluster/distribute-other-brick.txt"),
            "space" => include_str!("../../testdata/gluster/distribute-space-in-name.txt"),
            "paren" => include_str!("../../testdata/gluster/distribute-paren-in-name.txt"),
            "replicate" => include_str!("../../testdata/gluster/distribute-replicate.txt"),
            "replicate-swapped" => {
                include_str!("../../testdata/gluster/distribute-replicate-swapped.txt")
            }
            "replicate-other" => {
                include_str!("../../testdata/gluster/distribute-replicate-other-set.txt")
            }
            "disperse" => include_str!("../../testdata/gluster/distribute-disperse.txt"),
            "directory" => include_str!("../../testdata/gluster/directory-distribute.txt"),
            "directory-replicate" => {
                include_str!("../../testdata/gluster/directory-distribute-replicate.txt")
            }
            _ => unreachable!("no sample {name}"),
        }
    }

    #[test]
    fn single_brick_volume_has_no_distribute_wrapper() {
        let bricks = parse_pathinfo(sample("single")).unwrap();
        assert_eq!(
            bricks,
            vec![Brick {
                host: "vm".into(),
                brick_path: "/srv/gluster/brick".into(),
                file_path: "/srv/gluster/brick/a".into(),
                set: None,
            }]
        );
        assert_eq!(bricks[0].id(), "vm:/srv/gluster/brick");
    }

    #[test]
    fn distribute_names_one_brick() {
        let bricks = parse_pathinfo(sample("distribute")).unwrap();
        assert_eq!(bricks.len(), 1);
        assert_eq!(bricks[0].id(), "vm:/srv/gluster/d2");
        assert_eq!(bricks[0].file_path, "/srv/gluster/d2/f1");
        assert_eq!(bricks[0].set, None);
    }

    #[test]
    fn file_names_with_blanks_and_parens_parse() {
        let bricks = parse_pathinfo(sample("space")).unwrap();
        assert_eq!(bricks[0].file_path, "/srv/gluster/d1/with space");
        let bricks = parse_pathinfo(sample("paren")).unwrap();
        assert_eq!(bricks[0].file_path, "/srv/gluster/d2/paren(x)");
        // '>' inside a name, and a leaf that is followed by another.
        let bricks = parse_pathinfo(
            "(<REPLICATE:v-replicate-0> <POSIX(/b1):h:/b1/a>b> <POSIX(/b2):h:/b2/a>b>)",
        )
        .unwrap();
        assert_eq!(bricks[0].file_path, "/b1/a>b");
        assert_eq!(bricks[1].file_path, "/b2/a>b");
    }

    #[test]
    fn replicate_bricks_carry_their_set() {
        let bricks = parse_pathinfo(sample("replicate")).unwrap();
        assert_eq!(bricks.len(), 2);
        let set = Subvolume {
            kind: "REPLICATE".into(),
            name: "repv-replicate-1".into(),
        };
        assert!(bricks.iter().all(|b| b.set.as_ref() == Some(&set)));
        assert_eq!(bricks[0].id(), "vm:/srv/gluster/r4");
        assert_eq!(bricks[1].id(), "vm:/srv/gluster/r3");
    }

    #[test]
    fn disperse_bricks_carry_their_set() {
        let bricks = parse_pathinfo(sample("disperse")).unwrap();
        assert_eq!(bricks.len(), 3);
        assert!(bricks
            .iter()
            .all(|b| b.set.as_ref().map(|s| s.kind.as_str()) == Some("EC")));
    }

    #[test]
    fn directories_parse_but_have_no_single_target() {
        for name in ["directory", "directory-replicate"] {
            let bricks = parse_pathinfo(sample(name)).unwrap();
            assert!(bricks.len() >= 2, "{name}");
            let err = GlusterLayout::new()
                .layout_of_pathinfo(sample(name))
                .unwrap_err();
            assert!(
                matches!(err, PathinfoError::NoSingleTarget { .. }),
                "{name}: {err}"
            );
        }
    }

    #[test]
    fn same_brick_same_target_and_dense_ids() {
        let provider = GlusterLayout::new();
        let layout = |name| match provider.layout_of_pathinfo(sample(name)).unwrap() {
            FileLayout::Stripe(s) => {
                assert_eq!(s.object_size, 1 << 20);
                assert_eq!(s.targets.len(), 1);
                s.targets[0]
            }
            other => panic!("{name}: not a stripe: {other:?}"),
        };
        let a = layout("distribute");
        let b = layout("distribute-other");
        let r = layout("replicate");
        let r_swapped = layout("replicate-swapped");
        let r_other = layout("replicate-other");
        assert_eq!(
            (a, b, r, r_other),
            (TargetId(0), TargetId(1), TargetId(2), TargetId(3))
        );
        assert_eq!(layout("distribute"), a);
        assert_eq!(layout("space"), b);
        assert_eq!(
            r_swapped, r,
            "brick order within a replica set does not matter"
        );
        assert_eq!(provider.target_name(a), "vm:/srv/gluster/d2");
        assert_eq!(provider.target_name(b), "vm:/srv/gluster/d1");
        assert_eq!(
            provider.target_name(r),
            "repv-replicate-1 [vm:/srv/gluster/r3 vm:/srv/gluster/r4]"
        );
        assert_eq!(provider.target_name(TargetId(99)), "unknown brick #99");
    }

    #[test]
    fn object_size_is_configurable_and_bounded() {
        let provider = GlusterLayout::with_object_size(4 << 20).unwrap();
        let FileLayout::Stripe(s) = provider.layout_of_pathinfo(sample("single")).unwrap() else {
            panic!("not a stripe");
        };
        assert_eq!(s.object_size, 4 << 20);
        assert!(GlusterLayout::with_object_size(0).is_err());
        assert!(GlusterLayout::with_object_size(MAX_OBJECT_BYTES).is_ok());
        assert!(GlusterLayout::with_object_size(MAX_OBJECT_BYTES + 1).is_err());
    }

    #[test]
    fn trailing_nul_and_blanks_are_ignored() {
        let value = format!("{}\0\0\n", sample("single").trim());
        assert_eq!(parse_pathinfo(&value).unwrap().len(), 1);
    }

    #[test]
    fn malformed_values_are_errors() {
        let cases: &[(&str, &str)] = &[
            (
                "empty",
                include_str!("../../testdata/gluster/malformed-empty.txt"),
            ),
            (
                "unbalanced",
                include_str!("../../testdata/gluster/malformed-unbalanced.txt"),
            ),
            (
                "no-posix",
                include_str!("../../testdata/gluster/malformed-no-posix.txt"),
            ),
            (
                "truncated",
                include_str!("../../testdata/gluster/malformed-truncated.txt"),
            ),
            (
                "trailing",
                include_str!("../../testdata/gluster/malformed-trailing.txt"),
            ),
            ("nul", "\0"),
            ("word", "hello"),
            ("close", ")"),
            ("empty group", "()"),
            ("header only", "(<DISTRIBUTE:v-dht>)"),
            ("no host sep", "<POSIX(/b):host>"),
            ("empty brick", "<POSIX():h:/f>"),
            ("empty host", "<POSIX(/b)::/f>"),
            ("empty path", "<POSIX(/b):h:>"),
            ("bad header", "(<DISTRIBUTE> <POSIX(/b):h:/b/f>)"),
            ("extra close", "(<DISTRIBUTE:v-dht> <POSIX(/b):h:/b/f>))"),
            ("stanza only", "(v-dht-layout (v-client-0 0 1))"),
        ];
        for (name, value) in cases {
            let err = parse_pathinfo(value).expect_err(name);
            assert!(!err.to_string().is_empty(), "{name}");
        }
        assert_eq!(parse_pathinfo(""), Err(PathinfoError::Empty));
        assert_eq!(parse_pathinfo("()"), Err(PathinfoError::NoBrick));
        assert!(matches!(
            parse_pathinfo(include_str!(
                "../../testdata/gluster/malformed-unbalanced.txt"
            )),
            Err(PathinfoError::Malformed { .. })
        ));
    }

    #[test]
    fn huge_and_deep_values_are_errors() {
        let leaf = "<POSIX(/b):h:/b/f> ";
        let huge = format!(
            "(<DISTRIBUTE:v-dht> {})",
            leaf.repeat(MAX_PATHINFO_BYTES / leaf.len() + 1)
        );
        assert!(matches!(
            parse_pathinfo(&huge),
            Err(PathinfoError::TooLong(_))
        ));
        let many = format!(
            "(<DISTRIBUTE:v-dht> {})",
            "<POSIX(b):h:f> ".repeat(MAX_BRICKS + 1)
        );
        assert!(many.len() < MAX_PATHINFO_BYTES);
        assert_eq!(parse_pathinfo(&many), Err(PathinfoError::TooManyBricks));
        let deep = format!(
            "{}<POSIX(/b):h:/b/f>{}",
            "(".repeat(10_000),
            ")".repeat(10_000)
        );
        assert_eq!(parse_pathinfo(&deep), Err(PathinfoError::TooDeep));
        let deep_stanza = format!(
            "(<DISTRIBUTE:v-dht> <POSIX(/b):h:/b/f> (x{}))",
            "(".repeat(10_000)
        );
        assert_eq!(parse_pathinfo(&deep_stanza), Err(PathinfoError::TooDeep));
        let ok = format!(
            "{}<POSIX(/b):h:/b/f>{}",
            "(".repeat(MAX_DEPTH),
            ")".repeat(MAX_DEPTH)
        );
        assert_eq!(parse_pathinfo(&ok).unwrap().len(), 1);
    }

    #[test]
    fn non_gluster_file_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, b"x").unwrap();
        let err = GlusterLayout::new().layout(&file, 1).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("glusterfs.pathinfo"), "{msg}");
        assert!(msg.contains(&*file.to_string_lossy()), "{msg}");
        let missing = GlusterLayout::new()
            .layout(&dir.path().join("missing"), 1)
            .unwrap_err();
        assert_eq!(missing.kind(), io::ErrorKind::NotFound);
    }

    proptest::proptest! {
        #[test]
        fn parser_never_panics(value in ".{0,300}") {
            let _ = parse_pathinfo(&value);
        }

        #[test]
        fn parser_never_panics_on_near_misses(value in "[()<> :/a-z0-9POSIXDTRBUE\\-]{0,200}") {
            let _ = parse_pathinfo(&value);
            let _ = GlusterLayout::new().layout_of_pathinfo(&value);
        }

        #[test]
        fn parser_never_panics_on_mutated_samples(cut in 0usize..200, insert in "[()<> :]{0,3}") {
            for name in ["replicate", "directory-replicate", "disperse"] {
                let s = sample(name);
                let mut cut = cut.min(s.len());
                while !s.is_char_boundary(cut) { cut -= 1; }
                let value = format!("{}{}{}", &s[..cut], insert, &s[cut..]);
                let _ = parse_pathinfo(&value);
                let _ = parse_pathinfo(&s[..cut]);
            }
        }
    }
}
