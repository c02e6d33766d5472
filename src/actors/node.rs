//! Starting the actors of a node: the JobManager process (a JobManager and its resource
//! manager) and TaskManagers, from one validated [`ClusterConfig`]. Shared by the embedded
//! [`MiniCluster`](crate::MiniCluster) and the `flint jobmanager` / `flint taskmanager` processes, so
//! both wire the actors the same way.

use std::path::PathBuf;
use std::sync::Arc;

use actix::{Actor, Addr, ArbiterHandle};
use tokio::sync::oneshot;

use crate::actors::job_manager::{JobManager, JobManagerSettings};
use crate::actors::resource_manager::driver::WorkerDriver;
use crate::actors::resource_manager::{FlinkResourceManager, ResourceManagerSettings};
use crate::actors::task_manager::{TaskManager, TaskManagerSettings, TaskManagerSpec};
use crate::base::ids::LeaderSessionId;
use crate::config::ClusterConfig;
use crate::env::NodeEnv;
use crate::ha::{JobStores, LeadershipLease};
use crate::messages::{ActorAddress, HardwareDescription, NewLeaderAvailable};
use crate::operators::OperatorRegistry;
use crate::transport::ASK_TIMEOUT;

/// The actors of a JobManager process.
pub struct JobManagerNode {
    /// The JobManager.
    pub job_manager: Addr<JobManager>,
    /// Its resource manager.
    pub resource_manager: Addr<FlinkResourceManager>,
    /// The JobManager's address.
    pub address: ActorAddress,
    /// The session it leads.
    pub leader_session_id: LeaderSessionId,
}

/// Starts a JobManager leading a fresh session and a resource manager with `driver`, and tells
/// the resource manager where its leader is (leader retrieval: one JobManager for the cluster's
/// life), serving the artifacts of `blobs` if given. Must run inside an actix System; the actors
/// run on the caller's arbiter.
pub fn start_job_manager_node(
    config: &ClusterConfig,
    registry: OperatorRegistry,
    env: NodeEnv,
    driver: Box<dyn WorkerDriver>,
    blobs: Option<crate::env::blob_store::BlobStore>,
) -> JobManagerNode {
    let leader_session_id = LeaderSessionId::generate(&mut env.rng("leader-election"));
    start_job_manager_node_leading(
        config,
        registry,
        env,
        driver,
        leader_session_id,
        LeadershipLease::unbounded(),
        JobStores {
            blobs,
            ..JobStores::in_memory()
        },
    )
}

/// [`start_job_manager_node`] leading the session an election granted (high availability: each
/// leadership of the process gets a fresh one), acting only while `lease` is held, persisting
/// job graphs and keeping results in `stores`.
pub fn start_job_manager_node_leading(
    config: &ClusterConfig,
    registry: OperatorRegistry,
    env: NodeEnv,
    driver: Box<dyn WorkerDriver>,
    leader_session_id: LeaderSessionId,
    lease: LeadershipLease,
    stores: JobStores,
) -> JobManagerNode {
    let job_manager = JobManager::new(
        JobManagerSettings {
            cluster_id: config.cluster.id.clone(),
            heartbeat: config.heartbeat,
            ask_timeout: ASK_TIMEOUT,
            slot_request_timeout: config.slot.request.timeout,
            slots_per_task_manager: config.taskmanager.slots,
            taskmanager_timeout: config.resourcemanager.taskmanager_timeout,
            registry,
            jobstore: config.jobstore,
            batch_job_recovery: config.batch_job_recovery,
            scheduler: config.jobmanager.scheduler,
            max_subtasks: config.jobmanager.max_subtasks,
            max_jobs: config.jobmanager.max_jobs,
            max_workers_per_job: config.resourcemanager.max_workers_per_job,
        },
        leader_session_id,
        env.clone(),
    )
    .with_leadership_lease(lease.clone())
    .with_job_stores(stores.job_graphs, stores.job_results)
    .with_blob_store(stores.blobs);
    let address = job_manager.address().clone();
    let job_manager = job_manager.start();
    let resource_manager = FlinkResourceManager::new(
        ResourceManagerSettings {
            pool: config.resourcemanager.clone(),
            heartbeat: config.heartbeat,
            ask_timeout: ASK_TIMEOUT,
        },
        driver,
        env,
    )
    .with_leadership_lease(lease)
    .start();
    resource_manager.do_send(NewLeaderAvailable {
        address: address.clone(),
        leader_session_id,
    });
    JobManagerNode {
        job_manager,
        resource_manager,
        address,
        leader_session_id,
    }
}

/// Starts one TaskManager — the one way every kind of node does it (the `flint taskmanager`
/// process, the in-process driver, the simulation): on `arbiter` if given (its own thread),
/// else on the caller's; `fatal` hears why, if it stops on its own (a refused registration).
/// Must run inside an actix System. Leader retrieval, if any, is the caller's: it feeds
/// `NewLeaderAvailable` to the returned address.
pub fn start_task_manager_node(
    settings: TaskManagerSettings,
    env: NodeEnv,
    arbiter: Option<&ArbiterHandle>,
    fatal: Option<oneshot::Sender<String>>,
) -> Addr<TaskManager> {
    let build = move || {
        let task_manager = TaskManager::new(settings, env);
        match fatal {
            Some(fatal) => task_manager.on_fatal_error(fatal),
            None => task_manager,
        }
    };
    match arbiter {
        Some(arbiter) => TaskManager::start_in_arbiter(arbiter, move |_| build()),
        None => build().start(),
    }
}

/// What every TaskManager of the cluster is started with; its spill files go under
/// `working_dir` (a [`WorkingDir`](crate::env::working_dir::WorkingDir) of the caller's).
pub fn task_manager_spec(
    config: &ClusterConfig,
    registry: OperatorRegistry,
    hostname: &str,
    working_dir: PathBuf,
) -> TaskManagerSpec {
    TaskManagerSpec {
        cluster_id: config.cluster.id.clone(),
        slots: config.taskmanager.slots,
        hostname: hostname.to_owned(),
        hardware: this_machine(),
        registration: config.cluster.registration,
        heartbeat: config.heartbeat,
        registry,
        working_dir,
        spill_threshold_bytes: usize::try_from(config.taskmanager.spill_threshold)
            .unwrap_or(usize::MAX),
        spill_budget_bytes: config.taskmanager.spill_budget,
        managed_memory: config.taskmanager.managed_memory,
        network: config.taskmanager.network(),
        cancellation: config.task.cancellation,
        blob_cache_linger: config.blob.cache_linger,
    }
}

/// Where a process makes its [`WorkingDir`](crate::env::working_dir::WorkingDir):
/// `taskmanager.working-dir` if set, else the system's temporary directory.
pub fn working_dir_parent(config: &ClusterConfig) -> PathBuf {
    config
        .taskmanager
        .working_dir
        .clone()
        .unwrap_or_else(std::env::temp_dir)
}

/// The task runner of a process running TaskManagers: task threads under
/// `taskmanager.compute-threads` [compute permits](crate::env::compute_permits), shared by every
/// TaskManager of the process.
pub fn task_runner(config: &ClusterConfig) -> Arc<dyn crate::env::TaskRunner> {
    Arc::new(crate::env::ThreadTaskRunner::new(
        config.taskmanager.compute_threads as usize,
    ))
}

/// What this machine offers, for TaskManagers' registrations.
pub fn this_machine() -> HardwareDescription {
    let cpu_cores = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
    let physical_memory_bytes = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| {
            let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
            let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(kib * 1024)
        })
        .unwrap_or(0);
    HardwareDescription {
        cpu_cores,
        physical_memory_bytes,
    }
}
