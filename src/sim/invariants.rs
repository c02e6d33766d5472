//! What must hold in every simulated run: safety after every event, liveness once the quiet
//! phase has had its time. Each check reads snapshots the actors answered (asked back to back,
//! so one actor's answers describe one moment) and returns what is wrong, in words.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::base::ids::{AllocationId, ExecutionAttemptId, JobId, ResourceId};
use crate::job::graph::{JobGraph, RestartStrategyConfig};
use crate::job::restart::NOT_RESTARTED;
use crate::job::states::{ExecutionState, JobStatus};
use crate::messages::job_manager::{JobDetails, JobManagerStatus};
use crate::messages::resource_manager::ResourceManagerStatus;
use crate::messages::task_manager::{RegistrationPhase, TaskManagerStatus};
use crate::operators::builtin::{FAIL_ONCE, IGNORE_CANCEL};

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

/// What the simulation knows of a submitted job, from its graph: the check's side of the
/// JobManager's bookkeeping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobShape {
    /// Each vertex's slot sharing group, by vertex index.
    pub sharing_groups: Vec<String>,
    /// Failures its restart strategy absorbs before the job fails (`None`: any number).
    pub failures_absorbed: Option<u32>,
    /// Failures the job has by design, whatever the faults (a fail-once vertex's subtasks).
    pub built_in_failures: u32,
    /// A vertex ignores cancel: once any fault makes the JobManager cancel (or give up on) its
    /// task, the slot stays held until the TaskManager's watchdog fails itself (the
    /// cancellation timeout), and every deployment there until then is refused for want of a
    /// free slot. Such refusals are failures the fault caused, one each.
    pub ignores_cancel: bool,
    /// The operator identities its vertices need: a TaskManager that places one of its tasks
    /// must have registered them all (its fingerprint), or have declared none.
    pub operators: BTreeSet<String>,
    /// A vertex's configuration is invalid: the job must fail at that vertex's first attempt,
    /// not restart for it (only the faults may have restarted it), and never finish.
    pub misconfigured: bool,
}

impl JobShape {
    /// The shape of `graph`.
    pub fn of(graph: &JobGraph) -> Self {
        let failures_absorbed = match graph.restart_strategy {
            RestartStrategyConfig::None => Some(0),
            RestartStrategyConfig::FixedDelay { attempts, .. } => Some(attempts),
            RestartStrategyConfig::ExponentialDelay { .. } => None,
        };
        Self {
            sharing_groups: graph
                .vertices
                .iter()
                .map(|v| v.slot_sharing_group.clone())
                .collect(),
            failures_absorbed,
            built_in_failures: graph
                .vertices
                .iter()
                .filter(|v| v.operator == FAIL_ONCE)
                .map(|v| v.parallelism)
                .sum(),
            ignores_cancel: graph.vertices.iter().any(|v| v.operator == IGNORE_CANCEL),
            operators: graph.vertices.iter().map(|v| v.operator.clone()).collect(),
            misconfigured: false,
        }
    }
}

