//! One function per endpoint. Each asks the actors when called (never a cached view), turns
//! the answers into the JSON of [`views`](super::views) and every refusal into an
//! [`ApiError`]. An actor that does not answer within the ask timeout, or is gone, is a 503.

use actix::{Message, Recipient};
use actix_web::http::StatusCode;
use actix_web::{HttpResponse, web};

use super::RestState;
use super::auth::Authorized;
use super::error::ApiError;
use super::prometheus::{CONTENT_TYPE, MetricsSnapshot, VertexIo};
use super::views;
use crate::base::ids::{JobId, ResourceId};
use crate::job::graph::JobGraph;
use crate::messages::job_manager::{
    CancelJob, GetJobManagerStatus, JobManagerStatus, JobSummary, ListJobs, RequestJobResults,
    RequestJobStatus, SubmitJob,
};
use crate::messages::resource_manager::{
    GetResourceManagerStatus, ResourceManagerStatus, SetWorkerPoolSize,
};

/// Which actor an ask goes to, for the 503 message.
const JOB_MANAGER: &str = "JobManager";
const RESOURCE_MANAGER: &str = "resource manager";

type Answer = Result<HttpResponse, ApiError>;

/// Asks `recipient` and waits at most the state's ask timeout.
async fn ask<M>(
    state: &RestState,
    recipient: &Recipient<M>,
    actor: &'static str,
    message: M,
) -> Result<M::Result, ApiError>
where
    M: Message + Send + 'static,
    M::Result: Send,
{
    recipient
        .send(message)
        .timeout(state.ask_timeout)
        .await
        .map_err(|source| ApiError::Unavailable { actor, source })
}

async fn job_manager_status(state: &RestState) -> Result<JobManagerStatus, ApiError> {
    ask(
        state,
        &state.gateways()?.job_manager.get_status,
        JOB_MANAGER,
        GetJobManagerStatus,
    )
    .await
}

async fn resource_manager_status(state: &RestState) -> Result<ResourceManagerStatus, ApiError> {
    ask(
        state,
        &state.gateways()?.resource_manager.get_status,
        RESOURCE_MANAGER,
        GetResourceManagerStatus,
    )
    .await
}

async fn list_jobs(state: &RestState) -> Result<Vec<JobSummary>, ApiError> {
    ask(
        state,
        &state.gateways()?.job_manager.list_jobs,
        JOB_MANAGER,
        ListJobs,
    )
    .await
}

fn ok<T: serde::Serialize>(body: &T) -> Answer {
    Ok(HttpResponse::Ok().json(body))
}

/// `GET /overview`.
pub async fn overview(state: web::Data<RestState>) -> Answer {
    let rm = resource_manager_status(&state).await?;
    let jm = job_manager_status(&state).await?;
    let jobs = list_jobs(&state).await?;
    ok(&views::overview(&rm, &jm, &jobs, state.max_pool_size))
}

/// `GET /taskmanagers`.
pub async fn task_managers(state: web::Data<RestState>) -> Answer {
    let jm = job_manager_status(&state).await?;
    ok(&views::task_managers(&jm, state.clock.now_millis()))
}

/// `GET /taskmanagers/{id}`.
pub async fn task_manager(state: web::Data<RestState>, id: web::Path<String>) -> Answer {
    let id = ResourceId::new(id.into_inner());
    let jm = job_manager_status(&state).await?;
    let info = jm
        .task_managers
        .iter()
        .find(|tm| tm.resource_id == id)
        .ok_or(ApiError::UnknownTaskManager(id))?;
    ok(&views::task_manager(info, state.clock.now_millis()))
}

/// `GET /jobs`.
pub async fn jobs(state: web::Data<RestState>) -> Answer {
    let jobs = list_jobs(&state).await?;
    ok(&views::job_list(&jobs))
}

/// The options of `GET /jobs/{id}`.
#[derive(Debug, serde::Deserialize)]
pub struct JobQuery {
    /// `false`: each vertex's counts without its `subtasks` list (a progress poll of a job of
    /// 10,000 subtasks then costs a few hundred bytes, not megabytes).
    #[serde(default = "yes")]
    subtasks: bool,
    /// Milliseconds to hold the answer while the job has not ended (at most [`MAX_WAIT`]): a
    /// long poll, answered as soon as the job ends. 0 (the default): at once.
    #[serde(default)]
    wait: u64,
}

