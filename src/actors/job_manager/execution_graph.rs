//! One job's execution: its execution graph, region scheduling and failover.
//!
//! Pure logic driven by the [`JobManager`](super::job_manager::JobManager): each method takes the
//! shared [`Scheduler`] and returns [`JobAction`]s (deploy, cancel, wait, release) for the actor
//! to carry out, so the whole lifecycle is testable without actors or threads.
//!
//! Lifecycle: regions are scheduled in topological order once their blocking inputs are finished
//! (Flink's PipelinedRegionSchedulingStrategy). A region's tasks ask for slots; when every task of
//! the region has one, all of them are deployed together (pipelined consumers run beside their
//! producers). A finished task frees its slot; its result partitions stay on its TaskManager until
//! the job ends. A failed task (or a lost TaskManager) triggers region failover: the restart
//! strategy decides; if it allows, the failed region and every region consuming its results are
//! cancelled, and once their tasks have all stopped and the restart delay has passed, they run
//! again as new attempts. A region whose finished results were lost with a TaskManager is
//! restarted too. If the strategy gives up, the job fails with the first failure's reason.

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
use crate::job::regions::{
    ExecutionVertexRef, PipelinedRegions, RegionError, RegionId, RegionProgress,
};
use crate::job::restart::{RestartBackoff, RestartDecision};
use crate::job::states::{ExecutionState, JobStatus, Tracked};
use crate::messages::TaskIoSnapshot;
use crate::messages::job_manager::{
    EXCEPTION_HISTORY_SIZE, JobDetails, JobException, JobSummary, SlotTaskAttempt, SubtaskDetails,
    VertexDetails,
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
    /// The TaskManager answered this attempt's `SubmitTasks`: from then on a heartbeat that
    /// does not list it counts against it, as for a RUNNING task (Flink's deployment
    /// reconciliation). Before that the submission may still be on its way.
    taken: bool,
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
    /// All-to-all producer lists by edge, shared by every consumer (even across regions, as
    /// with blocking edges) until a producer changes (a restart or a lost TaskManager).
    gates: BTreeMap<u32, SharedProducers>,
    rng: NodeRng,
    submitted_at_ms: u64,
    /// When a new leader recovered this job (high availability), for the status API.
    recovered_at_ms: Option<u64>,
    /// The last [`EXCEPTION_HISTORY_SIZE`] task failures, oldest first.
    exceptions: VecDeque<JobException>,
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
                        taken: false,
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
            suspects: BTreeMap::new(),
            cancel_suspects: BTreeMap::new(),
            rng,
            submitted_at_ms: now_ms,
            recovered_at_ms: None,
            exceptions: VecDeque::new(),
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

    /// Starts the job: its source regions ask for slots (deployed once the JobManager serves
    /// their bulks).
    pub fn start(&mut self, cx: &mut JobContext<'_>) -> Vec<JobAction> {
        self.set_status(JobStatus::Running, cx.now_ms);
        self.schedule_ready_regions(cx);
        Vec::new()
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

    fn schedule_ready_regions(&mut self, cx: &mut JobContext<'_>) {
        if self.status() != JobStatus::Running {
            return;
        }
        let room = QUEUED_REGIONS_PER_JOB.saturating_sub(self.queued_bulks);
        for region in self.progress.take_ready_up_to(room) {
            self.queued_bulks += 1;
            self.unfinished[region.0] = self.region_members[region.0].len();
            let members = self.members(region);
            let mut requests = Vec::with_capacity(members.len());
            for task in members.iter() {
                requests.push(self.slot_request(task));
                self.set_state(task, ExecutionState::Scheduled, cx.now_ms);
            }
            cx.scheduler
                .request_bulk(self.bulk(region), requests, cx.now);
        }
    }

    fn bulk(&self, region: RegionId) -> BulkId {
        BulkId {
            job: self.job_id,
            region: region.0,
        }
    }

    fn slot_request(&self, task: &TaskRef) -> SlotRequest {
        let vertex = &self.graph.vertices[task.vertex];
        let mut preferred = Vec::new();
        let mut preferred_tasks = Vec::new();
        for edge in self.graph.edges.iter().filter(|e| e.target == task.vertex) {
            let producers: Vec<u32> = match edge.pattern {
                DistributionPattern::Forward => vec![task.subtask],
                // As Flink: an input with more producers than locations worth considering
                // gives no preference (and costs no O(P) walk per consumer).
                DistributionPattern::AllToAll
                    if self.graph.vertices[edge.source].parallelism as usize
                        > MAX_PREFERRED_LOCATIONS =>
                {
                    continue;
                }
                DistributionPattern::AllToAll => {
                    (0..self.graph.vertices[edge.source].parallelism).collect()
                }
            };
            for p in producers {
                match &self.tasks[edge.source][p as usize].placement {
                    Some(placement) => preferred.push(placement.resource_id.clone()),
                    // Not placed yet: a producer of the same region, placed before it.
                    None => preferred_tasks.push(TaskRef {
                        job: self.job_id,
                        vertex: edge.source,
                        subtask: p,
                    }),
                }
            }
        }
        SlotRequest {
            task: *task,
            sharing_group: self.vertex_parts[task.vertex].sharing_group.clone(),
            co_location_group: vertex.co_location_group.clone(),
            preferred,
            preferred_tasks,
        }
    }

    /// A region's bulk was served: every task of it has a slot. Deploys the region.
    pub fn bulk_assigned(
        &mut self,
        bulk: BulkId,
        placed: Vec<(TaskRef, SlotAssignment)>,
        cx: &mut JobContext<'_>,
    ) -> Vec<JobAction> {
        let mut actions = Vec::new();
        self.queued_bulks = self.queued_bulks.saturating_sub(1);
        let current = self.status() == JobStatus::Running
            && placed
                .iter()
                .all(|(t, _)| self.task(t).state.state() == ExecutionState::Scheduled);
        if !current {
            // Cancelled or restarted while it waited: give the slots back.
            for (task, _) in &placed {
                self.free_slot(task, cx);
            }
            return actions;
        }
        for (task, assignment) in placed {
            self.place(task, assignment);
        }
        self.try_deploy(RegionId(bulk.region), cx, &mut actions);
        // Room in the queue again: the next ready regions.
        self.schedule_ready_regions(cx);
        actions
    }

    /// Records where `task`'s current attempt runs.
    fn place(&mut self, task: TaskRef, assignment: SlotAssignment) {
        if let Some(old) = self.task_mut(&task).placement.take() {
            self.unplace(&task, &old.resource_id);
        }
        let tasks = self
            .placed_on
            .entry(assignment.resource_id.clone())
            .or_default();
        let at = tasks.len();
        tasks.push(task);
        let ev = self.task_mut(&task);
        ev.placed_at = at;
        ev.placement = Some(assignment);
    }

    /// Takes `task` off its TaskManager's list: O(1), the last task there takes its place.
    fn unplace(&mut self, task: &TaskRef, resource_id: &ResourceId) {
        let at = self.task(task).placed_at;
        let Some(tasks) = self.placed_on.get_mut(resource_id) else {
            return;
        };
        if tasks.get(at) != Some(task) {
            return;
        }
        tasks.swap_remove(at);
        let moved = tasks.get(at).copied();
        if tasks.is_empty() {
            self.placed_on.remove(resource_id);
        }
        if let Some(moved) = moved {
            self.task_mut(&moved).placed_at = at;
        }
    }

    /// Deploys a region once every task of it has a slot.
    fn try_deploy(
        &mut self,
        region: RegionId,
        cx: &mut JobContext<'_>,
        actions: &mut Vec<JobAction>,
    ) {
        let members = self.members(region);
        let ready = members.iter().all(|t| {
            let ev = self.task(t);
            ev.state.state() == ExecutionState::Scheduled && ev.placement.is_some()
        });
        if !ready {
            return;
        }
        let mut shared_gates = std::mem::take(&mut self.gates);
        // The shared producer list of each all-to-all input this region reads and that has
        // none yet: built once here, before the descriptors name it (every producer is placed:
        // a producer region runs first, or is this region, placed whole).
        let mut last_vertex = None;
        for task in members.iter() {
            if last_vertex == Some(task.vertex) {
                continue; // members are grouped by vertex
            }
            last_vertex = Some(task.vertex);
            for (index, edge) in self.graph.edges.iter().enumerate() {
                let index = index as u32;
                if edge.target != task.vertex
                    || edge.pattern != DistributionPattern::AllToAll
                    || shared_gates.contains_key(&index)
                {
                    continue;
                }
                let all = (0..self.graph.vertices[edge.source].parallelism)
                    .map(|subtask| self.producer_location(edge.source, subtask, index, cx))
                    .collect::<Option<Vec<_>>>();
                // A producer's TaskManager is gone: its tasks cannot deploy yet (below).
                if let Some(all) = all {
                    shared_gates.insert(
                        index,
                        SharedProducers {
                            id: ProducerListId::generate(&mut self.rng),
                            locations: Arc::new(all),
                            sent_to: BTreeSet::new(),
                        },
                    );
                }
            }
        }
        for &task in members.iter() {
            let Some(placement) = self.task(&task).placement.as_ref() else {
                continue;
            };
            let (allocation_id, resource_id) = (placement.allocation_id, &placement.resource_id);
            match self.descriptor(&task, allocation_id, resource_id, cx, &mut shared_gates) {
                Some(descriptor) => {
                    let resource_id = resource_id.clone();
                    self.set_state(&task, ExecutionState::Deploying, cx.now_ms);
                    if !self.used_task_managers.contains(&resource_id) {
                        self.used_task_managers.insert(resource_id.clone());
                    }
                    actions.push(JobAction::Deploy {
                        resource_id,
                        descriptor: Box::new(descriptor),
                    });
                }
                None => {
                    // Its TaskManager (or a producer's) is gone; the loss is being handled.
                    log::debug!("job {}: cannot deploy {task:?} yet", self.job_id);
                }
            }
        }
        self.gates = shared_gates;
    }

    /// The shared producer list `id`, if it is still current (a restart replaces it).
    pub fn producer_list(&self, id: ProducerListId) -> Option<Arc<Vec<ProducerLocation>>> {
        self.gates
            .values()
            .find(|shared| shared.id == id)
            .map(|shared| shared.locations.clone())
    }

    /// Where subtask `subtask` of vertex `source` writes its partition of edge `edge`, if its
    /// TaskManager is known.
    fn producer_location(
        &self,
        source: usize,
        subtask: u32,
        edge: u32,
        cx: &JobContext<'_>,
    ) -> Option<ProducerLocation> {
        let producer = &self.tasks[source][subtask as usize];
        let resource_id = &producer.placement.as_ref()?.resource_id;
        Some(ProducerLocation {
            partition: ResultPartitionId {
                producer: producer.attempt,
                edge,
            },
            task_manager: (cx.address_of)(resource_id)?,
        })
    }

    fn descriptor(
        &self,
        task: &TaskRef,
        allocation_id: AllocationId,
        resource_id: &ResourceId,
        cx: &JobContext<'_>,
        shared_gates: &mut BTreeMap<u32, SharedProducers>,
    ) -> Option<TaskDeploymentDescriptor> {
        let vertex = &self.graph.vertices[task.vertex];
        let parts = &self.vertex_parts[task.vertex];
        let ev = self.task(task);
        let mut inputs = Vec::new();
        for (index, edge) in self.graph.edges.iter().enumerate() {
            if edge.target != task.vertex {
                continue;
            }
            let edge_index = index as u32;
            let (producers, subpartition) = match edge.pattern {
                DistributionPattern::Forward => {
                    let own = self.producer_location(edge.source, task.subtask, edge_index, cx)?;
                    (Producers::own(vec![own]), 0)
                }
                DistributionPattern::AllToAll => {
                    // Built by `try_deploy`; missing while a producer's TaskManager is gone.
                    let shared = shared_gates.get_mut(&edge_index)?;
                    let producers = if shared.sent_to.contains(resource_id) {
                        Producers::Known(shared.id)
                    } else {
                        shared.sent_to.insert(resource_id.clone());
                        Producers::Listed {
                            id: Some(shared.id),
                            locations: shared.locations.clone(),
                        }
                    };
                    (producers, task.subtask)
                }
            };
            inputs.push(InputGateDeploymentDescriptor {
                edge: edge_index,
                subpartition,
                producers,
            });
        }
        let outputs = self
            .graph
            .edges
            .iter()
            .enumerate()
            .filter(|(_, e)| e.source == task.vertex)
            .map(|(index, edge)| ResultPartitionDeploymentDescriptor {
                partition: ResultPartitionId {
                    producer: ev.attempt,
                    edge: index as u32,
                },
                pattern: edge.pattern,
                subpartitions: match edge.pattern {
                    DistributionPattern::Forward => 1,
                    DistributionPattern::AllToAll => self.graph.vertices[edge.target].parallelism,
                },
                retained: edge.exchange == ExchangeMode::Blocking,
            })
            .collect();
        Some(TaskDeploymentDescriptor {
            job_id: self.job_id,
            attempt: ev.attempt,
            attempt_number: ev.attempt_number,
            vertex_name: parts.name.clone(),
            subtask: task.subtask,
            parallelism: vertex.parallelism,
            operator: parts.operator.clone(),
            config: parts.config.clone(),
            allocation_id,
            inputs,
            outputs,
        })
    }

    /// A task's state changed on its TaskManager.
    pub fn update(
        &mut self,
        attempt: ExecutionAttemptId,
        state: ExecutionState,
        error: Option<String>,
        cx: &mut JobContext<'_>,
    ) -> Vec<JobAction> {
        self.update_with_lost_input(attempt, state, error, None, cx)
    }

    /// A task's state changed; if it failed because `lost_input` was missing (Flink's
    /// `PartitionNotFoundException`), that partition's producer, if it is the current attempt
    /// and finished, has lost its result: its region reruns with the consumer's (otherwise the
    /// consumer would restart alone, find the partition missing again, and loop through the
    /// job's restarts).
    pub fn update_with_lost_input(
        &mut self,
        attempt: ExecutionAttemptId,
        state: ExecutionState,
        error: Option<String>,
        lost_input: Option<ResultPartitionId>,
        cx: &mut JobContext<'_>,
    ) -> Vec<JobAction> {
        let mut actions = Vec::new();
        let Some(task) = self.attempts.get(&attempt).copied() else {
            log::debug!("job {}: update for an old attempt {attempt}", self.job_id);
            return actions;
        };
        let now_ms = cx.now_ms;
        let current = self.task(&task).state.state();
        if current.is_terminal() {
            return actions;
        }
        // A task that finished while its cancellation was on the way was cancelled all the same;
        // one that says it was cancelled when nobody cancelled it has failed.
        let (state, error) = match (state, current) {
            (ExecutionState::Finished, ExecutionState::Canceling) => {
                (ExecutionState::Canceled, error)
            }
            (ExecutionState::Canceled, c) if c != ExecutionState::Canceling => (
                ExecutionState::Failed,
                Some(error.unwrap_or_else(|| {
                    "the task stopped as cancelled, but was not cancelled".to_owned()
                })),
            ),
            other => (other.0, error),
        };
        if !self.set_state(&task, state, now_ms) {
            return actions;
        }
        if error.is_some() {
            self.task_mut(&task).error = error.clone();
        }
        if !state.is_terminal() {
            return actions;
        }
        self.free_slot(&task, cx);
        let root_cause = self.status() == JobStatus::Running
            && !self.restarting.contains(&self.region_of(&task));
        if state == ExecutionState::Failed && !root_cause {
            let reason = error.clone().unwrap_or_else(|| "task failed".to_owned());
            self.record_exception(&task, reason, false, now_ms);
        }
        match state {
            ExecutionState::Finished => self.task_finished(task, cx, &mut actions),
            ExecutionState::Failed if root_cause => {
                let reason = error.unwrap_or_else(|| "task failed".to_owned());
                let mut failed = vec![(task, reason)];
                if let Some(producer) = lost_input.and_then(|p| self.finished_producer(p)) {
                    let partition = lost_input.map(|p| p.to_string()).unwrap_or_default();
                    log::info!(
                        "job {}: result partition {partition} of {producer:?} was not found; its region runs again",
                        self.job_id
                    );
                    failed.push((
                        producer,
                        format!("its result partition {partition} was lost"),
                    ));
                }
                self.failover(failed, cx, &mut actions);
            }
            _ => {}
        }
        self.after_stop(cx, &mut actions);
        actions
    }

    /// Whether finished tasks of this running job on `resource_id` hold results still to be
    /// read: their own region still runs (pipelined consumers read them) or a consuming region
    /// has not finished. Such a TaskManager is not idle, whatever its slots say (Flink's
    /// TaskExecutor partition check before it may be released). O(this job's tasks there).
    pub fn needs_results_on(&self, resource_id: &ResourceId) -> bool {
        if self.status().is_globally_terminal() {
            return false;
        }
        self.placed_on
            .get(resource_id)
            .into_iter()
            .flatten()
            .filter(|task| self.task(task).state.state() == ExecutionState::Finished)
            .any(|task| {
                let region = self.region_of(task);
                !self.progress.is_finished(region) || self.consumers_unfinished(region)
            })
    }

    /// Whether a region consuming `region`'s results has not finished.
    fn consumers_unfinished(&self, region: RegionId) -> bool {
        self.regions
            .consumers(region)
            .iter()
            .any(|c| !self.progress.is_finished(*c))
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

    /// The finished task whose current attempt produced `partition`, if any.
    fn finished_producer(&self, partition: ResultPartitionId) -> Option<TaskRef> {
        let producer = *self.attempts.get(&partition.producer)?;
        (self.task(&producer).state.state() == ExecutionState::Finished).then_some(producer)
    }

    /// Gives the task's slot back (the JobManager serves the queue after every call).
    fn free_slot(&mut self, task: &TaskRef, cx: &mut JobContext<'_>) {
        cx.scheduler.release(task);
    }

    fn task_finished(
        &mut self,
        task: TaskRef,
        cx: &mut JobContext<'_>,
        actions: &mut Vec<JobAction>,
    ) {
        let region = self.region_of(&task);
        if self.unfinished[region.0] > 0 {
            return;
        }
        self.progress.finish(&self.regions, region);
        if self.progress.finished_count() == self.regions.regions.len() {
            self.set_status(JobStatus::Finished, cx.now_ms);
            self.end(actions);
            return;
        }
        self.schedule_ready_regions(cx);
    }

    fn end(&mut self, actions: &mut Vec<JobAction>) {
        actions.push(JobAction::ReleasePartitions {
            resource_ids: std::mem::take(&mut self.used_task_managers),
        });
        actions.push(JobAction::Terminated(self.status()));
    }

    /// Keeps a task failure in the exception history (the last [`EXCEPTION_HISTORY_SIZE`]).
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
            self.exceptions.pop_front();
        }
        self.exceptions.push_back(exception);
    }

    /// Handles failures: restart the affected regions, or fail the job.
    fn failover(
        &mut self,
        failed: Vec<(TaskRef, String)>,
        cx: &mut JobContext<'_>,
        actions: &mut Vec<JobAction>,
    ) {
        for (task, reason) in &failed {
            self.record_exception(task, reason.clone(), true, cx.now_ms);
        }
        let first_reason = failed.first().map(|(t, r)| {
            let vertex = &self.graph.vertices[t.vertex].name;
            format!(
                "{vertex} ({}/{}): {r}",
                t.subtask + 1,
                self.graph.vertices[t.vertex].parallelism
            )
        });
        match self.backoff.on_failure(&mut self.rng) {
            RestartDecision::GiveUp { reason } => {
                self.failure = Some(format!(
                    "{} ({reason})",
                    first_reason.unwrap_or_else(|| "failure".into())
                ));
                self.set_status(JobStatus::Failing, cx.now_ms);
                self.cancel_all(cx, actions);
            }
            RestartDecision::Restart { delay } => {
                let mut regions = BTreeSet::new();
                for (task, _) in &failed {
                    regions.extend(self.regions.regions_to_restart(self.region_of(task)));
                }
                log::info!(
                    "job {}: restarting {} regions in {delay:?} after {}",
                    self.job_id,
                    regions.len(),
                    first_reason.unwrap_or_default()
                );
                self.restarts += 1;
                for region in &regions {
                    self.progress.reset(&self.regions, *region);
                    if self.restarting.insert(*region) {
                        self.restarting_active += self.region_members[region.0]
                            .iter()
                            .filter(|t| is_active(self.task(t).state.state()))
                            .count();
                    }
                    for &task in self.members(*region).iter() {
                        self.stop_task(task, cx, actions);
                    }
                }
                self.restart_generation += 1;
                self.restart_due = false;
                actions.push(JobAction::RestartAfter {
                    delay,
                    generation: self.restart_generation,
                });
            }
        }
    }

    /// Cancels a task in whatever state it is.
    fn stop_task(&mut self, task: TaskRef, cx: &mut JobContext<'_>, actions: &mut Vec<JobAction>) {
        let now_ms = cx.now_ms;
        match self.task(&task).state.state() {
            ExecutionState::Created | ExecutionState::Scheduled => {
                self.set_state(&task, ExecutionState::Canceled, now_ms);
                if cx.scheduler.cancel_bulk(&self.bulk(self.region_of(&task))) {
                    self.queued_bulks = self.queued_bulks.saturating_sub(1);
                }
                self.free_slot(&task, cx);
            }
            ExecutionState::Deploying | ExecutionState::Running => {
                self.set_state(&task, ExecutionState::Canceling, now_ms);
                let ev = self.task(&task);
                if let Some(placement) = &ev.placement {
                    actions.push(JobAction::Cancel {
                        resource_id: placement.resource_id.clone(),
                        attempt: ev.attempt,
                    });
                }
            }
            // Finished tasks of a restarted region run again; their old output is superseded.
            _ => {}
        }
    }

    fn cancel_all(&mut self, cx: &mut JobContext<'_>, actions: &mut Vec<JobAction>) {
        // Every task's current attempt, in graph order.
        let job = self.job_id;
        let all: Vec<TaskRef> = (self.tasks.iter().enumerate())
            .flat_map(|(vertex, subtasks)| {
                (0..subtasks.len() as u32).map(move |subtask| TaskRef {
                    job,
                    vertex,
                    subtask,
                })
            })
            .collect();
        for task in all {
            self.stop_task(task, cx, actions);
        }
        cx.scheduler.forget_job(self.job_id);
        self.after_stop(cx, actions);
    }

    /// Once every stopping task stopped: finish a cancellation or failure, or run a restart.
    /// O(1): the counters of active tasks say whether anything still runs.
    fn after_stop(&mut self, cx: &mut JobContext<'_>, actions: &mut Vec<JobAction>) {
        match self.status() {
            JobStatus::Cancelling | JobStatus::Failing if self.active == 0 => {
                let to = if self.status() == JobStatus::Cancelling {
                    JobStatus::Canceled
                } else {
                    JobStatus::Failed
                };
                self.set_status(to, cx.now_ms);
                self.end(actions);
            }
            JobStatus::Running
                if self.restart_due
                    && !self.restarting.is_empty()
                    && self.restarting_active == 0 =>
            {
                let members: Vec<TaskRef> = self
                    .restarting
                    .iter()
                    .flat_map(|r| self.region_members[r.0].iter().copied())
                    .collect();
                self.restart_regions(members, cx);
            }
            _ => {}
        }
    }

    fn restart_regions(&mut self, members: Vec<TaskRef>, cx: &mut JobContext<'_>) {
        // New producer attempts: the shared producer lists name the old ones.
        self.gates.clear();
        self.restarted_tasks += members.len() as u64;
        for task in members {
            let old = self.task(&task).attempt;
            self.attempts.remove(&old);
            let attempt = ExecutionAttemptId::generate(&mut self.rng);
            let now_ms = cx.now_ms;
            let ev = self.task_mut(&task);
            let was_finished = ev.state.state() == ExecutionState::Finished;
            ev.attempt = attempt;
            ev.attempt_number += 1;
            ev.state = Tracked::new(ExecutionState::Created, now_ms);
            ev.error = None;
            ev.io = None;
            ev.taken = false;
            if let Some(old) = ev.placement.take() {
                self.unplace(&task, &old.resource_id);
            }
            if was_finished {
                self.finished_tasks -= 1;
            }
            self.attempts.insert(attempt, task);
        }
        for region in std::mem::take(&mut self.restarting) {
            self.progress.release(region);
        }
        self.restarting_active = 0;
        self.restart_due = false;
        self.schedule_ready_regions(cx);
    }

    /// Tasks started again as new attempts so far: each task of a restarted region counts
    /// once per restart (the JobManager adds these up for `flint_task_restarts_total`).
    pub fn restarted_tasks(&self) -> u64 {
        self.restarted_tasks
    }

    /// The restart delay `generation` passed.
    pub fn restart_due(&mut self, generation: u64, cx: &mut JobContext<'_>) -> Vec<JobAction> {
        let mut actions = Vec::new();
        if generation == self.restart_generation {
            self.restart_due = true;
            self.after_stop(cx, &mut actions);
        }
        actions
    }

    /// A TaskManager is gone: its tasks failed, and finished results it held are lost.
    pub fn task_manager_lost(
        &mut self,
        resource_id: &ResourceId,
        cx: &mut JobContext<'_>,
    ) -> Vec<JobAction> {
        let mut actions = Vec::new();
        self.used_task_managers.remove(resource_id);
        // Its heartbeats are over: nothing of it to suspect any more (a long job on a cluster
        // whose TaskManagers come and go would keep one entry per TaskManager ever lost).
        self.suspects.remove(resource_id);
        self.cancel_suspects.remove(resource_id);
        self.gates.clear();
        let reason = format!("TaskManager {resource_id} was lost");
        let mut failed = Vec::new();
        let mut on_lost = self.placed_on.remove(resource_id).unwrap_or_default();
        on_lost.sort_unstable();
        for task in on_lost {
            let now_ms = cx.now_ms;
            let state = self.task(&task).state.state();
            match state {
                ExecutionState::Finished => {
                    // Its results are gone; needed again unless every consumer finished.
                    if self.consumers_unfinished(self.region_of(&task)) {
                        failed.push((task, reason.clone()));
                    }
                }
                s if s.is_terminal() => {}
                ExecutionState::Canceling => {
                    // Already being stopped (a failover or a cancellation): it stopped now.
                    self.set_state(&task, ExecutionState::Canceled, now_ms);
                    self.task_mut(&task).error = Some(reason.clone());
                }
                _ => {
                    self.set_state(&task, ExecutionState::Failed, now_ms);
                    self.task_mut(&task).error = Some(reason.clone());
                    failed.push((task, reason.clone()));
                }
            }
        }
        if !failed.is_empty() && self.status() == JobStatus::Running {
            self.failover(failed, cx, &mut actions);
        }
        self.after_stop(cx, &mut actions);
        actions
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

    /// `resource_id` reported the attempts it runs: a task this job believes RUNNING there but
    /// not listed ended without its final report arriving (or the TaskManager dropped it): it
    /// failed. A CANCELING one not listed has stopped. A DEPLOYING task is treated as RUNNING
    /// once its TaskManager answered the submission (its RUNNING update can be lost, or the
    /// TaskManager can drop it before sending one: issue 12, seeds 21150 and 24138 stayed
    /// DEPLOYING forever); before that it is left alone, its submission may still be on its way
    /// and the submission's ask timeout bounds it. A task must be missing from two heartbeats
    /// in a row: a heartbeat that waited for mailbox room can arrive after the RUNNING update
    /// sent after it, but the next heartbeat is built after that update.
    pub fn reconcile(
        &mut self,
        resource_id: &ResourceId,
        running: &BTreeSet<ExecutionAttemptId>,
        cx: &mut JobContext<'_>,
    ) -> Vec<JobAction> {
        // Only this job's tasks placed there: O(those tasks), whatever the job's size.
        // Tasks that should be listed but are not, and cancelling ones still listed (the
        // cancel may have been lost).
        let mut candidates: BTreeMap<ExecutionAttemptId, (TaskRef, ExecutionState)> =
            BTreeMap::new();
        let mut still_cancelling = BTreeSet::new();
        for task in self.placed_on.get(resource_id).into_iter().flatten() {
            let ev = self.task(task);
            let state = ev.state.state();
            let listed = running.contains(&ev.attempt);
            let reported = match state {
                ExecutionState::Running => true,
                ExecutionState::Canceling => {
                    if listed {
                        still_cancelling.insert(ev.attempt);
                    }
                    true
                }
                ExecutionState::Deploying => ev.taken,
                _ => false,
            };
            if reported && !listed {
                candidates.insert(ev.attempt, (*task, state));
            }
        }
        let suspected = self.suspects.remove(resource_id).unwrap_or_default();
        let (missing, first_time): (Vec<_>, Vec<_>) = candidates
            .into_iter()
            .partition(|(attempt, _)| suspected.contains(attempt));
        if !first_time.is_empty() {
            self.suspects.insert(
                resource_id.clone(),
                first_time.into_iter().map(|(attempt, _)| attempt).collect(),
            );
        }
        let missing: Vec<(TaskRef, ExecutionState)> =
            missing.into_iter().map(|(_, found)| found).collect();
        let mut actions = Vec::new();
        // Still cancelling there, as at the last heartbeat: send the cancel again.
        let before = self.cancel_suspects.remove(resource_id).unwrap_or_default();
        for &attempt in still_cancelling.intersection(&before) {
            log::warn!(
                "job {}: {attempt} still runs on {resource_id} after its cancellation; \
                 cancelling it again",
                self.job_id
            );
            actions.push(JobAction::Cancel {
                resource_id: resource_id.clone(),
                attempt,
            });
        }
        if !still_cancelling.is_empty() {
            self.cancel_suspects
                .insert(resource_id.clone(), still_cancelling);
        }
        for (task, state) in missing {
            let attempt = self.task(&task).attempt;
            log::warn!(
                "job {}: {task:?} ({attempt}) no longer runs on {resource_id}",
                self.job_id
            );
            let (to, error) = if state == ExecutionState::Canceling {
                (ExecutionState::Canceled, None)
            } else {
                (
                    ExecutionState::Failed,
                    Some(format!("the task vanished from TaskManager {resource_id}")),
                )
            };
            actions.extend(self.update(attempt, to, error, cx));
        }
        actions
    }

    /// A region's bulk could not be served for the slot request timeout: its tasks fail.
    pub fn slot_request_failed(
        &mut self,
        tasks: &[TaskRef],
        error: &NoResourceAvailable,
        cx: &mut JobContext<'_>,
    ) -> Vec<JobAction> {
        let mut actions = Vec::new();
        // The scheduler dropped the bulk from its queue.
        self.queued_bulks = self.queued_bulks.saturating_sub(1);
        let mut failed = Vec::new();
        for task in tasks {
            if self.task(task).state.state() != ExecutionState::Scheduled {
                continue;
            }
            self.set_state(task, ExecutionState::Failed, cx.now_ms);
            self.task_mut(task).error = Some(error.to_string());
            failed.push((*task, error.to_string()));
        }
        if !failed.is_empty() && self.status() == JobStatus::Running {
            failed.truncate(1);
            self.failover(failed, cx, &mut actions);
        }
        self.after_stop(cx, &mut actions);
        actions
    }

    /// Cancels the job.
    pub fn cancel(&mut self, cx: &mut JobContext<'_>) -> Vec<JobAction> {
        let mut actions = Vec::new();
        if self.status().is_globally_terminal() || self.status() == JobStatus::Cancelling {
            return actions;
        }
        self.set_status(JobStatus::Cancelling, cx.now_ms);
        self.cancel_all(cx, &mut actions);
        actions
    }

    /// Deployments that failed together: one batch to one TaskManager lost, unanswered or
    /// refused. One failure for the restart strategy and one failover of all their regions —
    /// one lost message is one fault, however many tasks it carried (a strategy of 3 attempts
    /// must not be spent by one dropped batch of 3).
    pub fn deployments_failed(
        &mut self,
        failed: Vec<(ExecutionAttemptId, String)>,
        cx: &mut JobContext<'_>,
    ) -> Vec<JobAction> {
        let mut actions = Vec::new();
        let mut root_causes = Vec::new();
        for (attempt, error) in failed {
            let Some(task) = self.attempts.get(&attempt).copied() else {
                log::debug!("job {}: failure of an old attempt {attempt}", self.job_id);
                continue;
            };
            if self.task(&task).state.state().is_terminal()
                || !self.set_state(&task, ExecutionState::Failed, cx.now_ms)
            {
                continue;
            }
            self.task_mut(&task).error = Some(error.clone());
            self.free_slot(&task, cx);
            let root_cause = self.status() == JobStatus::Running
                && !self.restarting.contains(&self.region_of(&task));
            if root_cause {
                root_causes.push((task, error));
            } else {
                self.record_exception(&task, error, false, cx.now_ms);
            }
        }
        if !root_causes.is_empty() {
            self.failover(root_causes, cx, &mut actions);
        }
        self.after_stop(cx, &mut actions);
        actions
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
            vertices: self
                .graph
                .vertices
                .iter()
                .zip(&self.tasks)
                .map(|(vertex, subtasks)| VertexDetails {
                    name: vertex.name.clone(),
                    operator: vertex.operator.clone(),
                    io: vertex_io(subtasks.iter().filter_map(|ev| ev.io.as_ref())),
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

    /// Slots this job needs at once at most: per slot sharing group, the largest parallelism.
    pub fn peak_slots(graph: &JobGraph) -> u64 {
        let mut groups: BTreeMap<&str, u32> = BTreeMap::new();
        for vertex in &graph.vertices {
            let entry = groups
                .entry(vertex.slot_sharing_group.as_str())
                .or_default();
            *entry = (*entry).max(vertex.parallelism);
        }
        groups.values().map(|p| u64::from(*p)).sum()
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

/// Slots the largest pipelined region of `graph` needs at once: what a pool must offer for the
/// job to run at all (its regions run in waves as slots free).
pub fn largest_region_slots(graph: &JobGraph) -> Result<u64, RegionError> {
    let regions = PipelinedRegions::compute(graph)?;
    Ok(regions
        .regions
        .iter()
        .map(|region| slots_needed(graph, region.members.iter().map(|m| m.vertex)))
        .max()
        .unwrap_or(0))
}

/// Slots a set of subtasks needs at once: per slot sharing group, the vertex with the most
/// subtasks among them (a shared slot holds one subtask of each vertex of its group).
pub fn slots_needed(graph: &JobGraph, vertices: impl IntoIterator<Item = usize>) -> u64 {
    let mut vertices = vertices.into_iter().peekable();
    let Some(first) = vertices.next() else {
        return 0;
    };
    if vertices.peek().is_none() {
        return 1; // one subtask, one slot: the common case of many independent regions
    }
    let mut per_vertex: BTreeMap<usize, u64> = BTreeMap::new();
    for vertex in std::iter::once(first).chain(vertices) {
        *per_vertex.entry(vertex).or_default() += 1;
    }
    let mut per_group: BTreeMap<&str, u64> = BTreeMap::new();
    for (vertex, count) in per_vertex {
        let largest = per_group
            .entry(graph.vertices[vertex].slot_sharing_group.as_str())
            .or_default();
        *largest = (*largest).max(count);
    }
    per_group.values().sum()
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

#[cfg(test)]
mod tests;
