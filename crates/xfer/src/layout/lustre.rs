//! Lustre layout provider: a file's striping from `lfs getstripe -v PATH`
//! (DESIGN §7).
//!
//! Why `lfs` and `-v`: `lfs` is on every Lustre client and needs no
//! library at build time (llapi would). `-v` adds only `lmm_magic`/`lmm_fid`
//! style detail lines, which are ignored; [`parse_getstripe`] accepts the
//! output with or without `-v`, from Lustre 2.10 (numeric `lmm_pattern`)
//! through 2.15.
//!
//! Understood output:
//! * plain layouts: `lmm_stripe_count`, `lmm_stripe_size`, `lmm_pattern`,
//!   then the `obdidx objid objid group` table → [`FileLayout::Stripe`]
//!   over the OSTs in table (stripe) order, [`TargetId`] = OST index;
//! * composite layouts (PFL, DoM, FLR): `lcm_*` header lines, then per
//!   component `lcme_id`, `lcme_mirror_id`, `lcme_flags`,
//!   `lcme_extent.e_start`/`e_end` (`EOF` = `u64::MAX`) and its own
//!   `lmm_*` lines and objects (`- N: { l_ost_idx: I, l_fid: [...] }`, or the
//!   table) → [`FileLayout::Composite`] (a single `0..EOF` component is
//!   returned as a plain [`FileLayout::Stripe`]).
//!
//! Decisions:
//! * An uninstantiated component (`lcme_flags` without `init`, no objects)
//!   holds no data yet: Lustre instantiates every component a write or
//!   truncate reaches. It is kept, so the layout still covers every byte if
//!   the file grew after `len` was taken, with its stripe size and the one
//!   placeholder target [`UNALLOCATED_TARGET`].
//! * A Data-on-MDT component (`lmm_pattern: mdt`) goes to the placeholder
//!   target [`MDT_TARGET`] (the client cannot tell which MDT).
//! * FLR (mirrored) files: the mirror with the lowest `lcme_mirror_id` that
//!   has no `stale` component is used; reading any in-sync mirror returns
//!   the file's data.
//! * HSM-released files (`released` pattern) and unknown patterns are
//!   errors.
//!
//! INVARIANTS (checked on every parsed layout; a violation is an error,
//! never a panic): stripe sizes are 1 byte ..= 4 GiB; an instantiated
//! RAID-0 component has 1 ..= 65535 objects, exactly `lmm_stripe_count`,
//! on OST indices ≤ 65535; components of the chosen mirror start at 0, are
//! sorted, contiguous and do not overlap (`start < end`). The parser reads
//! at most [`MAX_OUTPUT_BYTES`] and at most [`MAX_COMPONENTS`] components.

use std::ffi::OsString;
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use sluice_policy::lads::{StripeLayout, TargetId};

use super::{Component, FileLayout, LayoutProvider};

/// Largest stripe size accepted (4 GiB).
pub const MAX_STRIPE_BYTES: u64 = 4 << 30;
/// Most stripes (objects) one component may have.
pub const MAX_STRIPE_COUNT: u64 = 65535;
/// Highest OST index accepted.
pub const MAX_OST_INDEX: u32 = 0xFFFF;
/// Most components (over all mirrors) accepted.
pub const MAX_COMPONENTS: usize = 1024;
/// Longest `lfs getstripe` output accepted.
pub const MAX_OUTPUT_BYTES: usize = 16 << 20;
/// Placeholder target of a Data-on-MDT component.
pub const MDT_TARGET: TargetId = TargetId(u32::MAX - 1);
/// Placeholder target of a component that has no OST objects yet.
pub const UNALLOCATED_TARGET: TargetId = TargetId(u32::MAX);

/// Why `lfs getstripe` output could not be understood.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GetstripeError {
    /// The output is longer than [`MAX_OUTPUT_BYTES`].
    #[error("lfs getstripe output is {0} bytes, more than the {MAX_OUTPUT_BYTES} accepted")]
    TooLong(usize),
    /// A line that is neither a known `key: value`, an object row nor a
    /// section marker.
    #[error("lfs getstripe output line {line}: {what}: {text:?}")]
    Line {
        /// 1-based line number.
        line: usize,
        /// What is wrong with it.
        what: &'static str,
        /// The line (at most 80 bytes of it).
        text: String,
    },
    /// The output parsed but does not describe a usable layout.
    #[error("lfs getstripe layout is invalid: {0}")]
    Invalid(String),
}

fn invalid(msg: impl Into<String>) -> GetstripeError {
    GetstripeError::Invalid(msg.into())
}

