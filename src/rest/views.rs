//! The JSON the REST API answers with (docs/rest.md), and how each is made from the actors'
//! answers.
//!
//! Pure functions of the status messages, so every shape is tested without a server. Field names
//! follow Flink's REST API where it has the field, kebab-case otherwise. Every type is also
//! `Deserialize`, so clients (the CLI, tests) decode exactly what the server encodes.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::base::ids::{AllocationId, InstanceId, JobId, ResourceId};
use crate::job::states::{ExecutionState, JobStatus};
use crate::messages::TaskIoSnapshot;
use crate::messages::job_manager::{
    AllocatedSlotInfo, JobDetails, JobManagerStatus, JobResults, JobSummary, SubtaskDetails,
    TaskManagerInfo, VertexDetails,
};
use crate::messages::resource_manager::ResourceManagerStatus;

/// Every error: `{"status": 404, "error": "Not Found", "message": "no job ..."}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// The HTTP status.
    pub status: u16,
    /// Its reason phrase.
    pub error: String,
    /// What went wrong, for people.
    pub message: String,
}

/// `GET /overview`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Overview {
    /// Flint's version (Flink's field name).
    pub flink_version: String,
    /// The resource manager's pool.
    pub pool: PoolView,
    /// Registered TaskManagers.
    pub taskmanagers: u32,
    /// Slots over all registered TaskManagers.
    pub slots_total: u64,
    /// Of those, not allocated.
    pub slots_available: u64,
    /// Jobs the JobManager keeps, by status (every status, zeros included).
    pub jobs: BTreeMap<JobStatus, u32>,
    /// Jobs not ended yet (any status but FINISHED, FAILED, CANCELED).
    pub jobs_running: u32,
    /// FINISHED jobs.
    pub jobs_finished: u32,
    /// CANCELED jobs.
    pub jobs_cancelled: u32,
    /// FAILED jobs.
    pub jobs_failed: u32,
}

/// The pool part of the overview.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct PoolView {
    /// The size the operator set.
    pub designated: u32,
    /// The TaskManagers the jobs declared they need.
    /// (0 from an older server.)
    #[serde(default)]
    pub demand: u32,
    /// The size the pool is kept at: `max(designated, demand)` within the maximum.
    /// (0 from an older server.)
    #[serde(default)]
    pub target: u32,
    /// `resourcemanager.max-pool-size`.
    pub max: u32,
    /// Workers registered at the JobManager.
    pub started: u32,
    /// Workers asked of the driver, not started yet.
    pub pending_requests: u32,
    /// Workers started, not registered yet.
    pub pending_registration: u32,
    /// Pending workers beyond the target, waiting for the JobManager to let them go.
    /// (0 from an older server.)
    #[serde(default)]
    pub releasing: u32,
    /// Worker start failures since the resource manager started.
    pub start_failures: u64,
}

/// `GET /taskmanagers`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskManagerList {
    /// Sorted by id.
    pub taskmanagers: Vec<TaskManagerView>,
}

/// One registered TaskManager (`GET /taskmanagers/{id}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct TaskManagerView {
    /// Its resource id.
    pub id: ResourceId,
    /// Its registration.
    pub instance_id: InstanceId,
    /// The transport address (`host:port`) it is reached at.
    pub address: String,
    /// The host it runs on (for locality).
    pub hostname: String,
    /// Slots it has.
    pub slots_number: u32,
    /// Slots not allocated.
    pub free_slots: u32,
    /// When it registered (ms since the epoch).
    pub registered_at: u64,
    /// Its last heartbeat (ms since the epoch).
    pub last_heartbeat: u64,
    /// Milliseconds since then, when asked.
    pub time_since_last_heartbeat: u64,
    /// Its machine.
    pub hardware: HardwareView,
    /// What it can run: its binary's build and its operator identities (a TaskManager of
    /// another build shows here).
    #[serde(default)]
    pub fingerprint: FingerprintView,
    /// The allocated slots, by allocation (the others are free).
    pub slots: Vec<SlotView>,
    /// Its spilled result partitions in bytes, as of its last heartbeat.
    #[serde(default)]
    pub spill: SpillView,
}

