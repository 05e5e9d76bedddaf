use super::*;

/// Builds hand-written histories; the process of worker `w` is `p{w}`.
#[derive(Default)]
struct Hist {
    events: Vec<Event>,
}

impl Hist {
    fn ev(&mut self, worker: u32, op: u64, time_ns: u64, kind: EventKind) -> &mut Self {
        self.evp(worker, &format!("p{worker}"), op, time_ns, kind)
    }

    fn evp(
        &mut self,
        worker: u32,
        process: &str,
        op: u64,
        time_ns: u64,
        kind: EventKind,
    ) -> &mut Self {
        self.events
            .push(Event::new(worker, process, op, time_ns, kind));
        self
    }

    fn acquire(&mut self, w: u32, op: u64, invoke: u64, ok: u64, token: u64) -> &mut Self {
        self.ev(w, op, invoke, EventKind::AcquireInvoke).ev(
            w,
            op,
            ok,
            EventKind::AcquireOk {
                fencing_token: token,
            },
        )
    }

    fn release(&mut self, w: u32, op: u64, invoke: u64, ok: u64) -> &mut Self {
        self.ev(w, op, invoke, EventKind::ReleaseInvoke)
            .ev(w, op, ok, EventKind::ReleaseOk)
    }

    fn write(
        &mut self,
        w: u32,
        op: u64,
        invoke: u64,
        done: u64,
        token: u64,
        ok: bool,
    ) -> &mut Self {
        let value = format!("w{w}-op{op}");
        self.ev(w, op, invoke, EventKind::WriteInvoke { token, value })
            .ev(
                w,
                op,
                done,
                if ok {
                    EventKind::WriteOk
                } else {
                    EventKind::WriteRejected
                },
            )
    }

    fn check(&self, mode: Mode) -> Report {
        let options = CheckOptions {
            mode,
            ..CheckOptions::default()
        };
        check(&self.events, &options).expect("well-formed history")
    }
}

fn kinds(report: &Report) -> Vec<&ViolationKind> {
    report.violations.iter().map(|v| &v.kind).collect()
}

/// Three workers taking turns correctly, one failed acquire.
fn clean_history() -> Hist {
    let mut h = Hist::default();
    h.acquire(1, 0, 0, 10, 1)
        .write(1, 1, 12, 14, 1, true)
        .release(1, 2, 20, 25)
        .acquire(2, 0, 5, 30, 2)
        .write(2, 1, 32, 34, 2, true)
        .release(2, 2, 40, 45)
        .ev(3, 0, 6, EventKind::AcquireInvoke)
        .ev(
            3,
            0,
            8,
            EventKind::AcquireFail {
                reason: "timeout waiting".into(),
            },
        )
        .acquire(3, 1, 41, 50, 3)
        .write(3, 2, 52, 53, 3, true)
        .release(3, 3, 60, 61);
    h
}

#[test]
fn clean_history_passes_in_both_modes() {
    let h = clean_history();
    for mode in [Mode::Strict, Mode::Conservative] {
        let report = h.check(mode);
        assert!(report.is_safe(), "{mode}: {:#?}", report.violations);
        assert!(report.passed());
        assert_eq!(report.mode, mode);
        assert_eq!(report.violation_counts, ViolationCounts::default());
        assert!(report.violations.is_empty());
        let c = &report.counts;
        assert_eq!(c.events, 20);
        assert_eq!(c.workers, 3);
        assert_eq!(c.processes, 3);
        assert_eq!(
            c.acquires,
            OpCounts {
                attempted: 4,
                succeeded: 3,
                failed: 1,
                unknown: 0
            }
        );
        assert_eq!(
            c.releases,
            OpCounts {
                attempted: 3,
                succeeded: 3,
                failed: 0,
                unknown: 0
            }
        );
        assert_eq!(c.writes.attempted, 3);
        assert_eq!(c.writes.succeeded, 3);
        assert_eq!(c.holds, 3);
        assert_eq!(c.holds_open_at_end, 0);
        assert_eq!(c.max_concurrent_holders, 1);
        assert_eq!(c.operations().attempted, 10);
        assert_eq!(c.operations().succeeded, 9);
    }
}

