//! The resource manager alone: a probe JobManager, a scripted driver, a paused clock.

use std::time::Duration;

use actix::prelude::*;

use super::*;
use crate::config::BackoffConfig;
use crate::messages::NewLeaderAvailable;
use crate::messages::job_manager::{JobManagerMessage, ResourceManagerHeartbeatResponse};
use crate::testing::*;

pub(super) const SESSION: LeaderSessionId = LeaderSessionId::from_u128(77);
pub(super) const STALE: LeaderSessionId = LeaderSessionId::from_u128(66);

pub(super) fn config(pool_size: u32) -> ResourceManagerConfig {
    let mut config = ResourceManagerConfig {
        pool_size,
        max_pool_size: 10,
        // Out of the way unless a test is about the timer.
        check_interval: Duration::from_secs(3600),
        ..ResourceManagerConfig::default()
    };
    config.taskmanager_registration.timeout = Duration::from_secs(60);
    config.start_worker.initial_backoff = Duration::from_millis(200);
    config.start_worker.max_backoff = Duration::from_millis(1_600);
    config.registration = BackoffConfig {
        initial_backoff: Duration::from_millis(100),
        max_backoff: Duration::from_millis(800),
    };
    config
}

pub(super) fn settings(pool: ResourceManagerConfig) -> ResourceManagerSettings {
    ResourceManagerSettings {
        pool,
        heartbeat: HeartbeatConfig::default(),
        ask_timeout: Duration::from_secs(10),
    }
}

pub(super) struct Fixture {
    pub(super) rm: Addr<FlinkResourceManager>,
    pub(super) jm: JobManagerProbeHandle,
    pub(super) driver: DriverHandle,
    pub(super) env: NodeEnv,
    pub(super) started_at: actix::clock::Instant,
}

impl Fixture {
    /// Sets the designated pool size, which must be accepted.
    pub(super) async fn set_pool_size(&self, size: u32) {
        let answer = ask(&self.rm, SetWorkerPoolSize { size }).await;
        assert_eq!(
            answer,
            Ok(Acknowledge),
            "SetWorkerPoolSize {{ size: {size} }}"
        );
    }

    /// The JobManager probe answers `ReleaseIdleTaskManagers` with `released`, from `session`.
    pub(super) fn answer_idle_release(&self, session: LeaderSessionId, released: Vec<ResourceId>) {
        self.jm.script(|s| {
            s.release_idle_task_managers = Script::Answer(IdleTaskManagersReleased {
                leader_session_id: session,
                released,
            })
        });
    }

    pub(super) async fn status(&self) -> ResourceManagerStatus {
        ask(&self.rm, GetResourceManagerStatus).await
    }

    pub(super) async fn counts(&self) -> (u32, u32, u32) {
        let status = self.status().await;
        (
            status.started.len() as u32,
            status.pending_requests,
            status.pending_registration,
        )
    }

    /// Plays driver and JobManager for `id`: started, then registered.
    pub(super) async fn start_and_register(&self, id: &ResourceId) {
        self.rm.do_send(WorkerStarted {
            resource_id: id.clone(),
        });
        ask(
            &self.rm,
            NotifyResourceStarted {
                leader_session_id: SESSION,
                resource_id: id.clone(),
            },
        )
        .await;
    }

    /// Starts a probe JobManager at `jobmanager-2` leading `session` that answers the RM's
    /// registration with `registered` (and as `script` says), and announces it as leader.
    pub(super) fn new_leader(
        &self,
        session: LeaderSessionId,
        registered: Vec<ResourceId>,
        script: impl FnOnce(&mut JobManagerScripts),
    ) -> JobManagerProbeHandle {
        let jm = JobManagerProbeHandle::start(&self.env, "jobmanager-2", session);
        jm.script(|s| {
            s.register_resource_manager = Script::Answer(RegisterResourceManagerSuccessful {
                leader_session_id: session,
                job_manager: jm.address.clone(),
                registered,
                required_workers: 0,
            });
            script(s);
        });
        self.rm.do_send(NewLeaderAvailable {
            address: jm.address.clone(),
            leader_session_id: session,
        });
        jm
    }

