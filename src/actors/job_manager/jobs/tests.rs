//! The JobManager's jobs on the same probes and paused clock as its other tests: deployment,
//! slots and statuses, job-store expiry, leadership, producer lists, cancellation.

use std::time::Duration;

use actix::prelude::*;

use super::super::tests::*;
use super::super::*;
use super::UNREAD_RELEASE_REPEAT;
use crate::base::ids::{ExecutionAttemptId, TaskManagerSessionId};
use crate::messages::HardwareDescription;
use crate::messages::task_manager::TaskManagerMessage;
use crate::testing::*;

/// `source` → `sink`, forward and pipelined, in one slot sharing group: each of the
/// `parallelism` shared slots holds one source and one sink subtask. Both sleep (cancellably)
/// for `ms`, so on real TaskManagers they hold their slots until cancelled.
fn pipelined_job(parallelism: u32, ms: u64) -> crate::job::graph::JobGraph {
    use crate::job::graph::{DistributionPattern, ExchangeMode, JobGraph};
    let mut builder = JobGraph::builder("slots");
    let source = builder
        .vertex("source", "sleep", parallelism)
        .config("ms", ms.to_string())
        .index();
    let sink = builder
        .vertex("sink", "sleep", parallelism)
        .config("ms", ms.to_string())
        .index();
    builder.edge(
        source,
        sink,
        DistributionPattern::Forward,
        ExchangeMode::Pipelined,
    );
    builder.build(|_| true).expect("a valid graph")
}

/// Per allocation: (vertex name, subtask, attempt), as a TaskManager was sent them or as the
/// JobManager lists them, to compare the two.
type SlotContents = BTreeMap<AllocationId, Vec<(String, u32, ExecutionAttemptId)>>;

fn deployed_to(tm: &TaskManagerProbeHandle) -> SlotContents {
    let mut slots = SlotContents::new();
    for submit in tm.submitted() {
        slots.entry(submit.allocation_id).or_default().push((
            submit.vertex_name.to_string(),
            submit.subtask,
            submit.attempt,
        ));
    }
    slots.values_mut().for_each(|tasks| tasks.sort());
    slots
}

fn listed_on(info: &TaskManagerInfo) -> SlotContents {
    info.allocated_slots
        .iter()
        .map(|slot| {
            let mut tasks: Vec<_> = slot
                .tasks
                .iter()
                .map(|t| {
                    let attempt = t.attempt.as_ref().expect("the job is known");
                    (attempt.vertex_name.clone(), t.subtask, attempt.attempt)
                })
                .collect();
            tasks.sort();
            (slot.allocation_id, tasks)
        })
        .collect()
}

/// The invariant the status promises: the free count and the allocation list agree.
fn assert_slot_counts_agree(status: &JobManagerStatus) {
    for info in &status.task_managers {
        assert_eq!(
            info.slots_free as usize + info.allocated_slots.len(),
            info.slots_total as usize,
            "{info:#?}"
        );
    }
}

