//! The whole transition table of the registration state machine: every phase against every
//! event, with the action and the phase that follow.

use super::*;
use crate::messages::job_manager::{
    AcknowledgeRegistration, AlreadyRegistered, RefusalReason, RefuseRegistration,
};

const S: LeaderSessionId = LeaderSessionId::from_u128(1);
const STALE: LeaderSessionId = LeaderSessionId::from_u128(2);
const I: InstanceId = InstanceId::from_u128(10);

fn config() -> RegistrationConfig {
    RegistrationConfig {
        initial_timeout: Duration::from_millis(100),
        max_timeout: Duration::from_millis(400),
        error_delay: Duration::from_millis(1_000),
    }
}

fn leader(name: &str) -> Leader {
    Leader {
        address: ActorAddress::new("local", name),
        retrieved_session: Some(S),
    }
}

fn ack(session: LeaderSessionId) -> RegistrationResponse {
    RegistrationResponse::AcknowledgeRegistration(AcknowledgeRegistration {
        instance_id: I,
        leader_session_id: session,
    })
}

/// A registration in the named phase, and the number of its current attempt.
fn in_phase(phase: &str) -> (Registration, u64) {
    let mut r = Registration::new(config());
    match phase {
        "no-leader" => {}
        "registering" => {
            r.handle(RegistrationEvent::LeaderFound(leader("a")));
        }
        "waiting" => {
            r.handle(RegistrationEvent::LeaderFound(leader("a")));
            r.handle(RegistrationEvent::AttemptFailed { attempt: 1 });
        }
        "refused" => {
            r.handle(RegistrationEvent::LeaderFound(leader("a")));
            r.handle(RegistrationEvent::Response {
                attempt: 1,
                response: RegistrationResponse::RefuseRegistration(RefuseRegistration {
                    reason: RefusalReason::NoSlots,
                }),
            });
        }
        "registered" => {
            r.handle(RegistrationEvent::LeaderFound(leader("a")));
            r.handle(RegistrationEvent::Response {
                attempt: 1,
                response: ack(S),
            });
        }
        other => panic!("no phase {other}"),
    }
    let current = match r.phase() {
        RegistrationPhase::Registering { attempt }
        | RegistrationPhase::WaitingToRetry { attempt } => attempt,
        _ => r.attempts(),
    };
    (r, current)
}

fn event(name: &str, current: u64) -> RegistrationEvent {
    use RegistrationEvent as E;
    let old = current.saturating_sub(1);
    match name {
        "leader-same" => E::LeaderFound(leader("a")),
        "leader-new" => E::LeaderFound(leader("b")),
        "ack" => E::Response {
            attempt: current,
            response: ack(S),
        },
        "already" => E::Response {
            attempt: current,
            response: RegistrationResponse::AlreadyRegistered(AlreadyRegistered {
                instance_id: I,
                leader_session_id: S,
            }),
        },
        "refuse" => E::Response {
            attempt: current,
            response: RegistrationResponse::RefuseRegistration(RefuseRegistration {
                reason: RefusalReason::NoSlots,
            }),
        },
        "ack-stale" => E::Response {
            attempt: current,
            response: ack(STALE),
        },
        "ack-old" => E::Response {
            attempt: old,
            response: ack(S),
        },
        "timeout" => E::AttemptTimedOut { attempt: current },
        "timeout-old" => E::AttemptTimedOut { attempt: old },
        "failed" => E::AttemptFailed { attempt: current },
        "failed-old" => E::AttemptFailed { attempt: old },
        "retry" => E::RetryDue { attempt: current },
        "retry-old" => E::RetryDue { attempt: old },
        "lost" => E::ConnectionLost,
        other => panic!("no event {other}"),
    }
}

#[derive(Debug, PartialEq)]
enum Expect {
    Send(u64, u64),
    Retry(u64, u64),
    Registered,
    Refused,
    Ignore,
}

use Expect::*;

