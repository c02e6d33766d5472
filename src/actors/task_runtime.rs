//! Running one task off the TaskManager's thread: the operator, its inputs and its outputs.
//!
//! A task runs on a thread from the node's [`TaskRunner`](crate::env::TaskRunner), never on an
//! actor's, so a busy TaskManager still answers heartbeats. Outputs are written in batches into
//! the TaskManager's [`PartitionStore`], routed per edge (forward: the one subpartition;
//! all-to-all: by the record key's hash). Inputs are read channel by channel: a partition on this
//! TaskManager straight from the store, one elsewhere by `FetchSubpartition` to the producer's
//! TaskManager (a long poll), so the transport can carry the same exchange between processes.
//! Producers never wait for consumers (partitions spill to disk instead), so reading channels in
//! order cannot deadlock. A panic in operator code is caught and reported as a failed task.
//!
//! Waiting for data has no time limit: a producer may stay silent as long as it runs. The
//! producer's TaskManager holds a remote fetch at most [`FETCH_HOLD`] (well inside the
//! transport's ask timeout) and then answers `Idle`, and the consumer asks again. A consumer
//! fails only when its producer is really gone, and says which TaskManager and why: the data
//! connection broke and [`RECONNECT_ATTEMPTS`] asks in a row could not get through, or the
//! partition was released (or failed) there. A lost TaskManager is also declared by the
//! JobManager, whose failover cancels the consumer.
//!
//! Every wait (a remote fetch, a local long poll, the pause while a producer is being deployed,
//! [`TaskIo::sleep`]) goes through the task's [`TaskBlocker`], never the thread directly, so the
//! simulation can run tasks in virtual time; a blocker whose runner is gone cancels the task.

use std::collections::{BTreeMap, VecDeque};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::env::{TaskBlocker, fnv1a};
use crate::exchange::partition::{Fetch, PartitionStore};
use crate::job::graph::DistributionPattern;
use crate::job::states::ExecutionState;
use crate::messages::ActorAddress;
use crate::messages::deployment::{OutputPartition, TaskDeploymentDescriptor};
use crate::messages::task_manager::{FetchResponse, FetchSubpartition, TaskManagerGateway};
use crate::operators::registry::OperatorSpec;
use crate::operators::{OperatorError, OperatorRegistry, Record, TaskIo};
use crate::task_blocking::block_on;

/// Records per output batch.
pub const BATCH_RECORDS: usize = 1024;

/// Bytes a fetch may return at most.
pub const FETCH_BYTES: usize = 1 << 20;

/// How long a producer's TaskManager holds a remote fetch that finds nothing new before it
/// answers [`FetchResponse::Idle`]: far inside the transport's ask timeout, so a silent channel
/// never looks like a dead peer.
pub const FETCH_HOLD: Duration = Duration::from_secs(2);

const _: () = assert!(FETCH_HOLD.as_millis() * 4 <= crate::node::ASK_TIMEOUT.as_millis());

/// Asks in a row to a producer's TaskManager that may fail (each one re-dials the peer with the
/// transport's own bounded backoff) before the consumer takes the data connection as broken for
/// good.
pub const RECONNECT_ATTEMPTS: u32 = 3;

/// The pause before the first re-ask after a failed one; it doubles after each further failure.
const RECONNECT_BACKOFF: Duration = Duration::from_millis(100);

/// How long a consumer keeps asking for a partition its producer has not created yet
/// (deployment is concurrent: Flink's `taskmanager.network.request-backoff.max`, 10 s).
pub const PARTITION_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// How a task ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskOutcome {
    /// FINISHED, CANCELED or FAILED.
    pub state: ExecutionState,
    /// Why, for a failed task.
    pub error: Option<String>,
}

/// Everything a task thread needs.
pub struct TaskEnvironment {
    /// What to run.
    pub descriptor: TaskDeploymentDescriptor,
    /// Where outputs go and local inputs come from.
    pub partitions: Arc<PartitionStore>,
    /// The operators this TaskManager knows.
    pub registry: OperatorRegistry,
    /// The TaskManagers holding this task's remote inputs, resolved by the TaskManager actor on
    /// its own arbiter (a task thread cannot start the proxy actors a remote peer needs).
    pub peers: BTreeMap<ActorAddress, TaskManagerGateway>,
    /// This TaskManager's address (a producer here is read locally).
    pub local_address: ActorAddress,
    /// Set by `CancelTask`.
    pub cancelled: Arc<AtomicBool>,
}

