//! Two endpoints in one System over real TCP on 127.0.0.1. Real time (sockets do not follow
//! a paused clock); every wait polls with a deadline.

use std::future::Future;
use std::time::Duration;

use actix::{Addr, MailboxError, ResponseFuture};
use tokio::time::Instant;

use super::*;
use crate::actors::job_manager::{JobManager, JobManagerSettings};
use crate::actors::task_manager::registration::Leader;
use crate::actors::task_manager::{TaskManager, TaskManagerSettings, TaskManagerSpec};
use crate::base::clock::ManualClock;
use crate::base::ids::{LeaderSessionId, ResourceId};
use crate::config::{HeartbeatConfig, RegistrationConfig};
use crate::env::events::EventSink;
use crate::env::{CurrentArbiterSpawner, NodeEnv};
use crate::messages::HardwareDescription;
use crate::messages::job_manager::{GetJobManagerStatus, JobManagerStatus};
use crate::messages::task_manager::{GetTaskManagerStatus, RegistrationPhase, TaskManagerStatus};
use crate::operators::OperatorRegistry;

const DEADLINE: Duration = Duration::from_secs(10);
/// "At once": far below the ask timeout, above any scheduling hiccup on a busy CI machine.
const PROMPTLY: Duration = Duration::from_secs(2);

fn config(name: &str, secret: &[u8], seed: u64) -> EndpointConfig {
    EndpointConfig {
        handshake_timeout: Duration::from_secs(2),
        ask_timeout: Duration::from_secs(30),
        ..EndpointConfig::new(
            "127.0.0.1:0".parse().expect("an address"),
            ClusterId::new("remote-test"),
            name,
            Secret::from_bytes(secret.to_vec()),
            seed,
        )
    }
}

async fn endpoint(name: &str, secret: &[u8], seed: u64) -> (NodeEndpoint, Arc<RemoteResolver>) {
    NodeEndpoint::bind(config(name, secret, seed))
        .await
        .expect("binds")
}

fn env(name: &str, resolver: &Arc<RemoteResolver>, seed: u64) -> NodeEnv {
    NodeEnv::new(
        name,
        seed,
        Arc::new(ManualClock::new(1_000_000)),
        Arc::new(CurrentArbiterSpawner),
        Arc::clone(resolver) as Arc<dyn Resolver>,
        EventSink::new(1024),
    )
}

fn heartbeat() -> HeartbeatConfig {
    HeartbeatConfig {
        interval: Duration::from_millis(50),
        timeout: Duration::from_secs(2),
    }
}

fn start_job_manager(env: &NodeEnv) -> (Addr<JobManager>, ActorAddress) {
    let session = LeaderSessionId::generate(&mut env.rng("leader"));
    let job_manager = JobManager::new(
        JobManagerSettings {
            cluster_id: ClusterId::new("remote-test"),
            heartbeat: heartbeat(),
            ask_timeout: Duration::from_secs(5),
            slot_request_timeout: Duration::from_secs(30),
            slots_per_task_manager: 2,
            taskmanager_timeout: Duration::from_secs(30),
            registry: OperatorRegistry::with_builtins(),
            jobstore: crate::config::JobStoreConfig::default(),
            batch_job_recovery: crate::config::BatchJobRecoveryConfig::default(),
            scheduler: Default::default(),
            max_subtasks: 1_000_000,
            max_jobs: 10_000,
            max_workers_per_job: 64,
        },
        session,
        env.clone(),
    );
    let address = job_manager.address().clone();
    (job_manager.start(), address)
}