const NO_LEADER: RegistrationPhase = RegistrationPhase::NoLeader;
const fn registering(attempt: u64) -> RegistrationPhase {
    RegistrationPhase::Registering { attempt }
}
const fn waiting(attempt: u64) -> RegistrationPhase {
    RegistrationPhase::WaitingToRetry { attempt }
}
const REGISTERED: RegistrationPhase = RegistrationPhase::Registered { instance_id: I };
const REFUSED: RegistrationPhase = RegistrationPhase::Refused;

#[test]
fn every_phase_against_every_event() {
    #[rustfmt::skip]
    let table: &[(&str, &str, Expect, RegistrationPhase)] = &[
        ("no-leader", "leader-same", Send(1, 100), registering(1)),
        ("no-leader", "leader-new", Send(1, 100), registering(1)),
        ("no-leader", "ack", Ignore, NO_LEADER),
        ("no-leader", "already", Ignore, NO_LEADER),
        ("no-leader", "refuse", Ignore, NO_LEADER),
        ("no-leader", "ack-stale", Ignore, NO_LEADER),
        ("no-leader", "ack-old", Ignore, NO_LEADER),
        ("no-leader", "timeout", Ignore, NO_LEADER),
        ("no-leader", "timeout-old", Ignore, NO_LEADER),
        ("no-leader", "failed", Ignore, NO_LEADER),
        ("no-leader", "failed-old", Ignore, NO_LEADER),
        ("no-leader", "retry", Ignore, NO_LEADER),
        ("no-leader", "retry-old", Ignore, NO_LEADER),
        ("no-leader", "lost", Ignore, NO_LEADER),

        ("registering", "leader-same", Ignore, registering(1)),
        ("registering", "leader-new", Send(2, 100), registering(2)),
        ("registering", "ack", Registered, REGISTERED),
        ("registering", "already", Registered, REGISTERED),
        ("registering", "refuse", Refused, REFUSED),
        ("registering", "ack-stale", Ignore, registering(1)),
        ("registering", "ack-old", Ignore, registering(1)),
        ("registering", "timeout", Send(2, 200), registering(2)),
        ("registering", "timeout-old", Ignore, registering(1)),
        ("registering", "failed", Retry(2, 1_000), waiting(2)),
        ("registering", "failed-old", Ignore, registering(1)),
        ("registering", "retry", Ignore, registering(1)),
        ("registering", "retry-old", Ignore, registering(1)),
        ("registering", "lost", Ignore, registering(1)),

        ("waiting", "leader-same", Ignore, waiting(2)),
        ("waiting", "leader-new", Send(3, 100), registering(3)),
        ("waiting", "ack", Ignore, waiting(2)),
        ("waiting", "already", Ignore, waiting(2)),
        ("waiting", "refuse", Ignore, waiting(2)),
        ("waiting", "ack-stale", Ignore, waiting(2)),
        ("waiting", "ack-old", Ignore, waiting(2)),
        ("waiting", "timeout", Ignore, waiting(2)),
        ("waiting", "timeout-old", Ignore, waiting(2)),
        ("waiting", "failed", Ignore, waiting(2)),
        ("waiting", "failed-old", Ignore, waiting(2)),
        ("waiting", "retry", Send(2, 100), registering(2)),
        ("waiting", "retry-old", Ignore, waiting(2)),
        ("waiting", "lost", Ignore, waiting(2)),

        ("registered", "leader-same", Ignore, REGISTERED),
        ("registered", "leader-new", Send(2, 100), registering(2)),
        ("registered", "ack", Ignore, REGISTERED),
        ("registered", "already", Ignore, REGISTERED),
        ("registered", "refuse", Ignore, REGISTERED),
        ("registered", "ack-stale", Ignore, REGISTERED),
        ("registered", "ack-old", Ignore, REGISTERED),
        ("registered", "timeout", Ignore, REGISTERED),
        ("registered", "timeout-old", Ignore, REGISTERED),
        ("registered", "failed", Ignore, REGISTERED),
        ("registered", "failed-old", Ignore, REGISTERED),
        ("registered", "retry", Ignore, REGISTERED),
        ("registered", "retry-old", Ignore, REGISTERED),
        ("registered", "lost", Send(2, 100), registering(2)),

        // A refusal is final: the TaskManager stops.
        ("refused", "leader-same", Ignore, REFUSED),
        ("refused", "leader-new", Ignore, REFUSED),
        ("refused", "ack", Ignore, REFUSED),
        ("refused", "already", Ignore, REFUSED),
        ("refused", "refuse", Ignore, REFUSED),
        ("refused", "ack-stale", Ignore, REFUSED),
        ("refused", "ack-old", Ignore, REFUSED),
        ("refused", "timeout", Ignore, REFUSED),
        ("refused", "timeout-old", Ignore, REFUSED),
        ("refused", "failed", Ignore, REFUSED),
        ("refused", "failed-old", Ignore, REFUSED),
        ("refused", "retry", Ignore, REFUSED),
        ("refused", "retry-old", Ignore, REFUSED),
        ("refused", "lost", Ignore, REFUSED),
    ];
    assert_eq!(table.len(), 5 * 14, "every phase against every event");
    for (phase, name, expected, next) in table {
        let (mut registration, current) = in_phase(phase);
        let action = registration.handle(event(name, current));
        let got = match action {
            RegistrationAction::Send { attempt, timeout } => {
                Send(attempt, timeout.as_millis() as u64)
            }
            RegistrationAction::RetryAfter { attempt, delay } => {
                Retry(attempt, delay.as_millis() as u64)
            }
            RegistrationAction::Registered {
                instance_id,
                leader_session_id,
            } => {
                assert_eq!((instance_id, leader_session_id), (I, S));
                Registered
            }
            RegistrationAction::Refused { reason } => {
                assert_eq!(reason, RefusalReason::NoSlots);
                Refused
            }
            RegistrationAction::Ignore { .. } => Ignore,
        };
        assert_eq!(&got, expected, "{phase} + {name}: action");
        assert_eq!(registration.phase(), *next, "{phase} + {name}: next phase");
    }
}

