use std::sync::atomic::AtomicU64;
use std::time::Duration;

use tokio::sync::oneshot::error::TryRecvError;

use super::output_budget::charge;
use super::*;
use crate::base::ids::ExecutionAttemptId;
use crate::operators::{Record, Value};

/// Appends records (serialized into one buffer, as a producer's writer would).
pub(crate) trait AppendRecords {
    fn append_records(
        &self,
        id: ResultPartitionId,
        subpartition: u32,
        records: Vec<Record>,
    ) -> Result<(), PartitionError>;
}

impl AppendRecords for ResultPartitionManager {
    fn append_records(
        &self,
        id: ResultPartitionId,
        subpartition: u32,
        records: Vec<Record>,
    ) -> Result<(), PartitionError> {
        self.append(id, subpartition, Buffer::from(records))
    }
}

/// The records of fetched buffers.
pub(crate) fn records_of(buffers: &[Buffer]) -> Vec<Vec<Record>> {
    buffers.iter().map(|b| b.to_records().unwrap()).collect()
}

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let path = std::env::temp_dir().join(format!(
            "flint-partition-{name}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = fs::remove_dir_all(&path);
        Self(path)
    }

    fn files(&self) -> Vec<PathBuf> {
        match fs::read_dir(&self.0) {
            Ok(entries) => entries.map(|e| e.unwrap().path()).collect(),
            Err(_) => Vec::new(),
        }
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn pid(n: u128) -> ResultPartitionId {
    ResultPartitionId {
        producer: ExecutionAttemptId::from_u128(n),
        edge: 1,
    }
}

fn buffer(from: i64, len: i64) -> Vec<Record> {
    (from..from + len)
        .map(|i| Record {
            key: format!("key-{i}"),
            value: Value::Int(i),
        })
        .collect()
}

/// Fetches everything a finished subpartition holds, `max_bytes` at a time.
fn drain(
    store: &ResultPartitionManager,
    id: ResultPartitionId,
    sub: u32,
    max_bytes: usize,
) -> Vec<Record> {
    let mut records = Vec::new();
    let mut next = 0;
    loop {
        match store.fetch(id, sub, next, max_bytes) {
            Fetch::Ready {
                buffers,
                next_buffer,
                finished,
                backlog,
            } => {
                assert_eq!(next_buffer, next + buffers.len() as u64);
                assert_eq!(
                    finished,
                    backlog == 0,
                    "a finished read leaves nothing behind"
                );
                next = next_buffer;
                records.extend(records_of(&buffers).into_iter().flatten());
                if finished {
                    return records;
                }
            }
            other => panic!("expected buffers, got {other:?}"),
        }
    }
}

#[test]
fn store_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<ResultPartitionManager>();
}

#[test]
fn in_memory_batches_come_back_in_order() {
    let dir = TempDir::new("memory");
    let store = ResultPartitionManager::new(dir.0.clone(), usize::MAX);
    let id = pid(1);
    store.create(id, 2).unwrap();
    store.append_records(id, 0, buffer(0, 3)).unwrap();
    store.append_records(id, 1, buffer(100, 1)).unwrap();
    store.append_records(id, 0, vec![]).unwrap(); // ignored
    store.append_records(id, 0, buffer(3, 2)).unwrap();

    match store.fetch(id, 0, 0, 1) {
        Fetch::Ready {
            buffers,
            next_buffer,
            finished,
            backlog,
        } => {
            assert_eq!(
                buffers,
                vec![buffer(0, 3)],
                "one buffer at least, budget permitting"
            );
            assert_eq!(next_buffer, 1);
            assert!(!finished);
            assert_eq!(backlog, 1, "the buffer left behind");
        }
        other => panic!("{other:?}"),
    }
    match store.fetch(id, 0, 0, usize::MAX) {
        Fetch::Ready {
            buffers,
            next_buffer,
            finished,
            backlog: 0,
        } => {
            assert_eq!(buffers, vec![buffer(0, 3), buffer(3, 2)]);
            assert_eq!(next_buffer, 2);
            assert!(!finished, "the producer has not finished");
        }
        other => panic!("{other:?}"),
    }
    store.finish(id).unwrap();
    assert_eq!(drain(&store, id, 0, 1), buffer(0, 5));
    assert_eq!(drain(&store, id, 1, usize::MAX), buffer(100, 1));
    // A consumer that already read everything learns it is done.
    assert!(matches!(
        store.fetch(id, 0, 2, 10),
        Fetch::Ready { ref buffers, next_buffer: 2, finished: true, .. } if buffers.is_empty()
    ));
    assert!(dir.files().is_empty(), "nothing spilled");
}

#[test]
fn producer_errors() {
    let dir = TempDir::new("errors");
    let store = ResultPartitionManager::new(dir.0.clone(), usize::MAX);
    let id = pid(2);
    assert!(matches!(
        store.append_records(id, 0, buffer(0, 1)),
        Err(PartitionError::UnknownPartition(_))
    ));
    assert!(matches!(
        store.create(id, 0),
        Err(PartitionError::NoSubpartitions(_))
    ));
    store.create(id, 2).unwrap();
    assert!(matches!(
        store.create(id, 2),
        Err(PartitionError::AlreadyExists(_))
    ));
    assert!(matches!(
        store.append_records(id, 2, buffer(0, 1)),
        Err(PartitionError::SubpartitionOutOfRange {
            subpartition: 2,
            subpartitions: 2,
            ..
        })
    ));
    assert!(matches!(store.fetch(id, 5, 0, 10), Fetch::Failed(_)));
    assert!(matches!(store.fetch(id, 0, 3, 10), Fetch::Failed(_)));
    store.finish(id).unwrap();
    assert!(matches!(
        store.append_records(id, 0, buffer(0, 1)),
        Err(PartitionError::AlreadyFinished(_))
    ));
    assert!(matches!(
        store.finish(id),
        Err(PartitionError::AlreadyFinished(_))
    ));
    assert_eq!(store.partition_ids(), vec![id]);
}

#[test]
fn pending_fetch_fires_on_append_and_finish() {
    let dir = TempDir::new("pending");
    let store = ResultPartitionManager::new(dir.0.clone(), usize::MAX);
    let id = pid(3);
    store.create(id, 2).unwrap();
    let Fetch::Pending(mut on_sub0) = store.fetch(id, 0, 0, 100) else {
        panic!("nothing appended yet")
    };
    let Fetch::Pending(mut on_sub1) = store.fetch(id, 1, 0, 100) else {
        panic!("nothing appended yet")
    };
    assert_eq!(on_sub0.try_recv(), Err(TryRecvError::Empty));

    store.append_records(id, 0, buffer(0, 1)).unwrap();
    assert_eq!(on_sub0.try_recv(), Ok(()));
    assert_eq!(
        on_sub1.try_recv(),
        Err(TryRecvError::Empty),
        "another subpartition's append is no news"
    );
    assert!(matches!(
        store.fetch(id, 0, 0, 100),
        Fetch::Ready {
            next_buffer: 1,
            finished: false,
            ..
        }
    ));

    store.finish(id).unwrap();
    assert_eq!(on_sub1.try_recv(), Ok(()));
    assert!(matches!(
        store.fetch(id, 1, 0, 100),
        Fetch::Ready {
            next_buffer: 0,
            finished: true,
            ..
        }
    ));
}

#[tokio::test]
#[allow(clippy::disallowed_methods)] // A test thread plays the producer.
async fn long_poll_wakes_a_waiting_consumer() {
    let store = Arc::new(ResultPartitionManager::new(
        TempDir::new("long-poll").0.clone(),
        usize::MAX,
    ));
    let id = pid(4);
    store.create(id, 1).unwrap();
    let Fetch::Pending(receiver) = store.fetch(id, 0, 0, 100) else {
        panic!("nothing appended yet")
    };
    let producer = {
        let store = Arc::clone(&store);
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            store.append_records(id, 0, buffer(7, 2)).unwrap();
        })
    };
    receiver.await.unwrap();
    producer.join().unwrap();
    match store.fetch(id, 0, 0, 100) {
        Fetch::Ready { buffers, .. } => assert_eq!(buffers, vec![buffer(7, 2)]),
        other => panic!("{other:?}"),
    }
}

