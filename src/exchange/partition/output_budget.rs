//! What a pipelined partition may hold in memory: its floor of network buffers, reserved when its
//! producer was deployed, and buffers lent by the TaskManager's [`NetworkBufferPool`] beyond it,
//! each given back as soon as a consumer takes a buffer. The partition holds the floor until it
//! is released or fails, since its queued buffers outlive the producer task.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::sync::oneshot;

use crate::exchange::buffer_pool::Floor;

pub(crate) struct OutputBudget {
    floor: Floor,
    /// Buffers lent by the pool.
    lent: u64,
    /// Unread buffers held in memory, over all subpartitions.
    queued: u64,
    /// The producer reserved room for one buffer and has not appended it yet.
    pending: bool,
    /// Producers waiting for one of this partition's buffers to be taken.
    waiters: Vec<oneshot::Sender<()>>,
}

impl OutputBudget {
    pub(crate) fn new(floor: Floor) -> Self {
        Self {
            floor,
            lent: 0,
            queued: 0,
            pending: false,
            waiters: Vec::new(),
        }
    }

    fn held(&self) -> u64 {
        self.queued + u64::from(self.pending)
    }

    /// Room for one more buffer: within the floor or what is lent, or lent now. Otherwise the
    /// [`Room`] to wait for: a buffer of this partition taken, or one lent anywhere coming back.
    pub(crate) fn reserve(&mut self) -> Result<(), Room> {
        if self.pending || self.held() < self.floor.buffers() + self.lent {
            self.pending = true;
            return Ok(());
        }
        let (pool_sender, pool_receiver) = oneshot::channel();
        if self.floor.pool().borrow_or_wait(pool_sender) {
            self.lent += 1;
            self.pending = true;
            return Ok(());
        }
        let (sender, receiver) = oneshot::channel();
        self.waiters.retain(|waiter| !waiter.is_closed());
        self.waiters.push(sender);
        Err(Room {
            mine: receiver,
            pool: Some(pool_receiver),
        })
    }

    /// A buffer was appended (reserved before, or by a caller that does not reserve: it is
    /// counted all the same, lent if the pool has one).
    pub(crate) fn appended(&mut self) {
        if !std::mem::take(&mut self.pending) && self.queued >= self.floor.buffers() + self.lent {
            self.lent += self.floor.pool().borrow(1);
        }
        self.queued += 1;
    }

    /// The buffer reserved for was not kept (empty, or for a consumer that is gone).
    pub(crate) fn discarded(&mut self) {
        if std::mem::take(&mut self.pending) {
            self.taken_back();
        }
    }

    /// `buffers` were taken (by a consumer, or dropped for one that is gone): lent buffers no
    /// longer needed go back, and a producer waiting for room is woken.
    pub(crate) fn taken(&mut self, buffers: u64) {
        if buffers == 0 {
            return;
        }
        self.queued = self.queued.saturating_sub(buffers);
        self.taken_back();
    }

    /// Gives back lent buffers no longer needed and wakes a producer waiting for room.
    fn taken_back(&mut self) {
        let excess = self.held().saturating_sub(self.floor.buffers());
        if self.lent > excess {
            self.floor.pool().give_back(self.lent - excess);
            self.lent = excess;
        }
        for waiter in self.waiters.drain(..) {
            // A producer that stopped waiting is no error.
            let _ = waiter.send(());
        }
    }
}

impl Drop for OutputBudget {
    fn drop(&mut self) {
        self.floor.pool().give_back(self.lent);
    }
}

/// Fires when the partition it came from may have room again (reserve again then).
#[derive(Debug)]
pub struct Room {
    mine: oneshot::Receiver<()>,
    pool: Option<oneshot::Receiver<()>>,
}

impl Room {
    /// Room of a subpartition at its capacity: fires when its consumer took enough.
    pub(crate) fn of(receiver: oneshot::Receiver<()>) -> Self {
        Self {
            mine: receiver,
            pool: None,
        }
    }
}

impl Room {
    /// Whether it fired already (a look, no wait).
    pub fn fired(&mut self) -> bool {
        self.mine.try_recv().is_ok()
            || self
                .pool
                .as_mut()
                .is_some_and(|pool| pool.try_recv().is_ok())
    }
}

impl Future for Room {
    type Output = ();

    /// Ready when either side fires or is dropped (released, failed: reserve tells which).
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if Pin::new(&mut self.mine).poll(cx).is_ready() {
            return Poll::Ready(());
        }
        if let Some(pool) = self.pool.as_mut()
            && Pin::new(pool).poll(cx).is_ready()
        {
            return Poll::Ready(());
        }
        Poll::Pending
    }
}
