//! The resource manager's connection to its leader on the same probes and paused clock as its
//! other tests: registration and its retries, heartbeats, leader changes and reconciliation,
//! the leadership lease.

use std::time::Duration;

use super::super::tests::*;
use super::super::*;
use crate::messages::NewLeaderAvailable;
use crate::messages::job_manager::{JobManagerMessage, ResourceManagerHeartbeatResponse};
use crate::messages::resource_manager::TriggerRegistrationAtJobManager;
use crate::testing::*;
use actix::prelude::*;

#[actix::test]
async fn no_worker_is_started_before_registering_at_a_job_manager() {
    tokio::time::pause();
    let env = env("n", 1);
    let jm = JobManagerProbeHandle::start(&env, "jobmanager", SESSION);
    jm.script(|s| s.register_resource_manager = Script::Silent);
    let (driver, handle) = ScriptedDriver::new(true);
    let rm = FlinkResourceManager::new(settings(config(2)), Box::new(driver), env).start();
    rm.do_send(CheckAndAllocateContainers);
    settle().await;
    assert!(handle.requested().is_empty(), "no leader known yet");
    rm.do_send(NewLeaderAvailable {
        address: jm.address.clone(),
        leader_session_id: SESSION,
    });
    advance(50).await;
    assert!(
        handle.requested().is_empty(),
        "leader known but not registered"
    );
    assert!(
        !ask(&rm, GetResourceManagerStatus)
            .await
            .connected_to_job_manager
    );
}

#[actix::test]
async fn registration_at_the_job_manager_is_retried_with_exponential_backoff() {
    tokio::time::pause();
    let env = env("n", 1);
    let jm = JobManagerProbeHandle::start(&env, "jobmanager", SESSION);
    jm.script(|s| s.register_resource_manager = Script::Silent);
    let (driver, handle) = ScriptedDriver::new(true);
    let rm = FlinkResourceManager::new(settings(config(1)), Box::new(driver), env).start();
    let start = actix::clock::Instant::now();
    rm.do_send(NewLeaderAvailable {
        address: jm.address.clone(),
        leader_session_id: SESSION,
    });
    // Each attempt times out after 100, 200, 400, 800, 800 ms and the next goes out at once.
    let mut attempts_at = Vec::new();
    let mut seen = 0;
    while attempts_at.len() < 6 {
        settle().await;
        let now = jm
            .received
            .filter(|m| matches!(m, JobManagerMessage::RegisterResourceManager(_)).then_some(()))
            .len();
        if now > seen {
            seen = now;
            attempts_at.push(start.elapsed().as_millis() / 10 * 10);
        }
    }
    assert_eq!(attempts_at, [0, 100, 300, 700, 1500, 2300]);
    // The JobManager answers at last: registered, workers start, no more attempts.
    jm.script(|s| {
        s.register_resource_manager = Script::Answer(RegisterResourceManagerSuccessful {
            leader_session_id: SESSION,
            job_manager: jm.address.clone(),
            registered: vec![],
            required_workers: 0,
        })
    });
    advance(800).await;
    assert!(
        ask(&rm, GetResourceManagerStatus)
            .await
            .connected_to_job_manager
    );
    assert_eq!(handle.requested().len(), 1);
    let attempts = seen + 1;
    advance(10_000).await;
    assert_eq!(
        jm.received
            .filter(|m| matches!(m, JobManagerMessage::RegisterResourceManager(_)).then_some(()))
            .len(),
        attempts
    );
}

#[actix::test]
async fn an_unreachable_job_manager_is_retried_after_a_pause_not_in_a_spin() {
    tokio::time::pause();
    let env = env("n", 1);
    let (driver, _handle) = ScriptedDriver::new(true);
    let rm = FlinkResourceManager::new(settings(config(1)), Box::new(driver), env.clone()).start();
    // Leader named before it exists in the directory: the RM keeps trying, with pauses.
    rm.do_send(NewLeaderAvailable {
        address: env.address_of("jobmanager"),
        leader_session_id: SESSION,
    });
    advance(250).await;
    let jm = JobManagerProbeHandle::start(&env, "jobmanager", SESSION);
    advance(1_000).await;
    assert!(
        ask(&rm, GetResourceManagerStatus)
            .await
            .connected_to_job_manager
    );
    assert!(!jm.received.all().is_empty());
}

