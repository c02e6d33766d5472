//! Batch job recovery across a leader failover (FLIP-383's shape), the JobManager's half.
//!
//! While a job runs under high availability, its [`ExecutionGraph`] records the regions it
//! finishes; this module batches those events and appends them to the job's event log once per
//! [`FLUSH_INTERVAL`] (never one write per task). A new leader opens a *recovery window*
//! (`execution.batch.job-recovery.previous-worker.recovery.timeout`, Flink's key and 30 s
//! default) when it starts: TaskManagers that re-register offer the finished blocking
//! partitions they kept, and a recovered job whose log names finished regions waits (CREATED)
//! until every TaskManager those regions ran on has registered, or the window closes. Then the
//! job [takes back](ExecutionGraph::restore) every finished region whose results are all still
//! there and runs only the rest; the partitions nobody took back are released. A TaskManager
//! that does not come back in time costs the reruns of what it held, nothing more.
//!
//! What this module must never do: release a partition a restored region's readers need, or
//! let a job wait past the window.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use actix::prelude::*;

use super::JobManager;
use super::execution_graph::ExecutionGraph;
use crate::base::ids::{JobId, ResourceId};
use crate::ha::job_event_log::{FinishedTask, JobEvent, JobEventLog, replay};
use crate::messages::ResultPartitionId;
use crate::messages::task_manager::ReleasePartitions;

/// How long job events wait to be appended together.
pub const FLUSH_INTERVAL: Duration = Duration::from_millis(200);

/// See the module docs.
#[derive(Debug, Default)]
pub(super) struct BatchRecovery {
    /// Where events go; `None`: not recorded (no high availability, or recovery off).
    log: Option<JobEventLog>,
    /// The recovery window is open: partitions offered by re-registering TaskManagers wait
    /// for their jobs.
    window_open: bool,
    /// Partitions TaskManagers kept from the previous leader, by job, then TaskManager.
    offered: BTreeMap<JobId, BTreeMap<ResourceId, BTreeSet<ResultPartitionId>>>,
    /// Recovered jobs (in `jobs`, not started) waiting for the TaskManagers their finished
    /// regions ran on.
    waiting: BTreeMap<JobId, Waiting>,
    /// Events not appended yet, by job.
    unflushed: BTreeMap<JobId, Vec<JobEvent>>,
    /// Results made unneeded by events not appended yet: released after the next flush, so a
    /// new leader never finds a region's results gone while its log still says a reader of
    /// them has to run.
    deferred_releases: Vec<(JobId, ResourceId, Vec<ResultPartitionId>)>,
    flush_scheduled: bool,
}

#[derive(Debug)]
struct Waiting {
    finished: BTreeMap<u32, Vec<FinishedTask>>,
    /// TaskManagers not registered yet.
    awaited: BTreeSet<ResourceId>,
}

impl BatchRecovery {
    /// Whether jobs record their progress.
    pub(super) fn is_logging(&self) -> bool {
        self.log.is_some()
    }

    /// Whether `resource_id` offered results a recovered job may still take back: it is not
    /// idle, whatever its slots say (releasing it would make finished work run again).
    pub(super) fn holds_offered(&self, resource_id: &ResourceId) -> bool {
        (self.offered.values()).any(|by| by.get(resource_id).is_some_and(|p| !p.is_empty()))
    }

    /// Whether a TaskManager's partitions of an unknown job may belong to a job not recovered
    /// yet (so they are not released as an ended job's).
    pub(super) fn window_open(&self) -> bool {
        self.window_open
    }
}

impl JobManager {
    /// At the start of a leadership with high availability and batch job recovery on: jobs
    /// record their progress, and the recovery window opens.
    pub(super) fn open_recovery_window(&mut self, ctx: &mut Context<Self>) {
        let config = self.settings.batch_job_recovery;
        let Some(log) = self.job_graphs.event_log().filter(|_| config.enabled) else {
            return;
        };
        self.batch_recovery.log = Some(log);
        self.batch_recovery.window_open = true;
        ctx.run_later(config.previous_worker_recovery_timeout, |act, ctx| {
            act.close_recovery_window(ctx);
        });
    }

