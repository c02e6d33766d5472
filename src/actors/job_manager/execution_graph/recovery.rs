//! Batch job recovery (Flink's `BatchJobRecoveryHandler`, FLIP-383): while a job runs under high
//! availability it records the regions it finishes as [`JobEvent`]s for the job event log; a new
//! leader replays that log and [`restore`](ExecutionGraph::restore)s, before the job starts,
//! every finished region whose results the re-registered TaskManagers still hold (or that no
//! unfinished region reads). The rest runs as if the job were new; a partition that turns out
//! to be unreadable later fails its reader, and its producer reruns (today's lost-input path).

use crate::base::ids::AllocationId;
use crate::ha::job_event_log::{FinishedTask, JobEvent};
use crate::messages::job_manager::Locality;

use super::*;

/// What [`ExecutionGraph::restore`] took back.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Restored {
    /// Regions taken back as finished.
    pub regions: usize,
    /// Their tasks.
    pub tasks: usize,
    /// The attempts whose results the job reads from now on: every other reported partition of
    /// the job is an orphan to release.
    pub attempts: BTreeSet<ExecutionAttemptId>,
}

impl ExecutionGraph {
    /// Records the job's progress as [`JobEvent`]s from now on (high availability with batch job
    /// recovery on); the JobManager [takes](Self::take_events) them for the log.
    pub fn log_events(&mut self) {
        self.events.get_or_insert_with(Vec::new);
    }

    /// The events recorded since the last call.
    pub fn take_events(&mut self) -> Vec<JobEvent> {
        self.events.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// Every task of `region` finished: which attempt, where, and what it sent back.
    pub(super) fn log_region_finished(&mut self, region: RegionId) {
        if self.events.is_none() {
            return;
        }
        let tasks = (self.region_members[region.0].iter())
            .filter_map(|task| {
                let ev = self.task(task);
                Some(FinishedTask {
                    vertex: task.vertex as u32,
                    subtask: task.subtask,
                    attempt: ev.attempt,
                    attempt_number: ev.attempt_number,
                    resource_id: ev.placement.as_ref()?.resource_id.clone(),
                    result: ev.result.as_ref().map(|r| r.to_vec()),
                })
            })
            .collect();
        if let Some(events) = &mut self.events {
            events.push(JobEvent::RegionFinished {
                region: region.0 as u32,
                tasks,
            });
        }
    }

    /// `regions` run again: what they finished before no longer counts.
    pub(super) fn log_regions_reset(&mut self, regions: &BTreeSet<RegionId>) {
        if let Some(events) = &mut self.events {
            events.push(JobEvent::RegionsReset {
                regions: regions.iter().map(|r| r.0 as u32).collect(),
            });
        }
    }

    /// Takes back, before [`start`](Self::start), the regions a previous leader logged as
    /// finished (`finished`, from [`replay`](crate::ha::job_event_log::replay)) that are still
    /// of use: a region is kept if every region reading its results is kept too, or if
    /// `held(TaskManager, partition)` says each of its blocking results is still there. A
    /// region dropped because its results are gone makes its producers needed again, so the
    /// check runs to a fixed point over a work list: O(regions + groups). Tasks of a kept
    /// region are FINISHED with the logged attempt on the logged TaskManager (their reports in
    /// the REST details say `restored`); a logged region that does not match this graph's
    /// regions is ignored.
    pub fn restore(
        &mut self,
        finished: &BTreeMap<u32, Vec<FinishedTask>>,
        held: &dyn Fn(&ResourceId, ResultPartitionId) -> bool,
        cx: &mut JobContext<'_>,
    ) -> (Restored, Vec<JobAction>) {
        let mut kept: BTreeMap<RegionId, &[FinishedTask]> = BTreeMap::new();
        for (&region, tasks) in finished {
            let id = RegionId(region as usize);
            if self.matches_region(id, tasks) {
                kept.insert(id, tasks);
            } else {
                log::warn!(
                    "job {}: logged region {region} does not match the job's regions; it runs again",
                    self.job_id
                );
            }
        }
        // Producers are usually checked first (lower ids): a consumer dropped later puts them
        // back on the list.
        let mut pending: Vec<RegionId> = kept.keys().rev().copied().collect();
        while let Some(region) = pending.pop() {
            let Some(tasks) = kept.get(&region) else {
                continue;
            };
            let read_by_unfinished = (self.regions.consumers(region).iter())
                .any(|consumer| !kept.contains_key(consumer));
            if !read_by_unfinished || self.results_held(tasks, held) {
                continue;
            }
            kept.remove(&region);
            for &group in &self.regions.regions[region.0].input_groups {
                pending.extend(
                    (self.regions.groups[group].producers.iter()).filter(|p| kept.contains_key(p)),
                );
            }
        }
        let mut restored = Restored::default();
        let mut unread = Vec::new();
        for (region, tasks) in kept {
            for logged in tasks {
                let task = TaskRef {
                    job: self.job_id,
                    vertex: logged.vertex as usize,
                    subtask: logged.subtask,
                };
                let old = self.task(&task).attempt;
                self.attempts.remove(&old);
                self.attempts.insert(logged.attempt, task);
                let allocation_id = AllocationId::generate(&mut self.rng);
                let ev = self.task_mut(&task);
                ev.attempt = logged.attempt;
                ev.attempt_number = logged.attempt_number;
                ev.state = Tracked::new(ExecutionState::Finished, cx.now_ms);
                ev.result = logged.result.clone().map(bytes::Bytes::from);
                ev.restored = true;
                self.place(
                    task,
                    SlotAssignment {
                        allocation_id,
                        resource_id: logged.resource_id.clone(),
                        locality: Locality::Unconstrained,
                    },
                );
                self.used_task_managers.insert(logged.resource_id.clone());
                self.finished_tasks += 1;
                restored.attempts.insert(logged.attempt);
            }
            restored.regions += 1;
            restored.tasks += tasks.len();
            self.progress.finish(&self.regions, region);
            unread.extend(self.release.finished(&self.regions, region));
        }
        let mut actions = Vec::new();
        // Results nobody reads any more (every consumer was taken back too).
        self.release_results(&unread, &mut actions);
        (restored, actions)
    }

    /// Whether `tasks` are exactly the members of `region`.
    fn matches_region(&self, region: RegionId, tasks: &[FinishedTask]) -> bool {
        let Some(members) = self.region_members.get(region.0) else {
            return false;
        };
        let logged: BTreeSet<(usize, u32)> = (tasks.iter())
            .map(|t| (t.vertex as usize, t.subtask))
            .collect();
        logged.len() == members.len()
            && tasks.len() == members.len()
            && members
                .iter()
                .all(|m| logged.contains(&(m.vertex, m.subtask)))
    }

    /// Whether every blocking result of `tasks` is held where they ran.
    fn results_held(
        &self,
        tasks: &[FinishedTask],
        held: &dyn Fn(&ResourceId, ResultPartitionId) -> bool,
    ) -> bool {
        tasks.iter().all(|task| {
            (self.graph.edges.iter().enumerate())
                .filter(|(_, edge)| {
                    edge.source == task.vertex as usize && edge.exchange == ExchangeMode::Blocking
                })
                .all(|(edge, _)| {
                    held(
                        &task.resource_id,
                        ResultPartitionId {
                            producer: task.attempt,
                            edge: edge as u32,
                        },
                    )
                })
        })
    }
}

#[cfg(test)]
mod tests;
