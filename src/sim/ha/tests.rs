//! Each HA invariant catches a rule broken on purpose, on a hand-made scenario that the code
//! as it is passes.

use super::*;

/// A scenario on a quiet network: `pool` TaskManagers of two slots, then `steps`.
fn scenario(pool: u32, steps: Vec<(Duration, HaAction)>) -> HaScenario {
    HaScenario {
        pool,
        slots: 2,
        net: NetParams::default(),
        fault_phase: Duration::from_secs(12),
        steps,
        recover_workers: false,
    }
}

fn run(seed: u64, scenario: HaScenario, broken: Broken) -> HaReport {
    let mut options = HaOptions::new(seed);
    options.scenario = Some(scenario);
    options.broken = broken;
    run_ha_seed(&options)
}

/// Producers silent for a minute or two: the job surely runs through the fault.
fn silent_job() -> HaAction {
    HaAction::Submit {
        kind: JobKind::Silent,
        parallelism: 1,
    }
}

/// A quick job of `kind` at 300 ms, and the leader killed at 3 s (the job has ended), back 3 s
/// later.
fn finish_then_kill_the_leader(kind: JobKind, parallelism: u32) -> Vec<(Duration, HaAction)> {
    vec![
        (
            Duration::from_millis(300),
            HaAction::Submit { kind, parallelism },
        ),
        (
            Duration::from_secs(3),
            HaAction::Kill {
                target: HaTarget::Leader,
                restart_after: Duration::from_secs(3),
            },
        ),
    ]
}

/// Asserts the code as it is passes `scenario` (with a failover and the job FINISHED), and
/// the broken version fails it with a violation containing `caught`.
fn assert_caught(seed: u64, scenario: HaScenario, broken: Broken, caught: &str) {
    assert_caught_running(seed, scenario, broken, caught, JobKind::Silent);
}

/// [`assert_caught`] with a scenario whose one job is of `kind`.
fn assert_caught_running(
    seed: u64,
    scenario: HaScenario,
    broken: Broken,
    caught: &str,
    kind: JobKind,
) {
    let sound = run(seed, scenario.clone(), Broken::Nothing);
    assert!(sound.passed(), "{:#?}", sound.sim.violations);
    assert!(sound.leaderships > 1, "no failover: {sound:#?}");
    assert_eq!(
        sound.sim.jobs,
        vec![(kind, Some(JobStatus::Finished))],
        "{sound:#?}"
    );
    let report = run(seed, scenario, broken);
    assert!(
        report.sim.violations.iter().any(|v| v.contains(caught)),
        "{broken:?} was not caught by `{caught}`: {:#?}",
        report.sim.violations
    );
}

/// (a): election clients that doubt their session only after ten session timeouts keep a
/// JobManager cut from the service leading after its session expired.
#[test]
fn a_leader_that_doubts_its_session_too_late_is_caught_leading_past_its_leadership() {
    let steps = vec![
        (Duration::from_millis(300), silent_job()),
        (
            Duration::from_secs(2),
            HaAction::CutFromCoordination {
                target: HaTarget::Leader,
                duration: Duration::from_secs(6),
            },
        ),
    ];
    assert_caught(
        1,
        scenario(2, steps),
        Broken::LateDoubt,
        "(a) at most one leader",
    );
}

/// (b): TaskManagers that hear of the new leader 10 s late keep running the deposed leader's
/// attempts while the new leader runs the recovered job on the workers it started.
#[test]
fn task_managers_that_hear_of_a_new_leader_late_are_caught_running_two_leaders_attempts() {
    let steps = vec![
        (Duration::from_millis(300), silent_job()),
        (
            Duration::from_secs(2),
            HaAction::Pause {
                target: HaTarget::Leader,
                duration: Duration::from_secs(5),
                client_lag: Duration::ZERO,
            },
        ),
    ];
    assert_caught(2, scenario(2, steps), Broken::LateRetrieval, "(b) job");
}

