//! Jobs: what a user submits (the [`graph::JobGraph`], built in code or read from a TOML
//! [`mod@file`]) and the pure logic the JobManager uses to run it — execution [`states`], pipelined
//! [`regions`], when their results are released ([`partition_release`]), [`restart`] strategies.
//! Nothing here is an actor.

pub mod artifact;
pub mod file;
pub mod graph;
pub mod partition_release;
pub mod regions;
pub mod restart;
pub mod states;