#[actix::test]
async fn status_lists_each_task_managers_allocations_with_their_tasks_until_released() {
    let f = start().await;
    let mut probes = Vec::new();
    for name in ["tm-1", "tm-2"] {
        let (probe, registration) = f.task_manager(name);
        f.register(&registration).await;
        probes.push(probe);
    }
    let job_id = ask(&f.jm, SubmitJob::new(pipelined_job(2, 60_000)))
        .await
        .expect("accepted");
    settle().await;
    // The tasks placed in one turn reach each TaskManager in one message.
    for probe in &probes {
        let batches: Vec<usize> = probe.received.filter(|m| match m {
            TaskManagerMessage::SubmitTasks(s) => Some(s.descriptors.len()),
            _ => None,
        });
        assert_eq!(batches, [2], "source i and sink i in one SubmitTasks");
    }
    let status = f.status().await;
    assert_slot_counts_agree(&status);
    // New slots spread over the TaskManagers: one shared slot each, with source i and sink i.
    for (info, probe) in status.task_managers.iter().zip(&probes) {
        assert_eq!(info.location.address, probe.address);
        let sent = deployed_to(probe);
        assert_eq!(sent.len(), 1, "{sent:?}");
        assert_eq!(
            listed_on(info),
            sent,
            "the JobManager lists what it sent there"
        );
        let tasks = &info.allocated_slots[0].tasks;
        assert!(tasks.iter().all(|t| t.job_id == job_id));
        assert_eq!(
            tasks
                .iter()
                .map(|t| (t.vertex, t.subtask))
                .collect::<Vec<_>>(),
            [(0, tasks[0].subtask), (1, tasks[0].subtask)]
        );
        assert!(
            tasks.iter().all(|t| t.attempt.as_ref().unwrap().state
                == crate::job::states::ExecutionState::Deploying)
        );
    }
    assert_eq!(status.free_slots(), 2);

    // Every task runs, then finishes: each shared slot is free again after its last task.
    let attempts: Vec<ExecutionAttemptId> = probes
        .iter()
        .flat_map(|p| deployed_to(p).into_values().flatten())
        .map(|(_, _, attempt)| attempt)
        .collect();
    for state in [
        crate::job::states::ExecutionState::Running,
        crate::job::states::ExecutionState::Finished,
    ] {
        f.report(job_id, &attempts, state);
        settle().await;
        let status = f.status().await;
        assert_slot_counts_agree(&status);
        if state == crate::job::states::ExecutionState::Running {
            assert!(status.task_managers.iter().all(|tm| {
                tm.allocated_slots
                    .iter()
                    .flat_map(|s| &s.tasks)
                    .all(|t| t.attempt.as_ref().unwrap().state == state)
            }));
        }
    }
    let status = f.status().await;
    assert!(
        status
            .task_managers
            .iter()
            .all(|tm| tm.allocated_slots.is_empty()),
        "{status:#?}"
    );
    assert_eq!(status.free_slots(), 4);
}

