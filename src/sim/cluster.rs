//! The simulated cluster: a JobManager node and the TaskManager nodes its driver asks for, each
//! with its own endpoint on the simulated network, its own `LocalSet` and its own seeded
//! environment; and the hands that inject the scenario's actions and faults. The HA family
//! ([`super::ha`]) boots its own JobManager nodes and uses the rest: the workers, the driver's
//! commands, the faults, and TaskManagers that follow leader retrieval.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use actix::Addr;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::coordination::SimCoordination;
use super::driver::{DriverCommand, SimDriver};
use super::host::NodeHost;
use super::network::{CrashKind, SimNetwork};
use super::trace::Trace;
use crate::actors::job_manager::JobManager;
use crate::actors::node::{start_job_manager_node, start_task_manager_node, task_manager_spec};
use crate::actors::resource_manager::FlinkResourceManager;
use crate::actors::resource_manager::driver::WorkerRequest;
use crate::actors::task_manager::registration::Leader;
use crate::actors::task_manager::{TaskManager, TaskManagerSettings};
use crate::base::clock::Clock;
use crate::base::hash::fnv1a;
use crate::base::ids::ResourceId;
use crate::base::rng::NodeRng;
use crate::config::ClusterConfig;
use crate::env::events::EventSink;
use crate::env::{CurrentArbiterSpawner, NodeEnv};
use crate::messages::ActorAddress;
use crate::messages::resource_manager::{
    ResourceManagerGateway, WorkerFailed, WorkerStarted, WorkerTerminated, WorkersRecovered,
};
use crate::operators::OperatorRegistry;
use crate::rpc::endpoint::{EndpointConfig, NodeEndpoint};
use crate::transport::handshake::Secret;

/// The message bounds of [`SimCluster::with_tiny_messages`]: two or three requests or notices
/// of a few members each (a larger one goes alone).
pub const TINY_MESSAGE_BYTES: usize = 100;

/// The JobManager node's id on the simulated network.
pub const JOB_MANAGER_NODE: &str = "jobmanager:6123";

/// Wall-clock time in the simulation: a fixed epoch plus the virtual time elapsed.
#[derive(Debug)]
pub struct SimClock {
    start: Instant,
}

impl SimClock {
    /// 2026-01-01T00:00:00Z, so timestamps look like timestamps.
    const EPOCH_MS: u64 = 1_767_225_600_000;

    /// A clock whose epoch is now.
    pub fn new() -> Self {
        Self {
            start: Instant::now(),
        }
    }
}

impl Default for SimClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SimClock {
    fn now_millis(&self) -> u64 {
        Self::EPOCH_MS + self.start.elapsed().as_millis() as u64
    }
}

/// Where a worker the driver was asked for stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerPhase {
    /// Asked for; its node boots after a delay.
    Starting,
    /// Running.
    Up,
    /// Running but hung.
    Paused,
    /// Crashed; may be restarted.
    Crashed(CrashKind),
    /// Released by the resource manager (or its start failed): gone for good.
    Released,
}

/// One worker node.
pub struct Worker {
    /// Its node id.
    pub node: String,
    /// Its phase.
    pub phase: WorkerPhase,
    /// Its loop, while it has one.
    pub host: Option<NodeHost>,
    /// Its TaskManager, while up.
    pub task_manager: Option<Addr<TaskManager>>,
    /// Boots so far (a restart is a new incarnation).
    pub incarnation: u32,
    /// The virtual time it last started running (booted or resumed).
    pub running_since: Duration,
    request: WorkerRequest,
}

/// The JobManager node's handles.
pub struct JobManagerHandles {
    /// Its loop.
    pub host: NodeHost,
    /// The JobManager.
    pub job_manager: Addr<JobManager>,
    /// The resource manager.
    pub resource_manager: Addr<FlinkResourceManager>,
    /// The JobManager's address.
    pub address: ActorAddress,
}

