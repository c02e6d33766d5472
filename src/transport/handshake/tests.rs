use std::pin::Pin;
use std::task::{Context as TaskContext, Poll};

use hmac::Mac;
use serde::{Deserialize, Serialize};
use tokio::io::{DuplexStream, ReadBuf, duplex};

use super::machine::{Context, proof, transition};
use super::*;

mod floor;
mod machine;

const SECRET: &[u8] = b"correct horse battery staple";
const TIMEOUT: Duration = Duration::from_secs(5);
/// Far more than a handshake writes, so neither side ever blocks on a full pipe.
const PIPE: usize = 64 * 1024;

fn config(node: &str) -> HandshakeConfig {
    HandshakeConfig {
        cluster_id: ClusterId::new("test-cluster"),
        node_id: node.to_owned(),
        secret: Secret::from_bytes(SECRET),
        timeout: TIMEOUT,
    }
}

fn rng(seed: u64) -> NodeRng {
    NodeRng::seed_from_u64(seed)
}

async fn admit_all(_peer: String) -> Result<(), String> {
    Ok(())
}

/// The initiator on its own end of the connection, dialling `dialled`; it drops the stream when
/// it returns, as a real connection is closed when its handshake fails.
async fn initiator<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    config: HandshakeConfig,
    dialled: &str,
    mut rng: NodeRng,
) -> Result<Established, HandshakeError> {
    initiate(&mut stream, &config, dialled, &mut rng).await
}

/// The acceptor on its own end, admitting every proven peer.
async fn acceptor<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    config: HandshakeConfig,
    mut rng: NodeRng,
) -> Result<Established, HandshakeError> {
    accept(&mut stream, &config, &mut rng, admit_all).await
}

/// Either side; an initiator dials "peer" (what the scripted peers call themselves).
async fn side<S: AsyncRead + AsyncWrite + Unpin>(
    role: Role,
    stream: S,
    config: HandshakeConfig,
    rng: NodeRng,
) -> Result<Established, HandshakeError> {
    match role {
        Role::Initiator => initiator(stream, config, "peer", rng).await,
        Role::Acceptor => acceptor(stream, config, rng).await,
    }
}

/// A real initiator dialling the real acceptor's id.
async fn pair(
    initiator_config: HandshakeConfig,
    acceptor_config: HandshakeConfig,
) -> (
    Result<Established, HandshakeError>,
    Result<Established, HandshakeError>,
) {
    let (a, b) = duplex(PIPE);
    let dialled = acceptor_config.node_id.clone();
    tokio::join!(
        initiator(a, initiator_config, &dialled, rng(1)),
        acceptor(b, acceptor_config, rng(2)),
    )
}

/// The handshake messages in what one side wrote.
fn frames(stream_bytes: &[u8]) -> Vec<HandshakeMessage> {
    let mut messages = Vec::new();
    let mut rest = stream_bytes;
    while !rest.is_empty() {
        let length = u32::from_be_bytes(rest[..4].try_into().unwrap()) as usize;
        messages.push(codec::decode(&rest[4..4 + length]).unwrap());
        rest = &rest[4 + length..];
    }
    messages
}

fn proofs_in(stream_bytes: &[u8]) -> usize {
    frames(stream_bytes)
        .iter()
        .filter(|message| matches!(message, HandshakeMessage::Proof(_)))
        .count()
}

/// Records every byte written through it.
struct Recorder<S> {
    inner: S,
    written: Vec<u8>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Recorder<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Recorder<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(written)) = &poll {
            self.written.extend_from_slice(&buf[..*written]);
        }
        poll
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl<S> Recorder<S> {
    fn new(inner: S) -> Self {
        Self {
            inner,
            written: Vec::new(),
        }
    }
}

/// A real handshake ("initiator" dials "acceptor") with each side's writes recorded:
/// (initiator's bytes, acceptor's bytes).
async fn wire(initiator_seed: u64, acceptor_seed: u64) -> (Vec<u8>, Vec<u8>) {
    let (a, b) = duplex(PIPE);
    let (mut a, mut b) = (Recorder::new(a), Recorder::new(b));
    let (ci, ca) = (config("initiator"), config("acceptor"));
    let (ri, ra) = (&mut rng(initiator_seed), &mut rng(acceptor_seed));
    let (i, r) = tokio::join!(
        initiate(&mut a, &ci, "acceptor", ri),
        accept(&mut b, &ca, ra, admit_all)
    );
    i.unwrap();
    r.unwrap();
    (a.written, b.written)
}

