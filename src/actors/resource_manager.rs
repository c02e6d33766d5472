//! The FlinkResourceManager: keeps the worker pool at its designated size.
//!
//! It owns the pool's bookkeeping ([`WorkerPool`]) and a [`WorkerDriver`]; it never runs tasks and
//! never decides which worker is idle (the JobManager knows that). It only starts workers once it
//! is registered at a JobManager leader, so after a leader change it first learns which
//! TaskManagers the new leader already has and counts them, instead of starting duplicates. The
//! connection to the JobManager (registration, heartbeats, reconciliation) lives in
//! `connection`.
//!
//! Whatever the resource manager releases, it also reports to the JobManager
//! (`ResourceRemoved`, idempotent there), so the JobManager never keeps a TaskManager the driver
//! is stopping; and a released worker that registers again anyway is reported again.
//!
//! Timers: the pool check (`resourcemanager.check-interval`), the heartbeat to the JobManager,
//! the registration retry (exponential), the pause after start failures (exponential, capped)
//! and each worker's registration deadline, counted from its request. All run on actix timers,
//! so a paused tokio clock drives them in tests.

mod connection;
pub mod driver;
pub mod worker_pool;

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use actix::clock::Instant;
use actix::prelude::*;

use self::worker_pool::{RegistrationOutcome, WorkerPool, WorkerState};
use crate::actors::resource_manager::driver::{WorkerDriver, WorkerRequest};
use crate::base::backoff::ExponentialBackoff;
use crate::base::ids::{LeaderSessionId, ResourceId};
use crate::config::{HeartbeatConfig, ResourceManagerConfig};
use crate::env::NodeEnv;
use crate::env::events::ClusterEvent;
use crate::ha::LeadershipLease;
use crate::messages::job_manager::{
    IdleTaskManagersReleased, JobManagerGateway, ReleaseIdleTaskManagers, ResourceRemoved,
};
use crate::messages::resource_manager::*;
use crate::messages::{Acknowledge, ActorAddress, RemovalReason, is_current_leader};
use crate::rpc::directory::LocalActor;

/// The actor's name on its node.
pub const NAME: &str = crate::base::address::RESOURCE_MANAGER;

/// How many released resource ids are remembered, to catch a released worker registering again.
const RELEASED_MEMORY: usize = 4096;

/// What a resource manager is started with.
#[derive(Debug, Clone)]
pub struct ResourceManagerSettings {
    /// The pool: size, timers, backoffs.
    pub pool: ResourceManagerConfig,
    /// Heartbeats to the JobManager.
    pub heartbeat: HeartbeatConfig,
    /// How long an ask to the JobManager may take.
    pub ask_timeout: Duration,
}

/// The JobManager leader the RM knows of.
#[derive(Debug)]
struct Leader {
    address: ActorAddress,
    session: LeaderSessionId,
    gateway: Option<JobManagerGateway>,
    connected: bool,
    /// When the leader last answered (registration or heartbeat).
    last_heard: Instant,
}

/// See the module docs.
pub struct FlinkResourceManager {
    settings: ResourceManagerSettings,
    env: NodeEnv,
    address: ActorAddress,
    /// Prefix of the resource ids this RM chooses: 32 random bits per RM, and ids already in the
    /// pool are skipped, so a successor never collides with workers it reconciles.
    id_prefix: String,
    next_worker: u64,
    pool: WorkerPool,
    driver: Box<dyn WorkerDriver>,
    leader: Option<Leader>,
    /// Registration attempts at the leader; answers and retries of older attempts are ignored.
    registration_attempt: u64,
    registration_backoff: ExponentialBackoff,
    start_failures: u64,
    consecutive_start_failures: u32,
    start_backoff: ExponentialBackoff,
    /// No worker is started before this instant (the backoff after start failures).
    paused_until: Option<Instant>,
    resume_check: Option<SpawnHandle>,
    /// The generation of the `ReleaseIdleTaskManagers` ask in flight, if any.
    release_in_flight: Option<u64>,
    release_generation: u64,
    /// Each pending worker's registration deadline generation: a timer fires only if the worker
    /// is still pending under the same generation (it may have registered and been demoted).
    registration_deadlines: BTreeMap<ResourceId, u64>,
    deadline_generation: u64,
    /// Recently released workers, oldest first, each with the count of releases up to it.
    released: VecDeque<(ResourceId, u64)>,
    /// Workers released so far.
    releases: u64,
    stopping: bool,
    /// The driver finds a previous leader's workers (`WorkersRecovered`) and no worker is
    /// started before it reported them, or before this deadline if it never does: a worker
    /// started meanwhile would make the pool too large, and a shrink could then let go of a
    /// recovered one holding a job's finished results.
    awaiting_recovery: Option<Instant>,
    /// Checked before every worker start and release (high availability; see
    /// [`crate::ha::lease`]).
    lease: LeadershipLease,
}

