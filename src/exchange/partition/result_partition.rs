//! One result partition on this TaskManager (Flink's `ResultPartition`) and its subpartitions
//! (`ResultSubpartition`, one per consumer subtask): the buffers, who waits for them, and the
//! producer waiting for room. Private to the [`ResultPartitionManager`](super::ResultPartitionManager),
//! which holds each behind its own lock.

use smallvec::SmallVec;
use thin_vec::ThinVec;

use crate::base::index_table::IndexTable;

use super::*;

/// Where a partition is in its life.
pub(super) enum State {
    Producing,
    Finished,
    Failed(String),
    Released,
}

pub(super) struct ResultPartition {
    pub(super) id: ResultPartitionId,
    pub(super) state: State,
    /// Only those written to or waited on: a partition of 10,000 subpartitions of which few get
    /// data costs memory for those few (an all-to-all job at P = 10,000 has 10⁸); a slot each
    /// once most have (see [`IndexTable`]).
    pub(super) subpartitions: IndexTable<ResultSubpartition>,
    /// How many subpartitions it has.
    pub(super) count: u32,
    /// Bytes of the buffers held in memory, over all subpartitions.
    pub(super) memory_bytes: usize,
    /// Once set, every further buffer of the partition goes to disk.
    pub(super) spilling: bool,
    /// Whether fetched in-memory buffers stay (blocking results) or move to the consumer.
    pub(super) retain: bool,
    /// Every spilled buffer of every subpartition, created at the first.
    pub(super) spill: Option<SpillFile>,
    /// Of a pipelined partition: the most unread buffers a subpartition holds before its
    /// producer waits. `None`: unbounded, spilling past the threshold.
    pub(super) capacity: Option<usize>,
    /// Of a pipelined partition of a deployed task: its network buffers.
    pub(super) budget: Option<super::output_budget::OutputBudget>,
}

impl ResultPartition {
    pub(super) fn check_writable(&self) -> Result<(), PartitionError> {
        match &self.state {
            State::Producing => Ok(()),
            State::Finished => Err(PartitionError::AlreadyFinished(self.id)),
            State::Failed(reason) => Err(PartitionError::Failed {
                id: self.id,
                reason: reason.clone(),
            }),
            State::Released => Err(PartitionError::UnknownPartition(self.id)),
        }
    }

    pub(super) fn subpartition_index(&self, subpartition: u32) -> Result<u32, PartitionError> {
        if subpartition < self.count {
            Ok(subpartition)
        } else {
            Err(PartitionError::SubpartitionOutOfRange {
                id: self.id,
                subpartition,
                subpartitions: self.count,
            })
        }
    }

    pub(super) fn end_state(&self) -> EndState {
        match &self.state {
            State::Producing => EndState::Producing,
            State::Finished => {
                let with_data = self
                    .subpartitions
                    .iter()
                    .filter(|(_, sub)| !sub.buffers.is_empty())
                    .map(|(index, _)| index)
                    .collect();
                EndState::Finished(with_data)
            }
            State::Failed(reason) => EndState::Failed(reason.clone()),
            State::Released => EndState::Unknown,
        }
    }

    /// See [`ResultPartitionManager::release_subpartition`](super::ResultPartitionManager::release_subpartition).
    pub(super) fn release_subpartition(&mut self, subpartition: u32) -> bool {
        if self.retain || subpartition >= self.count {
            return false;
        }
        if matches!(self.state, State::Finished) && !self.subpartitions.contains(subpartition) {
            // Finished without data there: nothing to free or stop. An entry would be kept per
            // release, and consumers cancelled at P = 10,000 release 10⁸ such subpartitions.
            return false;
        }
        let sub = self
            .subpartitions
            .get_or_insert_with(subpartition, Default::default);
        if sub.released {
            return false;
        }
        sub.released = true;
        let unread = sub.handed_over as usize..;
        let (mut freed, mut dropped) = (0, 0);
        for stored in sub.buffers.get_mut(unread).into_iter().flatten() {
            if let Stored::Memory(buffer) = stored {
                freed += buffer.len();
                dropped += 1;
                *buffer = Buffer::default();
            }
        }
        sub.hand_over_until(sub.buffers.len() as u64);
        sub.wake();
        sub.wake_producer();
        self.memory_bytes = self.memory_bytes.saturating_sub(freed);
        if let Some(budget) = self.budget.as_mut() {
            budget.taken(dropped, freed);
        }
        true
    }

    /// Drops the data (deleting spill files) and wakes every waiting consumer.
    pub(super) fn fail(&mut self, reason: String) {
        self.state = State::Failed(reason);
        self.memory_bytes = 0;
        self.spill = None;
        self.budget = None;
        for subpartition in self.subpartitions.values_mut() {
            subpartition.buffers.clear();
            subpartition.wake();
            subpartition.wake_producer();
        }
    }

