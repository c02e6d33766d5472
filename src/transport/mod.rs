//! The transport: bytes between nodes, authenticated, framed and correlated — and nothing about
//! what they say. It is generic over the protocol's payload ([`envelope::Payload`]), so the
//! protocol (`crate::messages`) sits above it and a new message never touches it; the remote
//! actors that dispatch and proxy typed messages are `crate::rpc`, above the protocol.
//!
//! Bottom up: [`network`] (where byte streams come from: TCP, or the simulated network),
//! [`tls`] (optional rustls below the handshake), [`frame`] (length-prefixed frames, the size
//! limit checked before allocating), [`handshake`] (protocol version, cluster id, node id, mutual
//! HMAC-SHA256 challenge–response on the shared cluster secret), [`envelope`]
//! (`{target, sender, correlation, tell | ask | reply, payload}`, checked for consistency by the
//! payload's own rule) and [`connection`] (one per peer: framed envelopes both ways, correlated
//! asks with the [`ASK_TIMEOUT`], bounded queues, a dropped peer failing its pending asks at
//! once). [`metrics`] counts what every connection carried.

pub mod connection;
pub mod envelope;
pub mod frame;
pub mod handshake;
pub mod metrics;
pub mod network;
pub mod tls;

pub use connection::ASK_TIMEOUT;
