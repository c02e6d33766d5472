//! Issue 34's attacks on who a node talks to, against real `flint` processes on 127.0.0.1:
//!
//! - **the relay**: a node dials someone without the secret, who forwards the handshake to
//!   another live node; before issue 34 both handshakes completed and the attacker held an
//!   authenticated connection to each;
//! - **the rogue JobManager**: a local user takes the port of a JobManager that died and relays
//!   its reconnecting TaskManager to another live node (a second JobManager of the cluster);
//! - **the impostor**: a holder of the secret claims the id of a live TaskManager, which used
//!   to make the JobManager drop the real one's connection.
//!
//! The attacker is this test process. Every relayed frame is decoded on its way, so the tests
//! assert on the wire itself: no proof of the secret ever crosses a relay.

use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use flint::base::ids::ClusterId;
use flint::base::rng::NodeRng;
use flint::job::graph::JobGraph;
use flint::job::states::JobStatus;
use flint::transport::handshake::{
    self, HandshakeConfig, HandshakeError, HandshakeMessage, Secret,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

mod common;
use common::process::{Client, JobManagerProcess, TaskManagerChild};
use common::scratch;

const SECRET: &str = "impersonation-test-secret";
const DEADLINE: Duration = Duration::from_secs(30);

/// `flint jobmanager` with the secret, standalone workers, on `bind`, logging at info.
fn job_manager(bind: &str, dir: &std::path::Path, name: &str) -> JobManagerProcess {
    let mut command = Command::new(env!("CARGO_BIN_EXE_flint"));
    command
        .args(["jobmanager", "--bind", bind, "--rest", "127.0.0.1:0"])
        .args([
            "--pool-size",
            "0",
            "-D",
            "resourcemanager.driver=standalone",
        ])
        .env("FLINT_SECRET", SECRET)
        .env("RUST_LOG", "info")
        .env("TMPDIR", dir)
        .stderr(std::fs::File::create(dir.join(format!("{name}.log"))).unwrap());
    JobManagerProcess::start(command)
}

/// `flint taskmanager` registering at `job_manager`, retrying fast, logging at info.
fn task_manager(job_manager: &str, id: &str, dir: &std::path::Path) -> TaskManagerChild {
    let child = Command::new(env!("CARGO_BIN_EXE_flint"))
        .args([
            "taskmanager",
            "--jobmanager",
            job_manager,
            "--resource-id",
            id,
        ])
        .args(["-D", "cluster.registration.max-timeout=500ms"])
        .args(["-D", "cluster.registration.error-delay=100ms"])
        .env("FLINT_SECRET", SECRET)
        .env("RUST_LOG", "info")
        .env("TMPDIR", dir)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join(format!("{id}.log"))).unwrap())
        .spawn()
        .expect("flint taskmanager starts");
    TaskManagerChild(child)
}

fn log_of(dir: &std::path::Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(format!("{name}.log"))).unwrap_or_default()
}

async fn client(address: &str, seed: u64) -> Client {
    Client::connect(
        Client::loopback_config(Secret::from_bytes(SECRET), seed),
        address,
    )
    .await
}

/// What one relayed connection carried: the handshake messages (by name) each way, in order,
/// and `frame` for anything that is not one (an envelope after a completed handshake).
#[derive(Debug, Default, Clone)]
struct Relayed {
    from_dialler: Vec<String>,
    from_target: Vec<String>,
    ended: bool,
}

impl Relayed {
    fn proofs(&self) -> usize {
        self.from_dialler
            .iter()
            .chain(&self.from_target)
            .filter(|name| *name == "Proof")
            .count()
    }
}

