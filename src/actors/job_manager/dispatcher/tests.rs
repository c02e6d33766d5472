//! The Dispatcher's rules on the same probes and paused clock as the JobManager's other tests:
//! persist, then run; a graph that cannot be stored is refused and nothing runs; a recovered job
//! with a result never runs and its cleanup is finished.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use tokio::sync::oneshot;

use super::super::tests::*;
use super::super::*;
use crate::ha::{HaError, JobGraphWriter, JobResultStore};
use crate::job::graph::JobGraph;
use crate::testing::*;

/// A job graph store the test controls: `put` waits for the gate (if set) and fails while
/// `failures` lasts; `remove` records the job.
#[derive(Default)]
struct ControlledStore {
    gate: RefCell<Option<oneshot::Receiver<()>>>,
    failures: Cell<u32>,
    stored: Rc<RefCell<Vec<JobId>>>,
    removed: Rc<RefCell<Vec<JobId>>>,
}

impl JobGraphWriter for ControlledStore {
    fn put_job_graph(
        &self,
        job_id: JobId,
        _: &JobGraph,
    ) -> crate::ha::job_graph_store::LocalBoxFuture<Result<(), HaError>> {
        let gate = self.gate.borrow_mut().take();
        let fail = self.failures.get() > 0;
        self.failures.set(self.failures.get().saturating_sub(1));
        let stored = Rc::clone(&self.stored);
        Box::pin(async move {
            if let Some(gate) = gate {
                let _ = gate.await;
            }
            if fail {
                return Err(HaError::SessionLost {
                    state: "the store is unreachable (test)".to_owned(),
                });
            }
            stored.borrow_mut().push(job_id);
            Ok(())
        })
    }

    fn remove_job_graph(
        &self,
        job_id: JobId,
    ) -> crate::ha::job_graph_store::LocalBoxFuture<Result<(), HaError>> {
        self.removed.borrow_mut().push(job_id);
        Box::pin(std::future::ready(Ok(())))
    }
}

fn one_task_job() -> JobGraph {
    let mut builder = JobGraph::builder("one");
    builder.vertex("wait", "sleep", 1).config("ms", "60000");
    builder.build(|_| true).expect("a valid graph")
}

/// A JobManager with `store` and `results`, one TaskManager probe of two slots registered.
async fn start_with(
    store: ControlledStore,
    results: JobResultStore,
) -> (Fixture, crate::testing::TaskManagerProbeHandle) {
    let f = start().await;
    let jm = JobManager::new(settings(), SESSION, f.env.clone())
        .with_job_stores(Rc::new(store), results)
        .start();
    let f = Fixture { jm, ..f };
    let (tm, registration) = f.task_manager("tm-1");
    f.register(&registration).await;
    (f, tm)
}

#[actix::test]
async fn a_job_starts_only_once_its_graph_is_stored() {
    let (open, gate) = oneshot::channel();
    let store = ControlledStore {
        gate: RefCell::new(Some(gate)),
        ..ControlledStore::default()
    };
    let stored = Rc::clone(&store.stored);
    let (f, tm) = start_with(store, JobResultStore::in_memory()).await;
    let answer = f.jm.send(SubmitJob::new(one_task_job()));
    tokio::pin!(answer);
    // However long the store takes, nothing of the job runs before it holds the graph (the
    // TaskManager probe does not heartbeat: 400 ms stays within its timeout).
    for _ in 0..4 {
        tokio::select! {
            biased;
            answer = &mut answer => panic!("answered before the graph was stored: {answer:?}"),
            () = advance(100) => {}
        }
        assert!(
            tm.submitted().is_empty(),
            "deployed before the graph was stored"
        );
        assert!(ask(&f.jm, ListJobs).await.is_empty());
    }
    open.send(()).unwrap();
    let job_id = answer.await.unwrap().expect("started once stored");
    assert_eq!(*stored.borrow(), [job_id]);
    settle().await;
    assert_eq!(tm.submitted().len(), 1, "the stored job runs");
}

