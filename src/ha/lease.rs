//! The leadership lease: a leader's own, synchronous answer to "may I still act?".
//!
//! Revocation alone is not enough to keep a deposed leader from acting. A JobManager process
//! paused (SIGSTOP, a long GC-like stall, a VM freeze) past its ZooKeeper session runs its
//! actors' queued messages the instant it resumes, before the leader loop's watch on the
//! session runs and says the leadership is gone; those messages would deploy tasks and start
//! workers for a leader that another process has already replaced. The lease closes that
//! window: the leader loop proves the leadership by a round trip to the coordination service
//! ([`LeaderElectionService::renew`](super::LeaderElectionService::renew)) every
//! [`RENEW_FRACTION`] of the lease, and extends the lease to *the moment the round trip was
//! sent* plus the time the service guarantees the session after it heard from it (2/5 of the
//! session timeout: the same margin the client doubts its session at). The JobManager checks the
//! lease before it sends a `SubmitTasks`, the resource manager before it asks its driver for a
//! worker; a lease that lapsed (a pause longer than the lease) makes them wait until the loop
//! renews it or stops them. Because the lease is measured from the send of a round trip that
//! reached the service, and the service expires a session only a whole session timeout after it
//! last heard from it, a held lease means no other leadership can have been granted yet.
//!
//! One lease per leadership: a process that leads again gets a fresh one, so its previous
//! leadership's actors (still stopping) never see a valid lease again. Without high availability
//! the lease is [`LeadershipLease::unbounded`] and always held.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

/// How often a lease is renewed, as a fraction of its length: four renewals per lease, so one
/// slow or lost round trip does not let it lapse.
pub const RENEW_FRACTION: u32 = 4;

/// How long an actor waits before it checks a lapsed lease again (the leader loop renews it
/// or stops the actor meanwhile).
pub const RECHECK: Duration = Duration::from_millis(20);

#[derive(Debug, Default)]
struct State {
    valid_until: Option<Instant>,
    revoked: bool,
}

/// See the module docs. Clones share one lease.
#[derive(Debug, Clone, Default)]
pub struct LeadershipLease(Option<Arc<Mutex<State>>>);

impl LeadershipLease {
    /// Always held: a JobManager without high availability leads for its whole life.
    pub fn unbounded() -> Self {
        Self(None)
    }

    /// A lease of a fresh leadership: not held until [`extend_to`](Self::extend_to).
    pub fn lapsed() -> Self {
        Self(Some(Arc::default()))
    }

    /// Held until `until` (never shortened; ignored once revoked).
    pub fn extend_to(&self, until: Instant) {
        if let Some(state) = &self.0 {
            let mut state = state.lock().unwrap_or_else(|e| e.into_inner());
            if !state.revoked {
                state.valid_until = Some(state.valid_until.map_or(until, |v| v.max(until)));
            }
        }
    }

    /// Never held again: the leadership is over.
    pub fn revoke(&self) {
        if let Some(state) = &self.0 {
            let mut state = state.lock().unwrap_or_else(|e| e.into_inner());
            state.revoked = true;
            state.valid_until = None;
        }
    }

    /// [`is_held`](Self::is_held) now (no clock read without high availability: this is on
    /// the deployment path).
    pub fn is_held_now(&self) -> bool {
        self.0.is_none() || self.is_held(Instant::now())
    }

    /// Whether the holder may act as leader at `now`.
    pub fn is_held(&self, now: Instant) -> bool {
        match &self.0 {
            None => true,
            Some(state) => {
                let state = state.lock().unwrap_or_else(|e| e.into_inner());
                !state.revoked && state.valid_until.is_some_and(|until| now < until)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_lease_is_held_only_until_it_lapses_and_never_after_revocation() {
        let lease = LeadershipLease::lapsed();
        let now = Instant::now();
        assert!(
            !lease.is_held(now),
            "a fresh leadership's lease waits for a renewal"
        );
        lease.extend_to(now + Duration::from_millis(800));
        assert!(lease.is_held(now));
        lease.extend_to(now + Duration::from_millis(100));
        assert!(
            lease.is_held(now + Duration::from_millis(500)),
            "an older renewal never shortens the lease"
        );
        assert!(!lease.is_held(now + Duration::from_millis(800)));
        let shared = lease.clone();
        lease.revoke();
        assert!(!shared.is_held(now));
        shared.extend_to(now + Duration::from_secs(60));
        assert!(!shared.is_held(now), "a revoked lease is never held again");
        assert!(LeadershipLease::unbounded().is_held(now));
    }
}
