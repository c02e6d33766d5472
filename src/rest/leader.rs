//! High availability in the REST API: every JobManager process serves the same port for its
//! whole life, leader or not. While it leads, requests are answered by its JobManager and
//! resource manager of the current leadership; while it stands by, every request is answered
//! with `307 Temporary Redirect` to the same path at the leader's REST URL (learnt by leader
//! retrieval), so `flint list` and the dashboard work against any JobManager; with no leader
//! known yet, `503`.
//!
//! The switch is flipped by the HA leader loop ([`crate::cluster::leader_loop`]) and read by the
//! guard middleware and the handlers; it holds addresses only, never cluster state.

use std::sync::{Arc, RwLock};

use super::Gateways;
use crate::ha::LeadershipLease;

/// What a standby answers a request with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// This process leads: the handlers answer.
    Serve,
    /// Redirect to this URL (the leader's base URL + the request's path and query).
    Redirect(String),
    /// No leader known yet: 503.
    NoLeader,
}

#[derive(Default)]
struct Role {
    /// The actors of the leadership this process holds, while it holds one, and its lease:
    /// a leader whose lease lapsed (a process resumed after a pause) answers as a standby.
    leading: Option<(Gateways, LeadershipLease)>,
    /// The leader's REST base URL, as retrieval last published it.
    leader_url: Option<String>,
    /// This process's own REST base URL (never redirect to oneself: a stale announcement).
    own_url: Option<String>,
}

impl Role {
    fn leads(&self) -> bool {
        self.leading
            .as_ref()
            .is_some_and(|(_, lease)| lease.is_held_now())
    }
}

/// See the module docs. Cheap to clone; every clone flips the same switch.
#[derive(Clone, Default)]
pub struct LeaderSwitch(Arc<RwLock<Role>>);

impl LeaderSwitch {
    /// A switch standing by, with no leader known.
    pub fn new() -> Self {
        Self::default()
    }

    fn write(&self, change: impl FnOnce(&mut Role)) {
        // A poisoned lock only means a reader panicked mid-read: the role is still whole.
        let mut role = self
            .0
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        change(&mut role);
    }

    fn read<T>(&self, look: impl FnOnce(&Role) -> T) -> T {
        let role = self
            .0
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        look(&role)
    }

    /// This process's own REST base URL.
    pub fn set_own_url(&self, url: String) {
        self.write(|role| role.own_url = Some(url));
    }

    /// This process leads with these actors while `lease` is held.
    pub fn lead(&self, gateways: Gateways, lease: LeadershipLease) {
        self.write(|role| role.leading = Some((gateways, lease)));
    }

    /// This process stands by (again).
    pub fn stand_by(&self) {
        self.write(|role| role.leading = None);
    }

    /// Leader retrieval published the leader's REST base URL (or that there is none).
    pub fn set_leader_url(&self, url: Option<String>) {
        self.write(|role| role.leader_url = url);
    }

    /// Whether this process leads now.
    pub fn is_leading(&self) -> bool {
        self.read(Role::leads)
    }

    /// The actors to ask, while this process leads.
    pub fn leading(&self) -> Option<Gateways> {
        self.read(|role| {
            role.leads()
                .then(|| role.leading.as_ref().map(|(g, _)| g.clone()))
                .flatten()
        })
    }

    /// How to answer a request for `path_and_query` now.
    pub fn route(&self, path_and_query: &str) -> Route {
        self.read(|role| {
            if role.leads() {
                return Route::Serve;
            }
            match &role.leader_url {
                Some(url) if role.own_url.as_ref() != Some(url) => {
                    Route::Redirect(format!("{}{path_and_query}", url.trim_end_matches('/')))
                }
                _ => Route::NoLeader,
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_standby_redirects_to_the_leader_and_never_to_itself() {
        let switch = LeaderSwitch::new();
        switch.set_own_url("http://127.0.0.1:2".to_owned());
        assert_eq!(switch.route("/jobs"), Route::NoLeader);
        switch.set_leader_url(Some("http://127.0.0.1:1".to_owned()));
        assert_eq!(
            switch.route("/jobs?x=1"),
            Route::Redirect("http://127.0.0.1:1/jobs?x=1".to_owned())
        );
        switch.set_leader_url(Some("http://127.0.0.1:2".to_owned()));
        assert_eq!(switch.route("/jobs"), Route::NoLeader);
        assert!(!switch.is_leading());
    }
}
