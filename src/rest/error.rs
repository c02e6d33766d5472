//! Every error the REST API answers, as JSON with its HTTP status and a message.
//!
//! Handlers return [`ApiError`]; actix-web's own refusals (a body that is not JSON or too large,
//! an unknown path, a method a path does not have) are turned into the same shape by the
//! handlers installed in [`super::configure`], so a client never sees an HTML or empty error.

use actix::MailboxError;
use actix_web::error::{JsonPayloadError, PathError, PayloadError};
use actix_web::http::StatusCode;
use actix_web::http::header::{ALLOW, WWW_AUTHENTICATE};
use actix_web::{HttpRequest, HttpResponse, ResponseError};

use super::auth::AuthError;
use super::views::ErrorBody;
use crate::base::ids::{IdParseError, ResourceId};
use crate::messages::job_manager::JobError;
use crate::messages::resource_manager::SetPoolSizeError;

/// Why a request was refused or could not be answered. A refused request changed nothing.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The body is not the JSON the endpoint takes (the message says where and what).
    #[error("malformed JSON: {detail}")]
    MalformedJson {
        /// What the parser said.
        detail: String,
    },
    /// The body could not be read (the client went away, a bad encoding).
    #[error("cannot read the request body: {detail}")]
    Body {
        /// What went wrong.
        detail: String,
    },
    /// The body is over the limit.
    #[error("the request body is over the limit of {limit} bytes")]
    TooLarge {
        /// The limit, in bytes.
        limit: usize,
    },
    /// A path parameter is not a valid id.
    #[error(transparent)]
    BadId(#[from] IdParseError),
    /// A path could not be decoded.
    #[error("bad path: {detail}")]
    BadPath {
        /// What the decoder said.
        detail: String,
    },
    /// A query string could not be decoded.
    #[error("bad query: {detail}")]
    BadQuery {
        /// What the decoder said.
        detail: String,
    },
    /// The pool size in the body is not a whole number from 0 to the maximum.
    #[error(
        "pool size {value} is not valid: expected a whole number from 0 to \
         resourcemanager.max-pool-size ({max})"
    )]
    InvalidPoolSize {
        /// What was sent, as JSON.
        value: String,
        /// `resourcemanager.max-pool-size`.
        max: u32,
    },
    /// The resource manager refused the pool size.
    #[error(transparent)]
    PoolSize(#[from] SetPoolSizeError),
    /// The JobManager refused a job request.
    #[error(transparent)]
    Job(#[from] JobError),
    /// No TaskManager with this id is registered.
    #[error("no TaskManager {0}")]
    UnknownTaskManager(ResourceId),
    /// No endpoint has this path.
    #[error("no endpoint {path}; see docs/rest.md for the REST API")]
    UnknownPath {
        /// The path asked for.
        path: String,
    },
    /// The path exists, but not with this method.
    #[error("{path} does not take {method}; it takes {allowed}")]
    MethodNotAllowed {
        /// The method used.
        method: String,
        /// The path.
        path: String,
        /// The methods it takes, as the `Allow` header lists them.
        allowed: &'static str,
    },
    /// The request addresses this server by a name that is not its own (DNS rebinding).
    #[error(
        "this server is not `{host}`: address it by its IP address or a name in rest.allowed-hosts"
    )]
    ForeignHost {
        /// The `Host` header.
        host: String,
    },
    /// A changing request made by a page of another origin.
    #[error("a changing request from the web page at `{origin}` is refused")]
    ForeignOrigin {
        /// The `Origin` header.
        origin: String,
    },
    /// A body that is not declared as JSON.
    #[error(
        "the request body must be sent as `Content-Type: application/json`, not {}",
        content_type.as_deref().map_or_else(|| "without a content type".to_owned(), |t| format!("`{t}`"))
    )]
    UnsupportedMediaType {
        /// The `Content-Type` header, if any.
        content_type: Option<String>,
    },
    /// The body did not arrive in time.
    #[error("the request body did not arrive within {after:?}")]
    BodyTimeout {
        /// The body deadline.
        after: std::time::Duration,
    },
    /// A changing endpoint without the right token.
    #[error(transparent)]
    Unauthorized(#[from] AuthError),
    /// An actor did not answer in time or is gone (the cluster is stopping or overloaded).
    /// Retryable, unless the cluster is stopping.
    #[error("the {actor} did not answer ({source}); the cluster may be stopping or overloaded")]
    Unavailable {
        /// Which actor.
        actor: &'static str,
        /// Closed mailbox or timeout.
        #[source]
        source: MailboxError,
    },
    /// An artifact could not be stored or found.
    #[error(transparent)]
    Artifact(#[from] crate::env::blob_store::BlobError),
    /// A job names an artifact that was never uploaded (or not at the size it names).
    #[error(
        "the job names artifact `{name}` (sha256 {digest}), which this cluster does not store: \
         upload it first (flint run --artifact PATH, or POST /artifacts)"
    )]
    MissingArtifact {
        /// The job's name for it.
        name: String,
        /// Its digest.
        digest: crate::base::blob_key::BlobKey,
    },
    /// This JobManager keeps no artifacts (an embedded cluster without a working directory).
    #[error("this JobManager has no artifact store")]
    NoArtifactStore,
    /// High availability: this JobManager stands by and no leader is known yet (an election is
    /// under way). Retryable.
    #[error("this JobManager stands by and no leader is elected yet; retry in a moment")]
    NoLeader,
    /// The pool size was set but could not be kept for the next leader (high availability):
    /// this leader runs with it, a new one would start from the previous size. Retryable.
    #[error(
        "the pool size was set to {size} but could not be persisted for the next leader; \
         set it again"
    )]
    PoolSizeNotPersisted {
        /// The size in effect.
        size: u32,
        /// Why it was not kept.
        #[source]
        source: crate::ha::HaError,
    },
}