#[test]
fn overlapping_holds_are_flagged() {
    let mut h = Hist::default();
    h.acquire(1, 0, 0, 10, 1)
        .release(1, 1, 30, 31)
        .acquire(2, 0, 5, 20, 2)
        .release(2, 1, 40, 41);
    for mode in [Mode::Strict, Mode::Conservative] {
        let report = h.check(mode);
        assert!(!report.is_safe());
        assert!(!report.passed());
        assert_eq!(report.violation_counts.overlapping_holds, 1, "{mode}");
        assert_eq!(report.violation_counts.total(), 1, "{mode}");
        assert_eq!(
            kinds(&report),
            [&ViolationKind::OverlappingHolds {
                overlap_start_ns: 20,
                overlap_end_ns: Some(30)
            }]
        );
        let v = &report.violations[0];
        let oks: Vec<u32> = v
            .events
            .iter()
            .filter(|e| matches!(e.kind, EventKind::AcquireOk { .. }))
            .map(|e| e.worker)
            .collect();
        assert_eq!(oks, [1, 2]);
        assert!(v.events.iter().any(|e| e.kind == EventKind::ReleaseInvoke));
        assert!(v.description.contains("worker 1"));
        assert_eq!(report.counts.max_concurrent_holders, 2);
    }
}

#[test]
fn touching_holds_do_not_overlap() {
    let mut h = Hist::default();
    h.acquire(1, 0, 0, 10, 1)
        .release(1, 1, 20, 21)
        .acquire(2, 0, 5, 20, 2)
        .release(2, 1, 30, 31);
    let report = h.check(Mode::Strict);
    assert!(report.is_safe(), "{:#?}", report.violations);
    assert_eq!(report.counts.max_concurrent_holders, 1);
}

#[test]
fn three_way_overlap_counts_pairs_and_concurrency() {
    let mut h = Hist::default();
    h.acquire(1, 0, 0, 10, 1)
        .release(1, 1, 100, 101)
        .acquire(2, 0, 1, 20, 2)
        .release(2, 1, 100, 101)
        .acquire(3, 0, 2, 30, 3)
        .release(3, 1, 100, 101);
    let report = h.check(Mode::Strict);
    assert_eq!(report.violation_counts.overlapping_holds, 3);
    assert_eq!(report.counts.max_concurrent_holders, 3);
}

#[test]
fn duplicate_token_is_flagged() {
    let mut h = Hist::default();
    h.acquire(1, 0, 0, 10, 5)
        .release(1, 1, 20, 21)
        .acquire(2, 0, 25, 30, 5)
        .release(2, 1, 40, 41);
    let report = h.check(Mode::Strict);
    assert_eq!(
        kinds(&report),
        [&ViolationKind::DuplicateToken { token: 5, holds: 2 }]
    );
    assert_eq!(report.violation_counts.duplicate_tokens, 1);
    assert_eq!(report.violation_counts.token_inversions, 0);
    assert_eq!(report.violations[0].events.len(), 2);
    assert!(!report.is_safe());
}

#[test]
fn token_inversion_is_flagged() {
    let mut h = Hist::default();
    h.acquire(1, 0, 0, 10, 5)
        .release(1, 1, 20, 21)
        .acquire(2, 0, 15, 30, 3)
        .release(2, 1, 40, 41);
    let report = h.check(Mode::Strict);
    assert_eq!(
        kinds(&report),
        [&ViolationKind::TokenInversion {
            earlier_token: 5,
            later_token: 3
        }]
    );
    let v = &report.violations[0];
    assert_eq!(v.events.len(), 3);
    assert_eq!(v.events[0].worker, 1);
    assert_eq!(v.events[1].kind, EventKind::AcquireInvoke);
    assert_eq!(v.events[1].worker, 2);
}

