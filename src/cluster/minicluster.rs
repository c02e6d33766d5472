//! The embedded cluster: a JobManager, a resource manager and in-process TaskManagers, started
//! from one [`ClusterConfig`] inside the caller's actix System.
//!
//! The JobManager and the resource manager run on the caller's arbiter; each TaskManager runs
//! where the [`Spawner`] places it (its own thread in production). Everything the cluster knows is
//! read through [`MiniCluster::status`], which asks the actors (never a cached copy).

use std::sync::Arc;
use std::time::Duration;

use actix::{Addr, MailboxError};
use tokio::sync::broadcast;

use crate::actors::Shutdown;
use crate::actors::job_manager::JobManager;
use crate::actors::node::{start_job_manager_node, task_manager_spec};
use crate::actors::resource_manager::FlinkResourceManager;
use crate::base::clock::SystemClock;
use crate::base::ids::{JobId, LeaderSessionId, ResourceId};
use crate::base::rng::NodeRng;
use crate::config::{ClusterConfig, ConfigError};
use crate::drivers::in_process::{InProcessDriver, InProcessWorkers};
use crate::env::events::{ClusterEvent, EventSink};
use crate::env::{ArbiterSpawner, NodeEnv, Spawner};
use crate::job::graph::JobGraph;
use crate::job::states::JobStatus;
use crate::messages::job_manager::{
    CancelJob, GetJobManagerStatus, JobDetails, JobError, JobManagerGateway, JobResults,
    JobSummary, ListJobs, RequestJobResults, RequestJobStatus, SubmitJob, TaskManagerInfo,
};
use crate::messages::resource_manager::{
    GetResourceManagerStatus, ResourceManagerGateway, SetPoolSizeError, SetWorkerPoolSize,
    StopCluster,
};
use crate::operators::OperatorRegistry;
use crate::rpc::directory::LocalDirectory;

/// How many events a subscriber may fall behind before it misses some.
const EVENT_BUFFER: usize = 65_536;

/// What went wrong with the embedded cluster.
#[derive(Debug, thiserror::Error)]
pub enum MiniClusterError {
    /// The configuration is unusable; nothing was started.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The private working directory (spill files) could not be created.
    #[error(transparent)]
    WorkingDir(#[from] crate::env::working_dir::WorkingDirError),
    /// The artifact store could not be opened, or an artifact stored.
    #[error(transparent)]
    Blob(#[from] crate::env::blob_store::BlobError),
    /// `start` was called outside a running actix System.
    #[error("the mini-cluster must be started inside a running actix System (e.g. #[actix::main])")]
    NoSystem,
    /// The thread of an embedded cluster could not be started.
    #[error("cannot start the embedded cluster's thread")]
    Thread(#[source] std::io::Error),
    /// An actor did not answer (it stopped, or the ask timed out). Retryable if it timed out.
    #[error("the {actor} did not answer")]
    Unreachable {
        /// Which actor.
        actor: &'static str,
        /// Why.
        #[source]
        source: MailboxError,
    },
    /// The pool size was not accepted.
    #[error(transparent)]
    PoolSize(#[from] SetPoolSizeError),
    /// No in-process worker has this id.
    #[error("no running worker is called {0}")]
    UnknownWorker(ResourceId),
    /// The JobManager refused a job request.
    #[error(transparent)]
    Job(#[from] JobError),
    /// A job did not end in time.
    #[error("job {job_id} is still {status} after {waited:?}")]
    JobNotDone {
        /// The job.
        job_id: JobId,
        /// How long.
        waited: Duration,
        /// Its status then.
        status: JobStatus,
    },
    /// A waited-for condition did not hold in time.
    #[error("the cluster did not reach the awaited state within {waited:?}; last status: {last}")]
    ConditionNotReached {
        /// How long.
        waited: Duration,
        /// What the cluster looked like at the deadline.
        last: Box<ClusterStatus>,
    },
    /// The pool did not reach the wanted size in time.
    #[error(
        "the pool did not reach {wanted} registered TaskManagers within {waited:?}; last status: {last}"
    )]
    PoolNotReached {
        /// The size waited for.
        wanted: u32,
        /// How long.
        waited: Duration,
        /// What the cluster looked like at the deadline.
        last: Box<ClusterStatus>,
    },
}

/// A snapshot of the whole embedded cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterStatus {
    /// The size the operator set.
    pub designated_pool_size: u32,
    /// The TaskManagers the jobs declared they need.
    pub demand: u32,
    /// The size the resource manager keeps the pool at: `max(designated, demand)` within the
    /// maximum.
    pub target_pool_size: u32,
    /// Workers the resource manager counts as started (registered).
    pub started_workers: u32,
    /// Workers asked of the driver, not started yet.
    pub pending_requests: u32,
    /// Workers started, not registered yet.
    pub pending_registration: u32,
    /// Worker start failures since start.
    pub start_failures: u64,
    /// TaskManagers registered at the JobManager.
    pub task_managers: Vec<TaskManagerInfo>,
    /// Slots over all registered TaskManagers.
    pub total_slots: u64,
    /// Free slots over all registered TaskManagers.
    pub free_slots: u64,
    /// TaskManagers lost to heartbeat timeouts since start.
    pub heartbeat_timeouts: u64,
}

impl ClusterStatus {
    /// Registered TaskManagers.
    pub fn registered_task_managers(&self) -> u32 {
        self.task_managers.len() as u32
    }

    /// Whether the pool holds exactly `size` registered workers with nothing pending.
    pub fn is_pool_at(&self, size: u32) -> bool {
        self.target_pool_size == size
            && self.started_workers == size
            && self.registered_task_managers() == size
            && self.pending_requests == 0
            && self.pending_registration == 0
    }
}

impl std::fmt::Display for ClusterStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "target {} (designated {}, demand {}), started {}, pending requests {}, pending registration {}, registered TaskManagers {}, slots {}/{} free, start failures {}",
            self.target_pool_size,
            self.designated_pool_size,
            self.demand,
            self.started_workers,
            self.pending_requests,
            self.pending_registration,
            self.registered_task_managers(),
            self.free_slots,
            self.total_slots,
            self.start_failures
        )
    }
}

