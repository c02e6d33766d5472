//! Messages the JobManager receives, and its answers.
//!
//! TaskManagers register (`RegisterTaskManager` → `AcknowledgeRegistration` /
//! `AlreadyRegistered` / `RefuseRegistration`) and then heartbeat (`Heartbeat`). The resource
//! manager registers (`RegisterResourceManager`), reports workers it saw end (`ResourceRemoved`)
//! and, when the pool shrinks, asks for idle TaskManagers to release (`ReleaseIdleTaskManagers`).

use std::fmt;

use actix::Message;
use serde::{Deserialize, Serialize};

use super::common::{
    Acknowledge, ActorAddress, HardwareDescription, RemovalReason, ResultPartitionId,
    TaskManagerLocation,
};
use super::protocol;
use super::resource_manager::RegisterResourceManagerSuccessful;
use crate::base::ids::{
    AllocationId, ClusterId, ExecutionAttemptId, InstanceId, JobId, LeaderSessionId, ResourceId,
    TaskManagerSessionId,
};
use crate::job::graph::JobGraph;
use crate::job::regions::PipelinedRegions;
use crate::job::states::{ExecutionState, JobStatus};
use crate::messages::TaskIoSnapshot;

protocol! {
    /// Every message the JobManager accepts: the payload of an envelope addressed to it.
    wire JobManagerMessage;
    /// Typed handles to a JobManager, local or remote.
    gateway JobManagerGateway {
        /// A TaskManager asks to join.
        register_task_manager: RegisterTaskManager,
        /// The resource manager asks to connect.
        register_resource_manager: RegisterResourceManager,
        /// The resource manager saw a worker end.
        resource_removed: ResourceRemoved,
        /// A TaskManager is alive.
        heartbeat: Heartbeat,
        /// The resource manager wants idle TaskManagers back.
        release_idle_task_managers: ReleaseIdleTaskManagers,
        /// The resource manager is alive.
        resource_manager_heartbeat: ResourceManagerHeartbeat,
        /// A client submits a job.
        submit_job: SubmitJob,
        /// A client cancels a job.
        cancel_job: CancelJob,
        /// A client asks how a job is doing.
        request_job_status: RequestJobStatus,
        /// A client asks for what a job's tasks sent back (its `collect()` results).
        request_job_results: RequestJobResults,
        /// A client lists the jobs.
        list_jobs: ListJobs,
        /// A TaskManager reports task state changes.
        update_task_execution_states: UpdateTaskExecutionStates,
        /// A TaskManager leaves the cluster (it is stopping).
        disconnect_task_manager: DisconnectTaskManager,
        /// Report the registered TaskManagers.
        get_status: GetJobManagerStatus,
        /// A TaskManager reads a piece of a job's artifact.
        fetch_blob: FetchBlob,
    }
}

/// How well a placement met the request's preferences.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Locality {
    /// On a preferred TaskManager.
    Local,
    /// Preferences existed and could not be met.
    NonLocal,
    /// There were no preferences.
    Unconstrained,
}

impl fmt::Display for Locality {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Local => "LOCAL",
            Self::NonLocal => "NON_LOCAL",
            Self::Unconstrained => "UNCONSTRAINED",
        })
    }
}

/// The most slots one TaskManager may offer.
pub const MAX_SLOTS_PER_TASK_MANAGER: u32 = 4096;

/// A TaskManager asks to join the cluster. Registration does not wait for the resource manager:
/// the JobManager tells it with `NotifyResourceStarted` when one is connected.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Message)]
#[rtype(result = "RegistrationResponse")]
pub struct RegisterTaskManager {
    /// The cluster the TaskManager was configured for.
    pub cluster_id: ClusterId,
    /// The worker.
    pub resource_id: ResourceId,
    /// Where it runs and how to reach it.
    pub location: TaskManagerLocation,
    /// What its machine offers.
    pub hardware: HardwareDescription,
    /// How many slots it offers (1 to [`MAX_SLOTS_PER_TASK_MANAGER`]).
    pub number_of_slots: u32,
    /// This run of the TaskManager (new on every start, the same for every retry).
    pub session: TaskManagerSessionId,
    /// What it can run.
    pub fingerprint: Fingerprint,
    /// The finished blocking result partitions it kept from an earlier leader, by job: a new
    /// leader takes back those its recovered jobs' event logs name and releases the rest
    /// (batch job recovery).
    pub partitions: Vec<(JobId, Vec<ResultPartitionId>)>,
}

