//! The TaskManager's connection to the JobManager leader (as `resource_manager/connection.rs` is
//! the resource manager's): registration with retries (the [`Registration`] state machine),
//! heartbeats with their task reports, leader changes, and the JobManager disconnecting it.
//! Losing the connection drops the TaskManager's work (Flink's `disconnectJobManager`): its tasks
//! are cancelled, each keeps its slot until it has ended, and the TaskManager registers again
//! only then — a new leader finds a TaskManager whose slots are all free, with nothing of the old
//! leader's still running beside what it places.

use super::*;

impl TaskManager {
    pub(super) fn on_event(&mut self, event: RegistrationEvent, ctx: &mut Context<Self>) {
        let lost = matches!(
            event,
            RegistrationEvent::AttemptFailed { .. } | RegistrationEvent::ConnectionLost
        );
        let was_registered = self.registration.instance_id().is_some();
        let action = self.registration.handle(event);
        if lost && !matches!(action, RegistrationAction::Ignore { .. }) {
            // The gateway may point at a JobManager that is gone: resolve the leader's address
            // afresh for the next attempt (a restarted JobManager at the same address). Only
            // for a failure the state machine took: an earlier attempt's late failure (its ask
            // erring after a later attempt registered) must not unhook a registered
            // TaskManager, which then sent no heartbeat and dropped every task update until
            // its own heartbeat timeout (issue 12, seeds 21150 and 24138).
            self.job_manager = None;
        }
        if was_registered && self.registration.instance_id().is_none() {
            self.drop_all_work(ctx);
        }
        if self.registration.session().is_some() || !self.registering_without_session() {
            // Settled one way or the other: the deferred submissions are fenced now.
            for waiter in self.awaiting_registration.drain(..) {
                // A submission whose asker gave up has dropped its end: nothing to tell.
                let _ = waiter.send(());
            }
        }
        match action {
            RegistrationAction::Send { attempt, timeout } => {
                let orphans = self.running.values().filter(|t| t.orphaned).count();
                if orphans == 0 {
                    self.send_attempt(attempt, timeout, ctx);
                } else {
                    log::info!(
                        "task manager {}: registering once its {orphans} cancelled task(s) of the earlier JobManager connection have ended",
                        self.settings.resource_id
                    );
                    self.deferred_attempt = Some((attempt, timeout));
                }
            }
            RegistrationAction::RetryAfter { attempt, delay } => {
                log::info!(
                    "task manager {}: next registration attempt in {delay:?}",
                    self.settings.resource_id
                );
                ctx.run_later(delay, move |act, ctx| {
                    act.on_event(RegistrationEvent::RetryDue { attempt }, ctx);
                });
            }
            RegistrationAction::Registered { instance_id, .. } => {
                log::info!(
                    "task manager {}: registered as {instance_id}",
                    self.settings.resource_id
                );
                self.last_acknowledged = Instant::now();
                self.env.events.emit(ClusterEvent::TaskManagerConnected {
                    resource_id: self.settings.resource_id.clone(),
                    instance_id,
                });
            }
            RegistrationAction::Ignore { why } => {
                log::debug!("task manager {}: {why}", self.settings.resource_id);
            }
            RegistrationAction::Refused { reason } => {
                log::error!(
                    "task manager {}: the JobManager refused its registration: {reason}; stopping",
                    self.settings.resource_id
                );
                if let Some(fatal) = self.fatal_error.take() {
                    // The process waits on the other end; in-process nobody may.
                    let _ =
                        fatal.send(format!("the JobManager refused its registration: {reason}"));
                }
                ctx.stop();
            }
        }
    }

    pub(super) fn send_attempt(
        &mut self,
        attempt: u64,
        timeout: std::time::Duration,
        ctx: &mut Context<Self>,
    ) {
        // The timer is separate from the request so a late answer still arrives, tagged with its
        // attempt, and is ignored by the state machine instead of vanishing.
        ctx.run_later(timeout, move |act, ctx| {
            act.on_event(RegistrationEvent::AttemptTimedOut { attempt }, ctx);
        });
        if self.job_manager.is_none() {
            let leader = self.registration.leader().map(|l| &l.address);
            self.job_manager = leader.and_then(|a| self.env.resolver.job_manager(a));
        }
        let Some(gateway) = self.job_manager.as_ref() else {
            log::warn!(
                "task manager {}: cannot reach the JobManager leader",
                self.settings.resource_id
            );
            ctx.notify(Internal(RegistrationEvent::AttemptFailed { attempt }));
            return;
        };
        log::debug!(
            "task manager {}: registration attempt {attempt} (timeout {timeout:?})",
            self.settings.resource_id
        );
        let request = RegisterTaskManager {
            cluster_id: self.settings.spec.cluster_id.clone(),
            resource_id: self.settings.resource_id.clone(),
            location: TaskManagerLocation {
                resource_id: self.settings.resource_id.clone(),
                address: self.address.clone(),
                hostname: self.settings.spec.hostname.clone(),
            },
            hardware: self.settings.spec.hardware,
            number_of_slots: self.slots.total(),
            session: self.session,
            fingerprint: self.settings.spec.registry.fingerprint(),
            partitions: self
                .job_partitions
                .iter()
                .map(|(job, held)| (*job, held.iter().copied().collect()))
                .collect(),
        };
        gateway
            .register_task_manager
            .send(request)
            .into_actor(self)
            .map(move |result, act, ctx| {
                let event = match result {
                    Ok(response) => RegistrationEvent::Response { attempt, response },
                    Err(_) => RegistrationEvent::AttemptFailed { attempt },
                };
                act.on_event(event, ctx);
            })
            .spawn(ctx);
    }

