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

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use flint::job::graph::{JobGraph, RestartStrategyConfig};
use serde_json::Value;

/// The process helpers of the integration tests (SIGTERM-and-wait).
#[path = "../tests/common/process.rs"]
#[allow(dead_code)]
mod process;

/// A `flint jobmanager` with its TaskManager processes; SIGTERM when dropped.
struct Cluster {
    child: Child,
    url: String,
    agent: ureq::Agent,
    _stdout: BufReader<ChildStdout>,
    dir: std::path::PathBuf,
}

impl Cluster {
    fn start(task_managers: u32, slots: u32) -> Self {
        let dir = std::env::temp_dir().join(format!("flint-bench-soak-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a scratch directory");
        let config = dir.join("flint.toml");
        std::fs::write(
            &config,
            format!(
                "[taskmanager]\nworking-dir = \"{}\"\n",
                dir.join("work").display()
            ),
        )
        .expect("the config file");
        let mut child = Command::new(env!("CARGO_BIN_EXE_flint"))
            .args(["jobmanager", "--bind", "127.0.0.1:0"])
            .args(["--rest", "127.0.0.1:0"])
            .args(["--pool-size", &task_managers.to_string()])
            .args(["--slots", &slots.to_string()])
            .args(["--config", &config.display().to_string()])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .spawn()
            .expect("flint jobmanager starts");
        let mut stdout = BufReader::new(child.stdout.take().expect("its stdout"));
        let url = loop {
            let mut line = String::new();
            assert!(stdout.read_line(&mut line).expect("ready lines") > 0);
            if let Some(url) = line.split_whitespace().find(|w| w.starts_with("http://")) {
                break url.trim_end_matches('/').to_owned();
            }
        };
        let cluster = Self {
            child,
            url,
            agent: ureq::Agent::new_with_defaults(),
            _stdout: stdout,
            dir,
        };
        let began = Instant::now();
        while cluster.get("/overview")["slots-total"].as_u64()
            != Some(u64::from(task_managers * slots))
        {
            assert!(began.elapsed() < Duration::from_secs(60), "no pool");
            std::thread::sleep(Duration::from_millis(20));
        }
        cluster
    }

    fn get(&self, path: &str) -> Value {
        let mut answer = self
            .agent
            .get(&format!("{}{path}", self.url))
            .call()
            .expect("GET answers");
        answer.body_mut().read_json().expect("JSON")
    }

    fn submit(&self, graph: &str) -> String {
        let mut answer = self
            .agent
            .post(&format!("{}/jobs", self.url))
            .header("Content-Type", "application/json")
            .send(graph)
            .expect("POST /jobs answers");
        let body: Value = answer.body_mut().read_json().expect("JSON");
        body["id"].as_str().expect("an id").to_owned()
    }

    /// Waits until every job of `ids` still listed has ended (FINISHED, checked); a job the
    /// store forgot already ended.
    fn wait_all(&self, ids: &[String]) {
        let began = Instant::now();
        loop {
            let list = self.get("/jobs");
            let jobs = list["jobs"].as_array().expect("a job list");
            let ours: Vec<&Value> = jobs
                .iter()
                .filter(|job| ids.iter().any(|id| job["id"] == id.as_str()))
                .collect();
            if ours.iter().all(|job| {
                matches!(
                    job["state"].as_str(),
                    Some("FINISHED" | "FAILED" | "CANCELED")
                )
            }) {
                for job in ours {
                    assert_eq!(job["state"], "FINISHED", "{job}");
                }
                return;
            }
            assert!(
                began.elapsed() < Duration::from_secs(120),
                "jobs never ended"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// The JobManager process's resident memory, in KiB.
    fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("/proc/PID/status");
        status
            .lines()
            .find_map(|line| line.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .expect("a VmRSS line")
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        process::terminate(&mut self.child);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let total: usize = if quick { 2_000 } else { 10_000 };
    let batch = 100;
    let mut builder = JobGraph::builder("short");
    builder.vertex("nothing", "noop", 1);
    builder.restart_strategy(RestartStrategyConfig::None);
    let graph = serde_json::to_string(&builder.build(|_| true).expect("a valid graph"))
        .expect("a graph as JSON");

    let cluster = Cluster::start(2, 4);
    let at_start = cluster.rss_kib();
    let began = Instant::now();
    let mut after_1000 = 0;
    let mut done = 0;
    while done < total {
        let ids: Vec<String> = (0..batch).map(|_| cluster.submit(&graph)).collect();
        cluster.wait_all(&ids);
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
