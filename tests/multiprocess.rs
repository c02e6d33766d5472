//! A real multi-process cluster over loopback: `flint jobmanager` with the `local_process`
//! driver keeps a pool of `flint taskmanager` processes, replaces one killed with `kill -9`, and
//! runs WordCount across processes with exactly the sequential count, also with a TaskManager
//! killed mid-job; and a producer silent for longer than the ask timeout does not fail its
//! remote consumers. The tests talk to the JobManager through their own transport endpoint, as
//! any client would.

use std::process::Command;
use std::time::Duration;

use flint::job::states::JobStatus;
use flint::operators::builtin::sequential_word_count;

mod common;
use common::process::{Client, JobManagerProcess, TaskManagerChild, task_managers_of};
use common::{read_counts, scratch, wordcount_graph, write_text};

const DEADLINE: Duration = Duration::from_secs(120);

/// A `flint jobmanager` process keeping `pool` TaskManager processes of `slots` slots, with
/// `timeout` as heartbeat timeout (100 ms interval) and `extra` TOML appended under
/// `[taskmanager]` (working in `dir/work`), and a transport client connected to it.
async fn process_cluster(
    dir: &std::path::Path,
    pool: u32,
    slots: u32,
    timeout: &str,
    extra: &str,
) -> (JobManagerProcess, Client) {
    let config = dir.join("flint.toml");
    std::fs::write(
        &config,
        format!(
            "[heartbeat]\ninterval = \"100ms\"\ntimeout = \"{timeout}\"\n[taskmanager]\n\
             working-dir = \"{}\"\n{extra}",
            dir.join("work").display()
        ),
    )
    .unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_flint"));
    command
        .args(["jobmanager", "--bind", "127.0.0.1:0"])
        .args(["--pool-size", &pool.to_string()])
        .args(["--rest", "127.0.0.1:0"])
        .args(["--slots", &slots.to_string()])
        .arg("--config")
        .arg(&config)
        .env_remove("FLINT_SECRET");
    let jm = JobManagerProcess::start(command);
    let client = Client::connect(
        Client::loopback_config(Client::local_secret(), 5),
        &jm.address,
    )
    .await;
    (jm, client)
}