/// An acceptor that follows a script instead of the protocol: it reads the real initiator's
/// Hello and Dial, sends `hello(their Hello)` and `proof(their Hello)`, and if the initiator
/// proves, reads its Proof and welcomes it.
async fn scripted_acceptor(
    mut stream: DuplexStream,
    hello: impl FnOnce(&Hello) -> Hello,
    proof: impl FnOnce(&Hello) -> Proof,
) {
    let Ok(HandshakeMessage::Hello(theirs)) = read_message(&mut stream).await else {
        return;
    };
    let Ok(HandshakeMessage::Dial(_)) = read_message(&mut stream).await else {
        return;
    };
    for message in [
        HandshakeMessage::Hello(hello(&theirs)),
        HandshakeMessage::Proof(proof(&theirs)),
    ] {
        if write_message(&mut stream, &message).await.is_err() {
            return;
        }
    }
    if let Ok(HandshakeMessage::Proof(_)) = read_message(&mut stream).await {
        let _ = write_message(&mut stream, &HandshakeMessage::Verdict(Verdict::Welcome)).await;
    }
}

/// An initiator that follows a script: it sends `hello` and a `Dial` of `dialled`, reads the
/// real acceptor's Hello and Proof, and sends `proof(their Hello, their Proof)`.
async fn scripted_initiator(
    mut stream: DuplexStream,
    hello: Hello,
    dialled: &str,
    proof: impl FnOnce(&Hello, Proof) -> Proof,
) {
    for message in [
        HandshakeMessage::Hello(hello),
        HandshakeMessage::Dial(Dial {
            node_id: dialled.to_owned(),
        }),
    ] {
        if write_message(&mut stream, &message).await.is_err() {
            return;
        }
    }
    let Ok(HandshakeMessage::Hello(theirs)) = read_message(&mut stream).await else {
        return;
    };
    let Ok(HandshakeMessage::Proof(their_proof)) = read_message(&mut stream).await else {
        return;
    };
    let ours = HandshakeMessage::Proof(proof(&theirs, their_proof));
    if write_message(&mut stream, &ours).await.is_ok() {
        let _ = read_message(&mut stream).await;
    }
}

fn peer_hello(node: &str, nonce_byte: u8) -> Hello {
    Hello {
        protocol_version: PROTOCOL_VERSION,
        cluster_id: ClusterId::new("test-cluster"),
        node_id: node.to_owned(),
        nonce: [nonce_byte; NONCE_LEN],
    }
}

/// The MAC of `prover` (in `role`) to `verifier`, finalized.
fn mac(secret: &Secret, role: Role, prover: &Hello, verifier: &Hello) -> [u8; 32] {
    proof(secret, role, prover, verifier)
        .finalize()
        .into_bytes()
        .into()
}

#[tokio::test]
async fn succeeds_both_ways_and_each_side_learns_the_others_node_id() {
    let (initiator, acceptor) = pair(config("tm-1"), config("jm")).await;
    assert_eq!(
        initiator.unwrap(),
        Established {
            peer_node_id: "jm".into()
        }
    );
    assert_eq!(
        acceptor.unwrap(),
        Established {
            peer_node_id: "tm-1".into()
        }
    );
}

#[tokio::test]
async fn handshake_leaves_the_bytes_after_it_in_the_stream() {
    let (mut a, mut b) = duplex(PIPE);
    let (ci, ca) = (config("tm-1"), config("jm"));
    let (ri, ra) = (&mut rng(1), &mut rng(2));
    let acceptor = async {
        let established = accept(&mut b, &ca, ra, admit_all).await;
        b.write_all(b"first envelope").await.unwrap();
        established
    };
    let (i, r) = tokio::join!(initiate(&mut a, &ci, "jm", ri), acceptor);
    i.unwrap();
    r.unwrap();
    let mut next = [0u8; 14];
    a.read_exact(&mut next).await.unwrap();
    assert_eq!(&next, b"first envelope");
}

#[tokio::test]
async fn a_dialler_never_proves_itself_to_a_node_whose_proof_is_wrong() {
    let (a, b) = duplex(PIPE);
    let (mut a, mut b) = (Recorder::new(a), Recorder::new(b));
    let mut other = config("jm");
    other.secret = Secret::from_bytes(b"another secret".to_vec());
    let (ci, mut ri, mut ra) = (config("tm-1"), rng(1), rng(2));
    let dialler = async {
        let result = initiate(&mut a, &ci, "jm", &mut ri).await;
        // Hangs up, as a real connection is closed when its handshake fails.
        drop(a.inner.shutdown().await);
        result
    };
    let (initiator, acceptor) = tokio::join!(dialler, accept(&mut b, &other, &mut ra, admit_all));
    assert!(
        matches!(initiator, Err(HandshakeError::BadProof)),
        "{initiator:?}"
    );
    // The dialler hung up after the acceptor's proof failed: nothing of its own was proven.
    assert!(
        matches!(acceptor, Err(HandshakeError::Closed)),
        "{acceptor:?}"
    );
    assert_eq!(proofs_in(&a.written), 0, "the dialler proved itself");
    assert_eq!(proofs_in(&b.written), 1);
}

