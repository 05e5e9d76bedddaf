//! The reentrant lock against a real redis-server.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use latchkey_redis::{Client, Error, LockOptions};
use latchkey_test_support::RedisServer;
use redis::AsyncCommands;

use crate::helpers::{builder, client, eventually, long_lease_client, numsub, poll_then_drop};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mutual_exclusion_of_4_clients_by_4_tasks() {
    let server = RedisServer::spawn();
    const ROUNDS: u64 = 25;
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let client = client(&server).await;
        for _ in 0..4 {
            let lock = client.lock("counter-lock");
            let mut conn = server.conn().await;
            tasks.push(tokio::spawn(async move {
                for _ in 0..ROUNDS {
                    let guard = lock.lock().await.unwrap();
                    // A deliberately non-atomic read-modify-write: only the lock keeps it exact.
                    let v: Option<u64> = conn.get("counter").await.unwrap();
                    tokio::task::yield_now().await;
                    let _: () = conn.set("counter", v.unwrap_or(0) + 1).await.unwrap();
                    guard.unlock().await.unwrap();
                }
            }));
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    let mut conn = server.conn().await;
    let v: u64 = conn.get("counter").await.unwrap();
    assert_eq!(v, 16 * ROUNDS);
    let exists: bool = conn.exists("counter-lock").await.unwrap();
    assert!(!exists, "the lock key is gone after the last unlock");
}

/// Re-entry goes through the guard: one hold in Redis (a hold count of 1, as a Redisson thread
/// that took the lock once), released when its last guard is.
#[tokio::test]
async fn reentered_guards_share_one_hold_released_by_the_last() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    let mut conn = server.conn().await;
    let lock = client.lock("reentrant");

    let first = lock.lock().await.unwrap();
    let second = first.reenter();
    let count: u64 = conn.hget("reentrant", first.owner_id()).await.unwrap();
    assert_eq!(count, 1);
    assert_eq!(second.owner_id(), first.owner_id());
    assert_eq!(
        first.fencing_token(),
        second.fencing_token(),
        "re-entry keeps the token"
    );
    assert_eq!(client.tracked_lock_count(), 1, "one hold, renewed once");

    second.unlock().await.unwrap();
    assert!(
        lock.is_locked().await.unwrap(),
        "the first guard still holds it"
    );
    first.unlock().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());
    assert_eq!(client.tracked_lock_count(), 0);

    // Dropped in either order, the last drop releases.
    let first = lock.lock().await.unwrap();
    let second = first.reenter();
    drop(first);
    assert!(lock.is_locked().await.unwrap());
    drop(second);
    assert!(
        eventually(Duration::from_secs(5), || {
            let lock = lock.clone();
            async move { !lock.is_locked().await.unwrap() }
        })
        .await
    );
}

#[tokio::test]
async fn unlock_after_losing_the_lock_is_not_owner_and_leaves_the_successor_alone() {
    let server = RedisServer::spawn();
    let a = client(&server).await;
    let b = client(&server).await;
    let lock_a = a.lock("succession");
    let guard = lock_a
        .lock_with(LockOptions::new().lease(Duration::from_millis(300)))
        .await
        .unwrap();
    // The lease runs out; b takes over.
    let successor = b
        .lock("succession")
        .try_lock(Duration::from_secs(5))
        .await
        .unwrap()
        .expect("b gets the lock after a's lease");
    let err = guard.unlock().await.unwrap_err();
    assert!(err.is_not_owner(), "{err}");
    let mut conn = server.conn().await;
    let holds: Option<u64> = conn.hget("succession", successor.owner_id()).await.unwrap();
    assert_eq!(holds, Some(1), "successor untouched");
    successor.unlock().await.unwrap();

    // force_unlock under a holder: the holder's unlock is NotOwner.
    let guard = lock_a.lock().await.unwrap();
    assert!(b.lock("succession").force_unlock().await.unwrap());
    assert!(guard.unlock().await.unwrap_err().is_not_owner());
}

#[tokio::test]
async fn fixed_lease_frees_the_lock_when_the_holder_vanishes() {
    let server = RedisServer::spawn();
    let a = client(&server).await;
    let b = client(&server).await;
    let guard = a
        .lock("vanishing")
        .lock_with(LockOptions::new().lease(Duration::from_millis(400)))
        .await
        .unwrap();
    // The holder vanishes without unlocking.
    std::mem::forget(guard);
    let left = b
        .lock("vanishing")
        .remaining_lease()
        .await
        .unwrap()
        .unwrap();
    assert!(left <= Duration::from_millis(400));
    let got = b
        .lock("vanishing")
        .try_lock(Duration::from_secs(10))
        .await
        .unwrap()
        .expect("the lease frees the lock");
    got.unlock().await.unwrap();
}

#[tokio::test]
async fn watchdog_keeps_the_lock_past_three_leases_and_stops_after_unlock() {
    let server = RedisServer::spawn();
    let a = client(&server).await; // watchdog timeout 1 s
    let b = client(&server).await;
    let mut conn = server.conn().await;
    let lock = a.lock("watched");
    let guard = lock.lock().await.unwrap();
    tokio::time::sleep(Duration::from_millis(3500)).await;
    assert!(!guard.is_lost());
    let holds: Option<u64> = conn.hget("watched", guard.owner_id()).await.unwrap();
    assert_eq!(holds, Some(1));
    let ttl: i64 = conn.pttl("watched").await.unwrap();
    assert!(ttl > 0 && ttl <= 1000, "ttl {ttl}");
    assert!(b
        .lock("watched")
        .try_lock(Duration::ZERO)
        .await
        .unwrap()
        .is_none());

    guard.unlock().await.unwrap();
    assert_eq!(a.tracked_lock_count(), 0);
    // No renewal runs any more: over several periods no script is called.
    let before = server.command_calls("evalsha");
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(server.command_calls("evalsha"), before);
}

