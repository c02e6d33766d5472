//! The production task threads: a pool that reuses the threads of ended tasks.
//!
//! Starting an OS thread per task (`clone3`, a fresh stack, its exit) cost about as much as a
//! no-op task itself: in the issue-14 run of 10,000 no-op subtasks half of all CPU samples were
//! in the kernel. The pool keeps the threads of ended tasks parked and hands them the next task.
//!
//! What it must never do is make a task wait for another task's thread: a task that blocks
//! (a `sleep`, a file sink, a consumer that does not read, an operator that ignores its
//! cancellation) keeps its thread as long as it likes. So a task is handed to an idle thread
//! only if one is parked; otherwise a new thread starts at once — the pool grows to as many
//! threads as tasks run at the same time (the TaskManager bounds those by its slots), exactly
//! what one thread per task had. A stuck task's thread is simply never returned; the pool is
//! unaffected. Threads idle for [`KEEP_ALIVE`] end, so a burst does not keep its threads.
//!
//! New threads are started by a spawner thread of the pool's own, not by the caller: the caller
//! is the TaskManager's actor, and `pthread_create` (a stack to map, the process's memory map
//! locked for it) slows to milliseconds while thousands of running tasks fault memory in. At
//! P = 10,000 on 4 × 2,500 slots the actor spent its time deploying a batch in thread starts and
//! answered `SubmitTasks` after the 10 s ask timeout: the job failed. Now it hands the task over
//! and answers at once.
//!
//! Thousands of parked task threads also need a futex hash to match: the spawner grows the
//! process's table with the threads ([`super::futex_hash`]).
//!
//! Nothing of a task outlives it on its thread: task code keeps no thread-locals (every wait
//! goes through its [`TaskBlocker`](crate::env::TaskBlocker), which takes `thread::current()`
//! afresh each time), and a panic that escapes a task's body is caught here so the thread
//! goes on serving.

use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;

/// How long a thread with nothing to run waits for a task before it ends.
pub const KEEP_ALIVE: Duration = Duration::from_secs(30);

/// One unit of work for a pool thread.
type Job = Box<dyn FnOnce() + Send>;

/// See the module docs. Cheap to clone: clones share the threads.
#[derive(Clone)]
pub struct TaskThreadPool {
    shared: Arc<Shared>,
    keep_alive: Duration,
}

struct Shared {
    state: Mutex<State>,
    work: Condvar,
    /// Tells the spawner thread of tasks in `State::to_spawn`.
    spawn: Condvar,
}

#[derive(Default)]
struct State {
    /// Tasks handed to parked threads that have not taken them yet.
    queue: VecDeque<Job>,
    /// Tasks waiting for the spawner to start a thread for each.
    to_spawn: VecDeque<Job>,
    /// The spawner thread runs.
    spawner: bool,
    /// Threads parked waiting for work.
    idle: usize,
    /// Threads alive (running a task or parked).
    threads: usize,
    /// Threads ever started, for [`TaskThreadPool::stats`].
    started: u64,
}

/// What the pool holds, for tests and logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolStats {
    /// Threads alive (running a task or parked).
    pub threads: usize,
    /// Threads parked waiting for work.
    pub idle: usize,
    /// Threads ever started.
    pub started: u64,
}

impl std::fmt::Debug for TaskThreadPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskThreadPool")
            .field("stats", &self.stats())
            .finish()
    }
}

impl Default for TaskThreadPool {
    fn default() -> Self {
        Self::new(KEEP_ALIVE)
    }
}

impl TaskThreadPool {
    /// A pool whose idle threads end after `keep_alive`.
    pub fn new(keep_alive: Duration) -> Self {
        Self {
            shared: Arc::new(Shared {
                state: Mutex::new(State::default()),
                work: Condvar::new(),
                spawn: Condvar::new(),
            }),
            keep_alive,
        }
    }

    /// Runs `job` on a parked thread, or on a new one if none is free (never behind another
    /// task; the new thread is started by the pool's spawner thread). Fails only if the OS
    /// refuses the spawner thread; a refused task thread is logged by the spawner.
    pub fn execute(&self, job: Job) -> std::io::Result<()> {
        let mut state = self.lock();
        // Parked threads not yet spoken for by queued jobs: each queued job has woken one.
        if state.idle > state.queue.len() {
            state.queue.push_back(job);
            drop(state);
            self.shared.work.notify_one();
            return Ok(());
        }
        state.to_spawn.push_back(job);
        if state.spawner {
            drop(state);
            self.shared.spawn.notify_one();
            return Ok(());
        }
        state.spawner = true;
        drop(state);
        let shared = Arc::clone(&self.shared);
        let keep_alive = self.keep_alive;
        #[allow(clippy::disallowed_methods)]
        // production-only: the spawner of the task runner's threads
        let spawned = std::thread::Builder::new()
            .name("flint-task-spawner".to_owned())
            .spawn(move || spawn_threads(&shared, keep_alive));
        if let Err(error) = spawned {
            let mut state = self.lock();
            state.spawner = false;
            state.to_spawn.clear();
            return Err(error);
        }
        Ok(())
    }

