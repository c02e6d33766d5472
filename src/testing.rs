//! Test support: node environments on the current arbiter, and probe actors that record what the
//! actor under test sends and answer as scripted.

use std::sync::Arc;

use crate::directory::LocalDirectory;
use crate::env::{CurrentArbiterSpawner, ManualClock, NodeEnv};
use crate::events::EventSink;

/// An environment whose spawner keeps everything on the current arbiter (so a paused clock
/// governs every timer), with a fresh local directory.
pub fn env(node: &str, seed: u64) -> NodeEnv {
    NodeEnv::new(
        node,
        seed,
        Arc::new(ManualClock::new(1_000_000)),
        Arc::new(CurrentArbiterSpawner),
        Arc::new(LocalDirectory::new()),
        EventSink::new(1024),
    )
}
