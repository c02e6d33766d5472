//! Layered loading: the defaults, then the TOML file, then `FLINT_*` environment variables, then
//! flags — later wins — each value read by its key's kind, so every source is parsed alike and
//! every error names the source.
//!
//! The environment is an argument ([`ConfigSources::env`]): only the binary reads the process's
//! variables, so tests (and embedders) pass their own.
//!
//! A `FLINT_*` variable that is not a configuration key, and not one of Flint's other variables
//! ([`NOT_CONFIG_VARS`], [`NOT_CONFIG_PREFIXES`]), is not an error but a [`ConfigWarning`]
//! naming the closest key's variable: the environment is shared with other tools and other
//! versions of Flint, and refusing to start over a stray variable would be worse than a typo
//! that is reported and ignored. An unknown key in the file or a `-D` flag is an error: someone
//! wrote it for this program.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::ClusterConfig;
use super::error::{ConfigError, ConfigWarning, Origin};
use super::keys::{self, ENV_PREFIX, Key};
use super::kind::{Raw, quote};
use super::show::{Secrets, render};
use super::suggest::closest;

/// The variable naming the configuration file when `--config` is not given.
pub const CONFIG_FILE_ENV: &str = "FLINT_CONFIG";

/// `FLINT_*` variables that are not configuration keys: the cluster secret, the JobManager
/// clients talk to, the configuration file.
pub const NOT_CONFIG_VARS: [&str; 3] = ["FLINT_SECRET", "FLINT_JOBMANAGER", CONFIG_FILE_ENV];

/// Prefixes of `FLINT_*` variables that are not configuration keys: the simulation's and the
/// benchmarks' settings.
pub const NOT_CONFIG_PREFIXES: [&str; 2] = ["FLINT_SIM_", "FLINT_BENCH_"];

/// One flag that sets a key (`--slots 4` sets `taskmanager.slots`; `-D key=value` any key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlagOverride {
    /// The key (dotted).
    pub key: String,
    /// The value, as text (read as an environment variable's would be).
    pub value: String,
    /// The flag, for messages and `flint config --show`: `--slots`, `-D`.
    pub flag: String,
}

impl FlagOverride {
    /// `flag` sets `key` to `value`.
    pub fn new(key: impl Into<String>, value: impl Into<String>, flag: impl Into<String>) -> Self {
        Self {
            key: key.into(),
            value: value.into(),
            flag: flag.into(),
        }
    }
}

/// Where a configuration comes from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfigSources {
    /// The TOML file (`--config`); `None`: the file `FLINT_CONFIG` in [`env`](Self::env) names,
    /// if any. There is no implicit file.
    pub file: Option<PathBuf>,
    /// The environment (`std::env::vars()` in the binary); only `FLINT_*` variables matter.
    pub env: Vec<(String, String)>,
    /// The flags, in command-line order (a later flag for the same key wins).
    pub flags: Vec<FlagOverride>,
}

/// A configuration with the source of each value.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadedConfig {
    /// The effective, validated configuration.
    pub config: ClusterConfig,
    /// Where each key's value came from (every key is here).
    pub origins: BTreeMap<&'static str, Origin>,
    /// What in the environment was ignored.
    pub warnings: Vec<ConfigWarning>,
}

impl LoadedConfig {
    /// Where `key`'s value came from ([`Origin::Default`] for a key not known).
    pub fn origin(&self, key: &str) -> &Origin {
        self.origins.get(key).unwrap_or(&Origin::Default)
    }

    /// Whether a source set `key` (the file, a variable or a flag), rather than the default.
    pub fn is_set(&self, key: &str) -> bool {
        *self.origin(key) != Origin::Default
    }

    /// `flint config --show`: one `key = value  # origin` line per key, itself a valid
    /// configuration file; secrets as `"***"`.
    pub fn show(&self) -> String {
        render(&self.config, Some(&self.origins), Secrets::Mask)
    }
}

