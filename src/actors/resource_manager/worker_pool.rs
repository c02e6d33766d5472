//! The resource manager's pool arithmetic, without actors: which workers exist in which state,
//! how large the pool should be, and how many workers are missing or surplus. The resource
//! manager turns these answers into driver calls and messages.
//!
//! The size is declarative (FLIP-138's shape): the operator sets the *designated* size, the
//! JobManager declares the workers its jobs *demand*, and the pool is kept at
//! `target = clamp(max(designated, demand), 0, max-pool-size)`. Neither overrides the other: an
//! operator's resize made while jobs grew the pool still stands when their demand falls.
//!
//! A worker moves `pending request` (asked of the driver) → `pending registration` (the driver
//! started it) → `started` (it registered at the JobManager). It may skip states: a TaskManager
//! can register before its driver's start report arrives. When the target falls below what the
//! pool counts, surplus pending workers (the least advanced, newest first) move to `releasing`:
//! no longer counted, not yet stopped, because one may have registered at the JobManager (and
//! been given tasks) before its report reached the resource manager. The JobManager decides
//! which may go; one that registers meanwhile counts as started again, and if the target rises
//! again they are counted again before any new worker is asked for.

use std::collections::BTreeMap;

use crate::base::ids::ResourceId;

/// Where a worker stands in the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerState {
    /// Asked of the driver, not reported started yet.
    PendingRequest,
    /// Started by the driver, not registered at the JobManager yet.
    PendingRegistration,
    /// Registered at the JobManager.
    Started,
    /// A pending worker beyond the target, waiting for the JobManager to let it go.
    Releasing,
}

/// A started worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Worker {
    /// Whether this resource manager's driver started it (`false`: it registered on its own and
    /// the driver adopted it, as in standalone mode).
    pub started_by_driver: bool,
    /// The pool's epoch when it was counted as started (see [`WorkerPool::next_epoch`]).
    pub counted_at: u64,
}

/// What a registration report meant for the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegistrationOutcome {
    /// A pending worker now counts as started.
    Promoted(WorkerState),
    /// It counted as started already (a duplicate report).
    AlreadyStarted,
    /// Unknown to the pool; adopted as started.
    Adopted,
    /// Unknown to the pool and not adopted: not counted.
    Ignored,
}

/// The pool: its sizes and every worker by state.
#[derive(Debug, Clone, Default)]
pub struct WorkerPool {
    designated: u32,
    demand: u32,
    max: u32,
    started: BTreeMap<ResourceId, Worker>,
    /// Pending workers with the order they were asked for (newest = highest): resource ids
    /// compare as strings, where `tm-10` sorts before `tm-9`.
    pending_requests: BTreeMap<ResourceId, u64>,
    pending_registration: BTreeMap<ResourceId, u64>,
    /// Surplus pending workers: the order they were asked for, and the state they left.
    releasing: BTreeMap<ResourceId, (u64, WorkerState)>,
    requests: u64,
    epoch: u64,
}

impl WorkerPool {
    /// An empty pool of designated size `designated`, never above `max`.
    pub fn new(designated: u32, max: u32) -> Self {
        Self {
            designated,
            max,
            ..Self::default()
        }
    }

    /// The size the operator set.
    pub fn designated(&self) -> u32 {
        self.designated
    }

    /// Sets the designated size and returns the previous one.
    pub fn set_designated(&mut self, size: u32) -> u32 {
        let from = std::mem::replace(&mut self.designated, size);
        self.rebalance();
        from
    }

    /// The workers the JobManager's jobs declared they need.
    pub fn demand(&self) -> u32 {
        self.demand
    }

    /// Sets the declared demand and returns the previous one.
    pub fn set_demand(&mut self, workers: u32) -> u32 {
        let from = std::mem::replace(&mut self.demand, workers);
        self.rebalance();
        from
    }

