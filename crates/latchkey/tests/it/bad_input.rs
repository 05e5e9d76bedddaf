//! The bad-input catalogue: one test per entry, each expecting a typed error (one of the
//! [`latchkey_redis::Error`] predicates) and nothing changed in Redis (the whole keyspace, compared
//! key by key with `DUMP`, is the same before and after).
//!
//! Entries that cannot be written because the type system rules them out are noted where they
//! would be: non-UTF-8 names (names are `String`s), negative leases and waits (`Duration` is
//! unsigned), more unlocks than locks (a guard is consumed by `unlock`; see the `compile_fail`
//! doctest on `LockGuard::unlock`).

use std::future::Future;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use latchkey_redis::{
    BlockingQueue, Client, Error, FairLock, LockOptions, RedLock, MAX_LEASE, MAX_NAME_LEN,
};
use latchkey_test_support::{FaultProxy, RedisCluster, RedisServer, RedisServers, TlsFiles};
use redis::AsyncCommands;

use crate::helpers::{client, cluster_url, eventually, keyspace, refused};

// ---------------------------------------------------------------------------------------------
// Names
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn empty_name() {
    let server = RedisServer::spawn();
    let a = client(&server).await;
    let mut conn = server.conn().await;
    refused(&mut conn, a.lock("").lock(), Error::is_invalid_argument).await;
    refused(
        &mut conn,
        a.lock("").try_lock(Duration::ZERO),
        Error::is_invalid_argument,
    )
    .await;
    refused(
        &mut conn,
        a.lock("").force_unlock(),
        Error::is_invalid_argument,
    )
    .await;
    refused(&mut conn, a.lock("").status(), Error::is_invalid_argument).await;
    refused(
        &mut conn,
        a.semaphore("").acquire(1),
        Error::is_invalid_argument,
    )
    .await;
    refused(
        &mut conn,
        a.fair_lock("").lock(),
        Error::is_invalid_argument,
    )
    .await;
    refused(
        &mut conn,
        a.rw_lock("").write().lock(),
        Error::is_invalid_argument,
    )
    .await;
    refused(
        &mut conn,
        a.delayed_queue::<String>("")
            .offer(&"x".to_owned(), Duration::ZERO),
        Error::is_invalid_argument,
    )
    .await;
    assert!(keyspace(&mut conn).await.is_empty());
}

#[tokio::test]
async fn oversized_name() {
    let server = RedisServer::spawn();
    let a = client(&server).await;
    let mut conn = server.conn().await;
    let long = "n".repeat(MAX_NAME_LEN + 1);
    let err = refused(
        &mut conn,
        a.lock(long.as_str()).lock(),
        Error::is_invalid_argument,
    )
    .await;
    assert!(err.to_string().contains("limit"), "says why: {err}");
    refused(
        &mut conn,
        a.semaphore(long.as_str()).acquire(1),
        Error::is_invalid_argument,
    )
    .await;
    // Exactly the limit is fine.
    let longest = "n".repeat(MAX_NAME_LEN);
    a.lock(longest.as_str())
        .lock()
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
}

/// Names that start like the keys latchkey derives from names could collide with another
/// lock's fencing counter or wait queue: they are refused.
#[tokio::test]
async fn reserved_name_prefixes() {
    let server = RedisServer::spawn();
    let a = client(&server).await;
    let mut conn = server.conn().await;
    a.lock("x").lock().await.unwrap().unlock().await.unwrap();
    for name in [
        "redisson_lock_token:{x}",
        "redisson_lock__channel:{x}",
        "latchkey_lock_queue:{x}",
        "latchkey_lock_alive:{x}",
        "latchkey_lock_handoff:{x}",
    ] {
        refused(&mut conn, a.lock(name).lock(), Error::is_invalid_argument).await;
        refused(
            &mut conn,
            a.lock(name).force_unlock(),
            Error::is_invalid_argument,
        )
        .await;
    }
}

/// `{`, `}` and `:` are legal in names: Redisson allows them, and hash tags are how users place
/// keys on a cluster. Every name is a lock of its own: all of these can be held at once, each
/// with its own hash, and each lock's keys are what the documented layout derives from its
/// name (`<prefix>:{<name>}`, or `<prefix>:<name>` when the name has its own `{`). (A name
/// that is one whole hash tag is refused: `a_name_that_is_one_whole_hash_tag_is_refused`.)
#[tokio::test]
async fn braces_and_colons_are_legal_and_every_name_is_its_own_lock() {
    let server = RedisServer::spawn();
    let a = client(&server).await;
    let mut conn = server.conn().await;
    let names = [
        "a", "a:{b}", "{a}:b", "a}", "{a", "a:", ":a", "{}x", "{}:{}", "a:{b}:c", "b", "{a:{b}}",
        "a:{b",
    ];
    let mut guards = Vec::new();
    for name in names {
        let guard = a
            .lock(name)
            .try_lock(Duration::ZERO)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("`{name}` is free: no other name uses its key"));
        guards.push(guard);
    }
    let keys = crate::helpers::data_keys(&mut conn).await;
    assert_eq!(
        keys.len(),
        2 * names.len(),
        "a hash and a counter per name: {keys:?}"
    );
    for (name, guard) in names.iter().zip(&guards) {
        let token = if name.contains('{') {
            format!("redisson_lock_token:{name}")
        } else {
            format!("redisson_lock_token:{{{name}}}")
        };
        assert!(keys.contains(&token), "{token} in {keys:?}");
        let status = a.lock(*name).status().await.unwrap();
        assert_eq!(status.holders.len(), 1, "{name}");
        assert_eq!(status.holders[0].owner, guard.owner_id(), "{name}");
        assert_eq!(status.holders[0].holds, 1, "{name}");
        assert_eq!(status.fencing_token, Some(guard.fencing_token()), "{name}");
        let counter: u64 = conn.get(&token).await.unwrap();
        assert_eq!(
            counter,
            guard.fencing_token().get(),
            "{name} has a counter of its own"
        );
    }
    for guard in guards {
        guard.unlock().await.unwrap();
    }
    let keys = crate::helpers::data_keys(&mut conn).await;
    assert_eq!(
        keys.len(),
        names.len(),
        "only the counters remain: {keys:?}"
    );
}

