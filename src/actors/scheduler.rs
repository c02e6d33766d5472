//! Slot allocation for tasks: slot sharing, co-location, locality, a queue, timeouts.
//!
//! Pure data, driven by the JobManager. A task asks for a slot with its slot sharing group, its
//! co-location group and its preferred locations (the TaskManagers of its producers). A *shared
//! slot* is one physical TaskManager slot holding at most one subtask of each vertex of one slot
//! sharing group of one job. The answer is a slot now — `LOCAL` (on a preferred TaskManager),
//! `NON_LOCAL` (preferences could not be met) or `UNCONSTRAINED` (no preference) — or a queued
//! request, completed by [`Scheduler::new_slot_available`] when a slot frees or a TaskManager
//! registers, or failed by [`Scheduler::expire`] with [`NoResourceAvailable`] after the slot
//! request timeout, counted from the request.
//!
//! Choices, in Flink's order: a shared slot on a preferred TaskManager, else a new slot there,
//! else any shared slot, else a new slot on the TaskManager with the most free slots (ties by
//! resource id) so one crash takes few tasks; as
//! Flink does, more than [`MAX_PREFERRED_LOCATIONS`] distinct producer locations mean no
//! preference. Co-location locks subtask i of every vertex of a co-location group to the shared
//! slot the first of them got; after that slot is gone the lock keeps its TaskManager as the
//! preferred location.
//!
//! Every lookup is indexed (per group, vertex and TaskManager), so placing P subtasks costs
//! O(P log P) even when they all share slots.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::time::Duration;

use actix::clock::Instant;
use serde::{Deserialize, Serialize};

use crate::env::NodeRng;
use crate::messages::ids::{AllocationId, JobId, ResourceId};

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

/// A task's request for a slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotRequest {
    /// Who asks.
    pub task: TaskRef,
    /// Its vertex's slot sharing group.
    pub sharing_group: String,
    /// Its vertex's co-location group, if any.
    pub co_location_group: Option<String>,
    /// The TaskManagers of its producers (empty: no preference).
    pub preferred: Vec<ResourceId>,
}

/// How well a placement met the request's preferences.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Locality {
    /// On a preferred TaskManager.
    Local,
    /// Preferences existed and could not be met.
    NonLocal,
    /// There were no preferences.
    Unconstrained,
}

impl fmt::Display for Locality {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Local => "LOCAL",
            Self::NonLocal => "NON_LOCAL",
            Self::Unconstrained => "UNCONSTRAINED",
        })
    }
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

/// The answer to a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// A slot now.
    Assigned(SlotAssignment),
    /// No slot now; the request waits in the queue.
    Queued,
}

/// A request that waited longer than the slot request timeout.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "NoResourceAvailable: no slot for subtask {subtask} of vertex {vertex} (job {job}) within {waited:?}; \
     the cluster has {task_managers} TaskManagers with {total_slots} slots, {free_slots} free, \
     and {queued} requests waiting"
)]
pub struct NoResourceAvailable {
    /// The job.
    pub job: JobId,
    /// The vertex index.
    pub vertex: usize,
    /// The subtask.
    pub subtask: u32,
    /// How long it waited.
    pub waited: Duration,
    /// Registered TaskManagers when it gave up.
    pub task_managers: usize,
    /// Their slots.
    pub total_slots: u64,
    /// Free ones.
    pub free_slots: u64,
    /// Requests still queued (including this one).
    pub queued: usize,
}

#[derive(Debug, Clone)]
struct TaskManagerSlots {
    total: u32,
    used: u32,
}

/// Key of a slot sharing group instance.
type GroupKey = (JobId, String);

#[derive(Debug, Clone)]
struct SharedSlot {
    resource_id: ResourceId,
    group: GroupKey,
    /// Vertex index → subtask placed here.
    tasks: BTreeMap<usize, u32>,
}

#[derive(Debug, Clone)]
struct CoLocationLock {
    allocation_id: Option<AllocationId>,
    resource_id: ResourceId,
}

#[derive(Debug, Clone)]
struct Queued {
    request: SlotRequest,
    since: Instant,
}