impl FlinkResourceManager {
    /// A resource manager that gets workers from `driver`. It starts workers once a
    /// `NewLeaderAvailable` has told it where the JobManager is and it has registered there.
    pub fn new(
        settings: ResourceManagerSettings,
        driver: Box<dyn WorkerDriver>,
        env: NodeEnv,
    ) -> Self {
        let id_prefix = format!("tm-{:08x}", env.rng(NAME).next_u64() as u32);
        let pool = &settings.pool;
        Self {
            address: env.address_of(NAME),
            pool: WorkerPool::new(pool.pool_size, pool.max_pool_size),
            registration_backoff: ExponentialBackoff::new(
                pool.registration.initial_backoff,
                pool.registration.max_backoff,
            ),
            start_backoff: ExponentialBackoff::new(
                pool.start_worker.initial_backoff,
                pool.start_worker.max_backoff,
            ),
            settings,
            env,
            id_prefix,
            next_worker: 0,
            driver,
            leader: None,
            registration_attempt: 0,
            start_failures: 0,
            consecutive_start_failures: 0,
            paused_until: None,
            resume_check: None,
            release_in_flight: None,
            release_generation: 0,
            registration_deadlines: BTreeMap::new(),
            deadline_generation: 0,
            released: VecDeque::new(),
            releases: 0,
            stopping: false,
            awaiting_recovery: None,
            lease: LeadershipLease::unbounded(),
        }
    }

    /// Starts and releases workers only while `lease` is held (the resource manager of a
    /// leader elected through high availability).
    pub fn with_leadership_lease(mut self, lease: LeadershipLease) -> Self {
        self.lease = lease;
        self
    }

    fn connected_leader(&self) -> Option<(&JobManagerGateway, LeaderSessionId)> {
        let leader = self.leader.as_ref().filter(|l| l.connected)?;
        Some((leader.gateway.as_ref()?, leader.session))
    }

    fn leader_session(&self) -> Option<LeaderSessionId> {
        self.leader.as_ref().map(|l| l.session)
    }

    fn next_resource_id(&mut self) -> ResourceId {
        loop {
            self.next_worker += 1;
            let id = ResourceId::new(format!("{}-{}", self.id_prefix, self.next_worker));
            if !self.pool.contains(&id) {
                return id;
            }
        }
    }

    /// `check_workers_pool`: start the missing workers, and while the pool is too large ask the
    /// JobManager which workers may go (pending ones first).
    fn check_workers_pool(&mut self, ctx: &mut Context<Self>) {
        if self.stopping {
            return;
        }
        self.start_missing_workers(ctx);
        self.release_surplus(ctx);
    }

    /// Whether `resource_id` was released after the `since`-th release.
    fn released_after(&self, resource_id: &ResourceId, since: u64) -> bool {
        self.released
            .iter()
            .rev()
            .take_while(|(_, n)| *n > since)
            .any(|(id, _)| id == resource_id)
    }

