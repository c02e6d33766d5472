//! The `process` operator (Hadoop streaming; Ray's and Dask's any-function, as an operator):
//! each subtask runs a command and exchanges records with it over its stdin and stdout, so a
//! step of a job can be written in any language.
//!
//! Configuration:
//! - `command`: one of the job's artifacts (by name; shipped executable, see `flint run
//!   --artifact`), or, only with `allow-path = "true"`, a program on the TaskManager's `PATH`
//!   (`python3`). Never a path taken from data.
//! - `args`: a JSON array of strings; `{artifact:NAME}` in one becomes that artifact's local
//!   path (`["{artifact:tokenize.py}"]`).
//! - `framing`: `json` (default) or `bincode`, see [`framing`].
//! - `stderr-lines`: how many last lines of stderr a failure quotes (default 20).
//!
//! The child runs in its own process group, in the task's private directory, with `FLINT_SUBTASK`,
//! `FLINT_PARALLELISM` and `FLINT_ATTEMPT` set. A writer thread writes its stdin, each time all the
//! frames queued since its last write (`stdin_queue`); a reader thread decodes its stdout into
//! batches, handed over whenever its pipe has nothing more ready; a third logs its stderr; the task
//! thread moves records between them and the exchange. Every queue is bounded, so a slow child
//! slows its inputs down (backpressure) and a child that writes without reading cannot make memory
//! grow. Cancellation sends the group SIGTERM, then SIGKILL after [`KILL_GRACE`]; the child is
//! reaped on every way out. A non-zero exit, a death by signal or a malformed frame fails the task
//! naming the command, how it ended and the last lines of its stderr.

use std::collections::{BTreeMap, VecDeque};
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, sync_channel};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use self::framing::Framing;
use self::stdin_queue::{Push, StdinQueue, StdinSender};
use super::registry::OperatorSpec;
use super::{Operator, OperatorError, Record, TaskIo};

pub mod framing;
mod stdin_queue;

/// The operator's registered name.
pub const PROCESS: &str = "process";

/// How long a cancelled child has between SIGTERM and SIGKILL.
pub const KILL_GRACE: Duration = Duration::from_secs(2);

/// Bytes of frames queued for the child's stdin at most.
const STDIN_LIMIT: usize = 1 << 20;

/// Records the reader hands over at once at most, and batches it keeps ready at most.
const BATCH: usize = 256;
const BATCHES: usize = 8;

/// How often the task waiting for the child's output to end, then for its exit, looks
/// whether it was cancelled (or the child exited with its stdout still held open).
const EXIT_POLL: Duration = Duration::from_millis(10);

/// How often a task whose stdin queue is full looks whether it was cancelled (room, the
/// child's output and the writer's end wake it at once).
const CANCEL_CHECK: Duration = Duration::from_millis(20);

/// Creates a `process` operator from its vertex's configuration.
pub fn create(spec: &OperatorSpec<'_>) -> Result<Box<dyn Operator>, OperatorError> {
    let config = |message: String| OperatorError::Config {
        operator: spec.name.to_owned(),
        message,
    };
    let command = match spec.config.get("command") {
        Some(command) if !command.is_empty() => command.clone(),
        _ => return Err(config("missing required key `command`".into())),
    };
    let args: Vec<String> = match spec.config.get("args") {
        None => Vec::new(),
        Some(args) => serde_json::from_str(args).map_err(|error| {
            config(format!(
                "`args` must be a JSON array of strings, got `{args}`: {error}"
            ))
        })?,
    };
    let framing = match spec.config.get("framing").map(String::as_str) {
        None => Framing::Json,
        Some(name) => Framing::parse(name)
            .ok_or_else(|| config(format!("`framing` is `json` or `bincode`, got `{name}`")))?,
    };
    let allow_path = match spec.config.get("allow-path").map(String::as_str) {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => {
            return Err(config(format!(
                "`allow-path` is true or false, got `{other}`"
            )));
        }
    };
    let stderr_lines = match spec.config.get("stderr-lines") {
        None => 20,
        Some(n) => n
            .parse::<usize>()
            .map_err(|_| config(format!("`stderr-lines` must be a number, got `{n}`")))?
            .min(1000),
    };
    if !allow_path && (command.contains('/') || command.starts_with('.')) {
        return Err(config(format!(
            "`command` names one of the job's artifacts (or, with allow-path = \"true\", a \
             program on PATH), not a path: `{command}`"
        )));
    }
    Ok(Box::new(ProcessOperator {
        command,
        args,
        framing,
        allow_path,
        stderr_lines,
    }))
}

