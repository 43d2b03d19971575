//! Recovery at open: the records and data files on the fast tier are the
//! truth; the catalogue is rebuilt from them.

use std::collections::{BTreeMap, HashSet};
use std::io;

use sluice_catalog::{CkptRecord, Location};
use sluice_env::{OpenOptions, RelPath};
use sluice_policy::Time;

use super::{data_path, dir, rec_path, rel, Copy, Shared, State, DIR};

/// Rebuilds the copies from the staging directory and makes the catalogue
/// agree; see the module docs.
pub(super) fn recover(shared: &Shared, state: &mut State, now: Time) -> io::Result<()> {
    let fast = &shared.fast;
    let mut recs = BTreeMap::new();
    let mut datas = HashSet::new();
    for entry in fast.read_dir(&dir())? {
        let name = entry.name;
        let path = rel(format!("{DIR}/{name}"));
        if let Some(id) = name
            .strip_suffix(".rec")
            .and_then(|s| s.parse::<u64>().ok())
        {
            recs.insert(id, path);
        } else if let Some(id) = name
            .strip_suffix(".data")
            .and_then(|s| s.parse::<u64>().ok())
        {
            datas.insert(id);
        } else if name.ends_with(".tmp") {
            fast.remove_file(&path)?;
        }
    }
    let mut changed = false;
    for (&id, path) in &recs {
        state.next_copy = state.next_copy.max(id + 1);
        if !datas.contains(&id) {
            // Created but never given data, or its data already removed.
            fast.remove_file(path)?;
            changed = true;
            continue;
        }
        let file = fast.open(path, OpenOptions::default().private())?;
        let mut buf = vec![0u8; usize::try_from(file.len()?).unwrap_or(0)];
        crate::engine::read_fully(file.as_ref(), &mut buf, 0)?;
        let rec: CkptRecord = serde_json::from_slice(&buf).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("fast tier {}: {path}: corrupt record: {e}", fast.describe()),
            )
        })?;
        let data = fast.open(&data_path(id), OpenOptions::default().private())?;
        let len = data.len()?;
        let mut rec = rec;
        rec.bytes = len;
        rec.staged_id = Some(id);
        // Held here: ours, also if written before node ids.
        rec.node = Some(shared.node.clone());
        let rpath = RelPath::new(&rec.path)?;
        // Every copy's job has a scheduler/ranking key (see `resident`).
        Shared::job_key(state, &rec.job);
        let r = shared.catalog.put_ckpt(&rec);
        shared.note_catalog(state, r);
        if let Some(older) = state.by_path.insert(rpath, id) {
            // Two records of one path: a rename over a copy cut by a
            // crash after the moved copy took its new id and before the
            // copy it replaces was removed (`Checkpoints::rename`). Ids
            // only grow, so the higher is the newer.
            state.copies.remove(&older);
            state.stats.recovered -= 1;
            for path in [data_path(older), rec_path(older)] {
                fast.remove_file(&path)?;
            }
            changed = true;
        }
        state.copies.insert(
            id,
            Copy {
                rec,
                file: data,
                len,
                writers: 0,
                readers: 0,
                generation: 0,
                writing: 0,
                demoting: false,
                moving: false,
                broken: None,
                name_synced: false,
                written: now,
                accessed: now,
            },
        );
        state.stats.recovered += 1;
    }
    for id in datas {
        if !recs.contains_key(&id) {
            fast.remove_file(&data_path(id))?;
            changed = true;
        }
    }
    if changed {
        fast.sync_dir(&dir())?;
    }
    // Catalogue records of copies the staging dir no longer has: only
    // this node's (issue 20: another node's staged copy is on its tier).
    match shared.catalog.ckpts() {
        Ok(all) => {
            for mut rec in all {
                let held = RelPath::new(&rec.path)
                    .ok()
                    .is_some_and(|p| state.by_path.contains_key(&p));
                if !held && rec.location != Location::Capacity && shared.own(&rec) {
                    rec.location = Location::Capacity;
                    rec.staged_id = None;
                    let r = shared.catalog.put_ckpt(&rec);
                    shared.note_catalog(state, r);
                }
            }
        }
        Err(e) => shared.note_catalog(state, Err(e)),
    }
    Ok(())
}
