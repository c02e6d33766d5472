//! Bad input at a real JobManager's port (DESIGN §4, the transport's "Bad input"): garbage,
//! truncated and oversized frames before and after the handshake, a silent peer, a wrong secret,
//! a wrong protocol version, an envelope for an actor that does not exist, and a flood of idle
//! connections, and the attacks of issue 15 on the handshake and on authenticated connections
//! (a peer claiming the JobManager's own node id, an envelope claiming another sender, a
//! `NewLeaderAvailable` from the network). After each, the JobManager has closed the offending
//! connection and its cluster of two TaskManager processes is intact; at the end SIGTERM takes
//! the children with it.
//!
//! One JobManager process serves every case, in order, so one case's damage would show in the
//! next one's checks.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use flint::base::ids::{ClusterId, LeaderSessionId};
use flint::base::rng::NodeRng;
use flint::messages::job_manager::{GetJobManagerStatus, JobManagerGateway};
use flint::messages::payload::{Envelope, Payload};
use flint::messages::reply::Reply;
use flint::messages::task_manager::GetTaskManagerStatus;
use flint::messages::{ActorAddress, NewLeaderAvailable};
use flint::rpc::directory::Resolver;
use flint::rpc::endpoint::{EndpointConfig, NodeEndpoint, RemoteResolver};
use flint::transport::envelope::EnvelopeKind;
use flint::transport::handshake::{
    self, HandshakeConfig, HandshakeMessage, Hello, MAX_HANDSHAKE_MESSAGE, PROTOCOL_VERSION, Secret,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

mod common;
use common::process::task_managers_of;
use common::scratch;

const SECRET: &str = "test-secret";
const CLUSTER: &str = "default";
const POOL: usize = 2;
/// How long the pool may take to register, and the cluster to settle after a case.
const SERVE_DEADLINE: Duration = Duration::from_secs(30);
/// How long the server may take to close a bad connection. The JobManager's handshake timeout
/// is 5 s (src/process/mod.rs), so a silent peer needs that much; everything else closes at once.
const CLOSE_DEADLINE: Duration = Duration::from_secs(10);
/// A poll interval, never a stand-in for synchronisation.
const POLL: Duration = Duration::from_millis(20);

/// The `flint jobmanager` child and the file its (and its children's) log goes to; dropping it
/// (a failed test too) SIGTERMs and reaps it.
struct JobManagerProcess(Option<Child>, PathBuf);

impl JobManagerProcess {
    fn pid(&self) -> u32 {
        self.0.as_ref().expect("running").id()
    }

    /// SIGTERM, then wait for the exit.
    fn stop(&mut self) -> ExitStatus {
        let mut child = self.0.take().expect("running");
        sigterm(child.id());
        child.wait().expect("the JobManager can be waited for")
    }
}

impl Drop for JobManagerProcess {
    fn drop(&mut self) {
        if self.0.is_some() {
            let _ = self.stop();
        }
        if std::thread::panicking() {
            eprintln!("the JobManager's log: {}", self.1.display());
        }
    }
}

fn sigterm(pid: u32) {
    let _ = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
}

/// Whether `pid` has exited (gone from /proc, or a zombie nobody reaped yet).
fn exited(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state == "Z" || state == "X"),
    }
}

/// A client node: its endpoint (kept alive while used) and a gateway to the JobManager at
/// `address`.
struct Client {
    endpoint: NodeEndpoint,
    _resolver: Arc<RemoteResolver>,
    job_manager: JobManagerGateway,
}

async fn client(address: &str, name: &str, secret: Secret, seed: u64) -> Client {
    let (endpoint, resolver) = NodeEndpoint::bind(EndpointConfig::new(
        "127.0.0.1:0".parse().unwrap(),
        ClusterId::new(CLUSTER),
        name,
        secret,
        seed,
    ))
    .await
    .expect("a client endpoint binds");
    let job_manager = resolver
        .job_manager(&ActorAddress::new(address, "jobmanager"))
        .expect("a proxy for the remote JobManager");
    Client {
        endpoint,
        _resolver: resolver,
        job_manager,
    }
}

/// The running cluster: the JobManager process, its address, a client with the right secret,
/// and the TaskManager children found once the pool was full.
struct Cluster {
    process: JobManagerProcess,
    address: String,
    good: Client,
    task_managers: Vec<(u32, String)>,
}