/// With Redisson's `prefixName` rule, a name `N` without braces and the name `{N}` would derive
/// the same keys: `a` and `{a}` would share `redisson_lock_token:{a}` (fencing counter),
/// `redisson_lock__channel:{a}` and latchkey's wait queue, liveness hash and hand-off reservation
/// `latchkey_lock_*:{a}` — interleaved tokens, and a release of one handing the lock over to a
/// waiter of the other. (Found as a bug by this catalogue.) A name that is one whole hash tag is
/// therefore refused, for every kind of object, before anything is sent.
#[tokio::test]
async fn a_name_that_is_one_whole_hash_tag_is_refused() {
    let server = RedisServer::spawn();
    let a = client(&server).await;
    let mut conn = server.conn().await;
    let plain = a.lock("a").lock().await.unwrap();
    let before = keyspace(&mut conn).await;
    for name in ["{a}", "{a}b}", "{}"] {
        let err = a.lock(name).lock().await.unwrap_err();
        assert!(err.is_invalid_argument(), "{name}: {err:?}");
        assert!(err.to_string().contains("hash tag"), "{err}");
        assert!(a
            .fair_lock(name)
            .lock()
            .await
            .unwrap_err()
            .is_invalid_argument());
        assert!(a
            .rw_lock(name)
            .write()
            .lock()
            .await
            .unwrap_err()
            .is_invalid_argument());
        assert!(a
            .semaphore(name)
            .try_set_permits(1)
            .await
            .unwrap_err()
            .is_invalid_argument());
    }
    assert_eq!(keyspace(&mut conn).await, before, "nothing written");
    // Text outside the braces makes it a different object with keys of its own.
    let tagged = a.lock("{a}:1").lock().await.unwrap();
    assert_ne!(tagged.fencing_token(), 0);
    let keys = crate::helpers::data_keys(&mut conn).await;
    plain.unlock().await.unwrap();
    tagged.unlock().await.unwrap();
    assert_eq!(
        keys.len(),
        4,
        "`a` and `{{a}}:1` each have a hash and a counter of their own: {keys:?}"
    );
}

/// Names are `String`s, so a non-UTF-8 name cannot be expressed. Unusual UTF-8 (NUL, line
/// breaks, spaces, emoji, RTL text) is binary-safe in Redis and works like any other name.
#[tokio::test]
async fn unusual_utf8_names_work_and_stay_distinct() {
    let server = RedisServer::spawn();
    let a = client(&server).await;
    let names = [
        "nul\0byte",
        "line\nbreak",
        " ",
        "🔒",
        "שלום",
        "tab\tname",
        "nul",
    ];
    let mut guards = Vec::new();
    for name in names {
        guards.push(
            a.lock(name)
                .try_lock(Duration::ZERO)
                .await
                .unwrap()
                .expect(name),
        );
    }
    for guard in guards {
        guard.unlock().await.unwrap();
    }
}

