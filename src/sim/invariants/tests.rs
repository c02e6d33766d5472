//! Each invariant fails when its rule is broken on purpose (an invariant that cannot fail checks
//! nothing): hand-made snapshots, one rule broken each.

use super::*;
use crate::base::ids::InstanceId;
use crate::messages::job_manager::{
    AllocatedSlotInfo, JobSummary, MailboxFigures, SlotTaskAttempt, SlotTaskInfo, SubtaskDetails,
    TaskManagerInfo, VertexDetails,
};
use crate::messages::task_manager::{RegistrationPhase, RunningTaskInfo};
use crate::messages::{ActorAddress, HardwareDescription, TaskManagerLocation};

const JOB: JobId = JobId::from_u128(1);
const EPOCH: u64 = 1_000_000;

fn tm(n: u32) -> ResourceId {
    ResourceId::new(format!("tm-{n}"))
}

fn allocation(n: u128) -> AllocationId {
    AllocationId::from_u128(n)
}

fn attempt(n: u128) -> ExecutionAttemptId {
    ExecutionAttemptId::from_u128(n)
}

/// Subtask 0 of `vertex` of [`JOB`], attempt `n`, in `state`.
fn task(vertex: u32, n: u128, state: ExecutionState) -> SlotTaskInfo {
    SlotTaskInfo {
        job_id: JOB,
        vertex,
        subtask: 0,
        attempt: Some(SlotTaskAttempt {
            vertex_name: format!("v{vertex}"),
            attempt_number: 0,
            attempt: attempt(n),
            state,
        }),
    }
}

fn task_manager(n: u32, slots: u32, allocated: Vec<AllocatedSlotInfo>) -> TaskManagerInfo {
    TaskManagerInfo {
        resource_id: tm(n),
        instance_id: InstanceId::from_u128(u128::from(n)),
        location: TaskManagerLocation {
            resource_id: tm(n),
            address: ActorAddress::new(format!("tm-{n}:1"), format!("taskmanager/tm-{n}")),
            hostname: format!("host-{n}"),
        },
        hardware: HardwareDescription {
            cpu_cores: 1,
            physical_memory_bytes: 0,
        },
        slots_total: slots,
        slots_free: slots.saturating_sub(allocated.len() as u32),
        fingerprint: Default::default(),
        registered_at_ms: EPOCH,
        last_heartbeat_ms: EPOCH,
        allocated_slots: allocated,
        spill: Default::default(),
    }
}

fn slot(n: u128, tasks: Vec<SlotTaskInfo>) -> AllocatedSlotInfo {
    AllocatedSlotInfo {
        allocation_id: allocation(n),
        tasks,
    }
}

fn cluster(task_managers: Vec<TaskManagerInfo>) -> JobManagerStatus {
    JobManagerStatus {
        leader_session_id: crate::base::ids::LeaderSessionId::from_u128(1),
        resource_manager_connected: true,
        task_managers,
        heartbeat_timeouts: 0,
        task_restarts: 0,
        blob_bytes_served: 0,
        mailbox: MailboxFigures::default(),
        slot_requests_queued: 0,
        slot_request_bulks_queued: 0,
    }
}

/// A job of vertices `v0`, `v1`, ... with one subtask each, in these states and places.
fn job(
    status: JobStatus,
    subtasks: &[(ExecutionState, Option<ResourceId>)],
    failure: Option<&str>,
    timestamps: Vec<(JobStatus, u64)>,
) -> JobDetails {
    JobDetails {
        summary: JobSummary {
            job_id: JOB,
            name: "job".into(),
            status,
            tasks_finished: 0,
            tasks_total: subtasks.len() as u32,
            submitted_at_ms: EPOCH,
        },
        exceptions: Vec::new(),
        status_timestamps: timestamps,
        failure: failure.map(str::to_owned),
        restarts: 0,
        recovered_at_ms: None,
        from_job_result_store: false,
        artifacts: Vec::new(),
        vertices: subtasks
            .iter()
            .enumerate()
            .map(|(v, (state, resource_id))| VertexDetails {
                name: format!("v{v}"),
                chain: Vec::new(),
                operator: "noop".into(),
                io: Default::default(),
                summary: None,
                subtasks: vec![SubtaskDetails {
                    subtask: 0,
                    attempt_number: 0,
                    state: *state,
                    resource_id: resource_id.clone(),
                    locality: None,
                    timestamps: Vec::new(),
                    error: None,
                    io: None,
                    restored: false,
                }],
            })
            .collect(),
    }
}

