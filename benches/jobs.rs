//! Job scheduling and execution.
//!
//! `cargo bench --bench jobs` (`-- --quick` for one round each).
//!
//! 1. Flink's scheduler benchmark shape: source → sink, all-to-all, both of parallelism P, noop
//!    operators, 100 TaskManagers × 100 slots, P = 1,000 and 10,000. Measured on the JobManager's
//!    own logic (the ExecutionGraph and the slot scheduler, no actors): building the execution graph
//!    and its pipelined regions, allocating every slot, creating every deployment, finishing the
//!    job, and the failover computation for one failed task — for pipelined and blocking edges.
//!    `-- scheduler` runs this section alone (`-- scheduler blocking`: blocking edges only).
//! 2. End to end on the embedded cluster (real TaskManager threads, real data exchange): the
//!    same shape submitted → FINISHED, and a trivial 8-task job on a warm cluster.
//! 3. WordCount throughput at parallelism 2 against a single-threaded sequential count of the
//!    same file, in the same run (a ratio); `-- wordcount` runs it alone.

// A benchmark measures wall time with the real clock; it is no node code.
#![allow(clippy::disallowed_methods)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use flint::actors::job_manager::execution_graph::{ExecutionGraph, JobAction, JobContext};
use flint::actors::job_manager::scheduler::{BulkId, Scheduler, SlotRequest, TaskRef};
use flint::base::ids::{ExecutionAttemptId, JobId, ResourceId};
use flint::base::rng::NodeRng;
use flint::job::file::parse_job_file;
use flint::job::graph::{DistributionPattern, ExchangeMode, JobGraph, RestartStrategyConfig};
use flint::job::states::{ExecutionState, JobStatus};
use flint::messages::ActorAddress;
use flint::operators::OperatorRegistry;
use flint::operators::builtin::sequential_word_count;
use flint::{ClusterConfig, MiniCluster};

// The allocator of the `flint` and `demo` binaries (flint::process::allocator).
flint::global_allocator!();

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn source_sink(parallelism: u32, exchange: ExchangeMode) -> JobGraph {
    let mut b = JobGraph::builder("source-sink");
    let source = b.vertex("source", "noop", parallelism).index();
    let sink = b.vertex("sink", "noop", parallelism).index();
    b.edge(source, sink, DistributionPattern::AllToAll, exchange)
        .restart_strategy(RestartStrategyConfig::FixedDelay {
            attempts: 1,
            delay: Duration::ZERO,
        });
    b.build(|_| true).expect("a valid graph")
}

fn cluster_scheduler(task_managers: usize, slots: u32) -> Scheduler {
    let mut scheduler = Scheduler::new(NodeRng::seed_from_u64(1));
    for n in 0..task_managers {
        scheduler.add_task_manager(ResourceId::new(format!("tm-{n}")), slots);
    }
    scheduler
}

#[derive(Default)]
struct Phases {
    build: Vec<f64>,
    allocate: Vec<f64>,
    deploy: Vec<f64>,
    finish: Vec<f64>,
    failover: Vec<f64>,
}

/// What the JobManager does after every job call: serve the slot queue's head.
fn serve(job: &mut ExecutionGraph, cx: &mut JobContext<'_>) -> Vec<JobAction> {
    let mut actions = Vec::new();
    loop {
        let (placed, _) = cx.scheduler.serve(usize::MAX);
        if placed.is_empty() {
            return actions;
        }
        for (bulk, tasks) in placed {
            actions.extend(job.bulk_assigned(bulk, tasks, cx));
        }
    }
}

