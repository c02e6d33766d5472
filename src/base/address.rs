//! Where an actor can be reached, and the names actors go by on their node: the one piece of
//! the actors' world the transport needs (an envelope names its target by name), so it lives
//! here, below the transport and the protocol.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::base::ids::ResourceId;

/// The JobManager's actor name on its node.
pub const JOB_MANAGER: &str = "jobmanager";

/// The resource manager's actor name on its node.
pub const RESOURCE_MANAGER: &str = "resourcemanager";

/// The prefix of every TaskManager's actor name (`taskmanager/<resource id>`): a node may host
/// many TaskManagers, so the name says which one.
pub const TASK_MANAGER_PREFIX: &str = "taskmanager/";

/// The actor name of the TaskManager of `resource_id` on its node.
pub fn task_manager_name(resource_id: &ResourceId) -> String {
    format!("{TASK_MANAGER_PREFIX}{resource_id}")
}

/// Where an actor can be reached: the node it lives on and its name there.
///
/// In one process every node is `local`; across machines the node is the `host:port` of its
/// transport endpoint. A [`Resolver`](crate::rpc::directory::Resolver) turns an address into a gateway.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ActorAddress {
    /// The node: `local`, or the `host:port` of its transport endpoint.
    pub node: String,
    /// The actor's name on that node (`jobmanager`, `resourcemanager`, `taskmanager/<id>`).
    pub name: String,
}

impl ActorAddress {
    /// An address from its parts.
    pub fn new(node: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            node: node.into(),
            name: name.into(),
        }
    }
}

impl fmt::Display for ActorAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "flint://{}/{}", self.node, self.name)
    }
}

impl fmt::Debug for ActorAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}