/// The `lmm_*` part of a plain layout or of one component.
#[derive(Debug, Default)]
struct RawLmm {
    stripe_count: Option<i64>,
    stripe_size: Option<u64>,
    pattern: Option<String>,
    /// OST indices in stripe order.
    objects: Vec<u32>,
    /// An `lmm_objects:` or `obdidx` header was seen.
    objects_listed: bool,
}

#[derive(Debug, Default)]
struct RawComponent {
    mirror_id: u32,
    flags: String,
    start: Option<u64>,
    end: Option<u64>,
    lmm: RawLmm,
}

/// Where object rows go while they are being read.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Rows {
    None,
    Table,
    Yaml,
}

/// Parses `lfs getstripe [-v] FILE` output into a layout. The first line
/// may be the file's path (it is skipped if it is not a known line; a path
/// must not contain a newline).
pub fn parse_getstripe(output: &str) -> Result<FileLayout, GetstripeError> {
    if output.len() > MAX_OUTPUT_BYTES {
        return Err(GetstripeError::TooLong(output.len()));
    }
    let mut plain = RawLmm::default();
    let mut components: Vec<RawComponent> = Vec::new();
    let mut composite = false;
    let mut entry_count: Option<u64> = None;
    let mut rows = Rows::None;
    for (index, raw_line) in output.lines().enumerate() {
        let number = index + 1;
        let line = raw_line.trim();
        let bad = |what| GetstripeError::Line {
            line: number,
            what,
            text: excerpt(raw_line),
        };
        if line.is_empty() {
            rows = Rows::None;
            continue;
        }
        // Object rows.
        if rows == Rows::Table && line.starts_with(|c: char| c.is_ascii_digit()) {
            let idx = table_row(line).ok_or_else(|| bad("bad obdidx table row"))?;
            push_object(current(&mut components, &mut plain), idx)
                .map_err(|_| bad("more objects than a stripe may have"))?;
            continue;
        }
        if let Some(item) = line.strip_prefix("- ") {
            if rows == Rows::Yaml && !item.starts_with("lcme_id:") {
                let (n, idx) = yaml_object(item).ok_or_else(|| bad("bad lmm_objects entry"))?;
                let lmm = current(&mut components, &mut plain);
                if n != lmm.objects.len() as u64 {
                    return Err(bad("lmm_objects entries out of order"));
                }
                push_object(lmm, idx).map_err(|_| bad("more objects than a stripe may have"))?;
                continue;
            }
        }
        rows = Rows::None;
        match line {
            "composite_header:" | "components:" => {
                composite = true;
                continue;
            }
            "sub_layout:" => continue,
            "lmm_objects:" => {
                current(&mut components, &mut plain).objects_listed = true;
                rows = Rows::Yaml;
                continue;
            }
            _ => {}
        }
        if line.starts_with("obdidx") {
            current(&mut components, &mut plain).objects_listed = true;
            rows = Rows::Table;
            continue;
        }
        let pair = line.strip_prefix("- ").unwrap_or(line).split_once(':');
        let Some((key, value)) = pair.map(|(k, v)| (k.trim(), v.trim())) else {
            if index == 0 {
                continue; // the path line
            }
            return Err(bad("not a `key: value` line"));
        };
        let lmm = current(&mut components, &mut plain);
        match key {
            "lcme_id" => {
                if components.len() >= MAX_COMPONENTS {
                    return Err(bad("too many components"));
                }
                if !plain_is_empty(&plain) {
                    return Err(bad("component after a plain layout"));
                }
                composite = true;
                components.push(RawComponent::default());
            }
            "lcm_entry_count" => {
                composite = true;
                entry_count = Some(value.parse().map_err(|_| bad("bad lcm_entry_count"))?);
            }
            k if k.starts_with("lcm_") => composite = true,
            "lcme_mirror_id" | "lcme_flags" | "lcme_extent.e_start" | "lcme_extent.e_end" => {
                let Some(c) = components.last_mut() else {
                    return Err(bad("component field before lcme_id"));
                };
                match key {
                    "lcme_mirror_id" => {
                        c.mirror_id = value.parse().map_err(|_| bad("bad lcme_mirror_id"))?
                    }
                    "lcme_flags" => c.flags = value.to_string(),
                    "lcme_extent.e_start" => set_once(
                        &mut c.start,
                        extent(value).ok_or_else(|| bad("bad e_start"))?,
                    )
                    .map_err(|_| bad("duplicate e_start"))?,
                    _ => set_once(&mut c.end, extent(value).ok_or_else(|| bad("bad e_end"))?)
                        .map_err(|_| bad("duplicate e_end"))?,
                }
            }
            "lmm_stripe_count" => {
                let count = value.parse().map_err(|_| bad("bad lmm_stripe_count"))?;
                set_once(&mut lmm.stripe_count, count)
                    .map_err(|_| bad("duplicate lmm_stripe_count"))?;
            }
            "lmm_stripe_size" => {
                let size = value.parse().map_err(|_| bad("bad lmm_stripe_size"))?;
                set_once(&mut lmm.stripe_size, size)
                    .map_err(|_| bad("duplicate lmm_stripe_size"))?;
            }
            "lmm_pattern" => {
                set_once(&mut lmm.pattern, value.to_string())
                    .map_err(|_| bad("duplicate lmm_pattern"))?;
            }
            k if k.starts_with("lmv_") => {
                return Err(bad("a directory layout (lmv_*), not a file's"));
            }
            // lmm_magic, lmm_fid, lmm_pool, lcme_offset, lcme_timestamp, ...
            _ if index == 0 => {} // a path that happens to contain ':'
            k if k.starts_with("lmm_") || k.starts_with("lcme_") => {}
            _ => return Err(bad("unknown key")),
        }
    }

    if !composite {
        if plain_is_empty(&plain) {
            return Err(invalid("no layout in the output (no lmm_stripe_count)"));
        }
        let stripe = stripe_of(&plain, true, "plain layout")?;
        return Ok(FileLayout::Stripe(stripe));
    }
    if let Some(n) = entry_count {
        if n != components.len() as u64 {
            return Err(invalid(format!(
                "lcm_entry_count is {n} but the output lists {} components (truncated output?)",
                components.len()
            )));
        }
    }
    composite_of(&components)
}