#[actix::test]
async fn a_graph_that_cannot_be_stored_is_refused_and_nothing_of_it_runs() {
    let store = ControlledStore::default();
    store.failures.set(1);
    let (f, tm) = start_with(store, JobResultStore::in_memory()).await;
    let refused = ask(&f.jm, SubmitJob::new(one_task_job())).await;
    match refused {
        Err(JobError::NotPersisted(why)) => assert!(why.contains("unreachable"), "{why}"),
        other => panic!("expected NotPersisted, got {other:?}"),
    }
    settle().await;
    assert!(tm.submitted().is_empty());
    assert!(ask(&f.jm, ListJobs).await.is_empty());
    // The JobManager goes on: the next submission is stored and runs.
    let job_id = ask(&f.jm, SubmitJob::new(one_task_job())).await.unwrap();
    settle().await;
    assert_eq!(tm.submitted().len(), 1);
    assert_eq!(ask(&f.jm, ListJobs).await[0].job_id, job_id);
}

#[actix::test]
async fn a_recovered_job_with_a_result_never_runs_and_its_cleanup_is_finished() {
    let results = JobResultStore::in_memory();
    let mut ended = crate::messages::tests::job_details().summarized();
    let job_id = JobId::from_u128(42);
    ended.summary.job_id = job_id;
    results.create_dirty_result(&ended).unwrap();
    let store = ControlledStore::default();
    let removed = Rc::clone(&store.removed);
    let (f, tm) = start_with(store, results.clone()).await;
    // A new leader started with the dirty result finishes its cleanup at once.
    settle().await;
    assert_eq!(*removed.borrow(), [job_id]);
    assert!(!results.has_dirty_job_result_entry(job_id));
    // Its graph, found in the job graph store, does not make it run again.
    let answer = ask(
        &f.jm,
        RecoverJob {
            job_id,
            job_graph: Ok(one_task_job()),
        },
    )
    .await;
    assert_eq!(answer, Ok(job_id));
    settle().await;
    assert!(tm.submitted().is_empty(), "a job with a result ran again");
    let details = ask(&f.jm, RequestJobStatus { job_id }).await.unwrap();
    assert!(details.from_job_result_store);
    assert_eq!(details.summary.status, ended.summary.status);
    assert_eq!(
        ask(&f.jm, CancelJob { job_id }).await,
        Err(JobError::AlreadyTerminal {
            job_id,
            status: ended.summary.status
        })
    );
}

#[actix::test]
async fn what_the_tasks_of_an_ended_job_sent_back_is_kept_and_a_new_leader_answers_it() {
    use crate::job::states::{ExecutionState, JobStatus};
    let dir = std::env::temp_dir().join(format!("flint-jm-results-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (f, tm) = start_with(
        ControlledStore::default(),
        JobResultStore::open(&dir).unwrap(),
    )
    .await;
    let job_id = ask(&f.jm, SubmitJob::new(one_task_job())).await.unwrap();
    settle().await;
    let attempt = tm.submitted()[0].attempt;
    f.report(job_id, &[attempt], ExecutionState::Running);
    f.jm.do_send(UpdateTaskExecutionStates::from(TaskExecutionState {
        ended_early: false,
        unrecoverable: false,
        job_id,
        attempt,
        state: ExecutionState::Finished,
        error: None,
        unavailable_partition: None,
        io: None,
        result: Some(bytes::Bytes::from_static(b"collected records")),
    }));
    settle().await;
    let answered = ask(&f.jm, RequestJobResults { job_id }).await.unwrap();
    assert_eq!(answered.status, Some(JobStatus::Finished));
    assert_eq!(
        answered.vertices["wait"],
        [Some(bytes::Bytes::from_static(b"collected records"))]
    );

    // The next leader, on the same store, answers as this one did.
    let next = JobManager::new(settings(), SESSION, f.env.clone())
        .with_job_stores(
            Rc::new(ControlledStore::default()),
            JobResultStore::open(&dir).unwrap(),
        )
        .start();
    assert_eq!(ask(&next, RequestJobResults { job_id }).await, Ok(answered));
    // A job it never heard of is still unknown.
    let unknown = JobId::from_u128(7);
    assert_eq!(
        ask(&next, RequestJobResults { job_id: unknown }).await,
        Err(JobError::UnknownJob(unknown))
    );
    let _ = std::fs::remove_dir_all(&dir);
}
