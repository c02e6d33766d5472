//! The built-in operators: enough for word count end to end (`text-source` → `tokenize` →
//! `count-by-key` → `file-sink`) and for testing the runtime (`noop`, `sleep`, `fail-once`).
//!
//! Each operator validates its configuration in its factory, so a bad job fails at deployment
//! with [`OperatorError::Config`] naming the operator and the key, not halfway through a run.
//! Operators run on task threads: they block on files and on their [`TaskIo`], never on an
//! actor, and never spawn threads or read clocks themselves (sleeping goes through
//! [`TaskIo::sleep`] so a simulation can run it in virtual time). Long loops check
//! [`TaskIo::is_cancelled`] every [`CANCEL_CHECK_INTERVAL`] records.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::registry::{OperatorRegistry, OperatorSpec};
use super::text_split::SplitLines;
use super::{Operator, OperatorError, Record, TaskIo, Value};

/// Reads its split of a text file, one record per line.
pub const TEXT_SOURCE: &str = "text-source";
/// Splits text lines into lower-cased words, each with a count of 1 (or, with `combine`, with
/// its count so far).
pub const TOKENIZE: &str = "tokenize";
/// Sums integer values per key.
pub const COUNT_BY_KEY: &str = "count-by-key";
/// Writes `key\tvalue` lines to one file per subtask.
pub const FILE_SINK: &str = "file-sink";
/// Passes records through, or generates some as a source.
pub const NOOP: &str = "noop";
/// Waits, then passes records through.
pub const SLEEP: &str = "sleep";
/// Fails the first attempt of every subtask, then behaves like `noop`.
pub const FAIL_ONCE: &str = "fail-once";
/// Stays stuck for `ms` whatever its cancellation, then behaves like `noop`: a task that does
/// not cooperate with cancel (for the TaskManager's cancellation watchdog).
pub const IGNORE_CANCEL: &str = "ignore-cancel";

/// Every built-in operator name, so callers (and tests) can check a registry has them all.
pub const BUILTIN_OPERATORS: [&str; 9] = [
    TEXT_SOURCE,
    TOKENIZE,
    COUNT_BY_KEY,
    FILE_SINK,
    NOOP,
    SLEEP,
    FAIL_ONCE,
    IGNORE_CANCEL,
    super::process::PROCESS,
];

/// How many records a long loop handles between two [`TaskIo::is_cancelled`] checks: often
/// enough that a cancel is felt within milliseconds, rarely enough to cost nothing.
pub const CANCEL_CHECK_INTERVAL: u64 = 4096;

/// Registers every built-in operator under its name (replacing what was there), so
/// [`OperatorRegistry::with_builtins`] and binaries that build their own registry share one list.
pub fn register_builtins(registry: &mut OperatorRegistry) {
    registry.register(TEXT_SOURCE, Arc::new(text_source));
    registry.register(TOKENIZE, Arc::new(tokenize));
    registry.register(COUNT_BY_KEY, Arc::new(count_by_key));
    registry.register(FILE_SINK, Arc::new(file_sink));
    registry.register(NOOP, Arc::new(noop));
    registry.register(SLEEP, Arc::new(sleep));
    registry.register(FAIL_ONCE, Arc::new(fail_once));
    registry.register(IGNORE_CANCEL, Arc::new(ignore_cancel));
    registry.register(super::process::PROCESS, Arc::new(super::process::create));
}

/// The words of a line, as `tokenize` and [`sequential_word_count`] both define them: maximal
/// runs of [`char::is_alphanumeric`] characters, lower-cased with [`str::to_lowercase`]. One
/// definition, so the distributed and the reference counts cannot drift apart.
pub fn words(line: &str) -> impl Iterator<Item = String> + '_ {
    line.split(|c: char| !c.is_alphanumeric())
        .filter(|word| !word.is_empty())
        .map(str::to_lowercase)
}

/// Counts of [`words`], kept in a map that allocates a word only the first time it is seen
/// (an ASCII word is lower-cased into a reused buffer; any other goes through
/// [`str::to_lowercase`], as [`words`] does). Shared by `tokenize`'s combiner and
/// [`sequential_word_count`], so the reference count is as lean as the distributed one.
#[derive(Debug, Default)]
pub struct WordCounts {
    counts: WordHashMap,
    word: String,
}

