//! Jobs on the embedded cluster: failover, cancellation, restarts, pool growth, bad jobs.
//! Every wait polls with a deadline; `sleep` operators only make tasks last long enough to act on.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use flint::env::ArbiterSpawner;
use flint::job::graph::{DistributionPattern, ExchangeMode, JobGraph, RestartStrategyConfig};
use flint::job::states::{ExecutionState, JobStatus};
use flint::messages::job_manager::JobDetails;
use flint::operators::builtin::sequential_word_count;
use flint::operators::{Operator, OperatorError, OperatorRegistry, TaskIo};
mod common;
use common::{read_counts, scratch, write_text};

use flint::{ClusterConfig, MiniCluster, MiniClusterError};

const DEADLINE: Duration = Duration::from_secs(30);

fn config(pool: u32, slots: u32) -> ClusterConfig {
    let mut config = ClusterConfig::default();
    config.resourcemanager.pool_size = pool;
    config.resourcemanager.check_interval = Duration::from_millis(20);
    config.taskmanager.slots = slots;
    config.heartbeat.interval = Duration::from_millis(50);
    config.heartbeat.timeout = Duration::from_millis(300);
    config.seed = Some(11);
    config
}

fn fixed_delay(attempts: u32) -> RestartStrategyConfig {
    RestartStrategyConfig::FixedDelay {
        attempts,
        delay: Duration::from_millis(20),
    }
}

/// source → sleep → tokenize → count → sink, all pipelined: WordCount whose tasks last
/// `sleep_ms` so a crash lands mid-job.
fn slow_wordcount(input: &Path, output: &Path, parallelism: u32, sleep_ms: u64) -> JobGraph {
    let mut b = JobGraph::builder("slow-wordcount");
    let source = b
        .vertex("source", "text-source", parallelism)
        .config("path", input.display().to_string())
        .index();
    let sleep = b
        .vertex("sleep", "sleep", parallelism)
        .config("ms", sleep_ms.to_string())
        .index();
    let tokenize = b.vertex("tokenize", "tokenize", parallelism).index();
    let count = b.vertex("count", "count-by-key", parallelism).index();
    let sink = b
        .vertex("sink", "file-sink", parallelism)
        .config("path", output.display().to_string())
        .index();
    let pipelined = ExchangeMode::Pipelined;
    b.edge(source, sleep, DistributionPattern::Forward, pipelined)
        .edge(sleep, tokenize, DistributionPattern::Forward, pipelined)
        .edge(tokenize, count, DistributionPattern::AllToAll, pipelined)
        .edge(count, sink, DistributionPattern::Forward, pipelined)
        .restart_strategy(fixed_delay(5));
    b.build(|_| true).unwrap()
}

