//! Cluster configuration: Flink's key names and defaults, validated before anything starts.
//!
//! A config is built in code (`ClusterConfig::default()` and field updates) or read from TOML:
//!
//! ```toml
//! [cluster]
//! id = "default"
//! [cluster.registration]          # how a TaskManager retries registration at the JobManager
//! initial-timeout = "100ms"
//! max-timeout = "30s"
//! refused-registration-delay = "30s"
//! error-delay = "10s"
//! [heartbeat]
//! interval = "10s"
//! timeout = "50s"
//! [resourcemanager]
//! pool-size = 4                   # the designated number of TaskManagers
//! max-pool-size = 10000
//! check-interval = "1s"
//! taskmanager-registration.timeout = "5min"
//! [resourcemanager.start-worker]  # backoff after a worker fails to start
//! initial-backoff = "200ms"
//! max-backoff = "30s"
//! [taskmanager]
//! slots = 2
//! ```
//!
//! Durations are integers (milliseconds, as Flink writes them) or strings with a unit
//! (`"500ms"`, `"10s"`, `"5min"`). [`ClusterConfig::validate`] names the key of anything wrong.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::messages::ids::ClusterId;

/// The largest pool size accepted at all: beyond it a value is surely a typo.
pub const POOL_SIZE_LIMIT: u32 = 100_000;

/// A configuration that cannot be used. Not retryable: the configuration must change.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A key has a value outside what it accepts.
    #[error("invalid configuration: {key} = {value}: {expected}")]
    Invalid {
        /// The key, as written in the file.
        key: &'static str,
        /// The value given.
        value: String,
        /// What the key accepts.
        expected: String,
    },
    /// The TOML text is malformed or has a value of the wrong type (the message points at it).
    #[error("invalid configuration file")]
    Parse(#[source] Box<toml::de::Error>),
}

/// Everything a cluster is started with.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct ClusterConfig {
    /// `[cluster]`: identity and TaskManager registration.
    pub cluster: ClusterSection,
    /// `[heartbeat]`: liveness between JobManager and TaskManagers.
    pub heartbeat: HeartbeatConfig,
    /// `[resourcemanager]`: the worker pool.
    pub resourcemanager: ResourceManagerConfig,
    /// `[taskmanager]`: each worker.
    pub taskmanager: TaskManagerConfig,
    /// `[slot]`: slot requests.
    pub slot: SlotConfig,
    /// `[transport]`: how nodes talk to each other.
    pub transport: TransportConfig,
    /// `[rest]`: the JobManager's REST API and dashboard (and where clients find it).
    pub rest: RestConfig,
    /// Seed of every node's RNG; `None` draws one from the OS. Set it to replay a run.
    pub seed: Option<u64>,
}

/// `[cluster]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct ClusterSection {
    /// `cluster.id`: TaskManagers of another cluster are refused.
    pub id: ClusterId,
    /// `[cluster.registration]`.
    pub registration: RegistrationConfig,
}

impl Default for ClusterSection {
    fn default() -> Self {
        Self {
            id: ClusterId::new("default"),
            registration: RegistrationConfig::default(),
        }
    }
}

/// `[cluster.registration]`: how a TaskManager retries registration (Flink's defaults).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct RegistrationConfig {
    /// `cluster.registration.initial-timeout`: the first attempt's timeout; each timed-out
    /// attempt doubles it.
    #[serde(with = "duration")]
    pub initial_timeout: Duration,
    /// `cluster.registration.max-timeout`: the cap of that doubling.
    #[serde(with = "duration")]
    pub max_timeout: Duration,
    /// `cluster.registration.refused-registration-delay`: the pause after a refusal.
    #[serde(with = "duration")]
    pub refused_registration_delay: Duration,
    /// `cluster.registration.error-delay`: the pause after an error (the JobManager unreachable).
    #[serde(with = "duration")]
    pub error_delay: Duration,
}

impl Default for RegistrationConfig {
    fn default() -> Self {
        Self {
            initial_timeout: Duration::from_millis(100),
            max_timeout: Duration::from_secs(30),
            refused_registration_delay: Duration::from_secs(30),
            error_delay: Duration::from_secs(10),
        }
    }
}

