//! The TaskManager's registration at the JobManager, as a pure state machine.
//!
//! One transition function, [`Registration::handle`], maps (phase, event) to (phase, action); the
//! TaskManager actor performs the actions (send an attempt, arm a timer, start heartbeating).
//! Retries follow Flink's RetryingRegistration: an attempt that times out is followed at once by
//! one with twice the timeout (capped at `max-timeout`); an error waits `error-delay` and starts
//! over from `initial-timeout`. A refusal is final (Flink's TaskExecutor shuts down when its
//! registration is rejected): the JobManager never changes its mind about a wrong cluster id,
//! a slot count or a released worker, so asking again every few seconds forever only hides the
//! reason in a log. Every attempt has a number; an answer or timer for any attempt but the
//! current one is ignored, so a late `AcknowledgeRegistration` can never register the TaskManager
//! twice or at a leader it has left.

use std::time::Duration;

use crate::base::ids::{InstanceId, LeaderSessionId};
use crate::config::RegistrationConfig;
use crate::messages::ActorAddress;
use crate::messages::job_manager::{RefusalReason, RegistrationResponse};
use crate::messages::task_manager::RegistrationPhase;

/// The JobManager leader a TaskManager registers at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leader {
    /// Its address.
    pub address: ActorAddress,
    /// The session leader retrieval named, if it named one. Without it (a TaskManager started
    /// with just `--jobmanager HOST:PORT`) the session of the first acknowledgement is adopted.
    pub retrieved_session: Option<LeaderSessionId>,
}

/// What happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegistrationEvent {
    /// Leader retrieval named a leader (at start, or `NewLeaderAvailable`).
    LeaderFound(Leader),
    /// The JobManager answered attempt `attempt`.
    Response {
        /// The attempt answered.
        attempt: u64,
        /// The answer.
        response: RegistrationResponse,
    },
    /// Attempt `attempt` got no answer within its timeout.
    AttemptTimedOut {
        /// The attempt.
        attempt: u64,
    },
    /// Attempt `attempt` could not be delivered (the JobManager is unreachable).
    AttemptFailed {
        /// The attempt.
        attempt: u64,
    },
    /// The pause before attempt `attempt` is over.
    RetryDue {
        /// The attempt to send.
        attempt: u64,
    },
    /// The registration ended: the JobManager's heartbeat timed out, it disowned this
    /// TaskManager, or it sent `Disconnect`.
    ConnectionLost,
}

/// What the TaskManager must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegistrationAction {
    /// Send `RegisterTaskManager` to the leader as attempt `attempt`; report `AttemptTimedOut`
    /// after `timeout` without an answer.
    Send {
        /// The attempt.
        attempt: u64,
        /// Its timeout.
        timeout: Duration,
    },
    /// Report `RetryDue { attempt }` after `delay`.
    RetryAfter {
        /// The attempt to send then.
        attempt: u64,
        /// The pause.
        delay: Duration,
    },
    /// Registered: start heartbeating.
    Registered {
        /// The registration.
        instance_id: InstanceId,
        /// The leader's session, for fencing its messages.
        leader_session_id: LeaderSessionId,
    },
    /// Nothing to do; `why` says why (logged).
    Ignore {
        /// The reason, for the log.
        why: &'static str,
    },
    /// The JobManager refused the registration: stop, with the reason.
    Refused {
        /// Why.
        reason: RefusalReason,
    },
}

/// The registration state of one TaskManager.
#[derive(Debug, Clone)]
pub struct Registration {
    config: RegistrationConfig,
    leader: Option<Leader>,
    /// The session of the registered-at (or retrieved) leader: fenced messages must carry it.
    session: Option<LeaderSessionId>,
    phase: RegistrationPhase,
    attempts: u64,
    timeout: Duration,
}

impl Registration {
    /// Not registered, no leader known.
    pub fn new(config: RegistrationConfig) -> Self {
        Self {
            config,
            leader: None,
            session: None,
            phase: RegistrationPhase::NoLeader,
            attempts: 0,
            timeout: config.initial_timeout,
        }
    }

    /// Where registration stands.
    pub fn phase(&self) -> RegistrationPhase {
        self.phase
    }

    /// The leader registered at or being registered at.
    pub fn leader(&self) -> Option<&Leader> {
        self.leader.as_ref()
    }

    /// The leader session fenced messages must carry, when one is known.
    pub fn session(&self) -> Option<LeaderSessionId> {
        self.session
    }

