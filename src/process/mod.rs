//! The `flint jobmanager` and `flint taskmanager` processes: the same actors as the embedded
//! cluster, on a [`NodeEndpoint`] so they reach each other over the authenticated transport.
//!
//! The JobManager process runs the JobManager and the resource manager; its `local_process`
//! driver starts `flint taskmanager` children, handing them the effective configuration (a 0600
//! TOML file in the JobManager's private working directory, read with `--ignore-env`;
//! `rest.token` left out) and the cluster secret (in the environment, byte for byte, never on
//! the command line). A TaskManager process only needs the JobManager's `host:port`.
//!
//! Each process makes its own private working directory ([`WorkingDir`], 0700, a fresh
//! unpredictable name): the JobManager's under `taskmanager.working-dir` (else the temporary
//! directory), its children's inside the JobManager's. Each is removed when its process stops
//! gracefully; a crashed one's is removed by the next process that starts there.
//!
//! Security: secure by default ([`credentials`]): a JobManager without a configured secret or
//! REST token uses this user's generated ones, and a TaskManager without a configured secret
//! the generated one of a JobManager of this user on this machine. Only `--insecure` runs
//! without a secret (then anyone who can reach the port can join the cluster).

pub mod allocator;
pub mod credentials;
pub mod failures;
pub mod run;

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::actors::Shutdown;
use crate::actors::node::{
    start_job_manager_node, start_task_manager_node, task_manager_spec, working_dir_parent,
};
use crate::actors::task_manager::registration::Leader;
use crate::actors::task_manager::{TaskManager, TaskManagerSettings};
use crate::base::clock::SystemClock;
use crate::base::ids::ResourceId;
use crate::base::rng::NodeRng;
use crate::cluster::leader_loop::{LeaderTerms, run_leader_loop};
use crate::config::{ClusterConfig, ConfigError};
use crate::drivers::{WorkerDriver, worker_driver};
use crate::env::blob_store::BlobStore;
use crate::env::events::EventSink;
use crate::env::working_dir::{WorkingDir, WorkingDirError, write_private_file};
use crate::env::{ArbiterSpawner, NodeEnv};
use crate::ha::JobGraphStore;
use crate::ha::zookeeper::{ZooKeeperLeaderElection, ZooKeeperLeaderRetrieval, ZooKeeperSettings};
use crate::messages::ActorAddress;
use crate::messages::job_manager::JobManagerGateway;
use crate::messages::resource_manager::{ResourceManagerGateway, StopCluster};
use crate::operators::OperatorRegistry;
use crate::rest::leader::LeaderSwitch;
use crate::rest::{RestError, RestListener, RestState};
use crate::rpc::endpoint::{EndpointConfig, NodeEndpoint};
use crate::transport::handshake::Secret;
use crate::transport::network::EndpointError;

/// The environment variable holding the cluster secret.
pub use crate::transport::handshake::SECRET_ENV;