/// A TaskManager's spill files, in bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct SpillView {
    /// On disk now.
    pub bytes: u64,
    /// The most on disk at once since it started.
    pub peak_bytes: u64,
    /// Written since it started.
    pub written_bytes: u64,
}

/// What a TaskManager can run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct FingerprintView {
    /// The first 12 hex digits of the SHA-256 of its executable.
    pub build: String,
    /// Every operator identity it registered, sorted (built-ins, and `program:NAME@BUILD`).
    pub operators: Vec<String>,
}

impl FingerprintView {
    /// The names of the programs among its operators.
    pub fn programs(&self) -> Vec<&str> {
        self.operators
            .iter()
            .filter_map(|op| op.strip_prefix("program:")?.split('@').next())
            .collect()
    }
}

/// A TaskManager's machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct HardwareView {
    /// CPU cores visible to it.
    pub cpu_cores: u32,
    /// Physical memory in bytes (0 if unknown).
    pub physical_memory: u64,
}

/// An allocated slot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct SlotView {
    /// The allocation holding it.
    pub allocation_id: AllocationId,
    /// The subtasks sharing it.
    pub tasks: Vec<SlotTaskView>,
}

/// A subtask in a slot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct SlotTaskView {
    /// Its job.
    pub job_id: JobId,
    /// The vertex's index in the job graph.
    pub vertex: u32,
    /// The vertex's name (`null` if the job is no longer kept).
    pub vertex_name: Option<String>,
    /// The subtask index.
    pub subtask: u32,
    /// Its attempt number (`null` as `vertex-name`).
    pub attempt: Option<u32>,
    /// Its state (`null` as `vertex-name`).
    pub state: Option<ExecutionState>,
}

/// `GET /jobs`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobList {
    /// Oldest first.
    pub jobs: Vec<JobSummaryView>,
}

/// One line of the job list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct JobSummaryView {
    /// The job.
    pub id: JobId,
    /// Its name.
    pub name: String,
    /// Its status (`RUNNING`, ...).
    pub state: JobStatus,
    /// Subtasks finished.
    pub tasks_finished: u32,
    /// All subtasks.
    pub tasks_total: u32,
    /// Submission time (ms since the epoch).
    pub start_time: u64,
}

/// `GET /jobs/{id}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct JobView {
    /// The job.
    pub id: JobId,
    /// Its name.
    pub name: String,
    /// Its status.
    pub state: JobStatus,
    /// Submission time (ms since the epoch).
    pub start_time: u64,
    /// When it ended; `null` while it runs.
    pub end_time: Option<u64>,
    /// `end-time - start-time`; `null` while it runs.
    pub duration: Option<u64>,
    /// When each status was last entered.
    pub timestamps: BTreeMap<JobStatus, u64>,
    /// Why it failed, if it did.
    pub failure: Option<String>,
    /// Region restarts so far.
    pub restarts: u32,
    /// When a new JobManager leader recovered the job (high availability; ms since the epoch):
    /// it ran again from the start under the same id. `null` otherwise.
    #[serde(default)]
    pub recovered_at: Option<u64>,
    /// Its exception history: the last task failures, oldest first.
    #[serde(default)]
    pub exceptions: Vec<ExceptionView>,
    /// Answered from the job result store (high availability: the job ended under an earlier
    /// leader, or its details expired here): each vertex has its counts and times but no
    /// `subtasks` list.
    #[serde(default)]
    pub from_job_result_store: bool,
    /// The files it shipped with it: `name`, `digest` (SHA-256), `size`, `executable`.
    #[serde(default)]
    pub artifacts: Vec<crate::job::artifact::JobArtifact>,
    /// Subtasks finished.
    pub tasks_finished: u32,
    /// All subtasks.
    pub tasks_total: u32,
    /// In job graph order.
    pub vertices: Vec<VertexView>,
}