    /// Attempts made since start.
    pub fn attempts(&self) -> u64 {
        self.attempts
    }

    /// The current registration, if registered.
    pub fn instance_id(&self) -> Option<InstanceId> {
        match self.phase {
            RegistrationPhase::Registered { instance_id } => Some(instance_id),
            _ => None,
        }
    }

    /// The transition function.
    pub fn handle(&mut self, event: RegistrationEvent) -> RegistrationAction {
        use RegistrationEvent as E;
        use RegistrationPhase as P;
        match (self.phase, event) {
            (P::Refused, _) => RegistrationAction::Ignore {
                why: "the registration was refused: stopping",
            },
            (_, E::LeaderFound(leader)) => {
                let same_leader = self.leader.as_ref() == Some(&leader);
                if same_leader && !matches!(self.phase, P::NoLeader) {
                    return RegistrationAction::Ignore {
                        why: "this leader is known already",
                    };
                }
                self.session = leader.retrieved_session;
                self.leader = Some(leader);
                self.start_over_now()
            }
            (
                P::Registering { attempt },
                E::Response {
                    attempt: answered,
                    response,
                },
            ) if attempt == answered => self.answered(response),
            (_, E::Response { .. }) => RegistrationAction::Ignore {
                why: "late answer from an earlier registration attempt",
            },
            (P::Registering { attempt }, E::AttemptTimedOut { attempt: timed_out })
                if attempt == timed_out =>
            {
                self.timeout = self.timeout.saturating_mul(2).min(self.config.max_timeout);
                self.send_next()
            }
            (P::Registering { attempt }, E::AttemptFailed { attempt: failed })
                if attempt == failed =>
            {
                self.retry_later(self.config.error_delay)
            }
            (_, E::AttemptTimedOut { .. } | E::AttemptFailed { .. }) => {
                RegistrationAction::Ignore {
                    why: "timeout or failure of an earlier registration attempt",
                }
            }
            (P::WaitingToRetry { attempt }, E::RetryDue { attempt: due }) if attempt == due => {
                self.phase = P::Registering { attempt };
                RegistrationAction::Send {
                    attempt,
                    timeout: self.timeout,
                }
            }
            (_, E::RetryDue { .. }) => RegistrationAction::Ignore {
                why: "retry timer of an earlier registration attempt",
            },
            (P::Registered { .. }, E::ConnectionLost) => {
                // A JobManager that lost us may have restarted with a new session: only the
                // session leader retrieval names still binds.
                self.session = self.leader.as_ref().and_then(|l| l.retrieved_session);
                self.start_over_now()
            }
            (_, E::ConnectionLost) => RegistrationAction::Ignore {
                why: "not registered",
            },
        }
    }

    fn answered(&mut self, response: RegistrationResponse) -> RegistrationAction {
        let (instance_id, leader_session_id) = match response {
            RegistrationResponse::AcknowledgeRegistration(ack) => {
                (ack.instance_id, ack.leader_session_id)
            }
            RegistrationResponse::AlreadyRegistered(already) => {
                (already.instance_id, already.leader_session_id)
            }
            RegistrationResponse::RefuseRegistration(refusal) => {
                self.phase = RegistrationPhase::Refused;
                return RegistrationAction::Refused {
                    reason: refusal.reason,
                };
            }
        };
        if self
            .session
            .is_some_and(|session| session != leader_session_id)
        {
            // Stay in this attempt: its timeout sends the next one.
            return RegistrationAction::Ignore {
                why: "acknowledgement from a stale leader session",
            };
        }
        self.session = Some(leader_session_id);
        self.phase = RegistrationPhase::Registered { instance_id };
        RegistrationAction::Registered {
            instance_id,
            leader_session_id,
        }
    }

    fn start_over_now(&mut self) -> RegistrationAction {
        self.timeout = self.config.initial_timeout;
        self.send_next()
    }

    fn send_next(&mut self) -> RegistrationAction {
        self.attempts += 1;
        self.phase = RegistrationPhase::Registering {
            attempt: self.attempts,
        };
        RegistrationAction::Send {
            attempt: self.attempts,
            timeout: self.timeout,
        }
    }

    fn retry_later(&mut self, delay: Duration) -> RegistrationAction {
        self.attempts += 1;
        self.timeout = self.config.initial_timeout;
        self.phase = RegistrationPhase::WaitingToRetry {
            attempt: self.attempts,
        };
        RegistrationAction::RetryAfter {
            attempt: self.attempts,
            delay,
        }
    }
}

#[cfg(test)]
mod tests;