    /// Brings every requested worker to started.
    pub(super) async fn register_all_requested(&self) {
        for id in self.driver.requested() {
            self.start_and_register(&id).await;
        }
    }
}

pub(super) fn removed(jm: &JobManagerProbeHandle) -> Vec<ResourceRemoved> {
    jm.received.filter(|m| match m {
        JobManagerMessage::ResourceRemoved(r) => Some(r.clone()),
        _ => None,
    })
}

pub(super) fn registrations_at(jm: &JobManagerProbeHandle) -> usize {
    jm.received
        .filter(|m| matches!(m, JobManagerMessage::RegisterResourceManager(_)).then_some(()))
        .len()
}

/// A resource manager with a scripted driver (`managed`: can start workers) told of a probe
/// JobManager leader; by default it registers at once.
pub(super) async fn start(config: ResourceManagerConfig, managed: bool) -> Fixture {
    start_leased(config, managed, LeadershipLease::unbounded()).await
}

/// [`start`], with the resource manager holding `lease`.
pub(super) async fn start_leased(
    config: ResourceManagerConfig,
    managed: bool,
    lease: LeadershipLease,
) -> Fixture {
    start_with(config, managed, lease, |_| {}).await
}

/// [`start_leased`], with the driver set up by `configure` (`recovers`, `queues`).
pub(super) async fn start_with(
    config: ResourceManagerConfig,
    managed: bool,
    lease: LeadershipLease,
    configure: impl FnOnce(&mut ScriptedDriver),
) -> Fixture {
    tokio::time::pause();
    let env = env("jobmanager-node", 1);
    let jm = JobManagerProbeHandle::start(&env, "jobmanager", SESSION);
    let (mut driver, handle) = ScriptedDriver::new(managed);
    configure(&mut driver);
    let rm = FlinkResourceManager::new(settings(config), Box::new(driver), env.clone())
        .with_leadership_lease(lease)
        .start();
    let started_at = actix::clock::Instant::now();
    rm.do_send(NewLeaderAvailable {
        address: jm.address.clone(),
        leader_session_id: SESSION,
    });
    settle().await;
    Fixture {
        rm,
        jm,
        driver: handle,
        env,
        started_at,
    }
}

#[actix::test]
async fn check_and_allocate_containers_asks_the_driver_for_the_missing_workers() {
    let f = start(config(3), true).await;
    let requested = f.driver.requested();
    assert_eq!(requested.len(), 3);
    assert_eq!(f.counts().await, (0, 3, 0));
    // Checking again asks for nothing more: pending requests count.
    f.rm.do_send(CheckAndAllocateContainers);
    settle().await;
    assert_eq!(f.driver.requested().len(), 3);
    // Each request names the leader the worker must register at.
    let requests = f.driver.calls.filter(|c| match c {
        DriverCall::Request(r) => Some(r.clone()),
        _ => None,
    });
    let request = &requests[0];
    assert_eq!(request.job_manager, f.jm.address);
    assert_eq!(request.leader_session_id, Some(SESSION));
}

#[actix::test]
async fn the_pool_is_checked_on_its_timer() {
    let mut config = config(2);
    config.check_interval = Duration::from_millis(500);
    let f = start(config, true).await;
    f.register_all_requested().await;
    // Shrink while the JobManager says every worker is busy: only the timer asks again.
    f.set_pool_size(1).await;
    settle().await;
    let asks = || {
        f.jm.received
            .filter(|m| matches!(m, JobManagerMessage::ReleaseIdleTaskManagers(_)).then_some(()))
            .len()
    };
    assert_eq!(asks(), 1);
    let at = |ms| tokio::time::sleep_until(f.started_at + Duration::from_millis(ms));
    at(499).await;
    assert_eq!(asks(), 1);
    at(501).await;
    assert_eq!(asks(), 2);
    at(1_501).await;
    assert_eq!(asks(), 4);
}