#[test]
fn inversion_witness_is_the_largest_earlier_token() {
    let mut h = Hist::default();
    h.acquire(1, 0, 0, 10, 7)
        .release(1, 1, 11, 12)
        .acquire(2, 0, 13, 14, 9)
        .release(2, 1, 15, 16)
        .acquire(3, 0, 20, 30, 8)
        .release(3, 1, 31, 32);
    let report = h.check(Mode::Strict);
    assert_eq!(report.violation_counts.token_inversions, 1);
    assert_eq!(
        kinds(&report),
        [&ViolationKind::TokenInversion {
            earlier_token: 9,
            later_token: 8
        }]
    );
}

#[test]
fn concurrent_acquires_may_get_tokens_in_any_order() {
    // Worker 2 invoked acquire before worker 1's acquire completed, so the
    // two acquisitions are concurrent and token order is unconstrained.
    let mut h = Hist::default();
    h.acquire(1, 0, 0, 10, 5)
        .release(1, 1, 20, 21)
        .acquire(2, 0, 5, 30, 3)
        .release(2, 1, 40, 41);
    let report = h.check(Mode::Strict);
    assert!(report.is_safe(), "{:#?}", report.violations);
}

/// Worker 1 holds token 1, worker 2 then holds token 2 and writes; worker 1
/// afterwards writes with its old token 1.
fn late_stale_write(accepted: bool) -> Hist {
    let mut h = Hist::default();
    h.acquire(1, 0, 0, 10, 1)
        .write(1, 1, 12, 14, 1, true)
        .release(1, 2, 20, 21)
        .acquire(2, 0, 15, 30, 2)
        .write(2, 1, 32, 34, 2, true)
        .release(2, 2, 40, 41)
        .write(1, 3, 50, 52, 1, accepted);
    h
}

#[test]
fn stale_write_accepted_is_flagged() {
    let report = late_stale_write(true).check(Mode::Strict);
    assert_eq!(
        kinds(&report),
        [&ViolationKind::StaleWriteAccepted {
            token: 1,
            newer_token: 2
        }]
    );
    let events = &report.violations[0].events;
    assert_eq!(events.len(), 4);
    assert_eq!(events[1].kind, EventKind::WriteOk);
    assert_eq!(events[1].worker, 2);
    assert_eq!(events[3].kind, EventKind::WriteOk);
    assert_eq!(events[3].worker, 1);
    assert_eq!(report.counts.writes.succeeded, 3);
}

#[test]
fn stale_write_rejected_is_not_flagged() {
    let report = late_stale_write(false).check(Mode::Strict);
    assert!(report.is_safe(), "{:#?}", report.violations);
    assert_eq!(report.counts.writes.failed, 1);
    assert_eq!(report.counts.writes.succeeded, 2);
}

#[test]
fn concurrent_writes_are_not_flagged_whatever_their_completion_order() {
    // Worker 1's write with token 1 was sent at 25 and may have been applied
    // before worker 2's write with token 2 (its WriteOk is only recorded at
    // 60, e.g. after a pause).
    let mut h = Hist::default();
    h.acquire(1, 0, 0, 10, 1)
        .write(1, 1, 25, 60, 1, true)
        .acquire(2, 0, 15, 30, 2)
        .write(2, 1, 32, 34, 2, true)
        .release(2, 2, 40, 41);
    let report = h.check(Mode::Conservative);
    assert_eq!(report.violation_counts.stale_writes_accepted, 0);
}

