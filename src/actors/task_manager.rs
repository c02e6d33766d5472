//! The TaskManager: a worker that offers slots to the JobManager.
//!
//! It registers at the JobManager leader with retries and backoff ([`Registration`]), then
//! heartbeats every `heartbeat.interval`. It starts over when the JobManager has been silent for
//! `heartbeat.timeout`, answers a heartbeat with "unknown", sends a (correctly fenced)
//! `Disconnect`, or leader retrieval names another leader. It holds a [`SlotTable`]; running
//! tasks in those slots comes with the jobs layer, and will happen off this actor's thread so a
//! busy TaskManager still heartbeats.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;

use actix::clock::Instant;
use actix::prelude::*;

use self::registration::{Leader, Registration, RegistrationAction, RegistrationEvent};
use self::slot_table::SlotTable;
use self::task_runtime::{TaskEnvironment, TaskOutcome, create_outputs, run_task};
use super::Shutdown;
use crate::base::ids::{AllocationId, ExecutionAttemptId, JobId, LeaderSessionId};
use crate::base::ids::{ClusterId, InstanceId, ResourceId, TaskManagerSessionId};
use crate::base::rng::NodeRng;
use crate::config::{CancellationConfig, HeartbeatConfig, RegistrationConfig};
use crate::env::events::ClusterEvent;
use crate::env::task_blocking::Cancellation;
use crate::env::{NodeEnv, TaskBlocker};
use crate::exchange::NetworkSettings;
use crate::exchange::buffer_pool::NetworkBufferPool;
use crate::exchange::client::{NetworkClient, Peer};
use crate::exchange::metrics::TaskIoMetrics;
use crate::exchange::partition::ResultPartitionManager;
use crate::exchange::server::PartitionRequestServer;
use crate::job::states::ExecutionState;
use crate::messages::ResultPartitionId;
use crate::messages::TaskIoSnapshot;
use crate::messages::deployment::TaskDeploymentDescriptor;
use crate::messages::job_manager::{
    DisconnectTaskManager, MAX_TASK_RESULT_BYTES, TaskExecutionState, UpdateTaskExecutionStates,
};
use crate::messages::job_manager::{
    Heartbeat, HeartbeatReport, HeartbeatResponse, JobManagerGateway, RegisterTaskManager,
};
use crate::messages::task_manager::*;
use crate::messages::{
    ActorAddress, HardwareDescription, NewLeaderAvailable, TaskManagerLocation, is_current_leader,
};
use crate::operators::OperatorRegistry;
use crate::rpc::directory::LocalActor;

mod artifacts;
pub mod blob_cache;
mod connection;
#[cfg(test)]
use connection::Internal;
mod producer_lists;
pub mod registration;
pub mod slot_table;
pub mod task_runtime;
use producer_lists::ProducerListCache;

/// What every TaskManager of a cluster shares (a driver starts each worker from one).
#[derive(Debug, Clone)]
pub struct TaskManagerSpec {
    /// The cluster it belongs to.
    pub cluster_id: ClusterId,
    /// Slots it offers.
    pub slots: u32,
    /// The host it runs on.
    pub hostname: String,
    /// What its machine offers.
    pub hardware: HardwareDescription,
    /// Registration retries.
    pub registration: RegistrationConfig,
    /// Heartbeat interval and timeout.
    pub heartbeat: HeartbeatConfig,
    /// The operators it can run.
    pub registry: OperatorRegistry,
    /// Where each TaskManager keeps its spill files (in a subdirectory named after it).
    pub working_dir: PathBuf,
    /// A result partition larger than this (bytes) spills to disk.
    pub spill_threshold_bytes: usize,
    /// The most bytes of spill files it keeps at once (`None`: no limit).
    pub spill_budget_bytes: Option<u64>,
    /// Managed memory of the whole TaskManager (bytes), shared out equally among its slots.
    pub managed_memory: u64,
    /// Network buffers (`taskmanager.network.*`).
    pub network: NetworkSettings,
    /// How a task that ignores its cancellation is pressed (`task.cancellation.*`).
    pub cancellation: CancellationConfig,
    /// How long a job's artifacts stay cached after its last task here (`blob.cache-linger`).
    pub blob_cache_linger: std::time::Duration,
}