#[test]
fn timeouts_double_to_the_cap_and_start_over_after_an_error() {
    let mut r = Registration::new(config());
    let mut timeouts = vec![];
    let RegistrationAction::Send {
        mut attempt,
        timeout,
    } = r.handle(RegistrationEvent::LeaderFound(leader("a")))
    else {
        panic!("expected a send")
    };
    timeouts.push(timeout.as_millis());
    for _ in 0..4 {
        let RegistrationAction::Send {
            attempt: next,
            timeout,
        } = r.handle(RegistrationEvent::AttemptTimedOut { attempt })
        else {
            panic!("expected a send")
        };
        attempt = next;
        timeouts.push(timeout.as_millis());
    }
    assert_eq!(timeouts, [100, 200, 400, 400, 400]);
    let RegistrationAction::RetryAfter { attempt, .. } =
        r.handle(RegistrationEvent::AttemptFailed { attempt })
    else {
        panic!("expected a retry")
    };
    assert_eq!(
        r.handle(RegistrationEvent::RetryDue { attempt }),
        RegistrationAction::Send {
            attempt,
            timeout: Duration::from_millis(100)
        }
    );
}

#[test]
fn a_lost_connection_forgets_a_learned_session_but_keeps_a_retrieved_one() {
    // Learned: a TaskManager started with only an address adopts the first session...
    let mut r = Registration::new(config());
    r.handle(RegistrationEvent::LeaderFound(Leader {
        address: ActorAddress::new("local", "a"),
        retrieved_session: None,
    }));
    r.handle(RegistrationEvent::Response {
        attempt: 1,
        response: ack(S),
    });
    assert_eq!(r.session(), Some(S));
    // ...and after losing it accepts a restarted JobManager's new session.
    r.handle(RegistrationEvent::ConnectionLost);
    assert_eq!(r.session(), None);
    assert_eq!(
        r.handle(RegistrationEvent::Response {
            attempt: 2,
            response: ack(STALE),
        }),
        RegistrationAction::Registered {
            instance_id: I,
            leader_session_id: STALE
        }
    );

    // Retrieved: the session named by leader retrieval stays binding.
    let (mut r, _) = in_phase("registered");
    r.handle(RegistrationEvent::ConnectionLost);
    assert_eq!(r.session(), Some(S));
}
