//! How records cross a `process` vertex's pipes (docs/process-operator.md has the byte-level
//! description for implementers in other languages).
//!
//! - `json`: one JSON object per line. To the child: `{"input":0,"key":"word","value":V}`;
//!   from it: `{"key":"word","value":V}` (`key` may be left out: "", `value` may not). `V` is
//!   `null`, an integer
//!   or a string (Flint's `Unit`, `Int`, `Text`). Blank lines from the child are skipped.
//! - `bincode`: a little-endian `u32` byte length, then that many bytes: the tuple
//!   `(input: u32, key: String, value: Value)` to the child and `(key: String, value: Value)`
//!   from it, in Flint's codec (bincode 2, standard configuration: varint integers).

use std::io::{self, BufRead};

use serde_json::json;

use super::super::{Record, Value};
use crate::base::codec;

/// The largest frame the child may send (the codec's limit): a length past it is garbage.
pub const MAX_FRAME: usize = codec::MAX_MESSAGE_SIZE;

/// A vertex's framing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// JSON lines.
    Json,
    /// Length-prefixed bincode.
    Bincode,
}

impl Framing {
    /// The framing named `name` in a vertex's configuration.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "json" => Some(Self::Json),
            "bincode" => Some(Self::Bincode),
            _ => None,
        }
    }

    /// The name a vertex's configuration (and `FLINT_FRAMING`) gives it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Json => "json",
            Self::Bincode => "bincode",
        }
    }

    /// Appends the frame of `record` from input `input` to `out`.
    pub fn encode(self, input: usize, record: &Record, out: &mut Vec<u8>) {
        match self {
            Self::Json => {
                let value = match &record.value {
                    Value::Unit => serde_json::Value::Null,
                    Value::Int(n) => json!(n),
                    Value::Text(text) => json!(text),
                };
                let line = json!({"input": input, "key": record.key, "value": value});
                // A `Value` of JSON types always serializes.
                let _ = serde_json::to_writer(&mut *out, &line);
                out.push(b'\n');
            }
            Self::Bincode => {
                let frame = (input as u32, &record.key, &record.value);
                let bytes = codec::encode(&frame).unwrap_or_default();
                out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
                out.extend_from_slice(&bytes);
            }
        }
    }

    /// The next record the child wrote, `None` at the end of its output; an error says what
    /// is wrong with the frame (quoting the start of a bad line).
    pub fn decode(self, from: &mut impl BufRead) -> Result<Option<Record>, FrameError> {
        match self {
            Self::Json => loop {
                let mut line = String::new();
                if from.read_line(&mut line)? == 0 {
                    return Ok(None);
                }
                if line.trim().is_empty() {
                    continue;
                }
                return parse_json(line.trim_end()).map(Some);
            },
            Self::Bincode => {
                let mut length = [0u8; 4];
                match from.read(&mut length[..1])? {
                    0 => return Ok(None),
                    _ => from.read_exact(&mut length[1..])?,
                }
                let length = u32::from_le_bytes(length) as usize;
                if length == 0 || length > MAX_FRAME {
                    return Err(FrameError::Malformed(format!(
                        "a frame length of {length} bytes (at most {MAX_FRAME})"
                    )));
                }
                let mut bytes = vec![0; length];
                from.read_exact(&mut bytes)?;
                let (key, value): (String, Value) = codec::decode(&bytes).map_err(|error| {
                    FrameError::Malformed(format!(
                        "a {length}-byte frame that is not (key, value): {error}"
                    ))
                })?;
                Ok(Some(Record { key, value }))
            }
        }
    }
}

fn parse_json(line: &str) -> Result<Record, FrameError> {
    let quoted = || line.chars().take(80).collect::<String>();
    let object: serde_json::Value = serde_json::from_str(line)
        .map_err(|error| FrameError::Malformed(format!("`{}`: {error}", quoted())))?;
    let key = match object.get("key") {
        None | Some(serde_json::Value::Null) => String::new(),
        Some(serde_json::Value::String(key)) => key.clone(),
        Some(_) => {
            return Err(FrameError::Malformed(format!(
                "`{}`: \"key\" must be a string",
                quoted()
            )));
        }
    };
    let value = match object.get("value") {
        None => {
            return Err(FrameError::Malformed(format!(
                "`{}`: no \"value\" (null for none)",
                quoted()
            )));
        }
        Some(serde_json::Value::Null) => Value::Unit,
        Some(serde_json::Value::String(text)) => Value::Text(text.clone()),
        Some(serde_json::Value::Number(n)) if n.as_i64().is_some() => {
            Value::Int(n.as_i64().unwrap_or_default())
        }
        Some(_) => {
            return Err(FrameError::Malformed(format!(
                "`{}`: \"value\" must be null, an integer or a string",
                quoted()
            )));
        }
    };
    if !object.is_object() {
        return Err(FrameError::Malformed(format!(
            "`{}`: not a JSON object",
            quoted()
        )));
    }
    Ok(Record { key, value })
}

/// Why the child's output could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// A frame that is not one.
    #[error("malformed frame on stdout: {0}")]
    Malformed(String),
    /// The pipe failed, or ended in the middle of a frame.
    #[error("reading its stdout failed")]
    Io(#[from] io::Error),
}