/// The longest `GET /jobs/{id}?wait=MS` holds its answer.
pub const MAX_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Waits until `receiver` reports the end of `job_id`, the events lag or stop, or `wait`
/// passes. The answer is always asked of the JobManager afterwards: the event only wakes.
async fn until_job_ends(
    mut receiver: tokio::sync::broadcast::Receiver<crate::env::events::ClusterEvent>,
    job_id: JobId,
    wait: std::time::Duration,
) {
    use crate::env::events::ClusterEvent;
    let ended = async {
        loop {
            match receiver.recv().await {
                Ok(ClusterEvent::JobTerminated { job_id: ended, .. }) if ended == job_id => return,
                Ok(_) => {}
                // Events were missed (the end among them, perhaps), or there will be none:
                // look now.
                Err(_) => return,
            }
        }
    };
    let _ = tokio::time::timeout(wait.min(MAX_WAIT), ended).await;
}

fn yes() -> bool {
    true
}

/// `GET /jobs/{id}[?subtasks=false][&wait=MS]`.
pub async fn job(
    state: web::Data<RestState>,
    id: web::Path<String>,
    query: web::Query<JobQuery>,
) -> Answer {
    let job_id: JobId = id.parse()?;
    // Subscribed before the first look, so an end between the look and the wait wakes it.
    let events = (query.wait > 0).then(|| state.subscribe_events()).flatten();
    let status = || async {
        ask(
            &state,
            &state.gateways()?.job_manager.request_job_status,
            JOB_MANAGER,
            RequestJobStatus { job_id },
        )
        .await?
        .map_err(ApiError::from)
    };
    let mut details = status().await?;
    if let Some(events) = events
        && !details.summary.status.is_globally_terminal()
    {
        until_job_ends(events, job_id, std::time::Duration::from_millis(query.wait)).await;
        details = status().await?;
    }
    ok(&views::job(&details, query.subtasks))
}

/// `GET /jobs/{id}/results`: what the job's `collect()` sinks gathered (base64 of their
/// encoded records, per vertex and subtask). Like every read, it needs the token where reads
/// do.
pub async fn job_results(state: web::Data<RestState>, id: web::Path<String>) -> Answer {
    let job_id: JobId = id.parse()?;
    let results = ask(
        &state,
        &state.gateways()?.job_manager.request_job_results,
        JOB_MANAGER,
        RequestJobResults { job_id },
    )
    .await??;
    ok(&views::job_results(job_id, &results))
}

/// `POST /jobs`: a job graph as JSON.
pub async fn submit_job(
    _: Authorized,
    state: web::Data<RestState>,
    graph: web::Json<JobGraph>,
) -> Answer {
    let job_graph = graph.into_inner();
    super::artifacts::check_stored(&state, &job_graph).await?;
    let name = job_graph.name.clone();
    // Answered once the JobManager stored the graph (high availability) and started the job.
    let id = ask(
        &state,
        &state.gateways()?.job_manager.submit_job,
        JOB_MANAGER,
        // Analysed on this (REST) thread, not in the JobManager's mailbox.
        SubmitJob::prepared(job_graph),
    )
    .await??;
    log::info!("REST: submitted job {id} ({name})");
    Ok(HttpResponse::Accepted().json(views::JobSubmitted { id }))
}

/// `DELETE /jobs/{id}`: cancels the job.
pub async fn cancel_job(
    _: Authorized,
    state: web::Data<RestState>,
    id: web::Path<String>,
) -> Answer {
    let job_id: JobId = id.parse()?;
    let status = ask(
        &state,
        &state.gateways()?.job_manager.cancel_job,
        JOB_MANAGER,
        CancelJob { job_id },
    )
    .await??;
    log::info!("REST: cancelled job {job_id}");
    Ok(HttpResponse::Accepted().json(views::JobCancelled {
        id: job_id,
        state: status,
    }))
}

/// `GET /cluster/pool-size`.
pub async fn pool_size(state: web::Data<RestState>) -> Answer {
    let rm = resource_manager_status(&state).await?;
    ok(&views::PoolSize {
        size: rm.designated_pool_size,
        demand: rm.demand,
        target: rm.target_pool_size,
        max: state.max_pool_size,
        workers: rm.driver_workers,
    })
}