/// `GET /jobs/{id}/results`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct JobResultsView {
    /// The job.
    pub id: JobId,
    /// Its status when asked.
    pub state: Option<JobStatus>,
    /// Per vertex whose tasks sent anything back: one entry per subtask, the base64 of its
    /// encoded records (`null`: nothing sent, or not finished).
    pub vertices: BTreeMap<String, Vec<Option<String>>>,
}

/// The view of a job's results.
pub fn job_results(id: JobId, results: &JobResults) -> JobResultsView {
    use base64::Engine as _;
    JobResultsView {
        id,
        state: results.status,
        vertices: results
            .vertices
            .iter()
            .map(|(vertex, parts)| {
                let parts = parts
                    .iter()
                    .map(|part| {
                        part.as_ref()
                            .map(|bytes| base64::engine::general_purpose::STANDARD.encode(bytes))
                    })
                    .collect();
                (vertex.clone(), parts)
            })
            .collect(),
    }
}

impl JobResultsView {
    /// Back to the JobManager's form (the client's side).
    pub fn into_results(self) -> Result<JobResults, base64::DecodeError> {
        use base64::Engine as _;
        let mut vertices = BTreeMap::new();
        for (vertex, parts) in self.vertices {
            let parts = parts
                .into_iter()
                .map(|part| {
                    part.map(|text| {
                        base64::engine::general_purpose::STANDARD
                            .decode(text)
                            .map(bytes::Bytes::from)
                    })
                    .transpose()
                })
                .collect::<Result<Vec<_>, _>>()?;
            vertices.insert(vertex, parts);
        }
        Ok(JobResults {
            status: self.state,
            vertices,
        })
    }
}

/// One task failure of a job's exception history (Flink's `JobExceptionsInfoWithHistory`
/// entry, in Flint's kebab-case).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct ExceptionView {
    /// When the JobManager learned of it (ms since the epoch).
    pub timestamp: u64,
    /// The failed task's vertex.
    pub vertex: String,
    /// The subtask index.
    pub subtask: u32,
    /// The attempt that failed.
    pub attempt: u32,
    /// Where it ran; `null` if it was not placed.
    pub taskmanager_id: Option<ResourceId>,
    /// Why it failed.
    pub exception: String,
    /// It started a failover (`true`), or arrived while its region was already restarting.
    pub root_cause: bool,
}

/// One vertex of a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct VertexView {
    /// Its name.
    pub name: String,
    /// Its operator.
    pub operator: String,
    /// The operators chained in it, in order (a program's task runs a chain; empty for a
    /// single operator).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub chain: Vec<String>,
    /// Its subtasks.
    pub parallelism: u32,
    /// Subtasks by state (every state, zeros included).
    pub tasks: BTreeMap<ExecutionState, u32>,
    /// When its first subtask was deployed (ms since the epoch); `null` before.
    #[serde(default)]
    pub start_time: Option<u64>,
    /// When its last subtask finished; `null` unless every subtask did.
    #[serde(default)]
    pub end_time: Option<u64>,
    /// `end-time - start-time`; `null` without both.
    #[serde(default)]
    pub duration: Option<u64>,
    /// Each subtask's current attempt.
    pub subtasks: Vec<SubtaskView>,
    /// Over its subtasks: counts summed, backpressure the worst (0 from an older server).
    #[serde(default)]
    pub metrics: IoView,
}

