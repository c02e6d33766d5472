use super::*;

/// The end notices of many partitions that each list most subpartitions with data go out
/// over several answers, each within [`NOTICE_BYTES`] encoded, in order, none lost: at
/// P = 10,000 one answer carrying all of them was over the transport's largest message
/// (issue 32).
#[test]
fn notices_go_out_over_answers_within_the_transport_limit() {
    let mut notices: Vec<PartitionNotice> = (0..2_500u32)
        .map(|member| PartitionNotice {
            set: u32::MAX - member,
            member: u32::MAX - member,
            end: if member % 100 == 7 {
                PartitionEnd::Failed("x".repeat(500))
            } else {
                PartitionEnd::Finished {
                    with_data: (0..1_800).map(|s| u32::MAX - 1_800 + s).collect(),
                }
            },
        })
        .collect();
    let queued = notices.clone();
    let mut sent = Vec::new();
    let mut answers = 0;
    while !notices.is_empty() {
        let answer = next_notices(&mut notices, NOTICE_BYTES);
        let encoded = crate::base::codec::encode(&answer).unwrap().len();
        assert!(encoded <= NOTICE_BYTES, "answer {answers}: {encoded} bytes");
        answers += 1;
        sent.extend(answer);
    }
    assert!(answers > 1);
    assert_eq!(sent, queued);
}

mod eager {
    use std::sync::Arc;

    use super::*;
    use crate::base::ids::ExecutionAttemptId;
    use crate::exchange::buffer::Buffer;
    use crate::operators::{Record, Value};

    const CONNECTION: u128 = 1;

    fn consumer() -> ActorAddress {
        ActorAddress::new("local", "taskmanager/tm-consumer")
    }

    pub(super) fn requests(round: u64, requests: Vec<PartitionRequest>) -> PartitionRequests {
        PartitionRequests {
            consumer: consumer(),
            connection: DataConnectionId::from_u128(CONNECTION),
            round,
            requests,
        }
    }

    pub(super) fn poll(poll: u64, received: u64) -> PollPartitionData {
        PollPartitionData {
            consumer: consumer(),
            connection: DataConnectionId::from_u128(CONNECTION),
            poll,
            received,
            acknowledged: 1,
        }
    }

    /// A server with one set of `p` partitions of one subpartition each (created in `store`),
    /// which the reader `7 << 32` subscribes without credit and with `eager` bytes of
    /// allowance: the partitions and the server.
    pub(super) fn one_set(
        store: &ResultPartitionManager,
        p: u32,
        eager: u32,
    ) -> (Vec<ResultPartitionId>, PartitionRequestServer) {
        subscribed_set(store, p, 0, eager)
    }

    /// [`one_set`], subscribed with `credit` buffers for each channel.
    pub(super) fn subscribed_set(
        store: &ResultPartitionManager,
        p: u32,
        credit: u32,
        eager: u32,
    ) -> (Vec<ResultPartitionId>, PartitionRequestServer) {
        let partitions: Vec<ResultPartitionId> = (0..p)
            .map(|i| ResultPartitionId {
                producer: ExecutionAttemptId::from_u128(100 + u128::from(i)),
                edge: 0,
            })
            .collect();
        for &p in &partitions {
            store.create(p, 1).unwrap();
        }
        let server = PartitionRequestServer::new(NOTICE_BYTES);
        server.apply(
            store,
            requests(
                1,
                vec![
                    PartitionRequest::Set {
                        set: 1,
                        edge: 0,
                        members: Arc::new(partitions.clone()),
                    },
                    PartitionRequest::SubscribeSet {
                        channels: 7 << 32,
                        set: 1,
                        subpartition: 0,
                        credit,
                        eager,
                    },
                ],
            ),
        );
        (partitions, server)
    }

    /// The server's side of the consumer's connection.
    pub(super) fn connection(server: &PartitionRequestServer) -> Arc<ServerConnection> {
        server.connection(consumer(), DataConnectionId::from_u128(CONNECTION))
    }

    /// A buffer of one small record.
    pub(super) fn one_record() -> Buffer {
        vec![Record {
            key: "k".into(),
            value: Value::Int(1),
        }]
        .into()
    }