/// Slots, from the JobManager's own assignments (its scheduler's shared slots, as the status
/// lists them): no TaskManager has more slots given out than it has, no allocation is on two
/// TaskManagers, a slot holds the subtasks of one job and one slot sharing group with at most
/// one attempt per vertex, and every task the JobManager places (deploying or running) is on a
/// TaskManager registered right now, in a slot of that TaskManager that lists it, whose
/// fingerprint has every operator of the task's job (TaskManagers of several builds).
pub fn slots_consistent(
    snapshot: &JobManagerSnapshot,
    shapes: &BTreeMap<JobId, JobShape>,
) -> Result<(), String> {
    let registered = snapshot.registered();
    let fingerprints: BTreeMap<&ResourceId, &Vec<String>> = snapshot
        .cluster
        .task_managers
        .iter()
        .map(|tm| (&tm.resource_id, &tm.fingerprint.operators))
        .collect();
    let mut allocations: BTreeMap<AllocationId, &ResourceId> = BTreeMap::new();
    let mut slotted: BTreeSet<(&ResourceId, JobId, u32, u32)> = BTreeSet::new();
    for tm in &snapshot.cluster.task_managers {
        let id = &tm.resource_id;
        if tm.allocated_slots.len() > tm.slots_total as usize {
            return Err(format!(
                "{id} has {} slots given out of {}",
                tm.allocated_slots.len(),
                tm.slots_total
            ));
        }
        for slot in &tm.allocated_slots {
            if let Some(other) = allocations.insert(slot.allocation_id, id) {
                return Err(format!(
                    "allocation {} is on both {other} and {id}",
                    slot.allocation_id
                ));
            }
            let mut vertices = BTreeSet::new();
            for task in &slot.tasks {
                let first = &slot.tasks[0];
                if task.job_id != first.job_id {
                    return Err(format!(
                        "slot {} on {id} holds tasks of jobs {} and {}",
                        slot.allocation_id, first.job_id, task.job_id
                    ));
                }
                if !vertices.insert(task.vertex) {
                    return Err(format!(
                        "slot {} on {id} holds two attempts of vertex {} of job {}",
                        slot.allocation_id, task.vertex, task.job_id
                    ));
                }
                if let Some(shape) = shapes.get(&task.job_id) {
                    let group = |v: u32| shape.sharing_groups.get(v as usize);
                    if group(task.vertex) != group(first.vertex) {
                        return Err(format!(
                            "slot {} on {id} holds sharing groups {:?} and {:?} of job {}",
                            slot.allocation_id,
                            group(first.vertex),
                            group(task.vertex),
                            task.job_id
                        ));
                    }
                }
                slotted.insert((id, task.job_id, task.vertex, task.subtask));
            }
        }
    }
    for job in &snapshot.jobs {
        let job_id = job.summary.job_id;
        for (index, vertex) in job.vertices.iter().enumerate() {
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
                        "job {job_id} {}[{}] is {:?} without a TaskManager",
                        vertex.name, subtask.subtask, subtask.state
                    ));
                };
                if !registered.contains(resource_id) {
                    return Err(format!(
                        "job {job_id} {}[{}] is {:?} on {resource_id}, which is not registered",
                        vertex.name, subtask.subtask, subtask.state
                    ));
                }
                let missing = shapes.get(&job_id).and_then(|shape| {
                    let has = fingerprints.get(resource_id)?;
                    if has.is_empty() {
                        return None;
                    }
                    shape
                        .operators
                        .iter()
                        .find(|op| has.binary_search(op).is_err())
                });
                if let Some(operator) = missing {
                    return Err(format!(
                        "job {job_id} {}[{}] is {:?} on {resource_id}, which cannot run its \
                         operator {operator}",
                        vertex.name, subtask.subtask, subtask.state
                    ));
                }
                if !slotted.contains(&(resource_id, job_id, index as u32, subtask.subtask)) {
                    return Err(format!(
                        "job {job_id} {}[{}] is {:?} on {resource_id}, but no slot there holds it",
                        vertex.name, subtask.subtask, subtask.state
                    ));
                }
            }
        }
    }
    Ok(())
}

/// A registered TaskManager's slot table agrees with the JobManager's: every attempt it runs
/// that the JobManager counts as deploying or running is in the slot (allocation) the
/// JobManager gave it, on this TaskManager, and that allocation holds a slot in its table;
/// no allocation holds two slots. (Attempts the JobManager has given up on may still run for a
/// while: the orphan check bounds that.)
pub fn slot_tables_agree(cluster: &JobManagerStatus, tm: &TaskManagerStatus) -> Result<(), String> {
    let id = &tm.resource_id;
    let mut live: BTreeMap<ExecutionAttemptId, (&ResourceId, AllocationId)> = BTreeMap::new();
    for info in &cluster.task_managers {
        for slot in &info.allocated_slots {
            for task in &slot.tasks {
                if let Some(attempt) = &task.attempt
                    && matches!(
                        attempt.state,
                        ExecutionState::Deploying | ExecutionState::Running
                    )
                {
                    live.insert(attempt.attempt, (&info.resource_id, slot.allocation_id));
                }
            }
        }
    }
    let mut held = BTreeSet::new();
    for allocation in tm.slots.iter().flatten() {
        if !held.insert(*allocation) {
            return Err(format!("{id} holds allocation {allocation} in two slots"));
        }
    }
    for task in &tm.running {
        if !held.contains(&task.allocation_id) {
            return Err(format!(
                "{id} runs {} in allocation {}, which holds no slot there",
                task.attempt, task.allocation_id
            ));
        }
        let Some((placed_on, allocation)) = live.get(&task.attempt) else {
            continue;
        };
        if *placed_on != id || *allocation != task.allocation_id {
            return Err(format!(
                "{id} runs {} in allocation {}, but the JobManager placed it in {allocation} on {placed_on}",
                task.attempt, task.allocation_id
            ));
        }
    }
    Ok(())
}

/// Drain, then free: a TaskManager registered at a JobManager runs no task of an earlier
/// connection (those hold their slots until they ended, and it registers only then, so the
/// JobManager never places work beside them).
pub fn drained_before_registering(tm: &TaskManagerStatus) -> Result<(), String> {
    if !matches!(tm.registration, RegistrationPhase::Registered { .. }) {
        return Ok(());
    }
    match tm.running.iter().find(|t| t.orphaned) {
        Some(task) => Err(format!(
            "{} is registered while {} of its earlier JobManager connection still runs",
            tm.resource_id, task.attempt
        )),
        None => Ok(()),
    }
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

/// When something happened that may fail a task (a fault, or a TaskManager the JobManager
/// lost), in the simulation's wall-clock milliseconds, and until when its effects may last.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Disturbance {
    /// When it began.
    pub from_ms: u64,
    /// Until when it may still fail a task (its end plus the timeouts that notice it).
    pub until_ms: u64,
}