    /// Samples every running task's exchange metrics (the backpressure rate is per interval).
    pub(super) fn sample_task_metrics(&mut self) {
        let now = self.env.clock.now_millis();
        for task in self.running.values_mut() {
            task.io = task.metrics.sample(now, &mut task.last_sample);
        }
    }

    pub(super) fn heartbeat(&mut self, ctx: &mut Context<Self>) {
        self.sample_task_metrics();
        self.partition_server.prune(&self.partitions);
        let Some(instance_id) = self.registration.instance_id() else {
            return;
        };
        let silence = Instant::now().saturating_duration_since(self.last_acknowledged);
        if silence > self.settings.spec.heartbeat.timeout {
            log::warn!(
                "task manager {}: no heartbeat acknowledged by the JobManager for {silence:?}; registering again",
                self.settings.resource_id
            );
            self.on_event(RegistrationEvent::ConnectionLost, ctx);
            return;
        }
        let Some(gateway) = self.job_manager.as_ref() else {
            return;
        };
        gateway
            .heartbeat
            .send(Heartbeat {
                resource_id: self.settings.resource_id.clone(),
                instance_id,
                report: HeartbeatReport {
                    slots_total: self.slots.total(),
                    slots_free: self.slots.free(),
                    running: self
                        .running
                        .keys()
                        .chain(&self.reporting)
                        .copied()
                        .collect(),
                    io: self.running.iter().map(|(a, t)| (*a, t.io)).collect(),
                    partitions_of: self.job_partitions.keys().copied().collect(),
                    spill: self.partitions.spill_usage(),
                },
            })
            .timeout(self.settings.spec.heartbeat.timeout)
            .into_actor(self)
            .map(move |result, act, ctx| act.heartbeat_answered(instance_id, result, ctx))
            .spawn(ctx);
    }

    pub(super) fn heartbeat_answered(
        &mut self,
        instance_id: InstanceId,
        result: Result<HeartbeatResponse, MailboxError>,
        ctx: &mut Context<Self>,
    ) {
        if self.registration.instance_id() != Some(instance_id) {
            return; // an answer for an earlier registration
        }
        match result {
            Ok(HeartbeatResponse::Acknowledged) => self.last_acknowledged = Instant::now(),
            Ok(HeartbeatResponse::UnknownTaskManager) => {
                log::info!(
                    "task manager {}: the JobManager no longer knows this registration; registering again",
                    self.settings.resource_id
                );
                self.on_event(RegistrationEvent::ConnectionLost, ctx);
            }
            // Silence counts against the heartbeat timeout.
            Err(error) => log::debug!(
                "task manager {}: heartbeat not answered: {error}",
                self.settings.resource_id
            ),
        }
    }

    /// A fatal error (Flink's `onFatalError`): this TaskManager cannot go on. It tells the
    /// JobManager it leaves (so its tasks fail over now) and stops. A `flint taskmanager`
    /// process then exits with an error and its resource manager replaces it; in-process (the
    /// embedded cluster, the tests, the simulation) the actor is stopped and the stuck task's
    /// thread is abandoned: nothing waits for it, it holds no slot, and it ends only when its
    /// code returns (Rust cannot kill a thread).
    pub(super) fn fail_fatally(&mut self, reason: String, ctx: &mut Context<Self>) {
        log::error!(
            "task manager {}: fatal: {reason}; stopping",
            self.settings.resource_id
        );
        ctx.notify(Shutdown);
    }

    /// Whether a message only the leader may send comes from the leader this TaskManager is
    /// registered with (a stale one is logged).
    pub(super) fn fenced(&self, session: LeaderSessionId, what: &str) -> bool {
        let name = format!("task manager {}", self.settings.resource_id);
        is_current_leader(self.registration.session(), session, &name, what)
    }