/// What a task's (or a vertex's) exchange did: Flink's `numRecordsIn`/`Out`, `numBytesIn`/`Out`,
/// buffers in use and `backPressuredTimeMsPerSecond`, with Flink's backpressure level.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct IoView {
    /// Records read from its inputs.
    pub records_in: u64,
    /// Their estimated bytes.
    pub bytes_in: u64,
    /// Records written (once per output).
    pub records_out: u64,
    /// Their estimated bytes.
    pub bytes_out: u64,
    /// Input buffers received and not yet consumed.
    pub buffers_in_use: u64,
    /// Milliseconds waited for room in a full output, in all.
    pub backpressured_ms: u64,
    /// Of the last heartbeat interval, milliseconds per second backpressured (0 to 1000).
    #[serde(rename = "backPressuredTimeMsPerSecond")]
    pub back_pressured_time_ms_per_second: u64,
    /// `ok`, `low` (over 10 % of the time) or `high` (over 50 %), as Flink's web UI says.
    pub backpressure_level: String,
}

impl Default for IoView {
    /// Nothing reported: all zeros, level `ok`.
    fn default() -> Self {
        Self::of(&TaskIoSnapshot::default())
    }
}

impl IoView {
    /// The view of a snapshot.
    pub fn of(io: &TaskIoSnapshot) -> Self {
        let level = match io.back_pressured_time_ms_per_second {
            0..=100 => "ok",
            101..=500 => "low",
            _ => "high",
        };
        Self {
            records_in: io.records_in,
            bytes_in: io.bytes_in,
            records_out: io.records_out,
            bytes_out: io.bytes_out,
            buffers_in_use: io.buffers_in_use,
            backpressured_ms: io.backpressured_ms,
            back_pressured_time_ms_per_second: io.back_pressured_time_ms_per_second,
            backpressure_level: level.to_owned(),
        }
    }

    /// The snapshot this view shows.
    pub fn snapshot(&self) -> TaskIoSnapshot {
        TaskIoSnapshot {
            records_in: self.records_in,
            bytes_in: self.bytes_in,
            records_out: self.records_out,
            bytes_out: self.bytes_out,
            buffers_in_use: self.buffers_in_use,
            backpressured_ms: self.backpressured_ms,
            back_pressured_time_ms_per_second: self.back_pressured_time_ms_per_second,
        }
    }
}

/// One subtask's current attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct SubtaskView {
    /// The subtask index.
    pub subtask: u32,
    /// The attempt number (0 first).
    pub attempt: u32,
    /// Its state.
    pub state: ExecutionState,
    /// Where it runs or ran; `null` if not placed yet.
    pub taskmanager_id: Option<ResourceId>,
    /// `LOCAL`, `NON_LOCAL`, `UNCONSTRAINED`, or `null` if not placed yet.
    pub locality: Option<String>,
    /// When each state was last entered.
    pub timestamps: BTreeMap<ExecutionState, u64>,
    /// Why it failed, if it did.
    pub failure: Option<String>,
    /// What its exchange did; `null` until its TaskManager reported it.
    #[serde(default)]
    pub metrics: Option<IoView>,
    /// `true`: a new leader took this finished attempt back after a failover (batch job
    /// recovery); it did not run again.
    #[serde(default)]
    pub restored: bool,
}

/// `POST /jobs` accepted a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobSubmitted {
    /// Its id.
    pub id: JobId,
}

/// `DELETE /jobs/{id}` cancelled a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobCancelled {
    /// The job.
    pub id: JobId,
    /// Its status right after the cancel (`CANCELLING`, or `CANCELED` if nothing ran).
    pub state: JobStatus,
}

/// `GET /cluster/pool-size`: the operator's size, the jobs' demand and the size the pool is
/// kept at, separately (a resize sets `size`; demand never changes it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolSize {
    /// The designated pool size (what `PUT /cluster/pool-size` set).
    pub size: u32,
    /// The TaskManagers the jobs declared they need.
    /// (0 from an older server.)
    #[serde(default)]
    pub demand: u32,
    /// The size the pool is kept at: `max(size, demand)` within `max`.
    /// (0 from an older server.)
    #[serde(default)]
    pub target: u32,
    /// `resourcemanager.max-pool-size`.
    pub max: u32,
    /// What the driver knows of each of its workers, by resource id (`slurm job 42: RUNNING
    /// (None)`); empty for drivers that say nothing more than the pool.
    /// (Empty from an older server.)
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub workers: BTreeMap<ResourceId, String>,
}

