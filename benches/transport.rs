//! The transport against raw TCP: `cargo bench --bench transport` (`-- --quick` for a smaller N
//! and one round).
//!
//! Two processes over loopback TCP (`TCP_NODELAY`, as the endpoint sets it): this bench, the
//! measuring side, and a child it spawns from its own binary (`--peer`), the other side. Each is
//! one single-threaded actix System. Per round, in this order, one fresh connection each:
//!
//! 1. heartbeat tells, child → bench: a `Heartbeat` envelope (Tell) over an established
//!    `Connection`, counted as `Inbound::Envelope`s at the bench;
//! 2. the same frame count and sizes as length-prefixed frames on a plain `TcpStream`;
//! 3. 64 KiB tells, child → bench: a `WorkerFailed` tell whose reason is 64 KiB of text (a
//!    `FetchResponse` is a `Reply`, which no tell may carry, and a reply nobody asked for never
//!    reaches `Inbound`, so it cannot be counted at the receiver);
//! 4. the same on plain TCP;
//! 5. sequential asks, bench → child, a `Heartbeat` ask answered with a `HeartbeatResponse`;
//! 6. a plain TCP ping-pong with the same frame sizes.
//!
//! Throughput is timed at the receiver from its first frame to its last; the sender waits for
//! the receiver to close before it starts the next phase, so no phase overlaps another.

// A benchmark measures wall time with the real clock; it is no node code.
#![allow(clippy::disallowed_methods)]

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use flint::actors::{job_manager, resource_manager};
use flint::base::ids::{ClusterId, InstanceId, ResourceId};
use flint::base::rng::NodeRng;
use flint::messages::ActorAddress;
use flint::messages::job_manager::{
    Heartbeat, HeartbeatReport, HeartbeatResponse, JobManagerMessage,
};
use flint::messages::resource_manager::{ResourceManagerMessage, WorkerFailed};
use flint::transport::connection::{self, ConnectionConfig, ConnectionError, dial};

type Inbound = flint::transport::connection::Inbound<Payload>;
use flint::messages::payload::{Envelope, Payload};
use flint::messages::reply::Answer;
use flint::transport::envelope::EnvelopeKind;
use flint::transport::handshake::{HandshakeConfig, Secret};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// What the endpoint gives each connection's dispatcher (`remote::INBOUND_QUEUE`).
const INBOUND_QUEUE: usize = 256;
/// Raw TCP buffers, as large as the connection's write batch.
const RAW_BUFFER: usize = 64 * 1024;
/// Asks (and pings) before the measured ones, not recorded.
const WARM_UP: usize = 1_000;
/// No phase may take longer than this: a stuck peer fails the bench instead of hanging it.
const PHASE_TIMEOUT: Duration = Duration::from_secs(120);

/// How much each round does; the child gets it on its command line.
#[derive(Debug, Clone, Copy)]
struct Plan {
    small: usize,
    big: usize,
    asks: usize,
    rounds: usize,
}

impl Plan {
    fn to_args(self) -> [String; 4] {
        [self.small, self.big, self.asks, self.rounds].map(|n| n.to_string())
    }

    fn from_args(args: &[String]) -> Self {
        let n = |i: usize| -> usize { args[i].parse().expect("a count") };
        Self {
            small: n(0),
            big: n(1),
            asks: n(2),
            rounds: n(3),
        }
    }
}

fn heartbeat() -> Payload {
    JobManagerMessage::from(Heartbeat {
        resource_id: ResourceId::new("tm-1"),
        instance_id: InstanceId::from_u128(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef),
        report: HeartbeatReport {
            slots_total: 4,
            slots_free: 2,
            running: Vec::new(),
            io: vec![],
            partitions_of: vec![],
            spill: Default::default(),
        },
    })
    .into()
}

fn small_tell() -> Envelope {
    Envelope {
        target: job_manager::NAME.into(),
        sender: Some(ActorAddress::new("127.0.0.1:40001", "taskmanager/tm-1")),
        correlation: 0,
        kind: EnvelopeKind::Tell,
        payload: heartbeat(),
    }
}

fn big_tell() -> Envelope {
    Envelope {
        target: resource_manager::NAME.into(),
        sender: Some(ActorAddress::new("127.0.0.1:40001", "taskmanager/tm-1")),
        correlation: 0,
        kind: EnvelopeKind::Tell,
        payload: ResourceManagerMessage::from(WorkerFailed {
            resource_id: ResourceId::new("tm-1"),
            reason: "x".repeat(65_536),
        })
        .into(),
    }
}

fn ask_envelope() -> Envelope {
    Envelope {
        correlation: 1,
        kind: EnvelopeKind::Ask,
        sender: None,
        ..small_tell()
    }
}

