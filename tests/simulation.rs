//! The deterministic simulation of the whole cluster (src/sim): many seeded fault schedules over
//! the real protocol code, every invariant checked, every seed replayable.
//!
//! - `cargo test --test simulation`: the CI sweep (`FLINT_SIM_SEEDS`, default below) and the
//!   replay check.
//! - `FLINT_SIM_FIRST_SEED=n` starts every sweep at seed `n` instead of 0 (with
//!   `FLINT_SIM_SEEDS` and the others, a sweep of schedules CI never runs).
//! - `FLINT_SIM_SEED=n cargo test --test simulation -- --nocapture replay`: runs seed `n` alone
//!   and prints its whole trace (with `FLINT_SIM_NON_COOPERATIVE=1`, a seed of the sweep with
//!   tasks that ignore cancel).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::thread;

use std::time::Duration;

use flint::job::states::JobStatus;
use flint::sim::network::NetParams;
use flint::sim::scenario::{Action, JobKind, JobMix, Scenario, Step};
use flint::sim::{SimOptions, SimReport, run_seed};

/// Seeds per `cargo test` run unless `FLINT_SIM_SEEDS` says otherwise (issue 12: at least
/// 10,000 within three minutes on two cores; the test profile is optimized for it, Cargo.toml).
const DEFAULT_SEEDS: u64 = 10_000;

/// Seeds of the sweep with tasks that ignore cancel unless `FLINT_SIM_STUCK_SEEDS` says
/// otherwise.
const DEFAULT_STUCK_SEEDS: u64 = 200;

/// Seeds of the data-plane sweep unless `FLINT_SIM_DATA_SEEDS` says otherwise.
const DEFAULT_DATA_SEEDS: u64 = 100;
/// Seeds of the typed-program sweep in every `cargo test`.
const DEFAULT_PROGRAM_SEEDS: u64 = 100;

/// Seeds of the failure-semantics sweep unless `FLINT_SIM_FAILURE_SEEDS` says otherwise.
const DEFAULT_FAILURE_SEEDS: u64 = 200;

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// The `count` seeds a sweep runs: from 0, or from `FLINT_SIM_FIRST_SEED` (to explore fault
/// schedules past the ones every `cargo test` runs; a failing seed's replay command is the
/// same, as a seed is a seed wherever a sweep starts).
fn seed_range(count: u64) -> std::ops::Range<u64> {
    let first = env_u64("FLINT_SIM_FIRST_SEED").unwrap_or(0);
    first..first.saturating_add(count)
}

/// Runs `seeds` on as many threads as the machine has cores (each seed on its own runtime).
fn sweep(seeds: impl Iterator<Item = u64> + Send) -> Vec<SimReport> {
    sweep_with(seeds, SimOptions::new)
}

/// Runs `seeds` as [`sweep`] does, each with the options `options` makes for it.
fn sweep_with(
    seeds: impl Iterator<Item = u64> + Send,
    options: impl Fn(u64) -> SimOptions + Sync,
) -> Vec<SimReport> {
    let mut reports = on_every_core(seeds, |seed| run_seed(&options(seed)));
    reports.sort_by_key(|r| r.seed);
    reports
}

/// `run` of every seed, on as many threads as the machine has cores, in no set order.
fn on_every_core<R: Send>(
    seeds: impl Iterator<Item = u64> + Send,
    run: impl Fn(u64) -> R + Sync,
) -> Vec<R> {
    let seeds = Mutex::new(seeds);
    let results = Mutex::new(Vec::new());
    let threads = thread::available_parallelism().map_or(2, |n| n.get());
    thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                loop {
                    let Some(seed) = seeds.lock().unwrap().next() else {
                        return;
                    };
                    let result = run(seed);
                    results.lock().unwrap().push(result);
                }
            });
        }
    });
    results.into_inner().unwrap()
}

