//! Issue 32 item 4: the TaskManager actor hands its disk reads and deletes to the I/O threads.

use std::sync::Arc;

use super::*;

/// Issue 32 item 4: serving spilled data reads the disk on the I/O threads, not on the actor's
/// thread. Here the disk takes as long as the test wants ([`HeldIo`]): while a poll waits for
/// its spilled buffers, the TaskManager heartbeats and answers as usual; when the reads run,
/// the poll is answered with the data, and a release frees the spill budget at once while the
/// files' deletion waits for the I/O threads too.
#[actix::test]
async fn heartbeats_go_on_while_a_poll_waits_for_its_spilled_buffers_on_the_io_threads() {
    use crate::base::ids::{DataConnectionId, ExecutionAttemptId};
    use crate::exchange::partition::tests::AppendRecords;
    use crate::messages::ResultPartitionId;
    use crate::messages::task_manager::{
        ChannelResponse, PartitionRequest, PartitionRequests, PollPartitionData,
    };
    use crate::operators::{Record, Value};

    tokio::time::pause();
    let io = Arc::new(HeldIo::default());
    let mut env = env("tm-node", 9);
    env.task_runner = Arc::new(HeldIoRunner::new(io.clone()));
    let jm = JobManagerProbeHandle::start(&env, "jobmanager", SESSION);
    let work = std::env::temp_dir().join(format!("flint-held-io-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    let mut spec = spec(1, "host-a");
    spec.spill_threshold_bytes = 0;
    spec.working_dir = work.clone();
    let manager = TaskManager::new(
        TaskManagerSettings {
            resource_id: ResourceId::new("tm-1"),
            job_manager: Some(Leader {
                address: jm.address.clone(),
                retrieved_session: Some(SESSION),
            }),
            spec,
        },
        env.clone(),
    );
    let store = manager.partitions.clone();
    let tm = manager.start();
    settle().await;
    let f = Fixture { tm, jm, env };

    // A finished blocking partition, every buffer on disk.
    let id = ResultPartitionId {
        producer: ExecutionAttemptId::from_u128(41),
        edge: 0,
    };
    store.create(id, 1).unwrap();
    let records: Vec<Vec<Record>> = (0..3)
        .map(|i| {
            vec![Record {
                key: format!("k{i}"),
                value: Value::Int(i),
            }]
        })
        .collect();
    for buffer in &records {
        store.append_records(id, 0, buffer.clone()).unwrap();
    }
    store.finish(id).unwrap();
    assert_eq!(store.stats(id).unwrap().spilled_buffers, 3);

    let consumer = ActorAddress::new("local", "taskmanager/tm-consumer");
    let connection = DataConnectionId::from_u128(1);
    ask(
        &f.tm,
        PartitionRequests {
            consumer: consumer.clone(),
            connection,
            round: 1,
            requests: vec![
                PartitionRequest::Set {
                    set: 1,
                    edge: 0,
                    members: Arc::new(vec![id]),
                },
                PartitionRequest::SubscribeSet {
                    channels: 7,
                    set: 1,
                    subpartition: 0,
                    credit: 10,
                    eager: 0,
                },
            ],
        },
    )
    .await;
    let (answered, mut answer) = tokio::sync::oneshot::channel();
    let poll = f.tm.send(PollPartitionData {
        consumer,
        connection,
        poll: 1,
        received: 0,
        acknowledged: 1,
    });
    actix::spawn(async move {
        let _ = answered.send(poll.await.expect("the TaskManager answers"));
    });
    let heartbeats = f.heartbeats();
    advance(1_000).await;
    assert_eq!(io.held(), 1, "the poll's read went to the I/O threads");
    assert!(
        answer.try_recv().is_err(),
        "the poll is answered only once its buffers are read"
    );
    let sent = f.heartbeats() - heartbeats;
    assert!((9..=11).contains(&sent), "{sent} heartbeats in 1 s");
    assert_eq!(ask(&f.tm, GetTaskManagerStatus).await.slots_total, 1);

    io.run_held();
    let data = answer.await.expect("the poll is answered");
    match &data.channels[..] {
        [
            (
                7,
                ChannelResponse::Data {
                    buffers, finished, ..
                },
            ),
        ] => {
            assert_eq!(buffers, &records);
            assert!(finished);
        }
        other => panic!("{other:?}"),
    }

    // A release frees the budget at once; the file goes when the I/O threads get to it.
    let files = || std::fs::read_dir(store.working_dir()).map_or(0, Iterator::count);
    assert_eq!(files(), 1);
    // (What the actor's `ReleasePartitions` handler calls; the partition was not deployed here.)
    assert!(store.release(id));
    assert_eq!(store.spill_usage().live, 0);
    assert_eq!(
        (io.held(), files()),
        (1, 1),
        "the delete waits for the I/O threads"
    );
    io.run_held();
    assert_eq!(files(), 0);
    let _ = std::fs::remove_dir_all(&work);
}
