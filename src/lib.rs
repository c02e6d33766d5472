//! # Flint
//!
//! A Flink-style cluster runtime on actix. A **FlinkResourceManager** keeps a pool of workers at
//! its designated size, a **JobManager** registers the workers' **TaskManagers** and watches
//! their heartbeats, and the TaskManagers offer slots. The actors talk only through typed
//! messages ([`messages`]) and hold each other as gateways of `Recipient`s, so the same code runs
//! in one process ([`MiniCluster`]) and, through the transport, across machines.
//!
//! ## Layout
//!
//! ```text
//! src/lib.rs           this map; re-exports
//! src/messages/        the protocol, one file per receiving actor (+ ids, shared types)
//! src/actors/          one actor per file + its pure decision logic (pool, instances, registration)
//! src/drivers/         how the resource manager gets workers (in_process, standalone)
//! src/directory.rs     actor address -> gateway (the seam the transport plugs into)
//! src/env.rs           NodeEnv: clock, seeded RNG, spawner, resolver (the determinism seams)
//! src/task_blocking.rs how task code waits (TaskBlocker): production parks the task thread
//! src/task_threads.rs  the production task threads: a pool that never makes a task wait
//! src/lockstep.rs      the simulation's task runner: task threads in lock-step, virtual time
//! src/codec.rs         the one place values become bytes (bincode 2, size-limited)
//! src/config/          ClusterConfig: Flink's keys (one registry), layered sources, validated
//! src/rest/            the JobManager's HTTP endpoint: REST API, /metrics (docs/rest.md)
//! src/metrics.rs       counters the REST API reports (transport traffic)
//! src/minicluster.rs   the embedded cluster
//! src/working_dir.rs   a process's private working directory (0700) and private files (0600)
//! src/run.rs           `flint run --embedded`: a job file on an embedded cluster, its report
//! src/client/          the CLI's client commands over the JobManager's REST API
//! src/bin/demo.rs      the guided tour
//! ```
//!
//! ## Supervision tree (embedded cluster)
//!
//! ```text
//! caller's System / arbiter
//! ├── JobManager ───────────── InstanceManager, HeartbeatMonitor
//! └── FlinkResourceManager ─── WorkerPool, WorkerDriver (in_process)
//!        └── per worker: an arbiter (thread) from the Spawner
//!               └── TaskManager ── Registration, SlotTable
//! ```
//!
//! ## Message flow
//!
//! ```text
//! RM ── RegisterResourceManager ──────────────▶ JM   (retried with backoff until answered)
//! RM ◀── RegisterResourceManagerSuccessful ──── JM   (with the TMs it already has: reconcile)
//! RM ── driver.request_worker ─▶ driver ── WorkerStarted ─▶ RM   (pending request → pending registration)
//! TM ── RegisterTaskManager ──────────────────▶ JM ── AcknowledgeRegistration ─▶ TM
//!                                                 JM ── NotifyResourceStarted ─▶ RM (→ started)
//! TM ── Heartbeat (every interval) ───────────▶ JM
//! JM: heartbeat timeout ── ReleaseResource ────▶ RM ── release + check_workers_pool (replacement)
//! RM: pool too large ── ReleaseIdleTaskManagers ▶ JM ── the idle ones ─▶ RM ── release
//! ```

pub mod actors;
pub mod base;
pub mod client;
pub mod cluster;
pub mod config;
pub mod demo;
pub mod drivers;
pub mod env;
pub mod exchange;
pub mod ha;
pub mod job;
pub mod messages;
pub mod operators;
pub mod process;
pub mod rest;
pub mod rpc;
pub mod sim;
pub mod transport;

#[cfg(test)]
pub(crate) mod testing;

pub use cluster::minicluster::{ClusterStatus, MiniCluster, MiniClusterError};
pub use config::ClusterConfig;
pub use env::events::ClusterEvent;

/// The README's examples compile (`cargo test --doc`).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
