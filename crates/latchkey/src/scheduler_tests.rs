//! Unit tests of `crate::scheduler`: schedules and what a node asks for when occurrences were
//! missed.

use super::*;

fn job(schedule: Schedule, missed: Missed) -> Job {
    Job {
        name: Arc::from("j"),
        schedule,
        options: JobOptions::new().missed(missed),
        handler: Arc::new(|_run| Box::pin(async { Ok(()) })),
        keys: JobKeys {
            job: "latchkey_job:{g}:j".to_owned(),
            run: Arc::from("latchkey_job_run:{g}:j"),
        },
    }
}

const S: i64 = 1000;

#[test]
fn interval_occurrences_are_the_multiples_of_the_interval() {
    let every = Schedule::every(Duration::from_secs(5)).unwrap();
    assert_eq!(every.next_after(0), Some(5 * S));
    assert_eq!(every.next_after(5 * S - 1), Some(5 * S));
    assert_eq!(every.next_after(5 * S), Some(10 * S), "strictly after");
    assert_eq!(every.to_string(), "every 5000 ms");
}

#[test]
fn cron_occurrences_follow_the_time_zone_and_its_clock_changes() {
    // 2026-03-29: Europe/Paris goes from UTC+1 to UTC+2 at 02:00 local (01:00 UTC).
    let nine = Schedule::cron("0 0 9 * * *")
        .unwrap()
        .in_time_zone(chrono_tz::Europe::Paris);
    let before = chrono::DateTime::parse_from_rfc3339("2026-03-28T12:00:00Z")
        .unwrap()
        .timestamp_millis();
    let first = nine.next_after(before).unwrap();
    let second = nine.next_after(first).unwrap();
    let utc = |ms| {
        chrono::DateTime::from_timestamp_millis(ms)
            .unwrap()
            .to_rfc3339()
    };
    assert_eq!(
        utc(first),
        "2026-03-29T07:00:00+00:00",
        "09:00 in summer time"
    );
    assert_eq!(utc(second), "2026-03-30T07:00:00+00:00");
    let five_fields = Schedule::cron("*/15 * * * *").unwrap();
    assert_eq!(five_fields.next_after(0), Some(15 * 60 * S));
    assert!(Schedule::cron("not cron")
        .unwrap_err()
        .is_invalid_argument());
}

#[test]
fn one_occurrence_due_is_claimed_with_the_next_one_after_it() {
    let j = job(
        Schedule::every(Duration::from_secs(1)).unwrap(),
        Missed::RunOnce,
    );
    let p = plan(&j, 10 * S, 10 * S + 300).unwrap();
    assert_eq!(
        (p.mode, p.expected, p.run, p.next, p.skipped),
        ("claim", 10 * S, 10 * S, 11 * S, 0)
    );
}

#[test]
fn missed_occurrences_follow_the_policy() {
    let every = || Schedule::every(Duration::from_secs(1)).unwrap();
    // next_due 10 s; the server's clock says 15.3 s: 10..=15 are due (6), 16 is next.
    let now = 15 * S + 300;
    let p = plan(&job(every(), Missed::Skip), 10 * S, now).unwrap();
    assert_eq!((p.mode, p.next, p.skipped), ("skip", 16 * S, 6));
    let p = plan(&job(every(), Missed::RunOnce), 10 * S, now).unwrap();
    assert_eq!(
        (p.mode, p.run, p.next, p.skipped),
        ("claim", 15 * S, 16 * S, 5),
        "the latest due runs, for all of them"
    );
    let p = plan(&job(every(), Missed::RunEach { max: 3 }), 10 * S, now).unwrap();
    assert_eq!(
        (p.mode, p.run, p.next, p.skipped),
        ("claim", 12 * S, 13 * S, 2),
        "the last three missed, oldest first, then the current one; the two before skipped"
    );
    assert!(p.queue, "a catch-up run waits for the one before it");
    let p = plan(&job(every(), Missed::RunEach { max: 10 }), 10 * S, now).unwrap();
    assert_eq!(
        (p.run, p.next, p.skipped),
        (10 * S, 11 * S, 0),
        "all six, one by one"
    );
    // A long downtime counts every occurrence passed over without listing them.
    let p = plan(&job(every(), Missed::Skip), 10 * S, 100_000 * S).unwrap();
    assert_eq!((p.next, p.skipped), (100_001 * S, 99_991));
}
