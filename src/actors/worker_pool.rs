//! The resource manager's pool arithmetic, without actors: which workers exist in which state,
//! and how many are missing or surplus. The resource manager turns these answers into driver
//! calls and messages.
//!
//! A worker moves `pending request` (asked of the driver) → `pending registration` (the driver
//! started it) → `started` (it registered at the JobManager). It may skip states: a TaskManager
//! can register before its driver's start report arrives.

use std::collections::{BTreeMap, BTreeSet};

use crate::messages::ids::ResourceId;

/// Where a worker stands in the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerState {
    /// Asked of the driver, not reported started yet.
    PendingRequest,
    /// Started by the driver, not registered at the JobManager yet.
    PendingRegistration,
    /// Registered at the JobManager.
    Started,
}

/// A started worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Worker {
    /// Whether this resource manager's driver started it (`false`: it registered on its own and
    /// the driver adopted it, as in standalone mode).
    pub started_by_driver: bool,
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

/// The pool: designated size and every worker by state.
#[derive(Debug, Clone, Default)]
pub struct WorkerPool {
    designated: u32,
    started: BTreeMap<ResourceId, Worker>,
    pending_requests: BTreeSet<ResourceId>,
    pending_registration: BTreeSet<ResourceId>,
}

impl WorkerPool {
    /// An empty pool of designated size `designated`.
    pub fn new(designated: u32) -> Self {
        Self {
            designated,
            ..Self::default()
        }
    }

    /// The designated size.
    pub fn designated(&self) -> u32 {
        self.designated
    }

    /// Sets the designated size and returns the previous one.
    pub fn set_designated(&mut self, size: u32) -> u32 {
        std::mem::replace(&mut self.designated, size)
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

    /// Every worker the pool counts, in any state.
    pub fn total(&self) -> u32 {
        self.started_count() + self.pending_requests() + self.pending_registration()
    }

    /// `designated - (started + pending requests + pending registration)`, or 0.
    pub fn missing(&self) -> u32 {
        self.designated.saturating_sub(self.total())
    }

    /// Where `resource_id` stands, if the pool counts it.
    pub fn state(&self, resource_id: &ResourceId) -> Option<WorkerState> {
        if self.started.contains_key(resource_id) {
            Some(WorkerState::Started)
        } else if self.pending_registration.contains(resource_id) {
            Some(WorkerState::PendingRegistration)
        } else if self.pending_requests.contains(resource_id) {
            Some(WorkerState::PendingRequest)
        } else {
            None
        }
    }

    /// A worker was asked of the driver.
    pub fn requested(&mut self, resource_id: ResourceId) {
        self.pending_requests.insert(resource_id);
    }

    /// The driver started `resource_id`. True if it moved to pending registration; false if the
    /// pool did not expect it (unknown, cancelled, or already registered).
    pub fn driver_started(&mut self, resource_id: &ResourceId) -> bool {
        if self.pending_requests.remove(resource_id) {
            self.pending_registration.insert(resource_id.clone());
            true
        } else {
            false
        }
    }

    /// `resource_id` registered at the JobManager. An unknown worker is adopted only if `adopt`.
    pub fn registered(&mut self, resource_id: &ResourceId, adopt: bool) -> RegistrationOutcome {
        let from = match self.state(resource_id) {
            Some(WorkerState::Started) => return RegistrationOutcome::AlreadyStarted,
            Some(state) => state,
            None if adopt => {
                self.started.insert(
                    resource_id.clone(),
                    Worker {
                        started_by_driver: false,
                    },
                );
                return RegistrationOutcome::Adopted;
            }
            None => return RegistrationOutcome::Ignored,
        };
        self.pending_requests.remove(resource_id);
        self.pending_registration.remove(resource_id);
        self.started.insert(
            resource_id.clone(),
            Worker {
                started_by_driver: true,
            },
        );
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
        }
        Some(state)
    }

    /// A started worker the JobManager no longer has goes back to waiting for its registration
    /// (after a leader change). False if it was not started.
    pub fn demote(&mut self, resource_id: &ResourceId) -> bool {
        if self.started.remove(resource_id).is_some() {
            self.pending_registration.insert(resource_id.clone());
            true
        } else {
            false
        }
    }

    /// Whether the pool counts `resource_id` in any state.
    pub fn contains(&self, resource_id: &ResourceId) -> bool {
        self.state(resource_id).is_some()
    }

