//! The fair lock against a real redis-server.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use latchkey::{Client, Error, FairLock, LockOptions};
use latchkey_test_support::{eventually, RedisServer};
use redis::AsyncCommands;

async fn client(server: &RedisServer) -> Client {
    Client::builder(server.url())
        .watchdog_timeout(Duration::from_secs(1))
        .subscription_linger(Duration::from_millis(50))
        .connect()
        .await
        .expect("connect")
}

fn queue_key(name: &str) -> String {
    format!("redisson_lock_queue:{{{name}}}")
}

fn deadlines_key(name: &str) -> String {
    format!("redisson_lock_timeout:{{{name}}}")
}

async fn queue(conn: &mut redis::aio::MultiplexedConnection, name: &str) -> Vec<String> {
    conn.lrange(queue_key(name), 0, -1).await.unwrap()
}

/// Waits until the queue of `name` is exactly `expected`.
async fn queue_becomes(server: &RedisServer, name: &str, expected: &[&str]) -> bool {
    let conn = server.conn().await;
    eventually(Duration::from_secs(10), || {
        let mut conn = conn.clone();
        async move { queue(&mut conn, name).await == expected }
    })
    .await
}

async fn numsub(conn: &mut redis::aio::MultiplexedConnection, channel: &str) -> i64 {
    let v: (String, i64) = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channel)
        .query_async(conn)
        .await
        .unwrap();
    v.1
}

async fn server_ms(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    let (s, us): (u64, u64) = redis::cmd("TIME").query_async(conn).await.unwrap();
    s * 1000 + us / 1000
}