/// The `lmm_*` lines go to the last component, or to the plain layout.
fn current<'a>(components: &'a mut [RawComponent], plain: &'a mut RawLmm) -> &'a mut RawLmm {
    match components.last_mut() {
        Some(c) => &mut c.lmm,
        None => plain,
    }
}

fn plain_is_empty(lmm: &RawLmm) -> bool {
    lmm.stripe_count.is_none()
        && lmm.stripe_size.is_none()
        && lmm.pattern.is_none()
        && !lmm.objects_listed
}

fn set_once<T>(slot: &mut Option<T>, value: T) -> Result<(), ()> {
    match slot {
        Some(_) => Err(()),
        None => {
            *slot = Some(value);
            Ok(())
        }
    }
}

fn push_object(lmm: &mut RawLmm, idx: u32) -> Result<(), ()> {
    if lmm.objects.len() as u64 >= MAX_STRIPE_COUNT {
        return Err(());
    }
    lmm.objects.push(idx);
    Ok(())
}

fn excerpt(line: &str) -> String {
    let mut end = line.len().min(80);
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    line[..end].to_string()
}

/// A component extent bound: a decimal byte offset or `EOF`.
fn extent(value: &str) -> Option<u64> {
    if value == "EOF" {
        Some(u64::MAX)
    } else {
        value.parse().ok()
    }
}

/// A decimal or `0x` hexadecimal number.
fn number(token: &str) -> Option<u64> {
    match token
        .strip_prefix("0x")
        .or_else(|| token.strip_prefix("0X"))
    {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => token.parse().ok(),
    }
}

/// `obdidx objid objid group [*]` → the OST index.
fn table_row(line: &str) -> Option<u32> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    let fields = match fields.as_slice() {
        [a, b, c, d] | [a, b, c, d, "*"] => [*a, *b, *c, *d],
        _ => return None,
    };
    if fields[1..].iter().any(|f| number(f).is_none()) {
        return None;
    }
    fields[0].parse().ok()
}

/// `N: { l_ost_idx: I, l_fid: [...] }` → `(N, I)`.
fn yaml_object(item: &str) -> Option<(u64, u32)> {
    let (n, body) = item.split_once(':')?;
    let n = n.trim().parse().ok()?;
    let body = body.trim().strip_prefix('{')?.strip_suffix('}')?;
    let mut idx = None;
    for field in body.split(',') {
        let (key, value) = field.split_once(':')?;
        if key.trim() == "l_ost_idx" {
            idx = Some(value.trim().parse().ok()?);
        }
    }
    Some((n, idx?))
}

enum Pattern {
    Raid0,
    Mdt,
}