/// Why a process could not run. Not retryable without changing its configuration.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// The artifact store cannot be opened.
    #[error(transparent)]
    Blob(#[from] crate::env::blob_store::BlobError),
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A TaskManager without a configured secret, and no JobManager of this user on this
    /// machine generated one.
    #[error(
        "no cluster secret: set {SECRET_ENV} or --secret-file to the cluster's secret (a \
         JobManager without one generates it in {generated}), or pass --insecure to accept \
         anyone who can connect"
    )]
    NoSecret {
        /// Where a generated secret would be.
        generated: PathBuf,
    },
    /// The generated credentials cannot be used (their directory or files are not private).
    #[error(transparent)]
    Credentials(#[from] credentials::CredentialsError),
    /// `job.allowed-paths` names a directory that cannot be resolved.
    #[error(transparent)]
    AllowedPaths(#[from] crate::env::files::FilesError),
    /// The secret file cannot be read.
    #[error("cannot read the secret file {path}")]
    SecretFile {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The private working directory cannot be created.
    #[error(transparent)]
    WorkingDir(#[from] WorkingDirError),
    /// The TLS files of `[transport.tls]` are unusable.
    #[error("cannot set up TLS")]
    Tls(#[from] crate::transport::tls::TlsError),
    /// The transport endpoint could not start.
    #[error("cannot start the transport endpoint")]
    Endpoint(#[from] EndpointError),
    /// The TaskManager stopped on its own: the JobManager refused its registration.
    #[error("TaskManager {resource_id} stopped: {reason}")]
    TaskManagerStopped {
        /// The TaskManager.
        resource_id: ResourceId,
        /// Why.
        reason: String,
    },
    /// The REST API could not start (`[rest]`).
    #[error("cannot start the REST API")]
    Rest(#[from] RestError),
    /// High availability could not start: the ZooKeeper quorum is unreachable, or the job
    /// graph store cannot be opened (`[high-availability]`).
    #[error("cannot start high availability")]
    HighAvailability(#[from] crate::ha::HaError),
    /// A TaskManager without `--jobmanager` and without high availability has no way to find
    /// its JobManager.
    #[error(
        "no JobManager to register at: pass --jobmanager HOST:PORT, or configure \
         high-availability.type = \"zookeeper\" (with its quorum) to find the leader"
    )]
    NoJobManager,
    /// The configuration could not be handed to the TaskManager children.
    #[error("cannot write the TaskManagers' configuration to {path}")]
    ChildConfig {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The TaskManager failed itself (a task that ignored its cancellation past
    /// `task.cancellation.timeout`): the process exits so its resource manager replaces it.
    #[error("the TaskManager stopped after a fatal error (see the log above)")]
    TaskManagerFailed,
}

/// Where a process's cluster secret came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretOrigin {
    /// `--secret-file` or `FLINT_SECRET`.
    Configured,
    /// `--insecure`: none at all.
    Insecure,
    /// This user's generated secret ([`credentials`]).
    Generated(credentials::Generated),
}

/// The configured secret: the bytes of `secret_file`, else of `FLINT_SECRET` (as they are: a
/// secret that is not UTF-8 is still the secret); an empty one counts as none.
fn configured_secret(secret_file: Option<&PathBuf>) -> Result<Option<Secret>, ProcessError> {
    let bytes = match secret_file {
        Some(path) => Some(
            std::fs::read(path).map_err(|source| ProcessError::SecretFile {
                path: path.clone(),
                source,
            })?,
        ),
        None => std::env::var_os(SECRET_ENV).map(std::os::unix::ffi::OsStringExt::into_vec),
    };
    Ok(bytes
        .filter(|bytes| !bytes.is_empty())
        .map(Secret::from_bytes))
}

/// The seed of a process's node: always from the operating system's entropy. `seed` replays a
/// simulated or embedded run; in a process it would make job ids, leader sessions, attempt and
/// data connection ids repeat across restarts (a restarted node could be served, or fence with,
/// an earlier incarnation's ids), so a process ignores it, saying so once.
fn process_seed(config: &ClusterConfig) -> u64 {
    if config.seed.is_some() {
        log::warn!(
            "`seed` is ignored by a flint process (it replays simulated and embedded runs); \
             this process draws its identifiers from the operating system"
        );
    }
    NodeRng::from_entropy().next_u64()
}

/// The configured secret, else none with `insecure`; `None` when neither decides.
fn configured_or_insecure(
    secret_file: Option<&PathBuf>,
    insecure: bool,
) -> Result<Option<(Secret, SecretOrigin)>, ProcessError> {
    Ok(match configured_secret(secret_file)? {
        Some(secret) => Some((secret, SecretOrigin::Configured)),
        None if insecure => Some((Secret::insecure(), SecretOrigin::Insecure)),
        None => None,
    })
}

/// A JobManager's cluster secret: configured, else none with `insecure`, else this user's
/// generated one (made now if there is none yet).
pub fn job_manager_secret(
    secret_file: Option<&PathBuf>,
    insecure: bool,
) -> Result<(Secret, SecretOrigin), ProcessError> {
    if let Some(chosen) = configured_or_insecure(secret_file, insecure)? {
        return Ok(chosen);
    }
    let (secret, generated) = credentials::LocalCredentials::of_process()?.secret_or_generate()?;
    Ok((secret, SecretOrigin::Generated(generated)))
}

/// A TaskManager's cluster secret: configured, else none with `insecure`, else the secret a
/// JobManager of this user generated on this machine ([`ProcessError::NoSecret`] if none did).
pub fn task_manager_secret(
    secret_file: Option<&PathBuf>,
    insecure: bool,
) -> Result<(Secret, SecretOrigin), ProcessError> {
    if let Some(chosen) = configured_or_insecure(secret_file, insecure)? {
        return Ok(chosen);
    }
    let local = credentials::LocalCredentials::of_process()?;
    match local.secret()? {
        Some(secret) => Ok((
            secret,
            SecretOrigin::Generated(credentials::Generated {
                path: local.secret_path(),
                new: false,
            }),
        )),
        None => Err(ProcessError::NoSecret {
            generated: local.secret_path(),
        }),
    }
}

/// A JobManager whose configuration sets neither `rest.token` nor `rest.token-file` serves
/// its REST API with this user's generated token: `rest.token-file` is pointed at it (made now
/// if there is none yet). `None` when a token is configured.
pub fn default_rest_token(
    config: &mut ClusterConfig,
) -> Result<Option<credentials::Generated>, ProcessError> {
    if config.rest.token.is_some() || config.rest.token_file.is_some() {
        return Ok(None);
    }
    let generated = credentials::LocalCredentials::of_process()?.token_or_generate()?;
    config.rest.token_file = Some(generated.path.clone());
    Ok(Some(generated))
}

fn endpoint_config(
    config: &ClusterConfig,
    bind: SocketAddr,
    advertise: Option<String>,
    name: &str,
    secret: Secret,
    seed: u64,
) -> Result<EndpointConfig, ProcessError> {
    let tls = config
        .transport
        .tls
        .as_ref()
        .map(crate::transport::tls::Tls::load)
        .transpose()?;
    Ok(EndpointConfig {
        bind,
        // A wildcard bind address cannot be reached: peers need the advertised host then.
        advertised_host: advertise,
        cluster_id: config.cluster.id.clone(),
        node_name: name.to_owned(),
        secret,
        handshake_timeout: Duration::from_secs(5),
        accept_timeout: crate::rpc::endpoint::DEFAULT_ACCEPT_TIMEOUT,
        ask_timeout: crate::transport::ASK_TIMEOUT,
        max_frame: crate::transport::frame::DEFAULT_MAX_FRAME,
        outbound_queue: 4096,
        max_inbound_in_flight: crate::rpc::endpoint::DEFAULT_MAX_INBOUND_IN_FLIGHT,
        seed,
        tls,
    })
}

/// What `flint jobmanager` runs with.
pub struct JobManagerOptions {
    /// The validated configuration.
    pub config: ClusterConfig,
    /// Where to listen.
    pub bind: SocketAddr,
    /// The host others reach it at, when `bind` is a wildcard address.
    pub advertise: Option<String>,
    /// The cluster secret.
    pub secret: Secret,
    /// The `flint` binary the TaskManager children run.
    pub program: PathBuf,
    /// The operators jobs may use: the built-ins and the binary's programs.
    pub registry: OperatorRegistry,
}

/// Where a started JobManager process can be reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobManagerReady {
    /// The `host:port` TaskManagers and transport clients reach it at.
    pub address: String,
    /// The base URL of its REST API and dashboard (`http://ADDR:PORT`).
    pub rest_url: String,
}

/// Runs the JobManager process until `shutdown` resolves or a client stops the cluster through
/// the REST API (`DELETE /cluster`); `ready` is called once it listens. Either way the resource
/// manager releases every worker before this returns.
pub async fn run_job_manager(
    options: JobManagerOptions,
    ready: impl FnOnce(&JobManagerReady),
    shutdown: impl Future<Output = ()>,
) -> Result<(), ProcessError> {
    let config = options.config;
    config.validate()?;
    // High availability: an unreachable quorum refuses to start, before anything binds.
    let zookeeper = match ZooKeeperSettings::of(&config, &options.secret) {
        Some(settings) => {
            let client = settings.connect().await?;
            Some((settings, client))
        }
        None => None,
    };
    // Bound first: a bad [rest] must refuse to start before any worker is.
    let rest = RestListener::bind(&config.rest)?;
    let seed = process_seed(&config);
    let secret_for_children = options.secret.clone();
    let (endpoint, resolver) = NodeEndpoint::bind(endpoint_config(
        &config,
        options.bind,
        options.advertise,
        "jobmanager",
        options.secret,
        seed,
    )?)
    .await?;
    let env = NodeEnv::new(
        "jobmanager",
        seed,
        Arc::new(SystemClock),
        Arc::new(ArbiterSpawner),
        resolver,
        // Only the REST server listens: a long poll of a job wakes on its end.
        EventSink::new(64),
    );
    // This process's private directory (0700): the children's configuration file (0600) and,
    // inside it, each child's own working directory, all removed when this returns.
    let dir = WorkingDir::create(&working_dir_parent(&config), "jm")?;
    let child_config = dir.path().join("taskmanager.toml");
    let mut for_children = config.clone();
    for_children.taskmanager.working_dir = Some(dir.path().to_owned());
    write_private_file(
        &child_config,
        for_children.to_toml_without_secrets().as_bytes(),
    )
    .map_err(|source| ProcessError::ChildConfig {
        path: child_config.clone(),
        source,
    })?;
    let program = options.program;
    let make_driver = || worker_driver(&config, &program, &child_config, &secret_for_children);
    if let Some((settings, client)) = zookeeper {
        let ha = HaProcess {
            config: &config,
            env,
            address: endpoint.local_node(),
            make_driver: &make_driver,
            settings,
            client,
            registry: options.registry.clone(),
        };
        let outcome = run_high_availability(ha, rest, ready, shutdown).await;
        endpoint.shutdown();
        remove_after_children(dir).await;
        return outcome;
    }
    let blobs = BlobStore::open(&dir.path().join("blobs"), config.blob.max_size)?;
    let events = env.events.clone();
    let node = start_job_manager_node(
        &config,
        options.registry.clone(),
        env,
        make_driver(),
        Some(blobs.clone()),
    );
    let state = RestState::new(
        JobManagerGateway::of(&node.job_manager),
        ResourceManagerGateway::of(&node.resource_manager),
        config.resourcemanager.max_pool_size,
    )
    .with_transport_metrics(endpoint.metrics())
    .with_blob_store(blobs)
    .with_events(events);
    let mut rest = rest.serve(state)?;
    ready(&JobManagerReady {
        address: endpoint.local_node(),
        rest_url: rest.url(),
    });
    tokio::select! {
        biased;
        () = shutdown => log::info!("jobmanager: shutting down"),
        () = rest.stop_requested() => log::info!("jobmanager: stopping the cluster (REST request)"),
    }
    let _ = node.resource_manager.send(StopCluster).await;
    let _ = node.job_manager.send(Shutdown).await;
    rest.stop().await;
    endpoint.shutdown();
    remove_after_children(dir).await;
    Ok(())
}

/// A JobManager process with `high-availability.type = "zookeeper"`.
struct HaProcess<'a> {
    config: &'a ClusterConfig,
    env: NodeEnv,
    /// The transport `host:port`.
    address: String,
    make_driver: &'a dyn Fn() -> Box<dyn WorkerDriver>,
    settings: ZooKeeperSettings,
    /// The session opened at start to check the quorum: the election's first.
    client: zookeeper_client::Client,
    /// The operators jobs may use.
    registry: OperatorRegistry,
}

/// Serves REST for the process's whole life (answering while leading, redirecting to the
/// leader while standing by) and runs the leader loop until `shutdown` or `DELETE /cluster`.
async fn run_high_availability(
    ha: HaProcess<'_>,
    rest: RestListener,
    ready: impl FnOnce(&JobManagerReady),
    shutdown: impl Future<Output = ()>,
) -> Result<(), ProcessError> {
    let storage_dir = ha
        .config
        .high_availability
        .storage_dir
        .clone()
        .unwrap_or_else(std::env::temp_dir);
    let store = JobGraphStore::open(&ha.settings, &storage_dir).await?;
    let job_results = crate::ha::job_result_store::directory(&storage_dir, &ha.settings.paths);
    let switch = LeaderSwitch::new();
    // Every leader serves the same artifacts: they live beside the job graphs.
    let blobs = BlobStore::open(&storage_dir.join("blobs"), ha.config.blob.max_size)?;
    let state = RestState::with_leader(switch.clone(), ha.config.resourcemanager.max_pool_size)
        .with_job_graph_store(store.clone())
        .with_blob_store(blobs.clone())
        .with_events(ha.env.events.clone());
    let mut rest = rest.serve(state)?;
    let rest_url = rest.url();
    switch.set_own_url(rest_url.clone());
    let follower = actix::spawn(crate::cluster::leader_loop::follow_leader_for_rest(
        ZooKeeperLeaderRetrieval::new(ha.settings.clone()),
        switch.clone(),
    ));
    ready(&JobManagerReady {
        address: ha.address.clone(),
        rest_url: rest_url.clone(),
    });
    let terms = LeaderTerms {
        config: ha.config,
        env: ha.env,
        address: ha.address,
        rest_url,
        make_driver: ha.make_driver,
        registry: ha.registry,
        job_results: &job_results,
        blobs: Some(blobs),
    };
    let election = ZooKeeperLeaderElection::with_client(ha.settings, ha.client);
    let stop = async {
        tokio::select! {
            biased;
            () = shutdown => log::info!("jobmanager: shutting down"),
            () = rest.stop_requested() => log::info!("jobmanager: stopping (REST request)"),
        }
    };
    run_leader_loop(election, terms, &store, &switch, stop).await;
    follower.abort();
    rest.stop().await;
    Ok(())
}

/// Removes the JobManager's working directory once its children are gone: they were killed by
/// `StopCluster`, but one may still be dying (and writing) for a moment, which would make a
/// removal fail on a directory that is not empty yet.
async fn remove_after_children(dir: WorkingDir) {
    for _ in 0..20 {
        match std::fs::remove_dir_all(dir.path()) {
            Ok(()) => return,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return,
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    // The last try is the WorkingDir's own, which logs why it failed.
    drop(dir);
}

/// What `flint taskmanager` runs with.
pub struct TaskManagerOptions {
    /// The validated configuration.
    pub config: ClusterConfig,
    /// The JobManager's `host:port`; `None`: found by leader retrieval (high availability).
    pub job_manager: Option<String>,
    /// Where to listen (other TaskManagers fetch results here).
    pub bind: SocketAddr,
    /// The host others reach it at, when `bind` is a wildcard address.
    pub advertise: Option<String>,
    /// This worker's id.
    pub resource_id: ResourceId,
    /// The cluster secret.
    pub secret: Secret,
    /// The operators it can run: the built-ins and the binary's programs.
    pub registry: OperatorRegistry,
}

/// Runs one TaskManager until `shutdown` resolves.
pub async fn run_task_manager(
    options: TaskManagerOptions,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ProcessError> {
    let config = options.config;
    config.validate()?;
    // Without --jobmanager, leader retrieval finds the leader; its quorum must answer now.
    let retrieval = match (
        &options.job_manager,
        ZooKeeperSettings::of(&config, &options.secret),
    ) {
        (Some(_), _) => None,
        (None, Some(settings)) => {
            drop(settings.connect().await?);
            Some(ZooKeeperLeaderRetrieval::new(settings))
        }
        (None, None) => return Err(ProcessError::NoJobManager),
    };
    // Before any task can run: file sources and sinks stay inside job.allowed-paths.
    crate::env::files::confine(&config.job.allowed_paths)?;
    let seed = process_seed(&config);
    let name = TaskManager::name_of(&options.resource_id);
    let (endpoint, resolver) = NodeEndpoint::bind(endpoint_config(
        &config,
        options.bind,
        options.advertise,
        &name,
        options.secret,
        seed,
    )?)
    .await?;
    let host = endpoint.local_node();
    let dir = WorkingDir::create(&working_dir_parent(&config), "tm")?;
    let env = NodeEnv::new(
        name,
        seed,
        Arc::new(SystemClock),
        Arc::new(ArbiterSpawner),
        resolver,
        EventSink::disabled(),
    )
    .with_task_runner(crate::actors::node::task_runner(&config));
    let hostname = host.split(':').next().unwrap_or("localhost").to_owned();
    let (fatal, fatal_error) = tokio::sync::oneshot::channel();
    let task_manager = start_task_manager_node(
        TaskManagerSettings {
            resource_id: options.resource_id.clone(),
            job_manager: options.job_manager.map(|address| Leader {
                address: ActorAddress::new(address, "jobmanager"),
                retrieved_session: None,
            }),
            spec: task_manager_spec(
                &config,
                options.registry.clone(),
                &hostname,
                dir.path().to_owned(),
            ),
        },
        env,
        None,
        Some(fatal),
    );
    log::info!("taskmanager {} listening on {host}", options.resource_id);
    let follower = retrieval.map(|retrieval| {
        actix::spawn(crate::ha::task_manager::follow_leader(
            retrieval,
            task_manager.clone().recipient(),
        ))
    });
    // The TaskManager stops on its own only after a fatal error (a refused registration, a task
    // that ignored its cancellation): then the process exits with an error, for its resource
    // manager to replace it (a stuck task's thread dies with it).
    let outcome = tokio::select! {
        biased;
        () = shutdown => Ok(()),
        fatal = fatal_error => Err(match fatal {
            Ok(reason) => ProcessError::TaskManagerStopped {
                resource_id: options.resource_id,
                reason,
            },
            Err(_) => ProcessError::TaskManagerFailed,
        }),
    };
    if let Some(follower) = follower {
        follower.abort();
    }
    let _ = task_manager.send(Shutdown).await;
    endpoint.shutdown();
    drop(dir);
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 32: with `seed` configured, every process (every incarnation of a node) still draws
    /// its own identifiers — data connection ids among them — so a TaskManager restarted at the
    /// same address is never served its earlier incarnation's data. (Embedded TaskManagers get a
    /// seed of their own from the driver's stream per start, simulated ones per incarnation.)
    #[test]
    fn a_process_draws_its_seed_from_the_os_whatever_seed_is_configured() {
        let config = ClusterConfig {
            seed: Some(7),
            ..Default::default()
        };
        assert_ne!(process_seed(&config), process_seed(&config));
    }
}
