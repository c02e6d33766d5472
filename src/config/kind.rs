//! What a configuration key accepts: its kind (duration, whole number, port, text, one of a few
//! names, path, list), how a value of that kind is read from the TOML file or from text (an
//! environment variable, a flag), how it is checked, and how it is written back as TOML.
//!
//! Every kind reads the same text the same way wherever it comes from, so `heartbeat.interval =
//! "10s"` in the file, `FLINT_HEARTBEAT_INTERVAL=10s` and `-D heartbeat.interval=10s` mean one
//! thing. A kind also carries the accessors of its key's field in [`ClusterConfig`], typed, so a
//! parsed value can only land in a field of its own type.

use std::path::PathBuf;
use std::time::Duration;

use super::ClusterConfig;

/// Reads and writes one field of a [`ClusterConfig`].
pub(crate) struct Field<T> {
    pub(crate) get: fn(&ClusterConfig) -> T,
    pub(crate) set: fn(&mut ClusterConfig, T),
}

// By hand: two function pointers are `Copy` whatever `T` is (a derive would ask `T: Copy`).
impl<T> Clone for Field<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Field<T> {}

/// What a key accepts, with the accessors of its field.
#[derive(Clone, Copy)]
pub(crate) enum Kind {
    /// A duration above zero: an integer of milliseconds (Flink's unit) or text with a unit.
    Duration(Field<Duration>),
    /// A whole number from `min` to `max`.
    Integer {
        min: u64,
        max: u64,
        field: Field<u64>,
    },
    /// A whole number, or unset.
    OptionalInteger(Field<Option<u64>>),
    /// A size above zero: whole bytes or text with a unit (Flink's `64mb`).
    Bytes(Field<u64>),
    /// A size above zero, or unset.
    OptionalBytes(Field<Option<u64>>),
    /// A TCP port.
    Port(Field<u16>),
    /// Non-empty text.
    Text(Field<String>),
    /// Non-empty text, or unset.
    OptionalText(Field<Option<String>>),
    /// A non-empty path, or unset.
    OptionalPath(Field<Option<PathBuf>>),
    /// One of a few names.
    Choice {
        values: &'static [&'static str],
        field: Field<&'static str>,
    },
    /// A list of strings.
    List(Field<Vec<String>>),
    /// `true` or `false` (a TOML boolean, or that text).
    Bool(Field<bool>),
}

/// A value as a source wrote it, before its key's kind reads it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Raw<'a> {
    /// From the TOML file: typed by TOML.
    Toml(&'a toml::Value),
    /// From an environment variable or a flag: text, read as the file's strings are.
    Text(&'a str),
}

impl Raw<'_> {
    /// The value as it was written, in TOML syntax (text quoted), for error messages.
    pub(crate) fn display(&self) -> String {
        match self {
            Raw::Toml(value) => value.to_string(),
            Raw::Text(text) => quote(text),
        }
    }

    fn text(&self) -> Option<&str> {
        match self {
            Raw::Toml(toml::Value::String(text)) => Some(text),
            Raw::Text(text) => Some(text),
            Raw::Toml(_) => None,
        }
    }

    /// A whole number: a TOML integer, or text of digits (so the environment's text and the
    /// file agree).
    fn whole_number(&self) -> Option<u64> {
        match self {
            Raw::Toml(toml::Value::Integer(n)) => u64::try_from(*n).ok(),
            _ => self.text()?.trim().parse().ok(),
        }
    }

    /// A size above zero: a TOML integer of bytes, or text with a unit.
    fn size(&self) -> Option<u64> {
        let bytes = match self {
            Raw::Toml(toml::Value::Integer(n)) => u64::try_from(*n).ok(),
            _ => self.text().and_then(parse_bytes),
        };
        bytes.filter(|n| *n > 0)
    }
}

/// The value the check of a key refused; its kind's [`Kind::describe`] says what it accepts.
#[derive(Debug)]
pub(crate) struct Rejected;

