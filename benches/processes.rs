//! The multi-process cluster: `cargo bench --bench processes` (`-- --quick` for one round).
//!
//! Measures, over loopback with the `local_process` driver: `flint jobmanager` start → 2
//! `flint taskmanager` processes registered; the resident memory of an idle TaskManager process;
//! `kill -9` of a TaskManager process → gone from the JobManager; and the same for a TaskManager
//! the JobManager did not start (as one on another host: no child exit to see). The bench talks to the
//! JobManager through its own transport endpoint, as a client would.

// A benchmark measures wall time with the real clock; it is no node code.
#![allow(clippy::disallowed_methods)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use flint::directory::Resolver;
use flint::messages::ActorAddress;
use flint::messages::ids::ClusterId;
use flint::messages::job_manager::{GetJobManagerStatus, JobManagerGateway};
use flint::transport::handshake::Secret;
use flint::transport::remote::{EndpointConfig, NodeEndpoint};

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

struct JobManagerProcess(Child);

impl Drop for JobManagerProcess {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let _ = self.0.wait();
    }
}

fn task_manager_pids(parent: u32) -> Vec<(u32, String)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
        let ppid: u32 = after
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
        if ppid != parent {
            continue;
        }
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let args: Vec<String> = cmdline
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if let Some(i) = args.iter().position(|a| a == "--resource-id") {
            found.push((pid, args[i + 1].clone()));
        }
    }
    found
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("VmRSS:"))?.to_owned();
            line.split_whitespace().nth(1)?.parse().ok()
        })
        .unwrap_or(0)
}

async fn registered(gateway: &JobManagerGateway) -> Vec<String> {
    gateway
        .get_status
        .send(GetJobManagerStatus)
        .await
        .map(|s| {
            s.task_managers
                .iter()
                .map(|tm| tm.resource_id.to_string())
                .collect()
        })
        .unwrap_or_default()
}

struct Round {
    start_to_two_registered: Duration,
    idle_rss_kib: u64,
    kill_to_removed: Duration,
    remote_kill_to_removed: Duration,
}

async fn round(config: &std::path::Path, client_seed: u64) -> Round {
    let started = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_flint"))
        .args(["jobmanager", "--bind", "127.0.0.1:0", "--pool-size", "2"])
        .arg("--config")
        .arg(config)
        .env_remove("FLINT_SECRET")
        .env("RUST_LOG", "error")
        .stdout(Stdio::piped())
        .spawn()
        .expect("flint jobmanager starts");
    let stdout = child.stdout.take().expect("stdout");
    let jm = JobManagerProcess(child);
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("a ready line");
    let address = line
        .trim()
        .rsplit(' ')
        .next()
        .unwrap_or_default()
        .to_owned();
    let (endpoint, resolver) = NodeEndpoint::bind(EndpointConfig::new(
        "127.0.0.1:0".parse().expect("an address"),
        ClusterId::new("default"),
        "bench-client",
        Secret::insecure(),
        client_seed,
    ))
    .await
    .expect("a client endpoint");
    let gateway = resolver
        .job_manager(&ActorAddress::new(&address, "jobmanager"))
        .expect("a proxy");
    while registered(&gateway).await.len() < 2 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let start_to_two_registered = started.elapsed();
    // Let them idle through a few heartbeats, then read one's resident memory.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let children = task_manager_pids(jm.0.id());
    let idle_rss_kib = children.first().map_or(0, |(pid, _)| rss_kib(*pid));
    let (pid, victim) = children.first().cloned().expect("a TaskManager process");
    let killed = Instant::now();
    let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
    while registered(&gateway).await.contains(&victim) {
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
    while !registered(&gateway)
        .await
        .iter()
        .any(|id| id == "remote-tm")
    {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let killed = Instant::now();
    let _ = remote.kill();
    while registered(&gateway)
        .await
        .iter()
        .any(|id| id == "remote-tm")
    {
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
    let remote_kill_to_removed = killed.elapsed();
    let _ = remote.wait();
    endpoint.shutdown();
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
