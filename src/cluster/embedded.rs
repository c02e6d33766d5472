//! An embedded cluster programs run their jobs on: a [`MiniCluster`] on a thread of its own
//! (with its own actix System), driven from the program's thread, which blocks while a job
//! runs. What `flint::cli` gives a program started without `--jobmanager`, and what tests use.

use std::sync::mpsc as std_mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::sync::mpsc;

use super::minicluster::{MiniCluster, MiniClusterError};
use crate::api::{ExecutedJob, Executor};
use crate::config::ClusterConfig;
use crate::job::graph::JobGraph;
use crate::operators::OperatorRegistry;

/// How long an embedded job may run before the executor gives up on it.
pub const JOB_DEADLINE: Duration = Duration::from_secs(24 * 3600);

type Reply = std_mpsc::Sender<Result<ExecutedJob, String>>;

/// See the module docs. Dropping it shuts the cluster down.
pub struct EmbeddedCluster {
    requests: Option<mpsc::UnboundedSender<(JobGraph, Reply)>>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for EmbeddedCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedCluster").finish_non_exhaustive()
    }
}

impl EmbeddedCluster {
    /// Starts a cluster of `config` whose TaskManagers run `registry`'s operators, and waits
    /// until its pool is up.
    #[allow(clippy::disallowed_methods)] // the cluster's own thread, outside any node
    pub fn start(
        config: ClusterConfig,
        registry: OperatorRegistry,
    ) -> Result<Self, MiniClusterError> {
        let (requests, mut jobs) = mpsc::unbounded_channel::<(JobGraph, Reply)>();
        let (started, ready) = std_mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("flint-embedded".into())
            .spawn(move || {
                let system = actix::System::new();
                system.block_on(async move {
                    let pool = config.resourcemanager.pool_size;
                    let cluster = match MiniCluster::start_with(
                        config,
                        registry,
                        std::sync::Arc::new(crate::env::ArbiterSpawner),
                    ) {
                        Ok(cluster) => cluster,
                        Err(error) => {
                            let _ = started.send(Err(error));
                            return;
                        }
                    };
                    if let Err(error) = cluster.wait_for_pool(pool, Duration::from_secs(60)).await {
                        let _ = started.send(Err(error));
                        return;
                    }
                    let _ = started.send(Ok(()));
                    while let Some((graph, reply)) = jobs.recv().await {
                        let _ = reply.send(
                            run(&cluster, graph)
                                .await
                                .map_err(|e| crate::base::error_chain::ErrorChain(&e).to_string()),
                        );
                    }
                    let _ = cluster.shutdown().await;
                });
            })
            .map_err(MiniClusterError::Thread)?;
        match ready.recv() {
            Ok(Ok(())) => Ok(Self {
                requests: Some(requests),
                thread: Some(thread),
            }),
            Ok(Err(error)) => {
                let _ = thread.join();
                Err(error)
            }
            Err(_) => {
                let _ = thread.join();
                Err(MiniClusterError::NoSystem)
            }
        }
    }
}

async fn run(cluster: &MiniCluster, graph: JobGraph) -> Result<ExecutedJob, MiniClusterError> {
    let job_id = cluster.submit_job(graph).await?;
    let details = cluster.wait_for_job(job_id, JOB_DEADLINE).await?;
    let results = cluster.job_results(job_id).await?;
    Ok(ExecutedJob {
        job_id,
        status: details.summary.status,
        failure: details.failure.clone(),
        results,
    })
}

impl Executor for EmbeddedCluster {
    fn execute(
        &mut self,
        graph: JobGraph,
    ) -> Result<ExecutedJob, Box<dyn std::error::Error + Send + Sync>> {
        let (reply, answer) = std_mpsc::channel();
        self.requests
            .as_ref()
            .ok_or("the embedded cluster is shut down")?
            .send((graph, reply))
            .map_err(|_| "the embedded cluster stopped")?;
        let executed = answer
            .recv()
            .map_err(|_| "the embedded cluster stopped while the job ran")?;
        executed.map_err(Into::into)
    }
}

impl Drop for EmbeddedCluster {
    fn drop(&mut self) {
        self.requests.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
