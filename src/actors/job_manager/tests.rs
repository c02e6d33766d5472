//! The JobManager alone: probe TaskManagers and a probe resource manager, a paused clock.

use std::time::Duration;

use actix::prelude::*;

use super::*;
use crate::base::ids::{ExecutionAttemptId, TaskManagerSessionId};
use crate::messages::resource_manager::ResourceManagerMessage;
use crate::messages::task_manager::TaskManagerMessage;
use crate::messages::{HardwareDescription, TaskManagerLocation};
use crate::testing::*;

const SESSION: LeaderSessionId = LeaderSessionId::from_u128(42);
const INTERVAL: Duration = Duration::from_millis(100);
const TIMEOUT: Duration = Duration::from_millis(500);

struct Fixture {
    jm: Addr<JobManager>,
    env: NodeEnv,
    started_at: Instant,
}

/// The settings every test's JobManager starts with.
fn settings() -> JobManagerSettings {
    JobManagerSettings {
        cluster_id: ClusterId::new("test"),
        heartbeat: HeartbeatConfig {
            interval: INTERVAL,
            timeout: TIMEOUT,
        },
        ask_timeout: Duration::from_secs(1),
        slot_request_timeout: Duration::from_secs(300),
        slots_per_task_manager: 2,
        taskmanager_timeout: Duration::from_secs(30),
        registry: crate::operators::OperatorRegistry::with_builtins(),
        jobstore: crate::config::JobStoreConfig::default(),
        scheduler: Default::default(),
    }
}

async fn start() -> Fixture {
    tokio::time::pause();
    let env = env("jobmanager-node", 3);
    let jm = JobManager::new(settings(), SESSION, env.clone()).start();
    let started_at = Instant::now();
    settle().await;
    Fixture {
        jm,
        env,
        started_at,
    }
}

impl Fixture {
    fn task_manager(&self, name: &str) -> (TaskManagerProbeHandle, RegisterTaskManager) {
        let resource_id = ResourceId::new(name);
        let probe = TaskManagerProbeHandle::start(&self.env, &resource_id);
        let registration = RegisterTaskManager {
            cluster_id: ClusterId::new("test"),
            resource_id: resource_id.clone(),
            location: TaskManagerLocation {
                resource_id,
                address: probe.address.clone(),
                hostname: "host-a".into(),
            },
            hardware: HardwareDescription {
                cpu_cores: 2,
                physical_memory_bytes: 1 << 30,
            },
            number_of_slots: 2,
            session: TaskManagerSessionId::from_u128(1),
        };
        (probe, registration)
    }

    async fn register(&self, registration: &RegisterTaskManager) -> InstanceId {
        match ask(&self.jm, registration.clone()).await {
            RegistrationResponse::AcknowledgeRegistration(ack) => {
                assert_eq!(ack.leader_session_id, SESSION);
                ack.instance_id
            }
            other => panic!("expected an acknowledgement, got {other}"),
        }
    }

    async fn connect_resource_manager(
        &self,
    ) -> (
        ResourceManagerProbeHandle,
        RegisterResourceManagerSuccessful,
    ) {
        let rm = ResourceManagerProbeHandle::start(&self.env);
        let answer = ask(
            &self.jm,
            RegisterResourceManager {
                leader_session_id: SESSION,
                resource_manager: rm.address.clone(),
                designated_pool_size: 4,
                max_pool_size: 10,
            },
        )
        .await;
        (rm, answer)
    }

    /// Lets time pass until `until`, heartbeating as the resource manager every interval.
    async fn keep_resource_manager_alive(&self, rm: &ResourceManagerProbeHandle, until: Instant) {
        while Instant::now() < until {
            let answer = ask(
                &self.jm,
                ResourceManagerHeartbeat {
                    resource_manager: rm.address.clone(),
                    designated_pool_size: 4,
                    max_pool_size: 10,
                },
            )
            .await;
            assert!(matches!(
                answer,
                ResourceManagerHeartbeatResponse::Acknowledged { .. }
            ));
            tokio::time::sleep_until(until.min(Instant::now() + INTERVAL)).await;
        }
    }

