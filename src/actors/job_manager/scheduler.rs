//! Slot allocation for tasks: bulks per pipelined region, slot sharing, co-location, locality, a
//! FIFO queue, and timeouts.
//!
//! Pure data, driven by the JobManager. A job asks for the slots of one pipelined region at a
//! time, as one bulk (Flink's `PhysicalSlotRequestBulk`): every task of the region gets a slot, or
//! none does, so two jobs can never deadlock each holding part of what it needs.
//! [`Scheduler::request_bulk`] only queues; [`Scheduler::serve`] places bulks from the head of
//! the queue while they fit, and is called after anything that may free a slot (a release, a new
//! TaskManager, a new bulk: Flink's `newSlotAvailable`).
//!
//! **Order and placement policies** live in [`strategy`], each chosen by a configuration key: which
//! queued bulk is placed next ([`strategy::RegionSchedulingStrategy`], `backfill` by default: the
//! queue is ordered by job submission, then by region; a head that does not fit lets bulks that
//! do fit go first, so no slot idles while something fits, but only a bounded number of times
//! before the freed slots are kept for it, so a large region can never starve; `fifo` makes the
//! head block everything behind it) and which TaskManager a new slot comes from when locality
//! does not decide ([`strategy::SlotSelectionStrategy`], `spread_out` by default).
//!
//! **Timeouts** (Flink's batch semantics): a bulk waiting because slots are busy waits as long
//! as it takes. Only a bulk the cluster could not serve even with every slot free (it needs
//! more slots than are registered, or than the TaskManagers that run its job's operators have)
//! fails, with [`NoResourceAvailable`], once it has been in that state for the slot request
//! timeout.
//!
//! **Placement** of one task, in Flink's order: a shared slot on a preferred TaskManager (the one
//! with most of its inputs first, equal ones by most free slots), else a new slot there, else
//! any shared slot, else a new slot on the TaskManager the slot selection strategy picks (by
//! default the one with the most free slots, ties by registration order, so one crash takes few
//! tasks). More than [`MAX_PREFERRED_LOCATIONS`] distinct producer locations mean no
//! preference. A *shared slot* is one physical slot holding at most one subtask of each vertex
//! of one slot sharing group of one job. Co-location locks subtask i of every vertex of a
//! co-location group to the shared slot the first of them got; after that slot is gone the lock
//! keeps its TaskManager as the preferred location. When locality spent a slot the bulk needed,
//! the bulk is placed again without preferences (the exact slot count check below guarantees
//! that this fits).
//!
//! **Costs** (counted in [`SchedulerCounters`], asserted by tests): every lookup is indexed —
//! TaskManagers by free slots, shared slots per group, vertex and TaskManager, slots and
//! co-location locks per allocation — so serving the head of the queue is O(log Q + bulk size ·
//! log T) (a head that does not fit adds a look at most [`strategy::Backfill::LOOKAHEAD`] bulks
//! behind it, and none while no slot is free), placing one task O(log T), releasing one
//! O(log n), and losing a TaskManager touches only its own slots. Queued demand and free slots are kept as running totals.
//!
//! Inside, TaskManagers, shared slots and slot sharing groups are small integer keys into
//! tables ([`slab::Slab`], keys reused), resolved from their ids once per request: the indices
//! compare and copy integers, not text, and a slot leaves its TaskManager's and group's lists in
//! O(1) (each slot knows its position in both).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::ops::Bound;
use std::sync::Arc;

use actix::clock::Instant;
use serde::{Deserialize, Serialize};
use slab::Slab;

use crate::base::hash::FixedHashMap;
use crate::base::ids::{AllocationId, JobId, ResourceId};
use crate::base::rng::NodeRng;
use crate::config::SchedulerConfig;
use crate::messages::job_manager::Locality;

pub mod capabilities;
mod demand;
mod expiry;
mod requests;
pub mod strategy;

use capabilities::{Classes, OperatorSet};
pub use expiry::NoResourceAvailable;
use requests::{bulk_shape, distinct_preferences, locality};

use strategy::{FreeSlots, QueuedBulkView, RegionSchedulingStrategy, Serve, SlotSelectionStrategy};

/// More distinct preferred locations than this count as no preference (Flink's limit).
pub const MAX_PREFERRED_LOCATIONS: usize = 8;

/// One subtask of one job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TaskRef {
    /// The job.
    pub job: JobId,
    /// The vertex's index in the job graph.
    pub vertex: usize,
    /// The subtask index.
    pub subtask: u32,
}

/// One bulk: the slot requests of one pipelined region of one job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BulkId {
    /// The job.
    pub job: JobId,
    /// The region's index in the job's pipelined regions.
    pub region: usize,
}

impl fmt::Display for BulkId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "region {} of job {}", self.region, self.job)
    }
}

/// A task's request for a slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotRequest {
    /// Who asks.
    pub task: TaskRef,
    /// Its vertex's slot sharing group (shared text: it keys several indices per placement).
    pub sharing_group: Arc<str>,
    /// Its vertex's co-location group, if any.
    pub co_location_group: Option<String>,
    /// The TaskManagers of its producers placed already (empty: no preference).
    pub preferred: Vec<ResourceId>,
    /// Producers in the same bulk: their TaskManagers count as preferred once they are placed
    /// (the bulk places producers first).
    pub preferred_tasks: Vec<TaskRef>,
}

/// Where a task was placed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotAssignment {
    /// The shared slot (the allocation the TaskManager sees).
    pub allocation_id: AllocationId,
    /// The TaskManager.
    pub resource_id: ResourceId,
    /// How well preferences were met.
    pub locality: Locality,
}

