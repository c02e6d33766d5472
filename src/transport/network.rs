//! The cut below the handshake: where a node's byte streams come from (DESIGN §8).
//!
//! Everything from the handshake up — framing, envelopes, correlated asks and their timeouts,
//! `PeerDown`, dispatch, proxies, fencing — is the same code in production and in the
//! deterministic simulation. Only this is swapped: [`TcpNetwork`] dials and accepts real sockets;
//! the simulator's network (`crate::sim`) hands out in-memory streams whose frames it delays,
//! loses, reorders and cuts. Cutting here rather than at the envelope (as DESIGN §8 first
//! sketched) means the simulation also exercises the handshake and the frame reader on every
//! connection, and a lost or reordered frame reaches the real connection code.
//!
//! TLS, when configured, is put on top of whatever stream a network yields, by the endpoint.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use futures_util::future::LocalBoxFuture;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};

use super::connection::ConnectionError;
use super::tls::TlsError;
use crate::base::rng::NodeRng;

/// Why an endpoint could not start.
#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    /// The address could not be bound (in use, not ours). Retryable only if it becomes free.
    #[error("cannot listen on {address}")]
    Bind {
        /// The address asked for.
        address: SocketAddr,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The listener's own address could not be read.
    #[error("cannot read the address the endpoint listens on")]
    LocalAddress(#[source] io::Error),
}

/// Why one connection attempt failed.
#[derive(Debug, thiserror::Error)]
pub enum DialError {
    /// The TCP connection could not be made (refused, no route, DNS). Retryable.
    #[error("cannot connect")]
    Connect(#[source] io::Error),
    /// The TCP connection took longer than the handshake timeout. Retryable.
    #[error("connecting took longer than {0:?}")]
    ConnectTimeout(Duration),
    /// Connected, but the handshake failed (a wrong secret or cluster is not retryable).
    #[error(transparent)]
    Connection(#[from] ConnectionError),
    /// Connected, but TLS could not be opened (retryable: a restarting peer looks the same as
    /// an untrusted one here, and dialling is bounded anyway).
    #[error(transparent)]
    Tls(#[from] TlsError),
}

impl DialError {
    /// Whether dialling again may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Connect(_) | Self::ConnectTimeout(_) => true,
            Self::Tls(error) => !matches!(error, TlsError::ServerName(_)),
            Self::Connection(error) => error.is_retryable(),
        }
    }
}

/// A connected byte stream of any network.
pub trait ByteStream: AsyncRead + AsyncWrite + Unpin {}

impl<S: AsyncRead + AsyncWrite + Unpin> ByteStream for S {}

/// A stream as a network yields it.
pub type BoxStream = Box<dyn ByteStream>;

/// What binding yields: the node id peers reach this node at, and the listener.
pub type Bound = LocalBoxFuture<'static, Result<(String, Box<dyn Listener>), EndpointError>>;

/// Where a node listens and how it connects out.
pub trait Network: Send + Sync + fmt::Debug {
    /// Starts listening at `bind`. Returns the node id peers reach this node at (`host:port`:
    /// `advertised_host` if given, else the bound address) and the listener.
    fn bind(&self, bind: SocketAddr, advertised_host: Option<String>) -> Bound;

    /// The generator a node's handshake nonces come from, for the whole life of its endpoint.
    /// Production draws it from the operating system's entropy and ignores `node_seed`: the
    /// configuration's `seed` replays a run, and replayed nonces would let a recorded handshake
    /// be replayed without the secret. Only a simulated network returns a generator seeded
    /// from `node_seed`, so a simulated run stays reproducible.
    fn nonce_rng(&self, node_seed: u64) -> NodeRng;

    /// Connects to the node `peer` (`host:port`), giving up after `timeout`.
    fn connect(
        &self,
        peer: &str,
        timeout: Duration,
    ) -> LocalBoxFuture<'static, Result<BoxStream, DialError>>;
}

/// A bound listener.
pub trait Listener {
    /// The next accepted stream and where it came from (for logs).
    fn accept(&mut self) -> LocalBoxFuture<'_, io::Result<(BoxStream, String)>>;
}

/// Real TCP sockets (production).
#[derive(Debug, Default, Clone, Copy)]
pub struct TcpNetwork;

impl Network for TcpNetwork {
    fn bind(&self, bind: SocketAddr, advertised_host: Option<String>) -> Bound {
        Box::pin(async move {
            let listener = TcpListener::bind(bind)
                .await
                .map_err(|source| EndpointError::Bind {
                    address: bind,
                    source,
                })?;
            let bound = listener.local_addr().map_err(EndpointError::LocalAddress)?;
            let node = match advertised_host {
                Some(host) => format!("{host}:{}", bound.port()),
                None => bound.to_string(),
            };
            Ok((node, Box::new(TcpAcceptor(listener)) as Box<dyn Listener>))
        })
    }

    fn nonce_rng(&self, _node_seed: u64) -> NodeRng {
        NodeRng::from_entropy()
    }

    fn connect(
        &self,
        peer: &str,
        timeout: Duration,
    ) -> LocalBoxFuture<'static, Result<BoxStream, DialError>> {
        let peer = peer.to_owned();
        Box::pin(async move {
            let stream = tokio::time::timeout(timeout, TcpStream::connect(&peer))
                .await
                .map_err(|_| DialError::ConnectTimeout(timeout))?
                .map_err(DialError::Connect)?;
            no_delay(&stream, &peer);
            Ok(Box::new(stream) as BoxStream)
        })
    }
}

struct TcpAcceptor(TcpListener);

impl Listener for TcpAcceptor {
    fn accept(&mut self) -> LocalBoxFuture<'_, io::Result<(BoxStream, String)>> {
        Box::pin(async move {
            let (stream, from) = self.0.accept().await?;
            let from = from.to_string();
            no_delay(&stream, &from);
            Ok((Box::new(stream) as BoxStream, from))
        })
    }
}

/// Small envelopes (heartbeats, acks) must not wait for Nagle; the connection's writer batches.
fn no_delay(stream: &TcpStream, peer: &str) {
    if let Err(error) = stream.set_nodelay(true) {
        log::debug!("cannot set TCP_NODELAY towards {peer}: {error}");
    }
}
