//! Unit tests of `crate::keys`.

use super::*;

#[test]
fn derived_names_keep_one_hash_tag() {
    assert_eq!(
        prefix_name("redisson_lock_token", "a"),
        "redisson_lock_token:{a}"
    );
    assert_eq!(
        prefix_name("redisson_lock_token", "a{b}"),
        "redisson_lock_token:a{b}"
    );
    assert_eq!(suffix_name("a", "timeout"), "{a}:timeout");
    assert_eq!(suffix_name("x{a}", "timeout"), "x{a}:timeout");
}

#[test]
fn slots_follow_hash_tags() {
    // Values from the Redis Cluster specification and `CLUSTER KEYSLOT`.
    assert_eq!(key_slot(b"123456789"), 12739);
    assert_eq!(key_slot(b"foo"), 12182);
    assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
    assert_eq!(key_slot(b"foo{}{bar}"), key_slot(b"foo{}{bar}"));
    assert_eq!(key_slot(b"redisson_lock__channel:{a}"), key_slot(b"a"));
}

/// Redisson's names, byte for byte (Java clients share these keys), and latchkey's own.
#[test]
fn every_primitive_has_redissons_names() {
    let lock = LockKeys::new(None, "orders");
    let names = [
        &lock.hash,
        &lock.token,
        &lock.channel,
        &lock.queue,
        &lock.alive,
        &lock.hand_off,
    ];
    assert_eq!(
        names.map(|n| &**n),
        [
            "orders",
            "redisson_lock_token:{orders}",
            "redisson_lock__channel:{orders}",
            "latchkey_lock_queue:{orders}",
            "latchkey_lock_alive:{orders}",
            "latchkey_lock_handoff:{orders}",
        ]
    );

    let fair = FairLockKeys::new(None, "printer");
    let names = [&fair.hash, &fair.token, &fair.queue, &fair.deadlines];
    assert_eq!(
        names.map(|n| &**n),
        [
            "printer",
            "redisson_lock_token:{printer}",
            "redisson_lock_queue:{printer}",
            "redisson_lock_timeout:{printer}",
        ]
    );
    assert_eq!(
        &*fair.channel("c1:7"),
        "redisson_lock__channel:{printer}:c1:7"
    );

    let rw = RwLockKeys::new(None, "config");
    let names = [
        &rw.hash,
        &rw.token,
        &rw.writers,
        &rw.channel,
        &rw.lease_prefix,
    ];
    assert_eq!(
        names.map(|n| &**n),
        [
            "config",
            "latchkey_rwlock_token:{config}",
            "latchkey_rwlock_writers:{config}",
            "redisson_rwlock:{config}",
            "{config}",
        ]
    );
    assert_eq!(&*rw.read_prefix("c1:7"), "{config}:c1:7:rwlock_timeout");

    let sem = SemaphoreKeys::new(None, "downloads");
    assert_eq!(
        [&sem.count, &sem.total, &sem.channel].map(|n| &**n),
        [
            "downloads",
            "latchkey_semaphore_total:{downloads}",
            "redisson_sc:{downloads}",
        ]
    );

    let psem = PermitSemaphoreKeys::new(None, "workers");
    assert_eq!(
        [&psem.permits, &psem.leases, &psem.channel].map(|n| &**n),
        ["workers", "{workers}:timeout", "redisson_sc:{workers}"]
    );

    let queue = QueueKeys::new(None, "jobs");
    let names = [
        &queue.delayed,
        &queue.ready,
        &queue.items,
        &queue.unacked,
        &queue.attempts,
        &queue.dead,
        &queue.dead_reason,
        &queue.due,
        &queue.delay_channel,
        &queue.ready_channel,
    ];
    assert_eq!(
        names.map(|n| &**n),
        [
            "latchkey_delay_queue_timeout:{jobs}",
            "latchkey_queue:{jobs}",
            "latchkey_queue_items:{jobs}",
            "latchkey_queue_unacked:{jobs}",
            "latchkey_queue_attempts:{jobs}",
            "latchkey_queue_dead:{jobs}",
            "latchkey_queue_dead_reason:{jobs}",
            "latchkey_queue_due:{jobs}",
            "latchkey_delay_queue_channel:{jobs}",
            "latchkey_queue_channel:{jobs}",
        ]
    );
}

