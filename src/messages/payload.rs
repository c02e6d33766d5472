//! What Flint's envelopes carry: one of the three actors' wire enums, or a [`Reply`]. The
//! transport is generic over it ([`crate::transport::envelope::Payload`]); this module says which
//! payload fits which envelope, so the transport never names an actor kind.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::base::address::{JOB_MANAGER, RESOURCE_MANAGER, TASK_MANAGER_PREFIX};
use crate::messages::job_manager::JobManagerMessage;
use crate::messages::reply::Reply;
use crate::messages::resource_manager::ResourceManagerMessage;
use crate::messages::task_manager::TaskManagerMessage;
use crate::transport::envelope::{self, EnvelopeKind};

/// An envelope of Flint's protocol.
pub type Envelope = envelope::Envelope<Payload>;

/// What an envelope carries: the receiving actor's wire enum, or a reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Payload {
    /// A message for the JobManager.
    JobManager(JobManagerMessage),
    /// A message for the resource manager.
    ResourceManager(ResourceManagerMessage),
    /// A message for a TaskManager.
    TaskManager(TaskManagerMessage),
    /// The answer to an ask.
    Reply(Reply),
}

impl Payload {
    /// Which kind of payload this is, for validation and for error messages that must not
    /// print a whole (possibly huge) message.
    pub fn kind(&self) -> PayloadKind {
        match self {
            Self::JobManager(_) => PayloadKind::JobManager,
            Self::ResourceManager(_) => PayloadKind::ResourceManager,
            Self::TaskManager(_) => PayloadKind::TaskManager,
            Self::Reply(_) => PayloadKind::Reply,
        }
    }
}

impl From<JobManagerMessage> for Payload {
    fn from(message: JobManagerMessage) -> Self {
        Self::JobManager(message)
    }
}

impl From<ResourceManagerMessage> for Payload {
    fn from(message: ResourceManagerMessage) -> Self {
        Self::ResourceManager(message)
    }
}

impl From<TaskManagerMessage> for Payload {
    fn from(message: TaskManagerMessage) -> Self {
        Self::TaskManager(message)
    }
}

impl From<Reply> for Payload {
    fn from(reply: Reply) -> Self {
        Self::Reply(reply)
    }
}

/// The variant of a [`Payload`], without its contents.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum PayloadKind {
    /// A [`JobManagerMessage`].
    JobManager,
    /// A [`ResourceManagerMessage`].
    ResourceManager,
    /// A [`TaskManagerMessage`].
    TaskManager,
    /// A [`Reply`].
    Reply,
}

impl PayloadKind {
    /// The protocol an actor named `target` speaks, or `None` for a name no actor kind has.
    pub fn of_target(target: &str) -> Option<Self> {
        if target == JOB_MANAGER {
            Some(Self::JobManager)
        } else if target == RESOURCE_MANAGER {
            Some(Self::ResourceManager)
        } else if target
            .strip_prefix(TASK_MANAGER_PREFIX)
            .is_some_and(|id| !id.is_empty())
        {
            Some(Self::TaskManager)
        } else {
            None
        }
    }
}

impl fmt::Display for PayloadKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::JobManager => "JobManager message",
            Self::ResourceManager => "ResourceManager message",
            Self::TaskManager => "TaskManager message",
            Self::Reply => "reply",
        })
    }
}

impl envelope::Payload for Payload {
    /// A tell or an ask carries the protocol enum of the actor kind its target names; a reply
    /// carries a [`Reply`].
    fn fits(&self, kind: EnvelopeKind, target: &str) -> bool {
        match kind {
            EnvelopeKind::Tell | EnvelopeKind::Ask => {
                PayloadKind::of_target(target) == Some(self.kind())
            }
            EnvelopeKind::Reply => self.kind() == PayloadKind::Reply,
        }
    }

    fn describe(&self) -> &'static str {
        match self.kind() {
            PayloadKind::JobManager => "JobManager message",
            PayloadKind::ResourceManager => "ResourceManager message",
            PayloadKind::TaskManager => "TaskManager message",
            PayloadKind::Reply => "reply",
        }
    }
}

impl Payload {
    /// The name of a message only this process may send its actors, if this is one: a peer
    /// that sends one is refused. The leader comes from leader retrieval (in this process),
    /// never from the network, or any peer holding the secret could point a resource manager
    /// or a TaskManager at a JobManager of its choice.
    pub fn local_only(&self) -> Option<&'static str> {
        match self {
            Self::ResourceManager(ResourceManagerMessage::NewLeaderAvailable(_))
            | Self::TaskManager(TaskManagerMessage::NewLeaderAvailable(_)) => {
                Some("NewLeaderAvailable")
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests;
