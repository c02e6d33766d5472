//! How long an actor's messages take, for `/metrics`: the longest single message handled and
//! how long a message waited in the mailbox before it was handled (a probe the actor sends
//! itself through its own mailbox, behind whatever waits there).
//!
//! Measured with `tokio::time::Instant`, so under a paused clock (tests, the simulation) every
//! figure is 0. The figures are shown, never used to decide anything.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use actix::clock::Instant;

/// The figures of one actor, shared with whoever reports them.
#[derive(Debug, Clone, Default)]
pub struct MailboxStats {
    /// The longest handler and the message it handled.
    longest: Arc<Mutex<(u64, &'static str)>>,
    last_delay_us: Arc<AtomicU64>,
    max_delay_us: Arc<AtomicU64>,
}

/// Times one handler: records its duration when dropped.
#[must_use = "the handler is timed until the guard is dropped"]
pub struct HandleTimer {
    longest: Arc<Mutex<(u64, &'static str)>>,
    message: &'static str,
    started: Instant,
}

impl Drop for HandleTimer {
    fn drop(&mut self) {
        let took = micros(self.started.elapsed());
        // A poisoned lock only means a panic elsewhere mid-update of two plain values.
        let mut longest = self.longest.lock().unwrap_or_else(PoisonError::into_inner);
        if took > longest.0 {
            *longest = (took, self.message);
        }
    }
}

impl MailboxStats {
    /// Starts timing the handler of `message`; call first thing in `handle`.
    pub fn time(&self, message: &'static str) -> HandleTimer {
        HandleTimer {
            longest: self.longest.clone(),
            message,
            started: Instant::now(),
        }
    }

    /// A probe sent at `sent` is handled now.
    pub fn probe_arrived(&self, sent: Instant) {
        let waited = micros(sent.elapsed());
        self.last_delay_us.store(waited, Ordering::Relaxed);
        self.max_delay_us.fetch_max(waited, Ordering::Relaxed);
    }

    /// The longest handler so far, in microseconds, and the message it handled.
    pub fn longest_handler(&self) -> (u64, &'static str) {
        *self.longest.lock().unwrap_or_else(PoisonError::into_inner)
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
            let _timed = stats.time("Slow");
            tokio::time::advance(std::time::Duration::from_millis(7)).await;
        }
        {
            let _timed = stats.time("Quick");
            tokio::time::advance(std::time::Duration::from_millis(2)).await;
        }
        assert_eq!(stats.longest_handler(), (7_000, "Slow"));
        let sent = Instant::now();
        tokio::time::advance(std::time::Duration::from_millis(3)).await;
        stats.probe_arrived(sent);
        stats.probe_arrived(Instant::now());
        assert_eq!((stats.last_delay_us(), stats.max_delay_us()), (0, 3_000));
    }
}