#[tokio::test]
async fn a_waiter_wakes_on_unlock_long_before_the_ttl() {
    let server = RedisServer::spawn();
    let a = Client::connect(server.url()).await.unwrap(); // 30 s lease
    let b = Client::connect(server.url()).await.unwrap();
    let guard = a.lock("wake").lock().await.unwrap();
    let waiter = tokio::spawn({
        let lock = b.lock("wake");
        async move {
            let guard = lock.lock().await.unwrap();
            let woke = Instant::now();
            guard.unlock().await.unwrap();
            woke
        }
    });
    // Let the waiter subscribe and park.
    assert!(
        eventually(Duration::from_secs(5), || {
            let b = b.clone();
            async move { b.subscription_count() == 1 }
        })
        .await
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    let unlocked = Instant::now();
    guard.unlock().await.unwrap();
    let woke = waiter.await.unwrap();
    let delay = woke.duration_since(unlocked);
    // The TTL was 30 s: a wake-up by message is orders of magnitude sooner.
    assert!(delay < Duration::from_secs(5), "woke after {delay:?}");
}

#[tokio::test]
async fn try_lock_gives_up_when_the_wait_runs_out() {
    let server = RedisServer::spawn();
    let a = client(&server).await;
    let b = client(&server).await;
    let guard = a.lock("busy").lock().await.unwrap();
    let started = Instant::now();
    let got = b
        .lock("busy")
        .try_lock(Duration::from_millis(300))
        .await
        .unwrap();
    assert!(got.is_none());
    assert!(started.elapsed() >= Duration::from_millis(300));
    let err = b
        .lock("busy")
        .lock_with(LockOptions::new().wait(Duration::from_millis(100)))
        .await
        .unwrap_err();
    assert!(err.is_wait_timed_out() && err.is_timeout(), "{err}");
    // Giving up leaves no subscription behind.
    assert!(
        eventually(Duration::from_secs(5), || {
            let b = b.clone();
            async move { b.subscription_count() == 0 }
        })
        .await
    );
    guard.unlock().await.unwrap();
}

#[tokio::test]
async fn a_dropped_waiting_future_leaves_nothing_behind() {
    let server = RedisServer::spawn();
    let a = client(&server).await;
    let b = client(&server).await;
    let conn = server.conn().await;
    let guard = a.lock("cancel").lock().await.unwrap();
    let lock_b = b.lock("cancel");
    let waiting = tokio::time::timeout(Duration::from_millis(300), lock_b.lock()).await;
    assert!(waiting.is_err(), "still waiting when dropped");
    guard.unlock().await.unwrap();
    // No hold, no renewal, no subscription.
    assert!(!lock_b.is_locked().await.unwrap());
    assert_eq!(b.tracked_lock_count(), 0);
    assert!(
        eventually(Duration::from_secs(5), || {
            let b = b.clone();
            async move { b.subscription_count() == 0 }
        })
        .await
    );
    assert!(
        eventually(Duration::from_secs(5), || {
            let mut conn = conn.clone();
            async move { numsub(&mut conn, "redisson_lock__channel:{cancel}").await == 0 }
        })
        .await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_at_any_point_of_an_acquire_never_strands_a_hold() {
    let server = RedisServer::spawn();
    let a = long_lease_client(&server).await;
    let conn = server.conn().await;
    let lock = a.lock("cancel-race");
    let mut completed = 0;
    // Drop the future after 0, 1, 2, … polls (more sparsely further on): before it is polled
    // at all, before the script is sent, while it is in flight; until three in a row finished.
    let (mut polls, mut in_a_row) = (0, 0);
    while in_a_row < 3 {
        assert!(polls < 1_000_000, "an acquire never finished");
        if let Some(guard) = poll_then_drop(lock.lock(), polls).await {
            completed += 1;
            in_a_row += 1;
            drop(guard.unwrap());
        } else {
            in_a_row = 0;
        }
        // Before the next attempt (which would take a stranded hold of its own handle over):
        // whatever the cancelled attempt was granted is released.
        assert!(
            eventually(Duration::from_secs(5), || {
                let mut conn = conn.clone();
                async move { !conn.exists::<_, bool>("cancel-race").await.unwrap() }
            })
            .await,
            "after {polls} polls: nothing is left held ({completed} completed)"
        );
        polls += 1 + polls / 16;
    }
    let b = client(&server).await;
    let got = b
        .lock("cancel-race")
        .try_lock(Duration::from_secs(10))
        .await
        .unwrap();
    assert!(got.is_some(), "every hold was released");
    assert!(
        eventually(Duration::from_secs(5), || {
            let a = a.clone();
            async move { a.tracked_lock_count() == 0 }
        })
        .await
    );
}

/// `unlock()` dropped after 0, 1, 2, … polls: before it is polled, while the release is in
/// flight, after it answered. The lock is free in the end every time, and a re-entered guard's
/// unlock, cancelled at any point, never takes the hold from the guard that still has it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_an_unlock_at_any_point_releases_exactly_its_own_hold() {
    let server = RedisServer::spawn();
    let a = long_lease_client(&server).await;
    let mut conn = server.conn().await;
    let lock = a.lock("unlock-race");
    let (mut polls, mut in_a_row) = (0, 0);
    while in_a_row < 3 {
        assert!(polls < 1_000_000, "an unlock never finished");
        let outer = lock.lock().await.unwrap();
        let inner = outer.reenter();
        if let Some(released) = poll_then_drop(inner.unlock(), polls).await {
            released.unwrap();
        }
        let holds: Option<u64> = conn.hget("unlock-race", outer.owner_id()).await.unwrap();
        assert_eq!(
            holds,
            Some(1),
            "after {polls} polls: the outer guard lost its hold"
        );
        let finished = poll_then_drop(outer.unlock(), polls).await.is_some();
        in_a_row = if finished { in_a_row + 1 } else { 0 };
        assert!(
            eventually(Duration::from_secs(5), || {
                let mut conn = conn.clone();
                async move { !conn.exists::<_, bool>("unlock-race").await.unwrap() }
            })
            .await,
            "after {polls} polls: the last guard's cancelled unlock left the lock held"
        );
        polls += 1 + polls / 16;
    }
}

#[tokio::test]
async fn a_dropped_guard_releases_without_blocking() {
    let server = RedisServer::spawn();
    let a = client(&server).await;
    let lock = a.lock("dropped");
    let guard = lock.lock().await.unwrap();
    drop(guard);
    assert!(
        eventually(Duration::from_secs(5), || {
            let lock = lock.clone();
            async move { !lock.is_locked().await.unwrap() }
        })
        .await
    );
    assert_eq!(a.tracked_lock_count(), 0);
}

#[tokio::test]
async fn fencing_tokens_strictly_increase_across_holders() {
    let server = RedisServer::spawn();
    let clients = [
        client(&server).await,
        client(&server).await,
        client(&server).await,
    ];
    let mut last = 0;
    for round in 0..30 {
        let lock = clients[round % 3].lock("fenced");
        let guard = lock.lock().await.unwrap();
        assert!(
            guard.fencing_token() > last,
            "{} after {last}",
            guard.fencing_token()
        );
        last = guard.fencing_token().get();
        guard.unlock().await.unwrap();
    }
}

#[tokio::test]
async fn lost_fires_when_redis_restarts_under_a_held_lock_and_the_client_recovers() {
    let mut server = RedisServer::spawn();
    let a = client(&server).await;
    let lock = a.lock("restart");
    let guard = lock.lock().await.unwrap();
    let lost = guard.lost();
    server.restart(); // no persistence: the lock is gone
    tokio::time::timeout(Duration::from_secs(10), lost)
        .await
        .expect("lost() fires after the lock vanished");
    assert!(guard.is_lost());
    assert!(guard.unlock().await.unwrap_err().is_not_owner());
    // The client reconnects by itself.
    let again = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match lock.try_lock(Duration::from_secs(1)).await {
                Ok(Some(g)) => return g,
                _ => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    })
    .await
    .expect("the client recovers");
    again.unlock().await.unwrap();
}

/// Redisson's `RedissonLock.tryLockInnerAsync` script, as quoted in seed 004.
pub(crate) const REDISSON_ACQUIRE: &str = "if (redis.call('exists', KEYS[1]) == 0) then \
    redis.call('hset', KEYS[1], ARGV[2], 1); \
    redis.call('pexpire', KEYS[1], ARGV[1]); \
    return nil; \
end; \
if (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then \
    redis.call('hincrby', KEYS[1], ARGV[2], 1); \
    redis.call('pexpire', KEYS[1], ARGV[1]); \
    return nil; \
end; \
return redis.call('pttl', KEYS[1]);";

/// Redisson's `RedissonLock.unlockInnerAsync` script, as quoted in seed 004.
pub(crate) const REDISSON_RELEASE: &str = "if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then \
    return nil;\
end; \
local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); \
if (counter > 0) then \
    redis.call('pexpire', KEYS[1], ARGV[2]); \
    return 0; \
else \
    redis.call('del', KEYS[1]); \
    redis.call('publish', KEYS[2], ARGV[1]); \
    return 1; \
end; \
return nil;";

#[tokio::test]
async fn redisson_and_latchkey_exclude_each_other_and_redisson_unlock_wakes_us() {
    let server = RedisServer::spawn();
    let a = client(&server).await;
    let mut conn = server.conn().await;
    let java_owner = "6f1c0c3e-0000-4000-8000-000000000001:1";

    // Java holds it.
    let r: Option<i64> = redis::cmd("EVAL")
        .arg(REDISSON_ACQUIRE)
        .arg(1)
        .arg("shared")
        .arg(30_000)
        .arg(java_owner)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(r, None, "redisson acquired");
    let lock = a.lock("shared");
    assert!(lock.try_lock(Duration::ZERO).await.unwrap().is_none());

    // Our waiter is woken by Redisson's unlock message (the TTL is 30 s).
    let waiter = tokio::spawn({
        let lock = lock.clone();
        async move { lock.lock().await.unwrap() }
    });
    assert!(
        eventually(Duration::from_secs(5), || {
            let a = a.clone();
            async move { a.subscription_count() == 1 }
        })
        .await
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    let r: Option<i64> = redis::cmd("EVAL")
        .arg(REDISSON_RELEASE)
        .arg(2)
        .arg("shared")
        .arg("redisson_lock__channel:{shared}")
        .arg(0)
        .arg(30_000)
        .arg(java_owner)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(r, Some(1), "redisson released");
    let guard = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("woken by the redisson unlock message long before its 30 s ttl")
        .unwrap();

    // We hold it: Redisson's acquire gets a TTL back.
    let r: Option<i64> = redis::cmd("EVAL")
        .arg(REDISSON_ACQUIRE)
        .arg(1)
        .arg("shared")
        .arg(30_000)
        .arg(java_owner)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(
        r.is_some_and(|ttl| ttl > 0),
        "redisson sees our hold: {r:?}"
    );
    // And our hash is one Redisson understands: one field, a hold count of 1.
    let fields: std::collections::HashMap<String, i64> = conn.hgetall("shared").await.unwrap();
    assert_eq!(fields.len(), 1);
    assert_eq!(fields.get(guard.owner_id()), Some(&1));
    guard.unlock().await.unwrap();
}

#[tokio::test]
async fn local_waiters_are_served_in_fifo_order() {
    let server = RedisServer::spawn();
    let a = client(&server).await;
    let b = client(&server).await;
    let guard = a.lock("fifo").lock().await.unwrap();
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..4 {
        let lock = b.lock("fifo");
        let order = order.clone();
        tasks.push(tokio::spawn(async move {
            let g = lock.lock().await.unwrap();
            order.lock().unwrap().push(i);
            tokio::time::sleep(Duration::from_millis(20)).await;
            g.unlock().await.unwrap();
        }));
        // Queue them in a known order.
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    guard.unlock().await.unwrap();
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3]);
}

#[tokio::test]
async fn bad_input_is_rejected_and_changes_nothing() {
    let server = RedisServer::spawn();
    let a = client(&server).await;
    let mut conn = server.conn().await;

    let err = a.lock("").lock().await.unwrap_err();
    assert!(err.is_invalid_argument(), "{err}");
    let long = "n".repeat(latchkey_redis::MAX_NAME_LEN + 1);
    let err = a
        .lock(long.as_str())
        .try_lock(Duration::ZERO)
        .await
        .unwrap_err();
    assert!(
        err.is_invalid_argument() && err.to_string().contains("limit"),
        "{err}"
    );
    for lease in [
        Duration::ZERO,
        Duration::from_micros(10),
        latchkey_redis::MAX_LEASE * 2,
    ] {
        let err = a
            .lock("bad-lease")
            .lock_with(LockOptions::new().lease(lease))
            .await
            .unwrap_err();
        assert!(err.is_invalid_argument(), "{lease:?}: {err}");
    }
    let err = a
        .lock("bad-wait")
        .try_lock(Duration::MAX)
        .await
        .unwrap_err();
    assert!(err.is_invalid_argument(), "{err}");
    let keys = crate::helpers::data_keys(&mut conn).await;
    assert!(keys.is_empty(), "nothing was written: {keys:?}");

    let err = Client::builder(server.url())
        .watchdog_timeout(Duration::from_millis(10))
        .connect()
        .await
        .unwrap_err();
    assert!(
        err.is_invalid_argument() && err.to_string().contains("watchdog"),
        "{err}"
    );

    // A key of another type under the lock's name: typed error, value untouched.
    let _: () = conn.set("occupied", "precious").await.unwrap();
    let err = a.lock("occupied").lock().await.unwrap_err();
    assert!(err.is_wrong_type(), "{err}");
    let err = a.lock("occupied").force_unlock().await.unwrap_err();
    assert!(err.is_wrong_type(), "{err}");
    let v: String = conn.get("occupied").await.unwrap();
    assert_eq!(v, "precious");
    // A fencing counter of another type: nothing written either.
    let _: () = conn
        .lpush("redisson_lock_token:{tokenless}", "x")
        .await
        .unwrap();
    let err = a.lock("tokenless").lock().await.unwrap_err();
    assert!(err.is_wrong_type(), "{err}");
    let exists: bool = conn.exists("tokenless").await.unwrap();
    assert!(!exists);
}

#[tokio::test]
async fn unreachable_redis_fails_fast_with_a_clear_error() {
    let port = latchkey_test_support::free_port();
    let started = Instant::now();
    let err = Client::builder(format!("redis://127.0.0.1:{port}"))
        .connect_timeout(Duration::from_millis(500))
        .connect()
        .await
        .unwrap_err();
    assert!(err.is_connection(), "{err}");
    assert!(started.elapsed() < Duration::from_secs(30));

    // A server that stops answering: a bounded wait retries each timed-out attempt (a stall
    // shorter than the wait is waited through) and fails with the timeout once its wait is
    // over, instead of hanging; an unbounded `lock()` would wait for the server to come back.
    let mut server = RedisServer::spawn();
    let a = Client::builder(server.url())
        .command_timeout(Duration::from_millis(500))
        .connect_timeout(Duration::from_millis(500))
        .connect()
        .await
        .unwrap();
    server.pause_process();
    let err = a
        .lock("paused")
        .try_lock(Duration::from_secs(1))
        .await
        .unwrap_err();
    assert!(err.is_connection(), "{err}");
    server.resume_process();
    // A server that is gone refuses connections: that is no stall, and fails at once.
    server.kill();
    let err = a.lock("killed").lock().await.unwrap_err();
    assert!(err.is_connection(), "{err}");
}

#[tokio::test]
async fn dropping_the_client_closes_its_connections() {
    let server = RedisServer::spawn();
    let mut conn = server.conn().await;
    // The ids of the connections open now. Compared by id, not by count: a connection opened
    // before (the readiness probe of the server's spawn) may close at any time.
    async fn client_ids(conn: &mut redis::aio::MultiplexedConnection) -> HashSet<String> {
        let list: String = redis::cmd("CLIENT")
            .arg("LIST")
            .query_async(conn)
            .await
            .unwrap();
        list.lines()
            .filter_map(|line| line.split(' ').find(|f| f.starts_with("id=")))
            .map(str::to_owned)
            .collect()
    }
    let before = client_ids(&mut conn).await;
    {
        let a = client(&server).await;
        let lock = a.lock("bye");
        let guard = lock.lock().await.unwrap();
        // Make the subscriber connect too.
        let _ = a
            .lock("bye")
            .try_lock(Duration::from_millis(50))
            .await
            .unwrap();
        let opened = client_ids(&mut conn).await.difference(&before).count();
        assert!(
            opened >= 2,
            "the client opened a command and a subscriber connection, not {opened}"
        );
        drop(guard);
    }
    assert!(
        eventually(Duration::from_secs(10), || {
            let mut conn = conn.clone();
            let before = before.clone();
            async move { client_ids(&mut conn).await.is_subset(&before) }
        })
        .await,
        "every connection of the dropped client closed; still open: {:?}",
        client_ids(&mut conn)
            .await
            .difference(&before)
            .collect::<Vec<_>>()
    );
    let exists: bool = conn.exists("bye").await.unwrap();
    assert!(!exists, "the dropped guard was released on the way out");
}

#[test]
fn handles_and_guards_are_send_and_sync() {
    fn check<T: Send + Sync + 'static>() {}
    check::<Client>();
    check::<latchkey_redis::Lock>();
    check::<latchkey_redis::LockGuard>();
    check::<Error>();
}

#[tokio::test]
async fn waiting_clients_are_handed_the_lock_in_arrival_order() {
    let server = RedisServer::spawn();
    let holder = client(&server).await;
    let guard = holder.lock("handoff").lock().await.unwrap();
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..5 {
        let c = client(&server).await;
        let order = order.clone();
        tasks.push(tokio::spawn(async move {
            let g = c.lock("handoff").lock().await.unwrap();
            order.lock().unwrap().push(i);
            g.unlock().await.unwrap();
        }));
        // Let client i register in the wait queue before client i + 1 arrives.
        let mut conn = server.conn().await;
        assert!(
            eventually(Duration::from_secs(5), || {
                let mut conn = conn.clone();
                async move {
                    let n: u64 = conn.zcard("latchkey_lock_queue:{handoff}").await.unwrap();
                    n == i + 1
                }
            })
            .await
        );
        let _: () = redis::cmd("PING").query_async(&mut conn).await.unwrap();
    }
    guard.unlock().await.unwrap();
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3, 4]);
}

