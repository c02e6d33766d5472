//! The `flint jobmanager` side of high availability: stand by until elected, lead (a JobManager
//! and a resource manager of a fresh `LeaderSessionId`, published, then every stored job
//! recovered), and stop both the moment the leadership is in doubt, then stand by again.
//!
//! ```text
//!  standby ──acquire()──▶ renew the lease ─▶ start JM+RM (fresh session, the job stores) ─▶ confirm()
//!     ▲                                                    (publish LeaderInformation: found at once)
//!     │                                                                   │
//!     └── stop RM (its local workers die) and JM ◀── revoked() ◀── leading: REST served here;
//!                                                      stored jobs recovered one by one, for as
//!                                                      long as it takes; strays adopted
//! ```
//!
//! The leader publishes itself before it recovers anything (Flink confirms leadership, then
//! recovers jobs): TaskManagers and clients find it at once, and recovery has no deadline that
//! could make a leader with a large job store resign — each job is recovered alone (one whose
//! graph cannot be read fails alone), and the leadership is watched all along. The JobManager
//! decides what a recovered job becomes: one with a result in the job result store never runs
//! again (see `actors::job_manager::dispatcher`).
//!
//! The REST port is served for the process's whole life; [`LeaderSwitch`] makes it answer or
//! redirect. The order on revocation is what keeps two leaders from acting at once: the REST
//! switch first (no new submissions), then the resource manager (no new workers; its
//! `local_process` workers are killed), then the JobManager (no new deployments). Whatever an
//! actor still sent before it stopped carries the old session and is refused by fencing.

use std::collections::BTreeSet;
use std::future::Future;
use std::path::Path;
use std::time::Duration;

use actix::Addr;

use crate::actors::Shutdown;
use crate::actors::job_manager::JobManager;
use crate::actors::node::{JobManagerNode, start_job_manager_node_leading};
use crate::base::error_chain::ErrorChain;
use crate::base::ids::{JobId, LeaderSessionId};
use crate::config::ClusterConfig;
use crate::drivers::WorkerDriver;
use crate::env::NodeEnv;
use crate::ha::election::LeaderElectionService;
use crate::ha::job_graph_store::{JobGraphPointers, JobGraphStore, RecoveredJob};
use crate::ha::lease::{LeadershipLease, RENEW_FRACTION};
use crate::ha::{HaError, JobResultStore, JobStores, LeaderInformation};
use crate::messages::job_manager::{JobManagerGateway, ListJobs, RecoverJob};
use crate::messages::resource_manager::{ResourceManagerGateway, StopCluster};
use crate::operators::OperatorRegistry;
use crate::rest::Gateways;
use crate::rest::leader::LeaderSwitch;

/// How long a failed election step waits before the next try (a fresh session).
const RETRY_DELAY: Duration = Duration::from_secs(1);

/// How often a leader adopts jobs stored after its recovery (a deposed leader's late
/// submissions).
const CLEANUP_INTERVAL: Duration = Duration::from_millis(500);

/// How long a ZooKeeper step of the leader loop may take before it counts as failed.
const STEP_TIMEOUT: Duration = Duration::from_secs(5);

/// What each leadership of this process is started with.
pub struct LeaderTerms<'a> {
    /// The validated configuration.
    pub config: &'a ClusterConfig,
    /// The node's environment (its rng draws each leadership's session).
    pub env: NodeEnv,
    /// The transport `host:port` TaskManagers reach this process at.
    pub address: String,
    /// This process's REST base URL.
    pub rest_url: String,
    /// A fresh worker driver per leadership (the previous one was shut down with its RM).
    pub make_driver: &'a dyn Fn() -> Box<dyn WorkerDriver>,
    /// The operators jobs may use (the built-ins and the binary's programs).
    pub registry: OperatorRegistry,
    /// The job result store's directory (`high-availability.storageDir/job-result-store/CLUSTER`),
    /// read afresh by each leadership.
    pub job_results: &'a Path,
    /// The artifacts every leadership serves (in `high-availability.storageDir`).
    pub blobs: Option<crate::env::blob_store::BlobStore>,
}

/// Why the leader loop ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// `stop` resolved (a signal, `DELETE /cluster`).
    Stopped,
}