/// What a TaskManager can run: the build of its binary and the operator identities registered
/// in it (built-ins and its programs'). The JobManager places a task only where its operator
/// is; an empty operator list declares nothing and is taken as "any" (test doubles).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fingerprint {
    /// The first 12 hex digits of the SHA-256 of its executable if it carries programs, else
    /// `vVERSION` (the built-ins are the same in every build of one version).
    pub build: String,
    /// Every operator identity it can run, sorted.
    pub operators: Vec<String>,
}

/// The JobManager's answer to `RegisterTaskManager`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RegistrationResponse {
    /// Registered as a new instance.
    AcknowledgeRegistration(AcknowledgeRegistration),
    /// This TaskManager was registered already; nothing changed.
    AlreadyRegistered(AlreadyRegistered),
    /// Not accepted; the TaskManager waits before trying again.
    RefuseRegistration(RefuseRegistration),
}

/// The TaskManager is registered as `instance_id` under the leader `leader_session_id`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AcknowledgeRegistration {
    /// The new registration.
    pub instance_id: InstanceId,
    /// The leader that accepted (fencing).
    pub leader_session_id: LeaderSessionId,
}

/// The TaskManager was registered already as `instance_id`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AlreadyRegistered {
    /// The existing registration.
    pub instance_id: InstanceId,
    /// The leader that holds it (fencing).
    pub leader_session_id: LeaderSessionId,
}

/// The registration was refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefuseRegistration {
    /// Why.
    pub reason: RefusalReason,
}

/// Why a TaskManager's registration was refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum RefusalReason {
    /// A TaskManager without slots cannot run anything.
    #[error("a TaskManager must offer at least one slot (taskmanager.slots is 0)")]
    NoSlots,
    /// The TaskManager belongs to another cluster.
    #[error("TaskManager is configured for cluster `{offered}`, this is cluster `{expected}`")]
    WrongCluster {
        /// This JobManager's cluster.
        expected: ClusterId,
        /// The cluster the TaskManager named.
        offered: ClusterId,
    },
    /// More slots than one TaskManager may offer.
    #[error("a TaskManager may offer at most {max} slots, this one offers {offered}")]
    TooManySlots {
        /// Slots offered.
        offered: u32,
        /// The limit.
        max: u32,
    },
    /// The message names one resource id and its location another.
    #[error("the registration names resource {resource_id} but its location names {location}")]
    InconsistentResourceId {
        /// The registration's resource id.
        resource_id: ResourceId,
        /// The location's resource id.
        location: ResourceId,
    },
    /// The resource manager let this worker go: it must not join again.
    #[error("TaskManager {resource_id} was released by the resource manager")]
    Released {
        /// The worker.
        resource_id: ResourceId,
    },
    /// The JobManager cannot reach the address the TaskManager gave.
    #[error("the JobManager cannot reach the TaskManager at {address}")]
    Unreachable {
        /// The address given.
        address: ActorAddress,
    },
}

/// The resource manager at `resource_manager` asks to connect. The answer lists the TaskManagers
/// registered right now, so the RM can reconcile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Message)]
#[rtype(result = "RegisterResourceManagerSuccessful")]
pub struct RegisterResourceManager {
    /// The leader session the RM retrieved for this JobManager: one that is no longer (or not
    /// yet) that leader does not take the RM (fencing).
    pub leader_session_id: LeaderSessionId,
    /// The RM's address, for the JobManager to send to.
    pub resource_manager: ActorAddress,
    /// The size the RM keeps the pool at.
    pub designated_pool_size: u32,
    /// The largest pool the RM accepts.
    pub max_pool_size: u32,
}

/// The resource manager saw a started worker end: unregister it (its tasks fail over).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Message)]
#[rtype(result = "()")]
pub struct ResourceRemoved {
    /// The leader session the RM is connected to (fencing: a report meant for another leader
    /// is ignored).
    pub leader_session_id: LeaderSessionId,
    /// The worker.
    pub resource_id: ResourceId,
    /// Why it is gone.
    pub reason: RemovalReason,
}

