use super::*;
use crate::base::ids::ExecutionAttemptId;
use crate::env::task_blocking::ThreadBlocker;
use crate::exchange::buffer_pool::NetworkBufferPool;
use crate::exchange::client::Peer;
use crate::exchange::partition::ResultPartitionManager;
use crate::exchange::partition::tests::AppendRecords;
use crate::messages::deployment::{ProducerLocation, Producers};
use crate::operators::{Record, Value};

fn partition(n: u128) -> ResultPartitionId {
    ResultPartitionId {
        producer: ExecutionAttemptId::from_u128(n),
        edge: 0,
    }
}

/// A gate of a TaskManager reading `subpartition` of `partitions`, all its own, through its
/// connection to itself (driven on this thread).
fn local_gate(
    store: &Arc<ResultPartitionManager>,
    partitions: &[ResultPartitionId],
    subpartition: u32,
    settings: NetworkSettings,
) -> InputGate {
    // Room for every channel's exclusive credit: the gate as it was before floors.
    local_gate_within(
        store,
        partitions,
        subpartition,
        settings,
        Floor::unbounded(1 << 20),
    )
}

/// [`local_gate`] with the floor `floor`.
fn local_gate_within(
    store: &Arc<ResultPartitionManager>,
    partitions: &[ResultPartitionId],
    subpartition: u32,
    settings: NetworkSettings,
    floor: Floor,
) -> InputGate {
    let local = ActorAddress::new("local", "taskmanager/tm");
    let descriptor = InputGateDeploymentDescriptor {
        edge: 0,
        subpartition,
        producers: Producers::own(
            partitions
                .iter()
                .map(|&partition| ProducerLocation {
                    partition,
                    task_manager: local.clone(),
                })
                .collect(),
        ),
    };
    InputGate::new(
        &[descriptor],
        &[],
        &NetworkClient::reading_locally(&local, store),
        store.clone(),
        settings,
        floor,
        Arc::default(),
        Arc::default(),
    )
    .unwrap()
}

/// Flink's credit model: a channel with a backlog borrows floating buffers up to the
/// gate's pool and gives them back as its backlog drains; the gate never holds more than
/// its exclusive buffers plus the pool.
#[actix::test]
async fn a_backlogged_channel_borrows_floating_buffers_and_gives_them_back() {
    let store = Arc::new(ResultPartitionManager::new(
        std::env::temp_dir(),
        usize::MAX,
    ));
    let (busy, quiet) = (partition(1), partition(2));
    store.create(busy, 1).unwrap();
    store.create(quiet, 1).unwrap();
    for i in 0..20 {
        let record = Record {
            key: format!("k{i}"),
            value: Value::Int(i),
        };
        store.append_records(busy, 0, vec![record]).unwrap();
    }
    store.append_records(quiet, 0, vec![]).unwrap();
    store.finish(busy).unwrap();
    store.finish(quiet).unwrap();
    let settings = NetworkSettings {
        buffers_per_channel: 2,
        floating_buffers_per_gate: 3,
        gate_window: 32 << 10,
        ..NetworkSettings::default()
    };
    let mut gate = local_gate(&store, &[busy, quiet], 0, settings);
    // The gate blocks its thread while it waits; the connection runs on this one.
    #[allow(clippy::disallowed_methods)] // the test plays the task runner
    let read = tokio::task::spawn_blocking(move || {
        let mut records = 0;
        let mut most_held = 0;
        while let Some(buffer) = gate.next_buffer(&ThreadBlocker).unwrap() {
            if records == 0 {
                // Two exclusive buffers read, a backlog of 18 reported: all three floating
                // ones lent.
                assert_eq!(gate.channels.get(0).unwrap().floating, 3);
                assert_eq!(gate.floating_free, 0);
            }
            records += buffer.records();
            // The one just handed out counts until the next call.
            most_held = most_held.max(gate.queue.len() + 1);
        }
        assert_eq!(records, 20);
        assert_eq!(
            most_held,
            2 + 3,
            "the busy channel's exclusive and floating buffers"
        );
        assert_eq!(gate.floating_free, 3, "every floating buffer came back");
        assert!(gate.channels.iter().all(|(_, c)| c.floating == 0));
        assert!(
            !gate.channels.contains(1),
            "the empty channel finished by its partition's notice, with no state of its own"
        );
    });
    read.await.unwrap();
}