/// (c): a client that does not store the job graph before it counts the job as submitted: the
/// leader dies, the new one has nothing to recover.
#[test]
fn a_job_not_in_the_store_is_caught_missing_after_the_leader_dies() {
    let steps = vec![
        (Duration::from_millis(300), silent_job()),
        (
            Duration::from_secs(2),
            HaAction::Kill {
                target: HaTarget::Leader,
                restart_after: Duration::from_secs(3),
            },
        ),
    ];
    assert_caught(3, scenario(2, steps), Broken::NoPersist, "not recovered");
}

/// Regression (found by the first HA runs): every leadership of a process derived its actors'
/// ids from the same seed, so a JobManager leading a second time gave out its first
/// leadership's job ids again, and its resource manager asked for workers under ids already
/// taken. Each leadership now gets a seed of its own. jobmanager-0 leads, is cut off, leads
/// again after jobmanager-1 dies; a job is submitted in each of its leaderships.
#[test]
fn a_job_manager_leading_twice_does_not_reuse_its_first_leaderships_ids() {
    let steps = vec![
        (Duration::from_millis(300), silent_job()),
        (
            Duration::from_secs(1),
            HaAction::CutFromCoordination {
                target: HaTarget::Any(0),
                duration: Duration::from_secs(3),
            },
        ),
        (
            Duration::from_secs(5),
            HaAction::Kill {
                target: HaTarget::Any(1),
                restart_after: Duration::from_secs(30),
            },
        ),
        (Duration::from_secs(9), silent_job()),
    ];
    let report = run(4, scenario(2, steps), Broken::Nothing);
    assert!(report.passed(), "{:#?}", report.sim.violations);
    assert!(report.leaderships >= 3, "{report:#?}");
    assert_eq!(
        report.sim.jobs,
        vec![
            (JobKind::Silent, Some(JobStatus::Finished)),
            (JobKind::Silent, Some(JobStatus::Finished))
        ],
        "{report:#?}"
    );
}

/// (a), where it leaves the node: lease renewals that promise an hour let the leader, paused
/// past its session, act the instant it resumes while the standby leads. Here a fail-once
/// job's restart comes due during the pause, and the node's coordination client runs only
/// 500 ms after the node resumes: meanwhile the old JobManager redeploys the job on
/// TaskManagers that follow the new leader already. The lease as it is makes the deployments
/// wait until the leader loop stops the node.
#[test]
fn a_leader_whose_lease_never_lapses_is_caught_deploying_the_instant_it_resumes() {
    let steps = vec![
        (
            Duration::from_millis(300),
            HaAction::Submit {
                kind: JobKind::FailOnce,
                parallelism: 1,
            },
        ),
        (
            Duration::from_millis(400),
            HaAction::Pause {
                target: HaTarget::Leader,
                duration: Duration::from_secs(3),
                client_lag: Duration::from_millis(500),
            },
        ),
    ];
    assert_caught_running(
        5,
        scenario(2, steps),
        Broken::EndlessLease,
        "after a later leadership was granted",
        JobKind::FailOnce,
    );
}

/// (c): a store that forgets the pool size an operator set: after the leader dies the new one
/// starts its pool from the configured size, undoing the operator's resize.
#[test]
fn a_pool_size_not_kept_for_the_next_leader_is_caught_after_the_leader_dies() {
    let steps = vec![
        (Duration::from_millis(300), silent_job()),
        (Duration::from_millis(500), HaAction::SetPoolSize(3)),
        (
            Duration::from_secs(2),
            HaAction::Kill {
                target: HaTarget::Leader,
                restart_after: Duration::from_secs(3),
            },
        ),
    ];
    assert_caught(
        6,
        scenario(2, steps),
        Broken::PoolSizeForgotten,
        "the operator set 3",
    );
}

