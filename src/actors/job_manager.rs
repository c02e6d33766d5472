//! The JobManager: registers TaskManagers, watches their heartbeats, and is the resource
//! manager's source of truth about which workers are registered and which are idle.
//!
//! It owns the [`InstanceManager`] (who is registered, with which slots) and a
//! [`HeartbeatMonitor`]. Registration never waits for the resource manager: a TaskManager is
//! acknowledged at once and the RM is told with `NotifyResourceStarted` when one is connected.
//! A TaskManager silent for `heartbeat.timeout` is unregistered, told to `Disconnect` (in case it
//! is alive but was cut off) and reported to the RM with `ReleaseResource`, so the pool refills.
//! One whose heartbeat is merely overdue is asked for its status; if that cannot be delivered
//! (its actor or process is gone) it is lost at once, long before the timeout.
//!
//! This JobManager is the leader of its session for its whole life; leader election (a new
//! JobManager, a new session) is the job of whoever starts JobManagers.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use actix::clock::Instant;
use actix::prelude::*;

mod batch_recovery;
mod blob_server;
mod deployments;
mod dispatcher;
pub mod execution_graph;
pub mod heartbeat_monitor;
pub mod instance_manager;
mod jobs;
pub mod scheduler;

use self::execution_graph::ExecutionGraph;
use self::heartbeat_monitor::HeartbeatMonitor;
use self::instance_manager::InstanceManager;
use self::scheduler::{Scheduler, TaskRef};
use super::Shutdown;
use super::mailbox_stats::MailboxStats;
use crate::base::ids::{AllocationId, ClusterId, InstanceId, JobId, LeaderSessionId, ResourceId};
use crate::base::rng::NodeRng;
use crate::config::HeartbeatConfig;
use crate::env::NodeEnv;
use crate::env::events::ClusterEvent;
use crate::ha::{JobGraphWriter, JobResultStore, LeadershipLease, NoJobGraphs};
use crate::messages::job_manager::*;
use crate::messages::resource_manager::{
    NotifyResourceStarted, RegisterResourceManagerSuccessful, ReleaseResource,
    ResourceManagerGateway,
};
use crate::messages::task_manager::{Disconnect, GetTaskManagerStatus, TaskManagerGateway};
use crate::messages::{ActorAddress, RemovalReason};
use crate::operators::OperatorRegistry;
use crate::rpc::directory::LocalActor;

/// The actor's name on its node.
pub const NAME: &str = crate::base::address::JOB_MANAGER;

/// How many workers the resource manager was allowed to let go are remembered, to refuse them
/// if they register after all (their process is being stopped).
const RELEASED_MEMORY: usize = 4096;

/// What a JobManager is started with.
#[derive(Debug, Clone)]
pub struct JobManagerSettings {
    /// TaskManagers of other clusters are refused.
    pub cluster_id: ClusterId,
    /// Heartbeat interval (the sweep period) and timeout.
    pub heartbeat: HeartbeatConfig,
    /// How long an ask to the resource manager may take.
    pub ask_timeout: Duration,
    /// A task waiting longer for a slot fails with NoResourceAvailable.
    pub slot_request_timeout: Duration,
    /// Slots each new TaskManager will bring (for growing the pool with demand).
    pub slots_per_task_manager: u32,
    /// How long a pool grown for demand may sit idle before it shrinks back.
    pub taskmanager_timeout: Duration,
    /// The operators jobs may use.
    pub registry: OperatorRegistry,
    /// How long and how many ended jobs stay visible (`jobstore.*`).
    pub jobstore: crate::config::JobStoreConfig,
    /// What of a batch job survives a leader failover (`execution.batch.job-recovery.*`).
    pub batch_job_recovery: crate::config::BatchJobRecoveryConfig,
    /// The scheduler's strategies (`jobmanager.scheduler.*`).
    pub scheduler: crate::config::SchedulerConfig,
    /// `jobmanager.max-subtasks`: the subtasks of unfinished jobs held at most.
    pub max_subtasks: u64,
    /// `jobmanager.max-jobs`: the unfinished jobs held at most.
    pub max_jobs: u64,
    /// `resourcemanager.max-workers-per-job`: the TaskManagers one job's demand may ask for
    /// beyond the slots it holds.
    pub max_workers_per_job: u32,
}