/// Worker 1 writes, is paused, and is told at 200 that it lost the lock;
/// meanwhile worker 2 acquires at 100. With `write_after`, worker 1 also
/// sends a (refused) write at 150, while worker 2 is in its critical section.
fn paused_worker(write_after: bool) -> Hist {
    let mut h = Hist::default();
    h.acquire(1, 0, 0, 10, 1).write(1, 1, 20, 25, 1, true);
    if write_after {
        h.write(1, 2, 105, 151, 1, false);
    }
    h.ev(1, 3, 200, EventKind::LostSignal)
        .ev(1, 4, 201, EventKind::ReleaseInvoke)
        .ev(
            1,
            4,
            202,
            EventKind::ReleaseFail {
                reason: "not the owner".into(),
            },
        )
        .acquire(2, 0, 50, 100, 2)
        .write(2, 1, 110, 111, 2, true)
        .release(2, 2, 120, 121);
    h
}

#[test]
fn conservative_mode_ignores_paused_worker_without_proof_of_life() {
    let h = paused_worker(false);
    let strict = h.check(Mode::Strict);
    assert_eq!(strict.violation_counts.overlapping_holds, 1);
    assert_eq!(strict.counts.lost_signals, 1);
    assert_eq!(strict.counts.releases.failed, 1);

    let conservative = h.check(Mode::Conservative);
    assert!(conservative.is_safe(), "{:#?}", conservative.violations);
    assert_eq!(conservative.counts.max_concurrent_holders, 1);
}

#[test]
fn conservative_mode_flags_paused_worker_that_wrote_after_the_other_acquired() {
    let report = paused_worker(true).check(Mode::Conservative);
    assert_eq!(
        kinds(&report),
        [&ViolationKind::OverlappingHolds {
            overlap_start_ns: 100,
            overlap_end_ns: Some(120)
        }]
    );
    let proofs: Vec<&Event> = report.violations[0]
        .events
        .iter()
        .filter(|e| e.kind == EventKind::WriteRejected)
        .collect();
    assert_eq!(proofs.len(), 1, "the late write is the proof");
    assert_eq!(proofs[0].time_ns, 151);
    // The refused write is no stale write accepted.
    assert_eq!(report.violation_counts.stale_writes_accepted, 0);
}

#[test]
fn dead_holder_is_open_ended_in_strict_mode_only() {
    let mut h = Hist::default();
    h.acquire(1, 0, 0, 10, 1)
        .write(1, 1, 11, 12, 1, true)
        .ev(
            1,
            2,
            13,
            EventKind::WriteInvoke {
                token: 1,
                value: "in flight".into(),
            },
        )
        .acquire(2, 0, 50, 100, 2)
        .release(2, 1, 110, 111)
        .acquire(3, 0, 112, 120, 3)
        .release(3, 1, 130, 131);
    let strict = h.check(Mode::Strict);
    assert_eq!(strict.violation_counts.overlapping_holds, 2);
    assert_eq!(strict.counts.holds_open_at_end, 1);
    assert_eq!(strict.counts.writes.unknown, 1);
    assert!(strict.violations.iter().all(|v| matches!(
        v.kind,
        ViolationKind::OverlappingHolds {
            overlap_end_ns: Some(_),
            ..
        }
    )));
    assert!(strict.violations[0].description.contains("end of history"));

    let conservative = h.check(Mode::Conservative);
    assert!(conservative.is_safe(), "{:#?}", conservative.violations);

    let all = holds(&h.events).unwrap();
    assert_eq!(all.len(), 3);
    assert_eq!(all[0].end, HoldEnd::EndOfHistory);
    assert_eq!(all[0].interval(Mode::Strict), (10, None));
    assert_eq!(all[0].interval(Mode::Conservative), (10, Some(13)));
    assert_eq!(all[1].end, HoldEnd::Release);
    assert_eq!(all[1].interval(Mode::Conservative), (100, Some(110)));
}

#[test]
fn hold_without_proof_is_an_instant_in_conservative_mode() {
    let mut h = Hist::default();
    // Worker 1 is killed right after AcquireOk at 50, inside worker 2's hold.
    h.acquire(2, 0, 0, 10, 1)
        .write(2, 1, 60, 61, 1, true)
        .release(2, 2, 70, 71)
        .acquire(1, 0, 5, 50, 2);
    let report = h.check(Mode::Conservative);
    assert_eq!(report.violation_counts.overlapping_holds, 1);
    assert_eq!(report.counts.max_concurrent_holders, 2);
}

