//! The source tree: what a send walks (files, directories, links),
//! without following a link out of the source root.

use super::*;

/// One regular file to send.
#[derive(Clone, Debug)]
pub(super) struct Entry {
    pub(super) src: PathBuf,
    pub(super) rel: String,
    pub(super) size: u64,
    pub(super) mode: u32,
    pub(super) mtime_sec: i64,
    pub(super) mtime_nsec: u32,
    pub(super) ctime_sec: i64,
    pub(super) ctime_nsec: u32,
    pub(super) key: String,
}

impl Entry {
    /// What changed in the open file since the walk (size, mtime, ctime),
    /// or `None`.
    pub(super) fn changed(&self, file: &File) -> Option<String> {
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
pub(super) struct Tree {
    /// Regular files.
    pub(super) files: Vec<Entry>,
    /// Directories, parents before children.
    pub(super) dirs: Vec<String>,
    /// Symbolic links: path and target.
    pub(super) links: Vec<(String, String)>,
    /// Special files, and links when they are skipped.
    pub(super) skipped: u64,
}

/// A file name as UTF-8 (the wire's paths are), or a clear error.
pub(super) fn utf8(name: std::ffi::OsString) -> io::Result<String> {
    name.into_string()
        .map_err(|n| io::Error::new(io::ErrorKind::InvalidInput, format!("{n:?}: not UTF-8")))
}

pub(super) fn walk(sources: &[PathBuf], links: bool) -> io::Result<Tree> {
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

pub(super) fn walk_one(path: &Path, rel: String, links: bool, tree: &mut Tree) -> io::Result<()> {
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