fn pattern_of(pattern: Option<&str>, what: &str) -> Result<Pattern, GetstripeError> {
    let Some(pattern) = pattern else {
        return Err(invalid(format!("{what}: no lmm_pattern")));
    };
    let mut raid0 = false;
    let mut mdt = false;
    for flag in pattern.split(',').map(str::trim) {
        match flag {
            "raid0" | "1" | "0x1" => raid0 = true,
            "mdt" | "0x100" => mdt = true,
            "overstriped" => {} // OST indices may repeat: fine
            "released" => {
                return Err(invalid(format!(
                    "{what}: the file is HSM-released (no data on OSTs); restore it first"
                )))
            }
            _ => {
                return Err(invalid(format!(
                    "{what}: unsupported lmm_pattern {pattern:?}"
                )))
            }
        }
    }
    match (raid0, mdt) {
        (true, false) => Ok(Pattern::Raid0),
        (false, true) => Ok(Pattern::Mdt),
        _ => Err(invalid(format!(
            "{what}: unsupported lmm_pattern {pattern:?}"
        ))),
    }
}

/// The striping of one plain layout or component. `instantiated`: it has
/// (must have) OST objects.
fn stripe_of(lmm: &RawLmm, instantiated: bool, what: &str) -> Result<StripeLayout, GetstripeError> {
    let size = lmm
        .stripe_size
        .ok_or_else(|| invalid(format!("{what}: no lmm_stripe_size")))?;
    if size == 0 || size > MAX_STRIPE_BYTES {
        return Err(invalid(format!(
            "{what}: stripe size {size} is not in 1..=4 GiB"
        )));
    }
    let count = lmm
        .stripe_count
        .ok_or_else(|| invalid(format!("{what}: no lmm_stripe_count")))?;
    let targets = match pattern_of(lmm.pattern.as_deref(), what)? {
        Pattern::Mdt => {
            if !lmm.objects.is_empty() {
                return Err(invalid(format!(
                    "{what}: a Data-on-MDT component with OST objects"
                )));
            }
            vec![MDT_TARGET]
        }
        Pattern::Raid0 if !instantiated && lmm.objects.is_empty() => {
            // -1 means "all OSTs"; which ones is decided on instantiation.
            if count != -1 && !(1..=MAX_STRIPE_COUNT as i64).contains(&count) {
                return Err(invalid(format!(
                    "{what}: stripe count {count} is not -1 or 1..=65535"
                )));
            }
            vec![UNALLOCATED_TARGET]
        }
        Pattern::Raid0 => {
            if !(1..=MAX_STRIPE_COUNT as i64).contains(&count) {
                return Err(invalid(format!(
                    "{what}: stripe count {count} is not in 1..=65535"
                )));
            }
            if lmm.objects.len() as i64 != count {
                return Err(invalid(format!(
                    "{what}: lmm_stripe_count is {count} but {} objects are listed",
                    lmm.objects.len()
                )));
            }
            if let Some(idx) = lmm.objects.iter().find(|&&i| i > MAX_OST_INDEX) {
                return Err(invalid(format!(
                    "{what}: OST index {idx} is above {MAX_OST_INDEX}"
                )));
            }
            lmm.objects.iter().map(|&i| TargetId(i)).collect()
        }
    };
    // INVARIANT: size > 0 and targets is non-empty in every branch above.
    Ok(StripeLayout::new(size, targets).expect("size > 0 and at least one target"))
}

fn composite_of(components: &[RawComponent]) -> Result<FileLayout, GetstripeError> {
    if components.is_empty() {
        return Err(invalid("composite layout with no components"));
    }
    let mut mirrors: Vec<u32> = components.iter().map(|c| c.mirror_id).collect();
    mirrors.sort_unstable();
    mirrors.dedup();
    let stale = |m: u32| {
        components
            .iter()
            .filter(|c| c.mirror_id == m)
            .any(|c| c.flags.split(',').any(|f| f.trim() == "stale"))
    };
    let Some(mirror) = mirrors.iter().copied().find(|&m| !stale(m)) else {
        return Err(invalid("every mirror has a stale component"));
    };
    let mut out: Vec<Component> = Vec::new();
    for (i, c) in components
        .iter()
        .filter(|c| c.mirror_id == mirror)
        .enumerate()
    {
        let what = format!("component {}", i + 1);
        let start = c
            .start
            .ok_or_else(|| invalid(format!("{what}: no lcme_extent.e_start")))?;
        let end = c
            .end
            .ok_or_else(|| invalid(format!("{what}: no lcme_extent.e_end")))?;
        if start >= end {
            return Err(invalid(format!("{what}: empty extent {start}..{end}")));
        }
        let expected = out.last().map_or(0, |p| p.end);
        if start != expected {
            let why = if start < expected {
                "overlaps or is out of order"
            } else {
                "leaves a gap"
            };
            return Err(invalid(format!(
                "{what}: starts at {start}, expected {expected}: components {why}"
            )));
        }
        let instantiated = c.flags.split(',').any(|f| f.trim() == "init");
        let stripe = stripe_of(&c.lmm, instantiated, &what)?;
        out.push(Component { start, end, stripe });
    }
    if let [only] = out.as_slice() {
        if only.start == 0 && only.end == u64::MAX {
            return Ok(FileLayout::Stripe(only.stripe.clone()));
        }
    }
    Ok(FileLayout::Composite(out))
}