/// See the module docs.
pub struct JobManager {
    settings: JobManagerSettings,
    env: NodeEnv,
    rng: NodeRng,
    address: ActorAddress,
    leader_session_id: LeaderSessionId,
    instances: InstanceManager,
    gateways: BTreeMap<ResourceId, TaskManagerGateway>,
    heartbeats: HeartbeatMonitor<ResourceId>,
    /// TaskManagers with an overdue heartbeat that were asked for their status, answer pending.
    probing: BTreeSet<ResourceId>,
    resource_manager: Option<ConnectedResourceManager>,
    heartbeat_timeouts: u64,
    /// Task attempts restarted by failover, over all jobs (kept here: ended jobs are forgotten).
    task_restarts: u64,
    scheduler: Scheduler,
    jobs: BTreeMap<JobId, ExecutionGraph>,
    /// Where accepted job graphs are persisted before their jobs run, and removed from once
    /// they ended (see `dispatcher`).
    job_graphs: std::rc::Rc<dyn JobGraphWriter>,
    /// How every job that ended ended: it never runs again, and is answered from here once its
    /// execution graph is gone (see `dispatcher`).
    job_results: JobResultStore,
    /// Jobs accepted whose graphs are being persisted: they start once stored.
    persisting: BTreeSet<JobId>,
    /// Jobs whose graph removal (after their result was kept) is under way.
    cleaning: BTreeSet<JobId>,
    /// Ended jobs still kept, by when they ended (ms since the epoch), oldest first: the next
    /// to forget, by count or by age.
    ended: BTreeSet<(u64, JobId)>,
    /// The jobs that deployed to each TaskManager and did not end: who loses what with it.
    jobs_on: BTreeMap<ResourceId, BTreeSet<JobId>>,
    /// A [`jobs::ServeQueue`] is on its way (the last serve used its budget).
    serve_pending: bool,
    /// Placed tasks not sent yet, per TaskManager (see `deployments`).
    outbox: BTreeMap<ResourceId, Vec<deployments::Deployment>>,
    /// How long messages take here (for `/metrics`).
    mailbox: MailboxStats,
    pool: jobs::PoolView,
    /// Workers let go for the resource manager, oldest first (bounded): refused if they
    /// register after all.
    released: std::collections::VecDeque<ResourceId>,
    /// Checked before every deployment (high availability; see [`crate::ha::lease`]).
    lease: LeadershipLease,
    /// Job events for the event log, and finished work taken back after a failover.
    batch_recovery: batch_recovery::BatchRecovery,
    /// The artifacts jobs ship (see `blob_server`).
    blobs: Option<crate::env::blob_store::BlobStore>,
    /// Artifact bytes sent to TaskManagers.
    blob_bytes_served: u64,
}

/// The resource manager registered here, watched by heartbeat like a TaskManager.
struct ConnectedResourceManager {
    address: ActorAddress,
    gateway: ResourceManagerGateway,
    last_heard: Instant,
}

