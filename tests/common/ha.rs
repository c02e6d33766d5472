//! The high-availability test cluster, shared by tests/high_availability.rs and the `ha`
//! benchmark: a real ZooKeeper ([`super::zookeeper`]), two `flint jobmanager` processes of one
//! cluster id and two `flint taskmanager` processes that find the leader through ZooKeeper,
//! all asked over the REST API and the CLI as an operator would.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use super::rest::{Answer, JobManagerChild, request};
use super::zookeeper::ZooKeeper;
use super::{RemoveOnDrop, scratch, write_text};

/// How long a test waits for a cluster to reach a state (elections, a whole WordCount).
pub const DEADLINE: Duration = Duration::from_secs(120);

/// The ZooKeeper session timeout of these clusters (the benchmark setting).
pub const SESSION_TIMEOUT: &str = "2s";

/// The ZooKeeper credential of the test clusters (`user:password`, digest scheme).
pub const ZOOKEEPER_CREDENTIAL: &str = "flint:ha-test-password";

/// The `[high-availability]` keys of a test cluster, plus the pool: two TaskManagers started
/// by the test (`standalone`), fast heartbeats. Sessions authenticate with
/// [`ZOOKEEPER_CREDENTIAL`] (written 0600 to `auth_file`), so every znode is `CREATOR_ALL`, as
/// the README recommends.
pub fn ha_keys(zk: &ZooKeeper, storage: &Path, auth_file: &Path) -> String {
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(auth_file)
        .expect("the credential file");
    std::io::Write::write_all(&mut file, ZOOKEEPER_CREDENTIAL.as_bytes()).unwrap();
    format!(
        "[resourcemanager]\ndriver = \"standalone\"\npool-size = 2\n\
         [high-availability]\ntype = \"zookeeper\"\nstorageDir = \"{}\"\n\
         [high-availability.zookeeper]\nquorum = \"{}\"\n\
         [high-availability.zookeeper.client]\nsession-timeout = \"{SESSION_TIMEOUT}\"\n\
         connection-timeout = \"20s\"\nauth-file = \"{}\"\n",
        storage.display(),
        zk.quorum(),
        auth_file.display()
    )
}

/// A client that reports redirects instead of following them.
pub fn no_redirects() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .timeout_global(Some(Duration::from_secs(20)))
        .build()
        .into()
}

/// `GET path` with the token the cluster's JobManagers generated (they run as this user with
/// no configured token), not following a redirect.
pub fn get(url: &str, path: &str) -> Answer {
    request(
        &no_redirects(),
        "GET",
        &format!("{url}{path}"),
        None,
        super::rest::local_bearer().as_deref(),
    )
}

/// Whether the JobManager at `url` leads (answers rather than redirects).
pub fn leads(url: &str) -> bool {
    get(url, "/overview").status == 200
}

/// Polls `probe` every 20 ms until it yields `Some`; fails with `what` after [`DEADLINE`].
#[allow(clippy::disallowed_methods)] // a test waits for real processes in real time
pub fn wait_until<T>(what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
    let give_up = std::time::Instant::now() + DEADLINE;
    loop {
        if let Some(value) = probe() {
            return value;
        }
        assert!(
            std::time::Instant::now() < give_up,
            "not within {DEADLINE:?}: {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub use super::process::TaskManagerChild;

impl TaskManagerChild {
    /// A `flint taskmanager` finding its JobManager through ZooKeeper.
    pub fn start(config: &Path, name: &str, log: &Path) -> Self {
        Self::start_binary(env!("CARGO_BIN_EXE_flint").as_ref(), config, name, log)
    }

    /// [`start`](Self::start) of `binary` (a program's own cluster binary) instead of `flint`.
    pub fn start_binary(binary: &Path, config: &Path, name: &str, log: &Path) -> Self {
        let child = Command::new(binary)
            .args(["taskmanager", "--slots", "2", "--resource-id", name])
            .arg("--config")
            .arg(config)
            .env_remove("FLINT_SECRET")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).expect("a log file"))
            .spawn()
            .expect("flint taskmanager starts");
        Self(child)
    }
}

pub fn signal(child: &Child, signal: &str) {
    let status = Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill {signal} failed");
}

/// ZooKeeper, two JobManagers (`a` leads: it started first), two TaskManagers registered at it.
pub struct HaCluster {
    pub dir: PathBuf,
    pub a: JobManagerChild,
    pub b: JobManagerChild,
    /// `tm-1` and `tm-2`, killed with the cluster (their `Drop`).
    pub task_managers: Vec<TaskManagerChild>,
    pub zk: ZooKeeper,
    /// Removed once every process above was stopped.
    _scratch: RemoveOnDrop,
    /// Last: released once this cluster is gone (see [`HA_CLUSTERS`]).
    _one_at_a_time: Option<MutexGuard<'static, ()>>,
}

/// One HA cluster at a time per test binary: each starts a JVM and four processes, and two at
/// once on 2 cores compete with their 2 s ZooKeeper sessions (CI logged a TaskManager's first
/// session expiring while it was being established).
static HA_CLUSTERS: Mutex<()> = Mutex::new(());

/// Waits for the other HA clusters of this test binary to be gone (see [`HA_CLUSTERS`]); held
/// by a test that starts its own ZooKeeper without a cluster.
pub fn one_at_a_time() -> MutexGuard<'static, ()> {
    // A test that failed holding it poisoned it; the next may still run.
    HA_CLUSTERS.lock().unwrap_or_else(PoisonError::into_inner)
}

