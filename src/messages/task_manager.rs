//! Messages a TaskManager receives, and its answers.
//!
//! A TaskManager learns of the JobManager leader (`NewLeaderAvailable`), registers there on its
//! own initiative, and is told by the JobManager when that registration ended (`Disconnect`).

use std::fmt;

use actix::Message;
use serde::{Deserialize, Serialize};

use super::common::{NewLeaderAvailable, RemovalReason, ResultPartitionId};
use super::deployment::TaskDeploymentDescriptor;
use super::ids::{
    AllocationId, ExecutionAttemptId, InstanceId, JobId, LeaderSessionId, ProducerListId,
    ResourceId,
};
use super::protocol;
use crate::operators::Record;

protocol! {
    /// Every message a TaskManager accepts: the payload of an envelope addressed to it.
    wire TaskManagerMessage;
    /// Typed handles to a TaskManager, local or remote.
    gateway TaskManagerGateway {
        /// A new JobManager leader.
        new_leader_available: NewLeaderAvailable,
        /// The JobManager ended this TaskManager's registration.
        disconnect: Disconnect,
        /// Report registration and slots.
        get_status: GetTaskManagerStatus,
        /// Run tasks.
        submit_tasks: SubmitTasks,
        /// Cancel a task.
        cancel_task: CancelTask,
        /// Drop a job's result partitions.
        release_job_partitions: ReleaseJobPartitions,
        /// A consumer task reads its channels on this TaskManager.
        fetch_subpartitions: FetchSubpartitions,
    }
}

/// The JobManager unregistered this TaskManager (its heartbeat timed out there, or a newer
/// instance took its place): forget the registration and register again. Only the current
/// leader may send it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Message)]
#[rtype(result = "()")]
pub struct Disconnect {
    /// The sender's leader session (fencing).
    pub leader_session_id: LeaderSessionId,
    /// Why the registration ended.
    pub reason: RemovalReason,
}

/// Report registration and slots.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Message)]
#[rtype(result = "TaskManagerStatus")]
pub struct GetTaskManagerStatus;

/// A snapshot of one TaskManager.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskManagerStatus {
    /// The worker.
    pub resource_id: ResourceId,
    /// Where registration stands.
    pub registration: RegistrationPhase,
    /// Registration attempts sent since start.
    pub registration_attempts: u64,
    /// Slots it has.
    pub slots_total: u32,
    /// Slots not allocated.
    pub slots_free: u32,
    /// The leader session fenced messages must carry: the registration's once registered,
    /// before that the one leader retrieval named (if it named one).
    pub leader_session_id: Option<LeaderSessionId>,
    /// Every slot in index order: the allocation holding it, or `None` if free.
    pub slots: Vec<Option<AllocationId>>,
    /// The attempts whose task code was started here and has not ended, by attempt id. After a
    /// disconnect they are dropped at once (cancelled), although their threads may take a
    /// moment to notice.
    pub running: Vec<RunningTaskInfo>,
    /// Result partitions held, per job (until the leader releases them with the job).
    pub job_partitions: Vec<(JobId, u32)>,
}

impl TaskManagerStatus {
    /// The registration, if registered.
    pub fn instance_id(&self) -> Option<InstanceId> {
        match self.registration {
            RegistrationPhase::Registered { instance_id } => Some(instance_id),
            _ => None,
        }
    }
}

/// One task attempt running on a TaskManager.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunningTaskInfo {
    /// The attempt.
    pub attempt: ExecutionAttemptId,
    /// Its job.
    pub job_id: JobId,
    /// The allocation whose slot it runs in.
    pub allocation_id: AllocationId,
    /// The leader asked to cancel it; it stops at its next check.
    pub cancel_requested: bool,
    /// What its exchange did (records and bytes in and out, input buffers in use,
    /// backpressure), as of the TaskManager's last sample (every heartbeat interval).
    pub io: crate::exchange::metrics::TaskIoSnapshot,
}

/// Where a TaskManager's registration stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RegistrationPhase {
    /// No JobManager leader is known.
    NoLeader,
    /// A registration attempt is under way.
    Registering {
        /// The attempt number (all attempts since start).
        attempt: u64,
    },
    /// Waiting before the next attempt (after an error).
    WaitingToRetry {
        /// The attempt that will be sent.
        attempt: u64,
    },
    /// Registered.
    Registered {
        /// The registration.
        instance_id: InstanceId,
    },
    /// The JobManager refused it: it stops (Flink's TaskExecutor shuts down when the
    /// ResourceManager rejects its registration) instead of asking again forever.
    Refused,
}

impl fmt::Display for RegistrationPhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoLeader => f.write_str("no leader"),
            Self::Registering { attempt } => write!(f, "registering (attempt {attempt})"),
            Self::WaitingToRetry { attempt } => write!(f, "waiting to retry (attempt {attempt})"),
            Self::Registered { instance_id } => write!(f, "registered as {instance_id}"),
            Self::Refused => f.write_str("refused"),
        }
    }
}