/// Liveness of jobs: every job ended, and a FAILED one was allowed to fail: its reason is a
/// slot request that could not be served, or its restart strategy had to absorb more failures
/// than it allows. The failures are counted from the run, not from the JobManager: each
/// disturbance overlapping the job's run (from submission until it began failing) counts as
/// one, plus the failures the job has by design. A job FAILED with fewer is a bug (a
/// failover that cascades, or a failure nobody caused).
pub fn jobs_ended(
    jobs: &[JobDetails],
    shapes: &BTreeMap<JobId, JobShape>,
    disturbances: &[Disturbance],
) -> Result<(), String> {
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
        let misconfigured = shapes
            .get(&job.summary.job_id)
            .is_some_and(|shape| shape.misconfigured);
        if misconfigured && status == JobStatus::Finished {
            return Err(format!(
                "job {} FINISHED although a vertex's configuration is invalid",
                job.summary.job_id
            ));
        }
        if status != JobStatus::Failed {
            continue;
        }
        let Some(failure) = &job.failure else {
            return Err(format!(
                "job {} FAILED without a reason",
                job.summary.job_id
            ));
        };
        if failure.contains("NoResourceAvailable") {
            continue;
        }
        let Some(shape) = shapes.get(&job.summary.job_id) else {
            continue;
        };
        let Some(absorbed) = shape.failures_absorbed else {
            return Err(format!(
                "job {} FAILED although its restart strategy never gives up: {failure}",
                job.summary.job_id
            ));
        };
        let failing_at = job
            .status_timestamps
            .iter()
            .find(|(s, _)| matches!(s, JobStatus::Failing | JobStatus::Failed))
            .map_or(u64::MAX, |(_, at)| *at);
        let submitted = job.summary.submitted_at_ms;
        let caused = disturbances
            .iter()
            .filter(|d| d.from_ms <= failing_at && d.until_ms >= submitted)
            .count() as u32
            + shape.built_in_failures
            + if shape.ignores_cancel {
                job.exceptions
                    .iter()
                    .filter(|e| e.reason.contains("no free slot"))
                    .count() as u32
            } else {
                0
            };
        if misconfigured && failure.contains(NOT_RESTARTED) {
            // The invalid configuration failed the job; only the faults may have restarted it.
            if job.restarts > caused {
                return Err(format!(
                    "job {} with an invalid configuration restarted {} times, but only {caused} \
                     failures were caused: {failure}",
                    job.summary.job_id, job.restarts
                ));
            }
            continue;
        }
        if caused <= absorbed {
            return Err(format!(
                "job {} FAILED ({failure}) after at most {caused} failures, but its restart strategy absorbs {absorbed}",
                job.summary.job_id
            ));
        }
    }
    Ok(())
}

/// Liveness of result partitions: a TaskManager registered at the JobManager holds partitions
/// only of jobs still running there. An ended job's (or one the JobManager no longer lists)
/// must have been released, even if the release was lost on the way.
pub fn partitions_released(jobs: &[JobDetails], tm: &TaskManagerStatus) -> Result<(), String> {
    let running: BTreeSet<JobId> = jobs
        .iter()
        .filter(|j| !j.summary.status.is_globally_terminal())
        .map(|j| j.summary.job_id)
        .collect();
    match tm
        .job_partitions
        .iter()
        .find(|(job, count)| *count > 0 && !running.contains(job))
    {
        Some((job, count)) => Err(format!(
            "{} still holds {count} result partitions of job {job}, which is no longer running",
            tm.resource_id
        )),
        None => Ok(()),
    }
}

/// The network buffer pool leaks nothing: a TaskManager with no task running and no result
/// partition held has no floor reserved and no buffer lent (every gate and partition gave its
/// floor and borrowed buffers back), and never more than its cap.
pub fn network_buffers_returned(tm: &TaskManagerStatus) -> Result<(), String> {
    let pool = tm.network;
    if pool.reserved > pool.floor_limit || pool.lent > pool.total - pool.floor_limit {
        return Err(format!(
            "{} holds network buffers past its cap: {pool:?}",
            tm.resource_id
        ));
    }
    let idle = tm.running.is_empty() && tm.job_partitions.iter().all(|(_, n)| *n == 0);
    if idle && (pool.reserved > 0 || pool.lent > 0) {
        return Err(format!(
            "{} runs nothing and holds no partition, yet {} network buffers are reserved and \
             {} lent",
            tm.resource_id, pool.reserved, pool.lent
        ));
    }
    Ok(())
}

/// How long a TaskManager may keep running tasks after the JobManager dropped it: it notices by
/// its own heartbeat timeout, and one more interval covers the heartbeat in flight.
pub fn orphan_grace(interval: Duration, timeout: Duration) -> Duration {
    timeout + interval * 2
}

#[cfg(test)]
mod tests;
