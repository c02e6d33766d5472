//! The base: what every layer above may use and what names no concept above it.

pub mod address;
pub mod backoff;
pub mod clock;
pub mod codec;
pub mod error_chain;
pub mod executor;
pub mod hash;
pub mod ids;
pub mod latch;
pub mod rng;
