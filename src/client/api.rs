//! The REST API's answers as the client reads them: the server's own types
//! ([`crate::rest::views`]), so the two cannot drift apart, plus what only the client needs.
//!
//! [`JobView::to_status`] turns a job's answer into the JobManager's own
//! [`messages::job_manager::JobDetails`](crate::messages::job_manager::JobDetails), so a run
//! against a cluster reports through the same [`RunReport`](crate::process::run::RunReport) as an
//! embedded one.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::job::states::ExecutionState;
use crate::messages::job_manager as jm;
use crate::messages::job_manager::Locality;
pub use crate::rest::views::{
    ExceptionView, HardwareView, IoView, JobCancelled, JobList, JobResultsView, JobSubmitted,
    JobSummaryView, JobView, Message, Overview, PoolSize, PoolSizeSet, PoolView, SlotTaskView,
    SlotView, SubtaskView, TaskManagerList, TaskManagerView, VertexView,
};

impl VertexView {
    /// Subtasks FINISHED.
    pub fn finished(&self) -> u32 {
        self.tasks
            .get(&ExecutionState::Finished)
            .copied()
            .unwrap_or(0)
    }
}

impl JobView {
    /// The JobManager's status this answer was made from (timestamps back in time order).
    pub fn to_status(&self) -> jm::JobDetails {
        jm::JobDetails {
            summary: jm::JobSummary {
                job_id: self.id,
                name: self.name.clone(),
                status: self.state,
                tasks_finished: self.tasks_finished,
                tasks_total: self.tasks_total,
                submitted_at_ms: self.start_time,
            },
            status_timestamps: sorted_by_time(&self.timestamps),
            failure: self.failure.clone(),
            restarts: self.restarts,
            recovered_at_ms: self.recovered_at,
            from_job_result_store: self.from_job_result_store,
            artifacts: self.artifacts.clone(),
            exceptions: self
                .exceptions
                .iter()
                .map(|e| jm::JobException {
                    timestamp_ms: e.timestamp,
                    vertex: e.vertex.clone(),
                    subtask: e.subtask,
                    attempt_number: e.attempt,
                    resource_id: e.taskmanager_id.clone(),
                    reason: e.exception.clone(),
                    root_cause: e.root_cause,
                })
                .collect(),
            vertices: self
                .vertices
                .iter()
                .map(|v| jm::VertexDetails {
                    name: v.name.clone(),
                    operator: v.operator.clone(),
                    chain: v.chain.clone(),
                    io: v.metrics.snapshot(),
                    // Without subtasks (a result-store answer, or `?subtasks=false`), the counts
                    // and times are all there is.
                    summary: v.subtasks.is_empty().then(|| jm::VertexSummary {
                        parallelism: v.parallelism,
                        states: v
                            .tasks
                            .iter()
                            .filter(|(_, count)| **count > 0)
                            .map(|(state, count)| (*state, *count))
                            .collect(),
                        started_at_ms: v.start_time,
                        ended_at_ms: v.end_time,
                    }),
                    subtasks: v
                        .subtasks
                        .iter()
                        .map(|s| jm::SubtaskDetails {
                            subtask: s.subtask,
                            attempt_number: s.attempt,
                            state: s.state,
                            resource_id: s.taskmanager_id.clone(),
                            locality: s.locality.as_deref().and_then(locality),
                            timestamps: sorted_by_time(&s.timestamps),
                            error: s.failure.clone(),
                            io: s.metrics.as_ref().map(IoView::snapshot),
                            restored: s.restored,
                        })
                        .collect(),
                })
                .collect(),
        }
    }
}

fn sorted_by_time<S: Copy + Ord>(timestamps: &BTreeMap<S, u64>) -> Vec<(S, u64)> {
    let mut entries: Vec<(S, u64)> = timestamps.iter().map(|(s, at)| (*s, *at)).collect();
    entries.sort_by_key(|(s, at)| (*at, *s));
    entries
}

fn locality(name: &str) -> Option<Locality> {
    match name {
        "LOCAL" => Some(Locality::Local),
        "NON_LOCAL" => Some(Locality::NonLocal),
        "UNCONSTRAINED" => Some(Locality::Unconstrained),
        _ => None,
    }
}