/// Prints every failed seed of a sweep with its violations and, if the sweep has one, the
/// command that replays it (`replay`, with `{seed}` filled in), then fails the test if any
/// seed failed.
fn assert_every_seed_passed(sweep: &str, replay: Option<&str>, reports: &[SimReport]) {
    let failed: Vec<&SimReport> = reports.iter().filter(|r| !r.passed()).collect();
    for report in &failed {
        match replay {
            Some(replay) => eprintln!(
                "{sweep} seed {} failed (replay: {}):",
                report.seed,
                replay.replace("{seed}", &report.seed.to_string())
            ),
            None => eprintln!("{sweep} seed {} failed:", report.seed),
        }
        for violation in &report.violations {
            eprintln!("  {violation}");
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {} {sweep} seeds failed: {:?}",
        failed.len(),
        reports.len(),
        failed.iter().map(|r| r.seed).collect::<Vec<_>>()
    );
}

/// What a sweep's jobs came to: finished, failed (by reason), cancelled, refused. Printed by
/// every sweep, so a change that makes jobs fail more (within what the invariants allow) shows.
fn outcome_report(reports: &[SimReport]) -> String {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for report in reports {
        for (_, status) in &report.jobs {
            let key = match status {
                Some(status) => format!("{status:?}").to_lowercase(),
                None => "refused or unanswered".to_owned(),
            };
            *counts.entry(key).or_default() += 1;
        }
    }
    let mut why: BTreeMap<&'static str, usize> = BTreeMap::new();
    for (_, reason) in reports.iter().flat_map(|r| &r.failures) {
        *why.entry(failure_kind(reason)).or_default() += 1;
    }
    let jobs: usize = counts.values().sum();
    format!(
        "{} seeds, {jobs} jobs: {}; failed because: {}",
        reports.len(),
        counts
            .iter()
            .map(|(k, n)| format!("{n} {k}"))
            .collect::<Vec<_>>()
            .join(", "),
        if why.is_empty() {
            "-".to_owned()
        } else {
            why.iter()
                .map(|(k, n)| format!("{n} {k}"))
                .collect::<Vec<_>>()
                .join(", ")
        }
    )
}

/// A failure reason without its ids.
fn failure_kind(reason: &str) -> &'static str {
    const KINDS: [(&str, &str); 8] = [
        (
            "NoResourceAvailable",
            "no slots for the slot request timeout",
        ),
        ("was lost", "a TaskManager was lost"),
        ("did not take the task", "a deployment went unanswered"),
        ("refused the task", "a TaskManager refused a deployment"),
        ("is unreachable", "a TaskManager was unreachable"),
        ("vanished", "a task vanished from its TaskManager"),
        ("fail-once", "the fail-once operator"),
        (
            "invalid configuration",
            "an invalid configuration, not restarted",
        ),
    ];
    KINDS
        .iter()
        .find(|(pattern, _)| reason.contains(pattern))
        .map_or("other", |(_, kind)| kind)
}

#[test]
fn every_invariant_holds_over_the_seed_sweep() {
    if env_u64("FLINT_SIM_SEED").is_some() {
        return; // a replay run
    }
    let count = env_u64("FLINT_SIM_SEEDS").unwrap_or(DEFAULT_SEEDS);
    #[allow(clippy::disallowed_methods)] // the sweep's wall time, for its report
    let started = std::time::Instant::now();
    let reports = sweep(seed_range(count));
    eprintln!(
        "classic sweep in {:.1} s: {}",
        started.elapsed().as_secs_f64(),
        outcome_report(&reports)
    );
    assert_every_seed_passed(
        "classic",
        Some("FLINT_SIM_SEED={seed} cargo test --test simulation -- --nocapture replay"),
        &reports,
    );
}

/// Typed programs among the faults: a join through the dataflow API (its TaskManagers rebuild
/// the plan from the program's code) checked line for line, beside WordCount.
/// `FLINT_SIM_PROGRAMS_SEED=n` replays seed `n` of it with its trace.
#[test]
fn every_invariant_holds_over_the_programs_sweep() {
    if env_u64("FLINT_SIM_SEED").is_some() {
        return; // a replay run
    }
    let options = |seed| {
        let mut options = SimOptions::new(seed);
        options.shape.jobs = JobMix::Programs;
        options
    };
    if let Some(seed) = env_u64("FLINT_SIM_PROGRAMS_SEED") {
        let mut options = options(seed);
        options.keep_trace = true;
        let report = run_seed(&options);
        for line in &report.trace {
            println!("{line}");
        }
        assert!(report.passed(), "{:#?}", report.violations);
        return;
    }
    let count = env_u64("FLINT_SIM_PROGRAMS_SEEDS").unwrap_or(DEFAULT_PROGRAM_SEEDS);
    #[allow(clippy::disallowed_methods)] // the sweep's wall time, for its report
    let started = std::time::Instant::now();
    let reports = sweep_with(seed_range(count), options);
    eprintln!(
        "programs sweep in {:.1} s: {}",
        started.elapsed().as_secs_f64(),
        outcome_report(&reports)
    );
    assert_every_seed_passed(
        "programs",
        Some("FLINT_SIM_PROGRAMS_SEED={seed} cargo test --test simulation -- --nocapture programs"),
        &reports,
    );
    for wanted in [JobKind::TypedJoin, JobKind::ShippedWordCount] {
        let finished = reports
            .iter()
            .flat_map(|r| &r.jobs)
            .filter(|(kind, status)| *kind == wanted && *status == Some(JobStatus::Finished))
            .count();
        assert!(
            count < 10 || finished > 0,
            "no {wanted:?} job finished in {count} seeds"
        );
    }
}

