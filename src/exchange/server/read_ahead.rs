//! Read-ahead of a blocking result's spilled buffers (Flink's sort-merge shuffle reads ahead
//! into its read buffers too). A connection has one poll in flight, so without it a large
//! blocking channel went read, sent, received, polled again, one step after another, and a
//! TaskManager serving it sat idle a fifth of the time. Now when an answer takes a channel's
//! spilled buffers and more follow, the next fetch's buffers are read on the I/O threads at
//! once, while the answer travels and the consumer polls again.
//!
//! The next poll plans the channel as always (a release or failure in between answers as it
//! would); it takes the buffers read ahead when they begin with what it planned, of the same
//! partition, and otherwise reads as before. A connection keeps at most [`MAX_AHEAD`] reads
//! ahead, each at most one answer's data ([`FETCH_BYTES`](super::FETCH_BYTES)).

use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use super::lock;
use crate::env::blocking_io::BlockingIo;
use crate::exchange::buffer::Buffer;
use crate::exchange::partition::{PendingRead, ReadSpan, Unreadable};

/// Reads ahead one connection keeps at most: enough for a channel or two being read in large
/// answers, a bound on the memory of many (at most this many answers' data).
pub(super) const MAX_AHEAD: usize = 2;

/// One read ahead: what it reads, and its buffers once read.
#[derive(Debug)]
pub(super) struct ReadAhead {
    span: ReadSpan,
    slot: Arc<Slot>,
}

#[derive(Debug, Default)]
struct Slot {
    read: Mutex<Option<Result<Vec<Buffer>, Unreadable>>>,
    done: Notify,
}

impl ReadAhead {
    /// Starts reading `pending` on `io`.
    pub(super) fn start(io: &dyn BlockingIo, pending: PendingRead) -> Self {
        let (span, slot) = (pending.span(), Arc::new(Slot::default()));
        let filled = Arc::clone(&slot);
        io.execute(Box::new(move || {
            // The poll waiting for it must hear back even if the read panics.
            let read = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| pending.read()))
                .unwrap_or_else(|_| Err(Unreadable::Failed("the read ahead panicked".into())));
            *lock(&filled.read) = Some(read);
            // A permit if nobody waits yet: the poll that takes it finds it at once.
            filled.done.notify_one();
        }));
        Self { span, slot }
    }

    /// What of it `planned` takes, if its buffers begin with these (see the module docs).
    pub(super) fn taken_by(self, planned: &PendingRead) -> Option<Taken> {
        let count = self.span.covers(planned)?;
        Some(Taken {
            slot: self.slot,
            count,
        })
    }
}

/// The first `count` buffers of a read ahead, for the poll that planned them.
#[derive(Debug)]
pub(super) struct Taken {
    slot: Arc<Slot>,
    count: usize,
}

impl Taken {
    /// The buffers once read; `None` if the read failed (the poll then reads them itself, and
    /// answers as that read does).
    pub(super) async fn buffers(self) -> Option<Vec<Buffer>> {
        loop {
            if let Some(read) = lock(&self.slot.read).take() {
                return read.ok().map(|mut buffers| {
                    buffers.truncate(self.count);
                    buffers
                });
            }
            self.slot.done.notified().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::blocking_io::IoWork;
    use crate::exchange::ResultPartitionManager;
    use crate::messages::ResultPartitionId;
    use crate::operators::{Record, Value};

    /// I/O threads that run their work only when told.
    #[derive(Default)]
    struct HeldIo(Mutex<Vec<IoWork>>);

    impl std::fmt::Debug for HeldIo {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("HeldIo")
        }
    }

    impl BlockingIo for HeldIo {
        fn execute(&self, work: IoWork) {
            lock(&self.0).push(work);
        }
    }

    /// A poll that takes buffers still being read ahead waits for them, and gets the first
    /// ones it planned once the read ends.
    #[tokio::test]
    async fn a_poll_waits_for_a_read_ahead_still_in_flight() {
        let dir = std::env::temp_dir().join(format!("flint-ahead-held-{}", std::process::id()));
        let store = ResultPartitionManager::new(dir.clone(), 0);
        let id = ResultPartitionId {
            producer: crate::base::ids::ExecutionAttemptId::from_u128(9),
            edge: 0,
        };
        store.create_blocking(id, 1).unwrap();
        for i in 0..4 {
            let record = Record {
                key: i.to_string(),
                value: Value::Int(i),
            };
            store.append(id, 0, vec![record].into()).unwrap();
        }
        store.finish(id).unwrap();
        let io = HeldIo::default();
        let ahead = ReadAhead::start(&io, store.plan_ahead((id, 0, 1), usize::MAX).unwrap());
        // The next poll plans less: one buffer (a byte's room takes the first whatever its size).
        let planned = store.plan_ahead((id, 0, 1), 1).unwrap();
        assert_eq!(planned.buffers(), 1, "the first whatever its size");
        let taken = ahead
            .taken_by(&planned)
            .expect("the same buffers, from the first");
        let buffers = taken.buffers();
        tokio::pin!(buffers);
        tokio::select! {
            biased;
            _ = &mut buffers => panic!("done before the read ran"),
            () = std::future::ready(()) => {}
        }
        for work in std::mem::take(&mut *lock(&io.0)) {
            work();
        }
        let buffers = buffers.await.expect("read");
        let keys: Vec<String> = buffers
            .iter()
            .flat_map(|buffer| buffer.to_records().unwrap())
            .map(|record| record.key)
            .collect();
        assert_eq!(keys, ["1"]);
        // Planned from elsewhere, the read ahead is not theirs.
        let ahead = ReadAhead::start(&io, store.plan_ahead((id, 0, 1), usize::MAX).unwrap());
        let other = store.plan_ahead((id, 0, 2), usize::MAX).unwrap();
        assert!(ahead.taken_by(&other).is_none());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
