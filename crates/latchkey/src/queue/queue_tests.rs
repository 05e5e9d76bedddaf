//! Unit tests of `crate::queue`.

use super::*;

#[test]
fn delays_and_due_times_are_checked() {
    assert_eq!(check_delay(Duration::from_micros(1500)).unwrap(), 1500);
    assert_eq!(
        check_delay(MAX_DELAY).unwrap(),
        MAX_DELAY.as_micros() as u64
    );
    assert!(check_delay(MAX_DELAY + Duration::from_nanos(1))
        .unwrap_err()
        .is_invalid_argument());
    for bad in [
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        -1.0,
        -1e-9,
        1e300,
    ] {
        assert!(
            delay_from_secs_f64(bad).unwrap_err().is_invalid_argument(),
            "{bad}"
        );
    }
    assert_eq!(delay_from_secs_f64(-0.0).unwrap(), Duration::ZERO);
    assert_eq!(
        delay_from_secs_f64(1.5).unwrap(),
        Duration::from_millis(1500)
    );
    // Due times round up to the next millisecond.
    assert_eq!(
        check_due(UNIX_EPOCH + Duration::from_micros(1001)).unwrap(),
        2
    );
    assert_eq!(check_due(UNIX_EPOCH + Duration::from_millis(7)).unwrap(), 7);
    assert!(check_due(UNIX_EPOCH - Duration::from_secs(1))
        .unwrap_err()
        .is_invalid_argument());
    assert!(check_due(SystemTime::now() + MAX_DELAY * 2)
        .unwrap_err()
        .is_invalid_argument());
    assert!(check_visibility(Duration::ZERO)
        .unwrap_err()
        .is_invalid_argument());
    assert_eq!(check_visibility(Duration::from_secs(2)).unwrap(), 2000);
}

#[test]
fn payloads_over_the_cap_are_rejected() {
    let ok = "a".repeat(MAX_ITEM_SIZE - 2);
    assert_eq!(encode(&crate::Json, &ok).unwrap().len(), MAX_ITEM_SIZE);
    let big = "a".repeat(MAX_ITEM_SIZE - 1);
    assert!(encode(&crate::Json, &big)
        .unwrap_err()
        .is_invalid_argument());
}