impl HaCluster {
    /// `None` (after the loud banner) when ZooKeeper cannot run here.
    pub fn start(name: &str) -> Option<Self> {
        Self::start_with(name, "")
    }

    /// [`start`](Self::start) with `extra` TOML appended to every process's configuration.
    pub fn start_with(name: &str, extra: &str) -> Option<Self> {
        Self::start_binary(name, env!("CARGO_BIN_EXE_flint").as_ref(), extra)
    }

    /// [`start_with`](Self::start_with), every JobManager and TaskManager a process of `binary`
    /// (a program's own cluster binary) instead of `flint`.
    pub fn start_binary(name: &str, binary: &Path, extra: &str) -> Option<Self> {
        Self::start_inner(name, binary, extra, Some(one_at_a_time()))
    }

    /// [`start_with`](Self::start_with) without waiting for the other clusters of this binary:
    /// for a benchmark that runs two clusters side by side on purpose.
    pub fn start_beside(name: &str, extra: &str) -> Option<Self> {
        Self::start_inner(name, env!("CARGO_BIN_EXE_flint").as_ref(), extra, None)
    }

    fn start_inner(
        name: &str,
        binary: &Path,
        extra: &str,
        one_at_a_time: Option<MutexGuard<'static, ()>>,
    ) -> Option<Self> {
        let dir = scratch(name);
        let zk = ZooKeeper::start(&dir.join("zookeeper"))?;
        let keys = ha_keys(&zk, &dir.join("ha-storage"), &dir.join("zookeeper-auth")) + extra;
        let a = JobManagerChild::start_binary(
            binary,
            &["--bind", "127.0.0.1:0", "--rest", "127.0.0.1:0"],
            &mkdir(&dir.join("jm-a")),
            &keys,
        );
        let a_url = a.url();
        wait_until("the first JobManager leads", || leads(&a_url).then_some(()));
        let b = JobManagerChild::start_binary(
            binary,
            &["--bind", "127.0.0.1:0", "--rest", "127.0.0.1:0"],
            &mkdir(&dir.join("jm-b")),
            &keys,
        );
        let tm_config = dir.join("taskmanager.toml");
        std::fs::write(
            &tm_config,
            format!(
                "[heartbeat]\ninterval = \"100ms\"\ntimeout = \"1s\"\n[taskmanager]\n\
                 working-dir = \"{}\"\n{keys}",
                mkdir(&dir.join("tm-work")).display()
            ),
        )
        .unwrap();
        let task_managers = ["tm-1", "tm-2"]
            .into_iter()
            .map(|name| {
                let log = dir.join(format!("{name}.log"));
                TaskManagerChild::start_binary(binary, &tm_config, name, &log)
            })
            .collect();
        let cluster = Self {
            _scratch: RemoveOnDrop(dir.clone()),
            _one_at_a_time: one_at_a_time,
            dir,
            a,
            b,
            task_managers,
            zk,
        };
        cluster.wait_for_pool(&a_url);
        Some(cluster)
    }

    /// Waits until the leader at `url` has both TaskManagers registered.
    pub fn wait_for_pool(&self, url: &str) {
        wait_until("both TaskManagers register at the leader", || {
            let answer = get(url, "/overview");
            (answer.status == 200 && answer.json()["taskmanagers"] == 2).then_some(())
        });
    }

    /// The job's JSON at the JobManager `url`, once `done` holds.
    pub fn wait_for_job(
        &self,
        url: &str,
        job: &str,
        what: &str,
        done: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        wait_until(what, || {
            let answer = get(url, &format!("/jobs/{job}"));
            let json = (answer.status == 200).then(|| answer.json())?;
            done(&json).then_some(json)
        })
    }
}