    fn start_missing_workers(&mut self, ctx: &mut Context<Self>) {
        let missing = self.pool.missing();
        if missing == 0 {
            return;
        }
        if let Some(until) = self.awaiting_recovery {
            if Instant::now() < until {
                log::debug!(
                    "resource manager: {missing} workers missing; waiting for the {} driver to report the workers it recovered",
                    self.driver.name()
                );
                self.schedule_resume(until, ctx);
                return;
            }
            log::warn!(
                "resource manager: the {} driver did not report recovered workers in time; starting workers",
                self.driver.name()
            );
            self.awaiting_recovery = None;
        }
        if !self.driver.can_start_workers() {
            log::debug!(
                "resource manager: {missing} workers short of {}; the {} driver waits for TaskManagers to register",
                self.pool.target(),
                self.driver.name()
            );
            return;
        }
        let Some(leader) = self.leader.as_ref().filter(|l| l.connected) else {
            log::debug!(
                "resource manager: {missing} workers missing; waiting to register at a JobManager before starting any"
            );
            return;
        };
        if let Some(until) = self.paused_until {
            if Instant::now() < until {
                self.schedule_resume(until, ctx);
                return;
            }
            self.paused_until = None;
        }
        if !self.lease.is_held_now() {
            // Maybe no longer the leader's (this process was paused past its lease): wait
            // until the leader loop renews the lease, or stops this resource manager.
            log::debug!("resource manager: leadership lease lapsed; {missing} worker starts wait");
            self.schedule_resume(Instant::now() + crate::ha::lease::RECHECK, ctx);
            return;
        }
        let (job_manager, session) = (leader.address.clone(), leader.session);
        for _ in 0..missing {
            let resource_id = self.next_resource_id();
            let request = WorkerRequest {
                resource_id: resource_id.clone(),
                job_manager: job_manager.clone(),
                leader_session_id: Some(session),
            };
            match self.driver.request_worker(request) {
                Ok(()) => {
                    self.pool.requested(resource_id.clone());
                    if !self.driver.requests_queue() {
                        self.arm_registration_deadline(resource_id.clone(), ctx);
                    }
                    self.env
                        .events
                        .emit(ClusterEvent::WorkerRequested { resource_id });
                }
                Err(error) => {
                    self.record_start_failure(resource_id, &error, ctx);
                    break;
                }
            }
        }
    }

    /// The pool is larger than its target: the JobManager names the workers that may go. No
    /// worker is killed on our own, not even a pending one: it may have registered there and
    /// been given tasks before its report reached us (issue 12).
    fn release_surplus(&mut self, ctx: &mut Context<Self>) {
        let surplus = self.pool.surplus();
        if surplus == 0 || self.release_in_flight.is_some() || !self.driver.can_start_workers() {
            return;
        }
        if !self.lease.is_held_now() {
            // Releasing stops workers a new leader may already use: as starts, only while
            // the leadership is proven.
            log::debug!(
                "resource manager: leadership lease lapsed; {surplus} worker releases wait"
            );
            self.schedule_resume(Instant::now() + crate::ha::lease::RECHECK, ctx);
            return;
        }
        let Some((gateway, session)) = self.connected_leader() else {
            log::debug!(
                "resource manager: {surplus} workers over the target; waiting for a JobManager to say which may go"
            );
            return;
        };
        let request = gateway
            .release_idle_task_managers
            .send(ReleaseIdleTaskManagers {
                count: surplus,
                pending: self.pool.releasing_newest_first(),
            })
            .timeout(self.settings.ask_timeout);
        self.release_generation += 1;
        let generation = self.release_generation;
        self.release_in_flight = Some(generation);
        request
            .into_actor(self)
            .map(move |result, act, _| {
                if act.release_in_flight == Some(generation) {
                    act.release_in_flight = None;
                }
                match result {
                    Ok(released) => act.release_idle(released, session),
                    Err(error) => log::warn!(
                        "resource manager: JobManager did not answer ReleaseIdleTaskManagers: {error}"
                    ),
                }
            })
            .spawn(ctx);
    }