#[tokio::test]
async fn redisson_subscribers_still_get_the_unlock_message_after_a_hand_off() {
    let server = RedisServer::spawn();
    let a = client(&server).await;
    let b = client(&server).await;
    // A raw subscriber stands in for a Redisson client's LockPubSub.
    let mut raw = server.client().get_async_pubsub().await.unwrap();
    raw.subscribe("redisson_lock__channel:{mixed}")
        .await
        .unwrap();
    let guard = a.lock("mixed").lock().await.unwrap();
    let waiter = tokio::spawn({
        let lock = b.lock("mixed");
        async move { lock.lock().await.unwrap() }
    });
    let conn = server.conn().await;
    assert!(
        eventually(Duration::from_secs(5), || {
            let mut conn = conn.clone();
            async move {
                let n: u64 = conn.zcard("latchkey_lock_queue:{mixed}").await.unwrap();
                n == 1
            }
        })
        .await
    );
    guard.unlock().await.unwrap();
    let mut stream = raw.on_message();
    use futures_util::StreamExt;
    let first: String = stream.next().await.unwrap().get_payload().unwrap();
    let second: String = stream.next().await.unwrap().get_payload().unwrap();
    let wake_id: u64 = first
        .parse()
        .expect("a numeric wake id, which Redisson ignores");
    assert!((2..(1 << 63)).contains(&wake_id));
    assert_eq!(second, "0", "Redisson's unlock message follows");
    let g = waiter.await.unwrap();
    g.unlock().await.unwrap();
}

