//! The TaskManager alone: a probe JobManager, a paused clock.

use std::time::Duration;

use actix::prelude::*;

use super::*;
use crate::base::ids::LeaderSessionId;
use crate::messages::RemovalReason;
use crate::messages::job_manager::{
    AcknowledgeRegistration, AlreadyRegistered, JobManagerMessage, RefusalReason,
    RefuseRegistration, RegistrationResponse,
};
use crate::messages::task_manager::{CancelTasks, SubmitTasks, TaskSubmissionError};
use crate::testing::*;

mod blocking_io;
mod network_buffers;

const SESSION: LeaderSessionId = LeaderSessionId::from_u128(5);
const STALE: LeaderSessionId = LeaderSessionId::from_u128(4);
const INTERVAL: Duration = Duration::from_millis(100);
const TIMEOUT: Duration = Duration::from_millis(500);

fn registration_config() -> RegistrationConfig {
    RegistrationConfig {
        initial_timeout: Duration::from_millis(100),
        max_timeout: Duration::from_millis(400),
        error_delay: Duration::from_secs(1),
    }
}

fn ack(instance: u128, session: LeaderSessionId) -> RegistrationResponse {
    RegistrationResponse::AcknowledgeRegistration(AcknowledgeRegistration {
        instance_id: InstanceId::from_u128(instance),
        leader_session_id: session,
    })
}

fn spec(slots: u32, hostname: &str) -> TaskManagerSpec {
    TaskManagerSpec {
        cluster_id: ClusterId::new("test"),
        slots,
        hostname: hostname.into(),
        hardware: HardwareDescription {
            cpu_cores: 2,
            physical_memory_bytes: 0,
        },
        registration: registration_config(),
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
        cancellation: crate::config::CancellationConfig {
            interval: Duration::from_secs(1),
            timeout: Duration::from_secs(5),
        },
        blob_cache_linger: Duration::from_secs(60),
    }
}

struct Fixture {
    tm: Addr<TaskManager>,
    jm: JobManagerProbeHandle,
    env: NodeEnv,
}

impl Fixture {
    fn registrations(&self) -> Vec<RegisterTaskManager> {
        registrations(&self.jm)
    }

    fn heartbeats(&self) -> usize {
        self.jm
            .received
            .filter(|m| matches!(m, JobManagerMessage::Heartbeat(_)).then_some(()))
            .len()
    }

    async fn phase(&self) -> RegistrationPhase {
        ask(&self.tm, GetTaskManagerStatus).await.registration
    }
}

/// A new leader (session 6, acknowledging as instance 20) that leader retrieval announces to
/// the TaskManager.
fn announce_new_leader(f: &Fixture) -> JobManagerProbeHandle {
    let new_session = LeaderSessionId::from_u128(6);
    let new_jm = JobManagerProbeHandle::start(&f.env, "jobmanager-2", new_session);
    new_jm.script(|s| s.register_task_manager = Script::Answer(ack(20, new_session)));
    f.tm.do_send(NewLeaderAvailable {
        address: new_jm.address.clone(),
        leader_session_id: new_session,
    });
    new_jm
}

fn registrations(jm: &JobManagerProbeHandle) -> Vec<RegisterTaskManager> {
    jm.received.filter(|m| match m {
        JobManagerMessage::RegisterTaskManager(r) => Some(r.clone()),
        _ => None,
    })
}

/// A TaskManager told of a probe JobManager leader (with `retrieved` session) at start;
/// `script` sets the probe's answers before the TaskManager starts.
async fn start(
    retrieved: Option<LeaderSessionId>,
    script: impl FnOnce(&mut JobManagerScripts),
) -> Fixture {
    start_with(retrieved, script, spec(3, "host-a")).await
}

/// [`start`] with a TaskManager of `spec`.
async fn start_with(
    retrieved: Option<LeaderSessionId>,
    script: impl FnOnce(&mut JobManagerScripts),
    spec: TaskManagerSpec,
) -> Fixture {
    tokio::time::pause();
    let env = env("tm-node", 9);
    let jm = JobManagerProbeHandle::start(&env, "jobmanager", SESSION);
    jm.script(script);
    let tm = TaskManager::new(
        TaskManagerSettings {
            resource_id: ResourceId::new("tm-1"),
            job_manager: Some(Leader {
                address: jm.address.clone(),
                retrieved_session: retrieved,
            }),
            spec,
        },
        env.clone(),
    )
    .start();
    settle().await;
    Fixture { tm, jm, env }
}

#[actix::test]
async fn registers_at_start_with_its_location_and_slots_then_heartbeats() {
    let f = start(Some(SESSION), |_| {}).await;
    let sent = f.registrations();
    assert_eq!(sent.len(), 1);
    let registration = &sent[0];
    assert_eq!(registration.resource_id, ResourceId::new("tm-1"));
    assert_eq!(registration.cluster_id, ClusterId::new("test"));
    assert_eq!(registration.number_of_slots, 3);
    assert_eq!(registration.location.hostname, "host-a");
    assert_eq!(
        registration.location.address,
        f.env.address_of("taskmanager/tm-1")
    );
    assert_eq!(
        f.phase().await,
        RegistrationPhase::Registered {
            instance_id: InstanceId::from_u128(1)
        }
    );
    advance(1_000).await;
    let heartbeats = f.heartbeats();
    assert!(
        (9..=11).contains(&heartbeats),
        "{heartbeats} heartbeats in 1 s"
    );
    let status = ask(&f.tm, GetTaskManagerStatus).await;
    assert_eq!((status.slots_total, status.slots_free), (3, 3));
    assert_eq!(
        f.registrations().len(),
        1,
        "no re-registration while acknowledged"
    );
}