/// On a Redis Cluster, every key of one lock must hash to one slot (the lock scripts touch them
/// together). A name with its own `{…}` keeps its hash tag in the derived keys (Redisson's
/// `prefixName`), so `a:{b}` and its counter both hash to `b`. (Found as a bug by this
/// catalogue: CROSSSLOT on every acquire; fixed in 18e6b25.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn braced_names_on_a_cluster() {
    let cluster = RedisCluster::spawn(3, 0);
    let a = Client::builder(cluster_url(&cluster.primaries()))
        .connect()
        .await
        .unwrap();
    for name in ["a:{b}", "{a}:b", "a:{b}:c"] {
        let slots = (
            cluster.key_slot(name),
            cluster.key_slot(&format!("redisson_lock_token:{name}")),
        );
        let result = a.lock(name).try_lock(Duration::from_secs(2)).await;
        match result {
            Ok(Some(guard)) => guard.unlock().await.unwrap(),
            other => panic!(
                "`{name}` cannot be locked on a cluster (lock key slot {}, counter slot {}): {other:?}",
                slots.0, slots.1
            ),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Leases, waits, timeouts
// ---------------------------------------------------------------------------------------------

/// A zero (or sub-millisecond) lease. Negative leases cannot be expressed (`Duration`).
#[tokio::test]
async fn zero_lease() {
    let server = RedisServer::spawn();
    let a = client(&server).await;
    let mut conn = server.conn().await;
    for lease in [Duration::ZERO, Duration::from_micros(999)] {
        let options = LockOptions::new().lease(lease);
        refused(
            &mut conn,
            a.lock("l").lock_with(options),
            Error::is_invalid_argument,
        )
        .await;
        refused(
            &mut conn,
            a.lock("l").try_lock_with(options),
            Error::is_invalid_argument,
        )
        .await;
        refused(
            &mut conn,
            a.fair_lock("l").lock_with(options),
            Error::is_invalid_argument,
        )
        .await;
        refused(
            &mut conn,
            a.rw_lock("l").write().lock_with(options),
            Error::is_invalid_argument,
        )
        .await;
    }
}

#[tokio::test]
async fn huge_lease() {
    let server = RedisServer::spawn();
    let a = client(&server).await;
    let mut conn = server.conn().await;
    for lease in [MAX_LEASE + Duration::from_millis(1), Duration::MAX] {
        let options = LockOptions::new().lease(lease);
        refused(
            &mut conn,
            a.lock("l").lock_with(options),
            Error::is_invalid_argument,
        )
        .await;
        refused(
            &mut conn,
            a.rw_lock("l").read().lock_with(options),
            Error::is_invalid_argument,
        )
        .await;
    }
    // The longest lease is accepted, and the key's TTL is exactly it.
    let guard = a
        .lock("l")
        .lock_with(LockOptions::new().lease(MAX_LEASE))
        .await
        .unwrap();
    let pttl: i64 = conn.pttl("l").await.unwrap();
    assert!(pttl > 0 && pttl as u128 <= MAX_LEASE.as_millis(), "{pttl}");
    guard.unlock().await.unwrap();
}

#[tokio::test]
async fn wait_that_overflows_the_clock() {
    let server = RedisServer::spawn();
    let a = client(&server).await;
    let mut conn = server.conn().await;
    refused(
        &mut conn,
        a.lock("w").try_lock(Duration::MAX),
        Error::is_invalid_argument,
    )
    .await;
    refused(
        &mut conn,
        a.lock("w")
            .lock_with(LockOptions::new().wait(Duration::MAX)),
        Error::is_invalid_argument,
    )
    .await;
    refused(
        &mut conn,
        a.semaphore("w").try_acquire(1, Duration::MAX),
        Error::is_invalid_argument,
    )
    .await;
}

/// The watchdog renews every third of its timeout: a timeout too short to keep up (or longer
/// than any lease) is refused when connecting, as are zero timeouts.
#[tokio::test]
async fn watchdog_timeout_too_short_to_renew() {
    let server = RedisServer::spawn();
    let mut conn = server.conn().await;
    // Connections accepted so far. Each reading opens one connection of its own; counting the
    // open ones instead would race with the previous reading's close.
    let accepted = || -> u64 {
        server
            .info("stats")
            .get("total_connections_received")
            .and_then(|v| v.parse().ok())
            .unwrap()
    };
    let accepted_before = accepted();
    for (builder, what) in [
        (
            Client::builder(server.url())
                .watchdog_timeout(latchkey_redis::Client::MIN_WATCHDOG_TIMEOUT / 2),
            "watchdog",
        ),
        (
            Client::builder(server.url()).watchdog_timeout(Duration::ZERO),
            "watchdog",
        ),
        (
            Client::builder(server.url()).watchdog_timeout(MAX_LEASE + Duration::from_secs(1)),
            "watchdog",
        ),
        (
            Client::builder(server.url()).command_timeout(Duration::ZERO),
            "command timeout",
        ),
        (
            Client::builder(server.url()).connect_timeout(Duration::ZERO),
            "connect timeout",
        ),
    ] {
        let err = refused(&mut conn, builder.connect(), Error::is_invalid_argument).await;
        assert!(err.to_string().contains(what), "{err}");
    }
    assert_eq!(
        accepted(),
        accepted_before + 1,
        "no connection was made but the reading's own"
    );
}

// ---------------------------------------------------------------------------------------------
// Settings on a handle: rejected when set, not at first use
// ---------------------------------------------------------------------------------------------

/// A fair lock's thread wait time out of `MIN_THREAD_WAIT_TIME ..= MAX_LEASE` is refused by
/// `with_thread_wait_time` itself (there is no unchecked setter that fails at the first acquire
/// any more); nothing is sent. The bounds are accepted, and the lock works with them.
#[tokio::test]
async fn fair_lock_thread_wait_time_out_of_range_is_rejected_when_set() {
    let server = RedisServer::spawn();
    let a = client(&server).await;
    let mut conn = server.conn().await;
    let before = keyspace(&mut conn).await;
    for wait in [
        Duration::ZERO,
        FairLock::MIN_THREAD_WAIT_TIME - Duration::from_millis(1),
        MAX_LEASE + Duration::from_millis(1),
        Duration::MAX,
    ] {
        let err = a
            .fair_lock("wait-time")
            .with_thread_wait_time(wait)
            .expect_err("an out-of-range thread wait time must be refused when set");
        assert!(err.is_invalid_argument(), "{err:?}");
        let message = err.to_string();
        assert!(
            message.contains("thread wait time") && message.contains("use between"),
            "says what was wrong and what to use: {message}"
        );
    }
    assert_eq!(keyspace(&mut conn).await, before, "nothing was sent");

    assert_eq!(
        a.fair_lock("wait-time").thread_wait_time(),
        FairLock::DEFAULT_THREAD_WAIT_TIME
    );
    for wait in [FairLock::MIN_THREAD_WAIT_TIME, MAX_LEASE] {
        let lock = a
            .fair_lock("wait-time")
            .with_thread_wait_time(wait)
            .unwrap();
        assert_eq!(lock.thread_wait_time(), wait);
        let guard = lock
            .try_lock(Duration::ZERO)
            .await
            .unwrap()
            .expect("the lock is free");
        guard.unlock().await.unwrap();
    }
}

/// A blocking queue's visibility timeout out of `1 ms ..= MAX_LEASE` is refused by
/// `with_visibility_timeout` itself, not by the next `take`; the queued item stays
/// where it was. The bounds are accepted, and a reliable take works with them.
#[tokio::test]
async fn blocking_queue_visibility_timeout_out_of_range_is_rejected_when_set() {
    let server = RedisServer::spawn();
    let a = client(&server).await;
    let queue = a.blocking_queue::<u64>("visibility");
    queue.put(&7).await.unwrap();
    for timeout in [
        Duration::ZERO,
        Duration::from_micros(999),
        MAX_LEASE + Duration::from_millis(1),
        Duration::MAX,
    ] {
        let err = queue
            .clone()
            .with_visibility_timeout(timeout)
            .expect_err("an out-of-range visibility timeout must be refused when set");
        assert!(err.is_invalid_argument(), "{err:?}");
        let message = err.to_string();
        assert!(
            message.contains("visibility timeout") && message.contains("at least 1 ms"),
            "says what was wrong and what to use: {message}"
        );
    }
    assert_eq!(queue.len().await.unwrap(), 1, "the item is still queued");
    assert_eq!(queue.in_flight().await.unwrap(), 0, "and was not taken");

    assert_eq!(
        queue.visibility_timeout(),
        BlockingQueue::DEFAULT_VISIBILITY_TIMEOUT
    );
    let shortest = queue
        .clone()
        .with_visibility_timeout(Duration::from_millis(1))
        .unwrap();
    assert_eq!(shortest.visibility_timeout(), Duration::from_millis(1));
    let longest = queue.clone().with_visibility_timeout(MAX_LEASE).unwrap();
    assert_eq!(longest.visibility_timeout(), MAX_LEASE);
    let delivery = longest
        .poll(Duration::ZERO)
        .await
        .unwrap()
        .expect("the item");
    assert_eq!(*delivery, 7);
    assert!(delivery.ack().await.unwrap().is_acked());
    assert_eq!(queue.len().await.unwrap(), 0);
}

// ---------------------------------------------------------------------------------------------
// Unlocking what is not held
// ---------------------------------------------------------------------------------------------

/// Unlocking a hold somebody else removed (force-unlocked by an operator, then taken by
/// another owner): not the owner, and the new owner's lock is untouched.
#[tokio::test]
async fn unlock_not_owned() {
    let server = RedisServer::spawn();
    let a = client(&server).await;
    let b = client(&server).await;
    let mut conn = server.conn().await;
    let guard = a.lock("n").lock().await.unwrap();
    assert!(b.lock("n").force_unlock().await.unwrap());
    let theirs = b.lock("n").lock().await.unwrap();
    refused(&mut conn, guard.unlock(), Error::is_not_owner).await;
    let count: u64 = conn.hget("n", theirs.owner_id()).await.unwrap();
    assert_eq!(count, 1, "the new owner's hold is untouched");
    theirs.unlock().await.unwrap();
}

/// Unlocking after the lease ran out and a successor took the lock: not the owner, and the
/// successor's hold (count, TTL) is untouched.
#[tokio::test]
async fn unlock_after_expiry() {
    let server = RedisServer::spawn();
    let a = client(&server).await;
    let b = client(&server).await;
    let mut conn = server.conn().await;
    let guard = a
        .lock("e")
        .lock_with(LockOptions::new().lease(Duration::from_millis(200)))
        .await
        .unwrap();
    let expired_token = guard.fencing_token();
    let successor = b
        .lock("e")
        .lock_with(
            LockOptions::new()
                .lease(Duration::from_secs(60))
                .wait(Duration::from_secs(10)),
        )
        .await
        .unwrap();
    assert!(
        guard.is_lost() || eventually(Duration::from_secs(5), || async { guard.is_lost() }).await
    );
    let ttl_before: i64 = conn.pttl("e").await.unwrap();
    refused(&mut conn, guard.unlock(), Error::is_not_owner).await;
    let ttl_after: i64 = conn.pttl("e").await.unwrap();
    assert!(
        ttl_after <= ttl_before && ttl_after > 50_000,
        "TTL untouched: {ttl_before} → {ttl_after}"
    );
    let count: u64 = conn.hget("e", successor.owner_id()).await.unwrap();
    assert_eq!(count, 1, "the successor's hold is untouched");
    assert!(successor.fencing_token() > expired_token);
    successor.unlock().await.unwrap();
}

/// A guard is consumed by `unlock`, so releasing more often than acquiring does not compile
/// (the `compile_fail` doctest on `LockGuard::unlock`). What can happen at run time: two guards
/// of one hold (re-entered) released in any order, the hold released once, by the last one.
#[tokio::test]
async fn more_unlocks_than_locks() {
    let server = RedisServer::spawn();
    let a = client(&server).await;
    let mut conn = server.conn().await;
    let lock = a.lock("r");
    let outer = lock.lock().await.unwrap();
    let inner = outer.reenter();
    assert_eq!(outer.fencing_token(), inner.fencing_token());
    let owner = outer.owner_id().to_owned();
    let count: u64 = conn.hget("r", &owner).await.unwrap();
    assert_eq!(count, 1, "one hold in Redis");
    // Another acquire through the same handle is another owner: excluded.
    assert!(lock.try_lock(Duration::ZERO).await.unwrap().is_none());
    outer.unlock().await.unwrap(); // the outer one first
    let count: u64 = conn.hget("r", &owner).await.unwrap();
    assert_eq!(count, 1, "the inner guard still holds it");
    assert!(lock.is_locked().await.unwrap());
    inner.unlock().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());
    // A guard whose hold was force-unlocked cannot take a successor's hold count down either.
    let g = lock.lock().await.unwrap();
    lock.force_unlock().await.unwrap();
    let other = a.lock("r").lock().await.unwrap();
    refused(&mut conn, g.unlock(), Error::is_not_owner).await;
    other.unlock().await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// Keys of another type
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn wrong_key_type_under_the_name() {
    let server = RedisServer::spawn();
    let a = client(&server).await;
    let mut conn = server.conn().await;
    let _: () = conn.set("occupied", "precious").await.unwrap();
    let lock = a.lock("occupied");
    let err = refused(&mut conn, lock.lock(), Error::is_wrong_type).await;
    // What the key holds, from the script, without the place in the script that raised it.
    let message = err.to_string();
    assert!(message.contains("holds a string, not a hash"), "{message}");
    assert!(!message.contains("script"), "{message}");
    refused(
        &mut conn,
        lock.try_lock(Duration::ZERO),
        Error::is_wrong_type,
    )
    .await;
    refused(&mut conn, lock.force_unlock(), Error::is_wrong_type).await;
    refused(&mut conn, lock.status(), Error::is_wrong_type).await;
    refused(
        &mut conn,
        a.semaphore("occupied").acquire(1),
        Error::is_wrong_type,
    )
    .await;
    refused(
        &mut conn,
        a.fair_lock("occupied").lock(),
        Error::is_wrong_type,
    )
    .await;
    refused(
        &mut conn,
        a.rw_lock("occupied").read().lock(),
        Error::is_wrong_type,
    )
    .await;
    let v: String = conn.get("occupied").await.unwrap();
    assert_eq!(v, "precious");
}

/// A derived key of another type fails the first call that needs it, and nothing is written.
/// The fencing counter and the hand-off reservation are needed by every grant; the wait queue
/// and the liveness hash only by an acquire that has to wait (an uncontended acquire does not
/// read them, which keeps its script short), so those are tested with the lock held.
#[tokio::test]
async fn wrong_key_type_under_a_derived_key() {
    let server = RedisServer::spawn();
    let a = client(&server).await;
    let b = client(&server).await;
    let mut conn = server.conn().await;
    let _: () = conn.lpush("redisson_lock_token:{t}", "x").await.unwrap();
    refused(&mut conn, a.lock("t").lock(), Error::is_wrong_type).await;
    let _: () = conn.lpush("latchkey_lock_handoff:{h}", "x").await.unwrap();
    refused(&mut conn, a.lock("h").lock(), Error::is_wrong_type).await;
    for (name, key) in [
        ("q", "latchkey_lock_queue:{q}"),
        ("v", "latchkey_lock_alive:{v}"),
    ] {
        let _: () = conn.set(key, "x").await.unwrap();
        let held = b.lock(name).lock().await.unwrap();
        refused(
            &mut conn,
            a.lock(name).try_lock(Duration::from_secs(5)),
            Error::is_wrong_type,
        )
        .await;
        // The release leaves the wrong-typed key alone, and the lock is free afterwards.
        held.unlock().await.unwrap();
        let v: String = conn.get(key).await.unwrap();
        assert_eq!(v, "x");
        a.lock(name).lock().await.unwrap().unlock().await.unwrap();
    }
}

/// The wait queue or the liveness hash turned to another type while a client waits in it: the
/// release frees the lock and wakes the waiter (no hand-off), and the waiter's attempt, which
/// would take it out of the queue with its grant, is refused before it writes anything: the
/// lock stays free and the wrong-typed key as it was.
#[tokio::test]
async fn wrong_key_type_under_a_waiting_client() {
    let server = RedisServer::spawn();
    let a = client(&server).await;
    let b = client(&server).await;
    let mut conn = server.conn().await;
    for (name, key) in [
        ("wq", "latchkey_lock_queue:{wq}"),
        ("wv", "latchkey_lock_alive:{wv}"),
    ] {
        let held = b.lock(name).lock().await.unwrap();
        let waiter = tokio::spawn({
            let lock = a.lock(name);
            async move { lock.lock().await.map(|guard| guard.owner_id().to_owned()) }
        });
        let queue = format!("latchkey_lock_queue:{{{name}}}");
        let registered = eventually(Duration::from_secs(5), || {
            let mut conn = conn.clone();
            let queue = queue.clone();
            async move { conn.exists::<_, bool>(&queue).await.unwrap() }
        })
        .await;
        assert!(
            registered,
            "{name}: the waiter registered in the wait queue"
        );
        let _: () = conn.del(key).await.unwrap();
        let _: () = conn.set(key, "x").await.unwrap();
        held.unlock().await.unwrap();
        let result = tokio::time::timeout(Duration::from_secs(10), waiter)
            .await
            .expect("the waiter is woken and answered")
            .unwrap();
        let err = result.expect_err("a waiter's grant with a wrong-typed queue key is refused");
        assert!(err.is_wrong_type(), "{name}: {err:?}");
        let lock_exists: bool = conn.exists(name).await.unwrap();
        assert!(!lock_exists, "{name}: the refused grant wrote nothing");
        let v: String = conn.get(key).await.unwrap();
        assert_eq!(v, "x", "{name}: the wrong-typed key is left alone");
    }
}

/// A fencing counter that is a string but not an integer (written by something else): the
/// acquire fails before writing anything. The error is a plain `Error::Redis` (no predicate
/// names it).
#[tokio::test]
async fn corrupt_fencing_counter() {
    let server = RedisServer::spawn();
    let a = client(&server).await;
    let mut conn = server.conn().await;
    let _: () = conn
        .set("redisson_lock_token:{c}", "not a number")
        .await
        .unwrap();
    let err = refused(&mut conn, a.lock("c").lock(), |_| true).await;
    assert!(
        matches!(err, Error::Redis(_) | Error::WrongType { .. }),
        "{err:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Credentials, permissions, TLS
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn wrong_password() {
    let server = RedisServer::builder().password("right").spawn();
    let mut conn = server.conn().await;
    let before = keyspace(&mut conn).await;
    for url in [
        format!("redis://:pw-that-is-wrong@127.0.0.1:{}", server.port()),
        format!(
            "redis://default:pw-that-is-wrong@127.0.0.1:{}",
            server.port()
        ),
        format!(
            "redis://nobody:pw-that-is-wrong@127.0.0.1:{}",
            server.port()
        ),
    ] {
        let err = Client::builder(url.clone()).connect().await.unwrap_err();
        assert!(err.is_auth(), "{url}: {err:?}");
        assert!(err.is_auth_failed(), "{url}: {err:?}");
        assert!(
            !err.chain().to_string().contains("pw-that-is-wrong"),
            "the password is not echoed: {}",
            err.chain()
        );
    }
    assert_eq!(keyspace(&mut conn).await, before);
}

/// Connecting *without* a password to a server that requires one is an auth error at once.
/// (Found by this catalogue: the connect used to succeed, and the first lock then failed with an
/// untyped `Error::Redis("Protocol error: unauthenticated multibulk length")`, since Redis
/// refuses a command of more than 10 arguments from an unauthenticated client before it would
/// say NOAUTH.)
#[tokio::test]
async fn missing_password() {
    let server = RedisServer::builder().password("right").spawn();
    let mut conn = server.conn().await;
    match Client::connect(format!("redis://127.0.0.1:{}", server.port())).await {
        Err(err) => assert!(err.is_auth(), "{err:?}"),
        Ok(a) => {
            refused(&mut conn, a.lock("p").lock(), Error::is_auth).await;
        }
    }
}

/// A user that may not run scripts, and a user that may not touch the lock's keys: typed
/// permission errors at the first use, nothing written.
#[tokio::test]
async fn missing_acl_permission() {
    let server = RedisServer::builder()
        .acl_user("noscript on >pw ~* &* +@all -@scripting")
        .acl_user("elsewhere on >pw ~other:* &* +@all")
        .spawn();
    let mut conn = server.conn().await;
    for user in ["noscript", "elsewhere"] {
        let a = Client::connect(format!("redis://{user}:pw@127.0.0.1:{}", server.port()))
            .await
            .unwrap();
        let err = refused(&mut conn, a.lock("mine").lock(), Error::is_auth).await;
        assert!(err.is_permission_denied(), "{user}: {err:?}");
        refused(
            &mut conn,
            a.lock("mine").try_lock(Duration::ZERO),
            Error::is_auth,
        )
        .await;
    }
}

/// Nothing listens on the port: the message says what failed, and the driver's error (why) is
/// the `source()`, not repeated in the message, so a reporter that prints the chain shows it once.
#[tokio::test]
async fn unreachable_server_has_the_cause_as_source_only() {
    let port = latchkey_test_support::free_port();
    let err = Client::builder(format!("redis://127.0.0.1:{port}"))
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
        .unwrap_err();
    assert!(err.is_connection(), "{err:?}");
    let Error::Unreachable { source, .. } = &err else {
        panic!("expected Error::Unreachable, got {err:?}");
    };
    assert!(source.is_connection_refusal(), "{source:?}");
    let message = err.to_string();
    assert_eq!(message, "cannot reach redis (connecting)");
    let cause = std::error::Error::source(&err).expect("the driver's error is the source");
    assert!(cause.is::<redis::RedisError>(), "{cause:?}");
    let cause = cause.to_string();
    assert!(!cause.is_empty());
    assert!(!message.contains(&cause), "{message} repeats {cause}");
    assert_eq!(err.chain().to_string(), format!("{message}: {cause}"));
}

#[tokio::test]
async fn tls_certificate_mismatch() {
    let files = TlsFiles::generate();
    let server = RedisServer::builder().tls(&files).spawn();
    let mut conn = server.conn().await;
    let before = keyspace(&mut conn).await;
    let url = format!("rediss://127.0.0.1:{}", server.port());
    // A CA that did not sign the server's certificate.
    let other = TlsFiles::generate_other_ca();
    let err = Client::builder(url.clone())
        .tls_root_certificate(std::fs::read(other.ca_cert()).unwrap())
        .connect_timeout(Duration::from_secs(2))
        .connect()
        .await
        .unwrap_err();
    assert!(err.is_connection(), "{err:?}");
    assert!(
        err.chain().to_string().contains("certificate"),
        "says why: {err:?}"
    );
    // The system roots do not know the private CA either.
    let err = Client::builder(url.clone())
        .connect_timeout(Duration::from_secs(2))
        .connect()
        .await
        .unwrap_err();
    assert!(err.is_connection(), "{err:?}");
    // Plain TCP against a TLS port.
    let err = Client::builder(format!("redis://127.0.0.1:{}", server.port()))
        .connect_timeout(Duration::from_secs(2))
        .connect()
        .await
        .unwrap_err();
    assert!(err.is_connection(), "{err:?}");
    assert_eq!(keyspace(&mut conn).await, before);
}

#[tokio::test]
async fn unusable_url() {
    for url in [
        "",
        "http://127.0.0.1:6379",
        "redis://127.0.0.1:notaport",
        "redis+sentinel://h:1",
    ] {
        let err = Client::builder(url).connect().await.unwrap_err();
        assert!(
            err.is_config() || err.is_invalid_argument(),
            "{url:?}: {err:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Redis misbehaving mid-call
// ---------------------------------------------------------------------------------------------

/// Warms the script cache, so that a stalled call is an EVALSHA that Redis runs once it
/// resumes (a first-ever EVALSHA would be refused with NOSCRIPT and change nothing).
async fn warm_up(a: &Client, name: &str) {
    a.lock(name).lock().await.unwrap().unlock().await.unwrap();
}

async fn stalled_acquire(server: &RedisServer, lock: &latchkey_redis::Lock) -> Error {
    server.pause_process();
    // Without wait time left: a waiter with time left would wait through the stall.
    let err = lock.try_lock(Duration::ZERO).await.unwrap_err();
    server.resume_process();
    assert!(err.is_uncertain(), "{err:?}");
    assert!(err.is_connection() && err.is_timeout(), "{err:?}");
    err
}

/// The server stops answering in the middle of an acquire: the error says the outcome is
/// uncertain; the script runs when the server resumes, and the hold it granted, which nobody
/// renews, expires by itself with its lease.
#[tokio::test]
async fn redis_timeout_mid_acquire() {
    let server = RedisServer::spawn();
    let a = Client::builder(server.url())
        .watchdog_timeout(Duration::from_secs(1))
        .command_timeout(Duration::from_millis(300))
        .connect()
        .await
        .unwrap();
    let mut conn = server.conn().await;
    warm_up(&a, "t").await;
    let lock = a.lock("t");
    stalled_acquire(&server, &lock).await;
    assert_eq!(a.tracked_lock_count(), 0, "nothing is renewed");
    let gone = eventually(Duration::from_secs(5), || {
        let mut conn = conn.clone();
        async move { !conn.exists::<_, bool>("t").await.unwrap() }
    })
    .await;
    assert!(gone, "the hold granted after the timeout expires by itself");
    let other = a.lock("t").try_lock(Duration::ZERO).await.unwrap();
    assert!(other.is_some());
    let _: () = conn.ping().await.unwrap();
}

/// After an acquire that timed out but ran when Redis resumed, the hold it granted belongs to
/// that acquire's owner id alone. The same handle's next acquire is another owner: it never
/// re-enters that hold (it waits until it is released in the background or expires), its unlock
/// frees the lock, and two separate holds never share a fencing token. (Found by this
/// catalogue: the stranded hold used to be re-entered with a hold count of 2, so the unlock
/// left the lock held for another lease, and every further acquire by the handle re-entered it
/// with the same token while other clients starved.)
#[tokio::test]
async fn same_handle_after_an_uncertain_acquire_frees_the_lock_on_unlock() {
    let server = RedisServer::spawn();
    let a = Client::builder(server.url())
        .watchdog_timeout(Duration::from_secs(2))
        .command_timeout(Duration::from_millis(300))
        .connect()
        .await
        .unwrap();
    let mut conn = server.conn().await;
    warm_up(&a, "s").await;
    let lock = a.lock("s");
    stalled_acquire(&server, &lock).await;

    let first = lock.lock().await.unwrap();
    let fields: Vec<(String, u64)> = conn.hgetall("s").await.unwrap();
    assert_eq!(
        fields,
        vec![(first.owner_id().to_owned(), 1)],
        "a hold of its own, not the stalled acquire's re-entered"
    );
    let first_token = first.fencing_token();
    first.unlock().await.unwrap();
    let second = lock.lock().await.unwrap();
    let second_token = second.fencing_token();
    assert_ne!(
        second.owner_id(),
        fields[0].0,
        "every acquire is an owner of its own"
    );
    second.unlock().await.unwrap();
    let held: bool = conn.exists("s").await.unwrap();
    assert!(
        !held && second_token > first_token,
        "after its only holder unlocked twice the lock is still held ({:?}, pttl {} ms) or two \
         separate holds got the same fencing token {first_token}/{second_token}",
        conn.hgetall::<_, Vec<(String, u64)>>("s").await.unwrap(),
        conn.pttl::<_, i64>("s").await.unwrap(),
    );
}

/// A client whose connections all go through `proxy`, with a short command timeout.
async fn client_via(proxy: &FaultProxy) -> Client {
    Client::builder(proxy.url())
        .watchdog_timeout(Duration::from_secs(2))
        .command_timeout(Duration::from_millis(300))
        .connect()
        .await
        .unwrap()
}

/// Runs `unlock` into a black hole and drops the connections, so that the release never
/// reaches Redis; the unlock must report a connection error.
async fn lose_the_unlock(
    proxy: &FaultProxy,
    unlock: impl Future<Output = latchkey_redis::Result<()>>,
) {
    proxy.blackhole(true);
    let err = unlock.await.unwrap_err();
    assert!(err.is_connection(), "{err:?}");
    proxy.drop_connections(); // what the black hole held back is lost
    proxy.blackhole(false);
}

/// `op` once the client has reconnected: connection errors are retried.
async fn once_reconnected<T, F, Fut>(mut op: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = latchkey_redis::Result<T>>,
{
    loop {
        match op().await {
            Ok(value) => return value,
            Err(e) if e.is_connection() => tokio::time::sleep(Duration::from_millis(50)).await,
            Err(e) => panic!("{e}"),
        }
    }
}

/// An unlock that never reached Redis (the connection broke) leaves the hold in Redis, to
/// expire with its lease (nobody renews it). The same handle's next acquire is another owner:
/// it waits for the stranded hold to expire, then takes the lock as a new hold of its own (not
/// re-entered, or its unlock would leave the lock held) with a new fencing token (two separate
/// critical sections must never carry one token, or fenced storage could not tell the second
/// from a late write of the first). Found by the chaos scenarios `redis_restart_with_aof` (a
/// worker re-entered such a hold while the others starved), `proxy_drop_connections` and
/// `sentinel_failover` (duplicate tokens).
#[tokio::test]
async fn same_handle_after_an_unlock_that_never_reached_redis_waits_for_the_stranded_hold() {
    let server = RedisServer::spawn();
    let proxy = FaultProxy::start(&server.addr());
    let a = client_via(&proxy).await;
    let mut conn = server.conn().await;
    let lock = a.lock("u");
    let guard = lock.lock().await.unwrap();
    let first = guard.fencing_token();
    let stranded_owner = guard.owner_id().to_owned();
    lose_the_unlock(&proxy, guard.unlock()).await;
    let stranded: bool = conn.hexists("u", &stranded_owner).await.unwrap();
    assert!(stranded, "the release never reached Redis");

    let again = once_reconnected(|| lock.lock()).await;
    let fields: Vec<(String, u64)> = conn.hgetall("u").await.unwrap();
    assert_eq!(
        fields,
        vec![(again.owner_id().to_owned(), 1)],
        "a new hold of its own, not the stranded one re-entered"
    );
    assert_ne!(again.owner_id(), stranded_owner);
    let second = again.fencing_token();
    again.unlock().await.unwrap();
    assert!(
        second > first,
        "a new hold after the failed unlock got the same token {second} as the hold before it ({first})"
    );
    let held: bool = conn.exists("u").await.unwrap();
    assert!(
        !held,
        "the handle's only hold was released, yet the lock is still held: {:?}, pttl {} ms",
        conn.hgetall::<_, Vec<(String, u64)>>("u").await.unwrap(),
        conn.pttl::<_, i64>("u").await.unwrap(),
    );
}

/// The fair lock, after an unlock that never reached Redis: as the plain lock, the handle's next
/// acquire waits for the stranded hold to expire and takes the lock as a new hold of its own
/// (one hold, a new fencing token), so its unlock frees the lock (it used to re-enter the
/// stranded hold: count 2, and the unlock left the lock held).
#[tokio::test]
async fn fair_lock_same_handle_after_a_lost_unlock_waits_for_the_stranded_hold() {
    let server = RedisServer::spawn();
    let proxy = FaultProxy::start(&server.addr());
    let a = client_via(&proxy).await;
    let mut conn = server.conn().await;
    let lock = a.fair_lock("fu");
    let guard = lock.lock().await.unwrap();
    let first = guard.fencing_token();
    let stranded_owner = guard.owner_id().to_owned();
    lose_the_unlock(&proxy, guard.unlock()).await;
    let stranded: bool = conn.hexists("fu", &stranded_owner).await.unwrap();
    assert!(stranded, "the release never reached Redis");

    let again = once_reconnected(|| lock.lock()).await;
    let fields: Vec<(String, u64)> = conn.hgetall("fu").await.unwrap();
    assert_eq!(
        fields,
        vec![(again.owner_id().to_owned(), 1)],
        "a new hold of its own, not the stranded one re-entered"
    );
    assert!(again.fencing_token() > first, "a new hold gets a new token");
    again.unlock().await.unwrap();
    let held: bool = conn.exists("fu").await.unwrap();
    assert!(!held, "the handle's only hold was released");
}

/// The write side of a read-write lock, after an unlock that never reached Redis: the handle's
/// next write acquire waits for the stranded write hold to expire and takes the lock as a new
/// hold (one hold, a new fencing token), so its unlock frees the lock. Found by the chaos
/// scenario `write_lock_proxy_drop_connections`: the stranded hold was re-entered (count 2, the
/// old token), every later acquire of that handle re-entered it again with the same token, and
/// the other writers starved.
#[tokio::test]
async fn write_lock_same_handle_after_a_lost_unlock_waits_for_the_stranded_hold() {
    let server = RedisServer::spawn();
    let proxy = FaultProxy::start(&server.addr());
    let a = client_via(&proxy).await;
    let mut conn = server.conn().await;
    let rw = a.rw_lock("wu");
    let guard = rw.write().lock().await.unwrap();
    let first = guard.fencing_token();
    let write_field = guard.owner_id().to_owned();
    lose_the_unlock(&proxy, guard.unlock()).await;
    let stranded: bool = conn.hexists("wu", &write_field).await.unwrap();
    assert!(stranded, "the release never reached Redis");

    let write = rw.write();
    let again = once_reconnected(|| write.lock()).await;
    let stranded: bool = conn.hexists("wu", &write_field).await.unwrap();
    assert!(!stranded, "the stranded hold is gone, not re-entered");
    let holds: u64 = conn.hget("wu", again.owner_id()).await.unwrap();
    assert_eq!(holds, 1, "a new hold of its own");
    assert!(again.fencing_token() > first, "a new hold gets a new token");
    again.unlock().await.unwrap();
    let held: bool = conn.exists("wu").await.unwrap();
    assert!(!held, "the handle's only hold was released");
}

/// The read side, after an unlock that never reached Redis: the handle's next read acquire is
/// another owner, a fresh read beside the stranded hold (one hold of its own, never a second
/// hold of the stranded owner, which would let it pass pending writers forever); its unlock
/// releases its own hold, and the stranded one expires with its lease, freeing the lock.
#[tokio::test]
async fn read_lock_same_handle_after_a_lost_unlock_reads_beside_the_stranded_hold() {
    let server = RedisServer::spawn();
    let proxy = FaultProxy::start(&server.addr());
    let a = client_via(&proxy).await;
    let mut conn = server.conn().await;
    let rw = a.rw_lock("ru");
    let guard = rw.read().lock().await.unwrap();
    let stranded_owner = guard.owner_id().to_owned();
    lose_the_unlock(&proxy, guard.unlock()).await;
    let stranded: bool = conn.hexists("ru", &stranded_owner).await.unwrap();
    assert!(stranded, "the release never reached Redis");

    let read = rw.read();
    let again = once_reconnected(|| read.lock()).await;
    assert_ne!(again.owner_id(), stranded_owner);
    let owner = again.owner_id().to_owned();
    let holds: u64 = conn.hget("ru", &owner).await.unwrap();
    assert_eq!(holds, 1, "a hold of its own");
    for owner in [&stranded_owner, &owner] {
        let second_lease = format!("{{ru}}:{owner}:rwlock_timeout:2");
        let left: bool = conn.exists(&second_lease).await.unwrap();
        assert!(!left, "no lease key of a second hold");
    }
    again.unlock().await.unwrap();
    let mine: bool = conn.hexists("ru", &owner).await.unwrap();
    assert!(!mine, "its own hold was released");
    let conn2 = conn.clone();
    assert!(
        eventually(Duration::from_secs(10), || {
            let mut conn = conn2.clone();
            async move { !conn.exists::<_, bool>("ru").await.unwrap() }
        })
        .await,
        "the stranded hold expires with its lease"
    );
}

/// `SCRIPT FLUSH` (or a restart, or a failover to a server that never saw the scripts): the
/// next call gets NOSCRIPT, loads the script and goes on.
#[tokio::test]
async fn noscript_after_script_flush() {
    let server = RedisServer::spawn();
    let a = client(&server).await;
    let mut conn = server.conn().await;
    let lock = a.lock("f");
    lock.lock().await.unwrap().unlock().await.unwrap();
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut conn)
        .await
        .unwrap();
    let guard = lock.lock().await.unwrap();
    assert_eq!(lock.status().await.unwrap().holders.len(), 1);
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut conn)
        .await
        .unwrap();
    guard.unlock().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut conn)
        .await
        .unwrap();
    // The watchdog's renewal script too.
    let held = lock.lock().await.unwrap();
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut conn)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!held.is_lost(), "renewed across the flush");
    held.unlock().await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// Other primitives
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn semaphore_bad_permit_counts() {
    let server = RedisServer::spawn();
    let a = client(&server).await;
    let mut conn = server.conn().await;
    let sem = a.semaphore("sem");
    assert!(sem.try_set_permits(2).await.unwrap());
    refused(&mut conn, sem.acquire(0), Error::is_invalid_argument).await;
    refused(
        &mut conn,
        sem.acquire(latchkey_redis::Semaphore::MAX_PERMITS + 1),
        Error::is_invalid_argument,
    )
    .await;
    refused(
        &mut conn,
        sem.try_set_permits(latchkey_redis::Semaphore::MAX_PERMITS + 1),
        Error::is_invalid_argument,
    )
    .await;
    // Taking away more permits than there are ("negative permits").
    refused(&mut conn, sem.add_permits(-3), Error::is_invalid_argument).await;
    refused(&mut conn, sem.release(0), Error::is_invalid_argument).await;
    assert_eq!(sem.available_permits().await.unwrap(), 2);
}

#[tokio::test]
async fn semaphore_over_release() {
    let server = RedisServer::spawn();
    let a = client(&server).await;
    let mut conn = server.conn().await;
    let sem = a.semaphore("sem");
    assert!(sem.try_set_permits(2).await.unwrap());
    let err = refused(&mut conn, sem.release(1), |e| e.is_over_release()).await;
    assert!(err.to_string().contains("exceed"), "{err}");
    let held = sem.acquire(1).await.unwrap();
    refused(&mut conn, sem.release(2), |e| e.is_over_release()).await;
    held.release().await.unwrap();
    assert_eq!(sem.available_permits().await.unwrap(), 2);
    // Permit ids that were never issued.
    let psem = a.permit_semaphore("psem");
    assert!(psem.try_set_permits(1).await.unwrap());
    let never: latchkey_redis::PermitId = "00000000000000000000000000000001".parse().unwrap();
    refused(&mut conn, psem.release(&[never]), |e| e.is_unknown_permit()).await;
}

/// Upgrades are not detected: a write asked for while the same process holds a read waits for
/// it like any other writer. A write that may not wait is refused (`None`) and changes nothing.
#[tokio::test]
async fn rwlock_upgrade() {
    let server = RedisServer::spawn();
    let a = client(&server).await;
    let mut conn = server.conn().await;
    let rw = a.rw_lock("rw");
    let read = rw.read().lock().await.unwrap();
    let before = keyspace(&mut conn).await;
    assert!(rw.write().try_lock(Duration::ZERO).await.unwrap().is_none());
    assert_eq!(keyspace(&mut conn).await, before, "nothing may change");
    read.unlock().await.unwrap();
    rw.write().lock().await.unwrap().unlock().await.unwrap();
}

#[tokio::test]
async fn multilock_without_locks() {
    let err = latchkey_redis::MultiLock::new(Vec::new()).unwrap_err();
    assert!(err.is_invalid_argument(), "{err}");
}

#[tokio::test]
async fn redlock_with_fewer_than_three_nodes() {
    let servers = RedisServers::spawn(2);
    let mut clients = Vec::new();
    for url in servers.urls() {
        clients.push(Client::connect(url).await.unwrap());
    }
    for n in 0..=2 {
        let err = RedLock::new("r", clients[..n].to_vec()).unwrap_err();
        assert!(err.is_invalid_argument(), "{n} nodes: {err}");
    }
}

#[tokio::test]
async fn redlock_with_an_even_number_of_nodes() {
    let server = RedisServer::spawn();
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(Client::connect(server.url()).await.unwrap());
    }
    let err = RedLock::new("r", clients).unwrap_err();
    assert!(
        err.is_invalid_argument() && err.to_string().contains("odd"),
        "{err}"
    );
}

#[tokio::test]
async fn redlock_with_duplicate_addresses() {
    let servers = RedisServers::spawn(2);
    let urls = servers.urls();
    let mut clients = Vec::new();
    for url in [&urls[0], &urls[1], &urls[0]] {
        clients.push(Client::connect(url.clone()).await.unwrap());
    }
    let err = RedLock::new("r", clients.clone()).unwrap_err();
    assert!(
        err.is_invalid_argument() && err.to_string().contains("twice"),
        "{err}"
    );
    // Another database of the same server is the same node.
    clients[2] = Client::connect(format!("{}/3", urls[0])).await.unwrap();
    let err = RedLock::new("r", clients).unwrap_err();
    assert!(err.is_invalid_argument(), "{err}");
}

#[tokio::test]
async fn delayed_queue_bad_delays() {
    let server = RedisServer::spawn();
    let a = client(&server).await;
    let mut conn = server.conn().await;
    let queue = a.delayed_queue::<String>("dq");
    let item = "x".to_owned();
    for secs in [
        -1.0,
        -0.001,
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        1e300,
    ] {
        refused(
            &mut conn,
            queue.offer_after_secs(&item, secs),
            Error::is_invalid_argument,
        )
        .await;
    }
    refused(
        &mut conn,
        queue.offer(
            &item,
            latchkey_redis::DelayedQueue::MAX_DELAY + Duration::from_secs(1),
        ),
        Error::is_invalid_argument,
    )
    .await;
    refused(
        &mut conn,
        queue.offer_at(&item, UNIX_EPOCH - Duration::from_secs(1)),
        Error::is_invalid_argument,
    )
    .await;
    refused(
        &mut conn,
        queue.offer_at(
            &item,
            SystemTime::now() + latchkey_redis::DelayedQueue::MAX_DELAY + Duration::from_secs(60),
        ),
        Error::is_invalid_argument,
    )
    .await;
}

#[tokio::test]
async fn delayed_queue_oversized_payload() {
    let server = RedisServer::spawn();
    let a = client(&server).await;
    let mut conn = server.conn().await;
    let queue = a.delayed_queue::<String>("dq");
    // JSON adds two quotes: this item encodes to MAX_ITEM_SIZE + 2 bytes.
    let big = "x".repeat(latchkey_redis::DelayedQueue::MAX_ITEM_SIZE);
    let err = refused(
        &mut conn,
        queue.offer(&big, Duration::ZERO),
        Error::is_invalid_argument,
    )
    .await;
    assert!(
        err.to_string().contains("bytes") || err.to_string().contains("size"),
        "{err}"
    );
    let fits = "x".repeat(latchkey_redis::DelayedQueue::MAX_ITEM_SIZE - 2);
    queue.offer(&fits, Duration::from_secs(3600)).await.unwrap();
}
