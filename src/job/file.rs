//! Job files: a [`JobGraph`] written in TOML, with `${name}` parameters filled in by the caller.
//!
//! This module owns the file format and its error messages, which are for the person who wrote
//! the file: every error names the key, vertex, edge or parameter at fault, and syntax and type
//! errors keep toml's message, which points at the line. The graph rules themselves are
//! [`JobGraph::validate`]'s; this module never runs anything.
//!
//! # Format
//!
//! ```toml
//! name = "wordcount"                # the job's name (required)
//!
//! [restart-strategy]                # optional; without it Flink's exponential-delay default
//! type = "fixed-delay"              # "none" | "fixed-delay" | "exponential-delay"
//! attempts = 3                      # fixed-delay: restarts allowed (default 1)
//! delay = "500ms"                   # fixed-delay: pause before each restart (default 1s)
//! # initial = "1s"                  # exponential-delay: the first pause (default 1s)
//! # max = "1min"                    # exponential-delay: the cap (default 1min)
//! # multiplier = 1.5                # exponential-delay: growth per failure, >= 1 (default 1.5)
//! # jitter = 0.1                    # exponential-delay: random spread, 0 to 1 (default 0.1)
//!
//! [[vertex]]                        # one per operator
//! name = "source"                   # unique within the job (required)
//! operator = "text-source"          # a registered operator (required)
//! parallelism = 2                   # subtasks, 1 to 100000 (default 1)
//! slot-sharing-group = "default"    # optional (default "default")
//! co-location-group = "io"          # optional
//! [vertex.config]                   # optional: the operator's configuration, string values
//! path = "${input}"
//!
//! [[vertex]]
//! name = "tokenize"
//! operator = "tokenize"
//! parallelism = 2
//!
//! [[edge]]                          # data flows from `from` to `to`
//! from = "source"                   # vertex names (required)
//! to = "tokenize"
//! pattern = "forward"               # "forward" | "all-to-all" (required)
//! exchange = "pipelined"            # "pipelined" | "blocking" (default "pipelined")
//! ```
//!
//! Unknown keys are refused, so a misspelt key is an error rather than silently ignored.
//! Durations are whole milliseconds (`500`) or strings with a unit (`"500ms"`, `"1s"`,
//! `"5min"`).
//!
//! # Parameters
//!
//! `${name}` in any string value is replaced by the parameter `name` given by the caller (the
//! CLI's `--param name=value`); a parameter name is made of letters, digits, `_`, `-` and `.`.
//! A parameter that is used but not given is an error naming it. `$${` writes a literal `${`;
//! any other `$` is kept as it is. Replacement happens once: a parameter's value is not itself
//! searched for `${`. Numbers (such as `parallelism`) cannot come from parameters, since a TOML
//! integer is not a string.
//!
//! ```
//! use std::collections::BTreeMap;
//! use flint::job::file::parse_job_file;
//!
//! let text = r#"
//!     name = "copy"
//!     [[vertex]]
//!     name = "source"
//!     operator = "text-source"
//!     config.path = "${input}"
//! "#;
//! let params = BTreeMap::from([("input".to_owned(), "in.txt".to_owned())]);
//! let graph = parse_job_file(text, &params, |operator| operator == "text-source").unwrap();
//! assert_eq!(graph.vertices[0].config["path"], "in.txt");
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};

use crate::job::graph::{
    DistributionPattern, ExchangeMode, JobGraph, JobGraphError, RestartStrategyConfig, VertexIndex,
};