/// `[heartbeat]` (Flink's defaults: 10 s interval, 50 s timeout).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct HeartbeatConfig {
    /// `heartbeat.interval`: how often a TaskManager reports.
    #[serde(with = "duration")]
    pub interval: Duration,
    /// `heartbeat.timeout`: silence after which a peer counts as lost.
    #[serde(with = "duration")]
    pub timeout: Duration,
}

impl Default for HeartbeatConfig {
    fn default() -> Self {
        Self {
            interval: Duration::from_secs(10),
            timeout: Duration::from_secs(50),
        }
    }
}

/// `[resourcemanager]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct ResourceManagerConfig {
    /// `resourcemanager.pool-size`: the designated number of TaskManagers.
    pub pool_size: u32,
    /// `resourcemanager.max-pool-size`: no request may take the pool beyond it.
    pub max_pool_size: u32,
    /// `resourcemanager.check-interval`: how often the pool is compared with its size.
    #[serde(with = "duration")]
    pub check_interval: Duration,
    /// `resourcemanager.taskmanager-registration`.
    pub taskmanager_registration: WorkerRegistrationConfig,
    /// `resourcemanager.start-worker`.
    pub start_worker: StartWorkerConfig,
    /// `resourcemanager.registration`: how the RM retries registering at the JobManager.
    pub registration: BackoffConfig,
    /// `resourcemanager.taskmanager-timeout` (Flink's, 30 s): after the pool grew for demand,
    /// how long TaskManagers beyond the configured pool size may sit idle before they go.
    #[serde(with = "duration")]
    pub taskmanager_timeout: Duration,
    /// `resourcemanager.driver`: how the `flint jobmanager` process gets workers (the embedded
    /// cluster always runs them in-process).
    pub driver: DriverKind,
    /// `[resourcemanager.command]`: the `command` driver's template and hosts.
    pub command: CommandConfig,
}

/// `resourcemanager.driver`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DriverKind {
    /// `flint taskmanager` children on the JobManager's machine.
    #[default]
    LocalProcess,
    /// A command template run over a host list, round-robin (`ssh {host} flint taskmanager ...`).
    Command,
    /// Nothing is started: TaskManagers started elsewhere register themselves.
    Standalone,
}

/// `[resourcemanager.command]`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct CommandConfig {
    /// The program and its arguments, with `{host}`, `{jobmanager}`, `{resource_id}` and
    /// `{slots}` filled in per worker, e.g.
    /// `["ssh", "{host}", "flint", "taskmanager", "--jobmanager", "{jobmanager}", "--resource-id",
    /// "{resource_id}", "--slots", "{slots}"]`.
    pub template: Vec<String>,
    /// The hosts `{host}` takes in turn.
    pub hosts: Vec<String>,
}

impl Default for ResourceManagerConfig {
    fn default() -> Self {
        Self {
            pool_size: 1,
            max_pool_size: 10_000,
            check_interval: Duration::from_secs(1),
            taskmanager_registration: WorkerRegistrationConfig::default(),
            start_worker: StartWorkerConfig::default(),
            registration: BackoffConfig {
                initial_backoff: Duration::from_millis(100),
                max_backoff: Duration::from_secs(10),
            },
            taskmanager_timeout: Duration::from_secs(30),
            driver: DriverKind::default(),
            command: CommandConfig::default(),
        }
    }
}

/// `[resourcemanager.taskmanager-registration]`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct WorkerRegistrationConfig {
    /// `resourcemanager.taskmanager-registration.timeout`: a started worker that has not
    /// registered by then is released and replaced (Flink: 5 min).
    #[serde(with = "duration")]
    pub timeout: Duration,
}

impl Default for WorkerRegistrationConfig {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(300),
        }
    }
}

/// `[resourcemanager.start-worker]`: the backoff after workers fail to start.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct StartWorkerConfig {
    /// `resourcemanager.start-worker.initial-backoff`: the pause after the first failure; it
    /// doubles with each consecutive failure.
    #[serde(with = "duration")]
    pub initial_backoff: Duration,
    /// `resourcemanager.start-worker.max-backoff`: the cap of that doubling.
    #[serde(with = "duration")]
    pub max_backoff: Duration,
}

impl Default for StartWorkerConfig {
    fn default() -> Self {
        Self {
            initial_backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(30),
        }
    }
}