impl JobManager {
    /// A JobManager leading session `leader_session_id`.
    pub fn new(
        settings: JobManagerSettings,
        leader_session_id: LeaderSessionId,
        env: NodeEnv,
    ) -> Self {
        Self {
            rng: env.rng(NAME),
            address: env.address_of(NAME),
            scheduler: Scheduler::new(env.rng("scheduler"))
                .with_strategies(settings.scheduler)
                .with_job_cap(
                    u64::from(settings.max_workers_per_job)
                        * u64::from(settings.slots_per_task_manager.max(1)),
                ),
            heartbeats: HeartbeatMonitor::new(settings.heartbeat.timeout),
            settings,
            env,
            leader_session_id,
            instances: InstanceManager::new(),
            gateways: BTreeMap::new(),
            probing: BTreeSet::new(),
            resource_manager: None,
            heartbeat_timeouts: 0,
            task_restarts: 0,
            jobs: BTreeMap::new(),
            job_graphs: std::rc::Rc::new(NoJobGraphs),
            job_results: JobResultStore::in_memory(),
            persisting: BTreeSet::new(),
            cleaning: BTreeSet::new(),
            ended: BTreeSet::new(),
            jobs_on: BTreeMap::new(),
            serve_pending: false,
            outbox: BTreeMap::new(),
            mailbox: MailboxStats::default(),
            pool: jobs::PoolView::default(),
            released: std::collections::VecDeque::new(),
            lease: LeadershipLease::unbounded(),
            batch_recovery: batch_recovery::BatchRecovery::default(),
            blobs: None,
            blob_bytes_served: 0,
        }
    }

    /// Serves the artifacts of `blobs` to TaskManagers (`FetchBlob`); without a store every
    /// fetch is refused, and so is every job naming an artifact (at the REST API).
    pub fn with_blob_store(mut self, blobs: Option<crate::env::blob_store::BlobStore>) -> Self {
        self.blobs = blobs;
        self
    }

    /// Deploys only while `lease` is held (a leader elected through high availability).
    pub fn with_leadership_lease(mut self, lease: LeadershipLease) -> Self {
        self.lease = lease;
        self
    }

    /// High availability: persists job graphs with `job_graphs` (before their jobs run) and
    /// keeps results in `job_results` (the store a new leader reads); without, graphs are not
    /// persisted and results live in memory.
    pub fn with_job_stores(
        mut self,
        job_graphs: std::rc::Rc<dyn JobGraphWriter>,
        job_results: JobResultStore,
    ) -> Self {
        self.job_graphs = job_graphs;
        self.job_results = job_results;
        self
    }

    /// This JobManager's address on its node.
    pub fn address(&self) -> &ActorAddress {
        &self.address
    }

    fn refuse(reason: RefusalReason) -> RegistrationResponse {
        RegistrationResponse::RefuseRegistration(RefuseRegistration { reason })
    }

