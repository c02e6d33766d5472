//! The remote actor transport: the same actors, unchanged, across processes and machines.
//!
//! Bottom up: [`frame`] (length-prefixed frames, the size limit checked before allocating),
//! [`envelope`] (`{target, sender, correlation, tell | ask | reply, payload}` with every protocol
//! message and answer), [`handshake`] (protocol version, cluster id, node id, mutual HMAC-SHA256
//! challenge–response on the shared cluster secret), [`connection`] (one per peer: framed
//! envelopes, correlated asks with timeouts, bounded queues, a dropped peer failing its pending
//! asks at once) and [`remote`] (the node endpoint — listener, dialer, inbound dispatch to local
//! actors — and the `RemoteResolver`, whose proxies implement the same handlers as the actors, so
//! callers hold the same gateways whether a peer is local or not). [`tls`] optionally wraps each
//! TCP stream in rustls below the handshake.

pub mod connection;
pub mod envelope;
pub mod frame;
pub mod handshake;
pub mod metrics;
pub mod network;
pub mod tls;

pub use connection::ASK_TIMEOUT;
