//! The in-process driver: each worker is a TaskManager actor placed by the node's
//! [`Spawner`](crate::env::Spawner) — in production its own arbiter, i.e. its own thread, so
//! stopping that arbiter is a faithful crash (the actor vanishes without a word).
//!
//! The driver shares its table of workers with an [`InProcessWorkers`] handle, through which the
//! embedded cluster crashes a worker for demos and tests. A crash is not reported by the driver:
//! like a machine that dies, it is noticed by the JobManager's heartbeat timeout.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use actix::{Addr, Arbiter};

use super::{DriverError, WorkerDriver, WorkerRequest};
use crate::actors::Shutdown;
use crate::actors::node::start_task_manager_node;
use crate::actors::task_manager::registration::Leader;
use crate::actors::task_manager::{TaskManager, TaskManagerSettings, TaskManagerSpec};
use crate::base::ids::{LeaderSessionId, ResourceId};
use crate::base::rng::NodeRng;
use crate::env::{NodeEnv, Placement};
use crate::messages::resource_manager::{ResourceManagerGateway, WorkerStarted};
use crate::messages::{ActorAddress, NewLeaderAvailable};

struct LocalWorker {
    placement: Placement,
    task_manager: Addr<TaskManager>,
    name: String,
}

/// How many stopped arbiters may wait to be joined: beyond it the oldest (long finished) is
/// joined, so crashes and releases do not accumulate thread stacks until shutdown.
const MAX_UNJOINED: usize = 16;

#[derive(Default)]
struct Workers {
    running: BTreeMap<ResourceId, LocalWorker>,
    /// Stopped arbiters, oldest first; the rest are joined at shutdown.
    stopped: VecDeque<Arbiter>,
}

impl Workers {
    fn stopped(&mut self, arbiter: Arbiter) {
        self.stopped.push_back(arbiter);
        while self.stopped.len() > MAX_UNJOINED {
            if let Some(oldest) = self.stopped.pop_front() {
                join(oldest);
            }
        }
    }
}

fn join(arbiter: Arbiter) {
    if arbiter.join().is_err() {
        log::error!("in-process driver: a TaskManager thread panicked");
    }
}

type SharedWorkers = Arc<Mutex<Workers>>;

fn lock(workers: &SharedWorkers) -> MutexGuard<'_, Workers> {
    // Each operation leaves the table consistent, whatever panicked meanwhile.
    workers.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Starts TaskManager actors in this process.
pub struct InProcessDriver {
    spec: TaskManagerSpec,
    env: NodeEnv,
    rng: NodeRng,
    resource_manager: Option<ResourceManagerGateway>,
    workers: SharedWorkers,
}

impl InProcessDriver {
    /// A driver whose TaskManagers follow `spec` and share `env`'s clock, spawner and
    /// resolver (each gets its own RNG seed).
    pub fn new(spec: TaskManagerSpec, env: NodeEnv) -> Self {
        Self {
            spec,
            rng: env.rng("in-process-driver"),
            env,
            resource_manager: None,
            workers: SharedWorkers::default(),
        }
    }

    /// A handle on this driver's workers, for crashing them.
    pub fn workers(&self) -> InProcessWorkers {
        InProcessWorkers {
            workers: self.workers.clone(),
            env: self.env.clone(),
        }
    }

    fn stop(&self, worker: LocalWorker, graceful: bool) -> Option<Arbiter> {
        self.env
            .resolver
            .unregister(&self.env.address_of(&worker.name));
        stop_worker(worker, graceful)
    }
}

fn stop_worker(worker: LocalWorker, graceful: bool) -> Option<Arbiter> {
    if graceful || !worker.placement.owns_arbiter() {
        // On a shared arbiter, stopping the actor is the only way to end it.
        worker.task_manager.do_send(Shutdown);
    }
    worker.placement.stop()
}

impl WorkerDriver for InProcessDriver {
    fn name(&self) -> &'static str {
        "in_process"
    }

    fn initialize(&mut self, resource_manager: ResourceManagerGateway) {
        self.resource_manager = Some(resource_manager);
    }

    fn can_start_workers(&self) -> bool {
        true
    }

    fn adopts_unknown_workers(&self) -> bool {
        false
    }

    fn request_worker(&mut self, request: WorkerRequest) -> Result<(), DriverError> {
        let resource_id = request.resource_id;
        let name = TaskManager::name_of(&resource_id);
        let settings = TaskManagerSettings {
            resource_id: resource_id.clone(),
            job_manager: Some(Leader {
                address: request.job_manager,
                retrieved_session: request.leader_session_id,
            }),
            spec: self.spec.clone(),
        };
        let env = self.env.child(name.clone(), self.rng.next_u64());
        let placement = self.env.spawner.place(&name);
        let task_manager = start_task_manager_node(settings, env, Some(placement.handle()), None);
        lock(&self.workers).running.insert(
            resource_id.clone(),
            LocalWorker {
                placement,
                task_manager,
                name,
            },
        );
        if let Some(rm) = &self.resource_manager {
            rm.worker_started.do_send(WorkerStarted { resource_id });
        }
        Ok(())
    }

    fn release_worker(&mut self, resource_id: &ResourceId) {
        let worker = lock(&self.workers).running.remove(resource_id);
        if let Some(worker) = worker
            && let Some(arbiter) = self.stop(worker, true)
        {
            lock(&self.workers).stopped(arbiter);
        }
    }

    fn leader_changed(&mut self, job_manager: &ActorAddress, leader_session_id: LeaderSessionId) {
        for worker in lock(&self.workers).running.values() {
            worker.task_manager.do_send(NewLeaderAvailable {
                address: job_manager.clone(),
                leader_session_id,
            });
        }
    }

    fn shutdown(&mut self) {
        let (running, stopped) = {
            let mut workers = lock(&self.workers);
            (
                std::mem::take(&mut workers.running),
                std::mem::take(&mut workers.stopped),
            )
        };
        let mut arbiters = stopped;
        for (_, worker) in running {
            arbiters.extend(self.stop(worker, true));
        }
        arbiters.into_iter().for_each(join);
    }
}

impl Drop for InProcessDriver {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The embedded cluster's handle on in-process workers.
#[derive(Clone)]
pub struct InProcessWorkers {
    workers: SharedWorkers,
    env: NodeEnv,
}

impl InProcessWorkers {
    /// Crashes a worker: its TaskManager vanishes without telling anyone (on a shared arbiter it
    /// is stopped, which it also does silently). False if no such worker runs.
    pub fn crash(&self, resource_id: &ResourceId) -> bool {
        let Some(worker) = lock(&self.workers).running.remove(resource_id) else {
            return false;
        };
        self.env
            .resolver
            .unregister(&self.env.address_of(&worker.name));
        if let Some(arbiter) = stop_worker(worker, false) {
            lock(&self.workers).stopped(arbiter);
        }
        true
    }

    /// The workers running now.
    pub fn running(&self) -> Vec<ResourceId> {
        lock(&self.workers).running.keys().cloned().collect()
    }
}

#[cfg(test)]
mod tests;