/// What one TaskManager is started with.
#[derive(Debug, Clone)]
pub struct TaskManagerSettings {
    /// The worker's id, chosen by whoever starts it.
    pub resource_id: ResourceId,
    /// The JobManager leader to register at, if known at start.
    pub job_manager: Option<Leader>,
    /// What it shares with the cluster's other TaskManagers.
    pub spec: TaskManagerSpec,
}

/// How long a started task's RUNNING report waits for the task to end (then only its final
/// state is reported). Short next to anything that reads RUNNING (the REST API, heartbeats in
/// seconds); long next to a task that does nothing.
pub const RUNNING_REPORT_DELAY: std::time::Duration = std::time::Duration::from_millis(5);

/// How many early cancellations are remembered.
const CANCELLED_EARLY_KEPT: usize = 1024;

/// A task running on this TaskManager.
struct RunningTask {
    job_id: JobId,
    allocation_id: AllocationId,
    cancelled: Arc<Cancellation>,
    /// What its exchange does, counted by the task thread.
    metrics: Arc<TaskIoMetrics>,
    /// The last sample of `metrics` (wall ms, backpressured ms) and what it showed.
    last_sample: (u64, u64),
    io: TaskIoSnapshot,
    /// When the JobManager first cancelled it: the watchdog's start.
    cancelled_at: Option<Instant>,
    /// Its JobManager connection ended while it ran (see `drop_all_work`): cancelled, its end
    /// reported to nobody, its slot held until it has ended.
    orphaned: bool,
    /// The job's artifacts it holds in the cache.
    artifacts: Arc<[crate::job::artifact::JobArtifact]>,
}

/// See the module docs.
pub struct TaskManager {
    settings: TaskManagerSettings,
    env: NodeEnv,
    address: ActorAddress,
    registration: Registration,
    job_manager: Option<JobManagerGateway>,
    slots: SlotTable,
    /// Tasks per allocation: a shared slot holds one task of each vertex of its group.
    allocations: BTreeMap<AllocationId, usize>,
    running: BTreeMap<ExecutionAttemptId, RunningTask>,
    /// Attempts that ended whose final state the JobManager has not acknowledged yet: listed
    /// in heartbeats with the running ones (see `report`).
    reporting: BTreeSet<ExecutionAttemptId>,
    /// State changes not sent yet: sent together at the end of this turn of the actor
    /// ([`FlushReports`]), so tasks that end together cost one message.
    outgoing: Vec<TaskExecutionState>,
    /// Tasks started whose RUNNING report waits for [`RUNNING_REPORT_DELAY`]: one that ends
    /// first is reported FINISHED (or failed, cancelled) only — DEPLOYING → FINISHED is a
    /// transition the JobManager takes, and a no-op task then costs one report, not two.
    unreported_running: BTreeMap<ExecutionAttemptId, JobId>,
    partitions: Arc<ResultPartitionManager>,
    /// The hard cap on its exchange's network buffers (`taskmanager.network.memory`).
    network_pool: Arc<NetworkBufferPool>,
    /// This TaskManager's data connections to the producers its tasks read from.
    network: NetworkClient,
    /// The data connections consumers opened to this TaskManager.
    partition_server: Arc<PartitionRequestServer>,
    job_partitions: BTreeMap<JobId, BTreeSet<ResultPartitionId>>,
    /// The all-to-all producer lists sent with earlier tasks.
    producer_lists: ProducerListCache,
    /// Attempts cancelled before their `SubmitTasks` arrived (the two may overtake each other):
    /// they are refused when it does. Bounded.
    cancelled_early: VecDeque<ExecutionAttemptId>,
    /// When the JobManager last acknowledged a heartbeat (or the registration).
    last_acknowledged: Instant,
    /// This incarnation of the TaskManager, sent with every registration (see
    /// `TaskManagerSessionId`); drawn anew whenever it drops its work.
    session: TaskManagerSessionId,
    session_rng: NodeRng,
    /// `SubmitTasks` that arrived while a registration attempt was in flight and no leader
    /// session was known yet: each waits for the registration to settle, then is fenced.
    /// (The JobManager deploys right after it acknowledges a registration, and the task can be
    /// handled before the acknowledgement, which is an ask's reply, not a mailbox message.)
    awaiting_registration: Vec<tokio::sync::oneshot::Sender<()>>,
    /// A registration attempt held back until the orphaned tasks have ended (see
    /// `drop_all_work`): its number and timeout.
    deferred_attempt: Option<(u64, std::time::Duration)>,
    /// Told why, when the TaskManager stops on its own (a refused registration): the
    /// `flint taskmanager` process then exits with that reason.
    fatal_error: Option<tokio::sync::oneshot::Sender<String>>,
    /// Copies of the artifacts of the jobs running here.
    blob_cache: blob_cache::BlobCache,
}

