//! High availability: standby JobManagers, leader election, leader retrieval and job recovery
//! (`high-availability.type = "zookeeper"`; with `"none"`, the default, nothing here runs).
//!
//! ```text
//!  flint jobmanager ×N (same cluster id)          flint taskmanager --config (HA keys)
//!    │ LeaderElectionService (election)              │ LeaderRetrievalService (retrieval)
//!    ▼                                               ▼
//!  ZooKeeper  ROOT/CLUSTER/leaderlatch/latch-NNNN   ephemeral sequential: the lowest leads
//!             ROOT/CLUSTER/leader                   ephemeral: the leader's LeaderInformation
//!             ROOT/CLUSTER/jobgraphs/JOB_ID         persistent: pointer to STORAGE/CLUSTER/…
//!             ROOT/CLUSTER/pool-size                persistent: the pool size an operator set
//!    │
//!    ▼ leadership granted                           leadership revoked (session lost/suspended)
//!  job_manager::run_leader_terms: a fresh LeaderSessionId, the JobManager + resource manager,
//!  every job of the JobGraphStore recovered;        ── stop both at once, stand by again
//! ```
//!
//! - [`election`], [`retrieval`]: the two small traits, in Flink's shapes, that the rest of
//!   Flint sees; [`zookeeper`] implements them over a real ZooKeeper (the `zookeeper-client`
//!   crate) and the simulation can implement them over a simulated coordination service.
//! - [`job_graph_store`]: submitted job graphs in `high-availability.storageDir`, pointers in
//!   ZooKeeper, as Flink's `ZooKeeperJobGraphStore` keeps them (the pointers behind
//!   [`JobGraphPointers`], so the simulation keeps them in its coordination service).
//! - [`job_event_log`]: beside each graph, what its batch job finished (FLIP-383), so a new
//!   leader reruns only what the failover lost.
//! - [`signed`]: the leader information, job graph pointers and pool size are signed with the
//!   cluster secret and verified before use, so a writer of the znodes without the secret can
//!   neither redirect the cluster nor make it run anything.
//! - [`task_manager`]: the `flint taskmanager` side (following the published leader); the
//!   `flint jobmanager` side, which starts a JobManager node while it leads, is
//!   `crate::cluster::leader_loop`, above the actors.
//!
//! Why `zookeeper-client` (kezhuw): it is the maintained pure-Rust async client (3.8 protocol,
//! ephemeral-sequential creates, oneshot and persistent watches, session state watching, TLS
//! and SASL when wanted), with no C library to link (unlike the `zookeeper` bindings over
//! libzookeeper) and no abandoned thread-per-session design (unlike `zookeeper`/`zookeeper-async`
//! of 2018-2020). It runs its session task on the current tokio runtime.
//!
//! What this module must never do: act as leader without holding the leadership it was granted
//! (the JobManager and resource manager stop as soon as the session is in doubt), or keep a job
//! graph anywhere but the store (ZooKeeper holds pointers only).

pub mod election;
pub mod job_event_log;
pub mod job_graph_store;
pub mod job_result_store;
pub mod lease;
pub mod retrieval;
pub mod signed;
pub mod task_manager;
pub mod zookeeper;

use serde::{Deserialize, Serialize};

use crate::base::ids::LeaderSessionId;

pub use election::{LeaderElectionService, Leadership};
pub use job_event_log::{JobEvent, JobEventLog, JobEventLogError};
pub use job_graph_store::{
    JobGraphPointers, JobGraphStore, JobGraphWriter, NoJobGraphs, RecoveredJob, ZooKeeperPointers,
};
pub use job_result_store::{JobResultStore, JobResultStoreError};
pub use lease::LeadershipLease;
pub use retrieval::LeaderRetrievalService;

/// What a JobManager keeps beyond itself: the graphs of the jobs it accepted and the results of
/// the jobs that ended (with high availability, where a new leader finds them; without, the
/// graphs nowhere and the results in memory).
#[derive(Clone)]
pub struct JobStores {
    /// Graphs are persisted here before their jobs run.
    pub job_graphs: std::rc::Rc<dyn JobGraphWriter>,
    /// Results are kept here when jobs end.
    pub job_results: JobResultStore,
    /// The artifacts jobs ship, served to TaskManagers (`None`: jobs cannot ship any).
    pub blobs: Option<crate::env::blob_store::BlobStore>,
}

impl JobStores {
    /// No high availability: graphs not persisted, results in memory.
    pub fn in_memory() -> Self {
        Self {
            job_graphs: std::rc::Rc::new(NoJobGraphs),
            job_results: JobResultStore::in_memory(),
            blobs: None,
        }
    }
}

impl std::fmt::Debug for JobStores {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobStores")
            .field("job_results", &self.job_results.len())
            .finish_non_exhaustive()
    }
}

/// What the leader publishes for everyone else (Flink's `LeaderInformation`): where its
/// JobManager is and which session it leads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaderInformation {
    /// The JobManager's transport `host:port` (TaskManagers register there).
    pub address: String,
    /// The base URL of its REST API (`http://HOST:PORT`): standbys redirect there.
    pub rest_url: String,
    /// The fencing token of this leadership.
    pub leader_session_id: LeaderSessionId,
}

impl LeaderInformation {
    /// As stored in the leader znode.
    pub fn to_bytes(&self) -> Vec<u8> {
        // Serializing plain strings and an id to JSON cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// From the leader znode; `None` for anything else (an empty or foreign node).
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        serde_json::from_slice(bytes).ok()
    }
}