#[actix::test]
async fn job_manager_and_task_manager_statuses_agree_on_slots_and_running_attempts() {
    use crate::actors::task_manager::registration::Leader;
    use crate::actors::task_manager::{TaskManager, TaskManagerSettings, TaskManagerSpec};
    use crate::config::RegistrationConfig;

    let f = start().await;
    let spec = TaskManagerSpec {
        cluster_id: ClusterId::new("test"),
        slots: 2,
        hostname: "host-a".into(),
        hardware: HardwareDescription {
            cpu_cores: 2,
            physical_memory_bytes: 0,
        },
        registration: RegistrationConfig {
            initial_timeout: Duration::from_millis(100),
            max_timeout: Duration::from_millis(400),
            error_delay: Duration::from_secs(1),
        },
        heartbeat: HeartbeatConfig {
            interval: INTERVAL,
            timeout: TIMEOUT,
        },
        registry: crate::operators::OperatorRegistry::with_builtins(),
        working_dir: std::env::temp_dir().join("flint-unit-tests"),
        spill_threshold_bytes: 1 << 20,
        spill_budget_bytes: None,
        managed_memory: 64 << 20,
        network: crate::exchange::NetworkSettings::default(),
        cancellation: crate::config::CancellationConfig::default(),
        blob_cache_linger: std::time::Duration::from_secs(60),
    };
    // Task threads in lock-step with the paused clock: cancellation is seen in virtual time.
    let mut tm_env = f.env.clone();
    tm_env.task_runner = std::sync::Arc::new(crate::sim::lockstep::LockstepTaskRunner::default());
    let task_managers: Vec<Addr<TaskManager>> = ["tm-1", "tm-2"]
        .into_iter()
        .map(|name| {
            TaskManager::new(
                TaskManagerSettings {
                    resource_id: ResourceId::new(name),
                    job_manager: Some(Leader {
                        address: f.env.address_of(NAME),
                        retrieved_session: Some(SESSION),
                    }),
                    spec: spec.clone(),
                },
                tm_env.clone(),
            )
            .start()
        })
        .collect();
    settle().await;
    assert_eq!(f.status().await.task_managers.len(), 2);
    let job_id = ask(&f.jm, SubmitJob::new(pipelined_job(3, 60_000)))
        .await
        .expect("accepted");
    settle().await;

    // Three shared slots over two TaskManagers: both views agree, TaskManager by TaskManager.
    let jm_status = f.status().await;
    assert_slot_counts_agree(&jm_status);
    assert_eq!(jm_status.free_slots(), 1);
    for (info, tm) in jm_status.task_managers.iter().zip(&task_managers) {
        let tm_status = ask(tm, GetTaskManagerStatus).await;
        assert_eq!(tm_status.resource_id, info.resource_id);
        assert_eq!(tm_status.instance_id(), Some(info.instance_id));
        assert_eq!(tm_status.leader_session_id, Some(SESSION));
        assert_eq!(tm_status.slots.len() as u32, info.slots_total);
        assert_eq!(tm_status.slots_free, info.slots_free);
        let held: BTreeSet<AllocationId> = tm_status.slots.iter().flatten().copied().collect();
        let listed: BTreeSet<AllocationId> = info
            .allocated_slots
            .iter()
            .map(|s| s.allocation_id)
            .collect();
        assert_eq!(held, listed, "{}", info.resource_id);
        let running: BTreeSet<(ExecutionAttemptId, AllocationId)> = tm_status
            .running
            .iter()
            .map(|r| {
                assert_eq!(r.job_id, job_id);
                (r.attempt, r.allocation_id)
            })
            .collect();
        let placed: BTreeSet<(ExecutionAttemptId, AllocationId)> = info
            .allocated_slots
            .iter()
            .flat_map(|s| {
                s.tasks
                    .iter()
                    .map(|t| (t.attempt.as_ref().unwrap().attempt, s.allocation_id))
            })
            .collect();
        assert_eq!(running, placed, "{}", info.resource_id);
    }

    // Cancelled: the tasks stop at their next sleep step, the TaskManagers report it, and both
    // views show every slot free.
    ask(&f.jm, CancelJob { job_id }).await.expect("cancelled");
    let mut freed = false;
    for _ in 0..1_000 {
        settle().await;
        let all_free = f
            .status()
            .await
            .task_managers
            .iter()
            .all(|tm| tm.allocated_slots.is_empty() && tm.slots_free == tm.slots_total);
        if all_free {
            freed = true;
            break;
        }
    }
    assert!(freed, "{:#?}", f.status().await);
    for tm in &task_managers {
        let tm_status = ask(tm, GetTaskManagerStatus).await;
        assert_eq!(tm_status.slots, [None, None]);
        assert!(tm_status.running.is_empty());
    }
}

/// Issue 12 (idle means no work and no partitions still needed): shrinking the pool released a
/// TaskManager that held a finished producer's blocking result while its consumer ran
/// elsewhere (only used slots counted as busy), so the result was lost.
#[actix::test]
async fn a_task_manager_holding_results_a_running_job_needs_is_not_idle() {
    use crate::job::graph::{DistributionPattern, ExchangeMode, JobGraph};
    use crate::job::states::ExecutionState;
    let f = start().await;
    let mut probes = Vec::new();
    for name in ["tm-1", "tm-2"] {
        let (probe, mut registration) = f.task_manager(name);
        registration.number_of_slots = 1;
        f.register(&registration).await;
        probes.push(probe);
    }
    let mut builder = JobGraph::builder("blocking");
    let source = builder
        .vertex("source", "sleep", 2)
        .config("ms", "1")
        .index();
    let sink = builder.vertex("sink", "sleep", 1).config("ms", "1").index();
    builder.edge(
        source,
        sink,
        DistributionPattern::AllToAll,
        ExchangeMode::Blocking,
    );
    let job_graph = builder.build(|_| true).expect("a valid graph");
    let job_id = ask(&f.jm, SubmitJob::new(job_graph))
        .await
        .expect("accepted");
    settle().await;
    let sent = |vertex: &str| -> Vec<ExecutionAttemptId> {
        probes
            .iter()
            .flat_map(|p| deployed_to(p).into_values().flatten())
            .filter(|(name, _, _)| name == vertex)
            .map(|(_, _, attempt)| attempt)
            .collect()
    };
    let report = |attempt: ExecutionAttemptId, state: ExecutionState| {
        f.report(job_id, &[attempt], state);
    };
    for attempt in sent("source") {
        report(attempt, ExecutionState::Running);
        report(attempt, ExecutionState::Finished);
    }
    settle().await;
    let sink = sent("sink");
    assert_eq!(sink.len(), 1, "the sink runs on one of the two");
    report(sink[0], ExecutionState::Running);
    settle().await;
    let answer = ask(
        &f.jm,
        ReleaseIdleTaskManagers {
            count: 2,
            pending: Vec::new(),
        },
    )
    .await;
    assert_eq!(
        answer.released,
        [],
        "the TaskManager without the sink still holds a result the sink reads"
    );
    report(sink[0], ExecutionState::Finished);
    settle().await;
    let answer = ask(
        &f.jm,
        ReleaseIdleTaskManagers {
            count: 2,
            pending: Vec::new(),
        },
    )
    .await;
    assert_eq!(answer.released.len(), 2, "the job finished: both are idle");
}

