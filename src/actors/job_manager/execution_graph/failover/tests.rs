//! Failover on the test harness of the execution graph's tests: restarts, lost TaskManagers,
//! lost inputs, reconciliation with heartbeats, the exception history.

use super::super::tests::*;
use super::*;

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
        actions[0],
        results_released(0, &[(old_source, 0)]),
        "the superseded attempt's results go at once"
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
    let source = h.attempt("source", 0);
    assert_eq!(h.finish("source", 0), []);
    assert_eq!(h.finish("sink", 0), [results_released(0, &[(source, 0)])]);
    assert_eq!(h.finish("source", 1), []);
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

/// An invalid operator configuration fails every attempt the same way: the job fails at its
/// first report, however many restarts its strategy allows, and names the error.
#[test]
fn an_unrecoverable_failure_fails_the_job_without_a_restart() {
    let mut h = Harness::new(pairs(1, fixed_delay(5)), &[1]);
    h.start();
    h.run_all(&[("source", 0), ("sink", 0)]);
    let source = h.attempt("source", 0);
    let bad = "invalid configuration for operator `noop`: key `count` is not a number";
    let actions = h.call(|m, cx| {
        m.update_with_lost_input(
            source,
            ExecutionState::Failed,
            Some(bad.into()),
            None,
            true,
            cx,
        )
    });
    assert_eq!(actions, [cancel(0, h.attempt("sink", 0))]);
    assert_eq!(h.status(), JobStatus::Failing);
    assert_eq!(h.canceled("sink", 0), released(&[0], JobStatus::Failed));
    let details = h.master.details();
    assert_eq!(
        details.failure.as_deref(),
        Some(
            "source (1/1): invalid configuration for operator `noop`: key `count` is not a \
             number (not restarted: every attempt would fail the same way)"
        )
    );
    assert_eq!(details.restarts, 0);
    assert!(
        details
            .exceptions
            .iter()
            .any(|e| e.root_cause && e.reason == bad),
        "{:?}",
        details.exceptions
    );
}