#[test]
fn fail_wakes_pending_and_fails_fetches() {
    let dir = TempDir::new("fail");
    let store = ResultPartitionManager::new(dir.0.clone(), 0);
    let id = pid(5);
    store.create(id, 2).unwrap();
    store.append_records(id, 1, buffer(0, 4)).unwrap();
    assert_eq!(dir.files().len(), 1, "threshold 0 spills everything");
    let Fetch::Pending(mut waiting) = store.fetch(id, 0, 0, 100) else {
        panic!("nothing appended to subpartition 0")
    };
    store.fail(id, "producer crashed").unwrap();
    assert_eq!(waiting.try_recv(), Ok(()));
    assert!(matches!(
        store.fetch(id, 1, 0, 100),
        Fetch::Failed(ref reason) if reason == "producer crashed"
    ));
    assert!(
        dir.files().is_empty(),
        "a failed partition's data is dropped"
    );
    store.fail(id, "again").unwrap();
    assert!(matches!(
        store.append_records(id, 0, buffer(0, 1)),
        Err(PartitionError::Failed { ref reason, .. }) if reason == "producer crashed"
    ));
    assert!(store.release(id));
    assert!(matches!(
        store.fail(id, "late"),
        Err(PartitionError::UnknownPartition(_))
    ));
}