fn reply_envelope() -> Envelope {
    Envelope {
        target: String::new(),
        sender: None,
        correlation: 1,
        kind: EnvelopeKind::Reply,
        payload: Payload::Reply(HeartbeatResponse::Acknowledged.into_reply()),
    }
}

/// The bytes of one frame on the wire (length prefix and encoded envelope).
fn frame_of(envelope: &Envelope) -> Vec<u8> {
    let body = envelope.encode().expect("encodes");
    let mut frame = u32::try_from(body.len())
        .expect("fits")
        .to_be_bytes()
        .to_vec();
    frame.extend_from_slice(&body);
    frame
}

fn config(node: &str) -> ConnectionConfig {
    ConnectionConfig::new(HandshakeConfig {
        cluster_id: ClusterId::new("bench"),
        node_id: node.into(),
        secret: Secret::insecure(),
        timeout: Duration::from_secs(5),
    })
}

async fn accept(listener: &TcpListener) -> TcpStream {
    let (stream, _) = tokio::time::timeout(PHASE_TIMEOUT, listener.accept())
        .await
        .expect("the peer connects in time")
        .expect("accepts");
    stream.set_nodelay(true).expect("TCP_NODELAY");
    stream
}

async fn connect(address: &str) -> TcpStream {
    let stream = TcpStream::connect(address).await.expect("connects");
    stream.set_nodelay(true).expect("TCP_NODELAY");
    stream
}

/// The bench's connections are its own: every proven peer is admitted.
async fn admit_all(_peer: String) -> Result<(), String> {
    Ok(())
}

async fn timed<F: Future>(phase: &str, future: F) -> F::Output {
    tokio::time::timeout(PHASE_TIMEOUT, future)
        .await
        .unwrap_or_else(|_| panic!("{phase} did not finish within {PHASE_TIMEOUT:?}"))
}

// ---- the measuring side ----

/// Receives `count` tells over a fresh connection; messages per second, first to last.
async fn flint_receive(listener: &TcpListener, rng: &mut NodeRng, count: usize) -> f64 {
    let stream = accept(listener).await;
    let (inbound, mut received) = mpsc::channel(INBOUND_QUEUE);
    let connection = connection::accept(stream, config("bench-receiver"), rng, admit_all, inbound)
        .await
        .expect("handshake");
    let rate = timed("flint receive", async {
        let mut first = None;
        let mut seen = 0;
        while seen < count {
            match received.recv().await.expect("the connection reports") {
                Inbound::Envelope { .. } => {
                    first.get_or_insert_with(Instant::now);
                    seen += 1;
                }
                Inbound::PeerDown { reason, .. } => panic!("the sender went down: {reason}"),
            }
        }
        let elapsed = first.expect("a message").elapsed().as_secs_f64();
        (count - 1) as f64 / elapsed
    })
    .await;
    connection.close("measured");
    rate
}

/// Reads `count` length-prefixed frames from a fresh stream; frames per second, first to last.
async fn raw_receive(listener: &TcpListener, count: usize) -> f64 {
    let stream = accept(listener).await;
    timed("raw receive", async {
        let mut reader = BufReader::with_capacity(RAW_BUFFER, stream);
        let mut body = Vec::new();
        let mut first = None;
        for _ in 0..count {
            let length = reader.read_u32().await.expect("a length") as usize;
            body.resize(length, 0);
            reader.read_exact(&mut body).await.expect("a frame");
            first.get_or_insert_with(Instant::now);
        }
        let elapsed = first.expect("a frame").elapsed().as_secs_f64();
        (count - 1) as f64 / elapsed
    })
    .await
}

/// Round-trip times in µs, sorted.
fn sorted_micros(mut samples: Vec<Duration>) -> Vec<f64> {
    samples.sort();
    samples.into_iter().map(|d| d.as_secs_f64() * 1e6).collect()
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index]
}

/// `count` sequential asks over a fresh connection; (p50, p99) in µs.
async fn flint_asks(listener: &TcpListener, rng: &mut NodeRng, count: usize) -> (f64, f64) {
    let stream = accept(listener).await;
    let (inbound, _received) = mpsc::channel(INBOUND_QUEUE);
    let connection = connection::accept(stream, config("bench-asker"), rng, admit_all, inbound)
        .await
        .expect("handshake");
    let samples = timed("flint asks", async {
        let mut samples = Vec::with_capacity(count);
        for n in 0..WARM_UP + count {
            let started = Instant::now();
            connection
                .ask(job_manager::NAME.into(), None, heartbeat())
                .await
                .expect("an answer");
            if n >= WARM_UP {
                samples.push(started.elapsed());
            }
        }
        samples
    })
    .await;
    connection.close("measured");
    let sorted = sorted_micros(samples);
    (percentile(&sorted, 0.5), percentile(&sorted, 0.99))
}

