//! Messages the FlinkResourceManager receives, and its answers.
//!
//! Flow: the RM registers at the JobManager leader (`TriggerRegistrationAtJobManager` →
//! `RegisterResourceManager` → `RegisterResourceManagerSuccessful`), keeps the pool at
//! `designated_pool_size` by asking its driver for workers (`CheckAndAllocateContainers`), hears
//! from the driver (`WorkerStarted` / `WorkerFailed` / `WorkerTerminated`) and from the JobManager
//! (`NotifyResourceStarted` when a TaskManager registers, `ReleaseResource` when one is lost).

use std::collections::BTreeMap;

use actix::Message;
use serde::{Deserialize, Serialize};

use super::common::{Acknowledge, ActorAddress, NewLeaderAvailable, RemovalReason};
use super::protocol;
use crate::base::ids::{LeaderSessionId, ResourceId};

protocol! {
    /// Every message the resource manager accepts: the payload of an envelope addressed to it.
    wire ResourceManagerMessage;
    /// Typed handles to a resource manager, local or remote.
    gateway ResourceManagerGateway {
        /// Check the pool now.
        check_and_allocate_containers: CheckAndAllocateContainers,
        /// Change the designated pool size.
        set_worker_pool_size: SetWorkerPoolSize,
        /// The workers the JobManager's jobs need.
        declare_resource_requirements: DeclareResourceRequirements,
        /// Release a worker the JobManager no longer has.
        release_resource: ReleaseResource,
        /// A TaskManager registered at the JobManager.
        notify_resource_started: NotifyResourceStarted,
        /// A new JobManager leader.
        new_leader_available: NewLeaderAvailable,
        /// Try to register at the JobManager.
        trigger_registration_at_job_manager: TriggerRegistrationAtJobManager,
        /// The JobManager accepted the registration.
        register_resource_manager_successful: RegisterResourceManagerSuccessful,
        /// The driver started a worker.
        worker_started: WorkerStarted,
        /// The driver failed to start a worker.
        worker_failed: WorkerFailed,
        /// A worker ended.
        worker_terminated: WorkerTerminated,
        /// The driver found workers a previous leader started.
        workers_recovered: WorkersRecovered,
        /// Release every worker and stop.
        stop_cluster: StopCluster,
        /// Report the pool's state.
        get_status: GetResourceManagerStatus,
    }
}

/// Compare the pool with its designated size and ask the driver for what is missing
/// (`check_workers_pool`). Sent by the RM's own timer; anyone may send it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Message)]
#[rtype(result = "()")]
pub struct CheckAndAllocateContainers;

/// The operator sets `designated_pool_size` (REST, CLI, dashboard), then the pool is checked.
/// The pool is kept at `max(designated, demand)` within `resourcemanager.max-pool-size`, so a
/// resize never undoes the jobs' demand and their demand never undoes a resize. Shrinking never
/// kills a busy worker: the JobManager picks which workers may go (pending ones first).
/// Only the operator sends it: the JobManager declares demand with the fenced
/// [`DeclareResourceRequirements`] instead.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Message)]
#[rtype(result = "Result<Acknowledge, SetPoolSizeError>")]
pub struct SetWorkerPoolSize {
    /// The new designated size.
    pub size: u32,
}

/// The JobManager's jobs need `workers` TaskManagers at once (the slots their running and
/// waiting tasks take, in whole TaskManagers): FLIP-138's resource declaration. The resource
/// manager keeps the pool at `max(designated, demand)`; a lower declaration lets idle workers
/// go again. Declared again on every change and in every heartbeat answer, so a lost one costs
/// an interval. Only the current leader may send it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Message)]
#[rtype(result = "()")]
pub struct DeclareResourceRequirements {
    /// The sender's leader session (fencing).
    pub leader_session_id: LeaderSessionId,
    /// Workers needed.
    pub workers: u32,
}

/// Why a pool size was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum SetPoolSizeError {
    /// Over `resourcemanager.max-pool-size`. Not retryable with the same size.
    #[error("pool size {requested} is over resourcemanager.max-pool-size ({max})")]
    AboveMaximum {
        /// What was asked for.
        requested: u32,
        /// The configured maximum.
        max: u32,
    },
    /// The cluster is stopping.
    #[error("the cluster is stopping")]
    Stopping,
}

