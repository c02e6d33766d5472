//! The TaskManager-wide network buffer pool (Flink's `NetworkBufferPool`): a hard cap, in
//! buffers of `taskmanager.network.buffer-size`, on what the TaskManager's exchange holds —
//! buffers queued in its pipelined subpartitions and buffers its input gates received or
//! promised (credit) and have not consumed yet.
//!
//! Two parts, so that a task's guaranteed buffers never wait for anyone else's:
//! - **Floors** (Flink's required buffers): every task reserves, when it is deployed, a few
//!   buffers per input gate and per pipelined output
//!   (`taskmanager.network.required-buffers-per-gate` / `-per-output`, or fewer if it needs
//!   fewer), from the pool's first three quarters. Its gate and outputs can always use them,
//!   so every task can always make progress. A deployment whose floor does not fit is refused,
//!   naming what it needs, what is free and the key to raise.
//! - **Lent buffers**: beyond its floor a gate or an output borrows from the last quarter, while
//!   any is free, and gives each back as soon as it is consumed. A producer whose floor and the
//!   lent quarter are both used up waits (backpressure); a gate grants less credit.
//!
//! So the held buffers never pass `taskmanager.network.memory`: floors ≤ ¾, lent ≤ ¼. A floor
//! is held by whoever uses it (a gate for its life, a pipelined partition until it is released,
//! since its queued buffers outlive the producer task) and comes back when that is dropped.

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::oneshot;

/// Why a task's floor was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the task needs {needed} bytes of network buffers ({buffers} guaranteed buffers for its \
     input gates and pipelined outputs) but only {free} of the {floors} bytes `taskmanager.network.memory` \
     keeps for guaranteed buffers are free; raise `taskmanager.network.memory` (or lower \
     `taskmanager.network.required-buffers-per-gate` / `-per-output`)"
)]
pub struct FloorRefused {
    /// Buffers asked for.
    pub buffers: u64,
    /// Their bytes.
    pub needed: u64,
    /// Bytes of the floor part still free.
    pub free: u64,
    /// Bytes of the floor part in all.
    pub floors: u64,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Counts {
    /// Buffers reserved as floors.
    reserved: u64,
    /// Buffers lent out.
    lent: u64,
    /// The most lent at once.
    peak_lent: u64,
}

/// A snapshot of the pool, for the TaskManager's status.
pub use crate::messages::NetworkBufferUsage as PoolUsage;

/// See the module docs. Shared (`Arc`) by a TaskManager's gates and partitions.
pub struct NetworkBufferPool {
    buffer_size: u64,
    total: u64,
    floor_limit: u64,
    counts: Mutex<Counts>,
    /// Producers waiting for a lent buffer, oldest first: each buffer given back wakes one
    /// (waking all of them for each was a storm of futex calls with 100 producers waiting).
    waiters: Mutex<VecDeque<oneshot::Sender<()>>>,
}

impl fmt::Debug for NetworkBufferPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NetworkBufferPool")
            .field("usage", &self.usage())
            .finish()
    }
}

impl NetworkBufferPool {
    /// A pool of `memory` bytes in buffers of `buffer_size` (at least one of each part).
    pub fn new(memory: u64, buffer_size: usize) -> Arc<Self> {
        let buffer_size = (buffer_size as u64).max(1);
        let total = (memory / buffer_size).max(2);
        let floor_limit = (total - total / 4).min(total - 1);
        Arc::new(Self {
            buffer_size,
            total,
            floor_limit,
            counts: Mutex::default(),
            waiters: Mutex::default(),
        })
    }

    /// A pool no task ever exhausts (stores and gates made outside a TaskManager: tests, tools).
    pub fn unbounded() -> Arc<Self> {
        Self::new(u64::MAX, 1)
    }

    /// Bytes of one buffer, the unit it counts in.
    pub fn buffer_size(&self) -> u64 {
        self.buffer_size
    }

    /// Buffers of the lent part, free or not.
    pub fn lendable(&self) -> u64 {
        self.total - self.floor_limit
    }

    /// What it holds now.
    pub fn usage(&self) -> PoolUsage {
        let counts = *lock(&self.counts);
        PoolUsage {
            total: self.total,
            floor_limit: self.floor_limit,
            reserved: counts.reserved,
            lent: counts.lent,
            peak_lent: counts.peak_lent,
        }
    }

    /// Reserves `buffers` as a task's floor, or refuses if the floor part has not that many free.
    pub fn reserve(self: &Arc<Self>, buffers: u64) -> Result<Floor, FloorRefused> {
        let mut counts = lock(&self.counts);
        let free = self.floor_limit - counts.reserved;
        if buffers > free {
            return Err(FloorRefused {
                buffers,
                needed: buffers.saturating_mul(self.buffer_size),
                free: free.saturating_mul(self.buffer_size),
                floors: self.floor_limit.saturating_mul(self.buffer_size),
            });
        }
        counts.reserved += buffers;
        Ok(Floor {
            pool: Arc::clone(self),
            buffers,
        })
    }

    /// Lends up to `wanted` buffers (as many as the lent part has free); returns how many.
    pub fn borrow(&self, wanted: u64) -> u64 {
        let mut counts = lock(&self.counts);
        let lent = wanted.min(self.total - self.floor_limit - counts.lent);
        counts.lent += lent;
        counts.peak_lent = counts.peak_lent.max(counts.lent);
        lent
    }