/// [`LayoutProvider`] for files on a Lustre client mount, by `lfs`.
#[derive(Clone, Debug)]
pub struct LustreLayout {
    lfs: PathBuf,
    timeout: Duration,
}

impl Default for LustreLayout {
    fn default() -> Self {
        LustreLayout::new()
    }
}

impl LustreLayout {
    /// Time allowed for one `lfs getstripe` when none is configured.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

    /// A provider running `lfs` from `PATH`.
    pub fn new() -> LustreLayout {
        LustreLayout::with_lfs("lfs")
    }

    /// A provider running the `lfs` at `lfs` (tests use a fake one).
    pub fn with_lfs(lfs: impl Into<PathBuf>) -> LustreLayout {
        LustreLayout {
            lfs: lfs.into(),
            timeout: Self::DEFAULT_TIMEOUT,
        }
    }

    /// The same provider with another time limit per `lfs` run.
    pub fn timeout(mut self, timeout: Duration) -> LustreLayout {
        self.timeout = timeout;
        self
    }

    /// Runs `lfs getstripe -v PATH` and returns its standard output.
    fn getstripe(&self, path: &Path) -> io::Result<String> {
        if path.as_os_str().as_bytes().contains(&b'\n') {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{}: a path with a newline makes lfs output ambiguous",
                    path.display()
                ),
            ));
        }
        // "./" keeps a relative path from being read as an option and makes
        // the first output line unlike any `key: value` line.
        let mut arg = OsString::new();
        if path.is_relative() {
            arg.push("./");
        }
        arg.push(path.as_os_str());
        let mut child = match Command::new(&self.lfs)
            .args(["getstripe", "-v"])
            .arg(&arg)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
        {
            Ok(child) => child,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(io::Error::new(
                    io::ErrorKind::NotFound,
                    format!(
                        "lfs not found ({}): install the Lustre client utilities to read Lustre layouts",
                        self.lfs.display()
                    ),
                ))
            }
            Err(e) => return Err(io::Error::new(e.kind(), format!("cannot run {}: {e}", self.lfs.display()))),
        };
        // Read both pipes on threads (so neither fills up), keeping at most
        // a bounded prefix of each and draining the rest.
        let read_capped = |pipe: Option<Box<dyn Read + Send>>, cap: usize| {
            move || {
                let mut buf = Vec::new();
                if let Some(mut pipe) = pipe {
                    let _ = pipe.by_ref().take(cap as u64 + 1).read_to_end(&mut buf);
                    let _ = io::copy(&mut pipe, &mut io::sink());
                }
                buf
            }
        };
        let stdout = child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>);
        let stderr = child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>);
        let (tx, rx) = mpsc::channel();
        let out_reader = read_capped(stdout, MAX_OUTPUT_BYTES);
        std::thread::spawn(move || {
            let _ = tx.send(out_reader());
        });
        let err_thread = std::thread::spawn(read_capped(stderr, 4096));
        let out = match rx.recv_timeout(self.timeout) {
            Ok(out) => out,
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "{}: lfs getstripe did not finish in {:?}",
                        path.display(),
                        self.timeout
                    ),
                ));
            }
        };
        let status = child.wait()?;
        let err = err_thread.join().unwrap_or_default();
        if !status.success() {
            let err = String::from_utf8_lossy(&err);
            return Err(io::Error::other(format!(
                "{}: lfs getstripe failed ({status}): {} (is the file on a Lustre mount?)",
                path.display(),
                err.trim()
            )));
        }
        if out.len() > MAX_OUTPUT_BYTES {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{}: lfs getstripe printed more than {MAX_OUTPUT_BYTES} bytes",
                    path.display()
                ),
            ));
        }
        Ok(String::from_utf8_lossy(&out).into_owned())
    }
}

