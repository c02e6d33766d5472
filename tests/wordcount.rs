//! WordCount on the embedded cluster: the distributed count equals a plain sequential count.

use std::collections::BTreeMap;
use std::time::Duration;

use flint::job::file::parse_job_file;
use flint::job::states::JobStatus;
use flint::operators::OperatorRegistry;
use flint::operators::builtin::sequential_word_count;
mod common;
use common::{read_counts, scratch, write_text};

use flint::{ClusterConfig, MiniCluster};

const DEADLINE: Duration = Duration::from_secs(20);

fn config(pool: u32, slots: u32) -> ClusterConfig {
    let mut config = ClusterConfig::default();
    config.resourcemanager.pool_size = pool;
    config.taskmanager.slots = slots;
    config.heartbeat.interval = Duration::from_millis(50);
    config.heartbeat.timeout = Duration::from_millis(300);
    config.seed = Some(3);
    config
}

async fn run_wordcount(parallelism: u32, name: &str) {
    let dir = scratch(name);
    let input = dir.join("input.txt");
    write_text(&input, 3_000);
    let output = dir.join("out");
    let text = include_str!("../examples/wordcount.toml")
        .replace("parallelism = 2", &format!("parallelism = {parallelism}"));
    let params = BTreeMap::from([
        ("input".to_owned(), input.display().to_string()),
        ("output".to_owned(), output.display().to_string()),
    ]);
    let registry = OperatorRegistry::with_builtins();
    let graph = parse_job_file(&text, &params, |op| registry.contains(op)).unwrap();
    let cluster = MiniCluster::start(config(parallelism.div_ceil(2), 2)).unwrap();
    let job = cluster.submit_job(graph).await.unwrap();
    let details = match cluster.wait_for_job(job, DEADLINE).await {
        Ok(details) => details,
        Err(error) => panic!("{error}: {:#?}", cluster.job_status(job).await),
    };
    assert_eq!(details.summary.status, JobStatus::Finished, "{details:#?}");
    assert_eq!(read_counts(&output), sequential_word_count(&input).unwrap());
    cluster.shutdown().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[actix::test]
async fn wordcount_with_parallelism_1_equals_the_sequential_count() {
    run_wordcount(1, "p1").await;
}

#[actix::test]
async fn wordcount_with_parallelism_3_equals_the_sequential_count() {
    run_wordcount(3, "p3").await;
}

#[actix::test]
async fn wordcount_with_parallelism_8_equals_the_sequential_count() {
    run_wordcount(8, "p8").await;
}

#[actix::test]
async fn wordcount_spilling_every_partition_to_disk_still_equals_the_sequential_count() {
    let dir = scratch("spill");
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
    let mut config = config(2, 2);
    config.taskmanager.spill_threshold = 1024;
    config.taskmanager.working_dir = Some(dir.join("work"));
    let cluster = MiniCluster::start(config).unwrap();
    let job = cluster.submit_job(graph).await.unwrap();
    let details = cluster.wait_for_job(job, DEADLINE).await.unwrap();
    assert_eq!(details.summary.status, JobStatus::Finished, "{details:#?}");
    assert_eq!(read_counts(&output), sequential_word_count(&input).unwrap());
    cluster.shutdown().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[actix::test]
async fn an_output_directory_that_cannot_be_written_fails_the_job_with_the_reason() {
    let dir = scratch("unwritable");
    let input = dir.join("input.txt");
    write_text(&input, 10);
    let blocker = dir.join("a-file");
    std::fs::write(&blocker, "not a directory").unwrap();
    let params = BTreeMap::from([
        ("input".to_owned(), input.display().to_string()),
        (
            "output".to_owned(),
            blocker.join("out").display().to_string(),
        ),
    ]);
    let registry = OperatorRegistry::with_builtins();
    let text = include_str!("../examples/wordcount.toml").replace("attempts = 3", "attempts = 1");
    let graph = parse_job_file(&text, &params, |op| registry.contains(op)).unwrap();
    let cluster = MiniCluster::start(config(1, 2)).unwrap();
    let job = cluster.submit_job(graph).await.unwrap();
    let details = cluster.wait_for_job(job, DEADLINE).await.unwrap();
    assert_eq!(details.summary.status, JobStatus::Failed);
    let failure = details.failure.clone().unwrap();
    assert!(failure.contains("a-file"), "{failure}\n{details:#?}");
    // The cluster keeps serving.
    assert!(cluster.status().await.unwrap().is_pool_at(1));
    cluster.shutdown().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