impl Kind {
    /// Reads `raw` and stores it in `config`, or refuses it (leaving `config` as it was).
    pub(crate) fn apply(&self, config: &mut ClusterConfig, raw: Raw<'_>) -> Result<(), Rejected> {
        match *self {
            Kind::Duration(field) => {
                let value = match raw {
                    Raw::Toml(toml::Value::Integer(millis)) => {
                        u64::try_from(*millis).ok().map(Duration::from_millis)
                    }
                    _ => raw.text().and_then(parse_duration),
                };
                store(config, field, value.filter(|d| !d.is_zero()))
            }
            Kind::Integer { min, max, field } => store(
                config,
                field,
                raw.whole_number().filter(|n| (min..=max).contains(n)),
            ),
            Kind::OptionalInteger(field) => store(config, field, raw.whole_number().map(Some)),
            Kind::Bytes(field) => store(config, field, raw.size()),
            Kind::OptionalBytes(field) => store(config, field, raw.size().map(Some)),
            Kind::Port(field) => store(
                config,
                field,
                raw.whole_number().and_then(|n| u16::try_from(n).ok()),
            ),
            Kind::Text(field) => store(config, field, non_empty(raw).map(str::to_owned)),
            Kind::OptionalText(field) => {
                store(config, field, non_empty(raw).map(|s| Some(s.to_owned())))
            }
            Kind::OptionalPath(field) => store(
                config,
                field,
                non_empty(raw).map(|s| Some(PathBuf::from(s))),
            ),
            Kind::Choice { values, field } => {
                let wanted = raw
                    .text()
                    .map(|s| s.trim().to_lowercase().replace('-', "_"));
                let value = wanted.and_then(|w| values.iter().copied().find(|v| **v == w));
                store(config, field, value)
            }
            Kind::List(field) => {
                let value = match raw {
                    Raw::Toml(value) => strings(value),
                    Raw::Text(text) => parse_list(text),
                };
                store(config, field, value)
            }
            Kind::Bool(field) => {
                let value = match raw {
                    Raw::Toml(toml::Value::Boolean(value)) => Some(*value),
                    _ => match raw.text().map(|text| text.trim().to_lowercase()).as_deref() {
                        Some("true") => Some(true),
                        Some("false") => Some(false),
                        _ => None,
                    },
                };
                store(config, field, value)
            }
        }
    }

    /// Whether the value `config` holds is one this kind accepts (for configurations built in
    /// code; what [`apply`](Self::apply) stored always is).
    pub(crate) fn check(&self, config: &ClusterConfig) -> Result<(), Rejected> {
        let ok = match *self {
            Kind::Duration(field) => !(field.get)(config).is_zero(),
            Kind::Integer { min, max, field } => (min..=max).contains(&(field.get)(config)),
            Kind::Bytes(field) => (field.get)(config) > 0,
            Kind::OptionalBytes(field) => (field.get)(config) != Some(0),
            Kind::Text(field) => !(field.get)(config).trim().is_empty(),
            Kind::OptionalText(field) => (field.get)(config).is_none_or(|s| !s.trim().is_empty()),
            Kind::OptionalPath(field) => {
                (field.get)(config).is_none_or(|p| !p.as_os_str().is_empty())
            }
            Kind::OptionalInteger(_)
            | Kind::Port(_)
            | Kind::Choice { .. }
            | Kind::List(_)
            | Kind::Bool(_) => true,
        };
        if ok { Ok(()) } else { Err(Rejected) }
    }

    /// The value `config` holds, in TOML syntax; `None` when unset.
    pub(crate) fn render(&self, config: &ClusterConfig) -> Option<String> {
        Some(match *self {
            Kind::Duration(field) => quote(&format_duration((field.get)(config))),
            Kind::Integer { field, .. } => (field.get)(config).to_string(),
            Kind::OptionalInteger(field) => {
                let n = (field.get)(config)?;
                // TOML integers are i64: a larger seed is written as text, which reads back.
                if i64::try_from(n).is_ok() {
                    n.to_string()
                } else {
                    quote(&n.to_string())
                }
            }
            Kind::Bytes(field) => format_bytes((field.get)(config)),
            Kind::OptionalBytes(field) => format_bytes((field.get)(config)?),
            Kind::Port(field) => (field.get)(config).to_string(),
            Kind::Text(field) => quote(&(field.get)(config)),
            Kind::OptionalText(field) => quote(&(field.get)(config)?),
            Kind::OptionalPath(field) => quote(&(field.get)(config)?.to_string_lossy()),
            Kind::Choice { field, .. } => quote((field.get)(config)),
            Kind::List(field) => toml::Value::Array(
                (field.get)(config)
                    .into_iter()
                    .map(toml::Value::String)
                    .collect(),
            )
            .to_string(),
            Kind::Bool(field) => (field.get)(config).to_string(),
        })
    }

    /// What the kind accepts, completing "expected ...".
    pub(crate) fn describe(&self) -> String {
        match *self {
            Kind::Duration(_) => "a duration above zero such as \"10s\", \"500ms\", \"5min\" or \
                                  an integer of milliseconds"
                .to_owned(),
            Kind::Integer { min, max, .. } => format!("a whole number from {min} to {max}"),
            Kind::OptionalInteger(_) => format!("a whole number from 0 to {}", u64::MAX),
            Kind::Bytes(_) | Kind::OptionalBytes(_) => "a size above zero such as \"64mb\", \
                                                        \"512kb\", \"1gb\" or a whole number of \
                                                        bytes"
                .to_owned(),
            Kind::Port(_) => "a port number from 0 to 65535 (0 picks a free port)".to_owned(),
            Kind::Text(_) | Kind::OptionalText(_) => "a non-empty string".to_owned(),
            Kind::OptionalPath(_) => "a non-empty path".to_owned(),
            Kind::Choice { values, .. } => {
                let names: Vec<String> = values.iter().map(|v| quote(v)).collect();
                format!("one of {}", names.join(", "))
            }
            Kind::List(_) => "a list of strings such as [\"a\", \"b\"] (in an environment \
                              variable or a flag: a TOML list or comma-separated words)"
                .to_owned(),
            Kind::Bool(_) => "true or false".to_owned(),
        }
    }