#[actix::test]
async fn registration_attempts_double_their_timeout_up_to_the_maximum() {
    let f = start(Some(SESSION), |s| s.register_task_manager = Script::Silent).await;
    let start = Instant::now() - Duration::from_millis(1);
    let mut sent_at = Vec::new();
    let mut seen = 0;
    while sent_at.len() < 6 {
        settle().await;
        let now = f.registrations().len();
        if now > seen {
            seen = now;
            sent_at.push(start.elapsed().as_millis() / 10 * 10);
        }
    }
    // Timeouts 100, 200, 400, 400, 400 ms (capped), each followed at once by the next attempt.
    assert_eq!(sent_at, [0, 100, 300, 700, 1100, 1500]);
    assert_eq!(
        f.phase().await,
        RegistrationPhase::Registering { attempt: 6 }
    );
}

/// Issue 12: a refused TaskManager re-registered every few seconds forever; now it stops with
/// the reason, as Flink's TaskExecutor does, and its process hears why.
#[actix::test]
async fn a_refused_task_manager_stops_with_the_reason() {
    tokio::time::pause();
    let env = env("tm-node", 9);
    let jm = JobManagerProbeHandle::start(&env, "jobmanager", SESSION);
    jm.script(|s| {
        s.register_task_manager = Script::Answer(RegistrationResponse::RefuseRegistration(
            RefuseRegistration {
                reason: RefusalReason::NoSlots,
            },
        ))
    });
    let (fatal, reason) = tokio::sync::oneshot::channel();
    let tm = TaskManager::new(
        TaskManagerSettings {
            resource_id: ResourceId::new("tm-1"),
            job_manager: Some(Leader {
                address: jm.address.clone(),
                retrieved_session: Some(SESSION),
            }),
            spec: spec(3, "host-a"),
        },
        env.clone(),
    )
    .on_fatal_error(fatal)
    .start();
    let reason = reason.await.expect("told why");
    assert!(reason.contains("taskmanager.slots is 0"), "{reason}");
    settle().await;
    assert!(!tm.connected(), "the TaskManager stopped");
    advance(60_000).await;
    assert_eq!(registrations(&jm).len(), 1, "never asked again");
}

#[actix::test]
async fn a_late_acknowledgement_from_an_earlier_attempt_is_ignored() {
    let held = Held::default();
    let f = start(Some(SESSION), |s| {
        s.register_task_manager = Script::Hold(held.clone())
    })
    .await;
    advance(100).await; // attempt 1 times out; attempt 2 is sent
    assert_eq!(held.len(), 2);
    held.answer(0, ack(1, SESSION));
    settle().await;
    assert_eq!(
        f.phase().await,
        RegistrationPhase::Registering { attempt: 2 },
        "attempt 1's answer came too late"
    );
    held.answer(
        1,
        RegistrationResponse::AlreadyRegistered(AlreadyRegistered {
            instance_id: InstanceId::from_u128(1),
            leader_session_id: SESSION,
        }),
    );
    settle().await;
    assert_eq!(
        f.phase().await,
        RegistrationPhase::Registered {
            instance_id: InstanceId::from_u128(1)
        }
    );
    advance(5_000).await;
    assert_eq!(held.len(), 2, "registered: no more attempts");
}

#[actix::test]
async fn a_late_failure_of_an_earlier_attempt_leaves_the_registration_heartbeating() {
    // Regression (issue 12, seeds 21150 and 24138): attempt 1's ask failed after attempt 2 had
    // registered; the failure, ignored by the registration, still dropped the JobManager
    // gateway, so the TaskManager sent no heartbeat and no task update until its own heartbeat
    // timeout made it register again (dropping its tasks, which stayed DEPLOYING).
    let held = Held::default();
    let f = start(Some(SESSION), |s| {
        s.register_task_manager = Script::Hold(held.clone())
    })
    .await;
    advance(100).await; // attempt 1 times out; attempt 2 is sent
    held.answer(1, ack(1, SESSION));
    settle().await;
    assert!(matches!(
        f.phase().await,
        RegistrationPhase::Registered { .. }
    ));
    f.tm.send(Internal(RegistrationEvent::AttemptFailed { attempt: 1 }))
        .await
        .expect("the TaskManager runs");
    let before = f.heartbeats();
    advance(2_000).await;
    let heartbeats = f.heartbeats() - before;
    assert!(
        heartbeats >= 15,
        "{heartbeats} heartbeats in 2 s after a stale failure"
    );
    assert_eq!(held.len(), 2, "no new registration attempt");
}

#[actix::test]
async fn an_acknowledgement_from_a_stale_leader_session_is_ignored() {
    let f = start(Some(SESSION), |s| {
        s.register_task_manager = Script::Answer(ack(1, STALE))
    })
    .await;
    assert_eq!(
        f.phase().await,
        RegistrationPhase::Registering { attempt: 1 }
    );
    f.jm.script(|s| s.register_task_manager = Script::Answer(ack(2, SESSION)));
    advance(100).await;
    assert_eq!(
        f.phase().await,
        RegistrationPhase::Registered {
            instance_id: InstanceId::from_u128(2)
        }
    );
}

