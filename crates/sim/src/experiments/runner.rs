//! The one run loop every experiment shares: a [`Simulation`] is anything
//! that runs to a result (a cluster [`Task`], a checkpoint model's
//! [`CkptConfig`], a LADS [`TransferConfig`]); [`run_all`] runs a list of
//! them on up to two threads and returns their results in input order,
//! counted in the caller's [`RunProgress`](super::RunProgress).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use super::{RunConfig, Task};
use crate::checkpoint::{CkptConfig, CkptResult};
use crate::cluster::{simulate, RunResult, SimError};
use crate::transfer::{TransferConfig, TransferResult};

/// One independent simulation: its inputs, and how it runs.
pub(crate) trait Simulation: Sync {
    /// What one run returns.
    type Out: Outcome;

    /// Runs it; the same inputs give the same result.
    fn run(&self) -> Result<Self::Out, SimError>;
}

/// A simulation's result, as far as the runner needs it.
pub(crate) trait Outcome: Send {
    /// The cost of the run in simulated events (or model steps), summed
    /// into a report's `events`.
    fn events(&self) -> u64;
}

impl Outcome for RunResult {
    fn events(&self) -> u64 {
        self.events
    }
}

impl Outcome for CkptResult {
    fn events(&self) -> u64 {
        self.steps
    }
}

impl Outcome for TransferResult {
    fn events(&self) -> u64 {
        self.events
    }
}

impl Simulation for Task {
    type Out = RunResult;

    fn run(&self) -> Result<RunResult, SimError> {
        simulate(&self.cluster, self.system, &self.jobs)
    }
}

impl Simulation for CkptConfig {
    type Out = CkptResult;

    fn run(&self) -> Result<CkptResult, SimError> {
        crate::checkpoint::run(self)
    }
}

impl Simulation for TransferConfig {
    type Out = TransferResult;

    /// The transfer, checked: every byte of every file arrived exactly once.
    fn run(&self) -> Result<TransferResult, SimError> {
        crate::transfer::simulate(self).and_then(|r| {
            if r.files_complete == r.files && r.duplicates == 0 {
                Ok(r)
            } else {
                Err(SimError(format!(
                    "transfer lost or duplicated data: {} of {} files complete, {} duplicates",
                    r.files_complete, r.files, r.duplicates
                )))
            }
        })
    }
}

/// Each task's result, once a worker has run it.
type Slots<O> = Mutex<Vec<Option<Result<O, SimError>>>>;

/// Run independent simulations on up to two threads, results in input
/// order, counted in `rc`'s progress. The first error in input order is
/// returned.
pub(crate) fn run_all<T: Simulation>(tasks: &[T], rc: &RunConfig) -> Result<Vec<T::Out>, SimError> {
    rc.queue_runs(tasks.len());
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(2);
    let next = AtomicUsize::new(0);
    let results: Slots<T::Out> = Mutex::new((0..tasks.len()).map(|_| None).collect());
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(task) = tasks.get(i) else { break };
                let result = task.run();
                rc.run_finished();
                // INVARIANT: a worker panicking would poison the lock; the
                // simulations return errors instead of panicking.
                results.lock().expect("results lock")[i] = Some(result);
            });
        }
    });
    // INVARIANT: every index below tasks.len() was claimed by one worker.
    results
        .into_inner()
        .expect("results lock")
        .into_iter()
        .map(|r| r.expect("every task ran"))
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::experiments::RunProgress;

    /// Fails on an odd input above 10; otherwise doubles it.
    struct Double(u64);

    impl Outcome for u64 {
        fn events(&self) -> u64 {
            *self
        }
    }

    impl Simulation for Double {
        type Out = u64;

        fn run(&self) -> Result<u64, SimError> {
            if self.0 > 10 && self.0 % 2 == 1 {
                return Err(SimError(format!("odd {}", self.0)));
            }
            Ok(self.0 * 2)
        }
    }

    #[test]
    fn results_come_in_input_order_and_are_counted() {
        let progress = Arc::new(RunProgress::default());
        let rc = RunConfig {
            progress: Some(Arc::clone(&progress)),
            ..RunConfig::new(1.0, 1)
        };
        let tasks: Vec<Double> = (0..10).rev().map(Double).collect();
        let out = run_all(&tasks, &rc).unwrap();
        assert_eq!(out, (0..10).rev().map(|i| i * 2).collect::<Vec<u64>>());
        assert_eq!(out.iter().map(Outcome::events).sum::<u64>(), 90);
        assert_eq!(progress.runs(), (10, 10));
    }

    #[test]
    fn the_first_error_in_input_order_is_returned() {
        let tasks: Vec<Double> = [2, 13, 4, 11].into_iter().map(Double).collect();
        let err = run_all(&tasks, &RunConfig::new(1.0, 1)).unwrap_err();
        assert_eq!(err.0, "odd 13");
    }
}
