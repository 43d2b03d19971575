//! CephFS layout provider: a file's striping from its `ceph.file.layout`
//! virtual xattr (DESIGN §7).
//!
//! The kernel client and ceph-fuse answer `ceph.file.layout` with
//! `stripe_unit=4194304 stripe_count=1 object_size=4194304 pool=cephfs_data`
//! (plus ` pool_namespace=NS` when one is set). If that combined xattr is
//! missing, the individual `ceph.file.layout.stripe_unit`, `.stripe_count`
//! and `.object_size` xattrs are read instead. The result is
//! [`FileLayout::Ceph`], whose objects are RADOS objects (see its docs):
//! which OSD holds each is CRUSH's choice and not visible to a client.
//!
//! Parsing: whitespace-separated `key=value` fields in any order; unknown
//! keys are ignored (newer Ceph versions may add some), a repeated or
//! value-less field is an error.
//!
//! INVARIANTS (checked; a violation is an error, never a panic):
//! `1 ≤ stripe_unit ≤ object_size ≤ 4 GiB`, `object_size` is a multiple of
//! `stripe_unit`, `1 ≤ stripe_count ≤ 65535`; at most
//! [`MAX_LAYOUT_BYTES`] of input are read.

use std::io;
use std::path::Path;

use super::gluster::read_xattr;
use super::{FileLayout, LayoutProvider};

/// The combined layout xattr.
pub const LAYOUT_XATTR: &str = "ceph.file.layout";
/// Largest object (and stripe unit) accepted: 4 GiB.
pub const MAX_OBJECT_BYTES: u64 = 4 << 30;
/// Most objects a stripe may span.
pub const MAX_STRIPE_COUNT: u64 = 65535;
/// Longest layout value accepted.
pub const MAX_LAYOUT_BYTES: usize = 4096;

