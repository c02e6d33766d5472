//! `POST /artifacts` and `GET /artifacts`: the JobManager's blob store over HTTP, and the check
//! that a submitted job names only stored artifacts.
//!
//! An upload streams into the store chunk by chunk (each write on actix-web's blocking pool,
//! never on the REST thread), within `blob.max-size`; a client that names the digest it
//! expects (`?sha256=`) has it checked before anything is stored. A cut-off or refused upload
//! stores nothing.

use actix_web::{HttpResponse, web};
use futures_util::StreamExt as _;
use serde::Deserialize;

use super::RestState;
use super::auth::Authorized;
use super::error::ApiError;
use crate::base::blob_key::BlobKey;
use crate::env::blob_store::{BlobError, BlobInfo, BlobStore, BlobUpload};
use crate::job::graph::JobGraph;

/// The query of `POST /artifacts`.
#[derive(Debug, Deserialize)]
pub struct UploadQuery {
    /// The SHA-256 the client computed: a different one arriving is refused.
    sha256: Option<String>,
}

/// `GET /artifacts`'s answer.
#[derive(Debug, serde::Serialize, Deserialize)]
pub struct ArtifactList {
    /// Every stored artifact, by digest.
    pub artifacts: Vec<BlobInfo>,
}

fn store(state: &RestState) -> Result<&BlobStore, ApiError> {
    state.blob_store.as_ref().ok_or(ApiError::NoArtifactStore)
}

/// A digest from a request (query or path): 400 unless it is 64 hex digits.
fn parse_digest(text: &str) -> Result<BlobKey, ApiError> {
    text.parse().map_err(
        |error: crate::base::blob_key::BlobKeyError| ApiError::BadQuery {
            detail: error.to_string(),
        },
    )
}

/// Runs `work` on the blocking pool (file I/O stays off the REST thread).
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, BlobError> + Send + 'static,
) -> Result<T, ApiError> {
    web::block(work)
        .await
        .map_err(|error| ApiError::Body {
            detail: error.to_string(),
        })?
        .map_err(ApiError::from)
}

/// `POST /artifacts[?sha256=HEX]` with the artifact's bytes as an `application/octet-stream`
/// body: 201 with its digest and size.
pub async fn upload(
    _: Authorized,
    state: web::Data<RestState>,
    query: web::Query<UploadQuery>,
    mut body: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let expected = query.sha256.as_deref().map(parse_digest).transpose()?;
    let store = store(&state)?.clone();
    let mut upload: BlobUpload = blocking(move || store.upload()).await?;
    while let Some(chunk) = body.next().await {
        // A cut-off or timed-out body drops the upload: nothing is stored.
        let chunk = chunk.map_err(|error| {
            ApiError::from_json(actix_web::error::JsonPayloadError::Payload(error))
        })?;
        upload = blocking(move || upload.write(&chunk).map(|()| upload)).await?;
    }
    let info = blocking(move || upload.finish(expected)).await?;
    log::info!(
        "REST: stored artifact {} ({} bytes)",
        info.digest.short(),
        info.size
    );
    Ok(HttpResponse::Created().json(info))
}

/// `GET /artifacts`: what the store holds.
pub async fn list(state: web::Data<RestState>) -> Result<HttpResponse, ApiError> {
    let store = store(&state)?.clone();
    let artifacts = blocking(move || store.list()).await?;
    Ok(HttpResponse::Ok().json(ArtifactList { artifacts }))
}

/// `GET /artifacts/{digest}`: one stored artifact (404 if it is not): how `flint run
/// --artifact` learns it need not upload a file again.
pub async fn show(
    state: web::Data<RestState>,
    digest: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let digest = parse_digest(&digest)?;
    let store = store(&state)?.clone();
    let info = blocking(move || store.info(&digest)).await?;
    Ok(HttpResponse::Ok().json(info))
}

/// Refuses `graph` if it names an artifact the store does not hold at the size named.
pub async fn check_stored(state: &RestState, graph: &JobGraph) -> Result<(), ApiError> {
    if graph.artifacts.is_empty() {
        return Ok(());
    }
    let store = store(state)?.clone();
    let artifacts = graph.artifacts.clone();
    let missing = blocking(move || {
        Ok((artifacts.into_iter()).find(|artifact| {
            let stored = store.info(&artifact.digest);
            !stored.is_ok_and(|stored| stored.size == artifact.size)
        }))
    })
    .await?;
    match missing {
        Some(artifact) => Err(ApiError::MissingArtifact {
            name: artifact.name,
            digest: artifact.digest,
        }),
        None => Ok(()),
    }
}