/// A bulk placed: every task of it with its slot, in the order of its requests.
pub type PlacedBulk = (BulkId, Vec<(TaskRef, SlotAssignment)>);

/// Work counted by the scheduler: tests bound it to prove the costs in the module docs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SchedulerCounters {
    /// Queue entries looked at (serving, expiring, cancelling).
    pub queue_visits: u64,
    /// TaskManager entries looked at while choosing where to open a slot.
    pub task_manager_visits: u64,
    /// Shared slots looked at (initialising an index, losing a TaskManager).
    pub slot_visits: u64,
}

/// A registered TaskManager: its slots and the shared slots open on it.
#[derive(Debug, Clone)]
struct TaskManagerEntry {
    id: ResourceId,
    /// Its class: the TaskManagers that run the same operators ([`capabilities`]).
    class: usize,
    total: u32,
    used: u32,
    /// Keys of its shared slots, in no order (each slot knows its position: O(1) removal).
    slots: Vec<usize>,
}

impl TaskManagerEntry {
    fn free(&self) -> u32 {
        self.total - self.used
    }
}

/// Key of a slot sharing group instance.
type GroupKey = (JobId, Arc<str>);

/// Key of a co-location lock: subtask i of one co-location group of one job.
type LockKey = (JobId, String, u32);

#[derive(Debug, Clone)]
struct SharedSlot {
    allocation_id: AllocationId,
    /// Its TaskManager's key, and its position in that TaskManager's `slots`.
    task_manager: usize,
    at_task_manager: usize,
    /// Its group's key, and its position in that group's `slots`.
    group: usize,
    at_group: usize,
    tasks: SlotTasks,
}

/// The subtasks in one shared slot, at most one per vertex of its group, sorted by vertex: a
/// handful of pairs, so a sorted vector (no allocation per slot beyond one small buffer).
#[derive(Debug, Clone, Default)]
struct SlotTasks(Vec<(usize, u32)>);

impl SlotTasks {
    fn contains(&self, vertex: usize) -> bool {
        self.0.binary_search_by_key(&vertex, |(v, _)| *v).is_ok()
    }

    /// False (and nothing changes) if `vertex` has a subtask here already.
    fn insert(&mut self, vertex: usize, subtask: u32) -> bool {
        match self.0.binary_search_by_key(&vertex, |(v, _)| *v) {
            Ok(_) => false,
            Err(at) => {
                self.0.insert(at, (vertex, subtask));
                true
            }
        }
    }

    fn remove(&mut self, vertex: usize) {
        if let Ok(at) = self.0.binary_search_by_key(&vertex, |(v, _)| *v) {
            self.0.remove(at);
        }
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn iter(&self) -> impl Iterator<Item = (usize, u32)> + '_ {
        self.0.iter().copied()
    }
}

#[derive(Debug, Clone)]
struct CoLocationLock {
    /// The locked shared slot while it exists, and its key.
    allocation_id: Option<AllocationId>,
    slot: usize,
    resource_id: ResourceId,
}

/// One slot sharing group of one job: its shared slots, and per vertex the ones lacking it.
#[derive(Debug, Clone)]
struct Group {
    key: GroupKey,
    /// Keys of its shared slots, in no order (each slot knows its position).
    slots: Vec<usize>,
    /// Per vertex (sorted by vertex): the shared slots without it, initialised on first use.
    available: Vec<(usize, Available)>,
    /// Its job ended while slots were still open: the group goes with its last slot.
    forgotten: bool,
}

impl Group {
    fn available_mut(&mut self, vertex: usize) -> Option<&mut Available> {
        let at = self
            .available
            .binary_search_by_key(&vertex, |(v, _)| *v)
            .ok()?;
        Some(&mut self.available[at].1)
    }
}

/// Shared slots of one group that lack one vertex, as `(TaskManager key, slot key)` packed
/// into one integer: by TaskManager, so the ones on a preferred TaskManager are a range.
#[derive(Debug, Clone, Default)]
struct Available(BTreeSet<u64>);

impl Available {
    fn entry(task_manager: usize, slot: usize) -> u64 {
        ((task_manager as u64) << 32) | slot as u64
    }

    fn insert(&mut self, task_manager: usize, slot: usize) {
        self.0.insert(Self::entry(task_manager, slot));
    }

    fn remove(&mut self, task_manager: usize, slot: usize) {
        self.0.remove(&Self::entry(task_manager, slot));
    }

    fn len(&self) -> u64 {
        self.0.len() as u64
    }

    /// A slot on `task_manager`, or on any for `None` (the first TaskManager's first).
    fn any_on(&self, task_manager: Option<usize>) -> Option<usize> {
        let entry = match task_manager {
            Some(tm) => self
                .0
                .range(Self::entry(tm, 0)..Self::entry(tm + 1, 0))
                .next(),
            None => self.0.first(),
        }?;
        Some((entry & u64::from(u32::MAX)) as usize)
    }
}

/// Key of the index of TaskManagers by free slots: the most free last, ties by the smallest key
/// last.
fn by_free_entry(free: u32, task_manager: usize) -> u64 {
    (u64::from(free) << 32) | u64::from(u32::MAX - task_manager as u32)
}

/// Queue order: job submission (the order jobs first asked), then region.
type QueueKey = (u64, usize);

