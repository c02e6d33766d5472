//! The result partitions a TaskManager holds, between the producer that writes them and the
//! consumers that read them.
//!
//! A producer's task thread [`append`](ResultPartitionManager::append)s buffers (byte [`Buffer`]s of
//! serialized records) to one subpartition per consumer subtask; consumers (local task threads, or the TaskManager actor
//! answering a remote consumer) [`fetch`](ResultPartitionManager::fetch) them by buffer index, long-polling
//! when they have caught up. Buffers stay in memory until a partition's in-memory size would pass
//! the spill threshold; from then on that partition's buffers go to its spill file (one per
//! partition, see `spill`), so memory stays bounded by the threshold whatever the input size. A partition
//! lives until it is [released](ResultPartitionManager::release) (or the store dropped), so a restarted
//! consumer can read it again from buffer 0.
//!
//! A pipelined partition (created with [`create_pipelined`](ResultPartitionManager::create_pipelined))
//! never spills: each subpartition holds at most its capacity of unread buffers, and a producer
//! that finds it full waits ([`reserve`](ResultPartitionManager::reserve)) until its consumer takes one,
//! the partition fails or is released. That wait is backpressure. Consumers read with credit:
//! a fetch returns at most as many buffers as the consumer has room for. A consumer that ends
//! before reading a pipelined subpartition to its end (a `first_n`, a user function that stops
//! early) [releases](ResultPartitionManager::release_subpartition) it (Flink's
//! `onConsumedSubpartition`): what it holds is dropped, later writes to it are discarded and
//! its producer no longer waits for room there, so the producer runs to its end instead of
//! waiting for ever. A release that arrives before its partition exists is kept until it does.
//! The release comes through the consumer's data connection and, should that be lost with the
//! consumer's TaskManager, from the JobManager (a task reports that it finished early) or from
//! the server forgetting the idle connection.
//!
//! The store owns its spill files and must never leave them behind: releasing a partition,
//! failing it, or dropping the store deletes them. It never blocks on an actor or a network, only
//! briefly on its locks and, for spilled buffers, on the local disk, and only on threads that may
//! wait for it (Flink keeps disk I/O off its RPC threads the same way): spill files are written by
//! the producing task's thread, read back by a local consumer's task thread, or, for a remote
//! consumer, planned under the lock ([`ResultPartitionManager::fetch_or_listen`]) and read on
//! the store's [`BlockingIo`] (the TaskManager's actor only hands the read over), and deleted
//! there too: a release frees the spill budget at once and hands the files over.

use std::fmt;
use std::fs::{self, File};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, FileExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{
    Arc, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard, Weak,
};

use tokio::sync::oneshot;

use super::buffer::Buffer;
use super::buffer_pool;
use crate::base::codec::CodecError;
use crate::base::hash::{FixedHashMap, FixedHashSet};
use crate::env::blocking_io::{BlockingIo, InlineIo};
use crate::messages::common::ResultPartitionId;

mod output_budget;
mod read_buffers;
mod result_partition;
mod spill;

pub use output_budget::Room;

use crate::messages::SpillUsage;
use crate::messages::subpartition_set::SubpartitionSet;
use result_partition::{FetchLimit, ResultPartition, State};
use spill::{FetchPlan, PlannedBuffer, SpillDisk, SpillFile, Stored};

/// Why a producer-side operation on a result partition failed.
#[derive(Debug, thiserror::Error)]
pub enum PartitionError {
    /// No such partition: never created, or already released. Not retryable.
    #[error("result partition {0} is unknown (released or never created)")]
    UnknownPartition(ResultPartitionId),
    /// A partition with this id exists already. Not retryable: ids are unique per attempt.
    #[error("result partition {0} already exists")]
    AlreadyExists(ResultPartitionId),
    /// A partition must have at least one subpartition. Not retryable.
    #[error("result partition {0} must have at least one subpartition")]
    NoSubpartitions(ResultPartitionId),
    /// The subpartition index is not below the partition's subpartition count. Not retryable.
    #[error(
        "subpartition {subpartition} is out of range: result partition {id} has {subpartitions}"
    )]
    SubpartitionOutOfRange {
        /// The partition.
        id: ResultPartitionId,
        /// The index asked for.
        subpartition: u32,
        /// How many the partition has.
        subpartitions: u32,
    },
    /// The producer already finished the partition; nothing more may be written. Not retryable.
    #[error("result partition {0} is already finished")]
    AlreadyFinished(ResultPartitionId),
    /// The partition has failed; nothing more may be written. Not retryable.
    #[error("result partition {id} has failed: {reason}")]
    Failed {
        /// The partition.
        id: ResultPartitionId,
        /// Why it failed.
        reason: String,
    },
    /// Writing a spill file failed (disk full, permissions). Retryable: a new attempt, maybe on
    /// another TaskManager, may have room.
    #[error(
        "cannot spill result partition {id} to `{}`{}",
        path.display(),
        crate::env::open_files::hint(source)
    )]
    Spill {
        /// The partition.
        id: ResultPartitionId,
        /// The spill file (or the working directory it should be in).
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// A buffer could not be encoded for spilling (over the codec's size limit). Not retryable:
    /// the producer must send smaller buffers.
    #[error("cannot encode a buffer of result partition {id} for spilling")]
    Encode {
        /// The partition.
        id: ResultPartitionId,
        /// The error.
        #[source]
        source: CodecError,
    },
}

impl PartitionError {
    /// Whether another attempt of the producer could succeed, for the task's failure report.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Spill { .. })
    }
}

