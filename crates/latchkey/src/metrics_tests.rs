//! Unit tests of `crate::metrics`.

use super::*;

/// Every metric name, for the docs test.
const ALL: &[&str] = &[
    ACQUIRES,
    CONTENDED,
    ACQUIRE_DURATION,
    WAIT_DURATION,
    HOLD_DURATION,
    LOST,
    RENEWALS,
    RENEWAL_FAILURES,
    HANDOFFS,
    PUBSUB_RECONNECTS,
    PUBSUB_RESUBSCRIPTIONS,
    QUEUE_OFFERED,
    QUEUE_DELIVERED,
    QUEUE_REDELIVERED,
    QUEUE_EXPIRED,
    QUEUE_ACKED,
    QUEUE_DEAD_LETTERED,
    QUEUE_LATENESS,
    QUEUE_DEPTH,
    JOB_RUNS,
    JOB_LATENESS,
    JOB_DURATION,
    RATE_ADMITTED,
    RATE_REFUSED,
    RATE_WAIT,
];

#[test]
fn every_metric_is_in_the_documented_table() {
    let table = include_str!("../../../docs/metrics.md");
    for name in ALL {
        assert!(
            table.contains(&format!("| `{name}` |")),
            "{name} is missing from docs/metrics.md"
        );
    }
    let rows = table
        .lines()
        .filter(|l| l.starts_with("| `latchkey_"))
        .count();
    assert_eq!(
        rows,
        ALL.len(),
        "a documented metric latchkey does not record"
    );
}

#[test]
fn names_follow_prometheus_conventions() {
    for name in ALL {
        assert!(name.starts_with("latchkey_"), "{name}");
        assert!(
            name.chars().all(|c| c.is_ascii_lowercase() || c == '_'),
            "{name}"
        );
        let counter = name.ends_with("_total");
        let seconds = name.ends_with("_seconds");
        assert!(counter || seconds || *name == super::QUEUE_DEPTH, "{name}");
    }
}