#[tokio::test]
async fn a_waiter_that_gives_up_leaves_the_queue_and_dead_entries_are_skipped() {
    let server = RedisServer::spawn();
    let a = client(&server).await;
    let b = client(&server).await;
    let c = client(&server).await;
    let mut conn = server.conn().await;
    let guard = a.lock("leaving").lock().await.unwrap();

    // b waits, then gives up: its registration goes away.
    let gave_up = b
        .lock("leaving")
        .try_lock(Duration::from_millis(300))
        .await
        .unwrap();
    assert!(gave_up.is_none());
    assert!(
        eventually(Duration::from_secs(5), || {
            let mut conn = conn.clone();
            async move {
                let n: u64 = conn.zcard("latchkey_lock_queue:{leaving}").await.unwrap();
                n == 0
            }
        })
        .await,
        "b left the queue"
    );

    // A dead client's entry at the head of the queue (it stopped refreshing) is skipped.
    let _: () = redis::cmd("ZADD")
        .arg("latchkey_lock_queue:{leaving}")
        .arg(0)
        .arg("424242")
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: () = conn
        .hset("latchkey_lock_alive:{leaving}", "424242", 1)
        .await
        .unwrap();
    let waiter = tokio::spawn({
        let lock = c.lock("leaving");
        async move { lock.lock().await.unwrap() }
    });
    assert!(
        eventually(Duration::from_secs(5), || {
            let mut conn = conn.clone();
            async move {
                let n: u64 = conn.zcard("latchkey_lock_queue:{leaving}").await.unwrap();
                n == 2
            }
        })
        .await
    );
    guard.unlock().await.unwrap();
    let g = waiter.await.unwrap();
    let dead: Option<f64> = conn
        .zscore("latchkey_lock_queue:{leaving}", "424242")
        .await
        .unwrap();
    assert_eq!(dead, None, "the dead entry was dropped");
    g.unlock().await.unwrap();
}

