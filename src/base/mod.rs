//! The base: what every layer above may use, naming nothing above it — the codec (the one
//! place values become bytes), ids and actor addresses, the node's seeded RNG, the project's
//! fixed hashes, the wall clock seam, backoff, a one-shot latch, the executor seam, and the
//! one-line error chain.

pub mod address;
pub mod backoff;
pub mod blob_key;
pub mod clock;
pub mod codec;
pub mod error_chain;
pub mod executor;
pub mod hash;
pub mod ids;
pub mod index_table;
pub mod latch;
pub mod rng;