/// Issue 12 (fencing): `RegisterResourceManager` and `ResourceRemoved` carry the leader session
/// the resource manager knows; one meant for another leader does not connect it or unregister
/// anything here.
#[actix::test]
async fn resource_manager_messages_for_another_leader_session_are_refused() {
    let stale = LeaderSessionId::from_u128(999);
    let f = start().await;
    let (_tm, registration) = f.task_manager("tm-1");
    f.register(&registration).await;
    let rm = ResourceManagerProbeHandle::start(&f.env);
    let answer = ask(
        &f.jm,
        RegisterResourceManager {
            leader_session_id: stale,
            resource_manager: rm.address.clone(),
            designated_pool_size: 4,
            max_pool_size: 10,
        },
    )
    .await;
    assert_eq!(
        answer.leader_session_id, SESSION,
        "it names its own session"
    );
    assert!(answer.registered.is_empty(), "and tells a stranger nothing");
    assert!(!f.status().await.resource_manager_connected);
    f.jm.do_send(ResourceRemoved {
        leader_session_id: stale,
        resource_id: ResourceId::new("tm-1"),
        reason: RemovalReason::Terminated,
    });
    settle().await;
    assert_eq!(f.status().await.task_managers.len(), 1, "still registered");
}

/// Issue 12 (a shrink never kills a worker just given tasks): of the resource manager's pending
/// workers, one unknown here may go (and is refused if it registers after all), one registered
/// and busy here stays.
#[actix::test]
async fn of_the_pending_workers_only_unknown_or_idle_ones_may_go() {
    let f = start().await;
    let (_tm, registration) = f.task_manager("tm-busy");
    let instance_id = f.register(&registration).await;
    f.heartbeat("tm-busy", instance_id, 1).await; // a slot taken
    let answer = ask(
        &f.jm,
        ReleaseIdleTaskManagers {
            count: 2,
            pending: vec![ResourceId::new("tm-new"), ResourceId::new("tm-busy")],
        },
    )
    .await;
    assert_eq!(answer.released, [ResourceId::new("tm-new")]);
    assert_eq!(f.status().await.task_managers.len(), 1);
    let (_late, mut late) = f.task_manager("tm-new");
    late.session = TaskManagerSessionId::from_u128(2);
    assert_eq!(
        ask(&f.jm, late).await,
        RegistrationResponse::RefuseRegistration(RefuseRegistration {
            reason: RefusalReason::Released {
                resource_id: ResourceId::new("tm-new")
            }
        })
    );
}

