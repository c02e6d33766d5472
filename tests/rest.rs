//! The REST API's contract (docs/rest.md): every endpoint and every documented error, with the
//! status, the JSON shape and, for a refused request, proof that nothing changed in the cluster.
//!
//! Most tests serve an embedded cluster on 127.0.0.1:0 (fast); the last ones run a real
//! `flint jobmanager` process, read the URL it prints and stop it with `DELETE /cluster`.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use flint::base::ids::ResourceId;
use flint::config::RestConfig;
use flint::job::graph::JobGraph;
use flint::job::states::{ExecutionState, JobStatus};
use flint::messages::job_manager::JobManagerGateway;
use flint::messages::resource_manager::ResourceManagerGateway;
use flint::rest::views::{JobList, JobView, Overview, PoolSize, TaskManagerList, TaskManagerView};
use flint::rest::{RestError, RestListener, RestState};

mod common;
use common::process::task_managers_of;
use common::rest::{
    Ended, JobManagerChild, RestCluster, agent, config, poll, quick_job, request, sleeping_job,
};
use common::scratch;

const EVERY_JOB_STATUS: [&str; 8] = [
    "CANCELED",
    "CANCELLING",
    "CREATED",
    "FAILED",
    "FAILING",
    "FINISHED",
    "RESTARTING",
    "RUNNING",
];

fn overview(cluster: &RestCluster) -> Overview {
    cluster.get("/overview").expect(200).decode()
}

/// `GET /jobs`.
fn job_list(cluster: &RestCluster) -> JobList {
    cluster.get("/jobs").expect(200).decode()
}

#[test]
fn overview_task_managers_and_pool_size_answer_the_documented_shapes() {
    let cluster = RestCluster::start(config(2, 2));

    let raw = cluster.get_json("/overview");
    assert_eq!(raw["flink-version"], env!("CARGO_PKG_VERSION"));
    let keys: BTreeSet<&str> = raw["jobs"]
        .as_object()
        .expect("jobs by status")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys, BTreeSet::from(EVERY_JOB_STATUS));
    let overview = overview(&cluster);
    assert_eq!(
        (overview.pool.designated, overview.pool.max),
        (2, 5),
        "{overview:?}"
    );
    assert_eq!(overview.pool.started, 2);
    assert_eq!(
        (
            overview.pool.pending_requests,
            overview.pool.pending_registration
        ),
        (0, 0)
    );
    assert_eq!(overview.pool.start_failures, 0);
    assert_eq!(overview.taskmanagers, 2);
    assert_eq!((overview.slots_total, overview.slots_available), (4, 4));
    assert!(overview.jobs.values().all(|n| *n == 0));
    assert_eq!(overview.jobs_running, 0);

    let list: TaskManagerList = cluster.get("/taskmanagers").expect(200).decode();
    assert_eq!(list.taskmanagers.len(), 2);
    let ids: Vec<&str> = list.taskmanagers.iter().map(|tm| tm.id.as_str()).collect();
    let mut sorted = ids.clone();
    sorted.sort();
    assert_eq!(ids, sorted, "sorted by id");
    for tm in &list.taskmanagers {
        assert_eq!((tm.slots_number, tm.free_slots), (2, 2));
        assert!(tm.slots.is_empty());
        assert!(tm.hardware.cpu_cores >= 1);
        assert!(tm.registered_at > 1_600_000_000_000, "ms since the epoch");
        assert!(tm.last_heartbeat >= tm.registered_at);
        assert!(tm.time_since_last_heartbeat < 60_000);
        assert!(!tm.address.is_empty());
    }
    let raw = cluster.get_json("/taskmanagers");
    for key in [
        "id",
        "instance-id",
        "address",
        "slots-number",
        "free-slots",
        "registered-at",
        "last-heartbeat",
        "time-since-last-heartbeat",
        "hardware",
        "slots",
    ] {
        assert!(raw["taskmanagers"][0].get(key).is_some(), "{key} in {raw}");
    }

    let first = &list.taskmanagers[0];
    let one: TaskManagerView = cluster
        .get(&format!("/taskmanagers/{}", first.id))
        .expect(200)
        .decode();
    assert_eq!(
        (&one.id, one.instance_id, one.registered_at),
        (&first.id, first.instance_id, first.registered_at)
    );
    cluster
        .get("/taskmanagers/tm-9")
        .expect_error(404, "no TaskManager tm-9");

    let pool: PoolSize = cluster.get("/cluster/pool-size").expect(200).decode();
    assert_eq!(
        pool,
        PoolSize {
            size: 2,
            demand: 0,
            target: 2,
            max: 5,
            workers: Default::default(),
        }
    );
}

