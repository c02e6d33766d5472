//! Messages a TaskManager receives, and its answers.
//!
//! A TaskManager learns of the JobManager leader (`NewLeaderAvailable`), registers there on its
//! own initiative, and is told by the JobManager when that registration ended (`Disconnect`).

use std::fmt;
use std::sync::Arc;

use actix::Message;
use serde::{Deserialize, Serialize};

use super::common::{
    Acknowledge, ActorAddress, NewLeaderAvailable, RemovalReason, ResultPartitionId,
};
use super::deployment::TaskDeploymentDescriptor;
use super::protocol;
use crate::base::ids::{
    AllocationId, DataConnectionId, ExecutionAttemptId, InstanceId, JobId, LeaderSessionId,
    ProducerListId, ResourceId,
};
use crate::messages::buffer::Buffer;
use crate::messages::subpartition_set::SubpartitionSet;

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
        /// Cancel tasks.
        cancel_tasks: CancelTasks,
        /// Drop a job's result partitions.
        release_job_partitions: ReleaseJobPartitions,
        /// A consumer TaskManager subscribes its channels here and grants credit.
        partition_requests: PartitionRequests,
        /// A consumer TaskManager's standing call for its channels' data.
        poll_partition_data: PollPartitionData,
        /// Drop some of a job's result partitions.
        release_partitions: ReleasePartitions,
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
    /// Result partitions held, per job (until the leader releases them, or the job).
    pub job_partitions: Vec<(JobId, u32)>,
    /// Bytes of result partitions spilled to disk.
    pub spill: crate::messages::SpillUsage,
    /// Its network buffers: reserved as floors, lent beyond them.
    pub network: crate::messages::NetworkBufferUsage,
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
    /// It belongs to an earlier JobManager connection (cancelled when that ended): it holds
    /// its slot until it has ended, and the TaskManager registers again only then.
    #[serde(default)]
    pub orphaned: bool,
    /// What its exchange did (records and bytes in and out, input buffers in use,
    /// backpressure), as of the TaskManager's last sample (every heartbeat interval).
    pub io: crate::messages::TaskIoSnapshot,
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
        "the task needs {needed} bytes of guaranteed network buffers (its input gate's and \
         pipelined outputs' floors) but only {available} of the {floors} bytes \
         `taskmanager.network.memory` keeps for them are free on this TaskManager; raise \
         `taskmanager.network.memory` (or lower `taskmanager.network.required-buffers-per-gate` \
         / `-per-output`)"
    )]
    NetworkMemory {
        /// Bytes the task's floors need.
        needed: u64,
        /// Bytes of floors still free.
        available: u64,
        /// Bytes kept for floors in all (three quarters of `taskmanager.network.memory`).
        floors: u64,
    },
}

/// Cancel tasks (cooperatively: each stops at its next check). One message per TaskManager for
/// everything the JobManager cancels there in one turn: a job of 5,000 tasks on one TaskManager
/// sent 5,000 messages, more than the transport's outbound queue holds. Only the current leader
/// may send it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Message)]
#[rtype(result = "()")]
pub struct CancelTasks {
    /// The sender's leader session (fencing).
    pub leader_session_id: LeaderSessionId,
    /// The attempts.
    pub attempts: Vec<ExecutionAttemptId>,
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

/// Drop these result partitions of a running job (Flink's `releasePartitions`): every region
/// reading them finished, or their attempt was superseded by a restart. A tell: a lost one
/// leaves them until the job's [`ReleaseJobPartitions`]. Only the current leader may send it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Message)]
#[rtype(result = "()")]
pub struct ReleasePartitions {
    /// The sender's leader session (fencing).
    pub leader_session_id: LeaderSessionId,
    /// The job.
    pub job_id: JobId,
    /// The partitions; unknown ones are ignored.
    pub partitions: Vec<ResultPartitionId>,
    /// Subpartitions of pipelined partitions whose consumer finished without reading them to
    /// their end: what they hold is dropped and their producer's later writes there discarded
    /// (Flink's consumed subpartition), so the producer never waits for room there.
    pub subpartitions: Vec<(ResultPartitionId, u32)>,
}

/// Subscriptions and credit of one data connection (consumer TaskManager → producer
/// TaskManager; Flink's `PartitionRequest` and `AddCredit`), many channels in one message. Each
/// message is numbered per connection and applied exactly once, in order: one is in flight at a
/// time and sent again, with the same number, until acknowledged (an ask, not a tell: a lost
/// subscription must be noticed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Message)]
#[rtype(result = "Acknowledge")]
pub struct PartitionRequests {
    /// The consumer TaskManager, which polls for the data ([`PollPartitionData`]).
    pub consumer: ActorAddress,
    /// The connection (a consumer TaskManager opens one per producer TaskManager).
    pub connection: DataConnectionId,
    /// This message's number on the connection: 1, 2, 3, ...
    pub round: u64,
    /// What changes, in order.
    pub requests: Vec<PartitionRequest>,
}

/// One change of a [`PartitionRequests`].
///
/// A consumer TaskManager names the partitions it reads on the producer's TaskManager once per
/// producer list (a [`Set`](Self::Set)), and each gate subscribes to one subpartition of every
/// partition of a set at once ([`SubscribeSet`](Self::SubscribeSet)): an all-to-all gate of P
/// producers on N TaskManagers sends N subscriptions, not P. The producer's TaskManager serves a
/// channel one by one only once its subpartition has data; how the others end (finished and
/// empty, failed, released) it tells once per partition ([`PartitionNotice`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum PartitionRequest {
    /// The partitions of edge `edge` this TaskManager reads there, under a number of the
    /// connection's own; sent before any subscription names it.
    Set {
        /// The set's number on the connection.
        set: u32,
        /// The edge, whose partitions they are.
        edge: u32,
        /// The partitions, in the order their channels are numbered.
        members: Arc<Vec<ResultPartitionId>>,
    },
    /// A gate reads `subpartition` of every partition of `set`: the one at position i is its
    /// channel `channels + i`, with `credit` buffers free for it.
    SubscribeSet {
        /// The key of the set's first channel (the gate and the channel's index there).
        channels: u64,
        /// The set.
        set: u32,
        /// The consumer's subpartition.
        subpartition: u32,
        /// Buffers the consumer has free for each channel.
        credit: u32,
        /// Bytes the producer may send without credit, across the subscription's channels, in
        /// whole buffers that fit what is left of them (a gate without exclusive credit: a
        /// channel's first small buffer then needs no backlog announcement and credit first).
        /// They are given back as the gate consumes them ([`EagerReturned`](Self::EagerReturned)).
        eager: u32,
    },
    /// The gate whose set subscription starts at `channels` consumed `returned` bytes of the
    /// buffers sent without credit in all (a running total, as [`Credit`](Self::Credit)).
    EagerReturned {
        /// The key [`SubscribeSet`](Self::SubscribeSet) gave.
        channels: u64,
        /// Bytes consumed since the subscription.
        returned: u64,
    },
    /// The consumer has granted `granted` buffers for `channel` in all, counting the
    /// subscription's (a running total: a grant sent twice or overtaken changes nothing).
    Credit {
        /// The channel.
        channel: u64,
        /// Buffers granted since the subscription.
        granted: u64,
    },
    /// The consumer stopped reading `channel` (it ended or failed first).
    Cancel {
        /// The channel.
        channel: u64,
    },
    /// The gate whose set subscription starts at `channels` stopped reading it.
    CancelSet {
        /// The key [`SubscribeSet`](Self::SubscribeSet) gave.
        channels: u64,
    },
    /// No gate reads `set` any more.
    ForgetSet {
        /// The set.
        set: u32,
    },
    /// A gate ended before reading `subpartition` of these members of `set` to their end (it
    /// finished early, failed or was cancelled): their producers drop what they hold for it,
    /// discard what they still write there and stop waiting for room there (Flink's
    /// `onConsumedSubpartition`). Sent before the gate's `CancelSet`.
    ReleaseSet {
        /// The set.
        set: u32,
        /// The consumer's subpartition.
        subpartition: u32,
        /// Positions in the set.
        members: Vec<u32>,
    },
}