impl ConfigSources {
    /// Layers the sources over the defaults and validates the result.
    pub fn load(&self) -> Result<LoadedConfig, ConfigError> {
        let mut layers = Layers::new();
        let from_env = || {
            self.env
                .iter()
                .find(|(var, value)| var == CONFIG_FILE_ENV && !value.is_empty())
                .map(|(_, value)| PathBuf::from(value))
        };
        if let Some(path) = self.file.clone().or_else(from_env) {
            let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Read {
                path: path.clone(),
                source,
            })?;
            layers.apply_file(&text, &path)?;
        }
        layers.apply_env(&self.env)?;
        for flag in &self.flags {
            let origin = Origin::Flag(flag.flag.clone());
            if let Some(why) = keys::retired(&flag.key) {
                layers.retired.push(ConfigWarning::Retired {
                    key: flag.key.clone(),
                    why,
                });
                continue;
            }
            let key = keys::find(&flag.key).ok_or_else(|| unknown_key(&flag.key, &origin))?;
            layers.set(key, Raw::Text(&flag.value), origin)?;
        }
        let Layers {
            config,
            origins,
            retired,
        } = layers;
        config.validate().map_err(|e| {
            e.with_origins(|key| origins.get(key).cloned().unwrap_or(Origin::Default))
        })?;
        let mut warnings = self.warnings();
        warnings.extend(retired);
        Ok(LoadedConfig {
            config,
            origins,
            warnings,
        })
    }

    /// The `FLINT_*` variables that set nothing, each with the closest configuration variable,
    /// and the secrets given as flags (known before loading, so they can be shown even when
    /// loading fails).
    pub fn warnings(&self) -> Vec<ConfigWarning> {
        let names: Vec<(String, &'static str)> = keys::keys()
            .iter()
            .map(|key| (key.env_var(), key.name))
            .collect();
        let secret_flags = self.flags.iter().filter_map(|flag| {
            let key = keys::find(&flag.key).filter(|key| key.secret)?;
            Some(ConfigWarning::SecretOnCommandLine {
                key: key.name,
                flag: flag.flag.clone(),
                var: key.env_var(),
            })
        });
        let unknown_env = config_vars(&self.env)
            .into_iter()
            .filter(|(var, _)| keys::find_env(var).is_none())
            .map(|(var, _)| {
                let suggestion = closest(
                    &var[ENV_PREFIX.len()..],
                    names.iter().map(|(name, _)| &name[ENV_PREFIX.len()..]),
                    '_',
                )
                .and_then(|best| {
                    names
                        .iter()
                        .find(|(name, _)| name[ENV_PREFIX.len()..] == *best)
                })
                .cloned();
                ConfigWarning::UnknownEnv {
                    var: var.clone(),
                    suggestion,
                }
            })
            .collect::<Vec<_>>();
        unknown_env.into_iter().chain(secret_flags).collect()
    }
}

/// The configuration being built and the source of each value so far.
pub(crate) struct Layers {
    pub(crate) config: ClusterConfig,
    origins: BTreeMap<&'static str, Origin>,
    /// Retired keys that were given (and ignored).
    retired: Vec<ConfigWarning>,
}

impl Layers {
    pub(crate) fn new() -> Self {
        Self {
            config: ClusterConfig::default(),
            origins: keys::keys()
                .iter()
                .map(|key| (key.name, Origin::Default))
                .collect(),
            retired: Vec::new(),
        }
    }

    /// Reads `key`'s value from `raw`, or says what is wrong with it.
    fn set(&mut self, key: &'static Key, raw: Raw<'_>, origin: Origin) -> Result<(), ConfigError> {
        if key.kind.apply(&mut self.config, raw).is_err() {
            let value = if key.secret {
                quote("***")
            } else {
                raw.display()
            };
            return Err(ConfigError::invalid(key.name, value, key.accepts())
                .with_origins(|_| origin.clone()));
        }
        self.origins.insert(key.name, origin);
        Ok(())
    }

    /// The file's keys, as sections (`[heartbeat]`), dotted keys or both.
    pub(crate) fn apply_file(&mut self, text: &str, path: &Path) -> Result<(), ConfigError> {
        let table: toml::Table = text.parse().map_err(|source| ConfigError::Syntax {
            path: path.to_owned(),
            source: Box::new(source),
        })?;
        self.apply_table(&table, "", &Origin::File(path.to_owned()))
    }

    fn apply_table(
        &mut self,
        table: &toml::Table,
        section: &str,
        origin: &Origin,
    ) -> Result<(), ConfigError> {
        for (name, value) in table {
            let path = if section.is_empty() {
                name.clone()
            } else {
                format!("{section}.{name}")
            };
            match (keys::find(&path), value) {
                // A table where a value belongs is refused by the key's kind, by name.
                (Some(key), value) => self.set(key, Raw::Toml(value), origin.clone())?,
                (None, toml::Value::Table(inner)) if keys::is_section(&path) => {
                    self.apply_table(inner, &path, origin)?;
                }
                (None, _) => match keys::retired(&path) {
                    Some(why) => self.retired.push(ConfigWarning::Retired { key: path, why }),
                    None => return Err(unknown_key(&path, origin)),
                },
            }
        }
        Ok(())
    }

    /// The `FLINT_*` variables that name keys.
    fn apply_env(&mut self, env: &[(String, String)]) -> Result<(), ConfigError> {
        for (var, value) in config_vars(env) {
            if let Some(key) = keys::find_env(var) {
                self.set(key, Raw::Text(value), Origin::Env(var.clone()))?;
            }
        }
        Ok(())
    }
}

/// The `FLINT_*` variables that are not Flint's other variables, in name order (so the first
/// error and the warnings do not depend on the OS's order).
fn config_vars(env: &[(String, String)]) -> Vec<&(String, String)> {
    let mut vars: Vec<&(String, String)> = env
        .iter()
        .filter(|(var, _)| var.starts_with(ENV_PREFIX))
        .filter(|(var, _)| !NOT_CONFIG_VARS.contains(&var.as_str()))
        .filter(|(var, _)| !NOT_CONFIG_PREFIXES.iter().any(|p| var.starts_with(p)))
        .collect();
    vars.sort();
    vars
}

fn unknown_key(key: &str, origin: &Origin) -> ConfigError {
    let known = keys::keys().iter().map(|k| k.name).chain(keys::sections());
    ConfigError::UnknownKey {
        key: key.to_owned(),
        origin: Some(origin.clone()),
        suggestion: closest(key, known, '.'),
    }
}
