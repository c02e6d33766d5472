use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::base::ids::ClusterId;
use crate::base::ids::LeaderSessionId;
use crate::config::{HeartbeatConfig, RegistrationConfig};
use crate::env::ArbiterSpawner;
use crate::messages::HardwareDescription;
use crate::messages::resource_manager::ResourceManagerMessage;
use crate::messages::task_manager::GetTaskManagerStatus;
use crate::testing::*;

const SESSION: LeaderSessionId = LeaderSessionId::from_u128(3);

fn template() -> TaskManagerSpec {
    TaskManagerSpec {
        cluster_id: ClusterId::new("test"),
        slots: 2,
        hostname: "localhost".into(),
        hardware: HardwareDescription {
            cpu_cores: 1,
            physical_memory_bytes: 0,
        },
        registration: RegistrationConfig::default(),
        heartbeat: HeartbeatConfig::default(),
        registry: crate::operators::OperatorRegistry::with_builtins(),
        working_dir: std::env::temp_dir().join("flint-unit-tests"),
        spill_threshold_bytes: 1 << 20,
        spill_budget_bytes: None,
        managed_memory: 64 << 20,
        network: crate::exchange::NetworkSettings::default(),
        cancellation: crate::config::CancellationConfig::default(),
        blob_cache_linger: std::time::Duration::from_secs(60),
    }
}

fn request(env: &NodeEnv, name: &str) -> WorkerRequest {
    WorkerRequest {
        resource_id: ResourceId::new(name),
        job_manager: env.address_of("jobmanager"),
        leader_session_id: Some(SESSION),
    }
}

#[actix::test]
async fn a_requested_worker_starts_reports_and_registers_at_the_leader() {
    tokio::time::pause();
    let env = env("node", 1);
    let jm = JobManagerProbeHandle::start(&env, "jobmanager", SESSION);
    let rm = ResourceManagerProbeHandle::start(&env);
    let mut driver = InProcessDriver::new(template(), env.clone());
    driver.initialize(rm.gateway.clone());
    driver.request_worker(request(&env, "tm-a")).unwrap();
    settle().await;
    assert_eq!(
        rm.received.all(),
        [ResourceManagerMessage::WorkerStarted(WorkerStarted {
            resource_id: ResourceId::new("tm-a")
        })]
    );
    let registrations = jm.received.filter(|m| match m {
        crate::messages::job_manager::JobManagerMessage::RegisterTaskManager(r) => {
            Some((r.resource_id.clone(), r.number_of_slots))
        }
        _ => None,
    });
    assert_eq!(registrations, [(ResourceId::new("tm-a"), 2)]);
    assert_eq!(driver.workers().running(), [ResourceId::new("tm-a")]);
}

#[actix::test]
async fn a_new_leader_is_passed_on_to_every_task_manager() {
    tokio::time::pause();
    let env = env("node", 1);
    let _old = JobManagerProbeHandle::start(&env, "jobmanager", SESSION);
    let mut driver = InProcessDriver::new(template(), env.clone());
    driver.request_worker(request(&env, "tm-a")).unwrap();
    driver.request_worker(request(&env, "tm-b")).unwrap();
    settle().await;
    let new_session = LeaderSessionId::from_u128(4);
    let new = JobManagerProbeHandle::start(&env, "jobmanager-2", new_session);
    new.script(|s| {
        s.register_task_manager = Script::Answer(
            crate::messages::job_manager::RegistrationResponse::AcknowledgeRegistration(
                crate::messages::job_manager::AcknowledgeRegistration {
                    instance_id: crate::base::ids::InstanceId::from_u128(9),
                    leader_session_id: new_session,
                },
            ),
        )
    });
    driver.leader_changed(&new.address, new_session);
    settle().await;
    let registered: Vec<_> = new.received.filter(|m| match m {
        crate::messages::job_manager::JobManagerMessage::RegisterTaskManager(r) => {
            Some(r.resource_id.to_string())
        }
        _ => None,
    });
    assert_eq!(registered, ["tm-a", "tm-b"]);
}

#[actix::test]
async fn release_stops_the_task_manager_and_forgets_its_address() {
    tokio::time::pause();
    let env = env("node", 1);
    let _jm = JobManagerProbeHandle::start(&env, "jobmanager", SESSION);
    let mut driver = InProcessDriver::new(template(), env.clone());
    driver.request_worker(request(&env, "tm-a")).unwrap();
    settle().await;
    let address = env.address_of("taskmanager/tm-a");
    let gateway = env.resolver.task_manager(&address).expect("registered");
    driver.release_worker(&ResourceId::new("tm-a"));
    settle().await;
    assert!(env.resolver.task_manager(&address).is_none());
    assert!(
        gateway.get_status.send(GetTaskManagerStatus).await.is_err(),
        "stopped"
    );
    assert!(driver.workers().running().is_empty());
    // Unknown ids are ignored.
    driver.release_worker(&ResourceId::new("ghost"));
}

#[actix::test]
async fn a_crash_on_its_own_thread_kills_the_task_manager_silently() {
    let env = env_with_spawner("node", 2, Arc::new(ArbiterSpawner));
    let _jm = JobManagerProbeHandle::start(&env, "jobmanager", SESSION);
    let rm = ResourceManagerProbeHandle::start(&env);
    let mut driver = InProcessDriver::new(template(), env.clone());
    driver.initialize(rm.gateway.clone());
    driver.request_worker(request(&env, "tm-a")).unwrap();
    let address = env.address_of("taskmanager/tm-a");
    let gateway = loop {
        if let Some(gateway) = env.resolver.task_manager(&address) {
            break gateway;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    };
    assert!(driver.workers().crash(&ResourceId::new("tm-a")));
    assert!(
        !driver.workers().crash(&ResourceId::new("tm-a")),
        "only once"
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while gateway.get_status.send(GetTaskManagerStatus).await.is_ok() {
        assert!(tokio::time::Instant::now() < deadline, "still alive");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    // The driver reports the start and nothing else: a crash is for heartbeats to find.
    while rm.received.all().is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "no WorkerStarted");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert!(matches!(
        rm.received.all()[..],
        [ResourceManagerMessage::WorkerStarted(_)]
    ));
    driver.shutdown();
}
