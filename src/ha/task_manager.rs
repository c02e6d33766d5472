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
                    crate::base::error_chain::ErrorChain(&error)
                );
                tokio::time::sleep(RETRY_DELAY).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::collections::VecDeque;
    use std::rc::Rc;

    use actix::{Actor, Context, Handler};

    use super::*;
    use crate::base::ids::LeaderSessionId;
    use crate::ha::{HaError, LeaderInformation};

    /// Leaders handed out in turn; an error in between; then nothing more.
    struct Scripted(VecDeque<Result<Option<LeaderInformation>, HaError>>);

    impl LeaderRetrievalService for Scripted {
        async fn next_leader(&mut self) -> Result<Option<LeaderInformation>, HaError> {
            match self.0.pop_front() {
                Some(next) => next,
                None => std::future::pending().await,
            }
        }
    }

    struct Probe(Rc<RefCell<Vec<NewLeaderAvailable>>>);

    impl Actor for Probe {
        type Context = Context<Self>;
    }

    impl Handler<NewLeaderAvailable> for Probe {
        type Result = ();

        fn handle(&mut self, msg: NewLeaderAvailable, _: &mut Context<Self>) {
            self.0.borrow_mut().push(msg);
        }
    }

    fn leader(port: u16, session: u128) -> LeaderInformation {
        LeaderInformation {
            address: format!("127.0.0.1:{port}"),
            rest_url: format!("http://127.0.0.1:{}", port + 1),
            leader_session_id: LeaderSessionId::from_u128(session),
        }
    }

    #[actix::test]
    async fn every_new_leader_reaches_the_task_manager_as_new_leader_available() {
        tokio::time::pause();
        let seen = Rc::new(RefCell::new(Vec::new()));
        let probe = Probe(seen.clone()).start();
        let script = Scripted(VecDeque::from([
            Ok(Some(leader(6123, 1))),
            Ok(None),
            Err(HaError::SessionLost {
                state: "Expired".to_owned(),
            }),
            Ok(Some(leader(7123, 2))),
        ]));
        let follower = actix::spawn(follow_leader(script, probe.recipient()));
        let give_up = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
        while seen.borrow().len() < 2 {
            assert!(tokio::time::Instant::now() < give_up, "{:?}", seen.borrow());
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        follower.abort();
        let seen = seen.borrow();
        assert_eq!(
            *seen,
            vec![
                NewLeaderAvailable {
                    address: ActorAddress::new("127.0.0.1:6123", "jobmanager"),
                    leader_session_id: LeaderSessionId::from_u128(1),
                },
                NewLeaderAvailable {
                    address: ActorAddress::new("127.0.0.1:7123", "jobmanager"),
                    leader_session_id: LeaderSessionId::from_u128(2),
                },
            ]
        );
    }
}