#[actix::test]
async fn without_a_retrieved_session_the_first_acknowledgement_sets_it() {
    let f = start(None, |_| {}).await;
    assert!(matches!(
        f.phase().await,
        RegistrationPhase::Registered { .. }
    ));
    // Fencing now holds against that session.
    f.tm.do_send(Disconnect {
        leader_session_id: STALE,
        reason: RemovalReason::HeartbeatTimeout,
    });
    settle().await;
    assert!(matches!(
        f.phase().await,
        RegistrationPhase::Registered { .. }
    ));
}

#[actix::test]
async fn a_silent_job_manager_makes_it_register_again_after_the_heartbeat_timeout() {
    let f = start(Some(SESSION), |_| {}).await;
    f.jm.script(|s| s.heartbeat = Script::Silent);
    let silent_since = Instant::now();
    tokio::time::sleep_until(silent_since + TIMEOUT - Duration::from_millis(10)).await;
    assert_eq!(f.registrations().len(), 1);
    tokio::time::sleep_until(silent_since + TIMEOUT + INTERVAL + Duration::from_millis(5)).await;
    assert_eq!(f.registrations().len(), 2, "registered again");
    assert!(matches!(
        f.phase().await,
        RegistrationPhase::Registered { .. }
    ));
}

#[actix::test]
async fn an_unknown_task_manager_answer_makes_it_register_again_at_once() {
    let f = start(Some(SESSION), |_| {}).await;
    f.jm.script(|s| {
        s.heartbeat =
            Script::Answer(crate::messages::job_manager::HeartbeatResponse::UnknownTaskManager)
    });
    advance(INTERVAL.as_millis() as u64 + 1).await;
    assert_eq!(f.registrations().len(), 2);
}

#[actix::test]
async fn disconnect_from_the_leader_makes_it_register_again_and_a_stale_one_is_dropped() {
    let f = start(Some(SESSION), |_| {}).await;
    f.tm.do_send(Disconnect {
        leader_session_id: STALE,
        reason: RemovalReason::HeartbeatTimeout,
    });
    settle().await;
    assert_eq!(f.registrations().len(), 1, "stale session: dropped");
    f.tm.do_send(Disconnect {
        leader_session_id: SESSION,
        reason: RemovalReason::HeartbeatTimeout,
    });
    settle().await;
    assert_eq!(f.registrations().len(), 2);
}

#[actix::test]
async fn new_leader_available_moves_it_to_the_new_job_manager() {
    let held = Held::default();
    let f = start(Some(SESSION), |s| {
        s.register_task_manager = Script::Hold(held.clone())
    })
    .await;
    let new_jm = announce_new_leader(&f);
    settle().await;
    assert_eq!(registrations(&new_jm).len(), 1);
    assert_eq!(
        f.phase().await,
        RegistrationPhase::Registered {
            instance_id: InstanceId::from_u128(20)
        }
    );
    // The old leader's late answer changes nothing.
    held.answer(0, ack(1, SESSION));
    settle().await;
    assert_eq!(
        f.phase().await,
        RegistrationPhase::Registered {
            instance_id: InstanceId::from_u128(20)
        }
    );
    // Heartbeats now go to the new leader only.
    let old_heartbeats = f.heartbeats();
    advance(500).await;
    assert_eq!(f.heartbeats(), old_heartbeats);
    assert!(
        new_jm
            .received
            .filter(|m| matches!(m, JobManagerMessage::Heartbeat(_)).then_some(()))
            .len()
            >= 4
    );
}

#[actix::test]
async fn an_unreachable_job_manager_is_retried_after_the_error_delay() {
    tokio::time::pause();
    let env = env("tm-node", 9);
    let tm = TaskManager::new(
        TaskManagerSettings {
            resource_id: ResourceId::new("tm-1"),
            job_manager: Some(Leader {
                address: env.address_of("jobmanager"),
                retrieved_session: Some(SESSION),
            }),
            spec: spec(1, "h"),
        },
        env.clone(),
    )
    .start();
    settle().await;
    assert_eq!(
        ask(&tm, GetTaskManagerStatus).await.registration,
        RegistrationPhase::WaitingToRetry { attempt: 2 }
    );
    let jm = JobManagerProbeHandle::start(&env, "jobmanager", SESSION);
    advance(990).await;
    assert!(registrations(&jm).is_empty());
    advance(20).await;
    assert_eq!(registrations(&jm).len(), 1);
}

#[actix::test]
async fn shutdown_stops_it_and_removes_it_from_the_directory() {
    let f = start(Some(SESSION), |_| {}).await;
    f.tm.send(crate::actors::Shutdown).await.unwrap();
    settle().await;
    assert!(!f.tm.connected());
    assert!(
        f.env
            .resolver
            .task_manager(&f.env.address_of("taskmanager/tm-1"))
            .is_none()
    );
}