/// Whether a producer may append to a subpartition now ([`ResultPartitionManager::reserve`]).
#[derive(Debug)]
pub enum Space {
    /// There is room for one more buffer.
    Available,
    /// The subpartition is full, or the partition's network buffers (its floor and what the
    /// TaskManager lends) are all in use. The room fires when its consumer has taken the
    /// subpartition down to half its capacity, a buffer of the partition is taken, a lent buffer
    /// comes back anywhere, or the partition fails or is released; reserve again then.
    Full(Room),
}

/// What a data connection's server has to look at again: the store pushes a subscription's key
/// when a subpartition it listens to gets a buffer, ends, fails or is released (see
/// [`ResultPartitionManager::fetch_or_listen`]); a reader's key with the partition when a subpartition
/// it reads gets its first buffer ([`ResultPartitionManager::add_reader`]); a partition watcher's key
/// when that partition ends ([`ResultPartitionManager::watch_end`]).
#[derive(Debug, Default)]
pub struct ReadyQueue {
    items: Mutex<ReadyItems>,
    notify: tokio::sync::Notify,
}

/// The items of a [`ReadyQueue`], oldest first in each list.
#[derive(Debug, Default)]
pub struct ReadyItems {
    /// Subscriptions' keys.
    pub keys: Vec<u64>,
    /// `(reader key, partition)`: the partition's subpartition the reader reads got data.
    pub announced: Vec<(u64, ResultPartitionId)>,
    /// Watchers' keys: their partition finished, failed or was released.
    pub ended: Vec<u64>,
}

impl ReadyItems {
    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty() && self.announced.is_empty() && self.ended.is_empty()
    }
}

impl ReadyQueue {
    /// Queues `key` and wakes the one waiting (or the next to wait).
    pub fn push(&self, key: u64) {
        lock(&self.items).keys.push(key);
        self.notify.notify_one();
    }

    /// Queues every key of `keys`, then wakes as [`push`](Self::push) does.
    pub fn push_all(&self, keys: Vec<u64>) {
        if keys.is_empty() {
            return;
        }
        lock(&self.items).keys.extend(keys);
        self.notify.notify_one();
    }

    fn announce(&self, reader: u64, partition: ResultPartitionId) {
        lock(&self.items).announced.push((reader, partition));
        self.notify.notify_one();
    }

    /// Queues a watcher's key: its partition ended.
    pub fn push_ended(&self, key: u64) {
        lock(&self.items).ended.push(key);
        self.notify.notify_one();
    }

    /// Passes on a wake-up that was taken by a waiter that no longer serves the queue.
    pub fn renotify(&self) {
        self.notify.notify_one();
    }

    /// Everything queued so far.
    pub fn take_all(&self) -> ReadyItems {
        std::mem::take(&mut *lock(&self.items))
    }

    /// How many subscription keys are queued.
    #[cfg(test)]
    pub fn keys_queued(&self) -> usize {
        lock(&self.items).keys.len()
    }

    /// Completes after the next [`push`](Self::push) (at once if one came since the last wait).
    pub async fn wait(&self) {
        self.notify.notified().await;
    }
}

/// How a partition ended, as a data connection tells its consumer TaskManager once for all the
/// partition's subpartitions ([`ResultPartitionManager::end_state`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndState {
    /// Still being written.
    Producing,
    /// Finished; only these subpartitions ever had data: the others are finished and empty.
    Finished(SubpartitionSet),
    /// Failed.
    Failed(String),
    /// Not here (released, or not created yet).
    Unknown,
}

/// A data connection's queue and the key it knows the watch by (the connection may be gone).
type Watcher = (Weak<ReadyQueue>, u64);

/// The readers of one subpartition index of one result on this TaskManager (every partition of
/// the result, one per producer subtask), and the partitions whose subpartition has data.
#[derive(Debug, Default)]
struct SubpartitionReaders {
    readers: Vec<Watcher>,
    /// A set: each release takes one partition out of every subpartition's entry, and a list's
    /// scan made releasing the P partitions of a TaskManager cost O(P²) per subpartition.
    with_data: FixedHashSet<ResultPartitionId>,
}

/// Who waits on a subpartition: for its next buffer, or for room in it.
#[derive(Debug)]
enum Waiter {
    /// A local consumer's long poll.
    Once(oneshot::Sender<()>),
    /// A data connection's subscription: its key goes to the queue.
    Listener(Arc<ReadyQueue>, u64),
    /// Its producer, for room (a pipelined subpartition at capacity).
    Space(oneshot::Sender<()>),
}

impl Waiter {
    fn is_closed(&self) -> bool {
        match self {
            Self::Once(sender) | Self::Space(sender) => sender.is_closed(),
            // Only the store holds the queue: its connection is gone.
            Self::Listener(queue, _) => Arc::strong_count(queue) == 1,
        }
    }
}

/// The answer to a [`ResultPartitionManager::fetch`].
#[derive(Debug)]
pub enum Fetch {
    /// Buffers from the requested index on.
    Ready {
        /// At least one buffer unless `finished` and nothing is left; more up to the byte budget.
        buffers: Vec<Buffer>,
        /// The index to fetch from next.
        next_buffer: u64,
        /// The producer has finished and there is nothing after these buffers: the consumer is
        /// done with this subpartition.
        finished: bool,
        /// Buffers stored after these when they were taken (for floating credit).
        backlog: u64,
    },
    /// Nothing new yet. The receiver fires when the producer appends to this subpartition,
    /// finishes or fails (fetch again then); it closes with an error if the partition is
    /// released. A long poll, so consumers never spin.
    Pending(oneshot::Receiver<()>),
    /// Nothing new yet, and the [`ReadyQueue`] given to
    /// [`fetch_or_listen`](ResultPartitionManager::fetch_or_listen) gets the key when there is.
    Listening,
    /// The partition (or this read of it) failed; the consumer must fail too.
    Failed(String),
    /// No such partition: released or never created. The consumer's producer is gone.
    Unknown,
    /// Asked with no credit: this many buffers wait unread (a consumer without credit for the
    /// channel learns it has data, to lend it some).
    Backlog(u64),
}

