//! (being written)
pub struct OperatorRegistry;
