//! `GET /metrics`: OpenMetrics text (encoded by prometheus-client), parsed with a Prometheus
//! text parser; every metric of docs/rest.md with its type, and values that follow the cluster: the pool, slots, jobs by state and task restarts on
//! an embedded cluster; the transport's traffic, refused connections and
//! worker start failures on real `flint jobmanager` processes.

use std::io::Write;
use std::net::TcpStream;

use prometheus_parse::{Scrape, Value};

mod common;
use common::rest::{
    JobManagerChild, RestCluster, agent, config, failing_once_job, poll, request, sleeping_job,
};
use common::scratch;

/// Every metric of the contract and its type.
const CONTRACT: [(&str, &str); 22] = [
    ("flint_pool_designated", "gauge"),
    ("flint_pool_demand", "gauge"),
    ("flint_pool_target", "gauge"),
    ("flint_pool_started", "gauge"),
    ("flint_pool_pending_requests", "gauge"),
    ("flint_pool_pending_registration", "gauge"),
    ("flint_worker_start_failures_total", "counter"),
    ("flint_taskmanagers_registered", "gauge"),
    ("flint_slots_total", "gauge"),
    ("flint_slots_free", "gauge"),
    ("flint_jobs", "gauge"),
    ("flint_task_restarts_total", "counter"),
    ("flint_heartbeat_timeouts_total", "counter"),
    ("flint_blob_served_bytes_total", "counter"),
    ("flint_transport_messages_total", "counter"),
    ("flint_transport_bytes_total", "counter"),
    ("flint_transport_rejected_connections_total", "counter"),
    ("flint_jobmanager_mailbox_max_handle_ms", "gauge"),
    ("flint_jobmanager_mailbox_delay_ms", "gauge"),
    ("flint_jobmanager_mailbox_max_delay_ms", "gauge"),
    ("flint_slot_requests_queued", "gauge"),
    ("flint_slot_request_bulks_queued", "gauge"),
];

/// One parsed scrape.
struct Metrics(Scrape);

impl Metrics {
    /// Scrapes `url/metrics` and checks the format: the content type, HELP for every family
    /// and each sample typed as the contract says.
    /// `GET /metrics` with `authorization` (every endpoint needs the token).
    fn scrape(agent: &ureq::Agent, url: &str, authorization: Option<&str>) -> Self {
        let answer =
            request(agent, "GET", &format!("{url}/metrics"), None, authorization).expect(200);
        assert!(
            answer
                .content_type
                .starts_with("application/openmetrics-text; version=1.0.0"),
            "{}",
            answer.content_type
        );
        assert!(answer.body.ends_with("# EOF\n"), "{}", answer.body);
        let lines = answer.body.lines().map(|line| Ok(line.to_owned()));
        let scrape = Scrape::parse(lines).expect("a Prometheus text exposition");
        for (name, kind) in CONTRACT {
            // OpenMetrics names a counter's family without the `_total` of its sample.
            let family = match kind {
                "counter" => name
                    .strip_suffix("_total")
                    .expect("a counter ends in _total"),
                _ => name,
            };
            assert!(
                scrape.docs.get(family).is_some_and(|help| !help.is_empty()),
                "no HELP for {family}"
            );
            assert!(
                answer
                    .body
                    .lines()
                    .any(|line| line == format!("# TYPE {family} {kind}")),
                "{family} is not a {kind}"
            );
            let samples: Vec<_> = scrape.samples.iter().filter(|s| s.metric == name).collect();
            assert!(!samples.is_empty(), "no sample of {name}");
            for sample in samples {
                let numeric = matches!(
                    sample.value,
                    Value::Gauge(_) | Value::Counter(_) | Value::Untyped(_)
                );
                assert!(numeric, "{name}: {:?}", sample.value);
            }
        }
        Self(scrape)
    }

