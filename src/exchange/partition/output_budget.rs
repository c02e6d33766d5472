//! What a pipelined partition may hold in memory: its floor of network buffers, reserved when its
//! producer was deployed, and buffers lent by the TaskManager's [`NetworkBufferPool`] beyond it,
//! each given back as soon as a consumer takes a buffer. The partition holds the floor until it
//! is released or fails, since its queued buffers outlive the producer task.
//!
//! Queued buffers count by their bytes (plus [`BUFFER_OVERHEAD`] each), not as whole network
//! buffers: a producer of an all-to-all of P = 1,000 ends with a buffer of a few records for
//! each of its 1,000 subpartitions, 1,000 buffers but a few dozen KiB. Counted as whole
//! buffers they took the whole lent quarter of the pool, and the gates, left with their floors,
//! read a few channels at a time (41 s at P = 1,000 on 4 × 250 slots).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::sync::oneshot;

use crate::exchange::buffer_pool::Floor;

/// What one queued buffer costs beyond its bytes (its handle and its entry in the queue).
pub(crate) const BUFFER_OVERHEAD: u64 = 64;

/// The bytes `buffers` queued buffers of `bytes` in all count as.
pub(crate) fn charge(buffers: u64, bytes: usize) -> u64 {
    (bytes as u64).saturating_add(buffers.saturating_mul(BUFFER_OVERHEAD))
}

pub(crate) struct OutputBudget {
    floor: Floor,
    /// Bytes one network buffer of the pool stands for here: its size and its
    /// [`BUFFER_OVERHEAD`], so a full buffer takes one, as the floor promises.
    unit: u64,
    /// Buffers lent by the pool.
    lent: u64,
    /// Unread buffers held in memory, over all subpartitions, in bytes ([`charge`]).
    queued: u64,
    /// The bytes the producer reserved room for and has not appended yet.
    pending: u64,
    /// Producers waiting for one of this partition's buffers to be taken.
    waiters: Vec<oneshot::Sender<()>>,
}

impl OutputBudget {
    pub(crate) fn new(floor: Floor) -> Self {
        Self {
            unit: floor.pool().buffer_size() + BUFFER_OVERHEAD,
            floor,
            lent: 0,
            queued: 0,
            pending: 0,
            waiters: Vec::new(),
        }
    }

    fn held(&self) -> u64 {
        self.queued.saturating_add(self.pending)
    }

    /// The bytes its floor and lent buffers hold.
    fn room(&self) -> u64 {
        (self.floor.buffers() + self.lent).saturating_mul(self.unit)
    }

    /// Network buffers beyond the floor that `bytes` take.
    fn beyond_floor(&self, bytes: u64) -> u64 {
        bytes
            .div_ceil(self.unit)
            .saturating_sub(self.floor.buffers())
    }

    /// Room for a buffer of `bytes` more (replacing an earlier reservation not appended): within
    /// the floor or what is lent, or lent now. Otherwise the [`Room`] to wait for: a buffer of
    /// this partition taken, or one lent anywhere coming back.
    pub(crate) fn reserve(&mut self, bytes: usize) -> Result<(), Room> {
        let wanted = charge(1, bytes);
        let total = self.queued.saturating_add(wanted);
        let short = self.beyond_floor(total).saturating_sub(self.lent);
        if short > 0 {
            self.lent += self.floor.pool().borrow(short);
        }
        // Still short, one at a time (more than one only for a record larger than a network
        // buffer, which travels alone; what it borrowed before a wait goes back at the next take).
        while total > self.room() {
            let (pool_sender, pool_receiver) = oneshot::channel();
            if !self.floor.pool().borrow_or_wait(pool_sender) {
                return Err(self.wait(pool_receiver));
            }
            self.lent += 1;
        }
        self.pending = wanted;
        Ok(())
    }

    /// The [`Room`] a producer waits for; `pool` fires when a lent buffer comes back.
    fn wait(&mut self, pool: oneshot::Receiver<()>) -> Room {
        let (sender, receiver) = oneshot::channel();
        self.waiters.retain(|waiter| !waiter.is_closed());
        self.waiters.push(sender);
        Room {
            mine: receiver,
            pool: Some(pool),
        }
    }

    /// A buffer of `bytes` was appended (reserved before, or by a caller that does not reserve:
    /// it is counted all the same, lent for if the pool has any).
    pub(crate) fn appended(&mut self, bytes: usize) {
        self.pending = 0;
        self.queued = self.queued.saturating_add(charge(1, bytes));
        let short = self.beyond_floor(self.queued).saturating_sub(self.lent);
        if short > 0 {
            self.lent += self.floor.pool().borrow(short);
        }
    }

    /// The buffer reserved for was not kept (empty, or for a consumer that is gone).
    pub(crate) fn discarded(&mut self) {
        if std::mem::take(&mut self.pending) > 0 {
            self.taken_back();
        }
    }

    /// `buffers` of `bytes` in all were taken (by a consumer, or dropped for one that is gone):
    /// lent buffers no longer needed go back, and a producer waiting for room is woken.
    pub(crate) fn taken(&mut self, buffers: u64, bytes: usize) {
        if buffers == 0 {
            return;
        }
        self.queued = self.queued.saturating_sub(charge(buffers, bytes));
        self.taken_back();
    }

    /// Gives back lent buffers no longer needed and wakes a producer waiting for room.
    fn taken_back(&mut self) {
        let excess = self.beyond_floor(self.held());
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