impl LayoutProvider for LustreLayout {
    fn name(&self) -> &'static str {
        "lustre"
    }

    fn layout(&self, path: &Path, _len: u64) -> io::Result<FileLayout> {
        let output = self.getstripe(path)?;
        parse_getstripe(&output).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: {e}", path.display()),
            )
        })
    }

    fn target_name(&self, target: TargetId) -> String {
        match target {
            MDT_TARGET => "MDT".to_string(),
            UNALLOCATED_TARGET => "unallocated".to_string(),
            TargetId(i) if i <= MAX_OST_INDEX => format!("OST{i:04x}"),
            TargetId(i) => format!("target{i}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLAIN: &str = include_str!("../../testdata/lustre/plain-4x1M-v.txt");
    const PLAIN_POOL: &str = include_str!("../../testdata/lustre/plain-1x4M-pool.txt");
    const PLAIN_OLD: &str = include_str!("../../testdata/lustre/plain-2x1M-2.10.txt");
    const PFL: &str = include_str!("../../testdata/lustre/pfl-3comp-v.txt");
    const DOM: &str = include_str!("../../testdata/lustre/dom-v.txt");
    const DOM_UNINIT: &str = include_str!("../../testdata/lustre/dom-uninstantiated.txt");
    const FLR: &str = include_str!("../../testdata/lustre/flr-2mirrors.txt");

    fn stripe(size: u64, osts: &[u32]) -> StripeLayout {
        StripeLayout::new(size, osts.iter().map(|&i| TargetId(i)).collect()).unwrap()
    }

    #[test]
    fn plain_layout_lists_osts_in_stripe_order() {
        assert_eq!(
            parse_getstripe(PLAIN).unwrap(),
            FileLayout::Stripe(stripe(1 << 20, &[5, 6, 7, 0]))
        );
        assert_eq!(
            parse_getstripe(PLAIN_POOL).unwrap(),
            FileLayout::Stripe(stripe(4 << 20, &[2]))
        );
        assert_eq!(
            parse_getstripe(PLAIN_OLD).unwrap(),
            FileLayout::Stripe(stripe(1 << 20, &[1, 0]))
        );
    }

    #[test]
    fn plain_layout_objects_rotate_over_osts() {
        let layout = parse_getstripe(PLAIN).unwrap();
        let objects = layout.objects(sluice_policy::FileId(1), 5 << 20);
        let targets: Vec<u32> = objects.iter().map(|o| o.target.0).collect();
        assert_eq!(targets, [5, 6, 7, 0, 5]);
    }

    #[test]
    fn pfl_layout_keeps_uninstantiated_tail_on_placeholder() {
        let FileLayout::Composite(c) = parse_getstripe(PFL).unwrap() else {
            panic!("not composite");
        };
        assert_eq!(
            c,
            vec![
                Component {
                    start: 0,
                    end: 64 << 20,
                    stripe: stripe(1 << 20, &[3]),
                },
                Component {
                    start: 64 << 20,
                    end: 1 << 30,
                    stripe: stripe(4 << 20, &[4, 5, 6, 7]),
                },
                Component {
                    start: 1 << 30,
                    end: u64::MAX,
                    stripe: StripeLayout::new(4 << 20, vec![UNALLOCATED_TARGET]).unwrap(),
                },
            ]
        );
    }

    #[test]
    fn dom_component_goes_to_the_mdt() {
        let FileLayout::Composite(c) = parse_getstripe(DOM).unwrap() else {
            panic!("not composite");
        };
        assert_eq!(c.len(), 2);
        assert_eq!(
            c[0].stripe,
            StripeLayout::new(1 << 20, vec![MDT_TARGET]).unwrap()
        );
        assert_eq!((c[1].start, c[1].end), (1 << 20, u64::MAX));
        assert_eq!(c[1].stripe, stripe(4 << 20, &[10, 11]));
        // Without -v, and with the OST component not instantiated yet.
        let FileLayout::Composite(c) = parse_getstripe(DOM_UNINIT).unwrap() else {
            panic!("not composite");
        };
        assert_eq!(c[0].stripe.targets, vec![MDT_TARGET]);
        assert_eq!(c[1].stripe.targets, vec![UNALLOCATED_TARGET]);
    }

    #[test]
    fn mirrored_file_uses_first_in_sync_mirror() {
        // Mirror 1 is stale, so mirror 2 (one 0..EOF component) is used.
        assert_eq!(
            parse_getstripe(FLR).unwrap(),
            FileLayout::Stripe(stripe(4 << 20, &[3, 4, 5]))
        );
        let both_fresh = FLR.replace("init,stale", "init");
        assert_eq!(
            parse_getstripe(&both_fresh).unwrap(),
            FileLayout::Stripe(stripe(4 << 20, &[1, 0]))
        );
        let both_stale = FLR.replace(
            "lcme_flags:          init\n",
            "lcme_flags:          init,stale\n",
        );
        assert!(parse_getstripe(&both_stale).is_err());
    }

    #[test]
    fn target_names() {
        let lustre = LustreLayout::new();
        assert_eq!(lustre.target_name(TargetId(7)), "OST0007");
        assert_eq!(lustre.target_name(TargetId(0x1a)), "OST001a");
        assert_eq!(lustre.target_name(MDT_TARGET), "MDT");
        assert_eq!(lustre.target_name(UNALLOCATED_TARGET), "unallocated");
    }

    #[test]
    fn malformed_outputs_are_errors() {
        let cases: &[(&str, &str, &str)] = &[
            (
                "overlap",
                include_str!("../../testdata/lustre/malformed-overlap.txt"),
                "overlaps",
            ),
            (
                "unsorted",
                include_str!("../../testdata/lustre/malformed-unsorted.txt"),
                "expected 0",
            ),
            (
                "zero size",
                include_str!("../../testdata/lustre/malformed-zero-stripe-size.txt"),
                "stripe size 0",
            ),
            (
                "mismatch",
                include_str!("../../testdata/lustre/malformed-count-mismatch.txt"),
                "4 objects",
            ),
            (
                "truncated",
                include_str!("../../testdata/lustre/malformed-truncated.txt"),
                "truncated",
            ),
            ("empty", "", "no layout"),
            ("path only", "/mnt/lustre/f\n", "no layout"),
            ("garbage", "/f\nhello world\n", "not a `key: value`"),
            ("unknown key", "/f\nstripe_count: 1\n", "unknown key"),
            (
                "huge size",
                &PLAIN.replace("1048576", "8589934592"),
                "not in 1..=4 GiB",
            ),
            (
                "bad size",
                &PLAIN.replace("1048576", "-1"),
                "bad lmm_stripe_size",
            ),
            (
                "zero count",
                &PLAIN.replace("lmm_stripe_count:  4", "lmm_stripe_count:  0"),
                "not in 1..=65535",
            ),
            (
                "dup count",
                &PLAIN.replace("lmm_pattern", "lmm_stripe_count: 4\nlmm_pattern"),
                "duplicate",
            ),
            (
                "no table",
                &PLAIN[..PLAIN.find("\tobdidx").unwrap()],
                "0 objects",
            ),
            ("bad row", &PLAIN.replace("0x540000400", "zz"), "bad obdidx"),
            (
                "big ost",
                &PLAIN.replace("\t     5\t", "\t 70000\t"),
                "OST index 70000",
            ),
            (
                "released",
                &PLAIN.replace("raid0", "raid0,released"),
                "HSM-released",
            ),
            (
                "pattern",
                &PLAIN.replace("raid0", "raid6"),
                "unsupported lmm_pattern",
            ),
            (
                "both",
                &PLAIN.replace("raid0", "raid0,mdt"),
                "unsupported lmm_pattern",
            ),
            (
                "gap",
                &PFL.replace(
                    "lcme_extent.e_start: 1073741824",
                    "lcme_extent.e_start: 1073741825",
                ),
                "gap",
            ),
            (
                "empty extent",
                &PFL.replace("lcme_extent.e_end:   67108864", "lcme_extent.e_end:   0"),
                "empty extent",
            ),
            (
                "no start",
                &PFL.replace("lcme_extent.e_start: 0\n", ""),
                "no lcme_extent.e_start",
            ),
            ("bad end", &PFL.replace("EOF", "EOFF"), "bad e_end"),
            (
                "yaml order",
                &PFL.replace("- 1: { l_ost_idx: 5", "- 7: { l_ost_idx: 5"),
                "out of order",
            ),
            (
                "yaml row",
                &PFL.replace("{ l_ost_idx: 5,", "{ l_ost: 5,"),
                "bad lmm_objects",
            ),
            (
                "dom objs",
                &DOM.replace(
                    "lmm_objects:\n\n",
                    "lmm_objects:\n      - 0: { l_ost_idx: 1, l_fid: [0x1:0x2:0x0] }\n\n",
                ),
                "Data-on-MDT",
            ),
            (
                "directory",
                "/d\nlmv_stripe_count: 2 lmv_stripe_offset: 0\n",
                "directory",
            ),
            (
                "field first",
                "/f\n    lcme_flags: init\n",
                "before lcme_id",
            ),
        ];
        for (name, output, needle) in cases {
            let err = parse_getstripe(output).expect_err(name);
            let msg = err.to_string();
            assert!(msg.contains(needle), "{name}: {msg:?} lacks {needle:?}");
        }
        let huge = "x".repeat(MAX_OUTPUT_BYTES + 1);
        assert_eq!(
            parse_getstripe(&huge),
            Err(GetstripeError::TooLong(MAX_OUTPUT_BYTES + 1))
        );
        let many = format!("/f\n{}", "    lcme_id: 1\n".repeat(MAX_COMPONENTS + 1));
        assert!(parse_getstripe(&many)
            .unwrap_err()
            .to_string()
            .contains("too many components"));
    }

    #[test]
    fn missing_lfs_is_not_found() {
        let err = LustreLayout::with_lfs("/nonexistent/sluice-test/lfs")
            .layout(Path::new("/tmp/x"), 0)
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        assert!(err.to_string().starts_with("lfs not found"), "{err}");
    }

    /// A fake `lfs` that checks its arguments and prints a recorded output.
    fn fake_lfs(dir: &Path, body: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.join("lfs");
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    #[test]
    fn layout_runs_lfs_getstripe() {
        let dir = tempfile::tempdir().unwrap();
        let data = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/testdata/lustre/pfl-3comp-v.txt"
        );
        let lfs = fake_lfs(
            dir.path(),
            &format!(
                "[ \"$1 $2\" = 'getstripe -v' ] || exit 9\n[ \"$3\" = ./rel/f ] || [ \"$3\" = /abs/f ] || exit 8\ncat '{data}'"
            ),
        );
        let provider = LustreLayout::with_lfs(&lfs);
        assert!(matches!(
            provider.layout(Path::new("rel/f"), 0).unwrap(),
            FileLayout::Composite(_)
        ));
        assert!(matches!(
            provider.layout(Path::new("/abs/f"), 0).unwrap(),
            FileLayout::Composite(_)
        ));
        let err = provider.layout(Path::new("/a\nb"), 0).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn lfs_failure_and_hang_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let lfs = fake_lfs(
            dir.path(),
            "echo 'error: getstripe failed for /x.' >&2; exit 2",
        );
        let err = LustreLayout::with_lfs(&lfs)
            .layout(Path::new("/x"), 0)
            .unwrap_err();
        assert!(
            err.to_string().contains("getstripe failed for /x."),
            "{err}"
        );
        let slow = tempfile::tempdir().unwrap();
        let lfs = fake_lfs(slow.path(), "exec sleep 30");
        let err = LustreLayout::with_lfs(&lfs)
            .timeout(Duration::from_millis(200))
            .layout(Path::new("/x"), 0)
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
    }

    proptest::proptest! {
        #[test]
        fn parser_never_panics(output in ".{0,400}") {
            let _ = parse_getstripe(&output);
        }

        #[test]
        fn parser_never_panics_on_near_misses(
            lines in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::strategy::Just("lcme_id: 1".to_string()),
                    proptest::strategy::Just("lcme_flags: init".to_string()),
                    proptest::strategy::Just("lmm_objects:".to_string()),
                    proptest::strategy::Just("obdidx objid objid group".to_string()),
                    proptest::strategy::Just("lmm_pattern: mdt".to_string()),
                    proptest::strategy::Just(String::new()),
                    "lmm_stripe_(count|size): -?[0-9]{1,12}",
                    "lcme_extent.e_(start|end): ([0-9]{1,20}|EOF)",
                    "- [0-9]: \\{ l_ost_idx: [0-9]{1,6}, l_fid: \\[0x1:0x2:0x0\\] \\}",
                    "[0-9]{1,6} [0-9]{1,3} 0x[0-9a-f]{1,3} [0-9]{1,3}",
                    "lmm_pattern: (raid0|1|overstriped|released)",
                ],
                0..40,
            )
        ) {
            let output = format!("/f\n{}\n", lines.join("\n"));
            if let Ok(layout) = parse_getstripe(&output) {
                // Whatever parses is a usable layout.
                let _ = layout.objects(sluice_policy::FileId(0), 3 << 20);
            }
        }

        #[test]
        fn parser_never_panics_on_cut_samples(cut in 0usize..3000) {
            for sample in [PLAIN, PFL, DOM, FLR] {
                let _ = parse_getstripe(&sample[..cut.min(sample.len())]);
            }
        }
    }
}