    /// The value of `name` whose label `key` is `value` (or the unlabelled one).
    fn value(&self, name: &str, label: Option<(&str, &str)>) -> f64 {
        let samples: Vec<f64> = self
            .0
            .samples
            .iter()
            .filter(|s| s.metric == name)
            .filter(|s| match label {
                Some((key, value)) => s.labels.get(key) == Some(value),
                None => true,
            })
            .map(|s| match s.value {
                Value::Gauge(v) | Value::Counter(v) | Value::Untyped(v) => v,
                ref other => panic!("{name}: {other:?}"),
            })
            .collect();
        assert_eq!(samples.len(), 1, "{name} {label:?}: {samples:?}");
        samples[0]
    }

    fn get(&self, name: &str) -> f64 {
        self.value(name, None)
    }

    fn jobs(&self, state: &str) -> f64 {
        self.value("flint_jobs", Some(("state", state)))
    }

    fn transport(&self, name: &str, direction: &str) -> f64 {
        self.value(name, Some(("direction", direction)))
    }
}

#[test]
fn the_metrics_parse_and_follow_the_embedded_cluster() {
    let cluster = RestCluster::start(config(2, 2));
    let agent = agent();
    let bearer = format!("Bearer {}", common::rest::TOKEN);
    let scrape = || Metrics::scrape(&agent, &cluster.url, Some(&bearer));

    let idle = scrape();
    assert_eq!(idle.get("flint_pool_designated"), 2.0);
    assert_eq!(idle.get("flint_pool_started"), 2.0);
    assert_eq!(idle.get("flint_pool_pending_requests"), 0.0);
    assert_eq!(idle.get("flint_pool_pending_registration"), 0.0);
    assert_eq!(idle.get("flint_worker_start_failures_total"), 0.0);
    assert_eq!(idle.get("flint_taskmanagers_registered"), 2.0);
    assert_eq!(idle.get("flint_slots_total"), 4.0);
    assert_eq!(idle.get("flint_slots_free"), 4.0);
    for state in [
        "CREATED",
        "RUNNING",
        "FAILING",
        "FAILED",
        "CANCELLING",
        "CANCELED",
        "FINISHED",
        "RESTARTING",
    ] {
        assert_eq!(idle.jobs(state), 0.0, "{state}");
    }
    assert_eq!(idle.get("flint_task_restarts_total"), 0.0);
    assert_eq!(idle.get("flint_heartbeat_timeouts_total"), 0.0);
    // An embedded cluster has no transport.
    for name in [
        "flint_transport_messages_total",
        "flint_transport_bytes_total",
    ] {
        assert_eq!(idle.transport(name, "in"), 0.0);
        assert_eq!(idle.transport(name, "out"), 0.0);
    }

    // Every first attempt fails: each task restarts once, as the job's attempts show.
    let id = cluster.submit(&failing_once_job());
    let job = cluster.wait_for_job(&id, "the job finishes after its restarts", |j| {
        j["state"] == "FINISHED"
    });
    let attempts: u64 = job["vertices"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|v| v["subtasks"].as_array().unwrap())
        .map(|s| s["attempt"].as_u64().unwrap())
        .sum();
    assert_eq!(attempts, 4, "{job}");
    let after = scrape();
    assert_eq!(after.get("flint_task_restarts_total"), attempts as f64);
    assert_eq!(after.jobs("FINISHED"), 1.0);
    assert_eq!(after.get("flint_slots_free"), 4.0);

    // A running job holds a slot.
    let sleeper = cluster.submit(&sleeping_job(60_000));
    cluster.wait_for_job(&sleeper, "the sleeper runs", |j| j["state"] == "RUNNING");
    let running = scrape();
    assert_eq!(running.jobs("RUNNING"), 1.0);
    assert_eq!(running.get("flint_slots_free"), 3.0);
    // Its vertex, labelled by job and name (issue 11: backpressure is visible in /metrics).
    assert_eq!(
        running.value(
            "flint_vertex_back_pressured_time_ms_per_second",
            Some(("vertex", "sleep"))
        ),
        0.0,
        "a sleeper waits for nobody"
    );
}

