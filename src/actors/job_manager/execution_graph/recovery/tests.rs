//! Batch job recovery in the job master: a first leader's job records what it finished, a new
//! leader's job takes back what is still held and reruns exactly the rest.

use super::super::tests::*;
use super::*;
use crate::ha::job_event_log::replay;

/// `a` (P) → `b` (P) → `c` (P), forward and blocking: a chain of three regions per subtask.
fn chain(parallelism: u32) -> JobGraph {
    let mut b = JobGraph::builder("chain");
    let a = b.vertex("a", "numbers", parallelism).index();
    let m = b.vertex("b", "identity", parallelism).index();
    let c = b.vertex("c", "collect", parallelism).index();
    b.edge(a, m, DistributionPattern::Forward, ExchangeMode::Blocking);
    b.edge(m, c, DistributionPattern::Forward, ExchangeMode::Blocking);
    b.restart_strategy(fixed_delay(1));
    b.build(|_| true).expect("a valid graph")
}

/// Sources then sinks of an all-to-all blocking edge.
fn shuffle() -> JobGraph {
    pipeline(
        2,
        2,
        DistributionPattern::AllToAll,
        ExchangeMode::Blocking,
        fixed_delay(1),
    )
}

/// A first leader runs `graph` until each of `vertices` finished (every subtask), recording
/// events; returns what its log replays to.
fn first_leader(graph: JobGraph, vertices: &[&str]) -> BTreeMap<u32, Vec<FinishedTask>> {
    let mut h = Harness::new(graph, &[4, 4]);
    h.master.log_events();
    h.start();
    for vertex in vertices {
        let parallelism = h
            .master
            .graph()
            .vertices
            .iter()
            .find(|v| v.name == *vertex)
            .map(|v| v.parallelism)
            .unwrap();
        for subtask in 0..parallelism {
            h.run(vertex, subtask);
            h.finish(vertex, subtask);
        }
    }
    replay(&h.master.take_events())
}

/// A new leader's job of `graph`, restored from `finished` with the partitions `held` says are
/// there; returns the harness and the actions of the restore and the start.
fn new_leader(
    graph: JobGraph,
    finished: &BTreeMap<u32, Vec<FinishedTask>>,
    held: &dyn Fn(&ResourceId, ResultPartitionId) -> bool,
) -> (Harness, Restored, Vec<JobAction>) {
    let mut h = Harness::seeded(graph, &[4, 4], 7, 8);
    let mut restored = None;
    let mut actions = h.call(|m, cx| {
        let (r, actions) = m.restore(finished, held, cx);
        restored = Some(r);
        actions
    });
    actions.extend(h.start());
    (h, restored.unwrap(), actions)
}

fn vertices(actions: &[JobAction]) -> Vec<(String, u32)> {
    deployments(actions)
        .into_iter()
        .map(|(_, vertex, subtask)| (vertex, subtask))
        .collect()
}

#[test]
fn finished_sources_whose_results_are_held_are_taken_back_and_only_the_sinks_run() {
    let finished = first_leader(shuffle(), &["source"]);
    assert_eq!(finished.len(), 2, "one region per source subtask");
    let (mut h, restored, actions) = new_leader(shuffle(), &finished, &|_, _| true);
    assert_eq!((restored.regions, restored.tasks), (2, 2));
    assert_eq!(
        vertices(&actions),
        vec![("sink".into(), 0), ("sink".into(), 1)]
    );
    for subtask in 0..2 {
        let source = h.subtask("source", subtask);
        assert_eq!(source.state, ExecutionState::Finished);
        assert!(source.restored, "reported as taken back");
        assert_eq!(source.attempt_number, 0);
        assert!(!h.subtask("sink", subtask).restored);
    }
    // The sinks read the logged attempts where they ran.
    let logged: BTreeSet<(ExecutionAttemptId, ActorAddress)> = (finished.values().flatten())
        .map(|t| (t.attempt, address(&t.resource_id)))
        .collect();
    let read: BTreeSet<(ExecutionAttemptId, ActorAddress)> = (h.producers("sink", 0).iter())
        .map(|p| (p.partition.producer, p.task_manager.clone()))
        .collect();
    assert_eq!(read, logged);
    h.run_all(&[("sink", 0), ("sink", 1)]);
    h.finish("sink", 0);
    h.finish("sink", 1);
    assert_eq!(h.status(), JobStatus::Finished);
}