#[actix::test]
async fn task_managers_registered_before_the_rm_connected_count_as_started() {
    tokio::time::pause();
    let env = env("n", 1);
    let jm = JobManagerProbeHandle::start(&env, "jobmanager", SESSION);
    jm.script(|s| {
        s.register_resource_manager = Script::Answer(RegisterResourceManagerSuccessful {
            leader_session_id: SESSION,
            job_manager: jm.address.clone(),
            registered: vec![ResourceId::new("early-1"), ResourceId::new("early-2")],
            required_workers: 0,
        })
    });
    let (driver, handle) = ScriptedDriver::new(true);
    let rm = FlinkResourceManager::new(settings(config(3)), Box::new(driver), env).start();
    rm.do_send(NewLeaderAvailable {
        address: jm.address.clone(),
        leader_session_id: SESSION,
    });
    settle().await;
    let status = ask(&rm, GetResourceManagerStatus).await;
    assert_eq!(status.started.len(), 2);
    assert_eq!(
        handle.requested().len(),
        1,
        "only the one missing worker is started"
    );
}

#[actix::test]
async fn messages_from_a_stale_leader_session_change_nothing() {
    let f = start(config(2), true).await;
    f.register_all_requested().await;
    let ids = f.driver.requested();
    f.rm.do_send(ReleaseResource {
        leader_session_id: STALE,
        resource_id: ids[0].clone(),
        reason: RemovalReason::HeartbeatTimeout,
    });
    f.set_pool_size(3).await;
    let third = f.driver.requested()[2].clone();
    f.rm.do_send(WorkerStarted {
        resource_id: third.clone(),
    });
    let answer = ask(
        &f.rm,
        NotifyResourceStarted {
            leader_session_id: STALE,
            resource_id: third,
        },
    )
    .await;
    assert_eq!(answer, Acknowledge, "a receipt, whatever the session");
    f.rm.do_send(RegisterResourceManagerSuccessful {
        leader_session_id: STALE,
        job_manager: f.jm.address.clone(),
        registered: vec![ResourceId::new("ghost")],
        required_workers: 0,
    });
    settle().await;
    assert!(f.driver.released().is_empty());
    assert_eq!(f.counts().await, (2, 0, 1));
}

#[actix::test]
async fn new_leader_available_registers_at_the_new_job_manager_and_reconciles() {
    let f = start(config(2), true).await;
    f.register_all_requested().await;
    let ids = f.driver.requested();
    let new_session = LeaderSessionId::from_u128(88);
    // The new leader already has one of the workers (it re-registered there).
    let new_jm = f.new_leader(new_session, vec![ids[0].clone()], |_| {});
    settle().await;
    assert_eq!(new_jm.received.all().len(), 1);
    assert!(f.status().await.connected_to_job_manager);
    // The old leader's session is now stale.
    f.rm.do_send(ReleaseResource {
        leader_session_id: SESSION,
        resource_id: ids[1].clone(),
        reason: RemovalReason::HeartbeatTimeout,
    });
    settle().await;
    assert!(f.driver.released().is_empty());
    // The new one's is honoured.
    f.rm.do_send(ReleaseResource {
        leader_session_id: new_session,
        resource_id: ids[1].clone(),
        reason: RemovalReason::HeartbeatTimeout,
    });
    settle().await;
    assert_eq!(f.driver.released(), [ids[1].clone()]);
    assert_eq!(
        f.driver.requested().len(),
        3,
        "no over-allocation, one replacement"
    );
}

#[actix::test]
async fn a_silent_job_manager_is_registered_at_again() {
    let f = start(config(1), true).await;
    assert_eq!(registrations_at(&f.jm), 1);
    f.jm.script(|s| s.resource_manager_heartbeat = Script::Silent);
    // Heartbeats every 10 s; silence over 50 s ends the connection.
    advance(61_000).await;
    assert!(registrations_at(&f.jm) >= 2, "registered again");
    assert!(f.status().await.connected_to_job_manager);
}

