//! The multi-process cluster: `cargo bench --bench processes` (`-- --quick` for one round).
//!
//! Measures, over loopback with the `local_process` driver: `flint jobmanager` start → 2
//! `flint taskmanager` processes registered; the resident memory of an idle TaskManager process;
//! `kill -9` of a TaskManager process → gone from the JobManager; and the same for a TaskManager
//! the JobManager did not start (as one on another host: no child exit to see). The bench talks to the
//! JobManager through its own transport endpoint, as a client would.

// A benchmark measures wall time with the real clock; it is no node code.
#![allow(clippy::disallowed_methods)]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The process helpers of the integration tests: starting `flint jobmanager`, a transport
/// client, finding the TaskManager children.
#[path = "../tests/common/process.rs"]
#[allow(dead_code)]
mod process;
use process::{Client, JobManagerProcess, task_managers_of};

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

async fn registered(client: &Client) -> Vec<String> {
    client
        .status()
        .await
        .task_managers
        .iter()
        .map(|tm| tm.resource_id.to_string())
        .collect()
}

struct Round {
    start_to_two_registered: Duration,
    idle_rss_kib: u64,
    kill_to_removed: Duration,
    remote_kill_to_removed: Duration,
}

async fn round(config: &std::path::Path, client_seed: u64) -> Round {
    let started = Instant::now();
    let mut command = Command::new(env!("CARGO_BIN_EXE_flint"));
    command
        .args(["jobmanager", "--bind", "127.0.0.1:0", "--pool-size", "2"])
        .args(["--rest", "127.0.0.1:0"])
        .arg("--config")
        .arg(config)
        .env_remove("FLINT_SECRET")
        .env("RUST_LOG", "error");
    let jm = JobManagerProcess::start(command);
    let address = jm.address.clone();
    let client = Client::connect(
        Client::loopback_config(Client::local_secret(), client_seed),
        &address,
    )
    .await;
    while registered(&client).await.len() < 2 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let start_to_two_registered = started.elapsed();
    // Let them idle through a few heartbeats, then read one's resident memory.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let children = task_managers_of(jm.pid());
    let idle_rss_kib = children
        .first()
        .and_then(|(pid, _)| process::resident_kib(*pid))
        .unwrap_or(0);
    let (pid, victim) = children.first().cloned().expect("a TaskManager process");
    let killed = Instant::now();
    let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
    while registered(&client).await.contains(&victim) {
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
    let kill_to_removed = killed.elapsed();

    // A TaskManager the JobManager did not start (as on another machine): no child exit to see,
    // so only the transport and the heartbeats can tell it is gone.
    let mut remote = Command::new(env!("CARGO_BIN_EXE_flint"))
        .args(["taskmanager", "--jobmanager", &address, "--slots", "1"])
        .args(["--resource-id", "remote-tm", "--bind", "127.0.0.1:0"])
        .arg("--config")
        .arg(config)
        .env_remove("FLINT_SECRET")
        .env("RUST_LOG", "error")
        .stdout(Stdio::null())
        .spawn()
        .expect("flint taskmanager starts");
    while !registered(&client).await.iter().any(|id| id == "remote-tm") {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let killed = Instant::now();
    let _ = remote.kill();
    while registered(&client).await.iter().any(|id| id == "remote-tm") {
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
    let remote_kill_to_removed = killed.elapsed();
    let _ = remote.wait();
    client.endpoint.shutdown();
    drop(jm);
    Round {
        start_to_two_registered,
        idle_rss_kib,
        kill_to_removed,
        remote_kill_to_removed,
    }
}

#[actix::main]
async fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let rounds = if quick { 1 } else { 7 };
    let dir = std::env::temp_dir().join(format!("flint-bench-proc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let config = dir.join("flint.toml");
    std::fs::write(
        &config,
        format!(
            "[heartbeat]\ninterval = \"1s\"\ntimeout = \"5s\"\n[taskmanager]\nworking-dir = \"{}\"\n",
            dir.join("work").display()
        ),
    )
    .expect("config written");
    let mut results = Vec::new();
    for seed in 0..rounds {
        results.push(round(&config, 100 + seed).await);
    }
    let _ = std::fs::remove_dir_all(&dir);
    println!("| multi-process cluster over loopback (median of {rounds}) | value |");
    println!("|---|---:|");
    println!(
        "| `flint jobmanager` start → 2 `flint taskmanager` processes registered | {:.1} ms |",
        median(
            results
                .iter()
                .map(|r| r.start_to_two_registered.as_secs_f64() * 1e3)
                .collect()
        )
    );
    println!(
        "| idle `flint taskmanager` resident memory | {:.1} MiB |",
        median(
            results
                .iter()
                .map(|r| r.idle_rss_kib as f64 / 1024.0)
                .collect()
        )
    );
    println!(
        "| `kill -9` of a TaskManager process → gone from the JobManager (local_process driver) | {:.1} ms |",
        median(
            results
                .iter()
                .map(|r| r.kill_to_removed.as_secs_f64() * 1e3)
                .collect()
        )
    );
    println!(
        "| `kill -9` of a TaskManager the JobManager did not start → gone (1 s / 5 s heartbeat) | {:.1} ms |",
        median(
            results
                .iter()
                .map(|r| r.remote_kill_to_removed.as_secs_f64() * 1e3)
                .collect()
        )
    );
}
