//! The deterministic simulation's task runner: task code on its own OS thread, but in strict
//! lock-step with the simulation's thread, so only one of the two ever runs and every wait of the
//! task happens on the simulation's runtime, in virtual time.
//!
//! Task code is synchronous (operators block), so it needs a stack of its own; what makes it
//! deterministic is that its thread only runs while the simulation thread is blocked waiting for
//! it. [`LockstepTaskRunner::run`] spawns a local task, the *driver*, that starts the task thread
//! and then blocks the simulation thread on a std channel until the task's next step: `Wait` (the
//! driver awaits the future here), `Sleep` (it awaits `tokio::time::sleep`, virtual under a
//! paused clock) or `Done`. It then resumes the task thread and blocks again. The task thread
//! never touches a tokio runtime, only the two channels.
//!
//! A crash is dropping the node's `LocalSet`: the driver's drop guard closes both channels, so
//! the task's current and every later blocker call returns false (the task ends as cancelled),
//! and joins the thread before returning, so nothing of the task runs beside the simulation.
//! This module must never let the two threads run at once, and never block the simulation thread
//! on anything but a task thread that is running.

use std::future::Future;
use std::pin::Pin;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::env::{TaskBlocker, TaskBody, TaskRunner};

/// A future a task waits for; it runs on the simulation thread.
type StepFuture = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// What the task thread asks of the simulation thread next.
enum Step {
    /// Run this future to completion, then resume the task.
    Wait(StepFuture),
    /// Let this much virtual time pass, then resume the task.
    Sleep(Duration),
    /// The task has ended (normally or by a panic): join its thread.
    Done,
}

/// Runs each task on its own thread in lock-step with the simulation thread (see the module
/// docs). `run` must be called inside the node's `LocalSet` on a current-thread runtime, whose
/// clock may be paused.
#[derive(Debug, Default, Clone, Copy)]
pub struct LockstepTaskRunner {
    compute: Duration,
}

impl LockstepTaskRunner {
    /// A runner whose tasks start after `compute` of virtual time (may be zero), so a task takes
    /// virtual time even when it never waits.
    pub fn new(compute: Duration) -> Self {
        Self { compute }
    }

    /// Like [`TaskRunner::run`], but the returned handle completes once the task's thread has
    /// ended and been joined (tests and harnesses wait on it).
    ///
    /// # Panics
    /// Outside a `LocalSet`, as `tokio::task::spawn_local` does: a simulation set up wrongly.
    pub fn spawn(&self, name: String, task: TaskBody) -> tokio::task::JoinHandle<()> {
        let compute = self.compute;
        tokio::task::spawn_local(async move {
            if !compute.is_zero() {
                tokio::time::sleep(compute).await;
            }
            let Some(thread) = TaskThread::start(name, task) else {
                return;
            };
            thread.resume();
            loop {
                // Blocks the simulation thread while the task thread runs: only one runs.
                match thread.next_step() {
                    Step::Wait(future) => future.await,
                    Step::Sleep(duration) => tokio::time::sleep(duration).await,
                    Step::Done => break,
                }
                thread.resume();
            }
            // `thread`'s drop joins it.
        })
    }
}

impl TaskRunner for LockstepTaskRunner {
    fn run(&self, name: String, task: TaskBody) {
        drop(self.spawn(name, task));
    }
}

/// The driver's side of one task thread. Dropping it (the task ended, or the node's `LocalSet`
/// was dropped) ends the task and joins its thread.
struct TaskThread {
    name: String,
    steps: Option<mpsc::Receiver<Step>>,
    resume: Option<mpsc::Sender<()>>,
    handle: Option<JoinHandle<()>>,
}

impl TaskThread {
    /// Starts the task; `None` (logged) if no thread can be started, like the production runner.
    fn start(name: String, task: TaskBody) -> Option<Self> {
        let (step_sender, steps) = mpsc::channel();
        let (resume, resume_receiver) = mpsc::channel();
        let blocker = LockstepBlocker {
            steps: step_sender,
            resume: resume_receiver,
        };
        // The blocker moves into the thread, so its drop (on return or unwinding) sends `Done`.
        #[allow(clippy::disallowed_methods)] // the one place the simulation starts task threads
        let spawned = std::thread::Builder::new()
            .name(name.clone())
            // The thread waits for its first turn, so not even its first steps overlap the
            // simulation thread.
            .spawn(move || {
                if blocker.resume.recv().is_ok() {
                    task(&blocker);
                }
            });
        match spawned {
            Ok(handle) => Some(Self {
                name,
                steps: Some(steps),
                resume: Some(resume),
                handle: Some(handle),
            }),
            Err(error) => {
                log::error!("cannot start a thread for task {name}: {error}");
                None
            }
        }
    }