    /// The JobManager connection ended (or a new leader took over): it has failed these tasks
    /// over already, so cancel them, free every slot no task holds and drop every partition
    /// but the finished blocking ones: those are offered to the next leader with the
    /// registration (batch job recovery, FLIP-383), which takes back what its jobs' event logs
    /// name and releases the rest. A cancelled task keeps its slot until it has ended (its end reported to
    /// nobody), under the cancellation watchdog, and the next registration waits until every
    /// such task has ended (`register_once_drained`): a new leader is offered only slots that
    /// are free, and never places work beside a task of the old one that still runs. A task
    /// that ignores its cancellation fails this TaskManager at `task.cancellation.timeout`.
    pub(super) fn drop_all_work(&mut self, ctx: &mut Context<Self>) {
        if self.running.is_empty() && self.allocations.is_empty() && self.job_partitions.is_empty()
        {
            return;
        }
        log::info!(
            "task manager {}: disconnected from the JobManager; cancelling {} tasks, freeing every slot as its tasks end",
            self.settings.resource_id,
            self.running.len()
        );
        let attempts: Vec<ExecutionAttemptId> = self.running.keys().copied().collect();
        for attempt in attempts {
            self.cancel_task(attempt, ctx);
            if let Some(task) = self.running.get_mut(&attempt) {
                task.orphaned = true;
            }
        }
        // The JobManager failed them over already.
        self.reporting.clear();
        self.outgoing.clear();
        self.unreported_running.clear();
        // Only the slots of the tasks still running stay taken.
        let held: BTreeSet<AllocationId> = self.running.values().map(|t| t.allocation_id).collect();
        let idle: Vec<AllocationId> = self
            .allocations
            .keys()
            .filter(|a| !held.contains(a))
            .copied()
            .collect();
        for allocation in idle {
            self.allocations.remove(&allocation);
        }
        let mut slots = SlotTable::new(self.settings.spec.slots);
        for allocation in &held {
            let _ = slots.allocate(*allocation);
        }
        self.slots = slots;
        let mut kept = 0;
        for (_, held) in self.job_partitions.iter_mut() {
            held.retain(|partition| {
                let keep = self.partitions.is_finished_and_retained(*partition);
                kept += usize::from(keep);
                keep
            });
        }
        self.job_partitions.retain(|_, held| !held.is_empty());
        let keep: BTreeSet<ResultPartitionId> =
            self.job_partitions.values().flatten().copied().collect();
        for partition in self.partitions.partition_ids() {
            if !keep.contains(&partition) {
                self.partitions.release(partition);
            }
        }
        if kept > 0 {
            log::info!(
                "task manager {}: keeping {kept} finished result partitions for the next leader",
                self.settings.resource_id
            );
        }
        // A new incarnation: the JobManager must not take this TaskManager back as the one that
        // still holds those tasks and partitions (Flink's JobMasterPartitionTracker learns the
        // same from a new TaskExecutor registration).
        self.session = TaskManagerSessionId::generate(&mut self.session_rng);
    }

    /// Sends the registration attempt held back by [`drop_all_work`](Self::drop_all_work) once
    /// no cancelled task of the earlier connection runs any more.
    pub(super) fn register_once_drained(&mut self, ctx: &mut Context<Self>) {
        if self.running.values().any(|t| t.orphaned) {
            return;
        }
        if let Some((attempt, timeout)) = self.deferred_attempt.take() {
            log::info!(
                "task manager {}: every cancelled task has ended; registering",
                self.settings.resource_id
            );
            self.send_attempt(attempt, timeout, ctx);
        }
    }

    /// A registration attempt is in flight and no leader session is known (leader retrieval
    /// named only an address).
    pub(super) fn registering_without_session(&self) -> bool {
        self.registration.session().is_none()
            && matches!(
                self.registration.phase(),
                RegistrationPhase::Registering { .. }
            )
    }
}

/// A registration event from a timer or an answer, handled in the actor's turn.
#[derive(Message)]
#[rtype(result = "()")]
pub(super) struct Internal(pub(super) RegistrationEvent);

impl Handler<Internal> for TaskManager {
    type Result = ();

    fn handle(&mut self, msg: Internal, ctx: &mut Context<Self>) {
        self.on_event(msg.0, ctx);
    }
}

impl Handler<NewLeaderAvailable> for TaskManager {
    type Result = ();

    fn handle(&mut self, msg: NewLeaderAvailable, ctx: &mut Context<Self>) {
        log::debug!("task manager <- {msg:?}");
        log::info!(
            "task manager {}: JobManager leader is {} (session {})",
            self.settings.resource_id,
            msg.address,
            msg.leader_session_id
        );
        self.job_manager = self.env.resolver.job_manager(&msg.address);
        let leader = Leader {
            address: msg.address,
            retrieved_session: Some(msg.leader_session_id),
        };
        self.on_event(RegistrationEvent::LeaderFound(leader), ctx);
    }
}

impl Handler<Disconnect> for TaskManager {
    type Result = ();

    fn handle(&mut self, msg: Disconnect, ctx: &mut Context<Self>) {
        log::debug!("task manager <- {msg:?}");
        if !self.fenced(msg.leader_session_id, "Disconnect") {
            return;
        }
        log::info!(
            "task manager {}: the JobManager disconnected it ({}); registering again",
            self.settings.resource_id,
            msg.reason
        );
        self.on_event(RegistrationEvent::ConnectionLost, ctx);
    }
}