    /// Keeps `started + pending <= max(target, started)`: surplus pending workers move to
    /// releasing (newest first), and releasing ones are counted again while the pool is short
    /// (oldest first), before any new worker would be asked for.
    fn rebalance(&mut self) {
        let mut surplus = self.total().saturating_sub(self.target());
        while surplus > 0 {
            let newest = |pending: &BTreeMap<ResourceId, u64>| {
                pending
                    .iter()
                    .max_by_key(|(_, order)| **order)
                    .map(|(id, order)| (id.clone(), *order))
            };
            let (id, order, state) = if let Some((id, order)) = newest(&self.pending_requests) {
                self.pending_requests.remove(&id);
                (id, order, WorkerState::PendingRequest)
            } else if let Some((id, order)) = newest(&self.pending_registration) {
                self.pending_registration.remove(&id);
                (id, order, WorkerState::PendingRegistration)
            } else {
                return; // only started workers are over: the JobManager picks idle ones
            };
            self.releasing.insert(id, (order, state));
            surplus -= 1;
        }
        let mut missing = self.missing();
        while missing > 0 {
            let Some((id, (order, state))) = self
                .releasing
                .iter()
                .min_by_key(|(_, (order, _))| *order)
                .map(|(id, entry)| (id.clone(), *entry))
            else {
                return;
            };
            self.releasing.remove(&id);
            match state {
                WorkerState::PendingRequest => self.pending_requests.insert(id, order),
                _ => self.pending_registration.insert(id, order),
            };
            missing -= 1;
        }
    }

    /// The size the pool is kept at: `clamp(max(designated, demand), 0, max)`.
    pub fn target(&self) -> u32 {
        self.designated.max(self.demand).min(self.max)
    }

    /// Registered workers.
    pub fn started(&self) -> impl Iterator<Item = (&ResourceId, &Worker)> {
        self.started.iter()
    }

    /// How many workers are registered.
    pub fn started_count(&self) -> u32 {
        count(self.started.len())
    }

    /// How many workers are asked of the driver and not started.
    pub fn pending_requests(&self) -> u32 {
        count(self.pending_requests.len())
    }

    /// How many workers are started and not registered.
    pub fn pending_registration(&self) -> u32 {
        count(self.pending_registration.len())
    }

    /// How many surplus pending workers wait for the JobManager to let them go.
    pub fn releasing(&self) -> u32 {
        count(self.releasing.len())
    }

    /// Every worker the pool counts (releasing ones are not counted).
    pub fn total(&self) -> u32 {
        self.started_count() + self.pending_requests() + self.pending_registration()
    }

    /// `target - (started + pending requests + pending registration)`, or 0.
    pub fn missing(&self) -> u32 {
        self.target().saturating_sub(self.total())
    }

    /// How many workers to let go: the releasing ones and the started ones over the target.
    pub fn surplus(&self) -> u32 {
        self.releasing() + self.total().saturating_sub(self.target())
    }

    /// Where `resource_id` stands, if the pool counts it.
    pub fn state(&self, resource_id: &ResourceId) -> Option<WorkerState> {
        if self.started.contains_key(resource_id) {
            Some(WorkerState::Started)
        } else if self.pending_registration.contains_key(resource_id) {
            Some(WorkerState::PendingRegistration)
        } else if self.pending_requests.contains_key(resource_id) {
            Some(WorkerState::PendingRequest)
        } else if self.releasing.contains_key(resource_id) {
            Some(WorkerState::Releasing)
        } else {
            None
        }
    }

    /// A worker was asked of the driver.
    pub fn requested(&mut self, resource_id: ResourceId) {
        self.requests += 1;
        self.pending_requests.insert(resource_id, self.requests);
    }

    /// A previous leader's running worker the driver found counts as started: it runs, and
    /// only the JobManager, once it knows it, can tell whether it holds tasks or results a job
    /// still needs (so a shrink never lets it go unseen). One that is not registered there is
    /// demoted by the next heartbeat's reconciliation and must register within the
    /// registration timeout. False if the pool knows it already.
    pub fn recovered(&mut self, resource_id: ResourceId) -> bool {
        if self.state(&resource_id).is_some() {
            return false;
        }
        let worker = Worker {
            started_by_driver: true,
            counted_at: self.epoch,
        };
        self.started.insert(resource_id, worker);
        self.rebalance();
        true
    }

