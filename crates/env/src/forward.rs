//! The one forwarding layer for wrapper backends: [`Forward`] for a
//! [`Backend`] that wraps another, [`ForwardFile`] for its open files.
//!
//! A wrapper (fault injection, an emulated device, LiU's read path, a test
//! hook) implements `Forward`: `inner()` and only the calls it changes.
//! The blanket impls below make it a `Backend` (a `BackendFile`), and
//! every call it does not write forwards to `inner()`.
//!
//! INVARIANT: a method added to `Backend` or `BackendFile` never skips a
//! wrapper silently (docs/decisions.md, "One forwarding layer for
//! wrappers"):
//! * the blanket impls deny `clippy::missing_trait_methods` (CI runs
//!   clippy with `-D warnings`), so a new method, with a default or not,
//!   fails the build until it is added to the lists below; no wrapper can
//!   inherit the trait's own default (EOPNOTSUPP, `false`), which is what
//!   happened before this layer: `change_times_exact` and a file's
//!   xattrs reached some wrappers and not others;
//! * each entry decides what a wrapper that does not write the method
//!   gets: the inner's answer (`forwarded`), or a composition of the
//!   wrapper's own calls (`composed`), so that a wrapper that charges,
//!   checks or gates `read_at`/`write_at` sees every byte a vectored write
//!   or a full read moves, and no kernel descriptor (`as_fd`) lets a copy
//!   go around it. A new call that moves bytes must be `composed`, or have
//!   no default at all, so that every wrapper has to write it;
//! * a wrapper for which any pass-through it did not choose is a bug (it
//!   must see every call: fault injection; it keeps a cache coherent:
//!   LiU) denies `clippy::missing_trait_methods` on its own impl and so
//!   writes every method: a new one fails its build.

use std::fmt;
use std::io;
use std::os::fd::BorrowedFd;
use std::sync::Arc;

use crate::{
    Allocate, Backend, BackendFile, DirEntry, Metadata, OpenOptions, RelPath, SetAttr, SpaceInfo,
    SpecialFile, Stat, StatKind, TierHealth, XattrFlags,
};