impl ApiError {
    /// Translates the JSON extractor's refusals.
    pub fn from_json(error: JsonPayloadError) -> Self {
        match error {
            JsonPayloadError::OverflowKnownLength { limit, .. }
            | JsonPayloadError::Overflow { limit } => Self::TooLarge { limit },
            JsonPayloadError::Deserialize(error) => Self::MalformedJson {
                detail: error.to_string(),
            },
            JsonPayloadError::Payload(PayloadError::Overflow) => Self::TooLarge {
                limit: super::BODY_LIMIT,
            },
            JsonPayloadError::Payload(PayloadError::Io(error))
                if error.kind() == std::io::ErrorKind::TimedOut =>
            {
                let after = error
                    .get_ref()
                    .and_then(|inner| inner.downcast_ref::<super::guard::BodyTimedOut>())
                    .map_or(super::guard::DEFAULT_BODY_TIMEOUT, |timed_out| timed_out.0);
                Self::BodyTimeout { after }
            }
            JsonPayloadError::ContentType => Self::UnsupportedMediaType { content_type: None },
            JsonPayloadError::Payload(error) => Self::Body {
                detail: error.to_string(),
            },
            // Future variants of a non-exhaustive enum.
            other => Self::MalformedJson {
                detail: other.to_string(),
            },
        }
    }

    /// Translates the path extractor's refusals.
    pub fn from_path(error: PathError) -> Self {
        Self::BadPath {
            detail: error.to_string(),
        }
    }

