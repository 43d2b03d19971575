//! The source tree: what a send or a local copy walks (files,
//! directories, links), in name order, without following a link out of
//! the source root. Each file's size, mtime and ctime are kept to tell,
//! after its last byte was read, whether it changed meanwhile.

use std::fs::{self, File};
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::journal;

/// One regular file to send.
#[derive(Clone, Debug)]
pub(crate) struct Entry {
    pub(crate) src: PathBuf,
    pub(crate) rel: String,
    pub(crate) size: u64,
    pub(crate) mode: u32,
    pub(crate) mtime_sec: i64,
    pub(crate) mtime_nsec: u32,
    pub(crate) ctime_sec: i64,
    pub(crate) ctime_nsec: u32,
    pub(crate) key: String,
}

impl Entry {
    /// What changed in the open file since the walk (size, mtime, ctime),
    /// or `None`.
    pub(crate) fn changed(&self, file: &File) -> Option<String> {
        let m = match file.metadata() {
            Ok(m) => m,
            Err(e) => return Some(format!("fstat: {e}")),
        };
        let mut what = Vec::new();
        if m.len() != self.size {
            what.push(format!("size {} -> {} bytes", self.size, m.len()));
        }
        if (m.mtime(), m.mtime_nsec() as u32) != (self.mtime_sec, self.mtime_nsec) {
            what.push("mtime".to_owned());
        }
        if (m.ctime(), m.ctime_nsec() as u32) != (self.ctime_sec, self.ctime_nsec) {
            what.push("ctime".to_owned());
        }
        (!what.is_empty()).then(|| {
            format!(
                "{}: changed while it was sent ({})",
                self.src.display(),
                what.join(", ")
            )
        })
    }
}

/// What the walk found under the sources.
#[derive(Default)]
pub(crate) struct Tree {
    /// Regular files.
    pub(crate) files: Vec<Entry>,
    /// Directories, parents before children.
    pub(crate) dirs: Vec<String>,
    /// Symbolic links: path and target.
    pub(crate) links: Vec<(String, String)>,
    /// Special files, and links when they are skipped.
    pub(crate) skipped: u64,
}

/// A file name as UTF-8 (the wire's paths are), or a clear error.
pub(crate) fn utf8(name: std::ffi::OsString) -> io::Result<String> {
    name.into_string()
        .map_err(|n| io::Error::new(io::ErrorKind::InvalidInput, format!("{n:?}: not UTF-8")))
}

pub(crate) fn walk(sources: &[PathBuf], links: bool) -> io::Result<Tree> {
    let mut tree = Tree::default();
    for src in sources {
        let name = match src.file_name() {
            Some(n) => n.to_owned(),
            None => fs::canonicalize(src)?
                .file_name()
                .map(|n| n.to_owned())
                .ok_or_else(|| {
                    io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!("{}: cannot send a root", src.display()),
                    )
                })?,
        };
        walk_one(src, utf8(name)?, links, &mut tree)?;
    }
    Ok(tree)
}

pub(crate) fn walk_one(path: &Path, rel: String, links: bool, tree: &mut Tree) -> io::Result<()> {
    let with_path = |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", path.display()));
    let meta = fs::symlink_metadata(path).map_err(with_path)?;
    if meta.is_dir() {
        tree.dirs.push(rel.clone());
        let mut names: Vec<_> = fs::read_dir(path)
            .and_then(|d| d.collect::<Result<Vec<_>, _>>())
            .map_err(with_path)?;
        names.sort_by_key(|e| e.file_name());
        for e in names {
            let name = utf8(e.file_name())?;
            walk_one(&e.path(), format!("{rel}/{name}"), links, tree)?;
        }
    } else if meta.is_file() {
        let (size, mtime_sec, mtime_nsec) = (meta.len(), meta.mtime(), meta.mtime_nsec() as u32);
        tree.files.push(Entry {
            src: path.to_owned(),
            key: journal::key(&rel, size, mtime_sec, mtime_nsec),
            rel,
            size,
            mode: meta.permissions().mode() & 0o7777,
            mtime_sec,
            mtime_nsec,
            ctime_sec: meta.ctime(),
            ctime_nsec: meta.ctime_nsec() as u32,
        });
    } else if meta.file_type().is_symlink() && links {
        let target = utf8(fs::read_link(path).map_err(with_path)?.into_os_string())?;
        tree.links.push((rel, target));
    } else {
        tree.skipped += 1;
    }
    Ok(())
}