/// A job file that cannot be turned into a job. None is retryable: the file or the parameters
/// must change.
#[derive(Debug, thiserror::Error)]
pub enum JobFileError {
    /// The file could not be read.
    #[error("cannot read job file {}", .path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The TOML is malformed, has a value of the wrong type, a missing or an unknown key (the
    /// source's message points at the line).
    #[error("invalid job file")]
    Parse(#[source] Box<toml::de::Error>),
    /// A `${name}` names a parameter the caller did not give.
    #[error(
        "{location} uses parameter `${{{name}}}`, which was not given ({})",
        show_given(.given)
    )]
    MissingParameter {
        /// The parameter.
        name: String,
        /// Where it is used (``vertex `source` config.path``).
        location: String,
        /// The parameters that were given.
        given: Vec<String>,
    },
    /// A `${` that does not start a well-formed parameter reference.
    #[error(
        "{location} = {value:?} has a `${{` that does not start a parameter: write \
         `${{name}}` (letters, digits, `_`, `-`, `.`) or `$${{` for a literal `${{`"
    )]
    BadParameter {
        /// Where (``vertex `source` config.path``).
        location: String,
        /// The value as written.
        value: String,
    },
    /// An edge names a vertex the file does not define.
    #[error(
        "edge `{from}` -> `{to}` names vertex `{missing}`, which is not defined; the vertices \
         are: {}",
        .known.join(", ")
    )]
    UnknownVertex {
        /// The edge's `from`.
        from: String,
        /// The edge's `to`.
        to: String,
        /// The name not found.
        missing: String,
        /// The names defined.
        known: Vec<String>,
    },
    /// An edge's `pattern` is not a distribution pattern.
    #[error(
        "edge `{from}` -> `{to}`: pattern = {value:?} is not a distribution pattern; write \
         \"forward\" or \"all-to-all\""
    )]
    InvalidPattern {
        /// The edge's `from`.
        from: String,
        /// The edge's `to`.
        to: String,
        /// The value given.
        value: String,
    },
    /// An edge's `exchange` is not an exchange mode.
    #[error(
        "edge `{from}` -> `{to}`: exchange = {value:?} is not an exchange mode; write \
         \"pipelined\" or \"blocking\""
    )]
    InvalidExchange {
        /// The edge's `from`.
        from: String,
        /// The edge's `to`.
        to: String,
        /// The value given.
        value: String,
    },
    /// `restart-strategy.type` is not a restart strategy.
    #[error(
        "restart-strategy.type = {value:?} is not a restart strategy; write \"none\", \
         \"fixed-delay\" or \"exponential-delay\""
    )]
    InvalidRestartType {
        /// The value given.
        value: String,
    },
    /// A `[restart-strategy]` key that the chosen type does not take.
    #[error(
        "restart-strategy.{key} does not apply to type = {kind:?}, which takes: {}",
        show_keys(.accepted)
    )]
    RestartKeyNotApplicable {
        /// The key given.
        key: &'static str,
        /// The strategy's type.
        kind: &'static str,
        /// The keys it does take.
        accepted: &'static [&'static str],
    },
    /// A duration string that does not parse.
    #[error(
        "{key} = {value:?} is not a duration; write e.g. \"500ms\", \"1s\", \"5min\" or whole \
         milliseconds"
    )]
    InvalidDuration {
        /// The key (`restart-strategy.delay`).
        key: &'static str,
        /// The value, after parameters were filled in.
        value: String,
        /// What the parser found wrong.
        #[source]
        source: humantime::DurationError,
    },
    /// The file describes a graph the runtime cannot run (boxed: graph errors carry several
    /// names, and every `Result` here would otherwise carry their size).
    #[error(transparent)]
    Graph(Box<JobGraphError>),
}

impl From<JobGraphError> for JobFileError {
    fn from(error: JobGraphError) -> Self {
        Self::Graph(Box::new(error))
    }
}

fn show_given(given: &[String]) -> String {
    if given.is_empty() {
        "no parameters were given".to_owned()
    } else {
        format!("given: {}", given.join(", "))
    }
}

fn show_keys(keys: &[&str]) -> String {
    if keys.is_empty() {
        "no other keys".to_owned()
    } else {
        keys.join(", ")
    }
}