#[actix::test]
async fn a_process_cluster_keeps_its_pool_through_kill_9_and_runs_wordcount() {
    let dir = scratch("multiprocess");
    let (jm, client) = process_cluster(&dir, 3, 2, "1s", "").await;
    assert!(jm.address.starts_with("127.0.0.1:"), "{}", jm.address);

    // The pool fills with three TaskManager processes.
    client
        .wait_for("the pool never reached 3", DEADLINE, |s| {
            s.task_managers.len() == 3
        })
        .await;
    let children = task_managers_of(jm.pid());
    assert_eq!(children.len(), 3, "{children:?}");

    // kill -9 one: the driver sees the exit, the JobManager drops it, a replacement registers.
    let (pid, victim) = children[0].clone();
    let killed_at = tokio::time::Instant::now();
    kill_9(pid);
    client
        .wait_for("the killed TaskManager was never removed", DEADLINE, |s| {
            !s.task_managers
                .iter()
                .any(|tm| tm.resource_id.as_str() == victim)
        })
        .await;
    let detected = killed_at.elapsed();
    client
        .wait_for("the pool never refilled", DEADLINE, |s| {
            s.task_managers.len() == 3
        })
        .await;
    eprintln!("kill -9 → removed from the JobManager in {detected:?}");

    // WordCount across the processes.
    let input = dir.join("input.txt");
    write_text(&input, 3_000);
    let output = dir.join("out");
    let job = client.submit(wordcount_graph(&input, &output)).await;
    let details = client.wait_for_job(job, DEADLINE).await;
    assert_eq!(details.summary.status, JobStatus::Finished, "{details:#?}");
    assert_eq!(read_counts(&output), sequential_word_count(&input).unwrap());

    // A larger WordCount with a TaskManager killed while it runs: its tasks fail over, the pool
    // refills, and the count is still exact.
    let big = dir.join("big.txt");
    write_text(&big, 200_000);
    let output = dir.join("out-killed");
    let job = client.submit(wordcount_graph(&big, &output)).await;
    let give_up = tokio::time::Instant::now() + DEADLINE;
    while client.job(job).await.summary.status != JobStatus::Running {
        assert!(tokio::time::Instant::now() < give_up, "never RUNNING");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    kill_9(task_managers_of(jm.pid())[0].0);
    let details = client.wait_for_job(job, DEADLINE).await;
    assert_eq!(details.summary.status, JobStatus::Finished, "{details:#?}");
    assert_eq!(read_counts(&output), sequential_word_count(&big).unwrap());
    eprintln!(
        "kill -9 mid-job: finished after {} restart(s)",
        details.restarts
    );

    client.endpoint.shutdown();
    drop(jm);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 11: all-to-all at P = 200 across four TaskManager processes (40,000 channels on the
/// all-to-all edge, three quarters of them between processes) gives exactly the sequential
/// count.
#[actix::test]
async fn all_to_all_at_p_200_across_four_processes_gives_the_exact_word_count() {
    let dir = scratch("multiprocess-p200");
    // Each consumer grants 2 buffers to each of its 200 channels: 1 KiB buffers, and room for
    // the 50 consumers of a TaskManager.
    let (jm, client) = process_cluster(
        &dir,
        4,
        50,
        "10s",
        "[taskmanager.network]\nbuffer-size = \"1kb\"\nmemory = \"64mb\"\n",
    )
    .await;
    client
        .wait_for("the pool never reached 4", DEADLINE, |s| {
            s.task_managers.len() == 4
        })
        .await;
    let input = dir.join("input.txt");
    write_text(&input, 20_000);
    let output = dir.join("out");
    let job = client
        .submit(common::wide_wordcount_graph(&input, &output, 200))
        .await;
    let details = client.wait_for_job(job, DEADLINE).await;
    assert_eq!(details.summary.status, JobStatus::Finished, "{details:#?}");
    let task_managers: std::collections::BTreeSet<_> = details
        .vertices
        .iter()
        .flat_map(|v| &v.subtasks)
        .filter_map(|s| s.resource_id.clone())
        .collect();
    assert_eq!(task_managers.len(), 4, "the job ran on all four processes");
    assert_eq!(read_counts(&output), sequential_word_count(&input).unwrap());

    client.endpoint.shutdown();
    drop(jm);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 11: a producer's TaskManager `kill -9`'d mid-stream. Its consumers on the other
/// process or the JobManager learn it first (a data connection breaks, or the JobManager's own
/// connection to it: which one is a race): the failure names the producer's TaskManager and
/// the reason, never "Mailbox has closed", the region restarts on a replacement, and the count
/// is exact. The job's exception history keeps the failure after the restart.
#[actix::test]
async fn a_producer_killed_mid_stream_fails_its_consumers_naming_it_and_the_count_stays_exact() {
    use flint::job::graph::RestartStrategyConfig;

    let dir = scratch("multiprocess-producer-killed");
    // No pool of its own: the TaskManagers are started here, so only the data connection (not
    // the worker driver) can tell of a death before the heartbeat timeout.
    let (jm, client) = process_cluster(&dir, 0, 1, "3s", "").await;
    let config = dir.join("flint.toml");
    let task_manager = |name: &str| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_flint"));
        command
            .args(["taskmanager", "--jobmanager", &jm.address, "--slots", "1"])
            .args(["--resource-id", name, "--bind", "127.0.0.1:0"])
            .arg("--config")
            .arg(&config)
            .env_remove("FLINT_SECRET")
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::null());
        TaskManagerChild(command.spawn().expect("flint taskmanager starts"))
    };
    let mut producer_side = task_manager("remote-a");
    let _consumer_side = task_manager("remote-b");
    client
        .wait_for("the two TaskManagers never registered", DEADLINE, |s| {
            s.task_managers.len() == 2
        })
        .await;

    let input = dir.join("input.txt");
    write_text(&input, 100_000);
    let output = dir.join("out");
    // P = 2 on 2 × 1 slot: every process runs one of each vertex, and half of the
    // all-to-all channels cross between them.
    let graph = SlowWordCount::new(
        &input,
        &output,
        ("per-record-us", "20"),
        RestartStrategyConfig::FixedDelay {
            attempts: 20,
            delay: Duration::from_millis(500),
        },
    );
    let slow = graph.slow;
    let job = client.submit(graph.graph).await;

    // Mid-stream: the slow consumers have read some records, not all.
    let give_up = tokio::time::Instant::now() + DEADLINE;
    loop {
        let details = client.job(job).await;
        if details.vertices[slow.as_usize()].io.records_in > 1_000 {
            break;
        }
        assert!(
            !details.summary.status.is_globally_terminal(),
            "ended before it could be killed: {details:#?}"
        );
        assert!(
            tokio::time::Instant::now() < give_up,
            "no records ever moved"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    kill_9(producer_side.0.id());
    let _ = producer_side.0.wait();
    let _replacement = task_manager("remote-c");

    let details = client.wait_for_job(job, DEADLINE).await;
    assert_eq!(details.summary.status, JobStatus::Finished, "{details:#?}");
    assert_eq!(read_counts(&output), sequential_word_count(&input).unwrap());
    assert!(details.restarts >= 1, "{details:#?}");
    // Who tells first races: the consumer on remote-b (its data connection broke) or the
    // JobManager (its own connection to remote-a closed, so remote-a is lost and the failover
    // cancels the consumer before it fails). Either way the failure names remote-a, and a
    // consumer on remote-b that failed on its own names its producer's TaskManager.
    assert!(
        details
            .exceptions
            .iter()
            .any(|e| e.reason.contains("remote-a")),
        "no failure names the killed TaskManager remote-a: {:#?}",
        details.exceptions
    );
    for exception in details
        .exceptions
        .iter()
        .filter(|e| e.resource_id.as_ref().map(|r| r.as_str()) == Some("remote-b"))
    {
        assert!(
            exception.reason.contains("remote-a"),
            "a consumer on remote-b failed without naming its producer's TaskManager remote-a: \
             {exception:#?}"
        );
    }
    for exception in &details.exceptions {
        assert!(
            !exception.reason.contains("Mailbox has closed"),
            "{exception:?}"
        );
    }
    eprintln!(
        "failures: {:?}",
        details
            .exceptions
            .iter()
            .map(|e| &e.reason)
            .collect::<Vec<_>>()
    );

    client.endpoint.shutdown();
    drop(jm);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 11: `sink (2/2): input unavailable: TaskManager … is gone: Mailbox has closed` after
/// exactly the 10 s ask timeout, when a pipelined all-to-all producer on another process was
/// silent for longer than that. Now a minute of silence between two TaskManager processes ends
/// FINISHED without a restart.
#[actix::test]
async fn a_producer_silent_longer_than_the_ask_timeout_does_not_fail_its_remote_consumers() {
    let dir = scratch("multiprocess-silent");
    let (jm, client) = process_cluster(&dir, 2, 1, "2s", "").await;
    client
        .wait_for("the pool never reached 2", DEADLINE, |s| {
            s.task_managers.len() == 2
        })
        .await;

    // Two TaskManagers of one slot: each sink reads one of the two producers across processes.
    // A minute of silence, as the issue asks: six times the ask timeout, many fetch holds.
    let silence = Duration::from_secs(60);
    assert!(silence > flint::transport::ASK_TIMEOUT * 5);
    let registry = flint::operators::OperatorRegistry::with_builtins();
    let graph = flint::job::file::parse_job_file(
        include_str!("../examples/slow-producer.toml"),
        &[("ms".to_owned(), silence.as_millis().to_string())].into(),
        |op| registry.contains(op),
    )
    .expect("the example job file parses");
    let job = client.submit(graph).await;
    let details = client.wait_for_job(job, DEADLINE).await;
    assert_eq!(details.summary.status, JobStatus::Finished, "{details:#?}");
    assert_eq!(details.restarts, 0, "{details:#?}");

    client.endpoint.shutdown();
    drop(jm);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 11: producers never waited for consumers, so a slow consumer made its pipelined input
/// spill to disk without bound. Now a slow sink (a sleep per record) behind a fast WordCount
/// front slows the producers down: with a spill threshold of 1 KB and 1 KB network buffers no
/// spill file ever appears, and the count is exact. The input is several times what the
/// pipeline can buffer (10 buffers per subpartition: an output window of 10 KB; 1 exclusive and
/// 1 floating per consumer channel), so the producers must have waited.
#[actix::test]
async fn a_slow_consumer_slows_its_producers_instead_of_spilling() {
    use flint::job::graph::RestartStrategyConfig;

    let dir = scratch("multiprocess-slow-consumer");
    let work = dir.join("work");
    let (jm, client) = process_cluster(
        &dir,
        2,
        1,
        "2s",
        "spill-threshold = \"1kb\"\n[taskmanager.network]\nbuffer-size = \"1kb\"\n\
         buffers-per-channel = 1\nfloating-buffers-per-gate = 1\noutput-window = \"10kb\"\n",
    )
    .await;
    client
        .wait_for("the pool never reached 2", DEADLINE, |s| {
            s.task_managers.len() == 2
        })
        .await;

    let input = dir.join("input.txt");
    write_text(&input, 1_500);
    let output = dir.join("out");
    let graph = SlowWordCount::new(
        &input,
        &output,
        ("per-record-ms", "1"),
        RestartStrategyConfig::None,
    );
    let (source, tokenize, sink) = (graph.source, graph.tokenize, graph.sink);
    let job = client.submit(graph.graph).await;

    // Watch the working directory while the job runs: a pipelined edge never spills.
    let give_up = tokio::time::Instant::now() + DEADLINE;
    let mut spilled = Vec::new();
    let details = loop {
        spilled.extend(spill_files(&work));
        let details = client.job(job).await;
        if details.summary.status.is_globally_terminal() {
            break details;
        }
        assert!(tokio::time::Instant::now() < give_up, "the job never ended");
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert_eq!(details.summary.status, JobStatus::Finished, "{details:#?}");
    assert!(spilled.is_empty(), "spill files were written: {spilled:?}");
    assert_eq!(read_counts(&output), sequential_word_count(&input).unwrap());
    // The JobManager shows the backpressure its TaskManagers sample (issue 11, item 6). The
    // per-second rate belongs to whichever heartbeat interval was last sampled (a short job may
    // end between two), so the test reads the total, which a finished task's final sample keeps.
    let tokenize_io = details.vertices[tokenize.as_usize()].io;
    assert!(
        tokenize_io.backpressured_ms > 0,
        "tokenize waited for the slow consumer, and the job's details said so: {tokenize_io:?}"
    );
    let source_io = details.vertices[source.as_usize()].io;
    assert!(
        source_io.records_out > 0 && details.vertices[sink.as_usize()].io.records_in > 0,
        "the final counts of finished tasks are kept: {source_io:?}"
    );

    client.endpoint.shutdown();
    drop(jm);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 11: a gigabyte of records behind a slow consumer, across two TaskManager processes.
/// Producers that never waited made a slow consumer's input pile up without bound (in memory,
/// then spilled to disk); now the producers wait for credit: every record arrives, no spill
/// file is ever written, and neither TaskManager's resident memory grows past its network
/// memory plus a margin for the process itself.
#[actix::test]
async fn a_gigabyte_behind_a_slow_consumer_keeps_task_manager_memory_bounded() {
    use flint::job::graph::{DistributionPattern, ExchangeMode, JobGraph, RestartStrategyConfig};
    use flint::operators::builtin::{NOOP, SLEEP};

    /// Records per producer subtask, and the bytes of each one's payload: 2 × 500,000 × 1,000
    /// bytes = 1 GB.
    const RECORDS: u64 = 500_000;
    const PAYLOAD: u64 = 1_000;
    const NETWORK_MEMORY: u64 = 64 << 20;
    /// The process itself (code, runtime, transport, the task's own record in hand) next to
    /// its network buffers.
    const MARGIN: u64 = 64 << 20;

    let dir = scratch("multiprocess-gigabyte");
    let work = dir.join("work");
    let (jm, client) = process_cluster(
        &dir,
        2,
        1,
        "10s",
        &format!("spill-threshold = \"1kb\"\n[taskmanager.network]\nmemory = {NETWORK_MEMORY}\n"),
    )
    .await;
    client
        .wait_for("the pool never reached 2", DEADLINE, |s| {
            s.task_managers.len() == 2
        })
        .await;
    let task_managers: Vec<u32> = task_managers_of(jm.pid())
        .into_iter()
        .map(|(pid, _)| pid)
        .collect();
    assert_eq!(task_managers.len(), 2);

    // source (2) ─all-to-all─▶ slow (2): half of the bytes cross between the processes.
    let mut graph = JobGraph::builder("slow-gigabyte");
    graph.restart_strategy(RestartStrategyConfig::None);
    let source = graph
        .vertex("source", NOOP, 2)
        .config("count", RECORDS.to_string())
        .config("payload-bytes", PAYLOAD.to_string())
        .index();
    let slow = graph
        .vertex("slow", SLEEP, 2)
        .config("ms", "0")
        .config("per-record-us", "20")
        .index();
    graph.edge(
        source,
        slow,
        DistributionPattern::AllToAll,
        ExchangeMode::Pipelined,
    );
    let job = client.submit(graph.build(|_| true).unwrap()).await;

    let give_up = tokio::time::Instant::now() + Duration::from_secs(600);
    let mut spilled = Vec::new();
    let mut most_rss = 0;
    let mut most_backpressure = 0;
    let details = loop {
        spilled.extend(spill_files(&work));
        for &pid in &task_managers {
            most_rss = most_rss.max(common::process::resident_kib(pid).unwrap_or(0) << 10);
        }
        let details = client.job(job).await;
        most_backpressure = most_backpressure.max(
            details.vertices[source.as_usize()]
                .io
                .back_pressured_time_ms_per_second,
        );
        if details.summary.status.is_globally_terminal() {
            break details;
        }
        assert!(tokio::time::Instant::now() < give_up, "the job never ended");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(details.summary.status, JobStatus::Finished, "{details:#?}");
    let slow_io = details.vertices[slow.as_usize()].io;
    assert_eq!(slow_io.records_in, 2 * RECORDS, "every record arrived once");
    assert!(
        slow_io.bytes_in >= 2 * RECORDS * PAYLOAD,
        "a gigabyte went through: {slow_io:?}"
    );
    assert!(spilled.is_empty(), "spill files were written: {spilled:?}");
    assert!(
        most_backpressure > 0,
        "the producers waited for the slow consumer (else this test shows nothing)"
    );
    eprintln!(
        "1 GB behind a slow consumer: largest TaskManager resident set {} MiB",
        most_rss >> 20
    );
    assert!(
        most_rss < NETWORK_MEMORY + MARGIN,
        "a TaskManager held {} MiB, more than its {} MiB of network memory plus {} MiB",
        most_rss >> 20,
        NETWORK_MEMORY >> 20,
        MARGIN >> 20
    );

    client.endpoint.shutdown();
    drop(jm);
    let _ = std::fs::remove_dir_all(&dir);
}

/// WordCount with a slow consumer: source → tokenize ─all-to-all─▶ slow (`sleep`, waiting
/// `per_record` = (key, value) per record) → count → sink, P = 2, all pipelined.
struct SlowWordCount {
    graph: flint::job::graph::JobGraph,
    source: flint::job::graph::VertexIndex,
    tokenize: flint::job::graph::VertexIndex,
    slow: flint::job::graph::VertexIndex,
    sink: flint::job::graph::VertexIndex,
}

impl SlowWordCount {
    fn new(
        input: &std::path::Path,
        output: &std::path::Path,
        per_record: (&str, &str),
        restart: flint::job::graph::RestartStrategyConfig,
    ) -> Self {
        use flint::job::graph::{DistributionPattern, ExchangeMode, JobGraph};
        use flint::operators::builtin::{COUNT_BY_KEY, FILE_SINK, SLEEP, TEXT_SOURCE, TOKENIZE};

        let mut graph = JobGraph::builder("slow-wordcount");
        graph.restart_strategy(restart);
        let source = graph
            .vertex("source", TEXT_SOURCE, 2)
            .config("path", input.display().to_string())
            .index();
        let tokenize = graph.vertex("tokenize", TOKENIZE, 2).index();
        let slow = graph
            .vertex("slow", SLEEP, 2)
            .config("ms", "0")
            .config(per_record.0, per_record.1)
            .index();
        let count = graph.vertex("count", COUNT_BY_KEY, 2).index();
        let sink = graph
            .vertex("sink", FILE_SINK, 2)
            .config("path", output.display().to_string())
            .index();
        let pipelined = ExchangeMode::Pipelined;
        graph.edge(source, tokenize, DistributionPattern::Forward, pipelined);
        graph.edge(tokenize, slow, DistributionPattern::AllToAll, pipelined);
        graph.edge(slow, count, DistributionPattern::Forward, pipelined);
        graph.edge(count, sink, DistributionPattern::Forward, pipelined);
        Self {
            graph: graph.build(|_| true).expect("a valid job graph"),
            source,
            tokenize,
            slow,
            sink,
        }
    }
}

/// Every `*.spill` file under `dir`, recursively.
/// Records up to the exchange's largest cross processes; a larger one fails its job at once,
/// naming both sizes, although the job keeps the default restart strategy (it never gives up).
/// Before, a 20 MB line read by `text-source` broke the data connection that had to carry it,
/// and the job restarted with "the data connection broke" for a reason.
#[actix::test]
async fn records_up_to_the_exchange_limit_cross_processes_and_a_larger_one_fails_at_once() {
    use flint::job::graph::{DistributionPattern, ExchangeMode, JobGraph};
    use flint::operators::builtin::{NOOP, TEXT_SOURCE};

    let dir = scratch("large-records");
    // Two processes of one slot: each source beside one sink; every line goes to the sink of
    // the empty key, so one source's lines cross to the other process.
    let (_jm, client) = process_cluster(&dir, 2, 1, "5s", "").await;
    let graph = |input: &std::path::Path| {
        let mut b = JobGraph::builder("large-records");
        let source = b
            .vertex("source", TEXT_SOURCE, 2)
            .config("path", input.display().to_string())
            .index();
        let sink = b.vertex("sink", NOOP, 2).index();
        b.edge(
            source,
            sink,
            DistributionPattern::AllToAll,
            ExchangeMode::Pipelined,
        );
        b.build(|_| true).unwrap()
    };
    let large = "x".repeat(7_000_000);
    let fits = dir.join("fits.txt");
    std::fs::write(
        &fits,
        format!("{large}\n{large}\nsmall\n{large}\n{large}\n"),
    )
    .unwrap();
    let job = client.submit(graph(&fits)).await;
    let details = client.wait_for_job(job, DEADLINE).await;
    assert_eq!(details.summary.status, JobStatus::Finished, "{details:#?}");

    let too_large = dir.join("too-large.txt");
    let line = "y".repeat(flint::exchange::MAX_RECORD_BYTES);
    std::fs::write(&too_large, format!("small\n{line}\n")).unwrap();
    let job = client.submit(graph(&too_large)).await;
    let details = client.wait_for_job(job, DEADLINE).await;
    assert_eq!(details.summary.status, JobStatus::Failed, "{details:#?}");
    let failure = details.failure.clone().unwrap_or_default();
    assert!(
        failure.contains("is larger than the largest the exchange carries (8388608 bytes)")
            && failure.contains(flint::job::restart::NOT_RESTARTED),
        "{failure}"
    );
    // No attempt ran again. (The sink's report that the source's partition failed may reach
    // the JobManager first and start a restart, counted in `restarts`; the source's own
    // report then fails the job before the restart runs.)
    assert!(
        details
            .vertices
            .iter()
            .all(|v| v.subtasks.iter().all(|s| s.attempt_number == 0)),
        "{details:#?}"
    );
    assert!(details.restarts <= 1, "{details:#?}");
}

fn spill_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(spill_files(&path));
        } else if path.extension().is_some_and(|e| e == "spill") {
            found.push(path);
        }
    }
    found
}

fn kill_9(pid: u32) {
    assert!(
        Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status()
            .unwrap()
            .success()
    );
}

/// Issue 12, item 4: a task that ignores its cancellation (the `ignore-cancel` operator, stuck
/// for 10 minutes) cannot keep a cancel waiting: its TaskManager process interrupts it again
/// every 100 ms, exits after the 1 s `task.cancellation.timeout`, the job ends CANCELED, and the
/// JobManager's driver replaces the process.
#[actix::test]
async fn a_task_ignoring_cancel_makes_its_task_manager_process_exit_and_be_replaced() {
    let dir = scratch("multiprocess-stuck");
    let (jm, client) = process_cluster(
        &dir,
        1,
        1,
        "5s",
        "[task.cancellation]\ninterval = \"100ms\"\ntimeout = \"1s\"\n",
    )
    .await;
    client
        .wait_for("the pool never reached 1", DEADLINE, |s| {
            s.task_managers.len() == 1
        })
        .await;
    let (_, victim) = task_managers_of(jm.pid())[0].clone();

    let registry = flint::operators::OperatorRegistry::with_builtins();
    let mut builder = flint::job::graph::JobGraph::builder("stuck");
    builder.restart_strategy(flint::job::graph::RestartStrategyConfig::None);
    builder
        .vertex("stuck", flint::operators::builtin::IGNORE_CANCEL, 1)
        .config("ms", "600000");
    let graph = builder
        .build(|op| registry.contains(op))
        .expect("a valid graph");
    let job = client.submit(graph).await;
    let give_up = tokio::time::Instant::now() + DEADLINE;
    while client.job(job).await.vertices[0].subtasks[0].state
        != flint::job::states::ExecutionState::Running
    {
        assert!(tokio::time::Instant::now() < give_up, "never RUNNING");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    let answer = client
        .job_manager
        .cancel_job
        .send(flint::messages::job_manager::CancelJob { job_id: job })
        .await
        .expect("the JobManager answers");
    assert!(answer.is_ok(), "{answer:?}");
    let details = client.wait_for_job(job, DEADLINE).await;
    assert_eq!(details.summary.status, JobStatus::Canceled, "{details:#?}");

    // The stuck TaskManager's process is gone and another took its place.
    client
        .wait_for("the stuck TaskManager was never replaced", DEADLINE, |s| {
            s.task_managers.len() == 1
                && s.task_managers
                    .iter()
                    .all(|tm| tm.resource_id.as_str() != victim)
        })
        .await;
    let children = task_managers_of(jm.pid());
    assert!(
        children.iter().all(|(_, id)| *id != victim),
        "{victim} still runs: {children:?}"
    );

    client.endpoint.shutdown();
    drop(jm);
    let _ = std::fs::remove_dir_all(&dir);
}
