//! Work under way outside the engine lock, counted by tokens.
//!
//! The engine does its tier I/O outside its lock, so the state counts the
//! work under way that others wait for or step around:
//! - a region's readers ([`Pin`], `LogRegion::readers`): the flusher does
//!   not reset a region while a read copies bytes out of it (read.rs);
//! - a file's write-back pass ([`Syncing`], `OpenFile::syncing`): the
//!   file's flush runs wait for it (sync.rs);
//! - a file busy with capacity writes of its buffered bytes ([`Busy`],
//!   `OpenFile::busy`: flush runs, write-backs): truncate, unlink and
//!   rename wait for them (files.rs);
//! - this node's writers of a file's capacity file ([`OwnWrite`],
//!   `OpenFile::own_writers`): the last one stamps the file's clean copies
//!   again (cache.rs);
//! - unlinks of names the engine does not hold ([`Unlinking`],
//!   `State::unlinking`): an open that looked a name up without the lock
//!   waits for them (names.rs);
//! - callers waiting for a file's records in flight ([`Quiesce`],
//!   `OpenFile::quiescing`): no new record of the file is placed meanwhile
//!   (append.rs).
//!
//! Each count changes only through a token: [`Hold::take`] counts one and
//! returns it, [`Hold::give_back`] uncounts it. A token is neither `Clone`
//! nor `Copy`, so it is given back at most once, and every path that ends
//! the work must hand it back: one dropped instead would leave its count up
//! for good (a truncate waiting for a busy file waits forever), and a debug
//! build panics there (not while unwinding: a panic under way already
//! fails the engine).
//!
//! The counts themselves stay in the state, where waiters read them under
//! the lock; the orders harness checks them against the tokens it holds
//! between turns (invariants.rs).

use std::fmt::Debug;
use std::marker::PhantomData;

use sluice_policy::{FileId, RegionId};

use super::State;

/// A count of work under way, kept in the state per key.
pub(super) trait Count {
    type Key: Copy + Debug;
    /// What the count is of, for the panic of a token dropped.
    const WHAT: &'static str;
    /// The count of `key`, if the state knows `key`.
    fn count(state: &mut State, key: Self::Key) -> Option<&mut u32>;
}

/// One unit of a [`Count`], held until given back.
#[must_use = "a hold is given back with `Hold::give_back`"]
pub(super) struct Hold<C: Count> {
    key: C::Key,
    /// Whether `take` counted it: a key the state did not know counts
    /// nothing, and its token may go without being given back.
    counted: bool,
    count: PhantomData<C>,
}

impl<C: Count> Hold<C> {
    /// Count one unit of `key`'s work (nothing if the state does not know
    /// `key`).
    pub(super) fn take(state: &mut State, key: C::Key) -> Hold<C> {
        let counted = C::count(state, key).map(|n| *n += 1).is_some();
        Hold {
            key,
            counted,
            count: PhantomData,
        }
    }

    pub(super) fn key(&self) -> C::Key {
        self.key
    }

    /// The work ended: uncount it. The units of `key` still held after it,
    /// or `None` if this one counted nothing or the key is gone.
    pub(super) fn give_back(mut self, state: &mut State) -> Option<u32> {
        if !std::mem::replace(&mut self.counted, false) {
            return None;
        }
        let n = C::count(state, self.key)?;
        // INVARIANT: a count is at least the tokens of it held.
        debug_assert!(*n > 0, "a {} of {:?} given back twice", C::WHAT, self.key);
        *n = n.saturating_sub(1);
        Some(*n)
    }

    /// The engine died with this work under way (a crash in the harness
    /// of random orders): the count goes with the state, and the hold
    /// with it, not given back.
    #[cfg(test)]
    pub(super) fn lost(mut self) {
        self.counted = false;
    }
}

impl<C: Count> Debug for Hold<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}({:?})", C::WHAT, self.key)
    }
}

impl<C: Count> Drop for Hold<C> {
    fn drop(&mut self) {
        if !self.counted || std::thread::panicking() {
            return;
        }
        // INVARIANT: every counted hold is given back. A release build
        // says so in the log, where a wait that never ends is traced back.
        let message = format!(
            "a {} of {:?} dropped without being given back: its count stays up",
            C::WHAT,
            self.key
        );
        debug_assert!(false, "{message}");
        tracing::error!("{message}");
    }
}