#[tokio::test]
async fn insecure_mode_runs_the_same_protocol_and_refuses_a_secured_peer() {
    let insecure = |node: &str| HandshakeConfig {
        secret: Secret::insecure(),
        ..config(node)
    };
    let (initiator, acceptor) = pair(insecure("tm-1"), insecure("jm")).await;
    assert_eq!(initiator.unwrap().peer_node_id, "jm");
    assert_eq!(acceptor.unwrap().peer_node_id, "tm-1");
    assert!(Secret::insecure().is_insecure());
    assert!(Secret::from_bytes(Vec::new()).is_insecure());
    assert!(!Secret::from_bytes(SECRET).is_insecure());

    for (i, a) in [
        (insecure("tm-1"), config("jm")),
        (config("tm-1"), insecure("jm")),
    ] {
        let (initiator, acceptor) = pair(i, a).await;
        assert!(
            matches!(initiator, Err(HandshakeError::BadProof)),
            "{initiator:?}"
        );
        assert!(
            matches!(acceptor, Err(HandshakeError::Closed)),
            "{acceptor:?}"
        );
    }
}

#[tokio::test]
async fn a_peer_of_another_protocol_version_is_refused() {
    let future = Hello {
        protocol_version: PROTOCOL_VERSION + 1,
        ..peer_hello("peer", 7)
    };
    let check = |role: Role, result: Result<Established, HandshakeError>| {
        assert!(
            matches!(
                result,
                Err(HandshakeError::VersionMismatch { ours, theirs })
                    if ours == PROTOCOL_VERSION && theirs == PROTOCOL_VERSION + 1
            ),
            "{role:?}: {result:?}"
        );
    };
    let (ours, theirs) = duplex(PIPE);
    let hello = future.clone();
    let peer = scripted_acceptor(theirs, |_| hello, |_| Proof { mac: [0; 32] });
    let (result, ()) = tokio::join!(side(Role::Initiator, ours, config("me"), rng(1)), peer);
    check(Role::Initiator, result);

    let (ours, theirs) = duplex(PIPE);
    let peer = scripted_initiator(theirs, future, "me", |_, proof| proof);
    let (result, ()) = tokio::join!(side(Role::Acceptor, ours, config("me"), rng(1)), peer);
    check(Role::Acceptor, result);
}

/// The handshake messages of protocol version 6, as an older node encodes and decodes them.
#[derive(Debug, Serialize, Deserialize)]
enum VersionSixMessage {
    Hello(VersionSixHello),
    Proof(Proof),
}

#[derive(Debug, Serialize, Deserialize)]
struct VersionSixHello {
    protocol_version: u32,
    cluster_id: ClusterId,
    node_id: String,
    nonce: [u8; NONCE_LEN],
}

