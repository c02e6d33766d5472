//! The consumer side of the exchange: a silent producer is waited for without a time limit, a
//! producer that is really gone fails the consumer with its TaskManager and the reason named.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use super::*;
use crate::messages::ResultPartitionId;
use crate::messages::deployment::{InputGate, ProducerLocation};
use crate::messages::ids::{AllocationId, ExecutionAttemptId, JobId, ResourceId};
use crate::task_blocking::ThreadBlocker;
use crate::testing::{TaskManagerProbeHandle, env};

fn partition() -> ResultPartitionId {
    ResultPartitionId {
        producer: ExecutionAttemptId::from_u128(41),
        edge: 0,
    }
}

fn store(name: &str) -> Arc<PartitionStore> {
    let dir =
        std::env::temp_dir().join(format!("flint-task-runtime-{name}-{}", std::process::id()));
    Arc::new(PartitionStore::new(dir, usize::MAX))
}

fn request(from_batch: u64) -> FetchSubpartition {
    FetchSubpartition {
        partition: partition(),
        subpartition: 0,
        from_batch,
    }
}

/// A `noop` sink reading subpartition 0 of [`partition`] held by `task_manager`.
fn consumer(task_manager: ActorAddress) -> TaskDeploymentDescriptor {
    TaskDeploymentDescriptor {
        job_id: JobId::from_u128(1),
        attempt: ExecutionAttemptId::from_u128(42),
        attempt_number: 0,
        vertex_name: "sink".into(),
        subtask: 0,
        parallelism: 1,
        operator: "noop".into(),
        config: BTreeMap::new(),
        allocation_id: AllocationId::from_u128(1),
        inputs: vec![InputGate {
            edge: 0,
            subpartition: 0,
            producers: Arc::new(vec![ProducerLocation {
                partition: partition(),
                task_manager,
            }]),
        }],
        outputs: vec![],
    }
}

#[actix::test]
async fn a_silent_producer_is_answered_idle_within_the_hold_for_as_long_as_it_is_silent() {
    tokio::time::pause();
    let store = store("silent");
    store.create_with(partition(), 1, false).unwrap();
    // A minute of silence: every ask is answered (Idle) well inside the ask timeout, so the
    // consumer's transport never takes the producer's TaskManager for dead.
    let silent_until = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut asks = 0;
    while tokio::time::Instant::now() < silent_until {
        let asked = tokio::time::Instant::now();
        assert_eq!(
            serve_fetch(store.clone(), request(0)).await,
            FetchResponse::Idle
        );
        assert!(asked.elapsed() < crate::node::ASK_TIMEOUT);
        asks += 1;
    }
    assert!(asks >= 60 / FETCH_HOLD.as_secs(), "{asks} asks");

    // Data wakes a held fetch at once, and the end of the partition is told.
    let held = actix::spawn(serve_fetch(store.clone(), request(0)));
    crate::testing::settle().await;
    let record = crate::operators::Record {
        key: "k".into(),
        value: crate::operators::Value::Int(1),
    };
    store.append(partition(), 0, vec![record.clone()]).unwrap();
    assert_eq!(
        held.await.unwrap(),
        FetchResponse::Data {
            batches: vec![vec![record]],
            next_batch: 1,
            finished: false,
        }
    );
    store.finish(partition()).unwrap();
    assert_eq!(
        serve_fetch(store.clone(), request(1)).await,
        FetchResponse::Data {
            batches: vec![],
            next_batch: 1,
            finished: true,
        }
    );
    store.release(partition());
}

#[actix::test]
async fn a_consumer_whose_producer_task_manager_is_gone_names_it_not_a_closed_mailbox() {
    let env = env("consumer", 1);
    let producer = TaskManagerProbeHandle::start(&env, &ResourceId::new("tm-producer"));
    producer.stop().await;
    let task_manager = producer.address.clone();
    let task = TaskEnvironment {
        descriptor: consumer(task_manager.clone()),
        partitions: store("gone"),
        registry: OperatorRegistry::with_builtins(),
        peers: [(task_manager.clone(), producer.gateway())].into(),
        local_address: env.address_of("taskmanager/tm-consumer"),
        cancelled: Arc::new(AtomicBool::new(false)),
    };
    // Task code blocks its thread: run it off the test's runtime thread.
    #[allow(clippy::disallowed_methods)] // the test plays the task runner
    let outcome = tokio::task::spawn_blocking(move || run_task(task, &ThreadBlocker))
        .await
        .unwrap();
    assert_eq!(outcome.state, ExecutionState::Failed);
    let error = outcome.error.unwrap();
    assert!(error.contains(&task_manager.to_string()), "{error}");
    assert!(error.contains("could not be re-established"), "{error}");
    assert!(!error.contains("Mailbox"), "{error}");
}

#[actix::test]
async fn a_partition_released_under_its_reading_consumer_fails_it_as_released() {
    let env = env("consumer", 2);
    let store = store("released");
    store.create_with(partition(), 1, false).unwrap();
    let record = crate::operators::Record {
        key: "k".into(),
        value: crate::operators::Value::Int(1),
    };
    store.append(partition(), 0, vec![record]).unwrap();
    let local = env.address_of("taskmanager/tm-local");
    let task = TaskEnvironment {
        descriptor: consumer(local.clone()),
        partitions: store.clone(),
        registry: OperatorRegistry::with_builtins(),
        peers: BTreeMap::new(),
        local_address: local.clone(),
        cancelled: Arc::new(AtomicBool::new(false)),
    };
    #[allow(clippy::disallowed_methods)] // the test plays the task runner
    let consumer = tokio::task::spawn_blocking(move || run_task(task, &ThreadBlocker));
    // Once the consumer has taken the batch it waits for more; then the partition goes.
    let give_up = tokio::time::Instant::now() + Duration::from_secs(30);
    while store.stats(partition()).is_some_and(|s| s.memory_bytes > 0) {
        assert!(
            tokio::time::Instant::now() < give_up,
            "the batch was never read"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert!(store.release(partition()));
    let outcome = consumer.await.unwrap();
    assert_eq!(outcome.state, ExecutionState::Failed);
    let error = outcome.error.unwrap();
    assert!(error.contains("was released"), "{error}");
    assert!(error.contains(&local.to_string()), "{error}");
}