    /// Busy workers may keep the pool too large after this; the periodic check asks again.
    fn release_idle(&mut self, released: IdleTaskManagersReleased, asked: LeaderSessionId) {
        if released.leader_session_id != asked
            || !is_current_leader(
                self.leader_session(),
                released.leader_session_id,
                NAME,
                "IdleTaskManagersReleased",
            )
        {
            return;
        }
        if !self.lease.is_held_now() {
            // The lease lapsed while the JobManager answered: these workers stay; the next
            // check asks again (the JobManager lets go of the ones it no longer knows).
            log::debug!(
                "resource manager: leadership lease lapsed; not releasing {} workers",
                released.released.len()
            );
            return;
        }
        for resource_id in released.released {
            let reason = match self.pool.state(&resource_id) {
                Some(WorkerState::Started) => RemovalReason::Idle,
                _ => RemovalReason::NoLongerNeeded,
            };
            self.release(resource_id, reason);
        }
    }

    /// Releases a worker the pool counts through the driver, and makes sure the JobManager does
    /// not keep it registered.
    fn release(&mut self, resource_id: ResourceId, reason: RemovalReason) {
        if self.pool.remove(&resource_id).is_none() {
            log::debug!("resource manager: {resource_id} is not in the pool; nothing to release");
            return;
        }
        self.registration_deadlines.remove(&resource_id);
        self.driver.release_worker(&resource_id);
        self.report_removed(&resource_id, reason);
        if self.released.len() == RELEASED_MEMORY {
            self.released.pop_front();
        }
        self.releases += 1;
        self.released
            .push_back((resource_id.clone(), self.releases));
        self.env.events.emit(ClusterEvent::WorkerReleased {
            resource_id,
            reason,
        });
    }

    /// Tells the JobManager a worker is gone (a no-op there if it knows it gone already).
    fn report_removed(&self, resource_id: &ResourceId, reason: RemovalReason) {
        if let Some((gateway, session)) = self.connected_leader() {
            gateway.resource_removed.do_send(ResourceRemoved {
                leader_session_id: session,
                resource_id: resource_id.clone(),
                reason,
            });
        }
    }

    fn record_start_failure(
        &mut self,
        resource_id: ResourceId,
        reason: &dyn std::fmt::Display,
        ctx: &mut Context<Self>,
    ) {
        self.start_failures += 1;
        self.consecutive_start_failures = self.consecutive_start_failures.saturating_add(1);
        let delay = self.start_backoff.next_delay();
        let now = Instant::now();
        let until = now.checked_add(delay).unwrap_or(now);
        self.paused_until = Some(until);
        log::warn!(
            "resource manager: worker {resource_id} failed to start ({reason}); {} consecutive failures, pausing worker starts for {delay:?}",
            self.consecutive_start_failures
        );
        self.env.events.emit(ClusterEvent::WorkerStartFailed {
            resource_id,
            reason: reason.to_string(),
            backoff_ms: delay.as_millis() as u64,
        });
        self.schedule_resume(until, ctx);
    }

    /// One pool check when the start pause ends (at most one scheduled).
    fn schedule_resume(&mut self, until: Instant, ctx: &mut Context<Self>) {
        if let Some(handle) = self.resume_check.take() {
            ctx.cancel_future(handle);
        }
        let delay = until.saturating_duration_since(Instant::now());
        self.resume_check = Some(ctx.run_later(delay, |act, ctx| {
            act.resume_check = None;
            act.check_workers_pool(ctx);
        }));
    }

    fn start_succeeded(&mut self) {
        self.consecutive_start_failures = 0;
        self.start_backoff.reset();
    }

    /// A pending worker must register within `resourcemanager.taskmanager-registration.timeout`
    /// or it is released and replaced: otherwise a lost start report or a worker that never
    /// comes up would count as pending forever and the pool would never refill.
    fn arm_registration_deadline(&mut self, resource_id: ResourceId, ctx: &mut Context<Self>) {
        self.deadline_generation += 1;
        let generation = self.deadline_generation;
        self.registration_deadlines
            .insert(resource_id.clone(), generation);
        let timeout = self.settings.pool.taskmanager_registration.timeout;
        ctx.run_later(timeout, move |act, ctx| {
            if act.registration_deadlines.get(&resource_id) == Some(&generation) {
                act.registration_timed_out(resource_id, ctx);
            }
        });
    }