#[tokio::test]
async fn status_shows_holder_lease_token_and_waiters() {
    let server = RedisServer::spawn();
    let a = client(&server).await;
    let b = client(&server).await;
    let lock = a.lock("inspected");
    let free = lock.status().await.unwrap();
    assert!(
        free.holders.is_empty() && free.remaining_lease.is_none() && free.fencing_token.is_none()
    );
    let g1 = lock.lock().await.unwrap();
    let g2 = g1.reenter();
    let waiter = tokio::spawn({
        let lock = b.lock("inspected");
        async move { lock.lock().await.unwrap() }
    });
    assert!(
        eventually(Duration::from_secs(5), || {
            let lock = lock.clone();
            async move { lock.status().await.unwrap().waiting_clients == 1 }
        })
        .await
    );
    let status = lock.status().await.unwrap();
    assert_eq!(status.holders.len(), 1);
    assert_eq!(status.holders[0].owner, g1.owner_id());
    assert_eq!(status.holders[0].holds, 1, "re-entries are the guards'");
    assert_eq!(status.fencing_token, Some(g1.fencing_token()));
    assert!(status
        .remaining_lease
        .is_some_and(|d| d <= Duration::from_secs(1)));
    drop(g2);
    g1.unlock().await.unwrap();
    waiter.await.unwrap().unlock().await.unwrap();
}

