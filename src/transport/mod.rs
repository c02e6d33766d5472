//! The remote actor transport (being built): frames, envelopes and the authenticated handshake.
//! Nothing here is wired into the actors yet; see the module docs of each part.

pub mod connection;
pub mod envelope;
pub mod frame;
pub mod handshake;
pub mod remote;
