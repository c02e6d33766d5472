//! The JobManager's Dispatcher duties (Flink's `Dispatcher`): what happens to a job before it
//! runs and after it ended, as opposed to while it runs (`jobs`, the execution graph).
//!
//! - **Persist, then run.** A submitted job is validated and its execution graph built; its
//!   graph is then written to the job graph store, and only once it is stored does the job start
//!   and `SubmitJob` answer (Flink persists first): a job the store does not hold must never run,
//!   since a new leader could not recover it. A graph that cannot be stored is refused
//!   ([`JobError::NotPersisted`]) and nothing of it ran.
//! - **A result, then the cleanup.** A job that reached a globally terminal state has its result
//!   written to the [`JobResultStore`] (dirty) before anything else, then its graph is removed
//!   from the job graph store, then the result is marked clean; every step is retried until it
//!   succeeds, and a new leader finishes the dirty ones it finds (Flink's
//!   `JobResultStore`-based cleanup, FLIP-194).
//! - **Recovery never runs a job twice.** A job a new leader finds in the job graph store runs
//!   again only if it has no result; one with a result has its cleanup finished instead. A
//!   graph that cannot be read fails its job alone, with the reason, kept as its result.
//! - **Ended jobs are still answered.** A job this JobManager no longer holds (it ended under an
//!   earlier leader, or its execution graph expired) is answered from its result, each vertex
//!   summarized ([`JobDetails::from_job_result_store`]).
//!
//! What this module must never do: start a job before its graph is stored, or recover a job
//! that has a result.

use std::time::Duration;

use actix::prelude::*;

use super::JobManager;
use super::execution_graph::ExecutionGraph;
use crate::base::error_chain::ErrorChain;
use crate::base::ids::JobId;
use crate::job::graph::JobGraph;
use crate::job::regions::PipelinedRegions;
use crate::job::states::JobStatus;
use crate::messages::job_manager::*;

/// How long a failed step of a job's cleanup (a result not written, a graph not removed) waits
/// before it is tried again.
pub(super) const CLEANUP_RETRY: Duration = Duration::from_secs(1);

impl JobManager {
    /// Validates `graph` and builds job `job_id`'s execution graph, not started; `recovered_at`:
    /// a new leader recovered it then (ms since the epoch).
    fn prepare_job(
        &mut self,
        job_id: JobId,
        graph: JobGraph,
        regions: Option<PipelinedRegions>,
        recovered_at: Option<u64>,
    ) -> Result<ExecutionGraph, JobError> {
        self.check_runnable(&graph)?;
        graph
            .validate(|_| true)
            .map_err(|e| JobError::Rejected(e.to_string()))?;
        if recovered_at.is_none() {
            self.check_capacity(&graph)?;
        }
        let now_ms = self.env.clock.now_millis();
        let rng = self.rng.fork();
        let mut job = match regions {
            Some(regions) => ExecutionGraph::with_regions(job_id, graph, regions, rng, now_ms),
            None => ExecutionGraph::new(job_id, graph, rng, now_ms)
                .map_err(|e| JobError::Rejected(e.to_string()))?,
        };
        if let Some(at) = recovered_at {
            job.mark_recovered(at);
        }
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
        Ok(job)
    }

    /// Runs a prepared job.
    pub(super) fn start_job(
        &mut self,
        job_id: JobId,
        mut job: ExecutionGraph,
        ctx: &mut Context<Self>,
    ) {
        if self.batch_recovery.is_logging() {
            job.log_events();
        }
        log::info!("job manager: job {job_id} ({}) submitted", job.graph().name);
        self.scheduler
            .require(job_id, super::jobs::graph_operators(job.graph()));
        self.jobs.insert(job_id, job);
        self.with_job(job_id, ctx, |job, cx| job.start(cx));
    }

