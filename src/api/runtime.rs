//! How a program's operators run inside a task: records pushed by value from operator to
//! operator of a chain (Flink's `OperatorChain`), serialized once where they leave the task and
//! decoded only by the consumer.
//!
//! ```text
//!  network input i ── Feed<T> (decodes T) ─▶ Push<T> of the chain's head ─▶ … ─▶ Push<U>
//!                                                                              │
//!      a source: RunSource ─▶ Push<T> ─▶ …                  fan-out ◀──────────┘
//!                                                  chained Push<U>   NetOut<U> (encodes, routes)
//! ```
//!
//! Everything here is erased once, at assembly: a node's instance receives its downstream
//! pushes as `Box<dyn Any>` and downcasts them to the `Box<dyn Push<T>>` the plan's types
//! promise; from then on records move through plain virtual calls, never boxed per record.

use std::any::Any;
use std::sync::Arc;

use crate::base::codec;
use crate::exchange::buffer::BufferReader;
use crate::messages::buffer::Buffer;
use crate::operators::{OperatorError, TaskOutputs};

use super::data::Data;
use super::keys::{KeyHash, subtask_of_key_group};

/// How often (in records) a loop that may run long looks at the task's cancellation.
pub(crate) const CANCEL_CHECK: u64 = 4096;

/// What a push needs besides the record: where records leave the task, a scratch buffer for
/// encoding, and what the task sends back.
pub(crate) struct Ctx<'a> {
    /// The task's outputs.
    pub out: &'a mut dyn TaskOutputs,
    /// Encoding scratch, reused record after record.
    pub scratch: Vec<u8>,
    /// What the task sends back to the JobManager with FINISHED (a `collect()` sink's records).
    pub result: Option<Vec<u8>>,
    /// Records pushed so far by sources and feeds, for cancellation checks.
    pub records: u64,
}

impl Ctx<'_> {
    /// Counts one record and, every [`CANCEL_CHECK`] records, fails a cancelled task.
    pub fn tick(&mut self) -> Result<(), OperatorError> {
        self.records += 1;
        if self.records.is_multiple_of(CANCEL_CHECK) && self.out.is_cancelled() {
            return Err(OperatorError::Cancelled);
        }
        Ok(())
    }
}

/// One input of an operator: records pushed by value, then its end, once.
pub(crate) trait Push<T> {
    /// Handles one record.
    fn push(&mut self, record: T, cx: &mut Ctx<'_>) -> Result<(), OperatorError>;
    /// No record follows on this input.
    fn end(&mut self, cx: &mut Ctx<'_>) -> Result<(), OperatorError>;
    /// Wants no more records: what would come is dropped anyway (a `first_n` that has its n).
    /// A task whose every input is done stops reading and releases what it left unread, so
    /// its producers need not wait for it.
    fn is_done(&self) -> bool {
        false
    }
}

/// A boxed push, as chains hold them.
pub(crate) type BoxPush<T> = Box<dyn Push<T>>;

/// A node's downstream as the assembly hands it over: one `Box<dyn Any>` holding a
/// [`BoxPush<T>`] per output edge.
pub(crate) type Outputs = Vec<Box<dyn Any>>;

/// Wraps a push for the assembly.
pub(crate) fn erase<T: 'static>(push: BoxPush<T>) -> Box<dyn Any> {
    Box::new(push)
}

/// Unwraps a push the assembly handed over. Panics only if the plan's types disagree, which
/// its typed construction rules out.
pub(crate) fn unerase<T: 'static>(push: Box<dyn Any>) -> BoxPush<T> {
    match push.downcast::<BoxPush<T>>() {
        Ok(push) => *push,
        Err(_) => panic!(
            "a plan connected an input of another type to a push of {}",
            std::any::type_name::<T>()
        ),
    }
}

/// A node's one downstream push over all its outputs: none, one, or a fan-out.
pub(crate) fn downstream<T: Data>(outputs: Outputs) -> BoxPush<T> {
    let mut pushes: Vec<BoxPush<T>> = outputs.into_iter().map(unerase).collect();
    match pushes.len() {
        0 => Box::new(Discard),
        1 => pushes.pop().unwrap_or_else(|| Box::new(Discard)),
        _ => Box::new(Fanout { pushes }),
    }
}

/// Drops what it is pushed (a node nobody consumes).
struct Discard;

impl<T> Push<T> for Discard {
    fn push(&mut self, _: T, _: &mut Ctx<'_>) -> Result<(), OperatorError> {
        Ok(())
    }

    fn end(&mut self, _: &mut Ctx<'_>) -> Result<(), OperatorError> {
        Ok(())
    }
}

/// One record to several consumers. Records need not be `Clone`: a copy is the record encoded
/// once and decoded once per further consumer (rare: a dataset used twice); the last consumer
/// gets the original.
struct Fanout<T> {
    pushes: Vec<BoxPush<T>>,
}

impl<T: Data> Push<T> for Fanout<T> {
    fn push(&mut self, record: T, cx: &mut Ctx<'_>) -> Result<(), OperatorError> {
        let mut encoded = std::mem::take(&mut cx.scratch);
        encoded.clear();
        let copied = codec::encode_into(&record, &mut encoded)
            .map_err(|e| OperatorError::Failed(format!("cannot copy a record: {e}")));
        let result = copied.and_then(|_| {
            let last = self.pushes.len() - 1;
            for push in &mut self.pushes[..last] {
                let copy: T = codec::decode(&encoded)
                    .map_err(|e| OperatorError::Failed(format!("cannot copy a record: {e}")))?;
                push.push(copy, cx)?;
            }
            Ok(())
        });
        cx.scratch = encoded;
        result?;
        let last = self.pushes.len() - 1;
        self.pushes[last].push(record, cx)
    }

