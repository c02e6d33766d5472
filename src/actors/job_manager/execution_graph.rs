//! One job's execution: its execution graph, region scheduling and failover.
//!
//! Pure logic driven by the [`JobManager`](super::JobManager): each method takes the
//! shared [`Scheduler`] and returns [`JobAction`]s (deploy, cancel, wait, release) for the actor
//! to carry out, so the whole lifecycle is testable without actors or threads.
//!
//! Lifecycle: regions are scheduled in topological order once their blocking inputs are finished
//! (Flink's PipelinedRegionSchedulingStrategy). A region's tasks ask for slots; when every task of
//! the region has one, all of them are deployed together (pipelined consumers run beside their
//! producers). A finished task frees its slot; its result partitions stay on its TaskManager until
//! every region reading them has finished ([`PartitionReleaseStrategy`]) or the job ends. A
//! failed task (or a lost TaskManager) triggers region failover: the restart strategy decides; if
//! it allows, the failed region and every region consuming its results are cancelled, and once
//! their tasks have all stopped and the restart delay has passed, they run again as new attempts
//! (the old attempts' results are released). A region whose finished results were lost with a
//! TaskManager, or released, and are read again by a restarting region is restarted too. If the
//! strategy gives up, the job fails with the first failure's reason.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use actix::clock::Instant;

use super::scheduler::{
    BulkId, MAX_PREFERRED_LOCATIONS, NoResourceAvailable, Scheduler, SlotAssignment, SlotRequest,
    TaskRef,
};
use crate::base::hash::FixedHashMap;
use crate::base::ids::{AllocationId, ExecutionAttemptId, JobId, ProducerListId, ResourceId};
use crate::base::rng::NodeRng;
use crate::job::graph::{DistributionPattern, ExchangeMode, JobGraph};
use crate::job::partition_release::PartitionReleaseStrategy;
use crate::job::regions::{
    ExecutionVertexRef, PipelinedRegions, RegionError, RegionId, RegionProgress, slots_needed,
};
use crate::job::restart::{RestartBackoff, RestartDecision};
use crate::job::states::{ExecutionState, JobStatus, Tracked};
use crate::messages::TaskIoSnapshot;
use crate::messages::job_manager::{
    EXCEPTION_HISTORY_SIZE, JobDetails, JobException, JobResults, JobSummary, SlotTaskAttempt,
    SubtaskDetails, VertexDetails,
};
use crate::messages::{
    ActorAddress, ResultPartitionId,
    deployment::{
        InputGateDeploymentDescriptor, ProducerLocation, Producers,
        ResultPartitionDeploymentDescriptor, TaskDeploymentDescriptor,
    },
};

/// Region bulks one job keeps in the scheduler's queue at most; more ready regions wait in the
/// job and are queued as these are served. Bounds the work of one message (a job of 100,000
/// independent subtasks does not build 100,000 bulks at submission) while keeping the queue's
/// order: a JobManager turn places at most 64 tasks (its serve budget), fewer
/// than this window, and each placement refills it before the next turn.
pub const QUEUED_REGIONS_PER_JOB: usize = 128;

/// Whether a task in this state holds or waits for a slot, or still runs.
fn is_active(state: ExecutionState) -> bool {
    matches!(
        state,
        ExecutionState::Scheduled
            | ExecutionState::Deploying
            | ExecutionState::Running
            | ExecutionState::Canceling
    )
}

/// Something the JobManager actor must do for a job.
#[derive(Debug, Clone, PartialEq)]
pub enum JobAction {
    /// Send `SubmitTasks` to a TaskManager.
    Deploy {
        /// Where.
        resource_id: ResourceId,
        /// What.
        descriptor: Box<TaskDeploymentDescriptor>,
    },
    /// Send `CancelTasks` to a TaskManager.
    Cancel {
        /// Where.
        resource_id: ResourceId,
        /// Which attempt.
        attempt: ExecutionAttemptId,
    },
    /// Call [`ExecutionGraph::restart_due`] with `generation` after `delay`.
    RestartAfter {
        /// The restart strategy's pause.
        delay: Duration,
        /// Which restart it is.
        generation: u64,
    },
    /// Drop these result partitions of the job on a TaskManager: nothing reads them any more
    /// (every consuming region finished) or their attempt was superseded by a restart.
    ReleaseResults {
        /// Where they are.
        resource_id: ResourceId,
        /// Which.
        partitions: Vec<ResultPartitionId>,
    },
    /// Drop these subpartitions of running pipelined producers on this TaskManager: their
    /// consumer finished without reading them to their end.
    ReleaseUnread {
        /// Where the producers run.
        resource_id: ResourceId,
        /// Which: (partition, subpartition).
        subpartitions: Vec<(ResultPartitionId, u32)>,
    },
    /// Drop the job's result partitions on these TaskManagers.
    ReleasePartitions {
        /// Every TaskManager that ran a task of the job.
        resource_ids: BTreeSet<ResourceId>,
    },
    /// The job reached a final status.
    Terminated(JobStatus),
}