    /// Keeps how a job ended (dirty) and what its tasks sent back, then cleans it up. Retried
    /// until written; waits while the leadership lease is not held (a deposed leader's result
    /// would race the new leader's run of the job).
    pub(super) fn record_result(
        &mut self,
        details: JobDetails,
        results: Option<JobResults>,
        ctx: &mut Context<Self>,
    ) {
        let job_id = details.summary.job_id;
        if !self.lease.is_held_now() {
            ctx.run_later(crate::ha::lease::RECHECK, move |act, ctx| {
                act.record_result(details, results, ctx)
            });
            return;
        }
        match self
            .job_results
            .create_dirty_result_with(&details, results.as_ref())
        {
            Ok(()) => self.clean_up(job_id, ctx),
            Err(error) => {
                log::warn!(
                    "job manager: cannot keep the result of job {job_id}: {}; trying again in {CLEANUP_RETRY:?}",
                    ErrorChain(&error)
                );
                ctx.run_later(CLEANUP_RETRY, move |act, ctx| {
                    act.record_result(details, results, ctx)
                });
            }
        }
    }

    /// Removes an ended job's graph from the job graph store, then marks its result clean.
    /// Retried until done; one cleanup per job at a time.
    pub(super) fn clean_up(&mut self, job_id: JobId, ctx: &mut Context<Self>) {
        if !self.cleaning.insert(job_id) {
            return;
        }
        self.job_graphs
            .remove_job_graph(job_id)
            .into_actor(self)
            .map(move |removed, act, ctx| {
                act.cleaning.remove(&job_id);
                let cleaned = match removed {
                    Ok(()) => act
                        .job_results
                        .mark_result_as_clean(job_id)
                        .map_err(|e| ErrorChain(&e).to_string()),
                    Err(error) => Err(ErrorChain(&error).to_string()),
                };
                match cleaned {
                    Ok(()) => log::debug!(
                        "job manager: job {job_id} is cleaned up: its graph left the job graph store"
                    ),
                    Err(error) => {
                        log::warn!(
                            "job manager: cannot clean up ended job {job_id}: {error}; trying again in {CLEANUP_RETRY:?}"
                        );
                        ctx.run_later(CLEANUP_RETRY, move |act, ctx| act.clean_up(job_id, ctx));
                    }
                }
            })
            .spawn(ctx);
    }

    /// A job's details: its execution graph's, else its kept result's.
    fn job_details(&self, job_id: JobId) -> Option<JobDetails> {
        if let Some(job) = self.jobs.get(&job_id) {
            return Some(job.details());
        }
        let mut details = self.job_results.details(job_id)?;
        details.from_job_result_store = true;
        Some(details)
    }
}

impl Handler<SubmitJob> for JobManager {
    type Result = ResponseActFuture<Self, Result<JobId, JobError>>;

    /// Answered once the graph is stored and the job started (or refused).
    fn handle(&mut self, msg: SubmitJob, _: &mut Context<Self>) -> Self::Result {
        let _timed = self.mailbox.time("SubmitJob");
        log::debug!("job manager <- SubmitJob {}", msg.job_graph.name);
        let job_id = JobId::generate(&mut self.rng);
        let job = match self.prepare_job(job_id, msg.job_graph, msg.regions, None) {
            Ok(job) => job,
            Err(error) => return Box::pin(fut::ready(Err(error))),
        };
        self.persisting.insert(job_id);
        let stored = self.job_graphs.put_job_graph(job_id, job.graph());
        Box::pin(stored.into_actor(self).map(move |stored, act, ctx| {
            act.persisting.remove(&job_id);
            match stored {
                Ok(()) => {
                    act.start_job(job_id, job, ctx);
                    Ok(job_id)
                }
                Err(error) => {
                    let why = ErrorChain(&error).to_string();
                    log::warn!(
                        "job manager: job {job_id} not started: its graph was not stored: {why}"
                    );
                    Err(JobError::NotPersisted(why))
                }
            }
        }))
    }
}

impl Handler<RecoverJob> for JobManager {
    type Result = Result<JobId, JobError>;