    /// Blocks until the task's next step. A thread gone without `Done` cannot happen (the
    /// blocker's drop sends it), but would mean the same.
    fn next_step(&self) -> Step {
        self.steps
            .as_ref()
            .and_then(|steps| steps.recv().ok())
            .unwrap_or(Step::Done)
    }

    fn resume(&self) {
        if let Some(resume) = &self.resume {
            // The task thread is blocked on the other end until its blocker is dropped.
            let _ = resume.send(());
        }
    }
}

impl Drop for TaskThread {
    fn drop(&mut self) {
        // The task thread is blocked on `resume` (or has ended): the driver only ever yields
        // while it is. Closing `steps` first means that, once woken by the closed `resume`,
        // every blocker call fails on the task thread without handing anything to this one.
        self.steps.take();
        self.resume.take();
        if let Some(handle) = self.handle.take() {
            // Synchronously: the task's unwinding must not run beside the simulation.
            if handle.join().is_err() {
                log::error!("task thread {} panicked", self.name);
            }
        }
    }
}

/// The task thread's side: each call hands a step to the driver and waits to be resumed.
struct LockstepBlocker {
    steps: mpsc::Sender<Step>,
    resume: mpsc::Receiver<()>,
}

impl LockstepBlocker {
    /// False once the driver is gone (the node crashed).
    fn step(&self, step: Step) -> bool {
        self.steps.send(step).is_ok() && self.resume.recv().is_ok()
    }
}

impl TaskBlocker for LockstepBlocker {
    fn wait(&self, future: StepFuture) -> bool {
        self.step(Step::Wait(future))
    }

    fn sleep(&self, duration: Duration) -> bool {
        self.step(Step::Sleep(duration))
    }
}

impl Drop for LockstepBlocker {
    fn drop(&mut self) {
        // Also on unwinding, so a panicking task never leaves the simulation thread blocked.
        let _ = self.steps.send(Step::Done);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};

    use tokio::task::LocalSet;
    use tokio::time::Instant;

    use super::*;
    use crate::env::task_blocking::block_on;

