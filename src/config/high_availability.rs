//! `[high-availability]`: Flink's HA keys. Off by default (`type = "none"`: one JobManager for
//! the cluster's life, exactly as without these keys); with `"zookeeper"` several
//! `flint jobmanager` processes of one `cluster-id` elect a leader through ZooKeeper and the
//! job graphs they accept are kept in `storageDir` (see [`crate::ha`]).
//!
//! This module owns the section's data and the rules across its keys; the keys themselves (name,
//! kind, default, doc) are in the registry ([`super::keys`]) like every other key.

use std::path::PathBuf;
use std::time::Duration;

use super::ConfigError;

super::choice! {
    /// `high-availability.type`.
    pub enum HighAvailabilityKind {
        /// `none`: one JobManager, no election, nothing persisted.
        #[default]
        None = "none",
        /// `zookeeper`: leader election, leader retrieval and job graph pointers in ZooKeeper.
        ZooKeeper = "zookeeper",
    }
}

/// `[high-availability]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HighAvailabilityConfig {
    /// `high-availability.type`.
    pub kind: HighAvailabilityKind,
    /// `high-availability.zookeeper.quorum`: `host:port[,host:port...]`, as ZooKeeper's own
    /// connect string. Required with `zookeeper`.
    pub quorum: Option<String>,
    /// `high-availability.zookeeper.path.root` (Flink's default `/flink`; Flint's `/flint`):
    /// every znode of every Flint cluster lives under it.
    pub root: String,
    /// `high-availability.cluster-id`: the JobManagers that elect one leader among themselves
    /// share it; unset, it is `cluster.id` (as Flink derives it from the application id).
    pub cluster_id: Option<String>,
    /// `high-availability.storageDir`: a directory every JobManager of the cluster can read and
    /// write (a shared file system), where submitted job graphs are written. ZooKeeper keeps only
    /// pointers to them, as in Flink. Required with `zookeeper`.
    pub storage_dir: Option<PathBuf>,
    /// `high-availability.zookeeper.client.session-timeout` (Flink's 60 s): how long ZooKeeper
    /// keeps a silent JobManager's session, and so its leadership.
    pub session_timeout: Duration,
    /// `high-availability.zookeeper.client.connection-timeout` (Flink's 15 s): how long a
    /// process tries to reach the quorum at start before it gives up.
    pub connection_timeout: Duration,
    /// `high-availability.zookeeper.client.auth-file`: a file holding `user:password` (one
    /// trailing newline ignored). Set, every session authenticates with ZooKeeper's `digest`
    /// scheme and every znode is created `CREATOR_ALL` (Flink's `client.acl: creator`): only
    /// sessions with the same credential can read or change them. Unset, znodes are open to
    /// every client of the ensemble.
    pub auth_file: Option<PathBuf>,
}

impl Default for HighAvailabilityConfig {
    fn default() -> Self {
        Self {
            kind: HighAvailabilityKind::None,
            quorum: None,
            root: "/flint".to_owned(),
            cluster_id: None,
            storage_dir: None,
            session_timeout: Duration::from_secs(60),
            connection_timeout: Duration::from_secs(15),
            auth_file: None,
        }
    }
}

impl HighAvailabilityConfig {
    /// Whether leader election through ZooKeeper is on.
    pub fn is_enabled(&self) -> bool {
        self.kind == HighAvailabilityKind::ZooKeeper
    }

    /// The cluster's id for HA: `high-availability.cluster-id`, else `cluster_id` (`cluster.id`).
    pub fn cluster_id_or<'a>(&'a self, cluster_id: &'a str) -> &'a str {
        self.cluster_id.as_deref().unwrap_or(cluster_id)
    }