#[actix::test]
async fn set_worker_pool_size_grows_the_pool_and_refuses_absurd_sizes() {
    let f = start(config(1), true).await;
    assert_eq!(f.driver.requested().len(), 1);
    assert_eq!(
        ask(&f.rm, SetWorkerPoolSize { size: 4 }).await,
        Ok(Acknowledge)
    );
    settle().await;
    assert_eq!(f.driver.requested().len(), 4);
    assert_eq!(f.status().await.designated_pool_size, 4);
    assert_eq!(
        ask(&f.rm, SetWorkerPoolSize { size: 11 }).await,
        Err(SetPoolSizeError::AboveMaximum {
            requested: 11,
            max: 10
        })
    );
    settle().await;
    assert_eq!(f.status().await.designated_pool_size, 4, "nothing changed");
    assert_eq!(f.driver.requested().len(), 4);
}

#[actix::test]
async fn worker_started_moves_a_request_to_pending_registration() {
    let f = start(config(2), true).await;
    let requested = f.driver.requested();
    f.rm.do_send(WorkerStarted {
        resource_id: requested[0].clone(),
    });
    settle().await;
    assert_eq!(f.counts().await, (0, 1, 1));
    // A duplicate start report changes nothing.
    f.rm.do_send(WorkerStarted {
        resource_id: requested[0].clone(),
    });
    settle().await;
    assert_eq!(f.counts().await, (0, 1, 1));
    assert_eq!(f.driver.requested().len(), 2);
}

#[actix::test]
async fn notify_resource_started_counts_the_worker_and_duplicates_are_harmless() {
    let f = start(config(2), true).await;
    let id = f.driver.requested()[0].clone();
    f.start_and_register(&id).await;
    assert_eq!(f.counts().await, (1, 1, 0));
    for _ in 0..3 {
        let answer = ask(
            &f.rm,
            NotifyResourceStarted {
                leader_session_id: SESSION,
                resource_id: id.clone(),
            },
        )
        .await;
        assert_eq!(answer, Acknowledge);
    }
    assert_eq!(f.counts().await, (1, 1, 0));
    assert_eq!(f.driver.requested().len(), 2);
}

#[actix::test]
async fn a_task_manager_that_registers_before_its_start_report_counts_once() {
    let f = start(config(1), true).await;
    let id = f.driver.requested()[0].clone();
    ask(
        &f.rm,
        NotifyResourceStarted {
            leader_session_id: SESSION,
            resource_id: id.clone(),
        },
    )
    .await;
    f.rm.do_send(WorkerStarted {
        resource_id: id.clone(),
    });
    settle().await;
    assert_eq!(f.counts().await, (1, 0, 0));
    // And its registration timeout never fires (the JobManager keeps listing it).
    f.jm.script(|s| {
        s.resource_manager_heartbeat =
            Script::Answer(ResourceManagerHeartbeatResponse::Acknowledged {
                leader_session_id: SESSION,
                registered: vec![id.clone()],
                required_workers: 0,
            })
    });
    advance(120_000).await;
    assert_eq!(f.counts().await, (1, 0, 0));
    assert!(f.driver.released().is_empty());
}

#[actix::test]
async fn notify_resource_started_for_a_worker_a_managed_driver_did_not_start_is_not_counted() {
    let f = start(config(1), true).await;
    let answer = ask(
        &f.rm,
        NotifyResourceStarted {
            leader_session_id: SESSION,
            resource_id: ResourceId::new("stranger"),
        },
    )
    .await;
    assert_eq!(answer, Acknowledge);
    assert_eq!(f.counts().await, (0, 1, 0));
}

#[actix::test]
async fn notify_resource_started_for_a_worker_started_by_hand_counts_in_standalone_mode() {
    let f = start(config(1), false).await;
    ask(
        &f.rm,
        NotifyResourceStarted {
            leader_session_id: SESSION,
            resource_id: ResourceId::new("by-hand"),
        },
    )
    .await;
    let status = f.status().await;
    assert_eq!(status.started, [ResourceId::new("by-hand")]);
    assert_eq!(status.pending_requests, 0);
}