/// What [`ResultPartitionManager::fetch_or_listen`] decided under the partition's lock.
#[derive(Debug)]
pub enum PlannedFetch {
    /// Buffers to take (perhaps none: the subpartition's end); the subpartition's position has
    /// moved past them already.
    Read(PendingRead),
    /// As [`Fetch::Pending`].
    Pending(oneshot::Receiver<()>),
    /// As [`Fetch::Listening`].
    Listening,
    /// As [`Fetch::Failed`].
    Failed(String),
    /// As [`Fetch::Unknown`].
    Unknown,
    /// As [`Fetch::Backlog`].
    Backlog(u64),
}

/// Buffers a fetch planned under the partition's lock, some perhaps still on disk.
pub struct PendingRead {
    id: ResultPartitionId,
    partition: Arc<Mutex<ResultPartition>>,
    plan: FetchPlan,
}

impl fmt::Debug for PendingRead {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PendingRead")
            .field("id", &self.id)
            .field("buffers", &self.plan.items.len())
            .field("next_buffer", &self.plan.next_buffer)
            .field("finished", &self.plan.finished)
            .finish_non_exhaustive()
    }
}

impl PendingRead {
    /// Whether [`read`](Self::read) touches the disk (else it only moves buffers in memory).
    pub fn needs_disk(&self) -> bool {
        self.plan.needs_disk()
    }

    /// The buffers' size.
    pub fn bytes(&self) -> usize {
        self.plan.bytes
    }

    /// How many buffers it takes.
    pub fn buffers(&self) -> usize {
        self.plan.items.len()
    }

    /// The index to fetch from next.
    pub fn next_buffer(&self) -> u64 {
        self.plan.next_buffer
    }

    /// Whether these are the subpartition's last buffers.
    pub fn finished(&self) -> bool {
        self.plan.finished
    }

    /// Buffers stored after these when they were planned: told with them, so the consumer
    /// lends floating credit without a second look-up of the subpartition.
    pub fn backlog(&self) -> u64 {
        self.plan.backlog
    }

    /// Whether it took every buffer there of a partition still being written, and the
    /// listener given when it was planned now waits for the next buffer or the end.
    pub fn listening(&self) -> bool {
        self.plan.listening
    }

    /// What it reads: see [`ReadSpan`].
    pub fn span(&self) -> ReadSpan {
        ReadSpan {
            partition: Arc::clone(&self.partition),
            subpartition: self.plan.subpartition,
            first: self.first_buffer(),
            next: self.plan.next_buffer,
        }
    }

    fn first_buffer(&self) -> u64 {
        self.plan.next_buffer - self.plan.items.len() as u64
    }

    /// The buffers, or why they cannot be had: blocks on the disk when
    /// [`needs_disk`](Self::needs_disk).
    pub fn read(self) -> Result<Vec<Buffer>, Unreadable> {
        self.plan.read().map_err(|err| {
            // A release or failure racing with the read deletes the file: report that, not
            // the missing file.
            match &lock(&self.partition).state {
                State::Released => Unreadable::Released,
                State::Failed(reason) => Unreadable::Failed(reason.clone()),
                State::Producing | State::Finished => Unreadable::Failed(format!(
                    "cannot read a spilled buffer of result partition {}: {err}",
                    self.id
                )),
            }
        })
    }
}

/// The buffers a [`PendingRead`] reads: of this very partition (not only its id: a partition
/// released and produced again is another), its subpartition, from `first` to before `next`.
pub struct ReadSpan {
    partition: Arc<Mutex<ResultPartition>>,
    subpartition: u32,
    first: u64,
    next: u64,
}

impl fmt::Debug for ReadSpan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReadSpan")
            .field("subpartition", &self.subpartition)
            .field("first", &self.first)
            .field("next", &self.next)
            .finish_non_exhaustive()
    }
}

impl ReadSpan {
    /// How many of these buffers `read` takes if they are its buffers, the first of these
    /// among them: it reads the same subpartition of the same partition from the same buffer
    /// and no further.
    pub fn covers(&self, read: &PendingRead) -> Option<usize> {
        (Arc::ptr_eq(&self.partition, &read.partition)
            && self.subpartition == read.plan.subpartition
            && self.first == read.first_buffer()
            && read.plan.next_buffer <= self.next)
            .then_some(read.plan.items.len())
    }
}

/// Why a [`PendingRead`] got no buffers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unreadable {
    /// The partition failed, or its spill file could not be read: the consumer fails.
    Failed(String),
    /// The partition was released meanwhile.
    Released,
}

/// A snapshot of one partition's size, for metrics and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionStats {
    /// How many subpartitions it has.
    pub subpartitions: u32,
    /// Buffers appended over all subpartitions.
    pub buffers: u64,
    /// How many of them are on disk.
    pub spilled_buffers: u64,
    /// The bytes of the buffers held in memory (at most the spill threshold).
    pub memory_bytes: usize,
    /// Whether the producer has finished it.
    pub finished: bool,
    /// Subpartitions with state of their own (written to or waited on); the others cost
    /// nothing.
    pub stored_subpartitions: u32,
}

