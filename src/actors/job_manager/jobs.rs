//! The JobManager's jobs: submission, the shared slot [`Scheduler`], carrying out each
//! [`ExecutionGraph`]'s actions, and growing (then shrinking back) the worker pool with demand.
//!
//! Every job's logic lives in its `ExecutionGraph`; this module only routes events to it (task state
//! updates, served slot requests, lost TaskManagers, expired requests, restart timers) and turns
//! its [`JobAction`]s into messages. After anything that may free a slot, the queue is served.

use std::collections::BTreeMap;

use actix::clock::Instant;
use actix::prelude::*;

use super::JobManager;
use crate::actors::job_manager::execution_graph::{ExecutionGraph, JobAction, JobContext};
use crate::base::ids::{ExecutionAttemptId, JobId, ResourceId};
use crate::messages::RemovalReason;
use crate::messages::job_manager::*;
use crate::messages::resource_manager::DeclareResourceRequirements;
use crate::messages::task_manager::{CancelTasks, ReleaseJobPartitions, ReleasePartitions};

/// The JobManager's side of the pool: the resource manager's maximum (from its registration
/// and heartbeats) and the demand declared to it.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct PoolView {
    pub max: u32,
    /// The workers last declared (see [`JobManager::declare_resource_requirements`]); also
    /// sent in every answer to the resource manager's heartbeat.
    pub declared: u32,
    /// Since when the jobs have needed fewer workers than declared.
    pub lower_since: Option<Instant>,
}