async fn start_cluster(dir: &Path) -> Cluster {
    let config = dir.join("flint.toml");
    let log = dir.join("jobmanager.log");
    std::fs::write(
        &config,
        format!(
            "[heartbeat]\ninterval = \"100ms\"\ntimeout = \"1s\"\n[taskmanager]\nworking-dir = \"{}\"\n",
            dir.join("work").display()
        ),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_flint"))
        .args([
            "jobmanager",
            "--bind",
            "127.0.0.1:0",
            "--pool-size",
            &POOL.to_string(),
            "--slots",
            "1",
            "--rest",
            "127.0.0.1:0",
        ])
        .arg("--config")
        .arg(&config)
        .env("FLINT_SECRET", SECRET)
        .stdout(Stdio::piped())
        // Every refused connection is a warning: kept out of the test's output.
        .stderr(std::fs::File::create(&log).expect("a log file"))
        .spawn()
        .expect("flint jobmanager starts");
    let stdout = child.stdout.take().unwrap();
    let process = JobManagerProcess(Some(child), log);
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    let address = common::process::address_in(&line);
    assert!(address.starts_with("127.0.0.1:"), "{line}");

    let good = client(&address, "good-client", Secret::from_bytes(SECRET), 1).await;
    assert_serves(&good, "at start").await;
    let task_managers = task_managers_of(process.pid());
    assert_eq!(task_managers.len(), POOL, "{task_managers:?}");
    Cluster {
        process,
        address,
        good,
        task_managers,
    }
}

/// Polls (with a deadline) until the JobManager, asked through `client`, lists exactly the
/// pool's TaskManagers.
async fn assert_serves(client: &Client, after: &str) {
    let give_up = Instant::now() + SERVE_DEADLINE;
    loop {
        let answer = tokio::time::timeout(
            Duration::from_secs(5),
            client.job_manager.get_status.send(GetJobManagerStatus),
        )
        .await;
        let registered = match answer {
            Ok(Ok(status)) => Some(status.task_managers.len()),
            _ => None,
        };
        if registered == Some(POOL) {
            return;
        }
        assert!(
            Instant::now() < give_up,
            "{after}: the JobManager does not list {POOL} TaskManagers (last: {registered:?})"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// Reads (discarding whatever the server says, its `Hello` included) until the server closes
/// the connection: EOF or an error such as a reset. Panics if it is still open at the deadline.
async fn assert_closed_by_server(stream: &mut TcpStream, what: &str) {
    let closed = tokio::time::timeout(CLOSE_DEADLINE, async {
        let mut buf = [0u8; 4096];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(
        closed.is_ok(),
        "{what}: the server kept the connection open for {CLOSE_DEADLINE:?}"
    );
}

async fn connect(address: &str) -> TcpStream {
    TcpStream::connect(address)
        .await
        .expect("the JobManager accepts a TCP connection")
}

/// A raw connection past a correct handshake (as node `node_id`): what follows are frames.
async fn handshaken(address: &str, node_id: &str, seed: u64) -> TcpStream {
    let mut stream = connect(address).await;
    let config = HandshakeConfig {
        cluster_id: ClusterId::new(CLUSTER),
        node_id: node_id.into(),
        secret: Secret::from_bytes(SECRET),
        timeout: Duration::from_secs(5),
    };
    let established = handshake::initiate(
        &mut stream,
        &config,
        address,
        &mut NodeRng::seed_from_u64(seed),
    )
    .await
    .expect("the handshake with the right secret succeeds");
    // A node is known by its address: the node part of its actors' addresses.
    assert_eq!(established.peer_node_id, address);
    stream
}

/// One frame: a 4-byte big-endian length, then the payload (the frame codec and the
/// handshake's framing share this layout).
fn framed(payload: &[u8]) -> Vec<u8> {
    let mut frame = u32::try_from(payload.len()).unwrap().to_be_bytes().to_vec();
    frame.extend_from_slice(payload);
    frame
}

async fn read_frame(stream: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let mut header = [0u8; 4];
    stream.read_exact(&mut header).await?;
    let mut body = vec![0u8; u32::from_be_bytes(header) as usize];
    stream.read_exact(&mut body).await?;
    Ok(body)
}

/// Sends `envelope` as an ask and waits for the reply with its correlation id.
async fn ask(stream: &mut TcpStream, envelope: Envelope) -> Reply {
    let correlation = envelope.correlation;
    stream
        .write_all(&framed(&envelope.encode().unwrap()))
        .await
        .unwrap();
    tokio::time::timeout(CLOSE_DEADLINE, async {
        loop {
            let frame = read_frame(stream)
                .await
                .expect("the connection stays up for an answer");
            let reply = Envelope::decode(&frame).expect("the server sends valid envelopes");
            if reply.kind == EnvelopeKind::Reply && reply.correlation == correlation {
                match reply.payload {
                    Payload::Reply(reply) => return reply,
                    other => panic!("a reply envelope carrying {:?}", other.kind()),
                }
            }
        }
    })
    .await
    .expect("an answer within the deadline")
}

fn ask_envelope(target: &str, correlation: u64, payload: Payload) -> Envelope {
    Envelope {
        target: target.into(),
        sender: None,
        correlation,
        kind: EnvelopeKind::Ask,
        payload,
    }
}

// ---- the cases ----

async fn random_bytes(cluster: &Cluster) {
    let mut rng = NodeRng::seed_from_u64(0xBAD1);
    let garbage: Vec<u8> = (0..512)
        .flat_map(|_| rng.next_u64().to_le_bytes())
        .collect();
    let mut stream = connect(&cluster.address).await;
    // The server may close before it has read everything: a failed write is fine.
    let _ = stream.write_all(&garbage).await;
    assert_closed_by_server(&mut stream, "random bytes").await;
}

async fn truncated_frames(cluster: &Cluster) {
    // Before the handshake: a Hello-sized length, a tenth of the body, then our end closes.
    let mut stream = connect(&cluster.address).await;
    let mut bytes = 200u32.to_be_bytes().to_vec();
    bytes.extend_from_slice(&[0x5A; 20]);
    stream.write_all(&bytes).await.unwrap();
    stream.shutdown().await.unwrap();
    assert_closed_by_server(&mut stream, "a truncated handshake message").await;

    // After the handshake: the same against the steady-state frame codec.
    let mut stream = handshaken(&cluster.address, "bad-input-truncated", 21).await;
    let mut bytes = 1000u32.to_be_bytes().to_vec();
    bytes.extend_from_slice(&[0x5A; 100]);
    stream.write_all(&bytes).await.unwrap();
    stream.shutdown().await.unwrap();
    assert_closed_by_server(&mut stream, "a truncated frame").await;
}

async fn oversized_length(cluster: &Cluster) {
    const HUGE: [u8; 4] = 0xFFFF_FFF0u32.to_be_bytes();
    let mut stream = connect(&cluster.address).await;
    stream.write_all(&HUGE).await.unwrap();
    assert_closed_by_server(&mut stream, "a huge handshake length").await;

    // Just over the handshake limit: refused by the limit, not by the allocator.
    let mut stream = connect(&cluster.address).await;
    let just_over = u32::try_from(MAX_HANDSHAKE_MESSAGE + 1).unwrap();
    stream.write_all(&just_over.to_be_bytes()).await.unwrap();
    assert_closed_by_server(&mut stream, "a handshake length one over the limit").await;

    let mut stream = handshaken(&cluster.address, "bad-input-oversized", 31).await;
    stream.write_all(&HUGE).await.unwrap();
    assert_closed_by_server(&mut stream, "a huge frame length").await;
}

async fn silent_peer(cluster: &Cluster) {
    let mut stream = connect(&cluster.address).await;
    let started = Instant::now();
    assert_closed_by_server(&mut stream, "a silent peer").await;
    eprintln!("a silent peer was closed after {:?}", started.elapsed());
}

async fn wrong_secret(cluster: &Cluster) {
    let bad = client(
        &cluster.address,
        "wrong-secret-client",
        Secret::from_bytes("not-the-secret"),
        2,
    )
    .await;
    let answer = tokio::time::timeout(
        CLOSE_DEADLINE,
        bad.job_manager.get_status.send(GetJobManagerStatus),
    )
    .await
    .expect("an ask with the wrong secret fails rather than hangs");
    assert!(
        answer.is_err(),
        "a client with the wrong secret got an answer: {answer:?}"
    );
    assert!(
        bad.endpoint.connected_peers().is_empty(),
        "{:?}",
        bad.endpoint.connected_peers()
    );
    bad.endpoint.shutdown();

    // The same refusal, seen from a raw socket: the handshake fails and the server hangs up.
    let mut stream = connect(&cluster.address).await;
    let config = HandshakeConfig {
        cluster_id: ClusterId::new(CLUSTER),
        node_id: "bad-input-wrong-secret".into(),
        secret: Secret::from_bytes("not-the-secret"),
        timeout: Duration::from_secs(5),
    };
    let refused = handshake::initiate(
        &mut stream,
        &config,
        &cluster.address,
        &mut NodeRng::seed_from_u64(51),
    )
    .await;
    assert!(refused.is_err(), "{refused:?}");
    assert_closed_by_server(&mut stream, "a wrong secret").await;
}

async fn wrong_version(cluster: &Cluster) {
    let mut stream = connect(&cluster.address).await;
    // The server speaks first; its Hello proves this test frames handshake messages as it does.
    let theirs: HandshakeMessage =
        flint::base::codec::decode(&read_frame(&mut stream).await.unwrap()).unwrap();
    match theirs {
        HandshakeMessage::Hello(hello) => {
            assert_eq!(hello.protocol_version, PROTOCOL_VERSION);
            assert_eq!(hello.cluster_id, ClusterId::new(CLUSTER));
        }
        other => panic!("the server opened with {other:?}"),
    }
    let ours = HandshakeMessage::Hello(Hello {
        protocol_version: PROTOCOL_VERSION + 1,
        cluster_id: ClusterId::new(CLUSTER),
        node_id: "bad-input-version".into(),
        nonce: [7; 32],
    });
    stream
        .write_all(&framed(&flint::base::codec::encode(&ours).unwrap()))
        .await
        .unwrap();
    assert_closed_by_server(&mut stream, "a wrong protocol version").await;
}

async fn unknown_actor(cluster: &Cluster) {
    // `nobody` names no kind of actor, so the envelope does not validate: the connection closes.
    let mut stream = handshaken(&cluster.address, "bad-input-nobody", 71).await;
    let envelope = ask_envelope("nobody", 1, Payload::JobManager(GetJobManagerStatus.into()));
    stream
        .write_all(&framed(&envelope.encode().unwrap()))
        .await
        .unwrap();
    assert_closed_by_server(&mut stream, "an envelope for `nobody`").await;

    // A well-formed target with no actor behind it: a failed reply, and the connection serves on.
    let mut stream = handshaken(&cluster.address, "bad-input-unknown-tm", 72).await;
    let reply = ask(
        &mut stream,
        ask_envelope(
            "taskmanager/nobody",
            7,
            Payload::TaskManager(GetTaskManagerStatus.into()),
        ),
    )
    .await;
    assert!(matches!(reply, Reply::Failed(_)), "{reply:?}");
    let reply = ask(
        &mut stream,
        ask_envelope(
            "jobmanager",
            8,
            Payload::JobManager(GetJobManagerStatus.into()),
        ),
    )
    .await;
    match reply {
        Reply::JobManagerStatus(status) => assert_eq!(status.task_managers.len(), POOL),
        other => panic!("GetJobManagerStatus answered with {other:?}"),
    }
}

async fn own_node_id(cluster: &Cluster) {
    // Claims the JobManager's own id: the first step of a cross-connection reflection. The
    // server must hang up without ever sending a proof.
    let mut stream = connect(&cluster.address).await;
    let theirs: HandshakeMessage =
        flint::base::codec::decode(&read_frame(&mut stream).await.unwrap()).unwrap();
    let HandshakeMessage::Hello(theirs) = theirs else {
        panic!("the server opened with {theirs:?}");
    };
    let ours = HandshakeMessage::Hello(Hello {
        node_id: cluster.address.clone(),
        nonce: [9; 32],
        ..theirs
    });
    stream
        .write_all(&framed(&flint::base::codec::encode(&ours).unwrap()))
        .await
        .unwrap();
    let sent = tokio::time::timeout(CLOSE_DEADLINE, async {
        let mut sent = Vec::new();
        while let Ok(frame) = read_frame(&mut stream).await {
            sent.push(flint::base::codec::decode::<HandshakeMessage>(&frame));
        }
        sent
    })
    .await
    .expect("the server closes a peer claiming its own id");
    assert!(
        !sent
            .iter()
            .any(|message| matches!(message, Ok(HandshakeMessage::Proof(_)))),
        "the server proved itself to a peer claiming its own id: {sent:?}"
    );
}

async fn spoofed_sender(cluster: &Cluster) {
    let mut stream = handshaken(&cluster.address, "bad-input-spoofer", 81).await;
    let envelope = Envelope {
        sender: Some(ActorAddress::new(
            cluster.task_managers[0].1.clone(),
            "taskmanager/someone-else",
        )),
        ..ask_envelope(
            "jobmanager",
            1,
            Payload::JobManager(GetJobManagerStatus.into()),
        )
    };
    stream
        .write_all(&framed(&envelope.encode().unwrap()))
        .await
        .unwrap();
    assert_closed_by_server(&mut stream, "an envelope claiming another sender").await;
}

async fn leader_from_the_network(cluster: &Cluster) {
    // Points the resource manager at a JobManager of the attacker's choosing: only leader
    // retrieval, in the process, may say who leads.
    let mut stream = handshaken(&cluster.address, "bad-input-leader", 91).await;
    let fake = NewLeaderAvailable {
        address: ActorAddress::new("127.0.0.1:1", "jobmanager"),
        leader_session_id: LeaderSessionId::from_u128(7),
    };
    let envelope = Envelope {
        kind: EnvelopeKind::Tell,
        ..ask_envelope("resourcemanager", 0, Payload::ResourceManager(fake.into()))
    };
    stream
        .write_all(&framed(&envelope.encode().unwrap()))
        .await
        .unwrap();
    assert_closed_by_server(&mut stream, "a NewLeaderAvailable from the network").await;
}

async fn many_idle_connections(cluster: &Cluster) {
    const IDLE: usize = 200;
    let mut streams = Vec::with_capacity(IDLE);
    for _ in 0..IDLE {
        streams.push(connect(&cluster.address).await);
    }
    // Meanwhile the established connections are untouched.
    assert_serves(&cluster.good, "while 200 idle connections are open").await;
    let closes = streams
        .iter_mut()
        .map(|stream| assert_closed_by_server(stream, "one of 200 idle connections"));
    futures_util::future::join_all(closes).await;
    // Every handshake slot they held is free again: a new node can still join.
    let fresh = client(
        &cluster.address,
        "fresh-client",
        Secret::from_bytes(SECRET),
        3,
    )
    .await;
    assert_serves(&fresh, "a new client after 200 idle connections").await;
    fresh.endpoint.shutdown();
}

#[actix::test]
async fn a_jobmanager_survives_bad_input_and_keeps_its_task_managers() {
    let dir = scratch("bad-input");
    let mut cluster = start_cluster(&dir).await;

    random_bytes(&cluster).await;
    assert_serves(&cluster.good, "after random bytes").await;

    truncated_frames(&cluster).await;
    assert_serves(&cluster.good, "after truncated frames").await;

    oversized_length(&cluster).await;
    assert_serves(&cluster.good, "after an oversized length").await;

    silent_peer(&cluster).await;
    assert_serves(&cluster.good, "after a silent peer").await;

    wrong_secret(&cluster).await;
    assert_serves(&cluster.good, "after a wrong secret").await;

    wrong_version(&cluster).await;
    assert_serves(&cluster.good, "after a wrong protocol version").await;

    unknown_actor(&cluster).await;
    assert_serves(&cluster.good, "after an envelope for an unknown actor").await;

    own_node_id(&cluster).await;
    assert_serves(
        &cluster.good,
        "after a peer claiming the JobManager's own id",
    )
    .await;

    spoofed_sender(&cluster).await;
    assert_serves(&cluster.good, "after an envelope claiming another sender").await;

    leader_from_the_network(&cluster).await;
    assert_serves(&cluster.good, "after a NewLeaderAvailable from the network").await;

    many_idle_connections(&cluster).await;
    assert_serves(&cluster.good, "after 200 idle connections").await;

    // Nothing was lost on the way: the very same TaskManager processes are still the pool.
    assert_eq!(
        task_managers_of(cluster.process.pid()),
        cluster.task_managers
    );

    cluster.good.endpoint.shutdown();
    let status = cluster.process.stop();
    assert!(status.success(), "the JobManager exited with {status}");
    let give_up = Instant::now() + SERVE_DEADLINE;
    while !cluster.task_managers.iter().all(|(pid, _)| exited(*pid)) {
        assert!(
            Instant::now() < give_up,
            "TaskManager children outlived their JobManager: {:?}",
            cluster.task_managers
        );
        tokio::time::sleep(POLL).await;
    }
    let _ = std::fs::remove_dir_all(&dir);
}
