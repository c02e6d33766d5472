//! The job master on a virtual cluster: a [`Harness`] owns the shared scheduler and one job
//! master, feeds it the events the JobManager would (task states, served slot requests, restart
//! timers, lost TaskManagers) and records every action, so each test asserts exact deployments,
//! cancellations and statuses without actors or threads.

pub(super) use crate::job::graph::{ExchangeMode, RestartStrategyConfig};
use crate::messages::job_manager::Locality;
use crate::messages::job_manager::SubtaskDetails;

use super::*;

pub(super) const JOB: JobId = JobId::from_u128(1);
pub(super) const DELAY: Duration = Duration::from_secs(1);
pub(super) const REASON_NONE: &str = "restart strategy none: a failed task fails the job";

pub(super) fn tm(n: usize) -> ResourceId {
    ResourceId::new(format!("tm-{n}"))
}

pub(super) fn address(resource_id: &ResourceId) -> ActorAddress {
    ActorAddress::new("local", format!("taskmanager/{resource_id}"))
}

pub(super) fn fixed_delay(attempts: u32) -> RestartStrategyConfig {
    RestartStrategyConfig::FixedDelay {
        attempts,
        delay: DELAY,
    }
}

/// `source` (P = `producers`) → `sink` (P = `consumers`), one edge.
pub(super) fn pipeline(
    producers: u32,
    consumers: u32,
    pattern: DistributionPattern,
    exchange: ExchangeMode,
    restart: RestartStrategyConfig,
) -> JobGraph {
    let mut b = JobGraph::builder("pipeline");
    let source = b.vertex("source", "numbers", producers).index();
    let sink = b
        .vertex("sink", "collect", consumers)
        .config("path", "out.txt")
        .index();
    b.edge(source, sink, pattern, exchange);
    b.restart_strategy(restart);
    b.build(|_| true).expect("a valid graph")
}

/// `source` → `sink`, forward, each vertex in its own slot sharing group (so a sink never shares
/// its source's slot), restarting once.
pub(super) fn split(parallelism: u32, exchange: ExchangeMode) -> JobGraph {
    let mut b = JobGraph::builder("split");
    let source = b
        .vertex("source", "numbers", parallelism)
        .slot_sharing_group("produce")
        .index();
    let sink = b
        .vertex("sink", "collect", parallelism)
        .slot_sharing_group("consume")
        .index();
    b.edge(source, sink, DistributionPattern::Forward, exchange);
    b.restart_strategy(fixed_delay(1));
    b.build(|_| true).expect("a valid graph")
}

/// Forward, pipelined: one region per (source i, sink i) pair.
pub(super) fn pairs(parallelism: u32, restart: RestartStrategyConfig) -> JobGraph {
    pipeline(
        parallelism,
        parallelism,
        DistributionPattern::Forward,
        ExchangeMode::Pipelined,
        restart,
    )
}

pub(super) struct Harness {
    pub(super) scheduler: Scheduler,
    pub(super) master: ExecutionGraph,
    /// TaskManagers that left: their address is unknown.
    pub(super) lost: BTreeSet<ResourceId>,
    pub(super) now: Instant,
    pub(super) now_ms: u64,
    /// Every action of every call, in order.
    pub(super) log: Vec<JobAction>,
    /// The latest deployment of each (vertex name, subtask).
    pub(super) deployed: BTreeMap<(String, u32), TaskDeploymentDescriptor>,
    /// Every shared producer list sent, and the TaskManagers it was sent to.
    pub(super) lists: BTreeMap<ProducerListId, (Arc<Vec<ProducerLocation>>, BTreeSet<ResourceId>)>,
}

impl Harness {
    /// `task_managers[n]` is the slot count of `tm-n`.
    pub(super) fn new(graph: JobGraph, task_managers: &[u32]) -> Self {
        Self::seeded(graph, task_managers, 1, 2)
    }

    /// `scheduler_seed` picks allocation ids, `master_seed` attempt ids.
    pub(super) fn seeded(
        graph: JobGraph,
        task_managers: &[u32],
        scheduler_seed: u64,
        master_seed: u64,
    ) -> Self {
        let mut scheduler = Scheduler::new(NodeRng::seed_from_u64(scheduler_seed));
        for (n, slots) in task_managers.iter().enumerate() {
            scheduler.add_task_manager(tm(n), *slots);
        }
        let master = ExecutionGraph::new(JOB, graph, NodeRng::seed_from_u64(master_seed), 0)
            .expect("a validated graph has regions");
        Self {
            scheduler,
            master,
            lost: BTreeSet::new(),
            now: Instant::now(),
            now_ms: 0,
            log: Vec::new(),
            deployed: BTreeMap::new(),
            lists: BTreeMap::new(),
        }
    }

