//! The embedded cluster end to end: real TaskManager threads, real time, short heartbeats.
//! Every wait polls with a deadline; nothing sleeps for a fixed time.

use std::time::Duration;

mod common;

use flint::env::events::ClusterEvent;
use flint::messages::RemovalReason;
use flint::{ClusterConfig, MiniCluster, MiniClusterError};

const DEADLINE: Duration = Duration::from_secs(20);

fn config(pool_size: u32) -> ClusterConfig {
    let mut config = ClusterConfig::default();
    config.resourcemanager.pool_size = pool_size;
    config.resourcemanager.check_interval = Duration::from_millis(50);
    config.taskmanager.slots = 2;
    config.heartbeat.interval = Duration::from_millis(50);
    config.heartbeat.timeout = Duration::from_millis(250);
    config.seed = Some(7);
    config
}

#[actix::test]
async fn the_pool_converges_from_zero_to_its_designated_size() {
    let cluster = MiniCluster::start(config(0)).unwrap();
    let status = cluster.wait_for_pool(0, DEADLINE).await.unwrap();
    assert_eq!(status.total_slots, 0);
    cluster.set_pool_size(6).await.unwrap();
    let status = cluster.wait_for_pool(6, DEADLINE).await.unwrap();
    assert_eq!((status.total_slots, status.free_slots), (12, 12));
    assert_eq!(status.start_failures, 0);
    assert_eq!(cluster.running_workers().len(), 6);
    // Every registered TaskManager is one the resource manager started.
    let mut registered: Vec<_> = status
        .task_managers
        .iter()
        .map(|tm| tm.resource_id.clone())
        .collect();
    registered.sort();
    assert_eq!(registered, cluster.running_workers());
    cluster.shutdown().await.unwrap();
}

#[actix::test]
async fn after_each_crash_the_pool_returns_to_its_size() {
    let cluster = MiniCluster::start(config(3)).unwrap();
    let mut events = cluster.subscribe();
    cluster.wait_for_pool(3, DEADLINE).await.unwrap();
    for _ in 0..4 {
        let victim = cluster.running_workers()[0].clone();
        cluster.kill_worker(&victim).unwrap();
        let gone = |s: &flint::ClusterStatus| {
            s.is_pool_at(3) && !s.task_managers.iter().any(|tm| tm.resource_id == victim)
        };
        cluster.wait_until(gone, DEADLINE).await.unwrap();
        assert!(!cluster.running_workers().contains(&victim));
    }
    // The JobManager noticed every crash itself: the heartbeat was overdue and the TaskManager
    // could not be reached (or, had the probe been slow, the heartbeat timed out).
    let mut lost = 0;
    while let Ok(event) = events.try_recv() {
        if matches!(
            event,
            ClusterEvent::TaskManagerLost {
                reason: RemovalReason::Unreachable | RemovalReason::HeartbeatTimeout,
                ..
            }
        ) {
            lost += 1;
        }
    }
    assert_eq!(lost, 4);
    cluster.shutdown().await.unwrap();
}

#[actix::test]
async fn resizing_up_and_down_starts_and_releases_workers() {
    let cluster = MiniCluster::start(config(2)).unwrap();
    cluster.wait_for_pool(2, DEADLINE).await.unwrap();
    cluster.set_pool_size(5).await.unwrap();
    cluster.wait_for_pool(5, DEADLINE).await.unwrap();
    cluster.set_pool_size(1).await.unwrap();
    let status = cluster.wait_for_pool(1, DEADLINE).await.unwrap();
    assert_eq!(status.total_slots, 2);
    // Released workers' threads are stopped, not just forgotten.
    assert_eq!(cluster.running_workers().len(), 1);
    cluster.set_pool_size(0).await.unwrap();
    cluster.wait_for_pool(0, DEADLINE).await.unwrap();
    assert!(cluster.running_workers().is_empty());
    cluster.shutdown().await.unwrap();
}

#[actix::test]
async fn bad_requests_are_refused_and_change_nothing() {
    let cluster = MiniCluster::start(config(1)).unwrap();
    cluster.wait_for_pool(1, DEADLINE).await.unwrap();
    let too_big = cluster.set_pool_size(1_000_000).await.unwrap_err();
    assert!(
        too_big
            .to_string()
            .contains("resourcemanager.max-pool-size"),
        "{too_big}"
    );
    let unknown = flint::base::ids::ResourceId::new("no-such-worker");
    assert!(matches!(
        cluster.kill_worker(&unknown),
        Err(MiniClusterError::UnknownWorker(_))
    ));
    let status = cluster.status().await.unwrap();
    assert!(status.is_pool_at(1));
    cluster.shutdown().await.unwrap();
}

#[actix::test]
async fn an_invalid_configuration_starts_nothing_and_names_the_key() {
    let mut bad = config(1);
    bad.heartbeat.timeout = bad.heartbeat.interval;
    let error = MiniCluster::start(bad).err().expect("refused");
    assert!(error.to_string().contains("heartbeat.timeout"), "{error}");
    let mut bad = config(1);
    bad.taskmanager.slots = 0;
    let error = MiniCluster::start(bad).err().expect("refused");
    assert!(error.to_string().contains("taskmanager.slots"), "{error}");
}

