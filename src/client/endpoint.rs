//! Where the client commands find the JobManager's REST API, and with which token.
//!
//! The address comes from the first of: `--jobmanager URL`, the `FLINT_JOBMANAGER` variable, the
//! leader's REST URL as published in ZooKeeper when the configuration file sets
//! `high-availability.type = "zookeeper"`, the configuration file's `rest.address` and
//! `rest.port` (the file from `--config` or `FLINT_CONFIG`), and the default `127.0.0.1:8081`
//! (Flink's). The token for the endpoints that
//! change anything comes from `FLINT_REST_TOKEN`, else from the file's `rest.token`, else from
//! the file its `rest.token-file` names — the variable wins, as every `FLINT_*` variable wins
//! over the file; there is deliberately no flag, since a command line is visible to every user
//! of the machine. With none of those, a JobManager on this machine's loopback is sent the token
//! a JobManager of this user generated (`~/.local/state/flint/rest-token`,
//! [`crate::process::credentials`]); a JobManager elsewhere is sent none.
//!
//! This module only resolves; it never connects. The environment is passed in as a lookup
//! function, so the precedence is tested without touching the process's variables.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use crate::config::{ClusterConfig, ConfigError, ConfigSources, keys};
use crate::process::credentials::{CredentialsError, LocalCredentials};
use crate::transport::handshake::Secret;

/// The variable naming the JobManager's REST address.
pub const ENV_JOBMANAGER: &str = "FLINT_JOBMANAGER";
/// The variable naming the configuration file.
pub const ENV_CONFIG: &str = "FLINT_CONFIG";
/// The variable holding the REST token.
pub const ENV_TOKEN: &str = "FLINT_REST_TOKEN";

/// Why the JobManager's address or the configuration cannot be used. Not retryable: the flag,
/// variable or file must change.
#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    /// A URL or `HOST:PORT` that cannot be used.
    #[error("{source_name} `{given}` is not a JobManager address: {reason}")]
    BadUrl {
        /// Where it came from (`--jobmanager`, `FLINT_JOBMANAGER`, the file's keys).
        source_name: String,
        /// What was given.
        given: String,
        /// What is wrong, and what is accepted.
        reason: &'static str,
    },
    /// The configuration (file or `FLINT_REST_*` variables) cannot be used; the error names
    /// the key, the value and where it came from.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// High availability: no leader's REST URL could be learnt from ZooKeeper. Retryable (an
    /// election may be under way), but the command stops with the usage exit code.
    #[error(
        "cannot find the JobManager leader through ZooKeeper (high-availability.zookeeper.quorum \
         `{quorum}`){}; pass --jobmanager to ask a JobManager directly",
        if source.is_none() { ": no leader is elected now" } else { "" }
    )]
    NoLeader {
        /// The quorum asked.
        quorum: String,
        /// Why, unless there simply is no leader.
        #[source]
        source: Option<crate::ha::HaError>,
    },
    /// This user's generated token or secret exists but cannot be trusted (not private) or
    /// read.
    #[error("cannot use this user's generated credentials")]
    Credentials(#[source] CredentialsError),
    /// `rest.token-file` cannot be read as a token (text).
    #[error("cannot read the REST token from rest.token-file {path}")]
    TokenFile {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// A JobManager's REST base URL: `http://HOST[:PORT][/PREFIX]`, without a trailing slash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobManagerUrl(String);

impl JobManagerUrl {
    /// The URL of `path` (which starts with `/`) on this JobManager.
    pub fn join(&self, path: &str) -> String {
        format!("{}{path}", self.0)
    }

    /// The base URL.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// `http://HOST:PORT` of this URL (its origin, as a browser compares them).
    pub fn origin(&self) -> &str {
        origin_of(&self.0)
    }

    /// Whether the host is this machine's loopback (`localhost`, 127.0.0.0/8, `[::1]`): only
    /// then does the client send the token a JobManager of this user generated here.
    pub fn is_loopback(&self) -> bool {
        let authority = &self.origin()["http://".len()..];
        let host = match authority.rfind(':') {
            Some(at) if !authority[at..].contains(']') => &authority[..at],
            _ => authority,
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        host.eq_ignore_ascii_case("localhost")
            || host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    }

    /// `http://host:port` for a configured `rest.address` and `rest.port`. A wildcard address
    /// (the JobManager listening everywhere) is reached on loopback.
    fn from_address(address: &str, port: u16) -> Result<Self, &'static str> {
        let host = match address {
            "0.0.0.0" => "127.0.0.1",
            "::" | "[::]" => "[::1]",
            other => other,
        };
        let host = if host.contains(':') && !host.starts_with('[') {
            format!("[{host}]")
        } else {
            host.to_owned()
        };
        format!("http://{host}:{port}").parse()
    }
}

/// `http://HOST:PORT` of an `http://` URL: everything before the path.
pub fn origin_of(url: &str) -> &str {
    let after_scheme = url.find("://").map_or(0, |at| at + 3);
    match url[after_scheme..].find(['/', '?', '#']) {
        Some(at) => &url[..after_scheme + at],
        None => url,
    }
}

impl fmt::Display for JobManagerUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for JobManagerUrl {
    type Err = &'static str;

    /// Accepts `http://HOST[:PORT][/PREFIX]` and a bare `HOST:PORT` (taken as http).
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        const ACCEPTED: &str = "expected http://HOST:PORT or HOST:PORT";
        let text = text.trim();
        if text.starts_with("https://") {
            return Err(
                "https is not supported: the JobManager's REST API speaks plain HTTP \
                 (put a TLS proxy in front and give its http address, or use http://)",
            );
        }
        let (rest, bare) = match text.strip_prefix("http://") {
            Some(rest) => (rest, false),
            None if text.contains("://") => return Err(ACCEPTED),
            None => (text, true),
        };
        let (authority, path) = match rest.find('/') {
            Some(at) => rest.split_at(at),
            None => (rest, ""),
        };
        if authority.is_empty() || authority.contains(['@', '?', '#', ' ']) {
            return Err(ACCEPTED);
        }
        if bare && !path.is_empty() {
            return Err("a path needs the http:// form: http://HOST:PORT/PATH");
        }
        // The port: after the last `:` that is not inside an IPv6 literal's brackets.
        let port = match authority.rfind(':') {
            Some(at) if !authority[at..].contains(']') => Some(&authority[at + 1..]),
            _ => None,
        };
        let host = port.map_or(authority, |p| &authority[..authority.len() - p.len() - 1]);
        if host.is_empty() || (host.contains(':') && !host.starts_with('[')) {
            return Err(ACCEPTED);
        }
        match port {
            Some(port) if port.parse::<u16>().is_err() => {
                return Err("the port is not a number from 0 to 65535");
            }
            None if bare => return Err("no port: expected HOST:PORT, e.g. 127.0.0.1:8081"),
            _ => {}
        }
        Ok(Self(format!(
            "http://{authority}{}",
            path.trim_end_matches('/')
        )))
    }
}

/// Where the JobManager's address came from, to say so when it cannot be reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndpointSource {
    /// `--jobmanager`.
    Flag,
    /// `FLINT_JOBMANAGER`.
    Env,
    /// `rest.address`/`rest.port` of this configuration file.
    Config(PathBuf),
    /// The leader published in ZooKeeper, per the high-availability keys of this file.
    Leader(PathBuf),
    /// Neither: the default `rest.address`/`rest.port`.
    Default,
}

