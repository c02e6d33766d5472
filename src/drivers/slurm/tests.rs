use std::path::PathBuf;

use super::state::{Event, Phase, STATES, event, phase};
use super::*;
use crate::messages::ActorAddress;

fn submission(config: &SlurmConfig) -> SlurmSubmission {
    let template = ProcessTemplate::flint_taskmanager(PathBuf::from("/opt/my prog"), 4);
    SlurmSubmission::new("prod eu,1", config, 4, template)
}

fn request(id: &str) -> WorkerRequest {
    WorkerRequest {
        resource_id: ResourceId::new(id),
        job_manager: ActorAddress::new("jm:6123", "jobmanager"),
        leader_session_id: None,
    }
}

fn row(id: u64, state: &str, comment: &str) -> QueueRow {
    QueueRow {
        id,
        state: state.to_owned(),
        comment: comment.to_owned(),
        reason: "None".to_owned(),
    }
}

fn job(id: Option<u64>, known_at: u64, reported_up: bool) -> Job {
    Job {
        id,
        known_at,
        reported_up,
        seen: String::new(),
    }
}

/// The whole table: every state the issue names, and each phase's event with and without an
/// earlier start report.
#[test]
fn every_slurm_state_maps_to_one_pool_event() {
    let expected = [
        ("PENDING", Phase::Waiting),
        ("RUNNING", Phase::Up),
        ("COMPLETING", Phase::Ended),
        ("COMPLETED", Phase::Ended),
        ("FAILED", Phase::Ended),
        ("TIMEOUT", Phase::Ended),
        ("PREEMPTED", Phase::Ended),
        ("NODE_FAIL", Phase::Ended),
        ("CANCELLED", Phase::Ended),
    ];
    for (state, want) in expected {
        assert_eq!(phase(state), Some(want), "{state}");
    }
    assert_eq!(phase("CANCELLED by 0"), Some(Phase::Ended));
    assert_eq!(phase("SOMETHING_NEW"), None);
    let names: std::collections::BTreeSet<&str> = STATES.iter().map(|(name, _)| *name).collect();
    assert_eq!(names.len(), STATES.len(), "a state listed twice");
    let table = [
        (Phase::Waiting, false, Event::None),
        (Phase::Waiting, true, Event::None),
        (Phase::Up, false, Event::Started),
        (Phase::Up, true, Event::None),
        (Phase::Ended, false, Event::StartFailed),
        (Phase::Ended, true, Event::Terminated),
    ];
    for (phase, reported_up, want) in table {
        assert_eq!(event(phase, reported_up), want, "{phase:?} {reported_up}");
    }
}

#[test]
fn squeue_rows_parse_and_garbage_is_skipped() {
    let rows = parse_queue(
        "  17|PENDING|Resources|tm-1a-3\n18|RUNNING|None|tm-1a-4|x\nbanner\n|RUNNING|None|\n19|CANCELLED|None|\n",
    );
    assert_eq!(
        rows,
        vec![
            QueueRow {
                id: 17,
                state: "PENDING".into(),
                comment: "tm-1a-3".into(),
                reason: "Resources".into()
            },
            QueueRow {
                id: 18,
                state: "RUNNING".into(),
                comment: "tm-1a-4|x".into(),
                reason: "None".into()
            },
            QueueRow {
                id: 19,
                state: "CANCELLED".into(),
                comment: String::new(),
                reason: "None".into()
            },
        ]
    );
}

#[test]
fn a_submission_carries_the_options_and_a_quoted_script() {
    let config = SlurmConfig {
        partition: Some("batch".into()),
        account: None,
        time_limit: Some("1:00:00".into()),
        cpus_per_worker: None,
        memory_per_worker: Some(1536 << 20),
        sbatch_options: vec!["--qos=high".into()],
        taskmanager_command: Vec::new(),
        poll_interval: Duration::from_secs(1),
    };
    let submission = submission(&config);
    assert_eq!(submission.job_name, "flint-prod_eu_1");
    assert_eq!(
        submission.options,
        [
            "--no-requeue",
            "--cpus-per-task=4",
            "--mem=1536M",
            "--partition=batch",
            "--time=1:00:00",
            "--qos=high"
        ]
    );
    let mut odd = request("tm-'x'");
    odd.job_manager = ActorAddress::new("jm:6123", "jobmanager");
    assert_eq!(
        submission.script(&odd),
        "#!/bin/sh\nexec '/opt/my prog' 'taskmanager' '--jobmanager' 'jm:6123' '--resource-id' \
         'tm-'\\''x'\\''' '--slots' '4'\n"
    );
}

