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
mod tests {
    use super::*;

    fn restart(delay: Duration) -> RestartDecision {
        RestartDecision::Restart { delay }
    }

    fn delays(backoff: &mut RestartBackoff, rng: &mut NodeRng, n: usize) -> Vec<Duration> {
        (0..n)
            .map(|_| match backoff.on_failure(rng) {
                RestartDecision::Restart { delay } => delay,
                other => panic!("exponential delay gave up: {other:?}"),
            })
            .collect()
    }

    #[test]
    fn none_always_gives_up() {
        let mut rng = NodeRng::seed_from_u64(1);
        let mut backoff = RestartBackoff::new(RestartStrategyConfig::None);
        for _ in 0..3 {
            match backoff.on_failure(&mut rng) {
                RestartDecision::GiveUp { reason } => assert!(reason.contains("none"), "{reason}"),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(backoff.restarts(), 0);
    }

    #[test]
    fn fixed_delay_restarts_attempts_times_then_gives_up() {
        let mut rng = NodeRng::seed_from_u64(1);
        let delay = Duration::from_millis(250);
        let mut backoff =
            RestartBackoff::new(RestartStrategyConfig::FixedDelay { attempts: 3, delay });
        for n in 1..=3 {
            assert_eq!(backoff.on_failure(&mut rng), restart(delay));
            assert_eq!(backoff.restarts(), n);
        }
        for _ in 0..2 {
            match backoff.on_failure(&mut rng) {
                RestartDecision::GiveUp { reason } => assert!(reason.contains('3'), "{reason}"),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(backoff.restarts(), 3);

        let mut zero =
            RestartBackoff::new(RestartStrategyConfig::FixedDelay { attempts: 0, delay });
        assert!(matches!(
            zero.on_failure(&mut rng),
            RestartDecision::GiveUp { .. }
        ));
    }

    #[test]
    fn exponential_delay_grows_to_the_cap_and_never_gives_up() {
        let mut rng = NodeRng::seed_from_u64(1);
        let mut backoff = RestartBackoff::new(RestartStrategyConfig::ExponentialDelay {
            initial: Duration::from_secs(1),
            max: Duration::from_secs(10),
            multiplier: 2.0,
            jitter: 0.0,
        });
        let secs: Vec<u64> = delays(&mut backoff, &mut rng, 7)
            .iter()
            .map(Duration::as_secs)
            .collect();
        assert_eq!(secs, [1, 2, 4, 8, 10, 10, 10]);
        assert_eq!(backoff.restarts(), 7);
    }

    #[test]
    fn exponential_jitter_stays_within_bounds_and_replays_for_a_seed() {
        let config = RestartStrategyConfig::default(); // 1 s, 60 s, ×1.5, ±10 %
        let run = |seed| {
            let mut rng = NodeRng::seed_from_u64(seed);
            delays(&mut RestartBackoff::new(config), &mut rng, 40)
        };
        let first = run(42);
        assert_eq!(first, run(42));
        assert_ne!(first, run(43));
        for (n, delay) in first.iter().enumerate() {
            let base = (1.5f64.powi(n as i32)).min(60.0);
            let secs = delay.as_secs_f64();
            assert!(
                secs >= base * 0.9 - 1e-9 && secs <= base * 1.1 + 1e-9,
                "failure {}: {secs} s not within 10 % of {base} s",
                n + 1
            );
        }
        // The draws do spread: not every delay sits on its base.
        assert!(
            first
                .iter()
                .enumerate()
                .any(|(n, d)| (d.as_secs_f64() - 1.5f64.powi(n as i32).min(60.0)).abs() > 1e-3)
        );
    }

    #[test]
    fn exponential_delay_survives_extreme_values() {
        let mut rng = NodeRng::seed_from_u64(7);
        for (multiplier, jitter) in [
            (f64::MAX, 5.0),
            (f64::INFINITY, -1.0),
            (f64::NAN, f64::NAN),
            (-3.0, 1.0),
            (0.0, 0.5),
        ] {
            let mut backoff = RestartBackoff::new(RestartStrategyConfig::ExponentialDelay {
                initial: Duration::MAX,
                max: Duration::MAX,
                multiplier,
                jitter,
            });
            for _ in 0..5 {
                assert!(matches!(
                    backoff.on_failure(&mut rng),
                    RestartDecision::Restart { .. }
                ));
            }
        }
        // Far past the cap after billions of failures: still the cap, no overflow.
        assert_eq!(
            exponential_delay(
                Duration::from_secs(1),
                Duration::from_secs(60),
                1.5,
                u32::MAX
            ),
            Duration::from_secs(60)
        );
        // A cap below the initial pause wins.
        assert_eq!(
            exponential_delay(Duration::from_secs(5), Duration::from_secs(2), 2.0, 1),
            Duration::from_secs(2)
        );
    }

    #[test]
    fn jitter_endpoints() {
        let delay = Duration::from_secs(10);
        assert_eq!(jittered(delay, 0.1, 0.0), Duration::from_secs(9));
        assert_eq!(jittered(delay, 0.1, 0.5), delay);
        assert_eq!(jittered(delay, 2.0, 0.0), Duration::ZERO);
        assert_eq!(jittered(delay, f64::NAN, 0.0), delay);
    }
}