    /// The driver started `resource_id`. True if it moved to pending registration; false if the
    /// pool did not expect it (unknown, cancelled, or already registered).
    pub fn driver_started(&mut self, resource_id: &ResourceId) -> bool {
        if let Some((_, state)) = self.releasing.get_mut(resource_id)
            && *state == WorkerState::PendingRequest
        {
            *state = WorkerState::PendingRegistration;
            return true;
        }
        match self.pending_requests.remove(resource_id) {
            Some(order) => {
                self.pending_registration.insert(resource_id.clone(), order);
                true
            }
            None => false,
        }
    }

    /// `resource_id` registered at the JobManager. An unknown worker is adopted only if `adopt`.
    pub fn registered(&mut self, resource_id: &ResourceId, adopt: bool) -> RegistrationOutcome {
        let from = match self.state(resource_id) {
            Some(WorkerState::Started) => return RegistrationOutcome::AlreadyStarted,
            Some(state) => state,
            None if adopt => {
                let worker = Worker {
                    started_by_driver: false,
                    counted_at: self.epoch,
                };
                self.started.insert(resource_id.clone(), worker);
                self.rebalance();
                return RegistrationOutcome::Adopted;
            }
            None => return RegistrationOutcome::Ignored,
        };
        self.pending_requests.remove(resource_id);
        self.pending_registration.remove(resource_id);
        // A releasing worker that registered is counted again: the JobManager may have given
        // it tasks, and it picks idle workers to let go.
        let from = match self.releasing.remove(resource_id) {
            Some((_, state)) => state,
            None => from,
        };
        let worker = Worker {
            started_by_driver: true,
            counted_at: self.epoch,
        };
        self.started.insert(resource_id.clone(), worker);
        self.rebalance();
        RegistrationOutcome::Promoted(from)
    }

    /// Forgets `resource_id`; returns the state it was in.
    pub fn remove(&mut self, resource_id: &ResourceId) -> Option<WorkerState> {
        let state = self.state(resource_id)?;
        match state {
            WorkerState::Started => {
                self.started.remove(resource_id);
            }
            WorkerState::PendingRegistration => {
                self.pending_registration.remove(resource_id);
            }
            WorkerState::PendingRequest => {
                self.pending_requests.remove(resource_id);
            }
            WorkerState::Releasing => {
                self.releasing.remove(resource_id);
            }
        }
        self.rebalance();
        Some(state)
    }

    /// A started worker the JobManager no longer has goes back to waiting for its registration
    /// (after a leader change, or missing from a heartbeat answer). False if it was not started.
    pub fn demote(&mut self, resource_id: &ResourceId) -> bool {
        if self.started.remove(resource_id).is_some() {
            self.requests += 1;
            self.pending_registration
                .insert(resource_id.clone(), self.requests);
            self.rebalance();
            true
        } else {
            false
        }
    }

    /// Whether the pool counts `resource_id` in any state.
    pub fn contains(&self, resource_id: &ResourceId) -> bool {
        self.state(resource_id).is_some()
    }

    /// The releasing workers, the least advanced and newest first (by the order they were
    /// asked for): the first to let go. Any may have registered at the JobManager already
    /// (before its report reached us), so the JobManager decides which may go.
    pub fn releasing_newest_first(&self) -> Vec<ResourceId> {
        let mut ids: Vec<(bool, u64, &ResourceId)> = self
            .releasing
            .iter()
            .map(|(id, (order, state))| (*state == WorkerState::PendingRequest, *order, id))
            .collect();
        ids.sort_unstable_by_key(|&(request, order, _)| std::cmp::Reverse((request, order)));
        ids.into_iter().map(|(_, _, id)| id.clone()).collect()
    }

    /// Starts a new epoch and returns it: a worker counted as started before it (see
    /// [`Self::started_before`]) was registered at the JobManager before anything sent after
    /// this call reached the JobManager.
    pub fn next_epoch(&mut self) -> u64 {
        self.epoch += 1;
        self.epoch
    }

    /// Started workers counted before `epoch`.
    pub fn started_before(&self, epoch: u64) -> impl Iterator<Item = &ResourceId> {
        self.started
            .iter()
            .filter(move |(_, w)| w.counted_at < epoch)
            .map(|(id, _)| id)
    }
}

fn count(len: usize) -> u32 {
    u32::try_from(len).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests;