/// Every result partition a TaskManager holds.
///
/// Shared (`Send + Sync`, behind an `Arc`) by the task threads that produce and consume and the
/// TaskManager actor that serves remote consumers and releases partitions. A read-write lock
/// guards the map (looked up by every fetch of every task, changed only when a partition comes
/// or goes: thousands of task threads reading local channels must not queue behind one mutex)
/// and one lock each partition, so producers and consumers of different partitions never wait
/// for each other, and spilled buffers are read from disk outside any lock.
pub struct ResultPartitionManager {
    working_dir: PathBuf,
    spill_threshold_bytes: usize,
    disk: Arc<SpillDisk>,
    partitions: RwLock<FixedHashMap<ResultPartitionId, Arc<Mutex<ResultPartition>>>>,
    /// Makes every spill file name unique, even for a partition id released and created again.
    next_spill_file: AtomicU64,
    /// By (edge, subpartition index): who reads it, and which partitions have data there. Taken
    /// after a partition's lock, never before.
    results: Mutex<FixedHashMap<(u32, u32), SubpartitionReaders>>,
    /// Who waits for a partition to end (it may not exist yet). Taken after a partition's lock.
    watchers: Mutex<FixedHashMap<ResultPartitionId, Vec<Watcher>>>,
    /// Subpartitions their consumers released before the partition was created here (its
    /// producer was still deploying), applied when it is. Changed only under the `partitions`
    /// write lock, so a release and a creation cannot miss each other. At most
    /// [`MAX_EARLY_RELEASES`] partitions.
    released_early: Mutex<FixedHashMap<ResultPartitionId, Vec<u32>>>,
}

/// Partitions whose consumers' releases a store keeps before they exist: far more than a
/// TaskManager's producers deploying at once.
pub const MAX_EARLY_RELEASES: usize = 1 << 16;

impl ResultPartitionManager {
    /// A store that spills into `working_dir` (created when first needed) once a partition holds
    /// more than `spill_threshold_bytes` in memory (0: spill everything).
    /// Its blocking I/O runs on the caller's thread ([`InlineIo`]).
    pub fn new(working_dir: PathBuf, spill_threshold_bytes: usize) -> Self {
        Self::with_spill_budget(working_dir, spill_threshold_bytes, None, Arc::new(InlineIo))
    }

    /// As [`new`](Self::new), holding at most `spill_budget` bytes of spill files at once (`None`:
    /// no limit): a spill past it fails its producer (a retryable [`PartitionError::Spill`]).
    /// Spill files are deleted on `io`, and [`PendingRead`]s say whether to read on it.
    pub fn with_spill_budget(
        working_dir: PathBuf,
        spill_threshold_bytes: usize,
        spill_budget: Option<u64>,
        io: Arc<dyn BlockingIo>,
    ) -> Self {
        Self {
            working_dir,
            spill_threshold_bytes,
            disk: Arc::new(SpillDisk::new(spill_budget, io)),
            partitions: RwLock::new(FixedHashMap::default()),
            next_spill_file: AtomicU64::new(0),
            results: Mutex::default(),
            watchers: Mutex::default(),
            released_early: Mutex::default(),
        }
    }

    /// Where spill files go.
    pub fn working_dir(&self) -> &Path {
        &self.working_dir
    }

    /// Bytes spilled: on disk now, at most at once, in all.
    pub fn spill_usage(&self) -> SpillUsage {
        self.disk.usage()
    }

    /// Where this store's blocking I/O goes.
    pub fn io(&self) -> &Arc<dyn BlockingIo> {
        self.disk.io()
    }

    /// Registers a partition with `subpartitions` subpartitions (one per consumer subtask) before
    /// its producer starts, so consumers asking early get `Pending`, not `Unknown`. Its buffers
    /// are kept until released, so a restarted consumer can read them again (blocking results).
    pub fn create(&self, id: ResultPartitionId, subpartitions: u32) -> Result<(), PartitionError> {
        self.create_with(id, subpartitions, true)
    }

    /// Like [`create`](Self::create); with `retain` false, an in-memory buffer is handed to its
    /// consumer and dropped here (moved, not copied): for pipelined results, read exactly once,
    /// whose consumers restart only together with their producer.
    pub fn create_with(
        &self,
        id: ResultPartitionId,
        subpartitions: u32,
        retain: bool,
    ) -> Result<(), PartitionError> {
        if subpartitions == 0 {
            return Err(PartitionError::NoSubpartitions(id));
        }
        let mut partitions = write(&self.partitions);
        if partitions.contains_key(&id) {
            return Err(PartitionError::AlreadyExists(id));
        }
        let mut partition = ResultPartition {
            id,
            state: State::Producing,
            subpartitions: crate::base::index_table::IndexTable::new(subpartitions),
            count: subpartitions,
            memory_bytes: 0,
            spilling: false,
            spill: None,
            retain,
            capacity: None,
            budget: None,
        };
        if let Some(released) = lock(&self.released_early).remove(&id) {
            for subpartition in released {
                partition.release_subpartition(subpartition);
            }
        }
        partitions.insert(id, Arc::new(Mutex::new(partition)));
        Ok(())
    }

    /// The consumer of `subpartition` of partition `id` stopped reading it before its end (it
    /// finished, failed or was cancelled first). Of a pipelined partition, the subpartition's
    /// unread buffers are dropped, later ones discarded as they come, and its producer no longer
    /// waits for room there; a blocking partition keeps everything (a restarted consumer reads
    /// it again). A partition not created yet gets the release when it is. Returns whether
    /// anything was dropped or kept for later.
    pub fn release_subpartition(&self, id: ResultPartitionId, subpartition: u32) -> bool {
        if let Ok(partition) = self.get(id) {
            return lock(&partition).release_subpartition(subpartition);
        }
        // Under the write lock: a creation cannot slip between the look and the note.
        let partitions = write(&self.partitions);
        if let Some(partition) = partitions.get(&id).cloned() {
            drop(partitions);
            return lock(&partition).release_subpartition(subpartition);
        }
        let mut early = lock(&self.released_early);
        if early.len() >= MAX_EARLY_RELEASES && !early.contains_key(&id) {
            log::warn!(
                "partition store: {MAX_EARLY_RELEASES} releases wait for partitions not created \
                 yet; the release of subpartition {subpartition} of {id} is dropped"
            );
            return false;
        }
        early.entry(id).or_default().push(subpartition);
        true
    }