    async fn status(&self) -> JobManagerStatus {
        ask(&self.jm, GetJobManagerStatus).await
    }

    async fn heartbeat(&self, id: &str, instance_id: InstanceId, free: u32) -> HeartbeatResponse {
        self.heartbeat_holding(id, instance_id, free, vec![]).await
    }

    /// Reports each of `attempts` of `job_id` in `state`, as its TaskManager would.
    fn report(
        &self,
        job_id: JobId,
        attempts: &[ExecutionAttemptId],
        state: crate::job::states::ExecutionState,
    ) {
        for &attempt in attempts {
            self.jm
                .do_send(UpdateTaskExecutionStates::from(TaskExecutionState {
                    job_id,
                    attempt,
                    state,
                    error: None,
                    unavailable_partition: None,
                    io: None,
                }));
        }
    }

    /// A heartbeat from a TaskManager that holds result partitions of `partitions_of`.
    async fn heartbeat_holding(
        &self,
        id: &str,
        instance_id: InstanceId,
        free: u32,
        partitions_of: Vec<JobId>,
    ) -> HeartbeatResponse {
        ask(
            &self.jm,
            Heartbeat {
                resource_id: ResourceId::new(id),
                instance_id,
                report: HeartbeatReport {
                    slots_total: 2,
                    slots_free: free,
                    running: vec![],
                    io: vec![],
                    partitions_of,
                },
            },
        )
        .await
    }
}

fn notified(rm: &ResourceManagerProbeHandle) -> Vec<(LeaderSessionId, ResourceId)> {
    rm.received.filter(|m| match m {
        ResourceManagerMessage::NotifyResourceStarted(n) => {
            Some((n.leader_session_id, n.resource_id.clone()))
        }
        _ => None,
    })
}

fn removed(rm: &ResourceManagerProbeHandle) -> Vec<ReleaseResource> {
    rm.received.filter(|m| match m {
        ResourceManagerMessage::ReleaseResource(r) => Some(r.clone()),
        _ => None,
    })
}

#[actix::test]
async fn register_task_manager_acknowledges_and_tells_the_resource_manager() {
    let f = start().await;
    let (rm, _) = f.connect_resource_manager().await;
    let (_tm, registration) = f.task_manager("tm-1");
    let instance_id = f.register(&registration).await;
    settle().await;
    assert_eq!(notified(&rm), [(SESSION, ResourceId::new("tm-1"))]);
    let status = f.status().await;
    assert_eq!(status.task_managers.len(), 1);
    let info = &status.task_managers[0];
    assert_eq!(info.instance_id, instance_id);
    assert_eq!((info.slots_total, info.slots_free), (2, 2));
    assert_eq!(info.location.hostname, "host-a");
    assert_eq!((status.total_slots(), status.free_slots()), (2, 2));
}

#[actix::test]
async fn registration_does_not_wait_for_the_resource_manager() {
    let f = start().await;
    let (rm, _) = f.connect_resource_manager().await;
    rm.script(|s| s.notify_resource_started = Script::Silent);
    let (_tm, registration) = f.task_manager("tm-1");
    // Answered at once although the resource manager never acknowledges.
    f.register(&registration).await;
    assert_eq!(f.status().await.task_managers.len(), 1);
}

#[actix::test]
async fn a_duplicate_registration_is_answered_already_registered() {
    let f = start().await;
    let (rm, _) = f.connect_resource_manager().await;
    let (_tm, registration) = f.task_manager("tm-1");
    let instance_id = f.register(&registration).await;
    let again = ask(&f.jm, registration.clone()).await;
    assert_eq!(
        again,
        RegistrationResponse::AlreadyRegistered(AlreadyRegistered {
            instance_id,
            leader_session_id: SESSION
        })
    );
    settle().await;
    assert_eq!(f.status().await.task_managers.len(), 1);
    // Told again (idempotent there), in case the first notification was lost.
    assert_eq!(notified(&rm).len(), 2);
}

