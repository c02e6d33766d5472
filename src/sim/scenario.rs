//! What happens in one simulated run, drawn from its seed: the cluster's shape, the network's
//! weather, and a timed list of operator actions and faults. A quiet phase (faults off, links
//! healed, paused nodes resumed) follows the list.

use std::time::Duration;

use super::network::{CrashKind, NetParams};
use crate::base::rng::NodeRng;

/// The kinds of job a scenario submits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobKind {
    /// WordCount over a small generated text (source → tokenize → count → sink).
    WordCount,
    /// The same WordCount with its text shipped as an artifact: each TaskManager fetches it
    /// from the JobManager (over the lossy network) before its first source task runs.
    ShippedWordCount,
    /// The same WordCount with a blocking (batch) all-to-all exchange into `count`: its
    /// consumers deploy once every producer finished, and a restarted consumer reads the same
    /// producers again, so deployments name producer lists sent before (issue 11, item 5).
    BatchWordCount,
    /// That batch WordCount with a `sleep` of 1 to 4 s (virtual) after `count`: its second
    /// stage runs long enough for a failover to hit it once the first stage finished (the HA
    /// family's batch job recovery).
    PacedBatchWordCount,
    /// A generating source and a pass-through, in one slot-sharing group.
    Noop,
    /// Source → sleep → sink, the sleep co-located with the source.
    Sleep,
    /// A pass-through that fails its first attempt (restarts).
    FailOnce,
    /// A pass-through whose configuration is invalid: every attempt would fail alike, so the
    /// job fails at its first attempt, restarted by nothing but the faults.
    Misconfigured,
    /// Producers silent for minutes of virtual time (a `sleep` of 60 to 120 s), pipelined
    /// all-to-all into a sink: consumers must wait, not time out.
    Silent,
    /// A fast source pipelined all-to-all into a consumer that sleeps per record.
    SlowConsumer,
    /// A source writing far more than its subpartitions hold, pipelined all-to-all into
    /// consumers that read at most a couple of records and end (`noop`'s `take`): the
    /// producers must run to their end, not wait for room for ever.
    EarlyConsumer,
    /// A task stuck where it cannot see its cancellation for 15 to 30 s (the `ignore-cancel`
    /// operator) into a sink: cancelling it (a cancel, a failover) ends only through the
    /// TaskManager's cancellation watchdog failing the TaskManager.
    IgnoresCancel,
    /// A typed program (`super::program`): a join of two generated inputs, checked exactly.
    TypedJoin,
}

/// Which jobs a scenario draws.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum JobMix {
    /// WordCount, noop, sleep and fail-once jobs: the control-plane sweep (its seeds keep the
    /// scenarios they always had).
    #[default]
    Classic,
    /// The data plane: silent producers, slow consumers and WordCount (exact), among the same
    /// faults (crashes mid-stream included).
    DataPlane,
    /// Tasks that ignore their cancellation among sleep and fail-once jobs (whose failovers
    /// cancel them too), and cancels.
    NonCooperative,
    /// Typed programs (a join, checked exact) and WordCount among the faults.
    Programs,
}

impl JobMix {
    fn draw(self, rng: &mut NodeRng) -> JobKind {
        match self {
            // One draw as before (a seed keeps its scenario); an eighth of the fail-once jobs
            // are misconfigured instead, by the draw's higher bits.
            Self::Classic => {
                let drawn = rng.next_u64();
                match drawn % 4 {
                    0 => JobKind::WordCount,
                    1 => JobKind::Noop,
                    2 => JobKind::Sleep,
                    _ if (drawn / 4).is_multiple_of(8) => JobKind::Misconfigured,
                    _ => JobKind::FailOnce,
                }
            }
            Self::DataPlane => match below(rng, 5) {
                0 => JobKind::WordCount,
                1 => JobKind::BatchWordCount,
                2 => JobKind::Silent,
                3 => JobKind::SlowConsumer,
                _ => JobKind::EarlyConsumer,
            },
            Self::NonCooperative => match below(rng, 3) {
                0 => JobKind::Sleep,
                1 => JobKind::FailOnce,
                _ => JobKind::IgnoresCancel,
            },
            Self::Programs => match below(rng, 4) {
                0 => JobKind::WordCount,
                1 => JobKind::ShippedWordCount,
                _ => JobKind::TypedJoin,
            },
        }
    }
}

/// Which node a fault hits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// The JobManager's node.
    JobManager,
    /// A TaskManager, chosen at the time of the fault as `index` modulo those eligible.
    TaskManager(u64),
}