#[actix::test]
async fn a_job_manager_restarted_at_the_same_address_is_found_again() {
    // Started with only an address (no session from leader retrieval), as `--jobmanager` does.
    let f = start(None, |_| {}).await;
    assert!(matches!(
        f.phase().await,
        RegistrationPhase::Registered { .. }
    ));
    f.jm.stop().await;
    let restarted_session = LeaderSessionId::from_u128(50);
    let restarted = JobManagerProbeHandle::start(&f.env, "jobmanager", restarted_session);
    restarted.script(|s| s.register_task_manager = Script::Answer(ack(30, restarted_session)));
    // Heartbeats to the dead one fail; after the timeout it registers at whatever answers there.
    advance((TIMEOUT + INTERVAL * 2).as_millis() as u64).await;
    assert_eq!(registrations(&restarted).len(), 1);
    assert_eq!(
        f.phase().await,
        RegistrationPhase::Registered {
            instance_id: InstanceId::from_u128(30)
        }
    );
}

/// Sends one task (at once) and returns its answer.
fn submit(
    tm: &Addr<TaskManager>,
    leader_session_id: LeaderSessionId,
    descriptor: crate::messages::deployment::TaskDeploymentDescriptor,
) -> impl std::future::Future<Output = Result<(), TaskSubmissionError>> {
    let answer = tm.send(SubmitTasks::one(leader_session_id, descriptor));
    async move {
        let answers = answer.await.expect("the TaskManager answers");
        let [answer] = &answers[..] else {
            panic!("one answer per task: {answers:?}");
        };
        answer.clone()
    }
}

#[actix::test]
async fn a_batch_of_tasks_is_answered_per_task_in_order() {
    let f = start(Some(SESSION), |_| {}).await;
    let answers = ask(
        &f.tm,
        SubmitTasks {
            leader_session_id: SESSION,
            descriptors: vec![
                sleeping_task(1, 1),
                sleeping_task(1, 2),
                sleeping_task(2, 2),
                sleeping_task(3, 3),
                sleeping_task(4, 4),
            ],
        },
    )
    .await;
    let attempt = crate::base::ids::ExecutionAttemptId::from_u128;
    assert_eq!(answers.len(), 5, "{answers:?}");
    assert_eq!(answers[0], Ok(()));
    assert_eq!(answers[1], Err(TaskSubmissionError::Duplicate(attempt(1))));
    assert_eq!(answers[2], Ok(()), "a second slot");
    assert_eq!(answers[3], Ok(()), "the third slot");
    assert!(
        matches!(answers[4], Err(TaskSubmissionError::NoFreeSlot(_))),
        "three slots: {answers:?}"
    );
    let status = ask(&f.tm, GetTaskManagerStatus).await;
    let mut running: Vec<_> = status.running.iter().map(|t| t.attempt).collect();
    running.sort();
    assert_eq!(running, [attempt(1), attempt(2), attempt(3)]);

    let stale = ask(
        &f.tm,
        SubmitTasks {
            leader_session_id: STALE,
            descriptors: vec![sleeping_task(5, 5), sleeping_task(6, 6)],
        },
    )
    .await;
    assert_eq!(stale, vec![Err(TaskSubmissionError::StaleLeader); 2]);
}

fn sleeping_task(
    attempt: u128,
    allocation: u128,
) -> crate::messages::deployment::TaskDeploymentDescriptor {
    crate::messages::deployment::TaskDeploymentDescriptor {
        job_id: crate::base::ids::JobId::from_u128(1),
        attempt: crate::base::ids::ExecutionAttemptId::from_u128(attempt),
        attempt_number: 0,
        vertex_name: "nap".into(),
        subtask: 0,
        parallelism: 1,
        operator: "sleep".into(),
        config: std::sync::Arc::new([("ms".to_owned(), "60000".to_owned())].into()),
        allocation_id: crate::base::ids::AllocationId::from_u128(allocation),
        inputs: vec![],
        outputs: vec![],
        artifacts: Arc::from([]),
    }
}

#[actix::test]
async fn a_task_cancelled_before_its_submission_arrives_is_refused() {
    let f = start(Some(SESSION), |_| {}).await;
    let attempt = crate::base::ids::ExecutionAttemptId::from_u128(7);
    f.tm.do_send(CancelTasks {
        leader_session_id: SESSION,
        attempts: vec![attempt],
    });
    let answer = submit(&f.tm, SESSION, sleeping_task(7, 1)).await;
    assert_eq!(answer, Err(TaskSubmissionError::Cancelled(attempt)));
    let status = ask(&f.tm, GetTaskManagerStatus).await;
    assert_eq!(status.slots_free, status.slots_total, "no slot taken");
}

/// Polls (real time: the tasks run on their own threads) until no task runs here any more.
async fn drained(tm: &Addr<TaskManager>) {
    let mut polls = 0;
    while !ask(tm, GetTaskManagerStatus).await.running.is_empty() {
        polls += 1;
        assert!(polls < 6_000, "the cancelled tasks never ended");
        #[allow(clippy::disallowed_methods)] // waiting on real task threads
        std::thread::sleep(Duration::from_millis(5));
        settle().await;
    }
    settle().await;
}