#[tokio::test]
async fn namespaces_keep_objects_apart() {
    let server = RedisServer::spawn();
    let mut conn = server.conn().await;
    let tenant = |ns: &'static str| Client::builder(server.url()).namespace(ns).connect();
    let a = tenant("tenant-a").await.unwrap();
    let b = tenant("tenant-b").await.unwrap();
    let ga = a.lock("orders:1").lock().await.unwrap();
    // The same name in another namespace is another lock.
    let gb = b
        .lock("orders:1")
        .try_lock(Duration::ZERO)
        .await
        .unwrap()
        .expect("free");
    let exists: bool = conn.exists("tenant-a:orders:1").await.unwrap();
    assert!(exists);
    let exists: bool = conn.exists("tenant-b:orders:1").await.unwrap();
    assert!(exists);
    assert_eq!(a.lock("orders:1").name(), "orders:1");
    ga.unlock().await.unwrap();
    gb.unlock().await.unwrap();
    for ns in ["", "a:b", "a{b}", &"n".repeat(65)] {
        let err = Client::builder(server.url())
            .namespace(ns)
            .connect()
            .await
            .unwrap_err();
        assert!(err.is_invalid_argument(), "{ns}: {err}");
    }
}

/// A lock channel in steady use stays subscribed: the hub unsubscribes a channel only after it
/// has been unused for a whole linger, not whenever an old linger entry runs out at a moment
/// the channel happens to be between two uses. (It used to: under contention every client
/// unsubscribed and subscribed again several times per linger period, a SUBSCRIBE round trip
/// before many waits and 0.14 extra commands per critical section in the benchmark.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_channel_in_steady_use_is_not_resubscribed() {
    let server = RedisServer::spawn();
    let linger = Duration::from_millis(100);
    let mut clients = Vec::new();
    for _ in 0..3 {
        clients.push(
            Client::builder(server.url())
                .subscription_linger(linger)
                .connect()
                .await
                .unwrap(),
        );
    }
    let mut conn = server.conn().await;
    let counter = "steady:counter";
    let until = Instant::now() + Duration::from_millis(1500);
    let mut tasks = Vec::new();
    for client in &clients {
        let lock = client.lock("steady");
        let mut conn = server.conn().await;
        tasks.push(tokio::spawn(async move {
            let mut sections = 0u64;
            while Instant::now() < until {
                let guard = lock.lock().await.unwrap();
                let n: i64 = conn.get(counter).await.unwrap_or(0);
                let _: () = conn.set(counter, n + 1).await.unwrap();
                tokio::time::sleep(Duration::from_millis(2)).await;
                guard.unlock().await.unwrap();
                sections += 1;
            }
            sections
        }));
    }
    let mut sections = 0;
    for task in tasks {
        sections += task.await.unwrap();
    }
    let total: i64 = conn.get(counter).await.unwrap();
    assert_eq!(total as u64, sections, "mutual exclusion");
    assert!(sections > 50, "the lock was contended: {sections} sections");
    let subscribes = server.command_calls("subscribe");
    // One SUBSCRIBE per client, plus at most one more each if a client's channel was idle
    // for a whole linger at some point (waits are ~2 ms here, the linger 100 ms).
    assert!(
        subscribes <= 2 * clients.len() as u64,
        "{subscribes} SUBSCRIBE calls for {} clients over 1.5 s ({sections} sections): the \
         channel was dropped and subscribed again while in use",
        clients.len()
    );
    // And an idle channel is still dropped after the linger.
    assert!(
        eventually(Duration::from_secs(5), || {
            let mut conn = conn.clone();
            async move { numsub(&mut conn, "redisson_lock__channel:{steady}").await == 0 }
        })
        .await,
        "an unused channel is unsubscribed after the linger"
    );
}

/// A guard dropped (its release handed to the background task) and the same handle locking
/// again at once: the release may reach Redis after the new acquire, which is another owner,
/// so the new acquire waits for the release rather than taking the old hold over, and the late
/// release cannot free the new hold. Run on both worker threads, so that the background release
/// and the next acquire race for real.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_still_on_its_way_is_never_mistaken_for_the_next_hold() {
    let server = RedisServer::spawn();
    let a = client(&server).await;
    let mut conn = server.conn().await;
    let lock = a.lock("racing-release");
    for round in 0..300 {
        drop(lock.lock().await.unwrap());
        let guard = lock.lock().await.unwrap();
        let fields: std::collections::HashMap<String, u64> =
            conn.hgetall("racing-release").await.unwrap();
        assert_eq!(
            fields.into_iter().collect::<Vec<_>>(),
            vec![(guard.owner_id().to_owned(), 1)],
            "round {round}: the guard's hold is the lock's only one"
        );
        guard.unlock().await.unwrap();
    }
}