/// Run tasks, each in the slot its descriptor names: every task the JobManager placed on this
/// TaskManager in one turn of its actor (a wave of short tasks costs one message per
/// TaskManager, not one per task). Answered per task, in order. Only the current leader may
/// send it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Message)]
#[rtype(result = "Vec<Result<(), TaskSubmissionError>>")]
pub struct SubmitTasks {
    /// The sender's leader session (fencing).
    pub leader_session_id: LeaderSessionId,
    /// The tasks.
    pub descriptors: Vec<TaskDeploymentDescriptor>,
}

impl SubmitTasks {
    /// One task.
    pub fn one(leader_session_id: LeaderSessionId, descriptor: TaskDeploymentDescriptor) -> Self {
        Self {
            leader_session_id,
            descriptors: vec![descriptor],
        }
    }
}

/// Why a TaskManager did not accept a task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum TaskSubmissionError {
    /// The sender is not the leader this TaskManager is registered with.
    #[error("stale leader session")]
    StaleLeader,
    /// Every slot is taken by other allocations.
    #[error("no free slot for allocation {0}")]
    NoFreeSlot(String),
    /// The operator is not registered on this TaskManager.
    #[error("unknown operator `{0}`")]
    UnknownOperator(String),
    /// This attempt runs already.
    #[error("attempt {0} runs already")]
    Duplicate(ExecutionAttemptId),
    /// It was cancelled before it arrived.
    #[error("attempt {0} was cancelled before it arrived")]
    Cancelled(ExecutionAttemptId),
    /// Its output partitions could not be created.
    #[error("cannot create the task's result partitions: {0}")]
    Partition(String),
    /// An input gate names a producer list this TaskManager does not have (the task that
    /// carried it was lost, or the cache dropped it): the JobManager sends the task again with
    /// the list.
    #[error("producer list {0} is not known here")]
    UnknownProducers(ProducerListId),
    /// Its network buffers do not fit in the TaskManager's network memory next to the running
    /// tasks' (raise `taskmanager.network.memory`, or lower the buffer settings).
    #[error(
        "the task needs {needed} bytes of network buffers but only {available} of \
         `taskmanager.network.memory` are free on this TaskManager"
    )]
    NetworkMemory {
        /// Bytes the task's buffers need.
        needed: u64,
        /// Bytes still free.
        available: u64,
    },
}

/// Cancel a task (cooperatively: it stops at its next check). Only the current leader may send it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Message)]
#[rtype(result = "()")]
pub struct CancelTask {
    /// The sender's leader session (fencing).
    pub leader_session_id: LeaderSessionId,
    /// The attempt.
    pub attempt: ExecutionAttemptId,
}

/// The job ended: drop every result partition of it (memory and spill files). Only the current
/// leader may send it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Message)]
#[rtype(result = "()")]
pub struct ReleaseJobPartitions {
    /// The sender's leader session (fencing).
    pub leader_session_id: LeaderSessionId,
    /// The job.
    pub job_id: JobId,
}

/// A consumer task's reads from every channel it has on one TaskManager, in one message (the
/// network client multiplexes them: one request in flight per consumer task and producer
/// TaskManager, never one per channel). Answered when any of them has news (data, the end, a
/// failure), or empty after a hold time well inside the ask timeout, so a silent producer never
/// looks like a dead one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Message)]
#[rtype(result = "FetchResponse")]
pub struct FetchSubpartitions {
    /// The channels, each with where to read from and how much the consumer can take.
    pub reads: Vec<SubpartitionRead>,
}

/// One channel of a [`FetchSubpartitions`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubpartitionRead {
    /// The partition.
    pub partition: ResultPartitionId,
    /// The consumer's subpartition.
    pub subpartition: u32,
    /// The first batch wanted (every batch before it was received: a pipelined partition may
    /// forget them).
    pub from_batch: u64,
    /// The consumer's credit: at most this many batches (buffers it has free for the channel).
    pub credit: u32,
}

/// The answer to a [`FetchSubpartitions`]: news for some of its channels, by their index in
/// `reads`; empty when there was none within the hold time (ask again).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FetchResponse {
    /// `(index in reads, what happened)`, in index order.
    pub channels: Vec<(u32, ChannelResponse)>,
}

/// What one channel of a [`FetchSubpartitions`] got.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ChannelResponse {
    /// Batches from the one asked for on.
    Data {
        /// The batches.
        batches: Vec<Vec<Record>>,
        /// The batch to ask for next.
        next_batch: u64,
        /// Nothing follows.
        finished: bool,
        /// Batches the producer holds beyond these (for floating credit).
        backlog: u64,
    },
    /// The producer failed or the partition was released.
    Failed(String),
    /// No such partition here.
    Unknown,
}
