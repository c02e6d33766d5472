//! Running a program's jobs on a remote cluster: the [`Executor`] a program started with
//! `--jobmanager URL` (or `--config FILE` with high-availability keys) gets. It submits each job
//! graph over the REST API, polls the job until it ends, and fetches what its `collect()` sinks
//! gathered.
//!
//! With high availability the JobManager it polls can die or be deposed while the job runs. As a
//! Flink client does, it then finds the new leader in ZooKeeper and goes on polling the same job,
//! which the new leader recovered (for up to [`FAILOVER_DEADLINE`]): the program sees one job,
//! not an error. It never submits again, so a job is never run twice by the client.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::endpoint::Endpoint;
use super::rest::{RestClient, RestError};
use crate::api::{ExecutedJob, Executor};
use crate::job::graph::JobGraph;

/// How often a running job is polled at most.
pub const POLL_INTERVAL: Duration = Duration::from_millis(20);

/// How long one poll asks the JobManager to hold its answer while the job runs: the job's end
/// is then seen when it happens, not up to a poll interval later.
pub const LONG_POLL: Duration = Duration::from_secs(1);

/// How long the executor looks for a new leader that knows the job before it gives up with the
/// last error: ZooKeeper's session timeout (the old leader's latch must lapse) plus the new
/// leader's recovery of the stored jobs, with room to spare.
pub const FAILOVER_DEADLINE: Duration = Duration::from_secs(120);

/// How long it waits between two looks for the leader.
const LEADER_RETRY: Duration = Duration::from_millis(200);

/// See the module docs.
#[derive(Debug)]
pub struct RemoteExecutor {
    client: RestClient,
    /// The configuration file whose high-availability keys find the leader again, if any.
    follow: Option<PathBuf>,
}

impl RemoteExecutor {
    /// Runs jobs through `client` only.
    pub fn new(client: RestClient) -> Self {
        Self {
            client,
            follow: None,
        }
    }

    /// Runs jobs through `client`, and through the leader the high-availability keys of the file
    /// `config` find when that JobManager is gone (see the module docs).
    pub fn following_leader(client: RestClient, config: PathBuf) -> Self {
        Self {
            client,
            follow: Some(config),
        }
    }

    /// `call` against the current JobManager; across a failover, against the new leader.
    #[allow(clippy::disallowed_methods)] // the client's own thread waits for the new leader
    fn call<T>(
        &mut self,
        mut call: impl FnMut(&RestClient) -> Result<T, RestError>,
    ) -> Result<T, RestError> {
        let mut failover: Option<Instant> = None;
        loop {
            let error = match call(&self.client) {
                Ok(value) => return Ok(value),
                Err(error) => error,
            };
            let Some(config) = &self.follow else {
                return Err(error);
            };
            if !leader_may_be_gone(&error, failover.is_some()) {
                return Err(error);
            }
            let since = *failover.get_or_insert_with(Instant::now);
            if since.elapsed() > FAILOVER_DEADLINE {
                return Err(error);
            }
            std::thread::sleep(LEADER_RETRY);
            match Endpoint::leader(config, |name| std::env::var(name).ok()) {
                Ok(Some(leader)) if leader.url != self.client.endpoint().url => {
                    log::info!("following the new leader at {}", leader.url);
                    self.client = RestClient::new(leader);
                }
                // No leader yet, the same one, or ZooKeeper not answering: ask again.
                _ => {}
            }
        }
    }
}

/// Whether `error` may mean the JobManager asked is no longer the leader: it does not answer, a
/// standby points at another, or (once a failover began) the new leader has not yet recovered
/// the job.
fn leader_may_be_gone(error: &RestError, in_failover: bool) -> bool {
    match error {
        RestError::Unreachable { .. }
        | RestError::Redirected { .. }
        | RestError::NoAnswer { .. } => true,
        RestError::Server { status, .. } => *status == 503,
        RestError::NotFound { .. } => in_failover,
        _ => false,
    }
}

impl Executor for RemoteExecutor {
    #[allow(clippy::disallowed_methods)] // the client's own thread waits between polls
    fn execute(
        &mut self,
        graph: JobGraph,
    ) -> Result<ExecutedJob, Box<dyn std::error::Error + Send + Sync>> {
        // Submitted once: a submission whose answer was lost is not repeated (it may have been
        // stored, and would run twice).
        let job_id = self.client.submit(&graph)?.value.id;
        // Long polls: each answered when the job ends (or after LONG_POLL); never more often
        // than every POLL_INTERVAL, whatever the JobManager does with the wait.
        let mut view = loop {
            let asked = std::time::Instant::now();
            let view = self
                .call(|client| client.job_progress_waiting(job_id, LONG_POLL))?
                .value;
            if view.state.is_globally_terminal() {
                break view;
            }
            std::thread::sleep(POLL_INTERVAL.saturating_sub(asked.elapsed()));
        };
        // A leader that dies after the job ended but before it kept the job's result leaves
        // the job to its successor, which runs it again: the results asked for then are of a
        // run still going, complete only once it ends too (and its status is the one to report).
        let results = loop {
            let results = self
                .call(|client| client.results(job_id))?
                .value
                .into_results()?;
            match results.status {
                Some(status) if !status.is_globally_terminal() => {}
                Some(status) if status != view.state => {
                    view = self.call(|client| client.job_progress(job_id))?.value;
                    break results;
                }
                _ => break results,
            }
            std::thread::sleep(POLL_INTERVAL);
        };
        Ok(ExecutedJob {
            job_id,
            status: view.state,
            failure: view.failure,
            results,
        })
    }
}

#[cfg(test)]
mod tests;