/// Every primitive under a namespace: `name()` is the name given, the checks are on that name
/// (a name of exactly `MAX_NAME_LEN` bytes works, reserved prefixes and a whole hash tag are
/// refused), and the object is kept at `<namespace>:<name>` (another namespace's object of the
/// same name is another object).
#[tokio::test]
async fn every_primitive_namespaces_its_keys_the_same_way() {
    use latchkey_redis::MAX_NAME_LEN;

    let server = RedisServer::spawn();
    let mut conn = server.conn().await;
    let tenant = |ns: &'static str| Client::builder(server.url()).namespace(ns).connect();
    let a = tenant("tenant-a").await.unwrap();
    let b = tenant("tenant-b").await.unwrap();

    // What each primitive does with a name: its `name()`, and one use that writes its key (or
    // fails on a bad name). The write leaves the object in Redis until the test ends.
    type Use = fn(
        Client,
        String,
    ) -> futures_util::future::BoxFuture<'static, latchkey_redis::Result<String>>;
    let primitives: [(&str, Use); 7] = [
        ("lock", |c, n| {
            Box::pin(async move {
                let lock = c.lock(n);
                std::mem::forget(lock.lock().await?);
                Ok(lock.name().to_owned())
            })
        }),
        ("fair lock", |c, n| {
            Box::pin(async move {
                let lock = c.fair_lock(n);
                std::mem::forget(lock.lock().await?);
                Ok(lock.name().to_owned())
            })
        }),
        ("read-write lock", |c, n| {
            Box::pin(async move {
                let lock = c.rw_lock(n);
                std::mem::forget(lock.write().lock().await?);
                Ok(lock.name().to_owned())
            })
        }),
        ("semaphore", |c, n| {
            Box::pin(async move {
                let semaphore = c.semaphore(n);
                semaphore.try_set_permits(2).await?;
                Ok(semaphore.name().to_owned())
            })
        }),
        ("permit semaphore", |c, n| {
            Box::pin(async move {
                let semaphore = c.permit_semaphore(n);
                semaphore.try_set_permits(2).await?;
                Ok(semaphore.name().to_owned())
            })
        }),
        ("latch", |c, n| {
            Box::pin(async move {
                let latch = c.count_down_latch(n);
                latch.try_set_count(2).await?;
                Ok(latch.name().to_owned())
            })
        }),
        ("delayed queue", |c, n| {
            Box::pin(async move {
                let queue = c.delayed_queue::<String>(n);
                queue
                    .offer(&"x".to_owned(), Duration::from_secs(600))
                    .await?;
                Ok(queue.name().to_owned())
            })
        }),
    ];
    for (i, (kind, use_it)) in primitives.iter().enumerate() {
        let name = format!("orders:{i}");
        assert_eq!(
            use_it(a.clone(), name.clone()).await.unwrap(),
            name,
            "{kind}: name()"
        );
        let key = format!("tenant-a:{name}");
        let exists: bool = conn.exists(&key).await.unwrap();
        // The delayed queue keeps its items under derived keys only.
        let derived: Vec<String> = conn.keys(format!("*tenant-a:{name}*")).await.unwrap();
        assert!(
            exists || !derived.is_empty(),
            "{kind}: nothing at {key}: {derived:?}"
        );
        let others: Vec<String> = conn.keys(format!("*tenant-b:{name}*")).await.unwrap();
        assert!(others.is_empty(), "{kind}: {others:?}");
        // The same name in the other namespace is another object: set up afresh.
        assert_eq!(
            use_it(b.clone(), name.clone()).await.unwrap(),
            name,
            "{kind}"
        );
        let others: Vec<String> = conn.keys(format!("*tenant-b:{name}*")).await.unwrap();
        assert!(!others.is_empty(), "{kind}: tenant-b's object is its own");
        let bare: Vec<String> = conn.keys(format!("{name}*")).await.unwrap();
        assert!(bare.is_empty(), "{kind}: {bare:?} outside any namespace");

        // The limit counts the name, not the namespace. (One name per kind: objects of two
        // kinds under one name would share a key.)
        let longest = format!("{i}{}", "n".repeat(MAX_NAME_LEN - 1));
        let got = use_it(a.clone(), longest.clone()).await;
        assert_eq!(
            got.as_deref().ok(),
            Some(longest.as_str()),
            "{kind}: {got:?}"
        );
        let too_long = format!("{longest}n");
        for bad in [
            "redisson_lock_token:{x}",
            "latchkey_lock_queue:{x}",
            "{x}",
            too_long.as_str(),
        ] {
            let err = use_it(a.clone(), bad.to_owned()).await.unwrap_err();
            assert!(err.is_invalid_argument(), "{kind} {bad:.40}: {err}");
        }
    }
}

