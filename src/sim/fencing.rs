//! The stale-leader invariant: a message fenced with a leader session that is not the current
//! one changes nothing. Each probe sends the leader-only messages of one actor with a session
//! drawn at random (a stale leader's), between two status asks, all in one burst: the actor's
//! mailbox handles them back to back, so any difference between the two answers is the stale
//! messages' doing.

use actix::Addr;

use crate::actors::job_manager::JobManager;
use crate::actors::resource_manager::FlinkResourceManager;
use crate::actors::task_manager::TaskManager;
use crate::base::ids::{AllocationId, ExecutionAttemptId, JobId, LeaderSessionId, ResourceId};
use crate::base::rng::NodeRng;
use crate::messages::RemovalReason;
use crate::messages::ResultPartitionId;
use crate::messages::deployment::TaskDeploymentDescriptor;
use crate::messages::job_manager::{GetJobManagerStatus, ResourceRemoved};
use crate::messages::resource_manager::{
    DeclareResourceRequirements, GetResourceManagerStatus, ReleaseResource,
};
use crate::messages::task_manager::{
    CancelTasks, GetTaskManagerStatus, ReleaseJobPartitions, ReleasePartitions, SubmitTasks,
    TaskSubmissionError,
};

/// A stale `ReleaseResource` of the started worker picked by `index`, and a stale
/// `DeclareResourceRequirements`: the resource manager must still count the worker as started
/// and keep the demand it had. `None` if there was nothing to probe; the victim if nothing
/// changed; what changed otherwise.
pub async fn probe_resource_manager(
    rm: &Addr<FlinkResourceManager>,
    stale: LeaderSessionId,
    index: u64,
) -> Option<Result<ResourceId, String>> {
    let before = rm.send(GetResourceManagerStatus).await.ok()?;
    if before.started.is_empty() {
        return None;
    }
    let victim = before.started[(index % before.started.len() as u64) as usize].clone();
    let first = rm.send(GetResourceManagerStatus);
    let removal = rm.send(ReleaseResource {
        leader_session_id: stale,
        resource_id: victim.clone(),
        reason: RemovalReason::HeartbeatTimeout,
    });
    let declaration = rm.send(DeclareResourceRequirements {
        leader_session_id: stale,
        workers: before.demand + 7,
    });
    let after = rm.send(GetResourceManagerStatus);
    let (first, _, _, after) = tokio::join!(first, removal, declaration, after);
    match (first, after) {
        (Ok(first), Ok(after))
            if first.started.contains(&victim) && !after.started.contains(&victim) =>
        {
            Some(Err(format!(
                "a stale leader's ReleaseResource released {victim} at the resource manager"
            )))
        }
        (Ok(first), Ok(after)) if first.demand != after.demand => Some(Err(format!(
            "a stale leader's DeclareResourceRequirements changed the demand {} -> {}",
            first.demand, after.demand
        ))),
        _ => Some(Ok(victim)),
    }
}

/// A `ResourceRemoved` meant for another leader session, of the TaskManager picked by `index`:
/// the JobManager must keep it registered. `Err` says what changed.
pub async fn probe_job_manager(
    jm: &Addr<JobManager>,
    stale: LeaderSessionId,
    index: u64,
) -> Result<(), String> {
    let Ok(before) = jm.send(GetJobManagerStatus).await else {
        return Ok(());
    };
    if before.task_managers.is_empty() {
        return Ok(());
    }
    let pick = (index % before.task_managers.len() as u64) as usize;
    let victim = before.task_managers[pick].resource_id.clone();
    let listed = |status: &crate::messages::job_manager::JobManagerStatus| {
        status
            .task_managers
            .iter()
            .any(|tm| tm.resource_id == victim)
    };
    let first = jm.send(GetJobManagerStatus);
    let removal = jm.send(ResourceRemoved {
        leader_session_id: stale,
        resource_id: victim.clone(),
        reason: RemovalReason::Terminated,
    });
    let after = jm.send(GetJobManagerStatus);
    match tokio::join!(first, removal, after) {
        (Ok(first), _, Ok(after)) if listed(&first) && !listed(&after) => Err(format!(
            "a ResourceRemoved for another leader session unregistered {victim} at the JobManager"
        )),
        _ => Ok(()),
    }
}