#[actix::test]
async fn a_driver_that_cannot_start_workers_waits_without_failing() {
    let f = start(config(2), false).await;
    f.rm.do_send(CheckAndAllocateContainers);
    advance(5_000).await;
    let status = f.status().await;
    assert_eq!((status.pending_requests, status.start_failures), (0, 0));
}

#[actix::test]
async fn remove_resource_releases_the_worker_and_starts_a_replacement() {
    let f = start(config(2), true).await;
    f.register_all_requested().await;
    let victim = f.driver.requested()[0].clone();
    f.rm.do_send(ReleaseResource {
        leader_session_id: SESSION,
        resource_id: victim.clone(),
        reason: RemovalReason::HeartbeatTimeout,
    });
    settle().await;
    assert_eq!(f.driver.released(), [victim]);
    assert_eq!(f.driver.requested().len(), 3, "a replacement is requested");
    assert_eq!(f.counts().await, (1, 1, 0));
}

#[actix::test]
async fn repeated_start_failures_back_off_exponentially_and_are_counted() {
    let f = start(config(1), true).await;
    let mut pauses = Vec::new();
    for _ in 0..5 {
        let last = f.driver.requested().last().unwrap().clone();
        let failed_at = actix::clock::Instant::now();
        f.rm.do_send(WorkerFailed {
            resource_id: last,
            reason: "exit status 1".into(),
        });
        let before = f.driver.requested().len();
        while f.driver.requested().len() == before {
            settle().await;
        }
        pauses.push(failed_at.elapsed().as_millis());
    }
    // Pauses of 200, 400, 800, 1600, 1600 ms (capped) between a failure and the next try
    // (observed in 1 ms steps).
    for (pause, expected) in pauses.iter().zip([200, 400, 800, 1600, 1600]) {
        assert!((expected..=expected + 2).contains(pause), "{pauses:?}");
    }
    let status = f.status().await;
    assert_eq!(
        (status.start_failures, status.consecutive_start_failures),
        (5, 5)
    );
    // A successful start resets the backoff, not the total.
    let last = f.driver.requested().last().unwrap().clone();
    f.start_and_register(&last).await;
    let status = f.status().await;
    assert_eq!(
        (status.start_failures, status.consecutive_start_failures),
        (5, 0)
    );
}

#[actix::test]
async fn a_spawn_error_from_the_driver_is_a_start_failure_with_backoff() {
    tokio::time::pause();
    let env = env("n", 1);
    let jm = JobManagerProbeHandle::start(&env, "jobmanager", SESSION);
    let (driver, handle) = ScriptedDriver::new(true);
    handle.fail_requests(true);
    let rm = FlinkResourceManager::new(settings(config(3)), Box::new(driver), env).start();
    rm.do_send(NewLeaderAvailable {
        address: jm.address.clone(),
        leader_session_id: SESSION,
    });
    settle().await;
    assert_eq!(
        handle.requested().len(),
        1,
        "the first failure stops the round"
    );
    let failed_at = actix::clock::Instant::now() - Duration::from_millis(1);
    tokio::time::sleep_until(failed_at + Duration::from_millis(199)).await;
    assert_eq!(handle.requested().len(), 1);
    tokio::time::sleep_until(failed_at + Duration::from_millis(201)).await;
    assert_eq!(handle.requested().len(), 2);
    handle.fail_requests(false);
    advance(400).await;
    assert_eq!(
        handle.requested().len(),
        5,
        "after the pause, the whole shortfall"
    );
    let status = ask(&rm, GetResourceManagerStatus).await;
    assert_eq!((status.start_failures, status.pending_requests), (2, 3));
}