#[test]
fn restarted_process_of_the_same_worker_is_another_holder() {
    let mut h = Hist::default();
    h.evp(1, "old", 0, 0, EventKind::AcquireInvoke)
        .evp(1, "old", 0, 10, EventKind::AcquireOk { fencing_token: 1 })
        .evp(1, "new", 1, 40, EventKind::AcquireInvoke)
        .evp(1, "new", 1, 50, EventKind::AcquireOk { fencing_token: 2 })
        .evp(1, "new", 2, 60, EventKind::ReleaseInvoke)
        .evp(1, "new", 2, 61, EventKind::ReleaseOk);
    let strict = h.check(Mode::Strict);
    assert_eq!(strict.violation_counts.overlapping_holds, 1);
    assert_eq!(strict.counts.processes, 2);
    assert_eq!(strict.counts.workers, 1);
    assert!(h.check(Mode::Conservative).is_safe());
}

#[test]
fn lost_signal_ends_the_hold() {
    let mut h = Hist::default();
    h.acquire(1, 0, 0, 10, 1)
        .ev(1, 0, 20, EventKind::LostSignal)
        .acquire(2, 0, 15, 30, 2)
        .release(2, 1, 40, 41)
        .ev(1, 1, 45, EventKind::ReleaseInvoke)
        .ev(
            1,
            1,
            46,
            EventKind::ReleaseFail {
                reason: "lost".into(),
            },
        );
    let report = h.check(Mode::Strict);
    assert!(report.is_safe(), "{:#?}", report.violations);
    let all = holds(&h.events).unwrap();
    assert_eq!(all[0].end, HoldEnd::Lost);
    assert_eq!(all[0].interval(Mode::Strict), (10, Some(20)));
}

#[test]
fn unknown_outcomes_are_counted() {
    let mut h = Hist::default();
    h.ev(1, 0, 0, EventKind::AcquireInvoke)
        .ev(1, 0, 5, EventKind::AcquireUnknown)
        .ev(1, 1, 6, EventKind::AcquireInvoke)
        .ev(2, 0, 7, EventKind::AcquireInvoke)
        .ev(2, 0, 8, EventKind::AcquireOk { fencing_token: 1 })
        .ev(2, 1, 9, EventKind::ReleaseInvoke);
    let report = h.check(Mode::Strict);
    assert_eq!(
        report.counts.acquires,
        OpCounts {
            attempted: 3,
            succeeded: 1,
            failed: 0,
            unknown: 2
        }
    );
    assert_eq!(report.counts.releases.unknown, 1);
    assert_eq!(report.counts.holds, 1);
    assert_eq!(report.counts.holds_open_at_end, 0);
}

#[test]
fn input_order_does_not_matter() {
    let h = paused_worker(true);
    let expected = h.check(Mode::Conservative);
    let reversed = Hist {
        events: h.events.iter().rev().cloned().collect(),
    };
    assert_eq!(reversed.check(Mode::Conservative), expected);
}

#[test]
fn listing_is_capped_per_kind_but_everything_is_counted() {
    let mut h = Hist::default();
    h.acquire(1, 0, 0, 10, 1); // never released: open in strict mode
    for w in 2..6u32 {
        let t = u64::from(w) * 100;
        h.acquire(w, 0, t, t + 10, u64::from(w))
            .release(w, 1, t + 20, t + 21);
    }
    h.acquire(9, 0, 1000, 1010, 1).release(9, 1, 1020, 1021);
    let options = CheckOptions {
        mode: Mode::Strict,
        max_violations_listed: 1,
    };
    let report = check(&h.events, &options).unwrap();
    assert_eq!(report.violation_counts.overlapping_holds, 5);
    assert_eq!(report.violation_counts.duplicate_tokens, 1);
    assert_eq!(report.violation_counts.token_inversions, 1);
    assert_eq!(report.violations.len(), 3);
    assert_eq!(report.violations_omitted, 4);
}