    /// Runs one job master call, then serves the slot queue as the JobManager does after every
    /// call; returns every action of both.
    pub(super) fn call(
        &mut self,
        f: impl FnOnce(&mut ExecutionGraph, &mut JobContext<'_>) -> Vec<JobAction>,
    ) -> Vec<JobAction> {
        let mut actions = self.call_once(f);
        actions.extend(self.serve_bulks());
        actions
    }

    /// Runs one job master call with a fresh context and records what it asks for.
    pub(super) fn call_once(
        &mut self,
        f: impl FnOnce(&mut ExecutionGraph, &mut JobContext<'_>) -> Vec<JobAction>,
    ) -> Vec<JobAction> {
        self.now_ms += 1;
        let lost = &self.lost;
        let address_of = |id: &ResourceId| (!lost.contains(id)).then(|| address(id));
        let mut cx = JobContext {
            scheduler: &mut self.scheduler,
            now: self.now,
            now_ms: self.now_ms,
            address_of: &address_of,
        };
        let actions = f(&mut self.master, &mut cx);
        for action in &actions {
            if let JobAction::Deploy {
                descriptor,
                resource_id,
            } = action
            {
                // A task names a shared list only where an earlier task carried it.
                for gate in &descriptor.inputs {
                    match &gate.producers {
                        Producers::Listed {
                            id: Some(id),
                            locations,
                        } => {
                            let (_, sent_to) = self
                                .lists
                                .entry(*id)
                                .or_insert_with(|| (locations.clone(), BTreeSet::new()));
                            sent_to.insert(resource_id.clone());
                        }
                        Producers::Listed { id: None, .. } => {}
                        Producers::Known(id) => assert!(
                            self.lists
                                .get(id)
                                .is_some_and(|(_, sent_to)| sent_to.contains(resource_id)),
                            "{} {} names list {id}, never sent to {resource_id}",
                            descriptor.vertex_name,
                            descriptor.subtask
                        ),
                    }
                }
                let key = (descriptor.vertex_name.to_string(), descriptor.subtask);
                self.deployed.insert(key, (**descriptor).clone());
            }
        }
        self.log.extend(actions.iter().cloned());
        actions
    }

    pub(super) fn start(&mut self) -> Vec<JobAction> {
        self.call(|m, cx| m.start(cx))
    }

    /// The latest deployment of a subtask.
    pub(super) fn descriptor(&self, vertex: &str, subtask: u32) -> &TaskDeploymentDescriptor {
        self.deployed
            .get(&(vertex.to_owned(), subtask))
            .unwrap_or_else(|| panic!("{vertex} {subtask} was never deployed"))
    }

    /// The producers of the first input gate of the latest deployment of `vertex` `subtask`,
    /// as its TaskManager has them (a named list is the one sent there before).
    pub(super) fn producers(&self, vertex: &str, subtask: u32) -> Arc<Vec<ProducerLocation>> {
        match &self.descriptor(vertex, subtask).inputs[0].producers {
            Producers::Listed { locations, .. } => locations.clone(),
            Producers::Known(id) => self.lists[id].0.clone(),
        }
    }

    pub(super) fn attempt(&self, vertex: &str, subtask: u32) -> ExecutionAttemptId {
        self.descriptor(vertex, subtask).attempt
    }

    pub(super) fn update(
        &mut self,
        attempt: ExecutionAttemptId,
        state: ExecutionState,
        error: Option<&str>,
    ) -> Vec<JobAction> {
        let error = error.map(str::to_owned);
        self.call(|m, cx| m.update(attempt, state, error, cx))
    }

    pub(super) fn report(
        &mut self,
        vertex: &str,
        subtask: u32,
        state: ExecutionState,
    ) -> Vec<JobAction> {
        let attempt = self.attempt(vertex, subtask);
        self.update(attempt, state, None)
    }

    pub(super) fn run(&mut self, vertex: &str, subtask: u32) -> Vec<JobAction> {
        self.report(vertex, subtask, ExecutionState::Running)
    }

    pub(super) fn finish(&mut self, vertex: &str, subtask: u32) -> Vec<JobAction> {
        self.report(vertex, subtask, ExecutionState::Finished)
    }

    pub(super) fn canceled(&mut self, vertex: &str, subtask: u32) -> Vec<JobAction> {
        self.report(vertex, subtask, ExecutionState::Canceled)
    }

    pub(super) fn fail(&mut self, vertex: &str, subtask: u32, error: &str) -> Vec<JobAction> {
        let attempt = self.attempt(vertex, subtask);
        self.update(attempt, ExecutionState::Failed, Some(error))
    }

    /// Reports each subtask RUNNING, which asks for nothing.
    pub(super) fn run_all(&mut self, tasks: &[(&str, u32)]) {
        for (vertex, subtask) in tasks {
            assert_eq!(self.run(vertex, *subtask), []);
        }
    }

    /// What the JobManager does when slots free or a TaskManager registers: serve the queue and
    /// hand each placement to the job master.
    pub(super) fn serve_queue(&mut self) -> Vec<JobAction> {
        self.serve_bulks()
    }

    /// Serves the queue's head while it fits, handing each bulk to the job master.
    pub(super) fn serve_bulks(&mut self) -> Vec<JobAction> {
        let mut actions = Vec::new();
        loop {
            let (placed, _) = self.scheduler.serve(usize::MAX);
            if placed.is_empty() {
                return actions;
            }
            for (bulk, assignments) in placed {
                actions.extend(self.call_once(|m, cx| m.bulk_assigned(bulk, assignments, cx)));
            }
        }
    }

    pub(super) fn restart_due(&mut self, generation: u64) -> Vec<JobAction> {
        self.call(|m, cx| m.restart_due(generation, cx))
    }

    pub(super) fn cancel(&mut self) -> Vec<JobAction> {
        self.call(|m, cx| m.cancel(cx))
    }

    /// What the JobManager does when a TaskManager's heartbeat times out.
    pub(super) fn lose(&mut self, n: usize) -> Vec<JobAction> {
        let resource_id = tm(n);
        self.scheduler.remove_task_manager(&resource_id);
        self.lost.insert(resource_id.clone());
        self.call(|m, cx| m.task_manager_lost(&resource_id, cx))
    }

    pub(super) fn status(&self) -> JobStatus {
        self.master.status()
    }

    pub(super) fn subtask(&self, vertex: &str, subtask: u32) -> SubtaskDetails {
        let details = self.master.details();
        let vertex = details
            .vertices
            .iter()
            .find(|v| v.name == vertex)
            .unwrap_or_else(|| panic!("no vertex {vertex}"));
        vertex.subtasks[subtask as usize].clone()
    }

    pub(super) fn state(&self, vertex: &str, subtask: u32) -> ExecutionState {
        self.subtask(vertex, subtask).state
    }

    /// Every subtask's (attempt number, state), in graph order.
    pub(super) fn states(&self) -> Vec<(String, u32, u32, ExecutionState)> {
        self.master
            .details()
            .vertices
            .iter()
            .flat_map(|v| {
                v.subtasks
                    .iter()
                    .map(|s| (v.name.clone(), s.subtask, s.attempt_number, s.state))
            })
            .collect()
    }
}

/// The (TaskManager, vertex, subtask) of each deployment, in order.
pub(super) fn deployments(actions: &[JobAction]) -> Vec<(ResourceId, String, u32)> {
    actions
        .iter()
        .filter_map(|a| match a {
            JobAction::Deploy {
                resource_id,
                descriptor,
            } => Some((
                resource_id.clone(),
                descriptor.vertex_name.to_string(),
                descriptor.subtask,
            )),
            _ => None,
        })
        .collect()
}

pub(super) fn deployed(vertex: &str, subtask: u32, n: usize) -> (ResourceId, String, u32) {
    (tm(n), vertex.to_owned(), subtask)
}

pub(super) fn cancel(n: usize, attempt: ExecutionAttemptId) -> JobAction {
    JobAction::Cancel {
        resource_id: tm(n),
        attempt,
    }
}

/// Cancel actions as a set: their order follows attempt ids, which is no contract.
pub(super) fn cancels(actions: &[JobAction]) -> BTreeSet<(ResourceId, ExecutionAttemptId)> {
    actions
        .iter()
        .filter_map(|a| match a {
            JobAction::Cancel {
                resource_id,
                attempt,
            } => Some((resource_id.clone(), *attempt)),
            _ => None,
        })
        .collect()
}

pub(super) fn released(task_managers: &[usize], status: JobStatus) -> Vec<JobAction> {
    vec![
        JobAction::ReleasePartitions {
            resource_ids: task_managers.iter().map(|n| tm(*n)).collect(),
        },
        JobAction::Terminated(status),
    ]
}

/// The release of results nobody reads any more: `(producer, edge)` partitions on `tm-n`.
pub(super) fn results_released(n: usize, partitions: &[(ExecutionAttemptId, u32)]) -> JobAction {
    JobAction::ReleaseResults {
        resource_id: tm(n),
        partitions: (partitions.iter())
            .map(|&(producer, edge)| ResultPartitionId { producer, edge })
            .collect(),
    }
}

pub(super) fn restart_after(generation: u64) -> JobAction {
    JobAction::RestartAfter {
        delay: DELAY,
        generation,
    }
}

pub(super) fn location(producer: ExecutionAttemptId, edge: u32, n: usize) -> ProducerLocation {
    ProducerLocation {
        partition: ResultPartitionId { producer, edge },
        task_manager: address(&tm(n)),
    }
}

#[test]
fn forward_pipelined_pairs_deploy_at_once_local_to_their_sources_and_finish() {
    let mut h = Harness::new(pairs(2, fixed_delay(1)), &[2, 2]);
    let actions = h.start();
    assert_eq!(h.status(), JobStatus::Running);
    assert_eq!(
        deployments(&actions),
        [
            deployed("source", 0, 0),
            deployed("sink", 0, 0),
            deployed("source", 1, 1),
            deployed("sink", 1, 1),
        ]
    );
    assert_eq!(h.scheduler.queued(), 0);
    for i in 0..2u32 {
        let source = h.descriptor("source", i).clone();
        let sink = h.descriptor("sink", i).clone();
        assert_eq!(
            (source.job_id, source.attempt_number, source.parallelism),
            (JOB, 0, 2)
        );
        assert_eq!((source.subtask, &*source.operator), (i, "numbers"));
        assert_eq!(source.inputs, []);
        assert_eq!(
            source.outputs,
            [ResultPartitionDeploymentDescriptor {
                partition: ResultPartitionId {
                    producer: source.attempt,
                    edge: 0,
                },
                pattern: DistributionPattern::Forward,
                subpartitions: 1,
                retained: false,
            }]
        );
        assert_eq!(
            sink.inputs,
            [InputGateDeploymentDescriptor {
                edge: 0,
                subpartition: 0,
                producers: Producers::own(vec![location(source.attempt, 0, i as usize)]),
            }]
        );
        assert_eq!(sink.outputs, []);
        assert_eq!(sink.config.get("path").map(String::as_str), Some("out.txt"));
        assert_eq!(sink.allocation_id, source.allocation_id, "one shared slot");
        let (source, sink) = (h.subtask("source", i), h.subtask("sink", i));
        assert_eq!(source.locality, Some(Locality::Unconstrained));
        assert_eq!(sink.locality, Some(Locality::Local));
        assert_eq!(sink.resource_id, Some(tm(i as usize)));
        assert_eq!(sink.state, ExecutionState::Deploying);
    }

    h.run_all(&[("source", 0), ("sink", 0), ("source", 1), ("sink", 1)]);
    assert_eq!(h.finish("source", 0), []);
    // A pipeline read its own results: released as it finishes, not when the job ends.
    let source = h.attempt("source", 0);
    assert_eq!(h.finish("sink", 0), [results_released(0, &[(source, 0)])]);
    assert_eq!(h.finish("source", 1), []);
    assert_eq!(h.status(), JobStatus::Running);
    assert_eq!(h.finish("sink", 1), released(&[0, 1], JobStatus::Finished));
    assert_eq!(h.status(), JobStatus::Finished);
    let summary = h.master.summary();
    assert_eq!((summary.tasks_finished, summary.tasks_total), (4, 4));
    assert_eq!(h.scheduler.free_slots(), 4);
}

#[test]
fn all_to_all_consumers_share_one_gate_listing_every_producer() {
    let graph = pipeline(
        2,
        3,
        DistributionPattern::AllToAll,
        ExchangeMode::Pipelined,
        fixed_delay(1),
    );
    let mut h = Harness::new(graph, &[2, 2]);
    let actions = h.start();
    assert_eq!(
        deployments(&actions),
        [
            deployed("source", 0, 0),
            deployed("source", 1, 1),
            deployed("sink", 0, 0),
            deployed("sink", 1, 1),
            deployed("sink", 2, 0),
        ],
        "one region: every task at once, producers first"
    );
    let producers = vec![
        location(h.attempt("source", 0), 0, 0),
        location(h.attempt("source", 1), 0, 1),
    ];
    for i in 0..2 {
        let source = h.descriptor("source", i);
        assert_eq!(source.outputs.len(), 1);
        assert_eq!(source.outputs[0].subpartitions, 3, "one per consumer");
        assert_eq!(source.outputs[0].pattern, DistributionPattern::AllToAll);
    }
    let first = h.producers("sink", 0);
    for j in 0..3u32 {
        let sink = h.descriptor("sink", j);
        assert_eq!(sink.inputs.len(), 1);
        let gate = &sink.inputs[0];
        assert_eq!((gate.edge, gate.subpartition), (0, j));
        assert_eq!(*h.producers("sink", j), producers);
        assert!(
            Arc::ptr_eq(&h.producers("sink", j), &first),
            "sink {j}'s gate"
        );
        assert_eq!(h.subtask("sink", j).locality, Some(Locality::Local));
    }
    // The list travels once per TaskManager: sinks 0 (tm-0) and 1 (tm-1) carry it, sink 2
    // (tm-0 again) only names it.
    let listed = |j| {
        matches!(
            h.descriptor("sink", j).inputs[0].producers,
            Producers::Listed { .. }
        )
    };
    assert_eq!([listed(0), listed(1), listed(2)], [true, true, false]);
    h.run_all(&[("source", 0), ("source", 1)]);
    for j in 0..3 {
        assert_eq!(h.finish("sink", j), []);
    }
    assert_eq!(h.finish("source", 0), []);
    assert_eq!(
        h.finish("source", 1),
        released(&[0, 1], JobStatus::Finished)
    );
}

/// A consumer that finished without reading its inputs to their end gets what its running
/// pipelined producers still write for it released, on their TaskManagers: its own release
/// through its data connection is lost if its TaskManager dies first. Producers that ended, a
/// blocking edge and a consumer that did not finish get nothing.
#[test]
fn an_early_finished_consumer_releases_its_running_producers_subpartitions() {
    let unread = |pattern, exchange| {
        let graph = pipeline(2, 2, pattern, exchange, fixed_delay(1));
        let mut h = Harness::new(graph, &[2, 2]);
        h.start();
        if exchange == ExchangeMode::Blocking {
            h.run_all(&[("source", 0), ("source", 1)]);
            h.finish("source", 0);
            h.finish("source", 1);
        } else {
            h.run_all(&[("source", 0), ("source", 1)]);
            h.finish("source", 0);
        }
        h.run_all(&[("sink", 1)]);
        let sink = h.attempt("sink", 1);
        let running = h.call(|m, _| m.release_unread_inputs(sink));
        assert_eq!(running, [], "a consumer still running releases nothing");
        h.finish("sink", 1);
        let actions = h.call(|m, _| m.release_unread_inputs(sink));
        (h.attempt("source", 1), actions)
    };
    // Source 1 still runs, on tm-1; source 0 finished.
    let released_at_source_1 = |source, subpartition| {
        vec![JobAction::ReleaseUnread {
            resource_id: tm(1),
            subpartitions: vec![(
                ResultPartitionId {
                    producer: source,
                    edge: 0,
                },
                subpartition,
            )],
        }]
    };
    let (source, actions) = unread(DistributionPattern::AllToAll, ExchangeMode::Pipelined);
    assert_eq!(
        actions,
        released_at_source_1(source, 1),
        "its subpartition, 1"
    );
    let (source, actions) = unread(DistributionPattern::Forward, ExchangeMode::Pipelined);
    assert_eq!(
        actions,
        released_at_source_1(source, 0),
        "forward: the only one"
    );
    let (_, actions) = unread(DistributionPattern::AllToAll, ExchangeMode::Blocking);
    assert_eq!(actions, [], "a blocking result is kept for restarts");
}

#[test]
fn a_blocking_consumer_is_deployed_once_every_producer_finished() {
    let graph = pipeline(
        2,
        2,
        DistributionPattern::AllToAll,
        ExchangeMode::Blocking,
        fixed_delay(1),
    );
    let mut h = Harness::new(graph, &[1, 1]);
    assert_eq!(
        deployments(&h.start()),
        [deployed("source", 0, 0), deployed("source", 1, 1)]
    );
    assert_eq!(h.scheduler.queued(), 0, "consumers ask for no slot yet");
    h.run_all(&[("source", 0), ("source", 1)]);
    assert_eq!(h.finish("source", 0), []);
    assert_eq!(h.state("sink", 0), ExecutionState::Created);
    assert_eq!(h.state("sink", 1), ExecutionState::Created);

    let actions = h.finish("source", 1);
    assert_eq!(
        deployments(&actions),
        [deployed("sink", 0, 0), deployed("sink", 1, 1)]
    );
    let producers = vec![
        location(h.attempt("source", 0), 0, 0),
        location(h.attempt("source", 1), 0, 1),
    ];
    for j in 0..2u32 {
        let gate = &h.descriptor("sink", j).inputs[0];
        assert_eq!((gate.edge, gate.subpartition), (0, j));
        assert_eq!(*h.producers("sink", j), producers);
        assert_eq!(h.subtask("sink", j).locality, Some(Locality::Local));
    }
    h.run_all(&[("sink", 0), ("sink", 1)]);
    assert_eq!(h.finish("sink", 0), []);
    assert_eq!(h.finish("sink", 1), released(&[0, 1], JobStatus::Finished));
}

#[test]
fn blocking_all_to_all_consumers_deployed_together_share_one_gate() {
    let graph = pipeline(
        2,
        3,
        DistributionPattern::AllToAll,
        ExchangeMode::Blocking,
        fixed_delay(1),
    );
    let mut h = Harness::new(graph, &[2, 2]);
    h.start();
    h.finish("source", 0);
    let actions = h.finish("source", 1);
    assert_eq!(deployments(&actions).len(), 3, "every consumer at once");
    let first = h.producers("sink", 0);
    for j in 1..3 {
        assert!(
            Arc::ptr_eq(&h.producers("sink", j), &first),
            "sink {j}'s gate"
        );
    }
}

#[test]
fn queued_regions_deploy_once_a_finished_task_frees_a_slot() {
    let mut h = Harness::new(pairs(2, fixed_delay(1)), &[1]);
    assert_eq!(
        deployments(&h.start()),
        [deployed("source", 0, 0), deployed("sink", 0, 0)]
    );
    assert_eq!(h.scheduler.queued(), 2);
    assert_eq!(h.state("source", 1), ExecutionState::Scheduled);
    assert_eq!(h.state("sink", 1), ExecutionState::Scheduled);
    assert_eq!(h.serve_queue(), [], "no slot is free yet");

    h.run_all(&[("source", 0), ("sink", 0)]);
    assert_eq!(h.finish("source", 0), []);
    assert_eq!(
        h.scheduler.free_slots(),
        0,
        "the sink still holds the shared slot"
    );
    // The shared slot is empty: the queued region gets it (the JobManager serves the queue
    // after every call).
    let actions = h.finish("sink", 0);
    assert_eq!(
        deployments(&actions),
        [deployed("source", 1, 0), deployed("sink", 1, 0)]
    );
    assert_eq!(h.scheduler.free_slots(), 0);
    assert_eq!(h.scheduler.queued(), 0);
    h.run_all(&[("source", 1), ("sink", 1)]);
    assert_eq!(h.finish("source", 1), []);
    assert_eq!(h.finish("sink", 1), released(&[0], JobStatus::Finished));
}

#[test]
fn a_region_waiting_only_for_busy_slots_never_expires() {
    let mut b = JobGraph::builder("wide");
    b.vertex("source", "numbers", 2);
    b.restart_strategy(RestartStrategyConfig::None);
    let mut h = Harness::new(b.build(|_| true).expect("valid"), &[1]);
    assert_eq!(deployments(&h.start()), [deployed("source", 0, 0)]);
    h.run("source", 0);
    let timeout = Duration::from_secs(300);
    let later = h.now + timeout * 10;
    assert_eq!(h.scheduler.expire(later, timeout, 1), []);
    assert_eq!(
        h.scheduler.queued(),
        1,
        "the second region waits for the busy slot"
    );
    assert_eq!(
        deployments(&h.finish("source", 0)),
        [deployed("source", 1, 0)],
        "and gets it when it frees"
    );
}

#[test]
fn a_region_larger_than_the_cluster_expires_and_fails_the_job_without_restarts() {
    // One region of 2 slots (separate sharing groups) on a cluster of 1 slot.
    let mut h = Harness::new(split(1, ExchangeMode::Pipelined), &[1]);
    h.master.backoff = RestartBackoff::new(RestartStrategyConfig::None);
    assert_eq!(deployments(&h.start()), []);
    let timeout = Duration::from_secs(300);
    assert_eq!(h.scheduler.expire(h.now + timeout / 2, timeout, 1), []);
    let expired = h.scheduler.expire(h.now + timeout, timeout, 1);
    assert_eq!(expired.len(), 1);
    let (bulk, tasks, error) = expired.into_iter().next().expect("one");
    assert_eq!((bulk.job, bulk.region, tasks.len()), (JOB, 0, 2));
    assert_eq!(h.scheduler.queued(), 0);

    let actions = h.call(|m, cx| m.slot_request_failed(&tasks, &error, cx));
    assert_eq!(actions, released(&[], JobStatus::Failed));
    let failure = h.master.details().failure.expect("a failure");
    assert!(
        failure.starts_with(&format!(
            "source (1/1): NoResourceAvailable: region 0 of job {JOB} needs 2 slots at once \
             for its 2 subtasks"
        )),
        "{failure}"
    );
    assert!(
        failure.contains(
            "the cluster has 1 TaskManagers with 1 slots, and the pool at its maximum offers 1 \
             (resourcemanager.max-pool-size)"
        ),
        "{failure}"
    );
    assert!(failure.ends_with(&format!("({REASON_NONE})")), "{failure}");
    assert_eq!(
        h.subtask("sink", 0).error.as_deref(),
        Some(error.to_string().as_str())
    );
}

/// Two unconnected vertices of P = 2 in one group.
pub(super) fn side_by_side(co_located: bool) -> JobGraph {
    let mut b = JobGraph::builder("side by side");
    for name in ["head", "tail"] {
        let vertex = b.vertex(name, "numbers", 2);
        if co_located {
            vertex.co_location_group("iteration");
        }
    }
    b.build(|_| true).expect("valid")
}

#[test]
fn co_located_subtasks_share_one_allocation() {
    let allocations = |co_located: bool| {
        // TaskManagers of 1 and 2 slots: head 0 opens a slot on the second (most free), head 1
        // on the first (a tie, the first registered wins), and a tail without a lock joins the
        // first shared slot lacking it by TaskManager — head 1's for tail 0.
        let mut h = Harness::seeded(side_by_side(co_located), &[1, 2], 2, 2);
        assert_eq!(deployments(&h.start()).len(), 4);
        (0..2)
            .map(|i| {
                (
                    h.descriptor("head", i).allocation_id,
                    h.descriptor("tail", i).allocation_id,
                )
            })
            .collect::<Vec<_>>()
    };
    let locked = allocations(true);
    for (i, (head, tail)) in locked.iter().enumerate() {
        assert_eq!(head, tail, "subtask {i}");
    }
    assert_ne!(locked[0].0, locked[1].0);
    // Without the group, the scheduler pairs them the other way round: the lock decided.
    let free = allocations(false);
    assert_eq!((free[0].1, free[1].1), (locked[1].0, locked[0].0));
}

#[test]
fn peak_slots_sums_the_largest_parallelism_of_each_sharing_group() {
    let mut b = JobGraph::builder("groups");
    let x = b.vertex("x", "numbers", 3).index();
    let y = b.vertex("y", "collect", 5).index();
    let z = b
        .vertex("z", "collect", 2)
        .slot_sharing_group("other")
        .index();
    b.edge(x, y, DistributionPattern::AllToAll, ExchangeMode::Pipelined);
    b.edge(y, z, DistributionPattern::AllToAll, ExchangeMode::Blocking);
    assert_eq!(
        crate::job::regions::peak_slots(&b.build(|_| true).expect("valid")),
        7
    );
    assert_eq!(
        crate::job::regions::peak_slots(&pairs(4, fixed_delay(1))),
        4
    );
}

/// A run with a queue, a failover and a restart; every action's Debug text.
pub(super) fn scripted_run(seed: u64) -> Vec<String> {
    let graph = pipeline(
        2,
        2,
        DistributionPattern::AllToAll,
        ExchangeMode::Blocking,
        fixed_delay(1),
    );
    let mut h = Harness::seeded(graph, &[1], 1, seed);
    h.start();
    h.run("source", 0);
    h.finish("source", 0);
    h.serve_queue();
    h.run("source", 1);
    h.fail("source", 1, "boom");
    h.restart_due(1);
    h.serve_queue();
    h.run("source", 1);
    h.finish("source", 1);
    h.run("sink", 0);
    h.finish("sink", 0);
    h.serve_queue();
    h.run("sink", 1);
    h.finish("sink", 1);
    assert_eq!(h.status(), JobStatus::Finished);
    let mut log: Vec<String> = h.log.iter().map(|a| format!("{a:?}")).collect();
    log.push(format!("{:?}", h.states()));
    log
}

#[test]
fn the_same_seeds_and_events_give_the_same_actions() {
    let first = scripted_run(2);
    assert_eq!(first, scripted_run(2));
    assert_ne!(first, scripted_run(3), "attempt ids follow the seed");
}

#[test]
fn a_job_keeps_a_bounded_window_of_regions_in_the_queue_and_refills_it() {
    let many = QUEUED_REGIONS_PER_JOB as u32 * 2 + 3;
    let mut b = JobGraph::builder("many");
    b.vertex("source", "numbers", many);
    b.restart_strategy(RestartStrategyConfig::None);
    let mut h = Harness::new(b.build(|_| true).expect("valid"), &[1]);
    assert_eq!(deployments(&h.start()), [deployed("source", 0, 0)]);
    assert_eq!(h.scheduler.queued_bulks(), QUEUED_REGIONS_PER_JOB);
    for i in 0..many {
        h.run("source", i);
        let next = deployments(&h.finish("source", i));
        if i + 1 < many {
            assert_eq!(next, [deployed("source", i + 1, 0)], "in order");
        }
        let waiting = (many.saturating_sub(i + 2) as usize).min(QUEUED_REGIONS_PER_JOB);
        assert_eq!(h.scheduler.queued_bulks(), waiting, "after {i}");
    }
    assert_eq!(h.status(), JobStatus::Finished);
}

/// Issue 11 (backpressure is visible): a TaskManager's samples of its tasks' exchange metrics
/// are kept per current attempt, summed per vertex with the worst backpressure, and dropped when
/// the attempt is replaced.
#[test]
fn task_io_samples_show_per_subtask_and_per_vertex_and_reset_on_restart() {
    use crate::messages::TaskIoSnapshot;
    let mut h = Harness::new(pairs(2, fixed_delay(1)), &[2, 2]);
    h.start();
    let sample = |records: u64, pressure: u64| TaskIoSnapshot {
        records_out: records,
        back_pressured_time_ms_per_second: pressure,
        ..TaskIoSnapshot::default()
    };
    let stranger = ExecutionAttemptId::from_u128(4242);
    let io = [
        (h.attempt("source", 0), sample(10, 700)),
        (h.attempt("source", 1), sample(5, 100)),
        (stranger, sample(99, 1000)),
    ];
    h.master.record_io(&io);
    let details = h.master.details();
    let source = &details.vertices[0];
    assert_eq!(source.subtasks[0].io, Some(sample(10, 700)));
    assert_eq!(
        (
            source.io.records_out,
            source.io.back_pressured_time_ms_per_second
        ),
        (15, 700),
        "summed, the worst backpressure; the stranger's sample is not this job's"
    );
    assert_eq!(details.vertices[1].subtasks[0].io, None, "not reported yet");
    h.run_all(&[("source", 0), ("sink", 0)]);
    h.fail("source", 0, "boom");
    h.canceled("sink", 0);
    h.restart_due(1);
    assert_eq!(
        h.subtask("source", 0).io,
        None,
        "a new attempt starts from nothing"
    );
}

/// Bytes on the wire of every task of one deployment of `source` (P = `p`) → `sink`
/// (P = `p`), all-to-all, on four TaskManagers.
pub(super) fn all_to_all_deployment_bytes(p: u32) -> usize {
    use crate::messages::task_manager::SubmitTasks;
    let graph = pipeline(
        p,
        p,
        DistributionPattern::AllToAll,
        ExchangeMode::Pipelined,
        fixed_delay(1),
    );
    let mut h = Harness::new(graph, &[p / 4; 4]);
    let actions = h.start();
    assert_eq!(deployments(&actions).len(), 2 * p as usize);
    actions
        .into_iter()
        .filter_map(|a| match a {
            JobAction::Deploy { descriptor, .. } => Some(
                crate::base::codec::encode(&SubmitTasks::one(
                    crate::base::ids::LeaderSessionId::from_u128(1),
                    *descriptor,
                ))
                .expect("encodes")
                .len(),
            ),
            _ => None,
        })
        .sum()
}

/// Issue 11, item 5: every consumer's `SubmitTask` carried the whole producer list, O(P²)
/// bytes for an all-to-all edge (10,000² locations at P = 10,000). Each TaskManager now gets
/// the list once, so four times the parallelism is about four times the bytes, not sixteen.
#[test]
fn all_to_all_deployment_bytes_grow_linearly_with_the_parallelism() {
    let small = all_to_all_deployment_bytes(100);
    let large = all_to_all_deployment_bytes(400);
    eprintln!("SubmitTask bytes: P = 100: {small}, P = 400: {large}");
    assert!(
        large <= 5 * small,
        "P = 100: {small} bytes, P = 400: {large} bytes (quadratic would be ~16x)"
    );
}

#[test]
fn a_job_built_from_regions_computed_elsewhere_is_the_job_built_from_its_graph() {
    // The REST handler computes a submission's regions on its own thread; the JobManager then
    // builds the job from them. Both ways must give the same job.
    for graph in [
        pairs(3, fixed_delay(1)),
        split(4, ExchangeMode::Blocking),
        split(4, ExchangeMode::Pipelined),
    ] {
        let regions = PipelinedRegions::compute(&graph).expect("regions");
        let here = ExecutionGraph::new(JOB, graph.clone(), NodeRng::seed_from_u64(5), 7).unwrap();
        let there = ExecutionGraph::with_regions(JOB, graph, regions, NodeRng::seed_from_u64(5), 7);
        assert_eq!(format!("{here:?}"), format!("{there:?}"));
    }
}