    /// A TaskManager registered offering `partitions` it kept from an earlier leader: held for
    /// their jobs while the window is open, released otherwise.
    pub(super) fn take_offered_partitions(
        &mut self,
        resource_id: &ResourceId,
        partitions: Vec<(JobId, Vec<ResultPartitionId>)>,
        ctx: &mut Context<Self>,
    ) {
        let recovery = &mut self.batch_recovery;
        if !recovery.window_open {
            for (job_id, partitions) in partitions {
                self.release_offered(resource_id, job_id, partitions);
            }
            return;
        }
        let count: usize = partitions.iter().map(|(_, p)| p.len()).sum();
        if count > 0 {
            log::info!(
                "job manager: {resource_id} offers {count} finished result partitions of {} job(s) from the previous leader",
                partitions.len()
            );
        }
        for (job_id, held) in partitions {
            (recovery.offered.entry(job_id).or_default())
                .entry(resource_id.clone())
                .or_default()
                .extend(held);
        }
        let ready: Vec<JobId> = (recovery.waiting.iter_mut())
            .filter_map(|(job_id, waiting)| {
                waiting.awaited.remove(resource_id);
                waiting.awaited.is_empty().then_some(*job_id)
            })
            .collect();
        for job_id in ready {
            self.resume_recovered_job(job_id, ctx);
        }
    }

    /// A TaskManager left: what it offered is gone with it.
    pub(super) fn forget_offered(&mut self, resource_id: &ResourceId) {
        for held in self.batch_recovery.offered.values_mut() {
            held.remove(resource_id);
        }
    }

    /// Starts a recovered job, or parks it until the TaskManagers its event log names are back.
    pub(super) fn start_recovered_job(
        &mut self,
        job_id: JobId,
        job: ExecutionGraph,
        ctx: &mut Context<Self>,
    ) {
        let finished = match self.batch_recovery.log.as_ref().map(|log| log.read(job_id)) {
            Some(Ok(events)) => replay(&events),
            Some(Err(error)) => {
                log::warn!(
                    "job manager: job {job_id}: its event log cannot be read ({}); it runs again from the start",
                    crate::base::error_chain::ErrorChain(&error)
                );
                BTreeMap::new()
            }
            None => BTreeMap::new(),
        };
        if finished.is_empty() {
            log::info!("job manager: recovered job {job_id}: it runs again from the start");
            self.start_job(job_id, job, ctx);
            return;
        }
        let awaited: BTreeSet<ResourceId> = (finished.values().flatten())
            .map(|task| task.resource_id.clone())
            .filter(|resource_id| self.instances.get(resource_id).is_none())
            .collect();
        log::info!(
            "job manager: recovered job {job_id}: its event log names {} finished regions; waiting for {} of their TaskManagers",
            finished.len(),
            awaited.len()
        );
        self.jobs.insert(job_id, job);
        self.batch_recovery
            .waiting
            .insert(job_id, Waiting { finished, awaited });
        if !self.batch_recovery.window_open
            || (self.batch_recovery.waiting.get(&job_id)).is_some_and(|w| w.awaited.is_empty())
        {
            self.resume_recovered_job(job_id, ctx);
        }
    }

    /// A parked job's TaskManagers are back (or the window closed): it takes back what they
    /// still hold and starts.
    fn resume_recovered_job(&mut self, job_id: JobId, ctx: &mut Context<Self>) {
        let Some(waiting) = self.batch_recovery.waiting.remove(&job_id) else {
            return;
        };
        let offered = self
            .batch_recovery
            .offered
            .remove(&job_id)
            .unwrap_or_default();
        let created = self
            .jobs
            .get(&job_id)
            .is_some_and(|job| job.status() == crate::job::states::JobStatus::Created);
        if !created {
            // Cancelled while it waited.
            for (resource_id, partitions) in offered {
                self.release_offered(&resource_id, job_id, partitions.into_iter().collect());
            }
            return;
        }
        if let Some(job) = self.jobs.get_mut(&job_id) {
            job.log_events();
            self.scheduler
                .require(job_id, super::jobs::graph_operators(job.graph()));
        }
        let mut restored = None;
        let held = |resource_id: &ResourceId, partition: ResultPartitionId| {
            (offered.get(resource_id)).is_some_and(|held| held.contains(&partition))
        };
        self.with_job(job_id, ctx, |job, cx| {
            let (taken, mut actions) = job.restore(&waiting.finished, &held, cx);
            restored = Some(taken);
            actions.extend(job.start(cx));
            actions
        });
        let restored = restored.unwrap_or_default();
        log::info!(
            "job manager: recovered job {job_id}: {} of {} logged regions taken back ({} tasks not run again); the rest runs again",
            restored.regions,
            waiting.finished.len(),
            restored.tasks
        );
        for (resource_id, partitions) in offered {
            if (self.jobs.get(&job_id)).is_some_and(|job| !job.status().is_globally_terminal())
                && partitions
                    .iter()
                    .any(|p| restored.attempts.contains(&p.producer))
            {
                self.jobs_on
                    .entry(resource_id.clone())
                    .or_default()
                    .insert(job_id);
            }
            let orphans: Vec<ResultPartitionId> = (partitions.into_iter())
                .filter(|p| !restored.attempts.contains(&p.producer))
                .collect();
            self.release_offered(&resource_id, job_id, orphans);
        }
    }

