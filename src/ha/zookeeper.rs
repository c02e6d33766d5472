//! The election and retrieval traits over a real ZooKeeper (the `zookeeper-client` crate).
//!
//! Election is the classic recipe (Curator's `LeaderLatch`, which Flink uses): every contender
//! creates an ephemeral sequential node under `leaderlatch`; the lowest sequence leads; every
//! other watches the node just before its own, so a leader's end wakes exactly one contender.
//! The leader then writes its [`LeaderInformation`] to the ephemeral `leader` node.
//!
//! A leadership is given up as soon as the session is in doubt: the client reports
//! `Disconnected` once the server has been silent for 2/5 of the session timeout, well before
//! the server can expire the session and let another contender in. A contender never reuses a
//! session it doubted: it closes it and joins the election again with a fresh one (its old latch
//! node goes with the old session), which keeps "at most one leader acts at a time" simple.
//!
//! Production-only: the client runs its session task on the process's tokio runtime and does
//! its socket I/O through `async-io` (whose reactor is a thread of its own, outside every
//! determinism seam); the simulation plugs its own coordination service behind the same traits
//! ([`crate::sim::coordination`]).

use std::time::Duration;

use zookeeper_client::{Acls, Client, CreateMode, CreateOptions, SessionState};

use super::election::{LeaderElectionService, Leadership};
use super::retrieval::LeaderRetrievalService;
use super::{HaError, LeaderInformation, ZnodePaths, signed};
use crate::config::ClusterConfig;
use crate::transport::handshake::Secret;

/// The prefix of every latch node (followed by ZooKeeper's ten-digit sequence).
const LATCH_PREFIX: &str = "latch-";

/// How to reach ZooKeeper, where this cluster's znodes are, and the secret their data is
/// signed with.
#[derive(Debug, Clone)]
pub struct ZooKeeperSettings {
    /// `high-availability.zookeeper.quorum`.
    pub quorum: String,
    /// `high-availability.zookeeper.client.session-timeout`.
    pub session_timeout: Duration,
    /// `high-availability.zookeeper.client.connection-timeout`.
    pub connection_timeout: Duration,
    /// `ROOT/CLUSTER-ID`.
    pub paths: ZnodePaths,
    /// `high-availability.zookeeper.client.auth-file`: the `user:password` file sessions
    /// authenticate with (digest), which also makes every znode `CREATOR_ALL`.
    pub auth_file: Option<std::path::PathBuf>,
    /// The cluster secret: what this process writes is signed with it, what it reads must
    /// verify with it ([`signed`]).
    pub secret: Secret,
}

impl ZooKeeperSettings {
    /// The settings of a configuration with `high-availability.type = "zookeeper"`, signing
    /// and verifying with `secret`; `None` otherwise (a validated configuration with it always
    /// names a quorum).
    pub fn of(config: &ClusterConfig, secret: &Secret) -> Option<Self> {
        let ha = &config.high_availability;
        if !ha.is_enabled() {
            return None;
        }
        Some(Self {
            quorum: ha.quorum.clone()?,
            session_timeout: ha.session_timeout,
            connection_timeout: ha.connection_timeout,
            paths: ZnodePaths::new(&ha.root, ha.cluster_id_or(config.cluster.id.as_str())),
            auth_file: ha.auth_file.clone(),
            secret: secret.clone(),
        })
    }

