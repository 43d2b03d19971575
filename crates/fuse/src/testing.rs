//! What the unit tests of passthrough.rs and pagecache.rs share: a volume
//! over real directories.

use std::ffi::OsStr;
use std::sync::Arc;

use rustix::fs::OFlags;
use sluice_engine::{Engine, EngineConfig};
use sluice_env::posix::PosixBackend;
use sluice_env::{Backend, SystemClock};
use sluice_policy::redirector::{RedirectPolicy, RedirectorConfig};

use crate::inodes::ROOT;
use crate::volume::{Caller, Volume};

pub(crate) const RDWR: i32 = OFlags::RDWR.bits() as i32;
pub(crate) const RDONLY: i32 = OFlags::RDONLY.bits() as i32;

/// A volume over `dir/fast` and `dir/capacity` under `policy`, with the
/// file `f` created, `len` bytes written and left open: the volume, the
/// file's node and its handle.
pub(crate) fn volume_with_file(
    dir: &tempfile::TempDir,
    policy: RedirectPolicy,
    len: usize,
) -> (Volume, u64, u64) {
    let tier = |name: &str| -> Arc<dyn Backend> {
        let root = dir.path().join(name);
        std::fs::create_dir_all(&root).unwrap();
        Arc::new(PosixBackend::new(root).unwrap())
    };
    let config = EngineConfig {
        redirector: RedirectorConfig {
            policy,
            ..RedirectorConfig::default()
        },
        ..EngineConfig::default()
    };
    let engine = Engine::open(
        tier("fast"),
        tier("capacity"),
        Arc::new(SystemClock::new()),
        config,
    )
    .unwrap();
    let v = Volume::new(Arc::new(engine), None, None);
    let me = Caller {
        uid: rustix::process::geteuid().as_raw(),
        gid: rustix::process::getegid().as_raw(),
        umask: 0o022,
    };
    let (attr, fh) = v.create(&me, ROOT, OsStr::new("f"), 0o644).unwrap();
    v.write(attr.ino, fh, 0, &vec![7u8; len], false).unwrap();
    (v, attr.ino, fh)
}
