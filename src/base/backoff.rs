//! Exponential backoff: the pause doubles with each consecutive failure, up to a cap.
//!
//! Used wherever a retry could otherwise spin: the resource manager after workers fail to start,
//! the resource manager's registration at the JobManager, and the TaskManager's registration
//! timeouts. Deterministic (no jitter) so actor tests can assert exact delays.

use std::time::Duration;

/// The pauses `initial, 2·initial, 4·initial, ...` capped at `max`.
#[derive(Debug, Clone)]
pub struct ExponentialBackoff {
    initial: Duration,
    max: Duration,
    next: Duration,
}

impl ExponentialBackoff {
    /// A backoff whose first pause is `initial`.
    pub fn new(initial: Duration, max: Duration) -> Self {
        Self {
            initial,
            max,
            next: initial.min(max),
        }
    }

    /// The pause to take now; the one after it is twice as long (up to the cap).
    pub fn next_delay(&mut self) -> Duration {
        let delay = self.next;
        self.next = self.next.saturating_mul(2).min(self.max);
        delay
    }

    /// Back to the first pause, after a success.
    pub fn reset(&mut self) {
        self.next = self.initial.min(self.max);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_cap_and_resets() {
        let mut backoff =
            ExponentialBackoff::new(Duration::from_millis(100), Duration::from_millis(500));
        let delays: Vec<u128> = (0..5).map(|_| backoff.next_delay().as_millis()).collect();
        assert_eq!(delays, [100, 200, 400, 500, 500]);
        backoff.reset();
        assert_eq!(backoff.next_delay(), Duration::from_millis(100));
    }
}
