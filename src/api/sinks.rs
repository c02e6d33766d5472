//! Where a program's records end: part files (text or CSV) written atomically, the client
//! (`collect`, bounded), or a function run on the TaskManagers (`for_each`).

use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;

use crate::base::codec;
use crate::messages::job_manager::MAX_TASK_RESULT_BYTES;
use crate::operators::OperatorError;

use super::data::Data;
use super::plan::{FnNode, Instance, NodeContext, NodeRuntime};
use super::runtime::{BoxPush, Ctx, Outputs, Push, erase};

/// A sink node: its push is made per subtask by `make`; it has no downstream.
fn sink_node<T, F>(make: F) -> Arc<dyn NodeRuntime>
where
    T: Data,
    F: Fn(&NodeContext) -> Result<BoxPush<T>, OperatorError> + Send + Sync + 'static,
{
    Arc::new(FnNode(move |cx: &NodeContext, _: Outputs| {
        Ok(Instance::Ports(vec![erase(make(cx)?)]))
    }))
}

/// `collect()`: every record encoded into the task's result, up to `bound` bytes over the job
/// (each subtask gets its share, at most [`MAX_TASK_RESULT_BYTES`]: a result travels in one
/// message); past it the task fails, naming the bound.
struct Collect<T> {
    bytes: Vec<u8>,
    /// This subtask's share of `bound`, at most [`MAX_TASK_RESULT_BYTES`].
    limit: usize,
    bound: usize,
    parallelism: usize,
    node: String,
    _records: std::marker::PhantomData<fn(T)>,
}

impl<T: Data> Push<T> for Collect<T> {
    fn push(&mut self, record: T, _: &mut Ctx<'_>) -> Result<(), OperatorError> {
        codec::encode_into(&record, &mut self.bytes).map_err(|e| OperatorError::Operator {
            context: format!("{}: cannot encode a record", self.node),
            source: Box::new(e),
        })?;
        if self.bytes.len() <= self.limit {
            return Ok(());
        }
        let node = &self.node;
        let why = if self.limit < self.bound / self.parallelism {
            format!(
                "{node}: collect() sends at most {MAX_TASK_RESULT_BYTES} bytes of encoded records \
                 back from each of its {} subtasks (they travel in the task's final report) and \
                 one got more; collect with a higher parallelism, or write large results to \
                 files (write_csv, write_text)",
                self.parallelism
            )
        } else {
            format!(
                "{node}: collect() is bounded to {} bytes of encoded records and got more; write \
                 large results to files (write_csv, write_text) or raise the bound with \
                 collect_bounded",
                self.bound
            )
        };
        Err(OperatorError::Failed(why))
    }

    fn end(&mut self, cx: &mut Ctx<'_>) -> Result<(), OperatorError> {
        cx.result = Some(std::mem::take(&mut self.bytes));
        Ok(())
    }
}

/// A collect sink of `bound` bytes over all its subtasks.
pub(crate) fn collect<T: Data>(bound: usize) -> Arc<dyn NodeRuntime> {
    sink_node::<T, _>(move |cx| {
        let parallelism = cx.parallelism.max(1) as usize;
        Ok(Box::new(Collect::<T> {
            bytes: Vec::new(),
            limit: (bound / parallelism).min(MAX_TASK_RESULT_BYTES),
            bound,
            parallelism,
            node: cx.node.clone(),
            _records: std::marker::PhantomData,
        }))
    })
}

/// Decodes what the subtasks of a collect sink sent back, in subtask order.
pub(crate) fn decode_collected<T: Data>(
    parts: &[Option<bytes::Bytes>],
) -> Result<Vec<T>, codec::CodecError> {
    let mut records = Vec::new();
    for part in parts.iter().flatten() {
        let mut rest: &[u8] = part;
        while !rest.is_empty() {
            let (record, used) = codec::decode_prefix::<T>(rest)?;
            records.push(record);
            rest = &rest[used..];
        }
    }
    Ok(records)
}

/// `for_each`: the user's function on every record, on the TaskManagers.
struct ForEach<T> {
    f: Arc<dyn Fn(T) + Send + Sync>,
}

impl<T> Push<T> for ForEach<T> {
    fn push(&mut self, record: T, _: &mut Ctx<'_>) -> Result<(), OperatorError> {
        (self.f)(record);
        Ok(())
    }

    fn end(&mut self, _: &mut Ctx<'_>) -> Result<(), OperatorError> {
        Ok(())
    }
}

/// A for-each sink.
pub(crate) fn for_each<T: Data>(f: Arc<dyn Fn(T) + Send + Sync>) -> Arc<dyn NodeRuntime> {
    sink_node::<T, _>(move |_| Ok(Box::new(ForEach { f: f.clone() })))
}

/// One subtask's part file: written under a hidden, per-attempt temporary name (created new,
/// never through a symlink, 0600) and renamed to `part-{subtask:05}` once complete, so readers
/// never see half a file and a lingering older attempt cannot clobber this one's.
pub(crate) struct PartFile {
    tmp: PathBuf,
    path: PathBuf,
    writer: Option<BufWriter<File>>,
}

