//! Deployments: the tasks the JobManager placed, sent as one `SubmitTasks` per TaskManager per
//! turn of the actor, and each task's answer.
//!
//! Placing a task only queues it ([`JobManager::deploy`]); the queue is sent once the messages
//! waiting in the mailbox are handled ([`FlushDeployments`], a notification the actor runs
//! after draining its mailbox), so a wave of short tasks costs one message per TaskManager
//! instead of one per task. Anything else the JobManager sends a TaskManager (a cancel, a
//! partition release, a disconnect) first sends what is queued for it
//! ([`JobManager::flush_deployments_to`]): a TaskManager sees them in the order they were
//! decided.

use std::collections::BTreeMap;

use actix::prelude::*;

use super::JobManager;
use crate::base::ids::{ExecutionAttemptId, JobId, ResourceId};
use crate::messages::RemovalReason;
use crate::messages::deployment::{Producers, TaskDeploymentDescriptor};
use crate::messages::task_manager::{CancelTasks, SubmitTasks, TaskSubmissionError};

/// How often a deployment refused for want of a free slot is sent again, and how long it waits
/// in between: at most 2 s in all, about the time a cancelled task takes to stop and free its
/// slot.
const SLOT_BUSY_RETRIES: u32 = 10;
const SLOT_BUSY_RETRY: std::time::Duration = std::time::Duration::from_millis(200);

/// A task waiting to be sent to its TaskManager.
pub(super) struct Deployment {
    job_id: JobId,
    descriptor: Box<TaskDeploymentDescriptor>,
    /// Sends left after a `NoFreeSlot` or `UnknownProducers` refusal.
    retries: u32,
}

/// A sent task waiting for its answer.
struct Sent {
    job_id: JobId,
    attempt: ExecutionAttemptId,
    /// The task again, while retries are left.
    again: Option<Box<TaskDeploymentDescriptor>>,
    retries: u32,
}

impl JobManager {
    /// Queues a placed task for its TaskManager. A TaskManager whose slots are all still held
    /// (tasks the JobManager gave up on, still stopping there, or submissions that arrived
    /// late after a pause) refuses with `NoFreeSlot`: that is retried [`SLOT_BUSY_RETRIES`]
    /// times, [`SLOT_BUSY_RETRY`] apart, while the attempt still waits for it, instead of
    /// failing the attempt at once (issue 12, seed 461: one 3 s pause made five refusals in
    /// 56 ms exhaust a job's four restarts). Any other outcome resolves the deployment: taken,
    /// refused, unreachable, or unanswered within the ask timeout.
    pub(super) fn deploy(
        &mut self,
        job_id: JobId,
        resource_id: ResourceId,
        descriptor: Box<TaskDeploymentDescriptor>,
        ctx: &mut Context<Self>,
    ) {
        let deployment = Deployment {
            job_id,
            descriptor,
            retries: SLOT_BUSY_RETRIES,
        };
        self.queue_deployment(resource_id, deployment, ctx);
    }

    fn queue_deployment(
        &mut self,
        resource_id: ResourceId,
        deployment: Deployment,
        ctx: &mut Context<Self>,
    ) {
        if self.outbox.is_empty() {
            ctx.notify(FlushDeployments);
        }
        self.outbox.entry(resource_id).or_default().push(deployment);
    }

    /// Sends every queued task.
    fn flush_deployments(&mut self, ctx: &mut Context<Self>) {
        for (resource_id, deployments) in std::mem::take(&mut self.outbox) {
            self.send_deployments(resource_id, deployments, ctx);
        }
    }

    /// Sends the tasks queued for one TaskManager: call before sending it anything else.
    pub(super) fn flush_deployments_to(
        &mut self,
        resource_id: &ResourceId,
        ctx: &mut Context<Self>,
    ) {
        if let Some(deployments) = self.outbox.remove(resource_id) {
            self.send_deployments(resource_id.clone(), deployments, ctx);
        }
    }

