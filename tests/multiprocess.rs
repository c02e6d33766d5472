//! A real multi-process cluster over loopback: `flint jobmanager` with the `local_process`
//! driver keeps a pool of `flint taskmanager` processes, replaces one killed with `kill -9`, and
//! runs WordCount across processes with exactly the sequential count, also with a TaskManager
//! killed mid-job. The test talks to the JobManager through its own transport endpoint, as any
//! client would.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use flint::job::file::parse_job_file;
use flint::job::states::JobStatus;
use flint::messages::ActorAddress;
use flint::messages::ids::ClusterId;
use flint::messages::job_manager::{
    GetJobManagerStatus, JobManagerStatus, RequestJobStatus, SubmitJob,
};
use flint::operators::OperatorRegistry;
use flint::operators::builtin::sequential_word_count;
use flint::transport::handshake::Secret;
use flint::transport::remote::{EndpointConfig, NodeEndpoint};

mod common;
use common::{read_counts, scratch, write_text};

const DEADLINE: Duration = Duration::from_secs(120);

struct JobManagerProcess(Child);

impl Drop for JobManagerProcess {
    fn drop(&mut self) {
        // SIGTERM: the JobManager stops its TaskManager children before it exits.
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let _ = self.0.wait();
    }
}

/// The TaskManager children of `parent`, as (pid, resource id), from /proc.
fn task_managers_of(parent: u32) -> Vec<(u32, String)> {
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

async fn status(endpoint_jm: &flint::messages::job_manager::JobManagerGateway) -> JobManagerStatus {
    endpoint_jm
        .get_status
        .send(GetJobManagerStatus)
        .await
        .expect("the JobManager answers")
}

#[actix::test]
async fn a_process_cluster_keeps_its_pool_through_kill_9_and_runs_wordcount() {
    let dir = scratch("multiprocess");
    let config = dir.join("flint.toml");
    std::fs::write(
        &config,
        format!(
            "[heartbeat]\ninterval = \"100ms\"\ntimeout = \"1s\"\n[taskmanager]\nworking-dir = \"{}\"\n",
            dir.join("work").display()
        ),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_flint"))
        .args([
            "jobmanager",
            "--bind",
            "127.0.0.1:0",
            "--pool-size",
            "3",
            "--slots",
            "2",
        ])
        .arg("--config")
        .arg(&config)
        .env_remove("FLINT_SECRET")
        .stdout(Stdio::piped())
        .spawn()
        .expect("flint jobmanager starts");
    let stdout = child.stdout.take().unwrap();
    let jm = JobManagerProcess(child);
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    let address = line.trim().rsplit(' ').next().unwrap().to_owned();
    assert!(address.starts_with("127.0.0.1:"), "{line}");

    let (endpoint, resolver) = NodeEndpoint::bind(EndpointConfig::new(
        "127.0.0.1:0".parse().unwrap(),
        ClusterId::new("default"),
        "test-client",
        Secret::insecure(),
        5,
    ))
    .await
    .unwrap();
    let gateway = flint::directory::Resolver::job_manager(
        &*resolver,
        &ActorAddress::new(address, "jobmanager"),
    )
    .expect("a proxy for the remote JobManager");

    // The pool fills with three TaskManager processes.
    let give_up = tokio::time::Instant::now() + DEADLINE;
    while status(&gateway).await.task_managers.len() != 3 {
        assert!(
            tokio::time::Instant::now() < give_up,
            "the pool never reached 3"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let children = task_managers_of(jm.0.id());
    assert_eq!(children.len(), 3, "{children:?}");

    // kill -9 one: the driver sees the exit, the JobManager drops it, a replacement registers.
    let (pid, victim) = children[0].clone();
    let killed_at = tokio::time::Instant::now();
    assert!(
        Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status()
            .unwrap()
            .success()
    );
    loop {
        let now = status(&gateway).await;
        if !now
            .task_managers
            .iter()
            .any(|tm| tm.resource_id.as_str() == victim)
        {
            break;
        }
        assert!(
            tokio::time::Instant::now() < give_up,
            "the killed TaskManager was never removed"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let detected = killed_at.elapsed();
    loop {
        let now = status(&gateway).await;
        if now.task_managers.len() == 3 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < give_up,
            "the pool never refilled"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    eprintln!("kill -9 → removed from the JobManager in {detected:?}");

    // WordCount across the processes.
    let input = dir.join("input.txt");
    write_text(&input, 3_000);
    let output = dir.join("out");
    let params = BTreeMap::from([
        ("input".to_owned(), input.display().to_string()),
        ("output".to_owned(), output.display().to_string()),
    ]);
    let registry = OperatorRegistry::with_builtins();
    let graph = parse_job_file(include_str!("../examples/wordcount.toml"), &params, |op| {
        registry.contains(op)
    })
    .unwrap();
    let job = gateway
        .submit_job
        .send(SubmitJob { job_graph: graph })
        .await
        .unwrap()
        .unwrap();
    let details = loop {
        let details = gateway
            .request_job_status
            .send(RequestJobStatus { job_id: job })
            .await
            .unwrap()
            .unwrap();
        if details.summary.status.is_globally_terminal() {
            break details;
        }
        assert!(
            tokio::time::Instant::now() < give_up,
            "WordCount never ended"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(details.summary.status, JobStatus::Finished, "{details:#?}");
    assert_eq!(read_counts(&output), sequential_word_count(&input).unwrap());

    // A larger WordCount with a TaskManager killed while it runs: its tasks fail over, the pool
    // refills, and the count is still exact.
    let big = dir.join("big.txt");
    write_text(&big, 200_000);
    let output = dir.join("out-killed");
    let params = BTreeMap::from([
        ("input".to_owned(), big.display().to_string()),
        ("output".to_owned(), output.display().to_string()),
    ]);
    let graph = parse_job_file(include_str!("../examples/wordcount.toml"), &params, |op| {
        registry.contains(op)
    })
    .unwrap();
    let job = gateway
        .submit_job
        .send(SubmitJob { job_graph: graph })
        .await
        .unwrap()
        .unwrap();
    let job_status = |job| {
        let gateway = gateway.clone();
        async move {
            gateway
                .request_job_status
                .send(RequestJobStatus { job_id: job })
                .await
                .unwrap()
                .unwrap()
        }
    };
    while job_status(job).await.summary.status != JobStatus::Running {
        assert!(tokio::time::Instant::now() < give_up, "never RUNNING");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (pid, _) = task_managers_of(jm.0.id())[0].clone();
    assert!(
        Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status()
            .unwrap()
            .success()
    );
    let details = loop {
        let details = job_status(job).await;
        if details.summary.status.is_globally_terminal() {
            break details;
        }
        assert!(
            tokio::time::Instant::now() < give_up,
            "WordCount with a kill never ended"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(details.summary.status, JobStatus::Finished, "{details:#?}");
    assert_eq!(read_counts(&output), sequential_word_count(&big).unwrap());
    eprintln!(
        "kill -9 mid-job: finished after {} restart(s)",
        details.restarts
    );

    endpoint.shutdown();
    drop(jm);
    let _ = std::fs::remove_dir_all(&dir);
}