/// `PUT /cluster/pool-size`'s answer: the size now designated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolSizeSet {
    /// The designated pool size.
    pub size: u32,
}

/// A plain answer (`DELETE /cluster`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// What happens now.
    pub message: String,
}

/// Jobs by status, every status present.
pub fn jobs_by_status(jobs: &[JobSummary]) -> BTreeMap<JobStatus, u32> {
    let mut counts: BTreeMap<JobStatus, u32> = JobStatus::ALL.iter().map(|&s| (s, 0)).collect();
    for job in jobs {
        *counts.entry(job.status).or_default() += 1;
    }
    counts
}

/// The overview from the resource manager's and the JobManager's answers.
pub fn overview(
    rm: &ResourceManagerStatus,
    jm: &JobManagerStatus,
    jobs: &[JobSummary],
    max_pool_size: u32,
) -> Overview {
    let by_status = jobs_by_status(jobs);
    let count = |status: JobStatus| by_status.get(&status).copied().unwrap_or(0);
    Overview {
        flink_version: env!("CARGO_PKG_VERSION").to_owned(),
        pool: PoolView {
            designated: rm.designated_pool_size,
            demand: rm.demand,
            target: rm.target_pool_size,
            max: max_pool_size,
            started: rm.started.len() as u32,
            pending_requests: rm.pending_requests,
            pending_registration: rm.pending_registration,
            releasing: rm.releasing,
            start_failures: rm.start_failures,
        },
        taskmanagers: jm.task_managers.len() as u32,
        slots_total: jm.total_slots(),
        slots_available: jm.free_slots(),
        jobs_running: jobs
            .iter()
            .filter(|job| !job.status.is_globally_terminal())
            .count() as u32,
        jobs_finished: count(JobStatus::Finished),
        jobs_cancelled: count(JobStatus::Canceled),
        jobs_failed: count(JobStatus::Failed),
        jobs: by_status,
    }
}

/// One TaskManager, with the time since its last heartbeat as of `now_ms`.
pub fn task_manager(info: &TaskManagerInfo, now_ms: u64) -> TaskManagerView {
    TaskManagerView {
        id: info.resource_id.clone(),
        instance_id: info.instance_id,
        address: info.location.address.node.clone(),
        hostname: info.location.hostname.clone(),
        slots_number: info.slots_total,
        free_slots: info.slots_free,
        registered_at: info.registered_at_ms,
        last_heartbeat: info.last_heartbeat_ms,
        time_since_last_heartbeat: now_ms.saturating_sub(info.last_heartbeat_ms),
        hardware: HardwareView {
            cpu_cores: info.hardware.cpu_cores,
            physical_memory: info.hardware.physical_memory_bytes,
        },
        fingerprint: FingerprintView {
            build: info.fingerprint.build.clone(),
            operators: info.fingerprint.operators.clone(),
        },
        slots: info.allocated_slots.iter().map(slot).collect(),
        spill: SpillView {
            bytes: info.spill.live,
            peak_bytes: info.spill.peak,
            written_bytes: info.spill.total,
        },
    }
}

/// Every registered TaskManager, sorted by id.
pub fn task_managers(jm: &JobManagerStatus, now_ms: u64) -> TaskManagerList {
    let mut taskmanagers: Vec<TaskManagerView> = jm
        .task_managers
        .iter()
        .map(|info| task_manager(info, now_ms))
        .collect();
    taskmanagers.sort_by(|a, b| a.id.cmp(&b.id));
    TaskManagerList { taskmanagers }
}

fn slot(slot: &AllocatedSlotInfo) -> SlotView {
    SlotView {
        allocation_id: slot.allocation_id,
        tasks: slot
            .tasks
            .iter()
            .map(|task| SlotTaskView {
                job_id: task.job_id,
                vertex: task.vertex,
                vertex_name: task.attempt.as_ref().map(|a| a.vertex_name.clone()),
                subtask: task.subtask,
                attempt: task.attempt.as_ref().map(|a| a.attempt_number),
                state: task.attempt.as_ref().map(|a| a.state),
            })
            .collect(),
    }
}