    /// Lends all of `wanted` if the lent part's buffers out stay within `ceiling` with them;
    /// else none. Whether it lent them.
    pub fn borrow_within(&self, wanted: u64, ceiling: u64) -> bool {
        let mut counts = lock(&self.counts);
        if counts.lent.saturating_add(wanted) > ceiling.min(self.total - self.floor_limit) {
            return false;
        }
        counts.lent += wanted;
        counts.peak_lent = counts.peak_lent.max(counts.lent);
        true
    }

    /// Takes back `buffers` lent ones and wakes as many producers waiting for one (a producer
    /// that stopped waiting, its room found elsewhere, is skipped: a waiting producer always has
    /// buffers of its own queued, so it is woken when they are taken in any case).
    pub fn give_back(&self, buffers: u64) {
        if buffers == 0 {
            return;
        }
        {
            let mut counts = lock(&self.counts);
            debug_assert!(counts.lent >= buffers, "gave back more than was lent");
            counts.lent = counts.lent.saturating_sub(buffers);
        }
        let mut waiters = lock(&self.waiters);
        let mut woken = 0;
        while woken < buffers {
            let Some(waiter) = waiters.pop_front() else {
                break;
            };
            if waiter.send(()).is_ok() {
                woken += 1;
            }
        }
    }

    /// Lends one buffer (`true`), or registers `waiter` to be told when one comes back.
    pub fn borrow_or_wait(&self, waiter: oneshot::Sender<()>) -> bool {
        // The waiters' lock is held across the look, so a buffer given back in between wakes it.
        let mut waiters = lock(&self.waiters);
        if self.borrow(1) == 1 {
            return true;
        }
        waiters.retain(|w| !w.is_closed());
        waiters.push_back(waiter);
        false
    }
}

/// A task's reserved floor (or a part of it): given back to the pool when dropped.
pub struct Floor {
    pool: Arc<NetworkBufferPool>,
    buffers: u64,
}

impl fmt::Debug for Floor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Floor({} buffers)", self.buffers)
    }
}

impl Floor {
    /// Its buffers.
    pub fn buffers(&self) -> u64 {
        self.buffers
    }

    /// The pool it is part of.
    pub fn pool(&self) -> &Arc<NetworkBufferPool> {
        &self.pool
    }

    /// Splits `buffers` off into a floor of their own (at most what it has).
    pub fn split(&mut self, buffers: u64) -> Floor {
        let buffers = buffers.min(self.buffers);
        self.buffers -= buffers;
        Floor {
            pool: Arc::clone(&self.pool),
            buffers,
        }
    }

    /// A floor of `buffers` from a pool no task exhausts (tests, tools).
    pub fn unbounded(buffers: u64) -> Floor {
        NetworkBufferPool::unbounded()
            .reserve(buffers)
            .expect("an unbounded pool has room")
    }
}

impl Drop for Floor {
    fn drop(&mut self) {
        let mut counts = lock(&self.pool.counts);
        counts.reserved = counts.reserved.saturating_sub(self.buffers);
    }
}

/// Takes a lock even if a thread panicked while holding it (every critical section here leaves
/// the counts consistent).
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floors_come_from_three_quarters_and_lent_buffers_from_the_rest() {
        let pool = NetworkBufferPool::new(100 * 1024, 1024);
        assert_eq!(pool.usage().floor_limit, 75);
        let a = pool.reserve(70).expect("fits");
        let refused = pool.reserve(6).expect_err("only 5 are free");
        assert_eq!(refused.free, 5 * 1024);
        assert!(
            refused
                .to_string()
                .contains("raise `taskmanager.network.memory`"),
            "{refused}"
        );
        assert_eq!(pool.borrow(30), 25, "a quarter is lent, never more");
        assert_eq!(pool.borrow(1), 0);
        drop(a);
        assert_eq!(pool.usage().reserved, 0);
        assert_eq!(pool.borrow(1), 0, "floors freed are not lent");
        pool.give_back(25);
        assert_eq!(pool.usage().lent, 0);
        assert_eq!(pool.usage().peak_lent, 25);
    }

    #[test]
    fn a_split_floor_gives_its_part_back_when_dropped() {
        let pool = NetworkBufferPool::new(8 * 1024, 1024);
        let mut floor = pool.reserve(6).expect("fits");
        let part = floor.split(4);
        assert_eq!((floor.buffers(), part.buffers()), (2, 4));
        drop(part);
        assert_eq!(pool.usage().reserved, 2);
        drop(floor);
        assert_eq!(pool.usage().reserved, 0);
    }

    #[tokio::test]
    async fn a_waiting_producer_is_woken_when_a_lent_buffer_comes_back() {
        let pool = NetworkBufferPool::new(8 * 1024, 1024);
        assert_eq!(pool.borrow(2), 2);
        let (sender, receiver) = oneshot::channel();
        assert!(!pool.borrow_or_wait(sender));
        pool.give_back(1);
        receiver.await.expect("woken");
        let (sender, _receiver) = oneshot::channel();
        assert!(pool.borrow_or_wait(sender));
    }
}