/// A seed of the data-plane sweep.
fn data_plane_options(seed: u64) -> SimOptions {
    let mut options = SimOptions::new(seed);
    options.shape.jobs = JobMix::DataPlane;
    // Silent jobs take one to two minutes each, and a job waiting for slots runs after the
    // ones before it.
    options.quiet_deadline = Duration::from_secs(900);
    options
}

/// Data-plane seeds 751 and 1381 (tiny request rounds): an early-ending consumer finished while
/// its subscription to a producer on another TaskManager still waited for its round, and its
/// TaskManager crashed before the subscription and its release left. The producer waited for
/// room in a subpartition nobody would read, and the job ran for ever. The JobManager now
/// releases what a task that finished early leaves unread at its running producers.
#[test]
fn data_plane_seeds_751_and_1381_a_consumer_dead_after_ending_early_leaves_no_producer_waiting() {
    for seed in [751, 1381] {
        let report = run_seed(&data_plane_options(seed));
        assert!(report.passed(), "seed {seed}: {:#?}", report.violations);
    }
}

/// The data plane among the faults: producers silent for minutes of virtual time, slow
/// consumers, WordCount (checked exact) with TaskManagers crashing mid-stream.
/// `FLINT_SIM_DATA_SEED=n` replays seed `n` of it with its trace.
#[test]
fn every_invariant_holds_over_the_data_plane_sweep() {
    if env_u64("FLINT_SIM_SEED").is_some() {
        return; // a replay run
    }
    let options = data_plane_options;
    if let Some(seed) = env_u64("FLINT_SIM_DATA_SEED") {
        let mut options = options(seed);
        options.keep_trace = true;
        let report = run_seed(&options);
        for line in &report.trace {
            println!("{line}");
        }
        assert!(report.passed(), "{:#?}", report.violations);
        return;
    }
    let count = env_u64("FLINT_SIM_DATA_SEEDS").unwrap_or(DEFAULT_DATA_SEEDS);
    #[allow(clippy::disallowed_methods)] // the sweep's wall time, for its report
    let started = std::time::Instant::now();
    let reports = sweep_with(seed_range(count), options);
    eprintln!(
        "data-plane sweep in {:.1} s: {}",
        started.elapsed().as_secs_f64(),
        outcome_report(&reports)
    );
    assert_every_seed_passed(
        "data-plane",
        Some("FLINT_SIM_DATA_SEED={seed} cargo test --test simulation -- --nocapture data_plane"),
        &reports,
    );
    let finished = |wanted: JobKind| {
        reports
            .iter()
            .flat_map(|r| &r.jobs)
            .filter(|(kind, status)| *kind == wanted && *status == Some(JobStatus::Finished))
            .count()
    };
    assert!(
        count < 30 || finished(JobKind::Silent) > 0,
        "no silent-producer job finished in {count} seeds"
    );
    // Producer lists travel once per TaskManager through the simulated network (lost and
    // reordered frames included); a TaskManager missing one refuses and gets it again.
    let (sent, naming, unknown) = reports.iter().fold((0, 0, 0), |(s, n, u), r| {
        let d = r.network.deployments;
        (s + d.sent, n + d.naming_lists, u + d.unknown_lists)
    });
    eprintln!(
        "data-plane deployments: {sent} SubmitTask frames, {naming} naming a producer list \
         sent before, {unknown} refused for an unknown list (and sent again with it)"
    );
    assert!(
        count < 30 || (naming > 0 && finished(JobKind::BatchWordCount) > 0),
        "no deployment named a producer list, or no batch WordCount finished, in {count} seeds"
    );
}