/// An exponential backoff: `initial-backoff`, doubling to `max-backoff`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct BackoffConfig {
    /// The first pause.
    #[serde(with = "duration")]
    pub initial_backoff: Duration,
    /// The cap.
    #[serde(with = "duration")]
    pub max_backoff: Duration,
}

/// `[taskmanager]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct TaskManagerConfig {
    /// `taskmanager.slots`: slots each TaskManager offers.
    pub slots: u32,
    /// `taskmanager.working-dir`: where TaskManagers spill result partitions (each in its own
    /// subdirectory). Default: the system temp directory.
    pub working_dir: Option<std::path::PathBuf>,
    /// `taskmanager.spill-threshold`: a result partition above this many bytes spills to disk.
    pub spill_threshold: u64,
}

impl Default for TaskManagerConfig {
    fn default() -> Self {
        Self {
            slots: 1,
            working_dir: None,
            spill_threshold: 64 << 20,
        }
    }
}

/// `[transport]`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct TransportConfig {
    /// `[transport.tls]`: TLS under the handshake when set (`cert`, `key`, `ca` PEM paths).
    pub tls: Option<crate::transport::tls::TlsConfig>,
}

/// `[rest]`: the JobManager's HTTP endpoint (REST API, dashboard, metrics). Clients (`flint list`,
/// ...) find the JobManager here too, as Flink's CLI does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct RestConfig {
    /// `rest.address`: the host the REST endpoint binds to (and clients connect to).
    pub address: String,
    /// `rest.port`: its port; 0 picks a free one (printed at start).
    pub port: u16,
    /// `rest.token`: the bearer token the endpoints that change anything require. Required when
    /// `rest.address` is not a loopback address; unset on loopback means no token is asked for.
    pub token: Option<String>,
}

impl Default for RestConfig {
    fn default() -> Self {
        Self {
            address: "127.0.0.1".to_owned(),
            port: 8081,
            token: None,
        }
    }
}

/// `[slot]`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct SlotConfig {
    /// `slot.request-timeout` (Flink's `slot.request.timeout`, 5 min): a task that waited this
    /// long for a slot fails with NoResourceAvailable.
    #[serde(with = "duration")]
    pub request_timeout: Duration,
}

impl Default for SlotConfig {
    fn default() -> Self {
        Self {
            request_timeout: Duration::from_secs(300),
        }
    }
}

impl ClusterConfig {
    /// Reads and validates a TOML configuration.
    pub fn from_toml_str(text: &str) -> Result<Self, ConfigError> {
        let config: Self = toml::from_str(text).map_err(|e| ConfigError::Parse(Box::new(e)))?;
        config.validate()?;
        Ok(config)
    }