/// A `flint jobmanager` with a one-TaskManager pool and `extra` configuration.
fn jobmanager(name: &str, extra: &str) -> JobManagerChild {
    let args = [
        "--bind",
        "127.0.0.1:0",
        "--rest",
        "127.0.0.1:0",
        "--pool-size",
        "1",
    ];
    JobManagerChild::start(&args, &scratch(name), extra)
}

/// Scrapes a `flint jobmanager` of this user, which serves with its generated token.
fn scrape(agent: &ureq::Agent, jm: &JobManagerChild) -> Metrics {
    Metrics::scrape(agent, &jm.url(), common::rest::local_bearer().as_deref())
}

/// Stops the cluster through the API and waits for the process to end.
fn stop(mut jm: JobManagerChild, agent: &ureq::Agent) {
    request(
        agent,
        "DELETE",
        &format!("{}/cluster", jm.url()),
        None,
        common::rest::local_bearer().as_deref(),
    )
    .expect(202);
    let status = jm.wait_for_exit();
    assert!(status.success(), "{status}; its log:\n{}", jm.log());
}

#[test]
fn a_jobmanager_process_counts_its_transport_traffic_and_refused_connections() {
    let jm = jobmanager("metrics-transport", "");
    let agent = agent();
    let registered = poll("the TaskManager registers over the transport", || {
        let now = scrape(&agent, &jm);
        (now.get("flint_taskmanagers_registered") == 1.0).then_some(now)
    });
    let messages_in = registered.transport("flint_transport_messages_total", "in");
    let messages_out = registered.transport("flint_transport_messages_total", "out");
    assert!(messages_in >= 1.0, "the registration");
    assert!(messages_out >= 1.0, "its acknowledgement");
    let bytes_in = registered.transport("flint_transport_bytes_total", "in");
    assert!(
        bytes_in > 4.0 * messages_in,
        "a frame is its 4-byte prefix and more"
    );
    assert!(registered.transport("flint_transport_bytes_total", "out") > 4.0 * messages_out);
    assert_eq!(
        registered.get("flint_transport_rejected_connections_total"),
        0.0
    );

    // Heartbeats keep flowing: the counters only grow.
    let later = poll("more heartbeats arrive", || {
        let now = scrape(&agent, &jm);
        (now.transport("flint_transport_messages_total", "in") > messages_in).then_some(now)
    });
    assert!(later.transport("flint_transport_bytes_total", "in") > bytes_in);

    // Something that is not a Flint node connects and fails the handshake.
    let mut stranger = TcpStream::connect(jm.address()).expect("connects");
    stranger
        .write_all(b"GET / HTTP/1.1\r\nHost: flint\r\n\r\n")
        .unwrap();
    poll("the refused connection is counted", || {
        let now = scrape(&agent, &jm);
        (now.get("flint_transport_rejected_connections_total") == 1.0).then_some(())
    });
    drop(stranger);
    stop(jm, &agent);
}

#[test]
fn worker_start_failures_are_counted() {
    let jm = jobmanager(
        "metrics-start-failures",
        "[resourcemanager]\ndriver = \"command\"\n\
         [resourcemanager.command]\ntemplate = [\"/nonexistent/flint-taskmanager\"]\nhosts = [\"localhost\"]\n",
    );
    let agent = agent();
    let failing = poll("a worker fails to start", || {
        let now = scrape(&agent, &jm);
        (now.get("flint_worker_start_failures_total") >= 1.0).then_some(now)
    });
    assert_eq!(failing.get("flint_pool_started"), 0.0);
    assert_eq!(failing.get("flint_taskmanagers_registered"), 0.0);
    assert_eq!(failing.get("flint_pool_designated"), 1.0);
    let overview = request(
        &agent,
        "GET",
        &format!("{}/overview", jm.url()),
        None,
        common::rest::local_bearer().as_deref(),
    )
    .expect(200)
    .json();
    assert!(overview["pool"]["start-failures"].as_u64().unwrap() >= 1);
    stop(jm, &agent);
}