/// What a job master needs from the JobManager for one call.
pub struct JobContext<'a> {
    /// The shared slot scheduler.
    pub scheduler: &'a mut Scheduler,
    /// Now, for slot request ages.
    pub now: Instant,
    /// Now, wall clock, for status timestamps.
    pub now_ms: u64,
    /// The TaskManager actor of a registered worker.
    pub address_of: &'a dyn Fn(&ResourceId) -> Option<ActorAddress>,
}

#[derive(Debug, Clone)]
struct ExecutionVertex {
    attempt: ExecutionAttemptId,
    attempt_number: u32,
    state: Tracked<ExecutionState>,
    placement: Option<SlotAssignment>,
    /// Its position in `ExecutionGraph::placed_on` of its placement's TaskManager.
    placed_at: usize,
    error: Option<String>,
    /// What its exchange did, as its TaskManager last reported (this attempt only).
    io: Option<TaskIoSnapshot>,
    /// What this attempt sent back when it finished (a `collect()` sink's records).
    result: Option<bytes::Bytes>,
    /// The TaskManager answered this attempt's `SubmitTasks`: from then on a heartbeat that
    /// does not list it counts against it, as for a RUNNING task (Flink's deployment
    /// reconciliation). Before that the submission may still be on its way.
    taken: bool,
    /// A new leader took this finished attempt back from the job event log: it did not run
    /// again.
    restored: bool,
}

/// See the module docs.
#[derive(Debug)]
pub struct ExecutionGraph {
    job_id: JobId,
    graph: Arc<JobGraph>,
    regions: PipelinedRegions,
    /// Each region's tasks, producers first (so consumers can prefer their producers' places);
    /// shared, so walking a region while changing the job copies no list.
    region_members: Vec<Arc<[TaskRef]>>,
    /// Tasks of each scheduled region not finished yet: the region finishes at zero.
    unfinished: Vec<usize>,
    /// Tasks scheduled, deploying, running or canceling (all of the job).
    active: usize,
    /// Of those, the ones in regions waiting to restart.
    restarting_active: usize,
    tasks: Vec<Vec<ExecutionVertex>>,
    attempts: FixedHashMap<ExecutionAttemptId, TaskRef>,
    status: Tracked<JobStatus>,
    progress: RegionProgress,
    /// Which finished regions' results nobody reads any more.
    release: PartitionReleaseStrategy,
    /// Regions waiting to run again (their tasks stopping, or the restart delay).
    restarting: BTreeSet<RegionId>,
    restart_generation: u64,
    restart_due: bool,
    backoff: RestartBackoff,
    restarts: u32,
    /// Tasks started again as new attempts, over all restarts.
    restarted_tasks: u64,
    failure: Option<String>,
    /// Every TaskManager a task of this job was deployed to (their partitions to release).
    used_task_managers: BTreeSet<ResourceId>,
    /// Tasks whose current attempt is placed on each TaskManager (running, or finished with
    /// results there), so losing one touches only its own tasks. In no order: each task knows
    /// its position (`ExecutionVertex::placed_at`).
    placed_on: FixedHashMap<ResourceId, Vec<TaskRef>>,
    /// Slots each region needs at once (after slot sharing).
    region_slots: Vec<u64>,
    /// Tasks whose current attempt finished (the summary's count, kept, not counted).
    finished_tasks: u32,
    /// This job's bulks in the scheduler's queue (at most [`QUEUED_REGIONS_PER_JOB`]).
    queued_bulks: usize,
    tasks_total: u32,
    /// Attempts a heartbeat of a TaskManager did not list although they run there (by this
    /// job's account): failed if the next heartbeat does not list them either.
    suspects: BTreeMap<ResourceId, BTreeSet<ExecutionAttemptId>>,
    /// CANCELING attempts a heartbeat of their TaskManager still listed: sent `CancelTasks`
    /// again if the next heartbeat lists them too (the cancel travels as a tell, and a lost
    /// one left a task blocked for credit running, and its job CANCELLING, for ever; Flink
    /// retries its cancel call too).
    cancel_suspects: BTreeMap<ResourceId, BTreeSet<ExecutionAttemptId>>,
    /// Each vertex's name, operator and configuration as its descriptors share them.
    vertex_parts: Vec<VertexParts>,
    /// The job's artifacts, as its descriptors share them.
    artifacts: Arc<[crate::job::artifact::JobArtifact]>,
    /// All-to-all producer lists by edge, shared by every consumer (even across regions, as
    /// with blocking edges) until a producer changes (a restart or a lost TaskManager).
    gates: BTreeMap<u32, SharedProducers>,
    rng: NodeRng,
    submitted_at_ms: u64,
    /// When a new leader recovered this job (high availability), for the status API.
    recovered_at_ms: Option<u64>,
    /// At most [`EXCEPTION_HISTORY_SIZE`] task failures, oldest first, root causes kept before
    /// concurrent failures ([`Self::record_exception`]).
    exceptions: VecDeque<JobException>,
    /// Progress not yet taken for the job event log; `None`: not logged (see `recovery`).
    events: Option<Vec<crate::ha::job_event_log::JobEvent>>,
}