/// The JobManager no longer has this worker (heartbeat timeout, idle release): release it through
/// the driver; it stops counting as started. Only the current leader may send it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Message)]
#[rtype(result = "()")]
pub struct ReleaseResource {
    /// The sender's leader session (fencing).
    pub leader_session_id: LeaderSessionId,
    /// The worker.
    pub resource_id: ResourceId,
    /// Why the JobManager let it go.
    pub reason: RemovalReason,
}

/// A TaskManager registered at the JobManager. If the RM's driver started it, it moves from
/// pending registration to started. The answer is always `Acknowledge` (a receipt): duplicates
/// and unknown workers are harmless. Only the current leader may send it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Message)]
#[rtype(result = "Acknowledge")]
pub struct NotifyResourceStarted {
    /// The sender's leader session (fencing).
    pub leader_session_id: LeaderSessionId,
    /// The worker that registered.
    pub resource_id: ResourceId,
}

/// Send `RegisterResourceManager` to the known leader unless already registered; retried by the
/// RM's own timer with exponential backoff until the JobManager answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Message)]
#[rtype(result = "()")]
pub struct TriggerRegistrationAtJobManager;

/// The JobManager accepted the RM. `registered` lists the TaskManagers it already has; the RM
/// counts them as started instead of starting workers for them again (reconciliation after a
/// JobManager change). Only the current leader may send it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Message)]
#[rtype(result = "()")]
pub struct RegisterResourceManagerSuccessful {
    /// The JobManager's leader session (fencing).
    pub leader_session_id: LeaderSessionId,
    /// The JobManager that accepted.
    pub job_manager: ActorAddress,
    /// Workers registered at the JobManager right now.
    pub registered: Vec<ResourceId>,
    /// The workers its jobs need (see [`DeclareResourceRequirements`]).
    pub required_workers: u32,
}

/// The driver has the worker running; it now waits for it to register (pending registration).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Message)]
#[rtype(result = "()")]
pub struct WorkerStarted {
    /// The worker.
    pub resource_id: ResourceId,
}

/// The driver could not start the worker. The RM backs off before it asks again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Message)]
#[rtype(result = "()")]
pub struct WorkerFailed {
    /// The worker that did not start.
    pub resource_id: ResourceId,
    /// What the driver saw (an exit status, a spawn error).
    pub reason: String,
}

/// A worker ended (the driver saw its process exit). A started worker is reported to the
/// JobManager as `ResourceRemoved` and replaced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Message)]
#[rtype(result = "()")]
pub struct WorkerTerminated {
    /// The worker.
    pub resource_id: ResourceId,
    /// What the driver saw.
    pub reason: String,
}

/// The driver found running workers of this cluster that a previous leader started (Flink's
/// `onPreviousAttemptWorkersRecovered`): they count as pending registration and must register
/// within the registration timeout, or they are released.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Message)]
#[rtype(result = "()")]
pub struct WorkersRecovered {
    /// The recovered workers.
    pub resource_ids: Vec<ResourceId>,
}

/// Release every worker and stop the RM. Answered once every worker has been released.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Message)]
#[rtype(result = "Acknowledge")]
pub struct StopCluster;

/// Report the pool's state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Message)]
#[rtype(result = "ResourceManagerStatus")]
pub struct GetResourceManagerStatus;

/// A snapshot of the resource manager.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceManagerStatus {
    /// The size the operator set.
    pub designated_pool_size: u32,
    /// The workers the JobManager's jobs declared they need.
    pub demand: u32,
    /// The size the pool is kept at: `max(designated, demand)` within the maximum.
    pub target_pool_size: u32,
    /// Workers registered at the JobManager.
    pub started: Vec<ResourceId>,
    /// Workers asked of the driver and not started yet.
    pub pending_requests: u32,
    /// Workers started by the driver that have not registered yet.
    pub pending_registration: u32,
    /// Pending workers beyond the target, waiting for the JobManager to let them go (not
    /// counted in the pool).
    pub releasing: u32,
    /// Every start failure since the RM started.
    pub start_failures: u64,
    /// Start failures since the last successful start (drives the backoff).
    pub consecutive_start_failures: u32,
    /// Whether the RM is registered at a JobManager leader.
    pub connected_to_job_manager: bool,
    /// The driver's name (`in_process`, `standalone`, ...).
    pub driver: String,
    /// What the driver knows of each of its workers (`slurm job 42: PENDING (Resources)`).
    pub driver_workers: BTreeMap<ResourceId, String>,
}