    /// Registers a blocking (batch) partition: written to disk from its first buffer, read back
    /// by its consumers as often as they restart, its files deleted when it is released.
    pub fn create_blocking(
        &self,
        id: ResultPartitionId,
        subpartitions: u32,
    ) -> Result<(), PartitionError> {
        self.create_with(id, subpartitions, true)?;
        let partition = self.get(id)?;
        lock(&partition).spilling = true;
        Ok(())
    }

    /// Registers a pipelined partition: read once (buffers move to the consumer), never spilled,
    /// each subpartition holding at most `capacity` unread buffers (producers
    /// [`reserve`](Self::reserve) before they append).
    pub fn create_pipelined(
        &self,
        id: ResultPartitionId,
        subpartitions: u32,
        capacity: usize,
    ) -> Result<(), PartitionError> {
        self.create_with(id, subpartitions, false)?;
        let partition = self.get(id)?;
        lock(&partition).capacity = Some(capacity.max(1));
        Ok(())
    }

    /// Like [`create_pipelined`](Self::create_pipelined), its buffers in memory also bounded by
    /// `floor` and what `floor`'s pool lends: a producer waits when both are used up. The
    /// partition holds the floor until it is released or fails.
    pub fn create_pipelined_within(
        &self,
        id: ResultPartitionId,
        subpartitions: u32,
        capacity: usize,
        floor: buffer_pool::Floor,
    ) -> Result<(), PartitionError> {
        self.create_pipelined(id, subpartitions, capacity)?;
        let partition = self.get(id)?;
        lock(&partition).budget = Some(output_budget::OutputBudget::new(floor));
        Ok(())
    }

    /// Whether the producer may append one buffer of `bytes` to `subpartition` now. A partition
    /// without a capacity always has room.
    pub fn reserve(
        &self,
        id: ResultPartitionId,
        subpartition: u32,
        bytes: usize,
    ) -> Result<Space, PartitionError> {
        let partition = self.get(id)?;
        let mut partition = lock(&partition);
        partition.check_writable()?;
        let index = partition.subpartition_index(subpartition)?;
        Ok(Self::reserve_locked(&mut partition, index, bytes))
    }

    /// [`reserve`](Self::reserve) under the partition's lock.
    fn reserve_locked(partition: &mut ResultPartition, index: u32, bytes: usize) -> Space {
        let Some(capacity) = partition.capacity else {
            return Space::Available;
        };
        if let Some(sub) = partition.subpartitions.get_mut(index) {
            if sub.released {
                return Space::Available; // its writes are discarded
            }
            let unread = (sub.buffers.len() as u64).saturating_sub(sub.handed_over());
            if unread >= capacity as u64 {
                let (sender, receiver) = oneshot::channel();
                sub.waiters.retain(|waiter| !waiter.is_closed());
                sub.waiters.push(Waiter::Space(sender));
                return Space::Full(Room::of(receiver));
            }
        }
        match partition
            .budget
            .as_mut()
            .map(|budget| budget.reserve(bytes))
        {
            Some(Err(room)) => Space::Full(room),
            _ => Space::Available,
        }
    }

    /// Appends a buffer to one subpartition; called by the producer's task thread.
    ///
    /// The buffer stays in memory if the partition's in-memory size stays within the threshold;
    /// otherwise the partition switches to spilling and this and every later buffer go to disk.
    /// Empty buffers are ignored. A failed spill write fails the whole partition (the spill file
    /// may end in a torn write) and wakes its consumers.
    pub fn append(
        &self,
        id: ResultPartitionId,
        subpartition: u32,
        buffer: Buffer,
    ) -> Result<(), PartitionError> {
        let partition = self.get(id)?;
        let mut partition = lock(&partition);
        partition.check_writable()?;
        let index = partition.subpartition_index(subpartition)?;
        let first = self.append_locked(&mut partition, index, buffer)?;
        // The partition's lock goes first: held while waiting for the store-wide `results`
        // (every producer's first buffer of a subpartition takes it), it made the TaskManager's
        // actor, which looks at every partition when a consumer subscribes, wait behind
        // thousands of producers (SubmitTasks unanswered for 10 s at P = 10,000).
        drop(partition);
        if first {
            self.announce_first(id, &[subpartition]);
        }
        Ok(())
    }

    /// Reserves and appends `buffers` (subpartition, buffer) in order under one lock of the
    /// partition and one of the store's readers, as [`reserve`](Self::reserve) and
    /// [`append`](Self::append) one by one would: a producer's last buffers, one per
    /// subpartition (an all-to-all's producer at P = 1,000 ends with a thousand). Stops at the
    /// first that has no room and answers its [`Room`]; the rest stay in `buffers`, to hand over
    /// once it fires. Answers the number appended.
    pub fn append_all(
        &self,
        id: ResultPartitionId,
        buffers: &mut std::collections::VecDeque<(u32, Buffer)>,
    ) -> Result<(usize, Option<Room>), PartitionError> {
        let partition = self.get(id)?;
        let mut partition = lock(&partition);
        partition.check_writable()?;
        let (mut appended, mut full, mut first) = (0, None, Vec::new());
        while let Some((subpartition, buffer)) = buffers.pop_front() {
            let index = partition.subpartition_index(subpartition)?;
            if let Space::Full(room) = Self::reserve_locked(&mut partition, index, buffer.len()) {
                buffers.push_front((subpartition, buffer));
                full = Some(room);
                break;
            }
            if self.append_locked(&mut partition, index, buffer)? {
                first.push(subpartition);
            }
            appended += 1;
        }
        drop(partition);
        self.announce_first(id, &first);
        Ok((appended, full))
    }