#[actix::test]
async fn a_disconnect_cancels_every_task_and_frees_each_slot_once_its_task_ended() {
    let f = start(Some(SESSION), |_| {}).await;
    for n in 1..=2 {
        let answer = submit(&f.tm, SESSION, sleeping_task(n, n)).await;
        assert_eq!(answer, Ok(()));
    }
    assert_eq!(ask(&f.tm, GetTaskManagerStatus).await.slots_free, 1);
    f.tm.do_send(Disconnect {
        leader_session_id: SESSION,
        reason: RemovalReason::HeartbeatTimeout,
    });
    settle().await;
    let status = ask(&f.tm, GetTaskManagerStatus).await;
    assert!(status.running.iter().all(|t| t.cancel_requested));
    assert_eq!(
        status.slots_free + status.running.len() as u32,
        3,
        "a slot stays taken only while its cancelled task runs"
    );
    drained(&f.tm).await;
    let status = ask(&f.tm, GetTaskManagerStatus).await;
    assert_eq!(
        status.slots_free, 3,
        "the JobManager failed them over; nothing is held"
    );
    // A stale leader session cannot submit.
    let stale = submit(&f.tm, STALE, sleeping_task(9, 9)).await;
    assert_eq!(stale, Err(TaskSubmissionError::StaleLeader));
}

#[actix::test]
async fn a_graceful_stop_tells_the_job_manager_it_leaves() {
    let f = start(Some(SESSION), |_| {}).await;
    f.tm.send(crate::actors::Shutdown).await.unwrap();
    let goodbye = f.jm.received.filter(|m| match m {
        JobManagerMessage::DisconnectTaskManager(d) => Some((d.resource_id.clone(), d.instance_id)),
        _ => None,
    });
    assert_eq!(
        goodbye,
        [(ResourceId::new("tm-1"), InstanceId::from_u128(1))]
    );
    settle().await;
    assert!(!f.tm.connected());
}

#[actix::test]
async fn status_shows_each_slots_allocation_and_the_running_attempts_until_disconnected() {
    use crate::base::ids::{AllocationId, ExecutionAttemptId, JobId};
    let f = start(Some(SESSION), |_| {}).await;
    let status = ask(&f.tm, GetTaskManagerStatus).await;
    assert_eq!(status.slots, [None, None, None]);
    assert!(status.running.is_empty());
    assert_eq!(status.instance_id(), Some(InstanceId::from_u128(1)));
    assert_eq!(status.leader_session_id, Some(SESSION));
    // Attempts 1 and 3 share allocation 1; attempt 2 has allocation 2.
    for (attempt, allocation) in [(1, 1), (2, 2), (3, 1)] {
        let answer = submit(&f.tm, SESSION, sleeping_task(attempt, allocation)).await;
        assert_eq!(answer, Ok(()));
    }
    let status = ask(&f.tm, GetTaskManagerStatus).await;
    let (a1, a2) = (AllocationId::from_u128(1), AllocationId::from_u128(2));
    assert_eq!(status.slots, [Some(a1), Some(a2), None]);
    assert_eq!(status.slots_free, 1);
    let running = |attempt, allocation_id| RunningTaskInfo {
        attempt: ExecutionAttemptId::from_u128(attempt),
        job_id: JobId::from_u128(1),
        allocation_id,
        cancel_requested: false,
        orphaned: false,
        io: Default::default(),
    };
    assert_eq!(
        status.running,
        [running(1, a1), running(2, a2), running(3, a1)]
    );
    f.tm.do_send(Disconnect {
        leader_session_id: SESSION,
        reason: RemovalReason::HeartbeatTimeout,
    });
    settle().await;
    drained(&f.tm).await;
    let status = ask(&f.tm, GetTaskManagerStatus).await;
    assert_eq!(status.slots, [None, None, None]);
    assert!(status.running.is_empty(), "cancelled, ended and forgotten");
}

/// The JobManager deploys right after it acknowledges a registration, and the acknowledgement
/// (an ask's reply) can be handled after the `SubmitTasks` behind it. A TaskManager that knew no
/// leader session yet used to drop that task as stale, and the job restarted; now the task
/// waits for the registration to settle and is fenced then.
#[actix::test]
async fn a_task_that_overtakes_the_registration_acknowledgement_waits_for_it() {
    let held = Held::default();
    let f = start(None, |s| {
        s.register_task_manager = Script::Hold(held.clone());
    })
    .await;
    assert_eq!(held.len(), 1, "one registration attempt in flight");
    let early = submit(&f.tm, SESSION, sleeping_task(7, 1));
    let stale = submit(&f.tm, STALE, sleeping_task(8, 2));
    settle().await;
    assert!(ask(&f.tm, GetTaskManagerStatus).await.running.is_empty());
    held.answer(0, ack(1, SESSION));
    assert_eq!(early.await, Ok(()));
    assert_eq!(stale.await, Err(TaskSubmissionError::StaleLeader));
    let status = ask(&f.tm, GetTaskManagerStatus).await;
    let running: Vec<_> = status.running.iter().map(|t| t.attempt).collect();
    assert_eq!(running, [ExecutionAttemptId::from_u128(7)]);
}