/// Spawns a waiter that records `index` in `order` when it gets the lock, then releases it.
fn spawn_waiter(
    lock: FairLock,
    index: usize,
    order: Arc<Mutex<Vec<usize>>>,
) -> tokio::task::JoinHandle<u64> {
    tokio::spawn(async move {
        let guard = lock.lock().await.unwrap();
        order.lock().unwrap().push(index);
        let token = guard.fencing_token();
        tokio::time::sleep(Duration::from_millis(10)).await;
        guard.unlock().await.unwrap();
        token
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_waiters_get_the_lock_in_arrival_order() {
    let server = RedisServer::spawn();
    let holder = client(&server).await;
    let guard = holder.fair_lock("fifo").lock().await.unwrap();
    let first_token = guard.fencing_token();
    // 4 clients with 2 handles each: fairness holds across clients and within one.
    let clients = [
        client(&server).await,
        client(&server).await,
        client(&server).await,
        client(&server).await,
    ];
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut owners = Vec::new();
    let mut tasks = Vec::new();
    for i in 0..8 {
        let lock = clients[(i * 3) % 4].fair_lock("fifo");
        owners.push(lock.owner_id().to_owned());
        tasks.push(spawn_waiter(lock, i, order.clone()));
        let expected: Vec<&str> = owners.iter().map(String::as_str).collect();
        assert!(
            queue_becomes(&server, "fifo", &expected).await,
            "waiter {i} queued behind the others"
        );
    }
    guard.unlock().await.unwrap();
    let mut tokens = Vec::new();
    for t in tasks {
        tokens.push(t.await.unwrap());
    }
    assert_eq!(*order.lock().unwrap(), (0..8).collect::<Vec<_>>());
    // Every holder got a larger token than the one before.
    let mut last = first_token;
    for token in tokens {
        assert!(token > last, "{token} after {last}");
        last = token;
    }
    let mut conn = server.conn().await;
    assert!(queue(&mut conn, "fifo").await.is_empty());
    let left: bool = conn.exists(deadlines_key("fifo")).await.unwrap();
    assert!(!left, "no deadline left behind");
    assert!(!holder.fair_lock("fifo").is_locked().await.unwrap());
}

#[tokio::test]
async fn a_waiter_cancelled_mid_queue_leaves_at_once_and_is_skipped() {
    let server = RedisServer::spawn();
    let holder = client(&server).await;
    let a = client(&server).await;
    let c = client(&server).await;
    let guard = holder.fair_lock("skip").lock().await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));

    let first = a.fair_lock("skip");
    let first_task = spawn_waiter(first.clone(), 0, order.clone());
    assert!(queue_becomes(&server, "skip", &[first.owner_id()]).await);

    // The middle waiter runs on a client of its own, which goes away with the task.
    let middle_client = client(&server).await;
    let middle = middle_client.fair_lock("skip");
    let middle_owner = middle.owner_id().to_owned();
    let middle_task = spawn_waiter(middle, 1, order.clone());
    drop(middle_client);
    assert!(queue_becomes(&server, "skip", &[first.owner_id(), &middle_owner]).await);

    let last = c.fair_lock("skip");
    let last_task = spawn_waiter(last.clone(), 2, order.clone());
    assert!(
        queue_becomes(
            &server,
            "skip",
            &[first.owner_id(), &middle_owner, last.owner_id()]
        )
        .await
    );

    // Kill the middle waiter (its future and its client are dropped): it leaves the queue at
    // once, long before the default 30 s waiter timeout.
    middle_task.abort();
    assert!(middle_task.await.unwrap_err().is_cancelled());
    assert!(
        queue_becomes(&server, "skip", &[first.owner_id(), last.owner_id()]).await,
        "the cancelled waiter left the queue"
    );

    guard.unlock().await.unwrap();
    first_task.await.unwrap();
    last_task.await.unwrap();
    assert_eq!(*order.lock().unwrap(), vec![0, 2]);
}

#[tokio::test]
async fn a_vanished_waiter_goes_stale_after_the_waiter_timeout_and_the_queue_moves_on() {
    let server = RedisServer::spawn();
    let holder = client(&server).await;
    let ghost_client = client(&server).await;
    let b = client(&server).await;
    let mut conn = server.conn().await;
    let timeout = Duration::from_secs(1);
    let guard = holder.fair_lock("ghost").lock().await.unwrap();

    // The ghost queues, then vanishes like a killed process: its future is leaked, so it never
    // attempts again and never leaves.
    let ghost = ghost_client.fair_lock("ghost").waiter_timeout(timeout);
    let ghost_owner = ghost.owner_id().to_owned();
    let mut ghost_wait = Box::pin(async move { ghost.lock().await });
    let ghost_queue = [ghost_owner.as_str()];
    tokio::select! {
        _ = &mut ghost_wait => panic!("the lock is held"),
        queued = queue_becomes(&server, "ghost", &ghost_queue) => assert!(queued),
    }
    std::mem::forget(ghost_wait);

    let behind = b.fair_lock("ghost").waiter_timeout(timeout);
    let behind_owner = behind.owner_id().to_owned();
    let waiter = tokio::spawn(async move { behind.lock().await.unwrap() });
    assert!(queue_becomes(&server, "ghost", &[&ghost_owner, &behind_owner]).await);

    // The holder leaves; the release wakes the ghost, which never comes. Its entry goes stale
    // by the server clock and the waiter behind it takes the lock: nobody else has to act.
    guard.unlock().await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(30), waiter)
        .await
        .expect("the queue did not get stuck behind the ghost")
        .unwrap();
    assert!(queue(&mut conn, "ghost").await.is_empty());
    let fields: std::collections::HashMap<String, u64> = conn.hgetall("ghost").await.unwrap();
    assert_eq!(
        fields.keys().collect::<Vec<_>>(),
        vec![&behind_owner],
        "only the live waiter holds the lock"
    );
    got.unlock().await.unwrap();
}