    /// The rules across the section's keys (each key's own kind is checked by the registry).
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if !self.root.starts_with('/') || (self.root.len() > 1 && self.root.ends_with('/')) {
            return Err(ConfigError::invalid(
                "high-availability.zookeeper.path.root",
                super::kind::quote(&self.root),
                "an absolute znode path: starts with `/`, no trailing `/` (e.g. \"/flint\")",
            ));
        }
        if let Some(id) = &self.cluster_id
            && (id.contains('/') || id == "." || id == "..")
        {
            return Err(ConfigError::invalid(
                "high-availability.cluster-id",
                super::kind::quote(id),
                "one znode name: no `/`, not `.` or `..`",
            ));
        }
        if let Some(quorum) = &self.quorum
            && let Err(why) = parse_quorum(quorum)
        {
            return Err(ConfigError::invalid(
                "high-availability.zookeeper.quorum",
                super::kind::quote(quorum),
                format!("host:port[,host:port...] ({why})"),
            ));
        }
        if !self.is_enabled() {
            return Ok(());
        }
        if self.quorum.is_none() {
            return Err(ConfigError::invalid(
                "high-availability.zookeeper.quorum",
                "(not set)",
                "host:port[,host:port...] of the ZooKeeper quorum when high-availability.type \
                 is \"zookeeper\"",
            )
            .because_of("high-availability.type"));
        }
        if self.storage_dir.is_none() {
            return Err(ConfigError::invalid(
                "high-availability.storageDir",
                "(not set)",
                "a directory every JobManager can reach when high-availability.type is \
                 \"zookeeper\" (job graphs are written there)",
            )
            .because_of("high-availability.type"));
        }
        Ok(())
    }
}

/// The `host:port` servers of a quorum string, each checked; the error says what is wrong.
pub fn parse_quorum(quorum: &str) -> Result<Vec<(String, u16)>, String> {
    let mut servers = Vec::new();
    for server in quorum.split(',') {
        let server = server.trim();
        let (host, port) = server
            .rsplit_once(':')
            .ok_or_else(|| format!("`{server}` has no `:port`"))?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() {
            return Err(format!("`{server}` has no host"));
        }
        let port: u16 = port
            .parse()
            .ok()
            .filter(|port| *port != 0)
            .ok_or_else(|| format!("`{port}` in `{server}` is not a port (1 to 65535)"))?;
        servers.push((host.to_owned(), port));
    }
    Ok(servers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quorum_is_host_port_pairs() {
        assert_eq!(
            parse_quorum("zk1:2181, 10.0.0.2:2182"),
            Ok(vec![
                ("zk1".to_owned(), 2181),
                ("10.0.0.2".to_owned(), 2182)
            ])
        );
        for bad in ["zk1", "zk1:", ":2181", "zk1:0", "zk1:2181,", "zk1:http"] {
            assert!(parse_quorum(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn zookeeper_needs_a_quorum_and_a_storage_dir() {
        let mut ha = HighAvailabilityConfig {
            kind: HighAvailabilityKind::ZooKeeper,
            ..HighAvailabilityConfig::default()
        };
        let error = ha.validate().unwrap_err().to_string();
        assert!(
            error.contains("high-availability.zookeeper.quorum"),
            "{error}"
        );
        ha.quorum = Some("127.0.0.1:2181".to_owned());
        let error = ha.validate().unwrap_err().to_string();
        assert!(error.contains("high-availability.storageDir"), "{error}");
        ha.storage_dir = Some(PathBuf::from("/tmp/ha"));
        ha.validate().unwrap();
        ha.root = "flint".to_owned();
        let error = ha.validate().unwrap_err().to_string();
        assert!(error.contains("path.root"), "{error}");
    }

    #[test]
    fn none_accepts_the_zookeeper_keys_unused() {
        let ha = HighAvailabilityConfig {
            quorum: Some("127.0.0.1:2181".to_owned()),
            storage_dir: Some(PathBuf::from("/tmp/ha")),
            ..HighAvailabilityConfig::default()
        };
        ha.validate().unwrap();
        assert!(!ha.is_enabled());
    }
}
