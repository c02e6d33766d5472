//! The `slurm` driver against a real one-node Slurm (tests/common/slurm.rs starts Debian's
//! slurmctld, slurmd and munged on free ports; without them the tests say loudly why they skip):
//! a `flint jobmanager` process whose workers are Slurm batch jobs.

mod common;

use std::time::{Duration, Instant};

use common::rest::{JobManagerChild, agent, local_bearer, request};
use common::slurm::Slurm;
use common::{RemoveOnDrop, read_counts, scratch, write_text};
use serde_json::Value;

/// How long a worker job may take to be submitted, run and register (a process start on two
/// busy cores, a poll or two).
const DEADLINE: Duration = Duration::from_secs(60);

/// A JobManager process with the `slurm` driver, on its own Slurm.
struct SlurmCluster {
    /// Every JobManager started, the running one last (a killed one's directory stays until
    /// the test ends: its workers may still use it).
    jobmanagers: Vec<JobManagerChild>,
    port: u16,
    name: String,
    args: Vec<String>,
    extra: String,
    slurm: Slurm,
    _dir: RemoveOnDrop,
}

/// One of the cluster's worker jobs, as `squeue` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct WorkerJob {
    id: u32,
    state: String,
    resource_id: String,
}

impl SlurmCluster {
    /// A JobManager keeping `pool` one-slot workers as Slurm jobs, with `slurm` appended to its
    /// `[slurm]` section; `None` when Slurm cannot run here.
    fn start(name: &str, pool: u32, slurm_keys: &str) -> Option<Self> {
        Self::start_with(name, pool, |_| slurm_keys.to_owned())
    }

    /// [`start`](Self::start) with `[slurm]` keys made for the Slurm that runs.
    fn start_with(
        name: &str,
        pool: u32,
        slurm_keys: impl FnOnce(&Slurm) -> String,
    ) -> Option<Self> {
        let mut cluster = Self::prepare(name, pool, slurm_keys)?;
        cluster.start_jobmanager();
        Some(cluster)
    }

    /// A Slurm and a cluster's settings; no JobManager yet.
    fn prepare(name: &str, pool: u32, slurm_keys: impl FnOnce(&Slurm) -> String) -> Option<Self> {
        let dir = scratch(&format!("slurm-{name}"));
        let slurm = Slurm::start(&dir.join("slurm"))?;
        let mut slurm_keys = slurm_keys(&slurm);
        // Workers ask for 256 MB unless the test says otherwise.
        if !slurm_keys.contains("memory-per-worker") {
            slurm_keys.push_str("memory-per-worker = \"256mb\"\n");
        }
        let port = common::zookeeper::free_port();
        let cluster_id = format!("{name}-{}", std::process::id());
        let extra = format!(
            "[cluster]\nid = \"{cluster_id}\"\n\
             [cluster.registration]\nerror-delay = \"200ms\"\nmax-timeout = \"1s\"\n\
             [resourcemanager]\ndriver = \"slurm\"\ncheck-interval = \"200ms\"\n\
             [resourcemanager.taskmanager-registration]\ntimeout = \"30s\"\n\
             [slot.request]\ntimeout = \"5s\"\n\
             [slurm]\npoll-interval = \"200ms\"\n\
             sbatch-options = [\"--output={}/%j.out\"]\n{slurm_keys}",
            dir.join("slurm").join("jobs").display()
        );
        let args = [
            "--bind",
            &format!("127.0.0.1:{port}"),
            "--rest",
            "127.0.0.1:0",
            "--pool-size",
            &pool.to_string(),
            "--slots",
            "1",
        ]
        .map(str::to_owned)
        .to_vec();
        Some(Self {
            jobmanagers: Vec::new(),
            port,
            name: format!("flint-{cluster_id}"),
            args,
            extra,
            slurm,
            _dir: RemoveOnDrop(dir),
        })
    }

    /// A Slurm and the configuration of a cluster, with no JobManager started.
    fn start_without_jobmanager(name: &str) -> Option<Self> {
        Self::prepare(name, 0, |_| String::new())
    }

