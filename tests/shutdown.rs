//! Shutdown leaves no thread behind. Alone in its test binary so no other test's threads are
//! counted.

use std::time::Duration;

use flint::{ClusterConfig, MiniCluster};

fn threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .expect("Linux /proc")
        .count()
}

#[actix::test]
async fn shutdown_stops_every_actor_and_joins_every_worker_thread() {
    let before = threads();
    let mut config = ClusterConfig::default();
    config.resourcemanager.pool_size = 8;
    config.heartbeat.interval = Duration::from_millis(50);
    config.heartbeat.timeout = Duration::from_millis(250);
    let cluster = MiniCluster::start(config).unwrap();
    cluster
        .wait_for_pool(8, Duration::from_secs(20))
        .await
        .unwrap();
    // Crash one and release some, so stopped arbiters are joined too.
    let victim = cluster.running_workers()[0].clone();
    cluster.kill_worker(&victim).unwrap();
    let replaced = |s: &flint::ClusterStatus| {
        s.is_pool_at(8) && !s.task_managers.iter().any(|tm| tm.resource_id == victim)
    };
    cluster
        .wait_until(replaced, Duration::from_secs(20))
        .await
        .unwrap();
    cluster.set_pool_size(5).await.unwrap();
    cluster
        .wait_for_pool(5, Duration::from_secs(20))
        .await
        .unwrap();
    assert!(threads() >= before + 5, "each TaskManager has a thread");
    cluster.shutdown().await.unwrap();
    assert_eq!(threads(), before, "every worker thread was joined");
}