/// The embedded cluster. See the module docs.
pub struct MiniCluster {
    job_manager: Addr<JobManager>,
    resource_manager: Addr<FlinkResourceManager>,
    workers: InProcessWorkers,
    events: EventSink,
    leader_session_id: LeaderSessionId,
    /// The TaskManagers' spill directory (0700), removed when the cluster is dropped.
    working_dir: crate::env::working_dir::WorkingDir,
    /// The JobManager's artifact store, in the working directory.
    blobs: crate::env::blob_store::BlobStore,
}

impl MiniCluster {
    /// Validates `config` and starts the cluster with the built-in operators; TaskManagers each
    /// get their own thread. The pool fills in the background: see
    /// [`wait_for_pool`](Self::wait_for_pool).
    pub fn start(config: ClusterConfig) -> Result<Self, MiniClusterError> {
        Self::start_with(
            config,
            OperatorRegistry::with_builtins(),
            Arc::new(ArbiterSpawner),
        )
    }

    /// Like [`start`](Self::start), with the operators of `registry` (register your own there)
    /// and TaskManagers placed by `spawner` (tests keep them on the current arbiter).
    pub fn start_with(
        config: ClusterConfig,
        registry: OperatorRegistry,
        spawner: Arc<dyn Spawner>,
    ) -> Result<Self, MiniClusterError> {
        config.validate()?;
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(MiniClusterError::NoSystem);
        }
        let seed = config
            .seed
            .unwrap_or_else(|| NodeRng::from_entropy().next_u64());
        let working_dir = crate::env::working_dir::WorkingDir::create(
            &crate::actors::node::working_dir_parent(&config),
            "mini",
        )?;
        let events = EventSink::new(EVENT_BUFFER);
        let env = NodeEnv::new(
            "jobmanager",
            seed,
            Arc::new(SystemClock),
            spawner,
            Arc::new(LocalDirectory::new()),
            events.clone(),
        )
        .with_task_runner(crate::actors::node::task_runner(&config));
        let driver = InProcessDriver::new(
            task_manager_spec(
                &config,
                registry.clone(),
                "localhost",
                working_dir.path().to_owned(),
            ),
            env.clone(),
        );
        let workers = driver.workers();
        let blobs = crate::env::blob_store::BlobStore::open(
            &working_dir.path().join("blobs"),
            config.blob.max_size,
        )?;
        let node = start_job_manager_node(
            &config,
            registry,
            env,
            Box::new(driver),
            Some(blobs.clone()),
        );
        let (job_manager, resource_manager, leader_session_id) = (
            node.job_manager,
            node.resource_manager,
            node.leader_session_id,
        );
        log::info!(
            "mini-cluster started: pool size {}, {} slots per TaskManager, seed {seed}",
            config.resourcemanager.pool_size,
            config.taskmanager.slots
        );
        Ok(Self {
            job_manager,
            resource_manager,
            workers,
            events,
            leader_session_id,
            working_dir,
            blobs,
        })
    }

    /// Stores the file at `path` as an artifact jobs can ship ([`JobGraphBuilder::artifact`](
    /// crate::job::graph::JobGraphBuilder::artifact)), as `POST /artifacts` does for a process
    /// cluster; `executable` makes the TaskManagers' copies executable (a program a `process`
    /// vertex runs).
    pub fn upload_artifact(
        &self,
        path: &std::path::Path,
        executable: bool,
    ) -> Result<crate::job::artifact::JobArtifact, MiniClusterError> {
        let name = (path.file_name().and_then(|name| name.to_str()))
            .unwrap_or_default()
            .to_owned();
        let file =
            std::fs::File::open(path).map_err(|source| crate::env::blob_store::BlobError::Io {
                operation: "open",
                path: path.to_owned(),
                source,
            })?;
        let info = self.blobs.put(file, None)?;
        Ok(crate::job::artifact::JobArtifact {
            name,
            digest: info.digest,
            size: info.size,
            executable,
        })
    }

    /// The TaskManagers' private working directory (their spill files), removed when the
    /// cluster is dropped.
    pub fn working_dir(&self) -> &std::path::Path {
        self.working_dir.path()
    }

    /// The JobManager's leader session.
    pub fn leader_session_id(&self) -> LeaderSessionId {
        self.leader_session_id
    }

    /// The JobManager's gateway: for a REST server
    /// ([`RestState`](crate::rest::RestState)) or any other client in this process.
    pub fn job_manager(&self) -> JobManagerGateway {
        JobManagerGateway::of(&self.job_manager)
    }

    /// The resource manager's gateway, as [`job_manager`](Self::job_manager).
    pub fn resource_manager(&self) -> ResourceManagerGateway {
        ResourceManagerGateway::of(&self.resource_manager)
    }

    /// The cluster's event sink (a REST server's long polls wake on it).
    pub fn events(&self) -> EventSink {
        self.events.clone()
    }

    /// Every cluster event from now on (a timeline for people, something to wait on for tests).
    pub fn subscribe(&self) -> broadcast::Receiver<ClusterEvent> {
        self.events
            .subscribe()
            .expect("the mini-cluster always has an event channel")
    }

    /// The JobManager's own status (its mailbox figures and slot queue included).
    pub async fn job_manager_status(
        &self,
    ) -> Result<crate::messages::job_manager::JobManagerStatus, MiniClusterError> {
        self.job_manager
            .send(GetJobManagerStatus)
            .await
            .map_err(|source| MiniClusterError::Unreachable {
                actor: "JobManager",
                source,
            })
    }

    /// A fresh snapshot, asked of the resource manager and the JobManager.
    pub async fn status(&self) -> Result<ClusterStatus, MiniClusterError> {
        let rm = self
            .resource_manager
            .send(GetResourceManagerStatus)
            .await
            .map_err(|source| MiniClusterError::Unreachable {
                actor: "resource manager",
                source,
            })?;
        let jm = self
            .job_manager
            .send(GetJobManagerStatus)
            .await
            .map_err(|source| MiniClusterError::Unreachable {
                actor: "JobManager",
                source,
            })?;
        Ok(ClusterStatus {
            designated_pool_size: rm.designated_pool_size,
            demand: rm.demand,
            target_pool_size: rm.target_pool_size,
            started_workers: rm.started.len() as u32,
            pending_requests: rm.pending_requests,
            pending_registration: rm.pending_registration,
            start_failures: rm.start_failures,
            total_slots: jm.total_slots(),
            free_slots: jm.free_slots(),
            heartbeat_timeouts: jm.heartbeat_timeouts,
            task_managers: jm.task_managers,
        })
    }

    /// Waits until the pool holds exactly `size` registered workers with nothing pending.
    pub async fn wait_for_pool(
        &self,
        size: u32,
        deadline: Duration,
    ) -> Result<ClusterStatus, MiniClusterError> {
        self.wait_until(|status| status.is_pool_at(size), deadline)
            .await
            .map_err(|error| match error {
                MiniClusterError::ConditionNotReached { waited, last } => {
                    MiniClusterError::PoolNotReached {
                        wanted: size,
                        waited,
                        last,
                    }
                }
                other => other,
            })
    }

    /// Waits until `condition` holds for a fresh status, checking every few milliseconds until
    /// `deadline` has passed.
    pub async fn wait_until(
        &self,
        mut condition: impl FnMut(&ClusterStatus) -> bool,
        deadline: Duration,
    ) -> Result<ClusterStatus, MiniClusterError> {
        let give_up = tokio::time::Instant::now() + deadline;
        loop {
            let status = self.status().await?;
            if condition(&status) {
                return Ok(status);
            }
            if tokio::time::Instant::now() >= give_up {
                return Err(MiniClusterError::ConditionNotReached {
                    waited: deadline,
                    last: Box::new(status),
                });
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// Sets the designated pool size (`SetWorkerPoolSize`).
    pub async fn set_pool_size(&self, size: u32) -> Result<(), MiniClusterError> {
        self.resource_manager
            .send(SetWorkerPoolSize { size })
            .await
            .map_err(|source| MiniClusterError::Unreachable {
                actor: "resource manager",
                source,
            })??;
        Ok(())
    }

    /// Submits a job; it runs in the background.
    pub async fn submit_job(&self, job_graph: JobGraph) -> Result<JobId, MiniClusterError> {
        Ok(self
            .job_manager
            .send(SubmitJob::prepared(job_graph))
            .await
            .map_err(|source| MiniClusterError::Unreachable {
                actor: "JobManager",
                source,
            })??)
    }

    /// A job's current details.
    pub async fn job_status(&self, job_id: JobId) -> Result<JobDetails, MiniClusterError> {
        Ok(self
            .job_manager
            .send(RequestJobStatus { job_id })
            .await
            .map_err(|source| MiniClusterError::Unreachable {
                actor: "JobManager",
                source,
            })??)
    }

    /// What a job's tasks sent back (its `collect()` sinks' records).
    pub async fn job_results(&self, job_id: JobId) -> Result<JobResults, MiniClusterError> {
        Ok(self
            .job_manager
            .send(RequestJobResults { job_id })
            .await
            .map_err(|source| MiniClusterError::Unreachable {
                actor: "JobManager",
                source,
            })??)
    }

    /// Every job, oldest first.
    pub async fn list_jobs(&self) -> Result<Vec<JobSummary>, MiniClusterError> {
        self.job_manager
            .send(ListJobs)
            .await
            .map_err(|source| MiniClusterError::Unreachable {
                actor: "JobManager",
                source,
            })
    }

    /// Cancels a job (every task is cancelled, every slot freed).
    pub async fn cancel_job(&self, job_id: JobId) -> Result<JobStatus, MiniClusterError> {
        Ok(self
            .job_manager
            .send(CancelJob { job_id })
            .await
            .map_err(|source| MiniClusterError::Unreachable {
                actor: "JobManager",
                source,
            })??)
    }

    /// Waits until a job is FINISHED, FAILED or CANCELED (checking every few ms until
    /// `deadline`), and returns its details. It checks the job's summary, which costs the
    /// JobManager O(1) per job, and builds the details (every subtask's) once, at the end: at
    /// P = 1,000 details polled every few ms took the JobManager's thread from the deployment
    /// it waits for.
    pub async fn wait_for_job(
        &self,
        job_id: JobId,
        deadline: Duration,
    ) -> Result<JobDetails, MiniClusterError> {
        let give_up = tokio::time::Instant::now() + deadline;
        loop {
            let summary = self
                .list_jobs()
                .await?
                .into_iter()
                .find(|j| j.job_id == job_id);
            let Some(summary) = summary else {
                // Unknown: the details call says so.
                return self.job_status(job_id).await;
            };
            if summary.status.is_globally_terminal() {
                return self.job_status(job_id).await;
            }
            if tokio::time::Instant::now() >= give_up {
                return Err(MiniClusterError::JobNotDone {
                    job_id,
                    waited: deadline,
                    status: summary.status,
                });
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// The in-process workers running now.
    pub fn running_workers(&self) -> Vec<ResourceId> {
        self.workers.running()
    }

    /// Crashes a worker: its TaskManager vanishes without a word, as if its machine died. The
    /// JobManager notices by heartbeat timeout and the resource manager replaces it.
    pub fn kill_worker(&self, resource_id: &ResourceId) -> Result<(), MiniClusterError> {
        if self.workers.crash(resource_id) {
            log::info!("mini-cluster: crashed worker {resource_id}");
            Ok(())
        } else {
            Err(MiniClusterError::UnknownWorker(resource_id.clone()))
        }
    }

    /// Stops the cluster: every worker is released and its thread joined, then the resource
    /// manager and the JobManager stop.
    pub async fn shutdown(self) -> Result<(), MiniClusterError> {
        self.resource_manager
            .send(StopCluster)
            .await
            .map_err(|source| MiniClusterError::Unreachable {
                actor: "resource manager",
                source,
            })?;
        self.job_manager
            .send(Shutdown)
            .await
            .map_err(|source| MiniClusterError::Unreachable {
                actor: "JobManager",
                source,
            })?;
        log::info!("mini-cluster stopped");
        Ok(())
    }
}