    fn send_deployments(
        &mut self,
        resource_id: ResourceId,
        deployments: Vec<Deployment>,
        ctx: &mut Context<Self>,
    ) {
        if !self.lease.is_held_now() {
            // Maybe no longer the leader (this process was paused past its lease): wait until
            // the leader loop renews the lease, or stops this JobManager.
            log::debug!(
                "job manager: leadership lease lapsed; {} deployments to {resource_id} wait",
                deployments.len()
            );
            ctx.run_later(crate::ha::lease::RECHECK, move |act, ctx| {
                for deployment in deployments {
                    let attempt = deployment.descriptor.attempt;
                    let waiting = act
                        .jobs
                        .get(&deployment.job_id)
                        .is_some_and(|job| job.is_deploying(attempt));
                    if waiting {
                        act.queue_deployment(resource_id.clone(), deployment, ctx);
                    }
                }
            });
            return;
        }
        let Some(gateway) = self.gateways.get(&resource_id) else {
            // Handled as a message of its own: this may run while a job's actions are carried
            // out.
            let error = format!("TaskManager {resource_id} is not registered");
            ctx.notify(DeploymentsFailed(
                deployments
                    .into_iter()
                    .map(|d| (d.job_id, d.descriptor.attempt, error.clone()))
                    .collect(),
            ));
            return;
        };
        let mut descriptors = Vec::with_capacity(deployments.len());
        let mut sent = Vec::with_capacity(deployments.len());
        for deployment in deployments {
            sent.push(Sent {
                job_id: deployment.job_id,
                attempt: deployment.descriptor.attempt,
                again: (deployment.retries > 0).then(|| deployment.descriptor.clone()),
                retries: deployment.retries,
            });
            descriptors.push(*deployment.descriptor);
        }
        gateway
            .submit_tasks
            .send(SubmitTasks {
                leader_session_id: self.leader_session_id,
                descriptors,
            })
            .timeout(self.settings.ask_timeout)
            .into_actor(self)
            .map(move |result, act, ctx| {
                let unanswered = match result {
                    Ok(answers) if answers.len() == sent.len() => {
                        let refused = sent
                            .into_iter()
                            .zip(answers)
                            .filter_map(|(sent, answer)| {
                                act.deployment_answered(&resource_id, sent, answer, ctx)
                            })
                            .collect();
                        act.deployments_failed(refused, ctx);
                        return;
                    }
                    // A TaskManager whose mailbox is closed is gone: losing it now (not at its
                    // heartbeat timeout) fails its tasks over once, not again each time a
                    // restart is placed on it.
                    Err(MailboxError::Closed) => {
                        log::warn!("job manager: TaskManager {resource_id} is unreachable");
                        act.lose_task_manager(&resource_id, RemovalReason::Unreachable, ctx);
                        let error = format!("TaskManager {resource_id} is unreachable");
                        let failed = sent
                            .into_iter()
                            .map(|s| (s.job_id, s.attempt, error.clone()))
                            .collect();
                        act.deployments_failed(failed, ctx);
                        return;
                    }
                    Ok(answers) => format!("{} answers to {} tasks", answers.len(), sent.len()),
                    Err(error) => error.to_string(),
                };
                // Delivered but unanswered: the tasks may run; stop them, since the attempts
                // count as failed from now on.
                let error =
                    format!("TaskManager {resource_id} did not take the task: {unanswered}");
                if let Some(gateway) = act.gateways.get(&resource_id) {
                    gateway.cancel_tasks.do_send(CancelTasks {
                        leader_session_id: act.leader_session_id,
                        attempts: sent.iter().map(|s| s.attempt).collect(),
                    });
                }
                let failed = sent
                    .into_iter()
                    .map(|s| (s.job_id, s.attempt, error.clone()))
                    .collect();
                act.deployments_failed(failed, ctx);
            })
            .spawn(ctx);
    }

