//! Who serves a FUSE request (docs/fuse.md, "Threads"): a few *reader*
//! threads take requests from /dev/fuse and answer most of them at once;
//! a request that may wait on a tier or on another node (a bulk read or
//! write, an fsync, a close that writes back, an open that recalls or
//! waits for a checkpoint's admission) goes to a pool of *workers* when
//! no other reader is waiting for the next request (fs.rs decides which
//! requests may wait).
//!
//! Why: the kernel hands each request to the reader that has waited
//! longest, so with many readers every request wakes a different, cold
//! thread; mdtest's metadata phases ran at 0.6–0.8× mergerfs with 16
//! readers and at 0.8–1.4× with 2 (docs/results/mdtest.md). A request that
//! holds its reader while it waits on the disk would, with only a few
//! readers, stall every other request behind it: such a request is handed
//! to a worker whenever answering it here would leave no reader waiting,
//! so at most all but one reader wait on tiers, and the writes of many
//! ranks still overlap on the workers.
//!
//! INVARIANT: `idle` counts the readers in `read(2)` on /dev/fuse: every
//! handler that runs on a reader holds one [`Busy`] for its whole run.

use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// A request to answer on a worker.
type Job = Box<dyn FnOnce() + Send>;

/// The readers' count and the workers' pool.
pub(crate) struct Workers {
    /// Readers waiting on /dev/fuse now (module invariant).
    idle: AtomicIsize,
    /// `None` once dropped: the workers finish what they hold and stop.
    jobs: Option<Sender<Job>>,
    threads: Vec<JoinHandle<()>>,
}

/// A reader's hold while it serves a request (module invariant).
pub(crate) struct Busy<'a> {
    idle: &'a AtomicIsize,
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.idle.fetch_add(1, Ordering::AcqRel);
    }
}

impl Workers {
    /// `readers` threads read /dev/fuse (all waiting at first); `workers`
    /// threads serve handed-over requests (at least one).
    pub(crate) fn new(readers: usize, workers: usize) -> std::io::Result<Workers> {
        let (jobs, queue) = channel::<Job>();
        let queue = Arc::new(Mutex::new(queue));
        let threads = (0..workers.max(1))
            .map(|i| {
                let queue = Arc::clone(&queue);
                std::thread::Builder::new()
                    .name(format!("sluice-io-{i}"))
                    .spawn(move || work(&queue))
            })
            .collect::<std::io::Result<Vec<_>>>()?;
        Ok(Workers {
            idle: AtomicIsize::new(readers as isize),
            jobs: Some(jobs),
            threads,
        })
    }

    /// This reader serves a request until the hold is dropped.
    pub(crate) fn busy(&self) -> Busy<'_> {
        self.idle.fetch_sub(1, Ordering::AcqRel);
        Busy { idle: &self.idle }
    }

    /// Whether another reader waits on /dev/fuse while this one serves
    /// (called under its [`Busy`]).
    pub(crate) fn another_reader_waits(&self) -> bool {
        self.idle.load(Ordering::Acquire) > 0
    }

    /// Run `job` on a worker, or here if the pool is gone (unmounting).
    pub(crate) fn hand_over(&self, job: impl FnOnce() + Send + 'static) {
        let job: Job = Box::new(job);
        match &self.jobs {
            Some(jobs) => {
                if let Err(returned) = jobs.send(job) {
                    (returned.0)();
                }
            }
            None => job(),
        }
    }
}

/// A worker: run jobs until the pool is dropped.
fn work(queue: &Mutex<Receiver<Job>>) {
    loop {
        let job = match sluice_env::lock(queue).recv() {
            Ok(job) => job,
            Err(_) => return,
        };
        job();
    }
}

impl Drop for Workers {
    /// The requests handed over are answered before the file system goes
    /// (they hold the volume, which unmounting closes after).
    fn drop(&mut self) {
        self.jobs = None;
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;

    #[test]
    fn a_reader_sees_whether_another_waits() {
        let workers = Workers::new(2, 1).unwrap();
        let first = workers.busy();
        assert!(workers.another_reader_waits());
        let second = workers.busy();
        assert!(!workers.another_reader_waits(), "both readers are serving");
        drop(first);
        assert!(workers.another_reader_waits());
        drop(second);
    }

    #[test]
    fn every_job_handed_over_runs_before_the_pool_is_gone() {
        let ran = Arc::new(AtomicUsize::new(0));
        let workers = Workers::new(1, 3).unwrap();
        for _ in 0..100 {
            let ran = Arc::clone(&ran);
            workers.hand_over(move || {
                std::thread::sleep(std::time::Duration::from_micros(50));
                ran.fetch_add(1, Ordering::SeqCst);
            });
        }
        drop(workers);
        assert_eq!(ran.load(Ordering::SeqCst), 100);
    }
}