    /// Checks every value against what its key accepts.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let rm = &self.resourcemanager;
        if rm.max_pool_size == 0 || rm.max_pool_size > POOL_SIZE_LIMIT {
            return Err(invalid(
                "resourcemanager.max-pool-size",
                rm.max_pool_size,
                format!("a whole number from 1 to {POOL_SIZE_LIMIT}"),
            ));
        }
        if rm.pool_size > rm.max_pool_size {
            return Err(invalid(
                "resourcemanager.pool-size",
                rm.pool_size,
                format!(
                    "a whole number from 0 to resourcemanager.max-pool-size ({})",
                    rm.max_pool_size
                ),
            ));
        }
        let max_slots = crate::messages::job_manager::MAX_SLOTS_PER_TASK_MANAGER;
        if self.taskmanager.slots == 0 || self.taskmanager.slots > max_slots {
            return Err(invalid(
                "taskmanager.slots",
                self.taskmanager.slots,
                format!(
                    "a whole number from 1 to {max_slots} (a TaskManager without slots runs nothing)"
                ),
            ));
        }
        if self.cluster.id.as_str().is_empty() {
            return Err(invalid("cluster.id", "\"\"", "a non-empty name"));
        }
        positive("heartbeat.interval", self.heartbeat.interval)?;
        if self.heartbeat.timeout <= self.heartbeat.interval {
            return Err(invalid(
                "heartbeat.timeout",
                show(self.heartbeat.timeout),
                format!(
                    "more than heartbeat.interval ({})",
                    show(self.heartbeat.interval)
                ),
            ));
        }
        positive("resourcemanager.check-interval", rm.check_interval)?;
        positive(
            "resourcemanager.taskmanager-timeout",
            rm.taskmanager_timeout,
        )?;
        if rm.driver == DriverKind::Command {
            if rm.command.template.is_empty() {
                return Err(invalid(
                    "resourcemanager.command.template",
                    "[]",
                    "the program and its arguments, e.g. [\"ssh\", \"{host}\", \"flint\", \"taskmanager\", ...]",
                ));
            }
            if rm.command.hosts.is_empty() {
                return Err(invalid(
                    "resourcemanager.command.hosts",
                    "[]",
                    "at least one host for the command driver",
                ));
            }
        }
        positive("slot.request-timeout", self.slot.request_timeout)?;
        if self.taskmanager.spill_threshold == 0 {
            return Err(invalid(
                "taskmanager.spill-threshold",
                0,
                "a number of bytes above zero",
            ));
        }
        positive(
            "resourcemanager.taskmanager-registration.timeout",
            rm.taskmanager_registration.timeout,
        )?;
        ordered_backoff(
            "resourcemanager.start-worker.initial-backoff",
            "resourcemanager.start-worker.max-backoff",
            rm.start_worker.initial_backoff,
            rm.start_worker.max_backoff,
        )?;
        ordered_backoff(
            "resourcemanager.registration.initial-backoff",
            "resourcemanager.registration.max-backoff",
            rm.registration.initial_backoff,
            rm.registration.max_backoff,
        )?;
        let registration = &self.cluster.registration;
        ordered_backoff(
            "cluster.registration.initial-timeout",
            "cluster.registration.max-timeout",
            registration.initial_timeout,
            registration.max_timeout,
        )?;
        positive(
            "cluster.registration.refused-registration-delay",
            registration.refused_registration_delay,
        )?;
        positive("cluster.registration.error-delay", registration.error_delay)?;
        Ok(())
    }
}

fn invalid(key: &'static str, value: impl ToString, expected: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key,
        value: value.to_string(),
        expected: expected.into(),
    }
}

fn show(duration: Duration) -> String {
    humantime::format_duration(duration).to_string()
}

fn positive(key: &'static str, value: Duration) -> Result<(), ConfigError> {
    if value.is_zero() {
        return Err(invalid(key, "0", "a duration above zero"));
    }
    Ok(())
}

fn ordered_backoff(
    initial_key: &'static str,
    max_key: &'static str,
    initial: Duration,
    max: Duration,
) -> Result<(), ConfigError> {
    positive(initial_key, initial)?;
    if max < initial {
        return Err(invalid(
            max_key,
            show(max),
            format!("at least {initial_key} ({})", show(initial)),
        ));
    }
    Ok(())
}