fn start_task_manager(env: &NodeEnv, id: &str, leader: ActorAddress) -> Addr<TaskManager> {
    TaskManager::new(
        TaskManagerSettings {
            resource_id: ResourceId::new(id),
            job_manager: Some(Leader {
                address: leader,
                retrieved_session: None,
            }),
            spec: TaskManagerSpec {
                cluster_id: ClusterId::new("remote-test"),
                slots: 2,
                hostname: "localhost".into(),
                hardware: HardwareDescription {
                    cpu_cores: 1,
                    physical_memory_bytes: 0,
                },
                registration: RegistrationConfig {
                    initial_timeout: Duration::from_millis(200),
                    max_timeout: Duration::from_secs(1),
                    error_delay: Duration::from_millis(100),
                },
                heartbeat: heartbeat(),
                registry: OperatorRegistry::with_builtins(),
                working_dir: std::env::temp_dir().join(format!("flint-remote-{id}")),
                spill_threshold_bytes: 1 << 20,
                spill_budget_bytes: None,
                managed_memory: 64 << 20,
                network: crate::exchange::NetworkSettings::default(),
                cancellation: crate::config::CancellationConfig::default(),
                blob_cache_linger: std::time::Duration::from_secs(60),
            },
        },
        env.clone(),
    )
    .start()
}

