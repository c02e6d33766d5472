//! The in-process driver: each worker is a TaskManager actor placed by the node's
//! [`Spawner`](crate::env::Spawner) — in production its own arbiter, i.e. its own thread, so
//! stopping that arbiter is a faithful crash (the actor vanishes without a word).
//!
//! The driver shares its table of workers with an [`InProcessWorkers`] handle, through which the
//! embedded cluster crashes a worker for demos and tests. A crash is not reported by the driver:
//! like a machine that dies, it is noticed by the JobManager's heartbeat timeout.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use actix::{Actor, Addr, Arbiter};

use super::{DriverError, WorkerDriver, WorkerRequest};
use crate::actors::Shutdown;
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
        let task_manager = TaskManager::start_in_arbiter(placement.handle(), move |_| {
            TaskManager::new(settings, env)
        });
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
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::base::ids::ClusterId;
    use crate::base::ids::LeaderSessionId;
    use crate::config::{HeartbeatConfig, RegistrationConfig};
    use crate::env::ArbiterSpawner;
    use crate::messages::HardwareDescription;
    use crate::messages::resource_manager::ResourceManagerMessage;
    use crate::messages::task_manager::GetTaskManagerStatus;
    use crate::testing::*;

    const SESSION: LeaderSessionId = LeaderSessionId::from_u128(3);

    fn template() -> TaskManagerSpec {
        TaskManagerSpec {
            cluster_id: ClusterId::new("test"),
            slots: 2,
            hostname: "localhost".into(),
            hardware: HardwareDescription {
                cpu_cores: 1,
                physical_memory_bytes: 0,
            },
            registration: RegistrationConfig::default(),
            heartbeat: HeartbeatConfig::default(),
            registry: crate::operators::OperatorRegistry::with_builtins(),
            working_dir: std::env::temp_dir().join("flint-unit-tests"),
            spill_threshold_bytes: 1 << 20,
            network: crate::exchange::NetworkSettings::default(),
            cancellation: crate::config::CancellationConfig::default(),
        }
    }

    fn request(env: &NodeEnv, name: &str) -> WorkerRequest {
        WorkerRequest {
            resource_id: ResourceId::new(name),
            job_manager: env.address_of("jobmanager"),
            leader_session_id: Some(SESSION),
        }
    }

    #[actix::test]
    async fn a_requested_worker_starts_reports_and_registers_at_the_leader() {
        tokio::time::pause();
        let env = env("node", 1);
        let jm = JobManagerProbeHandle::start(&env, "jobmanager", SESSION);
        let rm = ResourceManagerProbeHandle::start(&env);
        let mut driver = InProcessDriver::new(template(), env.clone());
        driver.initialize(rm.gateway.clone());
        driver.request_worker(request(&env, "tm-a")).unwrap();
        settle().await;
        assert_eq!(
            rm.received.all(),
            [ResourceManagerMessage::WorkerStarted(WorkerStarted {
                resource_id: ResourceId::new("tm-a")
            })]
        );
        let registrations = jm.received.filter(|m| match m {
            crate::messages::job_manager::JobManagerMessage::RegisterTaskManager(r) => {
                Some((r.resource_id.clone(), r.number_of_slots))
            }
            _ => None,
        });
        assert_eq!(registrations, [(ResourceId::new("tm-a"), 2)]);
        assert_eq!(driver.workers().running(), [ResourceId::new("tm-a")]);
    }

    #[actix::test]
    async fn a_new_leader_is_passed_on_to_every_task_manager() {
        tokio::time::pause();
        let env = env("node", 1);
        let _old = JobManagerProbeHandle::start(&env, "jobmanager", SESSION);
        let mut driver = InProcessDriver::new(template(), env.clone());
        driver.request_worker(request(&env, "tm-a")).unwrap();
        driver.request_worker(request(&env, "tm-b")).unwrap();
        settle().await;
        let new_session = LeaderSessionId::from_u128(4);
        let new = JobManagerProbeHandle::start(&env, "jobmanager-2", new_session);
        new.script(|s| {
            s.register_task_manager = Script::Answer(
                crate::messages::job_manager::RegistrationResponse::AcknowledgeRegistration(
                    crate::messages::job_manager::AcknowledgeRegistration {
                        instance_id: crate::base::ids::InstanceId::from_u128(9),
                        leader_session_id: new_session,
                    },
                ),
            )
        });
        driver.leader_changed(&new.address, new_session);
        settle().await;
        let registered: Vec<_> = new.received.filter(|m| match m {
            crate::messages::job_manager::JobManagerMessage::RegisterTaskManager(r) => {
                Some(r.resource_id.to_string())
            }
            _ => None,
        });
        assert_eq!(registered, ["tm-a", "tm-b"]);
    }

    #[actix::test]
    async fn release_stops_the_task_manager_and_forgets_its_address() {
        tokio::time::pause();
        let env = env("node", 1);
        let _jm = JobManagerProbeHandle::start(&env, "jobmanager", SESSION);
        let mut driver = InProcessDriver::new(template(), env.clone());
        driver.request_worker(request(&env, "tm-a")).unwrap();
        settle().await;
        let address = env.address_of("taskmanager/tm-a");
        let gateway = env.resolver.task_manager(&address).expect("registered");
        driver.release_worker(&ResourceId::new("tm-a"));
        settle().await;
        assert!(env.resolver.task_manager(&address).is_none());
        assert!(
            gateway.get_status.send(GetTaskManagerStatus).await.is_err(),
            "stopped"
        );
        assert!(driver.workers().running().is_empty());
        // Unknown ids are ignored.
        driver.release_worker(&ResourceId::new("ghost"));
    }

    #[actix::test]
    async fn a_crash_on_its_own_thread_kills_the_task_manager_silently() {
        let env = env_with_spawner("node", 2, Arc::new(ArbiterSpawner));
        let _jm = JobManagerProbeHandle::start(&env, "jobmanager", SESSION);
        let rm = ResourceManagerProbeHandle::start(&env);
        let mut driver = InProcessDriver::new(template(), env.clone());
        driver.initialize(rm.gateway.clone());
        driver.request_worker(request(&env, "tm-a")).unwrap();
        let address = env.address_of("taskmanager/tm-a");
        let gateway = loop {
            if let Some(gateway) = env.resolver.task_manager(&address) {
                break gateway;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        };
        assert!(driver.workers().crash(&ResourceId::new("tm-a")));
        assert!(
            !driver.workers().crash(&ResourceId::new("tm-a")),
            "only once"
        );
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while gateway.get_status.send(GetTaskManagerStatus).await.is_ok() {
            assert!(tokio::time::Instant::now() < deadline, "still alive");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        // The driver reports the start and nothing else: a crash is for heartbeats to find.
        while rm.received.all().is_empty() {
            assert!(tokio::time::Instant::now() < deadline, "no WorkerStarted");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert!(matches!(
            rm.received.all()[..],
            [ResourceManagerMessage::WorkerStarted(_)]
        ));
        driver.shutdown();
    }
}
