//! The connection state shared by gates, under real threads.

use std::sync::Barrier;

use crate::messages::subpartition_set::SubpartitionSet;

use super::*;

/// Issue 32: a gate joining a shared set while its last other reader leaves must never end up
/// reading a set the connection forgot (the producer then serves it nothing and the gate waits
/// for ever). Each round a joiner and a leaver start together on two threads while the test
/// holds the set's lock, so both reach it before either passes (the interleaving a preemption
/// makes rare in production); then a joined gate's set must still be the connection's. With
/// `join_set` releasing the connection's lock before it adds the gate to the set, a few rounds
/// in a thousand lose their set (2 and 6 of 2,000 in two runs), so 10,000 rounds catch it.
#[test]
#[allow(clippy::disallowed_methods)] // real threads are the point of the test
fn a_gate_joining_a_set_its_last_reader_leaves_never_reads_a_forgotten_set() {
    const ROUNDS: u32 = 10_000;
    let local = ActorAddress::new("local", "taskmanager/tm-1");
    let network = NetworkClient::new(local.clone(), NodeRng::seed_from_u64(1));
    let connection = Arc::new(PartitionRequestClient {
        address: local,
        state: Mutex::default(),
        wake: tokio::sync::Notify::new(),
    });
    let members = Arc::new(vec![ResultPartitionId {
        producer: crate::base::ids::ExecutionAttemptId::from_u128(1),
        edge: 0,
    }]);
    let start = Arc::new(Barrier::new(3));
    let mut lost = 0;
    for round in 0..ROUNDS {
        let list = Some(ProducerListId::from_u128(u128::from(round) + 1));
        let (leaver, joiner) = (2 * round + 1, 2 * round + 2);
        let (set, _) = connection.join_set(list, 0, &members, leaver, 0, 0);
        let held = lock(&set.state);
        let leave = {
            let (network, connection, start, set) = (
                network.clone(),
                connection.clone(),
                start.clone(),
                set.clone(),
            );
            std::thread::spawn(move || {
                start.wait();
                network.unregister_gate(leaver, vec![(connection, Vec::new(), vec![set])]);
            })
        };
        let join = {
            let (connection, start, members) = (connection.clone(), start.clone(), members.clone());
            std::thread::spawn(move || {
                start.wait();
                connection.join_set(list, 0, &members, joiner, 0, 0).0
            })
        };
        start.wait();
        // Let both threads run up to the set's lock before it is released.
        for _ in 0..50 {
            std::thread::yield_now();
        }
        drop(held);
        leave.join().unwrap();
        let joined = join.join().unwrap();
        let state = lock(&connection.state);
        let served = state
            .sets
            .get(&joined.number)
            .is_some_and(|known| Arc::ptr_eq(known, &joined));
        drop(state);
        if !served {
            lost += 1;
        }
        // The joiner leaves too, so the next round starts from an empty connection.
        network.unregister_gate(joiner, vec![(connection.clone(), Vec::new(), vec![joined])]);
        lock(&connection.state).pending.clear();
    }
    assert_eq!(
        lost, 0,
        "{lost} of {ROUNDS} joined gates read a forgotten set"
    );
}

/// Issue 32: gates that join a set late share one list of how its members ended (and each
/// end its one list of subpartitions with data) until news comes: at P = 10,000 each of a
/// TaskManager's 2,500 gates joined after most of 2,500 producers there had ended and copied
/// their ends, lists included — O(P²) bytes, half of the job's time in page faults. News makes
/// a fresh list, which the gates joining after it share.
#[test]
fn gates_joining_a_set_late_share_how_its_members_ended() {
    const MEMBERS: u32 = 1_000;
    let local = ActorAddress::new("local", "taskmanager/tm-1");
    let network = NetworkClient::new(local.clone(), NodeRng::seed_from_u64(1));
    let connection = PartitionRequestClient {
        address: local,
        state: Mutex::default(),
        wake: tokio::sync::Notify::new(),
    };
    let members: Arc<Vec<ResultPartitionId>> = Arc::new(
        (0..MEMBERS)
            .map(|i| ResultPartitionId {
                producer: crate::base::ids::ExecutionAttemptId::from_u128(u128::from(i) + 1),
                edge: 0,
            })
            .collect(),
    );
    let list = Some(ProducerListId::from_u128(7));
    let (set, ended) = connection.join_set(list, 0, &members, 1, 0, 0);
    assert!(ended.is_empty());
    let with_data: SubpartitionSet = (0..500).collect();
    let end = |member| PartitionNotice {
        set: set.number,
        member,
        end: PartitionEnd::Finished {
            with_data: with_data.clone(),
        },
    };
    network.dispatch(&connection, Vec::new(), (0..MEMBERS - 1).map(end).collect());
    let joined: Vec<Arc<Ended>> = (2..200)
        .map(|gate| connection.join_set(list, 0, &members, gate, 0, 0).1)
        .collect();
    assert_eq!(joined[0].len(), MEMBERS as usize - 1);
    assert!(
        joined.iter().all(|told| Arc::ptr_eq(told, &joined[0])),
        "every late gate shares one list"
    );
    assert!(joined[0].iter().all(|(_, end)| matches!(
        end,
        PartitionEnd::Finished { with_data: list } if list.shares(&with_data)
    )));
    network.dispatch(&connection, Vec::new(), vec![end(MEMBERS - 1)]);
    let (_, after) = connection.join_set(list, 0, &members, 200, 0, 0);
    assert_eq!(after.len(), MEMBERS as usize, "news makes a fresh list");
}

/// Requests queued faster than rounds go out (credit, sets of 20,000 members, the releases of
/// 3,000 gates cancelled at once) are sent in rounds that each stay within [`ROUND_BYTES`]
/// encoded, in their order, none lost: a round over the transport's largest message broke the
/// connection at P = 10,000 (issue 32).
#[test]
fn requests_go_out_in_rounds_within_the_transport_limit() {
    let members = Arc::new(
        (0..20_000u128)
            .map(|i| ResultPartitionId {
                producer: crate::base::ids::ExecutionAttemptId::from_u128(u128::MAX - i),
                edge: u32::MAX,
            })
            .collect::<Vec<_>>(),
    );
    let mut pending: Vec<PartitionRequest> = (0..400_000u64)
        .map(|i| PartitionRequest::Credit {
            channel: u64::MAX - i,
            granted: u64::MAX - i,
        })
        .collect();
    for set in 0..40 {
        pending.insert(
            set * 10_000,
            PartitionRequest::Set {
                set: u32::MAX - set as u32,
                edge: u32::MAX,
                members: members.clone(),
            },
        );
    }
    for gate in 0..3_000u32 {
        pending.push(PartitionRequest::ReleaseSet {
            set: u32::MAX - gate,
            subpartition: u32::MAX,
            members: (0..2_500).map(|m| u32::MAX - m).collect(),
        });
    }
    let queued = pending.clone();
    let mut sent = Vec::new();
    let mut rounds = 0;
    while !pending.is_empty() {
        let round = next_round(&mut pending, ROUND_BYTES);
        let encoded = crate::base::codec::encode(&round).unwrap().len();
        assert!(encoded <= ROUND_BYTES, "round {rounds}: {encoded} bytes");
        rounds += 1;
        sent.extend(round);
    }
    assert!(rounds > 1);
    assert_eq!(sent.len(), queued.len());
    for (sent, queued) in sent.iter().zip(&queued) {
        assert_eq!(
            crate::base::codec::encode(sent).unwrap(),
            crate::base::codec::encode(queued).unwrap()
        );
    }
}