/// Runs the task to its end, waiting only through `blocker`. Never panics: operator panics
/// become a FAILED outcome; a blocker whose runner is gone, a CANCELED one.
pub fn run_task(env: TaskEnvironment, blocker: &dyn TaskBlocker) -> TaskOutcome {
    let outputs = env.descriptor.outputs.clone();
    let partitions = env.partitions.clone();
    let result = catch_unwind(AssertUnwindSafe(|| run(env, blocker)));
    let outcome = match result {
        Ok(Ok(())) => TaskOutcome {
            state: ExecutionState::Finished,
            error: None,
        },
        Ok(Err(OperatorError::Cancelled)) => TaskOutcome {
            state: ExecutionState::Canceled,
            error: None,
        },
        Ok(Err(error)) => TaskOutcome {
            state: ExecutionState::Failed,
            error: Some(error.to_string()),
        },
        Err(panic) => TaskOutcome {
            state: ExecutionState::Failed,
            error: Some(format!("task panicked: {}", panic_message(panic.as_ref()))),
        },
    };
    if outcome.state != ExecutionState::Finished {
        let reason = outcome
            .error
            .clone()
            .unwrap_or_else(|| "producer cancelled".to_owned());
        for output in &outputs {
            // A partition never created (the task failed first) has nothing to fail.
            let _ = partitions.fail(output.partition, reason.clone());
        }
    }
    outcome
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".to_owned())
}

/// Creates the task's output partitions; the TaskManager does it when it accepts the task, so
/// consumers deployed beside the producer find them as early as possible.
pub fn create_outputs(
    partitions: &PartitionStore,
    descriptor: &TaskDeploymentDescriptor,
) -> Result<(), crate::exchange::partition::PartitionError> {
    for output in &descriptor.outputs {
        partitions.create_with(output.partition, output.subpartitions, output.retained)?;
    }
    Ok(())
}

fn run(env: TaskEnvironment, blocker: &dyn TaskBlocker) -> Result<(), OperatorError> {
    let d = &env.descriptor;
    let spec = OperatorSpec {
        name: &d.operator,
        config: &d.config,
        subtask: d.subtask,
        parallelism: d.parallelism,
    };
    let mut operator = env.registry.create(&spec)?;
    let mut io = Io::new(&env, blocker);
    operator.run(&mut io)?;
    io.flush()?;
    for output in &env.descriptor.outputs {
        env.partitions
            .finish(output.partition)
            .map_err(|e| OperatorError::Failed(e.to_string()))?;
    }
    Ok(())
}

/// One input channel: a producer partition's subpartition.
struct Channel {
    partition: crate::messages::ResultPartitionId,
    subpartition: u32,
    task_manager: ActorAddress,
    next_batch: u64,
    /// Time spent waiting for the partition to appear, and the next pause.
    waited: Duration,
    backoff: Duration,
    /// The producer's TaskManager has answered for this partition once: from then on an unknown
    /// partition was released, not yet to be deployed.
    seen: bool,
    /// Asks that failed in a row (the data connection broke, the peer was unreachable).
    failures: u32,
}

struct Io<'a> {
    env: &'a TaskEnvironment,
    blocker: &'a dyn TaskBlocker,
    channels: VecDeque<Channel>,
    pending: VecDeque<Record>,
    buffers: Vec<Vec<Vec<Record>>>,
}

impl<'a> Io<'a> {
    fn new(env: &'a TaskEnvironment, blocker: &'a dyn TaskBlocker) -> Self {
        let channels = env
            .descriptor
            .inputs
            .iter()
            .flat_map(|gate| {
                gate.producers.iter().map(|p| Channel {
                    partition: p.partition,
                    subpartition: gate.subpartition,
                    task_manager: p.task_manager.clone(),
                    next_batch: 0,
                    waited: Duration::ZERO,
                    backoff: Duration::from_millis(1),
                    seen: false,
                    failures: 0,
                })
            })
            .collect();
        let buffers = env
            .descriptor
            .outputs
            .iter()
            .map(|o| vec![Vec::new(); o.subpartitions as usize])
            .collect();
        Self {
            env,
            blocker,
            channels,
            pending: VecDeque::new(),
            buffers,
        }
    }

    fn check_cancelled(&self) -> Result<(), OperatorError> {
        if self.env.cancelled.load(Ordering::Relaxed) {
            Err(OperatorError::Cancelled)
        } else {
            Ok(())
        }
    }