#[test]
fn a_job_submitted_as_json_runs_to_the_end_and_its_details_follow_it() {
    let cluster = RestCluster::start(config(2, 2));
    let id = cluster.submit(&quick_job("quick", 2));
    let job: JobView = serde_json::from_value(
        cluster.wait_for_job(&id, "the job finishes", |j| j["state"] == "FINISHED"),
    )
    .expect("a job view");
    assert_eq!(job.id.to_string(), id);
    assert_eq!(job.name, "quick");
    assert_eq!((job.tasks_finished, job.tasks_total), (4, 4));
    let end = job.end_time.expect("an end time once FINISHED");
    assert!(end >= job.start_time);
    assert_eq!(job.duration, Some(end - job.start_time));
    for status in [JobStatus::Created, JobStatus::Running, JobStatus::Finished] {
        assert!(job.timestamps.contains_key(&status), "{:?}", job.timestamps);
    }
    assert_eq!(job.timestamps[&JobStatus::Finished], end);
    assert_eq!((job.failure.as_deref(), job.restarts), (None, 0));
    let registered: BTreeSet<ResourceId> = cluster
        .get("/taskmanagers")
        .decode::<TaskManagerList>()
        .taskmanagers
        .into_iter()
        .map(|tm| tm.id)
        .collect();
    let names: Vec<&str> = job.vertices.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(names, ["numbers", "sink"]);
    for vertex in &job.vertices {
        assert_eq!((vertex.operator.as_str(), vertex.parallelism), ("noop", 2));
        assert_eq!(vertex.tasks.len(), 8, "every execution state");
        assert_eq!(vertex.tasks[&ExecutionState::Finished], 2);
        assert_eq!(vertex.tasks.values().sum::<u32>(), 2);
        for (n, subtask) in vertex.subtasks.iter().enumerate() {
            assert_eq!((subtask.subtask, subtask.attempt), (n as u32, 0));
            assert_eq!(subtask.state, ExecutionState::Finished);
            let tm = subtask.taskmanager_id.as_ref().expect("placed");
            assert!(registered.contains(tm), "{tm} not in {registered:?}");
            let locality = subtask.locality.as_deref().expect("placed");
            assert!(
                ["LOCAL", "NON_LOCAL", "UNCONSTRAINED"].contains(&locality),
                "{locality}"
            );
            assert!(subtask.timestamps.contains_key(&ExecutionState::Finished));
            assert!(subtask.failure.is_none());
        }
    }
    // The raw JSON uses the documented names, `null`s included.
    let raw = cluster.get_json(&format!("/jobs/{id}"));
    assert!(raw["failure"].is_null());
    assert!(raw["vertices"][0]["subtasks"][0]["taskmanager-id"].is_string());
    // A progress poll leaves the subtask lists out and keeps every count.
    let mut light = cluster.get_json(&format!("/jobs/{id}?subtasks=false"));
    let mut full = raw.clone();
    for (l, f) in light["vertices"]
        .as_array_mut()
        .expect("vertices")
        .iter_mut()
        .zip(full["vertices"].as_array_mut().expect("vertices"))
    {
        assert_eq!(l["subtasks"], serde_json::json!([]));
        f["subtasks"] = serde_json::json!([]);
    }
    assert_eq!(light, full);
    cluster
        .send("GET", &format!("/jobs/{id}?subtasks=maybe"), None)
        .expect_error(400, "bad query");

    // A second job lists after the first: oldest first.
    let second = cluster.submit(&quick_job("second", 1));
    let jobs = job_list(&cluster);
    let ids: Vec<String> = jobs.jobs.iter().map(|j| j.id.to_string()).collect();
    assert_eq!(ids, [id.clone(), second.clone()]);
    assert_eq!(jobs.jobs[0].state, JobStatus::Finished);
    assert_eq!(jobs.jobs[0].name, "quick");
    assert_eq!(
        (jobs.jobs[0].tasks_finished, jobs.jobs[0].tasks_total),
        (4, 4)
    );
    cluster.wait_for_job(&second, "the second job finishes", |j| {
        j["state"] == "FINISHED"
    });
    let overview = overview(&cluster);
    assert_eq!(overview.jobs[&JobStatus::Finished], 2);
    assert_eq!((overview.jobs_finished, overview.jobs_running), (2, 0));
    assert_eq!(overview.slots_available, 4, "every slot is free again");

    // An ended job cannot be cancelled; it stays FINISHED.
    cluster
        .send("DELETE", &format!("/jobs/{id}"), None)
        .expect_error(409, "already");
    assert_eq!(
        cluster.get_json(&format!("/jobs/{id}"))["state"],
        "FINISHED"
    );
}

