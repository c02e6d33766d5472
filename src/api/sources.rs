//! Where a program's records come from: a collection, a generator, text, CSV and Parquet files
//! split across the source's subtasks (Parquet by row groups, see [`crate::operators::parquet`]).
//!
//! Files are split by byte range (subtask `i` of `p` takes the lines starting in the `i`-th
//! `p`-th of the file; [`crate::operators::text_split`], the built-in `text-source`'s split
//! too), so every line is read exactly once whatever the parallelism; a CSV file's header is
//! read by every subtask and skipped as a record.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::operators::OperatorError;
use crate::operators::parquet::{ParquetError, ParquetSplit, RowReader, parquet_files_in};
use crate::operators::text_split::SplitLines;

use super::data::Data;
use super::plan::{FnNode, Instance, NodeContext, NodeRuntime};
use super::runtime::{BoxPush, Ctx, IterSource, Outputs, RunSource, downstream};

/// A source node's runtime: per subtask, an iterator of records.
pub(crate) fn source_node<T, F>(
    make: F,
) -> Arc<FnNode<impl Fn(&NodeContext, Outputs) -> Result<Instance, OperatorError> + Send + Sync>>
where
    T: Data,
    F: Fn(
            &NodeContext,
        ) -> Result<Box<dyn Iterator<Item = Result<T, OperatorError>>>, OperatorError>
        + Send
        + Sync
        + 'static,
{
    Arc::new(FnNode(move |cx: &NodeContext, outputs: Outputs| {
        let records = make(cx)?;
        Ok(Instance::Source(Box::new(IterSource {
            records,
            downstream: downstream::<T>(outputs),
        })))
    }))
}

/// Names the source's task and subtask: the error itself names file, column and row.
fn parquet_error(cx: &NodeContext) -> impl Fn(ParquetError) -> OperatorError + use<> {
    let context = format!("{} (subtask {}) cannot read Parquet", cx.vertex, cx.subtask);
    move |error| OperatorError::Operator {
        context: context.clone(),
        source: Box::new(error),
    }
}

/// A Parquet source node: the subtask's share of the row groups of `path` (a file, or a
/// directory of `*.parquet` files in name order: every subtask lists it alike). The file is
/// opened and checked against `T` when the task starts.
pub(crate) fn parquet_node<T: Data>(path: PathBuf) -> Arc<dyn NodeRuntime> {
    Arc::new(FnNode(move |cx: &NodeContext, outputs: Outputs| {
        let error = parquet_error(cx);
        let files = if path.is_dir() {
            parquet_files_in(&path).map_err(&error)?
        } else {
            vec![path.clone()]
        };
        let split =
            ParquetSplit::for_subtask(&files, cx.subtask as usize, cx.parallelism.max(1) as usize)
                .map_err(&error)?;
        let rows = split.rows::<T>().map_err(&error)?;
        Ok(Instance::Source(Box::new(ParquetSource {
            rows: Some(rows),
            error: Box::new(error),
            downstream: downstream::<T>(outputs),
        })))
    }))
}

/// Pushes rows straight from each decoded batch into the chain: no boxed iterator call and no
/// `Option<Result<_>>` per row between the reader and the first operator (the iterator's
/// per-row overhead was a tenth of a TPC-H scan: benches/RESULTS.md).
struct ParquetSource<T> {
    rows: Option<RowReader<T>>,
    error: Box<dyn Fn(ParquetError) -> OperatorError>,
    downstream: BoxPush<T>,
}

/// Why a Parquet source stopped early: its file, or its chain.
enum Stop {
    Read(ParquetError),
    Push(OperatorError),
}

impl From<ParquetError> for Stop {
    fn from(error: ParquetError) -> Self {
        Stop::Read(error)
    }
}

impl<T: Data> RunSource for ParquetSource<T> {
    fn run(&mut self, cx: &mut Ctx<'_>) -> Result<(), OperatorError> {
        if let Some(rows) = self.rows.take() {
            let downstream = &mut self.downstream;
            rows.try_for_each_row(|row| {
                cx.tick()
                    .and_then(|()| downstream.push(row, cx))
                    .map_err(Stop::Push)
            })
            .map_err(|stop| match stop {
                Stop::Read(error) => (self.error)(error),
                Stop::Push(error) => error,
            })?;
        }
        self.downstream.end(cx)
    }
}