/// Issue 11, item 5: a task may name an all-to-all producer list an earlier task carried; a
/// TaskManager that does not have it refuses the task, taking nothing, and takes it once the
/// list came with another task.
#[actix::test]
async fn a_task_naming_a_producer_list_is_refused_until_a_task_carried_the_list() {
    use crate::base::ids::ProducerListId;
    use crate::messages::deployment::{InputGateDeploymentDescriptor, ProducerLocation, Producers};

    let f = start(Some(SESSION), |_| {}).await;
    let id = ProducerListId::from_u128(5);
    let reading = |attempt: u128, producers: Producers| {
        let mut descriptor = sleeping_task(attempt, 1);
        descriptor.inputs.push(InputGateDeploymentDescriptor {
            edge: 0,
            subpartition: 0,
            producers,
        });
        descriptor
    };
    let answer = submit(&f.tm, SESSION, reading(1, Producers::Known(id))).await;
    assert_eq!(answer, Err(TaskSubmissionError::UnknownProducers(id)));
    let status = ask(&f.tm, GetTaskManagerStatus).await;
    assert_eq!(status.slots_free, status.slots_total, "no slot taken");
    assert!(status.running.is_empty());

    let locations = std::sync::Arc::new(vec![ProducerLocation {
        partition: crate::messages::ResultPartitionId {
            producer: crate::base::ids::ExecutionAttemptId::from_u128(99),
            edge: 0,
        },
        task_manager: ActorAddress::new("local", "taskmanager/elsewhere"),
    }]);
    let listed = Producers::Listed {
        id: Some(id),
        locations,
    };
    assert_eq!(submit(&f.tm, SESSION, reading(2, listed)).await, Ok(()));
    assert_eq!(
        submit(&f.tm, SESSION, reading(3, Producers::Known(id))).await,
        Ok(()),
        "the list came with attempt 2"
    );
}

/// Issue 12 (partition tracking): a TaskManager that gave up on a silent JobManager dropped its
/// tasks and partitions, then registered again with its old session and was answered
/// `AlreadyRegistered`: the JobManager kept believing its finished results existed. Dropping
/// work makes it a new incarnation, so the JobManager replaces the old registration.
#[actix::test]
async fn a_task_manager_that_dropped_its_work_registers_as_a_new_incarnation() {
    let f = start(Some(SESSION), |_| {}).await;
    let answer = submit(&f.tm, SESSION, sleeping_task(1, 1)).await;
    assert_eq!(answer, Ok(()));
    f.jm.script(|s| s.heartbeat = Script::Silent);
    advance((TIMEOUT + INTERVAL * 2).as_millis() as u64).await;
    // It registers again once its cancelled task has ended.
    drained(&f.tm).await;
    let sent = f.registrations();
    assert_eq!(
        sent.len(),
        2,
        "registered again after the heartbeat timeout"
    );
    assert_ne!(
        sent[0].session, sent[1].session,
        "it dropped a task: a new incarnation"
    );
}

/// The other side of the rule: a TaskManager that held nothing lost nothing, and registers
/// again as the same incarnation (the JobManager answers `AlreadyRegistered` if it still has it).
#[actix::test]
async fn a_task_manager_that_held_nothing_registers_again_as_the_same_incarnation() {
    let f = start(Some(SESSION), |_| {}).await;
    f.jm.script(|s| s.heartbeat = Script::Silent);
    advance((TIMEOUT + INTERVAL * 2).as_millis() as u64).await;
    let sent = f.registrations();
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[0].session, sent[1].session);
}

/// A task stuck where it cannot see its cancellation (the `ignore-cancel` operator, 10 min on a
/// real thread).
fn stuck_task(attempt: u128) -> crate::messages::deployment::TaskDeploymentDescriptor {
    let mut descriptor = sleeping_task(attempt, attempt);
    descriptor.operator = crate::operators::builtin::IGNORE_CANCEL.into();
    descriptor
}

#[actix::test]
async fn a_task_ignoring_cancel_fails_its_task_manager_after_the_cancellation_timeout() {
    // Issue 12, item 4: a cancel of a task that never stops used to wait forever (its slot
    // held, its job CANCELLING). The watchdog interrupts it again every second and, 5 s after
    // the cancel, the TaskManager says goodbye and stops; the thread is abandoned.
    let f = start(Some(SESSION), |_| {}).await;
    let submitted = submit(&f.tm, SESSION, stuck_task(3)).await;
    assert_eq!(submitted, Ok(()));
    f.tm.do_send(CancelTasks {
        leader_session_id: SESSION,
        attempts: vec![crate::base::ids::ExecutionAttemptId::from_u128(3)],
    });
    advance(4_900).await;
    let status = ask(&f.tm, GetTaskManagerStatus).await;
    assert_eq!(status.running.len(), 1, "still stuck, still watched");
    assert!(status.running[0].cancel_requested);
    advance(200).await;
    settle().await;
    assert!(!f.tm.connected(), "the TaskManager failed itself");
    let goodbye = f.jm.received.filter(|m| match m {
        JobManagerMessage::DisconnectTaskManager(d) => Some(d.resource_id.clone()),
        _ => None,
    });
    assert_eq!(goodbye, vec![ResourceId::new("tm-1")]);
}

#[actix::test]
async fn a_task_that_stops_when_cancelled_leaves_its_task_manager_running() {
    let f = start(Some(SESSION), |_| {}).await;
    let submitted = submit(&f.tm, SESSION, sleeping_task(4, 4)).await;
    assert_eq!(submitted, Ok(()));
    f.tm.do_send(CancelTasks {
        leader_session_id: SESSION,
        attempts: vec![crate::base::ids::ExecutionAttemptId::from_u128(4)],
    });
    // The sleeping task sees its cancellation within 10 ms of real time on its own thread:
    // poll for up to 30 s of real time.
    let mut polls = 0;
    while !ask(&f.tm, GetTaskManagerStatus).await.running.is_empty() {
        polls += 1;
        assert!(polls < 6_000, "the task never stopped");
        #[allow(clippy::disallowed_methods)] // waiting on a real task thread
        std::thread::sleep(Duration::from_millis(5));
        settle().await;
    }
    advance(10_000).await;
    assert!(f.tm.connected(), "nothing to fail");
}