/// Serde for durations: an integer is milliseconds (Flink's unit), a string has a unit.
mod duration {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Millis(u64),
        Text(String),
    }

    pub fn serialize<S: Serializer>(value: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(&humantime::format_duration(*value))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        match Raw::deserialize(deserializer)? {
            Raw::Millis(millis) => Ok(Duration::from_millis(millis)),
            Raw::Text(text) => humantime::parse_duration(text.trim()).map_err(|e| {
                serde::de::Error::custom(format!(
                    "`{text}` is not a duration ({e}); write e.g. \"500ms\", \"10s\", \"5min\" or whole milliseconds"
                ))
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error_key(config: &ClusterConfig) -> &'static str {
        match config.validate() {
            Err(ConfigError::Invalid { key, .. }) => key,
            other => panic!("expected an invalid key, got {other:?}"),
        }
    }

    #[test]
    fn defaults_are_valid_and_flink_like() {
        let config = ClusterConfig::default();
        config.validate().unwrap();
        assert_eq!(config.heartbeat.interval, Duration::from_secs(10));
        assert_eq!(config.heartbeat.timeout, Duration::from_secs(50));
        assert_eq!(
            config.cluster.registration.initial_timeout,
            Duration::from_millis(100)
        );
        assert_eq!(
            config.cluster.registration.max_timeout,
            Duration::from_secs(30)
        );
        assert_eq!(
            config.cluster.registration.refused_registration_delay,
            Duration::from_secs(30)
        );
    }

    #[test]
    fn reads_toml_with_flink_keys_and_units() {
        let config = ClusterConfig::from_toml_str(
            r#"
            seed = 7
            [cluster]
            id = "prod"
            [heartbeat]
            interval = 500
            timeout = "2s"
            [resourcemanager]
            pool-size = 4
            taskmanager-registration.timeout = "1min"
            [taskmanager]
            slots = 3
            "#,
        )
        .unwrap();
        assert_eq!(config.cluster.id, ClusterId::new("prod"));
        assert_eq!(config.heartbeat.interval, Duration::from_millis(500));
        assert_eq!(config.heartbeat.timeout, Duration::from_secs(2));
        assert_eq!(config.resourcemanager.pool_size, 4);
        assert_eq!(
            config.resourcemanager.taskmanager_registration.timeout,
            Duration::from_secs(60)
        );
        assert_eq!(config.taskmanager.slots, 3);
        assert_eq!(config.seed, Some(7));
    }

    #[test]
    fn the_command_driver_needs_a_template_and_hosts() {
        let config = ClusterConfig::from_toml_str(
            "[resourcemanager]\ndriver = \"command\"\n[resourcemanager.command]\ntemplate = [\"ssh\", \"{host}\"]\n",
        );
        let text = config.unwrap_err().to_string();
        assert!(text.contains("resourcemanager.command.hosts"), "{text}");
        let config = ClusterConfig::from_toml_str(
            "[resourcemanager]\ndriver = \"command\"\n[resourcemanager.command]\ntemplate = [\"ssh\", \"{host}\"]\nhosts = [\"a\"]\n",
        )
        .unwrap();
        assert_eq!(config.resourcemanager.driver, DriverKind::Command);
        assert!(
            ClusterConfig::from_toml_str("[resourcemanager]\ndriver = \"kubernetes\"\n").is_err()
        );
    }

    #[test]
    fn zero_slots_names_the_key() {
        let mut config = ClusterConfig::default();
        config.taskmanager.slots = 0;
        assert_eq!(error_key(&config), "taskmanager.slots");
    }

    #[test]
    fn absurd_pool_size_names_the_key() {
        let mut config = ClusterConfig::default();
        config.resourcemanager.pool_size = 4_000_000_000;
        assert_eq!(error_key(&config), "resourcemanager.pool-size");
        config.resourcemanager.max_pool_size = 4_000_000_000;
        assert_eq!(error_key(&config), "resourcemanager.max-pool-size");
    }

    #[test]
    fn negative_pool_size_in_a_file_points_at_it() {
        let err = ClusterConfig::from_toml_str("[resourcemanager]\npool-size = -1\n").unwrap_err();
        let text = format!("{}", std::error::Error::source(&err).unwrap());
        assert!(text.contains("pool-size"), "{text}");
        assert!(text.contains("-1"), "{text}");
    }

    #[test]
    fn heartbeat_timeout_must_exceed_interval() {
        let mut config = ClusterConfig::default();
        config.heartbeat.timeout = config.heartbeat.interval;
        assert_eq!(error_key(&config), "heartbeat.timeout");
        let err = config.validate().unwrap_err().to_string();
        assert!(err.contains("heartbeat.interval (10s)"), "{err}");
    }

    #[test]
    fn zero_durations_and_inverted_backoffs_name_the_key() {
        let mut config = ClusterConfig::default();
        config.heartbeat.interval = Duration::ZERO;
        assert_eq!(error_key(&config), "heartbeat.interval");

        let mut config = ClusterConfig::default();
        config.cluster.registration.max_timeout = Duration::from_millis(10);
        assert_eq!(error_key(&config), "cluster.registration.max-timeout");

        let mut config = ClusterConfig::default();
        config.resourcemanager.start_worker.initial_backoff = Duration::ZERO;
        assert_eq!(
            error_key(&config),
            "resourcemanager.start-worker.initial-backoff"
        );
    }

    #[test]
    fn unknown_keys_and_bad_durations_are_refused() {
        assert!(ClusterConfig::from_toml_str("[heartbeat]\nintervall = 5\n").is_err());
        let err = ClusterConfig::from_toml_str("[heartbeat]\ninterval = \"soon\"\n").unwrap_err();
        let text = format!("{}", std::error::Error::source(&err).unwrap());
        assert!(text.contains("not a duration"), "{text}");
    }
}
