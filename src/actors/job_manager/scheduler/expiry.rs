//! The slot request timeout (see the scheduler's module docs, "Timeouts"): queued bulks the
//! cluster could not serve even with every slot free fail once they have been so for the
//! timeout; bulks that wait for busy slots never do.

use std::time::Duration;

use actix::clock::Instant;

use super::{BulkId, QueueKey, Scheduler, TaskRef};

/// A bulk the cluster could not serve, even with every slot free, for the slot request timeout.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "NoResourceAvailable: {bulk} needs {slots_needed} slots at once for its {tasks} subtasks and \
     waited {waited:?} for them; the cluster has {task_managers} TaskManagers with {total_slots} \
     slots{}, and the pool at its maximum offers {max_slots} (resourcemanager.max-pool-size){}",
    capable_slots.map_or_else(String::new, |capable| format!(
        " of which {capable} are on TaskManagers that run the job's operators"
    )),
    job_cap.map_or_else(String::new, |cap| format!(
        "; one job may ask for {cap} slots beyond those it holds \
         (resourcemanager.max-workers-per-job)"
    ))
)]
pub struct NoResourceAvailable {
    /// The region's bulk.
    pub bulk: BulkId,
    /// Its subtasks.
    pub tasks: usize,
    /// The slots it needs at once (after slot sharing).
    pub slots_needed: u64,
    /// How long it could not be served.
    pub waited: Duration,
    /// Registered TaskManagers when it gave up.
    pub task_managers: usize,
    /// Their slots.
    pub total_slots: u64,
    /// Of those, the slots of TaskManagers that run the job's operators, when not all do
    /// (TaskManagers of several builds).
    pub capable_slots: Option<u64>,
    /// Slots of the largest pool the resource manager may start.
    pub max_slots: u64,
    /// The per-job cap on demand, in slots ([`Scheduler::with_job_cap`]), if there is one.
    pub job_cap: Option<u64>,
}

impl Scheduler {
    /// Fails the queued bulks the registered slots could not serve even if all were free, once
    /// they have been so for `timeout`. `max_slots` is what the pool at its maximum offers (for
    /// the error). Looks only at those bulks.
    pub fn expire(
        &mut self,
        now: Instant,
        timeout: Duration,
        max_slots: u64,
    ) -> Vec<(BulkId, Vec<TaskRef>, NoResourceAvailable)> {
        let unfulfillable: Vec<QueueKey> = self
            .by_need
            .range((self.total_slots + 1, (0, 0))..)
            .map(|(_, key)| *key)
            .collect();
        let mut expired = Vec::new();
        for key in unfulfillable {
            self.counters.queue_visits += 1;
            let Some(bulk) = self.queue.get_mut(&key) else {
                continue;
            };
            let since = *bulk.unfulfillable_since.get_or_insert(now);
            let waited = now.saturating_duration_since(since);
            if waited < timeout {
                continue;
            }
            expired.push(self.give_up(key, waited, None, max_slots));
        }
        self.expire_incapable(now, timeout, max_slots, &mut expired);
        expired
    }

    /// [`expire`](Self::expire) for the jobs that only some TaskManagers can run (several
    /// builds in the cluster): a bulk of such a job is unfulfillable when the slots of the
    /// TaskManagers that can run it could not serve it even if all were free. Looks at the
    /// queued jobs' capabilities (a handful of classes each) and at the bulks of such jobs
    /// only: nothing more in a cluster of one build.
    fn expire_incapable(
        &mut self,
        now: Instant,
        timeout: Duration,
        max_slots: u64,
        expired: &mut Vec<(BulkId, Vec<TaskRef>, NoResourceAvailable)>,
    ) {
        let restricted: Vec<(u64, u64)> = self
            .job_order
            .iter()
            .filter_map(|(job, order)| Some((*order, self.classes.slots_for(*job)?)))
            .collect();
        for (order, capable) in restricted {
            let keys: Vec<QueueKey> = self
                .queue
                .range((order, 0)..(order + 1, 0))
                .map(|(key, _)| *key)
                .collect();
            for key in keys {
                self.counters.queue_visits += 1;
                let Some(bulk) = self.queue.get_mut(&key) else {
                    continue;
                };
                if bulk.need <= capable {
                    bulk.incapable_since = None;
                    continue;
                }
                let since = *bulk.incapable_since.get_or_insert(now);
                let waited = now.saturating_duration_since(since);
                if waited < timeout {
                    continue;
                }
                expired.push(self.give_up(key, waited, Some(capable), max_slots));
            }
        }
    }

    /// Takes the bulk at `key` out of the queue, with its tasks and the error it fails with.
    fn give_up(
        &mut self,
        key: QueueKey,
        waited: Duration,
        capable_slots: Option<u64>,
        max_slots: u64,
    ) -> (BulkId, Vec<TaskRef>, NoResourceAvailable) {
        let bulk = self.dequeue(key);
        let error = NoResourceAvailable {
            bulk: bulk.id,
            tasks: bulk.requests.len(),
            slots_needed: bulk.need,
            waited,
            task_managers: self.task_managers.len(),
            total_slots: self.total_slots,
            capable_slots,
            max_slots,
            job_cap: self.demand.cap(),
        };
        let tasks = bulk.requests.iter().map(|r| r.task).collect();
        (bulk.id, tasks, error)
    }
}