/// A registered TaskManager is alive; the report says what it holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Message)]
#[rtype(result = "HeartbeatResponse")]
pub struct Heartbeat {
    /// The worker.
    pub resource_id: ResourceId,
    /// The registration the TaskManager believes it has.
    pub instance_id: InstanceId,
    /// Its state.
    pub report: HeartbeatReport,
}

/// What a TaskManager reports with each heartbeat.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeartbeatReport {
    /// Slots it has.
    pub slots_total: u32,
    /// Slots not allocated.
    pub slots_free: u32,
    /// Every execution attempt it runs: the JobManager fails over any task it believes running
    /// there that is missing (its last report was lost, or the TaskManager dropped it).
    pub running: Vec<ExecutionAttemptId>,
    /// What each running task's exchange did, sampled this interval (records, bytes, buffers
    /// in use, backpressure): shown per subtask and vertex in the job's details.
    pub io: Vec<(ExecutionAttemptId, TaskIoSnapshot)>,
    /// The jobs it holds result partitions of: the JobManager releases them again for a job
    /// that ended (its `ReleaseJobPartitions` is a tell, and may have been lost).
    pub partitions_of: Vec<JobId>,
    /// Bytes of result partitions it has spilled to disk.
    pub spill: crate::messages::SpillUsage,
}

/// The JobManager's answer to a heartbeat.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum HeartbeatResponse {
    /// Heard; the registration stands.
    Acknowledged,
    /// The JobManager does not know this registration (it was removed, or the JobManager
    /// restarted): the TaskManager must register again.
    UnknownTaskManager,
}

/// The pool shrank: let go of up to `count` workers and name them, so the resource manager
/// releases them. `pending` lists the workers the RM has not seen register yet, the ones to
/// let go first: any may have registered here already (its report still on the way), so the
/// JobManager decides — one unknown here may go (and is refused if it registers later), one
/// registered here may go only if idle. Then idle registered ones, newest first. A busy worker
/// (a slot allocated, or results a running job still needs) is never chosen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Message)]
#[rtype(result = "IdleTaskManagersReleased")]
pub struct ReleaseIdleTaskManagers {
    /// How many the resource manager would like back.
    pub count: u32,
    /// Its pending workers, in the order it would let them go.
    pub pending: Vec<ResourceId>,
}

/// The TaskManagers the JobManager let go for `ReleaseIdleTaskManagers` (possibly fewer than
/// asked, possibly none).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdleTaskManagersReleased {
    /// The JobManager's leader session (fencing).
    pub leader_session_id: LeaderSessionId,
    /// The released workers.
    pub released: Vec<ResourceId>,
}

/// The resource manager at `resource_manager` is alive. The answer lists the TaskManagers
/// registered right now, so a lost `NotifyResourceStarted` is repaired within one interval.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Message)]
#[rtype(result = "ResourceManagerHeartbeatResponse")]
pub struct ResourceManagerHeartbeat {
    /// The sender.
    pub resource_manager: ActorAddress,
    /// The size the RM keeps the pool at (the JobManager grows it for demand from here).
    pub designated_pool_size: u32,
    /// The largest pool the RM accepts.
    pub max_pool_size: u32,
}

/// The JobManager's answer to a resource manager's heartbeat.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ResourceManagerHeartbeatResponse {
    /// Heard; the connection stands.
    Acknowledged {
        /// The JobManager's leader session (fencing).
        leader_session_id: LeaderSessionId,
        /// Workers registered right now.
        registered: Vec<ResourceId>,
        /// The workers its jobs need (see `DeclareResourceRequirements`).
        required_workers: u32,
    },
    /// This resource manager is not the one connected (the JobManager restarted, or forgot it
    /// after a heartbeat timeout): it must register again.
    UnknownResourceManager,
}

/// Report the registered TaskManagers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Message)]
#[rtype(result = "JobManagerStatus")]
pub struct GetJobManagerStatus;

/// A snapshot of the JobManager's view of the cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobManagerStatus {
    /// The leader session of this JobManager.
    pub leader_session_id: LeaderSessionId,
    /// Whether a resource manager is connected.
    pub resource_manager_connected: bool,
    /// Every registered TaskManager, by resource id.
    pub task_managers: Vec<TaskManagerInfo>,
    /// TaskManagers removed because their heartbeat timed out, since start.
    pub heartbeat_timeouts: u64,
    /// Task attempts started again by failover since start: each task of a restarted region
    /// counts once per restart (for `flint_task_restarts_total`).
    pub task_restarts: u64,
    /// Artifact bytes sent to TaskManagers since start (for `flint_blob_served_bytes_total`).
    pub blob_bytes_served: u64,
    /// How long the JobManager's messages take.
    pub mailbox: MailboxFigures,
    /// Tasks waiting for slots (in queued region bulks).
    pub slot_requests_queued: u64,
    /// Region bulks waiting for slots.
    pub slot_request_bulks_queued: u64,
}

