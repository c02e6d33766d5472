use super::*;
use std::collections::{BTreeMap, BTreeSet};

/// Checks every (from, to) pair of a table against the exact allowed set.
fn assert_whole_table<S: StateMachine>(all: &[S], allowed: &[(S, S)]) {
    let allowed: BTreeSet<(S, S)> = allowed.iter().copied().collect();
    for &from in all {
        for &to in all {
            let result = from.transition(to);
            if allowed.contains(&(from, to)) {
                assert_eq!(result, Ok(to), "{from} -> {to} must be allowed");
            } else {
                assert_eq!(
                    result,
                    Err(InvalidTransition { from, to }),
                    "{from} -> {to} must be refused"
                );
            }
        }
    }
}

#[test]
fn execution_state_whole_table() {
    use ExecutionState::*;
    let allowed = [
        (Created, Scheduled),
        (Created, Canceled),
        (Created, Failed),
        (Scheduled, Deploying),
        (Scheduled, Canceled),
        (Scheduled, Failed),
        (Deploying, Running),
        (Deploying, Finished),
        (Deploying, Canceling),
        (Deploying, Canceled),
        (Deploying, Failed),
        (Running, Finished),
        (Running, Canceling),
        (Running, Failed),
        (Canceling, Canceled),
        (Canceling, Failed),
    ];
    assert_whole_table(&ExecutionState::ALL, &allowed);
    for state in ExecutionState::ALL {
        let has_exit = ExecutionState::ALL.iter().any(|&to| state.allows(to));
        assert_eq!(state.is_terminal(), !has_exit, "{state}");
    }
}

#[test]
fn job_status_whole_table() {
    use JobStatus::*;
    let allowed = [
        (Created, Running),
        (Created, Failing),
        (Created, Cancelling),
        (Running, Failing),
        (Running, Cancelling),
        (Running, Finished),
        (Running, Restarting),
        (Failing, Failed),
        (Failing, Restarting),
        (Failing, Cancelling),
        (Restarting, Running),
        (Restarting, Cancelling),
        (Restarting, Failed),
        (Restarting, Canceled),
        (Cancelling, Canceled),
        (Cancelling, Failed),
    ];
    assert_whole_table(&JobStatus::ALL, &allowed);
    for status in JobStatus::ALL {
        let has_exit = JobStatus::ALL.iter().any(|&to| status.allows(to));
        assert_eq!(status.is_globally_terminal(), !has_exit, "{status}");
    }
}

#[test]
fn names_are_flinks_in_display_and_serde() {
    let shown: Vec<String> = ExecutionState::ALL.iter().map(|s| s.to_string()).collect();
    assert_eq!(
        shown,
        [
            "CREATED",
            "SCHEDULED",
            "DEPLOYING",
            "RUNNING",
            "FINISHED",
            "CANCELING",
            "CANCELED",
            "FAILED"
        ]
    );
    let shown: Vec<String> = JobStatus::ALL.iter().map(|s| s.to_string()).collect();
    assert_eq!(
        shown,
        [
            "CREATED",
            "RUNNING",
            "FAILING",
            "FAILED",
            "CANCELLING",
            "CANCELED",
            "FINISHED",
            "RESTARTING"
        ]
    );
    // serde uses the same names (REST), and unit variants still round-trip through bincode.
    for status in JobStatus::ALL {
        let toml = toml::to_string(&BTreeMap::from([("s", status)])).unwrap();
        assert_eq!(toml.trim(), format!("s = \"{status}\""));
        let config = bincode::config::standard();
        let bytes = bincode::serde::encode_to_vec(status, config).unwrap();
        let (back, _): (JobStatus, usize) =
            bincode::serde::decode_from_slice(&bytes, config).unwrap();
        assert_eq!(back, status);
    }
}

#[test]
fn invalid_transition_names_both_states() {
    let err = ExecutionState::Finished
        .transition(ExecutionState::Running)
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid state transition from FINISHED to RUNNING"
    );
}

#[test]
fn timestamps_record_the_last_entry_of_each_state() {
    let mut timestamps = StateTimestamps::new();
    assert_eq!(timestamps.entered(JobStatus::Running), None);
    timestamps.enter(JobStatus::Running, 10);
    timestamps.enter(JobStatus::Restarting, 20);
    timestamps.enter(JobStatus::Running, 30);
    assert_eq!(timestamps.entered(JobStatus::Running), Some(30));
    assert_eq!(timestamps.entered(JobStatus::Restarting), Some(20));
    assert_eq!(
        timestamps.iter().collect::<Vec<_>>(),
        [(JobStatus::Running, 30), (JobStatus::Restarting, 20)]
    );
}

/// The timestamps are kept by `index`: it must be each state's place in `ALL`.
#[test]
fn each_state_is_indexed_by_its_place_in_all() {
    for (at, state) in ExecutionState::ALL.into_iter().enumerate() {
        assert_eq!(StateMachine::index(state), at, "{state}");
    }
    for (at, status) in JobStatus::ALL.into_iter().enumerate() {
        assert_eq!(StateMachine::index(status), at, "{status}");
    }
}

#[test]
fn tracked_records_allowed_transitions_and_ignores_refused_ones() {
    let mut job = Tracked::new(JobStatus::Created, 100);
    job.transition(JobStatus::Running, 110).unwrap();
    job.transition(JobStatus::Failing, 120).unwrap();
    assert_eq!(
        job.transition(JobStatus::Finished, 130),
        Err(InvalidTransition {
            from: JobStatus::Failing,
            to: JobStatus::Finished
        })
    );
    assert_eq!(job.state(), JobStatus::Failing);
    assert_eq!(job.timestamps().entered(JobStatus::Finished), None);
    job.transition(JobStatus::Restarting, 140).unwrap();
    job.transition(JobStatus::Running, 150).unwrap();
    job.transition(JobStatus::Finished, 160).unwrap();
    let ts = job.timestamps();
    assert_eq!(ts.entered(JobStatus::Created), Some(100));
    assert_eq!(ts.entered(JobStatus::Running), Some(150));
    assert_eq!(ts.entered(JobStatus::Failing), Some(120));
    assert_eq!(ts.entered(JobStatus::Restarting), Some(140));
    assert_eq!(ts.entered(JobStatus::Finished), Some(160));
    assert!(job.state().is_globally_terminal());

    let mut task = Tracked::new(ExecutionState::Created, 0);
    for (to, at) in [
        (ExecutionState::Scheduled, 1),
        (ExecutionState::Deploying, 2),
        (ExecutionState::Running, 3),
        (ExecutionState::Canceling, 4),
        (ExecutionState::Canceled, 5),
    ] {
        task.transition(to, at).unwrap();
        assert_eq!(task.timestamps().entered(to), Some(at));
    }
    assert!(task.transition(ExecutionState::Failed, 6).is_err());
    assert_eq!(task.state(), ExecutionState::Canceled);
}