/// Issue 12, item 8: ended jobs are kept by count (`jobstore.max-capacity`, the first to end go
/// first) and by age (`jobstore.expiration-time`), so a long-running JobManager does not keep
/// every job it ever ran. (Before, 1,000 were kept for ever.)
#[actix::test]
async fn ended_jobs_are_forgotten_beyond_the_job_store_capacity_and_after_their_expiration() {
    tokio::time::pause();
    let clock = std::sync::Arc::new(crate::base::clock::ManualClock::new(1_000_000));
    let env = NodeEnv::new(
        "jobmanager-node",
        3,
        clock.clone(),
        std::sync::Arc::new(crate::env::CurrentArbiterSpawner),
        std::sync::Arc::new(crate::rpc::directory::LocalDirectory::new()),
        crate::env::events::EventSink::new(16),
    );
    let jm = JobManager::new(
        JobManagerSettings {
            jobstore: crate::config::JobStoreConfig {
                expiration_time: Duration::from_secs(60),
                max_capacity: 2,
            },
            ..settings()
        },
        SESSION,
        env,
    )
    .start();
    let registry = crate::operators::OperatorRegistry::with_builtins();
    let mut ended = Vec::new();
    for n in 0..3 {
        let mut builder = crate::job::graph::JobGraph::builder(format!("job-{n}"));
        builder.vertex("v", "noop", 1);
        let graph = builder.build(|op| registry.contains(op)).unwrap();
        let job_id = ask(&jm, SubmitJob::new(graph)).await.unwrap();
        // No TaskManager: its task waits for a slot, and the cancel ends it at once.
        ask(&jm, CancelJob { job_id }).await.unwrap();
        ended.push(job_id);
        clock.advance(1_000);
        settle().await;
    }
    let known = |jobs: Vec<JobSummary>| jobs.into_iter().map(|j| j.job_id).collect::<Vec<_>>();
    assert_eq!(
        known(ask(&jm, ListJobs).await),
        ended[1..],
        "the first to end went first"
    );
    // Each goes 60 s after it ended: the second at +61 s, the third at +62 s.
    clock.advance(57_000); // +60 s
    advance(1_100).await; // one slot request sweep, which expires jobs too
    assert_eq!(known(ask(&jm, ListJobs).await), ended[1..]);
    clock.advance(1_500); // +61.5 s
    advance(1_100).await; // one slot request sweep, which expires jobs too
    assert_eq!(known(ask(&jm, ListJobs).await), ended[2..]);
    clock.advance(1_000); // +62.5 s
    advance(1_100).await; // one slot request sweep, which expires jobs too
    assert!(known(ask(&jm, ListJobs).await).is_empty());
}

/// High availability: a JobManager whose leadership lease lapsed (its process resumed after a
/// pause, its leader loop has not run yet) sends no `SubmitTask`; the deployment waits and goes
/// out once the lease is renewed. A revoked lease never lets it out.
#[actix::test]
async fn a_job_manager_deploys_only_while_its_leadership_lease_is_held() {
    tokio::time::pause();
    let env = env("jobmanager-node", 3);
    let lease = crate::ha::LeadershipLease::lapsed();
    let jm = JobManager::new(settings(), SESSION, env.clone())
        .with_leadership_lease(lease.clone())
        .start();
    let f = Fixture {
        jm,
        env,
        started_at: Instant::now(),
    };
    let (probe, registration) = f.task_manager("tm-1");
    f.register(&registration).await;
    let submit = || async {
        ask(&f.jm, SubmitJob::new(pipelined_job(1, 60_000)))
            .await
            .expect("accepted")
    };
    submit().await;
    // Many lease rechecks, within the TaskManager's heartbeat timeout.
    tokio::time::sleep(TIMEOUT / 2).await;
    settle().await;
    assert!(
        deployed_to(&probe).is_empty(),
        "deployed without a lease: {:?}",
        deployed_to(&probe)
    );
    lease.extend_to(Instant::now() + Duration::from_secs(60));
    tokio::time::sleep(crate::ha::lease::RECHECK * 2).await;
    settle().await;
    let deployed: usize = deployed_to(&probe).values().map(Vec::len).sum();
    assert_eq!(
        deployed, 2,
        "the waiting deployments go out once the lease is held"
    );

    // A second job after the lease was revoked: never deployed.
    lease.revoke();
    submit().await;
    tokio::time::sleep(TIMEOUT / 2).await;
    settle().await;
    let deployed: usize = deployed_to(&probe).values().map(Vec::len).sum();
    assert_eq!(deployed, 2, "deployed under a revoked lease");
    let _ = f.started_at;
}