struct State {
    rng: NodeRng,
    start_failures: f64,
    gateway: Option<ResourceManagerGateway>,
    workers: BTreeMap<ResourceId, Worker>,
    next_node: u32,
}

/// The simulated cluster. Cheap to clone (shared state on the simulation's one thread).
#[derive(Clone)]
pub struct SimCluster {
    /// The network.
    pub network: SimNetwork,
    /// The run's trace.
    pub trace: Trace,
    /// The cluster configuration every node uses.
    pub config: Rc<ClusterConfig>,
    /// Where cluster events go.
    pub events: EventSink,
    /// Per-run scratch directory (inputs, outputs, spill files).
    pub scratch: PathBuf,
    seed: u64,
    start: Instant,
    clock: Arc<SimClock>,
    state: Rc<RefCell<State>>,
    job_manager: Rc<RefCell<Option<Rc<JobManagerHandles>>>>,
    /// High availability ([`super::ha`]): TaskManagers find their JobManager through leader
    /// retrieval on this service instead of the address in their start request.
    retrieval: Option<SimCoordination>,
    /// Two builds ([`with_two_builds`](Self::with_two_builds)): some TaskManagers run only the
    /// built-in operators.
    two_builds: bool,
    /// Tiny message bounds ([`with_tiny_messages`](Self::with_tiny_messages)).
    tiny_messages: bool,
}

impl SimCluster {
    /// A cluster with nothing running yet.
    pub fn new(
        seed: u64,
        config: ClusterConfig,
        network: SimNetwork,
        trace: Trace,
        events: EventSink,
        scratch: PathBuf,
    ) -> Self {
        Self {
            network,
            trace,
            config: Rc::new(config),
            events,
            scratch,
            seed,
            start: Instant::now(),
            clock: Arc::new(SimClock::new()),
            state: Rc::new(RefCell::new(State {
                rng: NodeRng::seed_from_u64(seed ^ fnv1a(b"cluster")),
                start_failures: 0.0,
                gateway: None,
                workers: BTreeMap::new(),
                next_node: 1,
            })),
            job_manager: Rc::new(RefCell::new(None)),
            retrieval: None,
            two_builds: false,
            tiny_messages: false,
        }
    }

    /// TaskManagers booted from now on are of two builds, as when a driver's command starts
    /// another binary than the JobManager's: about half of the nodes (by a hash of the node's
    /// name, the same in every incarnation) run a plain build with the built-in operators only,
    /// the others the JobManager's build with the simulation's program. The JobManager must
    /// place the program's tasks only on the latter (the fingerprints).
    pub fn with_two_builds(mut self) -> Self {
        self.two_builds = true;
        self
    }

    /// TaskManagers booted from now on cut their data connections' request rounds and their
    /// answers' notices at [`TINY_MESSAGE_BYTES`] instead of 4 MiB: the simulation's jobs of a
    /// few kilobytes then take the paths a P = 10,000 job takes (requests and notices that
    /// wait for the next round or answer), among the faults.
    pub fn with_tiny_messages(mut self) -> Self {
        self.tiny_messages = true;
        self
    }

    /// The operators the TaskManager on `node` can run.
    fn registry_of(&self, node: &str) -> OperatorRegistry {
        if self.two_builds && fnv1a(node.as_bytes()) % 2 == 1 {
            OperatorRegistry::with_builtins()
        } else {
            super::program::registry()
        }
    }

    /// TaskManagers booted from now on follow the leader `coordination` publishes (each runs
    /// leader retrieval on its own node, as `flint taskmanager` with the HA keys does).
    pub fn with_leader_retrieval(mut self, coordination: SimCoordination) -> Self {
        self.retrieval = Some(coordination);
        self
    }

    /// Virtual time since the start.
    pub fn now(&self) -> Duration {
        self.start.elapsed()
    }