/// A producer whose record is too large for the exchange fails its partition, and its consumer's
/// report of that ("input unavailable") may reach the JobManager first, as an ordinary failure
/// that restarts the region. The producer's own unrecoverable report then comes while the region
/// restarts: the job fails instead of running an attempt that would fail the same way.
#[test]
fn an_unrecoverable_failure_during_a_restart_fails_the_job_instead() {
    let mut h = Harness::new(pairs(1, fixed_delay(5)), &[1]);
    h.start();
    h.run_all(&[("source", 0), ("sink", 0)]);
    let (source, sink) = (h.attempt("source", 0), h.attempt("sink", 0));
    let too_large = "a record of 9 bytes is larger than the largest the exchange carries";
    let unavailable = format!("input unavailable: {source} failed: {too_large}");
    let actions = h.call(|m, cx| {
        m.update_with_lost_input(
            sink,
            ExecutionState::Failed,
            Some(unavailable.clone()),
            None,
            false,
            cx,
        )
    });
    assert!(
        actions
            .iter()
            .any(|a| matches!(a, JobAction::RestartAfter { .. })),
        "{actions:?}"
    );
    h.call(|m, cx| {
        m.update_with_lost_input(
            source,
            ExecutionState::Failed,
            Some(too_large.into()),
            None,
            true,
            cx,
        )
    });
    assert_eq!(h.status(), JobStatus::Failed);
    let details = h.master.details();
    let failure = details.failure.unwrap_or_default();
    assert!(
        failure.starts_with(&format!("source (1/1): {too_large}"))
            && failure.contains(crate::job::restart::NOT_RESTARTED),
        "{failure}"
    );
    assert!(
        details
            .vertices
            .iter()
            .all(|v| v.subtasks.iter().all(|s| s.attempt_number == 0)),
        "no attempt ran again: {:?}",
        details.vertices
    );
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
    let source = h.attempt("source", 0);
    assert_eq!(h.finish("sink", 0), [results_released(0, &[(source, 0)])]);

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
    let source = h.attempt("source", 0);
    assert_eq!(h.finish("sink", 0), [results_released(0, &[(source, 0)])]);

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
fn the_attempts_placed_on_a_task_manager_are_its_tasks_current_ones() {
    // What the JobManager checks a heartbeat's attempts against: an attempt a TaskManager runs
    // that is not listed here (superseded by a restart) is cancelled there (seed 1,100,250).
    let mut h = Harness::new(pairs(1, fixed_delay(1)), &[2]);
    h.start();
    h.run_all(&[("source", 0), ("sink", 0)]);
    let placed = |h: &Harness| -> BTreeSet<ExecutionAttemptId> {
        h.master.attempts_placed_on(&tm(0)).collect()
    };
    let (old_source, old_sink) = (h.attempt("source", 0), h.attempt("sink", 0));
    assert_eq!(placed(&h), [old_source, old_sink].into());
    assert_eq!(h.master.attempts_placed_on(&tm(1)).count(), 0);
    h.fail("source", 0, "boom");
    // Failed and cancelling, not yet replaced: still the current ones.
    assert_eq!(placed(&h), [old_source, old_sink].into());
    h.restart_due(1);
    h.canceled("sink", 0);
    let (source, sink) = (h.attempt("source", 0), h.attempt("sink", 0));
    assert!(source != old_source && sink != old_sink);
    assert_eq!(placed(&h), [source, sink].into());
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
            false,
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
    h.call(|m, cx| {
        m.update_with_lost_input(sink, ExecutionState::Failed, None, Some(stale), false, cx)
    });
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

    // Bounded: at most EXCEPTION_HISTORY_SIZE, oldest first. Every failover also brings a
    // concurrent failure, and those go first: the root causes of the last
    // EXCEPTION_HISTORY_SIZE failovers stay (a flat last-16 kept only the last 8 failovers'
    // roots, and a job that keeps restarting lost why it first failed).
    for round in 0..EXCEPTION_HISTORY_SIZE {
        let sink = h.attempt("sink", 0);
        h.fail("source", 0, &format!("boom {round}"));
        h.update(sink, ExecutionState::Failed, Some("its input broke"));
        h.restart_due(round as u64 + 2);
        h.run_all(&[("source", 0), ("sink", 0)]);
    }
    let exceptions = h.master.details().exceptions;
    assert_eq!(exceptions.len(), EXCEPTION_HISTORY_SIZE);
    let reasons: Vec<String> = exceptions.into_iter().map(|e| e.reason).collect();
    let roots: Vec<String> = (0..EXCEPTION_HISTORY_SIZE)
        .map(|round| format!("boom {round}"))
        .collect();
    assert_eq!(reasons, roots);
    // With only root causes kept, a new root cause pushes out the oldest, and a concurrent
    // failure is not kept.
    let sink = h.attempt("sink", 0);
    h.fail("source", 0, "last boom");
    h.update(sink, ExecutionState::Failed, Some("its input broke"));
    let reasons: Vec<String> = h
        .master
        .details()
        .exceptions
        .into_iter()
        .map(|e| e.reason)
        .collect();
    assert_eq!(reasons.len(), EXCEPTION_HISTORY_SIZE);
    assert_eq!(reasons[0], "boom 1", "{reasons:?}");
    assert_eq!(
        reasons[EXCEPTION_HISTORY_SIZE - 1],
        "last boom",
        "{reasons:?}"
    );
}

/// `a` → `b` → `c`, forward, blocking, parallelism 1: three regions, one stage each.
fn three_stages() -> JobGraph {
    let mut g = JobGraph::builder("three stages");
    let a = g.vertex("a", "numbers", 1).index();
    let b = g.vertex("b", "map", 1).index();
    let c = g.vertex("c", "collect", 1).index();
    g.edge(a, b, DistributionPattern::Forward, ExchangeMode::Blocking);
    g.edge(b, c, DistributionPattern::Forward, ExchangeMode::Blocking);
    g.restart_strategy(fixed_delay(1));
    g.build(|_| true).expect("a valid graph")
}

#[test]
fn each_stage_is_released_once_the_next_one_finished() {
    let mut h = Harness::new(three_stages(), &[1]);
    h.start();
    h.run("a", 0);
    let a = h.attempt("a", 0);
    assert_eq!(deployments(&h.finish("a", 0)), [deployed("b", 0, 0)]);
    h.run("b", 0);
    let actions = h.finish("b", 0);
    assert_eq!(
        actions[0],
        results_released(0, &[(a, 0)]),
        "b read all of a"
    );
    assert_eq!(deployments(&actions), [deployed("c", 0, 0)]);
    h.run("c", 0);
    // The job's end releases the rest (b's results): no release of its own before.
    assert_eq!(h.finish("c", 0), released(&[0], JobStatus::Finished));
}

#[test]
fn a_stage_that_runs_again_reruns_the_released_stage_it_reads() {
    let mut h = Harness::new(three_stages(), &[1]);
    h.start();
    for vertex in ["a", "b"] {
        h.run(vertex, 0);
        h.finish(vertex, 0);
    }
    // tm-0 goes with b's results, which c (not run yet) needs: b runs again, and so must a,
    // whose results were released when b finished. Without that, b would be deployed alone,
    // find a's partition gone and fail a second time.
    assert_eq!(h.lose(0), [restart_after(1)]);
    assert_eq!(h.master.details().restarts, 1, "one failure, not two");
    h.scheduler.add_task_manager(tm(1), 1);
    assert_eq!(deployments(&h.restart_due(1)), [deployed("a", 0, 1)]);
    assert_eq!(h.subtask("a", 0).attempt_number, 1);
    for vertex in ["a", "b", "c"] {
        h.run(vertex, 0);
        if vertex == "c" {
            assert_eq!(h.finish(vertex, 0), released(&[1], JobStatus::Finished));
        } else {
            h.finish(vertex, 0);
        }
    }
    assert_eq!(h.master.details().restarts, 1);
}