/// What every descriptor of a vertex carries, shared rather than copied per subtask.
#[derive(Debug)]
struct VertexParts {
    sharing_group: Arc<str>,
    name: Arc<str>,
    operator: Arc<str>,
    config: Arc<BTreeMap<String, String>>,
}

/// One all-to-all edge's producer list, and the TaskManagers it was sent to: the others get
/// it with their first task that reads it, and later tasks only name it (see
/// `messages::deployment`).
#[derive(Debug)]
struct SharedProducers {
    id: ProducerListId,
    locations: Arc<Vec<ProducerLocation>>,
    sent_to: BTreeSet<ResourceId>,
}

impl ExecutionGraph {
    /// A job, not started. Fails only for a graph that did not pass validation.
    pub fn new(
        job_id: JobId,
        graph: JobGraph,
        rng: NodeRng,
        now_ms: u64,
    ) -> Result<Self, RegionError> {
        let regions = PipelinedRegions::compute(&graph)?;
        Ok(Self::with_regions(job_id, graph, regions, rng, now_ms))
    }

    /// A job, not started, whose regions were computed already (by
    /// [`PipelinedRegions::compute`] of this very graph, off the JobManager's thread).
    pub fn with_regions(
        job_id: JobId,
        graph: JobGraph,
        regions: PipelinedRegions,
        mut rng: NodeRng,
        now_ms: u64,
    ) -> Self {
        let progress = RegionProgress::new(&regions);
        let release = PartitionReleaseStrategy::new(&regions);
        let rank: BTreeMap<usize, usize> = graph
            .topological_order()
            .into_iter()
            .enumerate()
            .map(|(i, v)| (v, i))
            .collect();
        let region_members: Vec<Arc<[TaskRef]>> = regions
            .regions
            .iter()
            .map(|region| {
                let mut members: Vec<TaskRef> = region
                    .members
                    .iter()
                    .map(|m| TaskRef {
                        job: job_id,
                        vertex: m.vertex,
                        subtask: m.subtask,
                    })
                    .collect();
                members.sort_by_key(|t| (rank.get(&t.vertex).copied().unwrap_or(0), t.subtask));
                Arc::from(members)
            })
            .collect();
        let tasks = graph
            .vertices
            .iter()
            .map(|v| {
                (0..v.parallelism)
                    .map(|_| ExecutionVertex {
                        attempt: ExecutionAttemptId::generate(&mut rng),
                        attempt_number: 0,
                        state: Tracked::new(ExecutionState::Created, now_ms),
                        placement: None,
                        placed_at: 0,
                        error: None,
                        io: None,
                        result: None,
                        taken: false,
                        restored: false,
                    })
                    .collect()
            })
            .collect();
        let backoff = RestartBackoff::new(graph.restart_strategy);
        let region_slots = region_members
            .iter()
            .map(|members| slots_needed(&graph, members.iter().map(|t| t.vertex)))
            .collect();
        let tasks_total = graph.vertices.iter().map(|v| v.parallelism).sum();
        let mut master = Self {
            job_id,
            unfinished: vec![0; regions.regions.len()],
            regions,
            region_members,
            active: 0,
            restarting_active: 0,
            tasks,
            attempts: FixedHashMap::default(),
            status: Tracked::new(JobStatus::Created, now_ms),
            progress,
            release,
            restarting: BTreeSet::new(),
            restart_generation: 0,
            restart_due: false,
            backoff,
            restarts: 0,
            restarted_tasks: 0,
            failure: None,
            used_task_managers: BTreeSet::new(),
            placed_on: FixedHashMap::default(),
            region_slots,
            finished_tasks: 0,
            queued_bulks: 0,
            tasks_total,
            gates: BTreeMap::new(),
            vertex_parts: graph
                .vertices
                .iter()
                .map(|v| VertexParts {
                    sharing_group: v.slot_sharing_group.as_str().into(),
                    name: v.name.as_str().into(),
                    operator: v.operator.as_str().into(),
                    config: Arc::new(v.config.clone()),
                })
                .collect(),
            artifacts: graph.artifacts.clone().into(),
            suspects: BTreeMap::new(),
            cancel_suspects: BTreeMap::new(),
            rng,
            submitted_at_ms: now_ms,
            recovered_at_ms: None,
            exceptions: VecDeque::new(),
            events: None,
            graph: Arc::new(graph),
        };
        master.index_attempts();
        master
    }

