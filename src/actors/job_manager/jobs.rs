//! The JobManager's jobs: submission, the shared slot [`Scheduler`], carrying out each
//! [`JobMaster`]'s actions, and growing (then shrinking back) the worker pool with demand.
//!
//! Every job's logic lives in its `JobMaster`; this module only routes events to it (task state
//! updates, served slot requests, lost TaskManagers, expired requests, restart timers) and turns
//! its [`JobAction`]s into messages. After anything that may free a slot, the queue is served.

use actix::clock::Instant;
use actix::prelude::*;

use super::JobManager;
use crate::actors::job_master::{JobAction, JobContext, JobMaster};
use crate::messages::RemovalReason;
use crate::messages::deployment::TaskDeploymentDescriptor;
use crate::messages::ids::{JobId, ResourceId};
use crate::messages::job_manager::*;
use crate::messages::resource_manager::SetWorkerPoolSize;
use crate::messages::task_manager::{
    CancelTask, ReleaseJobPartitions, SubmitTask, TaskSubmissionError,
};

/// What the JobManager knows of the resource manager's pool, from its registration and
/// heartbeats: the base for growing the pool with demand.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct PoolView {
    pub designated: u32,
    pub max: u32,
    /// The designated size before the JobManager grew it for demand.
    pub grown_from: Option<u32>,
    /// Since when nothing needs the grown pool.
    pub idle_since: Option<Instant>,
    /// The state the last demand was computed for (queued requests, free slots, designated
    /// size, registered TaskManagers): it is only computed again when that changed, so job
    /// events stay cheap here.
    pub demand_seen: Option<(usize, u64, u32, usize)>,
}

