//! How long an actor's messages take, for `/metrics`: the longest single message handled and
//! how long a message waited in the mailbox before it was handled (a probe the actor sends
//! itself through its own mailbox, behind whatever waits there).
//!
//! Measured with `tokio::time::Instant`, so under a paused clock (tests, the simulation) every
//! figure is 0. The figures are shown, never used to decide anything.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use actix::clock::Instant;

/// The figures of one actor, shared with whoever reports them.
#[derive(Debug, Clone, Default)]
pub struct MailboxStats {
    max_handle_us: Arc<AtomicU64>,
    last_delay_us: Arc<AtomicU64>,
    max_delay_us: Arc<AtomicU64>,
}

/// Times one handler: records its duration when dropped.
#[must_use = "the handler is timed until the guard is dropped"]
pub struct HandleTimer {
    max_handle_us: Arc<AtomicU64>,
    started: Instant,
}

impl Drop for HandleTimer {
    fn drop(&mut self) {
        let took = micros(self.started.elapsed());
        self.max_handle_us.fetch_max(took, Ordering::Relaxed);
    }
}

impl MailboxStats {
    /// Starts timing a handler; call first thing in `handle`.
    pub fn time(&self) -> HandleTimer {
        HandleTimer {
            max_handle_us: self.max_handle_us.clone(),
            started: Instant::now(),
        }
    }

    /// A probe sent at `sent` is handled now.
    pub fn probe_arrived(&self, sent: Instant) {
        let waited = micros(sent.elapsed());
        self.last_delay_us.store(waited, Ordering::Relaxed);
        self.max_delay_us.fetch_max(waited, Ordering::Relaxed);
    }

    /// The longest handler so far, in microseconds.
    pub fn max_handle_us(&self) -> u64 {
        self.max_handle_us.load(Ordering::Relaxed)
    }

    /// How long the last probe waited in the mailbox, in microseconds.
    pub fn last_delay_us(&self) -> u64 {
        self.last_delay_us.load(Ordering::Relaxed)
    }

    /// The longest any probe waited, in microseconds.
    pub fn max_delay_us(&self) -> u64 {
        self.max_delay_us.load(Ordering::Relaxed)
    }
}

fn micros(duration: std::time::Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[actix::test]
    async fn the_longest_handler_and_mailbox_wait_are_kept() {
        tokio::time::pause();
        let stats = MailboxStats::default();
        {
            let _timed = stats.time();
            tokio::time::advance(std::time::Duration::from_millis(7)).await;
        }
        {
            let _timed = stats.time();
            tokio::time::advance(std::time::Duration::from_millis(2)).await;
        }
        assert_eq!(stats.max_handle_us(), 7_000);
        let sent = Instant::now();
        tokio::time::advance(std::time::Duration::from_millis(3)).await;
        stats.probe_arrived(sent);
        stats.probe_arrived(Instant::now());
        assert_eq!((stats.last_delay_us(), stats.max_delay_us()), (0, 3_000));
    }
}