/// The consumer TaskManager's standing call for whatever its channels on the producer
/// TaskManager have: answered as soon as any has news (data within its credit, the end, a
/// failure), or empty after a hold time well inside the ask timeout, so a silent producer
/// never looks like a dead one. One is in flight per connection; it is also how either side
/// learns the other is gone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Message)]
#[rtype(result = "PartitionData")]
pub struct PollPartitionData {
    /// The consumer TaskManager.
    pub consumer: ActorAddress,
    /// The connection.
    pub connection: DataConnectionId,
    /// This poll's number on the connection: a newer poll ends an older one still held.
    pub poll: u64,
    /// The `seq` of the last non-empty [`PartitionData`] the consumer received: an answer
    /// after it was lost on the way, and it is sent again as it was.
    pub received: u64,
    /// The last [`PartitionRequests`] round the producer acknowledged: one that knows fewer
    /// lost the connection's subscriptions (it restarted) and says so.
    pub acknowledged: u64,
}

/// News for some channels of a connection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionData {
    /// Numbers the non-empty answers of a connection: 1, 2, 3, ... (0 and unchanged: empty).
    pub seq: u64,
    /// `(the consumer's channel key, what happened)`.
    pub channels: Vec<(u64, ChannelResponse)>,
    /// Partitions of the connection's sets that ended.
    pub notices: Vec<PartitionNotice>,
    /// This TaskManager does not know the subscriptions the consumer says it acknowledged (it
    /// restarted, and its partitions with it): every channel of the connection is gone.
    pub forgotten: bool,
}

/// A partition of a set ended: every channel of it that had no data is done (or fails).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionNotice {
    /// The set.
    pub set: u32,
    /// The partition's position in it.
    pub member: u32,
    /// How it ended.
    pub end: PartitionEnd,
}

/// How a partition ended, for all its subpartitions at once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum PartitionEnd {
    /// Its producer finished; the subpartitions not in `with_data` never had data and are
    /// finished; those in it are served channel by channel.
    Finished {
        /// The subpartitions that had data: shared, since every gate reading the partition
        /// keeps the same set (encoded as the ascending `Vec<u32>` it was).
        with_data: SubpartitionSet,
    },
    /// The producer failed.
    Failed(String),
    /// The partition was released.
    Released,
    /// It never appeared within the partition request timeout.
    Unknown,
}

/// What one channel of a [`PollPartitionData`] got.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ChannelResponse {
    /// Buffers from the one asked for on.
    Data {
        /// The buffers (serialized records: the actor threads never decode them).
        buffers: Vec<Buffer>,
        /// The buffer to ask for next.
        next_buffer: u64,
        /// Nothing follows.
        finished: bool,
        /// Buffers the producer holds beyond these (for floating credit).
        backlog: u64,
        /// Sent without credit: the bytes they took of their set subscription's
        /// [`eager`](PartitionRequest::SubscribeSet::eager) allowance (0: sent within credit).
        eager: u64,
    },
    /// The producer failed.
    Failed(String),
    /// The partition was released (its producer's region restarts, or its job ended).
    Released,
    /// No such partition appeared here within the partition request timeout.
    Unknown,
}
