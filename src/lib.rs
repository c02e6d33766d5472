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
//! One crate in layers; a folder imports only folders below it (`tests/layers.rs` checks it):
//!
//! ```text
//! src/bin/, process/, client/,   binaries; `flint jobmanager`/`taskmanager`/`run --embedded`;
//!   demo/, sim/                  the CLI's client commands; the tour; the simulation
//! cluster/                       MiniCluster (embedded), the JobManager process's leader loop
//! rest/, drivers/, ha/           REST API + dashboard; worker drivers + factory; HA services
//! actors/                        resource_manager/, job_manager/ (+ scheduler/, execution_graph/),
//!                                task_manager/ (+ connection, task_runtime), node (starting them)
//! config/                        ClusterConfig: Flink's keys, layered sources, validated
//! exchange/, operators/          the data plane (partitions, gates, partition requests); operators
//! env/                           NodeEnv: the determinism seams, task threads, events, work dirs
//! rpc/                           remote actors: the node endpoint, proxies, the actor directory
//! messages/                      the protocol: messages, replies, descriptors, buffers, payload
//! job/                           JobGraph, job files, states, pipelined regions, restarts
//! transport/                     frames, handshake, TLS, connections (generic over the payload)
//! base/                          codec, ids and addresses, rng, hashes, clocks, backoff, latch
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
pub mod api;
pub mod base;
pub mod cli;
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