/// Without `waiter_timeout`, a queued waiter's place is kept for DEFAULT_WAITER_TIMEOUT (30 s)
/// after its last attempt: its deadline in Redis is at most that far past the server clock,
/// and more than the 2 s a live waiter may park between attempts.
#[tokio::test]
async fn a_waiter_place_lasts_the_default_waiter_timeout() {
    assert_eq!(latchkey::DEFAULT_WAITER_TIMEOUT, Duration::from_secs(30));
    let server = RedisServer::spawn();
    let a = client(&server).await;
    let b = client(&server).await;
    let mut conn = server.conn().await;
    let guard = a.fair_lock("default-timeout").lock().await.unwrap();
    let waiter = b.fair_lock("default-timeout");
    let owner = waiter.owner_id().to_owned();
    let task = tokio::spawn(async move { waiter.lock().await.unwrap().unlock().await });
    assert!(queue_becomes(&server, "default-timeout", &[&owner]).await);
    let deadline: u64 = conn
        .zscore(deadlines_key("default-timeout"), &owner)
        .await
        .unwrap();
    let left = deadline.saturating_sub(server_ms(&mut conn).await);
    assert!(
        left > 2_000 && left <= 30_000,
        "the waiter's place lasts {left} ms, not the 30 s default"
    );
    let ttl: i64 = conn.pttl(queue_key("default-timeout")).await.unwrap();
    assert!(
        ttl > 2_000 && ttl <= 30_000,
        "the queue expires in {ttl} ms"
    );
    guard.unlock().await.unwrap();
    task.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_dead_entry_at_the_head_cannot_block_a_free_lock() {
    let server = RedisServer::spawn();
    let a = client(&server).await;
    let mut conn = server.conn().await;
    let lock = a.fair_lock("dead-head");

    // A live entry of somebody else (a Java client, say) is ahead: even a free lock is not
    // taken out of turn.
    let now = server_ms(&mut conn).await;
    let _: () = conn
        .rpush(queue_key("dead-head"), "java-uuid:1")
        .await
        .unwrap();
    let _: () = conn
        .zadd(deadlines_key("dead-head"), "java-uuid:1", now + 60_000)
        .await
        .unwrap();
    assert!(lock.try_lock(Duration::ZERO).await.unwrap().is_none());
    assert_eq!(
        lock.queue().await.unwrap(),
        vec!["java-uuid:1"],
        "not queued"
    );

    // Once its deadline has passed (by the server clock) it is dropped, and the lock is free.
    let _: () = conn
        .zadd(deadlines_key("dead-head"), "java-uuid:1", now - 1)
        .await
        .unwrap();
    // An entry without any deadline at the head is dropped too.
    let _: () = conn
        .lpush(queue_key("dead-head"), "no-deadline:1")
        .await
        .unwrap();
    let guard = lock
        .try_lock(Duration::ZERO)
        .await
        .unwrap()
        .expect("stale entries do not count");
    assert!(lock.queue().await.unwrap().is_empty());
    let left: bool = conn.exists(deadlines_key("dead-head")).await.unwrap();
    assert!(!left);
    guard.unlock().await.unwrap();
}

#[tokio::test]
async fn a_waiter_that_gives_up_leaves_the_queue_at_once() {
    let server = RedisServer::spawn();
    let a = client(&server).await;
    let b = client(&server).await;
    let c = client(&server).await;
    let mut conn = server.conn().await;
    let guard = a.fair_lock("give-up").lock().await.unwrap();

    let started = Instant::now();
    let gave_up = b
        .fair_lock("give-up")
        .try_lock(Duration::from_millis(300))
        .await
        .unwrap();
    assert!(gave_up.is_none());
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(
        queue_becomes(&server, "give-up", &[]).await,
        "b left at once, long before the 30 s waiter timeout"
    );
    let err = b
        .fair_lock("give-up")
        .lock_with(LockOptions::new().wait(Duration::from_millis(100)))
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::WaitTimedOut { .. }) && err.is_timeout(),
        "{err}"
    );
    assert!(queue_becomes(&server, "give-up", &[]).await);
    assert!(
        eventually(Duration::from_secs(5), || {
            let b = b.clone();
            async move { b.subscription_count() == 0 }
        })
        .await
    );

    // A waiter that queued after a quitter is served normally.
    let waiter = tokio::spawn({
        let lock = c.fair_lock("give-up");
        async move { lock.lock().await.unwrap() }
    });
    assert!(
        eventually(Duration::from_secs(5), || {
            let mut conn = conn.clone();
            async move { queue(&mut conn, "give-up").await.len() == 1 }
        })
        .await
    );
    guard.unlock().await.unwrap();
    let got = waiter.await.unwrap();
    got.unlock().await.unwrap();
    assert!(queue(&mut conn, "give-up").await.is_empty());
}