    fn register_task_manager(
        &mut self,
        mut msg: RegisterTaskManager,
        ctx: &mut Context<Self>,
    ) -> RegistrationResponse {
        let offered = std::mem::take(&mut msg.partitions);
        let resource_id = msg.resource_id;
        if msg.cluster_id != self.settings.cluster_id {
            log::warn!(
                "job manager: refused TaskManager {resource_id} of cluster `{}`",
                msg.cluster_id
            );
            return Self::refuse(RefusalReason::WrongCluster {
                expected: self.settings.cluster_id.clone(),
                offered: msg.cluster_id,
            });
        }
        if msg.number_of_slots == 0 {
            log::warn!("job manager: refused TaskManager {resource_id} without slots");
            return Self::refuse(RefusalReason::NoSlots);
        }
        if msg.number_of_slots > MAX_SLOTS_PER_TASK_MANAGER {
            log::warn!(
                "job manager: refused TaskManager {resource_id} offering {} slots",
                msg.number_of_slots
            );
            return Self::refuse(RefusalReason::TooManySlots {
                offered: msg.number_of_slots,
                max: MAX_SLOTS_PER_TASK_MANAGER,
            });
        }
        if msg.location.resource_id != resource_id {
            log::warn!(
                "job manager: refused a registration naming {resource_id} and {}",
                msg.location.resource_id
            );
            return Self::refuse(RefusalReason::InconsistentResourceId {
                resource_id,
                location: msg.location.resource_id,
            });
        }
        if self.released.contains(&resource_id) {
            log::warn!(
                "job manager: refused TaskManager {resource_id}: the resource manager released it"
            );
            return Self::refuse(RefusalReason::Released { resource_id });
        }
        if let Some(existing) = self.instances.get(&resource_id) {
            if existing.info.location.address == msg.location.address
                && existing.session == msg.session
            {
                log::debug!("job manager: TaskManager {resource_id} is registered already");
                let instance_id = existing.info.instance_id;
                self.heartbeats.record(resource_id.clone(), Instant::now());
                // Tell the resource manager again: its first notification may have been lost.
                self.notify_resource_started(resource_id);
                return RegistrationResponse::AlreadyRegistered(AlreadyRegistered {
                    instance_id,
                    leader_session_id: self.leader_session_id,
                });
            }
            log::info!(
                "job manager: TaskManager {resource_id} registers anew (session {}, address {}); dropping the old instance",
                msg.session,
                msg.location.address
            );
            self.unregister(&resource_id, RemovalReason::Replaced, ctx);
        }
        let Some(gateway) = self.env.resolver.task_manager(&msg.location.address) else {
            log::warn!(
                "job manager: refused TaskManager {resource_id}: cannot reach {}",
                msg.location.address
            );
            return Self::refuse(RefusalReason::Unreachable {
                address: msg.location.address,
            });
        };
        let instance_id = InstanceId::generate(&mut self.rng);
        let slots = msg.number_of_slots;
        // An empty list declares nothing: such a TaskManager is taken to run anything.
        let operators = (!msg.fingerprint.operators.is_empty())
            .then(|| std::sync::Arc::new(msg.fingerprint.operators.iter().cloned().collect()));
        self.instances.register(
            instance_id,
            msg.location,
            msg.hardware,
            slots,
            self.env.clock.now_millis(),
            msg.session,
            msg.fingerprint,
        );
        self.gateways.insert(resource_id.clone(), gateway);
        self.heartbeats.record(resource_id.clone(), Instant::now());
        log::info!(
            "job manager: registered TaskManager {resource_id} as {instance_id} with {slots} slots"
        );
        self.env.events.emit(ClusterEvent::TaskManagerRegistered {
            resource_id: resource_id.clone(),
            instance_id,
            slots,
        });
        self.notify_resource_started(resource_id.clone());
        self.scheduler
            .add_task_manager_running(resource_id.clone(), slots, operators);
        self.take_offered_partitions(&resource_id, offered, ctx);
        self.serve_queue(ctx);
        RegistrationResponse::AcknowledgeRegistration(AcknowledgeRegistration {
            instance_id,
            leader_session_id: self.leader_session_id,
        })
    }

    /// Tells the resource manager, without waiting for it, that a worker registered.
    fn notify_resource_started(&self, resource_id: ResourceId) {
        let Some(rm) = &self.resource_manager else {
            return;
        };
        let request = rm
            .gateway
            .notify_resource_started
            .send(NotifyResourceStarted {
                leader_session_id: self.leader_session_id,
                resource_id: resource_id.clone(),
            })
            .timeout(self.settings.ask_timeout);
        actix::spawn(async move {
            if let Err(error) = request.await {
                log::warn!(
                    "job manager: resource manager did not acknowledge {resource_id}: {error}"
                );
            }
        });
    }

    /// Forgets a TaskManager. True if it was registered.
    /// Forgets a TaskManager; its tasks fail over. True if it was registered.
    fn unregister(
        &mut self,
        resource_id: &ResourceId,
        reason: RemovalReason,
        ctx: &mut Context<Self>,
    ) -> bool {
        self.heartbeats.remove(resource_id);
        self.probing.remove(resource_id);
        self.gateways.remove(resource_id);
        if self.instances.unregister(resource_id).is_none() {
            return false;
        }
        self.forget_offered(resource_id);
        self.fail_over_task_manager(resource_id, ctx);
        log::info!("job manager: unregistered TaskManager {resource_id}: {reason}");
        self.env.events.emit(ClusterEvent::TaskManagerLost {
            resource_id: resource_id.clone(),
            reason,
        });
        true
    }

