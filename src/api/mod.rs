//! The dataflow API: typed programs in Rust (Flink's DataSet API in Rust idioms).
//!
//! A program declares sources, transformations and sinks on an [`Env`], then runs them with
//! [`Env::execute`]. Records are any serde type ([`Data`]), keys any hashable, ordered one
//! ([`Key`]); user functions are ordinary closures.
//!
//! ```no_run
//! use flint::api::{Env, ProgramError};
//!
//! fn word_count(env: &Env) -> Result<(), ProgramError> {
//!     let counts = env
//!         .read_text_file("book.txt")
//!         .flat_map(|line: String| {
//!             line.split_whitespace()
//!                 .map(|word| (word.to_lowercase(), 1u64))
//!                 .collect::<Vec<_>>()
//!         })
//!         .reduce_by_key(|a, b| a + b)
//!         .collect();
//!     let result = env.execute("word count")?;
//!     for (word, count) in result.get(&counts)? {
//!         println!("{word}\t{count}");
//!     }
//!     Ok(())
//! }
//! ```
//!
//! How it runs: the plan's operators are chained into tasks (`translate`: forward edges of
//! equal parallelism pass records by value, with no serialization), the tasks become a
//! `JobGraph` whose vertices name the program's operator identity ([`program`]), and every
//! TaskManager rebuilds the plan from the same program code to run its tasks (`task`).
//! Records leave a task serialized once through [`crate::base::codec`] and are decoded only by
//! their consumer; keyed exchanges route by key groups ([`keys`]). Sorts, groupings and joins
//! keep within the task's managed memory and spill past it (`keyed`).

// User functions are stored as `Arc<dyn Fn(..) + Send + Sync>` of the record types: spelled out
// where they are held, as the signatures users write.
#![allow(clippy::type_complexity)]

mod combine;
pub mod data;
pub mod dataset;
pub mod env;
mod keyed;
pub mod keys;
mod ops;
pub(crate) mod plan;
pub mod program;
mod range;
pub(crate) mod runtime;
mod sinks;
mod sources;
mod task;
pub(crate) mod translate;

pub use crate::operators::types::{Date, Decimal};
pub use data::{Data, Key, OrderedF64};
pub use dataset::{Collected, DEFAULT_COLLECT_BOUND, DataSet, Join, KeyedDataSet, Order};
pub use env::{Env, ExecutedJob, Executor, JobResult, ProgramError};
pub use program::{Program, ProgramFn, Programs, build_id};
pub(crate) use sinks::decode_collected;