/// Shared slots of one group that still lack a given vertex, by TaskManager.
type Available = BTreeMap<ResourceId, BTreeSet<AllocationId>>;

/// See the module docs.
#[derive(Debug)]
pub struct Scheduler {
    rng: NodeRng,
    task_managers: BTreeMap<ResourceId, TaskManagerSlots>,
    shared: BTreeMap<AllocationId, SharedSlot>,
    /// Every shared slot of a group.
    groups: BTreeMap<GroupKey, BTreeSet<AllocationId>>,
    /// Per group and vertex: shared slots without that vertex (initialised on first use).
    available: BTreeMap<(GroupKey, usize), Available>,
    assignments: BTreeMap<TaskRef, AllocationId>,
    co_location: BTreeMap<(JobId, String, u32), CoLocationLock>,
    queue: VecDeque<Queued>,
}

impl Scheduler {
    /// An empty scheduler; allocation ids come from `rng`.
    pub fn new(rng: NodeRng) -> Self {
        Self {
            rng,
            task_managers: BTreeMap::new(),
            shared: BTreeMap::new(),
            groups: BTreeMap::new(),
            available: BTreeMap::new(),
            assignments: BTreeMap::new(),
            co_location: BTreeMap::new(),
            queue: VecDeque::new(),
        }
    }

    /// A TaskManager with `slots` slots joined; call [`new_slot_available`](Self::new_slot_available)
    /// after to serve the queue.
    pub fn add_task_manager(&mut self, resource_id: ResourceId, slots: u32) {
        self.task_managers
            .entry(resource_id)
            .or_insert(TaskManagerSlots {
                total: slots,
                used: 0,
            });
    }

    /// A TaskManager left: its shared slots are gone. Returns the tasks that were placed there.
    pub fn remove_task_manager(&mut self, resource_id: &ResourceId) -> Vec<TaskRef> {
        if self.task_managers.remove(resource_id).is_none() {
            return Vec::new();
        }
        let gone: Vec<AllocationId> = self
            .shared
            .iter()
            .filter(|(_, slot)| slot.resource_id == *resource_id)
            .map(|(id, _)| *id)
            .collect();
        let mut lost = Vec::new();
        for allocation_id in gone {
            if let Some(slot) = self.drop_shared_slot(allocation_id) {
                let job = slot.group.0;
                for (vertex, subtask) in slot.tasks {
                    let task = TaskRef {
                        job,
                        vertex,
                        subtask,
                    };
                    self.assignments.remove(&task);
                    lost.push(task);
                }
            }
        }
        lost.sort();
        lost
    }

    /// Asks for a slot at `now`.
    pub fn request(&mut self, request: SlotRequest, now: Instant) -> Placement {
        match self.try_place(&request) {
            Some(assignment) => Placement::Assigned(assignment),
            None => {
                self.queue.push_back(Queued {
                    request,
                    since: now,
                });
                Placement::Queued
            }
        }
    }

    /// A task no longer needs its slot (it finished, failed or was cancelled). Returns the
    /// allocation if that freed the whole shared slot (the TaskManager's slot is free again).
    pub fn release(&mut self, task: &TaskRef) -> Option<AllocationId> {
        let allocation_id = self.assignments.remove(task)?;
        let slot = self.shared.get_mut(&allocation_id)?;
        slot.tasks.remove(&task.vertex);
        let (resource_id, group, empty) = (
            slot.resource_id.clone(),
            slot.group.clone(),
            slot.tasks.is_empty(),
        );
        if empty {
            self.drop_shared_slot(allocation_id);
            return Some(allocation_id);
        }
        if let Some(available) = self.available.get_mut(&(group, task.vertex)) {
            available
                .entry(resource_id)
                .or_default()
                .insert(allocation_id);
        }
        None
    }