/// See the module docs.
#[derive(Debug)]
struct ProcessOperator {
    command: String,
    args: Vec<String>,
    framing: Framing,
    allow_path: bool,
    stderr_lines: usize,
}

/// A subtask's directory of links to the job's artifacts, by name; removed with the run.
struct ArtifactView {
    dir: Option<PathBuf>,
    artifacts: BTreeMap<String, PathBuf>,
}

impl ArtifactView {
    fn create(
        context: &super::TaskContext,
        subtask: u32,
        attempt: u32,
    ) -> Result<Self, OperatorError> {
        let Some(parent) = &context.spill_dir else {
            return Ok(Self {
                dir: None,
                artifacts: context.artifacts.clone(),
            });
        };
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let unique = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = parent.join(format!(
            "process-{}-{subtask}-{attempt}-{unique}",
            std::process::id()
        ));
        let io_error = |source| OperatorError::Io {
            what: format!("{PROCESS}: cannot prepare the directory {}", dir.display()),
            source,
        };
        let mut private = std::fs::DirBuilder::new();
        std::os::unix::fs::DirBuilderExt::mode(private.recursive(true), 0o700);
        private.create(&dir).map_err(io_error)?;
        let mut view = Self {
            dir: Some(dir.clone()),
            artifacts: BTreeMap::new(),
        };
        for (name, path) in &context.artifacts {
            // Names are plain file names (checked at submission): no traversal.
            let link = dir.join(name);
            std::os::unix::fs::symlink(path, &link).map_err(io_error)?;
            view.artifacts.insert(name.clone(), link);
        }
        Ok(view)
    }
}