    fn registration_timed_out(&mut self, resource_id: ResourceId, ctx: &mut Context<Self>) {
        self.registration_deadlines.remove(&resource_id);
        if !matches!(
            self.pool.state(&resource_id),
            Some(
                WorkerState::PendingRequest
                    | WorkerState::PendingRegistration
                    | WorkerState::Releasing,
            )
        ) {
            return;
        }
        let timeout = self.settings.pool.taskmanager_registration.timeout;
        log::warn!(
            "resource manager: worker {resource_id} did not register within {timeout:?}; releasing it"
        );
        self.release(resource_id.clone(), RemovalReason::RegistrationTimeout);
        self.record_start_failure(resource_id, &"registration timed out", ctx);
        self.check_workers_pool(ctx);
    }

    /// A worker registered at the JobManager (reported directly, in a heartbeat answer or in a
    /// reconciliation).
    fn accept_registered(&mut self, resource_id: &ResourceId, adopt: bool) -> bool {
        match self.pool.registered(resource_id, adopt) {
            RegistrationOutcome::Promoted(from) => {
                self.registration_deadlines.remove(resource_id);
                if from == WorkerState::PendingRequest {
                    // Registered before the driver's start report: the start succeeded.
                    self.start_succeeded();
                }
                self.env.events.emit(ClusterEvent::WorkerRegistered {
                    resource_id: resource_id.clone(),
                });
                true
            }
            RegistrationOutcome::Adopted => {
                log::info!(
                    "resource manager: counting {resource_id}, started outside this resource manager, as a started worker"
                );
                self.env.events.emit(ClusterEvent::WorkerRegistered {
                    resource_id: resource_id.clone(),
                });
                true
            }
            RegistrationOutcome::AlreadyStarted => {
                log::debug!("resource manager: {resource_id} counts as started already");
                false
            }
            RegistrationOutcome::Ignored if self.released_after(resource_id, 0) => {
                log::info!(
                    "resource manager: released worker {resource_id} registered again before it stopped; asking the JobManager to drop it"
                );
                self.report_removed(resource_id, RemovalReason::NoLongerNeeded);
                false
            }
            RegistrationOutcome::Ignored => {
                log::info!(
                    "resource manager: {resource_id} registered but was not started by this resource manager's {} driver; not counted",
                    self.driver.name()
                );
                false
            }
        }
    }

    /// The JobManager's jobs need `workers`: the target follows, the designated size stays.
    fn demand_declared(&mut self, workers: u32, ctx: &mut Context<Self>) {
        let target = self.pool.target();
        if self.pool.set_demand(workers) == workers {
            return;
        }
        log::info!(
            "resource manager: the jobs need {workers} workers; pool target {target} -> {} (designated {}, at most {})",
            self.pool.target(),
            self.pool.designated(),
            self.settings.pool.max_pool_size
        );
        self.check_workers_pool(ctx);
    }

    fn status(&self) -> ResourceManagerStatus {
        ResourceManagerStatus {
            designated_pool_size: self.pool.designated(),
            demand: self.pool.demand(),
            target_pool_size: self.pool.target(),
            started: self.pool.started().map(|(id, _)| id.clone()).collect(),
            pending_requests: self.pool.pending_requests(),
            pending_registration: self.pool.pending_registration(),
            releasing: self.pool.releasing(),
            start_failures: self.start_failures,
            consecutive_start_failures: self.consecutive_start_failures,
            connected_to_job_manager: self.leader.as_ref().is_some_and(|l| l.connected),
            driver: self.driver.name().to_owned(),
            driver_workers: self.driver.describe_workers(),
        }
    }
}

