//! The `flint jobmanager` and `flint taskmanager` processes: the same actors as the embedded
//! cluster, on a [`NodeEndpoint`] so they reach each other over the authenticated transport.
//!
//! The JobManager process runs the JobManager and the resource manager; its `local_process`
//! driver starts `flint taskmanager` children, handing them the effective configuration (a TOML
//! file in the working directory, read with `--ignore-env`; `rest.token` left out) and the
//! cluster secret (in the environment, never on the command line). A TaskManager process only needs the JobManager's `host:port`.
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
use crate::node::{start_job_manager_node, task_manager_spec};
use crate::operators::OperatorRegistry;
use crate::rest::{RestError, RestListener, RestState};
use crate::transport::handshake::Secret;
use crate::transport::remote::{EndpointConfig, EndpointError, NodeEndpoint};

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
        None => std::env::var(SECRET_ENV).ok().map(String::into_bytes),
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
    // The children get the effective configuration as a file next to their spill directories.
    let dir = config
        .taskmanager
        .working_dir
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join(format!("flint-{seed:016x}")));
    std::fs::create_dir_all(&dir).map_err(|source| ProcessError::ChildConfig {
        path: dir.clone(),
        source,
    })?;
    let child_config = dir.join("taskmanager.toml");
    std::fs::write(&child_config, config.to_toml_without_secrets()).map_err(|source| {
        ProcessError::ChildConfig {
            path: child_config.clone(),
            source,
        }
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
                template.env.push((
                    SECRET_ENV.to_owned(),
                    String::from_utf8_lossy(secret).into_owned(),
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
    Ok(())
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
            spec: task_manager_spec(&config, OperatorRegistry::with_builtins(), &hostname, seed),
        },
        env,
    )
    .start();
    log::info!("taskmanager {} listening on {host}", options.resource_id);
    shutdown.await;
    let _ = task_manager.send(Shutdown).await;
    endpoint.shutdown();
    Ok(())
}
