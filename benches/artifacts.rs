//! Fetching job artifacts: `cargo bench --bench artifacts` (`-- --quick` for fewer rounds).
//!
//! A `flint jobmanager` with 4 TaskManager processes × `SLOTS` slots; each round uploads a fresh
//! 100 MB artifact and runs a no-op job of 4 × `SLOTS` subtasks that ships it (every task waits
//! for its TaskManager's copy), paired with the same job shipping nothing. The difference is
//! the fetch: 4 copies of 100 MB from one JobManager. `flint_blob_served_bytes_total` shows
//! how many copies crossed the network (one per TaskManager, not one per task).

// A benchmark measures wall time with the real clock; it is no node code.
#![allow(clippy::disallowed_methods)]

use std::time::{Duration, Instant};

use flint::job::graph::{JobGraph, RestartStrategyConfig};
use rest_cluster::Cluster;
use serde_json::json;

flint::global_allocator!();

#[path = "common/rest_cluster.rs"]
#[allow(dead_code)]
mod rest_cluster;

#[path = "../tests/common/process.rs"]
#[allow(dead_code)]
mod process;

const SIZE: usize = 100_000_000;
const TASK_MANAGERS: u32 = 4;
const SLOTS: u32 = 2;

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// A no-op job of one subtask per slot, shipping `digest` if given (as JSON, with it).
fn job(digest: Option<&str>) -> String {
    let mut b = JobGraph::builder("fetch");
    b.vertex("nothing", "noop", TASK_MANAGERS * SLOTS);
    b.restart_strategy(RestartStrategyConfig::None);
    let mut graph = serde_json::to_value(b.build(|_| true).expect("a valid graph")).unwrap();
    if let Some(digest) = digest {
        graph["artifacts"] = json!([{"name": "model.bin", "digest": digest, "size": SIZE}]);
    }
    graph.to_string()
}

fn run(cluster: &Cluster, graph: &str) -> f64 {
    let began = Instant::now();
    let id = cluster.submit_json(graph);
    cluster.wait_all(&[id], Duration::from_millis(2));
    began.elapsed().as_secs_f64()
}

fn served(cluster: &Cluster) -> f64 {
    cluster
        .metric("flint_blob_served_bytes_total")
        .parse()
        .unwrap_or(0.0)
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let rounds = if quick { 1 } else { 5 };
    let cluster = Cluster::start(
        "artifacts",
        TASK_MANAGERS,
        SLOTS,
        "[blob]\nmax-size = \"200mb\"\n",
    );
    run(&cluster, &job(None)); // warm-up
    let (mut with, mut without, mut copies) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        // Fresh bytes each round: the TaskManagers keep a job's copy for a minute.
        let bytes: Vec<u8> = (0..SIZE)
            .map(|i| (i as u64 * 2_654_435_761 + round as u64) as u8)
            .collect();
        let digest = cluster.upload(&bytes);
        let before = served(&cluster);
        let pair = [job(Some(&digest)), job(None)];
        let order: [usize; 2] = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for index in order {
            let seconds = run(&cluster, &pair[index]);
            if index == 0 {
                with.push(seconds);
            } else {
                without.push(seconds);
            }
        }
        copies.push((served(&cluster) - before) / SIZE as f64);
    }
    let (with, without) = (median(with), median(without));
    let fetch = (with - without).max(1e-3);
    let copies = median(copies);
    println!(
        "100 MB artifact to {TASK_MANAGERS} TaskManager processes ({} tasks), median of {rounds}: \
         job {with:.3} s shipping it, {without:.3} s without; fetch {fetch:.3} s, {copies:.1} \
         copies sent, {:.0} MB/s per TaskManager, {:.0} MB/s from the JobManager in all",
        TASK_MANAGERS * SLOTS,
        SIZE as f64 / 1e6 / fetch,
        copies * SIZE as f64 / 1e6 / fetch,
    );
}
