//! High availability against a real ZooKeeper: `cargo bench --bench ha` (`-- --quick` for one
//! round). Needs Java and Debian's `zookeeper` package (installed when missing, as root).
//!
//! Per round, on a fresh cluster (ZooKeeper, two `flint jobmanager`, two `flint taskmanager`
//! processes over loopback, session timeout 2 s — Flink's default is 60 s):
//! - the same WordCount undisturbed: submit → FINISHED;
//! - `kill -9` of the leader while a WordCount runs → the standby serves REST as leader with both
//!   TaskManagers registered (the pool back), and → the recovered WordCount FINISHED.
//!
//! Then batch job recovery (issue 33, item 2), per round a cluster with
//! `execution.batch.job-recovery.enabled` on and one with it off:
//! - 10,000 no-op subtasks submitted over REST → FINISHED (the event log's cost);
//! - the batch-recovery WordCount of tests/batch_recovery.rs undisturbed, and `kill -9` of the
//!   leader while its second stage runs → the job RUNNING again at the new leader → FINISHED.
//!
//! `eventlog` measures only the event log's cost, paired: two clusters (recovery on, recovery
//! off) run side by side and take turns (the order alternating per pair) at 10,000 no-op
//! subtasks, so both see the same moment of a noisy machine; it prints the median ratio.

// A benchmark measures wall time with the real clock; it is no node code.
#![allow(clippy::disallowed_methods)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The integration tests' helpers: ZooKeeper, the HA cluster, the REST client.
#[path = "../tests/common/mod.rs"]
mod common;
use common::ha::{
    HaCluster, Stage, leads, mkdir, open_gate, signal, submit_recovery_wordcount,
    submit_wordcount_named, wait_for_logged_regions, wait_until,
};

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

struct BatchRound {
    ten_thousand: Duration,
    undisturbed: Duration,
    to_running_again: Duration,
    to_finished: Duration,
}

/// Submits `parallelism` no-op subtasks with `flint run --detach`; the job's id.
fn submit_noop(url: &str, dir: &Path, parallelism: u32) -> String {
    let file = dir.join("wide.toml");
    std::fs::write(
        &file,
        format!(
            "name = \"wide\"\n[[vertex]]\nname = \"nothing\"\noperator = \"noop\"\n\
             parallelism = {parallelism}\n"
        ),
    )
    .unwrap();
    let run = std::process::Command::new(env!("CARGO_BIN_EXE_flint"))
        .args(["run", "--detach", "--jobmanager", url])
        .arg(&file)
        .env_remove("FLINT_JOBMANAGER")
        .env_remove("FLINT_CONFIG")
        .output()
        .expect("flint run runs");
    assert!(run.status.success(), "{run:?}");
    String::from_utf8_lossy(&run.stdout).trim().to_owned()
}

