//! The `flint jobmanager` side of high availability: stand by until elected, lead (a JobManager
//! and a resource manager of a fresh `LeaderSessionId`, every stored job recovered), and stop
//! both the moment the leadership is in doubt, then stand by again.
//!
//! ```text
//!  standby ──acquire()──▶ start JM+RM (fresh session) ─▶ recover every stored job ─▶ confirm()
//!     ▲                                                          (publish LeaderInformation)
//!     │                                                                   │
//!     └── stop RM (its local workers die) and JM ◀── revoked() ◀── leading (REST served here;
//!                                                                 terminal jobs leave the store)
//! ```
//!
//! The REST port is served for the process's whole life; [`LeaderSwitch`] makes it answer or
//! redirect. The order on revocation is what keeps two leaders from acting at once: the REST
//! switch first (no new submissions), then the resource manager (no new workers; its
//! `local_process` workers are killed), then the JobManager (no new deployments). Whatever an
//! actor still sent before it stopped carries the old session and is refused by fencing.

use std::collections::BTreeSet;
use std::future::Future;
use std::time::Duration;

use actix::Addr;

use crate::actors::Shutdown;
use crate::actors::job_manager::JobManager;
use crate::actors::node::{JobManagerNode, start_job_manager_node_leading};
use crate::base::ids::{JobId, LeaderSessionId};
use crate::config::ClusterConfig;
use crate::drivers::WorkerDriver;
use crate::env::NodeEnv;
use crate::ha::election::LeaderElectionService;
use crate::ha::job_graph_store::{JobGraphPointers, JobGraphStore, RecoveredJob};
use crate::ha::lease::{LeadershipLease, RENEW_FRACTION};
use crate::ha::{HaError, LeaderInformation};
use crate::messages::job_manager::{JobManagerGateway, ListJobs, RecoverJob};
use crate::messages::resource_manager::{ResourceManagerGateway, StopCluster};
use crate::operators::OperatorRegistry;
use crate::rest::Gateways;
use crate::rest::leader::LeaderSwitch;

/// How long a failed election step waits before the next try (a fresh session).
const RETRY_DELAY: Duration = Duration::from_secs(1);

/// How often a leader reconciles the job graph store with its JobManager (terminal jobs
/// leave it, jobs stored after the recovery are adopted).
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
}

/// Why the leader loop ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// `stop` resolved (a signal, `DELETE /cluster`).
    Stopped,
}

/// Runs the election until `stop` resolves: leads whenever elected, stands by otherwise. See
/// the module docs.
pub async fn run_leader_loop<E: LeaderElectionService, P: JobGraphPointers>(
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
        let node = start_job_manager_node_leading(
            &config,
            terms.registry.clone(),
            env,
            (terms.make_driver)(),
            session,
            lease.clone(),
        );
        let info = LeaderInformation {
            address: terms.address.clone(),
            rest_url: terms.rest_url.clone(),
            leader_session_id: session,
        };
        let started = async {
            recover_jobs(store, &node.job_manager).await?;
            election.confirm(&info).await
        };
        match tokio::time::timeout(STEP_TIMEOUT, started).await {
            Ok(Ok(())) => {}
            outcome => {
                let why = match outcome {
                    Ok(Err(error)) => crate::base::error_chain::ErrorChain(&error).to_string(),
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
                _ = cleanup.tick() => {
                    let _ = tokio::time::timeout(
                        STEP_TIMEOUT,
                        reconcile_store(store, &node.job_manager, &mut known),
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

/// Hands every stored job to the new leader's JobManager (a graph that cannot be read makes
/// its job FAILED there, with the reason).
async fn recover_jobs<P: JobGraphPointers>(
    store: &JobGraphStore<P>,
    job_manager: &Addr<JobManager>,
) -> Result<(), HaError> {
    let jobs = store.recover().await?;
    if !jobs.is_empty() {
        log::info!(
            "jobmanager: recovering {} job(s) from the job graph store",
            jobs.len()
        );
    }
    send_recovered(jobs, job_manager).await;
    Ok(())
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

/// Keeps the job graph store and this leadership's JobManager in step: removes the stored
/// graphs of the jobs that reached a terminal state (they are never run again), and adopts
/// stored jobs this leadership never knew. Those were stored after it recovered the store: a
/// deposed leader resumed after a pause and answered a submission it had taken before, whose
/// graph landed in the store (its session is not the election's) after this leadership began
/// (Flink's `JobGraphStore` listener adopts added graphs the same way). `known` holds every job
/// this leadership ever listed, so a job it ran and forgot is never run again (its graph is
/// removed: it ended before it was forgotten).
async fn reconcile_store<P: JobGraphPointers>(
    store: &JobGraphStore<P>,
    job_manager: &Addr<JobManager>,
    known: &mut BTreeSet<JobId>,
) {
    // The store first: a job stored by this leadership was submitted to its JobManager
    // before, so the listing below has it.
    let Ok(stored) = store.job_ids().await else {
        return;
    };
    if stored.is_empty() {
        // Nothing stored can be a stray or a forgotten job: nothing to remember either.
        known.clear();
        return;
    }
    let Ok(jobs) = job_manager.send(ListJobs).await else {
        return;
    };
    let listed: BTreeSet<JobId> = jobs.iter().map(|job| job.job_id).collect();
    // Listed before and gone now: the JobManager forgets only ended jobs (`jobstore.*`), so
    // these ended between two rounds without being seen terminal; they are never run again.
    let forgotten: Vec<JobId> = stored
        .iter()
        .filter(|id| known.contains(id) && !listed.contains(id))
        .copied()
        .collect();
    for job_id in forgotten {
        if let Err(error) = store.remove(job_id).await {
            log::warn!(
                "jobmanager: cannot remove ended job {job_id} from the job graph store: {}",
                crate::base::error_chain::ErrorChain(&error)
            );
        }
    }
    // Only what is stored or listed can matter later: `known` stays as small as the two.
    known.retain(|id| listed.contains(id) || stored.binary_search(id).is_ok());
    known.extend(listed);
    let strays: Vec<JobId> = stored
        .iter()
        .filter(|id| !known.contains(id))
        .copied()
        .collect();
    if !strays.is_empty() {
        log::info!(
            "jobmanager: {} job(s) stored after this leadership recovered the store; adopting them",
            strays.len()
        );
        known.extend(strays.iter().copied());
        if let Ok(recovered) = store.recover_only(&strays).await {
            send_recovered(recovered, job_manager).await;
        }
    }
    for job in jobs {
        if job.status.is_globally_terminal() && stored.binary_search(&job.job_id).is_ok() {
            match store.remove(job.job_id).await {
                Ok(()) => log::info!(
                    "jobmanager: job {} is {}: its graph left the job graph store",
                    job.job_id,
                    job.status
                ),
                Err(error) => log::warn!(
                    "jobmanager: cannot remove job {} from the job graph store: {}",
                    job.job_id,
                    crate::base::error_chain::ErrorChain(&error)
                ),
            }
        }
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
