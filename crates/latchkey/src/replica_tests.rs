//! Unit tests of `crate::replica`.

use super::*;

#[test]
fn role_replies_give_the_replica_count_of_a_primary_only() {
    use redis::Value::{Array, BulkString, Int};
    let bulk = |s: &str| BulkString(s.as_bytes().to_vec());
    let replica = Array(vec![bulk("127.0.0.1"), bulk("6380"), bulk("123")]);
    let primary = Array(vec![bulk("master"), Int(123), Array(vec![replica])]);
    assert_eq!(role_replicas(&primary), Some(1));
    let alone = Array(vec![bulk("master"), Int(5), Array(vec![])]);
    assert_eq!(role_replicas(&alone), Some(0));
    let demoted = Array(vec![
        bulk("slave"),
        bulk("127.0.0.1"),
        Int(6380),
        bulk("connected"),
        Int(123),
    ]);
    assert_eq!(role_replicas(&demoted), None);
    assert_eq!(role_replicas(&redis::Value::Nil), None);
}

#[test]
fn absent_shards_are_not_waited_for_until_their_recheck() {
    let now = Instant::now();
    let mut memory = Memory::default();
    assert_eq!(
        memory.waits(7, now),
        Waits::Yes,
        "unknown shards are waited for"
    );
    memory.gone(vec![(0, 10), (100, 200)], now);
    assert_eq!(memory.waits(7, now), Waits::No);
    assert_eq!(memory.waits(150, now + REPLICA_RECHECK), Waits::Recheck);
    assert_eq!(memory.waits(11, now), Waits::Yes, "another shard");
    // A shard seen with replicas again is waited for at once.
    memory.seen(0, 7, None);
    assert_eq!(memory.waits(150, now), Waits::Yes);
}

/// The decision on a grant, one row per case: the facts known at each step (what rode along
/// with the script: `WAIT`'s count, or `ROLE`'s on a Sentinel primary found without replicas),
/// the memory before, and what comes out.
#[test]
fn the_decision_table() {
    let grace = Duration::from_secs(15);
    let a: Arc<str> = Arc::from("10.0.0.1:6379");
    let b: Arc<str> = Arc::from("10.0.0.2:6379");
    let facts =
        |replicas: Option<u32>, ran_on: Option<&Arc<str>>, verdict: Option<Verdict>| Facts {
            required: false,
            wanted: 1,
            tail: Tail::Acked(0),
            key: 0,
            ran_on: ran_on.cloned(),
            moved: false,
            replicas_now: replicas,
            verdict,
        };
    let seen_a = || Memory {
        primary_with_replicas: Some(a.clone()),
        ..Memory::default()
    };
    let now = Instant::now();
    let lost_a = |ago: Duration| Memory {
        primary_with_replicas: Some(a.clone()),
        lost: vec![Lost {
            key: 0,
            primary: Some(a.clone()),
            since: now - ago,
        }],
        ..Memory::default()
    };
    let confirmed = Some(Verdict::Confirmed);
    let role = |found: Option<usize>, ran_on: Option<&Arc<str>>| Facts {
        tail: Tail::Role(found),
        ..facts(None, ran_on, None)
    };
    let rows: Vec<(&str, Memory, Facts, Step)> = vec![
        (
            "enough replicas acknowledged: kept",
            Memory::default(),
            Facts {
                tail: Tail::Acked(1),
                ..facts(None, Some(&a), None)
            },
            Step::Done(Decision::Keep { gone: false }),
        ),
        (
            "enough acknowledged, even when required",
            Memory::default(),
            Facts {
                required: true,
                tail: Tail::Acked(2),
                ..facts(None, None, None)
            },
            Step::Done(Decision::Keep { gone: false }),
        ),
        (
            "ROLE: no primary any more, on Sentinel: undone and moved",
            seen_a(),
            role(None, Some(&a)),
            Step::Done(Decision::UndoAndMove(a.clone())),
        ),
        (
            "ROLE: no primary, off Sentinel: undone",
            Memory::default(),
            role(None, None),
            Step::Done(Decision::Undo),
        ),
        (
            "ROLE: a fresh promotion without replicas: kept",
            seen_a(),
            role(Some(0), Some(&b)),
            Step::Done(Decision::Keep { gone: false }),
        ),
        (
            "ROLE: a primary seen with replicas has none: the loss rule",
            seen_a(),
            role(Some(0), Some(&a)),
            Step::NeedReplicas,
        ),
        (
            "ROLE: replicas joined: wait for this grant",
            Memory::default(),
            role(Some(2), Some(&a)),
            Step::NeedWait,
        ),
        (
            "ROLE: the client left the primary: abandoned",
            Memory::default(),
            Facts {
                moved: true,
                ..role(Some(2), Some(&a))
            },
            Step::Done(Decision::Abandon),
        ),
        (
            "required: undone",
            Memory::default(),
            Facts {
                required: true,
                ..facts(None, None, None)
            },
            Step::Done(Decision::Undo),
        ),
        (
            "the client left the primary: abandoned",
            Memory::default(),
            Facts {
                moved: true,
                ..facts(None, Some(&a), None)
            },
            Step::Done(Decision::Abandon),
        ),
        (
            "first, the replica count",
            Memory::default(),
            facts(None, None, None),
            Step::NeedReplicas,
        ),
        (
            "a replica is there (slow): undone",
            Memory::default(),
            facts(Some(1), Some(&a), None),
            Step::Done(Decision::Undo),
        ),
        (
            "no replica on Sentinel: ask the sentinels",
            seen_a(),
            facts(Some(0), Some(&a), None),
            Step::NeedVerdict(a.clone()),
        ),
        (
            "the sentinels do not vouch: undone and moved",
            seen_a(),
            facts(Some(0), Some(&a), Some(Verdict::Moved)),
            Step::Done(Decision::UndoAndMove(a.clone())),
        ),
        (
            "a primary seen with replicas lost them: undone (the grace starts)",
            seen_a(),
            facts(Some(0), Some(&a), confirmed.clone()),
            Step::Done(Decision::Undo),
        ),
        (
            "the loss is younger than the grace: undone",
            lost_a(Duration::from_secs(5)),
            facts(Some(0), Some(&a), confirmed.clone()),
            Step::Done(Decision::Undo),
        ),
        (
            "the loss is older than the grace: kept, the shard gone",
            lost_a(Duration::from_secs(16)),
            facts(Some(0), Some(&a), confirmed.clone()),
            Step::Done(Decision::Keep { gone: true }),
        ),
        (
            "a primary never seen with replicas (a fresh promotion): kept",
            seen_a(),
            facts(Some(0), Some(&b), confirmed.clone()),
            Step::Done(Decision::Keep { gone: true }),
        ),
        (
            "a loss recorded for another primary: this one is fresh, kept",
            lost_a(Duration::ZERO),
            facts(Some(0), Some(&b), confirmed),
            Step::Done(Decision::Keep { gone: true }),
        ),
        (
            "off Sentinel, a first loss: undone",
            Memory::default(),
            facts(Some(0), None, None),
            Step::Done(Decision::Undo),
        ),
    ];
    for (case, mut memory, facts, expected) in rows {
        assert_eq!(memory.decide(&facts, grace, now), expected, "{case}");
    }
}