    /// Serves queued requests in order while slots allow (after a release or a new
    /// TaskManager: Flink's `new_slot_available`). Returns what was placed.
    pub fn new_slot_available(&mut self) -> Vec<(TaskRef, SlotAssignment)> {
        let mut placed = Vec::new();
        let mut waiting = VecDeque::with_capacity(self.queue.len());
        while let Some(queued) = self.queue.pop_front() {
            match self.try_place(&queued.request) {
                Some(assignment) => placed.push((queued.request.task, assignment)),
                None => waiting.push_back(queued),
            }
        }
        self.queue = waiting;
        placed
    }

    /// Fails queued requests older than `timeout` at `now`.
    pub fn expire(
        &mut self,
        now: Instant,
        timeout: Duration,
    ) -> Vec<(SlotRequest, NoResourceAvailable)> {
        let (total_slots, free_slots) = (self.total_slots(), self.free_slots());
        let queued = self.queue.len();
        let mut expired = Vec::new();
        self.queue.retain(|q| {
            let waited = now.saturating_duration_since(q.since);
            if waited < timeout {
                return true;
            }
            let task = q.request.task;
            expired.push((
                q.request.clone(),
                NoResourceAvailable {
                    job: task.job,
                    vertex: task.vertex,
                    subtask: task.subtask,
                    waited,
                    task_managers: self.task_managers.len(),
                    total_slots,
                    free_slots,
                    queued,
                },
            ));
            false
        });
        expired
    }

    /// Withdraws a queued request (its task was cancelled while it waited).
    pub fn cancel_request(&mut self, task: &TaskRef) {
        self.queue.retain(|q| q.request.task != *task);
    }

    /// Forgets every queued request and co-location lock of `job` (it ended); returns the
    /// queued tasks dropped.
    pub fn forget_job(&mut self, job: JobId) -> Vec<TaskRef> {
        let mut dropped = Vec::new();
        self.queue.retain(|q| {
            let keep = q.request.task.job != job;
            if !keep {
                dropped.push(q.request.task);
            }
            keep
        });
        self.co_location.retain(|(j, _, _), _| *j != job);
        self.available.retain(|((j, _), _), _| *j != job);
        dropped
    }

    /// Where a task is placed.
    pub fn assignment(&self, task: &TaskRef) -> Option<(AllocationId, &ResourceId)> {
        let allocation_id = *self.assignments.get(task)?;
        Some((allocation_id, &self.shared.get(&allocation_id)?.resource_id))
    }

    /// Slots the queued requests still need beyond what is free: each shared slot holds one
    /// subtask per vertex, so per group the vertex with the most queued subtasks decides.
    pub fn queued_slot_demand(&self) -> u64 {
        let mut per_vertex: BTreeMap<(&GroupKey, usize), u64> = BTreeMap::new();
        let keys: Vec<(GroupKey, usize)> = self
            .queue
            .iter()
            .map(|q| {
                (
                    (q.request.task.job, q.request.sharing_group.clone()),
                    q.request.task.vertex,
                )
            })
            .collect();
        for (group, vertex) in &keys {
            *per_vertex.entry((group, *vertex)).or_default() += 1;
        }
        let mut per_group: BTreeMap<&GroupKey, u64> = BTreeMap::new();
        for ((group, _), count) in per_vertex {
            let entry = per_group.entry(group).or_default();
            *entry = (*entry).max(count);
        }
        per_group
            .values()
            .sum::<u64>()
            .saturating_sub(self.free_slots())
    }

    /// Queued requests.
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Slots of every TaskManager.
    pub fn total_slots(&self) -> u64 {
        self.task_managers
            .values()
            .map(|t| u64::from(t.total))
            .sum()
    }

    /// Slots not holding a shared slot.
    pub fn free_slots(&self) -> u64 {
        self.task_managers
            .values()
            .map(|t| u64::from(t.total - t.used))
            .sum()
    }

    /// Used slots of one TaskManager (for the instance manager's view and status).
    pub fn used_slots(&self, resource_id: &ResourceId) -> u32 {
        self.task_managers.get(resource_id).map_or(0, |t| t.used)
    }