#[test]
fn a_running_job_shows_in_its_slot_and_is_cancelled_by_delete() {
    let cluster = RestCluster::start(config(1, 2));
    let id = cluster.submit(&sleeping_job(60_000));
    cluster.wait_for_job(&id, "the sleeper runs", |j| {
        j["vertices"][0]["subtasks"][0]["state"] == "RUNNING"
    });

    let list: TaskManagerList = cluster.get("/taskmanagers").decode();
    let tm = &list.taskmanagers[0];
    assert_eq!(tm.free_slots, 1);
    assert_eq!(tm.slots.len(), 1, "{tm:?}");
    let task = &tm.slots[0].tasks[0];
    assert_eq!(task.job_id.to_string(), id);
    assert_eq!(
        (task.vertex, task.vertex_name.as_deref(), task.subtask),
        (0, Some("sleep"), 0)
    );
    assert_eq!(
        (task.attempt, task.state),
        (Some(0), Some(ExecutionState::Running))
    );
    let running = overview(&cluster);
    assert_eq!((running.jobs_running, running.slots_available), (1, 1));

    let answer = cluster
        .send("DELETE", &format!("/jobs/{id}"), None)
        .expect(202);
    let cancelled = answer.json();
    assert_eq!(cancelled["id"], id.as_str());
    assert!(
        ["CANCELLING", "CANCELED"].contains(&cancelled["state"].as_str().unwrap()),
        "{cancelled}"
    );
    cluster.wait_for_job(&id, "the job is cancelled", |j| j["state"] == "CANCELED");
    poll("the slot is free again", || {
        (overview(&cluster).slots_available == 2).then_some(())
    });
    assert_eq!(overview(&cluster).jobs_cancelled, 1);
    cluster
        .send("DELETE", &format!("/jobs/{id}"), None)
        .expect_error(409, "already");
}

/// `GET /jobs/{id}?wait=MS` holds its answer while the job runs and answers when it ends,
/// woken by the end (not at its wait's end); a job that ended answers at once.
#[test]
#[allow(clippy::disallowed_methods)] // how long the long poll was held, against its wait
fn a_long_poll_of_a_job_answers_when_the_job_ends() {
    let cluster = RestCluster::start(config(1, 1));
    let id = cluster.submit(&sleeping_job(1_500));
    let running = cluster.get_json(&format!("/jobs/{id}?subtasks=false&wait=50"));
    assert!(
        ["CREATED", "RUNNING"].contains(&running["state"].as_str().unwrap()),
        "a short wait answers while the job runs: {running}"
    );
    let asked = std::time::Instant::now();
    let ended = cluster.get_json(&format!("/jobs/{id}?subtasks=false&wait=60000"));
    assert_eq!(ended["state"], "FINISHED", "{ended}");
    assert!(
        asked.elapsed() < Duration::from_secs(9),
        "woken by the job's end, not by the end of the wait ({:?})",
        asked.elapsed()
    );
    let again = cluster.get_json(&format!("/jobs/{id}?subtasks=false&wait=60000"));
    assert_eq!(again["state"], "FINISHED");
    // Without `wait`: at once, as before.
    let id = cluster.submit(&sleeping_job(60_000));
    let now = cluster.get_json(&format!("/jobs/{id}?subtasks=false"));
    assert!(["CREATED", "RUNNING"].contains(&now["state"].as_str().unwrap()));
    cluster
        .send("DELETE", &format!("/jobs/{id}"), None)
        .expect(202);
    let cancelled = cluster.get_json(&format!("/jobs/{id}?subtasks=false&wait=60000"));
    assert_eq!(cancelled["state"], "CANCELED", "{cancelled}");
}