/// An attacker without the secret: every connection to its port is forwarded, frame by frame,
/// to `target`, and recorded.
struct Relay {
    address: String,
    seen: Arc<Mutex<Vec<Relayed>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Relay {
    async fn start(listener: TcpListener, target: String) -> Self {
        let address = listener.local_addr().unwrap().to_string();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        let task = actix::spawn(async move {
            while let Ok((dialler, _)) = listener.accept().await {
                let Ok(upstream) = TcpStream::connect(&target).await else {
                    continue;
                };
                let index = {
                    let mut log = log.lock().unwrap();
                    log.push(Relayed::default());
                    log.len() - 1
                };
                let log = Arc::clone(&log);
                actix::spawn(relay_one(dialler, upstream, log, index));
            }
        });
        Self {
            address,
            seen,
            task,
        }
    }

    /// Stops accepting and closes the port (an aborted task drops its listener only when the
    /// runtime next polls it, so wait for that).
    async fn stop(mut self) {
        self.task.abort();
        let _ = (&mut self.task).await;
    }

    fn seen(&self) -> Vec<Relayed> {
        self.seen.lock().unwrap().clone()
    }

    /// Waits until at least `count` relayed connections have ended; returns them all.
    async fn wait_for_ended(&self, count: usize) -> Vec<Relayed> {
        let give_up = tokio::time::Instant::now() + DEADLINE;
        loop {
            let seen = self.seen();
            if seen.iter().filter(|relayed| relayed.ended).count() >= count {
                return seen;
            }
            assert!(
                tokio::time::Instant::now() < give_up,
                "only {seen:?} relayed"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Forwards frames both ways until either side ends, recording what they were.
async fn relay_one(
    dialler: TcpStream,
    upstream: TcpStream,
    log: Arc<Mutex<Vec<Relayed>>>,
    index: usize,
) {
    let (mut dialler_in, mut dialler_out) = dialler.into_split();
    let (mut upstream_in, mut upstream_out) = upstream.into_split();
    let up = {
        let log = Arc::clone(&log);
        async move {
            forward(&mut dialler_in, &mut upstream_out, |name| {
                log.lock().unwrap()[index].from_dialler.push(name);
            })
            .await
        }
    };
    let down = {
        let log = Arc::clone(&log);
        async move {
            forward(&mut upstream_in, &mut dialler_out, |name| {
                log.lock().unwrap()[index].from_target.push(name);
            })
            .await
        }
    };
    // Either side ending ends the relay (dropping both halves of both sockets).
    tokio::select! {
        biased;
        () = up => {}
        () = down => {}
    }
    log.lock().unwrap()[index].ended = true;
}

/// Copies length-prefixed frames from `from` to `to`, naming each.
async fn forward(
    from: &mut tokio::net::tcp::OwnedReadHalf,
    to: &mut tokio::net::tcp::OwnedWriteHalf,
    mut record: impl FnMut(String),
) {
    loop {
        let mut header = [0u8; 4];
        if from.read_exact(&mut header).await.is_err() {
            return;
        }
        let length = u32::from_be_bytes(header) as usize;
        if length > 16 << 20 {
            return;
        }
        let mut body = vec![0u8; length];
        if from.read_exact(&mut body).await.is_err() {
            return;
        }
        record(
            match flint::base::codec::decode::<HandshakeMessage>(&body) {
                Ok(HandshakeMessage::Hello(_)) => "Hello".to_owned(),
                Ok(HandshakeMessage::Dial(dial)) => format!("Dial({})", dial.node_id),
                Ok(HandshakeMessage::Proof(_)) => "Proof".to_owned(),
                Ok(HandshakeMessage::Verdict(verdict)) => format!("{verdict:?}"),
                Err(_) => "frame".to_owned(),
            },
        );
        if to.write_all(&header).await.is_err() || to.write_all(&body).await.is_err() {
            return;
        }
    }
}

#[actix::test]
async fn a_handshake_relayed_to_another_live_node_is_refused_by_both_before_any_proof() {
    let dir = scratch("relay");
    let target = job_manager("127.0.0.1:0", &dir, "target");
    let relay = Relay::start(
        TcpListener::bind("127.0.0.1:0").await.unwrap(),
        target.address.clone(),
    )
    .await;
    // The victim believes its JobManager is at the relay's address.
    let _victim = task_manager(&relay.address, "tm-victim", &dir);
    let seen = relay.wait_for_ended(3).await;

    for relayed in seen.iter().filter(|relayed| relayed.ended) {
        assert_eq!(
            relayed.proofs(),
            0,
            "a proof crossed the relay: {relayed:?}"
        );
        assert_eq!(
            relayed.from_dialler,
            ["Hello".to_owned(), format!("Dial({})", relay.address)],
            "{relayed:?}"
        );
        assert_eq!(relayed.from_target, ["Hello"], "{relayed:?}");
    }
    let victim_log = log_of(&dir, "tm-victim");
    let refused = format!(
        "dialled {}, but the node that answered calls itself {}",
        relay.address, target.address
    );
    assert!(victim_log.contains(&refused), "{victim_log}");
    let target_log = log_of(&dir, "target");
    assert!(
        target_log.contains(&format!("dialled {}, not this node", relay.address)),
        "{target_log}"
    );
    let status = client(&target.address, 1).await.status().await;
    assert!(status.task_managers.is_empty(), "{status:#?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A free port on 127.0.0.1 (bound and released: nothing else on this machine races for it in
/// a test run).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[actix::test]
async fn a_task_manager_whose_job_manager_died_is_not_captured_by_whoever_takes_its_port() {
    let dir = scratch("rogue-jobmanager");
    let port = free_port();
    let bind = format!("127.0.0.1:{port}");
    let mut first = job_manager(&bind, &dir, "jobmanager");
    let other = job_manager("127.0.0.1:0", &dir, "other-jobmanager");
    let _victim = task_manager(&first.address, "tm-victim", &dir);
    client(&first.address, 1)
        .await
        .wait_for("the TaskManager registers", DEADLINE, |s| {
            s.task_managers.len() == 1
        })
        .await;

    // The JobManager dies; a local user without the secret takes its port and relays the
    // reconnecting TaskManager to the cluster's other JobManager.
    first.child.kill().unwrap();
    first.child.wait().unwrap();
    let relay = Relay::start(
        TcpListener::bind(&bind)
            .await
            .expect("the dead JobManager's port"),
        other.address.clone(),
    )
    .await;
    let seen = relay.wait_for_ended(3).await;
    for relayed in seen.iter().filter(|relayed| relayed.ended) {
        assert_eq!(
            relayed.proofs(),
            0,
            "a proof crossed the relay: {relayed:?}"
        );
        assert!(
            !relayed.from_target.iter().any(|m| m.starts_with("Verdict")),
            "{relayed:?}"
        );
    }
    let status = client(&other.address, 2).await.status().await;
    assert!(status.task_managers.is_empty(), "{status:#?}");
    assert!(
        log_of(&dir, "tm-victim").contains(&format!(
            "dialled {bind}, but the node that answered calls itself {}",
            other.address
        )),
        "{}",
        log_of(&dir, "tm-victim")
    );

    // The port is given back and the real JobManager returns: the TaskManager, unharmed,
    // registers there again.
    relay.stop().await;
    let back = job_manager(&bind, &dir, "jobmanager-again");
    client(&back.address, 3)
        .await
        .wait_for("the TaskManager registers again", DEADLINE, |s| {
            s.task_managers.len() == 1
        })
        .await;
    drop(back);
    drop(other);
    let _ = std::fs::remove_dir_all(&dir);
}

fn noop_job() -> JobGraph {
    let mut job = JobGraph::builder("after-the-impostor");
    job.vertex("work", "noop", 2).config("count", "100");
    job.build(|_| true).expect("valid")
}

#[actix::test]
async fn a_holder_of_the_secret_cannot_take_over_a_live_task_managers_id() {
    let dir = scratch("impostor");
    let jm = job_manager("127.0.0.1:0", &dir, "jobmanager");
    let _real = task_manager(&jm.address, "tm-real", &dir);
    let client = client(&jm.address, 1).await;
    let status = client
        .wait_for("the TaskManager registers", DEADLINE, |s| {
            s.task_managers.len() == 1
        })
        .await;
    let real_node = status.task_managers[0].location.address.node.clone();

    // The impostor knows the secret and claims the live TaskManager's node id.
    let config = HandshakeConfig {
        cluster_id: ClusterId::new("default"),
        node_id: real_node.clone(),
        secret: Secret::from_bytes(SECRET),
        timeout: Duration::from_secs(5),
    };
    for attempt in 0..3 {
        let mut stream = TcpStream::connect(&jm.address).await.unwrap();
        let refused = handshake::initiate(
            &mut stream,
            &config,
            &jm.address,
            &mut NodeRng::from_entropy(),
        )
        .await;
        match refused {
            Err(HandshakeError::RefusedByPeer { reason }) => {
                assert!(reason.contains("already holds a live"), "{reason}")
            }
            other => panic!("attempt {attempt}: the impostor was not refused: {other:?}"),
        }
    }

    // The real TaskManager kept its registration and its connection: it runs a job.
    let job = client.submit(noop_job()).await;
    let details = client.wait_for_job(job, DEADLINE).await;
    assert_eq!(details.summary.status, JobStatus::Finished, "{details:#?}");
    let status = client.status().await;
    assert_eq!(status.task_managers.len(), 1);
    assert_eq!(status.task_managers[0].location.address.node, real_node);
    assert!(
        log_of(&dir, "jobmanager").contains(&format!("refused {real_node}")),
        "{}",
        log_of(&dir, "jobmanager")
    );
    client.endpoint.shutdown();
    drop(jm);
    let _ = std::fs::remove_dir_all(&dir);
}

#[actix::test]
async fn a_node_that_comes_back_under_its_id_is_admitted_once_its_old_connection_is_dead() {
    // The other side of the impostor rule: the old connection is proven dead (its process is
    // stopped: the socket stays open, but nothing answers a probe), so the same id connecting
    // again is admitted, not locked out.
    let dir = scratch("comes-back");
    let jm = job_manager("127.0.0.1:0", &dir, "jobmanager");
    let mut real = task_manager(&jm.address, "tm-gone", &dir);
    let client = client(&jm.address, 1).await;
    let status = client
        .wait_for("the TaskManager registers", DEADLINE, |s| {
            s.task_managers.len() == 1
        })
        .await;
    let node = status.task_managers[0].location.address.node.clone();
    let stopped = Command::new("kill")
        .args(["-STOP", &real.0.id().to_string()])
        .status()
        .unwrap();
    assert!(stopped.success());
    let config = HandshakeConfig {
        cluster_id: ClusterId::new("default"),
        node_id: node,
        secret: Secret::from_bytes(SECRET),
        timeout: Duration::from_secs(5),
    };
    // Dialled again as a restarting node's registration would: refused while the old
    // connection was heard from within the patience (its last heartbeat), admitted once it was
    // silent that long and then failed a probe.
    let deadline = tokio::time::Instant::now() + DEADLINE;
    let _stream = loop {
        let mut stream = TcpStream::connect(&jm.address).await.unwrap();
        let admitted = handshake::initiate(
            &mut stream,
            &config,
            &jm.address,
            &mut NodeRng::from_entropy(),
        )
        .await;
        match admitted {
            Ok(_) => break stream,
            Err(error) if tokio::time::Instant::now() < deadline => {
                assert!(
                    error.to_string().contains("already holds a live"),
                    "{error}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(error) => panic!("never admitted: {error}"),
        }
    };
    assert!(
        log_of(&dir, "jobmanager").contains("its old connection did not answer"),
        "{}",
        log_of(&dir, "jobmanager")
    );
    let _ = real.0.kill();
    client.endpoint.shutdown();
    drop(jm);
    let _ = std::fs::remove_dir_all(&dir);
}
