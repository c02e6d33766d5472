//! Blocking file I/O an actor hands over instead of doing it on its own thread (Flink's
//! `IOManager` threads and the sort-merge shuffle's `BatchShuffleReadIOExecutor`): a TaskManager
//! actor answers heartbeats and deployments on the thread that would otherwise read spilled
//! buffers back or delete gigabytes of spill files.
//!
//! Production runs the work on [`IoPool`], at most [`IO_THREADS`] threads per process; the
//! simulation runs it inline ([`InlineIo`]), in lock step with everything else, so a seed
//! replays the same.

use std::fmt;
use std::sync::OnceLock;
use std::time::Duration;

/// One piece of blocking work.
pub type IoWork = Box<dyn FnOnce() + Send>;

/// Where blocking I/O runs. Taken from the node's [`TaskRunner`](super::TaskRunner).
pub trait BlockingIo: Send + Sync + fmt::Debug {
    /// Runs `work` where it may block (production: never on the caller's thread).
    fn execute(&self, work: IoWork);

    /// How long the simulation's disk takes: [`offload`] lets this much (virtual) time pass
    /// before the work runs, so other messages interleave with a read in flight as they do in
    /// production. Zero in production, where the work simply takes what it takes.
    fn latency(&self) -> Duration {
        Duration::ZERO
    }
}

/// Threads of the process-wide [`IoPool`] at most: reads and deletes of spill files are mostly
/// page-cache copies and metadata updates, so a few threads keep a disk busy, and a bound keeps a
/// burst of releases from starting a thread per file.
pub const IO_THREADS: usize = 4;

/// How long an idle [`IoPool`] thread waits for work before it ends.
const IO_THREAD_KEEP_ALIVE: Duration = Duration::from_secs(10);

/// The production pool: tokio's blocking pool of a runtime of its own (bounded to
/// [`IO_THREADS`], threads started on demand and ended when idle), shared by every node of the
/// process. Work queues when every thread is busy.
#[derive(Debug, Default, Clone, Copy)]
pub struct IoPool;

impl BlockingIo for IoPool {
    fn execute(&self, work: IoWork) {
        match pool() {
            // The handle is not needed: the work reports back itself (see `offload`).
            Some(runtime) => drop(runtime.spawn_blocking(work)),
            None => work(),
        }
    }
}

/// The pool's runtime, built once; `None` (logged once) if it cannot be, and the work then runs
/// on the caller's thread as it did before there was a pool.
fn pool() -> Option<&'static tokio::runtime::Runtime> {
    static POOL: OnceLock<Option<tokio::runtime::Runtime>> = OnceLock::new();
    POOL.get_or_init(|| {
        // Only its blocking pool is used; it is never dropped (a static), so no thread of an
        // async runtime ever has to wait for it to shut down.
        tokio::runtime::Builder::new_current_thread()
            .max_blocking_threads(IO_THREADS)
            .thread_keep_alive(IO_THREAD_KEEP_ALIVE)
            .thread_name("flint-io")
            .build()
            .inspect_err(|err| {
                log::error!("cannot start the I/O threads ({err}): blocking I/O runs inline")
            })
            .ok()
    })
    .as_ref()
}

/// Runs the work on the caller's thread: stores that tests build directly, and (with a latency)
/// the simulation.
#[derive(Debug, Default, Clone, Copy)]
pub struct InlineIo;

impl BlockingIo for InlineIo {
    fn execute(&self, work: IoWork) {
        work();
    }
}

/// Runs `work` on `io` and waits for its result without blocking the caller's thread; `None` if
/// the work panicked.
pub async fn offload<T: Send + 'static>(
    io: &dyn BlockingIo,
    work: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    let latency = io.latency();
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    let (sender, receiver) = tokio::sync::oneshot::channel();
    io.execute(Box::new(move || {
        // The waiter may be gone (its poll was dropped): the result is not needed then.
        let _ = sender.send(work());
    }));
    receiver.await.ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_pool_runs_work_on_its_own_threads() {
        let caller = std::thread::current().id();
        let (thread, name) = offload(&IoPool, || {
            let thread = std::thread::current();
            (thread.id(), thread.name().map(str::to_owned))
        })
        .await
        .unwrap();
        assert_ne!(thread, caller);
        assert_eq!(name.as_deref(), Some("flint-io"));
    }

    #[tokio::test]
    async fn inline_io_runs_on_the_callers_thread() {
        let caller = std::thread::current().id();
        let thread = offload(&InlineIo, || std::thread::current().id()).await;
        assert_eq!(thread, Some(caller));
    }

    #[tokio::test]
    async fn a_panicking_work_reports_none() {
        let answer: Option<()> = offload(&IoPool, || panic!("the disk is on fire")).await;
        assert_eq!(answer, None);
    }

    /// Each work holds its thread until all of them run at once or a deadline passes: an
    /// unbounded pool gets there (and fails the test), a bounded one waits the deadline out.
    #[test]
    fn at_most_io_threads_run_at_once() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::sync::{Arc, mpsc};
        const WORKS: usize = IO_THREADS * 3;
        let (running, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (done, finished) = mpsc::channel();
        for _ in 0..WORKS {
            let (running, most, done) = (running.clone(), most.clone(), done.clone());
            IoPool.execute(Box::new(move || {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                #[allow(clippy::disallowed_methods)] // a real deadline on a real thread
                let deadline = std::time::Instant::now() + Duration::from_millis(200);
                #[allow(clippy::disallowed_methods)]
                while running.load(Ordering::SeqCst) < WORKS && std::time::Instant::now() < deadline
                {
                    std::thread::yield_now();
                }
                running.fetch_sub(1, Ordering::SeqCst);
                done.send(()).unwrap();
            }));
        }
        for _ in 0..WORKS {
            finished
                .recv_timeout(Duration::from_secs(60))
                .expect("every work ran");
        }
        let most = most.load(Ordering::SeqCst);
        assert!(most <= IO_THREADS, "{most} ran at once");
        assert!(most > 1, "the pool ran the works one by one");
    }
}