#[test]
fn release_forgets_and_closes_pending_fetches() {
    let dir = TempDir::new("release");
    let store = ResultPartitionManager::new(dir.0.clone(), usize::MAX);
    let id = pid(6);
    assert!(matches!(store.fetch(id, 0, 0, 100), Fetch::Unknown));
    store.create(id, 1).unwrap();
    let Fetch::Pending(mut waiting) = store.fetch(id, 0, 0, 100) else {
        panic!("nothing appended yet")
    };
    assert!(store.release(id));
    assert_eq!(waiting.try_recv(), Err(TryRecvError::Closed));
    assert!(matches!(store.fetch(id, 0, 0, 100), Fetch::Unknown));
    assert!(!store.release(id), "releasing twice is harmless");
    assert!(store.stats(id).is_none());
    assert!(matches!(
        store.finish(id),
        Err(PartitionError::UnknownPartition(_))
    ));
}

#[test]
fn spills_beyond_the_threshold_and_reads_back_in_order() {
    let dir = TempDir::new("spill");
    // Room for two and a half of the largest buffers: all but the first few spill.
    let threshold = Buffer::from(buffer(2_990, 10)).len() * 5 / 2;
    let store = ResultPartitionManager::new(dir.0.clone(), threshold);
    let id = pid(7);
    store.create(id, 3).unwrap();
    let mut expected = [Vec::new(), Vec::new(), Vec::new()];
    for i in 0..300i64 {
        let sub = (i % 3) as u32;
        let b = buffer(i * 10, 10);
        expected[sub as usize].extend(b.iter().cloned());
        store.append_records(id, sub, b).unwrap();
        let stats = store.stats(id).unwrap();
        assert!(stats.memory_bytes <= threshold, "memory is bounded");
    }
    let stats = store.stats(id).unwrap();
    assert_eq!(stats.buffers, 300);
    assert!(stats.spilled_buffers >= 297, "{stats:?}");
    let files = dir.files();
    assert_eq!(files.len(), 1, "one spill file per partition: {files:?}");
    assert_eq!(open_descriptors(&files[0]), 1, "open for writing");

    // Readable while producing, then to the end once finished, with small and large budgets.
    assert!(matches!(
        store.fetch(id, 0, 0, 1),
        Fetch::Ready { ref buffers, next_buffer: 1, finished: false, .. } if buffers.len() == 1
    ));
    store.finish(id).unwrap();
    assert_eq!(
        open_descriptors(&files[0]),
        0,
        "a finished partition holds no open file"
    );
    for sub in 0..3 {
        assert_eq!(drain(&store, id, sub, 1), expected[sub as usize]);
        assert_eq!(drain(&store, id, sub, 2_000), expected[sub as usize]);
        assert_eq!(drain(&store, id, sub, usize::MAX), expected[sub as usize]);
    }

    // Another partition in the same store spills on its own account.
    let other = pid(8);
    store.create(other, 1).unwrap();
    store.append_records(other, 0, buffer(0, 1)).unwrap();
    assert_eq!(store.stats(other).unwrap().spilled_buffers, 0);

    assert!(store.release(id));
    assert!(dir.files().is_empty(), "release deletes the spill files");
    assert_eq!(drain_after_finish(&store, other), buffer(0, 1));
}

fn drain_after_finish(store: &ResultPartitionManager, id: ResultPartitionId) -> Vec<Record> {
    store.finish(id).unwrap();
    drain(store, id, 0, usize::MAX)
}