/// A waiter whose wait has time left keeps waiting through a Redis stall shorter than the wait
/// (`CLIENT PAUSE 5000 ALL`, 1 s command timeout): it gets what it waits for once the stall
/// ends, instead of failing with the command timeout. Lock, fair lock, write lock, permit
/// semaphore and latch, each waiting before the stall began for something that frees up
/// during it (a 1.5 s lease, a count taken down after it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_wait_through_a_redis_stall() {
    let server = RedisServer::spawn();
    let mut conn = server.conn().await;
    let holder = client(&server).await;
    let waiter = Client::builder(server.url())
        .command_timeout(Duration::from_secs(1))
        .watchdog_timeout(Duration::from_secs(5))
        .connect()
        .await
        .unwrap();
    let lease = LockOptions::new().lease(Duration::from_millis(1500));
    let wait = LockOptions::new().wait(Duration::from_secs(30));
    std::mem::forget(holder.lock("l").lock_with(lease).await.unwrap());
    std::mem::forget(holder.fair_lock("f").lock_with(lease).await.unwrap());
    std::mem::forget(holder.rw_lock("rw").write().lock_with(lease).await.unwrap());
    let permits = holder.permit_semaphore("p");
    permits.try_set_permits(1).await.unwrap();
    std::mem::forget(
        permits
            .acquire_with(
                1,
                latchkey_redis::PermitOptions::new().lease(Duration::from_millis(1500)),
            )
            .await
            .unwrap(),
    );
    let latch = holder.count_down_latch("c");
    latch.try_set_count(1).await.unwrap();
    // The waiters start waiting before the stall.
    let lock = {
        let lock = waiter.lock("l");
        tokio::spawn(async move {
            lock.try_lock_with(wait)
                .await
                .map(|g| g.map(std::mem::forget).is_some())
        })
    };
    let fair = {
        let lock = waiter.fair_lock("f");
        tokio::spawn(async move {
            lock.try_lock_with(wait)
                .await
                .map(|g| g.map(std::mem::forget).is_some())
        })
    };
    let write = {
        let lock = waiter.rw_lock("rw");
        tokio::spawn(async move {
            lock.write()
                .try_lock_with(wait)
                .await
                .map(|g| g.map(std::mem::forget).is_some())
        })
    };
    let permit = {
        let semaphore = waiter.permit_semaphore("p");
        tokio::spawn(async move {
            semaphore
                .try_acquire(1, Duration::from_secs(30))
                .await
                .map(|p| p.map(std::mem::forget).is_some())
        })
    };
    let opened = {
        let latch = waiter.count_down_latch("c");
        tokio::spawn(async move { latch.wait_for(Duration::from_secs(30)).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(5000)
        .arg("ALL")
        .query_async(&mut conn)
        .await
        .unwrap();
    let started = Instant::now();
    tokio::time::sleep(Duration::from_millis(5200)).await;
    latch.count_down().await.unwrap();
    for (what, task) in [
        ("lock", lock),
        ("fair lock", fair),
        ("write lock", write),
        ("permit", permit),
        ("latch", opened),
    ] {
        let got = task.await.unwrap();
        assert!(
            matches!(got, Ok(true)),
            "{what}: {got:?} (the stall ended {:?} ago)",
            started.elapsed().saturating_sub(Duration::from_secs(5))
        );
    }
    // Only the waiter's grants are left: one hold each (no count from a timed-out attempt).
    let holds: Vec<(String, i64)> = conn.hgetall("l").await.unwrap();
    assert_eq!(holds.len(), 1, "{holds:?}");
    assert_eq!(holds[0].1, 1, "{holds:?}");
    let leases: i64 = conn.zcard("{p}:timeout").await.unwrap();
    assert_eq!(leases, 1, "only the granted permit is leased");
}

/// A holder cut off from Redis (its connection black-holed) hears `lost()` before another
/// client can take the lock: the watchdog loses a hold whose lease runs out at a renewal tick
/// at once, not after that tick's renewal has timed out.
#[tokio::test]
async fn a_cut_off_holder_hears_lost_before_another_client_locks() {
    let server = RedisServer::spawn();
    let proxy = latchkey_test_support::FaultProxy::start(&server.addr());
    let a = Client::builder(proxy.url())
        .watchdog_timeout(Duration::from_secs(1))
        .command_timeout(Duration::from_millis(200))
        .connect()
        .await
        .unwrap();
    let b = client(&server).await;
    for round in 0..3 {
        let name = format!("cutoff-{round}");
        let held = a.lock(name.as_str()).lock().await.unwrap();
        proxy.blackhole(true);
        let next = tokio::time::timeout(Duration::from_secs(10), b.lock(name.as_str()).lock())
            .await
            .expect("the lock is free once the lease has run out")
            .unwrap();
        assert!(
            held.is_lost(),
            "round {round}: lost() fired before the next holder locked"
        );
        proxy.blackhole(false);
        drop((held, next));
    }
}

/// A release that cannot reach Redis (a restart, a network cut) is sent again by the client's
/// background task once Redis answers: the lock is free then, not when its lease runs out (30 s
/// here). Both for a dropped guard and for `unlock()`, which also tells the caller.
#[tokio::test]
async fn a_release_that_cannot_reach_redis_is_sent_again_once_it_can() {
    let server = RedisServer::spawn();
    let proxy = latchkey_test_support::FaultProxy::start(&server.addr());
    // A 30 s lease; commands give up after 200 ms: the releases fail well before Redis is back.
    let cut = builder(proxy.url().as_str())
        .watchdog_timeout(Duration::from_secs(30))
        .command_timeout(Duration::from_millis(200))
        .connect()
        .await
        .unwrap();
    let other = client(&server).await;
    let dropped = cut.lock("cut-drop").lock().await.unwrap();
    let unlocked = cut.lock("cut-unlock").lock().await.unwrap();

    proxy.refuse(true);
    proxy.drop_connections();
    drop(dropped);
    let err = unlocked.unlock().await.unwrap_err();
    assert!(err.is_connection(), "{err}");
    tokio::time::sleep(Duration::from_secs(1)).await;
    for name in ["cut-drop", "cut-unlock"] {
        assert!(other.lock(name).is_locked().await.unwrap(), "{name}");
    }

    proxy.refuse(false);
    for name in ["cut-drop", "cut-unlock"] {
        let lock = other.lock(name);
        assert!(
            eventually(Duration::from_secs(10), || {
                let lock = lock.clone();
                async move { !lock.is_locked().await.unwrap() }
            })
            .await,
            "{name} is released once Redis can be reached"
        );
    }
}

/// A release that a busy server refuses (`BUSY`: a long script holds it) is sent again once the
/// server serves: the lock is free when the script ends, not when the lease runs out (30 s).
#[tokio::test]
async fn a_release_refused_by_a_busy_server_is_sent_again() {
    let server = RedisServer::spawn();
    let mut admin = server.conn().await;
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("busy-reply-threshold")
        .arg("100")
        .query_async(&mut admin)
        .await
        .unwrap();
    let holder = long_lease_client(&server).await;
    let other = client(&server).await;
    let guard = holder.lock("busy").lock().await.unwrap();
    // A script that keeps the server to itself for 1.5 s, on a connection of its own.
    let mut busy = server.conn().await;
    let script = tokio::spawn(async move {
        redis::cmd("EVAL")
            .arg(
                "local t = redis.call('TIME') local start = t[1] * 1000000 + t[2] \
                 repeat t = redis.call('TIME') until t[1] * 1000000 + t[2] - start > 1500000 \
                 return 1",
            )
            .arg(0)
            .query_async::<i64>(&mut busy)
            .await
    });
    // Once the server answers BUSY, the guard goes: its release is refused.
    assert!(
        eventually(Duration::from_secs(5), || {
            let mut admin = admin.clone();
            async move {
                let reply = redis::cmd("PING").query_async::<String>(&mut admin).await;
                reply.is_err_and(|e| e.code() == Some("BUSY"))
            }
        })
        .await
    );
    drop(guard);
    assert_eq!(script.await.unwrap().unwrap(), 1);
    let lock = other.lock("busy");
    assert!(
        eventually(Duration::from_secs(10), || {
            let lock = lock.clone();
            async move { matches!(lock.is_locked().await, Ok(false)) }
        })
        .await,
        "the release was sent again once the script had ended"
    );
}