#[actix::test]
async fn a_task_manager_registering_from_a_new_address_replaces_its_old_instance() {
    let f = start().await;
    let (_old, registration) = f.task_manager("tm-1");
    let old_instance = f.register(&registration).await;
    let restarted = TaskManagerProbeHandle::start(&f.env, &ResourceId::new("tm-1-restarted"));
    let mut again = registration.clone();
    again.location.address = restarted.address.clone();
    let new_instance = f.register(&again).await;
    assert_ne!(old_instance, new_instance);
    let status = f.status().await;
    assert_eq!(status.task_managers.len(), 1);
    assert_eq!(status.task_managers[0].instance_id, new_instance);
    // The old instance's heartbeats are no longer accepted.
    assert_eq!(
        f.heartbeat("tm-1", old_instance, 2).await,
        HeartbeatResponse::UnknownTaskManager
    );
}

/// Found by the simulation (seed 1043 of the first sweep): a TaskManager restarted on the same
/// machine comes back with the same resource id and address. Taken for a retry of the old
/// registration, it kept the dead run's tasks RUNNING at the JobManager forever.
#[actix::test]
async fn a_restarted_task_manager_with_a_new_session_replaces_its_old_instance() {
    let f = start().await;
    let (_tm, registration) = f.task_manager("tm-1");
    let old_instance = f.register(&registration).await;
    // A retry of the same run is the same registration.
    assert!(matches!(
        ask(&f.jm, registration.clone()).await,
        RegistrationResponse::AlreadyRegistered(already) if already.instance_id == old_instance
    ));
    let mut restarted = registration.clone();
    restarted.session = TaskManagerSessionId::from_u128(2);
    let new_instance = f.register(&restarted).await;
    assert_ne!(old_instance, new_instance);
    let status = f.status().await;
    assert_eq!(status.task_managers.len(), 1);
    assert_eq!(status.task_managers[0].instance_id, new_instance);
    assert_eq!(
        f.heartbeat("tm-1", old_instance, 2).await,
        HeartbeatResponse::UnknownTaskManager
    );
}

#[actix::test]
async fn bad_registrations_are_refused_with_the_reason() {
    let f = start().await;
    let (_tm, registration) = f.task_manager("tm-1");

    let mut no_slots = registration.clone();
    no_slots.number_of_slots = 0;
    assert_eq!(
        ask(&f.jm, no_slots).await,
        RegistrationResponse::RefuseRegistration(RefuseRegistration {
            reason: RefusalReason::NoSlots
        })
    );

    let mut other_cluster = registration.clone();
    other_cluster.cluster_id = ClusterId::new("prod");
    assert_eq!(
        ask(&f.jm, other_cluster).await,
        RegistrationResponse::RefuseRegistration(RefuseRegistration {
            reason: RefusalReason::WrongCluster {
                expected: ClusterId::new("test"),
                offered: ClusterId::new("prod")
            }
        })
    );

    let mut unreachable = registration.clone();
    unreachable.location.address = f.env.address_of("taskmanager/nobody");
    assert!(matches!(
        ask(&f.jm, unreachable).await,
        RegistrationResponse::RefuseRegistration(RefuseRegistration {
            reason: RefusalReason::Unreachable { .. }
        })
    ));
    assert!(f.status().await.task_managers.is_empty());
}

