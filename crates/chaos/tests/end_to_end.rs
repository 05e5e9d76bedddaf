//! Record → read → check pipeline on real files and the real clock, with
//! in-process "locks" standing in for latchkey.

use std::fs::OpenOptions;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::thread;

use latchkey_chaos::checker::ViolationKind;
use latchkey_chaos::{
    check, read_histories, CheckOptions, EventKind, FencedStore, HistoryWriter, Mode,
};

const WORKERS: u32 = 4;
const ROUNDS: u64 = 50;

#[test]
fn correct_lock_yields_a_clean_report() {
    let dir = tempfile::tempdir().unwrap();
    let lock = Arc::new(Mutex::new(0u64)); // guards the token counter
    let store = Arc::new(Mutex::new(FencedStore::new()));
    let handles: Vec<_> = (0..WORKERS)
        .map(|worker| {
            let (dir, lock, store) = (dir.path().to_path_buf(), lock.clone(), store.clone());
            thread::spawn(move || {
                let mut w = HistoryWriter::create(&dir, worker, format!("proc-{worker}")).unwrap();
                for round in 0..ROUNDS {
                    let acquire = w.invoke(EventKind::AcquireInvoke).unwrap();
                    let mut guard = lock.lock().unwrap();
                    *guard += 1;
                    let token = *guard;
                    w.record(
                        acquire.op,
                        EventKind::AcquireOk {
                            fencing_token: token,
                        },
                    )
                    .unwrap();
                    let write = w
                        .invoke(EventKind::WriteInvoke {
                            token,
                            value: format!("{worker}/{round}"),
                        })
                        .unwrap();
                    let accepted = store.lock().unwrap().write(token, "v");
                    let outcome = if accepted {
                        EventKind::WriteOk
                    } else {
                        EventKind::WriteRejected
                    };
                    w.record(write.op, outcome).unwrap();
                    let release = w.invoke(EventKind::ReleaseInvoke).unwrap();
                    drop(guard);
                    w.record(release.op, EventKind::ReleaseOk).unwrap();
                }
            })
        })
        .collect();
    for handle in handles {
        handle.join().unwrap();
    }

    // A worker killed in the middle of writing a line.
    let path = dir.path().join(HistoryWriter::file_name(0));
    let mut file = OpenOptions::new().append(true).open(path).unwrap();
    file.write_all(b"{\"worker\":0,\"process\":\"proc-0\",\"op\":99")
        .unwrap();
    drop(file);

    let events = read_histories(dir.path()).unwrap();
    assert_eq!(events.len() as u64, u64::from(WORKERS) * ROUNDS * 6);
    for mode in [Mode::Strict, Mode::Conservative] {
        let options = CheckOptions {
            mode,
            ..CheckOptions::default()
        };
        let report = check(&events, &options).unwrap();
        assert!(report.is_safe(), "{mode}: {:#?}", report.violations);
        assert_eq!(report.counts.holds, u64::from(WORKERS) * ROUNDS);
        assert_eq!(report.counts.max_concurrent_holders, 1);
        assert_eq!(report.counts.writes.failed, 0);
        assert_eq!(report.counts.workers, u64::from(WORKERS));
    }
}

#[test]
fn lock_without_exclusion_is_caught() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = Arc::new(AtomicU64::new(0));
    let both_inside = Arc::new(Barrier::new(2));
    let handles: Vec<_> = (0..2u32)
        .map(|worker| {
            let (dir, tokens, both_inside) = (
                dir.path().to_path_buf(),
                tokens.clone(),
                both_inside.clone(),
            );
            thread::spawn(move || {
                let mut w = HistoryWriter::create(&dir, worker, format!("proc-{worker}")).unwrap();
                let acquire = w.invoke(EventKind::AcquireInvoke).unwrap();
                let token = tokens.fetch_add(1, Ordering::SeqCst) + 1;
                w.record(
                    acquire.op,
                    EventKind::AcquireOk {
                        fencing_token: token,
                    },
                )
                .unwrap();
                both_inside.wait();
                let release = w.invoke(EventKind::ReleaseInvoke).unwrap();
                w.record(release.op, EventKind::ReleaseOk).unwrap();
            })
        })
        .collect();
    for handle in handles {
        handle.join().unwrap();
    }
    let events = read_histories(dir.path()).unwrap();
    for mode in [Mode::Strict, Mode::Conservative] {
        let options = CheckOptions {
            mode,
            ..CheckOptions::default()
        };
        let report = check(&events, &options).unwrap();
        assert_eq!(report.violation_counts.overlapping_holds, 1, "{mode}");
        assert_eq!(report.counts.max_concurrent_holders, 2);
    }
}

/// A holder is paused past its lease, another worker takes over, and the
/// zombie then writes with its old token. `store_fenced` chooses whether the
/// store applies the fencing rule or accepts everything.
fn zombie_run(store_fenced: bool) -> latchkey_chaos::Report {
    let dir = tempfile::tempdir().unwrap();
    let mut store = FencedStore::new();
    let mut write = |w: &mut HistoryWriter, token: u64| {
        let invoke = w
            .invoke(EventKind::WriteInvoke {
                token,
                value: w.process().to_owned(),
            })
            .unwrap();
        let accepted = store.write(token, w.process()) || !store_fenced;
        let outcome = if accepted {
            EventKind::WriteOk
        } else {
            EventKind::WriteRejected
        };
        w.record(invoke.op, outcome).unwrap();
    };

    let mut zombie = HistoryWriter::create(dir.path(), 1, "zombie").unwrap();
    let mut next = HistoryWriter::create(dir.path(), 2, "next").unwrap();
    let acquire = zombie.invoke(EventKind::AcquireInvoke).unwrap();
    zombie
        .record(acquire.op, EventKind::AcquireOk { fencing_token: 1 })
        .unwrap();
    write(&mut zombie, 1);
    // The zombie is paused; its lease expires and worker 2 takes the lock.
    let acquire = next.invoke(EventKind::AcquireInvoke).unwrap();
    next.record(acquire.op, EventKind::AcquireOk { fencing_token: 2 })
        .unwrap();
    write(&mut next, 2);
    // The zombie resumes inside its critical section and writes.
    write(&mut zombie, 1);
    zombie.invoke(EventKind::LostSignal).unwrap();
    let release = next.invoke(EventKind::ReleaseInvoke).unwrap();
    next.record(release.op, EventKind::ReleaseOk).unwrap();

    let events = read_histories(dir.path()).unwrap();
    let options = CheckOptions {
        mode: Mode::Conservative,
        ..CheckOptions::default()
    };
    check(&events, &options).unwrap()
}

#[test]
fn zombie_write_is_refused_by_the_fenced_store() {
    let report = zombie_run(true);
    assert_eq!(report.violation_counts.stale_writes_accepted, 0);
    assert_eq!(report.counts.writes.failed, 1);
    // The zombie provably executed its critical section during worker 2's.
    assert_eq!(report.violation_counts.overlapping_holds, 1);
}

#[test]
fn zombie_write_accepted_by_an_unfenced_store_is_caught() {
    let report = zombie_run(false);
    assert_eq!(report.violation_counts.stale_writes_accepted, 1);
    assert!(report.violations.iter().any(|v| v.kind
        == ViolationKind::StaleWriteAccepted {
            token: 1,
            newer_token: 2
        }));
}