#[actix::test]
async fn a_job_manager_that_forgot_the_rm_is_registered_at_again() {
    let f = start(config(1), true).await;
    f.jm.script(|s| {
        s.resource_manager_heartbeat =
            Script::Answer(ResourceManagerHeartbeatResponse::UnknownResourceManager)
    });
    advance(10_001).await;
    assert_eq!(registrations_at(&f.jm), 2);
}

#[actix::test]
async fn heartbeat_answers_repair_a_lost_registration_notice() {
    let f = start(config(1), true).await;
    let id = f.driver.requested()[0].clone();
    f.rm.do_send(WorkerStarted {
        resource_id: id.clone(),
    });
    // The JobManager has it, but its NotifyResourceStarted was lost.
    f.jm.script(|s| {
        s.resource_manager_heartbeat =
            Script::Answer(ResourceManagerHeartbeatResponse::Acknowledged {
                leader_session_id: SESSION,
                registered: vec![id.clone(), ResourceId::new("stranger")],
                required_workers: 0,
            })
    });
    advance(10_001).await;
    let status = f.status().await;
    assert_eq!(
        status.started,
        [id],
        "promoted; the stranger is not adopted"
    );
    advance(120_000).await;
    assert!(
        f.driver.released().is_empty(),
        "no registration timeout fired"
    );
}

#[actix::test]
async fn workers_a_new_leader_lacks_must_register_there_or_are_replaced() {
    let f = start(config(2), true).await;
    f.register_all_requested().await;
    let ids = f.driver.requested();
    let new_session = LeaderSessionId::from_u128(99);
    let new_jm = f.new_leader(new_session, vec![ids[0].clone()], |_| {});
    settle().await;
    assert_eq!(
        f.counts().await,
        (1, 0, 1),
        "ids[1] waits to register at the new leader"
    );
    assert!(f.driver.calls.all().contains(&DriverCall::LeaderChanged(
        new_jm.address.clone(),
        new_session
    )));
    // It never does: released and replaced after the registration timeout.
    advance(60_010).await;
    assert!(f.driver.released().contains(&ids[1]));
    advance(300).await;
    assert_eq!(f.driver.requested().len(), 3);
}

#[actix::test]
async fn an_idle_release_answered_after_a_leader_change_does_not_double_release() {
    let f = start(config(3), true).await;
    f.register_all_requested().await;
    let ids = f.driver.requested();
    let held = Held::default();
    f.jm.script(|s| s.release_idle_task_managers = Script::Hold(held.clone()));
    f.set_pool_size(2).await;
    settle().await;
    assert_eq!(held.len(), 1);
    // Leader change while the ask is in flight; the new leader is asked once.
    let new_session = LeaderSessionId::from_u128(99);
    let new_held = Held::default();
    let _new_jm = f.new_leader(new_session, ids.clone(), |s| {
        s.release_idle_task_managers = Script::Hold(new_held.clone())
    });
    settle().await;
    assert_eq!(new_held.len(), 1);
    // The old leader's late answer is stale and must not clear the new ask's flag.
    held.answer(
        0,
        IdleTaskManagersReleased {
            leader_session_id: SESSION,
            released: vec![ids[2].clone()],
        },
    );
    settle().await;
    f.rm.do_send(CheckAndAllocateContainers);
    settle().await;
    assert_eq!(new_held.len(), 1, "no second ask while one is in flight");
    assert!(f.driver.released().is_empty());
    new_held.answer(
        0,
        IdleTaskManagersReleased {
            leader_session_id: new_session,
            released: vec![ids[2].clone()],
        },
    );
    settle().await;
    assert_eq!(f.driver.released(), [ids[2].clone()]);
    assert_eq!(f.counts().await, (2, 0, 0));
}