#[actix::test]
async fn register_resource_manager_lists_task_managers_registered_before_it() {
    let f = start().await;
    let (_a, first) = f.task_manager("tm-a");
    let (_b, second) = f.task_manager("tm-b");
    f.register(&first).await;
    f.register(&second).await;
    let (rm, answer) = f.connect_resource_manager().await;
    assert_eq!(answer.leader_session_id, SESSION);
    assert_eq!(answer.job_manager, f.env.address_of(NAME));
    assert_eq!(
        answer.registered,
        [ResourceId::new("tm-a"), ResourceId::new("tm-b")]
    );
    settle().await;
    assert!(
        notified(&rm).is_empty(),
        "reconciliation, not notifications"
    );
    assert!(f.status().await.resource_manager_connected);
}

#[actix::test]
async fn resource_removed_unregisters_the_task_manager() {
    let f = start().await;
    let (_tm, registration) = f.task_manager("tm-1");
    let instance_id = f.register(&registration).await;
    f.jm.do_send(ResourceRemoved {
        leader_session_id: SESSION,
        resource_id: ResourceId::new("tm-1"),
        reason: RemovalReason::Terminated,
    });
    settle().await;
    assert!(f.status().await.task_managers.is_empty());
    assert_eq!(
        f.heartbeat("tm-1", instance_id, 2).await,
        HeartbeatResponse::UnknownTaskManager
    );
    // Unknown ids are ignored.
    f.jm.do_send(ResourceRemoved {
        leader_session_id: SESSION,
        resource_id: ResourceId::new("ghost"),
        reason: RemovalReason::Terminated,
    });
    settle().await;
    assert!(f.jm.connected());
}

#[actix::test]
async fn heartbeats_keep_a_task_manager_registered_and_report_its_slots() {
    let f = start().await;
    let (rm, _) = f.connect_resource_manager().await;
    let (tm, registration) = f.task_manager("tm-1");
    let instance_id = f.register(&registration).await;
    for _ in 0..20 {
        advance(INTERVAL.as_millis() as u64).await;
        assert_eq!(
            f.heartbeat("tm-1", instance_id, 1).await,
            HeartbeatResponse::Acknowledged
        );
    }
    let status = f.status().await;
    assert_eq!(
        status.task_managers.len(),
        1,
        "2 s of heartbeats, never timed out"
    );
    // Free slots are the scheduler's view (nothing placed), whatever the TaskManager reports.
    assert_eq!(status.free_slots(), 2);
    assert!(removed(&rm).is_empty());
    assert!(tm.received.all().is_empty());
    assert_eq!(
        f.heartbeat("tm-1", InstanceId::from_u128(999), 2).await,
        HeartbeatResponse::UnknownTaskManager,
        "a heartbeat for another registration"
    );
}

#[actix::test]
async fn a_silent_task_manager_is_unregistered_disconnected_and_reported_after_the_timeout() {
    let f = start().await;
    let (rm, _) = f.connect_resource_manager().await;
    let (tm, registration) = f.task_manager("tm-1");
    f.register(&registration).await;
    let registered_at = Instant::now();
    // Silent for exactly the timeout: still registered (the sweep runs every interval).
    f.keep_resource_manager_alive(&rm, registered_at + TIMEOUT)
        .await;
    assert_eq!(f.status().await.task_managers.len(), 1);
    // Detected at the first sweep after the timeout.
    f.keep_resource_manager_alive(
        &rm,
        registered_at + TIMEOUT + INTERVAL + Duration::from_millis(1),
    )
    .await;
    let status = f.status().await;
    assert!(status.task_managers.is_empty());
    assert_eq!(status.heartbeat_timeouts, 1);
    assert_eq!(
        removed(&rm),
        [ReleaseResource {
            leader_session_id: SESSION,
            resource_id: ResourceId::new("tm-1"),
            reason: RemovalReason::HeartbeatTimeout
        }]
    );
    // While silent it was asked for its status (it never answered, which proves nothing), then
    // told it is disconnected.
    let received = tm.received.all();
    let (probes, others): (Vec<_>, Vec<_>) = received
        .into_iter()
        .partition(|m| matches!(m, TaskManagerMessage::GetTaskManagerStatus(_)));
    assert!(!probes.is_empty());
    assert_eq!(
        others,
        [TaskManagerMessage::Disconnect(Disconnect {
            leader_session_id: SESSION,
            reason: RemovalReason::HeartbeatTimeout
        })]
    );
    // Reported once only.
    advance(2_000).await;
    assert_eq!(removed(&rm).len(), 1);
    let _ = f.started_at;
}

