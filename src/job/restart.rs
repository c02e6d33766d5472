//! Restart strategies: after a task failure, whether the job restarts and after what pause
//! (Flink's `RestartBackoffTimeStrategy` family, configured by [`RestartStrategyConfig`]).
//!
//! This module owns the decision and the arithmetic only; the JobManager waits out the delay on
//! `tokio::time` (so tests can pause it) and restarts the regions. Jitter comes from the caller's
//! seeded [`NodeRng`], never a thread RNG, so a seed replays the same delays. No input may make
//! it panic: durations saturate and non-finite floats fall back to the cap.

use std::time::Duration;

use crate::base::rng::NodeRng;
use crate::job::graph::RestartStrategyConfig;

/// Why a job failed without a restart, whatever its strategy allows: its failure is not
/// recoverable (an invalid operator configuration; Flink's `NonRecoverableError`).
pub const NOT_RESTARTED: &str = "not restarted: every attempt would fail the same way";

/// What to do about a failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RestartDecision {
    /// Restart the failed part of the job after `delay`.
    Restart {
        /// The pause before restarting, so a failure that repeats at once does not spin.
        delay: Duration,
    },
    /// Fail the job: the strategy allows no more restarts.
    GiveUp {
        /// Why, for the job's failure cause shown to people.
        reason: String,
    },
}

/// One job's restart strategy with its state (how many restarts so far). Built afresh for each
/// job run from the job graph's [`RestartStrategyConfig`].
#[derive(Debug, Clone)]
pub struct RestartBackoff {
    config: RestartStrategyConfig,
    /// Failures seen (every `on_failure` call).
    failures: u32,
    /// Restarts granted.
    restarts: u32,
}

impl RestartBackoff {
    /// A strategy that has seen no failure yet.
    pub fn new(config: RestartStrategyConfig) -> Self {
        Self {
            config,
            failures: 0,
            restarts: 0,
        }
    }

    /// Decides what to do about one more failure. Exponential delays draw one value from `rng`
    /// per call, so the same seed gives the same delays; the other strategies never touch it.
    pub fn on_failure(&mut self, rng: &mut NodeRng) -> RestartDecision {
        self.failures = self.failures.saturating_add(1);
        let decision = match self.config {
            RestartStrategyConfig::None => RestartDecision::GiveUp {
                reason: "restart strategy none: a failed task fails the job".into(),
            },
            RestartStrategyConfig::FixedDelay { attempts, delay } => {
                if self.restarts < attempts {
                    RestartDecision::Restart { delay }
                } else {
                    RestartDecision::GiveUp {
                        reason: format!(
                            "fixed-delay restart strategy exhausted its {attempts} restart attempts"
                        ),
                    }
                }
            }
            RestartStrategyConfig::ExponentialDelay {
                initial,
                max,
                multiplier,
                jitter,
            } => {
                let base = exponential_delay(initial, max, multiplier, self.failures);
                RestartDecision::Restart {
                    delay: jittered(base, jitter, unit_interval(rng)),
                }
            }
        };
        if matches!(decision, RestartDecision::Restart { .. }) {
            self.restarts = self.restarts.saturating_add(1);
        }
        decision
    }

    /// Restarts granted so far (the REST API's restart count).
    pub fn restarts(&self) -> u32 {
        self.restarts
    }
}

/// `min(initial · multiplier^(failure-1), max)`; anything that is not a finite, non-negative
/// number of seconds (overflow, NaN multiplier) is the cap.
fn exponential_delay(initial: Duration, max: Duration, multiplier: f64, failure: u32) -> Duration {
    let exponent = f64::from(failure.saturating_sub(1));
    let seconds = initial.as_secs_f64() * multiplier.powf(exponent);
    if !(seconds >= 0.0 && seconds < max.as_secs_f64()) {
        return max;
    }
    Duration::try_from_secs_f64(seconds).map_or(max, |delay| delay.min(max))
}

/// `delay` moved by up to `±jitter·delay`, where `unit` in `[0, 1)` picks the point in that
/// range. Jitter is clamped to `[0, 1]` (a NaN jitter is none) so a delay never goes negative.
fn jittered(delay: Duration, jitter: f64, unit: f64) -> Duration {
    let jitter = if jitter.is_nan() {
        0.0
    } else {
        jitter.clamp(0.0, 1.0)
    };
    let seconds = delay.as_secs_f64();
    let moved = seconds + seconds * jitter * (2.0 * unit - 1.0);
    Duration::try_from_secs_f64(moved.max(0.0)).unwrap_or(delay)
}

/// A uniform draw in `[0, 1)` from the top 53 bits (an f64's precision).
fn unit_interval(rng: &mut NodeRng) -> f64 {
    (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests;
