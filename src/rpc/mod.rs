//! Remote actors (Flink's RPC service, over Flint's transport): the same actors, unchanged,
//! across processes and machines.
//!
//! [`endpoint`] is a node's presence on the network: the listener and the accepting of
//! not-yet-authenticated streams, one connection per peer (dialled on demand with bounded,
//! backed-off attempts), the dispatch of what peers send to this node's actors, and the
//! [`endpoint::RemoteResolver`], whose proxies implement the same handlers as the actors they
//! stand for, so callers hold the same gateways whether a peer is local or not. [`directory`]
//! turns addresses into gateways for the actors of this process. Correlation, ask timeouts and
//! fencing are the connection's and the actors'; bytes are the transport's.

pub mod directory;
pub mod endpoint;
