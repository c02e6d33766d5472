//! A `flint jobmanager` process and a client of it over the transport, for the tests that run
//! real processes.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use flint::base::ids::{ClusterId, JobId};
use flint::job::graph::JobGraph;
use flint::messages::ActorAddress;
use flint::messages::job_manager::{
    GetJobManagerStatus, JobDetails, JobManagerGateway, JobManagerStatus, RequestJobStatus,
    SubmitJob,
};
use flint::rpc::endpoint::{EndpointConfig, NodeEndpoint, RemoteResolver};

/// A running `flint jobmanager`; dropping it stops it with SIGTERM (it stops its TaskManager
/// children first) and waits for it.
pub struct JobManagerProcess {
    pub child: Child,
    /// The `host:port` it listens on, from its ready line.
    pub address: String,
    /// Its REST API's URL, when started with [`start_with_rest`](Self::start_with_rest).
    pub rest: Option<String>,
}

impl JobManagerProcess {
    /// Spawns `command` (a `flint jobmanager` invocation, possibly wrapped) and waits for the
    /// ready line that names its address.
    pub fn start(command: Command) -> Self {
        Self::spawn(command, false)
    }

    /// [`start`](Self::start) for a JobManager started with `--rest`: also reads the line that
    /// names its REST URL.
    pub fn start_with_rest(command: Command) -> Self {
        Self::spawn(command, true)
    }

    fn spawn(mut command: Command, rest: bool) -> Self {
        let mut child = command
            .stdout(Stdio::piped())
            .spawn()
            .expect("flint jobmanager starts");
        let stdout = child.stdout.take().expect("its stdout");
        let mut stdout = BufReader::new(stdout);
        let mut line = String::new();
        stdout.read_line(&mut line).expect("a ready line");
        let address = address_in(&line);
        assert!(address.contains(':'), "not a ready line: {line:?}");
        let rest = rest.then(|| {
            let mut line = String::new();
            stdout.read_line(&mut line).expect("a REST line");
            let url = address_in(&line);
            assert!(url.starts_with("http"), "not a REST line: {line:?}");
            url
        });
        Self {
            child,
            address,
            rest,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

/// A `flint taskmanager` process a test started itself (not the JobManager's driver); killed
/// when dropped.
pub struct TaskManagerChild(pub Child);

impl Drop for TaskManagerChild {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for JobManagerProcess {
    fn drop(&mut self) {
        terminate(&mut self.child);
    }
}

/// The address at the end of a `flint jobmanager listening on HOST:PORT` line.
pub fn address_in(ready_line: &str) -> String {
    ready_line
        .trim()
        .rsplit(' ')
        .next()
        .unwrap_or_default()
        .to_owned()
}

/// The resident set of process `pid` in KiB (`VmRSS` of /proc/pid/status), if it runs.
pub fn resident_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Stops a `flint` process with SIGTERM (a JobManager stops its TaskManager children first) and
/// waits for it, unless it has exited already.
pub fn terminate(child: &mut Child) {
    if let Ok(None) = child.try_wait() {
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let _ = child.wait();
    }
}

/// A transport endpoint of the test process and its proxy of the JobManager at `address`.
pub struct Client {
    pub endpoint: NodeEndpoint,
    pub resolver: Arc<RemoteResolver>,
    pub job_manager: JobManagerGateway,
}

impl Client {
    /// Binds an endpoint from `config` (its cluster must be the JobManager's) and makes the proxy.
    pub async fn connect(config: EndpointConfig, address: &str) -> Self {
        let (endpoint, resolver) = NodeEndpoint::bind(config).await.expect("a client endpoint");
        let job_manager = flint::rpc::directory::Resolver::job_manager(
            &*resolver,
            &ActorAddress::new(address, "jobmanager"),
        )
        .expect("a proxy for the remote JobManager");
        Self {
            endpoint,
            resolver,
            job_manager,
        }
    }

    /// A client on 127.0.0.1 of the cluster `default`.
    /// The cluster secret a `flint jobmanager` of this user generated (what a JobManager
    /// started without `FLINT_SECRET` or `--secret-file` uses).
    pub fn local_secret() -> flint::transport::handshake::Secret {
        flint::process::credentials::LocalCredentials::of_process()
            .and_then(|local| local.secret())
            .expect("this user's generated credentials can be read")
            .expect("a JobManager generated the cluster secret")
    }

    pub fn loopback_config(
        secret: flint::transport::handshake::Secret,
        seed: u64,
    ) -> EndpointConfig {
        EndpointConfig::new(
            "127.0.0.1:0".parse().unwrap(),
            ClusterId::new("default"),
            format!("test-client-{seed}"),
            secret,
            seed,
        )
    }

    pub async fn status(&self) -> JobManagerStatus {
        self.job_manager
            .get_status
            .send(GetJobManagerStatus)
            .await
            .expect("the JobManager answers")
    }

    /// Polls the JobManager until `done` holds; fails the test with `what` after `deadline`.
    pub async fn wait_for(
        &self,
        what: &str,
        deadline: Duration,
        done: impl Fn(&JobManagerStatus) -> bool,
    ) -> JobManagerStatus {
        let give_up = tokio::time::Instant::now() + deadline;
        loop {
            let now = self.status().await;
            if done(&now) {
                return now;
            }
            assert!(tokio::time::Instant::now() < give_up, "{what}: {now:#?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub async fn submit(&self, graph: JobGraph) -> JobId {
        self.job_manager
            .submit_job
            .send(SubmitJob::new(graph))
            .await
            .expect("the JobManager answers")
            .expect("the job is accepted")
    }

    pub async fn job(&self, job: JobId) -> JobDetails {
        self.job_manager
            .request_job_status
            .send(RequestJobStatus { job_id: job })
            .await
            .expect("the JobManager answers")
            .expect("the job is known")
    }

    /// Polls the job until it is globally terminal; fails the test after `deadline`.
    pub async fn wait_for_job(&self, job: JobId, deadline: Duration) -> JobDetails {
        let give_up = tokio::time::Instant::now() + deadline;
        loop {
            let details = self.job(job).await;
            if details.summary.status.is_globally_terminal() {
                return details;
            }
            assert!(
                tokio::time::Instant::now() < give_up,
                "the job never ended: {details:#?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// The TaskManager children of `parent`, as (pid, resource id), from /proc.
pub fn task_managers_of(parent: u32) -> Vec<(u32, String)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let after = stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or("");
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
    found.sort();
    found
}
