//! The client against a scripted HTTP server on loopback: what it sends (methods, paths, the
//! token, the body) and how each kind of answer becomes a value or a [`RestError`].

use std::net::TcpListener;

use super::*;
use crate::client::endpoint::{EndpointSource, JobManagerUrl};
use crate::client::test_server::Server;
use crate::job::states::JobStatus;

const JOB_ID: &str = "3f2a0c1e-9b7d-4e21-8c55-0d1e2f3a4b5c";

#[test]
fn answers_parse_and_keep_the_body_as_sent() {
    let server = Server::start(vec![
        (200, include_str!("../testdata/jobs.json")),
        (200, include_str!("../testdata/job_finished.json")),
    ]);
    let client = server.client(Some("secret"));
    let jobs = client.jobs().unwrap();
    assert_eq!(jobs.value.jobs.len(), 2);
    assert_eq!(jobs.body, include_str!("../testdata/jobs.json"));
    let seen = server.next();
    assert_eq!(seen.line, "GET /jobs HTTP/1.1");
    // Every request carries the token, reads too (the JobManager asks for it unless
    // `rest.read-without-token`).
    assert_eq!(seen.authorization.as_deref(), Some("Bearer secret"));

    let job = client.job(JOB_ID.parse().unwrap()).unwrap();
    assert_eq!(job.value.state, JobStatus::Finished);
    assert_eq!(server.next().line, format!("GET /jobs/{JOB_ID} HTTP/1.1"));
}