/// Deployment is concurrent: a consumer's gate may start before its local producers have
/// created their partitions. Among 40 local producers created only after the gate started,
/// the one that writes is read straight from the store and the 39 that stay empty end by
/// their partitions' notices, with no state of their own.
#[actix::test]
async fn local_partitions_created_after_the_gate_are_read_or_end_by_notice() {
    let store = Arc::new(ResultPartitionManager::new(
        std::env::temp_dir(),
        usize::MAX,
    ));
    let partitions: Vec<ResultPartitionId> = (1..=40).map(partition).collect();
    let mut gate = local_gate(&store, &partitions, 1, NetworkSettings::default());
    #[allow(clippy::disallowed_methods)] // the test plays the task runner
    let read = tokio::task::spawn_blocking(move || {
        let mut keys = Vec::new();
        while let Some(buffer) = gate.next_buffer(&ThreadBlocker).unwrap() {
            let mut reader = buffer.reader();
            while let Some(record) = reader.next_record().unwrap() {
                keys.push(record.key);
            }
        }
        (keys, gate.channels.len())
    });
    for &id in &partitions {
        store.create_pipelined(id, 2, 10).unwrap();
    }
    let record = |key: &str| Record {
        key: key.to_owned(),
        value: Value::Int(1),
    };
    // Partition 7 writes to this gate's subpartition (1), partition 8 only to another one.
    store
        .append_records(partitions[7], 1, vec![record("a"), record("b")])
        .unwrap();
    store
        .append_records(partitions[8], 0, vec![record("elsewhere")])
        .unwrap();
    for &id in &partitions {
        store.finish(id).unwrap();
    }
    let (keys, with_state) = read.await.unwrap();
    assert_eq!(keys, ["a", "b"]);
    assert_eq!(
        with_state, 1,
        "only the channel that got data has state of its own"
    );
}

/// Issue 32 item 1 (FLIP-266's idea): a gate of 300 channels with data, whose exclusive credit
/// (2 per channel) would be 600 buffers, runs on its floor of 2 and the 2 buffers its
/// TaskManager lends: no channel has credit of its own, each is lent credit for its backlog,
/// and the gate never holds more than floor + lent while it reads all 900 buffers. Everything
/// lent goes back.
#[actix::test]
async fn a_wide_gate_reads_everything_within_its_floor_and_what_is_lent() {
    let store = Arc::new(ResultPartitionManager::new(
        std::env::temp_dir(),
        usize::MAX,
    ));
    let partitions: Vec<ResultPartitionId> = (1..=300).map(partition).collect();
    for (i, &id) in partitions.iter().enumerate() {
        store.create(id, 1).unwrap();
        for j in 0..3 {
            let record = Record {
                key: format!("{i}-{j}"),
                value: Value::Int(j),
            };
            store.append_records(id, 0, vec![record]).unwrap();
        }
        store.finish(id).unwrap();
    }
    let settings = NetworkSettings::default();
    // 8 buffers: 6 for floors, 2 to lend.
    let pool = NetworkBufferPool::new(8 * settings.buffer_size as u64, settings.buffer_size);
    let floor = pool.reserve(2).unwrap();
    let mut gate = local_gate_within(&store, &partitions, 0, settings, floor);
    assert_eq!(gate.budget.exclusive, 0, "the floating mode");
    let watched = pool.clone();
    #[allow(clippy::disallowed_methods)] // the test plays the task runner
    let read = tokio::task::spawn_blocking(move || {
        let (mut records, mut most_held, mut most_lent) = (0, 0, 0);
        while let Some(buffer) = gate.next_buffer(&ThreadBlocker).unwrap() {
            records += buffer.records();
            let lent: u32 = gate.channels.iter().map(|(_, c)| c.floating).sum();
            most_lent = most_lent.max(lent + gate.floating_free);
            // The one just handed out counts until the next call.
            most_held = most_held.max(gate.queue.len() + 1);
            assert!(watched.usage().lent <= 2);
        }
        assert_eq!(
            gate.floating_free, 2,
            "the floor is back, the lent ones returned"
        );
        (records, most_held, most_lent)
    });
    let (records, most_held, most_lent) = read.await.unwrap();
    assert_eq!(records, 900);
    assert!(most_held <= 4, "held {most_held} > floor 2 + lent 2");
    assert_eq!(most_lent, 4, "it borrowed what the pool lends");
    assert_eq!(pool.usage().lent, 0, "every lent buffer went back");
    assert_eq!(pool.usage().peak_lent, 2);
}