fn snapshot(cluster: JobManagerStatus, jobs: Vec<JobDetails>) -> JobManagerSnapshot {
    JobManagerSnapshot {
        pool: ResourceManagerStatus {
            designated_pool_size: cluster.task_managers.len() as u32,
            demand: 0,
            target_pool_size: cluster.task_managers.len() as u32,
            releasing: 0,
            started: cluster
                .task_managers
                .iter()
                .map(|t| t.resource_id.clone())
                .collect(),
            pending_requests: 0,
            pending_registration: 0,
            start_failures: 0,
            consecutive_start_failures: 0,
            connected_to_job_manager: true,
            driver: "sim".into(),
            driver_workers: Default::default(),
        },
        cluster,
        jobs,
    }
}

/// Two vertices: `v0` in group `a`, `v1` in group `a` (or `b`), fixed delay of 4 attempts.
fn shapes(second_group: &str, built_in_failures: u32) -> BTreeMap<JobId, JobShape> {
    [(
        JOB,
        JobShape {
            sharing_groups: vec!["a".into(), second_group.into()],
            failures_absorbed: Some(4),
            built_in_failures,
            ignores_cancel: false,
            operators: ["program:sim-join@b1".to_owned()].into(),
            misconfigured: false,
        },
    )]
    .into()
}

const RUNNING: ExecutionState = ExecutionState::Running;

/// A consistent picture: `v0` and `v1` share allocation 1 on tm-0.
fn consistent() -> JobManagerSnapshot {
    snapshot(
        cluster(vec![task_manager(
            0,
            2,
            vec![slot(1, vec![task(0, 10, RUNNING), task(1, 11, RUNNING)])],
        )]),
        vec![job(
            JobStatus::Running,
            &[(RUNNING, Some(tm(0))), (RUNNING, Some(tm(0)))],
            None,
            Vec::new(),
        )],
    )
}

#[test]
fn slots_consistent_accepts_a_consistent_picture() {
    assert_eq!(slots_consistent(&consistent(), &shapes("a", 0)), Ok(()));
}

#[test]
fn slots_consistent_fails_for_a_task_on_a_task_manager_without_its_operator() {
    // A fingerprint with the job's operator, or none declared: placed correctly.
    let mut s = consistent();
    s.cluster.task_managers[0].fingerprint.operators =
        vec!["noop".to_owned(), "program:sim-join@b1".to_owned()];
    assert_eq!(slots_consistent(&s, &shapes("a", 0)), Ok(()));
    // Another build's TaskManager: it cannot run the job's program.
    s.cluster.task_managers[0].fingerprint.operators = vec!["noop".to_owned()];
    let error = slots_consistent(&s, &shapes("a", 0)).unwrap_err();
    assert!(
        error.contains("cannot run its operator program:sim-join@b1"),
        "{error}"
    );
}

#[test]
fn slots_consistent_fails_for_more_slots_given_out_than_a_task_manager_has() {
    let mut s = consistent();
    s.cluster.task_managers[0].slots_total = 0;
    let error = slots_consistent(&s, &shapes("a", 0)).unwrap_err();
    assert!(error.contains("1 slots given out of 0"), "{error}");
}

#[test]
fn slots_consistent_fails_for_two_attempts_of_one_vertex_in_a_slot() {
    let mut s = consistent();
    s.cluster.task_managers[0].allocated_slots[0].tasks[1] = task(0, 12, RUNNING);
    let error = slots_consistent(&s, &shapes("a", 0)).unwrap_err();
    assert!(error.contains("two attempts of vertex 0"), "{error}");
}

#[test]
fn slots_consistent_fails_for_two_sharing_groups_in_a_slot() {
    let error = slots_consistent(&consistent(), &shapes("b", 0)).unwrap_err();
    assert!(error.contains("sharing groups"), "{error}");
}

#[test]
fn slots_consistent_fails_for_an_allocation_on_two_task_managers() {
    let mut s = consistent();
    let again = slot(1, vec![task(1, 11, RUNNING)]);
    s.cluster.task_managers[0].allocated_slots[0].tasks.pop();
    s.cluster
        .task_managers
        .push(task_manager(1, 1, vec![again]));
    let error = slots_consistent(&s, &shapes("a", 0)).unwrap_err();
    assert!(error.contains("is on both"), "{error}");
}

#[test]
fn slots_consistent_fails_for_a_running_task_no_slot_holds() {
    let mut s = consistent();
    s.cluster.task_managers[0].allocated_slots[0].tasks.pop();
    let error = slots_consistent(&s, &shapes("a", 0)).unwrap_err();
    assert!(error.contains("no slot there holds it"), "{error}");
}

