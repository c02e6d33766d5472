use futures_util::future::join_all;
use tokio::io::{AsyncReadExt, DuplexStream, duplex};
use tokio_util::codec::Encoder;

use super::*;
use crate::base::address::JOB_MANAGER;
use crate::base::ids::{ClusterId, JobId};
use crate::messages::job_manager::{JobError, JobManagerMessage, RequestJobStatus};
use crate::messages::payload::{Envelope, Payload};
use crate::messages::reply::Reply;
use crate::transport::handshake::Secret;

/// The connection under test carries Flint's protocol.
type Connection = super::Connection<Payload>;
type Inbound = super::Inbound<Payload>;

const SECRET: &[u8] = b"correct horse battery staple";
const TEST_ASK_TIMEOUT: Duration = Duration::from_secs(30);
const MAX_FRAME: usize = 64 * 1024;
/// Far more than any test writes before the other side reads.
const PIPE: usize = 64 * 1024;
/// How long a test waits for something that should happen at once. Every test runs on the
/// paused clock, so a hang turns into a failure after this much virtual time.
const PATIENCE: Duration = Duration::from_secs(3600);

fn handshake_config(node: &str) -> HandshakeConfig {
    HandshakeConfig {
        cluster_id: ClusterId::new("test-cluster"),
        node_id: node.to_owned(),
        secret: Secret::from_bytes(SECRET),
        timeout: Duration::from_secs(5),
    }
}

fn config(node: &str) -> ConnectionConfig {
    ConnectionConfig {
        max_frame: MAX_FRAME,
        outbound_queue: 16,
        ask_timeout: TEST_ASK_TIMEOUT,
        max_pending_asks: 1024,
        ..ConnectionConfig::new(handshake_config(node))
    }
}

/// A message that carries a number, so order and matching can be checked.
fn status(n: u128) -> Payload {
    JobManagerMessage::from(RequestJobStatus {
        job_id: JobId::from_u128(n),
    })
    .into()
}

fn job_of(payload: &Payload) -> u128 {
    match payload {
        Payload::JobManager(JobManagerMessage::RequestJobStatus(request)) => {
            request.job_id.as_u128()
        }
        other => panic!("expected a RequestJobStatus, got {other:?}"),
    }
}

/// An answer that carries the number back.
fn answer(n: u128) -> Payload {
    Payload::Reply(Reply::RequestJobStatus(Err(JobError::UnknownJob(
        JobId::from_u128(n),
    ))))
}

fn answered(reply: &Payload) -> u128 {
    match reply {
        Payload::Reply(Reply::RequestJobStatus(Err(JobError::UnknownJob(job_id)))) => {
            job_id.as_u128()
        }
        other => panic!("expected an UnknownJob answer, got {other:?}"),
    }
}

fn tell_of(n: u128) -> Envelope {
    Envelope {
        target: JOB_MANAGER.into(),
        sender: Some(ActorAddress::new("a", "taskmanager/tm-1")),
        correlation: 0,
        kind: EnvelopeKind::Tell,
        payload: status(n),
    }
}

/// One end of a connection under test: its handle and what its dispatcher receives.
struct End {
    conn: Connection,
    inbound: mpsc::Receiver<Inbound>,
}

impl End {
    async fn next(&mut self) -> Inbound {
        tokio::time::timeout(PATIENCE, self.inbound.recv())
            .await
            .expect("something arrives")
            .expect("the connection reports PeerDown before its sender goes")
    }

    async fn next_envelope(&mut self) -> Envelope {
        match self.next().await {
            Inbound::Envelope { peer, envelope } => {
                assert_eq!(peer, self.conn.peer());
                envelope
            }
            other => panic!("expected an envelope, got {other:?}"),
        }
    }

    async fn peer_down(&mut self) -> CloseReason {
        match self.next().await {
            Inbound::PeerDown { peer, reason } => {
                assert_eq!(peer, self.conn.peer());
                reason
            }
            other => panic!("expected PeerDown, got {other:?}"),
        }
    }
}

/// An admission that takes every proven peer.
async fn admit_all(_peer: String) -> Result<(), String> {
    Ok(())
}

/// [`dial`] and [`accept`] on both ends of a duplex pipe at once: "a" dials "b".
async fn establish_pair(
    a: ConnectionConfig,
    b: ConnectionConfig,
) -> (Result<End, ConnectionError>, Result<End, ConnectionError>) {
    let (near, far) = duplex(PIPE);
    let (a_sink, a_inbound) = mpsc::channel(8);
    let (b_sink, b_inbound) = mpsc::channel(8);
    let (mut a_rng, mut b_rng) = (NodeRng::seed_from_u64(1), NodeRng::seed_from_u64(2));
    let dialled = b.handshake.node_id.clone();
    let (a, b) = tokio::join!(
        dial(near, &dialled, a, &mut a_rng, a_sink),
        accept(far, b, &mut b_rng, admit_all, b_sink),
    );
    (
        a.map(|conn| End {
            conn,
            inbound: a_inbound,
        }),
        b.map(|conn| End {
            conn,
            inbound: b_inbound,
        }),
    )
}