    /// [`append`](Self::append) under the partition's lock: whether it was the first buffer of
    /// its subpartition (its reader must then be told, outside the lock).
    fn append_locked(
        &self,
        partition: &mut ResultPartition,
        index: u32,
        buffer: Buffer,
    ) -> Result<bool, PartitionError> {
        if buffer.is_empty()
            || partition
                .subpartitions
                .get(index)
                .is_some_and(|sub| sub.released)
        {
            if let Some(budget) = partition.budget.as_mut() {
                budget.discarded();
            }
            return Ok(false); // nothing, or for a consumer that is gone
        }
        let bytes = buffer.len();
        let fits = partition
            .memory_bytes
            .checked_add(bytes)
            .is_some_and(|total| total <= self.spill_threshold_bytes);
        // A pipelined partition is bounded by its capacity instead: it never spills.
        let stored = if partition.capacity.is_some() || (!partition.spilling && fits) {
            partition.memory_bytes += bytes;
            if let Some(budget) = partition.budget.as_mut() {
                budget.appended(bytes);
            }
            Stored::Memory(buffer)
        } else {
            partition.spilling = true;
            let spilled = partition.spill(&buffer, &self.working_dir, &self.disk, || {
                self.next_spill_file.fetch_add(1, Ordering::Relaxed)
            });
            match spilled {
                Ok(stored) => stored,
                Err(err) => {
                    partition.fail(format!("spilling failed: {err}"));
                    return Err(err);
                }
            }
        };
        let sub = partition
            .subpartitions
            .get_or_insert_with(index, Default::default);
        let first = sub.buffers.is_empty();
        sub.buffers.push(stored);
        sub.wake();
        Ok(first)
    }

    /// Tells the readers of `subpartitions` of `id`, which just got their first buffers, that
    /// there is data: a reader on another TaskManager may not listen to them yet (it listens to
    /// the partition's end only).
    fn announce_first(&self, id: ResultPartitionId, subpartitions: &[u32]) {
        if subpartitions.is_empty() {
            return;
        }
        let mut results = lock(&self.results);
        // Released meanwhile: its release, which removed it from the map first, cleaned
        // `results` already. (Removed after this look, its clean-up comes after this.)
        if !read(&self.partitions).contains_key(&id) {
            return;
        }
        for &subpartition in subpartitions {
            let result = results.entry((id.edge, subpartition)).or_default();
            result.with_data.insert(id);
            result.readers.retain(|(queue, key)| match queue.upgrade() {
                Some(queue) => {
                    queue.announce(*key, id);
                    true
                }
                None => false,
            });
        }
    }

    /// Marks the partition complete: consumers that read everything now see `finished`.
    pub fn finish(&self, id: ResultPartitionId) -> Result<(), PartitionError> {
        let partition = self.get(id)?;
        let mut partition = lock(&partition);
        partition.check_writable()?;
        partition.state = State::Finished;
        if let Some(spill) = &mut partition.spill {
            spill.close();
        }
        for subpartition in partition.subpartitions.values_mut() {
            subpartition.wake();
        }
        self.ended(id);
        Ok(())
    }

    /// Fails the partition (its producer failed or was cancelled): its data is dropped (spill
    /// files deleted), waiting consumers are woken, and every fetch answers `Failed(reason)`
    /// until it is released. Failing a failed partition keeps the first reason; failing a
    /// finished one is allowed (the JobManager may give up on its attempt).
    pub fn fail(
        &self,
        id: ResultPartitionId,
        reason: impl Into<String>,
    ) -> Result<(), PartitionError> {
        let partition = self.get(id)?;
        let mut partition = lock(&partition);
        match partition.state {
            State::Released => Err(PartitionError::UnknownPartition(id)),
            State::Failed(_) => Ok(()),
            State::Producing | State::Finished => {
                partition.fail(reason.into());
                self.ended(id);
                Ok(())
            }
        }
    }

    /// Whether partition `id` is complete and keeps its data for every reader (a finished
    /// blocking result a new leader can take back).
    pub fn is_finished_and_retained(&self, id: ResultPartitionId) -> bool {
        self.get(id).is_ok_and(|partition| {
            let partition = lock(&partition);
            matches!(partition.state, State::Finished) && partition.retain
        })
    }

    /// Forgets the partition: memory dropped, spill files deleted. Pending fetches complete with
    /// an error (their sender is dropped) and later fetches answer `Unknown`. Returns whether the
    /// partition existed, so releasing twice is harmless.
    pub fn release(&self, id: ResultPartitionId) -> bool {
        let removed = {
            let mut partitions = write(&self.partitions);
            // A partition that never came here takes its early releases with it.
            lock(&self.released_early).remove(&id);
            partitions.remove(&id)
        };
        let Some(partition) = removed else {
            return false;
        };
        let mut partition = lock(&partition);
        partition.state = State::Released;
        partition.memory_bytes = 0;
        partition.budget = None;
        // Listeners hear of it (their next fetch answers `Unknown`); dropping the rest drops
        // the buffers, the other waiters' senders and the spill files (deleting them).
        for subpartition in partition.subpartitions.values_mut() {
            for waiter in subpartition.waiters.drain(..) {
                if let Waiter::Listener(queue, key) = waiter {
                    queue.push(key);
                }
            }
        }
        {
            let mut results = lock(&self.results);
            // Every subpartition stored (a failed one's buffers are gone, its entry stays).
            for (index, _) in partition.subpartitions.iter() {
                if let Some(result) = results.get_mut(&(id.edge, index)) {
                    result.with_data.remove(&id);
                    if result.with_data.is_empty() && result.readers.is_empty() {
                        results.remove(&(id.edge, index));
                    }
                }
            }
        }
        partition.subpartitions.clear();
        self.ended(id);
        true
    }

