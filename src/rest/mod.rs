//! The JobManager's HTTP endpoint: the REST API of docs/rest.md, `/metrics`, and (added by the
//! dashboard) the web page at `/`.
//!
//! ```text
//!  RestListener::bind(&config.rest)   resolve rest.address, refuse to serve without a token
//!        │                            (any address), bind (before anything else starts)
//!        ▼
//!  .serve(RestState)  ── actix-web HttpServer, one worker thread ──▶ configure(): the routes
//!        │                handlers ask the actors through their gateways on every request
//!        ▼
//!  RestServer   url(), stop_requested() (DELETE /cluster), stop()
//! ```
//!
//! This module owns HTTP only: it never keeps a copy of the cluster's state (every answer is
//! asked of the actors when requested), never stops the cluster itself (`DELETE /cluster` asks
//! its owner, [`run_job_manager`](crate::process::run_job_manager), through
//! [`RestServer::stop_requested`]), and never logs a token. Production-only code: the server
//! runs on actix-web's own threads, outside any simulation.

mod artifacts;
mod auth;
pub mod dashboard;
mod error;
pub mod guard;
mod handlers;
pub mod leader;
pub mod prometheus;
pub mod views;

use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use std::path::PathBuf;

use actix_web::dev::ServerHandle;
use actix_web::{App, HttpRequest, HttpServer, web};

pub use artifacts::ArtifactList;
pub use auth::{AuthError, Token};
pub use error::ApiError;

use crate::base::clock::{Clock, SystemClock};
use crate::base::latch::Latch;
use crate::config::RestConfig;
use crate::messages::job_manager::JobManagerGateway;
use crate::messages::resource_manager::ResourceManagerGateway;
use crate::transport::metrics::TransportMetrics;

/// The largest request body (a job graph), as docs/rest.md promises: 16 MiB.
pub const BODY_LIMIT: usize = 16 << 20;

/// How long a stopping server waits for open connections (a browser's keep-alive ones) before
/// closing them.
const SHUTDOWN_TIMEOUT_SECS: u64 = 1;