/// Times a batch of state changes is sent before the TaskManager gives up on it (by then the
/// JobManager has surely dropped this TaskManager, which drops all its work).
const UPDATE_ATTEMPTS: u32 = 8;

/// Sends state changes until the JobManager acknowledges them, with a growing pause (100 ms,
/// doubling, at most 5 s). A repeat the JobManager already has changes nothing there.
async fn deliver_states(
    gateway: Recipient<UpdateTaskExecutionStates>,
    update: UpdateTaskExecutionStates,
    resource_id: ResourceId,
) {
    let mut backoff = crate::base::backoff::ExponentialBackoff::new(
        std::time::Duration::from_millis(100),
        std::time::Duration::from_secs(5),
    );
    let count = update.states.len();
    for attempt in 1..=UPDATE_ATTEMPTS {
        match gateway.send(update.clone()).await {
            Ok(_) => return,
            Err(error) => log::debug!(
                "task manager {resource_id}: {count} state changes not acknowledged (try \
                 {attempt}): {error}"
            ),
        }
        tokio::time::sleep(backoff.next_delay()).await;
    }
    log::warn!("task manager {resource_id}: gave up telling the JobManager {count} state changes");
}

impl TaskManager {
    /// A TaskManager that registers at `settings.job_manager` once started.
    pub fn new(settings: TaskManagerSettings, env: NodeEnv) -> Self {
        let working_dir = settings
            .spec
            .working_dir
            .join(settings.resource_id.as_str());
        let blob_cache = blob_cache::BlobCache::open(
            &(settings.spec.working_dir).join(format!("{}.blobs", settings.resource_id)),
        );
        let mut session_rng = env.rng("task-manager-session");
        let address = env.address_of(&Self::name_of(&settings.resource_id));
        Self {
            network: NetworkClient::with_round_bytes(
                address.clone(),
                env.rng("data-connections"),
                settings.spec.network.round_bytes,
            ),
            partition_server: Arc::new(PartitionRequestServer::new(
                settings.spec.network.notice_bytes,
            )),
            address,
            registration: Registration::new(settings.spec.registration),
            slots: SlotTable::new(settings.spec.slots),
            allocations: BTreeMap::new(),
            running: BTreeMap::new(),
            reporting: BTreeSet::new(),
            outgoing: Vec::new(),
            unreported_running: BTreeMap::new(),
            partitions: Arc::new(ResultPartitionManager::with_spill_budget(
                working_dir,
                settings.spec.spill_threshold_bytes,
                settings.spec.spill_budget_bytes,
                env.task_runner.io(),
            )),
            network_pool: NetworkBufferPool::new(
                settings.spec.network.memory,
                settings.spec.network.buffer_size,
            ),
            job_partitions: BTreeMap::new(),
            producer_lists: ProducerListCache::default(),
            cancelled_early: VecDeque::new(),
            settings,
            env,
            job_manager: None,
            last_acknowledged: Instant::now(),
            session: TaskManagerSessionId::generate(&mut session_rng),
            session_rng,
            awaiting_registration: Vec::new(),
            deferred_attempt: None,
            fatal_error: None,
            blob_cache,
        }
    }

    /// `fatal` hears why, if this TaskManager stops on its own (its registration refused).
    pub fn on_fatal_error(mut self, fatal: tokio::sync::oneshot::Sender<String>) -> Self {
        self.fatal_error = Some(fatal);
        self
    }

    /// The actor name of the TaskManager of `resource_id` on its node.
    pub fn name_of(resource_id: &ResourceId) -> String {
        crate::base::address::task_manager_name(resource_id)
    }

