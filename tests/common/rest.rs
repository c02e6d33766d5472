//! A REST client for the tests, and an embedded cluster serving the REST API on 127.0.0.1:0.
//!
//! The cluster runs in its own thread and actix System, so a test talks to it over HTTP with a
//! blocking client exactly as an operator's tool would, and can never block the actors.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use flint::job::graph::{DistributionPattern, ExchangeMode, JobGraph, RestartStrategyConfig};
use flint::rest::{RestListener, RestState};
use flint::{ClusterConfig, MiniCluster};

/// How long a test waits for the cluster to reach a state.
pub const DEADLINE: Duration = Duration::from_secs(30);

/// A small cluster with fast heartbeats, its REST API on any free loopback port.
pub fn config(pool: u32, slots: u32) -> ClusterConfig {
    let mut config = ClusterConfig::default();
    config.resourcemanager.pool_size = pool;
    config.resourcemanager.max_pool_size = 5;
    config.resourcemanager.check_interval = Duration::from_millis(20);
    config.taskmanager.slots = slots;
    config.heartbeat.interval = Duration::from_millis(50);
    config.heartbeat.timeout = Duration::from_millis(300);
    config.rest.port = 0;
    // Every endpoint needs the token; the helpers send it.
    config.rest.token = Some(TOKEN.to_owned());
    config.seed = Some(7);
    config
}

/// The REST token of [`config`]'s clusters.
pub const TOKEN: &str = "rest-test-token";

/// The token a `flint jobmanager` of this user generated on this machine (the one a process
/// cluster without a configured token serves with), as `Bearer ...`.
pub fn local_bearer() -> Option<String> {
    flint::process::credentials::LocalCredentials::of_process()
        .ok()?
        .token()
        .ok()?
        .map(|token| format!("Bearer {token}"))
}

/// One HTTP answer, whatever its status.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub content_type: String,
    pub allow: Option<String>,
    pub www_authenticate: Option<String>,
    pub body: String,
}

impl Answer {
    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|error| panic!("not JSON ({error}): {}", self.body))
    }

    /// The body as one of the REST API's view types.
    pub fn decode<T: serde::de::DeserializeOwned>(&self) -> T {
        serde_json::from_str(&self.body).unwrap_or_else(|error| {
            panic!(
                "not a {} ({error}): {}",
                std::any::type_name::<T>(),
                self.body
            )
        })
    }

    /// Asserts a successful answer with `status` and returns it.
    pub fn expect(self, status: u16) -> Self {
        assert_eq!(self.status, status, "{}", self.body);
        self
    }

    /// Asserts the documented error shape: JSON with the status, its reason and a message
    /// containing `says`.
    pub fn expect_error(&self, status: u16, says: &str) {
        assert_eq!(self.status, status, "{}", self.body);
        assert!(
            self.content_type.starts_with("application/json"),
            "{}",
            self.content_type
        );
        let json = self.json();
        assert_eq!(json["status"], status, "{json}");
        assert!(
            json["error"].as_str().is_some_and(|e| !e.is_empty()),
            "{json}"
        );
        let message = json["message"].as_str().expect("a message");
        assert!(message.contains(says), "`{message}` does not say `{says}`");
    }
}

/// A client that returns every status as an answer (not as an error).
pub fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(20)))
        .build()
        .into()
}