/// Runs the election until `stop` resolves: leads whenever elected, stands by otherwise. See
/// the module docs.
pub async fn run_leader_loop<E: LeaderElectionService, P: JobGraphPointers + Clone + 'static>(
    mut election: E,
    terms: LeaderTerms<'_>,
    store: &JobGraphStore<P>,
    switch: &LeaderSwitch,
    stop: impl Future<Output = ()>,
) -> Ended {
    let mut stop = std::pin::pin!(stop);
    let mut rng = terms.env.rng("leader-election");
    loop {
        log::info!("jobmanager: standing by for leadership");
        let granted = tokio::select! {
            biased;
            () = &mut stop => break,
            granted = election.acquire() => granted,
        };
        let leadership = match granted {
            Ok(leadership) => leadership,
            Err(error) => {
                log::warn!(
                    "jobmanager: election failed: {}; trying again",
                    crate::base::error_chain::ErrorChain(&error)
                );
                tokio::select! {
                    biased;
                    () = &mut stop => break,
                    () = tokio::time::sleep(RETRY_DELAY) => continue,
                }
            }
        };
        // Unique across processes even with the same `seed`: the token is the ZooKeeper
        // session and latch sequence.
        let session = LeaderSessionId::from_u128(rng.next_u128() ^ leadership.token);
        log::info!("jobmanager: elected leader, leading session {session}");
        // A fresh seed per leadership: the actors derive their ids (jobs, attempts,
        // allocations, workers) from their env's seed, and a process that leads a second time
        // must not hand out its first leadership's ids again (found by the HA simulation).
        let env = terms.env.child(
            terms.env.node.clone(),
            rng.next_u64() ^ (leadership.token as u64) ^ ((leadership.token >> 64) as u64),
        );
        // The lease is proven before anything acts, and checked by the actors before each
        // deployment and worker start (see [`crate::ha::lease`]).
        let lease = LeadershipLease::lapsed();
        let lease_length = match renew_lease(&mut election, &lease, STEP_TIMEOUT).await {
            Ok(length) => length,
            Err(error) => {
                log::warn!(
                    "jobmanager: cannot prove the leadership: {}; standing by again",
                    crate::base::error_chain::ErrorChain(&error)
                );
                lease.revoke();
                election.resign().await;
                continue;
            }
        };
        let config = with_stored_pool_size(terms.config, store).await;
        // How the jobs that ended under earlier leaders ended: they never run again.
        let job_results = match JobResultStore::open(terms.job_results) {
            Ok(results) => results,
            Err(error) => {
                log::warn!(
                    "jobmanager: cannot read the job result store: {}; standing by again",
                    ErrorChain(&error)
                );
                lease.revoke();
                election.resign().await;
                tokio::select! {
                    biased;
                    () = &mut stop => break,
                    () = tokio::time::sleep(RETRY_DELAY) => continue,
                }
            }
        };
        let node = start_job_manager_node_leading(
            &config,
            terms.registry.clone(),
            env,
            (terms.make_driver)(),
            session,
            lease.clone(),
            JobStores {
                job_graphs: std::rc::Rc::new(store.clone()),
                job_results,
                blobs: terms.blobs.clone(),
            },
        );
        let info = LeaderInformation {
            address: terms.address.clone(),
            rest_url: terms.rest_url.clone(),
            leader_session_id: session,
        };
        // Published before anything is recovered: this leader is found at once.
        match tokio::time::timeout(STEP_TIMEOUT, election.confirm(&info)).await {
            Ok(Ok(())) => {}
            outcome => {
                let why = match outcome {
                    Ok(Err(error)) => ErrorChain(&error).to_string(),
                    _ => format!("no answer from ZooKeeper within {STEP_TIMEOUT:?}"),
                };
                log::warn!("jobmanager: cannot take up leadership: {why}; standing by again");
                lease.revoke();
                stop_node(node).await;
                election.resign().await;
                continue;
            }
        }
        switch.lead(
            Gateways {
                job_manager: JobManagerGateway::of(&node.job_manager),
                resource_manager: ResourceManagerGateway::of(&node.resource_manager),
            },
            lease.clone(),
        );
        log::info!(
            "jobmanager: leading at {} ({})",
            info.address,
            info.rest_url
        );
        let mut recovery = std::pin::pin!(recover_jobs(store, node.job_manager.clone()));
        let mut recovered = false;
        let mut known = BTreeSet::new();
        let mut cleanup = tokio::time::interval(CLEANUP_INTERVAL);
        // (`interval` panics on a zero period; a lease is never that short in practice.)
        let mut renewal =
            tokio::time::interval((lease_length / RENEW_FRACTION).max(Duration::from_millis(1)));
        renewal.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let lost = loop {
            tokio::select! {
                biased;
                () = &mut stop => break None,
                lost = election.revoked() => break Some(lost),
                _ = renewal.tick() => {
                    if let Err(lost) = renew_lease(&mut election, &lease, lease_length).await {
                        // The session may be gone: give the leadership up (closing the session
                        // if it is not) rather than wait for the watch to say so.
                        lease.revoke();
                        election.resign().await;
                        break Some(lost);
                    }
                }
                () = &mut recovery, if !recovered => recovered = true,
                _ = cleanup.tick(), if recovered => {
                    let _ = tokio::time::timeout(
                        STEP_TIMEOUT,
                        adopt_strays(store, &node.job_manager, &mut known),
                    )
                    .await;
                }
            }
        };
        // Suspend at once: no task deployed, no worker started, no request served.
        lease.revoke();
        switch.stand_by();
        match lost {
            Some(lost) => {
                log::warn!(
                    "jobmanager: leadership lost ({}): suspending session {session} and standing by",
                    crate::base::error_chain::ErrorChain(&lost)
                );
                stop_node(node).await;
            }
            None => {
                stop_node(node).await;
                election.resign().await;
                return Ended::Stopped;
            }
        }
    }
    election.resign().await;
    Ended::Stopped
}