/// How long an actor's messages take (0 under a paused clock).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MailboxFigures {
    /// The longest single message handled since start, in microseconds.
    pub max_handle_us: u64,
    /// Which message that was (empty before the first).
    pub longest_handler: String,
    /// How long the last mailbox probe waited to be handled, in microseconds.
    pub last_delay_us: u64,
    /// The longest any mailbox probe waited, in microseconds.
    pub max_delay_us: u64,
}

impl JobDetails {
    /// The most subtasks that held slots at once (from DEPLOYING to FINISHED), by the
    /// JobManager's own timestamps: a slot is given again only after its last holder's end was
    /// recorded, so the intervals are half-open (an end sorts before a start at the same
    /// millisecond). Subtasks that did not finish are left out.
    pub fn most_subtasks_at_once(&self) -> usize {
        let mut events: Vec<(u64, i32)> = Vec::new();
        for subtask in self.vertices.iter().flat_map(|v| &v.subtasks) {
            let at = |state: ExecutionState| {
                subtask
                    .timestamps
                    .iter()
                    .find(|(s, _)| *s == state)
                    .map(|(_, t)| *t)
            };
            if let (Some(start), Some(end)) =
                (at(ExecutionState::Deploying), at(ExecutionState::Finished))
            {
                events.push((start, 1));
                events.push((end, -1));
            }
        }
        events.sort_unstable();
        let (mut now, mut most) = (0i32, 0i32);
        for (_, delta) in events {
            now += delta;
            most = most.max(now);
        }
        usize::try_from(most).unwrap_or(0)
    }
}

impl JobManagerStatus {
    /// Slots over all TaskManagers.
    pub fn total_slots(&self) -> u64 {
        self.task_managers
            .iter()
            .map(|tm| u64::from(tm.slots_total))
            .sum()
    }

    /// Free slots over all TaskManagers.
    pub fn free_slots(&self) -> u64 {
        self.task_managers
            .iter()
            .map(|tm| u64::from(tm.slots_free))
            .sum()
    }
}

/// One registered TaskManager as the JobManager sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskManagerInfo {
    /// The worker.
    pub resource_id: ResourceId,
    /// Its registration.
    pub instance_id: InstanceId,
    /// Where it runs.
    pub location: TaskManagerLocation,
    /// What it offers.
    pub hardware: HardwareDescription,
    /// Slots it has.
    pub slots_total: u32,
    /// Slots not allocated (`slots_total` minus `allocated_slots.len()`).
    pub slots_free: u32,
    /// What it can run.
    pub fingerprint: Fingerprint,
    /// Wall-clock time of registration (ms since the epoch).
    pub registered_at_ms: u64,
    /// Wall-clock time of the last heartbeat (ms since the epoch).
    pub last_heartbeat_ms: u64,
    /// The slots the scheduler has given out here, by allocation id. Listed by allocation, not
    /// by slot index: the TaskManager picks the index (its first free slot) and never tells the
    /// JobManager, so an index here would be made up. Compare with the TaskManager's own
    /// [`TaskManagerStatus::slots`](super::task_manager::TaskManagerStatus::slots).
    pub allocated_slots: Vec<AllocatedSlotInfo>,
    /// Its spilled result partitions, as of its last heartbeat.
    pub spill: crate::messages::SpillUsage,
}

/// One slot of a TaskManager held by an allocation (a shared slot of one slot sharing group of
/// one job), as the JobManager's scheduler placed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocatedSlotInfo {
    /// The allocation (the id the TaskManager's slot table holds).
    pub allocation_id: AllocationId,
    /// The subtasks sharing it, at most one per vertex, by vertex index.
    pub tasks: Vec<SlotTaskInfo>,
}