/// `count` sequential pings of `ping`'s size, each answered with a frame of the reply's size;
/// (p50, p99) in µs.
async fn raw_pings(listener: &TcpListener, ping: &[u8], count: usize) -> (f64, f64) {
    let mut stream = accept(listener).await;
    let samples = timed("raw pings", async {
        let mut samples = Vec::with_capacity(count);
        let mut body = Vec::new();
        for n in 0..WARM_UP + count {
            let started = Instant::now();
            stream.write_all(ping).await.expect("a ping");
            let length = stream.read_u32().await.expect("a length") as usize;
            body.resize(length, 0);
            stream.read_exact(&mut body).await.expect("a pong");
            if n >= WARM_UP {
                samples.push(started.elapsed());
            }
        }
        samples
    })
    .await;
    let sorted = sorted_micros(samples);
    (percentile(&sorted, 0.5), percentile(&sorted, 0.99))
}

struct Round {
    flint_small: f64,
    raw_small: f64,
    flint_big: f64,
    raw_big: f64,
    flint_ask: (f64, f64),
    raw_ping: (f64, f64),
}

async fn measure(listener: &TcpListener, rng: &mut NodeRng, plan: Plan, ping: &[u8]) -> Round {
    Round {
        flint_small: flint_receive(listener, rng, plan.small).await,
        raw_small: raw_receive(listener, plan.small).await,
        flint_big: flint_receive(listener, rng, plan.big).await,
        raw_big: raw_receive(listener, plan.big).await,
        flint_ask: flint_asks(listener, rng, plan.asks).await,
        raw_ping: raw_pings(listener, ping, plan.asks).await,
    }
}

// ---- the child: the other end ----

/// Sends `count` copies of `envelope` as fast as the connection takes them (a full outbound
/// queue is retried after letting the writer run), then waits for the receiver to close.
async fn flint_send(address: &str, rng: &mut NodeRng, envelope: &Envelope, count: usize) {
    let stream = connect(address).await;
    let (inbound, _received) = mpsc::channel(INBOUND_QUEUE);
    let connection = dial(
        stream,
        "bench-receiver",
        config("bench-sender"),
        rng,
        inbound,
    )
    .await
    .expect("handshake");
    let mut sent = 0;
    while sent < count {
        match connection.tell(envelope.clone()) {
            Ok(()) => sent += 1,
            Err(ConnectionError::QueueFull { .. }) => tokio::task::yield_now().await,
            Err(error) => panic!("tell failed: {error}"),
        }
    }
    timed("flint send", connection.closed()).await;
}

/// Writes `count` copies of `frame`, then waits for the receiver to close.
async fn raw_send(address: &str, frame: &[u8], count: usize) {
    let mut writer = BufWriter::with_capacity(RAW_BUFFER, connect(address).await);
    for _ in 0..count {
        writer.write_all(frame).await.expect("writes");
    }
    writer.flush().await.expect("flushes");
    let mut stream = writer.into_inner();
    let mut rest = Vec::new();
    timed("raw send", stream.read_to_end(&mut rest))
        .await
        .expect("reads to EOF");
}

/// Answers every ask with a heartbeat acknowledgement until the asker closes.
async fn flint_answer(address: &str, rng: &mut NodeRng) {
    let stream = connect(address).await;
    let (inbound, mut received) = mpsc::channel(INBOUND_QUEUE);
    let connection = dial(
        stream,
        "bench-asker",
        config("bench-answerer"),
        rng,
        inbound,
    )
    .await
    .expect("handshake");
    timed("flint answer", async {
        while let Some(Inbound::Envelope { envelope, .. }) = received.recv().await {
            connection
                .reply(
                    envelope.correlation,
                    Payload::Reply(HeartbeatResponse::Acknowledged.into_reply()),
                )
                .expect("replies");
        }
    })
    .await;
}

/// Answers every ping with `pong` until the pinger closes.
async fn raw_answer(address: &str, pong: &[u8]) {
    let mut stream = connect(address).await;
    let mut body = Vec::new();
    timed("raw answer", async {
        while let Ok(length) = stream.read_u32().await {
            body.resize(length as usize, 0);
            stream.read_exact(&mut body).await.expect("a ping");
            stream.write_all(pong).await.expect("a pong");
        }
    })
    .await;
}

