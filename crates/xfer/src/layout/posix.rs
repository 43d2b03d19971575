//! POSIX layout: one target per device (`st_dev`), objects of a fixed size.
//!
//! A local file system gives no striping information, so a file is one
//! stripe on the target of the device it lives on. Files on different
//! devices (several disks, several mounts) land in different queues, and
//! round-robin spreads the threads over them.

use std::collections::HashMap;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Mutex;

use sluice_policy::lads::{StripeLayout, TargetId};

use super::{FileLayout, LayoutProvider};

/// See the module docs.
#[derive(Debug)]
pub struct PosixLayout {
    object_size: u64,
    devices: Mutex<HashMap<u64, u32>>,
}

impl PosixLayout {
    /// Objects of `object_size` bytes (must be > 0).
    pub fn new(object_size: u64) -> PosixLayout {
        PosixLayout {
            object_size: object_size.max(1),
            devices: Mutex::new(HashMap::new()),
        }
    }
}

impl LayoutProvider for PosixLayout {
    fn name(&self) -> &'static str {
        "posix"
    }

    fn layout(&self, path: &Path, _len: u64) -> io::Result<FileLayout> {
        let dev = std::fs::metadata(path)?.dev();
        let mut devices = sluice_env::lock(&self.devices);
        let next = devices.len() as u32;
        let id = *devices.entry(dev).or_insert(next);
        let stripe =
            StripeLayout::new(self.object_size, vec![TargetId(id)]).expect("size > 0, one target");
        Ok(FileLayout::Stripe(stripe))
    }

    /// A local device queues requests itself: one slot per thread, or a
    /// disk would get a single reader.
    fn default_depth(&self, threads: u32) -> u32 {
        threads
    }

    /// A local file system: cold objects are read with `O_DIRECT`.
    fn direct_reads(&self) -> bool {
        true
    }

    fn target_name(&self, target: TargetId) -> String {
        let devices = sluice_env::lock(&self.devices);
        devices.iter().find(|(_, &id)| id == target.0).map_or_else(
            || format!("target{}", target.0),
            |(dev, _)| format!("dev{:x}", dev),
        )
    }
}
