//! Layout providers: where a file's objects live (DESIGN §7).
//!
//! A [`LayoutProvider`] answers, for one file, its [`FileLayout`]: the
//! object size and which storage target holds each object. The scheduler
//! (`sluice_policy::lads`) then queues objects per target.
//!
//! Providers: [`posix`] (one target per device), [`pfs`] (an emulated
//! striped parallel file system with device models and a congestion
//! schedule), [`gluster`] (`trusted.glusterfs.pathinfo`), [`lustre`]
//! (`lfs getstripe` output) and [`ceph`] (`ceph.file.layout` xattrs).

use std::fs::File;
use std::io;
use std::path::Path;

use sluice_policy::lads::{Object, StripeLayout, TargetId};
use sluice_policy::FileId;

pub mod ceph;
pub mod gluster;
pub mod lustre;
pub mod pfs;
pub mod posix;

/// One component of a composite (Lustre PFL) layout: bytes
/// `start..end` of the file are striped by `stripe`, with object offsets
/// counted from `start`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Component {
    /// First byte covered.
    pub start: u64,
    /// One past the last byte covered (`u64::MAX` for "to end of file").
    pub end: u64,
    /// Striping of this component.
    pub stripe: StripeLayout,
}

/// Where the objects of one file live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FileLayout {
    /// RAID-0 over targets: POSIX (one target), the emulated PFS, a plain
    /// Lustre layout, GlusterFS distribute (one brick).
    Stripe(StripeLayout),
    /// Lustre progressive file layout: components in offset order.
    Composite(Vec<Component>),
    /// CephFS file layout. Stripe unit `k` goes to RADOS object
    /// `(k / (count·per)) · count + k % count` where `per =
    /// object_size / stripe_unit`; the target is that object number (which
    /// OSD holds it is CRUSH's choice and not visible to a client).
    Ceph {
        /// Bytes per stripe unit.
        stripe_unit: u64,
        /// Objects a stripe spans.
        stripe_count: u64,
        /// Bytes per RADOS object (a multiple of `stripe_unit`).
        object_size: u64,
    },
}

impl FileLayout {
    /// The objects of a file of `len` bytes, in offset order: the units the
    /// transfer reads, checksums and sends.
    pub fn objects(&self, file: FileId, len: u64) -> Vec<Object> {
        match self {
            FileLayout::Stripe(stripe) => stripe.objects(file, len).collect(),
            FileLayout::Composite(components) => {
                let mut out = Vec::new();
                for c in components {
                    if c.start >= len {
                        break;
                    }
                    let end = c.end.min(len);
                    let size = c.stripe.object_size;
                    let mut offset = c.start;
                    while offset < end {
                        // Objects are aligned from the component's start.
                        let rel = offset - c.start;
                        let next = (rel / size + 1)
                            .saturating_mul(size)
                            .saturating_add(c.start);
                        let stop = next.min(end);
                        out.push(Object {
                            file,
                            offset,
                            len: stop - offset,
                            target: c.stripe.target_of(rel),
                        });
                        offset = stop;
                    }
                }
                out
            }
            FileLayout::Ceph {
                stripe_unit,
                stripe_count,
                object_size,
            } => {
                let (su, sc) = (*stripe_unit, (*stripe_count).max(1));
                let per = (*object_size / su).max(1);
                (0..len.div_ceil(su))
                    .map(|k| {
                        let offset = k * su;
                        let objno = (k / (sc * per)) * sc + k % sc;
                        Object {
                            file,
                            offset,
                            len: su.min(len - offset),
                            target: TargetId(u32::try_from(objno).unwrap_or(u32::MAX)),
                        }
                    })
                    .collect()
            }
        }
    }
}

/// An open source file: its ordinary descriptor, and the same file opened
/// with `O_DIRECT` when its provider reads around the page cache
/// ([`LayoutProvider::direct_reads`]).
#[derive(Debug)]
pub struct SourceFile {
    /// The ordinary descriptor (metadata, cached pages, unaligned reads).
    pub file: File,
    /// The same file opened with `O_DIRECT`, if at all.
    pub direct: Option<File>,
}

