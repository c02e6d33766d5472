//! Which TaskManagers may take a job's tasks: each TaskManager registers the operator
//! identities its binary can run (its fingerprint), each job names the ones it needs, and a
//! new slot for a job is only taken on a TaskManager that has them all.
//!
//! TaskManagers with the same operator set form one **class**; each class keeps its own index
//! of TaskManagers by free slots and its free-slot total, so choosing a slot for a job looks at
//! one candidate per capable class (a handful: one per build in the cluster), never at every
//! TaskManager. A homogeneous cluster is one class, and every job that runs there at all
//! runs anywhere in it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::base::ids::JobId;

/// The operator identities a TaskManager can run, or a job needs.
pub type OperatorSet = Arc<BTreeSet<String>>;

/// TaskManagers of one operator set.
#[derive(Debug, Clone)]
pub(super) struct Class {
    /// What they run (`None`: anything; TaskManagers that registered no fingerprint).
    operators: Option<OperatorSet>,
    /// Those with a free slot, keyed as the scheduler's global index (`by_free_entry`).
    pub by_free: BTreeSet<u64>,
    /// Their free slots.
    pub free: u64,
    /// Their slots.
    pub slots: u64,
    /// How many are registered.
    members: usize,
}

/// Every class, and what each job needs.
#[derive(Debug, Clone, Default)]
pub(super) struct Classes {
    classes: Vec<Class>,
    jobs: BTreeMap<JobId, OperatorSet>,
}

impl Classes {
    /// The class of a TaskManager that runs `operators`, made on first use; one more member.
    pub fn join(&mut self, operators: Option<OperatorSet>) -> usize {
        let at = self
            .classes
            .iter()
            .position(|class| class.operators == operators)
            .unwrap_or_else(|| {
                self.classes.push(Class {
                    operators,
                    by_free: BTreeSet::new(),
                    free: 0,
                    slots: 0,
                    members: 0,
                });
                self.classes.len() - 1
            });
        self.classes[at].members += 1;
        at
    }

    /// One member of `class` left (its slots were taken out of the indices already).
    pub fn leave(&mut self, class: usize) {
        self.classes[class].members -= 1;
    }

    pub fn class_mut(&mut self, class: usize) -> &mut Class {
        &mut self.classes[class]
    }

    /// Records what `job` needs (until [`forget`](Self::forget)).
    pub fn require(&mut self, job: JobId, operators: OperatorSet) {
        self.jobs.insert(job, operators);
    }

    pub fn forget(&mut self, job: JobId) {
        self.jobs.remove(&job);
    }

    /// Whether TaskManagers of `class` can run every task of `job`.
    pub fn capable(&self, job: JobId, class: usize) -> bool {
        match (self.jobs.get(&job), &self.classes[class].operators) {
            (Some(needed), Some(offered)) => needed.is_subset(offered),
            _ => true,
        }
    }

    /// The classes with members that can run `job`, or `None` if all can (so the scheduler
    /// uses its global index).
    pub fn restricted_to(&self, job: JobId) -> Option<Vec<usize>> {
        let populated = || (0..self.classes.len()).filter(|&c| self.classes[c].members > 0);
        if populated().all(|class| self.capable(job, class)) {
            return None;
        }
        Some(populated().filter(|&c| self.capable(job, c)).collect())
    }

    /// Whether a registered TaskManager runs `operator`: one look per class, not per
    /// TaskManager.
    pub fn runs_anywhere(&self, operator: &str) -> bool {
        self.classes.iter().any(|class| {
            class.members > 0
                && class
                    .operators
                    .as_ref()
                    .is_none_or(|operators| operators.contains(operator))
        })
    }

    /// All slots (free or not) on TaskManagers that can run `job`, or `None` if all can.
    pub fn slots_for(&self, job: JobId) -> Option<u64> {
        let populated = || {
            self.classes
                .iter()
                .enumerate()
                .filter(|(_, c)| c.members > 0)
        };
        if populated().all(|(at, _)| self.capable(job, at)) {
            return None;
        }
        Some(
            populated()
                .filter(|(at, _)| self.capable(job, *at))
                .map(|(_, class)| class.slots)
                .sum(),
        )
    }

    /// Free slots on TaskManagers that can run `job`, or `None` if all can.
    pub fn free_for(&self, job: JobId) -> Option<u64> {
        self.restricted_to(job)
            .map(|classes| classes.iter().map(|&c| self.classes[c].free).sum())
    }
}