/// One round of the scheduler benchmark on the ExecutionGraph and the scheduler.
fn scheduler_round(parallelism: u32, exchange: ExchangeMode, phases: &mut Phases) {
    let graph = source_sink(parallelism, exchange);
    let address_of =
        |id: &ResourceId| Some(ActorAddress::new("local", format!("taskmanager/{id}")));
    let now = actix::clock::Instant::now();

    // Allocating every slot, alone (the scheduler's part of deployment).
    let mut scheduler = cluster_scheduler(100, 100);
    let started = Instant::now();
    for subtask in 0..parallelism {
        let requests = (0..2)
            .map(|vertex| SlotRequest {
                task: TaskRef {
                    job: JobId::from_u128(9),
                    vertex,
                    subtask,
                },
                sharing_group: "default".into(),
                co_location_group: None,
                preferred: Vec::new(),
                preferred_tasks: Vec::new(),
            })
            .collect();
        let bulk = BulkId {
            job: JobId::from_u128(9),
            region: subtask as usize,
        };
        scheduler.request_bulk(bulk, requests, now);
    }
    let (placed, _) = scheduler.serve(usize::MAX);
    assert_eq!(placed.len(), parallelism as usize);
    phases.allocate.push(ms(started.elapsed()));

    // Execution graph and regions.
    let started = Instant::now();
    let mut job = ExecutionGraph::new(JobId::from_u128(1), graph, NodeRng::seed_from_u64(2), 0)
        .expect("regions of a valid graph");
    phases.build.push(ms(started.elapsed()));

    // Scheduling and deploying: every slot requested and every deployment descriptor built.
    let mut scheduler = cluster_scheduler(100, 100);
    let mut cx = JobContext {
        scheduler: &mut scheduler,
        now,
        now_ms: 0,
        address_of: &address_of,
    };
    let started = Instant::now();
    let mut actions = job.start(&mut cx);
    actions.extend(serve(&mut job, &mut cx));
    let mut deploy_time = started.elapsed();
    let mut finish_time = Duration::ZERO;
    let mut failed_once = false;
    loop {
        let deployed: Vec<ExecutionAttemptId> = actions
            .iter()
            .filter_map(|a| match a {
                JobAction::Deploy { descriptor, .. } => Some(descriptor.attempt),
                _ => None,
            })
            .collect();
        if deployed.is_empty() {
            break;
        }
        let started = Instant::now();
        for attempt in &deployed {
            job.update(*attempt, ExecutionState::Running, None, &mut cx);
        }
        let mut next = Vec::new();
        let mut to_finish = deployed.clone();
        if !failed_once {
            // Failover computation for one failed task: the restart strategy, the regions to
            // restart and their cancellations.
            failed_once = true;
            let failing = Instant::now();
            let restart = job.update(
                deployed[0],
                ExecutionState::Failed,
                Some("bench".into()),
                &mut cx,
            );
            phases.failover.push(ms(failing.elapsed()));
            let cancelled: Vec<ExecutionAttemptId> = restart
                .iter()
                .filter_map(|a| match a {
                    JobAction::Cancel { attempt, .. } => Some(*attempt),
                    _ => None,
                })
                .collect();
            for attempt in &cancelled {
                job.update(*attempt, ExecutionState::Canceled, None, &mut cx);
            }
            let generation = restart
                .iter()
                .find_map(|a| match a {
                    JobAction::RestartAfter { generation, .. } => Some(*generation),
                    _ => None,
                })
                .expect("a restart");
            // Redeploying the restarted regions is the deployment measured (for pipelined
            // edges: every task).
            let redeploy = Instant::now();
            next.extend(job.restart_due(generation, &mut cx));
            next.extend(serve(&mut job, &mut cx));
            deploy_time = deploy_time.max(redeploy.elapsed());
            let cancelled: std::collections::BTreeSet<ExecutionAttemptId> =
                cancelled.into_iter().collect();
            to_finish.retain(|a| *a != deployed[0] && !cancelled.contains(a));
        }
        let finishing = Instant::now();
        for attempt in &to_finish {
            next.extend(job.update(*attempt, ExecutionState::Finished, None, &mut cx));
        }
        next.extend(serve(&mut job, &mut cx));
        finish_time += finishing.elapsed();
        let _ = started;
        actions = next;
    }
    phases.deploy.push(ms(deploy_time));
    phases.finish.push(ms(finish_time));
    assert_eq!(
        job.status(),
        JobStatus::Finished,
        "the benchmark job finished"
    );
}

