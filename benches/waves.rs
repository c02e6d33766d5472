//! The scheduler at scale: `cargo bench --bench waves` (`-- --quick` for fewer rounds).
//!
//! 1. One job of 10,000 no-op subtasks (10,000 regions of one subtask) on a `flint jobmanager`
//!    with 2 TaskManager processes × 4 slots, submitted over REST: submit → FINISHED, tasks/s,
//!    and the JobManager's longest handler from `/metrics`.
//! 2. 1,000 jobs of 8 no-op subtasks posted at once on the same cluster: tasks/s.
//! 3. A trivial 8-task job over REST on the warm cluster: submit → FINISHED, median.
//! 4. In-process, P = 10,000 on 10 TaskManagers × 100 slots (queued, run in waves): total time,
//!    the JobManager's longest handler and heartbeat timeouts.

// A benchmark measures wall time with the real clock; it is no node code.
#![allow(clippy::disallowed_methods)]

use std::time::{Duration, Instant};

use flint::job::graph::{JobGraph, RestartStrategyConfig};
use flint::job::states::JobStatus;
use flint::{ClusterConfig, MiniCluster};
use rest_cluster::Cluster;

// The allocator of the `flint` and `demo` binaries (flint::process::allocator).
flint::global_allocator!();

/// The process helpers of the integration tests (SIGTERM-and-wait).
#[path = "common/rest_cluster.rs"]
#[allow(dead_code)]
mod rest_cluster;

#[path = "../tests/common/process.rs"]
#[allow(dead_code)]
mod process;

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn noop_job(name: &str, parallelism: u32) -> JobGraph {
    let mut b = JobGraph::builder(name);
    b.vertex("nothing", "noop", parallelism);
    b.restart_strategy(RestartStrategyConfig::None);
    b.build(|_| true).expect("a valid graph")
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let rounds = if quick { 1 } else { 5 };

    println!("## 2 TaskManager processes × 4 slots, over REST\n");
    let cluster = Cluster::start("waves", 2, 4, "[resourcemanager]\nmax-pool-size = 2\n");
    let mut wide = Vec::new();
    for _ in 0..rounds {
        let graph = noop_job("wide", 10_000);
        let began = Instant::now();
        let id = cluster.submit(&graph);
        cluster.wait_all(&[id], Duration::from_millis(2));
        wide.push(began.elapsed().as_secs_f64());
    }
    let wide = median(wide);
    println!(
        "| 10,000 no-op subtasks in one job, submit → FINISHED | {wide:.3} s | {:.0} tasks/s |",
        10_000.0 / wide
    );

    let mut many = Vec::new();
    for _ in 0..rounds.min(3) {
        let began = Instant::now();
        let ids: Vec<String> = (0..1_000)
            .map(|i| cluster.submit(&noop_job(&format!("j{i}"), 8)))
            .collect();
        cluster.wait_all(&ids, Duration::from_millis(5));
        many.push(began.elapsed().as_secs_f64());
    }
    let many = median(many);
    println!(
        "| 1,000 jobs of 8 no-op subtasks posted at once → all FINISHED | {many:.3} s | {:.0} tasks/s |",
        8_000.0 / many
    );

    let mut trivial = Vec::new();
    for _ in 0..(if quick { 5 } else { 41 }) {
        let graph = noop_job("trivial", 8);
        let began = Instant::now();
        let id = cluster.submit(&graph);
        loop {
            let job = cluster.get(&format!("/jobs/{id}"));
            if job["state"] == "FINISHED" {
                break;
            }
        }
        trivial.push(began.elapsed().as_secs_f64() * 1e3);
    }
    println!(
        "| trivial 8-task job, submit → FINISHED (median of {}) | {:.2} ms | |",
        trivial.len(),
        median(trivial)
    );
    println!(
        "| the JobManager's longest handler over all of the above (ms) | {} | |",
        cluster.metric("flint_jobmanager_mailbox_max_handle_ms")
    );
    println!(
        "| the longest wait of a message in its mailbox (ms) | {} | |",
        cluster.metric("flint_jobmanager_mailbox_max_delay_ms")
    );
    drop(cluster);

    println!("\n## In-process, 10 TaskManagers × 100 slots, P = 10,000 (queued, waves)\n");
    let system = actix::System::new();
    system.block_on(async {
        let mut config = ClusterConfig::default();
        config.resourcemanager.pool_size = 10;
        config.resourcemanager.max_pool_size = 10;
        config.taskmanager.slots = 100;
        config.seed = Some(1);
        let cluster = MiniCluster::start(config).expect("a valid config");
        cluster
            .wait_for_pool(10, Duration::from_secs(60))
            .await
            .expect("the pool");
        let mut times = Vec::new();
        let mut details_ms = Vec::new();
        for _ in 0..rounds {
            let began = Instant::now();
            let job = cluster.submit_job(noop_job("waves", 10_000)).await.expect("accepted");
            // The summaries are O(1) per job; the details of 10,000 subtasks are O(P) and are
            // asked once at the end, timed apart.
            loop {
                let jobs = cluster.list_jobs().await.expect("a job list");
                let summary = jobs.iter().find(|j| j.job_id == job).expect("listed");
                if summary.status.is_globally_terminal() {
                    assert_eq!(summary.status, JobStatus::Finished);
                    break;
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            times.push(began.elapsed().as_secs_f64());
            let asked = Instant::now();
            let details = cluster.job_status(job).await.expect("details");
            details_ms.push(asked.elapsed().as_secs_f64() * 1e3);
            assert_eq!(details.summary.tasks_finished, 10_000);
        }
        let status = cluster.job_manager_status().await.expect("a status");
        println!(
            "| P = 10,000 on 1,000 slots, submit → FINISHED | {:.3} s | longest handler {:.2} ms ({}), longest mailbox wait {:.2} ms, heartbeat timeouts {} |",
            median(times),
            status.mailbox.max_handle_us as f64 / 1e3,
            status.mailbox.longest_handler,
            status.mailbox.max_delay_us as f64 / 1e3,
            status.heartbeat_timeouts
        );
        println!(
            "| the details of the 10,000-subtask job (one GET /jobs/{{id}}'s actor work) | {:.2} ms | |",
            median(details_ms)
        );
        cluster.shutdown().await.expect("a clean stop");
    });
}