/// One subtask placed in a slot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotTaskInfo {
    /// The job.
    pub job_id: JobId,
    /// The vertex's index in the job graph.
    pub vertex: u32,
    /// The subtask index.
    pub subtask: u32,
    /// Its current attempt; `None` if the JobManager no longer keeps the job (the placement is
    /// the scheduler's, the attempt the job's, and the two are reported as found, not guessed).
    pub attempt: Option<SlotTaskAttempt>,
}

/// The current attempt of a subtask placed in a slot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotTaskAttempt {
    /// The vertex's name.
    pub vertex_name: String,
    /// The attempt number (0 first).
    pub attempt_number: u32,
    /// The attempt.
    pub attempt: ExecutionAttemptId,
    /// Its state as the JobManager last heard it.
    pub state: ExecutionState,
}

impl fmt::Display for RegistrationResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::AcknowledgeRegistration(ack) => {
                write!(f, "AcknowledgeRegistration({})", ack.instance_id)
            }
            Self::AlreadyRegistered(already) => {
                write!(f, "AlreadyRegistered({})", already.instance_id)
            }
            Self::RefuseRegistration(refusal) => {
                write!(f, "RefuseRegistration({})", refusal.reason)
            }
        }
    }
}

/// Run a job. Answered with its id once it is accepted (validated, its operators known); it then
/// runs in the background.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Message)]
#[rtype(result = "Result<JobId, JobError>")]
pub struct SubmitJob {
    /// The job.
    pub job_graph: JobGraph,
    /// The graph's pipelined regions, computed by an in-process sender on its own thread (the
    /// REST handler, the mini cluster), so a large graph's O(P) analysis does not hold up the
    /// JobManager's mailbox. Never sent over the wire: a remote sender's submission is
    /// analysed by the JobManager.
    #[serde(skip)]
    pub regions: Option<PipelinedRegions>,
}

impl SubmitJob {
    /// A submission the JobManager analyses itself.
    pub fn new(job_graph: JobGraph) -> Self {
        Self {
            job_graph,
            regions: None,
        }
    }

    /// A submission analysed here, on the caller's thread. A graph whose regions cannot be
    /// computed goes as is: the JobManager refuses it with the reason.
    pub fn prepared(job_graph: JobGraph) -> Self {
        let regions = PipelinedRegions::compute(&job_graph).ok();
        Self { job_graph, regions }
    }
}

/// Run a job again that an earlier leader accepted (high availability: the new leader recovers
/// every unfinished job of the job graph store, from the start, under its id). A graph that
/// could not be read makes the job FAILED with that reason. Local only: the leader's own
/// process sends it.
#[derive(Debug, Clone, PartialEq, Message)]
#[rtype(result = "Result<JobId, JobError>")]
pub struct RecoverJob {
    /// The job's id, kept across leaders.
    pub job_id: JobId,
    /// Its graph, or why it cannot be recovered.
    pub job_graph: Result<JobGraph, String>,
}

/// Cancel a job: every task is cancelled and every slot freed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Message)]
#[rtype(result = "Result<JobStatus, JobError>")]
pub struct CancelJob {
    /// The job.
    pub job_id: JobId,
}

/// How is a job doing?
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Message)]
#[rtype(result = "Result<JobDetails, JobError>")]
pub struct RequestJobStatus {
    /// The job.
    pub job_id: JobId,
}

/// What did a job's tasks send back? (the records its `collect()` sinks gathered).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Message)]
#[rtype(result = "Result<JobResults, JobError>")]
pub struct RequestJobResults {
    /// The job.
    pub job_id: JobId,
}

/// What a job's tasks sent back with their final state, by vertex name and subtask: the
/// encoded records of each `collect()` sink subtask (`None`: that subtask sent nothing, or has
/// not finished).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobResults {
    /// The job's status when asked.
    pub status: Option<JobStatus>,
    /// Per vertex that sent anything: one entry per subtask.
    pub vertices: std::collections::BTreeMap<String, Vec<Option<bytes::Bytes>>>,
}

/// Every job the JobManager knows, newest last.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Message)]
#[rtype(result = "Vec<JobSummary>")]
pub struct ListJobs;