#[actix::test]
async fn a_started_worker_that_terminates_is_reported_and_replaced() {
    let f = start(config(2), true).await;
    f.register_all_requested().await;
    let victim = f.driver.requested()[1].clone();
    f.rm.do_send(WorkerTerminated {
        resource_id: victim.clone(),
        reason: "killed by signal 9".into(),
    });
    settle().await;
    let removed = f.jm.received.filter(|m| match m {
        JobManagerMessage::ResourceRemoved(r) => Some(r.clone()),
        _ => None,
    });
    assert_eq!(
        removed,
        [ResourceRemoved {
            leader_session_id: SESSION,
            resource_id: victim,
            reason: RemovalReason::Terminated
        }]
    );
    assert_eq!(f.driver.requested().len(), 3);
    assert_eq!(f.status().await.start_failures, 0);
}

#[actix::test]
async fn a_worker_dying_while_pending_registration_is_replaced_after_a_backoff() {
    let f = start(config(1), true).await;
    let id = f.driver.requested()[0].clone();
    f.rm.do_send(WorkerStarted {
        resource_id: id.clone(),
    });
    settle().await;
    f.rm.do_send(WorkerTerminated {
        resource_id: id,
        reason: "exit status 2".into(),
    });
    settle().await;
    assert_eq!(f.counts().await, (0, 0, 0));
    // The JobManager may have registered it before the RM heard; it is told either way.
    assert_eq!(removed(&f.jm).len(), 1);
    advance(200).await;
    assert_eq!(f.driver.requested().len(), 2);
    assert_eq!(f.status().await.start_failures, 1);
}

#[actix::test]
async fn a_started_worker_that_never_registers_is_released_after_the_registration_timeout() {
    let f = start(config(1), true).await;
    let id = f.driver.requested()[0].clone();
    f.rm.do_send(WorkerStarted {
        resource_id: id.clone(),
    });
    advance(59_990).await;
    assert_eq!(f.counts().await, (0, 0, 1));
    advance(20).await;
    assert_eq!(f.driver.released(), [id]);
    assert_eq!(f.status().await.start_failures, 1);
    advance(200).await;
    assert_eq!(
        f.driver.requested().len(),
        2,
        "replaced after the start backoff"
    );
}

#[actix::test]
async fn shrinking_offers_pending_workers_first_and_releases_those_the_job_manager_lets_go() {
    let f = start(config(4), true).await;
    let ids = f.driver.requested();
    f.start_and_register(&ids[0]).await;
    f.start_and_register(&ids[1]).await;
    f.rm.do_send(WorkerStarted {
        resource_id: ids[2].clone(),
    });
    f.answer_idle_release(SESSION, vec![ids[3].clone(), ids[2].clone()]);
    f.set_pool_size(2).await;
    settle().await;
    let asks = f.jm.received.filter(|m| match m {
        JobManagerMessage::ReleaseIdleTaskManagers(r) => Some(r.clone()),
        _ => None,
    });
    assert_eq!(
        asks,
        [ReleaseIdleTaskManagers {
            count: 2,
            pending: vec![ids[3].clone(), ids[2].clone()],
        }],
        "the least advanced first: the pending request, then the one registering"
    );
    let mut released = f.driver.released();
    released.sort();
    let mut expected = vec![ids[2].clone(), ids[3].clone()];
    expected.sort();
    assert_eq!(released, expected);
    assert_eq!(f.counts().await, (2, 0, 0));
    // A cancelled worker whose start report arrives late is released, not counted.
    f.rm.do_send(WorkerStarted {
        resource_id: ids[3].clone(),
    });
    settle().await;
    assert_eq!(f.counts().await, (2, 0, 0));
    assert_eq!(f.driver.released().len(), 3);
}