    /// Reports a task's state to the JobManager, with the others of this turn
    /// ([`FlushReports`]). A final state is listed in the heartbeats (as if the task still ran)
    /// until the JobManager acknowledged it or the delivery gave up: otherwise a final report
    /// lost once (retried after the ask timeout) let two heartbeats without the attempt arrive
    /// first, and the JobManager failed a finished task as vanished (issue 12: seed 1453, a job
    /// failed over a lossy network without a single fault).
    fn report(&mut self, state: TaskExecutionState, ctx: &mut Context<Self>) {
        if self.job_manager.is_none() {
            log::warn!(
                "task manager {}: no JobManager to tell that {} is {}",
                self.settings.resource_id,
                state.attempt,
                state.state
            );
            return;
        }
        if state.state.is_terminal() {
            self.reporting.insert(state.attempt);
        }
        if self.outgoing.is_empty() {
            ctx.notify(FlushReports);
        }
        self.outgoing.push(state);
    }

    fn submit_task(
        &mut self,
        mut descriptor: TaskDeploymentDescriptor,
        ctx: &mut Context<Self>,
    ) -> Result<(), TaskSubmissionError> {
        // First, so the lists it carries are cached even if it is refused for another reason
        // (the JobManager counts them sent).
        self.producer_lists.resolve(&mut descriptor)?;
        let attempt = descriptor.attempt;
        if self.running.contains_key(&attempt) {
            return Err(TaskSubmissionError::Duplicate(attempt));
        }
        if !self.settings.spec.registry.contains(&descriptor.operator) {
            return Err(TaskSubmissionError::UnknownOperator(
                descriptor.operator.to_string(),
            ));
        }
        if self.cancelled_early.contains(&attempt) {
            return Err(TaskSubmissionError::Cancelled(attempt));
        }
        let allocation_id = descriptor.allocation_id;
        if !self.allocations.contains_key(&allocation_id) {
            self.slots
                .allocate(allocation_id)
                .map_err(|e| TaskSubmissionError::NoFreeSlot(e.to_string()))?;
            self.allocations.insert(allocation_id, 0);
        }
        let network = self.settings.spec.network;
        let channels: usize = descriptor
            .inputs
            .iter()
            .map(|g| g.producers.locations().len())
            .sum();
        let floor = network.gate_floor(channels)
            + descriptor
                .outputs
                .iter()
                .filter(|o| !o.retained)
                .map(|o| network.output_floor(o.subpartitions))
                .sum::<u64>();
        let mut floor = match self.network_pool.reserve(floor) {
            Ok(floor) => floor,
            Err(refused) => {
                self.release_allocation_if_unused(allocation_id);
                return Err(TaskSubmissionError::NetworkMemory {
                    needed: refused.needed,
                    available: refused.free,
                    floors: refused.floors,
                });
            }
        };
        if let Err(error) = create_outputs(&self.partitions, &descriptor, &network, &mut floor) {
            self.release_allocation_if_unused(allocation_id);
            return Err(TaskSubmissionError::Partition(error.to_string()));
        }
        *self.allocations.entry(allocation_id).or_default() += 1;
        let job_id = descriptor.job_id;
        self.job_partitions
            .entry(job_id)
            .or_default()
            .extend(descriptor.outputs.iter().map(|o| o.partition));
        let cancelled = Arc::new(Cancellation::default());
        let metrics = Arc::new(TaskIoMetrics::default());
        self.running.insert(
            attempt,
            RunningTask {
                job_id,
                allocation_id,
                cancelled: cancelled.clone(),
                metrics: metrics.clone(),
                last_sample: (self.env.clock.now_millis(), 0),
                io: TaskIoSnapshot::default(),
                cancelled_at: None,
                orphaned: false,
                artifacts: descriptor.artifacts.clone(),
            },
        );
        let artifacts = self.acquire_artifacts(job_id, &descriptor.artifacts, ctx);
        let name = format!(
            "{} ({}/{})",
            descriptor.vertex_name,
            descriptor.subtask + 1,
            descriptor.parallelism
        );
        log::debug!(
            "task manager {}: running {name} as {attempt}",
            self.settings.resource_id
        );
        // Data connections to the producers' TaskManagers are opened here, on the actor's
        // arbiter (a task thread cannot start the proxy actors a remote peer needs).
        // Grouped by TaskManager once per shared list (the gates take the same grouping).
        let groupings: Vec<_> = descriptor
            .inputs
            .iter()
            .map(|gate| {
                self.network
                    .grouping(gate.producers.id(), gate.producers.locations())
            })
            .collect();
        // And one to this TaskManager itself (direct calls of its partition server): local
        // channels that stay empty end by one notice per partition, like remote ones, not by
        // a read and a wake-up each (at P = 10,000 on four TaskManagers a gate has 2,500).
        for (address, _) in groupings.iter().flat_map(|grouping| &grouping.groups) {
            if self.network.connection(address).is_some() {
                continue;
            }
            let peer = if *address == self.address {
                Some(Peer::Local(
                    self.partition_server.clone(),
                    self.partitions.clone(),
                ))
            } else {
                self.env.resolver.task_manager(address).map(Peer::Remote)
            };
            if let Some(peer) = peer
                && let Some(drive) = self.network.connect(address, peer)
            {
                // Its own task on this TaskManager's thread, not an item of the actor's
                // context: actix polls every context item whenever the actor wakes, so with a
                // connection per producer TaskManager each message here polled them all. It
                // ends when `stopping` closes the client (or with the node's task set).
                actix::spawn(drive);
            }
        }
        let environment = TaskEnvironment {
            descriptor,
            partitions: self.partitions.clone(),
            registry: self.settings.spec.registry.clone(),
            data_connections: self.network.clone(),
            groupings,
            network,
            gate_floor: floor,
            cancelled,
            metrics,
            clock: self.env.clock.clone(),
            working_dir: self.partitions.working_dir().to_owned(),
            managed_memory: self.settings.spec.managed_memory
                / u64::from(self.settings.spec.slots.max(1)),
            artifacts,
        };
        let done = ctx.address().recipient::<TaskEnded>();
        self.env.task_runner.run(
            name,
            Box::new(move |blocker: &dyn TaskBlocker| {
                let outcome = run_task(environment, blocker);
                done.do_send(TaskEnded { attempt, outcome });
            }),
        );
        if self.unreported_running.is_empty() {
            ctx.run_later(RUNNING_REPORT_DELAY, |act, ctx| act.report_running(ctx));
        }
        self.unreported_running.insert(attempt, job_id);
        Ok(())
    }