#[test]
fn text_values_are_spilled_and_weighed() {
    let dir = TempDir::new("text");
    let store = ResultPartitionManager::new(dir.0.clone(), 100);
    let id = pid(9);
    store.create(id, 1).unwrap();
    let line = |s: &str| Record {
        key: String::new(),
        value: Value::Text(s.to_owned()),
    };
    let small = vec![
        line("fits"),
        Record {
            key: "u".into(),
            value: Value::Unit,
        },
    ];
    let big = vec![line(&"ß".repeat(100))];
    store.append_records(id, 0, small.clone()).unwrap();
    // Weighed as serialized (a buffer's bytes).
    assert_eq!(
        store.stats(id).unwrap().memory_bytes,
        Buffer::from(small.clone()).len()
    );
    store.append_records(id, 0, big.clone()).unwrap();
    store.append_records(id, 0, small.clone()).unwrap();
    let stats = store.stats(id).unwrap();
    assert_eq!((stats.buffers, stats.spilled_buffers), (3, 2));
    store.finish(id).unwrap();
    assert_eq!(
        drain(&store, id, 0, 1),
        [small.clone(), big, small].concat()
    );
}

#[test]
fn dropping_the_store_deletes_spill_files() {
    let dir = TempDir::new("drop");
    let store = ResultPartitionManager::new(dir.0.clone(), 0);
    for n in 0..3 {
        store.create(pid(n), 2).unwrap();
        store.append_records(pid(n), 0, buffer(0, 2)).unwrap();
        store.append_records(pid(n), 1, buffer(2, 2)).unwrap();
    }
    assert_eq!(dir.files().len(), 3, "one per partition");
    assert!(format!("{store:?}").contains("partitions: 3"));
    drop(store);
    assert!(dir.files().is_empty());
}

#[test]
fn unwritable_working_dir_fails_the_partition() {
    let dir = TempDir::new("unwritable");
    fs::create_dir_all(&dir.0).unwrap();
    // A regular file where the working directory should be: unwritable even for root.
    let blocker = dir.0.join("blocker");
    fs::write(&blocker, "").unwrap();
    let store = ResultPartitionManager::new(blocker.join("spill"), 0);
    let id = pid(10);
    store.create(id, 1).unwrap();
    let err = store.append_records(id, 0, buffer(0, 1)).unwrap_err();
    assert!(err.is_retryable());
    assert!(err.to_string().contains("blocker/spill"), "{err}");
    assert!(matches!(store.fetch(id, 0, 0, 10), Fetch::Failed(_)));
}

/// A producer waiting for room in a full pipelined subpartition is woken once its consumer has
/// taken half of it, not by every fetch that takes a buffer or two.
#[test]
fn a_full_producer_is_woken_when_half_its_subpartition_is_free() {
    let dir = TempDir::new("room");
    let store = ResultPartitionManager::new(dir.0.clone(), usize::MAX);
    let id = pid(8);
    store.create_pipelined(id, 1, 10).unwrap();
    for i in 0..10 {
        assert!(matches!(
            store.reserve(id, 0, 100).unwrap(),
            Space::Available
        ));
        store.append_records(id, 0, buffer(i, 1)).unwrap();
    }
    let Space::Full(mut room) = store.reserve(id, 0, 100).unwrap() else {
        panic!("ten unread buffers fill a capacity of ten");
    };
    let mut next = 0;
    for (taken, woken) in [(3, false), (1, false), (1, true)] {
        match store.fetch_with_credit(id, 0, next, usize::MAX, taken) {
            Fetch::Ready { next_buffer, .. } => next = next_buffer,
            other => panic!("{other:?}"),
        }
        assert_eq!(room.fired(), woken, "after taking {next} of 10 buffers");
    }
    assert!(matches!(
        store.reserve(id, 0, 100).unwrap(),
        Space::Available
    ));
    // A failure wakes a waiting producer at once, however full.
    for i in 10..15 {
        store.append_records(id, 0, buffer(i, 1)).unwrap();
    }
    let Space::Full(mut room) = store.reserve(id, 0, 100).unwrap() else {
        panic!("full again");
    };
    store.fail(id, "boom").unwrap();
    assert!(room.fired());
}