/// Issue 11, item 5: an all-to-all list travels once per TaskManager, and a TaskManager that
/// does not have a list a task names (its cache dropped it, or the frame carrying it was lost)
/// refuses the task; the JobManager sends that task again with the list instead of failing it.
#[actix::test]
async fn a_task_naming_a_producer_list_its_task_manager_lacks_is_sent_again_with_the_list() {
    use crate::job::graph::{DistributionPattern, ExchangeMode, JobGraph};
    use crate::messages::deployment::Producers;

    let f = start().await;
    let (probe, registration) = f.task_manager("tm-1");
    f.register(&registration).await;
    probe.forget_producer_lists();
    let mut builder = JobGraph::builder("all-to-all");
    let source = builder
        .vertex("source", "sleep", 1)
        .config("ms", "60000")
        .index();
    let sink = builder.vertex("sink", "noop", 2).index();
    builder.edge(
        source,
        sink,
        DistributionPattern::AllToAll,
        ExchangeMode::Pipelined,
    );
    let job_id = ask(
        &f.jm,
        SubmitJob::new(builder.build(|_| true).expect("a valid graph")),
    )
    .await
    .expect("accepted");
    settle().await;

    let sinks: Vec<_> = probe
        .submitted()
        .into_iter()
        .filter(|d| &*d.vertex_name == "sink")
        .collect();
    let gates: Vec<&Producers> = sinks.iter().map(|d| &d.inputs[0].producers).collect();
    let [first, named, again] = gates[..] else {
        panic!("two sinks, one sent twice: {sinks:#?}");
    };
    let Producers::Listed {
        id: Some(id),
        locations,
    } = first
    else {
        panic!("the first sink on tm-1 carries the list: {first:?}");
    };
    assert_eq!(locations.len(), 1);
    assert_eq!(*named, Producers::Known(*id), "the second only names it");
    assert_eq!(
        sinks[1].attempt, sinks[2].attempt,
        "the same attempt, sent again"
    );
    assert_eq!(again, first, "this time with the list");

    let details = ask(&f.jm, RequestJobStatus { job_id })
        .await
        .expect("the job is known");
    assert_eq!(details.restarts, 0, "nothing failed: {details:#?}");
    assert!(
        details
            .vertices
            .iter()
            .flat_map(|v| &v.subtasks)
            .all(|s| s.state == crate::job::states::ExecutionState::Deploying),
        "{details:#?}"
    );
}

/// Cancelling a job sends each TaskManager one `CancelTasks` naming every attempt it runs of
/// the job, not one message per task (5,000 of them overflowed a transport queue of 4,096).
#[actix::test]
async fn cancelling_a_job_sends_each_task_manager_one_message_for_all_its_tasks() {
    let f = start().await;
    let (probe, registration) = f.task_manager("tm-1");
    f.register(&registration).await;
    // Two slots, each shared by a source and a sink: four tasks on one TaskManager.
    let job_id = ask(&f.jm, SubmitJob::new(pipelined_job(2, 60_000)))
        .await
        .expect("accepted");
    settle().await;
    let attempts: BTreeSet<ExecutionAttemptId> =
        probe.submitted().iter().map(|d| d.attempt).collect();
    assert_eq!(attempts.len(), 4);
    ask(&f.jm, CancelJob { job_id }).await.expect("cancelled");
    settle().await;
    let cancels: Vec<Vec<ExecutionAttemptId>> = probe.received.filter(|m| match m {
        TaskManagerMessage::CancelTasks(c) => Some(c.attempts.clone()),
        _ => None,
    });
    assert_eq!(cancels.len(), 1, "{cancels:?}");
    assert_eq!(
        cancels[0].iter().copied().collect::<BTreeSet<_>>(),
        attempts
    );
}