#[test]
fn empty_history_is_clean() {
    let report = check(&[], &CheckOptions::default()).unwrap();
    assert!(report.passed());
    assert_eq!(report.counts, Counts::default());
}

fn error_of(h: &Hist) -> CheckError {
    check(&h.events, &CheckOptions::default()).expect_err("malformed history")
}

#[test]
fn malformed_histories_are_errors_not_panics() {
    let mut h = Hist::default();
    h.ev(1, 0, 5, EventKind::AcquireOk { fencing_token: 1 });
    assert_eq!(error_of(&h).problem, Malformation::OrphanCompletion);

    let mut h = Hist::default();
    h.ev(1, 0, 0, EventKind::AcquireInvoke)
        .ev(1, 0, 5, EventKind::WriteOk);
    assert_eq!(error_of(&h).problem, Malformation::MismatchedCompletion);

    let mut h = Hist::default();
    h.ev(1, 0, 0, EventKind::AcquireInvoke).evp(
        1,
        "other",
        0,
        5,
        EventKind::AcquireOk { fencing_token: 1 },
    );
    assert_eq!(error_of(&h).problem, Malformation::MismatchedCompletion);

    let mut h = Hist::default();
    h.release(1, 0, 0, 5).ev(1, 0, 6, EventKind::ReleaseOk);
    assert_eq!(error_of(&h).problem, Malformation::DuplicateCompletion);

    let mut h = Hist::default();
    h.ev(1, 0, 0, EventKind::AcquireInvoke)
        .ev(1, 0, 1, EventKind::AcquireInvoke);
    let err = error_of(&h);
    assert_eq!(err.problem, Malformation::DuplicateOpId);
    assert_eq!(err.events.len(), 2);

    let mut h = Hist::default();
    h.acquire(1, 0, 0, 5, 1).acquire(1, 1, 6, 7, 2);
    let err = error_of(&h);
    assert_eq!(err.problem, Malformation::NestedAcquire);
    assert!(err.to_string().contains("malformed history"));
}

#[test]
fn leftovers_summary_and_cleanliness() {
    let mut leftovers = Leftovers::default();
    assert!(leftovers.is_clean());
    assert_eq!(leftovers.summary(), "clean");
    leftovers.hold_counts.insert("p1".into(), 0);
    assert!(leftovers.is_clean(), "zero hold counts are clean");
    leftovers.hold_counts.insert("p2".into(), 2);
    leftovers.lock_keys = vec!["lk:a".into(), "lk:b".into()];
    leftovers.queue_entries = vec!["p3".into()];
    assert!(!leftovers.is_clean());
    assert_eq!(
        leftovers.summary(),
        "2 lock keys, 1 hold count, 1 queue entry"
    );
    leftovers.subscriptions = vec!["ch".into(), "ch2".into()];
    assert!(leftovers.summary().ends_with("2 subscriptions"));

    let report = clean_history().check(Mode::Strict);
    assert!(report.clone().with_leftovers(Leftovers::default()).passed());
    let dirty = report.with_leftovers(leftovers);
    assert!(dirty.is_safe());
    assert!(!dirty.passed());
}

#[test]
fn report_round_trips_through_json() {
    let report = paused_worker(true)
        .check(Mode::Conservative)
        .with_leftovers(Leftovers {
            lock_keys: vec!["lk".into()],
            ..Leftovers::default()
        });
    let json = serde_json::to_string_pretty(&report).unwrap();
    assert!(json.contains("\"OverlappingHolds\""));
    let back: Report = serde_json::from_str(&json).unwrap();
    assert_eq!(back, report);
}
