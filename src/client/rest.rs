//! A blocking HTTP client of the JobManager's REST API (`docs/rest.md`), on `ureq`.
//!
//! Blocking on purpose: a client command makes a handful of requests one after the other and
//! needs no actor system, so it runs before (and without) any actix `System`. Each call returns
//! the typed answer together with the body exactly as the server sent it, which is what
//! `--output json` prints.
//!
//! Every failure becomes a [`RestError`] that says what to do about it: an unreachable
//! JobManager names the URL tried, where that URL came from and how to point elsewhere; an error
//! answer keeps the server's own message (`no job 3f2a…`). [`RestError::exit_code`] sorts them
//! into the CLI's exit codes.
//!
//! HTTP proxies from the environment are ignored: the JobManager is on the cluster's own
//! network, and a proxy picked up from `http_proxy` would swallow requests to loopback.

use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use ureq::Agent;

use super::api::{
    ErrorBody, JobCancelled, JobList, JobResultsView, JobSubmitted, JobView, Message, Overview,
    PoolSize, PoolSizeSet, TaskManagerList,
};
use super::endpoint::Endpoint;
use super::exit;
use crate::base::ids::JobId;
use crate::job::graph::JobGraph;

/// How long connecting may take before the JobManager counts as unreachable.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a whole request may take (a large job graph, a slow JobManager).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// An answer of the REST API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer<T> {
    /// The answer, parsed.
    pub value: T,
    /// The answer as the server sent it.
    pub body: String,
}

/// Why a request did not get the answer it asked for.
#[derive(Debug, thiserror::Error)]
pub enum RestError {
    /// Nothing answered at the URL. Retryable once the JobManager runs, or with another URL.
    #[error(
        "cannot reach the JobManager at {url} ({source_name}): {reason}; is `flint jobmanager` \
         running there? Point elsewhere with --jobmanager URL, {env} or rest.address/rest.port \
         in --config FILE",
        env = super::endpoint::ENV_JOBMANAGER
    )]
    Unreachable {
        /// The base URL tried.
        url: String,
        /// Where the URL came from.
        source_name: String,
        /// What went wrong, for people.
        reason: String,
        /// The HTTP client's error.
        error: Box<ureq::Error>,
    },
    /// A JobManager (a standby) pointed the request at another origin. The token is sent only
    /// where it was configured to go, so the request stops here. Not retryable as is.
    #[error(
        "the JobManager at {url} points {request} at {target} (a standby names its leader); \
         Flint sends its token only to the JobManager it was told to use: if {target} is your \
         cluster's leader, repeat with --jobmanager {target_origin}, or give --config with the \
         high-availability settings (the CLI then asks ZooKeeper for the leader)"
    )]
    Redirected {
        /// The JobManager asked.
        url: String,
        /// The request.
        request: String,
        /// Where it pointed.
        target: String,
        /// The target's origin.
        target_origin: String,
    },
    /// The JobManager knows no such job or TaskManager (404). Not retryable.
    #[error("{message}")]
    NotFound {
        /// The server's message (`no job 3f2a…`).
        message: String,
    },
    /// The request needs a token and had none or a wrong one (401). Not retryable as is.
    #[error("{message}: {}", if *.token_sent {
        "the JobManager refused the token (from FLINT_REST_TOKEN, rest.token, rest.token-file \
         or, for a JobManager on this machine, ~/.local/state/flint/rest-token)"
    } else {
        "this request needs the JobManager's token: set FLINT_REST_TOKEN, or rest.token-file in \
         --config FILE (a JobManager on this machine started by you needs nothing: its \
         generated token is read from ~/.local/state/flint/rest-token)"
    })]
    Unauthorized {
        /// The server's message.
        message: String,
        /// Whether a token was sent.
        token_sent: bool,
    },
    /// The JobManager refused the request as invalid (400, 413): nothing changed. Not
    /// retryable as is.
    #[error("{message}")]
    Rejected {
        /// The HTTP status.
        status: u16,
        /// The server's message.
        message: String,
    },
    /// The request conflicts with the cluster's state (409: the job already ended, the cluster
    /// is stopping). Not retryable.
    #[error("{message}")]
    Conflict {
        /// The server's message.
        message: String,
    },
    /// The JobManager failed to answer the request (5xx, or a status the API does not use).
    /// Retryable for 503.
    #[error("the JobManager at {url} answered {request} with HTTP {status}: {message}")]
    Server {
        /// The base URL.
        url: String,
        /// `GET /jobs`.
        request: String,
        /// The HTTP status.
        status: u16,
        /// The server's message.
        message: String,
    },
    /// Connected, but no complete answer in time. Retryable.
    #[error(
        "the JobManager at {url} did not answer {request} within {}",
        humantime::format_duration(*.waited)
    )]
    NoAnswer {
        /// The base URL.
        url: String,
        /// `GET /jobs`.
        request: String,
        /// How long the client waited.
        waited: Duration,
    },
    /// Something answered, but not with Flint's REST API (another server on that port, or a
    /// version that disagrees with this client). Not retryable.
    #[error(
        "the server at {url} answered {request} with something that is not Flint's REST API \
         (another server on that port, or another Flint version?): {detail}"
    )]
    BadAnswer {
        /// The base URL.
        url: String,
        /// `GET /jobs`.
        request: String,
        /// What was wrong with it.
        detail: String,
    },
}