    /// Reads buffers of one subpartition from index `from_buffer` on: at least one if any is
    /// available, more while their size stays within `max_bytes`. Spilled buffers are
    /// read back from disk outside the locks.
    pub fn fetch(
        &self,
        id: ResultPartitionId,
        subpartition: u32,
        from_buffer: u64,
        max_bytes: usize,
    ) -> Fetch {
        self.fetch_with_credit(id, subpartition, from_buffer, max_bytes, usize::MAX)
    }

    /// Like [`fetch`](Self::fetch), at most `credit` buffers; with no credit, none: the backlog
    /// is told instead ([`Fetch::Backlog`]), or the end, or it waits for data as without.
    pub fn fetch_with_credit(
        &self,
        id: ResultPartitionId,
        subpartition: u32,
        from_buffer: u64,
        max_bytes: usize,
        credit: usize,
    ) -> Fetch {
        let read = (id, subpartition, from_buffer);
        Self::taken(self.plan(read, max_bytes, credit, false, None))
    }

    /// Like [`fetch_with_credit`](Self::fetch_with_credit), but when nothing is new it answers
    /// [`Fetch::Listening`] and pushes `key` to `queue` once the subpartition gets a buffer, ends,
    /// fails or is released: one queue serves every subscription of a data connection, so a
    /// producer TaskManager waits on one thing per connection, not one per channel. Buffers are
    /// planned, not read: the caller reads them with [`PendingRead::read`], on its
    /// [`io`](Self::io) when they are on disk, so an actor never reads a spill file itself.
    pub fn fetch_or_listen(
        &self,
        read: (ResultPartitionId, u32, u64),
        max_bytes: usize,
        credit: usize,
        queue: &Arc<ReadyQueue>,
        key: u64,
    ) -> PlannedFetch {
        self.plan(read, max_bytes, credit, false, Some((queue, key)))
    }

    /// Like [`fetch_or_listen`](Self::fetch_or_listen) for a channel without credit that may
    /// take buffers within `max_bytes` (its set subscription's eager allowance): whole
    /// buffers that fit, the first included, or the backlog if the first does not fit.
    pub fn fetch_eager_or_listen(
        &self,
        read: (ResultPartitionId, u32, u64),
        max_bytes: usize,
        queue: &Arc<ReadyQueue>,
        key: u64,
    ) -> PlannedFetch {
        self.plan(read, max_bytes, usize::MAX, true, Some((queue, key)))
    }

    /// What a planned fetch gives, read on the caller's thread.
    fn taken(planned: PlannedFetch) -> Fetch {
        match planned {
            PlannedFetch::Pending(receiver) => Fetch::Pending(receiver),
            PlannedFetch::Listening => Fetch::Listening,
            PlannedFetch::Failed(reason) => Fetch::Failed(reason),
            PlannedFetch::Unknown => Fetch::Unknown,
            PlannedFetch::Backlog(buffers) => Fetch::Backlog(buffers),
            PlannedFetch::Read(read) => {
                let (next_buffer, finished, backlog) =
                    (read.next_buffer(), read.finished(), read.backlog());
                match read.read() {
                    Ok(buffers) => Fetch::Ready {
                        buffers,
                        next_buffer,
                        finished,
                        backlog,
                    },
                    Err(Unreadable::Failed(reason)) => Fetch::Failed(reason),
                    Err(Unreadable::Released) => Fetch::Unknown,
                }
            }
        }
    }

    /// A fetch of `read` (partition, subpartition, first buffer) of at most `max_bytes`,
    /// planned ahead of the poll that will ask for it (see the server's `read_ahead`): only
    /// of a finished result whose buffers stay (a blocking one, whose buffers no longer
    /// change) and only if it reads the disk. Planning it changes nothing there.
    pub fn plan_ahead(
        &self,
        read: (ResultPartitionId, u32, u64),
        max_bytes: usize,
    ) -> Option<PendingRead> {
        let (id, subpartition, from_buffer) = read;
        let partition = self.get(id).ok()?;
        let plan = {
            let mut guard = lock(&partition);
            let stored = guard
                .subpartitions
                .get(subpartition)
                .map_or(0, |sub| sub.buffers.len() as u64);
            if !guard.retain || !matches!(guard.state, State::Finished) || from_buffer >= stored {
                return None;
            }
            let limit = FetchLimit {
                max_bytes,
                credit: usize::MAX,
                strict: false,
            };
            guard
                .plan_fetch(subpartition, from_buffer, limit, None)
                .ok()?
        };
        plan.needs_disk().then_some(PendingRead {
            id,
            partition,
            plan,
        })
    }