async fn pair_with(a: ConnectionConfig) -> (End, End) {
    let (a, b) = establish_pair(a, config("b")).await;
    (a.expect("a established"), b.expect("b established"))
}

async fn pair() -> (End, End) {
    pair_with(config("a")).await
}

/// A connection ("a", the acceptor) whose peer is driven by hand: the test shook hands
/// with `handshake::initiate` itself and owns the raw stream, positioned after the verdict.
async fn raw_peer(config: ConnectionConfig, pipe: usize) -> (End, DuplexStream) {
    let (near, mut raw) = duplex(pipe);
    let (sink, inbound) = mpsc::channel(8);
    let (mut ours, mut theirs) = (NodeRng::seed_from_u64(1), NodeRng::seed_from_u64(2));
    let hand = handshake_config("raw");
    let (conn, shaken) = tokio::join!(
        accept(near, config, &mut ours, admit_all, sink),
        handshake::initiate(&mut raw, &hand, "a", &mut theirs),
    );
    assert_eq!(shaken.expect("raw handshake").peer_node_id, "a");
    let conn = conn.expect("a established");
    assert_eq!(conn.peer(), "raw");
    (End { conn, inbound }, raw)
}

/// Lets the connection's tasks run until they block.
async fn settle() {
    for _ in 0..32 {
        tokio::task::yield_now().await;
    }
}

fn ask_of(
    conn: &Connection,
    n: u128,
) -> impl Future<Output = Result<Payload, ConnectionError>> + use<> {
    conn.ask(JOB_MANAGER.into(), None, status(n))
}

// ---- handshake ----

#[actix::test]
async fn both_sides_learn_the_others_node_id() {
    tokio::time::pause();
    let (a, b) = pair().await;
    assert_eq!(a.conn.peer(), "b");
    assert_eq!(b.conn.peer(), "a");
    assert!(a.conn.close_reason().is_none());
    assert!(b.conn.close_reason().is_none());
}

#[actix::test]
async fn a_wrong_secret_fails_both_sides_with_a_handshake_error() {
    tokio::time::pause();
    let mut other = config("b");
    other.handshake.secret = Secret::from_bytes(b"another secret".to_vec());
    let (a, b) = establish_pair(config("a"), other).await;
    // The acceptor proves first; the dialler finds its proof wrong and hangs up without
    // proving anything itself.
    match a.map(|_| ()) {
        Err(error @ ConnectionError::Handshake(HandshakeError::BadProof)) => {
            assert!(!error.is_retryable());
        }
        other => panic!("expected a BadProof handshake error, got {other:?}"),
    }
    match b.map(|_| ()) {
        Err(ConnectionError::Handshake(HandshakeError::Closed)) => {}
        other => panic!("expected the dialler to hang up, got {other:?}"),
    }
}

#[actix::test]
async fn an_acceptor_that_does_not_admit_the_peer_tells_it_why() {
    tokio::time::pause();
    let (near, far) = duplex(PIPE);
    let (a_sink, _a_inbound) = mpsc::channel::<Inbound>(8);
    let (b_sink, _b_inbound) = mpsc::channel::<Inbound>(8);
    let (mut a_rng, mut b_rng) = (NodeRng::seed_from_u64(1), NodeRng::seed_from_u64(2));
    let refuse = |peer: String| async move { Err(format!("{peer} is not welcome")) };
    let (a, b) = tokio::join!(
        dial(near, "b", config("a"), &mut a_rng, a_sink),
        accept(far, config("b"), &mut b_rng, refuse, b_sink),
    );
    match a {
        Err(ConnectionError::Handshake(HandshakeError::RefusedByPeer { reason })) => {
            assert_eq!(reason, "a is not welcome");
        }
        other => panic!("expected RefusedByPeer, got {other:?}"),
    }
    match b {
        Err(ConnectionError::Handshake(HandshakeError::NotAdmitted { peer, reason })) => {
            assert_eq!((peer.as_str(), reason.as_str()), ("a", "a is not welcome"));
        }
        other => panic!("expected NotAdmitted, got {other:?}"),
    }
}

// ---- asks and tells ----