    /// The window closed: every parked job starts with what is back, and the partitions no
    /// recovered job took are released.
    fn close_recovery_window(&mut self, ctx: &mut Context<Self>) {
        self.batch_recovery.window_open = false;
        let parked: Vec<JobId> = self.batch_recovery.waiting.keys().copied().collect();
        for job_id in parked {
            self.resume_recovered_job(job_id, ctx);
        }
        for (job_id, by_task_manager) in std::mem::take(&mut self.batch_recovery.offered) {
            for (resource_id, partitions) in by_task_manager {
                self.release_offered(&resource_id, job_id, partitions.into_iter().collect());
            }
        }
    }

    fn release_offered(
        &self,
        resource_id: &ResourceId,
        job_id: JobId,
        partitions: Vec<ResultPartitionId>,
    ) {
        if partitions.is_empty() {
            return;
        }
        log::debug!(
            "job manager: releasing {} partitions of job {job_id} on {resource_id} from the previous leader",
            partitions.len()
        );
        if let Some(gateway) = self.gateways.get(resource_id) {
            gateway.release_partitions.do_send(ReleasePartitions {
                subpartitions: Vec::new(),
                leader_session_id: self.leader_session_id,
                job_id,
                partitions,
            });
        }
    }

    /// Holds back the release of `partitions` while `job_id` has events not appended yet (the
    /// finish of the regions that read them among them); `Some` to release now.
    pub(super) fn defer_release(
        &mut self,
        job_id: JobId,
        resource_id: ResourceId,
        partitions: Vec<ResultPartitionId>,
    ) -> Option<(ResourceId, Vec<ResultPartitionId>)> {
        let recovery = &mut self.batch_recovery;
        if !recovery.unflushed.contains_key(&job_id) {
            return Some((resource_id, partitions));
        }
        recovery
            .deferred_releases
            .push((job_id, resource_id, partitions));
        None
    }

    /// Keeps a job's new events for the next flush.
    pub(super) fn queue_job_events(
        &mut self,
        job_id: JobId,
        events: Vec<JobEvent>,
        ctx: &mut Context<Self>,
    ) {
        let recovery = &mut self.batch_recovery;
        recovery.unflushed.entry(job_id).or_default().extend(events);
        if !recovery.flush_scheduled {
            recovery.flush_scheduled = true;
            ctx.run_later(FLUSH_INTERVAL, |act, _| act.flush_job_events());
        }
    }

    /// Appends `job_id`'s queued events now (it ended: nothing comes after them).
    pub(super) fn flush_job_events_of(&mut self, job_id: JobId) {
        let Some(events) = self.batch_recovery.unflushed.remove(&job_id) else {
            return;
        };
        if let Some(log) = &self.batch_recovery.log
            && let Err(error) = log.append(job_id, &events)
        {
            log::warn!(
                "job manager: job {job_id}: {}",
                crate::base::error_chain::ErrorChain(&error)
            );
        }
    }

    /// Appends every job's queued events, one frame per job. A job that ended is skipped (its
    /// log is being removed with its graph); a failed append is logged and dropped (a failover
    /// then reruns more).
    fn flush_job_events(&mut self) {
        let _timed = self.mailbox.time("job event flush");
        self.batch_recovery.flush_scheduled = false;
        let Some(log) = self.batch_recovery.log.clone() else {
            return;
        };
        for (job_id, events) in std::mem::take(&mut self.batch_recovery.unflushed) {
            let running =
                (self.jobs.get(&job_id)).is_some_and(|job| !job.status().is_globally_terminal());
            if !running {
                continue;
            }
            if let Err(error) = log.append(job_id, &events) {
                log::warn!(
                    "job manager: job {job_id}: {}; a failover reruns what they recorded",
                    crate::base::error_chain::ErrorChain(&error)
                );
            }
        }
        for (job_id, resource_id, partitions) in
            std::mem::take(&mut self.batch_recovery.deferred_releases)
        {
            self.release_results_now(job_id, &resource_id, partitions);
        }
    }
}

#[cfg(test)]
mod tests;