    /// Pending workers to cancel so the pool fits its designated size: none are busy, so they go
    /// first when the pool shrinks (the least advanced first: pending requests, then pending
    /// registration).
    pub fn surplus_pending(&self) -> Vec<ResourceId> {
        let surplus = self.total().saturating_sub(self.designated) as usize;
        self.pending_requests
            .iter()
            .rev()
            .chain(self.pending_registration.iter().rev())
            .take(surplus)
            .cloned()
            .collect()
    }

    /// Registered workers beyond the designated size (to be released when idle).
    pub fn started_surplus(&self) -> u32 {
        self.started_count().saturating_sub(self.designated)
    }
}

fn count(len: usize) -> u32 {
    u32::try_from(len).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u32) -> ResourceId {
        ResourceId::new(format!("tm-{n}"))
    }

    #[test]
    fn missing_counts_every_state() {
        let mut pool = WorkerPool::new(5);
        assert_eq!(pool.missing(), 5);
        pool.requested(id(1));
        pool.requested(id(2));
        pool.requested(id(3));
        assert!(pool.driver_started(&id(2)));
        assert_eq!(
            pool.registered(&id(3), false),
            RegistrationOutcome::Promoted(WorkerState::PendingRequest)
        );
        assert_eq!(
            (
                pool.pending_requests(),
                pool.pending_registration(),
                pool.started_count()
            ),
            (1, 1, 1)
        );
        assert_eq!(pool.missing(), 2);
    }

    #[test]
    fn registration_before_start_report_is_promoted_and_the_late_report_ignored() {
        let mut pool = WorkerPool::new(1);
        pool.requested(id(1));
        assert_eq!(
            pool.registered(&id(1), false),
            RegistrationOutcome::Promoted(WorkerState::PendingRequest)
        );
        assert!(!pool.driver_started(&id(1)));
        assert_eq!(pool.state(&id(1)), Some(WorkerState::Started));
        assert_eq!(pool.missing(), 0);
    }

    #[test]
    fn duplicates_and_unknown_workers_never_change_counts_unless_adopted() {
        let mut pool = WorkerPool::new(2);
        pool.requested(id(1));
        pool.driver_started(&id(1));
        pool.registered(&id(1), false);
        assert_eq!(
            pool.registered(&id(1), false),
            RegistrationOutcome::AlreadyStarted
        );
        assert_eq!(pool.registered(&id(9), false), RegistrationOutcome::Ignored);
        assert_eq!(pool.total(), 1);
        assert_eq!(pool.registered(&id(9), true), RegistrationOutcome::Adopted);
        assert_eq!(pool.total(), 2);
        assert!(
            !pool
                .started()
                .find(|(r, _)| **r == id(9))
                .unwrap()
                .1
                .started_by_driver
        );
    }

    #[test]
    fn demote_moves_a_started_worker_back_to_pending_registration() {
        let mut pool = WorkerPool::new(1);
        pool.requested(id(1));
        pool.registered(&id(1), false);
        assert!(pool.demote(&id(1)));
        assert_eq!(pool.state(&id(1)), Some(WorkerState::PendingRegistration));
        assert!(!pool.demote(&id(1)));
        assert_eq!(pool.missing(), 0, "still counted: it may re-register");
    }

    #[test]
    fn remove_reports_the_state_left() {
        let mut pool = WorkerPool::new(3);
        pool.requested(id(1));
        pool.requested(id(2));
        pool.driver_started(&id(2));
        pool.requested(id(3));
        pool.registered(&id(3), false);
        assert_eq!(pool.remove(&id(1)), Some(WorkerState::PendingRequest));
        assert_eq!(pool.remove(&id(2)), Some(WorkerState::PendingRegistration));
        assert_eq!(pool.remove(&id(3)), Some(WorkerState::Started));
        assert_eq!(pool.remove(&id(3)), None);
        assert_eq!(pool.total(), 0);
    }

    #[test]
    fn shrinking_cancels_pending_first_then_asks_for_idle_started() {
        let mut pool = WorkerPool::new(4);
        for n in 1..=4 {
            pool.requested(id(n));
        }
        pool.driver_started(&id(1));
        pool.registered(&id(1), false);
        pool.driver_started(&id(2));
        pool.registered(&id(2), false);
        pool.driver_started(&id(3));
        // started: 1, 2; pending registration: 3; pending request: 4
        pool.set_designated(3);
        assert_eq!(pool.surplus_pending(), vec![id(4)]);
        pool.set_designated(1);
        assert_eq!(pool.surplus_pending(), vec![id(4), id(3)]);
        assert_eq!(pool.started_surplus(), 1);
        pool.set_designated(0);
        assert_eq!(pool.surplus_pending(), vec![id(4), id(3)]);
        assert_eq!(pool.started_surplus(), 2);
    }
}
