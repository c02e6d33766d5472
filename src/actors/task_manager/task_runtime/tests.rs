//! The task's side of the exchange: a silent producer is waited for without a time limit, a
//! producer that is really gone fails the consumer with its TaskManager and the reason named,
//! the gate reads whichever channel has data, and a pipelined producer waits for its consumer
//! (backpressure) instead of spilling, until it is cancelled.

use std::sync::Arc;

use super::*;
use crate::base::ids::DataConnectionId;
use crate::base::ids::{AllocationId, ExecutionAttemptId, JobId, ResourceId};
use crate::base::rng::NodeRng;
use crate::env::task_blocking::ThreadBlocker;
use crate::exchange::client::Peer;
use crate::exchange::partition::Fetch;
use crate::exchange::partition::tests::AppendRecords;
use crate::exchange::server::PartitionRequestServer;
use crate::job::graph::DistributionPattern;
use crate::messages::deployment::{
    InputGateDeploymentDescriptor, ProducerLocation, Producers, ResultPartitionDeploymentDescriptor,
};
use crate::messages::subpartition_set::SubpartitionSet;
use crate::messages::task_manager::{
    ChannelResponse, PartitionData, PartitionEnd, PartitionNotice, PartitionRequest,
    PartitionRequests, PollPartitionData,
};
use crate::messages::{ActorAddress, ResultPartitionId};
use crate::operators::Value;
use crate::testing::{TaskManagerProbeHandle, env};

fn partition(n: u128) -> ResultPartitionId {
    ResultPartitionId {
        producer: ExecutionAttemptId::from_u128(n),
        edge: 0,
    }
}

/// A partition store that spills everything, in a directory of its own removed with it.
struct Store {
    manager: Arc<ResultPartitionManager>,
    dir: std::path::PathBuf,
}

impl std::ops::Deref for Store {
    type Target = Arc<ResultPartitionManager>;

