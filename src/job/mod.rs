//! Jobs: what a user submits (the [`graph::JobGraph`]) and the pure logic the JobManager uses to
//! run it — execution states, pipelined regions, restart strategies. Nothing here is an actor.

pub mod graph;