/// Reads into `buf` at `offset` with `read` until it is full or the file
/// ends, retrying interrupted reads: [`BackendFile::read_full_at`]'s
/// default, for wrappers that write it out.
pub fn read_full(
    buf: &mut [u8],
    offset: u64,
    mut read: impl FnMut(&mut [u8], u64) -> io::Result<usize>,
) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match read(&mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// Joins `bufs` and writes them at `offset` with `write`:
/// [`BackendFile::write_vectored_at`]'s default, for wrappers that write
/// it out.
pub fn write_joined(
    bufs: &[&[u8]],
    offset: u64,
    write: impl FnOnce(&[u8], u64) -> io::Result<()>,
) -> io::Result<()> {
    let mut joined = Vec::with_capacity(bufs.iter().map(|b| b.len()).sum());
    for buf in bufs {
        joined.extend_from_slice(buf);
    }
    write(&joined, offset)
}

/// Defines a forwarding trait (`$forward`, with `inner()` and every method
/// of `$target`) and the blanket impl of `$target` for its implementors.
/// `forwarded` methods call the inner's by default; `composed` ones have
/// the body given, which may only use the wrapper's own calls.
macro_rules! forwarding_layer {
    (
        $(#[$doc:meta])*
        pub trait $forward:ident for $target:ident {
            forwarded {
                $( fn $name:ident(&self $(, $arg:ident: $ty:ty)*) -> $ret:ty; )*
            }
            composed {
                $(
                    $(#[$composed_doc:meta])*
                    fn $composed:ident(&$this:ident $(, $carg:ident: $cty:ty)*) -> $cret:ty
                    $body:block
                )*
            }
        }
    ) => {
        $(#[$doc])*
        pub trait $forward: Send + Sync + fmt::Debug {
            /// What this wraps: every call the wrapper does not write goes
            /// to it.
            fn inner(&self) -> &dyn $target;
            $(
                #[doc = concat!("[`", stringify!($target), "::", stringify!($name), "`]; forwards to `inner()` unless written.")]
                fn $name(&self $(, $arg: $ty)*) -> $ret {
                    self.inner().$name($($arg),*)
                }
            )*
            $(
                $(#[$composed_doc])*
                fn $composed(&$this $(, $carg: $cty)*) -> $cret $body
            )*
        }

        // Every method listed, none left to the trait's default: see the
        // module doc.
        #[deny(clippy::missing_trait_methods)]
        impl<T: $forward> $target for T {
            $(
                fn $name(&self $(, $arg: $ty)*) -> $ret {
                    $forward::$name(self $(, $arg)*)
                }
            )*
            $(
                fn $composed(&self $(, $carg: $cty)*) -> $cret {
                    $forward::$composed(self $(, $carg)*)
                }
            )*
        }
    };
}

forwarding_layer! {
    /// A [`Backend`] that wraps another: implement `inner()` and the calls
    /// that change; the rest forward (see the module doc). Every method of
    /// `Backend` is forwarded: none of them moves a file's bytes (those go
    /// through the files `open` returns, which a wrapper that sees bytes
    /// wraps in a [`ForwardFile`]).
    pub trait Forward for Backend {
        forwarded {
            fn describe(&self) -> String;
            fn open(&self, path: &RelPath, options: OpenOptions) -> io::Result<Arc<dyn BackendFile>>;
            fn metadata(&self, path: &RelPath) -> io::Result<Metadata>;
            fn remove_file(&self, path: &RelPath) -> io::Result<()>;
            fn rename(&self, from: &RelPath, to: &RelPath) -> io::Result<()>;
            fn create_dir(&self, path: &RelPath) -> io::Result<()>;
            fn create_private_dir(&self, path: &RelPath) -> io::Result<()>;
            fn remove_dir(&self, path: &RelPath) -> io::Result<()>;
            fn read_dir(&self, path: &RelPath) -> io::Result<Vec<DirEntry>>;
            fn sync_dir(&self, path: &RelPath) -> io::Result<()>;
            fn space(&self) -> io::Result<SpaceInfo>;
            fn check_root(&self) -> io::Result<()>;
            fn health(&self) -> TierHealth;
            fn change_times_exact(&self) -> bool;
            fn page_cache_shared(&self) -> bool;
            fn fast_tier_growth(&self) -> u64;
            fn stat(&self, path: &RelPath) -> io::Result<Stat>;
            fn set_attr(&self, path: &RelPath, attr: &SetAttr) -> io::Result<()>;
            fn symlink(&self, target: &str, link: &RelPath) -> io::Result<()>;
            fn mknod(&self, path: &RelPath, node: SpecialFile, mode: u32) -> io::Result<()>;
            fn hard_link(&self, existing: &RelPath, new: &RelPath) -> io::Result<()>;
            fn read_link(&self, path: &RelPath) -> io::Result<String>;
            fn read_dir_all(&self, path: &RelPath) -> io::Result<Vec<(String, StatKind)>>;
            fn get_xattr(&self, path: &RelPath, name: &str) -> io::Result<Vec<u8>>;
            fn set_xattr(&self, path: &RelPath, name: &str, value: &[u8], flags: XattrFlags) -> io::Result<()>;
            fn list_xattr(&self, path: &RelPath) -> io::Result<Vec<String>>;
            fn remove_xattr(&self, path: &RelPath, name: &str) -> io::Result<()>;
        }
        composed {}
    }
}

forwarding_layer! {
    /// A [`BackendFile`] that wraps another: implement `inner()` and the
    /// calls that change; the rest forward, except the calls that move
    /// bytes on the wrapper's behalf (see the module doc).
    pub trait ForwardFile for BackendFile {
        forwarded {
            fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
            fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
            fn sync_data(&self) -> io::Result<()>;
            fn len(&self) -> io::Result<u64>;
            fn set_len(&self, len: u64) -> io::Result<()>;
            fn allocate(&self, mode: Allocate, offset: u64, len: u64) -> io::Result<()>;
            fn stat(&self) -> io::Result<Stat>;
            fn set_xattr(&self, name: &str, value: &[u8], flags: XattrFlags) -> io::Result<()>;
            fn remove_xattr(&self, name: &str) -> io::Result<()>;
        }
        composed {
            /// [`BackendFile::read_full_at`]: this wrapper's `read_at`
            /// until full, never the inner's.
            fn read_full_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
                read_full(buf, offset, |buf, at| self.read_at(buf, at))
            }
            /// [`BackendFile::write_vectored_at`]: joined and written with
            /// this wrapper's `write_at`, never the inner's, so its rule
            /// sees the bytes.
            fn write_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> io::Result<()> {
                write_joined(bufs, offset, |buf, at| self.write_at(buf, at))
            }
            /// [`BackendFile::is_empty`]: this wrapper's `len`.
            fn is_empty(&self) -> io::Result<bool> {
                Ok(self.len()? == 0)
            }
            /// [`BackendFile::as_fd`]: none, never the inner's, so no copy
            /// in the kernel goes around the wrapper.
            fn as_fd(&self) -> Option<BorrowedFd<'_>> {
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::posix::PosixBackend;

    /// Changes nothing: every call is the inner's.
    #[derive(Debug)]
    struct Plain(Arc<dyn Backend>);

    impl Forward for Plain {
        fn inner(&self) -> &dyn Backend {
            &*self.0
        }
    }

    /// Counts the bytes its files' `read_at` and `write_at` see.
    #[derive(Debug)]
    struct Counting {
        inner: Arc<dyn Backend>,
        bytes: Arc<AtomicUsize>,
    }

    #[derive(Debug)]
    struct CountingFile {
        inner: Arc<dyn BackendFile>,
        bytes: Arc<AtomicUsize>,
    }

    impl Forward for Counting {
        fn inner(&self) -> &dyn Backend {
            &*self.inner
        }
        fn open(&self, path: &RelPath, options: OpenOptions) -> io::Result<Arc<dyn BackendFile>> {
            Ok(Arc::new(CountingFile {
                inner: self.inner.open(path, options)?,
                bytes: Arc::clone(&self.bytes),
            }))
        }
    }

    impl ForwardFile for CountingFile {
        fn inner(&self) -> &dyn BackendFile {
            &*self.inner
        }
        fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
            self.bytes.fetch_add(buf.len(), Ordering::SeqCst);
            self.inner.read_at(buf, offset)
        }
        fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
            self.bytes.fetch_add(buf.len(), Ordering::SeqCst);
            self.inner.write_at(buf, offset)
        }
    }

    fn path(p: &str) -> RelPath {
        RelPath::new(p).unwrap()
    }

    #[test]
    fn a_wrapper_that_writes_nothing_answers_as_its_inner() {
        let dir = tempfile::tempdir().unwrap();
        let posix: Arc<dyn Backend> =
            Arc::new(PosixBackend::new(dir.path().to_path_buf()).unwrap());
        let plain: &dyn Backend = &Plain(Arc::clone(&posix));
        assert_eq!(plain.describe(), posix.describe());
        assert_eq!(plain.page_cache_shared(), posix.page_cache_shared());
        assert_eq!(plain.change_times_exact(), posix.change_times_exact());
        assert_eq!(plain.health(), posix.health());
        plain.create_private_dir(&path("d")).unwrap();
        plain.symlink("target", &path("d/l")).unwrap();
        // Not the trait's defaults (EOPNOTSUPP, links left out): the inner's.
        assert_eq!(plain.stat(&path("d")).unwrap().mode, 0o700);
        assert_eq!(plain.read_link(&path("d/l")).unwrap(), "target");
        assert_eq!(
            plain.read_dir_all(&path("d")).unwrap(),
            vec![("l".to_string(), StatKind::Symlink)]
        );
    }

    #[test]
    fn bytes_moved_for_a_wrapper_go_through_its_own_calls() {
        let dir = tempfile::tempdir().unwrap();
        let posix: Arc<dyn Backend> =
            Arc::new(PosixBackend::new(dir.path().to_path_buf()).unwrap());
        let bytes = Arc::new(AtomicUsize::new(0));
        let counting: &dyn Backend = &Counting {
            inner: posix,
            bytes: Arc::clone(&bytes),
        };
        let file = counting.open(&path("f"), OpenOptions::CREATE).unwrap();
        file.write_vectored_at(&[&b"abc"[..], b"de"], 0).unwrap();
        assert_eq!(bytes.load(Ordering::SeqCst), 5, "a vectored write");
        let mut buf = [0u8; 5];
        assert_eq!(file.read_full_at(&mut buf, 0).unwrap(), 5);
        assert_eq!(&buf, b"abcde");
        assert!(bytes.load(Ordering::SeqCst) >= 10, "a full read");
        assert!(file.as_fd().is_none(), "no descriptor to copy around it");
        assert!(!file.is_empty().unwrap());
        assert_eq!(file.stat().unwrap().len, 5, "the rest forwards");
    }
}