/// A producer's last buffers handed over at once: appended in order as one by one, up to the
/// first subpartition without room, whose room is answered with the rest left to hand over;
/// nothing is lost or appended twice, and the reader of another TaskManager hears of each
/// subpartition's first buffer.
#[test]
fn buffers_appended_all_at_once_stop_at_the_first_full_subpartition() {
    let dir = TempDir::new("append-all");
    let store = ResultPartitionManager::new(dir.0.clone(), usize::MAX);
    let id = pid(11);
    store.create_pipelined(id, 3, 2).unwrap();
    let queue = Arc::new(ReadyQueue::default());
    store.add_reader(id.edge, 2, &queue, 7);
    // Subpartition 1 is full (capacity 2).
    for i in 0..2 {
        store.append_records(id, 1, buffer(i, 1)).unwrap();
    }
    let mut pending: std::collections::VecDeque<(u32, Buffer)> =
        [(0, 10), (2, 12), (1, 11), (0, 20)]
            .into_iter()
            .map(|(sub, value)| (sub, Buffer::from(buffer(value, 1))))
            .collect();
    let (appended, full) = store.append_all(id, &mut pending).unwrap();
    assert_eq!(appended, 2);
    let mut room = full.expect("subpartition 1 is full");
    assert_eq!(
        pending.iter().map(|(sub, _)| *sub).collect::<Vec<_>>(),
        [1, 0],
        "the full one and those after it stay"
    );
    assert!(
        queue
            .take_all()
            .announced
            .iter()
            .any(|(key, partition)| *key == 7 && *partition == id)
    );
    // Its consumer takes both: the rest goes.
    assert!(matches!(
        store.fetch_with_credit(id, 1, 0, usize::MAX, 2),
        Fetch::Ready { .. }
    ));
    assert!(room.fired());
    assert_eq!(store.append_all(id, &mut pending).unwrap().0, 2);
    assert!(pending.is_empty());
    let values = |sub| match store.fetch_with_credit(id, sub, 0, usize::MAX, 10) {
        Fetch::Ready { buffers, .. } => records_of(&buffers),
        other => panic!("{other:?}"),
    };
    assert_eq!(values(0), [buffer(10, 1), buffer(20, 1)]);
    assert_eq!(values(2), [buffer(12, 1)]);
    match store.fetch_with_credit(id, 1, 2, usize::MAX, 10) {
        Fetch::Ready { buffers, .. } => assert_eq!(records_of(&buffers), [buffer(11, 1)]),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_pipelined_batch_fetched_again_fails_instead_of_reading_as_empty() {
    // A remote consumer whose answer was lost with its connection asks again from the same
    // buffer: the moved buffer is gone, and an empty one in its place would lose records silently.
    let dir = TempDir::new("refetch");
    let store = ResultPartitionManager::new(dir.0.clone(), usize::MAX);
    let id = pid(9);
    store.create_with(id, 1, false).unwrap();
    store.append_records(id, 0, buffer(0, 2)).unwrap();
    assert!(matches!(
        store.fetch(id, 0, 0, usize::MAX),
        Fetch::Ready { ref buffers, next_buffer: 1, .. } if buffers == &vec![buffer(0, 2)]
    ));
    match store.fetch(id, 0, 0, usize::MAX) {
        Fetch::Failed(reason) => assert!(reason.contains("lost on the way"), "{reason}"),
        other => panic!("{other:?}"),
    }
    // Reading on from where the consumer got to still works.
    store.append_records(id, 0, buffer(2, 1)).unwrap();
    assert!(matches!(
        store.fetch(id, 0, 1, usize::MAX),
        Fetch::Ready { ref buffers, next_buffer: 2, .. } if buffers == &vec![buffer(2, 1)]
    ));
}

#[test]
fn a_blocking_partition_is_on_disk_read_back_again_and_deleted_when_released() {
    let dir = TempDir::new("blocking");
    let store = ResultPartitionManager::new(dir.0.clone(), usize::MAX);
    let id = pid(10);
    store.create_blocking(id, 1).unwrap();
    store.append_records(id, 0, buffer(0, 3)).unwrap();
    store.append_records(id, 0, buffer(3, 2)).unwrap();
    store.finish(id).unwrap();
    let stats = store.stats(id).unwrap();
    assert_eq!(
        (stats.buffers, stats.spilled_buffers),
        (2, 2),
        "on disk by design"
    );
    assert_eq!(dir.files().len(), 1);
    // A consumer reads it; a restarted one reads it again from the start.
    assert_eq!(drain(&store, id, 0, usize::MAX), buffer(0, 5));
    assert_eq!(drain(&store, id, 0, 1), buffer(0, 5));
    assert!(store.release(id));
    assert!(dir.files().is_empty(), "deleted once released");
}

/// A data connection's subscription listens through its connection's queue: the key comes
/// back when the subpartition gets a buffer, ends, or its partition fails or is released.
#[test]
fn a_listener_gets_its_key_on_append_finish_failure_and_release() {
    let dir = TempDir::new("listen");
    let store = ResultPartitionManager::new(dir.0.clone(), usize::MAX);
    let queue = Arc::new(ReadyQueue::default());
    let listen = |id, key| store.fetch_or_listen((id, 0, 0), 100, 1, &queue, key);
    let (appended, finished, failed, released) = (pid(20), pid(21), pid(22), pid(23));
    for id in [appended, finished, failed, released] {
        store.create(id, 1).unwrap();
    }
    for (key, id) in [(1, appended), (2, finished), (3, failed), (4, released)] {
        assert!(matches!(listen(id, key), PlannedFetch::Listening));
        // The partition's end is watched too, under another key.
        assert_eq!(store.watch_end(id, &queue, key + 10), EndState::Producing);
    }
    assert!(queue.take_all().is_empty());
    store.append_records(appended, 0, vec![]).unwrap();
    assert!(queue.take_all().is_empty(), "an empty buffer is no news");
    store
        .append_records(
            appended,
            0,
            vec![Record {
                key: "a".into(),
                value: Value::Unit,
            }],
        )
        .unwrap();
    store.finish(finished).unwrap();
    store.fail(failed, "broken").unwrap();
    assert!(store.release(released));
    let ready = queue.take_all();
    assert_eq!(ready.keys, vec![1, 2, 3, 4]);
    assert_eq!(
        ready.ended,
        vec![12, 13, 14],
        "only the partitions that ended"
    );
    assert!(matches!(listen(released, 4), PlannedFetch::Unknown));
    assert_eq!(store.end_state(released), EndState::Unknown);
}

/// Issue 32: a consumer that stops reading a pipelined subpartition early releases it: the
/// producer waiting for room is woken at once, the unread buffers' memory is freed, later
/// writes there are discarded (the producer never waits there again), and the other
/// subpartitions are untouched. A blocking partition keeps everything.
#[test]
fn a_released_pipelined_subpartition_frees_its_producer_and_discards_its_writes() {
    let dir = TempDir::new("released");
    let store = ResultPartitionManager::new(dir.0.clone(), usize::MAX);
    let id = pid(11);
    store.create_pipelined(id, 2, 4).unwrap();
    for i in 0..4 {
        store.append_records(id, 0, buffer(i, 1)).unwrap();
        store.append_records(id, 1, buffer(i, 1)).unwrap();
    }
    let Space::Full(mut room) = store.reserve(id, 0, 100).unwrap() else {
        panic!("four unread buffers fill a capacity of four");
    };
    let before = store.stats(id).unwrap().memory_bytes;
    assert!(store.release_subpartition(id, 0));
    assert!(room.fired(), "the waiting producer is woken");
    assert_eq!(store.stats(id).unwrap().memory_bytes, before / 2);
    for i in 0..100 {
        assert!(matches!(
            store.reserve(id, 0, 100).unwrap(),
            Space::Available
        ));
        store.append_records(id, 0, buffer(i, 1)).unwrap();
    }
    assert_eq!(
        store.stats(id).unwrap().memory_bytes,
        before / 2,
        "discarded"
    );
    assert!(matches!(store.reserve(id, 1, 100).unwrap(), Space::Full(_)));
    match store.fetch(id, 0, 4, usize::MAX) {
        Fetch::Failed(reason) => assert!(reason.contains("released by its consumer"), "{reason}"),
        other => panic!("{other:?}"),
    }
    store.finish(id).unwrap();
    assert_eq!(drain(&store, id, 1, usize::MAX), buffer(0, 4));
    assert!(!store.release_subpartition(id, 0), "once");

    let blocking = pid(12);
    store.create_blocking(blocking, 1).unwrap();
    store.append_records(blocking, 0, buffer(0, 3)).unwrap();
    store.finish(blocking).unwrap();
    assert!(!store.release_subpartition(blocking, 0));
    assert_eq!(drain(&store, blocking, 0, usize::MAX), buffer(0, 3));
}

/// Issue 32: releasing a subpartition of a finished partition that never had data there keeps
/// nothing: cancelled consumers at P = 10,000 release 10⁸ of them, and an entry each grew the
/// producers' tables (and their TaskManagers' actor threads' time) by as much. A subpartition
/// with data is still released.
#[test]
fn releasing_an_empty_subpartition_of_a_finished_partition_keeps_nothing() {
    let dir = TempDir::new("empty-release");
    let store = ResultPartitionManager::new(dir.0.clone(), usize::MAX);
    let id = pid(15);
    store.create_pipelined(id, 1_000, 4).unwrap();
    store.append_records(id, 7, buffer(0, 2)).unwrap();
    store.finish(id).unwrap();
    for subpartition in (0..1_000).filter(|&s| s != 7) {
        assert!(!store.release_subpartition(id, subpartition));
    }
    assert_eq!(store.stats(id).unwrap().stored_subpartitions, 1);
    assert_eq!(store.end_state(id), EndState::Finished(vec![7].into()));
    assert!(store.release_subpartition(id, 7));
    assert!(!store.release_subpartition(id, 7), "once");
}

/// A consumer may end before its producer (deployed with it) created the partition: the release
/// waits for the partition and applies when it comes; releasing a partition that never came
/// forgets it.
#[test]
fn a_release_before_the_partition_exists_applies_when_it_is_created() {
    let dir = TempDir::new("early");
    let store = ResultPartitionManager::new(dir.0.clone(), usize::MAX);
    let (id, never) = (pid(13), pid(14));
    assert!(store.release_subpartition(id, 1));
    assert!(store.release_subpartition(never, 0));
    store.create_pipelined(id, 2, 1).unwrap();
    for i in 0..10 {
        assert!(matches!(
            store.reserve(id, 1, 100).unwrap(),
            Space::Available
        ));
        store.append_records(id, 1, buffer(i, 1)).unwrap();
    }
    store.append_records(id, 0, buffer(0, 1)).unwrap();
    assert!(matches!(store.reserve(id, 0, 100).unwrap(), Space::Full(_)));
    assert_eq!(
        lock(&store.released_early).len(),
        1,
        "the one never created"
    );
    assert!(!store.release(never));
    assert!(lock(&store.released_early).is_empty());
}

#[test]
fn a_spill_past_the_budget_fails_naming_the_key_and_released_files_free_it() {
    let dir = TempDir::new("budget");
    let store = ResultPartitionManager::with_spill_budget(
        dir.0.clone(),
        0,
        Some(4_000),
        Arc::new(InlineIo),
    );
    let (first, second) = (pid(7), pid(8));
    store.create(first, 1).unwrap();
    let mut appended = 0;
    let error = loop {
        match store.append_records(first, 0, buffer(appended * 10, 10)) {
            Ok(()) => appended += 1,
            Err(error) => break error,
        }
        assert!(appended < 1_000, "the budget never bit");
    };
    assert!(appended > 0, "the budget fits some buffers");
    assert!(error.is_retryable(), "{error}");
    let reason = std::error::Error::source(&error).map(ToString::to_string);
    assert!(
        reason
            .as_deref()
            .is_some_and(|r| r.contains("taskmanager.spill-budget")),
        "{error}: {reason:?}"
    );
    let usage = store.spill_usage();
    assert_eq!(
        usage.live, 0,
        "the failed partition's file is deleted: {usage:?}"
    );
    assert!(usage.peak > 0 && usage.peak <= 4_000, "{usage:?}");
    assert_eq!(usage.total, usage.peak);
    // The room is back: another partition spills, and releasing it frees its bytes.
    store.create(second, 1).unwrap();
    store.append_records(second, 0, buffer(0, 10)).unwrap();
    assert!(store.spill_usage().live > 0);
    assert!(store.release(second));
    let usage = store.spill_usage();
    assert_eq!(usage.live, 0, "deleting its file freed it");
    assert!(usage.total > usage.peak);
}

/// How many of this process's file descriptors are open on `path`.
fn open_descriptors(path: &std::path::Path) -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|entry| std::fs::read_link(entry.ok()?.path()).ok())
        .filter(|target| target == path)
        .count()
}

