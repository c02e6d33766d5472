//! Remote actors over the transport.

pub mod directory;
pub mod endpoint;