    /// The ACL of every znode this cluster creates: `CREATOR_ALL` (only sessions with the same
    /// digest credential) with an auth file, else open to everyone.
    pub fn acls(&self) -> Acls<'static> {
        match self.auth_file {
            Some(_) => Acls::creator_all(),
            None => Acls::anyone_all(),
        }
    }

    /// `payload` signed for the znode at `path`.
    pub(crate) fn sign(&self, path: &str, payload: &[u8]) -> Vec<u8> {
        signed::sign(&self.secret, path, payload)
    }

    /// The payload of the znode at `path`, or [`HaError::Unverified`] if it is not signed with
    /// this cluster's secret.
    pub(crate) fn verify<'a>(&self, path: &str, data: &'a [u8]) -> Result<&'a [u8], HaError> {
        signed::verify(&self.secret, path, data).map_err(|source| HaError::Unverified {
            path: path.to_owned(),
            source,
        })
    }

    /// The leader information in the data of the `leader` znode, verified.
    fn leader_of(&self, data: &[u8]) -> Result<Option<LeaderInformation>, HaError> {
        let leader = self.paths.leader();
        Ok(LeaderInformation::from_bytes(self.verify(&leader, data)?))
    }

    /// The digest credential (`user:password`) of the auth file, if one is configured.
    fn credential(&self) -> Result<Option<Vec<u8>>, HaError> {
        let Some(path) = &self.auth_file else {
            return Ok(None);
        };
        // A secret: this user's regular file that nobody else may read, as ssh demands.
        let bad = || HaError::BadCredential { path: path.clone() };
        let bytes = crate::env::private::read_secret(path)?.ok_or_else(bad)?;
        let credential = bytes.strip_suffix(b"\n").unwrap_or(&bytes);
        match credential.iter().position(|&byte| byte == b':') {
            Some(at) if at > 0 && at + 1 < credential.len() => Ok(Some(credential.to_vec())),
            _ => Err(bad()),
        }
    }

    /// A new session, or [`HaError::Unreachable`] after the connection timeout. Tries again
    /// (every `CONNECT_ATTEMPT` at most) until then: a connect that went unanswered once may
    /// wait in the client for the whole timeout (seen against a server that had just started
    /// and closed the first connections), although the next attempt would succeed.
    pub async fn connect(&self) -> Result<Client, HaError> {
        let deadline = tokio::time::Instant::now() + self.connection_timeout;
        let credential = self.credential()?;
        let mut last_error = None;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                return Err(HaError::Unreachable {
                    quorum: self.quorum.clone(),
                    timeout: self.connection_timeout,
                    source: last_error,
                });
            }
            let mut connector = Client::connector().with_session_timeout(self.session_timeout);
            if let Some(credential) = &credential {
                connector = connector.with_auth("digest", credential);
            }
            let connecting = connector.connect(&self.quorum);
            match tokio::time::timeout(left.min(CONNECT_ATTEMPT), connecting).await {
                Ok(Ok(client)) => {
                    log::info!(
                        "ZooKeeper: session {} with {} (timeout {:?})",
                        client.session_id(),
                        self.quorum,
                        client.session_timeout()
                    );
                    return Ok(client);
                }
                Ok(Err(error)) => {
                    log::debug!("ZooKeeper: no session with {} yet: {error}", self.quorum);
                    last_error = Some(error);
                    tokio::time::sleep(left.min(CONNECT_RETRY_PAUSE)).await;
                }
                Err(_) => log::debug!("ZooKeeper: {} did not answer; trying again", self.quorum),
            }
        }
    }
}

/// The longest one attempt to open a session may take before [`ZooKeeperSettings::connect`]
/// starts another (within the connection timeout).
const CONNECT_ATTEMPT: Duration = Duration::from_secs(4);

/// The pause after a refused attempt.
const CONNECT_RETRY_PAUSE: Duration = Duration::from_millis(100);

/// The leader published now, for a command-line client outside any runtime: one session on a
/// runtime of its own, one read. A leader znode not signed with the settings' secret is an
/// error ([`HaError::Unverified`]): the client must not send its token there.
pub fn current_leader(settings: &ZooKeeperSettings) -> Result<Option<LeaderInformation>, HaError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(HaError::Runtime)?;
    runtime.block_on(async {
        let client = settings.connect().await?;
        let leader = settings.paths.leader();
        match client.get_data(&leader).await {
            Ok((data, _)) => settings.leader_of(&data),
            Err(zookeeper_client::Error::NoNode) => Ok(None),
            Err(source) => Err(HaError::zk("read", &leader)(source)),
        }
    })
}

/// `mkdir -p` of a persistent znode.
pub(super) async fn ensure_path(
    client: &Client,
    path: &str,
    acls: Acls<'static>,
) -> Result<(), HaError> {
    let options = CreateMode::Persistent.with_acls(acls);
    client
        .mkdir(path, &options)
        .await
        .map_err(HaError::zk("create", path))
}

