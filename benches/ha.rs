//! High availability against a real ZooKeeper: `cargo bench --bench ha` (`-- --quick` for one
//! round). Needs Java and Debian's `zookeeper` package (installed when missing, as root).
//!
//! Per round, on a fresh cluster (ZooKeeper, two `flint jobmanager`, two `flint taskmanager`
//! processes over loopback, session timeout 2 s — Flink's default is 60 s):
//! - the same WordCount undisturbed: submit → FINISHED;
//! - `kill -9` of the leader while a WordCount runs → the standby serves REST as leader with both
//!   TaskManagers registered (the pool back), and → the recovered WordCount FINISHED.

// A benchmark measures wall time with the real clock; it is no node code.
#![allow(clippy::disallowed_methods)]

use std::time::{Duration, Instant};

/// The integration tests' helpers: ZooKeeper, the HA cluster, the REST client.
#[path = "../tests/common/mod.rs"]
mod common;
use common::ha::{HaCluster, leads, signal, submit_wordcount_named, wait_until};

const LINES: usize = 200_000;

fn median(mut values: Vec<Duration>) -> Duration {
    values.sort();
    values[values.len() / 2]
}

fn finished(cluster: &HaCluster, url: &str, job: &str) {
    let done = cluster.wait_for_job(url, job, "the job ends", |j| {
        matches!(
            j["state"].as_str(),
            Some("FINISHED" | "FAILED" | "CANCELED")
        )
    });
    assert_eq!(done["state"], "FINISHED", "{done:#}");
}

struct Round {
    undisturbed: Duration,
    to_leader_with_pool: Duration,
    to_recovered_finished: Duration,
}

fn round(index: usize) -> Option<Round> {
    let mut cluster = HaCluster::start(&format!("bench-ha-{index}"))?;
    let (a_url, b_url) = (cluster.a.url(), cluster.b.url());
    let submitted = Instant::now();
    let (job, _, _) = submit_wordcount_named(&a_url, &cluster.dir, "undisturbed", LINES);
    finished(&cluster, &a_url, &job);
    let undisturbed = submitted.elapsed();

    let (job, _, _) = submit_wordcount_named(&a_url, &cluster.dir, "killed", LINES);
    cluster.wait_for_job(&a_url, &job, "the job runs", |j| j["state"] == "RUNNING");
    signal(&cluster.a.child, "-KILL");
    let killed = Instant::now();
    let _ = cluster.a.child.wait();
    wait_until("the standby leads", || leads(&b_url).then_some(()));
    cluster.wait_for_pool(&b_url);
    let to_leader_with_pool = killed.elapsed();
    finished(&cluster, &b_url, &job);
    let to_recovered_finished = killed.elapsed();
    Some(Round {
        undisturbed,
        to_leader_with_pool,
        to_recovered_finished,
    })
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let rounds = if quick { 1 } else { 5 };
    let mut all = Vec::new();
    for index in 0..rounds {
        let Some(round) = round(index) else {
            eprintln!("ha bench: skipped (ZooKeeper cannot run here)");
            return;
        };
        println!(
            "round {index}: WordCount {LINES} lines undisturbed {:.2}s; kill -9 leader → new leader \
             serving REST with the pool back {:.2}s, → recovered WordCount FINISHED {:.2}s",
            round.undisturbed.as_secs_f64(),
            round.to_leader_with_pool.as_secs_f64(),
            round.to_recovered_finished.as_secs_f64()
        );
        all.push(round);
    }
    println!(
        "median of {rounds}: undisturbed {:.2}s | kill -9 → leader + pool {:.2}s | kill -9 → \
         recovered FINISHED {:.2}s",
        median(all.iter().map(|r| r.undisturbed).collect()).as_secs_f64(),
        median(all.iter().map(|r| r.to_leader_with_pool).collect()).as_secs_f64(),
        median(all.iter().map(|r| r.to_recovered_finished).collect()).as_secs_f64(),
    );
}