#[actix::test]
async fn envelopes_and_frame_bytes_are_counted_on_both_sides() {
    tokio::time::pause();
    let (a_metrics, b_metrics) = (TransportMetrics::new(), TransportMetrics::new());
    let (a, b) = establish_pair(
        ConnectionConfig {
            metrics: a_metrics.clone(),
            ..config("a")
        },
        ConnectionConfig {
            metrics: b_metrics.clone(),
            ..config("b")
        },
    )
    .await;
    let (a, mut b) = (a.expect("a established"), b.expect("b established"));
    assert_eq!(
        a_metrics.messages_out.get(),
        0,
        "handshakes are not envelopes"
    );

    a.conn.tell(tell_of(1)).expect("queued");
    let asked = ask_of(&a.conn, 2);
    b.next_envelope().await;
    let ask = b.next_envelope().await;
    b.conn.reply(ask.correlation, answer(2)).expect("queued");
    assert_eq!(answered(&asked.await.expect("the reply")), 2);

    let frame = |envelope: &Envelope| (HEADER_LEN + envelope.encode().unwrap().len()) as u64;
    let sent = frame(&tell_of(1)) + frame(&ask);
    assert_eq!(
        (a_metrics.messages_out.get(), a_metrics.bytes_out.get()),
        (2, sent)
    );
    assert_eq!(
        (b_metrics.messages_in.get(), b_metrics.bytes_in.get()),
        (2, sent)
    );
    assert_eq!(b_metrics.messages_out.get(), 1, "the reply");
    assert_eq!(a_metrics.messages_in.get(), 1, "the reply");
    assert_eq!(a_metrics.bytes_in.get(), b_metrics.bytes_out.get());
    assert!(a_metrics.bytes_in.get() > HEADER_LEN as u64);
}

#[actix::test]
async fn an_ask_reaches_the_remote_actor_and_its_reply_comes_back() {
    tokio::time::pause();
    let (a, mut b) = pair().await;
    let sender = ActorAddress::new("a", "taskmanager/tm-1");
    // Not polled yet: the ask leaves when it is made.
    let asked = a
        .conn
        .ask(JOB_MANAGER.into(), Some(sender.clone()), status(7));
    assert_eq!(a.conn.pending_asks(), 1);

    let envelope = b.next_envelope().await;
    assert_eq!(envelope.target, JOB_MANAGER);
    assert_eq!(envelope.kind, EnvelopeKind::Ask);
    assert_eq!(envelope.payload, status(7));
    assert_eq!(envelope.sender, Some(sender));
    assert_ne!(envelope.correlation, 0, "0 is the tells' correlation");
    b.conn
        .reply(envelope.correlation, answer(7))
        .expect("queued");

    assert_eq!(asked.await.expect("answered"), answer(7));
    assert_eq!(a.conn.pending_asks(), 0);
}

#[actix::test]
async fn a_hundred_concurrent_asks_answered_out_of_order_are_matched_by_correlation() {
    tokio::time::pause();
    // Room for every ask and every reply at once: this test is about matching, not
    // backpressure.
    let roomy = |node| ConnectionConfig {
        outbound_queue: 128,
        ..config(node)
    };
    let (a, b) = establish_pair(roomy("a"), roomy("b")).await;
    let (a, mut b) = (a.expect("a established"), b.expect("b established"));
    let asks: Vec<_> = (0..100).map(|n| ask_of(&a.conn, n)).collect();
    assert_eq!(a.conn.pending_asks(), 100);

    let mut received = Vec::new();
    for _ in 0..100 {
        let envelope = b.next_envelope().await;
        assert_eq!(envelope.kind, EnvelopeKind::Ask);
        received.push((envelope.correlation, job_of(&envelope.payload)));
    }
    let correlations: std::collections::BTreeSet<u64> = received
        .iter()
        .map(|(correlation, _)| *correlation)
        .collect();
    assert_eq!(
        correlations.len(),
        100,
        "every ask has its own correlation id"
    );

    // Answer in a seeded shuffled order.
    let mut rng = NodeRng::seed_from_u64(0x5eed);
    for i in (1..received.len()).rev() {
        let j = (rng.next_u64() % (i as u64 + 1)) as usize;
        received.swap(i, j);
    }
    assert_ne!(received[0].1, 0, "the shuffle moved something");
    for (correlation, n) in &received {
        b.conn.reply(*correlation, answer(*n)).expect("queued");
    }

    let replies = tokio::time::timeout(PATIENCE, join_all(asks))
        .await
        .expect("every ask answered");
    for (n, reply) in replies.into_iter().enumerate() {
        assert_eq!(answered(&reply.expect("answered")), n as u128);
    }
    assert_eq!(a.conn.pending_asks(), 0);
}

#[actix::test]
async fn a_thousand_tells_arrive_in_order_through_small_queues() {
    tokio::time::pause();
    let (a, mut b) = pair().await;
    let mut refused = 0;
    let sending = async {
        for n in 0..1000 {
            loop {
                match a.conn.tell(tell_of(n)) {
                    Ok(()) => break,
                    Err(ConnectionError::QueueFull { .. }) => {
                        refused += 1;
                        tokio::task::yield_now().await;
                    }
                    Err(error) => panic!("tell {n}: {error}"),
                }
            }
        }
    };
    let receiving = async {
        for n in 0..1000 {
            let envelope = b.next_envelope().await;
            assert_eq!(envelope, tell_of(n));
        }
    };
    tokio::join!(sending, receiving);
    assert!(refused > 0, "the 16-envelope queue pushed back");
}