/// The 1-based number of the line of `path` that starts at byte `offset` (for error messages:
/// it reads the file up to there).
pub(crate) fn line_number(path: &Path, offset: u64) -> u64 {
    let Ok(file) = File::open(path) else {
        return 0;
    };
    let mut newlines = 0u64;
    let mut buffer = [0u8; 64 * 1024];
    let mut reader = file.take(offset);
    while let Ok(read) = reader.read(&mut buffer) {
        if read == 0 {
            break;
        }
        newlines += buffer[..read].iter().filter(|b| **b == b'\n').count() as u64;
    }
    newlines + 1
}

/// The lines of a text file, as `String`s (invalid UTF-8 replaced).
pub(crate) fn text_lines(
    path: PathBuf,
    cx: &NodeContext,
) -> Result<Box<dyn Iterator<Item = Result<String, OperatorError>>>, OperatorError> {
    let mut lines = SplitLines::open(&path, cx.subtask, cx.parallelism, "read_text_file")?;
    Ok(Box::new(std::iter::from_fn(move || {
        match lines.next_line() {
            Ok(Some((_, line))) => Some(Ok(String::from_utf8_lossy(line).into_owned())),
            Ok(None) => None,
            Err(error) => Some(Err(error)),
        }
    })))
}

/// The rows of a CSV file with a header line, deserialized as `T` by the header's names (serde
/// field names; a row that does not fit names the file, the line and the column).
pub(crate) fn csv_rows<T: Data>(
    path: PathBuf,
    cx: &NodeContext,
) -> Result<Box<dyn Iterator<Item = Result<T, OperatorError>>>, OperatorError> {
    let header = {
        let mut first = SplitLines::open(&path, 0, 1, "read_csv")?;
        match first.next_line()? {
            Some((_, line)) => csv::StringRecord::from_byte_record(
                csv::ReaderBuilder::new()
                    .has_headers(false)
                    .from_reader(line)
                    .byte_records()
                    .next()
                    .transpose()
                    .map_err(|e| csv_error(&path, 0, None, &e.to_string()))?
                    .unwrap_or_default(),
            )
            .map_err(|e| csv_error(&path, 0, None, &format!("the header is not UTF-8: {e}")))?,
            None => return Ok(Box::new(std::iter::empty())),
        }
    };
    let mut lines = SplitLines::open(&path, cx.subtask, cx.parallelism, "read_csv")?;
    let header = Arc::new(header);
    Ok(Box::new(std::iter::from_fn(move || {
        loop {
            let (offset, line) = match lines.next_line() {
                Ok(Some(line)) => line,
                Ok(None) => return None,
                Err(error) => return Some(Err(error)),
            };
            if offset == 0 || line.is_empty() {
                continue; // the header, or an empty line
            }
            let mut reader = csv::ReaderBuilder::new()
                .has_headers(false)
                .from_reader(line);
            let record = match reader.records().next() {
                Some(Ok(record)) => record,
                Some(Err(error)) => {
                    return Some(Err(csv_error(&path, offset, None, &error.to_string())));
                }
                None => continue,
            };
            return Some(record.deserialize::<T>(Some(&header)).map_err(
                |error| match error.kind() {
                    csv::ErrorKind::Deserialize { err, .. } => {
                        let column = err
                            .field()
                            .and_then(|field| header.get(field as usize).map(str::to_owned));
                        csv_error(&path, offset, column.as_deref(), &csv_message(err))
                    }
                    _ => csv_error(&path, offset, None, &error.to_string()),
                },
            ));
        }
    })))
}

/// A CSV deserialization error's own message, without the position csv adds (ours is better).
fn csv_message(error: &csv::DeserializeError) -> String {
    match error.kind() {
        csv::DeserializeErrorKind::Message(message) => message.clone(),
        kind => kind.to_string(),
    }
}

fn csv_error(path: &Path, offset: u64, column: Option<&str>, message: &str) -> OperatorError {
    let line = line_number(path, offset);
    OperatorError::Failed(match column {
        Some(column) => format!(
            "{}: line {line}, column `{column}`: {message}",
            path.display()
        ),
        None => format!("{}: line {line}: {message}", path.display()),
    })
}
