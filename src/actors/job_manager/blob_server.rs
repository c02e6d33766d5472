//! The JobManager's side of artifact fetches (Flink's `BlobServer` GET): a TaskManager reads a
//! stored artifact chunk by chunk over the authenticated transport ([`FetchBlob`]). The read runs
//! on the node's blocking I/O threads, never the actor's, so a 100 MB fetch by every
//! TaskManager delays no heartbeat or deployment. Any authenticated node may read any stored
//! artifact: the cluster secret is the boundary, as for every other message.

use actix::prelude::*;

use super::JobManager;
use crate::env::blob_store::BlobError;
use crate::env::blocking_io::offload;
use crate::messages::buffer::Buffer;
use crate::messages::job_manager::{BlobChunk, BlobFetchError, FETCH_BLOB_CHUNK, FetchBlob};

impl Handler<FetchBlob> for JobManager {
    type Result = ResponseActFuture<Self, Result<BlobChunk, BlobFetchError>>;

    fn handle(&mut self, msg: FetchBlob, _: &mut Context<Self>) -> Self::Result {
        let _timed = self.mailbox.time("FetchBlob");
        let Some(store) = self.blobs.clone() else {
            return Box::pin(fut::ready(Err(BlobFetchError::NoStore)));
        };
        let io = self.env.task_runner.io();
        let length = msg.length.min(FETCH_BLOB_CHUNK) as usize;
        let read = async move {
            let digest = msg.digest;
            let read = offload(&*io, move || store.read_chunk(&digest, msg.offset, length)).await;
            match read {
                Some(Ok((bytes, size))) => Ok(BlobChunk {
                    size,
                    bytes: Buffer::new(0, bytes.into()),
                }),
                Some(Err(BlobError::NotFound { key })) => Err(BlobFetchError::NotFound(key)),
                Some(Err(error)) => Err(BlobFetchError::Io {
                    digest,
                    message: crate::base::error_chain::ErrorChain(&error).to_string(),
                }),
                None => Err(BlobFetchError::Io {
                    digest,
                    message: "the read panicked".into(),
                }),
            }
        };
        Box::pin(read.into_actor(self).map(|answer, act, _| {
            if let Ok(chunk) = &answer {
                act.blob_bytes_served += chunk.bytes.len() as u64;
            }
            answer
        }))
    }
}