    /// Reports RUNNING for the tasks started [`RUNNING_REPORT_DELAY`] ago (or later) that still
    /// run.
    fn report_running(&mut self, ctx: &mut Context<Self>) {
        for (attempt, job_id) in std::mem::take(&mut self.unreported_running) {
            let running = TaskExecutionState {
                ended_early: false,
                unrecoverable: false,
                job_id,
                attempt,
                state: ExecutionState::Running,
                error: None,
                unavailable_partition: None,
                io: None,
                result: None,
            };
            self.report(running, ctx);
        }
    }

    /// The watchdog of a cancelled task (Flink's `TaskCancelerWatchDog`): a task still running
    /// `task.cancellation.interval` after its cancellation is interrupted again (its flag set,
    /// its current wait woken), and one still running after `task.cancellation.timeout` fails
    /// this TaskManager ([`fail_fatally`](Self::fail_fatally)): a task that ignores cancel can
    /// never keep a restart or a cancel waiting forever.
    fn press_cancellation(&mut self, attempt: ExecutionAttemptId, ctx: &mut Context<Self>) {
        let Some(task) = self.running.get(&attempt) else {
            return; // it stopped
        };
        let Some(cancelled_at) = task.cancelled_at else {
            return;
        };
        let CancellationConfig { interval, timeout } = self.settings.spec.cancellation;
        let waited = Instant::now().saturating_duration_since(cancelled_at);
        if waited >= timeout {
            self.fail_fatally(
                format!(
                    "task {attempt} did not stop within task.cancellation.timeout ({timeout:?}) of its cancellation"
                ),
                ctx,
            );
            return;
        }
        log::warn!(
            "task manager {}: task {attempt} still runs {waited:?} after its cancellation; interrupting it again",
            self.settings.resource_id
        );
        task.cancelled.cancel();
        let next = interval.min(timeout - waited);
        ctx.run_later(next, move |act, ctx| act.press_cancellation(attempt, ctx));
    }

    fn release_allocation_if_unused(&mut self, allocation_id: AllocationId) {
        if self.allocations.get(&allocation_id) == Some(&0) {
            self.allocations.remove(&allocation_id);
            self.slots.release(allocation_id);
        }
    }