impl Actor for FlinkResourceManager {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        let gateway = ResourceManagerGateway::of(&ctx.address());
        self.env.resolver.register(
            self.address.clone(),
            LocalActor::ResourceManager(gateway.clone()),
        );
        self.driver.initialize(gateway);
        if self.driver.recovers_workers() {
            self.awaiting_recovery =
                Some(Instant::now() + self.settings.pool.taskmanager_registration.timeout);
        }
        ctx.run_interval(self.settings.pool.check_interval, |act, ctx| {
            act.check_workers_pool(ctx);
        });
        ctx.run_interval(self.settings.heartbeat.interval, |act, ctx| {
            act.heartbeat_job_manager(ctx);
        });
        log::info!(
            "resource manager started: designated pool size {}, at most {}, {} driver",
            self.pool.designated(),
            self.settings.pool.max_pool_size,
            self.driver.name()
        );
    }

    fn stopping(&mut self, _ctx: &mut Self::Context) -> Running {
        self.env.resolver.unregister(&self.address);
        Running::Stop
    }
}

impl Handler<CheckAndAllocateContainers> for FlinkResourceManager {
    type Result = ();

    fn handle(&mut self, _: CheckAndAllocateContainers, ctx: &mut Context<Self>) {
        log::debug!("resource manager <- CheckAndAllocateContainers");
        self.check_workers_pool(ctx);
    }
}

impl Handler<SetWorkerPoolSize> for FlinkResourceManager {
    type Result = Result<Acknowledge, SetPoolSizeError>;

    fn handle(&mut self, msg: SetWorkerPoolSize, ctx: &mut Context<Self>) -> Self::Result {
        log::debug!("resource manager <- {msg:?}");
        if self.stopping {
            return Err(SetPoolSizeError::Stopping);
        }
        let max = self.settings.pool.max_pool_size;
        if msg.size > max {
            return Err(SetPoolSizeError::AboveMaximum {
                requested: msg.size,
                max,
            });
        }
        let from = self.pool.set_designated(msg.size);
        if from != msg.size {
            log::info!(
                "resource manager: designated pool size {from} -> {}",
                msg.size
            );
            self.env
                .events
                .emit(ClusterEvent::PoolResized { from, to: msg.size });
        }
        self.check_workers_pool(ctx);
        Ok(Acknowledge)
    }
}

impl Handler<DeclareResourceRequirements> for FlinkResourceManager {
    type Result = ();

    fn handle(&mut self, msg: DeclareResourceRequirements, ctx: &mut Context<Self>) {
        log::debug!("resource manager <- {msg:?}");
        if !is_current_leader(
            self.leader_session(),
            msg.leader_session_id,
            NAME,
            "DeclareResourceRequirements",
        ) {
            return;
        }
        self.demand_declared(msg.workers, ctx);
    }
}

impl Handler<ReleaseResource> for FlinkResourceManager {
    type Result = ();

    fn handle(&mut self, msg: ReleaseResource, ctx: &mut Context<Self>) {
        log::debug!("resource manager <- {msg:?}");
        if !is_current_leader(
            self.leader_session(),
            msg.leader_session_id,
            NAME,
            "ReleaseResource",
        ) {
            return;
        }
        self.release(msg.resource_id, msg.reason);
        self.check_workers_pool(ctx);
    }
}

impl Handler<NotifyResourceStarted> for FlinkResourceManager {
    type Result = MessageResult<NotifyResourceStarted>;

    fn handle(&mut self, msg: NotifyResourceStarted, ctx: &mut Context<Self>) -> Self::Result {
        log::debug!("resource manager <- {msg:?}");
        if is_current_leader(
            self.leader_session(),
            msg.leader_session_id,
            NAME,
            "NotifyResourceStarted",
        ) && self.accept_registered(&msg.resource_id, self.driver.adopts_unknown_workers())
        {
            // An adopted worker may make the pool too large.
            self.release_surplus(ctx);
        }
        MessageResult(Acknowledge)
    }
}

impl Handler<WorkerStarted> for FlinkResourceManager {
    type Result = ();