    fn deref(&self) -> &Self::Target {
        &self.manager
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn store(name: &str) -> Store {
    let dir =
        std::env::temp_dir().join(format!("flint-task-runtime-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    Store {
        manager: Arc::new(ResultPartitionManager::new(dir.clone(), 0)),
        dir,
    }
}

fn consumer() -> ActorAddress {
    ActorAddress::new("local", "taskmanager/tm-consumer")
}

/// The consumer names partition 41 (set 1) and subscribes to its subpartition 0 as channel 7.
fn subscribe(round: u64) -> PartitionRequests {
    PartitionRequests {
        consumer: consumer(),
        connection: DataConnectionId::from_u128(1),
        round,
        requests: vec![
            PartitionRequest::Set {
                set: 1,
                edge: partition(41).edge,
                members: Arc::new(vec![partition(41)]),
            },
            PartitionRequest::SubscribeSet {
                channels: 7,
                set: 1,
                subpartition: 0,
                credit: 2,
                eager: 0,
            },
        ],
    }
}

fn poll(poll: u64, received: u64) -> PollPartitionData {
    PollPartitionData {
        consumer: consumer(),
        connection: DataConnectionId::from_u128(1),
        poll,
        received,
        acknowledged: 1,
    }
}

fn record(i: i64) -> Record {
    Record {
        key: format!("k{i}"),
        value: Value::Int(i),
    }
}

/// A task of `operator` reading subpartition 0 of `producers` and writing `outputs`.
fn descriptor(
    operator: &str,
    config: &[(&str, &str)],
    producers: Vec<ProducerLocation>,
    outputs: Vec<ResultPartitionDeploymentDescriptor>,
) -> TaskDeploymentDescriptor {
    TaskDeploymentDescriptor {
        job_id: JobId::from_u128(1),
        attempt: ExecutionAttemptId::from_u128(42),
        attempt_number: 0,
        vertex_name: operator.into(),
        subtask: 0,
        parallelism: 1,
        operator: operator.into(),
        config: Arc::new(
            config
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        ),
        allocation_id: AllocationId::from_u128(1),
        inputs: if producers.is_empty() {
            vec![]
        } else {
            vec![InputGateDeploymentDescriptor {
                edge: 0,
                subpartition: 0,
                producers: Producers::own(producers),
            }]
        },
        outputs,
        artifacts: Arc::from([]),
    }
}

fn task(
    descriptor: TaskDeploymentDescriptor,
    store: Arc<ResultPartitionManager>,
    data_connections: NetworkClient,
) -> (TaskEnvironment, Arc<Cancellation>) {
    let cancelled = Arc::new(Cancellation::default());
    let env = TaskEnvironment {
        descriptor,
        partitions: store,
        registry: OperatorRegistry::with_builtins(),
        data_connections,
        groupings: Vec::new(),
        network: NetworkSettings::default(),
        gate_floor: Floor::unbounded(1 << 20),
        cancelled: cancelled.clone(),
        metrics: Arc::default(),
        clock: Arc::new(crate::base::clock::SystemClock),
        working_dir: std::env::temp_dir(),
        managed_memory: 64 << 20,
        artifacts: Vec::new(),
    };
    (env, cancelled)
}

/// Runs task code off the test's runtime thread (it blocks its thread).
#[allow(clippy::disallowed_methods)] // the test plays the task runner
fn spawn_task(env: TaskEnvironment) -> tokio::task::JoinHandle<TaskOutcome> {
    tokio::task::spawn_blocking(move || run_task(env, &ThreadBlocker))
}

/// Cancels its task when dropped: a test that fails while its task waits for room ends
/// instead of waiting for ever (the runtime's shutdown waits for every blocking thread).
struct CancelOnDrop(Arc<Cancellation>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

/// Polls `condition` every millisecond until it holds; fails after 30 s.
async fn eventually(what: &str, condition: impl Fn() -> bool) {
    let give_up = tokio::time::Instant::now() + Duration::from_secs(30);
    while !condition() {
        assert!(tokio::time::Instant::now() < give_up, "never: {what}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

#[actix::test]
async fn a_silent_producer_is_answered_within_the_hold_for_as_long_as_it_is_silent() {
    tokio::time::pause();
    let store = store("silent");
    store.create_pipelined(partition(41), 1, 2).unwrap();
    let server = PartitionRequestServer::default();
    server.apply(&store, subscribe(1));
    // A minute of silence: every poll is answered (no news) well inside the ask timeout, so
    // the consumer's transport never takes the producer's TaskManager for dead.
    let silent_until = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut polls = 0;
    while tokio::time::Instant::now() < silent_until {
        let asked = tokio::time::Instant::now();
        let answer = server.poll(store.clone(), poll(polls + 1, 0)).await;
        assert_eq!(answer.channels, vec![]);
        assert!(asked.elapsed() < crate::transport::ASK_TIMEOUT);
        polls += 1;
    }
    assert!(polls >= 60 / FETCH_HOLD.as_secs(), "{polls} polls");

    // Data wakes a held poll at once, and the end of the partition is told.
    let held = actix::spawn(server.poll(store.clone(), poll(polls + 1, 0)));
    crate::testing::settle().await;
    store
        .append_records(partition(41), 0, vec![record(1)])
        .unwrap();
    assert_eq!(
        held.await.unwrap(),
        PartitionData {
            seq: 1,
            channels: vec![(
                7,
                ChannelResponse::Data {
                    buffers: vec![vec![record(1)].into()],
                    next_buffer: 1,
                    finished: false,
                    backlog: 0,
                    eager: 0,
                }
            )],
            notices: vec![],
            forgotten: false,
        }
    );
    store.finish(partition(41)).unwrap();
    assert_eq!(
        server.poll(store.clone(), poll(polls + 2, 1)).await,
        PartitionData {
            seq: 2,
            channels: vec![(
                7,
                ChannelResponse::Data {
                    buffers: vec![],
                    next_buffer: 1,
                    finished: true,
                    backlog: 0,
                    eager: 0,
                }
            )],
            // The set hears of the end too; the channel that had data ends by itself.
            notices: vec![PartitionNotice {
                set: 1,
                member: 0,
                end: PartitionEnd::Finished {
                    with_data: vec![0].into()
                },
            }],
            forgotten: false,
        }
    );
    store.release(partition(41));
}

/// The producer sends a channel only what the consumer granted, and more as grants come (a
/// running total: one grant repeated changes nothing).
#[actix::test]
async fn a_subscription_is_sent_only_what_its_consumer_granted() {
    tokio::time::pause();
    let store = store("granted");
    store.create(partition(41), 1).unwrap();
    for i in 0..5 {
        store
            .append_records(partition(41), 0, vec![record(i)])
            .unwrap();
    }
    let server = PartitionRequestServer::default();
    server.apply(&store, subscribe(1));
    let buffers = |data: &PartitionData| match &data.channels[..] {
        [(7, ChannelResponse::Data { buffers, .. })] => buffers.len(),
        other => panic!("{other:?}"),
    };
    let first = server.poll(store.clone(), poll(1, 0)).await;
    assert_eq!(buffers(&first), 2, "the subscription's credit");
    // No credit left: the poll is held and answered empty.
    assert_eq!(
        server.poll(store.clone(), poll(2, 1)).await.channels,
        vec![]
    );
    let grant = |round, granted| PartitionRequests {
        requests: vec![PartitionRequest::Credit {
            channel: 7,
            granted,
        }],
        ..subscribe(round)
    };
    server.apply(&store, grant(2, 3));
    server.apply(&store, grant(2, 3)); // the same round again: ignored
    server.apply(&store, grant(3, 3)); // the same total again: nothing more
    let next = server.poll(store.clone(), poll(3, 1)).await;
    assert_eq!(buffers(&next), 1);
}

/// A consumer whose TaskManager died without cancelling its subscription (its task had ended
/// early, so no failover restarts the producer) leaves its pipelined producer waiting for room
/// only until the producer's TaskManager forgets the idle connection: what the connection read
/// then counts as released. A connection still polling keeps its subscription, and a blocking
/// partition keeps its buffers for a restarted consumer.
#[actix::test]
async fn a_consumer_gone_without_a_word_releases_what_its_forgotten_connection_read() {
    use crate::exchange::partition::Space;
    use crate::exchange::server::IDLE_CONNECTION;
    tokio::time::pause();
    for pipelined in [true, false] {
        let store = store(&format!("gone-consumer-{pipelined}"));
        if pipelined {
            store.create_pipelined(partition(41), 1, 2).unwrap();
        } else {
            store.create(partition(41), 1).unwrap();
        }
        for i in 0..2 {
            store
                .append_records(partition(41), 0, vec![record(i)])
                .unwrap();
        }
        let full = || matches!(store.reserve(partition(41), 0, 64).unwrap(), Space::Full(_));
        let held = || store.stats(partition(41)).unwrap().memory_bytes;
        assert_eq!(full(), pipelined);
        let before = held();
        let server = PartitionRequestServer::default();
        server.apply(&store, subscribe(1));
        tokio::time::advance(IDLE_CONNECTION / 2).await;
        server.prune(&store);
        assert_eq!(full(), pipelined, "a connection used lately is kept");
        tokio::time::advance(IDLE_CONNECTION).await;
        server.prune(&store);
        assert!(!full(), "pipelined {pipelined}: the producer still waits");
        if pipelined {
            assert_eq!(held(), 0, "the unread buffers are dropped");
        } else {
            assert_eq!(held(), before, "a blocking partition keeps its buffers");
        }
        // A forgotten connection whose partition went meanwhile leaves no release waiting for
        // a partition that will never come.
        store.release(partition(41));
        server.apply(&store, subscribe(1));
        tokio::time::advance(IDLE_CONNECTION * 2).await;
        server.prune(&store);
        // (Seen through a partition of the same id made again: a release kept for it would
        // apply at once.)
        store.create_pipelined(partition(41), 1, 2).unwrap();
        for i in 0..2 {
            store
                .append_records(partition(41), 0, vec![record(i)])
                .unwrap();
        }
        assert!(full(), "pipelined {pipelined}: a stale release was kept");
    }
}

/// An answer lost on the way (an ask that timed out while a TaskManager was too busy) is sent
/// again as it was, for retained and pipelined partitions alike: no channel fails and no
/// buffer is read twice. Once the consumer says it got it, it is not sent again. (Served again
/// from where it started, the pipelined buffer was gone and its channel failed: at P = 10,000
/// on 2 cores that failed the job.)
#[actix::test]
async fn a_lost_answer_is_sent_again_as_it_was() {
    tokio::time::pause();
    for retained in [true, false] {
        let store = store(&format!("lost-{retained}"));
        if retained {
            store.create(partition(41), 1).unwrap();
        } else {
            store.create_pipelined(partition(41), 1, 2).unwrap();
        }
        store
            .append_records(partition(41), 0, vec![record(1)])
            .unwrap();
        let server = PartitionRequestServer::default();
        server.apply(&store, subscribe(1));
        let lost = server.poll(store.clone(), poll(1, 0)).await;
        assert_eq!(lost.seq, 1);
        assert!(
            matches!(&lost.channels[..], [(7, ChannelResponse::Data { buffers, .. })] if buffers == &vec![vec![record(1)]]),
            "retained {retained}: {lost:?}"
        );
        // The consumer never got seq 1: twice lost, twice sent again.
        for again in [2, 3] {
            let sent = server.poll(store.clone(), poll(again, 0)).await;
            assert_eq!(sent, lost, "retained {retained}: poll {again}");
        }
        // Got: the next answer has the next buffer only.
        store
            .append_records(partition(41), 0, vec![record(2)])
            .unwrap();
        let next = server.poll(store.clone(), poll(4, 1)).await;
        assert_eq!(next.seq, 2);
        match &next.channels[..] {
            [(7, ChannelResponse::Data { buffers, .. })] => {
                assert_eq!(buffers, &vec![vec![record(2)]], "retained {retained}");
            }
            other => panic!("retained {retained}: {other:?}"),
        }
    }
}

#[actix::test]
async fn a_consumer_whose_producer_task_manager_is_gone_names_it_not_a_closed_mailbox() {
    let env = env("consumer", 1);
    let producer = TaskManagerProbeHandle::start(&env, &ResourceId::new("tm-producer"));
    producer.stop().await;
    let task_manager = producer.address.clone();
    let gone = store("gone");
    let (task, _) = task(
        descriptor(
            "noop",
            &[],
            vec![ProducerLocation {
                partition: partition(41),
                task_manager: task_manager.clone(),
            }],
            vec![],
        ),
        gone.manager.clone(),
        {
            let network = NetworkClient::new(
                env.address_of("taskmanager/tm-consumer"),
                NodeRng::seed_from_u64(1),
            );
            let drive = network
                .connect(&task_manager, Peer::Remote(producer.gateway()))
                .expect("a new connection");
            actix::spawn(drive);
            network
        },
    );
    let outcome = spawn_task(task).await.unwrap();
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
    store.create_pipelined(partition(41), 1, 2).unwrap();
    store
        .append_records(partition(41), 0, vec![record(1)])
        .unwrap();
    let local = env.address_of("taskmanager/tm-local");
    let (task, _) = task(
        descriptor(
            "noop",
            &[],
            vec![ProducerLocation {
                partition: partition(41),
                task_manager: local.clone(),
            }],
            vec![],
        ),
        store.clone(),
        NetworkClient::reading_locally(&local, &store),
    );
    let consumer = spawn_task(task);
    // Once the consumer has taken the buffer it waits for more; then the partition goes.
    eventually("the buffer was read", || {
        store
            .stats(partition(41))
            .is_some_and(|s| s.memory_bytes == 0)
    })
    .await;
    assert!(store.release(partition(41)));
    let outcome = consumer.await.unwrap();
    assert_eq!(outcome.state, ExecutionState::Failed);
    let error = outcome.error.unwrap();
    assert!(error.contains("was released"), "{error}");
    assert!(error.contains(&local.to_string()), "{error}");
}

/// Issue 11: the consumer read its channels one after the other, waiting on a silent one while
/// another had data (and, with bounded producers, an all-to-all exchange could deadlock).
#[actix::test]
async fn a_consumer_reads_whichever_channel_has_data_while_another_is_silent() {
    let env = env("consumer", 3);
    let store = store("any-channel");
    let local = env.address_of("taskmanager/tm-local");
    let (silent, talkative, out) = (partition(1), partition(2), partition(3));
    store.create_pipelined(silent, 1, 2).unwrap();
    store.create_pipelined(talkative, 1, 2).unwrap();
    store.create_pipelined(out, 1, 2).unwrap();
    let (task, cancelled) = task(
        descriptor(
            "noop",
            &[],
            [silent, talkative]
                .into_iter()
                .map(|partition| ProducerLocation {
                    partition,
                    task_manager: local.clone(),
                })
                .collect(),
            vec![ResultPartitionDeploymentDescriptor {
                partition: out,
                pattern: DistributionPattern::Forward,
                subpartitions: 1,
                retained: false,
            }],
        ),
        store.clone(),
        NetworkClient::reading_locally(&local, &store),
    );
    let consumer = spawn_task(task);
    // Enough records from the talkative producer to fill a whole output buffer downstream.
    let buffer: Vec<Record> = (0..20_000).map(record).collect();
    assert!(
        crate::exchange::Buffer::from(buffer.clone()).len()
            > NetworkSettings::default().buffer_size
    );
    store.append_records(talkative, 0, buffer).unwrap();
    store.finish(talkative).unwrap();
    eventually("the talkative channel's records were passed on", || {
        matches!(store.fetch(out, 0, 0, usize::MAX), Fetch::Ready { .. })
    })
    .await;
    // The silent channel keeps the task open; cancelling wakes it at once.
    cancelled.cancel();
    let outcome = consumer.await.unwrap();
    assert_eq!(outcome.state, ExecutionState::Canceled, "{outcome:?}");
}

#[actix::test]
async fn a_pipelined_producer_waits_for_its_consumer_instead_of_spilling_until_cancelled() {
    let env = env("producer", 4);
    // Spill threshold 0: any partition that could spill would.
    let store = store("backpressure");
    let out = partition(5);
    let (task, cancelled) = task(
        descriptor(
            "noop",
            &[("count", "1000000")],
            vec![],
            vec![ResultPartitionDeploymentDescriptor {
                partition: out,
                pattern: DistributionPattern::Forward,
                subpartitions: 1,
                retained: false,
            }],
        ),
        store.clone(),
        NetworkClient::reading_locally(&env.address_of("taskmanager/tm-local"), &store),
    );
    create_outputs(
        &store,
        &task.descriptor,
        &NetworkSettings::default(),
        &mut Floor::unbounded(1 << 20),
    )
    .unwrap();
    let _cancel = CancelOnDrop(Arc::clone(&cancelled));
    let producer = spawn_task(task);
    // One subpartition: the whole output window (128 buffers).
    let capacity = NetworkSettings::default().output_capacity(1) as u64;
    assert!(capacity > u64::from(crate::exchange::MAX_BUFFERS_PER_SUBPARTITION));
    eventually("the subpartition filled up", || {
        store.stats(out).is_some_and(|s| s.buffers == capacity)
    })
    .await;
    // Nobody reads: the producer waits with its subpartition full and nothing on disk.
    tokio::task::yield_now().await;
    let stats = store.stats(out).unwrap();
    assert_eq!((stats.buffers, stats.spilled_buffers), (capacity, 0));
    assert!(!producer.is_finished());
    // A consumer taking half of it lets the producer fill it up again, and no further.
    let half = capacity / 2;
    assert!(matches!(
        store.fetch_with_credit(out, 0, 0, usize::MAX, half as usize),
        Fetch::Ready { next_buffer, .. } if next_buffer == half
    ));
    eventually("the producer filled the subpartition again", || {
        store
            .stats(out)
            .is_some_and(|s| s.buffers == capacity + half)
    })
    .await;
    tokio::task::yield_now().await;
    assert_eq!(store.stats(out).unwrap().buffers, capacity + half);
    cancelled.cancel();
    let outcome = producer.await.unwrap();
    assert_eq!(outcome.state, ExecutionState::Canceled, "{outcome:?}");
    assert!(outcome.output.backpressured_waits >= 1, "{outcome:?}");
    assert_eq!(store.stats(out).unwrap().spilled_buffers, 0);
}

/// A producer TaskManager restarted at the same address knows none of the connection's
/// subscriptions: it says so (the consumer's channels there fail) instead of answering "no news"
/// for ever.
#[actix::test]
async fn a_producer_that_restarted_says_it_forgot_the_connection() {
    tokio::time::pause();
    let store = store("forgotten");
    let restarted = PartitionRequestServer::default();
    let answer = restarted.poll(store.clone(), poll(1, 0)).await;
    assert!(answer.forgotten, "{answer:?}");
    // A connection whose rounds it applied is known.
    let known = PartitionRequestServer::default();
    known.apply(&store, subscribe(1));
    store.create(partition(41), 1).unwrap();
    store.finish(partition(41)).unwrap();
    assert!(!known.poll(store.clone(), poll(1, 0)).await.forgotten);
}

/// All-to-all between two TaskManagers: one set of P partitions, P gates each subscribing to
/// it once. The empty channels end with one notice per partition (not one message per
/// channel), only the channel that got data is served on its own, and the producer keeps
/// state only for that one subpartition.
#[actix::test]
async fn empty_channels_end_with_one_notice_per_partition_not_a_message_per_channel() {
    tokio::time::pause();
    const P: u32 = 40;
    let store = store("sets");
    let partitions: Vec<ResultPartitionId> =
        (0..P).map(|i| partition(100 + u128::from(i))).collect();
    for &p in &partitions {
        store.create_pipelined(p, P, 2).unwrap();
    }
    let server = PartitionRequestServer::default();
    let gate_key = |gate: u32| crate::exchange::client::channel_key(gate, 0);
    let mut requests = vec![PartitionRequest::Set {
        set: 1,
        edge: 0,
        members: Arc::new(partitions.clone()),
    }];
    requests.extend((0..P).map(|gate| PartitionRequest::SubscribeSet {
        channels: gate_key(gate),
        set: 1,
        subpartition: gate,
        credit: 2,
        eager: 0,
    }));
    server.apply(
        &store,
        PartitionRequests {
            requests,
            ..subscribe(1)
        },
    );
    // Producer 5 writes to consumer 3 only; then every producer finishes.
    store
        .append_records(partitions[5], 3, vec![record(1)])
        .unwrap();
    for &p in &partitions {
        store.finish(p).unwrap();
    }
    let (mut notices, mut channels, mut answers) = (Vec::new(), Vec::new(), 0);
    let mut received = 0;
    while notices.len() < P as usize || channels.is_empty() {
        let answer = server
            .poll(store.clone(), poll(answers + 1, received))
            .await;
        answers += 1;
        received = answer.seq;
        notices.extend(answer.notices);
        channels.extend(answer.channels);
        assert!(answers < 10, "{answers} answers");
    }
    assert_eq!(notices.len(), P as usize, "one notice per partition");
    for notice in &notices {
        let with_data: SubpartitionSet = if notice.member == 5 {
            vec![3].into()
        } else {
            vec![].into()
        };
        assert_eq!(notice.end, PartitionEnd::Finished { with_data });
    }
    assert_eq!(
        channels,
        vec![(
            gate_key(3) + 5,
            ChannelResponse::Data {
                buffers: vec![vec![record(1)].into()],
                next_buffer: 1,
                finished: true,
                backlog: 0,
                eager: 0,
            }
        )],
        "only the channel with data is served on its own"
    );
    let stored: u32 = partitions
        .iter()
        .map(|&p| store.stats(p).unwrap().stored_subpartitions)
        .sum();
    assert_eq!(stored, 1, "of {} subpartitions", P * P);
    for &p in &partitions {
        store.release(p);
    }
}

/// A set member that never appears is told unknown once the partition request timeout has
/// passed (its producer was never deployed); one that was there and is released is told
/// released at once.
#[actix::test]
async fn a_member_that_never_appears_is_unknown_and_a_released_one_released() {
    tokio::time::pause();
    let store = store("unknown");
    let (here, never) = (partition(41), partition(99));
    store.create_pipelined(here, 1, 2).unwrap();
    let server = PartitionRequestServer::default();
    let started = tokio::time::Instant::now();
    server.apply(
        &store,
        PartitionRequests {
            requests: vec![PartitionRequest::Set {
                set: 1,
                edge: 0,
                members: Arc::new(vec![here, never]),
            }],
            ..subscribe(1)
        },
    );
    store.release(here);
    let answer = server.poll(store.clone(), poll(1, 0)).await;
    assert_eq!(
        answer.notices,
        vec![PartitionNotice {
            set: 1,
            member: 0,
            end: PartitionEnd::Released,
        }]
    );
    let (mut received, mut polls) = (answer.seq, 1);
    let unknown = loop {
        polls += 1;
        let answer = server.poll(store.clone(), poll(polls, received)).await;
        received = answer.seq;
        if let Some(notice) = answer.notices.into_iter().next() {
            break notice;
        }
        assert!(polls < 100, "never told");
    };
    assert_eq!(
        unknown,
        PartitionNotice {
            set: 1,
            member: 1,
            end: PartitionEnd::Unknown,
        }
    );
    assert!(started.elapsed() >= crate::exchange::input_gate::PARTITION_REQUEST_TIMEOUT);
}

/// An invalid configuration fails every attempt alike: the outcome says so, and the JobManager
/// fails the job instead of restarting it. An operator's own failure does not.
#[actix::test]
async fn an_invalid_configuration_is_an_unrecoverable_failure_and_an_operators_own_is_not() {
    let store = store("unrecoverable");
    let out = |n| ResultPartitionDeploymentDescriptor {
        partition: partition(n),
        pattern: DistributionPattern::Forward,
        subpartitions: 1,
        retained: false,
    };
    let env = env("unrecoverable", 5);
    let local = env.address_of("taskmanager/tm-local");
    let run = |operator: &str, config: &[(&str, &str)], n| {
        let (env, _) = task(
            descriptor(operator, config, Vec::new(), vec![out(n)]),
            store.clone(),
            NetworkClient::reading_locally(&local, &store),
        );
        spawn_task(env)
    };
    let bad = run("noop", &[("count", "many")], 1).await.unwrap();
    assert_eq!(bad.state, ExecutionState::Failed, "{bad:?}");
    assert!(
        bad.error
            .as_deref()
            .is_some_and(|e| e.contains("invalid configuration")),
        "{bad:?}"
    );
    assert!(bad.unrecoverable, "{bad:?}");
    // A reason of any length travels cut (to the JobManager, and to consumers with the
    // partition's end): here the invalid value is in it, 100 KB of it.
    let long = "many".repeat(25_000);
    let cut = run("noop", &[("count", long.as_str())], 3).await.unwrap();
    let error = cut.error.unwrap_or_default();
    assert!(
        error.len() <= MAX_FAILURE_REASON && error.ends_with(" [...]") && error.contains("many"),
        "{} bytes",
        error.len()
    );
    let failing = run("fail-once", &[], 2).await.unwrap();
    assert_eq!(failing.state, ExecutionState::Failed, "{failing:?}");
    assert!(!failing.unrecoverable, "{failing:?}");
}

/// A record over the largest the exchange carries fails its task at once, named with both
/// sizes, and unrecoverable (every attempt would write it again): before, it broke the data
/// connection that had to carry it, and the job restarted with a misleading reason.
#[actix::test]
async fn a_record_over_the_largest_the_exchange_carries_fails_its_task_unrecoverably() {
    let env = env("large-record", 6);
    let store = store("large-record");
    let local = env.address_of("taskmanager/tm-local");
    let input = std::env::temp_dir().join(format!(
        "flint-task-runtime-large-record-{}.txt",
        std::process::id()
    ));
    let line = "x".repeat(crate::exchange::MAX_RECORD_BYTES);
    std::fs::write(&input, format!("small\n{line}\n")).unwrap();
    let output = ResultPartitionDeploymentDescriptor {
        partition: partition(1),
        pattern: DistributionPattern::Forward,
        subpartitions: 1,
        retained: false,
    };
    let (task, _) = task(
        descriptor(
            "text-source",
            &[("path", &input.display().to_string())],
            Vec::new(),
            vec![output],
        ),
        store.clone(),
        NetworkClient::reading_locally(&local, &store),
    );
    let outcome = spawn_task(task).await.unwrap();
    std::fs::remove_file(&input).unwrap();
    assert_eq!(outcome.state, ExecutionState::Failed, "{:?}", outcome.error);
    let error = outcome.error.clone().unwrap_or_default();
    assert!(
        error.contains("larger than the largest the exchange carries (8388608 bytes)"),
        "{error}"
    );
    assert!(outcome.unrecoverable, "{error}");
}

/// A task's result travels in its final report, one message: an operator that sets a larger
/// one fails, naming the cap; one within it finishes with it.
#[actix::test]
async fn a_task_result_over_its_report_fails_the_task_and_one_within_it_is_sent() {
    struct SetsResult(usize);
    impl crate::operators::Operator for SetsResult {
        fn run(&mut self, io: &mut dyn TaskIo) -> Result<(), OperatorError> {
            io.set_result(vec![7; self.0])
        }
    }
    let env = env("large-result", 7);
    let store = store("large-result");
    let local = env.address_of("taskmanager/tm-local");
    let max = crate::messages::job_manager::MAX_TASK_RESULT_BYTES;
    for (bytes, name) in [(max, "fits"), (max + 1, "too-large")] {
        let (mut task, _) = task(
            descriptor(name, &[], Vec::new(), Vec::new()),
            store.clone(),
            NetworkClient::reading_locally(&local, &store),
        );
        task.registry
            .register(name, Arc::new(move |_| Ok(Box::new(SetsResult(bytes)))));
        let outcome = spawn_task(task).await.unwrap();
        if bytes <= max {
            assert_eq!(
                outcome.state,
                ExecutionState::Finished,
                "{:?}",
                outcome.error
            );
            assert_eq!(outcome.result.map(|r| r.len()), Some(max));
        } else {
            assert_eq!(outcome.state, ExecutionState::Failed);
            let error = outcome.error.unwrap_or_default();
            assert!(error.contains(&format!("at most {max} bytes")), "{error}");
        }
    }
}