    fn index_attempts(&mut self) {
        self.attempts.clear();
        for (vertex, subtasks) in self.tasks.iter().enumerate() {
            for (subtask, ev) in subtasks.iter().enumerate() {
                self.attempts.insert(
                    ev.attempt,
                    TaskRef {
                        job: self.job_id,
                        vertex,
                        subtask: subtask as u32,
                    },
                );
            }
        }
    }

    /// Marks the job as recovered by a new leader at `now_ms` (it runs again from the start).
    pub fn mark_recovered(&mut self, now_ms: u64) {
        self.recovered_at_ms = Some(now_ms);
    }

    /// The job's status.
    pub fn status(&self) -> JobStatus {
        self.status.state()
    }

    /// When the job was submitted (wall clock, ms).
    pub fn submitted_at_ms(&self) -> u64 {
        self.submitted_at_ms
    }

    /// The job graph.
    pub fn graph(&self) -> &JobGraph {
        &self.graph
    }

    fn set_status(&mut self, to: JobStatus, now_ms: u64) {
        if let Err(error) = self.status.transition(to, now_ms) {
            log::warn!("job {}: {error}", self.job_id);
        }
    }

    fn task(&self, task: &TaskRef) -> &ExecutionVertex {
        &self.tasks[task.vertex][task.subtask as usize]
    }

    fn task_mut(&mut self, task: &TaskRef) -> &mut ExecutionVertex {
        &mut self.tasks[task.vertex][task.subtask as usize]
    }

    fn region_of(&self, task: &TaskRef) -> RegionId {
        self.regions
            .region_of(ExecutionVertexRef {
                vertex: task.vertex,
                subtask: task.subtask,
            })
            // Every TaskRef here is made from this job's own graph, whose every subtask the
            // regions were computed from.
            .expect("a subtask of this job has a region")
    }

    fn members(&self, region: RegionId) -> Arc<[TaskRef]> {
        self.region_members[region.0].clone()
    }

    /// Every state change of a task goes through here, keeping the counters exact.
    fn set_state(&mut self, task: &TaskRef, to: ExecutionState, now_ms: u64) -> bool {
        let restarting = self.restarting.contains(&self.region_of(task));
        let region = self.region_of(task);
        let ev = self.task_mut(task);
        let from = ev.state.state();
        if let Err(error) = ev.state.transition(to, now_ms) {
            log::warn!("job {}: {task:?}: {error}", self.job_id);
            return false;
        }
        match (is_active(from), is_active(to)) {
            (false, true) => {
                self.active += 1;
                self.restarting_active += usize::from(restarting);
            }
            (true, false) => {
                self.active = self.active.saturating_sub(1);
                if restarting {
                    self.restarting_active = self.restarting_active.saturating_sub(1);
                }
            }
            _ => {}
        }
        if to == ExecutionState::Finished {
            self.unfinished[region.0] = self.unfinished[region.0].saturating_sub(1);
            self.finished_tasks += 1;
        }
        true
    }