    /// What one answer sent: the eager bytes it took, the channels sent without credit, and
    /// those that announced a backlog instead (channels sent within credit are left out).
    fn sent(answer: &PartitionData) -> (u64, Vec<u64>, Vec<u64>) {
        let (mut eager, mut with_data, mut announced) = (0, Vec::new(), Vec::new());
        for (key, response) in &answer.channels {
            let ChannelResponse::Data {
                buffers,
                eager: taken,
                backlog,
                ..
            } = response
            else {
                panic!("{response:?}");
            };
            if buffers.is_empty() {
                assert!(*backlog > 0, "{response:?}");
                announced.push(*key);
            } else if *taken > 0 {
                let bytes: usize = buffers.iter().map(Buffer::len).sum();
                assert_eq!(*taken, bytes as u64, "an eager answer takes what it sends");
                eager += taken;
                with_data.push(*key);
            }
        }
        (eager, with_data, announced)
    }

    /// Issue 32 (P = 1,000 on defaults): a gate without credit of its own gives its set
    /// subscription a few bytes; the producer sends each channel's first small buffer within
    /// them at once, with no backlog announcement and credit first; once they are used up
    /// the others announce their backlog as before; what the gate gives back is sent again;
    /// and an answer lost on the way is sent again as it was. Never more than the allowance
    /// is out at a time.
    #[actix::test]
    async fn small_first_buffers_go_without_credit_within_the_eager_allowance() {
        tokio::time::pause();
        const P: u32 = 40;
        let dir = std::env::temp_dir().join(format!("flint-eager-{}", std::process::id()));
        let store = Arc::new(ResultPartitionManager::new(dir.clone(), usize::MAX));
        let buffer = |i: u32| -> Buffer {
            vec![Record {
                key: format!("k{i:02}"),
                value: Value::Int(i64::from(i)),
            }]
            .into()
        };
        let size = buffer(0).len() as u64;
        // Room for 10 channels' buffers and a half.
        let allowance = size * 10 + size / 2;
        let (partitions, server) = one_set(&store, P, u32::try_from(allowance).unwrap());
        let reader = 7 << 32;
        for (i, &p) in partitions.iter().enumerate() {
            store.append(p, 0, buffer(i as u32)).unwrap();
        }
        let first = server.poll(store.clone(), poll(1, 0)).await;
        let (eager, with_data, announced) = sent(&first);
        assert_eq!(eager, size * 10, "as many buffers as the allowance holds");
        assert_eq!(with_data.len(), 10);
        assert_eq!(announced.len(), P as usize - 10, "the others announce");

        // The answer was lost: the next poll says so, and it is served again, in full.
        let again = server.poll(store.clone(), poll(2, 0)).await;
        let (eager, with_data_again, _) = sent(&again);
        assert_eq!(eager, size * 10, "the lost answer's bytes came back");
        assert_eq!(with_data_again, with_data);

        // Nothing more fits until the gate gives bytes back.
        for &key in &with_data_again {
            let member = u32::try_from(key - reader).unwrap();
            store
                .append(partitions[member as usize], 0, buffer(member))
                .unwrap();
        }
        let full = server.poll(store.clone(), poll(3, again.seq)).await;
        let (eager, _, announced) = sent(&full);
        assert_eq!(eager, 0, "the allowance is out");
        assert_eq!(announced.len(), 10);

        // Those ten are lent credit for their backlog and use it.
        let grants = announced
            .iter()
            .map(|&channel| PartitionRequest::Credit {
                channel,
                granted: 1,
            })
            .collect();
        server.apply(&store, requests(2, grants));
        let granted = server.poll(store.clone(), poll(4, full.seq)).await;
        let (eager, _, announced) = sent(&granted);
        assert_eq!((eager, announced.len()), (0, 0), "{granted:?}");
        assert_eq!(granted.channels.len(), 10, "sent within credit");

        // The gate consumed five buffers sent without credit: five of the next ones go.
        server.apply(
            &store,
            requests(
                3,
                vec![PartitionRequest::EagerReturned {
                    channels: reader,
                    returned: size * 5,
                }],
            ),
        );
        for &key in &with_data_again {
            let member = u32::try_from(key - reader).unwrap();
            store
                .append(partitions[member as usize], 0, buffer(member))
                .unwrap();
        }
        let returned = server.poll(store.clone(), poll(5, granted.seq)).await;
        let (eager, with_data, announced) = sent(&returned);
        assert_eq!(eager, size * 5, "what was given back is sent again");
        assert_eq!((with_data.len(), announced.len()), (5, 5));
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// Issue 32 (P = 10,000): channels without data (backlog announcements, failures of cancelled
/// producers with their reasons) count toward an answer's size as its data does. Counting only
/// data, one answer grew to 44 MB, over the transport's 16 MiB limit, and was never sent. Now
/// each answer's channels stay within [`CHANNEL_BYTES`] besides their data, every channel is
/// answered once over several answers, and a long reason is cut (the notice has it whole).
#[actix::test]
async fn answers_of_many_channels_without_data_stay_within_the_transport_limit() {
    use std::collections::BTreeSet;

    use eager::{one_record, one_set, poll};

    tokio::time::pause();
    const P: u32 = 20_000;
    let dir = std::env::temp_dir().join(format!("flint-answer-size-{}", std::process::id()));
    let store = Arc::new(ResultPartitionManager::new(dir.clone(), usize::MAX));
    let (partitions, server) = one_set(&store, P, 0);
    for (i, &p) in partitions.iter().enumerate() {
        store.append(p, 0, one_record()).unwrap();
        if i % 4 == 0 {
            store.fail(p, "a long reason ".repeat(250)).unwrap();
        }
    }
    let (mut answered, mut failed, mut answers, mut received) = (BTreeSet::new(), 0, 0, 0);
    while answered.len() < P as usize {
        answers += 1;
        assert!(answers < 100, "{} channels answered", answered.len());
        let answer = server.poll(store.clone(), poll(answers, received)).await;
        received = answer.seq;
        let channels = crate::base::codec::encode(&answer.channels).unwrap().len();
        assert!(
            channels <= CHANNEL_BYTES,
            "answer {answers}: {channels} bytes of channels"
        );
        for (key, response) in &answer.channels {
            assert!(answered.insert(*key), "channel {key} answered twice");
            match response {
                ChannelResponse::Failed(reason) => {
                    assert!(
                        reason.len() <= 1024 && reason.ends_with(" [...]"),
                        "{reason}"
                    );
                    failed += 1;
                }
                ChannelResponse::Data {
                    buffers, backlog, ..
                } => assert!(buffers.is_empty() && *backlog == 1, "{response:?}"),
                other => panic!("{other:?}"),
            }
        }
    }
    assert!(answers > 2, "{answers} answers");
    assert_eq!(failed, P / 4);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 32: a poll that finds the last answer lost while the poll that made it still takes its
/// buffers (from disk, on the I/O threads) waits for them and sends that answer: not an empty
/// one, and not a second reading of buffers that moved out with the first.
#[actix::test]
async fn a_poll_after_a_lost_answer_waits_for_its_buffers_and_sends_it() {
    use eager::{one_record, one_set, poll};

    tokio::time::pause();
    let dir = std::env::temp_dir().join(format!("flint-resend-{}", std::process::id()));
    let store = Arc::new(ResultPartitionManager::new(dir.clone(), usize::MAX));
    let (_, server) = one_set(&store, 1, 0);
    let connection = eager::connection(&server);
    // Poll 1 made answer 1 and is still reading its buffers.
    {
        let mut state = lock(&connection.state);
        (state.poll, state.seq) = (1, 1);
    }
    let answer = PartitionData {
        seq: 1,
        channels: vec![(
            7 << 32,
            ChannelResponse::Data {
                buffers: vec![one_record()],
                next_buffer: 1,
                finished: false,
                backlog: 0,
                eager: 0,
            },
        )],
        notices: Vec::new(),
        forgotten: false,
    };
    let read = async {
        tokio::time::sleep(FETCH_HOLD / 2).await;
        lock(&connection.state).sent = Some(answer.clone());
        connection.answered.notify_waiters();
    };
    let (again, ()) = tokio::join!(server.poll(store.clone(), poll(2, 0)), read);
    assert_eq!(again, answer);
    // Never stored (the reading poll gone): empty after the hold, and the consumer asks again.
    lock(&connection.state).sent = None;
    let empty = server.poll(store.clone(), poll(3, 0)).await;
    assert!(
        empty.channels.is_empty() && empty.notices.is_empty(),
        "{empty:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A cancelled set subscription takes every subscription of its channels still served with
/// it, and only those: it looks for as many as it counted (its `live`), so a channel's
/// subscription made or dropped without the count would outlive its gate here.
#[actix::test]
async fn a_cancelled_set_leaves_no_subscription_of_its_channels() {
    use eager::{one_record, one_set, poll, requests};

    tokio::time::pause();
    let dir = std::env::temp_dir().join(format!("flint-cancel-set-{}", std::process::id()));
    let store = Arc::new(ResultPartitionManager::new(dir.clone(), usize::MAX));
    let (partitions, server) = one_set(&store, 6, 0);
    let reader: u64 = 7 << 32;
    // Four of the six get data; without credit each announces its backlog.
    for &partition in &partitions[..4] {
        store.append(partition, 0, one_record()).unwrap();
    }
    let announced = server.poll(store.clone(), poll(1, 0)).await;
    assert_eq!(announced.channels.len(), 4, "{announced:?}");
    // Two of them get credit and their end: served to the end, their subscriptions go.
    for &partition in &partitions[..2] {
        store.finish(partition).unwrap();
    }
    let grants = (0..2)
        .map(|member| PartitionRequest::Credit {
            channel: reader + member,
            granted: 1,
        })
        .collect();
    server.apply(&store, requests(2, grants));
    let served = server.poll(store.clone(), poll(2, announced.seq)).await;
    let ended: Vec<u64> = served
        .channels
        .iter()
        .filter(|(_, response)| matches!(response, ChannelResponse::Data { finished: true, .. }))
        .map(|(key, _)| *key)
        .collect();
    assert_eq!(ended, [reader, reader + 1], "{served:?}");
    let connection = eager::connection(&server);
    {
        let state = lock(&connection.state);
        let mut keys: Vec<u64> = state.subscriptions.keys().copied().collect();
        keys.sort_unstable();
        assert_eq!(keys, [reader + 2, reader + 3]);
        assert_eq!(state.readers[&reader].live, 2);
    }
    server.apply(
        &store,
        requests(3, vec![PartitionRequest::CancelSet { channels: reader }]),
    );
    let state = lock(&connection.state);
    assert!(state.subscriptions.is_empty(), "{:?}", state.subscriptions);
    assert!(state.readers.is_empty());
    drop(state);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A channel whose credit outruns what one answer carries is queued once, however many grants
/// come: it was queued again with each grant, every copy kept while the answer's budget ran
/// out first, and each poll walked all of them (a gate of few channels with many floating
/// buffers reading a blocking partition: 4 % of the TaskManager's CPU in `serve_key`).
#[actix::test]
async fn a_channel_is_queued_once_however_many_grants_come() {
    use crate::operators::{Record, Value};
    use eager::{poll, requests};

    tokio::time::pause();
    let dir = std::env::temp_dir().join(format!("flint-queued-once-{}", std::process::id()));
    let store = Arc::new(ResultPartitionManager::new(dir.clone(), usize::MAX));
    let channel: u64 = 7 << 32;
    let mut granted = 1_000;
    let (partitions, server) = eager::subscribed_set(&store, 1, granted, 0);
    // 64 buffers of 64 KiB: four answers' worth.
    for i in 0..64 {
        let buffer = vec![Record {
            key: format!("k{i}"),
            value: Value::Text("x".repeat(64 << 10)),
        }]
        .into();
        store.append(partitions[0], 0, buffer).unwrap();
    }
    let connection = eager::connection(&server);
    let (mut received, mut buffers) = (0, 0);
    for round in 1..=3u64 {
        let answer = server.poll(store.clone(), poll(round, received)).await;
        received = answer.seq;
        let [(key, ChannelResponse::Data { buffers: got, .. })] = &answer.channels[..] else {
            panic!("{answer:?}");
        };
        assert_eq!(*key, channel);
        assert!(
            got.len() < 64,
            "one answer carries at most about a megabyte"
        );
        buffers += got.len();
        // Grants while the channel is queued, more than the answers' budget takes.
        for grant in 0..5 {
            granted += 10;
            server.apply(
                &store,
                requests(
                    1 + round * 5 + grant,
                    vec![PartitionRequest::Credit {
                        channel,
                        granted: u64::from(granted),
                    }],
                ),
            );
            assert_eq!(connection.ready.keys_queued(), 1, "round {round}");
        }
    }
    assert!(buffers > 0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A store spilling everything, with one finished partition of 24 buffers of 100 KB (about
/// two answers' data and a bit) each holding one record numbered by its place, subscribed
/// with credit for all: the store, the server, its directory and the partition.
fn spilled_channel(
    name: &str,
) -> (
    Arc<ResultPartitionManager>,
    PartitionRequestServer,
    std::path::PathBuf,
    ResultPartitionId,
) {
    use crate::operators::{Record, Value};

    let dir = std::env::temp_dir().join(format!("flint-{name}-{}", std::process::id()));
    let store = Arc::new(ResultPartitionManager::new(dir.clone(), 0));
    let (partitions, server) = eager::subscribed_set(&store, 1, 1_000, 0);
    for i in 0..24 {
        let buffer = vec![Record {
            key: format!("{i}"),
            value: Value::Text("x".repeat(100_000)),
        }]
        .into();
        store.append(partitions[0], 0, buffer).unwrap();
    }
    store.finish(partitions[0]).unwrap();
    (store, server, dir, partitions[0])
}

/// The keys of the records of one answer's only channel, and whether it ended.
fn keys_answered(answer: &PartitionData) -> (Vec<String>, bool) {
    let [
        (
            _,
            ChannelResponse::Data {
                buffers, finished, ..
            },
        ),
    ] = &answer.channels[..]
    else {
        panic!("{answer:?}");
    };
    let keys = buffers
        .iter()
        .flat_map(|buffer| buffer.to_records().unwrap())
        .map(|record| record.key)
        .collect();
    (keys, *finished)
}

/// Issue 32: an answer that takes a blocking channel's spilled buffers reads the next
/// answer's at once. Shown here by deleting the spill file after the first answer: the second
/// still has its buffers, in order, and only the third (read ahead from a file gone, then read
/// again by the poll) fails, naming the file it could not read.
#[actix::test]
async fn the_next_answer_of_a_spilled_channel_is_read_ahead() {
    use eager::poll;

    let (store, server, dir, _) = spilled_channel("read-ahead");
    let first = server.poll(store.clone(), poll(1, 0)).await;
    let (keys, finished) = keys_answered(&first);
    assert!(
        !finished && keys.len() < 24,
        "one answer carries about a megabyte"
    );
    let expected: Vec<String> = (0..keys.len()).map(|i| i.to_string()).collect();
    assert_eq!(keys, expected);
    for file in std::fs::read_dir(&dir).unwrap() {
        std::fs::remove_file(file.unwrap().path()).unwrap();
    }
    let second = server.poll(store.clone(), poll(2, first.seq)).await;
    let (more, _) = keys_answered(&second);
    let expected: Vec<String> = (keys.len()..keys.len() + more.len())
        .map(|i| i.to_string())
        .collect();
    assert!(!more.is_empty());
    assert_eq!(more, expected, "read ahead, before the file went");
    let third = server.poll(store.clone(), poll(3, second.seq)).await;
    let [(_, ChannelResponse::Failed(reason))] = &third.channels[..] else {
        panic!("{third:?}");
    };
    assert!(reason.contains("cannot read"), "{reason}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Buffers read ahead never outlive what the next poll plans: a partition released after an
/// answer answers the next poll released, whatever was read ahead for it; and with nothing
/// read ahead (credit for one buffer, so no answer takes more), every buffer still comes, in
/// order.
#[actix::test]
async fn buffers_read_ahead_go_only_where_the_next_plan_puts_them() {
    use eager::{poll, requests};

    let (store, server, dir, partition) = spilled_channel("read-ahead-released");
    let first = server.poll(store.clone(), poll(1, 0)).await;
    assert!(!keys_answered(&first).0.is_empty());
    assert!(store.release(partition));
    let second = server.poll(store.clone(), poll(2, first.seq)).await;
    assert!(
        matches!(&second.channels[..], [(_, ChannelResponse::Released)]),
        "{second:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);

    // Credit one buffer at a time: each answer takes the next one, whatever was read ahead.
    let (store, server, dir, _) = spilled_channel("read-ahead-credit");
    let (mut received, mut keys, mut granted) = (0, Vec::new(), 1_000);
    for round in 1.. {
        let answer = server.poll(store.clone(), poll(round, received)).await;
        received = answer.seq;
        let (got, finished) = keys_answered(&answer);
        keys.extend(got);
        if finished {
            break;
        }
        assert!(round < 100, "it ends");
        // Shrink the answers: credit only for what was taken and one more.
        granted = keys.len() as u32 + 1;
        server.apply(
            &store,
            requests(
                1 + round,
                vec![PartitionRequest::Credit {
                    channel: 7 << 32,
                    granted: u64::from(granted),
                }],
            ),
        );
    }
    let expected: Vec<String> = (0..24).map(|i| i.to_string()).collect();
    assert_eq!(keys, expected);
    assert!(granted < 1_000);
    let _ = std::fs::remove_dir_all(&dir);
}