    fn check_heartbeats(&mut self, ctx: &mut Context<Self>) {
        let now = Instant::now();
        if let Some(rm) = &self.resource_manager
            && now.saturating_duration_since(rm.last_heard) > self.settings.heartbeat.timeout
        {
            log::warn!(
                "job manager: resource manager {} silent for over {:?}; forgetting it until it registers again",
                rm.address,
                self.settings.heartbeat.timeout
            );
            self.resource_manager = None;
        }
        for resource_id in self.heartbeats.take_expired(now) {
            if self.lose_task_manager(&resource_id, RemovalReason::HeartbeatTimeout, ctx) {
                self.heartbeat_timeouts += 1;
            }
        }
        let overdue = self
            .heartbeats
            .silent_for(now, self.settings.heartbeat.interval);
        for resource_id in overdue {
            self.probe_task_manager(resource_id, ctx);
        }
    }

    /// A TaskManager whose heartbeat is overdue is asked for its status. If the ask cannot be
    /// delivered within a heartbeat interval — its actor stopped, or its process is gone and
    /// the transport cannot reconnect — it is lost now rather than at the heartbeat timeout
    /// (the role of Flink's `heartbeat.rpc-failure-threshold`). A slow answer proves nothing
    /// either way: the heartbeat timeout still decides then.
    fn probe_task_manager(&mut self, resource_id: ResourceId, ctx: &mut Context<Self>) {
        let (Some(gateway), Some(instance)) = (
            self.gateways.get(&resource_id),
            self.instances.get(&resource_id),
        ) else {
            return;
        };
        if !self.probing.insert(resource_id.clone()) {
            return;
        }
        let instance_id = instance.info.instance_id;
        gateway
            .get_status
            .send(GetTaskManagerStatus)
            .timeout(self.settings.heartbeat.interval)
            .into_actor(self)
            .map(move |result, act, ctx| {
                act.probing.remove(&resource_id);
                let same_registration = act
                    .instances
                    .get(&resource_id)
                    .is_some_and(|i| i.info.instance_id == instance_id);
                if let Err(MailboxError::Closed) = result
                    && same_registration
                {
                    log::warn!(
                        "job manager: TaskManager {resource_id} missed its heartbeat and cannot be reached"
                    );
                    act.lose_task_manager(&resource_id, RemovalReason::Unreachable, ctx);
                }
            })
            .spawn(ctx);
    }

    /// A TaskManager is lost (silent, or unreachable): unregister it, tell it (it may be alive
    /// but cut off, and should register again once it hears us) and have the resource manager
    /// replace it. True if it was registered.
    pub(crate) fn lose_task_manager(
        &mut self,
        resource_id: &ResourceId,
        reason: RemovalReason,
        ctx: &mut Context<Self>,
    ) -> bool {
        let gateway = self.gateways.get(resource_id).cloned();
        if !self.unregister(resource_id, reason, ctx) {
            return false;
        }
        if let Some(gateway) = gateway {
            gateway.disconnect.do_send(Disconnect {
                leader_session_id: self.leader_session_id,
                reason,
            });
        }
        if let Some(rm) = &self.resource_manager {
            rm.gateway.release_resource.do_send(ReleaseResource {
                leader_session_id: self.leader_session_id,
                resource_id: resource_id.clone(),
                reason,
            });
        }
        true
    }

