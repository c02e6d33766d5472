//! Wall-clock time, for timestamps shown to people (DESIGN §8): one seam, so tests and the
//! simulation can fix it. Timers and timeouts never read it; they go through `tokio::time`.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

/// Wall-clock time in milliseconds since the Unix epoch, for timestamps shown to people.
/// Timers and timeouts never use it: they go through `tokio::time`, which tests can pause.
pub trait Clock: Send + Sync + fmt::Debug {
    /// Milliseconds since the Unix epoch.
    fn now_millis(&self) -> u64;
}

/// The machine's clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    #[allow(clippy::disallowed_methods)] // the one production source of wall time
    fn now_millis(&self) -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0)
    }
}

/// A clock that only moves when told to (tests, simulation).
#[derive(Debug, Default)]
pub struct ManualClock(AtomicU64);

impl ManualClock {
    /// A clock standing at `millis`.
    pub fn new(millis: u64) -> Self {
        Self(AtomicU64::new(millis))
    }

    /// Moves the clock forward.
    pub fn advance(&self, millis: u64) {
        self.0.fetch_add(millis, Ordering::Relaxed);
    }
}

impl Clock for ManualClock {
    fn now_millis(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_told() {
        let clock = ManualClock::new(1_000);
        assert_eq!(clock.now_millis(), 1_000);
        clock.advance(5);
        assert_eq!(clock.now_millis(), 1_005);
    }
}