/// Issue 12's elements among the classic faults: TaskManagers that give up on the JobManager
/// first (a one-way cut longer than the heartbeat timeout) while they hold finished blocking
/// results, operator resizes while a wide job has grown the pool, and shrinks while new workers
/// register, and intruders without the secret connecting to the JobManager (silent, dripping,
/// or shaking hands with a wrong secret: each must be dropped). Besides every invariant, the
/// operator's size must stand at the end.
/// `FLINT_SIM_FAILURE_SEED=n` replays seed `n` of it with its trace.
#[test]
fn every_invariant_holds_over_the_failure_sweep() {
    if env_u64("FLINT_SIM_SEED").is_some() {
        return; // a replay run
    }
    let options = |seed| {
        let mut options = SimOptions::new(seed);
        options.shape.failures = true;
        options.shape.intruders = true;
        options
    };
    if let Some(seed) = env_u64("FLINT_SIM_FAILURE_SEED") {
        let mut options = options(seed);
        options.keep_trace = true;
        let report = run_seed(&options);
        for line in &report.trace {
            println!("{line}");
        }
        assert!(report.passed(), "{:#?}", report.violations);
        return;
    }
    let count = env_u64("FLINT_SIM_FAILURE_SEEDS").unwrap_or(DEFAULT_FAILURE_SEEDS);
    let reports = sweep_with(seed_range(count), options);
    eprintln!("failure sweep, {count} seeds: {}", outcome_report(&reports));
    assert_every_seed_passed(
        "failure-sweep",
        Some(
            "FLINT_SIM_FAILURE_SEED={seed} cargo test --test simulation -- --nocapture failure_sweep",
        ),
        &reports,
    );
}

/// Issue 12, item 4: tasks that ignore their cancellation, among sleep and fail-once jobs
/// (whose failovers cancel them too), cancels and the usual faults: every cancel and failover
/// still ends, through the TaskManager's cancellation watchdog failing the TaskManager and the
/// resource manager replacing it. `FLINT_SIM_STUCK_SEEDS` sets the count.
#[test]
fn every_invariant_holds_with_tasks_that_ignore_cancel() {
    if env_u64("FLINT_SIM_SEED").is_some() {
        return; // a replay run
    }
    let count = env_u64("FLINT_SIM_STUCK_SEEDS").unwrap_or(DEFAULT_STUCK_SEEDS);
    let options = |seed| {
        let mut options = SimOptions::new(seed);
        options.shape.jobs = JobMix::NonCooperative;
        options
    };
    let reports = sweep_with(seed_range(count), options);
    eprintln!("non-cooperative sweep: {}", outcome_report(&reports));
    assert_every_seed_passed("non-cooperative", None, &reports);
}

/// Issue 33, item 4 (drain, then free): in non-cooperative seed 223 a TaskManager loses its
/// JobManager connection while a task that ignores cancel runs. It keeps that task's slot and
/// registers again only once the task ended (here: once the watchdog failed it). A TaskManager
/// that registers at once (the rule switched off) fails this seed: "registered while ... of its
/// earlier JobManager connection still runs".
#[test]
fn seed_223_a_task_manager_registers_again_only_once_its_cancelled_tasks_ended() {
    let mut options = SimOptions::new(223);
    options.shape.jobs = JobMix::NonCooperative;
    let report = run_seed(&options);
    assert!(report.passed(), "{:#?}", report.violations);
}

/// Issue 12, item 4: cancelling a job whose task is stuck for 15 to 30 s where it cannot see
/// the cancel ends it within the 10 s cancellation timeout (and a heartbeat): the TaskManager
/// fails itself and a replacement boots. Without the watchdog the cancel waited for the task.
#[test]
fn a_cancelled_task_that_ignores_cancel_fails_its_task_manager_within_the_timeout() {
    let mut options = SimOptions::new(12);
    options.scenario = Some(Scenario {
        initial_pool: 1,
        max_pool: 1,
        slots: 1,
        net: NetParams::default(),
        fault_phase: Duration::from_secs(2),
        steps: vec![
            Step {
                at: Duration::ZERO,
                action: Action::Submit {
                    kind: JobKind::IgnoresCancel,
                    parallelism: 1,
                },
            },
            Step {
                at: Duration::from_secs(1),
                action: Action::Cancel(0),
            },
        ],
    });
    let report = run_seed(&options);
    assert!(report.passed(), "{:#?}", report.violations);
    assert_eq!(
        report.jobs,
        vec![(JobKind::IgnoresCancel, Some(JobStatus::Canceled))],
        "{report:#?}"
    );
    assert_eq!(
        report.nodes, 3,
        "the JobManager, the stuck TaskManager, its replacement"
    );
    assert!(report.simulated < Duration::from_secs(15), "{report:#?}");
}