fn vertex_states(job: &serde_json::Value, vertex: &str) -> Vec<String> {
    job["vertices"]
        .as_array()
        .and_then(|vs| vs.iter().find(|v| v["name"] == vertex))
        .and_then(|v| v["subtasks"].as_array())
        .map(|subtasks| {
            subtasks
                .iter()
                .map(|s| s["state"].as_str().unwrap_or_default().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// The batch-recovery WordCount in `dir`, paced (50 µs per line, 300 µs per count) and never
/// held at its gates: the bench times it as it runs.
fn submit_paced_recovery_wordcount(url: &str, dir: &Path) -> (String, PathBuf, PathBuf) {
    let dir = mkdir(dir);
    for stage in [Stage::First, Stage::Second] {
        open_gate(&dir, stage);
    }
    submit_recovery_wordcount(url, &dir, 50, 300)
}

fn batch_round(index: usize, enabled: bool) -> Option<BatchRound> {
    let extra = format!("[execution.batch.job-recovery]\nenabled = {enabled}\n");
    let mut cluster = HaCluster::start_with(&format!("bench-ha-batch-{enabled}-{index}"), &extra)?;
    let (a_url, b_url) = (cluster.a.url(), cluster.b.url());
    let started = Instant::now();
    let job = submit_noop(&a_url, &cluster.dir, 10_000);
    finished(&cluster, &a_url, &job);
    let ten_thousand = started.elapsed();
    let started = Instant::now();
    let (job, _, _) = submit_paced_recovery_wordcount(&a_url, &cluster.dir.join("undisturbed"));
    finished(&cluster, &a_url, &job);
    let undisturbed = started.elapsed();
    let (job, _, _) = submit_paced_recovery_wordcount(&a_url, &cluster.dir.join("killed"));
    cluster.wait_for_job(&a_url, &job, "the second stage runs", |j| {
        vertex_states(j, "tokenize").iter().all(|s| s == "FINISHED")
            && vertex_states(j, "pace").iter().any(|s| s == "RUNNING")
    });
    if enabled {
        // Its first stage's two regions are in the log (appended every 200 ms).
        wait_for_logged_regions(&cluster.dir, &job, 2);
    }
    signal(&cluster.a.child, "-KILL");
    let killed = Instant::now();
    let _ = cluster.a.child.wait();
    wait_until("the standby leads", || leads(&b_url).then_some(()));
    cluster.wait_for_job(&b_url, &job, "the job runs again", |j| {
        j["state"] == "RUNNING" && vertex_states(j, "pace").iter().any(|s| s == "RUNNING")
    });
    let to_running_again = killed.elapsed();
    finished(&cluster, &b_url, &job);
    let to_finished = killed.elapsed();
    let done = cluster.wait_for_job(&b_url, &job, "the job's details", |_| true);
    let vertices: Vec<String> = (done["vertices"].as_array().into_iter().flatten())
        .map(|v| {
            let subtasks = v["subtasks"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or_default();
            let restored = subtasks.iter().filter(|s| s["restored"] == true).count();
            format!(
                "{} {}ms restored {restored}/{}",
                v["name"].as_str().unwrap_or_default(),
                v["duration"].as_u64().unwrap_or_default(),
                subtasks.len()
            )
        })
        .collect();
    println!("  after the failover: {}", vertices.join(", "));
    Some(BatchRound {
        ten_thousand,
        undisturbed,
        to_running_again,
        to_finished,
    })
}

fn batch_rounds(rounds: usize) {
    for enabled in [true, false] {
        let mut all = Vec::new();
        for index in 0..rounds {
            let Some(round) = batch_round(index, enabled) else {
                return;
            };
            println!(
                "batch recovery {}: round {index}: 10,000 no-op subtasks {:.3}s; recovery \
                 WordCount undisturbed {:.2}s; kill -9 in its second stage → RUNNING again \
                 {:.2}s → FINISHED {:.2}s",
                if enabled { "on" } else { "off" },
                round.ten_thousand.as_secs_f64(),
                round.undisturbed.as_secs_f64(),
                round.to_running_again.as_secs_f64(),
                round.to_finished.as_secs_f64()
            );
            all.push(round);
        }
        println!(
            "batch recovery {}: median of {rounds}: 10,000 no-op subtasks {:.3}s | undisturbed \
             {:.2}s | kill -9 → RUNNING again {:.2}s | kill -9 → FINISHED {:.2}s",
            if enabled { "on" } else { "off" },
            median(all.iter().map(|r| r.ten_thousand).collect()).as_secs_f64(),
            median(all.iter().map(|r| r.undisturbed).collect()).as_secs_f64(),
            median(all.iter().map(|r| r.to_running_again).collect()).as_secs_f64(),
            median(all.iter().map(|r| r.to_finished).collect()).as_secs_f64(),
        );
    }
}

/// One submit → FINISHED of 10,000 no-op subtasks on `cluster`.
fn ten_thousand(cluster: &HaCluster, index: usize) -> Duration {
    let url = cluster.a.url();
    let started = Instant::now();
    let job = submit_noop(
        &url,
        &mkdir(&cluster.dir.join(format!("wide-{index}"))),
        10_000,
    );
    finished(cluster, &url, &job);
    started.elapsed()
}

fn event_log_pairs(pairs: usize) {
    let start = |enabled: bool| {
        let extra = format!("[execution.batch.job-recovery]\nenabled = {enabled}\n");
        HaCluster::start_beside(&format!("bench-ha-eventlog-{enabled}"), &extra)
    };
    let (Some(on), Some(off)) = (start(true), start(false)) else {
        eprintln!("ha bench: skipped (ZooKeeper cannot run here)");
        return;
    };
    // A warm-up job each: the first job pays for page faults and connections.
    ten_thousand(&on, 0);
    ten_thousand(&off, 0);
    let (mut with_log, mut without, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for pair in 1..=pairs {
        let (a, b) = if pair % 2 == 0 {
            let a = ten_thousand(&on, pair);
            (a, ten_thousand(&off, pair))
        } else {
            let b = ten_thousand(&off, pair);
            (ten_thousand(&on, pair), b)
        };
        let ratio = a.as_secs_f64() / b.as_secs_f64();
        println!(
            "event log: pair {pair}: on {:.3}s, off {:.3}s, ratio {ratio:.3}",
            a.as_secs_f64(),
            b.as_secs_f64()
        );
        with_log.push(a);
        without.push(b);
        ratios.push(ratio);
    }
    ratios.sort_by(f64::total_cmp);
    println!(
        "event log: median of {pairs} pairs: on {:.3}s, off {:.3}s, median ratio on/off {:.3}",
        median(with_log).as_secs_f64(),
        median(without).as_secs_f64(),
        ratios[ratios.len() / 2]
    );
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let rounds = if quick { 1 } else { 5 };
    if std::env::args().any(|a| a == "eventlog") {
        event_log_pairs(if quick { 3 } else { 11 });
        return;
    }
    if std::env::args().any(|a| a == "batch") {
        batch_rounds(rounds);
        return;
    }
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