/// Polls `probe` until it yields `Some`, or panics with `what` at the deadline.
async fn eventually<T, F: Future<Output = Option<T>>>(what: &str, probe: impl Fn() -> F) -> T {
    let deadline = Instant::now() + DEADLINE;
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(Instant::now() < deadline, "not within {DEADLINE:?}: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn jm_status(gateway: &JobManagerGateway) -> Option<JobManagerStatus> {
    gateway.get_status.send(GetJobManagerStatus).await.ok()
}

#[actix::test]
async fn a_task_manager_registers_and_heartbeats_across_tcp() {
    let (a, a_resolver) = endpoint("a", b"secret", 1).await;
    let (b, b_resolver) = endpoint("b", b"secret", 2).await;
    let (_jm, jm_address) = start_job_manager(&env("a", &a_resolver, 10));
    assert_eq!(jm_address, ActorAddress::new(a.local_node(), "jobmanager"));
    let _tm = start_task_manager(&env("b", &b_resolver, 20), "tm-1", jm_address.clone());

    // The JobManager, asked across the transport from B, lists the TaskManager.
    let remote_jm = b_resolver.job_manager(&jm_address).expect("a proxy");
    let status = eventually("the TaskManager registers", || async {
        jm_status(&remote_jm)
            .await
            .filter(|status| status.task_managers.len() == 1)
    })
    .await;
    let info = &status.task_managers[0];
    assert_eq!(info.resource_id, ResourceId::new("tm-1"));
    let tm_address = ActorAddress::new(b.local_node(), "taskmanager/tm-1");
    assert_eq!(info.location.address, tm_address);

    // A reaches the TaskManager through its proxy: registered, and it stays registered
    // over many heartbeat intervals (the heartbeats are acknowledged across the wire).
    let remote_tm = a_resolver.task_manager(&tm_address).expect("a proxy");
    let registered = |status: &TaskManagerStatus| {
        matches!(status.registration, RegistrationPhase::Registered { .. })
    };
    let tm_status = eventually("the TaskManager sees its registration", || async {
        remote_tm
            .get_status
            .send(GetTaskManagerStatus)
            .await
            .ok()
            .filter(registered)
    })
    .await;
    assert_eq!(tm_status.slots_total, 2);
    tokio::time::sleep(Duration::from_millis(600)).await;
    let after = remote_tm
        .get_status
        .send(GetTaskManagerStatus)
        .await
        .expect("answers");
    assert_eq!(
        after.registration, tm_status.registration,
        "still the same registration"
    );
    assert_eq!(
        jm_status(&remote_jm)
            .await
            .expect("answers")
            .task_managers
            .len(),
        1
    );
    // The same proxy is handed out again, and each node holds one connection to the other.
    assert!(a_resolver.task_manager(&tm_address).is_some());
    assert_eq!(a.connected_peers(), vec![b.local_node()]);
    assert_eq!(b.connected_peers(), vec![a.local_node()]);

    // Both endpoints counted the traffic (registration, heartbeats, the asks above), and
    // nothing was refused.
    let (a_metrics, b_metrics) = (a.metrics(), b.metrics());
    for metrics in [&a_metrics, &b_metrics] {
        assert!(metrics.messages_in.get() >= 3, "{metrics:?}");
        assert!(metrics.messages_out.get() >= 3, "{metrics:?}");
        assert!(metrics.bytes_in.get() > metrics.messages_in.get() * 4);
        assert_eq!(metrics.rejected_connections.get(), 0);
    }
}

#[actix::test]
async fn a_node_with_the_wrong_secret_cannot_register() {
    let (a, a_resolver) = endpoint("a", b"secret", 1).await;
    let (_b, b_resolver) = endpoint("b", b"not the secret", 2).await;
    let (jm, jm_address) = start_job_manager(&env("a", &a_resolver, 10));
    let tm = start_task_manager(&env("b", &b_resolver, 20), "tm-1", jm_address.clone());

    // An ask from B fails promptly (the handshake is refused, not retried).
    let remote_jm = b_resolver.job_manager(&jm_address).expect("a proxy");
    let started = Instant::now();
    assert_eq!(
        remote_jm.get_status.send(GetJobManagerStatus).await,
        Err(MailboxError::Closed)
    );
    assert!(started.elapsed() < PROMPTLY);

    // The TaskManager keeps trying; the JobManager never lists it.
    eventually("the TaskManager retries", || async {
        tm.send(GetTaskManagerStatus)
            .await
            .ok()
            .filter(|status| status.registration_attempts >= 3)
    })
    .await;
    let status = jm.send(GetJobManagerStatus).await.expect("answers");
    assert!(status.task_managers.is_empty());
    assert!(a.connected_peers().is_empty());
    // A counted the connections it refused, and no envelope got through.
    eventually("A counts the refused handshakes", || async {
        (a.metrics().rejected_connections.get() >= 1).then_some(())
    })
    .await;
    assert_eq!(a.metrics().messages_in.get(), 0);
}

/// The `Hello` a node at `address` opens a connection with.
async fn hello_of(address: &str) -> crate::transport::handshake::Hello {
    use tokio::io::AsyncReadExt;
    let mut stream = tokio::net::TcpStream::connect(address)
        .await
        .expect("connects");
    let mut header = [0u8; 4];
    stream.read_exact(&mut header).await.expect("a length");
    let mut body = vec![0u8; u32::from_be_bytes(header) as usize];
    stream.read_exact(&mut body).await.expect("a Hello");
    match crate::base::codec::decode(&body).expect("decodes") {
        crate::transport::handshake::HandshakeMessage::Hello(hello) => hello,
        other => panic!("opened with {other:?}"),
    }
}

#[actix::test]
async fn a_node_restarted_with_the_same_seed_does_not_repeat_its_nonces() {
    // `seed` replays a run; over TCP it must not replay the handshake's nonces, or a
    // handshake recorded before the restart would pass after it.
    let (first, _) = endpoint("a", b"secret", 42).await;
    let before = hello_of(&first.local_node()).await;
    let again = hello_of(&first.local_node()).await;
    first.shutdown();
    let (second, _) = endpoint("a", b"secret", 42).await;
    let after = hello_of(&second.local_node()).await;
    assert_ne!(before.nonce, again.nonce);
    assert_ne!(before.nonce, after.nonce);
}

#[actix::test]
async fn a_newer_connection_from_a_peer_replaces_an_older_one_that_does_not_answer() {
    // The older connection's peer never reads (a process that stopped, a machine that
    // vanished): B's probe of it goes unanswered, so it is closed and the newer one taken.
    use tokio::io::AsyncReadExt;
    let (b, _) = endpoint("b", b"secret", 2).await;
    let handshake = HandshakeConfig {
        cluster_id: ClusterId::new("remote-test"),
        node_id: "127.0.0.1:1".into(),
        secret: Secret::from_bytes(b"secret".to_vec()),
        timeout: Duration::from_secs(2),
    };
    let connect = || async {
        let mut stream = tokio::net::TcpStream::connect(b.local_node())
            .await
            .expect("connects");
        crate::transport::handshake::initiate(
            &mut stream,
            &handshake,
            &b.local_node(),
            &mut NodeRng::from_entropy(),
        )
        .await
        .expect("the right secret");
        stream
    };
    let mut older = connect().await;
    let _newer = connect().await;
    // B closes the older one: the peer sees the end of the stream.
    let mut rest = Vec::new();
    let ended = tokio::time::timeout(DEADLINE, older.read_to_end(&mut rest)).await;
    assert!(ended.is_ok(), "the older connection stayed open");
    eventually("B keeps one connection to the peer", || async {
        (b.connected_peers() == ["127.0.0.1:1"]).then_some(())
    })
    .await;
}

#[actix::test]
async fn a_connection_heard_from_within_the_patience_keeps_its_id_though_it_answers_no_probe() {
    // A peer busy with its data answers a probe late, but its frames keep coming: a second
    // connection claiming its id (a simultaneous dial, an impostor) is refused without waiting
    // on the probe, and the live one is kept. (This raw peer never answers probes: with the
    // probe alone, B would close it after the patience and take the newcomer.)
    use tokio::io::AsyncWriteExt;
    let (b, _) = endpoint("b", b"secret", 2).await;
    let connect = || async {
        let mut stream = tokio::net::TcpStream::connect(b.local_node())
            .await
            .expect("connects");
        let handshake = crate::transport::handshake::initiate(
            &mut stream,
            &raw_handshake("127.0.0.1:1"),
            &b.local_node(),
            &mut NodeRng::from_entropy(),
        )
        .await;
        (stream, handshake)
    };
    let (mut busy, first) = connect().await;
    first.expect("the first connection is admitted");
    // A frame (a ping) from the busy peer: B reads it.
    let ping =
        crate::transport::envelope::Frame::<crate::messages::payload::Payload>::probe(1, false);
    let mut framed = (ping.len() as u32).to_be_bytes().to_vec();
    framed.extend_from_slice(&ping);
    busy.write_all(&framed).await.expect("writes");
    eventually("B heard the busy peer", || async {
        b.inner
            .live_accepted("127.0.0.1:1")
            .is_some_and(|(_, held)| held.heard_within(Duration::from_secs(1)))
            .then_some(())
    })
    .await;
    let (_second, refused) = connect().await;
    match refused {
        Err(crate::transport::handshake::HandshakeError::RefusedByPeer { reason }) => {
            assert!(reason.contains("already holds a live"), "{reason}");
        }
        other => panic!("the second connection was not refused: {other:?}"),
    }
    let (_, held) = b.inner.live_accepted("127.0.0.1:1").expect("still held");
    assert!(
        held.close_reason().is_none(),
        "the busy peer's connection was kept"
    );
}

/// The handshake settings of a raw client of the `remote-test` cluster claiming `node_id`.
fn raw_handshake(node_id: &str) -> HandshakeConfig {
    HandshakeConfig {
        cluster_id: ClusterId::new("remote-test"),
        node_id: node_id.into(),
        secret: Secret::from_bytes(b"secret".to_vec()),
        timeout: Duration::from_secs(5),
    }
}

#[actix::test]
async fn a_second_connection_claiming_a_live_peers_id_is_refused() {
    let (a, _) = endpoint("a", b"secret", 1).await;
    let (b, _) = endpoint("b", b"secret", 2).await;
    let real = a
        .inner
        .connection(&b.local_node())
        .await
        .expect("A connects to B");
    eventually("B holds A's connection", || async {
        (b.connected_peers() == [a.local_node()]).then_some(())
    })
    .await;
    // An impostor that knows the secret claims A's id.
    let mut stream = tokio::net::TcpStream::connect(b.local_node())
        .await
        .expect("connects");
    let refused = crate::transport::handshake::initiate(
        &mut stream,
        &raw_handshake(&a.local_node()),
        &b.local_node(),
        &mut NodeRng::from_entropy(),
    )
    .await;
    match refused {
        Err(crate::transport::handshake::HandshakeError::RefusedByPeer { reason }) => {
            assert!(reason.contains("already holds a live"), "{reason}");
        }
        other => panic!("the impostor was not refused: {other:?}"),
    }
    // A's own connection was never touched.
    assert!(real.close_reason().is_none());
    assert_eq!(b.connected_peers(), [a.local_node()]);
    assert_eq!(a.metrics().rejected_connections.get(), 0);
    assert!(b.metrics().rejected_connections.get() >= 1);
    // B only accepted from A, so a second claim of A's id is warned of; A dialled B itself, so
    // a dial from B's id is the other half of a simultaneous dial, logged as routine.
    let not_admitted = |peer: String| {
        DialError::Connection(ConnectionError::Handshake(HandshakeError::NotAdmitted {
            peer,
            reason: "already holds a live authenticated connection".into(),
        }))
    };
    assert!(!b.inner.refused_for_own_dial(&not_admitted(a.local_node())));
    assert!(a.inner.refused_for_own_dial(&not_admitted(b.local_node())));
    let other = DialError::ConnectTimeout(Duration::from_secs(1));
    assert!(!a.inner.refused_for_own_dial(&other));
}

#[actix::test]
async fn a_node_dialled_through_a_relay_to_another_node_refuses_it_and_is_refused() {
    let (a, _) = endpoint("a", b"secret", 1).await;
    let (b, _) = endpoint("b", b"secret", 2).await;
    // Whoever holds this port forwards every connection to B.
    let relay = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let relayed = relay.local_addr().unwrap().to_string();
    let target = b.local_node();
    let forwarding = actix::spawn(async move {
        while let Ok((mut dialler, _)) = relay.accept().await {
            let mut upstream = tokio::net::TcpStream::connect(&target).await.unwrap();
            actix::spawn(async move {
                let _ = tokio::io::copy_bidirectional(&mut dialler, &mut upstream).await;
            });
        }
    });
    let error = a
        .inner
        .connection(&relayed)
        .await
        .expect_err("a relay to another node is no connection");
    let chain = crate::base::error_chain::ErrorChain(&error).to_string();
    assert!(
        chain.contains(&format!(
            "dialled {relayed}, but the node that answered calls itself {}",
            b.local_node()
        )),
        "{chain}"
    );
    // Refused at once, not retried: it is not the node, however often it is asked.
    assert!(
        matches!(error, RemoteError::Unreachable { attempts: 1, .. }),
        "{error:?}"
    );
    assert!(a.connected_peers().is_empty());
    eventually("B refused the relayed connection", || async {
        (b.metrics().rejected_connections.get() >= 1).then_some(())
    })
    .await;
    assert!(b.connected_peers().is_empty());
    forwarding.abort();
}

/// A TaskManager stand-in that takes every message and never answers.
struct Silent;

impl Actor for Silent {
    type Context = Context<Self>;
}

impl<M> Handler<M> for Silent
where
    M: Message + 'static,
{
    type Result = ResponseFuture<M::Result>;

    fn handle(&mut self, _: M, _: &mut Context<Self>) -> Self::Result {
        Box::pin(std::future::pending())
    }
}

/// A TaskManager stand-in that counts what it is given and never answers.
struct Counting(Arc<std::sync::atomic::AtomicUsize>);

impl Actor for Counting {
    type Context = Context<Self>;
}

impl<M> Handler<M> for Counting
where
    M: Message + 'static,
{
    type Result = ResponseFuture<M::Result>;

    fn handle(&mut self, _: M, _: &mut Context<Self>) -> Self::Result {
        self.0.fetch_add(1, Ordering::Relaxed);
        Box::pin(std::future::pending())
    }
}

#[actix::test]
async fn a_peer_cannot_make_a_node_handle_unboundedly_many_asks_at_once() {
    // B handles at most 4 of a connection's messages at once and gives each up after 1 s.
    let (_a, a_resolver) = endpoint("a", b"secret", 1).await;
    let (b, b_resolver) = NodeEndpoint::bind(EndpointConfig {
        max_inbound_in_flight: 4,
        ask_timeout: Duration::from_secs(1),
        ..config("b", b"secret", 2)
    })
    .await
    .expect("binds");
    let seen = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let tm_address = ActorAddress::new(b.local_node(), "taskmanager/counting");
    b_resolver.register(
        tm_address.clone(),
        LocalActor::TaskManager(TaskManagerGateway::of(&Counting(Arc::clone(&seen)).start())),
    );
    let remote_tm = a_resolver.task_manager(&tm_address).expect("a proxy");
    let asks: Vec<_> = (0..10)
        .map(|_| remote_tm.get_status.send(GetTaskManagerStatus))
        .collect();
    let mut asks = asks.into_iter();
    let first = asks.next().expect("ten asks");
    // The first answer is B giving up on it after 1 s; unbounded, all ten would have reached
    // the actor long before. Bounded, at most the first two waves of four have.
    assert_eq!(first.await, Err(MailboxError::Closed));
    let delivered = seen.load(Ordering::Relaxed);
    assert!(delivered <= 8, "{delivered} asks handled at once");
    // The rest are not lost, only queued: every one is answered (given up) in turn.
    for ask in asks {
        assert_eq!(ask.await, Err(MailboxError::Closed));
    }
    assert_eq!(seen.load(Ordering::Relaxed), 10);
}

#[actix::test]
async fn asks_to_a_node_that_shuts_down_fail_at_once() {
    let (_a, a_resolver) = endpoint("a", b"secret", 1).await;
    let (b, b_resolver) = endpoint("b", b"secret", 2).await;
    let tm_address = ActorAddress::new(b.local_node(), "taskmanager/silent");
    b_resolver.register(
        tm_address.clone(),
        LocalActor::TaskManager(TaskManagerGateway::of(&Silent.start())),
    );
    let remote_tm = a_resolver.task_manager(&tm_address).expect("a proxy");
    let waiting = actix::spawn({
        let remote_tm = remote_tm.clone();
        async move { remote_tm.get_status.send(GetTaskManagerStatus).await }
    });
    eventually("the ask goes out", || async {
        (b.connected_peers().len() == 1).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiting.is_finished(), "the silent actor does not answer");

    let started = Instant::now();
    b.shutdown();
    let result = waiting.await.expect("the ask's task runs");
    assert_eq!(result, Err(MailboxError::Closed));
    assert!(started.elapsed() < PROMPTLY, "{:?}", started.elapsed());

    // Later asks fail as promptly: B no longer listens, so the dial is refused.
    let started = Instant::now();
    assert_eq!(
        remote_tm.get_status.send(GetTaskManagerStatus).await,
        Err(MailboxError::Closed)
    );
    assert!(started.elapsed() < PROMPTLY, "{:?}", started.elapsed());
}

#[actix::test]
async fn an_unknown_target_fails_the_ask_and_the_connection_stays_up() {
    let (a, a_resolver) = endpoint("a", b"secret", 1).await;
    let (b, b_resolver) = endpoint("b", b"secret", 2).await;
    let (_jm, jm_address) = start_job_manager(&env("a", &a_resolver, 10));

    let nobody = ActorAddress::new(a.local_node(), "taskmanager/nobody");
    let missing = b_resolver.task_manager(&nobody).expect("a proxy");
    let started = Instant::now();
    assert_eq!(
        missing.get_status.send(GetTaskManagerStatus).await,
        Err(MailboxError::Closed)
    );
    assert!(started.elapsed() < PROMPTLY);
    // A tell to nobody is dropped there (and logged); it does not harm the connection.
    missing
        .disconnect
        .do_send(crate::messages::task_manager::Disconnect {
            leader_session_id: LeaderSessionId::generate(&mut NodeRng::seed_from_u64(3)),
            reason: crate::messages::RemovalReason::Unreachable,
        });

    let remote_jm = b_resolver.job_manager(&jm_address).expect("a proxy");
    let status = jm_status(&remote_jm).await.expect("the JobManager answers");
    assert!(status.task_managers.is_empty());
    assert_eq!(b.connected_peers(), vec![a.local_node()]);

    // A name of no actor kind gets no proxy at all: the peer would refuse the envelope.
    assert!(
        b_resolver
            .job_manager(&ActorAddress::new(a.local_node(), "taskmanager/x"))
            .is_none()
    );
}

#[actix::test]
async fn an_unreachable_peer_fails_the_ask_after_bounded_dials() {
    let (_a, a_resolver) = endpoint("a", b"secret", 1).await;
    // A port that was free a moment ago: nothing listens there now.
    let port = {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binds");
        listener.local_addr().expect("an address").port()
    };
    let address = ActorAddress::new(format!("127.0.0.1:{port}"), "jobmanager");
    let remote_jm = a_resolver.job_manager(&address).expect("a proxy");
    let started = Instant::now();
    assert_eq!(
        remote_jm.get_status.send(GetJobManagerStatus).await,
        Err(MailboxError::Closed)
    );
    // 50 + 100 + 200 ms of backoff between the four refused dials.
    let elapsed = started.elapsed();
    assert!(elapsed >= Duration::from_millis(350), "{elapsed:?}");
    assert!(elapsed < PROMPTLY, "{elapsed:?}");
}

#[actix::test]
async fn concurrent_asks_to_one_peer_share_one_connection() {
    let (a, a_resolver) = endpoint("a", b"secret", 1).await;
    let (b, b_resolver) = endpoint("b", b"secret", 2).await;
    let (_jm, jm_address) = start_job_manager(&env("a", &a_resolver, 10));
    let remote_jm = b_resolver.job_manager(&jm_address).expect("a proxy");
    let asks: Vec<_> = (0..8)
        .map(|_| remote_jm.get_status.send(GetJobManagerStatus))
        .collect();
    for answer in futures_util::future::join_all(asks).await {
        assert!(answer.is_ok(), "{answer:?}");
    }
    assert_eq!(b.connected_peers(), vec![a.local_node()]);
    assert_eq!(a.connected_peers(), vec![b.local_node()]);
    let opened = b.inner.next_connection.load(Ordering::Relaxed) - 1;
    assert_eq!(opened, 1, "one dial for eight asks");
}

#[actix::test]
async fn a_proxy_whose_connection_died_reconnects_on_the_next_message() {
    let (a, a_resolver) = endpoint("a", b"secret", 1).await;
    let (b, b_resolver) = endpoint("b", b"secret", 2).await;
    let (_jm, jm_address) = start_job_manager(&env("a", &a_resolver, 10));
    let remote_jm = b_resolver.job_manager(&jm_address).expect("a proxy");
    assert!(jm_status(&remote_jm).await.is_some());
    let first = b.inner.live(&a.local_node()).expect("connected");
    first.close("test drops the connection");
    eventually("A forgets the connection", || async {
        a.connected_peers().is_empty().then_some(())
    })
    .await;
    // The same gateway (the same proxy) dials again.
    assert!(jm_status(&remote_jm).await.is_some());
    assert_eq!(b.inner.next_connection.load(Ordering::Relaxed) - 1, 2);
    assert_eq!(b.connected_peers(), vec![a.local_node()]);
}