/// The configuration a leadership starts from: the pool size an operator set last (kept in the
/// store by `PUT /cluster/pool-size`) instead of the configured one, within
/// `resourcemanager.max-pool-size`. Without an answer from the store, the configured size.
async fn with_stored_pool_size<P: JobGraphPointers>(
    config: &ClusterConfig,
    store: &JobGraphStore<P>,
) -> ClusterConfig {
    let mut config = config.clone();
    match tokio::time::timeout(STEP_TIMEOUT, store.pool_size()).await {
        Ok(Ok(Some(size))) => {
            let max = config.resourcemanager.max_pool_size;
            if size > max {
                log::warn!(
                    "jobmanager: the pool size an operator set, {size}, is over \
                     resourcemanager.max-pool-size = {max}; starting with {max}"
                );
            }
            config.resourcemanager.pool_size = size.min(max);
            log::info!(
                "jobmanager: starting the pool at {} (set by an operator)",
                config.resourcemanager.pool_size
            );
        }
        Ok(Ok(None)) => {}
        Ok(Err(error)) => log::warn!(
            "jobmanager: cannot read the pool size an operator set: {}; starting at the \
             configured {}",
            crate::base::error_chain::ErrorChain(&error),
            config.resourcemanager.pool_size
        ),
        Err(_) => log::warn!(
            "jobmanager: no answer from the store for the pool size within {STEP_TIMEOUT:?}; \
             starting at the configured {}",
            config.resourcemanager.pool_size
        ),
    }
    config
}

/// One renewal of `lease`: a round trip to the coordination service, the lease extended to
/// when it was sent plus what the service guarantees after it. Returns that guarantee (the
/// lease's length). No answer within `limit` counts as a lost leadership.
async fn renew_lease<E: LeaderElectionService>(
    election: &mut E,
    lease: &LeadershipLease,
    limit: Duration,
) -> Result<Duration, HaError> {
    let sent = tokio::time::Instant::now();
    match tokio::time::timeout(limit, election.renew()).await {
        Ok(Ok(length)) => {
            lease.extend_to(sent + length);
            Ok(length)
        }
        Ok(Err(error)) => Err(error),
        Err(_) => Err(HaError::SessionLost {
            state: format!("no answer to a lease renewal within {limit:?}"),
        }),
    }
}

/// Hands every stored job to the new leader's JobManager, one by one, for as long as it takes:
/// a store that does not answer is asked again (the leadership is watched meanwhile), a graph
/// that cannot be read makes its job FAILED there, with the reason, and the JobManager runs
/// again only the jobs without a result.
async fn recover_jobs<P: JobGraphPointers>(
    store: &JobGraphStore<P>,
    job_manager: Addr<JobManager>,
) {
    let started = tokio::time::Instant::now();
    let job_ids = retried("list the job graph store", || store.job_ids()).await;
    if job_ids.is_empty() {
        return;
    }
    log::info!(
        "jobmanager: recovering {} job(s) from the job graph store",
        job_ids.len()
    );
    for &job_id in &job_ids {
        let one = [job_id];
        let job = retried("read a stored job", || store.recover_only(&one)).await;
        send_recovered(job, &job_manager).await;
    }
    log::info!(
        "jobmanager: {} stored job(s) handed to the JobManager in {:?}",
        job_ids.len(),
        started.elapsed()
    );
}