impl PartFile {
    /// Creates the directory if needed and the temporary file.
    pub fn create(dir: &Path, cx: &NodeContext) -> Result<Self, OperatorError> {
        let io = |what: String| move |source| OperatorError::Io { what, source };
        crate::env::files::check(dir)?;
        fs::create_dir_all(dir).map_err(io(format!(
            "{}: cannot create output directory `{}`",
            cx.node,
            dir.display()
        )))?;
        let name = format!("part-{:05}", cx.subtask);
        let tmp = dir.join(format!(".{name}.attempt-{}.inprogress", cx.attempt));
        let file = crate::env::private::create_private_file(&tmp).map_err(io(format!(
            "{}: cannot create `{}`",
            cx.node,
            tmp.display()
        )))?;
        Ok(Self {
            tmp,
            path: dir.join(name),
            writer: Some(BufWriter::with_capacity(1 << 16, file)),
        })
    }

    /// The writer.
    pub fn writer(&mut self) -> &mut BufWriter<File> {
        // Only `finish` takes it, and nothing writes after it.
        self.writer
            .get_or_insert_with(|| unreachable!("written after finish"))
    }

    fn failed(&self, source: std::io::Error) -> OperatorError {
        OperatorError::Io {
            what: format!("cannot write `{}`", self.tmp.display()),
            source,
        }
    }

    /// Flushes, makes it durable and renames it into place.
    pub fn finish(&mut self) -> Result<(), OperatorError> {
        if let Some(writer) = self.writer.take() {
            let file = writer
                .into_inner()
                .map_err(|e| self.failed(e.into_error()))?;
            file.sync_all().map_err(|e| self.failed(e))?;
            fs::rename(&self.tmp, &self.path).map_err(|source| OperatorError::Io {
                what: format!(
                    "cannot rename `{}` to `{}`",
                    self.tmp.display(),
                    self.path.display()
                ),
                source,
            })?;
        }
        Ok(())
    }
}

impl Drop for PartFile {
    /// A part file that did not finish (the task failed) leaves nothing behind.
    fn drop(&mut self) {
        if self.writer.take().is_some()
            && let Err(error) = fs::remove_file(&self.tmp)
            && error.kind() != std::io::ErrorKind::NotFound
        {
            log::warn!("cannot remove `{}`: {error}", self.tmp.display());
        }
    }
}

/// `write_text`: one line per record, as the user's function formats it.
struct TextSink<T> {
    file: PartFile,
    format: Arc<dyn Fn(&T) -> String + Send + Sync>,
}

impl<T> Push<T> for TextSink<T> {
    fn push(&mut self, record: T, _: &mut Ctx<'_>) -> Result<(), OperatorError> {
        let line = (self.format)(&record);
        let writer = self.file.writer();
        writer
            .write_all(line.as_bytes())
            .and_then(|()| writer.write_all(b"\n"))
            .map_err(|e| self.file.failed(e))
    }

    fn end(&mut self, _: &mut Ctx<'_>) -> Result<(), OperatorError> {
        self.file.finish()
    }
}

/// A text sink into `dir`.
pub(crate) fn text<T: Data>(
    dir: PathBuf,
    format: Arc<dyn Fn(&T) -> String + Send + Sync>,
) -> Arc<dyn NodeRuntime> {
    sink_node::<T, _>(move |cx| {
        Ok(Box::new(TextSink {
            file: PartFile::create(&dir, cx)?,
            format: format.clone(),
        }))
    })
}

/// `write_csv`: a header (serde field names) and one row per record.
struct CsvSink<T> {
    file: Option<csv::Writer<PartFile>>,
    node: String,
    _records: std::marker::PhantomData<fn(T)>,
}

impl Write for PartFile {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.writer().write(bytes)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.writer().flush()
    }
}

impl<T: Serialize> Push<T> for CsvSink<T> {
    fn push(&mut self, record: T, _: &mut Ctx<'_>) -> Result<(), OperatorError> {
        if let Some(writer) = &mut self.file {
            writer
                .serialize(record)
                .map_err(|e| OperatorError::Operator {
                    context: format!("{}: cannot write a CSV row", self.node),
                    source: Box::new(e),
                })?;
        }
        Ok(())
    }

    fn end(&mut self, _: &mut Ctx<'_>) -> Result<(), OperatorError> {
        if let Some(writer) = self.file.take() {
            let mut file = writer.into_inner().map_err(|e| OperatorError::Operator {
                context: format!("{}: cannot flush its CSV rows", self.node),
                source: Box::new(e.into_error()),
            })?;
            file.finish()?;
        }
        Ok(())
    }
}

/// A CSV sink into `dir`.
pub(crate) fn csv<T: Data>(dir: PathBuf) -> Arc<dyn NodeRuntime> {
    sink_node::<T, _>(move |cx| {
        Ok(Box::new(CsvSink::<T> {
            file: Some(csv::Writer::from_writer(PartFile::create(&dir, cx)?)),
            node: cx.node.clone(),
            _records: std::marker::PhantomData,
        }))
    })
}