#[actix::test]
async fn shrinking_releases_only_the_idle_workers_the_job_manager_names() {
    let f = start(config(4), true).await;
    f.register_all_requested().await;
    let ids = f.driver.requested();
    // The JobManager finds only one of the two surplus workers idle.
    f.answer_idle_release(SESSION, vec![ids[3].clone()]);
    f.set_pool_size(2).await;
    settle().await;
    let asked = f.jm.received.filter(|m| match m {
        JobManagerMessage::ReleaseIdleTaskManagers(r) => Some(r.count),
        _ => None,
    });
    assert_eq!(asked, [2]);
    assert_eq!(f.driver.released(), [ids[3].clone()]);
    assert_eq!(f.counts().await, (3, 0, 0), "the busy one stays");
    // Next check: one surplus left; the JobManager now has none idle.
    f.answer_idle_release(SESSION, vec![]);
    f.rm.do_send(CheckAndAllocateContainers);
    settle().await;
    assert_eq!(f.driver.released().len(), 1);
    assert_eq!(f.counts().await, (3, 0, 0));
}

#[actix::test]
async fn an_idle_release_answer_from_a_stale_session_releases_nothing() {
    let f = start(config(2), true).await;
    f.register_all_requested().await;
    let ids = f.driver.requested();
    f.answer_idle_release(STALE, vec![ids[0].clone()]);
    f.set_pool_size(1).await;
    settle().await;
    assert!(f.driver.released().is_empty());
}

#[actix::test]
async fn stop_cluster_shuts_the_driver_down_and_stops() {
    let f = start(config(2), true).await;
    f.register_all_requested().await;
    assert_eq!(ask(&f.rm, StopCluster).await, Acknowledge);
    settle().await;
    assert_eq!(f.driver.calls.all().last(), Some(&DriverCall::Shutdown));
    assert!(!f.rm.connected(), "the resource manager stopped");
    assert!(
        f.env
            .resolver
            .resource_manager(&f.env.address_of(NAME))
            .is_none()
    );
}

#[actix::test]
async fn set_worker_pool_size_while_stopping_is_refused() {
    let f = start(config(1), true).await;
    let answer = f.rm.send(StopCluster);
    let resize = f.rm.send(SetWorkerPoolSize { size: 2 });
    assert_eq!(answer.await.unwrap(), Acknowledge);
    // The resize was queued behind the stop: it is refused or never handled, never applied.
    match resize.await {
        Ok(result) => assert_eq!(result, Err(SetPoolSizeError::Stopping)),
        Err(MailboxError::Closed) => {}
        Err(other) => panic!("unexpected {other}"),
    }
}

#[actix::test]
async fn unknown_resource_ids_are_ignored_without_losing_counts() {
    let f = start(config(2), true).await;
    f.register_all_requested().await;
    let ghost = ResourceId::new("ghost");
    f.rm.do_send(WorkerFailed {
        resource_id: ghost.clone(),
        reason: "?".into(),
    });
    f.rm.do_send(WorkerTerminated {
        resource_id: ghost.clone(),
        reason: "?".into(),
    });
    f.rm.do_send(ReleaseResource {
        leader_session_id: SESSION,
        resource_id: ghost,
        reason: RemovalReason::HeartbeatTimeout,
    });
    settle().await;
    assert_eq!(f.counts().await, (2, 0, 0));
    let status = f.status().await;
    assert_eq!(status.start_failures, 0);
    assert_eq!(f.driver.requested().len(), 2);
}

#[actix::test]
async fn every_release_is_reported_to_the_job_manager() {
    let f = start(config(3), true).await;
    let ids = f.driver.requested();
    f.start_and_register(&ids[0]).await;
    // Let go while pending: the JobManager may have it registered already.
    f.answer_idle_release(SESSION, vec![ids[2].clone(), ids[1].clone()]);
    f.set_pool_size(1).await;
    settle().await;
    let mut reported: Vec<_> = removed(&f.jm)
        .into_iter()
        .map(|r| (r.resource_id, r.reason))
        .collect();
    reported.sort();
    let mut expected = vec![
        (ids[1].clone(), RemovalReason::NoLongerNeeded),
        (ids[2].clone(), RemovalReason::NoLongerNeeded),
    ];
    expected.sort();
    assert_eq!(reported, expected);
}