    fn status(&self) -> TaskManagerStatus {
        TaskManagerStatus {
            resource_id: self.settings.resource_id.clone(),
            registration: self.registration.phase(),
            registration_attempts: self.registration.attempts(),
            slots_total: self.slots.total(),
            slots_free: self.slots.free(),
            leader_session_id: self.registration.session(),
            slots: self.slots.slots().to_vec(),
            running: self
                .running
                .iter()
                .map(|(attempt, task)| RunningTaskInfo {
                    attempt: *attempt,
                    job_id: task.job_id,
                    allocation_id: task.allocation_id,
                    cancel_requested: task.cancelled.is_cancelled(),
                    orphaned: task.orphaned,
                    io: task.io,
                })
                .collect(),
            job_partitions: self
                .job_partitions
                .iter()
                .map(|(job, partitions)| (*job, partitions.len() as u32))
                .collect(),
            spill: self.partitions.spill_usage(),
            network: self.network_pool.usage(),
        }
    }
}

/// Sends the state changes of this turn ([`TaskManager::report`]).
#[derive(Message)]
#[rtype(result = "()")]
struct FlushReports;

impl Handler<FlushReports> for TaskManager {
    type Result = ();

    fn handle(&mut self, _: FlushReports, ctx: &mut Context<Self>) {
        let states = std::mem::take(&mut self.outgoing);
        if states.is_empty() {
            return;
        }
        let Some(jm) = &self.job_manager else {
            log::warn!(
                "task manager {}: no JobManager to tell {} state changes",
                self.settings.resource_id,
                states.len()
            );
            for state in &states {
                self.reporting.remove(&state.attempt);
            }
            return;
        };
        // In order, each message within the transport's: results of several collect sinks
        // that ended in one turn could pass it together.
        let deliveries: Vec<_> = by_result_bytes(states)
            .into_iter()
            .map(|states| {
                let terminal: Vec<ExecutionAttemptId> = states
                    .iter()
                    .filter(|s| s.state.is_terminal())
                    .map(|s| s.attempt)
                    .collect();
                let delivery = deliver_states(
                    jm.update_task_execution_states.clone(),
                    UpdateTaskExecutionStates { states },
                    self.settings.resource_id.clone(),
                );
                (delivery, terminal)
            })
            .collect();
        let me = ctx.address();
        actix::spawn(async move {
            for (delivery, terminal) in deliveries {
                delivery.await;
                if !terminal.is_empty() {
                    me.do_send(FinalReportsSettled(terminal));
                }
            }
        });
    }
}

/// `states` in order, cut so that the results in each part add up to at most
/// [`MAX_TASK_RESULT_BYTES`] (no result is larger: a collect subtask stops at it).
fn by_result_bytes(states: Vec<TaskExecutionState>) -> Vec<Vec<TaskExecutionState>> {
    let mut parts: Vec<Vec<TaskExecutionState>> = Vec::new();
    let mut bytes = 0;
    for state in states {
        let size = state.result.as_ref().map_or(0, |r| r.len());
        match parts.last_mut() {
            Some(part) if bytes + size <= MAX_TASK_RESULT_BYTES => {
                bytes += size;
                part.push(state);
            }
            _ => {
                bytes = size;
                parts.push(vec![state]);
            }
        }
    }
    parts
}

/// Final state reports were acknowledged, or their delivery gave up.
#[derive(Message)]
#[rtype(result = "()")]
struct FinalReportsSettled(Vec<ExecutionAttemptId>);

impl Handler<FinalReportsSettled> for TaskManager {
    type Result = ();

    fn handle(&mut self, msg: FinalReportsSettled, _: &mut Context<Self>) {
        for attempt in msg.0 {
            self.reporting.remove(&attempt);
        }
    }
}

/// A task thread finished (the task's outcome).
#[derive(Message)]
#[rtype(result = "()")]
struct TaskEnded {
    attempt: ExecutionAttemptId,
    outcome: TaskOutcome,
}

impl Handler<TaskEnded> for TaskManager {
    type Result = ();