#[actix::test]
async fn wait_for_pool_reports_the_cluster_when_it_times_out() {
    let cluster = MiniCluster::start(config(1)).unwrap();
    let error = cluster
        .wait_for_pool(2, Duration::from_millis(200))
        .await
        .unwrap_err();
    let MiniClusterError::PoolNotReached { wanted, last, .. } = error else {
        panic!("expected a timeout, got {error}")
    };
    assert_eq!(wanted, 2);
    assert_eq!(last.designated_pool_size, 1);
    cluster.shutdown().await.unwrap();
}

/// Ends the job built by `b` with `count-by-key` (all-to-all from `from`) and a `file-sink`
/// writing `key<TAB>count` lines into `output`.
fn count_into(
    b: &mut flint::job::graph::JobGraphBuilder,
    from: flint::job::graph::VertexIndex,
    output: &std::path::Path,
) {
    use flint::job::graph::{DistributionPattern, ExchangeMode};
    let count = b.vertex("count", "count-by-key", 2).index();
    let sink = b
        .vertex("sink", "file-sink", 2)
        .config("path", output.display().to_string())
        .index();
    b.edge(
        from,
        count,
        DistributionPattern::AllToAll,
        ExchangeMode::Pipelined,
    );
    b.edge(
        count,
        sink,
        DistributionPattern::Forward,
        ExchangeMode::Pipelined,
    );
}

/// Submits the job built by `b` and waits for it to finish (FINISHED, or the test fails).
async fn run_to_the_end(cluster: &MiniCluster, b: flint::job::graph::JobGraphBuilder) {
    let job = cluster
        .submit_job(b.build(|_| true).unwrap())
        .await
        .unwrap();
    let details = cluster.wait_for_job(job, DEADLINE).await.unwrap();
    assert_eq!(
        details.summary.status,
        flint::job::states::JobStatus::Finished,
        "{details:?}"
    );
}

/// The embedded cluster's artifacts: a file stored with `upload_artifact` ships with a job, its
/// TaskManagers fetch it, and a `text-source` reads it: the counts equal a sequential count.
#[actix::test]
async fn a_shipped_file_is_read_by_the_jobs_tasks() {
    use flint::job::graph::{DistributionPattern, ExchangeMode, JobGraph};
    let cluster = MiniCluster::start(config(2)).unwrap();
    cluster.wait_for_pool(2, DEADLINE).await.unwrap();
    let dir = std::env::temp_dir().join(format!("flint-mini-artifact-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join("words.txt");
    let text: String = (0..2_000)
        .map(|i| format!("Flint actor {} slot\n", i % 17))
        .collect();
    std::fs::write(&input, text).unwrap();
    let artifact = cluster.upload_artifact(&input, false).unwrap();
    assert_eq!(artifact.name, "words.txt");
    let output = dir.join("counts");
    let mut b = JobGraph::builder("shipped");
    b.artifact(artifact);
    let source = b
        .vertex("source", "text-source", 4)
        .config("artifact", "words.txt")
        .index();
    let tokenize = b.vertex("tokenize", "tokenize", 4).index();
    b.edge(
        source,
        tokenize,
        DistributionPattern::Forward,
        ExchangeMode::Pipelined,
    );
    count_into(&mut b, tokenize, &output);
    run_to_the_end(&cluster, b).await;
    assert_eq!(
        common::read_counts(&output),
        flint::operators::builtin::sequential_word_count(&input).unwrap()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A `process` vertex with two inputs (issue 35, item 2): the runtime gives each record the
/// index of the edge it came on, and the child sees it in its frame. Two sources of different
/// sizes feed a shell child that turns each input line into a record keyed by its `input`
/// (valued 1); counting those keys gives each source's line count.
#[actix::test]
async fn a_process_vertex_tells_its_two_inputs_apart() {
    use flint::job::graph::{DistributionPattern, ExchangeMode, JobGraph};
    let cluster = MiniCluster::start(config(2)).unwrap();
    cluster.wait_for_pool(2, DEADLINE).await.unwrap();
    let dir = std::env::temp_dir().join(format!("flint-mini-two-inputs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (left, right) = (dir.join("left.txt"), dir.join("right.txt"));
    std::fs::write(&left, "left line\n".repeat(300)).unwrap();
    std::fs::write(&right, "right line\n".repeat(500)).unwrap();
    let output = dir.join("counts");
    let mut b = JobGraph::builder("two-inputs");
    let sources = [&left, &right].map(|path| {
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        b.vertex(&name, "text-source", 2)
            .config("path", path.display().to_string())
            .index()
    });
    let script = r#"sed 's/^{"input":\([0-9]*\),.*$/{"key":"\1","value":1}/'"#;
    let step = b
        .vertex("which-input", "process", 2)
        .config("command", "sh")
        .config("allow-path", "true")
        .config("args", serde_json::to_string(&["-c", script]).unwrap())
        .index();
    for source in sources {
        b.edge(
            source,
            step,
            DistributionPattern::AllToAll,
            ExchangeMode::Pipelined,
        );
    }
    count_into(&mut b, step, &output);
    run_to_the_end(&cluster, b).await;
    let expected: std::collections::BTreeMap<String, u64> =
        [("0".to_owned(), 300), ("1".to_owned(), 500)].into();
    assert_eq!(common::read_counts(&output), expected);
    let _ = std::fs::remove_dir_all(&dir);
}