    /// Fails the tasks of one batch that could not be deployed: one failure per job (see
    /// `ExecutionGraph::deployments_failed`).
    fn deployments_failed(
        &mut self,
        failed: Vec<(JobId, ExecutionAttemptId, String)>,
        ctx: &mut Context<Self>,
    ) {
        let mut by_job: BTreeMap<JobId, Vec<(ExecutionAttemptId, String)>> = BTreeMap::new();
        for (job_id, attempt, error) in failed {
            by_job.entry(job_id).or_default().push((attempt, error));
        }
        for (job_id, failed) in by_job {
            self.with_job(job_id, ctx, |job, cx| job.deployments_failed(failed, cx));
        }
    }

    /// One task's answer; a refusal that is not retried comes back as the task's failure.
    fn deployment_answered(
        &mut self,
        resource_id: &ResourceId,
        sent: Sent,
        answer: Result<(), TaskSubmissionError>,
        ctx: &mut Context<Self>,
    ) -> Option<(JobId, ExecutionAttemptId, String)> {
        let Sent {
            job_id,
            attempt,
            again,
            retries,
        } = sent;
        let error = match answer {
            Ok(()) => {
                if let Some(job) = self.jobs.get_mut(&job_id) {
                    job.deployment_taken(attempt);
                }
                return None;
            }
            Err(TaskSubmissionError::NoFreeSlot(_)) if again.is_some() => {
                if let Some(descriptor) = again {
                    let resource_id = resource_id.clone();
                    ctx.run_later(SLOT_BUSY_RETRY, move |act, ctx| {
                        let waiting = act
                            .jobs
                            .get(&job_id)
                            .is_some_and(|job| job.is_deploying(attempt));
                        if waiting {
                            let deployment = Deployment {
                                job_id,
                                descriptor,
                                retries: retries - 1,
                            };
                            act.queue_deployment(resource_id, deployment, ctx);
                        }
                    });
                }
                return None;
            }
            // It did not get (or dropped) a producer list an earlier task carried: send this
            // one again with the list, while the list is current.
            Err(TaskSubmissionError::UnknownProducers(id)) if again.is_some() => {
                let list = self.jobs.get(&job_id).and_then(|job| job.producer_list(id));
                if let (Some(mut descriptor), Some(locations)) = (again, list) {
                    for gate in &mut descriptor.inputs {
                        if gate.producers == Producers::Known(id) {
                            gate.producers = Producers::Listed {
                                id: Some(id),
                                locations: locations.clone(),
                            };
                        }
                    }
                    let deployment = Deployment {
                        job_id,
                        descriptor,
                        retries: retries - 1,
                    };
                    self.queue_deployment(resource_id.clone(), deployment, ctx);
                    return None;
                }
                format!(
                    "TaskManager {resource_id} refused the task: producer list {id} is not \
                     known there and has been replaced since"
                )
            }
            Err(refused) => format!("TaskManager {resource_id} refused the task: {refused}"),
        };
        Some((job_id, attempt, error))
    }
}

/// Send the queued deployments (see the module docs).
#[derive(Message)]
#[rtype(result = "()")]
struct FlushDeployments;

impl Handler<FlushDeployments> for JobManager {
    type Result = ();

    fn handle(&mut self, _: FlushDeployments, ctx: &mut Context<Self>) {
        let _timed = self.mailbox.time("FlushDeployments");
        self.flush_deployments(ctx);
    }
}

/// Deployments that could not even be sent (their TaskManager is not registered).
#[derive(Message)]
#[rtype(result = "()")]
struct DeploymentsFailed(Vec<(JobId, ExecutionAttemptId, String)>);

impl Handler<DeploymentsFailed> for JobManager {
    type Result = ();

    fn handle(&mut self, msg: DeploymentsFailed, ctx: &mut Context<Self>) {
        let _timed = self.mailbox.time("DeploymentsFailed");
        self.deployments_failed(msg.0, ctx);
    }
}
