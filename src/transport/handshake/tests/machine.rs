//! The handshake's state machine on its own: the whole transition table, the guarded
//! transitions, two machines talking without a connection, and the proof's construction.

use super::*;
fn context(role: Role) -> Context {
    Context {
        role,
        own: peer_hello("me", 1),
        secret: Secret::from_bytes(SECRET),
        dialled: (role == Role::Initiator).then(|| "peer".to_owned()),
    }
}

/// Every state × event of one role: the next state's name, or "-" for an event refused as out
/// of order (→ Failed with `OutOfOrder` naming both).
fn check_table(role: Role, table: &[[&str; 7]; 11]) {
    use HandshakeEvent as E;
    use HandshakeState as S;
    let context = context(role);
    let peer = peer_hello("peer", 2);
    let peer_mac = mac(&context.secret, role.peer(), &peer, &context.own);
    let states = [
        S::SendHello,
        S::SendDial,
        S::AwaitHello,
        S::AwaitDial { peer: peer.clone() },
        S::SendProof { peer: peer.clone() },
        S::AwaitProof { peer: peer.clone() },
        S::Admitting { peer: peer.clone() },
        S::SendVerdict {
            peer: peer.clone(),
            refused: None,
        },
        S::AwaitVerdict { peer: peer.clone() },
        S::Established,
        S::Failed,
    ];
    let events = [
        E::Sent,
        E::HelloReceived(peer.clone()),
        E::DialReceived(Dial {
            node_id: "me".into(),
        }),
        E::ProofReceived(Proof { mac: peer_mac }),
        E::VerdictReceived(Verdict::Welcome),
        E::Admitted(Ok(())),
        E::Admitted(Err("no".into())),
    ];
    for (state, row) in states.iter().zip(table) {
        for (event, expected) in events.iter().zip(row) {
            let (next, action) = transition(&context, state.clone(), event.clone());
            let cell = format!("{role:?}: {} × {}", state.name(), event.name());
            if *expected == "-" {
                assert_eq!(next, S::Failed, "{cell}");
                match action {
                    HandshakeAction::Fail(HandshakeError::OutOfOrder { state: s, message }) => {
                        assert_eq!((s, message), (state.name(), event.name()), "{cell}");
                    }
                    other => panic!("{cell}: expected OutOfOrder, got {other:?}"),
                }
                continue;
            }
            assert_eq!(next.name(), *expected, "{cell}");
            match (&next, action) {
                (
                    S::AwaitHello | S::AwaitDial { .. } | S::AwaitProof { .. },
                    HandshakeAction::Receive,
                )
                | (S::AwaitVerdict { .. }, HandshakeAction::Receive) => {}
                (S::SendDial, HandshakeAction::Send(HandshakeMessage::Dial(dial))) => {
                    assert_eq!(dial.node_id, "peer", "{cell}");
                }
                (
                    S::SendProof { peer: kept },
                    HandshakeAction::Send(HandshakeMessage::Proof(sent)),
                ) => {
                    assert_eq!(kept, &peer, "{cell}");
                    let expected = proof(&context.secret, role, &context.own, &peer);
                    expected.verify_slice(&sent.mac).unwrap();
                }
                (S::Admitting { .. }, HandshakeAction::Admit(id)) => assert_eq!(id, "peer"),
                (
                    S::SendVerdict { refused, .. },
                    HandshakeAction::Send(HandshakeMessage::Verdict(verdict)),
                ) => match (refused, verdict) {
                    (None, Verdict::Welcome) => {}
                    (Some(reason), Verdict::Refused(sent)) => assert_eq!(reason, &sent),
                    other => panic!("{cell}: {other:?}"),
                },
                (S::Established, HandshakeAction::Done(established)) => {
                    assert_eq!(established.peer_node_id, "peer", "{cell}");
                }
                (next, action) => panic!("{cell}: {next:?} with {action:?}"),
            }
        }
    }
}