pub fn mkdir(dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    dir.to_owned()
}

/// examples/wordcount.toml with a `pace` stage after its source (20 µs per line): the tests
/// inject their fault once they saw the job RUNNING, and a plain WordCount of 200,000 lines could
/// finish before the first poll (CI saw it FINISHED, never RUNNING). The count stays exact.
fn paced_wordcount() -> String {
    let example = include_str!("../../examples/wordcount.toml");
    let paced = example.replace(
        "[[edge]]\nfrom = \"source\"\nto = \"tokenize\"",
        "[[vertex]]\nname = \"pace\"\noperator = \"sleep\"\nparallelism = 2\n\
         [vertex.config]\nms = \"0\"\nper-record-us = \"20\"\n\n\
         [[edge]]\nfrom = \"source\"\nto = \"pace\"\npattern = \"forward\"\n\
         exchange = \"pipelined\"\n\n[[edge]]\nfrom = \"pace\"\nto = \"tokenize\"",
    );
    assert_ne!(paced, example, "examples/wordcount.toml changed shape");
    paced
}

/// Submits WordCount of `lines` lines (paced, see [`paced_wordcount`]) with `flint run
/// --detach` at the JobManager `url`; its id, input and output.
pub fn submit_wordcount(url: &str, dir: &Path, lines: usize) -> (String, PathBuf, PathBuf) {
    submit_wordcount_named(url, dir, "wordcount", lines)
}

pub fn submit_wordcount_named(
    url: &str,
    dir: &Path,
    name: &str,
    lines: usize,
) -> (String, PathBuf, PathBuf) {
    let input = dir.join(format!("{name}.txt"));
    let output = dir.join(format!("{name}-output"));
    write_text(&input, lines);
    let job_file = dir.join(format!("{name}.toml"));
    std::fs::write(&job_file, paced_wordcount()).unwrap();
    let job = run_detached(url, &job_file, &input, &output);
    (job, input, output)
}

/// Distinct words of the batch-recovery WordCount's input.
pub const KEYS: usize = 10_000;

/// source → slow → tokenize ⇒ count → pace → sink, `⇒` blocking and all-to-all; `slow` and
/// `pace` slow the first stage (`first_us` per line) and the second (`second_us` per count).
/// They also hold their stages at gates in `dir` until [`open_gate`] opens them, so a test kills
/// the leader while either runs however slow the machine, before it can finish: `slow` after
/// [`FIRST_STAGE_GATE_AFTER`] lines (a subtask with fewer finishes), `pace` at once. A run that
/// is not to be held opens both gates before it submits.
pub fn recovery_job_toml(first_us: u32, second_us: u32, dir: &Path) -> String {
    let vertex = |name: &str, operator: &str, config: &str| {
        format!(
            "[[vertex]]\nname = \"{name}\"\noperator = \"{operator}\"\nparallelism = 2\n{config}\n"
        )
    };
    let edge = |from: &str, to: &str, pattern: &str, exchange: &str| {
        format!(
            "[[edge]]\nfrom = \"{from}\"\nto = \"{to}\"\npattern = \"{pattern}\"\nexchange = \"{exchange}\"\n\n"
        )
    };
    [
        "name = \"recovery-wordcount\"\n[restart-strategy]\ntype = \"fixed-delay\"\n\
         attempts = 5\ndelay = \"200ms\"\n\n"
            .to_owned(),
        vertex(
            "source",
            "text-source",
            "[vertex.config]\npath = \"${input}\"",
        ),
        vertex(
            "slow",
            "sleep",
            &format!(
                "[vertex.config]\nms = \"0\"\nper-record-us = \"{first_us}\"\n\
                 until-exists = \"{}\"\ngate-after = \"{FIRST_STAGE_GATE_AFTER}\"",
                gate(dir, Stage::First).display()
            ),
        ),
        vertex("tokenize", "tokenize", ""),
        vertex("count", "count-by-key", ""),
        vertex(
            "pace",
            "sleep",
            &format!(
                "[vertex.config]\nms = \"0\"\nper-record-us = \"{second_us}\"\n\
                 until-exists = \"{}\"",
                gate(dir, Stage::Second).display()
            ),
        ),
        vertex("sink", "file-sink", "[vertex.config]\npath = \"${output}\""),
        edge("source", "slow", "forward", "pipelined"),
        edge("slow", "tokenize", "forward", "pipelined"),
        edge("tokenize", "count", "all-to-all", "blocking"),
        edge("count", "pace", "forward", "pipelined"),
        edge("pace", "sink", "forward", "pipelined"),
    ]
    .concat()
}