/// Issue 11: a pipelined all-to-all producer silent for longer than the ask timeout failed its
/// remote consumers ("Mailbox has closed") and the job restarted until it gave up. Two
/// TaskManagers of one slot, so every consumer reads one producer across the network; no
/// faults.
#[test]
fn a_producer_silent_for_minutes_does_not_fail_its_remote_consumers() {
    let mut options = SimOptions::new(11);
    options.scenario = Some(Scenario {
        initial_pool: 2,
        max_pool: 2,
        slots: 1,
        net: NetParams::default(),
        fault_phase: Duration::from_secs(1),
        steps: vec![Step {
            at: Duration::ZERO,
            action: Action::Submit {
                kind: JobKind::Silent,
                parallelism: 2,
            },
        }],
    });
    let report = run_seed(&options);
    assert!(report.passed(), "{:#?}", report.violations);
    assert_eq!(
        report.jobs,
        vec![(JobKind::Silent, Some(JobStatus::Finished))],
        "{report:#?}"
    );
    assert!(report.simulated >= Duration::from_secs(60), "{report:#?}");
}

#[test]
fn replay() {
    let Some(seed) = env_u64("FLINT_SIM_SEED") else {
        return;
    };
    let mut options = SimOptions::new(seed);
    options.keep_trace = true;
    if std::env::var_os("FLINT_SIM_NON_COOPERATIVE").is_some() {
        options.shape.jobs = JobMix::NonCooperative; // a seed of the non-cooperative sweep
    }
    let report = run_seed(&options);
    for line in &report.trace {
        println!("{line}");
    }
    println!(
        "seed {seed}: digest {}, {} trace lines, {:?} simulated, {} nodes, jobs {:?}, {:?}",
        report.digest,
        report.trace_len,
        report.simulated,
        report.nodes,
        report.jobs,
        report.network
    );
    assert!(
        report.passed(),
        "seed {seed} failed: {:#?}",
        report.violations
    );
}

/// Regression (seed 1043 of the first sweep): a TaskManager restarted on its machine came back
/// with the same resource id and address and was taken for a retry of its old registration;
/// then a lost `UpdateTaskExecutionState` (a tell) left a finished task DEPLOYING forever. Fixed
/// by the TaskManager session id in the registration and by acknowledged, retried updates.
#[test]
fn seed_1043_restarted_task_manager_and_lost_task_update() {
    let report = run_seed(&SimOptions::new(1043));
    assert!(report.passed(), "{:#?}", report.violations);
}

/// Regression (issue 12, item 9; seeds of the 30,000-seed sweep): jobs stuck in DEPLOYING. A
/// TaskManager registered by a later attempt took an earlier attempt's late failure for its
/// own and dropped its JobManager gateway: no heartbeats, no task updates, until its heartbeat
/// timeout made it register again and drop the tasks it had acknowledged; the JobManager left
/// DEPLOYING tasks out of heartbeat reconciliation, so they stayed DEPLOYING forever. Fixed in
/// the TaskManager (only a failure the registration takes drops the gateway) and in the
/// JobManager (an acknowledged deployment missing from two heartbeats has failed).
#[test]
fn seed_21150_word_count_stuck_deploying_after_a_stale_registration_failure() {
    let report = run_seed(&SimOptions::new(21150));
    assert!(report.passed(), "{:#?}", report.violations);
}

/// Regression (issue 12, item 9): as seed 21150, with a sleep job (`generate[0]`, `sleep[0]`
/// DEPLOYING, `sink[0]` CREATED).
#[test]
fn seed_24138_sleep_job_stuck_deploying_after_a_stale_registration_failure() {
    let report = run_seed(&SimOptions::new(24138));
    assert!(report.passed(), "{:#?}", report.violations);
}