fn ephemeral(acls: Acls<'static>) -> CreateOptions<'static> {
    CreateMode::Ephemeral.with_acls(acls)
}

/// Waits until the session is no longer connected (at once if it is not); the state that ended
/// it.
async fn session_doubted(client: &Client) -> HaError {
    let mut states = client.state_watcher();
    let mut state = states.peek_state();
    loop {
        if !matches!(
            state,
            SessionState::SyncConnected | SessionState::ConnectedReadOnly
        ) {
            return HaError::SessionLost {
                state: format!("{state:?}"),
            };
        }
        state = states.changed().await;
    }
}

/// The sequence number of a latch node's name.
fn sequence_of(name: &str) -> Option<i64> {
    name.strip_prefix(LATCH_PREFIX)?.parse().ok()
}

/// A contender in the election of one cluster. See the module docs.
pub struct ZooKeeperLeaderElection {
    settings: ZooKeeperSettings,
    client: Option<Client>,
    /// This contender's latch node, once created in the current session.
    latch: Option<String>,
}

impl ZooKeeperLeaderElection {
    /// A contender that has not connected yet.
    pub fn new(settings: ZooKeeperSettings) -> Self {
        Self {
            settings,
            client: None,
            latch: None,
        }
    }

    /// A contender with a session already open (the one a process opened at start to check the
    /// quorum).
    pub fn with_client(settings: ZooKeeperSettings, client: Client) -> Self {
        Self {
            settings,
            client: Some(client),
            latch: None,
        }
    }

    async fn client(&mut self) -> Result<Client, HaError> {
        match &self.client {
            Some(client) if !client.state().is_terminated() => Ok(client.clone()),
            _ => {
                self.latch = None;
                let client = self.settings.connect().await?;
                self.client = Some(client.clone());
                Ok(client)
            }
        }
    }

    /// Forgets the session: the next `acquire` starts with a fresh one.
    fn drop_session(&mut self) {
        self.latch = None;
        // Dropping the last handle closes the session (deleting its ephemeral nodes) if the
        // server is still reachable; otherwise the server expires it.
        self.client = None;
    }

    async fn try_acquire(&mut self) -> Result<Leadership, HaError> {
        let client = self.client().await?;
        let latch_dir = self.settings.paths.latch();
        ensure_path(&client, &latch_dir, self.settings.acls()).await?;
        let own = match &self.latch {
            Some(own) => own.clone(),
            None => {
                let prefix = format!("{latch_dir}/{LATCH_PREFIX}");
                let options = CreateMode::EphemeralSequential.with_acls(self.settings.acls());
                let (_, sequence) = client
                    .create(&prefix, &[], &options)
                    .await
                    .map_err(HaError::zk("create", &prefix))?;
                let own = format!("{LATCH_PREFIX}{sequence}");
                log::info!("ZooKeeper: contending for leadership as {latch_dir}/{own}");
                self.latch = Some(own.clone());
                own
            }
        };
        let own_sequence = sequence_of(&own).unwrap_or(i64::MAX);
        loop {
            let mut contenders: Vec<(i64, String)> = client
                .list_children(&latch_dir)
                .await
                .map_err(HaError::zk("list", &latch_dir))?
                .into_iter()
                .filter_map(|name| sequence_of(&name).map(|seq| (seq, name)))
                .collect();
            contenders.sort();
            let Some(at) = contenders.iter().position(|(_, name)| *name == own) else {
                // Our ephemeral node is gone: the session that made it is over.
                return Err(HaError::SessionLost {
                    state: "latch node deleted".to_owned(),
                });
            };
            if at == 0 {
                let session = client.session_id().0 as u64;
                return Ok(Leadership {
                    token: (u128::from(session) << 64) | u128::from(own_sequence as u64),
                });
            }
            let before = format!("{latch_dir}/{}", contenders[at - 1].1);
            let (stat, watcher) = client
                .check_and_watch_stat(&before)
                .await
                .map_err(HaError::zk("watch", &before))?;
            if stat.is_none() {
                continue;
            }
            log::debug!("ZooKeeper: standing by behind {before}");
            tokio::select! {
                biased;
                lost = session_doubted(&client) => return Err(lost),
                _ = watcher.changed() => {}
            }
        }
    }
}

impl LeaderElectionService for ZooKeeperLeaderElection {
    async fn acquire(&mut self) -> Result<Leadership, HaError> {
        let result = self.try_acquire().await;
        if result.is_err() {
            self.drop_session();
        }
        result
    }

    /// Publishes `info` only while this contender holds the latch in its current session: the
    /// write is one transaction with a check that its latch node still exists (it is ephemeral
    /// and named by its sequence, so it exists only while the session that won the election
    /// does). Never opens a session (a new one holds no latch) and never deletes a node it does
    /// not own: a leader node of another session means that session is still alive at the
    /// server, so this one is not the leader after all (ephemeral nodes of one session go
    /// together: a predecessor whose latch node is gone has no leader node either).
    async fn confirm(&mut self, info: &LeaderInformation) -> Result<(), HaError> {
        let (Some(client), Some(own)) = (self.client.clone(), self.latch.clone()) else {
            return Err(HaError::SessionLost {
                state: "no session holding a latch".to_owned(),
            });
        };
        if client.state().is_terminated() {
            self.drop_session();
            return Err(HaError::SessionLost {
                state: format!("{:?}", client.state()),
            });
        }
        let leader = self.settings.paths.leader();
        let latch = format!("{}/{own}", self.settings.paths.latch());
        let data = self.settings.sign(&leader, &info.to_bytes());
        let own_session = client.session_id().0;
        let lost = |what: &str| HaError::SessionLost {
            state: format!("{what}: the latch node {latch} is gone"),
        };
        for _ in 0..3 {
            let mut write = client
                .new_check_writer(&latch, None)
                .map_err(HaError::zk("check", &latch))?;
            write
                .add_create(&leader, &data, &ephemeral(self.settings.acls()))
                .map_err(HaError::zk("create", &leader))?;
            match write.commit().await {
                Ok(_) => return Ok(()),
                Err(zookeeper_client::CheckWriteError::CheckFailed { .. }) => {
                    self.drop_session();
                    return Err(lost("confirm"));
                }
                Err(zookeeper_client::CheckWriteError::OperationFailed {
                    source: zookeeper_client::Error::NodeExists,
                    ..
                }) => {}
                Err(error) => {
                    let error = zookeeper_client::Error::from(error);
                    if error == zookeeper_client::Error::SessionExpired {
                        self.drop_session();
                    }
                    return Err(HaError::zk("create", &leader)(error));
                }
            }
            // A leader node exists. Ours (an earlier confirm of this session): overwrite it,
            // still under the latch check. Another session's: it is alive, wait for it to go.
            match client.check_stat(&leader).await {
                Ok(Some(stat)) if stat.ephemeral_owner == own_session => {
                    let mut write = client
                        .new_check_writer(&latch, None)
                        .map_err(HaError::zk("check", &latch))?;
                    write
                        .add_set_data(&leader, &data, Some(stat.version))
                        .map_err(HaError::zk("set", &leader))?;
                    return match write.commit().await {
                        Ok(_) => Ok(()),
                        Err(zookeeper_client::CheckWriteError::CheckFailed { .. }) => {
                            self.drop_session();
                            Err(lost("confirm"))
                        }
                        Err(error) => Err(HaError::zk("set", &leader)(error.into())),
                    };
                }
                Ok(Some(stat)) => {
                    log::warn!(
                        "ZooKeeper: {leader} is held by session {:#x}, not ours ({own_session:#x}); waiting for it to go",
                        stat.ephemeral_owner
                    );
                    let (stat, watcher) = client
                        .check_and_watch_stat(&leader)
                        .await
                        .map_err(HaError::zk("watch", &leader))?;
                    if stat.is_some() {
                        tokio::select! {
                            biased;
                            lost = session_doubted(&client) => return Err(lost),
                            _ = watcher.changed() => {}
                        }
                    }
                }
                Ok(None) => {}
                Err(source) => return Err(HaError::zk("stat", &leader)(source)),
            }
        }
        Err(HaError::ZooKeeper {
            operation: "create",
            path: leader,
            source: zookeeper_client::Error::NodeExists,
        })
    }

    async fn renew(&mut self) -> Result<Duration, HaError> {
        let (Some(client), Some(own)) = (self.client.clone(), self.latch.clone()) else {
            return Err(HaError::SessionLost {
                state: "no session".to_owned(),
            });
        };
        // Our latch node, read back: the server answered this session after the call was made,
        // and the node still being ours means the leadership is (the lowest latch leads).
        let latch = format!("{}/{own}", self.settings.paths.latch());
        match client.check_stat(&latch).await {
            Ok(Some(stat)) if stat.ephemeral_owner == client.session_id().0 => {
                Ok(client.session_timeout() * 2 / 5)
            }
            Ok(_) => Err(HaError::SessionLost {
                state: "latch node deleted".to_owned(),
            }),
            Err(source) => Err(HaError::zk("stat", latch)(source)),
        }
    }

    async fn revoked(&mut self) -> HaError {
        let lost = match &self.client {
            Some(client) => session_doubted(client).await,
            None => HaError::SessionLost {
                state: "no session".to_owned(),
            },
        };
        self.drop_session();
        lost
    }

    async fn resign(&mut self) {
        if let (Some(client), Some(own)) = (&self.client, &self.latch) {
            let leader = self.settings.paths.leader();
            let own_session = client.session_id().0;
            let latch = format!("{}/{own}", self.settings.paths.latch());
            let cleanup = async {
                if let Ok(Some(stat)) = client.check_stat(&leader).await
                    && stat.ephemeral_owner == own_session
                {
                    let _ = client.delete(&leader, Some(stat.version)).await;
                }
                let _ = client.delete(&latch, None).await;
            };
            let _ = tokio::time::timeout(Duration::from_secs(2), cleanup).await;
        }
        self.drop_session();
    }
}

/// Follows the `leader` node of one cluster. See the module docs.
pub struct ZooKeeperLeaderRetrieval {
    settings: ZooKeeperSettings,
    client: Option<Client>,
    watcher: Option<zookeeper_client::OneshotWatcher>,
    /// The leader last returned (`Some(None)`: "no leader" was returned).
    last: Option<Option<LeaderInformation>>,
}

impl ZooKeeperLeaderRetrieval {
    /// A retrieval that connects on first use.
    pub fn new(settings: ZooKeeperSettings) -> Self {
        Self {
            settings,
            client: None,
            watcher: None,
            last: None,
        }
    }

    async fn read(&mut self, client: &Client) -> Result<Option<LeaderInformation>, HaError> {
        let leader = self.settings.paths.leader();
        loop {
            match client.get_and_watch_data(&leader).await {
                Ok((data, _, watcher)) => {
                    self.watcher = Some(watcher);
                    // Forged leader information is no leader: followed, a rogue address would
                    // at best fail the handshake; logged each time it changes.
                    return Ok(self.settings.leader_of(&data).unwrap_or_else(|error| {
                        log::warn!(
                            "leader retrieval: {}",
                            crate::base::error_chain::ErrorChain(&error)
                        );
                        None
                    }));
                }
                Err(zookeeper_client::Error::NoNode) => {
                    let (stat, watcher) = client
                        .check_and_watch_stat(&leader)
                        .await
                        .map_err(HaError::zk("watch", &leader))?;
                    self.watcher = Some(watcher);
                    if stat.is_none() {
                        return Ok(None);
                    }
                }
                Err(source) => return Err(HaError::zk("read", &leader)(source)),
            }
        }
    }

    async fn try_next(&mut self) -> Result<Option<LeaderInformation>, HaError> {
        loop {
            let client = match &self.client {
                Some(client) if !client.state().is_terminated() => client.clone(),
                _ => {
                    self.watcher = None;
                    let client = self.settings.connect().await?;
                    self.client = Some(client.clone());
                    client
                }
            };
            if let Some(watcher) = self.watcher.take() {
                tokio::select! {
                    biased;
                    _ = watcher.changed() => {}
                    lost = expired(&client) => return Err(lost),
                }
            }
            let current = self.read(&client).await?;
            if self.last.as_ref() != Some(&current) {
                self.last = Some(current.clone());
                return Ok(current);
            }
        }
    }
}

/// Waits until the session has ended for good (a retrieval rides out disconnections: its
/// watch survives them).
async fn expired(client: &Client) -> HaError {
    let mut states = client.state_watcher();
    let mut state = states.peek_state();
    loop {
        if state.is_terminated() {
            return HaError::SessionLost {
                state: format!("{state:?}"),
            };
        }
        state = states.changed().await;
    }
}

impl LeaderRetrievalService for ZooKeeperLeaderRetrieval {
    async fn next_leader(&mut self) -> Result<Option<LeaderInformation>, HaError> {
        let result = self.try_next().await;
        if result.is_err() {
            self.client = None;
            self.watcher = None;
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latch_sequences_parse_from_names() {
        assert_eq!(sequence_of("latch-0000000007"), Some(7));
        assert_eq!(sequence_of("latch-x"), None);
        assert_eq!(sequence_of("other-0000000001"), None);
    }
}