#[tokio::test]
async fn a_node_of_the_previous_version_and_this_one_each_name_both_versions() {
    // An old node's Hello reaches us: refused as a version mismatch, not as garbage.
    let old = VersionSixMessage::Hello(VersionSixHello {
        protocol_version: 6,
        cluster_id: ClusterId::new("test-cluster"),
        node_id: "old".into(),
        nonce: [1; NONCE_LEN],
    });
    let body = codec::encode(&old).unwrap();
    for role in [Role::Initiator, Role::Acceptor] {
        let (ours, mut theirs) = duplex(PIPE);
        theirs
            .write_all(&(body.len() as u32).to_be_bytes())
            .await
            .unwrap();
        theirs.write_all(&body).await.unwrap();
        let result = side(role, ours, config("me"), rng(1)).await;
        assert!(
            matches!(
                result,
                Err(HandshakeError::VersionMismatch {
                    ours: PROTOCOL_VERSION,
                    theirs: 6
                })
            ),
            "{role:?}: {result:?}"
        );
        assert!(
            result
                .unwrap_err()
                .to_string()
                .contains("run the same Flint version on every node")
        );
    }
    // Ours reaches an old node: it decodes our Hello and sees version 7 (it refuses too, naming
    // both versions in its own words).
    let ours = codec::encode(&HandshakeMessage::Hello(peer_hello("new", 2))).unwrap();
    match codec::decode::<VersionSixMessage>(&ours).unwrap() {
        VersionSixMessage::Hello(hello) => assert_eq!(hello.protocol_version, PROTOCOL_VERSION),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_peer_of_another_cluster_is_refused_by_both_sides() {
    let mut other = config("jm");
    other.cluster_id = ClusterId::new("other-cluster");
    let (initiator, acceptor) = pair(config("tm-1"), other).await;
    match (initiator, acceptor) {
        (
            Err(HandshakeError::WrongCluster {
                ours: i_ours,
                theirs: i_theirs,
            }),
            Err(HandshakeError::WrongCluster {
                ours: a_ours,
                theirs: a_theirs,
            }),
        ) => {
            assert_eq!(i_ours, ClusterId::new("test-cluster"));
            assert_eq!(i_theirs, ClusterId::new("other-cluster"));
            assert_eq!(a_ours, ClusterId::new("other-cluster"));
            assert_eq!(a_theirs, ClusterId::new("test-cluster"));
        }
        other => panic!("expected WrongCluster on both sides, got {other:?}"),
    }
}

/// Issue 34's relay: node V dials "x", but whoever holds that address forwards the bytes to
/// another live node Y. Both refuse before proving anything: no proof ever crosses the relay.
#[tokio::test]
async fn a_handshake_relayed_to_another_node_is_refused_by_both_before_any_proof() {
    let (v_end, relay_v) = duplex(PIPE);
    let (relay_y, y_end) = duplex(PIPE);
    let (mut v_end, mut y_end) = (Recorder::new(v_end), Recorder::new(y_end));
    let relay = async move {
        let (mut relay_v, mut relay_y) = (relay_v, relay_y);
        let _ = tokio::io::copy_bidirectional(&mut relay_v, &mut relay_y).await;
    };
    let (cv, cy, mut rv, mut ry) = (config("v"), config("y"), rng(1), rng(2));
    let v = async {
        let result = initiate(&mut v_end, &cv, "x", &mut rv).await;
        drop(v_end.inner.shutdown().await);
        result
    };
    let y = async {
        let result = accept(&mut y_end, &cy, &mut ry, admit_all).await;
        drop(y_end.inner.shutdown().await);
        result
    };
    let (v, y, ()) = tokio::join!(v, y, relay);
    assert!(
        matches!(&v, Err(HandshakeError::WrongPeer { dialled, claimed }) if dialled == "x" && claimed == "y"),
        "{v:?}"
    );
    assert!(
        matches!(&y, Err(HandshakeError::NotDialled { peer, dialled }) if peer == "v" && dialled == "x"),
        "{y:?}"
    );
    assert_eq!(proofs_in(&v_end.written), 0, "V proved itself to a relay");
    assert_eq!(proofs_in(&y_end.written), 0, "Y proved itself to a relay");
    assert!(!v.unwrap_err().is_retryable());
}

#[tokio::test]
async fn an_acceptor_that_refuses_a_proven_peer_says_why_and_the_reason_is_tamed() {
    let long = format!("busy\n{}", "é".repeat(MAX_REFUSAL_REASON));
    let (mut a, mut b) = duplex(PIPE);
    let (ci, ca) = (config("tm-1"), config("jm"));
    let refuse = |peer: String| {
        let long = long.clone();
        async move {
            assert_eq!(peer, "tm-1");
            Err(long)
        }
    };
    let (mut ri, mut ra) = (rng(1), rng(2));
    let (i, r) = tokio::join!(
        initiate(&mut a, &ci, "jm", &mut ri),
        accept(&mut b, &ca, &mut ra, refuse)
    );
    let Err(HandshakeError::RefusedByPeer { reason }) = i else {
        panic!("{i:?}");
    };
    assert!(reason.len() <= MAX_REFUSAL_REASON, "{}", reason.len());
    assert!(reason.starts_with("busy é"), "{reason}");
    assert!(matches!(r, Err(HandshakeError::NotAdmitted { ref peer, .. }) if peer == "tm-1"));
}

#[tokio::test(start_paused = true)]
async fn a_silent_peer_times_out_after_exactly_the_configured_timeout_or_the_acceptors_floor() {
    // The dialler waits the whole timeout (the acceptor's admission may take a while); the
    // acceptor gives up at the byte-rate floor: no length within the grace.
    for (role, after) in [(Role::Initiator, TIMEOUT), (Role::Acceptor, MESSAGE_GRACE)] {
        let (ours, silent) = duplex(PIPE);
        let start = tokio::time::Instant::now();
        #[allow(clippy::disallowed_methods)] // a test task, not node code
        let task = tokio::spawn(side(role, ours, config("me"), rng(1)));
        tokio::time::sleep(after - Duration::from_millis(1)).await;
        assert!(!task.is_finished(), "{role:?} gave up early");
        let result = task.await.unwrap();
        match role {
            Role::Initiator => assert!(
                matches!(result, Err(HandshakeError::Timeout { after }) if after == TIMEOUT),
                "{role:?}: {result:?}"
            ),
            Role::Acceptor => assert!(
                matches!(result, Err(HandshakeError::TooSlow { allowed }) if allowed == MESSAGE_GRACE),
                "{role:?}: {result:?}"
            ),
        }
        assert_eq!(start.elapsed(), after);
        drop(silent);
    }
}

#[tokio::test(start_paused = true)]
async fn a_slow_admission_counts_against_the_handshake_timeout() {
    let (mut a, mut b) = duplex(PIPE);
    let (ci, ca) = (config("tm-1"), config("jm"));
    let stall = |_peer: String| async {
        tokio::time::sleep(TIMEOUT * 2).await;
        Ok(())
    };
    let (mut ri, mut ra) = (rng(1), rng(2));
    let (i, r) = tokio::join!(
        initiate(&mut a, &ci, "jm", &mut ri),
        accept(&mut b, &ca, &mut ra, stall)
    );
    assert!(matches!(r, Err(HandshakeError::Timeout { .. })), "{r:?}");
    assert!(matches!(i, Err(HandshakeError::Timeout { .. })), "{i:?}");
}

#[tokio::test]
async fn a_peer_that_closes_at_any_point_is_reported_as_closed() {
    // Before anything, after reading our Hello, after sending its Hello, mid-frame.
    let (ours, theirs) = duplex(PIPE);
    drop(theirs);
    let result = side(Role::Initiator, ours, config("me"), rng(1)).await;
    assert!(matches!(result, Err(HandshakeError::Closed)), "{result:?}");

    let (ours, mut theirs) = duplex(PIPE);
    let peer = async move {
        read_message(&mut theirs).await.unwrap();
    };
    let (result, ()) = tokio::join!(side(Role::Acceptor, ours, config("me"), rng(1)), peer);
    assert!(matches!(result, Err(HandshakeError::Closed)), "{result:?}");

    let (ours, mut theirs) = duplex(PIPE);
    let peer = async move {
        let hello = HandshakeMessage::Hello(peer_hello("peer", 3));
        write_message(&mut theirs, &hello).await.unwrap();
        read_message(&mut theirs).await.unwrap();
    };
    let (result, ()) = tokio::join!(side(Role::Initiator, ours, config("me"), rng(1)), peer);
    assert!(matches!(result, Err(HandshakeError::Closed)), "{result:?}");

    let (ours, mut theirs) = duplex(PIPE);
    let peer = async move {
        theirs.write_all(&100u32.to_be_bytes()).await.unwrap();
        theirs.write_all(&[0u8; 10]).await.unwrap();
    };
    let (result, ()) = tokio::join!(side(Role::Initiator, ours, config("me"), rng(1)), peer);
    assert!(matches!(result, Err(HandshakeError::Closed)), "{result:?}");
}

#[tokio::test]
async fn random_garbage_instead_of_a_hello_is_malformed() {
    let mut garbage = rng(99);
    for case in 0..64 {
        let length = 1 + (garbage.next_u64() % 256) as usize;
        let body: Vec<u8> = (0..length).map(|_| garbage.next_u64() as u8).collect();
        if codec::decode::<HandshakeMessage>(&body).is_ok() {
            continue; // a valid message by chance: refused for what it says, not tested here
        }
        let (ours, mut theirs) = duplex(PIPE);
        theirs
            .write_all(&(length as u32).to_be_bytes())
            .await
            .unwrap();
        theirs.write_all(&body).await.unwrap();
        let result = side(Role::Acceptor, ours, config("me"), rng(1)).await;
        assert!(
            matches!(result, Err(HandshakeError::Malformed(_))),
            "case {case}: {result:?}"
        );
        drop(theirs);
    }
    // An empty message is not a Hello either.
    let (ours, mut theirs) = duplex(PIPE);
    theirs.write_all(&0u32.to_be_bytes()).await.unwrap();
    let result = side(Role::Acceptor, ours, config("me"), rng(1)).await;
    assert!(
        matches!(result, Err(HandshakeError::Malformed(_))),
        "{result:?}"
    );
}

#[tokio::test]
async fn an_http_request_instead_of_a_hello_is_too_large() {
    let (ours, mut theirs) = duplex(PIPE);
    theirs
        .write_all(b"GET / HTTP/1.1\r\nHost: flint\r\n\r\n")
        .await
        .unwrap();
    let result = side(Role::Acceptor, ours, config("me"), rng(1)).await;
    assert!(
        matches!(
            result,
            Err(HandshakeError::TooLarge {
                length: 0x4745_5420,
                max: MAX_HANDSHAKE_MESSAGE
            })
        ),
        "{result:?}"
    );
}

/// A peer that claims a 4 GiB message and records how much anyone tried to read after the
/// claim (a buffer allocated for the claim would show up as a huge read).
#[derive(Default)]
struct ClaimsFourGigabytes {
    header_sent: usize,
    asked_after_header: usize,
}

impl AsyncRead for ClaimsFourGigabytes {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _cx: &mut TaskContext<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        const HEADER: [u8; 4] = u32::MAX.to_be_bytes();
        if self.header_sent < HEADER.len() {
            let n = buf.remaining().min(HEADER.len() - self.header_sent);
            buf.put_slice(&HEADER[self.header_sent..self.header_sent + n]);
            self.header_sent += n;
        } else {
            self.asked_after_header += buf.remaining();
            let n = buf.remaining().min(1024);
            buf.put_slice(&[0xff; 1024][..n]);
        }
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for ClaimsFourGigabytes {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut TaskContext<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut TaskContext<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut TaskContext<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[tokio::test]
async fn a_length_over_the_limit_is_refused_before_allocating() {
    let mut peer = ClaimsFourGigabytes::default();
    let result = initiate(&mut peer, &config("me"), "peer", &mut rng(1)).await;
    assert!(
        matches!(
            result,
            Err(HandshakeError::TooLarge { length, max: MAX_HANDSHAKE_MESSAGE })
                if length == u32::MAX as usize
        ),
        "{result:?}"
    );
    assert_eq!(peer.header_sent, 4);
    assert_eq!(peer.asked_after_header, 0, "read a body it had refused");
}

#[tokio::test]
async fn the_limit_is_inclusive() {
    for (length, too_large) in [
        (MAX_HANDSHAKE_MESSAGE, false),
        (MAX_HANDSHAKE_MESSAGE + 1, true),
    ] {
        let (ours, mut theirs) = duplex(PIPE);
        theirs
            .write_all(&(length as u32).to_be_bytes())
            .await
            .unwrap();
        theirs.write_all(&vec![0xff; length]).await.unwrap();
        let result = side(Role::Acceptor, ours, config("me"), rng(1)).await;
        if too_large {
            assert!(
                matches!(result, Err(HandshakeError::TooLarge { .. })),
                "{result:?}"
            );
        } else {
            // Read in full, then refused for what it says.
            assert!(
                matches!(result, Err(HandshakeError::Malformed(_))),
                "{result:?}"
            );
        }
    }
}

#[tokio::test]
async fn our_own_oversized_hello_is_refused_not_sent() {
    let (ours, mut theirs) = duplex(PIPE);
    let huge = config(&"x".repeat(MAX_HANDSHAKE_MESSAGE));
    let result = side(Role::Initiator, ours, huge, rng(1)).await;
    assert!(
        matches!(result, Err(HandshakeError::TooLarge { length, .. }) if length > MAX_HANDSHAKE_MESSAGE),
        "{result:?}"
    );
    let mut sent = Vec::new();
    theirs.read_to_end(&mut sent).await.unwrap();
    assert!(sent.is_empty());
}

#[tokio::test]
async fn a_proof_before_the_hello_is_out_of_order() {
    let (ours, mut theirs) = duplex(PIPE);
    let proof = HandshakeMessage::Proof(Proof { mac: [0; 32] });
    write_message(&mut theirs, &proof).await.unwrap();
    let result = side(Role::Acceptor, ours, config("me"), rng(1)).await;
    assert!(
        matches!(
            result,
            Err(HandshakeError::OutOfOrder {
                state: "AwaitHello",
                message: "Proof"
            })
        ),
        "{result:?}"
    );
}

#[tokio::test]
async fn a_reflected_hello_and_proof_are_refused() {
    // The peer echoes our own Hello (so both nonces and node ids are ours): refused for
    // claiming our id, by either side.
    let (ours, theirs) = duplex(PIPE);
    let mirror = scripted_acceptor(theirs, Hello::clone, |_| Proof { mac: [0; 32] });
    let (result, ()) = tokio::join!(initiator(ours, config("me"), "me", rng(1)), mirror);
    assert!(
        matches!(result, Err(HandshakeError::OwnNodeId { ref node_id }) if node_id == "me"),
        "{result:?}"
    );
    // (As an acceptor, we would have to be sent our own Hello before we sent it; a mirror sends
    // a copy with our id instead.)
    let (ours, theirs) = duplex(PIPE);
    let mirror = scripted_initiator(theirs, peer_hello("me", 1), "me", |_, proof| proof);
    let (result, ()) = tokio::join!(acceptor(ours, config("me"), rng(1)), mirror);
    assert!(
        matches!(result, Err(HandshakeError::OwnNodeId { ref node_id }) if node_id == "me"),
        "{result:?}"
    );

    // Under another id, our own proof echoed back is still wrong: the role byte and the
    // connection-ordered transcript tell the two proofs apart.
    let (ours, theirs) = duplex(PIPE);
    let mirror = scripted_initiator(theirs, peer_hello("not-me", 1), "me", |_, proof| proof);
    let (result, ()) = tokio::join!(acceptor(ours, config("me"), rng(1)), mirror);
    assert!(
        matches!(result, Err(HandshakeError::BadProof)),
        "{result:?}"
    );
}

/// The attack of issue 15 under this protocol: a node `n` dials an attacker claiming the
/// dialled id `x` (connection 1, `n` initiates); the attacker opens connection 2 to `n` (`n`
/// accepts), claiming any id, crossing or not the nonces, so that `n`'s acceptor proof on
/// connection 2 is offered back as the proof `n` waits for on connection 1. `n` must refuse
/// every variant without the secret, and never prove itself on connection 1.
#[test]
fn a_cross_connection_reflection_is_refused() {
    let node = config("n");
    for claim_2 in ["n", "x", "y"] {
        for swap_nonces in [true, false] {
            let case = format!("claims x/{claim_2}, crossed {swap_nonces}");
            let (mut dialled, HandshakeAction::Send(HandshakeMessage::Hello(hello_1))) =
                Handshake::initiator(&node, "x", &mut rng(1))
            else {
                panic!("starts with a Hello");
            };
            let (mut accepted, HandshakeAction::Send(HandshakeMessage::Hello(hello_2))) =
                Handshake::acceptor(&node, &mut rng(2))
            else {
                panic!("starts with a Hello");
            };
            assert!(matches!(
                dialled.on(HandshakeEvent::Sent),
                HandshakeAction::Send(HandshakeMessage::Dial(_))
            ));
            dialled.on(HandshakeEvent::Sent);
            accepted.on(HandshakeEvent::Sent);
            let (nonce_for_1, nonce_for_2) = if swap_nonces {
                (hello_2.nonce, hello_1.nonce)
            } else {
                ([7; NONCE_LEN], [7; NONCE_LEN])
            };
            let attacker_1 = Hello {
                node_id: "x".into(),
                nonce: nonce_for_1,
                ..hello_1.clone()
            };
            let attacker_2 = Hello {
                node_id: claim_2.into(),
                nonce: nonce_for_2,
                ..hello_2.clone()
            };
            assert!(
                matches!(
                    dialled.on(HandshakeEvent::HelloReceived(attacker_1)),
                    HandshakeAction::Receive
                ),
                "{case}"
            );
            match accepted.on(HandshakeEvent::HelloReceived(attacker_2)) {
                HandshakeAction::Receive => {}
                HandshakeAction::Fail(HandshakeError::OwnNodeId { .. }) => continue,
                other => panic!("{case}: {other:?}"),
            }
            let mirrored = match accepted.on(HandshakeEvent::DialReceived(Dial {
                node_id: "n".into(),
            })) {
                HandshakeAction::Send(HandshakeMessage::Proof(proof)) => proof,
                other => panic!("{case}: {other:?}"),
            };
            let result = dialled.on(HandshakeEvent::ProofReceived(mirrored));
            assert!(
                matches!(result, HandshakeAction::Fail(HandshakeError::BadProof)),
                "{case}: {result:?}"
            );
        }
    }
}

#[tokio::test]
async fn a_proof_recorded_from_one_handshake_is_refused_in_another() {
    // Record a genuine acceptor's Hello and Proof, made for the initiator seeded 1.
    let (_, acceptor_bytes) = wire(1, 2).await;
    let [
        HandshakeMessage::Hello(recorded_hello),
        HandshakeMessage::Proof(recorded_proof),
        HandshakeMessage::Verdict(Verdict::Welcome),
    ] = <[HandshakeMessage; 3]>::try_from(frames(&acceptor_bytes)).unwrap()
    else {
        panic!("the acceptor sends a Hello, a Proof and its verdict");
    };
    let replay = |initiator_seed: u64| {
        let (hello, proof) = (recorded_hello.clone(), recorded_proof.clone());
        async move {
            let (ours, theirs) = duplex(PIPE);
            let attacker = scripted_acceptor(theirs, |_| hello, |_| proof);
            let (result, ()) = tokio::join!(
                initiator(ours, config("initiator"), "acceptor", rng(initiator_seed)),
                attacker
            );
            result
        }
    };
    // A fresh nonce makes the recording worthless.
    let result = replay(3).await;
    assert!(
        matches!(result, Err(HandshakeError::BadProof)),
        "{result:?}"
    );
    // Control: the same nonce again (a generator re-created from the same seed) would accept
    // it, which is why `initiate` documents that its NodeRng must be long-lived.
    assert_eq!(replay(1).await.unwrap().peer_node_id, "acceptor");
}

#[tokio::test]
async fn same_seeds_put_the_same_bytes_on_the_wire() {
    let first = wire(1, 2).await;
    assert_eq!(first, wire(1, 2).await);
    assert!(matches!(
        frames(&first.0).as_slice(),
        [
            HandshakeMessage::Hello(_),
            HandshakeMessage::Dial(_),
            HandshakeMessage::Proof(_)
        ]
    ));
    assert!(matches!(
        frames(&first.1).as_slice(),
        [
            HandshakeMessage::Hello(_),
            HandshakeMessage::Proof(_),
            HandshakeMessage::Verdict(Verdict::Welcome)
        ]
    ));
    // Another acceptor seed changes the acceptor's nonce, and so both proofs.
    let other = wire(1, 3).await;
    assert_ne!(first.1, other.1);
    assert_ne!(first.0, other.0);
    assert_eq!(
        frames(&first.0)[0],
        frames(&other.0)[0],
        "same initiator Hello"
    );
}

#[test]
fn only_transient_failures_are_retryable_and_each_message_says_what_was_wrong() {
    let decode_error = codec::decode::<HandshakeMessage>(&[0xff]).unwrap_err();
    let cases = [
        (
            HandshakeError::VersionMismatch { ours: 1, theirs: 2 },
            false,
            "peer speaks handshake protocol version 2, this node speaks version 1",
        ),
        (
            HandshakeError::WrongCluster {
                ours: ClusterId::new("a"),
                theirs: ClusterId::new("b"),
            },
            false,
            "peer belongs to cluster `b`, this node to cluster `a`",
        ),
        (
            HandshakeError::BadProof,
            false,
            "proof of the cluster secret is wrong",
        ),
        (
            HandshakeError::OwnNodeId {
                node_id: "me:1".into(),
            },
            false,
            "claims this node's own node id `me:1`",
        ),
        (
            HandshakeError::WrongPeer {
                dialled: "a:1".into(),
                claimed: "b:2".into(),
            },
            false,
            "dialled a:1, but the node that answered calls itself b:2",
        ),
        (
            HandshakeError::NotDialled {
                peer: "v:1".into(),
                dialled: "x:2".into(),
            },
            false,
            "a peer calling itself v:1 dialled x:2, not this node",
        ),
        (
            HandshakeError::RefusedByPeer {
                reason: "busy".into(),
            },
            false,
            "the peer refused the connection: busy",
        ),
        (
            HandshakeError::NotAdmitted {
                peer: "v:1".into(),
                reason: "busy".into(),
            },
            false,
            "refused v:1: busy",
        ),
        (
            HandshakeError::Timeout {
                after: Duration::from_secs(5),
            },
            true,
            "handshake did not finish within 5s",
        ),
        (HandshakeError::Closed, true, "peer closed the connection"),
        (HandshakeError::Malformed(decode_error), false, "malformed"),
        (
            HandshakeError::TooLarge {
                length: 5000,
                max: 4096,
            },
            false,
            "5000 bytes is over the 4096-byte limit",
        ),
        (
            HandshakeError::Io(io::Error::other("disk on fire")),
            true,
            "I/O error",
        ),
        (
            HandshakeError::OutOfOrder {
                state: "AwaitHello",
                message: "Proof",
            },
            false,
            "unexpected Proof in handshake state AwaitHello",
        ),
    ];
    for (error, retryable, text) in cases {
        assert_eq!(error.is_retryable(), retryable, "{error:?}");
        assert!(error.to_string().contains(text), "{error} / {text}");
    }
}

/// The decoder property test of the envelopes, for what a peer sends before it has proved
/// anything: arbitrary and mutated handshake messages, decoded alone and read from a stream,
/// are errors or valid messages, never a panic or an allocation past the limit.
#[tokio::test]
async fn arbitrary_and_mutated_handshake_messages_are_errors_never_panics() {
    let mut random = NodeRng::seed_from_u64(0x4a11_0b0e);
    let mut below = |n: usize| (random.next_u64() % n.max(1) as u64) as usize;
    let valid: Vec<Vec<u8>> = [
        HandshakeMessage::Hello(peer_hello("127.0.0.1:6123", 3)),
        HandshakeMessage::Hello(peer_hello("", 0)),
        HandshakeMessage::Proof(Proof { mac: [9; 32] }),
        HandshakeMessage::Dial(Dial {
            node_id: "127.0.0.1:6123".into(),
        }),
        HandshakeMessage::Verdict(Verdict::Welcome),
        HandshakeMessage::Verdict(Verdict::Refused("busy".into())),
    ]
    .iter()
    .map(|message| codec::encode(message).expect("encodes").to_vec())
    .collect();
    let mut decoded = 0;
    for iteration in 0..20_000 {
        let bytes: Vec<u8> = if iteration % 4 == 0 {
            let len = below(200);
            (0..len).map(|_| below(256) as u8).collect()
        } else {
            let mut bytes = valid[below(valid.len())].clone();
            match below(4) {
                0 => {
                    for _ in 0..=below(4) {
                        let at = below(bytes.len());
                        bytes[at] ^= 1 << below(8);
                    }
                }
                1 => bytes.truncate(below(bytes.len())),
                2 => {
                    for _ in 0..=below(8) {
                        bytes.push(below(256) as u8);
                    }
                }
                _ => {
                    let at = below(bytes.len());
                    bytes[at] = [0xfb, 0xfc, 0xfd, 0xfe, 0xff][below(5)];
                }
            }
            bytes
        };
        if let Ok(message) = codec::decode::<HandshakeMessage>(&bytes) {
            decoded += 1;
            let again = codec::encode(&message).expect("a decoded message encodes");
            assert_eq!(codec::decode::<HandshakeMessage>(&again).unwrap(), message);
        }
        // As the handshake reads it: a length prefix (sometimes a lying one), then the body.
        let claimed = match below(8) {
            0 => below(u32::MAX as usize) as u32,
            1 => (MAX_HANDSHAKE_MESSAGE + 1) as u32,
            _ => bytes.len() as u32,
        };
        let mut stream = claimed.to_be_bytes().to_vec();
        stream.extend_from_slice(&bytes);
        match read_message(&mut stream.as_slice()).await {
            Ok(message) => assert_eq!(
                codec::decode::<HandshakeMessage>(&codec::encode(&message).unwrap()).unwrap(),
                message
            ),
            Err(HandshakeError::TooLarge { length, .. }) => {
                assert!(length > MAX_HANDSHAKE_MESSAGE)
            }
            Err(HandshakeError::Malformed(_) | HandshakeError::Closed) => {}
            Err(other) => panic!("unexpected {other:?}"),
        }
    }
    assert!(
        decoded > 0 && decoded < 20_000,
        "{decoded} mutations decoded"
    );
}
