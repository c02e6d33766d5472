//! (being written) Remote actors: the node endpoint, remote proxies and inbound dispatch.
//!
//! Agreed API (implemented in the transport-remote branch):
//!
//! ```text
//! pub struct EndpointConfig { pub bind: std::net::SocketAddr, pub advertised_host: Option<String>,
//!     pub cluster_id: ClusterId, pub node_name: String, pub secret: Secret,
//!     pub handshake_timeout: Duration, pub ask_timeout: Duration, pub max_frame: usize,
//!     pub outbound_queue: usize, pub seed: u64 }
//! pub struct NodeEndpoint;  // owns the listener task, dialer and connections
//! impl NodeEndpoint {
//!     pub async fn bind(config: EndpointConfig) -> Result<(NodeEndpoint, Arc<RemoteResolver>), EndpointError>;
//!     pub fn local_node(&self) -> String;   // "host:port" others reach this node at
//!     pub fn shutdown(&self);
//! }
//! pub struct RemoteResolver;  // implements crate::directory::Resolver
//! ```