    /// A TaskManager's sample of its tasks' exchange metrics: kept for this job's current
    /// attempts (others are another job's, or old). O(reported tasks · log).
    pub fn record_io(&mut self, io: &[(ExecutionAttemptId, TaskIoSnapshot)]) {
        for (attempt, snapshot) in io {
            if let Some(task) = self.attempts.get(attempt).copied() {
                self.task_mut(&task).io = Some(*snapshot);
            }
        }
    }

    /// Keeps what a finished attempt sent back (the current attempt's only: a restart runs it
    /// again and it sends again).
    pub fn record_result(&mut self, attempt: ExecutionAttemptId, result: bytes::Bytes) {
        if let Some(task) = self.attempts.get(&attempt).copied() {
            self.task_mut(&task).result = Some(result);
        }
    }

    /// What the job's tasks sent back, by vertex, for the vertices where any did.
    pub fn results(&self) -> JobResults {
        let mut vertices = std::collections::BTreeMap::new();
        for (vertex, subtasks) in self.graph.vertices.iter().zip(&self.tasks) {
            if subtasks.iter().any(|task| task.result.is_some()) {
                vertices.insert(
                    vertex.name.clone(),
                    subtasks.iter().map(|task| task.result.clone()).collect(),
                );
            }
        }
        JobResults {
            status: Some(self.status()),
            vertices,
        }
    }

    /// Keeps a task failure in the exception history: at most [`EXCEPTION_HISTORY_SIZE`], the
    /// oldest concurrent failure going first when it is full, then the oldest root cause.
    fn record_exception(&mut self, task: &TaskRef, reason: String, root_cause: bool, now_ms: u64) {
        let ev = self.task(task);
        let exception = JobException {
            timestamp_ms: now_ms,
            vertex: self.graph.vertices[task.vertex].name.clone(),
            subtask: task.subtask,
            attempt_number: ev.attempt_number,
            resource_id: ev.placement.as_ref().map(|p| p.resource_id.clone()),
            reason,
            root_cause,
        };
        if self.exceptions.len() == EXCEPTION_HISTORY_SIZE {
            // The failures that came with a failover go before any root cause, so a job that
            // keeps restarting still says why (Flink keeps its history by root cause too).
            match self.exceptions.iter().position(|e| !e.root_cause) {
                Some(oldest_concurrent) => {
                    self.exceptions.remove(oldest_concurrent);
                }
                None if root_cause => {
                    self.exceptions.pop_front();
                }
                None => return,
            }
        }
        self.exceptions.push_back(exception);
    }

    /// Tasks started again as new attempts so far: each task of a restarted region counts
    /// once per restart (the JobManager adds these up for `flint_task_restarts_total`).
    pub fn restarted_tasks(&self) -> u64 {
        self.restarted_tasks
    }

    /// Whether `attempt` is the current attempt of its task and waits for its deployment.
    pub fn is_deploying(&self, attempt: ExecutionAttemptId) -> bool {
        self.attempts.get(&attempt).is_some_and(|task| {
            let ev = self.task(task);
            ev.attempt == attempt && ev.state.state() == ExecutionState::Deploying && !ev.taken
        })
    }

    /// The TaskManager answered `attempt`'s `SubmitTasks`: it holds the task now (see
    /// [`reconcile`](Self::reconcile)).
    pub fn deployment_taken(&mut self, attempt: ExecutionAttemptId) {
        let Some(task) = self.attempts.get(&attempt).copied() else {
            return;
        };
        self.task_mut(&task).taken = true;
    }

    /// How many subtasks the job has.
    pub fn tasks_total(&self) -> u32 {
        self.tasks_total
    }