/// Reads the job file at `path`: see [`parse_job_file`].
pub fn read_job_file(
    path: &Path,
    params: &BTreeMap<String, String>,
    knows_operator: impl Fn(&str) -> bool,
) -> Result<JobGraph, JobFileError> {
    let text = std::fs::read_to_string(path).map_err(|source| JobFileError::Read {
        path: path.to_owned(),
        source,
    })?;
    parse_job_file(&text, params, knows_operator)
}

/// Parses a job file, fills in its `${name}` parameters from `params` and validates the graph
/// (`knows_operator` says whether an operator name is registered).
pub fn parse_job_file(
    text: &str,
    params: &BTreeMap<String, String>,
    knows_operator: impl Fn(&str) -> bool,
) -> Result<JobGraph, JobFileError> {
    let file: JobFile = toml::from_str(text).map_err(|e| JobFileError::Parse(Box::new(e)))?;
    let fill = Filler { params };
    let mut builder = JobGraph::builder(fill.apply(&file.name, "name")?);
    if let Some(strategy) = &file.restart_strategy {
        builder.restart_strategy(strategy.resolve(&fill)?);
    }
    let indices = add_vertices(&mut builder, &file.vertices, &fill)?;
    for edge in &file.edges {
        add_edge(&mut builder, edge, &indices, &fill)?;
    }
    Ok(builder.build(knows_operator)?)
}

/// The file as written, before parameters are filled in.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
struct JobFile {
    name: String,
    restart_strategy: Option<RestartSection>,
    #[serde(default, rename = "vertex")]
    vertices: Vec<VertexSection>,
    #[serde(default, rename = "edge")]
    edges: Vec<EdgeSection>,
}

/// `[[vertex]]`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
struct VertexSection {
    name: String,
    operator: String,
    #[serde(default = "one")]
    parallelism: u32,
    slot_sharing_group: Option<String>,
    co_location_group: Option<String>,
    #[serde(default)]
    config: BTreeMap<String, String>,
}

/// Flink's `parallelism.default`.
fn one() -> u32 {
    1
}

/// `[[edge]]`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
struct EdgeSection {
    from: String,
    to: String,
    pattern: String,
    exchange: Option<String>,
}

/// `[restart-strategy]`: flat, so a misplaced key can be named against the chosen type.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
struct RestartSection {
    #[serde(rename = "type")]
    kind: String,
    attempts: Option<u32>,
    delay: Option<DurationValue>,
    initial: Option<DurationValue>,
    max: Option<DurationValue>,
    multiplier: Option<f64>,
    jitter: Option<f64>,
}

/// A duration as written; a string is parsed only after its parameters are filled in.
#[derive(Debug)]
enum DurationValue {
    Millis(u64),
    Text(String),
}

/// Fills `${name}` parameters into string values.
struct Filler<'a> {
    params: &'a BTreeMap<String, String>,
}

fn add_vertices(
    builder: &mut crate::job::graph::JobGraphBuilder,
    vertices: &[VertexSection],
    fill: &Filler<'_>,
) -> Result<BTreeMap<String, VertexIndex>, JobFileError> {
    let mut indices = BTreeMap::new();
    for section in vertices {
        let at = |key: &str| format!("vertex `{}` {key}", section.name);
        let name = fill.apply(&section.name, &at("name"))?;
        let operator = fill.apply(&section.operator, &at("operator"))?;
        let mut vertex = builder.vertex(name.clone(), operator, section.parallelism);
        for (key, value) in &section.config {
            vertex = vertex.config(key, fill.apply(value, &at(&format!("config.{key}")))?);
        }
        if let Some(group) = &section.slot_sharing_group {
            vertex = vertex.slot_sharing_group(fill.apply(group, &at("slot-sharing-group"))?);
        }
        if let Some(group) = &section.co_location_group {
            vertex = vertex.co_location_group(fill.apply(group, &at("co-location-group"))?);
        }
        // A duplicate name keeps its first index; validation then reports the duplicate.
        indices.entry(name).or_insert(vertex.index());
    }
    Ok(indices)
}

