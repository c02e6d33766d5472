//! Running a program's jobs on a remote cluster: the [`Executor`] a program started with
//! `--jobmanager URL` gets. It submits each job graph over the REST API, polls the job until it
//! ends, and fetches what its `collect()` sinks gathered.

use std::time::Duration;

use super::rest::RestClient;
use crate::api::{ExecutedJob, Executor};
use crate::job::graph::JobGraph;

/// How often a running job is polled.
pub const POLL_INTERVAL: Duration = Duration::from_millis(20);

/// See the module docs.
#[derive(Debug)]
pub struct RemoteExecutor {
    client: RestClient,
}

impl RemoteExecutor {
    /// Runs jobs through `client`.
    pub fn new(client: RestClient) -> Self {
        Self { client }
    }
}

impl Executor for RemoteExecutor {
    #[allow(clippy::disallowed_methods)] // the client's own thread waits between polls
    fn execute(
        &mut self,
        graph: JobGraph,
    ) -> Result<ExecutedJob, Box<dyn std::error::Error + Send + Sync>> {
        let job_id = self.client.submit(&graph)?.value.id;
        let view = loop {
            let view = self.client.job_progress(job_id)?.value;
            if view.state.is_globally_terminal() {
                break view;
            }
            std::thread::sleep(POLL_INTERVAL);
        };
        let results = self.client.results(job_id)?.value.into_results()?;
        Ok(ExecutedJob {
            job_id,
            status: view.state,
            failure: view.failure,
            results,
        })
    }
}