    /// Tasks placed in the shared slot `allocation_id`.
    pub fn tasks_in(&self, allocation_id: &AllocationId) -> Vec<TaskRef> {
        self.shared
            .get(allocation_id)
            .map_or_else(Vec::new, |slot| {
                slot.tasks
                    .iter()
                    .map(|(vertex, subtask)| TaskRef {
                        job: slot.group.0,
                        vertex: *vertex,
                        subtask: *subtask,
                    })
                    .collect()
            })
    }

    /// The shared slots of every TaskManager, each with the tasks placed in it, by allocation id.
    /// One pass over all slots, so a status report stays linear in the cluster's size.
    pub fn shared_slots(&self) -> BTreeMap<&ResourceId, Vec<(AllocationId, Vec<TaskRef>)>> {
        let mut by_task_manager: BTreeMap<&ResourceId, Vec<(AllocationId, Vec<TaskRef>)>> =
            BTreeMap::new();
        for (allocation_id, slot) in &self.shared {
            by_task_manager
                .entry(&slot.resource_id)
                .or_default()
                .push((*allocation_id, self.tasks_in(allocation_id)));
        }
        by_task_manager
    }

    fn try_place(&mut self, request: &SlotRequest) -> Option<SlotAssignment> {
        let task = request.task;
        if self.assignments.contains_key(&task) {
            // Asked twice: the existing placement stands.
            let (allocation_id, resource_id) = self.assignment(&task)?;
            return Some(SlotAssignment {
                allocation_id,
                resource_id: resource_id.clone(),
                locality: locality(&request.preferred, resource_id),
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
        let mut preferred = distinct_preferences(&request.preferred);
        if let Some(lock) = &lock {
            if let Some(allocation_id) = lock.allocation_id
                && self.shared.contains_key(&allocation_id)
            {
                return self.place_in(allocation_id, task, &request.preferred);
            }
            // The locked slot is gone: its TaskManager is the one preference.
            preferred = vec![lock.resource_id.clone()];
        }
        let group = (task.job, request.sharing_group.clone());
        // Flink's order: locality first (a shared slot there, else a new slot there), then any
        // shared slot, then a new slot anywhere.
        let allocation_id = self
            .shared_slot_for(&group, task.vertex, Some(&preferred))
            .or_else(|| self.new_shared_slot(&group, Some(&preferred)))
            .or_else(|| self.shared_slot_for(&group, task.vertex, None))
            .or_else(|| self.new_shared_slot(&group, None))?;
        let assignment = self.place_in(allocation_id, task, &request.preferred)?;
        if let Some(key) = lock_key {
            self.co_location.insert(
                key,
                CoLocationLock {
                    allocation_id: Some(allocation_id),
                    resource_id: assignment.resource_id.clone(),
                },
            );
        }
        Some(assignment)
    }

    /// An existing shared slot of `group` without `vertex`: on one of `on` (in order), or
    /// anywhere for `None`.
    fn shared_slot_for(
        &mut self,
        group: &GroupKey,
        vertex: usize,
        on: Option<&[ResourceId]>,
    ) -> Option<AllocationId> {
        let key = (group.clone(), vertex);
        if !self.available.contains_key(&key) {
            let mut available = Available::new();
            for allocation_id in self.groups.get(group).into_iter().flatten() {
                let slot = &self.shared[allocation_id];
                if !slot.tasks.contains_key(&vertex) {
                    available
                        .entry(slot.resource_id.clone())
                        .or_default()
                        .insert(*allocation_id);
                }
            }
            self.available.insert(key.clone(), available);
        }
        let available = self.available.get(&key)?;
        match on {
            Some(preferred) => preferred
                .iter()
                .find_map(|tm| available.get(tm).and_then(|set| set.first())),
            None => available.values().find_map(|set| set.first()),
        }
        .copied()
    }

    /// A new shared slot of `group`: on the first of `on` with a free slot, or for `None` on
    /// the TaskManager with the most free slots.
    fn new_shared_slot(
        &mut self,
        group: &GroupKey,
        on: Option<&[ResourceId]>,
    ) -> Option<AllocationId> {
        let has_free = |t: &TaskManagerSlots| t.used < t.total;
        let resource_id = match on {
            Some(preferred) => preferred
                .iter()
                .find(|tm| self.task_managers.get(*tm).is_some_and(has_free))
                .cloned(),
            None => self
                .task_managers
                .iter()
                .filter(|(_, t)| has_free(t))
                .max_by(|(a_id, a), (b_id, b)| {
                    (a.total - a.used)
                        .cmp(&(b.total - b.used))
                        .then_with(|| b_id.cmp(a_id))
                })
                .map(|(id, _)| id.clone()),
        }?;
        if let Some(slots) = self.task_managers.get_mut(&resource_id) {
            slots.used += 1;
        }
        let allocation_id = AllocationId::generate(&mut self.rng);
        self.shared.insert(
            allocation_id,
            SharedSlot {
                resource_id: resource_id.clone(),
                group: group.clone(),
                tasks: BTreeMap::new(),
            },
        );
        self.groups
            .entry(group.clone())
            .or_default()
            .insert(allocation_id);
        for ((g, _), available) in self.available.range_mut((group.clone(), 0)..) {
            if g != group {
                break;
            }
            available
                .entry(resource_id.clone())
                .or_default()
                .insert(allocation_id);
        }
        Some(allocation_id)
    }

    fn place_in(
        &mut self,
        allocation_id: AllocationId,
        task: TaskRef,
        preferred: &[ResourceId],
    ) -> Option<SlotAssignment> {
        let slot = self.shared.get_mut(&allocation_id)?;
        if slot.tasks.contains_key(&task.vertex) {
            return None; // a co-location lock onto a slot holding this vertex already
        }
        slot.tasks.insert(task.vertex, task.subtask);
        let resource_id = slot.resource_id.clone();
        if let Some(available) = self.available.get_mut(&(slot.group.clone(), task.vertex))
            && let Some(set) = available.get_mut(&resource_id)
        {
            set.remove(&allocation_id);
            if set.is_empty() {
                available.remove(&resource_id);
            }
        }
        self.assignments.insert(task, allocation_id);
        Some(SlotAssignment {
            allocation_id,
            locality: locality(preferred, &resource_id),
            resource_id,
        })
    }

    fn drop_shared_slot(&mut self, allocation_id: AllocationId) -> Option<SharedSlot> {
        let slot = self.shared.remove(&allocation_id)?;
        if let Some(slots) = self.task_managers.get_mut(&slot.resource_id) {
            slots.used = slots.used.saturating_sub(1);
        }
        if let Some(members) = self.groups.get_mut(&slot.group) {
            members.remove(&allocation_id);
            if members.is_empty() {
                self.groups.remove(&slot.group);
            }
        }
        let group = slot.group.clone();
        for ((g, _), available) in self.available.range_mut((group.clone(), 0)..) {
            if *g != group {
                break;
            }
            if let Some(set) = available.get_mut(&slot.resource_id) {
                set.remove(&allocation_id);
                if set.is_empty() {
                    available.remove(&slot.resource_id);
                }
            }
        }
        for lock in self.co_location.values_mut() {
            if lock.allocation_id == Some(allocation_id) {
                lock.allocation_id = None;
            }
        }
        Some(slot)
    }
}

fn distinct_preferences(preferred: &[ResourceId]) -> Vec<ResourceId> {
    let distinct: BTreeSet<&ResourceId> = preferred.iter().collect();
    if distinct.len() > MAX_PREFERRED_LOCATIONS {
        Vec::new()
    } else {
        // Keep the caller's order (first producer first), without repeats.
        let mut seen = BTreeSet::new();
        preferred
            .iter()
            .filter(|tm| seen.insert(*tm))
            .cloned()
            .collect()
    }
}

fn locality(preferred: &[ResourceId], placed: &ResourceId) -> Locality {
    let distinct: BTreeSet<&ResourceId> = preferred.iter().collect();
    if distinct.is_empty() || distinct.len() > MAX_PREFERRED_LOCATIONS {
        Locality::Unconstrained
    } else if distinct.contains(placed) {
        Locality::Local
    } else {
        Locality::NonLocal
    }
}

#[cfg(test)]
mod tests;