/// Every error answer, `{"status": 404, "error": "Not Found", "message": "no job 3f2a..."}`,
/// read leniently (unlike the server's [`crate::rest::views::ErrorBody`]): a proxy in between
/// may answer with just a message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// The HTTP status.
    #[serde(default)]
    pub status: Option<u16>,
    /// The status's reason phrase.
    #[serde(default)]
    pub error: Option<String>,
    /// What went wrong, for people.
    pub message: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::ids::ResourceId;
    use crate::job::states::JobStatus;

    const JOB: &str = include_str!("testdata/job_finished.json");

    #[test]
    fn the_documented_answers_parse() {
        let overview: Overview =
            serde_json::from_str(include_str!("testdata/overview.json")).unwrap();
        assert_eq!(overview.pool.designated, 3);
        assert_eq!(overview.jobs[&JobStatus::Finished], 2);
        assert_eq!(overview.jobs.len(), JobStatus::ALL.len());

        let tms: TaskManagerList =
            serde_json::from_str(include_str!("testdata/taskmanagers.json")).unwrap();
        assert_eq!(tms.taskmanagers.len(), 2);
        let task = &tms.taskmanagers[0].slots[0].tasks[0];
        assert_eq!(task.vertex_name.as_deref(), Some("source"));
        assert_eq!(task.state, Some(ExecutionState::Running));

        let jobs: JobList = serde_json::from_str(include_str!("testdata/jobs.json")).unwrap();
        assert_eq!(jobs.jobs[0].state, JobStatus::Finished);
        assert_eq!(jobs.jobs[1].tasks_total, 1);

        let job: JobView = serde_json::from_str(JOB).unwrap();
        assert_eq!(job.state, JobStatus::Finished);
        assert_eq!(job.vertices[1].finished(), 2);
        assert_eq!(
            job.vertices[0].subtasks[0].locality.as_deref(),
            Some("LOCAL")
        );

        let running: JobView =
            serde_json::from_str(include_str!("testdata/job_running.json")).unwrap();
        assert_eq!(running.end_time, None);
        assert_eq!(running.vertices[0].subtasks[1].taskmanager_id, None);

        let error: ErrorBody =
            serde_json::from_str(r#"{"status": 404, "error": "Not Found", "message": "no job x"}"#)
                .unwrap();
        assert_eq!(error.message, "no job x");
        let pool: PoolSize =
            serde_json::from_str(r#"{"size": 5, "demand": 7, "target": 7, "max": 10}"#).unwrap();
        assert_eq!(
            pool,
            PoolSize {
                size: 5,
                demand: 7,
                target: 7,
                max: 10,
                workers: Default::default(),
            }
        );
    }

    #[test]
    fn an_answer_missing_a_documented_field_is_refused() {
        let err =
            serde_json::from_str::<JobSummaryView>(r#"{"id": "0", "name": "x"}"#).unwrap_err();
        assert!(err.to_string().contains("JobId"), "{err}");
        let mut value: serde_json::Value = serde_json::from_str(JOB).unwrap();
        value.as_object_mut().unwrap().remove("state");
        let err = serde_json::from_value::<JobView>(value).unwrap_err();
        assert!(err.to_string().contains("state"), "{err}");
    }

    /// The server builds its answer from the JobManager's status ([`crate::rest::views::job`]);
    /// the client's conversion back to that status must give the server's answer again.
    #[test]
    fn the_servers_view_of_the_converted_status_is_the_documented_answer() {
        for fixture in [JOB, include_str!("testdata/job_running.json")] {
            let documented: JobView = serde_json::from_str(fixture).unwrap();
            let served =
                serde_json::to_string(&crate::rest::views::job(&documented.to_status(), true))
                    .unwrap();
            let decoded: JobView = serde_json::from_str(&served).unwrap();
            assert_eq!(decoded, documented, "{served}");
        }
    }

    #[test]
    fn a_job_converts_to_the_job_managers_status_in_time_order() {
        let job: JobView = serde_json::from_str(JOB).unwrap();
        let status = job.to_status();
        assert_eq!(status.summary.job_id, job.id);
        assert_eq!(status.summary.status, JobStatus::Finished);
        assert_eq!(
            status.status_timestamps,
            vec![
                (JobStatus::Created, 1_700_000_000_000),
                (JobStatus::Running, 1_700_000_000_010),
                (JobStatus::Finished, 1_700_000_002_000),
            ]
        );
        let subtask = &status.vertices[0].subtasks[0];
        assert_eq!(subtask.locality, Some(Locality::Local));
        assert_eq!(subtask.resource_id, Some(ResourceId::new("tm-1")));
        assert_eq!(
            subtask.timestamps.first(),
            Some(&(ExecutionState::Created, 1_700_000_000_000))
        );
        assert_eq!(
            subtask.timestamps.last(),
            Some(&(ExecutionState::Finished, 1_700_000_001_500))
        );
    }
}