#[actix::test]
async fn new_worker_ids_never_collide_with_reconciled_workers() {
    tokio::time::pause();
    let env = env("n", 1);
    // What a predecessor with the same seed named its first worker.
    let (probe_driver, _) = ScriptedDriver::new(true);
    let predecessor =
        FlinkResourceManager::new(settings(config(1)), Box::new(probe_driver), env.clone());
    let inherited = ResourceId::new(format!("{}-1", predecessor.id_prefix));
    let jm = JobManagerProbeHandle::start(&env, "jobmanager", SESSION);
    jm.script(|s| {
        s.register_resource_manager = Script::Answer(RegisterResourceManagerSuccessful {
            leader_session_id: SESSION,
            job_manager: jm.address.clone(),
            registered: vec![inherited.clone()],
            required_workers: 0,
        })
    });
    let (driver, handle) = ScriptedDriver::new(true);
    let rm = FlinkResourceManager::new(settings(config(2)), Box::new(driver), env).start();
    rm.do_send(NewLeaderAvailable {
        address: jm.address.clone(),
        leader_session_id: SESSION,
    });
    settle().await;
    let requested = handle.requested();
    assert_eq!(requested.len(), 1);
    assert_ne!(requested[0], inherited);
    let status = ask(&rm, GetResourceManagerStatus).await;
    assert_eq!(status.started, [inherited]);
}

#[actix::test]
async fn trigger_registration_registers_only_while_not_connected() {
    let f = start(config(1), true).await;
    assert_eq!(registrations_at(&f.jm), 1);
    // Connected: a trigger (from anyone) changes nothing.
    f.rm.do_send(TriggerRegistrationAtJobManager);
    settle().await;
    assert_eq!(registrations_at(&f.jm), 1);
    // The JobManager forgot the RM: the heartbeat answer ends the connection; the trigger the
    // RM sends itself registers again.
    f.jm.script(|s| {
        s.resource_manager_heartbeat =
            Script::Answer(ResourceManagerHeartbeatResponse::UnknownResourceManager)
    });
    advance(10_001).await;
    assert_eq!(registrations_at(&f.jm), 2);
    assert!(f.status().await.connected_to_job_manager);
}

/// Issue 12 (fencing): a worker released after a heartbeat left is not counted again from that
/// heartbeat's answer (it lists the worker, built before the JobManager heard of the release),
/// even by a driver that adopts unknown workers.
#[actix::test]
async fn a_released_worker_is_not_adopted_again_from_a_heartbeat_answer_in_flight() {
    let f = start(config(1), false).await;
    let id = ResourceId::new("standalone-1");
    let held = Held::default();
    f.jm.script(|s| s.resource_manager_heartbeat = Script::Hold(held.clone()));
    ask(
        &f.rm,
        NotifyResourceStarted {
            leader_session_id: SESSION,
            resource_id: id.clone(),
        },
    )
    .await;
    assert_eq!(f.counts().await, (1, 0, 0));
    advance(10_001).await; // a heartbeat leaves
    assert_eq!(held.len(), 1);
    f.rm.do_send(ReleaseResource {
        leader_session_id: SESSION,
        resource_id: id.clone(),
        reason: RemovalReason::HeartbeatTimeout,
    });
    settle().await;
    assert_eq!(f.counts().await, (0, 0, 0));
    held.answer(
        0,
        ResourceManagerHeartbeatResponse::Acknowledged {
            leader_session_id: SESSION,
            registered: vec![id.clone()],
            required_workers: 0,
        },
    );
    settle().await;
    assert_eq!(f.counts().await, (0, 0, 0), "not adopted again");
}

/// Issue 12 (fencing): a started worker missing from a heartbeat answer (its removal report was
/// lost) goes back to waiting for its registration, and is replaced if it never comes back.
#[actix::test]
async fn a_started_worker_missing_from_heartbeat_answers_is_demoted_then_replaced() {
    let f = start(config(1), true).await;
    f.register_all_requested().await;
    assert_eq!(f.counts().await, (1, 0, 0));
    advance(10_001).await; // the heartbeat answer lists nobody
    assert_eq!(f.counts().await, (0, 0, 1));
    advance(60_000).await; // the registration timeout
    assert_eq!(f.driver.released().len(), 1);
    advance(1_000).await; // the start backoff after a registration timeout
    assert!(f.driver.requested().len() >= 2, "replaced");
}