/// A stale `SubmitTasks` (of a new attempt in a new allocation), `CancelTasks` (of a running
/// attempt), `ReleaseJobPartitions` (of a job with partitions) and `ReleasePartitions` (of the
/// running attempts' results) to one TaskManager: the
/// submission must be refused as stale, and its slots, running attempts, cancel flags and held
/// partitions must stay as they were. `Err` describes what changed.
pub async fn probe_task_manager(
    tm: &Addr<TaskManager>,
    resource_id: &ResourceId,
    rng: &mut NodeRng,
) -> Result<(), String> {
    let stale = LeaderSessionId::generate(rng);
    let Ok(before) = tm.send(GetTaskManagerStatus).await else {
        return Ok(());
    };
    let first = tm.send(GetTaskManagerStatus);
    let submit = tm.send(SubmitTasks::one(
        stale,
        stray_task(
            ExecutionAttemptId::generate(rng),
            AllocationId::generate(rng),
        ),
    ));
    if let Some(task) = before.running.first() {
        tm.do_send(CancelTasks {
            leader_session_id: stale,
            attempts: vec![task.attempt],
        });
    }
    if let Some((job_id, _)) = before.job_partitions.first() {
        tm.do_send(ReleaseJobPartitions {
            leader_session_id: stale,
            job_id: *job_id,
        });
    }
    // The running tasks' results (a job's edges are few: the first 8 cover every job of the
    // run), as a deposed leader whose consumer regions finished would release them.
    for task in &before.running {
        tm.do_send(ReleasePartitions {
            subpartitions: Vec::new(),
            leader_session_id: stale,
            job_id: task.job_id,
            partitions: (0..8)
                .map(|edge| ResultPartitionId {
                    producer: task.attempt,
                    edge,
                })
                .collect(),
        });
    }
    let after = tm.send(GetTaskManagerStatus);
    let (first, submit, after) = tokio::join!(first, submit, after);
    let (Ok(first), Ok(after)) = (first, after) else {
        return Ok(());
    };
    if let Ok(answer) = submit
        && answer != [Err(TaskSubmissionError::StaleLeader)]
    {
        return Err(format!(
            "{resource_id} answered a stale leader's SubmitTasks with {answer:?}"
        ));
    }
    if first.slots != after.slots {
        return Err(format!(
            "a stale leader's messages changed {resource_id}'s slots: {:?} -> {:?}",
            first.slots, after.slots
        ));
    }
    if first.running != after.running {
        return Err(format!(
            "a stale leader's messages changed {resource_id}'s running tasks: {:?} -> {:?}",
            first.running, after.running
        ));
    }
    if first.job_partitions != after.job_partitions {
        return Err(format!(
            "a stale leader's release changed {resource_id}'s partitions: {:?} -> {:?}",
            first.job_partitions, after.job_partitions
        ));
    }
    Ok(())
}

/// A task no job of the run has: if a TaskManager took it, it would hold a slot for it.
fn stray_task(
    attempt: ExecutionAttemptId,
    allocation_id: AllocationId,
) -> TaskDeploymentDescriptor {
    TaskDeploymentDescriptor {
        job_id: JobId::from_u128(u128::MAX),
        attempt,
        attempt_number: 0,
        vertex_name: "stale".into(),
        subtask: 0,
        parallelism: 1,
        operator: "sleep".into(),
        config: std::sync::Arc::new([("ms".to_owned(), "1000".to_owned())].into()),
        allocation_id,
        inputs: Vec::new(),
        outputs: Vec::new(),
        artifacts: std::sync::Arc::from([]),
    }
}
