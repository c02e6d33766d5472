//! The JobManager alone: probe TaskManagers and a probe resource manager, a paused clock.

use std::time::Duration;

use actix::prelude::*;

use super::*;
use crate::base::ids::{ExecutionAttemptId, TaskManagerSessionId};
use crate::messages::resource_manager::ResourceManagerMessage;
use crate::messages::task_manager::TaskManagerMessage;
use crate::messages::{HardwareDescription, TaskManagerLocation};
use crate::testing::*;

pub(super) const SESSION: LeaderSessionId = LeaderSessionId::from_u128(42);
pub(super) const INTERVAL: Duration = Duration::from_millis(100);
pub(super) const TIMEOUT: Duration = Duration::from_millis(500);

pub(super) struct Fixture {
    pub(super) jm: Addr<JobManager>,
    pub(super) env: NodeEnv,
    pub(super) started_at: Instant,
}

/// The settings every test's JobManager starts with.
pub(super) fn settings() -> JobManagerSettings {
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
        batch_job_recovery: crate::config::BatchJobRecoveryConfig::default(),
        scheduler: Default::default(),
        max_subtasks: 1_000_000,
        max_jobs: 10_000,
        max_workers_per_job: 64,
    }
}

pub(super) async fn start() -> Fixture {
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
    pub(super) fn task_manager(&self, name: &str) -> (TaskManagerProbeHandle, RegisterTaskManager) {
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
            fingerprint: Default::default(),
            partitions: Vec::new(),
        };
        (probe, registration)
    }

    pub(super) async fn register(&self, registration: &RegisterTaskManager) -> InstanceId {
        match ask(&self.jm, registration.clone()).await {
            RegistrationResponse::AcknowledgeRegistration(ack) => {
                assert_eq!(ack.leader_session_id, SESSION);
                ack.instance_id
            }
            other => panic!("expected an acknowledgement, got {other}"),
        }
    }

    pub(super) async fn connect_resource_manager(
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
    pub(super) async fn keep_resource_manager_alive(
        &self,
        rm: &ResourceManagerProbeHandle,
        until: Instant,
    ) {
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

    pub(super) async fn status(&self) -> JobManagerStatus {
        ask(&self.jm, GetJobManagerStatus).await
    }

    pub(super) async fn heartbeat(
        &self,
        id: &str,
        instance_id: InstanceId,
        free: u32,
    ) -> HeartbeatResponse {
        self.heartbeat_holding(id, instance_id, free, vec![]).await
    }

    /// Reports each of `attempts` of `job_id` in `state`, as its TaskManager would.
    pub(super) fn report(
        &self,
        job_id: JobId,
        attempts: &[ExecutionAttemptId],
        state: crate::job::states::ExecutionState,
    ) {
        for &attempt in attempts {
            self.jm
                .do_send(UpdateTaskExecutionStates::from(TaskExecutionState {
                    ended_early: false,
                    unrecoverable: false,
                    job_id,
                    attempt,
                    state,
                    error: None,
                    unavailable_partition: None,
                    io: None,
                    result: None,
                }));
        }
    }

    /// A heartbeat from a TaskManager that holds result partitions of `partitions_of`.
    pub(super) async fn heartbeat_holding(
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
                    spill: Default::default(),
                },
            },
        )
        .await
    }
}

pub(super) fn notified(rm: &ResourceManagerProbeHandle) -> Vec<(LeaderSessionId, ResourceId)> {
    rm.received.filter(|m| match m {
        ResourceManagerMessage::NotifyResourceStarted(n) => {
            Some((n.leader_session_id, n.resource_id.clone()))
        }
        _ => None,
    })
}

pub(super) fn removed(rm: &ResourceManagerProbeHandle) -> Vec<ReleaseResource> {
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
