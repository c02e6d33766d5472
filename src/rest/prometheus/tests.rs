use super::*;

fn snapshot() -> MetricsSnapshot {
    let mut jobs: BTreeMap<JobStatus, u32> = JobStatus::ALL.iter().map(|&s| (s, 0)).collect();
    jobs.insert(JobStatus::Running, 2);
    jobs.insert(JobStatus::Finished, 1);
    MetricsSnapshot {
        vertices: vec![VertexIo {
            job_id: "j1".into(),
            vertex: "tokenize".into(),
            io: crate::messages::TaskIoSnapshot {
                records_in: 20,
                records_out: 40,
                back_pressured_time_ms_per_second: 650,
                ..Default::default()
            },
        }],
        pool_designated: 3,
        pool_demand: 5,
        pool_target: 5,
        pool_started: 2,
        pool_pending_requests: 1,
        pool_pending_registration: 0,
        worker_start_failures: 4,
        taskmanagers_registered: 2,
        slots_total: 4,
        slots_free: 1,
        jobs,
        task_restarts: 5,
        blob_bytes_served: 0,
        heartbeat_timeouts: 6,
        messages_in: 7,
        messages_out: 8,
        bytes_in: 900,
        bytes_out: 1000,
        rejected_connections: 11,
        jm_max_handle_us: 12_500,
        jm_longest_handler: "SubmitJob".into(),
        jm_mailbox_delay_us: 250,
        jm_mailbox_max_delay_us: 4_000,
        slot_requests_queued: 13,
        slot_request_bulks_queued: 14,
        spill: vec![(
            "tm-1".into(),
            crate::messages::SpillUsage {
                live: 15,
                peak: 16,
                total: 17,
            },
        )],
    }
}

#[test]
fn every_family_has_help_and_type_before_its_samples() {
    let text = snapshot().render();
    let lines: Vec<&str> = text.lines().collect();
    let mut families = 0;
    for (i, line) in lines.iter().enumerate() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            families += 1;
            let name = rest.split(' ').next().unwrap();
            assert!(lines[i - 1].starts_with(&format!("# HELP {name} ")));
            assert!(lines[i + 1].starts_with(name), "{}", lines[i + 1]);
        }
    }
    assert_eq!(families, 30);
    assert!(text.ends_with("# EOF\n"), "OpenMetrics ends with EOF");
}

#[test]
fn values_and_labels_are_where_the_contract_says() {
    let text = snapshot().render();
    for expected in [
        "flint_pool_designated 3",
        "flint_vertex_back_pressured_time_ms_per_second{job_id=\"j1\",vertex=\"tokenize\"} 650",
        "flint_vertex_records_out_total{job_id=\"j1\",vertex=\"tokenize\"} 40",
        "flint_pool_demand 5",
        "flint_pool_target 5",
        "flint_pool_started 2",
        "flint_pool_pending_requests 1",
        "flint_pool_pending_registration 0",
        "# TYPE flint_worker_start_failures counter",
        "flint_worker_start_failures_total 4",
        "flint_taskmanagers_registered 2",
        "flint_slots_total 4",
        "flint_slots_free 1",
        "flint_jobs{state=\"RUNNING\"} 2",
        "flint_jobs{state=\"FINISHED\"} 1",
        "flint_jobs{state=\"RESTARTING\"} 0",
        "flint_task_restarts_total 5",
        "flint_heartbeat_timeouts_total 6",
        "flint_transport_messages_total{direction=\"in\"} 7",
        "flint_transport_messages_total{direction=\"out\"} 8",
        "flint_transport_bytes_total{direction=\"in\"} 900",
        "flint_transport_bytes_total{direction=\"out\"} 1000",
        "flint_transport_rejected_connections_total 11",
        "flint_jobmanager_mailbox_max_handle_ms{message=\"SubmitJob\"} 12.5",
        "flint_jobmanager_mailbox_delay_ms 0.25",
        "flint_jobmanager_mailbox_max_delay_ms 4.0",
        "flint_slot_requests_queued 13",
        "flint_slot_request_bulks_queued 14",
        "flint_taskmanager_spill_bytes{taskmanager=\"tm-1\"} 15",
        "flint_taskmanager_spill_peak_bytes{taskmanager=\"tm-1\"} 16",
    ] {
        assert!(
            text.lines().any(|line| line == expected),
            "{expected} missing in\n{text}"
        );
    }
    assert_eq!(text.matches("flint_jobs{").count(), JobStatus::ALL.len());
}

#[test]
fn a_snapshot_reads_each_value_from_its_source() {
    use crate::messages::tests::{job_manager_status, job_summary, resource};
    let rm = ResourceManagerStatus {
        designated_pool_size: 3,
        demand: 7,
        target_pool_size: 7,
        started: vec![resource(1), resource(2)],
        pending_requests: 1,
        pending_registration: 4,
        releasing: 0,
        start_failures: 5,
        consecutive_start_failures: 0,
        connected_to_job_manager: true,
        driver: "in_process".into(),
        driver_workers: Default::default(),
    };
    let transport = TransportMetrics::new();
    transport.messages_in.add(6);
    transport.messages_out.add(7);
    transport.bytes_in.add(8);
    transport.bytes_out.add(9);
    transport.rejected_connections.add(10);
    let jm = job_manager_status();
    let snapshot = MetricsSnapshot::collect(&rm, &jm, &[job_summary()], &transport);
    assert_eq!(
        (
            snapshot.pool_designated,
            snapshot.pool_demand,
            snapshot.pool_target,
            snapshot.pool_started,
            snapshot.pool_pending_requests,
            snapshot.pool_pending_registration,
            snapshot.worker_start_failures
        ),
        (3, 7, 7, 2, 1, 4, 5)
    );
    assert_eq!(
        (
            snapshot.taskmanagers_registered,
            snapshot.slots_total,
            snapshot.slots_free
        ),
        (1, 2, 1)
    );
    assert_eq!(snapshot.heartbeat_timeouts, jm.heartbeat_timeouts);
    assert_eq!(
        snapshot.spill,
        [(
            jm.task_managers[0].resource_id.to_string(),
            jm.task_managers[0].spill
        )]
    );
    assert_ne!(
        jm.task_managers[0].spill,
        Default::default(),
        "a sample that can fail"
    );
    assert_eq!(snapshot.task_restarts, jm.task_restarts);
    assert_eq!(snapshot.jobs[&JobStatus::Running], 1);
    assert_eq!(snapshot.jobs.len(), JobStatus::ALL.len());
    assert_eq!(
        (
            snapshot.messages_in,
            snapshot.messages_out,
            snapshot.bytes_in,
            snapshot.bytes_out,
            snapshot.rejected_connections
        ),
        (6, 7, 8, 9, 10)
    );
}

#[test]
fn label_values_are_escaped() {
    let mut snapshot = snapshot();
    snapshot.jobs.clear();
    let text = snapshot.render();
    assert!(!text.contains("flint_jobs{"), "{text}");
    let family = Family::<Vec<(String, String)>, Gauge>::default();
    family.get_or_create(&label("state", "say \"hi\"")).set(1);
    let mut registry = Registry::default();
    registry.register("x", "y", family);
    let mut out = String::new();
    encode(&mut out, &registry).unwrap();
    assert!(out.contains(r#"x{state="say \"hi\""} 1"#), "{out}");
}