async fn end_to_end(parallelism: u32, rounds: usize) -> f64 {
    let mut config = ClusterConfig::default();
    config.resourcemanager.pool_size = 100;
    config.resourcemanager.max_pool_size = 100;
    config.taskmanager.slots = 100;
    // Every consumer of an all-to-all edge reserves 2 exclusive buffers per channel (Flink's
    // default): at P = 1,000 that is 64 MB per task, 100 tasks per TaskManager. The buffers are
    // only taken as data arrives (this job sends none), so the reservation is raised, as Flink
    // users raise taskmanager.network.memory for such jobs.
    config.taskmanager.network_memory = 1 << 40;
    config.seed = Some(1);
    let cluster = MiniCluster::start(config).expect("a valid config");
    cluster
        .wait_for_pool(100, Duration::from_secs(60))
        .await
        .expect("pool up");
    let mut times = Vec::new();
    for _ in 0..rounds {
        let started = Instant::now();
        let job = cluster
            .submit_job(source_sink(parallelism, ExchangeMode::Pipelined))
            .await
            .expect("accepted");
        let details = cluster
            .wait_for_job(job, Duration::from_secs(600))
            .await
            .expect("ends");
        assert_eq!(
            details.summary.status,
            JobStatus::Finished,
            "{:?}",
            details.failure
        );
        if details.restarts > 0 {
            eprintln!(
                "P = {parallelism}: the job restarted {} times: {:?}",
                details.restarts,
                details
                    .exceptions
                    .iter()
                    .map(|e| &e.reason)
                    .take(3)
                    .collect::<Vec<_>>()
            );
        }
        times.push(ms(started.elapsed()));
    }
    cluster.shutdown().await.expect("stops");
    median(times)
}

async fn trivial_job_latency(rounds: usize) -> f64 {
    let mut config = ClusterConfig::default();
    config.resourcemanager.pool_size = 2;
    config.taskmanager.slots = 4;
    let cluster = MiniCluster::start(config).expect("a valid config");
    cluster
        .wait_for_pool(2, Duration::from_secs(60))
        .await
        .expect("pool up");
    let mut times = Vec::new();
    for _ in 0..rounds {
        let mut b = JobGraph::builder("trivial");
        let source = b.vertex("source", "noop", 4).config("count", "10").index();
        let sink = b.vertex("sink", "noop", 4).index();
        b.edge(
            source,
            sink,
            DistributionPattern::Forward,
            ExchangeMode::Pipelined,
        );
        let started = Instant::now();
        let job = cluster
            .submit_job(b.build(|_| true).expect("valid"))
            .await
            .expect("accepted");
        cluster
            .wait_for_job(job, Duration::from_secs(60))
            .await
            .expect("ends");
        times.push(ms(started.elapsed()));
    }
    cluster.shutdown().await.expect("stops");
    median(times)
}

