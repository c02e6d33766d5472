//! High availability against a real ZooKeeper (Debian's package, started per test on a free
//! port; see tests/common/zookeeper.rs): two `flint jobmanager` processes of one cluster id,
//! TaskManager processes that find the leader through ZooKeeper, and the leader killed, paused
//! or cut off from ZooKeeper. Everything is asked over the REST API, as an operator would.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use flint::operators::builtin::sequential_word_count;

mod common;
use common::rest::{Answer, JobManagerChild, request};
use common::zookeeper::ZooKeeper;
use common::{read_counts, scratch, write_text};

/// How long a test waits for a cluster to reach a state (elections, a whole WordCount).
const DEADLINE: Duration = Duration::from_secs(120);

/// The ZooKeeper session timeout of these clusters (the benchmark setting).
const SESSION_TIMEOUT: &str = "2s";

/// The `[high-availability]` keys of a test cluster, plus the pool: two TaskManagers started
/// by the test (`standalone`), fast heartbeats.
fn ha_keys(zk: &ZooKeeper, storage: &Path) -> String {
    format!(
        "[resourcemanager]\ndriver = \"standalone\"\npool-size = 2\n\
         [high-availability]\ntype = \"zookeeper\"\nstorageDir = \"{}\"\n\
         [high-availability.zookeeper]\nquorum = \"{}\"\n\
         [high-availability.zookeeper.client]\nsession-timeout = \"{SESSION_TIMEOUT}\"\n\
         connection-timeout = \"20s\"\n",
        storage.display(),
        zk.quorum()
    )
}

/// A client that reports redirects instead of following them.
fn no_redirects() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .timeout_global(Some(Duration::from_secs(20)))
        .build()
        .into()
}

fn get(url: &str, path: &str) -> Answer {
    request(&no_redirects(), "GET", &format!("{url}{path}"), None, None)
}

/// Whether the JobManager at `url` leads (answers rather than redirects).
fn leads(url: &str) -> bool {
    get(url, "/overview").status == 200
}