fn add_edge(
    builder: &mut crate::job::graph::JobGraphBuilder,
    edge: &EdgeSection,
    indices: &BTreeMap<String, VertexIndex>,
    fill: &Filler<'_>,
) -> Result<(), JobFileError> {
    let at = |key: &str| format!("edge `{}` -> `{}` {key}", edge.from, edge.to);
    let from = fill.apply(&edge.from, &at("from"))?;
    let to = fill.apply(&edge.to, &at("to"))?;
    let pattern = fill.apply(&edge.pattern, &at("pattern"))?;
    let pattern = match pattern.as_str() {
        "forward" => DistributionPattern::Forward,
        "all-to-all" => DistributionPattern::AllToAll,
        _ => {
            return Err(JobFileError::InvalidPattern {
                from,
                to,
                value: pattern,
            });
        }
    };
    let exchange = match &edge.exchange {
        Some(exchange) => fill.apply(exchange, &at("exchange"))?,
        None => "pipelined".to_owned(),
    };
    let exchange = match exchange.as_str() {
        "pipelined" => ExchangeMode::Pipelined,
        "blocking" => ExchangeMode::Blocking,
        _ => {
            return Err(JobFileError::InvalidExchange {
                from,
                to,
                value: exchange,
            });
        }
    };
    let index = |name: &String| {
        indices
            .get(name)
            .copied()
            .ok_or_else(|| JobFileError::UnknownVertex {
                from: from.clone(),
                to: to.clone(),
                missing: name.clone(),
                known: indices.keys().cloned().collect(),
            })
    };
    let (source, target) = (index(&from)?, index(&to)?);
    builder.edge(source, target, pattern, exchange);
    Ok(())
}

impl RestartSection {
    const FIXED_DELAY_KEYS: &'static [&'static str] = &["attempts", "delay"];
    const EXPONENTIAL_KEYS: &'static [&'static str] = &["initial", "max", "multiplier", "jitter"];

    /// Turns the section into a strategy, with Flink's defaults for keys left out.
    fn resolve(&self, fill: &Filler<'_>) -> Result<RestartStrategyConfig, JobFileError> {
        let kind = fill.apply(&self.kind, "restart-strategy.type")?;
        match kind.as_str() {
            "none" => {
                self.only("none", &[])?;
                Ok(RestartStrategyConfig::None)
            }
            "fixed-delay" => {
                self.only("fixed-delay", Self::FIXED_DELAY_KEYS)?;
                self.fixed_delay(fill)
            }
            "exponential-delay" => {
                self.only("exponential-delay", Self::EXPONENTIAL_KEYS)?;
                self.exponential_delay(fill)
            }
            _ => Err(JobFileError::InvalidRestartType { value: kind }),
        }
    }

    fn fixed_delay(&self, fill: &Filler<'_>) -> Result<RestartStrategyConfig, JobFileError> {
        Ok(RestartStrategyConfig::FixedDelay {
            attempts: self
                .attempts
                .unwrap_or(RestartStrategyConfig::DEFAULT_ATTEMPTS),
            delay: duration_or(
                &self.delay,
                "restart-strategy.delay",
                fill,
                RestartStrategyConfig::DEFAULT_DELAY,
            )?,
        })
    }

    fn exponential_delay(&self, fill: &Filler<'_>) -> Result<RestartStrategyConfig, JobFileError> {
        Ok(RestartStrategyConfig::ExponentialDelay {
            initial: duration_or(
                &self.initial,
                "restart-strategy.initial",
                fill,
                RestartStrategyConfig::DEFAULT_INITIAL,
            )?,
            max: duration_or(
                &self.max,
                "restart-strategy.max",
                fill,
                RestartStrategyConfig::DEFAULT_MAX,
            )?,
            multiplier: self
                .multiplier
                .unwrap_or(RestartStrategyConfig::DEFAULT_MULTIPLIER),
            jitter: self.jitter.unwrap_or(RestartStrategyConfig::DEFAULT_JITTER),
        })
    }

    /// Refuses the first key given that `kind` does not take.
    fn only(
        &self,
        kind: &'static str,
        accepted: &'static [&'static str],
    ) -> Result<(), JobFileError> {
        let given = [
            ("attempts", self.attempts.is_some()),
            ("delay", self.delay.is_some()),
            ("initial", self.initial.is_some()),
            ("max", self.max.is_some()),
            ("multiplier", self.multiplier.is_some()),
            ("jitter", self.jitter.is_some()),
        ];
        match given
            .into_iter()
            .find(|(key, present)| *present && !accepted.contains(key))
        {
            Some((key, _)) => Err(JobFileError::RestartKeyNotApplicable {
                key,
                kind,
                accepted,
            }),
            None => Ok(()),
        }
    }
}

