//! Counters that code increments where something happens and the REST API's `/metrics` reads.
//!
//! Only what no actor's status already answers lives here: the transport's traffic and refused
//! connections ([`TransportMetrics`], kept by the [`NodeEndpoint`]). Gauges (the pool, slots,
//! jobs by state) and the counters an actor owns (start failures, heartbeat timeouts, task
//! restarts) are asked of the actors on every scrape, so there is one source of truth for each.
//!
//! A counter is a shared atomic: counting never blocks, never allocates and never reads a clock,
//! so it is safe in node code and changes nothing in a deterministic simulation (nobody decides
//! anything on a counter's value). It must never be used to make a decision.
//!
//! [`NodeEndpoint`]: crate::rpc::endpoint::NodeEndpoint

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// A monotonic count shared by whoever counts and whoever reports; clones count into the same
/// value.
#[derive(Clone, Default)]
pub struct Counter(Arc<AtomicU64>);

impl Counter {
    /// A counter at zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `n`. Relaxed: a reader only needs each counter's own value to be monotonic.
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    /// Adds one.
    pub fn increment(&self) {
        self.add(1);
    }

    /// The count so far.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

impl fmt::Debug for Counter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Counter({})", self.get())
    }
}

/// What a node's transport endpoint has carried since it started, over all its connections.
///
/// Messages and bytes count envelope frames (tells, asks and replies, with their length
/// prefix), not handshakes or TLS records: they measure the cluster protocol's traffic.
#[derive(Debug, Clone, Default)]
pub struct TransportMetrics {
    /// Envelopes received.
    pub messages_in: Counter,
    /// Envelopes queued for sending (and so written unless the connection died first).
    pub messages_out: Counter,
    /// Frame bytes received.
    pub bytes_in: Counter,
    /// Frame bytes queued for sending.
    pub bytes_out: Counter,
    /// Inbound connections refused: a failed handshake (wrong secret or cluster, garbage, TLS)
    /// or more handshakes in progress than the endpoint accepts at once.
    pub rejected_connections: Counter,
}

impl TransportMetrics {
    /// Every counter at zero (also what a cluster without a transport reports).
    pub fn new() -> Self {
        Self::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_count_into_the_same_value() {
        let counter = Counter::new();
        let clone = counter.clone();
        counter.increment();
        clone.add(41);
        assert_eq!(counter.get(), 42);
        assert_eq!(format!("{clone:?}"), "Counter(42)");
    }

    #[test]
    fn transport_metrics_share_their_counters_across_clones() {
        let metrics = TransportMetrics::new();
        let reporter = metrics.clone();
        metrics.messages_in.increment();
        metrics.bytes_in.add(100);
        metrics.rejected_connections.increment();
        assert_eq!(reporter.messages_in.get(), 1);
        assert_eq!(reporter.bytes_in.get(), 100);
        assert_eq!(reporter.messages_out.get(), 0);
        assert_eq!(reporter.rejected_connections.get(), 1);
    }
}