    /// The summary line.
    pub fn summary(&self) -> JobSummary {
        JobSummary {
            job_id: self.job_id,
            name: self.graph.name.clone(),
            status: self.status(),
            tasks_finished: self.finished_tasks,
            tasks_total: self.tasks_total,
            submitted_at_ms: self.submitted_at_ms,
        }
    }

    /// Everything about the job.
    pub fn details(&self) -> JobDetails {
        JobDetails {
            summary: self.summary(),
            status_timestamps: self.status.timestamps().iter().collect(),
            failure: self.failure.clone(),
            restarts: self.restarts,
            recovered_at_ms: self.recovered_at_ms,
            exceptions: self.exceptions.iter().cloned().collect(),
            from_job_result_store: false,
            artifacts: self.graph.artifacts.clone(),
            vertices: self
                .graph
                .vertices
                .iter()
                .zip(&self.tasks)
                .map(|(vertex, subtasks)| VertexDetails {
                    name: vertex.name.clone(),
                    operator: vertex.operator.clone(),
                    chain: vertex.chain.clone(),
                    io: vertex_io(subtasks.iter().filter_map(|ev| ev.io.as_ref())),
                    summary: None,
                    subtasks: subtasks
                        .iter()
                        .enumerate()
                        .map(|(i, ev)| SubtaskDetails {
                            subtask: i as u32,
                            attempt_number: ev.attempt_number,
                            state: ev.state.state(),
                            resource_id: ev.placement.as_ref().map(|p| p.resource_id.clone()),
                            locality: ev.placement.as_ref().map(|p| p.locality),
                            timestamps: ev.state.timestamps().iter().collect(),
                            error: ev.error.clone(),
                            io: ev.io,
                            restored: ev.restored,
                        })
                        .collect(),
                })
                .collect(),
        }
    }

    /// The current attempt of `task`, for the slot view of the status API; `None` for a task
    /// this job does not have.
    pub fn slot_task_attempt(&self, task: &TaskRef) -> Option<SlotTaskAttempt> {
        let ev = self
            .tasks
            .get(task.vertex)?
            .get(usize::try_from(task.subtask).ok()?)?;
        Some(SlotTaskAttempt {
            vertex_name: self.graph.vertices.get(task.vertex)?.name.clone(),
            attempt_number: ev.attempt_number,
            attempt: ev.attempt,
            state: ev.state.state(),
        })
    }

    /// Slots the job's largest pipelined region needs at once: what the pool must be able to
    /// offer for the job to run (its regions run in waves as slots free).
    pub fn largest_region_slots(&self) -> u64 {
        self.region_slots.iter().copied().max().unwrap_or(0)
    }

    /// The region needing [`largest_region_slots`](Self::largest_region_slots), described for
    /// an error message: its number and its first subtask.
    pub fn largest_region(&self) -> Option<(RegionId, String)> {
        let (index, _) = self
            .region_slots
            .iter()
            .enumerate()
            .max_by_key(|(i, slots)| (**slots, std::cmp::Reverse(*i)))?;
        let first = self.region_members[index].first()?;
        let vertex = &self.graph.vertices[first.vertex];
        let described = format!(
            "region {index} ({} subtasks, from {} {}/{})",
            self.region_members[index].len(),
            vertex.name,
            first.subtask + 1,
            vertex.parallelism
        );
        Some((RegionId(index), described))
    }
}

/// A vertex's figures from its subtasks': counts and buffers summed, backpressure the highest.
fn vertex_io<'a>(subtasks: impl Iterator<Item = &'a TaskIoSnapshot>) -> TaskIoSnapshot {
    subtasks.fold(TaskIoSnapshot::default(), |sum, t| TaskIoSnapshot {
        records_in: sum.records_in + t.records_in,
        bytes_in: sum.bytes_in + t.bytes_in,
        records_out: sum.records_out + t.records_out,
        bytes_out: sum.bytes_out + t.bytes_out,
        buffers_in_use: sum.buffers_in_use + t.buffers_in_use,
        backpressured_ms: sum.backpressured_ms + t.backpressured_ms,
        back_pressured_time_ms_per_second: sum
            .back_pressured_time_ms_per_second
            .max(t.back_pressured_time_ms_per_second),
    })
}

mod descriptors;
mod failover;
mod recovery;
mod scheduling;

pub use recovery::Restored;

#[cfg(test)]
mod tests;
