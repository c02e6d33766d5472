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
//! Security: a node without a secret binds only loopback addresses unless started with
//! `--insecure` (then anyone who can reach the port can join the cluster).

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use actix::Actor;

use crate::actors::Shutdown;
use crate::actors::registration::Leader;
use crate::actors::task_manager::{TaskManager, TaskManagerSettings};
use crate::config::{ClusterConfig, ConfigError, DriverKind};
use crate::drivers::WorkerDriver;
use crate::drivers::local_process::{LocalProcessDriver, ProcessTemplate};
use crate::drivers::standalone::StandaloneDriver;
use crate::env::{ArbiterSpawner, NodeEnv, NodeRng, SystemClock};
use crate::events::EventSink;
use crate::messages::ActorAddress;
use crate::messages::ids::ResourceId;
use crate::messages::job_manager::JobManagerGateway;
use crate::messages::resource_manager::{ResourceManagerGateway, StopCluster};
use crate::node::{start_job_manager_node, task_manager_spec, working_dir_parent};
use crate::operators::OperatorRegistry;
use crate::rest::{RestError, RestListener, RestState};
use crate::transport::handshake::Secret;
use crate::transport::remote::{EndpointConfig, EndpointError, NodeEndpoint};
use crate::working_dir::{WorkingDir, WorkingDirError, write_private_file};

/// The environment variable holding the cluster secret.
pub const SECRET_ENV: &str = "FLINT_SECRET";

/// Why a process could not run. Not retryable without changing its configuration.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// No secret, and the bind address is not loopback.
    #[error(
        "no cluster secret ({SECRET_ENV} or --secret-file) while binding {bind}: a node without a \
         secret only binds loopback addresses; pass --insecure to accept anyone who can connect"
    )]
    NoSecret {
        /// The address asked for.
        bind: SocketAddr,
    },
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
    /// The REST API could not start (`[rest]`).
    #[error("cannot start the REST API")]
    Rest(#[from] RestError),
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

/// The cluster secret: from `secret_file`, else `FLINT_SECRET`; none is only allowed on a
/// loopback address or with `insecure`.
pub fn load_secret(
    secret_file: Option<&PathBuf>,
    insecure: bool,
    bind: SocketAddr,
) -> Result<Secret, ProcessError> {
    let secret = match secret_file {
        Some(path) => Some(
            std::fs::read(path).map_err(|source| ProcessError::SecretFile {
                path: path.clone(),
                source,
            })?,
        ),
        // As bytes: a secret that is not UTF-8 is still the secret, never "no secret".
        None => std::env::var_os(SECRET_ENV).map(std::os::unix::ffi::OsStringExt::into_vec),
    };
    match secret {
        Some(bytes) if !bytes.is_empty() => Ok(Secret::from_bytes(bytes)),
        _ if insecure || bind.ip().is_loopback() => Ok(Secret::insecure()),
        _ => Err(ProcessError::NoSecret { bind }),
    }
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
        accept_timeout: crate::transport::remote::DEFAULT_ACCEPT_TIMEOUT,
        ask_timeout: crate::node::ASK_TIMEOUT,
        max_frame: crate::transport::frame::DEFAULT_MAX_FRAME,
        outbound_queue: 4096,
        max_inbound_in_flight: crate::transport::remote::DEFAULT_MAX_INBOUND_IN_FLIGHT,
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
    // Bound first: a bad [rest] must refuse to start before any worker is.
    let rest = RestListener::bind(&config.rest)?;
    let seed = config
        .seed
        .unwrap_or_else(|| NodeRng::from_entropy().next_u64());
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
        EventSink::disabled(),
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
    let driver: Box<dyn WorkerDriver> = match config.resourcemanager.driver {
        DriverKind::Standalone => Box::new(StandaloneDriver),
        kind => {
            let mut template = match kind {
                DriverKind::Command => {
                    let command = &config.resourcemanager.command;
                    ProcessTemplate {
                        program: PathBuf::from(&command.template[0]),
                        args: command.template[1..].to_vec(),
                        env: Vec::new(),
                        slots: config.taskmanager.slots,
                        hosts: command.hosts.clone(),
                    }
                }
                _ => {
                    let mut template = ProcessTemplate::flint_taskmanager(
                        options.program,
                        config.taskmanager.slots,
                    );
                    // The file is the whole configuration: the children inherit this process's
                    // environment, whose FLINT_* variables must not override its flags.
                    template.args.extend([
                        "--config".to_owned(),
                        child_config.display().to_string(),
                        "--ignore-env".to_owned(),
                    ]);
                    template
                }
            };
            if let Some(secret) = secret_for_children.expose() {
                // Byte for byte: the children must prove exactly the parent's secret.
                template.env.push((
                    SECRET_ENV.to_owned(),
                    std::os::unix::ffi::OsStringExt::from_vec(secret.to_vec()),
                ));
            } else if kind == DriverKind::LocalProcess {
                template.args.push("--insecure".to_owned());
            }
            Box::new(LocalProcessDriver::new(template))
        }
    };
    let node = start_job_manager_node(&config, OperatorRegistry::with_builtins(), env, driver);
    let state = RestState::new(
        JobManagerGateway::of(&node.job_manager),
        ResourceManagerGateway::of(&node.resource_manager),
        config.resourcemanager.max_pool_size,
    )
    .with_transport_metrics(endpoint.metrics());
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
    /// The JobManager's `host:port`.
    pub job_manager: String,
    /// Where to listen (other TaskManagers fetch results here).
    pub bind: SocketAddr,
    /// The host others reach it at, when `bind` is a wildcard address.
    pub advertise: Option<String>,
    /// This worker's id.
    pub resource_id: ResourceId,
    /// The cluster secret.
    pub secret: Secret,
}

/// Runs one TaskManager until `shutdown` resolves.
pub async fn run_task_manager(
    options: TaskManagerOptions,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ProcessError> {
    let config = options.config;
    config.validate()?;
    let seed = config
        .seed
        .unwrap_or_else(|| NodeRng::from_entropy().next_u64());
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
    );
    let hostname = host.split(':').next().unwrap_or("localhost").to_owned();
    let task_manager = TaskManager::new(
        TaskManagerSettings {
            resource_id: options.resource_id.clone(),
            job_manager: Some(Leader {
                address: ActorAddress::new(options.job_manager, "jobmanager"),
                retrieved_session: None,
            }),
            spec: task_manager_spec(
                &config,
                OperatorRegistry::with_builtins(),
                &hostname,
                dir.path().to_owned(),
            ),
        },
        env,
    )
    .start();
    log::info!("taskmanager {} listening on {host}", options.resource_id);
    // The TaskManager stops on its own only after a fatal error: then the process exits, with
    // an error, for its resource manager to replace it (a stuck task's thread dies with it).
    let failed = {
        let task_manager = task_manager.clone();
        async move {
            let mut every = tokio::time::interval(std::time::Duration::from_millis(100));
            while task_manager.connected() {
                every.tick().await;
            }
        }
    };
    let outcome = tokio::select! {
        biased;
        () = shutdown => {
            let _ = task_manager.send(Shutdown).await;
            Ok(())
        }
        () = failed => Err(ProcessError::TaskManagerFailed),
    };
    endpoint.shutdown();
    drop(dir);
    outcome
}
