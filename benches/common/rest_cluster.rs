//! A `flint jobmanager` process with its TaskManager processes, driven over REST: the harness of
//! the benchmarks that measure across processes (`waves`, `soak`). SIGTERM when dropped.

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use flint::job::graph::JobGraph;
use serde_json::Value;

/// The REST token the benchmark's JobManager is started with (every endpoint needs one).
const TOKEN: &str = "bench-rest-token";

/// See the module docs.
pub struct Cluster {
    child: Child,
    url: String,
    agent: ureq::Agent,
    _stdout: BufReader<ChildStdout>,
    dir: std::path::PathBuf,
}

impl Cluster {
    /// `task_managers` TaskManager processes of `slots` slots (`extra` appended to the
    /// configuration file), once every slot is registered. `name` names its scratch directory.
    pub fn start(name: &str, task_managers: u32, slots: u32, extra: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("flint-bench-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a scratch directory");
        let config = dir.join("flint.toml");
        std::fs::write(
            &config,
            format!(
                "{extra}\n[taskmanager]\nworking-dir = \"{}\"\n",
                dir.join("work").display()
            ),
        )
        .expect("the config file");
        // FLINT_BENCH_BIN runs another build of `flint` against this one (a before/after
        // comparison in one window).
        let flint = std::env::var_os("FLINT_BENCH_BIN")
            .unwrap_or_else(|| env!("CARGO_BIN_EXE_flint").into());
        let mut child = Command::new(flint)
            .args(["jobmanager", "--bind", "127.0.0.1:0"])
            .args(["--rest", "127.0.0.1:0"])
            .args(["--pool-size", &task_managers.to_string()])
            .args(["--slots", &slots.to_string()])
            .args(["--config", &config.display().to_string()])
            .env("RUST_LOG", "warn")
            .env("FLINT_REST_TOKEN", TOKEN)
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
            assert!(
                began.elapsed() < Duration::from_secs(60),
                "the pool never came up"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        cluster
    }

    /// `GET path` as JSON.
    pub fn get(&self, path: &str) -> Value {
        let mut answer = self
            .agent
            .get(&format!("{}{path}", self.url))
            .header("Authorization", &format!("Bearer {TOKEN}"))
            .call()
            .expect("GET answers");
        answer.body_mut().read_json().expect("JSON")
    }

    /// `GET path` as text.
    pub fn text(&self, path: &str) -> String {
        let mut answer = self
            .agent
            .get(&format!("{}{path}", self.url))
            .header("Authorization", &format!("Bearer {TOKEN}"))
            .call()
            .expect("GET answers");
        answer.body_mut().read_to_string().expect("text")
    }

    /// `POST /jobs` of a graph already as JSON; the job's id.
    pub fn submit_json(&self, graph: &str) -> String {
        let mut answer = self
            .agent
            .post(&format!("{}/jobs", self.url))
            .header("Content-Type", "application/json")
            .header("Authorization", &format!("Bearer {TOKEN}"))
            .send(graph)
            .expect("POST /jobs answers");
        let body: Value = answer.body_mut().read_json().expect("JSON");
        body["id"].as_str().expect("an id").to_owned()
    }

    /// `POST /artifacts` of `bytes`: the stored artifact's digest (hex).
    pub fn upload(&self, bytes: &[u8]) -> String {
        let mut answer = self
            .agent
            .post(&format!("{}/artifacts", self.url))
            .header("Content-Type", "application/octet-stream")
            .header("Authorization", &format!("Bearer {TOKEN}"))
            .send(bytes)
            .expect("POST /artifacts answers");
        let body: Value = answer.body_mut().read_json().expect("JSON");
        body["digest"].as_str().expect("a digest").to_owned()
    }

    /// `POST /jobs`; the job's id.
    pub fn submit(&self, graph: &JobGraph) -> String {
        self.submit_json(&serde_json::to_string(graph).expect("a graph as JSON"))
    }

    /// Polls the job list (small, whatever the jobs' sizes) every `pause` until every job of
    /// `ids` still listed has ended, and checks they FINISHED (a job the store forgot ended).
    pub fn wait_all(&self, ids: &[String], pause: Duration) {
        let began = Instant::now();
        loop {
            let list = self.get("/jobs");
            let jobs = list["jobs"].as_array().expect("a job list");
            let ours: Vec<&Value> = jobs
                .iter()
                .filter(|job| ids.iter().any(|id| job["id"] == id.as_str()))
                .collect();
            let ended = |job: &&Value| {
                matches!(
                    job["state"].as_str(),
                    Some("FINISHED" | "FAILED" | "CANCELED")
                )
            };
            if ours.iter().all(ended) {
                for job in ours {
                    if job["state"] != "FINISHED" {
                        let id = job["id"].as_str().unwrap_or_default();
                        let failure = &self.get(&format!("/jobs/{id}"))["failure"];
                        panic!("job {id} ended {}: {failure}", job["state"]);
                    }
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
    pub fn metric(&self, name: &str) -> String {
        self.text("/metrics")
            .lines()
            .find(|line| line.starts_with(name))
            .map(|line| line[name.len()..].trim().to_owned())
            .unwrap_or_default()
    }

    /// The JobManager process's resident memory, in KiB.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn rss_kib(&self) -> u64 {
        crate::process::resident_kib(self.child.id()).expect("its VmRSS in /proc/PID/status")
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        crate::process::terminate(&mut self.child);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
