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