/// Why a high-availability service failed.
#[derive(Debug, thiserror::Error)]
pub enum HaError {
    /// The quorum did not answer within the connection timeout at start. Retryable (once the
    /// quorum is up), but a process stops with exit code 2: its configuration may be wrong.
    #[error(
        "cannot reach the ZooKeeper quorum `{quorum}` (high-availability.zookeeper.quorum) \
         within {} (high-availability.zookeeper.client.connection-timeout)",
        humantime::format_duration(*.timeout)
    )]
    Unreachable {
        /// The quorum string.
        quorum: String,
        /// The connection timeout.
        timeout: std::time::Duration,
        /// What the client said, if anything before the timeout.
        #[source]
        source: Option<zookeeper_client::Error>,
    },
    /// A ZooKeeper operation failed. Retryable with a new session.
    #[error("ZooKeeper {operation} {path} failed")]
    ZooKeeper {
        /// What was tried.
        operation: &'static str,
        /// On which znode.
        path: String,
        /// Why.
        #[source]
        source: zookeeper_client::Error,
    },
    /// The session ended (expired, closed) or its connection was lost: whatever this process
    /// held in ZooKeeper may be gone. Retryable with a new session.
    #[error("the ZooKeeper session is lost ({state})")]
    SessionLost {
        /// The session state that ended it.
        state: String,
    },
    /// A command-line client could not start the runtime its ZooKeeper client needs. Not
    /// retryable.
    #[error("cannot start a runtime for the ZooKeeper client")]
    Runtime(#[source] std::io::Error),
    /// A job graph file could not be written or removed. Retryable if the file system recovers.
    #[error("cannot {operation} the job graph file {path}")]
    Storage {
        /// What was tried.
        operation: &'static str,
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// `high-availability.storageDir` or the ZooKeeper credential cannot be trusted: someone
    /// else could write it (or read the credential). Not retryable without the operator.
    #[error("refusing an untrusted high-availability file or directory")]
    Untrusted(#[from] crate::env::private::PrivateError),
    /// A znode's data is not signed with this process's cluster secret: someone without the
    /// secret wrote it (see [`signed`]). Not retryable until a real leader rewrites it.
    #[error("refusing the data of the znode {path}")]
    Unverified {
        /// The znode.
        path: String,
        /// Why.
        #[source]
        source: signed::SignatureError,
    },
    /// The ZooKeeper credential file does not hold `user:password`.
    #[error("{path} does not hold `user:password` (high-availability.zookeeper.client.auth-file)")]
    BadCredential {
        /// The file.
        path: std::path::PathBuf,
    },
}

impl HaError {
    pub(crate) fn zk(
        operation: &'static str,
        path: impl Into<String>,
    ) -> impl FnOnce(zookeeper_client::Error) -> Self {
        let path = path.into();
        move |source| Self::ZooKeeper {
            operation,
            path,
            source,
        }
    }
}

/// The znodes of one cluster: `ROOT/CLUSTER-ID/...`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZnodePaths {
    cluster: String,
}

impl ZnodePaths {
    /// The paths under `root` (`high-availability.zookeeper.path.root`) for `cluster_id`.
    pub fn new(root: &str, cluster_id: &str) -> Self {
        let root = root.trim_end_matches('/');
        Self {
            cluster: format!("{root}/{cluster_id}"),
        }
    }

    /// `ROOT/CLUSTER`.
    pub fn cluster(&self) -> &str {
        &self.cluster
    }

    /// `CLUSTER`: the cluster id alone (directories of `high-availability.storageDir` are named
    /// after it).
    pub fn cluster_id(&self) -> &str {
        self.cluster.rsplit('/').next().unwrap_or("default")
    }

    /// The election's ephemeral sequential nodes live here.
    pub fn latch(&self) -> String {
        format!("{}/leaderlatch", self.cluster)
    }

    /// The leader's [`LeaderInformation`] (ephemeral, owned by the leader's session).
    pub fn leader(&self) -> String {
        format!("{}/leader", self.cluster)
    }

    /// The job graph pointers.
    pub fn job_graphs(&self) -> String {
        format!("{}/jobgraphs", self.cluster)
    }

    /// The pool size an operator set last (persistent).
    pub fn pool_size(&self) -> String {
        format!("{}/pool-size", self.cluster)
    }
}

/// Removes the file at `path`; already gone counts as removed (the stores' removals are
/// retried, and a crash may have removed it before).
pub(crate) fn remove_if_present(path: &std::path::Path) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leader_information_reads_back_and_refuses_garbage() {
        let info = LeaderInformation {
            address: "127.0.0.1:6123".to_owned(),
            rest_url: "http://127.0.0.1:8081".to_owned(),
            leader_session_id: LeaderSessionId::from_u128(7),
        };
        assert_eq!(LeaderInformation::from_bytes(&info.to_bytes()), Some(info));
        assert_eq!(LeaderInformation::from_bytes(b""), None);
        assert_eq!(LeaderInformation::from_bytes(b"{\"address\":1}"), None);
    }

    #[test]
    fn znodes_live_under_root_and_cluster() {
        let paths = ZnodePaths::new("/flint/", "c1");
        assert_eq!(paths.cluster(), "/flint/c1");
        assert_eq!(paths.latch(), "/flint/c1/leaderlatch");
        assert_eq!(paths.leader(), "/flint/c1/leader");
        assert_eq!(paths.job_graphs(), "/flint/c1/jobgraphs");
        assert_eq!(paths.pool_size(), "/flint/c1/pool-size");
        assert_eq!(ZnodePaths::new("/", "c1").cluster(), "/c1");
    }
}