/// Sends `method url` with `body` and an `Authorization` header if given.
pub fn request(
    agent: &ureq::Agent,
    method: &str,
    url: &str,
    body: Option<&str>,
    authorization: Option<&str>,
) -> Answer {
    let body = body.unwrap_or("");
    let result = match method {
        "GET" => with_auth(agent.get(url), authorization).call(),
        "DELETE" => with_auth(agent.delete(url), authorization).call(),
        // Bodies are JSON, and say so (the server refuses any other type with 415).
        "POST" => with_auth(agent.post(url), authorization)
            .content_type("application/json")
            .send(body),
        "PUT" => with_auth(agent.put(url), authorization)
            .content_type("application/json")
            .send(body),
        "PATCH" => with_auth(agent.patch(url), authorization)
            .content_type("application/json")
            .send(body),
        other => panic!("no such method in the tests: {other}"),
    };
    let mut response =
        result.unwrap_or_else(|error| panic!("{method} {url} got no answer: {error}"));
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let (content_type, allow, www_authenticate) = (
        header("content-type").unwrap_or_default(),
        header("allow"),
        header("www-authenticate"),
    );
    Answer {
        status: response.status().as_u16(),
        content_type,
        allow,
        www_authenticate,
        body: response
            .body_mut()
            .read_to_string()
            .expect("a readable body"),
    }
}

fn with_auth<B>(
    builder: ureq::RequestBuilder<B>,
    authorization: Option<&str>,
) -> ureq::RequestBuilder<B> {
    match authorization {
        Some(value) => builder.header("Authorization", value),
        None => builder,
    }
}