/// The state reports the probe JobManager received for `attempt`, in order.
/// Polls until the TaskManager runs no task, for up to 30 s of real time: tasks end on their
/// own threads in real time while virtual time stands still (asks do not advance a paused
/// clock).
async fn no_task_runs_within_30s(f: &Fixture, what: &str) {
    let mut polls = 0;
    while !ask(&f.tm, GetTaskManagerStatus).await.running.is_empty() {
        polls += 1;
        assert!(polls < 6_000, "{what}");
        #[allow(clippy::disallowed_methods)] // waiting on a real task thread
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn reports(f: &Fixture, attempt: u128) -> Vec<ExecutionState> {
    let attempt = crate::base::ids::ExecutionAttemptId::from_u128(attempt);
    f.jm.received
        .filter(|m| match m {
            JobManagerMessage::UpdateTaskExecutionStates(u) => Some(u.states.clone()),
            _ => None,
        })
        .into_iter()
        .flatten()
        .filter(|u| u.attempt == attempt)
        .map(|u| u.state)
        .collect()
}

#[actix::test]
async fn the_state_changes_of_one_turn_reach_the_job_manager_in_one_message() {
    let f = start(Some(SESSION), |_| {}).await;
    for n in 1..=3 {
        assert_eq!(submit(&f.tm, SESSION, sleeping_task(n, n)).await, Ok(()));
    }
    advance(RUNNING_REPORT_DELAY.as_millis() as u64 + 1).await;
    let batches: Vec<Vec<(u128, ExecutionState)>> = f.jm.received.filter(|m| match m {
        JobManagerMessage::UpdateTaskExecutionStates(u) => Some(
            u.states
                .iter()
                .map(|s| (s.attempt.as_u128(), s.state))
                .collect(),
        ),
        _ => None,
    });
    let running = ExecutionState::Running;
    assert_eq!(batches, [vec![(1, running), (2, running), (3, running)]]);
}

#[actix::test]
async fn a_task_that_ends_before_its_running_report_is_reported_once_with_its_final_state() {
    // Issue 14: a no-op task cost two reports (RUNNING, FINISHED), each an ask the JobManager
    // handles; RUNNING now waits RUNNING_REPORT_DELAY and is dropped if the task ended first.
    let f = start(Some(SESSION), |_| {}).await;
    let mut descriptor = sleeping_task(11, 11);
    descriptor.operator = "noop".into();
    descriptor.config = std::sync::Arc::default();
    let submitted = submit(&f.tm, SESSION, descriptor).await;
    assert_eq!(submitted, Ok(()));
    no_task_runs_within_30s(&f, "the no-op task never ended").await;
    advance(RUNNING_REPORT_DELAY.as_millis() as u64 * 4).await;
    assert_eq!(reports(&f, 11), vec![ExecutionState::Finished]);
}

#[actix::test]
async fn a_task_still_running_after_the_report_delay_is_reported_running() {
    let f = start(Some(SESSION), |_| {}).await;
    let submitted = submit(&f.tm, SESSION, sleeping_task(12, 12)).await;
    assert_eq!(submitted, Ok(()));
    assert_eq!(reports(&f, 12), vec![], "not before the delay");
    advance(RUNNING_REPORT_DELAY.as_millis() as u64 + 1).await;
    settle().await;
    assert_eq!(reports(&f, 12), vec![ExecutionState::Running]);
}

/// Issue 33, item 4: on a leader change, a task that ignores its cancellation keeps its slot
/// and the TaskManager does not register at the new leader (which would place work beside it)
/// until the watchdog fails it at `task.cancellation.timeout`.
#[actix::test]
async fn on_a_leader_change_a_stuck_task_keeps_its_slot_and_the_new_leader_never_sees_it_free() {
    let f = start(Some(SESSION), |_| {}).await;
    assert_eq!(submit(&f.tm, SESSION, stuck_task(3)).await, Ok(()));
    let new_jm = announce_new_leader(&f);
    settle().await;
    advance(4_900).await;
    let status = ask(&f.tm, GetTaskManagerStatus).await;
    assert_eq!(status.running.len(), 1, "still stuck, still watched");
    assert!(status.running[0].cancel_requested);
    assert_eq!(
        status.slots_free,
        status.slots_total - 1,
        "its slot stays taken"
    );
    assert!(
        registrations(&new_jm).is_empty(),
        "registered at the new leader beside a running task of the old one"
    );
    advance(200).await;
    settle().await;
    assert!(!f.tm.connected(), "the watchdog failed the TaskManager");
    assert!(registrations(&new_jm).is_empty());
}

/// The same with a task that stops when cancelled: the TaskManager registers at the new leader
/// once it has ended, with every slot free, and reports its end to nobody (the old leader
/// failed it over; the new one never knew it).
#[actix::test]
async fn on_a_leader_change_the_task_manager_registers_once_its_cancelled_tasks_ended() {
    let f = start(Some(SESSION), |_| {}).await;
    assert_eq!(submit(&f.tm, SESSION, sleeping_task(4, 4)).await, Ok(()));
    let new_jm = announce_new_leader(&f);
    // The sleeping task sees its cancellation within 10 ms of real time on its own thread:
    // poll for up to 30 s of real time.
    let mut polls = 0;
    while registrations(&new_jm).is_empty() {
        polls += 1;
        assert!(polls < 6_000, "never registered at the new leader");
        #[allow(clippy::disallowed_methods)] // waiting on a real task thread
        std::thread::sleep(Duration::from_millis(5));
        settle().await;
    }
    let status = ask(&f.tm, GetTaskManagerStatus).await;
    assert!(status.running.is_empty());
    assert_eq!(status.slots_free, status.slots_total);
    assert_eq!(
        f.phase().await,
        RegistrationPhase::Registered {
            instance_id: InstanceId::from_u128(20)
        }
    );
    let reported_to_new = new_jm.received.filter(|m| match m {
        JobManagerMessage::UpdateTaskExecutionStates(u) => Some(u.states.len()),
        _ => None,
    });
    assert!(reported_to_new.is_empty(), "{reported_to_new:?}");
}

/// Gives `descriptor` an output over edge `edge` of one subpartition (blocking if `retained`).
fn forward_output(
    descriptor: &mut crate::messages::deployment::TaskDeploymentDescriptor,
    edge: u32,
    retained: bool,
) -> crate::messages::ResultPartitionId {
    let partition = crate::messages::ResultPartitionId {
        producer: descriptor.attempt,
        edge,
    };
    descriptor.outputs.push(
        crate::messages::deployment::ResultPartitionDeploymentDescriptor {
            partition,
            pattern: crate::job::graph::DistributionPattern::Forward,
            subpartitions: 1,
            retained,
        },
    );
    partition
}

/// `ReleasePartitions` drops only the partitions it names, from the current leader only, and
/// a job whose last partition went is no longer reported as holding any.
#[actix::test]
async fn release_partitions_drops_the_named_partitions_of_the_current_leader_only() {
    let f = start(Some(SESSION), |_| {}).await;
    let mut descriptor = sleeping_task(21, 1);
    let first = forward_output(&mut descriptor, 0, true);
    let second = forward_output(&mut descriptor, 1, true);
    let job_id = descriptor.job_id;
    assert_eq!(submit(&f.tm, SESSION, descriptor).await, Ok(()));
    let held = |status: TaskManagerStatus| status.job_partitions;
    assert_eq!(held(ask(&f.tm, GetTaskManagerStatus).await), [(job_id, 2)]);
    let release = |session, partitions| ReleasePartitions {
        subpartitions: Vec::new(),
        leader_session_id: session,
        job_id,
        partitions,
    };
    f.tm.do_send(release(STALE, vec![first, second]));
    f.tm.do_send(release(SESSION, vec![first]));
    assert_eq!(held(ask(&f.tm, GetTaskManagerStatus).await), [(job_id, 1)]);
    f.tm.do_send(release(SESSION, vec![second, first]));
    assert!(held(ask(&f.tm, GetTaskManagerStatus).await).is_empty());
}

/// `ReleasePartitions::subpartitions` (the JobManager's backstop for a consumer that finished
/// early): a pipelined producer that waits for room in the named subpartition, which nobody
/// reads, runs on to its end, its writes there discarded.
#[actix::test]
async fn a_released_subpartition_lets_its_waiting_pipelined_producer_finish() {
    let f = start(Some(SESSION), |_| {}).await;
    let mut descriptor = sleeping_task(31, 31);
    descriptor.operator = "noop".into();
    descriptor.config = std::sync::Arc::new([("count".to_owned(), "1000000".to_owned())].into());
    let partition = forward_output(&mut descriptor, 0, false);
    let job_id = descriptor.job_id;
    assert_eq!(submit(&f.tm, SESSION, descriptor).await, Ok(()));
    // A million records never fit ten buffers: without the release it waits for ever.
    f.tm.do_send(ReleasePartitions {
        leader_session_id: SESSION,
        job_id,
        partitions: Vec::new(),
        subpartitions: vec![(partition, 0)],
    });
    no_task_runs_within_30s(&f, "the producer still waits for room").await;
    advance(RUNNING_REPORT_DELAY.as_millis() as u64 * 4).await;
    assert_eq!(reports(&f, 31), vec![ExecutionState::Finished]);
}

/// Final reports of one turn go in messages whose results add up to at most
/// `MAX_TASK_RESULT_BYTES` each, in order: two collect sinks ending together could otherwise
/// pass the transport's message limit between them.
#[test]
fn reports_are_cut_so_their_results_fit_a_message_each() {
    let state = |n: u128, result: usize| TaskExecutionState {
        job_id: JobId::from_u128(1),
        attempt: ExecutionAttemptId::from_u128(n),
        state: ExecutionState::Finished,
        error: None,
        unavailable_partition: None,
        io: None,
        result: (result > 0).then(|| bytes::Bytes::from(vec![0u8; result])),
        ended_early: false,
        unrecoverable: false,
    };
    let half = MAX_TASK_RESULT_BYTES / 2;
    let parts = by_result_bytes(vec![
        state(1, 0),
        state(2, half),
        state(3, half),
        state(4, 1),
        state(5, MAX_TASK_RESULT_BYTES),
        state(6, 0),
    ]);
    let attempts: Vec<Vec<u128>> = parts
        .iter()
        .map(|part| part.iter().map(|s| s.attempt.as_u128()).collect())
        .collect();
    assert_eq!(attempts, [vec![1, 2, 3], vec![4], vec![5, 6]]);
}
