//! Leader election, in the shape of Flink's `LeaderElectionService`: a contender waits to be
//! granted leadership, publishes its [`LeaderInformation`] (Flink's `confirmLeadership`), and
//! learns at once when the leadership is revoked.
//!
//! Implementations: [`ZooKeeperLeaderElection`](super::zookeeper::ZooKeeperLeaderElection) (a
//! real ZooKeeper) and, in the simulation, a simulated coordination service. The trait is all
//! the JobManager side sees, so both run the same leader loop.

use std::future::Future;

use super::{HaError, LeaderInformation};

/// One granted leadership: valid until [`LeaderElectionService::revoked`] resolves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Leadership {
    /// Unique among every leadership the service ever grants for this cluster (the ZooKeeper
    /// session id and latch sequence): mixed into the fresh `LeaderSessionId` so two JobManagers
    /// started with the same `seed` still lead different sessions.
    pub token: u128,
}

/// See the module docs.
pub trait LeaderElectionService {
    /// Waits until this contender leads. An error means the coordination service failed (the
    /// caller tries again with a fresh session).
    fn acquire(&mut self) -> impl Future<Output = Result<Leadership, HaError>>;

    /// Publishes where the leader is, so retrieval finds it. Fails if the leadership is no
    /// longer held.
    fn confirm(&mut self, info: &LeaderInformation) -> impl Future<Output = Result<(), HaError>>;

    /// Resolves as soon as the leadership may be lost: the session expired, closed, or its
    /// connection is gone (another contender may be elected after the session timeout; this
    /// one must stop acting before then). Never resolves while the leadership holds.
    fn revoked(&mut self) -> impl Future<Output = HaError>;

    /// Proves the leadership still holds by a round trip to the coordination service, for the
    /// [`LeadershipLease`](super::lease::LeadershipLease). `Ok(d)`: the service heard from this
    /// session after the call was made, so no other contender can be granted leadership within
    /// `d` of the call (less than the session timeout, by the margin the client doubts its
    /// session at). An error means the leadership may be lost.
    fn renew(&mut self) -> impl Future<Output = Result<std::time::Duration, HaError>>;

    /// Gives the leadership (or the candidacy) up and ends the session.
    fn resign(&mut self) -> impl Future<Output = ()>;
}