/// High availability: a resource manager whose leadership lease lapsed (its process resumed
/// after a pause, its leader loop has not run yet) asks its driver for no worker; the starts
/// wait and go out once the lease is renewed, never after it was revoked.
#[actix::test]
async fn workers_are_started_only_while_the_leadership_lease_is_held() {
    tokio::time::pause();
    let env = env("jobmanager-node", 1);
    let jm = JobManagerProbeHandle::start(&env, "jobmanager", SESSION);
    let (driver, handle) = ScriptedDriver::new(true);
    let lease = crate::ha::LeadershipLease::lapsed();
    let rm = FlinkResourceManager::new(settings(config(2)), Box::new(driver), env)
        .with_leadership_lease(lease.clone())
        .start();
    rm.do_send(NewLeaderAvailable {
        address: jm.address.clone(),
        leader_session_id: SESSION,
    });
    advance(2_000).await;
    assert!(
        ask(&rm, GetResourceManagerStatus)
            .await
            .connected_to_job_manager
    );
    assert!(handle.requested().is_empty(), "started without a lease");
    lease.extend_to(actix::clock::Instant::now() + Duration::from_secs(60));
    advance(50).await;
    assert_eq!(handle.requested().len(), 2, "the waiting starts go out");
    lease.revoke();
    ask(&rm, SetWorkerPoolSize { size: 4 })
        .await
        .expect("a valid size");
    advance(5_000).await;
    assert_eq!(handle.requested().len(), 2, "started under a revoked lease");
}

/// A resource manager holding a lease (for an hour) with three workers registered.
async fn three_registered_workers_under_a_lease() -> (LeadershipLease, Fixture, Vec<ResourceId>) {
    let lease = LeadershipLease::lapsed();
    lease.extend_to(actix::clock::Instant::now() + Duration::from_secs(3600));
    let f = start_leased(config(3), true, lease.clone()).await;
    let ids = f.driver.requested();
    for id in &ids {
        f.start_and_register(id).await;
    }
    (lease, f, ids)
}

/// A leader paused past its lease must not stop workers a new leader may already use: the
/// surplus waits until the lease is proven again.
#[actix::test]
async fn shrinking_releases_nothing_while_the_leadership_lease_has_lapsed() {
    let (lease, f, ids) = three_registered_workers_under_a_lease().await;
    f.answer_idle_release(SESSION, vec![ids[2].clone()]);
    lease.revoke();
    f.set_pool_size(2).await;
    settle().await;
    tokio::time::advance(Duration::from_secs(5)).await;
    settle().await;
    let asks = |f: &Fixture| {
        f.jm.received
            .filter(|m| matches!(m, JobManagerMessage::ReleaseIdleTaskManagers(_)).then_some(()))
            .len()
    };
    assert_eq!(asks(&f), 0, "no JobManager is asked which workers may go");
    assert!(f.driver.released().is_empty(), "no worker is stopped");
    assert_eq!(f.counts().await.0, 3);
}

/// The lease lapsing while the JobManager answers: the answer is not acted on.
#[actix::test]
async fn an_idle_release_answer_arriving_after_the_lease_lapsed_stops_no_worker() {
    let (lease, f, ids) = three_registered_workers_under_a_lease().await;
    let held = Held::default();
    f.jm.script(|s| s.release_idle_task_managers = Script::Hold(held.clone()));
    f.set_pool_size(2).await;
    settle().await;
    assert_eq!(held.len(), 1, "asked while the lease is held");
    lease.revoke();
    held.answer(
        0,
        IdleTaskManagersReleased {
            leader_session_id: SESSION,
            released: vec![ids[2].clone()],
        },
    );
    settle().await;
    assert!(f.driver.released().is_empty(), "no worker is stopped");
}