    fn status(&self) -> JobManagerStatus {
        let mut shared_slots = self.scheduler.shared_slots();
        let task_managers = self
            .instances
            .infos()
            .into_iter()
            .map(|mut info| {
                // The scheduler's view of slots is the authoritative one.
                let used = self.scheduler.used_slots(&info.resource_id);
                info.slots_free = info.slots_total.saturating_sub(used);
                info.allocated_slots = shared_slots
                    .remove(&info.resource_id)
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(allocation_id, tasks)| self.allocated_slot(allocation_id, tasks))
                    .collect();
                info
            })
            .collect();
        // Unregistering a TaskManager removes it from the scheduler too; slots left here would
        // be invisible in the status, so say so.
        for (resource_id, slots) in shared_slots {
            log::error!(
                "job manager: the scheduler holds {} slots on {resource_id}, which is not registered",
                slots.len()
            );
        }
        JobManagerStatus {
            leader_session_id: self.leader_session_id,
            resource_manager_connected: self.resource_manager.is_some(),
            task_managers,
            heartbeat_timeouts: self.heartbeat_timeouts,
            task_restarts: self.task_restarts,
            blob_bytes_served: self.blob_bytes_served,
            mailbox: MailboxFigures {
                max_handle_us: self.mailbox.longest_handler().0,
                longest_handler: self.mailbox.longest_handler().1.to_owned(),
                last_delay_us: self.mailbox.last_delay_us(),
                max_delay_us: self.mailbox.max_delay_us(),
            },
            slot_requests_queued: self.scheduler.queued() as u64,
            slot_request_bulks_queued: self.scheduler.queued_bulks() as u64,
        }
    }

    fn allocated_slot(
        &self,
        allocation_id: AllocationId,
        tasks: Vec<TaskRef>,
    ) -> AllocatedSlotInfo {
        let tasks = tasks
            .into_iter()
            .map(|task| SlotTaskInfo {
                job_id: task.job,
                vertex: task.vertex as u32,
                subtask: task.subtask,
                attempt: self
                    .jobs
                    .get(&task.job)
                    .and_then(|job| job.slot_task_attempt(&task)),
            })
            .collect();
        AllocatedSlotInfo {
            allocation_id,
            tasks,
        }
    }
}

impl Actor for JobManager {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        self.env.resolver.register(
            self.address.clone(),
            LocalActor::JobManager(JobManagerGateway::of(&ctx.address())),
        );
        self.open_recovery_window(ctx);
        ctx.run_interval(self.settings.heartbeat.interval, |act, ctx| {
            let _timed = act.mailbox.time("heartbeat check");
            act.check_heartbeats(ctx);
            // Through the mailbox, behind whatever waits there: how long a message waits.
            ctx.address().do_send(MailboxProbe {
                sent: Instant::now(),
            });
        });
        let sweep = (self.settings.slot_request_timeout / 4).clamp(
            std::time::Duration::from_millis(10),
            std::time::Duration::from_secs(1),
        );
        ctx.run_interval(sweep, |act, ctx| {
            let _timed = act.mailbox.time("slot request sweep");
            act.expire_slot_requests(ctx);
        });
        log::info!(
            "job manager started at {} (leader session {})",
            self.address,
            self.leader_session_id
        );
        // Jobs that ended under an earlier leader whose cleanup it did not finish.
        for job_id in self.job_results.dirty_job_ids() {
            self.clean_up(job_id, ctx);
        }
    }

    fn stopping(&mut self, _ctx: &mut Self::Context) -> Running {
        self.env.resolver.unregister(&self.address);
        Running::Stop
    }
}

impl Handler<RegisterTaskManager> for JobManager {
    type Result = MessageResult<RegisterTaskManager>;

    fn handle(&mut self, msg: RegisterTaskManager, ctx: &mut Context<Self>) -> Self::Result {
        let _timed = self.mailbox.time("RegisterTaskManager");
        log::debug!("job manager <- {msg:?}");
        MessageResult(self.register_task_manager(msg, ctx))
    }
}

impl Handler<RegisterResourceManager> for JobManager {
    type Result = MessageResult<RegisterResourceManager>;

