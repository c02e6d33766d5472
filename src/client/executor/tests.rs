//! The executor against a scripted JobManager: a job whose leader died after FINISHED but
//! before keeping its result is run again by the next leader, and the program gets that run's
//! records and status, not the half-finished ones of a run still going.

#![allow(clippy::disallowed_methods)] // the fake JobManager answers on a thread of its own

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;

use super::*;
use crate::base::ids::JobId;
use crate::client::endpoint::EndpointSource;
use crate::job::states::JobStatus;
use crate::messages::job_manager::{JobDetails, JobResults};
use crate::rest::views;

/// Answers `requests` requests, each with the next JSON body scripted for its kind (`submit`,
/// `progress`, `results`; the last one again once the script ran out); returns its URL and
/// the request lines it saw.
fn scripted_job_manager(
    requests: usize,
    submit: String,
    progress: Vec<String>,
    results: Vec<String>,
) -> (String, std::thread::JoinHandle<Vec<String>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let handle = std::thread::spawn(move || {
        let (mut progress, mut results) = (VecDeque::from(progress), VecDeque::from(results));
        let mut seen = Vec::new();
        for stream in listener.incoming().take(requests) {
            let stream = stream.unwrap();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut request = String::new();
            reader.read_line(&mut request).unwrap();
            let mut length = 0;
            loop {
                let mut header = String::new();
                reader.read_line(&mut header).unwrap();
                if header.trim().is_empty() {
                    break;
                }
                if let Some((name, value)) = header.split_once(':')
                    && name.eq_ignore_ascii_case("content-length")
                {
                    length = value.trim().parse().unwrap();
                }
            }
            reader.read_exact(&mut vec![0; length]).unwrap();
            let next = |script: &mut VecDeque<String>| {
                if script.len() > 1 {
                    script.pop_front().unwrap()
                } else {
                    script.front().cloned().unwrap()
                }
            };
            let line = request.trim().to_owned();
            let body = if line.starts_with("POST /jobs ") {
                submit.clone()
            } else if line.contains("/results ") {
                next(&mut results)
            } else {
                next(&mut progress)
            };
            seen.push(line);
            write!(
                &stream,
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            )
            .unwrap();
        }
        seen
    });
    (url, handle)
}

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

fn executor(url: &str) -> RemoteExecutor {
    RemoteExecutor::new(RestClient::new(Endpoint {
        url: url.parse().unwrap(),
        source: EndpointSource::Flag,
        token: None,
    }))
}

fn graph() -> JobGraph {
    let mut builder = JobGraph::builder("one");
    builder.vertex("source", "noop", 1);
    builder.build(|_| true).unwrap()
}

#[test]
fn the_results_of_a_job_run_again_are_those_of_its_second_run() {
    let job_id = JobId::from_u128(5);
    // Submit, one poll, three asks for the results.
    let (url, server) = scripted_job_manager(
        5,
        format!("{{\"id\":\"{job_id}\"}}"),
        vec![job_json(job_id, JobStatus::Finished, None)],
        vec![
            // The new leader recovered the job and runs it again: nothing collected yet.
            results_json(job_id, JobStatus::Running, None),
            results_json(job_id, JobStatus::Running, None),
            results_json(job_id, JobStatus::Finished, Some(b"records")),
        ],
    );
    let executed = executor(&url).execute(graph()).unwrap();
    assert_eq!(executed.status, JobStatus::Finished);
    assert_eq!(
        executed.results.vertices["collect"],
        [Some(bytes::Bytes::from_static(b"records"))]
    );
    let seen = server.join().unwrap();
    assert_eq!(
        seen.iter().filter(|l| l.contains("/results ")).count(),
        3,
        "{seen:#?}"
    );
}

#[test]
fn a_second_run_that_fails_is_reported_with_its_reason() {
    let job_id = JobId::from_u128(6);
    // Submit, one poll, two asks for the results, the job's details again.
    let (url, server) = scripted_job_manager(
        5,
        format!("{{\"id\":\"{job_id}\"}}"),
        vec![
            job_json(job_id, JobStatus::Finished, None),
            job_json(job_id, JobStatus::Failed, Some("the second run failed")),
        ],
        vec![
            results_json(job_id, JobStatus::Running, None),
            results_json(job_id, JobStatus::Failed, None),
        ],
    );
    let executed = executor(&url).execute(graph()).unwrap();
    assert_eq!(executed.status, JobStatus::Failed);
    assert_eq!(executed.failure.as_deref(), Some("the second run failed"));
    server.join().unwrap();
}