#[test]
fn queued_and_running_jobs_report_once_and_ended_ones_by_whether_they_ran() {
    let mut jobs = Jobs {
        reconciled: true,
        ..Jobs::default()
    };
    for (worker, id) in [("a", 1), ("b", 2), ("c", 3), ("d", 4)] {
        jobs.by_worker
            .insert(ResourceId::new(worker), job(Some(id), 0, false));
    }
    let outcome = jobs.apply(
        1,
        &[
            row(1, "PENDING", "a"),
            row(2, "RUNNING", "b"),
            row(3, "FAILED", "c"),
            row(4, "RUNNING", "d"),
        ],
    );
    assert_eq!(
        outcome.started,
        [ResourceId::new("b"), ResourceId::new("d")]
    );
    assert_eq!(outcome.failed.len(), 1);
    assert_eq!(outcome.failed[0].0, ResourceId::new("c"));
    assert!(outcome.failed[0].1.contains("Slurm job 3 is FAILED"));
    // b runs on (nothing new), d hits its time limit (lost), a is still queued.
    let outcome = jobs.apply(
        2,
        &[
            row(1, "PENDING", "a"),
            row(2, "RUNNING", "b"),
            row(4, "TIMEOUT", "d"),
        ],
    );
    assert!(outcome.started.is_empty() && outcome.failed.is_empty());
    assert_eq!(outcome.terminated.len(), 1);
    assert!(outcome.terminated[0].1.contains("TIMEOUT"));
    assert_eq!(
        jobs.by_worker.keys().cloned().collect::<Vec<_>>(),
        [ResourceId::new("a"), ResourceId::new("b")]
    );
}

#[test]
fn a_job_gone_from_the_queue_ended_but_only_if_the_poll_could_have_listed_it() {
    let mut jobs = Jobs {
        reconciled: true,
        ..Jobs::default()
    };
    // Its id became known during poll 3: poll 3's rows predate it.
    jobs.by_worker
        .insert(ResourceId::new("new"), job(Some(9), 3, false));
    jobs.by_worker
        .insert(ResourceId::new("old"), job(Some(8), 1, true));
    // Still submitting: no id, never judged.
    jobs.by_worker
        .insert(ResourceId::new("sub"), job(None, 0, false));
    let outcome = jobs.apply(3, &[]);
    assert!(outcome.failed.is_empty());
    assert_eq!(outcome.terminated.len(), 1);
    assert_eq!(outcome.terminated[0].0, ResourceId::new("old"));
    assert!(
        outcome.terminated[0]
            .1
            .contains("no longer in Slurm's queue")
    );
    let outcome = jobs.apply(4, &[]);
    assert_eq!(outcome.failed.len(), 1);
    assert_eq!(outcome.failed[0].0, ResourceId::new("new"));
    assert_eq!(
        jobs.by_worker.keys().cloned().collect::<Vec<_>>(),
        [ResourceId::new("sub")]
    );
}

#[test]
fn the_first_poll_adopts_a_previous_leaders_running_workers_and_cancels_its_queued_ones() {
    let mut jobs = Jobs::default();
    jobs.by_worker
        .insert(ResourceId::new("mine"), job(Some(5), 0, false));
    let rows = [
        row(1, "RUNNING", "tm-old-1"),
        row(2, "PENDING", "tm-old-2"),
        row(3, "COMPLETED", "tm-old-3"),
        row(4, "RUNNING", ""),
        row(5, "PENDING", "mine"),
    ];
    let outcome = jobs.apply(1, &rows);
    assert_eq!(outcome.recovered, Some(vec![ResourceId::new("tm-old-1")]));
    assert_eq!(outcome.cancel, [2, 4]);
    assert!(
        outcome.started.is_empty(),
        "an adopted worker is reported as recovered only"
    );
    assert!(jobs.by_worker[&ResourceId::new("tm-old-1")].reported_up);
    // Later polls adopt nothing: another leader's jobs are not this driver's business.
    let outcome = jobs.apply(
        2,
        &[
            row(6, "RUNNING", "tm-other-1"),
            row(1, "RUNNING", "tm-old-1"),
            row(5, "PENDING", "mine"),
        ],
    );
    assert_eq!(outcome, Outcome::default());
    // An adopted worker that ends is a lost worker.
    let outcome = jobs.apply(
        3,
        &[row(1, "NODE_FAIL", "tm-old-1"), row(5, "PENDING", "mine")],
    );
    assert_eq!(outcome.terminated.len(), 1);
}