/// One scenario action.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// `SetWorkerPoolSize`.
    SetPoolSize(u32),
    /// Submit a job.
    Submit {
        /// What it runs.
        kind: JobKind,
        /// Subtasks per vertex.
        parallelism: u32,
    },
    /// Cancel the `index`-th submitted job (modulo their number).
    Cancel(u64),
    /// Crash a TaskManager node.
    Crash {
        /// Which.
        target: u64,
        /// Process (peers see the connection close) or machine (silence).
        kind: CrashKind,
    },
    /// Restart a crashed TaskManager node as a new incarnation.
    Restart(u64),
    /// Hang a node for a while.
    Pause {
        /// Which node.
        target: Target,
        /// For how long.
        duration: Duration,
    },
    /// Cut the links between the JobManager and a TaskManager for a while.
    Partition {
        /// Which TaskManager.
        target: u64,
        /// Whether both directions are cut (else only JobManager → TaskManager or the
        /// reverse, chosen by `towards_job_manager`).
        both: bool,
        /// For a one-way cut: the TaskManager → JobManager direction.
        towards_job_manager: bool,
        /// For how long.
        duration: Duration,
    },
    /// Reset one open connection.
    ResetConnection(u64),
    /// Send leader-only messages with a stale leader session to the RM and a TaskManager.
    StaleLeader(u64),
    /// The driver now fails this share of worker starts.
    StartFailures(f64),
    /// A node without the secret connects to the JobManager ([`super::intruder`]).
    Intrude(super::intruder::IntruderKind),
}

/// An action at a time.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// Virtual time since the start.
    pub at: Duration,
    /// What happens.
    pub action: Action,
}

/// A whole run.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    /// The pool size the cluster starts with.
    pub initial_pool: u32,
    /// The largest pool size the scenario asks for.
    pub max_pool: u32,
    /// Slots per TaskManager.
    pub slots: u32,
    /// The links during the fault phase.
    pub net: NetParams,
    /// How long faults are injected.
    pub fault_phase: Duration,
    /// The actions, by time.
    pub steps: Vec<Step>,
}

/// How big a scenario may get.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// The most TaskManagers the pool is ever asked for.
    pub max_task_managers: u32,
    /// How long the fault phase lasts.
    pub fault_phase: Duration,
    /// Actions in the fault phase, at most.
    pub max_steps: u32,
    /// The jobs it submits.
    pub jobs: JobMix,
    /// Add issue 12's failure elements (see `Scenario::failure_elements`); drawn after every
    /// other draw, so a seed's classic scenario stays the same without them.
    pub failures: bool,
    /// Add intruders ([`super::intruder`]), drawn after everything else for the same reason.
    pub intruders: bool,
}

impl Default for Shape {
    fn default() -> Self {
        Self {
            max_task_managers: 6,
            fault_phase: Duration::from_secs(8),
            max_steps: 12,
            jobs: JobMix::Classic,
            failures: false,
            intruders: false,
        }
    }
}

fn below(rng: &mut NodeRng, n: u64) -> u64 {
    if n == 0 { 0 } else { rng.next_u64() % n }
}

fn chance(rng: &mut NodeRng, percent: u64) -> bool {
    below(rng, 100) < percent
}

fn millis(rng: &mut NodeRng, low: u64, high: u64) -> Duration {
    Duration::from_millis(low + below(rng, high - low + 1))
}

impl Scenario {
    /// Draws a scenario from `rng`.
    pub fn generate(rng: &mut NodeRng, shape: Shape) -> Self {
        let max_pool = 1 + below(rng, u64::from(shape.max_task_managers)) as u32;
        let initial_pool = 1 + below(rng, u64::from(max_pool)) as u32;
        let slots = 1 + below(rng, 3) as u32;
        let net = NetParams {
            base_latency: millis(rng, 1, 5),
            tail_latency: millis(rng, 20, 400),
            tail_probability: below(rng, 5) as f64 / 100.0,
            loss: if chance(rng, 50) {
                below(rng, 30) as f64 / 1000.0
            } else {
                0.0
            },
            reorder: if chance(rng, 30) {
                below(rng, 50) as f64 / 1000.0
            } else {
                0.0
            },
            link_capacity: 64 + below(rng, 512) as usize,
        };
        let fault_ms = shape.fault_phase.as_millis() as u64;
        let count = 2 + below(rng, u64::from(shape.max_steps.max(2) - 1));
        let mut steps: Vec<Step> = (0..count)
            .map(|_| Step {
                at: Duration::from_millis(below(rng, fault_ms)),
                action: Self::action(rng, max_pool, shape.jobs),
            })
            .collect();
        // Every run submits at least one job, early enough to run into the faults.
        let kind = shape.jobs.draw(rng);
        steps.push(Step {
            at: millis(rng, 0, fault_ms / 4),
            action: Action::Submit {
                kind,
                parallelism: 1 + below(rng, 2) as u32,
            },
        });
        if shape.failures {
            steps.extend(Self::failure_elements(rng, max_pool, fault_ms));
        }
        if shape.intruders {
            use super::intruder::IntruderKind;
            for _ in 0..1 + below(rng, 3) {
                let kind = match below(rng, 3) {
                    0 => IntruderKind::Silent,
                    1 => IntruderKind::Drip,
                    _ => IntruderKind::WrongSecret,
                };
                steps.push(Step {
                    at: millis(rng, 0, fault_ms),
                    action: Action::Intrude(kind),
                });
            }
        }
        steps.sort_by_key(|step| step.at);
        Self {
            initial_pool,
            max_pool,
            slots,
            net,
            fault_phase: shape.fault_phase,
            steps,
        }
    }