    /// Starts a JobManager on the cluster's port (the first, or one after a crash).
    fn start_jobmanager(&mut self) {
        let dir = self._dir.0.join(format!("jm{}", self.jobmanagers.len()));
        std::fs::create_dir_all(&dir).unwrap();
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        let jm = JobManagerChild::start_with_env(
            env!("CARGO_BIN_EXE_flint").as_ref(),
            &args,
            &dir,
            &self.extra,
            &self.slurm.env(),
        );
        assert!(
            jm.first.contains(&self.port.to_string()),
            "{:?} {}",
            jm.first,
            jm.log()
        );
        self.jobmanagers.push(jm);
    }

    fn jobmanager(&self) -> &JobManagerChild {
        self.jobmanagers.last().expect("a JobManager")
    }

    /// The running JobManager's log, if one was started by the test.
    fn jobmanager_log(&self) -> String {
        self.jobmanagers
            .last()
            .map(JobManagerChild::log)
            .unwrap_or_default()
    }

    fn send(&self, method: &str, path: &str, body: Option<&str>) -> Value {
        let url = format!("{}{path}", self.jobmanager().url());
        let answer = request(&agent(), method, &url, body, local_bearer().as_deref());
        assert!(answer.status < 300, "{method} {path}: {answer:?}");
        answer.json()
    }

    /// `flint run examples/wordcount.toml` of `input` into `output` on this cluster.
    fn run_wordcount(
        &self,
        input: &std::path::Path,
        output: &std::path::Path,
    ) -> std::process::Output {
        std::process::Command::new(env!("CARGO_BIN_EXE_flint"))
            .args([
                "run",
                concat!(env!("CARGO_MANIFEST_DIR"), "/examples/wordcount.toml"),
                "--jobmanager",
                &self.jobmanager().url(),
                "--param",
                &format!("input={}", input.display()),
                "--param",
                &format!("output={}", output.display()),
            ])
            .output()
            .expect("flint run runs")
    }

    fn set_pool_size(&self, size: u32) {
        self.send(
            "PUT",
            "/cluster/pool-size",
            Some(&format!("{{\"size\": {size}}}")),
        );
    }

    /// The TaskManagers registered at the JobManager.
    fn task_managers(&self) -> Vec<String> {
        let list = self.send("GET", "/taskmanagers", None);
        list["taskmanagers"]
            .as_array()
            .expect("a list")
            .iter()
            .map(|tm| tm["id"].as_str().expect("an id").to_owned())
            .collect()
    }

