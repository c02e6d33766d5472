//! Region scheduling (Flink's `PipelinedRegionSchedulingStrategy` and the scheduler that drives
//! it): which regions ask the slot [`Scheduler`] for a bulk of slots and in what order, where an
//! assigned slot puts a task, and how a region whose slots are all assigned is deployed.

use super::*;

impl ExecutionGraph {
    /// Starts the job: its source regions ask for slots (deployed once the JobManager serves
    /// their bulks).
    pub fn start(&mut self, cx: &mut JobContext<'_>) -> Vec<JobAction> {
        self.set_status(JobStatus::Running, cx.now_ms);
        let mut actions = Vec::new();
        if self.progress.finished_count() == self.regions.regions.len() {
            // A new leader took every region back from the job event log.
            self.set_status(JobStatus::Finished, cx.now_ms);
            self.end(&mut actions);
            return actions;
        }
        self.schedule_ready_regions(cx);
        actions
    }

    pub(super) fn schedule_ready_regions(&mut self, cx: &mut JobContext<'_>) {
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

    pub(super) fn bulk(&self, region: RegionId) -> BulkId {
        BulkId {
            job: self.job_id,
            region: region.0,
        }
    }

    pub(super) fn slot_request(&self, task: &TaskRef) -> SlotRequest {
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
    pub(super) fn place(&mut self, task: TaskRef, assignment: SlotAssignment) {
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
    pub(super) fn unplace(&mut self, task: &TaskRef, resource_id: &ResourceId) {
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
    pub(super) fn try_deploy(
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

    /// Gives the task's slot back (the JobManager serves the queue after every call).
    pub(super) fn free_slot(&mut self, task: &TaskRef, cx: &mut JobContext<'_>) {
        cx.scheduler.release(task);
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
}