impl SourceFile {
    /// Open `path`, a second time with `O_DIRECT` when `direct` is asked
    /// for and its file system takes it.
    pub fn open(path: &Path, direct: bool) -> io::Result<SourceFile> {
        let (file, direct) = if direct {
            crate::direct::open_for_direct_reads(path)?
        } else {
            (File::open(path)?, None)
        };
        Ok(SourceFile { file, direct })
    }

    /// Read `buf.len()` bytes at `offset`: from the page cache when it
    /// holds them, else directly when `buf` is aligned
    /// ([`crate::direct::read_at`]).
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        crate::direct::read_at(&self.file, self.direct.as_ref(), buf, offset)
    }
}

/// Finds the layout of files on one file system.
pub trait LayoutProvider: Send + Sync {
    /// Short name for reports (`posix`, `pfs`, `gluster`, `lustre`, `ceph`).
    fn name(&self) -> &'static str;

    /// The layout of the regular file at `path`, which is `len` bytes long.
    fn layout(&self, path: &Path, len: u64) -> io::Result<FileLayout>;

    /// Read `object` of the open file at `path` into `buf` (whose length is
    /// the object's). The default is [`SourceFile::read_at`]; an emulated
    /// file system adds its device time.
    fn read_object(
        &self,
        path: &Path,
        file: &SourceFile,
        object: &Object,
        buf: &mut [u8],
    ) -> io::Result<()> {
        let _ = path;
        file.read_at(buf, object.offset)
    }

    /// Open files a second time with `O_DIRECT` and read the objects the
    /// page cache does not hold around it: a cold file is then not copied
    /// through the cache (about 0.3–0.7 CPU s per GiB saved on the machine
    /// measured; docs/lads.md, "Line rate"). False by default: a network
    /// or FUSE file system may serve direct reads slowly; the local
    /// providers say true.
    fn direct_reads(&self) -> bool {
        false
    }

    /// Threads to allow on one target at once when the user does not say:
    /// 1, the paper's skip-busy, for a file system's storage targets.
    /// Providers whose target is a device with its own request queue
    /// return `threads`.
    fn default_depth(&self, threads: u32) -> u32 {
        let _ = threads;
        1
    }

    /// A human-readable name of a target (`OST0007`, a brick), for reports.
    fn target_name(&self, target: TargetId) -> String {
        format!("target{}", target.0)
    }
}

/// `statfs` magic numbers of the file systems with a provider.
const LUSTRE_MAGIC: i64 = 0x0BD0_0BD0;
const CEPH_MAGIC: i64 = 0x00C3_6400;
const FUSE_MAGIC: i64 = 0x6573_5546;

/// Pick the provider for the file system holding `path`: Lustre and CephFS
/// by their `statfs` magic, GlusterFS as a FUSE mount that answers
/// `trusted.glusterfs.pathinfo`, anything else POSIX with objects of
/// `object_size`.
pub fn detect(path: &Path, object_size: u64) -> io::Result<std::sync::Arc<dyn LayoutProvider>> {
    let fs = rustix::fs::statfs(path).map_err(|e| {
        io::Error::new(
            io::Error::from(e).kind(),
            format!("{}: {e}", path.display()),
        )
    })?;
    #[allow(clippy::unnecessary_cast)] // f_type's width differs between targets
    let magic = fs.f_type as i64;
    Ok(match magic {
        LUSTRE_MAGIC => std::sync::Arc::new(lustre::LustreLayout::new()),
        CEPH_MAGIC => std::sync::Arc::new(ceph::CephLayout::new()),
        FUSE_MAGIC
            if rustix::fs::lgetxattr(path, "trusted.glusterfs.pathinfo", &mut [0u8; 0][..])
                .is_ok() =>
        {
            std::sync::Arc::new(gluster::GlusterLayout::with_object_size(object_size)?)
        }
        _ => std::sync::Arc::new(posix::PosixLayout::new(object_size)),
    })
}