/// Why a `ceph.file.layout` value could not be understood.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CephLayoutError {
    /// The value is longer than [`MAX_LAYOUT_BYTES`].
    #[error("ceph.file.layout is {0} bytes, more than the {MAX_LAYOUT_BYTES} accepted")]
    TooLong(usize),
    /// A field is not `key=value`.
    #[error("ceph.file.layout field {0:?} is not key=value")]
    NotKeyValue(String),
    /// A field appears twice.
    #[error("ceph.file.layout has {0} twice")]
    Duplicate(&'static str),
    /// A required field is absent.
    #[error("ceph.file.layout has no {0}")]
    Missing(&'static str),
    /// A numeric field is not a number.
    #[error("ceph.file.layout {field}={value:?} is not a number")]
    NotANumber {
        /// Field name.
        field: &'static str,
        /// Its value (at most 40 bytes).
        value: String,
    },
    /// The numbers break an invariant.
    #[error("ceph.file.layout is invalid: {0}")]
    Invalid(String),
}

/// Parses a `ceph.file.layout` value into a [`FileLayout::Ceph`].
pub fn parse_ceph_layout(value: &str) -> Result<FileLayout, CephLayoutError> {
    if value.len() > MAX_LAYOUT_BYTES {
        return Err(CephLayoutError::TooLong(value.len()));
    }
    let value = value.trim_end_matches('\0');
    const FIELDS: [&str; 3] = ["stripe_unit", "stripe_count", "object_size"];
    let mut numbers: [Option<u64>; 3] = [None; 3];
    for field in value.split_ascii_whitespace() {
        let Some((key, v)) = field.split_once('=') else {
            return Err(CephLayoutError::NotKeyValue(clip(field)));
        };
        if key.is_empty() || v.is_empty() {
            return Err(CephLayoutError::NotKeyValue(clip(field)));
        }
        // pool, pool_namespace and anything newer are not needed here.
        let Some(i) = FIELDS.iter().position(|f| *f == key) else {
            continue;
        };
        if numbers[i].is_some() {
            return Err(CephLayoutError::Duplicate(FIELDS[i]));
        }
        let n = v.parse().map_err(|_| CephLayoutError::NotANumber {
            field: FIELDS[i],
            value: clip(v),
        })?;
        numbers[i] = Some(n);
    }
    let get = |i: usize| numbers[i].ok_or(CephLayoutError::Missing(FIELDS[i]));
    let (stripe_unit, stripe_count, object_size) = (get(0)?, get(1)?, get(2)?);
    let invalid = |msg: String| Err(CephLayoutError::Invalid(msg));
    if stripe_unit == 0 || stripe_unit > MAX_OBJECT_BYTES {
        return invalid(format!("stripe_unit {stripe_unit} is not in 1..=4 GiB"));
    }
    if object_size == 0 || object_size > MAX_OBJECT_BYTES {
        return invalid(format!("object_size {object_size} is not in 1..=4 GiB"));
    }
    if object_size % stripe_unit != 0 {
        return invalid(format!(
            "object_size {object_size} is not a multiple of stripe_unit {stripe_unit}"
        ));
    }
    if stripe_count == 0 || stripe_count > MAX_STRIPE_COUNT {
        return invalid(format!("stripe_count {stripe_count} is not in 1..=65535"));
    }
    Ok(FileLayout::Ceph {
        stripe_unit,
        stripe_count,
        object_size,
    })
}

fn clip(s: &str) -> String {
    let mut end = s.len().min(40);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

/// [`LayoutProvider`] for files on a CephFS mount (kernel or ceph-fuse).
#[derive(Clone, Copy, Debug, Default)]
pub struct CephLayout;

impl CephLayout {
    /// A provider.
    pub fn new() -> CephLayout {
        CephLayout
    }

    /// The combined value, or one built from the per-field xattrs.
    fn read_value(path: &Path) -> io::Result<String> {
        match read_xattr(path, LAYOUT_XATTR) {
            Ok(v) => return Ok(String::from_utf8_lossy(&v).into_owned()),
            Err(e) if e.raw_os_error() != Some(rustix::io::Errno::NODATA.raw_os_error()) => {
                return Err(xattr_error(path, LAYOUT_XATTR, e))
            }
            Err(_) => {}
        }
        let mut value = String::new();
        for field in ["stripe_unit", "stripe_count", "object_size"] {
            let name = format!("{LAYOUT_XATTR}.{field}");
            let v = read_xattr(path, &name).map_err(|e| xattr_error(path, &name, e))?;
            let v = String::from_utf8_lossy(&v);
            value.push_str(&format!("{field}={} ", v.trim_end_matches('\0').trim()));
        }
        Ok(value)
    }
}

fn xattr_error(path: &Path, name: &str, e: io::Error) -> io::Error {
    let code = e.raw_os_error();
    let hint = if code == Some(rustix::io::Errno::NODATA.raw_os_error())
        || code == Some(rustix::io::Errno::NOTSUP.raw_os_error())
    {
        ": the file is not on a CephFS mount"
    } else {
        ""
    };
    io::Error::new(
        e.kind(),
        format!("{}: cannot read xattr {name}: {e}{hint}", path.display()),
    )
}

impl LayoutProvider for CephLayout {
    fn name(&self) -> &'static str {
        "ceph"
    }

    fn layout(&self, path: &Path, _len: u64) -> io::Result<FileLayout> {
        let value = CephLayout::read_value(path)?;
        parse_ceph_layout(&value).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: {e}", path.display()),
            )
        })
    }

    fn target_name(&self, target: sluice_policy::lads::TargetId) -> String {
        format!("object{}", target.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ceph(stripe_unit: u64, stripe_count: u64, object_size: u64) -> FileLayout {
        FileLayout::Ceph {
            stripe_unit,
            stripe_count,
            object_size,
        }
    }

    #[test]
    fn valid_layouts() {
        let default = include_str!("../../testdata/ceph/default.txt");
        assert_eq!(
            parse_ceph_layout(default).unwrap(),
            ceph(4 << 20, 1, 4 << 20)
        );
        let striped = include_str!("../../testdata/ceph/striped-namespace.txt");
        assert_eq!(
            parse_ceph_layout(striped).unwrap(),
            ceph(1 << 20, 4, 4 << 20)
        );
        let pool_id = include_str!("../../testdata/ceph/pool-id.txt");
        assert_eq!(
            parse_ceph_layout(pool_id).unwrap(),
            ceph(64 << 10, 8, 8 << 20)
        );
        // Field order, extra blanks, a trailing NUL and unknown keys do not matter.
        let shuffled =
            "  object_size=4194304\tpool=p stripe_count=2 future_key=x stripe_unit=2097152 \0";
        assert_eq!(
            parse_ceph_layout(shuffled).unwrap(),
            ceph(2 << 20, 2, 4 << 20)
        );
    }

    #[test]
    fn striped_layout_objects_follow_ceph_striping() {
        let layout =
            parse_ceph_layout(include_str!("../../testdata/ceph/striped-namespace.txt")).unwrap();
        // Units 0..4 go to objects 0..4, then 4..8 back to 0..4 (4 units
        // per object), until 16 units fill the object set; unit 16 starts
        // object 4.
        let objects = layout.objects(sluice_policy::FileId(0), 17 << 20);
        let targets: Vec<u32> = objects.iter().map(|o| o.target.0).collect();
        assert_eq!(targets, [0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 4]);
    }

    #[test]
    fn invalid_layouts_are_errors() {
        use CephLayoutError::*;
        let missing = include_str!("../../testdata/ceph/malformed-missing-count.txt");
        assert_eq!(parse_ceph_layout(missing), Err(Missing("stripe_count")));
        let zero = include_str!("../../testdata/ceph/malformed-zero-unit.txt");
        assert!(matches!(parse_ceph_layout(zero), Err(Invalid(m)) if m.contains("stripe_unit 0")));
        let odd = include_str!("../../testdata/ceph/malformed-not-multiple.txt");
        assert!(matches!(parse_ceph_layout(odd), Err(Invalid(m)) if m.contains("not a multiple")));
        let cases: &[(&str, &str)] = &[
            ("", "no stripe_unit"),
            (
                "stripe_unit=1 stripe_count=0 object_size=1",
                "stripe_count 0",
            ),
            (
                "stripe_unit=1 stripe_count=65536 object_size=1",
                "stripe_count 65536",
            ),
            (
                "stripe_unit=1 stripe_count=1 object_size=0",
                "object_size 0",
            ),
            (
                "stripe_unit=8589934592 stripe_count=1 object_size=8589934592",
                "stripe_unit 8589934592",
            ),
            (
                "stripe_unit=4096 stripe_count=1 object_size=8589934592",
                "object_size 8589934592",
            ),
            (
                "stripe_unit=-1 stripe_count=1 object_size=1",
                "not a number",
            ),
            (
                "stripe_unit=99999999999999999999999 stripe_count=1 object_size=1",
                "not a number",
            ),
            (
                "stripe_unit=1 stripe_unit=1 stripe_count=1 object_size=1",
                "twice",
            ),
            ("stripe_unit stripe_count=1 object_size=1", "not key=value"),
            ("stripe_unit= stripe_count=1 object_size=1", "not key=value"),
            ("=1 stripe_count=1 object_size=1", "not key=value"),
        ];
        for (value, needle) in cases {
            let msg = parse_ceph_layout(value).expect_err(value).to_string();
            assert!(msg.contains(needle), "{value:?}: {msg:?} lacks {needle:?}");
        }
        let huge = format!("stripe_unit=1 {}", "pool=x ".repeat(1000));
        assert!(matches!(parse_ceph_layout(&huge), Err(TooLong(_))));
    }

    #[test]
    fn non_ceph_file_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, b"x").unwrap();
        let msg = CephLayout::new().layout(&file, 1).unwrap_err().to_string();
        assert!(msg.contains("ceph.file.layout"), "{msg}");
    }

    proptest::proptest! {
        #[test]
        fn parser_never_panics(value in ".{0,200}") {
            let _ = parse_ceph_layout(&value);
        }

        #[test]
        fn parsed_layouts_are_usable(
            value in "((stripe_unit|stripe_count|object_size|pool)=[0-9]{0,11} ?){0,5}"
        ) {
            if let Ok(layout) = parse_ceph_layout(&value) {
                let objects = layout.objects(sluice_policy::FileId(0), 1 << 16);
                proptest::prop_assert!(objects.iter().all(|o| o.len > 0));
            }
        }
    }
}