/// `PUT /cluster/pool-size` with `{"size": N}`.
pub async fn set_pool_size(
    _: Authorized,
    state: web::Data<RestState>,
    body: web::Json<serde_json::Value>,
) -> Answer {
    let size = requested_pool_size(&body, state.max_pool_size)?;
    ask(
        &state,
        &state.gateways()?.resource_manager.set_worker_pool_size,
        RESOURCE_MANAGER,
        SetWorkerPoolSize { size },
    )
    .await??;
    // High availability: kept for the next leader, which starts its pool from it.
    if let Some(store) = &state.job_graph_store {
        store
            .put_pool_size(size)
            .await
            .map_err(|source| ApiError::PoolSizeNotPersisted { size, source })?;
    }
    log::info!("REST: pool size set to {size}");
    ok(&views::PoolSizeSet { size })
}

/// The size of a `{"size": N}` body: a whole number from 0 to `u32::MAX` (the resource
/// manager checks it against `resourcemanager.max-pool-size`, the one authority on it).
fn requested_pool_size(body: &serde_json::Value, max: u32) -> Result<u32, ApiError> {
    let shape = || ApiError::MalformedJson {
        detail: format!("expected {{\"size\": N}}, got {body}"),
    };
    let object = body.as_object().ok_or_else(shape)?;
    if object.len() != 1 {
        return Err(shape());
    }
    let value = object.get("size").ok_or_else(shape)?;
    value
        .as_u64()
        .and_then(|size| u32::try_from(size).ok())
        .ok_or_else(|| ApiError::InvalidPoolSize {
            value: value.to_string(),
            max,
        })
}

/// `DELETE /cluster`: asks the process to stop the cluster; answered before it stops.
pub async fn stop_cluster(_: Authorized, state: web::Data<RestState>) -> Answer {
    log::info!("REST: cluster stop requested");
    state.request_stop();
    // Closing this connection after the answer lets the server stop without waiting for it.
    Ok(HttpResponse::build(StatusCode::ACCEPTED)
        .force_close()
        .json(views::Message {
            message: "stopping".to_owned(),
        }))
}

/// `GET /metrics`.
pub async fn metrics(state: web::Data<RestState>) -> Answer {
    let rm = resource_manager_status(&state).await?;
    let jm = job_manager_status(&state).await?;
    let jobs = list_jobs(&state).await?;
    let mut snapshot = MetricsSnapshot::collect(&rm, &jm, &jobs, &state.transport);
    let gateways = state.gateways()?;
    for summary in jobs.iter().filter(|j| !j.status.is_globally_terminal()) {
        // A job that ended meanwhile has nothing running to show.
        let asked = ask(
            &state,
            &gateways.job_manager.request_job_status,
            JOB_MANAGER,
            RequestJobStatus {
                job_id: summary.job_id,
            },
        )
        .await;
        let Ok(Ok(details)) = asked else {
            continue;
        };
        snapshot
            .vertices
            .extend(details.vertices.into_iter().map(|v| VertexIo {
                job_id: summary.job_id.to_string(),
                vertex: v.name,
                io: v.io,
            }));
    }
    Ok(HttpResponse::Ok()
        .content_type(CONTENT_TYPE)
        .body(snapshot.render()))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_pool_size_is_a_whole_non_negative_number() {
        assert_eq!(requested_pool_size(&json!({"size": 3}), 10).unwrap(), 3);
        assert_eq!(requested_pool_size(&json!({"size": 0}), 10).unwrap(), 0);
        // Above the maximum is the resource manager's refusal, with its own message.
        assert_eq!(requested_pool_size(&json!({"size": 11}), 10).unwrap(), 11);
        for bad in [
            json!({"size": -1}),
            json!({"size": 2.5}),
            json!({"size": "3"}),
        ] {
            let error = requested_pool_size(&bad, 10).unwrap_err();
            assert!(
                matches!(error, ApiError::InvalidPoolSize { max: 10, .. }),
                "{bad}: {error:?}"
            );
        }
        let error = requested_pool_size(&json!({"size": 1u64 << 40}), 10).unwrap_err();
        assert!(error.to_string().contains("1099511627776"), "{error}");
        for shape in [
            json!(3),
            json!({}),
            json!({"size": 1, "extra": 2}),
            json!({"n": 1}),
        ] {
            assert!(
                matches!(
                    requested_pool_size(&shape, 10),
                    Err(ApiError::MalformedJson { .. })
                ),
                "{shape}"
            );
        }
    }
}
