//! The client commands end to end: a real `flint jobmanager` process (REST API on a free port,
//! TaskManager child processes) driven only through the `flint` binary — run (waiting and
//! detached), list, status, cancel, taskmanagers, pool-size, stop — and the errors with their
//! exit codes and messages.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::Duration;

use flint::operators::builtin::sequential_word_count;
use serde_json::Value;

mod common;
use common::cli::Run;
use common::{read_counts, scratch, write_text};

const WORDCOUNT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/wordcount.toml");
const DEADLINE: Duration = Duration::from_secs(60);

impl Run {
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("{e}: {self:?}"))
    }
}

/// `flint` with a clean environment (none of the client's variables) plus `env`.
fn command(args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_flint"));
    command.args(args);
    for name in [
        "RUST_LOG",
        "FLINT_JOBMANAGER",
        "FLINT_CONFIG",
        "FLINT_REST_TOKEN",
        "FLINT_SECRET",
    ] {
        command.env_remove(name);
    }
    command.envs(env.iter().copied());
    command
}

fn flint(args: &[&str], env: &[(&str, &str)]) -> Run {
    command(args, env)
        .output()
        .expect("the flint binary runs")
        .into()
}

/// Polls `probe` until it gives a value; fails the test with `what` after [`DEADLINE`].
#[allow(clippy::disallowed_methods)] // a test waits for real processes in real time
fn poll<T>(what: &str, mut probe: impl FnMut() -> Result<T, String>) -> T {
    let began = std::time::Instant::now();
    loop {
        match probe() {
            Ok(value) => return value,
            Err(last) if began.elapsed() > DEADLINE => panic!("{what}; last seen: {last}"),
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// A port nothing listens on (bound, then released).
fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn arg(path: &Path) -> String {
    path.display().to_string()
}

/// The id a waiting `flint run` of the WordCount example printed first.
fn submitted_id(run: &Run) -> String {
    run.stdout
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("Submitted job `wordcount` as "))
        .unwrap_or_else(|| panic!("no job id: {run:?}"))
        .to_owned()
}

/// A running `flint jobmanager` with its REST API; stopped with SIGTERM when dropped.
struct Cluster {
    child: Child,
    /// The REST API's URL, from the process's ready lines.
    url: String,
    /// The transport address (`host:port`), from its first ready line.
    transport: String,
    dir: PathBuf,
    /// Kept open so the process never writes to a closed pipe.
    _stdout: BufReader<ChildStdout>,
}

impl Cluster {
    /// A JobManager keeping `pool_size` TaskManagers of 2 slots, with `extra` appended to its
    /// configuration file.
    fn start(name: &str, pool_size: u32, extra: &str) -> Self {
        let dir = scratch(&format!("cli-client-{name}"));
        let config = dir.join("flint.toml");
        std::fs::write(
            &config,
            format!(
                "[heartbeat]\ninterval = \"200ms\"\ntimeout = \"5s\"\n\
                 [taskmanager]\nworking-dir = \"{}\"\n{extra}",
                arg(&dir.join("work"))
            ),
        )
        .unwrap();
        let pool = pool_size.to_string();
        let mut child = command(
            &[
                "jobmanager",
                "--bind",
                "127.0.0.1:0",
                "--rest",
                "127.0.0.1:0",
                "--pool-size",
                &pool,
                "--slots",
                "2",
                "--config",
                &arg(&config),
            ],
            &[],
        )
        .stdout(Stdio::piped())
        .spawn()
        .expect("flint jobmanager starts");
        let mut stdout = BufReader::new(child.stdout.take().expect("its stdout"));
        let mut seen = String::new();
        let url = loop {
            let mut line = String::new();
            let read = stdout.read_line(&mut line).expect("ready lines");
            assert!(
                read > 0,
                "the JobManager exited before its REST API was up: {seen}"
            );
            seen.push_str(&line);
            if let Some(url) = line.split_whitespace().find(|w| w.starts_with("http://")) {
                break url.trim_end_matches('/').to_owned();
            }
        };
        let transport = seen
            .lines()
            .next()
            .and_then(|line| line.split_whitespace().last())
            .unwrap_or_default()
            .to_owned();
        Self {
            child,
            url,
            transport,
            dir,
            _stdout: stdout,
        }
    }

    /// `flint COMMAND ARGS... --jobmanager URL`, with `env`.
    fn flint_env(&self, args: &[&str], env: &[(&str, &str)]) -> Run {
        let mut all = args.to_vec();
        all.extend(["--jobmanager", &self.url]);
        flint(&all, env)
    }

    fn flint(&self, args: &[&str]) -> Run {
        self.flint_env(args, &[])
    }

    /// Polls `flint status JOB --output json` until the job's state is `state`.
    fn wait_for_state(&self, job: &str, state: &str) -> Value {
        poll(&format!("job {job} never {state}"), || {
            let run = self.flint(&["status", job, "--output", "json"]);
            if run.code != Some(0) {
                return Err(format!("{run:?}"));
            }
            let json = run.json();
            if json["state"] == state {
                Ok(json)
            } else {
                Err(format!("{json}"))
            }
        })
    }

    /// Polls `flint taskmanagers --output json` until `n` TaskManagers are registered.
    fn wait_for_task_managers(&self, n: usize) -> Value {
        poll(&format!("never {n} TaskManagers"), || {
            let run = self.flint(&["taskmanagers", "--output", "json"]);
            if run.code != Some(0) {
                return Err(format!("{run:?}"));
            }
            let json = run.json();
            match json["taskmanagers"].as_array() {
                Some(tms) if tms.len() == n => Ok(json),
                _ => Err(format!("{json}")),
            }
        })
    }

    /// A job file that sleeps `ms` in one task.
    fn slow_job(&self, ms: u64) -> PathBuf {
        let path = self.dir.join(format!("slow-{ms}.toml"));
        std::fs::write(
            &path,
            format!(
                "name = \"slow\"\n[[vertex]]\nname = \"wait\"\noperator = \"sleep\"\n\
                 config.ms = \"{ms}\"\n"
            ),
        )
        .unwrap();
        path
    }

    /// Waits for the JobManager process to exit; its exit status.
    #[allow(clippy::disallowed_methods)] // a test waits for a real process in real time
    fn wait_for_exit(&mut self) -> std::process::ExitStatus {
        let began = std::time::Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(began.elapsed() < DEADLINE, "the JobManager never exited");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        common::process::terminate(&mut self.child);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn a_cluster_is_run_watched_scaled_and_stopped_from_the_cli() {
    let mut cluster = Cluster::start("lifecycle", 1, "");

    // The pool: one TaskManager of two slots.
    let tms = cluster.wait_for_task_managers(1);
    assert_eq!(tms["taskmanagers"][0]["slots-number"], 2, "{tms}");
    let run = cluster.flint(&["taskmanagers"]);
    assert_eq!(run.code, Some(0), "{run:?}");
    assert!(run.stdout.starts_with("ID "), "{run:?}");
    assert!(run.stdout.contains("127.0.0.1:"), "{run:?}");
    let run = cluster.flint(&["pool-size"]);
    assert_eq!(run.code, Some(0), "{run:?}");
    assert!(run.stdout.contains("Designated pool size  1"), "{run:?}");

    // run, waiting: progress (not drawn: stderr is no terminal), the report, the exact count.
    let input = cluster.dir.join("input.txt");
    write_text(&input, 3_000);
    let output = cluster.dir.join("out");
    let (input_param, output_param) = (
        format!("input={}", arg(&input)),
        format!("output={}", arg(&output)),
    );
    let run = cluster.flint(&[
        "run",
        WORDCOUNT,
        "--param",
        &input_param,
        "--param",
        &output_param,
    ]);
    assert_eq!(run.code, Some(0), "{run:?}");
    let waited_id = submitted_id(&run);
    assert!(run.stdout.contains("FINISHED"), "{run:?}");
    assert!(run.stdout.contains("8/8 tasks finished"), "{run:?}");
    assert!(
        run.stdout.contains(&format!("Output: {}", arg(&output))),
        "{run:?}"
    );
    for vertex in ["source", "tokenize", "count", "sink"] {
        assert!(run.stdout.contains(vertex), "{vertex}: {run:?}");
    }
    assert!(
        !run.stderr.contains('\u{1b}'),
        "no escape codes off a terminal: {run:?}"
    );
    assert_eq!(read_counts(&output), sequential_word_count(&input).unwrap());

    // run, waiting, of a job whose input is missing: each failure that made it restart is
    // shown as it happens (the example restarts 3 times), and the last is the report's.
    let missing = cluster.dir.join("no-such-input.txt");
    let missing_param = format!("input={}", arg(&missing));
    let run = cluster.flint(&[
        "run",
        WORDCOUNT,
        "--param",
        &missing_param,
        "--param",
        &output_param,
    ]);
    assert_eq!(run.code, Some(1), "{run:?}");
    let shown: Vec<&str> = run
        .stdout
        .lines()
        .filter(|line| line.contains(", failed: ") && line.contains(&arg(&missing)))
        .collect();
    assert_eq!(shown.len(), 3, "{run:?}");
    for (attempt, line) in shown.iter().enumerate() {
        assert!(
            line.contains(&format!("/2), attempt {attempt} on ")),
            "{run:?}"
        );
    }
    assert!(
        run.stdout.contains("3 restarts") && run.stdout.contains("Failure: source"),
        "{run:?}"
    );
    // Its status keeps why: the four failures, each its source's attempt.
    let failed_id = submitted_id(&run);
    let status = cluster.flint(&["status", &failed_id]);
    let causes = status
        .stdout
        .split_once("Task failures that restarted or failed it (oldest first):\n")
        .unwrap_or_else(|| panic!("no failures shown: {status:?}"))
        .1;
    assert_eq!(
        causes
            .lines()
            .filter(|line| line.contains(&arg(&missing)))
            .count(),
        4,
        "{status:?}"
    );

    // run --detach: the id alone; the job finishes on its own.
    let output = cluster.dir.join("out-detached");
    let output_param = format!("output={}", arg(&output));
    let run = cluster.flint(&[
        "run",
        "--detach",
        WORDCOUNT,
        "--param",
        &input_param,
        "--param",
        &output_param,
    ]);
    assert_eq!(run.code, Some(0), "{run:?}");
    let detached_id = run.stdout.trim().to_owned();
    assert_eq!(detached_id.len(), 36, "only the id: {run:?}");
    let job = cluster.wait_for_state(&detached_id, "FINISHED");
    assert_eq!(job["tasks-finished"], 8, "{job}");
    assert_eq!(read_counts(&output), sequential_word_count(&input).unwrap());

    // list and status.
    let run = cluster.flint(&["list"]);
    assert_eq!(run.code, Some(0), "{run:?}");
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert!(lines[0].starts_with("JOB ID"), "{run:?}");
    assert!(
        lines[1].starts_with(&waited_id) && lines[1].contains("FINISHED"),
        "{run:?}"
    );
    assert!(lines[2].contains("FAILED"), "{run:?}");
    assert!(lines[3].starts_with(&detached_id), "oldest first: {run:?}");
    let json = cluster.flint(&["list", "--output", "json"]).json();
    assert_eq!(json["jobs"].as_array().map(Vec::len), Some(3), "{json}");
    let run = cluster.flint(&["status", &waited_id]);
    assert_eq!(run.code, Some(0), "{run:?}");
    assert!(run.stdout.contains("State      FINISHED"), "{run:?}");
    assert!(run.stdout.contains("text-source"), "{run:?}");
    assert!(run.stdout.contains("LOCALITY"), "{run:?}");

    // cancel a job that runs long enough; cancelling it again is a conflict.
    let slow = cluster.slow_job(60_000);
    let run = cluster.flint(&["run", "--detach", &arg(&slow)]);
    assert_eq!(run.code, Some(0), "{run:?}");
    let slow_id = run.stdout.trim().to_owned();
    cluster.wait_for_state(&slow_id, "RUNNING");
    let run = cluster.flint(&["cancel", &slow_id]);
    assert_eq!(run.code, Some(0), "{run:?}");
    assert!(
        run.stdout.starts_with(&format!("Cancelling job {slow_id}")),
        "{run:?}"
    );
    cluster.wait_for_state(&slow_id, "CANCELED");
    let run = cluster.flint(&["cancel", &slow_id]);
    assert_eq!(run.code, Some(7), "{run:?}");
    assert!(run.stderr.starts_with("flint: "), "{run:?}");

    // pool-size: set, then the pool converges.
    let run = cluster.flint(&["pool-size", "2"]);
    assert_eq!(run.code, Some(0), "{run:?}");
    assert_eq!(run.stdout, "Designated pool size set to 2\n");
    cluster.wait_for_task_managers(2);
    let json = cluster.flint(&["pool-size", "--output", "json"]).json();
    assert_eq!(json["size"], 2, "{json}");

    // stop: the JobManager goes away, and the client says it cannot reach it.
    let run = cluster.flint(&["stop"]);
    assert_eq!(run.code, Some(0), "{run:?}");
    assert!(run.stdout.contains("Stopped"), "{run:?}");
    cluster.wait_for_exit();
    let run = cluster.flint(&["list"]);
    assert_eq!(run.code, Some(4), "{run:?}");
}

#[test]
fn errors_name_the_problem_and_exit_with_their_codes() {
    let cluster = Cluster::start(
        "errors",
        1,
        "[resourcemanager]\nmax-pool-size = 4\n[rest]\ntoken = \"t0ken\"\n",
    );
    let token = [("FLINT_REST_TOKEN", "t0ken")];
    let unknown = "0123abcd-0000-4000-8000-000000000000";

    // Reads need the token too: exit 5.
    let run = cluster.flint(&["status", unknown]);
    assert_eq!(run.code, Some(5), "{run:?}");
    // An unknown job: the server's message, exit 6.
    let run = cluster.flint_env(&["status", unknown], &token);
    assert_eq!(run.code, Some(6), "{run:?}");
    assert!(run.stderr.starts_with("flint: "), "{run:?}");
    assert!(run.stderr.contains("no job"), "{run:?}");
    let run = cluster.flint_env(&["cancel", unknown], &token);
    assert_eq!(run.code, Some(6), "{run:?}");

    // Not an id at all: a usage error before anything is asked.
    let run = cluster.flint(&["status", "3f2a"]);
    assert_eq!(run.code, Some(2), "{run:?}");
    assert!(
        run.stderr.contains("`3f2a` is not a valid JobId"),
        "{run:?}"
    );

    // Changing requests without the token: exit 5, saying where the token goes.
    for args in [
        &["cancel", unknown][..],
        &["pool-size", "2"],
        &["run", "--detach", &arg(&cluster.slow_job(1))],
        &["stop"],
    ] {
        let run = cluster.flint(args);
        assert_eq!(run.code, Some(5), "{args:?}: {run:?}");
        assert!(run.stderr.contains("FLINT_REST_TOKEN"), "{run:?}");
    }
    let run = cluster.flint_env(&["pool-size", "2"], &[("FLINT_REST_TOKEN", "wrong")]);
    assert_eq!(run.code, Some(5), "{run:?}");
    assert!(run.stderr.contains("refused the token"), "{run:?}");

    // Over the maximum: refused, exit 2, naming the key; the pool is unchanged.
    let run = cluster.flint_env(&["pool-size", "5"], &token);
    assert_eq!(run.code, Some(2), "{run:?}");
    assert!(
        run.stderr.contains("resourcemanager.max-pool-size"),
        "{run:?}"
    );
    let json = cluster
        .flint_env(&["pool-size", "--output", "json"], &token)
        .json();
    assert_eq!(json["size"], 1, "{json}");

    // A bad job file: named, exit 2, nothing submitted.
    let bad = cluster.dir.join("bad.toml");
    std::fs::write(&bad, "name = \"bad\"\n[[vertex]\nname = \"x\"\n").unwrap();
    let run = cluster.flint_env(&["run", &arg(&bad)], &token);
    assert_eq!(run.code, Some(2), "{run:?}");
    assert!(run.stderr.contains("line 2"), "{run:?}");
    let run = cluster.flint_env(&["run", WORDCOUNT, "--param", "input=x"], &token);
    assert_eq!(run.code, Some(2), "{run:?}");
    assert!(run.stderr.contains("${output}"), "{run:?}");
    let json = cluster
        .flint_env(&["list", "--output", "json"], &token)
        .json();
    assert_eq!(json["jobs"], Value::Array(Vec::new()), "{json}");

    // An unreachable JobManager: the URL tried, where it came from, how to point elsewhere.
    let port = closed_port();
    let address = format!("127.0.0.1:{port}");
    let run = flint(&["list", "--jobmanager", &address], &[]);
    assert_eq!(run.code, Some(4), "{run:?}");
    for needle in [
        &format!("http://{address}")[..],
        "from --jobmanager",
        "FLINT_JOBMANAGER",
    ] {
        assert!(run.stderr.contains(needle), "`{needle}`: {run:?}");
    }
    let run = flint(&["taskmanagers"], &[("FLINT_JOBMANAGER", &address)]);
    assert_eq!(run.code, Some(4), "{run:?}");
    assert!(run.stderr.contains("from FLINT_JOBMANAGER"), "{run:?}");

    // The configuration file names the JobManager and holds the token.
    let port = cluster.url.rsplit(':').next().unwrap();
    let client_config = cluster.dir.join("client.toml");
    std::fs::write(
        &client_config,
        format!("[rest]\naddress = \"127.0.0.1\"\nport = {port}\ntoken = \"t0ken\"\n"),
    )
    .unwrap();
    let run = flint(&["list", "--config", &arg(&client_config)], &[]);
    assert_eq!(run.code, Some(0), "{run:?}");
    assert_eq!(run.stdout, "No jobs.\n");
    let run = flint(
        &["pool-size", "1"],
        &[("FLINT_CONFIG", &arg(&client_config))],
    );
    assert_eq!(run.code, Some(0), "the token from the file: {run:?}");
}

#[test]
fn ctrl_c_leaves_the_job_running_and_says_how_to_cancel_it() {
    let cluster = Cluster::start("ctrl-c", 1, "");
    let slow = cluster.slow_job(60_000);
    let mut child = command(&["run", &arg(&slow), "--jobmanager", &cluster.url], &[])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The id line comes once the job is submitted and the command is waiting.
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    let id = line
        .trim()
        .strip_prefix("Submitted job `slow` as ")
        .unwrap_or_else(|| panic!("not the id line: {line:?}"))
        .to_owned();
    cluster.wait_for_state(&id, "RUNNING");

    assert!(
        Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status()
            .unwrap()
            .success()
    );
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("keeps running"), "{stderr}");
    assert!(
        stderr.contains(&format!("flint cancel {id} --jobmanager {}", cluster.url)),
        "{stderr}"
    );

    // Still running; the suggested command cancels it.
    let job = cluster.flint(&["status", &id, "--output", "json"]).json();
    assert_eq!(job["state"], "RUNNING", "{job}");
    let run = cluster.flint(&["cancel", &id]);
    assert_eq!(run.code, Some(0), "{run:?}");
    cluster.wait_for_state(&id, "CANCELED");
}

/// Most subtasks between DEPLOYING and FINISHED at once, from the JobManager's timestamps (a
/// slot is given again only after its last holder's end was recorded: half-open intervals).
fn most_at_once(job: &flint::rest::views::JobView) -> usize {
    use flint::job::states::ExecutionState;
    let mut events: Vec<(u64, i32)> = Vec::new();
    for subtask in job.vertices.iter().flat_map(|v| &v.subtasks) {
        events.push((subtask.timestamps[&ExecutionState::Deploying], 1));
        events.push((subtask.timestamps[&ExecutionState::Finished], -1));
    }
    events.sort();
    let (mut now, mut most) = (0, 0);
    for (_, delta) in events {
        now += delta;
        most = most.max(now);
    }
    most as usize
}

/// What Ray and Dask run as 10,000 tasks on 8 workers: one vertex of parallelism 10,000 on four
/// TaskManager processes × 2 slots is 10,000 regions of one subtask, run in waves.
#[test]
fn flint_run_of_ten_thousand_subtasks_on_eight_slots_runs_in_waves() {
    let cluster = Cluster::start("waves", 4, "[resourcemanager]\nmax-pool-size = 4\n");
    cluster.wait_for_task_managers(4);
    let job = cluster.dir.join("wide.toml");
    std::fs::write(
        &job,
        "name = \"wide\"\n[[vertex]]\nname = \"nothing\"\noperator = \"noop\"\nparallelism = 10000\n",
    )
    .unwrap();
    let run = cluster.flint(&["run", &arg(&job)]);
    assert_eq!(run.code, Some(0), "{run:?}");
    assert!(run.stdout.contains("FINISHED"), "{run:?}");
    let id = run
        .stdout
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("Submitted job `wide` as "))
        .unwrap_or_else(|| panic!("no job id: {run:?}"))
        .to_owned();
    let status = cluster.flint(&["status", &id, "--output", "json"]);
    assert_eq!(status.code, Some(0), "{status:?}");
    let view: flint::rest::views::JobView =
        serde_json::from_str(&status.stdout).expect("the job's details");
    assert_eq!(view.tasks_finished, 10_000);
    let most = most_at_once(&view);
    assert!(
        (1..=8).contains(&most),
        "{most} subtasks held slots at once"
    );
}

/// Issue 12: a TaskManager the JobManager refuses stops with the reason instead of registering
/// again every 30 s forever. Here the worker was released by a shrink (`flint pool-size 0`) and a
/// `flint taskmanager` with its resource id comes back: refused, it exits non-zero naming why.
#[test]
fn a_refused_taskmanager_process_exits_with_the_reason() {
    let cluster = Cluster::start("refused", 1, "");
    let tms = cluster.wait_for_task_managers(1);
    let released = tms["taskmanagers"][0]["id"]
        .as_str()
        .expect("a TaskManager id")
        .to_owned();
    let run = cluster.flint(&["pool-size", "0"]);
    assert_eq!(run.code, Some(0), "{run:?}");
    cluster.wait_for_task_managers(0);
    let work = cluster.dir.join("returning");
    let run = flint(
        &[
            "taskmanager",
            "--jobmanager",
            &cluster.transport,
            "--resource-id",
            &released,
            "--bind",
            "127.0.0.1:0",
            "--ignore-env",
            "-D",
            &format!("taskmanager.working-dir={}", arg(&work)),
        ],
        &[],
    );
    assert_ne!(run.code, Some(0), "{run:?}");
    assert!(
        run.stderr.contains("refused its registration")
            && run.stderr.contains(&format!("{released} was released")),
        "{run:?}"
    );
}
