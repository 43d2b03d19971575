//! The source's resume journal.
//!
//! One JSON object per line, appended as the sink acknowledges work:
//! `{"o":KEY,"off":N,"len":N,"crc":N}` when a block was written at the
//! sink, `{"f":KEY}` when a file verified and is in place, `{"x":KEY}` when
//! the sink lost or refused a partial copy (forget that file's objects).
//! `KEY` names a file version: its path relative to the destination, its
//! size and its mtime, so a file changed since the journal was written is
//! sent whole.
//!
//! A rerun with the same journal skips files marked done and, for files
//! the sink kept a partial copy of, every object already acknowledged; their
//! crc32c values come from the journal to build the file's checksum. The
//! journal is only a hint: a line lost or torn in a crash means the object
//! is sent again, and the sink's final whole-file check catches a partial
//! copy that lost acknowledged bytes (the source then forgets the file and
//! the next run sends it whole). So lines are flushed to the kernel as they
//! are written but not fsynced. The journal is removed when a transfer
//! completes without failures.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

/// A file version's journal key.
pub fn key(rel: &str, size: u64, mtime_sec: i64, mtime_nsec: u32) -> String {
    format!("{rel}\u{0}{size}\u{0}{mtime_sec}.{mtime_nsec:09}")
}

#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum Line {
    Object {
        o: String,
        off: u64,
        len: u64,
        crc: u32,
    },
    File {
        f: String,
    },
    Forget {
        x: String,
    },
}

/// What an earlier run achieved.
#[derive(Debug, Default)]
pub struct Progress {
    /// Objects acknowledged, by file key: offset → (len, crc32c).
    pub objects: HashMap<String, BTreeMap<u64, (u64, u32)>>,
    /// Files completed.
    pub files: HashSet<String>,
    /// Lines that did not parse (a torn last line after a crash).
    pub skipped_lines: u64,
}

/// An open journal; appends are serialised by a mutex.
#[derive(Debug)]
pub struct Journal {
    path: PathBuf,
    out: Mutex<BufWriter<File>>,
}

impl Journal {
    /// Open (creating) the journal at `path` and read what it holds.
    pub fn open(path: &Path) -> io::Result<(Journal, Progress)> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            fs::create_dir_all(dir)?;
        }
        let mut progress = Progress::default();
        match File::open(path) {
            Ok(f) => {
                for line in BufReader::new(f).lines() {
                    let line = line?;
                    match serde_json::from_str::<Line>(&line) {
                        Ok(Line::Object { o, off, len, crc }) => {
                            progress
                                .objects
                                .entry(o)
                                .or_default()
                                .insert(off, (len, crc));
                        }
                        Ok(Line::File { f }) => {
                            progress.objects.remove(&f);
                            progress.files.insert(f);
                        }
                        Ok(Line::Forget { x }) => {
                            progress.objects.remove(&x);
                            progress.files.remove(&x);
                        }
                        Err(_) => progress.skipped_lines += 1,
                    }
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(io::Error::new(
                    e.kind(),
                    format!("journal {}: {e}", path.display()),
                ))
            }
        }
        let out = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| io::Error::new(e.kind(), format!("journal {}: {e}", path.display())))?;
        // A torn last line must not glue onto the next record.
        let mut out = BufWriter::new(out);
        if progress.skipped_lines > 0 {
            out.write_all(b"\n")?;
        }
        Ok((
            Journal {
                path: path.to_owned(),
                out: Mutex::new(out),
            },
            progress,
        ))
    }

    fn append(&self, line: &Line) -> io::Result<()> {
        let mut text = serde_json::to_vec(line).map_err(io::Error::other)?;
        text.push(b'\n');
        let mut out = sluice_env::lock(&self.out);
        out.write_all(&text)?;
        out.flush()
    }

    /// Record an acknowledged block.
    pub fn object(&self, key: &str, offset: u64, len: u64, crc: u32) -> io::Result<()> {
        self.append(&Line::Object {
            o: key.to_owned(),
            off: offset,
            len,
            crc,
        })
    }

    /// Record a completed file.
    pub fn file(&self, key: &str) -> io::Result<()> {
        self.append(&Line::File { f: key.to_owned() })
    }

    /// Forget a file's objects.
    pub fn forget(&self, key: &str) -> io::Result<()> {
        self.append(&Line::Forget { x: key.to_owned() })
    }

    /// Remove the journal (the transfer is complete).
    pub fn remove(self) -> io::Result<()> {
        drop(self.out);
        fs::remove_file(&self.path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_survives_a_reopen_and_a_torn_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j");
        let a = key("a", 10, 1, 2);
        let b = key("b", 10, 1, 2);
        {
            let (j, p) = Journal::open(&path).unwrap();
            assert!(p.objects.is_empty());
            j.object(&a, 0, 4, 7).unwrap();
            j.object(&a, 4, 4, 8).unwrap();
            j.object(&b, 0, 4, 9).unwrap();
            j.file(&b).unwrap();
        }
        // A crash mid-line.
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"{\"o\":\"a\",\"of").unwrap();
        drop(f);
        let (j, p) = Journal::open(&path).unwrap();
        assert_eq!(p.skipped_lines, 1);
        assert_eq!(p.objects[&a].len(), 2);
        assert!(p.files.contains(&b) && !p.objects.contains_key(&b));
        j.forget(&a).unwrap();
        j.object(&a, 8, 2, 1).unwrap();
        drop(j);
        let (j, p) = Journal::open(&path).unwrap();
        assert_eq!(p.skipped_lines, 1);
        assert_eq!(p.objects[&a].keys().copied().collect::<Vec<_>>(), vec![8]);
        j.remove().unwrap();
        assert!(!path.exists());
    }

    #[test]
    fn keys_separate_versions() {
        assert_ne!(key("a", 1, 2, 3), key("a", 1, 2, 4));
        assert_ne!(key("a", 1, 2, 3), key("a", 2, 2, 3));
    }
}