/// One line of the job list.
pub fn job_summary(job: &JobSummary) -> JobSummaryView {
    JobSummaryView {
        id: job.job_id,
        name: job.name.clone(),
        state: job.status,
        tasks_finished: job.tasks_finished,
        tasks_total: job.tasks_total,
        start_time: job.submitted_at_ms,
    }
}

/// The job list, oldest first.
pub fn job_list(jobs: &[JobSummary]) -> JobList {
    let mut jobs: Vec<JobSummaryView> = jobs.iter().map(job_summary).collect();
    jobs.sort_by_key(|job| job.start_time);
    JobList { jobs }
}

/// Everything about one job; without each vertex's subtasks unless `subtasks`.
pub fn job(details: &JobDetails, subtasks: bool) -> JobView {
    let summary = &details.summary;
    let end_time = summary
        .status
        .is_globally_terminal()
        .then(|| {
            details
                .status_timestamps
                .iter()
                .rev()
                .find(|(status, _)| *status == summary.status)
                .map(|&(_, at)| at)
        })
        .flatten();
    JobView {
        id: summary.job_id,
        name: summary.name.clone(),
        state: summary.status,
        start_time: summary.submitted_at_ms,
        end_time,
        duration: end_time.map(|end| end.saturating_sub(summary.submitted_at_ms)),
        timestamps: details.status_timestamps.iter().copied().collect(),
        failure: details.failure.clone(),
        restarts: details.restarts,
        recovered_at: details.recovered_at_ms,
        from_job_result_store: details.from_job_result_store,
        artifacts: details.artifacts.clone(),
        exceptions: details
            .exceptions
            .iter()
            .map(|e| ExceptionView {
                timestamp: e.timestamp_ms,
                vertex: e.vertex.clone(),
                subtask: e.subtask,
                attempt: e.attempt_number,
                taskmanager_id: e.resource_id.clone(),
                exception: e.reason.clone(),
                root_cause: e.root_cause,
            })
            .collect(),
        tasks_finished: summary.tasks_finished,
        tasks_total: summary.tasks_total,
        vertices: details
            .vertices
            .iter()
            .map(|v| vertex(v, subtasks))
            .collect(),
    }
}

fn vertex(vertex: &VertexDetails, subtasks: bool) -> VertexView {
    let summary = vertex.summary();
    let mut tasks: BTreeMap<ExecutionState, u32> = ExecutionState::ALL
        .iter()
        .map(|&state| (state, 0))
        .collect();
    for (state, count) in &summary.states {
        *tasks.entry(*state).or_default() += count;
    }
    VertexView {
        name: vertex.name.clone(),
        operator: vertex.operator.clone(),
        chain: vertex.chain.clone(),
        parallelism: summary.parallelism,
        tasks,
        start_time: summary.started_at_ms,
        end_time: summary.ended_at_ms,
        duration: summary
            .started_at_ms
            .zip(summary.ended_at_ms)
            .map(|(start, end)| end.saturating_sub(start)),
        subtasks: if subtasks {
            vertex.subtasks.iter().map(subtask).collect()
        } else {
            Vec::new()
        },
        metrics: IoView::of(&vertex.io),
    }
}

fn subtask(subtask: &SubtaskDetails) -> SubtaskView {
    SubtaskView {
        subtask: subtask.subtask,
        attempt: subtask.attempt_number,
        state: subtask.state,
        taskmanager_id: subtask.resource_id.clone(),
        locality: subtask.locality.map(|l| l.to_string()),
        timestamps: subtask.timestamps.iter().copied().collect(),
        failure: subtask.error.clone(),
        metrics: subtask.io.as_ref().map(IoView::of),
        restored: subtask.restored,
    }
}

#[cfg(test)]
mod tests;