    /// Translates the query extractor's refusals.
    pub fn from_query(error: actix_web::error::QueryPayloadError) -> Self {
        Self::BadQuery {
            detail: error.to_string(),
        }
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        match self {
            Self::MalformedJson { .. }
            | Self::Body { .. }
            | Self::BadId(_)
            | Self::BadPath { .. }
            | Self::BadQuery { .. }
            | Self::InvalidPoolSize { .. } => StatusCode::BAD_REQUEST,
            Self::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Self::PoolSize(SetPoolSizeError::AboveMaximum { .. }) => StatusCode::BAD_REQUEST,
            Self::PoolSize(SetPoolSizeError::Stopping) => StatusCode::CONFLICT,
            Self::Job(JobError::UnknownJob(_)) => StatusCode::NOT_FOUND,
            Self::Job(JobError::Rejected(_)) => StatusCode::BAD_REQUEST,
            Self::Job(JobError::Overloaded(_)) => StatusCode::SERVICE_UNAVAILABLE,
            Self::Job(JobError::AlreadyTerminal { .. }) => StatusCode::CONFLICT,
            Self::Job(JobError::ResultsUnreadable(_)) => StatusCode::INTERNAL_SERVER_ERROR,
            Self::UnknownTaskManager(_) | Self::UnknownPath { .. } => StatusCode::NOT_FOUND,
            Self::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            Self::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            Self::ForeignHost { .. } | Self::ForeignOrigin { .. } => StatusCode::FORBIDDEN,
            Self::UnsupportedMediaType { .. } => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::BodyTimeout { .. } => StatusCode::REQUEST_TIMEOUT,
            Self::Artifact(error) => {
                use crate::env::blob_store::BlobError;
                match error {
                    BlobError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
                    BlobError::DigestMismatch { .. } => StatusCode::BAD_REQUEST,
                    BlobError::NotFound { .. } => StatusCode::NOT_FOUND,
                    BlobError::Io { .. } => StatusCode::INTERNAL_SERVER_ERROR,
                }
            }
            Self::MissingArtifact { .. } => StatusCode::BAD_REQUEST,
            Self::NoArtifactStore => StatusCode::NOT_FOUND,
            Self::Unavailable { .. }
            | Self::NoLeader
            | Self::Job(JobError::NotPersisted(_))
            | Self::PoolSizeNotPersisted { .. } => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    fn error_response(&self) -> HttpResponse {
        let status = self.status_code();
        let mut response = HttpResponse::build(status);
        match self {
            Self::MethodNotAllowed { allowed, .. } => {
                response.insert_header((ALLOW, *allowed));
            }
            Self::Unauthorized(_) => {
                response.insert_header((WWW_AUTHENTICATE, "Bearer"));
            }
            _ => {}
        }
        // A standby answers 503 until a leader is known: expected, not worth a warning.
        if status.is_server_error() && !matches!(self, Self::NoLeader) {
            log::warn!("REST: {status}: {self}");
        }
        response.json(ErrorBody {
            status: status.as_u16(),
            error: status.canonical_reason().unwrap_or("Error").to_owned(),
            message: self.to_string(),
        })
    }
}

/// The default service: a path no endpoint has.
pub async fn unknown_path(req: HttpRequest) -> Result<HttpResponse, ApiError> {
    Err(ApiError::UnknownPath {
        path: req.path().to_owned(),
    })
}

/// A resource's default service: a method the path does not take.
pub fn method_not_allowed(req: &HttpRequest, allowed: &'static str) -> ApiError {
    ApiError::MethodNotAllowed {
        method: req.method().to_string(),
        path: req.path().to_owned(),
        allowed,
    }
}

#[cfg(test)]
mod tests {
    use actix_web::body::MessageBody;

    use super::*;
    use crate::base::ids::JobId;
    use crate::job::states::JobStatus;

    fn body(error: &ApiError) -> serde_json::Value {
        let bytes = error
            .error_response()
            .into_body()
            .try_into_bytes()
            .expect("a JSON body in one piece");
        serde_json::from_slice(&bytes).expect("JSON")
    }

    #[test]
    fn every_error_is_json_with_its_status_and_message() {
        let job = JobId::from_u128(7);
        let cases: Vec<(ApiError, u16)> = vec![
            (ApiError::Job(JobError::UnknownJob(job)), 404),
            (ApiError::Job(JobError::Rejected("no vertex".into())), 400),
            (
                ApiError::Job(JobError::AlreadyTerminal {
                    job_id: job,
                    status: JobStatus::Finished,
                }),
                409,
            ),
            (
                ApiError::PoolSize(SetPoolSizeError::AboveMaximum {
                    requested: 11,
                    max: 10,
                }),
                400,
            ),
            (ApiError::PoolSize(SetPoolSizeError::Stopping), 409),
            (
                ApiError::InvalidPoolSize {
                    value: "-1".into(),
                    max: 10,
                },
                400,
            ),
            (ApiError::UnknownTaskManager(ResourceId::new("tm-9")), 404),
            (ApiError::Unauthorized(AuthError::Missing), 401),
            (ApiError::TooLarge { limit: 16 }, 413),
            (
                ApiError::ForeignHost {
                    host: "rebind.evil.example".into(),
                },
                403,
            ),
            (
                ApiError::ForeignOrigin {
                    origin: "http://evil.example".into(),
                },
                403,
            ),
            (
                ApiError::UnsupportedMediaType {
                    content_type: Some("text/plain".into()),
                },
                415,
            ),
            (
                ApiError::BodyTimeout {
                    after: std::time::Duration::from_secs(10),
                },
                408,
            ),
            (
                ApiError::Unavailable {
                    actor: "JobManager",
                    source: MailboxError::Timeout,
                },
                503,
            ),
        ];
        for (error, status) in cases {
            let json = body(&error);
            assert_eq!(json["status"], status, "{error}");
            assert_eq!(json["message"], error.to_string());
            assert!(json["error"].as_str().is_some_and(|e| !e.is_empty()));
        }
    }

    #[test]
    fn refusals_say_what_to_do() {
        let error = ApiError::Unauthorized(AuthError::Missing);
        let response = error.error_response();
        assert_eq!(response.headers().get(WWW_AUTHENTICATE).unwrap(), "Bearer");
        let error = ApiError::MethodNotAllowed {
            method: "PATCH".into(),
            path: "/jobs".into(),
            allowed: "GET, POST",
        };
        assert_eq!(
            error.error_response().headers().get(ALLOW).unwrap(),
            "GET, POST"
        );
        assert_eq!(
            error.to_string(),
            "/jobs does not take PATCH; it takes GET, POST"
        );
        let error = ApiError::InvalidPoolSize {
            value: "-1".into(),
            max: 10,
        };
        assert!(
            error
                .to_string()
                .contains("resourcemanager.max-pool-size (10)")
        );
    }
}
