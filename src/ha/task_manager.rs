//! The `flint taskmanager` side of high availability: leader retrieval tells the TaskManager
//! actor every new leader as `NewLeaderAvailable` (it then registers there, fenced by the new
//! `LeaderSessionId`), instead of a fixed `--jobmanager` address.

use std::time::Duration;

use actix::Recipient;

use super::LeaderRetrievalService;
use crate::messages::{ActorAddress, NewLeaderAvailable};

/// How long a failed retrieval waits before it tries again (with a fresh session).
const RETRY_DELAY: Duration = Duration::from_secs(1);

/// Follows the published leader until the process ends, telling `task_manager` each new one.
/// A leader going away is only logged: the TaskManager keeps its registration (its heartbeat
/// timeout notices a dead JobManager) until the next leader is published.
pub async fn follow_leader<R: LeaderRetrievalService>(
    mut retrieval: R,
    task_manager: Recipient<NewLeaderAvailable>,
) {
    loop {
        match retrieval.next_leader().await {
            Ok(Some(leader)) => {
                log::info!(
                    "taskmanager: leader retrieval: JobManager leader at {} (session {})",
                    leader.address,
                    leader.leader_session_id
                );
                task_manager.do_send(NewLeaderAvailable {
                    address: ActorAddress::new(leader.address, "jobmanager"),
                    leader_session_id: leader.leader_session_id,
                });
            }
            Ok(None) => log::info!("taskmanager: leader retrieval: no JobManager leader now"),
            Err(error) => {
                log::warn!(
                    "taskmanager: leader retrieval failed: {}; retrying",
                    crate::error_chain::ErrorChain(&error)
                );
                tokio::time::sleep(RETRY_DELAY).await;
            }
        }
    }
}
