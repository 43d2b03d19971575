//! Small value types shared by every policy: file ids, tiers, log locations
//! and the policy clock value [`Time`].
//!
//! [`Time`] is a plain number of nanoseconds since an epoch chosen by whoever
//! drives the policy (the engine's monotonic start, or the simulator's zero).
//! Policies compare and subtract times; they never obtain one themselves.

use core::fmt;
use core::time::Duration;

/// Identifies a file across the policy layer. The engine maps paths to ids.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FileId(pub u64);

/// A storage tier.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Tier {
    /// The small fast tier (SSD/NVMe): the log regions live here.
    Fast,
    /// The slow capacity tier (HDD array or parallel file system).
    Capacity,
}

impl Tier {
    /// Lower-case name used in reports and metrics labels.
    pub fn name(self) -> &'static str {
        match self {
            Tier::Fast => "fast",
            Tier::Capacity => "capacity",
        }
    }
}

impl fmt::Display for Tier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One write request as the server sees it: which file, where, how long.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WriteRequest {
    /// File written.
    pub file: FileId,
    /// Byte offset in the file.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
}

impl WriteRequest {
    /// One past the last byte written, saturating at `u64::MAX` so a
    /// hostile offset cannot overflow.
    pub fn end(&self) -> u64 {
        self.offset.saturating_add(self.len)
    }
}

/// Index of a fast-tier log region.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RegionId(pub u32);

/// Where a buffered byte range lives in the fast-tier log: a region and a
/// byte offset of the data inside that region.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LogLocation {
    /// Region holding the data.
    pub region: RegionId,
    /// Byte offset of the first data byte within the region.
    pub offset: u64,
}

/// A point in time, in nanoseconds since the driver's epoch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Time(u64);

impl Time {
    /// The driver's epoch.
    pub const ZERO: Time = Time(0);

    /// A time `nanos` nanoseconds after the epoch.
    pub const fn from_nanos(nanos: u64) -> Time {
        Time(nanos)
    }

    /// A time `millis` milliseconds after the epoch, saturating at the end
    /// of representable time (about 584 years).
    pub const fn from_millis(millis: u64) -> Time {
        Time(millis.saturating_mul(1_000_000))
    }

    /// Nanoseconds since the epoch.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// Time elapsed since `earlier`, or zero if `earlier` is later.
    pub fn saturating_since(self, earlier: Time) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }

    /// This time plus `d`, saturating at the end of representable time.
    pub fn saturating_add(self, d: Duration) -> Time {
        let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        Time(self.0.saturating_add(nanos))
    }
}