    /// Decides what a fetch returns, under the partition's lock; the disk reads happen later.
    #[allow(clippy::result_large_err)] // returned once per fetch, straight up: a box would be an allocation per fetch
    pub(super) fn plan_fetch(
        &mut self,
        subpartition: u32,
        from_buffer: u64,
        limit: FetchLimit,
        listener: Option<(&Arc<ReadyQueue>, u64)>,
    ) -> Result<FetchPlan, PlannedFetch> {
        let FetchLimit {
            max_bytes,
            credit,
            strict,
        } = limit;
        let finished = match &self.state {
            State::Producing => false,
            State::Finished => true,
            State::Failed(reason) => return Err(PlannedFetch::Failed(reason.clone())),
            State::Released => return Err(PlannedFetch::Unknown),
        };
        let index = self
            .subpartition_index(subpartition)
            .map_err(|err| PlannedFetch::Failed(err.to_string()))?;
        let id = self.id;
        let available = self
            .subpartitions
            .get(index)
            .map_or(0, |sub| sub.buffers.len() as u64);
        if from_buffer == 0 && available == 0 && finished {
            // Nothing was ever written there (and nothing is stored for it).
            return Ok(FetchPlan::end(index, 0));
        }
        let capacity = self.capacity;
        let sub = self
            .subpartitions
            .get_or_insert_with(index, Default::default);
        if sub.released {
            return Err(PlannedFetch::Failed(format!(
                "subpartition {subpartition} of result partition {id} was released by its \
                 consumer"
            )));
        }
        if from_buffer < sub.handed_over() {
            // A pipelined buffer moves to its reader; one asked for again was lost on its way
            // (the data connection broke while the answer travelled). Never answer with the
            // emptied buffer: the reader fails and its region runs again.
            return Err(PlannedFetch::Failed(format!(
                "buffer {from_buffer} of subpartition {subpartition} of result partition {id} was \
                 already handed to its consumer and lost on the way (the data connection broke)"
            )));
        }
        if from_buffer > available {
            return Err(PlannedFetch::Failed(format!(
                "buffer {from_buffer} of subpartition {subpartition} of result partition {id} was \
                 asked for, but only {available} exist"
            )));
        }
        if from_buffer == available {
            if finished {
                return Ok(FetchPlan::end(index, from_buffer));
            }
            // Consumers that gave up waiting must not make the list grow without bound.
            sub.waiters.retain(|waiter| !waiter.is_closed());
            if let Some((queue, key)) = listener {
                sub.waiters.push(Waiter::Listener(Arc::clone(queue), key));
                return Err(PlannedFetch::Listening);
            }
            let (sender, receiver) = oneshot::channel();
            sub.waiters.push(Waiter::Once(sender));
            return Err(PlannedFetch::Pending(receiver));
        }
        if credit == 0 || (strict && sub.buffers[from_buffer as usize].bytes() > max_bytes) {
            return Err(PlannedFetch::Backlog(available - from_buffer));
        }

        let mut items = Vec::new();
        let mut total = 0usize;
        let mut handed_over = 0usize;
        let mut moved = 0u64;
        let retain = self.retain;
        // `from_buffer < available`, which is a `usize`.
        let mut moved_until = None;
        for (index, stored) in (from_buffer..).zip(&mut sub.buffers[from_buffer as usize..]) {
            let bytes = stored.bytes();
            if !items.is_empty()
                && (total.saturating_add(bytes) > max_bytes || items.len() >= credit)
            {
                break;
            }
            total = total.saturating_add(bytes);
            items.push(match stored {
                Stored::Memory(buffer) if !retain => {
                    handed_over += bytes;
                    moved += 1;
                    moved_until = Some(index + 1);
                    PlannedBuffer::Memory(std::mem::take(buffer))
                }
                // Shares the bytes: a blocking result in memory is read without a copy too.
                Stored::Memory(buffer) => PlannedBuffer::Memory(buffer.clone()),
                Stored::Spilled { offset, len, .. } => PlannedBuffer::Spilled {
                    offset: *offset,
                    len: *len,
                },
            });
        }
        let next_buffer = from_buffer + items.len() as u64;
        // Everything there taken from a partition still being written: listen for what comes
        // next now, under this lock, rather than in a second look right after (at P = 1,000
        // most channels' one buffer comes just before their producer finishes).
        let listening = match listener {
            Some((queue, key)) if !finished && next_buffer == available => {
                sub.waiters.retain(|waiter| !waiter.is_closed());
                sub.waiters.push(Waiter::Listener(Arc::clone(queue), key));
                true
            }
            _ => false,
        };
        if let Some(moved_until) = moved_until {
            sub.hand_over_until(moved_until);
            // A producer waiting for room is woken once half its subpartition is free, not for
            // every answer that takes a buffer or two: each wake-up is a futex call and two
            // context switches, and across processes they were a tenth of both actor threads.
            // What stays unread is more than nothing, so its consumer comes back for it.
            let unread = (sub.buffers.len() as u64).saturating_sub(moved_until);
            if capacity.is_none_or(|capacity| unread <= capacity as u64 / 2) {
                sub.wake_producer();
            }
        }
        let plan = FetchPlan {
            subpartition: index,
            spill_path: self.spill.as_ref().map(|spill| spill.path.clone()),
            items,
            bytes: total,
            next_buffer,
            finished: finished && next_buffer == available,
            backlog: available - next_buffer,
            listening,
        };
        // Handed-over buffers no longer count against the spill threshold, nor the budget.
        self.memory_bytes = self.memory_bytes.saturating_sub(handed_over);
        if let Some(budget) = self.budget.as_mut() {
            budget.taken(moved, handed_over);
        }
        Ok(plan)
    }
}