    /// Reads the next batches of the first unfinished channel into `pending`.
    fn fill(&mut self) -> Result<bool, OperatorError> {
        while let Some(channel) = self.channels.front_mut() {
            if self.env.cancelled.load(Ordering::Relaxed) {
                return Err(OperatorError::Cancelled);
            }
            let response = if channel.task_manager == self.env.local_address {
                fetch_local(
                    &self.env.partitions,
                    channel,
                    &self.env.cancelled,
                    self.blocker,
                )?
            } else {
                let gateway = self.env.peers.get(&channel.task_manager).ok_or_else(|| {
                    OperatorError::InputUnavailable(format!(
                        "cannot reach TaskManager {} holding {}: no gateway to it",
                        channel.task_manager, channel.partition
                    ))
                })?;
                let request = gateway.fetch_subpartition.send(FetchSubpartition {
                    partition: channel.partition,
                    subpartition: channel.subpartition,
                    from_batch: channel.next_batch,
                });
                match block_on(self.blocker, request).ok_or(OperatorError::Cancelled)? {
                    Ok(response) => {
                        channel.failures = 0;
                        response
                    }
                    Err(_) => {
                        // The transport has logged the cause. The ask is safe to repeat: a
                        // pipelined batch lost with the broken connection is refused by the
                        // producer's TaskManager, never read as empty.
                        channel.failures += 1;
                        if channel.failures >= RECONNECT_ATTEMPTS {
                            return Err(OperatorError::InputUnavailable(format!(
                                "TaskManager {} holding {} is gone: the data connection broke \
                                 and could not be re-established ({} attempts; connection \
                                 reset or TaskManager unreachable)",
                                channel.task_manager, channel.partition, channel.failures
                            )));
                        }
                        let pause = RECONNECT_BACKOFF * 2u32.pow(channel.failures - 1);
                        if !self.blocker.sleep(pause) {
                            return Err(OperatorError::Cancelled);
                        }
                        continue;
                    }
                }
            };
            if !matches!(response, FetchResponse::Unknown) {
                channel.seen = true;
            }
            match response {
                FetchResponse::Data {
                    batches,
                    next_batch,
                    finished,
                } => {
                    channel.next_batch = next_batch;
                    if finished {
                        self.channels.pop_front();
                    }
                    let before = self.pending.len();
                    self.pending.extend(batches.into_iter().flatten());
                    if self.pending.len() > before {
                        return Ok(true);
                    }
                }
                // The producer is silent: ask again (the loop checks for cancellation first).
                FetchResponse::Idle => {}
                FetchResponse::Failed(reason) => {
                    return Err(OperatorError::InputUnavailable(format!(
                        "{} on TaskManager {} failed: {reason}",
                        channel.partition, channel.task_manager
                    )));
                }
                FetchResponse::Unknown if channel.seen => {
                    return Err(OperatorError::InputUnavailable(format!(
                        "{} on TaskManager {} was released",
                        channel.partition, channel.task_manager
                    )));
                }
                FetchResponse::Unknown if channel.waited < PARTITION_REQUEST_TIMEOUT => {
                    // Its producer is being deployed right now: ask again shortly.
                    if !self.blocker.sleep(channel.backoff) {
                        return Err(OperatorError::Cancelled);
                    }
                    channel.waited += channel.backoff;
                    channel.backoff = (channel.backoff * 2).min(Duration::from_millis(100));
                }
                FetchResponse::Unknown => {
                    return Err(OperatorError::InputUnavailable(format!(
                        "{} is not on TaskManager {} (waited {:?})",
                        channel.partition, channel.task_manager, channel.waited
                    )));
                }
            }
        }
        Ok(false)
    }

    /// The subpartition a record goes to: a key always to the same consumer (FNV-1a, stable).
    fn route(output: &OutputPartition, record: &Record) -> usize {
        match output.pattern {
            DistributionPattern::Forward => 0,
            DistributionPattern::AllToAll => {
                (fnv1a(record.key.as_bytes()) % u64::from(output.subpartitions.max(1))) as usize
            }
        }
    }

