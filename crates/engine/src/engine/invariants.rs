//! The engine state's invariants, stated as one check (issue 35: the
//! core's invariants as assertions). The harness of random orders runs it
//! after every turn (`orders.rs`), where no I/O is half done but what the
//! harness itself holds (a flush set or a write-back being written), so
//! every count of work in flight is known.
//!
//! What it checks, from the module docs that state each (mod.rs,
//! files.rs, cache.rs, mirror.rs, read.rs):
//! - the file table: `ids[p] = id` if and only if `p` is among
//!   `files[id].names`; `by_ino[i] = id` for an open `id` only if
//!   `files[id].ino` is `i`; a file with a name has its `path` among them;
//! - every indexed extent, and every clean one, lies inside one data
//!   record of its region's record table;
//! - the write buffer's own: the extent indexes' and the region
//!   pipeline's;
//! - the memory copy's totals;
//! - the work in flight: no region pinned, no file busy or syncing, no
//!   record in flight, but what the caller says is under way.

use sluice_policy::extent_index::ExtentIndex;
use sluice_policy::FileId;

use super::State;

/// What the caller has under way between its steps: its pins, busy and
/// syncing marks are not counted as stray.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct UnderWay {
    /// A write-back pass of this file is writing (busy once, syncing,
    /// its pieces pinned).
    pub write_back: Option<FileId>,
    /// Records whose payloads are still being written.
    pub records_in_flight: usize,
}

/// Every invariant above, or the first one broken.
pub(super) fn check(state: &State, under_way: UnderWay) -> Result<(), String> {
    files(state)?;
    extents_in_records(state, state.buffer.index(), "indexed")?;
    extents_in_records(state, state.buffer.cache(), "clean")?;
    state.buffer.index().check_invariants();
    state.buffer.cache().check_invariants();
    state
        .buffer
        .pipeline()
        .check_invariants()
        .map_err(|v| format!("region pipeline: {v:?}"))?;
    state.mirror.check()?;
    for (r, offset, len) in state.mirror.copies() {
        let record = state.regions[r].records.get(&offset);
        if record.is_none_or(|&(record_len, _)| record_len as usize != len) {
            return Err(format!(
                "memory copy of {len} bytes at region {r} offset {offset}: the record there is {record:?}"
            ));
        }
    }
    in_flight(state, under_way)
}

fn files(state: &State) -> Result<(), String> {
    state.ids.check()?;
    for (path, id) in &state.ids {
        let open = state
            .files
            .get(id)
            .ok_or_else(|| format!("ids[{path}] = {id:?}, which is not open"))?;
        if !open.names.contains(path) {
            return Err(format!("ids[{path}] = {id:?}, not among its names"));
        }
    }
    for (id, open) in &state.files {
        for name in &open.names {
            if state.ids.get(name) != Some(id) {
                return Err(format!("{id:?} is named {name}, which ids maps elsewhere"));
            }
        }
        if !open.unlinked && !open.names.contains(&open.path) {
            return Err(format!("{id:?} has a name, but not its path {}", open.path));
        }
    }
    for (ino, id) in &state.by_ino {
        if let Some(open) = state.files.get(id) {
            if open.ino != Some(*ino) {
                return Err(format!(
                    "by_ino[{ino:?}] = {id:?}, whose inode is {:?}",
                    open.ino
                ));
            }
        }
    }
    Ok(())
}

fn extents_in_records(state: &State, index: &ExtentIndex, what: &str) -> Result<(), String> {
    for (file, extents) in index.files() {
        for extent in extents.extents() {
            let region = state
                .regions
                .get(extent.location.region.0 as usize)
                .ok_or_else(|| format!("{what} extent {extent:?} of {file:?}: no such region"))?;
            let inside = region
                .records
                .range(..=extent.location.offset)
                .next_back()
                .is_some_and(|(&start, &(len, _))| {
                    extent.location.offset + u64::from(extent.len) <= start + u64::from(len)
                });
            if !inside {
                return Err(format!(
                    "{what} extent {extent:?} of {file:?} lies outside every record of its region"
                ));
            }
        }
    }
    Ok(())
}

fn in_flight(state: &State, under_way: UnderWay) -> Result<(), String> {
    for (id, open) in &state.files {
        let writing_back = under_way.write_back == Some(*id);
        if open.busy != u32::from(writing_back) || open.syncing != u32::from(writing_back) {
            return Err(format!(
                "{id:?}: busy {} and syncing {} between steps (a write-back under way: {writing_back})",
                open.busy, open.syncing
            ));
        }
    }
    if under_way.write_back.is_none() {
        if let Some((r, region)) = state
            .regions
            .iter()
            .enumerate()
            .find(|(_, region)| region.readers > 0)
        {
            return Err(format!(
                "region {r} pinned {} times between steps",
                region.readers
            ));
        }
    }
    let in_flight: usize = state.regions.iter().map(|r| r.in_flight.len()).sum();
    if in_flight != under_way.records_in_flight {
        return Err(format!(
            "{in_flight} records in flight in the regions, {} payloads waiting",
            under_way.records_in_flight
        ));
    }
    Ok(())
}
