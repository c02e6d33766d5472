//! What can be wrong with a configuration, and where each value came from — every message names
//! the key, the value as written, its source and what the key accepts.

use std::fmt;
use std::path::PathBuf;

/// Where a key's value came from. Later sources win: default < file < env < flag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// Nobody set it.
    Default,
    /// The configuration file.
    File(PathBuf),
    /// An environment variable (its name).
    Env(String),
    /// A command-line flag (its name, e.g. `--slots` or `-D`).
    Flag(String),
}

/// `default`, `file flint.toml`, `env FLINT_REST_PORT`, `flag --slots`: as `flint config --show`
/// writes it after `#`.
impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Default => f.write_str("default"),
            Origin::File(path) => write!(f, "file {}", path.display()),
            Origin::Env(var) => write!(f, "env {var}"),
            Origin::Flag(flag) => write!(f, "flag {flag}"),
        }
    }
}

/// ` (from env FLINT_X)`, ` (default)`, or nothing when the source is not known.
struct Source<'a>(&'a Option<Origin>);

impl fmt::Display for Source<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            None => Ok(()),
            Some(Origin::Default) => f.write_str(" (default)"),
            Some(origin) => write!(f, " (from {origin})"),
        }
    }
}

/// A configuration that cannot be used. Not retryable: the configuration must change.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A key has a value it does not accept (its kind, its range, or a rule across keys).
    #[error(transparent)]
    Invalid(Box<InvalidValue>),
    /// A key that does not exist (in the file or a `-D` flag).
    #[error(
        "unknown configuration key {key}{}{}",
        Source(origin),
        match suggestion {
            Some(known) => format!(": did you mean {known}?"),
            None => " (flint config --show lists every key)".to_owned(),
        }
    )]
    UnknownKey {
        /// The key as written (dotted).
        key: String,
        /// Where it was written.
        origin: Option<Origin>,
        /// The closest known key or section.
        suggestion: Option<&'static str>,
    },
    /// The configuration file cannot be read.
    #[error("cannot read the configuration file {}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is not TOML (the source points at the line).
    #[error("the configuration file {} is not valid TOML", path.display())]
    Syntax {
        /// The file.
        path: PathBuf,
        /// What the TOML parser found.
        #[source]
        source: Box<toml::de::Error>,
    },
}

impl ConfigError {
    /// The key at fault, if the error is about one.
    pub fn key(&self) -> Option<&str> {
        match self {
            ConfigError::Invalid(invalid) => Some(invalid.key),
            ConfigError::UnknownKey { key, .. } => Some(key),
            ConfigError::Read { .. } | ConfigError::Syntax { .. } => None,
        }
    }

    pub(crate) fn invalid(
        key: &'static str,
        value: impl Into<String>,
        expected: impl Into<String>,
    ) -> Self {
        ConfigError::Invalid(Box::new(InvalidValue {
            key,
            value: value.into(),
            origin: None,
            expected: expected.into(),
            related: None,
        }))
    }

    /// The same error, for a key that another key's value constrains (a rule across keys).
    pub(crate) fn because_of(mut self, other: &'static str) -> Self {
        if let ConfigError::Invalid(invalid) = &mut self {
            invalid.related = Some((other, None));
        }
        self
    }

    /// Fills in where the values came from.
    pub(crate) fn with_origins(mut self, origin_of: impl Fn(&str) -> Origin) -> Self {
        if let ConfigError::Invalid(invalid) = &mut self {
            invalid.origin = Some(origin_of(invalid.key));
            if let Some((key, origin)) = &mut invalid.related {
                *origin = Some(origin_of(key));
            }
        }
        self
    }

    /// The same error without its sources (for text that is not a file:
    /// [`ClusterConfig::from_toml_str`](super::ClusterConfig::from_toml_str)).
    pub(crate) fn without_origin(mut self) -> Self {
        match &mut self {
            ConfigError::Invalid(invalid) => {
                invalid.origin = None;
                if let Some((_, origin)) = &mut invalid.related {
                    *origin = None;
                }
            }
            ConfigError::UnknownKey { origin, .. } => *origin = None,
            ConfigError::Read { .. } | ConfigError::Syntax { .. } => {}
        }
        self
    }
}

/// A key with a value it does not accept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidValue {
    /// The key (dotted).
    pub key: &'static str,
    /// The value as written, in TOML syntax (text quoted; a secret as `"***"`).
    pub value: String,
    /// Where the value came from, when known.
    pub origin: Option<Origin>,
    /// What the key accepts.
    pub expected: String,
    /// The other key of a rule across keys, and where its value came from.
    pub related: Option<(&'static str, Option<Origin>)>,
}

impl fmt::Display for InvalidValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid configuration: {} = {}{}: expected {}",
            self.key,
            self.value,
            Source(&self.origin),
            self.expected
        )?;
        match &self.related {
            Some((key, Some(origin))) if *origin != Origin::Default => {
                write!(f, " ({key} from {origin})")
            }
            _ => Ok(()),
        }
    }
}

impl std::error::Error for InvalidValue {}

/// Something in the environment that is probably a mistake but does not stop anything.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigWarning {
    /// A key earlier versions had: ignored, so an old configuration keeps working.
    #[error("ignoring {key}: it is no longer used ({why})")]
    Retired {
        /// The key.
        key: String,
        /// What became of it.
        why: &'static str,
    },
    /// A `FLINT_*` variable that is neither a configuration key nor one of Flint's other
    /// variables: ignored (variables are shared with other tools and versions, so it is not an
    /// error), named so a typo does not go unnoticed.
    #[error(
        "ignoring the environment variable {var}: no configuration key is set by it{}",
        match suggestion {
            Some((var, key)) => format!(" (did you mean {var}, for {key}?)"),
            None => String::new(),
        }
    )]
    UnknownEnv {
        /// The variable.
        var: String,
        /// The closest configuration variable and its key.
        suggestion: Option<(String, &'static str)>,
    },
    /// A secret key given as a flag: every local user can read a process's command line
    /// (`ps`, `/proc/<pid>/cmdline`). Used all the same (refusing would break a working setup),
    /// named so the operator moves it.
    #[error(
        "{key} was given on the command line ({flag}), where every local user can read it; \
         use {key}-file or the {var} variable instead"
    )]
    SecretOnCommandLine {
        /// The key.
        key: &'static str,
        /// The flag that set it.
        flag: String,
        /// Its environment variable.
        var: String,
    },
}