fn tm_status(running: Vec<(u128, u128)>, slots: Vec<Option<AllocationId>>) -> TaskManagerStatus {
    TaskManagerStatus {
        resource_id: tm(0),
        registration: RegistrationPhase::Registered {
            instance_id: InstanceId::from_u128(0),
        },
        registration_attempts: 1,
        slots_total: slots.len() as u32,
        slots_free: slots.iter().filter(|s| s.is_none()).count() as u32,
        leader_session_id: None,
        slots,
        running: running
            .into_iter()
            .map(|(a, alloc)| RunningTaskInfo {
                attempt: attempt(a),
                job_id: JOB,
                allocation_id: allocation(alloc),
                cancel_requested: false,
                orphaned: false,
                io: Default::default(),
            })
            .collect(),
        job_partitions: Vec::new(),
        spill: Default::default(),
        network: Default::default(),
    }
}

#[test]
fn slot_tables_agree_accepts_the_same_placement() {
    let s = consistent();
    let status = tm_status(vec![(10, 1), (11, 1)], vec![Some(allocation(1)), None]);
    assert_eq!(slot_tables_agree(&s.cluster, &status), Ok(()));
    // An attempt the JobManager no longer counts (being cancelled elsewhere) is left alone.
    let status = tm_status(vec![(99, 7)], vec![Some(allocation(7)), None]);
    assert_eq!(slot_tables_agree(&s.cluster, &status), Ok(()));
}

#[test]
fn slot_tables_agree_fails_for_a_task_in_another_allocation_than_the_job_managers() {
    let s = consistent();
    let status = tm_status(
        vec![(10, 1), (11, 2)],
        vec![Some(allocation(1)), Some(allocation(2))],
    );
    let error = slot_tables_agree(&s.cluster, &status).unwrap_err();
    assert!(error.contains("but the JobManager placed it in"), "{error}");
}

#[test]
fn slot_tables_agree_fails_for_a_task_whose_allocation_holds_no_slot() {
    let s = consistent();
    let status = tm_status(vec![(10, 1)], vec![None, None]);
    let error = slot_tables_agree(&s.cluster, &status).unwrap_err();
    assert!(error.contains("holds no slot"), "{error}");
}

fn failed_job(failure: &str) -> JobDetails {
    job(
        JobStatus::Failed,
        &[(ExecutionState::Failed, Some(tm(0)))],
        Some(failure),
        vec![
            (JobStatus::Running, EPOCH),
            (JobStatus::Failing, EPOCH + 10_000),
            (JobStatus::Failed, EPOCH + 10_001),
        ],
    )
}

fn disturbances(at: &[u64]) -> Vec<Disturbance> {
    at.iter()
        .map(|&from_ms| Disturbance {
            from_ms,
            until_ms: from_ms + 1_000,
        })
        .collect()
}

#[test]
fn jobs_ended_counts_refusals_for_a_slot_held_by_a_task_that_ignores_cancel() {
    let refused = "sink (1/1): TaskManager tm-2 refused the task: no free slot for allocation x";
    let mut failed = failed_job(refused);
    failed.exceptions = (0..4)
        .map(|n| crate::messages::job_manager::JobException {
            timestamp_ms: EPOCH + n,
            vertex: "sink".into(),
            subtask: 0,
            attempt_number: n as u32,
            resource_id: Some(tm(1)),
            reason: refused.into(),
            root_cause: true,
        })
        .collect();
    let jobs = [failed];
    // One fault: the four refusals that followed are failures of a job that ignores cancel
    // only (its slot stayed held until the TaskManager's watchdog).
    let seen = disturbances(&[EPOCH + 1]);
    let error = jobs_ended(&jobs, &shapes("a", 0), &seen).unwrap_err();
    assert!(error.contains("after at most 1 failures"), "{error}");
    let mut ignoring = shapes("a", 0);
    ignoring.values_mut().for_each(|s| s.ignores_cancel = true);
    assert_eq!(jobs_ended(&jobs, &ignoring, &seen), Ok(()));
}

#[test]
fn jobs_ended_fails_for_a_job_failed_with_fewer_failures_than_its_strategy_absorbs() {
    let jobs = [failed_job("v0 (1/1): boom (restarts exhausted)")];
    // Four disturbances during its run, none before or after it: fewer than 5 failures.
    let during = [EPOCH + 1, EPOCH + 2, EPOCH + 3, EPOCH + 4];
    let outside = [EPOCH - 5_000, EPOCH + 20_000];
    let mut seen = disturbances(&during);
    seen.extend(disturbances(&outside));
    let error = jobs_ended(&jobs, &shapes("a", 0), &seen).unwrap_err();
    assert!(error.contains("after at most 4 failures"), "{error}");
    // A fifth one (or a failure by design) exhausts the strategy: allowed.
    seen.extend(disturbances(&[EPOCH + 5]));
    assert_eq!(jobs_ended(&jobs, &shapes("a", 0), &seen), Ok(()));
    assert_eq!(
        jobs_ended(&jobs, &shapes("a", 1), &disturbances(&during)),
        Ok(())
    );
}