    fn handle(&mut self, msg: TaskEnded, ctx: &mut Context<Self>) {
        let Some(mut task) = self.running.remove(&msg.attempt) else {
            return;
        };
        // Its final state says it ran.
        self.unreported_running.remove(&msg.attempt);
        self.release_artifacts(task.job_id, &task.artifacts, ctx);
        let io = task
            .metrics
            .sample(self.env.clock.now_millis(), &mut task.last_sample);
        if let Some(count) = self.allocations.get_mut(&task.allocation_id) {
            *count -= 1;
            if *count == 0 {
                self.allocations.remove(&task.allocation_id);
                self.slots.release(task.allocation_id);
            }
        }
        if task.orphaned {
            log::info!(
                "task manager {}: cancelled task {} of an earlier JobManager connection ended {}; its slot is free",
                self.settings.resource_id,
                msg.attempt,
                msg.outcome.state
            );
            self.register_once_drained(ctx);
            return;
        }
        log::debug!(
            "task manager {}: {} ended {}",
            self.settings.resource_id,
            msg.attempt,
            msg.outcome.state
        );
        let ended = TaskExecutionState {
            job_id: task.job_id,
            attempt: msg.attempt,
            state: msg.outcome.state,
            error: msg.outcome.error,
            unavailable_partition: msg.outcome.unavailable_partition,
            io: Some(io),
            result: msg.outcome.result.map(bytes::Bytes::from),
            ended_early: msg.outcome.state == ExecutionState::Finished
                && msg.outcome.input.ended_early,
            unrecoverable: msg.outcome.unrecoverable,
        };
        self.report(ended, ctx);
    }
}

impl Handler<SubmitTasks> for TaskManager {
    type Result = ResponseActFuture<Self, Vec<Result<(), TaskSubmissionError>>>;

    fn handle(&mut self, msg: SubmitTasks, ctx: &mut Context<Self>) -> Self::Result {
        log::debug!(
            "task manager <- SubmitTasks ({} tasks)",
            msg.descriptors.len()
        );
        if self.registering_without_session() {
            // Probably the acknowledgement's leader, whose reply is not handled yet: decide
            // once the registration settles (bounded by the attempt's timeout).
            let (settled, waiter) = tokio::sync::oneshot::channel();
            self.awaiting_registration.push(settled);
            return Box::pin(
                async move { drop(waiter.await) }
                    .into_actor(self)
                    .map(move |(), act, ctx| act.fenced_submit(msg, ctx)),
            );
        }
        Box::pin(fut::ready(self.fenced_submit(msg, ctx)))
    }
}

impl TaskManager {
    /// Each task's answer, in order; all refused for a stale leader.
    fn fenced_submit(
        &mut self,
        msg: SubmitTasks,
        ctx: &mut Context<Self>,
    ) -> Vec<Result<(), TaskSubmissionError>> {
        if !self.fenced(msg.leader_session_id, "SubmitTasks") {
            return vec![Err(TaskSubmissionError::StaleLeader); msg.descriptors.len()];
        }
        let results = msg
            .descriptors
            .into_iter()
            .map(|descriptor| self.submit_task(descriptor, ctx))
            .collect();
        // Subscriptions that came before their partitions look again.
        self.partition_server.partitions_created();
        results
    }
}

impl Handler<CancelTasks> for TaskManager {
    type Result = ();

    fn handle(&mut self, msg: CancelTasks, ctx: &mut Context<Self>) {
        log::debug!(
            "task manager <- CancelTasks of {} attempts",
            msg.attempts.len()
        );
        if !self.fenced(msg.leader_session_id, "CancelTasks") {
            return;
        }
        for attempt in msg.attempts {
            self.cancel_task(attempt, ctx);
        }
    }
}

impl TaskManager {
    /// Cancels `attempt` if it runs here (the cancellation watchdog starts with the first
    /// cancel), or remembers it in case its submission is still on the way.
    fn cancel_task(&mut self, attempt: ExecutionAttemptId, ctx: &mut Context<Self>) {
        match self.running.get_mut(&attempt) {
            Some(task) => {
                task.cancelled.cancel();
                if task.cancelled_at.is_none() {
                    task.cancelled_at = Some(Instant::now());
                    let interval = self.settings.spec.cancellation.interval;
                    ctx.run_later(interval, move |act, ctx| {
                        act.press_cancellation(attempt, ctx)
                    });
                }
            }
            None => {
                log::debug!(
                    "task manager {}: cancel for {attempt}, which does not run here (yet)",
                    self.settings.resource_id,
                );
                if self.cancelled_early.len() == CANCELLED_EARLY_KEPT {
                    self.cancelled_early.pop_front();
                }
                self.cancelled_early.push_back(attempt);
            }
        }
    }
}

impl Handler<ReleaseJobPartitions> for TaskManager {
    type Result = ();

