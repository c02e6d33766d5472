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
use std::sync::{Arc, mpsc};
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
    io_latency: Duration,
}

impl LockstepTaskRunner {
    /// A runner whose tasks start after `compute` of virtual time (may be zero), so a task takes
    /// virtual time even when it never waits.
    pub fn new(compute: Duration) -> Self {
        Self {
            compute,
            io_latency: Duration::ZERO,
        }
    }

    /// The same, with a disk whose handed-over reads take `latency` of virtual time (see
    /// [`LockstepIo`]).
    pub fn with_io_latency(self, latency: Duration) -> Self {
        Self {
            io_latency: latency,
            ..self
        }
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

    fn io(&self) -> Arc<dyn crate::env::blocking_io::BlockingIo> {
        Arc::new(LockstepIo {
            latency: self.io_latency,
        })
    }
}

/// The simulation's disk: work runs inline, in lock step, so a seed replays the same; a read an
/// actor hands over ([`offload`](crate::env::blocking_io::offload)) first waits `latency` of
/// virtual time, so a newer poll, a release or a crash can come while it is in flight.
#[derive(Debug, Clone, Copy)]
pub struct LockstepIo {
    latency: Duration,
}

impl crate::env::blocking_io::BlockingIo for LockstepIo {
    fn execute(&self, work: crate::env::blocking_io::IoWork) {
        work();
    }

    fn latency(&self) -> Duration {
        self.latency
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
mod tests;
