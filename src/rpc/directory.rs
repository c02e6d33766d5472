//! Turning actor addresses into gateways.
//!
//! Messages carry [`ActorAddress`]es, never actor handles, so they can cross the network. Whoever
//! receives an address asks the node's [`Resolver`] for a gateway. In one process the
//! [`LocalDirectory`] answers with the gateways actors registered when they started; the
//! transport (a later layer) answers for other nodes with proxies that implement the same
//! handlers, so actor code never knows whether a peer is local.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Mutex, PoisonError};

use crate::messages::ActorAddress;
use crate::messages::job_manager::JobManagerGateway;
use crate::messages::resource_manager::ResourceManagerGateway;
use crate::messages::task_manager::TaskManagerGateway;

/// Finds the gateway of an actor by its address, and makes this node's actors findable.
pub trait Resolver: Send + Sync + fmt::Debug {
    /// The node part of addresses of actors on this node (`local` in one process, the
    /// transport endpoint's `host:port` across machines).
    fn local_node(&self) -> String;
    /// Makes a local actor reachable at `address`, replacing what was there.
    fn register(&self, address: ActorAddress, actor: LocalActor);
    /// Forgets the local actor at `address`.
    fn unregister(&self, address: &ActorAddress);
    /// The JobManager at `address`, if it can be reached.
    fn job_manager(&self, address: &ActorAddress) -> Option<JobManagerGateway>;
    /// The resource manager at `address`, if it can be reached.
    fn resource_manager(&self, address: &ActorAddress) -> Option<ResourceManagerGateway>;
    /// The TaskManager at `address`, if it can be reached.
    fn task_manager(&self, address: &ActorAddress) -> Option<TaskManagerGateway>;
}

/// A gateway registered in a [`LocalDirectory`].
#[derive(Debug, Clone)]
pub enum LocalActor {
    /// A JobManager.
    JobManager(JobManagerGateway),
    /// A resource manager.
    ResourceManager(ResourceManagerGateway),
    /// A TaskManager.
    TaskManager(TaskManagerGateway),
}

/// The actors of this process, by address. Actors register in `started` and deregister in
/// `stopping`; the in-process driver also deregisters a worker it crashes or releases, since a
/// crashed actor runs no hook.
#[derive(Debug, Default)]
pub struct LocalDirectory {
    actors: Mutex<BTreeMap<ActorAddress, LocalActor>>,
}

impl LocalDirectory {
    /// An empty directory.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many actors are registered.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no actor is registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<ActorAddress, LocalActor>> {
        // The map stays consistent whatever panicked while holding the lock: every operation on
        // it is a single insert, remove or lookup.
        self.actors.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The actor at `address` if it still runs; a dead one (crashed before it could
    /// deregister) is forgotten on the way.
    fn get(&self, address: &ActorAddress) -> Option<LocalActor> {
        let mut actors = self.lock();
        let alive = match actors.get(address)? {
            LocalActor::JobManager(g) => g.is_alive(),
            LocalActor::ResourceManager(g) => g.is_alive(),
            LocalActor::TaskManager(g) => g.is_alive(),
        };
        if alive {
            actors.get(address).cloned()
        } else {
            actors.remove(address);
            None
        }
    }
}

impl Resolver for LocalDirectory {
    fn local_node(&self) -> String {
        "local".to_owned()
    }

    fn register(&self, address: ActorAddress, actor: LocalActor) {
        self.lock().insert(address, actor);
    }

    fn unregister(&self, address: &ActorAddress) {
        self.lock().remove(address);
    }

    fn job_manager(&self, address: &ActorAddress) -> Option<JobManagerGateway> {
        match self.get(address)? {
            LocalActor::JobManager(gateway) => Some(gateway),
            _ => None,
        }
    }

    fn resource_manager(&self, address: &ActorAddress) -> Option<ResourceManagerGateway> {
        match self.get(address)? {
            LocalActor::ResourceManager(gateway) => Some(gateway),
            _ => None,
        }
    }

    fn task_manager(&self, address: &ActorAddress) -> Option<TaskManagerGateway> {
        match self.get(address)? {
            LocalActor::TaskManager(gateway) => Some(gateway),
            _ => None,
        }
    }
}
