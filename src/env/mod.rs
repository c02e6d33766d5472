//! The node environment: every source of nondeterminism a node uses, in one value.
//!
//! Production and the deterministic simulation (`crate::sim`) differ only in the [`NodeEnv`] they
//! hand to each node: which [`Clock`] gives wall timestamps, which seed the [`NodeRng`]s derive from,
//! which [`Spawner`] decides where a TaskManager runs, and which [`Resolver`] turns an
//! [`ActorAddress`](crate::messages::ActorAddress) into something to send to. Node code must take
//! all of these from here and never from `SystemTime`, a thread RNG or `Arbiter::new` directly
//! (`clippy.toml` enforces it; the few production-only exceptions are marked). The seams that a
//! layer below this one needs (the clock, the RNG, the executor) live in `crate::base`; this
//! module holds the bundle and the seams of tasks: where they run ([`TaskRunner`],
//! [`task_threads`]), how they wait ([`task_blocking`]), the events a node emits ([`events`])
//! and its private working directory ([`working_dir`]).

pub mod blob_store;
pub mod blocking_io;
pub mod build;
pub mod compute_permits;
pub mod events;
pub mod files;
pub mod futex_hash;
pub mod open_files;
pub mod private;
pub mod task_blocking;
pub mod task_threads;
pub mod working_dir;

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use actix::{Arbiter, ArbiterHandle};

use crate::base::clock::Clock;
use crate::base::hash::fnv1a;
use crate::base::rng::NodeRng;
use crate::env::compute_permits::{ComputePermits, PermitBlocker};
use crate::env::events::EventSink;
use crate::env::task_threads::TaskThreadPool;
use crate::rpc::directory::Resolver;

/// Where a node's actors run. Production gives each TaskManager its own arbiter (thread), so a
/// crash can be modelled by stopping that arbiter; tests and the simulation keep everything on
/// the current arbiter so a paused tokio clock governs every timer.
pub trait Spawner: Send + Sync + fmt::Debug {
    /// A place to start a node's actors.
    fn place(&self, name: &str) -> Placement;
}

/// An execution context handed out by a [`Spawner`].
#[derive(Debug)]
pub struct Placement {
    handle: ArbiterHandle,
    owned: Option<Arbiter>,
}

impl Placement {
    /// The arbiter to start actors on (`Actor::start_in_arbiter`).
    pub fn handle(&self) -> &ArbiterHandle {
        &self.handle
    }

    /// Whether the placement has an arbiter of its own (a thread that stopping ends).
    pub fn owns_arbiter(&self) -> bool {
        self.owned.is_some()
    }

    /// Stops the placement's own arbiter, if it has one: every actor on it is dropped without its
    /// stop hooks running, which is what a crash looks like. Returns the arbiter so the caller
    /// can join its thread later; a shared (current) arbiter is left alone.
    pub fn stop(self) -> Option<Arbiter> {
        let arbiter = self.owned?;
        arbiter.stop();
        Some(arbiter)
    }
}

/// One arbiter (thread) per placement: production.
#[derive(Debug, Default, Clone, Copy)]
pub struct ArbiterSpawner;

impl Spawner for ArbiterSpawner {
    #[allow(clippy::disallowed_methods)] // production-only: the spawner is the one place threads start
    fn place(&self, _name: &str) -> Placement {
        let arbiter = Arbiter::new();
        Placement {
            handle: arbiter.handle(),
            owned: Some(arbiter),
        }
    }
}

/// Every placement on the caller's arbiter: tests and simulation, where a paused clock must
/// govern every actor.
#[derive(Debug, Default, Clone, Copy)]
pub struct CurrentArbiterSpawner;

impl Spawner for CurrentArbiterSpawner {
    fn place(&self, _name: &str) -> Placement {
        Placement {
            // Tests and the in-process cluster: everything on the caller's arbiter, on purpose.
            #[allow(clippy::disallowed_methods)]
            handle: Arbiter::current(),
            owned: None,
        }
    }
}

/// Where task code runs: never on an actor's thread, so a busy TaskManager still heartbeats.
pub trait TaskRunner: Send + Sync + fmt::Debug {
    /// Runs `task` to its end somewhere else; the task blocks only through the [`TaskBlocker`]
    /// it is given.
    fn run(&self, name: String, task: TaskBody);
    /// Where the node's actors hand blocking file I/O (production: the process's
    /// [`IoPool`](blocking_io::IoPool); simulation: inline, in lock step).
    fn io(&self) -> Arc<dyn blocking_io::BlockingIo>;
}

/// Task code as a [`TaskRunner`] takes it: it waits only through the blocker it is called with.
pub type TaskBody = Box<dyn FnOnce(&dyn TaskBlocker) + Send>;