    fn handle(&mut self, msg: RegisterResourceManager, _: &mut Context<Self>) -> Self::Result {
        let _timed = self.mailbox.time("RegisterResourceManager");
        log::debug!("job manager <- {msg:?}");
        if msg.leader_session_id != self.leader_session_id {
            // It looks for another leader (or this one's successor): the answer names our
            // session, which it will not accept.
            log::warn!(
                "job manager: resource manager {} registers for leader session {}, not {}; not connecting it",
                msg.resource_manager,
                msg.leader_session_id,
                self.leader_session_id
            );
            return MessageResult(RegisterResourceManagerSuccessful {
                leader_session_id: self.leader_session_id,
                job_manager: self.address.clone(),
                registered: Vec::new(),
                required_workers: 0,
            });
        }
        match self.env.resolver.resource_manager(&msg.resource_manager) {
            Some(gateway) => {
                log::info!(
                    "job manager: resource manager {} connected",
                    msg.resource_manager
                );
                self.resource_manager = Some(ConnectedResourceManager {
                    address: msg.resource_manager.clone(),
                    gateway,
                    last_heard: Instant::now(),
                });
                self.pool.max = msg.max_pool_size;
            }
            None => log::error!(
                "job manager: cannot reach resource manager {}; it will not hear of registrations",
                msg.resource_manager
            ),
        }
        MessageResult(RegisterResourceManagerSuccessful {
            leader_session_id: self.leader_session_id,
            job_manager: self.address.clone(),
            registered: self.instances.resource_ids(),
            required_workers: self.pool.declared,
        })
    }
}

impl Handler<ResourceRemoved> for JobManager {
    type Result = ();

    fn handle(&mut self, msg: ResourceRemoved, ctx: &mut Context<Self>) {
        let _timed = self.mailbox.time("ResourceRemoved");
        log::debug!("job manager <- {msg:?}");
        if msg.leader_session_id != self.leader_session_id {
            log::warn!(
                "job manager: ignoring ResourceRemoved for {} meant for leader session {}",
                msg.resource_id,
                msg.leader_session_id
            );
            return;
        }
        if !self.unregister(&msg.resource_id, msg.reason, ctx) {
            log::debug!(
                "job manager: ResourceRemoved for {}, which is not registered",
                msg.resource_id
            );
        }
    }
}

impl Handler<Heartbeat> for JobManager {
    type Result = MessageResult<Heartbeat>;

    fn handle(&mut self, msg: Heartbeat, ctx: &mut Context<Self>) -> Self::Result {
        let _timed = self.mailbox.time("Heartbeat");
        log::debug!("job manager <- {msg:?}");
        let now_ms = self.env.clock.now_millis();
        let running: std::collections::BTreeSet<_> = msg.report.running.iter().copied().collect();
        if self
            .instances
            .heartbeat(&msg.resource_id, msg.instance_id, &msg.report, now_ms)
        {
            self.heartbeats
                .record(msg.resource_id.clone(), Instant::now());
            self.reconcile_tasks(&msg.resource_id, &running, &msg.report.io, ctx);
            self.release_ended_partitions(&msg.resource_id, &msg.report.partitions_of);
            MessageResult(HeartbeatResponse::Acknowledged)
        } else {
            log::info!(
                "job manager: heartbeat from {} as {}, which is not registered; asking it to register",
                msg.resource_id,
                msg.instance_id
            );
            MessageResult(HeartbeatResponse::UnknownTaskManager)
        }
    }
}

impl Handler<ReleaseIdleTaskManagers> for JobManager {
    type Result = MessageResult<ReleaseIdleTaskManagers>;

