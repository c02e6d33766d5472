//! The recovery window on the JobManager's probes and paused clock: a recovered job whose
//! event log names finished work waits for the TaskManager that holds it, takes it back and
//! runs only the rest; past the window it runs from the start.

use std::path::PathBuf;
use std::rc::Rc;
use std::time::Duration;

use super::super::tests::*;
use super::super::*;
use crate::base::ids::ExecutionAttemptId;
use crate::ha::job_event_log::{FinishedTask, JobEvent, JobEventLog};
use crate::ha::{HaError, JobGraphWriter, JobResultStore};
use crate::job::graph::{DistributionPattern, ExchangeMode, JobGraph};
use crate::job::states::{ExecutionState, JobStatus};
use crate::messages::ResultPartitionId;
use crate::testing::*;

/// A job graph store that keeps nothing but whose event logs are real files in `dir`.
struct LoggingStore {
    dir: PathBuf,
}

impl JobGraphWriter for LoggingStore {
    fn put_job_graph(
        &self,
        _: JobId,
        _: &JobGraph,
    ) -> crate::ha::job_graph_store::LocalBoxFuture<Result<(), HaError>> {
        Box::pin(std::future::ready(Ok(())))
    }

    fn remove_job_graph(
        &self,
        _: JobId,
    ) -> crate::ha::job_graph_store::LocalBoxFuture<Result<(), HaError>> {
        Box::pin(std::future::ready(Ok(())))
    }

    fn event_log(&self) -> Option<JobEventLog> {
        Some(JobEventLog::new(&self.dir))
    }
}

const JOB: JobId = JobId::from_u128(7);
/// The attempt of `source` that finished under the previous leader, on tm-1.
const FINISHED: ExecutionAttemptId = ExecutionAttemptId::from_u128(99);
const WINDOW: Duration = Duration::from_secs(30);

/// `source` → (blocking) → `sink`: two regions.
fn two_stages() -> JobGraph {
    let mut b = JobGraph::builder("two-stages");
    let source = b.vertex("source", "noop", 1).index();
    let sink = b.vertex("sink", "noop", 1).index();
    b.edge(
        source,
        sink,
        DistributionPattern::Forward,
        ExchangeMode::Blocking,
    );
    b.build(|_| true).expect("a valid graph")
}

fn held_partition() -> ResultPartitionId {
    ResultPartitionId {
        producer: FINISHED,
        edge: 0,
    }
}

/// A new leader (recovery on, a `WINDOW` long window) whose event log says `source` finished
/// on tm-1; the job recovered from the store.
async fn recovering(name: &str) -> (Fixture, PathBuf) {
    let (f, dir) = new_leader(name).await;
    let answer = ask(
        &f.jm,
        RecoverJob {
            job_id: JOB,
            job_graph: Ok(two_stages()),
        },
    )
    .await;
    assert_eq!(answer, Ok(JOB));
    (f, dir)
}