#[test]
fn changing_requests_carry_the_token_and_a_json_body() {
    let server = Server::start(vec![
        (200, r#"{"size": 4}"#),
        (
            202,
            r#"{"id": "3f2a0c1e-9b7d-4e21-8c55-0d1e2f3a4b5c", "state": "CANCELLING"}"#,
        ),
        (202, r#"{"message": "stopping"}"#),
    ]);
    let client = server.client(Some("s3cret"));
    assert_eq!(client.set_pool_size(4).unwrap().value.size, 4);
    let seen = server.next();
    assert_eq!(seen.line, "PUT /cluster/pool-size HTTP/1.1");
    assert_eq!(seen.authorization.as_deref(), Some("Bearer s3cret"));
    assert_eq!(seen.content_type.as_deref(), Some("application/json"));
    assert_eq!(seen.body, r#"{"size":4}"#);

    let cancelled = client.cancel(JOB_ID.parse().unwrap()).unwrap().value;
    assert_eq!(cancelled.state, JobStatus::Cancelling);
    let seen = server.next();
    assert_eq!(seen.line, format!("DELETE /jobs/{JOB_ID} HTTP/1.1"));
    assert_eq!(seen.authorization.as_deref(), Some("Bearer s3cret"));

    assert_eq!(client.stop_cluster().unwrap().value.message, "stopping");
    assert_eq!(server.next().line, "DELETE /cluster HTTP/1.1");
}

#[test]
fn a_submitted_graph_is_the_job_graphs_json() {
    let server = Server::start(vec![(
        202,
        r#"{"id": "3f2a0c1e-9b7d-4e21-8c55-0d1e2f3a4b5c"}"#,
    )]);
    let mut builder = JobGraph::builder("one");
    builder.vertex("v", "noop", 2).config("count", "5");
    let graph = builder.build(|_| true).unwrap();
    let submitted = server.client(None).submit(&graph).unwrap();
    assert_eq!(submitted.value.id.to_string(), JOB_ID);
    let seen = server.next();
    assert_eq!(seen.line, "POST /jobs HTTP/1.1");
    assert_eq!(seen.authorization, None);
    let sent: JobGraph = serde_json::from_str(&seen.body).unwrap();
    assert_eq!(sent, graph);
}

#[test]
fn error_answers_keep_the_servers_message_and_map_to_exit_codes() {
    let error = |status, message: &str| {
        format!(r#"{{"status": {status}, "error": "X", "message": "{message}"}}"#).leak() as &str
    };
    let server = Server::start(vec![
        (404, error(404, "no job 3f2a")),
        (401, error(401, "missing bearer token")),
        (
            400,
            error(400, "pool size 7 is over resourcemanager.max-pool-size (5)"),
        ),
        (409, error(409, "job 3f2a already ended: FINISHED")),
        (503, error(503, "the JobManager did not answer")),
        (502, "<html>bad gateway</html>"),
        (200, "not json"),
    ]);
    let client = server.client(None);
    let id = JOB_ID.parse().unwrap();

    let err = client.job(id).unwrap_err();
    assert_eq!(err.to_string(), "no job 3f2a");
    assert_eq!(err.exit_code(), exit::NOT_FOUND);

    let err = client.cancel(id).unwrap_err();
    assert!(
        err.to_string().starts_with("missing bearer token: "),
        "{err}"
    );
    assert!(err.to_string().contains("FLINT_REST_TOKEN"), "{err}");
    assert_eq!(err.exit_code(), exit::UNAUTHORIZED);

    let err = client.set_pool_size(7).unwrap_err();
    assert!(err.to_string().contains("max-pool-size"), "{err}");
    assert_eq!(err.exit_code(), exit::USAGE);

    let err = client.cancel(id).unwrap_err();
    assert!(err.to_string().contains("already ended"), "{err}");
    assert_eq!(err.exit_code(), exit::CONFLICT);

    let err = client.jobs().unwrap_err();
    assert!(err.to_string().contains("HTTP 503"), "{err}");
    assert!(err.to_string().contains("GET /jobs"), "{err}");
    assert_eq!(err.exit_code(), exit::CLUSTER);

    let err = client.overview().unwrap_err();
    assert!(err.to_string().contains("bad gateway"), "{err}");
    assert_eq!(err.exit_code(), exit::CLUSTER);

    let err = client.overview().unwrap_err();
    assert!(matches!(err, RestError::BadAnswer { .. }), "{err:?}");
    assert!(err.to_string().contains("not json"), "{err}");
}

#[test]
fn a_refused_token_is_told_apart_from_a_missing_one() {
    let server = Server::start(vec![(401, r#"{"message": "wrong bearer token"}"#)]);
    let err = server.client(Some("old")).set_pool_size(1).unwrap_err();
    assert!(err.to_string().contains("refused the token"), "{err}");
}

#[test]
fn a_port_nobody_listens_on_is_unreachable_and_names_the_url() {
    // A port that was free a moment ago: bound, then released.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url: JobManagerUrl = format!("127.0.0.1:{port}").parse().unwrap();
    let client = RestClient::new(Endpoint {
        url: url.clone(),
        source: EndpointSource::Env,
        token: None,
    });
    let err = client.jobs().unwrap_err();
    assert!(err.is_unreachable(), "{err:?}");
    assert_eq!(err.exit_code(), exit::UNREACHABLE);
    let message = err.to_string();
    for needle in [url.as_str(), "FLINT_JOBMANAGER", "--jobmanager", "refused"] {
        assert!(message.contains(needle), "`{needle}` in {message}");
    }
}

/// A job's collected records can pass the 10 MiB every other answer is held to: results of a
/// few MiB per collect subtask, base64 in JSON, are read whole (they failed as "not Flint's
/// REST API" before), while a job listing that large is still refused.
#[test]
fn job_results_may_pass_the_usual_answer_limit_and_other_answers_may_not() {
    use crate::messages::job_manager::JobResults;
    let job_id: JobId = JOB_ID.parse().unwrap();
    let records = bytes::Bytes::from(vec![7u8; 12 << 20]);
    let results = JobResults {
        status: Some(JobStatus::Finished),
        vertices: [("collect".to_owned(), vec![Some(records.clone())])].into(),
    };
    let body = serde_json::to_string(&crate::rest::views::job_results(job_id, &results)).unwrap();
    assert!(body.len() as u64 > BODY_LIMIT);
    let server = Server::start(vec![(200, body.clone()), (200, body)]);
    let client = server.client(None);
    let answered = client.results(job_id).unwrap();
    assert_eq!(answered.value.state, Some(JobStatus::Finished));
    assert_eq!(answered.value.vertices["collect"].len(), 1);
    assert!(client.jobs().is_err(), "an ordinary answer stays bounded");
}