    fn handle(&mut self, msg: ReleaseJobPartitions, _: &mut Context<Self>) {
        log::debug!("task manager <- {msg:?}");
        if !self.fenced(msg.leader_session_id, "ReleaseJobPartitions") {
            return;
        }
        self.producer_lists.release_job(msg.job_id);
        for partition in self.job_partitions.remove(&msg.job_id).unwrap_or_default() {
            self.partitions.release(partition);
        }
    }
}

impl Handler<ReleasePartitions> for TaskManager {
    type Result = ();

    fn handle(&mut self, msg: ReleasePartitions, _: &mut Context<Self>) {
        log::debug!("task manager <- {msg:?}");
        if !self.fenced(msg.leader_session_id, "ReleasePartitions") {
            return;
        }
        let Some(held) = self.job_partitions.get_mut(&msg.job_id) else {
            return;
        };
        for partition in msg.partitions {
            if held.remove(&partition) {
                self.partitions.release(partition);
            }
        }
        for (partition, subpartition) in msg.subpartitions {
            if held.contains(&partition) {
                self.partitions
                    .release_subpartition(partition, subpartition);
            }
        }
        if held.is_empty() {
            self.job_partitions.remove(&msg.job_id);
        }
    }
}

impl Handler<PartitionRequests> for TaskManager {
    type Result = MessageResult<PartitionRequests>;

    fn handle(&mut self, msg: PartitionRequests, _: &mut Context<Self>) -> Self::Result {
        self.partition_server.apply(&self.partitions, msg);
        MessageResult(crate::messages::Acknowledge)
    }
}

impl Handler<PollPartitionData> for TaskManager {
    type Result = ResponseFuture<PartitionData>;

    fn handle(&mut self, msg: PollPartitionData, _: &mut Context<Self>) -> Self::Result {
        Box::pin(self.partition_server.poll(self.partitions.clone(), msg))
    }
}

/// A registration event the actor sends itself.
impl Actor for TaskManager {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        self.env.resolver.register(
            self.address.clone(),
            LocalActor::TaskManager(TaskManagerGateway::of(&ctx.address())),
        );
        ctx.run_interval(self.settings.spec.heartbeat.interval, |act, ctx| {
            act.heartbeat(ctx)
        });
        if let Some(leader) = self.settings.job_manager.clone() {
            self.job_manager = self.env.resolver.job_manager(&leader.address);
            self.on_event(RegistrationEvent::LeaderFound(leader), ctx);
        }
    }

    fn stopping(&mut self, _ctx: &mut Self::Context) -> Running {
        self.env.resolver.unregister(&self.address);
        self.network.close();
        for task in self.running.values() {
            task.cancelled.cancel();
        }
        for partition in self.partitions.partition_ids() {
            self.partitions.release(partition);
        }
        self.blob_cache.remove_all();
        Running::Stop
    }
}

impl Handler<GetTaskManagerStatus> for TaskManager {
    type Result = MessageResult<GetTaskManagerStatus>;

    fn handle(&mut self, _: GetTaskManagerStatus, _: &mut Context<Self>) -> Self::Result {
        log::debug!("task manager <- GetTaskManagerStatus");
        MessageResult(self.status())
    }
}

impl Handler<Shutdown> for TaskManager {
    type Result = ResponseActFuture<Self, ()>;

    /// A graceful stop: a registered TaskManager tells the JobManager it leaves (waiting at most
    /// a heartbeat interval), so its tasks fail over now rather than at a heartbeat timeout.
    fn handle(&mut self, _: Shutdown, _: &mut Context<Self>) -> Self::Result {
        log::debug!("task manager <- Shutdown");
        let goodbye = match (self.registration.instance_id(), &self.job_manager) {
            (Some(instance_id), Some(jm)) => Some(
                jm.disconnect_task_manager
                    .send(DisconnectTaskManager {
                        resource_id: self.settings.resource_id.clone(),
                        instance_id,
                    })
                    .timeout(self.settings.spec.heartbeat.interval),
            ),
            _ => None,
        };
        Box::pin(
            async move {
                if let Some(goodbye) = goodbye {
                    let _ = goodbye.await;
                }
            }
            .into_actor(self)
            .map(|(), _, ctx| ctx.stop()),
        )
    }
}

#[cfg(test)]
mod tests;