#[actix::test]
async fn a_released_worker_that_registers_again_is_reported_again() {
    let f = start(config(1), true).await;
    let id = f.driver.requested()[0].clone();
    f.start_and_register(&id).await;
    f.rm.do_send(ReleaseResource {
        leader_session_id: SESSION,
        resource_id: id.clone(),
        reason: RemovalReason::HeartbeatTimeout,
    });
    settle().await;
    let before = removed(&f.jm).len();
    // It was only cut off, and registers again before the driver's stop reaches it.
    ask(
        &f.rm,
        NotifyResourceStarted {
            leader_session_id: SESSION,
            resource_id: id.clone(),
        },
    )
    .await;
    settle().await;
    assert_eq!(removed(&f.jm).len(), before + 1);
    assert!(!f.status().await.started.contains(&id), "not counted");
}

#[actix::test]
async fn a_request_the_driver_never_answers_times_out_and_is_replaced() {
    let f = start(config(1), true).await;
    let id = f.driver.requested()[0].clone();
    // No WorkerStarted, no WorkerFailed: a hung launch.
    tokio::time::sleep_until(f.started_at + Duration::from_secs(60) + Duration::from_millis(5))
        .await;
    assert_eq!(f.driver.released(), [id]);
    advance(200).await;
    assert_eq!(f.driver.requested().len(), 2);
    assert_eq!(f.status().await.start_failures, 1);
}

/// Issue 12: a shrink never kills a worker that was just given tasks. A pending worker may have
/// registered at the JobManager (and been given tasks) before its report reached the resource
/// manager; the JobManager does not let it go, and it counts as started once its report (or
/// the next heartbeat answer) arrives, the pool keeping its target.
#[actix::test]
async fn a_pending_worker_the_job_manager_keeps_is_not_killed_by_a_shrink() {
    let f = start(config(2), true).await;
    let ids = f.driver.requested();
    f.start_and_register(&ids[0]).await;
    f.rm.do_send(WorkerStarted {
        resource_id: ids[1].clone(),
    });
    // ids[1] registered at the JobManager and runs a task there: it is not let go.
    f.answer_idle_release(SESSION, vec![]);
    f.set_pool_size(1).await;
    settle().await;
    assert!(f.driver.released().is_empty(), "no pending worker killed");
    assert_eq!(f.status().await.releasing, 1);
    ask(
        &f.rm,
        NotifyResourceStarted {
            leader_session_id: SESSION,
            resource_id: ids[1].clone(),
        },
    )
    .await;
    settle().await;
    let status = f.status().await;
    assert_eq!((status.started.len(), status.releasing), (2, 0));
    assert!(f.driver.released().is_empty());
    assert_eq!(f.driver.requested().len(), 2, "nothing new asked for");
}

/// Issue 12 (declarative resources): the JobManager's demand grows the pool above the
/// operator's size, a resize made meanwhile stands, and when the demand falls the pool goes
/// back to the operator's size, not to the one before the jobs grew it.
#[actix::test]
async fn an_operators_resize_is_never_undone_by_the_jobs_demand() {
    let f = start(config(1), true).await;
    f.register_all_requested().await;
    f.rm.do_send(DeclareResourceRequirements {
        leader_session_id: SESSION,
        workers: 4,
    });
    settle().await;
    let status = f.status().await;
    assert_eq!(
        (
            status.designated_pool_size,
            status.demand,
            status.target_pool_size
        ),
        (1, 4, 4)
    );
    assert_eq!(f.driver.requested().len(), 4);
    f.register_all_requested().await;
    f.set_pool_size(3).await; // the operator, while the jobs hold 4
    settle().await;
    assert_eq!(f.status().await.target_pool_size, 4);
    f.answer_idle_release(SESSION, vec![f.driver.requested()[3].clone()]);
    f.rm.do_send(DeclareResourceRequirements {
        leader_session_id: SESSION,
        workers: 0,
    });
    settle().await;
    let status = f.status().await;
    assert_eq!(
        (
            status.designated_pool_size,
            status.demand,
            status.target_pool_size
        ),
        (3, 0, 3),
        "the operator's 3 stands"
    );
    assert_eq!(f.driver.released().len(), 1);
    // A stale leader's declaration changes nothing.
    f.rm.do_send(DeclareResourceRequirements {
        leader_session_id: STALE,
        workers: 9,
    });
    settle().await;
    assert_eq!(f.status().await.demand, 0);
}