#[test]
fn a_source_whose_results_are_gone_runs_again_and_the_other_is_kept() {
    let finished = first_leader(shuffle(), &["source"]);
    let lost = finished[&0][0].attempt;
    let (mut h, restored, actions) = new_leader(shuffle(), &finished, &|_, p| p.producer != lost);
    assert_eq!(restored.regions, 1);
    assert!(!restored.attempts.contains(&lost));
    let rerun = vertices(&actions);
    assert_eq!(rerun.len(), 1, "only the lost source: {rerun:?}");
    assert_eq!(rerun[0].0, "source");
    h.run_all(&[("source", rerun[0].1)]);
    let sinks = h.finish("source", rerun[0].1);
    assert_eq!(vertices(&sinks).len(), 2, "then the sinks");
}

#[test]
fn regions_whose_readers_all_finished_need_no_results_and_the_job_ends_at_once() {
    let finished = first_leader(shuffle(), &["source", "sink"]);
    assert_eq!(finished.len(), 4);
    let (h, restored, actions) = new_leader(shuffle(), &finished, &|_, _| false);
    assert_eq!(
        restored.regions, 4,
        "nothing reads the sources' results any more"
    );
    assert_eq!(vertices(&actions), Vec::<(String, u32)>::new());
    assert_eq!(h.status(), JobStatus::Finished);
    assert!(actions.contains(&JobAction::Terminated(JobStatus::Finished)));
}

/// The check runs to a fixed point: `b` must run again (its results are gone), so `a`'s
/// results are needed again, and they are gone too: `a` runs first. A single pass that
/// checked `a` while `b` still counted as kept would skip `a`, and `b` would read nothing.
#[test]
fn a_region_that_must_run_again_makes_its_producers_needed_again() {
    let finished = first_leader(chain(1), &["a", "b"]);
    assert_eq!(finished.len(), 2);
    let (_, restored, actions) = new_leader(chain(1), &finished, &|_, _| false);
    assert_eq!(restored.regions, 0);
    assert_eq!(vertices(&actions), vec![("a".into(), 0)]);
    // With `a`'s results there, only `b` runs again.
    let a = finished[&0][0].attempt;
    let (_, restored, actions) = new_leader(chain(1), &finished, &|_, p| p.producer == a);
    assert_eq!(restored.regions, 1);
    assert_eq!(vertices(&actions), vec![("b".into(), 0)]);
}

#[test]
fn a_reset_region_and_a_region_of_another_graph_are_not_taken_back() {
    let mut h = Harness::new(shuffle(), &[4, 4]);
    h.master.log_events();
    h.start();
    h.run_all(&[("source", 0), ("source", 1)]);
    h.finish("source", 0);
    // Source 1 fails: its region (and the sinks reading it) reset.
    h.fail("source", 1, "boom");
    let finished = replay(&h.master.take_events());
    assert_eq!(finished.keys().copied().collect::<Vec<_>>(), vec![0]);
    let (_, restored, _) = new_leader(shuffle(), &finished, &|_, _| true);
    assert_eq!(restored.regions, 1);
    // The same log against a graph whose regions differ is ignored.
    let (_, restored, actions) = new_leader(pairs(2, fixed_delay(1)), &finished, &|_, _| true);
    assert_eq!(restored.regions, 0);
    assert_eq!(vertices(&actions).len(), 4, "every pair runs");
}
