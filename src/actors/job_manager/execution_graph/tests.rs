//! The job master on a virtual cluster: a [`Harness`] owns the shared scheduler and one job
//! master, feeds it the events the JobManager would (task states, served slot requests, restart
//! timers, lost TaskManagers) and records every action, so each test asserts exact deployments,
//! cancellations and statuses without actors or threads.

use crate::job::graph::{ExchangeMode, RestartStrategyConfig};
use crate::messages::job_manager::Locality;
use crate::messages::job_manager::SubtaskDetails;

use super::*;

const JOB: JobId = JobId::from_u128(1);
const DELAY: Duration = Duration::from_secs(1);
const REASON_NONE: &str = "restart strategy none: a failed task fails the job";

fn tm(n: usize) -> ResourceId {
    ResourceId::new(format!("tm-{n}"))
}

fn address(resource_id: &ResourceId) -> ActorAddress {
    ActorAddress::new("local", format!("taskmanager/{resource_id}"))
}

fn fixed_delay(attempts: u32) -> RestartStrategyConfig {
    RestartStrategyConfig::FixedDelay {
        attempts,
        delay: DELAY,
    }
}

/// `source` (P = `producers`) → `sink` (P = `consumers`), one edge.
fn pipeline(
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
fn split(parallelism: u32, exchange: ExchangeMode) -> JobGraph {
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
fn pairs(parallelism: u32, restart: RestartStrategyConfig) -> JobGraph {
    pipeline(
        parallelism,
        parallelism,
        DistributionPattern::Forward,
        ExchangeMode::Pipelined,
        restart,
    )
}

struct Harness {
    scheduler: Scheduler,
    master: ExecutionGraph,
    /// TaskManagers that left: their address is unknown.
    lost: BTreeSet<ResourceId>,
    now: Instant,
    now_ms: u64,
    /// Every action of every call, in order.
    log: Vec<JobAction>,
    /// The latest deployment of each (vertex name, subtask).
    deployed: BTreeMap<(String, u32), TaskDeploymentDescriptor>,
    /// Every shared producer list sent, and the TaskManagers it was sent to.
    lists: BTreeMap<ProducerListId, (Arc<Vec<ProducerLocation>>, BTreeSet<ResourceId>)>,
}

impl Harness {
    /// `task_managers[n]` is the slot count of `tm-n`.
    fn new(graph: JobGraph, task_managers: &[u32]) -> Self {
        Self::seeded(graph, task_managers, 1, 2)
    }

    /// `scheduler_seed` picks allocation ids, `master_seed` attempt ids.
    fn seeded(
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
    fn call(
        &mut self,
        f: impl FnOnce(&mut ExecutionGraph, &mut JobContext<'_>) -> Vec<JobAction>,
    ) -> Vec<JobAction> {
        let mut actions = self.call_once(f);
        actions.extend(self.serve_bulks());
        actions
    }

    /// Runs one job master call with a fresh context and records what it asks for.
    fn call_once(
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

    fn start(&mut self) -> Vec<JobAction> {
        self.call(|m, cx| m.start(cx))
    }

    /// The latest deployment of a subtask.
    fn descriptor(&self, vertex: &str, subtask: u32) -> &TaskDeploymentDescriptor {
        self.deployed
            .get(&(vertex.to_owned(), subtask))
            .unwrap_or_else(|| panic!("{vertex} {subtask} was never deployed"))
    }

    /// The producers of the first input gate of the latest deployment of `vertex` `subtask`,
    /// as its TaskManager has them (a named list is the one sent there before).
    fn producers(&self, vertex: &str, subtask: u32) -> Arc<Vec<ProducerLocation>> {
        match &self.descriptor(vertex, subtask).inputs[0].producers {
            Producers::Listed { locations, .. } => locations.clone(),
            Producers::Known(id) => self.lists[id].0.clone(),
        }
    }

    fn attempt(&self, vertex: &str, subtask: u32) -> ExecutionAttemptId {
        self.descriptor(vertex, subtask).attempt
    }

    fn update(
        &mut self,
        attempt: ExecutionAttemptId,
        state: ExecutionState,
        error: Option<&str>,
    ) -> Vec<JobAction> {
        let error = error.map(str::to_owned);
        self.call(|m, cx| m.update(attempt, state, error, cx))
    }

    fn report(&mut self, vertex: &str, subtask: u32, state: ExecutionState) -> Vec<JobAction> {
        let attempt = self.attempt(vertex, subtask);
        self.update(attempt, state, None)
    }

    fn run(&mut self, vertex: &str, subtask: u32) -> Vec<JobAction> {
        self.report(vertex, subtask, ExecutionState::Running)
    }

    fn finish(&mut self, vertex: &str, subtask: u32) -> Vec<JobAction> {
        self.report(vertex, subtask, ExecutionState::Finished)
    }

    fn canceled(&mut self, vertex: &str, subtask: u32) -> Vec<JobAction> {
        self.report(vertex, subtask, ExecutionState::Canceled)
    }

    fn fail(&mut self, vertex: &str, subtask: u32, error: &str) -> Vec<JobAction> {
        let attempt = self.attempt(vertex, subtask);
        self.update(attempt, ExecutionState::Failed, Some(error))
    }

    /// Reports each subtask RUNNING, which asks for nothing.
    fn run_all(&mut self, tasks: &[(&str, u32)]) {
        for (vertex, subtask) in tasks {
            assert_eq!(self.run(vertex, *subtask), []);
        }
    }

    /// What the JobManager does when slots free or a TaskManager registers: serve the queue and
    /// hand each placement to the job master.
    fn serve_queue(&mut self) -> Vec<JobAction> {
        self.serve_bulks()
    }

    /// Serves the queue's head while it fits, handing each bulk to the job master.
    fn serve_bulks(&mut self) -> Vec<JobAction> {
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

    fn restart_due(&mut self, generation: u64) -> Vec<JobAction> {
        self.call(|m, cx| m.restart_due(generation, cx))
    }

    fn cancel(&mut self) -> Vec<JobAction> {
        self.call(|m, cx| m.cancel(cx))
    }

    /// What the JobManager does when a TaskManager's heartbeat times out.
    fn lose(&mut self, n: usize) -> Vec<JobAction> {
        let resource_id = tm(n);
        self.scheduler.remove_task_manager(&resource_id);
        self.lost.insert(resource_id.clone());
        self.call(|m, cx| m.task_manager_lost(&resource_id, cx))
    }

    fn status(&self) -> JobStatus {
        self.master.status()
    }

    fn subtask(&self, vertex: &str, subtask: u32) -> SubtaskDetails {
        let details = self.master.details();
        let vertex = details
            .vertices
            .iter()
            .find(|v| v.name == vertex)
            .unwrap_or_else(|| panic!("no vertex {vertex}"));
        vertex.subtasks[subtask as usize].clone()
    }

    fn state(&self, vertex: &str, subtask: u32) -> ExecutionState {
        self.subtask(vertex, subtask).state
    }

    /// Every subtask's (attempt number, state), in graph order.
    fn states(&self) -> Vec<(String, u32, u32, ExecutionState)> {
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
fn deployments(actions: &[JobAction]) -> Vec<(ResourceId, String, u32)> {
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

fn deployed(vertex: &str, subtask: u32, n: usize) -> (ResourceId, String, u32) {
    (tm(n), vertex.to_owned(), subtask)
}

fn cancel(n: usize, attempt: ExecutionAttemptId) -> JobAction {
    JobAction::Cancel {
        resource_id: tm(n),
        attempt,
    }
}

/// Cancel actions as a set: their order follows attempt ids, which is no contract.
fn cancels(actions: &[JobAction]) -> BTreeSet<(ResourceId, ExecutionAttemptId)> {
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

fn released(task_managers: &[usize], status: JobStatus) -> Vec<JobAction> {
    vec![
        JobAction::ReleasePartitions {
            resource_ids: task_managers.iter().map(|n| tm(*n)).collect(),
        },
        JobAction::Terminated(status),
    ]
}

fn restart_after(generation: u64) -> JobAction {
    JobAction::RestartAfter {
        delay: DELAY,
        generation,
    }
}

fn location(producer: ExecutionAttemptId, edge: u32, n: usize) -> ProducerLocation {
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
    assert_eq!(h.finish("sink", 0), []);
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
fn a_failed_task_restarts_its_region_as_new_attempts_after_the_delay() {
    let mut h = Harness::new(pairs(2, fixed_delay(2)), &[2, 2]);
    h.start();
    h.run_all(&[("source", 0), ("sink", 0), ("source", 1), ("sink", 1)]);
    let (old_source, old_sink) = (h.attempt("source", 0), h.attempt("sink", 0));
    let untouched = (h.attempt("source", 1), h.attempt("sink", 1));

    let actions = h.fail("source", 0, "boom");
    assert_eq!(actions, [cancel(0, old_sink), restart_after(1)]);
    assert_eq!(h.master.details().restarts, 1);
    assert_eq!(h.status(), JobStatus::Running);
    assert_eq!(
        h.states(),
        [
            ("source".into(), 0, 0, ExecutionState::Failed),
            ("source".into(), 1, 0, ExecutionState::Running),
            ("sink".into(), 0, 0, ExecutionState::Canceling),
            ("sink".into(), 1, 0, ExecutionState::Running),
        ]
    );
    assert_eq!(h.subtask("source", 0).error.as_deref(), Some("boom"));

    // The delay passed, but the sink has not stopped yet: nothing runs.
    assert_eq!(h.restart_due(1), []);
    assert_eq!(
        h.master.restarted_tasks(),
        0,
        "nothing runs again before the region stopped"
    );
    let actions = h.update(old_sink, ExecutionState::Canceled, None);
    assert_eq!(
        h.master.restarted_tasks(),
        2,
        "the region's source and sink"
    );
    assert_eq!(
        deployments(&actions),
        [deployed("source", 0, 0), deployed("sink", 0, 0)]
    );
    let (source, sink) = (h.descriptor("source", 0), h.descriptor("sink", 0));
    assert_eq!((source.attempt_number, sink.attempt_number), (1, 1));
    assert_ne!(source.attempt, old_source);
    assert_ne!(sink.attempt, old_sink);
    assert_eq!(
        sink.inputs[0].producers.locations()[0].partition.producer,
        source.attempt
    );
    assert_eq!((h.attempt("source", 1), h.attempt("sink", 1)), untouched);

    // Late news from the old attempts changes nothing.
    assert_eq!(h.update(old_source, ExecutionState::Running, None), []);
    assert_eq!(h.update(old_sink, ExecutionState::Finished, None), []);
    assert_eq!(h.state("sink", 0), ExecutionState::Deploying);

    h.run_all(&[("source", 0), ("sink", 0)]);
    for (vertex, subtask) in [("source", 0), ("sink", 0), ("source", 1)] {
        assert_eq!(h.finish(vertex, subtask), []);
    }
    assert_eq!(h.finish("sink", 1), released(&[0, 1], JobStatus::Finished));
    assert_eq!(h.master.details().restarts, 1);
    assert_eq!(h.subtask("source", 0).attempt_number, 1);
    assert_eq!(h.subtask("source", 1).attempt_number, 0);
}

#[test]
fn only_the_failed_pipeline_restarts_and_a_stale_timer_is_ignored() {
    let mut g = JobGraph::builder("two pipelines");
    let a = g.vertex("a", "numbers", 1).index();
    let b = g.vertex("b", "collect", 1).index();
    let c = g.vertex("c", "numbers", 1).index();
    let d = g.vertex("d", "collect", 1).index();
    g.edge(a, b, DistributionPattern::Forward, ExchangeMode::Pipelined);
    g.edge(c, d, DistributionPattern::Forward, ExchangeMode::Pipelined);
    g.restart_strategy(fixed_delay(1));
    // One shared slot holds a subtask of each of the four vertices.
    let mut h = Harness::new(g.build(|_| true).expect("valid"), &[1]);
    assert_eq!(
        deployments(&h.start()),
        [
            deployed("a", 0, 0),
            deployed("b", 0, 0),
            deployed("c", 0, 0),
            deployed("d", 0, 0),
        ]
    );
    h.run_all(&[("a", 0), ("b", 0), ("c", 0), ("d", 0)]);
    let (c_attempt, d_attempt) = (h.attempt("c", 0), h.attempt("d", 0));

    let actions = h.fail("b", 0, "boom");
    assert_eq!(actions, [cancel(0, h.attempt("a", 0)), restart_after(1)]);
    // Stopped before the delay passed: it waits for the timer.
    assert_eq!(h.canceled("a", 0), []);
    assert_eq!(h.restart_due(0), [], "a timer of an older generation");
    let actions = h.restart_due(1);
    assert_eq!(
        deployments(&actions),
        [deployed("a", 0, 0), deployed("b", 0, 0)]
    );
    assert_eq!(
        h.states(),
        [
            ("a".into(), 0, 1, ExecutionState::Deploying),
            ("b".into(), 0, 1, ExecutionState::Deploying),
            ("c".into(), 0, 0, ExecutionState::Running),
            ("d".into(), 0, 0, ExecutionState::Running),
        ]
    );
    assert_eq!(
        (h.attempt("c", 0), h.attempt("d", 0)),
        (c_attempt, d_attempt)
    );
    assert_eq!(h.restart_due(1), [], "the same timer twice");
    assert_eq!(h.master.restarted_tasks(), 2, "a and b, once");
    for (vertex, subtask) in [("a", 0), ("b", 0), ("c", 0)] {
        h.finish(vertex, subtask);
    }
    assert_eq!(h.finish("d", 0), released(&[0], JobStatus::Finished));
}

#[test]
fn with_restart_strategy_none_a_failure_fails_the_job_once_every_task_stopped() {
    let mut h = Harness::new(pairs(2, RestartStrategyConfig::None), &[2, 2]);
    h.start();
    h.run_all(&[("source", 0), ("sink", 0), ("source", 1), ("sink", 1)]);

    let actions = h.fail("sink", 1, "disk full");
    assert_eq!(
        cancels(&actions),
        BTreeSet::from([
            (tm(0), h.attempt("source", 0)),
            (tm(0), h.attempt("sink", 0)),
            (tm(1), h.attempt("source", 1)),
        ])
    );
    assert_eq!(actions.len(), 3, "no restart: {actions:?}");
    assert_eq!(h.status(), JobStatus::Failing);
    assert_eq!(h.canceled("source", 0), []);
    assert_eq!(h.canceled("sink", 0), []);
    assert_eq!(h.status(), JobStatus::Failing);
    assert_eq!(
        h.canceled("source", 1),
        released(&[0, 1], JobStatus::Failed)
    );
    assert_eq!(h.status(), JobStatus::Failed);
    let details = h.master.details();
    assert_eq!(
        details.failure.as_deref(),
        Some(format!("sink (2/2): disk full ({REASON_NONE})").as_str())
    );
    assert_eq!(details.restarts, 0);
    let statuses: Vec<JobStatus> = details.status_timestamps.iter().map(|(s, _)| *s).collect();
    assert_eq!(
        statuses,
        [
            JobStatus::Created,
            JobStatus::Running,
            JobStatus::Failing,
            JobStatus::Failed
        ]
    );
    assert_eq!(h.scheduler.free_slots(), 4);
}

#[test]
fn fixed_delay_fails_the_job_once_its_attempts_are_used_up() {
    let mut h = Harness::new(pairs(1, fixed_delay(1)), &[1]);
    h.start();
    h.run_all(&[("source", 0), ("sink", 0)]);
    let actions = h.fail("source", 0, "boom");
    assert_eq!(actions, [cancel(0, h.attempt("sink", 0)), restart_after(1)]);
    assert_eq!(h.restart_due(1), []);
    assert_eq!(deployments(&h.canceled("sink", 0)).len(), 2);
    h.run_all(&[("source", 0), ("sink", 0)]);

    let actions = h.fail("sink", 0, "boom again");
    assert_eq!(actions, [cancel(0, h.attempt("source", 0))]);
    assert_eq!(h.status(), JobStatus::Failing);
    assert_eq!(h.canceled("source", 0), released(&[0], JobStatus::Failed));
    let details = h.master.details();
    assert_eq!(
        details.failure.as_deref(),
        Some(
            "sink (1/1): boom again (fixed-delay restart strategy exhausted its 1 restart attempts)"
        )
    );
    assert_eq!(details.restarts, 1);
}

/// One `SubmitTasks` to one TaskManager lost with three independent regions in it: one fault,
/// so one failure for the restart strategy and one restart of all three regions. Failed one
/// task at a time (as before batches) it would spend three attempts and fail the job.
#[test]
fn deployments_failed_together_are_one_failure_restarting_every_region() {
    let mut h = Harness::new(pairs(3, fixed_delay(1)), &[6]);
    let placed = h.start();
    assert_eq!(deployments(&placed).len(), 6);
    let failed = ["source", "sink"]
        .into_iter()
        .flat_map(|vertex| (0..3).map(move |i| (vertex, i)))
        .map(|(vertex, i)| {
            (
                h.attempt(vertex, i),
                "TaskManager tm-0 did not take the task".into(),
            )
        })
        .collect();
    let actions = h.call(|m, cx| m.deployments_failed(failed, cx));
    assert_eq!(actions, [restart_after(1)]);
    assert_eq!(h.status(), JobStatus::Running);
    assert_eq!(h.master.details().restarts, 1);
    let redeployed = h.restart_due(1);
    assert_eq!(deployments(&redeployed).len(), 6, "every region runs again");
}

#[test]
fn cancel_stops_deployed_tasks_drops_queued_requests_and_frees_every_slot() {
    let mut h = Harness::new(pairs(2, fixed_delay(1)), &[1]);
    h.start();
    assert_eq!(h.run("source", 0), []); // the sink stays DEPLOYING
    assert_eq!(h.scheduler.queued(), 2);

    let actions = h.cancel();
    assert_eq!(
        cancels(&actions),
        BTreeSet::from([
            (tm(0), h.attempt("source", 0)),
            (tm(0), h.attempt("sink", 0)),
        ])
    );
    assert_eq!(actions.len(), 2, "{actions:?}");
    assert_eq!(h.status(), JobStatus::Cancelling);
    assert_eq!(h.scheduler.queued(), 0);
    assert_eq!(h.state("source", 1), ExecutionState::Canceled);
    assert_eq!(h.state("sink", 1), ExecutionState::Canceled);
    assert_eq!(h.cancel(), [], "cancelling twice");

    assert_eq!(h.canceled("source", 0), []);
    assert_eq!(h.canceled("sink", 0), released(&[0], JobStatus::Canceled));
    assert_eq!(h.status(), JobStatus::Canceled);
    assert_eq!(h.scheduler.free_slots(), h.scheduler.total_slots());
    assert_eq!(h.serve_queue(), []);
    assert_eq!(h.cancel(), [], "cancelling a cancelled job");
}

#[test]
fn a_task_that_finishes_while_canceling_counts_as_canceled() {
    let mut h = Harness::new(pairs(1, fixed_delay(1)), &[1]);
    h.start();
    h.run_all(&[("source", 0), ("sink", 0)]);
    assert_eq!(cancels(&h.cancel()).len(), 2);
    assert_eq!(h.finish("source", 0), []);
    assert_eq!(h.state("source", 0), ExecutionState::Canceled);
    assert_eq!(h.finish("sink", 0), released(&[0], JobStatus::Canceled));
    assert_eq!(h.state("sink", 0), ExecutionState::Canceled);
    assert_eq!(h.master.summary().tasks_finished, 0);
}

#[test]
fn a_lost_task_manager_fails_its_running_tasks_and_restarts_their_region() {
    let mut h = Harness::new(pairs(2, fixed_delay(1)), &[2, 2]);
    h.start();
    h.run_all(&[("source", 0), ("sink", 0), ("source", 1), ("sink", 1)]);
    let untouched = (h.attempt("source", 1), h.attempt("sink", 1));

    assert_eq!(h.lose(0), [restart_after(1)], "nothing left to cancel");
    assert_eq!(h.state("source", 0), ExecutionState::Failed);
    assert_eq!(
        h.subtask("sink", 0).error.as_deref(),
        Some("TaskManager tm-0 was lost")
    );
    assert_eq!(h.state("source", 1), ExecutionState::Running);
    assert_eq!(h.master.details().restarts, 1);

    let actions = h.restart_due(1);
    assert_eq!(
        deployments(&actions),
        [deployed("source", 0, 1), deployed("sink", 0, 1)],
        "onto the surviving TaskManager"
    );
    assert_eq!(h.descriptor("sink", 0).attempt_number, 1);
    assert_eq!((h.attempt("source", 1), h.attempt("sink", 1)), untouched);
    h.run_all(&[("source", 0), ("sink", 0)]);
    for (vertex, subtask) in [("source", 0), ("sink", 0), ("source", 1)] {
        h.finish(vertex, subtask);
    }
    assert_eq!(
        h.finish("sink", 1),
        released(&[1], JobStatus::Finished),
        "tm-0's partitions are gone with it"
    );
}

#[test]
fn a_lost_task_manager_reruns_finished_producers_only_for_unfinished_consumers() {
    // source i → sink i blocking: four regions, everything on tm-0.
    let graph = pipeline(
        2,
        2,
        DistributionPattern::Forward,
        ExchangeMode::Blocking,
        fixed_delay(1),
    );
    let mut h = Harness::new(graph, &[2]);
    h.start();
    h.run_all(&[("source", 0), ("source", 1)]);
    assert_eq!(
        deployments(&h.finish("source", 0)),
        [deployed("sink", 0, 0)]
    );
    assert_eq!(
        deployments(&h.finish("source", 1)),
        [deployed("sink", 1, 0)]
    );
    h.run_all(&[("sink", 0), ("sink", 1)]);
    assert_eq!(h.finish("sink", 0), []);

    // sink 0 consumed its input: source 0 stays done. sink 1 still needs source 1's result.
    assert_eq!(h.lose(0), [restart_after(1)]);
    assert_eq!(h.master.details().restarts, 1);
    assert_eq!(
        h.states(),
        [
            ("source".into(), 0, 0, ExecutionState::Finished),
            ("source".into(), 1, 0, ExecutionState::Finished),
            ("sink".into(), 0, 0, ExecutionState::Finished),
            ("sink".into(), 1, 0, ExecutionState::Failed),
        ]
    );
    assert_eq!(h.restart_due(1), [], "no TaskManager: queued");
    assert_eq!(h.scheduler.queued(), 1);
    h.scheduler.add_task_manager(tm(1), 1);
    assert_eq!(deployments(&h.serve_queue()), [deployed("source", 1, 1)]);
    assert_eq!(
        h.states(),
        [
            ("source".into(), 0, 0, ExecutionState::Finished),
            ("source".into(), 1, 1, ExecutionState::Deploying),
            ("sink".into(), 0, 0, ExecutionState::Finished),
            ("sink".into(), 1, 1, ExecutionState::Created),
        ]
    );
    h.run("source", 1);
    assert_eq!(
        deployments(&h.finish("source", 1)),
        [deployed("sink", 1, 1)]
    );
    assert_eq!(
        *h.producers("sink", 1),
        [location(h.attempt("source", 1), 0, 1)]
    );
    h.run("sink", 1);
    assert_eq!(h.finish("sink", 1), released(&[1], JobStatus::Finished));
}

#[test]
fn a_lost_task_manager_whose_results_were_all_consumed_restarts_nothing() {
    // Sources and sinks in separate sharing groups: sink i lands beside source i's result.
    let mut h = Harness::new(split(2, ExchangeMode::Blocking), &[1, 1]);
    h.start();
    h.run_all(&[("source", 0), ("source", 1)]);
    assert_eq!(
        deployments(&h.finish("source", 0)),
        [deployed("sink", 0, 0)]
    );
    assert_eq!(
        deployments(&h.finish("source", 1)),
        [deployed("sink", 1, 1)]
    );
    h.run_all(&[("sink", 0), ("sink", 1)]);
    assert_eq!(h.finish("sink", 0), []);

    // tm-0 held source 0's result, read in full by the finished sink 0, and sink 0 itself.
    assert_eq!(h.lose(0), []);
    assert_eq!(h.master.details().restarts, 0);
    assert_eq!(
        h.states(),
        [
            ("source".into(), 0, 0, ExecutionState::Finished),
            ("source".into(), 1, 0, ExecutionState::Finished),
            ("sink".into(), 0, 0, ExecutionState::Finished),
            ("sink".into(), 1, 0, ExecutionState::Running),
        ]
    );
    assert_eq!(h.finish("sink", 1), released(&[1], JobStatus::Finished));
}

#[test]
fn losing_a_task_manager_while_its_task_cancels_for_a_restart_is_no_new_failure() {
    // Separate sharing groups put the sink on its own TaskManager.
    let mut h = Harness::new(split(1, ExchangeMode::Pipelined), &[1, 1]);
    assert_eq!(
        deployments(&h.start()),
        [deployed("source", 0, 0), deployed("sink", 0, 1)]
    );
    h.run_all(&[("source", 0), ("sink", 0)]);
    let actions = h.fail("source", 0, "boom");
    assert_eq!(actions, [cancel(1, h.attempt("sink", 0)), restart_after(1)]);

    // The sink's TaskManager dies before it confirms the cancel: the sink stopped, which is
    // what the restart waits for; it is not a second failure.
    assert_eq!(h.lose(1), []);
    assert_eq!(h.status(), JobStatus::Running);
    assert_eq!(h.master.details().restarts, 1);
    h.scheduler.add_task_manager(tm(2), 1);
    assert_eq!(
        deployments(&h.restart_due(1)),
        [deployed("source", 0, 0), deployed("sink", 0, 2)]
    );
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
            "the cluster has 1 TaskManagers with 1 slots, and the pool at its maximum offers 1"
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
fn side_by_side(co_located: bool) -> JobGraph {
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
        ExecutionGraph::peak_slots(&b.build(|_| true).expect("valid")),
        7
    );
    assert_eq!(ExecutionGraph::peak_slots(&pairs(4, fixed_delay(1))), 4);
}

/// A run with a queue, a failover and a restart; every action's Debug text.
fn scripted_run(seed: u64) -> Vec<String> {
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
fn restarted_consumers_read_the_new_attempts_of_their_producers() {
    // Regression: the shared all-to-all producer lists were not cleared on restart, so a
    // restarted consumer read its producers' old (cancelled) partitions and failed again.
    let graph = pipeline(
        2,
        2,
        DistributionPattern::AllToAll,
        ExchangeMode::Pipelined,
        fixed_delay(1),
    );
    let mut h = Harness::new(graph, &[2, 2]);
    h.start();
    h.run_all(&[("source", 0), ("source", 1), ("sink", 0), ("sink", 1)]);
    let old = h.attempt("source", 0);
    let actions = h.fail("sink", 0, "boom");
    for (vertex, subtask) in [("source", 0), ("source", 1), ("sink", 1)] {
        h.canceled(vertex, subtask);
    }
    let generation = actions
        .iter()
        .find_map(|a| match a {
            JobAction::RestartAfter { generation, .. } => Some(*generation),
            _ => None,
        })
        .expect("a restart");
    h.restart_due(generation);
    let new = h.attempt("source", 0);
    assert_ne!(old, new);
    for j in 0..2 {
        let producers: Vec<ExecutionAttemptId> = h
            .producers("sink", j)
            .iter()
            .map(|p| p.partition.producer)
            .collect();
        assert_eq!(producers, [h.attempt("source", 0), h.attempt("source", 1)]);
    }
}

/// Source → sink, one subtask each, forward and pipelined, both RUNNING on one TaskManager.
fn running_pair() -> Harness {
    let graph = pipeline(
        1,
        1,
        DistributionPattern::Forward,
        ExchangeMode::Pipelined,
        RestartStrategyConfig::None,
    );
    let mut h = Harness::new(graph, &[2]);
    h.start();
    h.run_all(&[("source", 0), ("sink", 0)]);
    h
}

#[test]
fn a_task_that_reports_canceled_without_being_cancelled_has_failed() {
    // Regression: RUNNING → CANCELED is no transition, so the report was dropped and the job
    // waited for the task forever.
    let mut h = running_pair();
    h.report("source", 0, ExecutionState::Canceled);
    assert_eq!(h.state("source", 0), ExecutionState::Failed);
    assert_eq!(h.status(), JobStatus::Failing);
}

#[test]
fn a_task_missing_from_two_heartbeats_in_a_row_has_failed() {
    // Regression: a lost final report (or a TaskManager that dropped its tasks) left the task
    // RUNNING here forever.
    let mut h = running_pair();
    let sink = h.attempt("sink", 0);
    let only_sink: BTreeSet<ExecutionAttemptId> = [sink].into();
    // The first heartbeat without the source only raises suspicion (it may be stale)...
    h.call(|m, cx| m.reconcile(&tm(0), &only_sink, cx));
    assert_eq!(h.state("source", 0), ExecutionState::Running);
    // ...a heartbeat listing it again clears it...
    let both: BTreeSet<ExecutionAttemptId> = [sink, h.attempt("source", 0)].into();
    h.call(|m, cx| m.reconcile(&tm(0), &both, cx));
    h.call(|m, cx| m.reconcile(&tm(0), &only_sink, cx));
    assert_eq!(h.state("source", 0), ExecutionState::Running);
    // ...and two in a row fail it.
    h.call(|m, cx| m.reconcile(&tm(0), &only_sink, cx));
    assert_eq!(h.state("source", 0), ExecutionState::Failed);
    assert_eq!(h.status(), JobStatus::Failing);
    // Another TaskManager's heartbeat never touches these tasks.
    let mut other = Harness::new(
        pipeline(
            1,
            1,
            DistributionPattern::Forward,
            ExchangeMode::Pipelined,
            RestartStrategyConfig::None,
        ),
        &[2, 2],
    );
    other.start();
    other.run_all(&[("source", 0), ("sink", 0)]);
    let placed = other.subtask("source", 0).resource_id.unwrap();
    let elsewhere = if placed == tm(0) { tm(1) } else { tm(0) };
    for _ in 0..3 {
        other.call(|m, cx| m.reconcile(&elsewhere, &BTreeSet::new(), cx));
    }
    assert_eq!(other.state("source", 0), ExecutionState::Running);
}

#[test]
fn a_task_still_listed_cancelling_at_two_heartbeats_is_cancelled_again() {
    // Regression (data-plane sweep with 64-byte buffers, seeds 882, 1230, 1485): `CancelTasks`
    // travels as a tell; one lost left a producer blocked for credit running, and its job
    // CANCELLING, for ever.
    let mut h = running_pair();
    let (source, sink) = (h.attempt("source", 0), h.attempt("sink", 0));
    let cancels = |actions: &[JobAction]| -> BTreeSet<ExecutionAttemptId> {
        actions
            .iter()
            .filter_map(|action| match action {
                JobAction::Cancel { attempt, .. } => Some(*attempt),
                _ => None,
            })
            .collect()
    };
    assert_eq!(
        cancels(&h.call(|m, cx| m.cancel(cx))),
        [source, sink].into()
    );
    h.canceled("sink", 0);
    let both: BTreeSet<ExecutionAttemptId> = [source, sink].into();
    // The first heartbeat listing it may simply precede the cancel's effect...
    assert!(cancels(&h.call(|m, cx| m.reconcile(&tm(0), &both, cx))).is_empty());
    // ...the second means the cancel was lost: it goes again, for the cancelling one only.
    assert_eq!(
        cancels(&h.call(|m, cx| m.reconcile(&tm(0), &both, cx))),
        [source].into()
    );
    assert_eq!(h.state("source", 0), ExecutionState::Canceling);
    h.canceled("source", 0);
    assert!(cancels(&h.call(|m, cx| m.reconcile(&tm(0), &both, cx))).is_empty());
    assert_eq!(h.status(), JobStatus::Canceled);
}

#[test]
fn a_taken_deployment_missing_from_two_heartbeats_has_failed() {
    // Regression (issue 12, seeds 21150 and 24138): a TaskManager answered SubmitTask, then its
    // RUNNING update was lost (or it dropped the task on re-registering); heartbeats left
    // DEPLOYING tasks alone, so the job stayed RUNNING forever.
    let graph = pipeline(
        1,
        1,
        DistributionPattern::Forward,
        ExchangeMode::Pipelined,
        RestartStrategyConfig::None,
    );
    let mut h = Harness::new(graph, &[2]);
    h.start();
    let (source, sink) = (h.attempt("source", 0), h.attempt("sink", 0));
    assert_eq!(h.state("source", 0), ExecutionState::Deploying);
    // Not answered yet: the submission may still be on its way, heartbeats leave it alone.
    for _ in 0..3 {
        h.call(|m, cx| m.reconcile(&tm(0), &BTreeSet::new(), cx));
    }
    assert_eq!(h.state("source", 0), ExecutionState::Deploying);
    // Answered: now it counts as running there.
    h.master.deployment_taken(source);
    h.master.deployment_taken(sink);
    let only_sink: BTreeSet<ExecutionAttemptId> = [sink].into();
    h.call(|m, cx| m.reconcile(&tm(0), &only_sink, cx));
    assert_eq!(h.state("source", 0), ExecutionState::Deploying);
    h.call(|m, cx| m.reconcile(&tm(0), &only_sink, cx));
    assert_eq!(h.state("source", 0), ExecutionState::Failed);
    assert_eq!(h.status(), JobStatus::Failing);
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

/// Issue 12 (Flink's `PartitionNotFoundException`): a consumer that finds its finished
/// producer's blocking result missing (the producer's TaskManager dropped its state) must make
/// the producer's region run again; restarting the consumer alone would find it missing again
/// and loop through the restarts until the job failed.
#[test]
fn a_consumer_missing_its_input_partition_reruns_the_producer_region() {
    let graph = pipeline(
        1,
        1,
        DistributionPattern::Forward,
        ExchangeMode::Blocking,
        fixed_delay(1),
    );
    let mut h = Harness::new(graph, &[1]);
    h.start();
    h.run("source", 0);
    let old_source = h.attempt("source", 0);
    assert_eq!(
        deployments(&h.finish("source", 0)),
        [deployed("sink", 0, 0)]
    );
    h.run("sink", 0);
    let sink = h.attempt("sink", 0);
    let lost = h.producers("sink", 0)[0].partition;
    assert_eq!(lost.producer, old_source);
    let actions = h.call(|m, cx| {
        m.update_with_lost_input(
            sink,
            ExecutionState::Failed,
            Some("input unavailable: gone".into()),
            Some(lost),
            cx,
        )
    });
    assert_eq!(actions, [restart_after(1)]);
    let actions = h.restart_due(1);
    assert_eq!(
        deployments(&actions),
        [deployed("source", 0, 0)],
        "the producer runs again first"
    );
    assert_ne!(h.attempt("source", 0), old_source);
    h.run("source", 0);
    assert_eq!(
        deployments(&h.finish("source", 0)),
        [deployed("sink", 0, 0)]
    );
    h.run("sink", 0);
    h.finish("sink", 0);
    assert_eq!(h.status(), JobStatus::Finished);
}

/// A lost input of a producer that is not the current attempt (a late failure report) or not
/// finished reruns nothing more than the consumer's region.
#[test]
fn a_missing_partition_of_an_older_producer_attempt_reruns_only_the_consumer() {
    let graph = pipeline(
        1,
        1,
        DistributionPattern::Forward,
        ExchangeMode::Blocking,
        fixed_delay(1),
    );
    let mut h = Harness::new(graph, &[1]);
    h.start();
    h.run("source", 0);
    h.finish("source", 0);
    h.run("sink", 0);
    let sink = h.attempt("sink", 0);
    let stale = ResultPartitionId {
        producer: ExecutionAttemptId::from_u128(999),
        edge: 0,
    };
    h.call(|m, cx| m.update_with_lost_input(sink, ExecutionState::Failed, None, Some(stale), cx));
    assert_eq!(deployments(&h.restart_due(1)), [deployed("sink", 0, 0)]);
}

/// Issue 12: a TaskManager holding only a finished producer's result, which a running consumer
/// elsewhere still reads, is not idle; once the job finished it is.
#[test]
fn finished_results_still_to_be_read_keep_their_task_manager_needed() {
    let graph = pipeline(
        2,
        1,
        DistributionPattern::AllToAll,
        ExchangeMode::Blocking,
        fixed_delay(1),
    );
    let mut h = Harness::new(graph, &[1, 1]);
    h.start();
    h.run_all(&[("source", 0), ("source", 1)]);
    h.finish("source", 0);
    let sink_on = deployments(&h.finish("source", 1))[0].0.clone();
    for n in 0..2 {
        assert!(
            h.master.needs_results_on(&tm(n)),
            "tm-{n} holds a source's result"
        );
    }
    h.run("sink", 0);
    h.finish("sink", 0);
    assert_eq!(h.status(), JobStatus::Finished);
    for n in 0..2 {
        assert!(
            !h.master.needs_results_on(&tm(n)),
            "{sink_on}: the job ended"
        );
    }
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

#[test]
fn task_failures_stay_in_the_bounded_exception_history_after_the_restart() {
    let mut h = Harness::new(pairs(2, fixed_delay(100)), &[2, 2]);
    h.start();
    h.run_all(&[("source", 0), ("sink", 0), ("source", 1), ("sink", 1)]);
    let (source_tm, sink) = (h.subtask("source", 0).resource_id, h.attempt("sink", 0));
    h.fail("source", 0, "boom");
    // The sink fails on its own while its cancellation is on the way: a concurrent exception.
    h.update(sink, ExecutionState::Failed, Some("its input broke"));
    let seen: Vec<_> = h
        .master
        .details()
        .exceptions
        .into_iter()
        .map(|e| {
            (
                e.vertex,
                e.subtask,
                e.attempt_number,
                e.resource_id,
                e.reason,
                e.root_cause,
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            (
                "source".into(),
                0,
                0,
                source_tm.clone(),
                "boom".into(),
                true
            ),
            (
                "sink".into(),
                0,
                0,
                source_tm,
                "its input broke".into(),
                false
            ),
        ]
    );

    // The region runs again: its subtasks show only their new attempts; the history keeps
    // what made it restart.
    h.restart_due(1);
    h.run_all(&[("source", 0), ("sink", 0)]);
    assert_eq!(h.subtask("source", 0).error, None);
    assert_eq!(h.master.details().exceptions.len(), 2);

    // Bounded: the newest EXCEPTION_HISTORY_SIZE, oldest first.
    for round in 0..EXCEPTION_HISTORY_SIZE {
        let sink = h.attempt("sink", 0);
        h.fail("source", 0, &format!("boom {round}"));
        h.update(sink, ExecutionState::Canceled, None);
        h.restart_due(round as u64 + 2);
        h.run_all(&[("source", 0), ("sink", 0)]);
    }
    let exceptions = h.master.details().exceptions;
    assert_eq!(exceptions.len(), EXCEPTION_HISTORY_SIZE);
    assert_eq!(exceptions[0].reason, "boom 0");
    assert_eq!(
        exceptions[EXCEPTION_HISTORY_SIZE - 1].reason,
        format!("boom {}", EXCEPTION_HISTORY_SIZE - 1)
    );
}

/// Bytes on the wire of every task of one deployment of `source` (P = `p`) → `sink`
/// (P = `p`), all-to-all, on four TaskManagers.
fn all_to_all_deployment_bytes(p: u32) -> usize {
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