    fn handle(&mut self, msg: RecoverJob, ctx: &mut Context<Self>) -> Self::Result {
        let _timed = self.mailbox.time("RecoverJob");
        let job_id = msg.job_id;
        if self.job_results.has_job_result_entry(job_id) {
            log::info!(
                "job manager: job {job_id} has a result already: not run again; finishing its cleanup"
            );
            self.clean_up(job_id, ctx);
            return Ok(job_id);
        }
        if self.jobs.contains_key(&job_id) || self.persisting.contains(&job_id) {
            log::debug!("job manager: job {job_id} is known already; not recovering it again");
            return Ok(job_id);
        }
        let now_ms = self.env.clock.now_millis();
        let failed = match msg.job_graph {
            Ok(graph) => match self.prepare_job(job_id, graph, None, Some(now_ms)) {
                Ok(job) => {
                    self.start_recovered_job(job_id, job, ctx);
                    return Ok(job_id);
                }
                Err(error) => format!("its recovered job graph was refused: {error}"),
            },
            Err(reason) => reason,
        };
        log::warn!("job manager: job {job_id} cannot be recovered: {failed}");
        // FAILED with the reason, kept as its result (its graph leaves the store).
        let details = JobDetails {
            summary: JobSummary {
                job_id,
                name: String::new(),
                status: JobStatus::Failed,
                tasks_finished: 0,
                tasks_total: 0,
                submitted_at_ms: now_ms,
            },
            status_timestamps: vec![(JobStatus::Failed, now_ms)],
            failure: Some(failed),
            restarts: 0,
            vertices: Vec::new(),
            recovered_at_ms: Some(now_ms),
            exceptions: Vec::new(),
            from_job_result_store: false,
            artifacts: Vec::new(),
        };
        self.record_result(details, None, ctx);
        Ok(job_id)
    }
}

impl Handler<CancelJob> for JobManager {
    type Result = Result<JobStatus, JobError>;

    fn handle(&mut self, msg: CancelJob, ctx: &mut Context<Self>) -> Self::Result {
        let _timed = self.mailbox.time("CancelJob");
        log::debug!("job manager <- {msg:?}");
        let Some(job) = self.jobs.get(&msg.job_id) else {
            return Err(match self.job_results.details(msg.job_id) {
                Some(ended) => JobError::AlreadyTerminal {
                    job_id: msg.job_id,
                    status: ended.summary.status,
                },
                None => JobError::UnknownJob(msg.job_id),
            });
        };
        if job.status().is_globally_terminal() {
            return Err(JobError::AlreadyTerminal {
                job_id: msg.job_id,
                status: job.status(),
            });
        }
        self.with_job(msg.job_id, ctx, |job, cx| job.cancel(cx));
        self.jobs
            .get(&msg.job_id)
            .map(ExecutionGraph::status)
            .ok_or(JobError::UnknownJob(msg.job_id))
    }
}

impl Handler<RequestJobStatus> for JobManager {
    type Result = Result<JobDetails, JobError>;

    fn handle(&mut self, msg: RequestJobStatus, _: &mut Context<Self>) -> Self::Result {
        let _timed = self.mailbox.time("RequestJobStatus");
        self.job_details(msg.job_id)
            .ok_or(JobError::UnknownJob(msg.job_id))
    }
}

impl Handler<ListJobs> for JobManager {
    type Result = MessageResult<ListJobs>;

    /// Every job held, and every job of the result store that is not.
    fn handle(&mut self, _: ListJobs, _: &mut Context<Self>) -> Self::Result {
        let _timed = self.mailbox.time("ListJobs");
        let mut jobs: Vec<JobSummary> = self.jobs.values().map(ExecutionGraph::summary).collect();
        jobs.extend(
            self.job_results
                .summaries()
                .into_iter()
                .filter(|summary| !self.jobs.contains_key(&summary.job_id)),
        );
        jobs.sort_by_key(|j| (j.submitted_at_ms, j.job_id));
        MessageResult(jobs)
    }
}

#[cfg(test)]
mod tests;