    /// Every job of this cluster Slurm still lists (ended ones for a few seconds).
    fn worker_jobs(&self) -> Vec<WorkerJob> {
        let out = self
            .slurm
            .command("squeue")
            .args(["-h", "-a", "-t", "all", "-n", &self.name, "-o", "%i|%T|%k"])
            .output()
            .expect("squeue runs");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|line| {
                let mut fields = line.trim().splitn(3, '|');
                Some(WorkerJob {
                    id: fields.next()?.parse().ok()?,
                    state: fields.next()?.to_owned(),
                    resource_id: fields.next()?.to_owned(),
                })
            })
            .collect()
    }

    fn in_state(&self, state: &str) -> Vec<WorkerJob> {
        let mut jobs = self.worker_jobs();
        jobs.retain(|job| job.state == state);
        jobs
    }

    /// Waits until `count` TaskManagers are registered and exactly that many worker jobs run;
    /// returns the running jobs.
    fn wait_for_workers(&self, count: usize) -> Vec<WorkerJob> {
        self.wait(
            &format!("{count} workers registered and running"),
            DEADLINE,
            || {
                let running = self.in_state("RUNNING");
                let mut registered = self.task_managers();
                registered.sort();
                let mut resources: Vec<String> =
                    running.iter().map(|job| job.resource_id.clone()).collect();
                resources.sort();
                (registered.len() == count && registered == resources).then_some(running)
            },
        )
    }

    /// Polls `probe` until it yields; fails the test after `deadline` with the JobManager's
    /// log and Slurm's queue.
    #[allow(clippy::disallowed_methods)] // a test waits for real processes in real time
    fn wait<T>(&self, what: &str, deadline: Duration, mut probe: impl FnMut() -> Option<T>) -> T {
        let give_up = Instant::now() + deadline;
        loop {
            if let Some(value) = probe() {
                return value;
            }
            assert!(
                Instant::now() < give_up,
                "not within {deadline:?}: {what}\nsqueue:\n{}\nJobManager log:\n{}",
                self.slurm.squeue(),
                self.jobmanager_log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

fn ids(jobs: &[WorkerJob]) -> Vec<u32> {
    let mut ids: Vec<u32> = jobs.iter().map(|job| job.id).collect();
    ids.sort_unstable();
    ids
}

#[test]
fn the_pool_grows_and_shrinks_as_slurm_jobs_appear_and_are_cancelled() {
    let Some(cluster) = SlurmCluster::start("resize", 2, "") else {
        return;
    };
    let first = cluster.wait_for_workers(2);
    // `flint pool-size` shows each worker's Slurm job (from the driver's next poll: a
    // TaskManager may register before it).
    cluster.wait("the pool shows both jobs running", DEADLINE, || {
        let pool = cluster.send("GET", "/cluster/pool-size", None);
        first
            .iter()
            .all(|job| {
                pool["workers"][&job.resource_id]
                    .as_str()
                    .is_some_and(|detail| {
                        detail.starts_with(&format!("slurm job {}: RUNNING", job.id))
                    })
            })
            .then_some(())
    });
    let shown = std::process::Command::new(env!("CARGO_BIN_EXE_flint"))
        .args(["pool-size", "--jobmanager", &cluster.jobmanager().url()])
        .output()
        .expect("flint pool-size runs");
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(
        shown.contains(&format!("slurm job {}", first[0].id)),
        "{shown}"
    );

    cluster.set_pool_size(3);
    let grown = cluster.wait_for_workers(3);
    assert!(ids(&first).iter().all(|id| ids(&grown).contains(id)));

    cluster.set_pool_size(1);
    let shrunk = cluster.wait_for_workers(1);
    let cancelled = cluster.wait("the released workers' jobs cancelled", DEADLINE, || {
        let jobs = cluster.worker_jobs();
        let gone: Vec<u32> = ids(&grown)
            .into_iter()
            .filter(|id| *id != shrunk[0].id)
            .filter(|id| {
                jobs.iter()
                    .find(|job| job.id == *id)
                    .is_none_or(|job| job.state != "RUNNING")
            })
            .collect();
        (gone.len() == 2).then_some(jobs)
    });
    assert!(
        cancelled
            .iter()
            .filter(|job| job.id != shrunk[0].id)
            .all(|job| job.state != "RUNNING"),
        "{cancelled:?}"
    );
}

#[test]
fn a_worker_job_cancelled_from_outside_is_replaced() {
    let Some(cluster) = SlurmCluster::start("scancel", 1, "") else {
        return;
    };
    let victim = cluster.wait_for_workers(1).remove(0);
    let status = cluster
        .slurm
        .command("scancel")
        .arg(victim.id.to_string())
        .status()
        .expect("scancel runs");
    assert!(status.success());
    let replacement = cluster.wait("a replacement worker", DEADLINE, || {
        let running = cluster.in_state("RUNNING");
        let registered = cluster.task_managers();
        (running.len() == 1
            && running[0].id != victim.id
            && registered == [running[0].resource_id.clone()])
        .then(|| running[0].clone())
    });
    assert_ne!(replacement.resource_id, victim.resource_id);
}

#[test]
fn wordcount_is_exact_on_slurm_started_workers() {
    let Some(cluster) = SlurmCluster::start("wordcount", 2, "") else {
        return;
    };
    cluster.wait_for_workers(2);
    let dir = cluster._dir.0.clone();
    let (input, output) = (dir.join("input.txt"), dir.join("counts"));
    write_text(&input, 3_000);
    let run = cluster.run_wordcount(&input, &output);
    assert!(
        run.status.success(),
        "{}{}\n{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr),
        cluster.jobmanager().log()
    );
    assert_eq!(
        read_counts(&output),
        flint::operators::builtin::sequential_word_count(&input).unwrap()
    );
}

#[test]
fn a_restarted_jobmanager_adopts_the_running_worker_jobs_and_orphans_none() {
    let Some(mut cluster) = SlurmCluster::start("restart", 2, "") else {
        return;
    };
    let before = cluster.wait_for_workers(2);
    // kill -9: nothing of the JobManager's own shutdown runs.
    let pid = cluster.jobmanager().child.id();
    // SAFETY: kill(2) on the pid of a child this test started and has not reaped.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGKILL) }, 0);
    let killed = cluster.jobmanagers.last_mut().expect("a JobManager");
    killed
        .child
        .wait()
        .expect("the killed JobManager is reaped");
    cluster.start_jobmanager();
    let after = cluster.wait_for_workers(2);
    assert_eq!(ids(&after), ids(&before), "the same jobs, adopted");
    assert!(
        cluster
            .worker_jobs()
            .iter()
            .all(|job| before.iter().any(|b| b.id == job.id)),
        "the new JobManager submitted jobs of its own: {:?}",
        cluster.worker_jobs()
    );
    let pool = cluster.send("GET", "/overview", None);
    assert_eq!(pool["pool"]["started"], 2, "{pool}");
    // It owns them: shrinking cancels them.
    cluster.set_pool_size(0);
    cluster.wait("the adopted jobs cancelled", DEADLINE, || {
        cluster.in_state("RUNNING").is_empty().then_some(())
    });
}

#[test]
fn a_worker_larger_than_the_node_stays_pending_and_a_job_needing_it_fails_cleanly() {
    // More CPUs than the node has: Slurm queues it for ever (reason PartitionConfig).
    let too_many = |slurm: &Slurm| format!("cpus-per-worker = {}\n", slurm.node_cpus() + 2);
    let Some(cluster) = SlurmCluster::start_with("too-large", 1, too_many) else {
        return;
    };
    let pending = cluster.wait("the worker's job queued", DEADLINE, || {
        let pending = cluster.in_state("PENDING");
        (pending.len() == 1).then(|| pending[0].clone())
    });
    let overview = cluster.send("GET", "/overview", None);
    assert_eq!(overview["pool"]["pending-requests"], 1, "{overview}");
    assert_eq!(overview["pool"]["started"], 0, "{overview}");
    // `flint pool-size` shows it queued, with Slurm's reason, from the driver's next poll.
    let shows = format!("slurm job {}: PENDING (PartitionConfig)", pending.id);
    cluster.wait(&format!("the pool shows `{shows}`"), DEADLINE, || {
        let pool = cluster.send("GET", "/cluster/pool-size", None);
        let detail = pool["workers"][&pending.resource_id].as_str()?.to_owned();
        (detail == shows).then_some(())
    });
    // A job needing a slot waits slot.request.timeout (5 s), then fails with
    // NoResourceAvailable; the cluster stays up, the worker still queued.
    let dir = cluster._dir.0.clone();
    let input = dir.join("input.txt");
    write_text(&input, 10);
    let run = cluster.run_wordcount(&input, &dir.join("out"));
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(!run.status.success(), "{said}");
    assert!(said.contains("NoResourceAvailable"), "{said}");
    // The job's demand asked for a second worker; with the job failed, the pool goes back to
    // its size: the newest request is cancelled, the first one stays queued.
    cluster.wait("the pool back at one queued worker", DEADLINE, || {
        (cluster.in_state("PENDING") == [pending.clone()]).then_some(())
    });
    assert!(cluster.in_state("RUNNING").is_empty());
    assert!(cluster.task_managers().is_empty());
}

#[test]
fn a_worker_reaching_its_slurm_time_limit_is_replaced() {
    // Slurm's smallest limit is one minute, enforced on a 30 s cycle: 60-90 s.
    let Some(cluster) = SlurmCluster::start("time-limit", 1, "time-limit = \"1\"\n") else {
        return;
    };
    let first = cluster.wait_for_workers(1).remove(0);
    let replacement = cluster.wait(
        "a replacement after the time limit",
        Duration::from_secs(180),
        || {
            let running = cluster.in_state("RUNNING");
            let registered = cluster.task_managers();
            (running.len() == 1
                && running[0].id != first.id
                && registered == [running[0].resource_id.clone()])
            .then(|| running[0].clone())
        },
    );
    assert_ne!(replacement.resource_id, first.resource_id);
    // Slurm says why the first one ended (while it still lists it).
    let ended = cluster.worker_jobs();
    if let Some(job) = ended.iter().find(|job| job.id == first.id) {
        assert_eq!(job.state, "TIMEOUT", "{ended:?}");
    }
}

#[test]
fn a_jobmanager_running_as_a_slurm_job_starts_its_workers_as_further_jobs() {
    let Some(cluster) = SlurmCluster::start_without_jobmanager("in-allocation") else {
        return;
    };
    let dir = cluster._dir.0.join("jm-job");
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("flint.toml");
    std::fs::write(
        &config,
        format!(
            "[heartbeat]\ninterval = \"100ms\"\ntimeout = \"1s\"\n\
             [taskmanager]\nworking-dir = \"{}\"\n{}",
            dir.join("work").display(),
            cluster.extra
        ),
    )
    .unwrap();
    let rest_port = common::zookeeper::free_port();
    let output = dir.join("jobmanager.out");
    let command = format!(
        "exec {} jobmanager --bind 127.0.0.1:{} --rest 127.0.0.1:{rest_port} --pool-size 2 \
         --slots 1 --config {}",
        env!("CARGO_BIN_EXE_flint"),
        cluster.port,
        config.display()
    );
    let jm_job = cluster.slurm.sbatch(&[
        "--job-name=flint-jobmanager",
        "--mem=512M",
        &format!("--output={}", output.display()),
        "--wrap",
        &command,
    ]);
    let url = format!("http://127.0.0.1:{rest_port}");
    let log = || std::fs::read_to_string(&output).unwrap_or_default();
    let workers = cluster.wait("two workers of the JobManager's job", DEADLINE, || {
        // Not serving yet while Slurm starts the JobManager's job.
        std::net::TcpStream::connect(("127.0.0.1", rest_port)).ok()?;
        let answer = request(
            &agent(),
            "GET",
            &format!("{url}/taskmanagers"),
            None,
            local_bearer().as_deref(),
        );
        let running = cluster.in_state("RUNNING");
        (answer.status == 200
            && answer.json()["taskmanagers"].as_array().map(Vec::len) == Some(2)
            && running.len() == 2)
            .then_some(running)
    });
    assert!(workers.iter().all(|job| job.id != jm_job), "{}", log());
    // Ending the JobManager's job (SIGTERM, as Slurm does at its time limit) cancels its
    // workers' jobs: none outlives it.
    let status = cluster
        .slurm
        .command("scancel")
        .arg(jm_job.to_string())
        .status()
        .expect("scancel runs");
    assert!(status.success());
    // CANCELLED (after COMPLETING), or already purged from the queue.
    cluster.wait("the workers' jobs cancelled with it", DEADLINE, || {
        let jobs = cluster.worker_jobs();
        workers
            .iter()
            .all(|worker| {
                jobs.iter()
                    .find(|job| job.id == worker.id)
                    .is_none_or(|job| job.state == "CANCELLED")
            })
            .then_some(())
    });
    assert!(!log().is_empty());
}

#[test]
fn a_worker_slurm_refuses_is_a_start_failure_with_sbatchs_reason_and_a_backoff() {
    // More memory than the node has: sbatch refuses the job at once.
    let too_much =
        |slurm: &Slurm| format!("memory-per-worker = \"{}mb\"\n", slurm.node_memory_mb() * 2);
    let Some(cluster) = SlurmCluster::start_with("refused", 1, too_much) else {
        return;
    };
    let failures = cluster.wait("two start failures", DEADLINE, || {
        let overview = cluster.send("GET", "/overview", None);
        let failures = overview["pool"]["start-failures"].as_u64()?;
        (failures >= 2).then_some(failures)
    });
    let log = cluster.jobmanager_log();
    assert!(
        log.contains("sbatch") && log.contains("Memory specification can not be satisfied"),
        "{log}"
    );
    // Backed off (200 ms, 400 ms, ... up to the configured maximum), not a tight loop.
    assert!(failures < 40, "{failures} failures: no backoff?");
    assert!(cluster.in_state("RUNNING").is_empty());
    assert!(cluster.task_managers().is_empty());
}