fn duration_or(
    value: &Option<DurationValue>,
    key: &'static str,
    fill: &Filler<'_>,
    default: Duration,
) -> Result<Duration, JobFileError> {
    match value {
        None => Ok(default),
        Some(DurationValue::Millis(millis)) => Ok(Duration::from_millis(*millis)),
        Some(DurationValue::Text(text)) => {
            let value = fill.apply(text, key)?;
            humantime::parse_duration(value.trim())
                .map_err(|source| JobFileError::InvalidDuration { key, value, source })
        }
    }
}

impl Filler<'_> {
    /// `value` with every `${name}` replaced and every `$${` made a literal `${`; `location`
    /// says where the value is, for errors.
    fn apply(&self, value: &str, location: &str) -> Result<String, JobFileError> {
        let mut filled = String::with_capacity(value.len());
        let mut rest = value;
        while let Some(at) = rest.find('$') {
            filled.push_str(&rest[..at]);
            let tail = &rest[at..];
            if let Some(after) = tail.strip_prefix("$${") {
                filled.push_str("${");
                rest = after;
            } else if let Some(after) = tail.strip_prefix("${") {
                let (name, after) =
                    parameter_name(after).ok_or_else(|| JobFileError::BadParameter {
                        location: location.to_owned(),
                        value: value.to_owned(),
                    })?;
                filled.push_str(self.lookup(name, location)?);
                rest = after;
            } else {
                filled.push('$');
                rest = &tail[1..];
            }
        }
        filled.push_str(rest);
        Ok(filled)
    }

    fn lookup(&self, name: &str, location: &str) -> Result<&str, JobFileError> {
        self.params
            .get(name)
            .map(String::as_str)
            .ok_or_else(|| JobFileError::MissingParameter {
                name: name.to_owned(),
                location: location.to_owned(),
                given: self.params.keys().cloned().collect(),
            })
    }
}

/// Splits `name}rest` into `name` and `rest`, if `name` is a well-formed parameter name.
fn parameter_name(text: &str) -> Option<(&str, &str)> {
    let end = text.find('}')?;
    let name = &text[..end];
    let valid = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.');
    (!name.is_empty() && name.chars().all(valid)).then(|| (name, &text[end + 1..]))
}

impl<'de> Deserialize<'de> for DurationValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(DurationVisitor)
    }
}

/// Accepts whole milliseconds or a string, with a message that says so for anything else.
struct DurationVisitor;

impl Visitor<'_> for DurationVisitor {
    type Value = DurationValue;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a duration: whole milliseconds or a string such as \"500ms\" or \"1s\"")
    }

    fn visit_u64<E: de::Error>(self, millis: u64) -> Result<DurationValue, E> {
        Ok(DurationValue::Millis(millis))
    }

    fn visit_i64<E: de::Error>(self, millis: i64) -> Result<DurationValue, E> {
        u64::try_from(millis)
            .map(DurationValue::Millis)
            .map_err(|_| E::invalid_value(de::Unexpected::Signed(millis), &self))
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<DurationValue, E> {
        Ok(DurationValue::Text(text.to_owned()))
    }
}

#[cfg(test)]
mod tests;