#[test]
fn the_whole_transition_table() {
    // Columns: Sent, Hello, Dial, Proof, Verdict, Admitted(Ok), Admitted(Err).
    let initiator: [[&str; 7]; 11] = [
        ["SendDial", "-", "-", "-", "-", "-", "-"],   // SendHello
        ["AwaitHello", "-", "-", "-", "-", "-", "-"], // SendDial
        ["-", "AwaitProof", "-", "-", "-", "-", "-"], // AwaitHello
        ["-", "-", "-", "-", "-", "-", "-"],          // AwaitDial
        ["AwaitVerdict", "-", "-", "-", "-", "-", "-"], // SendProof
        ["-", "-", "-", "SendProof", "-", "-", "-"],  // AwaitProof
        ["-", "-", "-", "-", "-", "-", "-"],          // Admitting
        ["-", "-", "-", "-", "-", "-", "-"],          // SendVerdict
        ["-", "-", "-", "-", "Established", "-", "-"], // AwaitVerdict
        ["-", "-", "-", "-", "-", "-", "-"],          // Established
        ["-", "-", "-", "-", "-", "-", "-"],          // Failed
    ];
    check_table(Role::Initiator, &initiator);
    let acceptor: [[&str; 7]; 11] = [
        ["AwaitHello", "-", "-", "-", "-", "-", "-"], // SendHello
        ["-", "-", "-", "-", "-", "-", "-"],          // SendDial
        ["-", "AwaitDial", "-", "-", "-", "-", "-"],  // AwaitHello
        ["-", "-", "SendProof", "-", "-", "-", "-"],  // AwaitDial
        ["AwaitProof", "-", "-", "-", "-", "-", "-"], // SendProof
        ["-", "-", "-", "Admitting", "-", "-", "-"],  // AwaitProof
        ["-", "-", "-", "-", "-", "SendVerdict", "SendVerdict"], // Admitting
        ["Established", "-", "-", "-", "-", "-", "-"], // SendVerdict
        ["-", "-", "-", "-", "-", "-", "-"],          // AwaitVerdict
        ["-", "-", "-", "-", "-", "-", "-"],          // Established
        ["-", "-", "-", "-", "-", "-", "-"],          // Failed
    ];
    check_table(Role::Acceptor, &acceptor);
}

#[test]
fn the_guarded_transitions_fail_on_a_bad_hello_dial_proof_or_verdict() {
    use HandshakeEvent as E;
    use HandshakeState as S;
    let acceptor = context(Role::Acceptor);
    let initiator = context(Role::Initiator);
    let fails = |context: &Context, state: S, event: E| -> HandshakeError {
        match transition(context, state, event) {
            (S::Failed, HandshakeAction::Fail(error)) => error,
            other => panic!("{other:?}"),
        }
    };
    let newer = Hello {
        protocol_version: PROTOCOL_VERSION + 1,
        ..peer_hello("peer", 2)
    };
    assert!(matches!(
        fails(&acceptor, S::AwaitHello, E::HelloReceived(newer)),
        HandshakeError::VersionMismatch { ours, theirs }
            if ours == PROTOCOL_VERSION && theirs == PROTOCOL_VERSION + 1
    ));
    let foreign = Hello {
        cluster_id: ClusterId::new("elsewhere"),
        ..peer_hello("peer", 2)
    };
    assert!(matches!(
        fails(&acceptor, S::AwaitHello, E::HelloReceived(foreign)),
        HandshakeError::WrongCluster { .. }
    ));
    // The dialler refuses anyone but the node it dialled, before any proof.
    assert!(matches!(
        fails(&initiator, S::AwaitHello, E::HelloReceived(peer_hello("y", 2))),
        HandshakeError::WrongPeer { ref dialled, ref claimed } if dialled == "peer" && claimed == "y"
    ));
    // The acceptor refuses a connection dialled to another node, before any proof.
    let awaiting_dial = S::AwaitDial {
        peer: peer_hello("peer", 2),
    };
    assert!(matches!(
        fails(&acceptor, awaiting_dial, E::DialReceived(Dial { node_id: "x".into() })),
        HandshakeError::NotDialled { ref peer, ref dialled } if peer == "peer" && dialled == "x"
    ));
    for context in [&acceptor, &initiator] {
        let awaiting = S::AwaitProof {
            peer: peer_hello("peer", 2),
        };
        assert!(matches!(
            fails(context, awaiting, E::ProofReceived(Proof { mac: [0; 32] })),
            HandshakeError::BadProof
        ));
    }
    let verdict = S::AwaitVerdict {
        peer: peer_hello("peer", 2),
    };
    assert!(matches!(
        fails(&initiator, verdict, E::VerdictReceived(Verdict::Refused("full".into()))),
        HandshakeError::RefusedByPeer { ref reason } if reason == "full"
    ));
    let refusing = S::SendVerdict {
        peer: peer_hello("peer", 2),
        refused: Some("full".into()),
    };
    assert!(matches!(
        fails(&acceptor, refusing, E::Sent),
        HandshakeError::NotAdmitted { ref peer, ref reason } if peer == "peer" && reason == "full"
    ));
}