#[derive(Debug, Clone)]
struct QueuedBulk {
    id: BulkId,
    requests: Vec<SlotRequest>,
    /// Each request's group key, in the order of `requests`.
    groups: Vec<usize>,
    /// Tasks per (group key, vertex), sorted: what the exact slot count is computed from.
    per_vertex: Vec<(usize, usize, u64)>,
    /// Slots it needs with no shared slot of its groups open: Σ over groups of the largest
    /// vertex count.
    need: u64,
    /// Since when the registered slots could not serve it even if all were free.
    unfulfillable_since: Option<Instant>,
    /// Since when the slots of the TaskManagers that run its job's operators could not serve it
    /// even if all were free (only when some TaskManagers cannot run the job).
    incapable_since: Option<Instant>,
}

/// See the module docs.
#[derive(Debug)]
pub struct Scheduler {
    rng: NodeRng,
    /// Registered TaskManagers by key (a small integer: every index below holds keys, not ids).
    task_managers: Slab<TaskManagerEntry>,
    task_manager_keys: BTreeMap<ResourceId, usize>,
    /// TaskManagers with a free slot ([`by_free_entry`]).
    by_free: BTreeSet<u64>,
    /// The same per class of TaskManagers that run the same operators, and what jobs need.
    classes: Classes,
    total_slots: u64,
    free_slots: u64,
    /// Open shared slots by key.
    slots: Slab<SharedSlot>,
    /// Slot sharing groups by key.
    groups: Slab<Group>,
    group_keys: BTreeMap<GroupKey, usize>,
    /// The group [`group_key`](Self::group_key) found last.
    last_group: Option<(JobId, Arc<str>, usize)>,
    /// Each placed task's shared slot.
    assignments: FixedHashMap<TaskRef, usize>,
    co_location: BTreeMap<LockKey, CoLocationLock>,
    /// The locks that point at each shared slot.
    locks_on: BTreeMap<AllocationId, BTreeSet<LockKey>>,
    /// Each job's place in the queue order, from its first bulk.
    job_order: BTreeMap<JobId, u64>,
    next_job_order: u64,
    queue: BTreeMap<QueueKey, QueuedBulk>,
    /// Queued bulks by the slots they need, for the timeout sweep.
    by_need: BTreeSet<(u64, QueueKey)>,
    queued_tasks: usize,
    queued_need: u64,
    /// What the jobs want, each job's share capped ([`demand`]).
    demand: demand::JobDemands,
    counters: SchedulerCounters,
    /// Where a new slot goes when locality does not decide.
    slot_selection: Box<dyn SlotSelectionStrategy>,
    /// Which queued bulk is placed next.
    region_order: Box<dyn RegionSchedulingStrategy>,
}

impl Scheduler {
    /// An empty scheduler; allocation ids come from `rng`.
    pub fn new(rng: NodeRng) -> Self {
        Self {
            rng,
            task_managers: Slab::new(),
            task_manager_keys: BTreeMap::new(),
            by_free: BTreeSet::new(),
            classes: Classes::default(),
            total_slots: 0,
            free_slots: 0,
            slots: Slab::new(),
            groups: Slab::new(),
            group_keys: BTreeMap::new(),
            last_group: None,
            assignments: FixedHashMap::default(),
            co_location: BTreeMap::new(),
            locks_on: BTreeMap::new(),
            job_order: BTreeMap::new(),
            next_job_order: 0,
            queue: BTreeMap::new(),
            by_need: BTreeSet::new(),
            queued_tasks: 0,
            queued_need: 0,
            demand: demand::JobDemands::new(),
            counters: SchedulerCounters::default(),
            slot_selection: Box::new(strategy::SpreadOut),
            region_order: Box::new(strategy::Backfill::default()),
        }
    }

    /// The same with the strategies `config` names (`jobmanager.scheduler.*`).
    pub fn with_strategies(mut self, config: SchedulerConfig) -> Self {
        self.slot_selection = strategy::slot_selection(config.slot_selection);
        self.region_order = strategy::region_scheduling(config.region_order);
        self
    }

    /// Caps the slots one job's demand counts for at `slots` (the pool growth one job may
    /// cause: `resourcemanager.max-workers-per-job` × slots per TaskManager); a job already
    /// holding more keeps what it holds but asks for nothing beyond it.
    pub fn with_job_cap(mut self, slots: u64) -> Self {
        self.demand.set_cap(slots);
        self
    }

    /// Records the operators `job` needs: its tasks get slots only on TaskManagers that run
    /// them all (until [`forget_job`](Self::forget_job)).
    pub fn require(&mut self, job: JobId, operators: OperatorSet) {
        self.classes.require(job, operators);
    }

    /// Whether a registered TaskManager can run `operator`.
    pub fn can_run(&self, operator: &str) -> bool {
        self.classes.runs_anywhere(operator)
    }

    /// `job` ended: it needs nothing any more.
    pub fn release_requirements(&mut self, job: JobId) {
        self.classes.forget(job);
    }

    /// Free slots on TaskManagers that can run `job`.
    fn free_slots_for(&self, job: JobId) -> u64 {
        self.classes.free_for(job).unwrap_or(self.free_slots)
    }

    /// The work counted so far.
    pub fn counters(&self) -> SchedulerCounters {
        self.counters
    }

    /// A TaskManager with `slots` slots that runs any operator joined; call
    /// [`serve`](Self::serve) after to serve the queue.
    pub fn add_task_manager(&mut self, resource_id: ResourceId, slots: u32) {
        self.add_task_manager_running(resource_id, slots, None);
    }