    fn handle(&mut self, msg: ReleaseIdleTaskManagers, ctx: &mut Context<Self>) -> Self::Result {
        let _timed = self.mailbox.time("ReleaseIdleTaskManagers");
        log::debug!("job manager <- {msg:?}");
        let count = msg.count as usize;
        // Pending workers first: unknown here, they may go (and are refused if they register
        // after all); registered here already, only if idle.
        let mut released: Vec<ResourceId> = Vec::new();
        for resource_id in msg.pending {
            if released.len() == count {
                break;
            }
            let may_go = match self.instances.get(&resource_id) {
                None => true,
                Some(instance) => instance.is_idle() && !self.is_busy(&resource_id),
            };
            if may_go && !released.contains(&resource_id) {
                released.push(resource_id);
            }
        }
        let more = self
            .instances
            .idle_newest_first(count - released.len(), |id| {
                self.is_busy(id) || released.contains(id)
            });
        released.extend(more);
        for resource_id in &released {
            self.unregister(resource_id, RemovalReason::Idle, ctx);
            if self.released.len() == RELEASED_MEMORY {
                self.released.pop_front();
            }
            self.released.push_back(resource_id.clone());
        }
        if released.len() < msg.count as usize {
            log::info!(
                "job manager: asked to release {} idle TaskManagers, {} are idle",
                msg.count,
                released.len()
            );
        }
        MessageResult(IdleTaskManagersReleased {
            leader_session_id: self.leader_session_id,
            released,
        })
    }
}

impl Handler<ResourceManagerHeartbeat> for JobManager {
    type Result = MessageResult<ResourceManagerHeartbeat>;

    fn handle(&mut self, msg: ResourceManagerHeartbeat, _: &mut Context<Self>) -> Self::Result {
        let _timed = self.mailbox.time("ResourceManagerHeartbeat");
        log::debug!("job manager <- {msg:?}");
        match self.resource_manager.as_mut() {
            Some(rm) if rm.address == msg.resource_manager => {
                rm.last_heard = Instant::now();
                self.pool.max = msg.max_pool_size;
                MessageResult(ResourceManagerHeartbeatResponse::Acknowledged {
                    leader_session_id: self.leader_session_id,
                    registered: self.instances.resource_ids(),
                    required_workers: self.pool.declared,
                })
            }
            _ => MessageResult(ResourceManagerHeartbeatResponse::UnknownResourceManager),
        }
    }
}

impl Handler<GetJobManagerStatus> for JobManager {
    type Result = MessageResult<GetJobManagerStatus>;

    fn handle(&mut self, _: GetJobManagerStatus, _: &mut Context<Self>) -> Self::Result {
        let _timed = self.mailbox.time("GetJobManagerStatus");
        log::debug!("job manager <- GetJobManagerStatus");
        MessageResult(self.status())
    }
}

impl Handler<DisconnectTaskManager> for JobManager {
    type Result = MessageResult<DisconnectTaskManager>;

    fn handle(&mut self, msg: DisconnectTaskManager, ctx: &mut Context<Self>) -> Self::Result {
        let _timed = self.mailbox.time("DisconnectTaskManager");
        log::debug!("job manager <- {msg:?}");
        let current = self
            .instances
            .get(&msg.resource_id)
            .is_some_and(|i| i.info.instance_id == msg.instance_id);
        if current {
            log::info!(
                "job manager: TaskManager {} leaves the cluster",
                msg.resource_id
            );
            self.lose_task_manager(&msg.resource_id, RemovalReason::Left, ctx);
        }
        MessageResult(crate::messages::Acknowledge)
    }
}

/// Sent to ourselves through the mailbox to measure how long a message waits there.
#[derive(Message)]
#[rtype(result = "()")]
struct MailboxProbe {
    sent: Instant,
}

impl Handler<MailboxProbe> for JobManager {
    type Result = ();

    fn handle(&mut self, msg: MailboxProbe, _: &mut Context<Self>) {
        self.mailbox.probe_arrived(msg.sent);
    }
}

impl Handler<Shutdown> for JobManager {
    type Result = ();

    fn handle(&mut self, _: Shutdown, ctx: &mut Context<Self>) {
        let _timed = self.mailbox.time("Shutdown");
        log::debug!("job manager <- Shutdown");
        ctx.stop();
    }
}

#[cfg(test)]
mod tests;