impl RestError {
    /// The CLI's exit code for this error (see [`super::exit`]).
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Unreachable { .. } => exit::UNREACHABLE,
            Self::NotFound { .. } => exit::NOT_FOUND,
            Self::Unauthorized { .. } | Self::Redirected { .. } => exit::UNAUTHORIZED,
            Self::Rejected { .. } => exit::USAGE,
            Self::Conflict { .. } => exit::CONFLICT,
            Self::Server { .. } | Self::NoAnswer { .. } | Self::BadAnswer { .. } => exit::CLUSTER,
        }
    }

    /// Whether the JobManager did not answer at all.
    pub fn is_unreachable(&self) -> bool {
        matches!(self, Self::Unreachable { .. })
    }
}

/// The largest answer read (ureq's default): every answer but a job's results is small.
const BODY_LIMIT: u64 = 10 << 20;

/// The largest job results read: what `collect()` sinks gathered, base64 in JSON, bounded by
/// the program's collect bounds (16 MiB of records by default).
pub const RESULTS_BODY_LIMIT: u64 = 1 << 30;

/// A request and its body.
enum Request<'a> {
    Get,
    Post(&'a str),
    Put(&'a str),
    Delete,
    /// A file's bytes, streamed (an artifact upload).
    Upload(&'a std::path::Path),
}

impl Request<'_> {
    fn method(&self) -> &'static str {
        match self {
            Self::Get => "GET",
            Self::Post(_) | Self::Upload(_) => "POST",
            Self::Put(_) => "PUT",
            Self::Delete => "DELETE",
        }
    }
}

/// How many standby-to-leader redirects one request follows.
const MAX_REDIRECTS: u32 = 3;

/// The REST API of one JobManager.
#[derive(Debug, Clone)]
pub struct RestClient {
    agent: Agent,
    endpoint: Endpoint,
}