async fn wordcount_throughput(rounds: usize) -> (f64, f64, f64) {
    let dir = std::env::temp_dir().join(format!("flint-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let input = dir.join("input.txt");
    flint::demo::generate_text(&input, 64 << 20).expect("input written");
    let megabytes = std::fs::metadata(&input).expect("input").len() as f64 / 1e6;
    let mut config = ClusterConfig::default();
    config.resourcemanager.pool_size = 2;
    config.taskmanager.slots = 2;
    let cluster = MiniCluster::start(config).expect("a valid config");
    cluster
        .wait_for_pool(2, Duration::from_secs(60))
        .await
        .expect("pool up");
    let registry = OperatorRegistry::with_builtins();
    let (mut sequential, mut distributed) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let started = Instant::now();
        let expected = sequential_word_count(&input).expect("counted");
        sequential.push(megabytes / started.elapsed().as_secs_f64());

        let output = dir.join(format!("out-{round}"));
        let params = BTreeMap::from([
            ("input".to_owned(), input.display().to_string()),
            ("output".to_owned(), output.display().to_string()),
        ]);
        let graph = parse_job_file(include_str!("../examples/wordcount.toml"), &params, |op| {
            registry.contains(op)
        })
        .expect("the example parses");
        let started = Instant::now();
        let job = cluster.submit_job(graph).await.expect("accepted");
        let details = cluster
            .wait_for_job(job, Duration::from_secs(600))
            .await
            .expect("ends");
        distributed.push(megabytes / started.elapsed().as_secs_f64());
        assert_eq!(details.summary.status, JobStatus::Finished);
        assert!(!expected.is_empty());
    }
    cluster.shutdown().await.expect("stops");
    let _ = std::fs::remove_dir_all(&dir);
    let (seq, dist) = (median(sequential), median(distributed));
    (megabytes, seq, dist)
}

#[actix::main]
async fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let rounds = if quick { 1 } else { 5 };
    if std::env::args().any(|a| a == "wordcount") {
        wordcount_section(quick).await;
        return;
    }
    let e2e_only = std::env::args().any(|a| a == "e2e");

    println!(
        "## Scheduler benchmark (JobManager logic, 100 TaskManagers × 100 slots, median of {rounds}, ms)\n"
    );
    println!(
        "| edges | P | execution graph + regions | allocate every slot | deploy every task | finish every task | failover of one task | all together |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    // `-- scheduler blocking` (or `pipelined`): one kind of edge alone, for profiling.
    let only = |mode: &str| std::env::args().any(|a| a == mode);
    let exchanges: Vec<ExchangeMode> = [ExchangeMode::Pipelined, ExchangeMode::Blocking]
        .into_iter()
        .filter(|e| {
            let (this, other) = match e {
                ExchangeMode::Pipelined => ("pipelined", "blocking"),
                ExchangeMode::Blocking => ("blocking", "pipelined"),
            };
            only(this) || !only(other)
        })
        .collect();
    for exchange in exchanges.into_iter().filter(|_| !e2e_only) {
        for parallelism in [1_000, 10_000] {
            let mut phases = Phases::default();
            for _ in 0..rounds {
                scheduler_round(parallelism, exchange, &mut phases);
            }
            let (b, a, d, f, o) = (
                median(phases.build),
                median(phases.allocate),
                median(phases.deploy),
                median(phases.finish),
                median(phases.failover),
            );
            println!(
                "| {exchange:?} | {parallelism} | {b:.1} | {a:.1} | {d:.1} | {f:.1} | {o:.2} | {:.1} |",
                b + d + f + o
            );
        }
    }
    if std::env::args().any(|a| a == "scheduler") {
        return; // `-- scheduler`: section 1 alone
    }

    println!(
        "\n## End to end on the embedded cluster (100 TaskManagers × 100 slots, median of {rounds}, ms)\n"
    );
    println!("| job | submit → FINISHED |");
    println!("|---|---:|");
    let sizes: Vec<u32> = std::env::var("FLINT_BENCH_E2E_P")
        .ok()
        .map(|list| {
            list.split(',')
                .filter_map(|p| p.trim().parse().ok())
                .collect()
        })
        .unwrap_or_else(|| vec![100, 1_000]);
    for parallelism in sizes {
        let e2e = end_to_end(parallelism, rounds).await;
        println!(
            "| source → sink all-to-all, P = {parallelism} ({} tasks, {} channels) | {e2e:.1} |",
            2 * parallelism,
            parallelism * parallelism
        );
    }
    if e2e_only {
        return; // `-- e2e`: section 2's all-to-all jobs alone
    }
    let trivial = trivial_job_latency(if quick { 3 } else { 11 }).await;
    println!("| trivial 8-task job on a warm cluster | {trivial:.1} |");

    wordcount_section(quick).await;
}

/// Section 3 (`-- wordcount` runs it alone).
async fn wordcount_section(quick: bool) {
    let (megabytes, sequential, distributed) =
        wordcount_throughput(if quick { 1 } else { 3 }).await;
    println!(
        "\n## WordCount throughput ({megabytes:.0} MB generated text, median of {})\n",
        if quick { 1 } else { 3 }
    );
    println!("| run | MB/s |");
    println!("|---|---:|");
    println!("| sequential single-threaded count | {sequential:.1} |");
    println!("| Flint WordCount, parallelism 2 (2 TaskManagers × 2 slots) | {distributed:.1} |");
    println!(
        "| ratio Flint / sequential | {:.2} |",
        distributed / sequential
    );
}