/// Task state changes, from the TaskManager running the tasks: every change it had to report
/// since its last such message (a TaskManager batches them per turn of its actor, so a wave of
/// short tasks costs one message per TaskManager, not one per task). Acknowledged, so the
/// TaskManager can send it again until it arrives: a lost final state would leave the task
/// RUNNING at the JobManager forever. Repeats and late arrivals are harmless (a state the task
/// has passed, or any state after a terminal one, changes nothing).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Message)]
#[rtype(result = "Acknowledge")]
pub struct UpdateTaskExecutionStates {
    /// The changes, in the order they happened.
    pub states: Vec<TaskExecutionState>,
}

impl From<TaskExecutionState> for UpdateTaskExecutionStates {
    fn from(state: TaskExecutionState) -> Self {
        Self {
            states: vec![state],
        }
    }
}

/// A task's new state (Flink's `TaskExecutionState`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskExecutionState {
    /// The job.
    pub job_id: JobId,
    /// The execution attempt.
    pub attempt: ExecutionAttemptId,
    /// Its new state.
    pub state: ExecutionState,
    /// Why, for a failed task.
    pub error: Option<String>,
    /// For a task that failed because an input partition was missing: that partition (the
    /// JobManager reruns its producer's region).
    pub unavailable_partition: Option<ResultPartitionId>,
    /// With a final state: what its exchange did, last sampled as it ended.
    pub io: Option<TaskIoSnapshot>,
    /// With FINISHED: what the task sent back for its job's client (a `collect()` sink's
    /// encoded records), if anything.
    /// At most [`MAX_TASK_RESULT_BYTES`].
    pub result: Option<bytes::Bytes>,
    /// With FINISHED: the task stopped reading its inputs before their end (a `first_n`, an
    /// operator that returns early). The JobManager then releases what its producers still
    /// running write for it ([`ReleasePartitions::subpartitions`](crate::messages::task_manager::ReleasePartitions::subpartitions)): the task's own release
    /// goes through its data connections and is lost if its TaskManager dies first, and its
    /// pipelined producers would wait for room for ever.
    pub ended_early: bool,
    /// With FAILED: every attempt would fail the same way (an operator's configuration is
    /// invalid, a record is too large for the exchange; Flink's `NonRecoverableError`), so the
    /// JobManager fails the job at once instead of restarting it under its restart strategy.
    pub unrecoverable: bool,
}

/// The most a task sends back in its final report ([`TaskExecutionState::result`]): a report
/// with it fits one message of the transport (16 MiB), and a TaskManager sends reports whose
/// results together pass it in messages of their own.
pub const MAX_TASK_RESULT_BYTES: usize = 8 << 20;

const _: () = assert!(MAX_TASK_RESULT_BYTES <= crate::transport::frame::DEFAULT_MAX_FRAME / 2);

/// Why a job request was refused. Not retryable with the same request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum JobError {
    /// No job has this id.
    #[error("no job {0}")]
    UnknownJob(JobId),
    /// The job graph is not valid here.
    #[error("job rejected: {0}")]
    Rejected(String),
    /// The JobManager holds as many waiting and running subtasks as it may
    /// (`jobmanager.max-subtasks`); the same submission may succeed once jobs end.
    #[error("{0}")]
    Overloaded(String),
    /// The job ended already.
    #[error("job {job_id} is {status:?} already")]
    AlreadyTerminal {
        /// The job.
        job_id: JobId,
        /// Its final status.
        status: JobStatus,
    },
    /// High availability: the job's graph could not be written to the job graph store, so the
    /// job was not started (a job the store does not hold would be lost with this leader).
    /// Retryable.
    #[error("the job graph could not be persisted, so the job was not started: {0}")]
    NotPersisted(String),
    /// High availability: the job ended under an earlier leader, and what its tasks sent back
    /// could not be read from the job result store. Retryable once the storage recovers.
    #[error("the job's results could not be read from the job result store: {0}")]
    ResultsUnreadable(String),
}

/// One line of the job list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobSummary {
    /// The job.
    pub job_id: JobId,
    /// Its name.
    pub name: String,
    /// Its status.
    pub status: JobStatus,
    /// Tasks finished / all tasks.
    pub tasks_finished: u32,
    /// All tasks.
    pub tasks_total: u32,
    /// Submission time (ms since the epoch).
    pub submitted_at_ms: u64,
}