    /// Plans a fetch of `read` (partition, subpartition, first buffer); `strict`: even the
    /// first buffer must fit `max_bytes`.
    fn plan(
        &self,
        read: (ResultPartitionId, u32, u64),
        max_bytes: usize,
        credit: usize,
        strict: bool,
        listener: Option<(&Arc<ReadyQueue>, u64)>,
    ) -> PlannedFetch {
        let (id, subpartition, from_buffer) = read;
        let Ok(partition) = self.get(id) else {
            return PlannedFetch::Unknown;
        };
        let limit = FetchLimit {
            max_bytes,
            credit,
            strict,
        };
        let planned = lock(&partition).plan_fetch(subpartition, from_buffer, limit, listener);
        match planned {
            Ok(plan) => PlannedFetch::Read(PendingRead {
                id,
                partition,
                plan,
            }),
            Err(answer) => answer,
        }
    }

    /// The partition's size right now, or `None` if it is unknown.
    pub fn stats(&self, id: ResultPartitionId) -> Option<PartitionStats> {
        let partition = self.get(id).ok()?;
        let partition = lock(&partition);
        let mut stats = PartitionStats {
            subpartitions: partition.count,
            buffers: 0,
            spilled_buffers: 0,
            memory_bytes: partition.memory_bytes,
            finished: matches!(partition.state, State::Finished),
            stored_subpartitions: partition.subpartitions.len() as u32,
        };
        for (_, subpartition) in partition.subpartitions.iter() {
            stats.buffers += subpartition.buffers.len() as u64;
            stats.spilled_buffers += subpartition
                .buffers
                .iter()
                .filter(|b| matches!(b, Stored::Spilled { .. }))
                .count() as u64;
        }
        Some(stats)
    }

    /// The ids of every partition held, in order: what the TaskManager reports and releases.
    pub fn partition_ids(&self) -> Vec<ResultPartitionId> {
        let mut ids: Vec<ResultPartitionId> = read(&self.partitions).keys().copied().collect();
        ids.sort_unstable();
        ids
    }

    /// Registers a reader of subpartition `subpartition` of every partition of `edge` here:
    /// `queue` gets `(key, partition)` when one of them gets its first buffer there. Returns the
    /// partitions that have data there already.
    pub fn add_reader(
        &self,
        edge: u32,
        subpartition: u32,
        queue: &Arc<ReadyQueue>,
        key: u64,
    ) -> Vec<ResultPartitionId> {
        let mut results = lock(&self.results);
        let result = results.entry((edge, subpartition)).or_default();
        result.readers.push((Arc::downgrade(queue), key));
        let mut with_data: Vec<ResultPartitionId> = result.with_data.iter().copied().collect();
        with_data.sort_unstable();
        with_data
    }

    /// Forgets a reader [`add_reader`](Self::add_reader) registered.
    pub fn remove_reader(&self, edge: u32, subpartition: u32, queue: &Arc<ReadyQueue>, key: u64) {
        let mut results = lock(&self.results);
        if let Some(result) = results.get_mut(&(edge, subpartition)) {
            let queue = Arc::downgrade(queue);
            result
                .readers
                .retain(|(q, k)| !(*k == key && q.ptr_eq(&queue)) && q.strong_count() > 0);
            if result.readers.is_empty() && result.with_data.is_empty() {
                results.remove(&(edge, subpartition));
            }
        }
    }

    /// Registers `key` with `queue` to hear when partition `id` ends (finishes, fails or is
    /// released), unless it has ended already; says how it stands. `Unknown`: it is not here
    /// (yet): the watch stands, but a partition created and ended meanwhile may have been
    /// missed, so the caller looks again once it exists.
    pub fn watch_end(&self, id: ResultPartitionId, queue: &Arc<ReadyQueue>, key: u64) -> EndState {
        let partition = self.get(id).ok();
        let guard = partition.as_ref().map(|partition| lock(partition));
        let state = guard.as_ref().map_or(EndState::Unknown, |p| p.end_state());
        if matches!(state, EndState::Producing | EndState::Unknown) {
            lock(&self.watchers)
                .entry(id)
                .or_default()
                .push((Arc::downgrade(queue), key));
        }
        state
    }

    /// How partition `id` stands (see [`EndState`]).
    pub fn end_state(&self, id: ResultPartitionId) -> EndState {
        self.get(id)
            .map_or(EndState::Unknown, |partition| lock(&partition).end_state())
    }

    /// Drops the watches of connections that are gone (of partitions that never came).
    pub fn prune_watchers(&self) {
        lock(&self.watchers).retain(|_, watchers| {
            watchers.retain(|(queue, _)| queue.strong_count() > 0);
            !watchers.is_empty()
        });
    }

    /// Partition `id` ended: its watchers hear of it.
    fn ended(&self, id: ResultPartitionId) {
        let Some(watchers) = lock(&self.watchers).remove(&id) else {
            return;
        };
        for (queue, key) in watchers {
            if let Some(queue) = queue.upgrade() {
                queue.push_ended(key);
            }
        }
    }

    fn get(&self, id: ResultPartitionId) -> Result<Arc<Mutex<ResultPartition>>, PartitionError> {
        read(&self.partitions)
            .get(&id)
            .cloned()
            .ok_or(PartitionError::UnknownPartition(id))
    }
}

impl fmt::Debug for ResultPartitionManager {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResultPartitionManager")
            .field("working_dir", &self.working_dir)
            .field("spill_threshold_bytes", &self.spill_threshold_bytes)
            .field("partitions", &read(&self.partitions).len())
            .finish()
    }
}

/// Takes a lock even if a thread panicked while holding it: every critical section here leaves
/// the state consistent between statements that could panic (only allocation can), and a poisoned
/// store must still release and delete its files.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// [`lock`] for reading the map of partitions.
fn read<T>(lock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(PoisonError::into_inner)
}

/// [`lock`] for changing the map of partitions.
fn write<T>(lock: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
pub(crate) mod tests;
