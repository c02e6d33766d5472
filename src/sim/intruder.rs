//! Intruders (issue 34): nodes without the cluster secret that connect to the JobManager during
//! the fault phase, among the other faults. One says nothing, one drips a handshake message a
//! byte at a time, one shakes hands with a wrong secret. The JobManager must drop each — the
//! silent and the dripping one at the handshake's byte-rate floor or by eviction, the wrong
//! secret at the proof — and the cluster must run on as if they were not there (every other
//! invariant of the run still holds).

use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;

use super::network::SimNodeNetwork;
use crate::base::ids::ClusterId;
use crate::base::rng::NodeRng;
use crate::transport::handshake::{self, HandshakeConfig, Secret};
use crate::transport::network::Network;

/// What an intruder does once connected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntruderKind {
    /// Connects and says nothing.
    Silent,
    /// Sends a handshake message's length and then one byte every 100 ms.
    Drip,
    /// Runs the real handshake with a secret that is not the cluster's.
    WrongSecret,
}

/// How long an intruder keeps trying before it reports its connection still open: far beyond
/// the handshake timeout and the longest pause of a node in a scenario.
pub const INTRUDER_PATIENCE: Duration = Duration::from_secs(60);

/// An intruder started: its task, and what became of it once it is done.
pub type Started = (tokio::task::JoinHandle<()>, Rc<Cell<Option<Outcome>>>);

/// What became of an intruder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// It could not connect (the target was unreachable): nothing to judge.
    NoConnection,
    /// The target closed its connection or refused its handshake, after this long.
    Dropped(Duration),
    /// Its connection was still open after [`INTRUDER_PATIENCE`]: a violation.
    StillOpen,
    /// It completed a handshake without the secret: a violation.
    Admitted,
}

/// Runs one intruder from `network` against the node `target` of `cluster`; `outcome` is set
/// when it is done.
pub async fn intrude(
    network: SimNodeNetwork,
    target: String,
    kind: IntruderKind,
    cluster: ClusterId,
    seed: u64,
    outcome: Rc<Cell<Option<Outcome>>>,
) {
    let started = Instant::now();
    let Ok(mut stream) = network.connect(&target, Duration::from_secs(5)).await else {
        outcome.set(Some(Outcome::NoConnection));
        return;
    };
    let result = match kind {
        IntruderKind::WrongSecret => {
            let config = HandshakeConfig {
                cluster_id: cluster,
                node_id: format!("intruder-{seed}"),
                secret: Secret::from_bytes(b"not the cluster's secret".to_vec()),
                timeout: INTRUDER_PATIENCE,
            };
            let mut rng = NodeRng::seed_from_u64(seed);
            match handshake::initiate(&mut stream, &config, &target, &mut rng).await {
                Ok(_) => Outcome::Admitted,
                Err(_) => Outcome::Dropped(started.elapsed()),
            }
        }
        IntruderKind::Silent | IntruderKind::Drip => {
            let drip = kind == IntruderKind::Drip;
            let mut open = !drip || stream.write_all(&200u32.to_be_bytes()).await.is_ok();
            while open && started.elapsed() < INTRUDER_PATIENCE {
                let mut sink = [0u8; 256];
                // The target's own Hello arrives; end of stream (or an error) is the drop.
                let read = tokio::time::timeout(Duration::from_millis(100), stream.read(&mut sink));
                if let Ok(Ok(0) | Err(_)) = read.await {
                    open = false;
                }
                if open && drip {
                    open = stream.write_all(b"x").await.is_ok();
                }
            }
            if open {
                Outcome::StillOpen
            } else {
                Outcome::Dropped(started.elapsed())
            }
        }
    };
    outcome.set(Some(result));
}
