//! Unit tests of `crate::rate_limit`: the checks made before anything is sent, and the jitter.

use std::time::Duration;

use super::{jittered, Quota, RateConfig, RateType, MAX_JITTER};

#[test]
fn jitter_adds_up_to_a_tenth_of_the_wait_within_bounds() {
    for wait in [
        Duration::ZERO,
        Duration::from_micros(300),
        Duration::from_millis(50),
        Duration::from_secs(1),
        Duration::from_secs(60),
    ] {
        let bound = (wait / 10).clamp(Duration::from_millis(1), MAX_JITTER);
        for _ in 0..200 {
            let slept = jittered(wait);
            assert!(slept >= wait, "{slept:?} < {wait:?}");
            assert!(slept <= wait + bound, "{slept:?} > {wait:?} + {bound:?}");
        }
    }
}

#[test]
fn rate_configs_are_checked_before_anything_is_sent() {
    let second = Duration::from_secs(1);
    let ok = RateConfig::new(RateType::Overall, 10, second);
    assert_eq!(ok.check().unwrap(), (1000, 0));
    let kept = ok.with_keep_alive(Duration::from_millis(1500));
    assert_eq!(kept.check().unwrap(), (1000, 1500));
    // Sub-millisecond parts are dropped, as Redisson's `toMillis` does.
    let fine = RateConfig::new(RateType::PerClient, 1, Duration::from_micros(2500));
    assert_eq!(fine.check().unwrap(), (2, 0));

    let bad = [
        RateConfig::new(RateType::Overall, 0, second),
        RateConfig::new(RateType::Overall, super::RateLimiter::MAX_RATE + 1, second),
        RateConfig::new(RateType::Overall, 10, Duration::ZERO),
        RateConfig::new(RateType::Overall, 10, Duration::from_micros(999)),
        RateConfig::new(
            RateType::Overall,
            10,
            super::RateLimiter::MAX_INTERVAL + Duration::from_millis(1),
        ),
        ok.with_keep_alive(Duration::from_millis(999)),
        ok.with_keep_alive(Duration::ZERO),
        ok.with_keep_alive(super::RateLimiter::MAX_INTERVAL + second),
    ];
    for config in bad {
        let err = config.check().expect_err("refused");
        assert!(err.is_invalid_argument(), "{config:?}: {err}");
    }
}

#[test]
fn quotas_are_checked_before_anything_is_sent() {
    assert_eq!(Quota::per_second(10).check().unwrap(), 1_000_000);
    assert_eq!(
        Quota::per_hour(1).with_burst(100).check().unwrap(),
        3_600_000_000
    );
    // One permit per microsecond is the finest a quota may be.
    assert!(Quota::per_second(1_000_000).check().is_ok());

    let bad = [
        Quota::per_second(0),
        Quota::per_second(10).with_burst(0),
        Quota::per_second(1_000_001),
        Quota::new(1, Duration::from_nanos(999)),
        Quota::new(1, super::GcraLimiter::MAX_PERIOD + Duration::from_secs(1)),
        // A bucket that takes a thousand days to empty.
        Quota::per_hour(1).with_burst(24_000),
    ];
    for quota in bad {
        let err = quota.check().expect_err("refused");
        assert!(err.is_invalid_argument(), "{quota:?}: {err}");
    }
}

#[test]
fn emission_interval_is_period_over_rate() {
    assert_eq!(
        Quota::per_second(3).emission_interval(),
        Duration::from_secs(1) / 3
    );
    assert_eq!(Quota::per_second(0).emission_interval(), Duration::ZERO);
}