impl RestClient {
    /// A client of the JobManager at `endpoint`. Connects only when asked something.
    pub fn new(endpoint: Endpoint) -> Self {
        let agent = Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(CONNECT_TIMEOUT))
            .timeout_global(Some(REQUEST_TIMEOUT))
            .proxy(None)
            // Redirects are followed by `call` itself: a standby JobManager (high availability)
            // answers 307 to the leader, and a POST's body must go along.
            .max_redirects(0)
            .user_agent(format!("flint/{}", env!("CARGO_PKG_VERSION")))
            .build()
            .into();
        Self { agent, endpoint }
    }

    /// The JobManager this client asks.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// `GET /overview`.
    pub fn overview(&self) -> Result<Answer<Overview>, RestError> {
        self.call(Request::Get, "/overview")
    }

    /// `GET /taskmanagers`.
    pub fn task_managers(&self) -> Result<Answer<TaskManagerList>, RestError> {
        self.call(Request::Get, "/taskmanagers")
    }

    /// `GET /jobs`.
    pub fn jobs(&self) -> Result<Answer<JobList>, RestError> {
        self.call(Request::Get, "/jobs")
    }

    /// `GET /jobs/{id}`.
    pub fn job(&self, id: JobId) -> Result<Answer<JobView>, RestError> {
        self.call(Request::Get, &format!("/jobs/{id}"))
    }

    /// `GET /jobs/{id}?subtasks=false`: the job and its vertices' counts, for a progress poll.
    pub fn job_progress(&self, id: JobId) -> Result<Answer<JobView>, RestError> {
        self.call(Request::Get, &format!("/jobs/{id}?subtasks=false"))
    }

    /// `GET /jobs/{id}?subtasks=false&wait=MS`: the same, answered when the job ends or after
    /// `wait` (a long poll; a JobManager that cannot wait answers at once).
    pub fn job_progress_waiting(
        &self,
        id: JobId,
        wait: Duration,
    ) -> Result<Answer<JobView>, RestError> {
        self.call(
            Request::Get,
            &format!("/jobs/{id}?subtasks=false&wait={}", wait.as_millis()),
        )
    }

    /// `GET /jobs/{id}/results`: what its `collect()` sinks gathered (up to
    /// [`RESULTS_BODY_LIMIT`], not the usual `BODY_LIMIT`).
    pub fn results(&self, id: JobId) -> Result<Answer<JobResultsView>, RestError> {
        self.call_within(
            Request::Get,
            &format!("/jobs/{id}/results"),
            RESULTS_BODY_LIMIT,
        )
    }

    /// `POST /jobs`: submits `graph`.
    pub fn submit(&self, graph: &JobGraph) -> Result<Answer<JobSubmitted>, RestError> {
        self.call(Request::Post(&to_json(graph)), "/jobs")
    }

    /// `POST /artifacts?sha256=DIGEST`: uploads the file at `path`, whose bytes hash to
    /// `digest` (checked by the JobManager before it stores anything).
    pub fn upload_artifact(
        &self,
        path: &std::path::Path,
        digest: &crate::base::blob_key::BlobKey,
    ) -> Result<Answer<crate::env::blob_store::BlobInfo>, RestError> {
        self.call(
            Request::Upload(path),
            &format!("/artifacts?sha256={digest}"),
        )
    }

    /// `GET /artifacts/{digest}`: the stored artifact, `None` if the JobManager lacks it.
    pub fn artifact(
        &self,
        digest: &crate::base::blob_key::BlobKey,
    ) -> Result<Option<crate::env::blob_store::BlobInfo>, RestError> {
        match self.call(Request::Get, &format!("/artifacts/{digest}")) {
            Ok(answer) => Ok(Some(answer.value)),
            Err(RestError::NotFound { .. }) => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// `GET /artifacts`.
    pub fn artifacts(&self) -> Result<Answer<crate::rest::ArtifactList>, RestError> {
        self.call(Request::Get, "/artifacts")
    }

    /// `DELETE /jobs/{id}`: cancels the job.
    pub fn cancel(&self, id: JobId) -> Result<Answer<JobCancelled>, RestError> {
        self.call(Request::Delete, &format!("/jobs/{id}"))
    }

    /// `GET /cluster/pool-size`.
    pub fn pool_size(&self) -> Result<Answer<PoolSize>, RestError> {
        self.call(Request::Get, "/cluster/pool-size")
    }

    /// `PUT /cluster/pool-size`: sets the designated pool size.
    pub fn set_pool_size(&self, size: u32) -> Result<Answer<PoolSizeSet>, RestError> {
        let body = to_json(&PoolSizeSet { size });
        self.call(Request::Put(&body), "/cluster/pool-size")
    }

    /// `DELETE /cluster`: stops the cluster.
    pub fn stop_cluster(&self) -> Result<Answer<Message>, RestError> {
        self.call(Request::Delete, "/cluster")
    }

    fn call<T: DeserializeOwned>(
        &self,
        request: Request<'_>,
        path: &str,
    ) -> Result<Answer<T>, RestError> {
        self.call_within(request, path, BODY_LIMIT)
    }

    /// [`call`](Self::call), reading an answer of at most `limit` bytes.
    fn call_within<T: DeserializeOwned>(
        &self,
        request: Request<'_>,
        path: &str,
        limit: u64,
    ) -> Result<Answer<T>, RestError> {
        let mut url = self.endpoint.url.join(path);
        let described = format!("{} {path}", request.method());
        let mut redirects = 0;
        let mut response = loop {
            let sent = match request {
                Request::Get => self.authorize(self.agent.get(&url)).call(),
                Request::Delete => self.authorize(self.agent.delete(&url)).call(),
                Request::Post(body) => self
                    .authorize(self.agent.post(&url))
                    .content_type("application/json")
                    .send(body),
                Request::Put(body) => self
                    .authorize(self.agent.put(&url))
                    .content_type("application/json")
                    .send(body),
                // No overall deadline: a large artifact takes what the link needs; a stall
                // is cut off by the server (and by the send timeout here).
                Request::Upload(path) => std::fs::File::open(path)
                    .map_err(ureq::Error::Io)
                    .and_then(|file| {
                        self.authorize(self.agent.post(&url))
                            .config()
                            .timeout_global(None)
                            .timeout_send_body(Some(REQUEST_TIMEOUT))
                            .build()
                            .content_type("application/octet-stream")
                            .send(file)
                    }),
            };
            let response = sent.map_err(|e| self.transport_error(e, &described))?;
            // A redirect within the same origin is followed (a few hops at most); one elsewhere
            // (a standby pointing at its leader) stops: the token goes only where configured.
            let location = response
                .headers()
                .get("location")
                .and_then(|value| value.to_str().ok());
            match (response.status().as_u16(), location) {
                (307 | 308, Some(location))
                    if super::endpoint::origin_of(location) != self.endpoint.url.origin() =>
                {
                    return Err(RestError::Redirected {
                        url: self.endpoint.url.to_string(),
                        request: described,
                        target: location.to_owned(),
                        target_origin: super::endpoint::origin_of(location).to_owned(),
                    });
                }
                (307 | 308, Some(location)) if redirects < MAX_REDIRECTS => {
                    url = location.to_owned();
                    redirects += 1;
                }
                _ => break response,
            }
        };
        let status = response.status().as_u16();
        let body = response
            .body_mut()
            .with_config()
            .limit(limit)
            .read_to_string()
            .map_err(|e| self.transport_error(e, &described))?;
        if !(200..300).contains(&status) {
            return Err(self.status_error(status, &body, described));
        }
        match serde_json::from_str(&body) {
            Ok(value) => Ok(Answer { value, body }),
            Err(error) => Err(RestError::BadAnswer {
                url: self.endpoint.url.to_string(),
                request: described,
                detail: format!("{error} in {}", excerpt(&body)),
            }),
        }
    }

    /// Adds the bearer token, if one is configured (every endpoint needs it, reads too unless
    /// the JobManager opened them with `rest.read-without-token`).
    fn authorize<B>(&self, builder: ureq::RequestBuilder<B>) -> ureq::RequestBuilder<B> {
        match &self.endpoint.token {
            Some(token) => builder.header("Authorization", format!("Bearer {token}")),
            None => builder,
        }
    }

    /// The error for a non-2xx answer, with the server's message when it sent one.
    fn status_error(&self, status: u16, body: &str, request: String) -> RestError {
        let message = match serde_json::from_str::<ErrorBody>(body) {
            Ok(error) => error.message,
            Err(_) => format!("HTTP {status}: {}", excerpt(body)),
        };
        match status {
            404 => RestError::NotFound { message },
            401 => RestError::Unauthorized {
                message,
                token_sent: self.endpoint.token.is_some(),
            },
            400 | 413 => RestError::Rejected { status, message },
            409 => RestError::Conflict { message },
            _ => RestError::Server {
                url: self.endpoint.url.to_string(),
                request,
                status,
                message,
            },
        }
    }

    /// The error for a request that got no (complete) HTTP answer.
    fn transport_error(&self, error: ureq::Error, request: &str) -> RestError {
        use ureq::Timeout;
        let url = self.endpoint.url.to_string();
        let unreachable = |reason: String, error| RestError::Unreachable {
            url: url.clone(),
            source_name: self.endpoint.source.to_string(),
            reason,
            error: Box::new(error),
        };
        match error {
            ureq::Error::Io(ref io) => {
                let reason = match io.kind() {
                    std::io::ErrorKind::ConnectionRefused => {
                        "connection refused (nothing listens there)".to_owned()
                    }
                    std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::ConnectionAborted
                    | std::io::ErrorKind::UnexpectedEof => {
                        "the connection was closed before an answer".to_owned()
                    }
                    _ => io.to_string(),
                };
                unreachable(reason, error)
            }
            ureq::Error::HostNotFound => unreachable("host not found".to_owned(), error),
            ureq::Error::ConnectionFailed => unreachable("connection failed".to_owned(), error),
            ureq::Error::Timeout(Timeout::Connect | Timeout::Resolve) => unreachable(
                format!(
                    "no connection within {}",
                    humantime::format_duration(CONNECT_TIMEOUT)
                ),
                error,
            ),
            ureq::Error::Timeout(_) => RestError::NoAnswer {
                url,
                request: request.to_owned(),
                waited: REQUEST_TIMEOUT,
            },
            other => RestError::BadAnswer {
                url,
                request: request.to_owned(),
                detail: other.to_string(),
            },
        }
    }
}

/// JSON of a request body. Serializing the client's own types cannot fail: they are plain
/// structs with string keys.
fn to_json(value: &impl Serialize) -> String {
    serde_json::to_string(value).unwrap_or_else(|e| unreachable!("serializable: {e}"))
}

/// The start of an answer, for an error message.
fn excerpt(body: &str) -> String {
    const MAX: usize = 200;
    let body = body.trim();
    if body.is_empty() {
        return "an empty body".to_owned();
    }
    match body.char_indices().nth(MAX) {
        Some((at, _)) => format!("`{}…`", &body[..at]),
        None => format!("`{body}`"),
    }
}

#[cfg(test)]
mod tests;