/// A hash map with a fixed-key hasher: the same keys inserted in the same order come out in
/// the same order in every run, so a combiner's output is deterministic (the reason the project
/// bans `HashMap` with its per-run random seed). Twice as fast here as a `BTreeMap` (67 MB
/// WordCount, `cargo bench --bench jobs -- wordcount`: 69 against 37 MB/s sequentially). SipHash,
/// not the cluster's `FixedHashMap` (Fx): the words come from user data.
#[allow(clippy::disallowed_types)] // deterministic, see above
type WordHashMap = std::collections::HashMap<
    String,
    u64,
    std::hash::BuildHasherDefault<std::collections::hash_map::DefaultHasher>,
>;

impl WordCounts {
    /// Counts the words of `line`.
    pub fn add_line(&mut self, line: &str) {
        let Self { counts, word } = self;
        for_each_word(line, word, |word| match counts.get_mut(word) {
            Some(count) => *count += 1,
            None => {
                counts.insert(word.to_owned(), 1);
            }
        });
    }

    /// Distinct words counted.
    pub fn len(&self) -> usize {
        self.counts.len()
    }

    /// Whether no word was counted.
    pub fn is_empty(&self) -> bool {
        self.counts.is_empty()
    }

    /// Takes the counts, leaving none.
    pub fn drain(&mut self) -> impl Iterator<Item = (String, u64)> + '_ {
        self.counts.drain()
    }
}

/// Calls `f` with each word of `line` (a maximal run of alphanumeric characters, lowercased),
/// built in `word`, which a caller reuses from line to line. The one definition of a word that
/// `tokenize`, the sequential reference count and typed word counts share.
pub fn for_each_word(line: &str, word: &mut String, mut f: impl FnMut(&str)) {
    for run in line.split(|c: char| !c.is_alphanumeric()) {
        if run.is_empty() {
            continue;
        }
        word.clear();
        if run.is_ascii() {
            word.push_str(run);
            word.make_ascii_lowercase();
        } else {
            word.push_str(&run.to_lowercase());
        }
        f(word);
    }
}

/// Counts the words of a file on one thread, with the same line and word definitions as the
/// distributed pipeline: the reference the tests and benchmarks compare a job's output with.
pub fn sequential_word_count(path: &Path) -> std::io::Result<BTreeMap<String, u64>> {
    let mut reader = BufReader::with_capacity(64 * 1024, File::open(path)?);
    let mut counts = WordCounts::default();
    let mut line = Vec::new();
    loop {
        line.clear();
        if reader.read_until(b'\n', &mut line)? == 0 {
            return Ok(counts.drain().collect());
        }
        counts.add_line(&String::from_utf8_lossy(&line));
    }
}

fn config_error(spec: &OperatorSpec<'_>, message: String) -> OperatorError {
    OperatorError::Config {
        operator: spec.name.to_owned(),
        message,
    }
}

fn required<'c>(spec: &OperatorSpec<'c>, key: &str) -> Result<&'c str, OperatorError> {
    match spec.config.get(key) {
        Some(value) if !value.is_empty() => Ok(value),
        Some(_) => Err(config_error(spec, format!("key `{key}` must not be empty"))),
        None => Err(config_error(spec, format!("missing required key `{key}`"))),
    }
}

fn parse_u64(spec: &OperatorSpec<'_>, key: &str, value: &str) -> Result<u64, OperatorError> {
    value.trim().parse().map_err(|_| {
        config_error(
            spec,
            format!("key `{key}` must be a non-negative integer, got `{value}`"),
        )
    })
}

fn io_error(what: String, source: std::io::Error) -> OperatorError {
    OperatorError::Io { what, source }
}

/// Checks the cancel flag every [`CANCEL_CHECK_INTERVAL`] records.
fn check_cancelled(io: &dyn TaskIo, handled: u64) -> Result<(), OperatorError> {
    if handled.is_multiple_of(CANCEL_CHECK_INTERVAL) && io.is_cancelled() {
        Err(OperatorError::Cancelled)
    } else {
        Ok(())
    }
}

/// Emits every input record unchanged.
fn pass_through(io: &mut dyn TaskIo) -> Result<(), OperatorError> {
    pass_at_most(io, u64::MAX)
}

