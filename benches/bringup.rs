//! Pool bring-up and crash replacement of in-process TaskManagers.
//!
//! `cargo bench --bench bringup` (add `-- --quick` for one round). For N = 10, 100, 1000:
//! the wall time from `MiniCluster::start` to N workers counted as started by the resource
//! manager (each a TaskManager on its own thread, registered at the JobManager) and
//! registrations per second; first, in a cold process, the resident memory each idle TaskManager
//! adds. Then crash → replacement:
//! a worker is killed, the JobManager notices (its heartbeat is overdue and it cannot be reached;
//! at worst the heartbeat timeout), the resource manager starts
//! a replacement that registers. Medians over the rounds are printed as a Markdown table.

// A benchmark measures wall time with the real clock; it is no node code.
#![allow(clippy::disallowed_methods)]

use std::time::{Duration, Instant};

use flint::env::events::ClusterEvent;
use flint::{ClusterConfig, MiniCluster};
use tokio::sync::broadcast::error::RecvError;

// The allocator of the `flint` and `demo` binaries (flint::process::allocator).
flint::global_allocator!();

fn config(pool_size: u32) -> ClusterConfig {
    let mut config = ClusterConfig::default();
    config.resourcemanager.pool_size = pool_size;
    config.resourcemanager.max_pool_size = 10_000;
    config.taskmanager.slots = 2;
    config.heartbeat.interval = Duration::from_millis(50);
    config.heartbeat.timeout = Duration::from_millis(200);
    config.seed = Some(1);
    config
}

fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("Linux /proc");
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .expect("resident pages");
    pages * 4096
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Waits for `count` events matching `pick`, returning when the last one arrived.
async fn wait_events(
    events: &mut tokio::sync::broadcast::Receiver<ClusterEvent>,
    mut count: usize,
    pick: impl Fn(&ClusterEvent) -> bool,
) -> Instant {
    while count > 0 {
        match tokio::time::timeout(Duration::from_secs(60), events.recv()).await {
            Ok(Ok(event)) if pick(&event) => count -= 1,
            Ok(Ok(_)) => {}
            Ok(Err(RecvError::Lagged(n))) => panic!("event buffer lagged by {n}"),
            Ok(Err(RecvError::Closed)) | Err(_) => panic!("events stopped before the pool filled"),
        }
    }
    Instant::now()
}

struct BringUp {
    seconds: f64,
    per_second: f64,
}

/// Resident memory an idle TaskManager adds, measured first thing in the process (a cold
/// allocator): an empty cluster, then `n` idle TaskManagers, the difference over `n`.
async fn idle_memory_per_task_manager(n: u32) -> f64 {
    let cluster = MiniCluster::start(config(0)).unwrap();
    cluster
        .wait_for_pool(0, Duration::from_secs(60))
        .await
        .unwrap();
    let before = resident_bytes();
    cluster.set_pool_size(n).await.unwrap();
    cluster
        .wait_for_pool(n, Duration::from_secs(60))
        .await
        .unwrap();
    // Several heartbeat rounds, so every TaskManager has settled into idling.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = resident_bytes();
    cluster.shutdown().await.unwrap();
    after.saturating_sub(before) as f64 / 1024.0 / f64::from(n)
}

async fn bring_up(n: u32) -> BringUp {
    let started = Instant::now();
    let cluster = MiniCluster::start(config(n)).unwrap();
    let mut events = cluster.subscribe();
    let done = wait_events(&mut events, n as usize, |e| {
        matches!(e, ClusterEvent::WorkerRegistered { .. })
    })
    .await;
    let seconds = (done - started).as_secs_f64();
    // Confirm with the actors themselves.
    cluster
        .wait_for_pool(n, Duration::from_secs(60))
        .await
        .unwrap();
    cluster.shutdown().await.unwrap();
    BringUp {
        seconds,
        per_second: f64::from(n) / seconds,
    }
}

struct Replacement {
    detected_ms: f64,
    replaced_ms: f64,
}

async fn crash_and_replace(n: u32, rounds: usize) -> Vec<Replacement> {
    let cluster = MiniCluster::start(config(n)).unwrap();
    cluster
        .wait_for_pool(n, Duration::from_secs(60))
        .await
        .unwrap();
    let mut results = Vec::new();
    for _ in 0..rounds {
        let mut events = cluster.subscribe();
        let victim = cluster.running_workers()[0].clone();
        let killed = Instant::now();
        cluster.kill_worker(&victim).unwrap();
        let detected = wait_events(&mut events, 1, |e| {
            matches!(e, ClusterEvent::TaskManagerLost { resource_id, .. } if *resource_id == victim)
        })
        .await;
        let replaced = wait_events(&mut events, 1, |e| {
            matches!(e, ClusterEvent::WorkerRegistered { .. })
        })
        .await;
        results.push(Replacement {
            detected_ms: (detected - killed).as_secs_f64() * 1e3,
            replaced_ms: (replaced - detected).as_secs_f64() * 1e3,
        });
        cluster
            .wait_for_pool(n, Duration::from_secs(60))
            .await
            .unwrap();
    }
    cluster.shutdown().await.unwrap();
    results
}

#[actix::main]
async fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let rounds = if quick { 1 } else { 5 };
    let kib = idle_memory_per_task_manager(1_000).await;
    println!(
        "idle in-process TaskManager (own thread + runtime + actor), 1,000 of them: {kib:.1} KiB resident each\n"
    );
    println!("| TaskManagers | bring-up (median of {rounds}) | registrations/s |");
    println!("|---:|---:|---:|");
    for n in [10, 100, 1_000] {
        let mut runs = Vec::new();
        for _ in 0..rounds {
            runs.push(bring_up(n).await);
        }
        println!(
            "| {n} | {:.1} ms | {:.0} |",
            median(runs.iter().map(|r| r.seconds * 1e3).collect()),
            median(runs.iter().map(|r| r.per_second).collect()),
        );
    }
    let replacements = crash_and_replace(10, if quick { 3 } else { 15 }).await;
    println!();
    println!(
        "| crash → replacement (pool of 10, heartbeat 50 ms / timeout 200 ms, median of {}) | ms |",
        replacements.len()
    );
    println!("|---|---:|");
    println!(
        "| kill → JobManager unregisters it (overdue heartbeat, unreachable) | {:.1} |",
        median(replacements.iter().map(|r| r.detected_ms).collect())
    );
    println!(
        "| unregistered → replacement started and registered | {:.2} |",
        median(replacements.iter().map(|r| r.replaced_ms).collect())
    );
}