    /// A TaskManager with `slots` slots that runs `operators` (`None`: any) joined: only jobs
    /// whose operators it has get slots there.
    pub fn add_task_manager_running(
        &mut self,
        resource_id: ResourceId,
        slots: u32,
        operators: Option<OperatorSet>,
    ) {
        if self.task_manager_keys.contains_key(&resource_id) {
            return;
        }
        let before = self.total_slots;
        let class = self.classes.join(operators);
        let key = self.task_managers.insert(TaskManagerEntry {
            id: resource_id.clone(),
            class,
            total: slots,
            used: 0,
            slots: Vec::new(),
        });
        self.task_manager_keys.insert(resource_id, key);
        if slots > 0 {
            self.by_free.insert(by_free_entry(slots, key));
            let class = self.classes.class_mut(class);
            class.by_free.insert(by_free_entry(slots, key));
            class.free += u64::from(slots);
        }
        self.classes.class_mut(class).slots += u64::from(slots);
        self.total_slots += u64::from(slots);
        self.free_slots += u64::from(slots);
        // Bulks the cluster can serve now stop counting towards their timeout.
        let became_fulfillable: Vec<QueueKey> = self
            .by_need
            .range((before + 1, (0, 0))..(self.total_slots + 1, (0, 0)))
            .map(|(_, key)| *key)
            .collect();
        for key in became_fulfillable {
            self.counters.queue_visits += 1;
            if let Some(bulk) = self.queue.get_mut(&key) {
                bulk.unfulfillable_since = None;
            }
        }
    }

    /// A TaskManager left: its shared slots are gone. Returns the tasks that were placed there.
    pub fn remove_task_manager(&mut self, resource_id: &ResourceId) -> Vec<TaskRef> {
        let Some(key) = self.task_manager_keys.remove(resource_id) else {
            return Vec::new();
        };
        let entry = self.task_managers.remove(key);
        self.by_free.remove(&by_free_entry(entry.free(), key));
        let class = self.classes.class_mut(entry.class);
        class.by_free.remove(&by_free_entry(entry.free(), key));
        class.free -= u64::from(entry.free());
        class.slots -= u64::from(entry.total);
        self.classes.leave(entry.class);
        let mut lost = Vec::new();
        for &slot_key in &entry.slots {
            self.counters.slot_visits += 1;
            let slot = self.drop_shared_slot(slot_key, false);
            let job = self.groups[slot.group].key.0;
            for (vertex, subtask) in slot.tasks.iter() {
                let task = TaskRef {
                    job,
                    vertex,
                    subtask,
                };
                self.assignments.remove(&task);
                lost.push(task);
            }
            self.drop_group_if_done(slot.group);
        }
        // Dropping its shared slots freed nothing (it was no longer registered): its slots go.
        self.total_slots -= u64::from(entry.total);
        self.free_slots -= u64::from(entry.free());
        lost.sort();
        lost
    }

    /// Queues the slot requests of one region as one bulk. Nothing is placed until
    /// [`serve`](Self::serve). Asking again for a bulk already queued changes nothing.
    pub fn request_bulk(&mut self, id: BulkId, requests: Vec<SlotRequest>, now: Instant) {
        let next = &mut self.next_job_order;
        let order = *self.job_order.entry(id.job).or_insert_with(|| {
            *next += 1;
            *next
        });
        let key = (order, id.region);
        if self.queue.contains_key(&key) || requests.is_empty() {
            return;
        }
        let groups: Vec<usize> = requests
            .iter()
            .map(|request| self.group_key(id.job, &request.sharing_group))
            .collect();
        let (per_vertex, need) = match requests.as_slice() {
            // One task (independent subtasks: the common case of many regions): one slot.
            [only] => (vec![(groups[0], only.task.vertex, 1)], 1),
            _ => bulk_shape(&requests, &groups),
        };
        self.queued_tasks += requests.len();
        self.queued_need += need;
        self.demand.change(id.job, 0, need as i64);
        self.by_need.insert((need, key));
        let unfulfillable_since = (need > self.total_slots).then_some(now);
        self.queue.insert(
            key,
            QueuedBulk {
                id,
                requests,
                groups,
                per_vertex,
                need,
                unfulfillable_since,
                incapable_since: None,
            },
        );
    }

    /// The key of `job`'s slot sharing group `name`, made on first use.
    fn group_key(&mut self, job: JobId, name: &Arc<str>) -> usize {
        // A job's regions ask one after the other with the same group text: the last answer
        // (it holds the text, so the pointer cannot be reused while it is kept).
        if let Some((last_job, last_name, group)) = &self.last_group
            && *last_job == job
            && Arc::ptr_eq(last_name, name)
        {
            return *group;
        }
        let key = (job, name.clone());
        let group = match self.group_keys.get(&key) {
            Some(group) => *group,
            None => self.new_group(key),
        };
        self.last_group = Some((job, name.clone(), group));
        group
    }

    fn new_group(&mut self, key: GroupKey) -> usize {
        let group = self.groups.insert(Group {
            key: key.clone(),
            slots: Vec::new(),
            available: Vec::new(),
            forgotten: false,
        });
        self.group_keys.insert(key, group);
        group
    }