    fn end(&mut self, cx: &mut Ctx<'_>) -> Result<(), OperatorError> {
        for push in &mut self.pushes {
            push.end(cx)?;
        }
        Ok(())
    }
}

/// How an edge chooses a consumer subtask for a record.
pub(crate) enum Route<T> {
    /// Subtask i to subtask i (one subpartition).
    Forward,
    /// By the key's group (Flink's key groups): the same key always to the same consumer.
    Hash(KeyHash<T>),
    /// Round robin, starting at the producer's own index.
    Rebalance,
    /// To every consumer.
    Broadcast,
    /// The user's function of the record and the consumer count.
    Custom(Arc<dyn Fn(&T, usize) -> usize + Send + Sync>),
    /// Everything to consumer 0 (a final, single-subtask step).
    Gather,
}

impl<T> Clone for Route<T> {
    fn clone(&self) -> Self {
        match self {
            Self::Forward => Self::Forward,
            Self::Hash(key) => Self::Hash(key.clone()),
            Self::Rebalance => Self::Rebalance,
            Self::Broadcast => Self::Broadcast,
            Self::Custom(f) => Self::Custom(f.clone()),
            Self::Gather => Self::Gather,
        }
    }
}

/// Writes records to one output of the task: each encoded once, routed, appended to its
/// subpartition's buffer.
pub(crate) struct NetOut<T> {
    pub output: usize,
    pub subpartitions: usize,
    pub route: Route<T>,
    pub max_parallelism: u32,
    /// The next subpartition of a round robin.
    pub next: usize,
    pub key_scratch: Vec<u8>,
}

impl<T: Data> Push<T> for NetOut<T> {
    fn push(&mut self, record: T, cx: &mut Ctx<'_>) -> Result<(), OperatorError> {
        let n = self.subpartitions.max(1);
        let target = match &self.route {
            Route::Forward | Route::Gather => 0,
            Route::Hash(key) => {
                let hash = key.hash(&record, &mut self.key_scratch)?;
                subtask_of_key_group(hash, self.max_parallelism, n)
            }
            Route::Rebalance => {
                let target = self.next % n;
                self.next = self.next.wrapping_add(1);
                target
            }
            Route::Broadcast => usize::MAX,
            Route::Custom(f) => {
                let target = f(&record, n);
                if target >= n {
                    return Err(OperatorError::Failed(format!(
                        "a custom partitioner chose partition {target} of {n}"
                    )));
                }
                target
            }
        };
        let Ctx { out, scratch, .. } = cx;
        scratch.clear();
        codec::encode_into(&record, scratch).map_err(|e| {
            OperatorError::Failed(format!(
                "cannot serialize a record of {}: {e}",
                std::any::type_name::<T>()
            ))
        })?;
        if target == usize::MAX {
            for sub in 0..n {
                out.write(self.output, sub, scratch)?;
            }
            Ok(())
        } else {
            out.write(self.output, target, scratch)
        }
    }

    fn end(&mut self, _: &mut Ctx<'_>) -> Result<(), OperatorError> {
        Ok(())
    }
}

/// Reads one input of the task: buffers decoded as the records its producer wrote, pushed
/// into the chain.
pub(crate) trait Feed {
    /// Decodes and pushes a buffer's records.
    fn feed(&mut self, buffer: Buffer, cx: &mut Ctx<'_>) -> Result<(), OperatorError>;
    /// The input ended.
    fn end(&mut self, cx: &mut Ctx<'_>) -> Result<(), OperatorError>;
    /// Its push wants no more records ([`Push::is_done`]).
    fn is_done(&self) -> bool;
}

/// A [`Feed`] of `T` records.
pub(crate) struct TypedFeed<T> {
    pub port: BoxPush<T>,
    /// Names the vertex, subtask and input in decoding errors.
    pub describe: String,
}

impl<T: Data> Feed for TypedFeed<T> {
    fn feed(&mut self, buffer: Buffer, cx: &mut Ctx<'_>) -> Result<(), OperatorError> {
        let mut reader: BufferReader = buffer.reader();
        loop {
            let record = reader.next_value::<T>().map_err(|error| {
                OperatorError::Failed(format!(
                    "{}: a record cannot be decoded as {}: {}",
                    self.describe,
                    std::any::type_name::<T>(),
                    crate::base::error_chain::ErrorChain(&error)
                ))
            })?;
            let Some(record) = record else {
                return Ok(());
            };
            cx.tick()?;
            self.port.push(record, cx)?;
            if self.port.is_done() {
                return Ok(());
            }
        }
    }

    fn end(&mut self, cx: &mut Ctx<'_>) -> Result<(), OperatorError> {
        self.port.end(cx)
    }

    fn is_done(&self) -> bool {
        self.port.is_done()
    }
}

/// A source's run: it pushes its records into its downstream and ends it.
pub(crate) trait RunSource {
    /// Runs the source to its end.
    fn run(&mut self, cx: &mut Ctx<'_>) -> Result<(), OperatorError>;
}

/// A source of any iterator of `T`.
pub(crate) struct IterSource<T> {
    pub records: Box<dyn Iterator<Item = Result<T, OperatorError>>>,
    pub downstream: BoxPush<T>,
}

impl<T: Data> RunSource for IterSource<T> {
    fn run(&mut self, cx: &mut Ctx<'_>) -> Result<(), OperatorError> {
        for record in &mut self.records {
            cx.tick()?;
            self.downstream.push(record?, cx)?;
        }
        self.downstream.end(cx)
    }
}
