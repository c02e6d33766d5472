//! The executor against a scripted JobManager: a job whose leader died after FINISHED but
//! before keeping its result is run again by the next leader, and the program gets that run's
//! records and status, not the half-finished ones of a run still going.

use super::*;
use crate::base::ids::JobId;
use crate::client::test_server::Server;
use crate::job::states::JobStatus;
use crate::messages::job_manager::{JobDetails, JobResults};
use crate::rest::views;

fn job_json(job_id: JobId, status: JobStatus, failure: Option<&str>) -> String {
    let mut details: JobDetails = crate::messages::tests::job_details();
    details.summary.job_id = job_id;
    details.summary.status = status;
    details.failure = failure.map(str::to_owned);
    serde_json::to_string(&views::job(&details, false)).unwrap()
}

fn results_json(job_id: JobId, status: JobStatus, records: Option<&'static [u8]>) -> String {
    let results = JobResults {
        status: Some(status),
        vertices: records
            .map(|r| {
                [(
                    "collect".to_owned(),
                    vec![Some(bytes::Bytes::from_static(r))],
                )]
                .into()
            })
            .unwrap_or_default(),
    };
    serde_json::to_string(&views::job_results(job_id, &results)).unwrap()
}

fn graph() -> JobGraph {
    let mut builder = JobGraph::builder("one");
    builder.vertex("source", "noop", 1);
    builder.build(|_| true).unwrap()
}

#[test]
fn the_results_of_a_job_run_again_are_those_of_its_second_run() {
    let job_id = JobId::from_u128(5);
    let server = Server::start(vec![
        (200, format!("{{\"id\":\"{job_id}\"}}")),
        (200, job_json(job_id, JobStatus::Finished, None)),
        // The new leader recovered the job and runs it again: nothing collected yet.
        (200, results_json(job_id, JobStatus::Running, None)),
        (200, results_json(job_id, JobStatus::Running, None)),
        (
            200,
            results_json(job_id, JobStatus::Finished, Some(b"records")),
        ),
    ]);
    let executed = RemoteExecutor::new(server.client(None))
        .execute(graph())
        .unwrap();
    assert_eq!(executed.status, JobStatus::Finished);
    assert_eq!(
        executed.results.vertices["collect"],
        [Some(bytes::Bytes::from_static(b"records"))]
    );
    let seen: Vec<String> = (0..5).map(|_| server.next().line).collect();
    assert_eq!(
        seen.iter().filter(|l| l.contains("/results ")).count(),
        3,
        "{seen:#?}"
    );
    // The poll is a long one: the JobManager answers when the job ends.
    assert!(
        seen[1].contains(&format!("/jobs/{job_id}?subtasks=false&wait=1000 ")),
        "{seen:#?}"
    );
}

#[test]
fn a_second_run_that_fails_is_reported_with_its_reason() {
    let job_id = JobId::from_u128(6);
    // Submit, one poll, two asks for the results, the job's details again.
    let server = Server::start(vec![
        (200, format!("{{\"id\":\"{job_id}\"}}")),
        (200, job_json(job_id, JobStatus::Finished, None)),
        (200, results_json(job_id, JobStatus::Running, None)),
        (200, results_json(job_id, JobStatus::Failed, None)),
        (
            200,
            job_json(job_id, JobStatus::Failed, Some("the second run failed")),
        ),
    ]);
    let executed = RemoteExecutor::new(server.client(None))
        .execute(graph())
        .unwrap();
    assert_eq!(executed.status, JobStatus::Failed);
    assert_eq!(executed.failure.as_deref(), Some("the second run failed"));
}