/// Passes at most `limit` input records through, then ends (the rest stays unread).
fn pass_at_most(io: &mut dyn TaskIo, limit: u64) -> Result<(), OperatorError> {
    let mut handled = 0u64;
    while handled < limit {
        let Some(record) = io.next()? else {
            break;
        };
        io.emit(record)?;
        handled += 1;
        check_cancelled(io, handled)?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// text-source

fn text_source(spec: &OperatorSpec<'_>) -> Result<Box<dyn Operator>, OperatorError> {
    let input = match (spec.config.get("path"), spec.config.get("artifact")) {
        (Some(_), Some(_)) => {
            return Err(config_error(
                spec,
                "give `path` or `artifact`, not both".to_owned(),
            ));
        }
        (None, Some(_)) => TextInput::Artifact(required(spec, "artifact")?.to_owned()),
        _ => TextInput::Path(PathBuf::from(required(spec, "path")?)),
    };
    Ok(Box::new(TextSource { input }))
}

/// Reads the lines whose first byte lies in this subtask's byte range of the file.
struct TextSource {
    input: TextInput,
}

/// Where a `text-source` reads: a file every TaskManager sees (`path`), or one the job ships
/// (`artifact`: its name; the TaskManager fetched it before the task started).
enum TextInput {
    Path(PathBuf),
    Artifact(String),
}

/// The local copy of the job's artifact `name`, or an error naming what the job ships.
pub(crate) fn artifact_path(
    io: &dyn TaskIo,
    operator: &str,
    name: &str,
) -> Result<PathBuf, OperatorError> {
    let artifacts = io.context().artifacts;
    artifacts.get(name).cloned().ok_or_else(|| {
        let shipped: Vec<&str> = artifacts.keys().map(String::as_str).collect();
        OperatorError::Failed(format!(
            "{operator}: the job ships no artifact `{name}` (it ships {})",
            if shipped.is_empty() {
                "none".to_owned()
            } else {
                shipped.join(", ")
            }
        ))
    })
}

impl Operator for TextSource {
    fn run(&mut self, io: &mut dyn TaskIo) -> Result<(), OperatorError> {
        let (subtask, parallelism) = (io.subtask(), io.parallelism());
        if subtask >= parallelism {
            return Err(OperatorError::Failed(format!(
                "{TEXT_SOURCE}: subtask {subtask} is out of range for parallelism {parallelism}"
            )));
        }
        let path = &match &self.input {
            TextInput::Path(path) => path.clone(),
            TextInput::Artifact(name) => artifact_path(io, TEXT_SOURCE, name)?,
        };
        let mut lines = SplitLines::open(path, subtask, parallelism, TEXT_SOURCE)?;
        let mut emitted = 0u64;
        while let Some((_, line)) = lines.next_line()? {
            io.emit(Record {
                key: String::new(),
                value: Value::Text(String::from_utf8_lossy(line).into_owned()),
            })?;
            emitted += 1;
            check_cancelled(io, emitted)?;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// tokenize

fn tokenize(spec: &OperatorSpec<'_>) -> Result<Box<dyn Operator>, OperatorError> {
    let combine = match spec.config.get("combine") {
        Some(value) => parse_u64(spec, "combine", value)? as usize,
        None => 0,
    };
    Ok(Box::new(Tokenize { combine }))
}

/// Turns each text line into `(word, 1)` records; with `combine = N` (N > 0) it is its own
/// combiner (as a Flink `combine` before a shuffle): it sums the words' counts itself and emits
/// `(word, partial count)` records, each word once whenever N distinct words are held and at
/// the end of its input. A sum downstream comes out the same; far fewer records cross the
/// all-to-all exchange. Being a combiner, it emits nothing until then: use it on bounded input.
struct Tokenize {
    combine: usize,
}

impl Tokenize {
    fn line(record: Record) -> Result<String, OperatorError> {
        match record.value {
            Value::Text(line) => Ok(line),
            other => Err(OperatorError::Failed(format!(
                "{TOKENIZE}: expected a text value, got {other:?} (key `{}`)",
                record.key
            ))),
        }
    }

    fn emit_counts(counts: &mut WordCounts, io: &mut dyn TaskIo) -> Result<(), OperatorError> {
        for (emitted, (word, count)) in (1u64..).zip(counts.drain()) {
            let count = i64::try_from(count).map_err(|_| {
                OperatorError::Failed(format!("{TOKENIZE}: a count overflows a 64-bit integer"))
            })?;
            io.emit(Record {
                key: word,
                value: Value::Int(count),
            })?;
            check_cancelled(io, emitted)?;
        }
        Ok(())
    }
}

impl Operator for Tokenize {
    fn run(&mut self, io: &mut dyn TaskIo) -> Result<(), OperatorError> {
        let mut handled = 0u64;
        let mut counts = WordCounts::default();
        while let Some(record) = io.next()? {
            let line = Self::line(record)?;
            if self.combine > 0 {
                counts.add_line(&line);
                if counts.len() >= self.combine {
                    Self::emit_counts(&mut counts, io)?;
                }
            } else {
                for word in words(&line) {
                    io.emit(Record {
                        key: word,
                        value: Value::Int(1),
                    })?;
                }
            }
            handled += 1;
            check_cancelled(io, handled)?;
        }
        Self::emit_counts(&mut counts, io)
    }
}

// ---------------------------------------------------------------------------------------------
// count-by-key

fn count_by_key(_spec: &OperatorSpec<'_>) -> Result<Box<dyn Operator>, OperatorError> {
    Ok(Box::new(CountByKey))
}

/// Sums integer values per key; emits the sums in key order once the input ends.
struct CountByKey;

impl Operator for CountByKey {
    fn run(&mut self, io: &mut dyn TaskIo) -> Result<(), OperatorError> {
        let mut sums: BTreeMap<String, i64> = BTreeMap::new();
        let mut handled = 0u64;
        while let Some(record) = io.next()? {
            let Value::Int(value) = record.value else {
                return Err(OperatorError::Failed(format!(
                    "{COUNT_BY_KEY}: expected an integer value, got {:?} (key `{}`)",
                    record.value, record.key
                )));
            };
            let sum = sums.entry(record.key).or_insert(0);
            *sum = sum.checked_add(value).ok_or_else(|| {
                OperatorError::Failed(format!("{COUNT_BY_KEY}: sum overflows a 64-bit integer"))
            })?;
            handled += 1;
            check_cancelled(io, handled)?;
        }
        for (emitted, (key, sum)) in (1u64..).zip(sums) {
            io.emit(Record {
                key,
                value: Value::Int(sum),
            })?;
            check_cancelled(io, emitted)?;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// file-sink

fn file_sink(spec: &OperatorSpec<'_>) -> Result<Box<dyn Operator>, OperatorError> {
    Ok(Box::new(FileSink {
        dir: PathBuf::from(required(spec, "path")?),
    }))
}

/// Writes `part-{subtask:05}` in its directory, atomically: a temporary file renamed at the end.
struct FileSink {
    dir: PathBuf,
}

impl FileSink {
    /// Writes every input record to `tmp` and makes it durable.
    fn write_all(&self, tmp: &Path, io: &mut dyn TaskIo) -> Result<(), OperatorError> {
        let write_error = |source| {
            io_error(
                format!(
                    "{FILE_SINK}: cannot write `{}` in output directory `{}`",
                    tmp.display(),
                    self.dir.display()
                ),
                source,
            )
        };
        // Created new, 0600, never through a symbolic link planted at the temporary name.
        let file = crate::env::private::create_private_file(tmp).map_err(write_error)?;
        let mut out = BufWriter::with_capacity(64 * 1024, file);
        let mut handled = 0u64;
        while let Some(record) = io.next()? {
            let written = match &record.value {
                Value::Unit => writeln!(out, "{}\t", record.key),
                Value::Int(n) => writeln!(out, "{}\t{n}", record.key),
                Value::Text(text) => writeln!(out, "{}\t{text}", record.key),
            };
            written.map_err(write_error)?;
            handled += 1;
            check_cancelled(io, handled)?;
        }
        let file = out.into_inner().map_err(|e| write_error(e.into_error()))?;
        // Durable before the rename, so the final name never points at lost data after a crash.
        file.sync_all().map_err(write_error)
    }
}

impl Operator for FileSink {
    fn run(&mut self, io: &mut dyn TaskIo) -> Result<(), OperatorError> {
        let dir = &self.dir;
        crate::env::files::check(dir)?;
        fs::create_dir_all(dir).map_err(|source| {
            io_error(
                format!(
                    "{FILE_SINK}: cannot create output directory `{}`",
                    dir.display()
                ),
                source,
            )
        })?;
        let name = format!("part-{:05}", io.subtask());
        let final_path = dir.join(&name);
        // Hidden, and per attempt: a lingering older attempt cannot clobber this one's file.
        let tmp = dir.join(format!(
            ".{name}.attempt-{}.inprogress",
            io.attempt_number()
        ));
        let written = self.write_all(&tmp, io).and_then(|()| {
            fs::rename(&tmp, &final_path).map_err(|source| {
                io_error(
                    format!(
                        "{FILE_SINK}: cannot rename `{}` to `{}`",
                        tmp.display(),
                        final_path.display()
                    ),
                    source,
                )
            })
        });
        if written.is_err()
            && let Err(e) = fs::remove_file(&tmp)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            log::warn!("{FILE_SINK}: cannot remove `{}`: {e}", tmp.display());
        }
        written
    }
}

// ---------------------------------------------------------------------------------------------
// noop, sleep, fail-once

fn noop(spec: &OperatorSpec<'_>) -> Result<Box<dyn Operator>, OperatorError> {
    Ok(Box::new(Noop::from_spec(spec)?))
}

/// Generates `count` records, then passes every input record through (with `take`, at most
/// that many, then ends without reading the rest: a consumer that stops early, as a `first_n`
/// does). A record's value is its number, or with `payload-bytes` a text of that many bytes (a
/// source of bulk data for throughput and backpressure tests).
///
/// The operator cannot see whether it has inputs, so it always does both: as a source its input
/// is empty, and as an inner operator `count` is normally left at 0.
struct Noop {
    count: u64,
    payload: Option<String>,
    take: Option<u64>,
}

/// The largest `payload-bytes` of one generated record (a network buffer grows to hold one
/// record, so one record must stay far below the network memory).
const MAX_PAYLOAD_BYTES: u64 = 1 << 20;

impl Noop {
    fn from_spec(spec: &OperatorSpec<'_>) -> Result<Self, OperatorError> {
        let count = match spec.config.get("count") {
            Some(value) => parse_u64(spec, "count", value)?,
            None => 0,
        };
        if i64::try_from(count).is_err() {
            return Err(config_error(
                spec,
                format!("key `count` must be at most {}, got {count}", i64::MAX),
            ));
        }
        let payload = match spec.config.get("payload-bytes") {
            Some(value) => {
                let bytes = parse_u64(spec, "payload-bytes", value)?;
                if bytes > MAX_PAYLOAD_BYTES {
                    return Err(config_error(
                        spec,
                        format!(
                            "key `payload-bytes` must be at most {MAX_PAYLOAD_BYTES}, got {bytes}"
                        ),
                    ));
                }
                // At most 1 MiB (checked above): fits a usize.
                Some("x".repeat(bytes as usize))
            }
            None => None,
        };
        let take = match spec.config.get("take") {
            Some(value) => Some(parse_u64(spec, "take", value)?),
            None => None,
        };
        Ok(Self {
            count,
            payload,
            take,
        })
    }
}

impl Operator for Noop {
    fn run(&mut self, io: &mut dyn TaskIo) -> Result<(), OperatorError> {
        // `count` fits in an i64 (checked in `from_spec`), so every `i` does too.
        for i in 0..self.count as i64 {
            let value = match &self.payload {
                Some(payload) => Value::Text(payload.clone()),
                None => Value::Int(i),
            };
            io.emit(Record {
                key: i.to_string(),
                value,
            })?;
            check_cancelled(io, i as u64 + 1)?;
        }
        pass_at_most(io, self.take.unwrap_or(u64::MAX))
    }
}

fn sleep(spec: &OperatorSpec<'_>) -> Result<Box<dyn Operator>, OperatorError> {
    let ms = parse_u64(spec, "ms", required(spec, "ms")?)?;
    let per_record_ms = match spec.config.get("per-record-ms") {
        Some(value) => parse_u64(spec, "per-record-ms", value)?,
        None => 0,
    };
    let per_record_us = match spec.config.get("per-record-us") {
        Some(value) => parse_u64(spec, "per-record-us", value)?,
        None => 0,
    };
    if per_record_ms > 0 && per_record_us > 0 {
        return Err(config_error(
            spec,
            "give `per-record-ms` or `per-record-us`, not both".to_owned(),
        ));
    }
    Ok(Box::new(Sleep {
        duration: Duration::from_millis(ms),
        per_record: Duration::from_millis(per_record_ms) + Duration::from_micros(per_record_us),
        gate: match (
            spec.config.get("until-exists"),
            spec.config.get("gate-after"),
        ) {
            (Some(path), after) => Some(Gate {
                path: PathBuf::from(path),
                after: match after {
                    Some(value) => parse_u64(spec, "gate-after", value)?,
                    None => 0,
                },
            }),
            (None, Some(_)) => {
                return Err(config_error(
                    spec,
                    "`gate-after` needs `until-exists` (the file that opens the gate)".to_owned(),
                ));
            }
            (None, None) => None,
        },
    }))
}

/// Waits `ms` (cancellably), then passes input through, waiting `per-record-ms` or
/// `per-record-us` (default 0) per record and, given `until-exists`, holding the records after
/// the first `gate-after` (default 0) until a file exists at that path: makes tasks slow on
/// purpose in tests (a silent producer, a slow consumer, a stage a test holds until it opens
/// the gate; a subtask with at most `gate-after` records never waits). Waits shorter than
/// [`SLEEP_GRAIN`] are added up and slept in one go, so a per-record wait of microseconds slows
/// the task by that rate, not by the OS's shortest sleep.
struct Sleep {
    duration: Duration,
    per_record: Duration,
    gate: Option<Gate>,
}

/// Where a `sleep` holds its input until a test opens it.
struct Gate {
    /// The file whose existence opens it.
    path: PathBuf,
    /// Records passed before it holds.
    after: u64,
}

/// The shortest wait `sleep` makes between records (see [`Sleep`]).
const SLEEP_GRAIN: Duration = Duration::from_millis(1);

/// How often `sleep` looks for its `until-exists` file.
const GATE_POLL: Duration = Duration::from_millis(10);

impl Operator for Sleep {
    fn run(&mut self, io: &mut dyn TaskIo) -> Result<(), OperatorError> {
        io.sleep(self.duration)?;
        if self.per_record.is_zero() && self.gate.is_none() {
            return pass_through(io);
        }
        let mut gate = self.gate.as_ref();
        let (mut owed, mut passed) = (Duration::ZERO, 0u64);
        while let Some(record) = io.next()? {
            if let Some(Gate { path, after }) = gate
                && passed >= *after
            {
                while !path.exists() {
                    io.sleep(GATE_POLL)?;
                }
                gate = None;
            }
            passed += 1;
            owed += self.per_record;
            if owed >= SLEEP_GRAIN {
                io.sleep(owed)?;
                owed = Duration::ZERO;
            }
            io.emit(record)?;
        }
        Ok(())
    }
}

fn fail_once(spec: &OperatorSpec<'_>) -> Result<Box<dyn Operator>, OperatorError> {
    Ok(Box::new(FailOnce {
        then: Noop::from_spec(spec)?,
    }))
}

/// Fails attempt 0 of every subtask and runs like `noop` afterwards: exercises restarts.
struct FailOnce {
    then: Noop,
}

impl Operator for FailOnce {
    fn run(&mut self, io: &mut dyn TaskIo) -> Result<(), OperatorError> {
        if io.attempt_number() == 0 {
            return Err(OperatorError::Failed(format!(
                "{FAIL_ONCE}: failing the first attempt of subtask {}",
                io.subtask()
            )));
        }
        self.then.run(io)
    }
}

fn ignore_cancel(spec: &OperatorSpec<'_>) -> Result<Box<dyn Operator>, OperatorError> {
    let ms = parse_u64(spec, "ms", required(spec, "ms")?)?;
    Ok(Box::new(IgnoreCancel {
        stuck: Duration::from_millis(ms),
        then: Noop::from_spec(spec)?,
    }))
}

/// Non-cooperative on purpose: stuck for `ms` where it cannot see its cancellation, then runs
/// like `noop` (cooperatively). Only the cancellation watchdog (interrupting it again, then
/// failing its TaskManager after `task.cancellation.timeout`) ends a cancel of it sooner.
struct IgnoreCancel {
    stuck: Duration,
    then: Noop,
}

impl Operator for IgnoreCancel {
    fn run(&mut self, io: &mut dyn TaskIo) -> Result<(), OperatorError> {
        io.sleep_ignoring_cancel(self.stuck)?;
        self.then.run(io)
    }
}

#[cfg(test)]
mod tests;
