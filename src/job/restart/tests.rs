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
    let mut backoff = RestartBackoff::new(RestartStrategyConfig::FixedDelay { attempts: 3, delay });
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

    let mut zero = RestartBackoff::new(RestartStrategyConfig::FixedDelay { attempts: 0, delay });
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