/// [`recovering`] before the job is recovered.
async fn new_leader(name: &str) -> (Fixture, PathBuf) {
    let dir = std::env::temp_dir().join(format!(
        "flint-batch-recovery-{name}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    JobEventLog::new(&dir)
        .append(
            JOB,
            &[JobEvent::RegionFinished {
                region: 0,
                tasks: vec![FinishedTask {
                    vertex: 0,
                    subtask: 0,
                    attempt: FINISHED,
                    attempt_number: 0,
                    resource_id: ResourceId::new("tm-1"),
                    result: None,
                }],
            }],
        )
        .unwrap();
    let f = start().await;
    let mut settings = settings();
    settings.batch_job_recovery = crate::config::BatchJobRecoveryConfig {
        enabled: true,
        previous_worker_recovery_timeout: WINDOW,
    };
    let store = LoggingStore { dir: dir.clone() };
    let jm = JobManager::new(settings, SESSION, f.env.clone())
        .with_job_stores(Rc::new(store), JobResultStore::in_memory())
        .start();
    let f = Fixture { jm, ..f };
    settle().await;
    (f, dir)
}

async fn status(f: &Fixture) -> JobDetails {
    ask(&f.jm, RequestJobStatus { job_id: JOB }).await.unwrap()
}

#[actix::test]
async fn a_recovered_job_waits_for_the_task_manager_holding_its_results_then_runs_only_the_rest() {
    let (f, dir) = recovering("waits").await;
    // Another TaskManager with free slots: the job still waits for tm-1.
    let (other, registration) = f.task_manager("tm-2");
    f.register(&registration).await;
    advance(300).await;
    assert!(other.submitted().is_empty(), "ran before tm-1 was back");
    let waiting = status(&f).await;
    assert_eq!(waiting.summary.status, JobStatus::Created, "{waiting:?}");

    let (tm, mut registration) = f.task_manager("tm-1");
    registration.session = crate::base::ids::TaskManagerSessionId::from_u128(2);
    registration.partitions = vec![(JOB, vec![held_partition()])];
    f.register(&registration).await;
    settle().await;
    let deployed: Vec<_> = (tm.submitted().into_iter())
        .chain(other.submitted())
        .collect();
    assert_eq!(deployed.len(), 1, "only the sink runs: {deployed:?}");
    assert_eq!(&*deployed[0].vertex_name, "sink");
    let reads = deployed[0].inputs[0].producers.locations();
    assert_eq!(reads.len(), 1);
    assert_eq!(
        reads[0].partition,
        held_partition(),
        "reads the kept result"
    );
    assert_eq!(reads[0].task_manager, tm.address);

    let details = status(&f).await;
    let source = &details.vertices[0].subtasks[0];
    assert!(source.restored, "{source:?}");
    assert_eq!(source.state, ExecutionState::Finished);
    let _ = std::fs::remove_dir_all(dir);
}

#[actix::test]
async fn past_the_window_a_recovered_job_runs_from_the_start() {
    let (f, dir) = recovering("window").await;
    let window_closes = f.started_at + WINDOW;
    // tm-1 never comes back. Another TaskManager registers just before the window closes.
    tokio::time::sleep_until(window_closes - Duration::from_millis(300)).await;
    let (other, registration) = f.task_manager("tm-2");
    f.register(&registration).await;
    settle().await;
    assert!(other.submitted().is_empty(), "ran before the window closed");
    let waiting = status(&f).await;
    assert_eq!(waiting.summary.status, JobStatus::Created, "{waiting:?}");

    advance(400).await;
    let deployed = other.submitted();
    assert_eq!(deployed.len(), 1, "{deployed:?}");
    assert_eq!(&*deployed[0].vertex_name, "source", "runs from the start");
    assert!(!status(&f).await.vertices[0].subtasks[0].restored);
    let _ = std::fs::remove_dir_all(dir);
}

#[actix::test]
async fn a_task_manager_holding_offered_results_is_never_released_as_idle() {
    // A TaskManager re-registers before the new leader has recovered the job its results
    // belong to (jobs are recovered after the leader is published); the pool then shrinks.
    let (f, dir) = new_leader("idle").await;
    let (tm, mut registration) = f.task_manager("tm-1");
    registration.partitions = vec![(JOB, vec![held_partition()])];
    f.register(&registration).await;
    let (_other, registration) = f.task_manager("tm-2");
    f.register(&registration).await;
    let answer = ask(
        &f.jm,
        ReleaseIdleTaskManagers {
            count: 2,
            pending: Vec::new(),
        },
    )
    .await;
    assert_eq!(answer.released, [ResourceId::new("tm-2")]);
    // The job comes, and takes its results back from tm-1.
    let recovered = ask(
        &f.jm,
        RecoverJob {
            job_id: JOB,
            job_graph: Ok(two_stages()),
        },
    )
    .await;
    assert_eq!(recovered, Ok(JOB));
    settle().await;
    let deployed = tm.submitted();
    assert_eq!(deployed.len(), 1, "{deployed:?}");
    assert_eq!(&*deployed[0].vertex_name, "sink");
    assert!(status(&f).await.vertices[0].subtasks[0].restored);
    let _ = std::fs::remove_dir_all(dir);
}