impl fmt::Display for EndpointSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Flag => f.write_str("from --jobmanager"),
            Self::Env => write!(f, "from {ENV_JOBMANAGER}"),
            Self::Config(path) => write!(f, "from rest.address/rest.port in {}", path.display()),
            Self::Leader(path) => write!(
                f,
                "the leader published in ZooKeeper (high-availability keys in {})",
                path.display()
            ),
            Self::Default => f.write_str("the default"),
        }
    }
}

/// The JobManager a client command talks to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// Its REST base URL.
    pub url: JobManagerUrl,
    /// Where that came from.
    pub source: EndpointSource,
    /// The bearer token for the endpoints that change anything, if one is configured.
    pub token: Option<String>,
}

impl Endpoint {
    /// Resolves the JobManager from the flag, the environment (`env` looks a variable up) and
    /// the configuration file (`config`, else `FLINT_CONFIG`), as the module docs say.
    pub fn resolve(
        flag: Option<&str>,
        config: Option<&Path>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, EndpointError> {
        let config_path = config
            .map(Path::to_owned)
            .or_else(|| env(ENV_CONFIG).filter(|v| !v.is_empty()).map(PathBuf::from));
        let loaded = load_client_config(config_path.as_deref(), &env)?;
        let rest = loaded.rest.clone();
        let bad = |source_name: String, given: &str, reason| EndpointError::BadUrl {
            source_name,
            given: given.to_owned(),
            reason,
        };
        let env_url = env(ENV_JOBMANAGER).filter(|v| !v.is_empty());
        let (url, source) = if let Some(flag) = flag {
            let url = flag
                .parse()
                .map_err(|reason| bad("--jobmanager".to_owned(), flag, reason))?;
            (url, EndpointSource::Flag)
        } else if let Some(value) = env_url {
            let url = value
                .parse()
                .map_err(|reason| bad(ENV_JOBMANAGER.to_owned(), &value, reason))?;
            (url, EndpointSource::Env)
        } else if let (Some(settings), Some(path)) = (
            leader_settings(&loaded, config_path.is_some(), &env)?,
            &config_path,
        ) {
            let no_leader = |source| EndpointError::NoLeader {
                quorum: settings.quorum.clone(),
                source,
            };
            let leader = crate::ha::zookeeper::current_leader(&settings)
                .map_err(|e| no_leader(Some(e)))?
                .ok_or_else(|| no_leader(None))?;
            let url = leader.rest_url.parse().map_err(|reason| {
                bad(
                    "the leader's published REST URL".to_owned(),
                    &leader.rest_url,
                    reason,
                )
            })?;
            (url, EndpointSource::Leader(path.clone()))
        } else {
            let url = JobManagerUrl::from_address(&rest.address, rest.port).map_err(|reason| {
                bad(
                    "rest.address/rest.port".to_owned(),
                    &format!("{}:{}", rest.address, rest.port),
                    reason,
                )
            })?;
            let source = match config_path {
                Some(path) => EndpointSource::Config(path),
                None => EndpointSource::Default,
            };
            (url, source)
        };
        let token = match env(ENV_TOKEN).filter(|t| !t.is_empty()).or(rest.token) {
            Some(token) => Some(token),
            None => rest
                .token_file
                .as_deref()
                .map(|path| {
                    std::fs::read_to_string(path)
                        .map(|text| {
                            text.strip_suffix('\n')
                                .unwrap_or(&text)
                                .trim_end_matches('\r')
                                .to_owned()
                        })
                        .map_err(|source| EndpointError::TokenFile {
                            path: path.to_owned(),
                            source,
                        })
                })
                .transpose()?,
        };
        // Nothing configured: the token a JobManager of this user generated on this machine,
        // for a JobManager on this machine only (it is worthless elsewhere, and must not leak
        // to a host someone else runs).
        let token = match token {
            Some(token) => Some(token),
            None if url.is_loopback() => generated(&env, LocalCredentials::token)?,
            None => None,
        };
        Ok(Self { url, source, token })
    }
}

impl Endpoint {
    /// The leader published in ZooKeeper now, per the high-availability keys of the file
    /// `config`; `None` when the file sets none (a cluster without HA has no leader to find
    /// again). `FLINT_JOBMANAGER` is not consulted: it names one JobManager, not the leader.
    pub fn leader(
        config: &Path,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<Self>, EndpointError> {
        let loaded = load_client_config(Some(config), &env)?;
        if leader_settings(&loaded, true, &env)?.is_none() {
            return Ok(None);
        }
        let without_flag = |name: &str| (name != ENV_JOBMANAGER).then(|| env(name)).flatten();
        Self::resolve(None, Some(config), without_flag).map(Some)
    }
}

/// How to find the leader of the high-availability cluster `config` describes (when it came
/// from a file, not only defaults), verifying its published information with the cluster
/// secret: `FLINT_SECRET`, else the one a `flint jobmanager` of this user generated on this
/// machine, else the empty secret of an `--insecure` cluster (whose information anyone can
/// sign, and which a secured cluster's never verifies with).
fn leader_settings(
    config: &ClusterConfig,
    from_file: bool,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<Option<crate::ha::zookeeper::ZooKeeperSettings>, EndpointError> {
    if !from_file || !config.high_availability.is_enabled() {
        return Ok(None);
    }
    let secret = match env(crate::process::SECRET_ENV).filter(|s| !s.is_empty()) {
        Some(secret) => Secret::from_bytes(secret.into_bytes()),
        None => generated(env, LocalCredentials::secret)?.unwrap_or_else(Secret::insecure),
    };
    Ok(crate::ha::zookeeper::ZooKeeperSettings::of(config, &secret))
}

/// One of the credentials (`read` picks which) a `flint jobmanager` of this user generated on
/// this machine, if this user has a place for them (`env` looks up `XDG_STATE_HOME`, `HOME`).
fn generated<T>(
    env: &impl Fn(&str) -> Option<String>,
    read: impl FnOnce(&LocalCredentials) -> Result<Option<T>, CredentialsError>,
) -> Result<Option<T>, EndpointError> {
    match LocalCredentials::from_env(|name| env(name).map(std::ffi::OsString::from)) {
        Ok(local) => read(&local).map_err(EndpointError::Credentials),
        Err(_) => Ok(None),
    }
}

/// The configuration the client takes `rest.*` from: the cluster's loader over the file (if
/// any) and the `FLINT_REST_*` variables (`env` looks one up), so a client reads the same keys,
/// with the same precedence and errors, as the JobManager it talks to.
pub fn load_client_config(
    path: Option<&Path>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<ClusterConfig, EndpointError> {
    let env = keys::keys()
        .iter()
        .filter(|key| key.name.starts_with("rest."))
        .filter_map(|key| {
            let name = key.env_var();
            env(&name).map(|value| (name, value))
        })
        .collect();
    let sources = ConfigSources {
        file: path.map(Path::to_owned),
        env,
        flags: Vec::new(),
    };
    Ok(sources.load()?.config)
}

#[cfg(test)]
mod tests;
