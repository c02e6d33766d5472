//! The demand the jobs declare to the resource manager (FLIP-138's requirements): per job the
//! slots its shared slots hold and the slots its queued bulks need, each job's share capped
//! (`resourcemanager.max-workers-per-job`, so one submission cannot take the whole pool), and
//! their running sum — [`Scheduler::slots_wanted`](super::Scheduler::slots_wanted) in O(1),
//! each change in O(log jobs).

use std::collections::BTreeMap;

use crate::base::ids::JobId;

/// See the module docs.
#[derive(Debug)]
pub(super) struct JobDemands {
    /// Per job with slots or queued bulks.
    per_job: BTreeMap<JobId, JobDemand>,
    /// The most slots one job's demand may reach beyond what it holds (`u64::MAX`: no cap).
    cap: u64,
    /// Σ over jobs of [`JobDemand::capped`].
    total: u64,
}

/// One job's part of the demand.
#[derive(Debug, Clone, Copy, Default)]
struct JobDemand {
    /// Slots its shared slots hold.
    used: u64,
    /// Slots its queued bulks need.
    queued: u64,
}

impl JobDemand {
    /// What it counts for under a cap of `cap` slots: all it holds, and what it queues as far
    /// as the cap allows.
    fn capped(self, cap: u64) -> u64 {
        (self.used + self.queued).min(self.used.max(cap))
    }
}

impl JobDemands {
    /// No demand, no cap.
    pub(super) fn new() -> Self {
        Self {
            per_job: BTreeMap::new(),
            cap: u64::MAX,
            total: 0,
        }
    }

    /// Caps each job's share at `slots` (set before any demand).
    pub(super) fn set_cap(&mut self, slots: u64) {
        self.cap = slots;
    }

    /// The cap, if there is one.
    pub(super) fn cap(&self) -> Option<u64> {
        (self.cap < u64::MAX).then_some(self.cap)
    }

    /// The sum of every job's capped share.
    pub(super) fn total(&self) -> u64 {
        self.total
    }

    /// Adds `used` held and `queued` needed slots to `job`'s demand (negative: fewer).
    pub(super) fn change(&mut self, job: JobId, used: i64, queued: i64) {
        let cap = self.cap;
        let demand = self.per_job.entry(job).or_default();
        let before = demand.capped(cap);
        demand.used = demand.used.saturating_add_signed(used);
        demand.queued = demand.queued.saturating_add_signed(queued);
        let after = demand.capped(cap);
        if demand.used == 0 && demand.queued == 0 {
            self.per_job.remove(&job);
        }
        self.total = self.total - before + after;
    }

    /// The sum recomputed from every job (tests check the running total against it) and the
    /// slots held by all jobs.
    #[cfg(test)]
    pub(super) fn recomputed(&self) -> (u64, u64) {
        let sum = self.per_job.values().map(|d| d.capped(self.cap)).sum();
        let used = self.per_job.values().map(|d| d.used).sum();
        (sum, used)
    }
}
