//! The task failures `flint run` shows while it waits for a job, embedded or on a cluster.
//!
//! A job restarts quietly under its strategy (the default, exponential delay, restarts for
//! ever): without these lines a job whose input file is missing shows `RUNNING 0/5` and nothing
//! else until the user gives up. Each failure that started a failover (a root cause of the
//! job's exception history) is shown once, as it is learned of; the failures that arrived
//! while its region was already restarting are not (they are the same failover). The failure
//! that failed the job is left to the report, which says it anyway.

use std::time::Duration;

use crate::job::states::JobStatus;
use crate::messages::job_manager::{JobDetails, JobException};

/// What a watcher has shown of one job's exception history.
#[derive(Debug, Default)]
pub struct FailureFeed {
    /// The newest root cause already looked at.
    last: Option<Seen>,
}

/// An entry of the history, told apart from the others (one attempt fails once).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    timestamp_ms: u64,
    vertex: String,
    subtask: u32,
    attempt: u32,
}

impl Seen {
    fn of(exception: &JobException) -> Self {
        Self {
            timestamp_ms: exception.timestamp_ms,
            vertex: exception.vertex.clone(),
            subtask: exception.subtask,
            attempt: exception.attempt_number,
        }
    }
}

impl FailureFeed {
    /// Lines for the root causes in `details` not shown yet, oldest first; of a FAILED job,
    /// without its last (the report's failure).
    pub fn new_lines(&mut self, details: &JobDetails) -> Vec<String> {
        let roots: Vec<&JobException> =
            details.exceptions.iter().filter(|e| e.root_cause).collect();
        // The history drops concurrent failures first and root causes oldest first, so the
        // newest root cause shown stays until 16 newer ones came; if it dropped out, every
        // root cause there is new.
        let start = self
            .last
            .as_ref()
            .and_then(|last| roots.iter().rposition(|e| Seen::of(e) == *last))
            .map_or(0, |position| position + 1);
        if let Some(newest) = roots.last() {
            self.last = Some(Seen::of(newest));
        }
        let mut new = roots[start..].to_vec();
        if details.summary.status == JobStatus::Failed {
            new.pop();
        }
        new.into_iter()
            .map(|exception| failure_line(details, exception))
            .collect()
    }
}

/// `[  2.1s] source (2/2), attempt 1 on tm-3f2a, failed: cannot open ...`, stamped with the
/// time since the job's submission (the progress lines' clock), as the JobManager saw both.
fn failure_line(details: &JobDetails, exception: &JobException) -> String {
    let elapsed = Duration::from_millis(
        exception
            .timestamp_ms
            .saturating_sub(details.summary.submitted_at_ms),
    );
    let parallelism = details
        .vertices
        .iter()
        .find(|vertex| vertex.name == exception.vertex)
        .map(|vertex| vertex.summary().parallelism)
        .unwrap_or(0);
    let place = match &exception.resource_id {
        Some(resource) => format!(" on {resource}"),
        None => String::new(),
    };
    format!(
        "[{:>5.1}s] {} ({}/{parallelism}), attempt {}{place}, failed: {}",
        elapsed.as_secs_f64(),
        exception.vertex,
        exception.subtask + 1,
        exception.attempt_number,
        exception.reason
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::ids::{JobId, ResourceId};
    use crate::messages::job_manager::{JobSummary, VertexDetails, VertexSummary};

    fn job(status: JobStatus, exceptions: Vec<JobException>) -> JobDetails {
        JobDetails {
            summary: JobSummary {
                job_id: JobId::from_u128(7),
                name: "j".to_owned(),
                status,
                tasks_finished: 0,
                tasks_total: 3,
                submitted_at_ms: 1_000,
            },
            status_timestamps: Vec::new(),
            failure: None,
            restarts: 0,
            vertices: vec![VertexDetails {
                name: "source".to_owned(),
                operator: "text-source".to_owned(),
                chain: Vec::new(),
                subtasks: Vec::new(),
                io: Default::default(),
                summary: Some(VertexSummary {
                    parallelism: 3,
                    states: Vec::new(),
                    started_at_ms: None,
                    ended_at_ms: None,
                }),
            }],
            recovered_at_ms: None,
            exceptions,
            from_job_result_store: false,
            artifacts: Vec::new(),
        }
    }

    fn failure(at: u64, subtask: u32, attempt: u32, root_cause: bool) -> JobException {
        JobException {
            timestamp_ms: at,
            vertex: "source".to_owned(),
            subtask,
            attempt_number: attempt,
            resource_id: (subtask == 0).then(|| ResourceId::new("tm-1")),
            reason: format!("no file {at}"),
            root_cause,
        }
    }

    #[test]
    fn each_root_cause_is_shown_once_as_it_arrives() {
        let mut feed = FailureFeed::default();
        assert!(feed.new_lines(&job(JobStatus::Running, vec![])).is_empty());
        let mut history = vec![failure(2_500, 0, 0, true), failure(2_510, 1, 0, false)];
        assert_eq!(
            feed.new_lines(&job(JobStatus::Restarting, history.clone())),
            ["[  1.5s] source (1/3), attempt 0 on tm-1, failed: no file 2500"]
        );
        assert!(
            feed.new_lines(&job(JobStatus::Running, history.clone()))
                .is_empty()
        );
        history.push(failure(4_000, 2, 1, true));
        history.push(failure(5_200, 2, 2, true));
        assert_eq!(
            feed.new_lines(&job(JobStatus::Running, history.clone())),
            [
                "[  3.0s] source (3/3), attempt 1, failed: no file 4000",
                "[  4.2s] source (3/3), attempt 2, failed: no file 5200",
            ]
        );
        // A concurrent failure seen last and then dropped from the history (it goes before
        // any root cause) brings nothing back that was shown.
        history.push(failure(5_210, 0, 2, false));
        assert!(
            feed.new_lines(&job(JobStatus::Running, history.clone()))
                .is_empty()
        );
        history.retain(|e| e.root_cause);
        history.push(failure(6_000, 1, 3, true));
        assert_eq!(
            feed.new_lines(&job(JobStatus::Running, history.clone())),
            ["[  5.0s] source (2/3), attempt 3, failed: no file 6000"]
        );
        // The history dropped the entries seen: what is left is all new.
        let newer = vec![failure(9_000, 1, 4, true)];
        assert_eq!(feed.new_lines(&job(JobStatus::Running, newer)).len(), 1);
    }

    #[test]
    fn a_failed_job_leaves_its_last_failure_to_the_report() {
        let history = vec![failure(2_500, 0, 0, true), failure(3_000, 0, 1, true)];
        let mut feed = FailureFeed::default();
        assert_eq!(
            feed.new_lines(&job(JobStatus::Failed, history.clone())),
            ["[  1.5s] source (1/3), attempt 0 on tm-1, failed: no file 2500"]
        );
        // A canceled job's failures all made it restart.
        let mut feed = FailureFeed::default();
        assert_eq!(feed.new_lines(&job(JobStatus::Canceled, history)).len(), 2);
    }
}