/// Polls `probe` every 10 ms until it yields `Some`; fails the test with `what` at the deadline.
#[allow(clippy::disallowed_methods)] // a blocking test thread: real time, no actor clock
pub fn poll<T>(what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
    let give_up = Instant::now() + DEADLINE;
    loop {
        if let Some(value) = probe() {
            return value;
        }
        assert!(Instant::now() < give_up, "not within {DEADLINE:?}: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// What the test asks of the cluster's thread.
enum Command {
    /// Stop the actors, keep the REST server: every ask fails from now on.
    StopActors(mpsc::Sender<()>),
}

/// How the cluster's thread ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// The test dropped the cluster.
    ByTest,
    /// A client stopped it with `DELETE /cluster`.
    ByRest,
}

/// An embedded cluster serving the REST API; dropping it stops both.
pub struct RestCluster {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// The token the helpers send (`rest.token`), if any.
    pub token: Option<String>,
    agent: ureq::Agent,
    commands: Option<tokio::sync::mpsc::UnboundedSender<Command>>,
    thread: Option<std::thread::JoinHandle<Ended>>,
}

impl RestCluster {
    /// Starts the cluster of `config`, waits for its pool and serves `config.rest`.
    pub fn start(config: ClusterConfig) -> Self {
        Self::start_with_body_timeout(config, None)
    }

    /// As [`start`](Self::start), with the server's body deadline set to `body_timeout`.
    pub fn start_with_body_timeout(config: ClusterConfig, body_timeout: Option<Duration>) -> Self {
        let (ready, url) = mpsc::channel();
        let (commands, mut received) = tokio::sync::mpsc::unbounded_channel();
        let token = config.rest.token.clone();
        #[allow(clippy::disallowed_methods)] // the cluster's own thread: the test blocks on HTTP
        let thread = std::thread::spawn(move || {
            actix::System::new().block_on(async move {
                let pool = config.resourcemanager.pool_size;
                let cluster = MiniCluster::start(config.clone()).expect("the cluster starts");
                cluster
                    .wait_for_pool(pool, DEADLINE)
                    .await
                    .expect("the pool fills");
                let mut state = RestState::new(
                    cluster.job_manager(),
                    cluster.resource_manager(),
                    config.resourcemanager.max_pool_size,
                )
                .with_events(cluster.events());
                if let Some(timeout) = body_timeout {
                    state = state.with_body_timeout(timeout);
                }
                let mut server = RestListener::bind(&config.rest)
                    .expect("binds")
                    .serve(state)
                    .expect("serves");
                ready.send(server.url()).expect("the test waits");
                let mut cluster = Some(cluster);
                let ended = loop {
                    tokio::select! {
                        biased;
                        command = received.recv() => match command {
                            Some(Command::StopActors(done)) => {
                                if let Some(cluster) = cluster.take() {
                                    cluster.shutdown().await.expect("stops");
                                }
                                let _ = done.send(());
                            }
                            None => break Ended::ByTest,
                        },
                        () = server.stop_requested() => break Ended::ByRest,
                    }
                };
                if let Some(cluster) = cluster {
                    cluster.shutdown().await.expect("stops");
                }
                server.stop().await;
                ended
            })
        });
        let url = url.recv_timeout(DEADLINE).expect("the cluster serves");
        Self {
            url,
            token,
            agent: agent(),
            commands: Some(commands),
            thread: Some(thread),
        }
    }

    fn bearer(&self) -> Option<String> {
        self.token.as_ref().map(|token| format!("Bearer {token}"))
    }

    /// `method path` with the configured token.
    pub fn send(&self, method: &str, path: &str, body: Option<&str>) -> Answer {
        self.request(method, path, body, self.bearer().as_deref())
    }

    /// `method path` with exactly this `Authorization` header (or none).
    pub fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
        authorization: Option<&str>,
    ) -> Answer {
        request(
            &self.agent,
            method,
            &format!("{}{path}", self.url),
            body,
            authorization,
        )
    }

    pub fn get(&self, path: &str) -> Answer {
        self.send("GET", path, None)
    }

    /// `GET path`, expecting 200 and JSON.
    pub fn get_json(&self, path: &str) -> serde_json::Value {
        self.get(path).expect(200).json()
    }

    /// Submits `graph` and returns its id.
    pub fn submit(&self, graph: &JobGraph) -> String {
        let body = serde_json::to_string(graph).expect("a graph encodes");
        let answer = self.send("POST", "/jobs", Some(&body)).expect(202);
        answer.json()["id"].as_str().expect("an id").to_owned()
    }

    /// Polls `GET /jobs/{id}` until `done` holds for it.
    pub fn wait_for_job(
        &self,
        id: &str,
        what: &str,
        done: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        poll(what, || {
            let job = self.get_json(&format!("/jobs/{id}"));
            done(&job).then_some(job)
        })
    }

    fn command(&self, make: impl FnOnce(mpsc::Sender<()>) -> Command) {
        let (done, wait) = mpsc::channel();
        self.commands
            .as_ref()
            .expect("running")
            .send(make(done))
            .expect("the cluster thread runs");
        wait.recv_timeout(DEADLINE).expect("done");
    }

    /// Stops the actors and keeps serving: every endpoint that asks them fails from now on.
    pub fn stop_actors(&self) {
        self.command(Command::StopActors);
    }

    /// Waits for the cluster's thread to end (after `DELETE /cluster`) and says how it ended.
    pub fn join(mut self) -> Ended {
        self.thread
            .take()
            .expect("joined once")
            .join()
            .expect("the cluster thread does not panic")
    }
}

impl Drop for RestCluster {
    fn drop(&mut self) {
        // Closing the channel stops the cluster thread.
        self.commands.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// `noop` sources emitting `count` records each into `noop` sinks, `parallelism` each: done in
/// milliseconds.
pub fn quick_job(name: &str, parallelism: u32) -> JobGraph {
    let mut b = JobGraph::builder(name);
    let source = b
        .vertex("numbers", "noop", parallelism)
        .config("count", "100")
        .index();
    let sink = b.vertex("sink", "noop", parallelism).index();
    b.edge(
        source,
        sink,
        DistributionPattern::Forward,
        ExchangeMode::Pipelined,
    );
    b.build(|_| true).expect("a valid graph")
}

/// One `sleep` task that runs for `ms` unless cancelled.
pub fn sleeping_job(ms: u64) -> JobGraph {
    let mut b = JobGraph::builder("sleeper");
    b.vertex("sleep", "sleep", 1).config("ms", ms.to_string());
    b.build(|_| true).expect("a valid graph")
}

/// `fail-once` into `noop`, two pipelines: every first attempt fails, so each pipeline
/// restarts once (two tasks each) and the job then finishes.
pub fn failing_once_job() -> JobGraph {
    let mut b = JobGraph::builder("fails-once");
    let source = b.vertex("flaky", "fail-once", 2).index();
    let sink = b.vertex("sink", "noop", 2).index();
    b.edge(
        source,
        sink,
        DistributionPattern::Forward,
        ExchangeMode::Pipelined,
    );
    b.restart_strategy(RestartStrategyConfig::FixedDelay {
        attempts: 5,
        delay: Duration::from_millis(20),
    });
    b.build(|_| true).expect("a valid graph")
}

/// A `flint jobmanager` process started by a test, with what it printed when ready and its log.
/// Dropping it stops it with SIGTERM (it stops its TaskManagers first) unless it has ended.
pub struct JobManagerChild {
    pub child: std::process::Child,
    /// Its first line (`flint jobmanager listening on HOST:PORT`), empty if it did not start.
    pub first: String,
    /// Its second line (`flint REST API and dashboard at URL`).
    pub second: String,
    /// Its stderr.
    pub log: std::path::PathBuf,
}

impl JobManagerChild {
    /// `flint jobmanager ARGS --config dir/flint.toml` with fast heartbeats, its TaskManagers
    /// working in `dir/work` and `extra` appended to the configuration.
    pub fn start(args: &[&str], dir: &std::path::Path, extra: &str) -> Self {
        Self::start_binary(env!("CARGO_BIN_EXE_flint").as_ref(), args, dir, extra)
    }

    /// [`start`](Self::start) of `binary` (a program's own cluster binary) instead of `flint`.
    pub fn start_binary(
        binary: &std::path::Path,
        args: &[&str],
        dir: &std::path::Path,
        extra: &str,
    ) -> Self {
        Self::start_with_env(binary, args, dir, extra, &[])
    }

    /// [`start_binary`](Self::start_binary) with `env` set in the JobManager's environment
    /// (`SLURM_CONF` for the Slurm driver's tools).
    pub fn start_with_env(
        binary: &std::path::Path,
        args: &[&str],
        dir: &std::path::Path,
        extra: &str,
        env: &[(String, String)],
    ) -> Self {
        use std::io::BufRead;
        let config = dir.join("flint.toml");
        std::fs::write(
            &config,
            format!(
                "[heartbeat]\ninterval = \"100ms\"\ntimeout = \"1s\"\n[taskmanager]\nworking-dir = \"{}\"\n{extra}",
                dir.join("work").display()
            ),
        )
        .unwrap();
        let log = dir.join("jobmanager.log");
        let mut child = std::process::Command::new(binary)
            .arg("jobmanager")
            .args(args)
            .arg("--config")
            .arg(&config)
            .env_remove("FLINT_SECRET")
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdout(std::process::Stdio::piped())
            .stderr(std::fs::File::create(&log).expect("a log file"))
            .spawn()
            .expect("flint jobmanager starts");
        let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        let (mut first, mut second) = (String::new(), String::new());
        stdout.read_line(&mut first).unwrap();
        stdout.read_line(&mut second).unwrap();
        Self {
            child,
            first,
            second,
            log,
        }
    }

    /// Its transport address, from the first line.
    pub fn address(&self) -> String {
        super::process::address_in(&self.first)
    }

    /// Its REST URL, from the second line; fails the test (with the log) if it is not there.
    pub fn url(&self) -> String {
        self.second
            .trim()
            .strip_prefix("flint REST API and dashboard at ")
            .unwrap_or_else(|| {
                panic!(
                    "not ready: {:?} {:?}; its log:\n{}",
                    self.first,
                    self.second,
                    self.log()
                )
            })
            .to_owned()
    }

    /// What it logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits for it to exit by itself; fails the test at the deadline.
    pub fn wait_for_exit(&mut self) -> std::process::ExitStatus {
        poll("the JobManager exits", || {
            self.child.try_wait().expect("waits")
        })
    }
}

impl Drop for JobManagerChild {
    fn drop(&mut self) {
        super::process::terminate(&mut self.child);
        // Its scratch directory goes with it, unless a failing test wants the log.
        if !std::thread::panicking()
            && let Some(dir) = self.log.parent()
        {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}
