//! What must hold in every simulated run: safety after every event, liveness once the quiet
//! phase has had its time. Each check reads snapshots the actors answered (asked back to back,
//! so one actor's answers describe one moment) and returns what is wrong, in words.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::job::states::{ExecutionState, JobStatus};
use crate::messages::ids::ResourceId;
use crate::messages::job_manager::{JobDetails, JobManagerStatus};
use crate::messages::resource_manager::ResourceManagerStatus;

/// What the JobManager node said at one moment.
#[derive(Debug, Clone)]
pub struct JobManagerSnapshot {
    /// The resource manager's status.
    pub pool: ResourceManagerStatus,
    /// The JobManager's status.
    pub cluster: JobManagerStatus,
    /// Every job's details (asked right after the status).
    pub jobs: Vec<JobDetails>,
}

impl JobManagerSnapshot {
    /// The TaskManagers registered at the JobManager.
    pub fn registered(&self) -> BTreeSet<&ResourceId> {
        self.cluster
            .task_managers
            .iter()
            .map(|tm| &tm.resource_id)
            .collect()
    }
}

/// The pool never holds more than it was asked for, beyond workers it is releasing: pending
/// workers only ever fill a gap (started + pending ≤ max(target, started)), and the target is
/// max(designated, demand) within the maximum (demand never overrides the operator's size).
pub fn pool_within_bounds(pool: &ResourceManagerStatus, max: u32) -> Result<(), String> {
    let started = pool.started.len() as u32;
    let pending = pool.pending_requests + pool.pending_registration;
    let allowed = pool.target_pool_size.saturating_sub(started);
    if pending > allowed {
        return Err(format!(
            "pool over its target: {started} started + {} requested + {} registering, target {}",
            pool.pending_requests, pool.pending_registration, pool.target_pool_size
        ));
    }
    let target = pool.designated_pool_size.max(pool.demand).min(max);
    if pool.target_pool_size != target {
        return Err(format!(
            "pool target {} is not max(designated {}, demand {}) within {max}",
            pool.target_pool_size, pool.designated_pool_size, pool.demand
        ));
    }
    Ok(())
}

/// Slots: no TaskManager has more allocated than it has, and every task the JobManager places
/// (deploying or running) is on a TaskManager registered right now.
pub fn slots_consistent(snapshot: &JobManagerSnapshot) -> Result<(), String> {
    let registered = snapshot.registered();
    for tm in &snapshot.cluster.task_managers {
        if tm.slots_free > tm.slots_total {
            return Err(format!(
                "{} has {} free slots of {}",
                tm.resource_id, tm.slots_free, tm.slots_total
            ));
        }
    }
    for job in &snapshot.jobs {
        for vertex in &job.vertices {
            for subtask in &vertex.subtasks {
                let placed = matches!(
                    subtask.state,
                    ExecutionState::Deploying | ExecutionState::Running
                );
                if !placed {
                    continue;
                }
                let Some(resource_id) = &subtask.resource_id else {
                    return Err(format!(
                        "job {} {}[{}] is {:?} without a TaskManager",
                        job.summary.job_id, vertex.name, subtask.subtask, subtask.state
                    ));
                };
                if !registered.contains(resource_id) {
                    return Err(format!(
                        "job {} {}[{}] is {:?} on {resource_id}, which is not registered",
                        job.summary.job_id, vertex.name, subtask.subtask, subtask.state
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Liveness of the pool: at the designated size, nothing pending, and the JobManager knows
/// exactly the started workers.
pub fn pool_converged(snapshot: &JobManagerSnapshot) -> Result<(), String> {
    let pool = &snapshot.pool;
    let started: BTreeSet<&ResourceId> = pool.started.iter().collect();
    let registered = snapshot.registered();
    if pool.started.len() as u32 != pool.target_pool_size
        || pool.pending_requests + pool.pending_registration + pool.releasing > 0
    {
        return Err(format!(
            "pool not converged: target {} (designated {}, demand {}), started {}, requested {}, registering {}, releasing {}",
            pool.target_pool_size,
            pool.designated_pool_size,
            pool.demand,
            pool.started.len(),
            pool.pending_requests,
            pool.pending_registration,
            pool.releasing
        ));
    }
    if started != registered {
        return Err(format!(
            "the resource manager counts {started:?} as started but the JobManager has {registered:?}"
        ));
    }
    Ok(())
}

/// The operator's pool size is never overridden (issue 12): the designated size is the last
/// one the scenario set, whatever the jobs' demand did meanwhile.
pub fn operator_size_kept(pool: &ResourceManagerStatus, operator: u32) -> Result<(), String> {
    if pool.designated_pool_size != operator {
        return Err(format!(
            "the operator set the pool to {operator} but the designated size is {}",
            pool.designated_pool_size
        ));
    }
    Ok(())
}

/// Liveness of jobs: every job ended, a failed one with a reason.
pub fn jobs_ended(jobs: &[JobDetails]) -> Result<(), String> {
    for job in jobs {
        let status = job.summary.status;
        if !status.is_globally_terminal() {
            let subtasks: Vec<String> = job
                .vertices
                .iter()
                .flat_map(|v| {
                    v.subtasks.iter().map(move |s| {
                        format!(
                            "{}[{}]#{} {:?} on {:?}",
                            v.name, s.subtask, s.attempt_number, s.state, s.resource_id
                        )
                    })
                })
                .collect();
            return Err(format!(
                "job {} is still {status:?}: {}",
                job.summary.job_id,
                subtasks.join(", ")
            ));
        }
        if status == JobStatus::Failed && job.failure.is_none() {
            return Err(format!(
                "job {} FAILED without a reason",
                job.summary.job_id
            ));
        }
    }
    Ok(())
}

/// How long a TaskManager may keep running tasks after the JobManager dropped it: it notices by
/// its own heartbeat timeout, and one more interval covers the heartbeat in flight.
pub fn orphan_grace(interval: Duration, timeout: Duration) -> Duration {
    timeout + interval * 2
}