#[test]
fn refused_job_requests_change_nothing() {
    let cluster = RestCluster::start(config(1, 1));
    let post = |body: &str| cluster.send("POST", "/jobs", Some(body));

    post(r#"{"name": "#).expect_error(400, "line 1 column 9");
    post("").expect_error(400, "malformed JSON");
    post(r#"{"name": "x"}"#).expect_error(400, "missing field");
    post("not json at all").expect_error(400, "expected");
    // Valid JSON, but a graph the JobManager refuses.
    let mut unknown = JobGraph::builder("typo");
    unknown.vertex("source", "no-such-operator", 1);
    let unknown = serde_json::to_string(&unknown.build(|_| true).unwrap()).unwrap();
    post(&unknown).expect_error(400, "no-such-operator");
    let mut cyclic = serde_json::to_value(quick_job("cyclic", 1)).unwrap();
    cyclic["edges"][0]["target"] = 0.into();
    post(&cyclic.to_string()).expect_error(400, "must be acyclic");
    let mut empty = serde_json::to_value(quick_job("empty", 1)).unwrap();
    empty["vertices"][1]["parallelism"] = 0.into();
    post(&empty.to_string()).expect_error(400, "parallelism 0");

    cluster
        .get("/jobs/not-an-id")
        .expect_error(400, "not a valid JobId");
    cluster
        .send("DELETE", "/jobs/not-an-id", None)
        .expect_error(400, "not a valid JobId");
    let unknown_id = "3f2a0000-0000-0000-0000-000000000001";
    cluster
        .get(&format!("/jobs/{unknown_id}"))
        .expect_error(404, &format!("no job {unknown_id}"));
    cluster
        .send("DELETE", &format!("/jobs/{unknown_id}"), None)
        .expect_error(404, "no job");

    assert!(job_list(&cluster).jobs.is_empty());
    let overview = overview(&cluster);
    assert!(overview.jobs.values().all(|n| *n == 0));
    assert_eq!(overview.slots_available, 1);
}

#[test]
fn the_pool_size_is_set_by_put_and_refused_sizes_change_nothing() {
    let cluster = RestCluster::start(config(1, 1));
    let put = |body: &str| cluster.send("PUT", "/cluster/pool-size", Some(body));

    assert_eq!(put(r#"{"size": 3}"#).expect(200).json()["size"], 3);
    poll("the pool grows to 3", || {
        let o = overview(&cluster);
        (o.pool.started == 3 && o.taskmanagers == 3).then_some(())
    });

    put(r#"{"size": -1}"#).expect_error(400, "resourcemanager.max-pool-size (5)");
    put(r#"{"size": 6}"#).expect_error(400, "resourcemanager.max-pool-size (5)");
    put(r#"{"size": 2.5}"#).expect_error(400, "whole number");
    put(r#"{"size": "2"}"#).expect_error(400, "whole number");
    put(r#"{"size": 99999999999}"#).expect_error(400, "resourcemanager.max-pool-size");
    put(r#"{"size": "#).expect_error(400, "malformed JSON");
    put(r#"{"pool": 2}"#).expect_error(400, r#"{"size": N}"#);
    let pool: PoolSize = cluster.get("/cluster/pool-size").decode();
    assert_eq!(
        pool,
        PoolSize {
            size: 3,
            demand: 0,
            target: 3,
            max: 5,
            workers: Default::default(),
        }
    );
    let o = overview(&cluster);
    assert_eq!(
        (o.pool.designated, o.pool.started, o.taskmanagers),
        (3, 3, 3)
    );

    assert_eq!(put(r#"{"size": 1}"#).expect(200).json()["size"], 1);
    poll("the pool shrinks to 1", || {
        let o = overview(&cluster);
        (o.pool.started == 1 && o.taskmanagers == 1).then_some(())
    });
}

#[test]
fn unknown_paths_and_wrong_methods_are_json_errors() {
    let cluster = RestCluster::start(config(1, 1));
    cluster.get("/nope").expect_error(404, "no endpoint /nope");
    cluster.get("/jobs/1/2").expect_error(404, "no endpoint");
    for (method, path, allowed) in [
        ("PATCH", "/jobs", "GET, POST"),
        ("POST", "/overview", "GET"),
        ("GET", "/cluster", "DELETE"),
        ("DELETE", "/metrics", "GET"),
        ("POST", "/cluster/pool-size", "GET, PUT"),
        (
            "PUT",
            "/jobs/3f2a0000-0000-0000-0000-000000000001",
            "GET, DELETE",
        ),
        ("DELETE", "/taskmanagers", "GET"),
    ] {
        let answer = cluster.send(method, path, Some("{}"));
        answer.expect_error(405, &format!("does not take {method}"));
        assert_eq!(answer.allow.as_deref(), Some(allowed), "{method} {path}");
    }
    // None of those did anything.
    let o = overview(&cluster);
    assert_eq!((o.pool.designated, o.taskmanagers), (1, 1));
    assert!(job_list(&cluster).jobs.is_empty());
}

#[test]
fn a_body_over_16_mib_is_refused_with_413() {
    let cluster = RestCluster::start(config(1, 1));
    let address = cluster.url.trim_start_matches("http://");
    let mut stream = TcpStream::connect(address).expect("connects");
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    write!(
        stream,
        "POST /jobs HTTP/1.1\r\nAuthorization: Bearer rest-test-token\r\nHost: {address}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        (16 << 20) + 1
    )
    .unwrap();
    stream.write_all(b"{\"name\": \"").unwrap();
    let mut reader = BufReader::new(stream);
    let mut status_line = String::new();
    reader.read_line(&mut status_line).unwrap();
    assert!(status_line.starts_with("HTTP/1.1 413"), "{status_line}");
    let mut rest = String::new();
    let _ = reader.read_to_string(&mut rest);
    let body = rest.split("\r\n\r\n").nth(1).unwrap_or_default();
    let json: serde_json::Value = serde_json::from_str(body).expect("a JSON body");
    assert_eq!(json["status"], 413);
    assert!(json["message"].as_str().unwrap().contains("16777216"));
    assert!(job_list(&cluster).jobs.is_empty());
}

#[test]
fn every_endpoint_needs_the_bearer_token() {
    let mut config = config(1, 2);
    config.rest.token = Some("s3cret".to_owned());
    let cluster = RestCluster::start(config);

    // Reading needs it too (the jobs' configurations name files and may hold credentials);
    // the dashboard's own static files do not (the page then asks for the token).
    for path in [
        "/overview",
        "/taskmanagers",
        "/jobs",
        "/cluster/pool-size",
        "/metrics",
    ] {
        cluster
            .request("GET", path, None, None)
            .expect_error(401, "rest.token");
        cluster
            .request("GET", path, None, Some("Bearer wrong"))
            .expect_error(401, "");
        cluster
            .request("GET", path, None, Some("Bearer s3cret"))
            .expect(200);
    }
    for path in ["/", "/dashboard.js", "/dashboard.css"] {
        cluster.request("GET", path, None, None).expect(200);
    }
    let job = serde_json::to_string(&sleeping_job(60_000)).unwrap();
    for authorization in [
        None,
        Some("Bearer wrong"),
        Some("Basic czNjcmV0"),
        Some("s3cret"),
    ] {
        let refused = cluster.request("POST", "/jobs", Some(&job), authorization);
        refused.expect_error(401, "");
        assert_eq!(refused.www_authenticate.as_deref(), Some("Bearer"));
        cluster
            .request(
                "PUT",
                "/cluster/pool-size",
                Some(r#"{"size": 2}"#),
                authorization,
            )
            .expect_error(401, "");
        cluster
            .request("DELETE", "/cluster", None, authorization)
            .expect_error(401, "");
    }
    // The token is checked before the body: a malformed body without it is still a 401.
    cluster
        .request("POST", "/jobs", Some("{"), None)
        .expect_error(401, "rest.token");
    assert!(job_list(&cluster).jobs.is_empty());
    assert_eq!(cluster.get_json("/cluster/pool-size")["size"], 1);

    // With it, everything works; a cancel with a wrong token does not cancel.
    let id = cluster.submit(&sleeping_job(60_000));
    cluster
        .request(
            "DELETE",
            &format!("/jobs/{id}"),
            None,
            Some("Bearer s3cret!"),
        )
        .expect_error(401, "wrong bearer token");
    cluster.wait_for_job(&id, "the sleeper runs", |j| j["state"] == "RUNNING");
    cluster
        .request(
            "DELETE",
            &format!("/jobs/{id}"),
            None,
            Some("bearer s3cret"),
        )
        .expect(202);
    cluster.wait_for_job(&id, "the job is cancelled", |j| j["state"] == "CANCELED");

    // The cluster is still up after the refused stops; the right token stops it.
    assert_eq!(overview(&cluster).taskmanagers, 1);
    let stopping = cluster.send("DELETE", "/cluster", None).expect(202);
    assert_eq!(stopping.json()["message"], "stopping");
    assert_eq!(cluster.join(), Ended::ByRest);
}

#[test]
fn an_actor_that_cannot_answer_is_a_503() {
    let cluster = RestCluster::start(config(1, 1));
    cluster.stop_actors();
    for path in [
        "/overview",
        "/taskmanagers",
        "/jobs",
        "/cluster/pool-size",
        "/metrics",
    ] {
        cluster.get(path).expect_error(503, "did not answer");
    }
    cluster
        .send("PUT", "/cluster/pool-size", Some(r#"{"size": 2}"#))
        .expect_error(503, "resource manager did not answer");
    let job = serde_json::to_string(&quick_job("late", 1)).unwrap();
    cluster
        .send("POST", "/jobs", Some(&job))
        .expect_error(503, "JobManager did not answer");
}

/// A stand-in for the JobManager and the resource manager that takes every message and never
/// answers (an overloaded or hung actor).
struct Silent;

impl actix::Actor for Silent {
    type Context = actix::Context<Self>;
}

impl<M: actix::Message + 'static> actix::Handler<M> for Silent {
    type Result = actix::ResponseFuture<M::Result>;

    fn handle(&mut self, _: M, _: &mut actix::Context<Self>) -> Self::Result {
        Box::pin(std::future::pending())
    }
}

#[test]
fn an_actor_that_does_not_answer_in_time_is_a_503() {
    let (url_tx, url_rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
    #[allow(clippy::disallowed_methods)] // the server's own System: the test blocks on HTTP
    let server = std::thread::spawn(move || {
        actix::System::new().block_on(async move {
            use actix::Actor;
            let silent = Silent.start();
            let state = RestState::new(
                JobManagerGateway::of(&silent),
                ResourceManagerGateway::of(&silent),
                5,
            )
            .with_ask_timeout(Duration::from_millis(100));
            let server = RestListener::bind(&config(1, 1).rest)
                .expect("binds")
                .serve(state)
                .expect("serves");
            url_tx.send(server.url()).unwrap();
            let _ = done_rx.await;
            server.stop().await;
        })
    });
    let url = url_rx
        .recv_timeout(Duration::from_secs(30))
        .expect("serves");
    let agent = agent();
    let bearer = Some("Bearer rest-test-token");
    for path in ["/overview", "/jobs", "/cluster/pool-size", "/metrics"] {
        request(&agent, "GET", &format!("{url}{path}"), None, bearer)
            .expect_error(503, "did not answer");
    }
    request(
        &agent,
        "PUT",
        &format!("{url}/cluster/pool-size"),
        Some(r#"{"size": 1}"#),
        bearer,
    )
    .expect_error(503, "resource manager did not answer");
    done_tx.send(()).unwrap();
    server.join().unwrap();
}

#[test]
fn reads_are_open_without_the_token_only_when_configured() {
    let mut config = config(1, 2);
    config.rest.read_without_token = true;
    let cluster = RestCluster::start(config);
    for path in ["/overview", "/jobs", "/metrics"] {
        cluster.request("GET", path, None, None).expect(200);
    }
    // Changes still need it.
    cluster
        .request("PUT", "/cluster/pool-size", Some(r#"{"size": 2}"#), None)
        .expect_error(401, "");
}

#[test]
fn a_rest_address_needs_a_token_on_every_address() {
    let public = |token: Option<&str>| RestConfig {
        address: "0.0.0.0".to_owned(),
        port: 0,
        token: token.map(str::to_owned),
        ..RestConfig::default()
    };
    let error = RestListener::bind(&public(None)).expect_err("refused");
    assert!(
        matches!(error, RestError::TokenRequired { .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("rest.token"), "{error}");
    let error = RestListener::bind(&public(Some(""))).expect_err("refused");
    assert!(matches!(error, RestError::EmptyToken), "{error:?}");
    // Loopback too: any local user could otherwise act as the Flint user (issue 34).
    let error = RestListener::bind(&RestConfig {
        address: "127.0.0.1".to_owned(),
        port: 0,
        token: None,
        ..RestConfig::default()
    })
    .expect_err("refused");
    assert!(
        matches!(error, RestError::TokenRequired { .. }),
        "{error:?}"
    );
}

#[test]
fn flint_jobmanager_prints_its_rest_url_serves_it_and_stops_on_delete_cluster() {
    let dir = scratch("rest-process");
    let args = [
        "--bind",
        "127.0.0.1:0",
        "--rest",
        "127.0.0.1:0",
        "--pool-size",
        "2",
    ];
    let mut jm = JobManagerChild::start(&args, &dir, "");
    assert!(
        jm.first
            .starts_with("flint jobmanager listening on 127.0.0.1:"),
        "{}",
        jm.first
    );
    let url = jm.url();
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    let port: u16 = url.rsplit(':').next().unwrap().parse().expect("a port");
    assert_ne!(port, 0);

    let agent = agent();
    let bearer = common::rest::local_bearer();
    let overview: Overview = poll("two TaskManager processes register", || {
        let overview: Overview = request(
            &agent,
            "GET",
            &format!("{url}/overview"),
            None,
            bearer.as_deref(),
        )
        .expect(200)
        .decode();
        (overview.taskmanagers == 2).then_some(overview)
    });
    assert_eq!((overview.pool.designated, overview.pool.started), (2, 2));
    let workers = task_managers_of(jm.child.id());
    assert_eq!(workers.len(), 2, "{workers:?}");

    let answer = request(
        &agent,
        "DELETE",
        &format!("{url}/cluster"),
        None,
        bearer.as_deref(),
    )
    .expect(202);
    assert_eq!(answer.json()["message"], "stopping");
    let status = jm.wait_for_exit();
    assert!(status.success(), "{status}; its log:\n{}", jm.log());
    for (pid, id) in workers {
        poll(&format!("TaskManager {id} ({pid}) is gone"), || {
            (!std::path::Path::new(&format!("/proc/{pid}")).exists()).then_some(())
        });
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Starts `flint jobmanager` with `--rest rest` and asserts it refuses to start with exit code
/// 2, its message containing every one of `says`, before starting anything.
fn refuses_to_start(name: &str, rest: &str, says: &[&str]) {
    let dir = scratch(name);
    let args = ["--bind", "127.0.0.1:0", "--rest", rest, "--pool-size", "1"];
    let mut jm = JobManagerChild::start(&args, &dir, "");
    assert_eq!(jm.first, "", "nothing started");
    let pid = jm.child.id();
    assert_eq!(jm.wait_for_exit().code(), Some(2));
    assert!(task_managers_of(pid).is_empty());
    let log = jm.log();
    for expected in says {
        assert!(log.contains(expected), "`{expected}` not in {log}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn flint_jobmanager_refuses_a_rest_port_in_use() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let rest = taken.local_addr().unwrap().to_string();
    refuses_to_start("rest-in-use", &rest, &[&rest, "rest.port"]);
}

#[test]
fn flint_jobmanager_without_a_token_serves_with_its_users_generated_one() {
    // On any address (here every address): nothing answers without the token, and the
    // generated token (0600, in this user's state directory) is the one that works.
    let dir = scratch("rest-generated");
    let args = [
        "--bind",
        "127.0.0.1:0",
        "--rest",
        "0.0.0.0:0",
        "--pool-size",
        "0",
    ];
    let mut jm = JobManagerChild::start(&args, &dir, "");
    let url = jm.url();
    let agent = agent();
    request(&agent, "GET", &format!("{url}/overview"), None, None).expect_error(401, "rest-token");
    let bearer = common::rest::local_bearer().expect("the JobManager generated a token");
    request(
        &agent,
        "GET",
        &format!("{url}/overview"),
        None,
        Some(&bearer),
    )
    .expect(200);
    request(
        &agent,
        "DELETE",
        &format!("{url}/cluster"),
        None,
        Some(&bearer),
    )
    .expect(202);
    assert!(jm.wait_for_exit().success(), "{}", jm.log());
    let _ = std::fs::remove_dir_all(&dir);
}

// ---- browsers, slow clients and tokens kept off command lines (issue 15) ----

/// Sends `head` (request line and headers, without the blank line) and `body` on a raw
/// connection and returns the status and the body of the answer.
fn raw(url: &str, head: &str, body: &[u8]) -> (u16, String) {
    let address = url.trim_start_matches("http://");
    let mut stream = TcpStream::connect(address).expect("connects");
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    write!(stream, "{head}\r\nConnection: close\r\n\r\n").unwrap();
    stream.write_all(body).unwrap();
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {answer:?}"));
    let body = answer
        .split("\r\n\r\n")
        .nth(1)
        .unwrap_or_default()
        .to_owned();
    (status, body)
}

#[test]
fn a_cross_site_post_without_a_json_content_type_is_refused_with_415() {
    let cluster = RestCluster::start(config(1, 1));
    let address = cluster.url.trim_start_matches("http://").to_owned();
    // What a page can send without a CORS preflight: text/plain (and form types), no token on
    // loopback. Before issue 15 this was answered 202 and the job ran.
    let job = serde_json::to_string(&sleeping_job(60_000)).unwrap();
    for content_type in [
        "text/plain",
        "text/plain;charset=UTF-8",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
    ] {
        let (status, body) = raw(
            &cluster.url,
            &format!(
                "POST /jobs HTTP/1.1\r\nAuthorization: Bearer rest-test-token\r\nHost: {address}\r\nContent-Type: {content_type}\r\n\
                 Content-Length: {}",
                job.len()
            ),
            job.as_bytes(),
        );
        assert_eq!(status, 415, "{content_type}: {body}");
        assert!(body.contains("application/json"), "{body}");
    }
    // No content type at all is refused too; a PUT of the pool size likewise.
    let (status, _) = raw(
        &cluster.url,
        &format!(
            "POST /jobs HTTP/1.1\r\nAuthorization: Bearer rest-test-token\r\nHost: {address}\r\nContent-Length: {}",
            job.len()
        ),
        job.as_bytes(),
    );
    assert_eq!(status, 415);
    let size = br#"{"size": 3}"#;
    let (status, _) = raw(
        &cluster.url,
        &format!(
            "PUT /cluster/pool-size HTTP/1.1\r\nAuthorization: Bearer rest-test-token\r\nHost: {address}\r\nContent-Type: text/plain\r\n\
             Content-Length: {}",
            size.len()
        ),
        size,
    );
    assert_eq!(status, 415);
    // A JSON request from a page of another origin is refused as well (a preflighted request
    // would never get this far in a browser; a non-browser cannot be stopped by this anyway).
    let (status, body) = raw(
        &cluster.url,
        &format!(
            "POST /jobs HTTP/1.1\r\nAuthorization: Bearer rest-test-token\r\nHost: {address}\r\nOrigin: http://evil.example\r\n\
             Content-Type: application/json\r\nContent-Length: {}",
            job.len()
        ),
        job.as_bytes(),
    );
    assert_eq!(status, 403, "{body}");
    let (status, _) = raw(
        &cluster.url,
        &format!(
            "DELETE /cluster HTTP/1.1\r\nAuthorization: Bearer rest-test-token\r\nHost: {address}\r\nOrigin: null"
        ),
        b"",
    );
    assert_eq!(status, 403);
    // Nothing changed.
    assert!(job_list(&cluster).jobs.is_empty());
    assert_eq!(cluster.get_json("/cluster/pool-size")["size"], 1);
    // The same request from the server's own origin (the dashboard) goes through.
    let (status, body) = raw(
        &cluster.url,
        &format!(
            "POST /jobs HTTP/1.1\r\nAuthorization: Bearer rest-test-token\r\nHost: {address}\r\nOrigin: http://{address}\r\n\
             Content-Type: application/json\r\nContent-Length: {}",
            job.len()
        ),
        job.as_bytes(),
    );
    assert_eq!(status, 202, "{body}");
}

#[test]
fn a_request_for_a_foreign_host_name_is_refused() {
    let mut config = config(1, 1);
    config.rest.allowed_hosts = vec!["flint.example".to_owned()];
    let cluster = RestCluster::start(config);
    let address = cluster.url.trim_start_matches("http://").to_owned();
    let port = address.rsplit(':').next().unwrap().to_owned();
    // DNS rebinding: the page's own name, now pointing at 127.0.0.1.
    for host in [
        "rebind.evil.example".to_owned(),
        format!("rebind.evil.example:{port}"),
        format!("flint.example.evil.example:{port}"),
    ] {
        for path in ["/overview", "/", "/jobs"] {
            let (status, body) = raw(
                &cluster.url,
                &format!(
                    "GET {path} HTTP/1.1\r\nAuthorization: Bearer rest-test-token\r\nHost: {host}"
                ),
                b"",
            );
            assert_eq!(status, 403, "{host} {path}: {body}");
        }
    }
    let (status, body) = raw(
        &cluster.url,
        "GET /overview HTTP/1.1\r\nAuthorization: Bearer rest-test-token\r\nHost: rebind.evil.example",
        b"",
    );
    assert_eq!(status, 403);
    assert!(body.contains("rest.allowed-hosts"), "{body}");
    // Its own names are served.
    for host in [
        address.clone(),
        format!("localhost:{port}"),
        format!("flint.example:{port}"),
        "FLINT.example".to_owned(),
    ] {
        let (status, body) = raw(
            &cluster.url,
            &format!(
                "GET /overview HTTP/1.1\r\nAuthorization: Bearer rest-test-token\r\nHost: {host}"
            ),
            b"",
        );
        assert_eq!(status, 200, "{host}: {body}");
    }
}

#[test]
fn a_body_that_does_not_arrive_in_time_is_a_408() {
    let cluster =
        RestCluster::start_with_body_timeout(config(1, 1), Some(Duration::from_millis(500)));
    let address = cluster.url.trim_start_matches("http://").to_owned();
    let mut stream = TcpStream::connect(&address).expect("connects");
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    // Announces 1000 bytes, sends 10 and stalls (the socket stays open: no EOF).
    write!(
        stream,
        "POST /jobs HTTP/1.1\r\nAuthorization: Bearer rest-test-token\r\nHost: {address}\r\nContent-Type: application/json\r\n\
         Content-Length: 1000\r\n\r\n{{\"name\": \""
    )
    .unwrap();
    let mut reader = BufReader::new(&stream);
    let mut status_line = String::new();
    reader
        .read_line(&mut status_line)
        .expect("an answer, not a read timeout");
    assert!(status_line.starts_with("HTTP/1.1 408"), "{status_line}");
    assert!(job_list(&cluster).jobs.is_empty());
}

#[test]
fn the_rest_token_can_come_from_a_file() {
    let dir = scratch("rest-token-file");
    let file = dir.join("token");
    std::fs::write(&file, "from-a-file\n").unwrap();
    let mut config = config(1, 1);
    config.rest.token = None;
    config.rest.token_file = Some(file.clone());
    let cluster = RestCluster::start(config);
    let size = Some(r#"{"size": 1}"#);
    cluster
        .request("PUT", "/cluster/pool-size", size, None)
        .expect_error(401, "");
    cluster
        .request(
            "PUT",
            "/cluster/pool-size",
            size,
            Some("Bearer from-a-file"),
        )
        .expect(200);
    // Both a token and a file: refused, rather than one silently winning.
    let both = RestConfig {
        port: 0,
        token: Some("x".into()),
        token_file: Some(file),
        ..RestConfig::default()
    };
    assert!(matches!(
        RestListener::bind(&both),
        Err(RestError::TwoTokens)
    ));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_submission_past_jobmanager_max_subtasks_is_a_503_until_jobs_end() {
    // Issue 34: waiting jobs cost the JobManager memory per subtask; past the cap a submission
    // is refused with 503 and the reason, nothing changes, and it succeeds once jobs ended.
    let mut config = config(1, 1);
    config.jobmanager.max_subtasks = 2;
    refused_past_the_cap_until_jobs_end(config, "jobmanager.max-subtasks");
}

#[test]
fn a_submission_past_jobmanager_max_jobs_is_a_503_until_jobs_end() {
    // The same for the count of unfinished jobs, whatever their size.
    let mut config = config(1, 1);
    config.jobmanager.max_jobs = 2;
    refused_past_the_cap_until_jobs_end(config, "jobmanager.max-jobs");
}

/// Two one-subtask jobs fill the cap `key` names; a third is refused with 503 naming it and
/// changes nothing; once one job ended a submission is accepted again.
fn refused_past_the_cap_until_jobs_end(config: flint::ClusterConfig, key: &str) {
    let cluster = RestCluster::start(config);
    let sleeper = serde_json::to_string(&sleeping_job(60_000)).unwrap();
    let first = cluster.submit(&sleeping_job(60_000));
    let second = cluster.submit(&sleeping_job(60_000));
    cluster
        .send("POST", "/jobs", Some(&sleeper))
        .expect_error(503, key);
    assert_eq!(job_list(&cluster).jobs.len(), 2);
    cluster
        .send("DELETE", &format!("/jobs/{first}"), None)
        .expect(202);
    cluster.wait_for_job(&first, "the first job is cancelled", |job| {
        job["state"] == "CANCELED"
    });
    cluster.submit(&sleeping_job(60_000));
    cluster
        .send("DELETE", &format!("/jobs/{second}"), None)
        .expect(202);
}
