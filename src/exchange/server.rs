//! The producer side of a remote exchange: answering a consumer task's
//! [`FetchSubpartitions`] from this TaskManager's [`PartitionStore`] (Flink's partition request
//! server).
//!
//! One request covers every channel the consumer task has here. It is answered as soon as any
//! channel has news — data within the channel's credit, the end, a failure, an unknown
//! partition — with everything that is ready then, up to [`FETCH_BYTES`]; otherwise it waits for
//! the first producer to append, finish or fail, at most [`FETCH_HOLD`], and answers with no
//! news. It never waits on anything but the store's wake-ups and its own timer.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::select_all;

use super::partition::{Fetch, PartitionStore, batch_bytes};
use crate::messages::task_manager::{ChannelResponse, FetchResponse, FetchSubpartitions};

/// Bytes one answer carries at most (one batch more, so every answer makes progress).
pub const FETCH_BYTES: usize = 1 << 20;

/// How long a fetch that finds nothing new is held before it is answered with no news: far
/// inside the transport's ask timeout, so a silent channel never looks like a dead peer.
pub const FETCH_HOLD: Duration = Duration::from_secs(2);

const _: () = assert!(FETCH_HOLD.as_millis() * 4 <= crate::node::ASK_TIMEOUT.as_millis());

/// Serves one request: at once if any channel has news, else when one does, else empty after
/// [`FETCH_HOLD`].
pub async fn serve_fetch(store: Arc<PartitionStore>, request: FetchSubpartitions) -> FetchResponse {
    let hold = tokio::time::sleep(FETCH_HOLD);
    tokio::pin!(hold);
    loop {
        let mut channels = Vec::new();
        let mut wakes = Vec::new();
        let mut budget = FETCH_BYTES;
        for (index, read) in (0u32..).zip(&request.reads) {
            if budget == 0 {
                break; // the rest is asked again next time
            }
            let fetch = store.fetch_with_credit(
                read.partition,
                read.subpartition,
                read.from_batch,
                budget,
                read.credit.max(1) as usize,
            );
            match fetch {
                Fetch::Ready {
                    batches,
                    next_batch,
                    finished,
                } => {
                    let bytes: usize = batches.iter().map(|b| batch_bytes(b)).sum();
                    budget = budget.saturating_sub(bytes);
                    let backlog = store.backlog(read.partition, read.subpartition, next_batch);
                    channels.push((
                        index,
                        ChannelResponse::Data {
                            batches,
                            next_batch,
                            finished,
                            backlog,
                        },
                    ));
                }
                Fetch::Pending(wake) => wakes.push(wake),
                Fetch::Failed(reason) => channels.push((index, ChannelResponse::Failed(reason))),
                Fetch::Unknown => channels.push((index, ChannelResponse::Unknown)),
            }
        }
        if !channels.is_empty() || wakes.is_empty() {
            return FetchResponse { channels };
        }
        tokio::select! {
            biased;
            // Woken (or a partition released: the next round tells which).
            _ = select_all(wakes) => {}
            () = &mut hold => return FetchResponse { channels: Vec::new() },
        }
    }
}