#[test]
fn two_machines_agree_without_a_connection() {
    let (ci, ca) = (config("tm-1"), config("jm"));
    let (mut i, HandshakeAction::Send(i_hello)) = Handshake::initiator(&ci, "jm", &mut rng(1))
    else {
        panic!("a handshake starts by sending its Hello");
    };
    let (mut a, HandshakeAction::Send(a_hello)) = Handshake::acceptor(&ca, &mut rng(2)) else {
        panic!("a handshake starts by sending its Hello");
    };
    let HandshakeAction::Send(i_dial) = i.on(HandshakeEvent::Sent) else {
        panic!("the initiator names whom it dialled");
    };
    assert!(matches!(
        i.on(HandshakeEvent::Sent),
        HandshakeAction::Receive
    ));
    assert!(matches!(
        a.on(HandshakeEvent::Sent),
        HandshakeAction::Receive
    ));
    // The initiator waits for the acceptor's proof before it proves anything.
    assert!(matches!(i.on(a_hello.into()), HandshakeAction::Receive));
    assert!(matches!(a.on(i_hello.into()), HandshakeAction::Receive));
    let HandshakeAction::Send(a_proof) = a.on(i_dial.into()) else {
        panic!("a checked Hello and Dial are answered with a Proof");
    };
    assert!(matches!(
        a.on(HandshakeEvent::Sent),
        HandshakeAction::Receive
    ));
    let HandshakeAction::Send(i_proof) = i.on(a_proof.clone().into()) else {
        panic!("a verified proof is answered with a Proof");
    };
    assert_ne!(i_proof, a_proof);
    assert!(matches!(
        i.on(HandshakeEvent::Sent),
        HandshakeAction::Receive
    ));
    assert!(matches!(a.on(i_proof.into()), HandshakeAction::Admit(ref id) if id == "tm-1"));
    let HandshakeAction::Send(verdict) = a.on(HandshakeEvent::Admitted(Ok(()))) else {
        panic!("an admitted peer is welcomed");
    };
    assert!(
        matches!(a.on(HandshakeEvent::Sent), HandshakeAction::Done(e) if e.peer_node_id == "tm-1")
    );
    assert!(matches!(i.on(verdict.into()), HandshakeAction::Done(e) if e.peer_node_id == "jm"));
    assert_eq!(i.state(), &HandshakeState::Established);
    // Anything after the end fails the handshake, without a panic.
    assert!(matches!(
        i.on(HandshakeEvent::Sent),
        HandshakeAction::Fail(HandshakeError::OutOfOrder {
            state: "Established",
            ..
        })
    ));
    assert_eq!(i.state(), &HandshakeState::Failed);
}

#[test]
fn field_boundaries_cannot_shift_between_node_ids() {
    let secret = Secret::from_bytes(SECRET);
    let mac = |prover: &str, verifier: &str| {
        mac(
            &secret,
            Role::Initiator,
            &peer_hello(prover, 1),
            &peer_hello(verifier, 1),
        )
    };
    assert_ne!(mac("ab", "c"), mac("a", "bc"));
}

#[test]
fn hmac_key_preparation_matches_the_hmac_crate() {
    use hmac::Mac;
    use hmac::digest::KeyInit;
    for length in [0, 1, 32, 63, 64, 65, 200] {
        let bytes: Vec<u8> = (0..length).map(|i| i as u8).collect();
        let secret = Secret::from_bytes(bytes.clone());
        let mut ours = <HmacSha256 as KeyInit>::new(&secret.hmac_key().into());
        let mut reference = <HmacSha256 as Mac>::new_from_slice(&bytes).unwrap();
        ours.update(b"message");
        reference.update(b"message");
        assert_eq!(
            ours.finalize().into_bytes(),
            reference.finalize().into_bytes(),
            "key of {length} bytes"
        );
    }
}

#[test]
fn the_secret_never_shows_in_debug_output() {
    let secret = Secret::from_bytes(b"hunter2".to_vec());
    assert_eq!(format!("{secret:?}"), "Secret(***)");
    let config = HandshakeConfig {
        secret,
        ..config("me")
    };
    let shown = format!("{config:?} {config:#?}");
    assert!(!shown.contains("hunter2"), "{shown}");
    assert!(!shown.contains("104"), "{shown}"); // 'h' as a byte
}