/// Named in issue 12 with seeds 21150 and 24138; it passed on this branch's base already
/// (kept so the sweep's third reported seed stays covered).
#[test]
fn seed_28667_kept_from_the_deploying_sweep() {
    let report = run_seed(&SimOptions::new(28667));
    assert!(report.passed(), "{:#?}", report.violations);
}

/// Regression (issue 12, found by the stricter `jobs_ended`): over a lossy network and no
/// fault at all, a fail-once job FAILED: a finished task's final report was lost once (retried
/// only after the ask timeout) and two heartbeats without the attempt came first, so the
/// JobManager failed it as vanished, again and again. The TaskManager now lists an ended
/// attempt in its heartbeats until its final report is acknowledged.
#[test]
fn seed_1453_finished_task_failed_as_vanished_while_its_report_was_retried() {
    let report = run_seed(&SimOptions::new(1453));
    assert!(report.passed(), "{:#?}", report.violations);
}

/// Regression (issue 12, found by the stricter `jobs_ended`): one 3 s pause of the only
/// TaskManager, and a wide sleep job FAILED 56 ms after it resumed: submissions delivered late
/// held its slots and five deployments refused with `NoFreeSlot` used up four restarts. Such a
/// refusal is now retried for up to 2 s.
#[test]
fn seed_461_refused_deployments_after_a_pause_exhausted_the_restarts() {
    let report = run_seed(&SimOptions::new(461));
    assert!(report.passed(), "{:#?}", report.violations);
}

/// Regression (the classic sweep from seed 1,100,000, twenty-second session): the JobManager and
/// then a TaskManager paused; the TaskManager, its heartbeats unacknowledged, registered anew,
/// and only then took a submission the JobManager had sent its earlier registration. That sleep
/// task held the TaskManager's one slot while the JobManager, which had failed it with the old
/// registration, placed the job's next attempts there: each refused with `NoFreeSlot` until the
/// restarts ran out. A heartbeat listing attempts no job has placed there now cancels them.
#[test]
fn seed_1100250_an_attempt_the_jobmanager_moved_past_is_cancelled() {
    let report = run_seed(&SimOptions::new(1_100_250));
    assert!(report.passed(), "{:#?}", report.violations);
}

/// Regression (the 30,000-seed sweep after the RUNNING fold changed the runs' timing): the
/// network lost two `SubmitTask` frames of a fail-once job, the JobManager failed both
/// deployments at the ask timeout, and the job used up its restarts — failures the run caused
/// but the job-outcome invariant did not count. A lost deployment (or its answer) now counts
/// as a disturbance (`NetStats::deployments_lost`, decoded with the real codec). Seed 25269
/// lost none once deployments were batched (`SubmitTasks`); seed 25062 loses two and fails a
/// job.
#[test]
fn seed_25062_lost_deployment_frames_count_as_disturbances() {
    let report = run_seed(&SimOptions::new(25062));
    assert!(report.passed(), "{:#?}", report.violations);
    assert!(report.network.deployments_lost >= 2, "{:?}", report.network);
}

/// A sample of seeds, run twice, gives the same digests. Seeds 15841, 55436 and 110869 are kept:
/// they replayed differently until the transport stopped using tokio's `watch` (which wakes its
/// waiters in a random order): a TaskManager reconnecting after a partition wrote its queued
/// messages in a different order each run. See `flint::base::latch`.
#[test]
fn the_same_seed_gives_the_same_trace() {
    if env_u64("FLINT_SIM_SEED").is_some() {
        return;
    }
    let seeds: Vec<u64> = (0..100)
        .map(|i| i * 7919 + 3)
        .chain([15841, 55436, 110869])
        .collect();
    let first = sweep(seeds.clone().into_iter());
    let second = sweep(seeds.into_iter());
    let differing: Vec<u64> = first
        .iter()
        .zip(&second)
        .filter(|(a, b)| a.digest != b.digest)
        .map(|(a, _)| a.seed)
        .collect();
    for report in &first {
        assert!(
            report.trace_len > 10,
            "seed {} recorded almost nothing",
            report.seed
        );
    }
    assert!(
        differing.is_empty(),
        "{} of {} seeds gave two different traces: {differing:?}",
        differing.len(),
        first.len()
    );
}