/// Why the REST endpoint could not start. Not retryable without changing `[rest]` (or freeing
/// the port).
#[derive(Debug, thiserror::Error)]
pub enum RestError {
    /// `rest.address` does not resolve.
    #[error("rest.address `{address}` does not resolve to an IP address")]
    Resolve {
        /// `rest.address:rest.port`.
        address: String,
        /// Why, if the resolver said.
        #[source]
        source: Option<std::io::Error>,
    },
    /// Every endpoint needs a token, and none is configured.
    #[error(
        "the REST API on {address} needs a token: set rest.token-file (or rest.token); flint \
         jobmanager uses this user's generated one when neither is set"
    )]
    TokenRequired {
        /// The address asked for.
        address: SocketAddr,
    },
    /// `rest.token` is set but empty.
    #[error("rest.token is empty: set a non-empty token")]
    EmptyToken,
    /// `rest.token-file` cannot be read.
    #[error("cannot read rest.token-file {path}")]
    TokenFile {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Both `rest.token` and `rest.token-file` are set: which one holds is not a guess to make.
    #[error("rest.token and rest.token-file are both set: keep one")]
    TwoTokens,
    /// The address could not be bound (in use, not ours).
    #[error("cannot listen on {address} for the REST API (rest.address, rest.port)")]
    Bind {
        /// The address asked for.
        address: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// What the handlers share: how to reach the actors, and the few settings they need. Holds
/// gateways, not state: every request asks the actors afresh.
pub struct RestState {
    /// The actors asked, unless a leader switch names them.
    gateways: Option<Gateways>,
    /// High availability: whether this process leads (serve) or stands by (redirect).
    leader: Option<leader::LeaderSwitch>,
    /// High availability: where the pool size an operator sets is kept for the next leader
    /// (the JobManager itself persists job graphs before their jobs run).
    job_graph_store: Option<crate::ha::JobGraphStore>,
    /// Where uploaded artifacts go (`POST /artifacts`), and what a submitted job's artifacts
    /// are checked against.
    blob_store: Option<crate::env::blob_store::BlobStore>,
    max_pool_size: u32,
    transport: TransportMetrics,
    clock: Arc<dyn Clock>,
    ask_timeout: Duration,
    token: Option<Token>,
    /// `rest.read-without-token`.
    read_open: bool,
    allowed_hosts: guard::AllowedHosts,
    body_timeout: Duration,
    stop: Latch<()>,
    /// This process's cluster events: a `GET /jobs/{id}?wait=MS` answers as soon as the job
    /// ends, not at the caller's next poll (none: it answers at once).
    events: Option<crate::env::events::EventSink>,
}

impl RestState {
    /// The state for a JobManager and its resource manager. `max_pool_size` is
    /// `resourcemanager.max-pool-size` (for `GET /cluster/pool-size` and error messages).
    pub fn new(
        job_manager: JobManagerGateway,
        resource_manager: ResourceManagerGateway,
        max_pool_size: u32,
    ) -> Self {
        let mut state = Self::with_gateways(None, max_pool_size);
        state.gateways = Some(Gateways {
            job_manager,
            resource_manager,
        });
        state
    }

    /// High availability: the state of a JobManager process that serves whichever actors
    /// `switch` says lead now, and redirects to the leader while it stands by.
    pub fn with_leader(switch: leader::LeaderSwitch, max_pool_size: u32) -> Self {
        Self::with_gateways(Some(switch), max_pool_size)
    }

    fn with_gateways(leader: Option<leader::LeaderSwitch>, max_pool_size: u32) -> Self {
        Self {
            gateways: None,
            leader,
            job_graph_store: None,
            blob_store: None,
            max_pool_size,
            transport: TransportMetrics::new(),
            clock: Arc::new(SystemClock),
            ask_timeout: crate::transport::ASK_TIMEOUT,
            token: None,
            read_open: false,
            allowed_hosts: guard::AllowedHosts::default(),
            body_timeout: guard::DEFAULT_BODY_TIMEOUT,
            stop: Latch::new(),
            events: None,
        }
    }

    /// Lets `GET /jobs/{id}?wait=MS` hold its answer until the job ends (at most MS), woken by
    /// the `JobTerminated` events of `events` (the JobManager's sink in this process).
    pub fn with_events(mut self, events: crate::env::events::EventSink) -> Self {
        self.events = Some(events);
        self
    }

    /// A receiver of this process's events from now on, if it has any.
    fn subscribe_events(
        &self,
    ) -> Option<tokio::sync::broadcast::Receiver<crate::env::events::ClusterEvent>> {
        self.events.as_ref().and_then(|events| events.subscribe())
    }

    /// Reports these transport counters at `/metrics` (without, they stay at zero: an embedded
    /// cluster has no transport).
    pub fn with_transport_metrics(mut self, transport: TransportMetrics) -> Self {
        self.transport = transport;
        self
    }

    /// Reads wall time (for `time-since-last-heartbeat`) from `clock`.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Waits at most `timeout` for an actor's answer (then 503).
    pub fn with_ask_timeout(mut self, timeout: Duration) -> Self {
        self.ask_timeout = timeout;
        self
    }

    /// Gives a request body at most `timeout` to arrive (then 408).
    pub fn with_body_timeout(mut self, timeout: Duration) -> Self {
        self.body_timeout = timeout;
        self
    }

    /// High availability: keeps the pool size an operator sets in `store`, for the next leader.
    pub fn with_job_graph_store(mut self, store: crate::ha::JobGraphStore) -> Self {
        self.job_graph_store = Some(store);
        self
    }

    /// Stores uploaded artifacts in `store`, and refuses jobs naming artifacts it lacks.
    pub fn with_blob_store(mut self, store: crate::env::blob_store::BlobStore) -> Self {
        self.blob_store = Some(store);
        self
    }

    /// The actors to ask now: the fixed ones, or (HA) the current leader's.
    fn gateways(&self) -> Result<Gateways, ApiError> {
        match &self.leader {
            Some(switch) => switch.leading().ok_or(ApiError::NoLeader),
            None => self.gateways.clone().ok_or(ApiError::NoLeader),
        }
    }

    /// Asks the owner to stop the cluster (`DELETE /cluster`).
    fn request_stop(&self) {
        self.stop.set(());
    }
}

/// The actors a request is answered by.
#[derive(Clone)]
pub struct Gateways {
    /// The JobManager.
    pub job_manager: JobManagerGateway,
    /// Its resource manager.
    pub resource_manager: ResourceManagerGateway,
}

/// Every route of the JobManager's HTTP endpoint, with JSON errors for everything actix-web
/// refuses by itself. The handlers find their [`RestState`] as `web::Data<RestState>`.
pub fn configure(cfg: &mut web::ServiceConfig) {
    use actix_web::web::{delete, get, post, put};
    cfg.app_data(
        web::JsonConfig::default()
            .limit(BODY_LIMIT)
            // Only JSON: a form or text body is what a cross-site page can send without a
            // preflight (the guard refuses it first, with the same 415).
            .content_type_required(true)
            .error_handler(|error, _| ApiError::from_json(error).into()),
    )
    .app_data(web::PayloadConfig::default().limit(BODY_LIMIT))
    .app_data(
        web::PathConfig::default().error_handler(|error, _| ApiError::from_path(error).into()),
    )
    .app_data(
        web::QueryConfig::default().error_handler(|error, _| ApiError::from_query(error).into()),
    )
    .service(resource("/overview", "GET").route(get().to(handlers::overview)))
    .service(resource("/taskmanagers", "GET").route(get().to(handlers::task_managers)))
    .service(resource("/taskmanagers/{id}", "GET").route(get().to(handlers::task_manager)))
    .service(
        resource("/jobs", "GET, POST")
            .route(get().to(handlers::jobs))
            .route(post().to(handlers::submit_job)),
    )
    .service(
        resource("/jobs/{id}", "GET, DELETE")
            .route(get().to(handlers::job))
            .route(delete().to(handlers::cancel_job)),
    )
    .service(resource("/jobs/{id}/results", "GET").route(get().to(handlers::job_results)))
    .service(
        resource("/artifacts", "GET, POST")
            .route(get().to(artifacts::list))
            .route(post().to(artifacts::upload)),
    )
    .service(resource("/artifacts/{digest}", "GET").route(get().to(artifacts::show)))
    .service(
        resource("/cluster/pool-size", "GET, PUT")
            .route(get().to(handlers::pool_size))
            .route(put().to(handlers::set_pool_size)),
    )
    .service(resource("/cluster", "DELETE").route(delete().to(handlers::stop_cluster)))
    .service(resource("/metrics", "GET").route(get().to(handlers::metrics)))
    .configure(dashboard::configure)
    .default_service(web::to(error::unknown_path));
}

/// A path whose other methods are answered with 405 and an `Allow: allowed` header.
fn resource(path: &str, allowed: &'static str) -> actix_web::Resource {
    web::resource(path).default_service(web::to(move |req: HttpRequest| async move {
        Err::<actix_web::HttpResponse, _>(error::method_not_allowed(&req, allowed))
    }))
}

/// `ADDR:PORT` as `--rest` takes it: a host name or IP (IPv6 in brackets) and a port.
pub fn parse_address(text: &str) -> Result<(String, u16), String> {
    let (host, port) = text
        .rsplit_once(':')
        .ok_or_else(|| format!("`{text}` is not ADDR:PORT (e.g. 127.0.0.1:8081)"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err(format!("`{text}` has no address (e.g. 127.0.0.1:8081)"));
    }
    let port = port
        .parse()
        .map_err(|_| format!("`{port}` in `{text}` is not a port (0 to 65535)"))?;
    Ok((host.to_owned(), port))
}

/// The REST endpoint's socket, bound and checked but not serving yet: binding first lets a
/// JobManager refuse a bad `[rest]` before it starts any worker.
#[derive(Debug)]
pub struct RestListener {
    listener: TcpListener,
    address: SocketAddr,
    token: Token,
    read_open: bool,
    allowed_hosts: guard::AllowedHosts,
}

impl RestListener {
    /// Resolves `rest.address` (the first address it names), refuses to serve without a token
    /// (`rest.token` or `rest.token-file`) on any address, and binds `rest.port` (0: any free
    /// port).
    pub fn bind(config: &RestConfig) -> Result<Self, RestError> {
        let shown = format!("{}:{}", config.address, config.port);
        let address = (config.address.as_str(), config.port)
            .to_socket_addrs()
            .map_err(|source| RestError::Resolve {
                address: shown.clone(),
                source: Some(source),
            })?
            .next()
            .ok_or(RestError::Resolve {
                address: shown,
                source: None,
            })?;
        let secret = match (&config.token, &config.token_file) {
            (Some(_), Some(_)) => return Err(RestError::TwoTokens),
            (Some(token), None) => Some(token.as_bytes().to_vec()),
            (None, Some(path)) => Some(read_token_file(path)?),
            (None, None) => None,
        };
        let token = match secret {
            Some(secret) if secret.is_empty() => return Err(RestError::EmptyToken),
            Some(secret) => Token::new(&secret),
            None => return Err(RestError::TokenRequired { address }),
        };
        let listener =
            TcpListener::bind(address).map_err(|source| RestError::Bind { address, source })?;
        let address = listener
            .local_addr()
            .map_err(|source| RestError::Bind { address, source })?;
        let allowed_hosts =
            guard::AllowedHosts::new(address, &config.address, &config.allowed_hosts);
        Ok(Self {
            listener,
            address,
            token,
            read_open: config.read_without_token,
            allowed_hosts,
        })
    }

    /// The address it listens on (the real port when `rest.port` was 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.address
    }

    /// Starts serving `state` on actix-web's worker thread; the server's own task runs on the
    /// current arbiter (it must be inside an actix System).
    pub fn serve(self, mut state: RestState) -> Result<RestServer, RestError> {
        state.token = Some(self.token);
        state.read_open = self.read_open;
        state.allowed_hosts = self.allowed_hosts;
        let stop_requested = state.stop.clone();
        let state = web::Data::new(state);
        let address = self.address;
        let server = HttpServer::new(move || {
            App::new()
                .app_data(state.clone())
                .wrap(actix_web::middleware::from_fn(guard::guard))
                .configure(configure)
        })
        .workers(1)
        // Stopping is the JobManager process's decision, not actix-web's signal handler's.
        .disable_signals()
        .shutdown_timeout(SHUTDOWN_TIMEOUT_SECS)
        .listen(self.listener)
        .map_err(|source| RestError::Bind { address, source })?
        .run();
        let handle = server.handle();
        let task = actix::spawn(async move {
            if let Err(error) = server.await {
                log::error!("REST: the server stopped with an error: {error}");
            }
        });
        log::info!("REST API listening on http://{address}");
        Ok(RestServer {
            address,
            handle,
            task,
            stop_requested,
        })
    }
}

/// The token in `path`: its bytes, without one trailing newline (`echo token > file`).
fn read_token_file(path: &std::path::Path) -> Result<Vec<u8>, RestError> {
    let mut bytes = std::fs::read(path).map_err(|source| RestError::TokenFile {
        path: path.to_owned(),
        source,
    })?;
    if bytes.ends_with(b"\n") {
        bytes.pop();
        if bytes.ends_with(b"\r") {
            bytes.pop();
        }
    }
    Ok(bytes)
}

/// A running REST endpoint. Dropping it without [`stop`](Self::stop) leaves it serving until
/// its arbiter stops.
#[derive(Debug)]
pub struct RestServer {
    address: SocketAddr,
    handle: ServerHandle,
    task: tokio::task::JoinHandle<()>,
    stop_requested: Latch<()>,
}

impl RestServer {
    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.address
    }

    /// `http://ADDR:PORT`, the base URL of the API and the dashboard.
    pub fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// Resolves once `DELETE /cluster` asked the cluster to stop (at once if it has).
    pub async fn stop_requested(&mut self) {
        // Never abandoned: only `DELETE /cluster` settles it.
        self.stop_requested.wait().await;
    }

    /// Stops serving: no new connections, requests in progress are answered, open connections
    /// get `SHUTDOWN_TIMEOUT_SECS` to finish.
    pub async fn stop(self) {
        self.handle.stop(true).await;
        // The server future ends right after its handle's stop; nothing to report if it
        // panicked (it logged) or was cancelled with its arbiter.
        let _ = self.task.await;
        log::info!("REST API on http://{} stopped", self.address);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rest_addresses_are_host_and_port() {
        assert_eq!(
            parse_address("127.0.0.1:8081"),
            Ok(("127.0.0.1".to_owned(), 8081))
        );
        assert_eq!(
            parse_address("localhost:0"),
            Ok(("localhost".to_owned(), 0))
        );
        assert_eq!(parse_address("[::1]:9000"), Ok(("::1".to_owned(), 9000)));
        for bad in ["127.0.0.1", ":8081", "host:port", "host:70000"] {
            let error = parse_address(bad).expect_err(bad);
            assert!(error.contains(bad) || error.contains("port"), "{error}");
        }
    }
}
