//! Task state updates and failover (Flink's `RestartPipelinedRegionFailoverStrategy` under the
//! job's restart strategy): a finished task frees its slot and may make regions ready; a failed
//! task, a lost TaskManager or a lost input restarts the regions it affects, once their tasks have
//! all stopped and the restart delay has passed; a job that cannot restart fails.

use super::*;

impl ExecutionGraph {
    /// A task's state changed on its TaskManager.
    pub fn update(
        &mut self,
        attempt: ExecutionAttemptId,
        state: ExecutionState,
        error: Option<String>,
        cx: &mut JobContext<'_>,
    ) -> Vec<JobAction> {
        self.update_with_lost_input(attempt, state, error, None, false, cx)
    }

    /// A task's state changed; if it failed because `lost_input` was missing (Flink's
    /// `PartitionNotFoundException`), that partition's producer, if it is the current attempt
    /// and finished, has lost its result: its region reruns with the consumer's (otherwise the
    /// consumer would restart alone, find the partition missing again, and loop through the
    /// job's restarts). A failure its TaskManager calls `unrecoverable` (an invalid operator
    /// configuration, a record too large for the exchange) fails the job at once, whatever its
    /// restart strategy allows, even if it arrives while its region is restarting already:
    /// every attempt would fail the same way (Flink's `NonRecoverableError`).
    pub fn update_with_lost_input(
        &mut self,
        attempt: ExecutionAttemptId,
        state: ExecutionState,
        error: Option<String>,
        lost_input: Option<ResultPartitionId>,
        unrecoverable: bool,
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
            // Also while its region already restarts for another task's failure (a consumer's
            // report that this producer's partition failed may come first): the restart would
            // only fail again.
            ExecutionState::Failed if unrecoverable && self.status() == JobStatus::Running => {
                let reason = error.unwrap_or_else(|| "task failed".to_owned());
                if root_cause {
                    self.record_exception(&task, reason.clone(), true, now_ms);
                }
                let first = self.describe_failure(&task, &reason);
                self.give_up(
                    first,
                    crate::job::restart::NOT_RESTARTED.into(),
                    cx,
                    &mut actions,
                );
            }
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
    pub(super) fn consumers_unfinished(&self, region: RegionId) -> bool {
        self.regions
            .consumers(region)
            .iter()
            .any(|c| !self.progress.is_finished(*c))
    }

    /// The finished task whose current attempt produced `partition`, if any.
    pub(super) fn finished_producer(&self, partition: ResultPartitionId) -> Option<TaskRef> {
        let producer = *self.attempts.get(&partition.producer)?;
        (self.task(&producer).state.state() == ExecutionState::Finished).then_some(producer)
    }

    pub(super) fn task_finished(
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
        self.log_region_finished(region);
        let unread = self.release.finished(&self.regions, region);
        if self.progress.finished_count() == self.regions.regions.len() {
            self.set_status(JobStatus::Finished, cx.now_ms);
            self.end(actions);
            return;
        }
        self.release_results(&unread, actions);
        self.schedule_ready_regions(cx);
    }

    /// A task that finished without reading its inputs to their end (`ended_early`): the
    /// subpartitions it leaves unread in the partitions of its pipelined producers that still
    /// run, one action per TaskManager. The task released them itself through its data
    /// connections, but that release is lost if its TaskManager dies first, and the producers
    /// would then wait for room for ever (the task is finished: no failover comes). O(producers
    /// of its inputs), and only for tasks that ended early.
    pub fn release_unread_inputs(&self, attempt: ExecutionAttemptId) -> Vec<JobAction> {
        let Some(task) = self.attempts.get(&attempt).copied() else {
            return Vec::new();
        };
        if self.task(&task).state.state() != ExecutionState::Finished {
            return Vec::new();
        }
        let mut by_task_manager: BTreeMap<&ResourceId, Vec<(ResultPartitionId, u32)>> =
            BTreeMap::new();
        for (index, edge) in self.graph.edges.iter().enumerate() {
            if edge.target != task.vertex || edge.exchange != ExchangeMode::Pipelined {
                continue;
            }
            let (producers, subpartition) = match edge.pattern {
                DistributionPattern::Forward => (task.subtask..task.subtask + 1, 0),
                DistributionPattern::AllToAll => {
                    (0..self.tasks[edge.source].len() as u32, task.subtask)
                }
            };
            for subtask in producers {
                let producer = TaskRef {
                    job: task.job,
                    vertex: edge.source,
                    subtask,
                };
                let ev = self.task(&producer);
                if ev.state.state().is_terminal() {
                    continue;
                }
                let Some(placement) = ev.placement.as_ref() else {
                    continue;
                };
                by_task_manager
                    .entry(&placement.resource_id)
                    .or_default()
                    .push((
                        ResultPartitionId {
                            producer: ev.attempt,
                            edge: index as u32,
                        },
                        subpartition,
                    ));
            }
        }
        (by_task_manager.into_iter())
            .map(|(resource_id, subpartitions)| JobAction::ReleaseUnread {
                resource_id: resource_id.clone(),
                subpartitions,
            })
            .collect()
    }

    /// Releases the results of `regions`' current attempts: one action per TaskManager.
    pub(super) fn release_results(&self, regions: &[RegionId], actions: &mut Vec<JobAction>) {
        let mut by_task_manager: BTreeMap<&ResourceId, Vec<ResultPartitionId>> = BTreeMap::new();
        for &region in regions {
            for task in self.region_members[region.0].iter() {
                let ev = self.task(task);
                // Results on a lost TaskManager went with it.
                let Some(placement) = (ev.placement.as_ref())
                    .filter(|p| self.used_task_managers.contains(&p.resource_id))
                else {
                    continue;
                };
                let outputs = (self.graph.edges.iter().enumerate())
                    .filter(|(_, edge)| edge.source == task.vertex)
                    .map(|(edge, _)| ResultPartitionId {
                        producer: ev.attempt,
                        edge: edge as u32,
                    });
                by_task_manager
                    .entry(&placement.resource_id)
                    .or_default()
                    .extend(outputs);
            }
        }
        actions.extend(
            (by_task_manager.into_iter())
                .filter(|(_, partitions)| !partitions.is_empty())
                .map(|(resource_id, partitions)| JobAction::ReleaseResults {
                    resource_id: resource_id.clone(),
                    partitions,
                }),
        );
    }

    pub(super) fn end(&mut self, actions: &mut Vec<JobAction>) {
        actions.push(JobAction::ReleasePartitions {
            resource_ids: std::mem::take(&mut self.used_task_managers),
        });
        actions.push(JobAction::Terminated(self.status()));
    }

    /// Handles failures: restart the affected regions, or fail the job.
    pub(super) fn failover(
        &mut self,
        failed: Vec<(TaskRef, String)>,
        cx: &mut JobContext<'_>,
        actions: &mut Vec<JobAction>,
    ) {
        for (task, reason) in &failed {
            self.record_exception(task, reason.clone(), true, cx.now_ms);
        }
        let first_reason = failed.first().map(|(t, r)| self.describe_failure(t, r));
        match self.backoff.on_failure(&mut self.rng) {
            RestartDecision::GiveUp { reason } => {
                self.give_up(
                    first_reason.unwrap_or_else(|| "failure".into()),
                    reason,
                    cx,
                    actions,
                );
            }
            RestartDecision::Restart { delay } => {
                let mut regions = BTreeSet::new();
                for (task, _) in &failed {
                    regions.extend(self.regions.regions_to_restart(self.region_of(task)));
                }
                self.add_released_producers(&mut regions);
                log::info!(
                    "job {}: restarting {} regions in {delay:?} after {}",
                    self.job_id,
                    regions.len(),
                    first_reason.unwrap_or_default()
                );
                self.restarts += 1;
                self.log_regions_reset(&regions);
                for region in &regions {
                    self.progress.reset(&self.regions, *region);
                    self.release.reset(&self.regions, *region);
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

    /// `task`'s failure as the job's failure cause names it: "vertex (i/n): reason".
    fn describe_failure(&self, task: &TaskRef, reason: &str) -> String {
        let vertex = &self.graph.vertices[task.vertex];
        format!(
            "{} ({}/{}): {reason}",
            vertex.name,
            task.subtask + 1,
            vertex.parallelism
        )
    }

    /// Fails the job: `first` caused it, `why` it is not restarted.
    fn give_up(
        &mut self,
        first: String,
        why: String,
        cx: &mut JobContext<'_>,
        actions: &mut Vec<JobAction>,
    ) {
        self.failure = Some(format!("{first} ({why})"));
        self.set_status(JobStatus::Failing, cx.now_ms);
        self.cancel_all(cx, actions);
    }

    /// Adds to `restart` the finished regions whose released results a region in it reads, and
    /// everything downstream of them (the upstream half of Flink's failover strategy, for
    /// released results; results lost with a TaskManager are found as it is lost). Each consumed
    /// group's producers and consumers are walked once, so the closure costs O(regions + group
    /// sizes): an all-to-all edge of P producers and P consumers is P + P, not P × P.
    fn add_released_producers(&self, restart: &mut BTreeSet<RegionId>) {
        let (mut inputs_seen, mut outputs_seen) = (BTreeSet::new(), BTreeSet::new());
        let mut pending: Vec<RegionId> = restart.iter().copied().collect();
        while let Some(region) = pending.pop() {
            let region = &self.regions.regions[region.0];
            for &group in &region.input_groups {
                if inputs_seen.insert(group) {
                    for &producer in &self.regions.groups[group].producers {
                        if self.release.needs_rerun(producer) && restart.insert(producer) {
                            pending.push(producer);
                        }
                    }
                }
            }
            for &group in &region.output_groups {
                if outputs_seen.insert(group) {
                    for &consumer in &self.regions.groups[group].consumers {
                        if restart.insert(consumer) {
                            pending.push(consumer);
                        }
                    }
                }
            }
        }
    }

    /// Cancels a task in whatever state it is.
    pub(super) fn stop_task(
        &mut self,
        task: TaskRef,
        cx: &mut JobContext<'_>,
        actions: &mut Vec<JobAction>,
    ) {
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

    pub(super) fn cancel_all(&mut self, cx: &mut JobContext<'_>, actions: &mut Vec<JobAction>) {
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
    pub(super) fn after_stop(&mut self, cx: &mut JobContext<'_>, actions: &mut Vec<JobAction>) {
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
                self.restart_regions(members, cx, actions);
            }
            _ => {}
        }
    }

    pub(super) fn restart_regions(
        &mut self,
        members: Vec<TaskRef>,
        cx: &mut JobContext<'_>,
        actions: &mut Vec<JobAction>,
    ) {
        // The old attempts' results are superseded: released now, not when the job ends.
        let superseded: Vec<RegionId> = (self.restarting.iter().copied())
            .filter(|&region| self.release.supersede(region))
            .collect();
        self.release_results(&superseded, actions);
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
            ev.result = None;
            ev.taken = false;
            ev.restored = false;
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

    /// The current attempts of its tasks placed on `resource_id`, whatever their state: an
    /// attempt a TaskManager runs that no job lists here is one the JobManager has moved past
    /// (see [`JobManager::cancel_unknown_attempts`](crate::actors::job_manager::JobManager)).
    pub fn attempts_placed_on<'a>(
        &'a self,
        resource_id: &ResourceId,
    ) -> impl Iterator<Item = ExecutionAttemptId> + 'a {
        (self.placed_on.get(resource_id).into_iter().flatten()).map(|task| self.task(task).attempt)
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
        let again: Vec<ExecutionAttemptId> =
            still_cancelling.intersection(&before).copied().collect();
        // One line for all of them: a wide job's cancelled tasks are thousands per TaskManager.
        match again.as_slice() {
            [] => {}
            [attempt] => log::warn!(
                "job {}: {attempt} still runs on {resource_id} after its cancellation; \
                 cancelling it again",
                self.job_id
            ),
            [first, ..] => log::warn!(
                "job {}: {} attempts ({first}, ...) still run on {resource_id} after their \
                 cancellation; cancelling them again",
                self.job_id,
                again.len()
            ),
        }
        for attempt in again {
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
}

#[cfg(test)]
mod tests;
