//! Where the two tiers and the mount point are, as the kernel resolves
//! them (symlinks followed, `.` and `..` gone), and the layouts sluice
//! refuses: two of them the same directory, or one inside another. A fast
//! tier inside the capacity tier shows the log and the catalogue through
//! the mount, writable; a capacity tier inside the fast tier mixes the
//! files with the log; a mount point inside a tier makes sluice serve its
//! own mount, and one around a tier hides the tier and its control socket.
//!
//! Comparing text missed `c/../c` against `c`, and a symlink into the
//! other tier (issue 19).
//!
//! INVARIANT: nothing here creates or changes a file. A missing tier
//! directory is resolved through its nearest existing ancestor, so the
//! layout is checked before `open_tier` creates it (only with `create`).

use std::io;
use std::path::{Component, Path, PathBuf};

use crate::ConfigError;

/// One directory of the layout.
#[derive(Clone, Debug)]
pub(crate) struct Place {
    /// Its TOML key: `fast.path`, `capacity.path` or `mount.point`.
    pub key: &'static str,
    /// As given.
    pub given: PathBuf,
    /// As the kernel resolves it.
    pub resolved: PathBuf,
    /// Whether it exists now.
    pub exists: bool,
}

impl Place {
    /// `given` resolved; `key` names it in errors.
    pub fn new(key: &'static str, given: &Path) -> Result<Place, ConfigError> {
        let (resolved, exists) =
            resolve(given).map_err(|e| ConfigError(format!("{key} {}: {e}", given.display())))?;
        Ok(Place {
            key,
            given: given.to_path_buf(),
            resolved,
            exists,
        })
    }

    fn shown(&self) -> String {
        if self.resolved == self.given {
            format!("{} {}", self.key, self.given.display())
        } else {
            format!(
                "{} {} (resolved: {})",
                self.key,
                self.given.display(),
                self.resolved.display()
            )
        }
    }
}

/// The absolute path `path` names with symlinks followed and `.`/`..`
/// gone, and whether it exists. A missing path is its nearest existing
/// ancestor, resolved, with the rest of its components after it.
pub(crate) fn resolve(path: &Path) -> io::Result<(PathBuf, bool)> {
    match std::fs::canonicalize(path) {
        Ok(resolved) => return Ok((resolved, true)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let absolute = std::path::absolute(path)?;
    for ancestor in absolute.ancestors().skip(1) {
        let mut resolved = match std::fs::canonicalize(ancestor) {
            Ok(resolved) => resolved,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        // INVARIANT: `ancestor` is a prefix of `absolute` (ancestors()).
        let rest = absolute.strip_prefix(ancestor).unwrap_or(Path::new(""));
        for component in rest.components() {
            match component {
                Component::Normal(name) => resolved.push(name),
                Component::ParentDir => {
                    resolved.pop();
                }
                Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
            }
        }
        return Ok((resolved, false));
    }
    // `/` always exists; only an odd path ends here.
    Ok((absolute, false))
}

/// Refuse two places that are the same directory or nested.
pub(crate) fn check(places: &[Place]) -> Result<(), ConfigError> {
    for (i, a) in places.iter().enumerate() {
        for b in &places[i + 1..] {
            if a.resolved == b.resolved {
                return Err(ConfigError(format!(
                    "{} and {} are the same directory: {}",
                    a.shown(),
                    b.shown(),
                    why_not_same(a.key, b.key)
                )));
            }
            let (outer, inner) = if b.resolved.starts_with(&a.resolved) {
                (a, b)
            } else if a.resolved.starts_with(&b.resolved) {
                (b, a)
            } else {
                continue;
            };
            return Err(ConfigError(format!(
                "{} is inside {}: {}",
                inner.shown(),
                outer.shown(),
                why(outer.key, inner.key)
            )));
        }
    }
    Ok(())
}

/// Why `a` and `b` may not be one directory.
fn why_not_same(a: &str, b: &str) -> &'static str {
    if a == "mount.point" || b == "mount.point" {
        "sluice would serve its own mount; mount it outside both tiers"
    } else {
        "one directory cannot be both tiers (the files would mix with the log and the \
         catalogue); give the tiers two separate directories, like /ssd/sluice and /data"
    }
}

/// Why `inner` may not be inside `outer`.
fn why(outer: &str, inner: &str) -> &'static str {
    match (outer, inner) {
        ("capacity.path", "fast.path") => {
            "the log and the catalogue would show through the mount, writable; \
             give the tiers two separate directories, like /ssd/sluice and /data"
        }
        ("fast.path", "capacity.path") => {
            "the files would mix with the log and the catalogue; \
             give the tiers two separate directories, like /ssd/sluice and /data"
        }
        (_, "mount.point") => "sluice would serve its own mount; mount it outside both tiers",
        ("mount.point", _) => {
            "the mount would hide the tier and its control socket; mount it outside both tiers"
        }
        _ => "they must be separate directories",
    }
}

/// The error for a tier directory that does not exist.
pub fn missing(key: &str, given: &Path) -> ConfigError {
    let section = key.split('.').next().unwrap_or(key);
    ConfigError(format!(
        "{key} {} does not exist: check it for a typo and create it, or pass --create \
         ({section}.create = true) to have sluice create it",
        given.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_path_resolves_through_its_existing_ancestor() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir(root.join("real")).unwrap();
        std::os::unix::fs::symlink(root.join("real"), root.join("link")).unwrap();
        for (given, expected, exists) in [
            ("real", "real", true),
            ("link", "real", true),
            ("link/new/x", "real/new/x", false),
            ("link/new/../y", "real/y", false),
            ("real/./a/./b", "real/a/b", false),
        ] {
            let (resolved, found) = resolve(&root.join(given)).unwrap();
            assert_eq!(resolved, root.join(expected), "{given}");
            assert_eq!(found, exists, "{given}");
        }
    }
}
