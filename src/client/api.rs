//! The REST API's answers as types, exactly as `docs/rest.md` writes them (kebab-case fields,
//! states in capitals, times in milliseconds since the epoch).
//!
//! This module owns the client's reading of the contract and nothing else: no HTTP, no output.
//! Fields the client does not show are still declared when the contract has them, so a test
//! against the real server notices a drifting contract; unknown fields are ignored, so a newer
//! server with more fields still works with an older client.
//!
//! [`JobDetails::to_status`] turns a job's answer into the JobManager's own
//! [`messages::job_manager::JobDetails`](crate::messages::job_manager::JobDetails), so a run
//! against a cluster reports through the same [`RunReport`](crate::run::RunReport) as an
//! embedded one.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::actors::scheduler::Locality;
use crate::job::states::{ExecutionState, JobStatus};
use crate::messages::ids::{JobId, ResourceId};
use crate::messages::job_manager as jm;

/// `GET /overview`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Overview {
    /// The server's version.
    pub flink_version: String,
    /// The worker pool.
    pub pool: PoolOverview,
    /// Registered TaskManagers.
    pub taskmanagers: u32,
    /// Slots of all registered TaskManagers.
    pub slots_total: u64,
    /// Of those, the free ones.
    pub slots_available: u64,
    /// Jobs per status (every status, zeros included).
    pub jobs: BTreeMap<JobStatus, u32>,
    /// Jobs not ended yet.
    pub jobs_running: u32,
    /// FINISHED jobs.
    pub jobs_finished: u32,
    /// CANCELED jobs.
    pub jobs_cancelled: u32,
    /// FAILED jobs.
    pub jobs_failed: u32,
}

/// The `pool` of [`Overview`]: the resource manager's counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct PoolOverview {
    /// The designated pool size.
    pub designated: u32,
    /// `resourcemanager.max-pool-size`.
    pub max: u32,
    /// Workers started and registered.
    pub started: u32,
    /// Workers asked of the driver, not started yet.
    pub pending_requests: u32,
    /// Workers started, not registered yet.
    pub pending_registration: u32,
    /// Worker starts that failed so far.
    pub start_failures: u64,
}

/// `GET /taskmanagers`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskManagerList {
    /// Sorted by id.
    pub taskmanagers: Vec<TaskManagerInfo>,
}

/// One TaskManager (`GET /taskmanagers/{id}`, or an element of the list).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct TaskManagerInfo {
    /// Its resource id.
    pub id: ResourceId,
    /// Its current registration.
    pub instance_id: String,
    /// Where it is reached.
    pub address: String,
    /// Slots it offers.
    pub slots_number: u32,
    /// Of those, the free ones.
    pub free_slots: u32,
    /// When it registered.
    pub registered_at: u64,
    /// Milliseconds since its last heartbeat.
    pub time_since_last_heartbeat: u64,
    /// When its last heartbeat arrived.
    pub last_heartbeat: u64,
    /// What it runs on.
    pub hardware: Hardware,
    /// Its allocated slots.
    #[serde(default)]
    pub slots: Vec<AllocatedSlot>,
}

/// A TaskManager's machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Hardware {
    /// CPU cores.
    pub cpu_cores: u32,
    /// Memory in bytes (0 if unknown).
    pub physical_memory: u64,
    /// Free memory in bytes: in `docs/rest.md`, not sent by the server yet.
    #[serde(default)]
    pub free_memory: Option<u64>,
}

/// An allocated slot and the tasks sharing it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct AllocatedSlot {
    /// The allocation.
    pub allocation_id: String,
    /// The tasks in it.
    pub tasks: Vec<SlotTask>,
}

/// A task in a slot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct SlotTask {
    /// Its job.
    pub job_id: JobId,
    /// Its vertex's index in the job graph.
    pub vertex: u32,
    /// Its vertex's name (`None` if the JobManager no longer keeps the job).
    pub vertex_name: Option<String>,
    /// Its subtask index.
    pub subtask: u32,
    /// Its attempt number (`None` as `vertex_name`).
    pub attempt: Option<u32>,
    /// Its state (`None` as `vertex_name`).
    pub state: Option<ExecutionState>,
}

/// `GET /jobs`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobList {
    /// Oldest first.
    pub jobs: Vec<JobOverview>,
}

/// One job of [`JobList`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct JobOverview {
    /// The job.
    pub id: JobId,
    /// Its name.
    pub name: String,
    /// Its status.
    pub state: JobStatus,
    /// Tasks finished.
    pub tasks_finished: u32,
    /// All tasks.
    pub tasks_total: u32,
    /// When it was submitted.
    pub start_time: u64,
}

/// `GET /jobs/{id}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct JobDetails {
    /// The job.
    pub id: JobId,
    /// Its name.
    pub name: String,
    /// Its status.
    pub state: JobStatus,
    /// When it was submitted.
    pub start_time: u64,
    /// When it ended; `None` while it runs.
    pub end_time: Option<u64>,
    /// `end_time - start_time`; `None` while it runs.
    pub duration: Option<u64>,
    /// When each status was entered.
    pub timestamps: BTreeMap<JobStatus, u64>,
    /// Why it failed, if it did.
    pub failure: Option<String>,
    /// Restarts so far.
    pub restarts: u32,
    /// Tasks finished.
    pub tasks_finished: u32,
    /// All tasks.
    pub tasks_total: u32,
    /// Per vertex, in job graph order.
    pub vertices: Vec<VertexInfo>,
}