/// Waits until every subtask of vertex `vertex` runs (the sleeping one: sources may be done).
async fn wait_until_running(
    cluster: &MiniCluster,
    job: flint::base::ids::JobId,
    vertex: usize,
) -> JobDetails {
    let give_up = tokio::time::Instant::now() + DEADLINE;
    loop {
        let details = cluster.job_status(job).await.unwrap();
        let all_running = details.vertices[vertex]
            .subtasks
            .iter()
            .all(|s| s.state == ExecutionState::Running);
        if all_running {
            return details;
        }
        assert!(
            tokio::time::Instant::now() < give_up,
            "never all running: {details:#?}"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

#[actix::test]
async fn a_worker_crash_mid_job_still_gives_exactly_the_sequential_count() {
    let dir = scratch("crash");
    let (input, output) = (dir.join("in.txt"), dir.join("out"));
    write_text(&input, 20_000);
    let cluster = MiniCluster::start(config(2, 4)).unwrap();
    cluster.wait_for_pool(2, DEADLINE).await.unwrap();
    let job = cluster
        .submit_job(slow_wordcount(&input, &output, 4, 400))
        .await
        .unwrap();
    let running = wait_until_running(&cluster, job, 1).await;
    let victim = running.vertices[1].subtasks[0].resource_id.clone().unwrap();
    cluster.kill_worker(&victim).unwrap();
    let details = cluster.wait_for_job(job, DEADLINE).await.unwrap();
    assert_eq!(details.summary.status, JobStatus::Finished, "{details:#?}");
    assert!(details.restarts >= 1, "the crash forced a restart");
    assert!(
        details
            .vertices
            .iter()
            .flat_map(|v| &v.subtasks)
            .all(|s| s.resource_id.as_ref() != Some(&victim)),
        "nothing finished on the dead worker"
    );
    assert_eq!(read_counts(&output), sequential_word_count(&input).unwrap());
    cluster.wait_for_pool(2, DEADLINE).await.unwrap();
    cluster.shutdown().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[actix::test]
async fn cancelling_a_job_cancels_every_task_and_frees_every_slot() {
    let dir = scratch("cancel");
    let (input, output) = (dir.join("in.txt"), dir.join("out"));
    write_text(&input, 100);
    let cluster = MiniCluster::start(config(2, 3)).unwrap();
    let job = cluster
        .submit_job(slow_wordcount(&input, &output, 3, 60_000))
        .await
        .unwrap();
    wait_until_running(&cluster, job, 1).await;
    let busy = cluster.status().await.unwrap();
    assert!(busy.free_slots < busy.total_slots);
    cluster.cancel_job(job).await.unwrap();
    let details = cluster.wait_for_job(job, DEADLINE).await.unwrap();
    assert_eq!(details.summary.status, JobStatus::Canceled);
    // Sources may have finished reading; everything else was cancelled.
    for vertex in &details.vertices {
        for subtask in &vertex.subtasks {
            let expected = if vertex.name == "source" {
                [ExecutionState::Finished, ExecutionState::Canceled].contains(&subtask.state)
            } else {
                subtask.state == ExecutionState::Canceled
            };
            assert!(
                expected,
                "{} {}: {}",
                vertex.name, subtask.subtask, subtask.state
            );
        }
    }
    let status = cluster.status().await.unwrap();
    assert_eq!(status.free_slots, status.total_slots, "every slot is free");
    // Cancelling again is an error, not a change.
    assert!(cluster.cancel_job(job).await.is_err());
    cluster.shutdown().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

fn fail_once_graph(restart: RestartStrategyConfig) -> JobGraph {
    let mut b = JobGraph::builder("fail-once");
    let source = b
        .vertex("source", "noop", 2)
        .config("count", "1000")
        .index();
    let flaky = b.vertex("flaky", "fail-once", 2).index();
    let sink = b.vertex("sink", "noop", 2).index();
    b.edge(
        source,
        flaky,
        DistributionPattern::Forward,
        ExchangeMode::Pipelined,
    )
    .edge(
        flaky,
        sink,
        DistributionPattern::AllToAll,
        ExchangeMode::Blocking,
    )
    .restart_strategy(restart);
    b.build(|_| true).unwrap()
}

#[actix::test]
async fn a_failing_task_is_restarted_and_the_job_finishes() {
    let cluster = MiniCluster::start(config(2, 2)).unwrap();
    let job = cluster
        .submit_job(fail_once_graph(fixed_delay(3)))
        .await
        .unwrap();
    let details = cluster.wait_for_job(job, DEADLINE).await.unwrap();
    assert_eq!(details.summary.status, JobStatus::Finished, "{details:#?}");
    assert!(details.restarts >= 1);
    let flaky = &details.vertices[1];
    assert!(flaky.subtasks.iter().all(|s| s.attempt_number >= 1));
    let timestamps: BTreeMap<_, _> = details.status_timestamps.iter().copied().collect();
    assert!(timestamps.contains_key(&JobStatus::Running));
    assert!(timestamps.contains_key(&JobStatus::Finished));
    cluster.shutdown().await.unwrap();
}

#[actix::test]
async fn with_restart_strategy_none_a_failure_fails_the_job_with_its_reason() {
    let cluster = MiniCluster::start(config(2, 2)).unwrap();
    let job = cluster
        .submit_job(fail_once_graph(RestartStrategyConfig::None))
        .await
        .unwrap();
    let details = cluster.wait_for_job(job, DEADLINE).await.unwrap();
    assert_eq!(details.summary.status, JobStatus::Failed);
    let failure = details.failure.unwrap();
    assert!(failure.contains("fail-once"), "{failure}");
    assert!(failure.contains("flaky"), "{failure}");
    // The cluster keeps serving: a good job still runs.
    let mut b = JobGraph::builder("after");
    b.vertex("only", "noop", 2).config("count", "10");
    let next = cluster
        .submit_job(b.build(|_| true).unwrap())
        .await
        .unwrap();
    let details = cluster.wait_for_job(next, DEADLINE).await.unwrap();
    assert_eq!(details.summary.status, JobStatus::Finished);
    cluster.shutdown().await.unwrap();
}

/// The pool tests (and the queueing and exchange tests further down) are not about failure
/// detection, and their jobs never restart: a heartbeat answered late under the parallel load of
/// this binary (300 ms elsewhere here) must not fail them. Released TaskManagers leave the
/// JobManager at once, not by heartbeat.
const DEMAND_TEST_HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(5);

fn sleepy(parallelism: u32, ms: u64, restart: RestartStrategyConfig) -> JobGraph {
    let mut b = JobGraph::builder("sleepy");
    b.vertex("nap", "sleep", parallelism)
        .config("ms", ms.to_string());
    b.restart_strategy(restart);
    b.build(|_| true).unwrap()
}

#[actix::test]
async fn the_pool_grows_with_demand_and_shrinks_back_when_idle() {
    let mut config = config(1, 2);
    config.resourcemanager.taskmanager_timeout = Duration::from_millis(200);
    config.heartbeat.timeout = DEMAND_TEST_HEARTBEAT_TIMEOUT;
    let cluster = MiniCluster::start(config).unwrap();
    cluster.wait_for_pool(1, DEADLINE).await.unwrap();
    let job = cluster
        .submit_job(sleepy(6, 300, RestartStrategyConfig::None))
        .await
        .unwrap();
    cluster.wait_for_pool(3, DEADLINE).await.unwrap();
    let details = cluster.wait_for_job(job, DEADLINE).await.unwrap();
    assert_eq!(
        details.summary.status,
        JobStatus::Finished,
        "{:?}",
        details.failure
    );
    cluster.wait_for_pool(1, DEADLINE).await.unwrap();
    cluster.shutdown().await.unwrap();
}

/// Issue 34: one job's demand grows the pool by at most `resourcemanager.max-workers-per-job`
/// TaskManagers beyond the slots it holds; its regions then run in waves on them. Without the
/// cap this job would take the pool to 3 (6 one-slot regions on 2-slot TaskManagers).
#[actix::test]
#[allow(clippy::disallowed_methods)] // samples the cluster while a real-time job runs
async fn one_jobs_demand_grows_the_pool_by_at_most_max_workers_per_job() {
    let mut config = config(1, 2);
    config.resourcemanager.max_workers_per_job = 2;
    config.heartbeat.timeout = DEMAND_TEST_HEARTBEAT_TIMEOUT;
    let cluster = MiniCluster::start(config).unwrap();
    cluster.wait_for_pool(1, DEADLINE).await.unwrap();
    let job = cluster
        .submit_job(sleepy(6, 300, RestartStrategyConfig::None))
        .await
        .unwrap();
    cluster.wait_for_pool(2, DEADLINE).await.unwrap();
    let give_up = std::time::Instant::now() + DEADLINE;
    let details = loop {
        let status = cluster.status().await.unwrap();
        assert!(
            status.demand <= 2 && status.target_pool_size <= 2,
            "demand {} target {}: over the per-job cap",
            status.demand,
            status.target_pool_size
        );
        let details = cluster.job_status(job).await.unwrap();
        if matches!(
            details.summary.status,
            JobStatus::Finished | JobStatus::Failed | JobStatus::Canceled
        ) {
            break details;
        }
        assert!(std::time::Instant::now() < give_up, "the job did not end");
        actix_rt::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(
        details.summary.status,
        JobStatus::Finished,
        "{:?}",
        details.failure
    );
    cluster.shutdown().await.unwrap();
}

/// Issue 12 (declarative resources): the JobManager used to grow the pool by overriding the
/// designated size and later set it back to what it had been, silently undoing a
/// `flint pool-size` given meanwhile. Now jobs declare demand and the operator's size stands.
#[actix::test]
async fn an_operators_resize_while_a_job_grew_the_pool_is_never_undone() {
    let mut config = config(1, 2);
    config.resourcemanager.taskmanager_timeout = Duration::from_millis(200);
    config.heartbeat.timeout = DEMAND_TEST_HEARTBEAT_TIMEOUT;
    let cluster = MiniCluster::start(config).unwrap();
    cluster.wait_for_pool(1, DEADLINE).await.unwrap();
    let job = cluster
        .submit_job(sleepy(6, 300, RestartStrategyConfig::None))
        .await
        .unwrap();
    cluster.wait_for_pool(3, DEADLINE).await.unwrap();
    cluster.set_pool_size(2).await.unwrap();
    let status = cluster.status().await.unwrap();
    assert_eq!(
        (
            status.designated_pool_size,
            status.demand,
            status.target_pool_size
        ),
        (2, 3, 3),
        "the jobs hold 3; the operator asked for 2"
    );
    let details = cluster.wait_for_job(job, DEADLINE).await.unwrap();
    assert_eq!(
        details.summary.status,
        JobStatus::Finished,
        "{:?}",
        details.failure
    );
    cluster.wait_for_pool(2, DEADLINE).await.unwrap();
    let status = cluster.status().await.unwrap();
    assert_eq!(
        (status.designated_pool_size, status.demand),
        (2, 0),
        "the operator's resize stands"
    );
    cluster.shutdown().await.unwrap();
}

#[actix::test]
async fn a_region_wider_than_the_pool_may_ever_reach_is_refused_before_running() {
    let mut config = config(1, 2);
    config.resourcemanager.max_pool_size = 2;
    let cluster = MiniCluster::start(config).unwrap();
    cluster.wait_for_pool(1, DEADLINE).await.unwrap();
    // A pipelined all-to-all edge makes one region of 5 subtasks per vertex: 5 slots at once.
    let mut b = JobGraph::builder("wide region");
    let source = b.vertex("source", "noop", 5).index();
    let sink = b.vertex("sink", "noop", 5).index();
    b.edge(
        source,
        sink,
        DistributionPattern::AllToAll,
        ExchangeMode::Pipelined,
    );
    b.restart_strategy(RestartStrategyConfig::None);
    let error = cluster
        .submit_job(b.build(|_| true).unwrap())
        .await
        .unwrap_err();
    let text = error.to_string();
    assert!(text.contains("needs 5 slots"), "{text}");
    assert!(text.contains("max-pool-size"), "{text}");
    assert!(
        text.contains("largest pipelined region: region 0 (10 subtasks"),
        "{text}"
    );
    assert!(cluster.list_jobs().await.unwrap().is_empty(), "nothing ran");
    cluster.shutdown().await.unwrap();
}

#[actix::test]
async fn a_job_wider_than_the_pool_runs_in_waves_never_more_than_its_slots_at_once() {
    let mut config = config(1, 2);
    config.resourcemanager.max_pool_size = 1;
    let cluster = MiniCluster::start(config).unwrap();
    cluster.wait_for_pool(1, DEADLINE).await.unwrap();
    let job = cluster
        .submit_job(sleepy(12, 5, RestartStrategyConfig::None))
        .await
        .unwrap();
    let details = cluster.wait_for_job(job, DEADLINE).await.unwrap();
    assert_eq!(details.summary.status, JobStatus::Finished);
    assert_eq!(details.summary.tasks_finished, 12);
    let most = details.most_subtasks_at_once();
    assert!(
        (1..=2).contains(&most),
        "{most} subtasks held slots at once"
    );
    cluster.shutdown().await.unwrap();
}

/// What Ray and Dask run as 10,000 tasks on 8 workers: one `noop` vertex of parallelism 10,000
/// on 2 TaskManagers × 4 slots.
#[actix::test]
async fn ten_thousand_subtasks_on_eight_slots_run_in_waves_to_the_end() {
    let mut config = config(2, 4);
    config.resourcemanager.max_pool_size = 2;
    let cluster = MiniCluster::start(config).unwrap();
    cluster.wait_for_pool(2, DEADLINE).await.unwrap();
    let mut b = JobGraph::builder("wide");
    b.vertex("nothing", "noop", 10_000);
    b.restart_strategy(RestartStrategyConfig::None);
    let job = cluster
        .submit_job(b.build(|_| true).unwrap())
        .await
        .unwrap();
    let details = cluster.wait_for_job(job, DEADLINE).await.unwrap();
    assert_eq!(details.summary.status, JobStatus::Finished);
    assert_eq!(details.summary.tasks_finished, 10_000);
    let most = details.most_subtasks_at_once();
    assert!(
        (1..=8).contains(&most),
        "{most} subtasks held slots at once"
    );
    cluster.shutdown().await.unwrap();
}

#[actix::test]
async fn a_job_waiting_for_busy_slots_waits_past_the_slot_request_timeout() {
    let mut config = config(1, 2);
    config.resourcemanager.max_pool_size = 1;
    config.slot.request.timeout = Duration::from_millis(100);
    let cluster = MiniCluster::start(config).unwrap();
    cluster.wait_for_pool(1, DEADLINE).await.unwrap();
    let hog = cluster
        .submit_job(sleepy(2, 600, RestartStrategyConfig::None))
        .await
        .unwrap();
    let waiting = cluster
        .submit_job(sleepy(2, 1, RestartStrategyConfig::None))
        .await
        .unwrap();
    // Flink's batch semantics: slots that are only busy are worth waiting for.
    let details = cluster.wait_for_job(waiting, DEADLINE).await.unwrap();
    assert_eq!(details.summary.status, JobStatus::Finished, "{details:?}");
    let hog = cluster.wait_for_job(hog, DEADLINE).await.unwrap();
    assert_eq!(hog.summary.status, JobStatus::Finished);
    cluster.shutdown().await.unwrap();
}

/// `noop` all-to-all into `noop`, pipelined, never restarted; `from` and `to` configure each.
fn noop_shuffle(
    name: &str,
    parallelism: u32,
    from: &[(&str, &str)],
    to: &[(&str, &str)],
) -> JobGraph {
    let mut b = JobGraph::builder(name);
    let mut vertex = |name: &str, config: &[(&str, &str)]| {
        let mut v = b.vertex(name, "noop", parallelism);
        for (key, value) in config {
            v = v.config(*key, *value);
        }
        v.index()
    };
    let (from, to) = (vertex("from", from), vertex("to", to));
    b.edge(
        from,
        to,
        DistributionPattern::AllToAll,
        ExchangeMode::Pipelined,
    )
    .restart_strategy(RestartStrategyConfig::None);
    b.build(|_| true).unwrap()
}

/// A task that runs until its test opens the gate (or it is cancelled).
struct Held(Arc<(Mutex<bool>, Condvar)>);

impl Operator for Held {
    fn run(&mut self, io: &mut dyn TaskIo) -> Result<(), OperatorError> {
        let (open, opened) = &*self.0;
        let mut open = open.lock().unwrap();
        // Woken by the test; the timeout only keeps the task responsive to a cancel.
        while !*open && !io.is_cancelled() {
            open = opened
                .wait_timeout(open, Duration::from_millis(20))
                .unwrap()
                .0;
        }
        Ok(())
    }
}

/// Issue 32, item 6: no slot idles while something fits. A hog holds 2 of 4 slots; a job whose
/// one region needs all 4 waits at the head of the queue; a small job submitted after it takes
/// an idle slot and finishes while the large one waits (under `region-order = "fifo"` it waits
/// behind the large one for as long as the hog runs); the large one still runs once the hog ends.
#[actix::test]
async fn a_small_job_runs_on_idle_slots_while_a_large_region_waits_and_the_large_one_still_runs() {
    let gate = Arc::new((Mutex::new(false), Condvar::new()));
    let mut registry = OperatorRegistry::with_builtins();
    let held = gate.clone();
    registry.register_fn("held", move |_| Ok(Box::new(Held(held.clone()))));
    let mut config = config(1, 4);
    config.resourcemanager.max_pool_size = 1;
    // About queueing, not failure detection: a late heartbeat under load must not fail the hog.
    config.heartbeat.timeout = DEMAND_TEST_HEARTBEAT_TIMEOUT;
    let cluster = MiniCluster::start_with(config, registry, Arc::new(ArbiterSpawner)).unwrap();
    cluster.wait_for_pool(1, DEADLINE).await.unwrap();
    let submit = |graph: JobGraph| cluster.submit_job(graph);

    let mut b = JobGraph::builder("hog");
    b.vertex("hold", "held", 2);
    b.restart_strategy(RestartStrategyConfig::None);
    let hog = submit(b.build(|_| true).unwrap()).await.unwrap();
    wait_until_running(&cluster, hog, 0).await;

    // Four sources all-to-all into four sinks, pipelined: one region of four shared slots.
    let large = submit(noop_shuffle("large", 4, &[("count", "10")], &[]))
        .await
        .unwrap();
    let small = submit(sleepy(1, 1, RestartStrategyConfig::None))
        .await
        .unwrap();

    let details = cluster.wait_for_job(small, DEADLINE).await.unwrap();
    assert_eq!(details.summary.status, JobStatus::Finished, "{details:?}");
    let waiting = cluster.job_status(large).await.unwrap();
    let started = waiting
        .vertices
        .iter()
        .flat_map(|v| &v.subtasks)
        .filter(|s| !matches!(s.state, ExecutionState::Created | ExecutionState::Scheduled))
        .count();
    assert_eq!(started, 0, "the large region waited: {waiting:#?}");
    let hogging = cluster.job_status(hog).await.unwrap();
    assert_eq!(hogging.summary.status, JobStatus::Running);

    *gate.0.lock().unwrap() = true;
    gate.1.notify_all();
    let large = cluster.wait_for_job(large, DEADLINE).await.unwrap();
    assert_eq!(large.summary.status, JobStatus::Finished, "{large:?}");
    assert_eq!(large.summary.tasks_finished, 8);
    let hog = cluster.wait_for_job(hog, DEADLINE).await.unwrap();
    assert_eq!(hog.summary.status, JobStatus::Finished);
    cluster.shutdown().await.unwrap();
}

/// A user operator that panics (registered by name, as a user's own binary would).
struct Panicky;

impl Operator for Panicky {
    fn run(&mut self, _io: &mut dyn TaskIo) -> Result<(), OperatorError> {
        panic!("user code exploded")
    }
}

#[actix::test]
async fn a_panicking_task_fails_with_its_message_and_the_task_manager_lives_on() {
    let mut registry = OperatorRegistry::with_builtins();
    registry.register_fn("panicky", |_| Ok(Box::new(Panicky)));
    let cluster =
        MiniCluster::start_with(config(1, 1), registry, Arc::new(ArbiterSpawner)).unwrap();
    cluster.wait_for_pool(1, DEADLINE).await.unwrap();
    let mut b = JobGraph::builder("panics");
    b.vertex("boom", "panicky", 1);
    b.restart_strategy(RestartStrategyConfig::None);
    let job = cluster
        .submit_job(b.build(|_| true).unwrap())
        .await
        .unwrap();
    let details = cluster.wait_for_job(job, DEADLINE).await.unwrap();
    assert_eq!(details.summary.status, JobStatus::Failed);
    let error = details.vertices[0].subtasks[0].error.clone().unwrap();
    assert!(
        error.contains("task panicked: user code exploded"),
        "{error}"
    );
    let status = cluster.status().await.unwrap();
    assert!(status.is_pool_at(1), "the TaskManager survived: {status}");
    assert_eq!(status.heartbeat_timeouts, 0);
    cluster.shutdown().await.unwrap();
}

#[actix::test]
async fn a_job_naming_an_unknown_operator_is_refused() {
    let cluster = MiniCluster::start(config(1, 1)).unwrap();
    let mut b = JobGraph::builder("typo");
    b.vertex("v", "tokenise", 1);
    let graph = b.build(|_| true).unwrap();
    let error = cluster.submit_job(graph).await.unwrap_err();
    assert!(matches!(error, MiniClusterError::Job(_)));
    assert!(error.to_string().contains("tokenise"), "{error}");
    cluster.shutdown().await.unwrap();
}

/// Runs the wide WordCount (`common::wide_wordcount_graph`) of `lines` lines at `parallelism`
/// on an embedded cluster of `config` and checks it gives exactly the sequential count.
async fn wide_wordcount_gives_the_exact_count(
    config: ClusterConfig,
    name: &str,
    lines: usize,
    parallelism: u32,
    deadline: Duration,
) {
    let pool = config.resourcemanager.pool_size;
    let cluster = MiniCluster::start(config).unwrap();
    cluster.wait_for_pool(pool, DEADLINE).await.unwrap();
    let dir = scratch(name);
    let input = dir.join("input.txt");
    write_text(&input, lines);
    let output = dir.join("out");
    let job = cluster
        .submit_job(common::wide_wordcount_graph(&input, &output, parallelism))
        .await
        .unwrap();
    let details = cluster.wait_for_job(job, deadline).await.unwrap();
    assert_eq!(
        details.summary.status,
        JobStatus::Finished,
        "{:?}",
        details.failure
    );
    assert_eq!(read_counts(&output), sequential_word_count(&input).unwrap());
    cluster.shutdown().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 11: all-to-all at P = 1,000 in one process (10 TaskManagers × 100 slots, a million
/// channels on the all-to-all edge, 4,000 tasks) gives exactly the sequential count.
#[actix::test]
async fn all_to_all_at_p_1000_gives_the_exact_word_count() {
    // On the default network memory: each gate of 1,000 channels reserves 2 buffers and runs
    // in the floating mode (issue 32 item 1).
    let mut config = config(10, 100);
    // 4,000 task threads on two cores: heartbeats must not be what the test measures.
    config.heartbeat.timeout = Duration::from_secs(30);
    wide_wordcount_gives_the_exact_count(
        config,
        "all-to-all-p1000",
        20_000,
        1000,
        Duration::from_secs(300),
    )
    .await;
}

/// Compute permits: with one compute thread for the whole process (both TaskManagers of the
/// embedded cluster share it), a pipelined all-to-all whose producers fill their outputs many
/// times over still gives the exact count — each task gives the permit back while it waits for
/// input or room, and hands it on after its time slice while it computes.
#[actix::test]
async fn a_pipelined_all_to_all_on_one_compute_thread_gives_the_exact_word_count() {
    let mut config = config(2, 8);
    config.taskmanager.compute_threads = 1;
    wide_wordcount_gives_the_exact_count(
        config,
        "one-compute-thread",
        200_000,
        8,
        Duration::from_secs(120),
    )
    .await;
}

/// Issue 32, item 5: consumers that stop reading early (`take`: a `first_n`, a user function
/// that stops) release what they leave unread, so their pipelined producers — a million records
/// each, far more than a subpartition holds — run to their end instead of waiting for room for
/// ever. On 2 TaskManagers, so each consumer leaves both a local and a remote producer behind;
/// one consumer reads nothing at all, one a single record, the others more.
#[actix::test]
async fn consumers_that_stop_reading_early_let_their_producers_finish() {
    let mut config = config(2, 2);
    // About the exchange, not failure detection: two producers of a million records each on 2
    // cores must not lose a TaskManager to a late heartbeat (the jobs never restart).
    config.heartbeat.timeout = DEMAND_TEST_HEARTBEAT_TIMEOUT;
    let cluster = MiniCluster::start(config).unwrap();
    cluster.wait_for_pool(2, DEADLINE).await.unwrap();
    for take in [0, 1, 1000] {
        let take = take.to_string();
        let graph = noop_shuffle(
            "early",
            2,
            &[("count", "1000000"), ("payload-bytes", "100")],
            &[("take", &take)],
        );
        let job = cluster.submit_job(graph).await.unwrap();
        let details = cluster.wait_for_job(job, DEADLINE).await.unwrap();
        assert_eq!(
            details.summary.status,
            JobStatus::Finished,
            "take = {take}: {details:#?}"
        );
    }
    let status = cluster.status().await.unwrap();
    assert!(status.is_pool_at(2), "{status}");
    cluster.shutdown().await.unwrap();
}

/// Issue 32, item 3: a blocking result is released once every region reading it finished, so a
/// long batch job's disk use is bounded by its live stages. Five stages of 4 subtasks, each edge
/// all-to-all and blocking, on 4 TaskManagers of 1 slot (so every stage is spread over all
/// four); each TaskManager may keep 5 MB of spill files (`taskmanager.spill-budget`, enforced:
/// a spill past it fails the task, and the job has no restarts). Each subtask writes ~2 MB,
/// so a TaskManager holds ~4 MB while a stage reads the last one's results and writes its own,
/// and the 4 shuffles write ~32 MB in all, over 6× the budget. Kept until the job ended, as
/// before, the third stage's results would not fit.
#[actix::test]
async fn a_five_stage_batch_job_runs_in_a_spill_budget_a_quarter_of_its_shuffled_bytes() {
    const BUDGET: u64 = 5 << 20;
    let mut config = config(4, 1);
    config.taskmanager.spill_budget = Some(BUDGET);
    config.heartbeat.timeout = DEMAND_TEST_HEARTBEAT_TIMEOUT;
    let cluster = MiniCluster::start(config).unwrap();
    cluster.wait_for_pool(4, DEADLINE).await.unwrap();
    let mut b = JobGraph::builder("five-stages");
    let stages: Vec<_> = (0..5)
        .map(|stage| {
            let mut v = b.vertex(format!("stage-{stage}"), "noop", 4);
            if stage == 0 {
                v = v.config("count", "2000").config("payload-bytes", "1000");
            }
            v.index()
        })
        .collect();
    for pair in stages.windows(2) {
        b.edge(
            pair[0],
            pair[1],
            DistributionPattern::AllToAll,
            ExchangeMode::Blocking,
        );
    }
    b.restart_strategy(RestartStrategyConfig::None);
    let job = cluster
        .submit_job(b.build(|_| true).unwrap())
        .await
        .unwrap();
    let details = cluster
        .wait_for_job(job, Duration::from_secs(120))
        .await
        .unwrap();
    assert_eq!(
        details.summary.status,
        JobStatus::Finished,
        "{:?}",
        details.failure
    );
    let io = |stage: usize| details.vertices[stage].io;
    assert_eq!(
        io(4).records_in,
        8_000,
        "every record reached the last stage"
    );
    let shuffled: u64 = (0..4).map(|stage| io(stage).bytes_out).sum();
    assert!(
        shuffled > 4 * BUDGET,
        "{shuffled} bytes shuffled: the test must shuffle over 4× the budget"
    );
    // The TaskManagers' heartbeats report what they spilled: all of it written, all of it
    // deleted since (the job ended), never more than the budget at once.
    let give_up = tokio::time::Instant::now() + DEADLINE;
    let spill = loop {
        let status = cluster.job_manager_status().await.unwrap();
        let spill: Vec<_> = status.task_managers.iter().map(|tm| tm.spill).collect();
        let written: u64 = spill.iter().map(|s| s.total).sum();
        if written >= shuffled && spill.iter().all(|s| s.live == 0) {
            break spill;
        }
        assert!(
            tokio::time::Instant::now() < give_up,
            "heartbeats never reported {shuffled} bytes written and none left: {spill:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert!(
        spill.iter().all(|s| s.peak > 0 && s.peak <= BUDGET),
        "{spill:?}"
    );
    cluster.shutdown().await.unwrap();
}