/// A job with an invalid configuration fails at its first attempt, restarted by the faults
/// only; restarting it for the configuration (the strategy's attempts spent, or more restarts
/// than faults) or finishing it breaks the rule.
#[test]
fn jobs_ended_fails_for_a_misconfigured_job_restarted_for_its_configuration_or_finished() {
    let mut misconfigured = shapes("a", 0);
    misconfigured
        .values_mut()
        .for_each(|s| s.misconfigured = true);
    let bad = "v1 (1/1): invalid configuration for operator `noop`: key `count` is not a number";
    let at_once = [failed_job(&format!("{bad} ({NOT_RESTARTED})"))];
    assert_eq!(jobs_ended(&at_once, &misconfigured, &[]), Ok(()));
    // Restarted once with no fault to cause it: the configuration was retried.
    let mut retried = at_once.clone();
    retried[0].restarts = 1;
    let error = jobs_ended(&retried, &misconfigured, &[]).unwrap_err();
    assert!(error.contains("restarted 1 times"), "{error}");
    // A fault during its run accounts for one restart.
    assert_eq!(
        jobs_ended(&retried, &misconfigured, &disturbances(&[EPOCH + 1])),
        Ok(())
    );
    // A strategy that gave up after its attempts: each was spent on the configuration.
    let exhausted = [failed_job(&format!(
        "{bad} (fixed-delay restart strategy exhausted its 4 restart attempts)"
    ))];
    let error = jobs_ended(&exhausted, &misconfigured, &[]).unwrap_err();
    assert!(error.contains("after at most 0 failures"), "{error}");
    let mut finished = consistent().jobs;
    finished[0].summary.status = JobStatus::Finished;
    let error = jobs_ended(&finished, &misconfigured, &[]).unwrap_err();
    assert!(error.contains("FINISHED although"), "{error}");
    assert_eq!(jobs_ended(&finished, &shapes("a", 0), &[]), Ok(()));
}

#[test]
fn jobs_ended_allows_a_job_failed_for_want_of_slots_and_fails_an_unfinished_one() {
    let jobs = [failed_job("v0 (1/1): NoResourceAvailable: ...")];
    assert_eq!(jobs_ended(&jobs, &shapes("a", 0), &[]), Ok(()));
    let running = consistent().jobs;
    let error = jobs_ended(&running, &shapes("a", 0), &[]).unwrap_err();
    assert!(error.contains("is still Running"), "{error}");
}

#[test]
fn drained_before_registering_fails_for_a_registered_task_manager_still_running_an_orphan() {
    let mut status = tm_status(vec![(10, 1)], vec![Some(allocation(1)), None]);
    assert_eq!(drained_before_registering(&status), Ok(()));
    status.running[0].orphaned = true;
    status.running[0].cancel_requested = true;
    let err = drained_before_registering(&status).unwrap_err();
    assert!(err.contains("earlier JobManager connection"), "{err}");
    // Not registered (waiting for it to end): fine.
    status.registration = RegistrationPhase::Registering { attempt: 2 };
    assert_eq!(drained_before_registering(&status), Ok(()));
}

#[test]
fn network_buffers_returned_fails_for_a_leak_or_a_pool_past_its_cap() {
    let pool = crate::messages::NetworkBufferUsage {
        total: 160,
        floor_limit: 120,
        ..Default::default()
    };
    let mut idle = tm_status(vec![], vec![None]);
    idle.network = pool;
    assert_eq!(network_buffers_returned(&idle), Ok(()));
    // A floor kept after every task ended and every partition was released: a leak.
    idle.network.reserved = 2;
    let error = network_buffers_returned(&idle).unwrap_err();
    assert!(error.contains("2 network buffers are reserved"), "{error}");
    // Lent and not given back.
    idle.network.reserved = 0;
    idle.network.lent = 1;
    assert!(network_buffers_returned(&idle).is_err());
    // While a task runs, floors and lent buffers are in use, within the cap.
    let mut busy = tm_status(vec![(10, 1)], vec![Some(allocation(1))]);
    busy.network = crate::messages::NetworkBufferUsage {
        reserved: 120,
        lent: 40,
        ..pool
    };
    assert_eq!(network_buffers_returned(&busy), Ok(()));
    busy.network.lent = 41;
    let error = network_buffers_returned(&busy).unwrap_err();
    assert!(error.contains("past its cap"), "{error}");
}