/// The namespace is part of the object's name, so every derived name follows it, and an
/// object's own hash tag is kept.
#[test]
fn one_rule_for_namespaces_and_hash_tags() {
    let lock = LockKeys::new(Some("billing"), "orders");
    assert_eq!(&*lock.hash, "billing:orders");
    assert_eq!(&*lock.token, "redisson_lock_token:{billing:orders}");
    let tagged = LockKeys::new(Some("billing"), "orders:{eu}");
    assert_eq!(&*tagged.hash, "billing:orders:{eu}");
    assert_eq!(&*tagged.token, "redisson_lock_token:billing:orders:{eu}");
    let rw = RwLockKeys::new(Some("ns"), "cfg{x}");
    assert_eq!(&*rw.lease_prefix, "ns:cfg{x}");
    assert_eq!(&*rw.read_prefix("o"), "ns:cfg{x}:o:rwlock_timeout");
    assert_eq!(
        &*PermitSemaphoreKeys::new(Some("ns"), "w").leases,
        "{ns:w}:timeout"
    );
    let queue = QueueKeys::new(Some("ns"), "jobs:{eu}");
    assert_eq!(&*queue.ready, "latchkey_queue:ns:jobs:{eu}");
    assert_eq!(
        LatchKeys::new(Some("ns"), "ready", false).channel,
        "redisson_countdownlatch__channel__{ns:ready}"
    );
    // Every key of an object is in the object's slot.
    for (namespace, name) in [(None, "a"), (Some("ns"), "b"), (None, "c:{tag}")] {
        let lock = LockKeys::new(namespace, name);
        let slot = key_slot(lock.hash.as_bytes());
        for key in [
            &lock.token,
            &lock.channel,
            &lock.queue,
            &lock.alive,
            &lock.hand_off,
        ] {
            assert_eq!(key_slot(key.as_bytes()), slot, "{key}");
        }
    }
}

/// Every key and channel of an election is latchkey's own and in the election's slot.
#[test]
fn election_keys_share_one_slot() {
    let keys = ElectionKeys::new(Some("ns"), "jobs");
    assert_eq!(&*keys.leader, "latchkey_election:{ns:jobs}");
    assert_eq!(&*keys.term, "latchkey_election_term:{ns:jobs}");
    assert_eq!(&*keys.observe, "latchkey_election_observe:{ns:jobs}");
    for (namespace, name) in [(None, "a"), (Some("ns"), "b"), (None, "c:{tag}")] {
        let keys = ElectionKeys::new(namespace, name);
        let slot = key_slot(keys.leader.as_bytes());
        for key in [
            &keys.term,
            &keys.log,
            &keys.queue,
            &keys.alive,
            &keys.hand_off,
            &keys.channel,
            &keys.observe,
        ] {
            assert_eq!(key_slot(key.as_bytes()), slot, "{key}");
        }
    }
}

#[test]
fn the_latch_channel_is_redissons_unless_that_leaves_the_keys_slot() {
    let channel = |name: &str, cluster: bool| LatchKeys::new(None, name, cluster).channel;
    for cluster in [false, true] {
        assert_eq!(
            channel("ready", cluster),
            "redisson_countdownlatch__channel__{ready}"
        );
    }
    assert_eq!(
        channel("orders{eu}:1", false),
        "redisson_countdownlatch__channel__{orders{eu}:1}"
    );
    let tagged = channel("orders{eu}:1", true);
    assert_eq!(tagged, "redisson_countdownlatch__channel__orders{eu}:1");
    assert_eq!(key_slot(tagged.as_bytes()), key_slot(b"eu"));
    // A `{` without a closing brace is no hash tag: Redisson's channel shares the slot.
    assert_eq!(
        channel("a{b", true),
        "redisson_countdownlatch__channel__{a{b}"
    );
}

#[test]
fn names_are_checked() {
    assert!(check_name("").unwrap_err().is_invalid_argument());
    assert!(check_name(&"x".repeat(MAX_NAME_LEN + 1))
        .unwrap_err()
        .is_invalid_argument());
    assert!(check_name(&"x".repeat(MAX_NAME_LEN)).is_ok());
    assert!(check_name("redisson_lock_token:{a}")
        .unwrap_err()
        .is_invalid_argument());
    assert!(check_name("latchkey_lock_queue:{a}")
        .unwrap_err()
        .is_invalid_argument());
    assert!(check_name("orders:{1001}").is_ok());
    assert!(check_name("{1001}:orders").is_ok());
    assert!(check_name("{a}{b}").is_ok());
    for whole_tag in ["{a}", "{}", "{a}b}", "{orders:1001}"] {
        assert!(
            check_name(whole_tag).unwrap_err().is_invalid_argument(),
            "{whole_tag}"
        );
    }
}