/// `step` until it succeeds, [`RETRY_DELAY`] apart (logged).
async fn retried<T, F: Future<Output = Result<T, HaError>>>(
    what: &str,
    mut step: impl FnMut() -> F,
) -> T {
    loop {
        match step().await {
            Ok(value) => return value,
            Err(error) => {
                log::warn!(
                    "jobmanager: cannot {what}: {}; trying again in {RETRY_DELAY:?}",
                    ErrorChain(&error)
                );
                tokio::time::sleep(RETRY_DELAY).await;
            }
        }
    }
}

/// Hands recovered jobs to the JobManager.
async fn send_recovered(jobs: Vec<RecoveredJob>, job_manager: &Addr<JobManager>) {
    for job in jobs {
        let job_id = job.job_id;
        match job_manager
            .send(RecoverJob {
                job_id,
                job_graph: job.graph,
            })
            .await
        {
            Ok(Ok(_)) => {}
            Ok(Err(error)) => log::warn!("jobmanager: job {job_id} not recovered: {error}"),
            Err(error) => log::warn!("jobmanager: job {job_id} not recovered: {error}"),
        }
    }
}

/// Adopts stored jobs this leadership never knew. Those were stored after it recovered the
/// store: a deposed leader resumed after a pause and persisted a submission it had taken
/// before (its store session is not the election's) after this leadership began (Flink's
/// `JobGraphStore` listener adopts added graphs the same way). The JobManager runs a stray only
/// if it has no result. `known` holds every job this leadership ever listed, so a job it ran
/// and forgot is never adopted again.
async fn adopt_strays<P: JobGraphPointers>(
    store: &JobGraphStore<P>,
    job_manager: &Addr<JobManager>,
    known: &mut BTreeSet<JobId>,
) {
    // The store first: a job stored by this leadership's JobManager is listed there (or being
    // persisted, which the JobManager knows) before its graph is in the store.
    let Ok(stored) = store.job_ids().await else {
        return;
    };
    if stored.is_empty() {
        // Nothing stored can be a stray: nothing to remember either.
        known.clear();
        return;
    }
    let Ok(jobs) = job_manager.send(ListJobs).await else {
        return;
    };
    let listed: BTreeSet<JobId> = jobs.iter().map(|job| job.job_id).collect();
    // Only what is stored or listed can matter later: `known` stays as small as the two.
    known.retain(|id| listed.contains(id) || stored.binary_search(id).is_ok());
    known.extend(listed);
    let strays: Vec<JobId> = stored
        .iter()
        .filter(|id| !known.contains(id))
        .copied()
        .collect();
    if strays.is_empty() {
        return;
    }
    log::info!(
        "jobmanager: {} job(s) stored after this leadership recovered the store; adopting them",
        strays.len()
    );
    known.extend(strays.iter().copied());
    if let Ok(recovered) = store.recover_only(&strays).await {
        send_recovered(recovered, job_manager).await;
    }
}

/// Stops a leadership's actors: the resource manager first (its driver's workers go with it),
/// then the JobManager; returns once the JobManager is gone, so the next leadership's
/// JobManager can take its place in the node's directory.
pub async fn stop_node(node: JobManagerNode) {
    let _ = tokio::time::timeout(STEP_TIMEOUT, node.resource_manager.send(StopCluster)).await;
    let _ = tokio::time::timeout(STEP_TIMEOUT, node.job_manager.send(Shutdown)).await;
    let give_up = tokio::time::Instant::now() + STEP_TIMEOUT;
    while (node.job_manager.connected() || node.resource_manager.connected())
        && tokio::time::Instant::now() < give_up
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Follows the published leader for the standby's REST redirects until the process ends.
pub async fn follow_leader_for_rest<R: crate::ha::LeaderRetrievalService>(
    mut retrieval: R,
    switch: LeaderSwitch,
) {
    loop {
        match retrieval.next_leader().await {
            Ok(leader) => {
                log::info!(
                    "jobmanager: the leader's REST API is {}",
                    leader.as_ref().map_or("unknown", |l| l.rest_url.as_str())
                );
                switch.set_leader_url(leader.map(|l| l.rest_url));
            }
            Err(error) => {
                log::debug!(
                    "jobmanager: leader retrieval failed: {}; retrying",
                    crate::base::error_chain::ErrorChain(&error)
                );
                tokio::time::sleep(RETRY_DELAY).await;
            }
        }
    }
}