    /// The nodes' wall clock now (ms since the epoch), as their timestamps have it.
    pub fn now_ms(&self) -> u64 {
        self.clock.now_millis()
    }

    /// The JobManager node.
    ///
    /// # Panics
    ///
    /// Before [`boot_job_manager`](Self::boot_job_manager).
    pub fn job_manager(&self) -> Rc<JobManagerHandles> {
        Rc::clone(
            self.job_manager
                .borrow()
                .as_ref()
                .expect("the JobManager node is booted first"),
        )
    }

    /// A seed for one incarnation of one node: distinct per node and per restart.
    pub(crate) fn node_seed(&self, node: &str, incarnation: u32) -> u64 {
        self.seed
            ^ fnv1a(node.as_bytes())
            ^ u64::from(incarnation).wrapping_mul(0x9e37_79b9_7f4a_7c15)
    }

    pub(crate) fn endpoint_config(&self, name: &str, seed: u64) -> EndpointConfig {
        let mut config = EndpointConfig::new(
            SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)),
            self.config.cluster.id.clone(),
            name,
            Secret::from_bytes(b"simulated cluster secret".to_vec()),
            seed,
        );
        config.ask_timeout = crate::transport::ASK_TIMEOUT;
        config
    }

    pub(crate) fn env(
        &self,
        name: &str,
        seed: u64,
        resolver: Arc<dyn crate::rpc::directory::Resolver>,
    ) -> NodeEnv {
        let mut env = NodeEnv::new(
            name,
            seed,
            self.clock.clone(),
            // Sim nodes never place TaskManagers themselves: the driver boots nodes.
            Arc::new(CurrentArbiterSpawner),
            resolver,
            self.events.clone(),
        );
        // A disk of 0–3 ms per handed-over read (0: read at once, as before).
        env.task_runner = Arc::new(
            crate::sim::lockstep::LockstepTaskRunner::new(Duration::from_millis(1 + seed % 20))
                .with_io_latency(Duration::from_millis((seed / 20) % 4)),
        );
        env
    }

    /// Where the JobManager keeps the artifacts jobs ship (it survives the node's crashes,
    /// as `high-availability.storageDir` would).
    pub fn blob_dir(&self) -> PathBuf {
        self.scratch.join("blobs")
    }

    /// Boots the JobManager node (a JobManager and its resource manager with the simulation's
    /// driver) and starts serving the driver's requests.
    pub async fn boot_job_manager(&self) {
        let (driver, commands) = SimDriver::new();
        let (host, executor) = NodeHost::start();
        let (ready, booted) = oneshot::channel();
        let seed = self.node_seed(JOB_MANAGER_NODE, 0);
        let network = Arc::new(self.network.node(JOB_MANAGER_NODE));
        let config = self.endpoint_config("jobmanager", seed);
        let cluster = self.clone();
        host.spawn(async move {
            let (endpoint, resolver) = NodeEndpoint::bind_on(config, network, executor)
                .await
                .expect("the simulated network always binds");
            let env = cluster.env("jobmanager", seed, resolver);
            let node = start_job_manager_node(
                &cluster.config,
                super::program::registry(),
                env,
                Box::new(driver),
                crate::env::blob_store::BlobStore::open(&cluster.blob_dir(), u64::MAX).ok(),
            );
            let _ = ready.send(node);
            // The endpoint lives as long as the node.
            std::future::pending::<()>().await;
            drop(endpoint);
        });
        let node = booted.await.expect("the JobManager node boots");
        *self.job_manager.borrow_mut() = Some(Rc::new(JobManagerHandles {
            host,
            job_manager: node.job_manager,
            resource_manager: node.resource_manager,
            address: node.address,
        }));
        self.trace.record("boot jobmanager");
        tokio::task::spawn_local(self.clone().serve_driver(commands));
    }

    async fn serve_driver(self, mut commands: mpsc::UnboundedReceiver<DriverCommand>) {
        while let Some(command) = commands.recv().await {
            self.driver_command(command);
        }
    }

    /// Carries out one command of a resource manager's driver.
    pub(crate) fn driver_command(&self, command: DriverCommand) {
        match command {
            DriverCommand::Initialize { gateway, recover } => {
                if recover {
                    let resource_ids: Vec<ResourceId> = self
                        .worker_phases()
                        .into_iter()
                        .filter(|(_, phase)| *phase != WorkerPhase::Released)
                        .map(|(id, _)| id)
                        .collect();
                    self.trace
                        .record(format!("driver recovers {} workers", resource_ids.len()));
                    gateway
                        .workers_recovered
                        .do_send(WorkersRecovered { resource_ids });
                }
                self.state.borrow_mut().gateway = Some(gateway);
            }
            DriverCommand::Start(request) => self.request_worker(request),
            DriverCommand::Release(resource_id) => self.release_worker(&resource_id),
        }
    }

    /// Where the worker `resource_id` stands, if it was ever asked for.
    pub fn worker_phase(&self, resource_id: &ResourceId) -> Option<WorkerPhase> {
        self.state
            .borrow()
            .workers
            .get(resource_id)
            .map(|w| w.phase)
    }

    fn request_worker(&self, request: WorkerRequest) {
        let (delay, fails, node) = {
            let mut state = self.state.borrow_mut();
            let delay = Duration::from_millis(20 + state.rng.next_u64() % 500);
            let p = state.start_failures;
            let fails = p > 0.0 && (state.rng.next_u64() as f64 / u64::MAX as f64) < p;
            let node = format!("tm-{}:6121", state.next_node);
            state.next_node += 1;
            state.workers.insert(
                request.resource_id.clone(),
                Worker {
                    node: node.clone(),
                    phase: WorkerPhase::Starting,
                    host: None,
                    task_manager: None,
                    incarnation: 0,
                    running_since: Duration::ZERO,
                    request: request.clone(),
                },
            );
            (delay, fails, node)
        };
        self.trace.record(format!(
            "driver start {} on {node} in {delay:?}{}",
            request.resource_id,
            if fails { " (will fail)" } else { "" }
        ));
        let cluster = self.clone();
        tokio::task::spawn_local(async move {
            tokio::time::sleep(delay).await;
            cluster.finish_start(request.resource_id, fails).await;
        });
    }

    async fn finish_start(&self, resource_id: ResourceId, fails: bool) {
        let starting = self
            .state
            .borrow()
            .workers
            .get(&resource_id)
            .is_some_and(|w| w.phase == WorkerPhase::Starting);
        if !starting {
            return;
        }
        let gateway = self.state.borrow().gateway.clone();
        if fails {
            if let Some(worker) = self.state.borrow_mut().workers.get_mut(&resource_id) {
                worker.phase = WorkerPhase::Released;
            }
            self.trace
                .record(format!("driver start of {resource_id} failed"));
            if let Some(gateway) = gateway {
                gateway.worker_failed.do_send(WorkerFailed {
                    resource_id,
                    reason: "simulated start failure".to_owned(),
                });
            }
            return;
        }
        self.boot_task_manager(&resource_id).await;
        if let Some(gateway) = gateway {
            gateway
                .worker_started
                .do_send(WorkerStarted { resource_id });
        }
    }

    /// Boots (or reboots, as a new incarnation) the worker's TaskManager node.
    async fn boot_task_manager(&self, resource_id: &ResourceId) {
        let (node, incarnation, request) = {
            let mut state = self.state.borrow_mut();
            let Some(worker) = state.workers.get_mut(resource_id) else {
                return;
            };
            worker.incarnation += 1;
            (
                worker.node.clone(),
                worker.incarnation,
                worker.request.clone(),
            )
        };
        self.network.node_up(&node);
        let seed = self.node_seed(&node, incarnation);
        let (host, executor) = NodeHost::start();
        let (ready, booted) = oneshot::channel();
        let network = Arc::new(self.network.node(&node));
        let name = TaskManager::name_of(resource_id);
        let config = self.endpoint_config(&name, seed);
        let cluster = self.clone();
        let hostname = node.split(':').next().unwrap_or("tm").to_owned();
        let working_dir = self.scratch.join(format!("{hostname}-{incarnation}"));
        let id = resource_id.clone();
        let registry = self.registry_of(&node);
        let retrieval = self.retrieval.as_ref().map(SimCoordination::retrieval);
        // With leader retrieval the TaskManager starts knowing no leader, as `flint
        // taskmanager --config` with the HA keys does.
        let initial_leader = retrieval.is_none().then_some(Leader {
            address: request.job_manager,
            retrieved_session: request.leader_session_id,
        });
        host.spawn(async move {
            let (endpoint, resolver) = NodeEndpoint::bind_on(config, network, executor)
                .await
                .expect("the simulated network always binds");
            let env = cluster.env(&name, seed, resolver);
            let mut spec = task_manager_spec(&cluster.config, registry, &hostname, working_dir);
            if cluster.tiny_messages {
                spec.network.round_bytes = TINY_MESSAGE_BYTES;
                spec.network.notice_bytes = TINY_MESSAGE_BYTES;
            }
            let task_manager = start_task_manager_node(
                TaskManagerSettings {
                    resource_id: id,
                    job_manager: initial_leader,
                    spec,
                },
                env,
                None,
                None,
            );
            let _ = ready.send(task_manager.clone());
            match retrieval {
                Some(retrieval) => {
                    crate::ha::task_manager::follow_leader(retrieval, task_manager.recipient())
                        .await
                }
                None => std::future::pending::<()>().await,
            }
            drop(endpoint);
        });
        let Ok(task_manager) = booted.await else {
            return;
        };
        let now = self.now();
        if let Some(worker) = self.state.borrow_mut().workers.get_mut(resource_id) {
            worker.host = Some(host);
            worker.task_manager = Some(task_manager);
            worker.phase = WorkerPhase::Up;
            worker.running_since = now;
        }
        self.trace.record(format!(
            "boot {node} ({resource_id}) incarnation {incarnation}"
        ));
    }

    fn release_worker(&self, resource_id: &ResourceId) {
        let mut state = self.state.borrow_mut();
        let Some(worker) = state.workers.get_mut(resource_id) else {
            return;
        };
        let was = worker.phase;
        worker.phase = WorkerPhase::Released;
        worker.task_manager = None;
        let host = worker.host.take();
        let node = worker.node.clone();
        drop(state);
        if matches!(was, WorkerPhase::Up | WorkerPhase::Paused) {
            self.network.node_down(&node, CrashKind::Process);
        }
        if let Some(host) = host {
            host.crash();
        }
        self.trace.record(format!(
            "driver release {resource_id} ({node}, was {was:?})"
        ));
    }

    /// The driver now fails this share of starts.
    pub fn set_start_failures(&self, share: f64) {
        self.state.borrow_mut().start_failures = share;
    }

    /// Workers in `phases`, in id order.
    fn eligible(&self, phases: &[WorkerPhase]) -> Vec<ResourceId> {
        self.state
            .borrow()
            .workers
            .iter()
            .filter(|(_, w)| phases.contains(&w.phase))
            .map(|(id, _)| id.clone())
            .collect()
    }

    fn pick(&self, phases: &[WorkerPhase], index: u64) -> Option<ResourceId> {
        let eligible = self.eligible(phases);
        (!eligible.is_empty()).then(|| eligible[(index % eligible.len() as u64) as usize].clone())
    }

    /// Crashes a running TaskManager node.
    pub fn crash(&self, index: u64, kind: CrashKind) {
        let Some(id) = self.pick(&[WorkerPhase::Up, WorkerPhase::Paused], index) else {
            return;
        };
        self.crash_worker(id, kind, "fault crash");
    }

    /// TaskManagers that stopped on their own (a fatal error: a task that ignored its
    /// cancellation past `task.cancellation.timeout`) end as a `flint taskmanager` process
    /// does then: the process exits, the driver reports it, the resource manager replaces it.
    pub fn reap_stopped_task_managers(&self) {
        let stopped: Vec<ResourceId> = self
            .state
            .borrow()
            .workers
            .iter()
            .filter(|(_, w)| {
                w.phase == WorkerPhase::Up
                    && w.task_manager.as_ref().is_some_and(|tm| !tm.connected())
            })
            .map(|(id, _)| id.clone())
            .collect();
        for id in stopped {
            self.crash_worker(id, CrashKind::Process, "exit after a fatal error:");
        }
    }

    fn crash_worker(&self, id: ResourceId, kind: CrashKind, what: &str) {
        let (node, host) = {
            let mut state = self.state.borrow_mut();
            let Some(worker) = state.workers.get_mut(&id) else {
                return;
            };
            worker.phase = WorkerPhase::Crashed(kind);
            worker.task_manager = None;
            (worker.node.clone(), worker.host.take())
        };
        self.network.node_down(&node, kind);
        if let Some(host) = host {
            host.crash();
        }
        self.trace.record(format!("{what} {node} ({id}) {kind:?}"));
        if kind == CrashKind::Process {
            // The driver watches its workers' processes, as the process drivers do.
            let gateway = self.state.borrow().gateway.clone();
            if let Some(gateway) = gateway {
                gateway.worker_terminated.do_send(WorkerTerminated {
                    resource_id: id,
                    reason: "simulated process crash".to_owned(),
                });
            }
        }
    }

    /// Restarts a TaskManager node whose machine crashed, as a new incarnation.
    pub async fn restart(&self, index: u64) {
        // A machine that comes back starts its TaskManager again, with its old identity. A
        // process crash was reported to the driver, which (as the process drivers) does not
        // restart it: the resource manager replaces it instead.
        let crashed = [WorkerPhase::Crashed(CrashKind::Machine)];
        let Some(id) = self.pick(&crashed, index) else {
            return;
        };
        self.trace.record(format!("fault restart {id}"));
        self.boot_task_manager(&id).await;
    }

    /// Hangs the JobManager node, or a running TaskManager node, for `duration`.
    pub fn pause(&self, target: Option<u64>, duration: Duration) {
        let (host, label, id) = match target {
            None => {
                let handles = self.job_manager();
                (handles.host.clone(), JOB_MANAGER_NODE.to_owned(), None)
            }
            Some(index) => {
                let Some(id) = self.pick(&[WorkerPhase::Up], index) else {
                    return;
                };
                let mut state = self.state.borrow_mut();
                let Some(worker) = state.workers.get_mut(&id) else {
                    return;
                };
                let Some(host) = worker.host.clone() else {
                    return;
                };
                worker.phase = WorkerPhase::Paused;
                (host, worker.node.clone(), Some(id))
            }
        };
        if host.is_paused() {
            return;
        }
        host.pause();
        self.trace
            .record(format!("fault pause {label} for {duration:?}"));
        let cluster = self.clone();
        tokio::task::spawn_local(async move {
            tokio::time::sleep(duration).await;
            cluster.resume(&host, &label, id.as_ref());
        });
    }

    fn resume(&self, host: &NodeHost, label: &str, id: Option<&ResourceId>) {
        if !host.is_paused() || !host.is_up() {
            return;
        }
        host.resume();
        let now = self.now();
        if let Some(id) = id
            && let Some(worker) = self.state.borrow_mut().workers.get_mut(id)
            && worker.phase == WorkerPhase::Paused
        {
            worker.phase = WorkerPhase::Up;
            worker.running_since = now;
        }
        self.trace.record(format!("resume {label}"));
    }

    /// Cuts the links between the JobManager and a TaskManager for `duration`.
    pub fn partition(&self, index: u64, both: bool, towards_job_manager: bool, duration: Duration) {
        self.partition_from(JOB_MANAGER_NODE, index, both, towards_job_manager, duration);
    }

    /// Cuts the links between the JobManager node `jm` and a TaskManager for `duration`.
    pub fn partition_from(
        &self,
        jm: &str,
        index: u64,
        both: bool,
        towards_job_manager: bool,
        duration: Duration,
    ) {
        let Some(id) = self.pick(&[WorkerPhase::Up, WorkerPhase::Paused], index) else {
            return;
        };
        let Some(node) = self.state.borrow().workers.get(&id).map(|w| w.node.clone()) else {
            return;
        };
        let jm = jm.to_owned();
        let mut cuts = Vec::new();
        if both || towards_job_manager {
            cuts.push((node.clone(), jm.clone()));
        }
        if both || !towards_job_manager {
            cuts.push((jm, node.clone()));
        }
        for (from, to) in &cuts {
            self.network.cut(from, to, true);
            self.trace
                .record(format!("fault cut {from} -> {to} for {duration:?}"));
        }
        let cluster = self.clone();
        tokio::task::spawn_local(async move {
            tokio::time::sleep(duration).await;
            for (from, to) in &cuts {
                cluster.network.cut(from, to, false);
                cluster.trace.record(format!("heal {from} -> {to}"));
            }
        });
    }

    /// The quiet phase: heals every link, resumes every node, stops start failures. Crashed
    /// nodes stay down (the resource manager must replace them).
    pub fn quiet(&self) {
        self.network.heal_all();
        let mut params = self.network.params();
        params.loss = 0.0;
        params.reorder = 0.0;
        self.network.set_params(params);
        self.set_start_failures(0.0);
        let handles = self.job_manager.borrow().clone();
        if let Some(handles) = handles {
            self.resume(&handles.host, JOB_MANAGER_NODE, None);
        }
        let paused: Vec<(ResourceId, NodeHost, String)> = self
            .state
            .borrow()
            .workers
            .iter()
            .filter(|(_, w)| w.phase == WorkerPhase::Paused)
            .filter_map(|(id, w)| Some((id.clone(), w.host.clone()?, w.node.clone())))
            .collect();
        for (id, host, node) in paused {
            self.resume(&host, &node, Some(&id));
        }
        self.trace.record("quiet phase");
    }

    /// Running TaskManagers (not paused), with their handles and since when they run.
    pub fn running_task_managers(&self) -> Vec<(ResourceId, Addr<TaskManager>, Duration)> {
        self.state
            .borrow()
            .workers
            .iter()
            .filter(|(_, w)| w.phase == WorkerPhase::Up)
            .filter_map(|(id, w)| Some((id.clone(), w.task_manager.clone()?, w.running_since)))
            .collect()
    }

    /// Worker phases, for the report.
    pub fn worker_phases(&self) -> Vec<(ResourceId, WorkerPhase)> {
        self.state
            .borrow()
            .workers
            .iter()
            .map(|(id, w)| (id.clone(), w.phase))
            .collect()
    }

    /// Nodes booted so far (the JobManager and every TaskManager incarnation).
    pub fn nodes_booted(&self) -> u32 {
        1 + self
            .state
            .borrow()
            .workers
            .values()
            .map(|w| w.incarnation)
            .sum::<u32>()
    }

    /// Drops every node (the end of the run).
    pub fn tear_down(&self) {
        let hosts: Vec<NodeHost> = self
            .state
            .borrow_mut()
            .workers
            .values_mut()
            .filter_map(|w| w.host.take())
            .collect();
        for host in hosts {
            host.crash();
        }
        if let Some(handles) = self.job_manager.borrow_mut().take() {
            handles.host.crash();
        }
    }
}