    /// A node's runtime in the simulation: one thread, a paused clock, a `LocalSet`.
    fn simulation() -> (tokio::runtime::Runtime, LocalSet) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        (runtime, LocalSet::new())
    }

    #[test]
    fn a_sleeping_task_takes_exactly_its_virtual_time_and_little_wall_time() {
        let (runtime, local) = simulation();
        #[allow(clippy::disallowed_methods)] // wall time, to show the sleep is not real
        let wall = std::time::Instant::now();
        local.block_on(&runtime, async {
            for (compute, total) in [(0, 5), (2, 7)] {
                let runner = LockstepTaskRunner::new(Duration::from_secs(compute));
                let start = Instant::now();
                let (sender, slept) = mpsc::channel();
                let task: TaskBody = Box::new(move |blocker| {
                    sender.send(blocker.sleep(Duration::from_secs(5))).unwrap();
                });
                runner.spawn("sleeper".into(), task).await.unwrap();
                assert_eq!(start.elapsed(), Duration::from_secs(total));
                assert_eq!(slept.try_recv(), Ok(true));
            }
        });
        assert!(wall.elapsed() < Duration::from_secs(2));
    }

    #[test]
    fn a_waiting_task_gets_what_a_local_task_sends() {
        let (runtime, local) = simulation();
        local.block_on(&runtime, async {
            let start = Instant::now();
            let (sender, receiver) = tokio::sync::oneshot::channel();
            tokio::task::spawn_local(async move {
                tokio::time::sleep(Duration::from_secs(1)).await;
                sender.send(42).unwrap();
            });
            let (report, received) = mpsc::channel();
            let task: TaskBody = Box::new(move |blocker| {
                report.send(block_on(blocker, receiver)).unwrap();
            });
            LockstepTaskRunner::default()
                .spawn("waiter".into(), task)
                .await
                .unwrap();
            assert_eq!(received.try_recv(), Ok(Some(Ok(42))));
            assert_eq!(start.elapsed(), Duration::from_secs(1));
        });
    }

    #[test]
    fn dropping_the_local_set_fails_every_blocker_call_and_joins_the_thread_first() {
        let (runtime, local) = simulation();
        let waiter_stopped = Arc::new(AtomicBool::new(false));
        let sleeper_stopped = Arc::new(AtomicBool::new(false));
        local.block_on(&runtime, async {
            let runner = LockstepTaskRunner::default();
            let stopped = Arc::clone(&waiter_stopped);
            let waiter: TaskBody = Box::new(move |blocker| {
                let waited = blocker.wait(Box::pin(std::future::pending()));
                let slept = blocker.sleep(Duration::from_secs(1));
                // A slow finish that the drop must wait for.
                #[allow(clippy::disallowed_methods)]
                // real time, to widen a race if there were one
                std::thread::sleep(Duration::from_millis(50));
                stopped.store(!waited && !slept, Ordering::SeqCst);
            });
            runner.run("waiter".into(), waiter);
            let stopped = Arc::clone(&sleeper_stopped);
            let sleeper: TaskBody = Box::new(move |blocker| {
                let slept = blocker.sleep(Duration::from_secs(3600));
                stopped.store(!slept, Ordering::SeqCst);
            });
            runner.run("sleeper".into(), sleeper);
            // Both tasks are now blocked in their blocker.
            tokio::time::sleep(Duration::from_secs(1)).await;
        });
        assert!(!waiter_stopped.load(Ordering::SeqCst));
        assert!(!sleeper_stopped.load(Ordering::SeqCst));
        drop(local);
        assert!(waiter_stopped.load(Ordering::SeqCst));
        assert!(sleeper_stopped.load(Ordering::SeqCst));
    }

    #[test]
    fn a_panicking_task_does_not_block_the_simulation() {
        let (runtime, local) = simulation();
        local.block_on(&runtime, async {
            let task: TaskBody = Box::new(|blocker| {
                blocker.sleep(Duration::from_millis(1));
                panic!("operator bug outside run_task's catch_unwind");
            });
            LockstepTaskRunner::default()
                .spawn("panics".into(), task)
                .await
                .unwrap();
        });
    }

    /// Three tasks that sleep different steps and one that waits for a feeder on the simulation
    /// thread, all appending to one log.
    fn scenario() -> Vec<String> {
        let (runtime, local) = simulation();
        let log = Arc::new(Mutex::new(Vec::new()));
        let push = |log: &Arc<Mutex<Vec<String>>>, entry: String| log.lock().unwrap().push(entry);
        local.block_on(&runtime, async {
            let start = Instant::now();
            let runner = LockstepTaskRunner::new(Duration::from_millis(3));
            let (sender, receiver) = tokio::sync::oneshot::channel();
            let feeder_log = Arc::clone(&log);
            tokio::task::spawn_local(async move {
                for i in 0..3 {
                    tokio::time::sleep(Duration::from_millis(7)).await;
                    push(&feeder_log, format!("{:?} feeder {i}", start.elapsed()));
                }
                sender.send(()).unwrap();
            });
            let mut handles = Vec::new();
            for t in 0..3u64 {
                let log = Arc::clone(&log);
                let task: TaskBody = Box::new(move |blocker| {
                    for step in 0..4 {
                        assert!(blocker.sleep(Duration::from_millis(2 * t + 1)));
                        push(&log, format!("task {t} step {step}"));
                    }
                });
                handles.push(runner.spawn(format!("task-{t}"), task));
            }
            let waiter_log = Arc::clone(&log);
            let waiter: TaskBody = Box::new(move |blocker| {
                push(&waiter_log, "waiter starts".into());
                let fed = block_on(blocker, receiver);
                push(&waiter_log, format!("waiter got {fed:?}"));
            });
            handles.push(runner.spawn("waiter".into(), waiter));
            for handle in handles {
                handle.await.unwrap();
            }
            push(&log, format!("{:?} all done", start.elapsed()));
        });
        Arc::try_unwrap(log).unwrap().into_inner().unwrap()
    }

    #[test]
    fn the_same_inputs_give_the_same_ordered_steps() {
        let first = scenario();
        assert_eq!(first.len(), 3 + 3 * 4 + 2 + 1);
        assert_eq!(first.last().map(String::as_str), Some("23ms all done"));
        for _ in 0..5 {
            assert_eq!(scenario(), first);
        }
    }
}