#[actix::test]
async fn recovered_workers_count_as_started_and_one_that_never_registers_is_released() {
    let f = start_with(config(2), true, LeadershipLease::unbounded(), recovering).await;
    let (old1, old2) = (ResourceId::new("tm-old-1"), ResourceId::new("tm-old-2"));
    f.rm.do_send(WorkersRecovered {
        resource_ids: vec![old1.clone(), old2.clone()],
    });
    settle().await;
    // They run: they fill the pool, and the driver is asked for nothing.
    assert_eq!(f.counts().await, (2, 0, 0));
    assert!(f.driver.requested().is_empty());
    // Reported twice (a second report): counted once.
    f.rm.do_send(WorkersRecovered {
        resource_ids: vec![old1.clone()],
    });
    settle().await;
    assert_eq!(f.counts().await, (2, 0, 0));
    // The JobManager lists only the first: the other must register within the timeout.
    f.jm.script(|s| {
        s.resource_manager_heartbeat =
            Script::Answer(ResourceManagerHeartbeatResponse::Acknowledged {
                leader_session_id: SESSION,
                registered: vec![old1.clone()],
                required_workers: 0,
            })
    });
    advance(10_100).await;
    assert_eq!(f.counts().await, (1, 0, 1));
    advance(60_000).await;
    assert_eq!(
        f.driver.released(),
        [old2],
        "no orphan: it never registered"
    );
    advance(200).await;
    assert_eq!(f.driver.requested().len(), 1, "replaced after the backoff");
    assert_eq!(f.status().await.started, [old1]);
}

#[actix::test]
async fn no_worker_starts_before_the_driver_reports_what_it_recovered() {
    let f = start_with(config(2), true, LeadershipLease::unbounded(), recovering).await;
    advance(1_000).await;
    assert!(
        f.driver.requested().is_empty(),
        "a worker started before the recovery report would make the pool too large"
    );
    let old = ResourceId::new("tm-old-1");
    f.rm.do_send(WorkersRecovered {
        resource_ids: vec![old.clone()],
    });
    settle().await;
    assert_eq!(f.driver.requested().len(), 1, "only the one missing");
    assert_eq!(f.counts().await, (1, 1, 0));
}

#[actix::test]
async fn a_driver_that_never_reports_recovered_workers_delays_starts_by_the_registration_timeout() {
    let f = start_with(config(1), true, LeadershipLease::unbounded(), recovering).await;
    advance(59_000).await;
    assert!(f.driver.requested().is_empty());
    advance(1_100).await;
    assert_eq!(f.driver.requested().len(), 1);
}

fn recovering(driver: &mut ScriptedDriver) {
    driver.recovers = true;
}

#[actix::test]
async fn a_queued_request_waits_as_long_as_the_queue_and_then_must_register_in_time() {
    let f = start_with(config(1), true, LeadershipLease::unbounded(), |d| {
        d.queues = true
    })
    .await;
    let id = f.driver.requested()[0].clone();
    // Queued by Slurm for ten minutes: still pending, neither cancelled nor asked again.
    advance(600_000).await;
    assert!(f.driver.released().is_empty());
    assert_eq!(f.driver.requested().len(), 1);
    assert_eq!(f.counts().await, (0, 1, 0));
    // It runs: now it has the registration timeout to register.
    f.rm.do_send(WorkerStarted {
        resource_id: id.clone(),
    });
    advance(59_900).await;
    assert_eq!(f.counts().await, (0, 0, 1));
    advance(200).await;
    assert_eq!(f.driver.released(), [id]);
}