/// Issue 32 (P = 1,000 on defaults): a gate in the floating mode reading 200 channels of
/// another TaskManager, whose producers write a small buffer each, 40 at a time, each batch once
/// the gate read the last. They are sent without credit within the eager allowance (one buffer
/// of its floor, 40 of those buffers), and as the gate consumes them it gives the bytes back, so
/// every batch goes that way, not only the first; it never holds more than the allowance of
/// them, and the floor's other buffer floats. Everything is read and everything lent goes back.
#[actix::test]
async fn a_wide_gate_gives_back_what_its_producers_sent_without_credit() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    const BATCH: usize = 40;
    let dir = std::env::temp_dir().join(format!("flint-eager-gate-{}", std::process::id()));
    let store = Arc::new(ResultPartitionManager::new(dir.clone(), usize::MAX));
    let partitions: Vec<ResultPartitionId> = (1..=200).map(partition).collect();
    for &id in &partitions {
        store.create_pipelined(id, 1, 10).unwrap();
    }
    let record = |i: usize| Record {
        key: format!("{i:03}"),
        value: Value::Int(1),
    };
    let size = crate::exchange::buffer::Buffer::from(vec![record(0)]).len();
    let settings = NetworkSettings {
        buffer_size: size * BATCH,
        ..NetworkSettings::default()
    };
    let pool = NetworkBufferPool::new(8 * settings.buffer_size as u64, settings.buffer_size);
    let floor = pool.reserve(2).unwrap();
    let (here, there) = (
        ActorAddress::new("local", "taskmanager/tm-consumer"),
        ActorAddress::new("local", "taskmanager/tm-producer"),
    );
    let server = Arc::new(crate::exchange::server::PartitionRequestServer::default());
    let network = NetworkClient::new(here, crate::base::rng::NodeRng::seed_from_u64(1));
    let drive = network
        .connect(&there, Peer::Local(server.clone(), store.clone()))
        .expect("a new connection");
    actix::spawn(drive);
    let descriptor = InputGateDeploymentDescriptor {
        edge: 0,
        subpartition: 0,
        producers: Producers::own(
            partitions
                .iter()
                .map(|&partition| ProducerLocation {
                    partition,
                    task_manager: there.clone(),
                })
                .collect(),
        ),
    };
    let cancellation = Arc::new(Cancellation::default());
    let mut gate = InputGate::new(
        &[descriptor],
        &[],
        &network,
        store.clone(),
        settings,
        floor,
        cancellation.clone(),
        Arc::default(),
    )
    .unwrap();
    assert_eq!(gate.budget.exclusive, 0, "the floating mode");
    assert_eq!(gate.eager, (size * BATCH) as u64, "one buffer of the floor");
    assert_eq!(gate.floating_free, 1, "the other floats");
    let read = Arc::new(AtomicUsize::new(0));
    let counted = read.clone();
    #[allow(clippy::disallowed_methods)] // the test plays the task runner
    let reader = tokio::task::spawn_blocking(move || {
        let mut most_eager = 0;
        while let Some(buffer) = gate.next_buffer(&ThreadBlocker).unwrap() {
            counted.fetch_add(buffer.records() as usize, Ordering::SeqCst);
            // The one just handed out counts until the next call.
            let held: usize = gate
                .queue
                .iter()
                .filter(|(_, _, eager)| eager.is_some())
                .map(|(_, buffer, _)| buffer.len())
                .sum();
            most_eager = most_eager.max(held + buffer.len());
        }
        assert_eq!(gate.floating_free, 1, "the floor is back");
        let eager: u64 = gate.groups.iter().map(|group| group.eager_returned).sum();
        (eager, most_eager)
    });
    for (batch, ids) in partitions.chunks(BATCH).enumerate() {
        for (i, &id) in ids.iter().enumerate() {
            store
                .append_records(id, 0, vec![record(batch * BATCH + i)])
                .unwrap();
        }
        // Read, and every byte given back.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while read.load(Ordering::SeqCst) < (batch + 1) * BATCH || server.eager_out() > 0 {
            if tokio::time::Instant::now() >= deadline {
                cancellation.cancel(); // the reader thread ends too
                panic!(
                    "batch {batch}: read {}, {} eager bytes out",
                    read.load(Ordering::SeqCst),
                    server.eager_out()
                );
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    for &id in &partitions {
        store.finish(id).unwrap();
    }
    let (eager, most_eager) = reader.await.unwrap();
    assert_eq!(
        eager,
        (size * partitions.len()) as u64,
        "every buffer went without credit"
    );
    assert!(most_eager <= size * BATCH, "held {most_eager} eager bytes");
    assert_eq!(pool.usage().lent, 0, "every lent buffer went back");
    for &id in &partitions {
        store.release(id);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A gate of few channels asks for `gate-window` in all, granted while at most half of the
/// lent quarter is out with it (and what it borrows is at most a sixteenth of the quarter);
/// past that it has `floating-buffers-per-gate`, and a wide gate floats as before. Every
/// buffer comes back when the gates go.
#[test]
fn a_gate_of_few_channels_gets_the_wide_window_while_half_the_lent_quarter_is_free() {
    use crate::exchange::buffer_pool::NetworkBufferPool;

    use super::credit::GateBudget;

    let settings = NetworkSettings::default();
    assert_eq!(settings.gate_window / settings.buffer_size as u64, 128);
    // The default 512 MiB of 32 KiB buffers: 12,288 for floors, 4,096 lent (half: 2,048).
    let pool = NetworkBufferPool::new(settings.memory, settings.buffer_size);
    let floor = || pool.reserve(2).unwrap();
    // Two channels: 128 − 2 × 2 = 124 floating; the floor's 2 of the 128 are not borrowed.
    let mut gates = Vec::new();
    loop {
        let (gate, floating) = GateBudget::new(floor(), &settings, 2);
        assert_eq!(gate.exclusive, 2);
        gates.push(gate);
        if floating != 124 {
            // The 17th would pass half of the lent quarter: Flink's window.
            assert_eq!(floating, 8);
            break;
        }
    }
    assert_eq!(gates.len(), 17);
    assert_eq!(pool.usage().lent, 16 * 126 + 10);
    // 200 channels fill the window with exclusive buffers alone, and the 406 buffers they lack
    // are more than a sixteenth of the lent quarter: the floating mode.
    let (wide, _) = GateBudget::new(floor(), &settings, 200);
    assert_eq!(wide.exclusive, 0);
    drop((gates, wide));
    assert_eq!(pool.usage().lent, 0);
    // A window no wider than Flink's: Flink's.
    let narrow = NetworkSettings {
        gate_window: 320 << 10,
        ..settings
    };
    let (gate, floating) = GateBudget::new(floor(), &narrow, 2);
    assert_eq!((gate.exclusive, floating), (2, 8));
}