#[tokio::test]
async fn a_dropped_waiting_future_leaves_nothing_behind() {
    let server = RedisServer::spawn();
    let a = client(&server).await;
    let b = client(&server).await;
    let mut conn = server.conn().await;
    let guard = a.fair_lock("cancel").lock().await.unwrap();
    let lock_b = b.fair_lock("cancel");
    let channel = format!("redisson_lock__channel:{{cancel}}:{}", lock_b.owner_id());
    let waiting = tokio::time::timeout(Duration::from_millis(300), lock_b.lock()).await;
    assert!(waiting.is_err(), "still waiting when dropped");
    assert!(
        queue_becomes(&server, "cancel", &[]).await,
        "no queue entry"
    );
    guard.unlock().await.unwrap();
    assert!(!lock_b.is_locked().await.unwrap(), "no hold");
    assert_eq!(b.tracked_lock_count(), 0, "no renewal");
    assert!(
        eventually(Duration::from_secs(5), || {
            let b = b.clone();
            async move { b.subscription_count() == 0 }
        })
        .await,
        "no subscription"
    );
    assert!(
        eventually(Duration::from_secs(5), || {
            let mut conn = conn.clone();
            let channel = channel.clone();
            async move { numsub(&mut conn, &channel).await == 0 }
        })
        .await
    );
    let left: bool = conn.exists(deadlines_key("cancel")).await.unwrap();
    assert!(!left);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_at_any_point_never_strands_a_hold_or_a_queue_entry() {
    let server = RedisServer::spawn();
    let a = client(&server).await;
    let b = client(&server).await;
    let lock = a.fair_lock("cancel-race");
    let mut completed = 0;
    // Free lock: drops land before, during and after the acquire script.
    for step in 0..100u64 {
        if let Ok(guard) = tokio::time::timeout(Duration::from_micros(step * 10), lock.lock()).await
        {
            completed += 1;
            drop(guard.unwrap());
        }
    }
    // Held lock: drops land around the queueing script and the subscription.
    let held = b.fair_lock("cancel-race").lock().await.unwrap();
    for step in 0..100u64 {
        let waited = tokio::time::timeout(Duration::from_micros(step * 30), lock.lock()).await;
        assert!(waited.is_err(), "the lock is held");
    }
    held.unlock().await.unwrap();
    assert!(
        queue_becomes(&server, "cancel-race", &[]).await,
        "every queue entry was removed ({completed} completed)"
    );
    // With no holder and no queue, a try without waiting succeeds.
    let other = b.fair_lock("cancel-race");
    assert!(
        eventually(Duration::from_secs(10), || {
            let other = other.clone();
            async move {
                match other.try_lock(Duration::ZERO).await.unwrap() {
                    Some(g) => {
                        g.unlock().await.unwrap();
                        true
                    }
                    None => false,
                }
            }
        })
        .await,
        "every hold was released"
    );
    assert!(
        eventually(Duration::from_secs(5), || {
            let a = a.clone();
            async move { a.tracked_lock_count() == 0 }
        })
        .await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_exclusion_under_contention() {
    let server = RedisServer::spawn();
    const ROUNDS: u64 = 10;
    let mut tasks = Vec::new();
    for _ in 0..3 {
        let client = client(&server).await;
        for _ in 0..3 {
            let lock = client.fair_lock("counter-lock");
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
    assert_eq!(v, 9 * ROUNDS);
    let exists: bool = conn.exists("counter-lock").await.unwrap();
    assert!(!exists, "the lock key is gone after the last unlock");
    assert!(queue(&mut conn, "counter-lock").await.is_empty());
}

#[tokio::test]
async fn reentrant_with_tokens_shared_with_the_plain_lock() {
    let server = RedisServer::spawn();
    let a = client(&server).await;
    let mut conn = server.conn().await;
    let lock = a.fair_lock("shared-name");
    let first = lock.lock().await.unwrap();
    let second = lock.clone().lock().await.unwrap();
    assert_eq!(lock.hold_count().await.unwrap(), 2);
    assert_eq!(first.fencing_token(), second.fencing_token());
    let count: u64 = conn.hget("shared-name", lock.owner_id()).await.unwrap();
    assert_eq!(count, 2, "Redisson's hash layout");
    // The plain lock of the same name is the same hash: they exclude each other.
    assert!(a
        .lock("shared-name")
        .try_lock(Duration::ZERO)
        .await
        .unwrap()
        .is_none());
    second.unlock().await.unwrap();
    assert!(lock.is_locked().await.unwrap());
    let token = first.fencing_token();
    first.unlock().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());
    assert_eq!(a.tracked_lock_count(), 0);

    let plain = a.lock("shared-name").lock().await.unwrap();
    assert!(plain.fencing_token() > token, "one fencing counter");
    let token = plain.fencing_token();
    plain.unlock().await.unwrap();
    let again = lock.lock().await.unwrap();
    assert!(again.fencing_token() > token);
    again.unlock().await.unwrap();
}

#[tokio::test]
async fn watchdog_keeps_the_lock_and_lost_fires_when_it_is_forced_away() {
    let server = RedisServer::spawn();
    let a = client(&server).await; // watchdog timeout 1 s
    let b = client(&server).await;
    let lock = a.fair_lock("watched");
    let guard = lock.lock().await.unwrap();
    tokio::time::sleep(Duration::from_millis(3500)).await;
    assert!(!guard.is_lost());
    assert_eq!(lock.hold_count().await.unwrap(), 1);
    let left = lock.remaining_lease().await.unwrap().unwrap();
    assert!(left <= Duration::from_secs(1));
    assert!(b
        .fair_lock("watched")
        .try_lock(Duration::ZERO)
        .await
        .unwrap()
        .is_none());

    let lost = guard.lost();
    assert!(b.fair_lock("watched").force_unlock().await.unwrap());
    tokio::time::timeout(Duration::from_secs(10), lost)
        .await
        .expect("lost() fires once the lock is gone");
    assert!(guard.is_lost());
    assert!(guard.unlock().await.unwrap_err().is_not_owner());
    assert_eq!(a.tracked_lock_count(), 0);

    // A fixed lease is not renewed.
    let fixed = lock
        .lock_with(LockOptions::new().lease(Duration::from_millis(300)))
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(10), fixed.lost())
        .await
        .expect("a fixed lease runs out");
    assert!(fixed.unlock().await.unwrap_err().is_not_owner());
}

#[tokio::test]
async fn a_release_wakes_only_the_head_waiter_on_its_own_channel() {
    let server = RedisServer::spawn();
    let a = client(&server).await;
    let mut conn = server.conn().await;
    let guard = a.fair_lock("heads").lock().await.unwrap();
    // Two Java-style waiters (RedissonFairLock layout), live for a minute.
    let now = server_ms(&mut conn).await;
    for (i, owner) in ["java-uuid:1", "java-uuid:2"].iter().enumerate() {
        let _: () = conn.rpush(queue_key("heads"), owner).await.unwrap();
        let _: () = conn
            .zadd(deadlines_key("heads"), owner, now + 60_000 + i as u64)
            .await
            .unwrap();
    }
    let mut raw = server.client().get_async_pubsub().await.unwrap();
    for channel in [
        "redisson_lock__channel:{heads}:java-uuid:1",
        "redisson_lock__channel:{heads}:java-uuid:2",
        "redisson_lock__channel:{heads}",
        "end-marker",
    ] {
        raw.subscribe(channel).await.unwrap();
    }
    guard.unlock().await.unwrap();
    let _: () = conn.publish("end-marker", "end").await.unwrap();
    let mut stream = raw.on_message();
    let mut got = Vec::new();
    loop {
        let msg = stream.next().await.unwrap();
        let channel = msg.get_channel_name().to_owned();
        if channel == "end-marker" {
            break;
        }
        got.push((channel, msg.get_payload::<String>().unwrap()));
    }
    assert_eq!(
        got,
        vec![(
            "redisson_lock__channel:{heads}:java-uuid:1".to_owned(),
            "0".to_owned()
        )],
        "only the head was told, with Redisson's unlock message"
    );
    // The head has not taken the lock yet: a newcomer still waits its turn.
    assert!(a
        .fair_lock("heads")
        .try_lock(Duration::ZERO)
        .await
        .unwrap()
        .is_none());
}

#[tokio::test]
async fn bad_input_is_rejected_and_changes_nothing() {
    let server = RedisServer::spawn();
    let a = client(&server).await;
    let mut conn = server.conn().await;

    let err = a.fair_lock("").lock().await.unwrap_err();
    assert!(err.is_invalid_argument(), "{err}");
    for timeout in [Duration::from_millis(10), latchkey::MAX_LEASE * 2] {
        let err = a
            .fair_lock("bad-timeout")
            .waiter_timeout(timeout)
            .try_lock(Duration::ZERO)
            .await
            .unwrap_err();
        assert!(
            err.is_invalid_argument() && err.to_string().contains("waiter timeout"),
            "{err}"
        );
    }
    let err = a
        .fair_lock("bad-lease")
        .lock_with(LockOptions::new().lease(Duration::ZERO))
        .await
        .unwrap_err();
    assert!(err.is_invalid_argument(), "{err}");
    let err = a
        .fair_lock("bad-wait")
        .try_lock(Duration::MAX)
        .await
        .unwrap_err();
    assert!(err.is_invalid_argument(), "{err}");
    let keys: Vec<String> = conn.keys("*").await.unwrap();
    assert!(keys.is_empty(), "nothing was written: {keys:?}");

    // Keys of other types: typed error, nothing written.
    let _: () = conn.set("occupied", "precious").await.unwrap();
    let err = a.fair_lock("occupied").lock().await.unwrap_err();
    assert!(err.is_wrong_type(), "{err}");
    let err = a.fair_lock("occupied").force_unlock().await.unwrap_err();
    assert!(err.is_wrong_type(), "{err}");
    let v: String = conn.get("occupied").await.unwrap();
    assert_eq!(v, "precious");
    let _: () = conn.set(queue_key("queueless"), "x").await.unwrap();
    let err = a.fair_lock("queueless").lock().await.unwrap_err();
    assert!(err.is_wrong_type(), "{err}");
    let exists: bool = conn.exists("queueless").await.unwrap();
    assert!(!exists, "the lock was not taken");
}

#[test]
fn handles_and_guards_are_send_and_sync() {
    fn check<T: Send + Sync + 'static>() {}
    check::<latchkey::FairLock>();
    check::<latchkey::FairLockGuard>();
}

/// A rough measurement, not a check: `cargo test --release --test fair_lock -- --ignored
/// --nocapture`. Prints critical sections per second and wait percentiles for 8 contenders.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement; run by hand"]
async fn throughput_of_8_contenders() {
    let server = RedisServer::spawn();
    let run_for = Duration::from_secs(3);
    let mut tasks = Vec::new();
    let started = Instant::now();
    for i in 0..8 {
        let c = client(&server).await;
        tasks.push(tokio::spawn(async move {
            let lock = c.fair_lock("bench");
            let mut waits = Vec::new();
            while started.elapsed() < run_for {
                let asked = Instant::now();
                let guard = lock.lock().await.unwrap();
                waits.push(asked.elapsed());
                guard.unlock().await.unwrap();
            }
            let _ = i;
            waits
        }));
    }
    let mut waits = Vec::new();
    for t in tasks {
        waits.extend(t.await.unwrap());
    }
    let elapsed = started.elapsed();
    waits.sort();
    let pct = |p: f64| waits[((waits.len() - 1) as f64 * p) as usize];
    println!(
        "{} critical sections in {elapsed:?}: {:.0}/s; wait p50 {:?}, p99 {:?}",
        waits.len(),
        waits.len() as f64 / elapsed.as_secs_f64(),
        pct(0.5),
        pct(0.99)
    );
}