/// `ReleaseJobPartitions` is a tell: when one is lost, the TaskManager's next heartbeat still
/// lists the ended job, and the JobManager releases it again. A running job's are kept.
#[actix::test]
async fn partitions_an_ended_job_left_behind_are_released_again_at_the_next_heartbeat() {
    let f = start().await;
    let (probe, registration) = f.task_manager("tm-1");
    let instance_id = f.register(&registration).await;
    let job_id = ask(&f.jm, SubmitJob::new(pipelined_job(2, 60_000)))
        .await
        .expect("accepted");
    settle().await;
    let released = || {
        probe.received.filter(|m| match m {
            TaskManagerMessage::ReleaseJobPartitions(r) => Some(r.job_id),
            _ => None,
        })
    };
    // A job this JobManager does not know (ended and forgotten) is released; the running one
    // is not.
    let forgotten = JobId::from_u128(7);
    f.heartbeat_holding("tm-1", instance_id, 0, vec![job_id, forgotten])
        .await;
    settle().await;
    assert_eq!(released(), [forgotten]);

    let attempts: Vec<ExecutionAttemptId> = deployed_to(&probe)
        .into_values()
        .flatten()
        .map(|(_, _, attempt)| attempt)
        .collect();
    for state in [
        crate::job::states::ExecutionState::Running,
        crate::job::states::ExecutionState::Finished,
    ] {
        f.report(job_id, &attempts, state);
        settle().await;
    }
    assert_eq!(released(), [forgotten, job_id], "released as the job ended");
    // That release was lost: the TaskManager still lists the job, and is told again.
    f.heartbeat_holding("tm-1", instance_id, 2, vec![job_id])
        .await;
    settle().await;
    assert_eq!(released(), [forgotten, job_id, job_id]);
}

/// A task that finished early has its producer's unread subpartitions released by the
/// JobManager, and again every `UNREAD_RELEASE_REPEAT` while that producer runs: the release is
/// a tell, and one lost with the task's own (its TaskManager died) would leave the producer
/// waiting for room for ever. Once the producer ends, nothing more is sent.
#[actix::test]
async fn an_early_finished_tasks_release_is_repeated_while_its_producer_runs() {
    use crate::job::states::ExecutionState;
    let f = start().await;
    let (probe, registration) = f.task_manager("tm-1");
    let instance_id = f.register(&registration).await;
    let job_id = ask(&f.jm, SubmitJob::new(pipelined_job(1, 60_000)))
        .await
        .expect("accepted");
    settle().await;
    let tasks: Vec<(String, ExecutionAttemptId)> = deployed_to(&probe)
        .into_values()
        .flatten()
        .map(|(vertex, _, attempt)| (vertex, attempt))
        .collect();
    let attempt_of = |name: &str| tasks.iter().find(|(v, _)| v == name).unwrap().1;
    let (source, sink) = (attempt_of("source"), attempt_of("sink"));
    // Time passes with the TaskManager heartbeating, so it stays registered.
    let pass = |time: Duration| {
        let f = &f;
        async move {
            let until = Instant::now() + time;
            while Instant::now() < until {
                let report = HeartbeatReport {
                    slots_total: 2,
                    slots_free: 1,
                    running: vec![source],
                    io: vec![],
                    partitions_of: vec![job_id],
                    spill: Default::default(),
                };
                ask(
                    &f.jm,
                    Heartbeat {
                        resource_id: ResourceId::new("tm-1"),
                        instance_id,
                        report,
                    },
                )
                .await;
                tokio::time::sleep(INTERVAL).await;
            }
            settle().await;
        }
    };
    f.report(job_id, &[source, sink], ExecutionState::Running);
    settle().await;
    let releases = || {
        probe.received.filter(|m| match m {
            TaskManagerMessage::ReleasePartitions(r) if !r.subpartitions.is_empty() => {
                Some(r.subpartitions.clone())
            }
            _ => None,
        })
    };
    f.jm.do_send(UpdateTaskExecutionStates::from(TaskExecutionState {
        ended_early: true,
        unrecoverable: false,
        job_id,
        attempt: sink,
        state: ExecutionState::Finished,
        error: None,
        unavailable_partition: None,
        io: None,
        result: None,
    }));
    settle().await;
    let first = releases();
    assert_eq!(first.len(), 1, "released at once: {first:?}");
    assert_eq!(first[0].len(), 1);
    assert_eq!(first[0][0].0.producer, source);
    // That release was lost: it comes again while the producer runs.
    pass(UNREAD_RELEASE_REPEAT * 2 + INTERVAL).await;
    assert_eq!(releases().len(), 3, "repeated twice more: {:?}", releases());
    // The producer ends: no more repeats.
    f.report(job_id, &[source], ExecutionState::Finished);
    settle().await;
    pass(UNREAD_RELEASE_REPEAT * 3).await;
    assert_eq!(releases().len(), 3);
}