/// How much one fetch may take: buffers while their bytes stay within `max_bytes` (the
/// first one whatever its size, unless `strict`), at most `credit` of them.
#[derive(Debug, Clone, Copy)]
pub(super) struct FetchLimit {
    pub(super) max_bytes: usize,
    pub(super) credit: usize,
    pub(super) strict: bool,
}

/// A subpartition's state, one entry of its partition's table: a wide partition has an entry
/// for every subpartition that got data (P = 1,000: ~865 per partition, ~216,000 per
/// TaskManager), each first read by its consumer long after its producer wrote it, so its size
/// is what the consumer's cache and TLB misses and the table's growth (fresh pages) cost. The
/// waiters therefore share one list that is on the heap only while someone waits, and the
/// handed-over count is a `u32`: 64 bytes, 72 with its key in a table, not 120 (see
/// [`IndexTable`]).
#[derive(Default)]
pub(super) struct ResultSubpartition {
    /// The first inline: most subpartitions of a wide shuffle hold one, and a list on the heap
    /// was one more cache miss per fetch.
    pub(super) buffers: SmallVec<[Stored; 1]>,
    /// Consumers long-polling for the next buffer, and a producer waiting for room (a pipelined
    /// partition at capacity).
    pub(super) waiters: ThinVec<Waiter>,
    /// Of a pipelined (not retained) partition: the in-memory buffers before this index were
    /// moved to the consumer, so asking for them again must fail rather than read emptied ones.
    /// A `u32`: a subpartition never holds 2³² buffers (their entries alone would be 160 GB).
    handed_over: u32,
    /// Of a pipelined partition: its consumer stopped reading before the end (see
    /// [`ResultPartition::release_subpartition`]); writes to it are discarded.
    pub(super) released: bool,
}

impl ResultSubpartition {
    /// How many of its buffers were moved to the consumer (a pipelined partition's).
    pub(super) fn handed_over(&self) -> u64 {
        u64::from(self.handed_over)
    }

    /// Marks the buffers before `until` (at most all there are) as moved to the consumer.
    fn hand_over_until(&mut self, until: u64) {
        debug_assert!(until <= self.buffers.len() as u64);
        self.handed_over = u32::try_from(until).expect("a subpartition holds < 2³² buffers");
    }

    /// Wakes the consumers waiting for a buffer (not a producer waiting for room).
    pub(super) fn wake(&mut self) {
        self.wake_where(|waiter| !matches!(waiter, Waiter::Space(_)));
    }

    /// Wakes the producer waiting for room.
    pub(super) fn wake_producer(&mut self) {
        self.wake_where(|waiter| matches!(waiter, Waiter::Space(_)));
    }

    fn wake_where(&mut self, wakes: impl Fn(&Waiter) -> bool) {
        // Nobody of that kind (a fetch that just listened for the next buffer wakes the
        // producer): the list stays as it is, not moved out and built again.
        if !self.waiters.iter().any(&wakes) {
            return;
        }
        for waiter in std::mem::take(&mut self.waiters) {
            if !wakes(&waiter) {
                self.waiters.push(waiter);
                continue;
            }
            match waiter {
                // A consumer or producer that stopped waiting is no error.
                Waiter::Once(sender) | Waiter::Space(sender) => {
                    let _ = sender.send(());
                }
                Waiter::Listener(queue, key) => queue.push(key),
            }
        }
    }
}

// The size the docs of `ResultSubpartition` promise, with its key as the table stores it.
const _: () = assert!(std::mem::size_of::<(u32, ResultSubpartition)>() <= 72);