    /// The kind's name, for the key list.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Kind::Duration(_) => "duration",
            Kind::Integer { .. } | Kind::OptionalInteger(_) => "integer",
            Kind::Bytes(_) | Kind::OptionalBytes(_) => "size",
            Kind::Port(_) => "port",
            Kind::Text(_) | Kind::OptionalText(_) => "string",
            Kind::OptionalPath(_) => "path",
            Kind::Choice { .. } => "enum",
            Kind::List(_) => "list",
            Kind::Bool(_) => "boolean",
        }
    }

    /// Whether the key may be left unset (it has no default value).
    pub(crate) fn is_optional(&self) -> bool {
        matches!(
            self,
            Kind::OptionalInteger(_)
                | Kind::OptionalBytes(_)
                | Kind::OptionalText(_)
                | Kind::OptionalPath(_)
        )
    }
}

fn store<T>(config: &mut ClusterConfig, field: Field<T>, value: Option<T>) -> Result<(), Rejected> {
    let value = value.ok_or(Rejected)?;
    (field.set)(config, value);
    Ok(())
}

fn non_empty<'a>(raw: Raw<'a>) -> Option<&'a str> {
    let text = match raw {
        Raw::Toml(toml::Value::String(text)) => text.as_str(),
        Raw::Text(text) => text,
        Raw::Toml(_) => return None,
    };
    (!text.trim().is_empty()).then_some(text)
}

fn strings(value: &toml::Value) -> Option<Vec<String>> {
    value
        .as_array()?
        .iter()
        .map(|item| item.as_str().map(str::to_owned))
        .collect()
}

/// A list from text: a TOML list (`["ssh", "{host}"]`), or comma-separated words.
fn parse_list(text: &str) -> Option<Vec<String>> {
    if text.trim_start().starts_with('[') {
        return strings(&text.parse::<toml::Value>().ok()?);
    }
    Some(
        text.split(',')
            .map(str::trim)
            .filter(|word| !word.is_empty())
            .map(str::to_owned)
            .collect(),
    )
}

/// `"10s"`, `"500ms"`, `"5min"`, `"1h 30min"`; bare digits are milliseconds, as in Flink.
pub(crate) fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        return text.parse().ok().map(Duration::from_millis);
    }
    humantime::parse_duration(text).ok()
}

/// The shortest exact form in one unit: `"5min"`, `"10s"`, `"100ms"` (`humantime`'s for
/// sub-millisecond durations, which only code can set).
pub(crate) fn format_duration(duration: Duration) -> String {
    if !duration.subsec_nanos().is_multiple_of(1_000_000) {
        return humantime::format_duration(duration).to_string();
    }
    let millis = duration.as_millis();
    const UNITS: [(u128, &str); 3] = [(3_600_000, "h"), (60_000, "min"), (1_000, "s")];
    for (size, unit) in UNITS {
        if millis != 0 && millis.is_multiple_of(size) {
            return format!("{}{unit}", millis / size);
        }
    }
    format!("{millis}ms")
}

/// The units sizes are written in (Flink's, all powers of 1024), largest first.
const BYTE_UNITS: [(&str, u32); 4] = [("tb", 40), ("gb", 30), ("mb", 20), ("kb", 10)];

/// `"64mb"`, `"512 kb"`, `"1GiB"`, `"4096"` (bytes).
fn parse_bytes(text: &str) -> Option<u64> {
    let text = text.trim().to_lowercase();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let number: u64 = digits.parse().ok()?;
    let shift = match unit.trim() {
        "" | "b" | "bytes" => 0,
        "k" | "kb" | "kib" | "kibibytes" => 10,
        "m" | "mb" | "mib" | "mebibytes" => 20,
        "g" | "gb" | "gib" | "gibibytes" => 30,
        "t" | "tb" | "tib" | "tebibytes" => 40,
        _ => return None,
    };
    number.checked_mul(1u64 << shift)
}

/// `"64mb"` when a unit divides it exactly, else the whole number of bytes.
fn format_bytes(bytes: u64) -> String {
    for (unit, shift) in BYTE_UNITS {
        if bytes != 0 && bytes.is_multiple_of(1u64 << shift) {
            return quote(&format!("{}{unit}", bytes >> shift));
        }
    }
    bytes.to_string()
}

/// A TOML string literal.
pub(crate) fn quote(text: &str) -> String {
    toml::Value::String(text.to_owned()).to_string()
}