/// Seeds of the high-availability sweep unless `FLINT_SIM_HA_SEEDS` says otherwise (about 10 s
/// on 2 cores: 1,500 seeds ran in 28 s alone).
const DEFAULT_HA_SEEDS: u64 = 500;

/// Issue 13: two JobManagers (three one seed in four) running the real leader loop against the simulated coordination
/// service, TaskManagers following the published leader, job graphs in the store; JobManagers
/// cut from the service, paused past the session timeout and killed, among TaskManager and
/// network faults, operators resizing the pool. At most one leader acts (no deployment or
/// worker start under a superseded session), no job runs attempts of two leaders, every stored
/// job is recovered and ends, the operator's pool size stands (see `flint::sim::ha`). Ten of the seeds run twice: same digest.
/// `FLINT_SIM_HA_SEED=n cargo test --test simulation -- --nocapture ha_sweep` replays seed `n`.
#[test]
fn ha_sweep() {
    use flint::sim::ha::{HaOptions, run_ha_seed};
    if env_u64("FLINT_SIM_SEED").is_some() {
        return; // a replay run
    }
    if let Some(seed) = env_u64("FLINT_SIM_HA_SEED") {
        let mut options = HaOptions::for_sweep(seed);
        options.keep_trace = true;
        let report = run_ha_seed(&options);
        for line in &report.sim.trace {
            println!("{line}");
        }
        println!(
            "HA seed {seed}: digest {}, {} leaderships, {:?} simulated, jobs {:?}",
            report.sim.digest, report.leaderships, report.sim.simulated, report.sim.jobs
        );
        assert!(report.passed(), "{:#?}", report.sim.violations);
        return;
    }
    let count = env_u64("FLINT_SIM_HA_SEEDS").unwrap_or(DEFAULT_HA_SEEDS);
    #[allow(clippy::disallowed_methods)] // the sweep's wall time, for its report
    let started = std::time::Instant::now();
    let seeds = seed_range(count);
    let replayed = seeds.start..seeds.start.saturating_add(count.min(10));
    let mut reports = on_every_core(seeds.chain(replayed), |seed| {
        run_ha_seed(&HaOptions::for_sweep(seed))
    });
    reports.sort_by_key(|r| r.sim.seed);
    let mut digests: BTreeMap<u64, String> = BTreeMap::new();
    let mut differing = Vec::new();
    for report in &reports {
        if let Some(digest) = digests.insert(report.sim.seed, report.sim.digest.clone())
            && digest != report.sim.digest
        {
            differing.push(report.sim.seed);
        }
    }
    let failovers: usize = reports
        .iter()
        .map(|r| r.leaderships.saturating_sub(1))
        .sum();
    let deployed: u32 = reports.iter().map(|r| r.deposed_deployments).sum();
    let restored: u64 = reports.iter().map(|r| r.restored_tasks).sum();
    let sims: Vec<SimReport> = reports.iter().map(|r| r.sim.clone()).collect();
    eprintln!(
        "HA sweep in {:.1} s, {failovers} failovers, {restored} finished subtasks taken back; deployments of deposed leaders written before and started within the grace: {deployed}; {}",
        started.elapsed().as_secs_f64(),
        outcome_report(&sims)
    );
    assert!(
        differing.is_empty(),
        "HA seeds gave two different traces: {differing:?}"
    );
    assert_every_seed_passed(
        "HA",
        Some("FLINT_SIM_HA_SEED={seed} cargo test --test simulation -- --nocapture ha_sweep"),
        &sims,
    );
    assert!(
        count < 20 || failovers > 0,
        "no leadership changed hands in {count} seeds"
    );
}

/// Regression (the 20,000-seed HA sweep of issue 33's session): a TaskManager's link to the
/// leader was cut while the leader deployed to it; the leader's `SubmitTasks` waited in its
/// endpoint for a connection; the leader lost its leadership and stopped; when the link healed
/// a second later the endpoint connected and sent the stale deployment under the old session —
/// a frame written by a deposed leader, after the job had ended under the next one. A caller
/// that stopped waiting now withdraws a message that has not left the node.
#[test]
fn ha_seed_6950_a_deposed_leaders_deployment_waiting_for_a_connection_is_withdrawn() {
    use flint::sim::ha::{HaOptions, run_ha_seed};
    let report = run_ha_seed(&HaOptions::for_sweep(6950));
    assert!(report.passed(), "{:#?}", report.sim.violations);
}