/// A buffer of most of a 1 KiB network buffer: `(records, bytes)`.
fn near_full(from: i64) -> (Vec<Record>, usize) {
    let records = buffer((from + 10) * 100, 68);
    let bytes = Buffer::from(records.clone()).len();
    assert!(
        charge(1, bytes) > 7 << 7 && charge(1, bytes) <= 1 << 10,
        "{bytes} bytes: not most of one 1 KiB buffer"
    );
    (records, bytes)
}

/// Issue 32 item 1: a pipelined partition holds in memory at most its floor and what the
/// TaskManager's pool lends: the producer waits when both are used up (even with room in the
/// subpartition), is woken when its consumer takes a buffer, and lent buffers go back as soon
/// as they are not needed; a release gives back the floor and everything lent.
#[test]
fn a_pipelined_partition_holds_its_floor_and_what_is_lent_then_waits() {
    let dir = TempDir::new("budget");
    let store = ResultPartitionManager::new(dir.0.clone(), usize::MAX);
    // 8 buffers: 6 for floors, 2 to lend.
    let pool = crate::exchange::buffer_pool::NetworkBufferPool::new(8 << 10, 1 << 10);
    let id = pid(12);
    store
        .create_pipelined_within(id, 2, 10, pool.reserve(2).unwrap())
        .unwrap();
    for i in 0..4 {
        let (records, bytes) = near_full(i.into());
        assert!(matches!(
            store.reserve(id, i % 2, bytes).unwrap(),
            Space::Available
        ));
        store.append_records(id, i % 2, records).unwrap();
    }
    assert_eq!(pool.usage().lent, 2, "two beyond the floor of two");
    let (records, bytes) = near_full(9);
    let Space::Full(mut room) = store.reserve(id, 0, bytes).unwrap() else {
        panic!("the floor and the pool's two lent buffers are in use");
    };
    assert!(!room.fired());
    let Fetch::Ready { buffers, .. } = store.fetch_with_credit(id, 1, 0, usize::MAX, 1) else {
        panic!("a buffer to take");
    };
    assert_eq!(buffers.len(), 1);
    assert!(room.fired(), "the waiting producer is woken");
    assert_eq!(
        pool.usage().lent,
        1,
        "a lent buffer no longer needed went back"
    );
    assert!(matches!(
        store.reserve(id, 0, bytes).unwrap(),
        Space::Available
    ));
    store.append_records(id, 0, records).unwrap();
    assert_eq!(pool.usage().lent, 2);
    assert!(store.release(id));
    assert_eq!((pool.usage().reserved, pool.usage().lent), (0, 0));
}

