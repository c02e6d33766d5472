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

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use flint::job::graph::{JobGraph, RestartStrategyConfig};
use flint::job::states::JobStatus;
use flint::{ClusterConfig, MiniCluster};
use serde_json::Value;

/// The process helpers of the integration tests (SIGTERM-and-wait).
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
        let dir = std::env::temp_dir().join(format!("flint-bench-waves-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a scratch directory");
        let config = dir.join("flint.toml");
        std::fs::write(
            &config,
            format!(
                "[resourcemanager]\nmax-pool-size = {task_managers}\n\
                 [taskmanager]\nworking-dir = \"{}\"\n",
                dir.join("work").display()
            ),
        )
        .expect("the config file");
        let mut child = Command::new(env!("CARGO_BIN_EXE_flint"))
            .args([
                "jobmanager",
                "--bind",
                "127.0.0.1:0",
                "--rest",
                "127.0.0.1:0",
            ])
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
        let agent = ureq::Agent::new_with_defaults();
        let cluster = Self {
            child,
            url,
            agent,
            _stdout: stdout,
            dir,
        };
        let began = Instant::now();
        while cluster.get("/overview")["slots-total"].as_u64()
            != Some(u64::from(task_managers * slots))
        {
            assert!(
                began.elapsed() < Duration::from_secs(60),
                "the pool never came up"
            );
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

    fn text(&self, path: &str) -> String {
        let mut answer = self
            .agent
            .get(&format!("{}{path}", self.url))
            .call()
            .expect("GET answers");
        answer.body_mut().read_to_string().expect("text")
    }

    fn submit(&self, graph: &JobGraph) -> String {
        let mut answer = self
            .agent
            .post(&format!("{}/jobs", self.url))
            .header("Content-Type", "application/json")
            .send(serde_json::to_string(graph).expect("a graph as JSON"))
            .expect("POST /jobs answers");
        let body: Value = answer.body_mut().read_json().expect("JSON");
        body["id"].as_str().expect("an id").to_owned()
    }

    /// Polls the job list (small, whatever the jobs' sizes) until none of `ids` runs.
    fn wait_all(&self, ids: &[String], pause: Duration) {
        let began = Instant::now();
        loop {
            let list = self.get("/jobs");
            let jobs = list["jobs"].as_array().expect("a job list");
            let running = jobs.iter().filter(|job| {
                ids.iter().any(|id| job["id"] == id.as_str())
                    && !matches!(
                        job["state"].as_str(),
                        Some("FINISHED" | "FAILED" | "CANCELED")
                    )
            });
            if running.count() == 0 {
                for job in jobs
                    .iter()
                    .filter(|j| ids.iter().any(|id| j["id"] == id.as_str()))
                {
                    assert_eq!(job["state"], "FINISHED", "{job}");
                }
                return;
            }
            assert!(
                began.elapsed() < Duration::from_secs(300),
                "jobs never ended"
            );
            std::thread::sleep(pause);
        }
    }

    /// A sample line of `/metrics` (its labels and value), by its name.
    fn metric(&self, name: &str) -> String {
        self.text("/metrics")
            .lines()
            .find(|line| line.starts_with(name))
            .map(|line| line[name.len()..].trim().to_owned())
            .unwrap_or_default()
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
    let rounds = if quick { 1 } else { 5 };

    println!("## 2 TaskManager processes × 4 slots, over REST\n");
    let cluster = Cluster::start(2, 4);
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