/// Everything about one job, for the status API.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobDetails {
    /// The summary line.
    pub summary: JobSummary,
    /// When each job status was entered (ms since the epoch).
    pub status_timestamps: Vec<(JobStatus, u64)>,
    /// Why the job failed, if it did.
    pub failure: Option<String>,
    /// Region restarts so far.
    pub restarts: u32,
    /// Per vertex, in job graph order.
    pub vertices: Vec<VertexDetails>,
    /// When a new leader recovered the job from the job graph store (high availability; ms
    /// since the epoch): it runs again from the start, under the same id. `None` for a job
    /// this leader was submitted.
    pub recovered_at_ms: Option<u64>,
    /// The task failures the JobManager learned of, oldest first, at most
    /// [`EXCEPTION_HISTORY_SIZE`] of them (Flink's exception history; when it is full, the
    /// failures that came with a failover go before any root cause): a restarted job's
    /// subtasks show only their current attempts, so this is where the failures that made it
    /// restart stay visible.
    pub exceptions: Vec<JobException>,
    /// Answered from the job result store (high availability: the job ended under an earlier
    /// leader, or its execution graph was forgotten): each vertex is its
    /// [`VertexSummary`], without its subtasks.
    #[serde(default)]
    pub from_job_result_store: bool,
    /// The files the job shipped with it (name, digest, size).
    #[serde(default)]
    pub artifacts: Vec<crate::job::artifact::JobArtifact>,
}

impl JobDetails {
    /// The same job in a few numbers per vertex, without its subtasks (what the job result
    /// store keeps: an entry of a 10,000-subtask job stays a few hundred bytes).
    pub fn summarized(&self) -> Self {
        Self {
            vertices: self
                .vertices
                .iter()
                .map(|vertex| VertexDetails {
                    name: vertex.name.clone(),
                    operator: vertex.operator.clone(),
                    chain: vertex.chain.clone(),
                    io: vertex.io,
                    summary: Some(vertex.summary()),
                    subtasks: Vec::new(),
                })
                .collect(),
            ..self.clone()
        }
    }
}

/// How many task failures a job's exception history keeps (Flink's
/// `web.exception-history-size` default, which counts root causes).
pub const EXCEPTION_HISTORY_SIZE: usize = 16;

/// One task failure of a job's exception history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobException {
    /// When the JobManager learned of it (ms since the epoch).
    pub timestamp_ms: u64,
    /// The failed task's vertex.
    pub vertex: String,
    /// Its subtask index.
    pub subtask: u32,
    /// Its attempt number.
    pub attempt_number: u32,
    /// Where it ran, if it was placed.
    pub resource_id: Option<ResourceId>,
    /// Why it failed.
    pub reason: String,
    /// It started a failover (a root cause), rather than arriving while its region was already
    /// being restarted or its job ending (Flink's concurrent exceptions).
    pub root_cause: bool,
}

/// One vertex of a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VertexDetails {
    /// Its name.
    pub name: String,
    /// Its operator.
    pub operator: String,
    /// The operators chained in it, in order (a program's task; empty for one operator).
    pub chain: Vec<String>,
    /// Its subtasks.
    pub subtasks: Vec<SubtaskDetails>,
    /// Over its subtasks' current attempts: records, bytes and buffers summed, the
    /// backpressure the highest (Flink shows a vertex as backpressured as its worst subtask).
    pub io: TaskIoSnapshot,
    /// Its subtasks in a few numbers, when `subtasks` was dropped (a job answered from the job
    /// result store); `None` while the subtasks are listed.
    #[serde(default)]
    pub summary: Option<VertexSummary>,
}

impl VertexDetails {
    /// Its subtasks in a few numbers: the kept summary, or one made from the subtasks.
    pub fn summary(&self) -> VertexSummary {
        if let Some(summary) = &self.summary
            && self.subtasks.is_empty()
        {
            return summary.clone();
        }
        let mut states: Vec<(ExecutionState, u32)> = Vec::new();
        for subtask in &self.subtasks {
            match states.iter_mut().find(|(s, _)| *s == subtask.state) {
                Some((_, count)) => *count += 1,
                None => states.push((subtask.state, 1)),
            }
        }
        states.sort();
        let entered = |subtask: &SubtaskDetails, state: ExecutionState| {
            subtask
                .timestamps
                .iter()
                .find(|(s, _)| *s == state)
                .map(|(_, at)| *at)
        };
        let started_at_ms = self
            .subtasks
            .iter()
            .filter_map(|s| {
                entered(s, ExecutionState::Deploying)
                    .or_else(|| entered(s, ExecutionState::Running))
            })
            .min();
        let ended_at_ms = self
            .subtasks
            .iter()
            .map(|s| {
                (s.state == ExecutionState::Finished)
                    .then(|| entered(s, ExecutionState::Finished))
                    .flatten()
            })
            .collect::<Option<Vec<u64>>>()
            .and_then(|ends| ends.into_iter().max());
        VertexSummary {
            parallelism: self.subtasks.len() as u32,
            states,
            started_at_ms,
            ended_at_ms,
        }
    }
}