    fn handle(&mut self, msg: WorkerStarted, ctx: &mut Context<Self>) {
        log::debug!("resource manager <- {msg:?}");
        let resource_id = msg.resource_id;
        if self.pool.driver_started(&resource_id) {
            if self.driver.requests_queue() {
                self.arm_registration_deadline(resource_id.clone(), ctx);
            }
            self.start_succeeded();
            self.env
                .events
                .emit(ClusterEvent::WorkerStarted { resource_id });
        } else if self.pool.state(&resource_id).is_none() {
            // Cancelled while it was starting: make sure it does not linger.
            log::debug!(
                "resource manager: {resource_id} started after it was cancelled; releasing it"
            );
            self.driver.release_worker(&resource_id);
        }
    }
}

impl Handler<WorkerFailed> for FlinkResourceManager {
    type Result = ();

    fn handle(&mut self, msg: WorkerFailed, ctx: &mut Context<Self>) {
        log::debug!("resource manager <- {msg:?}");
        match self.pool.state(&msg.resource_id) {
            Some(
                WorkerState::PendingRequest
                | WorkerState::PendingRegistration
                | WorkerState::Releasing,
            ) => {
                self.pool.remove(&msg.resource_id);
                self.registration_deadlines.remove(&msg.resource_id);
                self.record_start_failure(msg.resource_id, &msg.reason, ctx);
                self.check_workers_pool(ctx);
            }
            Some(WorkerState::Started) | None => {
                log::debug!(
                    "resource manager: ignoring a start failure of {}, which is not starting",
                    msg.resource_id
                );
            }
        }
    }
}

impl Handler<WorkerTerminated> for FlinkResourceManager {
    type Result = ();

    fn handle(&mut self, msg: WorkerTerminated, ctx: &mut Context<Self>) {
        log::debug!("resource manager <- {msg:?}");
        let resource_id = msg.resource_id;
        let Some(state) = self.pool.remove(&resource_id) else {
            log::debug!("resource manager: {resource_id} terminated after it left the pool");
            return;
        };
        self.registration_deadlines.remove(&resource_id);
        log::warn!(
            "resource manager: worker {resource_id} terminated: {}",
            msg.reason
        );
        // The JobManager may know it even if this RM has not heard of its registration yet.
        self.report_removed(&resource_id, RemovalReason::Terminated);
        self.env.events.emit(ClusterEvent::WorkerReleased {
            resource_id: resource_id.clone(),
            reason: RemovalReason::Terminated,
        });
        if state != WorkerState::Started {
            // A worker that dies before registering is a failed start (Flink counts it so).
            self.record_start_failure(resource_id, &msg.reason, ctx);
        }
        self.check_workers_pool(ctx);
    }
}

impl Handler<WorkersRecovered> for FlinkResourceManager {
    type Result = ();

    fn handle(&mut self, msg: WorkersRecovered, ctx: &mut Context<Self>) {
        log::debug!("resource manager <- {msg:?}");
        self.awaiting_recovery = None;
        for resource_id in msg.resource_ids {
            if self.pool.recovered(resource_id.clone()) {
                log::info!(
                    "resource manager: counting worker {resource_id}, recovered from a previous leader, as started"
                );
            }
        }
        self.check_workers_pool(ctx);
    }
}

impl Handler<StopCluster> for FlinkResourceManager {
    type Result = MessageResult<StopCluster>;

    fn handle(&mut self, _: StopCluster, ctx: &mut Context<Self>) -> Self::Result {
        log::debug!("resource manager <- StopCluster");
        if !self.stopping {
            self.stopping = true;
            log::info!(
                "resource manager: stopping the cluster, releasing {} workers",
                self.pool.total()
            );
            self.driver.shutdown();
            ctx.stop();
        }
        MessageResult(Acknowledge)
    }
}

impl Handler<GetResourceManagerStatus> for FlinkResourceManager {
    type Result = MessageResult<GetResourceManagerStatus>;

    fn handle(&mut self, _: GetResourceManagerStatus, _: &mut Context<Self>) -> Self::Result {
        log::debug!("resource manager <- GetResourceManagerStatus");
        MessageResult(self.status())
    }
}

#[cfg(test)]
mod tests;