/// Every point where task code waits, supplied by its [`TaskRunner`]: production parks the task
/// thread, the simulation ([`crate::sim::lockstep`]) runs the wait on its own thread in virtual time.
/// Helpers: [`block_on`](crate::env::task_blocking::block_on) for futures with an output.
pub trait TaskBlocker {
    /// Waits until `future` completes (production: parks this thread; simulation: the future
    /// runs on the simulation's thread in virtual time). Returns false if the runner is gone
    /// (node crashed): the task must then stop (treat as cancelled).
    fn wait(&self, future: Pin<Box<dyn Future<Output = ()> + Send + 'static>>) -> bool;
    /// Sleeps `duration` (virtual time in simulation). Returns false if the runner is gone.
    fn sleep(&self, duration: Duration) -> bool;
    /// Called at every record or buffer a task reads or writes: where production gives its
    /// [compute permit](compute_permits) to the next in line once it held it for a time slice.
    fn yield_point(&self) {}
    /// Runs `f`, which may block outside this blocker (a condition variable, a pipe), without
    /// counting as computing (tokio's `block_in_place`).
    fn block_in_place(&self, f: &mut dyn FnMut()) {
        f();
    }
}

/// Production task threads: each task on a thread of its own while it runs, taken from a
/// [`TaskThreadPool`] that reuses the threads of ended tasks (a task never waits for one: with
/// none parked a new thread starts). The TaskManager bounds how many run: one per task of each
/// allocated slot; how many of those compute at once is bounded by the runner's
/// [`ComputePermits`]. Clones share the pool and the permits (the TaskManagers of one process
/// do).
#[derive(Debug, Default, Clone)]
pub struct ThreadTaskRunner {
    pool: TaskThreadPool,
    permits: ComputePermits,
}

impl ThreadTaskRunner {
    /// A runner whose tasks compute at most `compute_threads` at a time (0: the
    /// [default](compute_permits::default_limit), two per CPU).
    pub fn new(compute_threads: usize) -> Self {
        Self::with_permits(if compute_threads == 0 {
            ComputePermits::default()
        } else {
            ComputePermits::new(compute_threads)
        })
    }

    /// A runner under the given permits.
    pub fn with_permits(permits: ComputePermits) -> Self {
        Self {
            pool: TaskThreadPool::default(),
            permits,
        }
    }

    /// The runner's permits (their stats, for tests and logs).
    pub fn permits(&self) -> &ComputePermits {
        &self.permits
    }
}

impl TaskRunner for ThreadTaskRunner {
    fn run(&self, name: String, task: TaskBody) {
        let permits = self.permits.clone();
        let body = move || task(&PermitBlocker::acquire(&permits));
        if let Err(error) = self.pool.execute(Box::new(body)) {
            log::error!("cannot start a thread for task {name}: {error}");
        }
    }

    fn io(&self) -> Arc<dyn blocking_io::BlockingIo> {
        Arc::new(blocking_io::IoPool)
    }
}

/// Everything nondeterministic a node may use. Cheap to clone; each actor derives its own
/// [`NodeRng`] with [`NodeEnv::rng`] so actors on one node do not share a lock.
#[derive(Clone, Debug)]
pub struct NodeEnv {
    /// The node's name, for logs and derived seeds.
    pub node: String,
    /// Wall-clock timestamps.
    pub clock: Arc<dyn Clock>,
    /// Where spawned TaskManagers run.
    pub spawner: Arc<dyn Spawner>,
    /// Where task code runs.
    pub task_runner: Arc<dyn TaskRunner>,
    /// Turns actor addresses into gateways (in-process directory or remote proxies).
    pub resolver: Arc<dyn Resolver>,
    /// Where actors report what they do, for timelines and tests.
    pub events: EventSink,
    seed: u64,
}

impl NodeEnv {
    /// An environment for one node.
    pub fn new(
        node: impl Into<String>,
        seed: u64,
        clock: Arc<dyn Clock>,
        spawner: Arc<dyn Spawner>,
        resolver: Arc<dyn Resolver>,
        events: EventSink,
    ) -> Self {
        Self {
            node: node.into(),
            clock,
            spawner,
            task_runner: Arc::new(ThreadTaskRunner::default()),
            resolver,
            events,
            seed,
        }
    }

    /// The seed every generator of this node derives from.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// A generator for one purpose (`label`) on this node: the same seed and label always give
    /// the same stream, whatever else the node has drawn.
    pub fn rng(&self, label: &str) -> NodeRng {
        NodeRng::seed_from_u64(self.seed ^ fnv1a(label.as_bytes()))
    }

    /// The address an actor called `name` on this node is reached at.
    pub fn address_of(&self, name: &str) -> crate::messages::ActorAddress {
        crate::messages::ActorAddress::new(self.resolver.local_node(), name)
    }

    /// The same environment running its tasks on `runner` (a process's configured
    /// [`ThreadTaskRunner`]).
    pub fn with_task_runner(self, runner: Arc<dyn TaskRunner>) -> Self {
        Self {
            task_runner: runner,
            ..self
        }
    }

    /// The environment of another node that shares this one's clock, spawner, resolver and
    /// event sink (an in-process TaskManager started by the driver).
    pub fn child(&self, node: impl Into<String>, seed: u64) -> Self {
        Self {
            node: node.into(),
            seed,
            ..self.clone()
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn labelled_generators_differ_by_label_only() {
        let env = crate::testing::env("node", 1);
        assert_eq!(env.rng("rm").next_u64(), env.rng("rm").next_u64());
        assert_ne!(env.rng("rm").next_u64(), env.rng("jm").next_u64());
    }
}