/// Polls `probe` every 20 ms until it yields `Some`; fails with `what` after [`DEADLINE`].
#[allow(clippy::disallowed_methods)] // a test waits for real processes in real time
fn wait_until<T>(what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
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

/// A `flint taskmanager` finding its JobManager through ZooKeeper; killed when dropped.
struct TaskManagerChild(Child);

impl TaskManagerChild {
    fn start(config: &Path, name: &str, log: &Path) -> Self {
        let child = Command::new(env!("CARGO_BIN_EXE_flint"))
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

impl Drop for TaskManagerChild {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn signal(child: &Child, signal: &str) {
    let status = Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill {signal} failed");
}

/// ZooKeeper, two JobManagers (`a` leads: it started first), two TaskManagers registered at it.
struct HaCluster {
    dir: PathBuf,
    a: JobManagerChild,
    b: JobManagerChild,
    /// Held for their `Drop`: killed with the cluster.
    _task_managers: Vec<TaskManagerChild>,
    zk: ZooKeeper,
}

impl HaCluster {
    /// `None` (after the loud banner) when ZooKeeper cannot run here.
    fn start(name: &str) -> Option<Self> {
        let dir = scratch(name);
        let zk = ZooKeeper::start(&dir.join("zookeeper"))?;
        let keys = ha_keys(&zk, &dir.join("ha-storage"));
        let a = JobManagerChild::start(
            &["--bind", "127.0.0.1:0", "--rest", "127.0.0.1:0"],
            &mkdir(&dir.join("jm-a")),
            &keys,
        );
        let a_url = a.url();
        wait_until("the first JobManager leads", || leads(&a_url).then_some(()));
        let b = JobManagerChild::start(
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
            .map(|name| TaskManagerChild::start(&tm_config, name, &dir.join(format!("{name}.log"))))
            .collect();
        let cluster = Self {
            dir,
            a,
            b,
            _task_managers: task_managers,
            zk,
        };
        cluster.wait_for_pool(&a_url);
        Some(cluster)
    }

    /// Waits until the leader at `url` has both TaskManagers registered.
    fn wait_for_pool(&self, url: &str) {
        wait_until("both TaskManagers register at the leader", || {
            let answer = get(url, "/overview");
            (answer.status == 200 && answer.json()["taskmanagers"] == 2).then_some(())
        });
    }

    /// The job's JSON at the JobManager `url`, once `done` holds.
    fn wait_for_job(
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

fn mkdir(dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    dir.to_owned()
}

/// Submits WordCount of `lines` lines with `flint run --detach` at the JobManager `url`; its
/// id, input and output.
fn submit_wordcount(url: &str, dir: &Path, lines: usize) -> (String, PathBuf, PathBuf) {
    submit_wordcount_named(url, dir, "wordcount", lines)
}

fn submit_wordcount_named(
    url: &str,
    dir: &Path,
    name: &str,
    lines: usize,
) -> (String, PathBuf, PathBuf) {
    let input = dir.join(format!("{name}.txt"));
    let output = dir.join(format!("{name}-output"));
    write_text(&input, lines);
    let job_file = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/wordcount.toml");
    let run = Command::new(env!("CARGO_BIN_EXE_flint"))
        .args(["run", job_file, "--detach", "--jobmanager", url])
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
    (stdout.trim().to_owned(), input, output)
}

#[test]
#[allow(clippy::disallowed_methods)] // measures real processes in real time
fn the_standby_takes_over_after_kill_9_of_the_leader_and_finishes_its_wordcount_exactly() {
    let Some(mut cluster) = HaCluster::start("ha-kill-9") else {
        return;
    };
    let (a_url, b_url) = (cluster.a.url(), cluster.b.url());
    // The standby points every request at the leader.
    let redirect = get(&b_url, "/overview");
    assert_eq!(redirect.status, 307, "{}", redirect.body);
    let followed = request(
        &common::rest::agent(),
        "GET",
        &format!("{b_url}/overview"),
        None,
        None,
    )
    .expect(200);
    assert_eq!(followed.json()["taskmanagers"], 2, "{}", followed.body);

    // Submitted with the CLI through the standby: the redirect keeps the method and the body.
    let (job, input, output) = submit_wordcount(&b_url, &cluster.dir, 200_000);
    cluster.wait_for_job(&a_url, &job, "the job runs", |j| j["state"] == "RUNNING");
    // The CLI against the standby reaches the leader.
    let list = Command::new(env!("CARGO_BIN_EXE_flint"))
        .args(["list", "--jobmanager", &b_url])
        .env_remove("FLINT_JOBMANAGER")
        .env_remove("FLINT_CONFIG")
        .output()
        .expect("flint list runs");
    let listed = String::from_utf8_lossy(&list.stdout);
    assert!(
        list.status.success(),
        "{listed}{}",
        String::from_utf8_lossy(&list.stderr)
    );
    assert!(
        listed.contains(&job),
        "flint list against the standby: {listed}"
    );
    signal(&cluster.a.child, "-KILL");
    let _ = cluster.a.child.wait();
    let killed_at = std::time::Instant::now();

    wait_until("the standby leads", || leads(&b_url).then_some(()));
    cluster.wait_for_pool(&b_url);
    let pool_back = killed_at.elapsed();
    let done = cluster.wait_for_job(&b_url, &job, "the recovered job ends", |j| {
        matches!(
            j["state"].as_str(),
            Some("FINISHED" | "FAILED" | "CANCELED")
        )
    });
    eprintln!(
        "kill -9 of the leader: new leader serving REST with the pool back after {pool_back:?}, \
         recovered WordCount FINISHED after {:?}",
        killed_at.elapsed()
    );
    assert_eq!(done["state"], "FINISHED", "{done:#}");
    assert!(
        done["recovered-at"].is_u64(),
        "not marked recovered: {done:#}"
    );
    assert_eq!(
        read_counts(&output),
        sequential_word_count(&input).unwrap(),
        "the recovered job's output is not the exact count"
    );
}

#[test]
fn a_leader_paused_past_its_session_timeout_steps_down_when_it_resumes() {
    let Some(cluster) = HaCluster::start("ha-sigstop") else {
        return;
    };
    let (a_url, b_url) = (cluster.a.url(), cluster.b.url());
    let (job, input, output) = submit_wordcount(&a_url, &cluster.dir, 200_000);
    cluster.wait_for_job(&a_url, &job, "the job runs", |j| j["state"] == "RUNNING");
    signal(&cluster.a.child, "-STOP");
    wait_until("the standby leads while the leader is paused", || {
        leads(&b_url).then_some(())
    });
    cluster.wait_for_pool(&b_url);
    signal(&cluster.a.child, "-CONT");
    // Resumed, the old leader finds its session gone and stands by: it redirects to b.
    wait_until("the resumed old leader steps down", || {
        (get(&a_url, "/overview").status == 307).then_some(())
    });
    let done = cluster.wait_for_job(&b_url, &job, "the recovered job ends", |j| {
        matches!(
            j["state"].as_str(),
            Some("FINISHED" | "FAILED" | "CANCELED")
        )
    });
    assert_eq!(done["state"], "FINISHED", "{done:#}");
    assert_eq!(
        read_counts(&output),
        sequential_word_count(&input).unwrap(),
        "the output is not the exact count"
    );
    assert!(
        cluster.a.log().contains("leadership lost"),
        "the old leader never said it suspended: {}",
        cluster.a.log()
    );
    // b still leads: nothing the old leader did after resuming took its place.
    assert!(leads(&b_url));
}

#[test]
fn a_zookeeper_restart_suspends_leadership_and_loses_no_job() {
    let Some(mut cluster) = HaCluster::start("ha-zk-restart") else {
        return;
    };
    let (a_url, b_url) = (cluster.a.url(), cluster.b.url());
    let (job, input, output) = submit_wordcount(&a_url, &cluster.dir, 200_000);
    cluster.wait_for_job(&a_url, &job, "the job runs", |j| j["state"] == "RUNNING");
    cluster.zk.stop();
    wait_until("the leader suspends without ZooKeeper", || {
        (!leads(&a_url)).then_some(())
    });
    cluster.zk.restart();
    let leader = wait_until("a JobManager leads again", || {
        [&a_url, &b_url].into_iter().find(|url| leads(url)).cloned()
    });
    cluster.wait_for_pool(&leader);
    let done = cluster.wait_for_job(&leader, &job, "the recovered job ends", |j| {
        matches!(
            j["state"].as_str(),
            Some("FINISHED" | "FAILED" | "CANCELED")
        )
    });
    assert_eq!(done["state"], "FINISHED", "{done:#}");
    assert_eq!(
        read_counts(&output),
        sequential_word_count(&input).unwrap(),
        "the output is not the exact count"
    );
}

#[test]
fn a_corrupted_job_graph_fails_that_job_with_the_reason_and_the_others_recover() {
    let Some(mut cluster) = HaCluster::start("ha-corrupted") else {
        return;
    };
    let (a_url, b_url) = (cluster.a.url(), cluster.b.url());
    let (good, input, output) = submit_wordcount_named(&a_url, &cluster.dir, "good", 200_000);
    let (bad, _, _) = submit_wordcount_named(&a_url, &cluster.dir, "bad", 200_000);
    cluster.wait_for_job(&a_url, &good, "the good job runs", |j| {
        j["state"] == "RUNNING"
    });
    let stored = cluster
        .dir
        .join("ha-storage")
        .join("default")
        .join(format!("job-{bad}.json"));
    assert!(
        stored.is_file(),
        "the graph was not persisted at {}",
        stored.display()
    );
    std::fs::write(&stored, b"{\"name\": \"bad\", \"vert").unwrap();
    signal(&cluster.a.child, "-KILL");
    let _ = cluster.a.child.wait();

    wait_until("the standby leads", || leads(&b_url).then_some(()));
    let failed = cluster.wait_for_job(&b_url, &bad, "the corrupted job is reported", |j| {
        j["state"] == "FAILED"
    });
    let reason = failed["failure"].as_str().unwrap_or_default();
    assert!(reason.contains("corrupted"), "{failed:#}");
    assert!(failed["recovered-at"].is_u64(), "{failed:#}");
    let done = cluster.wait_for_job(&b_url, &good, "the good job ends", |j| {
        matches!(
            j["state"].as_str(),
            Some("FINISHED" | "FAILED" | "CANCELED")
        )
    });
    assert_eq!(done["state"], "FINISHED", "{done:#}");
    assert_eq!(read_counts(&output), sequential_word_count(&input).unwrap());
}

#[test]
fn local_process_workers_die_with_their_jobmanager_killed_with_kill_9() {
    let dir = scratch("ha-orphans");
    let mut jm = JobManagerChild::start(
        &[
            "--bind",
            "127.0.0.1:0",
            "--rest",
            "127.0.0.1:0",
            "--pool-size",
            "2",
        ],
        &dir,
        "",
    );
    let children = wait_until("two TaskManager children", || {
        let children = common::process::task_managers_of(jm.child.id());
        (children.len() == 2).then_some(children)
    });
    signal(&jm.child, "-KILL");
    let _ = jm.child.wait();
    for (pid, name) in children {
        wait_until(
            &format!("TaskManager {name} dies with its JobManager"),
            || {
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
                // Gone, or a zombie waiting for init to reap it.
                (stat.is_empty()
                    || stat
                        .rsplit_once(") ")
                        .is_some_and(|(_, s)| s.starts_with('Z')))
                .then_some(())
            },
        );
    }
}

#[test]
fn an_unreachable_quorum_at_start_names_the_key_and_the_address_and_exits_2() {
    let dir = scratch("ha-unreachable");
    let port = common::zookeeper::free_port();
    let config = dir.join("flint.toml");
    std::fs::write(
        &config,
        format!(
            "[high-availability]\ntype = \"zookeeper\"\nstorageDir = \"{}\"\n\
             [high-availability.zookeeper]\nquorum = \"127.0.0.1:{port}\"\n\
             [high-availability.zookeeper.client]\nconnection-timeout = \"1s\"\n",
            dir.join("ha").display()
        ),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_flint"))
        .args([
            "jobmanager",
            "--bind",
            "127.0.0.1:0",
            "--rest",
            "127.0.0.1:0",
        ])
        .arg("--config")
        .arg(&config)
        .env_remove("FLINT_SECRET")
        .output()
        .expect("flint runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    for says in [
        "high-availability.zookeeper.quorum",
        &format!("127.0.0.1:{port}"),
        "connection-timeout",
    ] {
        assert!(stderr.contains(says), "does not say `{says}`: {stderr}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