/// Frames of [`DIRECT_BYTES`] and more skip the batch; they must still go out in order
/// with the small ones around them.
#[actix::test]
async fn large_frames_written_directly_keep_their_place_among_small_ones() {
    tokio::time::pause();
    let (a, mut b) = pair().await;
    let large = |n: u128| Envelope {
        sender: Some(ActorAddress::new(
            "a",
            "x".repeat(DIRECT_BYTES + n as usize),
        )),
        ..tell_of(n)
    };
    let sent: Vec<Envelope> = (0..40)
        .map(|n| if n % 3 == 1 { large(n) } else { tell_of(n) })
        .collect();
    assert!(sent[1].encode().expect("encodes").len() >= DIRECT_BYTES);
    let sending = async {
        for envelope in &sent {
            loop {
                match a.conn.tell(envelope.clone()) {
                    Ok(()) => break,
                    Err(ConnectionError::QueueFull { .. }) => tokio::task::yield_now().await,
                    Err(error) => panic!("tell: {error}"),
                }
            }
        }
    };
    let receiving = async {
        for envelope in &sent {
            assert_eq!(&b.next_envelope().await, envelope);
        }
    };
    tokio::join!(sending, receiving);
}

#[actix::test]
async fn an_unanswered_ask_times_out_and_its_late_reply_is_dropped() {
    tokio::time::pause();
    let (a, mut b) = pair().await;
    let started = Instant::now();
    let result = ask_of(&a.conn, 1).await;
    match result {
        Err(ref error @ ConnectionError::Timeout { ref peer, after }) => {
            assert_eq!((peer.as_str(), after), ("b", TEST_ASK_TIMEOUT));
            assert!(error.is_retryable());
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    let waited = started.elapsed();
    assert!(
        waited >= TEST_ASK_TIMEOUT && waited < TEST_ASK_TIMEOUT + Duration::from_secs(1),
        "{waited:?}"
    );
    assert_eq!(a.conn.pending_asks(), 0, "the timed-out ask is forgotten");

    // The remote actor answers late, and someone answers an ask that never was.
    let late = b.next_envelope().await;
    b.conn.reply(late.correlation, answer(1)).expect("queued");
    b.conn.reply(424_242, answer(2)).expect("queued");

    // Both are dropped; the connection stays up and keeps working. Replies travel in
    // order, so by the time this one is answered the late ones have been handled.
    let again = ask_of(&a.conn, 3);
    let envelope = b.next_envelope().await;
    assert_ne!(envelope.correlation, late.correlation);
    b.conn
        .reply(envelope.correlation, answer(3))
        .expect("queued");
    assert_eq!(answered(&again.await.expect("answered")), 3);
    assert!(a.conn.close_reason().is_none());
    assert_eq!(a.conn.pending_asks(), 0);
}

#[actix::test]
async fn asks_beyond_the_pending_bound_are_refused_and_a_dropped_ask_frees_its_slot() {
    tokio::time::pause();
    let (a, _b) = pair_with(ConnectionConfig {
        max_pending_asks: 2,
        ..config("a")
    })
    .await;
    let first = ask_of(&a.conn, 1);
    let _second = ask_of(&a.conn, 2);
    match ask_of(&a.conn, 3).await {
        Err(
            ref error @ ConnectionError::QueueFull {
                queue: BoundedQueue::PendingAsks,
                capacity: 2,
                ..
            },
        ) => assert!(error.is_retryable()),
        other => panic!("expected QueueFull, got {other:?}"),
    }
    assert_eq!(a.conn.pending_asks(), 2);
    drop(first);
    assert_eq!(a.conn.pending_asks(), 1, "a cancelled ask leaves the map");
    let _fourth = ask_of(&a.conn, 4);
    assert_eq!(a.conn.pending_asks(), 2);
}

#[actix::test]
async fn an_envelope_over_the_frame_limit_is_the_senders_error_only() {
    tokio::time::pause();
    let (a, b) = pair_with(ConnectionConfig {
        max_frame: 16,
        ..config("a")
    })
    .await;
    match a.conn.tell(tell_of(1)) {
        Err(
            ref error @ ConnectionError::Frame {
                source: FrameError::PayloadTooLarge { max: 16, .. },
                ..
            },
        ) => assert!(!error.is_retryable()),
        other => panic!("expected a frame error, got {other:?}"),
    }
    assert!(matches!(
        ask_of(&a.conn, 1).await,
        Err(ConnectionError::Frame { .. })
    ));
    assert_eq!(a.conn.pending_asks(), 0, "the refused ask is not left open");
    assert!(a.conn.close_reason().is_none());
    // Envelopes that fit still flow: a reply to an ask "b" never made, which "b" drops.
    let reply_sized = Envelope {
        target: String::new(),
        sender: None,
        correlation: 0,
        kind: EnvelopeKind::Reply,
        payload: Payload::Reply(Reply::Unit(())),
    };
    assert!(reply_sized.encode().expect("encodes").len() <= 16);
    a.conn
        .reply(5, Payload::Reply(Reply::Unit(())))
        .expect("fits");
    settle().await;
    assert!(a.conn.close_reason().is_none());
    assert!(b.conn.close_reason().is_none());
}

// ---- the connection ending ----

#[actix::test]
async fn a_peer_that_closes_fails_pending_asks_at_once() {
    tokio::time::pause();
    let (mut a, mut b) = pair().await;
    let asked = ask_of(&a.conn, 1);
    let envelope = b.next_envelope().await;
    assert_eq!(envelope.kind, EnvelopeKind::Ask);

    let started = Instant::now();
    b.conn.close("test is over");
    let result = tokio::time::timeout(PATIENCE, asked).await.expect("fails");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "failed at once, not at the {TEST_ASK_TIMEOUT:?} ask timeout"
    );
    match result {
        Err(
            ref error @ ConnectionError::PeerDown {
                ref peer,
                reason: CloseReason::PeerClosed,
            },
        ) => {
            assert_eq!(peer, "b");
            assert!(error.is_retryable());
        }
        other => panic!("expected PeerDown, got {other:?}"),
    }
    assert!(matches!(a.peer_down().await, CloseReason::PeerClosed));
    assert!(matches!(a.conn.closed().await, CloseReason::PeerClosed));
    assert!(matches!(
        a.conn.tell(tell_of(2)),
        Err(ConnectionError::Closed { ref peer }) if peer == "b"
    ));
    assert!(matches!(
        ask_of(&a.conn, 3).await,
        Err(ConnectionError::Closed { .. })
    ));
    assert!(matches!(
        a.conn.reply(1, Payload::Reply(Reply::Unit(()))),
        Err(ConnectionError::Closed { .. })
    ));

    // The closing side knows its own reason, and refuses sends too.
    let local = |reason: &CloseReason| matches!(reason, CloseReason::Local { reason } if reason == "test is over");
    assert!(local(&b.conn.closed().await));
    assert!(local(&b.peer_down().await));
    assert!(matches!(
        b.conn.tell(tell_of(4)),
        Err(ConnectionError::Closed { .. })
    ));
    // Closing again changes nothing.
    b.conn.close("again");
    assert!(local(&b.conn.close_reason().expect("closed")));
}

#[actix::test]
async fn a_peer_whose_stream_drops_is_reported_down() {
    tokio::time::pause();
    let (mut a, raw) = raw_peer(config("a"), PIPE).await;
    let asked = ask_of(&a.conn, 1);
    drop(raw);
    let reason = a.peer_down().await;
    // Reading sees EOF or writing the ask sees the broken pipe, whichever runs first.
    assert!(
        matches!(reason, CloseReason::PeerClosed | CloseReason::Write(_)),
        "{reason:?}"
    );
    assert!(matches!(asked.await, Err(ConnectionError::PeerDown { .. })));
    assert!(matches!(
        a.conn.tell(tell_of(2)),
        Err(ConnectionError::Closed { .. })
    ));
}

#[actix::test]
async fn dropping_every_handle_closes_the_connection() {
    tokio::time::pause();
    let (a, mut b) = pair().await;
    let End {
        conn,
        inbound: mut a_inbound,
    } = a;
    let clone = conn.clone();
    drop(conn);
    settle().await;
    assert!(clone.close_reason().is_none(), "a clone keeps it open");
    drop(clone);
    assert!(matches!(b.peer_down().await, CloseReason::PeerClosed));
    match a_inbound.recv().await {
        Some(Inbound::PeerDown {
            reason: CloseReason::Released,
            ..
        }) => {}
        other => panic!("expected PeerDown(Released), got {other:?}"),
    }
}

#[actix::test]
async fn a_dispatcher_that_is_gone_closes_the_connection() {
    tokio::time::pause();
    let (mut a, b) = pair().await;
    let End {
        conn: b_conn,
        inbound,
    } = b;
    drop(inbound);
    a.conn.tell(tell_of(1)).expect("queued");
    assert!(matches!(a.peer_down().await, CloseReason::PeerClosed));
    assert!(matches!(b_conn.closed().await, CloseReason::DispatcherGone));
}

// ---- probes ----

#[actix::test]
async fn a_live_peer_answers_a_probe_by_itself_and_a_silent_or_closed_one_does_not() {
    tokio::time::pause();
    let patience = Duration::from_secs(1);
    let (a, mut b) = pair().await;
    assert!(a.conn.probe(patience).await);
    assert!(b.conn.probe(patience).await);
    // Answered by the connection itself: nothing reached either dispatcher.
    settle().await;
    assert!(b.inbound.try_recv().is_err());
    // A peer that holds the connection but never reads does not answer: not alive.
    let (raw_end, _raw) = raw_peer(config("a"), PIPE).await;
    let start = tokio::time::Instant::now();
    assert!(!raw_end.conn.probe(patience).await);
    let waited = start.elapsed();
    assert!(
        waited >= patience && waited < patience + Duration::from_millis(10),
        "{waited:?}"
    );
    // Nor does a closed connection, from either end.
    b.conn.close("test");
    assert!(!b.conn.probe(patience).await);
    assert!(!a.conn.probe(patience).await);
}

// ---- a peer that sends garbage ----

/// Asks something on `a`, lets `send_garbage` write to the raw stream, and checks the
/// connection closes with PeerDown for both the ask and the dispatcher, and returns why.
async fn after_garbage(
    config: ConnectionConfig,
    send_garbage: impl AsyncFnOnce(DuplexStream),
) -> CloseReason {
    let (mut a, mut raw) = raw_peer(config, PIPE).await;
    let asked = ask_of(&a.conn, 1);
    // The raw peer reads the ask first, so the garbage (not a write into a pipe the peer
    // has dropped) is what closes the connection.
    let mut frames = FramedRead::new(&mut raw, FrameCodec::new(MAX_FRAME));
    let frame = tokio::time::timeout(PATIENCE, frames.next())
        .await
        .expect("the ask arrives")
        .expect("a frame")
        .expect("well formed");
    assert_eq!(
        Envelope::decode(&frame).expect("an envelope").kind,
        EnvelopeKind::Ask
    );
    assert!(frames.read_buffer().is_empty());
    drop(frames);
    send_garbage(raw).await;
    let reason = a.peer_down().await;
    match asked.await {
        Err(ConnectionError::PeerDown { reason: failed, .. }) => {
            assert_eq!(failed.to_string(), reason.to_string());
        }
        other => panic!("expected PeerDown, got {other:?}"),
    }
    assert!(matches!(
        a.conn.tell(tell_of(2)),
        Err(ConnectionError::Closed { .. })
    ));
    assert_eq!(a.conn.closed().await.to_string(), reason.to_string());
    reason
}

/// Writes `bytes` and keeps the stream open until the connection has closed it, so the
/// reason is the bytes and not an EOF.
async fn write_and_wait(mut raw: DuplexStream, bytes: Vec<u8>) {
    use tokio::io::AsyncWriteExt;
    raw.write_all(&bytes).await.expect("written");
    let mut sink = Vec::new();
    // Ends when `a` drops its end: everything `a` wrote, then EOF.
    tokio::time::timeout(PATIENCE, raw.read_to_end(&mut sink))
        .await
        .expect("a closes its end")
        .expect("reads");
}

#[actix::test]
async fn a_frame_of_random_bytes_closes_the_connection() {
    tokio::time::pause();
    let mut rng = NodeRng::seed_from_u64(0x9a4b);
    let mut garbage = 64u32.to_be_bytes().to_vec();
    garbage.extend((0..64).map(|_| rng.next_u64() as u8));
    let reason = after_garbage(config("a"), async |raw| write_and_wait(raw, garbage).await).await;
    assert!(
        matches!(reason, CloseReason::Envelope(ref error) if matches!(**error, EnvelopeError::Codec(_))),
        "{reason:?}"
    );
}

#[actix::test]
async fn random_bytes_then_eof_close_the_connection_without_a_panic() {
    tokio::time::pause();
    for seed in 0..16 {
        let mut rng = NodeRng::seed_from_u64(seed);
        let garbage: Vec<u8> = (0..256).map(|_| rng.next_u64() as u8).collect();
        let reason = after_garbage(config("a"), async |mut raw: DuplexStream| {
            use tokio::io::AsyncWriteExt;
            raw.write_all(&garbage).await.expect("written");
        })
        .await;
        assert!(
            matches!(reason, CloseReason::Read(_) | CloseReason::Envelope(_)),
            "seed {seed}: {reason:?}"
        );
    }
}

#[actix::test]
async fn an_oversized_length_prefix_closes_the_connection() {
    tokio::time::pause();
    let reason = after_garbage(config("a"), async |raw| {
        write_and_wait(raw, u32::MAX.to_be_bytes().to_vec()).await
    })
    .await;
    match reason {
        CloseReason::Read(ref error) => assert!(
            matches!(**error, FrameError::TooLarge { length, max: MAX_FRAME } if length == u32::MAX as usize),
            "{error:?}"
        ),
        other => panic!("expected a read error, got {other:?}"),
    }
    assert!(reason.is_fault());
    assert!(
        Chain(&reason)
            .to_string()
            .contains("over the 65536-byte limit"),
        "the logged line names the cause: {}",
        Chain(&reason)
    );
}

#[actix::test]
async fn a_frame_cut_short_by_eof_closes_as_truncated() {
    tokio::time::pause();
    let reason = after_garbage(config("a"), async |mut raw: DuplexStream| {
        use tokio::io::AsyncWriteExt;
        raw.write_all(&[0, 0, 0, 100, 1, 2, 3])
            .await
            .expect("written");
    })
    .await;
    assert!(
        matches!(reason, CloseReason::Read(ref error) if matches!(**error, FrameError::Truncated { buffered: 7 })),
        "{reason:?}"
    );
}

#[actix::test]
async fn an_envelope_that_fails_validation_closes_the_connection() {
    tokio::time::pause();
    // A JobManager message addressed to a TaskManager: it decodes, but does not validate.
    let mismatched = Envelope {
        target: "taskmanager/tm-1".into(),
        ..tell_of(1)
    };
    let mut frame = BytesMut::new();
    FrameCodec::new(MAX_FRAME)
        .encode(mismatched.encode().expect("encodes"), &mut frame)
        .expect("frames");
    let reason = after_garbage(config("a"), async |raw| {
        write_and_wait(raw, frame.to_vec()).await
    })
    .await;
    assert!(
        matches!(reason, CloseReason::Envelope(ref error) if matches!(**error, EnvelopeError::Mismatch { .. })),
        "{reason:?}"
    );
}

// ---- backpressure ----

#[actix::test]
async fn a_writer_blocked_by_a_peer_that_does_not_read_fills_the_queue() {
    tokio::time::pause();
    let (a, mut raw) = raw_peer(
        ConnectionConfig {
            outbound_queue: 1,
            ..config("a")
        },
        512,
    )
    .await;
    let mut sent = 0;
    let refused = loop {
        match a.conn.tell(tell_of(sent)) {
            Ok(()) => sent += 1,
            Err(error) => break error,
        }
        settle().await;
        assert!(sent < 1000, "the writer never blocked");
    };
    match refused {
        ConnectionError::QueueFull {
            ref peer,
            queue: BoundedQueue::Outbound,
            capacity: 1,
        } => {
            assert_eq!(peer, "raw");
            assert!(refused.is_retryable());
        }
        other => panic!("expected QueueFull, got {other:?}"),
    }
    assert!(sent > 2, "the pipe took a few before it filled ({sent})");
    // Still full however long the writer gets: it waits for the peer, not for us.
    settle().await;
    assert!(matches!(
        a.conn.tell(tell_of(sent)),
        Err(ConnectionError::QueueFull { .. })
    ));
    assert!(
        a.conn.close_reason().is_none(),
        "backpressure is not a failure"
    );

    // Once the peer reads, everything accepted arrives in order, and there is room again.
    let mut frames = FramedRead::new(&mut raw, FrameCodec::new(MAX_FRAME));
    for n in 0..sent {
        let frame = tokio::time::timeout(PATIENCE, frames.next())
            .await
            .expect("arrives")
            .expect("a frame")
            .expect("well formed");
        assert_eq!(Envelope::decode(&frame).expect("an envelope"), tell_of(n));
    }
    a.conn.tell(tell_of(sent)).expect("room again");
}

// ---- errors ----

#[test]
fn only_errors_a_later_try_can_fix_are_retryable() {
    let peer = || "b".to_owned();
    let codec_error = crate::base::codec::decode::<Envelope>(&[0xff]).expect_err("garbage");
    let cases = [
        (
            ConnectionError::Handshake(HandshakeError::Closed),
            true,
            "connection handshake failed",
        ),
        (
            ConnectionError::Handshake(HandshakeError::BadProof),
            false,
            "connection handshake failed",
        ),
        (
            ConnectionError::QueueFull {
                peer: peer(),
                queue: BoundedQueue::Outbound,
                capacity: 16,
            },
            true,
            "the outbound queue to b is full (16)",
        ),
        (
            ConnectionError::Closed { peer: peer() },
            true,
            "the connection to b is closed",
        ),
        (
            ConnectionError::PeerDown {
                peer: peer(),
                reason: CloseReason::PeerClosed,
            },
            true,
            "the connection to b went down",
        ),
        (
            ConnectionError::Timeout {
                peer: peer(),
                after: TEST_ASK_TIMEOUT,
            },
            true,
            "no reply from b within 30s",
        ),
        (
            ConnectionError::Encode {
                peer: peer(),
                source: codec_error,
            },
            false,
            "cannot encode an envelope for b",
        ),
        (
            ConnectionError::Frame {
                peer: peer(),
                source: FrameError::EmptyPayload,
            },
            false,
            "does not fit a frame",
        ),
    ];
    for (error, retryable, text) in cases {
        assert_eq!(error.is_retryable(), retryable, "{error:?}");
        assert!(error.to_string().contains(text), "{error} / {text}");
    }
    let down = ConnectionError::PeerDown {
        peer: peer(),
        reason: CloseReason::Local {
            reason: "shutting down".into(),
        },
    };
    assert_eq!(
        Chain(&down).to_string(),
        "the connection to b went down while an ask waited: closed by this node: shutting down"
    );
}

/// A data answer whose large buffers go out from their own memory behind the envelope's bytes
/// (in segments, copied into the batch when the frame is small, written vectored when large)
/// arrives as it was sent, among answers sent whole.
#[actix::test]
async fn answers_with_buffers_sent_in_segments_arrive_whole_and_in_place() {
    use crate::messages::buffer::Buffer;
    use crate::messages::task_manager::{ChannelResponse, PartitionData};
    tokio::time::pause();
    let (a, mut b) = pair().await;
    let data = |sizes: &[usize]| {
        let buffers = sizes
            .iter()
            .enumerate()
            .map(|(n, &len)| Buffer::new(n as u32, bytes::Bytes::from(vec![n as u8 + 7; len])))
            .collect();
        Payload::Reply(Reply::PartitionData(PartitionData {
            seq: sizes.len() as u64,
            channels: vec![(
                3,
                ChannelResponse::Data {
                    buffers,
                    next_buffer: 1,
                    finished: false,
                    backlog: 0,
                    eager: 0,
                },
            )],
            notices: Vec::new(),
            forgotten: false,
        }))
    };
    let answers = [
        data(&[100, DETACH_BYTES, 20 << 10, 10]),
        data(&[10]),
        data(&[DETACH_BYTES + 1]),
        data(&[30 << 10, 30 << 10]),
        data(&[DETACH_BYTES - 1, 1]),
    ];
    let asked: Vec<_> = (0..answers.len() as u128)
        .map(|n| ask_of(&a.conn, n))
        .collect();
    for answer in &answers {
        let envelope = b.next_envelope().await;
        b.conn
            .reply(envelope.correlation, answer.clone())
            .expect("queued");
    }
    for (asked, answer) in asked.into_iter().zip(&answers) {
        assert_eq!(&asked.await.expect("answered"), answer);
    }
}

/// A writer that takes vectored writes a few bytes at a time, as a full socket buffer does.
struct Trickle {
    written: Vec<u8>,
    vectored_writes: usize,
}

impl AsyncWrite for Trickle {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<io::Result<usize>> {
        let n = buf.len().min(7);
        self.written.extend_from_slice(&buf[..n]);
        std::task::Poll::Ready(Ok(n))
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> std::task::Poll<io::Result<usize>> {
        self.vectored_writes += 1;
        // Up to 5,000 bytes across the slices, ending inside one when it can.
        let mut left = 5_000;
        for buf in bufs {
            let n = buf.len().min(left);
            self.written.extend_from_slice(&buf[..n]);
            left -= n;
            if left == 0 {
                break;
            }
        }
        std::task::Poll::Ready(Ok(5_000 - left))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}

/// Frames in segments written vectored, each write taking part of the pieces and ending inside
/// one, put every byte on the stream in order, among frames sent whole.
#[actix::test]
async fn frames_in_segments_written_in_parts_reach_the_stream_in_order() {
    let piece = |n: u8, len: usize| bytes::Bytes::from(vec![n; len]);
    let frames = vec![
        OutFrame::Whole(piece(1, 100)),
        OutFrame::Segments {
            parts: vec![piece(2, 3), piece(3, 40_000), piece(4, 5), piece(5, 9_999)],
            len: 50_007,
        },
        OutFrame::Segments {
            parts: vec![piece(6, 10), piece(7, 4_096)],
            len: 4_106,
        },
        OutFrame::Whole(piece(8, DIRECT_BYTES)),
    ];
    let expected: Vec<u8> = frames.iter().flat_map(|frame| frame.to_bytes()).collect();
    let (sender, mut queue) = mpsc::channel(8);
    let mut frames = frames.into_iter();
    let first = frames.next().expect("a frame");
    for frame in frames {
        sender.try_send(frame).expect("room");
    }
    let mut writer = Trickle {
        written: Vec::new(),
        vectored_writes: 0,
    };
    let mut batch = BytesMut::new();
    write_frames(&mut writer, first, &mut queue, &mut batch)
        .await
        .expect("written");
    assert_eq!(writer.written, expected);
    assert!(
        writer.vectored_writes >= 50_007 / 5_000,
        "{}",
        writer.vectored_writes
    );
}