    /// Buffers a record for one output; a full batch goes to the partition.
    fn push(
        &mut self,
        index: usize,
        output: &OutputPartition,
        record: Record,
    ) -> Result<(), OperatorError> {
        let sub = Self::route(output, &record);
        let buffer = &mut self.buffers[index][sub];
        buffer.push(record);
        if buffer.len() >= BATCH_RECORDS {
            let batch = std::mem::take(buffer);
            self.env
                .partitions
                .append(output.partition, sub as u32, batch)
                .map_err(|e| OperatorError::Failed(e.to_string()))?;
            self.check_cancelled()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), OperatorError> {
        for (index, output) in self.env.descriptor.outputs.iter().enumerate() {
            for (sub, buffer) in self.buffers[index].iter_mut().enumerate() {
                if !buffer.is_empty() {
                    let batch = std::mem::take(buffer);
                    self.env
                        .partitions
                        .append(output.partition, sub as u32, batch)
                        .map_err(|e| OperatorError::Failed(e.to_string()))?;
                }
            }
        }
        Ok(())
    }
}

impl TaskIo for Io<'_> {
    fn subtask(&self) -> u32 {
        self.env.descriptor.subtask
    }

    fn parallelism(&self) -> u32 {
        self.env.descriptor.parallelism
    }

    fn attempt_number(&self) -> u32 {
        self.env.descriptor.attempt_number
    }

    fn next(&mut self) -> Result<Option<Record>, OperatorError> {
        if let Some(record) = self.pending.pop_front() {
            return Ok(Some(record));
        }
        self.check_cancelled()?;
        if self.fill()? {
            Ok(self.pending.pop_front())
        } else {
            Ok(None)
        }
    }

    fn emit(&mut self, record: Record) -> Result<(), OperatorError> {
        let env = self.env;
        let Some((last, others)) = env.descriptor.outputs.split_last() else {
            return Ok(()); // a sink: nothing goes downstream
        };
        for (index, output) in others.iter().enumerate() {
            self.push(index, output, record.clone())?;
        }
        self.push(others.len(), last, record)
    }

    fn is_cancelled(&self) -> bool {
        self.env.cancelled.load(Ordering::Relaxed)
    }

    fn sleep(&mut self, duration: Duration) -> Result<(), OperatorError> {
        // In steps, so a cancellation cuts it short.
        let step = Duration::from_millis(10);
        let mut left = duration;
        while !left.is_zero() {
            self.check_cancelled()?;
            let now = left.min(step);
            if !self.blocker.sleep(now) {
                return Err(OperatorError::Cancelled);
            }
            left -= now;
        }
        self.check_cancelled()
    }
}

fn fetch_local(
    store: &PartitionStore,
    channel: &Channel,
    cancelled: &AtomicBool,
    blocker: &dyn TaskBlocker,
) -> Result<FetchResponse, OperatorError> {
    loop {
        match answer(store.fetch(
            channel.partition,
            channel.subpartition,
            channel.next_batch,
            FETCH_BYTES,
        )) {
            Ok(response) => return Ok(response),
            Err(wake) => {
                // Woken by the producer's next append, finish or failure (a dropped sender
                // wakes it too: the next fetch tells which).
                if block_on(blocker, wake).is_none() || cancelled.load(Ordering::Relaxed) {
                    return Err(OperatorError::Cancelled);
                }
            }
        }
    }
}

/// Serves a fetch for another TaskManager's consumer: at once if data is there, else when the
/// producer appends, finishes or fails, or with [`FetchResponse::Idle`] after [`FETCH_HOLD`].
pub async fn serve_fetch(store: Arc<PartitionStore>, request: FetchSubpartition) -> FetchResponse {
    let hold = tokio::time::sleep(FETCH_HOLD);
    tokio::pin!(hold);
    loop {
        match answer(store.fetch(
            request.partition,
            request.subpartition,
            request.from_batch,
            FETCH_BYTES,
        )) {
            Ok(response) => return response,
            Err(wake) => {
                tokio::select! {
                    biased;
                    // Woken, or the partition released: the next fetch tells which.
                    _ = wake => {}
                    () = &mut hold => return FetchResponse::Idle,
                }
            }
        }
    }
}

/// A fetch's answer, or the signal to wait on when there is nothing new yet.
fn answer(fetch: Fetch) -> Result<FetchResponse, tokio::sync::oneshot::Receiver<()>> {
    match fetch {
        Fetch::Ready {
            batches,
            next_batch,
            finished,
        } => Ok(FetchResponse::Data {
            batches,
            next_batch,
            finished,
        }),
        Fetch::Pending(wake) => Err(wake),
        Fetch::Failed(reason) => Ok(FetchResponse::Failed(reason)),
        Fetch::Unknown => Ok(FetchResponse::Unknown),
    }
}

#[cfg(test)]
mod tests;