/// One vertex's subtasks in a few numbers: what the job result store keeps of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VertexSummary {
    /// Its subtasks.
    pub parallelism: u32,
    /// How many subtasks' current attempts are in each state, by state.
    pub states: Vec<(ExecutionState, u32)>,
    /// When its first subtask was deployed (ms since the epoch), if one was.
    pub started_at_ms: Option<u64>,
    /// When its last subtask finished, if every subtask did.
    pub ended_at_ms: Option<u64>,
}

/// One subtask's current attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubtaskDetails {
    /// The subtask index.
    pub subtask: u32,
    /// Its attempt number (0 first).
    pub attempt_number: u32,
    /// Its state.
    pub state: ExecutionState,
    /// Where it runs or ran.
    pub resource_id: Option<ResourceId>,
    /// How well its placement met its preferences.
    pub locality: Option<Locality>,
    /// When each state was entered (ms since the epoch).
    pub timestamps: Vec<(ExecutionState, u64)>,
    /// Why it failed, if it did.
    pub error: Option<String>,
    /// What its exchange did (the last heartbeat's sample, or the final one): `None` until its
    /// TaskManager reported it.
    pub io: Option<TaskIoSnapshot>,
    /// A new leader took this finished attempt back after a failover (batch job recovery): it
    /// did not run again.
    #[serde(default)]
    pub restored: bool,
}

/// A TaskManager is stopping gracefully: unregister it now, so its tasks fail over at once
/// instead of after a heartbeat timeout. Ignored unless `instance_id` is its current
/// registration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Message)]
#[rtype(result = "Acknowledge")]
pub struct DisconnectTaskManager {
    /// The worker.
    pub resource_id: ResourceId,
    /// Its registration.
    pub instance_id: InstanceId,
}

/// The most bytes one [`FetchBlob`] answer carries: large enough that a transfer is a handful
/// of round trips per 100 MB (with [`FETCH_BLOB_WINDOW`] asks in flight), small enough that a
/// chunk never holds up a connection's other frames for long (the frame limit is 16 MiB).
pub const FETCH_BLOB_CHUNK: u32 = 1 << 20;

/// How many [`FetchBlob`] asks a TaskManager keeps in flight per artifact: enough to hide the
/// round trip behind the transfer.
pub const FETCH_BLOB_WINDOW: usize = 4;

/// A TaskManager reads `length` bytes of a stored artifact from `offset` (Flink's
/// `BlobServer` GET, in chunks over the authenticated transport rather than a socket of its
/// own). Answered from the JobManager's blob store, off the actor's thread.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Message)]
#[rtype(result = "Result<BlobChunk, BlobFetchError>")]
pub struct FetchBlob {
    /// The artifact's SHA-256.
    pub digest: crate::base::blob_key::BlobKey,
    /// Where to start reading.
    pub offset: u64,
    /// How many bytes at most (capped at [`FETCH_BLOB_CHUNK`]).
    pub length: u32,
}

/// A piece of an artifact.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlobChunk {
    /// The artifact's whole size, so the reader knows when it is done.
    pub size: u64,
    /// The bytes from the asked offset: fewer than asked only at the end.
    pub bytes: crate::messages::buffer::Buffer,
}

/// Why a [`FetchBlob`] was not answered with bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum BlobFetchError {
    /// This JobManager keeps no artifacts (an embedded cluster without a store).
    #[error("the JobManager keeps no artifacts")]
    NoStore,
    /// Not stored here.
    #[error("artifact {0} is not stored at the JobManager")]
    NotFound(crate::base::blob_key::BlobKey),
    /// Reading the store failed.
    #[error("reading artifact {digest} failed: {message}")]
    Io {
        /// The artifact.
        digest: crate::base::blob_key::BlobKey,
        /// The error, as text.
        message: String,
    },
}