async fn peer(address: &str, plan: Plan) {
    let mut rng = NodeRng::seed_from_u64(2);
    let (small, big, pong) = (small_tell(), big_tell(), frame_of(&reply_envelope()));
    let (small_frame, big_frame) = (frame_of(&small), frame_of(&big));
    for _ in 0..plan.rounds {
        flint_send(address, &mut rng, &small, plan.small).await;
        raw_send(address, &small_frame, plan.small).await;
        flint_send(address, &mut rng, &big, plan.big).await;
        raw_send(address, &big_frame, plan.big).await;
        flint_answer(address, &mut rng).await;
        raw_answer(address, &pong).await;
    }
}

// ---- the report ----

/// The child process, killed if the bench fails before it exits on its own.
struct PeerProcess(Child);

impl Drop for PeerProcess {
    fn drop(&mut self) {
        if !matches!(self.0.try_wait(), Ok(Some(_))) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn grouped(value: f64) -> String {
    let digits = format!("{:.0}", value);
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn yes(met: bool) -> &'static str {
    if met { "yes" } else { "no" }
}

#[actix::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(at) = args.iter().position(|a| a == "--peer") {
        peer(&args[at + 1], Plan::from_args(&args[at + 2..])).await;
        return;
    }
    let quick = args.iter().any(|a| a == "--quick");
    let plan = if quick {
        Plan {
            small: 100_000,
            big: 2_000,
            asks: 2_000,
            rounds: 1,
        }
    } else {
        Plan {
            small: 1_000_000,
            big: 20_000,
            asks: 20_000,
            rounds: 3,
        }
    };
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("binds");
    let address = listener.local_addr().expect("an address").to_string();
    let mut child = PeerProcess(
        Command::new(std::env::current_exe().expect("this binary"))
            .arg("--peer")
            .arg(&address)
            .args(plan.to_args())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("the peer process starts"),
    );
    let mut rng = NodeRng::seed_from_u64(1);
    let ping = frame_of(&ask_envelope());
    let mut rounds = Vec::new();
    for _ in 0..plan.rounds {
        rounds.push(measure(&listener, &mut rng, plan, &ping).await);
    }
    let status = child.0.wait().expect("the peer process ends");
    assert!(status.success(), "the peer process failed: {status}");

    let of = |pick: fn(&Round) -> f64| median(rounds.iter().map(pick).collect());
    let small_bytes = frame_of(&small_tell()).len();
    let big_bytes = frame_of(&big_tell()).len() as f64;
    let reply_bytes = frame_of(&reply_envelope()).len();
    let (flint_small, raw_small) = (of(|r| r.flint_small), of(|r| r.raw_small));
    let mb = |rate: f64| rate * big_bytes / 1e6;
    let (flint_big, raw_big) = (mb(of(|r| r.flint_big)), mb(of(|r| r.raw_big)));
    let (flint_p50, raw_p50) = (of(|r| r.flint_ask.0), of(|r| r.raw_ping.0));
    let (flint_p99, raw_p99) = (of(|r| r.flint_ask.1), of(|r| r.raw_ping.1));

    println!(
        "Two processes (the bench and a child peer), each one single-threaded actix System, over \
         127.0.0.1 TCP with TCP_NODELAY; {} CPUs; median of {} round(s). MB = 10^6 bytes of \
         frames (4-byte length prefix + encoded envelope).",
        std::thread::available_parallelism().map_or(0, usize::from),
        plan.rounds
    );
    println!();
    println!("| measure | flint transport | raw TCP | flint ÷ raw | target | met |");
    println!("|---|---:|---:|---:|---|---|");
    println!(
        "| heartbeat tell one way, {} × {small_bytes} B frames | {} msg/s | {} msg/s | {:.2} | ≥ 1,000,000 msg/s | {} |",
        grouped(plan.small as f64),
        grouped(flint_small),
        grouped(raw_small),
        flint_small / raw_small,
        yes(flint_small >= 1e6)
    );
    println!(
        "| 64 KiB tell one way, {} × {big_bytes} B frames | {flint_big:.0} MB/s | {raw_big:.0} MB/s | {:.0} % | ≥ 50 % of raw | {} |",
        grouped(plan.big as f64),
        100.0 * flint_big / raw_big,
        yes(flint_big >= 0.5 * raw_big)
    );
    println!(
        "| ask round trip p50, {} sequential, {} B ask / {reply_bytes} B reply | {flint_p50:.1} µs | {raw_p50:.1} µs | {:.2} | < 50 µs | {} |",
        grouped(plan.asks as f64),
        ping.len(),
        flint_p50 / raw_p50,
        yes(flint_p50 < 50.0)
    );
    println!(
        "| ask round trip p99 | {flint_p99:.1} µs | {raw_p99:.1} µs | {:.2} | — | — |",
        flint_p99 / raw_p99
    );
}
