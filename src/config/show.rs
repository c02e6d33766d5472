//! A configuration written as TOML, one dotted `key = value` line per key in the registry's
//! order: what `flint config --show` prints (with each value's source as a comment) and the file
//! the JobManager hands its TaskManager children. Either reads back as the same configuration.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::ClusterConfig;
use super::error::Origin;
use super::keys;
use super::kind::quote;

/// What to do with a secret's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Secrets {
    /// Write `"***"` (for people: the line shows the key is set and where from).
    Mask,
    /// Leave the key out (for files: a child that needs no secret gets none).
    Omit,
}

/// The lines of `config`, each followed by `# origin` when `origins` is given.
pub fn render(
    config: &ClusterConfig,
    origins: Option<&BTreeMap<&'static str, Origin>>,
    secrets: Secrets,
) -> String {
    let lines: Vec<String> = keys::keys()
        .iter()
        .map(|key| match key.value(config) {
            None => format!("# {} is not set", key.name),
            Some(_) if key.secret && secrets == Secrets::Omit => {
                format!("# {} is set but not written here (a secret)", key.name)
            }
            Some(_) if key.secret => format!("{} = {}", key.name, quote("***")),
            Some(value) => format!("{} = {value}", key.name),
        })
        .collect();
    let width = lines
        .iter()
        .map(|line| line.chars().count())
        .max()
        .unwrap_or(0);
    let mut out = String::new();
    for (key, line) in keys::keys().iter().zip(lines) {
        match origins.and_then(|o| o.get(key.name)) {
            Some(origin) => {
                let pad = width - line.chars().count();
                let _ = writeln!(out, "{line}{:pad$}  # {origin}", "");
            }
            None => {
                out.push_str(&line);
                out.push('\n');
            }
        }
    }
    out
}