/// (d): results kept on each JobManager's own disk, and job graphs that cannot be removed: a
/// quick job finishes, the leader dies, and the new leader finds the job's graph with nothing
/// to say it ended — it runs the job again. With the job result store as it is, the new leader
/// never reruns it and answers it from the store.
#[test]
fn a_finished_job_run_again_by_a_new_leader_is_caught() {
    assert_caught_running(
        7,
        scenario(2, finish_then_kill_the_leader(JobKind::Noop, 1)),
        Broken::NoJobResults,
        "(d) an ended job runs again",
        JobKind::Noop,
    );
}

/// (e): jobmanager-1's session expires just as it confirms its leadership after the leader
/// died. The election as it is does not publish and contends again with a new session; a
/// `confirm` that publishes regardless (opening a new session, as Flint's ZooKeeper election
/// once did) leaves a leader without the latch, which the restarted jobmanager-0 then wins.
#[test]
fn a_leader_published_without_the_latch_is_caught() {
    let steps = vec![
        (Duration::from_millis(300), silent_job()),
        (
            Duration::from_secs(1),
            HaAction::ExpireSessionAtConfirm(HaTarget::Any(1)),
        ),
        (
            Duration::from_secs(2),
            HaAction::Kill {
                target: HaTarget::Leader,
                restart_after: Duration::from_secs(2),
            },
        ),
    ];
    assert_caught(
        8,
        scenario(2, steps),
        Broken::ConfirmWithoutLatch,
        "(e) the published leader holds no latch",
    );
}

/// A large job store on a slow ensemble: 500 stored jobs whose pointers take 20 ms each to
/// read (10 s in all, twice the time a leader once had to recover everything before it
/// published itself). The first leader publishes at once, recovers them one by one and stays
/// leader; (c) checks every one of them ended at it.
#[test]
fn a_leader_with_a_large_slow_job_store_publishes_first_and_stays_leader() {
    let mut options = HaOptions::new(9);
    options.scenario = Some(scenario(2, Vec::new()));
    options.stored_jobs = 500;
    options.store_read_latency = Duration::from_millis(20);
    let report = run_ha_seed(&options);
    assert!(report.passed(), "{:#?}", report.sim.violations);
    assert_eq!(report.leaderships, 1, "the leader resigned: {report:#?}");
    assert_eq!(report.sim.jobs.len(), 500);
    assert!(
        report
            .sim
            .jobs
            .iter()
            .all(|(_, status)| *status == Some(JobStatus::Finished)),
        "{:?}",
        report.sim.jobs
    );
}

/// (f): a batch job's first stage finishes, the leader dies while its paced second stage runs,
/// and every TaskManager kept the first stage's results. As it is, the new leader takes the
/// first stage back from the event log (its subtasks `restored`) and reruns only the second;
/// a leader that does not wait for the TaskManagers holding it deploys the first stage again.
#[test]
fn a_new_leader_rerunning_finished_work_that_survived_is_caught() {
    let steps = vec![
        (
            Duration::from_millis(300),
            HaAction::Submit {
                kind: JobKind::PacedBatchWordCount,
                parallelism: 2,
            },
        ),
        (
            Duration::from_millis(1_200),
            HaAction::Kill {
                target: HaTarget::Leader,
                restart_after: Duration::from_secs(3),
            },
        ),
    ];
    let sound = run(11, scenario(2, steps.clone()), Broken::Nothing);
    assert!(sound.passed(), "{:#?}", sound.sim.violations);
    assert!(sound.restored_tasks > 0, "nothing taken back: {sound:#?}");
    assert_caught_running(
        11,
        scenario(2, steps),
        Broken::NoPreviousWorkerWait,
        "(f) finished work runs again",
        JobKind::PacedBatchWordCount,
    );
}

/// (g): a typed join finishes and collects its lines, the leader dies, and the new leader
/// answers the job's results from the job result store. A store that keeps the result but not
/// what the tasks sent back answers the join with nothing.
#[test]
fn collected_records_lost_with_their_leader_are_caught() {
    assert_caught_running(
        8,
        scenario(2, finish_then_kill_the_leader(JobKind::TypedJoin, 2)),
        Broken::NoCollectedRecords,
        "(g) collected records lost",
        JobKind::TypedJoin,
    );
}