impl Drop for ArtifactView {
    fn drop(&mut self) {
        if let Some(dir) = &self.dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// The child, killed (its whole group) and reaped however the task ends.
struct ChildGuard {
    child: Child,
    reaped: Option<ExitStatus>,
}

impl ChildGuard {
    fn signal(&self, signal: libc::c_int) {
        if self.reaped.is_none() {
            // The child leads its own group (process_group(0)): its pid is the group's id.
            let group = self.child.id() as libc::pid_t;
            // SAFETY: killpg only sends a signal; a group that is gone makes it fail with ESRCH.
            unsafe {
                libc::killpg(group, signal);
            }
        }
    }

    fn try_reap(&mut self) -> Option<ExitStatus> {
        if self.reaped.is_none() {
            self.reaped = self.child.try_wait().ok().flatten();
        }
        self.reaped
    }

    /// SIGTERM, up to [`KILL_GRACE`] to go, then SIGKILL; waits through `io` so a simulation's
    /// clock and a dead runner are respected.
    fn terminate(&mut self, io: &mut dyn TaskIo) {
        self.signal(libc::SIGTERM);
        let step = Duration::from_millis(10);
        let mut waited = Duration::ZERO;
        while self.try_reap().is_none() && waited < KILL_GRACE {
            if io.sleep_ignoring_cancel(step).is_err() {
                break;
            }
            waited += step;
        }
        self.kill();
    }

    fn kill(&mut self) {
        if self.try_reap().is_none() {
            self.signal(libc::SIGKILL);
            self.reaped = self.child.wait().ok();
        }
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        self.kill();
        // What the child left running in its group (a background job holding its pipes) goes
        // with it. The group's id cannot name anyone else while a member lives.
        // SAFETY: killpg only sends a signal.
        unsafe {
            libc::killpg(self.child.id() as libc::pid_t, libc::SIGKILL);
        }
    }
}

impl ProcessOperator {
    /// The program to run and its arguments, artifacts resolved to their local copies.
    fn resolve(
        &self,
        artifacts: &BTreeMap<String, PathBuf>,
    ) -> Result<(PathBuf, Vec<String>), OperatorError> {
        let shipped = || {
            let names: Vec<&str> = artifacts.keys().map(String::as_str).collect();
            if names.is_empty() {
                "none".to_owned()
            } else {
                names.join(", ")
            }
        };
        let program = match artifacts.get(&self.command) {
            Some(path) => path.clone(),
            None if self.allow_path => PathBuf::from(&self.command),
            None => {
                return Err(OperatorError::Config {
                    operator: PROCESS.into(),
                    message: format!(
                        "`{}` is not one of the job's artifacts (it ships {}), and allow-path is \
                         off",
                        self.command,
                        shipped()
                    ),
                });
            }
        };
        let mut args = Vec::with_capacity(self.args.len());
        for arg in &self.args {
            let mut resolved = arg.clone();
            while let Some(start) = resolved.find("{artifact:") {
                let Some(end) = resolved[start..].find('}').map(|end| start + end) else {
                    break;
                };
                let name = &resolved[start + "{artifact:".len()..end];
                let path = artifacts.get(name).ok_or_else(|| OperatorError::Config {
                    operator: PROCESS.into(),
                    message: format!(
                        "`args` names artifact `{name}`, which the job does not ship (it ships {})",
                        shipped()
                    ),
                })?;
                resolved.replace_range(start..=end, &path.display().to_string());
            }
            args.push(resolved);
        }
        Ok((program, args))
    }

    fn failure(&self, how: String, stderr: &Mutex<VecDeque<String>>) -> OperatorError {
        let lines: Vec<String> = stderr
            .lock()
            .map(|l| l.iter().cloned().collect())
            .unwrap_or_default();
        let tail = if lines.is_empty() {
            "(its stderr was empty)".to_owned()
        } else {
            format!("last lines of its stderr:\n{}", lines.join("\n"))
        };
        OperatorError::Failed(format!("{PROCESS} `{}` {how}; {tail}", self.command))
    }
}

impl Operator for ProcessOperator {
    fn run(&mut self, io: &mut dyn TaskIo) -> Result<(), OperatorError> {
        let context = io.context();
        // The job's artifacts under their names, in a directory of this subtask's own: the
        // child's working directory, so a shipped script finds a shipped module beside it.
        let view = ArtifactView::create(&context, io.subtask(), io.attempt_number())?;
        let (program, args) = self.resolve(&view.artifacts)?;
        let mut command = Command::new(&program);
        command
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .env("FLINT_SUBTASK", io.subtask().to_string())
            .env("FLINT_PARALLELISM", io.parallelism().to_string())
            .env("FLINT_ATTEMPT", io.attempt_number().to_string())
            .env("FLINT_FRAMING", self.framing.name());
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        if let Some(dir) = &view.dir {
            command.current_dir(dir);
        }
        let mut child = command.spawn().map_err(|source| OperatorError::Io {
            what: format!("{PROCESS}: cannot start `{}`", program.display()),
            source,
        })?;
        let (stdin, stdout, stderr) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take());
        let mut guard = ChildGuard {
            child,
            reaped: None,
        };
        let (Some(stdin), Some(stdout), Some(stderr)) = (stdin, stdout, stderr) else {
            return Err(OperatorError::Failed(format!(
                "{PROCESS}: the child's pipes are missing"
            )));
        };
        let name = format!(
            "{} ({}/{})",
            context.vertex,
            io.subtask() + 1,
            io.parallelism()
        );
        let stderr_tail = Arc::new(Mutex::new(VecDeque::new()));
        let (stderr_closed, stderr_done) = sync_channel::<()>(1);
        spawn_stderr(
            stderr,
            name,
            self.stderr_lines,
            Arc::clone(&stderr_tail),
            stderr_closed,
        )?;
        // A failure quotes the last lines: wait (briefly: a grandchild may hold the pipe) for
        // the thread to read what the child wrote before it ended.
        let stderr_read = || {
            let _ = stderr_done.recv_timeout(Duration::from_secs(1));
        };
        let queue = Arc::new(StdinQueue::new(STDIN_LIMIT));
        let frames = StdinSender(Arc::clone(&queue));
        spawn_writer(stdin, queue)?;
        let (records, from_child) = sync_channel(BATCHES);
        spawn_reader(stdout, self.framing, records, Arc::clone(&frames.0))?;

        let outcome = self.pump(io, &frames.0, &from_child);
        drop(frames); // the child sees the end of its input
        if let Err(error) = outcome {
            if matches!(error, OperatorError::Cancelled) || io.is_cancelled() {
                guard.terminate(io);
                return Err(OperatorError::Cancelled);
            }
            guard.kill();
            stderr_read();
            return Err(match error {
                OperatorError::Failed(why) => self.failure(why, &stderr_tail),
                other => other,
            });
        }
        // Its remaining output, then how it ended.
        loop {
            if io.is_cancelled() {
                guard.terminate(io);
                return Err(OperatorError::Cancelled);
            }
            match from_child.recv_timeout(EXIT_POLL) {
                Ok(Ok(records)) => emit_all(io, records)?,
                Ok(Err(error)) => {
                    guard.kill();
                    stderr_read();
                    return Err(self.failure(error, &stderr_tail));
                }
                Err(RecvTimeoutError::Timeout) => {
                    if guard.try_reap().is_some() {
                        // It exited, yet its stdout is open: something it left in its group
                        // holds it. That goes now, and the pipe ends.
                        // SAFETY: killpg only sends a signal.
                        unsafe {
                            libc::killpg(guard.child.id() as libc::pid_t, libc::SIGKILL);
                        }
                    }
                }
                Err(RecvTimeoutError::Disconnected) => break,
            }
        }
        let status = loop {
            if let Some(status) = guard.try_reap() {
                break status;
            }
            if io.is_cancelled() {
                guard.terminate(io);
                return Err(OperatorError::Cancelled);
            }
            io.sleep(EXIT_POLL)?;
        };
        if status.success() {
            return Ok(());
        }
        let how = match (
            status.code(),
            std::os::unix::process::ExitStatusExt::signal(&status),
        ) {
            (Some(code), _) => format!("exited with code {code}"),
            (None, Some(signal)) => format!("was killed by signal {signal}"),
            (None, None) => format!("ended: {status}"),
        };
        stderr_read();
        Err(self.failure(how, &stderr_tail))
    }
}

impl ProcessOperator {
    /// Moves records until the input ends: each input record to the child's stdin queue, each
    /// record the child wrote downstream. Never blocks on a full stdin queue without reading
    /// the child's output (that would deadlock against a child that writes before it reads).
    fn pump(
        &self,
        io: &mut dyn TaskIo,
        frames: &StdinQueue,
        from_child: &Receiver<Result<Vec<Record>, String>>,
    ) -> Result<(), OperatorError> {
        let emit_ready = |io: &mut dyn TaskIo| -> Result<(), OperatorError> {
            loop {
                match from_child.try_recv() {
                    Ok(Ok(records)) => emit_all(io, records)?,
                    Ok(Err(error)) => return Err(OperatorError::Failed(error)),
                    Err(_) => return Ok(()),
                }
            }
        };
        let mut frame = Vec::new();
        while let Some((input, record)) = io.next_with_input()? {
            frame.clear();
            self.framing.encode(input, &record, &mut frame);
            loop {
                match frames.push(&frame) {
                    Push::Queued => break,
                    Push::Full => {
                        if io.is_cancelled() {
                            return Err(OperatorError::Cancelled);
                        }
                        // Looked at before the output is taken: what comes after ends the wait.
                        let seen = frames.output_seen();
                        emit_ready(io)?;
                        io.block_in_place(&mut || frames.wait_for_room(seen, CANCEL_CHECK));
                    }
                    // The writer is gone: the child closed its stdin (or exited). What it says
                    // about it comes with its exit.
                    Push::Gone => return Ok(()),
                }
            }
            emit_ready(io)?;
        }
        Ok(())
    }
}

#[allow(clippy::disallowed_methods)] // a pipe's own thread, not a task's: it only moves bytes
fn spawn_named(name: &str, body: impl FnOnce() + Send + 'static) -> Result<(), OperatorError> {
    std::thread::Builder::new()
        .name(format!("flint-process-{name}"))
        .spawn(body)
        .map(drop)
        .map_err(|source| OperatorError::Io {
            what: format!("{PROCESS}: cannot start its {name} thread"),
            source,
        })
}

fn emit_all(io: &mut dyn TaskIo, records: Vec<Record>) -> Result<(), OperatorError> {
    records.into_iter().try_for_each(|record| io.emit(record))
}

fn spawn_writer(
    mut stdin: std::process::ChildStdin,
    queue: Arc<StdinQueue>,
) -> Result<(), OperatorError> {
    spawn_named("stdin", move || {
        let mut bytes = Vec::new();
        while queue.take(&mut bytes) {
            if stdin.write_all(&bytes).is_err() {
                queue.writer_gone(); // the child closed its stdin
                return;
            }
            bytes.clear();
        }
        // Dropping stdin closes it: the child sees the end of its input.
    })
}

fn spawn_reader(
    stdout: std::process::ChildStdout,
    framing: Framing,
    records: SyncSender<Result<Vec<Record>, String>>,
    queue: Arc<StdinQueue>,
) -> Result<(), OperatorError> {
    /// Tells the task waiting for room that the output ended, however the thread ends.
    struct Ended(Arc<StdinQueue>);
    impl Drop for Ended {
        fn drop(&mut self) {
            self.0.output_arrived();
        }
    }
    spawn_named("stdout", move || {
        let ended = Ended(queue);
        let mut stdout = BufReader::with_capacity(64 * 1024, stdout);
        let mut batch = Vec::with_capacity(BATCH);
        loop {
            // `Ok(false)`: the output ended; `Err`: a malformed frame, sent after the batch.
            let more = match framing.decode(&mut stdout) {
                Ok(Some(record)) => {
                    batch.push(record);
                    // Handed over when full, or when the next read may wait for the child:
                    // batches under load, no record held back.
                    if batch.len() < BATCH && !stdout.buffer().is_empty() {
                        continue;
                    }
                    Ok(true)
                }
                Ok(None) => Ok(false),
                Err(error) => Err(crate::base::error_chain::ErrorChain(&error).to_string()),
            };
            if !batch.is_empty() {
                let batch = std::mem::replace(&mut batch, Vec::with_capacity(BATCH));
                if records.send(Ok(batch)).is_err() {
                    return;
                }
                ended.0.output_arrived();
            }
            match more {
                Ok(true) => {}
                Ok(false) => return,
                Err(error) => {
                    let _ = records.send(Err(error));
                    return; // `ended` wakes the task for it
                }
            }
        }
    })
}

fn spawn_stderr(
    stderr: std::process::ChildStderr,
    name: String,
    keep: usize,
    tail: Arc<Mutex<VecDeque<String>>>,
    closed: SyncSender<()>,
) -> Result<(), OperatorError> {
    spawn_named("stderr", move || {
        let _closed = closed; // dropped (and so signalled) when the pipe ends
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { return };
            log::info!("{name} stderr: {line}");
            if let Ok(mut tail) = tail.lock() {
                if tail.len() == keep.max(1) {
                    tail.pop_front();
                }
                tail.push_back(line);
            }
        }
    })
}

#[cfg(test)]
mod tests;