/// An unlink of a name the engine does not hold, under way without the
/// lock (`State::unlinking`, names.rs).
pub(super) struct Unlinking;

impl Count for Unlinking {
    type Key = ();
    const WHAT: &'static str = "unlink";
    fn count(state: &mut State, (): ()) -> Option<&mut u32> {
        Some(&mut state.unlinking)
    }
}

/// A read's pin of a region (`LogRegion::readers`).
pub(super) struct Pin;

impl Count for Pin {
    type Key = RegionId;
    const WHAT: &'static str = "region pin";
    fn count(state: &mut State, key: RegionId) -> Option<&mut u32> {
        state
            .regions
            .get_mut(key.0 as usize)
            .map(|region| &mut region.readers)
    }
}

/// Capacity writes of a file's buffered bytes (`OpenFile::busy`).
pub(super) struct Busy;

impl Count for Busy {
    type Key = FileId;
    const WHAT: &'static str = "busy file";
    fn count(state: &mut State, key: FileId) -> Option<&mut u32> {
        state.files.get_mut(&key).map(|open| &mut open.busy)
    }
}

/// A write-back pass of a file (`OpenFile::syncing`: at most one, under
/// the file's sync lock).
pub(super) struct Syncing;

impl Count for Syncing {
    type Key = FileId;
    const WHAT: &'static str = "write-back";
    fn count(state: &mut State, key: FileId) -> Option<&mut u32> {
        state.files.get_mut(&key).map(|open| &mut open.syncing)
    }
}

/// One of this node's writers of a capacity file (`OpenFile::own_writers`).
pub(super) struct OwnWrite;

impl Count for OwnWrite {
    type Key = FileId;
    const WHAT: &'static str = "own write";
    fn count(state: &mut State, key: FileId) -> Option<&mut u32> {
        state.files.get_mut(&key).map(|open| &mut open.own_writers)
    }
}

/// A caller waiting for a file's records in flight (`OpenFile::quiescing`).
pub(super) struct Quiesce;

impl Count for Quiesce {
    type Key = FileId;
    const WHAT: &'static str = "quiesce";
    fn count(state: &mut State, key: FileId) -> Option<&mut u32> {
        state.files.get_mut(&key).map(|open| &mut open.quiescing)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use sluice_env::memory::MemBackend;
    use sluice_env::{Backend, RelPath, SystemClock};

    use super::*;
    use crate::engine::{recovery, Engine, EngineConfig};

    fn engine() -> (Engine, FileId) {
        let (fast, capacity): (Arc<dyn Backend>, Arc<dyn Backend>) =
            (Arc::new(MemBackend::new()), Arc::new(MemBackend::new()));
        let config = EngineConfig {
            regions: 4,
            region_bytes: 16 * 1024,
            record_max_bytes: 8 * 1024,
            ..EngineConfig::default()
        };
        let engine = recovery::open(fast, capacity, Arc::new(SystemClock::new()), config, false)
            .expect("open");
        let a = engine.create(&RelPath::new("a").unwrap()).expect("create");
        (engine, a)
    }

    #[test]
    fn a_count_is_the_holds_taken_and_not_given_back() {
        let (engine, a) = engine();
        let mut state = sluice_env::lock(&engine.shared.state);
        let (first, second) = (
            Hold::<Busy>::take(&mut state, a),
            Hold::<Busy>::take(&mut state, a),
        );
        let pin = Hold::<Pin>::take(&mut state, RegionId(1));
        assert_eq!(state.files[&a].busy, 2);
        assert_eq!(state.regions[1].readers, 1);
        assert_eq!(first.give_back(&mut state), Some(1));
        assert_eq!(second.give_back(&mut state), Some(0));
        assert_eq!(pin.give_back(&mut state), Some(0));
        assert_eq!((state.files[&a].busy, state.regions[1].readers), (0, 0));
        // A key the state does not know counts nothing, and its hold may
        // simply go.
        let unknown = Hold::<OwnWrite>::take(&mut state, FileId(u64::MAX));
        assert_eq!(unknown.give_back(&mut state), None);
        drop(Hold::<Quiesce>::take(&mut state, FileId(u64::MAX)));
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "busy file of FileId(")]
    fn a_hold_dropped_without_being_given_back_is_caught() {
        let (engine, a) = engine();
        let mut state = sluice_env::lock(&engine.shared.state);
        drop(Hold::<Busy>::take(&mut state, a));
    }
}