impl JobManager {
    /// Runs `f` on a job, carries out its actions, then serves the slot queue and declares
    /// the jobs' demand if it changed.
    pub(super) fn with_job(
        &mut self,
        job_id: JobId,
        ctx: &mut Context<Self>,
        f: impl FnOnce(&mut ExecutionGraph, &mut JobContext<'_>) -> Vec<JobAction>,
    ) {
        // Slots may have freed, or the job may have asked for a region's slots: serving looks
        // at the head of the queue only, so it costs O(log Q) when nothing fits.
        self.run_job(job_id, ctx, f);
        self.serve_queue(ctx);
        self.declare_resource_requirements();
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
        f: impl FnOnce(&mut ExecutionGraph, &mut JobContext<'_>) -> Vec<JobAction>,
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
        let events = job.take_events();
        self.task_restarts += job.restarted_tasks() - restarted_before;
        if !events.is_empty() {
            self.queue_job_events(job_id, events, ctx);
        }
        self.carry_out(job_id, actions, ctx);
    }

    fn carry_out(&mut self, job_id: JobId, actions: Vec<JobAction>, ctx: &mut Context<Self>) {
        // A run of cancellations goes out as one message per TaskManager, before whatever
        // action comes next (the order of cancels and the rest is kept).
        let mut cancels: BTreeMap<ResourceId, Vec<ExecutionAttemptId>> = BTreeMap::new();
        if (actions.iter()).any(|a| matches!(a, JobAction::Terminated(_))) {
            // Its last regions are in its event log before any of its results is released
            // or its result kept: a new leader that still finds its graph takes every region
            // back instead of running them again.
            self.flush_job_events_of(job_id);
        }
        for action in actions {
            if !matches!(action, JobAction::Cancel { .. }) {
                self.send_cancels(std::mem::take(&mut cancels), ctx);
            }
            match action {
                JobAction::Deploy {
                    resource_id,
                    descriptor,
                } => {
                    self.jobs_on
                        .entry(resource_id.clone())
                        .or_default()
                        .insert(job_id);
                    self.deploy(job_id, resource_id, descriptor, ctx);
                }
                JobAction::Cancel {
                    resource_id,
                    attempt,
                } => cancels.entry(resource_id).or_default().push(attempt),
                JobAction::RestartAfter { delay, generation } => {
                    ctx.run_later(delay, move |act, ctx| {
                        act.with_job(job_id, ctx, |job, cx| job.restart_due(generation, cx));
                    });
                }
                JobAction::ReleaseResults {
                    resource_id,
                    partitions,
                } => {
                    // Not before the event log has what made them unneeded (see
                    // `batch_recovery`).
                    if let Some((resource_id, partitions)) =
                        self.defer_release(job_id, resource_id, partitions)
                    {
                        self.release_results_now(job_id, &resource_id, partitions);
                    }
                }
                JobAction::ReleaseUnread {
                    resource_id,
                    subpartitions,
                } => self.send_release(job_id, &resource_id, Vec::new(), subpartitions),
                JobAction::ReleasePartitions { resource_ids } => {
                    for resource_id in resource_ids {
                        if let Some(jobs) = self.jobs_on.get_mut(&resource_id) {
                            jobs.remove(&job_id);
                            if jobs.is_empty() {
                                self.jobs_on.remove(&resource_id);
                            }
                        }
                        self.flush_deployments_to(&resource_id, ctx);
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
                    self.scheduler.release_requirements(job_id);
                    // Kept before anyone hears of the end: a new leader never runs it again.
                    if let Some(job) = self.jobs.get(&job_id) {
                        let details = job.details().summarized();
                        let results = job.results();
                        self.record_result(details, Some(results), ctx);
                    }
                    self.forget_ended_jobs(job_id);
                    if self.jobs.contains_key(&job_id) {
                        self.ended.insert((self.env.clock.now_millis(), job_id));
                    }
                    self.env
                        .events
                        .emit(crate::env::events::ClusterEvent::JobTerminated { job_id, status });
                }
            }
        }
        self.send_cancels(cancels, ctx);
    }

    /// Releases finished results of `job_id` on `resource_id` that nothing reads any more.
    pub(super) fn release_results_now(
        &self,
        job_id: JobId,
        resource_id: &ResourceId,
        partitions: Vec<crate::messages::ResultPartitionId>,
    ) {
        self.send_release(job_id, resource_id, partitions, Vec::new());
    }

    /// Releases what the early-finished `attempt` left unread in its running pipelined
    /// producers, and again every [`UNREAD_RELEASE_REPEAT`] while any of them still runs. The
    /// release is a tell, and the task's own release through its data connection is lost with
    /// its TaskManager: were this one lost too, a producer would wait for room for ever (no
    /// failover comes for a finished task). A repeat costs one message per producer
    /// TaskManager; releasing twice is harmless.
    fn release_unread(
        &mut self,
        job_id: JobId,
        attempt: ExecutionAttemptId,
        ctx: &mut Context<Self>,
    ) {
        let mut sent = false;
        self.run_job(job_id, ctx, |job, _| {
            let actions = job.release_unread_inputs(attempt);
            sent = !actions.is_empty();
            actions
        });
        if sent {
            ctx.run_later(UNREAD_RELEASE_REPEAT, move |act, ctx| {
                act.release_unread(job_id, attempt, ctx)
            });
        }
    }

    /// Tells `resource_id` to drop `partitions` and `subpartitions` of `job_id`. A tell: if it
    /// is lost, the job's end releases them all the same (and a consumer's own release, sent
    /// through its data connection, usually came first).
    fn send_release(
        &self,
        job_id: JobId,
        resource_id: &ResourceId,
        partitions: Vec<crate::messages::ResultPartitionId>,
        subpartitions: Vec<(crate::messages::ResultPartitionId, u32)>,
    ) {
        if let Some(gateway) = self.gateways.get(resource_id) {
            gateway.release_partitions.do_send(ReleasePartitions {
                leader_session_id: self.leader_session_id,
                job_id,
                partitions,
                subpartitions,
            });
        }
    }

    /// Sends each TaskManager one `CancelTasks` of its attempts in `cancels`, after the
    /// deployments queued for it.
    fn send_cancels(
        &mut self,
        cancels: BTreeMap<ResourceId, Vec<ExecutionAttemptId>>,
        ctx: &mut Context<Self>,
    ) {
        for (resource_id, attempts) in cancels {
            self.flush_deployments_to(&resource_id, ctx);
            let Some(gateway) = self.gateways.get(&resource_id) else {
                continue;
            };
            gateway
                .cancel_tasks
                .send(CancelTasks {
                    leader_session_id: self.leader_session_id,
                    attempts,
                })
                .into_actor(self)
                .map(move |result, act, ctx| {
                    // Undeliverable: the TaskManager is gone, and with it the tasks.
                    if let Err(MailboxError::Closed) = result {
                        act.lose_task_manager(&resource_id, RemovalReason::Unreachable, ctx);
                    }
                })
                .spawn(ctx);
        }
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
        // A fall in demand is declared once it lasted: look again every sweep.
        self.declare_resource_requirements();
        self.forget_expired_jobs();
    }

    /// Declares to the resource manager the workers the jobs need: the slots their tasks hold
    /// and the queued regions wait for, in whole TaskManagers (FLIP-138). A rise is declared at
    /// once; a fall only once it has lasted `resourcemanager.taskmanager-timeout`, so the pool
    /// does not shrink between two waves of one job. The resource manager keeps
    /// `max(designated, demand)`, so the operator's size is never overridden. O(1).
    pub(super) fn declare_resource_requirements(&mut self) {
        let slots = u64::from(self.settings.slots_per_task_manager.max(1));
        let wanted = self.scheduler.slots_wanted();
        let required = u32::try_from(wanted.div_ceil(slots)).unwrap_or(u32::MAX);
        let pool = &mut self.pool;
        if required >= pool.declared {
            pool.lower_since = None;
            if required == pool.declared {
                return;
            }
        } else {
            let since = *pool.lower_since.get_or_insert_with(Instant::now);
            if since.elapsed() < self.settings.taskmanager_timeout {
                return;
            }
            pool.lower_since = None;
        }
        let from = std::mem::replace(&mut pool.declared, required);
        log::info!(
            "job manager: the jobs need {required} TaskManagers ({wanted} slots), was {from}; declaring it to the resource manager"
        );
        if let Some(rm) = &self.resource_manager {
            rm.gateway
                .declare_resource_requirements
                .do_send(DeclareResourceRequirements {
                    leader_session_id: self.leader_session_id,
                    workers: required,
                });
        }
    }

    /// Refuses a submission that would take the subtasks of unfinished jobs past
    /// `jobmanager.max-subtasks` (each waiting subtask costs memory here). O(jobs).
    pub(super) fn check_capacity(
        &self,
        graph: &crate::job::graph::JobGraph,
    ) -> Result<(), JobError> {
        let (mut jobs, mut held) = (0u64, 0u64);
        for job in self.jobs.values() {
            if !job.status().is_globally_terminal() {
                jobs += 1;
                held += u64::from(job.tasks_total());
            }
        }
        let max_jobs = self.settings.max_jobs;
        if jobs >= max_jobs {
            return Err(JobError::Overloaded(format!(
                "the JobManager holds {jobs} unfinished jobs: jobmanager.max-jobs = {max_jobs}; \
                 submit again when jobs have ended, or raise the key"
            )));
        }
        let wanted: u64 = graph
            .vertices
            .iter()
            .map(|v| u64::from(v.parallelism))
            .sum();
        let max = self.settings.max_subtasks;
        if held + wanted > max {
            return Err(JobError::Overloaded(format!(
                "the JobManager holds {held} subtasks of unfinished jobs and this job has \
                 {wanted}: more than jobmanager.max-subtasks = {max}; submit again when jobs \
                 have ended, or raise the key"
            )));
        }
        Ok(())
    }

    /// Refuses a job with an operator no TaskManager can run: none registered has it, and the
    /// TaskManagers this JobManager starts (its own binary: its registry) lack it too. Names
    /// each such operator, its vertex, and what the registered TaskManagers are.
    pub(super) fn check_runnable(
        &self,
        graph: &crate::job::graph::JobGraph,
    ) -> Result<(), JobError> {
        // One look per vertex at the registry and per class of TaskManagers, not per TaskManager.
        let missing: Vec<String> = graph
            .vertices
            .iter()
            .filter(|vertex| {
                !self.settings.registry.contains(&vertex.operator)
                    && !self.scheduler.can_run(&vertex.operator)
            })
            .map(|vertex| format!("`{}` (vertex `{}`)", vertex.operator, vertex.name))
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        // Named up to a few: a large cluster's list would drown the message.
        const NAMED: usize = 8;
        let registered = self.instances.len();
        let lacking = if registered == 0 {
            "no TaskManager is registered".to_owned()
        } else {
            let mut named: Vec<String> = self
                .instances
                .iter()
                .take(NAMED)
                .map(|i| {
                    format!(
                        "{} (build {})",
                        i.info.resource_id, i.info.fingerprint.build
                    )
                })
                .collect();
            if registered > NAMED {
                named.push(format!("{} more", registered - NAMED));
            }
            named.join(", ") + " lack it"
        };
        Err(JobError::Rejected(format!(
            "no TaskManager can run operator {}: {lacking}, and the TaskManagers this JobManager \
             starts run its own binary (build {}), which does not register it either (start the \
             cluster from the binary that holds the program, e.g. `mybin jobmanager`)",
            missing.join(", "),
            self.settings.registry.fingerprint().build
        )))
    }

    /// A heartbeat listed what `resource_id` runs: every job fails over the tasks it believes
    /// running there that are not (a lost final report, or work the TaskManager dropped).
    pub(super) fn reconcile_tasks(
        &mut self,
        resource_id: &ResourceId,
        running: &std::collections::BTreeSet<crate::base::ids::ExecutionAttemptId>,
        io: &[(
            crate::base::ids::ExecutionAttemptId,
            crate::messages::TaskIoSnapshot,
        )],
        ctx: &mut Context<Self>,
    ) {
        // The jobs with a task holding a slot there: O(its slots), not O(jobs).
        let jobs: std::collections::BTreeSet<JobId> = self
            .scheduler
            .tasks_on(resource_id)
            .into_iter()
            .map(|t| t.job)
            .collect();
        self.cancel_unknown_attempts(resource_id, running, &jobs, ctx);
        for job_id in jobs {
            if let Some(job) = self.jobs.get_mut(&job_id) {
                job.record_io(io);
            }
            self.with_job(job_id, ctx, |job, cx| {
                job.reconcile(resource_id, running, cx)
            });
        }
    }

    /// Cancels the attempts `resource_id` runs that no job has placed there now (Flink's
    /// `ExecutionDeploymentReconciler` cancels such "unknown deployments"): attempts the
    /// JobManager moved past, still holding their slots. Seed 1,100,250: a submission meant for
    /// a TaskManager's earlier registration, delivered after a pause once it had registered
    /// anew, ran a sleep task the JobManager had failed with that registration; the job's next
    /// attempts, placed in the same slot, were refused (`NoFreeSlot`) until its restarts ran
    /// out. An attempt that ended meanwhile is unknown to its TaskManager too: the cancel is
    /// then a no-op.
    fn cancel_unknown_attempts(
        &mut self,
        resource_id: &ResourceId,
        running: &std::collections::BTreeSet<crate::base::ids::ExecutionAttemptId>,
        jobs_there: &std::collections::BTreeSet<JobId>,
        ctx: &mut Context<Self>,
    ) {
        if running.is_empty() {
            return;
        }
        let mut unknown = running.clone();
        // Jobs with a slot there or a deployment sent there (mostly the same): each walked once.
        let deployed = self.jobs_on.get(resource_id).into_iter().flatten();
        let jobs: std::collections::BTreeSet<&JobId> = jobs_there.iter().chain(deployed).collect();
        for job_id in jobs {
            if let Some(job) = self.jobs.get(job_id) {
                for attempt in job.attempts_placed_on(resource_id) {
                    unknown.remove(&attempt);
                }
            }
        }
        let Some(first) = unknown.first() else {
            return;
        };
        log::warn!(
            "job manager: {resource_id} runs {} attempt(s) ({first}, ...) no job has placed there; \
             cancelling them",
            unknown.len()
        );
        let cancels = BTreeMap::from([(resource_id.clone(), unknown.into_iter().collect())]);
        self.send_cancels(cancels, ctx);
    }

    /// Sends `ReleaseJobPartitions` again to a TaskManager that reports partitions of a job
    /// that is not running here (ended, or ended so long ago it was forgotten): the release
    /// sent when the job ended is a tell and was lost, and without this the partitions (and
    /// a blocking result's spill files) would stay until the TaskManager restarts. A new
    /// leader never meets an old leader's partitions: a TaskManager drops them all when its
    /// JobManager changes.
    pub(super) fn release_ended_partitions(&self, resource_id: &ResourceId, jobs: &[JobId]) {
        let Some(gateway) = self.gateways.get(resource_id) else {
            return;
        };
        if self.batch_recovery.window_open() {
            // Perhaps a job not recovered yet: the window's end releases what nobody took.
            return;
        }
        for &job_id in jobs {
            let running = self
                .jobs
                .get(&job_id)
                .is_some_and(|job| !job.status().is_globally_terminal());
            if !running {
                log::debug!(
                    "job manager: {resource_id} still holds partitions of ended job {job_id}; releasing them again"
                );
                gateway
                    .release_job_partitions
                    .do_send(ReleaseJobPartitions {
                        leader_session_id: self.leader_session_id,
                        job_id,
                    });
            }
        }
    }

    /// Whether `resource_id` may not be released: a task holds a slot there, or it holds
    /// finished results a running job still needs.
    pub(super) fn is_busy(&self, resource_id: &ResourceId) -> bool {
        self.scheduler.used_slots(resource_id) > 0
            // It offered results a recovered job may take back (the window is open).
            || self.batch_recovery.holds_offered(resource_id)
            || self.jobs_on.get(resource_id).is_some_and(|jobs| {
                jobs.iter().any(|job| {
                    self.jobs
                        .get(job)
                        .is_some_and(|j| j.needs_results_on(resource_id))
                })
            })
    }

    /// Forgets the ended jobs that ended first beyond `jobstore.max-capacity` (counting the
    /// one that just ended), so the job list stays bounded; the job that just ended is never
    /// among them (a client is about to ask for it). O(log J) per job forgotten.
    pub(super) fn forget_ended_jobs(&mut self, just_ended: JobId) {
        let keep = self.settings.jobstore.max_capacity as usize;
        // Their results by the same rule (the just-ended one is dirty: it stays).
        self.job_results
            .expire(self.env.clock.now_millis(), self.settings.jobstore);
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
    pub(super) fn forget_expired_jobs(&mut self) {
        let expiration = self.settings.jobstore.expiration_time.as_millis() as u64;
        let now = self.env.clock.now_millis();
        // Their results, by the same rules (only clean ones: a dirty one has cleanup to do).
        self.job_results.expire(now, self.settings.jobstore);
        while let Some(&(ended_at, job_id)) = self.ended.first() {
            if ended_at.saturating_add(expiration) > now {
                return;
            }
            self.ended.pop_first();
            self.jobs.remove(&job_id);
        }
    }
}

/// Tasks placed (and deployed) by one [`JobManager::serve_queue`] call at most.
pub(super) const SERVE_BUDGET: usize = 64;

/// How often the release of an early-finished task's unread subpartitions is repeated while
/// their producers run ([`JobManager::release_unread`]): a lost release holds a producer a
/// few seconds, far less than its TaskManager's heartbeat timeout would.
pub(super) const UNREAD_RELEASE_REPEAT: std::time::Duration = std::time::Duration::from_secs(5);

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
        self.declare_resource_requirements();
    }
}

impl Handler<RequestJobResults> for JobManager {
    type Result = Result<JobResults, JobError>;

    /// From the job's execution graph; for a job that ended under an earlier leader, from the
    /// job result store (what its tasks sent back is kept there with its result).
    fn handle(&mut self, msg: RequestJobResults, _: &mut Context<Self>) -> Self::Result {
        let _timed = self.mailbox.time("RequestJobResults");
        if let Some(job) = self.jobs.get(&msg.job_id) {
            return Ok(job.results());
        }
        let status = self
            .job_results
            .details(msg.job_id)
            .map(|details| details.summary.status)
            .ok_or(JobError::UnknownJob(msg.job_id))?;
        match self.job_results.results(msg.job_id) {
            Ok(kept) => Ok(JobResults {
                status: Some(status),
                ..kept.unwrap_or_default()
            }),
            Err(error) => Err(JobError::ResultsUnreadable(
                crate::base::error_chain::ErrorChain(&error).to_string(),
            )),
        }
    }
}

impl Handler<UpdateTaskExecutionStates> for JobManager {
    type Result = MessageResult<UpdateTaskExecutionStates>;

    /// Every change first, then the slot queue is served once for all the slots they freed.
    fn handle(&mut self, msg: UpdateTaskExecutionStates, ctx: &mut Context<Self>) -> Self::Result {
        let _timed = self.mailbox.time("UpdateTaskExecutionStates");
        log::debug!("job manager <- {msg:?}");
        for update in msg.states {
            if let (Some(io), Some(job)) = (update.io, self.jobs.get_mut(&update.job_id)) {
                job.record_io(&[(update.attempt, io)]);
            }
            if let (Some(result), Some(job)) = (update.result, self.jobs.get_mut(&update.job_id)) {
                job.record_result(update.attempt, result);
            }
            self.run_job(update.job_id, ctx, |job, cx| {
                job.update_with_lost_input(
                    update.attempt,
                    update.state,
                    update.error,
                    update.unavailable_partition,
                    update.unrecoverable,
                    cx,
                )
            });
            if update.ended_early {
                self.release_unread(update.job_id, update.attempt, ctx);
            }
        }
        self.serve_queue(ctx);
        self.declare_resource_requirements();
        MessageResult(crate::messages::Acknowledge)
    }
}

#[cfg(test)]
mod tests;

/// The operator identities a job graph needs.
pub(super) fn graph_operators(
    graph: &crate::job::graph::JobGraph,
) -> super::scheduler::capabilities::OperatorSet {
    std::sync::Arc::new(graph.vertices.iter().map(|v| v.operator.clone()).collect())
}