    /// Places queued bulks in the order the [`RegionSchedulingStrategy`] decides (from the head
    /// of the queue while they fit, by default), until `max_tasks` tasks were placed (at least
    /// one bulk, if one is placed at all). Returns what was placed and whether more could be
    /// placed now (the caller serves again later, so that one call stays short).
    pub fn serve(&mut self, max_tasks: usize) -> (Vec<PlacedBulk>, bool) {
        let mut placed = Vec::new();
        let mut tasks = 0;
        // Each round looks at the queue from its head: a placement changes what fits.
        'rounds: loop {
            let mut position = 0;
            let mut next = self.queue.first_key_value().map(|(key, _)| *key);
            while let Some(key) = next {
                self.counters.queue_visits += 1;
                if tasks >= max_tasks.max(1) {
                    return (placed, self.head_would_be_placed());
                }
                let view = self.view(key, position);
                match self.region_order.decide(view) {
                    Serve::Place if view.fits => {
                        let Some(assignments) = self.try_place_bulk(key) else {
                            break 'rounds;
                        };
                        let bulk = self.dequeue(key);
                        tasks += assignments.len();
                        placed.push((bulk.id, assignments));
                        continue 'rounds;
                    }
                    // With no slot free, only a bulk that fits entirely into shared slots it
                    // already holds could be placed: not worth a walk past the head on every
                    // freed slot (it is placed once a slot frees or the head goes).
                    Serve::Skip if self.free_slots == 0 => break 'rounds,
                    Serve::Skip => {
                        position += 1;
                        next = self
                            .queue
                            .range((Bound::Excluded(key), Bound::Unbounded))
                            .next()
                            .map(|(key, _)| *key);
                    }
                    Serve::Place | Serve::Stop => break 'rounds,
                }
            }
            break;
        }
        (placed, false)
    }

    /// The queued bulk `key` at `position` as the strategy sees it.
    fn view(&mut self, key: QueueKey, position: usize) -> QueuedBulkView {
        let fits = self.new_slots_needed(key) <= self.free_slots_for(self.queue[&key].id.job);
        let bulk = &self.queue[&key];
        QueuedBulkView {
            id: bulk.id,
            position,
            tasks: bulk.requests.len(),
            fits,
        }
    }

    /// Whether the strategy would place the head of the queue now.
    fn head_would_be_placed(&mut self) -> bool {
        let Some((&key, _)) = self.queue.first_key_value() else {
            return false;
        };
        let view = self.view(key, 0);
        view.fits && self.region_order.decide(view) == Serve::Place
    }

    /// Places every request of the queued bulk `key`, or none.
    fn try_place_bulk(&mut self, key: QueueKey) -> Option<Vec<(TaskRef, SlotAssignment)>> {
        if self.new_slots_needed(key) > self.free_slots_for(self.queue[&key].id.job) {
            return None;
        }
        // Borrowed out of the queue while placing (placing never touches the queue), not
        // cloned: one region can hold tens of thousands of requests.
        let bulk = self.queue.get_mut(&key)?;
        let requests = std::mem::take(&mut bulk.requests);
        let groups = std::mem::take(&mut bulk.groups);
        let placed = [true, false]
            .into_iter()
            .find_map(|with_preferences| self.place_all(&requests, &groups, with_preferences));
        let bulk = self.queue.get_mut(&key)?;
        bulk.requests = requests;
        bulk.groups = groups;
        if placed.is_none() {
            // Only a co-location lock onto a slot this bulk cannot use gets here; the bulk
            // waits for that slot to go.
            log::debug!(
                "scheduler: {} fits by count but could not be placed",
                bulk.id
            );
        }
        placed
    }

    /// New shared slots the queued bulk `key` needs: per group, the vertex lacking the most
    /// slots decides (a new slot serves one subtask of every vertex of its group).
    fn new_slots_needed(&mut self, key: QueueKey) -> u64 {
        let Some(bulk) = self.queue.get_mut(&key) else {
            return 0;
        };
        // Sorted by group, then vertex: one group after the other.
        let per_vertex = std::mem::take(&mut bulk.per_vertex);
        let (mut total, mut largest) = (0, 0);
        let mut current = None;
        for &(group, vertex, count) in &per_vertex {
            if current != Some(group) {
                total += largest;
                largest = 0;
                current = Some(group);
            }
            let open = self.available_index(group, vertex).len();
            largest = largest.max(count.saturating_sub(open));
        }
        total += largest;
        if let Some(bulk) = self.queue.get_mut(&key) {
            bulk.per_vertex = per_vertex;
        }
        total
    }

    /// The index of `group`'s shared slots lacking `vertex`, built on first use (one pass over
    /// the group's slots) and kept up to date from then on.
    fn available_index(&mut self, group: usize, vertex: usize) -> &mut Available {
        let entry = &mut self.groups[group];
        let at = match entry.available.binary_search_by_key(&vertex, |(v, _)| *v) {
            Ok(at) => at,
            Err(at) => {
                let mut available = Available::default();
                for &slot_key in &entry.slots {
                    self.counters.slot_visits += 1;
                    let slot = &self.slots[slot_key];
                    if !slot.tasks.contains(vertex) {
                        available.insert(slot.task_manager, slot_key);
                    }
                }
                entry.available.insert(at, (vertex, available));
                at
            }
        };
        &mut self.groups[group].available[at].1
    }

    /// Places every request, or undoes what it placed and returns `None`.
    fn place_all(
        &mut self,
        requests: &[SlotRequest],
        groups: &[usize],
        with_preferences: bool,
    ) -> Option<Vec<(TaskRef, SlotAssignment)>> {
        let mut placed = Vec::with_capacity(requests.len());
        let mut new_locks = Vec::new();
        for (request, group) in requests.iter().zip(groups) {
            match self.try_place(request, *group, with_preferences, &mut new_locks) {
                Some(assignment) => placed.push((request.task, assignment)),
                None => {
                    for (task, _) in &placed {
                        self.release(task);
                    }
                    for key in new_locks {
                        self.remove_lock(&key);
                    }
                    return None;
                }
            }
        }
        Some(placed)
    }

    fn dequeue(&mut self, key: QueueKey) -> QueuedBulk {
        // Called with a key just read from the queue.
        let bulk = self.queue.remove(&key).expect("the key was just looked up");
        self.by_need.remove(&(bulk.need, key));
        self.queued_tasks -= bulk.requests.len();
        self.queued_need -= bulk.need;
        self.demand.change(bulk.id.job, 0, -(bulk.need as i64));
        bulk
    }

    /// A task no longer needs its slot (it finished, failed or was cancelled). Returns the
    /// allocation if that freed the whole shared slot (the TaskManager's slot is free again).
    pub fn release(&mut self, task: &TaskRef) -> Option<AllocationId> {
        let slot_key = self.assignments.remove(task)?;
        let slot = self.slots.get_mut(slot_key)?;
        slot.tasks.remove(task.vertex);
        if slot.tasks.is_empty() {
            let slot = self.drop_shared_slot(slot_key, true);
            self.drop_group_if_done(slot.group);
            return Some(slot.allocation_id);
        }
        let (task_manager, group) = (slot.task_manager, slot.group);
        if let Some(available) = self.groups[group].available_mut(task.vertex) {
            available.insert(task_manager, slot_key);
        }
        None
    }

    /// Withdraws a queued bulk (its region was cancelled while it waited). True if it was
    /// queued.
    pub fn cancel_bulk(&mut self, id: &BulkId) -> bool {
        let Some(order) = self.job_order.get(&id.job) else {
            return false;
        };
        let key = (*order, id.region);
        self.counters.queue_visits += 1;
        if self.queue.contains_key(&key) {
            self.dequeue(key);
            true
        } else {
            false
        }
    }

    /// Forgets every queued bulk, co-location lock and index of `job` (it ended); returns the
    /// queued tasks dropped. Touches only the job's own entries.
    pub fn forget_job(&mut self, job: JobId) -> Vec<TaskRef> {
        let mut dropped = Vec::new();
        if let Some(order) = self.job_order.remove(&job) {
            let keys: Vec<QueueKey> = self
                .queue
                .range((order, 0)..=(order, usize::MAX))
                .map(|(key, _)| *key)
                .collect();
            for key in keys {
                self.counters.queue_visits += 1;
                let bulk = self.dequeue(key);
                dropped.extend(bulk.requests.iter().map(|r| r.task));
            }
        }
        let lock_start: LockKey = (job, String::new(), 0);
        let locks: Vec<LockKey> = self
            .co_location
            .range(lock_start..)
            .take_while(|(key, _)| key.0 == job)
            .map(|(key, _)| key.clone())
            .collect();
        for key in locks {
            self.remove_lock(&key);
        }
        // Its groups: gone now, or with their last slot (tasks still stopping hold some).
        let start: GroupKey = (job, Arc::from(""));
        let groups: Vec<(GroupKey, usize)> = self
            .group_keys
            .range(start..)
            .take_while(|((j, _), _)| *j == job)
            .map(|(key, group)| (key.clone(), *group))
            .collect();
        if self.last_group.as_ref().is_some_and(|(j, _, _)| *j == job) {
            self.last_group = None;
        }
        for (key, group) in groups {
            self.group_keys.remove(&key);
            let entry = &mut self.groups[group];
            entry.forgotten = true;
            entry.available.clear();
            self.drop_group_if_done(group);
        }
        dropped
    }

    /// Removes a forgotten group once its last slot is gone.
    fn drop_group_if_done(&mut self, group: usize) {
        if self
            .groups
            .get(group)
            .is_some_and(|g| g.forgotten && g.slots.is_empty())
        {
            self.groups.remove(group);
        }
    }

    /// Where a task is placed.
    pub fn assignment(&self, task: &TaskRef) -> Option<(AllocationId, &ResourceId)> {
        let slot = self.slots.get(*self.assignments.get(task)?)?;
        Some((
            slot.allocation_id,
            &self.task_managers[slot.task_manager].id,
        ))
    }

    /// Slots the jobs want at once: those their tasks hold plus those the queued bulks need
    /// (each bulk counted as if no shared slot of its groups were open), each job's share
    /// capped ([`with_job_cap`](Self::with_job_cap)). Running totals: O(1).
    pub fn slots_wanted(&self) -> u64 {
        self.demand.total()
    }

    /// Tasks in queued bulks.
    pub fn queued(&self) -> usize {
        self.queued_tasks
    }

    /// Queued bulks.
    pub fn queued_bulks(&self) -> usize {
        self.queue.len()
    }

    /// Slots of every TaskManager.
    pub fn total_slots(&self) -> u64 {
        self.total_slots
    }

    /// Slots not holding a shared slot.
    pub fn free_slots(&self) -> u64 {
        self.free_slots
    }

    /// Used slots of one TaskManager (for the instance manager's view and status).
    pub fn used_slots(&self, resource_id: &ResourceId) -> u32 {
        self.task_manager_keys
            .get(resource_id)
            .map_or(0, |key| self.task_managers[*key].used)
    }

    fn slot_tasks(&self, slot_key: usize) -> Vec<TaskRef> {
        let slot = &self.slots[slot_key];
        let job = self.groups[slot.group].key.0;
        slot.tasks
            .iter()
            .map(|(vertex, subtask)| TaskRef {
                job,
                vertex,
                subtask,
            })
            .collect()
    }

    /// Tasks placed on one TaskManager, by allocation id: O(its slots), whatever the cluster's
    /// size.
    pub fn tasks_on(&self, resource_id: &ResourceId) -> Vec<TaskRef> {
        let Some(key) = self.task_manager_keys.get(resource_id) else {
            return Vec::new();
        };
        let mut slots = self.task_managers[*key].slots.clone();
        slots.sort_unstable_by_key(|slot| self.slots[*slot].allocation_id);
        slots
            .into_iter()
            .flat_map(|slot| self.slot_tasks(slot))
            .collect()
    }

    /// The shared slots of every TaskManager, each with the tasks placed in it, by allocation id.
    /// One pass over all slots (and a sort per TaskManager), so a status report stays
    /// O(n log n) in the cluster's size.
    pub fn shared_slots(&self) -> BTreeMap<&ResourceId, Vec<(AllocationId, Vec<TaskRef>)>> {
        let mut by_task_manager: BTreeMap<&ResourceId, Vec<(AllocationId, Vec<TaskRef>)>> =
            BTreeMap::new();
        for (_, entry) in &self.task_managers {
            if entry.slots.is_empty() {
                continue;
            }
            let mut slots: Vec<_> = entry
                .slots
                .iter()
                .map(|slot| (self.slots[*slot].allocation_id, self.slot_tasks(*slot)))
                .collect();
            slots.sort_unstable_by_key(|(allocation_id, _)| *allocation_id);
            by_task_manager.insert(&entry.id, slots);
        }
        by_task_manager
    }

    fn try_place(
        &mut self,
        request: &SlotRequest,
        group: usize,
        with_preferences: bool,
        new_locks: &mut Vec<LockKey>,
    ) -> Option<SlotAssignment> {
        let task = request.task;
        let mut wanted = request.preferred.clone();
        wanted.extend(
            request
                .preferred_tasks
                .iter()
                .filter_map(|t| self.assignment(t).map(|(_, tm)| tm.clone())),
        );
        if self.assignments.contains_key(&task) {
            // Asked twice: the existing placement stands.
            let (allocation_id, resource_id) = self.assignment(&task)?;
            return Some(SlotAssignment {
                allocation_id,
                resource_id: resource_id.clone(),
                locality: locality(&wanted, resource_id),
            });
        }
        let lock_key = request
            .co_location_group
            .as_ref()
            .map(|g| (task.job, g.clone(), task.subtask));
        let lock = lock_key
            .as_ref()
            .and_then(|key| self.co_location.get(key))
            .cloned();
        let mut preferred = if with_preferences {
            distinct_preferences(&wanted)
        } else {
            Vec::new()
        };
        if let Some(lock) = &lock {
            let held = lock.allocation_id.is_some_and(|id| {
                self.slots
                    .get(lock.slot)
                    .is_some_and(|slot| slot.allocation_id == id)
            });
            if held {
                return self.place_in(lock.slot, task, &wanted);
            }
            // The locked slot is gone: its TaskManager is the one preference.
            if with_preferences {
                preferred = vec![lock.resource_id.clone()];
            }
        }
        let mut preferred: Vec<usize> = preferred
            .iter()
            .filter_map(|tm| self.task_manager_keys.get(tm).copied())
            .collect();
        // The TaskManager with most of the task's inputs first; equal claims go to the one with
        // the most free slots, so consumers of an all-to-all spread like their producers
        // instead of all crowding onto the first producer's TaskManager. At most
        // MAX_PREFERRED_LOCATIONS keys, each counted over the ≤ 8 producers per input.
        if preferred.len() > 1 {
            let inputs_on = |tm: usize| {
                let id = &self.task_managers[tm].id;
                wanted.iter().filter(|w| *w == id).count()
            };
            preferred.sort_by_cached_key(|&tm| {
                (
                    std::cmp::Reverse(inputs_on(tm)),
                    std::cmp::Reverse(self.task_managers[tm].free()),
                )
            });
        }
        // Flink's order: locality first (a shared slot there, else a new slot there), then any
        // shared slot, then a new slot anywhere.
        let slot_key = self
            .shared_slot_for(group, task.vertex, Some(&preferred))
            .or_else(|| self.new_shared_slot(group, Some(&preferred)))
            .or_else(|| self.shared_slot_for(group, task.vertex, None))
            .or_else(|| self.new_shared_slot(group, None))?;
        let assignment = self.place_in(slot_key, task, &wanted)?;
        if let Some(key) = lock_key {
            if lock.is_none() {
                new_locks.push(key.clone());
            }
            self.set_lock(key, slot_key);
        }
        Some(assignment)
    }

    fn set_lock(&mut self, key: LockKey, slot: usize) {
        let allocation_id = self.slots[slot].allocation_id;
        let resource_id = self.task_managers[self.slots[slot].task_manager].id.clone();
        if let Some(old) = self.co_location.insert(
            key.clone(),
            CoLocationLock {
                allocation_id: Some(allocation_id),
                slot,
                resource_id,
            },
        ) && let Some(old_allocation) = old.allocation_id
            && let Some(holders) = self.locks_on.get_mut(&old_allocation)
        {
            holders.remove(&key);
        }
        self.locks_on.entry(allocation_id).or_default().insert(key);
    }

    fn remove_lock(&mut self, key: &LockKey) {
        if let Some(lock) = self.co_location.remove(key)
            && let Some(allocation_id) = lock.allocation_id
            && let Some(holders) = self.locks_on.get_mut(&allocation_id)
        {
            holders.remove(key);
            if holders.is_empty() {
                self.locks_on.remove(&allocation_id);
            }
        }
    }

    /// An existing shared slot of `group` without `vertex`: on one of `on` (in order), or
    /// anywhere for `None`.
    fn shared_slot_for(
        &mut self,
        group: usize,
        vertex: usize,
        on: Option<&[usize]>,
    ) -> Option<usize> {
        match on {
            Some([]) => None,
            Some(preferred) => {
                let available = self.available_index(group, vertex);
                preferred.iter().find_map(|tm| available.any_on(Some(*tm)))
            }
            None => self.available_index(group, vertex).any_on(None),
        }
    }

    /// A new shared slot of `group`: on the first of `on` with a free slot, or for `None` on
    /// the TaskManager with the most free slots.
    fn new_shared_slot(&mut self, group: usize, on: Option<&[usize]>) -> Option<usize> {
        let job = self.groups[group].key.0;
        let task_manager = match on {
            Some(preferred) => {
                self.counters.task_manager_visits += preferred.len() as u64;
                preferred
                    .iter()
                    .find(|tm| {
                        let tm = &self.task_managers[**tm];
                        tm.free() > 0 && self.classes.capable(job, tm.class)
                    })
                    .copied()
            }
            None => match self.classes.restricted_to(job) {
                None => {
                    self.counters.task_manager_visits += 1;
                    self.slot_selection.select(FreeSlots {
                        by_free: &self.by_free,
                    })
                }
                // Each capable class's choice, then the strategy's choice among those.
                Some(classes) => {
                    self.counters.task_manager_visits += classes.len() as u64;
                    let candidates: BTreeSet<u64> = classes
                        .iter()
                        .filter_map(|&class| {
                            let by_free = &self.classes.class_mut(class).by_free;
                            let tm = self.slot_selection.select(FreeSlots { by_free })?;
                            Some(by_free_entry(self.task_managers[tm].free(), tm))
                        })
                        .collect();
                    self.slot_selection.select(FreeSlots {
                        by_free: &candidates,
                    })
                }
            },
        }?;
        self.use_slot(task_manager);
        self.demand.change(job, 1, 0);
        let allocation_id = AllocationId::generate(&mut self.rng);
        let slot_key = self.slots.vacant_key();
        let entry = &mut self.task_managers[task_manager];
        let at_task_manager = entry.slots.len();
        entry.slots.push(slot_key);
        let entry = &mut self.groups[group];
        let at_group = entry.slots.len();
        entry.slots.push(slot_key);
        for (_, available) in &mut entry.available {
            available.insert(task_manager, slot_key);
        }
        self.slots.insert(SharedSlot {
            allocation_id,
            task_manager,
            at_task_manager,
            group,
            at_group,
            tasks: SlotTasks::default(),
        });
        Some(slot_key)
    }

    /// One more used slot on `task_manager`, in every index.
    fn use_slot(&mut self, task_manager: usize) {
        let entry = &mut self.task_managers[task_manager];
        let class = self.classes.class_mut(entry.class);
        for index in [&mut self.by_free, &mut class.by_free] {
            index.remove(&by_free_entry(entry.free(), task_manager));
        }
        entry.used += 1;
        if entry.free() > 0 {
            for index in [&mut self.by_free, &mut class.by_free] {
                index.insert(by_free_entry(entry.free(), task_manager));
            }
        }
        class.free -= 1;
        self.free_slots -= 1;
    }

    /// One less used slot on `task_manager`, in every index.
    fn free_slot(&mut self, task_manager: usize) {
        let entry = &mut self.task_managers[task_manager];
        if entry.used == 0 {
            return;
        }
        let class = self.classes.class_mut(entry.class);
        for index in [&mut self.by_free, &mut class.by_free] {
            index.remove(&by_free_entry(entry.free(), task_manager));
        }
        entry.used -= 1;
        for index in [&mut self.by_free, &mut class.by_free] {
            index.insert(by_free_entry(entry.free(), task_manager));
        }
        class.free += 1;
        self.free_slots += 1;
    }

    fn place_in(
        &mut self,
        slot_key: usize,
        task: TaskRef,
        preferred: &[ResourceId],
    ) -> Option<SlotAssignment> {
        let slot = self.slots.get_mut(slot_key)?;
        if !slot.tasks.insert(task.vertex, task.subtask) {
            return None; // a co-location lock onto a slot holding this vertex already
        }
        let (allocation_id, task_manager, group) =
            (slot.allocation_id, slot.task_manager, slot.group);
        if let Some(available) = self.groups[group].available_mut(task.vertex) {
            available.remove(task_manager, slot_key);
        }
        self.assignments.insert(task, slot_key);
        let resource_id = self.task_managers[task_manager].id.clone();
        Some(SlotAssignment {
            allocation_id,
            locality: locality(preferred, &resource_id),
            resource_id,
        })
    }

    /// Removes a shared slot from every index and frees its slot (with `registered`: its
    /// TaskManager is still registered and keeps the slot in its list until now).
    fn drop_shared_slot(&mut self, slot_key: usize, registered: bool) -> SharedSlot {
        let slot = self.slots.remove(slot_key);
        // Held on a registered TaskManager or on one just removed: gone from the demand alike.
        self.demand.change(self.groups[slot.group].key.0, -1, 0);
        if registered {
            self.free_slot(slot.task_manager);
            let slots = &mut self.task_managers[slot.task_manager].slots;
            slots.swap_remove(slot.at_task_manager);
            if let Some(moved) = slots.get(slot.at_task_manager) {
                self.slots[*moved].at_task_manager = slot.at_task_manager;
            }
        }
        let group = &mut self.groups[slot.group];
        group.slots.swap_remove(slot.at_group);
        if let Some(moved) = group.slots.get(slot.at_group) {
            self.slots[*moved].at_group = slot.at_group;
        }
        for (_, available) in &mut group.available {
            available.remove(slot.task_manager, slot_key);
        }
        for key in self
            .locks_on
            .remove(&slot.allocation_id)
            .unwrap_or_default()
        {
            if let Some(lock) = self.co_location.get_mut(&key) {
                lock.allocation_id = None;
            }
        }
        slot
    }
}

#[cfg(test)]
mod tests;