#[actix::test]
async fn a_silent_task_manager_that_cannot_be_reached_is_lost_before_the_timeout() {
    let f = start().await;
    let (rm, _) = f.connect_resource_manager().await;
    let (tm, registration) = f.task_manager("tm-1");
    f.register(&registration).await;
    let registered_at = Instant::now();
    tm.stop().await;
    // Not yet overdue: nobody asks.
    f.keep_resource_manager_alive(&rm, registered_at + INTERVAL)
        .await;
    assert_eq!(f.status().await.task_managers.len(), 1);
    // Overdue at the next sweep, asked, undeliverable: lost within two intervals.
    f.keep_resource_manager_alive(&rm, registered_at + INTERVAL * 2 + Duration::from_millis(1))
        .await;
    let status = f.status().await;
    assert!(status.task_managers.is_empty(), "{status:#?}");
    assert_eq!(status.heartbeat_timeouts, 0);
    assert_eq!(
        removed(&rm),
        [ReleaseResource {
            leader_session_id: SESSION,
            resource_id: ResourceId::new("tm-1"),
            reason: RemovalReason::Unreachable
        }]
    );
    assert!(
        INTERVAL * 2 < TIMEOUT,
        "the test needs the timeout to be later"
    );
}

#[actix::test]
async fn release_idle_task_managers_picks_only_idle_ones_newest_first() {
    let f = start().await;
    let mut instances = Vec::new();
    let mut probes = Vec::new();
    for name in ["tm-1", "tm-2", "tm-3", "tm-4"] {
        let (probe, registration) = f.task_manager(name);
        instances.push(f.register(&registration).await);
        probes.push(probe);
    }
    // tm-4 (newest) is busy.
    f.heartbeat("tm-4", instances[3], 1).await;
    let answer = ask(
        &f.jm,
        ReleaseIdleTaskManagers {
            count: 2,
            pending: Vec::new(),
        },
    )
    .await;
    assert_eq!(answer.leader_session_id, SESSION);
    assert_eq!(
        answer.released,
        [ResourceId::new("tm-3"), ResourceId::new("tm-2")]
    );
    let remaining: Vec<String> = f
        .status()
        .await
        .task_managers
        .iter()
        .map(|tm| tm.resource_id.to_string())
        .collect();
    assert_eq!(remaining, ["tm-1", "tm-4"]);
    // Asking for more than are idle releases what is idle, never the busy one.
    let answer = ask(
        &f.jm,
        ReleaseIdleTaskManagers {
            count: 5,
            pending: Vec::new(),
        },
    )
    .await;
    assert_eq!(answer.released, [ResourceId::new("tm-1")]);
    assert_eq!(f.status().await.task_managers.len(), 1);
    // Released TaskManagers are not told to re-register: the driver stops them.
    assert!(probes.iter().all(|p| p.received.all().is_empty()));
}

#[actix::test]
async fn registrations_with_inconsistent_ids_or_too_many_slots_are_refused() {
    let f = start().await;
    let (_tm, registration) = f.task_manager("tm-1");
    let mut inconsistent = registration.clone();
    inconsistent.location.resource_id = ResourceId::new("tm-2");
    assert_eq!(
        ask(&f.jm, inconsistent).await,
        RegistrationResponse::RefuseRegistration(RefuseRegistration {
            reason: RefusalReason::InconsistentResourceId {
                resource_id: ResourceId::new("tm-1"),
                location: ResourceId::new("tm-2")
            }
        })
    );
    let mut greedy = registration.clone();
    greedy.number_of_slots = u32::MAX;
    assert_eq!(
        ask(&f.jm, greedy).await,
        RegistrationResponse::RefuseRegistration(RefuseRegistration {
            reason: RefusalReason::TooManySlots {
                offered: u32::MAX,
                max: MAX_SLOTS_PER_TASK_MANAGER
            }
        })
    );
    assert!(f.status().await.task_managers.is_empty());
}