impl JobManager {
    /// Runs `f` on a job, carries out its actions, then serves the slot queue and grows the
    /// pool if demand exceeds it.
    pub(super) fn with_job(
        &mut self,
        job_id: JobId,
        ctx: &mut Context<Self>,
        f: impl FnOnce(&mut JobMaster, &mut JobContext<'_>) -> Vec<JobAction>,
    ) {
        // Slots may have freed, or the job may have asked for a region's slots: serving looks
        // at the head of the queue only, so it costs O(log Q) when nothing fits.
        self.run_job(job_id, ctx, f);
        self.serve_queue(ctx);
        self.grow_pool_for_demand();
    }

    /// Gives the head of the slot queue the slots that are free, bulk by bulk, while it fits.
    /// At most [`SERVE_BUDGET`] tasks are placed (and deployed) in one message: the rest is
    /// served by a [`ServeQueue`] sent to ourselves, behind the messages already waiting (a
    /// heartbeat never waits for a whole wave of deployments).
    pub(super) fn serve_queue(&mut self, ctx: &mut Context<Self>) {
        if self.serve_pending {
            return;
        }
        let mut placed_tasks = 0;
        loop {
            let budget = SERVE_BUDGET.saturating_sub(placed_tasks);
            let (placed, more) = self.scheduler.serve(budget);
            if placed.is_empty() {
                return;
            }
            for (bulk, assignments) in placed {
                placed_tasks += assignments.len();
                // May free slots (a stale bulk) or queue the job's next regions: served next
                // round.
                self.run_job(bulk.job, ctx, move |job, cx| {
                    job.bulk_assigned(bulk, assignments, cx)
                });
            }
            if more || placed_tasks >= SERVE_BUDGET {
                self.serve_pending = true;
                ctx.notify(ServeQueue);
                return;
            }
        }
    }

    /// Runs `f` on a job with a fresh context and carries out its actions.
    fn run_job(
        &mut self,
        job_id: JobId,
        ctx: &mut Context<Self>,
        f: impl FnOnce(&mut JobMaster, &mut JobContext<'_>) -> Vec<JobAction>,
    ) {
        let Some(job) = self.jobs.get_mut(&job_id) else {
            return;
        };
        let instances = &self.instances;
        let address_of =
            |id: &ResourceId| instances.get(id).map(|i| i.info.location.address.clone());
        let mut cx = JobContext {
            scheduler: &mut self.scheduler,
            now: Instant::now(),
            now_ms: self.env.clock.now_millis(),
            address_of: &address_of,
        };
        let restarted_before = job.restarted_tasks();
        let actions = f(job, &mut cx);
        self.task_restarts += job.restarted_tasks() - restarted_before;
        self.carry_out(job_id, actions, ctx);
    }

    fn carry_out(&mut self, job_id: JobId, actions: Vec<JobAction>, ctx: &mut Context<Self>) {
        for action in actions {
            match action {
                JobAction::Deploy {
                    resource_id,
                    descriptor,
                } => {
                    self.jobs_on
                        .entry(resource_id.clone())
                        .or_default()
                        .insert(job_id);
                    self.deploy(job_id, resource_id, descriptor, SLOT_BUSY_RETRIES, ctx);
                }
                JobAction::Cancel {
                    resource_id,
                    attempt,
                } => {
                    let Some(gateway) = self.gateways.get(&resource_id) else {
                        continue;
                    };
                    gateway
                        .cancel_task
                        .send(CancelTask {
                            leader_session_id: self.leader_session_id,
                            attempt,
                        })
                        .into_actor(self)
                        .map(move |result, act, ctx| {
                            // Undeliverable: the TaskManager is gone, and with it the task.
                            if let Err(MailboxError::Closed) = result {
                                act.lose_task_manager(
                                    &resource_id,
                                    RemovalReason::Unreachable,
                                    ctx,
                                );
                            }
                        })
                        .spawn(ctx);
                }
                JobAction::RestartAfter { delay, generation } => {
                    ctx.run_later(delay, move |act, ctx| {
                        act.with_job(job_id, ctx, |job, cx| job.restart_due(generation, cx));
                    });
                }
                JobAction::ReleasePartitions { resource_ids } => {
                    for resource_id in resource_ids {
                        if let Some(jobs) = self.jobs_on.get_mut(&resource_id) {
                            jobs.remove(&job_id);
                            if jobs.is_empty() {
                                self.jobs_on.remove(&resource_id);
                            }
                        }
                        if let Some(gateway) = self.gateways.get(&resource_id) {
                            gateway
                                .release_job_partitions
                                .do_send(ReleaseJobPartitions {
                                    leader_session_id: self.leader_session_id,
                                    job_id,
                                });
                        }
                    }
                }
                JobAction::Terminated(status) => {
                    log::info!("job manager: job {job_id} is {status}");
                    self.scheduler.forget_job(job_id);
                    self.forget_ended_jobs(job_id);
                    if self.jobs.contains_key(&job_id) {
                        self.ended.insert((self.env.clock.now_millis(), job_id));
                    }
                    self.env
                        .events
                        .emit(crate::events::ClusterEvent::JobTerminated { job_id, status });
                }
            }
        }
    }

    /// Sends `SubmitTask` and handles its answer. A TaskManager whose slots are all still
    /// held (tasks the JobManager gave up on, still stopping there, or submissions that
    /// arrived late after a pause) refuses with `NoFreeSlot`: that is retried `retries` times,
    /// [`SLOT_BUSY_RETRY`] apart, while the attempt still waits for it, instead of failing the
    /// attempt at once (issue 12, seed 461: one 3 s pause made five refusals in 56 ms exhaust
    /// a job's four restarts). Any other outcome resolves the deployment: taken, refused,
    /// unreachable, or unanswered within the ask timeout.
    fn deploy(
        &mut self,
        job_id: JobId,
        resource_id: ResourceId,
        descriptor: Box<TaskDeploymentDescriptor>,
        retries: u32,
        ctx: &mut Context<Self>,
    ) {
        let attempt = descriptor.attempt;
        let Some(gateway) = self.gateways.get(&resource_id) else {
            let error = format!("TaskManager {resource_id} is not registered");
            ctx.notify(DeploymentFailed {
                job_id,
                attempt,
                error,
            });
            return;
        };
        let again = (retries > 0).then(|| descriptor.clone());
        gateway
            .submit_task
            .send(SubmitTask {
                leader_session_id: self.leader_session_id,
                descriptor: *descriptor,
            })
            .timeout(self.settings.ask_timeout)
            .into_actor(self)
            .map(move |result, act, ctx| {
                let error = match result {
                    Ok(Ok(())) => {
                        if let Some(job) = act.jobs.get_mut(&job_id) {
                            job.deployment_taken(attempt);
                        }
                        return;
                    }
                    Ok(Err(TaskSubmissionError::NoFreeSlot(_))) if again.is_some() => {
                        if let Some(descriptor) = again {
                            ctx.run_later(SLOT_BUSY_RETRY, move |act, ctx| {
                                let waiting = act
                                    .jobs
                                    .get(&job_id)
                                    .is_some_and(|job| job.is_deploying(attempt));
                                if waiting {
                                    act.deploy(job_id, resource_id, descriptor, retries - 1, ctx);
                                }
                            });
                        }
                        return;
                    }
                    Ok(Err(refused)) => {
                        format!("TaskManager {resource_id} refused the task: {refused}")
                    }
                    // A TaskManager whose mailbox is closed is gone: losing it now
                    // (not at its heartbeat timeout) fails its tasks over once, not
                    // again each time a restart is placed on it.
                    Err(MailboxError::Closed) => {
                        log::warn!("job manager: TaskManager {resource_id} is unreachable");
                        act.lose_task_manager(&resource_id, RemovalReason::Unreachable, ctx);
                        format!("TaskManager {resource_id} is unreachable")
                    }
                    // Delivered but unanswered: it may run; stop it, since the
                    // attempt counts as failed from now on.
                    Err(error) => {
                        if let Some(gateway) = act.gateways.get(&resource_id) {
                            gateway.cancel_task.do_send(CancelTask {
                                leader_session_id: act.leader_session_id,
                                attempt,
                            });
                        }
                        format!("TaskManager {resource_id} did not take the task: {error}")
                    }
                };
                act.with_job(job_id, ctx, |job, cx| {
                    job.deployment_failed(attempt, error, cx)
                });
            })
            .spawn(ctx);
    }

    /// Every job loses the tasks and results on a TaskManager that is gone.
    pub(super) fn fail_over_task_manager(
        &mut self,
        resource_id: &ResourceId,
        ctx: &mut Context<Self>,
    ) {
        self.scheduler.remove_task_manager(resource_id);
        // Only the jobs that deployed there: the others have nothing on it.
        let jobs = self.jobs_on.remove(resource_id).unwrap_or_default();
        for job_id in jobs {
            self.with_job(job_id, ctx, |job, cx| {
                job.task_manager_lost(resource_id, cx)
            });
        }
    }

    /// Fails the bulks the cluster could not serve, even with every slot free, for the slot
    /// request timeout (bulks waiting for busy slots wait as long as it takes).
    pub(super) fn expire_slot_requests(&mut self, ctx: &mut Context<Self>) {
        let slots = u64::from(self.settings.slots_per_task_manager);
        let max_slots = (u64::from(self.pool.max) * slots).max(self.scheduler.total_slots());
        let expired = self.scheduler.expire(
            Instant::now(),
            self.settings.slot_request_timeout,
            max_slots,
        );
        for (bulk, tasks, error) in expired {
            log::warn!("job manager: {error}");
            self.with_job(bulk.job, ctx, |job, cx| {
                job.slot_request_failed(&tasks, &error, cx)
            });
        }
        // Demand may predate the resource manager's connection: look again every sweep.
        self.grow_pool_for_demand();
        self.forget_expired_jobs();
        self.shrink_pool_when_idle();
    }

    /// Queued demand beyond what the pool (with its pending workers) will offer: ask the
    /// resource manager for more workers, up to its maximum.
    pub(super) fn grow_pool_for_demand(&mut self) {
        let state = (
            self.scheduler.queued(),
            self.scheduler.free_slots(),
            self.pool.designated,
            self.instances.len(),
        );
        if state.0 == 0 || self.resource_manager.is_none() || self.pool.demand_seen == Some(state) {
            return;
        }
        self.pool.demand_seen = Some(state);
        let demand = self.scheduler.queued_slot_demand();
        let registered = self.instances.len() as u64;
        let pool = &mut self.pool;
        let Some(rm) = &self.resource_manager else {
            return;
        };
        if demand == 0 {
            return;
        }
        pool.idle_since = None;
        let slots = u64::from(self.settings.slots_per_task_manager.max(1));
        let coming = u64::from(pool.designated).saturating_sub(registered) * slots;
        let missing_slots = demand.saturating_sub(coming);
        if missing_slots == 0 {
            return;
        }
        let workers = missing_slots.div_ceil(slots);
        let target = (u64::from(pool.designated) + workers).min(u64::from(pool.max)) as u32;
        if target <= pool.designated {
            return;
        }
        log::info!(
            "job manager: {demand} slots wanted beyond the pool; asking the resource manager for a pool of {target}"
        );
        pool.grown_from.get_or_insert(pool.designated);
        pool.designated = target;
        rm.gateway
            .set_worker_pool_size
            .do_send(SetWorkerPoolSize { size: target });
    }

    /// After demand growth: once no job runs and nothing waits for
    /// `resourcemanager.taskmanager-timeout`, the pool goes back to the size it had.
    fn shrink_pool_when_idle(&mut self) {
        let Some(base) = self.pool.grown_from else {
            return;
        };
        let busy = self.scheduler.queued() > 0
            || self
                .jobs
                .values()
                .any(|j| !j.status().is_globally_terminal());
        if busy {
            self.pool.idle_since = None;
            return;
        }
        let since = *self.pool.idle_since.get_or_insert_with(Instant::now);
        if since.elapsed() < self.settings.taskmanager_timeout {
            return;
        }
        let Some(rm) = &self.resource_manager else {
            return;
        };
        log::info!("job manager: the pool grown for demand is idle; back to {base} TaskManagers");
        rm.gateway
            .set_worker_pool_size
            .do_send(SetWorkerPoolSize { size: base });
        self.pool.designated = base;
        self.pool.grown_from = None;
        self.pool.idle_since = None;
    }

    fn submit(
        &mut self,
        graph: crate::job::graph::JobGraph,
        ctx: &mut Context<Self>,
    ) -> Result<JobId, JobError> {
        let registry = &self.settings.registry;
        graph
            .validate(|op| registry.contains(op))
            .map_err(|e| JobError::Rejected(e.to_string()))?;
        let job_id = JobId::generate(&mut self.rng);
        let now_ms = self.env.clock.now_millis();
        let name = graph.name.clone();
        let job = JobMaster::new(job_id, graph, self.rng.fork(), now_ms)
            .map_err(|e| JobError::Rejected(e.to_string()))?;
        // A job runs region by region as slots free: it only has to fit its largest region.
        let needed = job.largest_region_slots();
        let slots = u64::from(self.settings.slots_per_task_manager);
        let max_pool = u64::from(self.pool.max.max(self.instances.len() as u32));
        let reachable = (max_pool * slots).max(self.scheduler.total_slots());
        if self.resource_manager.is_some() && needed > reachable {
            let region = job
                .largest_region()
                .map(|(_, described)| format!(" (its largest pipelined region: {described})"))
                .unwrap_or_default();
            return Err(JobError::Rejected(format!(
                "the job needs {needed} slots at once but the pool can never offer more than {reachable} \
                 ({max_pool} TaskManagers × {slots} slots; raise resourcemanager.max-pool-size or lower the parallelism){region}"
            )));
        }
        log::info!("job manager: job {job_id} ({name}) submitted");
        self.jobs.insert(job_id, job);
        self.with_job(job_id, ctx, |job, cx| job.start(cx));
        Ok(job_id)
    }

    /// A heartbeat listed what `resource_id` runs: every job fails over the tasks it believes
    /// running there that are not (a lost final report, or work the TaskManager dropped).
    pub(super) fn reconcile_tasks(
        &mut self,
        resource_id: &ResourceId,
        running: &std::collections::BTreeSet<crate::messages::ids::ExecutionAttemptId>,
        ctx: &mut Context<Self>,
    ) {
        // The jobs with a task holding a slot there: O(its slots), not O(jobs).
        let jobs: std::collections::BTreeSet<JobId> = self
            .scheduler
            .tasks_on(resource_id)
            .into_iter()
            .map(|t| t.job)
            .collect();
        for job_id in jobs {
            self.with_job(job_id, ctx, |job, cx| {
                job.reconcile(resource_id, running, cx)
            });
        }
    }

    /// Whether any running task is placed on `resource_id`.
    pub(super) fn is_busy(&self, resource_id: &ResourceId) -> bool {
        self.scheduler.used_slots(resource_id) > 0
    }

    /// Forgets the ended jobs that ended first beyond `jobstore.max-capacity` (counting the
    /// one that just ended), so the job list stays bounded; the job that just ended is never
    /// among them (a client is about to ask for it). O(log J) per job forgotten.
    pub(super) fn forget_ended_jobs(&mut self, just_ended: JobId) {
        let keep = self.settings.jobstore.max_capacity as usize;
        while self.ended.len() + 1 > keep {
            let Some((_, job_id)) = self.ended.pop_first() else {
                return;
            };
            if job_id != just_ended {
                self.jobs.remove(&job_id);
            }
        }
    }

    /// Forgets the jobs that ended longer than `jobstore.expiration-time` ago (Flink's
    /// expire-after-write job store). Called with every slot request sweep (at most 1 s
    /// apart); O(log J) per job.
    fn forget_expired_jobs(&mut self) {
        let expiration = self.settings.jobstore.expiration_time.as_millis() as u64;
        let now = self.env.clock.now_millis();
        while let Some(&(ended_at, job_id)) = self.ended.first() {
            if ended_at.saturating_add(expiration) > now {
                return;
            }
            self.ended.pop_first();
            self.jobs.remove(&job_id);
        }
    }
}

/// How often a deployment refused for want of a free slot is sent again (see
/// [`JobManager::deploy`]), and how long it waits in between: at most 2 s in all, about the time
/// a cancelled task takes to stop and free its slot.
const SLOT_BUSY_RETRIES: u32 = 10;
const SLOT_BUSY_RETRY: std::time::Duration = std::time::Duration::from_millis(200);

/// Tasks placed (and deployed) by one [`JobManager::serve_queue`] call at most.
pub(super) const SERVE_BUDGET: usize = 64;

/// Serve the slot queue again (the previous turn used its budget).
#[derive(Message)]
#[rtype(result = "()")]
pub(super) struct ServeQueue;

impl Handler<ServeQueue> for JobManager {
    type Result = ();

    fn handle(&mut self, _: ServeQueue, ctx: &mut Context<Self>) {
        let _timed = self.mailbox.time("ServeQueue");
        self.serve_pending = false;
        self.serve_queue(ctx);
        self.grow_pool_for_demand();
    }
}

/// A deployment that could not even be sent.
#[derive(Message)]
#[rtype(result = "()")]
struct DeploymentFailed {
    job_id: JobId,
    attempt: crate::messages::ids::ExecutionAttemptId,
    error: String,
}

impl Handler<DeploymentFailed> for JobManager {
    type Result = ();

    fn handle(&mut self, msg: DeploymentFailed, ctx: &mut Context<Self>) {
        let _timed = self.mailbox.time("DeploymentFailed");
        self.with_job(msg.job_id, ctx, |job, cx| {
            job.deployment_failed(msg.attempt, msg.error, cx)
        });
    }
}

impl Handler<SubmitJob> for JobManager {
    type Result = Result<JobId, JobError>;

    fn handle(&mut self, msg: SubmitJob, ctx: &mut Context<Self>) -> Self::Result {
        let _timed = self.mailbox.time("SubmitJob");
        log::debug!("job manager <- SubmitJob {}", msg.job_graph.name);
        self.submit(msg.job_graph, ctx)
    }
}

impl Handler<CancelJob> for JobManager {
    type Result = Result<crate::job::states::JobStatus, JobError>;

    fn handle(&mut self, msg: CancelJob, ctx: &mut Context<Self>) -> Self::Result {
        let _timed = self.mailbox.time("CancelJob");
        log::debug!("job manager <- {msg:?}");
        let job = self
            .jobs
            .get(&msg.job_id)
            .ok_or(JobError::UnknownJob(msg.job_id))?;
        if job.status().is_globally_terminal() {
            return Err(JobError::AlreadyTerminal {
                job_id: msg.job_id,
                status: job.status(),
            });
        }
        self.with_job(msg.job_id, ctx, |job, cx| job.cancel(cx));
        self.jobs
            .get(&msg.job_id)
            .map(JobMaster::status)
            .ok_or(JobError::UnknownJob(msg.job_id))
    }
}

impl Handler<RequestJobStatus> for JobManager {
    type Result = Result<JobDetails, JobError>;

    fn handle(&mut self, msg: RequestJobStatus, _: &mut Context<Self>) -> Self::Result {
        let _timed = self.mailbox.time("RequestJobStatus");
        self.jobs
            .get(&msg.job_id)
            .map(JobMaster::details)
            .ok_or(JobError::UnknownJob(msg.job_id))
    }
}

impl Handler<ListJobs> for JobManager {
    type Result = MessageResult<ListJobs>;

    fn handle(&mut self, _: ListJobs, _: &mut Context<Self>) -> Self::Result {
        let _timed = self.mailbox.time("ListJobs");
        let mut jobs: Vec<JobSummary> = self.jobs.values().map(JobMaster::summary).collect();
        jobs.sort_by_key(|j| (j.submitted_at_ms, j.job_id));
        MessageResult(jobs)
    }
}

impl Handler<UpdateTaskExecutionState> for JobManager {
    type Result = MessageResult<UpdateTaskExecutionState>;

    fn handle(&mut self, msg: UpdateTaskExecutionState, ctx: &mut Context<Self>) -> Self::Result {
        let _timed = self.mailbox.time("UpdateTaskExecutionState");
        log::debug!("job manager <- {msg:?}");
        self.with_job(msg.job_id, ctx, |job, cx| {
            job.update(msg.attempt, msg.state, msg.error, cx)
        });
        MessageResult(crate::messages::Acknowledge)
    }
}