    /// The pool's threads now.
    pub fn stats(&self) -> PoolStats {
        let state = self.lock();
        PoolStats {
            threads: state.threads,
            idle: state.idle,
            started: state.started,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.shared.lock()
    }
}

impl Shared {
    /// A panic inside the lock is impossible (only counters and a queue change under it), but
    /// a poisoned lock must not take every task thread down with it.
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The spawner thread: starts a thread for each task handed to it, until none came for
/// `keep_alive`.
fn spawn_threads(shared: &Arc<Shared>, keep_alive: Duration) {
    let mut state = shared.lock();
    loop {
        let Some(job) = state.to_spawn.pop_front() else {
            let (next_state, waited) = shared
                .spawn
                .wait_timeout(state, keep_alive)
                .unwrap_or_else(PoisonError::into_inner);
            state = next_state;
            if waited.timed_out() && state.to_spawn.is_empty() {
                state.spawner = false;
                return;
            }
            continue;
        };
        state.threads += 1;
        state.started += 1;
        let threads = state.threads;
        drop(state);
        super::futex_hash::fit(threads);
        let thread_shared = Arc::clone(shared);
        #[allow(clippy::disallowed_methods)]
        // production-only: the task runner's threads start here
        let spawned = std::thread::Builder::new()
            .name("flint-task".to_owned())
            .spawn(move || serve(&thread_shared, job, keep_alive));
        state = shared.lock();
        if let Err(error) = spawned {
            state.threads -= 1;
            log::error!("cannot start a thread for a task: {error}");
        }
    }
}

/// A pool thread: runs `first`, then whatever it is handed, until it has waited `keep_alive`
/// for work in vain.
fn serve(shared: &Shared, first: Job, keep_alive: Duration) {
    let mut job = first;
    loop {
        // The task body catches operator panics itself; this only keeps the thread alive if
        // something around it panicked (the panic hook has printed it already).
        let _ = catch_unwind(AssertUnwindSafe(job));
        let mut state = shared.lock();
        state.idle += 1;
        loop {
            // A task waiting for the spawner is as good (no thread was started for it yet).
            if let Some(next) = state
                .queue
                .pop_front()
                .or_else(|| state.to_spawn.pop_front())
            {
                state.idle -= 1;
                job = next;
                break;
            }
            let (next_state, waited) = shared
                .work
                .wait_timeout(state, keep_alive)
                .unwrap_or_else(PoisonError::into_inner);
            state = next_state;
            if waited.timed_out() && state.queue.is_empty() && state.to_spawn.is_empty() {
                state.idle -= 1;
                state.threads -= 1;
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    /// Waits (with a generous bound that only a hang reaches) until `check` holds.
    fn eventually(pool: &TaskThreadPool, check: impl Fn(PoolStats) -> bool) -> PoolStats {
        for _ in 0..10_000 {
            let stats = pool.stats();
            if check(stats) {
                return stats;
            }
            std::thread::yield_now();
            #[allow(clippy::disallowed_methods)] // a test polling real threads
            std::thread::sleep(Duration::from_millis(1));
        }
        panic!("the pool never got there: {:?}", pool.stats());
    }

    #[test]
    fn ended_tasks_threads_run_the_next_tasks() {
        let pool = TaskThreadPool::default();
        let (done, ended) = mpsc::channel();
        for i in 0..100 {
            let done = done.clone();
            pool.execute(Box::new(move || done.send(i).unwrap()))
                .unwrap();
            ended.recv().unwrap();
            // The thread is parked again before the next task is handed out.
            eventually(&pool, |s| s.idle == s.threads);
        }
        assert_eq!(pool.stats().started, 1, "one thread ran all 100 tasks");
    }

    #[test]
    fn a_stuck_task_never_holds_up_another() {
        // The regression a fixed-size pool would have: an operator that ignores its
        // cancellation (or sleeps) must not keep the next task from starting.
        let pool = TaskThreadPool::default();
        let (release, stuck) = mpsc::channel::<()>();
        pool.execute(Box::new(move || {
            let _ = stuck.recv();
        }))
        .unwrap();
        let (done, ended) = mpsc::channel();
        pool.execute(Box::new(move || done.send(()).unwrap()))
            .unwrap();
        ended.recv().unwrap(); // would hang if it waited for the stuck one's thread
        assert_eq!(pool.stats().started, 2);
        release.send(()).unwrap();
        eventually(&pool, |s| s.idle == 2);
    }

    #[test]
    fn tasks_handed_out_together_each_get_a_thread() {
        // Two tasks submitted while one thread is parked: the first takes it, the second must
        // not queue behind the first (they wait for each other here).
        let pool = TaskThreadPool::default();
        let (done, ended) = mpsc::channel();
        pool.execute(Box::new(move || done.send(()).unwrap()))
            .unwrap();
        ended.recv().unwrap();
        eventually(&pool, |s| s.idle == 1);
        let (a_tx, a_rx) = mpsc::channel::<()>();
        let (b_tx, b_rx) = mpsc::channel::<()>();
        let (finished, all) = mpsc::channel();
        let f2 = finished.clone();
        pool.execute(Box::new(move || {
            a_tx.send(()).unwrap();
            b_rx.recv().unwrap();
            finished.send(()).unwrap();
        }))
        .unwrap();
        pool.execute(Box::new(move || {
            a_rx.recv().unwrap();
            b_tx.send(()).unwrap();
            f2.send(()).unwrap();
        }))
        .unwrap();
        all.recv().unwrap();
        all.recv().unwrap();
        assert_eq!(pool.stats().started, 2);
    }

    #[test]
    fn a_panicking_task_leaves_its_thread_serving() {
        let pool = TaskThreadPool::default();
        pool.execute(Box::new(|| panic!("a task body panicked")))
            .unwrap();
        eventually(&pool, |s| s.idle == 1);
        let (done, ended) = mpsc::channel();
        pool.execute(Box::new(move || done.send(()).unwrap()))
            .unwrap();
        ended.recv().unwrap();
        assert_eq!(pool.stats().started, 1);
    }

    #[test]
    fn idle_threads_end_after_the_keep_alive() {
        let pool = TaskThreadPool::new(Duration::from_millis(20));
        let (done, ended) = mpsc::channel();
        pool.execute(Box::new(move || done.send(()).unwrap()))
            .unwrap();
        ended.recv().unwrap();
        eventually(&pool, |s| s.threads == 0);
    }
}