    /// 1 to 3 subtasks per vertex nine times in ten; else 6, 12 or 18, more than small pools
    /// have slots: jobs of independent regions (sleep, fail-once) then run in waves, jobs of
    /// one wide region are refused. One draw, equal to the former `1 + below(3)` whenever it is
    /// under 27 (3 divides 30), so earlier seeds keep their scenarios.
    fn parallelism(rng: &mut NodeRng) -> u32 {
        match below(rng, 30) {
            small @ 0..27 => 1 + (small % 3) as u32,
            wide => 6 * (wide - 26) as u32,
        }
    }

    /// Issue 12's elements, each drawn one time in two:
    /// - a job with finished blocking results (sleep → sink) and, while it runs, a one-way cut
    ///   JobManager → TaskManager longer than the heartbeat timeout (5 s): the TaskManager gives
    ///   up first (its heartbeats still arrive, so the JobManager never times it out), drops its
    ///   partitions and registers again;
    /// - a wide job that grows the pool beyond the operator's size, and an operator resize
    ///   while it runs (the resize must stand once the job is done);
    /// - a grow then a shrink while the new workers are still registering.
    fn failure_elements(rng: &mut NodeRng, max_pool: u32, fault_ms: u64) -> Vec<Step> {
        let mut steps = Vec::new();
        if chance(rng, 50) {
            let at = millis(rng, 0, fault_ms / 4);
            steps.push(Step {
                at,
                action: Action::Submit {
                    kind: JobKind::Sleep,
                    parallelism: 1 + below(rng, 3) as u32,
                },
            });
            steps.push(Step {
                at: at + millis(rng, 100, 3_000),
                action: Action::Partition {
                    target: rng.next_u64(),
                    both: false,
                    towards_job_manager: false,
                    duration: millis(rng, 5_500, 9_000),
                },
            });
        }
        if chance(rng, 50) {
            let at = millis(rng, 0, fault_ms / 2);
            steps.push(Step {
                at,
                action: Action::Submit {
                    kind: JobKind::Sleep,
                    parallelism: 6 * (1 + below(rng, 3) as u32),
                },
            });
            steps.push(Step {
                at: at + millis(rng, 200, 2_000),
                action: Action::SetPoolSize(below(rng, u64::from(max_pool) + 1) as u32),
            });
        }
        if chance(rng, 50) {
            let at = millis(rng, 0, fault_ms);
            steps.push(Step {
                at,
                action: Action::SetPoolSize(max_pool),
            });
            steps.push(Step {
                at: at + millis(rng, 5, 300),
                action: Action::SetPoolSize(below(rng, u64::from(max_pool)) as u32),
            });
        }
        steps
    }

    fn action(rng: &mut NodeRng, max_pool: u32, jobs: JobMix) -> Action {
        let target = rng.next_u64();
        match below(rng, 100) {
            0..15 => Action::SetPoolSize(below(rng, u64::from(max_pool) + 1) as u32),
            15..35 => Action::Submit {
                kind: jobs.draw(rng),
                parallelism: Self::parallelism(rng),
            },
            35..40 => Action::Cancel(target),
            40..52 => Action::Crash {
                target,
                kind: if chance(rng, 50) {
                    CrashKind::Process
                } else {
                    CrashKind::Machine
                },
            },
            52..60 => Action::Restart(target),
            60..70 => Action::Pause {
                target: if chance(rng, 25) {
                    Target::JobManager
                } else {
                    Target::TaskManager(target)
                },
                duration: millis(rng, 50, 4_000),
            },
            70..82 => Action::Partition {
                target,
                both: chance(rng, 50),
                towards_job_manager: chance(rng, 50),
                duration: millis(rng, 100, 6_000),
            },
            82..88 => Action::ResetConnection(target),
            88..94 => Action::StaleLeader(target),
            _ => Action::StartFailures(below(rng, 40) as f64 / 100.0),
        }
    }
}