#[actix::test]
async fn resource_manager_heartbeats_list_the_registered_task_managers() {
    let f = start().await;
    let (rm, _) = f.connect_resource_manager().await;
    let (_tm, registration) = f.task_manager("tm-1");
    f.register(&registration).await;
    let answer = ask(
        &f.jm,
        ResourceManagerHeartbeat {
            resource_manager: rm.address.clone(),
            designated_pool_size: 4,
            max_pool_size: 10,
        },
    )
    .await;
    assert_eq!(
        answer,
        ResourceManagerHeartbeatResponse::Acknowledged {
            leader_session_id: SESSION,
            registered: vec![ResourceId::new("tm-1")],
            required_workers: 0,
        }
    );
    let stranger = ask(
        &f.jm,
        ResourceManagerHeartbeat {
            resource_manager: f.env.address_of("some-other-rm"),
            designated_pool_size: 4,
            max_pool_size: 10,
        },
    )
    .await;
    assert_eq!(
        stranger,
        ResourceManagerHeartbeatResponse::UnknownResourceManager
    );
}

#[actix::test]
async fn a_silent_resource_manager_is_forgotten_after_the_heartbeat_timeout() {
    let f = start().await;
    let (rm, _) = f.connect_resource_manager().await;
    let connected_at = Instant::now();
    f.keep_resource_manager_alive(&rm, connected_at + TIMEOUT * 2)
        .await;
    assert!(f.status().await.resource_manager_connected, "kept alive");
    advance((TIMEOUT + INTERVAL).as_millis() as u64 + 1).await;
    assert!(!f.status().await.resource_manager_connected);
    let answer = ask(
        &f.jm,
        ResourceManagerHeartbeat {
            resource_manager: rm.address.clone(),
            designated_pool_size: 4,
            max_pool_size: 10,
        },
    )
    .await;
    assert_eq!(
        answer,
        ResourceManagerHeartbeatResponse::UnknownResourceManager
    );
    // TaskManagers still register; the resource manager hears of them when it is back.
    let (_tm, registration) = f.task_manager("tm-1");
    f.register(&registration).await;
    settle().await;
    assert!(notified(&rm).is_empty());
    let (_, answer) = f.connect_resource_manager().await;
    assert_eq!(answer.registered, [ResourceId::new("tm-1")]);
}

#[actix::test]
async fn a_task_manager_that_leaves_is_unregistered_at_once_and_reported() {
    let f = start().await;
    let (rm, _) = f.connect_resource_manager().await;
    let (_tm, registration) = f.task_manager("tm-1");
    let instance_id = f.register(&registration).await;
    // A goodbye from an earlier registration changes nothing.
    ask(
        &f.jm,
        DisconnectTaskManager {
            resource_id: ResourceId::new("tm-1"),
            instance_id: InstanceId::from_u128(12345),
        },
    )
    .await;
    assert_eq!(f.status().await.task_managers.len(), 1);
    ask(
        &f.jm,
        DisconnectTaskManager {
            resource_id: ResourceId::new("tm-1"),
            instance_id,
        },
    )
    .await;
    assert!(f.status().await.task_managers.is_empty());
    settle().await;
    assert_eq!(
        removed(&rm),
        [ReleaseResource {
            leader_session_id: SESSION,
            resource_id: ResourceId::new("tm-1"),
            reason: RemovalReason::Left
        }]
    );
}

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
        network: crate::exchange::NetworkSettings::default(),
        cancellation: crate::config::CancellationConfig::default(),
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
