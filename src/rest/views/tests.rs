use super::*;
use crate::messages::tests::{job_details, job_manager_status, job_summary, resource};

fn rm_status() -> ResourceManagerStatus {
    ResourceManagerStatus {
        designated_pool_size: 3,
        demand: 5,
        target_pool_size: 5,
        started: vec![resource(1)],
        pending_requests: 1,
        pending_registration: 1,
        releasing: 0,
        start_failures: 4,
        consecutive_start_failures: 0,
        connected_to_job_manager: true,
        driver: "in_process".into(),
        driver_workers: Default::default(),
    }
}

#[test]
fn the_overview_counts_the_pool_slots_and_jobs_by_status() {
    let finished = JobSummary {
        job_id: JobId::from_u128(2),
        status: JobStatus::Finished,
        ..job_summary()
    };
    let jobs = [job_summary(), finished];
    let view = overview(&rm_status(), &job_manager_status(), &jobs, 10);
    assert_eq!(
        view.pool,
        PoolView {
            designated: 3,
            demand: 5,
            target: 5,
            max: 10,
            started: 1,
            pending_requests: 1,
            pending_registration: 1,
            releasing: 0,
            start_failures: 4,
        }
    );
    assert_eq!(
        (view.taskmanagers, view.slots_total, view.slots_available),
        (1, 2, 1)
    );
    assert_eq!(view.jobs.len(), JobStatus::ALL.len());
    assert_eq!(
        (
            view.jobs[&JobStatus::Running],
            view.jobs[&JobStatus::Finished]
        ),
        (1, 1)
    );
    let json = serde_json::to_value(&view).unwrap();
    assert_eq!(
        json["jobs"]["RUNNING"], 1,
        "states are keys in capitals: {json}"
    );
    assert_eq!((view.jobs_running, view.jobs_finished), (1, 1));
    assert_eq!((view.jobs_cancelled, view.jobs_failed), (0, 0));
    let json = serde_json::to_value(&view).unwrap();
    for key in [
        "flink-version",
        "slots-total",
        "slots-available",
        "jobs-running",
    ] {
        assert!(json.get(key).is_some(), "{key}: {json}");
    }
    assert_eq!(json["pool"]["pending-registration"], 1);
}

#[test]
fn a_task_manager_shows_its_slots_and_the_time_since_its_heartbeat() {
    let status = job_manager_status();
    let info = &status.task_managers[0];
    let view = task_manager(info, info.last_heartbeat_ms + 1200);
    assert_eq!(view.id.as_str(), "tm-1");
    assert_eq!(view.address, "10.0.0.7:6123");
    assert_eq!(view.hostname, "worker-1");
    assert_eq!((view.slots_number, view.free_slots), (2, 1));
    assert_eq!(view.time_since_last_heartbeat, 1200);
    assert_eq!(view.hardware.physical_memory, 24 << 30);
    let tasks = &view.slots[0].tasks;
    assert_eq!(tasks[0].vertex_name.as_deref(), Some("source"));
    assert_eq!(
        (tasks[0].attempt, tasks[0].state),
        (Some(1), Some(ExecutionState::Running))
    );
    // The job is no longer kept: reported as found, not guessed.
    assert_eq!(
        (tasks[1].vertex_name.as_ref(), tasks[1].attempt),
        (None, None)
    );
    let json = serde_json::to_value(&view).unwrap();
    assert!(json["slots"][0]["tasks"][1]["state"].is_null());
    assert!(json["slots"][0]["allocation-id"].is_string());
    assert_eq!(
        (
            json["spill"]["bytes"].as_u64(),
            json["spill"]["peak-bytes"].as_u64()
        ),
        (Some(info.spill.live), Some(info.spill.peak))
    );
    assert_eq!(
        json["spill"]["written-bytes"].as_u64(),
        Some(info.spill.total)
    );
    // A clock behind the heartbeat does not underflow.
    assert_eq!(task_manager(info, 0).time_since_last_heartbeat, 0);
}

#[test]
fn a_running_job_has_no_end_and_an_ended_one_has_its_duration() {
    let running = job(&job_details(), true);
    assert_eq!((running.end_time, running.duration), (None, None));
    assert_eq!(running.timestamps[&JobStatus::Running], 2);
    let vertex = &running.vertices[0];
    assert_eq!(
        (vertex.parallelism, vertex.tasks[&ExecutionState::Running]),
        (1, 1)
    );
    assert_eq!(vertex.tasks.len(), ExecutionState::ALL.len());
    let subtask = &vertex.subtasks[0];
    assert_eq!(subtask.locality.as_deref(), Some("LOCAL"));
    assert_eq!(
        subtask.taskmanager_id.as_ref().map(ResourceId::as_str),
        Some("tm-1")
    );

    let mut details = job_details();
    details.summary.status = JobStatus::Finished;
    details.summary.submitted_at_ms = 100;
    details.status_timestamps.push((JobStatus::Finished, 2100));
    let ended = job(&details, true);
    assert_eq!((ended.end_time, ended.duration), (Some(2100), Some(2000)));
    let json = serde_json::to_value(&ended).unwrap();
    assert_eq!(json["end-time"], 2100);
    assert!(json["failure"].is_null());
}

#[test]
fn a_job_without_its_subtasks_keeps_every_count() {
    let full = job(&job_details(), true);
    let light = job(&job_details(), false);
    assert!(light.vertices.iter().all(|v| v.subtasks.is_empty()));
    assert!(!full.vertices[0].subtasks.is_empty());
    let strip = |mut view: JobView| {
        view.vertices.iter_mut().for_each(|v| v.subtasks.clear());
        view
    };
    assert_eq!(strip(full), light, "only the subtask lists differ");
}

#[test]
fn the_job_list_is_oldest_first() {
    let newer = JobSummary {
        job_id: JobId::from_u128(2),
        submitted_at_ms: 50,
        ..job_summary()
    };
    let list = job_list(&[newer, job_summary()]);
    let starts: Vec<u64> = list.jobs.iter().map(|j| j.start_time).collect();
    assert_eq!(starts, [1, 50]);
}

/// Issue 11: a job's details show each subtask's exchange metrics under Flink's names, and a
/// vertex's backpressure level from its worst subtask.
#[test]
fn job_details_show_exchange_metrics_and_the_backpressure_level() {
    let view = job(&job_details(), true);
    let json = serde_json::to_value(&view).unwrap();
    let subtask = &json["vertices"][0]["subtasks"][0]["metrics"];
    assert_eq!(subtask["records-in"], 10);
    assert_eq!(subtask["backPressuredTimeMsPerSecond"], 600);
    assert_eq!(subtask["backpressure-level"], "high");
    let io = |ms| TaskIoSnapshot {
        back_pressured_time_ms_per_second: ms,
        ..TaskIoSnapshot::default()
    };
    let levels: Vec<String> = [0, 100, 101, 500, 501, 1000]
        .into_iter()
        .map(|ms| IoView::of(&io(ms)).backpressure_level)
        .collect();
    assert_eq!(levels, ["ok", "ok", "low", "low", "high", "high"]);
    assert_eq!(IoView::of(&io(250)).snapshot(), io(250));
}
