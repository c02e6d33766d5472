//! Long-running memory (issue 12, item 8): `cargo bench --bench soak` (`-- --quick` for 2,000
//! jobs instead of 10,000).
//!
//! One `flint jobmanager` process with 2 TaskManager processes × 4 slots runs 10,000 short jobs
//! (one no-op subtask each, submitted over REST 100 at a time, each batch waited for). The
//! JobManager's resident memory (`VmRSS` from /proc) is read once the pool is up, after 1,000
//! jobs and at the end: with ended jobs kept by count (`jobstore.max-capacity`, 1,000) and by
//! age (`jobstore.expiration-time`), and no per-job bookkeeping left behind, it stays flat
//! once the job store is full (target: the end within 10 % of the 1,000-job figure).

// A benchmark measures wall time with the real clock; it is no node code.
#![allow(clippy::disallowed_methods)]

use std::time::{Duration, Instant};

use flint::job::graph::{JobGraph, RestartStrategyConfig};
use rest_cluster::Cluster;

/// The process helpers of the integration tests (SIGTERM-and-wait).
#[path = "common/rest_cluster.rs"]
#[allow(dead_code)]
mod rest_cluster;

#[path = "../tests/common/process.rs"]
#[allow(dead_code)]
mod process;

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let total: usize = if quick { 2_000 } else { 10_000 };
    let batch = 100;
    let mut builder = JobGraph::builder("short");
    builder.vertex("nothing", "noop", 1);
    builder.restart_strategy(RestartStrategyConfig::None);
    let graph = serde_json::to_string(&builder.build(|_| true).expect("a valid graph"))
        .expect("a graph as JSON");

    let cluster = Cluster::start("soak", 2, 4, "");
    let at_start = cluster.rss_kib();
    let began = Instant::now();
    let mut after_1000 = 0;
    let mut done = 0;
    while done < total {
        let ids: Vec<String> = (0..batch).map(|_| cluster.submit_json(&graph)).collect();
        cluster.wait_all(&ids, Duration::from_millis(2));
        done += batch;
        if done == 1_000 {
            after_1000 = cluster.rss_kib();
        }
    }
    let at_end = cluster.rss_kib();
    let jobs_kept = cluster.get("/jobs")["jobs"].as_array().map_or(0, Vec::len);
    let elapsed = began.elapsed().as_secs_f64();
    println!("| `flint jobmanager` resident memory | KiB |");
    println!("| --- | --- |");
    println!("| at start (2 TaskManagers registered) | {at_start} |");
    println!("| after 1,000 jobs | {after_1000} |");
    println!("| after {total} jobs | {at_end} |");
    println!(
        "\n{total} jobs in {elapsed:.1} s ({:.0} jobs/s); {jobs_kept} ended jobs kept; end / 1,000 jobs = {:.3}",
        total as f64 / elapsed,
        at_end as f64 / after_1000.max(1) as f64
    );
}