/// One vertex of [`JobDetails`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct VertexInfo {
    /// Its name.
    pub name: String,
    /// Its operator.
    pub operator: String,
    /// Its subtasks.
    pub parallelism: u32,
    /// Subtasks per state (every state, zeros included).
    pub tasks: BTreeMap<ExecutionState, u32>,
    /// Its subtasks' current attempts.
    pub subtasks: Vec<SubtaskInfo>,
}

impl VertexInfo {
    /// Its FINISHED subtasks.
    pub fn finished(&self) -> u32 {
        self.tasks
            .get(&ExecutionState::Finished)
            .copied()
            .unwrap_or(0)
    }
}

/// One subtask of [`VertexInfo`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct SubtaskInfo {
    /// Its index.
    pub subtask: u32,
    /// Its current attempt's number (0 first).
    pub attempt: u32,
    /// Its state.
    pub state: ExecutionState,
    /// Where it runs or ran.
    pub taskmanager_id: Option<ResourceId>,
    /// `LOCAL`, `NON_LOCAL`, `UNCONSTRAINED`, or `None` while not placed.
    pub locality: Option<String>,
    /// When each state was entered.
    pub timestamps: BTreeMap<ExecutionState, u64>,
    /// Why it failed, if it did.
    pub failure: Option<String>,
}

impl JobDetails {
    /// The same job as the JobManager's own status type, for [`crate::run::RunReport`].
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
            vertices: self
                .vertices
                .iter()
                .map(|v| jm::VertexDetails {
                    name: v.name.clone(),
                    operator: v.operator.clone(),
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
                        })
                        .collect(),
                })
                .collect(),
        }
    }
}

/// A state → time map as the JobManager keeps it: in the order the states were entered.
fn sorted_by_time<S: Copy + Ord>(timestamps: &BTreeMap<S, u64>) -> Vec<(S, u64)> {
    let mut entries: Vec<(S, u64)> = timestamps.iter().map(|(s, at)| (*s, *at)).collect();
    entries.sort_by_key(|(s, at)| (*at, *s));
    entries
}

/// The REST name of a locality back to the scheduler's type.
fn locality(name: &str) -> Option<Locality> {
    match name {
        "LOCAL" => Some(Locality::Local),
        "NON_LOCAL" => Some(Locality::NonLocal),
        "UNCONSTRAINED" => Some(Locality::Unconstrained),
        _ => None,
    }
}

/// `POST /jobs`'s answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Submitted {
    /// The new job.
    pub id: JobId,
}

/// `DELETE /jobs/{id}`'s answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cancelled {
    /// The job.
    pub id: JobId,
    /// Its state once cancelling was asked for.
    pub state: JobStatus,
}

/// `GET /cluster/pool-size`'s answer (`PUT` answers the size alone).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolSize {
    /// The designated pool size.
    pub size: u32,
    /// `resourcemanager.max-pool-size`.
    #[serde(default)]
    pub max: Option<u32>,
}

/// `PUT /cluster/pool-size`'s body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetPoolSize {
    /// The designated pool size asked for.
    pub size: u32,
}

/// `DELETE /cluster`'s answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stopping {
    /// `stopping`.
    pub message: String,
}

/// Every error answer: `{"status": 404, "error": "Not Found", "message": "no job 3f2a..."}`.
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

        let job: JobDetails = serde_json::from_str(JOB).unwrap();
        assert_eq!(job.state, JobStatus::Finished);
        assert_eq!(job.vertices[1].finished(), 2);
        assert_eq!(
            job.vertices[0].subtasks[0].locality.as_deref(),
            Some("LOCAL")
        );

        let running: JobDetails =
            serde_json::from_str(include_str!("testdata/job_running.json")).unwrap();
        assert_eq!(running.end_time, None);
        assert_eq!(running.vertices[0].subtasks[1].taskmanager_id, None);

        let error: ErrorBody =
            serde_json::from_str(r#"{"status": 404, "error": "Not Found", "message": "no job x"}"#)
                .unwrap();
        assert_eq!(error.message, "no job x");
        let pool: PoolSize = serde_json::from_str(r#"{"size": 5}"#).unwrap();
        assert_eq!(pool, PoolSize { size: 5, max: None });
    }

    #[test]
    fn an_answer_missing_a_documented_field_is_refused() {
        let err = serde_json::from_str::<JobOverview>(r#"{"id": "0", "name": "x"}"#).unwrap_err();
        assert!(err.to_string().contains("JobId"), "{err}");
        let mut value: serde_json::Value = serde_json::from_str(JOB).unwrap();
        value.as_object_mut().unwrap().remove("state");
        let err = serde_json::from_value::<JobDetails>(value).unwrap_err();
        assert!(err.to_string().contains("state"), "{err}");
    }

    /// The server builds its answer from the JobManager's status ([`crate::rest::views::job`]);
    /// the client's conversion back to that status must give the server's answer again.
    #[test]
    fn the_servers_view_of_the_converted_status_is_the_documented_answer() {
        for fixture in [JOB, include_str!("testdata/job_running.json")] {
            let documented: JobDetails = serde_json::from_str(fixture).unwrap();
            let served =
                serde_json::to_string(&crate::rest::views::job(&documented.to_status())).unwrap();
            let decoded: JobDetails = serde_json::from_str(&served).unwrap();
            assert_eq!(decoded, documented, "{served}");
        }
    }

    #[test]
    fn a_job_converts_to_the_job_managers_status_in_time_order() {
        let job: JobDetails = serde_json::from_str(JOB).unwrap();
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
