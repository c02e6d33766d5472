//! What an HA run does: the scenario a seed draws (jobs, JobManager faults of every kind,
//! TaskManager and network faults, resizes, cancels) and its actions.

use super::*;

/// One action of an HA scenario.
#[derive(Debug, Clone, PartialEq)]
pub enum HaAction {
    /// Submit a job to the leader (waiting for one if none leads).
    Submit {
        /// What it runs.
        kind: JobKind,
        /// Subtasks per vertex.
        parallelism: u32,
    },
    /// Cancel the `index`-th answered job (modulo their number) at the leader.
    Cancel(u64),
    /// An operator sets the pool size at the leader, as `PUT /cluster/pool-size` does (the
    /// resource manager, then the store), again at whoever leads until it is stored.
    SetPoolSize(u32),
    /// Cut a JobManager from the coordination service (not from the network) for a while.
    CutFromCoordination {
        /// Which.
        target: HaTarget,
        /// For how long.
        duration: Duration,
    },
    /// Hang a JobManager node for a while.
    Pause {
        /// Which.
        target: HaTarget,
        /// For how long.
        duration: Duration,
        /// How long its coordination client stays starved after the node resumes (a ZooKeeper
        /// thread scheduled last): its actors run on, blind to whether they still lead, and
        /// only the leadership lease keeps them from acting.
        client_lag: Duration,
    },
    /// Kill a JobManager node (a process crash) and boot it again later.
    Kill {
        /// Which.
        target: HaTarget,
        /// When it boots again.
        restart_after: Duration,
    },
    /// The coordination service expires a JobManager's session just as its next `confirm`
    /// reaches it (after it won the election, before it published itself): it must not publish,
    /// and must contend again with a new session.
    ExpireSessionAtConfirm(HaTarget),
    /// A fault of the single-JobManager family on the TaskManagers or the network (a
    /// partition is between the leader and a TaskManager).
    Cluster(Action),
}

/// A whole HA run.
#[derive(Debug, Clone, PartialEq)]
pub struct HaScenario {
    /// The configured pool size (an operator may resize it: [`HaAction::SetPoolSize`]).
    pub pool: u32,
    /// Slots per TaskManager.
    pub slots: u32,
    /// The links during the fault phase.
    pub net: NetParams,
    /// How long faults are injected.
    pub fault_phase: Duration,
    /// The actions, by time.
    pub steps: Vec<(Duration, HaAction)>,
    /// Each new leader's driver reports the workers it finds running as recovered (as the
    /// Slurm driver's first poll does) instead of adopting whoever registers.
    pub recover_workers: bool,
}

fn below(rng: &mut NodeRng, n: u64) -> u64 {
    if n == 0 { 0 } else { rng.next_u64() % n }
}

fn millis(rng: &mut NodeRng, low: u64, high: u64) -> Duration {
    Duration::from_millis(low + below(rng, high - low + 1))
}

impl HaScenario {
    /// Draws a scenario: one to three jobs early, one to three JobManager faults (each a cut
    /// from the service, a pause or a kill, shorter or longer than `session_timeout`, the
    /// leader seven times in ten), up to four TaskManager and network faults, jobs and cancels.
    pub fn generate(rng: &mut NodeRng, session_timeout: Duration) -> Self {
        let pool = 2 + below(rng, 2) as u32;
        let slots = 1 + below(rng, 3) as u32;
        let net = NetParams {
            base_latency: millis(rng, 1, 5),
            tail_latency: millis(rng, 20, 400),
            tail_probability: below(rng, 5) as f64 / 100.0,
            loss: if below(rng, 2) == 0 {
                below(rng, 20) as f64 / 1000.0
            } else {
                0.0
            },
            reorder: 0.0,
            link_capacity: 64 + below(rng, 512) as usize,
        };
        let fault_phase = Duration::from_secs(12);
        // Jobs fit the pool: a refused job tests nothing here.
        let job = |rng: &mut NodeRng| HaAction::Submit {
            kind: match below(rng, 6) {
                0 => JobKind::WordCount,
                1 => JobKind::Noop,
                2 => JobKind::Sleep,
                // Batch job recovery: a failover takes its finished first stage back.
                3 => JobKind::PacedBatchWordCount,
                // Collected records: a later leader answers them from the job result store.
                4 => JobKind::TypedJoin,
                _ => JobKind::FailOnce,
            },
            parallelism: 1 + below(rng, u64::from((pool * slots / 2).clamp(1, 3))) as u32,
        };
        let mut steps = Vec::new();
        for _ in 0..1 + below(rng, 3) {
            steps.push((millis(rng, 0, 3_000), job(rng)));
        }
        // One seed in two, an operator resizes the pool (a new leader must keep the size).
        if below(rng, 2) == 0 {
            let size = 1 + below(rng, u64::from(pool + POOL_HEADROOM)) as u32;
            steps.push((millis(rng, 0, 9_000), HaAction::SetPoolSize(size)));
        }
        for _ in 0..1 + below(rng, 3) {
            let target = if below(rng, 10) < 7 {
                HaTarget::Leader
            } else {
                HaTarget::Any(rng.next_u64())
            };
            // Shorter than the session timeout (nothing may change hands) or longer (it must).
            let duration = if below(rng, 2) == 0 {
                session_timeout.mul_f64(0.1 + below(rng, 50) as f64 / 100.0)
            } else {
                session_timeout.mul_f64(1.2 + below(rng, 180) as f64 / 100.0)
            };
            let action = match below(rng, 3) {
                0 => HaAction::CutFromCoordination { target, duration },
                1 => HaAction::Pause {
                    target,
                    duration,
                    client_lag: millis(rng, 0, 1_000),
                },
                _ => HaAction::Kill {
                    target,
                    restart_after: millis(rng, 1_000, 6_000),
                },
            };
            steps.push((millis(rng, 500, 9_000), action));
        }
        for _ in 0..below(rng, 5) {
            let target = rng.next_u64();
            let action = match below(rng, 8) {
                0 => HaAction::Cluster(Action::Crash {
                    target,
                    kind: if below(rng, 2) == 0 {
                        CrashKind::Process
                    } else {
                        CrashKind::Machine
                    },
                }),
                1 => HaAction::Cluster(Action::Restart(target)),
                2 => HaAction::Cluster(Action::Pause {
                    target: Target::TaskManager(target),
                    duration: millis(rng, 50, 3_000),
                }),
                3 => HaAction::Cluster(Action::Partition {
                    target,
                    both: below(rng, 2) == 0,
                    towards_job_manager: below(rng, 2) == 0,
                    duration: millis(rng, 100, 6_000),
                }),
                4 => HaAction::Cluster(Action::ResetConnection(target)),
                5 => HaAction::Cancel(target),
                _ => job(rng),
            };
            steps.push((millis(rng, 0, fault_phase.as_millis() as u64), action));
        }
        // One seed in four, a session lost between winning and publishing.
        if below(rng, 4) == 0 {
            let target = HaTarget::Any(rng.next_u64());
            steps.push((
                millis(rng, 0, 9_000),
                HaAction::ExpireSessionAtConfirm(target),
            ));
        }
        steps.sort_by_key(|(at, _)| *at);
        // Drawn last: the draws above stay those of earlier sweeps.
        let recover_workers = below(rng, 2) == 0;
        Self {
            pool,
            slots,
            net,
            fault_phase,
            steps,
            recover_workers,
        }
    }
}