/// 50,000 lines over [`KEYS`] distinct words; `skewed`: the first half of the bytes in 20,000
/// short lines, the second in a few hundred long ones, so source subtask 0 reads 30× the lines
/// of subtask 1 (a text source splits by bytes).
fn write_recovery_input(path: &Path, skewed: bool) {
    let mut text = String::new();
    if skewed {
        for i in 0..20_000usize {
            text.push_str(&format!("w{}\n", i % KEYS));
        }
        let half = text.len();
        let mut line = 0usize;
        while text.len() < 2 * half {
            for word in 0..30 {
                text.push_str(&format!("w{} ", (line * 30 + word) * 7 % KEYS));
            }
            text.push('\n');
            line += 1;
        }
    } else {
        for i in 0..50_000usize {
            text.push_str(&format!("w{} w{}\n", i % KEYS, (i * 7 + 3) % KEYS));
        }
    }
    std::fs::write(path, text).unwrap();
}

/// Submits the batch-recovery WordCount ([`recovery_job_toml`]) with `flint run --detach` at
/// `url`; its id, input and output.
pub fn submit_recovery_wordcount(
    url: &str,
    dir: &Path,
    first_us: u32,
    second_us: u32,
) -> (String, PathBuf, PathBuf) {
    let input = dir.join("words.txt");
    let output = dir.join("counts");
    write_recovery_input(&input, first_us > 0);
    let job_file = dir.join("recovery-wordcount.toml");
    std::fs::write(&job_file, recovery_job_toml(first_us, second_us, dir)).unwrap();
    let job = run_detached(url, &job_file, &input, &output);
    (job, input, output)
}

/// Lines each `slow` subtask of the batch-recovery WordCount passes before its gate holds it:
/// more than the skewed input's subtask 1 reads, far fewer than its subtask 0.
pub const FIRST_STAGE_GATE_AFTER: u32 = 2_000;

/// A stage of the batch-recovery WordCount.
#[derive(Clone, Copy, Debug)]
pub enum Stage {
    /// source → slow → tokenize.
    First,
    /// count → pace → sink.
    Second,
}

/// The file whose existence lets `stage` of the job [`submit_recovery_wordcount`] submitted in
/// `dir` run on.
fn gate(dir: &Path, stage: Stage) -> PathBuf {
    dir.join(format!("{stage:?}-stage-gate"))
}

/// Lets `stage` of the job [`submit_recovery_wordcount`] submitted in `dir` run on.
pub fn open_gate(dir: &Path, stage: Stage) {
    std::fs::write(gate(dir, stage), "").unwrap();
}

/// Whether `stage` of the job submitted in `dir` may run on.
pub fn is_open(dir: &Path, stage: Stage) -> bool {
    gate(dir, stage).exists()
}

/// Waits until job `job`'s event log in the cluster's HA storage (under `dir`) names at least
/// `regions` finished regions (events are appended every 200 ms, so a region that just finished
/// may not be there yet).
pub fn wait_for_logged_regions(dir: &Path, job: &str, regions: usize) {
    let job_id: flint::base::ids::JobId = job.parse().expect("a job id");
    let name = format!("job-{job}.events");
    wait_until(
        &format!("{regions} finished regions in the job event log"),
        || {
            let cluster = std::fs::read_dir(dir.join("ha-storage")).ok()?;
            let store = cluster
                .flatten()
                .map(|entry| entry.path())
                .find(|store| store.join(&name).exists())?;
            let events = flint::ha::JobEventLog::new(&store).read(job_id).ok()?;
            (flint::ha::job_event_log::replay(&events).len() >= regions).then_some(())
        },
    );
}

/// `flint run --detach JOB_FILE --param=input=… --param=output=…` at `url`; the job's id.
fn run_detached(url: &str, job_file: &Path, input: &Path, output: &Path) -> String {
    let run = Command::new(env!("CARGO_BIN_EXE_flint"))
        .args(["run", "--detach", "--jobmanager", url])
        .arg(job_file)
        .arg(format!("--param=input={}", input.display()))
        .arg(format!("--param=output={}", output.display()))
        .env_remove("FLINT_JOBMANAGER")
        .env_remove("FLINT_CONFIG")
        .output()
        .expect("flint run runs");
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "flint run --detach: {stdout}{}",
        String::from_utf8_lossy(&run.stderr)
    );
    stdout.trim().to_owned()
}