/// Queued buffers count by their bytes, not as whole network buffers: a producer that ends
/// with a few records for each of 1,000 subpartitions (an all-to-all's last flush) holds a few
/// dozen KiB, which its floor of two 32 KiB buffers and one lent one cover. Counted whole, the
/// 1,000 buffers took every lent buffer of the TaskManager and the producer waited. A full
/// buffer still takes exactly one of the floor (its overhead included): a floor of one always
/// holds it, so the producer always progresses.
#[test]
fn small_buffers_count_by_their_bytes() {
    let dir = TempDir::new("small");
    let store = ResultPartitionManager::new(dir.0.clone(), usize::MAX);
    // 16 buffers of 32 KiB: 12 for floors, 4 to lend.
    let pool = crate::exchange::buffer_pool::NetworkBufferPool::new(16 << 15, 1 << 15);
    let id = pid(15);
    store
        .create_pipelined_within(id, 1_000, 10, pool.reserve(2).unwrap())
        .unwrap();
    for sub in 0..1_000u32 {
        let records = buffer(i64::from(sub), 1);
        let bytes = Buffer::from(records.clone()).len();
        assert!(
            matches!(store.reserve(id, sub, bytes).unwrap(), Space::Available),
            "subpartition {sub}: {:?}",
            pool.usage()
        );
        store.append_records(id, sub, records).unwrap();
    }
    let held = pool.usage().lent;
    assert!(held <= 2, "{held} lent for 1,000 buffers of a record each");
    // A full buffer takes one buffer of the floor, overhead and all.
    let full = pid(16);
    store
        .create_pipelined_within(full, 1, 10, pool.reserve(1).unwrap())
        .unwrap();
    assert!(matches!(
        store.reserve(full, 0, 1 << 15).unwrap(),
        Space::Available
    ));
    assert_eq!(pool.usage().lent, held, "nothing lent for a floor of one");
    for sub in 0..1_000u32 {
        assert!(matches!(
            store.fetch_with_credit(id, sub, 0, usize::MAX, 1),
            Fetch::Ready { .. }
        ));
    }
    assert_eq!(pool.usage().lent, 0, "all taken: nothing lent");
}
